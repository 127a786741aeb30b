/*
 * algorithms.c - the table of algorithms (algorithms.h): one entry per way
 * of running a collective, and the rules for when each can run.
 *
 * The order matters in one place: where two candidates predict the same
 * time, the earlier one wins (the ring before the others).
 */
#include <string.h>

#include "algorithms.h"
#include "proto.h"

#define REDUCING (RCC_COLL_BIT(RCC_COLL_ALLREDUCE))

/* ---- when each can run ----------------------------------------------------- */

static const char *needs_one_rank(const struct rcc_alg_context *c) {
  return c->nranks == 1 ? NULL : "more than one rank";
}

static const char *needs_ranks(const struct rcc_alg_context *c) {
  return c->nranks >= 2 ? NULL : "needs 2 ranks";
}

/* Sends the whole message in one step: one FIFO slot at most. */
static const char *one_slot(const struct rcc_alg_context *c) {
  if (c->nranks < 2 || c->bytes <= 0)
    return "needs 2 ranks and a non-empty message";
  if (c->bytes > c->all_chunk_bytes)
    return "larger than one FIFO slot";
  return NULL;
}

static const char *board_why_not(const struct rcc_alg_context *c) {
  if (c->device)
    return "host buffers only";
  if (c->board_bytes <= 0)
    return "no board (ranks on several hosts, or an edge that is not plain "
           "shared memory)";
  if (c->nranks < 2 || c->bytes <= 0)
    return "needs 2 ranks and a non-empty message";
  if (c->bytes > c->board_bytes)
    return "larger than a board region";
  return NULL;
}

/* Over shared memory the ring's fused step moves each byte once where this
 * copies a piece into a slot and reduces it out, which the model does not
 * see; over the network the model decides (docs/algorithms.md has both
 * side by side). */
static const char *rabenseifner_why_not(const struct rcc_alg_context *c) {
  if (c->nranks < 2)
    return "needs 2 ranks";
  if (!c->network_only && c->forced != RINGCC_ALGO_RABENSEIFNER)
    return "network links only (RINGCC_ALGO=rabenseifner forces it)";
  return NULL;
}

/* Below this a direct path's three handshakes cost more than the copies it
 * saves. */
#define CMA_MIN_BYTES (256 << 10)

/* Gather and Scatter: from this block size per rank the tuner may pick it
 * (measured: docs/tuning.md); forced, any non-empty block. */
#define CMA_ROOTED_MIN_BLOCK (64 << 10)

static const char *cma_rooted_why_not(const struct rcc_alg_context *c) {
  if (c->nranks < 2 || c->bytes <= 0)
    return "needs 2 ranks and a non-empty message";
  if (c->forced == RINGCC_ALGO_DIRECT)
    return "RINGCC_ALGO=direct runs the FIFO schedule (cma forces this)";
  if (c->forced != RINGCC_ALGO_CMA && c->bytes / c->nranks < CMA_ROOTED_MIN_BLOCK)
    return "blocks from 64 KiB (RINGCC_ALGO=cma: any)";
  return NULL;
}

/* AllToAllv read in place (exec_a2av.c), by cross-memory attach or from
 * registered memory: wherever it runs, by default. Whether it runs must not
 * depend on the size (ranks send different sums, yet must all choose
 * alike): its terms never exceed the pairwise exchange's, and each block
 * picks its own way (small ones with the places). Any other RINGCC_ALGO
 * forces the pairwise exchange. */
static const char *a2av_why_not(const struct rcc_alg_context *c, int setting) {
  if (c->forced != RINGCC_ALGO_AUTO && c->forced != setting)
    return "RINGCC_ALGO forces another algorithm (the pairwise exchange)";
  return NULL;
}

/* Chosen only when forced, but for Gather, Scatter and AllToAllv: here it has not yet been
 * measured faster than the ring (docs/performance.md). */
static const char *cma_why_not(const struct rcc_alg_context *c) {
  if (c->device)
    return "host buffers only";
  if (!c->cma)
    return "cross-memory attach does not work between every pair of ranks "
           "(one host, one pid namespace, ptrace allowed)";
  if (c->coll == RCC_COLL_GATHER || c->coll == RCC_COLL_SCATTER)
    return cma_rooted_why_not(c);
  if (c->coll == RCC_COLL_ALLTOALLV) {
    if (c->registered == 1 && c->forced == RINGCC_ALGO_AUTO)
      return "registered memory: zero-copy reads it";
    return a2av_why_not(c, RINGCC_ALGO_CMA);
  }
  if (c->bytes < CMA_MIN_BYTES)
    return "messages from 256 KiB";
  if (c->forced != RINGCC_ALGO_CMA && c->forced != RINGCC_ALGO_DIRECT)
    return "only when forced (RINGCC_ALGO=cma)";
  return NULL;
}

/* Binomial trees keep a subtree in host scratch: host buffers only (the
 * direct schedule runs device calls). */
static const char *binomial_why_not(const struct rcc_alg_context *c) {
  if (c->device)
    return "host buffers only";
  return NULL;
}

/* Registered buffers (ringcc_comm_register) read and written in place. */
static const char *zc_why_not(const struct rcc_alg_context *c) {
  if (c->device)
    return "host buffers only";
  if (c->registered != 1)
    return "registered buffers, every rank on one host (ringcc_comm_register)";
  if (c->coll == RCC_COLL_ALLTOALLV)
    return c->nranks < 2 ? "needs 2 ranks"
                         : a2av_why_not(c, RINGCC_ALGO_ZEROCOPY);
  if (c->nranks < 2 || c->bytes <= 0)
    return "needs 2 ranks and a non-empty message";
  return NULL;
}

/* Registered device memory read and written in place by the zero-copy
 * kernel (exec_zc_cuda.cu). */
static const char *zc_dev_why_not(const struct rcc_alg_context *c) {
  if (!c->device)
    return "device buffers only";
  if (c->registered != 1)
    return "registered device memory (ringcc_mem_alloc on a device, "
           "ringcc_comm_register), every rank on one host";
  if (c->nranks < 2 || c->nranks > RCC_ZC_DEV_MAX || c->bytes <= 0)
    return "2 to 8 ranks and a non-empty message";
  return NULL;
}

static const char *hier_why_not(const struct rcc_alg_context *c) {
  if (c->device)
    return "host buffers only";
  if (c->registered != 2)
    return "registered buffers on several hosts with the same number (>= 2) "
           "of ranks each";
  if (c->bytes <= 0)
    return "needs a non-empty message";
  return NULL;
}

/* ---- zero-copy: its cost (its executor is exec_zc.c) ---------------------- */

/* Two exchanges of one cache line with every peer (the arrival, the end),
 * each priced as the one-shot board's exchange, (n-1)/2 alphas. Its bytes in
 * the units of the schedule it replaces: beta is the time per byte that
 * schedule sends over shared memory, and sending a byte through a FIFO
 * costs that schedule several bytes of memory traffic (a slot written, read,
 * the input read, the output written): (6n-4)/(2n-2) for the ring
 * AllReduce (5 S of traffic for the 1.5 S it sends at n = 4),
 * (3n-1)/(n-1) for the ring Reduce-Scatter and AllGather, 3 for the chains,
 * (4n-2)/(n-1) for the pairwise AllToAll. Zero-copy reads and writes M bytes
 * per rank: AllReduce S and S (the floor); Reduce-Scatter and Reduce S and
 * S/n; AllGather S/n and S; Broadcast S/n and (n-1)/n S; AllToAll S and S;
 * it counts M over that factor. */
void rcc_zc_terms(int coll, int n, double S, double C,
                  struct rcc_cost_terms *t) {
  double f = n > 1 ? (n - 1.0) / n : 0, in_n = n > 0 ? S / n : 0;
  double moved = 2 * S, reduced = 0, per_sent = 3;
  (void)C;
  if (n < 2) {
    rcc_set_terms(t, 0, 0, 0, 0);
    return;
  }
  switch (coll) {
  case RCC_COLL_ALLREDUCE:
    reduced = f * S;
    per_sent = (6.0 * n - 4) / (2.0 * n - 2);
    break;
  case RCC_COLL_REDUCE_SCATTER:
    moved = S + in_n;
    reduced = f * S;
    per_sent = (3.0 * n - 1) / (n - 1.0);
    break;
  case RCC_COLL_ALLGATHER:
    moved = S + in_n;
    per_sent = (3.0 * n - 1) / (n - 1.0);
    break;
  case RCC_COLL_REDUCE:
    moved = S + in_n;
    reduced = f * S;
    break;
  case RCC_COLL_BCAST:
    moved = S;
    break;
  case RCC_COLL_ALLTOALLV:
    rcc_a2av_terms(coll, n, S, C, t);
    return;
  default: /* alltoall */
    per_sent = (4.0 * n - 2) / (n - 1.0);
    break;
  }
  rcc_set_terms(t, n - 1, moved / per_sent, reduced, f * S);
}

/* The zero-copy kernel on registered device memory. Its P2P term: every
 * rank loads its block of each peer's input and stores the result into each
 * peer's output through the peer mappings (the same bytes cross between
 * GPUs as the ring's slots carry), with no FIFO slot written and read on
 * either side; so its bytes are memory traffic, priced as above in the
 * units of the ring it replaces (2 S for an AllReduce against the ring's
 * (6n-4)/n S). Its latency: two handshakes (arrival, end) with every peer,
 * the peers' counters polled at once by the kernel: 2 alphas. */
void rcc_zc_dev_terms(int coll, int n, double S, double C,
                      struct rcc_cost_terms *t) {
  rcc_zc_terms(coll, n, S, C, t);
  if (n >= 2)
    t->alpha_count = 2;
}

/* Several hosts, AllReduce: per host as above, then a ring over the network
 * between the ranks of one index on every host, on their 1/L of the data,
 * after a 4-byte agreement over the same ring. Priced as if every host had
 * 2 ranks (H = n/2 hosts), the most a rank's ring then carries: with L
 * ranks a host each rank's ring moves 2(H-1)/H * S/L. */
void rcc_hier_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t) {
  double h = n / 2.0, ring = h > 1 ? 2 * (h - 1) / h * S / 2 : 0;
  (void)C, (void)coll;
  rcc_set_terms(t, 4 * (h - 1) + 1, ring, S / 2 + ring / 2, ring);
}

/* ---- AllToAllv read in place: its cost (its executor is exec_a2av.c) ------ */

/* The pairwise exchange's n-1 rounds carry the small blocks and the large
 * blocks' places; each large block is then copied once (read in place)
 * instead of twice (into a slot and out of it): S/2 in the pairwise
 * exchange's units. The acknowledgements of large blocks are not counted:
 * the terms must never exceed the pairwise exchange's (a2av_why_not). */
void rcc_a2av_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t) {
  double f = n > 0 ? (n - 1.0) / n : 0;
  (void)coll, (void)C;
  rcc_set_terms(t, n > 1 ? n - 1 : 0, f * S / 2, 0, f * S);
}

/* ---- cross-memory attach: its cost (its executor is exec_cma.c) ---------- */

/* A call all-gathers its buffers' addresses along the ring (n-1 steps) and
 * runs two dissemination barriers (2 ceil(log2 n)); in between each rank
 * reads, in place, the (n-1)/n of the data it reduces (reduce-scatter) or
 * copies (allgather) from its peers: an allreduce does both. */
/* Gather and Scatter (exec_cma_rooted.c): two direct exchanges of one word
 * at the root (2(n-1) steps); each block copied once where the FIFO
 * schedule copies it twice, so (n-1)/n*S/2 in that schedule's beta. */
void rcc_cma_terms(int coll, int n, double S, double C,
                   struct rcc_cost_terms *t) {
  double f = n > 0 ? (n - 1.0) / n : 0;
  double steps = (n - 1) + 2 * rcc_ceil_log2(n);
  (void)C;
  if (coll == RCC_COLL_GATHER || coll == RCC_COLL_SCATTER)
    rcc_set_terms(t, n > 1 ? 2 * (n - 1) : 0, f * S / 2, 0, f * S);
  else if (coll == RCC_COLL_ALLTOALLV) /* exec_a2av.c */
    rcc_a2av_terms(coll, n, S, C, t);
  else if (coll == RCC_COLL_ALLREDUCE)
    rcc_set_terms(t, steps, 2 * f * S, f * S, 2 * f * S);
  else
    rcc_set_terms(t, steps, f * S, coll == RCC_COLL_REDUCE_SCATTER ? f * S : 0,
                  f * S);
}

/* ---- the table -------------------------------------------------------------- */

const struct rcc_algorithm rcc_algorithms[RCC_NUM_ALGS] = {
    [RCC_ALG_LOCAL] = {
        .id = RCC_ALG_LOCAL, .name = "local copy", .setting = RINGCC_ALGO_AUTO,
        .colls = RCC_ALL_COLLS & ~(RCC_COLL_BIT(RCC_COLL_SEND) |
                               RCC_COLL_BIT(RCC_COLL_RECV)),
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ONE_RANK,
        .sched = RCC_SCHED_PAIRWISE, .terms = rcc_local_terms,
        .why_not = needs_one_rank},
    [RCC_ALG_RING] = {
        .id = RCC_ALG_RING, .name = "ring", .setting = RINGCC_ALGO_RING,
        .colls = REDUCING | RCC_COLL_BIT(RCC_COLL_REDUCE_SCATTER) |
                 RCC_COLL_BIT(RCC_COLL_ALLGATHER),
        .exec = RCC_EXEC_FIFO, .sched = RCC_SCHED_RING,
        .terms = rcc_ring_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "2(n-1)*alpha + 2(n-1)/n*S*beta + "
                                           "(n-1)/n*S*gamma",
                    [RCC_COLL_REDUCE_SCATTER] = "(n-1)*alpha + (n-1)/n*S*beta "
                                                "+ (n-1)/n*S*gamma",
                    [RCC_COLL_ALLGATHER] = "(n-1)*alpha + (n-1)/n*S*beta"},
        .why_not = needs_ranks},
    [RCC_ALG_CHAIN] = {
        .id = RCC_ALG_CHAIN, .name = "chain", .setting = RINGCC_ALGO_AUTO,
        .colls = RCC_COLL_BIT(RCC_COLL_BCAST) | RCC_COLL_BIT(RCC_COLL_REDUCE),
        .exec = RCC_EXEC_FIFO, .sched = RCC_SCHED_RING,
        .terms = rcc_chain_terms,
        .formula = {[RCC_COLL_BCAST] = "(n-2+k)*(alpha + C*beta), "
                                       "k = ceil(S/slot), C = S/k",
                    [RCC_COLL_REDUCE] = "(n-2+k)*(alpha + C*beta + C*gamma), "
                                        "k = ceil(S/slot), C = S/k"},
        .why_not = needs_ranks},
    [RCC_ALG_PAIRWISE] = {
        .id = RCC_ALG_PAIRWISE, .name = "pairwise", .setting = RINGCC_ALGO_AUTO,
        .colls = RCC_COLL_BIT(RCC_COLL_ALLTOALL), .exec = RCC_EXEC_FIFO,
        .flags = RCC_ALG_ALL_EDGES | RCC_ALG_STAGE_IN_PLACE,
        .sched = RCC_SCHED_PAIRWISE, .terms = rcc_pairwise_terms,
        .formula = {[RCC_COLL_ALLTOALL] = "(n-1)*alpha + (n-1)/n*S*beta"},
        .why_not = needs_ranks},
    [RCC_ALG_P2P] = {
        .id = RCC_ALG_P2P, .name = "p2p", .setting = RINGCC_ALGO_AUTO,
        .colls = RCC_COLL_BIT(RCC_COLL_SEND) | RCC_COLL_BIT(RCC_COLL_RECV),
        .exec = RCC_EXEC_FIFO, .sched = RCC_SCHED_PAIRWISE,
        .terms = rcc_p2p_terms,
        .formula = {[RCC_COLL_SEND] = "alpha + S*beta",
                    [RCC_COLL_RECV] = "alpha + S*beta"},
        .why_not = needs_ranks},
    [RCC_ALG_DISSEMINATION] = {
        .id = RCC_ALG_DISSEMINATION, .name = "dissemination",
        .setting = RINGCC_ALGO_AUTO, .colls = RCC_COLL_BIT(RCC_COLL_BARRIER),
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_PAIRWISE, .terms = rcc_dissemination_terms,
        .formula = {[RCC_COLL_BARRIER] = "ceil(log2 n)*alpha"},
        .why_not = needs_ranks},
    [RCC_ALG_ONESHOT] = {
        .id = RCC_ALG_ONESHOT, .name = "one-shot", .setting = RINGCC_ALGO_ONESHOT,
        .colls = REDUCING, .exec = RCC_EXEC_FIFO,
        .flags = RCC_ALG_ALL_EDGES | RCC_ALG_STAGE_IN_PLACE,
        .sched = RCC_SCHED_ONESHOT, .terms = rcc_oneshot_terms,
        .link_terms = rcc_oneshot_link_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "n/2*alpha [tcp: (n-1)] + "
                                           "(n-1)*S*beta + n*S*gamma"},
        .why_not = one_slot},
    [RCC_ALG_BOARD] = {
        .id = RCC_ALG_BOARD, .name = "one-shot board",
        .setting = RINGCC_ALGO_ONESHOT, .colls = REDUCING,
        .exec = RCC_EXEC_BOARD, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_ONESHOT, .terms = rcc_oneshot_terms,
        .link_terms = rcc_board_link_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "(n-1)/2*alpha + (n-1)*S*beta + "
                                           "n*S*gamma"},
        .why_not = board_why_not},
    [RCC_ALG_TREE] = {
        .id = RCC_ALG_TREE, .name = "double binary tree",
        .setting = RINGCC_ALGO_TREE, .colls = REDUCING, .exec = RCC_EXEC_FIFO,
        .flags = RCC_ALG_ALL_EDGES, .sched = RCC_SCHED_TREE,
        .terms = rcc_tree_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "3*ceil(log2 n)*alpha + 2*S*beta "
                                           "+ S*gamma"},
        .why_not = needs_ranks},
    [RCC_ALG_RECDOUBLING] = {
        .id = RCC_ALG_RECDOUBLING, .name = "recursive doubling",
        .setting = RINGCC_ALGO_RECDOUBLING, .colls = REDUCING,
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_RECDOUBLING, .terms = rcc_recdoubling_terms,
        .link_terms = rcc_recdoubling_link_terms,
        .formula = {[RCC_COLL_ALLREDUCE] =
                        "(L+2e)*alpha [shm: (2L+2e)] + (L+2e)*S*beta + "
                        "(L+e)*S*gamma, L = floor(log2 n), e = 1 if n is not "
                        "a power of 2"},
        .why_not = one_slot},
    [RCC_ALG_RABENSEIFNER] = {
        .id = RCC_ALG_RABENSEIFNER, .name = "rabenseifner",
        .setting = RINGCC_ALGO_RABENSEIFNER, .colls = REDUCING,
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_RABENSEIFNER, .terms = rcc_rabenseifner_terms,
        .formula = {[RCC_COLL_ALLREDUCE] =
                        "(2L+2e)*alpha + (2(p-1)/p+2e)*S*beta + "
                        "((p-1)/p+e)*S*gamma, p = 2^L <= n, L = floor(log2 "
                        "n), e = 1 if n is not a power of 2"},
        .why_not = rabenseifner_why_not},
    [RCC_ALG_CMA] = {
        .id = RCC_ALG_CMA, .name = "cross-memory attach",
        .setting = RINGCC_ALGO_CMA,
        .colls = REDUCING | RCC_COLL_BIT(RCC_COLL_REDUCE_SCATTER) |
                 RCC_COLL_BIT(RCC_COLL_ALLGATHER) |
                 RCC_COLL_BIT(RCC_COLL_GATHER) | RCC_COLL_BIT(RCC_COLL_SCATTER) |
                 RCC_COLL_BIT(RCC_COLL_ALLTOALLV),
        .sched = RCC_SCHED_NONE, .exec = RCC_EXEC_CMA,
        .flags = RCC_ALG_ALL_EDGES,
        .terms = rcc_cma_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "(n-1+2*ceil(log2 n))*alpha + "
                                           "2(n-1)/n*S*beta + (n-1)/n*S*gamma",
                    [RCC_COLL_REDUCE_SCATTER] = "(n-1+2*ceil(log2 n))*alpha + "
                                                "(n-1)/n*S*beta + "
                                                "(n-1)/n*S*gamma",
                    [RCC_COLL_ALLGATHER] = "(n-1+2*ceil(log2 n))*alpha + "
                                           "(n-1)/n*S*beta",
                    [RCC_COLL_GATHER] = "2(n-1)*alpha + (n-1)/n*S/2*beta",
                    [RCC_COLL_SCATTER] = "2(n-1)*alpha + (n-1)/n*S/2*beta",
                    [RCC_COLL_ALLTOALLV] = "(n-1)*alpha + (n-1)/n*S/2*beta"},
        .why_not = cma_why_not},
    [RCC_ALG_ZEROCOPY] = {
        .id = RCC_ALG_ZEROCOPY, .name = "zero-copy",
        .setting = RINGCC_ALGO_ZEROCOPY,
        .colls = REDUCING | RCC_COLL_BIT(RCC_COLL_REDUCE_SCATTER) |
                 RCC_COLL_BIT(RCC_COLL_ALLGATHER) |
                 RCC_COLL_BIT(RCC_COLL_BCAST) | RCC_COLL_BIT(RCC_COLL_REDUCE) |
                 RCC_COLL_BIT(RCC_COLL_ALLTOALL) |
                 RCC_COLL_BIT(RCC_COLL_ALLTOALLV),
        .sched = RCC_SCHED_NONE, .exec = RCC_EXEC_ZC,
        .flags = RCC_ALG_ALL_EDGES,
        .terms = rcc_zc_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "(n-1)*alpha + 2S*(2n-2)/(6n-4)"
                                           "*beta + (n-1)/n*S*gamma",
                    [RCC_COLL_REDUCE_SCATTER] = "(n-1)*alpha + (S+S/n)*(n-1)/"
                                                "(3n-1)*beta + (n-1)/n*S*gamma",
                    [RCC_COLL_ALLGATHER] = "(n-1)*alpha + (S+S/n)*(n-1)/"
                                           "(3n-1)*beta",
                    [RCC_COLL_BCAST] = "(n-1)*alpha + S/3*beta",
                    [RCC_COLL_REDUCE] = "(n-1)*alpha + (S+S/n)/3*beta + "
                                        "(n-1)/n*S*gamma",
                    [RCC_COLL_ALLTOALL] = "(n-1)*alpha + 2S*(n-1)/(4n-2)*beta",
                    [RCC_COLL_ALLTOALLV] = "(n-1)*alpha + (n-1)/n*S/2*beta"},
        .why_not = zc_why_not},
    [RCC_ALG_HIER] = {
        .id = RCC_ALG_HIER, .name = "hierarchical zero-copy",
        .setting = RINGCC_ALGO_ZEROCOPY, .colls = REDUCING,
        .sched = RCC_SCHED_NONE, .exec = RCC_EXEC_ZC,
        .terms = rcc_hier_terms,
        .formula = {[RCC_COLL_ALLREDUCE] =
                        "(4(H-1)+1)*alpha + 2(H-1)/H*S/2*beta + "
                        "(S/2 + (H-1)/H*S/2)*gamma, H = n/2 (priced as 2 "
                        "ranks a host)"},
        .why_not = hier_why_not},
    [RCC_ALG_DIRECT] = {
        .id = RCC_ALG_DIRECT, .name = "direct", .setting = RINGCC_ALGO_DIRECT,
        .colls = RCC_COLL_BIT(RCC_COLL_GATHER) | RCC_COLL_BIT(RCC_COLL_SCATTER),
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_DIRECT, .terms = rcc_direct_terms,
        .formula = {[RCC_COLL_GATHER] = "(n-1)*alpha + (n-1)/n*S*beta",
                    [RCC_COLL_SCATTER] = "(n-1)*alpha + (n-1)/n*S*beta"},
        .why_not = needs_ranks},
    [RCC_ALG_BINOMIAL] = {
        .id = RCC_ALG_BINOMIAL, .name = "binomial tree",
        .setting = RINGCC_ALGO_TREE,
        .colls = RCC_COLL_BIT(RCC_COLL_GATHER) | RCC_COLL_BIT(RCC_COLL_SCATTER),
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_BINOMIAL, .terms = rcc_binomial_terms,
        .formula = {[RCC_COLL_GATHER] = "L*alpha + (n-1)/n*S*(1+(L-1)/2)*beta, "
                                        "L = ceil(log2 n)",
                    [RCC_COLL_SCATTER] = "L*alpha + (n-1)/n*S*(1+(L-1)/2)*beta, "
                                         "L = ceil(log2 n)"},
        .why_not = binomial_why_not},
    [RCC_ALG_PAIRWISE_V] = {
        .id = RCC_ALG_PAIRWISE_V, .name = "pairwise (uneven)",
        .setting = RINGCC_ALGO_AUTO, .colls = RCC_COLL_BIT(RCC_COLL_ALLTOALLV),
        .exec = RCC_EXEC_FIFO, .flags = RCC_ALG_ALL_EDGES,
        .sched = RCC_SCHED_DIRECT, .terms = rcc_direct_terms,
        .formula = {[RCC_COLL_ALLTOALLV] = "(n-1)*alpha + max sent*beta"},
        .why_not = needs_ranks},
    [RCC_ALG_ZEROCOPY_DEV] = {
        .id = RCC_ALG_ZEROCOPY_DEV, .name = "device zero-copy",
        .setting = RINGCC_ALGO_ZEROCOPY,
        .colls = REDUCING | RCC_COLL_BIT(RCC_COLL_REDUCE_SCATTER) |
                 RCC_COLL_BIT(RCC_COLL_ALLGATHER),
        .sched = RCC_SCHED_NONE, .exec = RCC_EXEC_ZC,
        .flags = RCC_ALG_ALL_EDGES,
        .terms = rcc_zc_dev_terms,
        .formula = {[RCC_COLL_ALLREDUCE] = "2*alpha + 2S*(2n-2)/(6n-4)*beta "
                                           "+ (n-1)/n*S*gamma",
                    [RCC_COLL_REDUCE_SCATTER] = "2*alpha + (S+S/n)*(n-1)/"
                                                "(3n-1)*beta + (n-1)/n*S*gamma",
                    [RCC_COLL_ALLGATHER] = "2*alpha + (S+S/n)*(n-1)/(3n-1)"
                                           "*beta"},
        .why_not = zc_dev_why_not},
};

const char *rcc_alg_name(int alg) {
  return alg >= 0 && alg < RCC_NUM_ALGS ? rcc_algorithms[alg].name : "?";
}

int rcc_alg_terms(int alg, int coll, int link, int nranks, double S, double C,
                  struct rcc_cost_terms *t) {
  memset(t, 0, sizeof(*t));
  if (alg < 0 || alg >= RCC_NUM_ALGS || coll < 0 || coll >= RCC_NUM_COLLS ||
      !(rcc_algorithms[alg].colls & RCC_COLL_BIT(coll)))
    return -1;
  const struct rcc_algorithm *a = &rcc_algorithms[alg];
  a->terms(coll, nranks, S, C, t);
  if (link >= 0 && a->link_terms != NULL)
    a->link_terms(link, nranks, t);
  return 0;
}

int rcc_alg_forced_by(int alg, int setting) {
  if (setting == RINGCC_ALGO_AUTO || alg < 0 || alg >= RCC_NUM_ALGS)
    return 0;
  int mine = rcc_algorithms[alg].setting;
  if (setting == RINGCC_ALGO_DIRECT) /* the one-shots, cma, or direct */
    return mine == RINGCC_ALGO_ONESHOT || mine == RINGCC_ALGO_CMA ||
           mine == RINGCC_ALGO_DIRECT;
  return mine == setting;
}

/* ---- RINGCC_ALGO's spellings ----------------------------------------------- */

/* One spelling per ringcc_algo_t (ringcc.h), the one RINGCC_ALGO, the docs,
 * ringcc-model and the Python package (ringcc.Algo) use. */
static const char *const settings[RINGCC_NUM_ALGOS] = {
    [RINGCC_ALGO_AUTO] = "auto",
    [RINGCC_ALGO_RING] = "ring",
    [RINGCC_ALGO_TREE] = "tree",
    [RINGCC_ALGO_DIRECT] = "direct",
    [RINGCC_ALGO_RECDOUBLING] = "recdoubling",
    [RINGCC_ALGO_RABENSEIFNER] = "rabenseifner",
    [RINGCC_ALGO_ONESHOT] = "oneshot",
    [RINGCC_ALGO_CMA] = "cma",
    [RINGCC_ALGO_ZEROCOPY] = "zerocopy",
};

const char *rcc_algo_setting_name(int setting) {
  return setting >= 0 && setting < RINGCC_NUM_ALGOS ? settings[setting] : "?";
}

/* A spelling matches when it does with case, '-' and '_' ignored: "one-shot"
 * and "zero-copy", as the logs name those algorithms, are "oneshot" and
 * "zerocopy". */
static int same_spelling(const char *given, const char *name) {
  for (;; given++) {
    while (*given == '-' || *given == '_')
      given++;
    char a = *given >= 'A' && *given <= 'Z' ? (char)(*given - 'A' + 'a')
                                            : *given;
    if (a != *name)
      return 0;
    if (a == '\0')
      return 1;
    name++;
  }
}

int rcc_algo_setting_parse(const char *name) {
  for (int a = 0; a < RINGCC_NUM_ALGOS; a++)
    if (same_spelling(name, settings[a]))
      return a;
  return -1;
}
