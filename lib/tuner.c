/*
 * tuner.c - the cost model that picks an algorithm per call.
 *
 * Alpha-beta model per link type: alpha is the time to hand one message over
 * an edge (latency, including the wake-up of the receiver), beta the time per
 * byte on that edge, gamma the time per byte of a local reduction. The
 * figures below were measured on the development machine (2 vCPUs, 4 ranks,
 * ringcc-bench): they are defaults, not truths.
 *
 * AllReduce of S bytes over n ranks:
 *   ring    T = 2(n-1) * alpha + 2(n-1)/n * S * beta + (n-1)/n * S * gamma
 *   direct  T = alpha + (n-1) * S * beta + n * S * gamma   (S <= one slot)
 * The ring's alpha and beta are its slowest edge's (network if any ring edge
 * crosses the network); direct talks to every peer, so it takes the slowest
 * of all edges.
 *
 * RINGCC_ALGO forces a choice. With RINGCC_DEBUG=INFO and
 * RINGCC_DEBUG_SUBSYS=TUNING every decision is printed with each
 * candidate's predicted time, split into latency and bandwidth terms.
 */
#include <stdio.h>

#include "comm.h"

struct link_model {
  double alpha_us;
  double beta_us_per_byte;
};

static const struct link_model shm_link = {2.0, 1.0 / 4000.0}; /* 4 GB/s */
static const struct link_model net_link = {60.0, 1.0 / 1000.0}; /* 1 GB/s */
static const double gamma_us_per_byte = 1.0 / 8000.0;           /* 8 GB/s */

static const struct link_model *link_of(size_t slot_bytes,
                                        const struct ringcc_comm *comm) {
  /* Network edges are the ones with network-sized slots. */
  return slot_bytes == (size_t)comm->set.chunk_bytes ? &shm_link : &net_link;
}

struct prediction {
  double latency_us;
  double bandwidth_us;
};

static struct prediction ring_allreduce(int n, double bytes,
                                        const struct link_model *l) {
  struct prediction p = {2.0 * (n - 1) * l->alpha_us,
                         2.0 * (n - 1) / n * bytes * l->beta_us_per_byte +
                             (double)(n - 1) / n * bytes * gamma_us_per_byte};
  return p;
}

static struct prediction direct_allreduce(int n, double bytes,
                                          const struct link_model *l) {
  struct prediction p = {l->alpha_us, (n - 1) * bytes * l->beta_us_per_byte +
                                          n * bytes * gamma_us_per_byte};
  return p;
}

static double total(struct prediction p) {
  return p.latency_us + p.bandwidth_us;
}

int rcc_tuner_allreduce(struct ringcc_comm *comm, size_t bytes) {
  int n = comm->nranks;
  int direct_fits = n > 1 && bytes <= comm->all_chunk_bytes && bytes > 0;
  struct prediction ring =
      ring_allreduce(n, (double)bytes, link_of(comm->ring_chunk_bytes, comm));
  struct prediction direct =
      direct_allreduce(n, (double)bytes, link_of(comm->all_chunk_bytes, comm));
  int algo;

  if (comm->set.algo == RINGCC_ALGO_RING || !direct_fits)
    algo = RINGCC_ALGO_RING;
  else if (comm->set.algo == RINGCC_ALGO_DIRECT)
    algo = RINGCC_ALGO_DIRECT;
  else
    algo = total(direct) < total(ring) ? RINGCC_ALGO_DIRECT : RINGCC_ALGO_RING;

  if (rcc_log_level >= RINGCC_LOG_INFO && rcc_log_subsys("TUNING")) {
    char direct_text[96] = "direct n/a (larger than a slot)";
    if (direct_fits)
      snprintf(direct_text, sizeof(direct_text),
               "direct %.1f us (latency %.1f + bandwidth %.1f)", total(direct),
               direct.latency_us, direct.bandwidth_us);
    rcc_log(RINGCC_LOG_INFO, comm->rank,
            "TUNING allreduce %zu B, %d ranks: ring %.1f us (latency %.1f + "
            "bandwidth %.1f), %s -> %s%s",
            bytes, n, total(ring), ring.latency_us, ring.bandwidth_us,
            direct_text, algo == RINGCC_ALGO_RING ? "ring" : "direct",
            comm->set.algo != RINGCC_ALGO_AUTO ? " (RINGCC_ALGO)" : "");
  }
  if (comm->set.algo == RINGCC_ALGO_DIRECT && !direct_fits)
    RCC_INFO(comm->rank, "RINGCC_ALGO=direct does not apply to a %zu-byte "
                         "allreduce (more than one %zu-byte slot): using ring",
             bytes, comm->all_chunk_bytes);
  return algo;
}
