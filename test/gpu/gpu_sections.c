/*
 * gpu_sections.c - the sections of gpu_suite that run only when asked for
 * (--streams, --graph, --kill N, --contexts; gpu_suite.c describes them),
 * linked into the same program: test/gpu/gpu_suite.c has the options, the
 * datatypes, one rank and the matrix, and the helpers both use, declared in
 * test/gpu/gpu_suite.h.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcc.h"

#include "gpu_suite.h"

/* ---- several streams, no synchronisation between calls ---------------------------------- */

#define STREAMS 3
#define STREAM_CALLS 12
#define STREAM_COUNT 4096
#define A2A_BLOCK 1024

/* STREAM_CALLS allreduces on STREAM_COUNT floats each, round-robin on three
 * streams, then an in-place allreduce on one stream and an in-place
 * alltoall of its result on another (the alltoall's staging copy must wait
 * for the allreduce): one synchronisation at the end, every element
 * checked. The communicator orders its kernels whatever the streams. */
bool streams_case(struct rank *k) {
  cudaStream_t s[STREAMS];
  int n = k->nranks, me = k->rank;
  size_t calls = STREAM_CALLS * (size_t)STREAM_COUNT, a2a = (size_t)n * A2A_BLOCK;
  float *h = malloc((calls + a2a) * sizeof(float));
  float *dsend = (float *)k->dsend, *drecv = (float *)k->drecv;
  bool ok = h != NULL && (calls + a2a) * sizeof(float) <= k->cap;
  for (int i = 0; i < STREAMS && ok; i++)
    ok = cuda_ok(k, cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking),
                 "cudaStreamCreate");
  if (!ok)
    return false;
  for (size_t i = 0; i < STREAM_CALLS; i++)
    for (size_t g = 0; g < STREAM_COUNT; g++)
      h[i * STREAM_COUNT + g] = (float)((me + 1) * (int)(i + 1) + (int)(g % 7));
  for (size_t g = 0; g < a2a; g++)
    h[calls + g] = (float)(me + 1 + (int)(g % 5));
  ok = cuda_ok(k, cudaMemcpy(dsend, h, calls * sizeof(float),
                             cudaMemcpyHostToDevice), "cudaMemcpy") &&
       cuda_ok(k, cudaMemcpy(drecv + calls, h + calls, a2a * sizeof(float),
                             cudaMemcpyHostToDevice), "cudaMemcpy");
  sync_ranks(k);
  ringcc_result_t r = RINGCC_SUCCESS;
  for (size_t i = 0; i < STREAM_CALLS && ok && r == RINGCC_SUCCESS; i++)
    r = ringcc_allreduce(dsend + i * STREAM_COUNT, drecv + i * STREAM_COUNT,
                         STREAM_COUNT, RINGCC_FLOAT32, RINGCC_SUM, k->comm,
                         s[i % STREAMS]);
  if (ok && r == RINGCC_SUCCESS)
    r = ringcc_allreduce(RINGCC_IN_PLACE, drecv + calls, a2a, RINGCC_FLOAT32,
                         RINGCC_SUM, k->comm, s[0]);
  if (ok && r == RINGCC_SUCCESS)
    r = ringcc_alltoall(RINGCC_IN_PLACE, drecv + calls, A2A_BLOCK,
                        RINGCC_FLOAT32, k->comm, s[2]);
  k->calls += STREAM_CALLS + 2;
  if (r != RINGCC_SUCCESS) {
    report(me, "streams: %s: %s", ringcc_strerror(r),
           ringcc_comm_last_error(k->comm));
    ok = false;
  }
  for (int i = 0; i < STREAMS; i++)
    ok &= cuda_ok(k, cudaStreamSynchronize(s[i]), "cudaStreamSynchronize");
  ringcc_result_t async = RINGCC_SUCCESS;
  ringcc_comm_get_async_error(k->comm, &async);
  if (async != RINGCC_SUCCESS) {
    report(me, "streams: async error %s: %s", ringcc_strerror(async),
           ringcc_comm_last_error(k->comm));
    ok = false;
  }
  ok = ok && cuda_ok(k, cudaMemcpy(h, drecv, (calls + a2a) * sizeof(float),
                                   cudaMemcpyDeviceToHost), "cudaMemcpy");
  long long wrong = 0;
  float tri = (float)(n * (n + 1) / 2);
  for (size_t i = 0; i < STREAM_CALLS && ok; i++)
    for (size_t g = 0; g < STREAM_COUNT; g++) {
      float want = tri * (float)(i + 1) + (float)(n * (int)(g % 7));
      if (h[i * STREAM_COUNT + g] != want && wrong++ < 3)
        report(me, "streams: allreduce %zu element %zu is %g, want %g", i, g,
               h[i * STREAM_COUNT + g], want);
    }
  for (int j = 0; j < n && ok; j++) /* block j: rank j's block me */
    for (size_t t = 0; t < A2A_BLOCK; t++) {
      float want = tri + (float)(n * (int)(((size_t)me * A2A_BLOCK + t) % 5));
      float got = h[calls + (size_t)j * A2A_BLOCK + t];
      if (got != want && wrong++ < 6)
        report(me, "streams: in-place alltoall after an in-place allreduce "
                   "on another stream: block %d element %zu is %g, want %g",
               j, t, got, want);
    }
  k->wrong += wrong;
  for (int i = 0; i < STREAMS; i++)
    cudaStreamDestroy(s[i]);
  free(h);
  if (ok && me == 0)
    printf("gpu_suite: streams: %d calls on %d streams, no sync between "
           "them: %s\n", STREAM_CALLS + 2, STREAMS,
           wrong ? "WRONG" : "exact");
  return ok;
}

/* ---- CUDA graph capture --------------------------------------------------------------------- */

#define GRAPH_COUNT 70001
#define GRAPH_REPLAYS 3

/* An allreduce (out of place) and an in-place alltoall (staged) captured
 * into a graph (thread-local capture: ranks may be threads), replayed three
 * times with new inputs, an eager allreduce on the same stream between the
 * replays; every element checked after each replay. */
bool graph_case(struct rank *k) {
  int n = k->nranks, me = k->rank;
  float *a = (float *)k->dsend, *b = (float *)k->drecv;
  float *c = b + GRAPH_COUNT, *d = c + (size_t)n * A2A_BLOCK;
  size_t total = GRAPH_COUNT + (size_t)n * A2A_BLOCK + 1024;
  float *h = malloc(total * sizeof(float));
  cudaStream_t s;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  bool ok = h != NULL && total * sizeof(float) <= k->cap &&
            cuda_ok(k, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                    "cudaStreamCreate");
  if (!ok)
    return false;
  ringcc_result_t r1 = RINGCC_SUCCESS, r2 = RINGCC_SUCCESS;
  ok = cuda_ok(k, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
  if (ok) {
    r1 = ringcc_allreduce(a, b, GRAPH_COUNT, RINGCC_FLOAT32, RINGCC_SUM,
                          k->comm, s);
    r2 = ringcc_alltoall(RINGCC_IN_PLACE, c, A2A_BLOCK, RINGCC_FLOAT32,
                         k->comm, s);
    ok = cuda_ok(k, cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture") &&
         cuda_ok(k, cudaGraphInstantiate(&exec, graph, 0),
                 "cudaGraphInstantiate");
  }
  if (r1 != RINGCC_SUCCESS || r2 != RINGCC_SUCCESS) {
    report(me, "graph: capturing: %s, %s: %s", ringcc_strerror(r1),
           ringcc_strerror(r2), ringcc_comm_last_error(k->comm));
    ok = false;
  }
  float tri = (float)(n * (n + 1) / 2);
  long long wrong = 0;
  for (int rep = 0; rep < GRAPH_REPLAYS && ok; rep++) {
    for (size_t g = 0; g < GRAPH_COUNT; g++)
      h[g] = (float)((me + 1) * (rep + 1) + (int)(g % 3));
    for (size_t g = 0; g < (size_t)n * A2A_BLOCK; g++)
      h[GRAPH_COUNT + g] = (float)(me * 1000 + rep * 100 + (int)(g % 50));
    for (size_t g = 0; g < 1024; g++)
      h[total - 1024 + g] = (float)(me + 1);
    ok = cuda_ok(k, cudaMemcpyAsync(a, h, GRAPH_COUNT * sizeof(float),
                                    cudaMemcpyHostToDevice, s), "H2D") &&
         cuda_ok(k, cudaMemcpyAsync(c, h + GRAPH_COUNT,
                                    (size_t)n * A2A_BLOCK * sizeof(float) +
                                        1024 * sizeof(float),
                                    cudaMemcpyHostToDevice, s), "H2D") &&
         cuda_ok(k, cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    ringcc_result_t r = ringcc_allreduce(RINGCC_IN_PLACE, d, 1024,
                                         RINGCC_FLOAT32, RINGCC_SUM, k->comm,
                                         s); /* eager, between replays */
    ok = ok && r == RINGCC_SUCCESS &&
         cuda_ok(k, cudaStreamSynchronize(s), "cudaStreamSynchronize");
    ringcc_result_t async = RINGCC_SUCCESS;
    ringcc_comm_get_async_error(k->comm, &async);
    if (r != RINGCC_SUCCESS || async != RINGCC_SUCCESS) {
      report(me, "graph: replay %d: %s, async %s: %s", rep,
             ringcc_strerror(r), ringcc_strerror(async),
             ringcc_comm_last_error(k->comm));
      ok = false;
      break;
    }
    k->calls += 3;
    ok = cuda_ok(k, cudaMemcpy(h, b, total * sizeof(float),
                               cudaMemcpyDeviceToHost), "D2H");
    for (size_t g = 0; g < GRAPH_COUNT && ok; g++) {
      float want = tri * (float)(rep + 1) + (float)(n * (int)(g % 3));
      if (h[g] != want && wrong++ < 3)
        report(me, "graph: replay %d: allreduce element %zu is %g, want %g",
               rep, g, h[g], want);
    }
    for (int j = 0; j < n && ok; j++)
      for (size_t t = 0; t < A2A_BLOCK; t++) {
        size_t g = (size_t)me * A2A_BLOCK + t;
        float want = (float)(j * 1000 + rep * 100 + (int)(g % 50));
        float got = h[GRAPH_COUNT + (size_t)j * A2A_BLOCK + t];
        if (got != want && wrong++ < 6)
          report(me, "graph: replay %d: in-place alltoall block %d element "
                     "%zu is %g, want %g", rep, j, t, got, want);
      }
    for (size_t g = 0; g < 1024 && ok; g++)
      if (h[total - 1024 + g] != tri && wrong++ < 9)
        report(me, "graph: replay %d: the eager allreduce between replays: "
                   "element %zu is %g, want %g", rep, g, h[total - 1024 + g],
               tri);
  }
  k->wrong += wrong;
  if (exec)
    cudaGraphExecDestroy(exec);
  if (graph)
    cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  free(h);
  if (ok && me == 0)
    printf("gpu_suite: graph: allreduce + in-place alltoall captured, %d "
           "replays with an eager allreduce between them: %s\n",
           GRAPH_REPLAYS, wrong ? "WRONG" : "exact");
  return ok;
}

/* ---- a killed rank --------------------------------------------------------------------------- */

#define KILL_MAX 16

struct kill_shared {
  ringcc_unique_id_t id;
  volatile int ready;
  struct {
    volatile int done, ok;
    double detect_s, destroy_s;
    char msg[512];
  } out[KILL_MAX];
};

/* Rank r of --kill: two checked allreduces, then the last rank SIGKILLs
 * itself while the others' next allreduce waits for it; each survivor must
 * see RINGCC_ERR_PEER_FAILED naming it from ringcc_comm_get_async_error
 * (polled, as a framework's watchdog would) within the host executor's
 * bounds, and destroy must not wait for the timeout. */
static int kill_rank(struct kill_shared *sh, int r, int n) {
  int count = 1;
  cudaGetDeviceCount(&count);
  int dev = r % (count > 0 ? count : 1);
  cudaStream_t s;
  float *d = NULL, h[1024];
  ringcc_comm_t comm = NULL;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = opt.timeout_ms;
  cfg.cuda_device = dev;
  while (!sh->ready)
    usleep(1000);
  if (cudaSetDevice(dev) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&d, sizeof(h)) != cudaSuccess ||
      ringcc_comm_init(&comm, n, &sh->id, r, &cfg) != RINGCC_SUCCESS) {
    snprintf(sh->out[r].msg, sizeof(sh->out[r].msg), "setup on GPU %d: %s",
             dev, ringcc_comm_last_error(NULL));
    return 1;
  }
  for (int i = 0; i < 2; i++) {
    for (int e = 0; e < 1024; e++)
      h[e] = (float)(r + 1);
    cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    ringcc_allreduce(RINGCC_IN_PLACE, d, 1024, RINGCC_FLOAT32, RINGCC_SUM,
                     comm, s);
    cudaStreamSynchronize(s);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    if (h[0] != (float)(n * (n + 1) / 2) || h[1023] != h[0]) {
      snprintf(sh->out[r].msg, sizeof(sh->out[r].msg), "allreduce %d before "
               "the kill: %g", i, h[0]);
      return 1;
    }
  }
  if (r == n - 1) {
    usleep(300000); /* the others' kernels are waiting by now */
    raise(SIGKILL);
  }
  double t0 = now_s();
  ringcc_allreduce(RINGCC_IN_PLACE, d, 1024, RINGCC_FLOAT32, RINGCC_SUM, comm,
                   s);
  ringcc_result_t async = RINGCC_SUCCESS;
  while (now_s() - t0 < 30) {
    ringcc_comm_get_async_error(comm, &async);
    if (async != RINGCC_SUCCESS)
      break;
    usleep(2000);
  }
  sh->out[r].detect_s = now_s() - t0;
  snprintf(sh->out[r].msg, sizeof(sh->out[r].msg), "%s",
           ringcc_comm_last_error(comm));
  cudaStreamSynchronize(s); /* the kernel has left its wait */
  char victim[32];
  snprintf(victim, sizeof(victim), "rank %d ", n - 1);
  sh->out[r].ok = async == RINGCC_ERR_PEER_FAILED &&
                  strstr(sh->out[r].msg, victim) != NULL &&
                  strstr(sh->out[r].msg, "died") != NULL;
  double t1 = now_s();
  ringcc_comm_destroy(comm);
  sh->out[r].destroy_s = now_s() - t1;
  sh->out[r].ok &= sh->out[r].destroy_s < 5;
  sh->out[r].done = 1;
  return sh->out[r].ok ? 0 : 1;
}

int kill_test(int n) {
  struct kill_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t pids[KILL_MAX];
  if (sh == MAP_FAILED || n < 2 || n > KILL_MAX)
    return 2;
  memset(sh, 0, sizeof(*sh));
  /* Fork before anything here touches CUDA or starts the rendezvous. */
  for (int r = 0; r < n; r++)
    if ((pids[r] = fork()) == 0)
      _exit(kill_rank(sh, r, n));
  if (ringcc_get_unique_id(&sh->id) != RINGCC_SUCCESS) {
    fprintf(stderr, "gpu_suite: ringcc_get_unique_id: %s\n",
            ringcc_comm_last_error(NULL));
    for (int r = 0; r < n; r++)
      kill(pids[r], SIGKILL);
    return 1;
  }
  __atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
  double t0 = now_s(), detect = 0, destroy = 0;
  int bad = 0, left = n;
  while (left > 0 && now_s() - t0 < 90) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0)
      left--;
    else
      usleep(10000);
  }
  for (int r = 0; r < n; r++)
    kill(pids[r], SIGKILL); /* stragglers */
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
  for (int r = 0; r < n - 1; r++) {
    if (!sh->out[r].ok) {
      fprintf(stderr, "gpu_suite: kill: rank %d: %s after %.2f s (destroy "
              "%.2f s): %s\n", r, sh->out[r].done ? "wrong verdict"
                                                    : "did not finish",
              sh->out[r].detect_s, sh->out[r].destroy_s, sh->out[r].msg);
      bad++;
    }
    detect = sh->out[r].detect_s > detect ? sh->out[r].detect_s : detect;
    destroy = sh->out[r].destroy_s > destroy ? sh->out[r].destroy_s : destroy;
  }
  if (!bad)
    printf("gpu_suite: kill: %d ranks, rank %d SIGKILLed under waiting "
           "kernels: %d survivors got RINGCC_ERR_PEER_FAILED naming it "
           "(detection max %.3f s, destroy max %.3f s); rank 0 said: %s\n",
           n, n - 1, n - 1, detect, destroy, sh->out[0].msg);
  else
    printf("gpu_suite: kill: %d ranks: %d of %d survivors FAILED\n", n, bad,
           n - 1);
  munmap(sh, sizeof(*sh));
  return bad ? 1 : 0;
}

/* ---- contexts -------------------------------------------------------------------------------- */

/* The driver's view, for the checks below (libcuda by dlopen). */
typedef int (*cu_int_fn)(unsigned);
typedef int (*cu_ctx_fn)(void **);
typedef int (*cu_dev_fn)(int *, int);
typedef int (*cu_state_fn)(int, unsigned *, int *);
static struct {
  cu_int_fn init;
  cu_ctx_fn current;
  cu_dev_fn get;
  cu_state_fn state;
} cu;

static int load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return 0;
  cu.init = (cu_int_fn)dlsym(lib, "cuInit");
  cu.current = (cu_ctx_fn)dlsym(lib, "cuCtxGetCurrent");
  cu.get = (cu_dev_fn)dlsym(lib, "cuDeviceGet");
  cu.state = (cu_state_fn)dlsym(lib, "cuDevicePrimaryCtxGetState");
  return cu.init && cu.current && cu.get && cu.state && cu.init(0) == 0;
}

/* 1 if GPU index dev has an active primary context in this process. */
static int primary_active(int dev) {
  int cudev = 0, active = 0;
  unsigned flags = 0;
  if (cu.get(&cudev, dev) != 0 || cu.state(cudev, &flags, &active) != 0)
    return -1;
  return active;
}

/* Prints one failure of --contexts; returns 1. */
static int ctx_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpu_suite: contexts: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  return 1;
}

struct ctx_check {
  ringcc_comm_t comm;
  void *before, *after;
  ringcc_result_t r;
};

/* A thread with no CUDA context asks for the async error of a device
 * communicator: afterwards it still has none. */
static void *ask_without_context(void *arg) {
  struct ctx_check *c = arg;
  ringcc_result_t async;
  cu.current(&c->before);
  c->r = ringcc_comm_get_async_error(c->comm, &async);
  cu.current(&c->after);
  return NULL;
}

static int context_child(void) {
  int count = 0, failed = 0;
  ringcc_unique_id_t id;
  ringcc_comm_t comm = NULL;
  /* (a) A host-only program on a GPU node: no CUDA call before init, no
   * RINGCC_CUDA_DEVICE: no context anywhere afterwards. */
  unsetenv("RINGCC_CUDA_DEVICE");
  if (ringcc_get_unique_id(&id) != RINGCC_SUCCESS ||
      ringcc_comm_init(&comm, 1, &id, 0, NULL) != RINGCC_SUCCESS) {
    fprintf(stderr, "gpu_suite: contexts: init: %s\n",
            ringcc_comm_last_error(NULL));
    return 1;
  }
  int32_t x = 1, y = 0;
  if (ringcc_allreduce(&x, &y, 1, RINGCC_INT32, RINGCC_SUM, comm, NULL) !=
          RINGCC_SUCCESS || y != 1)
    failed += ctx_fail("host allreduce failed\n");
  ringcc_comm_destroy(comm);
  if (!load_driver()) {
    fprintf(stderr, "gpu_suite: contexts: cannot load libcuda.so.1\n");
    return 1;
  }
  if (primary_active(0) != 0)
    failed += ctx_fail("a host-only communicator "
                              "made a context on GPU 0\n");
  /* (b) A rank on the last GPU: its calls leave the thread's context as it
   * was and make none on GPU 0 (the old cudaSetDevice(prev) did). */
  cudaGetDeviceCount(&count);
  int dev = count - 1;
  void *mine = NULL, *now = NULL;
  float *d = NULL;
  cudaStream_t s;
  if (cudaSetDevice(dev) != cudaSuccess || cudaFree(NULL) != cudaSuccess ||
      cudaMalloc((void **)&d, 4096) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "gpu_suite: contexts: CUDA setup on GPU %d failed\n", dev);
    return 1;
  }
  cu.current(&mine);
  if (ringcc_get_unique_id(&id) != RINGCC_SUCCESS ||
      ringcc_comm_init(&comm, 1, &id, 0, NULL) != RINGCC_SUCCESS) {
    fprintf(stderr, "gpu_suite: contexts: init on GPU %d: %s\n", dev,
            ringcc_comm_last_error(NULL));
    return 1;
  }
  ringcc_result_t r = ringcc_allreduce(RINGCC_IN_PLACE, d, 1024,
                                       RINGCC_FLOAT32, RINGCC_SUM, comm, s);
  cudaStreamSynchronize(s);
  cu.current(&now);
  if (r != RINGCC_SUCCESS)
    failed += ctx_fail("device allreduce on GPU "
                              "%d: %s\n", dev, ringcc_comm_last_error(comm));
  if (now != mine)
    failed += ctx_fail("the calling thread's "
                              "context changed\n");
  struct ctx_check c = {.comm = comm};
  pthread_t t;
  pthread_create(&t, NULL, ask_without_context, &c);
  pthread_join(t, NULL);
  if (c.r != RINGCC_SUCCESS || c.before != NULL || c.after != NULL)
    failed += ctx_fail("a thread without a "
                              "context has %p after get_async_error\n",
                      c.after);
  ringcc_comm_destroy(comm);
  if (dev != 0 && primary_active(0) != 0)
    failed += ctx_fail("a rank on GPU %d made a "
                              "context on GPU 0\n", dev);
  printf("gpu_suite: contexts: host-only init made no context; a rank on GPU "
         "%d left its thread's context as it was%s; a thread without one "
         "still has none: %s\n", dev,
         dev != 0 ? " and made none on GPU 0" : "", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}

/* In a fresh process: nothing of CUDA may be set up before the checks. */
int context_test(void) {
  pid_t p = fork();
  int st = 0;
  if (p == 0)
    _exit(context_child());
  if (p < 0 || waitpid(p, &st, 0) != p)
    return 1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* Whether CUDA sees a GPU, asked in a child process: this one must not start
 * CUDA before it forks ranks (--kill) or checks a fresh process
 * (--contexts). */
bool gpu_available(void) {
  pid_t p = fork();
  int st = 0, count = 0;
  if (p == 0)
    _exit(cudaGetDeviceCount(&count) == cudaSuccess && count > 0 ? 0 : 77);
  return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) &&
         WEXITSTATUS(st) == 0;
}
