/*
 * vcoll.h - Gather, Scatter, AllGatherv and AllToAllv (vcoll.c): their
 * checks, their buffers and how they run, for the public calls in coll.c,
 * which fill a struct call and reach these through it.
 */
#ifndef RCC_VCOLL_H
#define RCC_VCOLL_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;

/* One call, as the public function got it. */
struct rcc_vcall {
  const char *fn;            /* "ringcc_gather" */
  int coll;                  /* enum rcc_coll: GATHER .. ALLTOALLV */
  const void *sendbuf;       /* as given */
  void *recvbuf;             /* as given */
  size_t count;              /* gather: sendcount; scatter: recvcount;
                                allgatherv: sendcount; alltoallv: 0 */
  int dt;
  int root;                  /* gather, scatter; else -1 */
  const size_t *sendcounts;  /* alltoallv */
  const size_t *sdispls;     /* alltoallv */
  const size_t *recvcounts;  /* allgatherv, alltoallv */
  const size_t *rdispls;     /* allgatherv (displs), alltoallv */
  void *stream;
  int device;                /* buffers in GPU memory (coll.c's locate) */
};

/* 1 for the collectives of this file. */
int rcc_vcoll_is(int coll);
/* The arguments besides datatype and root (checked by coll.c): NULL
 * arrays, overflows, overlaps, counts that disagree; INVALID_ARGUMENT
 * naming the argument, nothing sent. */
ringcc_result_t rcc_vcoll_validate(struct ringcc_comm *comm,
                                   const struct rcc_vcall *v);
/* The buffers the call reads and writes on this rank, for where they are
 * (NULL: none, or nothing of it touched). */
void rcc_vcoll_buffers(const struct ringcc_comm *comm,
                       const struct rcc_vcall *v, const void **send,
                       const void **recv);
/* Runs a validated call. *alg: the algorithm; *bytes: the statistics'. */
ringcc_result_t rcc_vcoll_execute(struct ringcc_comm *comm,
                                  const struct rcc_vcall *v, int *alg,
                                  uint64_t *bytes);

#endif /* RCC_VCOLL_H */
