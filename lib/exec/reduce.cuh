/*
 * reduce.cuh - element-wise reductions and copies on the GPU, for the
 * collective kernels (exec_cuda.cu) and the throughput check
 * (test/gpu/reduce_bw.cu): dst[i] = a[i] op b[i].
 *
 * One definition makes every datatype x op: an op is a functor (OpSum,
 * OpProd, OpMin, OpMax) applied to one element, or to a native pair of
 * 16-bit floats (__half2, __nv_bfloat162: __hadd2/__hmul2, one instruction
 * per pair on sm_80+); reduce_run<T, OP> streams 16-byte vectors through it.
 * RCC_CUDA_DATATYPES and RCC_CUDA_OPS are the tables the kernels are
 * instantiated from.
 *
 * Semantics, bit for bit those of the host (lib/reduce.c):
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
 * rewrites must never be served from a stale L1 line. Vectors need a, b and
 * the destinations equally aligned modulo 16; otherwise the loops fall back
 * to the widest common word (copies) or single elements (reductions).
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

/* The unit an op works on inside a 16-byte vector: a native pair of 16-bit
 * floats where the op has a pair instruction, else one element. */
template <class T, class Op> struct lane { using type = T; };
template <class Op> struct lane<__half, Op> {
  using type = typename std::conditional<Op::pairs, __half2, __half>::type;
};
template <class Op> struct lane<__nv_bfloat16, Op> {
  using type =
      typename std::conditional<Op::pairs, __nv_bfloat162, __nv_bfloat16>::type;
};

/* ---- 16-byte vectors -------------------------------------------------------- */

__device__ __forceinline__ uint4 ld_vec(const uint4 *p) { return __ldcg(p); }

template <class T, int OP>
__device__ __forceinline__ uint4 vec_op(uint4 a, uint4 b) {
  using Op = typename op_of<OP>::type;
  using L = typename lane<T, Op>::type;
  constexpr int n = 16 / sizeof(L);
  L la[n], lb[n];
  memcpy(la, &a, 16);
  memcpy(lb, &b, 16);
#pragma unroll
  for (int k = 0; k < n; k++)
    la[k] = Op()(la[k], lb[k]);
  memcpy(&a, la, 16);
  return a;
}

template <class T>
__device__ __forceinline__ uint4 vec_avg(uint4 v, int nranks) {
  constexpr int n = 16 / sizeof(T);
  T e[n];
  memcpy(e, &v, 16);
#pragma unroll
  for (int k = 0; k < n; k++)
    e[k] = avg_div(e[k], nranks);
  memcpy(&v, e, 16);
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

/* Vectors [0, nvec) of dst (and dst2) from a (op b), strided by the
 * calling threads; RCC_CUDA_UNROLL loads in flight per thread. */
template <class T, int OP, bool BIN, bool TWO>
__device__ __forceinline__ void vec_loop(uint4 *dst, uint4 *dst2,
                                         const uint4 *a, const uint4 *b,
                                         size_t nvec, int finish, size_t tid,
                                         size_t nthreads) {
  size_t i = tid;
  for (; i + (RCC_CUDA_UNROLL - 1) * nthreads < nvec;
       i += RCC_CUDA_UNROLL * nthreads) {
    uint4 x[RCC_CUDA_UNROLL], y[RCC_CUDA_UNROLL];
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
      uint4 r = x[u];
      if constexpr (BIN)
        r = vec_op<T, OP>(r, y[u]);
      if constexpr (OP == RINGCC_AVG)
        if (finish)
          r = vec_avg<T>(r, finish);
      dst[i + u * nthreads] = r;
      if constexpr (TWO)
        dst2[i + u * nthreads] = r;
    }
  }
  for (; i < nvec; i += nthreads) {
    uint4 r = ld_vec(a + i);
    if constexpr (BIN)
      r = vec_op<T, OP>(r, ld_vec(b + i));
    if constexpr (OP == RINGCC_AVG)
      if (finish)
        r = vec_avg<T>(r, finish);
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

template <class T, int OP, bool BIN, bool TWO>
__device__ __noinline__ void run(T *dst, T *dst2, const T *a, const T *b, size_t n,
                    int finish, size_t tid, size_t nthreads) {
  constexpr size_t per = 16 / sizeof(T);
  uintptr_t mis = (uintptr_t)a & 15;
  bool same = ((uintptr_t)dst & 15) == mis &&
              (!BIN || ((uintptr_t)b & 15) == mis) &&
              (!TWO || ((uintptr_t)dst2 & 15) == mis);
  if (!same || mis % sizeof(T) != 0) {
    elem_loop<T, OP, BIN, TWO>(dst, dst2, a, b, 0, n, finish, tid, nthreads);
    return;
  }
  size_t head = ((16 - mis) & 15) / sizeof(T);
  head = head < n ? head : n;
  size_t nvec = (n - head) / per, tail = head + nvec * per;
  elem_loop<T, OP, BIN, TWO>(dst, dst2, a, b, 0, head, finish, tid, nthreads);
  vec_loop<T, OP, BIN, TWO>((uint4 *)(dst + head),
                            TWO ? (uint4 *)(dst2 + head) : nullptr,
                            (const uint4 *)(a + head),
                            BIN ? (const uint4 *)(b + head) : nullptr, nvec,
                            finish, tid, nthreads);
  elem_loop<T, OP, BIN, TWO>(dst, dst2, a, b, tail, n, finish, tid, nthreads);
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

/* The widest word W such that dst, dst2 and src agree modulo sizeof(W). */
template <class W>
__device__ __forceinline__ void copy_words(char *dst, char *dst2,
                                           const char *src, size_t bytes,
                                           size_t tid, size_t nthreads) {
  constexpr size_t w = sizeof(W);
  size_t head = (w - ((uintptr_t)src & (w - 1))) & (w - 1);
  head = head < bytes ? head : bytes;
  size_t nword = (bytes - head) / w, tail = head + nword * w;
  bool one = dst != src; /* an in-place copy writes only dst2 */
  for (size_t i = tid; i < head; i += nthreads) {
    if (one)
      dst[i] = src[i];
    if (dst2)
      dst2[i] = src[i];
  }
  const W *s = (const W *)(src + head);
  W *d = (W *)(dst + head), *d2 = (W *)(dst2 + head);
  size_t i = tid;
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
  for (size_t j = tail + tid; j < bytes; j += nthreads) {
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
  uintptr_t m = (uintptr_t)src ^ (uintptr_t)dst;
  if (dst2)
    m |= (uintptr_t)src ^ (uintptr_t)dst2;
  if ((m & 15) == 0)
    copy_words<uint4>(dst, dst2, src, bytes, tid, nthreads);
  else if ((m & 7) == 0)
    copy_words<uint2>(dst, dst2, src, bytes, tid, nthreads);
  else if ((m & 3) == 0)
    copy_words<uint32_t>(dst, dst2, src, bytes, tid, nthreads);
  else
    copy_words<unsigned char>(dst, dst2, src, bytes, tid, nthreads);
}

} /* namespace rcc */

#endif /* RCC_REDUCE_CUH */
