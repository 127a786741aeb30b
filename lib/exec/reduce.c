/*
 * reduce.c - the element-wise reduction kernels: dst[i] = a[i] op b[i].
 *
 * These are the hot loop of every reducing collective, and must run at memory
 * bandwidth. One definition, expanded by the macros below, makes every
 * datatype x op kernel; it is compiled once per instruction set (portable C,
 * AVX2+F16C, AVX-512 F/BW/DQ/VL) with __attribute__((target)), into one table
 * of function pointers per set. The first call picks the best table the CPU
 * and OS support (logged at RINGCC_DEBUG=INFO). Tables rather than
 * target_clones: a caller fetches its kernel once per collective, so there is
 * no dispatch per call, and the tests can run every set (rcc_reduce_set_isa).
 *
 * Semantics, the same in every instruction set (bit for bit):
 *  - Integers wrap modulo 2^bits: sum and product are computed in the unsigned
 *    type (signed overflow would be undefined behaviour).
 *  - min(x, y) = x < y ? x : y and max(x, y) = x > y ? x : y, the x86
 *    MINPS/MAXPS rule: when either operand is a NaN, or both are zeros of
 *    either sign, the result is y (the element of b). So a NaN in b
 *    propagates and a NaN in a does not; the result of a reduction over ranks
 *    with NaNs depends on the order in which ranks were combined.
 *  - float16 and bfloat16 are widened to float, combined in float and rounded
 *    back to nearest even (overflow gives Inf, NaNs stay NaN, subnormals are
 *    kept, independent of the MXCSR FTZ/DAZ bits for the conversions).
 *  - float8 (OCP e4m3 and e5m2) likewise: widened to float, combined, rounded
 *    to nearest even. e4m3 has no infinity: overflow (and +-Inf) saturates to
 *    +-448, as CUDA's __NV_SATFINITE conversion does; e5m2 overflows to
 *    +-Inf. NaNs stay NaN (e5m2's made quiet). Scalar conversions: these
 *    kernels are correct, not fast.
 *  - RINGCC_AVG reduces as RINGCC_SUM; rcc_reduce_avg_finish divides.
 *
 * dst may alias a or b exactly. The loops carry no restrict (that would be a
 * false promise when dst == a); instead `GCC ivdep` tells the vectoriser that
 * there is no loop-carried dependence, which exact aliasing cannot create:
 * element i is read before element i is written, and no other element is.
 *
 * Why blocks of RCC_BLOCK elements: GCC 12 at -O2 vectorises only loops whose
 * trip count is a known multiple of the vector length ("very cheap" cost
 * model), so the body runs over fixed-size blocks and a short scalar loop
 * does the tail.
 */
#include <stdatomic.h>
#include <string.h>

#include "dtype.h"
#include "log.h"
#include "reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#define RCC_HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define RCC_HAVE_X86 0
#endif

#if defined(__clang__)
#define RCC_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define RCC_IVDEP _Pragma("GCC ivdep")
#else
#define RCC_IVDEP
#endif

#define RCC_BLOCK 64 /* elements per vectorised block; >= 64 bytes of int8 */

/* ---- scalar conversions (portable, bit-exact with F16C) -------------- */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/*
 * The float16 conversions are branch-free so that the portable kernels
 * vectorise too; they give the F16C instructions' bits exactly, NaNs
 * included. Subnormal halves go through one float addition or subtraction
 * that is exact or rounds to nearest even (the default rounding mode, which
 * all float arithmetic here assumes); its operands and results are normal
 * floats, so the MXCSR FTZ/DAZ bits do not matter.
 */

/* cond ? yes : no, as bit masks: GCC turns a ?: around a float operation
 * into a branch (the operation might trap), which stops vectorisation. */
static inline uint32_t pick(int cond, uint32_t yes, uint32_t no) {
  uint32_t mask = -(uint32_t)(cond != 0);
  return (yes & mask) | (no & ~mask);
}

/* Exact. A signalling NaN comes back quiet, as VCVTPH2PS does. */
static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent, mantissa */
  uint32_t exp = em & 0x0f800000u;
  uint32_t normal = em + (112u << 23); /* rebias 15 -> 127 */
  uint32_t quiet = (uint32_t)((h & 0x3ffu) != 0) << 22; /* NaN -> quiet */
  uint32_t inf_nan = (em + (224u << 23)) | quiet;
  /* 2^-14 * (1 + m/1024) - 2^-14 = m * 2^-24, exactly. */
  uint32_t sub = f32_bits(f32_from_bits(em + (113u << 23)) - 0x1p-14f);
  uint32_t r = pick(exp == 0, sub, pick(exp == 0x0f800000u, inf_nan, normal));
  return f32_from_bits(sign | r);
}

/* Round to nearest even. NaNs keep sign and top payload bits and are made
 * quiet, as VCVTPS2PH does, so every instruction set gives the same bits. */
static inline uint16_t float_to_half(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  /* >= 2^-14, a normal half: rebias, round on bit 13 (wraps when unused). */
  uint32_t normal = (ax - (112u << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  /* < 2^-14: adding 0.5, whose ulp is 2^-24, rounds to whole subnormal
   * units; the result's low bits count them (0x400 is the smallest normal). */
  uint32_t sub = f32_bits(f32_from_bits(ax) + 0.5f) - 0x3f000000u;
  uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  uint32_t h = pick(ax < 0x38800000u, sub, normal);
  h = pick(ax >= 0x477ff000u, 0x7c00u, h); /* >= 65520 (the tie): Inf */
  h = pick(ax > 0x7f800000u, nan, h);
  return (uint16_t)(sign | h);
}

static inline float bf16_to_float(uint16_t h) {
  return f32_from_bits((uint32_t)h << 16);
}

/* Integer-only and branch-free so that it vectorises (VCVTNEPS2BF16 would
 * flush subnormals). A NaN is made quiet so that rounding cannot turn it into
 * Inf; overflow carries into the exponent and gives Inf. */
static inline uint16_t float_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/*
 * float8: M mantissa bits, exponent bias B. A normal value is
 * 2^(e-B) * (1 + m/2^M); e == 0 holds subnormals m * 2^(1-B-M). e4m3 (M 3,
 * B 7) keeps S.1111.111 for NaN and has no infinity; e5m2 (M 2, B 15) is
 * IEEE-like (e == 31: Inf, or NaN when m != 0).
 */
static inline float fp8_to_float(uint8_t v, unsigned M, unsigned B, int e4m3) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t e = (v & 0x7fu) >> M, m = v & ((1u << M) - 1);
  uint32_t emax = (0x7fu >> M); /* all ones */
  if (e4m3 && e == emax && m == (1u << M) - 1)
    return f32_from_bits(sign | 0x7fc00000u);
  if (!e4m3 && e == emax) /* Inf, or a NaN made quiet */
    return f32_from_bits(sign | 0x7f800000u | (m ? 0x400000u | (m << (23 - M)) : 0));
  if (e == 0) { /* m * 2^(1-B-M), exact */
    float f = (float)m * f32_from_bits((127u + 1u - B - M) << 23);
    return f32_from_bits(sign | f32_bits(f));
  }
  return f32_from_bits(sign | ((e + 127u - B) << 23) | (m << (23 - M)));
}

/* Round to nearest even, then saturate (e4m3) or give Inf (e5m2) above the
 * largest finite value. */
static inline uint8_t float_to_fp8(float f, unsigned M, unsigned B, int e4m3) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 24) & 0x80u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN */
    return (uint8_t)(sign | (e4m3 ? 0x7fu : 0x7eu));
  uint32_t max_code = e4m3 ? 0x7eu : 0x7bu;
  uint32_t over = e4m3 ? 0x7eu : 0x7cu; /* +-448, or +-Inf */
  if (ax >= 0x7f800000u) return (uint8_t)(sign | over);
  uint32_t code;
  if (ax < ((127u + 1u - B) << 23)) {
    /* below the smallest normal: adding 2^(1-B-M+23), whose ulp is the
     * subnormal step, rounds to whole steps; the low bits count them (the
     * count 2^M is the smallest normal, encoded alike). */
    float magic = f32_from_bits((127u + 1u - B - M + 23u) << 23);
    code = f32_bits(f32_from_bits(ax) + magic) - f32_bits(magic);
  } else {
    unsigned shift = 23u - M;
    uint32_t rounded = (ax + (1u << (shift - 1)) - 1u + ((ax >> shift) & 1u)) >> shift;
    code = rounded - ((127u - B) << M); /* rebias; a carry moves e up */
  }
  return (uint8_t)(sign | (code > max_code ? over : code));
}

static inline float e4m3_to_float(uint8_t v) { return fp8_to_float(v, 3, 7, 1); }
static inline uint8_t float_to_e4m3(float f) { return float_to_fp8(f, 3, 7, 1); }
static inline float e5m2_to_float(uint8_t v) { return fp8_to_float(v, 2, 15, 0); }
static inline uint8_t float_to_e5m2(float f) { return float_to_fp8(f, 2, 15, 0); }

float rcc_fp8_to_float(ringcc_datatype_t dt, uint8_t v) {
  return dt == RINGCC_FLOAT8_E4M3 ? e4m3_to_float(v) : e5m2_to_float(v);
}
uint8_t rcc_float_to_fp8(ringcc_datatype_t dt, float f) {
  return dt == RINGCC_FLOAT8_E4M3 ? float_to_e4m3(f) : float_to_e5m2(f);
}

float rcc_half_to_float(uint16_t h) { return half_to_float(h); }
uint16_t rcc_float_to_half(float f) { return float_to_half(f); }
float rcc_bf16_to_float(uint16_t h) { return bf16_to_float(h); }
uint16_t rcc_float_to_bf16(float f) { return float_to_bf16(f); }

/* ---- the one definition of every element operation ------------------- */

/* A: type of sum/product; C: type of comparisons. */
#define RCC_OP_sum(A, C, x, y) ((A)(x) + (A)(y))
#define RCC_OP_prod(A, C, x, y) ((A)(x) * (A)(y))
#define RCC_OP_min(A, C, x, y) ((C)(x) < (C)(y) ? (C)(x) : (C)(y))
#define RCC_OP_max(A, C, x, y) ((C)(x) > (C)(y) ? (C)(x) : (C)(y))

#define RCC_SAME(x) (x)

/*
 * Every datatype, one row each: X(name, enum, T storage, A sum/product type,
 * C comparison type, D average-division type, WIDEN, NARROW). Integers add
 * and multiply in the unsigned type and compare in their own; int8 divides
 * in int32 so that nranks > 127 stays exact. float16 is listed apart because
 * the x86 sets replace its kernels with F16C ones.
 */
#define RCC_DATATYPES_BUT_F16(X, ...)                                          \
  X(__VA_ARGS__, int8, RINGCC_INT8, int8_t, uint8_t, int8_t, int32_t,          \
    RCC_SAME, RCC_SAME)                                                        \
  X(__VA_ARGS__, uint8, RINGCC_UINT8, uint8_t, uint8_t, uint8_t, uint32_t,     \
    RCC_SAME, RCC_SAME)                                                        \
  X(__VA_ARGS__, int32, RINGCC_INT32, int32_t, uint32_t, int32_t, int32_t,     \
    RCC_SAME, RCC_SAME)                                                        \
  X(__VA_ARGS__, uint32, RINGCC_UINT32, uint32_t, uint32_t, uint32_t,          \
    uint32_t, RCC_SAME, RCC_SAME)                                              \
  X(__VA_ARGS__, int64, RINGCC_INT64, int64_t, uint64_t, int64_t, int64_t,     \
    RCC_SAME, RCC_SAME)                                                        \
  X(__VA_ARGS__, uint64, RINGCC_UINT64, uint64_t, uint64_t, uint64_t,          \
    uint64_t, RCC_SAME, RCC_SAME)                                              \
  X(__VA_ARGS__, bfloat16, RINGCC_BFLOAT16, uint16_t, float, float, float,     \
    bf16_to_float, float_to_bf16)                                              \
  X(__VA_ARGS__, float32, RINGCC_FLOAT32, float, float, float, float,          \
    RCC_SAME, RCC_SAME)                                                        \
  X(__VA_ARGS__, float64, RINGCC_FLOAT64, double, double, double, double,      \
    RCC_SAME, RCC_SAME)
#define RCC_DATATYPE_F16(X, ...)                                               \
  X(__VA_ARGS__, float16, RINGCC_FLOAT16, uint16_t, float, float, float,       \
    half_to_float, float_to_half)
/* float8: scalar conversions with branches, so their loops carry no
 * vectorisation hint (clang would report that it could not honour it). */
#define RCC_DATATYPES_FP8(X, ...)                                              \
  X(__VA_ARGS__, float8_e4m3, RINGCC_FLOAT8_E4M3, uint8_t, float, float,       \
    float, e4m3_to_float, float_to_e4m3)                                       \
  X(__VA_ARGS__, float8_e5m2, RINGCC_FLOAT8_E5M2, uint8_t, float, float,       \
    float, e5m2_to_float, float_to_e5m2)
#define RCC_DATATYPES(X, ...)                                                  \
  RCC_DATATYPES_BUT_F16(X, __VA_ARGS__) RCC_DATATYPE_F16(X, __VA_ARGS__)      \
  RCC_DATATYPES_FP8(X, __VA_ARGS__)

/* Scalar element functions, shared by every instruction set (they inline
 * into each set's kernels and get vectorised there). */
#define RCC_DEFINE_ELEMENT(T, A, C, W, N, dt, op)                              \
  static inline T elem_##op##_##dt(T x, T y) {                                 \
    return (T)N(RCC_OP_##op(A, C, W(x), W(y)));                                \
  }
#define RCC_DEFINE_ELEMENTS(unused, dt, e, T, A, C, D, W, N)                   \
  RCC_DEFINE_ELEMENT(T, A, C, W, N, dt, sum)                                   \
  RCC_DEFINE_ELEMENT(T, A, C, W, N, dt, prod)                                  \
  RCC_DEFINE_ELEMENT(T, A, C, W, N, dt, min)                                   \
  RCC_DEFINE_ELEMENT(T, A, C, W, N, dt, max)                                   \
  static inline T elem_avg_##dt(T x, D nranks) {                               \
    return (T)N((D)W(x) / nranks);                                             \
  }
RCC_DATATYPES(RCC_DEFINE_ELEMENTS, ~)

/* ---- kernels, generated per instruction set ---------------------------- */

#define RCC_NO_HINT
#define RCC_DEFINE_REDUCE(isa, attr, dt, T, op, hint)                          \
  static attr void reduce_##op##_##dt##_##isa(void *dst_, const void *a_,      \
                                              const void *b_, size_t n) {      \
    T *dst = dst_;                                                             \
    const T *a = a_, *b = b_;                                                  \
    size_t i = 0;                                                              \
    for (; n - i >= RCC_BLOCK; i += RCC_BLOCK) {                               \
      hint                                                                     \
      for (size_t j = 0; j < RCC_BLOCK; j++)                                   \
        dst[i + j] = elem_##op##_##dt(a[i + j], b[i + j]);                     \
    }                                                                          \
    for (; i < n; i++)                                                         \
      dst[i] = elem_##op##_##dt(a[i], b[i]);                                   \
  }

#define RCC_DEFINE_AVG(isa, attr, dt, T, D, hint)                              \
  static attr void avg_##dt##_##isa(void *dst_, const void *src_, size_t n,    \
                                    int nranks) {                              \
    T *dst = dst_;                                                             \
    const T *src = src_;                                                       \
    const D divisor = (D)nranks;                                               \
    size_t i = 0;                                                              \
    for (; n - i >= RCC_BLOCK; i += RCC_BLOCK) {                               \
      hint                                                                     \
      for (size_t j = 0; j < RCC_BLOCK; j++)                                   \
        dst[i + j] = elem_avg_##dt(src[i + j], divisor);                       \
    }                                                                          \
    for (; i < n; i++)                                                         \
      dst[i] = elem_avg_##dt(src[i], divisor);                                 \
  }

#define RCC_DEFINE_KERNELS_HINT(isa, attr, hint, dt, e, T, A, C, D, W, N)     \
  RCC_DEFINE_REDUCE(isa, attr, dt, T, sum, hint)                               \
  RCC_DEFINE_REDUCE(isa, attr, dt, T, prod, hint)                              \
  RCC_DEFINE_REDUCE(isa, attr, dt, T, min, hint)                               \
  RCC_DEFINE_REDUCE(isa, attr, dt, T, max, hint)                               \
  RCC_DEFINE_AVG(isa, attr, dt, T, D, hint)
#define RCC_DEFINE_KERNELS(isa, attr, ...)                                     \
  RCC_DEFINE_KERNELS_HINT(isa, attr, RCC_IVDEP, __VA_ARGS__)
#define RCC_DEFINE_SCALAR_KERNELS(isa, attr, ...)                              \
  RCC_DEFINE_KERNELS_HINT(isa, attr, RCC_NO_HINT, __VA_ARGS__)

/* The table of one instruction set. AVG reduces as SUM. */
typedef void (*rcc_avg_fn)(void *dst, const void *src, size_t n, int nranks);
struct rcc_kernel_set {
  const char *name;
  rcc_reduce_fn reduce[RINGCC_NUM_DATATYPES][RINGCC_NUM_OPS];
  rcc_avg_fn avg[RINGCC_NUM_DATATYPES];
};

#define RCC_TABLE_REDUCE_ROW(isa, dt, e, T, A, C, D, W, N)                     \
  [e] = {[RINGCC_SUM] = reduce_sum_##dt##_##isa,                               \
         [RINGCC_PROD] = reduce_prod_##dt##_##isa,                             \
         [RINGCC_MIN] = reduce_min_##dt##_##isa,                               \
         [RINGCC_MAX] = reduce_max_##dt##_##isa,                               \
         [RINGCC_AVG] = reduce_sum_##dt##_##isa},
#define RCC_TABLE_AVG_ROW(isa, dt, e, T, A, C, D, W, N) [e] = avg_##dt##_##isa,
#define RCC_DEFINE_KERNEL_SET(isa)                                             \
  static const struct rcc_kernel_set kernels_##isa = {                         \
      .name = #isa,                                                            \
      .reduce = {RCC_DATATYPES(RCC_TABLE_REDUCE_ROW, isa)},                    \
      .avg = {RCC_DATATYPES(RCC_TABLE_AVG_ROW, isa)},                          \
  };

/* Portable C: whatever the compiler's baseline (SSE2 on x86-64) gives. */
RCC_DATATYPES_BUT_F16(RCC_DEFINE_KERNELS, portable, )
RCC_DATATYPE_F16(RCC_DEFINE_KERNELS, portable, )
RCC_DATATYPES_FP8(RCC_DEFINE_SCALAR_KERNELS, portable, )
RCC_DEFINE_KERNEL_SET(portable)

#if RCC_HAVE_X86
/*
 * float16 on x86: F16C converts 8 (AVX2) or 16 (AVX-512) halves per
 * instruction with round-to-nearest-even. The tail goes through a zeroed
 * stack block so that it is rounded by the same instruction.
 */
#define RCC_F16_ROUNDING (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#define RCC_F16_STEP_avx2 8
#define RCC_F16_LOAD_avx2(p)                                                   \
  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define RCC_F16_STORE_avx2(p, v)                                               \
  _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((v), RCC_F16_ROUNDING))
#define RCC_VOP_avx2_sum _mm256_add_ps
#define RCC_VOP_avx2_prod _mm256_mul_ps
#define RCC_VOP_avx2_min _mm256_min_ps /* a < b ? a : b, as RCC_OP_min */
#define RCC_VOP_avx2_max _mm256_max_ps
#define RCC_VDIV_avx2(v, d) _mm256_div_ps((v), _mm256_set1_ps(d))

#define RCC_F16_STEP_avx512 16
#define RCC_F16_LOAD_avx512(p)                                                 \
  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define RCC_F16_STORE_avx512(p, v)                                             \
  _mm256_storeu_si256((__m256i *)(void *)(p),                                  \
                      _mm512_cvtps_ph((v), RCC_F16_ROUNDING))
#define RCC_VOP_avx512_sum _mm512_add_ps
#define RCC_VOP_avx512_prod _mm512_mul_ps
#define RCC_VOP_avx512_min _mm512_min_ps
#define RCC_VOP_avx512_max _mm512_max_ps
#define RCC_VDIV_avx512(v, d) _mm512_div_ps((v), _mm512_set1_ps(d))

#define RCC_F16_STEP_OP(isa, op, d, x, y)                                      \
  RCC_F16_STORE_##isa(d, RCC_VOP_##isa##_##op(RCC_F16_LOAD_##isa(x),           \
                                              RCC_F16_LOAD_##isa(y)))
#define RCC_F16_STEP_AVG(isa, d, x, divisor)                                   \
  RCC_F16_STORE_##isa(d, RCC_VDIV_##isa(RCC_F16_LOAD_##isa(x), (divisor)))

#define RCC_DEFINE_F16_REDUCE(isa, attr, op)                                   \
  static attr void reduce_##op##_float16_##isa(void *dst_, const void *a_,     \
                                               const void *b_, size_t n) {     \
    uint16_t *dst = dst_;                                                      \
    const uint16_t *a = a_, *b = b_;                                           \
    enum { step = RCC_F16_STEP_##isa };                                        \
    size_t i = 0;                                                              \
    for (; n - i >= step; i += step)                                           \
      RCC_F16_STEP_OP(isa, op, dst + i, a + i, b + i);                         \
    if (i < n) {                                                               \
      uint16_t ta[step], tb[step];                                             \
      memset(ta, 0, sizeof ta);                                                \
      memset(tb, 0, sizeof tb);                                                \
      memcpy(ta, a + i, (n - i) * sizeof(uint16_t));                           \
      memcpy(tb, b + i, (n - i) * sizeof(uint16_t));                           \
      RCC_F16_STEP_OP(isa, op, ta, ta, tb);                                    \
      memcpy(dst + i, ta, (n - i) * sizeof(uint16_t));                         \
    }                                                                          \
  }

#define RCC_DEFINE_F16_AVG(isa, attr)                                          \
  static attr void avg_float16_##isa(void *dst_, const void *src_, size_t n,   \
                                     int nranks) {                             \
    uint16_t *dst = dst_;                                                      \
    const uint16_t *src = src_;                                                \
    const float divisor = (float)nranks;                                       \
    enum { step = RCC_F16_STEP_##isa };                                        \
    size_t i = 0;                                                              \
    for (; n - i >= step; i += step)                                           \
      RCC_F16_STEP_AVG(isa, dst + i, src + i, divisor);                        \
    if (i < n) {                                                               \
      uint16_t t[step];                                                        \
      memset(t, 0, sizeof t);                                                  \
      memcpy(t, src + i, (n - i) * sizeof(uint16_t));                          \
      RCC_F16_STEP_AVG(isa, t, t, divisor);                                    \
      memcpy(dst + i, t, (n - i) * sizeof(uint16_t));                          \
    }                                                                          \
  }

#define RCC_DEFINE_F16_KERNELS(isa, attr)                                      \
  RCC_DEFINE_F16_REDUCE(isa, attr, sum)                                        \
  RCC_DEFINE_F16_REDUCE(isa, attr, prod)                                       \
  RCC_DEFINE_F16_REDUCE(isa, attr, min)                                        \
  RCC_DEFINE_F16_REDUCE(isa, attr, max)                                        \
  RCC_DEFINE_F16_AVG(isa, attr)

#define RCC_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define RCC_TARGET_AVX512                                                      \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c")))

RCC_DATATYPES_BUT_F16(RCC_DEFINE_KERNELS, avx2, RCC_TARGET_AVX2)
RCC_DEFINE_F16_KERNELS(avx2, RCC_TARGET_AVX2)
RCC_DATATYPES_FP8(RCC_DEFINE_SCALAR_KERNELS, avx2, RCC_TARGET_AVX2)
RCC_DEFINE_KERNEL_SET(avx2)

RCC_DATATYPES_BUT_F16(RCC_DEFINE_KERNELS, avx512, RCC_TARGET_AVX512)
RCC_DEFINE_F16_KERNELS(avx512, RCC_TARGET_AVX512)
RCC_DATATYPES_FP8(RCC_DEFINE_SCALAR_KERNELS, avx512, RCC_TARGET_AVX512)
RCC_DEFINE_KERNEL_SET(avx512)
#endif /* RCC_HAVE_X86 */

/* ---- premul-sum's scaling ---------------------------------------------- */

/* dst[i] = src[i] * scalar by the datatype's product (elem_prod: integers
 * wrap, 16-bit floats and float8 multiply in float and round to nearest even
 * once). Portable C only: it runs once per call over the rank's own input,
 * where the reduction runs once per step. */
#define RCC_DEFINE_SCALE(unused, dt, e, T, A, C, D, W, N)                      \
  static void scale_##dt(void *dst_, const void *src_, size_t n,              \
                         const void *scalar) {                                 \
    T *dst = dst_;                                                             \
    const T *src = src_;                                                       \
    T s;                                                                       \
    memcpy(&s, scalar, sizeof s);                                              \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = elem_prod_##dt(src[i], s);                                      \
  }
RCC_DATATYPES(RCC_DEFINE_SCALE, ~)

typedef void (*rcc_scale_fn)(void *dst, const void *src, size_t n,
                             const void *scalar);
#define RCC_TABLE_SCALE_ROW(unused, dt, e, T, A, C, D, W, N) [e] = scale_##dt,
static const rcc_scale_fn scale_fns[RINGCC_NUM_DATATYPES] = {
    RCC_DATATYPES(RCC_TABLE_SCALE_ROW, ~)};

void rcc_reduce_scale(ringcc_datatype_t dt, void *dst, const void *src,
                      size_t n, const void *scalar) {
  if (rcc_dt_valid((int)dt))
    scale_fns[dt](dst, src, n, scalar);
}

/* ---- run-time choice --------------------------------------------------- */

static const struct rcc_kernel_set *const kernel_sets[] = {
    [RCC_ISA_PORTABLE] = &kernels_portable,
#if RCC_HAVE_X86
    [RCC_ISA_AVX2] = &kernels_avx2,
    [RCC_ISA_AVX512] = &kernels_avx512,
#endif
};

/* The level in use, or -1 before the first call has looked at the CPU. */
static _Atomic int isa_in_use = -1;

#if RCC_HAVE_X86
/* From CPUID: clang's __builtin_cpu_supports does not know "f16c". */
static int cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif

static int best_isa(void) {
#if RCC_HAVE_X86
  /* __builtin_cpu_supports also checks that the OS saves the registers;
   * F16C uses the same YMM state as AVX2. */
  __builtin_cpu_init();
  int f16c = cpu_has_f16c();
  if (f16c && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return RCC_ISA_AVX512;
  if (f16c && __builtin_cpu_supports("avx2"))
    return RCC_ISA_AVX2;
#endif
  return RCC_ISA_PORTABLE;
}

static const struct rcc_kernel_set *current_set(void) {
  int isa = atomic_load_explicit(&isa_in_use, memory_order_relaxed);
  if (isa < 0) { /* a race here is benign: both threads pick the same */
    isa = best_isa();
    atomic_store_explicit(&isa_in_use, isa, memory_order_relaxed);
    RCC_INFO(-1, "reduction kernels: %s", kernel_sets[isa]->name);
  }
  return kernel_sets[isa];
}

int rcc_reduce_set_isa(int isa) {
  int best = best_isa();
  int use = (isa < 0 || isa > best) ? best : isa;
  atomic_store_explicit(&isa_in_use, use, memory_order_relaxed);
  return use;
}

rcc_reduce_fn rcc_reduce_get(ringcc_datatype_t dt, ringcc_op_t op) {
  if (!rcc_dt_valid((int)dt) || !rcc_op_valid((int)op))
    return NULL;
  return current_set()->reduce[dt][op];
}

void rcc_reduce_avg_finish(ringcc_datatype_t dt, void *dst, const void *src,
                           size_t n, int nranks) {
  if (!rcc_dt_valid((int)dt) || nranks < 1)
    return;
  current_set()->avg[dt](dst, src, n, nranks);
}
