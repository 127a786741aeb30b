/*
 * exec_host.h - the host executor's state (struct exec) and what its two
 * files share: exec_host.c (collectives, channels, a group's sends and
 * receives) and exec_recv_from.c (receives from any source, or of at most
 * count). Each includes it first: it points the FIFO protocol's hooks
 * (proto.h) at the host's waits.
 */
#ifndef RCC_EXEC_HOST_H
#define RCC_EXEC_HOST_H

#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RCC_HD
#define RCC_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define RCC_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define RCC_PROTO_WAIT(ctx, word, waiters, old)                                \
  rcc_host_wait((struct exec *)(ctx), (word), (waiters), (old))
#define RCC_PROTO_WAKE(conn, word, waiters)                                    \
  rcc_host_wake((conn), (word), (waiters))

struct exec;
struct rcc_conn;
/* Blocks while *word == old (deadline, abort, a dead or departed peer end
 * it with their error); 0 once it changed. */
int rcc_host_wait(struct exec *x, uint32_t *word, uint32_t *waiters,
                  uint32_t old);
/* Wakes the sleepers on word after a publish (or hands the slot to c's
 * engine). */
void rcc_host_wake(const struct rcc_conn *c, uint32_t *word,
                   uint32_t *waiters);

#include "comm.h"
#include "exec.h"
#include "fifo.h"
#include "proto.h"
#include "reduce.h"
#include "schedule.h"
#include "stats.h"

/* A network send from the user's memory, pending until the FIFO's head
 * reaches seq. */
struct lent_send {
  const char *p;
  size_t len;
  struct rcc_conn *conn;
  uint32_t seq;
};

struct land {
  struct rcc_conn *conn;
  uint32_t seq; /* the message: conn's FIFO sequence number */
  char *p;
};

#define RCC_HELD_MAX 16 /* connections with sends held at once (exec.hold) */

struct exec {
  struct ringcc_comm *comm;
  const struct rcc_plan *plan;
  const char *src;
  char *dst;
  size_t esize;
  ringcc_datatype_t dt;
  rcc_reduce_fn reduce;
  int64_t deadline; /* 0 until the first sleep (no clock read per call) */
  struct rcc_progress *at; /* == &comm->progress */
  int lending;             /* network sends may come from src and dst */
  int nlent;
  struct lent_send *lent; /* LENT_MAX entries, nlent in use (not zeroed
                             per call) */
  /* Network sends lent from the user's buffers that wait for the next ones
   * (published_later, proto.h): only the single-channel loop holds them,
   * and it flushes their connections before every step but another such
   * send, and at the end. */
  int hold;
  int nheld;
  struct rcc_conn *held[RCC_HELD_MAX];
  int land;           /* network receives may land in dst */
  int nland;
  struct land *lands; /* LAND_MAX entries, nland in use */
  /* The steps land_ahead looked at last: steps ahead_at .. ahead_at +
   * nahead - 1 of the plan (LAND_AHEAD entries), kept for its next look,
   * which starts a step or a few later (a step of AllToAllv's schedule costs
   * a search over its layers). */
  struct rcc_step *ahead;
  uint64_t ahead_at;
  int nahead;
  uint64_t clear; /* bit a: ahead[a] checked clear of the steps before it */
  int channel;        /* of the plan running: which FIFOs its steps use */
  struct rcc_stats *stats; /* bytes per edge; waits when timing */
  int timing;              /* waits are timed (stats.h) */
  int64_t wait_recv_ns;    /* the current step's waits, when timing */
  int64_t wait_send_ns;
  int grouped;             /* point-to-point of a group (rcc_exec_host_p2p) */
  struct rcc_p2p_op *p2p;  /* rcc_exec_host_p2p's operations, one a channel */
  int allowed;             /* holds the ptrace exception (p2p_place.h) */
  /* A point-to-point receive whose message does not match (check_meta): the
   * meta word of the piece at its FIFO's head, not taken yet. */
  int misfit;
  uint64_t misfit_meta;
  /* The first failure of a point-to-point run that left its FIFO in a known
   * state (local, below), and its message; the others run on. */
  ringcc_result_t local;
  char *local_msg; /* RCC_ERRLEN bytes, where a run may fail locally */
  int nplaced; /* point-to-point channels whose message, sent as its place,
                  is not acknowledged yet (exec_host.c: placed_collect) */
  /* The word the current wait watches and its value before it, or NULL
   * (rcc_host_wait_failed: a change meanwhile is progress, never a
   * failure). */
  const uint32_t *wait_word;
  uint32_t wait_old;
};

/* The checks a wait runs after each sleep (abort, a goodbye or the death
 * of the peer waited for, a network error, the deadline): 0 or the error. */
int rcc_host_wait_failed(struct exec *x);
/* Hands the engine serving comm's network FIFOs its sockets for the run. */
void rcc_host_release_engines(struct ringcc_comm *comm);
/* Takes and drops the piece at rc's head (its meta word), of a message
 * that does not match its receive; *last: it was the message's last. */
ringcc_result_t rcc_host_drop_piece(struct exec *x, struct rcc_conn *rc,
                                    uint64_t meta, int *last);

/* Records what this rank is about to wait for (the hang report reads it). */
static inline void waiting_on(struct exec *x, const char *what, int peer,
                              const struct rcc_conn *conn, int send) {
  RCC_PUT(x->at->waiting_for, what);
  RCC_PUT(x->at->peer, peer);
  RCC_PUT(x->at->conn, conn);
  RCC_PUT(x->at->waiting_send, send);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static inline long futex(uint32_t *word, int op, uint32_t val,
                  const struct timespec *ts) {
  return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

static inline void copy_bytes(void *dst, const void *src, size_t bytes) {
  if (dst != src && bytes > 0)
    memcpy(dst, src, bytes);
}

/* 1 if the FIFO a step half waits on is ready for it. */
static inline int slot_ready(const struct rcc_conn *c, int send) {
  if (send)
    return (uint32_t)(c->step - __atomic_load_n(&c->fifo->head,
                                                __ATOMIC_ACQUIRE)) < c->nslots;
  return __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE) != c->step;
}

#endif /* RCC_EXEC_HOST_H */
