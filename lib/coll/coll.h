/*
 * coll.h - what the collective layer offers inside the library besides the
 * public calls of ringcc.h (coll.c).
 */
#ifndef RCC_COLL_H
#define RCC_COLL_H

#include <stddef.h>

#include "ringcc.h"

struct ringcc_comm;

/* AllGather of uneven blocks on host buffers: rank b's counts[b] elements
 * of sendbuf land at element displs[b] of every rank's recvbuf, over the
 * ring schedule with a plan that carries the counts (schedule.h), on the
 * communicator's host channels (RINGCC_NCHANNELS, else one). No RINGCC_ALGO,
 * no tuner, no statistics: the internal entry that tests the uneven plans
 * until the public v-collectives are built on them. counts and displs must
 * be the same on every rank. */
ringcc_result_t rcc_allgatherv_ring(ringcc_comm_t comm, const void *sendbuf,
                                    void *recvbuf, const size_t *counts,
                                    const size_t *displs,
                                    ringcc_datatype_t dt);

/* The plan and run of an AllGather of uneven blocks, as above, inside a
 * call that already entered the communicator (vcoll.c; ringcc_allgatherv
 * and rcc_allgatherv_ring). */
ringcc_result_t rcc_allgatherv_plan_run(struct ringcc_comm *comm,
                                        const void *sendbuf, void *recvbuf,
                                        const size_t *counts,
                                        const size_t *displs,
                                        ringcc_datatype_t dt);

/* The communicator's staging buffer of at least bytes (grown as needed,
 * kept until destroy; vcoll.c): in-place inputs copied aside, the binomial
 * trees' subtrees. NULL: out of memory (or bytes 0 before any). */
void *rcc_coll_scratch(struct ringcc_comm *comm, size_t bytes);

#endif /* RCC_COLL_H */
