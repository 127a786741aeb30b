/*
 * nccl_group.c - ncclGroupStart/End/SimulateEnd: per thread, nestable.
 *
 * Calls inside a group are checked at the call (a bad one fails there and
 * leaves the group usable) and recorded here. At the outermost
 * ncclGroupEnd they are handed to one ringcc group (ringcc_group_start/end),
 * which progresses them together. ncclGroupSimulateEnd runs nothing: it sums
 * the tuner's predictions (ringcc_comm_predict).
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_layer.h"

static __thread int depth;
static __thread struct rcc_nccl_call *pending;
static __thread int npending, cap;

ncclResult_t rcc_nccl_group_add(const struct rcc_nccl_call *c) {
  if (depth > 0) {
    if (npending == cap) {
      int ncap = cap ? 2 * cap : 16;
      void *p = realloc(pending, (size_t)ncap * sizeof *pending);
      if (p == NULL)
        return rcc_nccl_fail(ncclSystemError, "%s: out of memory for the "
                             "group", c->fn);
      pending = p;
      cap = ncap;
    }
    pending[npending++] = *c;
    return ncclSuccess;
  }
  if ((c->kind == RCC_NCCL_SEND || c->kind == RCC_NCCL_RECV) &&
      c->root == c->comm->rank)
    return rcc_nccl_fail(ncclInvalidUsage, "%s: a send to (receive from) "
                         "oneself completes only inside a group", c->fn);
  return rcc_nccl_from(rcc_nccl_execute(c), c->comm->rc, c->fn);
}

ncclResult_t pncclGroupStart(void) {
  depth++;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart)

ncclResult_t pncclGroupEnd(void) {
  if (depth == 0)
    return rcc_nccl_fail(ncclInvalidUsage, "ncclGroupEnd without "
                         "ncclGroupStart");
  if (--depth > 0 || npending == 0)
    return ncclSuccess;
  int n = npending;
  npending = 0; /* a failure leaves the next group empty */
  ringcc_result_t r = ringcc_group_start();
  const char *fn = "ncclGroupEnd";
  for (int i = 0; i < n && r == RINGCC_SUCCESS; i++)
    if ((r = rcc_nccl_execute(&pending[i])) != RINGCC_SUCCESS)
      fn = pending[i].fn;
  ringcc_result_t end = ringcc_group_end();
  return rcc_nccl_from(r != RINGCC_SUCCESS ? r : end,
                       pending[0].comm->rc, fn);
}
NCCL_ALIAS(ncclGroupEnd)

/* The cost model's name of a collective; NULL for those it does not model
 * (point to point, gather, scatter: they count 0). */
static const char *model_name(enum rcc_nccl_kind kind) {
  switch (kind) {
  case RCC_NCCL_ALLREDUCE: return "allreduce";
  case RCC_NCCL_REDUCE: return "reduce";
  case RCC_NCCL_REDUCE_SCATTER: return "reduce_scatter";
  case RCC_NCCL_ALLGATHER: return "allgather";
  case RCC_NCCL_BCAST: return "bcast";
  case RCC_NCCL_ALLTOALL: return "alltoall";
  default: return NULL;
  }
}

/* Ends the group without running it: simInfo->estimatedTime gets the
 * tuner's predicted time in seconds, the largest over the group's
 * communicators (they progress together) of the sum of their calls. */
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  const char *fn = "ncclGroupSimulateEnd";
  if (simInfo == NULL || simInfo->magic != 0x74685283u ||
      simInfo->size < sizeof *simInfo)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'simInfo' is %s",
                         fn, simInfo == NULL ? "NULL"
                         : "not initialised with NCCL_SIM_INFO_INITIALIZER");
  if (depth == 0)
    return rcc_nccl_fail(ncclInvalidUsage, "%s without ncclGroupStart", fn);
  if (--depth > 0)
    return ncclSuccess; /* the outermost end simulates */
  int n = npending;
  npending = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double total = 0;
    int first = 1;
    for (int j = 0; j < i && first; j++)
      first = pending[j].comm != pending[i].comm;
    for (int j = i; j < n && first; j++) {
      const char *name = model_name(pending[j].kind);
      double s = 0;
      if (pending[j].comm != pending[i].comm || name == NULL)
        continue;
      ringcc_result_t r = ringcc_comm_predict(pending[j].comm->rc, name,
                                              pending[j].count, pending[j].dt,
                                              &s);
      if (r != RINGCC_SUCCESS)
        return rcc_nccl_from(r, pending[j].comm->rc, fn);
      total += s;
    }
    worst = total > worst ? total : worst;
  }
  simInfo->estimatedTime = (float)worst;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGroupSimulateEnd)
