/*
 * gpu.c - the process's GPUs: contexts entered and left as found, the driver
 * against the runtime, NVML once per process (gpu.h).
 *
 * The driver's context functions come from libcuda.so.1 by dlopen (the
 * library links the CUDA runtime statically and nothing else of CUDA), and
 * so do NVML's from libnvidia-ml.so.1; each library is opened once per
 * process (pthread_once) and stays open. Device indices are the CUDA
 * runtime's, which the driver shares (both honour CUDA_VISIBLE_DEVICES).
 */
#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "topo.h"

/* ---- what needs no GPU: sysfs, /proc, versions ----------------------------- */

int rcc_gpu_present(void) {
  if (access("/dev/nvidia0", F_OK) == 0)
    return 1;
  DIR *d = opendir("/proc/driver/nvidia/gpus");
  if (d == NULL)
    return 0;
  int found = 0;
  for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
    found = e->d_name[0] != '.';
  closedir(d);
  return found;
}

int rcc_gpu_pci_numa(const char *bus) {
  char path[128], lower[32];
  size_t i;
  for (i = 0; bus[i] && i < sizeof(lower) - 1; i++)
    lower[i] = (char)tolower((unsigned char)bus[i]);
  lower[i] = '\0';
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", lower);
  FILE *f = fopen(path, "r");
  int node = -1;
  if (f == NULL)
    return -1;
  if (fscanf(f, "%d", &node) != 1)
    node = -1;
  fclose(f);
  return node;
}

int rcc_gpu_min_driver_branch(int runtime_version) {
  int major = runtime_version / 1000;
  return major >= 13 ? 580 : major == 12 ? 525 : major == 11 ? 450 : 0;
}

void rcc_gpu_driver_release(char *buf, size_t len) {
  char line[512];
  buf[0] = '\0';
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (f == NULL)
    return;
  if (fgets(line, sizeof(line), f) != NULL) {
    /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ...":
     * the first word of digits and dots with a dot in it. */
    for (char *w = strtok(line, " \t\n"); w; w = strtok(NULL, " \t\n")) {
      size_t n = strspn(w, "0123456789.");
      if (n == strlen(w) && n > 2 && strchr(w, '.') && isdigit((unsigned char)w[0])) {
        snprintf(buf, len, "%s", w);
        break;
      }
    }
  }
  fclose(f);
}

void rcc_gpu_driver_message(int runtime_version, int driver_version,
                            const char *driver_release, char *buf,
                            size_t len) {
  char drv[96];
  int branch = rcc_gpu_min_driver_branch(runtime_version);
  if (driver_version > 0)
    snprintf(drv, sizeof(drv), "the driver present%s%s%s supports CUDA up "
             "to %d.%d", driver_release && *driver_release ? " (" : "",
             driver_release ? driver_release : "",
             driver_release && *driver_release ? ")" : "",
             driver_version / 1000, driver_version % 1000 / 10);
  else
    snprintf(drv, sizeof(drv), "the driver present%s%s%s cannot run it",
             driver_release && *driver_release ? " (" : "",
             driver_release ? driver_release : "",
             driver_release && *driver_release ? ")" : "");
  char needs[48] = "a newer driver";
  if (branch > 0)
    snprintf(needs, sizeof(needs), "driver R%d or newer", branch);
  snprintf(buf, len, "a GPU is present but its driver is too old for this "
           "build's CUDA %d.%d runtime, which needs %s; %s. Update the "
           "driver, or rebuild libringcc against an older toolkit (make "
           "CUDA_HOME=/usr/local/cuda-12.x: R525 or newer)",
           runtime_version / 1000, runtime_version % 1000 / 10, needs, drv);
}

/* ---- tracked kernels and deferred frees (both builds) ----------------------- */

#define MAX_TRACKED 256

struct deferred {
  int device;
  void (*fn)(void *);
  void *arg;
  struct deferred *next;
};

static struct {
  pthread_mutex_t lock;
  int n;
  int device[MAX_TRACKED];
  void *event[MAX_TRACKED];
  int (*pending)(void *event); /* NULL: event_pending */
  struct deferred *frees;
} tracked = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int event_pending(void *event);

void rcc_gpu_set_event_query(int (*pending)(void *event)) {
  pthread_mutex_lock(&tracked.lock);
  tracked.pending = pending;
  pthread_mutex_unlock(&tracked.lock);
}

void rcc_gpu_track(int device, void *event) {
  pthread_mutex_lock(&tracked.lock);
  /* Past MAX_TRACKED communicators with kernels at once an event goes
   * untracked: frees may then wait for its kernels (as cudaFree would). */
  if (tracked.n < MAX_TRACKED) {
    tracked.device[tracked.n] = device;
    tracked.event[tracked.n++] = event;
  }
  pthread_mutex_unlock(&tracked.lock);
}

void rcc_gpu_untrack(void *event) {
  pthread_mutex_lock(&tracked.lock);
  for (int i = 0; i < tracked.n; i++)
    if (tracked.event[i] == event) {
      tracked.n--;
      tracked.device[i] = tracked.device[tracked.n];
      tracked.event[i] = tracked.event[tracked.n];
      break;
    }
  pthread_mutex_unlock(&tracked.lock);
}

/* Under tracked.lock. */
static int quiet_locked(int device) {
  int (*pending)(void *) = tracked.pending ? tracked.pending : event_pending;
  for (int i = 0; i < tracked.n; i++)
    if ((device < 0 || tracked.device[i] == device) &&
        pending(tracked.event[i]))
      return 0;
  return 1;
}

int rcc_gpu_quiet(int device) {
  pthread_mutex_lock(&tracked.lock);
  int quiet = quiet_locked(device);
  pthread_mutex_unlock(&tracked.lock);
  return quiet;
}

static void run_on(int device, void (*fn)(void *), void *arg) {
  struct rcc_gpu_scope scope;
  char why[160];
  if (device < 0) {
    fn(arg);
    return;
  }
  if (rcc_gpu_enter(device, &scope, why, sizeof(why)) != 0)
    return; /* no context to free it in: the process's end frees it */
  fn(arg);
  rcc_gpu_leave(&scope);
}

void rcc_gpu_free_when_quiet(int device, void (*fn)(void *arg), void *arg) {
  struct deferred *d = NULL;
  pthread_mutex_lock(&tracked.lock);
  int quiet = quiet_locked(device);
  if (!quiet && (d = malloc(sizeof(*d))) != NULL) {
    *d = (struct deferred){device, fn, arg, tracked.frees};
    tracked.frees = d;
  }
  pthread_mutex_unlock(&tracked.lock);
  if (quiet)
    run_on(device, fn, arg);
  /* Out of memory for the record: kept, never freed (not a wait). */
}

int rcc_gpu_sweep(void) {
  struct deferred *ready = NULL;
  int left = 0;
  pthread_mutex_lock(&tracked.lock);
  for (struct deferred **at = &tracked.frees; *at;) {
    struct deferred *d = *at;
    if (quiet_locked(d->device)) {
      *at = d->next;
      d->next = ready;
      ready = d;
    } else {
      at = &d->next;
      left++;
    }
  }
  pthread_mutex_unlock(&tracked.lock);
  while (ready) { /* outside the lock: fn may call into CUDA */
    struct deferred *d = ready;
    ready = d->next;
    run_on(d->device, d->fn, d->arg);
    free(d);
  }
  return left;
}

#if RINGCC_HAVE_CUDA
#include <dlfcn.h>
#include <cuda_runtime_api.h>

static int event_pending(void *event) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  int pending = cudaEventQuery((cudaEvent_t)event) == cudaErrorNotReady;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaGetLastError();
  return pending;
}

int rcc_gpu_driver_loaded(void) {
  void *loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (loaded != NULL)
    dlclose(loaded);
  return loaded != NULL;
}

/* ---- the driver's context stack ----------------------------------------------- */

#define MAX_DEVICES 64

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_ctx_get_fn)(void **);
typedef int (*cu_ctx_push_fn)(void *);
typedef int (*cu_ctx_pop_fn)(void **);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_retain_fn)(void **, int);
typedef int (*cu_error_fn)(int, const char **);

static struct {
  void *lib;
  cu_init_fn init;
  cu_ctx_get_fn ctx_get;
  cu_ctx_push_fn push;
  cu_ctx_pop_fn pop;
  cu_device_get_fn device_get;
  cu_retain_fn retain;
  cu_error_fn error_string;
  pthread_mutex_t lock;
  void *primary[MAX_DEVICES]; /* retained once, kept for the process */
} drv = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return;
  drv.init = (cu_init_fn)dlsym(lib, "cuInit");
  drv.ctx_get = (cu_ctx_get_fn)dlsym(lib, "cuCtxGetCurrent");
  drv.push = (cu_ctx_push_fn)dlsym(lib, "cuCtxPushCurrent_v2");
  drv.pop = (cu_ctx_pop_fn)dlsym(lib, "cuCtxPopCurrent_v2");
  drv.device_get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
  drv.retain = (cu_retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
  drv.error_string = (cu_error_fn)dlsym(lib, "cuGetErrorString");
  if (!drv.init || !drv.ctx_get || !drv.push || !drv.pop || !drv.device_get ||
      !drv.retain) {
    dlclose(lib);
    return;
  }
  drv.lib = lib;
}

int rcc_gpu_thread_has_context(void) {
  /* A process that never started the CUDA driver has no context anywhere:
   * look without loading it (RTLD_NOLOAD). */
  void *loaded = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (loaded == NULL)
    return 0;
  dlclose(loaded);
  pthread_once(&drv_once, drv_load);
  void *ctx = NULL;
  /* Before cuInit this says CUDA_ERROR_NOT_INITIALIZED: no context. */
  return drv.lib != NULL && drv.ctx_get(&ctx) == 0 && ctx != NULL;
}

static void drv_why(const char *what, int rc, char *why, size_t len) {
  const char *s = NULL;
  if (drv.error_string == NULL || drv.error_string(rc, &s) != 0 || s == NULL)
    s = "unknown error";
  snprintf(why, len, "%s: %s (CUresult %d)", what, s, rc);
}

int rcc_gpu_enter(int device, struct rcc_gpu_scope *scope, char *why,
                  size_t whylen) {
  void *cur = NULL, *ctx;
  int rc, cudev;
  scope->pushed = 0;
  pthread_once(&drv_once, drv_load);
  if (drv.lib == NULL) {
    snprintf(why, whylen, "the CUDA driver (libcuda.so.1) cannot be loaded");
    return -1;
  }
  if (device < 0 || device >= MAX_DEVICES) {
    snprintf(why, whylen, "device %d is out of range", device);
    return -1;
  }
  pthread_mutex_lock(&drv.lock);
  ctx = drv.primary[device];
  rc = 0;
  if (ctx == NULL && (rc = drv.init(0)) != 0)
    drv_why("cuInit", rc, why, whylen);
  else if (ctx == NULL && (rc = drv.device_get(&cudev, device)) != 0)
    drv_why("cuDeviceGet", rc, why, whylen);
  else if (ctx == NULL && (rc = drv.retain(&ctx, cudev)) != 0)
    drv_why("cuDevicePrimaryCtxRetain", rc, why, whylen);
  else
    drv.primary[device] = ctx;
  pthread_mutex_unlock(&drv.lock);
  if (rc != 0)
    return -1;
  if (drv.ctx_get(&cur) == 0 && cur == ctx)
    return 0; /* already current: nothing to undo */
  if ((rc = drv.push(ctx)) != 0) {
    drv_why("cuCtxPushCurrent", rc, why, whylen);
    return -1;
  }
  scope->pushed = 1;
  return 0;
}

void rcc_gpu_leave(struct rcc_gpu_scope *scope) {
  void *popped;
  if (scope->pushed && drv.lib != NULL)
    drv.pop(&popped);
  scope->pushed = 0;
}

/* ---- NVML -------------------------------------------------------------------- */

#define NVML_P2P_CAPS_INDEX_READ 0
#define NVML_P2P_CAPS_INDEX_WRITE 1
#define NVML_P2P_CAPS_INDEX_NVLINK 2

typedef struct { /* nvmlPciInfo_t (v3) */
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvml_pci_info;

typedef int (*nvml_void_fn)(void);
typedef int (*nvml_count_fn)(unsigned *);
typedef int (*nvml_by_index_fn)(unsigned, void **);
typedef int (*nvml_by_bus_fn)(const char *, void **);
typedef int (*nvml_pci_fn)(void *, nvml_pci_info *);
typedef int (*nvml_p2p_fn)(void *, void *, int, int *);
typedef int (*nvml_ancestor_fn)(void *, void *, int *);
typedef int (*nvml_name_fn)(void *, char *, unsigned);

static struct {
  void *lib;
  nvml_void_fn init, shutdown;
  nvml_count_fn count;
  nvml_by_index_fn by_index;
  nvml_by_bus_fn by_bus;
  nvml_pci_fn pci;
  nvml_p2p_fn p2p;
  nvml_ancestor_fn ancestor; /* optional */
  nvml_name_fn name;         /* optional */
} nvml;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_load(void) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return;
  nvml.init = (nvml_void_fn)dlsym(lib, "nvmlInit_v2");
  nvml.shutdown = (nvml_void_fn)dlsym(lib, "nvmlShutdown");
  nvml.count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
  nvml.by_index = (nvml_by_index_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  nvml.by_bus = (nvml_by_bus_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
  nvml.pci = (nvml_pci_fn)dlsym(lib, "nvmlDeviceGetPciInfo_v3");
  nvml.p2p = (nvml_p2p_fn)dlsym(lib, "nvmlDeviceGetP2PStatus");
  nvml.ancestor = (nvml_ancestor_fn)dlsym(lib,
                                          "nvmlDeviceGetTopologyCommonAncestor");
  nvml.name = (nvml_name_fn)dlsym(lib, "nvmlDeviceGetName");
  if (!nvml.init || !nvml.shutdown || !nvml.count || !nvml.by_index ||
      !nvml.by_bus || !nvml.pci || !nvml.p2p) {
    dlclose(lib);
    return;
  }
  nvml.lib = lib;
}

/* The first P2P capability (read, write) that fails one way or the other. */
static int p2p_status(void *a, void *b) {
  static const int caps[] = {NVML_P2P_CAPS_INDEX_READ,
                             NVML_P2P_CAPS_INDEX_WRITE};
  for (int i = 0; i < 2; i++)
    for (int dir = 0; dir < 2; dir++) {
      int st = RCC_P2P_UNKNOWN;
      if (nvml.p2p(dir ? b : a, dir ? a : b, caps[i], &st) != 0)
        return RCC_P2P_UNKNOWN;
      if (st != RCC_P2P_OK)
        return st >= 0 && st < RCC_NUM_P2P_STATUS ? st : RCC_P2P_UNKNOWN;
    }
  return RCC_P2P_OK;
}

int rcc_gpu_nvml_probe(const char *my_bus, struct rcc_gpu_info *me) {
  void *mine = NULL;
  unsigned count = 0;
  pthread_once(&nvml_once, nvml_load);
  if (nvml.lib == NULL || nvml.init() != 0)
    return 0;
  int ok = nvml.by_bus(my_bus, &mine) == 0 && nvml.count(&count) == 0;
  if (ok && nvml.name)
    nvml.name(mine, me->name, sizeof(me->name));
  me->name[sizeof(me->name) - 1] = '\0';
  int n = 0;
  for (unsigned i = 0; ok && i < count && n < RCC_TOPO_MAX_PEER_GPUS; i++) {
    void *other = NULL;
    nvml_pci_info pci;
    if (nvml.by_index(i, &other) != 0 || nvml.pci(other, &pci) != 0)
      continue;
    pci.busId[sizeof(pci.busId) - 1] = '\0';
    uint64_t bus = rcc_topo_bus_id(pci.busId);
    if (bus == 0 || bus == me->bus_id)
      continue;
    int status = p2p_status(mine, other), nvlink = RCC_P2P_UNKNOWN, level = -1;
    nvml.p2p(mine, other, NVML_P2P_CAPS_INDEX_NVLINK, &nvlink);
    if (nvml.ancestor == NULL || nvml.ancestor(mine, other, &level) != 0)
      level = -1;
    me->peer_bus[n] = bus;
    me->peer_p2p[n] = status == RCC_P2P_OK;
    me->peer_nvlink[n] = status == RCC_P2P_OK && nvlink == RCC_P2P_OK;
    me->peer_status[n] = (uint8_t)status;
    me->peer_level[n] = level >= 0 && level <= 50 ? (uint8_t)(level / 10)
                                                  : RCC_TOPO_LEVEL_UNKNOWN;
    n++;
  }
  nvml.shutdown(); /* each probe pairs its init: NVML counts them */
  if (!ok)
    return 0;
  me->npeer = n;
  me->probe = RCC_PROBE_NVML;
  return 1;
}

#else /* !RINGCC_HAVE_CUDA ------------------------------------------------------- */

static int event_pending(void *event) {
  (void)event;
  return 0;
}

int rcc_gpu_driver_loaded(void) { return 0; }

int rcc_gpu_thread_has_context(void) { return 0; }

int rcc_gpu_enter(int device, struct rcc_gpu_scope *scope, char *why,
                  size_t whylen) {
  (void)device;
  scope->pushed = 0;
  snprintf(why, whylen, "this build has no CUDA support");
  return -1;
}

void rcc_gpu_leave(struct rcc_gpu_scope *scope) { scope->pushed = 0; }

int rcc_gpu_nvml_probe(const char *my_bus, struct rcc_gpu_info *me) {
  (void)my_bus, (void)me;
  return 0;
}

#endif /* RINGCC_HAVE_CUDA */
