/*
 * model.c - the cost model: prices an algorithm's terms on a link, and picks
 * among the algorithms of the table (algorithms.h). The library's tuner
 * (tuner.c) and ringcc-model both decide with it.
 *
 * Alpha-beta model per link type (tuner.h): alpha is the cost of one step of
 * a rank (a message handed over an edge, wake-up of the receiver included),
 * beta the time per byte on that edge in one direction, gamma the time per
 * byte of a local reduction. Each algorithm states its terms for n ranks and
 * S bytes (nccl-tests' S) in the file of its schedule; the table has them
 * as text too (ringcc-model prints them).
 *
 * alpha is the cost of one step of a rank, a message handed on and one
 * taken in: on a host-driven transport it is mostly the work of handling a
 * message (writing a slot and publishing it, waiting for and waking on the
 * next), not the wire's latency. Where an algorithm's messages are in
 * flight together (one-shot) or wait for a partner (recursive doubling on
 * shared memory), its count of alphas was measured, not taken from the
 * textbook: docs/tuning.md has the figures.
 *
 * beta is beta_mem instead once all ranks' buffers (footprint), with the
 * slots and copies in flight, outgrow the last-level cache: 2 * footprint >
 * cache_bytes, e.g. an allreduce (2S per rank) with 4nS > cache. Host
 * copies and reductions then run at memory speed, not cache speed.
 *
 * The ring and the chains take the slowest of the ring's edges (the network
 * if any ring edge crosses it), the algorithms that talk to every peer
 * (RCC_ALG_ALL_EDGES) the slowest of all edges. What the tuner picks today:
 * the algorithm; the chunk, which is one FIFO slot of the edges the
 * schedule uses (a step never moves more, and the pipeline wants the
 * largest step); the channels (rcc_model_channels, tuner.h): none more
 * where one thread runs them in turn (each costs its steps' alphas and
 * adds no bandwidth), as many as the engines need to keep up with the
 * wire where they run at once, one per min_bytes of the call at most.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "algorithms.h"
#include "schedule.h"
#include "tuner.h"

/* Defaults, not truths: values measured on the development machine
 * (docs/tuning.md); ringcc-bench --calibrate measures the real ones. */
const struct rcc_model rcc_model_defaults = {
    .link = {[RCC_LINK_SHM] = {2.0, 1.0 / 4000.0, 0},
             [RCC_LINK_TCP] = {60.0, 1.0 / 1000.0, 0}},
    .gamma_us_per_byte = 1.0 / 8000.0,
    .cache_bytes = 0, /* one beta: no cache regime */
};

const char *rcc_link_name(int link) {
  static const char *const names[RCC_NUM_LINKS] = {[RCC_LINK_SHM] = "shm",
                                                   [RCC_LINK_TCP] = "tcp"};
  return link >= 0 && link < RCC_NUM_LINKS ? names[link] : "?";
}

/* ---- the terms ---------------------------------------------------------------- */

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

int rcc_model_terms(int coll, int alg, int nranks, double S, double C,
                    struct rcc_cost_terms *t) {
  if (rcc_alg_terms(alg, coll, -1, nranks, S, C, t) != 0)
    return -1;
  if (nranks > 0)
    t->footprint_bytes = nranks * rank_buffers(coll, nranks, S);
  return 0;
}

void rcc_model_link_terms(int link, int alg, int nranks,
                          struct rcc_cost_terms *t) {
  if (alg >= 0 && alg < RCC_NUM_ALGS && rcc_algorithms[alg].link_terms)
    rcc_algorithms[alg].link_terms(link, nranks, t);
}

const char *rcc_model_formula(int coll, int alg) {
  if (alg < 0 || alg >= RCC_NUM_ALGS || coll < 0 || coll >= RCC_NUM_COLLS ||
      !(rcc_algorithms[alg].colls & RCC_COLL_BIT(coll)))
    return "";
  const char *f = rcc_algorithms[alg].formula[coll];
  return f != NULL ? f : "";
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
  p.wire_us = t->beta_bytes * beta;
  p.bandwidth_us = p.wire_us + p.reduce_us;
  p.channels = 1;
  p.engine_us = 0;
  return p;
}

struct rcc_prediction rcc_model_channels(struct rcc_prediction one,
                                         const struct rcc_cost_terms *t,
                                         int channels,
                                         const struct rcc_channel_model *m) {
  struct rcc_prediction p = one;
  double c = channels > 1 ? channels : 1;
  p.channels = (int)c;
  if (m->serial)
    p.latency_us *= c;
  p.engine_us = m->beta_us_per_byte > 0 ? t->beta_bytes * m->beta_us_per_byte / c
                                        : 0;
  p.bandwidth_us = (p.engine_us > p.wire_us ? p.engine_us : p.wire_us) +
                   p.reduce_us;
  return p;
}

struct rcc_prediction rcc_model_hierarchical(int hosts, int per_host, double S,
                                             const struct rcc_link_cost *intra,
                                             const struct rcc_link_cost *inter,
                                             double inter_share,
                                             double gamma_us_per_byte,
                                             double *sent) {
  double G = per_host, H = hosts;
  double in = G > 1 ? (G - 1) / G * S : 0;          /* RS or AG inside */
  double shard = S / G;                             /* across hosts */
  double out = H > 1 ? 2 * (H - 1) / H * shard : 0; /* that ring's bytes */
  struct rcc_prediction p;
  memset(&p, 0, sizeof(p));
  p.latency_us = 2 * (G - 1) * intra->alpha_us + 2 * (H - 1) * inter->alpha_us;
  p.wire_us = 2 * in * intra->beta_us_per_byte +
              out * inter->beta_us_per_byte / (inter_share > 0 ? inter_share : 1);
  p.reduce_us = (in + (H > 1 ? (H - 1) / H * shard : 0)) * gamma_us_per_byte;
  p.bandwidth_us = p.wire_us + p.reduce_us;
  if (sent != NULL)
    *sent = 2 * in + out;
  return p;
}

/* ---- the choice ------------------------------------------------------------ */

/* Candidate c's one-channel prediction on the channels that make it
 * fastest (the fewest of equals). Algorithms without FIFO plans (the board,
 * cross-memory attach, zero-copy) and the barrier (no data) run on one. */
static struct rcc_prediction on_channels(const struct rcc_model_input *in,
                                         const struct rcc_algorithm *a,
                                         const struct rcc_candidate *c) {
  const struct rcc_channel_model *m = &in->channels;
  struct rcc_prediction best = rcc_model_channels(c->pred, &c->terms, 1, m);
  if (m->max <= 1 || a->exec != RCC_EXEC_FIFO ||
      a->id == RCC_ALG_DISSEMINATION)
    return best;
  if (m->exact)
    return rcc_model_channels(c->pred, &c->terms, m->max, m);
  for (int k = 2; k <= m->max && in->bytes / k >= m->min_bytes; k++) {
    struct rcc_prediction p = rcc_model_channels(c->pred, &c->terms, k, m);
    if (rcc_prediction_total(p) < rcc_prediction_total(best) * (1 - 1e-9))
      best = p;
  }
  return best;
}

static void evaluate(const struct rcc_model_input *in,
                     const struct rcc_algorithm *a, struct rcc_candidate *c) {
  int all = (a->flags & RCC_ALG_ALL_EDGES) != 0;
  struct rcc_alg_context ctx = {
      .coll = in->coll,
      .nranks = in->nranks,
      .bytes = in->bytes,
      .all_chunk_bytes = in->all_chunk_bytes,
      .board_bytes = in->board_bytes,
      .network_only = in->network_only,
      .cma = in->cma,
      .device = in->device,
      .forced = in->forced,
      .registered = in->registered,
  };
  c->alg = a->id;
  c->why_not = a->why_not(&ctx);
  c->runnable = c->why_not == NULL;
  rcc_model_terms(in->coll, a->id, in->nranks, in->bytes, in->ring_chunk_bytes,
                  &c->terms);
  if (all)
    rcc_model_link_terms(in->all_link_type, a->id, in->nranks, &c->terms);
  c->pred = rcc_model_predict(&c->terms, all ? &in->all_link : &in->ring_link,
                              in->gamma_us_per_byte, in->cache_bytes);
  c->pred = on_channels(in, a, c);
}

/* The fastest runnable candidate (forced ones only if only_forced), or -1. */
static int fastest(const struct rcc_model_input *in,
                   const struct rcc_candidate *cand, int count,
                   int only_forced) {
  int best = -1;
  for (int i = 0; i < count; i++) {
    if (!cand[i].runnable ||
        (only_forced && !rcc_alg_forced_by(cand[i].alg, in->forced)))
      continue;
    if (best < 0 || rcc_prediction_total(cand[i].pred) <
                        rcc_prediction_total(cand[best].pred))
      best = i;
  }
  return best;
}

int rcc_model_choose(const struct rcc_model_input *in,
                     struct rcc_candidate cand[RCC_MAX_CANDIDATES],
                     int *winner) {
  int count = 0;
  for (int a = 0; a < RCC_NUM_ALGS; a++) {
    const struct rcc_algorithm *alg = &rcc_algorithms[a];
    int one_rank = (alg->flags & RCC_ALG_ONE_RANK) != 0;
    if ((alg->colls & RCC_COLL_BIT(in->coll)) && one_rank == (in->nranks == 1))
      evaluate(in, alg, &cand[count++]);
  }
  int w = -1;
  if (in->forced == RINGCC_ALGO_AUTO) {
    w = fastest(in, cand, count, 0);
  } else {
    /* Forced: the fastest that it forces; where none can run the call,
     * the collective's first algorithm that can (the ring, the chain...),
     * as if nothing were forced and nothing were tuned. */
    w = fastest(in, cand, count, 1);
    for (int i = 0; i < count && w < 0; i++)
      if (cand[i].runnable)
        w = i;
  }
  *winner = w >= 0 ? w : 0; /* none runnable: no call reaches here so */
  return count;
}
