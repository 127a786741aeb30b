/*
 * nccl_exec.c - one checked NCCL call (struct rcc_nccl_call) on ringcc's
 * calls: what nccl_group.c runs, at once or at the end of a group.
 */
#include <stdint.h>
#include <string.h>

#include "nccl_layer.h"

/* Gather and scatter: ringcc_gather/ringcc_scatter where this ringcc has
 * them (the Makefile looks in include/ringcc.h), else point to point with
 * the root, which receives (sends) each rank's block in rank order. */
#ifndef RCC_NCCL_HAVE_GATHER
static ringcc_result_t gather_p2p(const struct rcc_nccl_call *c, int scatter) {
  struct ncclComm *comm = c->comm;
  size_t bytes = c->count * ringcc_datatype_size(c->dt);
  if (comm->rank != c->root)
    return scatter ? ringcc_recv(c->recv, c->count, c->dt, c->root, comm->rc,
                                 c->stream)
                   : ringcc_send(c->send, c->count, c->dt, c->root, comm->rc,
                                 c->stream);
  for (int q = 0; q < comm->nranks; q++) {
    char *block = (char *)(scatter ? (void *)(uintptr_t)c->send : c->recv) +
                  (size_t)q * bytes;
    ringcc_result_t r = RINGCC_SUCCESS;
    if (q == comm->rank) {
      if (c->stream != NULL && bytes > 0)
        return RINGCC_ERR_UNSUPPORTED; /* no device copy here */
      if (bytes > 0)
        memmove(scatter ? c->recv : block, scatter ? block : c->send, bytes);
    } else if (scatter) {
      r = ringcc_send(block, c->count, c->dt, q, comm->rc, c->stream);
    } else {
      r = ringcc_recv(block, c->count, c->dt, q, comm->rc, c->stream);
    }
    if (r != RINGCC_SUCCESS)
      return r;
  }
  return RINGCC_SUCCESS;
}
#endif

ringcc_result_t rcc_nccl_execute(const struct rcc_nccl_call *c) {
  ringcc_comm_t rc = c->comm->rc;
  switch (c->kind) {
  case RCC_NCCL_ALLREDUCE:
    return ringcc_allreduce(c->send, c->recv, c->count, c->dt, c->op, rc,
                            c->stream);
  case RCC_NCCL_REDUCE:
    return ringcc_reduce(c->send, c->recv, c->count, c->dt, c->op, c->root,
                         rc, c->stream);
  case RCC_NCCL_REDUCE_SCATTER:
    return ringcc_reduce_scatter(c->send, c->recv, c->count, c->dt, c->op, rc,
                                 c->stream);
  case RCC_NCCL_ALLGATHER:
    return ringcc_allgather(c->send, c->recv, c->count, c->dt, rc, c->stream);
  case RCC_NCCL_BCAST:
    /* NCCL's out-of-place broadcast: the root's input copied to its output
     * first (host buffers; checked at the call), then ringcc's in place */
    if (c->comm->rank == c->root && c->send != c->recv && c->count > 0)
      memmove(c->recv, c->send, c->count * ringcc_datatype_size(c->dt));
    return ringcc_bcast(c->recv, c->count, c->dt, c->root, rc, c->stream);
  case RCC_NCCL_ALLTOALL:
    return ringcc_alltoall(c->send, c->recv, c->count, c->dt, rc, c->stream);
  case RCC_NCCL_GATHER:
#ifdef RCC_NCCL_HAVE_GATHER
    return ringcc_gather(c->send, c->recv, c->count, c->dt, c->root, rc,
                         c->stream);
#else
    return gather_p2p(c, 0);
#endif
  case RCC_NCCL_SCATTER:
#ifdef RCC_NCCL_HAVE_GATHER
    return ringcc_scatter(c->send, c->recv, c->count, c->dt, c->root, rc,
                          c->stream);
#else
    return gather_p2p(c, 1);
#endif
  case RCC_NCCL_SEND:
    return ringcc_send(c->send, c->count, c->dt, c->root, rc, c->stream);
  default:
    return ringcc_recv(c->recv, c->count, c->dt, c->root, rc, c->stream);
  }
}

