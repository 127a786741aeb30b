/*
 * exec_recv_from.c - a point-to-point receive from any source, or of a
 * message of at most count (ringcc_recv_from), on host buffers: the
 * executor's blocking path for it (exec_host.c runs the other sends and
 * receives as channels).
 */
#include "exec_host.h"

#include <sched.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "p2p_place.h"

/* ---- point-to-point receive from any source ---------------------------------
 *
 * ringcc_recv_from and ringcc_recv(RINGCC_ANY_SOURCE): the sender is the
 * first peer whose point-to-point FIFO holds a piece, looking from
 * comm->any_source_next on (round robin, so no sender starves); then that
 * sender's whole message is received piece by piece, as long as it is (up
 * to the buffer), until the piece flagged last. Messages of one sender stay
 * in order: it is one FIFO. Looking polls every FIFO, yields, then sleeps
 * on one of them (in turn) a slice at a time: a message on another is seen
 * at the slice's end at the latest. Network FIFOs are served by their
 * engine's thread meanwhile (rcc_host_release_engines), which wakes
 * sleepers as an executor does. */
#define ANY_SOURCE_SLICE_NS 1000000L

static int p2p_ready(const struct ringcc_comm *comm, int p) {
  const struct rcc_conn *c = rcc_recv_conn(comm, RCC_CONN_P2P, 0, p);
  return c->fifo != NULL && slot_ready(c, 0);
}

/* 1 if rank p will send nothing more: it destroyed its communicator (its
 * goodbye closed the FIFO). A peer whose process ended without one died:
 * the wait on it says so. */
static int peer_left(const struct ringcc_comm *comm, int p) {
  const struct rcc_conn *c = rcc_recv_conn(comm, RCC_CONN_P2P, 0, p);
  return c->fifo == NULL ||
         __atomic_load_n(&c->fifo->closed, __ATOMIC_ACQUIRE);
}

static ringcc_result_t nobody_left(struct exec *x) {
  x->local = RINGCC_ERR_INVALID_USAGE; /* nothing moved */
  return rcc_comm_error(x->comm, RINGCC_ERR_INVALID_USAGE,
                        "recv (seq %llu) on rank %d from any source: every "
                        "peer destroyed its communicator, and no message of "
                        "theirs is left (did all ranks make the same calls?)",
                        (unsigned long long)x->comm->seq, x->comm->rank);
}

static int first_ready(const struct ringcc_comm *comm) {
  int n = comm->nranks;
  for (int k = 0; k < n; k++) {
    int p = (comm->any_source_next + k) % n;
    if (p != comm->rank && p2p_ready(comm, p))
      return p;
  }
  return -1;
}

static ringcc_result_t wait_any_source(struct exec *x, int *source) {
  struct ringcc_comm *comm = x->comm;
  struct rcc_spin *spin = &comm->spin;
  int n = comm->nranks, p = comm->rank, wanted = 0;
  rcc_host_release_engines(comm);
  x->wait_word = NULL; /* any FIFO: first_ready looks at them all */
  for (int i = 0;; i++) {
    if ((*source = first_ready(comm)) >= 0)
      return RINGCC_SUCCESS;
    if (i < spin->now) {
      cpu_relax();
      continue;
    }
    if (i < spin->now + spin->yields) {
      sched_yield();
      continue;
    }
    /* The next peer's FIFO to sleep on, skipping peers that left: others
     * may still send. */
    for (int k = 0; k < n; k++) {
      do
        p = (p + 1) % n;
      while (p == comm->rank);
      if (!peer_left(comm, p))
        break;
    }
    if (peer_left(comm, p)) /* every peer left: a message still there? */
      return (*source = first_ready(comm)) >= 0 ? RINGCC_SUCCESS
                                                 : nobody_left(x);
    /* A message a group's send sent may wait in the network for a receive
     * that lands it (parked, net.h): this one does not land, so every
     * engine's receive FIFO reads its next message as it comes (asked
     * once: no message is taken while this wait lasts). */
    for (int q = 0; q < n && !wanted; q++) {
      struct rcc_conn *w = rcc_recv_conn(comm, RCC_CONN_P2P, 0, q);
      if (q != comm->rank && w->fifo != NULL && w->ops != NULL &&
          w->ops->want != NULL)
        w->ops->want(w);
    }
    wanted = 1;
    struct rcc_conn *c = rcc_recv_conn(comm, RCC_CONN_P2P, 0, p);
    waiting_on(x, "data (any source) from", p, c, 0);
    uint32_t *word = &c->fifo->tail;
    struct timespec slice = {0, ANY_SOURCE_SLICE_NS};
    int64_t t0 = x->timing ? rcc_now_ns() : 0;
    __atomic_fetch_add(&c->fifo->tail_waiters, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == c->step)
      futex(word, FUTEX_WAIT, c->step, &slice);
    __atomic_fetch_sub(&c->fifo->tail_waiters, 1, __ATOMIC_SEQ_CST);
    if (x->timing)
      rcc_stats_waited(x->stats, p, 0, rcc_now_ns() - t0);
    if ((*source = first_ready(comm)) >= 0)
      return RINGCC_SUCCESS;
    /* The peer slept on left meanwhile: others may still send (the next
     * round sleeps on one of them), and the checks below are not about it. */
    if (peer_left(comm, p))
      waiting_on(x, "data (any source) from", -1, NULL, 0);
    int r = rcc_host_wait_failed(x);
    if (r != RINGCC_SUCCESS)
      return (ringcc_result_t)r;
  }
}

/* After a piece that does not fit (at the FIFO's head, with meta): takes
 * it and the rest of its message, dropping them, so that the FIFO is at the
 * next message; the failure r is then local. */
static ringcc_result_t drop_rest(struct exec *x, struct rcc_conn *rc,
                                 uint64_t meta, ringcc_result_t r) {
  for (;;) {
    const char *in;
    int last, w = rcc_host_drop_piece(x, rc, meta, &last);
    if (w != 0)
      return (ringcc_result_t)w;
    if (last) {
      x->local = r;
      return r;
    }
    waiting_on(x, "the rest of a refused message from", rc->peer, rc, 0);
    if ((w = rcc_proto_recv_begin(x, rc, &in, &meta)) != 0)
      return (ringcc_result_t)w;
  }
}

/* The message's pieces from src into dst (at most cap bytes); *got: its
 * bytes. */
static ringcc_result_t recv_message(struct exec *x, int src, size_t cap,
                                    size_t *got) {
  struct ringcc_comm *comm = x->comm;
  struct rcc_conn *rc = rcc_recv_conn(comm, RCC_CONN_P2P, 0, src);
  *got = 0;
  for (uint64_t i = 0;; i++) {
    const char *in;
    uint64_t meta;
    RCC_PUT(x->at->step, i);
    waiting_on(x, "data from", src, rc, 0);
    int r = rcc_proto_recv_begin(x, rc, &in, &meta);
    if (r != 0)
      return (ringcc_result_t)r;
    size_t bytes = RCC_META_BYTES(meta);
    if ((meta & RCC_META_PLACE) && i == 0) { /* read in place, then acked */
      int alg, ack;
      r = rcc_p2p_place_take(comm, rc, in, bytes, x->dst, cap, x->dt, 0, got,
                             &alg, &ack);
      if (ack)
        rcc_proto_recv_end(rc);
      if (r == RINGCC_ERR_INVALID_USAGE && ack)
        x->local = RINGCC_ERR_INVALID_USAGE; /* refused: nothing moved */
      return (ringcc_result_t)r;
    }
    if (bytes > cap - *got || bytes % x->esize != 0)
      return drop_rest(x, rc, meta,
                       rcc_p2p_misfit(comm, src, *got + bytes, cap, x->dt, 0,
                                      "; the rest of the message is taken "
                                      "and dropped, the communicator stays "
                                      "usable"));
    copy_bytes(x->dst + *got, in, bytes);
    *got += bytes;
    rcc_proto_recv_end(rc);
    rcc_stats_received(x->stats, src, bytes);
    if (meta & RCC_META_LAST)
      return RINGCC_SUCCESS;
  }
}

ringcc_result_t rcc_exec_host_recv_from(struct ringcc_comm *comm,
                                        const struct rcc_plan *plan, int peer,
                                        void *dst, ringcc_datatype_t dt,
                                        int exact, int *source,
                                        size_t *count) {
  struct exec x = {
      .comm = comm,
      .plan = plan,
      .dst = dst,
      .esize = ringcc_datatype_size(dt),
      .dt = dt,
      .at = &comm->progress,
      .stats = comm->stats,
      .timing = comm->stats->timing,
  };
  ringcc_result_t r = RINGCC_SUCCESS;
  size_t got = 0;

  RCC_PUT(x.at->coll, plan->coll);
  RCC_PUT(x.at->alg, plan->alg);
  RCC_PUT(x.at->channel, 0);
  RCC_PUT(x.at->nsteps, plan->nsteps);
  RCC_PUT(x.at->step, (uint64_t)0);
  RCC_PUT(x.at->kind, (int)RCC_STEP_RECV);
  RCC_PUT(x.at->block, peer);
  RCC_PUT(x.at->nelem, plan->count);
  waiting_on(&x, "nothing", -1, NULL, 0);
  RCC_PUT(x.at->active, 1);
  if (peer == RINGCC_ANY_SOURCE) {
    r = wait_any_source(&x, &peer);
    if (r == RINGCC_SUCCESS) {
      comm->any_source_next = (peer + 1) % comm->nranks;
      RCC_PUT(x.at->block, peer);
    }
  }
  if (r == RINGCC_SUCCESS)
    r = recv_message(&x, peer, plan->count * x.esize, &got);
  if (r == RINGCC_SUCCESS && exact) /* taken whole: local */
    x.local = r = rcc_p2p_misfit(comm, peer, got, plan->count * x.esize, dt,
                                 1, "; the message was taken, the "
                                 "communicator stays usable");
  /* Failures that left every FIFO where it was, or past a whole message. */
  comm->failed_locally = r != RINGCC_SUCCESS && r == x.local;
  RCC_PUT(x.at->active, 0);
  *source = peer;
  *count = got / x.esize;
  return r;
}
