/*
 * a2av.h - AllToAllv on one host with each large block read in place by its
 * receiver (exec_a2av.c): from the sender's registered buffer as mapped here
 * (memcpy), else through cross-memory attach.
 */
#ifndef RCC_A2AV_H
#define RCC_A2AV_H

#include <stddef.h>

#include "ringcc.h"

struct ringcc_comm;

/* Blocks of at most this many bytes travel with the places of the larger
 * ones (on the board, or through the FIFOs); larger ones are read in place
 * (docs/tuning.md). */
#define RCC_A2AV_INLINE_MAX (8 << 10)

/* Counts and displacements in elements of esize bytes; src already
 * resolved for the in-place form (a copy of recvbuf). */
struct rcc_a2av {
  const void *src;
  const size_t *sendcounts, *sdispls;
  void *dst;
  const size_t *recvcounts, *rdispls;
  size_t esize;
};

/* Runs on every rank of comm together, where the tuner chose it (alike on
 * every rank): rcc_cma_usable(comm), or every rank on one host with
 * registered memory (rcc_registry_kind RCC_ZC_ONE_HOST). One round on the
 * one-shot board where comm has one (board.h), else pairwise exchanges over
 * the FIFOs. A block the receiver can read neither way moves through the
 * FIFOs after the others. */
ringcc_result_t rcc_a2av_run(struct ringcc_comm *comm, const struct rcc_a2av *v);

#endif /* RCC_A2AV_H */
