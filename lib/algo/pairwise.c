/*
 * pairwise.c - schedules where each rank talks to many peers directly:
 * AllToAll as a pairwise exchange, point-to-point Send/Recv, the
 * dissemination Barrier, and the one-rank local copy.
 *
 *   AllToAll  n-1 rounds; in round k rank r sends block (r+k)%n to rank
 *             (r+k)%n and receives block (r-k)%n from rank (r-k)%n, chunk by
 *             chunk (one slot per step, send before receive, so every round
 *             is a set of cycles that cannot deadlock). Each rank sends
 *             (n-1)/n * S bytes (S = its whole send buffer):
 *             T = (n-1) * alpha + (n-1)/n * S * beta
 *   Send/Recv the message in slot-sized pieces on the pair's own FIFO (never
 *             the collectives' FIFO), the last piece flagged, so messages
 *             match in order and a size mismatch is detected.
 *   Barrier   ceil(log2 n) rounds of empty messages: in round k rank r
 *             signals r+2^k and waits for r-2^k. T = ceil(log2 n) * alpha
 */
#include "algorithms.h"
#include "schedule.h"

void rcc_pairwise_terms(int coll, int n, double S, double C,
                        struct rcc_cost_terms *t) {
  (void)coll, (void)C;
  double f = n > 0 ? (n - 1.0) / n : 0;
  rcc_set_terms(t, n - 1, f * S, 0, f * S);
}

void rcc_p2p_terms(int coll, int n, double S, double C,
                   struct rcc_cost_terms *t) {
  (void)coll, (void)n, (void)C;
  rcc_set_terms(t, 1, S, 0, S);
}

void rcc_dissemination_terms(int coll, int n, double S, double C,
                             struct rcc_cost_terms *t) {
  (void)coll, (void)S, (void)C;
  rcc_set_terms(t, rcc_ceil_log2(n), 0, 0, 0);
}

/* One rank: a copy, no message. */
void rcc_local_terms(int coll, int n, double S, double C,
                     struct rcc_cost_terms *t) {
  (void)coll, (void)n, (void)S, (void)C;
  rcc_set_terms(t, 0, 0, 0, 0);
}

RCC_HD void rcc_plan_pairwise(struct rcc_plan *p) {
  int n = p->nranks;
  uint64_t nloops = rcc_div_up(p->count, p->chunk_elems);

  p->sched = RCC_SCHED_PAIRWISE;
  if (n == 1 && p->coll != RCC_COLL_SEND && p->coll != RCC_COLL_RECV) {
    p->alg = RCC_ALG_LOCAL;
    p->steps_per_loop = 1;
    p->nsteps = (p->count > 0 && p->coll != RCC_COLL_BARRIER) ? 1 : 0;
    return;
  }
  switch (p->coll) {
  case RCC_COLL_ALLTOALL:
    p->alg = RCC_ALG_PAIRWISE;
    p->steps_per_loop = nloops;
    p->nsteps = nloops == 0 ? 0 : 1 + (uint64_t)(n - 1) * nloops;
    break;
  case RCC_COLL_SEND:
  case RCC_COLL_RECV:
    /* An empty message is still one piece, so it matches in order. */
    p->alg = RCC_ALG_P2P;
    p->steps_per_loop = 1;
    p->nsteps = nloops == 0 ? 1 : nloops;
    break;
  default: { /* RCC_COLL_BARRIER */
    uint64_t rounds = 0;
    while (((uint64_t)1 << rounds) < (uint64_t)n)
      rounds++;
    p->alg = RCC_ALG_DISSEMINATION;
    p->steps_per_loop = 1;
    p->nsteps = rounds;
    break;
  }
  }
}

RCC_HD static void alltoall_step(const struct rcc_plan *p, uint64_t i,
                                 struct rcc_step *s) {
  int n = p->nranks, r = p->rank;

  if (i == 0) { /* this rank's own block: a local copy */
    s->kind = RCC_STEP_COPY;
    s->block = r;
    s->src_off = s->dst_off = (size_t)r * p->count;
    s->nelem = p->count;
    return;
  }
  uint64_t round = 1 + (i - 1) / p->steps_per_loop;
  size_t off = (size_t)((i - 1) % p->steps_per_loop) * p->chunk_elems;
  s->kind = RCC_STEP_SEND_RECV;
  s->send_peer = (int)((r + round) % (uint64_t)n);
  s->recv_peer = (int)((r + (uint64_t)n - round) % (uint64_t)n);
  s->block = s->send_peer;
  s->src_off = (size_t)s->send_peer * p->count + off;
  s->dst_off = (size_t)s->recv_peer * p->count + off;
  s->nelem = rcc_min_sz(p->chunk_elems, p->count - off);
}

RCC_HD void rcc_pairwise_step(const struct rcc_plan *p, uint64_t i,
                              struct rcc_step *s) {
  rcc_step_whole(p, s);
  s->nelem = 0;
  switch (p->alg) {
  case RCC_ALG_LOCAL:
    s->kind = RCC_STEP_COPY;
    s->nelem = p->count;
    s->postop = (uint8_t)p->postop;
    break;
  case RCC_ALG_PAIRWISE:
    alltoall_step(p, i, s);
    break;
  case RCC_ALG_P2P: {
    size_t off = (size_t)i * p->chunk_elems;
    s->kind = p->coll == RCC_COLL_SEND ? RCC_STEP_SEND : RCC_STEP_RECV;
    s->conn_kind = RCC_CONN_P2P;
    s->last = (uint8_t)(i + 1 == p->nsteps);
    if (p->coll == RCC_COLL_SEND)
      s->send_peer = p->root;
    else
      s->recv_peer = p->root;
    s->block = p->root;
    s->src_off = s->dst_off = off;
    s->nelem =
        rcc_min_sz(p->chunk_elems, p->count - rcc_min_sz(off, p->count));
    break;
  }
  default: { /* RCC_ALG_DISSEMINATION */
    uint64_t dist = (uint64_t)1 << i, n = (uint64_t)p->nranks;
    s->kind = RCC_STEP_SEND_RECV;
    s->send_peer = (int)(((uint64_t)p->rank + dist) % n);
    s->recv_peer = (int)(((uint64_t)p->rank + n - dist % n) % n);
    break;
  }
  }
}
