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
 *   AllToAllv  every pair at once, piece by piece: the own block is a
 *              local copy, then layer j (j = -1, 0, 1, ...) sends piece
 *              j+1 of the block for each peer (r+k)%n, k = 1..n-1, and
 *              receives piece j of the block of each peer (r-k)%n, where
 *              those blocks have such pieces. Sends run one piece ahead of
 *              receives (A2AV_AHEAD), so while a rank copies what arrived
 *              the next pieces are already on their way. With two slots a
 *              FIFO (RINGCC_NSLOTS >= 2) nothing deadlocks: a send of piece
 *              j+1 (layer j) that finds its FIFO full waits for a receiver
 *              that has not taken piece j-1, so is at a layer below j; a
 *              receive of piece j waits for a sender that has not sent
 *              it, so is at a layer below j-1; the rank at the lowest
 *              layer therefore never waits. (One slot would let a send
 *              wait for a receiver at the same layer.) A side of 0
 *              elements has no step: sendcounts[p] on rank r equals
 *              recvcounts[r] on rank p (checked by the size of every
 *              piece), so both ends skip it alike.
 *              T = (n-1)*alpha + max over ranks of the bytes sent * beta
 *              Rounds of one pair at a time (rank r sending to (r+k)%n
 *              and receiving from (r-k)%n in round k, as AllToAll does)
 *              were slower over TCP: a rank whose round's peer had no CPU
 *              waited, where now it moves the others' pieces (measured in
 *              docs/performance.md).
 *
 * Counts are in elements, pieces at most chunk_elems (one FIFO slot).
 */
#include "algorithms.h"
#include "schedule.h"

/* AllToAllv's sends run this many pieces ahead of its receives (the
 * fastest of 0, 1, 2 and 4 over TCP: docs/performance.md). A FIFO must hold
 * A2AV_AHEAD + 1 pieces of a pair: RINGCC_NSLOTS >= 2. */
#define A2AV_AHEAD 1

/* Gather, Scatter; AllToAllv with S = the most bytes one rank sends (the
 * tuner sees its average: every rank's sum of sendcounts over n). */
void rcc_direct_terms(int coll, int n, double S, double C,
                      struct rcc_cost_terms *t) {
  double f = n > 0 ? (n - 1.0) / n : 0;
  (void)coll, (void)C;
  rcc_set_terms(t, n > 1 ? n - 1 : 0, f * S, 0, f * S);
}

/* Pieces of the blocks this rank sends peer (r+k)%n and receives from
 * (r-k)%n. */
RCC_HD static uint64_t a2av_sends(const struct rcc_plan *p, int k) {
  return rcc_div_up(p->counts[(p->rank + k) % p->nranks], p->chunk_elems);
}

RCC_HD static uint64_t a2av_recvs(const struct rcc_plan *p, int k) {
  int n = p->nranks;
  return rcc_div_up(p->recv_counts[(p->rank + n - k) % n], p->chunk_elems);
}

RCC_HD static uint64_t clamp_pieces(int64_t j, uint64_t pieces) {
  return j <= 0 ? 0 : (uint64_t)j < pieces ? (uint64_t)j : pieces;
}

/* AllToAllv: the steps of layers before layer j (j >= -A2AV_AHEAD), the own
 * block's not counted: the first j+A2AV_AHEAD sends and j receives of
 * every pair. */
RCC_HD static uint64_t a2av_before(const struct rcc_plan *p, int64_t j) {
  uint64_t t = 0;
  for (int k = 1; k < p->nranks; k++)
    t += clamp_pieces(j + A2AV_AHEAD, a2av_sends(p, k)) +
         clamp_pieces(j, a2av_recvs(p, k));
  return t;
}

RCC_HD void rcc_plan_direct(struct rcc_plan *p) {
  int n = p->nranks;
  uint64_t pieces = rcc_div_up(p->count, p->chunk_elems);

  p->sched = RCC_SCHED_DIRECT;
  p->steps_per_loop = 1;
  if (p->coll == RCC_COLL_ALLTOALLV) {
    uint64_t steps = 1; /* the own block */
    p->alg = RCC_ALG_PAIRWISE_V;
    for (int k = 1; k < n; k++)
      steps += a2av_sends(p, k) + a2av_recvs(p, k);
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

/* AllToAllv step 1 <= i < nsteps: its layer j (a binary search over
 * a2av_before, O(n log(pieces)) divisions), then its place in that layer. */
RCC_HD static void alltoallv_step(const struct rcc_plan *p, uint64_t i,
                                  struct rcc_step *s) {
  int n = p->nranks, r = p->rank;
  size_t C = p->chunk_elems;
  uint64_t t = i - 1;
  /* a2av_before(lo) <= t < a2av_before(hi); t < nsteps - 1, all layers'
   * steps, so the doubling ends */
  int64_t lo = -A2AV_AHEAD, hi = 1;
  while (a2av_before(p, hi) <= t) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (a2av_before(p, mid) <= t)
      lo = mid;
    else
      hi = mid;
  }
  int64_t j = lo, q = j + A2AV_AHEAD;
  uint64_t m = t - a2av_before(p, j);
  for (int k = 1; k < n; k++) { /* the layer's sends */
    if (a2av_sends(p, k) <= (uint64_t)q || m-- > 0)
      continue;
    int to = (r + k) % n;
    size_t off = (size_t)q * C;
    s->kind = RCC_STEP_SEND;
    s->send_peer = to;
    s->block = to;
    s->src_off = p->displs[to] + off;
    s->dst_off = 0;
    s->nelem = rcc_min_sz(C, p->counts[to] - off);
    return;
  }
  for (int k = 1; k < n && j >= 0; k++) { /* then its receives */
    if (a2av_recvs(p, k) <= (uint64_t)j || m-- > 0)
      continue;
    int from = (r + n - k) % n;
    size_t off = (size_t)j * C;
    s->kind = RCC_STEP_RECV;
    s->recv_peer = from;
    s->block = from;
    s->src_off = 0;
    s->dst_off = p->recv_displs[from] + off;
    s->nelem = rcc_min_sz(C, p->recv_counts[from] - off);
    return;
  }
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
  if (i >= p->nsteps) { /* past the end: no such step */
    s->kind = RCC_STEP_NONE;
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
