/*
 * overlap.c - a non-blocking AllReduce overlapping a compute loop: a
 * one-call group ended with ringcc_group_end_async, the compute, then
 * ringcc_wait, against the compute followed by the blocking call.
 *
 *   build/bin/ringcc-run -np 4 build/examples/overlap -s 16M -c 20 -r 15
 *
 * -s bytes of float32 reduced (K/M/G suffixes; default 16M), -c the compute
 * in milliseconds of one core (default: about the blocking AllReduce's time),
 * -r rounds (default 15). Each round times, interleaved, the compute alone,
 * the blocking AllReduce alone, compute + blocking call, and start + compute
 * + wait; rank 0 prints the medians over rounds (the slowest rank's time in
 * each round) and what the overlap saved. Every element of every AllReduce
 * is checked. The compute is a dependent floating-point loop on one core
 * (no memory traffic), so what it shares with the AllReduce is the CPU: the
 * AllReduce progresses on the communicator's progress thread, and overlap
 * helps as far as the host has a core for that thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ringcc.h>

static int me = -1;

static void check(ringcc_result_t r, const char *what, ringcc_comm_t comm) {
  if (r == RINGCC_SUCCESS)
    return;
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", me, what, ringcc_strerror(r),
          ringcc_comm_last_error(comm));
  exit(1);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static volatile double sink;

/* iters steps of a dependent multiply-add chain. */
static void compute(uint64_t iters) {
  double a = 1.0;
  for (uint64_t i = 0; i < iters; i++)
    a = a * 0.999999 + 1e-7;
  sink = a;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mul = *end == 'K' ? 1u << 10 : *end == 'M' ? 1u << 20
               : *end == 'G' ? 1u << 30 : 1;
  return (size_t)(v * (double)mul);
}

static void fill(float *x, size_t n, int round) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)((i + (size_t)me * 7 + (size_t)round) % 64);
}

static void verify(const float *x, size_t n, int nranks, int round) {
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int q = 0; q < nranks; q++)
      want += (float)((i + (size_t)q * 7 + (size_t)round) % 64);
    if (x[i] != want) {
      fprintf(stderr, "rank %d: round %d: element %zu is %g, expected %g\n",
              me, round, i, (double)x[i], (double)want);
      exit(3);
    }
  }
}

/* The slowest rank's time. */
static double slowest(double ms, ringcc_comm_t comm) {
  check(ringcc_allreduce(RINGCC_IN_PLACE, &ms, 1, RINGCC_FLOAT64, RINGCC_MAX,
                         comm, NULL), "allreduce (max)", comm);
  return ms;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum { COMPUTE, ALLREDUCE, COMPUTE_THEN_ALLREDUCE, OVERLAPPED };

/* One timed case (the slowest rank's ms); an AllReduce's result checked. */
static double timed(int kind, float *x, size_t n, uint64_t iters, int salt,
                    ringcc_comm_t comm, int nranks) {
  ringcc_request_t req;
  fill(x, n, salt);
  check(ringcc_barrier(comm, NULL), "barrier", comm);
  double t0 = now_ms();
  if (kind == OVERLAPPED)
    check(ringcc_group_start(), "ringcc_group_start", comm);
  if (kind == COMPUTE_THEN_ALLREDUCE)
    compute(iters);
  if (kind != COMPUTE)
    check(ringcc_allreduce(RINGCC_IN_PLACE, x, n, RINGCC_FLOAT32, RINGCC_SUM,
                           comm, NULL), "allreduce", comm);
  if (kind == OVERLAPPED) {
    check(ringcc_group_end_async(&req), "ringcc_group_end_async", comm);
    compute(iters);
    check(ringcc_wait(req), "ringcc_wait", comm);
  }
  if (kind == COMPUTE)
    compute(iters);
  double ms = slowest(now_ms() - t0, comm);
  if (kind != COMPUTE)
    verify(x, n, nranks, salt);
  return ms;
}

int main(int argc, char **argv) {
  size_t bytes = 16u << 20;
  double compute_ms = -1;
  int rounds = 15, opt, nranks;
  while ((opt = getopt(argc, argv, "s:c:r:h")) != -1) {
    if (opt == 's')
      bytes = parse_size(optarg);
    else if (opt == 'c')
      compute_ms = atof(optarg);
    else if (opt == 'r')
      rounds = atoi(optarg);
    else {
      fprintf(stderr, "usage: %s [-s bytes] [-c compute_ms] [-r rounds]\n",
              argv[0]);
      return opt == 'h' ? 0 : 2;
    }
  }
  if (rounds < 1 || rounds > 1000 || bytes < 4) {
    fprintf(stderr, "-r must be in [1, 1000] and -s at least 4\n");
    return 2;
  }
  ringcc_comm_t comm;
  check(ringcc_comm_init_env(&comm, NULL), "ringcc_comm_init_env", NULL);
  check(ringcc_comm_rank(comm, &me), "ringcc_comm_rank", comm);
  check(ringcc_comm_size(comm, &nranks), "ringcc_comm_size", comm);
  size_t n = bytes / 4;
  float *x = malloc(n * sizeof(*x));
  if (x == NULL)
    return 1;

  /* Calibrate: iterations per ms, and the blocking AllReduce's time. */
  double t0 = now_ms();
  compute(20000000);
  double per_ms = 20000000 / (now_ms() - t0);
  fill(x, n, 0);
  check(ringcc_allreduce(RINGCC_IN_PLACE, x, n, RINGCC_FLOAT32, RINGCC_SUM,
                         comm, NULL), "warm-up allreduce", comm);
  t0 = now_ms();
  check(ringcc_allreduce(RINGCC_IN_PLACE, x, n, RINGCC_FLOAT32, RINGCC_SUM,
                         comm, NULL), "warm-up allreduce", comm);
  double ar_ms = slowest(now_ms() - t0, comm);
  if (compute_ms < 0)
    compute_ms = ar_ms;
  per_ms = slowest(per_ms, comm); /* every rank computes alike */
  uint64_t iters = (uint64_t)(compute_ms * per_ms);

  double *c = calloc((size_t)rounds * 4, sizeof(double));
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 4; k++)
      c[r * 4 + k] = timed(k, x, n, iters, r * 4 + k, comm, nranks);
  double med[4];
  for (int k = 0; k < 4; k++) {
    double v[1000];
    for (int r = 0; r < rounds; r++)
      v[r] = c[r * 4 + k];
    med[k] = median(v, rounds);
  }
  if (me == 0) {
    printf("overlap: %d ranks, %zu bytes float32 sum, %d rounds, medians of "
           "the slowest rank (ms)\n", nranks, bytes, rounds);
    printf("  compute alone              %9.2f\n", med[0]);
    printf("  blocking allreduce alone   %9.2f\n", med[1]);
    printf("  compute + blocking call    %9.2f\n", med[2]);
    printf("  start, compute, wait       %9.2f  (%.0f %% of compute + "
           "blocking; %.0f %% of the allreduce hidden)\n", med[3],
           100 * med[3] / med[2],
           med[1] > 0 ? 100 * (med[2] - med[3]) / med[1] : 0);
  }
  free(c);
  free(x);
  check(ringcc_comm_destroy(comm), "ringcc_comm_destroy", comm);
  return 0;
}
