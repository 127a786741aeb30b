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
 * reused. Counters are 32-bit and compared with wrap-around arithmetic; they
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
 *                                   (a proxy thread, through conn->doorbell,
 *                                   or a waiting executor)
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
};
#define RCC_FIFO_DATA_OFFSET 4096
RCC_STATIC_ASSERT(sizeof(struct rcc_fifo) <= RCC_FIFO_DATA_OFFSET,
                  "fifo header must fit before the data");

#define RCC_META_LAST ((uint64_t)1 << 32) /* last piece of a p2p message */
#define RCC_META_BYTES(m) ((uint32_t)((m) & 0xffffffffu))

struct rcc_proxy;

/* One end of a connection, as seen by the process that uses it. */
struct rcc_conn {
  struct rcc_fifo *fifo;
  char *data;          /* fifo's payload area */
  uint32_t nslots;
  uint32_t step;       /* sender: next slot to fill; receiver: next to read */
  size_t slot_bytes;
  int peer;            /* the rank at the other end */
  int doorbell;        /* eventfd of a proxy thread serving the other end,
                          or -1 when the other end is an executor */
  struct rcc_proxy *proxy; /* that proxy (proxy.c): a host executor runs its
                              rounds itself when it publishes or waits */
  void *proxy_conn;        /* the proxy's side of this connection */
};

#endif /* RCC_PROTO_H */

/* The protocol functions, for files that define the hooks above. */
#if defined(RCC_PROTO_WAIT) && !defined(RCC_PROTO_FUNCTIONS)
#define RCC_PROTO_FUNCTIONS

/* Sender: wait for a free slot and return where to write it. */
RCC_HD static inline int rcc_proto_send_begin(void *ctx, struct rcc_conn *c,
                                              char **slot) {
  for (;;) {
    uint32_t head = RCC_LOAD_ACQUIRE(&c->fifo->head);
    if ((uint32_t)(c->step - head) < c->nslots)
      break;
    int r = RCC_PROTO_WAIT(ctx, &c->fifo->head, &c->fifo->head_waiters, head);
    if (r != 0)
      return r;
  }
  *slot = c->data + (size_t)(c->step % c->nslots) * c->slot_bytes;
  return 0;
}

/* Sender: publish the slot filled since rcc_proto_send_begin. */
RCC_HD static inline void rcc_proto_send_end(struct rcc_conn *c,
                                             uint64_t meta) {
  c->fifo->meta[c->step % c->nslots] = meta;
  c->step++;
  RCC_STORE_RELEASE(&c->fifo->tail, c->step);
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
  RCC_STORE_RELEASE(&c->fifo->head, c->step);
  RCC_PROTO_WAKE(c, &c->fifo->head, &c->fifo->head_waiters);
}

#endif /* RCC_PROTO_FUNCTIONS */
