/*
 * report.c - the hang report: where a rank stands in a collective.
 *
 * Printed at WARN when a deadline passes, on demand through
 * ringcc_comm_report(), and when the process receives the signal named by
 * RINGCC_REPORT_SIGNAL (e.g. USR1): the handler only raises a flag; the
 * waiting thread prints at its next wake-up (within 20 ms), since formatting
 * is not async-signal-safe.
 *
 *   rank 2: allreduce seq 17, ring, step 35 of 63: recvReduceSend block 1,
 *     16384 elements; waiting for data from rank 1
 *     from rank 1: tail 12 head 12 (0 of 8 slots full)
 *
 * It may run in another thread than the collective's: it reads the progress
 * record with relaxed atomic loads (comm.h).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "algorithms.h"
#include "comm.h"
#include "env.h"
#include "error.h"
#include "fifo.h"
#include "live.h"
#include "log.h"

/* Signals received: counted by the handler, read by the threads that run
 * collectives (lock-free atomics are async-signal-safe). */
static int report_generation;

static void on_signal(int sig) {
  (void)sig;
  __atomic_fetch_add(&report_generation, 1, __ATOMIC_RELAXED);
}

void rcc_report_signal_setup(void) {
  const char *name = rcc_getenv("RINGCC_REPORT_SIGNAL");
  static const struct {
    const char *name;
    int sig;
  } signals[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"SIGUSR1", SIGUSR1},
                 {"SIGUSR2", SIGUSR2}};
  if (name == NULL)
    return;
  for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
    if (strcasecmp(name, signals[i].name) == 0) {
      struct sigaction sa;
      memset(&sa, 0, sizeof(sa));
      sa.sa_handler = on_signal;
      sa.sa_flags = SA_RESTART;
      sigemptyset(&sa.sa_mask);
      sigaction(signals[i].sig, &sa, NULL);
      RCC_INFO(-1, "hang report on signal %s", signals[i].name);
      return;
    }
  RCC_WARN(-1, "RINGCC_REPORT_SIGNAL=%s is not USR1 or USR2; no report signal",
            name);
}

int rcc_report_signals(void) {
  return __atomic_load_n(&report_generation, __ATOMIC_RELAXED);
}

int rcc_report_requested(struct ringcc_comm *comm) {
  int gen = rcc_report_signals();
  if (gen == comm->report_seen)
    return 0;
  comm->report_seen = gen;
  return 1;
}


void rcc_report_format(const struct ringcc_comm *comm, char *buf, size_t len) {
  const struct rcc_progress *at = &comm->progress;
  unsigned long long seq = RCC_GET(comm->seq);
  int off;

  if (!RCC_GET(at->active)) {
    snprintf(buf, len, "  rank %d: idle (last collective: seq %llu)",
             comm->rank, seq);
    return;
  }
  int peer = RCC_GET(at->peer);
  struct rcc_step_label step = {
      .coll = RCC_GET(at->coll), .seq = seq, .alg = RCC_GET(at->alg), .channel = RCC_GET(at->channel),
      .step = RCC_GET(at->step), .nsteps = RCC_GET(at->nsteps),
      .kind = RCC_GET(at->kind), .block = RCC_GET(at->block),
      .nelem = RCC_GET(at->nelem)};
  off = snprintf(buf, len, "  rank %d: ", comm->rank);
  if (off >= 0 && (size_t)off < len)
    off += rcc_step_describe(buf + off, len - (size_t)off, &step);
  if (peer >= 0 && off >= 0 && (size_t)off < len)
    off += snprintf(buf + off, len - (size_t)off, "; waiting for %s rank %d",
                    RCC_GET(at->waiting_for), peer);
  const struct rcc_conn *conn = RCC_GET(at->conn);
  const uint32_t *board = RCC_GET(at->board_seq);
  if (peer >= 0 && board && off >= 0 && (size_t)off < len) {
    snprintf(buf + off, len - (size_t)off,
             "\n    %sboard of rank %d: holds its call %u, this rank waits for "
             "call %u",
             step.alg == RCC_ALG_ZEROCOPY || step.alg == RCC_ALG_HIER
                 ? "zero-copy "
                 : "",
             peer, __atomic_load_n(board, __ATOMIC_ACQUIRE),
             RCC_GET(at->board_want));
    return;
  }
  if (peer >= 0 && conn && conn->fifo && off >= 0 && (size_t)off < len) {
    const struct rcc_fifo *f = conn->fifo;
    uint32_t tail = __atomic_load_n(&f->tail, __ATOMIC_ACQUIRE);
    uint32_t head = __atomic_load_n(&f->head, __ATOMIC_ACQUIRE);
    snprintf(buf + off, len - (size_t)off,
             "\n    %s rank %d: tail %u head %u (%u of %u slots full)",
             RCC_GET(at->waiting_send) ? "to" : "from", peer, tail, head,
             tail - head, conn->nslots);
  }
}

RINGCC_API ringcc_result_t ringcc_comm_report(ringcc_comm_t comm, char *buf,
                                              size_t len) {
  ringcc_result_t r = rcc_comm_enter(comm, "ringcc_comm_report",
                                     RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  if (buf == NULL || len == 0)
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "ringcc_comm_report: argument 'buf' is NULL or 'len' "
                       "is 0");
  else
    rcc_report_format(comm, buf, len);
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}
