/*
 * net_ib_errors.c - the second half of test_net_ib (linked into the same
 * program; test/test_net_ib.c has the first and the helpers both use,
 * declared in test/test_net_ib.h): the ib_fake error paths and device
 * choice, the suite ib_coll (real ranks over NET/IB on a real device), and
 * the library's own choices on the fake device. test/test_net_ib.c
 * describes the suites.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "clock.h"
#include "env.h"
#include "error.h"
#include "log.h"
#include "net.h"
#include "net_ib.h"
#include "socket.h"
#include "test_net_ib.h"

/* ==== error paths on the fake device ========================================= */

TestSuite(ib_fake);

/* A raw TCP connection to the listener of p, from a stranger. */
static int stranger_connect(const pair_t *p) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN];
  int fd;
  cr_assert_eq(rcc_socket_parse_host_port(p->addr, &a, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(rcc_socket_connect(&a, rcc_now_ns() + 5000000000LL, &fd, err,
                                  sizeof err), RINGCC_SUCCESS, "%s", err);
  return fd;
}

/* Raises the open-file limit to n, or skips the test. */
static void open_files_or_skip(rlim_t n) {
  struct rlimit rl = {.rlim_cur = n, .rlim_max = n};
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    cr_skip_test("cannot raise the open-file limit to %lu: %s",
                 (unsigned long)n, strerror(errno));
}

/* 600 strangers connect and stay silent (more than the 128 offers the
 * listener holds), then a real peer: it gets in at once, because the
 * oldest stranger goes when the listener is full, not the newcomer. */
Test(ib_fake, flood_of_strangers_then_a_real_peer, .timeout = 60) {
  enum { FLOOD = 600 };
  open_files_or_skip(4096);
  use_fake(NULL);
  pair_t p;
  char err[RCC_ERRLEN];
  uint8_t got[RCC_NET_HELLO_BYTES];
  int *fds = malloc(FLOOD * sizeof(int));
  cr_assert_not_null(fds);
  pair_listen(&p);
  for (int i = 0; i < FLOOD; i++) {
    fds[i] = stranger_connect(&p);
    if (i % 100 == 99) { /* the listener takes them as they come */
      void *none = NULL;
      (void)P.accept(p.listen, got, &none, rcc_now_ns() + 20000000LL, err,
                     sizeof err);
      cr_assert_null(none);
    }
  }
  double t0 = h_now_s();
  pair_connect(&p);
  double took = h_now_s() - t0;
  cr_expect_lt(took, 2.0, "the real peer needed %.2f s", took);
  int open_fds = 0;
  for (int i = 0; i < FLOOD; i++) {
    char c;
    ssize_t n = recv(fds[i], &c, 1, MSG_DONTWAIT);
    open_fds += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    close(fds[i]);
  }
  printf("flood: a real peer got in after %.3f s; %d of %d strangers' "
         "connections still held by the listener\n", took, open_fds, FLOOD);
  cr_expect_leq(open_fds, 128, "the listener holds %d strangers", open_fds);
  free(fds);
  pair_close(&p);
}

/* Issue 32, point 4, on the verbs plugin: a real peer's offer waits in the
 * kernel's queue among hundreds of strangers (silent, garbage, connect and
 * close), before it and after it, while the listener does not run accept()
 * (its rank busy elsewhere, or stopped): the listener gate reads each
 * connection when it takes it, so the strangers after the offer cannot push
 * it out; the connection comes up and carries a message exactly. */
Test(ib_fake, real_offer_amid_strangers_while_the_listener_is_busy,
     .timeout = 60) {
  enum { BEFORE = 60, AFTER = 450 };
  static const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  open_files_or_skip(4096);
  use_fake(NULL);
  pair_t p;
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "the real peer amid strangers";
  uint8_t got[RCC_NET_HELLO_BYTES];
  int *fds = malloc((BEFORE + AFTER) * sizeof(int));
  cr_assert_not_null(fds);
  pair_listen(&p);
  int64_t dl = rcc_now_ns() + (int64_t)(WAIT_S * 1e9);
  for (int i = 0; i < BEFORE + AFTER; i++) {
    if (i == BEFORE)
      cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send, dl, NULL, err,
                             sizeof err), RINGCC_SUCCESS, "connect: %s", err);
    fds[i] = stranger_connect(&p);
    if (i % 3 == 1)
      (void)send(fds[i], junk, sizeof junk, MSG_NOSIGNAL);
    if (i % 3 == 2) {
      close(fds[i]);
      fds[i] = -1;
    }
  }
  cr_assert_eq(P.accept(p.listen, got, &p.recv, dl, err, sizeof err),
               RINGCC_SUCCESS, "accept: %s", err);
  cr_assert_eq(memcmp(hello, got, sizeof hello), 0, "another hello came");
  cr_assert_eq(P.ready(p.send, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (send): %s", err);
  cr_assert_eq(P.ready(p.recv, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (receive): %s", err);
  pair_fifos(&p);
  one_message(&p, p.sfifo, 65537, p.rfifo, FIFO_BYTES, 5, 905);
  for (int i = 0; i < BEFORE + AFTER; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
  pair_close(&p);
}

/* A listener whose process has too few descriptors to hold 200 silent
 * strangers backs off, makes room, and still takes the real peer: accept()
 * fails only at its deadline, never with "Too many open files". */
Test(ib_fake, out_of_descriptors_backs_off, .timeout = 60) {
  use_fake(NULL);
  pair_t p;
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "a hello from the connector";
  pair_listen(&p);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) { /* the listener's process, with few descriptors */
    struct rlimit rl = {.rlim_cur = 64, .rlim_max = 64};
    uint8_t got[RCC_NET_HELLO_BYTES];
    void *rc = NULL;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      _exit(3);
    ringcc_result_t r = P.accept(p.listen, got, &rc,
                                 rcc_now_ns() + 15000000000LL, err,
                                 sizeof err);
    if (r != RINGCC_SUCCESS) {
      fprintf(stderr, "accept: %s\n", err);
      _exit(1);
    }
    _exit(memcmp(got, hello, sizeof got) == 0 ? 0 : 2);
  }
  int fds[200];
  for (int i = 0; i < 200; i++) /* silent strangers: far more than 64 */
    fds[i] = stranger_connect(&p);
  usleep(300000);
  cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send,
                         rcc_now_ns() + 15000000000LL, NULL, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the listener's process ended with status %d (1: accept failed, "
            "see above)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  for (int i = 0; i < 200; i++)
    close(fds[i]);
  pair_close(&p);
}

Test(ib_fake, retry_exceeded) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  use_fake("retry_exceeded");
  pair_open(&p);
  one_message(&p, p.sfifo, 100, p.rfifo, FIFO_BYTES, 1, 901); /* < 128 B */
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  void *sr = post_send(&p, p.sfifo, 4096, 2);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_NETWORK);
  snprintf(want, sizeof want,
           "NET/IB: RDMA write of a message to %s on fake0:1 failed: "
           "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR, status "
           "12, vendor error 0x81): the peer's NIC did not acknowledge within "
           "7 retries of 4295.0 ms: the peer process may have died, or the "
           "route between the hosts is broken (link, cable, switch)", p.addr);
  cr_assert_str_eq(err, want);
  (void)rr;
  pair_close(&p);
}

Test(ib_fake, retry_exceeded_peer_gone) {
  pair_t p;
  char err[RCC_ERRLEN];
  use_fake("retry_exceeded");
  setenv("RINGCC_IB_TIMEOUT", "14", 1);
  setenv("RINGCC_IB_RETRY_CNT", "3", 1);
  pair_open(&p);
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  (void)rr;
  /* The receiving process is gone: its side channel ends first. */
  P.close_recv(p.recv);
  p.recv = NULL;
  P.dereg_mr(NULL, p.rmh);
  p.rmh = NULL;
  usleep(100000);
  void *sr = post_send(&p, p.sfifo, 4096, 2);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"),
               RINGCC_ERR_PEER_FAILED, "%s", err);
  const char *tail = "the peer's NIC did not acknowledge within 3 retries of "
                     "67.1 ms: the peer process may have died, or the route "
                     "between the hosts is broken (link, cable, switch); its "
                     "side channel has ended too: the peer is gone";
  cr_assert(strstr(err, tail) != NULL, "%s", err);
  pair_close(&p);
}

Test(ib_fake, memlock_fifo) {
  pair_t p;
  char err[RCC_ERRLEN];
  void *mh;
  use_fake("memlock");
  struct rlimit rl = {65536, 65536};
  pair_listen(&p);
  pair_connect(&p);
  cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
  char *fifo;
  cr_assert_eq(posix_memalign((void **)&fifo, 4096, 4 << 20), 0);
  cr_assert_eq(P.reg_mr(p.recv, fifo, 4 << 20, &mh, err, sizeof err),
               RINGCC_ERR_SYSTEM);
  cr_assert_str_eq(err, "NET/IB: registering 4194304 bytes (4.0 MiB) of a "
                        "FIFO with fake0 failed: Cannot allocate memory; the "
                        "locked-memory limit of this process is 65536 bytes "
                        "(64.0 KiB, ulimit -l 64): raise it (ulimit -l "
                        "unlimited, memlock in /etc/security/limits.conf, or "
                        "docker run --ulimit memlock=-1)");
  free(fifo);
  pair_close(&p);
}

Test(ib_fake, memlock_user_buffer) {
  pair_t p;
  char err[RCC_ERRLEN];
  use_fake(NULL);
  pair_open(&p);
  setenv("FAKE_IBV_FAULT", "memlock", 1);
  struct rlimit rl = {1 << 20, 1 << 20};
  cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
  char *user = malloc(2 << 20);
  cr_assert_not_null(user);
  void *req = NULL;
  cr_assert_eq(P.isend(p.send, user + 4096, SLOT, 1, p.smh, &req, err,
                       sizeof err), RINGCC_ERR_SYSTEM);
  cr_assert_str_eq(err, "NET/IB: registering 65536 bytes (64.0 KiB) of a "
                        "user buffer with fake0 failed: Cannot allocate "
                        "memory; the locked-memory limit of this process is "
                        "1048576 bytes (1.0 MiB, ulimit -l 1024): raise it "
                        "(ulimit -l unlimited, memlock in "
                        "/etc/security/limits.conf, or docker run --ulimit "
                        "memlock=-1)");
  free(user);
  pair_close(&p);
}

static void rtr_timeout(const char *hint) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = {0}, got[RCC_NET_HELLO_BYTES];
  pair_listen(&p);
  int64_t dl = rcc_now_ns() + 10000000000LL;
  cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send, dl, NULL, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(P.accept(p.listen, got, &p.recv, dl, err, sizeof err),
               RINGCC_ERR_NETWORK);
  char pre[100]; /* the fake's second queue pair in this process */
  snprintf(pre, sizeof pre, "NET/IB: moving queue pair 0x%x of the "
           "connection from ", 0x101u + ((unsigned)(getpid() % 4096) << 12));
  char post[600];
  snprintf(post, sizeof post, " on fake0:1 to RTR (ready to receive) failed: "
           "Connection timed out%s", hint);
  cr_assert(strncmp(err, pre, strlen(pre)) == 0 &&
                strcmp(err + strlen(err) - strlen(post), post) == 0,
            "%s", err);
  /* The connector hears that setup ended on the other side. */
  cr_assert_eq(P.ready(p.send, dl, err, sizeof err), RINGCC_ERR_PEER_FAILED);
  snprintf(want, sizeof want, "NET/IB: the connection to %s ended during "
           "setup (end of stream): the peer failed to set up its side or "
           "exited", p.addr);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

Test(ib_fake, modify_qp_timeout) {
  use_fake("rtr_timeout");
  rtr_timeout(" (InfiniBand: the peer's LID is 1; is a subnet manager "
              "running?)");
}

Test(ib_fake, modify_qp_timeout_roce) {
  use_fake("rtr_timeout");
  setenv("FAKE_IBV_LINK", "eth", 1);
  rtr_timeout(" (RoCE: the peer's GID ::ffff:10.0.0.1 cannot be reached from "
              "GID index 3 (::ffff:10.0.0.1) of this port: check "
              "RINGCC_IB_GID_INDEX on both hosts and that their RoCE "
              "interfaces are up and route to each other)");
}

Test(ib_fake, fatal_async_event) {
  pair_t p;
  char err[RCC_ERRLEN];
  const char *want = "NET/IB: device fake0 reported a fatal error "
                     "(IBV_EVENT_DEVICE_FATAL, local catastrophic error): "
                     "every connection through it has failed; the NIC needs "
                     "a reset or its driver reloaded";
  use_fake("fatal");
  pair_open(&p);
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  void *sr = post_send(&p, p.sfifo, 4096, 1);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_NETWORK);
  cr_assert_str_eq(err, want);
  cr_assert_eq(wait_fail(rr, err, sizeof err, "receive"), RINGCC_ERR_NETWORK);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

Test(ib_fake, qp_async_event) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  use_fake("qp_fatal");
  pair_open(&p);
  post_recv(&p, p.rfifo, FIFO_BYTES);
  void *sr = post_send(&p, p.sfifo, 4096, 1);
  /* Readiness reported as the proxy does: the event fd wakes it. */
  int fds[8], n = P.fds(p.send, fds, 8);
  for (int i = 0; i < n; i++)
    P.readable(p.send, fds[i]);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_NETWORK);
  snprintf(want, sizeof want, "NET/IB: a queue pair of the connection to %s "
           "on fake0:1 reported IBV_EVENT_QP_FATAL (queue pair in error "
           "state)", p.addr);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

static ringcc_result_t init_err(char *err, size_t len) {
  return P.init(NULL, err, len);
}

Test(ib_fake, port_down) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("FAKE_IBV_PORT_STATE", "down", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: no ACTIVE port to use; found: fake0:1 "
                        "(InfiniBand, port DOWN)");
}

Test(ib_fake, no_device) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("FAKE_IBV_DEVICES", "", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: no RDMA device (no driver loaded, or no "
                        "/dev/infiniband in this container?)");
}

Test(ib_fake, no_library) {
  char err[RCC_ERRLEN];
  unset_ib_env();
  setenv("RINGCC_IBVERBS_LIB", "/nonexistent/libibverbs.so.1", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: cannot load /nonexistent/libibverbs.so.1 "
                        "(RINGCC_IBVERBS_LIB): /nonexistent/libibverbs.so.1: "
                        "cannot open shared object file: No such file or "
                        "directory");
}

Test(ib_fake, bad_setting) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("RINGCC_IB_TIMEOUT", "40", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: RINGCC_IB_TIMEOUT=\"40\" is not a number in "
                        "1..31");
}

/* Integers are decimal digits only, as every variable's (env.h): no sign,
 * no spaces. */
Test(ib_fake, bad_setting_not_decimal) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("RINGCC_IB_TIMEOUT", "+20", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: RINGCC_IB_TIMEOUT=\"+20\" is not a number in "
                        "1..31");
}

Test(ib_fake, hca_matches_nothing) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("RINGCC_IB_HCA", "mlx5", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: no ACTIVE port to use with "
                        "RINGCC_IB_HCA=mlx5; found: fake0:1 (left out by "
                        "RINGCC_IB_HCA)");
}

static void choose(const char *devices, const char *spec, int local_rank,
                   int local_size, const char *want) {
  use_fake(NULL);
  setenv("FAKE_IBV_DEVICES", devices, 1);
  if (spec)
    setenv("RINGCC_IB_HCA", spec, 1);
  struct rcc_net_locality where = {local_rank, local_size, ""};
  P.locate(&where);
  init_ok();
  cr_assert_str_eq(P.device(), want);
}

Test(ib_fake, hca_exact) { choose("mlx5_0,mlx5_1,mlx5_11", "=mlx5_1", 0, 1, "mlx5_1:1"); }
Test(ib_fake, hca_prefix_spread) { choose("mlx5_0,mlx5_1,mlx5_11", "mlx5_1", 1, 2, "mlx5_11:1"); }
Test(ib_fake, hca_exclude) { choose("mlx5_0,mlx5_1", "^mlx5_0", 0, 4, "mlx5_1:1"); }
Test(ib_fake, spread_local_ranks) { choose("mlx5_0,mlx5_1", NULL, 3, 4, "mlx5_1:1"); }

/* Runs init with RINGCC_DEBUG=INFO and returns what it logged. */
static char *init_log(ringcc_result_t *r, char *err, size_t errlen) {
  static char text[8192];
  char path[] = "/tmp/test_net_ib_XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  cr_assert(fd >= 0 && saved >= 0);
  unlink(path);
  setenv("RINGCC_DEBUG", "INFO", 1);
  fflush(stderr);
  dup2(fd, 2);
  *r = P.init(NULL, err, errlen);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  text[n > 0 ? n : 0] = '\0';
  return text;
}

Test(ib_fake, roce_gid_logged) {
  char err[RCC_ERRLEN];
  ringcc_result_t r;
  use_fake(NULL);
  setenv("FAKE_IBV_LINK", "eth", 1);
  char *log = init_log(&r, err, sizeof err);
  cr_assert_eq(r, RINGCC_SUCCESS, "%s", err);
  cr_assert(strstr(log, "NET/IB: using fake0:1 (RoCE), the only one; LID 0, "
                        "MTU 2048; GID index 3 (::ffff:10.0.0.1, RoCE v2, "
                        "IPv4-mapped, chosen automatically)") != NULL,
            "%s", log);
}

Test(ib_fake, roce_gid_forced_empty) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("FAKE_IBV_LINK", "eth", 1);
  setenv("RINGCC_IB_GID_INDEX", "6", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: fake0:1: RINGCC_IB_GID_INDEX=6 is not a GID "
                        "of this port; its GIDs: 0 (fe80::1, RoCE v1), 1 "
                        "(fe80::1, RoCE v2), 2 (::ffff:10.0.0.1, RoCE v1), 3 "
                        "(::ffff:10.0.0.1, RoCE v2)");
}

Test(ib_fake, gdr_without_gpu) {
  char why[300];
  use_fake(NULL);
  init_ok();
  cr_assert_eq(P.gdr("0000:17:00.0", why, sizeof why), 0);
  cr_assert_str_eq(why, "fake0:1 is SYS from GPU 0000:17:00.0 (it has no "
                        "PCI path: a software NIC?), beyond "
                        "RINGCC_NET_GDR_LEVEL PXB");
}

Test(ib_fake, gdr_disabled) {
  char why[300];
  use_fake(NULL);
  setenv("RINGCC_NET_GDR_DISABLE", "1", 1);
  init_ok();
  cr_assert_eq(P.gdr("0000:17:00.0", why, sizeof why), 0);
  cr_assert_str_eq(why, "RINGCC_NET_GDR_DISABLE=1");
}

/* ==== collectives over NET/IB on a real device ================================ */

/* An ACTIVE port in sysfs (without opening the device: the ranks are forked
 * and must each open it themselves). */
static bool rdma_port_active(void) {
  glob_t g;
  bool active = false;
  if (glob("/sys/class/infiniband/*/ports/*/state", 0, NULL, &g) != 0)
    return false;
  for (size_t i = 0; i < g.gl_pathc && !active; i++) {
    char buf[64] = "";
    FILE *f = fopen(g.gl_pathv[i], "r");
    if (f != NULL) {
      active = fgets(buf, sizeof buf, f) != NULL && strstr(buf, "ACTIVE");
      fclose(f);
    }
  }
  globfree(&g);
  return active;
}

static void coll_env(void) {
  if (!rdma_port_active())
    cr_skip_test("no ACTIVE RDMA port here (make ib-check runs this on "
                 "Soft-RoCE in a VM)");
  unset_ib_env();
  setenv("RINGCC_NET", "IB", 1);
  setenv("RINGCC_SHM_DISABLE", "1", 1);
}

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_REDUCE, C_ALLGATHER, C_BCAST,
       C_ALLTOALL, C_SENDRECV, C_BARRIER, C_NUM };
static const char *const coll_names[C_NUM] = {
    "allreduce", "reduce_scatter", "reduce", "allgather",
    "bcast",     "alltoall",       "sendrecv", "barrier"};
static const size_t coll_counts[] = {0, 1, 1031, 70001};
#define MAX_COUNT 70001
#define MAX_N 4

typedef struct {
  char *s, *r, *e;
} bufs_t;

static bool ok(h_ctx_t *ctx, ringcc_result_t r, const char *what) {
  return h_ok(ctx, r, what);
}

/* One call of coll, checked element by element; 0 or 1. */
static int run_case(h_ctx_t *ctx, bufs_t *b, int coll, ringcc_datatype_t dt,
                    ringcc_op_t op, size_t count) {
  ringcc_comm_t comm = ctx->comm;
  int n = ctx->nranks, me = ctx->rank;
  size_t es = h_dt_size(dt);
  uint64_t salt = h_hash3((uint64_t)coll, (uint64_t)dt * 8 + (uint64_t)op,
                          count);
  int root = (int)(salt % (uint64_t)n);
  char what[160];
  snprintf(what, sizeof what, "%s %s %s count %zu", coll_names[coll],
           h_dt_name(dt), h_op_name(op), count);
  memset(b->r, 0xee, (size_t)MAX_COUNT * MAX_N * 8);
  switch (coll) {
  case C_ALLREDUCE:
    h_fill_input(dt, op, me, 0, salt, b->s, count);
    if (!ok(ctx, ringcc_allreduce(b->s, b->r, count, dt, op, comm, NULL), what))
      return 1;
    h_fill_expected(dt, op, n, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_REDUCE_SCATTER:
    h_fill_input(dt, op, me, 0, salt, b->s, count * (size_t)n);
    if (!ok(ctx, ringcc_reduce_scatter(b->s, b->r, count, dt, op, comm, NULL),
            what))
      return 1;
    h_fill_expected(dt, op, n, (size_t)me * count, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_REDUCE:
    h_fill_input(dt, op, me, 0, salt, b->s, count);
    if (!ok(ctx, ringcc_reduce(b->s, b->r, count, dt, op, root, comm, NULL),
            what))
      return 1;
    if (me != root)
      return 0;
    h_fill_expected(dt, op, n, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_ALLGATHER:
    h_fill_pattern(dt, (uint64_t)me, 0, salt, b->s, count);
    if (!ok(ctx, ringcc_allgather(b->s, b->r, count, dt, comm, NULL), what))
      return 1;
    for (int j = 0; j < n; j++)
      h_fill_pattern(dt, (uint64_t)j, 0, salt, b->e + (size_t)j * count * es,
                     count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count * (size_t)n);
  case C_BCAST:
    if (me == root)
      h_fill_pattern(dt, (uint64_t)root, 0, salt, b->r, count);
    if (!ok(ctx, ringcc_bcast(b->r, count, dt, root, comm, NULL), what))
      return 1;
    h_fill_pattern(dt, (uint64_t)root, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_ALLTOALL:
    for (int j = 0; j < n; j++) {
      h_fill_pattern(dt, (uint64_t)(me * n + j), 0, salt,
                     b->s + (size_t)j * count * es, count);
      h_fill_pattern(dt, (uint64_t)(j * n + me), 0, salt,
                     b->e + (size_t)j * count * es, count);
    }
    if (!ok(ctx, ringcc_alltoall(b->s, b->r, count, dt, comm, NULL), what))
      return 1;
    return !h_check_elems(ctx, what, dt, b->r, b->e, count * (size_t)n);
  case C_SENDRECV: {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    h_fill_pattern(dt, (uint64_t)me, 0, salt, b->s, count);
    for (int step = 0; step < 2; step++)
      if ((step == 0) == (me % 2 == 0)) {
        if (!ok(ctx, ringcc_send(b->s, count, dt, next, comm, NULL), what))
          return 1;
      } else if (!ok(ctx, ringcc_recv(b->r, count, dt, prev, comm, NULL),
                     what)) {
        return 1;
      }
    h_fill_pattern(dt, (uint64_t)prev, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  }
  default:
    return !ok(ctx, ringcc_barrier(comm, NULL), what);
  }
}

static int matrix_body(h_ctx_t *ctx) {
  bufs_t b;
  size_t bytes = (size_t)MAX_COUNT * MAX_N * 8;
  b.s = malloc(bytes);
  b.r = malloc(bytes);
  b.e = malloc(bytes);
  if (!b.s || !b.r || !b.e)
    return h_fail(ctx, "out of memory");
  int bad = 0, calls = 0;
  double t0 = h_now_s();
  /* The datatypes before float8: the transport moves bytes alike, and
   * float8's arithmetic is test_collectives' (float8/n1..n4); the VM's run
   * keeps its time. */
  for (int coll = 0; coll < C_NUM && !bad; coll++)
    for (int d = 0; d < RINGCC_FLOAT8_E4M3 && !bad; d++)
      for (int o = 0; o < RINGCC_NUM_OPS && !bad; o++) {
        int reduces = coll <= C_REDUCE;
        if ((!reduces && o > 0) || (coll == C_BARRIER && d > 0))
          continue;
        for (size_t k = 0; k < sizeof coll_counts / sizeof *coll_counts && !bad;
             k++, calls++)
          bad = run_case(ctx, &b, coll, h_all_dtypes[d], h_all_ops[o],
                         coll_counts[k]);
      }
  if (ctx->rank == 0 && !bad)
    fprintf(stderr, "ib_coll: n = %d, %d calls checked in %.1f s\n",
            ctx->nranks, calls, h_now_s() - t0);
  free(b.s);
  free(b.r);
  free(b.e);
  return bad;
}

static void matrix(int n) {
  coll_env();
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.net_chunk_bytes = 16384; /* 70001 float32 are 17 slots */
  cfg.nslots = 4;
  h_run_opts_t o = {.nranks = n, .body = matrix_body, .config = &cfg,
                    .timeout_s = 1500, .name = "ib_coll matrix"};
  cr_assert(h_run(&o), "every collective x datatype x op over NET/IB at "
            "n = %d", n);
}

TestSuite(ib_coll);
Test(ib_coll, matrix_n2, .timeout = 1600) { matrix(2); }
Test(ib_coll, matrix_n3, .timeout = 1600) { matrix(3); }
Test(ib_coll, matrix_n4, .timeout = 1600) { matrix(4); }

/* Large calls with the default slots: sends from and receives into the
 * user's buffers, through the registration cache. */
static int zero_copy_body(h_ctx_t *ctx) {
  size_t count = 1 << 19; /* 2 MiB of float32 */
  float *s = malloc(count * 4), *r = malloc(count * 4 * MAX_N);
  float *e = malloc(count * 4 * MAX_N);
  if (!s || !r || !e)
    return h_fail(ctx, "out of memory");
  for (int it = 0; it < 4; it++) {
    uint64_t salt = 77 + (uint64_t)it;
    h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, ctx->rank, 0, salt, s, count);
    if (!h_ok(ctx, ringcc_allreduce(s, r, count, RINGCC_FLOAT32, RINGCC_SUM,
                                    ctx->comm, NULL), "allreduce"))
      return 1;
    h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, ctx->nranks, 0, salt, e, count);
    if (!h_check_elems(ctx, "allreduce", RINGCC_FLOAT32, r, e, count))
      return 1;
    h_fill_pattern(RINGCC_FLOAT32, (uint64_t)ctx->rank, 0, salt, s, count);
    if (!h_ok(ctx, ringcc_allgather(s, r, count, RINGCC_FLOAT32, ctx->comm,
                                    NULL), "allgather"))
      return 1;
    for (int j = 0; j < ctx->nranks; j++)
      h_fill_pattern(RINGCC_FLOAT32, (uint64_t)j, 0, salt, e + (size_t)j * count,
                     count);
    if (!h_check_elems(ctx, "allgather", RINGCC_FLOAT32, r, e,
                       count * (size_t)ctx->nranks))
      return 1;
  }
  struct rcc_ib_cache_stats st;
  rcc_net_ib_cache_stats(&st);
  fprintf(stderr, "ib_coll zero copy: rank %d: registrations %llu made, "
          "%llu reused, %llu outdated, %llu evicted; %llu receives landed in "
          "the user's buffer\n", ctx->rank, (unsigned long long)st.misses,
          (unsigned long long)st.hits, (unsigned long long)st.stale,
          (unsigned long long)st.evictions, (unsigned long long)st.landed);
  if (st.hits == 0)
    return h_fail(ctx, "no registration of a user buffer was reused");
  if (st.landed == 0)
    return h_fail(ctx, "no receive landed in the user's buffer");
  free(s);
  free(r);
  free(e);
  return 0;
}

Test(ib_coll, zero_copy, .timeout = 600) {
  coll_env();
  setenv("RINGCC_NET_ZEROCOPY", "1", 1);
  h_run_opts_t o = {.nranks = 3, .body = zero_copy_body, .timeout_s = 500,
                    .name = "ib_coll zero copy"};
  cr_assert(h_run(&o));
}

/* ---- a rank killed with SIGKILL in the middle of a stream of calls --------- */

typedef struct {
  int code[MAX_N];
  char message[MAX_N][RCC_ERRLEN];
  double failed_at[MAX_N];
  double killed_at;
  int calls[MAX_N];
  ringcc_unique_id_t id;
  int id_ready;
} kill_area_t;

static void *suicide(void *arg) {
  kill_area_t *a = arg;
  usleep(2000 + (useconds_t)(h_mix64((uint64_t)getpid()) % 20000));
  a->killed_at = h_now_s();
  raise(SIGKILL);
  return NULL;
}

static void kill_rank_main(kill_area_t *a, int rank, int n, int victim) {
  ringcc_comm_t comm;
  while (!__atomic_load_n(&a->id_ready, __ATOMIC_ACQUIRE))
    usleep(1000);
  if (ringcc_comm_init(&comm, n, &a->id, rank, NULL) != RINGCC_SUCCESS)
    _exit(2);
  size_t count = 1 << 16;
  float *s = calloc(count, 4), *r = calloc(count, 4);
  for (int it = 0; it < 100000; it++) {
    if (rank == victim && it == 20) {
      pthread_t t;
      pthread_create(&t, NULL, suicide, a); /* dies inside the next call */
    }
    ringcc_result_t res = ringcc_allreduce(s, r, count, RINGCC_FLOAT32,
                                           RINGCC_SUM, comm, NULL);
    a->calls[rank] = it + 1;
    if (res != RINGCC_SUCCESS) {
      a->failed_at[rank] = h_now_s();
      a->code[rank] = res;
      snprintf(a->message[rank], RCC_ERRLEN, "%s",
               ringcc_comm_last_error(comm));
      ringcc_comm_destroy(comm);
      _exit(0);
    }
  }
  _exit(3); /* never noticed */
}

static void kill_one(int n) {
  coll_env();
  kill_area_t *a = h_shared_alloc(sizeof *a);
  pid_t pid[MAX_N];
  int victim = n - 1, status[MAX_N];
  for (int r = 0; r < n; r++)
    if ((pid[r] = fork()) == 0)
      kill_rank_main(a, r, n, victim);
  cr_assert_eq(ringcc_get_unique_id(&a->id), RINGCC_SUCCESS);
  __atomic_store_n(&a->id_ready, 1, __ATOMIC_RELEASE);
  double until = h_now_s() + 120;
  for (int r = 0; r < n; r++) {
    while (waitpid(pid[r], &status[r], WNOHANG) == 0) {
      if (h_now_s() > until) {
        for (int k = 0; k < n; k++)
          kill(pid[k], SIGKILL);
        cr_assert_fail("n = %d: ranks still running 120 s after the start "
                       "(rank %d at call %d)", n, r, a->calls[r]);
      }
      usleep(10000);
    }
  }
  cr_assert(WIFSIGNALED(status[victim]) && WTERMSIG(status[victim]) == SIGKILL,
            "the victim was not killed (status 0x%x, %d calls)",
            status[victim], a->calls[victim]);
  char name[32];
  snprintf(name, sizeof name, "rank %d", victim);
  for (int r = 0; r < n; r++) {
    if (r == victim)
      continue;
    cr_assert(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0,
              "survivor rank %d: status 0x%x", r, status[r]);
    cr_assert_eq(a->code[r], RINGCC_ERR_PEER_FAILED, "survivor rank %d: %s",
                 r, a->message[r]);
    cr_assert(strstr(a->message[r], name) != NULL, "survivor rank %d does "
              "not name %s: %s", r, name, a->message[r]);
    double delay = a->failed_at[r] - a->killed_at;
    cr_assert(delay < 10, "survivor rank %d took %.1f s", r, delay);
    fprintf(stderr, "ib_coll kill n = %d: rank %d failed %.3f s after the "
            "kill: %s\n", n, r, delay, a->message[r]);
  }
  h_shared_free(a, sizeof *a);
}

Test(ib_coll, sigkill_n3, .timeout = 200) { kill_one(3); }
Test(ib_coll, sigkill_n4, .timeout = 200) { kill_one(4); }

/* ==== the plugin under the core, on the fake device =========================== */

/* What rank r's init and first allreduce said, for the parent to check;
 * done[r] once rank r has said it. */
typedef struct {
  int init_code[2], call_code[2], done[2];
  char message[2][RCC_ERRLEN];
} lib_area_t;

/* Rank r has recorded its result: it waits (30 s at most) for the other
 * rank's before it leaves, so that a failing call is judged while its peer
 * still lives (a peer that has already exited is a dead peer, not a broken
 * link, and the call would rightly say RINGCC_ERR_PEER_FAILED). */
static void lib_done(lib_area_t *a, int rank) {
  __atomic_store_n(&a->done[rank], 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 30000; i++) {
    if (__atomic_load_n(&a->done[1 - rank], __ATOMIC_ACQUIRE))
      return;
    usleep(1000);
  }
}

static int lib_body(h_ctx_t *ctx) {
  lib_area_t *a = ctx->arg;
  ringcc_comm_t comm;
  ringcc_result_t r = ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank,
                                       NULL);
  a->init_code[ctx->rank] = r;
  if (r != RINGCC_SUCCESS) {
    snprintf(a->message[ctx->rank], RCC_ERRLEN, "%s",
             ringcc_comm_last_error(NULL));
    __atomic_store_n(&a->done[ctx->rank], 1, __ATOMIC_RELEASE);
    return 0;
  }
  float x[1024] = {0}, y[1024];
  r = ringcc_allreduce(x, y, 1024, RINGCC_FLOAT32, RINGCC_SUM, comm, NULL);
  a->call_code[ctx->rank] = r;
  snprintf(a->message[ctx->rank], RCC_ERRLEN, "%s",
           r == RINGCC_SUCCESS ? "" : ringcc_comm_last_error(comm));
  lib_done(a, ctx->rank);
  ringcc_comm_destroy(comm);
  return 0;
}

static lib_area_t *lib_run(void) {
  lib_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  setenv("RINGCC_SHM_DISABLE", "1", 1);
  setenv("RINGCC_TIMEOUT_MS", "20000", 1);
  h_run_opts_t o = {.nranks = 2, .body = lib_body, .arg = a,
                    .skip_init = true, .timeout_s = 60, .name = "lib"};
  cr_assert(h_run(&o));
  return a;
}

/* A completion with IBV_WC_RETRY_EXC_ERR under a collective: the call fails
 * with RINGCC_ERR_NETWORK, naming the ranks, the host, the device and the
 * status in words. */
Test(ib_fake, library_retry_exceeded, .timeout = 90) {
  char host[256];
  use_fake("retry_exceeded");
  setenv("RINGCC_NET", "IB", 1);
  cr_assert_eq(gethostname(host, sizeof host), 0);
  lib_area_t *a = lib_run();
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a->init_code[r], RINGCC_SUCCESS, "rank %d: %s", r,
                 a->message[r]);
    cr_assert_eq(a->call_code[r], RINGCC_ERR_NETWORK, "rank %d: %d: %s", r,
                 a->call_code[r], a->message[r]);
    char ranks[400], where[300], peer[32];
    snprintf(ranks, sizeof ranks, "(host %s, which holds ranks 0, 1): "
             "NET/IB: RDMA write of ", host);
    snprintf(peer, sizeof peer, "rank %d", 1 - r);
    snprintf(where, sizeof where, "on fake0:1 failed: transport retry "
             "counter exceeded (IBV_WC_RETRY_EXC_ERR, status 12, vendor "
             "error 0x81)");
    cr_assert(strstr(a->message[r], ranks) && strstr(a->message[r], where) &&
                  strstr(a->message[r], peer),
              "rank %d: %s", r, a->message[r]);
    fprintf(stderr, "library_retry_exceeded: rank %d: %s\n", r,
            a->message[r]);
  }
  h_shared_free(a, sizeof *a);
}

Test(ib_fake, library_forced_ib_without_port, .timeout = 90) {
  use_fake(NULL);
  setenv("FAKE_IBV_PORT_STATE", "down", 1);
  setenv("RINGCC_NET", "ib", 1);
  lib_area_t *a = lib_run();
  for (int r = 0; r < 2; r++) {
    char want[300];
    snprintf(want, sizeof want, "net on rank %d: RINGCC_NET=ib, but: NET/IB: "
             "no ACTIVE port to use; found: fake0:1 (InfiniBand, port DOWN)",
             r);
    cr_assert_eq(a->init_code[r], RINGCC_ERR_UNSUPPORTED, "rank %d: %s", r,
                 a->message[r]);
    cr_assert(strstr(a->message[r], want), "rank %d: %s", r, a->message[r]);
  }
  h_shared_free(a, sizeof *a);
}

Test(ib_fake, library_choice_errors, .timeout = 90) {
  use_fake(NULL);
  setenv("RINGCC_NET", "Verbs", 1);
  lib_area_t *a = lib_run();
  cr_assert_eq(a->init_code[0], RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(a->message[0], "net on rank 0: RINGCC_NET=\"Verbs\" names "
                                  "no network plugin (IB or Socket)"),
            "%s", a->message[0]);
  h_shared_free(a, sizeof *a);
  setenv("RINGCC_NET", "IB", 1);
  setenv("RINGCC_IB_DISABLE", "1", 1);
  a = lib_run();
  cr_assert_eq(a->init_code[1], RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(a->message[1], "net on rank 1: RINGCC_NET=IB but "
                                  "RINGCC_IB_DISABLE=1"), "%s", a->message[1]);
  unsetenv("RINGCC_IB_DISABLE");
  h_shared_free(a, sizeof *a);
}

/* Without RINGCC_NET: IB where it works (the fake's ports cannot reach
 * another process, so here it is left out), TCP otherwise. */
Test(ib_fake, library_disabled_uses_tcp, .timeout = 90) {
  use_fake(NULL);
  setenv("RINGCC_IB_DISABLE", "1", 1);
  lib_area_t *a = lib_run();
  for (int r = 0; r < 2; r++)
    cr_assert(a->init_code[r] == RINGCC_SUCCESS &&
                  a->call_code[r] == RINGCC_SUCCESS,
              "rank %d over TCP: %s", r, a->message[r]);
  h_shared_free(a, sizeof *a);
}
