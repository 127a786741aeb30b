/*
 * board.h - the one-shot board: where every rank of one host publishes a
 * small allreduce's input for all others to read (exec_host.c runs it; shm.c
 * puts each rank's two regions at the end of its segment and maps every
 * peer's; comm->board[r] is rank r's region 0).
 *
 * A region: this header, then the data: in the header's cache line up to
 * RCC_BOARD_INLINE_BYTES (one line moves per peer), else from the next line
 * on (aligned for the vector loops). seq and waiters are futex words, as in a
 * FIFO. Calls alternate between the two regions (rcc_board_region).
 */
#ifndef RCC_BOARD_H
#define RCC_BOARD_H

#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

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

/* Rank's region for board call seq. */
static inline struct rcc_board *rcc_board_region(const struct ringcc_comm *comm,
                                                 int rank, uint32_t seq) {
  return (struct rcc_board *)(comm->board[rank] +
                              (seq & 1) * comm->board_stride);
}

/* Wakes every rank asleep on this rank's board (a peer died: failure.c). */
static inline void rcc_board_wake(const struct ringcc_comm *comm) {
  if (comm->board == NULL || comm->board[comm->rank] == NULL)
    return;
  for (uint32_t s = 0; s < 2; s++)
    syscall(SYS_futex, &rcc_board_region(comm, comm->rank, s)->seq,
            FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Agrees comm->board_ok at init: the board is used only where every rank
 * maps every rank's board (exec_host.c). */
ringcc_result_t rcc_board_setup(struct ringcc_comm *comm, int64_t deadline);

#endif /* RCC_BOARD_H */
