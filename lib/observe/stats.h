/*
 * stats.h - a communicator's counters (stats.c): calls and bytes per
 * collective and algorithm, bytes and waits per edge, and, when timing is
 * on, the time spent in collectives and waiting for peers. Read with
 * ringcc_comm_stats() (include/ringcc.h) and logged at destroy with
 * RINGCC_DEBUG=INFO.
 *
 * The executor's thread is the only writer; ringcc_comm_stats() may read
 * from another thread while a collective runs (as ringcc_comm_report may),
 * so every counter is written and read with relaxed atomics: on x86 and
 * ARM a plain load, add and store, the same instructions as without.
 *
 * What it costs: counting is a few additions per call and two per step;
 * timing (RINGCC_STATS=time, or RINGCC_TRACE, or RINGCC_DEBUG=INFO) reads
 * the clock twice per call and twice per wait, which an 8-byte AllReduce
 * between two ranks would feel (0.17 us a call, ~25 ns a read), so it is off
 * by default (docs/environment.md).
 */
#ifndef RCC_STATS_H
#define RCC_STATS_H

#include <stdint.h>

#include "ringcc.h"
#include "schedule.h"

struct ringcc_comm;

/* The calls of one (collective, algorithm) pair. */
struct rcc_stats_row {
  uint64_t calls;
  uint64_t bytes;   /* S of the calls, in nccl-tests' convention */
  uint64_t sent;    /* bytes this rank sent to its peers during them */
  uint64_t time_ns; /* time inside them (timing on) */
  uint64_t wait_ns; /* of which waiting for peers (timing on) */
};

/* This rank's traffic with one peer. */
struct rcc_stats_edge {
  uint64_t sent;         /* bytes sent to the peer */
  uint64_t received;     /* bytes received from it */
  uint64_t send_wait_ns; /* waiting for a free slot toward it (timing on) */
  uint64_t recv_wait_ns; /* waiting for its data (timing on) */
};

struct rcc_stats {
  int timing;          /* calls and waits are timed */
  int live;            /* init finished: counting the user's calls */
  uint64_t sent_total; /* all edges: a call's share is the difference */
  uint64_t wait_total; /* ns, all waits */
  uint64_t landed;     /* bytes received over the network straight into
                          the caller's buffer (net.h: land) */
  uint64_t board;      /* bytes of one-shot board calls: every peer read
                          that many from this rank's region, and this rank
                          as many from each peer's (added to every edge
                          when read, so a call costs one addition) */
  struct rcc_stats_row row[RCC_NUM_COLLS][RCC_NUM_ALGS];
  struct rcc_stats_edge *edge; /* [nranks] */
};

/* Adds to a counter that another thread may read (relaxed atomics). */
static inline void rcc_stats_add(uint64_t *counter, uint64_t v) {
  __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + v,
                   __ATOMIC_RELAXED);
}

static inline void rcc_stats_sent(struct rcc_stats *st, int peer,
                                  uint64_t bytes) {
  rcc_stats_add(&st->edge[peer].sent, bytes);
  rcc_stats_add(&st->sent_total, bytes);
}

static inline void rcc_stats_received(struct rcc_stats *st, int peer,
                                      uint64_t bytes) {
  rcc_stats_add(&st->edge[peer].received, bytes);
}

/* A wait of ns on the edge to or from peer (send: for a free slot). */
static inline void rcc_stats_waited(struct rcc_stats *st, int peer, int send,
                                    int64_t ns) {
  if (peer >= 0)
    rcc_stats_add(send ? &st->edge[peer].send_wait_ns
                       : &st->edge[peer].recv_wait_ns,
                  (uint64_t)ns);
  rcc_stats_add(&st->wait_total, (uint64_t)ns);
}

/* Allocates comm->stats, zeroed and untimed, before init's first use of
 * the FIFOs: RINGCC_SUCCESS or RINGCC_ERR_OUT_OF_MEMORY. */
ringcc_result_t rcc_stats_create(struct ringcc_comm *comm);
/* Zeroes the counters and starts counting the user's calls, timed or not
 * (RINGCC_STATS=time, RINGCC_TRACE, RINGCC_DEBUG=INFO): the end of a
 * successful init (its own traffic is not the user's). */
void rcc_stats_start(struct ringcc_comm *comm);
/* At destroy, with RINGCC_DEBUG=INFO: the summary lines (of a
 * communicator whose init finished). Then frees. */
void rcc_stats_destroy(struct ringcc_comm *comm);

/* A one-shot AllReduce of bytes on the board, n ranks. */
static inline void rcc_stats_board(struct rcc_stats *st, uint64_t bytes,
                                   int n) {
  rcc_stats_add(&st->board, bytes);
  rcc_stats_add(&st->sent_total, bytes * (uint64_t)(n - 1));
}

/* Around one call (coll.c): a mark before it, then the call counted in the
 * row of (coll, alg) (alg < 0: the call ran no algorithm; not counted).
 * Inline: an 8-byte call pays a few loads and additions. */
struct rcc_stats_mark {
  uint64_t sent; /* sent_total before the call */
  int64_t t0;    /* timing only: the clock before it */
  uint64_t wait; /* timing only: wait_total before it */
};
static inline void rcc_stats_count(struct rcc_stats *st, int coll, int alg,
                                   uint64_t bytes,
                                   const struct rcc_stats_mark *m) {
  if (alg < 0)
    return;
  struct rcc_stats_row *row = &st->row[coll][alg];
  rcc_stats_add(&row->calls, 1);
  rcc_stats_add(&row->bytes, bytes);
  rcc_stats_add(&row->sent, st->sent_total - m->sent);
}
/* Timing: the mark's clock and wait (begin), then the call's time and wait
 * added to its row; returns the end time. */
void rcc_stats_time_begin(struct rcc_stats *st, struct rcc_stats_mark *m);
int64_t rcc_stats_time_end(struct rcc_stats *st, int coll, int alg,
                           const struct rcc_stats_mark *m);

/* The summary as text: "12 calls, ...; allreduce/ring ...", lines ending in
 * '\n', for the INFO log and tests. */
void rcc_stats_format(const struct ringcc_comm *comm, char *buf, size_t len);

#endif /* RCC_STATS_H */
