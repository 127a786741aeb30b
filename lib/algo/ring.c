/*
 * ring.c - ring Reduce-Scatter, ring AllGather, ring AllReduce, and the
 * chains (Broadcast, Reduce) that run along the same ring edges.
 *
 * n ranks sit on a ring in the order ring[0..n-1]; every rank sends only to
 * its successor and receives only from its predecessor. With S the message
 * size in bytes, alpha the per-message latency and beta the time per byte of
 * the slowest edge (the tuner's terms):
 *
 *   Reduce-Scatter   n-1 steps, each rank sends (n-1)/n * S bytes
 *                    (S = the full input, n blocks of S/n)
 *                    T = (n-1) * alpha + (n-1)/n * S * beta
 *   AllGather        n-1 steps, each rank sends (n-1)/n * S bytes
 *                    (S = the full output)
 *                    T = (n-1) * alpha + (n-1)/n * S * beta
 *   AllReduce        Reduce-Scatter then AllGather: 2(n-1) steps, each rank
 *                    sends 2(n-1)/n * S bytes
 *                    T = 2(n-1) * alpha + 2(n-1)/n * S * beta
 *   Broadcast/Reduce a chain of n-1 edges starting (ending) at the root,
 *                    pipelined in chunks of C bytes:
 *                    T = (n-2 + S/C) * (alpha + C * beta)
 *
 * Data is cut into chunks of at most chunk_elems elements (one FIFO slot) and
 * pipelined: a chunk moves on as soon as it arrives, so a large message never
 * waits for a whole block. AllReduce works on loops of n chunks: in loop l the
 * region [l*n*C, (l+1)*n*C) is split into n chunks (whole granules, so that a
 * chunk starts where vector loads can) and the rank at ring position p runs
 * (all chunk indices modulo n):
 *
 *   step 0          send               chunk p-1
 *   steps 1..n-2    recvReduceSend     chunk p-1-j
 *   step n-1        recvReduceCopySend chunk p     (p now owns the sum of chunk p)
 *   steps n..2n-3   recvCopySend       chunk p-(j-n+1)
 *   step 2n-2       recv               chunk p+1
 *
 * Reduce-Scatter and AllGather use the user's blocks instead of chunks of a
 * loop (block ring[c] belongs to the rank at position c), so rank r ends with
 * block r as MPI and NCCL define it. Their blocks may be uneven (a plan with
 * counts and displacements, schedule.h): each block moves its own length,
 * every rank runs the loops the longest block needs, and a shorter block's
 * pieces past its end are empty messages, so the neighbours' steps still
 * match; the cost is the longest block's, (n-1) * alpha + (n-1) * max
 * block * beta.
 */
#include "algorithms.h"
#include "schedule.h"

void rcc_ring_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t) {
  double f = n > 0 ? (n - 1.0) / n : 0;
  (void)C;
  if (coll == RCC_COLL_ALLREDUCE)
    rcc_set_terms(t, 2 * (n - 1), 2 * f * S, f * S, 2 * f * S);
  else /* reduce_scatter reduces what it receives; allgather copies */
    rcc_set_terms(t, n - 1, f * S, coll == RCC_COLL_REDUCE_SCATTER ? f * S : 0,
                  f * S);
}

/* Bcast and reduce: a pipeline of n-1 edges over k chunks, k = ceil(S/C). */
void rcc_chain_terms(int coll, int n, double S, double C,
                     struct rcc_cost_terms *t) {
  double k = C > 0 && S > C ? ceil(S / C) : 1;
  double c = S / k, stages = n - 2 + k;
  rcc_set_terms(t, stages, stages * c,
                coll == RCC_COLL_REDUCE ? stages * c : 0, S);
}

/* Reduce-Scatter, AllGather: the most elements a block's share has (every
 * block's count where they are even). */
RCC_HD static size_t longest_block(const struct rcc_plan *p) {
  size_t longest = 0, in, len;
  if (p->counts == NULL)
    return p->count;
  for (int b = 0; b < p->nranks; b++) {
    rcc_plan_block(p, b, &in, &len);
    longest = len > longest ? len : longest;
  }
  return longest;
}

RCC_HD void rcc_plan_ring(struct rcc_plan *p) {
  int n = p->nranks;
  uint64_t nloops;

  p->sched = RCC_SCHED_RING;
  p->state.chain.root_pos = 0;
  for (int i = 0; i < n; i++)
    if (p->ring[i] == p->root)
      p->state.chain.root_pos = i;
  p->alg = p->coll == RCC_COLL_BCAST || p->coll == RCC_COLL_REDUCE
               ? RCC_ALG_CHAIN
               : RCC_ALG_RING;
  switch (p->coll) {
  case RCC_COLL_ALLREDUCE:
    p->steps_per_loop = 2 * (uint64_t)n - 1;
    nloops = rcc_div_up(p->count, (size_t)n * p->chunk_elems);
    break;
  case RCC_COLL_REDUCE_SCATTER:
  case RCC_COLL_ALLGATHER:
    p->steps_per_loop = (uint64_t)n;
    nloops = rcc_div_up(longest_block(p), p->chunk_elems);
    break;
  case RCC_COLL_BCAST:
    p->steps_per_loop = 1;
    nloops = rcc_div_up(p->count, p->chunk_elems);
    break;
  default: /* RCC_COLL_REDUCE */
    p->steps_per_loop = 1;
    nloops = rcc_div_up(p->count, p->chunk_elems);
    break;
  }
  p->nsteps = nloops * p->steps_per_loop;
}

/* AllReduce: position-p chunk c of loop l, as (offset, nelem). */
RCC_HD static void allreduce_chunk(const struct rcc_plan *p, uint64_t loop,
                                   int c, struct rcc_step *s) {
  size_t loop_elems = (size_t)p->nranks * p->chunk_elems;
  size_t base = (size_t)loop * loop_elems;
  size_t rem = rcc_min_sz(loop_elems, p->count - base);
  size_t per = (rem + (size_t)p->nranks - 1) / (size_t)p->nranks;
  size_t g = p->granule > 0 ? p->granule : 1; /* aligned chunks: vectors */
  per = rcc_min_sz((per + g - 1) / g * g, p->chunk_elems);
  size_t off = rcc_min_sz((size_t)c * per, rem);

  s->block = c;
  s->src_off = s->dst_off = base + off;
  s->nelem = rcc_min_sz(per, rem - off);
}

RCC_HD static void allreduce_step(const struct rcc_plan *p, uint64_t loop,
                                  int j, struct rcc_step *s) {
  int n = p->nranks, pos = p->pos, c;

  if (j == 0) {
    s->kind = RCC_STEP_SEND;
    c = pos - 1;
  } else if (j < n - 1) {
    s->kind = RCC_STEP_RECV_REDUCE_SEND;
    c = pos - 1 - j;
  } else if (j == n - 1) {
    s->kind = RCC_STEP_RECV_REDUCE_COPY_SEND;
    s->postop = (uint8_t)p->postop;
    c = pos;
  } else if (j < 2 * n - 2) {
    s->kind = RCC_STEP_RECV_COPY_SEND;
    c = pos - (j - n + 1);
  } else {
    s->kind = RCC_STEP_RECV;
    c = pos + 1;
  }
  allreduce_chunk(p, loop, rcc_mod_n(c, n), s);
}

/* Reduce-Scatter, AllGather: the piece of block s->block at loop_off of
 * its share: *blocked, its offset in the blocked buffer (src of a
 * Reduce-Scatter, dst of an AllGather), *own, in the rank's own block (the
 * other buffer), and its size; an uneven block shorter than the longest has
 * empty pieces at its end (every rank still sends and receives them, so the
 * ranks' steps keep matching). */
RCC_HD static void block_piece(const struct rcc_plan *p, size_t loop_off,
                               struct rcc_step *s, size_t *blocked,
                               size_t *own) {
  size_t in, len, at = rcc_plan_block(p, s->block, &in, &len);
  size_t off = rcc_min_sz(loop_off, len); /* an empty piece: at the end */
  *blocked = at + off;
  *own = in + off;
  s->nelem = rcc_min_sz(p->chunk_elems, len - off);
}

RCC_HD static void reduce_scatter_step(const struct rcc_plan *p,
                                       size_t loop_off, int j,
                                       struct rcc_step *s) {
  int n = p->nranks, pos = p->pos, c;

  if (j == 0) {
    s->kind = RCC_STEP_SEND;
    c = rcc_mod_n(pos - 1, n);
  } else if (j < n - 1) {
    s->kind = RCC_STEP_RECV_REDUCE_SEND;
    c = rcc_mod_n(pos - 1 - j, n);
  } else {
    s->kind = RCC_STEP_RECV_REDUCE_COPY;
    s->postop = (uint8_t)p->postop;
    c = pos;
  }
  s->block = p->ring[c];
  block_piece(p, loop_off, s, &s->src_off, &s->dst_off);
}

RCC_HD static void allgather_step(const struct rcc_plan *p, size_t loop_off,
                                  int j, struct rcc_step *s) {
  int n = p->nranks, c = rcc_mod_n(p->pos - j, p->nranks);

  if (j == 0)
    s->kind = RCC_STEP_COPY_SEND;
  else if (j < n - 1)
    s->kind = RCC_STEP_RECV_COPY_SEND;
  else
    s->kind = RCC_STEP_RECV;
  s->block = p->ring[c];
  block_piece(p, loop_off, s, &s->dst_off, &s->src_off);
}

/* Chains: d is this rank's distance along the ring from the chain's head. */
RCC_HD static void chain_step(const struct rcc_plan *p, size_t loop_off,
                              struct rcc_step *s) {
  int n = p->nranks;

  if (p->coll == RCC_COLL_BCAST) {
    int d = rcc_mod_n(p->pos - p->state.chain.root_pos, n);
    s->kind = d == 0 ? RCC_STEP_COPY_SEND
              : d == n - 1 ? RCC_STEP_RECV : RCC_STEP_RECV_COPY_SEND;
  } else {
    int d = rcc_mod_n(p->pos - p->state.chain.root_pos - 1, n);
    s->kind = d == 0 ? RCC_STEP_SEND
              : d == n - 1 ? RCC_STEP_RECV_REDUCE_COPY
                           : RCC_STEP_RECV_REDUCE_SEND;
    if (d == n - 1)
      s->postop = (uint8_t)p->postop;
  }
  s->block = p->root;
  s->src_off = s->dst_off = loop_off;
}

RCC_HD void rcc_ring_step(const struct rcc_plan *p, uint64_t i,
                          struct rcc_step *s) {
  uint64_t loop = i / p->steps_per_loop;
  int j = (int)(i % p->steps_per_loop);
  size_t loop_off = (size_t)loop * p->chunk_elems;

  s->kind = RCC_STEP_NONE;
  s->postop = 0;
  s->conn_kind = RCC_CONN_COLL;
  s->last = 0;
  s->acc = RCC_ACC_IN_SRC;
  s->send_peer = p->ring[rcc_mod_n(p->pos + 1, p->nranks)];
  s->recv_peer = p->ring[rcc_mod_n(p->pos - 1, p->nranks)];
  switch (p->coll) {
  case RCC_COLL_ALLREDUCE:
    allreduce_step(p, loop, j, s);
    return;
  case RCC_COLL_REDUCE_SCATTER:
    reduce_scatter_step(p, loop_off, j, s);
    return;
  case RCC_COLL_ALLGATHER:
    allgather_step(p, loop_off, j, s);
    return;
  default:
    chain_step(p, loop_off, s);
    s->nelem = rcc_min_sz(p->chunk_elems, p->count - loop_off);
    return;
  }
}
