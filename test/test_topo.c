/*
 * test_topo.c - ringcc-topo, as a user runs it: alone and under ringcc-run,
 * over shared memory and over TCP. On this machine (no GPU) it must say why
 * each rank has none, and list every rank, its NIC and each edge of the ring
 * and the tree with the transport that carries it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RINGCC_HAVE_CUDA
#define RINGCC_HAVE_CUDA 0
#endif

/* Runs a shell command (under timeout) and returns its output and status. */
static char *run(const char *cmd, int *status) {
  char *out = calloc(1, 1 << 16);
  size_t n = 0;
  cr_assert(out != NULL);
  FILE *p = popen(cmd, "r");
  cr_assert(p != NULL, "popen %s", cmd);
  while (n < (1 << 16) - 1) {
    size_t got = fread(out + n, 1, (1 << 16) - 1 - n, p);
    if (got == 0)
      break;
    n += got;
  }
  *status = pclose(p);
  return out;
}

static char *topo(const char *env, int np, int *status) {
  const char *bin = getenv("RINGCC_BIN_DIR");
  char cmd[1024];
  cr_assert(bin != NULL, "RINGCC_BIN_DIR is not set (run through make test)");
  if (np > 0)
    snprintf(cmd, sizeof(cmd), "env -u RINGCC_RANK -u RINGCC_NRANKS %s "
             "timeout 120 %s/ringcc-run -np %d %s/ringcc-topo 2>&1", env, bin,
             np, bin);
  else
    snprintf(cmd, sizeof(cmd), "env -u RINGCC_RANK -u RINGCC_NRANKS %s "
             "timeout 60 %s/ringcc-topo 2>&1", env, bin);
  return run(cmd, status);
}

Test(topo, alone_says_why_there_is_no_gpu, .timeout = 90) {
  int st;
  char *out = topo("-u RINGCC_CUDA_DEVICE", 0, &st);
  cr_expect_eq(st, 0, "exit status %d:\n%s", st, out);
  cr_expect(strstr(out, "1 rank on 1 host") != NULL, "%s", out);
  cr_expect(strstr(out, "none (") != NULL, "no reason for the missing GPU:\n%s",
            out);
  cr_expect(strstr(out, "bootstrap only") != NULL, "%s", out);
  free(out);
  out = topo("RINGCC_CUDA_DEVICE=none", 0, &st);
  cr_expect(strstr(out, RINGCC_HAVE_CUDA ? "none (RINGCC_CUDA_DEVICE=none)"
                                         : "none (this build has no CUDA "
                                           "support)") != NULL, "%s", out);
  free(out);
}

Test(topo, three_ranks_over_shared_memory, .timeout = 180) {
  int st;
  char *out = topo("RINGCC_CUDA_DEVICE=none", 3, &st);
  cr_expect_eq(st, 0, "exit status %d:\n%s", st, out);
  cr_expect(strstr(out, "3 ranks on 1 host") != NULL, "%s", out);
  for (int r = 0; r < 3; r++) {
    char line[64];
    snprintf(line, sizeof(line), "rank %d: NIC ", r);
    cr_expect(strstr(out, line) != NULL, "no line for rank %d:\n%s", r, out);
  }
  /* The ring 0 -> 1 -> 2 -> 0, and the tree's extra edge, over SHM. */
  cr_expect(strstr(out, "0 -> 1    ring+tree  SHM") != NULL, "%s", out);
  cr_expect(strstr(out, "1 -> 2    ring") != NULL, "%s", out);
  cr_expect(strstr(out, "2 -> 0    ring") != NULL, "%s", out);
  cr_expect(strstr(out, "tree") != NULL, "%s", out);
  cr_expect(strstr(out, "none (host-only communicator)") != NULL, "%s", out);
  free(out);
}

Test(topo, two_ranks_over_tcp_name_the_nic, .timeout = 180) {
  int st;
  char *out = topo("RINGCC_CUDA_DEVICE=none RINGCC_SHM_DISABLE=1", 2, &st);
  cr_expect_eq(st, 0, "exit status %d:\n%s", st, out);
  cr_expect(strstr(out, "NET/Socket/") != NULL, "%s", out);
  cr_expect(strstr(out, "for network edges") != NULL, "%s", out);
  free(out);
}
