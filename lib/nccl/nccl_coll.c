/*
 * nccl_coll.c - NCCL's collectives and point to point on ringcc's:
 * datatypes and ops through the tables of nccl.c, buffers and streams as
 * given (host buffers with a NULL stream block; device buffers go to
 * ringcc's CUDA executor). Every call is checked here and becomes a struct
 * rcc_nccl_call, run (nccl_exec.c) at once outside a group and at
 * ncclGroupEnd inside one (nccl_group.c).
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_layer.h"

/* Checks what every call takes and hands it on. */
static ncclResult_t submit(struct rcc_nccl_call *c, ncclDataType_t dt,
                           const ncclRedOp_t *op) {
  ncclResult_t r = rcc_nccl_usable(c->fn, c->comm);
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
  return submit(&c, datatype, NULL);
}
NCCL_ALIAS(ncclGather)

ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream) {
  CALL(RCC_NCCL_SCATTER, "ncclScatter", sendbuff, recvbuff, count, root);
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
