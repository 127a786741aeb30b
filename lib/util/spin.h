/*
 * spin.h - how long a waiting thread polls before it yields and sleeps.
 *
 * Polling answers fastest where every thread has a CPU, and only keeps the
 * CPU from the peer where they do not. So the number of polls adapts: a
 * wait that polling caught keeps it, one that outlasted it halves it, and
 * every 256th wait tries the full budget again. The executor's waits on
 * shared memory (exec_host.c) and the network engine's (net_proxy.c) share
 * one such state per communicator.
 */
#ifndef RCC_SPIN_H
#define RCC_SPIN_H

#include <stdint.h>

struct rcc_spin {
  int spin;       /* polls before yielding, the most (RINGCC_SPIN) */
  int yields;     /* sched_yield()s before sleeping (RINGCC_YIELDS) */
  int now;        /* polls before yielding now: between 0 and spin */
  unsigned probe; /* waits with now below spin */
  int64_t full_ns; /* how long spin polls of the network took the last time
                      they ran out (net_proxy.c) */
};

/* The polls the next wait may make. */
static inline int rcc_spin_budget(struct rcc_spin *s) {
  if (s->now < s->spin && (++s->probe & 255) == 0)
    return s->spin;
  return s->now;
}

#endif /* RCC_SPIN_H */
