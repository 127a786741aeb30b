/*
 * failure.h - which peers are alive, and what a rank knows about a dead one
 * and passes on (failure.c).
 */
#ifndef RCC_FAILURE_H
#define RCC_FAILURE_H

#include <stddef.h>

struct ringcc_comm;

/* 0 if rank peer's process is known to be gone (same pid space only). */
int rcc_peer_alive(const struct ringcc_comm *comm, int peer);
/* Records that rank dead died (told_by: the rank that said so, this rank if
 * it noticed) and passes it on along every edge; the first record wins. */
void rcc_peer_dead(struct ringcc_comm *comm, int dead, int told_by);
/* The recorded dead rank (and who told), or -1. */
int rcc_dead_rank(const struct ringcc_comm *comm, int *told_by);
/* The dead rank a host FIFO shared with peer names, or -1. */
int rcc_peer_poisoned(const struct ringcc_comm *comm, int peer);
/* For every peer on this host in another process: a dead rank named in the
 * host FIFOs shared with it, or its process gone, is recorded and passed on
 * as above (what the host executor checks while it waits, for a thread that
 * does not wait: the CUDA watchdog). Returns the dead rank known, or -1. */
int rcc_check_peers(struct ringcc_comm *comm);
/* "rank 3 (pid 1234 on host node7) died ..." into buf; the rank, or -1. */
int rcc_dead_describe(const struct ringcc_comm *comm, char *buf, size_t len);

#endif /* RCC_FAILURE_H */
