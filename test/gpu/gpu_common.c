/*
 * gpu_common.c - what both sources of gpu_suite use (test/gpu/gpu_suite.c,
 * test/gpu/gpu_sections.c; declared in gpu_suite.h): the options, the
 * failure report, the clock, the CUDA check and the ranks' barrier. Its own
 * file so that the two sources call it and gpu_suite.c calls
 * gpu_sections.c, never the other way round.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "ringcc.h"

#include "gpu_suite.h"

struct gpu_suite_opt opt = {.timeout_ms = 120000};

pthread_barrier_t thread_barrier;
static int failures_reported;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

void report(int rank, const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&report_lock);
  if (failures_reported++ < 40) {
    fprintf(stderr, "gpu_suite: rank %d: ", rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
  }
  pthread_mutex_unlock(&report_lock);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool cuda_ok(struct rank *k, cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  report(k->rank, "%s: %s", what, cudaGetErrorString(e));
  return false;
}

void sync_ranks(struct rank *k) {
  if (opt.threads)
    pthread_barrier_wait(&thread_barrier);
  else
    ringcc_barrier(k->comm, NULL);
}
