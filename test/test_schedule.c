/*
 * test_schedule.c - plans that carry per-block counts (lib/algo/schedule.h,
 * lib/algo/ring.c): the ring's Reduce-Scatter and AllGather over uneven
 * blocks, the shape the v-collectives build on.
 *
 *   uneven    every rank's plan of every channel, for n = 2..6 ranks, 1..3
 *             channels, chunks of 1..5 elements, granules 1 and 4 and
 *             several uneven layouts (empty blocks, gaps between blocks, a
 *             single non-empty block), run step by step against each
 *             other through unbounded FIFOs in this process: every message
 *             has the size its receiver's step expects, every step stays
 *             inside its buffers, no rank is left waiting, and the result
 *             is the reference (sums of known integers; the gaps between
 *             blocks untouched)
 *   even      the same run of plans without counts gives the same steps as
 *             plans whose counts are all equal (the layout the public
 *             collectives use)
 *   alltoallv the AllToAllv schedule (lib/algo/direct.c) of every rank, n =
 *             1..8, chunks of 1..4 elements, random uneven counts with
 *             zeros and displacements out of order with gaps, run against
 *             each other through FIFOs of two slots (the fewest
 *             RINGCC_NSLOTS allows), a send waiting while its FIFO is full:
 *             nobody is left waiting, every piece has the size its
 *             receiver expects, and every element of every block lands
 *             where its displacement says (the gaps untouched)
 *   executor  rcc_allgatherv_ring (coll.h) on 4 forked ranks over shared
 *             memory, one and three channels: the host executor runs an
 *             uneven plan, every element checked
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "harness.h"
#include "schedule.h"

#define MAX_RANKS 6
#define GAP (-7) /* what the untouched elements of a blocked buffer hold */

/* One layout of uneven blocks. */
struct layout {
  int n;
  size_t counts[MAX_RANKS], displs[MAX_RANKS];
  size_t blocked_len; /* elements of the blocked buffer */
};

/* Blocks of the given counts, each gap elements after the previous one. */
static struct layout make_layout(int n, const size_t *counts, size_t gap) {
  struct layout l = {.n = n};
  size_t at = 0;
  for (int b = 0; b < n; b++) {
    l.counts[b] = counts[b];
    l.displs[b] = at + gap;
    at = l.displs[b] + counts[b];
  }
  l.blocked_len = at + gap;
  return l;
}

/* ---- running every rank's plan against each other ----------------------- */

#define MAX_MSGS 4096

/* Unbounded FIFO of messages from one rank to another. */
struct queue {
  size_t head, tail;
  size_t len[MAX_MSGS];
  int64_t *data[MAX_MSGS];
};

struct sim {
  int n;
  const struct layout *l;
  int coll;
  int64_t *src[MAX_RANKS], *dst[MAX_RANKS];
  size_t src_len, dst_len[MAX_RANKS];
  struct queue q[MAX_RANKS][MAX_RANKS]; /* q[from][to] */
  char why[256];
};

static int reads_src(int kind) {
  return kind == RCC_STEP_SEND || kind == RCC_STEP_COPY ||
         kind == RCC_STEP_COPY_SEND || kind == RCC_STEP_RECV_REDUCE_SEND ||
         kind == RCC_STEP_RECV_REDUCE_COPY ||
         kind == RCC_STEP_RECV_REDUCE_COPY_SEND;
}

static int writes_dst(int kind) {
  return kind == RCC_STEP_RECV || kind == RCC_STEP_COPY ||
         kind == RCC_STEP_COPY_SEND || kind == RCC_STEP_RECV_COPY_SEND ||
         kind == RCC_STEP_RECV_REDUCE_COPY ||
         kind == RCC_STEP_RECV_REDUCE_COPY_SEND;
}

/* Runs step s of rank r if what it receives is there: 1 ran, 0 not yet,
 * -1 failed (sim->why says why). */
static int run_step(struct sim *m, int r, const struct rcc_step *s) {
  size_t k = s->nelem;
  const int64_t *in = NULL;
  struct queue *iq = NULL;
  if (s->acc != RCC_ACC_IN_SRC) { /* the ring's steps read src */
    snprintf(m->why, sizeof m->why, "rank %d: acc %d on step kind %d", r,
             s->acc, s->kind);
    return -1;
  }
  if (reads_src(s->kind) && s->src_off + k > m->src_len) {
    snprintf(m->why, sizeof m->why, "rank %d reads src [%zu, %zu) of %zu",
             r, s->src_off, s->src_off + k, m->src_len);
    return -1;
  }
  if (writes_dst(s->kind) && s->dst_off + k > m->dst_len[r]) {
    snprintf(m->why, sizeof m->why, "rank %d writes dst [%zu, %zu) of %zu",
             r, s->dst_off, s->dst_off + k, m->dst_len[r]);
    return -1;
  }
  if (rcc_step_receives(s->kind)) {
    iq = &m->q[s->recv_peer][r];
    if (iq->head == iq->tail)
      return 0;
    if (iq->len[iq->head % MAX_MSGS] != k) {
      snprintf(m->why, sizeof m->why, "rank %d expects %zu elements from "
               "rank %d, which sent %zu", r, k, s->recv_peer,
               iq->len[iq->head % MAX_MSGS]);
      return -1;
    }
    in = iq->data[iq->head % MAX_MSGS];
  }
  int64_t *out = NULL;
  if (rcc_step_sends(s->kind)) {
    struct queue *oq = &m->q[r][s->send_peer];
    if (oq->tail - oq->head == MAX_MSGS) {
      snprintf(m->why, sizeof m->why, "more than %d messages in flight",
               MAX_MSGS);
      return -1;
    }
    out = calloc(k + 1, sizeof(*out));
    oq->len[oq->tail % MAX_MSGS] = k;
    oq->data[oq->tail % MAX_MSGS] = out;
    oq->tail++;
  }
  const int64_t *src = m->src[r] + s->src_off;
  int64_t *dst = m->dst[r] + s->dst_off;
  for (size_t e = 0; e < k; e++) {
    switch (s->kind) {
    case RCC_STEP_SEND:
      out[e] = src[e];
      break;
    case RCC_STEP_RECV:
      dst[e] = in[e];
      break;
    case RCC_STEP_COPY:
      dst[e] = src[e];
      break;
    case RCC_STEP_COPY_SEND:
      dst[e] = out[e] = src[e];
      break;
    case RCC_STEP_RECV_COPY_SEND:
      dst[e] = out[e] = in[e];
      break;
    case RCC_STEP_RECV_REDUCE_SEND:
      out[e] = in[e] + src[e];
      break;
    case RCC_STEP_RECV_REDUCE_COPY:
      dst[e] = in[e] + src[e];
      break;
    case RCC_STEP_RECV_REDUCE_COPY_SEND:
      dst[e] = out[e] = in[e] + src[e];
      break;
    default:
      snprintf(m->why, sizeof m->why, "rank %d: step kind %d", r, s->kind);
      return -1;
    }
  }
  if (iq != NULL) {
    free(iq->data[iq->head % MAX_MSGS]);
    iq->head++;
  }
  return 1;
}

/* Runs the ranks' plans against each other, each as far as step() lets it
 * (1: the step ran, 0: it must wait for another rank), round after round,
 * until none moves; next[r] is where rank r stopped. -1 where step() found
 * a step wrong. */
static int run_plans(int n, const struct rcc_plan *plans, uint64_t *next,
                     int (*step)(void *ctx, int r, const struct rcc_step *s),
                     void *ctx) {
  for (int progress = 1; progress;) {
    progress = 0;
    for (int r = 0; r < n; r++)
      while (next[r] < plans[r].nsteps) {
        struct rcc_step s;
        rcc_plan_step(&plans[r], next[r], &s);
        int ran = step(ctx, r, &s);
        if (ran < 0)
          return -1;
        if (ran == 0)
          break;
        next[r]++;
        progress = 1;
      }
  }
  return 0;
}

static int ring_step(void *ctx, int r, const struct rcc_step *s) {
  return run_step(ctx, r, s);
}

/* Rank r's plan of channel c of the call. */
static void channel_plan(const struct layout *l, int coll, int r, int c,
                         int nch, size_t chunk, size_t granule, int uneven,
                         const int *ring, const int *ring_rev,
                         struct rcc_plan *p) {
  struct rcc_plan call = {
      .alg = RCC_ALG_RING,
      .sched = RCC_SCHED_RING,
      .coll = coll,
      .nranks = l->n,
      .rank = r,
      .ring = ring,
      .nchannels = nch,
      .granule = granule,
      .ring_rev = ring_rev,
      .count = l->counts[0],
      .counts = uneven ? l->counts : NULL,
      .displs = uneven ? l->displs : NULL,
      .chunk_elems = chunk,
  };
  for (int q = 0; q < l->n; q++) {
    if (ring[q] == r)
      call.pos = q;
    if (ring_rev[q] == r)
      call.pos_rev = q;
  }
  rcc_plan_channel(&call, c, p);
  rcc_plan_build(p);
}

/* Runs every rank's plans of every channel, channel after channel; 0 when
 * each finished with nothing left in flight. */
static int simulate(struct sim *m, int nch, size_t chunk, size_t granule,
                    int uneven, const int *ring, const int *ring_rev) {
  for (int c = 0; c < nch; c++) {
    struct rcc_plan plans[MAX_RANKS];
    uint64_t next[MAX_RANKS] = {0};
    for (int r = 0; r < m->n; r++)
      channel_plan(m->l, m->coll, r, c, nch, chunk, granule, uneven, ring,
                   ring_rev, &plans[r]);
    if (run_plans(m->n, plans, next, ring_step, m) != 0)
      return -1;
    for (int r = 0; r < m->n; r++) {
      if (next[r] != plans[r].nsteps) {
        snprintf(m->why, sizeof m->why, "channel %d: rank %d stuck at step "
                 "%llu of %llu", c, r, (unsigned long long)next[r],
                 (unsigned long long)plans[r].nsteps);
        return -1;
      }
      for (int q = 0; q < m->n; q++)
        if (m->q[q][r].head != m->q[q][r].tail) {
          snprintf(m->why, sizeof m->why, "channel %d: a message from rank "
                   "%d to rank %d was never received", c, q, r);
          return -1;
        }
    }
  }
  return 0;
}

/* The input of rank r at element e of its send buffer. */
static int64_t input(int r, size_t e) {
  return (int64_t)r * 100000 + 3 * (int64_t)e + 1;
}

/* An uneven AllGather (uneven 1) or Reduce-Scatter, checked against the
 * reference; returns 0, or -1 after printing why. */
static int check_call(const struct layout *l, int coll, int nch, size_t chunk,
                      size_t granule, const int *ring, const int *ring_rev) {
  static struct sim m; /* large: its queues */
  int n = l->n, gather = coll == RCC_COLL_ALLGATHER, bad = 0;
  memset(&m, 0, sizeof m);
  m.n = n;
  m.l = l;
  m.coll = coll;
  for (int r = 0; r < n; r++) {
    size_t slen = gather ? l->counts[r] : l->blocked_len;
    m.src_len = slen; /* the same for every rank but the AllGather's */
    m.dst_len[r] = gather ? l->blocked_len : l->counts[r];
    m.src[r] = calloc(slen + 1, sizeof(int64_t));
    m.dst[r] = calloc(m.dst_len[r] + 1, sizeof(int64_t));
    for (size_t e = 0; e < slen; e++)
      m.src[r][e] = input(r, e);
    for (size_t e = 0; e < m.dst_len[r]; e++)
      m.dst[r][e] = GAP;
  }
  if (gather) { /* each rank's own length: the largest bounds all */
    m.src_len = 0;
    for (int r = 0; r < n; r++)
      m.src_len = l->counts[r] > m.src_len ? l->counts[r] : m.src_len;
  }
  if (simulate(&m, nch, chunk, granule, 1, ring, ring_rev) != 0) {
    bad = 1;
    fprintf(stderr, "%s n=%d ch=%d chunk=%zu granule=%zu: %s\n",
            gather ? "allgatherv" : "reduce_scatterv", n, nch, chunk, granule,
            m.why);
  }
  for (int r = 0; r < n && !bad; r++) {
    for (size_t e = 0; e < m.dst_len[r] && !bad; e++) {
      int64_t want = GAP;
      if (gather) {
        for (int b = 0; b < n; b++)
          if (e >= l->displs[b] && e < l->displs[b] + l->counts[b])
            want = input(b, e - l->displs[b]);
      } else {
        want = 0;
        for (int q = 0; q < n; q++)
          want += input(q, l->displs[r] + e);
      }
      if (m.dst[r][e] != want) {
        bad = 1;
        fprintf(stderr, "%s n=%d ch=%d chunk=%zu granule=%zu: rank %d "
                "element %zu is %lld, not %lld\n",
                gather ? "allgatherv" : "reduce_scatterv", n, nch, chunk,
                granule, r, e, (long long)m.dst[r][e], (long long)want);
      }
    }
  }
  for (int r = 0; r < n; r++) {
    free(m.src[r]);
    free(m.dst[r]);
    for (int q = 0; q < n; q++) /* messages left by a failure */
      for (; m.q[q][r].head != m.q[q][r].tail; m.q[q][r].head++)
        free(m.q[q][r].data[m.q[q][r].head % MAX_MSGS]);
  }
  return bad ? -1 : 0;
}

/* A ring that is not 0..n-1, and its reverse. */
static void rings(int n, int *ring, int *ring_rev) {
  for (int q = 0; q < n; q++)
    ring[q] = (q + 1) % n;
  for (int q = 0; q < n; q++)
    ring_rev[q] = ring[(n - q) % n];
}

Test(uneven, ring_reduce_scatter_and_allgather_step_by_step) {
  static const size_t shapes[][MAX_RANKS] = {
      {5, 0, 17, 1, 9, 33}, /* an empty block, mixed sizes */
      {0, 0, 0, 0, 0, 12},  /* one block holds everything */
      {40, 3, 3, 3, 3, 3},  /* one long block */
      {7, 7, 7, 7, 7, 7},   /* even, given as counts */
      {0, 0, 0, 0, 0, 0},   /* nothing at all */
  };
  int cases = 0;
  for (int n = 2; n <= MAX_RANKS; n++) {
    int ring[MAX_RANKS], ring_rev[MAX_RANKS];
    rings(n, ring, ring_rev);
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
      for (size_t gap = 0; gap <= 2; gap += 2) {
        struct layout l = make_layout(n, shapes[sh], gap);
        for (int nch = 1; nch <= 3; nch++)
          for (size_t chunk = 1; chunk <= 5; chunk += 2)
            for (size_t g = 1; g <= 4; g += 3) {
              cr_assert_eq(check_call(&l, RCC_COLL_ALLGATHER, nch, chunk, g,
                                      ring, ring_rev), 0);
              cr_assert_eq(check_call(&l, RCC_COLL_REDUCE_SCATTER, nch, chunk,
                                      g, ring, ring_rev), 0);
              cases += 2;
            }
      }
  }
  cr_assert_gt(cases, 1000);
}

/* Plans without counts and plans whose counts are all equal (displs b *
 * count) give the same steps: the uneven path is the even one's
 * generalisation, not a second schedule. */
Test(even, counts_all_equal_give_the_plain_plans_steps) {
  for (int n = 2; n <= MAX_RANKS; n++) {
    int ring[MAX_RANKS], ring_rev[MAX_RANKS];
    rings(n, ring, ring_rev);
    for (size_t count = 0; count <= 37; count += 37 / 3)
      for (int nch = 1; nch <= 3; nch++) {
        size_t same[MAX_RANKS];
        for (int b = 0; b < n; b++)
          same[b] = count;
        struct layout l = make_layout(n, same, 0);
        for (int coll = RCC_COLL_REDUCE_SCATTER; coll <= RCC_COLL_ALLGATHER;
             coll++)
          for (int r = 0; r < n; r++)
            for (int c = 0; c < nch; c++) {
              struct rcc_plan even, uneven;
              channel_plan(&l, coll, r, c, nch, 4, 2, 0, ring, ring_rev,
                           &even);
              channel_plan(&l, coll, r, c, nch, 4, 2, 1, ring, ring_rev,
                           &uneven);
              cr_assert_eq(even.nsteps, uneven.nsteps);
              for (uint64_t i = 0; i < even.nsteps; i++) {
                struct rcc_step a, b;
                rcc_plan_step(&even, i, &a);
                rcc_plan_step(&uneven, i, &b);
                cr_assert(a.kind == b.kind && a.block == b.block &&
                              a.send_peer == b.send_peer &&
                              a.recv_peer == b.recv_peer &&
                              a.src_off == b.src_off &&
                              a.dst_off == b.dst_off && a.nelem == b.nelem,
                          "%s n=%d count=%zu rank %d channel %d/%d step "
                          "%llu: the even plan's offsets %zu/%zu, %zu "
                          "elements; the counted plan's %zu/%zu, %zu",
                          coll == RCC_COLL_ALLGATHER ? "allgather"
                                                     : "reduce_scatter",
                          n, count, r, c, nch, (unsigned long long)i,
                          a.src_off, a.dst_off, a.nelem, b.src_off, b.dst_off,
                          b.nelem);
              }
            }
      }
  }
}

/* ---- AllToAllv through FIFOs of two slots -------------------------------- */

#define A2AV_RANKS 8
#define A2AV_SLOTS 2 /* RINGCC_NSLOTS' least */

struct a2av_msg {
  int64_t *data;
  size_t nelem;
};

struct a2av_sim {
  int n;
  size_t sc[A2AV_RANKS][A2AV_RANKS], sd[A2AV_RANKS][A2AV_RANKS];
  size_t rc[A2AV_RANKS][A2AV_RANKS], rd[A2AV_RANKS][A2AV_RANKS];
  size_t slen[A2AV_RANKS], rlen[A2AV_RANKS];
  int64_t *src[A2AV_RANKS], *dst[A2AV_RANKS];
  /* fifo[q][r]: rank q to rank r, A2AV_SLOTS messages at most */
  struct a2av_msg fifo[A2AV_RANKS][A2AV_RANKS][A2AV_SLOTS];
  unsigned head[A2AV_RANKS][A2AV_RANKS], count[A2AV_RANKS][A2AV_RANKS];
  char why[256];
};

/* A random layout: rank q sends rank r sc[q][r] elements (zeros often),
 * its blocks in a shuffled order with gaps between them; r's receive
 * displacements likewise. */
static void a2av_layout(struct a2av_sim *m, int n, unsigned *seed) {
  m->n = n;
  for (int q = 0; q < n; q++)
    for (int r = 0; r < n; r++) {
      unsigned x = (unsigned)rand_r(seed);
      m->sc[q][r] = x % 4 == 0 ? 0 : x % 23;
      m->rc[r][q] = m->sc[q][r];
    }
  for (int q = 0; q < n; q++) {
    int order[A2AV_RANKS];
    for (int k = 0; k < 2; k++) { /* the send side, then the receive side */
      size_t(*c)[A2AV_RANKS] = k == 0 ? m->sc : m->rc;
      size_t(*d)[A2AV_RANKS] = k == 0 ? m->sd : m->rd;
      for (int b = 0; b < n; b++)
        order[b] = b;
      for (int b = n - 1; b > 0; b--) {
        int o = rand_r(seed) % (b + 1), t = order[b];
        order[b] = order[o];
        order[o] = t;
      }
      size_t at = 0;
      for (int b = 0; b < n; b++) {
        at += (size_t)(rand_r(seed) % 3); /* a gap */
        d[q][order[b]] = at;
        at += c[q][order[b]];
      }
      if (k == 0)
        m->slen[q] = at + 1;
      else
        m->rlen[q] = at + 1;
    }
  }
}

/* Rank r's step s, against its FIFOs: 1 done, 0 must wait, -1 wrong. */
static int a2av_run_step(struct a2av_sim *m, int r, const struct rcc_step *s) {
  switch (s->kind) {
  case RCC_STEP_COPY:
    if (s->src_off + s->nelem > m->slen[r] ||
        s->dst_off + s->nelem > m->rlen[r])
      break;
    memcpy(m->dst[r] + s->dst_off, m->src[r] + s->src_off,
           s->nelem * sizeof(int64_t));
    return 1;
  case RCC_STEP_SEND: {
    int to = s->send_peer;
    if (to < 0 || to >= m->n || to == r || s->src_off + s->nelem > m->slen[r])
      break;
    if (m->count[r][to] == A2AV_SLOTS)
      return 0;
    struct a2av_msg *g =
        &m->fifo[r][to][(m->head[r][to] + m->count[r][to]) % A2AV_SLOTS];
    g->nelem = s->nelem;
    g->data = malloc((s->nelem + 1) * sizeof(int64_t));
    memcpy(g->data, m->src[r] + s->src_off, s->nelem * sizeof(int64_t));
    m->count[r][to]++;
    return 1;
  }
  case RCC_STEP_RECV: {
    int from = s->recv_peer;
    if (from < 0 || from >= m->n || from == r ||
        s->dst_off + s->nelem > m->rlen[r])
      break;
    if (m->count[from][r] == 0)
      return 0;
    struct a2av_msg *g = &m->fifo[from][r][m->head[from][r]];
    if (g->nelem != s->nelem) {
      snprintf(m->why, sizeof m->why, "rank %d expects %zu elements from "
               "rank %d; the piece holds %zu", r, s->nelem, from, g->nelem);
      return -1;
    }
    memcpy(m->dst[r] + s->dst_off, g->data, s->nelem * sizeof(int64_t));
    free(g->data);
    m->head[from][r] = (m->head[from][r] + 1) % A2AV_SLOTS;
    m->count[from][r]--;
    return 1;
  }
  default:
    break;
  }
  snprintf(m->why, sizeof m->why, "rank %d: step kind %d, peers %d/%d, "
           "offsets %zu/%zu, %zu elements: not a step of this call", r,
           s->kind, s->send_peer, s->recv_peer, s->src_off, s->dst_off,
           s->nelem);
  return -1;
}

static int a2av_step(void *ctx, int r, const struct rcc_step *s) {
  return a2av_run_step(ctx, r, s);
}

/* Runs every rank's AllToAllv plan (chunk elements a piece) against the
 * others; 0, or -1 with m->why. */
static int a2av_simulate(struct a2av_sim *m, size_t chunk) {
  int n = m->n;
  struct rcc_plan plans[A2AV_RANKS];
  uint64_t next[A2AV_RANKS] = {0};
  for (int r = 0; r < n; r++) {
    plans[r] = (struct rcc_plan){
        .alg = RCC_ALG_PAIRWISE_V, .sched = RCC_SCHED_DIRECT,
        .coll = RCC_COLL_ALLTOALLV, .nranks = n, .rank = r, .nchannels = 1,
        .granule = 1, .counts = m->sc[r], .displs = m->sd[r],
        .recv_counts = m->rc[r], .recv_displs = m->rd[r],
        .chunk_elems = chunk, .root = -1};
    rcc_plan_build(&plans[r]);
  }
  if (run_plans(n, plans, next, a2av_step, m) != 0)
    return -1;
  for (int r = 0; r < n; r++)
    if (next[r] != plans[r].nsteps) {
      snprintf(m->why, sizeof m->why, "rank %d stuck at step %llu of %llu",
               r, (unsigned long long)next[r],
               (unsigned long long)plans[r].nsteps);
      return -1;
    }
  for (int q = 0; q < n; q++)
    for (int r = 0; r < n; r++)
      if (m->count[q][r] != 0) {
        snprintf(m->why, sizeof m->why, "a piece from rank %d to rank %d "
                 "was never received", q, r);
        return -1;
      }
  return 0;
}

static int a2av_check(int n, size_t chunk, unsigned seed) {
  static struct a2av_sim m;
  unsigned s = seed;
  int bad = 0;
  memset(&m, 0, sizeof m);
  a2av_layout(&m, n, &s);
  for (int r = 0; r < n; r++) {
    m.src[r] = malloc(m.slen[r] * sizeof(int64_t));
    m.dst[r] = malloc(m.rlen[r] * sizeof(int64_t));
    for (size_t e = 0; e < m.slen[r]; e++)
      m.src[r][e] = input(r, e);
    for (size_t e = 0; e < m.rlen[r]; e++)
      m.dst[r][e] = GAP;
  }
  if (a2av_simulate(&m, chunk) != 0) {
    bad = 1;
    fprintf(stderr, "alltoallv n=%d chunk=%zu seed %u: %s\n", n, chunk, seed,
            m.why);
  }
  for (int r = 0; r < n && !bad; r++)
    for (size_t e = 0; e < m.rlen[r] && !bad; e++) {
      int64_t want = GAP;
      for (int q = 0; q < n; q++)
        if (e >= m.rd[r][q] && e < m.rd[r][q] + m.rc[r][q])
          want = input(q, m.sd[q][r] + (e - m.rd[r][q]));
      if (m.dst[r][e] != want) {
        bad = 1;
        fprintf(stderr, "alltoallv n=%d chunk=%zu seed %u: rank %d element "
                "%zu is %lld, not %lld\n", n, chunk, seed, r, e,
                (long long)m.dst[r][e], (long long)want);
      }
    }
  for (int q = 0; q < n; q++) {
    free(m.src[q]);
    free(m.dst[q]);
    for (int r = 0; r < n; r++) /* pieces left by a failure */
      for (; m.count[q][r] > 0; m.count[q][r]--) {
        free(m.fifo[q][r][m.head[q][r]].data);
        m.head[q][r] = (m.head[q][r] + 1) % A2AV_SLOTS;
      }
  }
  return bad ? -1 : 0;
}

Test(alltoallv, every_rank_through_two_slot_fifos) {
  for (int n = 1; n <= A2AV_RANKS; n++)
    for (size_t chunk = 1; chunk <= 4; chunk++)
      for (unsigned seed = 1; seed <= 40; seed++)
        cr_assert_eq(a2av_check(n, chunk, seed * 7919u + (unsigned)n), 0);
}

/* Every step of a plan is one of its own and the steps past the end are
 * none: the layer search stops at the plan's end. */
Test(alltoallv, steps_past_the_end_are_none) {
  static struct a2av_sim m;
  unsigned seed = 12345;
  for (int n = 2; n <= A2AV_RANKS; n++) {
    memset(&m, 0, sizeof m);
    a2av_layout(&m, n, &seed);
    for (int r = 0; r < n; r++) {
      struct rcc_plan p = {
          .alg = RCC_ALG_PAIRWISE_V, .sched = RCC_SCHED_DIRECT,
          .coll = RCC_COLL_ALLTOALLV, .nranks = n, .rank = r,
          .nchannels = 1, .granule = 1, .counts = m.sc[r],
          .displs = m.sd[r], .recv_counts = m.rc[r], .recv_displs = m.rd[r],
          .chunk_elems = 3, .root = -1};
      rcc_plan_build(&p);
      struct rcc_step s;
      for (uint64_t i = 1; i < p.nsteps; i++) {
        rcc_plan_step(&p, i, &s);
        cr_assert(s.kind == RCC_STEP_SEND || s.kind == RCC_STEP_RECV,
                  "n=%d rank %d step %llu of %llu: kind %d", n, r,
                  (unsigned long long)i, (unsigned long long)p.nsteps, s.kind);
      }
      for (uint64_t i = p.nsteps; i < p.nsteps + 3; i++) {
        rcc_plan_step(&p, i, &s);
        cr_assert_eq(s.kind, RCC_STEP_NONE);
      }
    }
  }
}

/* ---- the host executor ---------------------------------------------------- */

static const size_t exec_counts[4] = {1000, 0, 37, 20000};
#define EXEC_GAP 5

static int allgatherv_body(h_ctx_t *ctx) {
  struct layout l = make_layout(4, exec_counts, EXEC_GAP);
  size_t mine = l.counts[ctx->rank];
  int32_t *send = malloc((mine + 1) * sizeof(int32_t));
  int32_t *recv = malloc(l.blocked_len * sizeof(int32_t));
  int bad = 0;
  for (size_t e = 0; e < mine; e++)
    send[e] = (int32_t)input(ctx->rank, e);
  for (int round = 0; round < 2 && !bad; round++) {
    for (size_t e = 0; e < l.blocked_len; e++)
      recv[e] = GAP;
    ringcc_result_t r = rcc_allgatherv_ring(ctx->comm, send, recv, l.counts,
                                            l.displs, RINGCC_INT32);
    if (r != RINGCC_SUCCESS) {
      bad = h_fail(ctx, "rcc_allgatherv_ring: %s (%s)", ringcc_strerror(r),
                   ringcc_comm_last_error(ctx->comm));
      break;
    }
    for (size_t e = 0; e < l.blocked_len && !bad; e++) {
      int64_t want = GAP;
      for (int b = 0; b < 4; b++)
        if (e >= l.displs[b] && e < l.displs[b] + l.counts[b])
          want = (int32_t)input(b, e - l.displs[b]);
      if (recv[e] != want)
        bad = h_fail(ctx, "round %d: element %zu is %d, not %lld", round, e,
                     recv[e], (long long)want);
    }
  }
  free(send);
  free(recv);
  return bad;
}

static void run_allgatherv(const char *nchannels) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.chunk_bytes = 256; /* many chunks per block */
  if (nchannels != NULL)
    setenv("RINGCC_NCHANNELS", nchannels, 1);
  h_run_opts_t o = {.nranks = 4, .body = allgatherv_body, .config = &cfg,
                    .timeout_s = 60, .name = "allgatherv"};
  bool ok = h_run(&o);
  unsetenv("RINGCC_NCHANNELS");
  cr_assert(ok, "the uneven ring AllGather failed (%s channels)",
            nchannels ? nchannels : "1");
}

Test(executor, allgatherv_one_channel, .timeout = 120) {
  run_allgatherv(NULL);
}

Test(executor, allgatherv_three_channels, .timeout = 120) {
  run_allgatherv("3");
}
