/*
 * exec_cma_rooted.c - Gather and Scatter on one host by cross-memory attach:
 * each block moves once, by the kernel, between the root's buffer and its
 * rank's, and the n-1 peers move theirs at the same time.
 *
 * Over the FIFOs (direct.c) every byte is copied twice (into a slot, out of
 * it) and the root handles all n-1 blocks in turn. Here, with B bytes a
 * block:
 *
 *   1. the root allows its peers to access its memory (the ptrace exception,
 *      exec_cma.c) and sends each peer the address of its block in the
 *      root's buffer (a direct scatter of 8 bytes over the FIFOs);
 *   2. each peer moves its block itself: Scatter reads it out of the root's
 *      sendbuf (process_vm_readv), Gather writes it into the root's recvbuf
 *      (process_vm_writev), all peers at once; the root copies its own block
 *      meanwhile (none in place);
 *   3. each peer sends the root a status word (0, or the errno of its copy;
 *      a direct gather of 8 bytes); the root returns only then, so that no
 *      peer touches its buffers after the call, and fails, naming the rank
 *      and the reason, if any peer's copy failed.
 *
 * T = 2(n-1)*alpha + (n-1)/n*S*beta/2 in the units of the FIFO schedule's
 * beta (one copy of each byte instead of two; the peers' copies share the
 * memory bus, so their parallelism is not counted): algorithms.c.
 *
 * Gather writes rather than having the root read: the copies then run in
 * the n-1 peers in parallel, not one after another in the root (docs/
 * tuning.md has both measured). A peer that dies mid-call is
 * RINGCC_ERR_PEER_FAILED on the others (the root's wait for status words
 * sees it; a peer whose copy from a root that died fails with ESRCH says
 * so). Peers still copying when the root fails that way may finish their
 * copy into the root's buffer after it returned: the communicator is
 * unusable then, as after any peer failure.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "failure.h"
#include "schedule.h"
#include "thp.h"
#include "topo.h"

/* A direct Gather or Scatter of one 8-byte word per rank over the FIFOs. */
static ringcc_result_t words(struct ringcc_comm *comm, int coll, int root,
                             const void *src, void *dst) {
  struct rcc_plan plan = rcc_exec_plan(comm, RCC_ALG_DIRECT, RCC_SCHED_DIRECT,
                                       coll, 1, 1, sizeof(uint64_t),
                                       sizeof(uint64_t), root);
  return rcc_cma_exchange(comm, &plan, src, dst);
}

static const char *coll_name(const struct rcc_cma_rooted *c) {
  return c->gather ? "gather" : "scatter";
}

/* A peer's copy failed with errno e: the root died (PEER_FAILED), or the
 * kernel refused (SYSTEM). */
static ringcc_result_t copy_failed(struct ringcc_comm *comm,
                                   const struct rcc_cma_rooted *c, int e) {
  int root = c->root;
  if (e == ESRCH || !rcc_peer_alive(comm, root)) {
    rcc_peer_dead(comm, root, comm->rank);
    return rcc_comm_error(comm, RINGCC_ERR_PEER_FAILED,
                          "%s by cross-memory attach on rank %d: the root, "
                          "rank %d (pid %d), is gone (%s)", coll_name(c),
                          comm->rank, root, (int)comm->peers[root].pid,
                          strerror(e));
  }
  return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                        "%s by cross-memory attach on rank %d: %s the root's "
                        "%s (rank %d, pid %d) failed: %s", coll_name(c),
                        comm->rank,
                        c->gather ? "writing this rank's block into"
                                  : "reading this rank's block from",
                        c->gather ? "recvbuf" : "sendbuf", root,
                        (int)comm->peers[root].pid, strerror(e));
}

/* The root: which peers' copies failed (their status words). */
static ringcc_result_t peers_status(struct ringcc_comm *comm,
                                    const struct rcc_cma_rooted *c,
                                    const uint64_t *status) {
  for (int p = 0; p < comm->nranks; p++)
    if (p != c->root && status[p] != 0)
      return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                            "%s by cross-memory attach at the root, rank %d: "
                            "rank %d could not %s this rank's %s: %s",
                            coll_name(c), c->root, p,
                            c->gather ? "write its block into"
                                      : "read its block from",
                            c->gather ? "recvbuf" : "sendbuf",
                            strerror((int)status[p]));
  return RINGCC_SUCCESS;
}

static ringcc_result_t run_root(struct ringcc_comm *comm,
                                const struct rcc_cma_rooted *c) {
  int n = comm->nranks, me = comm->rank;
  uint64_t *addr = calloc(2 * (size_t)n, sizeof(*addr)), *status = addr + n;
  if (addr == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s by cross-memory attach at the root, rank %d: "
                          "out of memory", coll_name(c), me);
  uintptr_t base = (uintptr_t)(c->gather ? c->dst : c->src);
  for (int p = 0; p < n; p++)
    addr[p] = (uint64_t)(base + (size_t)p * c->block);
  uint64_t mine = 0, ok = 0;
  rcc_cma_allow_peers(comm, 1);
  /* the peers pin this buffer: huge pages where it is reused */
  rcc_thp_note(comm, (const void *)base, (size_t)n * c->block);
  ringcc_result_t r = words(comm, RCC_COLL_SCATTER, me, addr, &mine);
  if (r == RINGCC_SUCCESS) { /* the own block, while peers move theirs */
    char *own_dst = c->gather ? (char *)c->dst + (size_t)me * c->block
                              : (char *)c->dst;
    const char *own_src = c->gather ? (const char *)c->src
                                    : (const char *)c->src + (size_t)me *
                                                                 c->block;
    if (own_dst != own_src)
      memcpy(own_dst, own_src, c->block);
    r = words(comm, RCC_COLL_GATHER, me, &ok, status);
  }
  rcc_cma_allow_peers(comm, 0);
  if (r == RINGCC_SUCCESS)
    r = peers_status(comm, c, status);
  free(addr);
  return r;
}

static ringcc_result_t run_peer(struct ringcc_comm *comm,
                                const struct rcc_cma_rooted *c) {
  uint64_t where = 0;
  ringcc_result_t r = words(comm, RCC_COLL_SCATTER, c->root, NULL, &where);
  if (r != RINGCC_SUCCESS)
    return r;
  void *local = c->gather ? (void *)(uintptr_t)c->src : c->dst;
  int e = rcc_cma_peer_copy(comm, c->root, local, where, c->block, c->gather);
  if (e != 0 && (e == ESRCH || !rcc_peer_alive(comm, c->root)))
    return copy_failed(comm, c, e); /* nobody to tell */
  uint64_t status = (uint64_t)e;
  r = words(comm, RCC_COLL_GATHER, c->root, &status, NULL);
  if (r == RINGCC_SUCCESS && e != 0)
    r = copy_failed(comm, c, e);
  return r;
}

ringcc_result_t rcc_cma_rooted(struct ringcc_comm *comm,
                               const struct rcc_cma_rooted *c) {
  return comm->rank == c->root ? run_root(comm, c) : run_peer(comm, c);
}
