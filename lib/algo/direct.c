/*
 * direct.c - schedules where every rank talks to the root, or to each peer,
 * directly: Gather and Scatter (the tuner's choice for large messages;
 * binomial.c has the trees for small ones) and AllToAllv.
 *
 * With n ranks, a block of B bytes per rank (S = n*B, the root's buffer),
 * alpha the per-message latency and beta the time per byte of the slowest
 * edge (the tuner's terms):
 *
 *   Gather     the root copies its own block, then receives every other
 *              rank's block in slot-sized pieces, one piece from each peer
 *              in turn (round robin, so that every peer's FIFO keeps
 *              moving); every other rank sends its block to the root.
 *              Every byte crosses one edge, all of them the root's:
 *              T = (n-1)*alpha + (n-1)/n*S*beta
 *   Scatter    the same the other way round: the root sends a piece to
 *              each peer in turn.
 *   AllToAllv  as AllToAll's pairwise exchange (pairwise.c) with a block of
 *              its own length per pair: the own block is a local copy,
 *              then in round k = 1..n-1 rank r sends its block for
 *              (r+k)%n and receives the block of (r-k)%n, a send and a
 *              receive in turn (both directions at once) until the longer
 *              side ends. A side of 0 elements has no step: sendcounts[p]
 *              on rank r equals recvcounts[r] on rank p (checked by the
 *              size of every piece), so both ends skip it alike.
 *              T = (n-1)*alpha + max over ranks of the bytes sent * beta
 *
 * Counts are in elements, pieces at most chunk_elems (one FIFO slot).
 */
#include "algorithms.h"
#include "schedule.h"

/* Gather, Scatter; AllToAllv with S = the most bytes one rank sends (the
 * tuner sees its average: every rank's sum of sendcounts over n). */
void rcc_direct_terms(int coll, int n, double S, double C,
                      struct rcc_cost_terms *t) {
  double f = n > 0 ? (n - 1.0) / n : 0;
  (void)coll, (void)C;
  rcc_set_terms(t, n > 1 ? n - 1 : 0, f * S, 0, f * S);
}

RCC_HD void rcc_plan_direct(struct rcc_plan *p) {
  int n = p->nranks;
  uint64_t pieces = rcc_div_up(p->count, p->chunk_elems);

  p->sched = RCC_SCHED_DIRECT;
  p->steps_per_loop = 1;
  if (p->coll == RCC_COLL_ALLTOALLV) {
    uint64_t steps = 1; /* the own block */
    p->alg = RCC_ALG_PAIRWISE_V;
    for (int k = 1; k < n; k++) {
      int to = (p->rank + k) % n, from = (p->rank + n - k) % n;
      steps += rcc_div_up(p->counts[to], p->chunk_elems) +
               rcc_div_up(p->recv_counts[from], p->chunk_elems);
    }
    p->nsteps = steps;
    return;
  }
  /* Gather, Scatter: the root copies its block and moves n-1 others; the
   * others each move their own. */
  p->alg = RCC_ALG_DIRECT;
  if (p->count == 0)
    p->nsteps = 0;
  else if (p->rank == p->root)
    p->nsteps = 1 + (uint64_t)(n - 1) * pieces;
  else
    p->nsteps = pieces;
}

/* AllToAllv step i >= 1: round by round, each round's sends and receives
 * in turn. */
RCC_HD static void alltoallv_step(const struct rcc_plan *p, uint64_t i,
                                  struct rcc_step *s) {
  int n = p->nranks, r = p->rank;
  size_t C = p->chunk_elems;
  uint64_t t = i - 1;
  for (int k = 1; k < n; k++) {
    int to = (r + k) % n, from = (r + n - k) % n;
    uint64_t ns = rcc_div_up(p->counts[to], C);
    uint64_t nr = rcc_div_up(p->recv_counts[from], C);
    if (t >= ns + nr) {
      t -= ns + nr;
      continue;
    }
    uint64_t both = ns < nr ? ns : nr, j;
    int send;
    if (t < 2 * both) {
      j = t / 2;
      send = (t % 2) == 0;
    } else {
      j = both + (t - 2 * both);
      send = ns > nr;
    }
    size_t off = (size_t)j * C;
    if (send) {
      s->kind = RCC_STEP_SEND;
      s->send_peer = to;
      s->block = to;
      s->src_off = p->displs[to] + off;
      s->dst_off = 0;
      s->nelem = rcc_min_sz(C, p->counts[to] - off);
    } else {
      s->kind = RCC_STEP_RECV;
      s->recv_peer = from;
      s->block = from;
      s->src_off = 0;
      s->dst_off = p->recv_displs[from] + off;
      s->nelem = rcc_min_sz(C, p->recv_counts[from] - off);
    }
    return;
  }
  s->kind = RCC_STEP_NONE; /* past the end: no such step */
}

/* Gather, Scatter: the root's step i >= 1 is piece (i-1)/(n-1) of peer
 * root+1+(i-1)%(n-1); another rank's step i is piece i of its block. */
RCC_HD static void rooted_step(const struct rcc_plan *p, uint64_t i,
                               struct rcc_step *s) {
  int n = p->nranks, gather = p->coll == RCC_COLL_GATHER;
  size_t C = p->chunk_elems, count = p->count;
  if (p->rank != p->root) {
    size_t off = (size_t)i * C;
    s->kind = gather ? RCC_STEP_SEND : RCC_STEP_RECV;
    if (gather)
      s->send_peer = p->root;
    else
      s->recv_peer = p->root;
    s->block = p->rank;
    s->src_off = s->dst_off = off;
    s->nelem = rcc_min_sz(C, count - off);
    return;
  }
  if (i == 0) { /* the root's own block */
    s->kind = RCC_STEP_COPY;
    s->block = p->root;
    s->src_off = gather ? 0 : (size_t)p->root * count;
    s->dst_off = gather ? (size_t)p->root * count : 0;
    s->nelem = count;
    return;
  }
  uint64_t t = i - 1;
  int peer = (int)((p->root + 1 + t % (uint64_t)(n - 1)) % (uint64_t)n);
  size_t off = (size_t)(t / (uint64_t)(n - 1)) * C;
  s->block = peer;
  s->nelem = rcc_min_sz(C, count - off);
  if (gather) {
    s->kind = RCC_STEP_RECV;
    s->recv_peer = peer;
    s->dst_off = (size_t)peer * count + off;
  } else {
    s->kind = RCC_STEP_SEND;
    s->send_peer = peer;
    s->src_off = (size_t)peer * count + off;
  }
}

RCC_HD void rcc_direct_step(const struct rcc_plan *p, uint64_t i,
                            struct rcc_step *s) {
  rcc_step_whole(p, s);
  if (p->coll != RCC_COLL_ALLTOALLV) {
    rooted_step(p, i, s);
    return;
  }
  if (i == 0) { /* the own block: a local copy */
    s->kind = RCC_STEP_COPY;
    s->block = p->rank;
    s->src_off = p->displs[p->rank];
    s->dst_off = p->recv_displs[p->rank];
    s->nelem = p->counts[p->rank];
    return;
  }
  alltoallv_step(p, i, s);
}
