/*
 * reduce.cuh - element-wise reductions and copies on the GPU, for the
 * collective kernels (exec_cuda.cu) and the throughput check
 * (test/gpu/reduce_bw.cu): dst[i] = a[i] op b[i].
 *
 * One definition makes every datatype x op: an op is a functor (OpSum,
 * OpProd, OpMin, OpMax) applied to one element, or to a native pair of
 * 16-bit floats (__half2, __nv_bfloat162: __hadd2/__hmul2, one instruction
 * per pair on sm_80+); reduce_run<T, OP> streams vector words through it.
 * RCC_CUDA_DATATYPES and RCC_CUDA_OPS are the tables the kernels are
 * instantiated from.
 *
 * Semantics, bit for bit those of the host (lib/exec/reduce.c):
 *  - integers wrap modulo 2^bits (sum and product in the unsigned type);
 *  - min(x, y) = x < y ? x : y, max(x, y) = x > y ? x : y (so a NaN or a
 *    pair of zeros gives y, the element of b);
 *  - float16/bfloat16 sum and product: the native instructions round the
 *    exact result to nearest even once, which equals the host's "in float,
 *    then rounded" (float has p >= 2q + 2 bits for q = 11 and q = 8, so the
 *    double rounding is innocuous); NaN payloads may differ;
 *  - RINGCC_AVG reduces as sum; the finishing division by nranks happens
 *    where a step has postop, in the host's type (int8 in int32, 16-bit
 *    floats in float, ...), integers truncating toward zero.
 *
 * Memory: loads use ld.global.cg (L2, not L1): a slot a peer or the proxy
 * rewrites must never be served from a stale L1 line. Loops move whole
 * words: 16 bytes (uint4, 128-bit loads and stores) where a, b and the
 * destinations agree modulo 16, else the widest word they agree on (8 or 4
 * bytes), with single elements only for the head before the first word
 * boundary and the tail after the last word (vec_split.h: the rule, tested
 * on the CPU). Reductions and copies follow the same rule.
 */
#ifndef RCC_REDUCE_CUH
#define RCC_REDUCE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#include "ringcc.h"
#ifndef RCC_HD /* vec_split.h's rule runs on the device here */
#define RCC_HD __host__ __device__
#endif
#include "vec_split.h"

/* Every datatype, in ringcc_datatype_t order: X(enum, device type). */
#define RCC_CUDA_DATATYPES(X, ...)                                             \
  X(__VA_ARGS__, RINGCC_INT8, int8_t)                                          \
  X(__VA_ARGS__, RINGCC_UINT8, uint8_t)                                        \
  X(__VA_ARGS__, RINGCC_INT32, int32_t)                                        \
  X(__VA_ARGS__, RINGCC_UINT32, uint32_t)                                      \
  X(__VA_ARGS__, RINGCC_INT64, int64_t)                                        \
  X(__VA_ARGS__, RINGCC_UINT64, uint64_t)                                      \
  X(__VA_ARGS__, RINGCC_FLOAT16, __half)                                       \
  X(__VA_ARGS__, RINGCC_BFLOAT16, __nv_bfloat16)                               \
  X(__VA_ARGS__, RINGCC_FLOAT32, float)                                        \
  X(__VA_ARGS__, RINGCC_FLOAT64, double)
/* Every op, in ringcc_op_t order. */
#define RCC_CUDA_OPS(X, ...)                                                   \
  X(__VA_ARGS__, RINGCC_SUM)                                                   \
  X(__VA_ARGS__, RINGCC_PROD)                                                  \
  X(__VA_ARGS__, RINGCC_MIN)                                                   \
  X(__VA_ARGS__, RINGCC_MAX)                                                   \
  X(__VA_ARGS__, RINGCC_AVG)

namespace rcc {

/* ---- element types -------------------------------------------------------- */

template <class T>
constexpr bool is_half =
    std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
template <class T>
constexpr bool is_half_pair = std::is_same<T, __half2>::value ||
                              std::is_same<T, __nv_bfloat162>::value;

/* The type the average divides in (the host's D column). */
template <class T> struct avg_type { using type = T; };
template <> struct avg_type<int8_t> { using type = int32_t; };
template <> struct avg_type<uint8_t> { using type = uint32_t; };
template <> struct avg_type<__half> { using type = float; };
template <> struct avg_type<__nv_bfloat16> { using type = float; };

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <class T> __device__ __forceinline__ T from_float(float f);
template <> __device__ __forceinline__ __half from_float<__half>(float f) {
  return __float2half_rn(f);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}

/* ---- ops: one functor each, for elements and native half pairs ------------ */

struct OpSum {
  static constexpr bool pairs = true; /* 16-bit floats go two at a time */
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) {
      using U = typename std::make_unsigned<T>::type;
      return (T)(U)((U)a + (U)b);
    } else if constexpr (is_half_pair<T>) {
      return __hadd2(a, b);
    } else if constexpr (is_half<T>) {
      return __hadd(a, b);
    } else {
      return a + b;
    }
  }
};

struct OpProd {
  static constexpr bool pairs = true;
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (std::is_integral<T>::value) {
      using U = typename std::make_unsigned<T>::type;
      return (T)(U)((U)a * (U)b);
    } else if constexpr (is_half_pair<T>) {
      return __hmul2(a, b);
    } else if constexpr (is_half<T>) {
      return __hmul(a, b);
    } else {
      return a * b;
    }
  }
};

/* Compare and select, per element (the host's NaN and signed-zero rule;
 * __hmin2 would pick the non-NaN operand instead). */
struct OpMin {
  static constexpr bool pairs = false;
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (is_half<T>)
      return __hlt(a, b) ? a : b;
    else
      return a < b ? a : b;
  }
};

struct OpMax {
  static constexpr bool pairs = false;
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (is_half<T>)
      return __hgt(a, b) ? a : b;
    else
      return a > b ? a : b;
  }
};

template <int OP> struct op_of { using type = OpSum; }; /* SUM and AVG */
template <> struct op_of<RINGCC_PROD> { using type = OpProd; };
template <> struct op_of<RINGCC_MIN> { using type = OpMin; };
template <> struct op_of<RINGCC_MAX> { using type = OpMax; };

/* x / nranks in the host's type, for AVG's last step. */
template <class T> __device__ __forceinline__ T avg_div(T x, int nranks) {
  if constexpr (is_half<T>) {
    return from_float<T>(to_float(x) / (float)nranks);
  } else {
    using D = typename avg_type<T>::type;
    return (T)((D)x / (D)nranks);
  }
}

/* The unit an op works on inside a vector word: a native pair of 16-bit
 * floats where the op has a pair instruction, else one element. */
template <class T, class Op> struct lane { using type = T; };
template <class Op> struct lane<__half, Op> {
  using type = typename std::conditional<Op::pairs, __half2, __half>::type;
};
template <class Op> struct lane<__nv_bfloat16, Op> {
  using type =
      typename std::conditional<Op::pairs, __nv_bfloat162, __nv_bfloat16>::type;
};

/* ---- vector words: uint4 (16 bytes), uint2 (8), uint32_t (4) ---------------- */

template <class V> __device__ __forceinline__ V ld_vec(const V *p) {
  return __ldcg(p);
}

template <class T, int OP, class V>
__device__ __forceinline__ V vec_op(V a, V b) {
  using Op = typename op_of<OP>::type;
  using L = typename lane<T, Op>::type;
  /* A word narrower than a pair (4-byte words of 16-bit floats hold one
   * pair exactly) never happens: the word holds whole lanes. */
  static_assert(sizeof(V) % sizeof(L) == 0, "a word holds whole lanes");
  constexpr int n = sizeof(V) / sizeof(L);
  L la[n], lb[n];
  memcpy(la, &a, sizeof(V));
  memcpy(lb, &b, sizeof(V));
#pragma unroll
  for (int k = 0; k < n; k++)
    la[k] = Op()(la[k], lb[k]);
  memcpy(&a, la, sizeof(V));
  return a;
}

template <class T, class V>
__device__ __forceinline__ V vec_avg(V v, int nranks) {
  constexpr int n = sizeof(V) / sizeof(T);
  T e[n];
  memcpy(e, &v, sizeof(V));
#pragma unroll
  for (int k = 0; k < n; k++)
    e[k] = avg_div(e[k], nranks);
  memcpy(&v, e, sizeof(V));
  return v;
}

/* One element: a op b (or a alone when !BIN), finished for AVG. */
template <class T, int OP, bool BIN>
__device__ __forceinline__ T elem(const T *a, const T *b, size_t i,
                                  int finish) {
  T r = __ldcg(a + i);
  if constexpr (BIN)
    r = typename op_of<OP>::type()(r, __ldcg(b + i));
  if constexpr (OP == RINGCC_AVG)
    if (finish)
      r = avg_div(r, finish);
  return r;
}

/* ---- the streaming loops ------------------------------------------------------ */

#define RCC_CUDA_UNROLL 4

/* Words [0, nvec) of dst (and dst2) from a (op b), strided by the calling
 * threads; RCC_CUDA_UNROLL loads in flight per thread. */
template <class T, int OP, bool BIN, bool TWO, class V>
__device__ __forceinline__ void vec_loop(V *dst, V *dst2, const V *a,
                                         const V *b, size_t nvec, int finish,
                                         size_t tid, size_t nthreads) {
  size_t i = tid;
  for (; i + (RCC_CUDA_UNROLL - 1) * nthreads < nvec;
       i += RCC_CUDA_UNROLL * nthreads) {
    V x[RCC_CUDA_UNROLL], y[RCC_CUDA_UNROLL];
#pragma unroll
    for (int u = 0; u < RCC_CUDA_UNROLL; u++)
      x[u] = ld_vec(a + i + u * nthreads);
    if constexpr (BIN) {
#pragma unroll
      for (int u = 0; u < RCC_CUDA_UNROLL; u++)
        y[u] = ld_vec(b + i + u * nthreads);
    }
#pragma unroll
    for (int u = 0; u < RCC_CUDA_UNROLL; u++) {
      V r = x[u];
      if constexpr (BIN)
        r = vec_op<T, OP, V>(r, y[u]);
      if constexpr (OP == RINGCC_AVG)
        if (finish)
          r = vec_avg<T, V>(r, finish);
      dst[i + u * nthreads] = r;
      if constexpr (TWO)
        dst2[i + u * nthreads] = r;
    }
  }
  for (; i < nvec; i += nthreads) {
    V r = ld_vec(a + i);
    if constexpr (BIN)
      r = vec_op<T, OP, V>(r, ld_vec(b + i));
    if constexpr (OP == RINGCC_AVG)
      if (finish)
        r = vec_avg<T, V>(r, finish);
    dst[i] = r;
    if constexpr (TWO)
      dst2[i] = r;
  }
}

template <class T, int OP, bool BIN, bool TWO>
__device__ __forceinline__ void elem_loop(T *dst, T *dst2, const T *a,
                                          const T *b, size_t from, size_t to,
                                          int finish, size_t tid,
                                          size_t nthreads) {
  for (size_t i = from + tid; i < to; i += nthreads) {
    T r = elem<T, OP, BIN>(a, b, i, finish);
    dst[i] = r;
    if constexpr (TWO)
      dst2[i] = r;
  }
}

/* The words of a split, as V: only instantiated where V holds whole lanes
 * of T (a 16-bit float pair needs 4 bytes: every word here has them). */
template <class T, int OP, bool BIN, bool TWO, class V>
__device__ __forceinline__ void words(T *dst, T *dst2, const T *a, const T *b,
                                      const struct rcc_vec_split &sp,
                                      int finish, size_t tid, size_t nthreads) {
  if constexpr (sizeof(V) % sizeof(T) == 0) {
    size_t h = sp.head;
    vec_loop<T, OP, BIN, TWO, V>((V *)(dst + h), TWO ? (V *)(dst2 + h) : nullptr,
                                 (const V *)(a + h),
                                 BIN ? (const V *)(b + h) : nullptr, sp.nvec,
                                 finish, tid, nthreads);
  }
}

template <class T, int OP, bool BIN, bool TWO>
__device__ __noinline__ void run(T *dst, T *dst2, const T *a, const T *b,
                                 size_t n, int finish, size_t tid,
                                 size_t nthreads) {
  uintptr_t mix = (uintptr_t)dst ^ (uintptr_t)a;
  if (BIN)
    mix |= (uintptr_t)b ^ (uintptr_t)a;
  if (TWO)
    mix |= (uintptr_t)dst2 ^ (uintptr_t)a;
  const struct rcc_vec_split sp = rcc_vec_split(mix, (uintptr_t)a, n, sizeof(T));
  elem_loop<T, OP, BIN, TWO>(dst, dst2, a, b, 0, sp.head, finish, tid,
                             nthreads);
  if (sp.word == 16)
    words<T, OP, BIN, TWO, uint4>(dst, dst2, a, b, sp, finish, tid, nthreads);
  else if (sp.word == 8)
    words<T, OP, BIN, TWO, uint2>(dst, dst2, a, b, sp, finish, tid, nthreads);
  else if (sp.word == 4)
    words<T, OP, BIN, TWO, uint32_t>(dst, dst2, a, b, sp, finish, tid,
                                     nthreads);
  elem_loop<T, OP, BIN, TWO>(dst, dst2, a, b, sp.tail_from, n, finish, tid,
                             nthreads);
}

/*
 * dst[i] = a[i] op b[i] (b == NULL: dst[i] = a[i]), divided by finish when
 * OP is AVG and finish > 0; also into dst2 when not NULL. dst may be a or b
 * exactly. Called by threads tid = 0..nthreads-1 together (a block, or a
 * whole grid).
 */
template <class T, int OP>
__device__ void reduce_run(T *dst, T *dst2, const T *a, const T *b, size_t n,
                           int finish, size_t tid, size_t nthreads) {
  if (b != nullptr) {
    if (dst2 != nullptr)
      run<T, OP, true, true>(dst, dst2, a, b, n, finish, tid, nthreads);
    else
      run<T, OP, true, false>(dst, dst2, a, b, n, finish, tid, nthreads);
  } else if constexpr (OP == RINGCC_AVG) {
    run<T, OP, false, false>(dst, dst2, a, b, n, finish, tid, nthreads);
  }
}

/* ---- copies ----------------------------------------------------------------- */

/* Bytes [0, bytes) of dst (unless dst == src: an in-place copy writes
 * only dst2) and dst2, split as vec_split.h says, the words as W. */
template <class W>
__device__ __forceinline__ void copy_words(char *dst, char *dst2,
                                           const char *src,
                                           const struct rcc_vec_split &sp,
                                           size_t bytes, size_t tid,
                                           size_t nthreads) {
  bool one = dst != src;
  for (size_t i = tid; i < sp.head; i += nthreads) {
    if (one)
      dst[i] = src[i];
    if (dst2)
      dst2[i] = src[i];
  }
  const W *s = (const W *)(src + sp.head);
  W *d = (W *)(dst + sp.head), *d2 = (W *)(dst2 + sp.head);
  size_t i = tid, nword = sp.nvec;
  for (; i + (RCC_CUDA_UNROLL - 1) * nthreads < nword;
       i += RCC_CUDA_UNROLL * nthreads) {
    W x[RCC_CUDA_UNROLL];
#pragma unroll
    for (int u = 0; u < RCC_CUDA_UNROLL; u++)
      x[u] = __ldcg(s + i + u * nthreads);
#pragma unroll
    for (int u = 0; u < RCC_CUDA_UNROLL; u++) {
      if (one)
        d[i + u * nthreads] = x[u];
      if (dst2)
        d2[i + u * nthreads] = x[u];
    }
  }
  for (; i < nword; i += nthreads) {
    W x = __ldcg(s + i);
    if (one)
      d[i] = x;
    if (dst2)
      d2[i] = x;
  }
  for (size_t j = sp.tail_from + tid; j < bytes; j += nthreads) {
    if (one)
      dst[j] = src[j];
    if (dst2)
      dst2[j] = src[j];
  }
}

/* dst <- src (skipped when dst == src) and dst2 <- src (when not NULL). */
__device__ __noinline__ inline void copy_run(char *dst, char *dst2,
                                             const char *src, size_t bytes,
                                             size_t tid, size_t nthreads) {
  if (bytes == 0 || (dst == src && dst2 == nullptr))
    return;
  uintptr_t mix = (uintptr_t)src ^ (uintptr_t)dst;
  if (dst2)
    mix |= (uintptr_t)src ^ (uintptr_t)dst2;
  const struct rcc_vec_split sp = rcc_vec_split(mix, (uintptr_t)src, bytes, 1);
  if (sp.word == 16)
    copy_words<uint4>(dst, dst2, src, sp, bytes, tid, nthreads);
  else if (sp.word == 8)
    copy_words<uint2>(dst, dst2, src, sp, bytes, tid, nthreads);
  else if (sp.word == 4)
    copy_words<uint32_t>(dst, dst2, src, sp, bytes, tid, nthreads);
  else
    copy_words<unsigned char>(dst, dst2, src, sp, bytes, tid, nthreads);
}

} /* namespace rcc */

#endif /* RCC_REDUCE_CUH */
