/*
 * zc.h - the zero-copy executor (exec_zc.c): collectives whose buffers are
 * registered (registry.h), read and written in place by the ranks of one
 * host, with no FIFO in between; and AllReduce across hosts as zero-copy
 * inside each host with a ring between hosts.
 */
#ifndef RCC_ZC_H
#define RCC_ZC_H

#include <stddef.h>

#include "kernel.h"
#include "ringcc.h"

struct ringcc_comm;

struct rcc_zc_call {
  int coll;        /* enum rcc_coll: all but send, recv and barrier */
  const void *src; /* the input (in-place forms resolved) */
  void *dst;
  size_t count;    /* as in the public call */
  ringcc_datatype_t dt;
  ringcc_op_t op;  /* RINGCC_SUM where the collective has none */
  int root;        /* bcast, reduce; else -1 */
  int device;      /* buffers in GPU memory: AllReduce, Reduce-Scatter and
                      AllGather run as the zero-copy kernel (launch) */
  void *stream;    /* device calls: the caller's, and the blocks the */
  int channels;    /* caller launches the kernel with */
};

/* Runs the call zero-copy where every rank's buffers are registered (*ran =
 * 1). A device call (one host only) then has its kernel's arguments in
 * *launch, for the caller to enqueue (cuda.h's rcc_exec_cuda_zc: this layer
 * is below the CUDA one); the ranks' kernels synchronise among themselves.
 * Where some rank's buffers are not registered (or, for a device call, some
 * rank's device counters are not mapped here, or its in-place form needs
 * a copy), every rank returns RINGCC_SUCCESS with
 * *ran = 0 and nothing moved: the caller runs the unregistered path. On
 * comm, rcc_registry_kind must be RCC_ZC_ONE_HOST, or RCC_ZC_PER_HOST for
 * AllReduce; the same on every rank. */
ringcc_result_t rcc_exec_zc(struct ringcc_comm *comm,
                            const struct rcc_zc_call *call, int *ran,
                            struct rcc_zc_dev_args *launch);

#endif /* RCC_ZC_H */
