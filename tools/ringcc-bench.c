/*
 * ringcc-bench - bandwidth and latency of libringcc collectives, modelled on
 * nccl-tests (same columns, same size and bus-bandwidth conventions), so the
 * numbers can be compared with nccl-tests and with shared/peers' MPI and Gloo
 * benchmarks.
 *
 *   ringcc-run -np 4 ringcc-bench -c allreduce -b 8 -e 64M -f 2
 *   mpirun -np 4 ringcc-bench ...          (ringcc_comm_init_env reads mpirun's
 *                                           variables too)
 *
 * For each size, out-of-place then in-place: fill the inputs, WARMUP calls,
 * barrier, ITERS timed calls; time = the loop's per-call average, the maximum
 * over ranks. With -C 1 the inputs are filled again, the call runs once more,
 * and every element of the result is checked on every rank against its exact
 * expected value (inputs are small integers for which any order of reduction
 * gives the same, exactly representable, result).
 *
 * With --calibrate it measures this machine for the tuner instead (see
 * calibrate() below and docs/tuning.md) and writes the tuner's cache file.
 *
 * Conventions (nccl-tests): size = bytes of the buffer for allreduce, bcast,
 * reduce and sendrecv; of the gathered output for allgather; of the full
 * input for reduce_scatter; of the full send buffer for alltoall.
 * algbw = size / time (GB = 1e9 B); busbw = algbw * 2(n-1)/n (allreduce),
 * (n-1)/n (reduce_scatter, allgather, alltoall), 1 (bcast, reduce, sendrecv).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcc.h"
#include "bench_device.h"

/* --calibrate fits the library's own cost model (tuner.h); this tool links
 * libringcc.a (TOOLS_STATIC in the Makefile) for it. */
#include "comm.h"
#include "tuner.h"

#define PROG_NAME "ringcc-bench"
#define EXIT_FAILED 1  /* a libringcc call or the system failed */
#define EXIT_USAGE 2
#define EXIT_WRONG 3   /* some result element was wrong */
#define MAX_MISMATCH_REPORTS 3 /* per rank and check */

/* ---- collectives and datatypes ------------------------------------------ */

enum coll {
  C_ALLREDUCE,
  C_REDUCE_SCATTER,
  C_ALLGATHER,
  C_BCAST,
  C_REDUCE,
  C_ALLTOALL,
  C_SENDRECV,
  NUM_COLLS
};

struct coll_info {
  const char *name;
  bool has_op, has_root;
  bool per_rank_blocks; /* size must be a multiple of nranks*typesize */
  int busbw;            /* 0: x1, 1: x(n-1)/n, 2: x2(n-1)/n */
};

static const struct coll_info colls[NUM_COLLS] = {
    [C_ALLREDUCE] = {"allreduce", true, false, false, 2},
    [C_REDUCE_SCATTER] = {"reduce_scatter", true, false, true, 1},
    [C_ALLGATHER] = {"allgather", false, false, true, 1},
    [C_BCAST] = {"bcast", false, true, false, 0},
    [C_REDUCE] = {"reduce", true, true, false, 0},
    [C_ALLTOALL] = {"alltoall", false, false, true, 1},
    [C_SENDRECV] = {"sendrecv", false, false, false, 0},
};

enum kind { K_SINT, K_UINT, K_FLOAT };

struct dt_info {
  const char *name;
  ringcc_datatype_t dt;
  size_t size;
  enum kind kind;
  int64_t exact;  /* floats: every integer of magnitude <= exact is exact */
  int max_twos;   /* floats: factors of 2 a product may hold and stay finite */
};

static const struct dt_info dts[] = {
    {"int8", RINGCC_INT8, 1, K_SINT, 0, 0},
    {"uint8", RINGCC_UINT8, 1, K_UINT, 0, 0},
    {"int32", RINGCC_INT32, 4, K_SINT, 0, 0},
    {"uint32", RINGCC_UINT32, 4, K_UINT, 0, 0},
    {"int64", RINGCC_INT64, 8, K_SINT, 0, 0},
    {"uint64", RINGCC_UINT64, 8, K_UINT, 0, 0},
    {"float16", RINGCC_FLOAT16, 2, K_FLOAT, 2048, 15},
    {"bfloat16", RINGCC_BFLOAT16, 2, K_FLOAT, 256, 127},
    {"float32", RINGCC_FLOAT32, 4, K_FLOAT, INT64_C(1) << 24, 127},
    {"float64", RINGCC_FLOAT64, 8, K_FLOAT, INT64_C(1) << 53, 1023},
};
#define NUM_DTS (int)(sizeof dts / sizeof dts[0])

static const char *const op_names[RINGCC_NUM_OPS] = {
    [RINGCC_SUM] = "sum", [RINGCC_PROD] = "prod", [RINGCC_MIN] = "min",
    [RINGCC_MAX] = "max", [RINGCC_AVG] = "avg"};

/* ---- settings and state --------------------------------------------------- */

struct options {
  enum coll coll;
  const struct dt_info *dt;
  ringcc_op_t op;
  size_t min_bytes, max_bytes;
  size_t factor;
  int iters, warmup, root, check;
  double min_time; /* -m: seconds of timed iterations at least */
  const char *json_path;
  bool calibrate;
  bool device; /* -G: device buffers (bench_device.h) */
};

/* How inputs are made: GEN_SUM keeps n-rank sums exact, GEN_PROD uses
 * {1,2} ({1,-1} for signed integers) so products are exact, GEN_COPY is for
 * min/max and the collectives that only move data. */
enum gen_mode { GEN_SUM, GEN_PROD, GEN_COPY };

struct bench {
  struct options o;
  ringcc_comm_t comm;
  int rank, nranks;
  char *sbuf, *rbuf;
  char *dsbuf, *drbuf; /* -G: what the calls use; sbuf/rbuf fill and check */
  void *stream;        /* -G: a cudaStream_t */
  size_t buf_bytes;
  int64_t float_range; /* float inputs lie in [-float_range, float_range] */
  int mismatches_reported;
};

/* One size: what is printed and what the call gets. */
struct plan {
  size_t requested; /* the size from -b/-e/-f */
  size_t bytes;     /* the nccl-tests "size": requested, rounded down */
  size_t count; /* bytes / typesize */
  size_t arg;   /* the count argument of the call (per rank block where the
                   collective works in blocks) */
};

struct result {
  bool valid;   /* false: not measured (sendrecv in place) */
  int iters;    /* timed iterations */
  double time_us, algbw, busbw;
  long long wrong; /* -1: not checked */
};

struct row {
  struct plan plan;
  struct result oop, ip;
};

/* ---- errors --------------------------------------------------------------- */

static struct bench *g_bench; /* for die(): abort the communicator */

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt,
                                                                ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_bench && g_bench->comm)
    fprintf(stderr, PROG_NAME ": rank %d: %s\n", g_bench->rank, msg);
  else
    fprintf(stderr, PROG_NAME ": %s\n", msg);
  fflush(stderr);
  if (g_bench && g_bench->comm) ringcc_comm_abort(g_bench->comm);
  exit(EXIT_FAILED);
}

/* Every libringcc call goes through this: on failure, the code's name and the
 * communicator's detailed message. */
static void check_call(struct bench *b, ringcc_result_t r, const char *call,
                       const char *context) {
  if (r == RINGCC_SUCCESS) return;
  const char *detail = ringcc_comm_last_error(b ? b->comm : NULL);
  die("%s failed%s%s: %s%s%s", call, context ? " " : "", context ? context : "",
      ringcc_strerror(r), detail && *detail ? ": " : "", detail ? detail : "");
}

/* ---- usage and options ---------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
"Usage: " PROG_NAME " [options]\n"
"Measures a libringcc collective over a range of sizes, nccl-tests style.\n"
"Run it under a launcher: ringcc-run -np N " PROG_NAME " ..., or mpirun/srun\n"
"(ranks join with ringcc_comm_init_env).\n"
"\n"
"Options:\n"
"  -c COLL      allreduce | reduce_scatter | allgather | bcast | reduce |\n"
"               alltoall | sendrecv (default allreduce)\n"
"  -b SIZE      smallest size in bytes (default 8)\n"
"  -e SIZE      largest size in bytes (default 64M)\n"
"  -f FACTOR    sizes go down from -e by FACTOR, plus -b itself\n"
"               (integer >= 2, default 2)\n"
"               SIZE takes a K, M or G suffix (x1024, x1024^2, x1024^3)\n"
"  -d TYPE      int8 | uint8 | int32 | uint32 | int64 | uint64 | float16 |\n"
"               bfloat16 | float32 | float64 (default float32)\n"
"  -o OP        sum | prod | min | max | avg (default sum); used by\n"
"               allreduce, reduce_scatter and reduce\n"
"  -n ITERS     timed iterations per size (default 20)\n"
"  -w WARMUP    untimed iterations before them (default 5)\n"
"  -m SECONDS   time at least this long per size: more iterations than -n\n"
"               where calls are short (from the warm-up's time, the slowest\n"
"               rank's; at most 1000000; default 0)\n"
"  -r ROOT      root rank of bcast and reduce (default 0)\n"
"  -C 0|1       check every element of every result (default 1)\n"
"  -G, --device device buffers (cudaMalloc) on one stream; needs a CUDA\n"
"               build and a GPU (RINGCC_CUDA_DEVICE picks it)\n"
"  --json FILE  also write the rows to FILE as a JSON array (rank 0)\n"
"  --calibrate  measure this machine for the tuner instead: alpha and beta of\n"
"               shared memory and of TCP (communicators with shm_disable=1),\n"
"               gamma (local reduction), fitted to ring allreduce, one-shot\n"
"               allreduce and ping-pong times; writes the tuner's file\n"
"               (RINGCC_TUNER_FILE, else $XDG_CACHE_HOME/ringcc/tuner.conf,\n"
"               else ~/.cache/ringcc/tuner.conf). All ranks on one host,\n"
"               at least 2; other options are ignored. docs/tuning.md\n"
"  -h, --help   print this help and exit\n"
"\n"
"Columns (rank 0 prints one row per size):\n"
"  size count type redop root, then for out-of-place and for in-place:\n"
"  time(us) algbw(GB/s) busbw(GB/s) #wrong\n"
"  size: bytes of the buffer (allreduce, bcast, reduce, sendrecv), of the\n"
"  gathered output (allgather), of the full input (reduce_scatter), of the\n"
"  send buffer (alltoall); rounded down to a multiple of the element size,\n"
"  and of nranks elements where each rank has a block; count = size/typesize.\n"
"  time: per-call average of the timed loop, maximum over the ranks.\n"
"  algbw = size/time, GB = 1e9 bytes. busbw = algbw x 2(n-1)/n (allreduce),\n"
"  (n-1)/n (reduce_scatter, allgather, alltoall), 1 (bcast, reduce, sendrecv).\n"
"  #wrong: wrong elements summed over the ranks (N/A with -C 0).\n"
"  In place: the same buffer for allreduce, reduce, alltoall; sendbuf =\n"
"  recvbuf + rank*sendcount (allgather); recvbuf = sendbuf + rank*recvcount\n"
"  (reduce_scatter). bcast has one buffer, so both groups time the same call;\n"
"  sendrecv (rank r sends to r+1 and receives from r-1) has no in-place form.\n"
"\n"
"Exit status: 0 when every call succeeded and every element was right;\n"
"%d when a call failed; %d for a usage error; %d when elements were wrong.\n",
          EXIT_FAILED, EXIT_USAGE, EXIT_WRONG);
}

/* "8", "64K", "1M", "2G" (binary multiples). Returns false when invalid. */
static bool parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  if (*s == '-' || *s == '\0') return false;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  default: break;
  }
  if (*end != '\0' || (v << shift) >> shift != v || v << shift > SIZE_MAX)
    return false;
  *out = (size_t)(v << shift);
  return true;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= 0 && v <= 3600))
    return false;
  *out = v;
  return true;
}

/* Parses argv into *o. Returns NULL, or the message of a usage error (which
 * is reported once the ranks know which of them is rank 0). -h exits. */
static const char *parse_options(int argc, char **argv, struct options *o,
                                 char *err, size_t errlen) {
  *o = (struct options){.coll = C_ALLREDUCE, .dt = &dts[8], .op = RINGCC_SUM,
                        .min_bytes = 8, .max_bytes = (size_t)64 << 20,
                        .factor = 2, .iters = 20, .warmup = 5, .root = 0,
                        .check = 1, .json_path = NULL};
  static const struct option longopts[] = {{"json", required_argument, NULL, 'J'},
                                           {"device", no_argument, NULL, 'G'},
                                           {"calibrate", no_argument, NULL, 'K'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c, factor;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":c:b:e:f:d:o:n:w:m:r:C:Gh", longopts,
                          NULL)) != -1) {
    bool ok = true;
    switch (c) {
    case 'c':
      ok = false;
      for (int k = 0; k < NUM_COLLS; k++)
        if (strcmp(optarg, colls[k].name) == 0) o->coll = (enum coll)k, ok = true;
      break;
    case 'b': ok = parse_size(optarg, &o->min_bytes); break;
    case 'e': ok = parse_size(optarg, &o->max_bytes); break;
    case 'f':
      ok = parse_int(optarg, 2, 1 << 20, &factor);
      o->factor = (size_t)factor;
      break;
    case 'd':
      ok = false;
      for (int k = 0; k < NUM_DTS; k++)
        if (strcmp(optarg, dts[k].name) == 0) o->dt = &dts[k], ok = true;
      break;
    case 'o':
      ok = false;
      for (int k = 0; k < RINGCC_NUM_OPS; k++)
        if (strcmp(optarg, op_names[k]) == 0) o->op = (ringcc_op_t)k, ok = true;
      break;
    case 'n': ok = parse_int(optarg, 1, INT32_MAX, &o->iters); break;
    case 'w': ok = parse_int(optarg, 0, INT32_MAX, &o->warmup); break;
    case 'm': ok = parse_seconds(optarg, &o->min_time); break;
    case 'r': ok = parse_int(optarg, 0, INT32_MAX, &o->root); break;
    case 'C': ok = parse_int(optarg, 0, 1, &o->check); break;
    case 'G': o->device = true; break;
    case 'J': o->json_path = optarg; break;
    case 'K': o->calibrate = true; break;
    case 'h': usage(stdout); exit(0);
    case ':':
      snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
      return err;
    default:
      snprintf(err, errlen, "unknown option '%s'", argv[optind - 1]);
      return err;
    }
    if (!ok) {
      snprintf(err, errlen, "invalid value '%s' for -%c", optarg, c);
      return err;
    }
  }
  if (optind < argc) {
    snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
    return err;
  }
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
    snprintf(err, errlen, "want 1 <= -b (%zu) <= -e (%zu)", o->min_bytes,
             o->max_bytes);
    return err;
  }
  return NULL;
}

/* ---- 16-bit floats (round to nearest even, like the library) -------------- */

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff,
           mant = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) { /* subnormal half, or zero */
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000;
    unsigned shift = (unsigned)(14 - e);
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1),
             mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* may carry to inf */
  return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f,
           mant = h & 0x3ff, x;
  if (exp == 0) {
    float f = (float)mant * 5.9604644775390625e-8f; /* 2^-24 */
    return sign ? -f : f;
  }
  if (exp == 31) x = sign | 0x7f800000 | (mant << 13);
  else x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static float bf16_to_float(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* ---- element values --------------------------------------------------------
 * An element is held as a uint64 (integers, sign-extended for signed types,
 * so arithmetic wraps exactly like the type's) or as a double (floats, whose
 * values here are always exact in the element type). */

typedef union {
  uint64_t u;
  double f;
} elem_t;

/* The integer v as the element type would hold it, widened back. */
static uint64_t int_norm(const struct dt_info *t, uint64_t v) {
  bool s = t->kind == K_SINT;
  switch (t->size) {
  case 1: return s ? (uint64_t)(int64_t)(int8_t)v : (uint8_t)v;
  case 4: return s ? (uint64_t)(int64_t)(int32_t)v : (uint32_t)v;
  default: return v;
  }
}

/* The float x rounded to the element type. */
static double float_norm(const struct dt_info *t, double x) {
  switch (t->dt) {
  case RINGCC_FLOAT16: return half_to_float(float_to_half((float)x));
  case RINGCC_BFLOAT16: return bf16_to_float(float_to_bf16((float)x));
  case RINGCC_FLOAT32: return (float)x;
  default: return x;
  }
}

static void put(const struct dt_info *t, void *buf, size_t i, elem_t v) {
  char *p = (char *)buf + i * t->size;
  switch (t->dt) {
  case RINGCC_INT8: case RINGCC_UINT8: *(uint8_t *)p = (uint8_t)v.u; break;
  case RINGCC_INT32: case RINGCC_UINT32: *(uint32_t *)p = (uint32_t)v.u; break;
  case RINGCC_INT64: case RINGCC_UINT64: *(uint64_t *)p = v.u; break;
  case RINGCC_FLOAT16: *(uint16_t *)p = float_to_half((float)v.f); break;
  case RINGCC_BFLOAT16: *(uint16_t *)p = float_to_bf16((float)v.f); break;
  case RINGCC_FLOAT32: *(float *)p = (float)v.f; break;
  default: *(double *)p = v.f; break;
  }
}

static elem_t get(const struct dt_info *t, const void *buf, size_t i) {
  const char *p = (const char *)buf + i * t->size;
  elem_t v;
  switch (t->dt) {
  case RINGCC_INT8: case RINGCC_UINT8: v.u = int_norm(t, *(const uint8_t *)p); break;
  case RINGCC_INT32: case RINGCC_UINT32: v.u = int_norm(t, *(const uint32_t *)p); break;
  case RINGCC_INT64: case RINGCC_UINT64: v.u = *(const uint64_t *)p; break;
  case RINGCC_FLOAT16: v.f = half_to_float(*(const uint16_t *)p); break;
  case RINGCC_BFLOAT16: v.f = bf16_to_float(*(const uint16_t *)p); break;
  case RINGCC_FLOAT32: v.f = *(const float *)p; break;
  default: v.f = *(const double *)p; break;
  }
  return v;
}

static bool same(const struct dt_info *t, elem_t a, elem_t b) {
  return t->kind == K_FLOAT ? a.f == b.f : a.u == b.u;
}

static void format_elem(const struct dt_info *t, elem_t v, char *buf,
                        size_t len) {
  if (t->kind == K_FLOAT) snprintf(buf, len, "%.9g", v.f);
  else if (t->kind == K_SINT) snprintf(buf, len, "%" PRId64, (int64_t)v.u);
  else snprintf(buf, len, "%" PRIu64, v.u);
}

static enum gen_mode gen_mode_of(const struct bench *b) {
  if (!colls[b->o.coll].has_op) return GEN_COPY;
  switch (b->o.op) {
  case RINGCC_SUM: case RINGCC_AVG: return GEN_SUM;
  case RINGCC_PROD: return GEN_PROD;
  default: return GEN_COPY;
  }
}

/* The input of element i on rank q. */
static elem_t gen(const struct bench *b, enum gen_mode mode, int q, size_t i) {
  const struct dt_info *t = b->o.dt;
  uint64_t p = ((uint64_t)i * 7 + (uint64_t)q * 131) % 1021; /* 0..1020 */
  elem_t v;
  if (t->kind == K_FLOAT) {
    if (mode == GEN_PROD) {
      v.f = (p & 1) && q < t->max_twos ? 2.0 : 1.0;
    } else {
      int64_t h = b->float_range;
      v.f = (double)((int64_t)(p % (uint64_t)(2 * h + 1)) - h);
    }
  } else if (mode == GEN_PROD) {
    v.u = (p & 1) ? (t->kind == K_SINT ? UINT64_MAX /* -1 */ : 2) : 1;
  } else {
    /* 8-bit types wrap 0..1020 into their range; wider signed types get
     * negative values too. */
    uint64_t s = t->kind == K_SINT && t->size > 1 ? p - 510 : p;
    v.u = int_norm(t, s);
  }
  return v;
}

static elem_t combine(const struct bench *b, elem_t a, elem_t x) {
  const struct dt_info *t = b->o.dt;
  if (t->kind == K_FLOAT) {
    switch (b->o.op) {
    case RINGCC_PROD: a.f *= x.f; break;
    case RINGCC_MIN: a.f = x.f < a.f ? x.f : a.f; break;
    case RINGCC_MAX: a.f = x.f > a.f ? x.f : a.f; break;
    default: a.f += x.f; break;
    }
    return a;
  }
  bool s = t->kind == K_SINT;
  switch (b->o.op) {
  case RINGCC_PROD: a.u = int_norm(t, a.u * x.u); break;
  case RINGCC_MIN:
    if (s ? (int64_t)x.u < (int64_t)a.u : x.u < a.u) a = x;
    break;
  case RINGCC_MAX:
    if (s ? (int64_t)x.u > (int64_t)a.u : x.u > a.u) a = x;
    break;
  default: a.u = int_norm(t, a.u + x.u); break;
  }
  return a;
}

/* The reduction over all ranks of element i, as the library defines it:
 * avg = sum/nranks, in float for the float types (then rounded to float16 or
 * bfloat16), truncated toward zero for integers. */
static elem_t reduced(const struct bench *b, enum gen_mode mode, size_t i) {
  const struct dt_info *t = b->o.dt;
  elem_t acc = gen(b, mode, 0, i);
  for (int q = 1; q < b->nranks; q++) acc = combine(b, acc, gen(b, mode, q, i));
  if (t->kind == K_FLOAT) {
    if (b->o.op == RINGCC_AVG)
      acc.f = t->dt == RINGCC_FLOAT64 ? acc.f / b->nranks
                                      : (float)acc.f / (float)b->nranks;
    acc.f = float_norm(t, acc.f);
  } else if (b->o.op == RINGCC_AVG) {
    if (t->kind == K_SINT)
      acc.u = (uint64_t)((int64_t)acc.u / (int64_t)b->nranks);
    else
      acc.u = acc.u / (uint64_t)b->nranks;
  }
  return acc;
}

/* ---- one collective call --------------------------------------------------- */

static void context_of(const struct bench *b, const struct plan *p, bool in_place,
                       char *buf, size_t len) {
  snprintf(buf, len, "(%s, %zu bytes, %s%s%s, %s)", colls[b->o.coll].name,
           p->bytes, b->o.dt->name, colls[b->o.coll].has_op ? ", " : "",
           colls[b->o.coll].has_op ? op_names[b->o.op] : "",
           in_place ? "in place" : "out of place");
}

static ringcc_result_t sendrecv(struct bench *b, const struct plan *p,
                                const char **call) {
  int next = (b->rank + 1) % b->nranks;
  int prev = (b->rank - 1 + b->nranks) % b->nranks;
  ringcc_datatype_t dt = b->o.dt->dt;
  /* Blocking calls: even ranks send first, odd ranks receive first, so every
   * send meets a receive (also with an odd number of ranks). */
  for (int step = 0; step < 2; step++) {
    ringcc_result_t r;
    if ((step == 0) == (b->rank % 2 == 0)) {
      *call = "ringcc_send";
      r = ringcc_send(b->o.device ? b->dsbuf : b->sbuf, p->arg, dt, next,
                      b->comm, b->stream);
    } else {
      *call = "ringcc_recv";
      r = ringcc_recv(b->o.device ? b->drbuf : b->rbuf, p->arg, dt, prev,
                      b->comm, b->stream);
    }
    if (r != RINGCC_SUCCESS) return r;
  }
  return RINGCC_SUCCESS;
}

/* One call of the collective; *call names the libringcc function. */
static ringcc_result_t call_coll(struct bench *b, const struct plan *p,
                                 bool in_place, const char **call) {
  ringcc_datatype_t dt = b->o.dt->dt;
  ringcc_op_t op = b->o.op;
  char *s = b->o.device ? b->dsbuf : b->sbuf;
  char *r = b->o.device ? b->drbuf : b->rbuf;
  char *own_block = r + (size_t)b->rank * p->arg * b->o.dt->size;
  ringcc_comm_t c = b->comm;
  switch (b->o.coll) {
  case C_ALLREDUCE:
    *call = "ringcc_allreduce";
    return ringcc_allreduce(in_place ? r : s, r, p->arg, dt, op, c, b->stream);
  case C_REDUCE_SCATTER:
    *call = "ringcc_reduce_scatter";
    return in_place ? ringcc_reduce_scatter(r, own_block, p->arg, dt, op, c, b->stream)
                    : ringcc_reduce_scatter(s, r, p->arg, dt, op, c, b->stream);
  case C_ALLGATHER:
    *call = "ringcc_allgather";
    return ringcc_allgather(in_place ? own_block : s, r, p->arg, dt, c, b->stream);
  case C_BCAST:
    *call = "ringcc_bcast";
    return ringcc_bcast(r, p->arg, dt, b->o.root, c, b->stream);
  case C_REDUCE:
    *call = "ringcc_reduce";
    return ringcc_reduce(in_place ? r : s, r, p->arg, dt, op, b->o.root, c, b->stream);
  case C_ALLTOALL:
    *call = "ringcc_alltoall";
    return ringcc_alltoall(in_place ? r : s, r, p->arg, dt, c, b->stream);
  default:
    return sendrecv(b, p, call);
  }
}

/* call_coll, dying with the details on failure (formatted only then, so the
 * timed loop does nothing but call). */
static void run_once(struct bench *b, const struct plan *p, bool in_place) {
  const char *call = "";
  ringcc_result_t r = call_coll(b, p, in_place, &call);
  if (r != RINGCC_SUCCESS) {
    char ctx[160];
    context_of(b, p, in_place, ctx, sizeof ctx);
    check_call(b, r, call, ctx);
  }
}

/* ---- inputs and checks ------------------------------------------------------ */

static void fill(const struct bench *b, void *buf, size_t n, size_t first,
                 enum gen_mode mode) {
  for (size_t i = 0; i < n; i++)
    put(b->o.dt, buf, i, gen(b, mode, b->rank, first + i));
}

/* Inputs as the call of this plan and placement reads them; every element the
 * call should write is poisoned (all bits set: NaN for the float types). */
static void fill_inputs(const struct bench *b, const struct plan *p,
                        bool in_place) {
  size_t ts = b->o.dt->size, arg = p->arg;
  enum gen_mode mode = gen_mode_of(b);
  char *in = in_place ? b->rbuf : b->sbuf;
  switch (b->o.coll) {
  case C_ALLGATHER:
    memset(b->rbuf, 0xff, p->bytes);
    fill(b, in_place ? b->rbuf + (size_t)b->rank * arg * ts : b->sbuf, arg,
         (size_t)b->rank * arg, mode);
    break;
  case C_BCAST:
    if (b->rank == b->o.root) fill(b, b->rbuf, p->count, 0, mode);
    else memset(b->rbuf, 0xff, p->bytes);
    break;
  default: /* the full input is p->count elements from index 0 */
    if (!in_place) memset(b->rbuf, 0xff, p->bytes);
    fill(b, in, p->count, 0, mode);
    break;
  }
}

static long long compare(struct bench *b, const struct plan *p, bool in_place,
                         size_t at, size_t i, elem_t want) {
  elem_t got = get(b->o.dt, b->rbuf, at);
  if (same(b->o.dt, got, want)) return 0;
  if (b->mismatches_reported < MAX_MISMATCH_REPORTS) {
    char g[64], w[64], ctx[160];
    b->mismatches_reported++;
    format_elem(b->o.dt, got, g, sizeof g);
    format_elem(b->o.dt, want, w, sizeof w);
    context_of(b, p, in_place, ctx, sizeof ctx);
    fprintf(stderr, PROG_NAME ": rank %d: wrong result %s: element %zu is %s, "
                    "want %s\n", b->rank, ctx, i, g, w);
  }
  return 1;
}

/* Wrong elements in this rank's result. */
static long long check_result(struct bench *b, const struct plan *p,
                              bool in_place) {
  enum gen_mode mode = gen_mode_of(b);
  size_t arg = p->arg, n = p->count;
  int rank = b->rank, nranks = b->nranks;
  long long wrong = 0;
  b->mismatches_reported = 0;
  switch (b->o.coll) {
  case C_ALLREDUCE:
    for (size_t i = 0; i < n; i++) wrong += compare(b, p, in_place, i, i, reduced(b, mode, i));
    break;
  case C_REDUCE:
    if (rank != b->o.root) break;
    for (size_t i = 0; i < n; i++) wrong += compare(b, p, in_place, i, i, reduced(b, mode, i));
    break;
  case C_REDUCE_SCATTER: {
    size_t first = (size_t)rank * arg, at = in_place ? first : 0;
    for (size_t j = 0; j < arg; j++)
      wrong += compare(b, p, in_place, at + j, first + j, reduced(b, mode, first + j));
    break;
  }
  case C_ALLGATHER:
    for (size_t i = 0; i < n; i++)
      wrong += compare(b, p, in_place, i, i, gen(b, mode, (int)(i / arg), i));
    break;
  case C_BCAST:
    for (size_t i = 0; i < n; i++)
      wrong += compare(b, p, in_place, i, i, gen(b, mode, b->o.root, i));
    break;
  case C_ALLTOALL: /* block q came from rank q's block `rank` */
    for (size_t i = 0; i < n; i++)
      wrong += compare(b, p, in_place, i, i,
                       gen(b, mode, (int)(i / arg), (size_t)rank * arg + i % arg));
    break;
  default: /* sendrecv: from the previous rank */
    for (size_t i = 0; i < n; i++)
      wrong += compare(b, p, in_place, i, i,
                       gen(b, mode, (rank - 1 + nranks) % nranks, i));
    break;
  }
  return wrong;
}

/* ---- measuring -------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double max_over_ranks(struct bench *b, double mine) {
  double all = 0;
  check_call(b, ringcc_allreduce(&mine, &all, 1, RINGCC_FLOAT64, RINGCC_MAX,
                                 b->comm, NULL),
             "ringcc_allreduce", "(max of the times)");
  return all;
}

static long long sum_over_ranks(struct bench *b, long long mine) {
  int64_t in = mine, all = 0;
  check_call(b, ringcc_allreduce(&in, &all, 1, RINGCC_INT64, RINGCC_SUM, b->comm,
                                 NULL),
             "ringcc_allreduce", "(sum of #wrong)");
  return all;
}

static double busbw_factor(const struct bench *b) {
  double n = b->nranks;
  switch (colls[b->o.coll].busbw) {
  case 2: return 2.0 * (n - 1) / n;
  case 1: return (n - 1) / n;
  default: return 1.0;
  }
}

/* -G: the host inputs to the device buffers, and the result back. */
static void to_device(struct bench *b, const struct plan *p) {
  if (!b->o.device) return;
  dev_put(b->dsbuf, b->sbuf, p->bytes ? p->bytes : 1, b->stream);
  dev_put(b->drbuf, b->rbuf, p->bytes ? p->bytes : 1, b->stream);
}

static void from_device(struct bench *b, const struct plan *p) {
  if (b->o.device) dev_get(b->rbuf, b->drbuf, p->bytes ? p->bytes : 1, b->stream);
}

static struct result measure(struct bench *b, const struct plan *p,
                             bool in_place) {
  struct result res = {.valid = true, .wrong = -1};
  fill_inputs(b, p, in_place);
  to_device(b, p);
  double w0 = 0;
  for (int k = 0; k < b->o.warmup; k++) {
    if (k == 1) w0 = now_s(); /* the first call may set things up */
    run_once(b, p, in_place);
  }
  if (b->o.device) dev_sync(b->stream);
  res.iters = b->o.iters;
  if (b->o.min_time > 0) { /* every rank takes the slowest rank's estimate */
    double est = b->o.warmup >= 2 ? (now_s() - w0) / (b->o.warmup - 1) : 0;
    if (b->o.warmup < 2) {
      w0 = now_s();
      run_once(b, p, in_place);
      if (b->o.device) dev_sync(b->stream);
      est = now_s() - w0;
    }
    est = max_over_ranks(b, est);
    double want = est > 0 ? b->o.min_time / est : 1e6;
    if (want > res.iters) res.iters = want < 1e6 ? (int)want + 1 : 1000000;
  }
  check_call(b, ringcc_barrier(b->comm, NULL), "ringcc_barrier", NULL);
  double t0 = now_s();
  for (int k = 0; k < res.iters; k++) run_once(b, p, in_place);
  if (b->o.device) dev_sync(b->stream); /* the enqueued calls have run */
  double mine = (now_s() - t0) / res.iters;
  double t = max_over_ranks(b, mine);
  res.time_us = t * 1e6;
  res.algbw = t > 0 ? (double)p->bytes / t / 1e9 : 0;
  res.busbw = res.algbw * busbw_factor(b);
  if (b->o.check) {
    fill_inputs(b, p, in_place);
    to_device(b, p);
    run_once(b, p, in_place);
    from_device(b, p);
    res.wrong = sum_over_ranks(b, check_result(b, p, in_place));
  }
  return res;
}

/* The plan for a requested size: rounded down to whole elements, and to
 * whole blocks of nranks elements where each rank owns a block. */
static struct plan make_plan(const struct bench *b, size_t requested) {
  size_t ts = b->o.dt->size;
  struct plan p = {.requested = requested};
  if (colls[b->o.coll].per_rank_blocks) {
    p.arg = requested / ts / (size_t)b->nranks;
    p.count = p.arg * (size_t)b->nranks;
  } else {
    p.arg = p.count = requested / ts;
  }
  p.bytes = p.count * ts;
  return p;
}

/* ---- output ----------------------------------------------------------------- */

#define LEAD_FMT "%12s %12s %9s %6s %5s"
#define GROUP_FMT " %10s %11s %11s %7s"
#define GROUP_WIDTH 43 /* strlen of a formatted GROUP_FMT */

static void print_header(const struct bench *b) {
  const struct options *o = &b->o;
  int version = 0;
  check_call(NULL, ringcc_get_version(&version), "ringcc_get_version", NULL);
  printf("# " PROG_NAME ": %s, libringcc %d.%d.%d\n", colls[o->coll].name,
         version / 10000, version / 100 % 100, version % 100);
  printf("#  nranks %d  datatype %s  op %s  root %d  minBytes %zu  maxBytes %zu"
         "  step %zu(factor)  warmup %d  iters %d  mintime %gs  check %d\n",
         b->nranks, o->dt->name,
         colls[o->coll].has_op ? op_names[o->op] : "none",
         colls[o->coll].has_root ? o->root : -1, o->min_bytes, o->max_bytes,
         o->factor, o->warmup, o->iters, o->min_time, o->check);
  printf("#  %s; time = per-call average of the timed "
         "loop, max over ranks; GB = 1e9 B; busbw = algbw x %.4f\n",
         o->device ? "device buffers (-G), one stream, synchronized after the "
                     "loop" : "host buffers, NULL stream",
         busbw_factor(b));
  if (o->coll == C_BCAST)
    printf("#  bcast has one buffer: out-of-place and in-place time the same "
           "call\n");
  if (o->coll == C_SENDRECV)
    printf("#  sendrecv: rank r sends to r+1 and receives from r-1; no "
           "in-place form\n");
}

/* "#  Rank  0 Pid  1234 on host" for every rank, gathered to all. */
static void print_ranks(struct bench *b) {
  struct {
    int32_t pid;
    char host[60];
  } me = {.pid = (int32_t)getpid()}, *all;
  gethostname(me.host, sizeof me.host - 1);
  all = calloc((size_t)b->nranks, sizeof me);
  if (all == NULL) die("out of memory");
  check_call(b, ringcc_allgather(&me, all, sizeof me, RINGCC_UINT8, b->comm, NULL),
             "ringcc_allgather", "(rank list)");
  if (b->rank == 0)
    for (int r = 0; r < b->nranks; r++)
      printf("#  Rank %2d Pid %6d on %s\n", r, (int)all[r].pid, all[r].host);
  free(all);
}

static int center_pad(const char *label) {
  int len = (int)strlen(label);
  return (GROUP_WIDTH - len) / 2 + len;
}

static void print_table_header(void) {
  printf("#\n#" LEAD_FMT " %*s%*s %*s\n", "", "", "", "", "",
         center_pad("out-of-place"), "out-of-place",
         GROUP_WIDTH - center_pad("out-of-place") - 1, "",
         center_pad("in-place"), "in-place");
  printf("#" LEAD_FMT GROUP_FMT GROUP_FMT "\n", "size", "count", "type",
         "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

static void print_group(const struct result *r) {
  if (!r->valid) {
    printf(GROUP_FMT, "n/a", "n/a", "n/a", "n/a");
    return;
  }
  char wrong[24];
  if (r->wrong < 0) snprintf(wrong, sizeof wrong, "N/A");
  else snprintf(wrong, sizeof wrong, "%lld", r->wrong);
  printf(" %10.2f %11.2f %11.2f %7s", r->time_us, r->algbw, r->busbw, wrong);
}

static void print_row(const struct bench *b, const struct row *row) {
  char size[24], count[24], root[12];
  snprintf(size, sizeof size, "%zu", row->plan.bytes);
  snprintf(count, sizeof count, "%zu", row->plan.count);
  snprintf(root, sizeof root, "%d", colls[b->o.coll].has_root ? b->o.root : -1);
  printf(" " LEAD_FMT, size, count, b->o.dt->name,
         colls[b->o.coll].has_op ? op_names[b->o.op] : "none", root);
  print_group(&row->oop);
  print_group(&row->ip);
  printf("\n");
  fflush(stdout);
}

static void json_group(FILE *f, const char *prefix, const struct result *r) {
  if (!r->valid) {
    fprintf(f, ", \"%s_time_us\": null, \"%s_algbw_GBps\": null, "
               "\"%s_busbw_GBps\": null, \"%s_wrong\": null",
            prefix, prefix, prefix, prefix);
    return;
  }
  fprintf(f, ", \"%s_time_us\": %.9g, \"%s_algbw_GBps\": %.9g, "
             "\"%s_busbw_GBps\": %.9g, \"%s_wrong\": ",
          prefix, r->time_us, prefix, r->algbw, prefix, r->busbw, prefix);
  if (r->wrong < 0) fprintf(f, "null");
  else fprintf(f, "%lld", r->wrong);
}

/* Returns 0, or -1 with errno set. */
static int write_json(const struct bench *b, FILE *f, const struct row *rows,
                      int nrows) {
  fprintf(f, "[\n");
  for (int k = 0; k < nrows; k++) {
    const struct row *row = &rows[k];
    fprintf(f, "  {\"collective\": \"%s\", \"nranks\": %d, \"size\": %zu, "
               "\"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
               "\"root\": %d, \"iters\": %d, \"warmup\": %d",
            colls[b->o.coll].name, b->nranks, row->plan.bytes, row->plan.count,
            b->o.dt->name, colls[b->o.coll].has_op ? op_names[b->o.op] : "none",
            colls[b->o.coll].has_root ? b->o.root : -1,
            row->oop.valid ? row->oop.iters : row->ip.iters, b->o.warmup);
    json_group(f, "oop", &row->oop);
    json_group(f, "ip", &row->ip);
    fprintf(f, "}%s\n", k + 1 < nrows ? "," : "");
  }
  fprintf(f, "]\n");
  if (ferror(f)) {
    errno = EIO;
    return -1;
  }
  return 0;
}

/* ---- setup ------------------------------------------------------------------ */

static void *alloc_touched(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 64;
  int e = posix_memalign(&p, 4096, bytes);
  if (e != 0) die("cannot allocate %zu bytes: %s", bytes, strerror(e));
  memset(p, 0, bytes); /* first touch, outside the timed loops */
  return p;
}

/* Usage errors that need nranks; reported by rank 0, every rank exits. */
static const char *check_against_comm(const struct bench *b, char *err,
                                      size_t len) {
  if (colls[b->o.coll].has_root && b->o.root >= b->nranks) {
    snprintf(err, len, "root %d is not a rank (nranks %d)", b->o.root,
             b->nranks);
    return err;
  }
  if (b->o.coll == C_SENDRECV && b->nranks < 2) {
    snprintf(err, len, "sendrecv needs at least 2 ranks (nranks %d)",
             b->nranks);
    return err;
  }
  return NULL;
}

static void float_range_setup(struct bench *b) {
  const struct dt_info *t = b->o.dt;
  int64_t bound = t->exact;
  if (gen_mode_of(b) == GEN_SUM) bound /= b->nranks; /* n-rank sums exact */
  b->float_range = bound < 510 ? bound : 510;
}

/* Every rank ends here (after rank 0 has printed why, where there is a why):
 * nobody exits before rank 0 has said everything, since a launcher stops the
 * whole job at the first non-zero exit. */
__attribute__((noreturn)) static void finish(struct bench *b, int status) {
  fflush(stdout);
  fflush(stderr);
  check_call(b, ringcc_barrier(b->comm, NULL), "ringcc_barrier", "(the end)");
  check_call(b, ringcc_comm_destroy(b->comm), "ringcc_comm_destroy", NULL);
  b->comm = NULL;
  free(b->sbuf);
  free(b->rbuf);
  dev_free(b->dsbuf, NULL);
  dev_free(b->drbuf, b->stream);
  exit(status);
}

/* Opens FILE on rank 0; every rank learns whether that worked. */
static FILE *open_json(struct bench *b) {
  FILE *f = NULL;
  int32_t failed = 0, any = 0;
  char why[256] = "";
  if (b->rank == 0 && b->o.json_path) {
    f = fopen(b->o.json_path, "w");
    if (f == NULL) {
      failed = 1;
      snprintf(why, sizeof why, "%s", strerror(errno));
    }
  }
  check_call(b, ringcc_allreduce(&failed, &any, 1, RINGCC_INT32, RINGCC_MAX,
                                 b->comm, NULL),
             "ringcc_allreduce", "(json check)");
  if (any) {
    if (b->rank == 0)
      fprintf(stderr, PROG_NAME ": cannot write %s: %s\n", b->o.json_path, why);
    finish(b, EXIT_USAGE);
  }
  return f;
}

/* ---- --calibrate: measure this machine for the tuner ----------------------
 *
 * For shared memory and for TCP (a communicator with shm_disable=1), ring
 * allreduce and one-shot allreduce (communicators with algo forced) at a few
 * sizes, and a ping-pong between ranks 0 and 1; gamma from the library's
 * float32 sum kernel, timed on every rank at once (as in a collective, where
 * every rank reduces). A time is the per-call average of a block of calls,
 * the maximum over ranks, as the table above measures; the median of
 * CAL_BLOCKS blocks; and the median of CAL_ROUNDS rounds of the whole
 * sweep (cal_measure).
 *
 * alpha, beta and beta_mem (beyond the last-level cache) of each link, and
 * gamma, are fitted (rcc_model_fit: least squares of relative errors) to
 * the collectives' times: those are what the tuner predicts, with every
 * rank busy at once; the reduction kernel's own speed is printed beside the
 * fitted gamma. The ping-pong, one edge busy and
 * the other ranks idle, gets a fit of its own, printed and kept in the
 * file's comments: where ranks outnumber cores, or the machine is loaded,
 * the two differ, and the difference is the price of running n ranks at
 * once. Rank 0 writes the tuner's file. */

#define CAL_ROUNDS 5
#define CAL_BLOCKS 3
#define CAL_BLOCK_US 5000.0 /* aim for blocks of at least this long */
#define CAL_MAX_SAMPLES 64
#define CAL_BUF_BYTES ((size_t)64 << 20)

/* make bench's range, 8 B to 64 MiB, every factor of 16 and the top, and
 * 64 KiB: with only 32 KiB and 512 KiB around it, the fit left the sizes
 * where alpha and beta both matter 30% under the measured time. */
static const size_t cal_ring_sizes[] = {8, 128, 2048, 32768, 65536, 524288,
                                        8388608, 67108864};
static const size_t cal_direct_sizes[] = {8, 1024, 16384, 65536};
static const size_t cal_pingpong_sizes[] = {8, 16384, 262144, 4194304};

enum cal_kind { CAL_RING, CAL_DIRECT, CAL_PINGPONG };
static const char *const cal_kind_names[] = {"ring allreduce",
                                             "one-shot allreduce",
                                             "ping-pong (one way)"};

struct calibration {
  struct bench *b;
  char *sbuf, *rbuf;
  ringcc_comm_t link_comms[RCC_NUM_LINKS][2]; /* ring, one-shot forced */
  struct rcc_fit_sample samples[CAL_MAX_SAMPLES];
  ringcc_comm_t comms[CAL_MAX_SAMPLES];
  int kinds[CAL_MAX_SAMPLES];
  int nsamples;
};

static void cal_sync(struct bench *b) {
  check_call(b, ringcc_barrier(b->comm, NULL), "ringcc_barrier",
             "(--calibrate)");
}

/* k calls of one measurement on comm; returns this rank's seconds. */
static double cal_run(struct calibration *c, ringcc_comm_t comm, int kind,
                      size_t bytes, int k) {
  struct bench *b = c->b;
  size_t count = bytes / sizeof(float);
  double t0 = now_s();
  for (int i = 0; i < k; i++) {
    ringcc_result_t r = RINGCC_SUCCESS;
    if (kind != CAL_PINGPONG)
      r = ringcc_allreduce(c->sbuf, c->rbuf, count, RINGCC_FLOAT32,
                           RINGCC_SUM, comm, NULL);
    else if (b->rank <= 1) { /* rank 0 sends first, rank 1 answers */
      int peer = 1 - b->rank;
      if (b->rank == 0)
        r = ringcc_send(c->sbuf, count, RINGCC_FLOAT32, peer, comm, NULL);
      if (r == RINGCC_SUCCESS)
        r = ringcc_recv(c->rbuf, count, RINGCC_FLOAT32, peer, comm, NULL);
      if (r == RINGCC_SUCCESS && b->rank == 1)
        r = ringcc_send(c->sbuf, count, RINGCC_FLOAT32, peer, comm, NULL);
    }
    check_call(b, r, kind == CAL_PINGPONG ? "ringcc_send/recv" : "ringcc_allreduce",
               "(--calibrate)");
  }
  return now_s() - t0;
}

static int cmp_dbl(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Microseconds per call (per one-way message for the ping-pong). */
static double cal_time(struct calibration *c, ringcc_comm_t comm, int kind,
                       size_t bytes) {
  struct bench *b = c->b;
  double per_call = kind == CAL_PINGPONG ? 2.0 : 1.0, t[CAL_BLOCKS];
  cal_run(c, comm, kind, bytes, 2); /* warm up */
  cal_sync(b);
  double once = max_over_ranks(b, cal_run(c, comm, kind, bytes, 1)) * 1e6;
  int k = once > 0 ? (int)(CAL_BLOCK_US / once) + 1 : 1;
  if (k > 1000) k = 1000;
  for (int i = 0; i < CAL_BLOCKS; i++) {
    cal_sync(b);
    t[i] = max_over_ranks(b, cal_run(c, comm, kind, bytes, k)) * 1e6 /
           (k * per_call);
  }
  qsort(t, CAL_BLOCKS, sizeof(double), cmp_dbl);
  return t[CAL_BLOCKS / 2];
}

/* Plans one measurement; cal_measure times it. */
static void cal_add(struct calibration *c, ringcc_comm_t comm, int link,
                    int kind, size_t bytes) {
  struct ringcc_comm *in = comm;
  if (c->nsamples == CAL_MAX_SAMPLES) return;
  c->comms[c->nsamples] = comm;
  c->kinds[c->nsamples] = kind;
  c->samples[c->nsamples++] = (struct rcc_fit_sample){
      .coll = kind == CAL_PINGPONG ? RCC_COLL_SEND : RCC_COLL_ALLREDUCE,
      .alg = kind == CAL_RING ? RCC_ALG_RING
             : kind == CAL_DIRECT
                 /* one-shot over shared memory runs on the board */
                 ? (link == RCC_LINK_TCP ? RCC_ALG_ONESHOT : RCC_ALG_BOARD)
                 : RCC_ALG_P2P,
      .link = link,
      .nranks = c->b->nranks,
      .bytes = (double)bytes,
      .chunk_bytes = (double)in->ring_chunk_bytes};
}

/* Every planned measurement, CAL_ROUNDS times over, interleaved: a burst
 * of load from elsewhere spoils one round of a few samples, not all rounds
 * of one kind; each sample's time is its median over the rounds. The same
 * for gamma. */
static double cal_measure(struct calibration *c) {
  double t[CAL_ROUNDS], gamma[CAL_ROUNDS];
  static double times[CAL_MAX_SAMPLES][CAL_ROUNDS];
  for (int r = 0; r < CAL_ROUNDS; r++) {
    if (c->b->rank == 0) {
      printf("# round %d of %d ...\n", r + 1, CAL_ROUNDS);
      fflush(stdout);
    }
    cal_sync(c->b);
    gamma[r] = max_over_ranks(c->b, rcc_tuner_time_reduce((size_t)16 << 20, 5));
    for (int i = 0; i < c->nsamples; i++)
      times[i][r] = cal_time(c, c->comms[i], c->kinds[i],
                             (size_t)c->samples[i].bytes);
  }
  for (int i = 0; i < c->nsamples; i++) {
    memcpy(t, times[i], sizeof t);
    qsort(t, CAL_ROUNDS, sizeof(double), cmp_dbl);
    c->samples[i].time_us = t[CAL_ROUNDS / 2];
  }
  qsort(gamma, CAL_ROUNDS, sizeof(double), cmp_dbl);
  return gamma[CAL_ROUNDS / 2];
}

/* A communicator over the same ranks with shm_disable and algo set. */
static ringcc_comm_t cal_comm(struct bench *b, int shm_disable, int algo) {
  ringcc_unique_id_t id;
  ringcc_comm_t comm;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  if (b->rank == 0)
    check_call(b, ringcc_get_unique_id(&id), "ringcc_get_unique_id",
               "(--calibrate)");
  check_call(b, ringcc_bcast(&id, sizeof id, RINGCC_UINT8, 0, b->comm, NULL),
             "ringcc_bcast", "(--calibrate id)");
  cfg.shm_disable = shm_disable;
  cfg.algo = algo;
  check_call(b, ringcc_comm_init(&comm, b->nranks, &id, b->rank, &cfg),
             "ringcc_comm_init", shm_disable ? "(--calibrate, TCP)"
                                             : "(--calibrate, shm)");
  return comm;
}

/* The communicators of a link (ring and one-shot forced) and what to
 * measure on them. */
static void cal_link(struct calibration *c, int link) {
  struct bench *b = c->b;
  int tcp = link == RCC_LINK_TCP;
  ringcc_comm_t ring = c->link_comms[link][0] = cal_comm(b, tcp, RINGCC_ALGO_RING);
  ringcc_comm_t direct = c->link_comms[link][1] =
      cal_comm(b, tcp, RINGCC_ALGO_ONESHOT);
  size_t slot = ((struct ringcc_comm *)direct)->all_chunk_bytes;
  for (size_t i = 0; i < sizeof cal_ring_sizes / sizeof *cal_ring_sizes; i++)
    cal_add(c, ring, link, CAL_RING, cal_ring_sizes[i]);
  for (size_t i = 0; i < sizeof cal_direct_sizes / sizeof *cal_direct_sizes; i++)
    if (cal_direct_sizes[i] <= slot) /* else it would run the ring */
      cal_add(c, direct, link, CAL_DIRECT, cal_direct_sizes[i]);
  for (size_t i = 0; i < sizeof cal_pingpong_sizes / sizeof *cal_pingpong_sizes; i++)
    cal_add(c, ring, link, CAL_PINGPONG, cal_pingpong_sizes[i]);
}

/* Every rank on this host? (--calibrate measures one machine.) */
static bool cal_one_host(struct bench *b, char host[64]) {
  char *all = calloc((size_t)b->nranks, 64);
  if (all == NULL) die("out of memory");
  memset(host, 0, 64);
  gethostname(host, 63);
  check_call(b, ringcc_allgather(host, all, 64, RINGCC_UINT8, b->comm, NULL),
             "ringcc_allgather", "(--calibrate hosts)");
  bool same = true;
  for (int r = 0; r < b->nranks; r++)
    same = same && strncmp(all + (size_t)r * 64, host, 64) == 0;
  free(all);
  return same;
}

/* The samples of one kind of measurement (collectives or ping-pong). */
static int cal_select(const struct calibration *c, bool pingpong,
                      struct rcc_fit_sample *out) {
  int n = 0;
  for (int i = 0; i < c->nsamples; i++)
    if ((c->kinds[i] == CAL_PINGPONG) == pingpong) out[n++] = c->samples[i];
  return n;
}

static void cal_report(const struct calibration *c, const struct rcc_model *m,
                       const struct rcc_model *pp, char *comment, size_t len) {
  int off = snprintf(comment, len, "samples (%d ranks): link, what, bytes, "
                     "measured us, model us", c->b->nranks);
  printf("#\n# %-4s %-20s %10s %13s %11s %7s\n", "link", "measurement",
         "bytes", "measured(us)", "model(us)", "error");
  for (int i = 0; i < c->nsamples; i++) {
    const struct rcc_fit_sample *s = &c->samples[i];
    const struct rcc_model *use = c->kinds[i] == CAL_PINGPONG ? pp : m;
    struct rcc_cost_terms t;
    rcc_model_terms(s->coll, s->alg, s->nranks, s->bytes, s->chunk_bytes, &t);
    rcc_model_link_terms(s->link, s->alg, s->nranks, &t);
    struct rcc_prediction p = rcc_model_predict(
        &t, &use->link[s->link], use->gamma_us_per_byte, use->cache_bytes);
    double model = rcc_prediction_total(p);
    printf("  %-4s %-20s %10.0f %13.2f %11.2f %6.0f%%%s\n",
           rcc_link_name(s->link), cal_kind_names[c->kinds[i]], s->bytes,
           s->time_us, model, 100.0 * (model - s->time_us) / s->time_us,
           p.in_memory ? "  (beyond the cache)" : "");
    if (off < (int)len)
      off += snprintf(comment + off, len - (size_t)off,
                      "\n  %s %s %.0f %.2f %.2f", rcc_link_name(s->link),
                      cal_kind_names[c->kinds[i]], s->bytes, s->time_us, model);
  }
  printf("# (ping-pong rows: its own fit, below)\n");
  for (int l = 0; l < RCC_NUM_LINKS && off < (int)len; l++)
    off += snprintf(comment + off, len - (size_t)off,
                    "\nping-pong alone (not used by the tuner): %s alpha "
                    "%.2f us, %.2f GB/s", rcc_link_name(l),
                    pp->link[l].alpha_us, 1e-3 / pp->link[l].beta_us_per_byte);
}

static double cal_gbps(double us_per_byte) {
  return us_per_byte > 0 ? 1e-3 / us_per_byte : 0;
}

static void cal_print_model(const char *what, const struct rcc_model *m) {
  printf("# %s:\n", what);
  for (int l = 0; l < RCC_NUM_LINKS; l++) {
    const struct rcc_link_cost *k = &m->link[l];
    printf("#   %s alpha %.2f us, %.2f GB/s in cache, %.2f GB/s beyond\n",
           rcc_link_name(l), k->alpha_us, cal_gbps(k->beta_us_per_byte),
           cal_gbps(k->beta_mem_us_per_byte > 0 ? k->beta_mem_us_per_byte
                                                : k->beta_us_per_byte));
  }
  if (m->gamma_us_per_byte > 0)
    printf("#   gamma %.2f GB/s\n", cal_gbps(m->gamma_us_per_byte));
  else
    printf("#   gamma 0: the best fit puts the reduction's cost into beta\n");
}

static int cal_write(const struct calibration *c, const struct rcc_model *m,
                     const struct rcc_model *pp, const char *host) {
  char path[512], why[512], comment[4096];
  struct rcc_tuner_file_info info = {.nranks = c->b->nranks};
  time_t now = time(NULL);
  struct tm tm;
  snprintf(info.host, sizeof info.host, "%s", host);
  strftime(info.date, sizeof info.date, "%Y-%m-%dT%H:%M:%SZ",
           gmtime_r(&now, &tm));
  cal_report(c, m, pp, comment, sizeof comment);
  printf("#\n");
  cal_print_model("fitted to the collectives (the tuner's values)", m);
  cal_print_model("fitted to the ping-pong alone (for comparison)", pp);
  if (rcc_tuner_file_path(path, sizeof path, why, sizeof why) != 0) {
    fprintf(stderr, PROG_NAME ": --calibrate: not written: %s\n", why);
    return EXIT_FAILED;
  }
  if (rcc_tuner_write_file(path, m, &info, comment, why, sizeof why) !=
      RINGCC_SUCCESS) {
    fprintf(stderr, PROG_NAME ": --calibrate: %s\n", why);
    return EXIT_FAILED;
  }
  printf("# wrote %s\n", path);
  return 0;
}

/* Rank 0: the two fits, then the file. */
static int cal_fit(struct calibration *c, struct rcc_model *model,
                   const char *host) {
  struct rcc_fit_sample sel[CAL_MAX_SAMPLES];
  struct rcc_model pp = *model;
  char err[512], comment[4096];
  int n = cal_select(c, false, sel);
  ringcc_result_t r = rcc_model_fit(sel, n, 1, model, err, sizeof err);
  if (r == RINGCC_SUCCESS) {
    n = cal_select(c, true, sel);
    r = rcc_model_fit(sel, n, 0, &pp, err, sizeof err);
  }
  if (r == RINGCC_SUCCESS) return cal_write(c, model, &pp, host);
  cal_report(c, model, &pp, comment, sizeof comment);
  fprintf(stderr, PROG_NAME ": --calibrate: %s; nothing written\n", err);
  return EXIT_FAILED;
}

static int calibrate(struct bench *b) {
  static struct calibration cal;
  struct calibration *c = &cal;
  struct rcc_model model = rcc_model_defaults;
  char host[64];
  int32_t status = 0;

  if (!cal_one_host(b, host) || b->nranks < 2) {
    if (b->rank == 0)
      fprintf(stderr, PROG_NAME ": --calibrate measures one machine: run at "
              "least 2 ranks, all on one host (nranks %d)\n", b->nranks);
    return EXIT_USAGE;
  }
  c->b = b;
  c->sbuf = alloc_touched(CAL_BUF_BYTES);
  c->rbuf = alloc_touched(CAL_BUF_BYTES);
  memset(c->sbuf, 0, CAL_BUF_BYTES); /* zeros: any sum is exact */
  if (b->rank == 0)
    printf("# " PROG_NAME " --calibrate: %d ranks on %s\n", b->nranks, host);
  cal_link(c, RCC_LINK_SHM);
  cal_link(c, RCC_LINK_TCP);
  model.gamma_us_per_byte = cal_measure(c);
  model.cache_bytes = rcc_tuner_cache_bytes();
  if (b->rank == 0)
    printf("# the reduction kernel alone (float32 sum, every rank at once): "
           "%.2f GB/s; last-level cache %.0f MiB: beyond it (an allreduce of "
           "more than %.0f KiB over %d ranks) beta_mem applies\n",
           1e-3 / model.gamma_us_per_byte, model.cache_bytes / 1048576.0,
           model.cache_bytes / (4.0 * b->nranks) / 1024.0, b->nranks);
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    for (int k = 0; k < 2; k++)
      check_call(b, ringcc_comm_destroy(c->link_comms[l][k]),
                 "ringcc_comm_destroy", "(--calibrate)");
  if (b->rank == 0) {
    status = cal_fit(c, &model, host);
    fflush(stdout);
  }
  free(c->sbuf);
  free(c->rbuf);
  check_call(b, ringcc_bcast(&status, 1, RINGCC_INT32, 0, b->comm, NULL),
             "ringcc_bcast", "(--calibrate status)");
  return status;
}

int main(int argc, char **argv) {
  static struct bench bench;
  struct bench *b = &bench;
  char err[512];
  const char *usage_err = parse_options(argc, argv, &b->o, err, sizeof err);

  if (b->o.device && usage_err == NULL) dev_select(); /* before init */
  ringcc_result_t r = ringcc_comm_init_env(&b->comm, NULL);
  if (r != RINGCC_SUCCESS && usage_err != NULL) {
    fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", usage_err);
    return EXIT_USAGE;
  }
  check_call(NULL, r, "ringcc_comm_init_env", NULL);
  g_bench = b;
  check_call(b, ringcc_comm_rank(b->comm, &b->rank), "ringcc_comm_rank", NULL);
  check_call(b, ringcc_comm_size(b->comm, &b->nranks), "ringcc_comm_size", NULL);
  if (usage_err == NULL) usage_err = check_against_comm(b, err, sizeof err);
  if (usage_err != NULL) {
    if (b->rank == 0)
      fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", usage_err);
    finish(b, EXIT_USAGE);
  }
  if (b->o.calibrate) finish(b, calibrate(b));
  float_range_setup(b);
  FILE *json = open_json(b);

  /* The sizes, and buffers for the largest. */
  int nrows = 0, cap = 0;
  struct row *rows = NULL;
  /* Sizes from -e downwards by the factor, then -b if it is not on that
   * grid, so that the largest size asked for is always measured. */
  size_t grid[128];
  int ngrid = 0;
  for (size_t s = b->o.max_bytes; s >= b->o.min_bytes && ngrid < 127;
       s /= b->o.factor) {
    grid[ngrid++] = s;
    if (s / b->o.factor == 0) break;
  }
  if (ngrid == 0 || grid[ngrid - 1] != b->o.min_bytes) grid[ngrid++] = b->o.min_bytes;
  for (int g = ngrid - 1; g >= 0; g--) {
    size_t s = grid[g];
    struct plan p = make_plan(b, s);
    if (nrows == cap) {
      cap = cap ? 2 * cap : 32;
      rows = realloc(rows, sizeof *rows * (size_t)cap);
      if (rows == NULL) die("out of memory");
    }
    rows[nrows++] = (struct row){.plan = p};
    if (p.bytes > b->buf_bytes) b->buf_bytes = p.bytes;
  }
  b->sbuf = alloc_touched(b->buf_bytes);
  b->rbuf = alloc_touched(b->buf_bytes);
  if (b->o.device) {
    b->dsbuf = dev_alloc(b->buf_bytes, &b->stream);
    b->drbuf = dev_alloc(b->buf_bytes, &b->stream);
  }

  if (b->rank == 0) print_header(b);
  print_ranks(b);
  if (b->rank == 0) print_table_header();

  long long total_wrong = 0;
  int status = 0;
  double busbw_sum = 0;
  int busbw_n = 0, measured = 0;
  for (int k = 0; k < nrows; k++) {
    struct row *row = &rows[k];
    if (row->plan.count == 0) {
      if (b->rank == 0)
        printf("#  size %zu skipped: less than one %s element%s\n",
               row->plan.requested, b->o.dt->name,
               colls[b->o.coll].per_rank_blocks ? " per rank" : "");
      continue;
    }
    row->oop = measure(b, &row->plan, false);
    if (b->o.coll == C_SENDRECV) row->ip = (struct result){.valid = false};
    else row->ip = measure(b, &row->plan, true);
    const struct result *groups[2] = {&row->oop, &row->ip};
    for (int g = 0; g < 2; g++) {
      if (!groups[g]->valid) continue;
      busbw_sum += groups[g]->busbw;
      busbw_n++;
      if (groups[g]->wrong > 0) total_wrong += groups[g]->wrong;
    }
    rows[measured++] = *row;
    if (b->rank == 0) print_row(b, row);
  }

  if (b->rank == 0) {
    if (b->o.check)
      printf("# Out of bounds values : %lld %s\n", total_wrong,
             total_wrong ? "FAILED" : "OK");
    else
      printf("# Out of bounds values : N/A (check disabled)\n");
    printf("# Avg bus bandwidth    : %g \n#\n",
           busbw_n ? busbw_sum / busbw_n : 0.0);
    fflush(stdout);
    if (json) {
      int rc = write_json(b, json, rows, measured);
      if (fclose(json) != 0 || rc != 0) {
        fprintf(stderr, PROG_NAME ": cannot write %s: %s\n", b->o.json_path,
                strerror(errno));
        status = EXIT_FAILED;
      }
    }
    if (total_wrong)
      fprintf(stderr, PROG_NAME ": FAILED: %lld wrong elements in total "
                      "(column #wrong)\n", total_wrong);
  }
  free(rows);
  finish(b, total_wrong ? EXIT_WRONG : status);
}
