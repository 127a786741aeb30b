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
/* The same for a rank lost to this communicator: died, or (unreachable)
 * alive perhaps but its host no longer answers (a link that failed without
 * closing: the network plugin says so). */
void rcc_peer_lost(struct ringcc_comm *comm, int rank, int told_by,
                   int unreachable);
/* The recorded dead rank (and who told), or -1. */
int rcc_dead_rank(const struct ringcc_comm *comm, int *told_by);
/* For every peer on this host in another process: a dead rank named in the
 * host FIFOs shared with it, or its process gone, is recorded and passed on
 * as above (what the host executor checks while it waits, for a thread that
 * does not wait: the CUDA watchdog). Returns the dead rank known, or -1. */
int rcc_check_peers(struct ringcc_comm *comm);
/* 1 when the recorded rank is unreachable rather than dead. */
int rcc_dead_unreachable(const struct ringcc_comm *comm);
/* The lost rank a host FIFO shared with peer names (*unreachable says how,
 * may be NULL), or -1. */
int rcc_peer_poisoned(const struct ringcc_comm *comm, int peer,
                      int *unreachable);
/* A FIFO's dead word (1 + rank, and RCC_DEAD_UNREACHABLE): the rank and how. */
#define RCC_DEAD_UNREACHABLE 0x40000000u
#define RCC_DEAD_RANK(word) ((int)((word) & ~RCC_DEAD_UNREACHABLE) - 1)
/* "rank 4" or "ranks 4, 5": the ranks on rank's host (a host that fails
 * takes all of them). */
void rcc_host_ranks(const struct ringcc_comm *comm, int rank, char *buf,
                    size_t len);
/* "rank 3 (pid 1234 on host node7) died ..." (or "... is unreachable ...")
 * into buf; the rank, or -1. */
int rcc_dead_describe(const struct ringcc_comm *comm, char *buf, size_t len);

#endif /* RCC_FAILURE_H */
