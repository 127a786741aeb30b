/*
 * exec_p2p_place.c - the two ends of a point-to-point message read in place
 * (p2p_place.h); exec_host.c runs the FIFO side of it: the slot with the
 * place, the receiver's acknowledgement (the slot handed back), the
 * sender's wait for it.
 *
 * A sender that dies while its receiver reads is RINGCC_ERR_PEER_FAILED on
 * the receiver (process_vm_readv fails with ESRCH, or the pid is gone); a
 * receiver that dies before it handed the slot back is the same on the
 * sender, whose wait for the head checks its peers as every FIFO wait does.
 * A receive that does not match the message (its count or datatype), or a
 * read the kernel refuses otherwise (the sender freed the buffer, or the
 * ptrace exception went away), refuses the message: the receiver records
 * why in the FIFO header's refused[] entry of the slot and hands the slot
 * back, so the sender's wait for the acknowledgement ends at once and it
 * fails too, naming the receive (rcc_p2p_place_acked). A mismatch leaves
 * both communicators usable (nothing moved, the FIFO is past the message);
 * a failed read is RINGCC_ERR_SYSTEM on both, and fatal.
 *
 * Under ThreadSanitizer the FIFO that orders these reads is mapped at a
 * different address in each rank (tsan_sync.h): the sender releases before
 * its place leaves and acquires once acknowledged, the receiver acquires
 * before it reads and releases before it hands the slot back.
 */
#include <errno.h>
#include <string.h>

#include "cma.h"
#include "comm.h"
#include "error.h"
#include "failure.h"
#include "fifo.h"
#include "p2p_place.h"
#include "registry.h"
#include "schedule.h"
#include "stats.h"
#include "thp.h"
#include "topo.h"
#include "tsan_sync.h"

static size_t fifo_bytes(const struct rcc_conn *c) {
  return (size_t)c->nslots * c->slot_bytes;
}

int rcc_p2p_place_offer(struct ringcc_comm *comm, const struct rcc_conn *c,
                        const void *buf, size_t bytes,
                        struct rcc_p2p_where *w, int *allowed) {
  if (c->ops != NULL || bytes < RCC_P2P_PLACE_MIN || bytes <= fifo_bytes(c))
    return -1; /* an engine's FIFO (another host), or a small message */
  *w = (struct rcc_p2p_where){0, 0, bytes, RCC_ZC_NO_SLOT, 0};
  if (rcc_registry_kind(comm) == RCC_ZC_ONE_HOST)
    w->slot = rcc_registry_find(comm->registry, buf, bytes, 0, &w->off);
  if (rcc_cma_usable(comm)) {
    w->addr = (uint64_t)(uintptr_t)buf;
    if (!*allowed) /* the receiver reads it: before it learns where */
      rcc_cma_allow_peers(comm, *allowed = 1);
    if (w->slot == RCC_ZC_NO_SLOT) /* pinned by the reader: huge pages */
      rcc_thp_note(comm, buf, bytes);
  }
  if (w->slot == RCC_ZC_NO_SLOT && w->addr == 0)
    return -1;
  TSAN_RELEASE(); /* the buffer's bytes before the place leaves */
  return w->slot != RCC_ZC_NO_SLOT ? RCC_ALG_ZEROCOPY : RCC_ALG_CMA;
}

/* Reads the message into dst; *err: the errno of a failed cross-memory
 * read (0 otherwise). */
static ringcc_result_t place_read(struct ringcc_comm *comm, int peer,
                                  const struct rcc_p2p_where *w, void *dst,
                                  int *alg, int *err) {
  size_t bytes = (size_t)w->bytes;
  const char *mapped =
      w->slot != RCC_ZC_NO_SLOT &&
              rcc_registry_kind(comm) == RCC_ZC_ONE_HOST
          ? rcc_registry_peer(comm->registry, peer, w->slot, w->off, bytes)
          : NULL;
  *err = 0;
  if (mapped != NULL) {
    rcc_stats_received(comm->stats, peer, bytes);
    memcpy(dst, mapped, bytes);
    *alg = RCC_ALG_ZEROCOPY;
    return RINGCC_SUCCESS;
  }
  if (w->addr == 0 || !rcc_cma_usable(comm)) {
    *err = ENOSYS;
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "ringcc_recv on rank %d from rank %d: the message "
                          "of %zu bytes (registration slot %u) is not mapped "
                          "here and cross-memory attach is not usable",
                          comm->rank, peer, bytes, (unsigned)w->slot);
  }
  *alg = RCC_ALG_CMA;
  int e = rcc_cma_peer_copy(comm, peer, dst, w->addr, bytes, 0);
  if (e == 0)
    return RINGCC_SUCCESS;
  if (e == ESRCH || !rcc_peer_alive(comm, peer)) {
    rcc_peer_dead(comm, peer, comm->rank);
    return rcc_comm_error(comm, RINGCC_ERR_PEER_FAILED,
                          "ringcc_recv on rank %d from rank %d: the sender "
                          "(pid %d) is gone while this rank read its message "
                          "of %zu bytes in place (%s)", comm->rank, peer,
                          (int)comm->peers[peer].pid, bytes, strerror(e));
  }
  *err = e;
  return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                        "ringcc_recv on rank %d from rank %d: reading the "
                        "sender's message of %zu bytes in place (pid %d) "
                        "failed: %s; the message is refused and its sender "
                        "fails too", comm->rank, peer, bytes,
                        (int)comm->peers[peer].pid, strerror(e));
}

ringcc_result_t rcc_p2p_misfit(struct ringcc_comm *comm, int peer,
                               size_t bytes, size_t cap, ringcc_datatype_t dt,
                               int exact, const char *then) {
  size_t esize = ringcc_datatype_size(dt);
  const char *name = ringcc_datatype_name(dt);
  if (exact && bytes != cap)
    return rcc_comm_error(
        comm, RINGCC_ERR_INVALID_USAGE,
        "ringcc_recv on rank %d from rank %d: the message does not match: "
        "expected %zu %s elements (count), the sender's message is %s (%zu "
        "bytes; send and recv counts and datatypes must agree)%s",
        comm->rank, peer, cap / esize, name,
        bytes > cap ? "longer" : "shorter", bytes, then);
  if (bytes > cap || bytes % esize != 0)
    return rcc_comm_error(
        comm, RINGCC_ERR_INVALID_USAGE,
        "ringcc_recv on rank %d from rank %d: the message does not fit: "
        "room for %zu %s elements (count), the sender's message is %s (a "
        "receive takes a message of at most its count)%s", comm->rank, peer,
        cap / esize, name,
        bytes % esize ? "not a whole number of this datatype's elements"
                      : "longer", then);
  return RINGCC_SUCCESS;
}

/* Tells the sender why its message in slot seq was not read (err 0: the
 * receive does not match it), before the slot goes back. */
static void refuse(struct rcc_conn *rc, uint32_t seq, size_t cap,
                   ringcc_datatype_t dt, int exact, int err) {
  struct rcc_refusal *f = &rc->fifo->refused[seq % rc->nslots];
  f->err = err;
  f->count = cap / ringcc_datatype_size(dt);
  f->dt = (uint32_t)dt;
  f->exact = (uint32_t)exact;
  __atomic_store_n(&f->seq1, seq + 1, __ATOMIC_RELEASE);
}

ringcc_result_t rcc_p2p_place_take(struct ringcc_comm *comm,
                                   struct rcc_conn *rc, const char *slot,
                                   size_t slot_bytes, void *dst, size_t cap,
                                   ringcc_datatype_t dt, int exact,
                                   size_t *got, int *alg, int *ack) {
  struct rcc_p2p_where w;
  int peer = rc->peer, err = 0;
  *got = 0;
  *ack = 0;
  if (slot_bytes != sizeof(w))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "ringcc_recv on rank %d from rank %d: the place of "
                          "a message read in place is %zu bytes, not %zu "
                          "(the ranks run different builds of libringcc?)",
                          comm->rank, peer, slot_bytes, sizeof(w));
  memcpy(&w, slot, sizeof(w));
  ringcc_result_t r = rcc_p2p_misfit(
      comm, peer, (size_t)w.bytes, cap, dt, exact,
      "; the message (read in place) is refused: nothing of it was read, "
      "and its sender fails too");
  if (r == RINGCC_SUCCESS) {
    TSAN_ACQUIRE(); /* the sender's bytes, written before the place left */
    r = place_read(comm, peer, &w, dst, alg, &err);
    TSAN_RELEASE(); /* the read, before the slot goes back */
    if (r == RINGCC_SUCCESS)
      *got = (size_t)w.bytes;
  }
  if (r == RINGCC_SUCCESS || r == RINGCC_ERR_INVALID_USAGE || err != 0) {
    if (r != RINGCC_SUCCESS)
      refuse(rc, rc->step, cap, dt, exact, err);
    *ack = 1;
  }
  return r;
}

ringcc_result_t rcc_p2p_place_acked(struct ringcc_comm *comm,
                                    struct rcc_conn *sc, uint32_t seq,
                                    size_t count, ringcc_datatype_t dt,
                                    int *local) {
  struct rcc_refusal *f = &sc->fifo->refused[seq % sc->nslots];
  *local = 0;
  if (__atomic_load_n(&f->seq1, __ATOMIC_ACQUIRE) != seq + 1)
    return RINGCC_SUCCESS;
  struct rcc_refusal why = *f;
  __atomic_store_n(&f->seq1, 0, __ATOMIC_RELAXED);
  size_t esize = ringcc_datatype_size(dt);
  if (why.err != 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "ringcc_send on rank %d to rank %d: rank %d could "
                          "not read this message of %zu bytes in place (%s); "
                          "its receive failed too, and nothing of it was "
                          "delivered", comm->rank, sc->peer, sc->peer,
                          count * esize, strerror(why.err));
  *local = 1;
  return rcc_comm_error(
      comm, RINGCC_ERR_INVALID_USAGE,
      "ringcc_send on rank %d to rank %d: rank %d posted a receive of %s%llu "
      "%s for this %zu-element %s send (%zu bytes, read in place): it was "
      "refused, nothing of it was delivered, and the receive failed too "
      "(send and recv counts and datatypes must agree)",
      comm->rank, sc->peer, sc->peer, why.exact ? "" : "at most ",
      (unsigned long long)why.count,
      ringcc_datatype_name((ringcc_datatype_t)why.dt), count,
      ringcc_datatype_name(dt), count * esize);
}

void rcc_p2p_place_end(struct ringcc_comm *comm, int *allowed) {
  TSAN_ACQUIRE(); /* the receivers' reads, before the buffers go back */
  if (*allowed)
    rcc_cma_allow_peers(comm, 0);
  *allowed = 0;
}
