/*
 * cma.h - direct large-message collectives on one host through cross-memory
 * attach (exec_cma.c; what they share: cma_peer.c).
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

/* Gather and Scatter by cross-memory attach (exec_cma_rooted.c), where the
 * tuner picks it (one host, from a block size on: algorithms.c) or
 * RINGCC_ALGO=cma forces it. The root tells each peer where its block is
 * (a direct scatter of one address over the FIFOs); every peer then moves
 * its own block at once, in parallel, by the kernel (Scatter: reads it out
 * of the root's sendbuf; Gather: writes it into the root's recvbuf); the
 * root copies its own block meanwhile and returns only once every peer
 * said it is done (a direct gather of one status word), so that no peer
 * touches its buffers after the call. block: bytes per rank (> 0); src,
 * dst: this rank's own, in-place forms resolved by the caller (the root's
 * own block may be where it belongs already). */
struct rcc_cma_rooted {
  int gather;      /* 1: Gather, 0: Scatter */
  int root;
  const void *src; /* Gather: the block sent; Scatter root: n blocks */
  void *dst;       /* Gather root: n blocks; Scatter: the block received */
  size_t block;
};
ringcc_result_t rcc_cma_rooted(struct ringcc_comm *comm,
                               const struct rcc_cma_rooted *c);

/* cma_peer.c's, for every executor that reads peers' memory in place
 * (exec_cma_rooted.c, exec_a2av.c, exec_p2p_place.c). Copies bytes between
 * local memory and a peer's address (to_peer: local -> peer); 0 or an
 * errno. */
int rcc_cma_peer_copy(const struct ringcc_comm *comm, int peer, void *local,
                      uint64_t remote, size_t bytes, int to_peer);
/* Runs a FIFO plan of bytes (RINGCC_UINT8) ordering peers' access. */
struct rcc_plan;
ringcc_result_t rcc_cma_exchange(struct ringcc_comm *comm,
                                 const struct rcc_plan *plan, const void *src,
                                 void *dst);
/* A rank whose buffers peers access in a call (a Gather or Scatter's root,
 * an AllToAllv sender) allows (1) and then forbids (0) it. */
void rcc_cma_allow_peers(struct ringcc_comm *comm, int allow);

#endif /* RCC_CMA_H */
