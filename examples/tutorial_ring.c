/*
 * tutorial_ring.c - ring AllReduce written by hand over ringcc_send and
 * ringcc_recv: a reduce-scatter, then an allgather, in chunks. The
 * walk-through is docs/tutorial.md.
 *
 *   build/bin/ringcc-run -np 4 build/examples/tutorial_ring [SIZE [ITERS]]
 *
 * For sizes from 4 KiB to SIZE (default 16 MiB), it runs the hand-written
 * ring and ringcc_allreduce on the same input, checks that both give the
 * same bits, and times both the way ringcc-bench does (time per call, the
 * slowest rank's; algbw = S / time; busbw = algbw * 2(n-1)/n). Exit status
 * 0 when every result matched.
 */
#include <ringcc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Elements per message: 16 KiB, less than one FIFO slot (64 KiB). A send
 * returns once its message is in the peer's FIFO, so every rank can send
 * before it receives without waiting for anybody: no deadlock. */
#define CHUNK 4096

/* Block b of the n blocks of count elements: [*start, *start + *len). */
static void block(size_t count, int n, int b, size_t *start, size_t *len) {
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  *start = per * (size_t)b < count ? per * (size_t)b : count;
  *len = count - *start < per ? count - *start : per;
}

/* One step of the ring: send block `out` to the next rank and receive
 * block `in` from the previous one, chunk by chunk; the received chunk is
 * added into data (reduce) or stored (gather). */
static ringcc_result_t ring_step(float *data, float *tmp, size_t count, int n,
                                 int out, int in, int reduce,
                                 ringcc_comm_t comm, int next, int prev) {
  size_t so, sl, ro, rl;
  block(count, n, out, &so, &sl);
  block(count, n, in, &ro, &rl);
  for (size_t off = 0; off < sl || off < rl; off += CHUNK) {
    size_t s = off < sl ? (sl - off < CHUNK ? sl - off : CHUNK) : 0;
    size_t r = off < rl ? (rl - off < CHUNK ? rl - off : CHUNK) : 0;
    ringcc_result_t e = RINGCC_SUCCESS;
    if (s > 0)
      e = ringcc_send(data + so + off, s, RINGCC_FLOAT32, next, comm, NULL);
    if (e == RINGCC_SUCCESS && r > 0)
      e = ringcc_recv(reduce ? tmp : data + ro + off, r, RINGCC_FLOAT32, prev,
                      comm, NULL);
    if (e != RINGCC_SUCCESS)
      return e;
    for (size_t i = 0; reduce && i < r; i++)
      data[ro + off + i] += tmp[i];
  }
  return RINGCC_SUCCESS;
}

/* In place: data holds this rank's input, then everybody's sum. */
static ringcc_result_t tutorial_allreduce(float *data, size_t count,
                                          ringcc_comm_t comm) {
  static float tmp[CHUNK];
  int rank, n;
  ringcc_comm_rank(comm, &rank);
  ringcc_comm_size(comm, &n);
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  ringcc_result_t e = RINGCC_SUCCESS;
  /* Reduce-scatter: at step s, pass on block rank-s (our partial sum of
   * it) and add the previous rank's partial sum of block rank-s-1 into
   * ours. After n-1 steps block rank+1 holds everybody's sum. */
  for (int s = 0; s < n - 1 && e == RINGCC_SUCCESS; s++)
    e = ring_step(data, tmp, count, n, (rank - s + n) % n,
                  (rank - s - 1 + 2 * n) % n, 1, comm, next, prev);
  /* Allgather: at step s, pass on block rank+1-s (finished) and store the
   * finished block rank-s that the previous rank passes on. */
  for (int s = 0; s < n - 1 && e == RINGCC_SUCCESS; s++)
    e = ring_step(data, tmp, count, n, (rank + 1 - s + n) % n,
                  (rank - s + n) % n, 0, comm, next, prev);
  return e;
}

/* ---- checking and timing, as ringcc-bench does ------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef ringcc_result_t (*allreduce_fn)(float *, size_t, ringcc_comm_t);

static ringcc_result_t library_allreduce(float *data, size_t count,
                                         ringcc_comm_t comm) {
  return ringcc_allreduce(RINGCC_IN_PLACE, data, count, RINGCC_FLOAT32,
                          RINGCC_SUM, comm, NULL);
}

static void fill(float *x, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) /* small integers: every sum exact */
    x[i] = (float)((rank + 1) * (int)(i % 13 + 1));
}

/* Seconds per call on the slowest rank (the sums grow, in place, from call
 * to call: no matter for the time); -1 on a failure. */
static double time_it(allreduce_fn f, float *x, size_t count, int iters,
                      ringcc_comm_t comm) {
  for (int w = 0; w < (iters > 1 ? 2 : 0); w++)
    if (f(x, count, comm) != RINGCC_SUCCESS)
      return -1;
  if (ringcc_barrier(comm, NULL) != RINGCC_SUCCESS)
    return -1;
  double t0 = now_s();
  for (int i = 0; i < iters; i++)
    if (f(x, count, comm) != RINGCC_SUCCESS)
      return -1;
  double t = (now_s() - t0) / iters;
  if (ringcc_allreduce(RINGCC_IN_PLACE, &t, 1, RINGCC_FLOAT64, RINGCC_MAX,
                       comm, NULL) != RINGCC_SUCCESS)
    return -1;
  return t;
}

int main(int argc, char **argv) {
  ringcc_comm_t comm;
  int rank, n, wrong = 0;
  size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : 16 << 20;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  if (argc > 1 && strpbrk(argv[1], "kK"))
    max_bytes <<= 10;
  if (argc > 1 && strpbrk(argv[1], "mM"))
    max_bytes <<= 20;
  if (max_bytes < 4 || iters < 1) {
    fprintf(stderr, "usage: tutorial_ring [SIZE (bytes, or 256K, 16M) "
            "[ITERS]]\n");
    return 2;
  }
  if (ringcc_comm_init_env(&comm, NULL) != RINGCC_SUCCESS) {
    fprintf(stderr, "init: %s\n", ringcc_comm_last_error(NULL));
    return 1;
  }
  ringcc_comm_rank(comm, &rank);
  ringcc_comm_size(comm, &n);
  size_t max_count = max_bytes / sizeof(float);
  float *mine = malloc(max_count * sizeof(float));
  float *theirs = malloc(max_count * sizeof(float));
  if (mine == NULL || theirs == NULL)
    return 1;
  if (rank == 0)
    printf("# tutorial_ring: ring AllReduce over ringcc_send/ringcc_recv, %d "
           "ranks, float32 sum, %d iterations\n#%11s %10s  %12s %7s %7s  %12s "
           "%7s %7s  %s\n", n, iters, "size(B)", "count", "tutorial(us)",
           "algbw", "busbw", "library(us)", "algbw", "busbw", "check");
  for (size_t count = 1024;; count *= 4) {
    if (count > max_count)
      count = max_count;
    /* Same input, both ways; the same bits out (the sums are exact). */
    fill(mine, count, rank);
    fill(theirs, count, rank);
    if (tutorial_allreduce(mine, count, comm) != RINGCC_SUCCESS ||
        library_allreduce(theirs, count, comm) != RINGCC_SUCCESS) {
      fprintf(stderr, "rank %d: %s\n", rank, ringcc_comm_last_error(comm));
      return 1;
    }
    int bad = memcmp(mine, theirs, count * sizeof(float)) != 0;
    ringcc_allreduce(RINGCC_IN_PLACE, &bad, 1, RINGCC_INT32, RINGCC_MAX, comm,
                     NULL);
    wrong |= bad;
    double t1 = time_it(tutorial_allreduce, mine, count, iters, comm);
    double t2 = time_it(library_allreduce, theirs, count, iters, comm);
    if (t1 < 0 || t2 < 0) {
      fprintf(stderr, "rank %d: %s\n", rank, ringcc_comm_last_error(comm));
      return 1;
    }
    double S = count * sizeof(float), f = 2.0 * (n - 1) / n;
    if (rank == 0)
      printf(" %11zu %10zu  %12.1f %7.2f %7.2f  %12.1f %7.2f %7.2f  %s\n",
             (size_t)S, count, t1 * 1e6, S / t1 / 1e9, S / t1 / 1e9 * f,
             t2 * 1e6, S / t2 / 1e9, S / t2 / 1e9 * f, bad ? "WRONG" : "ok");
    if (count >= max_count)
      break;
  }
  if (rank == 0)
    printf("tutorial_ring: %s\n", wrong ? "results DIFFER from ringcc_allreduce"
                                        : "every result matches "
                                          "ringcc_allreduce");
  free(mine);
  free(theirs);
  ringcc_comm_destroy(comm);
  return wrong;
}
