/*
 * fold.h - the fold that recursive doubling and Rabenseifner share when n is
 * not a power of two (Thakur, Rabenseifner and Gropp 2005). With p the
 * largest power of two <= n, ranks p..n-1 hand their input to rank r - p,
 * which folds it into its own before the power-of-two exchanges, and get the
 * total back from it after. A message moves in `pieces` steps of one slot
 * (1 for recursive doubling, which sends whole messages).
 */
#ifndef RCC_FOLD_H
#define RCC_FOLD_H

#include "schedule.h"

enum { RCC_FOLD_NONE, RCC_FOLD_STEP, RCC_FOLD_COPY };

/* What step i of a plan (s started by rcc_step_whole) is before the
 * power-of-two exchanges:
 *   RCC_FOLD_STEP  a fold step, filled in: a rank r >= p hands its input to
 *                  r - p and gets the total back from it; a rank r < n - p
 *                  first folds in rank r + p's input (its own input the
 *                  left operand). *piece: which piece of the message.
 *   RCC_FOLD_COPY  a lone rank's copy (n = 1), filled in;
 *   RCC_FOLD_NONE  an exchange (or the total sent back after them): *j is
 *                  its index among the steps after the fold. */
RCC_HD static inline int rcc_fold_before(const struct rcc_plan *p,
                                         uint64_t i, uint64_t pieces,
                                         struct rcc_step *s, uint64_t *j,
                                         uint64_t *piece) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n);
  if (r >= pw) {
    int back = i >= pieces;
    s->kind = back ? RCC_STEP_RECV : RCC_STEP_SEND;
    if (back)
      s->recv_peer = r - pw;
    else
      s->send_peer = r - pw;
    *piece = back ? i - pieces : i;
    return RCC_FOLD_STEP;
  }
  if (n == 1) {
    s->kind = RCC_STEP_COPY;
    return RCC_FOLD_COPY;
  }
  *j = i;
  if (r < n - pw) {
    if (i < pieces) {
      s->kind = RCC_STEP_RECV_REDUCE_COPY;
      s->recv_peer = r + pw;
      s->acc = RCC_ACC_SRC_IN;
      *piece = i;
      return RCC_FOLD_STEP;
    }
    *j = i - pieces;
  }
  return RCC_FOLD_NONE;
}

/* The last steps of a rank r < n - p: the total (in dst) to rank r + p. */
RCC_HD static inline void rcc_fold_back_step(int r, int pw,
                                             struct rcc_step *s) {
  s->kind = RCC_STEP_SEND;
  s->send_peer = r + pw;
  s->acc = RCC_ACC_DST_IN;
}

#endif /* RCC_FOLD_H */
