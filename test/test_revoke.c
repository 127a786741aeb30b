/*
 * test_revoke.c - ringcc_comm_revoke, with real ranks over shared memory and
 * TCP: calls stuck on a rank that does not come return with
 * RINGCC_ERR_ABORTED once a second thread revokes; requests in flight
 * complete with it; later calls fail; the revoked communicator can still be
 * shrunk, split and destroyed, and the new communicator gives exact
 * results. Also the bad arguments of revoke and of the device queries
 * (ringcc_comm_cuda_device, ringcc_cuda_current_device,
 * ringcc_mem_alloc_device).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MAX_RANKS 8

/* What the ranks tell each other and the parent. */
typedef struct {
  int tcp;
  volatile int returned;       /* ranks whose stuck call came back */
  double stuck_s[MAX_RANKS];   /* how long that call took */
  volatile int revoked;        /* rank 0 revoked (requests test) */
} area_t;

static ringcc_config_t config_of(const area_t *a) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = a->tcp;
  cfg.timeout_ms = 60000; /* the test's deadline is revoke, not this */
  return cfg;
}

/* An exact allreduce of m int32 elements on comm (rank me of p). */
static int exact_allreduce(h_ctx_t *h, ringcc_comm_t comm, int me, int p,
                           size_t m) {
  int32_t *x = h_xmalloc(m * 4), *want = h_xmalloc(m * 4);
  h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, 5, x, m);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, p, 0, 5, want, m);
  ringcc_result_t r = ringcc_allreduce(x, x, m, RINGCC_INT32, RINGCC_SUM,
                                       comm, NULL);
  int bad = 0;
  if (r != RINGCC_SUCCESS)
    bad = h_fail(h, "allreduce on the new communicator: %s (%s)",
                 ringcc_strerror(r), ringcc_comm_last_error(comm));
  for (size_t i = 0; i < m && !bad; i++)
    if (x[i] != want[i])
      bad = h_fail(h, "allreduce on the new communicator: element %zu is %d, "
                   "expected %d", i, x[i], want[i]);
  free(x);
  free(want);
  return bad;
}

/* A call's failure, checked: code and a word of its message. */
static int expect(h_ctx_t *h, ringcc_comm_t comm, ringcc_result_t got,
                  ringcc_result_t want, const char *words, const char *what) {
  const char *msg = ringcc_comm_last_error(comm);
  if (got != want)
    return h_fail(h, "%s returned %s, expected %s (%s)", what,
                  ringcc_strerror(got), ringcc_strerror(want), msg);
  if (words != NULL && strstr(msg, words) == NULL)
    return h_fail(h, "%s: the message does not say '%s': %s", what, words,
                  msg);
  return 0;
}

static void *revoke_later(void *p) {
  ringcc_comm_t comm = p;
  h_sleep_ms(300);
  return (void *)(intptr_t)ringcc_comm_revoke(comm);
}

/* ---- a call stuck on a rank that does not come -------------------------- */

/* Ranks 0..n-2 are in an allreduce; rank n-1 is stuck in a receive from
 * rank 0, which never sends. A thread of each rank revokes after 300 ms:
 * every stuck call returns ABORTED. Then the checks of a revoked
 * communicator, and ranks 0..n-2 shrink it without rank n-1. */
static int body_stuck(h_ctx_t *h) {
  area_t *a = h->arg;
  ringcc_comm_t comm = h->comm;
  int n = h->nranks, me = h->rank;
  size_t m = 1 << 18;
  float *x = calloc(m, sizeof(*x));
  pthread_t t;
  double t0 = h_now_s(); /* the revoke comes 0.3 s after this, or later */
  if (x == NULL || pthread_create(&t, NULL, revoke_later, comm) != 0)
    return h_fail(h, "no memory or no thread");
  ringcc_result_t r = me == n - 1
      ? ringcc_recv(x, m, RINGCC_FLOAT32, 0, comm, NULL)
      : ringcc_allreduce(x, x, m, RINGCC_FLOAT32, RINGCC_SUM, comm, NULL);
  a->stuck_s[me] = h_now_s() - t0;
  __atomic_fetch_add(&a->returned, 1, __ATOMIC_ACQ_REL);
  void *rv;
  pthread_join(t, &rv);
  free(x);
  int bad = expect(h, comm, r, RINGCC_ERR_ABORTED, "revoked",
                   "the stuck call");
  if ((ringcc_result_t)(intptr_t)rv != RINGCC_SUCCESS)
    return h_fail(h, "ringcc_comm_revoke (second thread): %s (%s)",
                  ringcc_strerror((ringcc_result_t)(intptr_t)rv),
                  ringcc_comm_last_error(comm));
  /* revoked: later calls fail, the state says so, revoke again refused */
  int32_t v = 1;
  ringcc_result_t async = RINGCC_SUCCESS;
  bad |= expect(h, comm, ringcc_allreduce(&v, &v, 1, RINGCC_INT32, RINGCC_SUM,
                                          comm, NULL),
                RINGCC_ERR_ABORTED, NULL, "an allreduce after the revoke");
  bad |= expect(h, comm, ringcc_comm_revoke(comm), RINGCC_ERR_INVALID_USAGE,
                "revoked already", "a second revoke");
  if (!h_ok(h, ringcc_comm_get_async_error(comm, &async), "get_async_error"))
    bad = 1;
  else if (async != RINGCC_ERR_ABORTED)
    bad = h_fail(h, "after the revoke the async error is %s",
                 ringcc_strerror(async));
  /* Every rank stays until every stuck call came back: peers are not told
   * of a revoke, so a rank whose own revoke thread is late (a loaded
   * machine) must not see the others destroy comm first (its stuck call
   * would then fail with the destroy, not with ABORTED). */
  for (int i = 0; i < 30000 && a->returned < n; i++)
    h_sleep_ms(1);
  if (me == n - 1)
    return bad; /* the harness destroys the revoked communicator */
  int out = n - 1;
  ringcc_comm_t s = NULL;
  if (!h_ok(h, ringcc_comm_shrink(comm, &out, 1, &s), "shrink after revoke"))
    return 1;
  int size = 0, rank = -1;
  if (!h_ok(h, ringcc_comm_size(s, &size), "size") ||
      !h_ok(h, ringcc_comm_rank(s, &rank), "rank") || size != n - 1 ||
      rank != me)
    bad = h_fail(h, "the shrunk communicator: rank %d of %d", rank, size);
  bad = bad || exact_allreduce(h, s, me, n - 1, 100000);
  return bad | !h_ok(h, ringcc_comm_destroy(s), "destroy the shrunk one");
}

static void stuck_run(int n, int tcp) {
  area_t *a = h_shared_alloc(sizeof(*a));
  a->tcp = tcp;
  ringcc_config_t cfg = config_of(a);
  h_run_opts_t o = {.nranks = n, .body = body_stuck, .arg = a,
                    .config = &cfg, .timeout_s = 90,
                    .name = "stuck call, revoke, shrink"};
  cr_assert(h_run(&o));
  for (int r = 0; r < n; r++) /* revoked at 0.3 s: back in well under 10 */
    cr_expect(a->stuck_s[r] >= 0.3 && a->stuck_s[r] < 10,
              "rank %d: the stuck call returned after %.2f s", r,
              a->stuck_s[r]);
  h_shared_free(a, sizeof(*a));
}

Test(revoke, stuck_call_then_shrink_shm_n3, .timeout = 120) { stuck_run(3, 0); }
Test(revoke, stuck_call_then_shrink_tcp_n3, .timeout = 120) { stuck_run(3, 1); }
Test(revoke, stuck_call_then_shrink_shm_n5, .timeout = 120) { stuck_run(5, 0); }

/* ---- requests in flight --------------------------------------------------- */

/* Rank 0 posts two requests (an allreduce, a bcast) that rank 1 does not
 * join, revokes from its own thread while they are in flight: both
 * complete with ABORTED, and so does a request posted after. Rank 1 then
 * revokes an idle communicator, and both split the revoked one and run an
 * exact allreduce on the result. */
static int body_requests(h_ctx_t *h) {
  area_t *a = h->arg;
  ringcc_comm_t comm = h->comm;
  int bad = 0;
  static float x[1 << 16], y[1 << 16];
  if (h->rank == 0) {
    ringcc_request_t q1, q2, q3;
    int done = 0;
    if (!h_ok(h, ringcc_group_start(), "group_start") ||
        !h_ok(h, ringcc_allreduce(x, x, 1 << 16, RINGCC_FLOAT32, RINGCC_SUM,
                                  comm, NULL), "allreduce (grouped)") ||
        !h_ok(h, ringcc_group_end_async(&q1), "group_end_async 1") ||
        !h_ok(h, ringcc_group_start(), "group_start") ||
        !h_ok(h, ringcc_bcast(y, 1 << 16, RINGCC_FLOAT32, 0, comm, NULL),
              "bcast (grouped)") ||
        !h_ok(h, ringcc_group_end_async(&q2), "group_end_async 2"))
      return 1;
    h_sleep_ms(200);
    if (!h_ok(h, ringcc_test(q1, &done), "test before the revoke") || done)
      return h_fail(h, "the first request is done before rank 1 joined");
    double t0 = h_now_s();
    if (!h_ok(h, ringcc_comm_revoke(comm), "revoke with requests in flight"))
      return 1;
    double took = h_now_s() - t0;
    if (took > 10)
      bad = h_fail(h, "revoke took %.2f s", took);
    ringcc_result_t r1 = ringcc_test(q1, &done);
    if (!done)
      return h_fail(h, "after the revoke the first request is not done");
    bad |= expect(h, comm, r1, RINGCC_ERR_ABORTED, NULL, "the first request");
    bad |= expect(h, comm, ringcc_wait(q2), RINGCC_ERR_ABORTED, NULL,
                  "the second request");
    if (!h_ok(h, ringcc_group_start(), "group_start") ||
        !h_ok(h, ringcc_allreduce(x, x, 16, RINGCC_FLOAT32, RINGCC_SUM, comm,
                                  NULL), "allreduce (grouped, revoked)") ||
        !h_ok(h, ringcc_group_end_async(&q3), "group_end_async 3"))
      return 1;
    bad |= expect(h, comm, ringcc_wait(q3), RINGCC_ERR_ABORTED, NULL,
                  "a request posted after the revoke");
    __atomic_store_n(&a->revoked, 1, __ATOMIC_RELEASE);
  } else {
    for (int i = 0; i < 30000 && !__atomic_load_n(&a->revoked, __ATOMIC_ACQUIRE);
         i++)
      h_sleep_ms(1);
    bad = !h_ok(h, ringcc_comm_revoke(comm), "an idle revoke");
  }
  ringcc_comm_t s = NULL;
  if (!h_ok(h, ringcc_comm_split(comm, 0, -h->rank, &s), "split after revoke"))
    return 1;
  int rank = -1;
  if (!h_ok(h, ringcc_comm_rank(s, &rank), "rank") ||
      rank != h->nranks - 1 - h->rank)
    bad = h_fail(h, "split by key -rank: rank %d", rank);
  bad = bad || exact_allreduce(h, s, rank, h->nranks, 70000);
  return bad | !h_ok(h, ringcc_comm_destroy(s), "destroy the split one");
}

static void requests_run(int tcp) {
  area_t *a = h_shared_alloc(sizeof(*a));
  a->tcp = tcp;
  ringcc_config_t cfg = config_of(a);
  h_run_opts_t o = {.nranks = 2, .body = body_requests, .arg = a,
                    .config = &cfg, .timeout_s = 90,
                    .name = "requests in flight, revoke, split"};
  cr_assert(h_run(&o));
  h_shared_free(a, sizeof(*a));
}

Test(revoke, requests_in_flight_then_split_shm, .timeout = 120) { requests_run(0); }
Test(revoke, requests_in_flight_then_split_tcp, .timeout = 120) { requests_run(1); }

/* ---- bad arguments ---------------------------------------------------------- */

static int body_arguments(h_ctx_t *h) {
  ringcc_comm_t comm = h->comm, s = NULL;
  int bad = 0, dev = 5;
  bad |= expect(h, NULL, ringcc_comm_revoke(NULL), RINGCC_ERR_INVALID_ARGUMENT,
                "'comm'", "revoke(NULL)");
  if (!h_ok(h, ringcc_comm_split(comm, 0, 0, &s), "split") ||
      !h_ok(h, ringcc_comm_destroy(s), "destroy"))
    return 1;
  bad |= expect(h, NULL, ringcc_comm_revoke(s), RINGCC_ERR_INVALID_ARGUMENT,
                "not a live communicator", "revoke of a destroyed one");
  bad |= expect(h, comm, ringcc_comm_cuda_device(comm, NULL),
                RINGCC_ERR_INVALID_ARGUMENT, "'device'", "cuda_device(NULL)");
  bad |= expect(h, NULL, ringcc_comm_cuda_device(NULL, &dev),
                RINGCC_ERR_INVALID_ARGUMENT, "'comm'", "cuda_device(comm NULL)");
  /* these ranks never used CUDA: host buffers only, no current device */
  if (!h_ok(h, ringcc_comm_cuda_device(comm, &dev), "cuda_device") || dev != -1)
    bad = h_fail(h, "ringcc_comm_cuda_device gave %d, expected -1", dev);
  dev = 5;
  bad |= expect(h, NULL, ringcc_cuda_current_device(NULL),
                RINGCC_ERR_INVALID_ARGUMENT, "'device'",
                "cuda_current_device(NULL)");
  if (!h_ok(h, ringcc_cuda_current_device(&dev), "cuda_current_device") ||
      dev != -1)
    bad = h_fail(h, "ringcc_cuda_current_device gave %d, expected -1", dev);
  void *p = (void *)1;
  bad |= expect(h, NULL, ringcc_mem_alloc_device(-1, 4096, &p),
                RINGCC_ERR_INVALID_ARGUMENT, "'device'", "mem_alloc_device(-1)");
  if (p != NULL)
    bad = h_fail(h, "mem_alloc_device(-1) left ptr %p", p);
  /* an idle revoke, then a blocking call is refused and destroy works */
  bad = bad || !h_ok(h, ringcc_comm_revoke(comm), "idle revoke");
  bad |= expect(h, comm, ringcc_barrier(comm, NULL), RINGCC_ERR_ABORTED, NULL,
                "barrier after the revoke");
  return bad;
}

Test(revoke, bad_arguments_n2, .timeout = 60) {
  cr_assert(h_run_simple(2, body_arguments, NULL, 50));
}

/* Device memory on device 0: a GPU machine gives it (freed again); without
 * one, the CUDA or build error, and no pointer. */
Test(revoke, mem_alloc_device_0, .timeout = 30) {
  void *p = (void *)1;
  ringcc_result_t r = ringcc_mem_alloc_device(0, 1 << 20, &p);
  if (r == RINGCC_SUCCESS) {
    cr_assert_not_null(p);
    cr_assert_eq(ringcc_mem_free(p), RINGCC_SUCCESS);
  } else {
    cr_assert(r == RINGCC_ERR_UNSUPPORTED || r == RINGCC_ERR_CUDA,
              "mem_alloc_device(0): %s (%s)", ringcc_strerror(r),
              ringcc_comm_last_error(NULL));
    cr_assert_null(p, "a failed mem_alloc_device left ptr %p", p);
    cr_assert(strlen(ringcc_comm_last_error(NULL)) > 0);
  }
}
