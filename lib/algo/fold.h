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

/* Step i of a rank r >= p: its input to r - p, then the total back from it.
 * *piece gets the index of the piece the step moves. */
RCC_HD static inline void rcc_fold_outer_step(int r, int pw, uint64_t i,
                                              uint64_t pieces,
                                              struct rcc_step *s,
                                              uint64_t *piece) {
  int back = i >= pieces;
  s->kind = back ? RCC_STEP_RECV : RCC_STEP_SEND;
  if (back)
    s->recv_peer = r - pw;
  else
    s->send_peer = r - pw;
  *piece = back ? i - pieces : i;
}

/* The first steps of a rank r < n - p fold in rank r + p's input, this
 * rank's input as the left operand; 1 if step j is one of them. */
RCC_HD static inline int rcc_fold_in_step(int r, int pw, uint64_t j,
                                          uint64_t pieces,
                                          struct rcc_step *s) {
  if (j >= pieces)
    return 0;
  s->kind = RCC_STEP_RECV_REDUCE_COPY;
  s->recv_peer = r + pw;
  s->acc = RCC_ACC_SRC_IN;
  return 1;
}

/* The last steps of a rank r < n - p: the total (in dst) to rank r + p. */
RCC_HD static inline void rcc_fold_back_step(int r, int pw,
                                             struct rcc_step *s) {
  s->kind = RCC_STEP_SEND;
  s->send_peer = r + pw;
  s->acc = RCC_ACC_DST_IN;
}

#endif /* RCC_FOLD_H */
