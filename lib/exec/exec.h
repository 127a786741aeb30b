/*
 * exec.h - the host executor: runs a plan (schedule.h) on host buffers over
 * the FIFOs (exec_host.c), or a one-shot allreduce over the shared board
 * (exec_board.c).
 */
#ifndef RCC_EXEC_H
#define RCC_EXEC_H

#include "comm.h"
#include "ringcc.h"
#include "schedule.h"

/* A call's plan on comm before rcc_plan_build: the ranks and both rings from
 * the communicator, the rest as given (chunk_elems: elements per step). */
static inline struct rcc_plan rcc_exec_plan(const struct ringcc_comm *comm,
                                            int alg, int sched, int coll,
                                            int nchannels, size_t esize,
                                            size_t count, size_t chunk_elems,
                                            int root) {
  return (struct rcc_plan){
      .alg = alg,
      .sched = sched,
      .coll = coll,
      .nranks = comm->nranks,
      .rank = comm->rank,
      .pos = comm->ring_pos,
      .ring = comm->ring,
      .nchannels = nchannels,
      .granule = rcc_plan_granule(esize),
      .ring_rev = comm->ring_rev,
      .pos_rev = comm->ring_pos_rev,
      .count = count,
      .chunk_elems = chunk_elems,
      .root = root,
  };
}

ringcc_result_t rcc_exec_host(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op);
/* Runs call, a call's plan not yet split (rcc_plan_channel), over its
 * call->nchannels channels: one as rcc_exec_host does, several in turn. */
ringcc_result_t rcc_exec_host_channels(struct ringcc_comm *comm,
                                       const struct rcc_plan *call,
                                       const void *src, void *dst,
                                       ringcc_datatype_t dt, ringcc_op_t op);
/* A send or receive on host memory (of a group, or a blocking one): count
 * elements of dt. */
struct rcc_p2p_op {
  int send; /* 1: send buf to peer; 0: receive buf from peer */
  int peer; /* another rank */
  void *buf;
  size_t count;
  ringcc_datatype_t dt;
  int ran;  /* set by the run: the algorithm that moved it (RCC_ALG_P2P:
               the FIFO; RCC_ALG_CMA, RCC_ALG_ZEROCOPY: read in place,
               p2p_place.h) */
};
/* Runs the n operations together: each moves whenever its FIFO lets it, so
 * no order of sends and receives deadlocks; those on one FIFO (same peer and
 * direction) match in the order given. A large message on one host moves
 * as its place and is read in place by its receiver; a sender returns only
 * once it has been read. grouped: 1 for a group's (the hang report's hint),
 * 0 for a blocking ringcc_send or ringcc_recv (n = 1). */
ringcc_result_t rcc_exec_host_p2p(struct ringcc_comm *comm,
                                  struct rcc_p2p_op *ops, int n, int grouped);
/* One-shot allreduce over the board (board.h): where comm->board is set and the
 * message fits a region. */
ringcc_result_t rcc_exec_host_board(struct ringcc_comm *comm,
                                    const struct rcc_plan *plan,
                                    const void *src, void *dst,
                                    ringcc_datatype_t dt, ringcc_op_t op);

/* A point-to-point receive of at most plan->count elements into dst, from
 * peer or (RINGCC_ANY_SOURCE) from the first peer whose message is there;
 * exact: the message must have plan->count elements. *source, *count: its
 * sender and its elements. */
ringcc_result_t rcc_exec_host_recv_from(struct ringcc_comm *comm,
                                        const struct rcc_plan *plan, int peer,
                                        void *dst, ringcc_datatype_t dt,
                                        int exact, int *source,
                                        size_t *count);

/* For executors that synchronise through flags of their own (exec_zc.c):
 * waits until *word is no longer old as a FIFO wait does (polls, yields,
 * then sleeps on word as a futex, counting itself in *waiters), with the
 * same checks after each sleep: abort, a dead peer (comm->progress names
 * the peer waited for and the FIFO from it, whose dead word tells of a
 * rank that died elsewhere), the deadline (*deadline, 0 until the call's
 * first sleep) and the hang report. */
ringcc_result_t rcc_exec_host_wait(struct ringcc_comm *comm,
                                   const struct rcc_plan *plan, uint32_t *word,
                                   uint32_t *waiters, uint32_t old,
                                   int64_t *deadline);

#endif /* RCC_EXEC_H */
