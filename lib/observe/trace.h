/*
 * trace.h - RINGCC_TRACE=DIR: every step a collective executed, per rank,
 * in the Chrome trace-event JSON that Perfetto and chrome://tracing open
 * (trace.c).
 *
 * The executors record one event per step (its kind, peers, bytes, and the
 * time it waited for each peer before working) and coll.c one per call,
 * into a ring buffer of RINGCC_TRACE_EVENTS events per rank (the oldest are
 * overwritten). The buffer is written to DIR at ringcc_comm_destroy, after
 * a failed call, and when the process gets RINGCC_REPORT_SIGNAL; each write
 * replaces the rank's file with the buffer's current content.
 *
 * Off (no RINGCC_TRACE), comm->trace is NULL and the executor pays one
 * predictable branch per step; on, two clock reads and a copy of ~100
 * bytes per step (docs/environment.md has the measurement).
 *
 * Only the thread running the communicator's collective records and
 * flushes (a communicator is used by one thread at a time; the signal
 * handler only counts signals, report.c), so the buffer needs no lock.
 */
#ifndef RCC_TRACE_H
#define RCC_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;

enum rcc_trace_type { RCC_TRACE_STEP, RCC_TRACE_CALL };

struct rcc_trace_event {
  int64_t start_ns, end_ns;   /* this rank's CLOCK_MONOTONIC */
  int64_t wait_recv_ns;       /* waiting for the incoming data */
  int64_t wait_send_ns;       /* waiting for a free slot, or for sends
                                 from the user's buffer to leave */
  uint64_t seq;               /* the call's sequence number */
  uint64_t step, nsteps;      /* a step: its index in the plan, the plan's
                                 length */
  uint64_t bytes;             /* a step: bytes moved; a call: S */
  uint64_t nelem;             /* a step: elements */
  int32_t send_peer, recv_peer; /* -1: none */
  int32_t block;
  uint32_t send_msg, recv_msg;  /* the FIFO's message numbers: the same
                                   on both ends (flow arrows) */
  uint8_t type;               /* enum rcc_trace_type */
  uint8_t kind;               /* a step: enum rcc_step_kind */
  uint8_t coll, alg;          /* enum rcc_coll, enum rcc_alg */
  uint8_t conn_kind;          /* enum rcc_conn_kind */
  uint8_t channel;            /* of the call's channels (tuning.md) */
  int8_t result;              /* a call: ringcc_result_t */
};

/* How this rank's clock relates to rank 0's (measured at init). */
struct rcc_clock_offset {
  int64_t offset_ns; /* this rank's clock minus rank 0's */
  int64_t error_ns;  /* |error| at most this (half the best round trip) */
  int measured;      /* 0: the same host as rank 0, one clock: exact */
  int rounds;        /* round trips measured */
};

/* Whether this rank traces (RINGCC_TRACE is set): a random non-zero id for
 * the peer info, else 0. */
uint64_t rcc_trace_id(void);
/* Makes comm->trace where RINGCC_TRACE is set on this rank: the buffer,
 * the file name (DIR/ringcc-trace-ID-rRANK.json, ID the communicator's,
 * the same on every rank), the clock offset. */
ringcc_result_t rcc_trace_open(struct ringcc_comm *comm,
                               const struct rcc_clock_offset *clock);
/* Writes the file (why: "destroy", "error", "signal") and frees. */
void rcc_trace_close(struct ringcc_comm *comm);

/* Records one event (the oldest is overwritten when the buffer is full). */
void rcc_trace_record(struct ringcc_comm *comm,
                      const struct rcc_trace_event *e);
/* One call, from t0 to t1. */
void rcc_trace_call(struct ringcc_comm *comm, int coll, int alg,
                    uint64_t bytes, int64_t t0, int64_t t1,
                    ringcc_result_t result);
/* Writes the buffer to the rank's file now; why is recorded in it. */
void rcc_trace_flush(struct ringcc_comm *comm, const char *why);
/* Flushes if RINGCC_REPORT_SIGNAL arrived since the last look. */
void rcc_trace_poll_signal(struct ringcc_comm *comm);

/* Events recorded since init (also those overwritten since) and a copy of
 * event i (0 = the oldest still held); for tests. */
uint64_t rcc_trace_count(const struct ringcc_comm *comm);
int rcc_trace_get(const struct ringcc_comm *comm, uint64_t i,
                  struct rcc_trace_event *e);

#endif /* RCC_TRACE_H */
