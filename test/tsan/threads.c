/*
 * threads.c - the ThreadSanitizer driver (make tsan-check). Criterion cannot
 * start under TSan, so this is a plain program: ranks are threads of one
 * process, sharing one ringcc_get_unique_id, and every collective checks
 * every element against its exact answer. Phases:
 *
 * Every round also runs a group (each rank sending to both neighbours first)
 * and an allreduce as a request polled with ringcc_test (its communicator's
 * progress thread runs it).
 *
 *   shm        4 ranks over shared memory; meanwhile a monitor thread calls
 *              ringcc_comm_report on every communicator (documented as safe
 *              while a collective runs)
 *   two-comms  4 ranks, each with two communicators driven by two threads at
 *              once (8 threads); AllReduce as double binary tree on one, as
 *              the tuner picks (one-shot when small) on the other
 *   tcp        4 ranks with shm_disable = 1: the TCP plugin and its proxy
 *              thread
 *   shrink-tcp as tcp, then ranks 0..2 shrink their communicator without
 *              rank 3 (ringcc_comm_shrink, healthy: the child takes over the
 *              parent's TCP links and its proxy); allreduces alternate on
 *              the child and the parent, then the parent is destroyed (its
 *              proxy handed to the child) and the child runs again
 *
 *   async-error  4 ranks over shared memory; rank 3 withholds the last
 *              allreduce, so the others' calls time out (3 s) while the
 *              monitor thread calls ringcc_comm_get_async_error on every
 *              communicator (as PyTorch's watchdog does): the failing calls
 *              write the sticky error and the message while it reads them
 *
 *   revoke     as async-error, but the deadline is far: once the others
 *              are in the withheld allreduce, the monitor thread revokes
 *              every communicator (ringcc_comm_revoke) while it goes on
 *              asking for reports and async errors; the withheld calls
 *              return RINGCC_ERR_ABORTED, and the revoked communicators
 *              are destroyed
 *
 *   trace      as shm with RINGCC_TRACE (a small ring buffer, so it wraps)
 *              and RINGCC_STATS=time; the monitor also reads
 *              ringcc_comm_stats and sends the process RINGCC_REPORT_SIGNAL
 *              (SIGUSR1), on which every rank's thread writes its trace
 *
 *   direct     4 ranks with algo = direct: the large calls take the
 *              cross-memory-attach path (exec_cma.c), which with ranks as
 *              threads reads peers' buffers with memcpy, ordered by FIFO
 *              exchanges that exec_cma.c annotates for TSan; the small
 *              AllReduces run one-shot on the board (exec_host.c), whose
 *              regions each rank maps at an address of its own
 *   a2av-large 4 ranks over shared memory, then AllToAllv of 5 MiB blocks
 *              on the same buffers three times: read in place (threads
 *              read each other's buffers with memcpy, ordered by the
 *              board's seq words), each sender collapsing its buffer into
 *              huge pages at the second call (lib/mem/thp.c)
 *   registered 4 ranks whose buffers come from ringcc_mem_alloc and are
 *              registered, with algo = zerocopy: every collective but
 *              send/recv and barrier reads and writes its peers' buffers in
 *              place (exec_zc.c; threads use each other's addresses),
 *              ordered by the flags' seq words; a monitor reports meanwhile
 *
 * Exit status 0 when every phase passed; 1 on a wrong result or failed call;
 * TSan's exitcode (66 under make tsan-check) on a report.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcc.h"

#define NRANKS 4
#define MAX_COMMS 2
#define ITERS 40
#define TIMEOUT_MS 300000

static const size_t counts[] = {1, 7, 1000, 70000}; /* 70000: many slots */
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

struct phase {
  const char *name;
  int ncomms;      /* communicators per rank, each with its own thread */
  int shm_disable;
  int monitor;     /* a thread calls ringcc_comm_report and
                      ringcc_comm_get_async_error meanwhile */
  int registered;  /* the buffers are registered (ringcc_mem_alloc) */
  int withhold;    /* 1 + the rank that skips the last allreduce; 0: none */
  int revoke;      /* the monitor revokes the communicators (withhold) */
  int64_t timeout_ms; /* 0: TIMEOUT_MS */
  int iters;          /* rounds; 0: ITERS */
  int trace;       /* RINGCC_TRACE, RINGCC_STATS=time; the monitor also
                      reads the statistics and sends SIGUSR1 */
  int algo[MAX_COMMS]; /* config.algo of each communicator (0: auto) */
  int shrink;      /* after the rounds: the shrink-tcp steps (above) */
  int a2av_large;  /* after the rounds: the a2av-large steps (above) */
  ringcc_unique_id_t ids[MAX_COMMS];
  ringcc_comm_t comms[MAX_COMMS][NRANKS]; /* published for the monitor */
  atomic_int ready, done;
  atomic_int withheld; /* ranks about to make the withheld call */
};

struct worker {
  struct phase *ph;
  int rank, which; /* which communicator of the rank */
  ringcc_comm_t comm;
  int failed;
  char msg[600];
};

static int fail(struct worker *w, const char *what, ringcc_result_t r) {
  if (!w->failed)
    snprintf(w->msg, sizeof(w->msg), "%s comm %d rank %d: %s: %s: %s",
             w->ph->name, w->which, w->rank, what, ringcc_strerror(r),
             ringcc_comm_last_error(w->comm));
  w->failed = 1;
  return -1;
}

static int wrong(struct worker *w, const char *what, size_t i, double got,
                 double want) {
  if (!w->failed)
    snprintf(w->msg, sizeof(w->msg), "%s comm %d rank %d: %s: element %zu "
             "is %.17g, expected %.17g", w->ph->name, w->which, w->rank, what,
             i, got, want);
  w->failed = 1;
  return -1;
}

#define CALL(w, what, call)                                                    \
  do {                                                                         \
    ringcc_result_t r_ = (call);                                               \
    if (r_ != RINGCC_SUCCESS)                                                  \
      return fail((w), (what), r_);                                            \
  } while (0)

/* One round of every collective with count elements per rank (block). */
static int round_of(struct worker *w, int iter, size_t count, int32_t *a,
                    int32_t *b, float *f) {
  const int n = NRANKS, me = w->rank;
  const int32_t tri = n * (n + 1) / 2;

  /* allreduce int32 sum, out of place */
  for (size_t i = 0; i < count; i++)
    a[i] = (me + 1) * (int32_t)(i % 97 + 1) + iter;
  CALL(w, "allreduce sum", ringcc_allreduce(a, b, count, RINGCC_INT32,
                                            RINGCC_SUM, w->comm, NULL));
  for (size_t i = 0; i < count; i++)
    if (b[i] != tri * (int32_t)(i % 97 + 1) + n * iter)
      return wrong(w, "allreduce sum", i, b[i],
                   tri * (int32_t)(i % 97 + 1) + n * iter);

  /* allreduce float32 max, in place */
  for (size_t i = 0; i < count; i++)
    f[i] = (float)(me * 3 + (int)(i % 5));
  CALL(w, "allreduce max", ringcc_allreduce(RINGCC_IN_PLACE, f, count,
                                            RINGCC_FLOAT32, RINGCC_MAX,
                                            w->comm, NULL));
  for (size_t i = 0; i < count; i++)
    if (f[i] != (float)((n - 1) * 3 + (int)(i % 5)))
      return wrong(w, "allreduce max", i, f[i], (n - 1) * 3 + (int)(i % 5));

  /* allgather */
  for (size_t i = 0; i < count; i++)
    a[i] = me * 100000 + (int32_t)(i % 50000) + iter;
  CALL(w, "allgather", ringcc_allgather(a, b, count, RINGCC_INT32, w->comm,
                                        NULL));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++)
      if (b[r * count + i] != r * 100000 + (int32_t)(i % 50000) + iter)
        return wrong(w, "allgather", r * count + i, b[r * count + i],
                     r * 100000 + (int32_t)(i % 50000) + iter);

  /* bcast from a root that moves */
  int root = iter % n;
  for (size_t i = 0; i < count; i++)
    a[i] = me == root ? root * 7 + (int32_t)i + iter : -1;
  CALL(w, "bcast", ringcc_bcast(a, count, RINGCC_INT32, root, w->comm, NULL));
  for (size_t i = 0; i < count; i++)
    if (a[i] != root * 7 + (int32_t)i + iter)
      return wrong(w, "bcast", i, a[i], root * 7 + (int32_t)i + iter);

  /* reduce_scatter: block r of rank me holds (me+1)*(r+1) + i */
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++)
      b[r * count + i] = (me + 1) * (r + 1) + (int32_t)(i % 1000);
  CALL(w, "reduce_scatter", ringcc_reduce_scatter(b, a, count, RINGCC_INT32,
                                                  RINGCC_SUM, w->comm, NULL));
  for (size_t i = 0; i < count; i++)
    if (a[i] != tri * (me + 1) + n * (int32_t)(i % 1000))
      return wrong(w, "reduce_scatter", i, a[i],
                   tri * (me + 1) + n * (int32_t)(i % 1000));

  /* send/recv around the ring; even ranks send first, so no cycle waits */
  int next = (me + 1) % n, prev = (me - 1 + n) % n;
  for (size_t i = 0; i < count; i++)
    a[i] = me * 31 + (int32_t)(i % 1000) + iter;
  if (me % 2 == 0)
    CALL(w, "send", ringcc_send(a, count, RINGCC_INT32, next, w->comm, NULL));
  CALL(w, "recv", ringcc_recv(b, count, RINGCC_INT32, prev, w->comm, NULL));
  if (me % 2 != 0)
    CALL(w, "send", ringcc_send(a, count, RINGCC_INT32, next, w->comm, NULL));
  for (size_t i = 0; i < count; i++)
    if (b[i] != prev * 31 + (int32_t)(i % 1000) + iter)
      return wrong(w, "recv", i, b[i], prev * 31 + (int32_t)(i % 1000) + iter);

  /* reduce int32 min to the root */
  for (size_t i = 0; i < count; i++)
    a[i] = (n - me) * 1000 + (int32_t)(i % 1000);
  CALL(w, "reduce", ringcc_reduce(a, b, count, RINGCC_INT32, RINGCC_MIN, root,
                                  w->comm, NULL));
  if (me == root)
    for (size_t i = 0; i < count; i++)
      if (b[i] != 1000 + (int32_t)(i % 1000))
        return wrong(w, "reduce", i, b[i], 1000 + (int32_t)(i % 1000));

  /* alltoall: block j of rank me goes to rank j */
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < count; i++)
      a[j * count + i] = me * 1000 + j * 10 + (int32_t)(i % 10);
  CALL(w, "alltoall", ringcc_alltoall(a, b, count, RINGCC_INT32, w->comm,
                                      NULL));
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < count; i++)
      if (b[j * count + i] != j * 1000 + me * 10 + (int32_t)(i % 10))
        return wrong(w, "alltoall", j * count + i, b[j * count + i],
                     j * 1000 + me * 10 + (int32_t)(i % 10));

  /* gather to the root, then scatter the same blocks back (70000 elements,
   * 273 KiB a block: by cross-memory attach on one host, where peers write
   * into and read from the root's buffers, ordered by FIFO exchanges that
   * exec_cma.c annotates for TSan) */
  for (size_t i = 0; i < count; i++)
    a[i] = me * 1000 + (int32_t)(i % 1000) + iter;
  CALL(w, "gather", ringcc_gather(a, b, count, RINGCC_INT32, root, w->comm,
                                  NULL));
  if (me == root)
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < count; i++)
        if (b[j * count + i] != j * 1000 + (int32_t)(i % 1000) + iter)
          return wrong(w, "gather", j * count + i, b[j * count + i],
                       j * 1000 + (int32_t)(i % 1000) + iter);
  memset(a, 0, count * sizeof(*a));
  CALL(w, "scatter", ringcc_scatter(b, a, count, RINGCC_INT32, root, w->comm,
                                    NULL));
  for (size_t i = 0; i < count; i++)
    if (a[i] != me * 1000 + (int32_t)(i % 1000) + iter)
      return wrong(w, "scatter", i, a[i], me * 1000 + (int32_t)(i % 1000) + iter);

  /* a group: every rank sends to both neighbours first, then receives */
  for (size_t i = 0; i < count; i++)
    a[i] = me * 31 + (int32_t)(i % 1000) + iter;
  CALL(w, "group_start", ringcc_group_start());
  CALL(w, "send", ringcc_send(a, count, RINGCC_INT32, next, w->comm, NULL));
  CALL(w, "send", ringcc_send(a, count, RINGCC_INT32, prev, w->comm, NULL));
  CALL(w, "recv", ringcc_recv(b, count, RINGCC_INT32, prev, w->comm, NULL));
  CALL(w, "recv", ringcc_recv(b + count, count, RINGCC_INT32, next, w->comm,
                              NULL));
  CALL(w, "group_end", ringcc_group_end());
  for (size_t i = 0; i < 2 * count; i++) {
    int from = i < count ? prev : next;
    int32_t want = from * 31 + (int32_t)(i % count % 1000) + iter;
    if (b[i] != want)
      return wrong(w, "grouped recv", i, b[i], want);
  }

  /* With the largest count, a grouped exchange of NRANKS times it (1.1 MB,
   * past the FIFO): read in place (exec_p2p_place.c), another thread's
   * buffer read, then the slot handed back. */
  if (count == counts[NCOUNTS - 1]) {
    size_t big = count * NRANKS;
    for (size_t i = 0; i < big; i++)
      a[i] = me * 31 + (int32_t)(i % 1000) + iter;
    CALL(w, "group_start", ringcc_group_start());
    CALL(w, "send", ringcc_send(a, big, RINGCC_INT32, next, w->comm, NULL));
    CALL(w, "recv", ringcc_recv(b, big, RINGCC_INT32, prev, w->comm, NULL));
    CALL(w, "group_end", ringcc_group_end());
    for (size_t i = 0; i < big; i++)
      if (b[i] != prev * 31 + (int32_t)(i % 1000) + iter)
        return wrong(w, "recv in place", i, b[i],
                     prev * 31 + (int32_t)(i % 1000) + iter);
  }

  /* an allreduce as a request (the progress thread), polled */
  ringcc_request_t req;
  int done = 0;
  for (size_t i = 0; i < count; i++)
    a[i] = (me + 1) * (int32_t)(i % 97 + 1);
  CALL(w, "group_start", ringcc_group_start());
  CALL(w, "allreduce", ringcc_allreduce(a, b, count, RINGCC_INT32, RINGCC_SUM,
                                        w->comm, NULL));
  CALL(w, "group_end_async", ringcc_group_end_async(&req));
  while (!done) {
    CALL(w, "test", ringcc_test(req, &done));
    if (!done)
      sched_yield();
  }
  for (size_t i = 0; i < count; i++)
    if (b[i] != tri * (int32_t)(i % 97 + 1))
      return wrong(w, "allreduce request", i, b[i], tri * (int32_t)(i % 97 + 1));

  CALL(w, "barrier", ringcc_barrier(w->comm, NULL));
  return 0;
}

/* The allreduce one rank withholds: it must time out, and the async error
 * (read by the monitor meanwhile) must say so afterwards. */
static void withheld_call(struct worker *w, int32_t *a, int32_t *b) {
  atomic_fetch_add(&w->ph->withheld, 1);
  ringcc_result_t r = ringcc_allreduce(a, b, 16, RINGCC_INT32, RINGCC_SUM,
                                       w->comm, NULL);
  ringcc_result_t async = RINGCC_SUCCESS;
  ringcc_result_t q = ringcc_comm_get_async_error(w->comm, &async);
  ringcc_result_t want = w->ph->revoke ? RINGCC_ERR_ABORTED
                                       : RINGCC_ERR_TIMEOUT;
  if (r != want || q != RINGCC_SUCCESS || async != want) {
    snprintf(w->msg, sizeof(w->msg), "%s rank %d: the withheld allreduce "
             "returned %s, then the async error %s (want %s twice): %s",
             w->ph->name, w->rank, ringcc_strerror(r),
             ringcc_strerror(async), ringcc_strerror(want),
             ringcc_comm_last_error(w->comm));
    w->failed = 1;
  }
}

static void shrink_steps(struct worker *w);
static void a2av_large_steps(struct worker *w);

static void *worker_main(void *p) {
  struct worker *w = p;
  struct phase *ph = w->ph;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = ph->timeout_ms > 0 ? ph->timeout_ms : TIMEOUT_MS;
  cfg.shm_disable = ph->shm_disable;
  cfg.algo = ph->algo[w->which];
  ringcc_result_t r = ringcc_comm_init(&w->comm, NRANKS, &ph->ids[w->which],
                                       w->rank, &cfg);
  if (r != RINGCC_SUCCESS) {
    fail(w, "comm_init", r);
    w->comm = NULL;
    atomic_fetch_add(&ph->ready, 1);
    return NULL;
  }
  ph->comms[w->which][w->rank] = w->comm;
  atomic_fetch_add(&ph->ready, 1); /* release: the monitor may use comm */

  size_t max = counts[NCOUNTS - 1] * NRANKS;
  void *buf[3] = {NULL, NULL, NULL};
  ringcc_reg_t reg[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3 && !w->failed; k++) {
    if (!ph->registered) {
      buf[k] = malloc(max * sizeof(int32_t));
      if (buf[k] == NULL) {
        snprintf(w->msg, sizeof(w->msg), "out of memory");
        w->failed = 1;
      }
      continue;
    }
    r = ringcc_mem_alloc(NULL, max * sizeof(int32_t), &buf[k]);
    if (r == RINGCC_SUCCESS)
      r = ringcc_comm_register(w->comm, buf[k], max * sizeof(int32_t),
                               &reg[k]);
    if (r != RINGCC_SUCCESS)
      fail(w, "mem_alloc/comm_register", r);
  }
  int iters = ph->iters > 0 ? ph->iters : ITERS;
  for (int iter = 0; iter < iters && !w->failed; iter++)
    if (round_of(w, iter, counts[iter % NCOUNTS], buf[0], buf[1], buf[2]) != 0)
      break;
  if (ph->withhold && !w->failed && w->rank != ph->withhold - 1)
    withheld_call(w, buf[0], buf[1]);
  if (ph->shrink && !w->failed)
    shrink_steps(w);
  if (ph->a2av_large && !w->failed)
    a2av_large_steps(w);
  for (int k = 0; k < 3; k++) {
    if (!ph->registered) {
      free(buf[k]);
      continue;
    }
    if (reg[k] != NULL && !w->failed &&
        (r = ringcc_comm_deregister(w->comm, reg[k])) != RINGCC_SUCCESS)
      fail(w, "comm_deregister", r);
    if (buf[k] != NULL && (r = ringcc_mem_free(buf[k])) != RINGCC_SUCCESS)
      fail(w, "mem_free", r);
  }
  return NULL;
}

/* AllToAllv of 5 MiB blocks (each holds a whole 2 MiB huge page) on the
 * same buffers A2AV_CALLS times, the contents new each time: the blocks
 * are read in place, and from the second call on the ranks' threads
 * collapse their send buffers' pages (lib/mem/thp.c) while the others run
 * their own calls. */
#define A2AV_BLOCK ((size_t)5 << 18) /* int32: 5 MiB */
#define A2AV_CALLS 3
static void a2av_large_steps(struct worker *w) {
  const int n = NRANKS, me = w->rank;
  size_t total = A2AV_BLOCK * n, sc[NRANKS], sd[NRANKS], rc[NRANKS],
         rd[NRANKS];
  int32_t *s = malloc(total * sizeof(int32_t)),
          *r = malloc(total * sizeof(int32_t));
  if (s == NULL || r == NULL) {
    snprintf(w->msg, sizeof(w->msg), "a2av-large: out of memory");
    w->failed = 1;
  }
  for (int j = 0; j < n; j++) {
    sc[j] = rc[j] = A2AV_BLOCK;
    sd[j] = (size_t)(n - 1 - j) * A2AV_BLOCK; /* reversed */
    rd[j] = (size_t)j * A2AV_BLOCK;
  }
  for (int call = 0; call < A2AV_CALLS && !w->failed; call++) {
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < A2AV_BLOCK; i++)
        s[sd[j] + i] = (int32_t)((me * 8 + j) * 1000003 + (int)i + call);
    ringcc_result_t res = ringcc_alltoallv(s, sc, sd, r, rc, rd, RINGCC_INT32,
                                           w->comm, NULL);
    if (res != RINGCC_SUCCESS) {
      fail(w, "alltoallv (large blocks)", res);
      break;
    }
    for (int j = 0; j < n && !w->failed; j++)
      for (size_t i = 0; i < A2AV_BLOCK; i++) {
        int32_t want = (int32_t)((j * 8 + me) * 1000003 + (int)i + call);
        if (r[rd[j] + i] != want) {
          wrong(w, "alltoallv (large blocks)", rd[j] + i, r[rd[j] + i], want);
          break;
        }
      }
  }
  free(s);
  free(r);
}

/* An allreduce of count int32 on comm (rank me of m), every element
 * checked: 0, or 1 with w->msg. */
static int checked_allreduce(struct worker *w, ringcc_comm_t comm, int me,
                             int m, size_t count, int salt, const char *what) {
  int32_t *x = malloc(count * sizeof(int32_t));
  if (x == NULL)
    return snprintf(w->msg, sizeof(w->msg), "out of memory"), w->failed = 1;
  for (size_t k = 0; k < count; k++)
    x[k] = me * 1000 + (int32_t)(k % 977) + salt;
  ringcc_result_t r = ringcc_allreduce(x, x, count, RINGCC_INT32, RINGCC_SUM,
                                       comm, NULL);
  if (r != RINGCC_SUCCESS) {
    free(x);
    snprintf(w->msg, sizeof(w->msg), "%s rank %d: allreduce on the %s: %s: "
             "%s", w->ph->name, w->rank, what, ringcc_strerror(r),
             ringcc_comm_last_error(comm));
    return w->failed = 1;
  }
  for (size_t k = 0; k < count && !w->failed; k++) {
    int32_t want = 1000 * m * (m - 1) / 2 + m * ((int32_t)(k % 977) + salt);
    if (x[k] != want) {
      snprintf(w->msg, sizeof(w->msg), "%s rank %d: allreduce on the %s: "
               "element %zu is %d, expected %d", w->ph->name, w->rank, what,
               k, (int)x[k], (int)want);
      w->failed = 1;
    }
  }
  free(x);
  return w->failed;
}

/* The shrink-tcp steps: the parent is destroyed here (w->comm NULL). */
static void shrink_steps(struct worker *w) {
  int gone = NRANKS - 1;
  ringcc_comm_t child = NULL;
  if (w->rank != gone) {
    ringcc_result_t r = ringcc_comm_shrink(w->comm, &gone, 1, &child);
    if (r != RINGCC_SUCCESS) {
      fail(w, "comm_shrink", r);
      return;
    }
    checked_allreduce(w, child, w->rank, NRANKS - 1, 70000, 1, "child");
  }
  if (!w->failed)
    checked_allreduce(w, w->comm, w->rank, NRANKS, 70000, 2, "parent");
  if (!w->failed && child != NULL)
    checked_allreduce(w, child, w->rank, NRANKS - 1, 1000, 3, "child");
  ringcc_comm_destroy(w->comm);
  w->ph->comms[w->which][w->rank] = NULL;
  w->comm = NULL;
  if (!w->failed && child != NULL)
    checked_allreduce(w, child, w->rank, NRANKS - 1, 70000, 4,
                      "child, its parent destroyed");
  if (child != NULL)
    ringcc_comm_destroy(child);
}

/* Calls ringcc_comm_report on every communicator until the workers finish. */
static void *monitor_main(void *p) {
  struct phase *ph = p;
  int nworkers = NRANKS * ph->ncomms;
  char buf[1024];
  while (atomic_load(&ph->ready) < nworkers)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  unsigned long reports = 0, asks = 0, errors = 0, stats = 0, signals = 0;
  int revoked = 0;
  while (!atomic_load(&ph->done)) {
    if (ph->revoke && !revoked &&
        atomic_load(&ph->withheld) == NRANKS - 1) {
      nanosleep(&(struct timespec){0, 100000000}, NULL); /* into the wait */
      for (int r = 0; r < NRANKS; r++)
        if (ringcc_comm_revoke(ph->comms[0][r]) != RINGCC_SUCCESS)
          printf("  monitor: ringcc_comm_revoke of rank %d: %s\n", r,
                 ringcc_comm_last_error(ph->comms[0][r]));
      revoked = 1;
    }
    for (int c = 0; c < ph->ncomms; c++)
      for (int r = 0; r < NRANKS; r++) {
        ringcc_comm_t comm = ph->comms[c][r];
        ringcc_result_t async = RINGCC_SUCCESS;
        ringcc_comm_stats_t st = RINGCC_COMM_STATS_INIT;
        ringcc_stats_edge_t edges[NRANKS];
        st.edges = edges;
        st.edges_len = NRANKS;
        if (comm == NULL)
          continue;
        if (ringcc_comm_report(comm, buf, sizeof(buf)) == RINGCC_SUCCESS)
          reports++;
        if (ph->trace && ringcc_comm_stats(comm, &st) == RINGCC_SUCCESS)
          stats++;
        if (ringcc_comm_get_async_error(comm, &async) == RINGCC_SUCCESS)
          asks++;
        if (async != RINGCC_SUCCESS) {
          errors++;
          /* The message is complete before the code is visible. */
          if (strstr(ringcc_comm_last_error(comm),
                     ph->revoke ? "revoked" : "timed out") == NULL)
            printf("  monitor: async %s with the message \"%s\"\n",
                   ringcc_strerror(async), ringcc_comm_last_error(comm));
        }
      }
    if (ph->trace && reports % 256 == 0) { /* the ranks write their traces */
      kill(getpid(), SIGUSR1);
      signals++;
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  }
  printf("  monitor: %lu reports, %lu async-error queries (%lu saw an "
         "error), %lu statistics, %lu signals taken while collectives ran\n",
         reports, asks, errors, stats, signals);
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The trace phase's files: one per rank, written at least at destroy. */
static int check_traces(const char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "test $(ls %s/ringcc-trace-*-r*.json | wc -l) "
           "-eq %d && grep -l '\"written_at\":\"destroy\"' %s/*.json | wc -l "
           "| grep -qx %d", dir, NRANKS, dir, NRANKS);
  int bad = system(cmd) != 0;
  if (bad)
    printf("FAIL trace: not %d trace files written at destroy in %s\n",
           NRANKS, dir);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0)
    printf("(could not remove %s)\n", dir);
  return bad;
}

static int run_phase(struct phase *ph) {
  struct worker w[MAX_COMMS * NRANKS];
  pthread_t tid[MAX_COMMS * NRANKS], mon;
  int n = NRANKS * ph->ncomms, failed = 0;
  double start = now_s();
  char dir[64];
  if (ph->trace) {
    snprintf(dir, sizeof(dir), "/tmp/ringcc-tsan-trace-%d", (int)getpid());
    setenv("RINGCC_TRACE", dir, 1);
    setenv("RINGCC_TRACE_EVENTS", "4096", 1);
    setenv("RINGCC_STATS", "time", 1);
  }

  printf("== phase %s: %d ranks x %d communicator%s, shm_disable=%d, %d "
         "rounds\n", ph->name, NRANKS, ph->ncomms, ph->ncomms > 1 ? "s" : "",
         ph->shm_disable, ph->iters > 0 ? ph->iters : ITERS);
  fflush(stdout);
  for (int c = 0; c < ph->ncomms; c++) {
    ringcc_result_t r = ringcc_get_unique_id(&ph->ids[c]);
    if (r != RINGCC_SUCCESS) {
      printf("FAIL %s: ringcc_get_unique_id: %s: %s\n", ph->name,
             ringcc_strerror(r), ringcc_comm_last_error(NULL));
      return 1;
    }
  }
  if (ph->monitor && pthread_create(&mon, NULL, monitor_main, ph) != 0) {
    printf("FAIL %s: cannot start the monitor thread\n", ph->name);
    return 1;
  }
  for (int i = 0; i < n; i++) {
    w[i] = (struct worker){.ph = ph, .rank = i % NRANKS, .which = i / NRANKS};
    if (pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0) {
      printf("FAIL %s: cannot start thread %d\n", ph->name, i);
      exit(1); /* the started ranks would wait for this one */
    }
  }
  for (int i = 0; i < n; i++)
    pthread_join(tid[i], NULL);
  atomic_store(&ph->done, 1);
  if (ph->monitor)
    pthread_join(mon, NULL);
  for (int i = 0; i < n; i++) {
    if (w[i].failed) {
      printf("FAIL %s\n", w[i].msg);
      failed = 1;
    }
    if (w[i].comm != NULL && ringcc_comm_destroy(w[i].comm) != RINGCC_SUCCESS) {
      printf("FAIL %s comm %d rank %d: comm_destroy: %s\n", ph->name,
             w[i].which, w[i].rank, ringcc_comm_last_error(w[i].comm));
      failed = 1;
    }
  }
  if (ph->trace) {
    unsetenv("RINGCC_TRACE");
    unsetenv("RINGCC_TRACE_EVENTS");
    unsetenv("RINGCC_STATS");
    failed |= check_traces(dir);
  }
  printf("%s phase %s (%.1f s)\n", failed ? "FAIL" : "ok", ph->name,
         now_s() - start);
  fflush(stdout);
  return failed;
}

int main(void) {
  static struct phase phases[] = {
      {.name = "shm", .ncomms = 1, .shm_disable = 0, .monitor = 1},
      {.name = "two-comms",
       .ncomms = 2,
       .shm_disable = 0,
       .algo = {RINGCC_ALGO_TREE, RINGCC_ALGO_AUTO}},
      {.name = "tcp", .ncomms = 1, .shm_disable = 1, .monitor = 1},
      {.name = "shrink-tcp", .ncomms = 1, .shm_disable = 1, .iters = 4,
       .shrink = 1},
      {.name = "async-error",
       .ncomms = 1,
       .shm_disable = 0,
       .monitor = 1,
       .withhold = NRANKS, /* rank 3 */
       .timeout_ms = 3000,
       .iters = 2},
      {.name = "revoke",
       .ncomms = 1,
       .shm_disable = 0,
       .monitor = 1,
       .withhold = NRANKS,
       .revoke = 1,
       .timeout_ms = 120000,
       .iters = 2},
      {.name = "trace", .ncomms = 1, .shm_disable = 0, .monitor = 1,
       .trace = 1},
      {.name = "direct",
       .ncomms = 1,
       .shm_disable = 0,
       .algo = {RINGCC_ALGO_DIRECT}},
      {.name = "a2av-large", .ncomms = 1, .shm_disable = 0, .iters = 2,
       .a2av_large = 1},
      {.name = "registered",
       .ncomms = 1,
       .shm_disable = 0,
       .monitor = 1,
       .registered = 1,
       .algo = {RINGCC_ALGO_ZEROCOPY}},
  };
  int failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Read at the first init: the trace phase sends this signal. */
  setenv("RINGCC_REPORT_SIGNAL", "USR1", 1);
  for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
    failed |= run_phase(&phases[i]);
  printf("tsan driver: %s\n", failed ? "FAILED" : "all phases passed");
  return failed;
}
