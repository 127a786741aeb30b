/*
 * agree.h - steps of init that every rank takes together through the
 * bootstrap, so that every rank decides alike or fails alike, naming the
 * rank that failed (agree.c).
 */
#ifndef RCC_AGREE_H
#define RCC_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;

/* Every rank's ok, AND-ed: *all_ok is the same on every rank. */
ringcc_result_t rcc_all_agree(struct ringcc_comm *comm, int ok, int *all_ok,
                              int64_t deadline);
/* records holds nranks records of bytes each, each starting with an
 * int32_t status: this rank's status becomes mine, the records are
 * all-gathered (the rest of each record travels with it), and the result is
 * mine if it failed (its message is already recorded: instead of the
 * all-gather it sends its failure round the ring, bootstrap.h), else the
 * failed rank's code, named with its own sentence ("rank 3 failed during
 * SHM: shm on rank 3: cannot reserve ..."), or a rank gone, named. */
ringcc_result_t rcc_agree_records(struct ringcc_comm *comm,
                                  ringcc_result_t mine, void *records,
                                  size_t bytes, const char *phase,
                                  int64_t deadline);
/* A phase's status that is no failure of the rank's own (a ringcc_result_t
 * is >= 0): the rank stopped waiting because another rank failed or left
 * (rcc_agree_news); the agreement then names that rank and its reason. */
#define RCC_AGREE_INTERRUPTED (-1)

/* For a phase that waits on something else than the bootstrap (the network
 * transport's connections): whether to stop waiting, checked between short
 * waits. RINGCC_SUCCESS: go on. Else RCC_AGREE_INTERRUPTED, the status to
 * agree with: a failure is on its way round the ring, or the previous rank
 * is gone. So a rank that fails while the others wait on it makes every
 * rank stop within a wait each, naming it. */
ringcc_result_t rcc_agree_news(struct ringcc_comm *comm);

/* The same with nothing but the status. Every rank's result of an init phase: mine if it failed (its message is
 * already recorded), else the first rank's failure, named ("rank 3 failed
 * during SHM (...)"), else success on every rank. */
ringcc_result_t rcc_agree_status(struct ringcc_comm *comm, ringcc_result_t mine,
                                 const char *phase, int64_t deadline);

#endif /* RCC_AGREE_H */
