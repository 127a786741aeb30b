/*
 * exec_a2av.c - AllToAllv on one host, each large block read in place by
 * its receiver: one copy per byte, where the FIFOs' pairwise exchange
 * copies every byte into a slot and out of it.
 *
 * Where every rank maps every rank's board (board.h: the one-shot board,
 * in the shared-memory segments), a call is one round on it, with no
 * pairwise steps: call s (the board's sequence number, shared with the
 * one-shot AllReduce) runs
 *
 *   1. arrive: the rank writes into its board region s & 1 one place per
 *      peer (struct place: the bytes it sends that peer and those it
 *      expects from it, and how the block comes): a block of at most
 *      RCC_A2AV_INLINE_MAX bytes copied into the region while it has room,
 *      a larger one as its address (for cross-memory attach) and its
 *      registration slot and offset (where the sender registered the
 *      memory), or, readable neither way, "through the FIFOs"; then s in
 *      the region's seq word (release; a futex word, as the FIFOs'). A
 *      sender of addresses holds a share of the ptrace exception from here
 *      (rcc_cma_allow_peers) to the end of the call;
 *   2. read: it copies its own block, then takes each peer's place for it
 *      in the order the peers arrive (polling them all, yielding between
 *      looks where none has arrived, then sleeping on one): checks that the
 *      sizes agree both ways (both ends of the pair see the same two
 *      numbers, so both fail alike and neither touches that block), and
 *      copies the block out of the region, from the sender's registered
 *      memory as mapped here (registry.h; memcpy, no page pinned), or
 *      through cross-memory attach (process_vm_readv, exec_cma.c);
 *   3. done: s ^ RCC_A2AV_DONE in its seq word, whatever happened in 2;
 *   4. blocks readable neither way (the sender's memory not registered
 *      where cross-memory attach is not allowed) follow through the FIFOs'
 *      pairwise exchange (only pairs with such a block take part);
 *   5. it waits for the done word of every peer that reads its memory in
 *      place, and returns only then: its buffer is the caller's again.
 *
 * Why two regions are enough, and every seq word can be compared for
 * equality: a rank enters call s+1 only after 2 of call s (it has seen
 * every peer arrive at s) and 5 (the peers reading it are done), so while a
 * rank is in call s every peer's region s & 1 holds s or s ^ DONE, never
 * s+2; a peer's done word is not overwritten before the rank has seen it
 * (the peer needs this rank's arrival at s+1 to start s+2). Each wait is
 * the FIFOs' (rcc_exec_host_wait): bounded by the deadline, ended by abort,
 * a dead peer noticed by its pid (at the latest one sleep slice after it
 * died) or by the news in the FIFO from the peer waited for, whose board
 * words a survivor that learns of a death wakes (comm->lost_wake). Per
 * call a rank hands its
 * peers two words and takes 2(n-1) at most, where the pairwise exchange
 * below takes 2(n-1) sequential hand-offs, each of which may wait for a
 * descheduled peer where ranks outnumber cores.
 *
 * Without the board (ranks that do not all map each other's segments), or
 * where a region cannot hold n places (RINGCC_CHUNK_BYTES tiny), the same
 * phases run as pairwise exchanges over the FIFOs (direct.c): the first
 * carries small blocks as they are and large ones as places (both ends of
 * a pair know the block's size, the sender's sendcounts and the receiver's
 * recvcounts, so both know which form it takes, and the place lands in the
 * receive buffer where the block goes: a large block has room); phase 4 as
 * above; then one byte back from every reader to each sender it read in
 * place. A phase in which a rank has nothing to send or receive is
 * skipped: its peers have nothing for it either (the counts agree
 * pairwise). A rank that sends large blocks packs its small blocks and
 * places into staging (the FIFO plan has one send buffer); the large blocks
 * are never copied there.
 *
 * Whichever runs, the choice is alike on every rank (the board and the
 * region size are agreed at init), whatever the counts: ranks send
 * different sums, so a choice by size would split them.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "a2av.h"
#include "board.h"
#include "clock.h"
#include "copy.h"
#include "cma.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "failure.h"
#include "fifo.h"
#include "registry.h"
#include "stats.h"
#include "thp.h"
#include "topo.h"
#include "trace.h"
#include "tsan_sync.h"

/* How a block comes to its receiver. */
enum form { FORM_NONE, FORM_INLINE, FORM_READ, FORM_FIFO };

/* What a block's receiver learns of it (from the sender's board region, or,
 * without the board, in the first pairwise exchange). */
struct place {
  uint64_t bytes; /* the sender sends the receiver */
  uint64_t want;  /* the sender expects from the receiver (board only) */
  uint64_t addr;  /* FORM_READ: in the sender's address space, 0: not for
                     cma; FORM_INLINE: offset in the sender's region */
  uint64_t off;   /* in registration slot */
  uint32_t slot;  /* RCC_ZC_NO_SLOT: not registered */
  uint32_t form;  /* enum form */
};

/* A rank's seq word on the board once it has read its blocks of call s:
 * s ^ RCC_A2AV_DONE (never another call's s while both can be seen). */
#define RCC_A2AV_DONE 0x80000000u

struct a2av {
  struct ringcc_comm *comm;
  const struct rcc_a2av *v;
  struct rcc_plan plan; /* what the board's waits report */
  int64_t deadline;     /* of the board's waits; 0 until the first sleep */
  int n, me, cma, zc;
  int nt; /* blocks copied into the receive buffer with non-temporal
             stores (copy.h) */
  int allowed; /* holds a share of the ptrace exception for the call */
  size_t *sc, *sd, *rc, *rd; /* the current phase's plan, in bytes */
  uint8_t *big_s, *big_r;    /* per peer: FORM_READ, FORM_FIFO, else 0 */
  uint8_t *ack_out, *ack_in; /* FIFOs: the last phase's bytes, one per peer;
                                board: the peers read (ack_in) */
  char *pack;
  int mismatched; /* board: the only failure of reading the places was a
                     size that a pair of ranks does not agree on */
  const char *span_lo, *span_hi; /* the unregistered blocks peers read in
                                    place: from the first to the last end */
};

/* ---- what both ways share ---------------------------------------------- */

/* The place of a block of more than RCC_A2AV_INLINE_MAX bytes (or one the
 * board has no room for) that this rank sends peer p: read in place where
 * the peer can (the ptrace exception taken before the peer learns the
 * address), else through the FIFOs. */
static void place_large(struct a2av *a, int p, const char *block,
                        size_t bytes, struct place *w) {
  w->slot = RCC_ZC_NO_SLOT;
  w->addr = w->off = 0;
  if (a->zc)
    w->slot = rcc_registry_find(a->comm->registry, block, bytes, 0, &w->off);
  if (a->cma) {
    w->addr = (uint64_t)(uintptr_t)block;
    if (!a->allowed) /* peers read this buffer: before they learn it */
      rcc_cma_allow_peers(a->comm, a->allowed = 1);
    if (w->slot == RCC_ZC_NO_SLOT) { /* pinned by the reader */
      if (a->span_hi == NULL || block < a->span_lo)
        a->span_lo = block;
      if (a->span_hi == NULL || block + bytes > a->span_hi)
        a->span_hi = block + bytes;
    }
  }
  w->form = w->slot == RCC_ZC_NO_SLOT && !a->cma ? FORM_FIFO : FORM_READ;
  a->big_s[p] = (uint8_t)w->form;
}

/* Once every large block is placed, before the peers learn the addresses:
 * huge pages for the part of the send buffer they will read in place, as
 * one range (the blocks lie in one buffer; noted block by block, a block of
 * less than 4 MiB holds at most one whole huge page, often none). */
static void note_span(struct a2av *a) {
  if (a->span_hi != NULL)
    rcc_thp_note(a->comm, a->span_lo, (size_t)(a->span_hi - a->span_lo));
  a->span_lo = a->span_hi = NULL;
}

/* A block into the receive buffer, around the cache where the call is
 * large (a->nt). */
static void put(const struct a2av *a, void *to, const void *from,
                size_t bytes) {
  if (a->nt)
    rcc_nt_copy(to, from, bytes);
  else
    memcpy(to, from, bytes);
}

/* Reads rank p's block of bytes into `to` in place, as w says. */
static ringcc_result_t read_in_place(struct a2av *a, int p,
                                     const struct place *w, char *to,
                                     size_t bytes) {
  struct ringcc_comm *comm = a->comm;
  const char *mapped =
      w->slot != RCC_ZC_NO_SLOT && a->zc
          ? rcc_registry_peer(comm->registry, p, w->slot, w->off, bytes)
          : NULL;
  int e = 0;
  if (mapped != NULL) {
    rcc_stats_received(comm->stats, p, bytes);
    put(a, to, mapped, bytes);
  } else if (w->addr != 0 && a->cma) {
    e = rcc_cma_peer_copy(comm, p, to, w->addr, bytes, 0);
  } else {
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "ringcc_alltoallv on rank %d: rank %d's block of "
                          "%zu bytes (registration slot %u) is not mapped "
                          "here and cross-memory attach is not usable",
                          a->me, p, bytes, (unsigned)w->slot);
  }
  if (e != 0 && (e == ESRCH || !rcc_peer_alive(comm, p))) {
    rcc_peer_dead(comm, p, comm->rank); /* died or exited, not a bad read */
    return rcc_comm_error(comm, RINGCC_ERR_PEER_FAILED,
                          "ringcc_alltoallv on rank %d: rank %d (pid %d) is "
                          "gone while this rank read its block in place (%s)",
                          a->me, p, (int)comm->peers[p].pid, strerror(e));
  }
  if (e != 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "ringcc_alltoallv on rank %d: reading rank %d's "
                          "block (pid %d) failed: %s", a->me, p,
                          (int)comm->peers[p].pid, strerror(e));
  return RINGCC_SUCCESS;
}

/* A pairwise exchange of byte blocks over the FIFOs; nothing where this
 * rank has nothing to move (then neither have its peers for it). */
static ringcc_result_t exchange(struct a2av *a, const void *src, void *dst) {
  struct ringcc_comm *comm = a->comm;
  int any = 0;
  a->sc[a->me] = a->rc[a->me] = 0;
  a->sd[a->me] = a->rd[a->me] = 0;
  for (int p = 0; p < a->n; p++)
    any |= a->sc[p] > 0 || a->rc[p] > 0;
  if (!any)
    return RINGCC_SUCCESS;
  struct rcc_plan plan =
      rcc_exec_plan(comm, RCC_ALG_PAIRWISE_V, RCC_SCHED_DIRECT,
                    RCC_COLL_ALLTOALLV, 1, 1, 0, comm->all_chunk_bytes, -1);
  plan.counts = a->sc;
  plan.displs = a->sd;
  plan.recv_counts = a->rc;
  plan.recv_displs = a->rd;
  TSAN_RELEASE();
  ringcc_result_t r = rcc_exec_host_channels(comm, &plan, src, dst,
                                             RINGCC_UINT8, RINGCC_SUM);
  TSAN_ACQUIRE();
  return r;
}

/* Phase 4: the blocks readable neither way, through the FIFOs. */
static ringcc_result_t fifo_blocks(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  size_t es = v->esize;
  for (int p = 0; p < a->n; p++) {
    a->sc[p] = a->big_s[p] == FORM_FIFO ? v->sendcounts[p] * es : 0;
    a->sd[p] = v->sdispls[p] * es;
    a->rc[p] = a->big_r[p] == FORM_FIFO ? v->recvcounts[p] * es : 0;
    a->rd[p] = v->rdispls[p] * es;
  }
  return exchange(a, v->src, v->dst);
}

static void copy_own(const struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  char *own = (char *)v->dst + v->rdispls[a->me] * v->esize;
  const char *mine = (const char *)v->src + v->sdispls[a->me] * v->esize;
  if (v->recvcounts[a->me] > 0 && own != mine)
    put(a, own, mine, v->recvcounts[a->me] * v->esize);
}

/* ---- one round on the board ---------------------------------------------- */

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

/* The places' room at the start of a region's data. */
static size_t places_bytes(int n) {
  return align64((size_t)n * sizeof(struct place));
}

static struct place *places_of(const struct ringcc_comm *comm, int rank,
                               uint32_t seq) {
  return (struct place *)((char *)rcc_board_region(comm, rank, seq) +
                          RCC_BOARD_DATA_OFFSET(SIZE_MAX));
}

static void publish(struct rcc_board *b, uint32_t word) {
  TSAN_RELEASE(); /* what this rank did happens before a peer sees word */
  __atomic_store_n(&b->seq, word, __ATOMIC_RELEASE);
  /* As the FIFOs' publish: the store before reading waiters, so a sleeper
   * that counted itself in is never missed. */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(&b->waiters, __ATOMIC_RELAXED) != 0)
    syscall(SYS_futex, &b->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Waits until rank p's seq word is no longer `now` (which it was). */
static ringcc_result_t wait_change(struct a2av *a, int p, struct rcc_board *b,
                                   uint32_t now, uint32_t want,
                                   const char *what) {
  struct ringcc_comm *comm = a->comm;
  struct rcc_progress *at = &comm->progress;
  const struct rcc_conn *conn = rcc_recv_conn(comm, RCC_CONN_COLL, 0, p);
  RCC_PUT(at->waiting_for, what);
  RCC_PUT(at->peer, p);
  RCC_PUT(at->conn, conn->fifo != NULL && conn->ops == NULL ? conn : NULL);
  RCC_PUT(at->waiting_send, 0);
  RCC_PUT(at->board_seq, &b->seq);
  RCC_PUT(at->board_want, want);
  ringcc_result_t r = rcc_exec_host_wait(comm, &a->plan, &b->seq,
                                         &b->waiters, now, &a->deadline);
  RCC_PUT(at->board_seq, NULL);
  RCC_PUT(at->peer, -1);
  return r;
}

/* 1: this rank's places (and small blocks) in its region, then s. */
static void arrive(struct a2av *a, uint32_t seq) {
  const struct rcc_a2av *v = a->v;
  struct ringcc_comm *comm = a->comm;
  struct rcc_board *mine = rcc_board_region(comm, a->me, seq);
  struct place *pl = places_of(comm, a->me, seq);
  char *data = (char *)pl;
  size_t at = places_bytes(a->n), room = comm->board->bytes;
  for (int k = 0; k < a->n; k++) {
    int p = (a->me + k) % a->n;
    size_t bytes = v->sendcounts[p] * v->esize;
    const char *block = (const char *)v->src + v->sdispls[p] * v->esize;
    struct place w = {bytes, v->recvcounts[p] * v->esize, 0, 0,
                      RCC_ZC_NO_SLOT, FORM_NONE};
    if (p != a->me && bytes > 0) {
      if (bytes <= RCC_A2AV_INLINE_MAX && align64(bytes) <= room - at) {
        memcpy(data + at, block, bytes);
        rcc_stats_sent(comm->stats, p, bytes);
        w.addr = at;
        w.form = FORM_INLINE;
        at += align64(bytes);
      } else {
        place_large(a, p, block, bytes, &w);
      }
    }
    pl[p] = w;
  }
  note_span(a);
  mine->bytes = at;
  publish(mine, seq);
}

/* 2, for rank p (arrived): its block for this rank. */
static ringcc_result_t take(struct a2av *a, int p, uint32_t seq) {
  const struct rcc_a2av *v = a->v;
  struct ringcc_comm *comm = a->comm;
  const struct place *pl = places_of(comm, p, seq);
  struct place w = pl[a->me];
  size_t bytes = v->recvcounts[p] * v->esize;
  size_t sends = v->sendcounts[p] * v->esize;
  if (w.bytes != bytes || w.want != sends) {
    if (a->big_s[p] == FORM_FIFO) /* p sees it too and receives nothing */
      a->big_s[p] = 0;
    return rcc_comm_error(
        comm, RINGCC_ERR_INVALID_USAGE,
        "ringcc_alltoallv (seq %llu) on rank %d: rank %d sends it %llu bytes "
        "and expects %llu, where this rank expects %zu and sends %zu (do "
        "sendcounts and recvcounts agree pairwise, with the same datatype?)",
        (unsigned long long)comm->seq, a->me, p,
        (unsigned long long)w.bytes, (unsigned long long)w.want, bytes,
        sends);
  }
  char *to = (char *)v->dst + v->rdispls[p] * v->esize;
  a->big_r[p] = w.form == FORM_FIFO ? FORM_FIFO : 0;
  if (w.form == FORM_INLINE) {
    rcc_stats_received(comm->stats, p, bytes);
    memcpy(to, (const char *)pl + w.addr, bytes);
  } else if (w.form == FORM_READ) {
    return read_in_place(a, p, &w, to, bytes);
  }
  return RINGCC_SUCCESS;
}

/* Step k of the board round (rank p's block taken), for the trace: from
 * the end of the step before (t_wait), waiting until t0. */
static void traced(struct a2av *a, int k, int p, int64_t t_wait, int64_t t0) {
  struct rcc_trace_event e;
  memset(&e, 0, sizeof(e));
  e.type = RCC_TRACE_STEP;
  e.kind = RCC_STEP_RECV;
  e.coll = RCC_COLL_ALLTOALLV;
  e.alg = (uint8_t)(a->cma ? RCC_ALG_CMA : RCC_ALG_ZEROCOPY);
  e.seq = a->comm->seq;
  e.step = (uint64_t)k;
  e.nsteps = (uint64_t)a->n - 1;
  e.bytes = a->v->recvcounts[p] * a->v->esize;
  e.nelem = a->v->recvcounts[p];
  e.block = p;
  e.send_peer = -1;
  e.recv_peer = p;
  e.send_msg = e.recv_msg = UINT32_MAX; /* no FIFO: no message numbers */
  e.start_ns = t_wait;
  e.wait_recv_ns = t0 - t_wait;
  e.end_ns = rcc_now_ns();
  rcc_trace_record(a->comm, &e);
}

static int arrived(const struct ringcc_comm *comm, int p, uint32_t seq,
                   uint32_t *now) {
  *now = __atomic_load_n(&rcc_board_region(comm, p, seq)->seq,
                         __ATOMIC_ACQUIRE);
  return *now == seq || *now == (seq ^ RCC_A2AV_DONE);
}

/* 2: every peer's block for this rank, in the order they arrive. A size
 * that does not agree fails the call but not the reading of the others.
 * Where none has arrived, the rank yields and looks at them all again (as
 * many times as a FIFO wait yields: RINGCC_YIELDS) before it waits for one
 * as the FIFOs wait, so that a peer that is not running does not keep it
 * from the blocks of those that are. */
static ringcc_result_t read_all(struct a2av *a, uint32_t seq) {
  struct ringcc_comm *comm = a->comm;
  int n = a->n, left = n - 1, yields = comm->spin.yields;
  uint8_t *seen = a->ack_out;
  ringcc_result_t first = RINGCC_SUCCESS;
  int traced_here = comm->trace != NULL;
  int64_t t_wait = traced_here ? rcc_now_ns() : 0;
  memset(seen, 0, (size_t)n);
  while (left > 0) {
    int p = -1, wait = -1;
    uint32_t now = 0, wait_now = 0;
    for (int k = 1; k < n && p < 0; k++) {
      int q = (a->me + n - k) % n; /* each rank starts at another peer */
      if (seen[q])
        continue;
      if (arrived(comm, q, seq, &now))
        p = q;
      else if (wait < 0)
        wait = q, wait_now = now;
    }
    if (p < 0 && yields-- > 0) {
      sched_yield();
      continue;
    }
    if (p < 0) {
      ringcc_result_t r =
          wait_change(a, wait, rcc_board_region(comm, wait, seq), wait_now,
                      seq, "the places of");
      if (r != RINGCC_SUCCESS)
        return r;
      continue;
    }
    seen[p] = 1;
    left--;
    yields = comm->spin.yields;
    TSAN_ACQUIRE();
    RCC_PUT(comm->progress.step, (uint64_t)(n - left));
    int64_t t0 = traced_here ? rcc_now_ns() : 0;
    ringcc_result_t r = take(a, p, seq);
    if (traced_here) {
      traced(a, n - 1 - left, p, t_wait, t0);
      t_wait = rcc_now_ns();
    }
    if (r != RINGCC_SUCCESS && first == RINGCC_SUCCESS)
      first = r;
    if (r != RINGCC_SUCCESS && r != RINGCC_ERR_INVALID_USAGE)
      return r;
  }
  a->mismatched = first != RINGCC_SUCCESS; /* sizes only (take) */
  return first;
}

/* 5: the done word of every peer that reads this rank in place. */
static ringcc_result_t wait_readers(struct a2av *a, uint32_t seq) {
  struct ringcc_comm *comm = a->comm;
  uint32_t done = seq ^ RCC_A2AV_DONE, now;
  for (int p = 0; p < a->n; p++) {
    struct rcc_board *b = rcc_board_region(comm, p, seq);
    if (a->big_s[p] != FORM_READ)
      continue;
    while ((now = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE)) != done) {
      ringcc_result_t r = wait_change(a, p, b, now, done, "the done word of");
      if (r != RINGCC_SUCCESS)
        return r;
    }
  }
  TSAN_ACQUIRE();
  return RINGCC_SUCCESS;
}

static ringcc_result_t run_board(struct a2av *a) {
  struct ringcc_comm *comm = a->comm;
  uint32_t seq = ++comm->board->seq;
  struct rcc_progress *at = &comm->progress;
  RCC_PUT(at->coll, RCC_COLL_ALLTOALLV);
  RCC_PUT(at->alg, a->cma ? (int)RCC_ALG_CMA : (int)RCC_ALG_ZEROCOPY);
  RCC_PUT(at->nsteps, (uint64_t)a->n + 1);
  RCC_PUT(at->step, (uint64_t)0);
  RCC_PUT(at->block, a->me);
  RCC_PUT(at->kind, (int)RCC_STEP_NONE);
  RCC_PUT(at->peer, -1);
  RCC_PUT(at->active, 1);
  arrive(a, seq);
  copy_own(a);
  ringcc_result_t r = read_all(a, seq);
  publish(rcc_board_region(comm, a->me, seq), seq ^ RCC_A2AV_DONE);
  /* After a size mismatch (both ends of the pair saw it and move nothing
   * between them) the other pairs still move their blocks, so that no
   * rank waits for this one in the FIFOs. */
  ringcc_result_t f = RINGCC_SUCCESS;
  if (r == RINGCC_SUCCESS || r == RINGCC_ERR_INVALID_USAGE) {
    f = fifo_blocks(a);
    r = r != RINGCC_SUCCESS ? r : f;
  }
  ringcc_result_t w = wait_readers(a, seq);
  RCC_PUT(at->active, 0);
  /* Both ranks of each pair that disagree saw it, and every other block
   * moved: every FIFO and the board are where a correct call leaves them,
   * so the failure is local (docs/reliability.md). */
  if (r == RINGCC_ERR_INVALID_USAGE && a->mismatched &&
      f == RINGCC_SUCCESS && w == RINGCC_SUCCESS)
    comm->failed_locally = 1;
  return r != RINGCC_SUCCESS ? r : w;
}

/* ---- the pairwise exchanges over the FIFOs ------------------------------- */

/* Phase 1's send side: the plan, and the staging where a block is large. */
static ringcc_result_t plan_sends(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  size_t packed = 0;
  int any_big = 0;
  for (int p = 0; p < a->n; p++) {
    size_t bytes = v->sendcounts[p] * v->esize;
    int big = p != a->me && bytes > RCC_A2AV_INLINE_MAX;
    any_big |= big;
    if (p != a->me)
      packed += big ? sizeof(struct place) : bytes;
  }
  if (any_big && (a->pack = malloc(packed)) == NULL)
    return rcc_comm_error(a->comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_alltoallv on rank %d: no memory for %zu "
                          "bytes of staging", a->me, packed);
  size_t at = 0;
  for (int p = 0; p < a->n; p++) {
    size_t bytes = v->sendcounts[p] * v->esize;
    const char *block = (const char *)v->src + v->sdispls[p] * v->esize;
    a->sc[p] = bytes;
    a->sd[p] = v->sdispls[p] * v->esize;
    if (!any_big || p == a->me)
      continue;
    a->sd[p] = at;
    if (bytes > RCC_A2AV_INLINE_MAX) {
      struct place w = {bytes, 0, 0, 0, RCC_ZC_NO_SLOT, FORM_NONE};
      place_large(a, p, block, bytes, &w);
      memcpy(a->pack + at, &w, sizeof(w));
      a->sc[p] = sizeof(w);
    } else if (bytes > 0) {
      memcpy(a->pack + at, block, bytes);
    }
    at += a->sc[p];
  }
  note_span(a);
  return RINGCC_SUCCESS;
}

/* Phase 2: this rank's large blocks, read in place. */
static ringcc_result_t read_blocks(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  for (int k = 1; k < a->n; k++) {
    int p = (a->me + a->n - k) % a->n; /* each rank starts at another peer */
    size_t bytes = v->recvcounts[p] * v->esize;
    char *to = (char *)v->dst + v->rdispls[p] * v->esize;
    struct place w;
    if (!a->big_r[p])
      continue;
    memcpy(&w, to, sizeof(w));
    a->big_r[p] = (uint8_t)w.form;
    if (w.form == FORM_FIFO)
      continue;
    ringcc_result_t r = read_in_place(a, p, &w, to, bytes);
    if (r != RINGCC_SUCCESS)
      return r;
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t run_fifos(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  int n = a->n, me = a->me;
  size_t es = v->esize;
  ringcc_result_t r = plan_sends(a);
  if (r != RINGCC_SUCCESS)
    return r;
  for (int p = 0; p < n; p++) {
    size_t bytes = v->recvcounts[p] * es;
    a->big_r[p] = p != me && bytes > RCC_A2AV_INLINE_MAX;
    a->rc[p] = a->big_r[p] ? sizeof(struct place) : bytes;
    a->rd[p] = v->rdispls[p] * es;
  }
  copy_own(a);
  /* 1: small blocks and the places of large ones */
  if ((r = exchange(a, a->pack ? a->pack : v->src, v->dst)) != RINGCC_SUCCESS)
    return r;
  /* 2: large blocks read in place */
  if ((r = read_blocks(a)) != RINGCC_SUCCESS)
    return r;
  /* 3 (the board's 4): large blocks readable neither way */
  if ((r = fifo_blocks(a)) != RINGCC_SUCCESS)
    return r;
  /* 4: each block read in place, acknowledged to its sender */
  for (int p = 0; p < n; p++) {
    a->sc[p] = a->big_r[p] == FORM_READ;
    a->rc[p] = a->big_s[p] == FORM_READ;
    a->sd[p] = a->rd[p] = (size_t)p;
    a->ack_out[p] = 1;
  }
  return exchange(a, a->ack_out, a->ack_in);
}

/* The board, where there is one and a region holds n places. */
static int board_fits(const struct ringcc_comm *comm) {
  return comm->board != NULL &&
         rcc_board_bytes(comm) >= places_bytes(comm->nranks);
}

ringcc_result_t rcc_a2av_run(struct ringcc_comm *comm,
                             const struct rcc_a2av *v) {
  int n = comm->nranks;
  struct a2av a = {.comm = comm, .v = v, .n = n, .me = comm->rank,
                   .plan = {.coll = RCC_COLL_ALLTOALLV, .nranks = n,
                            .rank = comm->rank, .nsteps = (uint64_t)n + 1},
                   .cma = rcc_cma_usable(comm),
                   .zc = rcc_registry_kind(comm) == RCC_ZC_ONE_HOST};
  /* The per-peer plan (4n counts, 4n flags) lives with the communicator:
   * its calls that move data run one at a time (rcc_comm_enter refuses a
   * second thread's; a progress thread's batches run one after another,
   * and a blocking call waits for them), so one plan serves them all. */
  size_t cbytes = 4 * (size_t)n * sizeof(size_t), fbytes = 4 * (size_t)n;
  if (comm->a2av_scratch == NULL)
    comm->a2av_scratch = malloc(cbytes + fbytes);
  ringcc_result_t r;
  if (comm->a2av_scratch == NULL) {
    r = rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                       "ringcc_alltoallv on rank %d: out of memory", a.me);
  } else {
    size_t *counts = comm->a2av_scratch;
    uint8_t *flags = (uint8_t *)comm->a2av_scratch + cbytes;
    memset(comm->a2av_scratch, 0, cbytes + fbytes);
    a.sc = counts;
    a.sd = counts + n;
    a.rc = counts + 2 * n;
    a.rd = counts + 3 * n;
    a.big_s = flags;
    a.big_r = flags + n;
    a.ack_out = flags + 2 * n;
    a.ack_in = flags + 3 * n;
    /* Non-temporal stores once the call's traffic, all ranks together
     * (about n times this rank's), outgrows the caches, as exec_zc.c. */
    size_t in_bytes = 0;
    for (int p = 0; p < n; p++)
      in_bytes += v->recvcounts[p] * v->esize;
    a.nt = in_bytes * (size_t)n >= RCC_NT_MIN_FOOTPRINT;
    r = board_fits(comm) ? run_board(&a) : run_fifos(&a);
    if (a.nt)
      rcc_store_fence(); /* the buffer is the caller's again */
  }
  if (a.allowed) /* the readers are done, or the call failed */
    rcc_cma_allow_peers(comm, 0);
  free(a.pack);
  return r;
}
