/*
 * proto.h - the FIFO step protocol shared by the host and the CUDA executors.
 *
 * A connection is a FIFO of nslots slots of slot_bytes each, in memory that
 * both ends can see (shared host memory, peer GPU memory, or registered
 * memory that a network proxy fills). Two counters live beside the slots:
 *
 *   tail  - slots the sender has filled (written by the sender only)
 *   head  - slots the receiver has consumed (written by the receiver only)
 *
 * The sender of slot number s waits until s - head < nslots (a free slot),
 * writes slot s % nslots and its meta word, then publishes tail = s + 1 with
 * release ordering. The receiver of slot s waits until tail > s (acquire),
 * reads the slot, then publishes head = s + 1 (release) so the slot can be
 * reused. (CUDA P2P FIFOs keep head in the sender's memory instead, so that
 * neither end polls across the link: rcc_conn.head_mirror.) Counters are 32-bit and compared with wrap-around arithmetic; they
 * are also futex words, so a host waiter can sleep on them.
 *
 * Each slot carries a meta word: the payload bytes and a tag (the last piece
 * of a point-to-point message is flagged), so a receiver detects a sender
 * that disagrees on the size instead of silently reading garbage.
 *
 * This file is included by exec_host.c and exec_cuda.cu. The includer
 * defines, before including it:
 *   RCC_HD                          function qualifier ("" on the host,
 *                                   "__device__" in CUDA)
 *   RCC_LOAD_ACQUIRE(p)             acquire load of a uint32_t
 *   RCC_STORE_RELEASE(p, v)         release store of a uint32_t
 *   RCC_PROTO_WAIT(ctx, word, waiters, old)
 *                                   block while *word == old; evaluates to a
 *                                   ringcc_result_t (deadline, abort, peer
 *                                   failure are the includer's policy)
 *   RCC_PROTO_WAKE(conn, word, waiters)
 *                                   wake sleepers on word after a publish
 *                                   (a waiting executor, or conn's engine
 *                                   through conn->ops)
 */
#ifndef RCC_PROTO_H
#define RCC_PROTO_H

#include <stddef.h>
#include <stdint.h>

/* C11 and C++ (exec_cuda.cu) spell alignment and static checks apart. */
#ifdef __cplusplus
#define RCC_ALIGNAS(n) alignas(n)
#define RCC_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define RCC_ALIGNAS(n) _Alignas(n)
#define RCC_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define RCC_FIFO_MAX_SLOTS 64
#define RCC_CACHELINE 64

/* The part of a FIFO that lives in shared memory, followed (at
 * RCC_FIFO_DATA_OFFSET) by nslots * slot_bytes of payload. */
struct rcc_fifo {
  RCC_ALIGNAS(RCC_CACHELINE) uint32_t tail;  /* written by the sender */
  uint32_t tail_waiters;                  /* receivers sleeping on tail */
  RCC_ALIGNAS(RCC_CACHELINE) uint32_t head;  /* written by the receiver */
  uint32_t head_waiters;                  /* senders sleeping on head */
  RCC_ALIGNAS(RCC_CACHELINE) uint64_t meta[RCC_FIFO_MAX_SLOTS];
  uint32_t closed; /* the sender's rank left cleanly (network FIFOs) */
  uint32_t dead;   /* 1 + a rank known dead, written by either end
                      (failure.c); 0 while none is */
  /* Messages read in place (RCC_META_PLACE) that their receiver refused,
   * by slot (exec_p2p_place.c): written by the receiver before it hands
   * the slot back, read and cleared by the sender once the head passed
   * it, before it fills that slot again. */
  struct rcc_refusal {
    uint32_t seq1;  /* 1 + the message's FIFO sequence number; 0: none */
    int32_t err;    /* 0: the receive does not match it; else the errno
                       of the receiver's failed read */
    uint64_t count; /* the receive's count, in elements of dt */
    uint32_t dt;    /* its ringcc_datatype_t */
    uint32_t exact; /* 1: exactly count (ringcc_recv); 0: at most */
  } refused[RCC_FIFO_MAX_SLOTS];
};
#define RCC_FIFO_DATA_OFFSET 4096
RCC_STATIC_ASSERT(sizeof(struct rcc_fifo) <= RCC_FIFO_DATA_OFFSET,
                  "fifo header must fit before the data");

#define RCC_META_LAST ((uint64_t)1 << 32) /* last piece of a p2p message */
/* A p2p message whose bytes stay in the sender's memory: the slot holds
 * their place, and the receiver hands it back once it has read them
 * (exec_p2p_place.c). */
#define RCC_META_PLACE ((uint64_t)1 << 33)
/* A piece of a collective whose receives land in the user's buffer
 * (AllToAll(v), Gather, Scatter): over the network it may wait in the
 * socket until its receiver lands it (net.h park), rather than be read into
 * the slot and copied out of it. Receivers ignore it. */
#define RCC_META_LANDS ((uint64_t)1 << 34)
#define RCC_META_BYTES(m) ((uint32_t)((m) & 0xffffffffu))

/* The zero-copy flags of device calls (exec_zc_cuda.cu, registry.h): two
 * counters per rank in device memory of its own, mapped by its peers on
 * their GPUs at registration. Only the owner's kernels write them (release,
 * system scope), its peers' kernels read them (acquire) and spin until they
 * reach the call's number v, compared with wrap-around arithmetic. Separate
 * from the host board's records (exec_zc.c), which carry each call's
 * buffers and are written and read by the host. */
#define RCC_ZC_DEV_MAX 8 /* local ranks the zero-copy kernel takes */

struct rcc_zc_dev_flags {
  uint32_t arrive; /* device zero-copy calls whose inputs are ready */
  uint32_t done;   /* ... that no longer touch peers' buffers */
};

struct rcc_conn_ops;

/* One end of a connection, as seen by the process that uses it. */
struct rcc_conn {
  struct rcc_fifo *fifo;
  char *data;          /* fifo's payload area */
  uint32_t nslots;
  uint32_t step;       /* sender: next slot to fill; receiver: next to read */
  size_t slot_bytes;
  int peer;            /* the rank at the other end */
  /* NULL where both ends are executors that share the FIFO's memory (shm,
   * p2p): a publish wakes futex sleepers, and a peer's liveness is its pid
   * and the FIFO's dead word. Otherwise the other end is an engine (the
   * network proxy) that the host executor drives through these hooks. */
  const struct rcc_conn_ops *ops;
  void *engine;        /* the engine's side of this connection */
  /* CUDA P2P device FIFOs (p2p.c): the head counter lives here, in the
   * sender's GPU memory, instead of in fifo->head - the receiver writes it
   * over the link and the sender polls it locally. NULL for every other
   * FIFO; only the CUDA executor reads it (RCC_PROTO_HEAD_MIRROR). */
  uint32_t *head_mirror;
};

/* What a host executor asks of a connection whose other end is an engine.
 * The first four are required, the rest optional (NULL: not offered). */
struct rcc_conn_ops {
  /* The executor published a slot on c (tail of a send FIFO, head of a
   * receive FIFO): hand it on now, from this thread if that is cheapest. */
  void (*published)(struct rcc_conn *c);
  /* Waits until *word != old, progressing the engine meanwhile; after each
   * sleep calls check(ctx), and a non-zero result ends the wait with it. */
  int (*wait)(struct rcc_conn *c, const uint32_t *word, uint32_t old,
              int (*check)(void *ctx), void *ctx);
  /* Optional: wait() for several FIFOs of this engine at once (a channel
   * executor whose blocked channels are all on it: conns[0 .. n - 1], each
   * waiting for data if a receive FIFO, for room if a send FIFO): drives
   * the engine until ready(ctx) is true; check(ctx) as in wait(). */
  int (*wait_any)(struct rcc_conn *const *conns, int n,
                  int (*ready)(void *ctx), int (*check)(void *ctx),
                  void *ctx);
  /* Wakes the engine: something it must act on changed (a dead rank to
   * pass on, a kernel that publishes without waking anybody). */
  void (*notify)(struct rcc_conn *c);
  /* The executor will not drive the engine through wait() for a while (it
   * progresses several channels and sleeps on their counters): the
   * engine's own thread moves the slots and wakes futex sleepers. */
  void (*release)(struct rcc_conn *c);
  /* Send FIFO, optional (with flush): like published, but the engine may
   * hold the slot back until flush(c), or until the executor next waits
   * through it, so that the sends the executor publishes one after another
   * leave together (over TCP, in one sendmsg() a socket; see
   * docs/performance.md). The executor flushes before anything but another
   * such send, so no send is held while the executor computes or waits
   * elsewhere. */
  void (*published_later)(struct rcc_conn *c);
  /* then_wait: the executor waits through the engine next (wait()), so what
   * the network cannot take at once may wait for it. */
  void (*flush)(struct rcc_conn *c, int then_wait);
  /* Send FIFO, before every publish where the engine offers it: the slot
   * about to be published (number c->step) leaves from p instead, which the
   * executor keeps unchanged until the FIFO's head passes it (a send
   * straight from the user's buffer); NULL: from the slot. */
  void (*lend)(struct rcc_conn *c, const char *p);
  /* Receive FIFO: message seq lands at p (bytes long) instead of its slot,
   * if the engine can still move it: 1, else 0. */
  int (*land)(struct rcc_conn *c, uint32_t seq, char *p, size_t bytes);
  /* The executor consumed message seq where it landed. */
  void (*landed)(struct rcc_conn *c, uint32_t seq);
  /* Receive FIFO, optional: the executor is about to sleep until c's next
   * message is in without driving the engine (a futex wait while the
   * engine's thread serves the FIFOs): the engine reads that message now,
   * also where it would leave it in the network for its receiver to land
   * (parked, net.h). */
  void (*want)(struct rcc_conn *c);
  /* After a failed call the user's buffers go back to the user: what is
   * still lent or landing there moves into the slots (or, where the engine
   * cannot, the connection is given up). */
  void (*reclaim)(struct rcc_conn *c);
  /* Send FIFO, optional: all = 1: what the executor sends may wait in the
   * network past the engine's bound on bytes not sent yet (a rank that
   * sends to every peer at once, the call's bottleneck: each receiver's
   * reads then move its bytes, exec_host.c); 0: the bound again. */
  void (*unsent_all)(struct rcc_conn *c, int all);
};

#endif /* RCC_PROTO_H */

/* The protocol functions, for files that define the hooks above. */
#if defined(RCC_PROTO_WAIT) && !defined(RCC_PROTO_FUNCTIONS)
#define RCC_PROTO_FUNCTIONS

/* The head counter a sender polls and a receiver publishes: fifo->head, or
 * for an includer that defines RCC_PROTO_HEAD_MIRROR (the CUDA executor) the
 * connection's head_mirror where it has one. */
#ifdef RCC_PROTO_HEAD_MIRROR
#define RCC_HEAD_WORD(c) ((c)->head_mirror ? (c)->head_mirror : &(c)->fifo->head)
#else
#define RCC_HEAD_WORD(c) (&(c)->fifo->head)
#endif

/* Sender: wait for a free slot and return where to write it. */
RCC_HD static inline int rcc_proto_send_begin(void *ctx, struct rcc_conn *c,
                                              char **slot) {
  uint32_t *head_word = RCC_HEAD_WORD(c);
  for (;;) {
    uint32_t head = RCC_LOAD_ACQUIRE(head_word);
    if ((uint32_t)(c->step - head) < c->nslots)
      break;
    int r = RCC_PROTO_WAIT(ctx, head_word, &c->fifo->head_waiters, head);
    if (r != 0)
      return r;
  }
  *slot = c->data + (size_t)(c->step % c->nslots) * c->slot_bytes;
  return 0;
}

/* Sender: make the slot filled since rcc_proto_send_begin visible, without
 * waking anybody (rcc_proto_send_end does both). */
RCC_HD static inline void rcc_proto_send_post(struct rcc_conn *c,
                                              uint64_t meta) {
  c->fifo->meta[c->step % c->nslots] = meta;
  c->step++;
  RCC_STORE_RELEASE(&c->fifo->tail, c->step);
}

/* Sender: publish the slot filled since rcc_proto_send_begin. */
RCC_HD static inline void rcc_proto_send_end(struct rcc_conn *c,
                                             uint64_t meta) {
  rcc_proto_send_post(c, meta);
  RCC_PROTO_WAKE(c, &c->fifo->tail, &c->fifo->tail_waiters);
}

/* Receiver: wait for the next slot; returns its payload and meta word. */
RCC_HD static inline int rcc_proto_recv_begin(void *ctx, struct rcc_conn *c,
                                              const char **slot,
                                              uint64_t *meta) {
  for (;;) {
    uint32_t tail = RCC_LOAD_ACQUIRE(&c->fifo->tail);
    if (tail != c->step)
      break;
    int r = RCC_PROTO_WAIT(ctx, &c->fifo->tail, &c->fifo->tail_waiters, tail);
    if (r != 0)
      return r;
  }
  *slot = c->data + (size_t)(c->step % c->nslots) * c->slot_bytes;
  *meta = c->fifo->meta[c->step % c->nslots];
  return 0;
}

/* Receiver: hand the slot back to the sender. */
RCC_HD static inline void rcc_proto_recv_end(struct rcc_conn *c) {
  c->step++;
  RCC_STORE_RELEASE(RCC_HEAD_WORD(c), c->step);
  RCC_PROTO_WAKE(c, RCC_HEAD_WORD(c), &c->fifo->head_waiters);
}

#endif /* RCC_PROTO_FUNCTIONS */
