/*
 * board.h - the one-shot board: where every rank of one host publishes a
 * small allreduce's input for all others to read (exec_board.c runs it).
 * This module owns it: its layout, its size rule, its setup and who wakes
 * its sleepers. It lives in the room shm.c keeps after the FIFOs of each
 * rank's shared-memory segment (comm->shm_extra_bytes, set here before the
 * transports connect; rcc_transports_extra finds it, mapped, afterwards).
 *
 * A region: this header, then the data: in the header's cache line up to
 * RCC_BOARD_INLINE_BYTES (one line moves per peer), else from the next line
 * on (aligned for the vector loops). seq and waiters are futex words, as in a
 * FIFO. Calls alternate between the two regions (rcc_board_region).
 */
#ifndef RCC_BOARD_H
#define RCC_BOARD_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

struct rcc_board {
  uint32_t seq;     /* the board call whose data the region holds */
  uint32_t waiters; /* ranks asleep on seq */
  uint64_t bytes;   /* of that data: every rank checks it against its own */
};
#define RCC_BOARD_INLINE_BYTES 48
#define RCC_BOARD_DATA_OFFSET(bytes) ((bytes) <= RCC_BOARD_INLINE_BYTES ? 16 : 64)
/* Regions hold at most this much (or one slot, if smaller); larger one-shot
 * calls go through the FIFOs. */
#define RCC_BOARD_MAX_BYTES ((size_t)256 << 10)

/* A communicator's board (comm->board): set only where every rank maps
 * every rank's board (agreed at init); NULL otherwise. */
struct rcc_board_set {
  char **region;  /* [nranks] region 0 of each rank's board */
  size_t stride;  /* region 1 is at region[r] + stride */
  size_t bytes;   /* data a region holds */
  uint32_t seq;   /* calls made on the board */
};

/* Rank's region for board call seq. */
static inline struct rcc_board *rcc_board_region(const struct ringcc_comm *comm,
                                                 int rank, uint32_t seq) {
  return (struct rcc_board *)(comm->board->region[rank] +
                              (seq & 1) * comm->board->stride);
}

/* Init, before the transports connect: the room each rank's segment keeps
 * for its board (comm->shm_extra_bytes; the same on every rank). */
void rcc_board_reserve(struct ringcc_comm *comm);
/* Init, after they connected: finds every rank's board where shm mapped it
 * and agrees whether every rank has them all; sets comm->board then, and
 * the words a lost peer wakes (comm->lost_wake). */
ringcc_result_t rcc_board_setup(struct ringcc_comm *comm, int64_t deadline);
/* The data a region holds, or 0 where there is no board (the tuner). */
size_t rcc_board_bytes(const struct ringcc_comm *comm);
/* Destroy: frees comm->board (the regions are shm's). */
void rcc_board_free(struct ringcc_comm *comm);

#endif /* RCC_BOARD_H */
