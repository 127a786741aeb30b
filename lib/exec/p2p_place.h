/*
 * p2p_place.h - large point-to-point messages on one host read in place by
 * their receiver (exec_p2p_place.c), one copy per byte where the FIFOs copy
 * each byte into a slot and out of it.
 *
 * The sender of a message of at least rcc_p2p_place_min bytes on a shared
 * memory FIFO puts its place in one slot (struct rcc_p2p_where, the meta
 * word flagged RCC_META_PLACE) instead of its bytes: its address where
 * cross-memory attach is usable (rcc_cma_usable), its registration slot
 * and offset where the sender registered the memory and every rank is on
 * one host. The receiver reads the bytes from there (memcpy from the
 * registered memory as mapped here, else process_vm_readv) and only then
 * hands the slot back: the FIFO's head passing the slot is the
 * acknowledgement, and the sender's call (or group) returns only once it
 * has seen it, so the buffer is the caller's again. The form is in the
 * message, so a receiver needs no agreement on it: ringcc_recv,
 * ringcc_recv_from, a group's receive take either.
 */
#ifndef RCC_P2P_PLACE_H
#define RCC_P2P_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct ringcc_comm;
struct rcc_conn;

/* Messages from this many bytes on are read in place, and only those that
 * outgrow their FIFO (nslots x slot_bytes), whose send waits for its
 * receiver anyway: a send that returned before its receiver came still
 * does (docs/tuning.md). */
#define RCC_P2P_PLACE_MIN (64 << 10)

/* What a message's slot holds in place of its bytes. */
struct rcc_p2p_where {
  uint64_t addr;  /* in the sender's address space; 0: not for cma */
  uint64_t off;   /* in registration slot */
  uint64_t bytes; /* the message's length */
  uint32_t slot;  /* RCC_ZC_NO_SLOT: not registered */
  uint32_t pad;
};

/* The sender: whether the message of bytes at buf to peer over c goes as
 * its place: the algorithm that will move it (RCC_ALG_ZEROCOPY: registered,
 * RCC_ALG_CMA: cross-memory attach), with *w filled, else -1 (the FIFO).
 * Before a place with an address leaves, the rank allows its peers to read
 * it (once per call: *allowed; rcc_p2p_place_end withdraws it). */
int rcc_p2p_place_offer(struct ringcc_comm *comm, const struct rcc_conn *c,
                        const void *buf, size_t bytes,
                        struct rcc_p2p_where *w, int *allowed);

/* The receiver, given the slot at rc's head flagged RCC_META_PLACE
 * (slot_bytes in its meta word): checks that the message fits dst (cap
 * bytes of dt; exact: it must be cap bytes long) and reads it there; *got:
 * its bytes; *alg: how (as rcc_p2p_place_offer). *ack 1: the caller hands
 * the slot back now (rcc_proto_recv_end, the acknowledgement): the message
 * was read, or refused
 * because it does not match (RINGCC_ERR_INVALID_USAGE: nothing moved, the
 * FIFO is past it) or because the read failed (RINGCC_ERR_SYSTEM): the
 * refusal says why to the sender (rcc_p2p_place_acked). */
ringcc_result_t rcc_p2p_place_take(struct ringcc_comm *comm,
                                   struct rcc_conn *rc, const char *slot,
                                   size_t slot_bytes, void *dst, size_t cap,
                                   ringcc_datatype_t dt, int exact,
                                   size_t *got, int *alg, int *ack);

/* The sender, once sc's head passed its message of count elements of dt in
 * slot number seq: RINGCC_SUCCESS where it was read, else the receiver's
 * refusal as this rank's error (*local 1: a receive that does not match,
 * RINGCC_ERR_INVALID_USAGE; 0: its read failed, RINGCC_ERR_SYSTEM). */
ringcc_result_t rcc_p2p_place_acked(struct ringcc_comm *comm,
                                    struct rcc_conn *sc, uint32_t seq,
                                    size_t count, ringcc_datatype_t dt,
                                    int *local);

/* A receive from rank peer with room for cap bytes of dt (exact: it takes
 * exactly cap) of a message of bytes: the error (RINGCC_ERR_INVALID_USAGE,
 * said on comm, the sentence ending with then) where it does not match. */
ringcc_result_t rcc_p2p_misfit(struct ringcc_comm *comm, int peer,
                               size_t bytes, size_t cap, ringcc_datatype_t dt,
                               int exact, const char *then);

/* The sender, at the end of the call (its receivers have read, or it
 * failed): withdraws the ptrace exception where *allowed. */
void rcc_p2p_place_end(struct ringcc_comm *comm, int *allowed);

#endif /* RCC_P2P_PLACE_H */
