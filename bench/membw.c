/*
 * membw.c - the memory-bandwidth ceiling of a host-memory collective on this
 * machine: how many bytes per second the cores can read plus write.
 *
 *   membw [-s SIZE] [-t THREADS] [-r REPS]      (defaults 256M, 2, 10)
 *
 * Three kernels over arrays of SIZE bytes each (float32), every thread on its
 * own contiguous slice, all threads started together for each repetition:
 *   copy   dst = src           (memcpy)       2 bytes of traffic per byte
 *   add    c = a + b                          3
 *   acc    a += b              (in place)     3
 * These are the memory operations of a shared-memory ring step: copying a
 * slice into the FIFO, and reducing it into the output.
 * Printed per kernel: read+write GB/s (GB = 1e9 B), best and median of the
 * repetitions; write-allocate traffic is not counted. One untimed repetition
 * first (page faults, clocks). Arrays much larger than the last-level cache
 * (256 MiB here vs 32 MiB of L3) measure DRAM.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum kernel { K_COPY, K_ADD, K_ACC, NUM_KERNELS };

static const struct {
  const char *name, *what;
  int traffic; /* bytes read + written per array byte */
} kernels[NUM_KERNELS] = {
    [K_COPY] = {"copy", "dst = src (memcpy)", 2},
    [K_ADD] = {"add", "c = a + b (float32)", 3},
    [K_ACC] = {"acc", "a += b (float32)", 3},
};

struct shared {
  enum kernel kernel;
  float *a, *b, *c;
  size_t elems;
  int nthreads, reps;
  pthread_barrier_t start, stop;
  double *seconds; /* per repetition, written by thread 0 */
};

struct worker {
  struct shared *sh;
  int id;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* noinline: the compiler must not see through to the buffers' contents */
__attribute__((noinline)) static void add(float *restrict c,
                                          const float *restrict a,
                                          const float *restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}

__attribute__((noinline)) static void acc(float *restrict a,
                                          const float *restrict b, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] += b[i];
}

static void *work(void *arg) {
  struct worker *w = arg;
  struct shared *sh = w->sh;
  size_t per = sh->elems / (size_t)sh->nthreads, first = per * (size_t)w->id;
  if (w->id == sh->nthreads - 1) per = sh->elems - first;
  float *a = sh->a + first, *b = sh->b + first, *c = sh->c + first;
  for (int r = -1; r < sh->reps; r++) { /* r = -1: untimed */
    pthread_barrier_wait(&sh->start);
    double t0 = now_s();
    switch (sh->kernel) {
    case K_COPY: memcpy(c, a, per * sizeof(float)); break;
    case K_ADD: add(c, a, b, per); break;
    default: acc(a, b, per); break;
    }
    pthread_barrier_wait(&sh->stop);
    if (w->id == 0 && r >= 0) sh->seconds[r] = now_s() - t0;
  }
  return NULL;
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static float *alloc_filled(size_t bytes, float value) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes) != 0) {
    fprintf(stderr, "membw: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  float *f = p;
  for (size_t i = 0; i < bytes / sizeof(float); i++) f[i] = value;
  return f;
}

static size_t parse_size(const char *s) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return 0;
  switch (*end) {
  case 'K': case 'k': v <<= 10; end++; break;
  case 'M': case 'm': v <<= 20; end++; break;
  case 'G': case 'g': v <<= 30; end++; break;
  default: break;
  }
  return *end ? 0 : (size_t)v;
}

int main(int argc, char **argv) {
  size_t bytes = (size_t)256 << 20;
  int nthreads = 2, reps = 10, opt;
  while ((opt = getopt(argc, argv, "s:t:r:h")) != -1) {
    switch (opt) {
    case 's': bytes = parse_size(optarg); break;
    case 't': nthreads = atoi(optarg); break;
    case 'r': reps = atoi(optarg); break;
    default:
      fprintf(opt == 'h' ? stdout : stderr,
              "usage: membw [-s SIZE] [-t THREADS] [-r REPS]\n");
      return opt == 'h' ? 0 : 2;
    }
  }
  if (bytes < 4096 || nthreads < 1 || nthreads > 256 || reps < 1) {
    fprintf(stderr, "membw: want -s >= 4096, 1 <= -t <= 256, -r >= 1\n");
    return 2;
  }
  struct shared sh = {.elems = bytes / sizeof(float), .nthreads = nthreads,
                      .reps = reps};
  sh.a = alloc_filled(bytes, 1.0f);
  sh.b = alloc_filled(bytes, 2.0f);
  sh.c = alloc_filled(bytes, 0.0f);
  sh.seconds = calloc((size_t)reps, sizeof(double));
  struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
  pthread_t *th = calloc((size_t)nthreads, sizeof *th);
  if (!sh.seconds || !ws || !th) return 1;

  printf("# membw: %zu B per array, %d threads, %d repetitions (+1 untimed); "
         "rw = bytes read + written, GB = 1e9 B\n", bytes, nthreads, reps);
  printf("# %-6s %-22s %8s %16s %16s\n", "kernel", "operation", "threads",
         "rw best GB/s", "rw median GB/s");
  for (int k = 0; k < NUM_KERNELS; k++) {
    sh.kernel = (enum kernel)k;
    pthread_barrier_init(&sh.start, NULL, (unsigned)nthreads);
    pthread_barrier_init(&sh.stop, NULL, (unsigned)nthreads);
    for (int t = 0; t < nthreads; t++) {
      ws[t] = (struct worker){.sh = &sh, .id = t};
      pthread_create(&th[t], NULL, work, &ws[t]);
    }
    for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.stop);
    qsort(sh.seconds, (size_t)reps, sizeof(double), by_value);
    double traffic = (double)kernels[k].traffic * (double)(sh.elems * sizeof(float));
    double median = reps % 2 ? sh.seconds[reps / 2]
                             : (sh.seconds[reps / 2 - 1] + sh.seconds[reps / 2]) / 2;
    printf("  %-6s %-22s %8d %16.2f %16.2f\n", kernels[k].name, kernels[k].what,
           nthreads, traffic / sh.seconds[0] / 1e9, traffic / median / 1e9);
    fflush(stdout);
  }
  volatile float sink = sh.a[sh.elems / 2] + sh.c[sh.elems / 3];
  (void)sink;
  free(sh.a);
  free(sh.b);
  free(sh.c);
  free(sh.seconds);
  free(ws);
  free(th);
  return 0;
}
