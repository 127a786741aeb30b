/*
 * cuda.c - the host side of device buffers: which GPU a rank uses, where a
 * call's buffers live, the device-side FIFO tables, and enqueueing a
 * collective's kernel (exec_cuda.cu) on the caller's stream.
 *
 * Device collectives use FIFOs of their own (comm.h, RCC_CONN_DEVICE): the
 * transports create them next to the host FIFOs when every rank has a GPU.
 * The p2p transport puts them in the receiver's GPU memory; shm and net put
 * them in host memory, which this file registers with cudaHostRegister
 * (mapped) so that kernels write and read the slots directly: shm FIFOs are
 * the staging path between GPUs without peer access, net FIFOs are pinned
 * staging slots the proxy thread sends and fills. The kernels keep their
 * FIFO positions (struct rcc_conn .step) in device memory, so that
 * collectives enqueued on streams need no host bookkeeping; every kernel of a
 * communicator waits for the previous one (an event), whatever the stream,
 * so the device FIFOs see collectives in the order they were called.
 *
 * Errors a kernel meets (a timeout, a peer that sends the wrong size, an
 * abort) land in a mapped status record; rcc_cuda_poll turns the first one
 * into the communicator's last error and makes it unusable, as a failed host
 * collective does. ringcc_comm_get_async_error and every later call poll.
 *
 * Without CUDA (RINGCC_HAVE_CUDA 0) the second half of this file gives the
 * core stubs: no GPU, host FIFOs only, a non-NULL stream is unsupported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "comm.h"
#include "cuda.h"
#include "error.h"
#include "log.h"
#include "transport.h"

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#define DESTROY_GRACE_MS 10000 /* after the deadline, before forcing an abort */

struct rcc_cuda {
  int device;
  struct rcc_cuda_status *status;     /* host view (mapped) */
  struct rcc_cuda_status *status_dev; /* the kernels' view */
  struct rcc_conn *conns_dev;         /* [send, recv][set][nranks] */
  int nsets;                          /* device sets: collective channels,
                                         then point-to-point */
  int *ring_dev;                      /* the ring, then the ring reversed */
  cudaEvent_t last;                   /* the last kernel of this comm */
  int have_last;
  uint32_t launches;                  /* kernels enqueued (read by engines) */
  void **registered;                  /* host FIFOs registered for kernels */
  int nregistered;
  struct rcc_conn *engine_conn;       /* a host FIFO of the network engine:
                                         notified when a kernel starts */
  void *stage;                        /* staged input of the pending call */
  void *stage_stream;
};

static int cuda_busy(struct ringcc_comm *comm);

/* ---- small helpers ------------------------------------------------------- */

static ringcc_result_t cuda_error(struct ringcc_comm *comm, const char *what,
                                  cudaError_t e) {
  int dev = comm->cuda ? comm->cuda->device : comm->peers[comm->rank].gpu.device;
  cudaGetLastError(); /* clear a non-sticky error for the next call */
  return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                        "CUDA on rank %d (GPU %d): %s failed: %s (%s)",
                        comm->rank, dev, what, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

/* Makes dev current for this thread; *prev gets the previous device. */
static cudaError_t enter_device(int dev, int *prev) {
  cudaError_t e = cudaGetDevice(prev);
  if (e != cudaSuccess)
    return e;
  return *prev == dev ? cudaSuccess : cudaSetDevice(dev);
}

static void leave_device(int dev, int prev) {
  if (prev != dev)
    cudaSetDevice(prev);
}

/* ---- which GPU (init) --------------------------------------------------- */

/* NVML, when it can be loaded: is the link between two GPUs NVLink? */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(const char *, void **);
typedef int (*nvml_p2p_fn)(void *, void *, int, int *);
#define NVML_P2P_CAPS_INDEX_NVLINK 2
#define NVML_P2P_STATUS_OK 0

struct nvml {
  void *lib;
  nvml_handle_fn handle;
  nvml_p2p_fn p2p;
};

static int nvml_open(struct nvml *n) {
  memset(n, 0, sizeof(*n));
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n->lib == NULL)
    return 0;
  nvml_init_fn init = (nvml_init_fn)dlsym(n->lib, "nvmlInit_v2");
  n->handle = (nvml_handle_fn)dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  n->p2p = (nvml_p2p_fn)dlsym(n->lib, "nvmlDeviceGetP2PStatus");
  if (init == NULL || n->handle == NULL || n->p2p == NULL || init() != 0) {
    dlclose(n->lib);
    n->lib = NULL;
    return 0;
  }
  return 1;
}

static int nvml_nvlink(const struct nvml *n, const char *a, const char *b) {
  void *da, *db;
  int status = -1;
  if (n->lib == NULL || n->handle(a, &da) != 0 || n->handle(b, &db) != 0 ||
      n->p2p(da, db, NVML_P2P_CAPS_INDEX_NVLINK, &status) != 0)
    return 0;
  return status == NVML_P2P_STATUS_OK;
}

/* The GPUs dev can access with peer access, both ways, and how. */
static void probe_peers(int dev, int count, const char *my_bus,
                        struct rcc_gpu_info *me) {
  struct nvml nvml;
  int have_nvml = nvml_open(&nvml);
  for (int d = 0; d < count && me->npeer < RCC_TOPO_MAX_PEER_GPUS; d++) {
    int there = 0, back = 0;
    char bus[32];
    if (d == dev || cudaDeviceCanAccessPeer(&there, dev, d) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&back, d, dev) != cudaSuccess || !there ||
        !back || cudaDeviceGetPCIBusId(bus, sizeof(bus), d) != cudaSuccess)
      continue;
    me->peer_bus[me->npeer] = rcc_topo_bus_id(bus);
    me->peer_nvlink[me->npeer] = (uint8_t)nvml_nvlink(&nvml, my_bus, bus);
    me->npeer++;
  }
  cudaGetLastError();
  if (have_nvml)
    dlclose(nvml.lib); /* nvmlShutdown is not needed for these queries */
}

ringcc_result_t rcc_cuda_init(struct ringcc_comm *comm,
                              struct rcc_gpu_info *me) {
  int count = 0, dev = comm->set.cuda_device;
  char bus[32];
  struct cudaDeviceProp prop;

  me->device = -1;
  me->p2p_disable = comm->set.p2p_disable;
  if (dev == -2) {
    RCC_INFO(comm->rank, "RINGCC_CUDA_DEVICE=none: host buffers only");
    return RINGCC_SUCCESS;
  }
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (dev >= 0)
      RCC_WARN(comm->rank, "RINGCC_CUDA_DEVICE / config 'cuda_device' is %d, "
                           "but no CUDA device is usable (%s): host buffers "
                           "only", dev,
               e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    else /* no driver reads "driver version is insufficient" */
      RCC_INFO(comm->rank, "no usable CUDA device (cudaGetDeviceCount: %s): "
               "host buffers only",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return RINGCC_SUCCESS;
  }
  if (dev < 0 && (e = cudaGetDevice(&dev)) != cudaSuccess)
    return cuda_error(comm, "cudaGetDevice", e);
  if (dev >= count)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "init on rank %d: RINGCC_CUDA_DEVICE / config "
                          "'cuda_device' is %d, but this process sees %d CUDA "
                          "device%s (0..%d)", comm->rank, dev, count,
                          count == 1 ? "" : "s", count - 1);
  if ((e = cudaDeviceGetPCIBusId(bus, sizeof(bus), dev)) != cudaSuccess)
    return cuda_error(comm, "cudaDeviceGetPCIBusId", e);
  if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
    return cuda_error(comm, "cudaGetDeviceProperties", e);
  me->device = dev;
  me->bus_id = rcc_topo_bus_id(bus);
  memcpy(me->uuid, prop.uuid.bytes, sizeof(me->uuid));
  probe_peers(dev, count, bus, me);
  RCC_INFO(comm->rank, "GPU %d: %s, PCI %s, peer access to %d other GPU%s",
           dev, prop.name, bus, me->npeer, me->npeer == 1 ? "" : "s");
  return RINGCC_SUCCESS;
}

int rcc_cuda_kinds(const struct ringcc_comm *comm) {
  for (int p = 0; p < comm->nranks; p++)
    if (comm->peers[p].gpu.device < 0)
      return RCC_NUM_CONN_KINDS;
  return RCC_MAX_CONN_KINDS;
}

int rcc_cuda_channels(const struct ringcc_comm *comm) {
  int best = 2; /* staged through host memory, or the network */
  for (int a = 0; a < comm->nranks; a++)
    for (int b = a + 1; b < comm->nranks; b++) {
      struct rcc_edge_topo e;
      rcc_topo_edge(&comm->peers[a], &comm->peers[b], &e);
      int path = rcc_topo_device_path(&e);
      if (path == RCC_PATH_P2P_NVLINK || path == RCC_PATH_P2P_SAME_GPU)
        best = 16;
      else if (path == RCC_PATH_P2P_PCIE && best < 4)
        best = 4;
    }
  return best;
}

/* ---- device FIFO tables (connect) ---------------------------------------- */

static ringcc_result_t register_fifo(struct ringcc_comm *comm,
                                     const struct rcc_conn *host,
                                     struct rcc_conn *dev) {
  struct rcc_cuda *cu = comm->cuda;
  /* Slots away from the header are in GPU memory already (GPUDirect RDMA,
   * net.c): only the header needs mapping. */
  int gdr = host->data != (char *)host->fifo + RCC_FIFO_DATA_OFFSET;
  size_t bytes = RCC_FIFO_DATA_OFFSET +
                 (gdr ? 0 : (size_t)host->nslots * host->slot_bytes);
  void *base = host->fifo, *dbase = NULL;
  cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterMapped |
                                                    cudaHostRegisterPortable);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaHostRegister of a staging FIFO", e);
  cu->registered[cu->nregistered++] = base;
  if ((e = cudaHostGetDevicePointer(&dbase, base, 0)) != cudaSuccess)
    return cuda_error(comm, "cudaHostGetDevicePointer", e);
  *dev = *host;
  dev->fifo = dbase;
  dev->data = gdr ? host->data
                  : (char *)dbase + (host->data - (char *)host->fifo);
  dev->ops = NULL; /* kernels wake nobody; the engine polls (cuda_busy) */
  dev->engine = NULL;
  return RINGCC_SUCCESS;
}

/* The device view of peer p's device-kind FIFOs, into table. */
static ringcc_result_t device_edge(struct ringcc_comm *comm, int p,
                                   struct rcc_conn *table) {
  int n = comm->nranks, nsets = comm->cuda->nsets;
  unsigned flags = rcc_edge_flags(comm, p);
  for (int dir = 0; dir < 2; dir++)
    for (int set = 0; set < nsets; set++) {
      int kind, ch;
      rcc_fifo_set_kind(comm, rcc_fifo_sets(comm, RCC_CONN_DEVICE) + set,
                        &kind, &ch);
      const struct rcc_conn *h = dir == 0 ? rcc_send_conn(comm, kind, ch, p)
                                          : rcc_recv_conn(comm, kind, ch, p);
      struct rcc_conn *d = &table[((size_t)dir * nsets + set) * n + p];
      if (h->fifo == NULL)
        return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                              "init on rank %d: the transport to rank %d made "
                              "no device FIFO", comm->rank, p);
      if (h->ops != NULL)
        comm->cuda->engine_conn = (struct rcc_conn *)h;
      if (flags & RCC_TRANSPORT_DEVICE_FIFOS) {
        *d = *h; /* already in GPU memory */
        continue;
      }
      ringcc_result_t r = register_fifo(comm, h, d);
      if (r != RINGCC_SUCCESS)
        return r;
    }
  struct rcc_edge_topo e;
  rcc_topo_edge(&comm->peers[comm->rank], &comm->peers[p], &e);
  if (flags & RCC_TRANSPORT_NETWORK) {
    const struct rcc_conn *rh =
        rcc_recv_conn(comm, RCC_CONN_DEVICE + RCC_CONN_COLL, 0, p);
    RCC_INFO(comm->rank, "device edge %d -> %d via %s/%s", comm->rank, p,
             rcc_edge_name(comm, p),
             rh->data != (char *)rh->fifo + RCC_FIFO_DATA_OFFSET ? "GDR"
                                                                 : "staged");
  } else {
    RCC_INFO(comm->rank, "device edge %d -> %d via %s", comm->rank, p,
             rcc_topo_path_name(rcc_topo_device_path(&e)));
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t connect_tables(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  int n = comm->nranks;
  cu->nsets = rcc_fifo_sets(comm, RCC_MAX_CONN_KINDS) -
              rcc_fifo_sets(comm, RCC_CONN_DEVICE);
  size_t nconns = 2 * (size_t)cu->nsets * (size_t)n;
  struct rcc_conn *table = calloc(nconns, sizeof(*table));
  ringcc_result_t r = RINGCC_SUCCESS;
  cudaError_t e;

  cu->registered = calloc(nconns, sizeof(void *));
  if (table == NULL || cu->registered == NULL) {
    free(table);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  }
  for (int p = 0; p < n && r == RINGCC_SUCCESS; p++)
    if (p != comm->rank)
      r = device_edge(comm, p, table);
  if (r == RINGCC_SUCCESS &&
      (e = cudaMalloc((void **)&cu->conns_dev, nconns * sizeof(*table))) !=
          cudaSuccess)
    r = cuda_error(comm, "cudaMalloc of the FIFO table", e);
  if (r == RINGCC_SUCCESS &&
      (e = cudaMemcpy(cu->conns_dev, table, nconns * sizeof(*table),
                      cudaMemcpyHostToDevice)) != cudaSuccess)
    r = cuda_error(comm, "cudaMemcpy of the FIFO table", e);
  free(table);
  return r;
}

static ringcc_result_t connect_status(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  struct rcc_cuda_status *st = NULL;
  size_t ring_bytes = (size_t)comm->nranks * sizeof(int);
  cudaError_t e = cudaHostAlloc((void **)&st, sizeof(*st),
                                cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaHostAlloc of the status record", e);
  memset(st, 0, sizeof(*st));
  /* The network engine (another thread) may look already (cuda_busy). */
  __atomic_store_n(&cu->status, st, __ATOMIC_RELEASE);
  if ((e = cudaHostGetDevicePointer((void **)&cu->status_dev, cu->status, 0)) !=
      cudaSuccess)
    return cuda_error(comm, "cudaHostGetDevicePointer", e);
  if ((e = cudaMalloc((void **)&cu->ring_dev, 2 * ring_bytes)) !=
          cudaSuccess ||
      (e = cudaMemcpy(cu->ring_dev + comm->nranks, comm->ring_rev, ring_bytes,
                      cudaMemcpyHostToDevice)) != cudaSuccess ||
      (e = cudaMemcpy(cu->ring_dev, comm->ring, ring_bytes,
                      cudaMemcpyHostToDevice)) != cudaSuccess)
    return cuda_error(comm, "copying the ring to the GPU", e);
  if ((e = cudaEventCreateWithFlags(&cu->last, cudaEventDisableTiming)) !=
      cudaSuccess)
    return cuda_error(comm, "cudaEventCreate", e);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_cuda_connect(struct ringcc_comm *comm) {
  int prev = 0;
  if (comm->nkinds != RCC_MAX_CONN_KINDS)
    return RINGCC_SUCCESS; /* some rank has no GPU: host buffers only */
  struct rcc_cuda *cu = calloc(1, sizeof(*cu));
  if (cu == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  cu->device = comm->peers[comm->rank].gpu.device;
  __atomic_store_n(&comm->cuda, cu, __ATOMIC_RELEASE); /* see cuda_busy */
  __atomic_store_n(&comm->device_busy, cuda_busy, __ATOMIC_RELEASE);
  cudaError_t e = enter_device(comm->cuda->device, &prev);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaSetDevice", e);
  ringcc_result_t r = connect_status(comm);
  if (r == RINGCC_SUCCESS)
    r = connect_tables(comm);
  leave_device(comm->cuda->device, prev);
  return r;
}

/* ---- teardown, abort, errors -------------------------------------------- */

/* Waits for the last kernel; past the deadline, aborts it (it leaves its
 * next wait) rather than freeing memory under it. */
static void wait_kernels(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  int64_t ms = comm->set.timeout_ms > 0 ? comm->set.timeout_ms : 0;
  int64_t deadline = rcc_deadline_after_ms(ms > 0 ? ms + DESTROY_GRACE_MS : 0);
  int aborted = 0;
  if (!cu->have_last)
    return;
  for (;;) {
    cudaError_t e = cudaEventQuery(cu->last);
    if (e != cudaErrorNotReady)
      break;
    if (!aborted && rcc_now_ns() >= deadline) {
      RCC_WARN(comm->rank, "destroy: a collective kernel is still running "
                           "after the timeout; aborting it");
      rcc_cuda_abort(comm);
      aborted = 1;
    }
    usleep(100);
  }
  cudaGetLastError();
}

void rcc_cuda_destroy(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  int prev = 0;
  /* A forked child cannot use CUDA: its copy frees host memory only. */
  if (cu == NULL || comm->forked ||
      enter_device(cu->device, &prev) != cudaSuccess)
    return;
  wait_kernels(comm);
  for (int i = 0; i < cu->nregistered; i++)
    cudaHostUnregister(cu->registered[i]);
  cu->nregistered = 0;
  if (cu->conns_dev)
    cudaFree(cu->conns_dev);
  if (cu->ring_dev)
    cudaFree(cu->ring_dev);
  if (cu->last)
    cudaEventDestroy(cu->last);
  cu->conns_dev = NULL;
  cu->ring_dev = NULL;
  cu->last = NULL;
  cu->have_last = 0;
  cudaGetLastError();
  leave_device(cu->device, prev);
}

void rcc_cuda_free(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  if (cu == NULL)
    return;
  __atomic_store_n(&comm->cuda, NULL, __ATOMIC_RELEASE);
  if (cu->status && !comm->forked)
    cudaFreeHost(cu->status);
  if (!comm->forked)
    cudaGetLastError();
  free(cu->registered);
  free(cu);
}

void rcc_cuda_abort(struct ringcc_comm *comm) {
  if (comm->cuda && comm->cuda->status)
    __atomic_store_n(&comm->cuda->status->abort, 1, __ATOMIC_RELEASE);
}

static const char *status_where(const struct rcc_cuda_status *st, char *buf,
                                size_t len) {
  if (st->code == RINGCC_ERR_INVALID_USAGE)
    snprintf(buf, len, "rank %d sent %u bytes%s where %u were expected (do "
                       "all ranks make the same calls with the same counts "
                       "and datatypes?)", st->peer, st->got_bytes,
             st->got_last ? " (last piece)" : "", st->want_bytes);
  else
    snprintf(buf, len, "waiting for %s rank %d",
             st->waiting_send ? "a free slot to send to" : "data from",
             st->peer);
  return buf;
}

void rcc_cuda_poll(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  char where[200];
  if (cu == NULL || comm->fatal != RINGCC_SUCCESS)
    return;
  uint32_t code = __atomic_load_n(&cu->status->code, __ATOMIC_ACQUIRE);
  if (code != 0) {
    const struct rcc_cuda_status *st = cu->status;
    const char *why = code == RINGCC_ERR_TIMEOUT   ? "timed out"
                      : code == RINGCC_ERR_ABORTED ? "was aborted"
                                                   : "failed";
    comm->fatal = rcc_comm_error(
        comm, (ringcc_result_t)code,
        "%s (seq %llu) on rank %d, device kernel on GPU %d, %s at step %llu "
        "of %llu: %s%s", rcc_coll_name(st->coll), (unsigned long long)st->seq,
        comm->rank, cu->device, why, (unsigned long long)st->step,
        (unsigned long long)st->nsteps, status_where(st, where, sizeof(where)),
        code == RINGCC_ERR_TIMEOUT ? " (did every rank make the same call?)"
                                   : "");
    return;
  }
  if (cu->have_last) {
    int prev = 0;
    if (enter_device(cu->device, &prev) != cudaSuccess)
      return;
    cudaError_t e = cudaEventQuery(cu->last);
    leave_device(cu->device, prev);
    if (e != cudaSuccess && e != cudaErrorNotReady)
      comm->fatal = rcc_comm_error(
          comm, RINGCC_ERR_CUDA,
          "a device collective on rank %d (GPU %d) failed: %s (%s)",
          comm->rank, cu->device, cudaGetErrorString(e), cudaGetErrorName(e));
  }
}

/* comm->device_busy: called by the network engine's thread, also while
 * init is still filling comm->cuda in and until the engine stops
 * (rcc_cuda_free comes after). */
static int cuda_busy(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = __atomic_load_n(&comm->cuda, __ATOMIC_ACQUIRE);
  struct rcc_cuda_status *st =
      cu ? __atomic_load_n(&cu->status, __ATOMIC_ACQUIRE) : NULL;
  return st != NULL && __atomic_load_n(&st->done, __ATOMIC_ACQUIRE) !=
                           __atomic_load_n(&cu->launches, __ATOMIC_ACQUIRE);
}

/* ---- where are the buffers? ------------------------------------------------ */

/* 1: device memory (of GPU *dev), 0: host memory. */
static int on_device(const void *p, int *dev) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  *dev = a.device;
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static ringcc_result_t no_device(struct ringcc_comm *comm, const char *fn,
                                 const char *what) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  int without = -1;
  for (int p = 0; p < comm->nranks && without < 0; p++)
    if (comm->peers[p].gpu.device < 0)
      without = p;
  if (me->gpu.device < 0)
    return rcc_comm_error(comm, RINGCC_ERR_UNSUPPORTED,
                          "%s on rank %d: %s, but no CUDA device is usable on "
                          "this rank (no GPU or driver, or "
                          "RINGCC_CUDA_DEVICE=none); host buffers take stream "
                          "NULL", fn, comm->rank, what);
  return rcc_comm_error(comm, RINGCC_ERR_UNSUPPORTED,
                        "%s on rank %d: %s, but rank %d (host %s) has no GPU; "
                        "device buffers need a GPU on every rank", fn,
                        comm->rank, what, without,
                        comm->peers[without >= 0 ? without : 0].hostname);
}

ringcc_result_t rcc_cuda_locate(struct ringcc_comm *comm, const char *fn,
                                const void *send, const char *send_name,
                                const void *recv, const char *recv_name,
                                void *stream, int *dev_buffers) {
  int mine = comm->peers[comm->rank].gpu.device, sdev = -1, rdev = -1;
  int s_on = 0, r_on = 0;

  *dev_buffers = 0;
  if (mine < 0) /* no GPU here: nothing can be device memory */
    return stream == NULL ? RINGCC_SUCCESS
                          : no_device(comm, fn, "argument 'stream' is not NULL");
  if (send)
    s_on = on_device(send, &sdev);
  if (recv)
    r_on = on_device(recv, &rdev);
  if (send && recv && s_on != r_on)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "%s on rank %d: argument '%s' is host memory but "
                          "'%s' is memory of GPU %d; both must be device "
                          "memory or both host memory", fn, comm->rank,
                          s_on ? recv_name : send_name,
                          s_on ? send_name : recv_name, s_on ? sdev : rdev);
  int device = s_on || r_on || (send == NULL && recv == NULL && stream);
  if (!device) {
    if (stream == NULL)
      return RINGCC_SUCCESS;
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "%s on rank %d: argument 'stream' is not NULL, but "
                          "the buffers are host memory; host buffers take "
                          "stream NULL (the call then blocks)", fn, comm->rank);
  }
  if ((s_on && sdev != mine) || (r_on && rdev != mine))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "%s on rank %d: argument '%s' is memory of GPU %d, "
                          "but this rank uses GPU %d (RINGCC_CUDA_DEVICE / "
                          "config 'cuda_device', else the current device at "
                          "init)", fn, comm->rank,
                          s_on && sdev != mine ? send_name : recv_name,
                          s_on && sdev != mine ? sdev : rdev, mine);
  if (comm->cuda == NULL)
    return no_device(comm, fn, "the buffers are device memory");
  *dev_buffers = 1;
  return RINGCC_SUCCESS;
}

/* ---- enqueueing ----------------------------------------------------------- */

ringcc_result_t rcc_cuda_stage(struct ringcc_comm *comm, const void *src,
                               size_t bytes, void *stream, const void **copy) {
  struct rcc_cuda *cu = comm->cuda;
  int prev = 0;
  void *p = NULL;
  cudaError_t e = enter_device(cu->device, &prev);
  if (e == cudaSuccess)
    e = cudaMallocAsync(&p, bytes, (cudaStream_t)stream);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToDevice,
                        (cudaStream_t)stream);
  leave_device(cu->device, prev);
  if (e != cudaSuccess) {
    if (p)
      cudaFreeAsync(p, (cudaStream_t)stream);
    return cuda_error(comm, "staging an in-place input (cudaMallocAsync, "
                            "cudaMemcpyAsync)", e);
  }
  cu->stage = p; /* freed on the stream after the kernel */
  cu->stage_stream = stream;
  *copy = p;
  return RINGCC_SUCCESS;
}

static ringcc_result_t launch(struct ringcc_comm *comm,
                              const struct rcc_cuda_args *a, void *stream) {
  struct rcc_cuda *cu = comm->cuda;
  char err[RCC_ERRLEN];
  cudaError_t e = cudaSuccess;

  if (cu->have_last)
    e = cudaStreamWaitEvent((cudaStream_t)stream, cu->last, 0);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaStreamWaitEvent", e);
  __atomic_store_n(&cu->launches, a->launch, __ATOMIC_RELEASE);
  int rc = rcc_cuda_launch(a, stream, err, sizeof(err));
  if (rc != 0) {
    __atomic_store_n(&cu->launches, a->launch - 1, __ATOMIC_RELEASE);
    cudaGetLastError();
    return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                          "%s (seq %llu) on rank %d (GPU %d): launching the "
                          "kernel failed: %s", rcc_coll_name(a->plan.coll),
                          (unsigned long long)a->seq, comm->rank, cu->device,
                          err);
  }
  if ((e = cudaEventRecord(cu->last, (cudaStream_t)stream)) != cudaSuccess)
    return cuda_error(comm, "cudaEventRecord", e);
  cu->have_last = 1;
  if (cu->engine_conn != NULL) /* from now on the engine polls */
    cu->engine_conn->ops->notify(cu->engine_conn);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_exec_cuda(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op,
                              void *stream) {
  struct rcc_cuda *cu = comm->cuda;
  int n = comm->nranks, prev = 0;
  struct rcc_cuda_args a = {
      .plan = *plan,
      .src = src,
      .dst = dst,
      .send_conns = cu->conns_dev,
      .recv_conns = cu->conns_dev + (size_t)cu->nsets * n,
      .coll_channels = comm->kind_channels[RCC_CONN_DEVICE + RCC_CONN_COLL],
      .status = cu->status_dev,
      .timeout_ns = comm->set.timeout_ms > 0
                        ? (uint64_t)comm->set.timeout_ms * 1000000u
                        : 0,
      .seq = comm->seq,
      .launch = cu->launches + 1,
      .dt = dt,
      .op = op,
  };
  a.plan.ring = cu->ring_dev;
  a.plan.ring_rev = cu->ring_dev + n;
  if (a.plan.nchannels < 1)
    a.plan.nchannels = 1;
  cudaError_t e = enter_device(cu->device, &prev);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaSetDevice", e);
  ringcc_result_t r = launch(comm, &a, stream);
  if (cu->stage) {
    cudaFreeAsync(cu->stage, (cudaStream_t)cu->stage_stream);
    cu->stage = NULL;
  }
  leave_device(cu->device, prev);
  return r;
}

#else /* !RINGCC_HAVE_CUDA --------------------------------------------------- */

ringcc_result_t rcc_cuda_init(struct ringcc_comm *comm,
                              struct rcc_gpu_info *me) {
  (void)comm;
  me->device = -1;
  me->p2p_disable = 1;
  return RINGCC_SUCCESS;
}

int rcc_cuda_kinds(const struct ringcc_comm *comm) {
  (void)comm;
  return RCC_NUM_CONN_KINDS;
}

int rcc_cuda_channels(const struct ringcc_comm *comm) {
  (void)comm;
  return 1; /* no device collectives */
}

ringcc_result_t rcc_cuda_connect(struct ringcc_comm *comm) {
  (void)comm;
  return RINGCC_SUCCESS;
}

void rcc_cuda_destroy(struct ringcc_comm *comm) { (void)comm; }
void rcc_cuda_free(struct ringcc_comm *comm) { (void)comm; }
void rcc_cuda_abort(struct ringcc_comm *comm) { (void)comm; }
void rcc_cuda_poll(struct ringcc_comm *comm) { (void)comm; }

ringcc_result_t rcc_cuda_locate(struct ringcc_comm *comm, const char *fn,
                                const void *send, const char *send_name,
                                const void *recv, const char *recv_name,
                                void *stream, int *dev_buffers) {
  (void)send, (void)send_name, (void)recv, (void)recv_name;
  *dev_buffers = 0;
  if (stream == NULL)
    return RINGCC_SUCCESS;
  return rcc_comm_error(comm, RINGCC_ERR_UNSUPPORTED,
                        "%s on rank %d: argument 'stream' is not NULL, but "
                        "this build has no CUDA support (host buffers take "
                        "stream NULL)", fn, comm->rank);
}

ringcc_result_t rcc_cuda_stage(struct ringcc_comm *comm, const void *src,
                               size_t bytes, void *stream, const void **copy) {
  (void)bytes, (void)stream;
  *copy = src;
  return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                        "rcc_cuda_stage without CUDA support");
}

ringcc_result_t rcc_exec_cuda(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op,
                              void *stream) {
  (void)plan, (void)src, (void)dst, (void)dt, (void)op, (void)stream;
  return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                        "rcc_exec_cuda without CUDA support");
}

#endif /* RINGCC_HAVE_CUDA */
