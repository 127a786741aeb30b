/*
 * recdoubling.c - recursive-doubling AllReduce for small messages.
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
 *   T = (L+2e) * alpha + (L+2e) * S * beta + (L+e) * S * gamma,
 *       L = log2 p, e = 1 if n is not a power of two (the fold: fold.h)
 *
 * Over shared memory an exchange, which both partners must reach before
 * either goes on, costs about two ring steps: (2L+2e) alphas there
 * (docs/tuning.md has the measurements).
 *
 * Bitwise agreement: at every combine the partial of the lower group is the
 * left operand (RCC_ACC_DST_IN on the lower rank, RCC_ACC_IN_DST on the
 * upper; at a rank's first combine src stands for dst), so both partners
 * evaluate the same expression, and every rank of the first p ends with the
 * same bits; the others receive them.
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
#include "algorithms.h"
#include "fold.h"
#include "schedule.h"

void rcc_recdoubling_terms(int coll, int n, double S, double C,
                           struct rcc_cost_terms *t) {
  (void)coll, (void)C;
  int logp = rcc_floor_log2(n), extra = n > 0 && n != 1 << logp;
  rcc_set_terms(t, logp + 2 * extra, (logp + 2 * extra) * S,
                (logp + extra) * S, (logp + extra) * S);
}

void rcc_recdoubling_link_terms(int link, int n, struct rcc_cost_terms *t) {
  if (link == RCC_LINK_SHM && n > 1)
    t->alpha_count += rcc_floor_log2(n); /* two steps per exchange */
}

RCC_HD void rcc_plan_recdoubling(struct rcc_plan *p) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n), extra = n - pw;
  p->sched = RCC_SCHED_RECDOUBLING;
  p->alg = RCC_ALG_RECDOUBLING;
  p->steps_per_loop = r >= pw ? 2
                              : (n == 1) + 2 * (uint64_t)rcc_log2_of(pw) +
                                    (r < extra ? 2 : 0);
  p->nsteps = p->count == 0 ? 0 : p->steps_per_loop;
}

RCC_HD void rcc_recdoubling_step(const struct rcc_plan *p, uint64_t i,
                                 struct rcc_step *s) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n), extra = n - pw;
  int logp = rcc_log2_of(pw);
  uint64_t j, piece;

  rcc_step_whole(p, s);
  if (rcc_fold_before(p, i, 1, s, &j, &piece) != RCC_FOLD_NONE)
    return;
  if (j < 2 * (uint64_t)logp) {
    int k = (int)(j / 2), q = r ^ (1 << k);
    int first = k == 0 && r >= extra; /* the partial is still src */
    s->acc = first ? RCC_ACC_IN_SRC : RCC_ACC_DST_IN;
    if (j % 2 == 0) {
      s->kind = RCC_STEP_SEND;
      s->send_peer = q;
    } else { /* the lower group's partial on the left */
      s->kind = RCC_STEP_RECV_REDUCE_COPY;
      s->recv_peer = q;
      s->acc = r < q ? (first ? RCC_ACC_SRC_IN : RCC_ACC_DST_IN)
                     : (first ? RCC_ACC_IN_SRC : RCC_ACC_IN_DST);
      s->postop = (uint8_t)(k == logp - 1 && p->postop);
    }
    return;
  }
  rcc_fold_back_step(r, pw, s); /* the total to rank r + p */
}
