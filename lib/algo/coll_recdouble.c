/*
 * coll_recdouble.c - recursive-doubling AllReduce for small messages.
 *
 * With p the largest power of two <= n: at step k (0 <= k < log2 p) rank r
 * exchanges its partial result with rank r ^ 2^k and combines the two; after
 * log2 p steps every one of the first p ranks holds the total. Ranks
 * p..n-1 first hand their input to rank r - p (which folds it in) and get
 * the total back at the end (Thakur, Rabenseifner and Gropp 2005).
 *
 * A rank handles 2 log2 p messages (plus 2 when n is not a power of two),
 * against one-shot's 2(n-1): on a transport where each message costs system
 * calls (TCP), that is what a small AllReduce pays for. Each rank sends
 * log2 p times S bytes, so it is for messages of one FIFO slot.
 *
 *   T = (log2 p [+ 2]) * alpha + log2 p * S * (beta + gamma)
 *
 * Bitwise agreement: at every combine the partial of the lower group is the
 * left operand (acc = 1: dst op in on the lower rank; acc = 2: in op dst on
 * the upper), so both partners evaluate the same expression, and every rank
 * of the first p ends with the same bits; the others receive them.
 *
 * Steps of rank r (one slot; dst holds the partial result once the first
 * combine wrote it, which reads src: no copy of the input into dst first):
 *   r >= p:  send src to r - p; recv dst from r - p
 *   r <  p:  [r < n - p: recvReduceCopy src op in from r + p]
 *            per k: send to r ^ 2^k (src at the first exchange of a rank
 *            that folded nothing in, dst after); recvReduceCopy from it
 *            [r < n - p: send dst to r + p]
 *   n = 1:   copy dst <- src
 * In place works as is: dst is only written after src was sent.
 */
#include "schedule.h"

void rcc_plan_recdouble(struct rcc_plan *p) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n), extra = n - pw;
  p->sched = RCC_SCHED_RD_ALLREDUCE;
  p->steps_per_loop = r >= pw ? 2
                              : (n == 1) + 2 * (uint64_t)rcc_log2_of(pw) +
                                    (r < extra ? 2 : 0);
  p->nsteps = p->count == 0 ? 0 : p->steps_per_loop;
  p->root_pos = 0;
}

RCC_HD void rcc_recdouble_step(const struct rcc_plan *p, uint64_t i,
                               struct rcc_step *s) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n), extra = n - pw;
  int logp = rcc_log2_of(pw);

  rcc_step_whole(p, s);
  if (r >= pw) { /* hand the input over, get the total back */
    if (i == 0) {
      s->kind = RCC_STEP_SEND;
      s->send_peer = r - pw;
    } else {
      s->kind = RCC_STEP_RECV;
      s->recv_peer = r - pw;
    }
    return;
  }
  if (n == 1) {
    s->kind = RCC_STEP_COPY;
    return;
  }
  uint64_t j = i;
  if (r < extra) {
    if (j == 0) { /* fold in rank r + p's input: ours is the left operand */
      s->kind = RCC_STEP_RECV_REDUCE_COPY;
      s->recv_peer = r + pw;
      s->acc = 3;
      return;
    }
    j--;
  }
  if (j < 2 * (uint64_t)logp) {
    int k = (int)(j / 2), q = r ^ (1 << k);
    int first = k == 0 && r >= extra; /* the partial is still src */
    s->acc = first ? 0 : 1;
    if (j % 2 == 0) {
      s->kind = RCC_STEP_SEND;
      s->send_peer = q;
    } else { /* the lower group's partial on the left */
      s->kind = RCC_STEP_RECV_REDUCE_COPY;
      s->recv_peer = q;
      s->acc = r < q ? (first ? 3 : 1) : (first ? 0 : 2);
      s->postop = (uint8_t)(k == logp - 1 && p->postop);
    }
    return;
  }
  s->kind = RCC_STEP_SEND; /* the total to rank r + p */
  s->send_peer = r + pw;
  s->acc = 1;
}
