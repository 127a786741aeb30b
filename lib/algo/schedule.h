/*
 * schedule.h - a collective as a schedule of primitive steps.
 *
 * A schedule file (ring.c, pairwise.c, ...; the list RCC_SCHEDULES below)
 * turns one call into a plan: a small struct from which step i is computed
 * on demand by rcc_plan_step(). Nothing is materialised per call, so the
 * same pure functions can run in a CUDA kernel, in the host executor, and
 * in ringcc-model --explain.
 *
 * Each step moves at most chunk_elems elements (one FIFO slot) and names the
 * peers it receives from and sends to. Offsets are in elements, relative to
 * the call's source buffer (src) and destination buffer (dst).
 */
#ifndef RCC_SCHEDULE_H
#define RCC_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "connkind.h"

#ifndef RCC_HD
#define RCC_HD
#endif

/* The collectives, one line each: X(ID, "name") gives enum rcc_coll's
 * RCC_COLL_ID and the name the logs print (names.c). */
#define RCC_COLLS(X)                                                          \
  X(ALLREDUCE, "allreduce")                                                   \
  X(REDUCE_SCATTER, "reduce_scatter")                                         \
  X(ALLGATHER, "allgather")                                                   \
  X(BCAST, "bcast")                                                           \
  X(REDUCE, "reduce")                                                         \
  X(ALLTOALL, "alltoall")                                                     \
  X(SEND, "send")                                                             \
  X(RECV, "recv")                                                             \
  X(BARRIER, "barrier")                                                       \
  X(GATHER, "gather")                                                         \
  X(SCATTER, "scatter")                                                       \
  X(ALLGATHERV, "allgatherv")                                                 \
  X(ALLTOALLV, "alltoallv")

enum rcc_coll {
#define RCC_COLL_ENUM(id, name) RCC_COLL_##id,
  RCC_COLLS(RCC_COLL_ENUM)
#undef RCC_COLL_ENUM
  RCC_NUM_COLLS
};

/* The schedules, one line each: X(ID, file) is lib/algo/<file>.c, which
 * defines rcc_plan_<file>() (fills a plan: nsteps, its own state) and
 * rcc_<file>_step() (step i of such a plan). From this list come enum
 * rcc_sched, the two switches below (rcc_plan_build, rcc_plan_step) and the
 * device copies the CUDA executor compiles (exec_cuda.cu): a schedule is its
 * file and its line here. When the tuner may choose it, and what it costs,
 * is its entry in the table of algorithms (algorithms.c). */
#define RCC_SCHEDULES(X)                                                      \
  X(RING, ring)               /* ring RS/AG/AR; the chains (bcast, reduce) */ \
  X(PAIRWISE, pairwise)       /* alltoall, send/recv, barrier, one rank */    \
  X(ONESHOT, oneshot)         /* one-shot allreduce */                        \
  X(TREE, tree)               /* double binary tree allreduce */              \
  X(RECDOUBLING, recdoubling) /* recursive-doubling allreduce */              \
  X(RABENSEIFNER, rabenseifner) /* halving, then doubling, allreduce */ \
  X(DIRECT, direct)           /* gather, scatter to/from the root; alltoallv */ \
  X(BINOMIAL, binomial)       /* gather, scatter: binomial trees */

enum rcc_sched {
  RCC_SCHED_NONE = -1, /* not a FIFO schedule (cma, zero-copy: own executors) */
#define RCC_SCHED_ENUM(id, file) RCC_SCHED_##id,
  RCC_SCHEDULES(RCC_SCHED_ENUM)
#undef RCC_SCHED_ENUM
  RCC_NUM_SCHEDS
};

/* The algorithms: the tuner's candidates, each a schedule (or none) run by
 * an executor (algorithms.h: struct rcc_algorithm's sched and exec; the
 * table, their names and costs: algorithms.c). A plan carries the one that
 * made it, which names it in the trace and the hang report. */
enum rcc_alg {
  RCC_ALG_LOCAL,         /* one rank: dst <- src (pairwise.c) */
  RCC_ALG_RING,          /* ring allreduce, reduce-scatter, allgather */
  RCC_ALG_CHAIN,         /* bcast, reduce pipelined along the ring */
  RCC_ALG_PAIRWISE,      /* alltoall: pairwise exchange */
  RCC_ALG_P2P,           /* send/recv on a pair's own FIFO */
  RCC_ALG_DISSEMINATION, /* barrier */
  RCC_ALG_ONESHOT,       /* one-shot allreduce over the FIFOs */
  RCC_ALG_BOARD,         /* the one-shot schedule on the shared board */
  RCC_ALG_TREE,          /* double binary tree allreduce */
  RCC_ALG_RECDOUBLING,   /* recursive-doubling allreduce */
  RCC_ALG_RABENSEIFNER,  /* recursive halving, then doubling */
  RCC_ALG_CMA,           /* cross-memory attach, one host, large messages */
  RCC_ALG_ZEROCOPY,      /* registered buffers in place, one host (exec_zc.c) */
  RCC_ALG_HIER,          /* registered buffers: zero-copy per host, a ring
                            between hosts (exec_zc.c) */
  RCC_ALG_DIRECT,        /* gather, scatter: every rank to/from the root */
  RCC_ALG_BINOMIAL,      /* gather, scatter: binomial tree (binomial.c) */
  RCC_ALG_PAIRWISE_V,    /* alltoallv: pairwise exchange of uneven blocks
                            (direct.c) */
  RCC_ALG_ZEROCOPY_DEV,  /* registered device memory in place, one host
                            (exec_zc.c, exec_zc_cuda.cu) */
  RCC_NUM_ALGS
};

enum rcc_step_kind {
  RCC_STEP_NONE,
  RCC_STEP_SEND,                  /* out <- src */
  RCC_STEP_RECV,                  /* dst <- in */
  RCC_STEP_COPY,                  /* dst <- src (local) */
  RCC_STEP_COPY_SEND,             /* dst <- src; out <- src */
  RCC_STEP_RECV_COPY_SEND,        /* dst <- in; out <- in */
  RCC_STEP_RECV_REDUCE_SEND,      /* out <- in op src */
  RCC_STEP_RECV_REDUCE_COPY,      /* dst <- in op src (or as acc says) */
  RCC_STEP_RECV_REDUCE_COPY_SEND, /* dst <- in op src; out <- dst */
  RCC_STEP_SEND_RECV,             /* out <- src to one peer; dst <- in from another */
  RCC_STEP_REDUCE_LOCAL,          /* dst <- dst op src (local) */
  RCC_NUM_STEP_KINDS
};

/* Which FIFO of a peer pair a step uses: enum rcc_conn_kind (connkind.h). */

struct rcc_step {
  uint8_t kind;       /* enum rcc_step_kind */
  uint8_t postop;     /* apply the AVG division when writing dst */
  uint8_t conn_kind;  /* enum rcc_conn_kind */
  uint8_t last;       /* last piece of a p2p message (meta tag) */
  uint8_t acc;        /* enum rcc_acc: which user buffer a step reads
                         besides the incoming slot, and on which side */
  int send_peer;      /* rank, or -1 */
  int recv_peer;      /* rank, or -1 */
  int block;          /* the data block (rank index) this step works on */
  size_t src_off;     /* elements */
  size_t dst_off;     /* elements */
  size_t nelem;
};

/* The operand order of a step's reduction, and what a plain send sends.
 * Every rank of a pair evaluates the same expression with the same left
 * operand, which is what makes all ranks' results bitwise equal. */
enum rcc_acc {
  RCC_ACC_IN_SRC = 0, /* in op src; a send sends src (the input) */
  RCC_ACC_DST_IN = 1, /* dst op in: dst holds the partial built so far;
                         a send sends dst */
  RCC_ACC_IN_DST = 2, /* in op dst; a send sends dst */
  RCC_ACC_SRC_IN = 3, /* src op in (recvReduceCopy: the input is the left
                         operand of a rank's first combine) */
};

/* Whether a step kind receives a slot, and whether it sends one (a
 * sendRecv does both, in two halves: neither counts it). */
RCC_HD static inline int rcc_step_receives(int kind) {
  return kind == RCC_STEP_RECV || kind == RCC_STEP_RECV_COPY_SEND ||
         kind == RCC_STEP_RECV_REDUCE_SEND ||
         kind == RCC_STEP_RECV_REDUCE_COPY ||
         kind == RCC_STEP_RECV_REDUCE_COPY_SEND;
}
RCC_HD static inline int rcc_step_sends(int kind) {
  return kind == RCC_STEP_SEND || kind == RCC_STEP_COPY_SEND ||
         kind == RCC_STEP_RECV_COPY_SEND || kind == RCC_STEP_RECV_REDUCE_SEND ||
         kind == RCC_STEP_RECV_REDUCE_COPY_SEND;
}

/* Channels of a call (and of a kind's FIFOs), at most. */
#define RCC_MAX_CHANNELS 32

/* What one schedule keeps in its plan besides the common fields (a union:
 * a plan carries only its own schedule's). */
struct rcc_chain_plan {
  int root_pos;       /* the root's position in ring[] */
};
struct rcc_tree_plan { /* the double binary tree (tree.c) */
  int up[2];          /* parent rank per tree, or -1 */
  int down[2][2];     /* children ranks per tree, present ones first */
  uint32_t up_steps[2];
  uint32_t down_steps[2];
};

struct rcc_plan {
  int alg;            /* enum rcc_alg: the algorithm it runs for (names it) */
  int sched;          /* enum rcc_sched: the schedule that plans and steps it */
  int coll;           /* enum rcc_coll */
  int nranks;
  int rank;
  int pos;            /* this rank's position in ring[] */
  const int *ring;    /* ring[pos] = rank; nranks entries */
  /* Channels. A call's data is split over nchannels copies of its schedule,
   * each on FIFOs of its own (rcc_plan_channel). In a channel's plan, count
   * is the channel's share of each block (of the whole buffer where the
   * collective has no blocks), base where that share starts in a block and
   * stride the elements from one block to the next (the call's count); the
   * schedule computes offsets as if its share were the whole call, and
   * rcc_plan_step moves them to where the share is. Odd channels run the
   * ring the other way round (ring_rev), so both directions of every ring
   * edge carry data. */
  int channel;
  int nchannels;      /* >= 1 */
  size_t granule;     /* a channel's share is a multiple of this many
                         elements (but the last): vector-aligned offsets */
  size_t base;
  size_t stride;
  const int *ring_rev; /* the ring the other way round; NULL: as ring */
  int pos_rev;
  size_t count;       /* see each schedule */
  /* Uneven blocks (allgatherv, reduce_scatterv shapes): block b of the
   * blocked buffer holds counts[b] elements starting at element displs[b];
   * a channel moves its share of each (rcc_plan_block). NULL: every block
   * holds count elements, block b at b * count. Host plans only; the
   * ring's Reduce-Scatter and AllGather take them, and AllToAllv
   * (direct.c) as its send side: counts[p] elements from displs[p] of src
   * go to rank p. */
  const size_t *counts;
  const size_t *displs;
  /* AllToAllv's receive side: recv_counts[p] elements from rank p land at
   * recv_displs[p] of dst. NULL elsewhere. */
  const size_t *recv_counts;
  const size_t *recv_displs;
  size_t chunk_elems; /* elements per step (one chunk: at most one FIFO
                         slot), >= 1 */
  int root;           /* bcast/reduce root, p2p peer */
  int postop;         /* 1 for RINGCC_AVG */
  uint64_t nsteps;
  uint64_t steps_per_loop;
  union {             /* the schedule's own (see each) */
    struct rcc_chain_plan chain;
    struct rcc_tree_plan tree;
  } state;
};

/* A step of one whole-message block on the collective FIFOs, no peers yet:
 * where one-shot, recursive doubling and the pairwise schedules start each
 * step. */
RCC_HD static inline void rcc_step_whole(const struct rcc_plan *p,
                                         struct rcc_step *s) {
  s->postop = 0;
  s->conn_kind = RCC_CONN_COLL;
  s->last = 0;
  s->acc = RCC_ACC_IN_SRC;
  s->send_peer = s->recv_peer = -1;
  s->src_off = s->dst_off = 0;
  s->nelem = p->count;
  s->block = p->rank;
}

/* The largest power of two <= n (n >= 1), and log2 of a power of two: the
 * exchange partners of recursive doubling and halving. */
RCC_HD static inline int rcc_pow2_floor(int n) {
  int p = 1;
  while (p <= n / 2)
    p *= 2;
  return p;
}
RCC_HD static inline int rcc_log2_of(int p) {
  int l = 0;
  while ((1 << l) < p)
    l++;
  return l;
}

/* Binomial trees (binomial.c): how many ranks the subtree of the rank at
 * relative position v (0: the root) holds, v itself included. */
RCC_HD static inline int rcc_binomial_span(int n, int v) {
  int low = v & -v;
  return v == 0 ? n : (low < n - v ? low : n - v);
}

RCC_HD static inline size_t rcc_min_sz(size_t a, size_t b) {
  return a < b ? a : b;
}
RCC_HD static inline uint64_t rcc_div_up(size_t a, size_t b) {
  return (a + b - 1) / b;
}
/* v mod n in [0, n): ring positions */
RCC_HD static inline int rcc_mod_n(long v, int n) {
  long m = v % n;
  return (int)(m < 0 ? m + n : m);
}

/* Declared for each file of the list; each plan function sets sched, alg
 * (which of its algorithms: the ring file plans the chains too, the
 * pairwise file the local copy, point-to-point and the barrier) and nsteps.
 * Pure: they run on the host and, for each channel of a device collective,
 * in the kernel. */
#define RCC_SCHED_DECLARE(id, file)                                           \
  RCC_HD void rcc_plan_##file(struct rcc_plan *p);                            \
  RCC_HD void rcc_##file##_step(const struct rcc_plan *p, uint64_t i,         \
                                struct rcc_step *s);
RCC_SCHEDULES(RCC_SCHED_DECLARE)
#undef RCC_SCHED_DECLARE

/* Plans p (a call's plan, or a channel's) with its schedule (p->sched). */
RCC_HD static inline void rcc_plan_build(struct rcc_plan *p) {
  switch (p->sched) {
#define RCC_SCHED_PLAN(id, file)                                              \
  case RCC_SCHED_##id:                                                        \
    rcc_plan_##file(p);                                                       \
    break;
    RCC_SCHEDULES(RCC_SCHED_PLAN)
#undef RCC_SCHED_PLAN
  default: /* RCC_SCHED_NONE: no steps */
    p->nsteps = 0;
    break;
  }
}

/* The granule of a call's plan for elements of esize bytes: shares and
 * ring chunks start on 64-byte boundaries of the buffers (vector loads on
 * the device, whole cache lines on the host). */
RCC_HD static inline size_t rcc_plan_granule(size_t esize) {
  return esize < 64 ? 64 / esize : 1;
}

/* Channel c's share of n elements over nch channels, in granules of g:
 * [*off, *off + *len). Shares differ by at most one granule; a channel may
 * get none. */
RCC_HD static inline void rcc_channel_share(size_t n, int c, int nch,
                                            size_t g, size_t *off,
                                            size_t *len) {
  size_t units = (n + g - 1) / g, per = units / (size_t)nch;
  size_t extra = units % (size_t)nch, uc = (size_t)c;
  size_t first = uc * per + (uc < extra ? uc : extra);
  size_t end = first + per + (uc < extra);
  *off = first * g < n ? first * g : n;
  *len = (end * g < n ? end * g : n) - *off;
}

/* Channel c of call plan `call` (whose count is the call's): its share and
 * its ring direction; its schedule is planned next (rcc_plan_build). An
 * uneven plan (counts) keeps count: its schedule takes each block's share
 * itself (rcc_plan_block). */
RCC_HD static inline void rcc_plan_channel(const struct rcc_plan *call, int c,
                                           struct rcc_plan *p) {
  *p = *call;
  p->channel = c;
  p->nchannels = call->nchannels > 1 ? call->nchannels : 1;
  p->stride = call->count;
  if (call->counts == NULL)
    rcc_channel_share(call->count, c, p->nchannels,
                      call->granule > 0 ? call->granule : 1, &p->base,
                      &p->count);
  else
    p->base = 0;
  if ((c & 1) && call->ring_rev != NULL) {
    p->ring = call->ring_rev;
    p->pos = call->pos_rev;
  }
}

/* Block b of a plan as its channel moves it: *in, where the channel's share
 * starts inside the block, and *len, its elements; returns where the share
 * starts in the blocked buffer. Even blocks: the share's own coordinates
 * (in 0, len count, block b at b * count), which rcc_plan_step then moves
 * to the call's buffer; uneven blocks (counts): the call buffer's own
 * (displs[b] + *in), which it leaves as they are. */
RCC_HD static inline size_t rcc_plan_block(const struct rcc_plan *p, int b,
                                           size_t *in, size_t *len) {
  if (p->counts == NULL) {
    *in = 0;
    *len = p->count;
    return (size_t)b * p->count;
  }
  rcc_channel_share(p->counts[b], p->channel,
                    p->nchannels > 1 ? p->nchannels : 1,
                    p->granule > 0 ? p->granule : 1, in, len);
  return p->displs[b] + *in;
}

/* Where offset o of a channel's share lies in the call's buffer: blocks of
 * the share's count become blocks of stride, starting at base. */
RCC_HD static inline size_t rcc_channel_offset(const struct rcc_plan *p,
                                               size_t o, int blocked) {
  if (!blocked || p->count == 0)
    return p->base + o;
  return o / p->count * p->stride + p->base + o % p->count;
}

/* Step i of any plan. */
RCC_HD static inline void rcc_plan_step(const struct rcc_plan *p, uint64_t i,
                                        struct rcc_step *s) {
  switch (p->sched) {
#define RCC_SCHED_STEP(id, file)                                              \
  case RCC_SCHED_##id:                                                        \
    rcc_##file##_step(p, i, s);                                               \
    break;
    RCC_SCHEDULES(RCC_SCHED_STEP)
#undef RCC_SCHED_STEP
  default: /* RCC_SCHED_NONE has no steps */
    s->kind = RCC_STEP_NONE;
    s->nelem = 0;
    return;
  }
  /* the share's offsets in the call's buffers (uneven plans' schedules
   * give those themselves) */
  if (p->nchannels > 1 && p->counts == NULL) {
    int all = p->coll == RCC_COLL_ALLTOALL;
    s->src_off = rcc_channel_offset(
        p, s->src_off, all || p->coll == RCC_COLL_REDUCE_SCATTER);
    s->dst_off = rcc_channel_offset(p, s->dst_off,
                                    all || p->coll == RCC_COLL_ALLGATHER);
  }
}

/* names.c */
const char *rcc_coll_name(int coll);
const char *rcc_step_kind_name(int kind);

/* One step of one call, as the hang report and the trace name it. */
struct rcc_step_label {
  int coll;              /* enum rcc_coll */
  unsigned long long seq; /* the call's sequence number on its communicator */
  int alg;               /* enum rcc_alg */
  int channel;
  uint64_t step, nsteps;
  int kind;              /* enum rcc_step_kind */
  int block;
  size_t nelem;
};
/* "allreduce seq 17, ring, channel 0, step 35 of 63: recvReduceSend block
 * 1, 16384 elements": the one way the hang report (report.c) and the trace
 * (trace.c) name a step. Returns what snprintf returns. */
int rcc_step_describe(char *buf, size_t len, const struct rcc_step_label *s);

#endif /* RCC_SCHEDULE_H */
