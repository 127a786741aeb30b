/*
 * test_sharedlinks.c - ringcc_comm_shrink of a healthy communicator over TCP
 * takes over the survivors' network links (transports/net.c, net_proxy.c):
 * real ranks (processes) on this host with shared memory off
 * (shm_disable), so every edge is a TCP link.
 *
 * - healthy_n3 .. healthy_n8: the parent runs every collective first (an
 *   alltoall links every pair) and sends to and receives from every rank
 *   (every pair's point-to-point link), then ranks other than 1 shrink it without
 *   rank 1; the shrink may add the new bootstrap ring's 2 sockets and no
 *   more (every link is taken over, none connected anew). Then calls
 *   alternate, every element checked: the child's collectives, the
 *   parent's allreduce (all n ranks, rank 1 too), the child's again; a
 *   second shrink of the child without its last rank (again no new link),
 *   the grandchild's collectives, the child's and the grandchild's
 *   allreduces. Then, on odd n, the parent is destroyed first and the child
 *   and grandchild go on over the links they took over (the proxy is handed
 *   to them), the child destroyed before the grandchild's last calls; on
 *   even n the grandchild and child go first and the parent runs once more.
 * - death_reaches_the_child_n5: after such a shrink (without rank 1),
 *   parent rank 3 (child rank 2) is killed; the child's allreduce on the
 *   other survivors fails with RINGCC_ERR_PEER_FAILED or
 *   RINGCC_ERR_NETWORK (the parent's proxy carries the link and reports to
 *   the child in its numbering), well before the 60 s timeout. Then the
 *   parent is destroyed (its proxy handed to the failed child) and the
 *   child shrunk with exclude NULL: the 3 survivors' collectives exact.
 * - killed_*: 1 or 2 ranks killed with SIGKILL (from a thread of their own)
 *   DURING large collectives (allreduces of 8 MiB, alltoalls of 16 MiB)
 *   that every rank runs in a loop, so the survivors' streams to each other
 *   stop mid-call with slots in flight and FAIL messages among them. The
 *   survivors' calls fail; they shrink with exclude NULL, and the shrink
 *   adds no more than the new bootstrap ring's 2 sockets (every link
 *   between survivors is taken over and resynced, net_proxy.h). Then every
 *   collective exact on the child, forced to each algorithm in turn
 *   (RINGCC_ALGO, read by a shrink of the child without its last rank, which
 *   destroys the child instead: again no new link), an 8 MiB allreduce, and
 *   the grandchild's calls after the parent is destroyed.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MAX_RANKS 8

typedef struct {
  int victim;                       /* death test: parent rank killed */
  volatile int new_sockets[2][MAX_RANKS]; /* per shrink, per parent rank */
  volatile double shrink_s[2][MAX_RANKS]; /* how long each shrink took */
  volatile double detect_s[MAX_RANKS];
  volatile int good[MAX_RANKS]; /* death test: the rank ended as it should */
  int victims[2];               /* killed_*: parent ranks killed, or -1 */
  int kill_ms;                  /* killed_*: when, after the loop starts */
  volatile int failed_calls[MAX_RANKS]; /* calls done before the failure */
} area_t;

static ringcc_config_t config_tcp(void) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  cfg.timeout_ms = 60000;
  return cfg;
}

/* An exact allreduce of count int32 on comm (rank me of p), salt apart. */
static int allreduce_ok(int who, ringcc_comm_t comm, int me, int p,
                        size_t count, uint64_t salt, const char *what) {
  int32_t *x = h_xmalloc(count * 4), *want = h_xmalloc(count * 4);
  h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, salt, x, count);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, p, 0, salt, want, count);
  ringcc_result_t r = ringcc_allreduce(x, x, count, RINGCC_INT32, RINGCC_SUM,
                                       comm, NULL);
  int bad = 0;
  if (r != RINGCC_SUCCESS)
    bad = h_fail_rank(who, "allreduce of %zu on the %s: %s (%s)", count, what,
                      ringcc_strerror(r), ringcc_comm_last_error(comm));
  for (size_t i = 0; i < count && !bad; i++)
    if (x[i] != want[i])
      bad = h_fail_rank(who, "allreduce of %zu on the %s: element %zu is %d, "
                        "expected %d", count, what, i, x[i], want[i]);
  free(x);
  free(want);
  return bad;
}

/* Every kind of call on comm (rank me of m), every element checked. */
static int calls_ok(int who, ringcc_comm_t comm, int me, int m,
                    const char *what) {
  const size_t sizes[3] = {1, 1000, 300000}, count = 1000;
  int rc = 0;
  for (int t = 0; t < 3 && rc == 0; t++)
    rc = allreduce_ok(who, comm, me, m, sizes[t], 10 + t, what);
  int32_t *buf = h_xmalloc(count * (size_t)m * 4);
  int32_t *out = h_xmalloc(count * (size_t)m * 4);
  for (size_t k = 0; k < count; k++)
    buf[k] = me * 100000 + (int)k;
  if (rc == 0 && ringcc_allgather(buf, out, count, RINGCC_INT32, comm,
                                  NULL) != RINGCC_SUCCESS)
    rc = h_fail_rank(who, "allgather on the %s: %s", what,
                     ringcc_comm_last_error(comm));
  for (int q = 0; q < m && rc == 0; q++)
    for (size_t k = 0; k < count && rc == 0; k++)
      if (out[(size_t)q * count + k] != q * 100000 + (int)k)
        rc = h_fail_rank(who, "allgather on the %s: block %d element %zu "
                         "wrong", what, q, k);
  for (int q = 0; q < m; q++)
    for (size_t k = 0; k < count; k++)
      buf[(size_t)q * count + k] = me * 1000 + q + (int)k * 7;
  if (rc == 0 && ringcc_alltoall(buf, out, count, RINGCC_INT32, comm, NULL) !=
                     RINGCC_SUCCESS)
    rc = h_fail_rank(who, "alltoall on the %s: %s", what,
                     ringcc_comm_last_error(comm));
  for (int q = 0; q < m && rc == 0; q++)
    for (size_t k = 0; k < count && rc == 0; k++)
      if (out[(size_t)q * count + k] != q * 1000 + me + (int)k * 7)
        rc = h_fail_rank(who, "alltoall on the %s: block %d element %zu "
                         "wrong", what, q, k);
  for (size_t k = 0; k < count; k++)
    buf[k] = me == m - 1 ? 3 * (int)k : -1;
  if (rc == 0 && ringcc_bcast(buf, count, RINGCC_INT32, m - 1, comm, NULL) !=
                     RINGCC_SUCCESS)
    rc = h_fail_rank(who, "bcast on the %s: %s", what,
                     ringcc_comm_last_error(comm));
  for (size_t k = 0; k < count && rc == 0; k++)
    if (buf[k] != 3 * (int)k)
      rc = h_fail_rank(who, "bcast on the %s: element %zu wrong", what, k);
  /* send/recv round the ring (even ranks send first) */
  int right = (me + 1) % m, left = (me + m - 1) % m;
  for (size_t k = 0; k < count; k++)
    buf[k] = me * 7 + (int)k;
  for (int turn = 0; turn < 2 && rc == 0 && m > 1; turn++) {
    ringcc_result_t e = (turn == 0) == (me % 2 == 0)
                            ? ringcc_send(buf, count, RINGCC_INT32, right,
                                          comm, NULL)
                            : ringcc_recv(out, count, RINGCC_INT32, left,
                                          comm, NULL);
    if (e != RINGCC_SUCCESS)
      rc = h_fail_rank(who, "send/recv on the %s: %s", what,
                       ringcc_comm_last_error(comm));
  }
  for (size_t k = 0; k < count && rc == 0 && m > 1; k++)
    if (out[k] != left * 7 + (int)k)
      rc = h_fail_rank(who, "recv on the %s: element %zu wrong", what, k);
  if (rc == 0 && ringcc_barrier(comm, NULL) != RINGCC_SUCCESS)
    rc = h_fail_rank(who, "barrier on the %s: %s", what,
                     ringcc_comm_last_error(comm));
  free(buf);
  free(out);
  return rc;
}

/* A send to and a receive from every other rank at once (a group): on the
 * parent, so that every pair's point-to-point link is made too. */
static int pairs_ok(int who, ringcc_comm_t comm, int me, int m,
                    const char *what) {
  const size_t count = 5000;
  int32_t *out = h_xmalloc(count * 4), *in = h_xmalloc(count * (size_t)m * 4);
  int rc = 0;
  for (size_t k = 0; k < count; k++)
    out[k] = me * 1000003 + (int)k;
  ringcc_group_start();
  for (int q = 0; q < m; q++)
    if (q != me) {
      ringcc_send(out, count, RINGCC_INT32, q, comm, NULL);
      ringcc_recv(in + (size_t)q * count, count, RINGCC_INT32, q, comm, NULL);
    }
  if (ringcc_group_end() != RINGCC_SUCCESS)
    rc = h_fail_rank(who, "sends to and receives from every rank on the %s: "
                     "%s", what, ringcc_comm_last_error(comm));
  for (int q = 0; q < m && rc == 0; q++)
    for (size_t k = 0; k < count && rc == 0 && q != me; k++)
      if (in[(size_t)q * count + k] != q * 1000003 + (int)k)
        rc = h_fail_rank(who, "receive from rank %d on the %s: element %zu "
                         "wrong", q, what, k);
  free(out);
  free(in);
  return rc;
}

/* comm without rank `ex` (its number there), counting the sockets the
 * shrink left open more into *added; 0, or 1 (printed). */
static int shrink_without(int who, ringcc_comm_t comm, int ex,
                          ringcc_comm_t *out, volatile int *added,
                          volatile double *took) {
  int before = h_count_sockets();
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_shrink(comm, &ex, 1, out);
  *took = h_now_s() - t0;
  *added = h_count_sockets() - before;
  if (r != RINGCC_SUCCESS)
    return h_fail_rank(who, "shrink without rank %d: %s (%s)", ex,
                       ringcc_strerror(r), ringcc_comm_last_error(comm));
  return 0;
}

static int init_parent(h_ctx_t *h, ringcc_comm_t *comm) {
  ringcc_config_t cfg = config_tcp();
  return h_ok(h, ringcc_comm_init(comm, h->nranks, h->id, h->rank, &cfg),
              "init") ? 0 : 1;
}

/* The parent, with every collective run on it and every pair's
 * point-to-point link made (so every link between survivors exists). */
static int linked_parent(h_ctx_t *h, ringcc_comm_t *parent) {
  if (init_parent(h, parent) != 0)
    return 1;
  int rc = calls_ok(h->rank, *parent, h->rank, h->nranks, "parent");
  return rc != 0 ? rc
                 : pairs_ok(h->rank, *parent, h->rank, h->nranks, "parent");
}

static int body_healthy(h_ctx_t *h) {
  area_t *a = h->arg;
  int n = h->nranks, rank = h->rank, rc;
  ringcc_comm_t parent, child = NULL, grand = NULL;
  int parent_first = n % 2 == 1;
  rc = linked_parent(h, &parent);
  int me = rank - (rank > 1), m = n - 1; /* in the child */
  int gme = me, gm = m - 1;              /* in the grandchild */
  if (rc == 0 && rank != 1)
    rc = shrink_without(rank, parent, 1, &child, &a->new_sockets[0][rank],
                        &a->shrink_s[0][rank]);
  if (rc == 0 && rank != 1)
    rc = calls_ok(rank, child, me, m, "child");
  if (rc == 0)
    rc = allreduce_ok(rank, parent, rank, n, 70000, 30, "parent, after the "
                      "child");
  if (rc == 0 && rank != 1)
    rc = allreduce_ok(rank, child, me, m, 70000, 31, "child, after the "
                      "parent");
  if (rc == 0 && rank != 1 && me != m - 1)
    rc = shrink_without(rank, child, m - 1, &grand, &a->new_sockets[1][rank],
                        &a->shrink_s[1][rank]);
  if (rc == 0 && grand != NULL)
    rc = calls_ok(rank, grand, gme, gm, "grandchild");
  if (rc == 0 && rank != 1)
    rc = allreduce_ok(rank, child, me, m, 5000, 32, "child, after the "
                      "grandchild");
  if (rc == 0 && grand != NULL)
    rc = allreduce_ok(rank, grand, gme, gm, 5000, 33, "grandchild, after "
                      "the child");
  if (rc != 0)
    return rc; /* (the harness kills what is left) */
  if (parent_first) {
    ringcc_comm_destroy(parent);
    if (child != NULL)
      rc = calls_ok(rank, child, me, m, "child, its parent destroyed");
    if (rc == 0 && grand != NULL)
      rc = calls_ok(rank, grand, gme, gm, "grandchild, the parent destroyed");
    if (child != NULL)
      ringcc_comm_destroy(child);
    if (rc == 0 && grand != NULL)
      rc = allreduce_ok(rank, grand, gme, gm, 300000, 34, "grandchild, the "
                        "child and parent destroyed");
    if (grand != NULL)
      ringcc_comm_destroy(grand);
    return rc;
  }
  if (grand != NULL)
    ringcc_comm_destroy(grand);
  if (child != NULL)
    ringcc_comm_destroy(child);
  rc = allreduce_ok(rank, parent, rank, n, 300000, 35, "parent, its children "
                    "destroyed");
  ringcc_comm_destroy(parent);
  return rc;
}

static void healthy(int n) {
  area_t *a = h_shared_alloc(sizeof(*a));
  h_run_opts_t o = {.nranks = n, .body = body_healthy, .arg = a,
                    .skip_init = true, .timeout_s = 150,
                    .name = "healthy shrink over TCP"};
  double t0 = h_now_s();
  bool ok = h_run(&o);
  int most[2] = {0, 0};
  double slowest[2] = {0, 0};
  for (int s = 0; s < 2; s++)
    for (int r = 0; r < n; r++) {
      most[s] = a->new_sockets[s][r] > most[s] ? a->new_sockets[s][r]
                                               : most[s];
      slowest[s] = a->shrink_s[s][r] > slowest[s] ? a->shrink_s[s][r]
                                                  : slowest[s];
    }
  fprintf(stderr, "sharedlinks: n=%d TCP: shrink without rank 1, then its "
          "shrink without its last rank: at most %d and %d sockets more on a "
          "rank, %.3f s and %.3f s at most; calls on parent, child and "
          "grandchild alternating, the %s destroyed first: %s in %.1f s\n",
          n, most[0], most[1], slowest[0], slowest[1],
          n % 2 ? "parent" : "grandchild", ok ? "exact" : "FAILED",
          h_now_s() - t0);
  cr_assert(ok, "see above");
  /* The new communicator's bootstrap ring (2 sockets) and nothing else:
   * every network link is the parent's. */
  for (int s = 0; s < 2; s++)
    for (int r = 0; r < n; r++)
      cr_expect(a->new_sockets[s][r] <= 2, "rank %d: shrink %d added %d "
                "sockets (a link connected anew)", r, s + 1,
                a->new_sockets[s][r]);
  h_shared_free(a, sizeof(*a));
}

Test(sharedlinks, healthy_n3, .timeout = 180) { healthy(3); }
Test(sharedlinks, healthy_n4, .timeout = 180) { healthy(4); }
Test(sharedlinks, healthy_n5, .timeout = 180) { healthy(5); }
Test(sharedlinks, healthy_n6, .timeout = 180) { healthy(6); }
Test(sharedlinks, healthy_n7, .timeout = 180) { healthy(7); }
Test(sharedlinks, healthy_n8, .timeout = 180) { healthy(8); }

static int body_death(h_ctx_t *h) {
  area_t *a = h->arg;
  int n = h->nranks, rank = h->rank, rc;
  ringcc_comm_t parent, child = NULL;
  if (init_parent(h, &parent) != 0)
    return 1;
  rc = calls_ok(rank, parent, rank, n, "parent");
  int me = rank - (rank > 1), m = n - 1;
  if (rc == 0 && rank != 1)
    rc = shrink_without(rank, parent, 1, &child, &a->new_sockets[0][rank],
                        &a->shrink_s[0][rank]);
  if (rc == 0 && rank != 1)
    rc = calls_ok(rank, child, me, m, "child");
  if (rc != 0)
    return rc;
  if (rank == a->victim) {
    h_sleep_ms(300);
    raise(SIGKILL);
  }
  if (rank != 1) {
    double t0 = h_now_s();
    int32_t *x = h_xmalloc(300000 * 4);
    memset(x, 0, 300000 * 4);
    ringcc_result_t r = RINGCC_SUCCESS;
    for (int i = 0; i < 1000 && r == RINGCC_SUCCESS; i++)
      r = ringcc_allreduce(x, x, 300000, RINGCC_INT32, RINGCC_SUM, child,
                           NULL);
    a->detect_s[rank] = h_now_s() - t0;
    free(x);
    if (r != RINGCC_ERR_PEER_FAILED && r != RINGCC_ERR_NETWORK)
      rc = h_fail_rank(rank, "the child's allreduce with child rank %d dead "
                       "returned %s: %s", a->victim - 1, ringcc_strerror(r),
                       ringcc_comm_last_error(child));
    /* The parent goes first (its proxy, which carries the child's links,
     * is handed to the child), then the child's survivors shrink it. */
    ringcc_comm_destroy(parent);
    ringcc_comm_t grand = NULL;
    int gme = me - (me > a->victim - 1);
    if (rc == 0 && (r = ringcc_comm_shrink(child, NULL, 0, &grand)) !=
                       RINGCC_SUCCESS)
      rc = h_fail_rank(rank, "shrink of the child without its dead rank: "
                       "%s: %s", ringcc_strerror(r),
                       ringcc_comm_last_error(child));
    if (rc == 0)
      rc = calls_ok(rank, grand, gme, m - 1, "child's child, after a death");
    if (grand != NULL)
      ringcc_comm_destroy(grand);
    ringcc_comm_destroy(child);
  } else {
    ringcc_comm_destroy(parent);
  }
  a->good[rank] = rc == 0;
  return rc;
}

Test(sharedlinks, death_reaches_the_child_n5, .timeout = 180) {
  area_t *a = h_shared_alloc(sizeof(*a));
  a->victim = 3;
  h_run_opts_t o = {.nranks = 5, .body = body_death, .arg = a,
                    .skip_init = true, .timeout_s = 150,
                    .name = "a death on a link the child took over"};
  bool all = h_run(&o); /* false: the victim died */
  double worst = 0;
  int bad = 0;
  for (int r = 0; r < 5; r++)
    if (r != a->victim) {
      bad += !a->good[r];
      if (r != 1 && a->detect_s[r] > worst)
        worst = a->detect_s[r];
    }
  fprintf(stderr, "sharedlinks: n=5 TCP, shrunk without rank 1, then parent "
          "rank 3 (child rank 2) killed: the child's allreduce failed on every "
          "survivor within %.2f s; the child shrunk after it: %s\n", worst,
          bad ? "FAILED (see above)" : "exact");
  cr_assert_not(all, "the victim's death was not seen");
  cr_assert_eq(bad, 0, "see above");
  cr_expect(worst < 20, "%.1f s to notice the death", worst);
  h_shared_free(a, sizeof(*a));
}

/* ---- killed during large collectives, then shrink(NULL) --------------- */

static int killer_ms;
static void *killer(void *arg) {
  (void)arg;
  h_sleep_ms(killer_ms);
  kill(getpid(), SIGKILL);
  return NULL;
}

/* This process's rank in the communicator without the victims. */
static int rank_without(const area_t *a, int rank) {
  int r = rank;
  for (int v = 0; v < 2; v++)
    r -= a->victims[v] >= 0 && a->victims[v] < rank;
  return r;
}

/* Large collectives in a loop until one fails (the victims die meanwhile):
 * 0 when a call failed as it should, else 1 (printed). */
static int run_until_failure(int rank, ringcc_comm_t comm, int n, area_t *a) {
  const size_t big = 2u << 20; /* int32: 8 MiB */
  int32_t *x = h_xmalloc(big * 4), *y = h_xmalloc(big * 4);
  memset(x, 0, big * 4);
  ringcc_result_t r = RINGCC_SUCCESS;
  int i;
  for (i = 0; i < 10000 && r == RINGCC_SUCCESS; i++)
    r = i % 2 == 0 ? ringcc_allreduce(x, y, big, RINGCC_INT32, RINGCC_SUM,
                                      comm, NULL)
                   : ringcc_alltoall(x, y, big / (size_t)n, RINGCC_INT32,
                                     comm, NULL);
  a->failed_calls[rank] = i;
  free(x);
  free(y);
  if (r != RINGCC_ERR_PEER_FAILED && r != RINGCC_ERR_NETWORK)
    return h_fail_rank(rank, "the large collectives with ranks %d and %d "
                       "killed returned %s after %d calls: %s",
                       a->victims[0], a->victims[1], ringcc_strerror(r), i,
                       ringcc_comm_last_error(comm));
  return 0;
}

static const char *const algos[] = {"ring", "tree", "oneshot", "recdoubling",
                                    "rabenseifner", "direct"};

static int body_killed(h_ctx_t *h) {
  area_t *a = h->arg;
  int n = h->nranks, rank = h->rank, rc;
  ringcc_comm_t parent, child = NULL;
  if ((rc = linked_parent(h, &parent)) != 0)
    return rc;
  if (rank == a->victims[0] || rank == a->victims[1]) {
    pthread_t t;
    killer_ms = a->kill_ms + (rank == a->victims[1] ? 37 : 0);
    if (pthread_create(&t, NULL, killer, NULL) != 0)
      raise(SIGKILL);
  }
  rc = run_until_failure(rank, parent, n, a);
  if (rank == a->victims[0] || rank == a->victims[1])
    h_sleep_ms(60000); /* the killer comes */
  if (rc != 0)
    return rc;
  int m = n - 1 - (a->victims[1] >= 0), me = rank_without(a, rank);
  int before = h_count_sockets();
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_shrink(parent, NULL, 0, &child);
  a->shrink_s[0][rank] = h_now_s() - t0;
  a->new_sockets[0][rank] = h_count_sockets() - before;
  if (r != RINGCC_SUCCESS)
    return h_fail_rank(rank, "shrink(NULL) after the deaths: %s (%s)",
                       ringcc_strerror(r), ringcc_comm_last_error(parent));
  int cm = 0, cme = -1;
  if (ringcc_comm_size(child, &cm) != RINGCC_SUCCESS || cm != m ||
      ringcc_comm_rank(child, &cme) != RINGCC_SUCCESS || cme != me)
    return h_fail_rank(rank, "the shrunk communicator: rank %d of %d, not %d "
                       "of %d", cme, cm, me, m);
  rc = calls_ok(rank, child, me, m, "child, after the deaths");
  if (rc == 0)
    rc = allreduce_ok(rank, child, me, m, 2u << 20, 40, "child, 8 MiB");
  if (rc == 0)
    rc = pairs_ok(rank, child, me, m, "child");
  /* Each algorithm forced on a shrink of the child without its last rank
   * (healthy: its links taken over again); the last rank sits out. */
  for (int i = 0; i < (int)(sizeof(algos) / sizeof(algos[0])) && rc == 0 &&
                  m > 2;
       i++) {
    if (me == m - 1) {
      rc = allreduce_ok(rank, child, me, m, 1000, 50 + i, "child");
      continue;
    }
    ringcc_comm_t grand = NULL;
    int last = m - 1;
    setenv("RINGCC_ALGO", algos[i], 1);
    rc = shrink_without(rank, child, last, &grand, &a->new_sockets[1][rank],
                        &a->shrink_s[1][rank]);
    unsetenv("RINGCC_ALGO");
    if (rc == 0 && a->new_sockets[1][rank] > 2)
      rc = h_fail_rank(rank, "the shrink of the child (RINGCC_ALGO=%s) added "
                       "%d sockets", algos[i], a->new_sockets[1][rank]);
    if (rc == 0)
      rc = calls_ok(rank, grand, me, m - 1, algos[i]);
    if (grand != NULL)
      ringcc_comm_destroy(grand);
    if (rc == 0)
      rc = allreduce_ok(rank, child, me, m, 1000, 50 + i, "child");
  }
  /* The parent goes (its proxy handed to the child), the child goes on. */
  ringcc_comm_destroy(parent);
  if (rc == 0)
    rc = calls_ok(rank, child, me, m, "child, the parent destroyed");
  ringcc_comm_destroy(child);
  a->good[rank] = rc == 0;
  return rc;
}

static void killed(int n, int v0, int v1, int kill_ms) {
  area_t *a = h_shared_alloc(sizeof(*a));
  a->victims[0] = v0;
  a->victims[1] = v1;
  a->kill_ms = kill_ms;
  h_run_opts_t o = {.nranks = n, .body = body_killed, .arg = a,
                    .skip_init = true, .timeout_s = 150,
                    .name = "shrink after deaths during large collectives"};
  double t0 = h_now_s();
  bool all = h_run(&o); /* false: the victims died */
  int bad = 0, most[2] = {0, 0}, calls = 0;
  double slowest = 0;
  for (int r = 0; r < n; r++) {
    if (r == v0 || r == v1)
      continue;
    bad += !a->good[r];
    for (int s = 0; s < 2; s++)
      most[s] = a->new_sockets[s][r] > most[s] ? a->new_sockets[s][r]
                                               : most[s];
    slowest = a->shrink_s[0][r] > slowest ? a->shrink_s[0][r] : slowest;
    calls = a->failed_calls[r] > calls ? a->failed_calls[r] : calls;
  }
  char who[32];
  if (v1 >= 0)
    snprintf(who, sizeof(who), "ranks %d and %d", v0, v1);
  else
    snprintf(who, sizeof(who), "rank %d", v0);
  fprintf(stderr, "sharedlinks: n=%d TCP, %s killed %d ms into 8 MiB "
          "allreduces and alltoalls (%d calls at most before the failure): "
          "shrink(NULL) %.3f s at most, at most %d sockets more on a rank "
          "(and %d on the child's shrinks, one per algorithm); calls on the "
          "child and grandchildren: %s in %.1f s\n", n, who, kill_ms, calls,
          slowest, most[0], most[1], bad ? "FAILED (see above)" : "exact",
          h_now_s() - t0);
  cr_assert_not(all, "the victims' deaths were not seen");
  cr_assert_eq(bad, 0, "see above");
  for (int r = 0; r < n; r++)
    if (r != v0 && r != v1)
      cr_expect(a->new_sockets[0][r] <= 2, "rank %d: shrink(NULL) added %d "
                "sockets (a survivor link connected anew)", r,
                a->new_sockets[0][r]);
  h_shared_free(a, sizeof(*a));
}

Test(sharedlinks, killed_1_of_3, .timeout = 180) { killed(3, 1, -1, 150); }
Test(sharedlinks, killed_1_of_4, .timeout = 180) { killed(4, 0, -1, 300); }
Test(sharedlinks, killed_2_of_6, .timeout = 180) { killed(6, 2, 5, 200); }
Test(sharedlinks, killed_2_of_8, .timeout = 180) { killed(8, 0, 3, 400); }
