/*
 * model.c - the cost model: the formulas, and the choice among algorithms
 * that the library's tuner (tuner.c) and ringcc-model both make with it.
 *
 * Alpha-beta model per link type (tuner.h): alpha is the cost of one step
 * of a rank (a message handed over an edge, wake-up of the receiver
 * included), beta the time per byte on that edge in one direction, gamma the
 * time per byte of a local reduction. With n ranks and S bytes (nccl-tests'
 * S):
 *
 *   allreduce       ring      2(n-1)*alpha + 2(n-1)/n*S*beta + (n-1)/n*S*gamma
 *                   one-shot  n/2*alpha + (n-1)*S*beta + n*S*gamma
 *                             (S <= one slot; see below for its n/2)
 *                   tree      3*ceil(log2 n)*alpha + 2*S*beta + S*gamma
 *                   recursive doubling (S <= one slot)
 *                             (L+2e)*alpha + (L+2e)*S*beta + (L+e)*S*gamma,
 *                             L = floor(log2 n), e = 1 if n is not a power
 *                             of two (fold-in before, total back after)
 *                             (double binary tree: each rank sends S/2 up
 *                             in each tree and S down in the tree where it
 *                             is interior, about 2S; one reduction pass
 *                             over S on the interior path)
 *   reduce_scatter  ring      (n-1)*alpha + (n-1)/n*S*beta + (n-1)/n*S*gamma
 *   allgather       ring      (n-1)*alpha + (n-1)/n*S*beta
 *   bcast, reduce   chain     (n-2+k)*(alpha + C*beta [+ C*gamma]),
 *                             k = ceil(S/C) chunks of C = S/k <= one slot
 *   alltoall        pairwise  (n-1)*alpha + (n-1)/n*S*beta
 *   send/recv       p2p       alpha + S*beta
 *   barrier         dissemination  ceil(log2 n)*alpha
 *
 * alpha is the cost of one step of a rank, a message handed on and one
 * taken in: on a host-driven transport it is mostly the work of handling a
 * message (writing a slot and publishing it, waiting for and waking on the
 * next), not the wire's latency. The latency counts of one-shot and the tree
 * are therefore measured, not textbook:
 *   one-shot  each rank hands n-1 messages on and takes n-1 in. They are in
 *             flight together, so this costs less than n-1 ring steps but
 *             more than the textbook's one latency: n/2 steps fit 8-byte
 *             calls at n = 4 and 8 on 2 cores (3.5 us and 10 us against
 *             the ring's 12 and 48 us: 0.29 and 0.21 of 2(n-1) steps).
 *             Over shared memory it runs on the board (exec_host.c): one
 *             cache line out and n-1 in, no FIFO counters, so (n-1)/2
 *             steps (3.4 us and 7.6 us at n = 4 and 8, 0.8 of the FIFOs'
 *             time, medians of 8 interleaved runs each); over TCP every
 *             message is a send of its own: n-1 steps.
 *   tree      an interior rank takes two messages in and hands one on per
 *             level going up (one in, two on going down), and its schedule
 *             runs tree A's step before tree B's: 3*ceil(log2 n) steps fit
 *             (10 us and 30 us at n = 4 and 8: 0.85 and 0.63 of the ring),
 *             where the textbook 2*ceil(log2 n) made the tree win 8-byte
 *             calls it lost by 3x to one-shot.
 *
 * beta is beta_mem instead once all ranks' buffers (footprint), with the
 * slots and copies in flight, outgrow the last-level cache: 2 * footprint >
 * cache_bytes, e.g. an allreduce (2S per rank) with 4nS > cache. Host
 * copies and reductions then run at memory speed, not cache speed.
 *
 * The ring and the chains take the slowest of the ring's edges (the network
 * if any ring edge crosses it), the schedules that talk to every peer the
 * slowest of all edges (the tree's edges join ranks that are not ring
 * neighbours, so it counts as one of those). What the tuner picks today:
 * the algorithm (ring, one-shot, tree, recursive doubling for allreduce,
 * and Rabenseifner where every edge is a network link; every other
 * collective has one schedule, whose prediction is still computed and
 * logged); the chunk, which is one FIFO slot of the edges the schedule uses
 * (a step never moves more, and the pipeline wants the largest step);
 * channels, always 1 (libringcc runs one ring over one set of FIFOs per
 * peer).
 *
 * The values come from the calibration file (tuner_file.c, written by
 * ringcc-bench --calibrate) or the defaults below. Every rank must decide
 * alike, so at init the ranks all-gather their values and all use rank 0's.
 *
 * RINGCC_ALGO forces a choice. With RINGCC_DEBUG=INFO and
 * RINGCC_DEBUG_SUBSYS=TUNING every call is printed with each candidate's
 * predicted time, split into latency and bandwidth terms, and the winner.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "schedule.h"
#include "tuner.h"
#include "error.h"
#include "log.h"

/* Measured on the development machine (2 vCPUs, 4 ranks, ringcc-bench):
 * defaults, not truths. ringcc-bench --calibrate measures the real ones. */
const struct rcc_model rcc_model_defaults = {
    .link = {[RCC_LINK_SHM] = {2.0, 1.0 / 4000.0, 0},   /* 4 GB/s */
             [RCC_LINK_TCP] = {60.0, 1.0 / 1000.0, 0}}, /* 1 GB/s */
    .gamma_us_per_byte = 1.0 / 8000.0,                  /* 8 GB/s */
    .cache_bytes = 0, /* one beta: no cache regime */
};

const char *rcc_link_name(int link) {
  static const char *const names[RCC_NUM_LINKS] = {[RCC_LINK_SHM] = "shm",
                                                   [RCC_LINK_TCP] = "tcp"};
  return link >= 0 && link < RCC_NUM_LINKS ? names[link] : "?";
}

const char *rcc_alg_name(int alg) {
  static const char *const names[RCC_NUM_ALGS] = {
      [RCC_ALG_RING] = "ring",         [RCC_ALG_DIRECT] = "one-shot",
      [RCC_ALG_TREE] = "tree",         [RCC_ALG_CHAIN] = "chain",
      [RCC_ALG_PAIRWISE] = "pairwise", [RCC_ALG_P2P] = "p2p",
      [RCC_ALG_DISSEMINATION] = "dissemination",
      [RCC_ALG_RECDOUBLING] = "recursive doubling",
      [RCC_ALG_HALVING] = "rabenseifner"};
  return alg >= 0 && alg < RCC_NUM_ALGS ? names[alg] : "?";
}

/* ---- the formulas ------------------------------------------------------- */

static int floor_log2(int n) {
  int l = 0;
  while (n > 1 && (1 << (l + 1)) <= n)
    l++;
  return l;
}

static int ceil_log2(int n) {
  int k = 0;
  while ((1L << k) < n)
    k++;
  return k;
}

static void set_terms(struct rcc_cost_terms *t, double a, double b, double g,
                      double sent) {
  t->alpha_count = a;
  t->beta_bytes = b;
  t->gamma_bytes = g;
  t->bytes_sent = sent;
}

/* Bytes one rank's input and output span. */
static double rank_buffers(int coll, int n, double S) {
  switch (coll) {
  case RCC_COLL_REDUCE_SCATTER:
  case RCC_COLL_ALLGATHER:
    return S + S / n;
  case RCC_COLL_BCAST:
  case RCC_COLL_SEND:
  case RCC_COLL_RECV:
    return S;
  case RCC_COLL_BARRIER:
    return 0;
  default: /* allreduce, reduce, alltoall */
    return 2 * S;
  }
}

/* Bcast and reduce: a pipeline of n-1 edges over k chunks. */
static void chain_terms(int n, double S, double C, int reduce,
                        struct rcc_cost_terms *t) {
  double k = C > 0 && S > C ? ceil(S / C) : 1;
  double c = S / k, stages = n - 2 + k;
  set_terms(t, stages, stages * c, reduce ? stages * c : 0, S);
}

int rcc_model_terms(int coll, int alg, int nranks, double S, double C,
                    struct rcc_cost_terms *t) {
  double n = nranks, f = nranks > 0 ? (n - 1) / n : 0;

  memset(t, 0, sizeof(*t));
  if (nranks > 0)
    t->footprint_bytes = n * rank_buffers(coll, nranks, S);
  switch (coll * RCC_NUM_ALGS + alg) {
#define CASE(c, a) case (c) * RCC_NUM_ALGS + (a)
  CASE(RCC_COLL_ALLREDUCE, RCC_ALG_RING):
    set_terms(t, 2 * (n - 1), 2 * f * S, f * S, 2 * f * S);
    return 0;
  CASE(RCC_COLL_ALLREDUCE, RCC_ALG_DIRECT):
    set_terms(t, n / 2, (n - 1) * S, n * S, (n - 1) * S);
    return 0;
  CASE(RCC_COLL_ALLREDUCE, RCC_ALG_TREE):
    set_terms(t, 3 * ceil_log2(nranks), 2 * S, S, 2 * S);
    return 0;
  CASE(RCC_COLL_ALLREDUCE, RCC_ALG_RECDOUBLING): {
    /* log2 p exchanges among the first p (a power of two) ranks; the
     * others fold in before and get the total after: 2 more steps */
    int logp = floor_log2(nranks), extra = nranks > 0 && nranks != 1 << logp;
    set_terms(t, logp + 2 * extra, (logp + 2 * extra) * S, (logp + extra) * S,
              (logp + extra) * S);
    return 0;
  }
  CASE(RCC_COLL_ALLREDUCE, RCC_ALG_HALVING): {
    /* 2 log2 p exchanges of halves among the first p ranks, each rank
     * sending (p-1)/p S per phase; the others fold in (S) and get the total
     * back (S): 2 more steps */
    int pw = 1 << floor_log2(nranks), extra = nranks > 0 && nranks != pw;
    double fp = nranks > 0 ? (pw - 1.0) / pw : 0;
    set_terms(t, 2 * floor_log2(nranks) + 2 * extra,
              2 * fp * S + 2 * extra * S, fp * S + extra * S,
              2 * fp * S + extra * S);
    return 0;
  }
  CASE(RCC_COLL_REDUCE_SCATTER, RCC_ALG_RING):
    set_terms(t, n - 1, f * S, f * S, f * S);
    return 0;
  CASE(RCC_COLL_ALLGATHER, RCC_ALG_RING):
    set_terms(t, n - 1, f * S, 0, f * S);
    return 0;
  CASE(RCC_COLL_BCAST, RCC_ALG_CHAIN):
    chain_terms(nranks, S, C, 0, t);
    return 0;
  CASE(RCC_COLL_REDUCE, RCC_ALG_CHAIN):
    chain_terms(nranks, S, C, 1, t);
    return 0;
  CASE(RCC_COLL_ALLTOALL, RCC_ALG_PAIRWISE):
    set_terms(t, n - 1, f * S, 0, f * S);
    return 0;
  CASE(RCC_COLL_SEND, RCC_ALG_P2P):
  CASE(RCC_COLL_RECV, RCC_ALG_P2P):
    set_terms(t, 1, S, 0, S);
    return 0;
  CASE(RCC_COLL_BARRIER, RCC_ALG_DISSEMINATION):
    set_terms(t, ceil_log2(nranks), 0, 0, 0);
    return 0;
#undef CASE
  default:
    memset(t, 0, sizeof(*t));
    return -1;
  }
}

void rcc_model_link_terms(int link, int alg, int nranks,
                          struct rcc_cost_terms *t) {
  if (link == RCC_LINK_TCP && alg == RCC_ALG_DIRECT && nranks > 1)
    t->alpha_count = nranks - 1;
  if (link == RCC_LINK_SHM && alg == RCC_ALG_DIRECT && nranks > 1)
    t->alpha_count = (nranks - 1) / 2.0; /* the board */
  if (link == RCC_LINK_SHM && alg == RCC_ALG_RECDOUBLING && nranks > 1)
    t->alpha_count += floor_log2(nranks); /* two steps per exchange */
}

const char *rcc_model_formula(int coll, int alg) {
  static const struct {
    int coll, alg;
    const char *text;
  } formulas[] = {
      {RCC_COLL_ALLREDUCE, RCC_ALG_RING,
       "2(n-1)*alpha + 2(n-1)/n*S*beta + (n-1)/n*S*gamma"},
      {RCC_COLL_ALLREDUCE, RCC_ALG_DIRECT,
       "n/2*alpha [shm: (n-1)/2, tcp: (n-1)] + (n-1)*S*beta + n*S*gamma"},
      {RCC_COLL_ALLREDUCE, RCC_ALG_TREE,
       "3*ceil(log2 n)*alpha + 2*S*beta + S*gamma"},
      {RCC_COLL_ALLREDUCE, RCC_ALG_RECDOUBLING,
       "(L+2e)*alpha [shm: (2L+2e)] + (L+2e)*S*beta + (L+e)*S*gamma, "
       "L = floor(log2 n), e = 1 if n is not a power of 2"},
      {RCC_COLL_ALLREDUCE, RCC_ALG_HALVING,
       "(2L+2e)*alpha + (2(p-1)/p+2e)*S*beta + ((p-1)/p+e)*S*gamma, "
       "p = 2^L <= n, L = floor(log2 n), e = 1 if n is not a power of 2"},
      {RCC_COLL_REDUCE_SCATTER, RCC_ALG_RING,
       "(n-1)*alpha + (n-1)/n*S*beta + (n-1)/n*S*gamma"},
      {RCC_COLL_ALLGATHER, RCC_ALG_RING, "(n-1)*alpha + (n-1)/n*S*beta"},
      {RCC_COLL_BCAST, RCC_ALG_CHAIN,
       "(n-2+k)*(alpha + C*beta), k = ceil(S/slot), C = S/k"},
      {RCC_COLL_REDUCE, RCC_ALG_CHAIN,
       "(n-2+k)*(alpha + C*beta + C*gamma), k = ceil(S/slot), C = S/k"},
      {RCC_COLL_ALLTOALL, RCC_ALG_PAIRWISE, "(n-1)*alpha + (n-1)/n*S*beta"},
      {RCC_COLL_SEND, RCC_ALG_P2P, "alpha + S*beta"},
      {RCC_COLL_RECV, RCC_ALG_P2P, "alpha + S*beta"},
      {RCC_COLL_BARRIER, RCC_ALG_DISSEMINATION, "ceil(log2 n)*alpha"},
  };
  for (size_t i = 0; i < sizeof(formulas) / sizeof(formulas[0]); i++)
    if (formulas[i].coll == coll && formulas[i].alg == alg)
      return formulas[i].text;
  return "";
}

int rcc_model_in_memory(const struct rcc_cost_terms *t, double cache_bytes) {
  return cache_bytes > 0 && 2 * t->footprint_bytes > cache_bytes;
}

struct rcc_prediction rcc_model_predict(const struct rcc_cost_terms *t,
                                        const struct rcc_link_cost *link,
                                        double gamma_us_per_byte,
                                        double cache_bytes) {
  struct rcc_prediction p;
  double beta = link->beta_us_per_byte;
  p.in_memory = rcc_model_in_memory(t, cache_bytes) &&
                link->beta_mem_us_per_byte > 0;
  if (p.in_memory)
    beta = link->beta_mem_us_per_byte;
  p.latency_us = t->alpha_count * link->alpha_us;
  p.reduce_us = t->gamma_bytes * gamma_us_per_byte;
  p.bandwidth_us = t->beta_bytes * beta + p.reduce_us;
  return p;
}

/* ---- the choice ------------------------------------------------------------ */

/* The one schedule of every collective but allreduce. */
static int only_alg(int coll) {
  switch (coll) {
  case RCC_COLL_BCAST:
  case RCC_COLL_REDUCE:
    return RCC_ALG_CHAIN;
  case RCC_COLL_ALLTOALL:
    return RCC_ALG_PAIRWISE;
  case RCC_COLL_SEND:
  case RCC_COLL_RECV:
    return RCC_ALG_P2P;
  case RCC_COLL_BARRIER:
    return RCC_ALG_DISSEMINATION;
  default:
    return RCC_ALG_RING;
  }
}

/* Schedules that talk to every peer pay the slowest of all edges. */
int rcc_alg_uses_all_edges(int alg) {
  return alg == RCC_ALG_DIRECT || alg == RCC_ALG_TREE ||
         alg == RCC_ALG_RECDOUBLING || alg == RCC_ALG_HALVING ||
         alg == RCC_ALG_PAIRWISE || alg == RCC_ALG_DISSEMINATION;
}

/* The RINGCC_ALGO value that runs an AllReduce schedule. */
int rcc_alg_setting(int alg) {
  return alg == RCC_ALG_DIRECT        ? RINGCC_ALGO_DIRECT
         : alg == RCC_ALG_TREE        ? RINGCC_ALGO_TREE
         : alg == RCC_ALG_RECDOUBLING ? RINGCC_ALGO_RECDOUBLING
         : alg == RCC_ALG_HALVING     ? RINGCC_ALGO_RABENSEIFNER
                                      : RINGCC_ALGO_RING;
}

static void evaluate(const struct rcc_model_input *in, int alg,
                     struct rcc_candidate *c) {
  c->alg = alg;
  c->runnable = 1;
  c->why_not = NULL;
  rcc_model_terms(in->coll, alg, in->nranks, in->bytes, in->chunk_bytes,
                  &c->terms);
  if (rcc_alg_uses_all_edges(alg))
    rcc_model_link_terms(in->all_link_type, alg, in->nranks, &c->terms);
  c->pred = rcc_model_predict(&c->terms,
                              rcc_alg_uses_all_edges(alg) ? &in->all_link
                                                  : &in->ring_link,
                              in->gamma_us_per_byte, in->cache_bytes);
}

/* One-shot and recursive doubling send the whole message in one slot. */
static void one_slot_only(const struct rcc_model_input *in,
                          struct rcc_candidate *c) {
  if (in->nranks < 2 || in->bytes <= 0) {
    c->runnable = 0;
    c->why_not = "needs 2 ranks and a non-empty message";
  } else if (in->bytes > in->direct_max_bytes) {
    c->runnable = 0;
    c->why_not = "larger than one FIFO slot";
  }
}

int rcc_model_choose(const struct rcc_model_input *in,
                     struct rcc_candidate cand[RCC_MAX_CANDIDATES],
                     int *winner) {
  int count = 1, wanted = -1;

  evaluate(in, only_alg(in->coll), &cand[0]);
  *winner = 0;
  if (in->coll != RCC_COLL_ALLREDUCE)
    return count;
  evaluate(in, RCC_ALG_DIRECT, &cand[1]);
  one_slot_only(in, &cand[1]);
  evaluate(in, RCC_ALG_TREE, &cand[2]);
  if (in->nranks < 2) {
    cand[2].runnable = 0;
    cand[2].why_not = "needs 2 ranks";
  }
  evaluate(in, RCC_ALG_RECDOUBLING, &cand[3]);
  one_slot_only(in, &cand[3]);
  evaluate(in, RCC_ALG_HALVING, &cand[4]);
  if (in->nranks < 2) {
    cand[4].runnable = 0;
    cand[4].why_not = "needs 2 ranks";
  } else if (in->forced != RINGCC_ALGO_RABENSEIFNER && !in->network_only) {
    /* Over shared memory the ring's fused step moves each byte once where
     * this copies a piece into a slot and reduces it out (n = 8, 1-64 MiB:
     * twice the ring's time), which the model does not see. Over TCP,
     * measured side by side, it ran level with the ring or ahead at n = 4
     * and 8 from 16 to 64 MiB, and from 64 KiB to 4 MiB at n = 4 but for
     * one noisy 256 KiB point (docs/algorithms.md), so there the model
     * decides. */
    cand[4].runnable = 0;
    cand[4].why_not = "network links only (RINGCC_ALGO=rabenseifner forces it)";
  }
  count = 5;
  for (int i = 0; i < count && in->forced != RINGCC_ALGO_AUTO; i++)
    if (rcc_alg_setting(cand[i].alg) == in->forced)
      wanted = i;
  if (wanted >= 0) {
    if (cand[wanted].runnable)
      *winner = wanted;
    return count;
  }
  for (int i = 1; i < count; i++) /* a tie goes to the ring */
    if (cand[i].runnable && rcc_prediction_total(cand[i].pred) <
                                rcc_prediction_total(cand[*winner].pred))
      *winner = i;
  return count;
}

/* RINGCC_ALGO's spelling of each ringcc_algo_t. */
static const char *const algo_names[RINGCC_NUM_ALGOS] = {
    "auto", "ring", "tree", "direct", "recdoubling", "rabenseifner"};

const char *rcc_algo_setting_name(int algo) {
  return algo >= 0 && algo < RINGCC_NUM_ALGOS ? algo_names[algo] : "?";
}
