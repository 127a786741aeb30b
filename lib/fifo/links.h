/*
 * links.h - FIFOs that a communicator shares with the one shrunk from it
 * (ringcc_comm_shrink reuses the parent's intact links: shared-memory
 * FIFOs, and network connections with their FIFOs, net.c).
 *
 * Two communicators that share links are never used at once (the rule in
 * docs/reliability.md), but one after the other: each keeps its own end of
 * a shared FIFO (struct rcc_conn, with the step it is at), while the FIFO's
 * counters are the truth. Between two calls a sender's step is the tail it
 * published and a receiver's the head it consumed, so the communicator that
 * starts a call after the other one ran takes its steps from the counters.
 */
#ifndef RCC_LINKS_H
#define RCC_LINKS_H

#include "comm.h"

/* child shares parent's links (the parent's record, made on the first
 * shrink, with one more reference). 0, or -1 out of memory. */
int rcc_links_share(struct ringcc_comm *parent, struct ringcc_comm *child);
/* Before a call that moves data: where another communicator used the
 * shared links last, this one's steps are taken from the FIFOs' counters. */
void rcc_links_use(struct ringcc_comm *comm);
/* At destroy: one reference less (the record goes with the last). */
void rcc_links_drop(struct ringcc_comm *comm);
/* The steps of comm's host FIFOs (shared memory, and the network's, whose
 * other end is the proxy) from their counters: a send FIFO's tail, a
 * receive FIFO's head. */
void rcc_links_resync(struct ringcc_comm *comm);

#endif /* RCC_LINKS_H */
