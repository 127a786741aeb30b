/*
 * nccl_coll.c - NCCL's collectives and point to point on ringcc's:
 * datatypes and ops through the tables of nccl.c, buffers and streams as
 * given (host buffers with a NULL stream block; device buffers go to
 * ringcc's CUDA executor). Every call is checked here and becomes a struct
 * rcc_nccl_call, run at once outside a group and at ncclGroupEnd inside one
 * (nccl_group.c).
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_layer.h"

/* Gather and scatter: ringcc_gather/ringcc_scatter where this ringcc has
 * them (the Makefile looks in include/ringcc.h), else point to point with
 * the root, which receives (sends) each rank's block in rank order. */
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

/* Checks what every call takes and hands it on. */
static ncclResult_t submit(struct rcc_nccl_call *c, ncclDataType_t dt,
                           const ncclRedOp_t *op) {
  ncclResult_t r = rcc_nccl_ready(c->fn, c->comm);
  if (r == ncclSuccess)
    r = rcc_nccl_dt(c->fn, dt, &c->dt);
  if (r == ncclSuccess && op != NULL)
    r = rcc_nccl_op(c->fn, *op, &c->op);
  if (r != ncclSuccess)
    return r;
  if (c->kind == RCC_NCCL_BCAST && c->comm->rank == c->root &&
      c->send != c->recv && c->count > 0) {
    if (c->stream != NULL)
      return rcc_nccl_fail(ncclInvalidUsage, "ncclBroadcast: out of place "
                           "with a stream is not supported (pass sendbuff == "
                           "recvbuff, or use host buffers)");
    if (c->send == NULL || c->recv == NULL)
      return rcc_nccl_fail(ncclInvalidArgument, "ncclBroadcast: argument "
                           "'%s' is NULL", c->send ? "recvbuff" : "sendbuff");
  }
  return rcc_nccl_group_add(c);
}

#define CALL(kind_, fn_, send_, recv_, count_, root_)                          \
  struct rcc_nccl_call c = {.kind = (kind_), .fn = (fn_), .comm = comm,        \
                            .send = (send_), .recv = (recv_),                  \
                            .count = (count_), .root = (root_),                \
                            .stream = stream}

ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  CALL(RCC_NCCL_ALLREDUCE, "ncclAllReduce", sendbuff, recvbuff, count, -1);
  return submit(&c, datatype, &op);
}
NCCL_ALIAS(ncclAllReduce)

ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  CALL(RCC_NCCL_REDUCE, "ncclReduce", sendbuff, recvbuff, count, root);
  return submit(&c, datatype, &op);
}
NCCL_ALIAS(ncclReduce)

ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff,
                                size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
  CALL(RCC_NCCL_REDUCE_SCATTER, "ncclReduceScatter", sendbuff, recvbuff,
       recvcount, -1);
  return submit(&c, datatype, &op);
}
NCCL_ALIAS(ncclReduceScatter)

ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff,
                            size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  CALL(RCC_NCCL_ALLGATHER, "ncclAllGather", sendbuff, recvbuff, sendcount, -1);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclAllGather)

ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  CALL(RCC_NCCL_BCAST, "ncclBroadcast", sendbuff, recvbuff, count, root);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclBroadcast)

ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  CALL(RCC_NCCL_BCAST, "ncclBcast", buff, buff, count, root);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclBcast)

ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  CALL(RCC_NCCL_ALLTOALL, "ncclAlltoAll", sendbuff, recvbuff, count, -1);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclAlltoAll)

ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  CALL(RCC_NCCL_GATHER, "ncclGather", sendbuff, recvbuff, count, root);
  if (comm != NULL && (root < 0 || root >= comm->nranks))
    return rcc_nccl_fail(ncclInvalidArgument, "ncclGather: argument 'root' "
                         "is %d; it must be in [0, %d]", root,
                         comm->nranks - 1);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclGather)

ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream) {
  CALL(RCC_NCCL_SCATTER, "ncclScatter", sendbuff, recvbuff, count, root);
  if (comm != NULL && (root < 0 || root >= comm->nranks))
    return rcc_nccl_fail(ncclInvalidArgument, "ncclScatter: argument 'root' "
                         "is %d; it must be in [0, %d]", root,
                         comm->nranks - 1);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclScatter)

ncclResult_t pncclSend(const void *sendbuff, size_t count,
                       ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  CALL(RCC_NCCL_SEND, "ncclSend", sendbuff, NULL, count, peer);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclSend)

ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                       int peer, ncclComm_t comm, cudaStream_t stream) {
  CALL(RCC_NCCL_RECV, "ncclRecv", NULL, recvbuff, count, peer);
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclRecv)
