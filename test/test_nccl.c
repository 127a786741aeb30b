/*
 * test_nccl.c - libnccl.so.2 (lib/nccl/) as an NCCL program uses it:
 * compiled against a real nccl.h (the CUDA toolkit's by make test; the
 * torch wheel's by scripts/nccl-check.sh), linked to the built libnccl.so.2,
 * nothing of ringcc's included.
 *
 * Each test first checks that the library that defines ncclAllReduce is the
 * one built here (its path, and ncclGetUniqueId giving ringcc's id, magic
 * "RCCI"). Ranks are forked processes: the parent makes the id after the
 * fork (ncclGetUniqueId starts the rendezvous thread) and hands it over in
 * shared memory. Host buffers with a NULL stream, every element checked
 * against an exact answer: inputs are small integers whose sums, products,
 * minima, maxima and averages are exact in every datatype (float8 e5m2
 * included), so any reduction order gives the same bits.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RCC_NCCL_SO_PATH
#error "the Makefile passes the built library's path as RCC_NCCL_SO_PATH"
#endif

/* ---- running ranks ------------------------------------------------------- */

struct shared {
  volatile int id_ready;
  ncclUniqueId id;
};

typedef int (*body_fn)(ncclComm_t comm, int rank, int n, void *arg);

static int fail(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static int ok(int rank, ncclResult_t r, const char *what) {
  if (r == ncclSuccess)
    return 1;
  fail(rank, "%s returned %d (%s): %s", what, (int)r, ncclGetErrorString(r),
       ncclGetLastError(NULL));
  return 0;
}

/* Forks n ranks; each makes its communicator and runs body(comm, rank, n,
 * arg) — or, with init 0, body(NULL, rank, n, the id) and the body makes
 * it. Returns the number of ranks that failed (died, or exited nonzero). */
static int run_ranks(int n, body_fn body, void *arg, int init, double timeout_s) {
  struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(sh != MAP_FAILED);
  pid_t pids[16];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    cr_assert(pids[r] >= 0);
    if (pids[r] == 0) {
      while (!__atomic_load_n(&sh->id_ready, __ATOMIC_ACQUIRE))
        usleep(1000);
      ncclComm_t comm = NULL;
      if (init && !ok(r, ncclCommInitRank(&comm, n, sh->id, r), "ncclCommInitRank"))
        _exit(1);
      int bad = body(comm, r, n, init ? arg : (void *)&sh->id);
      if (init && comm != NULL && !bad)
        bad = !ok(r, ncclCommDestroy(comm), "ncclCommDestroy");
      _exit(bad ? 1 : 0);
    }
  }
  cr_assert_eq(ncclGetUniqueId(&sh->id), ncclSuccess, "ncclGetUniqueId: %s",
               ncclGetLastError(NULL));
  __atomic_store_n(&sh->id_ready, 1, __ATOMIC_RELEASE);
  int failed = 0, left = n;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int done[16] = {0};
  while (left > 0) {
    for (int r = 0; r < n; r++) {
      int st;
      if (done[r] || waitpid(pids[r], &st, WNOHANG) != pids[r])
        continue;
      done[r] = 1;
      left--;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "rank %d: exit status %d, signal %d\n", r,
                WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        failed++;
      }
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (left > 0 && (t.tv_sec - t0.tv_sec) + 1e-9 * (t.tv_nsec - t0.tv_nsec) > timeout_s) {
      for (int r = 0; r < n; r++)
        if (!done[r]) {
          fprintf(stderr, "rank %d: still running after %.0f s: killed\n", r, timeout_s);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          failed++;
        }
      break;
    }
    usleep(2000);
  }
  munmap(sh, sizeof *sh);
  return failed;
}

/* The library in use is the one built here, and it is ringcc's. */
static void check_library(void) {
  Dl_info info;
  cr_assert(dladdr((void *)ncclAllReduce, &info) && info.dli_fname != NULL);
  char got[PATH_MAX], want[PATH_MAX];
  cr_assert(realpath(info.dli_fname, got) != NULL);
  cr_assert(realpath(RCC_NCCL_SO_PATH, want) != NULL);
  cr_assert_str_eq(got, want, "ncclAllReduce comes from %s, not %s", got, want);
  int v = 0;
  cr_assert_eq(ncclGetVersion(&v), ncclSuccess);
  cr_assert_geq(v, 22800, "ncclGetVersion %d", v);
}

/* ---- exact values ----------------------------------------------------------- */

/* x (a small integer) in NCCL datatype dt, exactly. */
static void encode_float(double x, int ebits, int mbits, void *out, size_t size) {
  uint64_t bits = 0;
  if (x != 0) {
    int e;
    double m = frexp(fabs(x), &e); /* x = m * 2^e, m in [0.5, 1) */
    uint64_t man = (uint64_t)ldexp(m * 2 - 1, mbits);
    uint64_t biased = (uint64_t)(e - 1 + ((1 << (ebits - 1)) - 1));
    bits = (biased << mbits) | man;
    if (x < 0)
      bits |= (uint64_t)1 << (ebits + mbits);
  }
  memcpy(out, &bits, size);
}

static size_t dt_size(ncclDataType_t dt) {
  switch (dt) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  default: return 8;
  }
}

static int dt_unsigned(ncclDataType_t dt) {
  return dt == ncclUint8 || dt == ncclUint32 || dt == ncclUint64;
}

static void encode(ncclDataType_t dt, long v, void *out) {
  switch (dt) {
  case ncclInt8: case ncclUint8: { int8_t x = (int8_t)v; memcpy(out, &x, 1); break; }
  case ncclInt32: case ncclUint32: { int32_t x = (int32_t)v; memcpy(out, &x, 4); break; }
  case ncclInt64: case ncclUint64: { int64_t x = v; memcpy(out, &x, 8); break; }
  case ncclFloat32: { float x = (float)v; memcpy(out, &x, 4); break; }
  case ncclFloat64: { double x = (double)v; memcpy(out, &x, 8); break; }
  case ncclFloat16: encode_float((double)v, 5, 10, out, 2); break;
  case ncclBfloat16: encode_float((double)v, 8, 7, out, 2); break;
  case ncclFloat8e4m3: encode_float((double)v, 4, 3, out, 1); break;
  default: encode_float((double)v, 5, 2, out, 1); break; /* e5m2 */
  }
}

/* Rank r's value of element i for op: sums in -1..1 (0..1 unsigned),
 * minima and maxima in -2..2 (0..4), products 1 but on one rank (2 or -1),
 * averages the same on every rank (so the sum is exact and divides). */
static long value(ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t i) {
  int u = dt_unsigned(dt);
  switch (op) {
  case ncclSum: return (long)((i * 7 + (size_t)r * 3) % (u ? 2 : 3)) - (u ? 0 : 1);
  case ncclProd: return (size_t)r == i % (size_t)n ? (u || i % 2 ? 2 : -1) : 1;
  case ncclAvg: return (long)(i % (u ? 3 : 5)) - (u ? 0 : 2);
  default: return (long)((i * 5 + (size_t)r * 3) % 5) - (u ? 0 : 2);
  }
}

static long expected(ncclDataType_t dt, ncclRedOp_t op, int n, size_t i) {
  long acc = value(dt, op, 0, n, i);
  for (int r = 1; r < n; r++) {
    long v = value(dt, op, r, n, i);
    acc = op == ncclSum ? acc + v : op == ncclProd ? acc * v
          : op == ncclMin ? (v < acc ? v : acc) : op == ncclMax ? (v > acc ? v : acc)
          : acc;
  }
  return acc; /* avg: every rank's value */
}

static const ncclDataType_t dtypes[] = {
    ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64,
    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3,
    ncclFloat8e5m2};
static const ncclRedOp_t redops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
#define NDT (sizeof dtypes / sizeof dtypes[0])
#define NOPS (sizeof redops / sizeof redops[0])

static int check(int rank, const char *what, ncclDataType_t dt, ncclRedOp_t op,
                 const unsigned char *got, size_t first, size_t count, int n) {
  size_t es = dt_size(dt);
  unsigned char want[8];
  for (size_t j = 0; j < count; j++) {
    encode(dt, expected(dt, op, n, first + j), want);
    if (memcmp(got + j * es, want, es) != 0)
      return fail(rank, "%s datatype %d op %d: element %zu differs (want %ld)",
                  what, (int)dt, (int)op, first + j, expected(dt, op, n, first + j));
  }
  return 0;
}

/* ---- every collective x datatype x op ------------------------------------- */

static const size_t counts[] = {0, 1, 7, 1031, 70000};

static int body_collectives(ncclComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t maxc = counts[sizeof counts / sizeof counts[0] - 1];
  unsigned char *in = malloc(maxc * 8 * (size_t)n), *out = malloc(maxc * 8 * (size_t)n);
  int bad = 0;
  for (size_t d = 0; d < NDT && !bad; d++)
    for (size_t o = 0; o < NOPS && !bad; o++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0] && !bad; c++) {
        ncclDataType_t dt = dtypes[d];
        ncclRedOp_t op = redops[o];
        size_t count = counts[c], es = dt_size(dt);
        if (count > 1031 && (o > 0 || es < 4))
          continue; /* the large count once per wide datatype */
        for (size_t i = 0; i < count * (size_t)n; i++)
          encode(dt, value(dt, op, rank, n, i % count), in + i * es);
        /* allreduce, out of place and in place */
        bad |= !ok(rank, ncclAllReduce(in, out, count, dt, op, comm, NULL), "ncclAllReduce");
        bad = bad || check(rank, "allreduce", dt, op, out, 0, count, n);
        memcpy(out, in, count * es);
        bad = bad || !ok(rank, ncclAllReduce(out, out, count, dt, op, comm, NULL),
                         "ncclAllReduce in place");
        bad = bad || check(rank, "allreduce in place", dt, op, out, 0, count, n);
        /* reduce to a rotating root */
        int root = (int)((c + o) % (size_t)n);
        bad = bad || !ok(rank, ncclReduce(in, out, count, dt, op, root, comm, NULL), "ncclReduce");
        if (!bad && rank == root)
          bad = check(rank, "reduce", dt, op, out, 0, count, n);
        /* reduce-scatter: block r of n blocks of count (the same values) */
        bad = bad || !ok(rank, ncclReduceScatter(in, out, count, dt, op, comm, NULL),
                         "ncclReduceScatter");
        bad = bad || check(rank, "reduce_scatter", dt, op, out, 0, count, n);
        if (o != 0)
          continue;
        /* data movement: block of rank q holds q's values (sum's pattern) */
        bad = bad || !ok(rank, ncclAllGather(in, out, count, dt, comm, NULL), "ncclAllGather");
        for (int q = 0; q < n && !bad; q++)
          for (size_t j = 0; j < count && !bad; j++) {
            unsigned char want[8];
            encode(dt, value(dt, op, q, n, j), want);
            if (memcmp(out + ((size_t)q * count + j) * es, want, es))
              bad = fail(rank, "allgather dt %d: block %d element %zu", (int)dt, q, j);
          }
        memcpy(out, in, count * es);
        bad = bad || !ok(rank, ncclBroadcast(in, out, count, dt, root, comm, NULL), "ncclBroadcast");
        for (size_t j = 0; j < count && !bad; j++) {
          unsigned char want[8];
          encode(dt, value(dt, op, root, n, j), want);
          if (memcmp(out + j * es, want, es))
            bad = fail(rank, "broadcast dt %d root %d: element %zu", (int)dt, root, j);
        }
        memcpy(out, in, count * es);
        bad = bad || !ok(rank, ncclBcast(out, count, dt, root, comm, NULL), "ncclBcast");
        for (size_t j = 0; j < count && !bad; j++) {
          unsigned char want[8];
          encode(dt, value(dt, op, root, n, j), want);
          if (memcmp(out + j * es, want, es))
            bad = fail(rank, "bcast dt %d root %d: element %zu", (int)dt, root, j);
        }
        /* alltoall: block j of rank q is value(q, j) over block j's elements */
        bad = bad || !ok(rank, ncclAlltoAll(in, out, count, dt, comm, NULL), "ncclAlltoAll");
        for (int q = 0; q < n && !bad; q++)
          for (size_t j = 0; j < count && !bad; j++) {
            unsigned char want[8];
            encode(dt, value(dt, op, q, n, j), want);
            if (memcmp(out + ((size_t)q * count + j) * es, want, es))
              bad = fail(rank, "alltoall dt %d: block %d element %zu", (int)dt, q, j);
          }
        /* gather and scatter */
        bad = bad || !ok(rank, ncclGather(in, out, count, dt, root, comm, NULL), "ncclGather");
        for (int q = 0; q < n && !bad && rank == root; q++)
          for (size_t j = 0; j < count && !bad; j++) {
            unsigned char want[8];
            encode(dt, value(dt, op, q, n, j), want);
            if (memcmp(out + ((size_t)q * count + j) * es, want, es))
              bad = fail(rank, "gather dt %d: block %d element %zu", (int)dt, q, j);
          }
        bad = bad || !ok(rank, ncclScatter(in, out, count, dt, root, comm, NULL), "ncclScatter");
        for (size_t j = 0; j < count && !bad; j++) {
          unsigned char want[8];
          encode(dt, value(dt, op, root, n, j), want);
          if (memcmp(out + j * es, want, es))
            bad = fail(rank, "scatter dt %d root %d: element %zu", (int)dt, root, j);
        }
      }
  free(in);
  free(out);
  return bad;
}

#define EVERY(n_)                                                              \
  Test(nccl, collectives_n##n_, .timeout = 300) {                              \
    check_library();                                                           \
    cr_assert_eq(run_ranks(n_, body_collectives, NULL, 1, 280), 0);            \
  }
EVERY(1)
EVERY(2)
EVERY(3)
EVERY(4)
EVERY(5)
EVERY(6)
EVERY(7)
EVERY(8)

/* ---- groups: both sides send 8 MiB first; alltoallv by send/recv ---------- */

static int body_groups(ncclComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t big = (8u << 20) / 4;
  float *s = malloc(big * 4), *r = malloc(big * 4);
  int bad = 0;
  int peer = rank ^ 1;
  if (peer < n) {
    for (size_t i = 0; i < big; i++)
      s[i] = (float)(rank * 1000 + (int)(i % 997));
    bad |= !ok(rank, ncclGroupStart(), "ncclGroupStart");
    bad |= !ok(rank, ncclSend(s, big, ncclFloat32, peer, comm, NULL), "ncclSend");
    bad |= !ok(rank, ncclRecv(r, big, ncclFloat32, peer, comm, NULL), "ncclRecv");
    bad = bad || !ok(rank, ncclGroupEnd(), "ncclGroupEnd");
    for (size_t i = 0; i < big && !bad; i++)
      if (r[i] != (float)(peer * 1000 + (int)(i % 997)))
        bad = fail(rank, "8 MiB exchange: element %zu is %g", i, r[i]);
  }
  /* alltoallv: rank a sends (a + 2b) * 1000 + 7 elements to b (self too) */
  size_t sc[8], rc[8], so = 0, ro = 0;
  for (int q = 0; q < n; q++) {
    sc[q] = (size_t)(rank + 2 * q) * 1000 + 7;
    rc[q] = (size_t)(q + 2 * rank) * 1000 + 7;
  }
  int32_t *sb = malloc(64u << 20), *rb = malloc(64u << 20);
  bad = bad || !ok(rank, ncclGroupStart(), "ncclGroupStart");
  for (int q = 0; q < n && !bad; q++) {
    for (size_t j = 0; j < sc[q]; j++)
      sb[so + j] = rank * 100000 + q * 1000 + (int)(j % 1000);
    bad |= !ok(rank, ncclSend(sb + so, sc[q], ncclInt32, q, comm, NULL), "ncclSend");
    bad |= !ok(rank, ncclRecv(rb + ro, rc[q], ncclInt32, q, comm, NULL), "ncclRecv");
    so += sc[q];
    ro += rc[q];
  }
  bad = bad || !ok(rank, ncclGroupEnd(), "ncclGroupEnd");
  ro = 0;
  for (int q = 0; q < n && !bad; q++) {
    for (size_t j = 0; j < rc[q] && !bad; j++)
      if (rb[ro + j] != q * 100000 + rank * 1000 + (int)(j % 1000))
        bad = fail(rank, "alltoallv: from %d element %zu is %d", q, j, rb[ro + j]);
    ro += rc[q];
  }
  free(s), free(r), free(sb), free(rb);
  return bad;
}

Test(nccl, groups_n2, .timeout = 120) {
  check_library();
  cr_assert_eq(run_ranks(2, body_groups, NULL, 1, 100), 0);
}
Test(nccl, groups_n5, .timeout = 120) {
  check_library();
  cr_assert_eq(run_ranks(5, body_groups, NULL, 1, 100), 0);
}

/* ---- split, premul-sum ------------------------------------------------------ */

static int body_split_premul(ncclComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  ncclComm_t sub = NULL;
  int color = rank == n - 1 ? NCCL_SPLIT_NOCOLOR : rank % 2;
  int bad = !ok(rank, ncclCommSplit(comm, color, -rank, &sub, NULL), "ncclCommSplit");
  if (bad)
    return 1;
  if (color == NCCL_SPLIT_NOCOLOR) {
    if (sub != NULL)
      return fail(rank, "NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    int size = 0, me = -1, members = 0;
    for (int q = 0; q < n - 1; q++)
      members += q % 2 == color;
    bad |= !ok(rank, ncclCommCount(sub, &size), "ncclCommCount");
    bad |= !ok(rank, ncclCommUserRank(sub, &me), "ncclCommUserRank");
    if (!bad && size != members)
      bad = fail(rank, "split of color %d has %d ranks, expected %d", color, size, members);
    /* key -rank: the highest rank is rank 0 of the split */
    int above = 0;
    for (int q = rank + 1; q < n - 1; q++)
      above += q % 2 == color;
    if (!bad && me != above)
      bad = fail(rank, "rank %d in the split, expected %d", me, above);
    int32_t x[3] = {rank, 1, -rank}, y[3];
    bad = bad || !ok(rank, ncclAllReduce(x, y, 3, ncclInt32, ncclSum, sub, NULL), "split allreduce");
    int32_t sum = 0;
    for (int q = 0; q < n - 1; q++)
      sum += q % 2 == color ? q : 0;
    if (!bad && (y[0] != sum || y[1] != members || y[2] != -sum))
      bad = fail(rank, "split allreduce: %d %d %d", y[0], y[1], y[2]);
    bad |= !ok(rank, ncclCommDestroy(sub), "destroy the split");
  }
  /* premul-sum: 0.5 times each input, summed */
  float half = 0.5f, in[1000], out[1000];
  ncclRedOp_t op;
  bad = bad || !ok(rank, ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32,
                                                  ncclScalarHostImmediate, comm),
                   "ncclRedOpCreatePreMulSum");
  for (int i = 0; i < 1000; i++)
    in[i] = (float)(rank + i % 3);
  bad = bad || !ok(rank, ncclAllReduce(in, out, 1000, ncclFloat32, op, comm, NULL),
                   "premul allreduce");
  for (int i = 0; i < 1000 && !bad; i++) {
    float want = 0;
    for (int q = 0; q < n; q++)
      want += 0.5f * (float)(q + i % 3);
    if (out[i] != want)
      bad = fail(rank, "premul: element %d is %g, want %g", i, out[i], want);
  }
  bad = bad || !ok(rank, ncclRedOpDestroy(op, comm), "ncclRedOpDestroy");
  if (!bad && ncclAllReduce(in, out, 10, ncclFloat32, op, comm, NULL) != ncclInvalidArgument)
    bad = fail(rank, "a destroyed premul op was accepted");
  return bad;
}

Test(nccl, split_premul_n5, .timeout = 120) {
  check_library();
  cr_assert_eq(run_ranks(5, body_split_premul, NULL, 1, 100), 0);
}

/* ---- non-blocking init and calls --------------------------------------------- */

static int body_nonblocking(ncclComm_t unused, int rank, int n, void *arg) {
  (void)unused;
  const ncclUniqueId *id = arg;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, n, *id, rank, &cfg);
  if (r != ncclInProgress && r != ncclSuccess)
    return fail(rank, "non-blocking init returned %d: %s", (int)r, ncclGetLastError(NULL));
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 60000 && state == ncclInProgress; i++) {
    if (!ok(rank, ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError"))
      return 1;
    if (state == ncclInProgress)
      usleep(1000);
  }
  if (state != ncclSuccess)
    return fail(rank, "init ended with %d: %s", (int)state, ncclGetLastError(NULL));
  int64_t x = rank + 1, y = 0;
  int bad = !ok(rank, ncclAllReduce(&x, &y, 1, ncclInt64, ncclSum, comm, NULL), "allreduce");
  if (!bad && y != (int64_t)n * (n + 1) / 2)
    bad = fail(rank, "allreduce gave %lld", (long long)y);
  /* revoke on a non-blocking communicator: quiescent when it returns */
  state = ncclInProgress;
  bad = bad || !ok(rank, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "ncclCommRevoke") ||
        !ok(rank, ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
  if (!bad && state != ncclSuccess)
    bad = fail(rank, "after ncclCommRevoke the async state is %d", (int)state);
  return bad | !ok(rank, ncclCommDestroy(comm), "ncclCommDestroy");
}

Test(nccl, nonblocking_init_n3, .timeout = 120) {
  check_library();
  cr_assert_eq(run_ranks(3, body_nonblocking, NULL, 0, 100), 0);
}

/* ---- one process, several ranks: ncclCommInitAll driven by a group ------ */

Test(nccl, init_all_group, .timeout = 120) {
  check_library();
  enum { N = 4 };
  ncclComm_t comms[N];
  cr_assert_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess, "%s", ncclGetLastError(NULL));
  static float bufs[N][4096];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < 4096; i++)
      bufs[r][i] = (float)(r * i % 17);
  cr_assert_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++)
    cr_assert_eq(ncclAllReduce(bufs[r], bufs[r], 4096, ncclFloat32, ncclSum, comms[r], NULL),
                 ncclSuccess, "%s", ncclGetLastError(NULL));
  cr_assert_eq(ncclGroupEnd(), ncclSuccess, "%s", ncclGetLastError(NULL));
  for (int r = 0; r < N; r++) {
    int rank = -1;
    cr_assert_eq(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    cr_assert_eq(rank, r);
    for (int i = 0; i < 4096; i++) {
      float want = 0;
      for (int q = 0; q < N; q++)
        want += (float)(q * i % 17);
      cr_assert_eq(bufs[r][i], want, "comm %d element %d", r, i);
    }
  }
  for (int r = 0; r < N; r++)
    cr_assert_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}

/* ---- errors: codes and messages ---------------------------------------------- */

static int expect_error(int rank, ncclResult_t got, ncclResult_t want,
                        const char *words, const char *what) {
  const char *msg = ncclGetLastError(NULL);
  if (got != want)
    return fail(rank, "%s returned %d, expected %d (%s)", what, (int)got, (int)want, msg);
  if (strstr(msg, words) == NULL)
    return fail(rank, "%s: the message does not say '%s': %s", what, words, msg);
  return 0;
}

static int body_errors(ncclComm_t comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  float x[4] = {0}, y[4];
  int bad = 0;
  bad |= expect_error(rank, ncclAllReduce(x, y, 4, (ncclDataType_t)99, ncclSum, comm, NULL),
                      ncclInvalidArgument, "'datatype'", "datatype 99");
  bad |= expect_error(rank, ncclAllReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)77, comm, NULL),
                      ncclInvalidArgument, "'op'", "op 77");
  bad |= expect_error(rank, ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, NULL, NULL),
                      ncclInvalidArgument, "'comm'", "comm NULL");
  bad |= expect_error(rank, ncclAllReduce(NULL, y, 4, ncclFloat32, ncclSum, comm, NULL),
                      ncclInvalidArgument, "sendbuf", "sendbuff NULL");
  bad |= expect_error(rank, ncclReduce(x, y, 4, ncclFloat32, ncclSum, 42, comm, NULL),
                      ncclInvalidArgument, "'root'", "root 42");
  bad |= expect_error(rank, ncclGroupEnd(), ncclInvalidUsage, "without ncclGroupStart",
                      "ncclGroupEnd alone");
  bad |= expect_error(rank, ncclCommShrink(comm, NULL, 0, NULL, NULL, 0), ncclInvalidArgument,
                      "newcomm", "ncclCommShrink without newcomm");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0) /* the wheel's header */
  bad |= expect_error(rank, ncclCommSuspend(comm, 0), ncclInvalidUsage,
                      "not supported", "ncclCommSuspend");
#endif
  ncclWindow_t win;
  bad |= expect_error(rank, ncclCommWindowRegister(comm, x, 16, &win, 0),
                      ncclInvalidUsage, "not supported", "ncclCommWindowRegister");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  ncclComm_t sub;
  bad |= expect_error(rank, ncclCommSplit(comm, 0, 0, &sub, &cfg), ncclInvalidArgument,
                      "magic", "a config without its magic");
  /* codes and their strings */
  for (int r = 0; r < ncclNumResults; r++)
    if (ncclGetErrorString((ncclResult_t)r) == NULL)
      bad |= fail(rank, "no string for result %d", r);
  if (strcmp(ncclGetErrorString(ncclRemoteError), ncclGetErrorString(ncclSystemError)) == 0)
    bad |= fail(rank, "ncclRemoteError and ncclSystemError read alike");
  /* still usable */
  int32_t v = 1, w = 0;
  bad = bad || !ok(rank, ncclAllReduce(&v, &w, 1, ncclInt32, ncclSum, comm, NULL), "allreduce");
  if (!bad && w != n)
    bad = fail(rank, "allreduce after the errors gave %d", w);
  return bad;
}

Test(nccl, errors_n2, .timeout = 60) {
  check_library();
  cr_assert_eq(run_ranks(2, body_errors, NULL, 1, 50), 0);
}

/* ---- a killed rank: ncclRemoteError, then ncclCommAbort returns ------------ */

static int body_killed(ncclComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  int32_t v = 1, w = 0;
  if (!ok(rank, ncclAllReduce(&v, &w, 1, ncclInt32, ncclSum, comm, NULL), "first allreduce"))
    return 1;
  if (rank == n - 1)
    raise(SIGKILL); /* the parent sees this rank die: expected */
  size_t big = 1 << 20;
  float *x = calloc(big, 4);
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 50 && r == ncclSuccess; i++)
    r = ncclAllReduce(x, x, big, ncclFloat32, ncclSum, comm, NULL);
  free(x);
  if (r != ncclRemoteError)
    return fail(rank, "after a peer died: %d (%s), expected ncclRemoteError: %s", (int)r,
                ncclGetErrorString(r), ncclGetLastError(NULL));
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async == ncclSuccess)
    return fail(rank, "ncclCommGetAsyncError says %d after the failure", (int)async);
  if (!ok(rank, ncclCommAbort(comm), "ncclCommAbort"))
    return 1;
  _exit(0); /* the communicator is gone: skip run_ranks' destroy */
}

Test(nccl, killed_rank_n3, .timeout = 120) {
  check_library();
  setenv("RINGCC_TIMEOUT_MS", "20000", 1);
  cr_assert_eq(run_ranks(3, body_killed, NULL, 1, 100), 1, "only the killed rank fails");
}

/* ---- NCCL_* variables: mapped where ringcc has one, RINGCC_* wins -------- */

Test(nccl, environment, .timeout = 30) {
  check_library();
  setenv("NCCL_ALGO", "Ring", 1);
  setenv("NCCL_MAX_NCHANNELS", "64", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("RINGCC_SHM_DISABLE", "0", 1);  /* wins */
  setenv("NCCL_DEBUG_SUBSYS", "^INIT", 1); /* no equivalent: not used */
  unsetenv("RINGCC_ALGO");
  unsetenv("RINGCC_NCHANNELS");
  unsetenv("RINGCC_DEBUG_SUBSYS");
  ncclUniqueId id;
  cr_assert_eq(ncclGetUniqueId(&id), ncclSuccess); /* reads them, once */
  cr_assert_str_eq(getenv("RINGCC_ALGO"), "ring");
  cr_assert_str_eq(getenv("RINGCC_NCHANNELS"), "32");
  cr_assert_str_eq(getenv("RINGCC_SHM_DISABLE"), "0");
  cr_assert_null(getenv("RINGCC_DEBUG_SUBSYS"));
  cr_assert_eq(memcmp(id.internal, "RCCI", 4), 0, "ncclUniqueId carries ringcc's id");
}

/* ---- ncclGroupSimulateEnd: the tuner's time, nothing run ------------------- */

static int body_simulate(ncclComm_t comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  static float x[1 << 20];
  float t[3];
  size_t sizes[3] = {1, 1 << 16, 1 << 20};
  for (int k = 0; k < 3; k++) {
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    x[0] = 42;
    if (!ok(rank, ncclGroupStart(), "ncclGroupStart") ||
        !ok(rank, ncclAllReduce(x, x, sizes[k], ncclFloat32, ncclSum, comm, NULL), "allreduce") ||
        !ok(rank, ncclGroupSimulateEnd(&sim), "ncclGroupSimulateEnd"))
      return 1;
    if (x[0] != 42)
      return fail(rank, "the simulated allreduce ran");
    t[k] = sim.estimatedTime;
  }
  if (!(t[0] > 0 && t[0] < t[1] && t[1] < t[2] && t[2] < 10))
    return fail(rank, "predicted times %g, %g, %g s: not positive and growing with size",
                t[0], t[1], t[2]);
  ncclSimInfo_t bad;
  memset(&bad, 0, sizeof bad);
  ncclGroupStart();
  return expect_error(rank, ncclGroupSimulateEnd(&bad), ncclInvalidArgument,
                      "simInfo", "an uninitialised ncclSimInfo_t") ||
         !ok(rank, ncclGroupEnd(), "ncclGroupEnd after the refusal");
}

Test(nccl, simulate_n3, .timeout = 60) {
  check_library();
  cr_assert_eq(run_ranks(3, body_simulate, NULL, 1, 50), 0);
}

/* ---- ncclCommShrink: the last rank left out, the others go on ------------- */

static int body_shrink(ncclComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  if (rank == n - 1)
    return 0; /* excluded: it takes no part */
  int out_rank = n - 1, size = 0, me = -1;
  ncclComm_t small = NULL;
  if (!ok(rank, ncclCommShrink(comm, &out_rank, 1, &small, NULL, NCCL_SHRINK_DEFAULT),
          "ncclCommShrink"))
    return 1;
  if (small == NULL)
    return fail(rank, "ncclCommShrink gave no communicator to a survivor");
  int bad = !ok(rank, ncclCommCount(small, &size), "ncclCommCount") ||
            !ok(rank, ncclCommUserRank(small, &me), "ncclCommUserRank");
  if (!bad && (size != n - 1 || me != rank))
    bad = fail(rank, "shrunk communicator: rank %d of %d, expected %d of %d", me, size,
               rank, n - 1);
  int64_t x = rank + 1, y = 0;
  bad = bad || !ok(rank, ncclAllReduce(&x, &y, 1, ncclInt64, ncclSum, small, NULL),
                   "allreduce after the shrink");
  if (!bad && y != (int64_t)(n - 1) * n / 2)
    bad = fail(rank, "allreduce after the shrink gave %lld", (long long)y);
  return bad | !ok(rank, ncclCommDestroy(small), "destroy the shrunk communicator");
}

Test(nccl, shrink_n4, .timeout = 120) {
  check_library();
  cr_assert_eq(run_ranks(4, body_shrink, NULL, 1, 100), 0);
}

/* ---- ncclCommRevoke: stuck calls return, then shrink and destroy ----------- */

/* Rank n-1 stays away from the allreduce that ranks 0..n-2 are blocked in;
 * a second thread of each of them revokes (or, with shrink_abort, shrinks
 * with NCCL_SHRINK_ABORT) 300 ms later. */
struct revoke_area {
  int shrink_abort;
  volatile int returned;  /* ranks whose stuck call came back */
  double stuck_s[16];     /* how long it took */
};

struct revoker {
  ncclComm_t comm;
  int rank, n, shrink_abort;
  ncclComm_t small;
  ncclResult_t r;
  char msg[256];
};

static void *revoker_main(void *p) {
  struct revoker *v = p;
  usleep(300 * 1000);
  int out_rank = v->n - 1;
  v->r = v->shrink_abort
             ? ncclCommShrink(v->comm, &out_rank, 1, &v->small, NULL, NCCL_SHRINK_ABORT)
             : ncclCommRevoke(v->comm, NCCL_REVOKE_DEFAULT);
  snprintf(v->msg, sizeof v->msg, "%s", ncclGetLastError(NULL));
  return NULL;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* The survivors' new communicator: an exact allreduce, then destroyed. */
static int check_small(ncclComm_t small, int rank, int n) {
  int size = 0, me = -1;
  if (small == NULL)
    return fail(rank, "the shrink gave no communicator to a survivor");
  int bad = !ok(rank, ncclCommCount(small, &size), "ncclCommCount") ||
            !ok(rank, ncclCommUserRank(small, &me), "ncclCommUserRank");
  if (!bad && (size != n - 1 || me != rank))
    bad = fail(rank, "shrunk communicator: rank %d of %d", me, size);
  int64_t x[1000], y[1000];
  for (int i = 0; i < 1000; i++)
    x[i] = (rank + 1) * (int64_t)(i + 1);
  bad = bad || !ok(rank, ncclAllReduce(x, y, 1000, ncclInt64, ncclSum, small, NULL),
                   "allreduce after the shrink");
  for (int i = 0; i < 1000 && !bad; i++)
    if (y[i] != (int64_t)(n - 1) * n / 2 * (i + 1))
      bad = fail(rank, "allreduce after the shrink: element %d is %lld", i, (long long)y[i]);
  return bad | !ok(rank, ncclCommDestroy(small), "destroy the shrunk communicator");
}

/* The away rank: bad arguments first (nothing is revoked by them), then
 * once the others' calls came back, a revoke with nothing in flight. */
static int revoke_away(ncclComm_t comm, int rank, int n, struct revoke_area *a) {
  int bad = expect_error(rank, ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT),
                         ncclInvalidArgument, "'comm'", "ncclCommRevoke(NULL)");
  bad |= expect_error(rank, ncclCommRevoke(comm, 1), ncclInvalidArgument,
                      "'revokeFlags'", "ncclCommRevoke with flags 1");
  int dev = 7;
  bad |= expect_error(rank, ncclCommCuDevice(comm, NULL), ncclInvalidArgument, "'device'",
                      "ncclCommCuDevice(NULL)");
  bad = bad || !ok(rank, ncclCommCuDevice(comm, &dev), "ncclCommCuDevice");
  if (!bad && dev != -1) /* no CUDA context in this process: host buffers */
    bad = fail(rank, "ncclCommCuDevice gave %d on a host-only communicator", dev);
  for (int i = 0; i < 30000 && __atomic_load_n(&a->returned, __ATOMIC_ACQUIRE) < n - 1; i++)
    usleep(1000);
  if (!a->shrink_abort)
    bad = bad || !ok(rank, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), "idle ncclCommRevoke");
  return bad;
}

static int body_revoke(ncclComm_t comm, int rank, int n, void *arg) {
  struct revoke_area *a = arg;
  if (rank == n - 1)
    return revoke_away(comm, rank, n, a);
  struct revoker v = {.comm = comm, .rank = rank, .n = n, .shrink_abort = a->shrink_abort};
  pthread_t t;
  double t0 = now_s(); /* the revoke comes 0.3 s after this, or later */
  if (pthread_create(&t, NULL, revoker_main, &v) != 0)
    return fail(rank, "pthread_create failed");
  size_t count = 1 << 18;
  float *x = calloc(count, sizeof *x);
  ncclResult_t r = ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, NULL);
  a->stuck_s[rank] = now_s() - t0;
  char msg[256];
  snprintf(msg, sizeof msg, "%s", ncclGetLastError(NULL));
  __atomic_fetch_add(&a->returned, 1, __ATOMIC_ACQ_REL);
  pthread_join(t, NULL);
  free(x);
  int bad = 0;
  if (r != ncclInvalidUsage || strstr(msg, "revoked") == NULL)
    bad = fail(rank, "the stuck allreduce returned %d (%s) after %.2f s, expected "
               "ncclInvalidUsage saying 'revoked'", (int)r, msg, a->stuck_s[rank]);
  if (v.r != ncclSuccess)
    return fail(rank, "%s returned %d: %s", a->shrink_abort ? "ncclCommShrink(ABORT)"
                : "ncclCommRevoke", (int)v.r, v.msg);
  if (!a->shrink_abort) {
    int32_t one = 1, out = 0;
    ncclResult_t async = ncclInProgress;
    bad |= expect_error(rank, ncclAllReduce(&one, &out, 1, ncclInt32, ncclSum, comm, NULL),
                        ncclInvalidUsage, "revoked", "allreduce after the revoke");
    bad |= expect_error(rank, ncclCommFinalize(comm), ncclInvalidUsage, "revoked",
                        "ncclCommFinalize after the revoke");
    bad |= expect_error(rank, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclInvalidArgument,
                        "revoked already", "a second ncclCommRevoke");
    if (!ok(rank, ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError") ||
        async != ncclSuccess)
      bad = fail(rank, "after the revoke ncclCommGetAsyncError says %d, not ncclSuccess "
                 "(quiescent)", (int)async);
    int out_rank = n - 1;
    bad = bad || !ok(rank, ncclCommShrink(comm, &out_rank, 1, &v.small, NULL,
                                          NCCL_SHRINK_DEFAULT), "ncclCommShrink");
  }
  return bad || check_small(v.small, rank, n);
}

static void revoke_run(int n, int shrink_abort) {
  check_library();
  struct revoke_area *a = mmap(NULL, sizeof *a, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(a != MAP_FAILED);
  a->shrink_abort = shrink_abort;
  cr_assert_eq(run_ranks(n, body_revoke, a, 1, 100), 0);
  for (int r = 0; r < n - 1; r++) /* the revoke came at 0.3 s */
    cr_expect(a->stuck_s[r] >= 0.3 && a->stuck_s[r] < 10,
              "rank %d: the stuck allreduce returned after %.2f s", r, a->stuck_s[r]);
  munmap(a, sizeof *a);
}

Test(nccl, revoke_stuck_then_shrink_n3, .timeout = 120) { revoke_run(3, 0); }
Test(nccl, shrink_abort_stuck_n4, .timeout = 120) { revoke_run(4, 1); }
