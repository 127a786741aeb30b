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
 * abort, a failure this rank learned of) land in a mapped status record;
 * rcc_cuda_poll turns the first one into the communicator's last error and
 * makes it unusable, as a failed host collective does. Any thread may poll
 * (ringcc_comm_get_async_error from a framework's watchdog, while the owner
 * makes calls): the record is read under the lock of struct rcc_cuda.
 *
 * Failures reach the kernels: the status record's 'failed' word is
 * comm->fail_word, where failure.c stores RINGCC_ERR_PEER_FAILED when a rank
 * is known dead and error.c the network's error; every kernel wait polls it
 * with the abort flag. While kernels may run a watchdog thread (watchdog.c)
 * looks at the same-host peers every 20 ms, as a waiting host executor
 * would, and wakes the network engine when a kernel starts.
 *
 * Without CUDA (RINGCC_HAVE_CUDA 0) the second half of this file gives the
 * core stubs: no GPU, host FIFOs only, a non-NULL stream is unsupported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algorithms.h"
#include "clock.h"
#include "comm.h"
#include "cuda.h"
#include "error.h"
#include "failure.h"
#include "fifo.h"
#include "gpu.h"
#include "log.h"
#include "topo.h"
#include "transport.h"
#include "watchdog.h"

/* ---- the failure a kernel reported, as one sentence (both builds) --------- */

void rcc_cuda_status_message(const struct rcc_cuda_status *st, int rank,
                             int device, const char *dead, const char *async,
                             char *buf, size_t len) {
  char where[300];
  uint32_t code = st->code;
  const char *why = code == RINGCC_ERR_TIMEOUT       ? "timed out"
                    : code == RINGCC_ERR_ABORTED     ? "was aborted"
                    : code == RINGCC_ERR_PEER_FAILED ? "stopped"
                    : code == RINGCC_ERR_INVALID_USAGE ? "failed"
                                                       : "stopped";
  if (code == RINGCC_ERR_INVALID_USAGE)
    snprintf(where, sizeof(where), "rank %d sent %u bytes%s where %u were "
             "expected (do all ranks make the same calls with the same "
             "counts and datatypes?)", st->peer, st->got_bytes,
             st->got_last ? " (last piece)" : "", st->want_bytes);
  else if (st->peer >= 0)
    snprintf(where, sizeof(where), "waiting for %s rank %d",
             st->waiting_send ? "a free slot to send to" : "data from",
             st->peer);
  else
    snprintf(where, sizeof(where), "before its first step");
  const char *cause = "";
  if (code == RINGCC_ERR_PEER_FAILED && dead && *dead)
    cause = dead;
  else if (code != RINGCC_ERR_TIMEOUT && code != RINGCC_ERR_ABORTED &&
           code != RINGCC_ERR_INVALID_USAGE && async && *async)
    cause = async;
  snprintf(buf, len, "%s (seq %llu%s) on rank %d, device kernel on GPU %d, "
           "%s at step %llu of %llu %s%s%s%s",
           rcc_coll_name(st->coll), (unsigned long long)st->seq,
           st->captured ? ", from a CUDA graph" : "", rank, device, why,
           (unsigned long long)st->step, (unsigned long long)st->nsteps, where,
           *cause ? ": " : "", cause,
           code == RINGCC_ERR_TIMEOUT ? " (did every rank make the same call?)"
                                      : "");
}

/* ---- device buffers' alignment (both builds) ------------------------------- */

const char *rcc_cuda_misaligned(const void *send, const char *send_name,
                                const void *recv, const char *recv_name,
                                size_t esize) {
  if (esize == 0)
    return NULL;
  if (send != NULL && (uintptr_t)send % esize != 0)
    return send_name;
  if (recv != NULL && (uintptr_t)recv % esize != 0)
    return recv_name;
  return NULL;
}

/* ---- a rank's GPU as one phrase (both builds) ------------------------------ */

static const char *cuda_error_text(int e);

const char *rcc_cuda_gpu_text(const struct rcc_gpu_info *g, char *buf,
                              size_t len) {
  char bus[32];
  switch (g->device >= 0 ? RCC_GPU_NONE_HAS_GPU : g->none_why) {
  case RCC_GPU_NONE_HAS_GPU:
    snprintf(buf, len, "GPU %d %s, PCI %s", g->device,
             g->name[0] ? g->name : "(unnamed)",
             rcc_topo_bus_name(g->bus_id, bus, sizeof(bus)));
    break;
  case RCC_GPU_NONE_ASKED:
    snprintf(buf, len, "none (RINGCC_CUDA_DEVICE=none)");
    break;
  case RCC_GPU_NONE_NO_CONTEXT:
    snprintf(buf, len, "none (no CUDA context in the thread that made the "
             "communicator)");
    break;
  case RCC_GPU_NONE_NO_DEVICE:
    snprintf(buf, len, "none (no usable CUDA device: %s)",
             cuda_error_text(g->none_error));
    break;
  case RCC_GPU_NONE_OLD_DRIVER:
    snprintf(buf, len, "none (a GPU whose driver, CUDA %d.%d, is too old "
             "for this build)", g->none_error / 1000,
             g->none_error % 1000 / 10);
    break;
  case RCC_GPU_NONE_UNUSABLE:
    snprintf(buf, len, "none (the GPU could not start; see the WARN at "
             "init)");
    break;
  default:
    snprintf(buf, len, "none (this build has no CUDA support)");
    break;
  }
  return buf;
}

/* ---- the order of a collective's CUDA work (both builds) ---------------- */

int rcc_cuda_recipe(int have_last, int capturing, int stage,
                    int steps[RCC_CUDA_MAX_STEPS]) {
  int n = 0;
  /* Captured: an external wait node, evaluated at each replay, so that a
   * replay runs after the direct calls launched before it, whatever their
   * stream (a wait for an event never recorded is no wait). */
  if (have_last || capturing)
    steps[n++] = RCC_CUDA_WAIT_LAST; /* before anything reads the input */
  if (stage) {
    steps[n++] = RCC_CUDA_STAGE_ALLOC;
    steps[n++] = RCC_CUDA_STAGE_COPY;
  }
  if (capturing)
    steps[n++] = RCC_CUDA_HOST_KICK;
  steps[n++] = RCC_CUDA_KERNEL;
  /* Captured: an external record node, so that direct calls after a
   * replay wait for it. */
  steps[n++] = RCC_CUDA_RECORD_LAST;
  if (stage)
    steps[n++] = RCC_CUDA_STAGE_FREE;
  return n;
}

/* ---- sharing one GPU (both builds) ------------------------------------------- */

int rcc_cuda_channel_cap(int share, int sms) {
  if (share <= 1 || sms <= 0)
    return RCC_MAX_CHANNELS;
  int cap = sms / share > 0 ? sms / share : 1;
  return cap < RCC_MAX_CHANNELS ? cap : RCC_MAX_CHANNELS;
}

int rcc_cuda_channel_limit(const struct ringcc_comm *comm) {
  int share = 1, sms = 0;
  for (int a = 0; a < comm->nranks; a++) {
    const struct rcc_gpu_info *g = &comm->peers[a].gpu;
    int same = 1;
    for (int b = a + 1; b < comm->nranks; b++) {
      struct rcc_edge_topo e;
      rcc_topo_edge(&comm->peers[a], &comm->peers[b], &e);
      same += e.same_host && e.same_gpu;
    }
    share = same > share ? same : share;
    if (g->sm_count > 0 && (sms == 0 || g->sm_count < sms))
      sms = g->sm_count;
  }
  return rcc_cuda_channel_cap(share, sms);
}

int rcc_cuda_hw_queues(const char *env) {
  char *end = NULL;
  long v = env && *env ? strtol(env, &end, 10) : 0;
  if (env == NULL || *env == '\0' || *end != '\0' || v < 1)
    return 8; /* the driver's default, and what it uses for a bad value */
  return v > 32 ? 32 : (int)v;
}

/* Ranks a and b are threads of one process on one GPU. */
static int same_process_gpu(const struct rcc_peer_info *a,
                            const struct rcc_peer_info *b) {
  struct rcc_edge_topo e;
  rcc_topo_edge(a, b, &e);
  return e.same_host && e.same_gpu && a->pid == b->pid &&
         a->pid_space == b->pid_space;
}

int rcc_cuda_threads_per_gpu(const struct ringcc_comm *comm) {
  int most = comm->nranks > 0 ? 1 : 0;
  for (int a = 0; a < comm->nranks; a++) {
    int same = 1;
    for (int b = a + 1; b < comm->nranks; b++)
      same += same_process_gpu(&comm->peers[a], &comm->peers[b]);
    most = same > most ? same : most;
  }
  return most;
}

int rcc_cuda_shared_gpu_processes(const struct ringcc_comm *comm, int *a,
                                  int *b) {
  for (int p = 0; p < comm->nranks; p++)
    for (int q = p + 1; q < comm->nranks; q++) {
      struct rcc_edge_topo e;
      rcc_topo_edge(&comm->peers[p], &comm->peers[q], &e);
      if (e.device_capable && e.same_host && e.same_gpu &&
          !same_process_gpu(&comm->peers[p], &comm->peers[q])) {
        *a = p, *b = q;
        return 1;
      }
    }
  return 0;
}

int rcc_cuda_mps_running(const char *pipe_dir) {
  char path[512];
  struct stat st;
  snprintf(path, sizeof(path), "%s/control",
           pipe_dir && *pipe_dir ? pipe_dir : "/tmp/nvidia-mps");
  return stat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

int rcc_cuda_shared_refused(const struct ringcc_comm *comm, char *why,
                            size_t len) {
  int a = -1, b = -1;
  const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (!rcc_cuda_shared_gpu_processes(comm, &a, &b) ||
      rcc_cuda_mps_running(dir))
    return 0;
  snprintf(why, len, "ranks %d and %d are processes on one GPU (PCI bus id "
           "%llx) without MPS (no control pipe in %s): their contexts would "
           "time-slice the GPU while a kernel spins for its peer. Start MPS "
           "(nvidia-cuda-mps-control -d), give each process a GPU of its own, "
           "run the ranks as threads of one process, or take the staged path: "
           "host buffers (copy to host memory, stream NULL)", a, b,
           (unsigned long long)comm->peers[a].gpu.bus_id,
           dir && *dir ? dir : "/tmp/nvidia-mps");
  return 1;
}

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>

static const char *cuda_error_text(int e) {
  return cudaGetErrorString((cudaError_t)e);
}

#define DESTROY_GRACE_MS 10000 /* after the deadline, before forcing an abort */

struct rcc_cuda {
  int device;
  struct rcc_cuda_status *status;     /* host view (mapped) */
  struct rcc_cuda_status *status_dev; /* the kernels' view */
  struct rcc_conn *conns_dev;         /* [send, recv][set][nranks] */
  struct rcc_cuda_blocks *blocks_dev; /* the kernels' block counts */
  int nsets;                          /* device sets: collective channels,
                                         then point-to-point */
  int *ring_dev;                      /* the ring, then the ring reversed */
  cudaEvent_t last;                   /* the last kernel of this comm */
  int have_last;                      /* atomic: polled from any thread */
  cudaStream_t stream;                /* the communicator's own (setup and
                                         teardown copies) */
  void **registered;                  /* host FIFOs registered for kernels */
  int nregistered;
  struct rcc_conn *engine_conn;       /* a host FIFO of the network engine:
                                         notified when a kernel starts */
  struct rcc_watchdog watch;          /* peers and the engine, while
                                         kernels may run */
  pthread_mutex_t lock;               /* rcc_cuda_poll's, any thread */
  ringcc_result_t failure;            /* the first failure found */
};

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

/* Makes dev current for this thread through its primary context; leave()
 * puts back whatever the thread had (gpu.c: no cudaSetDevice, so no context
 * appears on a GPU this process does not use). */
static ringcc_result_t enter(struct ringcc_comm *comm, int dev,
                             struct rcc_gpu_scope *scope) {
  char why[256];
  if (rcc_gpu_enter(dev, scope, why, sizeof(why)) == 0)
    return RINGCC_SUCCESS;
  return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                        "CUDA on rank %d: cannot make GPU %d current: %s",
                        comm->rank, dev, why);
}

static void leave(struct rcc_gpu_scope *scope) { rcc_gpu_leave(scope); }

/* ---- which GPU (init) --------------------------------------------------- */

/* Why no device is usable, at the level it deserves: a GPU whose driver is
 * too old for this build's runtime is a WARN naming both versions (1, with
 * the driver's CUDA version in *driver_out). */
static int no_usable_device(const struct ringcc_comm *comm, int asked,
                            cudaError_t e, int32_t *driver_out) {
  char msg[RCC_ERRLEN], release[64];
  if (e == cudaErrorInsufficientDriver && rcc_gpu_present()) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cudaGetLastError();
    rcc_gpu_driver_release(release, sizeof(release));
    rcc_gpu_driver_message(runtime, driver, release, msg, sizeof(msg));
    RCC_WARN(comm->rank, "%s: host buffers only", msg);
    *driver_out = driver;
    return 1;
  } else if (asked >= 0) {
    RCC_WARN(comm->rank, "RINGCC_CUDA_DEVICE / config 'cuda_device' is %d, "
                         "but no CUDA device is usable (%s): host buffers "
                         "only", asked,
             e != cudaSuccess ? cudaGetErrorString(e) : "no device");
  } else {
    RCC_INFO(comm->rank, "no usable CUDA device (cudaGetDeviceCount: %s): "
             "host buffers only",
             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  }
  return 0;
}

/* The GPUs dev reaches: NVML's view of every GPU of the node, by PCI bus id
 * (so ranks that each see one GPU still find their NVLink peers); without
 * NVML, peer access among the GPUs this process sees. */
static void probe_peers(int dev, int count, const char *my_bus,
                        struct rcc_gpu_info *me) {
  if (rcc_gpu_nvml_probe(my_bus, me))
    return;
  me->probe = RCC_PROBE_CUDA;
  for (int d = 0; d < count && me->npeer < RCC_TOPO_MAX_PEER_GPUS; d++) {
    int there = 0, back = 0;
    char bus[32];
    if (d == dev || cudaDeviceCanAccessPeer(&there, dev, d) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&back, d, dev) != cudaSuccess ||
        cudaDeviceGetPCIBusId(bus, sizeof(bus), d) != cudaSuccess)
      continue;
    int i = me->npeer++;
    me->peer_bus[i] = rcc_topo_bus_id(bus);
    me->peer_p2p[i] = there && back;
    me->peer_nvlink[i] = 0; /* unknown without NVML: reported as PCIe */
    me->peer_status[i] = there && back ? RCC_P2P_OK : RCC_P2P_NOT_SUPPORTED;
    me->peer_level[i] = RCC_TOPO_LEVEL_UNKNOWN;
  }
  cudaGetLastError();
}

/* Whether the device side can start on dev: its context, a little device
 * memory and mapped host memory. "" when it can, else why. */
static void try_device(int dev, char *why, size_t len) {
  struct rcc_gpu_scope scope;
  void *d = NULL, *h = NULL;
  cudaError_t e = cudaSuccess;
  const char *what = "";
  why[0] = '\0';
  if (rcc_gpu_enter(dev, &scope, why, len) != 0)
    return;
  cudaStream_t s = NULL;
  /* Stream-ordered on a stream of its own: cudaFree would wait for every
   * kernel of the device, those of ranks that are threads of this process
   * and spin for this one included. */
  if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
    what = "cudaStreamCreate";
  else if ((e = cudaMallocAsync(&d, 4096, s)) != cudaSuccess)
    what = "cudaMallocAsync";
  else if ((e = cudaHostAlloc(&h, 64, cudaHostAllocMapped |
                                          cudaHostAllocPortable)) != cudaSuccess)
    what = "cudaHostAlloc (mapped)";
  if (d)
    cudaFreeAsync(d, s);
  if (s) {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  if (h) /* pinned host memory: no device memory is unmapped */
    cudaFreeHost(h);
  if (e != cudaSuccess)
    snprintf(why, len, "%s: %s (%s)", what, cudaGetErrorString(e),
             cudaGetErrorName(e));
  cudaGetLastError();
  leave(&scope);
}

ringcc_result_t rcc_cuda_init(struct ringcc_comm *comm,
                              struct rcc_gpu_info *me) {
  int count = 0, dev = comm->set.cuda_device, asked = dev >= 0;
  char bus[32], why[RCC_ERRLEN];
  struct cudaDeviceProp prop;

  me->device = -1;
  me->numa = -1;
  me->p2p_disable = comm->set.p2p_disable;
  me->none_why = RCC_GPU_NONE_ASKED;
  if (dev == -2) {
    RCC_INFO(comm->rank, "RINGCC_CUDA_DEVICE=none: host buffers only");
    return RINGCC_SUCCESS;
  }
  me->none_why = RCC_GPU_NONE_NO_CONTEXT;
  /* Unasked, only a rank whose thread uses CUDA gets a device side: a
   * host-only program on a GPU node creates no context and no device
   * FIFOs. */
  if (!asked && !rcc_gpu_thread_has_context()) {
    RCC_INFO(comm->rank, "no current CUDA context in the thread that calls "
             "init: host buffers only (for device buffers make the rank's "
             "GPU current first, e.g. cudaSetDevice, or set "
             "RINGCC_CUDA_DEVICE / config 'cuda_device')");
    return RINGCC_SUCCESS;
  }
  /* Thread ranks each spin on a stream of their own: each needs a hardware
   * queue (rcc_cuda_threads_per_gpu). The driver reads this when it creates
   * a context: set here only if nobody set it and the driver is not loaded
   * yet (no context can exist), i.e. when this library creates it. */
  if (getenv("CUDA_DEVICE_MAX_CONNECTIONS") == NULL &&
      !rcc_gpu_driver_loaded()) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    RCC_INFO(comm->rank, "CUDA_DEVICE_MAX_CONNECTIONS unset and no CUDA "
             "context yet: set to 32 (hardware queues for ranks that are "
             "threads on one GPU)");
  }
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    me->none_why = RCC_GPU_NONE_NO_DEVICE;
    me->none_error = (int32_t)e;
    if (no_usable_device(comm, asked ? dev : -1, e, &me->none_error))
      me->none_why = RCC_GPU_NONE_OLD_DRIVER;
    return RINGCC_SUCCESS;
  }
  if (!asked && (e = cudaGetDevice(&dev)) != cudaSuccess)
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
  try_device(dev, why, sizeof(why));
  if (why[0] && asked)
    return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                          "init on rank %d: GPU %d (PCI %s) was asked for "
                          "(RINGCC_CUDA_DEVICE / config 'cuda_device') but "
                          "cannot be used: %s", comm->rank, dev, bus, why);
  if (why[0]) {
    RCC_WARN(comm->rank, "GPU %d (PCI %s) cannot be used: %s; host buffers "
                         "only", dev, bus, why);
    me->none_why = RCC_GPU_NONE_UNUSABLE;
    return RINGCC_SUCCESS;
  }
  me->device = dev;
  me->none_why = RCC_GPU_NONE_HAS_GPU;
  me->bus_id = rcc_topo_bus_id(bus);
  me->numa = rcc_gpu_pci_numa(bus);
  me->sm_count = prop.multiProcessorCount;
  snprintf(me->name, sizeof(me->name), "%.*s", (int)sizeof(me->name) - 1,
           prop.name);
  memcpy(me->uuid, prop.uuid.bytes, sizeof(me->uuid));
  probe_peers(dev, count, bus, me);
  int reach = 0, nvlink = 0;
  for (int i = 0; i < me->npeer; i++)
    reach += me->peer_p2p[i], nvlink += me->peer_nvlink[i];
  RCC_INFO(comm->rank, "GPU %d: %s, PCI %s, NUMA node %d, %d SMs; P2P to %d "
           "other GPU%s of this host (%d over NVLink), probed with %s",
           dev, me->name, bus, me->numa, me->sm_count, reach,
           reach == 1 ? "" : "s", nvlink,
           me->probe == RCC_PROBE_NVML ? "NVML, by PCI bus id"
                                       : "CUDA among the visible GPUs (no "
                                         "NVML: NVLink unknown)");
  return RINGCC_SUCCESS;
}

/* Why comm's device side cannot run (the same on every rank), into why: 1,
 * or 0 when it can. Processes on one GPU without MPS; more thread ranks of
 * one process on one GPU than it has hardware queues. */
static int device_side_refused(const struct ringcc_comm *comm, char *why,
                               size_t len) {
  if (rcc_cuda_shared_refused(comm, why, len))
    return 1;
  const char *env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  int queues = rcc_cuda_hw_queues(env), threads =
                                            rcc_cuda_threads_per_gpu(comm);
  if (threads <= queues)
    return 0;
  snprintf(why, len, "%d ranks are threads of one process on one GPU, more "
           "than its %d hardware queues (CUDA_DEVICE_MAX_CONNECTIONS %s%s): "
           "two of their streams would share a queue, and a kernel waiting "
           "for the other's would wait forever. Set "
           "CUDA_DEVICE_MAX_CONNECTIONS=32 before the process first uses "
           "CUDA (the library sets it itself when it is the first to: "
           "RINGCC_CUDA_DEVICE / config 'cuda_device'), or make fewer thread "
           "ranks per GPU", threads, queues, env ? "is " : "unset: the "
           "default ", env ? env : "8");
  return 1;
}

int rcc_cuda_kinds(const struct ringcc_comm *comm) {
  char why[RCC_ERRLEN];
  for (int p = 0; p < comm->nranks; p++)
    if (comm->peers[p].gpu.device < 0)
      return RCC_NUM_CONN_KINDS;
  if (device_side_refused(comm, why, sizeof(why))) {
    /* Host collectives still run; device calls say why (no_device). */
    RCC_INFO(comm->rank, "no device collectives on this communicator: %s",
             why);
    return RCC_NUM_CONN_KINDS;
  }
  return RCC_MAX_CONN_KINDS;
}

int rcc_cuda_channels(const struct ringcc_comm *comm) {
  int best = 2; /* 2: staged, or the network */
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
  /* Ranks sharing a GPU run their kernels at once (threads, MPS): every
   * block of all of them must fit, one per SM. */
  int cap = rcc_cuda_channel_limit(comm);
  return best < cap ? best : cap;
}

/* ---- device FIFO tables (connect) ---------------------------------------- */

/* bytes at host into new device memory, on the communicator's own stream:
 * stream-ordered, so that freeing it at destroy (cudaFreeAsync) does not
 * wait for other kernels of the process - peers that are threads of it may
 * still be waiting in theirs after an abort. */
static ringcc_result_t upload(struct ringcc_comm *comm, void **dev,
                              const void *host, size_t bytes,
                              const char *what) {
  cudaStream_t stream = comm->cuda->stream;
  char doing[96];
  cudaError_t e = cudaMallocAsync(dev, bytes, stream);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(*dev, host, bytes, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess)
    return RINGCC_SUCCESS;
  snprintf(doing, sizeof(doing), "copying %s to the GPU", what);
  return cuda_error(comm, doing, e);
}

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
  dev->ops = NULL; /* kernels wake nobody; the engine polls (kernels_started) */
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
  char why[RCC_ERRLEN];
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
  /* Two GPUs of one host whose data goes through host memory: the first
   * thing to know when bandwidth is low. */
  if (rcc_topo_staged_why(&comm->peers[comm->rank], &comm->peers[p], why,
                          sizeof(why)))
    RCC_WARN(comm->rank, "device edge %d -> %d is staged through host "
             "memory (%s): %s", comm->rank, p, rcc_edge_name(comm, p), why);
  return RINGCC_SUCCESS;
}

/* The slots of the device FIFOs that live in GPU memory (CUDA P2P), as
 * the table's first transport with such FIFOs says; 0: none. */
static size_t device_fifo_slot_bytes(const struct ringcc_comm *comm) {
  for (int t = 0; t < rcc_num_transports; t++) {
    const struct rcc_transport *tr = rcc_transports[t];
    if ((tr->flags & RCC_TRANSPORT_DEVICE_FIFOS) && tr->device_slot_bytes)
      return tr->device_slot_bytes(comm);
  }
  return 0;
}

static ringcc_result_t connect_tables(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  int n = comm->nranks;
  cu->nsets = rcc_fifo_sets(comm, RCC_MAX_CONN_KINDS) -
              rcc_fifo_sets(comm, RCC_CONN_DEVICE);
  size_t nconns = 2 * (size_t)cu->nsets * (size_t)n;
  struct rcc_conn *table = calloc(nconns, sizeof(*table));
  ringcc_result_t r = RINGCC_SUCCESS;

  cu->registered = calloc(nconns, sizeof(void *));
  if (table == NULL || cu->registered == NULL) {
    free(table);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  }
  for (int p = 0; p < n && r == RINGCC_SUCCESS; p++)
    if (p != comm->rank)
      r = device_edge(comm, p, table);
  RCC_INFO(comm->rank, "device FIFOs: %d channel(s), CUDA P2P slots of %zu "
           "KiB (RINGCC_DEVICE_CHUNK_BYTES%s); device steps: ring %zu B, all "
           "edges %zu B", comm->kind_channels[RCC_CONN_DEVICE + RCC_CONN_COLL],
           device_fifo_slot_bytes(comm) >> 10,
           comm->set.device_chunk_bytes > 0 ? "" : " unset: by memory",
           comm->dev_ring_chunk_bytes, comm->dev_all_chunk_bytes);
  if (r == RINGCC_SUCCESS)
    r = upload(comm, (void **)&cu->conns_dev, table, nconns * sizeof(*table),
               "the FIFO table");
  free(table);
  return r;
}

static ringcc_result_t connect_status(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  struct rcc_cuda_status *st = NULL;
  size_t ring_bytes = (size_t)comm->nranks * sizeof(int);
  cudaError_t e = cudaStreamCreateWithFlags(&cu->stream,
                                            cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaStreamCreate", e);
  e = cudaHostAlloc((void **)&st, sizeof(*st),
                    cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess)
    return cuda_error(comm, "cudaHostAlloc of the status record", e);
  memset(st, 0, sizeof(*st));
  __atomic_store_n(&cu->status, st, __ATOMIC_RELEASE);
  /* The network engine (another thread) may look already: done first, so
   * that whoever sees started sees both (comm.h). */
  __atomic_store_n(&comm->kernels_done, &st->done, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->kernels_started, &st->started, __ATOMIC_RELEASE);
  if ((e = cudaHostGetDevicePointer((void **)&cu->status_dev, cu->status, 0)) !=
      cudaSuccess)
    return cuda_error(comm, "cudaHostGetDevicePointer", e);
  int *rings = malloc(2 * ring_bytes);
  if (rings == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  memcpy(rings, comm->ring, ring_bytes);
  memcpy(rings + comm->nranks, comm->ring_rev, ring_bytes);
  ringcc_result_t r = upload(comm, (void **)&cu->ring_dev, rings,
                             2 * ring_bytes, "the ring");
  free(rings);
  if (r != RINGCC_SUCCESS)
    return r;
  static const struct rcc_cuda_blocks zero;
  r = upload(comm, (void **)&cu->blocks_dev, &zero, sizeof(zero),
             "the block counts");
  if (r != RINGCC_SUCCESS)
    return r;
  if ((e = cudaEventCreateWithFlags(&cu->last, cudaEventDisableTiming)) !=
      cudaSuccess)
    return cuda_error(comm, "cudaEventCreate", e);
  rcc_gpu_track(cu->device, cu->last); /* frees wait for none (gpu.h) */
  return RINGCC_SUCCESS;
}

/* Every kernel loaded now (kernel.h), and what the device can do with host
 * memory, said once at INFO: the kernels need no host-native atomics
 * (kernel.h), only mapped host memory, which try_device checked. */
static ringcc_result_t connect_kernels(struct ringcc_comm *comm) {
  char err[RCC_ERRLEN];
  int dev = comm->cuda->device, native = 0, pageable = 0;
  if (rcc_cuda_preload(err, sizeof(err)) != 0 ||
      rcc_cuda_zc_preload(err, sizeof(err)) != 0) {
    cudaGetLastError();
    return rcc_comm_error(comm, RINGCC_ERR_CUDA, "init on rank %d (GPU %d): "
                          "loading the collective kernels failed: %s",
                          comm->rank, dev, err);
  }
  if (cudaDeviceGetAttribute(&native, cudaDevAttrHostNativeAtomicSupported,
                             dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess,
                             dev) != cudaSuccess)
    cudaGetLastError();
  RCC_INFO(comm->rank, "GPU %d: kernels preloaded; host-native atomics %s, "
           "pageable memory access %s: kernels keep their atomic counters in "
           "device memory and only load and store host memory (system-scope "
           "fences), which needs neither", dev, native ? "yes" : "no",
           pageable ? "yes" : "no");
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_cuda_connect(struct ringcc_comm *comm) {
  struct rcc_gpu_scope scope;
  if (comm->nkinds != RCC_MAX_CONN_KINDS)
    return RINGCC_SUCCESS; /* some rank has no GPU: host buffers only */
  struct rcc_cuda *cu = calloc(1, sizeof(*cu));
  if (cu == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  cu->device = comm->peers[comm->rank].gpu.device;
  pthread_mutex_init(&cu->lock, NULL);
  __atomic_store_n(&comm->cuda, cu, __ATOMIC_RELEASE);
  ringcc_result_t r = enter(comm, cu->device, &scope);
  if (r != RINGCC_SUCCESS)
    return r;
  rcc_gpu_sweep(); /* frees deferred by communicators gone since */
  r = connect_status(comm);
  if (r == RINGCC_SUCCESS)
    r = connect_kernels(comm);
  if (r == RINGCC_SUCCESS)
    r = connect_tables(comm);
  leave(&scope);
  if (r != RINGCC_SUCCESS)
    return r;
  /* From here failure.c and error.c reach the kernels. */
  __atomic_store_n(&comm->fail_word, &cu->status->failed, __ATOMIC_RELEASE);
  if (rcc_dead_rank(comm, NULL) >= 0)
    rcc_comm_tell_kernels(comm, RINGCC_ERR_PEER_FAILED);
  int e = rcc_watchdog_start(&cu->watch, comm, &cu->status->started,
                             &cu->status->done, cu->engine_conn);
  if (e != 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "init on rank %d: cannot start the CUDA watchdog "
                          "thread: %s", comm->rank, strerror(e));
  return RINGCC_SUCCESS;
}

/* ---- teardown, abort, errors -------------------------------------------- */

/* Waits for this communicator's kernels; past the deadline, aborts them
 * (they leave their next wait) rather than freeing memory under them. A
 * dead peer ends them sooner: the watchdog runs until they are done. */
static void wait_kernels(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  int64_t ms = comm->set.timeout_ms > 0 ? comm->set.timeout_ms : 0;
  int64_t deadline = rcc_deadline_after_ms(ms > 0 ? ms + DESTROY_GRACE_MS : 0);
  int aborted = 0;
  if (!__atomic_load_n(&cu->have_last, __ATOMIC_ACQUIRE))
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
  struct rcc_gpu_scope scope;
  char why[256];
  /* A forked child cannot use CUDA: its copy frees host memory only. */
  if (cu == NULL || comm->forked ||
      rcc_gpu_enter(cu->device, &scope, why, sizeof(why)) != 0)
    return;
  if (cu->last)
    wait_kernels(comm);
  rcc_watchdog_stop(&cu->watch);
  for (int i = 0; i < cu->nregistered; i++)
    cudaHostUnregister(cu->registered[i]);
  cu->nregistered = 0;
  if (cu->conns_dev)
    cudaFreeAsync(cu->conns_dev, cu->stream);
  if (cu->ring_dev)
    cudaFreeAsync(cu->ring_dev, cu->stream);
  if (cu->blocks_dev)
    cudaFreeAsync(cu->blocks_dev, cu->stream);
  if (cu->stream) {
    cudaStreamSynchronize(cu->stream);
    cudaStreamDestroy(cu->stream);
    cu->stream = NULL;
  }
  if (cu->last) {
    rcc_gpu_untrack(cu->last);
    cudaEventDestroy(cu->last);
  }
  cu->conns_dev = NULL;
  cu->ring_dev = NULL;
  cu->blocks_dev = NULL;
  cu->last = NULL;
  __atomic_store_n(&cu->have_last, 0, __ATOMIC_RELEASE);
  cudaGetLastError();
  leave(&scope);
  rcc_gpu_sweep(); /* frees that waited for this communicator's kernels */
}

void rcc_cuda_free(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = comm->cuda;
  if (cu == NULL)
    return;
  /* The network engine (stopped by now) and failure.c no longer look. */
  __atomic_store_n(&comm->fail_word, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->kernels_started, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->kernels_done, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->cuda, NULL, __ATOMIC_RELEASE);
  if (cu->status && !comm->forked)
    cudaFreeHost(cu->status);
  if (!comm->forked)
    cudaGetLastError();
  pthread_mutex_destroy(&cu->lock);
  free(cu->registered);
  free(cu);
}

void rcc_cuda_abort(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = __atomic_load_n(&comm->cuda, __ATOMIC_ACQUIRE);
  if (cu && cu->status)
    __atomic_store_n(&cu->status->abort, 1, __ATOMIC_RELEASE);
}

RINGCC_API ringcc_result_t ringcc_cuda_current_device(int *device) {
  if (device == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_cuda_current_device: argument 'device' "
                            "is NULL");
  *device = -1;
  if (!rcc_gpu_thread_has_context())
    return RINGCC_SUCCESS; /* looked at without creating one */
  cudaError_t e = cudaGetDevice(device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *device = -1;
    return rcc_thread_error(RINGCC_ERR_CUDA, "ringcc_cuda_current_device: "
                            "cudaGetDevice failed: %s (%s)",
                            cudaGetErrorString(e), cudaGetErrorName(e));
  }
  return RINGCC_SUCCESS;
}

void rcc_cuda_quiesce(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = __atomic_load_n(&comm->cuda, __ATOMIC_ACQUIRE);
  struct rcc_gpu_scope scope;
  char why[256];
  rcc_cuda_abort(comm);
  if (cu == NULL || cu->last == NULL ||
      rcc_gpu_enter(cu->device, &scope, why, sizeof(why)) != 0)
    return;
  wait_kernels(comm);
  leave(&scope);
}

/* The first failure of the device side, as a code and one sentence, or
 * RINGCC_SUCCESS: a kernel's report, a failure told to the kernels after
 * they all ended, or a CUDA error of the last kernel. Under cu->lock. */
static ringcc_result_t find_failure(struct ringcc_comm *comm,
                                    struct rcc_cuda *cu, char *msg,
                                    size_t len) {
  char dead[256] = "";
  const struct rcc_cuda_status *st = cu->status;
  uint32_t code = __atomic_load_n(&st->code, __ATOMIC_ACQUIRE);
  uint32_t failed = __atomic_load_n(&st->failed, __ATOMIC_ACQUIRE);
  int async = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
  rcc_dead_describe(comm, dead, sizeof(dead));
  if (code != 0) {
    rcc_cuda_status_message(st, comm->rank, cu->device, dead,
                            async > 0 ? comm->async_message : NULL, msg, len);
    return (ringcc_result_t)code;
  }
  if (failed != 0 && !rcc_watchdog_pending(&cu->watch)) {
    snprintf(msg, len, "rank %d (GPU %d): %.300s; no device collective "
             "was waiting", comm->rank, cu->device,
             failed == RINGCC_ERR_PEER_FAILED && dead[0] ? dead
             : async > 0 ? comm->async_message : "the communicator failed");
    return (ringcc_result_t)failed;
  }
  if (__atomic_load_n(&cu->have_last, __ATOMIC_ACQUIRE)) {
    struct rcc_gpu_scope scope;
    char why[256];
    if (rcc_gpu_enter(cu->device, &scope, why, sizeof(why)) != 0)
      return RINGCC_SUCCESS;
    /* This thread may poll while another captures a CUDA graph in global
     * mode: relaxed, the query cannot invalidate that capture. */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaEventQuery(cu->last);
    cudaThreadExchangeStreamCaptureMode(&mode);
    leave(&scope);
    if (e != cudaSuccess && e != cudaErrorNotReady) {
      snprintf(msg, len, "a device collective on rank %d (GPU %d) failed: %s "
               "(%s)", comm->rank, cu->device, cudaGetErrorString(e),
               cudaGetErrorName(e));
      return RINGCC_ERR_CUDA;
    }
  }
  return RINGCC_SUCCESS;
}

void rcc_cuda_poll(struct ringcc_comm *comm) {
  struct rcc_cuda *cu = __atomic_load_n(&comm->cuda, __ATOMIC_ACQUIRE);
  char msg[RCC_ERRLEN];
  if (cu == NULL || cu->status == NULL ||
      rcc_comm_fatal(comm) != RINGCC_SUCCESS)
    return;
  pthread_mutex_lock(&cu->lock);
  ringcc_result_t code = cu->failure;
  if (code == RINGCC_SUCCESS) {
    code = find_failure(comm, cu, msg, sizeof(msg));
    if (code != RINGCC_SUCCESS) {
      cu->failure = code;
      RCC_WARN(comm->rank, "%s", msg);
      /* The message first, then the code (release): whoever sees the code
       * reads the message. */
      if (rcc_comm_fatal(comm) == RINGCC_SUCCESS)
        rcc_comm_set_last_error(comm, msg);
      rcc_comm_set_fatal(comm, code);
    }
  }
  pthread_mutex_unlock(&cu->lock);
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
  char why[RCC_ERRLEN];
  int without = -1;
  if (me->gpu.device >= 0 && comm->nkinds != RCC_MAX_CONN_KINDS &&
      device_side_refused(comm, why, sizeof(why)))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE, "%s on rank %d: %s, "
                          "but device collectives are refused on this "
                          "communicator: %s", fn, comm->rank, what, why);
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
  /* The legacy default stream orders all work of the device in this process:
   * a rank's kernel would wait behind its peer thread's, which waits for
   * it. Refused on every rank alike (from the records): a rank that ran
   * would wait for the refused ones. */
  if (stream == NULL && rcc_cuda_threads_per_gpu(comm) > 1)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "%s on rank %d: argument 'stream' is NULL (the "
                          "legacy default stream), but ranks of this "
                          "communicator are threads of one process on one "
                          "GPU: the default stream would run one rank's "
                          "kernel after the other's, which waits for it. "
                          "Give each rank a stream of its own "
                          "(cudaStreamCreateWithFlags with "
                          "cudaStreamNonBlocking)", fn, comm->rank);
  *dev_buffers = 1;
  return RINGCC_SUCCESS;
}

/* ---- enqueueing ----------------------------------------------------------- */

/* A graph's host node, on every replay just before its kernel. */
static void CUDART_CB host_kick(void *arg) {
  rcc_watchdog_kick(&((struct rcc_cuda *)arg)->watch);
}

/* Whether stream is being captured into a CUDA graph: 1, 0, or an error
 * (a capture that was invalidated earlier) in *r. */
static int capturing(struct ringcc_comm *comm, void *stream,
                     ringcc_result_t *r) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &st);
  *r = RINGCC_SUCCESS;
  if (e != cudaSuccess)
    *r = cuda_error(comm, "cudaStreamIsCapturing", e);
  else if (st == cudaStreamCaptureStatusInvalidated)
    *r = rcc_comm_error(comm, RINGCC_ERR_CUDA,
                        "rank %d (GPU %d): the stream's CUDA graph capture "
                        "was invalidated before this call (by an earlier "
                        "error); end it (cudaStreamEndCapture) and capture "
                        "again", comm->rank, comm->cuda->device);
  return st == cudaStreamCaptureStatusActive;
}

/* One step of the recipe. */
static ringcc_result_t enqueue(struct ringcc_comm *comm, int step,
                               struct rcc_cuda_args *a, cudaStream_t stream,
                               const void *src, size_t stage_bytes,
                               void **copy) {
  struct rcc_cuda *cu = comm->cuda;
  char err[RCC_ERRLEN];
  cudaError_t e = cudaSuccess;
  switch (step) {
  case RCC_CUDA_WAIT_LAST: /* captured: a node that waits at each replay */
    if ((e = cudaStreamWaitEvent(stream, cu->last,
                                 a->captured ? cudaEventWaitExternal : 0)) !=
        cudaSuccess)
      return cuda_error(comm, "cudaStreamWaitEvent", e);
    break;
  case RCC_CUDA_STAGE_ALLOC:
    if ((e = cudaMallocAsync(copy, stage_bytes, stream)) != cudaSuccess)
      return cuda_error(comm, "cudaMallocAsync of the staging copy of an "
                              "in-place input", e);
    a->src = *copy;
    break;
  case RCC_CUDA_STAGE_COPY:
    if ((e = cudaMemcpyAsync(*copy, src, stage_bytes, cudaMemcpyDeviceToDevice,
                             stream)) != cudaSuccess)
      return cuda_error(comm, "cudaMemcpyAsync of an in-place input", e);
    break;
  case RCC_CUDA_HOST_KICK:
    if ((e = cudaLaunchHostFunc(stream, host_kick, cu)) != cudaSuccess)
      return cuda_error(comm, "cudaLaunchHostFunc (captured)", e);
    break;
  case RCC_CUDA_KERNEL:
    if ((a->zc != NULL ? rcc_cuda_zc_launch(a->zc, (unsigned)a->plan.nchannels,
                                           stream, err, sizeof(err))
                       : rcc_cuda_launch(a, stream, err, sizeof(err))) != 0) {
      cudaGetLastError();
      return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                            "%s (seq %llu) on rank %d (GPU %d): launching the "
                            "kernel failed: %s", rcc_coll_name(a->plan.coll),
                            (unsigned long long)a->seq, comm->rank,
                            cu->device, err);
    }
    if (!a->captured) /* peers, and the engine when it starts */
      rcc_watchdog_kick(&cu->watch);
    break;
  case RCC_CUDA_RECORD_LAST: /* captured: a node that records at replay */
    if ((e = cudaEventRecordWithFlags(cu->last, stream,
                                      a->captured ? cudaEventRecordExternal
                                                  : 0)) != cudaSuccess)
      return cuda_error(comm, "cudaEventRecord", e);
    __atomic_store_n(&cu->have_last, 1, __ATOMIC_RELEASE);
    break;
  case RCC_CUDA_STAGE_FREE:
    if ((e = cudaFreeAsync(*copy, stream)) != cudaSuccess)
      return cuda_error(comm, "cudaFreeAsync of the staging copy", e);
    break;
  }
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_exec_cuda(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op,
                              void *stream, size_t stage_bytes) {
  struct rcc_cuda *cu = comm->cuda;
  struct rcc_gpu_scope scope;
  int n = comm->nranks, steps[RCC_CUDA_MAX_STEPS];
  void *copy = NULL;
  if (plan->counts != NULL) /* the kernel's plan holds no host arrays */
    return rcc_comm_error(comm, RINGCC_ERR_UNSUPPORTED,
                          "%s on rank %d: uneven blocks (a plan with counts) "
                          "run on host buffers only",
                          rcc_coll_name(plan->coll), comm->rank);
  struct rcc_cuda_args a = {
      .plan = *plan,
      .src = src,
      .dst = dst,
      .send_conns = cu->conns_dev,
      .recv_conns = cu->conns_dev + (size_t)cu->nsets * n,
      .coll_channels = comm->kind_channels[RCC_CONN_DEVICE + RCC_CONN_COLL],
      .status = cu->status_dev,
      .blocks = cu->blocks_dev,
      .timeout_ns = comm->set.timeout_ms > 0
                        ? (uint64_t)comm->set.timeout_ms * 1000000u
                        : 0,
      .seq = comm->seq,
      .dt = dt,
      .op = op,
  };
  a.plan.ring = cu->ring_dev;
  a.plan.ring_rev = cu->ring_dev + n;
  if (a.plan.nchannels < 1)
    a.plan.nchannels = 1;
  ringcc_result_t r = enter(comm, cu->device, &scope);
  if (r != RINGCC_SUCCESS)
    return r;
  int captured = capturing(comm, stream, &r);
  a.captured = (uint32_t)captured;
  int nsteps = rcc_cuda_recipe(__atomic_load_n(&cu->have_last,
                                               __ATOMIC_ACQUIRE),
                               captured, stage_bytes > 0, steps);
  for (int i = 0; i < nsteps && r == RINGCC_SUCCESS; i++)
    r = enqueue(comm, steps[i], &a, (cudaStream_t)stream, src, stage_bytes,
                &copy);
  if (r != RINGCC_SUCCESS && copy != NULL) /* not freed after a kernel */
    cudaFreeAsync(copy, (cudaStream_t)stream);
  cudaGetLastError();
  leave(&scope);
  return r;
}

ringcc_result_t rcc_exec_cuda_zc(struct ringcc_comm *comm,
                                 struct rcc_zc_dev_args *z, int blocks,
                                 void *stream) {
  struct rcc_cuda *cu = comm->cuda;
  struct rcc_gpu_scope scope;
  int steps[RCC_CUDA_MAX_STEPS];
  z->status = cu->status_dev;
  z->blocks = cu->blocks_dev;
  z->timeout_ns = comm->set.timeout_ms > 0
                      ? (uint64_t)comm->set.timeout_ms * 1000000u
                      : 0;
  z->seq = comm->seq;
  z->nranks = comm->nranks;
  struct rcc_cuda_args a = {
      .plan = {.coll = z->coll, .nranks = comm->nranks, .rank = comm->rank,
               .nchannels = blocks > 1 ? blocks : 1, .nsteps = 3},
      .status = cu->status_dev,
      .blocks = cu->blocks_dev,
      .timeout_ns = z->timeout_ns,
      .seq = comm->seq,
      .dt = z->dt,
      .op = z->op,
      .zc = z,
  };
  ringcc_result_t r = enter(comm, cu->device, &scope);
  if (r != RINGCC_SUCCESS)
    return r;
  int captured = capturing(comm, stream, &r);
  a.captured = z->captured = (uint32_t)captured;
  int nsteps = rcc_cuda_recipe(__atomic_load_n(&cu->have_last,
                                               __ATOMIC_ACQUIRE),
                               captured, 0, steps);
  for (int i = 0; i < nsteps && r == RINGCC_SUCCESS; i++)
    r = enqueue(comm, steps[i], &a, (cudaStream_t)stream, NULL, 0, NULL);
  cudaGetLastError();
  leave(&scope);
  return r;
}

#else /* !RINGCC_HAVE_CUDA --------------------------------------------------- */

static const char *cuda_error_text(int e) {
  (void)e;
  return "no CUDA support";
}

ringcc_result_t rcc_cuda_init(struct ringcc_comm *comm,
                              struct rcc_gpu_info *me) {
  (void)comm;
  me->device = -1;
  me->none_why = RCC_GPU_NONE_NO_CUDA;
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
void rcc_cuda_quiesce(struct ringcc_comm *comm) { (void)comm; }

RINGCC_API ringcc_result_t ringcc_cuda_current_device(int *device) {
  if (device == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_cuda_current_device: argument 'device' "
                            "is NULL");
  *device = -1; /* a build without CUDA uses no device */
  return RINGCC_SUCCESS;
}
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

ringcc_result_t rcc_exec_cuda(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op,
                              void *stream, size_t stage_bytes) {
  (void)plan, (void)src, (void)dst, (void)dt, (void)op, (void)stream;
  (void)stage_bytes;
  return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                        "rcc_exec_cuda without CUDA support");
}

ringcc_result_t rcc_exec_cuda_zc(struct ringcc_comm *comm,
                                 struct rcc_zc_dev_args *z, int blocks,
                                 void *stream) {
  (void)z, (void)blocks, (void)stream;
  return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                        "rcc_exec_cuda_zc without CUDA support");
}

#endif /* RINGCC_HAVE_CUDA */
