/*
 * gpu_suite.h - what the two sources of gpu_suite (test/gpu/gpu_suite.c and
 * test/gpu/gpu_sections.c) share: the options, one rank, the helpers of
 * test/gpu/gpu_common.c, and the sections gpu_sections.c defines.
 */
#ifndef GPU_SUITE_H
#define GPU_SUITE_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct gpu_suite_opt {
  int threads;     /* 0: processes (ringcc_comm_init_env) */
  bool quick, big, faults, spread;
  bool host; /* --host: the same matrix on host buffers (checks the suite) */
  bool no_matrix;  /* only the sections asked for below */
  bool streams;    /* several streams, back-to-back calls, no sync between */
  bool graph;      /* collectives captured into a CUDA graph and replayed */
  int kill;        /* --kill N: N forked ranks, the last SIGKILLed */
  bool contexts;   /* which GPUs get a context, and the thread's context */
  int64_t timeout_ms;
};
extern struct gpu_suite_opt opt;
/* The thread ranks' barrier (--threads). */
extern pthread_barrier_t thread_barrier;

struct rank {
  int rank, nranks, device;
  ringcc_comm_t comm;
  cudaStream_t stream;
  size_t cap;             /* bytes of each buffer */
  char *dsend, *drecv;    /* device */
  char *hsend, *hrecv;    /* host mirrors */
  char *hwant;            /* the expected result */
  long long calls, wrong;
  const char *label;
};

/* gpu_common.c */
void report(int rank, const char *fmt, ...);
double now_s(void);
bool cuda_ok(struct rank *k, cudaError_t e, const char *what);
void sync_ranks(struct rank *k);

/* gpu_sections.c */
bool streams_case(struct rank *k);
bool graph_case(struct rank *k);
int kill_test(int n);
int context_test(void);
bool gpu_available(void);

#endif
