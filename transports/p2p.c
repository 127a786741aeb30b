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
 *   - device kinds: each rank cudaMallocs one block holding a FIFO per
 *     (device kind, channel, sender) and exports it with cudaIpcGetMemHandle; a sender
 *     opens its receivers' blocks with cudaIpcOpenMemHandle (or, for a rank
 *     that is a thread of the same process, uses the pointer itself) and its
 *     kernel writes slots, meta words and the tail there; the receiver's
 *     kernel reads slots locally and writes the head, which the sender polls
 *     across the link. The counters use system-scope acquire/release
 *     (exec_cuda.cu); the slots hold at most chunk_bytes, like shm's, so a
 *     schedule's step fits every edge.
 * The device FIFOs are zeroed before the setup barrier and are only touched
 * by kernels afterwards; cuda.c copies their addresses into the device-side
 * connection table.
 *
 * The link (NVLink or PCIe) comes from NVML when it can be loaded (cuda.c);
 * without NVML every P2P edge is reported as PCIe.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "transport.h"

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
  char *own;          /* this rank's device FIFOs */
  size_t own_bytes;
  char **peer_map;    /* [nranks] the peers' device FIFOs, as mapped here */
  uint8_t *ipc_open;  /* [nranks] 1: opened with cudaIpcOpenMemHandle */
  int *path;          /* [nranks] enum rcc_path, for the log */
};

static size_t fifo_bytes(const struct ringcc_comm *comm) {
  size_t b = RCC_FIFO_DATA_OFFSET +
             (size_t)comm->set.nslots * (size_t)comm->set.chunk_bytes;
  return (b + 4095) & ~(size_t)4095;
}

/* The number of a device set: (device kind k, channel) among the device
 * kinds' sets (comm.h's numbering, from the first device kind). */
static int device_set(const struct ringcc_comm *comm, int k, int ch) {
  return rcc_fifo_set(comm, RCC_CONN_DEVICE + k, ch) -
         rcc_fifo_sets(comm, RCC_CONN_DEVICE);
}

/* FIFO (device set, sender) inside a receiver's block. */
static size_t fifo_offset(const struct ringcc_comm *comm, int set,
                          int sender) {
  return ((size_t)set * (size_t)comm->nranks + (size_t)sender) *
         fifo_bytes(comm);
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

static size_t p2p_slot_bytes(const struct ringcc_comm *comm) {
  return (size_t)comm->set.chunk_bytes; /* = shm's: host kinds use shm */
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

static void p2p_destroy(struct ringcc_comm *comm, void *state) {
  struct p2p_state *st = state;
  int prev = 0;
  if (st == NULL)
    return;
  /* Host-only communicators never touch CUDA here, nor a forked child. */
  if ((st->own || st->ipc_open) && !comm->forked &&
      cudaGetDevice(&prev) == cudaSuccess &&
      cudaSetDevice(st->device) == cudaSuccess) {
    for (int p = 0; st->ipc_open && p < comm->nranks; p++)
      if (st->ipc_open[p])
        cudaIpcCloseMemHandle(st->peer_map[p]);
    if (st->own)
      cudaFree(st->own);
    cudaSetDevice(prev);
    cudaGetLastError();
  }
  rcc_transport_shm.destroy(comm, st->shm);
  free(st->peer_map);
  free(st->ipc_open);
  free(st->path);
  free(st);
}

/* This rank's device FIFOs: zeroed, exported. */
static ringcc_result_t make_own(struct ringcc_comm *comm, struct p2p_state *st,
                                struct p2p_blob *b) {
  cudaError_t e;
  st->own_bytes = fifo_offset(
      comm, device_set(comm, RCC_NUM_CONN_KINDS - 1,
                       comm->kind_channels[RCC_MAX_CONN_KINDS - 1]),
      0);
  if ((e = cudaMalloc((void **)&st->own, st->own_bytes)) != cudaSuccess)
    return cuda_fail(comm, "cudaMalloc of the device FIFOs", -1, e);
  /* Synchronous for this thread's default stream only: kernels of other
   * communicators (other ranks, as threads) may be running. */
  if ((e = cudaMemset(st->own, 0, st->own_bytes)) != cudaSuccess ||
      (e = cudaStreamSynchronize(0)) != cudaSuccess)
    return cuda_fail(comm, "cudaMemset of the device FIFOs", -1, e);
  if ((e = cudaIpcGetMemHandle(&b->handle, st->own)) != cudaSuccess)
    return cuda_fail(comm, "cudaIpcGetMemHandle", -1, e);
  b->dev_ptr = (uint64_t)(uintptr_t)st->own;
  b->bytes = st->own_bytes;
  b->fifo_bytes = fifo_bytes(comm);
  b->pid = (int32_t)getpid();
  b->device = st->device;
  return RINGCC_SUCCESS;
}

static ringcc_result_t p2p_setup(struct ringcc_comm *comm, const int *peers,
                                 int npeers, void *blob, void **state) {
  struct p2p_state *st = calloc(1, sizeof(*st));
  int prev = 0;
  *state = st;
  if (st == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "p2p on rank %d: out of memory", comm->rank);
  st->device = comm->peers[comm->rank].gpu.device;
  ringcc_result_t r = rcc_shm_setup_host(comm, peers, npeers, blob, &st->shm);
  if (r != RINGCC_SUCCESS || npeers == 0)
    return r;
  st->peer_map = calloc((size_t)comm->nranks, sizeof(char *));
  st->ipc_open = calloc((size_t)comm->nranks, 1);
  st->path = calloc((size_t)comm->nranks, sizeof(int));
  if (st->peer_map == NULL || st->ipc_open == NULL || st->path == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "p2p on rank %d: out of memory", comm->rank);
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess)
    e = cudaSetDevice(st->device);
  if (e != cudaSuccess)
    return cuda_fail(comm, "cudaSetDevice", -1, e);
  r = make_own(comm, st, (struct p2p_blob *)((char *)blob + P2P_BLOB_OFFSET));
  cudaSetDevice(prev);
  return r;
}

/* Maps peer p's device FIFOs into this process. */
static ringcc_result_t map_peer(struct ringcc_comm *comm, struct p2p_state *st,
                                int p, const struct p2p_blob *b) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  const struct rcc_peer_info *q = &comm->peers[p];
  void *ptr = NULL;
  cudaError_t e;

  if (b->fifo_bytes != fifo_bytes(comm))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "p2p on rank %d: rank %d's FIFOs do not match ours "
                          "(do all ranks use the same RINGCC_CHUNK_BYTES and "
                          "RINGCC_NSLOTS?)", comm->rank, p);
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

static void init_conn(struct rcc_conn *c, char *fifo,
                      const struct ringcc_comm *comm, int peer) {
  c->fifo = (struct rcc_fifo *)fifo; /* device memory: kernels only */
  c->data = fifo + RCC_FIFO_DATA_OFFSET;
  c->nslots = (uint32_t)comm->set.nslots;
  c->slot_bytes = (size_t)comm->set.chunk_bytes;
  c->step = 0;
  c->peer = peer;
  c->ops = NULL; /* both ends are executors */
}

static ringcc_result_t p2p_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  struct p2p_state *st = state;
  int prev = 0;
  ringcc_result_t r = rcc_transport_shm.connect(comm, st->shm, peers, npeers,
                                                all_blobs);
  if (r != RINGCC_SUCCESS || npeers == 0)
    return r;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess)
    e = cudaSetDevice(st->device);
  if (e != cudaSuccess)
    return cuda_fail(comm, "cudaSetDevice", -1, e);
  for (int i = 0; i < npeers && r == RINGCC_SUCCESS; i++) {
    int p = peers[i];
    const struct p2p_blob *b =
        (const void *)(all_blobs + (size_t)p * RCC_TRANSPORT_BLOB_BYTES +
                       P2P_BLOB_OFFSET);
    r = map_peer(comm, st, p, b);
    for (int k = 0; k < RCC_NUM_CONN_KINDS && r == RINGCC_SUCCESS; k++)
      for (int ch = 0; ch < comm->kind_channels[RCC_CONN_DEVICE + k]; ch++) {
        int set = device_set(comm, k, ch);
        init_conn(rcc_send_conn(comm, RCC_CONN_DEVICE + k, ch, p),
                  st->peer_map[p] + fifo_offset(comm, set, comm->rank), comm,
                  p);
        init_conn(rcc_recv_conn(comm, RCC_CONN_DEVICE + k, ch, p),
                  st->own + fifo_offset(comm, set, p), comm, p);
      }
  }
  cudaSetDevice(prev);
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

static size_t p2p_slot_bytes(const struct ringcc_comm *comm) {
  return (size_t)comm->set.chunk_bytes;
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
