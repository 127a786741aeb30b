/*
 * vcoll.c - Gather, Scatter, AllGatherv and AllToAllv: their checks, their
 * in-place forms, their plans (direct.c, binomial.c, the ring's uneven
 * AllGather in ring.c) and the buffers those need.
 *
 * The public calls are in coll.c with the others (validate, locate, run,
 * statistics); coll.c hands these four here through struct rcc_vcall.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2av.h"
#include "algorithms.h"
#include "cma.h"
#include "coll.h"
#include "comm.h"
#include "cuda.h"
#include "error.h"
#include "exec.h"
#include "log.h"
#include "registry.h"
#include "tuner.h"
#include "vcoll.h"

int rcc_vcoll_is(int coll) {
  return coll == RCC_COLL_GATHER || coll == RCC_COLL_SCATTER ||
         coll == RCC_COLL_ALLGATHERV || coll == RCC_COLL_ALLTOALLV;
}

static ringcc_result_t bad(struct ringcc_comm *comm, const struct rcc_vcall *v,
                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ringcc_result_t bad(struct ringcc_comm *comm, const struct rcc_vcall *v,
                           const char *fmt, ...) {
  char msg[RCC_ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT, "%s on rank %d: %s",
                        v->fn, comm->rank, msg);
}

/* ---- checks ----------------------------------------------------------------- */

/* Blocks (counts[i] elements at displs[i]) of an array pair: each fits,
 * with room for pointer arithmetic; *extent: the elements they span. */
static ringcc_result_t check_blocks(struct ringcc_comm *comm,
                                    const struct rcc_vcall *v,
                                    const size_t *counts, const char *cname,
                                    const size_t *displs, const char *dname,
                                    size_t esize, size_t *extent) {
  size_t limit = (size_t)PTRDIFF_MAX / esize;
  *extent = 0;
  if (counts == NULL)
    return bad(comm, v, "argument '%s' is NULL (an array of nranks counts)",
               cname);
  if (displs == NULL)
    return bad(comm, v, "argument '%s' is NULL (an array of nranks "
               "displacements)", dname);
  for (int i = 0; i < comm->nranks; i++) {
    if (counts[i] > limit || displs[i] > limit - counts[i])
      return bad(comm, v, "'%s'[%d] (%zu) plus '%s'[%d] (%zu) elements of "
                 "%zu bytes overflow", dname, i, displs[i], cname, i,
                 counts[i], esize);
    if (counts[i] > 0 && displs[i] + counts[i] > *extent)
      *extent = displs[i] + counts[i];
  }
  return RINGCC_SUCCESS;
}

/* A block of the receive buffer: where it starts, and whose it is. */
struct placed {
  size_t displ;
  int rank;
};

static int by_displ(const void *a, const void *b) {
  size_t x = ((const struct placed *)a)->displ,
         y = ((const struct placed *)b)->displ;
  return x < y ? -1 : x > y;
}

/* Blocks written by the call must not overlap (the result would depend on
 * the order the blocks arrive in). */
static ringcc_result_t check_disjoint(struct ringcc_comm *comm,
                                      const struct rcc_vcall *v,
                                      const size_t *counts, const char *cname,
                                      const size_t *displs, const char *dname) {
  int n = comm->nranks, m = 0;
  struct placed *order = malloc((size_t)n * sizeof(*order));
  if (order == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s on rank %d: no memory to check '%s'", v->fn,
                          comm->rank, dname);
  for (int i = 0; i < n; i++)
    if (counts[i] > 0)
      order[m++] = (struct placed){displs[i], i};
  qsort(order, (size_t)m, sizeof(*order), by_displ);
  ringcc_result_t r = RINGCC_SUCCESS;
  for (int k = 1; k < m && r == RINGCC_SUCCESS; k++) {
    int a = order[k - 1].rank, b = order[k].rank;
    if (displs[a] + counts[a] > displs[b])
      r = bad(comm, v, "blocks %d ('%s'[%d] = %zu, '%s'[%d] = %zu) and %d "
              "('%s'[%d] = %zu) of the receive buffer overlap", a, dname, a,
              displs[a], cname, a, counts[a], b, dname, b, displs[b]);
  }
  free(order);
  return r;
}

/* sendbuf's and recvbuf's ranges (bytes) overlap, other than in the one
 * place allowed (own: the send range may start there, -1: nowhere). */
static ringcc_result_t check_overlap(struct ringcc_comm *comm,
                                     const struct rcc_vcall *v,
                                     size_t sbytes, size_t rbytes,
                                     ptrdiff_t own, const char *form) {
  uintptr_t s = (uintptr_t)v->sendbuf, r = (uintptr_t)v->recvbuf;
  if (v->sendbuf == NULL || v->recvbuf == NULL || sbytes == 0 || rbytes == 0 ||
      s + sbytes <= r || r + rbytes <= s)
    return RINGCC_SUCCESS;
  if (own >= 0 && s == r + (uintptr_t)own)
    return RINGCC_SUCCESS;
  return bad(comm, v, "arguments 'sendbuf' [%p, +%zu bytes) and 'recvbuf' "
             "[%p, +%zu bytes) overlap, and not in an in-place form (%s): the "
             "call would read input it already overwrote", v->sendbuf, sbytes,
             v->recvbuf, rbytes, form);
}

/* Gather (root receives n blocks) and Scatter (root sends n blocks). */
static ringcc_result_t check_rooted(struct ringcc_comm *comm,
                                    const struct rcc_vcall *v, size_t esize) {
  int gather = v->coll == RCC_COLL_GATHER, root = comm->rank == v->root;
  size_t n = (size_t)comm->nranks;
  const char *cname = gather ? "sendcount" : "recvcount";
  /* the many side: the root's receive (gather) or send (scatter) buffer */
  const void *many = gather ? (const void *)v->recvbuf : v->sendbuf;
  const void *one = gather ? v->sendbuf : (const void *)v->recvbuf;
  const char *mname = gather ? "recvbuf" : "sendbuf";
  const char *oname = gather ? "sendbuf" : "recvbuf";

  if (v->count > (size_t)PTRDIFF_MAX / esize / n)
    return bad(comm, v, "argument '%s' (%zu) times the datatype size (%zu) "
               "times nranks overflows", cname, v->count, esize);
  if (many == RINGCC_IN_PLACE)
    return bad(comm, v, "argument '%s' is RINGCC_IN_PLACE; only '%s' may be "
               "(at the root)", mname, oname);
  if (one == RINGCC_IN_PLACE && !root)
    return bad(comm, v, "RINGCC_IN_PLACE as '%s' is only valid at the root "
               "(rank %d)", oname, v->root);
  if (v->count == 0)
    return RINGCC_SUCCESS;
  if (one == NULL)
    return bad(comm, v, "argument '%s' is NULL with %s > 0", oname, cname);
  if (!root || one == RINGCC_IN_PLACE)
    return root && many == NULL
               ? bad(comm, v, "argument '%s' is NULL at the root with %s > 0",
                     mname, cname)
               : RINGCC_SUCCESS;
  if (many == NULL)
    return bad(comm, v, "argument '%s' is NULL at the root with %s > 0", mname,
               cname);
  size_t block = v->count * esize;
  uintptr_t m = (uintptr_t)many, o = (uintptr_t)one;
  if (o + block <= m || m + n * block <= o ||
      o == m + (uintptr_t)v->root * block)
    return RINGCC_SUCCESS;
  return bad(comm, v, "arguments '%s' [%p, +%zu bytes) and '%s' [%p, +%zu "
             "bytes) overlap, and not in an in-place form (%s == %s + "
             "root*%s, or RINGCC_IN_PLACE as '%s'): the call would read "
             "input it already overwrote", oname, one, block, mname, many,
             n * block, oname, mname, cname, oname);
}

static ringcc_result_t check_allgatherv(struct ringcc_comm *comm,
                                        const struct rcc_vcall *v,
                                        size_t esize) {
  size_t extent;
  int rank = comm->rank;
  ringcc_result_t r = check_blocks(comm, v, v->recvcounts, "recvcounts",
                                   v->rdispls, "displs", esize, &extent);
  if (r != RINGCC_SUCCESS)
    return r;
  if (v->count != v->recvcounts[rank])
    return bad(comm, v, "argument 'sendcount' (%zu) differs from "
               "'recvcounts'[%d] (%zu), this rank's block", v->count, rank,
               v->recvcounts[rank]);
  if ((r = check_disjoint(comm, v, v->recvcounts, "recvcounts", v->rdispls,
                          "displs")) != RINGCC_SUCCESS)
    return r;
  if ((const void *)v->recvbuf == RINGCC_IN_PLACE)
    return bad(comm, v, "argument 'recvbuf' is RINGCC_IN_PLACE; only "
               "'sendbuf' may be");
  if (extent > 0 && v->recvbuf == NULL)
    return bad(comm, v, "argument 'recvbuf' is NULL with blocks to receive");
  if (v->sendbuf == RINGCC_IN_PLACE)
    return RINGCC_SUCCESS;
  if (v->count > 0 && v->sendbuf == NULL)
    return bad(comm, v, "argument 'sendbuf' is NULL with sendcount > 0");
  return check_overlap(comm, v, v->count * esize, extent * esize,
                       (ptrdiff_t)(v->rdispls[rank] * esize),
                       "sendbuf == recvbuf + displs[rank], or "
                       "RINGCC_IN_PLACE as 'sendbuf'");
}

static ringcc_result_t check_alltoallv(struct ringcc_comm *comm,
                                       const struct rcc_vcall *v,
                                       size_t esize) {
  size_t sext = 0, rext;
  int rank = comm->rank, in_place = v->sendbuf == RINGCC_IN_PLACE;
  ringcc_result_t r;
  if (!in_place &&
      (r = check_blocks(comm, v, v->sendcounts, "sendcounts", v->sdispls,
                        "sdispls", esize, &sext)) != RINGCC_SUCCESS)
    return r;
  if ((r = check_blocks(comm, v, v->recvcounts, "recvcounts", v->rdispls,
                        "rdispls", esize, &rext)) != RINGCC_SUCCESS)
    return r;
  if (!in_place && v->sendcounts[rank] != v->recvcounts[rank])
    return bad(comm, v, "'sendcounts'[%d] (%zu) differs from 'recvcounts'[%d] "
               "(%zu): this rank's block to itself", rank,
               v->sendcounts[rank], rank, v->recvcounts[rank]);
  if ((r = check_disjoint(comm, v, v->recvcounts, "recvcounts", v->rdispls,
                          "rdispls")) != RINGCC_SUCCESS)
    return r;
  if ((const void *)v->recvbuf == RINGCC_IN_PLACE)
    return bad(comm, v, "argument 'recvbuf' is RINGCC_IN_PLACE; only "
               "'sendbuf' may be");
  if (rext > 0 && v->recvbuf == NULL)
    return bad(comm, v, "argument 'recvbuf' is NULL with blocks to receive");
  if (sext > 0 && v->sendbuf == NULL)
    return bad(comm, v, "argument 'sendbuf' is NULL with blocks to send");
  return in_place ? RINGCC_SUCCESS
                  : check_overlap(comm, v, sext * esize, rext * esize, -1,
                                  "RINGCC_IN_PLACE as 'sendbuf'");
}

ringcc_result_t rcc_vcoll_validate(struct ringcc_comm *comm,
                                   const struct rcc_vcall *v) {
  size_t esize = ringcc_datatype_size((ringcc_datatype_t)v->dt);
  switch (v->coll) {
  case RCC_COLL_GATHER:
  case RCC_COLL_SCATTER:
    return check_rooted(comm, v, esize);
  case RCC_COLL_ALLGATHERV:
    return check_allgatherv(comm, v, esize);
  default:
    return check_alltoallv(comm, v, esize);
  }
}

/* ---- buffers -------------------------------------------------------------- */

static size_t extent_of(int n, const size_t *counts, const size_t *displs) {
  size_t extent = 0;
  for (int i = 0; i < n; i++)
    if (counts[i] > 0 && displs[i] + counts[i] > extent)
      extent = displs[i] + counts[i];
  return extent;
}

void rcc_vcoll_buffers(const struct ringcc_comm *comm,
                       const struct rcc_vcall *v, const void **send,
                       const void **recv) {
  int n = comm->nranks, root = comm->rank == v->root;
  size_t sext = v->count, rext = v->count;
  switch (v->coll) {
  case RCC_COLL_GATHER:
    rext = root ? v->count : 0;
    break;
  case RCC_COLL_SCATTER:
    sext = root ? v->count : 0;
    break;
  case RCC_COLL_ALLGATHERV:
    rext = extent_of(n, v->recvcounts, v->rdispls);
    break;
  default:
    sext = v->sendbuf == RINGCC_IN_PLACE
               ? 0
               : extent_of(n, v->sendcounts, v->sdispls);
    rext = extent_of(n, v->recvcounts, v->rdispls);
    break;
  }
  *send = sext > 0 && v->sendbuf != RINGCC_IN_PLACE ? v->sendbuf : NULL;
  *recv = rext > 0 && (const void *)v->recvbuf != RINGCC_IN_PLACE ? v->recvbuf
                                                                   : NULL;
}

/* ---- running them ------------------------------------------------------------ */

void *rcc_coll_scratch(struct ringcc_comm *comm, size_t bytes) {
  if (bytes > comm->scratch_bytes) {
    void *p = realloc(comm->scratch, bytes);
    if (p == NULL)
      return NULL;
    comm->scratch = p;
    comm->scratch_bytes = bytes;
  }
  return comm->scratch;
}

static struct rcc_plan plan_of(struct ringcc_comm *comm, int alg, int coll,
                               size_t esize, size_t count, size_t chunk_bytes,
                               int root) {
  size_t chunk = chunk_bytes / esize;
  return rcc_exec_plan(comm, alg, rcc_algorithms[alg].sched, coll, 1, esize,
                       count, chunk > 0 ? chunk : 1, root);
}

/* The ring's AllGather of uneven blocks (ring.c), on the communicator's
 * host channels (RINGCC_NCHANNELS, else one). */
ringcc_result_t rcc_allgatherv_plan_run(struct ringcc_comm *comm,
                                        const void *sendbuf, void *recvbuf,
                                        const size_t *counts,
                                        const size_t *displs,
                                        ringcc_datatype_t dt) {
  size_t esize = ringcc_datatype_size(dt);
  struct rcc_plan plan = plan_of(comm, RCC_ALG_RING, RCC_COLL_ALLGATHER, esize,
                                 counts[comm->rank], comm->ring_chunk_bytes,
                                 -1);
  plan.nchannels =
      comm->set.nchannels > 0 ? comm->kind_channels[RCC_CONN_COLL] : 1;
  plan.counts = counts;
  plan.displs = displs;
  return rcc_exec_host_channels(comm, &plan, sendbuf, recvbuf, dt, RINGCC_SUM);
}

static ringcc_result_t no_memory(struct ringcc_comm *comm,
                                 const struct rcc_vcall *v, size_t bytes) {
  return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                        "%s on rank %d: no memory for %zu bytes of staging",
                        v->fn, comm->rank, bytes);
}

static ringcc_result_t unsupported_on_device(struct ringcc_comm *comm,
                                             const struct rcc_vcall *v) {
  return rcc_comm_error(comm, RINGCC_ERR_UNSUPPORTED,
                        "%s on rank %d: device buffers are not supported for "
                        "this collective yet (its plan reads host arrays of "
                        "counts; host buffers only, docs/cuda.md)", v->fn,
                        comm->rank);
}

/* Gather and Scatter: the tuner picks direct, binomial or (one host, large
 * blocks) cross-memory attach; a rank inside the binomial tree (not the
 * root, not a leaf) works in scratch. */
static ringcc_result_t run_rooted(struct ringcc_comm *comm,
                                  const struct rcc_vcall *v, int *alg) {
  int n = comm->nranks, gather = v->coll == RCC_COLL_GATHER;
  int root = comm->rank == v->root;
  size_t esize = ringcc_datatype_size((ringcc_datatype_t)v->dt);
  size_t block = v->count * esize;
  struct rcc_tuning tune = {.alg = RCC_ALG_DIRECT,
                            .chunk_bytes = v->device ? comm->dev_all_chunk_bytes
                                                     : comm->all_chunk_bytes,
                            .channels = 1};
  if (n > 1)
    rcc_tuner_choose(comm, v->coll, block * (size_t)n, v->device, &tune);
  *alg = tune.alg;
  struct rcc_plan plan = plan_of(comm, tune.alg, v->coll, esize, v->count,
                                 tune.chunk_bytes, v->root);
  const void *src = v->sendbuf;
  void *dst = v->recvbuf;
  if (root && gather && src == RINGCC_IN_PLACE) /* own block in place */
    src = (const char *)v->recvbuf + (size_t)v->root * block;
  if (root && !gather && dst == RINGCC_IN_PLACE)
    dst = (char *)(uintptr_t)v->sendbuf + (size_t)v->root * block;
  if (tune.alg == RCC_ALG_CMA) { /* one host, non-empty blocks */
    struct rcc_cma_rooted cr = {gather, v->root, src, dst, block};
    return rcc_cma_rooted(comm, &cr);
  }
  if (v->device)
    return rcc_exec_cuda(comm, &plan, src, dst, (ringcc_datatype_t)v->dt,
                         RINGCC_SUM, v->stream, 0);
  int rel = (comm->rank - v->root + n) % n;
  int span = rcc_binomial_span(n, rel);
  int inner = tune.alg == RCC_ALG_BINOMIAL && !root && span > 1 && block > 0;
  if (inner) { /* its subtree's blocks, its own first */
    dst = rcc_coll_scratch(comm, (size_t)span * block);
    if (dst == NULL)
      return no_memory(comm, v, (size_t)span * block);
  }
  ringcc_result_t r = rcc_exec_host_channels(comm, &plan, src, dst,
                                             (ringcc_datatype_t)v->dt,
                                             RINGCC_SUM);
  if (r == RINGCC_SUCCESS && inner && !gather && block > 0)
    memcpy(v->recvbuf, dst, block);
  return r;
}

static ringcc_result_t run_allgatherv(struct ringcc_comm *comm,
                                      const struct rcc_vcall *v) {
  size_t esize = ringcc_datatype_size((ringcc_datatype_t)v->dt);
  const char *src = v->sendbuf;
  char *own = (char *)v->recvbuf + v->rdispls[comm->rank] * esize;
  if (src == RINGCC_IN_PLACE)
    src = own;
  if (v->device)
    return unsupported_on_device(comm, v);
  if (comm->nranks == 1) {
    if (v->count > 0 && src != own)
      memcpy(own, src, v->count * esize);
    return RINGCC_SUCCESS;
  }
  return rcc_allgatherv_plan_run(comm, src, v->recvbuf, v->recvcounts,
                                 v->rdispls, (ringcc_datatype_t)v->dt);
}

/* AllToAllv: the pairwise schedule, or, where the tuner picks it (alike on
 * every rank: all ranks on one host, and cross-memory attach works between
 * every pair or the memory is registered), large blocks read in place
 * (exec_a2av.c). */
static ringcc_result_t run_alltoallv(struct ringcc_comm *comm,
                                     const struct rcc_vcall *v, int *alg) {
  size_t esize = ringcc_datatype_size((ringcc_datatype_t)v->dt);
  if (v->device)
    return unsupported_on_device(comm, v);
  struct rcc_plan plan = plan_of(comm, RCC_ALG_PAIRWISE_V, RCC_COLL_ALLTOALLV,
                                 esize, 0, comm->all_chunk_bytes, -1);
  const void *src = v->sendbuf;
  plan.counts = v->sendcounts;
  plan.displs = v->sdispls;
  plan.recv_counts = v->recvcounts;
  plan.recv_displs = v->rdispls;
  if (src == RINGCC_IN_PLACE) { /* send from a copy of recvbuf */
    size_t bytes =
        extent_of(comm->nranks, v->recvcounts, v->rdispls) * esize;
    void *copy = rcc_coll_scratch(comm, bytes);
    if (bytes > 0 && copy == NULL)
      return no_memory(comm, v, bytes);
    if (bytes > 0)
      memcpy(copy, v->recvbuf, bytes);
    src = copy;
    plan.counts = v->recvcounts;
    plan.displs = v->rdispls;
  }
  if (*alg == RCC_ALG_CMA || *alg == RCC_ALG_ZEROCOPY) {
    struct rcc_a2av av = {src, plan.counts, plan.displs, v->recvbuf,
                          v->recvcounts, v->rdispls, esize};
    ringcc_result_t r = rcc_a2av_run(comm, &av);
    if (r == RINGCC_SUCCESS && *alg == RCC_ALG_ZEROCOPY)
      comm->registry->ran++; /* as exec_zc.c counts its calls */
    return r;
  }
  return rcc_exec_host_channels(comm, &plan, src, v->recvbuf,
                                (ringcc_datatype_t)v->dt, RINGCC_SUM);
}

static uint64_t sum_of(int n, const size_t *counts) {
  uint64_t s = 0;
  for (int i = 0; i < n; i++)
    s += counts[i];
  return s;
}

ringcc_result_t rcc_vcoll_execute(struct ringcc_comm *comm,
                                  const struct rcc_vcall *v, int *alg,
                                  uint64_t *bytes) {
  int n = comm->nranks;
  size_t esize = ringcc_datatype_size((ringcc_datatype_t)v->dt);
  switch (v->coll) {
  case RCC_COLL_GATHER:
  case RCC_COLL_SCATTER:
    *bytes = (uint64_t)v->count * esize * (uint64_t)n;
    return run_rooted(comm, v, alg);
  case RCC_COLL_ALLGATHERV:
    *alg = RCC_ALG_RING;
    *bytes = sum_of(n, v->recvcounts) * esize;
    return run_allgatherv(comm, v);
  default:
    *alg = RCC_ALG_PAIRWISE_V;
    *bytes = sum_of(n, v->sendbuf == RINGCC_IN_PLACE ? v->recvcounts
                                                     : v->sendcounts) *
             esize;
    if (n > 1 && !v->device) { /* the choice cannot depend on the sum */
      struct rcc_tuning tune;
      rcc_tuner_choose(comm, RCC_COLL_ALLTOALLV, (size_t)*bytes, 0, &tune);
      *alg = tune.alg;
    }
    return run_alltoallv(comm, v, alg);
  }
}
