/*
 * test_bootstrap.c - the unique id, the rendezvous, the bootstrap ring and its
 * allgather/barrier, run with ranks as fork()ed processes and as threads, and
 * the socket helpers (RINGCC_SOCKET_IFNAME matching, host:port parsing).
 *
 * Rank bodies never use Criterion asserts (they do not work in forked
 * children): they print one line saying what went wrong and return nonzero.
 * Children leave with _exit(); the parent reaps every child, killing any that
 * outlive the run's deadline.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "error.h"
#include "socket.h"
#include "wire.h"

#define MAX_RANKS 8
#define RUN_DEADLINE_MS 20000

typedef int (*rank_fn)(int rank, int nranks, const ringcc_unique_id_t *id,
                       void *arg);

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int fail(int rank, const char *what, ringcc_result_t r,
                const char *err) {
  fprintf(stderr, "rank %d: %s failed: %s (code %d)\n", rank, what, err,
          (int)r);
  return 1;
}

/* ---- running ranks ------------------------------------------------------ */

static pid_t fork_rank(rank_fn fn, int rank, int nranks,
                       const ringcc_unique_id_t *id, void *arg) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(fn(rank, nranks, id, arg));
  return pid;
}

/* Waits for the children with a deadline; returns their exit codes (99 for a
 * child killed or stuck). */
static void reap(pid_t *pids, int n, int *codes) {
  int64_t deadline = rcc_deadline_after_ms(RUN_DEADLINE_MS);
  int left = 0;
  for (int i = 0; i < n; i++) {
    codes[i] = 99;
    left += pids[i] > 0;
  }
  while (left > 0 && rcc_now_ns() < deadline) {
    for (int i = 0; i < n; i++) {
      int status;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i])
        continue;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
      pids[i] = 0;
      left--;
    }
    if (left > 0)
      sleep_ms(5);
  }
  for (int i = 0; i < n; i++) {
    if (pids[i] > 0) {
      fprintf(stderr, "child %d still running at the deadline: killed\n", i);
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
  }
}

static void run_forked(rank_fn fn, int nranks, const ringcc_unique_id_t *id,
                       void *arg) {
  pid_t pids[MAX_RANKS];
  int codes[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork_rank(fn, r, nranks, id, arg);
    cr_assert_geq(pids[r], 0, "fork: %s", strerror(errno));
  }
  reap(pids, nranks, codes);
  for (int r = 0; r < nranks; r++)
    cr_expect_eq(codes[r], 0, "rank %d of %d failed (exit %d)", r, nranks,
                 codes[r]);
}

struct thread_rank {
  rank_fn fn;
  int rank, nranks, result;
  const ringcc_unique_id_t *id;
  void *arg;
};

static void *thread_main(void *p) {
  struct thread_rank *t = p;
  t->result = t->fn(t->rank, t->nranks, t->id, t->arg);
  return NULL;
}

static void run_threads(rank_fn fn, int nranks, const ringcc_unique_id_t *id,
                        void *arg) {
  pthread_t tids[MAX_RANKS];
  struct thread_rank t[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    t[r] = (struct thread_rank){fn, r, nranks, -1, id, arg};
    cr_assert_eq(pthread_create(&tids[r], NULL, thread_main, &t[r]), 0);
  }
  for (int r = 0; r < nranks; r++) {
    pthread_join(tids[r], NULL);
    cr_expect_eq(t[r].result, 0, "thread rank %d of %d failed", r, nranks);
  }
}

/* A loopback port nobody listens on right now. */
static int free_port(const char *host) {
  struct sockaddr_storage a, bound;
  char err[RCC_ERRLEN], hp[64];
  int fd;
  snprintf(hp, sizeof(hp), "%s:1", host);
  cr_assert_eq(rcc_socket_parse_host_port(hp, &a, err, sizeof(err)), 0, "%s",
               err);
  rcc_socket_addr_set_port(&a, 0);
  cr_assert_eq(rcc_socket_listen(&a, &fd, &bound, err, sizeof(err)), 0, "%s",
               err);
  close(fd);
  return rcc_socket_addr_port(&bound);
}

/* An id for host (a bracketed IPv6 is fine) on a free port; the caller
 * serves it (or not). */
static void make_root_id(ringcc_unique_id_t *id, const char *host,
                         uint8_t fill, char *host_port, size_t len) {
  uint8_t secret[16];
  char err[RCC_ERRLEN];
  memset(secret, fill, sizeof(secret));
  secret[0] = 0x5a;
  char bare[48];
  snprintf(bare, sizeof(bare), "%s", host[0] == '[' ? host + 1 : host);
  bare[strcspn(bare, "]")] = '\0';
  snprintf(host_port, len, "%s:%d", host, free_port(bare));
  cr_assert_eq(rcc_bootstrap_id_from_root(id, host_port, secret, err,
                                          sizeof(err)),
               0, "%s", err);
}

/* ---- rank bodies ------------------------------------------------------- */

static uint8_t pattern(int rank, int round, size_t i) {
  return (uint8_t)(rank * 37 + round * 101 + i * 11 + (i >> 8));
}

/* Three allgathers (1 byte, 13 bytes, 4 MiB: larger than the socket buffers,
 * so send and receive must overlap), every byte checked, and barriers. */
static int body_full(int rank, int nranks, const ringcc_unique_id_t *id,
                     void *arg) {
  static const size_t sizes[] = {1, 13, 4u << 20};
  struct rcc_bootstrap *b;
  char err[RCC_ERRLEN];
  int64_t deadline = rcc_deadline_after_ms(15000);
  (void)arg;

  ringcc_result_t r = rcc_bootstrap_init(&b, id, rank, nranks, deadline, err,
                                         sizeof(err));
  if (r != RINGCC_SUCCESS)
    return fail(rank, "init", r, err);
  for (int round = 0; round < 3; round++) {
    size_t bytes = sizes[round];
    uint8_t *data = malloc(bytes * (size_t)nranks);
    if (data == NULL)
      return fail(rank, "malloc", RINGCC_ERR_OUT_OF_MEMORY, "");
    memset(data, 0xee, bytes * (size_t)nranks);
    for (size_t i = 0; i < bytes; i++)
      data[(size_t)rank * bytes + i] = pattern(rank, round, i);
    r = rcc_bootstrap_allgather(b, data, bytes, deadline, err, sizeof(err));
    if (r != RINGCC_SUCCESS) {
      free(data);
      rcc_bootstrap_close(b);
      return fail(rank, "allgather", r, err);
    }
    for (int q = 0; q < nranks; q++)
      for (size_t i = 0; i < bytes; i++)
        if (data[(size_t)q * bytes + i] != pattern(q, round, i)) {
          fprintf(stderr, "rank %d: allgather round %d: record of rank %d "
                  "byte %zu is %u, expected %u\n", rank, round, q, i,
                  data[(size_t)q * bytes + i], pattern(q, round, i));
          free(data);
          rcc_bootstrap_close(b);
          return 1;
        }
    free(data);
    r = rcc_bootstrap_barrier(b, deadline, err, sizeof(err));
    if (r != RINGCC_SUCCESS) {
      rcc_bootstrap_close(b);
      return fail(rank, "barrier", r, err);
    }
  }
  rcc_bootstrap_close(b);
  return 0;
}

static void new_id(ringcc_unique_id_t *id, int64_t timeout_ms) {
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_bootstrap_new_id(id, NULL, timeout_ms, err, sizeof(err)), 0,
               "%s", err);
  cr_assert_eq(rcc_bootstrap_check_id(id, err, sizeof(err)), 0, "%s", err);
}

static void full_forked(int nranks) {
  ringcc_unique_id_t id;
  new_id(&id, 20000);
  run_forked(body_full, nranks, &id, NULL);
}

/* ---- the unique id ------------------------------------------------------ */

TestSuite(bootstrap, .timeout = 30);

Test(bootstrap, id_round_trip, .timeout = 5) {
  ringcc_unique_id_t id, id6;
  uint8_t secret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_bootstrap_id_from_root(&id, "127.0.0.1:5555", secret, err,
                                          sizeof(err)), 0, "%s", err);
  cr_expect_eq(rcc_bootstrap_check_id(&id, err, sizeof(err)), 0, "%s", err);
  cr_assert_eq(rcc_bootstrap_id_from_root(&id6, "[::1]:6000", secret, err,
                                          sizeof(err)), 0, "%s", err);
  cr_expect_eq(rcc_bootstrap_check_id(&id6, err, sizeof(err)), 0, "%s", err);
  /* A copy is as good as the original. */
  ringcc_unique_id_t copy;
  memcpy(&copy, &id, sizeof(copy));
  cr_expect_eq(rcc_bootstrap_check_id(&copy, err, sizeof(err)), 0);
  /* Made by new_id: valid, and two ids differ (fresh secret, port). */
  ringcc_unique_id_t a, b;
  new_id(&a, 500);
  new_id(&b, 500);
  cr_expect_neq(memcmp(&a, &b, sizeof(a)), 0);
}

Test(bootstrap, id_rejects_garbage, .timeout = 5) {
  ringcc_unique_id_t id, bad;
  uint8_t secret[16] = {0};
  char err[RCC_ERRLEN];

  memset(&bad, 0, sizeof(bad));
  cr_expect_eq(rcc_bootstrap_check_id(&bad, err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err, "unique id is malformed: bad magic") != NULL, "%s",
            err);
  cr_expect_eq(rcc_bootstrap_check_id(NULL, err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);

  srand(42);
  for (int k = 0; k < 100; k++) {
    for (size_t i = 0; i < sizeof(bad); i++)
      bad.internal[i] = (char)rand();
    cr_expect_eq(rcc_bootstrap_check_id(&bad, err, sizeof(err)),
                 RINGCC_ERR_INVALID_ARGUMENT);
  }

  cr_assert_eq(rcc_bootstrap_id_from_root(&id, "10.1.2.3:4567", secret, err,
                                          sizeof(err)), 0);
  for (size_t i = 0; i < sizeof(id); i++) {
    for (int bit = 0; bit < 8; bit++) {
      bad = id;
      bad.internal[i] = (char)(bad.internal[i] ^ (1 << bit));
      cr_expect_eq(rcc_bootstrap_check_id(&bad, err, sizeof(err)),
                   RINGCC_ERR_INVALID_ARGUMENT, "byte %zu bit %d flipped: "
                   "accepted", i, bit);
      cr_expect(strstr(err, "unique id is malformed") != NULL, "%s", err);
    }
  }
  /* A garbage id given to init is refused before any network traffic. */
  struct rcc_bootstrap *b = (struct rcc_bootstrap *)1;
  memset(&bad, 0x17, sizeof(bad));
  cr_expect_eq(rcc_bootstrap_init(&b, &bad, 0, 1, rcc_deadline_after_ms(100),
                                  err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect_null(b);
  cr_expect_eq(rcc_bootstrap_init(&b, &id, 3, 3, rcc_deadline_after_ms(100),
                                  err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect_eq(rcc_bootstrap_serve(&bad, -1, 100, err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
}

/* ---- full runs ---------------------------------------------------------- */

Test(bootstrap, forked_n1, .timeout = 20) { full_forked(1); }
Test(bootstrap, forked_n2, .timeout = 20) { full_forked(2); }
Test(bootstrap, forked_n3, .timeout = 20) { full_forked(3); }
Test(bootstrap, forked_n5, .timeout = 20) { full_forked(5); }

Test(bootstrap, threads_n1_n2_n4, .timeout = 20) {
  int sizes[] = {1, 2, 4};
  for (int k = 0; k < 3; k++) {
    ringcc_unique_id_t id;
    new_id(&id, 20000);
    run_threads(body_full, sizes[k], &id, NULL);
  }
}

/* Env-launch style: the ranks start before the root serves (they retry), and
 * the rendezvous is on IPv6 loopback. */
Test(bootstrap, serve_late_root_ipv6, .timeout = 20) {
  ringcc_unique_id_t id;
  char hp[80], err[RCC_ERRLEN];
  struct sockaddr_storage probe;
  int fd;
  cr_assert_eq(rcc_socket_parse_host_port("[::1]:1", &probe, err,
                                          sizeof(err)), 0, "%s", err);
  rcc_socket_addr_set_port(&probe, 0);
  if (rcc_socket_listen(&probe, &fd, NULL, err, sizeof(err)) != 0)
    cr_skip_test("no IPv6 loopback here: %s", err);
  close(fd);
  make_root_id(&id, "[::1]", 0x33, hp, sizeof(hp));
  pid_t pids[3];
  int codes[3];
  for (int r = 1; r < 3; r++)
    pids[r] = fork_rank(body_full, r, 3, &id, NULL);
  sleep_ms(300);
  cr_assert_eq(rcc_bootstrap_serve(&id, -1, 20000, err, sizeof(err)), 0, "%s",
               err);
  pids[0] = fork_rank(body_full, 0, 3, &id, NULL);
  reap(pids, 3, codes);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(codes[r], 0, "rank %d failed", r);
}

/* ---- intruders ---------------------------------------------------------- */

/* What a rank that must be turned away expects: the code, a phrase of the
 * message, and an end well before its deadline. */
struct refusal {
  ringcc_result_t code;
  const char *says;
};

/* Exits 0 when init fails with r->code, a message holding r->says, within
 * 5 s of a 15 s deadline. */
static int body_told(int rank, int nranks, const ringcc_unique_id_t *id,
                     void *arg) {
  const struct refusal *want = arg;
  struct rcc_bootstrap *b;
  char err[RCC_ERRLEN] = "";
  int64_t t0 = rcc_now_ns();
  ringcc_result_t r = rcc_bootstrap_init(&b, id, rank, nranks,
                                         rcc_deadline_after_ms(15000), err,
                                         sizeof(err));
  double took = (double)(rcc_now_ns() - t0) / 1e9;
  if (r == RINGCC_SUCCESS) {
    rcc_bootstrap_close(b);
    fprintf(stderr, "rank %d of %d was let in\n", rank, nranks);
    return 1;
  }
  if (r != want->code || strstr(err, want->says) == NULL || took > 5.0) {
    fprintf(stderr, "rank %d of %d: code %d after %.2f s, expected %d with "
            "\"%s\" at once: %s\n", rank, nranks, (int)r, took,
            (int)want->code, want->says, err);
    return 1;
  }
  return 0;
}

Test(bootstrap, wrong_secret_refused, .timeout = 20) {
  ringcc_unique_id_t id, impostor;
  char hp[80], err[RCC_ERRLEN];
  uint8_t other[16];
  struct refusal closed = {RINGCC_ERR_NETWORK, "wrong secret"};
  pid_t pids[4];
  int codes[4];

  make_root_id(&id, "127.0.0.1", 0x11, hp, sizeof(hp));
  memset(other, 0x22, sizeof(other));
  cr_assert_eq(rcc_bootstrap_id_from_root(&impostor, hp, other, err,
                                          sizeof(err)), 0);
  cr_assert_eq(rcc_bootstrap_serve(&id, -1, 20000, err, sizeof(err)), 0, "%s",
               err);
  pids[0] = fork_rank(body_full, 0, 3, &id, NULL);
  pids[1] = fork_rank(body_full, 1, 3, &id, NULL);
  /* Wrong secret, claiming rank 2: shut out without a word. */
  pids[3] = fork_rank(body_told, 2, 3, &impostor, &closed);
  reap(&pids[3], 1, &codes[3]);
  cr_expect_eq(codes[3], 0, "the impostor was not refused as expected");
  /* The real rank 2 still completes the ring. */
  pids[2] = fork_rank(body_full, 2, 3, &id, NULL);
  reap(pids, 3, codes);
  for (int r = 0; r < 3; r++)
    cr_expect_eq(codes[r], 0, "real rank %d failed", r);
}

/* Two processes claim rank 1: the rendezvous names it to every rank, both
 * claimants, the rank that joined before and the rank that comes after,
 * each in seconds (the deadline is 15 s). */
Test(bootstrap, duplicate_rank_fails_every_rank, .timeout = 30) {
  ringcc_unique_id_t id;
  char hp[80], err[RCC_ERRLEN];
  struct refusal dup = {RINGCC_ERR_INVALID_ARGUMENT, "rank 1 joined twice"};
  pid_t pids[4];
  int codes[4];

  make_root_id(&id, "127.0.0.1", 0x12, hp, sizeof(hp));
  cr_assert_eq(rcc_bootstrap_serve(&id, -1, 20000, err, sizeof(err)), 0, "%s",
               err);
  pids[0] = fork_rank(body_told, 0, 3, &id, &dup);
  pids[1] = fork_rank(body_told, 1, 3, &id, &dup);
  sleep_ms(300);
  pids[2] = fork_rank(body_told, 1, 3, &id, &dup); /* the second rank 1 */
  sleep_ms(300);
  pids[3] = fork_rank(body_told, 2, 3, &id, &dup); /* comes after */
  reap(pids, 4, codes);
  for (int i = 0; i < 4; i++)
    cr_expect_eq(codes[i], 0, "process %d was not told of the duplicate "
                 "rank (see its line above)", i);
}

/* Rank 3 was started for 5 ranks, the others for 4: named to all. */
Test(bootstrap, nranks_mismatch_fails_every_rank, .timeout = 30) {
  ringcc_unique_id_t id;
  char hp[80], err[RCC_ERRLEN];
  struct refusal other = {RINGCC_ERR_INVALID_ARGUMENT,
                          "rank 3 says the communicator has 5 ranks, rank 0 "
                          "says 4"};
  pid_t pids[4];
  int codes[4];

  make_root_id(&id, "127.0.0.1", 0x13, hp, sizeof(hp));
  cr_assert_eq(rcc_bootstrap_serve(&id, -1, 20000, err, sizeof(err)), 0, "%s",
               err);
  pids[0] = fork_rank(body_told, 0, 4, &id, &other);
  sleep_ms(300); /* rank 0 fixes nranks */
  pids[1] = fork_rank(body_told, 1, 4, &id, &other);
  pids[2] = fork_rank(body_told, 2, 4, &id, &other);
  pids[3] = fork_rank(body_told, 3, 5, &id, &other);
  reap(pids, 4, codes);
  for (int i = 0; i < 4; i++)
    cr_expect_eq(codes[i], 0, "rank %d was not told of the mismatch (see its "
                 "line above)", i);
}

static int raw_connect(const char *host_port) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN];
  int fd;
  cr_assert_eq(rcc_socket_parse_host_port(host_port, &a, err, sizeof(err)), 0);
  cr_assert_eq(rcc_socket_connect(&a, rcc_deadline_after_ms(2000), &fd, err,
                                  sizeof(err)), 0, "%s", err);
  return fd;
}

Test(bootstrap, strangers_do_not_stop_the_ranks, .timeout = 20) {
  ringcc_unique_id_t id;
  char hp[80], err[RCC_ERRLEN];
  uint8_t junk[300];

  make_root_id(&id, "127.0.0.1", 0x44, hp, sizeof(hp));
  cr_assert_eq(rcc_bootstrap_serve(&id, -1, 20000, err, sizeof(err)), 0, "%s",
               err);
  /* One stays silent, one sends a few bytes, one sends lots of garbage, one
   * sends exactly a hello's worth of garbage, one connects and leaves. */
  int silent = raw_connect(hp);
  int partial = raw_connect(hp);
  int babbler = raw_connect(hp);
  int hello_sized = raw_connect(hp);
  int leaver = raw_connect(hp);
  for (size_t i = 0; i < sizeof(junk); i++)
    junk[i] = (uint8_t)(i * 7 + 3);
  cr_assert_eq(send(partial, junk, 5, MSG_NOSIGNAL), 5);
  (void)send(babbler, junk, sizeof(junk), MSG_NOSIGNAL);
  (void)send(hello_sized, junk, 52, MSG_NOSIGNAL);
  close(leaver);

  int64_t start = rcc_now_ns();
  run_forked(body_full, 3, &id, NULL);
  /* Well under the 5 s a stranger is given to say hello: nobody waited. */
  cr_expect_lt(rcc_now_ns() - start, 4000000000LL);
  close(silent);
  close(partial);
  close(babbler);
  close(hello_sized);
}

/* ---- a squatter on the rendezvous port ----------------------------------- */

/* What the rank of a squatter test must see: the code, and the message. */
struct squat_want {
  ringcc_result_t code;
  const char *says;
};

static int body_squatted(int rank, int nranks, const ringcc_unique_id_t *id,
                         void *arg) {
  const struct squat_want *want = arg;
  struct rcc_bootstrap *b;
  char err[RCC_ERRLEN] = "";
  ringcc_result_t r = rcc_bootstrap_init(&b, id, rank, nranks,
                                         rcc_deadline_after_ms(2000), err,
                                         sizeof(err));
  if (r == RINGCC_SUCCESS) {
    rcc_bootstrap_close(b);
    fprintf(stderr, "rank %d joined a squatter's rendezvous\n", rank);
    return 1;
  }
  if (r != want->code || strstr(err, want->says) == NULL) {
    fprintf(stderr, "rank %d: code %d (%s), expected %d and \"%s\"\n", rank,
            (int)r, err, (int)want->code, want->says);
    return 1;
  }
  return 0;
}

/* A stranger listens on the rendezvous's port before the real rendezvous
 * (fake_challenge: it answers the opening as a rendezvous would, with a
 * proof it had to make up; else it stays silent). The rank must leave with
 * a clear error, and everything it sent must hold neither the secret nor
 * anything but its opening. */
static void squat(bool fake_challenge) {
  struct sockaddr_storage a, bound;
  char err[RCC_ERRLEN], hp[80];
  int lfd;
  uint8_t secret[16];
  for (int i = 0; i < 16; i++)
    secret[i] = (uint8_t)(0xc3 ^ (i * 29));
  memset(&a, 0, sizeof a);
  ((struct sockaddr_in *)&a)->sin_family = AF_INET;
  ((struct sockaddr_in *)&a)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(rcc_socket_listen(&a, &lfd, &bound, err, sizeof err), 0, "%s",
               err);
  snprintf(hp, sizeof hp, "127.0.0.1:%d", rcc_socket_addr_port(&bound));
  ringcc_unique_id_t id;
  cr_assert_eq(rcc_bootstrap_id_from_root(&id, hp, secret, err, sizeof err),
               0);
  struct squat_want want = {
      fake_challenge ? RINGCC_ERR_NETWORK : RINGCC_ERR_TIMEOUT,
      fake_challenge ? "could not prove that it knows this id's secret"
                     : "timed out"};
  pid_t pid = fork_rank(body_squatted, 1, 3, &id, &want);

  /* What the rank sends, until it closes the connection. */
  uint8_t got[4096];
  size_t n = 0;
  int c = -1;
  int64_t until = rcc_now_ns() + 8000000000LL;
  while (c < 0 && rcc_now_ns() < until) {
    cr_assert_eq(rcc_socket_accept(lfd, &c, NULL, err, sizeof err), 0);
    if (c < 0)
      sleep_ms(5);
  }
  cr_assert(c >= 0, "the rank never connected");
  bool answered = false;
  while (rcc_now_ns() < until) {
    ssize_t k = recv(c, got + n, sizeof got - n, MSG_DONTWAIT);
    if (k == 0)
      break;
    if (k > 0)
      n += (size_t)k;
    if (fake_challenge && !answered && n >= RCC_BOOT_OPEN_BYTES) {
      uint8_t chal[RCC_BOOT_CHALLENGE_BYTES];
      memset(chal, 0x5a, sizeof chal);
      memcpy(chal, "RCCB\0\1\0\0", 8); /* magic, purpose 1 */
      cr_assert_eq(send(c, chal, sizeof chal, MSG_NOSIGNAL),
                   (ssize_t)sizeof chal);
      answered = true;
    }
    if (k < 0)
      sleep_ms(5);
  }
  int codes[1];
  reap(&pid, 1, codes);
  close(c);
  close(lfd);
  cr_expect_eq(codes[0], 0, "the rank did not fail as it should (above)");
  cr_expect_eq(n, (size_t)RCC_BOOT_OPEN_BYTES, "the rank sent %zu bytes to "
               "the squatter, expected only its %d-byte opening", n,
               RCC_BOOT_OPEN_BYTES);
  cr_expect(memmem(got, n, secret, sizeof secret) == NULL,
            "the squatter read the secret");
  char hex[33];
  for (int i = 0; i < 16; i++)
    snprintf(hex + 2 * i, 3, "%02x", secret[i]);
  cr_expect(memmem(got, n, hex, 32) == NULL, "the squatter read the secret "
            "in hex");
  cr_expect(n < 4 || memcmp(got, "RCCA", 4) == 0, "not a handshake opening");
}

Test(bootstrap, squatter_answering_learns_nothing, .timeout = 20) {
  squat(true);
}

Test(bootstrap, squatter_silent_learns_nothing, .timeout = 20) {
  squat(false);
}

/* ---- failures ----------------------------------------------------------- */

/* Init must time out between 1.5 s and 3.5 s. */
static int body_times_out(int rank, int nranks, const ringcc_unique_id_t *id,
                          void *arg) {
  struct rcc_bootstrap *b;
  char err[RCC_ERRLEN] = "";
  int64_t start = rcc_now_ns();
  (void)arg;
  ringcc_result_t r = rcc_bootstrap_init(&b, id, rank, nranks,
                                         rcc_deadline_after_ms(1500), err,
                                         sizeof(err));
  int64_t ms = (rcc_now_ns() - start) / 1000000;
  if (r == RINGCC_SUCCESS) {
    rcc_bootstrap_close(b);
    fprintf(stderr, "rank %d: init succeeded without rank 2\n", rank);
    return 1;
  }
  if (r != RINGCC_ERR_TIMEOUT || ms < 1400 || ms > 3500 ||
      strstr(err, "timed out") == NULL) {
    fprintf(stderr, "rank %d: code %d after %lld ms: %s\n", rank, (int)r,
            (long long)ms, err);
    return 1;
  }
  return 0;
}

Test(bootstrap, missing_rank_times_out, .timeout = 15) {
  ringcc_unique_id_t id;
  new_id(&id, 3000);
  pid_t pids[2];
  int codes[2];
  for (int r = 0; r < 2; r++)
    pids[r] = fork_rank(body_times_out, r, 3, &id, NULL);
  reap(pids, 2, codes);
  for (int r = 0; r < 2; r++)
    cr_expect_eq(codes[r], 0, "rank %d did not time out as expected", r);
}

/* Rank 2 leaves right after init; rank 0 (whose prev it is) must say so. */
static int body_peer_leaves(int rank, int nranks,
                            const ringcc_unique_id_t *id, void *arg) {
  struct rcc_bootstrap *b;
  char err[RCC_ERRLEN] = "";
  uint8_t data[3 * 64];
  int64_t deadline = rcc_deadline_after_ms(5000);
  (void)arg;
  ringcc_result_t r = rcc_bootstrap_init(&b, id, rank, nranks, deadline, err,
                                         sizeof(err));
  if (r != RINGCC_SUCCESS)
    return fail(rank, "init", r, err);
  if (rank == 2) {
    rcc_bootstrap_close(b);
    return 0;
  }
  memset(data, rank, sizeof(data));
  r = rcc_bootstrap_allgather(b, data, 64, deadline, err, sizeof(err));
  rcc_bootstrap_close(b);
  if (r == RINGCC_SUCCESS) {
    fprintf(stderr, "rank %d: allgather succeeded without rank 2\n", rank);
    return 1;
  }
  if (rank == 0 && (r != RINGCC_ERR_PEER_FAILED ||
                    strstr(err, "rank 2") == NULL)) {
    fprintf(stderr, "rank 0: code %d: %s\n", (int)r, err);
    return 1;
  }
  return 0;
}

Test(bootstrap, peer_exit_is_peer_failed, .timeout = 15) {
  ringcc_unique_id_t id;
  new_id(&id, 10000);
  run_forked(body_peer_leaves, 3, &id, NULL);
}

Test(bootstrap, connect_refused_times_out, .timeout = 5) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN], hp[64];
  int fd;
  snprintf(hp, sizeof(hp), "127.0.0.1:%d", free_port("127.0.0.1"));
  cr_assert_eq(rcc_socket_parse_host_port(hp, &a, err, sizeof(err)), 0);
  int64_t start = rcc_now_ns();
  cr_expect_eq(rcc_socket_connect(&a, rcc_deadline_after_ms(300), &fd, err,
                                  sizeof(err)), RINGCC_ERR_TIMEOUT);
  int64_t ms = (rcc_now_ns() - start) / 1000000;
  cr_expect(ms >= 250 && ms < 4000, "took %lld ms (deadline 300 ms)",
            (long long)ms);
  cr_expect(strstr(err, hp) != NULL && strstr(err, "refused") != NULL, "%s",
            err);

  /* init against nobody: the message names the rendezvous. */
  ringcc_unique_id_t id;
  uint8_t secret[16] = {0};
  struct rcc_bootstrap *b;
  cr_assert_eq(rcc_bootstrap_id_from_root(&id, hp, secret, err, sizeof(err)),
               0);
  cr_expect_eq(rcc_bootstrap_init(&b, &id, 0, 2, rcc_deadline_after_ms(300),
                                  err, sizeof(err)), RINGCC_ERR_TIMEOUT);
  cr_expect(strstr(err, "rendezvous") != NULL && strstr(err, hp) != NULL,
            "%s", err);
}

/* ---- RINGCC_SOCKET_IFNAME ----------------------------------------------- */

/* Comma-separated names of the interfaces that are up with an IP address. */
static void up_interfaces(char *names, size_t len) {
  struct ifaddrs *list, *ifa;
  names[0] = '\0';
  cr_assert_eq(getifaddrs(&list), 0);
  for (ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP) ||
        (ifa->ifa_addr->sa_family != AF_INET &&
         ifa->ifa_addr->sa_family != AF_INET6))
      continue;
    char item[IF_NAMESIZE + 4];
    snprintf(item, sizeof(item), ",%s,", ifa->ifa_name);
    char padded[1024];
    snprintf(padded, sizeof(padded), ",%s,", names);
    if (strstr(padded, item) != NULL)
      continue;
    if (names[0])
      strncat(names, ",", len - strlen(names) - 1);
    strncat(names, ifa->ifa_name, len - strlen(names) - 1);
  }
  freeifaddrs(list);
}

static ringcc_result_t pick(const char *spec, struct sockaddr_storage *a,
                            char *ifname, char *err) {
  return rcc_socket_pick_address(spec, a, ifname, IF_NAMESIZE + 1, err,
                                 RCC_ERRLEN);
}

Test(socket, ifname_spec, .timeout = 5) {
  struct sockaddr_storage a;
  char ifname[IF_NAMESIZE + 1], err[RCC_ERRLEN], s[80], all[512], spec[600];

  /* Exact and prefix: lo is allowed when named, IPv4 preferred. */
  cr_assert_eq(pick("=lo", &a, ifname, err), 0, "%s", err);
  cr_expect_str_eq(ifname, "lo");
  cr_expect_eq(a.ss_family, AF_INET);
  cr_expect_str_eq(rcc_socket_addr_str(&a, s, sizeof(s)), "127.0.0.1:0");
  cr_assert_eq(pick("lo", &a, ifname, err), 0, "%s", err);
  cr_expect_str_eq(ifname, "lo");
  cr_assert_eq(pick("l", &a, ifname, err), 0, "%s", err);
  cr_expect_eq(ifname[0], 'l');
  cr_assert_eq(pick("=nosuchif,lo", &a, ifname, err), 0, "%s", err);
  cr_expect_str_eq(ifname, "lo");

  /* Nothing matches: the message lists what exists. */
  cr_expect_eq(pick("=l", &a, ifname, err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err, "=l") != NULL && strstr(err, "lo (up") != NULL, "%s",
            err);
  cr_expect_eq(pick("nosuchif0", &a, ifname, err),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err, "nosuchif0") != NULL && strstr(err, "lo") != NULL,
            "%s", err);

  /* Exclusion: never the excluded one; excluding all fails. */
  up_interfaces(all, sizeof(all));
  if (pick("^=lo", &a, ifname, err) == 0)
    cr_expect_str_neq(ifname, "lo");
  else
    cr_expect_str_eq(all, "lo", "^=lo failed although %s are up: %s", all,
                     err);
  if (pick("^lo", &a, ifname, err) == 0)
    cr_expect(strncmp(ifname, "lo", 2) != 0);
  snprintf(spec, sizeof(spec), "^=%s", all);
  cr_expect_eq(pick(spec, &a, ifname, err), RINGCC_ERR_INVALID_ARGUMENT,
               "excluding every interface (%s) still picked %s", spec,
               ifname);
  snprintf(spec, sizeof(spec), "^%s", all);
  cr_expect_eq(pick(spec, &a, ifname, err), RINGCC_ERR_INVALID_ARGUMENT);

  /* Default: never loopback when another interface is up. */
  cr_assert_eq(pick(NULL, &a, ifname, err), 0, "%s", err);
  cr_assert_eq(pick("", &a, ifname, err), 0, "%s", err);
  if (strcmp(all, "lo") != 0)
    cr_expect_str_neq(ifname, "lo", "default picked lo although %s are up",
                      all);
}

Test(socket, ifname_spec_one_family, .timeout = 5) {
  struct sockaddr_storage a;
  char ifname[IF_NAMESIZE + 1], err[RCC_ERRLEN], s[80];

  cr_assert_eq(rcc_socket_pick_address_family("=lo", AF_INET, &a, ifname,
                                              sizeof(ifname), err,
                                              sizeof(err)), 0, "%s", err);
  cr_expect_str_eq(rcc_socket_addr_str(&a, s, sizeof(s)), "127.0.0.1:0");
  if (rcc_socket_pick_address_family("=lo", AF_INET6, &a, ifname,
                                     sizeof(ifname), err, sizeof(err)) == 0)
    cr_expect_str_eq(rcc_socket_addr_str(&a, s, sizeof(s)), "[::1]:0");
  else
    cr_expect(strstr(err, "only IPv4 addresses match") != NULL, "%s", err);
  /* AF_UNSPEC is rcc_socket_pick_address. */
  cr_assert_eq(rcc_socket_pick_address_family(NULL, AF_UNSPEC, &a, ifname,
                                              sizeof(ifname), err,
                                              sizeof(err)), 0, "%s", err);
  cr_expect_eq(rcc_socket_pick_address_family("=nosuchif0", AF_INET, &a, NULL,
                                              0, err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(err, "IPv4") != NULL && strstr(err, "lo (up") != NULL,
            "%s", err);
  cr_expect_eq(rcc_socket_pick_address_family(NULL, 12345, &a, NULL, 0, err,
                                              sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
}

/* ---- host:port ---------------------------------------------------------- */

static void expect_parses(const char *hp, int family, const char *want) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN], s[80];
  cr_assert_eq(rcc_socket_parse_host_port(hp, &a, err, sizeof(err)), 0,
               "%s: %s", hp, err);
  cr_expect_eq(a.ss_family, family, "%s", hp);
  if (want != NULL)
    cr_expect_str_eq(rcc_socket_addr_str(&a, s, sizeof(s)), want);
}

static void expect_rejected(const char *hp) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN] = "";
  cr_expect_eq(rcc_socket_parse_host_port(hp, &a, err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT, "\"%s\" was accepted", hp);
  cr_expect(strstr(err, hp) != NULL, "the message does not name \"%s\": %s",
            hp, err);
}

Test(socket, host_port, .timeout = 5) {
  expect_parses("127.0.0.1:80", AF_INET, "127.0.0.1:80");
  expect_parses("10.0.0.2:65535", AF_INET, "10.0.0.2:65535");
  expect_parses("[::1]:8080", AF_INET6, "[::1]:8080");
  expect_parses("[fd00::2]:1", AF_INET6, "[fd00::2]:1");
  expect_parses("::1:8080", AF_INET6, "[::1]:8080");
  struct sockaddr_storage a;
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_socket_parse_host_port("localhost:1234", &a, err,
                                          sizeof(err)), 0, "%s", err);
  cr_expect_eq(rcc_socket_addr_port(&a), 1234);

  expect_rejected("127.0.0.1");
  expect_rejected("127.0.0.1:");
  expect_rejected("127.0.0.1:0");
  expect_rejected("127.0.0.1:65536");
  expect_rejected("127.0.0.1:12ab");
  expect_rejected("127.0.0.1:-5");
  expect_rejected(":80");
  expect_rejected("[::1]80");
  expect_rejected("[::1");
  expect_rejected("[]:80");
  expect_rejected("fe80::1");
  expect_rejected("");
  cr_expect_eq(rcc_socket_parse_host_port(NULL, &a, err, sizeof(err)),
               RINGCC_ERR_INVALID_ARGUMENT);
}
