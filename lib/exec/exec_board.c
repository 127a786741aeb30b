/*
 * exec_board.c - the one-shot AllReduce over the board.
 *
 * Where every rank maps every rank's shared-memory segment (comm->board),
 * the one-shot needs no FIFOs: each rank copies its input into its own board
 * region and publishes it with the call's sequence number, then reads every
 * rank's region in rank order, reducing into dst, exactly as the FIFO
 * schedule (oneshot.c) does: the same operands in the same order on
 * every rank, so every rank gets the same bits.
 *
 * Two regions alternate between calls. A rank that starts call s has read
 * every rank's region of call s-1, so every rank has started s-1 and has
 * therefore finished s-2, whose region this call reuses: no rank still
 * reads it, and no acknowledgement is needed. Per call a rank hands one
 * cache line to its peers and takes n-1 (for 8 bytes: the header and the
 * data share a line), where the FIFOs move a slot, a tail and a head per
 * peer each way. A failed call leaves the communicator unusable (coll.c),
 * so the sequence numbers never disagree between calls that succeed.
 *
 * Waits are the FIFOs' (rcc_exec_host_wait): bounded by the deadline, ended
 * by abort or a dead peer, named in the hang report.
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "algorithms.h"
#include "board.h"
#include "clock.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "fifo.h"
#include "reduce.h"
#include "stats.h"
#include "trace.h"

/* Step k of the board (reading rank k's region), for the trace. */
static void board_traced(struct ringcc_comm *comm, const struct rcc_plan *plan,
                         int k, int64_t t0, int64_t waited, size_t bytes) {
  struct rcc_trace_event e;
  memset(&e, 0, sizeof(e));
  e.type = RCC_TRACE_STEP;
  e.kind = k == 0 ? RCC_STEP_RECV : RCC_STEP_RECV_REDUCE_COPY;
  e.coll = (uint8_t)plan->coll;
  e.alg = RCC_ALG_BOARD;
  e.seq = comm->seq;
  e.step = (uint64_t)k;
  e.nsteps = (uint64_t)comm->nranks;
  e.nelem = plan->count;
  e.bytes = bytes;
  e.block = k;
  e.send_peer = -1;
  e.recv_peer = k == comm->rank ? -1 : k;
  e.send_msg = e.recv_msg = UINT32_MAX; /* no FIFO: no message numbers */
  e.start_ns = t0;
  e.end_ns = rcc_now_ns();
  e.wait_recv_ns = waited;
  rcc_trace_record(comm, &e);
}

ringcc_result_t rcc_exec_host_board(struct ringcc_comm *comm,
                                    const struct rcc_plan *plan,
                                    const void *src, void *dst,
                                    ringcc_datatype_t dt, ringcc_op_t op) {
  struct rcc_progress *at = &comm->progress;
  rcc_reduce_fn reduce = rcc_reduce_get(dt, op);
  int n = comm->nranks;
  size_t bytes = plan->count * ringcc_datatype_size(dt);
  uint32_t seq = ++comm->board->seq;
  struct rcc_board *mine = rcc_board_region(comm, comm->rank, seq);
  int64_t deadline = 0; /* the call's, from its first sleep */
  ringcc_result_t r = RINGCC_SUCCESS;

  RCC_PUT(at->coll, plan->coll);
  RCC_PUT(at->alg, (int)RCC_ALG_BOARD);
  RCC_PUT(at->nsteps, (uint64_t)n);
  RCC_PUT(at->block, comm->rank);
  RCC_PUT(at->nelem, plan->count);
  RCC_PUT(at->kind, (int)RCC_STEP_RECV_REDUCE_COPY);
  RCC_PUT(at->waiting_for, "nothing");
  RCC_PUT(at->peer, -1);
  RCC_PUT(at->conn, NULL);
  RCC_PUT(at->waiting_send, 0);
  RCC_PUT(at->board_want, seq);
  RCC_PUT(at->active, 1);

  size_t data = RCC_BOARD_DATA_OFFSET(bytes);
  memcpy((char *)mine + data, src, bytes);
  mine->bytes = bytes;
  __atomic_store_n(&mine->seq, seq, __ATOMIC_RELEASE);
  /* As a FIFO publish: the store before reading waiters, so a sleeper that
   * counted itself in is never missed. */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&mine->waiters, __ATOMIC_RELAXED) != 0)
    syscall(SYS_futex, &mine->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);

  int traced = comm->trace != NULL;
  for (int k = 0; k < n && r == RINGCC_SUCCESS; k++) {
    const struct rcc_board *b = rcc_board_region(comm, k, seq);
    uint32_t now;
    int64_t t0 = traced ? rcc_now_ns() : 0, waited = 0;
    RCC_PUT(at->step, (uint64_t)k);
    /* The FIFO from rank k: where it writes the news of a dead rank. */
    RCC_PUT(at->waiting_for, "data from");
    RCC_PUT(at->peer, k);
    RCC_PUT(at->conn, rcc_recv_conn(comm, RCC_CONN_COLL, 0, k));
    RCC_PUT(at->board_seq, &b->seq);
    if ((now = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE)) != seq) {
      int64_t w0 = traced ? rcc_now_ns() : 0;
      do
        r = rcc_exec_host_wait(comm, plan, (uint32_t *)&b->seq,
                               (uint32_t *)&b->waiters, now, &deadline);
      while (r == RINGCC_SUCCESS &&
             (now = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE)) != seq);
      if (traced)
        waited = rcc_now_ns() - w0;
    }
    if (r != RINGCC_SUCCESS) {
      if (traced) /* the step where the call stopped */
        board_traced(comm, plan, k, t0, waited, bytes);
      break;
    }
    if (b->bytes != bytes) {
      r = rcc_comm_error(
          comm, RINGCC_ERR_INVALID_USAGE,
          "%s (seq %llu) on rank %d: rank %d gave %llu bytes to the one-shot "
          "where %zu were expected (do all ranks call the same collective "
          "with the same count and datatype?)",
          rcc_coll_name(plan->coll), (unsigned long long)comm->seq,
          comm->rank, k, (unsigned long long)b->bytes, bytes);
      break;
    }
    const char *in = (const char *)b + data;
    if (k == 0)
      memcpy(dst, in, bytes);
    else
      reduce(dst, dst, in, plan->count);
    if (traced)
      board_traced(comm, plan, k, t0, waited, bytes);
  }
  if (r == RINGCC_SUCCESS) /* each peer read this rank's region, and it
                              each peer's */
    rcc_stats_board(comm->stats, bytes, n);
  if (r == RINGCC_SUCCESS && plan->postop)
    rcc_reduce_avg_finish(dt, dst, dst, plan->count, n);
  RCC_PUT(at->board_seq, NULL);
  RCC_PUT(at->active, 0);
  return r;
}
