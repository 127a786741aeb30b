/*
 * exec_host.c - runs a collective's schedule on the CPU, for host buffers.
 *
 * Step by step: wait for the incoming slot and/or a free outgoing slot (the
 * shared protocol of proto.h), move or reduce the data, publish. The fused
 * steps reduce straight from the incoming slot and the user's buffer into the
 * outgoing slot, so a ring step touches each byte once.
 *
 * The executor knows FIFOs only. A connection whose other end is an engine
 * (a thread that moves the slots over a network) has hooks (struct rcc_conn_ops, proto.h): the executor
 * hands each published slot to it, waits through it, and, where the engine
 * offers it, lends it the user's buffers: a send leaves straight from them
 * when the bytes are there already (a plain send, or what a step just wrote
 * to dst), and a receive whose bytes go to dst unchanged lands there. A lent
 * send is pending until the FIFO's head passes it; a step that would write
 * over its bytes waits for it first, and the call returns only when every
 * one has left (or, after a failure, the engine took its bytes back:
 * reclaim).
 *
 * Waiting on shared memory polls briefly, then yields the CPU, then sleeps on
 * the FIFO counter as a futex (the publisher wakes sleepers only when there
 * are any). Eight ranks on two cores therefore still make progress, and a
 * rank that sleeps wakes as soon as its data arrives. Sleeps are bounded so
 * the deadline and ringcc_comm_abort() are noticed.
 */
#include <errno.h>
#include <stdlib.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "exec_host.h"

#include "agree.h"
#include "algorithms.h"
#include "board.h"
#include "clock.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "failure.h"
#include "fifo.h"
#include "log.h"
#include "p2p_place.h"
#include "reduce.h"
#include "report.h"
#include "stats.h"
#include "trace.h"

#define SLEEP_SLICE_NS 20000000L /* re-check deadline and abort every 20 ms */
#define LENT_MAX 32 /* network sends lent the user's buffers, at once */
/* Receives landing in the user's buffers: at most LAND_MAX at once, found
 * looking LAND_AHEAD steps ahead, pieces of at least LAND_MIN_BYTES (below
 * that the copy they save costs less than looking for them). The look-ahead
 * covers the receives the engine posts ahead (RINGCC_NSLOTS per connection)
 * on the 7 connections of a Gather root at n = 8: a receive posted but not
 * landed may take its bytes into its slot, and a copy more
 * (docs/performance.md). */
#define LAND_MAX 64
#define LAND_AHEAD 64
#define LAND_MIN_BYTES 16384

/* The FIFOs of a step: its channel's for collectives; point-to-point
 * kinds have one channel. */
static struct rcc_conn *send_conn(const struct exec *x,
                                  const struct rcc_step *s) {
  int ch = s->conn_kind == RCC_CONN_COLL ? x->channel : 0;
  return rcc_send_conn(x->comm, s->conn_kind, ch, s->send_peer);
}
static struct rcc_conn *recv_conn(const struct exec *x,
                                  const struct rcc_step *s) {
  int ch = s->conn_kind == RCC_CONN_COLL ? x->channel : 0;
  return rcc_recv_conn(x->comm, s->conn_kind, ch, s->recv_peer);
}

void rcc_host_wake(const struct rcc_conn *c, uint32_t *word,
                      uint32_t *waiters) {
  if (c->ops != NULL) { /* an engine's FIFO: it takes the slot from here */
    c->ops->published((struct rcc_conn *)c);
    return;
  }
  /* Orders our publish before reading waiters; pairs with the waiter's
   * increment-then-recheck, so a sleeper is never missed. */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(waiters, __ATOMIC_RELAXED) != 0)
    futex(word, FUTEX_WAKE, INT_MAX, NULL);
}

/* What a timeout most often means, for the call that timed out. */
static const char *timeout_hint(const struct exec *x) {
  int p2p = x->plan->coll == RCC_COLL_SEND || x->plan->coll == RCC_COLL_RECV;
  if (!p2p)
    return "did every rank call it with the same arguments?";
  if (x->grouped)
    return "did the peer post the matching send or recv in its group?";
  return "a send waits for its receiver once the message outgrows the FIFO; "
         "two ranks that both send first deadlock: use a group "
         "(ringcc_group_start/end) to post sends and receives together";
}

/* Whether the peer at the other end of the FIFO waited on left in order
 * (its goodbye): on a receive, the FIFO says; on a send, any FIFO of a host
 * kind from that peer does (a rank says goodbye on all of them at once; a
 * link made on first use carries both ways). */
static int said_goodbye(const struct ringcc_comm *comm,
                        const struct rcc_conn *c, int send, int peer) {
  if (!send)
    return c->fifo != NULL &&
           __atomic_load_n(&c->fifo->closed, __ATOMIC_ACQUIRE);
  if (peer < 0 || peer == comm->rank)
    return 0;
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++) {
      const struct rcc_fifo *f = rcc_recv_conn(comm, k, ch, peer)->fifo;
      if (f != NULL && __atomic_load_n(&f->closed, __ATOMIC_ACQUIRE))
        return 1;
    }
  return 0;
}

int rcc_host_wait_failed(struct exec *x) {
  struct ringcc_comm *comm = x->comm;
  int revoked = __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE);
  if (comm->aborted || revoked)
    return rcc_comm_error(comm, RINGCC_ERR_ABORTED,
                          "%s (seq %llu) on rank %d: %s while waiting "
                          "for %s rank %d",
                          rcc_coll_name(x->plan->coll),
                          (unsigned long long)comm->seq, comm->rank,
                          revoked ? "revoked (ringcc_comm_revoke)"
                                  : "aborted",
                          x->at->waiting_for, x->at->peer);
  /* A FIFO closes (its sender's goodbye: net_proxy.c, shm.c) only after
   * every message that came before it was published, and a peer says
   * goodbye only after it took what it was going to take: loaded after the
   * goodbye, the word waited on says whether what the caller waits for came
   * too, between its last look and now (it takes it: the call may well
   * succeed). A peer that left in order is not a dead one, though its
   * process may be gone since. */
  int left = x->at->conn != NULL && said_goodbye(comm, x->at->conn,
                                                 x->at->waiting_send,
                                                 x->at->peer);
  if (x->wait_word != NULL &&
      __atomic_load_n(x->wait_word, __ATOMIC_ACQUIRE) != x->wait_old)
    return RINGCC_SUCCESS;
  if (left)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "%s (seq %llu) on rank %d: rank %d destroyed its "
                          "communicator while this rank waits for %s it at "
                          "step %llu (did all ranks make the same calls?)",
                          rcc_coll_name(x->plan->coll),
                          (unsigned long long)comm->seq, comm->rank,
                          x->at->peer, x->at->waiting_for,
                          (unsigned long long)x->at->step);
  /* A dead rank: known already, named in the FIFO waited on by a peer that
   * learned of it, or the peer waited for is gone (network peers: their
   * sockets tell, in order, after anything they said before dying). */
  const struct rcc_conn *conn = x->at->conn;
  int peer = x->at->peer;
  if (rcc_dead_rank(comm, NULL) < 0 && conn != NULL && conn->ops == NULL) {
    uint32_t d = __atomic_load_n(&conn->fifo->dead, __ATOMIC_ACQUIRE);
    if (d != 0)
      rcc_peer_lost(comm, RCC_DEAD_RANK(d), peer,
                    (d & RCC_DEAD_UNREACHABLE) != 0);
  }
  if (rcc_dead_rank(comm, NULL) < 0 && peer >= 0 && !left &&
      (conn == NULL || conn->ops == NULL) && !rcc_peer_alive(comm, peer)) {
    int unreachable = 0; /* it knew of another first: */
    int told = rcc_peer_poisoned(comm, peer, &unreachable);
    if (told >= 0)
      rcc_peer_lost(comm, told, peer, unreachable);
    else
      rcc_peer_dead(comm, peer, comm->rank);
  }
  if (rcc_dead_rank(comm, NULL) >= 0) {
    char why[384];
    rcc_dead_describe(comm, why, sizeof(why));
    int async = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
    return rcc_comm_error(comm, rcc_dead_unreachable(comm)
                                    ? RINGCC_ERR_NETWORK
                                    : RINGCC_ERR_PEER_FAILED,
                          "%s (seq %llu) on rank %d: %s; this rank stopped at "
                          "step %llu waiting for %s rank %d%s%s%s",
                          rcc_coll_name(x->plan->coll),
                          (unsigned long long)comm->seq, comm->rank, why,
                          (unsigned long long)x->at->step, x->at->waiting_for,
                          peer, async > 0 ? " (" : "",
                          async > 0 ? comm->async_message : "",
                          async > 0 ? ")" : "");
  }
  /* After the local checks, which name the rank waited for precisely. */
  int async = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
  if (async > 0)
    return rcc_comm_error(comm, (ringcc_result_t)async,
                          "%s (seq %llu) on rank %d failed at step %llu while "
                          "waiting for %s rank %d: %s",
                          rcc_coll_name(x->plan->coll),
                          (unsigned long long)comm->seq, comm->rank,
                          (unsigned long long)x->at->step, x->at->waiting_for,
                          x->at->peer, comm->async_message);
  if (rcc_report_requested(comm)) {
    char report[2048];
    rcc_report_format(comm, report, sizeof(report));
    rcc_log(RINGCC_LOG_WARN, comm->rank, "report on request:\n%s", report);
  }
  if (comm->trace != NULL) /* the same signal writes the trace */
    rcc_trace_poll_signal(comm);
  /* The deadline counts from this rank's first sleep in the call (a call
   * that never sleeps cannot hang), which saves reading the clock on every
   * call; the first sleep comes within a few microseconds of waiting. */
  if (x->deadline == 0)
    x->deadline = rcc_deadline_after_ms(comm->set.timeout_ms);
  if (rcc_now_ns() >= x->deadline) {
    char report[2048];
    rcc_report_format(comm, report, sizeof(report));
    rcc_log(RINGCC_LOG_WARN, comm->rank, "timeout; where this rank stands:\n%s",
            report);
    return rcc_comm_error(
        comm, RINGCC_ERR_TIMEOUT,
        "%s (seq %llu) on rank %d timed out after %lld ms at step %llu of "
        "%llu waiting for %s rank %d (%s)",
        rcc_coll_name(x->plan->coll), (unsigned long long)comm->seq,
        comm->rank, (long long)comm->set.timeout_ms,
        (unsigned long long)x->at->step,
        (unsigned long long)RCC_GET(x->at->nsteps), x->at->waiting_for,
        x->at->peer, timeout_hint(x));
  }
  return RINGCC_SUCCESS;
}

/* An engine's wait runs these checks after each sleep. */
static int wait_check(void *ctx) { return rcc_host_wait_failed(ctx); }

static inline __attribute__((always_inline)) int
wait_for_change(struct exec *x, uint32_t *word, uint32_t *waiters,
                uint32_t old) {
  struct rcc_conn *conn = (struct rcc_conn *)x->at->conn;
  x->wait_word = word;
  x->wait_old = old;
  if (conn != NULL && conn->ops != NULL)
    return conn->ops->wait(conn, word, old, wait_check, x);

  /* Poll, then yield, then sleep. */
  struct rcc_spin *spin = &x->comm->spin;
  int budget = rcc_spin_budget(spin);
  for (int i = 0; i < budget; i++) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old) {
      spin->now = budget;
      return 0;
    }
    cpu_relax();
  }
  spin->now = budget / 2;
  for (int i = 0; i < spin->yields; i++) {
    sched_yield();
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old)
      return 0;
  }
  for (;;) {
    struct timespec slice = {0, SLEEP_SLICE_NS};
    __atomic_fetch_add(waiters, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == old)
      futex(word, FUTEX_WAIT, old, &slice);
    __atomic_fetch_sub(waiters, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old)
      return 0;
    int r = rcc_host_wait_failed(x);
    if (r != RINGCC_SUCCESS)
      return r;
  }
}

/* Where timing is on, a wait is timed and charged to the step (the trace)
 * and to the edge waited on (stats); waits happen only when data or a slot
 * is not there yet, so a call that never waits reads no clock here. */
int rcc_host_wait(struct exec *x, uint32_t *word, uint32_t *waiters,
                     uint32_t old) {
  if (!x->timing)
    return wait_for_change(x, word, waiters, old);
  int64_t t0 = rcc_now_ns();
  int r = wait_for_change(x, word, waiters, old);
  int64_t ns = rcc_now_ns() - t0;
  int send = RCC_GET(x->at->waiting_send);
  if (send)
    x->wait_send_ns += ns;
  else
    x->wait_recv_ns += ns;
  rcc_stats_waited(x->stats, RCC_GET(x->at->peer), send, ns);
  return r;
}

#include "proto.h"

static ringcc_result_t check_meta(struct exec *x, const struct rcc_step *s,
                                  uint64_t meta, size_t bytes) {
  if (RCC_META_BYTES(meta) == bytes && !(meta & RCC_META_PLACE) &&
      ((meta & RCC_META_LAST) != 0) == (s->last != 0))
    return RINGCC_SUCCESS;
  struct ringcc_comm *comm = x->comm;
  if (s->conn_kind == RCC_CONN_P2P) {
    /* A piece that starts no message of its own: the receive takes the
     * rest of this message and drops it (local, below). */
    x->misfit = !(meta & RCC_META_PLACE);
    x->misfit_meta = meta;
    return rcc_comm_error(
        comm, RINGCC_ERR_INVALID_USAGE,
        "ringcc_recv on rank %d from rank %d: the message does not match: "
        "expected %zu %s elements (count), the sender's message is %s (send "
        "and recv counts and datatypes must agree)%s",
        comm->rank, s->recv_peer, x->plan->count,
        ringcc_datatype_name(x->p2p != NULL ? x->p2p[x->channel].dt
                                            : x->dt),
        (meta & RCC_META_PLACE) || RCC_META_BYTES(meta) > bytes ? "longer"
        : (meta & RCC_META_LAST)                                ? "shorter"
        : RCC_META_BYTES(meta) != bytes ? "of a different size"
                                        : "longer",
        x->misfit ? "; the rest of the message is taken and dropped, the "
                    "communicator stays usable" : "");
  }
  return rcc_comm_error(
      comm, RINGCC_ERR_INVALID_USAGE,
      "%s (seq %llu) on rank %d: rank %d sent %u bytes at step %llu where %zu "
      "were expected (do all ranks call the same collective with the same "
      "count and datatype?)",
      rcc_coll_name(x->plan->coll), (unsigned long long)comm->seq, comm->rank,
      s->recv_peer, RCC_META_BYTES(meta), (unsigned long long)x->at->step,
      bytes);
}

/* ---- sends from the user's buffers ---------------------------------------- */

/* Whether [a, a + alen) and [b, b + blen) share a byte. */
static int overlaps(const char *a, size_t alen, const char *b, size_t blen) {
  return a < b + blen && b < a + alen;
}

static int lent_done(const struct lent_send *e) {
  uint32_t head = __atomic_load_n(&e->conn->fifo->head, __ATOMIC_ACQUIRE);
  return (int32_t)(head - e->seq) >= 0;
}

/* Waits for the pending sends whose bytes overlap [p, p + len): all of them
 * when p is NULL. */
static int lent_wait(struct exec *x, const char *p, size_t len) {
  for (int i = 0; i < x->nlent;) {
    struct lent_send *e = &x->lent[i];
    if (p != NULL && !overlaps(e->p, e->len, p, len)) {
      i++;
      continue;
    }
    while (!lent_done(e)) {
      uint32_t head = __atomic_load_n(&e->conn->fifo->head, __ATOMIC_ACQUIRE);
      waiting_on(x, "its data to leave for", e->conn->peer, e->conn, 1);
      int r = rcc_host_wait(x, &e->conn->fifo->head,
                            &e->conn->fifo->head_waiters, head);
      if (r != RINGCC_SUCCESS)
        return r;
    }
    *e = x->lent[--x->nlent];
  }
  return RINGCC_SUCCESS;
}

/* After a failed call the user gets the buffers back: the sends still to
 * leave from them leave from copies in their slots. */
static void lent_release(struct exec *x) {
  struct rcc_conn *done[LENT_MAX];
  int ndone = 0;
  for (int i = 0; i < x->nlent; i++) {
    struct lent_send *e = &x->lent[i];
    int again = 0; /* one detach per connection */
    for (int j = 0; j < ndone; j++)
      again |= done[j] == e->conn;
    if (again || lent_done(e))
      continue;
    e->conn->ops->reclaim(e->conn);
    done[ndone++] = e->conn;
  }
  x->nlent = 0;
}

/* Whether one more send can be lent without waiting for an earlier one
 * to leave (those that left are forgotten). A group's channels never wait
 * there: a send that finds no room is copied into its slot instead, so
 * that the receives of the group go on meanwhile. */
static int lent_room(struct exec *x) {
  for (int i = 0; i < x->nlent;)
    if (lent_done(&x->lent[i]))
      x->lent[i] = x->lent[--x->nlent];
    else
      i++;
  return x->nlent < LENT_MAX;
}

static int can_lend(const struct rcc_conn *c) {
  return c->ops != NULL && c->ops->lend != NULL;
}

/* Where a lent send of this step can come from without a copy into the
 * slot (NULL: it needs the slot). */
static const char *lend_source(const struct exec *x, const struct rcc_step *s) {
  const char *src = x->src + s->src_off * x->esize;
  const char *dst = x->dst + s->dst_off * x->esize;
  switch (s->kind) {
  case RCC_STEP_SEND:
    return s->acc != RCC_ACC_IN_SRC ? dst : src;
  case RCC_STEP_COPY_SEND:
  case RCC_STEP_SEND_RECV:
    return src;
  case RCC_STEP_RECV_COPY_SEND:
  case RCC_STEP_RECV_REDUCE_COPY_SEND:
    return dst; /* written by the step, before the send is published */
  default:
    return NULL;
  }
}

/* ---- receives straight into the user's buffers ------------------------------
 *
 * A receive whose bytes go to dst unchanged (RECV, RECV_COPY_SEND, the
 * receiving half of SEND_RECV where its own send reads elsewhere) on a
 * connection whose engine can land it (ops->land) lands there instead of in
 * its slot: the engine moves the posted receive before its payload arrives,
 * and the step then finds its bytes in place and copies nothing. Over TCP
 * this saves one of the three copies a byte of an AllGather otherwise takes
 * (kernel to slot, slot to dst, dst to kernel). Messages land ahead of the
 * executor, so a region may be lent only when no step between here and the
 * receiving one touches it (in either buffer: in place they alias) and no
 * send from it is still in flight. */

static int step_touches(const struct exec *x, const struct rcc_step *s,
                        const char *p, size_t len) {
  size_t bytes = s->nelem * x->esize;
  return overlaps(x->dst + s->dst_off * x->esize, bytes, p, len) ||
         (x->src != NULL &&
          overlaps(x->src + s->src_off * x->esize, bytes, p, len));
}

static int receives(int kind) {
  return rcc_step_receives(kind) || kind == RCC_STEP_SEND_RECV;
}

static struct land *land_find(struct exec *x, const struct rcc_conn *c,
                              uint32_t seq) {
  for (int i = 0; i < x->nland; i++)
    if (x->lands[i].conn == c && x->lands[i].seq == seq)
      return &x->lands[i];
  return NULL;
}

/* Lands the receives of steps i .. i + LAND_AHEAD that can. A connection
 * that refuses one may still take a later one (the verbs plugin lands only
 * receives it has not posted into a slot yet), so each is asked. It runs
 * before every receive, so a pass does little more than look at each step
 * ahead once: one pass counts each receive's message number on its
 * connection, and a receive found clear of the steps before it (x->clear)
 * is not checked again (the window only loses steps before it as it moves
 * on, and a send lent since came from one of those, checked then). */
static void land_ahead(struct exec *x, uint64_t i) {
  struct rcc_step *s = x->ahead;
  struct {
    const struct rcc_conn *conn;
    uint32_t n; /* receives on conn in the window so far */
  } seen[LAND_AHEAD];
  int n = 0, nseen = 0;
  if (x->nland == LAND_MAX)
    return;
  if (i >= x->ahead_at && i < x->ahead_at + (uint64_t)x->nahead) {
    int moved = (int)(i - x->ahead_at); /* < nahead <= LAND_AHEAD */
    n = x->nahead - moved; /* the steps still ahead */
    memmove(s, s + moved, (size_t)n * sizeof(*s));
    x->clear >>= moved;
  } else {
    x->clear = 0;
  }
  for (uint64_t j = i + (uint64_t)n; j < x->plan->nsteps && n < LAND_AHEAD;
       j++)
    rcc_plan_step(x->plan, j, &s[n++]);
  x->ahead_at = i;
  x->nahead = n;
  for (int a = 0; a < n && x->nland < LAND_MAX; a++) {
    const struct rcc_step *t = &s[a];
    if (!receives(t->kind))
      continue;
    struct rcc_conn *rc = recv_conn(x, t);
    int k = 0;
    while (k < nseen && seen[k].conn != rc)
      k++;
    if (k == nseen) {
      seen[k].conn = rc;
      seen[k].n = 0;
      nseen++;
    }
    uint32_t seq = rc->step + seen[k].n++; /* this step's message on rc */
    size_t bytes = t->nelem * x->esize;
    if ((t->kind != RCC_STEP_RECV && t->kind != RCC_STEP_RECV_COPY_SEND &&
         t->kind != RCC_STEP_SEND_RECV) ||
        rc->ops == NULL || rc->ops->land == NULL || bytes < LAND_MIN_BYTES ||
        land_find(x, rc, seq) != NULL)
      continue;
    char *p = x->dst + t->dst_off * x->esize;
    uint64_t bit = (uint64_t)1 << a;
    if (!(x->clear & bit)) {
      /* A send-and-receive step's own send must not read what lands. */
      int clash = t->kind == RCC_STEP_SEND_RECV && x->src != NULL &&
                  overlaps(x->src + t->src_off * x->esize, bytes, p, bytes);
      for (int b = 0; b < a && !clash; b++)
        clash = step_touches(x, &s[b], p, bytes);
      for (int z = 0; z < x->nlent && !clash; z++)
        clash = overlaps(x->lent[z].p, x->lent[z].len, p, bytes) &&
                !lent_done(&x->lent[z]);
      if (clash)
        continue;
      x->clear |= bit;
    }
    if (rc->ops->land(rc, seq, p, bytes))
      x->lands[x->nland++] = (struct land){rc, seq, p};
  }
}

/* The receive about to be consumed on c (bytes long) landed: where its
 * bytes are (its entry gone, the bytes counted), else NULL. */
static char *land_take(struct exec *x, struct rcc_conn *c, size_t bytes) {
  struct land *l = x->nland > 0 ? land_find(x, c, c->step) : NULL;
  if (l == NULL)
    return NULL;
  char *p = l->p;
  c->ops->landed(c, c->step);
  *l = x->lands[--x->nland];
  rcc_stats_add(&x->stats->landed, bytes);
  return p;
}

/* After a failed call: what still lands in the user's buffers goes to the
 * slots. */
static void land_release(struct exec *x) {
  for (int i = 0; i < x->nland; i++) {
    int again = 0;
    for (int j = 0; j < i; j++)
      again |= x->lands[j].conn == x->lands[i].conn;
    if (!again)
      x->lands[i].conn->ops->reclaim(x->lands[i].conn);
  }
  x->nland = 0;
}

/* ---- sends that leave together ----------------------------------------------
 *
 * A run of plain sends from the user's buffers (a Scatter root's pieces, a
 * Gather peer's, an AllToAllv layer's) is published without a copy, a
 * few microseconds apart. Handed to the network one by one, each leaves in
 * a sendmsg() of its own; held until the run ends (published_later), a
 * socket's queue leaves in one, which the kernel's loopback and TCP paths
 * take at the rate of one large write (docs/performance.md). Nothing is
 * held across anything that takes time: the loop flushes before any other
 * step, and a send that waits for a free slot or for a lent send to leave
 * waits through the engine, which moves them all. */

static void held_flush(struct exec *x, int then_wait) {
  /* Only the last may wake the engine's thread for what is left: before
   * it, the others' sends still count as pending. */
  for (int i = 0; i < x->nheld; i++)
    x->held[i]->ops->flush(x->held[i], then_wait || i < x->nheld - 1);
  x->nheld = 0;
}

/* Whether c's engine can hold a send back. */
static int can_hold(const struct rcc_conn *c) {
  return c->ops != NULL && c->ops->published_later != NULL &&
         c->ops->flush != NULL;
}

/* Whether step s may run with sends still held: it is one more send over
 * a connection whose engine holds sends. */
static int holds_through(const struct exec *x, const struct rcc_step *s) {
  return s->kind == RCC_STEP_SEND && can_hold(send_conn(x, s));
}

/* c's next publish may be held: c is noted among the held connections. */
static int hold_on(struct exec *x, struct rcc_conn *c) {
  if (!x->hold || !can_hold(c))
    return 0;
  for (int i = 0; i < x->nheld; i++)
    if (x->held[i] == c)
      return 1;
  if (x->nheld == RCC_HELD_MAX)
    held_flush(x, 0);
  x->held[x->nheld++] = c;
  return 1;
}

/* Publishes a network slot whose bytes are at p (NULL: in the slot); the
 * send of a plain SEND step from the user's buffer may be held (above). */
static int send_publish(struct exec *x, struct rcc_conn *c, const char *p,
                        size_t bytes, uint64_t meta, int plain) {
  if (p != NULL && x->nlent == LENT_MAX) {
    /* Forget those that left; wait only if none did. */
    for (int i = 0; i < x->nlent;)
      if (lent_done(&x->lent[i]))
        x->lent[i] = x->lent[--x->nlent];
      else
        i++;
    int r = x->nlent == LENT_MAX ? lent_wait(x, NULL, 0) : RINGCC_SUCCESS;
    if (r != RINGCC_SUCCESS)
      return r;
  }
  if (can_lend(c)) /* p, or NULL: this slot's bytes are in the slot */
    c->ops->lend(c, p);
  if (plain && p != NULL && hold_on(x, c)) {
    rcc_proto_send_post(c, meta);
    c->ops->published_later(c);
  } else {
    rcc_proto_send_end(c, meta);
  }
  if (p != NULL)
    x->lent[x->nlent++] = (struct lent_send){p, bytes, c, c->step};
  return RINGCC_SUCCESS;
}

/* The data movement of one step, slots already acquired. */
static void step_data(struct exec *x, const struct rcc_step *s, const char *in,
                      char *out) {
  size_t bytes = s->nelem * x->esize;
  const char *src = x->src + s->src_off * x->esize;
  char *dst = x->dst + s->dst_off * x->esize;

  switch (s->kind) {
  case RCC_STEP_SEND:
    if (out)
      copy_bytes(out, s->acc != RCC_ACC_IN_SRC ? dst : src, bytes);
    break;
  case RCC_STEP_RECV:
    copy_bytes(dst, in, bytes);
    break;
  case RCC_STEP_COPY:
  case RCC_STEP_COPY_SEND:
    copy_bytes(dst, src, bytes);
    if (s->postop && s->nelem > 0)
      rcc_reduce_avg_finish(x->dt, dst, dst, s->nelem, x->comm->nranks);
    if (out)
      copy_bytes(out, src, bytes);
    break;
  case RCC_STEP_RECV_COPY_SEND:
    copy_bytes(dst, in, bytes);
    if (out)
      copy_bytes(out, in, bytes);
    break;
  case RCC_STEP_RECV_REDUCE_SEND:
    if (s->nelem > 0) {
      if (s->acc != RCC_ACC_IN_SRC) /* the partial in dst, on the left */
        x->reduce(out, dst, in, s->nelem);
      else
        x->reduce(out, in, src, s->nelem);
    }
    break;
  case RCC_STEP_REDUCE_LOCAL:
    if (s->nelem > 0) {
      x->reduce(dst, dst, src, s->nelem);
      if (s->postop)
        rcc_reduce_avg_finish(x->dt, dst, dst, s->nelem, x->comm->nranks);
    }
    break;
  default: /* RECV_REDUCE_COPY[_SEND] */
    if (s->nelem > 0) {
      /* one operand order on every rank: bitwise agreement */
      if (s->acc == RCC_ACC_DST_IN)
        x->reduce(dst, dst, in, s->nelem);
      else if (s->acc == RCC_ACC_IN_DST)
        x->reduce(dst, in, dst, s->nelem);
      else if (s->acc == RCC_ACC_SRC_IN)
        x->reduce(dst, src, in, s->nelem);
      else
        x->reduce(dst, in, src, s->nelem);
      if (s->postop)
        rcc_reduce_avg_finish(x->dt, dst, dst, s->nelem, x->comm->nranks);
    }
    if (out)
      copy_bytes(out, dst, bytes);
    break;
  }
}

/* The collectives whose receives all land in the user's buffer (plain
 * receives, no reduction, no forwarding). */
static int lands_all(enum rcc_coll coll) {
  return coll == RCC_COLL_ALLTOALL || coll == RCC_COLL_ALLTOALLV ||
         coll == RCC_COLL_GATHER || coll == RCC_COLL_SCATTER;
}

static uint64_t meta_of(const struct exec *x, const struct rcc_step *s,
                        size_t bytes) {
  /* A group's receives land (rcc_exec_host_p2p): its sends' payloads may
   * wait in the network for them (parked, net.h), as a collective's. */
  int lands = lands_all(x->plan->coll) ||
              (x->grouped && x->plan->coll == RCC_COLL_SEND);
  return (uint64_t)bytes | (s->last ? RCC_META_LAST : 0) |
         (lands ? RCC_META_LANDS : 0);
}

/* AllToAll and Barrier: send to one peer (the first half of the step),
 * then receive from another (the second). */
static ringcc_result_t send_half(struct exec *x, const struct rcc_step *s) {
  struct rcc_conn *sc = send_conn(x, s);
  size_t bytes = s->nelem * x->esize;
  char *out;
  int r;

  const char *lent = x->lending && can_lend(sc) ? lend_source(x, s) : NULL;
  waiting_on(x, "a free slot to send to", s->send_peer, sc, 1);
  if ((r = rcc_proto_send_begin(x, sc, &out)) != 0)
    return r;
  if (lent == NULL)
    copy_bytes(out, x->src + s->src_off * x->esize, bytes);
  return send_publish(x, sc, lent, bytes, meta_of(x, s, bytes), 0);
}

static ringcc_result_t recv_half(struct exec *x, const struct rcc_step *s) {
  struct rcc_conn *rc = recv_conn(x, s);
  size_t bytes = s->nelem * x->esize;
  char *dst = x->dst + s->dst_off * x->esize;
  const char *in;
  uint64_t meta;
  int r;

  waiting_on(x, "data from", s->recv_peer, rc, 0);
  if ((r = rcc_proto_recv_begin(x, rc, &in, &meta)) != 0)
    return r;
  if ((r = check_meta(x, s, meta, bytes)) != 0)
    return r;
  if (land_take(x, rc, bytes) == NULL) { /* else its bytes are in dst */
    if (x->nlent > 0 && (r = lent_wait(x, dst, bytes)) != 0)
      return r;
    copy_bytes(dst, in, bytes);
  }
  rcc_proto_recv_end(rc);
  rcc_stats_sent(x->stats, s->send_peer, bytes);
  rcc_stats_received(x->stats, s->recv_peer, bytes);
  return RINGCC_SUCCESS;
}

static ringcc_result_t run_send_recv(struct exec *x, const struct rcc_step *s,
                                     uint64_t i) {
  if (x->land)
    land_ahead(x, i); /* before the send: the reply may come at once */
  ringcc_result_t r = send_half(x, s);
  return r != RINGCC_SUCCESS ? r : recv_half(x, s);
}

static ringcc_result_t run_step(struct exec *x, const struct rcc_step *s,
                                uint64_t i) {
  struct rcc_conn *rc = NULL, *sc = NULL;
  const char *in = NULL;
  char *out = NULL;
  size_t bytes = s->nelem * x->esize;
  uint64_t meta;
  int r;

  if (s->kind == RCC_STEP_SEND_RECV)
    return run_send_recv(x, s, i);
  if (rcc_step_receives(s->kind)) {
    rc = recv_conn(x, s);
    if (x->land)
      land_ahead(x, i);
    waiting_on(x, "data from", s->recv_peer, rc, 0);
    if ((r = rcc_proto_recv_begin(x, rc, &in, &meta)) != 0)
      return r;
    if ((r = check_meta(x, s, meta, bytes)) != 0)
      return r;
    char *landed = land_take(x, rc, bytes);
    if (landed != NULL)
      in = landed; /* == dst: the copies below are no-ops */
  }
  const char *lent = NULL;
  if (rcc_step_sends(s->kind)) {
    sc = send_conn(x, s);
    waiting_on(x, "a free slot to send to", s->send_peer, sc, 1);
    if ((r = rcc_proto_send_begin(x, sc, &out)) != 0)
      return r;
    if (x->lending && can_lend(sc) && (!x->grouped || lent_room(x)) &&
        (lent = lend_source(x, s)) != NULL)
      out = NULL;
  }
  /* Every step but a plain send and a reduce into the slot writes dst. */
  if (x->nlent > 0 && s->kind != RCC_STEP_SEND &&
      s->kind != RCC_STEP_RECV_REDUCE_SEND && s->kind != RCC_STEP_NONE &&
      (r = lent_wait(x, x->dst + s->dst_off * x->esize, bytes)) != 0)
    return r;
  step_data(x, s, in, out);
  if (sc && (r = send_publish(x, sc, lent, bytes, meta_of(x, s, bytes),
                             s->kind == RCC_STEP_SEND)) != 0)
    return r;
  if (sc)
    rcc_stats_sent(x->stats, s->send_peer, bytes);
  if (rc) {
    rcc_proto_recv_end(rc);
    rcc_stats_received(x->stats, s->recv_peer, bytes);
  }
  return RINGCC_SUCCESS;
}

/* What of a step to run: all of it, or one half of a send-then-receive
 * step (the channel executor runs those as two). */
enum step_part { STEP_WHOLE, STEP_SEND_HALF, STEP_RECV_HALF };

static ringcc_result_t run_part(struct exec *x, const struct rcc_step *s,
                                uint64_t i, enum step_part part) {
  switch (part) {
  case STEP_SEND_HALF:
    return send_half(x, s);
  case STEP_RECV_HALF:
    return recv_half(x, s);
  default:
    return run_step(x, s, i);
  }
}

/* A step (or half) with RINGCC_TRACE on: run, timed, and recorded (also
 * when it failed: the step where a call stopped is what a reader looks
 * for). */
static ringcc_result_t traced_step(struct exec *x, const struct rcc_step *s,
                                   uint64_t i, enum step_part part) {
  struct ringcc_comm *comm = x->comm;
  struct rcc_trace_event e;
  memset(&e, 0, sizeof(e));
  e.type = RCC_TRACE_STEP;
  e.kind = s->kind;
  e.coll = (uint8_t)x->plan->coll;
  e.alg = (uint8_t)x->plan->alg;
  e.conn_kind = s->conn_kind;
  e.channel = (uint8_t)x->channel;
  e.seq = comm->seq;
  e.step = i;
  e.nsteps = x->plan->nsteps;
  e.nelem = s->nelem;
  e.bytes = s->nelem * x->esize;
  e.block = s->block;
  e.send_peer = (rcc_step_sends(s->kind) || s->kind == RCC_STEP_SEND_RECV) &&
                        part != STEP_RECV_HALF
                    ? s->send_peer
                    : -1;
  e.recv_peer = receives(s->kind) && part != STEP_SEND_HALF ? s->recv_peer
                                                            : -1;
  e.send_msg = e.recv_msg = UINT32_MAX;
  if (e.send_peer >= 0)
    e.send_msg = send_conn(x, s)->step;
  if (e.recv_peer >= 0)
    e.recv_msg = recv_conn(x, s)->step;
  x->wait_recv_ns = x->wait_send_ns = 0;
  e.start_ns = rcc_now_ns();
  ringcc_result_t r = run_part(x, s, i, part);
  e.end_ns = rcc_now_ns();
  e.wait_recv_ns = x->wait_recv_ns;
  e.wait_send_ns = x->wait_send_ns;
  rcc_trace_record(comm, &e);
  return r;
}

ringcc_result_t rcc_exec_host(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op) {
  struct lent_send lent[LENT_MAX]; /* only [0, nlent) is ever read */
  struct land lands[LAND_MAX];
  struct rcc_step ahead[LAND_AHEAD];
  struct exec x = {
      .comm = comm,
      .plan = plan,
      .src = src,
      .dst = dst,
      .esize = ringcc_datatype_size(dt),
      .dt = dt,
      .reduce = rcc_reduce_get(dt, op),
      .deadline = 0,
      .at = &comm->progress,
      /* Point-to-point sends keep their copy: ringcc_send returns once the
       * data is in the slots, as it always has. */
      .lending = comm->set.net_zerocopy && plan->coll != RCC_COLL_SEND,
      .lent = lent,
      .hold = 1,
      /* Only where pieces are large enough to be worth it; not for
       * ringcc_recv (its message may be shorter than the buffer). */
      .land = comm->set.net_zerocopy && plan->coll != RCC_COLL_SEND &&
              plan->coll != RCC_COLL_RECV &&
              plan->chunk_elems * ringcc_datatype_size(dt) >= LAND_MIN_BYTES,
      .lands = lands,
      .ahead = ahead,
      .stats = comm->stats,
      .timing = comm->stats->timing,
  };
  int traced = comm->trace != NULL;
  ringcc_result_t r = RINGCC_SUCCESS;

  RCC_PUT(x.at->coll, plan->coll);
  RCC_PUT(x.at->alg, plan->alg);
  RCC_PUT(x.at->channel, 0);
  RCC_PUT(x.at->nsteps, plan->nsteps);
  waiting_on(&x, "nothing", -1, NULL, 0);
  RCC_PUT(x.at->active, 1);
  for (uint64_t i = 0; i < plan->nsteps && r == RINGCC_SUCCESS; i++) {
    struct rcc_step cur;
    rcc_plan_step(plan, i, &cur);
    RCC_PUT(x.at->step, i);
    RCC_PUT(x.at->kind, (int)cur.kind);
    RCC_PUT(x.at->block, cur.block);
    RCC_PUT(x.at->nelem, cur.nelem);
    if (x.nheld > 0 && !holds_through(&x, &cur))
      held_flush(&x, 0);
    r = traced ? traced_step(&x, &cur, i, STEP_WHOLE)
               : run_step(&x, &cur, i);
  }
  /* Every held send is lent: lent_wait, next, waits for them to leave. */
  held_flush(&x, r == RINGCC_SUCCESS);
  if (r == RINGCC_SUCCESS && x.nlent > 0)
    r = lent_wait(&x, NULL, 0);
  if (r != RINGCC_SUCCESS && x.nlent > 0)
    lent_release(&x);
  if (r != RINGCC_SUCCESS && x.nland > 0)
    land_release(&x);
  RCC_PUT(x.at->active, 0);
  return r;
}

/* ---- channels -----------------------------------------------------------------
 *
 * A call split over C > 1 channels runs C plans, each over FIFOs of its own.
 * This thread progresses them in turn: it runs the next step of every
 * channel whose FIFOs are ready for it, and waits only when none is (so a
 * channel that waits for its peer never holds up another). A step runs only
 * once everything it waits for is there (its incoming slot, a free outgoing
 * slot), so it never blocks half done; a send-then-receive step (AllToAll,
 * Barrier) runs as two halves. Sends from and receives into the user's
 * buffers are for one channel only: with several, every byte goes through
 * its slot. */

struct chan {
  struct rcc_plan plan;
  uint64_t i;   /* its next step */
  int half;     /* a sendRecv step whose send is done */
  const char *src; /* its buffers and element size */
  char *dst;
  size_t esize;
  int after;    /* the channel that must finish first (same FIFO), or -1 */
  struct rcc_conn *placed; /* sent as its place: the FIFO whose head ... */
  uint32_t placed_seq;     /* ... reaching this acknowledges it */
  int draining; /* a receive that failed locally takes the rest of its
                   message, dropping it */
  int lend, land; /* point-to-point of a group over the network: its
                     send leaves from the user's buffer, its receive
                     lands there (exec.lending, exec.land) */
  uint64_t land_at; /* 1 + the step its receives were last landed at */
};

/* Channel k cannot start yet: the one before it on its FIFO runs. */
static int chan_waits_turn(const struct chan *ch, const struct chan *k) {
  return k->after >= 0 && ch[k->after].i < ch[k->after].plan.nsteps;
}

/* Whether channel k's next step (or half) can run now; if not, *word and
 * *old say what it waits for, and *waiter the FIFO. */
static int chan_ready(struct exec *x, const struct chan *k,
                      const struct rcc_step *s, struct rcc_conn **waiter,
                      int *send) {
  if (s->kind == RCC_STEP_SEND_RECV) {
    *send = !k->half;
    *waiter = k->half ? recv_conn(x, s) : send_conn(x, s);
    return slot_ready(*waiter, *send);
  }
  if (rcc_step_receives(s->kind) &&
      !slot_ready(*waiter = recv_conn(x, s), 0))
    return *send = 0, 0;
  if (rcc_step_sends(s->kind) && !slot_ready(*waiter = send_conn(x, s), 1))
    return *send = 1, 0;
  return 1;
}

static void chan_select(struct exec *x, struct chan *k, int c) {
  x->plan = &k->plan;
  x->nahead = 0; /* land_ahead's steps were another plan's */
  x->src = k->src;
  x->dst = k->dst;
  x->esize = k->esize;
  x->lending = k->lend;
  x->land = k->land;
  x->channel = c;
  RCC_PUT(x->at->channel, c);
}

/* The channel waits of a pass with nothing ready: poll them all, yield,
 * then sleep on the counter one of them waits for with a short slice (a
 * wake-up on another is seen at the next slice). Engines serve their
 * FIFOs from their own threads meanwhile (release, before the run) and
 * wake the counters' sleepers as executors do. */
#define CHANNEL_SLICE_NS 1000000L

struct chan_wait {
  struct exec *x;
  struct chan *ch;
  int n;
  struct rcc_conn *driven; /* the engine this thread drove last (wait_any),
                              or NULL */
  struct rcc_conn **blocked; /* n entries: the FIFOs a wait_any waits on
                                (NULL until one_engine needs them) */
};

/* Channel c's next step (or half), the channel selected: -1 where it has
 * none to run now (done, or its FIFO's earlier channel runs), 1 where it
 * can run, 0 where it waits (on *conn, for room if *send, else data). */
static int chan_look(struct chan_wait *w, int c, struct rcc_conn **conn,
                     int *send) {
  struct chan *k = &w->ch[c];
  struct rcc_step s;
  if (k->i >= k->plan.nsteps || chan_waits_turn(w->ch, k))
    return -1;
  chan_select(w->x, k, c);
  rcc_plan_step(&k->plan, k->i, &s);
  return chan_ready(w->x, k, &s, conn, send);
}

static int any_ready(struct chan_wait *w) {
  struct rcc_conn *conn;
  int send;
  for (int c = 0; c < w->n; c++)
    if (chan_look(w, c, &conn, &send) > 0)
      return 1;
  return 0;
}

static int any_ready_cb(void *ctx) { return any_ready(ctx); }
static int wait_failed_cb(void *ctx) {
  return rcc_host_wait_failed(((struct chan_wait *)ctx)->x);
}

/* Where every blocked channel waits on a FIFO of one engine that can wait
 * for several (ops->wait_any): their number, with the FIFOs in w->blocked
 * (made at the first such wait of the run); else 0 (or where one is ready
 * after all). */
static int one_engine(struct chan_wait *w) {
  int nb = 0;
  if (w->n < 2)
    return 0; /* one channel: the engine's thread serves it, as before */
  if (w->blocked == NULL &&
      (w->blocked = malloc((size_t)w->n * sizeof(*w->blocked))) == NULL)
    return 0; /* out of memory: the wait below serves too */
  for (int c = 0; c < w->n; c++) {
    struct rcc_conn *conn;
    int send, ready = chan_look(w, c, &conn, &send);
    if (ready > 0)
      return 0; /* no wait */
    if (ready < 0)
      continue;
    if (conn->ops == NULL || conn->ops->wait_any == NULL)
      return 0;
    /* One engine serves all of a communicator's network FIFOs. */
    w->blocked[nb++] = conn;
  }
  return nb;
}

static ringcc_result_t wait_channels_untimed(struct chan_wait *w, int c) {
  struct exec *x = w->x;
  struct rcc_spin *spin = &x->comm->spin;
  struct rcc_conn *conn;
  int send;
  int nb = one_engine(w);
  if (nb > 0) {
    (void)chan_look(w, c, &conn, &send);
    waiting_on(x, send ? "a free slot to send to" : "data from", conn->peer,
               conn, send);
    x->wait_word = NULL; /* any FIFO: progress is any channel ready */
    w->driven = w->blocked[0];
    return (ringcc_result_t)w->driven->ops->wait_any(
        w->blocked, nb, any_ready_cb, wait_failed_cb, w);
  }
  if (w->driven != NULL) { /* its thread serves the sockets again */
    w->driven->ops->release(w->driven);
    w->driven = NULL;
  }
  for (int i = 0; i < spin->now + spin->yields; i++) {
    if (any_ready(w))
      return RINGCC_SUCCESS;
    if (i < spin->now)
      cpu_relax();
    else
      sched_yield();
  }
  if (chan_look(w, c, &conn, &send) != 0)
    return RINGCC_SUCCESS; /* ready (or nothing left to wait for) */
  waiting_on(x, send ? "a free slot to send to" : "data from", conn->peer,
             conn, send);
  /* An engine's receive FIFO whose link may not be made yet (net.c's lazy
   * links): "a slot is free" makes the engine want it, so a sender that
   * left (and will never make it) is noticed. A send wanted it when it
   * published. */
  if (!send && conn->ops != NULL) {
    conn->ops->published(conn);
    if (conn->ops->want != NULL) /* not left in the network (parked) */
      conn->ops->want(conn);
  }
  uint32_t *word = send ? &conn->fifo->head : &conn->fifo->tail;
  uint32_t *waiters = send ? &conn->fifo->head_waiters
                           : &conn->fifo->tail_waiters;
  uint32_t old = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  if (chan_look(w, c, &conn, &send) != 0)
    return RINGCC_SUCCESS; /* it changed meanwhile */
  struct timespec slice = {0, CHANNEL_SLICE_NS};
  __atomic_fetch_add(waiters, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == old)
    futex(word, FUTEX_WAIT, old, &slice);
  __atomic_fetch_sub(waiters, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old || any_ready(w))
    return RINGCC_SUCCESS;
  x->wait_word = word;
  x->wait_old = old;
  return rcc_host_wait_failed(x);
}

/* As rcc_host_wait: where timing is on, the wait is charged to the edge the
 * first blocked channel waits on (the stats; a trace shows channel steps
 * without their waits between them). */
static ringcc_result_t wait_channels(struct chan_wait *w, int c) {
  struct exec *x = w->x;
  if (!x->timing)
    return wait_channels_untimed(w, c);
  struct rcc_conn *conn = NULL;
  int send = 0;
  (void)chan_look(w, c, &conn, &send);
  int64_t t0 = rcc_now_ns();
  ringcc_result_t r = wait_channels_untimed(w, c);
  if (conn != NULL)
    rcc_stats_waited(x->stats, conn->peer, send, rcc_now_ns() - t0);
  return r;
}

/* Hands the engine serving the communicator's network FIFOs (one serves
 * them all) its sockets back for the run. */
void rcc_host_release_engines(struct ringcc_comm *comm) {
  for (int p = 0; p < comm->nranks; p++) {
    struct rcc_conn *conn = rcc_send_conn(comm, RCC_CONN_COLL, 0, p);
    if (conn->fifo != NULL && conn->ops != NULL) {
      conn->ops->release(conn);
      return;
    }
  }
}

static ringcc_result_t local_failure(struct exec *x, ringcc_result_t r);

/* Step 0 of a point-to-point message (rcc_exec_host_p2p), its FIFO ready
 * for it: 1 where the message moves as its place (p2p_place.h), or failed
 * (*r), 0 where the step runs as usual. The receiver hands the slot back
 * once it has read the message: that is the acknowledgement. */
static int place_step(struct exec *x, struct chan *k, int c,
                      const struct rcc_step *s, ringcc_result_t *r) {
  struct rcc_p2p_op *op = &x->p2p[c];
  size_t bytes = k->plan.count * k->esize, got;
  if (s->kind == RCC_STEP_SEND) {
    struct rcc_conn *sc = send_conn(x, s);
    struct rcc_p2p_where w;
    char *out;
    int alg = rcc_p2p_place_offer(x->comm, sc, op->buf, bytes, &w,
                                  &x->allowed);
    if (alg < 0)
      return 0;
    waiting_on(x, "a free slot to send to", s->send_peer, sc, 1);
    if ((*r = rcc_proto_send_begin(x, sc, &out)) != 0)
      return 1;
    memcpy(out, &w, sizeof(w));
    rcc_proto_send_end(sc, sizeof(w) | RCC_META_LAST | RCC_META_PLACE);
    k->placed = sc;
    k->placed_seq = sc->step;
    x->nplaced++;
    op->ran = alg;
    return 1;
  }
  struct rcc_conn *rc = recv_conn(x, s);
  const char *in;
  uint64_t meta;
  waiting_on(x, "data from", s->recv_peer, rc, 0);
  if ((*r = rcc_proto_recv_begin(x, rc, &in, &meta)) != 0)
    return 1;
  if (!(meta & RCC_META_PLACE))
    return 0;
  int ack;
  *r = rcc_p2p_place_take(x->comm, rc, in, RCC_META_BYTES(meta), op->buf,
                          bytes, op->dt, 1, &got, &op->ran, &ack);
  if (ack)
    rcc_proto_recv_end(rc);
  if (*r == RINGCC_ERR_INVALID_USAGE && ack)
    *r = local_failure(x, *r); /* refused: the FIFO is past it */
  return 1;
}

/* A failure after which every FIFO of the run is in a known state (a
 * message refused, or taken whole): kept (the first one, with its message)
 * while the run goes on; RINGCC_SUCCESS. */
static ringcc_result_t local_failure(struct exec *x, ringcc_result_t r) {
  if (x->local == RINGCC_SUCCESS) {
    x->local = r;
    pthread_mutex_lock(&x->comm->error_lock);
    memcpy(x->local_msg, x->comm->last_error, RCC_ERRLEN);
    pthread_mutex_unlock(&x->comm->error_lock);
  }
  return RINGCC_SUCCESS;
}

/* Takes and drops the piece at rc's head (its meta word), of a message
 * that does not match its receive; *last: it was the message's last. */
ringcc_result_t rcc_host_drop_piece(struct exec *x, struct rcc_conn *rc,
                                  uint64_t meta, int *last) {
  if (meta & RCC_META_PLACE) /* not a piece of a message begun */
    return rcc_comm_error(x->comm, RINGCC_ERR_INTERNAL,
                          "ringcc_recv on rank %d from rank %d: a message "
                          "read in place in the middle of a message (a bug "
                          "in libringcc, or ranks that run different builds "
                          "of it)", x->comm->rank, rc->peer);
  rcc_proto_recv_end(rc);
  rcc_stats_received(x->stats, rc->peer, RCC_META_BYTES(meta));
  *last = (meta & RCC_META_LAST) != 0;
  return RINGCC_SUCCESS;
}

/* A receive of rc that does not match its message: the messages of rc
 * landing in (or landed in) its buffer go back to their slots, whoever's
 * they are (the rest of this one, dropped, or the next receive's). */
static void land_forget(struct exec *x, struct rcc_conn *rc) {
  int any = 0;
  for (int i = 0; i < x->nland;)
    if (x->lands[i].conn == rc) {
      x->lands[i] = x->lands[--x->nland];
      any = 1;
    } else {
      i++;
    }
  if (any)
    rc->ops->reclaim(rc);
}

/* Channel k's receive found a piece that does not match (x->misfit): it
 * takes that piece, and the rest of the message after it (draining, one
 * piece as each comes), so that the FIFO is at the next message. */
static void misfit_taken(struct exec *x, struct chan *k,
                         const struct rcc_step *s) {
  int last;
  struct rcc_conn *rc = recv_conn(x, s);
  x->misfit = 0; /* not a place: dropped */
  land_forget(x, rc);
  (void)rcc_host_drop_piece(x, rc, x->misfit_meta, &last);
  if (last)
    k->i = k->plan.nsteps;
  else
    k->draining = 1;
}

/* The next piece of a message channel k drains, its slot ready. */
static ringcc_result_t drain_piece(struct exec *x, struct chan *k,
                                   const struct rcc_step *s) {
  struct rcc_conn *rc = recv_conn(x, s);
  const char *in;
  uint64_t meta;
  int last, r = rcc_proto_recv_begin(x, rc, &in, &meta);
  if (r != 0 || (r = rcc_host_drop_piece(x, rc, meta, &last)) != 0)
    return (ringcc_result_t)r;
  if (last) {
    k->draining = 0;
    k->i = k->plan.nsteps;
  }
  return RINGCC_SUCCESS;
}

/* The sender: the messages sent as their place whose acknowledgement came
 * (the FIFO's head passed them), each refused or not (rcc_p2p_place_acked).
 * Runs before any send that may fill a slot again, so a refusal is read
 * before a later message's could take its entry. */
static ringcc_result_t placed_collect(struct exec *x, struct chan *ch, int n) {
  for (int c = 0; c < n && x->nplaced > 0; c++) {
    struct rcc_conn *sc = ch[c].placed;
    if (sc == NULL || (int32_t)(__atomic_load_n(&sc->fifo->head,
                                                __ATOMIC_ACQUIRE) -
                                ch[c].placed_seq) < 0)
      continue;
    int local;
    ch[c].placed = NULL;
    x->nplaced--;
    ringcc_result_t r =
        rcc_p2p_place_acked(x->comm, sc, ch[c].placed_seq - 1,
                            x->p2p[c].count, x->p2p[c].dt, &local);
    if (r != RINGCC_SUCCESS && !local)
      return r;
    if (r != RINGCC_SUCCESS)
      local_failure(x, r);
  }
  return RINGCC_SUCCESS;
}

/* Channel k (selected) offers the receives from its next step on for
 * landing, once per step: before their bytes come, since a receive lands
 * only where its engine has not begun to read it into the slot. */
static void chan_offer_lands(struct exec *x, struct chan *k) {
  if (k->land && !k->draining && k->land_at != k->i + 1) {
    land_ahead(x, k->i);
    k->land_at = k->i + 1;
  }
}

/* Runs the channels' plans to the end, or to the first failure. */
static ringcc_result_t run_channels(struct exec *x, struct chan *ch, int n) {
  struct chan_wait w = {x, ch, n, NULL, NULL};
  ringcc_result_t r = RINGCC_SUCCESS;
  /* Every receive that can land is offered before the first send leaves: a
   * peer that answers that send at once (its next group) finds the
   * connection parking payloads for this rank (the first landing turns
   * that on), not reading them into the slots. */
  for (int c = 0; c < n; c++) {
    struct chan *k = &ch[c];
    if (!k->land || k->i >= k->plan.nsteps || chan_waits_turn(ch, k))
      continue;
    chan_select(x, k, c);
    chan_offer_lands(x, k);
  }
  for (;;) {
    int moved = 0, left = 0, blocked = -1;
    for (int c = 0; c < n && r == RINGCC_SUCCESS; c++) {
      struct chan *k = &ch[c];
      struct rcc_conn *waiter;
      struct rcc_step s;
      int send;
      if (k->i >= k->plan.nsteps)
        continue;
      left = 1;
      if (chan_waits_turn(ch, k))
        continue;
      chan_select(x, k, c);
      rcc_plan_step(&k->plan, k->i, &s);
      chan_offer_lands(x, k);
      if (!chan_ready(x, k, &s, &waiter, &send)) {
        blocked = blocked < 0 ? c : blocked;
        continue;
      }
      RCC_PUT(x->at->step, k->i);
      RCC_PUT(x->at->kind, (int)s.kind);
      RCC_PUT(x->at->block, s.block);
      RCC_PUT(x->at->nelem, s.nelem);
      moved = 1;
      if (x->p2p != NULL && k->draining) {
        r = drain_piece(x, k, &s);
        continue;
      }
      if (x->p2p != NULL && rcc_step_sends(s.kind) &&
          (r = placed_collect(x, ch, n)) != RINGCC_SUCCESS)
        continue;
      if (x->p2p != NULL && k->i == 0 && place_step(x, k, c, &s, &r)) {
        k->i = k->plan.nsteps; /* the whole message */
        continue;
      }
      enum step_part part = s.kind != RCC_STEP_SEND_RECV ? STEP_WHOLE
                            : !k->half                   ? STEP_SEND_HALF
                                                         : STEP_RECV_HALF;
      r = x->comm->trace != NULL ? traced_step(x, &s, k->i, part)
                                 : run_part(x, &s, k->i, part);
      if (r != RINGCC_SUCCESS && x->misfit) {
        misfit_taken(x, k, &s);
        r = local_failure(x, r);
        continue;
      }
      if (s.kind == RCC_STEP_SEND_RECV && !k->half)
        k->half = 1;
      else
        k->half = 0, k->i++;
    }
    if (r != RINGCC_SUCCESS || !left)
      break;
    if (moved && x->grouped)
      x->deadline = 0; /* a group's deadline counts from its last progress */
    if (!moved && (r = wait_channels(&w, blocked)) !=
                      RINGCC_SUCCESS)
      break;
  }
  free(w.blocked);
  return r;
}

static ringcc_result_t exec_channels(struct ringcc_comm *comm,
                                     const struct rcc_plan *call,
                                     const void *src, void *dst,
                                     ringcc_datatype_t dt, ringcc_op_t op) {
  int n = call->nchannels > 1 ? call->nchannels : 1;
  if (n == 1) { /* as one plan, with the user-buffer paths */
    struct rcc_plan plan;
    rcc_plan_channel(call, 0, &plan);
    rcc_plan_build(&plan);
    return rcc_exec_host(comm, &plan, src, dst, dt, op);
  }
  struct chan ch[RCC_MAX_CHANNELS];
  uint64_t total = 0;
  for (int c = 0; c < n; c++) {
    rcc_plan_channel(call, c, &ch[c].plan);
    rcc_plan_build(&ch[c].plan);
    ch[c].i = 0;
    ch[c].half = 0;
    ch[c].src = src;
    ch[c].dst = dst;
    ch[c].esize = ringcc_datatype_size(dt);
    ch[c].after = -1;
    ch[c].lend = ch[c].land = 0;
    ch[c].land_at = 0;
    total += ch[c].plan.nsteps;
  }
  struct exec x = {
      .comm = comm,
      .plan = &ch[0].plan,
      .src = src,
      .dst = dst,
      .esize = ringcc_datatype_size(dt),
      .dt = dt,
      .reduce = rcc_reduce_get(dt, op),
      .at = &comm->progress,
      .stats = comm->stats,
      .timing = comm->stats->timing,
  };
  RCC_PUT(x.at->coll, call->coll);
  RCC_PUT(x.at->alg, call->alg);
  RCC_PUT(x.at->nsteps, total);
  waiting_on(&x, "nothing", -1, NULL, 0);
  RCC_PUT(x.at->active, 1);
  rcc_host_release_engines(comm);
  ringcc_result_t r = run_channels(&x, ch, n);
  RCC_PUT(x.at->active, 0);
  return r;
}

/* The network's bound on a connection's unsent bytes (TCP_NOTSENT_LOWAT,
 * RINGCC_SOCKET_NOTSENT_BYTES) makes each sender move its own bytes as its
 * receiver's window opens: where many send to one (a Gather root over TCP on
 * one host) the receiver then no longer transmits its senders' backlog
 * itself. Where one sends to all, the sender is the bottleneck and the
 * other way round is cheaper: a Scatter root with blocks of
 * UNSENT_ALL_BLOCK_BYTES and more lifts the bound on its connections for
 * the call, so that its peers' reads move its bytes (docs/performance.md,
 * measured both ways). */
#define UNSENT_ALL_BLOCK_BYTES (2u << 20)

static void unsent_all(struct ringcc_comm *comm, const struct rcc_plan *call,
                       int all) {
  int n = call->nchannels > 1 ? call->nchannels : 1;
  for (int c = 0; c < n; c++)
    for (int p = 0; p < comm->nranks; p++) {
      struct rcc_conn *sc =
          p == comm->rank ? NULL : rcc_send_conn(comm, RCC_CONN_COLL, c, p);
      if (sc != NULL && sc->ops != NULL && sc->ops->unsent_all != NULL)
        sc->ops->unsent_all(sc, all);
    }
}

ringcc_result_t rcc_exec_host_channels(struct ringcc_comm *comm,
                                       const struct rcc_plan *call,
                                       const void *src, void *dst,
                                       ringcc_datatype_t dt, ringcc_op_t op) {
  int all = call->coll == RCC_COLL_SCATTER && call->rank == call->root &&
            call->count * ringcc_datatype_size(dt) >= UNSENT_ALL_BLOCK_BYTES;
  if (all)
    unsent_all(comm, call, 1);
  ringcc_result_t r = exec_channels(comm, call, src, dst, dt, op);
  if (all)
    unsent_all(comm, call, 0);
  return r;
}

/* ---- point-to-point of a group --------------------------------------------
 *
 * Every send and receive of a group is a channel of the runner above: each
 * moves a piece whenever its FIFO has a free slot (or data), and the thread
 * sleeps only when none can, so sends and receives posted together cannot
 * wait for each other whatever their sizes and order. Messages to (from) one
 * peer go over one FIFO in the order they were posted: each waits for the
 * one before it on that FIFO to finish (chan.after). */

/* The channel plan of one operation. */
static void p2p_plan(struct ringcc_comm *comm, const struct rcc_p2p_op *op,
                     struct rcc_plan *out) {
  size_t esize = ringcc_datatype_size(op->dt);
  size_t slot = rcc_send_conn(comm, RCC_CONN_P2P, 0, op->peer)->slot_bytes;
  struct rcc_plan call =
      rcc_exec_plan(comm, RCC_ALG_P2P, RCC_SCHED_PAIRWISE,
                    op->send ? RCC_COLL_SEND : RCC_COLL_RECV, 1, esize,
                    op->count, slot / esize, op->peer);
  rcc_plan_channel(&call, 0, out);
  rcc_plan_build(out);
}

/* The sender's acknowledgements: a message sent as its place has been read
 * once its FIFO's head passed its slot. */
static ringcc_result_t placed_wait(struct exec *x, struct chan *ch, int n) {
  for (int c = 0; c < n; c++) {
    struct rcc_conn *sc = ch[c].placed;
    uint32_t head;
    while (sc != NULL &&
           (int32_t)((head = __atomic_load_n(&sc->fifo->head,
                                             __ATOMIC_ACQUIRE)) -
                     ch[c].placed_seq) < 0) {
      waiting_on(x, "its message to be read in place by", sc->peer, sc, 1);
      int r = rcc_host_wait(x, &sc->fifo->head, &sc->fifo->head_waiters, head);
      if (r != RINGCC_SUCCESS)
        return r;
    }
  }
  return placed_collect(x, ch, n);
}

struct span {
  const char *a, *b; /* [a, b) */
};

static int span_cmp(const void *p, const void *q) {
  const struct span *x = p, *y = q;
  return x->a < y->a ? -1 : x->a > y->a;
}

/* Which of a group's network sends leave from the user's buffer (lend) and
 * which of its receives land there (land): every receive that its engine
 * can land, and every send whose bytes no receive of the group writes (a
 * send may leave after the receives began: MPI and NCCL forbid such
 * overlaps, but a lent send would then carry what a receive wrote). Sends
 * stay copied outside a group: ringcc_send returns once the data is in the
 * slots, as it always has. */
static void p2p_zero_copy(struct ringcc_comm *comm,
                          const struct rcc_p2p_op *ops, struct chan *ch,
                          int n) {
  int nlend = 0, nr = 0;
  for (int c = 0; c < n; c++) {
    struct rcc_conn *conn =
        ops[c].send ? rcc_send_conn(comm, RCC_CONN_P2P, 0, ops[c].peer)
                    : rcc_recv_conn(comm, RCC_CONN_P2P, 0, ops[c].peer);
    int empty = ops[c].count == 0;
    ch[c].lend = ops[c].send && can_lend(conn);
    ch[c].land = !ops[c].send && conn->ops != NULL && conn->ops->land != NULL;
    nlend += ch[c].lend && !empty;
    nr += !ops[c].send && !empty;
  }
  if (nlend == 0 || nr == 0)
    return; /* no send a receive could write */
  struct span *recvs = malloc((size_t)nr * (sizeof(*recvs) + sizeof(char *)));
  if (recvs == NULL) {
    for (int c = 0; c < n; c++)
      ch[c].lend = 0; /* unchecked: through the slots */
    return;
  }
  const char **reach = (const char **)(recvs + nr);
  nr = 0;
  for (int c = 0; c < n; c++)
    if (!ops[c].send && ops[c].count > 0)
      recvs[nr++] = (struct span){
          ops[c].buf, (const char *)ops[c].buf +
                          ops[c].count * ringcc_datatype_size(ops[c].dt)};
  /* A send overlaps a receive when some receive starting before its end
   * reaches past its start: the receives by start, each with the furthest
   * end of those up to it. */
  qsort(recvs, (size_t)nr, sizeof(*recvs), span_cmp);
  for (int i = 0; i < nr; i++)
    reach[i] = i > 0 && reach[i - 1] > recvs[i].b ? reach[i - 1] : recvs[i].b;
  for (int c = 0; c < n; c++) {
    const char *a = ops[c].buf,
               *b = a + ops[c].count * ringcc_datatype_size(ops[c].dt);
    if (!ch[c].lend || a == b)
      continue;
    int lo = 0, hi = nr; /* the receives starting before b: [0, lo) */
    while (lo < hi) {
      int mid = lo + (hi - lo) / 2;
      if (recvs[mid].a < b)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo > 0 && reach[lo - 1] > a)
      ch[c].lend = 0;
  }
  free(recvs);
}

ringcc_result_t rcc_exec_host_p2p(struct ringcc_comm *comm,
                                  struct rcc_p2p_op *ops, int n, int grouped) {
  if (n <= 0)
    return RINGCC_SUCCESS;
  struct chan *ch = calloc((size_t)n, sizeof(*ch));
  if (ch == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_group_end on rank %d: out of memory for %d "
                          "sends and receives", comm->rank, n);
  uint64_t total = 0;
  char local_msg[RCC_ERRLEN];
  struct lent_send lent[LENT_MAX];
  struct land lands[LAND_MAX];
  struct rcc_step ahead[LAND_AHEAD];
  for (int c = 0; c < n; c++) {
    p2p_plan(comm, &ops[c], &ch[c].plan);
    ch[c].src = ch[c].dst = ops[c].buf; /* a send reads it, a recv writes */
    ch[c].esize = ringcc_datatype_size(ops[c].dt);
    ch[c].after = -1;
    ops[c].ran = RCC_ALG_P2P;
    for (int b = c - 1; b >= 0 && ch[c].after < 0; b--)
      if (ops[b].send == ops[c].send && ops[b].peer == ops[c].peer)
        ch[c].after = b;
    total += ch[c].plan.nsteps;
  }
  if (grouped && comm->set.net_zerocopy)
    p2p_zero_copy(comm, ops, ch, n);
  struct exec x = {
      .comm = comm,
      .plan = &ch[0].plan,
      .esize = ch[0].esize,
      .dt = RINGCC_UINT8, /* no reduction: the steps copy bytes */
      .at = &comm->progress,
      .stats = comm->stats,
      .timing = comm->stats->timing,
      .grouped = grouped,
      .p2p = ops,
      .local_msg = local_msg,
      .lent = lent,
      .lands = lands,
      .ahead = ahead,
  };
  RCC_PUT(x.at->coll, ch[0].plan.coll);
  RCC_PUT(x.at->alg, RCC_ALG_P2P);
  RCC_PUT(x.at->nsteps, total);
  waiting_on(&x, "nothing", -1, NULL, 0);
  RCC_PUT(x.at->active, 1);
  for (int c = 0; c < n; c++) { /* engines serve the FIFOs meanwhile */
    struct rcc_conn *conn =
        ops[c].send ? rcc_send_conn(comm, RCC_CONN_P2P, 0, ops[c].peer)
                    : rcc_recv_conn(comm, RCC_CONN_P2P, 0, ops[c].peer);
    if (conn->ops != NULL) {
      conn->ops->release(conn);
      break; /* one engine serves all of a communicator's network FIFOs */
    }
  }
  ringcc_result_t r = run_channels(&x, ch, n);
  if (r == RINGCC_SUCCESS)
    r = placed_wait(&x, ch, n);
  /* The user's buffers are theirs again only once what was sent from them
   * has left (every receive is done: nothing waits for this rank). */
  if (r == RINGCC_SUCCESS && x.nlent > 0)
    r = lent_wait(&x, NULL, 0);
  if (r != RINGCC_SUCCESS && x.nlent > 0)
    lent_release(&x);
  if (x.nland > 0) /* a failure: what still lands goes to the slots */
    land_release(&x);
  if (r == RINGCC_SUCCESS && x.local != RINGCC_SUCCESS) {
    r = x.local; /* the first one's sentence, as the result */
    rcc_comm_set_last_error(comm, x.local_msg);
    comm->failed_locally = 1;
  }
  rcc_p2p_place_end(comm, &x.allowed);
  RCC_PUT(x.at->active, 0);
  free(ch);
  return r;
}

/* ---- a wait for executors with flags of their own ----------------------------- */

ringcc_result_t rcc_exec_host_wait(struct ringcc_comm *comm,
                                   const struct rcc_plan *plan, uint32_t *word,
                                   uint32_t *waiters, uint32_t old,
                                   int64_t *deadline) {
  struct exec x = {.comm = comm, .plan = plan, .at = &comm->progress,
                   .deadline = *deadline, .stats = comm->stats,
                   .timing = comm->stats->timing};
  int r = rcc_host_wait(&x, word, waiters, old);
  *deadline = x.deadline;
  return (ringcc_result_t)r;
}
