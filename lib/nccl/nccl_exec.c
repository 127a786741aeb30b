/*
 * nccl_exec.c - one checked NCCL call (struct rcc_nccl_call) on ringcc's
 * calls: what nccl_group.c runs, at once or at the end of a group.
 */
#include <stdint.h>
#include <string.h>

#include "nccl_layer.h"

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
    return ringcc_gather(c->send, c->recv, c->count, c->dt, c->root, rc,
                         c->stream);
  case RCC_NCCL_SCATTER:
    return ringcc_scatter(c->send, c->recv, c->count, c->dt, c->root, rc,
                          c->stream);
  case RCC_NCCL_SEND:
    return ringcc_send(c->send, c->count, c->dt, c->root, rc, c->stream);
  default:
    return ringcc_recv(c->recv, c->count, c->dt, c->root, rc, c->stream);
  }
}

