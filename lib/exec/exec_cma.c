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
 * Eligibility, the probe at init, the ptrace exception and the copy itself
 * are cma_peer.c's, which the other executors that read peers' memory
 * (exec_cma_rooted.c, exec_a2av.c, exec_p2p_place.c) share.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cma.h"
#include "comm.h"
#include "error.h"
#include "exec.h"
#include "reduce.h"
#include "stats.h"
#include "topo.h"
#include "tsan_sync.h"

#define CHUNK_BYTES (256 << 10) /* local staging: fits L2 with the output */

struct call_info {
  int64_t pid;
  uint64_t src;
  uint64_t dst;
  uint64_t pad;
};

static int peer_read(const struct ringcc_comm *comm, int peer, void *local,
                     uint64_t remote, size_t bytes) {
  return rcc_cma_peer_copy(comm, peer, local, remote, bytes, 0);
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
