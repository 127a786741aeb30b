/*
 * p2p.c - CUDA peer-to-peer transport: device FIFOs in the receiving GPU's
 * memory, written directly by the sending rank's kernel over NVLink or PCIe
 * (or within one GPU, when several ranks share it).
 *
 * Used for an edge when both ranks are on one host, every rank of the
 * communicator has a GPU, P2P is not disabled (RINGCC_P2P_DISABLE) and the
 * two GPUs can access each other or are the same GPU (rcc_topo_device_path,
 * topo.c); otherwise the edge falls to shm (device data staged through pinned
 * shared memory) or net.
 *
 * FIFOs. A communicator carries host and device collectives at once, so an
 * edge has two sets of FIFOs (comm.h, RCC_CONN_DEVICE):
 *   - host kinds: shared host memory, exactly as the shm transport makes them
 *     (this file delegates to shm.c for those), used by the host executor;
 *   - device kinds: each rank cudaMallocs one block and exports it with
 *     cudaIpcGetMemHandle; a peer opens it with cudaIpcOpenMemHandle (or, for
 *     a rank that is a thread of the same process, uses the pointer itself).
 *
 * A rank's block, for its L p2p peers ("local" peers, numbered 0..L-1 in
 * rank order; every rank sizes for the largest L of the communicator):
 *
 *   FIFOs   one per (device set, sender): the sender's kernel writes slots,
 *           meta words and the tail there; the receiver's kernel reads them
 *           locally;
 *   heads   one 128-byte line per (device set, receiver): the head counter
 *           of this rank's FIFO in that receiver's block. The receiver's
 *           kernel writes it over the link after consuming a slot, and this
 *           rank's kernel (the sender) polls it in its own memory - a sender
 *           never polls across NVLink (proto.h, RCC_HEAD_WORD);
 *   closed  one word per peer that mapped the block: 1 once that peer's
 *           kernels can no longer touch it (it destroyed its communicator).
 *
 * Slots hold RINGCC_DEVICE_CHUNK_BYTES (default 512 KiB: large steps keep a
 * block's per-step handshake small against NVLink's bandwidth), halved
 * while the block would take more than 1 GiB (channels x peers x slots),
 * never below 64 KiB; rcc_p2p_device_slot_bytes is the one rule, the same
 * on every rank. The counters use system-scope acquire/release
 * (exec_cuda.cu). The block is zeroed before the setup barrier and is only
 * touched by kernels afterwards; cuda.c copies the connections into the
 * device-side connection table.
 *
 * The link (NVLink or PCIe) comes from NVML when it can be loaded (cuda.c);
 * without NVML every P2P edge is reported as PCIe.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "gpu.h"
#include "fifo.h"
#include "log.h"
#include "p2p.h"
#include "shm.h"
#include "topo.h"
#include "transport.h"

#define DEVICE_CHUNK_DEFAULT ((size_t)512 << 10)
#define DEVICE_CHUNK_FLOOR ((size_t)64 << 10)
#define DEVICE_FIFO_BUDGET ((size_t)1 << 30)
#define HEAD_LINE 128 /* one head counter per line: no false sharing */

/* ---- the geometry, the same on every rank (both builds) ------------------ */

static int p2p_can_connect(const struct ringcc_comm *comm,
                           const struct rcc_peer_info *me,
                           const struct rcc_peer_info *peer);

static int p2p_edge(const struct ringcc_comm *comm, int a, int b) {
  return a != b &&
         comm->peers[a].host_hash == comm->peers[b].host_hash &&
         p2p_can_connect(comm, &comm->peers[a], &comm->peers[b]);
}

/* The most p2p peers any rank has: every block is sized for it. */
static int max_local(const struct ringcc_comm *comm) {
  int most = 0;
  for (int r = 0; r < comm->nranks; r++) {
    int l = 0;
    for (int q = 0; q < comm->nranks; q++)
      l += p2p_edge(comm, r, q);
    most = l > most ? l : most;
  }
  return most;
}

/* Device sets: (device kind, channel) pairs, numbered from the first
 * device kind (comm.h's numbering). */
static int device_sets(const struct ringcc_comm *comm) {
  return rcc_fifo_sets(comm, RCC_MAX_CONN_KINDS) -
         rcc_fifo_sets(comm, RCC_CONN_DEVICE);
}

static size_t fifo_bytes_for(const struct ringcc_comm *comm, size_t slot) {
  size_t b = RCC_FIFO_DATA_OFFSET + (size_t)comm->set.nslots * slot;
  return (b + 4095) & ~(size_t)4095;
}

size_t rcc_p2p_fifo_memory(const struct ringcc_comm *comm, size_t slot,
                           int local) {
  return (size_t)device_sets(comm) * (size_t)local * fifo_bytes_for(comm, slot);
}

size_t rcc_p2p_device_slot_bytes(const struct ringcc_comm *comm) {
  if (comm->set.device_chunk_bytes > 0)
    return (size_t)comm->set.device_chunk_bytes; /* asked for: exactly */
  int local = max_local(comm);
  size_t slot = DEVICE_CHUNK_DEFAULT;
  while (slot > DEVICE_CHUNK_FLOOR && local > 0 &&
         rcc_p2p_fifo_memory(comm, slot, local) > DEVICE_FIFO_BUDGET)
    slot /= 2;
  return slot;
}

static size_t p2p_slot_bytes(const struct ringcc_comm *comm) {
  return (size_t)comm->set.chunk_bytes; /* = shm's: host kinds use shm */
}

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>

/* The p2p part of the transport blob; the shm part comes first. */
#define P2P_BLOB_OFFSET 128
struct p2p_blob {
  cudaIpcMemHandle_t handle;
  uint64_t dev_ptr;    /* for peers in the same process */
  uint64_t bytes;
  uint64_t fifo_bytes;
  int32_t pid;
  int32_t device;
};
_Static_assert(P2P_BLOB_OFFSET + sizeof(struct p2p_blob) <=
                   RCC_TRANSPORT_BLOB_BYTES,
               "p2p blob must fit after the shm blob");

struct p2p_state {
  void *shm;          /* the shm transport's state: the host-kind FIFOs */
  int device;
  size_t slot;        /* device slot bytes */
  size_t fifo_bytes;  /* one device FIFO, header included */
  int local;          /* the block's capacity in peers (max_local) */
  char *own;          /* this rank's block */
  size_t own_bytes;
  char **peer_map;    /* [nranks] the peers' blocks, as mapped here */
  uint8_t *ipc_open;  /* [nranks] 1: opened with cudaIpcOpenMemHandle */
  int *path;          /* [nranks] enum rcc_path, for the log */
};

/* other's number among owner's p2p peers (rank order), or -1. */
static int local_index(const struct ringcc_comm *comm, int owner, int other) {
  if (!p2p_edge(comm, owner, other))
    return -1;
  int i = 0;
  for (int q = 0; q < other; q++)
    i += p2p_edge(comm, owner, q);
  return i;
}

/* Where things are in a block (the header comment). */
static size_t fifo_at(const struct p2p_state *st, int set, int sender_idx) {
  return ((size_t)set * (size_t)st->local + (size_t)sender_idx) *
         st->fifo_bytes;
}
static size_t heads_base(const struct p2p_state *st, int nsets) {
  return fifo_at(st, nsets, 0);
}
static size_t head_at(const struct p2p_state *st, int nsets, int set,
                      int receiver_idx) {
  return heads_base(st, nsets) +
         ((size_t)set * (size_t)st->local + (size_t)receiver_idx) * HEAD_LINE;
}
static size_t closed_at(const struct p2p_state *st, int nsets, int idx) {
  return head_at(st, nsets, nsets, 0) + (size_t)idx * sizeof(uint32_t);
}
static size_t block_bytes(const struct p2p_state *st, int nsets) {
  size_t b = closed_at(st, nsets, st->local);
  return (b + 4095) & ~(size_t)4095;
}

/* ---- blocks kept until no peer can write them ----------------------------- */

/* A block whose owner left (destroy or abort) while some peer that mapped
 * it might still write it: a peer's kernel writes head counters (and,
 * after an abort, slots) into it until that peer's own communicator is
 * destroyed. Freeing it then would let those writes land in whatever the
 * process allocates next there (and, for ranks that are threads, cudaFree
 * would wait for the peers' kernels). It stays here until every such peer
 * set its word in the block's 'closed' area or its process is gone. */
struct parked {
  struct parked *next;
  char *block;
  int device;
  int npeers;
  size_t closed_off;  /* the closed words, one per local peer */
  int32_t *pids;      /* [npeers] the peers' processes (same pid space) */
  uint8_t *local_pid; /* [npeers] 1: the pid is comparable (this host's
                         pid space, another process) */
};

static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;
static struct parked *parked_list;

static int pid_gone(pid_t pid) {
  return kill(pid, 0) != 0 && errno == ESRCH;
}

/* Reads the block's closed words; 1 if every peer closed or is gone. */
static int block_free_to_go(const struct parked *pk, cudaStream_t stream) {
  int n = pk->npeers, ok = 1;
  uint32_t *closed = calloc((size_t)n + 1, sizeof(uint32_t));
  if (closed == NULL)
    return 0;
  if (n > 0 &&
      (cudaMemcpyAsync(closed, pk->block + pk->closed_off,
                       (size_t)n * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                       stream) != cudaSuccess ||
       cudaStreamSynchronize(stream) != cudaSuccess)) {
    cudaGetLastError();
    ok = 0;
  }
  for (int i = 0; i < n && ok; i++)
    ok = closed[i] != 0 || (pk->local_pid[i] && pid_gone(pk->pids[i]));
  free(closed);
  return ok;
}

static void parked_free(struct parked *pk) {
  if (pk == NULL)
    return;
  free(pk->pids);
  free(pk->local_pid);
  free(pk);
}

/* Frees what can go now; keeps the rest (called on every setup and
 * destroy of a p2p transport in this process). */
static void release_parked(void) {
  pthread_mutex_lock(&parked_lock);
  for (struct parked **at = &parked_list; *at;) {
    struct parked *pk = *at;
    struct rcc_gpu_scope scope;
    char why[256];
    cudaStream_t stream = NULL;
    int gone = 0;
    if (rcc_gpu_enter(pk->device, &scope, why, sizeof(why)) == 0) {
      /* cudaFree waits for every kernel of the device: only when none of
       * the library's is pending (gpu.h), else at a later sweep. */
      if (rcc_gpu_quiet(pk->device) &&
          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) ==
              cudaSuccess) {
        gone = block_free_to_go(pk, stream);
        cudaStreamDestroy(stream);
      }
      if (gone)
        cudaFree(pk->block);
      cudaGetLastError();
      rcc_gpu_leave(&scope);
    }
    if (!gone) {
      at = &pk->next;
      continue;
    }
    *at = pk->next;
    parked_free(pk);
  }
  pthread_mutex_unlock(&parked_lock);
}

static int edge_path(const struct rcc_peer_info *me,
                     const struct rcc_peer_info *peer) {
  struct rcc_edge_topo e;
  rcc_topo_edge(me, peer, &e);
  return rcc_topo_device_path(&e);
}

static int p2p_can_connect(const struct ringcc_comm *comm,
                           const struct rcc_peer_info *me,
                           const struct rcc_peer_info *peer) {
  int path = edge_path(me, peer);
  return comm->nkinds == RCC_MAX_CONN_KINDS &&
         (path == RCC_PATH_P2P_SAME_GPU || path == RCC_PATH_P2P_NVLINK ||
          path == RCC_PATH_P2P_PCIE);
}

static ringcc_result_t cuda_fail(struct ringcc_comm *comm, const char *what,
                                 int peer, cudaError_t e) {
  char with[32] = "";
  if (peer >= 0)
    snprintf(with, sizeof(with), " with rank %d", peer);
  cudaGetLastError();
  return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                        "p2p on rank %d (GPU %d)%s: %s failed: %s (%s)",
                        comm->rank, comm->peers[comm->rank].gpu.device, with,
                        what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Makes the rank's GPU current (gpu.c: put back as found by leave). */
static ringcc_result_t enter(struct ringcc_comm *comm, struct p2p_state *st,
                             struct rcc_gpu_scope *scope) {
  char why[256];
  if (rcc_gpu_enter(st->device, scope, why, sizeof(why)) == 0)
    return RINGCC_SUCCESS;
  return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                        "p2p on rank %d: cannot make GPU %d current: %s",
                        comm->rank, st->device, why);
}

/* Tells every peer whose block this rank mapped that this rank's kernels
 * are gone (its 'closed' word), then unmaps the blocks. */
static void close_peers(struct ringcc_comm *comm, struct p2p_state *st,
                        cudaStream_t stream) {
  static const uint32_t one = 1;
  int nsets = device_sets(comm);
  for (int p = 0; st->peer_map && p < comm->nranks; p++) {
    if (st->peer_map[p] == NULL)
      continue;
    int me_at_p = local_index(comm, p, comm->rank);
    if (stream && me_at_p >= 0)
      cudaMemcpyAsync(st->peer_map[p] + closed_at(st, nsets, me_at_p), &one,
                      sizeof(one), cudaMemcpyHostToDevice, stream);
  }
  if (stream)
    cudaStreamSynchronize(stream);
  for (int p = 0; st->ipc_open && p < comm->nranks; p++)
    if (st->ipc_open[p])
      cudaIpcCloseMemHandle(st->peer_map[p]);
  cudaGetLastError();
}

/* This rank's block: freed if no peer can write it any more, else kept on
 * the parked list until none can. */
static void drop_own(struct ringcc_comm *comm, struct p2p_state *st,
                     cudaStream_t stream) {
  struct parked *pk = calloc(1, sizeof(*pk));
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  if (pk != NULL) {
    pk->pids = calloc((size_t)st->local + 1, sizeof(int32_t));
    pk->local_pid = calloc((size_t)st->local + 1, 1);
  }
  if (pk == NULL || pk->pids == NULL || pk->local_pid == NULL) {
    parked_free(pk);
    RCC_WARN(comm->rank, "p2p: out of memory while keeping the device FIFOs "
             "that peers may still write: they stay allocated");
    return;
  }
  pk->block = st->own;
  pk->device = st->device;
  pk->closed_off = closed_at(st, device_sets(comm), 0);
  for (int q = 0; q < comm->nranks; q++) {
    int i = local_index(comm, comm->rank, q);
    if (i < 0)
      continue;
    pk->npeers = i + 1 > pk->npeers ? i + 1 : pk->npeers;
    pk->pids[i] = comm->peers[q].pid;
    pk->local_pid[i] = comm->peers[q].pid_space == me->pid_space &&
                       comm->peers[q].pid != me->pid;
  }
  if (stream && rcc_gpu_quiet(pk->device) && block_free_to_go(pk, stream)) {
    cudaFree(pk->block);
    parked_free(pk);
    return;
  }
  RCC_INFO(comm->rank, "p2p: a peer may still write this rank's device FIFOs "
           "(it has not destroyed its communicator), or a kernel of the "
           "library is still pending on the GPU (cudaFree would wait for "
           "it): they are kept until neither is so");
  pthread_mutex_lock(&parked_lock);
  pk->next = parked_list;
  parked_list = pk;
  pthread_mutex_unlock(&parked_lock);
}

static void p2p_destroy(struct ringcc_comm *comm, void *state) {
  struct p2p_state *st = state;
  struct rcc_gpu_scope scope;
  char why[256];
  if (st == NULL)
    return;
  /* Host-only communicators never touch CUDA here, nor a forked child. This
   * rank's kernels are done (cuda.c waited, or aborted them), so it writes
   * no peer's block. */
  if ((st->own || st->ipc_open) && !comm->forked &&
      rcc_gpu_enter(st->device, &scope, why, sizeof(why)) == 0) {
    cudaStream_t stream = NULL;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
        cudaSuccess)
      stream = NULL;
    close_peers(comm, st, stream);
    if (st->own)
      drop_own(comm, st, stream);
    if (stream)
      cudaStreamDestroy(stream);
    cudaGetLastError();
    rcc_gpu_leave(&scope);
  }
  if ((st->own || st->ipc_open) && !comm->forked)
    release_parked(); /* blocks of earlier communicators, now free to go */
  rcc_transport_shm.destroy(comm, st->shm);
  free(st->peer_map);
  free(st->ipc_open);
  free(st->path);
  free(st);
}

/* This rank's block: zeroed, exported. */
static ringcc_result_t make_own(struct ringcc_comm *comm, struct p2p_state *st,
                                struct p2p_blob *b) {
  cudaError_t e;
  st->own_bytes = block_bytes(st, device_sets(comm));
  if ((e = cudaMalloc((void **)&st->own, st->own_bytes)) != cudaSuccess) {
    char what[160];
    snprintf(what, sizeof(what), "cudaMalloc of %zu MiB of device FIFOs "
             "(RINGCC_DEVICE_CHUNK_BYTES %zu, RINGCC_NCHANNELS)",
             st->own_bytes >> 20, st->slot);
    return cuda_fail(comm, what, -1, e);
  }
  /* Synchronous for this thread's default stream only: kernels of other
   * communicators (other ranks, as threads) may be running. */
  if ((e = cudaMemset(st->own, 0, st->own_bytes)) != cudaSuccess ||
      (e = cudaStreamSynchronize(0)) != cudaSuccess)
    return cuda_fail(comm, "cudaMemset of the device FIFOs", -1, e);
  if ((e = cudaIpcGetMemHandle(&b->handle, st->own)) != cudaSuccess)
    return cuda_fail(comm, "cudaIpcGetMemHandle", -1, e);
  b->dev_ptr = (uint64_t)(uintptr_t)st->own;
  b->bytes = st->own_bytes;
  b->fifo_bytes = st->fifo_bytes;
  b->pid = (int32_t)getpid();
  b->device = st->device;
  return RINGCC_SUCCESS;
}

static ringcc_result_t p2p_setup(struct ringcc_comm *comm, const int *peers,
                                 int npeers, void *blob, void **state) {
  struct p2p_state *st = calloc(1, sizeof(*st));
  struct rcc_gpu_scope scope;
  *state = st;
  if (st == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "p2p on rank %d: out of memory", comm->rank);
  st->device = comm->peers[comm->rank].gpu.device;
  ringcc_result_t r = rcc_shm_setup_host(comm, peers, npeers, blob, &st->shm);
  if (r != RINGCC_SUCCESS || npeers == 0)
    return r;
  release_parked(); /* blocks earlier communicators left behind */
  st->slot = rcc_p2p_device_slot_bytes(comm);
  st->fifo_bytes = fifo_bytes_for(comm, st->slot);
  st->local = max_local(comm);
  st->peer_map = calloc((size_t)comm->nranks, sizeof(char *));
  st->ipc_open = calloc((size_t)comm->nranks, 1);
  st->path = calloc((size_t)comm->nranks, sizeof(int));
  if (st->peer_map == NULL || st->ipc_open == NULL || st->path == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "p2p on rank %d: out of memory", comm->rank);
  if ((r = enter(comm, st, &scope)) != RINGCC_SUCCESS)
    return r;
  r = make_own(comm, st, (struct p2p_blob *)((char *)blob + P2P_BLOB_OFFSET));
  rcc_gpu_leave(&scope);
  return r;
}

/* Maps peer p's block into this process. */
static ringcc_result_t map_peer(struct ringcc_comm *comm, struct p2p_state *st,
                                int p, const struct p2p_blob *b) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  const struct rcc_peer_info *q = &comm->peers[p];
  void *ptr = NULL;
  cudaError_t e;

  if (b->fifo_bytes != st->fifo_bytes || b->bytes != st->own_bytes)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "p2p on rank %d: rank %d's device FIFOs do not "
                          "match ours (do all ranks use the same "
                          "RINGCC_DEVICE_CHUNK_BYTES, RINGCC_NSLOTS and "
                          "RINGCC_NCHANNELS?)", comm->rank, p);
  if (q->pid == me->pid && q->pid_space == me->pid_space) {
    /* A thread of this process: the pointer itself (IPC handles cannot be
     * opened in the process that made them). */
    ptr = (void *)(uintptr_t)b->dev_ptr;
    if (b->device != st->device) {
      e = cudaDeviceEnablePeerAccess(b->device, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        return cuda_fail(comm, "cudaDeviceEnablePeerAccess", p, e);
      cudaGetLastError();
    }
  } else {
    e = cudaIpcOpenMemHandle(&ptr, b->handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess)
      return cuda_fail(comm, "cudaIpcOpenMemHandle", p, e);
    st->ipc_open[p] = 1;
  }
  st->peer_map[p] = ptr;
  st->path[p] = edge_path(me, q);
  return RINGCC_SUCCESS;
}

/* One end of a device FIFO in GPU memory. head: where its head counter
 * lives (in the sender's block). */
static void init_conn(struct rcc_conn *c, char *fifo, uint32_t *head,
                      const struct ringcc_comm *comm,
                      const struct p2p_state *st, int peer) {
  c->fifo = (struct rcc_fifo *)fifo; /* device memory: kernels only */
  c->data = fifo + RCC_FIFO_DATA_OFFSET;
  c->head_mirror = head;
  c->nslots = (uint32_t)comm->set.nslots;
  c->slot_bytes = st->slot;
  c->step = 0;
  c->peer = peer;
  c->ops = NULL; /* both ends are executors */
}

/* The device FIFOs of the edge to p, both directions. */
static void connect_edge(struct ringcc_comm *comm, struct p2p_state *st,
                         int p) {
  int me = comm->rank, nsets = device_sets(comm);
  int me_at_p = local_index(comm, p, me), p_at_me = local_index(comm, me, p);
  for (int k = 0; k < RCC_NUM_CONN_KINDS; k++)
    for (int ch = 0; ch < comm->kind_channels[RCC_CONN_DEVICE + k]; ch++) {
      int set = rcc_fifo_set(comm, RCC_CONN_DEVICE + k, ch) -
                rcc_fifo_sets(comm, RCC_CONN_DEVICE);
      /* me -> p: the FIFO in p's block, its head in mine. */
      init_conn(rcc_send_conn(comm, RCC_CONN_DEVICE + k, ch, p),
                st->peer_map[p] + fifo_at(st, set, me_at_p),
                (uint32_t *)(st->own + head_at(st, nsets, set, p_at_me)),
                comm, st, p);
      /* p -> me: the FIFO in my block, its head in p's. */
      init_conn(rcc_recv_conn(comm, RCC_CONN_DEVICE + k, ch, p),
                st->own + fifo_at(st, set, p_at_me),
                (uint32_t *)(st->peer_map[p] + head_at(st, nsets, set,
                                                        me_at_p)),
                comm, st, p);
    }
}

static ringcc_result_t p2p_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  struct p2p_state *st = state;
  struct rcc_gpu_scope scope;
  ringcc_result_t r = rcc_transport_shm.connect(comm, st->shm, peers, npeers,
                                                all_blobs);
  if (r != RINGCC_SUCCESS || npeers == 0)
    return r;
  if ((r = enter(comm, st, &scope)) != RINGCC_SUCCESS)
    return r;
  for (int i = 0; i < npeers && r == RINGCC_SUCCESS; i++) {
    int p = peers[i];
    const struct p2p_blob *b =
        (const void *)(all_blobs + (size_t)p * RCC_TRANSPORT_BLOB_BYTES +
                       P2P_BLOB_OFFSET);
    r = map_peer(comm, st, p, b);
    if (r == RINGCC_SUCCESS)
      connect_edge(comm, st, p);
  }
  rcc_gpu_leave(&scope);
  return r;
}

static void p2p_finish(struct ringcc_comm *comm, void *state) {
  rcc_transport_shm.finish(comm, ((struct p2p_state *)state)->shm);
}

static const char *p2p_describe_peer(void *state, int peer) {
  static const char *const names[] = {
      [RCC_PATH_P2P_SAME_GPU] = "P2P/same GPU (host buffers: SHM)",
      [RCC_PATH_P2P_NVLINK] = "P2P/NVLink (host buffers: SHM)",
      [RCC_PATH_P2P_PCIE] = "P2P/PCIe (host buffers: SHM)",
  };
  struct p2p_state *st = state;
  int path = st->path ? st->path[peer] : -1;
  return path >= 0 && path <= RCC_PATH_P2P_PCIE ? names[path] : "P2P";
}

/* Priced as shared memory until the model has a link kind of its own for
 * NVLink/PCIe peer access (host buffers on these edges use shared memory). */
static int p2p_link(const struct ringcc_comm *comm, void *state, int peer) {
  (void)comm, (void)state, (void)peer;
  return RCC_LINK_SHM;
}

const struct rcc_transport rcc_transport_p2p = {
    .name = "P2P",
    .can_connect = p2p_can_connect,
    .slot_bytes = p2p_slot_bytes,
    .device_slot_bytes = rcc_p2p_device_slot_bytes,
    .setup = p2p_setup,
    .connect = p2p_connect,
    .finish = p2p_finish,
    .destroy = p2p_destroy,
    .describe_peer = p2p_describe_peer,
    .link = p2p_link,
    .flags = RCC_TRANSPORT_DEVICE_FIFOS,
};

#else /* !RINGCC_HAVE_CUDA: no GPU, never a P2P edge */

static int p2p_can_connect(const struct ringcc_comm *comm,
                           const struct rcc_peer_info *me,
                           const struct rcc_peer_info *peer) {
  (void)comm, (void)me, (void)peer;
  return 0;
}

static ringcc_result_t p2p_setup(struct ringcc_comm *comm, const int *peers,
                                 int npeers, void *blob, void **state) {
  (void)peers, (void)blob;
  *state = NULL;
  return npeers == 0 ? RINGCC_SUCCESS
                     : rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                                      "p2p on rank %d: no CUDA support",
                                      comm->rank);
}

static ringcc_result_t p2p_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  (void)comm, (void)state, (void)peers, (void)npeers, (void)all_blobs;
  return RINGCC_SUCCESS;
}

static void p2p_finish(struct ringcc_comm *comm, void *state) {
  (void)comm, (void)state;
}

static void p2p_destroy(struct ringcc_comm *comm, void *state) {
  (void)comm, (void)state;
}

const struct rcc_transport rcc_transport_p2p = {
    .name = "P2P",
    .can_connect = p2p_can_connect,
    .slot_bytes = p2p_slot_bytes,
    .setup = p2p_setup,
    .connect = p2p_connect,
    .finish = p2p_finish,
    .destroy = p2p_destroy,
};

#endif /* RINGCC_HAVE_CUDA */
