/*
 * cma.h - direct large-message collectives on one host through cross-memory
 * attach (exec_cma.c).
 */
#ifndef RCC_CMA_H
#define RCC_CMA_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;
struct rcc_peer_info;

struct rcc_cma_call {
  int coll;          /* allreduce, reduce_scatter or allgather */
  const void *src;
  void *dst;
  void *scratch;     /* reduce_scatter: output staging when dst overlaps
                        inputs peers still read, else NULL */
  size_t count;      /* as in the public call */
  ringcc_datatype_t dt;
  ringcc_op_t op;
};
/* Init: the word peers try to read (into this rank's peer info). */
void rcc_cma_prepare(struct ringcc_comm *comm, struct rcc_peer_info *me);
/* Init, once transports are up: every rank probes every peer and all agree
 * whether the path is usable (rcc_cma_usable). */
ringcc_result_t rcc_cma_setup(struct ringcc_comm *comm, int64_t deadline);
/* 1 where every rank agreed at init that the path works (the tuner). */
int rcc_cma_usable(const struct ringcc_comm *comm);
/* Destroy: withdraws this communicator's share of the ptrace exception and
 * frees comm->cma. */
void rcc_cma_free(struct ringcc_comm *comm);
ringcc_result_t rcc_cma_run(struct ringcc_comm *comm,
                            const struct rcc_cma_call *call);

/* Reads bytes at a peer's address into local memory (the AllToAllv
 * executor, exec_a2av.c); 0 or an errno. */
int rcc_cma_peer_read(const struct ringcc_comm *comm, int peer, void *local,
                      uint64_t remote, size_t bytes);

#endif /* RCC_CMA_H */
