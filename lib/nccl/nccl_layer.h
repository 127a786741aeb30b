/*
 * nccl_layer.h - what the files of libnccl.so.2 share (nccl.c: errors,
 * enums, environment, communicators; nccl_coll.c: the collectives and
 * point to point, checked; nccl_group.c: groups; nccl_exec.c: a call on
 * ringcc's; nccl_more.c: premul-sum, memory, what is not supported).
 * Public ringcc API only.
 */
#ifndef RCC_NCCL_LAYER_H
#define RCC_NCCL_LAYER_H

#include <nccl.h>
#include <pthread.h>
#include <stdint.h>

#include "ringcc.h"

/* pncclX defined, ncclX its alias (as NCCL does). The files compile with
 * default visibility: lib/nccl/nccl.map exports nccl* and pnccl* only. */
#define NCCL_ALIAS(name)                                                       \
  extern __typeof(p##name) name __attribute__((alias("p" #name)));

/* ---- the communicator ------------------------------------------------- */

struct ncclComm {
  ringcc_comm_t rc;
  int rank, nranks;
  int revoked;               /* atomic: 0, or ncclCommRevoke (or a shrink
                                with NCCL_SHRINK_ABORT) under way (1) and
                                returned, the communicator quiescent (2) */
  int nonblocking;           /* config blocking = 0 */
  volatile int init_state;   /* ncclInProgress while the init thread runs */
  pthread_t init_thread;
  int init_joined;
  ringcc_unique_id_t id;     /* for the init thread */
  ringcc_config_t config;
  char name[64];             /* config commName */
};

/* One NCCL call, checked (nccl_coll.c): what a group records and
 * rcc_nccl_execute (nccl_exec.c) runs. root is the peer of send and recv. */
enum rcc_nccl_kind {
  RCC_NCCL_ALLREDUCE, RCC_NCCL_REDUCE, RCC_NCCL_REDUCE_SCATTER,
  RCC_NCCL_ALLGATHER, RCC_NCCL_BCAST, RCC_NCCL_ALLTOALL, RCC_NCCL_GATHER,
  RCC_NCCL_SCATTER, RCC_NCCL_SEND, RCC_NCCL_RECV
};
struct rcc_nccl_call {
  enum rcc_nccl_kind kind;
  const char *fn;
  struct ncclComm *comm;
  const void *send;
  void *recv;
  size_t count;
  ringcc_datatype_t dt;
  ringcc_op_t op;
  int root;
  void *stream;
};
ringcc_result_t rcc_nccl_execute(const struct rcc_nccl_call *c);
/* Outside a group: runs c now. Inside: records it for ncclGroupEnd. */
ncclResult_t rcc_nccl_group_add(const struct rcc_nccl_call *c);

/* The calling thread's message for ncclGetLastError; returns r. */
ncclResult_t rcc_nccl_fail(ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A ringcc result as NCCL's (the failure's message kept, comm's detailed
 * one where comm is not NULL). */
ncclResult_t rcc_nccl_from(ringcc_result_t r, ringcc_comm_t comm,
                           const char *fn);
/* NCCL's datatype and op as ringcc's, by table; ncclInvalidArgument with a
 * message for a value outside it. */
ncclResult_t rcc_nccl_dt(const char *fn, ncclDataType_t dt,
                         ringcc_datatype_t *out);
ncclResult_t rcc_nccl_op(const char *fn, ncclRedOp_t op, ringcc_op_t *out);
/* comm usable by fn: not NULL, its non-blocking init done and successful. */
ncclResult_t rcc_nccl_ready(const char *fn, ncclComm_t comm);
/* As ready, and not revoked: what an operation on comm needs. */
ncclResult_t rcc_nccl_usable(const char *fn, ncclComm_t comm);
ncclResult_t rcc_nccl_check_config(const char *fn, const ncclConfig_t *config);
struct ncclComm *rcc_nccl_comm_new(int nranks, int rank,
                                   const ncclConfig_t *config);

#endif /* RCC_NCCL_LAYER_H */
