/*
 * coll.c - the public collective calls: validate, resolve in-place forms,
 * plan, execute.
 *
 * Validation happens before anything is sent, so a bad argument on one rank
 * returns RINGCC_ERR_INVALID_ARGUMENT there and leaves the communicator
 * working. A failure after data started to move (timeout, abort, a peer that
 * disagrees) leaves the FIFOs in an unknown state: the communicator is then
 * marked unusable and every later call says so.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "cma.h"
#include "coll.h"
#include "comm.h"
#include "cuda.h"
#include "dtype.h"
#include "error.h"
#include "exec.h"
#include "fifo.h"
#include "group.h"
#include "links.h"
#include "live.h"
#include "log.h"
#include "premul.h"
#include "reduce.h"
#include "stats.h"
#include "trace.h"
#include "tuner.h"
#include "vcoll.h"
#include "zc.h"

/* The public calls fill a struct call positionally with the fields they use;
 * those after (the arrays of the uneven collectives) are zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

struct call {
  const char *fn;          /* "ringcc_allreduce" */
  struct ringcc_comm *comm;
  int coll;
  const void *sendbuf;     /* as given */
  void *recvbuf;           /* as given */
  size_t count;
  int dt;
  int op;
  int root;
  int peer;
  void *stream;
  unsigned uses;           /* USES_OP | USES_ROOT | USES_PEER, ON_DEVICE */
  /* gather, scatter, allgatherv, alltoallv (vcoll.c): count is sendcount
   * (gather, allgatherv) or recvcount (scatter); the arrays of nranks
   * entries (allgatherv: recvcounts and displs as recvcounts, rdispls) */
  const size_t *sendcounts;
  const size_t *sdispls;
  const size_t *recvcounts;
  const size_t *rdispls;
};

#define USES_OP 1u
#define USES_ROOT 2u
#define USES_PEER 4u
#define ON_DEVICE 8u /* buffers in GPU memory: enqueued on stream (locate) */
#define UP_TO 16u    /* ringcc_recv_from: a message of at most count, the
                        call a struct recv_from_call's */

struct recv_from_call {
  struct call c; /* first: a call with UP_TO is one of these */
  ringcc_recv_status_t *status; /* or NULL */
};

/* A receive that takes the executor's receive-from path: any source, or a
 * message of at most count (rcc_exec_host_recv_from). */
static int recv_from(const struct call *c) {
  return c->coll == RCC_COLL_RECV &&
         (c->peer == RINGCC_ANY_SOURCE || (c->uses & UP_TO));
}

/* The call as vcoll.c takes it. */
static struct rcc_vcall vcall_of(const struct call *c) {
  return (struct rcc_vcall){
      .fn = c->fn, .coll = c->coll, .sendbuf = c->sendbuf,
      .recvbuf = c->recvbuf, .count = c->count, .dt = c->dt,
      .root = (c->uses & USES_ROOT) ? c->root : -1,
      .sendcounts = c->sendcounts, .sdispls = c->sdispls,
      .recvcounts = c->recvcounts, .rdispls = c->rdispls,
      .stream = c->stream, .device = (c->uses & ON_DEVICE) != 0};
}

/* How many elements of sendbuf and recvbuf a call touches (per rank). */
static void buffer_elems(const struct call *c, size_t *send, size_t *recv) {
  size_t n = (size_t)c->comm->nranks;
  switch (c->coll) {
  case RCC_COLL_REDUCE_SCATTER:
    *send = c->count * n, *recv = c->count;
    break;
  case RCC_COLL_ALLGATHER:
    *send = c->count, *recv = c->count * n;
    break;
  case RCC_COLL_ALLTOALL:
    *send = *recv = c->count * n;
    break;
  default:
    *send = *recv = c->count;
    break;
  }
}

static ringcc_result_t bad_arg(const struct call *c, const char *what) {
  return rcc_comm_error(c->comm, RINGCC_ERR_INVALID_ARGUMENT,
                        "%s on rank %d: %s", c->fn, c->comm->rank, what);
}

/* Buffers that overlap other than in a documented in-place form would be
 * read after the call overwrote them (the results are silently wrong): the
 * call is refused, naming both ranges. In place is sendbuf == recvbuf
 * (allreduce, reduce at the root, alltoall), the rank's own block
 * (reduce_scatter: recvbuf == sendbuf + rank*recvcount; allgather: sendbuf
 * == recvbuf + rank*sendcount), or RINGCC_IN_PLACE. */
static ringcc_result_t check_overlap(const struct call *c) {
  size_t esize = ringcc_datatype_size(c->dt), send_elems, recv_elems;
  int rank = c->comm->rank;
  if (c->sendbuf == RINGCC_IN_PLACE || c->sendbuf == NULL ||
      c->recvbuf == NULL || c->coll == RCC_COLL_BCAST ||
      c->coll == RCC_COLL_SEND || c->coll == RCC_COLL_RECV ||
      c->coll == RCC_COLL_BARRIER ||
      (c->coll == RCC_COLL_REDUCE && c->root != rank))
    return RINGCC_SUCCESS; /* one buffer, or recvbuf is not used */
  buffer_elems(c, &send_elems, &recv_elems);
  uintptr_t s = (uintptr_t)c->sendbuf, r = (uintptr_t)c->recvbuf;
  size_t sbytes = send_elems * esize, rbytes = recv_elems * esize;
  size_t own = (size_t)rank * c->count * esize;
  if (sbytes == 0 || rbytes == 0 || s + sbytes <= r || r + rbytes <= s)
    return RINGCC_SUCCESS;
  const char *form;
  switch (c->coll) {
  case RCC_COLL_REDUCE_SCATTER:
    if (r == s + own)
      return RINGCC_SUCCESS;
    form = "recvbuf == sendbuf + rank*recvcount";
    break;
  case RCC_COLL_ALLGATHER:
    if (s == r + own)
      return RINGCC_SUCCESS;
    form = "sendbuf == recvbuf + rank*sendcount";
    break;
  default: /* allreduce, reduce at the root, alltoall */
    if (s == r)
      return RINGCC_SUCCESS;
    form = "sendbuf == recvbuf";
    break;
  }
  char msg[RCC_ERRLEN];
  snprintf(msg, sizeof(msg), "arguments 'sendbuf' [%p, %p) (%zu bytes) and "
           "'recvbuf' [%p, %p) (%zu bytes) overlap, and not in an in-place "
           "form (%s, or RINGCC_IN_PLACE as 'sendbuf'): the call would read "
           "input it already overwrote", c->sendbuf,
           (const void *)((const char *)c->sendbuf + sbytes), sbytes,
           c->recvbuf, (void *)((char *)c->recvbuf + rbytes), rbytes, form);
  return bad_arg(c, msg);
}

static ringcc_result_t validate_buffers(const struct call *c) {
  char msg[200];
  size_t esize = ringcc_datatype_size(c->dt), n = (size_t)c->comm->nranks;
  size_t send_elems, recv_elems;

  /* count * nranks * esize must fit, with room for pointer arithmetic. */
  if (c->count > (size_t)PTRDIFF_MAX / esize / n) {
    snprintf(msg, sizeof(msg),
             "argument 'count' (%zu) times the datatype size (%zu)%s "
             "overflows", c->count, esize,
             c->coll == RCC_COLL_ALLGATHER || c->coll == RCC_COLL_ALLTOALL ||
                     c->coll == RCC_COLL_REDUCE_SCATTER
                 ? " times nranks"
                 : "");
    return bad_arg(c, msg);
  }
  buffer_elems(c, &send_elems, &recv_elems);
  int is_root = !(c->uses & USES_ROOT) || c->root == c->comm->rank;
  int needs_recv = c->coll != RCC_COLL_SEND &&
                   (c->coll != RCC_COLL_REDUCE || is_root);
  int needs_send = c->coll != RCC_COLL_RECV && c->coll != RCC_COLL_BARRIER;
  if (needs_send && send_elems > 0 && c->sendbuf == NULL)
    return bad_arg(c, c->coll == RCC_COLL_BCAST || c->coll == RCC_COLL_SEND
                          ? "argument 'buf' is NULL with count > 0"
                          : "argument 'sendbuf' is NULL with count > 0");
  if (needs_recv && recv_elems > 0 && c->recvbuf == NULL)
    return bad_arg(c, c->coll == RCC_COLL_RECV
                          ? "argument 'buf' is NULL with count > 0"
                          : "argument 'recvbuf' is NULL with count > 0");
  if ((const void *)c->recvbuf == RINGCC_IN_PLACE)
    return bad_arg(c, c->coll == RCC_COLL_RECV || c->coll == RCC_COLL_BCAST
                          ? "argument 'buf' is RINGCC_IN_PLACE, not a buffer"
                          : "argument 'recvbuf' is RINGCC_IN_PLACE; only "
                            "'sendbuf' may be");
  if (c->sendbuf == RINGCC_IN_PLACE &&
      (c->coll == RCC_COLL_SEND || c->coll == RCC_COLL_BCAST))
    return bad_arg(c, "RINGCC_IN_PLACE is not a buffer ('buf')");
  return check_overlap(c);
}

/* *pm: the premul-sum op when op is one (copied: another thread may destroy
 * it during the call). */
static ringcc_result_t validate(const struct call *c,
                                struct rcc_premul_op *pm) {
  char msg[200];
  struct ringcc_comm *comm = c->comm;

  if (!rcc_dt_valid(c->dt)) {
    snprintf(msg, sizeof(msg),
             "argument 'datatype' is %d, not a ringcc_datatype_t (0..%d)",
             c->dt, RINGCC_NUM_DATATYPES - 1);
    return bad_arg(c, msg);
  }
  if ((c->uses & USES_OP) && !rcc_op_valid(c->op)) {
    if (c->op < RINGCC_NUM_OPS || !rcc_premul_find(comm, c->op, pm)) {
      snprintf(msg, sizeof(msg), "argument 'op' is %d, neither a ringcc_op_t "
               "(0..%d) nor a live premul-sum op of this communicator "
               "(ringcc_op_create_premul_sum)", c->op, RINGCC_NUM_OPS - 1);
      return bad_arg(c, msg);
    }
    if (pm->dt != c->dt) {
      snprintf(msg, sizeof(msg), "argument 'op' is a premul-sum op made for "
               "datatype %s; the call's datatype is %s",
               ringcc_datatype_name((ringcc_datatype_t)pm->dt),
               ringcc_datatype_name((ringcc_datatype_t)c->dt));
      return bad_arg(c, msg);
    }
  }
  if ((c->uses & USES_ROOT) && (c->root < 0 || c->root >= comm->nranks)) {
    snprintf(msg, sizeof(msg), "argument 'root' is %d; it must be in [0, %d]",
             c->root, comm->nranks - 1);
    return bad_arg(c, msg);
  }
  if (c->coll == RCC_COLL_REDUCE && c->root != comm->rank &&
      c->sendbuf == RINGCC_IN_PLACE) {
    snprintf(msg, sizeof(msg), "RINGCC_IN_PLACE as 'sendbuf' is only valid at "
             "the root (rank %d)", c->root);
    return bad_arg(c, msg);
  }
  if (rcc_vcoll_is(c->coll)) {
    struct rcc_vcall v = vcall_of(c);
    return rcc_vcoll_validate(comm, &v);
  }
  return validate_buffers(c);
}

static int is_premul(const struct call *c) {
  return (c->uses & USES_OP) && c->op >= RINGCC_NUM_OPS;
}

/* Host or device buffers (cuda.c decides, from the buffers the call uses
 * and the stream): sets ON_DEVICE. */
static ringcc_result_t locate(struct call *c) {
  size_t send_elems, recv_elems;
  buffer_elems(c, &send_elems, &recv_elems);
  int one = c->coll == RCC_COLL_BCAST || c->coll == RCC_COLL_SEND ||
            c->coll == RCC_COLL_RECV;
  int no_recv = c->coll == RCC_COLL_SEND ||
                (c->coll == RCC_COLL_REDUCE && c->root != c->comm->rank);
  const void *send = c->sendbuf, *recv = c->recvbuf;
  if (send == RINGCC_IN_PLACE || send_elems == 0 || c->coll == RCC_COLL_RECV)
    send = NULL;
  if (recv_elems == 0 || no_recv)
    recv = NULL;
  if (rcc_vcoll_is(c->coll)) {
    struct rcc_vcall v = vcall_of(c);
    rcc_vcoll_buffers(c->comm, &v, &send, &recv);
  }
  int device = 0;
  const char *sname = one ? "buf" : "sendbuf", *rname = one ? "buf" : "recvbuf";
  ringcc_result_t r = rcc_cuda_locate(c->comm, c->fn, send, sname, recv, rname,
                                      c->stream, &device);
  c->uses |= device ? ON_DEVICE : 0;
  if (device && r == RINGCC_SUCCESS && is_premul(c))
    return rcc_comm_error(c->comm, RINGCC_ERR_UNSUPPORTED,
                          "%s on rank %d: premul-sum ops on device buffers "
                          "are not supported yet (host buffers only; "
                          "docs/cuda.md)", c->fn, c->comm->rank);
  if (device && r == RINGCC_SUCCESS &&
      (c->dt == RINGCC_FLOAT8_E4M3 || c->dt == RINGCC_FLOAT8_E5M2))
    return rcc_comm_error(c->comm, RINGCC_ERR_UNSUPPORTED,
                          "%s on rank %d: datatype %s on device buffers is not "
                          "supported yet (host buffers only; docs/cuda.md)",
                          c->fn, c->comm->rank,
                          ringcc_datatype_name((ringcc_datatype_t)c->dt));
  size_t esize = ringcc_datatype_size(c->dt);
  const char *bad = device && r == RINGCC_SUCCESS
                        ? rcc_cuda_misaligned(send, sname, recv, rname, esize)
                        : NULL;
  if (bad != NULL) {
    char msg[200];
    snprintf(msg, sizeof(msg), "argument '%s' (%p) is device memory not "
             "aligned to its datatype's %zu bytes (%s); device buffers must "
             "be", bad, bad == sname ? send : recv, esize,
             ringcc_datatype_name((ringcc_datatype_t)c->dt));
    return bad_arg(c, msg);
  }
  return r;
}

static ringcc_result_t validate_peer(struct ringcc_comm *comm, const char *fn,
                                     int peer, int coll) {
  if (coll == RCC_COLL_RECV && peer == RINGCC_ANY_SOURCE)
    return comm->nranks > 1 ? RINGCC_SUCCESS
           : rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                            "%s on rank %d: argument 'peer' is "
                            "RINGCC_ANY_SOURCE on a communicator of one rank: "
                            "no rank could send the message", fn, comm->rank);
  if (peer < 0 || peer >= comm->nranks)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "%s on rank %d: argument 'peer' is %d; it must be in "
                          "[0, %d]%s", fn, comm->rank, peer, comm->nranks - 1,
                          coll == RCC_COLL_RECV ? " or RINGCC_ANY_SOURCE" : "");
  if (peer == comm->rank)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "%s on rank %d: argument 'peer' is this rank; a "
                          "blocking send to oneself cannot complete (copy the "
                          "data locally instead)", fn, comm->rank);
  return RINGCC_SUCCESS;
}

/* Staging for in-place alltoall, kept on the communicator (vcoll.c). */
static void *scratch(struct ringcc_comm *comm, size_t bytes) {
  return rcc_coll_scratch(comm, bytes);
}

/* Resolves the in-place forms: returns the buffer the schedule reads. */
static const void *source_buffer(const struct call *c) {
  size_t esize = ringcc_datatype_size(c->dt);
  if (c->sendbuf != RINGCC_IN_PLACE)
    return c->sendbuf;
  if (c->coll == RCC_COLL_ALLGATHER) /* own block inside recvbuf */
    return (const char *)c->recvbuf + (size_t)c->comm->rank * c->count * esize;
  return c->recvbuf;
}

/* The call's chunk, the bytes one step moves: one slot of the edges the
 * schedule uses (device calls: of the device FIFOs, whose P2P slots are
 * larger). */
static size_t chunk_bytes(const struct call *c) {
  struct ringcc_comm *comm = c->comm;
  int device = (c->uses & ON_DEVICE) != 0;
  if (c->coll == RCC_COLL_SEND || c->coll == RCC_COLL_RECV)
    return rcc_send_conn(comm, device ? RCC_CONN_DEVICE + RCC_CONN_P2P
                                      : RCC_CONN_P2P, 0, c->peer)
        ->slot_bytes;
  if (c->coll <= RCC_COLL_REDUCE)
    return device ? comm->dev_ring_chunk_bytes : comm->ring_chunk_bytes;
  return device ? comm->dev_all_chunk_bytes : comm->all_chunk_bytes;
}

static ringcc_result_t run_cma(const struct call *c, const void *src,
                               ringcc_op_t op) {
  struct ringcc_comm *comm = c->comm;
  size_t esize = ringcc_datatype_size(c->dt);
  struct rcc_cma_call call = {c->coll, src, c->recvbuf, NULL, c->count,
                              (ringcc_datatype_t)c->dt, op};
  if (c->coll == RCC_COLL_REDUCE_SCATTER) {
    /* An output inside the input, other than this rank's own block (MPI's
     * in-place form), would be overwritten while peers still read it. */
    const char *in = src, *out = c->recvbuf;
    size_t in_bytes = c->count * esize * (size_t)comm->nranks;
    if (out < in + in_bytes && out + c->count * esize > in &&
        out != in + (size_t)comm->rank * c->count * esize) {
      call.scratch = scratch(comm, c->count * esize);
      if (call.scratch == NULL)
        return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                              "%s on rank %d: no memory for %zu bytes of "
                              "staging", c->fn, comm->rank, c->count * esize);
    }
  }
  return rcc_cma_run(comm, &call);
}

/* Copies an in-place input aside for an algorithm that writes dst before it
 * has read all of src (RCC_ALG_STAGE_IN_PLACE), into host scratch; device
 * calls stage on the stream instead (rcc_exec_cuda, after the previous
 * collective of the communicator). */
static ringcc_result_t stage_input(const struct call *c, size_t bytes,
                                   const void **src) {
  struct ringcc_comm *comm = c->comm;
  void *copy = scratch(comm, bytes);
  if (copy == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s on rank %d: no memory for the %zu-byte staging "
                          "copy of an in-place input", c->fn, comm->rank,
                          bytes);
  memcpy(copy, *src, bytes);
  *src = copy;
  return RINGCC_SUCCESS;
}

/* The algorithm of the call and its chunk: the tuner's choice for a
 * collective of several ranks; point-to-point and one rank have one. */
static void choose(const struct call *c, struct rcc_tuning *tune) {
  struct ringcc_comm *comm = c->comm;
  size_t esize = ringcc_datatype_size(c->dt);
  tune->chunk_bytes = chunk_bytes(c);
  tune->channels = 1; /* point-to-point, one rank */
  if (c->coll == RCC_COLL_SEND || c->coll == RCC_COLL_RECV)
    tune->alg = RCC_ALG_P2P;
  else if (comm->nranks == 1)
    tune->alg = RCC_ALG_LOCAL;
  else
    rcc_tuner_choose(comm, c->coll, c->count * esize,
                     (c->uses & ON_DEVICE) != 0, tune);
}

/* A call's plan on comm's ring, for algorithm a (its executors split it
 * over its channels). */
static struct rcc_plan call_plan(struct ringcc_comm *comm,
                                 const struct rcc_algorithm *a, int coll,
                                 int channels, size_t esize, size_t count,
                                 size_t chunk_elems) {
  return rcc_exec_plan(comm, a->id, a->sched, coll, channels, esize, count,
                       chunk_elems, 0);
}

/*
 * Premul-sum: each rank multiplies its own input once, here, before any
 * byte moves: src[i] * scalar by the datatype's product (rcc_reduce_scale:
 * rounded once to the datatype, to nearest even), written to staging that
 * the communicator keeps; the collective then runs RINGCC_SUM over the
 * staged copy with whatever algorithm the tuner picks. The staging is never
 * registered memory, so a premul-sum takes the copying algorithms where a
 * sum over registered buffers would run zero-copy. *src: the staged copy.
 */
static ringcc_result_t premul_input(const struct call *c,
                                    const struct rcc_premul_op *pm,
                                    const void **src) {
  struct ringcc_comm *comm = c->comm;
  size_t esize = ringcc_datatype_size(c->dt);
  size_t n = c->count * (c->coll == RCC_COLL_REDUCE_SCATTER
                             ? (size_t)comm->nranks : 1);
  if (n * esize > comm->premul_stage_bytes) {
    void *p = realloc(comm->premul_stage, n * esize);
    if (p == NULL)
      return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                            "%s on rank %d: no memory for the %zu-byte "
                            "premul-sum staging", c->fn, comm->rank,
                            n * esize);
    comm->premul_stage = p;
    comm->premul_stage_bytes = n * esize;
  }
  if (n > 0)
    rcc_reduce_scale((ringcc_datatype_t)c->dt, comm->premul_stage, *src, n,
                     pm->scalar);
  *src = comm->premul_stage;
  return RINGCC_SUCCESS;
}

/* ringcc_recv_from, ringcc_recv from RINGCC_ANY_SOURCE (host buffers). */
static ringcc_result_t execute_recv_from(const struct call *c, int *alg,
                                         uint64_t *bytes) {
  struct ringcc_comm *comm = c->comm;
  size_t esize = ringcc_datatype_size(c->dt);
  size_t chunk = comm->set.chunk_bytes / esize;
  struct rcc_plan plan = call_plan(comm, &rcc_algorithms[RCC_ALG_P2P],
                                   RCC_COLL_RECV, 1, esize, c->count,
                                   chunk > 0 ? chunk : 1);
  plan.nsteps = c->count == 0 ? 1 : rcc_div_up(c->count, plan.chunk_elems);
  int source = -1;
  size_t got = 0;
  *alg = RCC_ALG_P2P;
  ringcc_result_t r = rcc_exec_host_recv_from(
      comm, &plan, c->peer, c->recvbuf, (ringcc_datatype_t)c->dt,
      !(c->uses & UP_TO), &source, &got);
  *bytes = (uint64_t)got * esize;
  ringcc_recv_status_t *status =
      (c->uses & UP_TO) ? ((const struct recv_from_call *)c)->status : NULL;
  if (r == RINGCC_SUCCESS && status != NULL) {
    status->source = source;
    status->count = got;
  }
  return r;
}

/* *alg: the algorithm that ran (enum rcc_alg); *bytes: S in nccl-tests'
 * convention (the statistics' and the trace's). */
static ringcc_result_t execute(const struct call *c,
                               const struct rcc_premul_op *pm, int *alg,
                               uint64_t *bytes) {
  struct ringcc_comm *comm = c->comm;
  const void *src = source_buffer(c);
  size_t esize = ringcc_datatype_size(c->dt);
  ringcc_op_t op = (c->uses & USES_OP) ? (ringcc_op_t)c->op : RINGCC_SUM;
  struct rcc_tuning tune;

  if (rcc_vcoll_is(c->coll)) {
    struct rcc_vcall v = vcall_of(c);
    return rcc_vcoll_execute(comm, &v, alg, bytes);
  }
  if (is_premul(c)) { /* the scaled input into staging, then a sum */
    ringcc_result_t r = premul_input(c, pm, &src);
    if (r != RINGCC_SUCCESS)
      return r;
    op = RINGCC_SUM;
  }

  if (recv_from(c))
    return execute_recv_from(c, alg, bytes);
  choose(c, &tune);
  *alg = tune.alg;
  *bytes = (uint64_t)c->count * esize *
           (c->coll == RCC_COLL_REDUCE_SCATTER || c->coll == RCC_COLL_ALLGATHER ||
                    c->coll == RCC_COLL_ALLTOALL
                ? (uint64_t)comm->nranks
                : 1);
  const struct rcc_algorithm *a = &rcc_algorithms[tune.alg];
  RCC_TRACE(comm->rank, "%s: %s", c->fn, a->name);
  if (a->id == RCC_ALG_P2P && !(c->uses & ON_DEVICE)) {
    /* as a group's: a large message on one host is read in place */
    struct rcc_p2p_op p2p = {c->coll == RCC_COLL_SEND, c->peer,
                             c->coll == RCC_COLL_SEND ? (void *)src
                                                      : c->recvbuf,
                             c->count, (ringcc_datatype_t)c->dt, RCC_ALG_P2P};
    ringcc_result_t r = rcc_exec_host_p2p(comm, &p2p, 1, 0);
    *alg = p2p.ran;
    return r;
  }
  if (a->exec == RCC_EXEC_ZC) {
    struct rcc_zc_call zc = {c->coll, src, c->recvbuf, c->count,
                             (ringcc_datatype_t)c->dt, op,
                             (c->uses & USES_ROOT) ? c->root : -1,
                             (c->uses & ON_DEVICE) != 0, c->stream,
                             tune.channels};
    int ran = 0;
    struct rcc_zc_dev_args launch;
    ringcc_result_t r =
        rcc_exec_zc(comm, &zc, &ran, zc.device ? &launch : NULL);
    if (r == RINGCC_SUCCESS && ran && zc.device)
      return rcc_exec_cuda_zc(comm, &launch, tune.channels, c->stream);
    if (r != RINGCC_SUCCESS || ran)
      return r;
    /* Some rank's buffers are not registered: every rank saw that alike. */
    rcc_tuner_choose_unregistered(comm, c->coll, c->count * esize,
                                  (c->uses & ON_DEVICE) != 0, &tune);
    *alg = tune.alg; /* what the statistics and the trace count */
    a = &rcc_algorithms[tune.alg];
    RCC_TRACE(comm->rank, "%s: not registered on every rank: %s", c->fn,
              a->name);
  }
  if (a->exec == RCC_EXEC_CMA)
    return run_cma(c, src, op);
  /* The call's plan; the executors split it over its channels. */
  struct rcc_plan plan = call_plan(comm, a, c->coll, tune.channels, esize,
                                   c->count, tune.chunk_bytes / esize);
  plan.root = (c->uses & USES_PEER) ? c->peer : c->root;
  plan.postop = (c->uses & USES_OP) && c->op == RINGCC_AVG;
  if (a->exec == RCC_EXEC_BOARD) { /* its regions hold the input: no staging */
    struct rcc_plan whole;
    rcc_plan_channel(&plan, 0, &whole); /* one channel: the whole call */
    rcc_plan_build(&whole);
    whole.alg = a->id; /* the one-shot's plan, on the board */
    return rcc_exec_host_board(comm, &whole, src, c->recvbuf,
                               (ringcc_datatype_t)c->dt, op);
  }
  size_t stage = 0;
  if ((a->flags & RCC_ALG_STAGE_IN_PLACE) && src == c->recvbuf &&
      c->count > 0)
    stage = c->count * esize *
            (c->coll == RCC_COLL_ALLTOALL ? (size_t)comm->nranks : 1);
  if (c->uses & ON_DEVICE)
    return rcc_exec_cuda(comm, &plan, src, c->recvbuf,
                         (ringcc_datatype_t)c->dt, op, c->stream, stage);
  if (stage > 0) {
    ringcc_result_t r = stage_input(c, stage, &src);
    if (r != RINGCC_SUCCESS)
      return r;
  }
  return rcc_exec_host_channels(comm, &plan, src, c->recvbuf,
                                (ringcc_datatype_t)c->dt, op);
}

/* ---- RINGCC_CHECK: do all ranks make the same call? ------------------- */

struct check_desc {
  uint64_t seq; /* comm->checked_calls: collectives checked so far */
  uint64_t count;
  int32_t coll;
  int32_t dt;
  int32_t op;   /* -1 where the collective has none */
  int32_t root; /* -1 where the collective has none */
};

static int differs(const struct check_desc *a, const struct check_desc *b,
                   int field) {
  switch (field) {
  case 0: return a->seq != b->seq;
  case 1: return a->coll != b->coll;
  case 2: return a->count != b->count;
  case 3: return a->dt != b->dt;
  case 4: return a->op != b->op;
  default: return a->root != b->root;
  }
}

static int field_value(const struct check_desc *d, int field, char *buf,
                       size_t len) {
  switch (field) {
  case 0: return snprintf(buf, len, "%llu", (unsigned long long)d->seq);
  case 1: return snprintf(buf, len, "%s", rcc_coll_name(d->coll));
  case 2: return snprintf(buf, len, "%llu", (unsigned long long)d->count);
  case 3: return snprintf(buf, len, "%s",
                          ringcc_datatype_name((ringcc_datatype_t)d->dt));
  case 4: return d->op >= RINGCC_NUM_OPS
                     ? snprintf(buf, len, "premul-sum op %d", d->op)
                     : snprintf(buf, len, "%s", d->op < 0 ? "none"
                                : ringcc_op_name((ringcc_op_t)d->op));
  default: return snprintf(buf, len, "%d", d->root);
  }
}

/* mine (bytes each) from every rank into all, rank by rank. */
static ringcc_result_t check_gather(struct ringcc_comm *comm, const void *mine,
                                    void *all, size_t bytes) {
  struct rcc_plan plan = {.coll = RCC_COLL_ALLGATHER, .nranks = comm->nranks,
                          .rank = comm->rank, .pos = comm->ring_pos,
                          .ring = comm->ring, .count = bytes,
                          .chunk_elems = comm->ring_chunk_bytes};
  rcc_plan_ring(&plan);
  return rcc_exec_host(comm, &plan, mine, all, RINGCC_UINT8, RINGCC_SUM);
}

/* AllGatherv and AllToAllv: every rank's counts, all-gathered (nranks
 * rows of 2 x nranks: what it sends to each rank, what it receives from
 * each), must pair up: what rank q sends rank j is what j receives from q.
 * The first pair that does not, in the same words on every rank (into msg,
 * len bytes); 0 where all do. */
static int check_counts(const struct call *c, char *msg, size_t len,
                        ringcc_result_t *r) {
  struct ringcc_comm *comm = c->comm;
  size_t n = (size_t)comm->nranks, row = 2 * n;
  uint64_t *all = calloc(n * row + row, sizeof(*all)), *mine = all + n * row;
  int a2av = c->coll == RCC_COLL_ALLTOALLV, found = 0;
  if (all == NULL) {
    *r = rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY, "%s on rank %d: out "
                        "of memory for RINGCC_CHECK's counts", c->fn,
                        comm->rank);
    return 0;
  }
  for (size_t j = 0; j < n; j++) {
    const size_t *send = a2av && c->sendbuf != RINGCC_IN_PLACE
                             ? c->sendcounts : c->recvcounts;
    mine[j] = a2av ? send[j] : c->count; /* allgatherv: one block to all */
    mine[n + j] = c->recvcounts[j];
  }
  *r = check_gather(comm, mine, all, row * sizeof(*all));
  for (size_t q = 0; q < n && *r == RINGCC_SUCCESS && !found; q++)
    for (size_t j = 0; j < n && !found; j++) {
      uint64_t sent = all[q * row + j], expected = all[j * row + n + q];
      if (sent == expected)
        continue;
      found = 1;
      if (a2av)
        snprintf(msg, len, "rank %zu sends rank %zu %llu elements "
                 "('sendcounts'[%zu]), rank %zu receives %llu from rank %zu "
                 "('recvcounts'[%zu])", q, j, (unsigned long long)sent, j, j,
                 (unsigned long long)expected, q, q);
      else
        snprintf(msg, len, "rank %zu sends %llu elements ('sendcount'), "
                 "rank %zu receives %llu from it ('recvcounts'[%zu])", q,
                 (unsigned long long)sent, j, (unsigned long long)expected,
                 q);
    }
  free(all);
  return found;
}

/* All ranks all-gather what they were asked to do and compare: the same
 * table on every rank, so every rank fails alike, naming ranks and field. */
static ringcc_result_t check_agreement(const struct call *c, int *mismatch) {
  static const char *const fields[] = {"collective number", "collective",
                                       "count", "datatype", "op", "root"};
  struct ringcc_comm *comm = c->comm;
  int n = comm->nranks;
  int uneven = c->coll == RCC_COLL_ALLGATHERV || c->coll == RCC_COLL_ALLTOALLV;
  struct check_desc mine = {++comm->checked_calls, uneven ? 0 : c->count,
                            c->coll, c->dt,
                            (c->uses & USES_OP) ? c->op : -1,
                            (c->uses & USES_ROOT) ? c->root : -1};
  struct check_desc *all = calloc((size_t)n, sizeof(*all));
  char msg[RCC_ERRLEN], a[48], b[48];
  int off = 0;

  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s on rank %d: out of memory for RINGCC_CHECK",
                          c->fn, comm->rank);
  ringcc_result_t r = check_gather(comm, &mine, all, sizeof(mine));
  int gathered = r == RINGCC_SUCCESS;
  for (int f = 0; f < 6 && gathered; f++)
    for (int q = 1; q < n; q++) {
      if (!differs(&all[0], &all[q], f))
        continue;
      field_value(&all[0], f, a, sizeof(a));
      field_value(&all[q], f, b, sizeof(b));
      if (off < (int)sizeof(msg) - 1)
        off += snprintf(msg + off, sizeof(msg) - (size_t)off,
                        "%s%s: rank 0 has %s, rank %d has %s", off ? "; " : "",
                        fields[f], a, q, b);
      r = RINGCC_ERR_INVALID_USAGE;
      break; /* one rank per field keeps the message short */
    }
  free(all);
  /* The same call everywhere: do the uneven one's counts pair up? */
  if (r == RINGCC_SUCCESS && uneven &&
      check_counts(c, msg + off, sizeof(msg) - (size_t)off, &r))
    r = RINGCC_ERR_INVALID_USAGE;
  *mismatch = r == RINGCC_ERR_INVALID_USAGE;
  if (r == RINGCC_ERR_INVALID_USAGE)
    return rcc_comm_error(comm, r,
                          "%s on rank %d (RINGCC_CHECK): the ranks' calls do "
                          "not match: %s", c->fn, comm->rank, msg);
  return r;
}

/* The call, inside the communicator (rcc_comm_enter): nobody else runs one
 * on it meanwhile, and it is not destroyed under this one. */
static ringcc_result_t run_inside(struct call *c) {
  struct ringcc_comm *comm = c->comm;
  struct rcc_stats_mark mark;
  ringcc_result_t r;

  rcc_cuda_poll(comm); /* a device collective that failed since */
  if (comm->aborted || rcc_comm_fatal(comm) != RINGCC_SUCCESS) {
    ringcc_result_t code =
        comm->aborted ? RINGCC_ERR_ABORTED : rcc_comm_fatal(comm);
    RCC_WARN(comm->rank, "%s on rank %d: the communicator is unusable after "
                         "an earlier failure: %s", c->fn, comm->rank,
             comm->last_error);
    return code;
  }
  if (c->uses & USES_PEER)
    if ((r = validate_peer(comm, c->fn, c->peer, c->coll)) != RINGCC_SUCCESS)
      return r;
  struct rcc_premul_op pm;
  if ((r = validate(c, &pm)) != RINGCC_SUCCESS ||
      (r = locate(c)) != RINGCC_SUCCESS)
    return r;
  if (recv_from(c) && (c->uses & ON_DEVICE))
    return rcc_comm_error(comm, RINGCC_ERR_UNSUPPORTED,
                          "%s on rank %d: %s takes host buffers only; 'buf' "
                          "is device memory", c->fn, comm->rank,
                          c->peer == RINGCC_ANY_SOURCE
                              ? "a receive from RINGCC_ANY_SOURCE"
                              : "ringcc_recv_from");
  RCC_PUT(comm->seq, comm->seq + 1); /* the hang report reads it */
  RCC_TRACE(comm->rank, "%s seq %llu count %zu datatype %s", c->fn,
            (unsigned long long)comm->seq, c->count,
            ringcc_datatype_name((ringcc_datatype_t)c->dt));
  int mismatch = 0, alg = -1;
  uint64_t bytes = 0;
  struct rcc_stats *st = comm->stats;
  r = RINGCC_SUCCESS;
  mark.sent = st->sent_total;
  if (st->timing) { /* RINGCC_STATS=time, RINGCC_TRACE, RINGCC_DEBUG=INFO */
    rcc_stats_time_begin(st, &mark);
    if (comm->trace != NULL) /* a trace implies timing */
      rcc_trace_poll_signal(comm);
  }
  comm->failed_locally = 0;
  if (comm->set.check && comm->nranks > 1 && !(c->uses & USES_PEER))
    r = check_agreement(c, &mismatch);
  if (r == RINGCC_SUCCESS)
    r = execute(c, &pm, &alg, &bytes);
  rcc_stats_count(st, c->coll, alg, bytes, &mark);
  if (st->timing) {
    int64_t end = rcc_stats_time_end(st, c->coll, alg, &mark);
    if (comm->trace != NULL) {
      rcc_trace_call(comm, c->coll, alg, bytes, mark.t0, end, r);
      if (r != RINGCC_SUCCESS)
        rcc_trace_flush(comm, "error");
    }
  }
  /* A mismatch the check found is seen by every rank before any data moved,
   * and the executor marks the failures it left every FIFO in a known
   * state after (a mismatched message taken whole or refused): the
   * communicator stays usable. Any other failure leaves FIFOs in an
   * unknown state. */
  if (mismatch)
    comm->failed_locally = 1;
  return rcc_comm_end_call(comm, r);
}

/* ---- inside a group (group.c) ------------------------------------------ */

/* struct call's array fields (nranks size_t each, NULL where unused), as
 * X(field): a group keeps copies of them with the call. */
#define CALL_ARRAYS(X) X(sendcounts) X(sdispls) X(recvcounts) X(rdispls)

/* *field, a copy of the caller's array (NULL when out of memory): 1 if made. */
static int keep_array(const size_t **field, size_t n) {
  if (*field == NULL)
    return 1;
  size_t *copy = malloc(n * sizeof(*copy));
  if (copy != NULL)
    memcpy(copy, *field, n * sizeof(*copy));
  *field = copy;
  return copy != NULL;
}

static void drop_call(struct call *k) {
#define DROP_ARRAY(f) free((void *)k->f);
  CALL_ARRAYS(DROP_ARRAY)
#undef DROP_ARRAY
  free(k);
}

/* The group's copy of c, or NULL when out of memory. */
static struct call *keep_call(const struct call *c) {
  struct call *k = malloc(sizeof(*k));
  int ok = k != NULL;
  if (!ok)
    return NULL;
  *k = *c;
#define KEEP_ARRAY(f) ok &= keep_array(&k->f, (size_t)c->comm->nranks);
  CALL_ARRAYS(KEEP_ARRAY)
#undef KEEP_ARRAY
  if (!ok) {
    drop_call(k);
    return NULL;
  }
  return k;
}

/* A call between ringcc_group_start and end: validated now (a bad argument
 * fails this call, the group goes on), kept, run at the group's end. Sends
 * and receives may name this rank itself there. */
static ringcc_result_t record_inside(struct call *c) {
  ringcc_result_t r = RINGCC_SUCCESS;
  struct rcc_premul_op pm; /* checked now; run_inside looks it up again */
  if (recv_from(c))
    return rcc_comm_error(c->comm, RINGCC_ERR_INVALID_USAGE,
                          "%s on rank %d: %s inside a group is not supported "
                          "(a group's receives name their peer and take "
                          "exactly count elements): make it outside the "
                          "group", c->fn, c->comm->rank,
                          c->peer == RINGCC_ANY_SOURCE
                              ? "a receive from RINGCC_ANY_SOURCE"
                              : "ringcc_recv_from");
  if ((c->uses & USES_PEER) && c->peer != c->comm->rank)
    r = validate_peer(c->comm, c->fn, c->peer, c->coll);
  if (r != RINGCC_SUCCESS || (r = validate(c, &pm)) != RINGCC_SUCCESS ||
      (r = locate(c)) != RINGCC_SUCCESS)
    return r;
  if (c->uses & USES_PEER) {
    if (c->uses & ON_DEVICE)
      return rcc_comm_error(c->comm, RINGCC_ERR_UNSUPPORTED,
                            "%s on rank %d: device buffers in a group's "
                            "sends and receives are not supported yet (host "
                            "buffers only)", c->fn, c->comm->rank);
    struct rcc_p2p_op op = {c->coll == RCC_COLL_SEND, c->peer,
                            c->coll == RCC_COLL_SEND ? (void *)c->sendbuf
                                                     : c->recvbuf,
                            c->count, (ringcc_datatype_t)c->dt};
    return rcc_group_add_p2p(c->comm, c->fn, &op);
  }
  struct call *k = keep_call(c);
  if (k == NULL)
    return rcc_comm_error(c->comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s on rank %d: out of memory to keep the call for "
                          "its group", c->fn, c->comm->rank);
  return rcc_group_add_call(c->comm, k, run_inside, drop_call);
}

/* body(c) inside the communicator, entered as kind (live.h). */
static ringcc_result_t entered(struct call *c, int kind,
                               ringcc_result_t (*body)(struct call *)) {
  ringcc_result_t r = rcc_comm_enter(c->comm, c->fn, kind);
  if (r != RINGCC_SUCCESS)
    return r;
  if (kind == RCC_ENTER_CALL)
    rcc_links_use(c->comm); /* after a shrunk one (or its parent) ran */
  r = body(c);
  rcc_comm_leave(c->comm, kind);
  return r;
}

static ringcc_result_t run(struct call *c) {
  if (rcc_group_recording()) /* kept, not run: a query's entry */
    return entered(c, RCC_ENTER_QUERY, record_inside);
  rcc_group_drain(c->comm); /* after the requests in flight on it */
  return entered(c, RCC_ENTER_CALL, run_inside);
}

ringcc_result_t rcc_allgatherv_ring(ringcc_comm_t comm, const void *sendbuf,
                                    void *recvbuf, const size_t *counts,
                                    const size_t *displs,
                                    ringcc_datatype_t dt) {
  const char *fn = "rcc_allgatherv_ring";
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_CALL);
  if (r != RINGCC_SUCCESS)
    return r;
  rcc_links_use(comm);
  size_t esize = ringcc_datatype_size(dt);
  if (esize == 0 || counts == NULL || displs == NULL) {
    rcc_comm_leave(comm, RCC_ENTER_CALL);
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "%s on rank %d: %s", fn, comm->rank,
                          esize == 0 ? "datatype is not a ringcc_datatype_t"
                                     : "counts or displs is NULL");
  }
  RCC_PUT(comm->seq, comm->seq + 1);
  comm->failed_locally = 0;
  r = rcc_allgatherv_plan_run(comm, sendbuf, recvbuf, counts, displs, dt);
  rcc_comm_end_call(comm, r);
  rcc_comm_leave(comm, RCC_ENTER_CALL);
  return r;
}

RINGCC_API ringcc_result_t ringcc_allreduce(const void *sendbuf, void *recvbuf,
                                            size_t count, ringcc_datatype_t dt,
                                            ringcc_op_t op, ringcc_comm_t comm,
                                            ringcc_stream_t stream) {
  struct call c = {"ringcc_allreduce", comm, RCC_COLL_ALLREDUCE, sendbuf,
                   recvbuf, count, dt, op, -1, -1, stream, USES_OP};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_reduce_scatter(
    const void *sendbuf, void *recvbuf, size_t recvcount, ringcc_datatype_t dt,
    ringcc_op_t op, ringcc_comm_t comm, ringcc_stream_t stream) {
  struct call c = {"ringcc_reduce_scatter", comm, RCC_COLL_REDUCE_SCATTER,
                   sendbuf, recvbuf, recvcount, dt, op, -1, -1, stream, USES_OP};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_allgather(const void *sendbuf, void *recvbuf,
                                            size_t sendcount,
                                            ringcc_datatype_t dt,
                                            ringcc_comm_t comm,
                                            ringcc_stream_t stream) {
  struct call c = {"ringcc_allgather", comm, RCC_COLL_ALLGATHER, sendbuf,
                   recvbuf, sendcount, dt, -1, -1, -1, stream, 0};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_bcast(void *buf, size_t count,
                                        ringcc_datatype_t dt, int root,
                                        ringcc_comm_t comm,
                                        ringcc_stream_t stream) {
  struct call c = {"ringcc_bcast", comm, RCC_COLL_BCAST, buf, buf, count, dt,
                   -1, root, -1, stream, USES_ROOT};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_reduce(const void *sendbuf, void *recvbuf,
                                         size_t count, ringcc_datatype_t dt,
                                         ringcc_op_t op, int root,
                                         ringcc_comm_t comm,
                                         ringcc_stream_t stream) {
  struct call c = {"ringcc_reduce", comm, RCC_COLL_REDUCE, sendbuf, recvbuf,
                   count, dt, op, root, -1, stream, USES_OP | USES_ROOT};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_alltoall(const void *sendbuf, void *recvbuf,
                                           size_t count, ringcc_datatype_t dt,
                                           ringcc_comm_t comm,
                                           ringcc_stream_t stream) {
  struct call c = {"ringcc_alltoall", comm, RCC_COLL_ALLTOALL, sendbuf,
                   recvbuf, count, dt, -1, -1, -1, stream, 0};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_send(const void *buf, size_t count,
                                       ringcc_datatype_t dt, int peer,
                                       ringcc_comm_t comm,
                                       ringcc_stream_t stream) {
  struct call c = {"ringcc_send", comm, RCC_COLL_SEND, buf, NULL, count, dt,
                   -1, -1, peer, stream, USES_PEER};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_recv(void *buf, size_t count,
                                       ringcc_datatype_t dt, int peer,
                                       ringcc_comm_t comm,
                                       ringcc_stream_t stream) {
  struct call c = {"ringcc_recv", comm, RCC_COLL_RECV, NULL, buf, count, dt,
                   -1, -1, peer, stream, USES_PEER};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_recv_from(void *buf, size_t count,
                                            ringcc_datatype_t dt, int peer,
                                            ringcc_comm_t comm,
                                            ringcc_stream_t stream,
                                            ringcc_recv_status_t *status) {
  struct recv_from_call rc = {{"ringcc_recv_from", comm, RCC_COLL_RECV, NULL,
                               buf, count, dt, -1, -1, peer, stream,
                               USES_PEER | UP_TO},
                              status};
  return run(&rc.c);
}

RINGCC_API ringcc_result_t ringcc_barrier(ringcc_comm_t comm,
                                          ringcc_stream_t stream) {
  struct call c = {"ringcc_barrier", comm, RCC_COLL_BARRIER, NULL, NULL, 0,
                   RINGCC_UINT8, -1, -1, -1, stream, 0};
  return run(&c);
}

/* ---- gather, scatter, uneven collectives (vcoll.c) ----------------------- */

RINGCC_API ringcc_result_t ringcc_gather(const void *sendbuf, void *recvbuf,
                                         size_t sendcount,
                                         ringcc_datatype_t dt, int root,
                                         ringcc_comm_t comm,
                                         ringcc_stream_t stream) {
  struct call c = {"ringcc_gather", comm, RCC_COLL_GATHER, sendbuf, recvbuf,
                   sendcount, dt, -1, root, -1, stream, USES_ROOT};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_scatter(const void *sendbuf, void *recvbuf,
                                          size_t recvcount,
                                          ringcc_datatype_t dt, int root,
                                          ringcc_comm_t comm,
                                          ringcc_stream_t stream) {
  struct call c = {"ringcc_scatter", comm, RCC_COLL_SCATTER, sendbuf, recvbuf,
                   recvcount, dt, -1, root, -1, stream, USES_ROOT};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_allgatherv(
    const void *sendbuf, size_t sendcount, void *recvbuf,
    const size_t *recvcounts, const size_t *displs, ringcc_datatype_t dt,
    ringcc_comm_t comm, ringcc_stream_t stream) {
  struct call c = {"ringcc_allgatherv", comm, RCC_COLL_ALLGATHERV, sendbuf,
                   recvbuf, sendcount, dt, -1, -1, -1, stream, 0,
                   NULL, NULL, recvcounts, displs};
  return run(&c);
}

RINGCC_API ringcc_result_t ringcc_alltoallv(
    const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
    void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
    ringcc_datatype_t dt, ringcc_comm_t comm, ringcc_stream_t stream) {
  struct call c = {"ringcc_alltoallv", comm, RCC_COLL_ALLTOALLV, sendbuf,
                   recvbuf, 0, dt, -1, -1, -1, stream, 0,
                   sendcounts, sdispls, recvcounts, rdispls};
  return run(&c);
}
