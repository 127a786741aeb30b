/*
 * cma_peer.c - cross-memory attach between the ranks of one host: whether
 * it works (agreed at init), the ptrace exception it needs, and the copy
 * (process_vm_readv / process_vm_writev). What the executors that read or
 * write peers' buffers in place share: exec_cma.c (the AllReduce family),
 * exec_cma_rooted.c (Gather, Scatter), exec_a2av.c (AllToAllv) and
 * exec_p2p_place.c (send/recv); it runs no FIFO exchange itself.
 *
 * Eligibility is decided once per communicator, alike on every rank:
 * RINGCC_ALGO auto, cma or direct (for these collectives the tuner never
 * picks it on its own; for Gather and Scatter, exec_cma_rooted.c, and for
 * AllToAllv's large blocks, exec_a2av.c, it does), all ranks on one host and
 * in one pid namespace, shared memory not disabled, and a probe read of
 * every peer at init succeeded. The probe needs ptrace permission: where
 * Yama restricts ptrace to ancestors, the ranks allow it with
 * prctl(PR_SET_PTRACER_ANY), as Open MPI does, but only then. Forced, the
 * exception is withdrawn (PR_SET_PTRACER 0) when the last communicator that
 * needed it is destroyed, or at once when the probe failed; under auto right
 * after the probe, and a rank whose buffer peers read in a call (the root of
 * a Gather or Scatter, a sender of AllToAllv's large blocks, the sender of
 * a send/recv message read in place) holds it for that call. Linux has no way to read the setting back, so a program that set
 * its own exception finds it cleared then. Ranks that are threads of one
 * process read each other's memory directly.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agree.h"
#include "cma.h"
#include "comm.h"
#include "error.h"
#include "log.h"
#include "stats.h"
#include "topo.h"

#define PROBE_MAGIC 0x52434d41ull  /* "RCMA" */

/* Moves bytes between local memory and a peer's address (to_peer: local ->
 * peer, process_vm_writev; else peer -> local, process_vm_readv); 0 or an
 * errno. The bytes count as sent to or received from the peer (stats.h);
 * what peers move in this rank's memory, this rank does not see. */
int rcc_cma_peer_copy(const struct ringcc_comm *comm, int peer, void *local,
                      uint64_t remote, size_t bytes, int to_peer) {
  pid_t pid = comm->peers[peer].pid;
  if (to_peer)
    rcc_stats_sent(comm->stats, peer, bytes);
  else
    rcc_stats_received(comm->stats, peer, bytes);
  if (pid == getpid()) { /* ranks as threads: one address space */
    void *there = (void *)(uintptr_t)remote;
    memcpy(to_peer ? there : local, to_peer ? local : there, bytes);
    return 0;
  }
  while (bytes > 0) {
    struct iovec l = {local, bytes};
    struct iovec r = {(void *)(uintptr_t)remote, bytes};
    ssize_t got = to_peer ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return got < 0 ? errno : EIO;
    local = (char *)local + got;
    remote += (uint64_t)got;
    bytes -= (size_t)got;
  }
  return 0;
}

/* The process-wide ptrace exception (PR_SET_PTRACER_ANY): set while at least
 * one communicator may read its peers through cross-memory attach. */
static pthread_mutex_t ptracer_lock = PTHREAD_MUTEX_INITIALIZER;
static int ptracer_users;

/* A communicator's cross-memory attach (comm->cma): the word peers read at
 * init, and whether the path is usable. */
struct rcc_cma {
  uint64_t probe;  /* PROBE_MAGIC ^ pid: peers try to read it */
  int ok;          /* the direct large-message path is usable (agreed) */
  int ptracer;     /* holds a share of PR_SET_PTRACER_ANY */
};

static void ptracer_hold(struct ringcc_comm *comm) {
  if (comm->cma == NULL) /* out of memory at init: no path, no exception */
    return;
  pthread_mutex_lock(&ptracer_lock);
  if (ptracer_users++ == 0 &&
      prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
    RCC_TRACE(comm->rank, "cma: prctl(PR_SET_PTRACER_ANY): %s (no Yama: "
              "not needed)", strerror(errno));
  pthread_mutex_unlock(&ptracer_lock);
  comm->cma->ptracer = 1;
}

static void ptracer_release(struct ringcc_comm *comm) {
  if (comm->cma == NULL || !comm->cma->ptracer)
    return;
  comm->cma->ptracer = 0;
  if (comm->forked) /* the child does not have the parent's exception */
    return;
  pthread_mutex_lock(&ptracer_lock);
  if (--ptracer_users == 0)
    (void)prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  pthread_mutex_unlock(&ptracer_lock);
}

void rcc_cma_free(struct ringcc_comm *comm) {
  ptracer_release(comm);
  free(comm->cma);
  comm->cma = NULL;
}

int rcc_cma_usable(const struct ringcc_comm *comm) {
  return comm->cma != NULL && comm->cma->ok;
}

/* While a call lets peers write into or read from this rank's buffers (the
 * root of a Gather or Scatter by cross-memory attach, a sender of
 * AllToAllv's large blocks), the rank allows them (a share of the exception, withdrawn at the end of the call unless the
 * communicator holds one: RINGCC_ALGO=cma or direct). */
void rcc_cma_allow_peers(struct ringcc_comm *comm, int allow) {
  if (comm->cma == NULL || comm->cma->ptracer)
    return; /* held for the communicator's life, or no path */
  pthread_mutex_lock(&ptracer_lock);
  if (allow && ptracer_users++ == 0)
    (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  else if (!allow && --ptracer_users == 0)
    (void)prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  pthread_mutex_unlock(&ptracer_lock);
}

/* Init: where cross-memory attach could run at all, allow peers to read us,
 * then try to read every peer's probe word and agree through the bootstrap;
 * comm->cma->ok is the same on every rank. Forced (RINGCC_ALGO=cma or
 * direct), the exception stays for the communicator's life; under the
 * tuner (RINGCC_ALGO=auto: Gather and Scatter from a size on) it is
 * withdrawn after the probe and taken again by the root of each call. */
ringcc_result_t rcc_cma_setup(struct ringcc_comm *comm, int64_t deadline) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  int forced = comm->set.algo == RINGCC_ALGO_CMA ||
               comm->set.algo == RINGCC_ALGO_DIRECT;
  int may = comm->nranks > 1 && (forced || comm->set.algo == RINGCC_ALGO_AUTO);
  for (int p = 0; p < comm->nranks && may; p++) {
    const struct rcc_peer_info *q = &comm->peers[p];
    may = q->host_hash == me->host_hash && q->pid_space == me->pid_space &&
          !q->shm_disable;
  }
  ringcc_result_t r;
  if (may) { /* every rank allows it before any rank probes */
    ptracer_hold(comm);
    if ((r = rcc_agree_status(comm, RINGCC_SUCCESS, "allowing cross-memory "
                              "attach", deadline)) != RINGCC_SUCCESS)
      return r;
  }
  int ok = may && comm->cma != NULL, agreed = 0;
  for (int p = 0; p < comm->nranks && ok; p++) {
    const struct rcc_peer_info *q = &comm->peers[p];
    uint64_t word = 0;
    ok = rcc_cma_peer_copy(comm, p, &word, q->cma_probe_addr, sizeof(word),
                             0) == 0 &&
         word == (PROBE_MAGIC ^ (uint64_t)q->pid);
  }
  r = rcc_all_agree(comm, ok, &agreed, deadline);
  if (comm->cma != NULL)
    comm->cma->ok = agreed;
  if (!agreed || !forced) /* nobody reads us outside a call's root */
    ptracer_release(comm);
  if (r != RINGCC_SUCCESS)
    return r;
  RCC_INFO(comm->rank, "direct large-message path (cross-memory attach): %s; "
           "send/recv past the FIFO's capacity: %s",
           agreed && forced ? "available"
           : agreed ? "available to the tuner for Gather, Scatter and "
                      "AllToAllv's large blocks (the AllReduce family only "
                      "when forced: RINGCC_ALGO=cma)"
           : may ? "not available (peers' memory not readable)"
                 : "not available (one rank, ranks on several hosts, shm "
                   "disabled, or RINGCC_ALGO names another algorithm)",
           agreed ? "read in place by the receiver"
                  : "through the FIFOs (registered buffers on one host "
                    "still read in place)");
  return RINGCC_SUCCESS;
}

/* Called before the peer info is all-gathered. */
void rcc_cma_prepare(struct ringcc_comm *comm, struct rcc_peer_info *me) {
  if (comm->cma == NULL)
    comm->cma = calloc(1, sizeof(*comm->cma));
  if (comm->cma == NULL) { /* peers' probes fail: agreed unusable */
    me->cma_probe_addr = 0;
    return;
  }
  comm->cma->probe = PROBE_MAGIC ^ (uint64_t)getpid();
  me->cma_probe_addr = (uint64_t)(uintptr_t)&comm->cma->probe;
}
