/*
 * test_reduce.c - the reduction kernels (lib/exec/reduce.c) against scalar
 * references written here independently: every datatype x op, lengths that
 * hit the vector tails, dst aliasing a or b, every instruction set this CPU
 * has; the float16/bfloat16 conversions exhaustively over 16-bit patterns and
 * over every rounding tie, against GCC's _Float16 and the F16C instructions;
 * rcc_reduce_avg_finish for every datatype.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

#include "reduce.h"

/* Around the vector widths and the kernels' 64-element blocks, and long. */
static const size_t lengths[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 1000, 4099};
#define NLENGTHS (sizeof lengths / sizeof lengths[0])
#define GUARD 32            /* elements after the end that must not change */
#define GUARD_BYTE 0x5a

enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, NALIAS };
static const char *const alias_names[] = {"dst separate", "dst == a",
                                          "dst == b"};
static const char *const isa_names[] = {"portable", "avx2", "avx512"};
static const char *const dt_names[] = {"int8",    "uint8",    "int32", "uint32",
                                       "int64",   "uint64",   "float16",
                                       "bfloat16", "float32", "float64"};
static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};
static const size_t dt_sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

/* ---- random values --------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rng(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng() >> 11) / 9007199254740992.0;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint16_t f16_bits(_Float16 h) {
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}
static _Float16 f16_of(uint16_t u) {
  _Float16 h;
  memcpy(&h, &u, sizeof h);
  return h;
}

/* Integers: extremes, small values (products that do not wrap) and random
 * bits (sums and products that do). */
static int64_t int_value(int64_t lo, int64_t hi) {
  const int64_t extremes[] = {lo, hi, 0, 1, -1, lo + 1, hi - 1, 2, -2};
  switch (rng() % 4) {
  case 0:
    return extremes[rng() % (sizeof extremes / sizeof extremes[0])];
  case 1:
    return (int64_t)(rng() % 201) - 100;
  default:
    return (int64_t)rng(); /* truncated by the caller */
  }
}

/* Floats: specials (+-0, +-Inf, NaN, extremes, subnormals), random bit
 * patterns, and moderate values of either sign. */
static double float_value(int is_double) {
  const double specials[] = {0.0,  -0.0,      INFINITY, -INFINITY, NAN,
                             -NAN, 1.0,       -1.0,     0.5,       -3.0,
                             1e-300, -1e-310, 1e300,    -1e300};
  switch (rng() % 8) {
  case 0:
    return specials[rng() % (sizeof specials / sizeof specials[0])];
  case 1:
    if (is_double) {
      uint64_t u = rng();
      double d;
      memcpy(&d, &u, sizeof d);
      return d;
    }
    return f32_of((uint32_t)rng());
  case 2:
    return is_double ? rng_uniform(-1, 1) * DBL_MIN
                     : rng_uniform(-1, 1) * FLT_MIN; /* subnormal */
  default:
    return rng_uniform(-1000, 1000);
  }
}

static void fill(int dt, void *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
    case RINGCC_INT8:
      ((int8_t *)buf)[i] = (int8_t)(uint8_t)int_value(INT8_MIN, INT8_MAX);
      break;
    case RINGCC_UINT8:
      ((uint8_t *)buf)[i] = (uint8_t)int_value(0, UINT8_MAX);
      break;
    case RINGCC_INT32:
      ((int32_t *)buf)[i] = (int32_t)(uint32_t)int_value(INT32_MIN, INT32_MAX);
      break;
    case RINGCC_UINT32:
      ((uint32_t *)buf)[i] = (uint32_t)int_value(0, UINT32_MAX);
      break;
    case RINGCC_INT64:
      ((int64_t *)buf)[i] = int_value(INT64_MIN, INT64_MAX);
      break;
    case RINGCC_UINT64:
      ((uint64_t *)buf)[i] = (uint64_t)int_value(0, INT64_MAX);
      if (rng() % 2)
        ((uint64_t *)buf)[i] = rng();
      break;
    case RINGCC_FLOAT16: /* any bit pattern, or a moderate value */
      ((uint16_t *)buf)[i] =
          rng() % 4 == 0 ? (uint16_t)rng()
                         : f16_bits((_Float16)(float)rng_uniform(-100, 100));
      break;
    case RINGCC_BFLOAT16:
      ((uint16_t *)buf)[i] =
          rng() % 4 == 0 ? (uint16_t)rng()
                         : (uint16_t)(f32_bits((float)float_value(0)) >> 16);
      break;
    case RINGCC_FLOAT32:
      ((float *)buf)[i] = (float)float_value(0);
      break;
    case RINGCC_FLOAT64:
      ((double *)buf)[i] = float_value(1);
      break;
    }
  }
}

/* ---- scalar references ----------------------------------------------- */

/* The documented min/max rule, spelled out: a NaN operand or a tie between
 * zeros gives b. */
static double ref_minmax(int op, double x, double y) {
  if (isnan(x) || isnan(y) || x == y)
    return y;
  if (op == RINGCC_MIN)
    return x < y ? x : y;
  return x > y ? x : y;
}

static float ref_f32(int op, float x, float y) {
  switch (op) {
  case RINGCC_SUM:
  case RINGCC_AVG:
    return x + y;
  case RINGCC_PROD:
    return x * y;
  default:
    return (float)ref_minmax(op, x, y);
  }
}

static double ref_f64(int op, double x, double y) {
  switch (op) {
  case RINGCC_SUM:
  case RINGCC_AVG:
    return x + y;
  case RINGCC_PROD:
    return x * y;
  default:
    return ref_minmax(op, x, y);
  }
}

/* bfloat16 rounding computed in double: scale by the unit in the last place
 * and let nearbyint() round half to even. */
static uint16_t ref_bf16_round(float f) {
  if (isnan(f))
    return (uint16_t)((f32_bits(f) >> 16) | 0x7fc0);
  if (isinf(f) || f == 0)
    return (uint16_t)(f32_bits(f) >> 16);
  int e;
  frexp(f, &e);           /* |f| in [2^(e-1), 2^e) */
  int q = e - 1 < -126 ? -126 : e - 1; /* subnormals share 2^-126's ulp */
  double ulp = ldexp(1.0, q - 7);
  double r = nearbyint((double)f / ulp) * ulp;
  return (uint16_t)(f32_bits((float)r) >> 16); /* 2^128 becomes Inf */
}

/* Two's-complement wrap of an exact result, by arithmetic on the bits. */
static int64_t wrap_signed(__int128 r, int bits) {
  unsigned __int128 u = (unsigned __int128)r;
  uint64_t mask = bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
  uint64_t low = (uint64_t)u & mask;
  uint64_t sign = 1ull << (bits - 1);
  if (low < sign)
    return (int64_t)low;
  return -(int64_t)(mask - low) - 1; /* low - 2^bits */
}

static __int128 ref_int(int op, __int128 x, __int128 y) {
  switch (op) {
  case RINGCC_SUM:
  case RINGCC_AVG:
    return x + y;
  case RINGCC_PROD:
    return x * y;
  case RINGCC_MIN:
    return y < x ? y : x;
  default:
    return y > x ? y : x;
  }
}

/* uint64 needs the unsigned 128-bit type: its products exceed 2^127. */
static unsigned __int128 ref_uint64(int op, unsigned __int128 x,
                                    unsigned __int128 y) {
  switch (op) {
  case RINGCC_SUM:
  case RINGCC_AVG:
    return x + y;
  case RINGCC_PROD:
    return x * y;
  case RINGCC_MIN:
    return y < x ? y : x;
  default:
    return y > x ? y : x;
  }
}

static void ref_reduce(int dt, int op, const void *a, const void *b, size_t i,
                       void *out) {
  switch (dt) {
  case RINGCC_INT8:
    ((int8_t *)out)[i] = (int8_t)wrap_signed(
        ref_int(op, ((const int8_t *)a)[i], ((const int8_t *)b)[i]), 8);
    break;
  case RINGCC_UINT8:
    ((uint8_t *)out)[i] = (uint8_t)(
        ref_int(op, ((const uint8_t *)a)[i], ((const uint8_t *)b)[i]) & 0xff);
    break;
  case RINGCC_INT32:
    ((int32_t *)out)[i] = (int32_t)wrap_signed(
        ref_int(op, ((const int32_t *)a)[i], ((const int32_t *)b)[i]), 32);
    break;
  case RINGCC_UINT32:
    ((uint32_t *)out)[i] = (uint32_t)(
        ref_int(op, ((const uint32_t *)a)[i], ((const uint32_t *)b)[i]) &
        0xffffffffu);
    break;
  case RINGCC_INT64:
    ((int64_t *)out)[i] = wrap_signed(
        ref_int(op, ((const int64_t *)a)[i], ((const int64_t *)b)[i]), 64);
    break;
  case RINGCC_UINT64:
    ((uint64_t *)out)[i] = (uint64_t)(
        ref_uint64(op, ((const uint64_t *)a)[i], ((const uint64_t *)b)[i]) &
        UINT64_MAX);
    break;
  case RINGCC_FLOAT16: { /* GCC's _Float16 conversions (libgcc soft-fp) */
    float x = (float)f16_of(((const uint16_t *)a)[i]);
    float y = (float)f16_of(((const uint16_t *)b)[i]);
    ((uint16_t *)out)[i] = f16_bits((_Float16)ref_f32(op, x, y));
    break;
  }
  case RINGCC_BFLOAT16: {
    float x = f32_of((uint32_t)((const uint16_t *)a)[i] << 16);
    float y = f32_of((uint32_t)((const uint16_t *)b)[i] << 16);
    ((uint16_t *)out)[i] = ref_bf16_round(ref_f32(op, x, y));
    break;
  }
  case RINGCC_FLOAT32:
    ((float *)out)[i] =
        ref_f32(op, ((const float *)a)[i], ((const float *)b)[i]);
    break;
  case RINGCC_FLOAT64:
    ((double *)out)[i] =
        ref_f64(op, ((const double *)a)[i], ((const double *)b)[i]);
    break;
  }
}

static int is_nan_elem(int dt, const void *p) {
  switch (dt) {
  case RINGCC_FLOAT16:
    return (*(const uint16_t *)p & 0x7fff) > 0x7c00;
  case RINGCC_BFLOAT16:
    return (*(const uint16_t *)p & 0x7fff) > 0x7f80;
  case RINGCC_FLOAT32:
    return isnan(*(const float *)p);
  case RINGCC_FLOAT64:
    return isnan(*(const double *)p);
  default:
    return 0;
  }
}

/* Bit-identical, or both NaN (which NaN is not specified). */
static int elem_equal(int dt, const void *x, const void *y) {
  return memcmp(x, y, dt_sizes[dt]) == 0 ||
         (is_nan_elem(dt, x) && is_nan_elem(dt, y));
}

static const char *elem_hex(int dt, const void *p, char buf[24]) {
  uint64_t v = 0;
  memcpy(&v, p, dt_sizes[dt]); /* little endian */
  snprintf(buf, 24, "0x%" PRIx64, v);
  return buf;
}

static int guard_intact(const unsigned char *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != GUARD_BYTE)
      return 0;
  return 1;
}

/* One kernel call over n elements starting `offset` elements into malloc'd
 * buffers (so misaligned when offset is odd), in one aliasing mode. Returns
 * 0, or logs the first mismatch and returns 1. */
static int check_kernel(int isa, int dt, int op, size_t n, int alias,
                        size_t offset) {
  size_t size = dt_sizes[dt];
  size_t bytes = (offset + n + GUARD) * size;
  unsigned char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes);
  unsigned char *want = malloc(n * size + 1);
  cr_assert(a && b && d && want);
  unsigned char *pa = a + offset * size, *pb = b + offset * size;
  unsigned char *pd = d + offset * size;
  fill(dt, pa, n);
  fill(dt, pb, n);
  for (size_t i = 0; i < n; i++)
    ref_reduce(dt, op, pa, pb, i, want);

  memset(d, GUARD_BYTE, bytes);
  rcc_reduce_fn fn = rcc_reduce_get(dt, op);
  cr_assert_not_null(fn);
  if (alias == ALIAS_NONE) {
    fn(pd, pa, pb, n);
  } else if (alias == ALIAS_DST_A) {
    memcpy(pd, pa, n * size);
    fn(pd, pd, pb, n);
  } else {
    memcpy(pd, pb, n * size);
    fn(pd, pa, pd, n);
  }

  int bad = 0;
  for (size_t i = 0; i < n && !bad; i++) {
    if (!elem_equal(dt, pd + i * size, want + i * size)) {
      char x[24], y[24], got[24], exp[24];
      cr_log_error("%s %s %s n=%zu %s offset=%zu: element %zu: %s, %s -> %s, "
                   "expected %s",
                   isa_names[isa], dt_names[dt], op_names[op], n,
                   alias_names[alias], offset, i,
                   elem_hex(dt, pa + i * size, x), elem_hex(dt, pb + i * size, y),
                   elem_hex(dt, pd + i * size, got),
                   elem_hex(dt, want + i * size, exp));
      bad = 1;
    }
  }
  if (!bad && (!guard_intact(d, offset * size) ||
               !guard_intact(pd + n * size, GUARD * size))) {
    cr_log_error("%s %s %s n=%zu %s: wrote outside dst[0..n)", isa_names[isa],
                 dt_names[dt], op_names[op], n, alias_names[alias]);
    bad = 1;
  }
  free(a);
  free(b);
  free(d);
  free(want);
  return bad;
}

/* Selects the instruction set or skips the test when the CPU lacks it. */
static void use_isa(int isa) {
  int got = rcc_reduce_set_isa(isa);
  if (got != isa)
    cr_skip_test("this CPU has no %s", isa_names[isa]);
}

static void check_all_kernels(int isa) {
  use_isa(isa);
  rng_state = 42 + (uint64_t)isa;
  int failures = 0;
  for (int dt = 0; dt < RINGCC_NUM_DATATYPES; dt++)
    for (int op = 0; op < RINGCC_NUM_OPS; op++)
      for (size_t l = 0; l < NLENGTHS; l++)
        for (int alias = 0; alias < NALIAS; alias++)
          for (size_t offset = 0; offset < 2; offset++)
            failures += check_kernel(isa, dt, op, lengths[l], alias, offset);
  rcc_reduce_set_isa(-1);
  cr_assert_eq(failures, 0, "%d kernel runs failed (see the log)", failures);
}

Test(reduce, kernels_portable, .timeout = 30) {
  check_all_kernels(RCC_ISA_PORTABLE);
}
Test(reduce, kernels_avx2, .timeout = 30) { check_all_kernels(RCC_ISA_AVX2); }
Test(reduce, kernels_avx512, .timeout = 30) {
  check_all_kernels(RCC_ISA_AVX512);
}

Test(reduce, get_table, .timeout = 10) {
  for (int dt = 0; dt < RINGCC_NUM_DATATYPES; dt++) {
    for (int op = 0; op < RINGCC_NUM_OPS; op++)
      cr_assert_not_null(rcc_reduce_get(dt, op), "%s %s", dt_names[dt],
                         op_names[op]);
    cr_assert_eq(rcc_reduce_get(dt, RINGCC_AVG), rcc_reduce_get(dt, RINGCC_SUM),
                 "avg must reduce as sum");
  }
  cr_assert_null(rcc_reduce_get((ringcc_datatype_t)-1, RINGCC_SUM));
  cr_assert_null(rcc_reduce_get(RINGCC_NUM_DATATYPES, RINGCC_SUM));
  cr_assert_null(rcc_reduce_get(RINGCC_FLOAT32, (ringcc_op_t)-1));
  cr_assert_null(rcc_reduce_get(RINGCC_FLOAT32, RINGCC_NUM_OPS));
}

/* The documented rule, by example: a NaN in b propagates, one in a does not;
 * a tie between zeros gives b. */
Test(reduce, minmax_nan_and_zero_rule, .timeout = 10) {
  const float a[] = {NAN, 1.0f, -0.0f, 0.0f, 2.0f};
  const float b[] = {1.0f, NAN, 0.0f, -0.0f, 3.0f};
  for (int isa = RCC_ISA_PORTABLE; isa <= RCC_ISA_AVX512; isa++) {
    if (rcc_reduce_set_isa(isa) != isa)
      continue;
    for (int op = RINGCC_MIN; op <= RINGCC_MAX; op++) {
      float d[5];
      rcc_reduce_get(RINGCC_FLOAT32, op)(d, a, b, 5);
      cr_assert_eq(f32_bits(d[0]), f32_bits(1.0f));
      cr_assert(isnan(d[1]));
      cr_assert_eq(f32_bits(d[2]), f32_bits(0.0f));
      cr_assert_eq(f32_bits(d[3]), f32_bits(-0.0f));
      cr_assert_eq(d[4], op == RINGCC_MIN ? 2.0f : 3.0f);
    }
  }
  rcc_reduce_set_isa(-1);
}

/* ---- rcc_reduce_avg_finish ---------------------------------------------- */

/* Division truncating toward zero, on magnitudes. */
static int64_t ref_trunc_div(int64_t x, int n) {
  uint64_t mag = x < 0 ? (uint64_t)(-(x + 1)) + 1 : (uint64_t)x;
  uint64_t q = mag / (uint64_t)n;
  if (x >= 0 || q == 0)
    return (int64_t)q;
  return -(int64_t)(q - 1) - 1;
}

static void ref_avg(int dt, const void *src, size_t i, int n, void *out) {
  switch (dt) {
  case RINGCC_INT8:
    ((int8_t *)out)[i] = (int8_t)ref_trunc_div(((const int8_t *)src)[i], n);
    break;
  case RINGCC_UINT8:
    ((uint8_t *)out)[i] = (uint8_t)(((const uint8_t *)src)[i] / (unsigned)n);
    break;
  case RINGCC_INT32:
    ((int32_t *)out)[i] = (int32_t)ref_trunc_div(((const int32_t *)src)[i], n);
    break;
  case RINGCC_UINT32:
    ((uint32_t *)out)[i] = ((const uint32_t *)src)[i] / (uint32_t)n;
    break;
  case RINGCC_INT64:
    ((int64_t *)out)[i] = ref_trunc_div(((const int64_t *)src)[i], n);
    break;
  case RINGCC_UINT64:
    ((uint64_t *)out)[i] = ((const uint64_t *)src)[i] / (uint64_t)n;
    break;
  case RINGCC_FLOAT16:
    ((uint16_t *)out)[i] = f16_bits(
        (_Float16)((float)f16_of(((const uint16_t *)src)[i]) / (float)n));
    break;
  case RINGCC_BFLOAT16:
    ((uint16_t *)out)[i] = ref_bf16_round(
        f32_of((uint32_t)((const uint16_t *)src)[i] << 16) / (float)n);
    break;
  case RINGCC_FLOAT32:
    ((float *)out)[i] = ((const float *)src)[i] / (float)n;
    break;
  case RINGCC_FLOAT64:
    ((double *)out)[i] = ((const double *)src)[i] / (double)n;
    break;
  }
}

static int check_avg(int isa, int dt, size_t n, int nranks, int in_place) {
  size_t size = dt_sizes[dt];
  unsigned char *src = malloc(n * size + 1);
  unsigned char *dst = malloc((n + GUARD) * size);
  unsigned char *want = malloc(n * size + 1);
  cr_assert(src && dst && want);
  fill(dt, src, n);
  for (size_t i = 0; i < n; i++)
    ref_avg(dt, src, i, nranks, want);
  memset(dst, GUARD_BYTE, (n + GUARD) * size);
  if (in_place) {
    memcpy(dst, src, n * size);
    rcc_reduce_avg_finish(dt, dst, dst, n, nranks);
  } else {
    rcc_reduce_avg_finish(dt, dst, src, n, nranks);
  }
  int bad = 0;
  for (size_t i = 0; i < n && !bad; i++) {
    if (!elem_equal(dt, dst + i * size, want + i * size)) {
      char x[24], got[24], exp[24];
      cr_log_error("%s avg_finish %s n=%zu nranks=%d%s: element %zu: %s -> %s,"
                   " expected %s",
                   isa_names[isa], dt_names[dt], n, nranks,
                   in_place ? " in place" : "", i,
                   elem_hex(dt, src + i * size, x),
                   elem_hex(dt, dst + i * size, got),
                   elem_hex(dt, want + i * size, exp));
      bad = 1;
    }
  }
  if (!bad && !guard_intact(dst + n * size, GUARD * size)) {
    cr_log_error("%s avg_finish %s n=%zu: wrote past the end", isa_names[isa],
                 dt_names[dt], n);
    bad = 1;
  }
  free(src);
  free(dst);
  free(want);
  return bad;
}

/* avg_finish with nranks = 1 rounds every float16 pattern through float and
 * back with this set's conversions: they must give the portable scalar
 * functions' bits exactly, NaNs included. */
static int check_f16_roundtrip_bits(int isa) {
  uint16_t *h = malloc(65536 * sizeof *h);
  cr_assert_not_null(h);
  for (uint32_t i = 0; i < 65536; i++)
    h[i] = (uint16_t)i;
  rcc_reduce_avg_finish(RINGCC_FLOAT16, h, h, 65536, 1);
  int bad = 0;
  for (uint32_t i = 0; i < 65536 && !bad; i++) {
    uint16_t want = rcc_float_to_half(rcc_half_to_float((uint16_t)i));
    if (h[i] != want) {
      cr_log_error("%s: float16 0x%04x -> float -> 0x%04x, scalar gives 0x%04x",
                   isa_names[isa], i, h[i], want);
      bad = 1;
    }
  }
  free(h);
  return bad;
}

static void check_all_avg(int isa) {
  static const int nranks[] = {1, 2, 3, 7, 200};
  use_isa(isa);
  rng_state = 7 + (uint64_t)isa;
  int failures = 0;
  for (int dt = 0; dt < RINGCC_NUM_DATATYPES; dt++)
    for (size_t l = 0; l < NLENGTHS; l++)
      for (size_t r = 0; r < sizeof nranks / sizeof nranks[0]; r++)
        for (int in_place = 0; in_place < 2; in_place++)
          failures += check_avg(isa, dt, lengths[l], nranks[r], in_place);
  failures += check_f16_roundtrip_bits(isa);
  rcc_reduce_set_isa(-1);
  cr_assert_eq(failures, 0, "%d avg_finish runs failed (see the log)",
               failures);
}

Test(reduce, avg_portable, .timeout = 30) { check_all_avg(RCC_ISA_PORTABLE); }
Test(reduce, avg_avx2, .timeout = 30) { check_all_avg(RCC_ISA_AVX2); }
Test(reduce, avg_avx512, .timeout = 30) { check_all_avg(RCC_ISA_AVX512); }

Test(reduce, avg_truncates_toward_zero, .timeout = 10) {
  int8_t i8[] = {-7, 7, -128, 127, -1};
  rcc_reduce_avg_finish(RINGCC_INT8, i8, i8, 5, 2);
  cr_assert(i8[0] == -3 && i8[1] == 3 && i8[2] == -64 && i8[3] == 63 &&
            i8[4] == 0);
  int32_t i32[] = {-7, INT32_MIN, INT32_MAX};
  rcc_reduce_avg_finish(RINGCC_INT32, i32, i32, 3, 2);
  cr_assert(i32[0] == -3 && i32[1] == INT32_MIN / 2 && i32[2] == INT32_MAX / 2);
  int64_t i64[] = {-7, INT64_MIN, -5};
  rcc_reduce_avg_finish(RINGCC_INT64, i64, i64, 3, 2);
  cr_assert(i64[0] == -3 && i64[1] == INT64_MIN / 2 && i64[2] == -2);
  uint8_t u8[] = {255, 7};
  rcc_reduce_avg_finish(RINGCC_UINT8, u8, u8, 2, 200);
  cr_assert(u8[0] == 1 && u8[1] == 0);
  uint32_t u32[] = {0xffffffffu};
  rcc_reduce_avg_finish(RINGCC_UINT32, u32, u32, 1, 2);
  cr_assert_eq(u32[0], 0x7fffffffu);
  uint64_t u64[] = {UINT64_MAX};
  rcc_reduce_avg_finish(RINGCC_UINT64, u64, u64, 1, 3);
  cr_assert_eq(u64[0], UINT64_MAX / 3);
  float f32[] = {-7.0f};
  rcc_reduce_avg_finish(RINGCC_FLOAT32, f32, f32, 1, 2);
  cr_assert_eq(f32[0], -3.5f);
  uint16_t h = rcc_float_to_half(-7.0f), bf = rcc_float_to_bf16(-7.0f);
  rcc_reduce_avg_finish(RINGCC_FLOAT16, &h, &h, 1, 2);
  rcc_reduce_avg_finish(RINGCC_BFLOAT16, &bf, &bf, 1, 2);
  cr_assert_eq(rcc_half_to_float(h), -3.5f);
  cr_assert_eq(rcc_bf16_to_float(bf), -3.5f);
}

/* ---- float16 conversions ----------------------------------------------- */

#if HAVE_X86
__attribute__((target("f16c"))) static uint16_t hw_float_to_half(float f) {
  return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}
static int have_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#else
static uint16_t hw_float_to_half(float f) { return (uint16_t)f; }
static float hw_half_to_float(uint16_t h) { return h; }
static int have_f16c(void) { return 0; }
#endif

Test(float16, every_pattern_widens_exactly_and_round_trips, .timeout = 10) {
  int f16c = have_f16c();
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float f = rcc_half_to_float(h);
    float want = (float)f16_of(h);
    int nan = (h & 0x7fff) > 0x7c00;
    if (nan) {
      cr_assert(isnan(f) && signbit(f) == signbit(want), "0x%04x", h);
      uint16_t back = rcc_float_to_half(f);
      cr_assert((back & 0x7fff) > 0x7c00 && (back & 0x8000) == (h & 0x8000),
                "NaN 0x%04x came back as 0x%04x", h, back);
    } else {
      cr_assert_eq(f32_bits(f), f32_bits(want), "0x%04x -> %a, want %a", h,
                   (double)f, (double)want);
      cr_assert_eq(rcc_float_to_half(f), h, "0x%04x does not round-trip", h);
    }
    if (f16c)
      cr_assert_eq(f32_bits(f), f32_bits(hw_half_to_float(h)),
                   "0x%04x: 0x%08x, F16C gives 0x%08x", h, f32_bits(f),
                   f32_bits(hw_half_to_float(h)));
  }
}

static int check_float_to_half(float f, int f16c) {
  uint16_t got = rcc_float_to_half(f);
  if (isnan(f)) {
    if ((got & 0x7fff) <= 0x7c00 || (got >> 15) != (f32_bits(f) >> 31)) {
      cr_log_error("NaN 0x%08x -> 0x%04x", f32_bits(f), got);
      return 1;
    }
  } else {
    uint16_t want = f16_bits((_Float16)f);
    if (got != want) {
      cr_log_error("%a (0x%08x) -> 0x%04x, _Float16 gives 0x%04x", (double)f,
                   f32_bits(f), got, want);
      return 1;
    }
  }
  if (f16c && got != hw_float_to_half(f)) {
    cr_log_error("0x%08x -> 0x%04x, F16C gives 0x%04x", f32_bits(f), got,
                 hw_float_to_half(f));
    return 1;
  }
  return 0;
}

Test(float16, rounding_matches_Float16_and_F16C, .timeout = 20) {
  int f16c = have_f16c(), bad = 0;
  /* A sample of all floats: every sign, exponent, NaN payload. */
  for (uint64_t u = 0; u < (1ull << 32) && bad < 10; u += 4093)
    bad += check_float_to_half(f32_of((uint32_t)u), f16c);
  /* Every tie between neighbouring halves, its neighbours and the halves
   * themselves, both signs; ties must go to the even one. */
  for (uint32_t h = 0; h <= 0x7bff && bad < 10; h++) {
    float lo = (float)f16_of((uint16_t)h);
    float hi = h == 0x7bff ? 65536.0f : (float)f16_of((uint16_t)(h + 1));
    float mid = lo + (hi - lo) / 2; /* exact: 12 significant bits */
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    if (rcc_float_to_half(mid) != even || rcc_float_to_half(-mid) != (even | 0x8000)) {
      cr_log_error("tie %a -> 0x%04x, want 0x%04x", (double)mid,
                   rcc_float_to_half(mid), even);
      bad++;
    }
    const float probes[] = {lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
    for (size_t p = 0; p < 4; p++) {
      bad += check_float_to_half(probes[p], f16c);
      bad += check_float_to_half(-probes[p], f16c);
    }
  }
  /* Overflow, underflow, float subnormals, the edges of the subnormals. */
  const float edges[] = {65504.0f, 65519.99f, 65520.0f, 65536.0f, FLT_MAX,
                         INFINITY, -INFINITY, NAN, -NAN, 0x1p-14f, 0x1p-24f,
                         0x1p-25f, 0x1.000002p-25f, 0x1p-26f, FLT_MIN,
                         0x1p-149f, -0x1p-149f, 0.0f, -0.0f};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
    bad += check_float_to_half(edges[i], f16c);
  cr_assert(rcc_float_to_half(65520.0f) == 0x7c00 &&
            rcc_float_to_half(65519.99f) == 0x7bff &&
            rcc_float_to_half(0x1p-25f) == 0 &&
            rcc_float_to_half(0x1.000002p-25f) == 1);
  cr_assert_eq(bad, 0, "%d float->half conversions wrong (see the log)", bad);
}

/* ---- bfloat16 conversions ---------------------------------------------- */

Test(bfloat16, every_pattern_round_trips, .timeout = 10) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float f = rcc_bf16_to_float(h);
    cr_assert_eq(f32_bits(f), (uint32_t)h << 16);
    uint16_t back = rcc_float_to_bf16(f);
    if ((h & 0x7fff) > 0x7f80)
      cr_assert((back & 0x7fff) > 0x7f80 && (back & 0x8000) == (h & 0x8000),
                "NaN 0x%04x came back as 0x%04x", h, back);
    else
      cr_assert_eq(back, h, "0x%04x does not round-trip", h);
  }
}

Test(bfloat16, every_tie_rounds_to_even, .timeout = 10) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    uint32_t base = (uint32_t)h << 16;
    if ((h & 0x7f80) == 0x7f80) { /* Inf/NaN: anything below is a NaN */
      cr_assert((rcc_float_to_bf16(f32_of(base | 0x8000)) & 0x7fff) > 0x7f80);
      cr_assert((rcc_float_to_bf16(f32_of(base | 1)) & 0x7fff) > 0x7f80);
      continue;
    }
    uint16_t up = (uint16_t)(h + 1); /* away from zero; may become Inf */
    uint16_t even = (h & 1) ? up : h;
    cr_assert_eq(rcc_float_to_bf16(f32_of(base | 0x8000)), even, "tie 0x%08x",
                 base | 0x8000);
    cr_assert_eq(rcc_float_to_bf16(f32_of(base | 0x7fff)), h);
    cr_assert_eq(rcc_float_to_bf16(f32_of(base | 0x8001)), up);
    cr_assert_eq(rcc_float_to_bf16(f32_of(base | 0x0001)), h);
  }
  cr_assert_eq(rcc_float_to_bf16(FLT_MAX), 0x7f80); /* overflow to Inf */
  cr_assert_eq(rcc_float_to_bf16(-FLT_MAX), 0xff80);
  cr_assert_eq(rcc_float_to_bf16(0x1p-149f), 0x0000);  /* below half a unit */
  cr_assert_eq(rcc_float_to_bf16(0x1p-133f), 0x0001);  /* bf16 subnormal */
}

Test(bfloat16, rounding_matches_reference, .timeout = 20) {
  int bad = 0;
  for (uint64_t u = 0; u < (1ull << 32) && bad < 10; u += 4093) {
    float f = f32_of((uint32_t)u);
    uint16_t got = rcc_float_to_bf16(f), want = ref_bf16_round(f);
    if (!(got == want || (isnan(f) && (got & 0x7fff) > 0x7f80 &&
                          (got & 0x8000) == (want & 0x8000)))) {
      cr_log_error("%a (0x%08x) -> 0x%04x, want 0x%04x", (double)f,
                   (uint32_t)u, got, want);
      bad++;
    }
  }
  cr_assert_eq(bad, 0, "%d float->bf16 conversions wrong (see the log)", bad);
}
