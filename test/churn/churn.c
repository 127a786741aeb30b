/*
 * churn.c - many TCP communicators made and destroyed in a row, as a job
 * that re-forms its communicators would: each cycle, rank 0 makes a new
 * unique id and passes it over a long-lived communicator; every rank joins
 * a new communicator over TCP (RINGCC_SHM_DISABLE), checks one allreduce
 * exactly and destroys it. Every --every cycles rank 0 prints the cycles
 * done, the rate and the host's TCP sockets in TIME_WAIT
 * (/proc/net/tcp{,6}). Exit status 0 when every cycle worked, 1 when one
 * failed (its rank prints why), 2 on a usage error.
 *
 * `make churn-check` builds and runs it (10,000 cycles of 4 ranks): before
 * destroy left its connections in TIME_WAIT (issue 32), a few thousand
 * cycles a minute used up the ephemeral ports and every init failed with
 * "cannot listen on 127.0.0.1:0: Address already in use".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static long cycles = 10000, every = 1000;

/* Sockets in TIME_WAIT (state 06) in one /proc/net file. */
static long time_wait_in(const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  long n = 0;
  if (f == NULL)
    return 0;
  while (fgets(line, sizeof line, f) != NULL) {
    char st[8];
    if (sscanf(line, "%*s %*s %*s %7s", st) == 1 && strcmp(st, "06") == 0)
      n++;
  }
  fclose(f);
  return n;
}

static long time_wait(void) {
  return time_wait_in("/proc/net/tcp") + time_wait_in("/proc/net/tcp6");
}

static int one_cycle(h_ctx_t *ctx, long cycle) {
  ringcc_unique_id_t id;
  ringcc_result_t r = RINGCC_SUCCESS;
  if (ctx->rank == 0 && (r = ringcc_get_unique_id(&id)) != RINGCC_SUCCESS)
    memset(&id, 0, sizeof id); /* the others fail on it too, and say so */
  if (!h_ok(ctx, ringcc_bcast(&id, sizeof id, RINGCC_UINT8, 0, ctx->comm,
                              NULL), "the bcast of the id"))
    return 1;
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "cycle %ld: ringcc_get_unique_id: %s", cycle,
                  ringcc_comm_last_error(NULL));
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  cfg.timeout_ms = 60000;
  ringcc_comm_t comm = NULL;
  r = ringcc_comm_init(&comm, ctx->nranks, &id, ctx->rank, &cfg);
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "cycle %ld: init over TCP: %s (%ld sockets in "
                  "TIME_WAIT)", cycle, ringcc_comm_last_error(NULL),
                  time_wait());
  int64_t x = ctx->rank + cycle, sum = -1;
  r = ringcc_allreduce(&x, &sum, 1, RINGCC_INT64, RINGCC_SUM, comm, NULL);
  int64_t n = ctx->nranks, want = n * (n - 1) / 2 + n * cycle;
  int failed = r != RINGCC_SUCCESS || sum != want;
  if (failed)
    h_fail(ctx, "cycle %ld: allreduce gave %lld, expected %lld (%s): %s",
           cycle, (long long)sum, (long long)want, ringcc_strerror(r),
           ringcc_comm_last_error(comm));
  if (ringcc_comm_destroy(comm) != RINGCC_SUCCESS)
    return h_fail(ctx, "cycle %ld: destroy failed", cycle);
  return failed;
}

static int churn(h_ctx_t *ctx) {
  double t0 = h_now_s(), tlast = t0;
  for (long c = 0; c < cycles; c++) {
    if (one_cycle(ctx, c) != 0)
      return 1;
    if (ctx->rank == 0 && ((c + 1) % every == 0 || c + 1 == cycles)) {
      double now = h_now_s();
      printf("churn: %ld cycles in %.1f s (%.0f/s lately), %ld TCP sockets "
             "in TIME_WAIT\n", c + 1, now - t0,
             (double)every / (now - tlast), time_wait());
      fflush(stdout);
      tlast = now;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  int nranks = 4;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
      cycles = atol(argv[++i]);
    else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc)
      every = atol(argv[++i]);
    else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
      nranks = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: churn [-n CYCLES (10000)] [-e EVERY (1000)] "
                      "[-r RANKS (4)]\n");
      return 2;
    }
  }
  if (cycles < 1 || every < 1 || nranks < 2) {
    fprintf(stderr, "churn: -n, -e need 1 or more, -r 2 or more\n");
    return 2;
  }
  printf("churn: %ld init/destroy cycles of %d ranks over TCP, %ld TCP "
         "sockets in TIME_WAIT before\n", cycles, nranks, time_wait());
  fflush(stdout);
  h_run_opts_t o = {.nranks = nranks, .body = churn, .timeout_s = 1800,
                    .name = "churn"};
  bool ok = h_run(&o);
  printf("churn: %s\n", ok ? "every cycle worked" : "FAILED (see above)");
  return ok ? 0 : 1;
}
