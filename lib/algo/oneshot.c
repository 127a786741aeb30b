/*
 * oneshot.c - one-shot AllReduce: every rank's data reaches every peer in
 * one step, and each rank reduces locally, in rank order.
 *
 *   steps 0..n-2   send this rank's whole input to rank r+1+i (mod n)
 *   steps n-1..2n-2  for k = 0..n-1: acc <- d_0 (k = 0), acc <- acc op d_k
 *                  (d_k received from rank k, or this rank's own input)
 *
 * Every rank computes ((d_0 op d_1) op d_2) ... with the same operands in the
 * same order, so all ranks get bitwise-identical results although each
 * reduces for itself. Each rank sends (n-1)*S bytes and reduces n*S bytes,
 * but pays one message latency instead of the ring's 2(n-1):
 *
 *   T = alpha + (n-1) * S * beta + n * S * gamma
 *
 * in the textbook sense of alpha. The tuner's alpha is what one step costs
 * a rank, and a rank handles n-1 messages out and n-1 in, in flight
 * together: it charges n/2 of them over shared memory and n-1 over TCP,
 * where each message is a send of its own (docs/tuning.md has the
 * measurements). So it wins for small messages only; the message must fit
 * one FIFO slot. In place, the input is first copied aside (coll.c), since
 * the result is built in the output while the own input is still needed at
 * step k = rank.
 *
 * The board (RCC_ALG_BOARD, exec_board.c) runs the same reduction where all
 * ranks share memory: each publishes its input once in its own region and
 * reads the others' there, with no FIFO in between: (n-1)/2 alphas.
 */
#include "algorithms.h"
#include "schedule.h"

void rcc_oneshot_terms(int coll, int n, double S, double C,
                       struct rcc_cost_terms *t) {
  (void)coll, (void)C;
  rcc_set_terms(t, n / 2.0, (n - 1) * S, n * S, (n - 1) * S);
}

void rcc_oneshot_link_terms(int link, int n, struct rcc_cost_terms *t) {
  if (link == RCC_LINK_TCP && n > 1)
    t->alpha_count = n - 1;
}

void rcc_board_link_terms(int link, int n, struct rcc_cost_terms *t) {
  (void)link; /* the board exists only where every edge is shared memory */
  if (n > 1)
    t->alpha_count = (n - 1) / 2.0;
}

RCC_HD void rcc_plan_oneshot(struct rcc_plan *p) {
  p->sched = RCC_SCHED_ONESHOT;
  p->alg = RCC_ALG_ONESHOT;
  p->steps_per_loop = 2 * (uint64_t)p->nranks - 1;
  p->nsteps = p->count == 0 ? 0 : p->steps_per_loop;
}

RCC_HD void rcc_oneshot_step(const struct rcc_plan *p, uint64_t i,
                             struct rcc_step *s) {
  int n = p->nranks, r = p->rank;

  rcc_step_whole(p, s);
  if (i < (uint64_t)(n - 1)) {
    s->kind = RCC_STEP_SEND;
    s->send_peer = (int)((r + 1 + (int)i) % n);
    s->block = r;
    return;
  }
  int k = (int)(i - (uint64_t)(n - 1));
  s->block = k;
  s->postop = (uint8_t)(k == n - 1 && p->postop);
  if (k == r) {
    s->kind = k == 0 ? RCC_STEP_COPY : RCC_STEP_REDUCE_LOCAL;
  } else {
    s->kind = k == 0 ? RCC_STEP_RECV : RCC_STEP_RECV_REDUCE_COPY;
    s->acc = RCC_ACC_DST_IN;
    s->recv_peer = k;
  }
}
