/*
 * nccl_group.c - ncclGroupStart/End/SimulateEnd: per thread, nestable.
 *
 * Calls inside a group are checked at the call (a bad one fails there and
 * leaves the group usable) and recorded here. At the outermost
 * ncclGroupEnd, where ringcc has groups (ringcc_group_start/end,
 * RCC_NCCL_HAVE_GROUPS from the Makefile), they are handed to one ringcc
 * group, which progresses them together. ncclGroupSimulateEnd runs nothing:
 * it sums the tuner's predictions (ringcc_comm_predict).
 *
 * Until ringcc has groups, this file runs the recorded calls itself:
 *  - one thread per communicator of the group (ncclCommInitAll's users drive
 *    several ranks of one process from one thread; each rank's calls must
 *    run at once), each running its communicator's calls in order;
 *  - consecutive sends and receives of a communicator run together, in
 *    rounds: each round sends the next piece (P2P_PIECE bytes) of every
 *    send, then receives the next piece of every receive. A piece fits in
 *    the FIFO's slots, so a send returns without waiting for its receiver,
 *    and a receive waits only for a piece its sender sent in the same round:
 *    sends of any size in any order cannot deadlock (a rank can be at most
 *    a FIFO's worth of rounds ahead of its receivers). Both sides cut the
 *    same message alike, so pieces match in order. A send to oneself is
 *    matched with the receive from oneself and copied.
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_layer.h"

#define P2P_PIECE (32u << 10)

static __thread int depth;
static __thread struct rcc_nccl_call *pending;
static __thread int npending, cap;

/* ---- the interim groups: recorded here, run at the end ------------------ */

#ifndef RCC_NCCL_HAVE_GROUPS
static ringcc_result_t self_copy(struct rcc_nccl_call **ops, int n) {
  for (int i = 0; i < n; i++) {
    struct rcc_nccl_call *s = ops[i];
    if (s->kind != RCC_NCCL_SEND || s->root != s->comm->rank)
      continue;
    int j = 0;
    while (j < n && !(ops[j]->kind == RCC_NCCL_RECV &&
                      ops[j]->root == s->comm->rank && ops[j]->count != (size_t)-1))
      j++;
    if (j == n || ops[j]->count != s->count || ops[j]->dt != s->dt)
      return RINGCC_ERR_INVALID_USAGE; /* no matching receive from oneself */
    if (s->stream != NULL && s->count > 0)
      return RINGCC_ERR_UNSUPPORTED;
    if (s->count > 0)
      memmove(ops[j]->recv, s->send, s->count * ringcc_datatype_size(s->dt));
    ops[j]->count = (size_t)-1; /* done */
    s->count = (size_t)-1;
  }
  for (int i = 0; i < n; i++)
    if (ops[i]->root == ops[i]->comm->rank && ops[i]->count != (size_t)-1)
      return RINGCC_ERR_INVALID_USAGE; /* a receive from oneself unmatched */
  return RINGCC_SUCCESS;
}

/* Sends and receives ops[0..n) of one communicator, in rounds of pieces. */
static ringcc_result_t run_p2p(struct rcc_nccl_call **ops, int n) {
  ringcc_result_t r = self_copy(ops, n);
  for (size_t piece = 0, more = 1; r == RINGCC_SUCCESS && more; piece++) {
    more = 0;
    for (int pass = 0; pass < 2 && r == RINGCC_SUCCESS; pass++)
      for (int i = 0; i < n && r == RINGCC_SUCCESS; i++) {
        struct rcc_nccl_call *c = ops[i];
        if (c->count == (size_t)-1 || (c->kind == RCC_NCCL_SEND) != (pass == 0))
          continue;
        size_t es = ringcc_datatype_size(c->dt);
        size_t elems = P2P_PIECE / es, first = piece * elems;
        if (first >= c->count) /* done, or empty: NCCL's no-op */
          continue;
        size_t k = c->count - first < elems ? c->count - first : elems;
        more |= first + k < c->count;
        r = pass == 0
                ? ringcc_send((const char *)c->send + first * es, k, c->dt,
                              c->root, c->comm->rc, c->stream)
                : ringcc_recv((char *)c->recv + first * es, k, c->dt, c->root,
                              c->comm->rc, c->stream);
      }
  }
  return r;
}

struct comm_run {
  struct rcc_nccl_call **ops;
  int n;
  ringcc_result_t r;
  const char *fn; /* the call that failed */
  pthread_t thread;
};

static void *run_comm(void *arg) {
  struct comm_run *cr = arg;
  cr->r = RINGCC_SUCCESS;
  for (int i = 0; i < cr->n && cr->r == RINGCC_SUCCESS;) {
    int k = i;
    while (k < cr->n && (cr->ops[k]->kind == RCC_NCCL_SEND ||
                         cr->ops[k]->kind == RCC_NCCL_RECV))
      k++;
    if (k > i) {
      cr->r = run_p2p(cr->ops + i, k - i);
      cr->fn = "ncclSend/ncclRecv";
      i = k;
    } else {
      cr->r = rcc_nccl_execute(cr->ops[i]);
      cr->fn = cr->ops[i]->fn;
      i++;
    }
  }
  return NULL;
}

/* Runs the recorded calls, each communicator's in a thread of its own
 * (this one when there is one communicator). */
static ncclResult_t run_group(struct rcc_nccl_call *calls, int n) {
  struct comm_run *runs = calloc((size_t)n + 1, sizeof *runs);
  struct rcc_nccl_call **order = calloc((size_t)n + 1, sizeof *order);
  if (runs == NULL || order == NULL) {
    free(runs);
    free(order);
    return rcc_nccl_fail(ncclSystemError, "ncclGroupEnd: out of memory");
  }
  int ncomms = 0, used = 0;
  for (int i = 0; i < n; i++) { /* calls by communicator, in order */
    int seen = 0;
    for (int j = 0; j < i && !seen; j++)
      seen = calls[j].comm == calls[i].comm;
    if (seen)
      continue;
    runs[ncomms].ops = order + used;
    for (int j = i; j < n; j++)
      if (calls[j].comm == calls[i].comm)
        order[used++] = &calls[j];
    runs[ncomms].n = (int)(order + used - runs[ncomms].ops);
    ncomms++;
  }
  int threads = 0;
  for (int c = 1; c < ncomms; c++) {
    if (pthread_create(&runs[c].thread, NULL, run_comm, &runs[c]) != 0)
      break;
    threads++;
  }
  if (threads == ncomms - 1)
    run_comm(&runs[0]);
  for (int c = 1; c <= threads; c++)
    pthread_join(runs[c].thread, NULL);
  ncclResult_t r = threads == ncomms - 1
                       ? ncclSuccess
                       : rcc_nccl_fail(ncclSystemError, "ncclGroupEnd: no "
                                       "thread for the group's communicators");
  for (int c = 0; c < ncomms && r == ncclSuccess; c++)
    if (runs[c].r != RINGCC_SUCCESS)
      r = rcc_nccl_from(runs[c].r, runs[c].ops[0]->comm->rc, runs[c].fn);
  free(runs);
  free(order);
  return r;
}
#endif /* !RCC_NCCL_HAVE_GROUPS */

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
#ifdef RCC_NCCL_HAVE_GROUPS
  ringcc_result_t r = ringcc_group_start();
  const char *fn = "ncclGroupEnd";
  for (int i = 0; i < n && r == RINGCC_SUCCESS; i++)
    if ((r = rcc_nccl_execute(&pending[i])) != RINGCC_SUCCESS)
      fn = pending[i].fn;
  ringcc_result_t end = ringcc_group_end();
  return rcc_nccl_from(r != RINGCC_SUCCESS ? r : end,
                       pending[0].comm->rc, fn);
#else
  return run_group(pending, n);
#endif
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
