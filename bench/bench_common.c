/*
 * bench_common.c - options, sizes, inputs, checks, the timed loop and the
 * output shared by tools/ringcc-bench.c, bench/mpi_bench.c and
 * bench/gloo_bench.cc. See bench_common.h.
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
#include "bench_common.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_MISMATCH_REPORTS 3 /* per rank and check */
#define MAX_SIZES 128

/* ---- collectives, datatypes, ops ----------------------------------------- */

struct coll_info {
  const char *name;
  bool has_op, has_root;
  bool per_rank_blocks; /* size must be a multiple of nranks*typesize */
  int busbw;            /* 0: x1, 1: x(n-1)/n, 2: x2(n-1)/n */
};

static const struct coll_info colls[BC_NUM_COLLS] = {
    [BC_ALLREDUCE] = {"allreduce", true, false, false, 2},
    [BC_REDUCE_SCATTER] = {"reduce_scatter", true, false, true, 1},
    [BC_ALLGATHER] = {"allgather", false, false, true, 1},
    [BC_BCAST] = {"bcast", false, true, false, 0},
    [BC_REDUCE] = {"reduce", true, true, false, 0},
    [BC_ALLTOALL] = {"alltoall", false, false, true, 1},
    [BC_SENDRECV] = {"sendrecv", false, false, false, 0},
};

enum kind { K_SINT, K_UINT, K_FLOAT };

struct dt_info {
  const char *name;
  size_t size;
  enum kind kind;
  int64_t exact; /* floats: every integer of magnitude <= exact is exact */
  int max_twos;  /* floats: factors of 2 a product may hold and stay finite */
};

static const struct dt_info dts[BC_NUM_DTYPES] = {
    [BC_INT8] = {"int8", 1, K_SINT, 0, 0},
    [BC_UINT8] = {"uint8", 1, K_UINT, 0, 0},
    [BC_INT32] = {"int32", 4, K_SINT, 0, 0},
    [BC_UINT32] = {"uint32", 4, K_UINT, 0, 0},
    [BC_INT64] = {"int64", 8, K_SINT, 0, 0},
    [BC_UINT64] = {"uint64", 8, K_UINT, 0, 0},
    [BC_FLOAT16] = {"float16", 2, K_FLOAT, 2048, 15},
    [BC_BFLOAT16] = {"bfloat16", 2, K_FLOAT, 256, 127},
    [BC_FLOAT32] = {"float32", 4, K_FLOAT, INT64_C(1) << 24, 127},
    [BC_FLOAT64] = {"float64", 8, K_FLOAT, INT64_C(1) << 53, 1023},
};

static const char *const op_names[BC_NUM_OPS] = {
    [BC_SUM] = "sum", [BC_PROD] = "prod", [BC_MIN] = "min",
    [BC_MAX] = "max", [BC_AVG] = "avg"};

const char *bc_coll_name(enum bc_coll coll) { return colls[coll].name; }
const char *bc_dtype_name(enum bc_dtype dt) { return dts[dt].name; }
size_t bc_dtype_size(enum bc_dtype dt) { return dts[dt].size; }
const char *bc_op_name(enum bc_op op) { return op_names[op]; }
bool bc_coll_has_op(enum bc_coll coll) { return colls[coll].has_op; }
bool bc_coll_has_root(enum bc_coll coll) { return colls[coll].has_root; }

static const char *redop_of(const struct bc_options *o) {
  return colls[o->coll].has_op ? op_names[o->op] : "none";
}

static int root_of(const struct bc_options *o) {
  return colls[o->coll].has_root ? o->root : -1;
}

void bc_call_context(const struct bc_options *o, const struct bc_plan *p,
                     bool in_place, char *buf, size_t len) {
  snprintf(buf, len, "(%s, %zu bytes, %s%s%s, %s)", colls[o->coll].name,
           p->bytes, dts[o->dtype].name, colls[o->coll].has_op ? ", " : "",
           colls[o->coll].has_op ? op_names[o->op] : "",
           in_place ? "in place" : "out of place");
}

/* ---- options ------------------------------------------------------------- */

void bc_usage(FILE *f, const char *prog, const char *launch, int flags) {
  fprintf(f,
"Usage: %s%s [options]\n"
"Measures a collective over a range of sizes with ringcc-bench's method and\n"
"output (float32, op sum), so the rows compare one for one.\n"
"\n"
"Options:\n"
"  -c COLL      allreduce | reduce_scatter | allgather (default allreduce)\n"
"  -b SIZE      smallest size in bytes (default 8)\n"
"  -e SIZE      largest size in bytes (default 64M)\n"
"  -f FACTOR    sizes go down from -e by FACTOR, plus -b itself (default 2)\n"
"               SIZE takes a K, M or G suffix (x1024, x1024^2, x1024^3)\n"
"  -d float32   -o sum   accepted for ringcc-bench compatibility (the only\n"
"               datatype and op)\n"
"  -n ITERS     timed iterations per size (default 20)\n"
"  -w WARMUP    untimed iterations before them (default 5)\n"
"  -m SECONDS   time at least this long per size: more iterations than -n\n"
"               where calls are short (from the warm-up's time, the slowest\n"
"               rank's; at most 1000000; default 0)\n"
"  -C 0|1       check every element of every result (default 1)\n",
          prog, launch);
  if (flags & BC_OPT_IN_PLACE)
    fprintf(f,
"  -I 0|1       measure the in-place group too (default 1; 0 prints n/a)\n");
  fprintf(f,
"  --json FILE  also write the rows to FILE as a JSON array (rank 0)\n");
  if (flags & BC_OPT_FORK)
    fprintf(f,
"  -N NRANKS    rank processes to fork (default 2)\n"
"  -T SECONDS   watchdog: stop every rank after SECONDS (default 600)\n");
  fprintf(f,
"  -h, --help   print this help and exit\n"
"\n"
"Columns (as ringcc-bench): size count type redop root, then for out-of-place\n"
"and in-place: time(us) algbw(GB/s) busbw(GB/s) #wrong. time = per-call\n"
"average of the timed loop, maximum over the ranks; algbw = size/time\n"
"(GB = 1e9 B); busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (others).\n"
"\n"
"Exit status: 0 when every call succeeded and every element was right; %d\n"
"when a call failed; %d for a usage error; %d when elements were wrong.\n",
          BC_EXIT_FAILED, BC_EXIT_USAGE, BC_EXIT_WRONG);
}

/* "8", "64K", "1M", "2G" (binary multiples). */
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

/* The short options (getopt) and the long ones that a program with these
 * flags accepts; the others are unknown to it. */
static void known_options(int flags, char optstring[64],
                          struct option longopts[6]) {
  int n = 0;
  snprintf(optstring, 64, ":c:b:e:f:d:o:n:w:m:C:h%s%s%s%s",
           flags & BC_OPT_EVERY ? "r:" : "",
           flags & BC_OPT_IN_PLACE ? "I:" : "",
           flags & BC_OPT_FORK ? "N:T:" : "",
           flags & BC_OPT_DEVICE ? "G" : "");
  longopts[n++] = (struct option){"json", required_argument, NULL, 'J'};
  if (flags & BC_OPT_DEVICE)
    longopts[n++] = (struct option){"device", no_argument, NULL, 'G'};
  if (flags & BC_OPT_CALIBRATE)
    longopts[n++] = (struct option){"calibrate", no_argument, NULL, 'K'};
  if (flags & BC_OPT_REGISTER)
    longopts[n++] = (struct option){"register", no_argument, NULL, 'R'};
  longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
  longopts[n] = (struct option){NULL, 0, NULL, 0};
}

const char *bc_parse_options(int argc, char **argv, int flags,
                             struct bc_options *o, char *err, size_t errlen) {
  *o = (struct bc_options){.coll = BC_ALLREDUCE, .dtype = BC_FLOAT32,
                           .op = BC_SUM, .min_bytes = 8,
                           .max_bytes = (size_t)64 << 20, .factor = 2,
                           .iters = 20, .warmup = 5, .root = 0, .check = 1,
                           .in_place = 1, .json_path = NULL, .help = 0,
                           .nranks = 2, .watchdog_s = 600};
  bool every = flags & BC_OPT_EVERY;
  char optstring[64];
  struct option longopts[6];
  int c, factor;
  known_options(flags, optstring, longopts);
  opterr = 0;
  while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
    bool ok = true;
    switch (c) {
    case 'c': /* without BC_OPT_EVERY: allreduce, reduce_scatter, allgather */
      ok = false;
      for (int k = 0; k < (every ? BC_NUM_COLLS : BC_ALLGATHER + 1); k++)
        if (strcmp(optarg, colls[k].name) == 0)
          o->coll = (enum bc_coll)k, ok = true;
      break;
    case 'd':
      ok = false;
      for (int k = 0; k < BC_NUM_DTYPES; k++)
        if (strcmp(optarg, dts[k].name) == 0 && (every || k == BC_FLOAT32))
          o->dtype = (enum bc_dtype)k, ok = true;
      break;
    case 'o':
      ok = false;
      for (int k = 0; k < BC_NUM_OPS; k++)
        if (strcmp(optarg, op_names[k]) == 0 && (every || k == BC_SUM))
          o->op = (enum bc_op)k, ok = true;
      break;
    case 'b': ok = parse_size(optarg, &o->min_bytes); break;
    case 'e': ok = parse_size(optarg, &o->max_bytes); break;
    case 'f':
      ok = parse_int(optarg, 2, 1 << 20, &factor);
      o->factor = (size_t)factor;
      break;
    case 'n': ok = parse_int(optarg, 1, INT32_MAX, &o->iters); break;
    case 'w': ok = parse_int(optarg, 0, INT32_MAX, &o->warmup); break;
    case 'm': ok = parse_seconds(optarg, &o->min_time); break;
    case 'r': ok = parse_int(optarg, 0, INT32_MAX, &o->root); break;
    case 'C': ok = parse_int(optarg, 0, 1, &o->check); break;
    case 'I': ok = parse_int(optarg, 0, 1, &o->in_place); break;
    case 'N': ok = parse_int(optarg, 1, 1024, &o->nranks); break;
    case 'T': ok = parse_int(optarg, 1, 7 * 24 * 3600, &o->watchdog_s); break;
    case 'G': o->device = true; break;
    case 'J': o->json_path = optarg; break;
    case 'K': o->calibrate = true; break;
    case 'R': o->register_buffers = true; break;
    case 'h': o->help = 1; return NULL;
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

const char *bc_check_nranks(const struct bc_options *o, int nranks, char *err,
                            size_t errlen) {
  if (colls[o->coll].has_root && o->root >= nranks) {
    snprintf(err, errlen, "root %d is not a rank (nranks %d)", o->root, nranks);
    return err;
  }
  if (o->coll == BC_SENDRECV && nranks < 2) {
    snprintf(err, errlen, "sendrecv needs at least 2 ranks (nranks %d)",
             nranks);
    return err;
  }
  return NULL;
}

/* ---- 16-bit floats (round to nearest even, like libringcc) --------------- */

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

/* ---- element values ---------------------------------------------------------
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
static double float_norm(enum bc_dtype dt, double x) {
  switch (dt) {
  case BC_FLOAT16: return half_to_float(float_to_half((float)x));
  case BC_BFLOAT16: return bf16_to_float(float_to_bf16((float)x));
  case BC_FLOAT32: return (float)x;
  default: return x;
  }
}

static void put(enum bc_dtype dt, void *buf, size_t i, elem_t v) {
  char *p = (char *)buf + i * dts[dt].size;
  switch (dt) {
  case BC_INT8: case BC_UINT8: *(uint8_t *)p = (uint8_t)v.u; break;
  case BC_INT32: case BC_UINT32: *(uint32_t *)p = (uint32_t)v.u; break;
  case BC_INT64: case BC_UINT64: *(uint64_t *)p = v.u; break;
  case BC_FLOAT16: *(uint16_t *)p = float_to_half((float)v.f); break;
  case BC_BFLOAT16: *(uint16_t *)p = float_to_bf16((float)v.f); break;
  case BC_FLOAT32: *(float *)p = (float)v.f; break;
  default: *(double *)p = v.f; break;
  }
}

static elem_t get(enum bc_dtype dt, const void *buf, size_t i) {
  const struct dt_info *t = &dts[dt];
  const char *p = (const char *)buf + i * t->size;
  elem_t v;
  switch (dt) {
  case BC_INT8: case BC_UINT8: v.u = int_norm(t, *(const uint8_t *)p); break;
  case BC_INT32: case BC_UINT32: v.u = int_norm(t, *(const uint32_t *)p); break;
  case BC_INT64: case BC_UINT64: v.u = *(const uint64_t *)p; break;
  case BC_FLOAT16: v.f = half_to_float(*(const uint16_t *)p); break;
  case BC_BFLOAT16: v.f = bf16_to_float(*(const uint16_t *)p); break;
  case BC_FLOAT32: v.f = *(const float *)p; break;
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

/* ---- one rank's run ------------------------------------------------------ */

struct run {
  const struct bc_backend *be;
  const struct bc_options *o;
  int rank, nranks;
  char *sbuf, *rbuf;   /* host buffers: filled and checked here */
  int64_t float_range; /* float inputs lie in [-float_range, float_range] */
  int mismatches_reported;
};

/* Prints "PROG: rank R: MESSAGE" and stops the job. */
__attribute__((noreturn, format(printf, 2, 3))) static void fail(
    const struct run *r, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s: rank %d: %s\n", r->be->prog, r->rank, msg);
  fflush(stderr);
  r->be->abort_job(r->be->ctx);
  abort(); /* abort_job does not return */
}

/* ---- inputs and expected results --------------------------------------------
 * GEN_SUM keeps n-rank sums exact, GEN_PROD uses {1,2} ({1,-1} for signed
 * integers) so products are exact, GEN_COPY is for min/max and the
 * collectives that only move data. */

enum gen_mode { GEN_SUM, GEN_PROD, GEN_COPY };

static enum gen_mode gen_mode_of(const struct bc_options *o) {
  if (!colls[o->coll].has_op) return GEN_COPY;
  switch (o->op) {
  case BC_SUM: case BC_AVG: return GEN_SUM;
  case BC_PROD: return GEN_PROD;
  default: return GEN_COPY;
  }
}

static void float_range_setup(struct run *r) {
  int64_t bound = dts[r->o->dtype].exact;
  if (gen_mode_of(r->o) == GEN_SUM) bound /= r->nranks; /* n-rank sums exact */
  r->float_range = bound < 510 ? bound : 510;
}

/* The input of element i on rank q. */
static elem_t gen(const struct run *r, enum gen_mode mode, int q, size_t i) {
  const struct dt_info *t = &dts[r->o->dtype];
  uint64_t p = ((uint64_t)i * 7 + (uint64_t)q * 131) % 1021; /* 0..1020 */
  elem_t v;
  if (t->kind == K_FLOAT) {
    if (mode == GEN_PROD) {
      v.f = (p & 1) && q < t->max_twos ? 2.0 : 1.0;
    } else {
      int64_t h = r->float_range;
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

static elem_t combine(const struct run *r, elem_t a, elem_t x) {
  const struct dt_info *t = &dts[r->o->dtype];
  if (t->kind == K_FLOAT) {
    switch (r->o->op) {
    case BC_PROD: a.f *= x.f; break;
    case BC_MIN: a.f = x.f < a.f ? x.f : a.f; break;
    case BC_MAX: a.f = x.f > a.f ? x.f : a.f; break;
    default: a.f += x.f; break;
    }
    return a;
  }
  bool s = t->kind == K_SINT;
  switch (r->o->op) {
  case BC_PROD: a.u = int_norm(t, a.u * x.u); break;
  case BC_MIN:
    if (s ? (int64_t)x.u < (int64_t)a.u : x.u < a.u) a = x;
    break;
  case BC_MAX:
    if (s ? (int64_t)x.u > (int64_t)a.u : x.u > a.u) a = x;
    break;
  default: a.u = int_norm(t, a.u + x.u); break;
  }
  return a;
}

/* The reduction over all ranks of element i, as libringcc defines it:
 * avg = sum/nranks, in float for the float types (then rounded to float16 or
 * bfloat16), truncated toward zero for integers. */
static elem_t reduced(const struct run *r, enum gen_mode mode, size_t i) {
  enum bc_dtype dt = r->o->dtype;
  elem_t acc = gen(r, mode, 0, i);
  for (int q = 1; q < r->nranks; q++) acc = combine(r, acc, gen(r, mode, q, i));
  if (dts[dt].kind == K_FLOAT) {
    if (r->o->op == BC_AVG)
      acc.f = dt == BC_FLOAT64 ? acc.f / r->nranks
                               : (float)acc.f / (float)r->nranks;
    acc.f = float_norm(dt, acc.f);
  } else if (r->o->op == BC_AVG) {
    if (dts[dt].kind == K_SINT)
      acc.u = (uint64_t)((int64_t)acc.u / (int64_t)r->nranks);
    else
      acc.u = acc.u / (uint64_t)r->nranks;
  }
  return acc;
}

static void fill(const struct run *r, void *buf, size_t n, size_t first,
                 enum gen_mode mode) {
  for (size_t i = 0; i < n; i++)
    put(r->o->dtype, buf, i, gen(r, mode, r->rank, first + i));
}

/* Inputs as the call of this plan and placement reads them; every element the
 * call should write is poisoned (all bits set: NaN for the float types). */
static void fill_inputs(const struct run *r, const struct bc_plan *p,
                        bool in_place) {
  size_t ts = dts[r->o->dtype].size, own = (size_t)r->rank * p->arg;
  enum gen_mode mode = gen_mode_of(r->o);
  switch (r->o->coll) {
  case BC_ALLGATHER:
    memset(r->rbuf, 0xff, p->bytes);
    fill(r, in_place ? r->rbuf + own * ts : r->sbuf, p->arg, own, mode);
    break;
  case BC_BCAST:
    if (r->rank == r->o->root) fill(r, r->rbuf, p->count, 0, mode);
    else memset(r->rbuf, 0xff, p->bytes);
    break;
  default: /* the full input is p->count elements from index 0 */
    if (!in_place) memset(r->rbuf, 0xff, p->bytes);
    fill(r, in_place ? r->rbuf : r->sbuf, p->count, 0, mode);
    break;
  }
}

static long long compare(struct run *r, const struct bc_plan *p,
                         bool in_place, size_t at, size_t i, elem_t want) {
  const struct dt_info *t = &dts[r->o->dtype];
  elem_t got = get(r->o->dtype, r->rbuf, at);
  if (same(t, got, want)) return 0;
  if (r->mismatches_reported < MAX_MISMATCH_REPORTS) {
    char g[64], w[64], ctx[160];
    r->mismatches_reported++;
    format_elem(t, got, g, sizeof g);
    format_elem(t, want, w, sizeof w);
    bc_call_context(r->o, p, in_place, ctx, sizeof ctx);
    fprintf(stderr, "%s: rank %d: wrong result %s: element %zu is %s, "
                    "want %s\n", r->be->prog, r->rank, ctx, i, g, w);
  }
  return 1;
}

/* Wrong elements in this rank's result. */
static long long check_result(struct run *r, const struct bc_plan *p,
                              bool in_place) {
  enum gen_mode mode = gen_mode_of(r->o);
  size_t arg = p->arg, n = p->count;
  int rank = r->rank, nranks = r->nranks, root = r->o->root;
  long long wrong = 0;
  r->mismatches_reported = 0;
  switch (r->o->coll) {
  case BC_ALLREDUCE:
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, reduced(r, mode, i));
    break;
  case BC_REDUCE:
    if (rank != root) break;
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, reduced(r, mode, i));
    break;
  case BC_REDUCE_SCATTER: {
    size_t first = (size_t)rank * arg;
    size_t at = in_place && r->be->rs_in_place_at_own_block ? first : 0;
    for (size_t j = 0; j < arg; j++)
      wrong += compare(r, p, in_place, at + j, first + j,
                       reduced(r, mode, first + j));
    break;
  }
  case BC_ALLGATHER: /* block q is rank q's input */
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, gen(r, mode, (int)(i / arg), i));
    break;
  case BC_BCAST:
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, gen(r, mode, root, i));
    break;
  case BC_ALLTOALL: /* block q came from rank q's block `rank` */
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i,
                       gen(r, mode, (int)(i / arg),
                           (size_t)rank * arg + i % arg));
    break;
  default: /* sendrecv: from the previous rank */
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i,
                       gen(r, mode, (rank - 1 + nranks) % nranks, i));
    break;
  }
  return wrong;
}

/* ---- sizes --------------------------------------------------------------- */

/* From -e down by the factor while >= -b, then -b if it is not on that grid,
 * so that the largest size asked for is always measured. Ascending into
 * sizes[]; returns how many. */
static int size_grid(const struct bc_options *o, size_t sizes[MAX_SIZES]) {
  size_t grid[MAX_SIZES];
  int n = 0;
  for (size_t s = o->max_bytes; s >= o->min_bytes && n < MAX_SIZES - 1;
       s /= o->factor) {
    grid[n++] = s;
    if (s / o->factor == 0) break;
  }
  if (n == 0 || grid[n - 1] != o->min_bytes) grid[n++] = o->min_bytes;
  for (int k = 0; k < n; k++) sizes[k] = grid[n - 1 - k];
  return n;
}

/* The plan for a requested size: rounded down to whole elements, and to
 * whole blocks of nranks elements where each rank owns a block. */
static struct bc_plan make_plan(const struct bc_options *o, int nranks,
                                size_t requested) {
  size_t ts = dts[o->dtype].size;
  struct bc_plan p = {.requested = requested};
  if (colls[o->coll].per_rank_blocks) {
    p.arg = requested / ts / (size_t)nranks;
    p.count = p.arg * (size_t)nranks;
  } else {
    p.arg = p.count = requested / ts;
  }
  p.bytes = p.count * ts;
  return p;
}

/* ---- measuring ----------------------------------------------------------- */

struct bc_result {
  bool valid; /* false: not measured (sendrecv in place, or -I 0) */
  int iters;  /* timed iterations */
  double time_us, algbw, busbw;
  long long wrong; /* -1: not checked */
};

double bc_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double busbw_factor(enum bc_coll coll, int nranks) {
  double n = nranks;
  switch (colls[coll].busbw) {
  case 2: return 2.0 * (n - 1) / n;
  case 1: return (n - 1) / n;
  default: return 1.0;
  }
}

static void run_once(const struct run *r, const struct bc_plan *p,
                     bool in_place) {
  if (r->be->call(r->be->ctx, r->o, p, in_place, r->sbuf, r->rbuf) != 0)
    r->be->abort_job(r->be->ctx);
}

static void stage_in(const struct run *r, const struct bc_plan *p) {
  if (r->be->stage_in) r->be->stage_in(r->be->ctx, p, r->sbuf, r->rbuf);
}

static void sync_calls(const struct run *r) {
  if (r->be->sync) r->be->sync(r->be->ctx);
}

static struct bc_result measure(struct run *r, const struct bc_plan *p,
                                bool in_place) {
  const struct bc_backend *be = r->be;
  struct bc_result res = {.valid = true, .wrong = -1};
  fill_inputs(r, p, in_place);
  stage_in(r, p);
  double w0 = 0;
  for (int k = 0; k < r->o->warmup; k++) {
    if (k == 1) w0 = bc_now_s(); /* the first call may set things up */
    run_once(r, p, in_place);
  }
  sync_calls(r);
  res.iters = r->o->iters;
  if (r->o->min_time > 0) { /* every rank takes the slowest rank's estimate */
    double est = r->o->warmup >= 2 ? (bc_now_s() - w0) / (r->o->warmup - 1) : 0;
    if (r->o->warmup < 2) {
      w0 = bc_now_s();
      run_once(r, p, in_place);
      sync_calls(r);
      est = bc_now_s() - w0;
    }
    est = be->max_double(be->ctx, est);
    double want = est > 0 ? r->o->min_time / est : 1e6;
    if (want > res.iters) res.iters = want < 1e6 ? (int)want + 1 : 1000000;
  }
  be->barrier(be->ctx);
  double t0 = bc_now_s();
  for (int k = 0; k < res.iters; k++) run_once(r, p, in_place);
  sync_calls(r); /* the issued calls have run */
  double mine = (bc_now_s() - t0) / res.iters;
  double t = be->max_double(be->ctx, mine);
  res.time_us = t * 1e6;
  res.algbw = t > 0 ? (double)p->bytes / t / 1e9 : 0;
  res.busbw = res.algbw * busbw_factor(r->o->coll, r->nranks);
  if (r->o->check) {
    fill_inputs(r, p, in_place);
    stage_in(r, p);
    run_once(r, p, in_place);
    if (be->stage_out) be->stage_out(be->ctx, p, r->rbuf);
    res.wrong = be->sum_ll(be->ctx, check_result(r, p, in_place));
  }
  return res;
}

/* ---- output -------------------------------------------------------------- */

#define LEAD_FMT "%12s %12s %9s %6s %5s"
#define GROUP_FMT " %10s %11s %11s %7s"
#define GROUP_WIDTH 43 /* strlen of a formatted GROUP_FMT */

static void print_header(const struct run *r) {
  const struct bc_options *o = r->o;
  printf("# %s: %s, %s\n", r->be->prog, colls[o->coll].name, r->be->library);
  printf("#  nranks %d  datatype %s  op %s  root %d  minBytes %zu  maxBytes %zu"
         "  step %zu(factor)  warmup %d  iters %d  mintime %gs  check %d\n",
         r->nranks, dts[o->dtype].name, redop_of(o), root_of(o), o->min_bytes,
         o->max_bytes, o->factor, o->warmup, o->iters, o->min_time, o->check);
  printf("#  %s; time = per-call average of the timed loop, max over ranks; "
         "GB = 1e9 B; busbw = algbw x %.4f\n",
         r->be->call_desc, busbw_factor(o->coll, r->nranks));
  if (o->coll == BC_BCAST)
    printf("#  bcast has one buffer: out-of-place and in-place time the same "
           "call\n");
  if (o->coll == BC_SENDRECV)
    printf("#  sendrecv: rank r sends to r+1 and receives from r-1; no "
           "in-place form\n");
}

/* "#  Rank  0 Pid  1234 on host" for every rank, gathered to all. */
static void print_ranks(const struct run *r) {
  struct {
    int32_t pid;
    char host[60];
  } me = {.pid = (int32_t)getpid()}, *all;
  gethostname(me.host, sizeof me.host - 1);
  all = calloc((size_t)r->nranks, sizeof me);
  if (all == NULL) fail(r, "out of memory");
  r->be->allgather_bytes(r->be->ctx, &me, all, sizeof me);
  if (r->rank == 0)
    for (int q = 0; q < r->nranks; q++)
      printf("#  Rank %2d Pid %6d on %s\n", q, (int)all[q].pid, all[q].host);
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

static void print_group(const struct bc_result *res) {
  if (!res->valid) {
    printf(GROUP_FMT, "n/a", "n/a", "n/a", "n/a");
    return;
  }
  char wrong[24];
  if (res->wrong < 0) snprintf(wrong, sizeof wrong, "N/A");
  else snprintf(wrong, sizeof wrong, "%lld", res->wrong);
  printf(" %10.2f %11.2f %11.2f %7s", res->time_us, res->algbw, res->busbw,
         wrong);
}

struct row {
  struct bc_plan plan;
  struct bc_result oop, ip;
};

static void print_row(const struct bc_options *o, const struct row *row) {
  char size[24], count[24], root[12];
  snprintf(size, sizeof size, "%zu", row->plan.bytes);
  snprintf(count, sizeof count, "%zu", row->plan.count);
  snprintf(root, sizeof root, "%d", root_of(o));
  printf(" " LEAD_FMT, size, count, dts[o->dtype].name, redop_of(o), root);
  print_group(&row->oop);
  print_group(&row->ip);
  printf("\n");
  fflush(stdout);
}

static void json_group(FILE *f, const char *prefix,
                       const struct bc_result *res) {
  if (!res->valid) {
    fprintf(f, ", \"%s_time_us\": null, \"%s_algbw_GBps\": null, "
               "\"%s_busbw_GBps\": null, \"%s_wrong\": null",
            prefix, prefix, prefix, prefix);
    return;
  }
  fprintf(f, ", \"%s_time_us\": %.9g, \"%s_algbw_GBps\": %.9g, "
             "\"%s_busbw_GBps\": %.9g, \"%s_wrong\": ",
          prefix, res->time_us, prefix, res->algbw, prefix, res->busbw, prefix);
  if (res->wrong < 0) fprintf(f, "null");
  else fprintf(f, "%lld", res->wrong);
}

/* The rows as a JSON array (bench/summarize.py). Returns 0, or -1 with
 * errno set. */
static int write_json(const struct run *r, FILE *f, const struct row *rows,
                      int nrows) {
  const struct bc_options *o = r->o;
  fprintf(f, "[\n");
  for (int k = 0; k < nrows; k++) {
    const struct row *row = &rows[k];
    fprintf(f, "  {\"collective\": \"%s\", \"nranks\": %d, \"size\": %zu, "
               "\"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
               "\"root\": %d, \"iters\": %d, \"warmup\": %d",
            colls[o->coll].name, r->nranks, row->plan.bytes, row->plan.count,
            dts[o->dtype].name, redop_of(o), root_of(o),
            row->oop.valid ? row->oop.iters : row->ip.iters, o->warmup);
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

/* ---- the run ------------------------------------------------------------- */

void *bc_alloc_touched(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 64;
  int e = posix_memalign(&p, 4096, bytes);
  if (e != 0) {
    errno = e;
    return NULL;
  }
  memset(p, 0, bytes); /* first touch, outside the timed loops */
  return p;
}

static char *alloc_or_fail(const struct run *r, size_t bytes) {
  if (r->be->alloc_host)
    return r->be->alloc_host(r->be->ctx, bytes ? bytes : 64);
  char *p = bc_alloc_touched(bytes);
  if (p == NULL)
    fail(r, "cannot allocate %zu bytes: %s", bytes ? bytes : 64,
         strerror(errno));
  return p;
}

/* Opens the JSON file on rank 0; every rank learns whether that worked. */
static int open_json(const struct run *r, FILE **out) {
  long long failed = 0;
  *out = NULL;
  if (r->rank == 0 && r->o->json_path) {
    *out = fopen(r->o->json_path, "w");
    if (*out == NULL) {
      fprintf(stderr, "%s: cannot write %s: %s\n", r->be->prog,
              r->o->json_path, strerror(errno));
      failed = 1;
    }
  }
  return r->be->sum_ll(r->be->ctx, failed) ? -1 : 0;
}

/* The summary lines and the JSON file, on rank 0. Returns 0 or
 * BC_EXIT_FAILED (the JSON file could not be written). */
static int print_end(const struct run *r, FILE *json, const struct row *rows,
                     int nrows, long long total_wrong, double busbw_avg) {
  int status = 0;
  if (r->o->check)
    printf("# Out of bounds values : %lld %s\n", total_wrong,
           total_wrong ? "FAILED" : "OK");
  else
    printf("# Out of bounds values : N/A (check disabled)\n");
  printf("# Avg bus bandwidth    : %g \n#\n", busbw_avg);
  fflush(stdout);
  if (json) {
    int rc = write_json(r, json, rows, nrows);
    if (fclose(json) != 0 || rc != 0) {
      fprintf(stderr, "%s: cannot write %s: %s\n", r->be->prog,
              r->o->json_path, strerror(errno));
      status = BC_EXIT_FAILED;
    }
  }
  if (total_wrong)
    fprintf(stderr, "%s: FAILED: %lld wrong elements in total (column "
                    "#wrong)\n", r->be->prog, total_wrong);
  return status;
}

int bc_run(const struct bc_backend *be, const struct bc_options *o, int rank,
           int nranks) {
  struct run r = {.be = be, .o = o, .rank = rank, .nranks = nranks};
  FILE *json;
  float_range_setup(&r);
  if (open_json(&r, &json) != 0) return BC_EXIT_USAGE;

  size_t sizes[MAX_SIZES], buf_bytes = 0;
  int nsizes = size_grid(o, sizes);
  struct row rows[MAX_SIZES];
  for (int k = 0; k < nsizes; k++) {
    rows[k] = (struct row){.plan = make_plan(o, nranks, sizes[k])};
    if (rows[k].plan.bytes > buf_bytes) buf_bytes = rows[k].plan.bytes;
  }
  r.sbuf = alloc_or_fail(&r, buf_bytes);
  r.rbuf = alloc_or_fail(&r, buf_bytes);
  if (be->alloc_buffers) be->alloc_buffers(be->ctx, buf_bytes);

  if (rank == 0) print_header(&r);
  print_ranks(&r);
  if (rank == 0) print_table_header();

  long long total_wrong = 0;
  double busbw_sum = 0;
  int busbw_n = 0, measured = 0;
  for (int k = 0; k < nsizes; k++) {
    struct row *row = &rows[k];
    if (row->plan.count == 0) {
      if (rank == 0)
        printf("#  size %zu skipped: less than one %s element%s\n",
               row->plan.requested, dts[o->dtype].name,
               colls[o->coll].per_rank_blocks ? " per rank" : "");
      continue;
    }
    row->oop = measure(&r, &row->plan, false);
    if (o->in_place && o->coll != BC_SENDRECV)
      row->ip = measure(&r, &row->plan, true);
    else
      row->ip = (struct bc_result){.valid = false};
    const struct bc_result *groups[2] = {&row->oop, &row->ip};
    for (int g = 0; g < 2; g++) {
      if (!groups[g]->valid) continue;
      busbw_sum += groups[g]->busbw;
      busbw_n++;
      if (groups[g]->wrong > 0) total_wrong += groups[g]->wrong;
    }
    rows[measured++] = *row;
    if (rank == 0) print_row(o, row);
  }

  int status = 0;
  if (rank == 0)
    status = print_end(&r, json, rows, measured, total_wrong,
                       busbw_n ? busbw_sum / busbw_n : 0.0);
  fflush(stdout);
  fflush(stderr);
  if (be->free_host) {
    be->free_host(be->ctx, r.sbuf);
    be->free_host(be->ctx, r.rbuf);
  } else {
    free(r.sbuf);
    free(r.rbuf);
  }
  if (total_wrong) return BC_EXIT_WRONG;
  /* rank 0's JSON failure is every rank's */
  return be->sum_ll(be->ctx, status) ? BC_EXIT_FAILED : 0;
}
