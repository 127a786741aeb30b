/*
 * clocksync.c - the init step of RINGCC_TRACE (clocksync.h): the clock
 * offsets that let the ranks' traces be drawn on one time line.
 *
 * Ranks on rank 0's host read the same CLOCK_MONOTONIC as rank 0: their
 * offset is exactly 0 and nothing is measured. A rank on another host
 * measures, Cristian's way, over the communicator's own point-to-point
 * FIFOs: it notes its time t_a, sends a ping to rank 0, which answers with
 * its own time t_0, and notes t_b when the answer arrives. Rank 0 read t_0
 * somewhere between t_a and t_b, so
 *
 *   offset = (t_a + t_b) / 2 - t_0,   |error| <= (t_b - t_a) / 2,
 *
 * and of ROUNDS round trips the one with the shortest (t_b - t_a) is kept.
 * Rank 0 serves the ranks of other hosts one after the other; the others
 * do nothing but agree on the outcome.
 */
#include <string.h>

#include "agree.h"
#include "clock.h"
#include "clocksync.h"
#include "comm.h"
#include "exec.h"
#include "fifo.h"
#include "topo.h"
#include "trace.h"

#define ROUNDS 16

/* One 8-byte message to or from peer on the pair's own FIFO. */
static ringcc_result_t p2p(struct ringcc_comm *comm, int coll, int peer,
                           int64_t *value) {
  struct rcc_plan plan = {
      .coll = coll,
      .nranks = comm->nranks,
      .rank = comm->rank,
      .pos = comm->ring_pos,
      .ring = comm->ring,
      .count = sizeof(*value),
      .chunk_elems = comm->send_conn[RCC_CONN_P2P][peer].slot_bytes,
      .root = peer,
  };
  rcc_plan_pairwise(&plan);
  return rcc_exec_host(comm, &plan, value, value, RINGCC_UINT8, RINGCC_SUM);
}

static int other_host(const struct ringcc_comm *comm, int rank) {
  return comm->peers[rank].host_hash != comm->peers[0].host_hash;
}

/* Rank 0: answer every ping of every rank on another host. */
static ringcc_result_t serve(struct ringcc_comm *comm) {
  ringcc_result_t r = RINGCC_SUCCESS;
  for (int p = 1; p < comm->nranks && r == RINGCC_SUCCESS; p++)
    for (int k = 0; k < ROUNDS && other_host(comm, p); k++) {
      int64_t t;
      if ((r = p2p(comm, RCC_COLL_RECV, p, &t)) != RINGCC_SUCCESS)
        break;
      t = rcc_now_ns();
      if ((r = p2p(comm, RCC_COLL_SEND, p, &t)) != RINGCC_SUCCESS)
        break;
    }
  return r;
}

static ringcc_result_t measure(struct ringcc_comm *comm,
                               struct rcc_clock_offset *c) {
  int64_t best = -1;
  for (int k = 0; k < ROUNDS; k++) {
    int64_t ta = rcc_now_ns(), t0 = ta;
    ringcc_result_t r = p2p(comm, RCC_COLL_SEND, 0, &t0);
    if (r == RINGCC_SUCCESS)
      r = p2p(comm, RCC_COLL_RECV, 0, &t0);
    if (r != RINGCC_SUCCESS)
      return r;
    int64_t tb = rcc_now_ns();
    if (best < 0 || tb - ta < best) {
      best = tb - ta;
      c->offset_ns = ta + (tb - ta) / 2 - t0;
      c->error_ns = (tb - ta + 1) / 2;
    }
  }
  c->measured = 1;
  c->rounds = ROUNDS;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_trace_setup(struct ringcc_comm *comm, int64_t deadline) {
  struct rcc_clock_offset clock;
  int any = 0;
  memset(&clock, 0, sizeof(clock));
  for (int p = 0; p < comm->nranks; p++)
    any |= comm->peers[p].trace_id != 0;
  if (!any)
    return RINGCC_SUCCESS;
  ringcc_result_t r = RINGCC_SUCCESS;
  if (comm->rank == 0)
    r = serve(comm);
  else if (other_host(comm, comm->rank))
    r = measure(comm, &clock);
  if (r == RINGCC_SUCCESS && comm->peers[comm->rank].trace_id != 0)
    r = rcc_trace_open(comm, &clock);
  return rcc_agree_status(comm, r, "trace setup (RINGCC_TRACE)", deadline);
}
