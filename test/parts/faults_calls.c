/*
 * faults_calls.c - the second half of test_faults (linked into the same
 * program; test/test_faults.c has the first and the shared helpers, declared
 * in test/test_faults.h): ranks that disagree about a call (RINGCC_CHECK)
 * and about the count of the one-shot over the board, ringcc_comm_abort from
 * another thread, a failed call that gives the user's buffers back, and ids
 * or strangers that are not what they claim.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "error.h"
#include "harness.h"
#include "shmname.h"
#include "soak/random_coll.h"
#include "socket.h"
#include "wire.h"
#include "test_faults.h"

/* ---- RINGCC_CHECK: ranks that disagree about a call ---------------------------------- */

enum mismatch { MM_COUNT, MM_DATATYPE, MM_OP, MM_ROOT, MM_COLL, MM_COLL_BARRIER,
                MM_NUM };
static const struct {
  const char *field; /* as the message names it */
  int odd;           /* the rank that differs */
} mismatches[MM_NUM] = {
    [MM_COUNT] = {"count", 1},       [MM_DATATYPE] = {"datatype", 2},
    [MM_OP] = {"op", 0},             [MM_ROOT] = {"root", 1},
    [MM_COLL] = {"collective", 2},   [MM_COLL_BARRIER] = {"collective", 0},
};

#define CHECK_COUNT 1000

typedef struct {
  int tcp;
  struct {
    int code[MM_NUM];
    char message[MM_NUM][MSG_LEN];
  } rank[MAX_RANKS];
} check_area_t;

/* The call of mismatch m as rank `rank` makes it. */
static ringcc_result_t mismatched_call(enum mismatch m, int rank,
                                       ringcc_comm_t comm, float *buf) {
  bool odd = rank == mismatches[m].odd;
  switch (m) {
  case MM_COUNT:
    return ringcc_allreduce(buf, buf, CHECK_COUNT + odd, RINGCC_FLOAT32,
                            RINGCC_SUM, comm, NULL);
  case MM_DATATYPE:
    return ringcc_allreduce(buf, buf, CHECK_COUNT,
                            odd ? RINGCC_INT32 : RINGCC_FLOAT32, RINGCC_SUM,
                            comm, NULL);
  case MM_OP:
    return ringcc_allreduce(buf, buf, CHECK_COUNT, RINGCC_FLOAT32,
                            odd ? RINGCC_MAX : RINGCC_SUM, comm, NULL);
  case MM_ROOT:
    return ringcc_bcast(buf, CHECK_COUNT, RINGCC_FLOAT32, odd ? rank : 0, comm,
                        NULL);
  case MM_COLL:
    if (odd)
      return ringcc_allgather(buf, buf + CHECK_COUNT, CHECK_COUNT,
                              RINGCC_FLOAT32, comm, NULL);
    return ringcc_allreduce(buf, buf, CHECK_COUNT, RINGCC_FLOAT32, RINGCC_SUM,
                            comm, NULL);
  default:
    if (odd)
      return ringcc_barrier(comm, NULL);
    return ringcc_reduce(buf, buf, CHECK_COUNT, RINGCC_FLOAT32, RINGCC_SUM, 1,
                         comm, NULL);
  }
}

static int check_rank(int rank, int n, const ringcc_unique_id_t *id, void *arg) {
  check_area_t *a = arg;
  ringcc_config_t cfg = config_with(10000, a->tcp);
  cfg.check = 1;
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  float *buf = calloc((size_t)CHECK_COUNT * (size_t)(n + 1) + 1, sizeof *buf);
  int32_t got[1031], expect[1031];
  h_ctx_t ctx = {.rank = rank, .nranks = n};
  int rc = 0;
  for (int m = 0; m < MM_NUM && rc == 0; m++) {
    a->rank[rank].code[m] = (int)mismatched_call((enum mismatch)m, rank, comm, buf);
    snprintf(a->rank[rank].message[m], MSG_LEN, "%s",
             ringcc_comm_last_error(comm));
    /* The communicator still works: an exact allreduce, checked here. */
    h_fill_input(RINGCC_INT32, RINGCC_SUM, rank, 0, (uint64_t)m, got, 1031);
    h_fill_expected(RINGCC_INT32, RINGCC_SUM, n, 0, (uint64_t)m, expect, 1031);
    ringcc_result_t r = ringcc_allreduce(got, got, 1031, RINGCC_INT32,
                                         RINGCC_SUM, comm, NULL);
    if (r != RINGCC_SUCCESS)
      rc = h_fail_rank(rank, "the allreduce after the %s mismatch returned "
                             "%s: %s", mismatches[m].field, ringcc_strerror(r),
                       ringcc_comm_last_error(comm));
    else if (!h_check_elems(&ctx, "allreduce after a mismatch", RINGCC_INT32,
                            got, expect, 1031))
      rc = 1;
  }
  ringcc_comm_destroy(comm);
  free(buf);
  return rc;
}

static void check_mismatches(int tcp) {
  enum { N = 3 };
  check_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->tcp = tcp;
  int logfd = log_open(), err_fd[N] = {logfd, logfd, logfd};
  job_t j;
  job_start(&j, N, check_rank, a, err_fd);
  bool done = job_wait(&j, 40);
  if (!done)
    log_dump("RINGCC_CHECK", logfd);
  close(logfd);
  cr_assert(done, "the ranks hung");
  expect_all_exited_0(&j, "RINGCC_CHECK");
  for (int m = 0; m < MM_NUM; m++) {
    const char *first = NULL;
    for (int r = 0; r < N; r++) {
      const char *msg = a->rank[r].message[m];
      cr_expect_eq(a->rank[r].code[m], RINGCC_ERR_INVALID_USAGE,
                   "%s mismatch, rank %d: code %d, expected "
                   "RINGCC_ERR_INVALID_USAGE: %s", mismatches[m].field, r,
                   a->rank[r].code[m], msg);
      char field[64], odd[48];
      snprintf(field, sizeof field, "%s: rank ", mismatches[m].field);
      snprintf(odd, sizeof odd, "rank %d has ", mismatches[m].odd);
      cr_expect(strstr(msg, "(RINGCC_CHECK)") && strstr(msg, field) &&
                    strstr(msg, odd),
                "%s mismatch, rank %d: the message does not name the field "
                "and rank %d: %s", mismatches[m].field, r, mismatches[m].odd,
                msg);
      /* Every rank describes the disagreement alike. */
      const char *what = strstr(msg, "do not match: ");
      cr_expect_not_null(what, "rank %d: %s", r, msg);
      if (what && first)
        cr_expect_str_eq(what, first, "%s mismatch: rank %d says '%s', rank 0 "
                         "'%s'", mismatches[m].field, r, what, first);
      else if (what)
        first = what;
    }
  }
  fprintf(stderr, "faults: RINGCC_CHECK over %s, e.g.: %s\n",
          tcp ? "TCP" : "shared memory", a->rank[1].message[MM_COLL]);
  h_shared_free(a, sizeof *a);
}

Test(faults, check_mismatches_shm, .timeout = 40) { check_mismatches(0); }
Test(faults, check_mismatches_tcp, .timeout = 40) { check_mismatches(1); }

/* ---- the one-shot over the board: ranks that disagree on the count ---------------- */

/* Without RINGCC_CHECK, rank 1 gives one element more. Every rank reads
 * every board, so every rank fails at once, naming a rank and both sizes,
 * instead of reading bytes the other never wrote. */
typedef struct {
  struct {
    int code;
    double took_s;
    char message[MSG_LEN];
  } rank[3];
} board_area_t;

static int board_mismatch_rank(int rank, int n, const ringcc_unique_id_t *id,
                               void *arg) {
  board_area_t *a = arg;
  ringcc_config_t cfg = config_with(10000, 0);
  cfg.algo = RINGCC_ALGO_DIRECT;
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  float in[3] = {1, 2, 3}, out[3];
  double t0 = h_now_s();
  a->rank[rank].code = (int)ringcc_allreduce(in, out, rank == 1 ? 3 : 2,
                                             RINGCC_FLOAT32, RINGCC_SUM, comm,
                                             NULL);
  a->rank[rank].took_s = h_now_s() - t0;
  snprintf(a->rank[rank].message, MSG_LEN, "%s", ringcc_comm_last_error(comm));
  ringcc_comm_destroy(comm);
  return 0;
}

Test(faults, one_shot_board_count_mismatch, .timeout = 40) {
  enum { N = 3 };
  board_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  int logfd = log_open(), err_fd[N] = {logfd, logfd, logfd};
  job_t j;
  job_start(&j, N, board_mismatch_rank, a, err_fd);
  bool done = job_wait(&j, 30);
  if (!done)
    log_dump("one-shot count mismatch", logfd);
  close(logfd);
  cr_assert(done, "the ranks hung");
  expect_all_exited_0(&j, "one-shot count mismatch");
  for (int r = 0; r < N; r++) {
    char want[96];
    snprintf(want, sizeof want, "rank %d gave %d bytes to the one-shot where "
             "%d were expected", r == 1 ? 0 : 1, r == 1 ? 8 : 12,
             r == 1 ? 12 : 8);
    cr_expect_eq(a->rank[r].code, RINGCC_ERR_INVALID_USAGE,
                 "rank %d: code %d, expected RINGCC_ERR_INVALID_USAGE: %s", r,
                 a->rank[r].code, a->rank[r].message);
    cr_expect_not_null(strstr(a->rank[r].message, want),
                       "rank %d: the error lacks '%s': %s", r, want,
                       a->rank[r].message);
    cr_expect_lt(a->rank[r].took_s, 5.0, "rank %d failed after %.2f s", r,
                 a->rank[r].took_s);
  }
  h_shared_free(a, sizeof *a);
}

/* ---- ringcc_comm_abort from another thread ---------------------------------------------- */

typedef struct {
  int tcp;
  int aborted; /* rank 0 is done (atomic) */
  int call_code, report_ok;
  double abort_s, call_return_s, idle_abort_s;
} abort_area_t;

#define ABORT_COUNT (1 << 16)

static int abort_rank(int rank, int n, const ringcc_unique_id_t *id, void *arg) {
  abort_area_t *a = arg;
  ringcc_config_t cfg = config_with(20000, a->tcp);
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  if (rank != 0) { /* never calls; leaves once rank 0 aborted */
    if (!wait_counter(&a->aborted, 1, 20))
      return h_fail_rank(rank, "rank 0 never finished");
    double t0 = h_now_s();
    ringcc_comm_abort(comm); /* idle: no call in flight */
    a->idle_abort_s = h_now_s() - t0;
    return 0;
  }
  int32_t *buf = calloc(ABORT_COUNT, sizeof *buf);
  call_thread_t t = {comm, buf, ABORT_COUNT, RINGCC_SUCCESS};
  pthread_t tid;
  char report[2048];
  if (pthread_create(&tid, NULL, allreduce_thread, &t) != 0)
    return h_fail_rank(rank, "pthread_create failed");
  a->report_ok = report_until_waiting(comm, report, sizeof report);
  double t0 = h_now_s();
  ringcc_comm_abort(comm);
  a->abort_s = h_now_s() - t0;
  pthread_join(tid, NULL);
  a->call_return_s = h_now_s() - t0;
  a->call_code = (int)t.result;
  __atomic_store_n(&a->aborted, 1, __ATOMIC_RELEASE);
  free(buf);
  return 0;
}

static void abort_blocked(int tcp) {
  abort_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->tcp = tcp;
  int logfd = log_open(), err_fd[2] = {logfd, logfd};
  job_t j;
  job_start(&j, 2, abort_rank, a, err_fd);
  bool done = job_wait(&j, 30);
  char *log = log_read(logfd);
  close(logfd);
  cr_assert(done, "the ranks hung; their log:\n%s", log);
  cr_expect(strstr(log, "aborted while waiting for"), "rank 0 did not log the "
            "abort of its blocked call:\n%s", log);
  free(log);
  expect_all_exited_0(&j, "abort");
  cr_expect(a->report_ok, "the allreduce never blocked");
  cr_expect_eq(a->call_code, RINGCC_ERR_ABORTED,
               "the blocked allreduce returned %d (%s), expected "
               "RINGCC_ERR_ABORTED", a->call_code,
               ringcc_strerror((ringcc_result_t)a->call_code));
  cr_expect_lt(a->abort_s, 5.0, "ringcc_comm_abort took %.3f s", a->abort_s);
  cr_expect_lt(a->call_return_s, 5.0, "the blocked call returned %.3f s after "
               "the abort", a->call_return_s);
  cr_expect_lt(a->idle_abort_s, 5.0, "aborting the peer's idle communicator "
               "took %.3f s", a->idle_abort_s);
  fprintf(stderr, "faults: ringcc_comm_abort over %s: returned in %.3f s, the "
          "blocked call %.3f s after it began; idle abort %.3f s\n",
          tcp ? "TCP" : "shared memory", a->abort_s, a->call_return_s,
          a->idle_abort_s);
  h_shared_free(a, sizeof *a);
}

Test(faults, abort_blocked_call_shm, .timeout = 30) { abort_blocked(0); }
Test(faults, abort_blocked_call_tcp, .timeout = 30) { abort_blocked(1); }

/* ---- a failed call gives the user's buffers back ------------------------------------- */

/* Over TCP a collective sends straight from the user's buffers. When the
 * call fails with sends still on their way (here: the peer does not read, so
 * its slots and the sockets fill up, and the broadcast's deadline passes),
 * the sends must leave from copies, because the user may change or free the
 * buffers as soon as the call returns. Rank 0 overwrites its buffer at
 * once; then rank 1 joins the broadcast and takes what arrives until it
 * gives up too: every element it got must be what rank 0 sent, not the
 * bytes written over it. */
#define INFLIGHT_COUNT (16u << 20) /* floats: 64 MiB, far more than fits */
#define INFLIGHT_UNSET -1.0f

typedef struct {
  int gave_up; /* rank 0's call returned (atomic) */
  int done;    /* rank 1's call returned (atomic) */
  int code[2];
  double took_s;
  size_t got, wrong, first_wrong;
  char message[2][MSG_LEN];
} inflight_area_t;

static float inflight_value(size_t i) { return (float)(i % 1000); }

/* Both ranks: a TCP communicator with a 1 s deadline, INFO logs, and the
 * 64 MiB buffer (rank 0's values, or unset on rank 1). 0, or the failure. */
static int inflight_setup(int rank, int n, const ringcc_unique_id_t *id,
                          ringcc_comm_t *comm, float **buf) {
  setenv("RINGCC_DEBUG", "INFO", 1);
  ringcc_config_t cfg = config_with(1000, 1);
  if (ringcc_comm_init(comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  *buf = malloc(INFLIGHT_COUNT * sizeof **buf);
  if (*buf == NULL)
    return h_fail_rank(rank, "out of memory");
  for (size_t i = 0; i < INFLIGHT_COUNT; i++)
    (*buf)[i] = rank == 0 ? inflight_value(i) : INFLIGHT_UNSET;
  return 0;
}

/* The broadcast from rank 0: its result into the area; how long it took. */
static double inflight_bcast(inflight_area_t *a, int rank, ringcc_comm_t comm,
                             float *buf) {
  double t0 = h_now_s();
  ringcc_result_t r =
      ringcc_bcast(buf, INFLIGHT_COUNT, RINGCC_FLOAT32, 0, comm, NULL);
  a->code[rank] = (int)r;
  snprintf(a->message[rank], MSG_LEN, "%s", ringcc_comm_last_error(comm));
  return h_now_s() - t0;
}

static int inflight_rank(int rank, int n, const ringcc_unique_id_t *id,
                         void *arg) {
  inflight_area_t *a = arg;
  ringcc_comm_t comm;
  float *buf;
  int rc = inflight_setup(rank, n, id, &comm, &buf);
  if (rc != 0)
    return rc;
  /* Rank 1 stays silent (alive) until rank 0 gave up and took its buffer
   * back. The root of a broadcast only sends: many messages are out when
   * its peer stops taking them. */
  if (rank == 1 && !wait_counter(&a->gave_up, 1, 30))
    return h_fail_rank(rank, "rank 0 never gave up");
  double took = inflight_bcast(a, rank, comm, buf);
  if (rank == 0) {
    a->took_s = took;
    memset(buf, 0xff, INFLIGHT_COUNT * sizeof *buf); /* the user's again */
    __atomic_store_n(&a->gave_up, 1, __ATOMIC_RELEASE);
    wait_counter(&a->done, 1, 30); /* the proxy sends meanwhile */
    free(buf);
  } else {
    for (size_t i = 0; i < INFLIGHT_COUNT; i++) {
      if (buf[i] == INFLIGHT_UNSET)
        continue;
      if (buf[i] != inflight_value(i) && a->wrong++ == 0)
        a->first_wrong = i;
      a->got++;
    }
    free(buf);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
  }
  ringcc_comm_destroy(comm);
  return 0;
}

/* Runs fn on 2 ranks over a fresh shared area (their logs go to err_fd):
 * rank quitter's broadcast must time out after its 1 s deadline, and the
 * other rank's, which joins after that, must fail too. */
static inflight_area_t *run_inflight(rank_fn fn, int err_fd[2],
                                     const char *what, int quitter) {
  inflight_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  err_fd[0] = log_open();
  err_fd[1] = log_open();
  job_t j;
  job_start(&j, 2, fn, a, err_fd);
  cr_assert(job_wait(&j, 45), "the ranks hung");
  expect_all_exited_0(&j, what);
  int q = quitter, other = 1 - quitter;
  cr_expect_eq(a->code[q], RINGCC_ERR_TIMEOUT, "rank %d's bcast returned %d: "
               "%s", q, a->code[q], a->message[q]);
  cr_expect(a->took_s > 0.9 && a->took_s < 10.0,
            "rank %d gave up after %.2f s (timeout 1 s)", q, a->took_s);
  cr_expect_neq(a->code[other], RINGCC_SUCCESS, "rank %d's bcast succeeded, "
                "though rank %d gave up on it", other, q);
  return a;
}

/* The line of log around at (a match inside it): its start, and its length
 * as the return value. */
static int line_around(const char *log, const char *at, const char **start) {
  const char *line = at, *end = strchr(at, '\n');
  while (line > log && line[-1] != '\n')
    line--;
  *start = line;
  return (int)(end != NULL ? end - line : (long)strlen(line));
}

Test(faults, failed_call_gives_the_buffers_back_tcp, .timeout = 60) {
  int err_fd[2];
  inflight_area_t *a = run_inflight(inflight_rank, err_fd, "in flight", 0);
  char *log = log_read(err_fd[0]);
  cr_expect_eq(a->wrong, 0, "rank 1 got %zu of %zu elements wrong (the first: "
               "element %zu): sent from memory the user had taken back",
               a->wrong, a->got, a->first_wrong);
  const char *copied = strstr(log, "from the user's buffers copied to their "
                                   "slots after the call failed");
  cr_expect_not_null(copied, "rank 0 did not log that it copied its sends "
                     "still in flight:\n%s", log);
  if (copied != NULL) {
    const char *line;
    int len = line_around(log, copied, &line);
    fprintf(stderr, "faults: a failed call with sends in flight: %.*s; rank 1 "
            "then got %zu elements, all right\n", len, line, a->got);
  }
  free(log);
  close(err_fd[0]);
  close(err_fd[1]);
  h_shared_free(a, sizeof *a);
}

/* Over TCP a receive whose bytes go to the user's buffer unchanged lands
 * there straight from the socket, posted ahead of the data. When the call
 * fails before the data came (here: rank 1's broadcast times out because
 * rank 0 has not called it yet), those receives must go back to their
 * slots: rank 1 then owns its buffer again and fills it, rank 0 broadcasts
 * into the void until it gives up, and rank 1's buffer must hold nothing of
 * what rank 0 sent. */
static int landing_rank(int rank, int n, const ringcc_unique_id_t *id,
                        void *arg) {
  inflight_area_t *a = arg;
  ringcc_comm_t comm;
  float *buf;
  int rc = inflight_setup(rank, n, id, &comm, &buf);
  if (rc != 0)
    return rc;
  if (rank == 0 && !wait_counter(&a->done, 1, 30)) /* rank 1 gave up */
    return h_fail_rank(rank, "rank 1 never gave up");
  double took = inflight_bcast(a, rank, comm, buf);
  if (rank == 1) {
    a->took_s = took;
    for (size_t i = 0; i < INFLIGHT_COUNT; i++) /* the user's again */
      buf[i] = INFLIGHT_UNSET;
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    wait_counter(&a->gave_up, 1, 30); /* rank 0 sends meanwhile */
    usleep(200 * 1000);               /* and the proxy takes what came */
    for (size_t i = 0; i < INFLIGHT_COUNT; i++)
      if (buf[i] != INFLIGHT_UNSET && a->wrong++ == 0)
        a->first_wrong = i;
  } else {
    __atomic_store_n(&a->gave_up, 1, __ATOMIC_RELEASE);
  }
  free(buf);
  ringcc_comm_destroy(comm);
  return 0;
}

Test(faults, failed_receive_gives_the_buffer_back_tcp, .timeout = 60) {
  int err_fd[2];
  inflight_area_t *a = run_inflight(landing_rank, err_fd, "landing", 1);
  char *log = log_read(err_fd[1]);
  cr_expect_eq(a->wrong, 0, "%zu elements of rank 1's buffer were written "
               "after its call had failed (the first: element %zu)", a->wrong,
               a->first_wrong);
  const char *moved = strstr(log, "landing in the user's buffers moved to "
                                  "their slots after the call failed");
  cr_expect_not_null(moved, "rank 1 did not log that it moved its receives "
                     "landing in its buffer:\n%s", log);
  if (moved != NULL) {
    const char *line;
    int len = line_around(log, moved, &line);
    fprintf(stderr, "faults: a failed call with receives landing in the "
            "user's buffer: %.*s; nothing written there afterwards\n", len,
            line);
  }
  free(log);
  close(err_fd[0]);
  close(err_fd[1]);
  h_shared_free(a, sizeof *a);
}

/* ---- ids that are not what they claim, strangers at the rendezvous -------------------- */

static void expect_bad_id(const ringcc_unique_id_t *id, const char *what,
                          const char *reason) {
  /* A 60 s deadline: refused at once is then told apart from waited for
   * the deadline however loaded the machine is. */
  ringcc_config_t cfg = config_with(60000, 0);
  ringcc_comm_t comm = (ringcc_comm_t)&cfg; /* must come back NULL */
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, 2, id, 0, &cfg);
  double took = h_now_s() - t0;
  const char *msg = ringcc_comm_last_error(NULL);
  cr_expect_eq(r, RINGCC_ERR_INVALID_ARGUMENT, "%s: code %d: %s", what, (int)r,
               msg);
  cr_expect_null(comm, "%s: *comm was not cleared", what);
  cr_expect_lt(took, 10.0, "%s: refused only after %.3f s (deadline 60 s)",
               what, took);
  cr_expect(strstr(msg, reason) != NULL, "%s: the message lacks '%s': %s",
            what, reason, msg);
}

Test(faults, init_refuses_garbage_ids, .timeout = 20) {
  ringcc_unique_id_t id, good;
  char err[RCC_ERRLEN], hp[64];
  uint8_t secret[16];

  expect_bad_id(NULL, "a NULL id", "argument 'id' is NULL");
  memset(&id, 0, sizeof id);
  expect_bad_id(&id, "an all-zero id", "bad magic");
  for (int k = 0; k < 200; k++) {
    for (size_t i = 0; i < sizeof id.internal; i += 8) {
      uint64_t h = h_hash3(0x6964, (uint64_t)k, i);
      memcpy(id.internal + i, &h, 8);
    }
    if (k % 2) /* half of them with the right magic: the checksum catches it */
      memcpy(id.internal, "RCCI", 4);
    expect_bad_id(&id, "a random id", "is not a ringcc_unique_id_t");
  }
  /* A good id made for a port nobody listens on, then damaged. */
  snprintf(hp, sizeof hp, "127.0.0.1:%d", 1);
  for (int i = 0; i < 16; i++)
    secret[i] = (uint8_t)(i * 17 + 1);
  cr_assert_eq(rcc_bootstrap_id_from_root(&good, hp, secret, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  id = good;
  memset(id.internal + 64, 0, sizeof id.internal - 64);
  expect_bad_id(&id, "an id cut after 64 bytes", "bad checksum");
  id = good;
  id.internal[40] ^= 0x20; /* a bit of the secret */
  expect_bad_id(&id, "an id with one bit of its secret flipped", "bad checksum");
  id = good;
  id.internal[sizeof id.internal - 1] ^= 1;
  expect_bad_id(&id, "an id with its last byte changed", "bad checksum");
}

/* A well-formed id whose rendezvous is not there: a timeout at the deadline
 * that names the address. */
Test(faults, init_with_nobody_at_the_rendezvous, .timeout = 20) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN], hp[64];
  int fd;
  uint8_t secret[16] = {7};
  cr_assert_eq(rcc_socket_parse_host_port("127.0.0.1:1", &a, err, sizeof err),
               0, "%s", err);
  rcc_socket_addr_set_port(&a, 0);
  cr_assert_eq(rcc_socket_listen(&a, &fd, &a, err, sizeof err), 0, "%s", err);
  close(fd); /* a port that was free a moment ago */
  snprintf(hp, sizeof hp, "127.0.0.1:%d", rcc_socket_addr_port(&a));
  ringcc_unique_id_t id;
  cr_assert_eq(rcc_bootstrap_id_from_root(&id, hp, secret, err, sizeof err), 0);
  ringcc_config_t cfg = config_with(1000, 0);
  ringcc_comm_t comm;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, 2, &id, 1, &cfg);
  double took = h_now_s() - t0;
  const char *msg = ringcc_comm_last_error(NULL);
  cr_expect_eq(r, RINGCC_ERR_TIMEOUT, "code %d: %s", (int)r, msg);
  cr_expect(took > 0.9 && took < 10.0, "gave up after %.2f s (timeout 1 s)",
            took);
  cr_expect(strstr(msg, hp) != NULL, "the message does not name %s: %s", hp,
            msg);
}

/* The processes of the stranger test: ranks 0..2 are real, then an
 * impostor (another secret) and a late-comer (after the rendezvous). */
enum { ID_REAL = 3, ID_IMPOSTOR = 3, ID_LATE = 4 };

typedef struct {
  int strangers_in; /* the parent's strangers are connected (atomic) */
  int formed;       /* real ranks whose communicator is up (atomic) */
  int impostor_done; /* the impostor's init returned (atomic) */
  struct {
    int code;
    double took_s;
    char message[MSG_LEN];
  } who[5];
} stranger_area_t;

/* The id of the same rendezvous with another secret. */
static void impostor_id(const ringcc_unique_id_t *real, ringcc_unique_id_t *out,
                        char *hp, size_t hplen) {
  struct sockaddr_storage root;
  uint8_t secret[16];
  char err[RCC_ERRLEN];
  if (rcc_bootstrap_id_decode(real->internal, sizeof real->internal, &root,
                              secret, err, sizeof err) != RINGCC_SUCCESS)
    _exit(90);
  rcc_socket_addr_str(&root, hp, hplen);
  secret[3] ^= 0x5a;
  if (rcc_bootstrap_id_from_root(out, hp, secret, err, sizeof err) !=
      RINGCC_SUCCESS)
    _exit(91);
}

static int stranger_rank(int who, int nprocs, const ringcc_unique_id_t *id,
                         void *arg) {
  stranger_area_t *a = arg;
  (void)nprocs;
  if (!wait_counter(&a->strangers_in, 1, 20))
    return h_fail_rank(who, "the strangers never came");
  /* The impostor gets a 30 s deadline: turned away at once is then told
   * apart from gave up at its deadline. */
  ringcc_config_t cfg =
      config_with(who < ID_REAL ? 10000 : who == ID_IMPOSTOR ? 30000 : 1500, 0);
  ringcc_unique_id_t use = *id;
  int rank = who < ID_REAL ? who : who == ID_IMPOSTOR ? 2 : 1;
  char hp[80];
  if (who == ID_IMPOSTOR)
    impostor_id(id, &use, hp, sizeof hp);
  if (who == ID_LATE && !wait_counter(&a->formed, ID_REAL, 20))
    return h_fail_rank(who, "the real ranks never formed their communicator");
  /* The last real rank joins only after the impostor tried: otherwise, on a
   * quiet machine, the rendezvous can be over (its port closed) before the
   * impostor arrives, and it would be refused for the wrong reason. */
  if (who == ID_REAL - 1 && !wait_counter(&a->impostor_done, 1, 20))
    return h_fail_rank(who, "the impostor never finished its init");
  ringcc_comm_t comm = NULL;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, ID_REAL, &use, rank, &cfg);
  a->who[who].took_s = h_now_s() - t0;
  a->who[who].code = (int)r;
  snprintf(a->who[who].message, MSG_LEN, "%s", ringcc_comm_last_error(NULL));
  if (who == ID_IMPOSTOR)
    __atomic_store_n(&a->impostor_done, 1, __ATOMIC_RELEASE);
  if (who >= ID_REAL) {
    if (r == RINGCC_SUCCESS)
      ringcc_comm_destroy(comm);
    return 0;
  }
  if (r != RINGCC_SUCCESS)
    return h_fail_rank(who, "init: %s", a->who[who].message);
  __atomic_fetch_add(&a->formed, 1, __ATOMIC_ACQ_REL);
  int32_t got[4099], expect[4099];
  h_ctx_t ctx = {.rank = rank, .nranks = ID_REAL};
  h_fill_input(RINGCC_INT32, RINGCC_SUM, rank, 0, 3, got, 4099);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, ID_REAL, 0, 3, expect, 4099);
  r = ringcc_allreduce(got, got, 4099, RINGCC_INT32, RINGCC_SUM, comm, NULL);
  int rc = r != RINGCC_SUCCESS
               ? h_fail_rank(who, "allreduce: %s", ringcc_comm_last_error(comm))
               : !h_check_elems(&ctx, "allreduce", RINGCC_INT32, got, expect,
                                4099);
  ringcc_comm_destroy(comm);
  return rc;
}

static int stranger_connect(const struct sockaddr_storage *root) {
  char err[RCC_ERRLEN];
  int fd = -1;
  cr_assert_eq(rcc_socket_connect(root, rcc_deadline_after_ms(2000), &fd, err,
                                  sizeof err), 0, "%s", err);
  return fd;
}

/* Strangers at the rendezvous (silent, babbling, public openings left
 * unanswered or followed by a made-up proof),
 * an impostor with a valid-looking id but another secret,
 * and a late-comer once the rendezvous is over: each gets a clear error or
 * is dropped, and the three real ranks still form their communicator. */
Test(faults, strangers_and_impostors_at_the_rendezvous, .timeout = 40) {
  stranger_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  int logfd = log_open();
  int err_fd[5] = {logfd, logfd, logfd, logfd, logfd};
  job_t j;
  job_start(&j, 5, stranger_rank, a, err_fd);

  struct sockaddr_storage root;
  uint8_t secret[16], junk[300];
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_bootstrap_id_decode(j.id.internal, sizeof j.id.internal,
                                       &root, secret, err, sizeof err), 0);
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (uint8_t)(h_mix64(i) >> 7);
  /* A handshake's opening is public (magic, version 2, purpose 1, a nonce);
   * what follows the challenge needs the secret. */
  uint8_t opening[RCC_BOOT_OPEN_BYTES] = {0x52, 0x43, 0x43, 0x41, 0, 2, 0, 1};
  uint8_t answer[RCC_BOOT_PROOF_BYTES + RCC_BOOT_HELLO_BYTES];
  memcpy(answer, junk, sizeof answer); /* a made-up proof */
  answer[RCC_BOOT_PROOF_BYTES] = 0x52; /* then a hello's magic */
  (void)secret;
  int fds[8], nfd = 0;
  fds[nfd++] = stranger_connect(&root); /* silent */
  fds[nfd] = stranger_connect(&root);
  (void)send(fds[nfd++], junk, 5, MSG_NOSIGNAL);
  fds[nfd] = stranger_connect(&root);
  (void)send(fds[nfd++], junk, sizeof junk, MSG_NOSIGNAL);
  fds[nfd] = stranger_connect(&root); /* an opening, then gone */
  (void)send(fds[nfd], opening, sizeof opening, MSG_NOSIGNAL);
  close(fds[nfd]);
  fds[nfd] = stranger_connect(&root); /* an opening, then silent */
  (void)send(fds[nfd++], opening, sizeof opening, MSG_NOSIGNAL);
  fds[nfd] = stranger_connect(&root); /* an opening and a wrong proof */
  (void)send(fds[nfd], opening, sizeof opening, MSG_NOSIGNAL);
  (void)send(fds[nfd++], answer, sizeof answer, MSG_NOSIGNAL);
  close(stranger_connect(&root)); /* connects and leaves */
  double t0 = h_now_s();
  __atomic_store_n(&a->strangers_in, 1, __ATOMIC_RELEASE);

  bool done = job_wait(&j, 30);
  double took = h_now_s() - t0;
  for (int i = 0; i < nfd; i++)
    close(fds[i]);
  if (!done)
    log_dump("strangers", logfd);
  cr_assert(done, "the processes hung");
  expect_all_exited_0(&j, "strangers");
  /* Each real rank got in well under the 5 s a stranger is given to finish
   * its hello: nobody waited for the strangers. */
  for (int r = 0; r < ID_REAL; r++) {
    cr_expect_eq(a->who[r].code, RINGCC_SUCCESS, "real rank %d: %s", r,
                 a->who[r].message);
    cr_expect_lt(a->who[r].took_s, 4.5, "real rank %d's init took %.2f s", r,
                 a->who[r].took_s);
  }
  cr_expect_lt(took, 20, "the run took %.2f s", took);
  const char *imp = a->who[ID_IMPOSTOR].message;
  cr_expect_eq(a->who[ID_IMPOSTOR].code, RINGCC_ERR_NETWORK,
               "the impostor got code %d: %s", a->who[ID_IMPOSTOR].code, imp);
  cr_expect(strstr(imp, "wrong secret") != NULL,
            "the impostor's error does not suggest a wrong secret: %s", imp);
  cr_expect_lt(a->who[ID_IMPOSTOR].took_s, 10.0,
               "the impostor was turned away only after %.2f s (deadline 30 s)",
               a->who[ID_IMPOSTOR].took_s);
  const char *late = a->who[ID_LATE].message;
  cr_expect(a->who[ID_LATE].code == RINGCC_ERR_TIMEOUT ||
                a->who[ID_LATE].code == RINGCC_ERR_NETWORK,
            "the late-comer got code %d: %s", a->who[ID_LATE].code, late);
  cr_expect(strstr(late, "rendezvous") != NULL,
            "the late-comer's error does not mention the rendezvous: %s", late);
  cr_expect_lt(a->who[ID_LATE].took_s, 10.0, "the late-comer gave up after "
               "%.2f s (timeout 1.5 s)", a->who[ID_LATE].took_s);
  fprintf(stderr, "faults: impostor (%.3f s): %s\nfaults: late-comer (%.2f s): "
          "%s\n", a->who[ID_IMPOSTOR].took_s, imp, a->who[ID_LATE].took_s,
          late);
  close(logfd);
  h_shared_free(a, sizeof *a);
}
