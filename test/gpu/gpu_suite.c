/*
 * gpu_suite.c - the correctness suite on device buffers (needs a GPU; run by
 * scripts/gpu-check.sh, not by make test).
 *
 *   gpu_suite --threads N [options]        N ranks as threads of this process
 *   ringcc-run -np N gpu_suite [options]   N ranks as processes
 *
 * Every rank uses the same GPU (RINGCC_CUDA_DEVICE, default 0) unless
 * --spread gives rank r GPU r % count. For every collective, datatype and op
 * (allreduce, reduce_scatter and reduce with all 10 x 5; allgather, bcast,
 * alltoall, send/recv with all 10 datatypes; barrier), for several counts
 * and out of place and in place (NCCL's pointer forms and RINGCC_IN_PLACE),
 * each rank fills its inputs on the host, copies them to cudaMalloc'd
 * buffers, runs the call on its stream, synchronizes, checks
 * ringcc_comm_get_async_error, copies the result back and checks every
 * element against the exact expected value. Inputs are small integers, so
 * every result is exactly representable whatever the reduction order.
 *
 * Registered device memory: ringcc_mem_alloc on a communicator with a GPU
 * gives device memory (cuMemCreate), ringcc_comm_register maps every peer's
 * on this GPU (each view read back and checked), and collectives run on it.
 *
 * Also: allreduce with RINGCC_ALGO=ring and tree; host collectives on the
 * same communicator between device ones; mixed host/device buffers and a
 * stream with host buffers (INVALID_ARGUMENT naming the argument); the
 * default (NULL) stream (processes; thread ranks on one GPU: refused,
 * INVALID_USAGE naming 'stream'); with --faults, a collective only some ranks call
 * (RINGCC_ERR_TIMEOUT from ringcc_comm_get_async_error) and
 * ringcc_comm_abort under a waiting kernel.
 *
 * Options: --quick (fewer datatypes and counts), --big (add 256 MiB cases),
 * --faults, --timeout-ms MS (each communicator's deadline; default
 * RINGCC_TIMEOUT_MS where set, else 120000),
 * and sections:
 *   --streams    calls on three streams with no synchronisation between
 *                them, an in-place alltoall on one stream of what an
 *                in-place allreduce on another just wrote; checked at the end
 *   --graph      an allreduce and an in-place alltoall captured into a CUDA
 *                graph, replayed three times with an eager allreduce between
 *   --no-matrix  only the sections asked for
 *   --kill N     N ranks it forks itself (rank r on GPU r % GPUs); the last
 *                is SIGKILLed while the others' kernels wait for it: each
 *                survivor's ringcc_comm_get_async_error must say
 *                RINGCC_ERR_PEER_FAILED naming it, destroy under 5 s
 *   --contexts   in a fresh process: a host-only communicator makes no CUDA
 *                context; a rank on the last GPU leaves its thread's context
 *                as it was and makes none on GPU 0; a thread without a
 *                context that asks for the async error has none after
 * Exit status: 0 all right, 1 a failure (the first ones are printed).
 *
 * One program, two sources: the sections (--streams, --graph, --kill,
 * --contexts) are in test/gpu/gpu_sections.c; what both use is in
 * gpu_suite.h.
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
/* Internal: the views registration maps (gpu_suite links libringcc.a). */
#include "comm.h"
#include "registry.h"

#include "gpu_suite.h"

#define MAX_RANKS 16
#define MAX_REPORTS 8
#define BIG_BYTES ((size_t)256 << 20)

/* ---- options and shared state ------------------------------------------------ */

static ringcc_unique_id_t thread_ids[8];

/* ---- datatypes: exact values on the host ---------------------------------------- */

static size_t dt_size(int dt) { return ringcc_datatype_size((ringcc_datatype_t)dt); }

/* The datatypes device buffers take: all but float8 (the last two), which
 * is host-only (matrix() checks that a device call refuses it). */
#define DEVICE_DATATYPES RINGCC_FLOAT8_E4M3

static bool dt_is_float(int dt) {
  return dt == RINGCC_FLOAT16 || dt == RINGCC_BFLOAT16 ||
         dt == RINGCC_FLOAT32 || dt == RINGCC_FLOAT64;
}

static bool dt_is_signed(int dt) {
  return dt == RINGCC_INT8 || dt == RINGCC_INT32 || dt == RINGCC_INT64 ||
         dt_is_float(dt);
}

/* Exact for the small values used here (normal numbers or zero). */
static uint16_t to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  if ((x & 0x7fffffffu) == 0)
    return (uint16_t)sign;
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(sign | (uint32_t)e << 10 | ((x >> 13) & 0x3ffu));
}

static float from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f,
           m = h & 0x3ffu, x;
  if (e == 0 && m == 0)
    x = sign;
  else if (e == 0x1f)
    x = sign | 0x7f800000u | m << 13;
  else if (e == 0) { /* subnormal: not produced here, but be exact */
    float f = (float)m / 16777216.0f;
    return sign ? -f : f;
  } else
    x = sign | (e - 15 + 127) << 23 | m << 13;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void put(int dt, void *buf, size_t i, double v) {
  char *p = (char *)buf + i * dt_size(dt);
  switch (dt) {
  case RINGCC_INT8: *(int8_t *)p = (int8_t)(int64_t)v; break;
  case RINGCC_UINT8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
  case RINGCC_INT32: *(int32_t *)p = (int32_t)(int64_t)v; break;
  case RINGCC_UINT32: *(uint32_t *)p = (uint32_t)(int64_t)v; break;
  case RINGCC_INT64: *(int64_t *)p = (int64_t)v; break;
  case RINGCC_UINT64: *(uint64_t *)p = (uint64_t)(int64_t)v; break;
  case RINGCC_FLOAT16: *(uint16_t *)p = to_half((float)v); break;
  case RINGCC_BFLOAT16: {
    float f = (float)v;
    uint32_t x;
    memcpy(&x, &f, 4);
    *(uint16_t *)p = (uint16_t)(x >> 16);
    break;
  }
  case RINGCC_FLOAT32: *(float *)p = (float)v; break;
  default: *(double *)p = v; break;
  }
}

static double get(int dt, const void *buf, size_t i) {
  const char *p = (const char *)buf + i * dt_size(dt);
  switch (dt) {
  case RINGCC_INT8: return *(const int8_t *)p;
  case RINGCC_UINT8: return *(const uint8_t *)p;
  case RINGCC_INT32: return *(const int32_t *)p;
  case RINGCC_UINT32: return *(const uint32_t *)p;
  case RINGCC_INT64: return (double)*(const int64_t *)p;
  case RINGCC_UINT64: return (double)*(const uint64_t *)p;
  case RINGCC_FLOAT16: return from_half(*(const uint16_t *)p);
  case RINGCC_BFLOAT16: {
    uint32_t x = (uint32_t)*(const uint16_t *)p << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
  }
  case RINGCC_FLOAT32: return *(const float *)p;
  default: return *(const double *)p;
  }
}

/* Rank r's input element g of a reduction: {1,2,3,4}, or {-2,-1,1,2} for
 * signed types, so sums, products (4 ranks: |x| <= 256, 2^a 3^b) and
 * averages (n a power of two) are exact in every type, bfloat16 included. */
static double red_in(int dt, int r, size_t g) {
  int k = (int)((g * 7 + (size_t)r * 5) % 4);
  if (dt_is_signed(dt))
    return k < 2 ? k - 2 : k - 1;
  return k + 1;
}

/* Rank r's element g of a copy: distinct enough to catch misplaced blocks. */
static double copy_in(int dt, int r, size_t g) {
  int range = dt == RINGCC_INT8 ? 100 : 200;
  return (double)(1 + (int)((g * 7 + (size_t)r * 13) % (size_t)range));
}

/* Wraps v to the width of an integer datatype, as the library does. */
static double wrap(int dt, double v) {
  int64_t x = (int64_t)v;
  switch (dt) {
  case RINGCC_INT8: return (int8_t)(uint8_t)x;
  case RINGCC_UINT8: return (uint8_t)x;
  case RINGCC_INT32: return (int32_t)(uint32_t)x;
  case RINGCC_UINT32: return (uint32_t)x;
  default: return v;
  }
}

static double expected(int dt, int op, int n, size_t g) {
  double acc = red_in(dt, 0, g);
  for (int r = 1; r < n; r++) {
    double x = red_in(dt, r, g);
    switch (op) {
    case RINGCC_PROD: acc *= x; break;
    case RINGCC_MIN: acc = x < acc ? x : acc; break;
    case RINGCC_MAX: acc = x > acc ? x : acc; break;
    default: acc += x; break;
    }
  }
  acc = dt_is_float(dt) ? acc : wrap(dt, acc);
  if (op == RINGCC_AVG) {
    if (dt_is_float(dt))
      acc /= n;
    else /* integer division truncates toward zero */
      acc = (double)((int64_t)acc / n);
  }
  return acc;
}

/* A value generator: one rank's inputs, or the expected reduction. Each has
 * a short period in the element index, so buffers are filled by computing
 * one period and copying it (fills and checks run at memcpy speed, which the
 * 256 MiB cases need). */
enum gen_kind { GEN_RED_IN, GEN_COPY_IN, GEN_EXPECT };
struct gen {
  int kind, dt, op, rank, nranks;
};

static double gen_value(const struct gen *g, size_t i) {
  switch (g->kind) {
  case GEN_RED_IN: return red_in(g->dt, g->rank, i);
  case GEN_COPY_IN: return copy_in(g->dt, g->rank, i);
  default: return expected(g->dt, g->op, g->nranks, i);
  }
}

static size_t gen_period(const struct gen *g) {
  return g->kind != GEN_COPY_IN ? 4 : g->dt == RINGCC_INT8 ? 100 : 200;
}

/* buf[i] = value(first + i) for i < n. */
static void tile(char *buf, size_t n, size_t first, const struct gen *g) {
  size_t es = dt_size(g->dt), p = gen_period(g), m = n < p ? n : p;
  for (size_t i = 0; i < m; i++)
    put(g->dt, buf, i, gen_value(g, first + i));
  for (size_t done = m; done < n;) { /* done stays a multiple of p */
    size_t c = done < n - done ? done : n - done;
    memcpy(buf + done * es, buf, c * es);
    done += c;
  }
}

/* ---- one rank ---------------------------------------------------------------------- */

enum coll { ALLREDUCE, REDUCE_SCATTER, ALLGATHER, BCAST, REDUCE, ALLTOALL,
            SENDRECV, BARRIER, NUM_COLLS };
static const char *const coll_names[NUM_COLLS] = {
    "allreduce", "reduce_scatter", "allgather", "bcast", "reduce", "alltoall",
    "sendrecv", "barrier"};
/* In-place forms: 0 out of place, 1 NCCL's pointer form, 2 RINGCC_IN_PLACE. */
#define NUM_PLACES 3

/* Buffer moves: CUDA, or plain memory with --host. */
static bool copy_to(struct rank *k, void *dst, const void *src, size_t bytes,
                    bool to_device) {
  if (opt.host) {
    memcpy(dst, src, bytes);
    return true;
  }
  return cuda_ok(k, cudaMemcpyAsync(dst, src, bytes,
                                    to_device ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToHost,
                                    k->stream),
                 "cudaMemcpyAsync");
}

static bool sync_stream(struct rank *k) {
  return opt.host ||
         cuda_ok(k, cudaStreamSynchronize(k->stream), "cudaStreamSynchronize");
}

/* Elements of the send and receive buffers of a call with this count. */
static void elems(int c, int n, size_t count, size_t *send, size_t *recv) {
  switch (c) {
  case REDUCE_SCATTER: *send = count * n, *recv = count; break;
  case ALLGATHER: *send = count, *recv = count * n; break;
  case ALLTOALL: *send = *recv = count * n; break;
  default: *send = *recv = count; break;
  }
}

static int root_of(int c, int n) { return (c == BCAST || c == REDUCE) ? n - 1 : 0; }

/* The host inputs of the call (in hsend, or hrecv for in-place forms),
 * receive buffer poisoned; then both copied to the device. */
static bool fill(struct rank *k, int c, int dt, size_t count, int place) {
  size_t ns, nr, es = dt_size(dt);
  int r = k->rank, n = k->nranks;
  elems(c, n, count, &ns, &nr);
  memset(k->hrecv, 0xff, nr * es);
  memset(k->hsend, 0xee, ns * es);
  bool red = c == ALLREDUCE || c == REDUCE_SCATTER || c == REDUCE;
  char *in = place ? k->hrecv : k->hsend;
  struct gen g = {red ? GEN_RED_IN : GEN_COPY_IN, dt, 0, r, n};
  if (c == ALLGATHER) /* own block; in place: inside recvbuf */
    tile(place ? k->hrecv + (size_t)r * count * es : k->hsend, count,
         (size_t)r * count, &g);
  else if (c == BCAST && r == root_of(c, n))
    tile(k->hrecv, count, 0, &g);
  else if (c != BCAST)
    tile(in, ns, 0, &g);
  size_t rn = place && ns > nr ? ns : nr; /* in place: the input is there */
  size_t sb = ns > 0 ? ns * es : 1, rb = rn > 0 ? rn * es : 1;
  return copy_to(k, k->dsend, k->hsend, sb, true) &&
         copy_to(k, k->drecv, k->hrecv, rb, true);
}

static ringcc_result_t call(struct rank *k, int c, int dt, int op,
                            size_t count, int place, void *stream) {
  size_t es = dt_size(dt);
  int r = k->rank, n = k->nranks, root = root_of(c, n);
  char *s = k->dsend, *d = k->drecv;
  ringcc_comm_t comm = k->comm;
  ringcc_datatype_t t = (ringcc_datatype_t)dt;
  ringcc_op_t o = (ringcc_op_t)op;
  const void *ip = RINGCC_IN_PLACE;
  switch (c) {
  case ALLREDUCE:
    return ringcc_allreduce(place == 2 ? ip : place ? d : s, d, count, t, o,
                            comm, stream);
  case REDUCE_SCATTER:
    if (place == 1)
      return ringcc_reduce_scatter(d, d + (size_t)r * count * es, count, t, o,
                                   comm, stream);
    return ringcc_reduce_scatter(place ? ip : s, d, count, t, o, comm, stream);
  case ALLGATHER:
    return ringcc_allgather(place == 2 ? ip
                            : place    ? d + (size_t)r * count * es
                                       : s,
                            d, count, t, comm, stream);
  case BCAST:
    return ringcc_bcast(d, count, t, root, comm, stream);
  case REDUCE:
    if (place && r == root)
      return ringcc_reduce(place == 2 ? ip : d, d, count, t, o, root, comm,
                           stream);
    return ringcc_reduce(place ? d : s, r == root ? d : NULL, count, t, o, root,
                         comm, stream);
  case ALLTOALL:
    return ringcc_alltoall(place == 2 ? ip : place ? d : s, d, count, t, comm,
                           stream);
  case SENDRECV: { /* pairs 2j <-> 2j+1; an odd last rank sits out */
    int peer = r ^ 1;
    if (peer >= n)
      return RINGCC_SUCCESS;
    ringcc_result_t res = r % 2 == 0
                              ? ringcc_send(s, count, t, peer, comm, stream)
                              : ringcc_recv(d, count, t, peer, comm, stream);
    if (res != RINGCC_SUCCESS)
      return res;
    return r % 2 == 0 ? ringcc_recv(d, count, t, peer, comm, stream)
                      : ringcc_send(s, count, t, peer, comm, stream);
  }
  default:
    return ringcc_barrier(comm, stream);
  }
}

/* The expected result of this rank, in k->hwant. */
static void make_want(struct rank *k, int c, int dt, int op, size_t count,
                      size_t nr) {
  int r = k->rank, n = k->nranks;
  size_t es = dt_size(dt);
  struct gen g = {GEN_EXPECT, dt, op, 0, n};
  switch (c) {
  case ALLREDUCE:
  case REDUCE:
    tile(k->hwant, nr, 0, &g);
    break;
  case REDUCE_SCATTER:
    tile(k->hwant, nr, (size_t)r * count, &g);
    break;
  case ALLGATHER: /* block q: rank q's elements q*count.. */
  case ALLTOALL:  /* block q: rank q's block r */
    for (int q = 0; q < n; q++) {
      struct gen in = {GEN_COPY_IN, dt, 0, q, n};
      tile(k->hwant + (size_t)q * count * es, count,
           (size_t)(c == ALLGATHER ? q : r) * count, &in);
    }
    break;
  case BCAST: {
    struct gen in = {GEN_COPY_IN, dt, 0, root_of(c, n), n};
    tile(k->hwant, nr, 0, &in);
    break;
  }
  default: { /* sendrecv: the partner's */
    struct gen in = {GEN_COPY_IN, dt, 0, r ^ 1, n};
    tile(k->hwant, nr, 0, &in);
    break;
  }
  }
}

/* Copies the result back and checks every element; returns wrong ones. */
static long long check(struct rank *k, int c, int dt, int op, size_t count,
                       int place) {
  size_t ns, nr, es = dt_size(dt), at0 = 0;
  int r = k->rank, n = k->nranks;
  elems(c, n, count, &ns, &nr);
  if (c == REDUCE && r != root_of(c, n))
    return 0;
  if (c == SENDRECV && (r ^ 1) >= n)
    return 0;
  if (c == BARRIER || nr == 0)
    return 0;
  if (c == REDUCE_SCATTER && place == 1)
    at0 = (size_t)r * count; /* the result lands on the own block */
  if (!copy_to(k, k->hrecv, k->drecv, (at0 + nr) * es, false) ||
      !sync_stream(k))
    return 1;
  make_want(k, c, dt, op, count, nr);
  const char *got = k->hrecv + at0 * es;
  if (memcmp(got, k->hwant, nr * es) == 0)
    return 0;
  long long wrong = 0;
  for (size_t i = 0; i < nr; i++) {
    if (memcmp(got + i * es, k->hwant + i * es, es) == 0)
      continue;
    if (wrong++ < 3)
      report(r, "%s %s %s count %zu %s (%s): element %zu is %g, want %g",
             coll_names[c], ringcc_datatype_name((ringcc_datatype_t)dt),
             c == ALLREDUCE || c == REDUCE_SCATTER || c == REDUCE
                 ? ringcc_op_name((ringcc_op_t)op) : "-",
             count, place == 0 ? "out of place" : place == 1 ? "in place"
                                                              : "RINGCC_IN_PLACE",
             k->label, i, get(dt, got, i), get(dt, k->hwant, i));
  }
  return wrong;
}

/* One call, start to finish; false on an error (already reported). */
static bool run_one(struct rank *k, int c, int dt, int op, size_t count,
                    int place) {
  ringcc_result_t async = RINGCC_SUCCESS;
  if (!fill(k, c, dt, count, place))
    return false;
  ringcc_result_t res = call(k, c, dt, op, count, place, k->stream);
  k->calls++;
  if (res != RINGCC_SUCCESS) {
    report(k->rank, "%s %s count %zu place %d: %s: %s", coll_names[c],
           ringcc_datatype_name((ringcc_datatype_t)dt), count, place,
           ringcc_strerror(res), ringcc_comm_last_error(k->comm));
    return false;
  }
  if (!sync_stream(k))
    return false;
  if (ringcc_comm_get_async_error(k->comm, &async) != RINGCC_SUCCESS ||
      async != RINGCC_SUCCESS) {
    report(k->rank, "%s %s count %zu: async error %s: %s", coll_names[c],
           ringcc_datatype_name((ringcc_datatype_t)dt), count,
           ringcc_strerror(async), ringcc_comm_last_error(k->comm));
    return false;
  }
  /* Wrong elements are counted and reported, and the ranks go on in step:
   * only a failed call stops a rank (its peers then time out). */
  k->wrong += check(k, c, dt, op, count, place);
  return true;
}

/* ---- the matrix ----------------------------------------------------------------------- */

static const size_t counts_full[] = {0, 1, 7, 1000, 70001, 1 << 20};
static const size_t counts_quick[] = {0, 1, 1000, 70001};
static const int dts_quick[] = {RINGCC_INT8, RINGCC_INT64, RINGCC_FLOAT16,
                                RINGCC_BFLOAT16, RINGCC_FLOAT32};

static bool places_ok(int c, int place) {
  if (c == SENDRECV || c == BARRIER || c == BCAST)
    return place == 0;
  return true;
}

static bool matrix(struct rank *k) {
  const size_t *counts = opt.quick ? counts_quick : counts_full;
  int ncounts = opt.quick ? 4 : 6;
  int ndt = opt.quick ? 5 : DEVICE_DATATYPES;
  bool ok = true;
  if (!opt.host) {
    ringcc_result_t r = ringcc_allreduce(k->dsend, k->drecv, 16,
                                         RINGCC_FLOAT8_E4M3, RINGCC_SUM,
                                         k->comm, k->stream);
    if (r != RINGCC_ERR_UNSUPPORTED) {
      report(k->rank, "float8 allreduce on device buffers: %s, want "
             "RINGCC_ERR_UNSUPPORTED", ringcc_strerror(r));
      return false;
    }
  }
  for (int c = 0; c < NUM_COLLS && ok; c++) {
    bool red = c == ALLREDUCE || c == REDUCE_SCATTER || c == REDUCE;
    for (int di = 0; di < ndt && ok; di++) {
      int dt = opt.quick ? dts_quick[di] : di;
      for (int op = 0; op < (red ? RINGCC_NUM_OPS : 1) && ok; op++)
        for (int ci = 0; ci < ncounts && ok; ci++) {
          size_t count = counts[ci];
          if (c == BARRIER && (ci > 0 || di > 0))
            continue;
          if (count * dt_size(dt) * (size_t)k->nranks > k->cap)
            continue;
          for (int place = 0; place < NUM_PLACES && ok; place++)
            if (places_ok(c, place))
              ok = run_one(k, c, dt, op, count, place);
        }
    }
  }
  return ok;
}

/* 256 MiB buffers: the large ring/pipeline paths. */
static bool big_cases(struct rank *k) {
  size_t n = (size_t)k->nranks;
  struct { int c, dt, op, place; size_t count; } cases[] = {
      {ALLREDUCE, RINGCC_FLOAT32, RINGCC_SUM, 0, BIG_BYTES / 4},
      {ALLREDUCE, RINGCC_BFLOAT16, RINGCC_AVG, 1, BIG_BYTES / 2},
      {REDUCE_SCATTER, RINGCC_FLOAT16, RINGCC_SUM, 0, BIG_BYTES / 2 / n},
      {ALLGATHER, RINGCC_INT8, RINGCC_SUM, 1, BIG_BYTES / n},
      {BCAST, RINGCC_FLOAT64, RINGCC_SUM, 0, BIG_BYTES / 8},
      {REDUCE, RINGCC_INT32, RINGCC_PROD, 0, BIG_BYTES / 4},
      {ALLTOALL, RINGCC_UINT32, RINGCC_SUM, 0, BIG_BYTES / 4 / n},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    if (!run_one(k, cases[i].c, cases[i].dt, cases[i].op, cases[i].count,
                 cases[i].place))
      return false;
  return true;
}

/* Host collectives on the same communicator, between device ones; the
 * default (NULL) stream; argument errors that name the argument. */
static bool mixed_use(struct rank *k) {
  int32_t in = k->rank + 1, out = 0;
  int n = k->nranks;
  if (!run_one(k, ALLREDUCE, RINGCC_FLOAT32, RINGCC_SUM, 4096, 0))
    return false;
  if (opt.host)
    return true;
  ringcc_result_t r = ringcc_allreduce(&in, &out, 1, RINGCC_INT32, RINGCC_SUM,
                                       k->comm, NULL);
  if (r != RINGCC_SUCCESS || out != n * (n + 1) / 2) {
    report(k->rank, "host allreduce between device ones: %s, %d",
           ringcc_strerror(r), out);
    return false;
  }
  /* Device buffers on the default stream: processes run; ranks that are
   * threads on one GPU share the legacy default stream, where one rank's
   * kernel would wait behind another's, and are refused, naming 'stream'. */
  int gpus = 1;
  if (opt.spread && (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1))
    gpus = 1;
  if (opt.threads && k->nranks > gpus) { /* two threads share a GPU */
    r = call(k, ALLREDUCE, RINGCC_INT32, RINGCC_SUM, 1000, 0, NULL);
    if (r != RINGCC_ERR_INVALID_USAGE ||
        strstr(ringcc_comm_last_error(k->comm), "'stream' is NULL") == NULL) {
      report(k->rank, "device allreduce on the NULL stream with thread ranks "
             "on one GPU: %s (want RINGCC_ERR_INVALID_USAGE): %s",
             ringcc_strerror(r), ringcc_comm_last_error(k->comm));
      return false;
    }
  }
  if (!opt.threads) {
    if (!fill(k, ALLREDUCE, RINGCC_INT32, 1000, 0) ||
        !cuda_ok(k, cudaStreamSynchronize(k->stream), "sync"))
      return false;
    r = call(k, ALLREDUCE, RINGCC_INT32, RINGCC_SUM, 1000, 0, NULL);
    if (r != RINGCC_SUCCESS ||
        !cuda_ok(k, cudaStreamSynchronize(NULL), "cudaStreamSynchronize(0)") ||
        check(k, ALLREDUCE, RINGCC_INT32, RINGCC_SUM, 1000, 0) != 0) {
      report(k->rank, "device allreduce on the NULL stream: %s: %s",
             ringcc_strerror(r), ringcc_comm_last_error(k->comm));
      return false;
    }
  }
  /* Wrong mixes: nothing is sent, the message names the argument, the
   * communicator keeps working. */
  for (int b = 0; b < 3; b++) {
    static const char *const what[] = {"host sendbuf, device recvbuf",
                                       "device sendbuf, host recvbuf",
                                       "host buffers with a stream"};
    static const char *const arg[] = {"'sendbuf' is host", "'recvbuf' is host",
                                      "'stream'"};
    void *sb = b == 1 ? (void *)k->dsend : (void *)k->hsend;
    void *rb = b == 0 ? (void *)k->drecv : (void *)k->hrecv;
    r = ringcc_allreduce(sb, rb, 16, RINGCC_FLOAT32, RINGCC_SUM, k->comm,
                         k->stream);
    const char *msg = ringcc_comm_last_error(k->comm);
    if (r != RINGCC_ERR_INVALID_ARGUMENT || strstr(msg, arg[b]) == NULL) {
      report(k->rank, "%s: %s (want RINGCC_ERR_INVALID_ARGUMENT saying "
                      "\"%s\"): %s", what[b], ringcc_strerror(r), arg[b], msg);
      return false;
    }
  }
  /* A device buffer not aligned to its element: refused, naming it. */
  r = ringcc_allreduce(k->dsend + 2, k->drecv, 16, RINGCC_FLOAT32, RINGCC_SUM,
                       k->comm, k->stream);
  if (r != RINGCC_ERR_INVALID_ARGUMENT ||
      strstr(ringcc_comm_last_error(k->comm), "'sendbuf'") == NULL ||
      strstr(ringcc_comm_last_error(k->comm), "aligned") == NULL) {
    report(k->rank, "misaligned sendbuf: %s (want RINGCC_ERR_INVALID_ARGUMENT "
                    "naming 'sendbuf'): %s", ringcc_strerror(r),
           ringcc_comm_last_error(k->comm));
    return false;
  }
  for (int a = 0; a < 3; a++) /* several algorithms' schedules, in a row */
    if (!run_one(k, ALLREDUCE, RINGCC_FLOAT16, RINGCC_AVG, 3000 + a, a % 2))
      return false;
  return true;
}

/* ringcc_mem_alloc on a communicator with a GPU: device memory; registered,
 * every peer's is mapped here and holds what the peer wrote; collectives on
 * it give the right results; then deregistered and freed. */
static bool registered(struct rank *k) {
  char *mem[2] = {NULL, NULL};
  ringcc_reg_t reg[2] = {NULL, NULL};
  char *keep_send = k->dsend, *keep_recv = k->drecv;
  size_t probe = 1 << 20;
  bool ok = true;
  if (opt.host)
    return true;
  for (int b = 0; b < 2 && ok; b++) {
    struct cudaPointerAttributes attr;
    ringcc_result_t r = ringcc_mem_alloc(k->comm, k->cap, (void **)&mem[b]);
    ok = r == RINGCC_SUCCESS &&
         cuda_ok(k, cudaPointerGetAttributes(&attr, mem[b]),
                 "cudaPointerGetAttributes") &&
         attr.type == cudaMemoryTypeDevice && attr.device == k->device &&
         cuda_ok(k, cudaMemset(mem[b], k->rank + 1 + b, probe), "cudaMemset");
    if (ok && (r = ringcc_comm_register(k->comm, mem[b], k->cap, &reg[b])) !=
                  RINGCC_SUCCESS)
      ok = false;
    if (!ok)
      report(k->rank, "registered device memory %d: %s: %s", b,
             ringcc_strerror(r), ringcc_comm_last_error(k->comm));
  }
  /* Every peer's first MiB, through this rank's mapping of it. */
  char *host = malloc(probe);
  for (int q = 0; q < k->nranks && ok && host != NULL; q++) {
    const char *view = rcc_registry_peer(k->comm->registry, q, reg[0]->slot,
                                         0, probe);
    ok = view != NULL &&
         cuda_ok(k, cudaMemcpy(host, view, probe, cudaMemcpyDeviceToHost),
                 "cudaMemcpy from a peer's mapped memory");
    for (size_t i = 0; i < probe && ok; i++)
      if (host[i] != (char)(q + 1)) {
        report(k->rank, "rank %d's registered memory, mapped here, holds %d "
               "at byte %zu, expected %d", q, host[i], i, q + 1);
        ok = false;
      }
    if (view == NULL)
      report(k->rank, "rank %d's registered memory is not mapped here", q);
  }
  free(host);
  sync_ranks(k);
  if (ok) {
    k->dsend = mem[0];
    k->drecv = mem[1];
    for (int dt = 0; dt < DEVICE_DATATYPES && ok; dt++)
      ok = run_one(k, ALLREDUCE, dt, dt % RINGCC_NUM_OPS, 70001, dt % 3) &&
           run_one(k, ALLGATHER, dt, RINGCC_SUM, 1000 + (size_t)dt, 0) &&
           run_one(k, REDUCE_SCATTER, dt, RINGCC_MAX, 1000, 0);
    sync_stream(k);
    k->dsend = keep_send;
    k->drecv = keep_recv;
  }
  sync_ranks(k);
  for (int b = 0; b < 2; b++) {
    if (reg[b] != NULL && ringcc_comm_deregister(k->comm, reg[b]) !=
                              RINGCC_SUCCESS) {
      report(k->rank, "ringcc_comm_deregister: %s",
             ringcc_comm_last_error(k->comm));
      ok = false;
    }
    if (mem[b] != NULL && ringcc_mem_free(mem[b]) != RINGCC_SUCCESS) {
      report(k->rank, "ringcc_mem_free: %s", ringcc_comm_last_error(NULL));
      ok = false;
    }
  }
  if (ok && k->rank == 0)
    printf("gpu_suite: registered device memory: mapped by every peer, "
           "collectives on it right\n");
  return ok;
}

/* ---- communicators ------------------------------------------------------------------------ */

static ringcc_result_t make_comm(struct rank *k, int algo, int idx,
                                 int64_t timeout_ms) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = algo;
  cfg.timeout_ms = timeout_ms;
  cfg.cuda_device = opt.host ? RINGCC_CUDA_DEVICE_NONE : k->device;
  if (opt.threads)
    return ringcc_comm_init(&k->comm, k->nranks, &thread_ids[idx], k->rank,
                            &cfg);
  if (idx == 0)
    return ringcc_comm_init_env(&k->comm, &cfg);
  /* More communicators of a process job: split the first (same color). */
  ringcc_comm_t base = k->comm;
  ringcc_result_t r = ringcc_comm_split(base, 0, k->rank, &k->comm);
  (void)base;
  return r;
}

/* A collective only rank 0 calls: its kernel times out; the error comes
 * back from ringcc_comm_get_async_error. Then abort under a waiting kernel. */
static bool faults(struct rank *k, ringcc_comm_t keep) {
  ringcc_result_t async = RINGCC_SUCCESS, r;
  ringcc_comm_t comm = NULL;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 3000;
  cfg.cuda_device = k->device;
  if (k->nranks < 2)
    return true;
  r = opt.threads ? ringcc_comm_init(&comm, k->nranks, &thread_ids[3], k->rank,
                                     &cfg)
                  : ringcc_comm_split(keep, 0, k->rank, &comm);
  if (r != RINGCC_SUCCESS) {
    report(k->rank, "init for the fault test: %s", ringcc_strerror(r));
    return false;
  }
  bool ok = true;
  if (k->rank == 0) {
    double t0 = now_s();
    r = ringcc_allreduce(k->dsend, k->drecv, 1000, RINGCC_FLOAT32, RINGCC_SUM,
                         comm, k->stream);
    cudaStreamSynchronize(k->stream);
    ringcc_comm_get_async_error(comm, &async);
    if (r != RINGCC_SUCCESS || async != RINGCC_ERR_TIMEOUT ||
        now_s() - t0 > 30) {
      report(0, "a collective nobody else calls: enqueue %s, async %s after "
                "%.1f s (want RINGCC_ERR_TIMEOUT after ~3 s): %s",
             ringcc_strerror(r), ringcc_strerror(async), now_s() - t0,
             ringcc_comm_last_error(comm));
      ok = false;
    } else {
      printf("gpu_suite: timeout reported as: %s\n", ringcc_comm_last_error(comm));
    }
  }
  sync_ranks(k);
  ringcc_comm_destroy(comm);
  sync_ranks(k);
  /* Abort: a kernel waits for peers that never come; abort must end it. */
  cfg.timeout_ms = 600000;
  r = opt.threads ? ringcc_comm_init(&comm, k->nranks, &thread_ids[4], k->rank,
                                     &cfg)
                  : ringcc_comm_split(keep, 0, k->rank, &comm);
  if (r != RINGCC_SUCCESS)
    return false;
  if (k->rank == 0) {
    double t0 = now_s();
    ringcc_allreduce(k->dsend, k->drecv, 1000, RINGCC_FLOAT32, RINGCC_SUM,
                     comm, k->stream);
    usleep(200000);
    ringcc_comm_abort(comm);
    cudaStreamSynchronize(k->stream);
    if (now_s() - t0 > 20) {
      report(0, "ringcc_comm_abort took %.1f s to end a waiting kernel",
             now_s() - t0);
      ok = false;
    }
  }
  sync_ranks(k);
  if (k->rank != 0)
    ringcc_comm_destroy(comm);
  return ok;
}

static bool run_rank(struct rank *k) {
  size_t cap = opt.big ? BIG_BYTES : ((size_t)8 << 20) * (size_t)k->nranks;
  bool ok = true;
  if (opt.host) { /* stream NULL: the host path */
    k->dsend = malloc(cap);
    k->drecv = malloc(cap);
    ok = k->dsend && k->drecv;
  } else {
    ok = cuda_ok(k, cudaSetDevice(k->device), "cudaSetDevice") &&
         cuda_ok(k, cudaStreamCreateWithFlags(&k->stream,
                                              cudaStreamNonBlocking),
                 "cudaStreamCreate") &&
         cuda_ok(k, cudaMalloc((void **)&k->dsend, cap), "cudaMalloc") &&
         cuda_ok(k, cudaMalloc((void **)&k->drecv, cap), "cudaMalloc");
  }
  k->cap = cap;
  k->hsend = malloc(cap);
  k->hrecv = malloc(cap);
  k->hwant = malloc(cap);
  if (!ok || k->hsend == NULL || k->hrecv == NULL || k->hwant == NULL)
    return false;
  /* Every rank allocated before any kernel runs (cudaMalloc/cudaFree of
   * one thread may wait for another's kernel). */
  if (opt.threads)
    pthread_barrier_wait(&thread_barrier);
  ringcc_result_t r = make_comm(k, RINGCC_ALGO_AUTO, 0, opt.timeout_ms);
  if (r != RINGCC_SUCCESS) {
    report(k->rank, "init: %s: %s", ringcc_strerror(r),
           ringcc_comm_last_error(NULL));
    return false;
  }
  double t0 = now_s();
  ok = opt.no_matrix || (matrix(k) && mixed_use(k) && registered(k) &&
                         (!opt.big || big_cases(k)));
  if (ok && opt.streams && !opt.host)
    ok = streams_case(k);
  if (ok && opt.graph && !opt.host)
    ok = graph_case(k);
  /* allreduce again with the ring and the tree forced */
  ringcc_comm_t first = k->comm;
  for (int a = 0; a < 2 && ok && !opt.no_matrix; a++) {
    int algo = a == 0 ? RINGCC_ALGO_RING : RINGCC_ALGO_TREE;
    if ((r = make_comm(k, algo, 1 + a, opt.timeout_ms)) != RINGCC_SUCCESS) {
      report(k->rank, "init (algo %d): %s", algo, ringcc_strerror(r));
      ok = false;
      break;
    }
    for (int dt = 0; dt < DEVICE_DATATYPES && ok; dt++)
      for (int op = 0; op < RINGCC_NUM_OPS && ok; op++)
        for (int place = 0; place < 2 && ok; place++)
          ok = run_one(k, ALLREDUCE, dt, op, 70001 + (size_t)dt, place);
    sync_stream(k);
    sync_ranks(k);
    ringcc_comm_destroy(k->comm);
    k->comm = first;
  }
  if (ok && opt.faults && !opt.host)
    ok = faults(k, first);
  sync_stream(k);
  sync_ranks(k);
  if (k->rank == 0)
    printf("gpu_suite: %d rank%s (%s): %lld device collectives checked, %lld "
           "wrong elements, %.1f s%s\n", k->nranks, k->nranks == 1 ? "" : "s",
           k->label, k->calls * k->nranks, k->wrong, now_s() - t0,
           ok ? "" : " - FAILED");
  ringcc_comm_destroy(k->comm);
  if (opt.threads)
    pthread_barrier_wait(&thread_barrier); /* no kernel left anywhere */
  if (opt.host) {
    free(k->dsend);
    free(k->drecv);
  } else {
    cudaFree(k->dsend);
    cudaFree(k->drecv);
    cudaStreamDestroy(k->stream);
  }
  free(k->hsend);
  free(k->hrecv);
  free(k->hwant);
  return ok && k->wrong == 0;
}

/* ---- main --------------------------------------------------------------------------------- */

static int device_of(int rank) {
  const char *env = getenv("RINGCC_CUDA_DEVICE");
  int count = 1;
  if (opt.spread && cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
    return rank % count;
  return env ? atoi(env) : 0;
}

static void *thread_main(void *arg) {
  struct rank *k = arg;
  return (void *)(intptr_t)(run_rank(k) ? 0 : 1);
}

static const char *label_of(void) {
  if (opt.host)
    return "host buffers";
  const char *p2p = getenv("RINGCC_P2P_DISABLE");
  const char *shm = getenv("RINGCC_SHM_DISABLE");
  if (shm && atoi(shm))
    return "net, staged";
  if (p2p && atoi(p2p))
    return "shm, staged";
  return "p2p";
}

int main(int argc, char **argv) {
  const char *env_timeout = getenv("RINGCC_TIMEOUT_MS");
  if (env_timeout && *env_timeout) /* a config field overrides the env */
    opt.timeout_ms = atoll(env_timeout);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      opt.threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--quick") == 0)
      opt.quick = true;
    else if (strcmp(argv[i], "--big") == 0)
      opt.big = true;
    else if (strcmp(argv[i], "--faults") == 0)
      opt.faults = true;
    else if (strcmp(argv[i], "--spread") == 0)
      opt.spread = true;
    else if (strcmp(argv[i], "--host") == 0)
      opt.host = true;
    else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc)
      opt.timeout_ms = atoll(argv[++i]);
    else if (strcmp(argv[i], "--no-matrix") == 0)
      opt.no_matrix = true;
    else if (strcmp(argv[i], "--streams") == 0)
      opt.streams = true;
    else if (strcmp(argv[i], "--graph") == 0)
      opt.graph = true;
    else if (strcmp(argv[i], "--kill") == 0 && i + 1 < argc)
      opt.kill = atoi(argv[++i]);
    else if (strcmp(argv[i], "--contexts") == 0)
      opt.contexts = true;
    else {
      fprintf(stderr, "usage: gpu_suite [--threads N] [--quick] [--big] "
                      "[--faults] [--spread] [--host] [--timeout-ms MS] "
                      "[--no-matrix] [--streams] [--graph] [--kill N] "
                      "[--contexts]\n");
      return 2;
    }
  }
  if (!opt.host && !gpu_available()) {
    fprintf(stderr, "gpu_suite: no usable GPU here: skipped\n");
    return 77;
  }
  if (opt.kill > 0) /* ranks it forks itself */
    return kill_test(opt.kill);
  if (opt.contexts)
    return context_test();
  static char label[64];
  if (opt.threads > 0) {
    int n = opt.threads;
    struct rank ranks[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    if (n > MAX_RANKS)
      return 2;
    snprintf(label, sizeof(label), "threads, %s", label_of());
    for (int i = 0; i < 8; i++)
      if (ringcc_get_unique_id(&thread_ids[i]) != RINGCC_SUCCESS) {
        fprintf(stderr, "gpu_suite: ringcc_get_unique_id: %s\n",
                ringcc_comm_last_error(NULL));
        return 1;
      }
    pthread_barrier_init(&thread_barrier, NULL, (unsigned)n);
    for (int r = 0; r < n; r++) {
      ranks[r] = (struct rank){.rank = r, .nranks = n, .device = device_of(r),
                               .label = label};
      pthread_create(&th[r], NULL, thread_main, &ranks[r]);
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
      void *rc;
      pthread_join(th[r], &rc);
      bad |= rc != NULL;
    }
    return bad;
  }
  /* Processes under a launcher: rank and size from the environment. */
  const char *rs = getenv("RINGCC_RANK"), *ns = getenv("RINGCC_NRANKS");
  if (rs == NULL || ns == NULL) {
    fprintf(stderr, "gpu_suite: give --threads N, or run under ringcc-run\n");
    return 2;
  }
  struct rank k = {.rank = atoi(rs), .nranks = atoi(ns)};
  k.device = device_of(k.rank);
  snprintf(label, sizeof(label), "processes, %s", label_of());
  k.label = label;
  return run_rank(&k) ? 0 : 1;
}
