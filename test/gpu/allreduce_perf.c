/*
 * allreduce_perf.c - AllReduce bus bandwidth by size on device buffers, for
 * libringcc or for the NCCL that ships with the CUDA toolkit, measured the
 * same way, so that scripts/gpu-check.sh can put them side by side for the
 * same ranks and GPUs (needs a GPU).
 *
 *   allreduce_perf --backend ringcc|nccl --threads N [options]
 *   ringcc-run -np N allreduce_perf --backend ringcc|nccl [options]
 *
 * As nccl-tests' all_reduce_perf: out of place, float32 sum, one stream per
 * rank; per size a warm-up, then timed iterations between two CUDA events
 * on the rank's stream; the time of a size is the slowest rank's average;
 * algbw = S / t and busbw = algbw * 2(n-1)/n (S: bytes per rank). After the
 * timed loop one call is checked (inputs rank + 1: every element must be
 * n(n+1)/2).
 *
 * Ranks as threads (--threads N) or processes (under ringcc-run: rank and
 * size from RINGCC_RANK / RINGCC_NRANKS). Rank r uses GPU r % (GPUs seen)
 * with --spread, else RINGCC_CUDA_DEVICE or 0 (several ranks may share a GPU
 * with libringcc; NCCL refuses two ranks on one GPU). Processes of the NCCL
 * backend exchange NCCL's unique id, their barriers and times over a
 * host-only libringcc communicator.
 *
 * Options: -b MIN -e MAX -f FACTOR (bytes, K/M/G suffixes; default 8 B to
 * 256 MiB, x8), --iters K (timed iterations; default by size), --copy-bw
 * (also the device's cudaMemcpy device-to-device rate, for one GPU shared by
 * the ranks), --register (libringcc: the buffers from ringcc_mem_alloc,
 * registered with ringcc_comm_register, so the tuner may take the device
 * zero-copy kernel; RINGCC_ALGO=zerocopy forces it), --timeout-ms MS (default RINGCC_TIMEOUT_MS, else 120000). Output: a table, and per size a line
 *   ARPERF <backend> <nranks> <bytes> <time_us> <algbw_GBps> <busbw_GBps> <ok>
 * (and "ARPERF copy 1 <bytes> <time_us> <GBps>" with --copy-bw), which
 * gpu-check.sh reads. Exit status 0, 1 on a wrong result or a failed call,
 * 2 on usage, 77 without a GPU or without NCCL for --backend nccl.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ringcc.h"

#if RINGCC_HAVE_NCCL
#include <nccl.h>
#endif

#define MAX_RANKS 64

static struct {
  bool nccl, spread, copy_bw, reg;
  int threads, iters;
  size_t min_bytes, max_bytes, factor;
  int64_t timeout_ms;
} opt = {.min_bytes = 8, .max_bytes = (size_t)256 << 20, .factor = 8,
         .timeout_ms = 120000};

/* Shared by threads: the barrier and each rank's time. */
static pthread_barrier_t barrier;
static double thread_times[MAX_RANKS];
static ringcc_unique_id_t ringcc_id;
#if RINGCC_HAVE_NCCL
static ncclUniqueId nccl_id;
#endif

struct rank {
  int rank, nranks, device;
  cudaStream_t stream;
  float *send, *recv;
  ringcc_comm_t comm; /* the ringcc backend, or processes' bootstrap */
  ringcc_reg_t reg_send, reg_recv; /* --register */
#if RINGCC_HAVE_NCCL
  ncclComm_t nccl;
#endif
  int failed;
};

static int fail(struct rank *k, const char *what, const char *why) {
  fprintf(stderr, "allreduce_perf: rank %d (GPU %d): %s: %s\n", k->rank,
          k->device, what, why);
  k->failed = 1;
  return -1;
}

static int cuda(struct rank *k, cudaError_t e, const char *what) {
  return e == cudaSuccess ? 0 : fail(k, what, cudaGetErrorString(e));
}

static void sync_ranks(struct rank *k) {
  if (opt.threads)
    pthread_barrier_wait(&barrier);
  else
    ringcc_barrier(k->comm, NULL);
}

/* The slowest rank's time. */
static double max_time(struct rank *k, double mine) {
  if (opt.threads) {
    thread_times[k->rank] = mine;
    pthread_barrier_wait(&barrier);
    double m = 0;
    for (int r = 0; r < k->nranks; r++)
      m = thread_times[r] > m ? thread_times[r] : m;
    pthread_barrier_wait(&barrier);
    return m;
  }
  double m = 0;
  if (ringcc_allreduce(&mine, &m, 1, RINGCC_FLOAT64, RINGCC_MAX, k->comm,
                       NULL) != RINGCC_SUCCESS)
    fail(k, "ringcc_allreduce of the times", ringcc_comm_last_error(k->comm));
  return m;
}

static int allreduce(struct rank *k, size_t count) {
  if (opt.nccl) {
#if RINGCC_HAVE_NCCL
    ncclResult_t r = ncclAllReduce(k->send, k->recv, count, ncclFloat32,
                                   ncclSum, k->nccl, k->stream);
    return r == ncclSuccess ? 0 : fail(k, "ncclAllReduce",
                                       ncclGetErrorString(r));
#endif
  }
  ringcc_result_t r = ringcc_allreduce(k->send, k->recv, count,
                                       RINGCC_FLOAT32, RINGCC_SUM, k->comm,
                                       k->stream);
  return r == RINGCC_SUCCESS ? 0 : fail(k, "ringcc_allreduce",
                                        ringcc_comm_last_error(k->comm));
}

static int iters_for(size_t bytes) {
  if (opt.iters > 0)
    return opt.iters;
  return bytes <= (1u << 20) ? 50 : bytes <= (64u << 20) ? 20 : 10;
}

/* Rank 0's record of the run, for the summary line. */
static double first_us, last_busbw;
static size_t first_bytes, last_bytes;

/* One size: warm-up, timed loop, check. */
static void measure(struct rank *k, size_t bytes) {
  size_t count = bytes / sizeof(float);
  int iters = iters_for(bytes);
  cudaEvent_t t0, t1;
  float ms = 0;
  if (count == 0)
    return;
  if (cuda(k, cudaEventCreate(&t0), "cudaEventCreate") ||
      cuda(k, cudaEventCreate(&t1), "cudaEventCreate"))
    return;
  for (int i = 0; i < 3 && !k->failed; i++)
    allreduce(k, count);
  cuda(k, cudaStreamSynchronize(k->stream), "cudaStreamSynchronize");
  sync_ranks(k);
  cuda(k, cudaEventRecord(t0, k->stream), "cudaEventRecord");
  for (int i = 0; i < iters && !k->failed; i++)
    allreduce(k, count);
  cuda(k, cudaEventRecord(t1, k->stream), "cudaEventRecord");
  cuda(k, cudaEventSynchronize(t1), "cudaEventSynchronize");
  cuda(k, cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
  double us = max_time(k, (double)ms * 1000.0 / iters);
  /* Check one call: every element is n(n+1)/2. */
  float first = 0, last = 0, want = (float)(k->nranks * (k->nranks + 1) / 2);
  cuda(k, cudaMemsetAsync(k->recv, 0, bytes, k->stream), "cudaMemsetAsync");
  allreduce(k, count);
  cuda(k, cudaMemcpyAsync(&first, k->recv, sizeof(float),
                          cudaMemcpyDeviceToHost, k->stream), "cudaMemcpy");
  cuda(k, cudaMemcpyAsync(&last, k->recv + count - 1, sizeof(float),
                          cudaMemcpyDeviceToHost, k->stream), "cudaMemcpy");
  cuda(k, cudaStreamSynchronize(k->stream), "cudaStreamSynchronize");
  int ok = first == want && last == want && !k->failed;
  if (!ok && !k->failed)
    fail(k, "the result", "wrong elements after the timed loop");
  if (k->rank == 0) {
    double algbw = (double)bytes / us / 1e3;
    double busbw = algbw * 2.0 * (k->nranks - 1) / k->nranks;
    printf("  %12zu %10.2f %9.2f %9.2f  %s\n", bytes, us, algbw, busbw,
           ok ? "ok" : "WRONG");
    printf("ARPERF %s %d %zu %.3f %.3f %.3f %d\n",
           opt.nccl ? "nccl" : "ringcc", k->nranks, bytes, us, algbw, busbw,
           ok);
    fflush(stdout);
    if (first_bytes == 0)
      first_bytes = bytes, first_us = us;
    last_bytes = bytes, last_busbw = busbw;
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

/* cudaMemcpy device to device on this GPU: bytes / time, as a bandwidth. */
static void copy_bw(struct rank *k) {
  size_t bytes = opt.max_bytes;
  cudaEvent_t t0, t1;
  float ms = 0;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  cudaMemcpyAsync(k->recv, k->send, bytes, cudaMemcpyDeviceToDevice,
                  k->stream);
  cudaEventRecord(t0, k->stream);
  for (int i = 0; i < 10; i++)
    cudaMemcpyAsync(k->recv, k->send, bytes, cudaMemcpyDeviceToDevice,
                    k->stream);
  cudaEventRecord(t1, k->stream);
  if (cuda(k, cudaEventSynchronize(t1), "cudaMemcpy D2D") == 0) {
    cudaEventElapsedTime(&ms, t0, t1);
    double us = (double)ms * 100.0;
    printf("  cudaMemcpy D2D %zu B: %.2f us, %.2f GB/s\n", bytes, us,
           (double)bytes / us / 1e3);
    printf("ARPERF copy 1 %zu %.3f %.3f\n", bytes, us,
           (double)bytes / us / 1e3);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

static int device_of(int rank) {
  int count = 1;
  const char *env = getenv("RINGCC_CUDA_DEVICE");
  if (opt.spread && cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
    return rank % count;
  return env ? atoi(env) : 0;
}

static int make_comms(struct rank *k) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = opt.timeout_ms;
  cfg.cuda_device = opt.nccl ? RINGCC_CUDA_DEVICE_NONE : k->device;
  ringcc_result_t r = opt.threads
                          ? (opt.nccl ? RINGCC_SUCCESS
                                      : ringcc_comm_init(&k->comm, k->nranks,
                                                         &ringcc_id, k->rank,
                                                         &cfg))
                          : ringcc_comm_init_env(&k->comm, &cfg);
  if (r != RINGCC_SUCCESS)
    return fail(k, "ringcc init", ringcc_comm_last_error(NULL));
  if (!opt.nccl)
    return 0;
#if RINGCC_HAVE_NCCL
  if (!opt.threads) { /* rank 0's id, through the host communicator */
    if (k->rank == 0 && ncclGetUniqueId(&nccl_id) != ncclSuccess)
      return fail(k, "ncclGetUniqueId", "failed");
    if (ringcc_bcast(&nccl_id, sizeof(nccl_id), RINGCC_UINT8, 0, k->comm,
                     NULL) != RINGCC_SUCCESS)
      return fail(k, "ringcc_bcast of the NCCL id",
                  ringcc_comm_last_error(k->comm));
  }
  ncclResult_t nr = ncclCommInitRank(&k->nccl, k->nranks, nccl_id, k->rank);
  if (nr != ncclSuccess)
    return fail(k, "ncclCommInitRank", ncclGetErrorString(nr));
  return 0;
#else
  return fail(k, "--backend nccl", "this build has no NCCL");
#endif
}

/* --register: the buffers from ringcc_mem_alloc (device memory of this
 * rank's GPU, mappable by its peers), registered with the communicator. */
static int alloc_registered(struct rank *k, size_t cap) {
  if (ringcc_mem_alloc(k->comm, cap, (void **)&k->send) != RINGCC_SUCCESS ||
      ringcc_mem_alloc(k->comm, cap, (void **)&k->recv) != RINGCC_SUCCESS)
    return fail(k, "ringcc_mem_alloc", ringcc_comm_last_error(k->comm));
  if (ringcc_comm_register(k->comm, k->send, cap, &k->reg_send) !=
          RINGCC_SUCCESS ||
      ringcc_comm_register(k->comm, k->recv, cap, &k->reg_recv) !=
          RINGCC_SUCCESS)
    return fail(k, "ringcc_comm_register", ringcc_comm_last_error(k->comm));
  return 0;
}

static void run_rank(struct rank *k) {
  size_t cap = opt.max_bytes;
  k->device = device_of(k->rank);
  if (cuda(k, cudaSetDevice(k->device), "cudaSetDevice") ||
      cuda(k, cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking),
           "cudaStreamCreate"))
    return;
  if (opt.reg) { /* the communicator first: it allocates the buffers */
    if (opt.threads)
      pthread_barrier_wait(&barrier);
    if (make_comms(k) != 0 || alloc_registered(k, cap) != 0)
      return;
  } else if (cuda(k, cudaMalloc((void **)&k->send, cap), "cudaMalloc") ||
             cuda(k, cudaMalloc((void **)&k->recv, cap), "cudaMalloc")) {
    return;
  }
  float *host = malloc(cap);
  if (host == NULL) {
    fail(k, "malloc", "out of memory");
    return;
  }
  for (size_t i = 0; i < cap / sizeof(float); i++)
    host[i] = (float)(k->rank + 1);
  cuda(k, cudaMemcpy(k->send, host, cap, cudaMemcpyHostToDevice),
       "cudaMemcpy");
  free(host);
  if (opt.threads)
    pthread_barrier_wait(&barrier); /* allocations before any kernel */
  if (!opt.reg && make_comms(k) != 0)
    return;
  if (k->rank == 0) {
    printf("allreduce_perf: %s, %d rank%s as %s, float32 sum out of place%s\n",
           opt.nccl ? "NCCL" : "libringcc", k->nranks,
           k->nranks == 1 ? "" : "s", opt.threads ? "threads" : "processes",
           opt.reg ? ", registered buffers" : "");
    printf("  %12s %10s %9s %9s\n", "bytes", "time_us", "algbw", "busbw");
  }
  for (size_t b = opt.min_bytes; b <= opt.max_bytes && !k->failed;
       b *= opt.factor) {
    measure(k, b);
    if (b > opt.max_bytes / opt.factor && b != opt.max_bytes)
      measure(k, opt.max_bytes); /* the largest size always runs */
  }
  if (opt.copy_bw && k->rank == 0)
    copy_bw(k);
  if (k->rank == 0 && last_bytes > 0)
    printf("allreduce_perf: %s, %d ranks: %.2f GB/s busbw at %zu B, %.2f us "
           "at %zu B%s\n", opt.nccl ? "NCCL" : "libringcc", k->nranks,
           last_busbw, last_bytes, first_us, first_bytes,
           k->failed ? " - FAILED" : "");
  cudaStreamSynchronize(k->stream);
  sync_ranks(k);
#if RINGCC_HAVE_NCCL
  if (opt.nccl && k->nccl)
    ncclCommDestroy(k->nccl);
#endif
  if (k->reg_send)
    ringcc_comm_deregister(k->comm, k->reg_send);
  if (k->reg_recv)
    ringcc_comm_deregister(k->comm, k->reg_recv);
  if (k->comm)
    ringcc_comm_destroy(k->comm);
  if (opt.threads)
    pthread_barrier_wait(&barrier);
  if (opt.reg) {
    ringcc_mem_free(k->send);
    ringcc_mem_free(k->recv);
  } else {
    cudaFree(k->send);
    cudaFree(k->recv);
  }
  cudaStreamDestroy(k->stream);
}

static void *thread_main(void *arg) {
  run_rank(arg);
  return NULL;
}

static size_t parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'k': case 'K': v *= 1024; break;
  case 'm': case 'M': v *= 1048576; break;
  case 'g': case 'G': v *= 1073741824.0; break;
  default: break;
  }
  return (size_t)v;
}

int main(int argc, char **argv) {
  const char *env_timeout = getenv("RINGCC_TIMEOUT_MS");
  if (env_timeout && *env_timeout) /* a config field overrides the env */
    opt.timeout_ms = atoll(env_timeout);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--backend") == 0 && v) {
      opt.nccl = strcasecmp(v, "nccl") == 0;
      if (!opt.nccl && strcasecmp(v, "ringcc") != 0)
        goto usage;
      i++;
    } else if (strcmp(a, "--threads") == 0 && v) {
      opt.threads = atoi(v), i++;
    } else if (strcmp(a, "--spread") == 0) {
      opt.spread = true;
    } else if (strcmp(a, "--register") == 0) {
      opt.reg = true;
    } else if (strcmp(a, "--copy-bw") == 0) {
      opt.copy_bw = true;
    } else if (strcmp(a, "-b") == 0 && v) {
      opt.min_bytes = parse_bytes(v), i++;
    } else if (strcmp(a, "-e") == 0 && v) {
      opt.max_bytes = parse_bytes(v), i++;
    } else if (strcmp(a, "-f") == 0 && v) {
      opt.factor = (size_t)atoi(v), i++;
    } else if (strcmp(a, "--iters") == 0 && v) {
      opt.iters = atoi(v), i++;
    } else if (strcmp(a, "--timeout-ms") == 0 && v) {
      opt.timeout_ms = atoll(v), i++;
    } else {
      goto usage;
    }
  }
  if (opt.factor < 2 || opt.min_bytes < 4 || opt.max_bytes < opt.min_bytes ||
      opt.threads > MAX_RANKS || (opt.reg && opt.nccl))
    goto usage; /* --register is libringcc's */
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "allreduce_perf: no GPU\n");
    return 77;
  }
#if !RINGCC_HAVE_NCCL
  if (opt.nccl) {
    fprintf(stderr, "allreduce_perf: built without NCCL (no nccl.h and "
                    "libnccl in the CUDA toolkit)\n");
    return 77;
  }
#endif
  if (opt.threads > 0) {
    struct rank ranks[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    int n = opt.threads, bad = 0;
    if (!opt.nccl && ringcc_get_unique_id(&ringcc_id) != RINGCC_SUCCESS) {
      fprintf(stderr, "allreduce_perf: ringcc_get_unique_id: %s\n",
              ringcc_comm_last_error(NULL));
      return 1;
    }
#if RINGCC_HAVE_NCCL
    if (opt.nccl && ncclGetUniqueId(&nccl_id) != ncclSuccess) {
      fprintf(stderr, "allreduce_perf: ncclGetUniqueId failed\n");
      return 1;
    }
#endif
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int r = 0; r < n; r++) {
      ranks[r] = (struct rank){.rank = r, .nranks = n};
      pthread_create(&th[r], NULL, thread_main, &ranks[r]);
    }
    for (int r = 0; r < n; r++) {
      pthread_join(th[r], NULL);
      bad |= ranks[r].failed;
    }
    return bad;
  }
  const char *rs = getenv("RINGCC_RANK"), *ns = getenv("RINGCC_NRANKS");
  if (rs == NULL || ns == NULL)
    goto usage;
  struct rank k = {.rank = atoi(rs), .nranks = atoi(ns)};
  run_rank(&k);
  return k.failed;
usage:
  fprintf(stderr, "usage: allreduce_perf --backend ringcc|nccl [--threads N] "
                  "[--spread] [-b MIN] [-e MAX] [-f FACTOR] [--iters K] "
                  "[--copy-bw] [--register] [--timeout-ms MS]\n");
  return 2;
}
