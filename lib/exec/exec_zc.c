/*
 * exec_zc.c - zero-copy collectives on registered buffers (zc.h): each rank
 * reads its peers' inputs and writes their outputs where they are, through
 * the mappings registration made (registry.c), so every input is read once
 * and every output written once: the memory floor.
 *
 * With n ranks on one host (block b: the b-th of n nearly equal slices of
 * the buffer, cut at 64-byte boundaries so no two ranks write one cache
 * line; rcc_zc_block and the order of peers, rcc_zc_peer, are zc_sched.h's),
 * rank r
 *
 *   AllReduce      reduces block r of every input, in rank order, a
 *                  cache-sized chunk at a time, and writes the chunk into
 *                  block r of every output (its own included): read S,
 *                  write S per rank, one pass;
 *   Reduce-Scatter reduces block r of every input into its output;
 *   AllGather      writes its input into block r of every output (the
 *                  input is read once, the chunk stays in cache);
 *   Broadcast      copies block r of the root's buffer into every other
 *                  rank's buffer;
 *   Reduce         reduces block r of every input into the root's output;
 *   AllToAll       writes its block q into block r of rank q's output.
 *
 * Each element is computed by one rank, in rank order, and copied to the
 * others: every rank gets the same bits. Large calls write the outputs with
 * non-temporal stores (no read for ownership; a call that outgrows the
 * cache would evict them anyway).
 *
 * How ranks synchronise: the zero-copy board. Every rank owns two arrival
 * records and one "done" record in its flags segment (registry.h); only the
 * owner writes them, every peer on the host reads them and sleeps on their
 * seq word (a futex) when it has to wait, as on the one-shot board. Call s
 * (the s-th zero-copy call, the same on every rank) runs:
 *
 *   1. arrive: the rank writes into arrival record s & 1 its call (the
 *      collective, count, datatype, op, root) and its buffers as (slot,
 *      offset) of its registrations, then stores s in its seq (release).
 *      The user's inputs are final and its outputs free from this moment.
 *   2. it waits until every peer's arrival record holds s, and checks it:
 *      a different call fails every rank at once (INVALID_USAGE, naming the
 *      rank); if some rank's buffers are not registered, every rank sees it
 *      and every rank leaves without touching a buffer (the caller runs the
 *      unregistered path).
 *   3. it reads and writes as above: only peers' buffers of ranks that have
 *      arrived, and in every buffer only its own block, so no two ranks
 *      write one byte and none reads what another writes in this call
 *      (in-place forms included; where an output overlaps inputs of
 *      others, as MPI's in-place Reduce-Scatter on ranks other than 0, the
 *      result is staged and copied after step 5; an in-place AllToAll
 *      copies its input aside before step 1).
 *   4. done: a store fence (for the non-temporal stores), then s in its
 *      done record's seq (release).
 *   5. it waits until every peer's done record holds s.
 *
 * So a rank knows that its inputs are no longer read, and that nothing more
 * will be written into its outputs, when every peer's done record holds s:
 * each peer stores it after its last read and write of this call. Only
 * then does the call return and the user may overwrite the inputs. Why two
 * arrival records are enough: a rank publishes its arrival of call s+1 only
 * after it has read every peer's arrival of s (step 2 of s), and a peer can
 * reach s+2 only after seeing that arrival of s+1; so record s & 1 is not
 * rewritten while anyone may still read it, even when call s+1 left at
 * step 2 (no done record is written then). Every wait is the FIFOs' wait:
 * bounded by the deadline, woken by abort, and a dead peer is noticed by
 * its pid or the dead word of its FIFO (failure.c).
 *
 * Several hosts (AllReduce, the same number L >= 2 of ranks on each): the
 * ranks of a host run steps 1-2 among themselves, then agree across hosts
 * (a 4-byte minimum over the "rail" of ranks with the same index on every
 * host, on the FIFOs), so that all take the same path; rank l of a host
 * reduces block l (of L) of its host's inputs into its own output, the
 * rails run a ring AllReduce over the network on their blocks in place
 * (every rank's 1/L of the data: L rings at once), and rank l writes the
 * result into block l of every output on its host; then steps 4-5.
 */
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "copy.h"
#include "exec.h"
#include "fifo.h"
#include "reduce.h"
#include "registry.h"
#include "zc.h"
#include "zc_sched.h"

struct zc {
  struct ringcc_comm *comm;
  struct rcc_registry *reg;
  const struct rcc_zc_call *c;
  struct rcc_plan plan; /* what the waits report */
  size_t esize;
  rcc_reduce_fn reduce;
  int64_t deadline;
  uint32_t seq;
  int n, me;        /* ranks taking part here (the host's), this one's index */
  int root;         /* the root's index among them, or -1 */
  int nt;           /* non-temporal stores */
  char *staged;     /* Reduce-Scatter: the result, copied after the end */
  const char *mine; /* AllToAll in place: the input, copied aside */
  int mismatch;     /* a peer makes another call */
  int in_place;     /* some rank's call is in place (device calls) */
  struct rcc_zc_dev_args *launch; /* a device call's kernel arguments */
};

/* ---- copies ------------------------------------------------------------------------ */

static void put(const struct zc *z, void *dst, const void *src, size_t bytes) {
  if (dst == src || bytes == 0)
    return;
  if (z->nt)
    rcc_nt_copy(dst, src, bytes);
  else
    memcpy(dst, src, bytes);
}

/* out[0..k) = in[0][o..] op in[1][o..] op ... (rank order), o in bytes;
 * divided by nranks for AVG when finish. */
static void reduce_chunk(const struct zc *z, const char *const *in, size_t o,
                         size_t k, char *out, int finish) {
  z->reduce(out, in[0] + o, in[1] + o, k);
  for (int q = 2; q < z->n; q++)
    z->reduce(out, out, in[q] + o, k);
  if (finish && z->c->op == RINGCC_AVG)
    rcc_reduce_avg_finish(z->c->dt, out, out, k, z->comm->nranks);
}

/* ---- the collectives, once every rank has arrived ---------------------------- */

static void zc_allreduce(struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  const char *const *in = z->reg->in;
  char *const *out = z->reg->out;
  size_t off, len, chunk = RCC_ZC_CHUNK / z->esize;
  char *tmp = z->reg->tmp;
  rcc_zc_block(c->count, z->esize, z->n, z->me, &off, &len);
  for (size_t done = 0; done < len; done += chunk) {
    size_t k = len - done < chunk ? len - done : chunk;
    size_t o = (off + done) * z->esize;
    reduce_chunk(z, in, o, k, tmp, 1);
    for (int j = 0; j < z->n; j++)
      put(z, out[rcc_zc_peer(z->me, j, z->n)] + o, tmp, k * z->esize);
  }
}

static void zc_reduce_scatter(struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  size_t chunk = RCC_ZC_CHUNK / z->esize, base = (size_t)z->me * c->count;
  char *out = z->staged != NULL ? z->staged : c->dst;
  for (size_t done = 0; done < c->count; done += chunk) {
    size_t k = c->count - done < chunk ? c->count - done : chunk;
    reduce_chunk(z, z->reg->in, (base + done) * z->esize, k, z->reg->tmp, 1);
    put(z, out + done * z->esize, z->reg->tmp, k * z->esize);
  }
}

static void zc_allgather(struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  size_t chunk = RCC_ZC_CHUNK / z->esize, base = (size_t)z->me * c->count;
  const char *mine = c->src;
  for (size_t done = 0; done < c->count; done += chunk) {
    size_t k = c->count - done < chunk ? c->count - done : chunk;
    for (int j = 0; j < z->n; j++)
      put(z,
          z->reg->out[rcc_zc_peer(z->me, j, z->n)] + (base + done) * z->esize,
          mine + done * z->esize, k * z->esize);
  }
}

static void zc_bcast(struct zc *z) {
  size_t off, len, chunk = RCC_ZC_CHUNK / z->esize;
  const char *from = z->reg->in[z->root];
  rcc_zc_block(z->c->count, z->esize, z->n, z->me, &off, &len);
  for (size_t done = 0; done < len; done += chunk) {
    size_t k = len - done < chunk ? len - done : chunk;
    size_t o = (off + done) * z->esize;
    for (int j = 0; j < z->n; j++) {
      int q = rcc_zc_peer(z->me, j, z->n);
      if (q != z->root)
        put(z, z->reg->out[q] + o, from + o, k * z->esize);
    }
  }
}

static void zc_reduce(struct zc *z) {
  size_t off, len, chunk = RCC_ZC_CHUNK / z->esize;
  rcc_zc_block(z->c->count, z->esize, z->n, z->me, &off, &len);
  for (size_t done = 0; done < len; done += chunk) {
    size_t k = len - done < chunk ? len - done : chunk;
    size_t o = (off + done) * z->esize;
    reduce_chunk(z, z->reg->in, o, k, z->reg->tmp, 1);
    put(z, z->reg->out[z->root] + o, z->reg->tmp, k * z->esize);
  }
}

static void zc_alltoall(struct zc *z) {
  size_t block = z->c->count * z->esize;
  const char *mine = z->mine != NULL ? z->mine : z->c->src;
  for (int j = 0; j < z->n; j++) {
    int q = rcc_zc_peer(z->me, j, z->n);
    put(z, z->reg->out[q] + (size_t)z->me * block, mine + (size_t)q * block,
        block);
  }
}

/* ---- the board ----------------------------------------------------------------------- */

static void publish(struct rcc_zc_flag *f, uint32_t seq) {
  __atomic_store_n(&f->seq, seq, __ATOMIC_RELEASE);
  /* As the FIFOs' publish: the store before reading waiters, so a sleeper
   * that counted itself in is never missed. */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&f->waiters, __ATOMIC_RELAXED) != 0)
    syscall(SYS_futex, &f->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static ringcc_result_t wait_flag(struct zc *z, int peer, struct rcc_zc_flag *f,
                                 const char *what) {
  struct ringcc_comm *comm = z->comm;
  struct rcc_progress *at = &comm->progress;
  const struct rcc_conn *conn = &comm->recv_conn[RCC_CONN_COLL][peer];
  uint32_t now;
  RCC_PUT(at->waiting_for, what);
  RCC_PUT(at->peer, peer);
  RCC_PUT(at->conn, conn->fifo != NULL && conn->ops == NULL ? conn : NULL);
  RCC_PUT(at->waiting_send, 0);
  RCC_PUT(at->board_seq, &f->seq);
  RCC_PUT(at->board_want, z->seq);
  while ((now = __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE)) != z->seq) {
    ringcc_result_t r = rcc_exec_host_wait(comm, &z->plan, &f->seq,
                                           &f->waiters, now, &z->deadline);
    if (r != RINGCC_SUCCESS)
      return r;
  }
  RCC_PUT(at->board_seq, NULL);
  RCC_PUT(at->peer, -1);
  return RINGCC_SUCCESS;
}

static uint32_t what_of(const struct rcc_zc_call *c, int usable) {
  return (uint32_t)c->coll | (uint32_t)c->dt << 8 | (uint32_t)c->op << 16 |
         (uint32_t)(usable != 0) << 24 | (uint32_t)(c->src == c->dst) << 25;
}

/* An output over inputs peers read (MPI's in-place Reduce-Scatter on ranks
 * other than 0): the result is staged (prepare). */
static int output_over_inputs(const struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  size_t b = c->count * z->esize;
  const char *in = c->src, *out = c->dst;
  return c->coll == RCC_COLL_REDUCE_SCATTER && out < in + b * (size_t)z->n &&
         out + b > in && out != in + (size_t)z->me * b;
}

/* Whether the zero-copy kernel takes a device call on this rank: its
 * collectives, up to RCC_ZC_DEV_MAX local ranks, every local rank's device
 * counters mapped here, and no staging (which would be host memory). */
static int device_usable(const struct zc *z) {
  int coll = z->c->coll;
  return (coll == RCC_COLL_ALLREDUCE || coll == RCC_COLL_REDUCE_SCATTER ||
          coll == RCC_COLL_ALLGATHER) &&
         z->n <= RCC_ZC_DEV_MAX && z->reg->dev_ready && !output_over_inputs(z);
}

/* Bytes of rank j's input and output (j: an index in local[]) that other
 * ranks read or write; 0 where only j touches it. */
static void exposed(const struct zc *z, int j, size_t *in, size_t *out) {
  const struct rcc_zc_call *c = z->c;
  size_t b = c->count * z->esize, nb = b * (size_t)z->n;
  int root = j == z->root;
  *in = *out = 0;
  switch (c->coll) {
  case RCC_COLL_ALLREDUCE:
    *in = *out = b;
    break;
  case RCC_COLL_REDUCE_SCATTER:
    *in = nb;
    break;
  case RCC_COLL_ALLGATHER:
  case RCC_COLL_ALLTOALL:
    *out = nb;
    break;
  case RCC_COLL_BCAST:
    *(root ? in : out) = b;
    break;
  default: /* reduce */
    *in = b;
    *out = root ? b : 0;
    break;
  }
}

/* Bytes of input and output of one rank's call (buffer_elems in coll.c). */
static size_t footprint(const struct zc *z) {
  size_t b = z->c->count * z->esize, n = (size_t)z->n;
  switch (z->c->coll) {
  case RCC_COLL_REDUCE_SCATTER:
  case RCC_COLL_ALLGATHER:
    return b * (n + 1);
  case RCC_COLL_ALLTOALL:
    return 2 * b * n;
  case RCC_COLL_BCAST:
    return b;
  default:
    return 2 * b;
  }
}

/* Step 1: this rank's arrival record. */
static void arrive(struct zc *z, struct rcc_zc_flag *f) {
  const struct rcc_zc_call *c = z->c;
  size_t in_bytes, out_bytes;
  exposed(z, z->me, &in_bytes, &out_bytes);
  f->src_slot = f->dst_slot = RCC_ZC_NO_SLOT;
  f->src_off = f->dst_off = 0;
  if (in_bytes > 0)
    f->src_slot = rcc_registry_find(z->reg, c->src, in_bytes, c->device,
                                    &f->src_off);
  if (out_bytes > 0)
    f->dst_slot = rcc_registry_find(z->reg, c->dst, out_bytes, c->device,
                                    &f->dst_off);
  int usable = (in_bytes == 0 || f->src_slot != RCC_ZC_NO_SLOT) &&
               (out_bytes == 0 || f->dst_slot != RCC_ZC_NO_SLOT) &&
               (!c->device || device_usable(z));
  f->what = what_of(c, usable);
  f->root = c->root;
  f->count = c->count;
  publish(f, z->seq);
}

static const char *dt_name(int dt) {
  const char *s = ringcc_datatype_name((ringcc_datatype_t)dt);
  return s != NULL ? s : "?";
}

static const char *op_name(int op) {
  const char *s = ringcc_op_name((ringcc_op_t)op);
  return s != NULL ? s : "?";
}

static ringcc_result_t mismatch(struct zc *z, int peer,
                                const struct rcc_zc_flag *f) {
  struct ringcc_comm *comm = z->comm;
  z->mismatch = 1;
  return rcc_comm_error(
      comm, RINGCC_ERR_INVALID_USAGE,
      "%s (seq %llu) on rank %d: rank %d makes another call (%s, count %llu, "
      "%s, %s, root %d) than this rank (count %zu, %s, %s, root %d) (do all "
      "ranks call the same collective with the same arguments?)",
      rcc_coll_name(z->c->coll), (unsigned long long)comm->seq, comm->rank,
      peer, rcc_coll_name((int)(f->what & 0xff)),
      (unsigned long long)f->count, dt_name((int)(f->what >> 8 & 0xff)),
      op_name((int)(f->what >> 16 & 0xff)), f->root, z->c->count,
      dt_name(z->c->dt), op_name(z->c->op), z->c->root);
}

/* Step 2: every peer's arrival; *all_usable: every rank's buffers are
 * registered. Then where each rank's buffers are, here. */
static ringcc_result_t gather_arrivals(struct zc *z, int *all_usable) {
  struct rcc_registry *reg = z->reg;
  uint32_t want = what_of(z->c, 0) & 0xffffff;
  size_t in_bytes, out_bytes;
  *all_usable = 1;
  for (int j = 0; j < z->n; j++) {
    int p = reg->local[j];
    struct rcc_zc_flag *f = &reg->ctl[p]->arrive[z->seq & 1];
    if (j != z->me) {
      ringcc_result_t r = wait_flag(z, p, f, "the arrival of");
      if (r != RINGCC_SUCCESS)
        return r;
    }
    if ((f->what & 0xffffff) != want || f->count != z->c->count ||
        f->root != z->c->root)
      return mismatch(z, p, f);
    *all_usable &= (int)(f->what >> 24 & 1);
    z->in_place |= (int)(f->what >> 25 & 1);
  }
  if (!*all_usable)
    return RINGCC_SUCCESS;
  for (int j = 0; j < z->n; j++) {
    int p = reg->local[j];
    const struct rcc_zc_flag *f = &reg->ctl[p]->arrive[z->seq & 1];
    exposed(z, j, &in_bytes, &out_bytes);
    reg->in[j] = in_bytes == 0 ? NULL
                 : j == z->me  ? z->c->src
                 : rcc_registry_peer(reg, p, f->src_slot, f->src_off, in_bytes);
    reg->out[j] = out_bytes == 0 ? NULL
                  : j == z->me   ? z->c->dst
                  : rcc_registry_peer(reg, p, f->dst_slot, f->dst_off,
                                      out_bytes);
    if ((in_bytes > 0 && reg->in[j] == NULL) ||
        (out_bytes > 0 && reg->out[j] == NULL))
      return rcc_comm_error(z->comm, RINGCC_ERR_INTERNAL,
                            "%s on rank %d: rank %d's registered buffer "
                            "(slot %u/%u) is not mapped here",
                            rcc_coll_name(z->c->coll), z->comm->rank, p,
                            f->src_slot, f->dst_slot);
  }
  return RINGCC_SUCCESS;
}

/* Steps 4 and 5. */
static ringcc_result_t finish(struct zc *z) {
  struct rcc_registry *reg = z->reg;
  rcc_store_fence();
  publish(&reg->ctl_own->done, z->seq);
  for (int j = 0; j < z->n; j++) {
    int p = reg->local[j];
    if (j == z->me)
      continue;
    ringcc_result_t r =
        wait_flag(z, p, &reg->ctl[p]->done, "the end of the copies of");
    if (r != RINGCC_SUCCESS)
      return r;
  }
  return RINGCC_SUCCESS;
}

/* ---- several hosts: per host, and a ring between them ------------------------ */

/* The ring over the rail (the ranks with this rank's index on every host),
 * on the FIFOs between them. */
static ringcc_result_t rail_allreduce(struct zc *z, const void *src, void *dst,
                                      size_t count, ringcc_datatype_t dt,
                                      ringcc_op_t op) {
  struct ringcc_comm *comm = z->comm;
  struct rcc_registry *reg = z->reg;
  int next = reg->rail[(reg->rail_pos + 1) % reg->nrail];
  int prev = reg->rail[(reg->rail_pos + reg->nrail - 1) % reg->nrail];
  size_t slot = comm->send_conn[RCC_CONN_COLL][next].slot_bytes;
  size_t in_slot = comm->recv_conn[RCC_CONN_COLL][prev].slot_bytes;
  size_t esize = ringcc_datatype_size(dt);
  struct rcc_plan plan = {.coll = RCC_COLL_ALLREDUCE, .nranks = reg->nrail,
                          .rank = comm->rank, .pos = reg->rail_pos,
                          .ring = reg->rail, .count = count,
                          .chunk_elems = (slot < in_slot ? slot : in_slot) /
                                         esize};
  rcc_plan_ring(&plan);
  ringcc_result_t r = rcc_exec_host(comm, &plan, src, dst, dt, op);
  RCC_PUT(comm->progress.active, 1); /* still in the zero-copy call */
  RCC_PUT(comm->progress.alg, (int)RCC_ALG_HIER);
  return r;
}

static ringcc_result_t run_per_host(struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  char *mine = c->dst;
  size_t off, len, chunk = RCC_ZC_CHUNK / z->esize;
  rcc_zc_block(c->count, z->esize, z->n, z->me, &off, &len);
  for (size_t done = 0; done < len; done += chunk) {
    size_t k = len - done < chunk ? len - done : chunk;
    size_t o = (off + done) * z->esize;
    reduce_chunk(z, z->reg->in, o, k, z->reg->tmp, 0);
    put(z, mine + o, z->reg->tmp, k * z->esize);
  }
  char *block = mine + off * z->esize;
  /* The network engine's thread may send the block straight from here:
   * the non-temporal stores must be visible to it first. */
  rcc_store_fence();
  ringcc_result_t r = rail_allreduce(z, block, block, len, c->dt,
                                     c->op == RINGCC_AVG ? RINGCC_SUM : c->op);
  if (r != RINGCC_SUCCESS)
    return r;
  if (c->op == RINGCC_AVG && len > 0)
    rcc_reduce_avg_finish(c->dt, block, block, len, z->comm->nranks);
  for (int j = 1; j < z->n; j++) {
    int q = rcc_zc_peer(z->me, j, z->n);
    put(z, z->reg->out[q] + off * z->esize, block, len * z->esize);
  }
  return RINGCC_SUCCESS;
}

/* ---- the call ------------------------------------------------------------------------- */

/* Output staging and input copies some in-place forms need (step 3). */
static ringcc_result_t prepare(struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  struct rcc_registry *reg = z->reg;
  size_t b = c->count * z->esize, need = 0;
  const char *in = c->src, *out = c->dst;
  if (c->device)
    return RINGCC_SUCCESS; /* device_usable: no staging */
  if (output_over_inputs(z))
    need = b; /* an output over inputs peers read (MPI's in-place form) */
  if (c->coll == RCC_COLL_ALLTOALL && in == out)
    need = b * (size_t)z->n; /* peers write where this rank reads */
  if (need == 0)
    return RINGCC_SUCCESS;
  if (need > reg->stage_bytes) {
    void *p = realloc(reg->stage, need);
    if (p == NULL)
      return rcc_comm_error(z->comm, RINGCC_ERR_OUT_OF_MEMORY,
                            "%s on rank %d: no memory for %zu bytes of "
                            "staging", rcc_coll_name(c->coll), z->comm->rank,
                            need);
    reg->stage = p;
    reg->stage_bytes = need;
  }
  if (c->coll == RCC_COLL_ALLTOALL) {
    memcpy(reg->stage, in, need);
    z->mine = reg->stage;
  } else {
    z->staged = reg->stage;
  }
  return RINGCC_SUCCESS;
}

static void compute(struct zc *z) {
  switch (z->c->coll) {
  case RCC_COLL_ALLREDUCE:
    zc_allreduce(z);
    break;
  case RCC_COLL_REDUCE_SCATTER:
    zc_reduce_scatter(z);
    break;
  case RCC_COLL_ALLGATHER:
    zc_allgather(z);
    break;
  case RCC_COLL_BCAST:
    zc_bcast(z);
    break;
  case RCC_COLL_REDUCE:
    zc_reduce(z);
    break;
  default:
    zc_alltoall(z);
    break;
  }
}

/* The agreement across hosts: every host's ranks all registered (1), some
 * rank's buffers not (0), or ranks of a host that disagree about the call
 * (-1: they fail, and so must every other host's). */
static ringcc_result_t agree_hosts(struct zc *z, int *usable) {
  int32_t mine = *usable, all = 0;
  ringcc_result_t r = rail_allreduce(z, &mine, &all, 1, RINGCC_INT32,
                                     RINGCC_MIN);
  *usable = all;
  if (r == RINGCC_SUCCESS && all < 0 && mine >= 0)
    r = rcc_comm_error(z->comm, RINGCC_ERR_INVALID_USAGE,
                       "%s (seq %llu) on rank %d: ranks of another host make "
                       "another call than this one (do all ranks call the "
                       "same collective with the same arguments?)",
                       rcc_coll_name(z->c->coll),
                       (unsigned long long)z->comm->seq, z->comm->rank);
  return r;
}

/* A device call, once every rank has arrived: the zero-copy kernel's
 * arguments, on the buffers gather_arrivals found, for the caller to
 * enqueue on the call's stream; the kernels take steps 4-5 over
 * (exec_zc_cuda.cu). One-shot or two-phase is
 * decided alike on every rank: from the count, and whether any rank's call
 * is in place (one-shot reads every peer's input while that peer writes
 * its output). */
static void run_device(struct zc *z) {
  const struct rcc_zc_call *c = z->c;
  struct rcc_registry *reg = z->reg;
  struct rcc_zc_dev_args *l = z->launch;
  memset(l, 0, sizeof(*l));
  l->n = z->n;
  l->me = z->me;
  l->coll = c->coll;
  l->dt = c->dt;
  l->op = c->op;
  l->count = c->count;
  l->one_shot = c->coll == RCC_COLL_ALLREDUCE && !z->in_place &&
                c->count * z->esize <= RCC_ZC_DEV_ONESHOT_MAX;
  for (int j = 0; j < z->n; j++) {
    l->local[j] = reg->local[j];
    l->in[j] = reg->in[j];
    l->out[j] = reg->out[j];
    l->flags[j] = rcc_registry_dev_flags(reg, reg->local[j]);
  }
  l->in[z->me] = c->src; /* exposed() leaves out what only this rank uses */
  l->out[z->me] = c->dst;
}

static ringcc_result_t run(struct zc *z, int per_host, int *ran) {
  struct rcc_registry *reg = z->reg;
  int usable;
  ringcc_result_t r = prepare(z);
  if (r != RINGCC_SUCCESS)
    return r;
  RCC_PUT(z->comm->progress.step, 0);
  arrive(z, &reg->ctl_own->arrive[z->seq & 1]);
  r = gather_arrivals(z, &usable);
  if (per_host && z->mismatch) {
    usable = -1; /* the other hosts learn it from the agreement */
    agree_hosts(z, &usable);
    return r;
  }
  if (r != RINGCC_SUCCESS)
    return r;
  if (per_host && (r = agree_hosts(z, &usable)) != RINGCC_SUCCESS)
    return r;
  if (usable <= 0)
    return RINGCC_SUCCESS; /* every rank leaves here alike */
  *ran = 1;
  reg->ran++;
  RCC_PUT(z->comm->progress.step, 1);
  if (z->c->device) {
    run_device(z);
    return RINGCC_SUCCESS;
  }
  if (per_host)
    r = run_per_host(z);
  else
    compute(z);
  if (r != RINGCC_SUCCESS)
    return r;
  RCC_PUT(z->comm->progress.step, 2);
  if ((r = finish(z)) != RINGCC_SUCCESS)
    return r;
  if (z->staged != NULL)
    memcpy(z->c->dst, z->staged, z->c->count * z->esize);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_exec_zc(struct ringcc_comm *comm,
                            const struct rcc_zc_call *call, int *ran,
                            struct rcc_zc_dev_args *launch) {
  struct rcc_registry *reg = comm->registry;
  int per_host = rcc_registry_kind(comm) == RCC_ZC_PER_HOST;
  struct zc z = {
      .comm = comm,
      .reg = reg,
      .c = call,
      .plan = {.coll = call->coll, .nranks = comm->nranks, .rank = comm->rank,
               .nsteps = 3},
      .esize = ringcc_datatype_size(call->dt),
      .reduce = rcc_reduce_get(call->dt, call->op),
      .seq = ++reg->seq,
      .n = reg->nlocal,
      .me = reg->me_local,
      .root = -1,
      .launch = launch,
  };
  *ran = 0;
  if (call->device && (launch == NULL || per_host))
    return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                          "%s on rank %d: a device zero-copy call %s",
                          rcc_coll_name(call->coll), comm->rank,
                          per_host ? "across hosts" : "without its launch");
  for (int j = 0; j < reg->nlocal && call->root >= 0; j++)
    if (reg->local[j] == call->root)
      z.root = j;
  z.nt = footprint(&z) * (size_t)z.n >= RCC_NT_MIN_FOOTPRINT;

  struct rcc_progress *at = &comm->progress;
  RCC_PUT(at->coll, call->coll);
  RCC_PUT(at->alg, per_host      ? (int)RCC_ALG_HIER
                   : call->device ? (int)RCC_ALG_ZEROCOPY_DEV
                                  : (int)RCC_ALG_ZEROCOPY);
  RCC_PUT(at->nsteps, (uint64_t)3);
  RCC_PUT(at->block, z.me);
  RCC_PUT(at->nelem, call->count);
  RCC_PUT(at->kind, (int)RCC_STEP_NONE);
  RCC_PUT(at->peer, -1);
  RCC_PUT(at->active, 1);
  ringcc_result_t r = run(&z, per_host, ran);
  RCC_PUT(at->board_seq, NULL);
  RCC_PUT(at->active, 0);
  return r;
}
