/*
 * exec_a2av.c - AllToAllv on one host, each large block read in place by
 * its receiver: one copy per byte, where the FIFOs' pairwise exchange
 * copies every byte into a slot and out of it.
 *
 *   1. the pairwise exchange (direct.c) over the FIFOs, in which a block of
 *      at most RCC_A2AV_INLINE_MAX bytes travels as it is and a larger one
 *      as its place (struct where: its address, and its registration slot
 *      and offset where the sender registered the memory). Both ends of a
 *      pair know the block's size (the sender's sendcounts, the receiver's
 *      recvcounts), so both know which form it takes. The place lands in
 *      the receive buffer where the block goes (a large block has room);
 *   2. each rank reads its large blocks: from the sender's registered
 *      memory as mapped here (registry.h; memcpy, no page pinned), else
 *      through cross-memory attach (process_vm_readv, exec_cma.c);
 *   3. blocks it could read neither way (the sender's memory not registered
 *      where cross-memory attach is not allowed) follow through the FIFOs;
 *   4. every reader tells each sender it read from that it is done (one
 *      byte back), and a sender returns only then: its buffer is the
 *      caller's again.
 *
 * A phase in which a rank has nothing to send or receive is skipped: its
 * peers have nothing for it either (the counts agree pairwise), so a call
 * whose blocks are all small is the pairwise exchange alone. A rank that
 * sends large blocks packs its small blocks and places into staging (the
 * FIFO plan has one send buffer); the large blocks are never copied there.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "a2av.h"
#include "cma.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "registry.h"
#include "stats.h"
#include "topo.h"
#include "tsan_sync.h"

/* What a large block's receiver learns of it. */
struct where {
  uint64_t addr; /* in the sender's address space; 0: not for cma */
  uint64_t off;  /* in registration slot */
  uint32_t slot; /* RCC_ZC_NO_SLOT: not registered */
  uint32_t fifo; /* 1: readable neither way, it follows in phase 3 */
};

struct a2av {
  struct ringcc_comm *comm;
  const struct rcc_a2av *v;
  int n, me, cma, zc;
  int allowed; /* holds a share of the ptrace exception for the call */
  size_t *sc, *sd, *rc, *rd; /* the current phase's plan, in bytes */
  uint8_t *big_s, *big_r;    /* per peer: 1 large, 2 large through FIFOs */
  uint8_t *ack_out, *ack_in; /* phase 4's bytes, one per peer */
  char *pack;
};

/* A pairwise exchange of byte blocks over the FIFOs; nothing where this
 * rank has nothing to move (then neither have its peers for it). */
static ringcc_result_t exchange(struct a2av *a, const void *src, void *dst) {
  struct ringcc_comm *comm = a->comm;
  int any = 0;
  a->sc[a->me] = a->rc[a->me] = 0;
  a->sd[a->me] = a->rd[a->me] = 0;
  for (int p = 0; p < a->n; p++)
    any |= a->sc[p] > 0 || a->rc[p] > 0;
  if (!any)
    return RINGCC_SUCCESS;
  struct rcc_plan plan =
      rcc_exec_plan(comm, RCC_ALG_PAIRWISE_V, RCC_SCHED_DIRECT,
                    RCC_COLL_ALLTOALLV, 1, 1, 0, comm->all_chunk_bytes, -1);
  plan.counts = a->sc;
  plan.displs = a->sd;
  plan.recv_counts = a->rc;
  plan.recv_displs = a->rd;
  TSAN_RELEASE();
  ringcc_result_t r = rcc_exec_host_channels(comm, &plan, src, dst,
                                             RINGCC_UINT8, RINGCC_SUM);
  TSAN_ACQUIRE();
  return r;
}

/* Phase 1's send side: the plan, and the staging where a block is large. */
static ringcc_result_t plan_sends(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  size_t packed = 0;
  int any_big = 0;
  for (int p = 0; p < a->n; p++) {
    size_t bytes = v->sendcounts[p] * v->esize;
    a->big_s[p] = p != a->me && bytes > RCC_A2AV_INLINE_MAX;
    any_big |= a->big_s[p];
    if (p != a->me)
      packed += a->big_s[p] ? sizeof(struct where) : bytes;
  }
  if (any_big && (a->pack = malloc(packed)) == NULL)
    return rcc_comm_error(a->comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_alltoallv on rank %d: no memory for %zu "
                          "bytes of staging", a->me, packed);
  size_t at = 0;
  for (int p = 0; p < a->n; p++) {
    size_t bytes = v->sendcounts[p] * v->esize;
    const char *block = (const char *)v->src + v->sdispls[p] * v->esize;
    a->sc[p] = bytes;
    a->sd[p] = v->sdispls[p] * v->esize;
    if (!any_big || p == a->me)
      continue;
    a->sd[p] = at;
    if (a->big_s[p]) {
      struct where w = {0, 0, RCC_ZC_NO_SLOT, 0};
      if (a->zc)
        w.slot = rcc_registry_find(a->comm->registry, block, bytes, 0, &w.off);
      if (a->cma) {
        w.addr = (uint64_t)(uintptr_t)block;
        if (!a->allowed) /* peers read this buffer: before they learn it */
          rcc_cma_allow_peers(a->comm, a->allowed = 1);
      }
      w.fifo = w.slot == RCC_ZC_NO_SLOT && !a->cma;
      if (w.fifo)
        a->big_s[p] = 2;
      memcpy(a->pack + at, &w, sizeof(w));
      a->sc[p] = sizeof(w);
    } else if (bytes > 0) {
      memcpy(a->pack + at, block, bytes);
    }
    at += a->sc[p];
  }
  return RINGCC_SUCCESS;
}

/* Phase 2: this rank's large blocks, read in place. */
static ringcc_result_t read_blocks(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  struct ringcc_comm *comm = a->comm;
  for (int k = 1; k < a->n; k++) {
    int p = (a->me + a->n - k) % a->n; /* each rank starts at another peer */
    size_t bytes = v->recvcounts[p] * v->esize;
    char *to = (char *)v->dst + v->rdispls[p] * v->esize;
    struct where w;
    if (!a->big_r[p])
      continue;
    memcpy(&w, to, sizeof(w));
    if (w.fifo) {
      a->big_r[p] = 2;
      continue;
    }
    const char *mapped =
        w.slot != RCC_ZC_NO_SLOT && a->zc
            ? rcc_registry_peer(comm->registry, p, w.slot, w.off, bytes)
            : NULL;
    int e = 0;
    if (mapped != NULL) {
      rcc_stats_received(comm->stats, p, bytes);
      memcpy(to, mapped, bytes);
    } else if (w.addr != 0 && a->cma) {
      e = rcc_cma_peer_copy(comm, p, to, w.addr, bytes, 0);
    } else {
      return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                            "ringcc_alltoallv on rank %d: rank %d's block of "
                            "%zu bytes (registration slot %u) is not mapped "
                            "here and cross-memory attach is not usable",
                            a->me, p, bytes, (unsigned)w.slot);
    }
    if (e != 0)
      return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                            "ringcc_alltoallv on rank %d: reading rank %d's "
                            "block (pid %d) failed: %s", a->me, p,
                            (int)comm->peers[p].pid, strerror(e));
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t run(struct a2av *a) {
  const struct rcc_a2av *v = a->v;
  int n = a->n, me = a->me;
  size_t es = v->esize;
  ringcc_result_t r = plan_sends(a);
  if (r != RINGCC_SUCCESS)
    return r;
  for (int p = 0; p < n; p++) {
    size_t bytes = v->recvcounts[p] * es;
    a->big_r[p] = p != me && bytes > RCC_A2AV_INLINE_MAX;
    a->rc[p] = a->big_r[p] ? sizeof(struct where) : bytes;
    a->rd[p] = v->rdispls[p] * es;
  }
  char *own = (char *)v->dst + v->rdispls[me] * es;
  const char *mine = (const char *)v->src + v->sdispls[me] * es;
  if (v->recvcounts[me] > 0 && own != mine)
    memcpy(own, mine, v->recvcounts[me] * es);
  /* 1: small blocks and the places of large ones */
  if ((r = exchange(a, a->pack ? a->pack : v->src, v->dst)) != RINGCC_SUCCESS)
    return r;
  /* 2: large blocks read in place */
  if ((r = read_blocks(a)) != RINGCC_SUCCESS)
    return r;
  /* 3: large blocks readable neither way */
  for (int p = 0; p < n; p++) {
    a->sc[p] = a->big_s[p] == 2 ? v->sendcounts[p] * es : 0;
    a->sd[p] = v->sdispls[p] * es;
    a->rc[p] = a->big_r[p] == 2 ? v->recvcounts[p] * es : 0;
    a->rd[p] = v->rdispls[p] * es;
  }
  if ((r = exchange(a, v->src, v->dst)) != RINGCC_SUCCESS)
    return r;
  /* 4: each block read in place, acknowledged to its sender */
  for (int p = 0; p < n; p++) {
    a->sc[p] = a->big_r[p] == 1;
    a->rc[p] = a->big_s[p] == 1;
    a->sd[p] = a->rd[p] = (size_t)p;
    a->ack_out[p] = 1;
  }
  return exchange(a, a->ack_out, a->ack_in);
}

ringcc_result_t rcc_a2av_run(struct ringcc_comm *comm,
                             const struct rcc_a2av *v) {
  int n = comm->nranks;
  struct a2av a = {.comm = comm, .v = v, .n = n, .me = comm->rank,
                   .cma = rcc_cma_usable(comm),
                   .zc = rcc_registry_kind(comm) == RCC_ZC_ONE_HOST};
  size_t *counts = calloc(4 * (size_t)n, sizeof(*counts));
  uint8_t *flags = calloc(4 * (size_t)n, 1);
  ringcc_result_t r;
  if (counts == NULL || flags == NULL) {
    r = rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                       "ringcc_alltoallv on rank %d: out of memory", a.me);
  } else {
    a.sc = counts;
    a.sd = counts + n;
    a.rc = counts + 2 * n;
    a.rd = counts + 3 * n;
    a.big_s = flags;
    a.big_r = flags + n;
    a.ack_out = flags + 2 * n;
    a.ack_in = flags + 3 * n;
    r = run(&a);
  }
  if (a.allowed) /* the readers have acknowledged, or the call failed */
    rcc_cma_allow_peers(comm, 0);
  free(counts);
  free(flags);
  free(a.pack);
  return r;
}
