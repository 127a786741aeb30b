/*
 * exec_cma.c - direct Reduce-Scatter / AllGather / AllReduce on one host
 * through cross-memory attach (process_vm_readv): each rank reads its peers'
 * buffers in place, so large messages move at nearly memory speed.
 *
 * The ring moves every byte through FIFO slots: each step reads a slot and
 * writes the next one, about 4.5 S of memory traffic per rank for an
 * AllReduce of S bytes. Here rank r owns block r (of n) and
 *
 *   1. all-gathers (pid, sendbuf, recvbuf) through its FIFOs (which also
 *      tells it that every rank has entered the call);
 *   2. reduce-scatter: for each chunk of block r, reads the chunk of every
 *      rank's input (the kernel copies it into a cache-sized local buffer)
 *      and reduces, in rank order, into its own output;
 *   3. barrier; 4. allgather: reads every other rank's finished block
 *      straight into its output (one copy, done by the kernel);
 *   5. barrier, so that no rank returns, and reuses its buffers, while a peer
 *      may still read them.
 *
 * Per rank that is about 2 S read and 1 S written for an AllReduce (the floor
 * is 1 S read and 1 S written, every input read once and every output
 * written once), with 3 latencies instead of the ring's 2(n-1) per chunk.
 * Each block is reduced by one rank only, so every rank gets the same bits.
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
 * a Gather or Scatter, a sender of AllToAllv's large blocks) holds it for
 * that call. Linux has no way to read the setting back, so a program that set
 * its own exception finds it cleared then. Ranks that are threads of one
 * process read each other's memory directly.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "agree.h"
#include "cma.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "log.h"
#include "reduce.h"
#include "stats.h"
#include "topo.h"
#include "tsan_sync.h"

#define CHUNK_BYTES (256 << 10) /* local staging: fits L2 with the output */
#define PROBE_MAGIC 0x52434d41ull  /* "RCMA" */

struct call_info {
  int64_t pid;
  uint64_t src;
  uint64_t dst;
  uint64_t pad;
};

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

static int peer_read(const struct ringcc_comm *comm, int peer, void *local,
                     uint64_t remote, size_t bytes) {
  return rcc_cma_peer_copy(comm, peer, local, remote, bytes, 0);
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
    ok = peer_read(comm, p, &word, q->cma_probe_addr, sizeof(word)) == 0 &&
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

/* A small collective of our own on the FIFOs: allgather or barrier. */
static ringcc_result_t fifo_coll(struct ringcc_comm *comm, int coll,
                                 const void *src, void *dst, size_t bytes) {
  struct rcc_plan plan = {.coll = coll, .nranks = comm->nranks,
                          .rank = comm->rank, .pos = comm->ring_pos,
                          .ring = comm->ring, .count = bytes,
                          .chunk_elems = comm->ring_chunk_bytes};
  if (coll == RCC_COLL_ALLGATHER)
    rcc_plan_ring(&plan);
  else
    rcc_plan_pairwise(&plan);
  TSAN_RELEASE();
  ringcc_result_t r =
      rcc_exec_host(comm, &plan, src, dst, RINGCC_UINT8, RINGCC_SUM);
  TSAN_ACQUIRE();
  return r;
}

/* A FIFO plan of the caller's (Gather, Scatter: exec_cma_rooted.c), with
 * what it orders told to ThreadSanitizer as fifo_coll does. */
ringcc_result_t rcc_cma_exchange(struct ringcc_comm *comm,
                                 const struct rcc_plan *plan, const void *src,
                                 void *dst) {
  TSAN_RELEASE();
  ringcc_result_t r = rcc_exec_host_channels(comm, plan, src, dst,
                                             RINGCC_UINT8, RINGCC_SUM);
  TSAN_ACQUIRE();
  return r;
}

static ringcc_result_t read_failed(struct ringcc_comm *comm, int peer, int e) {
  return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                        "direct path on rank %d: reading rank %d's buffer "
                        "(pid %d) failed: %s",
                        comm->rank, peer, (int)comm->peers[peer].pid,
                        strerror(e));
}

/* dst[0..elems) = reduction over ranks of their src at src_off, in rank
 * order, staged through buf in cache-sized chunks. */
static ringcc_result_t reduce_block(struct ringcc_comm *comm,
                                    const struct call_info *ci,
                                    const struct rcc_cma_call *c,
                                    size_t src_off, char *dst, size_t elems,
                                    char *buf) {
  size_t esize = ringcc_datatype_size(c->dt);
  size_t chunk = CHUNK_BYTES / esize;
  rcc_reduce_fn reduce = rcc_reduce_get(c->dt, c->op);

  for (size_t done = 0; done < elems; done += chunk) {
    size_t n = elems - done < chunk ? elems - done : chunk;
    size_t bytes = n * esize;
    uint64_t off = (uint64_t)(src_off + done) * esize;
    const char *own = (const char *)c->src + off;
    if (own == dst + done * esize && comm->rank != 0) {
      /* In place: rank 0's data lands here before we reduce our own. */
      memcpy(buf + CHUNK_BYTES, own, bytes);
      own = buf + CHUNK_BYTES;
    }
    for (int p = 0; p < comm->nranks; p++) {
      const char *in = buf;
      int e = 0;
      if (p == comm->rank)
        in = own;
      else
        e = peer_read(comm, p, buf, ci[p].src + off, bytes);
      if (e != 0)
        return read_failed(comm, p, e);
      if (p == 0)
        memcpy(dst + done * esize, in, bytes);
      else
        reduce(dst + done * esize, dst + done * esize, in, n);
    }
    if (c->op == RINGCC_AVG)
      rcc_reduce_avg_finish(c->dt, dst + done * esize, dst + done * esize, n,
                            comm->nranks);
  }
  return RINGCC_SUCCESS;
}

/* Block r of an allreduce over count elements: [r*per, min((r+1)*per, n)). */
static void block_of(size_t count, int nranks, int r, size_t *off,
                     size_t *elems) {
  size_t per = (count + (size_t)nranks - 1) / (size_t)nranks;
  size_t start = per * (size_t)r < count ? per * (size_t)r : count;
  *off = start;
  *elems = count - start < per ? count - start : per;
}

ringcc_result_t rcc_cma_run(struct ringcc_comm *comm,
                            const struct rcc_cma_call *c) {
  int n = comm->nranks, me = comm->rank;
  size_t esize = ringcc_datatype_size(c->dt);
  struct call_info mine = {getpid(), (uint64_t)(uintptr_t)c->src,
                           (uint64_t)(uintptr_t)c->dst, 0};
  struct call_info *ci = calloc((size_t)n, sizeof(*ci));
  char *buf = malloc(2 * CHUNK_BYTES); /* a peer's chunk, and our own */
  ringcc_result_t r = RINGCC_ERR_OUT_OF_MEMORY;

  if (ci == NULL || buf == NULL) {
    rcc_comm_error(comm, r, "direct path on rank %d: out of memory", me);
    goto out;
  }
  r = fifo_coll(comm, RCC_COLL_ALLGATHER, &mine, ci, sizeof(mine));
  if (r != RINGCC_SUCCESS)
    goto out;

  size_t off, elems;
  if (c->coll == RCC_COLL_ALLREDUCE) {
    block_of(c->count, n, me, &off, &elems);
    r = reduce_block(comm, ci, c, off, (char *)c->dst + off * esize, elems,
                     buf);
  } else if (c->coll == RCC_COLL_REDUCE_SCATTER) {
    /* Into scratch if the output overlaps inputs peers still read. */
    char *out = c->scratch ? c->scratch : c->dst;
    r = reduce_block(comm, ci, c, (size_t)me * c->count, out, c->count, buf);
  } else { /* allgather: our own block */
    if ((char *)c->dst + (size_t)me * c->count * esize != (const char *)c->src)
      memcpy((char *)c->dst + (size_t)me * c->count * esize, c->src,
             c->count * esize);
  }
  if (r == RINGCC_SUCCESS)
    r = fifo_coll(comm, RCC_COLL_BARRIER, NULL, NULL, 0);
  for (int p = 0; p < n && r == RINGCC_SUCCESS; p++) {
    int e = 0;
    if (p == me)
      continue;
    if (c->coll == RCC_COLL_ALLREDUCE) {
      block_of(c->count, n, p, &off, &elems);
      e = peer_read(comm, p, (char *)c->dst + off * esize,
                    ci[p].dst + off * esize, elems * esize);
    } else if (c->coll == RCC_COLL_ALLGATHER) {
      e = peer_read(comm, p, (char *)c->dst + (size_t)p * c->count * esize,
                    ci[p].src, c->count * esize);
    }
    if (e != 0)
      r = read_failed(comm, p, e);
  }
  if (r == RINGCC_SUCCESS && c->coll == RCC_COLL_REDUCE_SCATTER &&
      c->scratch)
    memcpy(c->dst, c->scratch, c->count * esize);
  if (r == RINGCC_SUCCESS)
    r = fifo_coll(comm, RCC_COLL_BARRIER, NULL, NULL, 0);
out:
  free(ci);
  free(buf);
  return r;
}
