/*
 * board.c - the one-shot board's size rule and setup (board.h).
 */
#include <stdlib.h>

#include "agree.h"
#include "board.h"
#include "comm.h"
#include "error.h"
#include "log.h"
#include "transport.h"

/* What a region holds: one shared-memory slot, at most
 * RCC_BOARD_MAX_BYTES; each region starts on its own cache line. */
static size_t region_bytes(const struct ringcc_comm *comm) {
  size_t slot = (size_t)comm->set.chunk_bytes;
  return slot < RCC_BOARD_MAX_BYTES ? slot : RCC_BOARD_MAX_BYTES;
}

static size_t region_stride(const struct ringcc_comm *comm) {
  return (64 + region_bytes(comm) + 63) & ~(size_t)63;
}

void rcc_board_reserve(struct ringcc_comm *comm) {
  comm->shm_extra_bytes = 2 * region_stride(comm);
}

/* The board is used only where every rank reads every rank's board (the
 * shared-memory transport maps them with its FIFOs, so a rank has them all
 * when every edge is plain shared memory). Agreed through the bootstrap,
 * since a rank that used the board while a peer used the FIFOs would wait
 * forever. */
ringcc_result_t rcc_board_setup(struct ringcc_comm *comm, int64_t deadline) {
  int n = comm->nranks, ok = n > 1, agreed = 0;
  struct rcc_board_set *b = ok ? calloc(1, sizeof(*b)) : NULL;
  char **region = ok ? calloc((size_t)n, sizeof(char *)) : NULL;
  ok = b != NULL && region != NULL;
  for (int p = 0; p < n && ok; p++)
    ok = (region[p] = rcc_transports_extra(comm, p)) != NULL;
  ringcc_result_t r = rcc_all_agree(comm, ok, &agreed, deadline);
  if (r == RINGCC_SUCCESS && agreed) {
    b->region = region;
    b->stride = region_stride(comm);
    b->bytes = region_bytes(comm);
    comm->board = b;
    /* Peers asleep on this rank's board wake when one is lost (failure.c). */
    for (uint32_t s = 0; s < 2 && s < RCC_LOST_WAKE_MAX; s++)
      comm->lost_wake[s] = &rcc_board_region(comm, comm->rank, s)->seq;
  } else {
    free(region);
    free(b);
  }
  if (r != RINGCC_SUCCESS)
    return r;
  RCC_INFO(comm->rank, "one-shot board (%zu bytes a call): %s",
           region_bytes(comm),
           agreed ? "available"
                  : "not available (ranks on several hosts, or an edge "
                    "that is not plain shared memory)");
  return RINGCC_SUCCESS;
}

size_t rcc_board_bytes(const struct ringcc_comm *comm) {
  return comm->board != NULL ? comm->board->bytes : 0;
}

void rcc_board_free(struct ringcc_comm *comm) {
  for (int s = 0; s < RCC_LOST_WAKE_MAX; s++)
    comm->lost_wake[s] = NULL;
  if (comm->board != NULL)
    free(comm->board->region);
  free(comm->board);
  comm->board = NULL;
}
