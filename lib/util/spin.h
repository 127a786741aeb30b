/*
 * spin.h - how long a waiting thread polls before it yields and sleeps.
 *
 * Polling answers fastest where every thread has a CPU, and only keeps the
 * CPU from the peer where they do not. So the number of polls adapts: a
 * wait that polling caught keeps it, one that outlasted it halves it, and
 * every 256th wait tries the full budget again. The executor's waits on
 * shared memory (exec_host.c) and the network engine's (net_proxy.c) share
 * one such state per communicator.
 *
 * Yields adapt the same way, for another reason: a sched_yield() hands the
 * CPU to whatever else is runnable. Where that is a peer rank, it runs its
 * step (microseconds) and the wait ends soon; where the CPUs are busy with
 * other processes, each yield waits out their time slices (milliseconds),
 * while a thread asleep on the futex is woken the moment its peer
 * publishes. So a yield that kept the CPU away RCC_YIELD_LOST_NS or longer
 * ends the yielding (the wait sleeps) and halves the yields of the next
 * waits; every 256th wait tries them all again.
 */
#ifndef RCC_SPIN_H
#define RCC_SPIN_H

#include <sched.h>
#include <stdint.h>

#include "clock.h"

#define RCC_YIELD_LOST_NS 250000 /* a peer's step takes far less */

struct rcc_spin {
  int spin;       /* polls before yielding, the most (RINGCC_SPIN) */
  int yields;     /* sched_yield()s before sleeping (RINGCC_YIELDS) */
  int now;        /* polls before yielding now: between 0 and spin */
  unsigned probe; /* waits with now below spin */
  int yields_now; /* yields before sleeping now: between 0 and yields */
  unsigned yprobe; /* waits with yields_now below yields */
  int64_t full_ns; /* how long spin polls of the network took the last time
                      they ran out (net_proxy.c) */
};

/* The polls the next wait may make. */
static inline int rcc_spin_budget(struct rcc_spin *s) {
  if (s->now < s->spin && (++s->probe & 255) == 0)
    return s->spin;
  return s->now;
}

/* The yields the next wait may make. */
static inline int rcc_yield_budget(struct rcc_spin *s) {
  if (s->yields_now < s->yields && (++s->yprobe & 255) == 0)
    return s->yields;
  return s->yields_now;
}

/* One yield of a wait whose budget was budget; 1 where it lost the CPU
 * to other work for long (then the wait should sleep: the yields of the
 * next waits are halved). */
static inline int rcc_yield(struct rcc_spin *s, int budget) {
  int64_t t0 = rcc_now_ns();
  sched_yield();
  if (rcc_now_ns() - t0 < RCC_YIELD_LOST_NS)
    return 0;
  s->yields_now = budget / 2;
  return 1;
}

#endif /* RCC_SPIN_H */
