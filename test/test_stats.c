/*
 * test_stats.c - ringcc_comm_stats() and the summary logged at destroy
 * (lib/observe/stats.c).
 *
 *   stats   exact counts for known calls: calls, bytes (S) and bytes sent
 *           per collective and algorithm, bytes per edge and per
 *           transport, for a forced ring at n = 4 (every figure computed
 *           here from the schedules' definitions); timing on and off; a
 *           slow rank's edge carries the wait of the rank after it; the
 *           INFO summary at destroy; bad arguments
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "stats.h"

#define N 4

static const ringcc_stats_row_t *find_row(const ringcc_comm_stats_t *s,
                                          const char *coll, const char *alg) {
  for (int i = 0; i < s->nrows; i++)
    if (strcmp(s->rows[i].collective, coll) == 0 &&
        strcmp(s->rows[i].algorithm, alg) == 0)
      return &s->rows[i];
  return NULL;
}

static int expect_row(const h_ctx_t *ctx, const ringcc_comm_stats_t *s,
                      const char *coll, const char *alg, uint64_t calls,
                      uint64_t bytes, uint64_t sent) {
  const ringcc_stats_row_t *r = find_row(s, coll, alg);
  if (r == NULL)
    return h_fail(ctx, "no row %s/%s", coll, alg);
  if (r->calls != calls || r->bytes != bytes || r->sent_bytes != sent)
    return h_fail(ctx, "%s/%s: %llu calls, %llu bytes, %llu sent; expected "
                  "%llu, %llu, %llu", coll, alg, (unsigned long long)r->calls,
                  (unsigned long long)r->bytes,
                  (unsigned long long)r->sent_bytes, (unsigned long long)calls,
                  (unsigned long long)bytes, (unsigned long long)sent);
  if (r->time_ns != 0 || r->wait_ns != 0)
    return h_fail(ctx, "%s/%s: timed without RINGCC_STATS=time", coll, alg);
  return 0;
}

/* 3 allreduces of 1024 float32 (ring: at n = 4 four chunks of 256, whole
 * 64-byte granules, so every rank sends the same), 2 allgathers of 100
 * int32 per rank, a bcast of 10 float64 from rank 0 (chain), a barrier, and 5 int32
 * from rank 0 to rank 2. One host: the ring is 0 1 2 3. */
static int exact_body(h_ctx_t *ctx) {
  ringcc_comm_t comm = ctx->comm;
  int r = ctx->rank, next = (r + 1) % N, prev = (r + N - 1) % N;
  static float f[1024];
  static int32_t g[100], gall[100 * N], p2p[5];
  static double b[10];
  for (int i = 0; i < 3; i++)
    if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, f, 1024, RINGCC_FLOAT32,
                                    RINGCC_SUM, comm, NULL), "allreduce"))
      return 1;
  for (int i = 0; i < 2; i++)
    if (!h_ok(ctx, ringcc_allgather(g, gall, 100, RINGCC_INT32, comm, NULL),
              "allgather"))
      return 1;
  if (!h_ok(ctx, ringcc_bcast(b, 10, RINGCC_FLOAT64, 0, comm, NULL), "bcast") ||
      !h_ok(ctx, ringcc_barrier(comm, NULL), "barrier"))
    return 1;
  if (r == 0 && !h_ok(ctx, ringcc_send(p2p, 5, RINGCC_INT32, 2, comm, NULL),
                      "send"))
    return 1;
  if (r == 2 && !h_ok(ctx, ringcc_recv(p2p, 5, RINGCC_INT32, 0, comm, NULL),
                      "recv"))
    return 1;

  ringcc_stats_edge_t edges[N];
  ringcc_comm_stats_t s = RINGCC_COMM_STATS_INIT;
  s.edges = edges;
  s.edges_len = N;
  if (!h_ok(ctx, ringcc_comm_stats(comm, &s), "ringcc_comm_stats"))
    return 1;
  /* The ring AllReduce of S = 4096 B at n = 4 sends 2(n-1)/n S = 6144 B;
   * the AllGather of S = 1600 B sends (n-1)/n S = 1200 B; the chain's
   * ranks but the last forward the 80 B. */
  uint64_t bcast_sent = r < N - 1 ? 80 : 0, bcast_recv = r > 0 ? 80 : 0;
  if (expect_row(ctx, &s, "allreduce", "ring", 3, 12288, 18432) ||
      expect_row(ctx, &s, "allgather", "ring", 2, 3200, 2400) ||
      expect_row(ctx, &s, "bcast", "chain", 1, 80, bcast_sent) ||
      expect_row(ctx, &s, "barrier", "dissemination", 1, 0, 0) ||
      (r == 0 && expect_row(ctx, &s, "send", "p2p", 1, 20, 20)) ||
      (r == 2 && expect_row(ctx, &s, "recv", "p2p", 1, 20, 0)))
    return 1;
  int rows = 4 + (r == 0 || r == 2);
  uint64_t calls = 7 + (r == 0 || r == 2);
  uint64_t bytes = 12288 + 3200 + 80 + (r == 0 || r == 2 ? 20 : 0);
  uint64_t sent = 18432 + 2400 + bcast_sent + (r == 0 ? 20 : 0);
  uint64_t received = 18432 + 2400 + bcast_recv + (r == 2 ? 20 : 0);
  if (s.nrows != rows || s.calls != calls || s.bytes != bytes ||
      s.sent_bytes != sent || s.received_bytes != received || s.timed ||
      s.time_ns != 0 || s.wait_ns != 0 || s.rank != r || s.nranks != N)
    return h_fail(ctx, "totals: %d rows, %llu calls, %llu bytes, sent %llu, "
                  "received %llu, timed %d; expected %d, %llu, %llu, %llu, "
                  "%llu, 0", s.nrows, (unsigned long long)s.calls,
                  (unsigned long long)s.bytes,
                  (unsigned long long)s.sent_bytes,
                  (unsigned long long)s.received_bytes, s.timed, rows,
                  (unsigned long long)calls, (unsigned long long)bytes,
                  (unsigned long long)sent, (unsigned long long)received);
  if (s.nedges != N)
    return h_fail(ctx, "%d edges filled, expected %d", s.nedges, N);
  for (int p = 0; p < N; p++) {
    uint64_t to = 0, from = 0;
    if (p == next)
      to += 18432 + 2400 + bcast_sent;
    if (p == prev)
      from += 18432 + 2400 + bcast_recv;
    if (r == 0 && p == 2)
      to += 20;
    if (r == 2 && p == 0)
      from += 20;
    const ringcc_stats_edge_t *e = &edges[p];
    if (e->peer != p || e->sent_bytes != to || e->received_bytes != from ||
        (p == r) != (e->transport == NULL) ||
        (p != r && strcmp(e->transport, "SHM") != 0))
      return h_fail(ctx, "edge %d: peer %d, %s, sent %llu, received %llu; "
                    "expected SHM, %llu and %llu", p, e->peer,
                    e->transport ? e->transport : "(none)",
                    (unsigned long long)e->sent_bytes,
                    (unsigned long long)e->received_bytes,
                    (unsigned long long)to, (unsigned long long)from);
  }
  if (s.ntransports != 1 || strcmp(s.transports[0].transport, "SHM") != 0 ||
      s.transports[0].edges != N - 1 || s.transports[0].sent_bytes != sent ||
      s.transports[0].received_bytes != received)
    return h_fail(ctx, "transports: %d, the first %s with %d edges, sent %llu",
                  s.ntransports, s.ntransports ? s.transports[0].transport : "-",
                  s.ntransports ? s.transports[0].edges : 0,
                  (unsigned long long)(s.ntransports
                                           ? s.transports[0].sent_bytes : 0));
  /* A shorter edges array gets what fits. */
  ringcc_comm_stats_t t = RINGCC_COMM_STATS_INIT;
  t.edges = edges;
  t.edges_len = 2;
  memset(edges, 0xff, sizeof edges);
  if (!h_ok(ctx, ringcc_comm_stats(comm, &t), "ringcc_comm_stats") ||
      t.nedges != 2 || edges[2].peer != -1)
    return h_fail(ctx, "edges_len 2: %d filled, edges[2] touched", t.nedges);
  return 0;
}

Test(stats, exact_counts_for_known_calls, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RING;
  h_run_opts_t o = {.nranks = N, .body = exact_body, .config = &cfg,
                    .timeout_s = 60, .name = "exact counts"};
  cr_assert(h_run(&o));
}

/* The one-shot board: a call's region is read by every peer, and this
 * rank reads every peer's: 8 bytes each way per peer and call. */
static int board_body(h_ctx_t *ctx) {
  float x[2] = {1, 2};
  for (int i = 0; i < 4; i++)
    if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, x, 2, RINGCC_FLOAT32,
                                    RINGCC_SUM, ctx->comm, NULL), "allreduce"))
      return 1;
  ringcc_stats_edge_t edges[3];
  ringcc_comm_stats_t s = RINGCC_COMM_STATS_INIT;
  s.edges = edges;
  s.edges_len = 3;
  if (!h_ok(ctx, ringcc_comm_stats(ctx->comm, &s), "ringcc_comm_stats") ||
      expect_row(ctx, &s, "allreduce", "one-shot board", 4, 32, 64))
    return 1;
  for (int p = 0; p < 3; p++) {
    uint64_t want = p == ctx->rank ? 0 : 32;
    if (edges[p].sent_bytes != want || edges[p].received_bytes != want)
      return h_fail(ctx, "edge %d: sent %llu, received %llu; expected %llu",
                    p, (unsigned long long)edges[p].sent_bytes,
                    (unsigned long long)edges[p].received_bytes,
                    (unsigned long long)want);
  }
  if (s.sent_bytes != 64 || s.received_bytes != 64 || s.ntransports != 1 ||
      s.transports[0].sent_bytes != 64 || s.transports[0].edges != 2)
    return h_fail(ctx, "totals: sent %llu, received %llu",
                  (unsigned long long)s.sent_bytes,
                  (unsigned long long)s.received_bytes);
  return 0;
}

Test(stats, one_shot_board_counts_every_edge, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_ONESHOT; /* the board, where every edge is shm */
  h_run_opts_t o = {.nranks = 3, .body = board_body, .config = &cfg,
                    .timeout_s = 60, .name = "board"};
  cr_assert(h_run(&o));
}

/* ---- timing ------------------------------------------------------------------------ */

static int timed_body(h_ctx_t *ctx) {
  int32_t x[1000] = {0};
  for (int i = 0; i < 5; i++)
    if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, x, 1000, RINGCC_INT32,
                                    RINGCC_SUM, ctx->comm, NULL), "allreduce"))
      return 1;
  ringcc_stats_edge_t edges[2];
  ringcc_comm_stats_t s = RINGCC_COMM_STATS_INIT;
  s.edges = edges;
  s.edges_len = 2;
  if (!h_ok(ctx, ringcc_comm_stats(ctx->comm, &s), "ringcc_comm_stats"))
    return 1;
  uint64_t edge_wait = 0;
  for (int p = 0; p < 2; p++)
    edge_wait += edges[p].send_wait_ns + edges[p].recv_wait_ns;
  if (!s.timed || s.time_ns == 0 || s.wait_ns > s.time_ns ||
      s.rows[0].time_ns != s.time_ns || s.rows[0].wait_ns != s.wait_ns)
    return h_fail(ctx, "timed %d, time %llu ns, wait %llu ns (row: %llu, "
                  "%llu)", s.timed, (unsigned long long)s.time_ns,
                  (unsigned long long)s.wait_ns,
                  (unsigned long long)s.rows[0].time_ns,
                  (unsigned long long)s.rows[0].wait_ns);
  if (edge_wait != s.wait_ns)
    return h_fail(ctx, "the edges' waits add up to %llu ns, the total is %llu",
                  (unsigned long long)edge_wait, (unsigned long long)s.wait_ns);
  return 0;
}

Test(stats, timed_with_RINGCC_STATS_time, .timeout = 60) {
  setenv("RINGCC_STATS", "time", 1);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RING;
  h_run_opts_t o = {.nranks = 2, .body = timed_body, .config = &cfg,
                    .timeout_s = 60, .name = "timed"};
  cr_assert(h_run(&o));
}

/* Rank 2 comes 100 ms late to each of 3 calls: rank 3, after it on the
 * ring, spends most of its wait on the edge from rank 2. */
static int slow_body(h_ctx_t *ctx) {
  static float f[1000];
  for (int i = 0; i < 3; i++) {
    if (ctx->rank == 2)
      h_sleep_ms(100);
    if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, f, 1000, RINGCC_FLOAT32,
                                    RINGCC_SUM, ctx->comm, NULL), "allreduce"))
      return 1;
  }
  if (ctx->rank != 3)
    return 0;
  ringcc_stats_edge_t edges[N];
  ringcc_comm_stats_t s = RINGCC_COMM_STATS_INIT;
  s.edges = edges;
  s.edges_len = N;
  if (!h_ok(ctx, ringcc_comm_stats(ctx->comm, &s), "ringcc_comm_stats"))
    return 1;
  uint64_t slow = edges[2].recv_wait_ns;
  if (slow < 250000000ull || slow < s.wait_ns * 8 / 10)
    return h_fail(ctx, "waited %.1f ms for rank 2 of %.1f ms in all",
                  slow / 1e6, s.wait_ns / 1e6);
  char text[4096];
  rcc_stats_format(ctx->comm, text, sizeof text);
  if (strstr(text, "stats: waits by edge: from rank 2 (SHM)") == NULL)
    return h_fail(ctx, "the summary does not put rank 2 first:\n%s", text);
  return 0;
}

Test(stats, the_slow_edge_carries_the_wait, .timeout = 60) {
  setenv("RINGCC_STATS", "time", 1);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RING;
  h_run_opts_t o = {.nranks = N, .body = slow_body, .config = &cfg,
                    .timeout_s = 60, .name = "slow edge"};
  cr_assert(h_run(&o));
}

/* A group's time is counted as its waits are: rank 1 enters each of 3
 * groups (a send and a receive of 1 MiB each way) 50 ms late, so rank 0
 * waits about 150 ms in them, and its time inside calls covers that wait
 * (the batch's time and waits go to the row of its first operation). */
static int group_timed_body(h_ctx_t *ctx) {
  static int32_t out[1 << 18], in[1 << 18];
  int peer = 1 - ctx->rank;
  for (int i = 0; i < 3; i++) {
    if (ctx->rank == 1)
      h_sleep_ms(50);
    if (!h_ok(ctx, ringcc_group_start(), "group_start") ||
        !h_ok(ctx, ringcc_send(out, 1 << 18, RINGCC_INT32, peer, ctx->comm,
                               NULL), "send") ||
        !h_ok(ctx, ringcc_recv(in, 1 << 18, RINGCC_INT32, peer, ctx->comm,
                               NULL), "recv") ||
        !h_ok(ctx, ringcc_group_end(), "group_end"))
      return 1;
  }
  ringcc_comm_stats_t s = RINGCC_COMM_STATS_INIT;
  if (!h_ok(ctx, ringcc_comm_stats(ctx->comm, &s), "ringcc_comm_stats"))
    return 1;
  if (!s.timed || s.time_ns < s.wait_ns)
    return h_fail(ctx, "grouped calls: %.1f ms inside calls, %.1f ms of it "
                  "waiting (timed %d)", s.time_ns / 1e6, s.wait_ns / 1e6,
                  s.timed);
  if (ctx->rank == 0 && s.time_ns < 100000000ull)
    return h_fail(ctx, "grouped calls waiting ~150 ms for a late peer: "
                  "%.1f ms inside calls", s.time_ns / 1e6);
  return 0;
}

Test(stats, a_groups_time_covers_its_waits, .timeout = 60) {
  setenv("RINGCC_STATS", "time", 1);
  for (int tcp = 0; tcp <= 1; tcp++) {
    ringcc_config_t cfg = RINGCC_CONFIG_INIT;
    cfg.shm_disable = tcp;
    h_run_opts_t o = {.nranks = 2, .body = group_timed_body, .config = &cfg,
                      .timeout_s = 60, .name = tcp ? "group timed, TCP"
                                                   : "group timed, shm"};
    cr_assert(h_run(&o));
  }
  unsetenv("RINGCC_STATS");
}

/* ---- the summary at destroy ------------------------------------------------------- */

static int summary_body(h_ctx_t *ctx) {
  ringcc_comm_t comm;
  char path[128];
  static float f[1000];
  if (!h_ok(ctx, ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank,
                                  ctx->config), "ringcc_comm_init"))
    return 1;
  for (int i = 0; i < 2; i++)
    if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, f, 1000, RINGCC_FLOAT32,
                                    RINGCC_SUM, comm, NULL), "allreduce"))
      return 1;
  /* The log goes to stderr: into a file while the communicator goes. */
  snprintf(path, sizeof path, "/tmp/ringcc-test-stats-%d.log", (int)getpid());
  fflush(stderr);
  int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  dup2(fd, 2);
  ringcc_comm_destroy(comm);
  fflush(stderr);
  dup2(saved, 2);
  close(fd);
  close(saved);
  char log[8192] = "";
  FILE *f2 = fopen(path, "r");
  size_t n = f2 ? fread(log, 1, sizeof log - 1, f2) : 0;
  log[n] = '\0';
  if (f2)
    fclose(f2);
  unlink(path);
  /* n = 2: each call sends 2(n-1)/n S = 4000 B. */
  static const char *const want[] = {
      "RINGCC INFO stats: 2 calls, 8 kB (S), sent 8 kB, received 8 kB; ",
      " of it waiting for peers\n",
      "RINGCC INFO stats: allreduce/ring 2 calls, 8 kB, sent 8 kB, ",
      "RINGCC INFO stats: waits by edge:",
      "RINGCC INFO stats: transports: SHM 1 edge, sent 8 kB, received 8 kB\n"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (strstr(log, want[i]) == NULL)
      return h_fail(ctx, "the log at destroy lacks '%s':\n%s", want[i], log);
  return 0;
}

Test(stats, summary_logged_at_destroy_with_info, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RING;
  cfg.debug_level = RINGCC_LOG_INFO;
  h_run_opts_t o = {.nranks = 2, .body = summary_body, .config = &cfg,
                    .skip_init = true, .timeout_s = 60, .name = "summary"};
  cr_assert(h_run(&o));
}

static int bad_body(h_ctx_t *ctx) {
  ringcc_comm_stats_t s = RINGCC_COMM_STATS_INIT;
  ringcc_comm_stats_t unset;
  memset(&unset, 0, sizeof unset);
  if (ringcc_comm_stats(NULL, &s) != RINGCC_ERR_INVALID_ARGUMENT ||
      ringcc_comm_stats(ctx->comm, NULL) != RINGCC_ERR_INVALID_ARGUMENT ||
      ringcc_comm_stats(ctx->comm, &unset) != RINGCC_ERR_INVALID_ARGUMENT)
    return h_fail(ctx, "a bad argument was accepted");
  if (strstr(ringcc_comm_last_error(ctx->comm), "RINGCC_COMM_STATS_INIT") ==
      NULL)
    return h_fail(ctx, "message: %s", ringcc_comm_last_error(ctx->comm));
  s.edges_len = 3; /* and no edges */
  if (ringcc_comm_stats(ctx->comm, &s) != RINGCC_ERR_INVALID_ARGUMENT)
    return h_fail(ctx, "edges_len without edges was accepted");
  /* A caller's struct from an older, shorter version: refused below the
   * first version's fields. */
  s = (ringcc_comm_stats_t)RINGCC_COMM_STATS_INIT;
  s.size = offsetof(ringcc_comm_stats_t, transports);
  if (ringcc_comm_stats(ctx->comm, &s) != RINGCC_ERR_INVALID_ARGUMENT)
    return h_fail(ctx, "a struct without 'transports' was accepted");
  /* Nothing ran: all zero, the communicator still works. */
  s = (ringcc_comm_stats_t)RINGCC_COMM_STATS_INIT;
  if (!h_ok(ctx, ringcc_comm_stats(ctx->comm, &s), "ringcc_comm_stats") ||
      s.calls != 0 || s.nrows != 0 || s.sent_bytes != 0)
    return h_fail(ctx, "a fresh communicator has %llu calls",
                  (unsigned long long)s.calls);
  return h_ok(ctx, ringcc_barrier(ctx->comm, NULL), "barrier") ? 0 : 1;
}

Test(stats, bad_arguments, .timeout = 30) {
  cr_assert(h_run_simple(2, bad_body, NULL, 30));
}
