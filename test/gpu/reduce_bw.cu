/*
 * reduce_bw.cu - throughput of the reduction kernels (lib/exec/reduce.cuh, the
 * code the collective kernels run) against a device-to-device copy, on one
 * GPU (needs a GPU; run by scripts/gpu-check.sh).
 *
 * dst = a op b over BYTES-sized buffers moves 3 * BYTES (two reads, one
 * write); cudaMemcpy device-to-device moves 2 * BYTES. Both are reported as
 * bytes moved per second, and the reduction as a percentage of the copy:
 * a reduction that streams at memory bandwidth scores ~100%. The target is
 * >= 90% for co-aligned buffers (16-byte words); rows with buffers that
 * agree only modulo 8 or 4 (8- and 4-byte words) are reported too, without
 * a target. Each kernel's result is spot-checked, so nothing is optimised
 * away.
 *
 * First, a correctness sweep: reduce_run and copy_run for several datatypes
 * and ops, every byte offset 0..15 of a, b and dst (element-aligned) and
 * counts 0..70 plus 127..129, 1000 and 4097 (heads, tails, 16/8/4-byte words and
 * element-only splits, with and without a second destination and the AVG
 * division), every element compared with the host's result.
 *
 *   reduce_bw [MiB]   (buffer size, default 256)
 * Exit status: 0 when the sweep is exact and every 16-byte row meets the
 * target, 1 otherwise.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include <type_traits>

#include "reduce.cuh"

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "reduce_bw: %s: %s\n", #call, cudaGetErrorString(e_));   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define TARGET 0.90
#define ITERS 20
#define THREADS 512

template <class T, int OP>
__global__ void __launch_bounds__(THREADS)
    reduce_kernel(T *dst, const T *a, const T *b, size_t n) {
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  rcc::reduce_run<T, OP>(dst, nullptr, a, b, n, 0, tid,
                         (size_t)gridDim.x * blockDim.x);
}

__global__ void __launch_bounds__(THREADS)
    copy_kernel(char *dst, const char *src, size_t bytes) {
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  rcc::copy_run(dst, nullptr, src, bytes, tid, (size_t)gridDim.x * blockDim.x);
}

static int grid_size() {
  int dev, sms, per_sm = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, reduce_kernel<float, RINGCC_SUM>, THREADS, 0));
  return sms * (per_sm > 0 ? per_sm : 1);
}

/* Seconds per launch of f, averaged over ITERS after a warm-up. */
template <class F> static double time_it(F f) {
  cudaEvent_t t0, t1;
  float ms = 0;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  f();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(t0));
  for (int i = 0; i < ITERS; i++)
    f();
  CHECK(cudaEventRecord(t1));
  CHECK(cudaEventSynchronize(t1));
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  CHECK(cudaGetLastError());
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ms / 1e3 / ITERS;
}

/* Spot check: a = 1, b = 2 everywhere (as bytes of T): sum gives 3. */
template <class T> static bool spot_check_sum(const T *dst, size_t n) {
  T host[4], want;
  float w = 3.0f;
  want = (T)w;
  size_t at[4] = {0, n / 3, n / 2, n - 1};
  for (int i = 0; i < 4; i++)
    CHECK(cudaMemcpy(&host[i], dst + at[i], sizeof(T), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; i++)
    if (memcmp(&host[i], &want, sizeof(T)) != 0)
      return false;
  return true;
}

template <class T> __global__ void fill_kernel(T *p, size_t n, float v) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (T)v;
}

struct row {
  const char *what;
  double gbps;
  bool ok;
  bool target; /* counts against the 90% target */
};

/* ---- the alignment sweep -------------------------------------------------------- */

/* One case: dst (and dst2) <- a op b (b may be absent), n elements at byte
 * offsets into a shared arena; AVG finishes by dividing by `finish`. */
struct sweep_case {
  size_t a, b, d, d2; /* byte offsets into the arena; ~0: absent */
  size_t n;
  int finish;
};
#define ABSENT (~(size_t)0)

template <class T, int OP>
__global__ void sweep_kernel(char *arena, const sweep_case *cases, int ncases) {
  for (int c = blockIdx.x; c < ncases; c += gridDim.x) {
    const sweep_case &k = cases[c];
    T *d2 = k.d2 == ABSENT ? nullptr : (T *)(arena + k.d2);
    const T *b = k.b == ABSENT ? nullptr : (const T *)(arena + k.b);
    rcc::reduce_run<T, OP>((T *)(arena + k.d), d2, (const T *)(arena + k.a), b,
                           k.n, k.finish, threadIdx.x, blockDim.x);
  }
}

__global__ void sweep_copy_kernel(char *arena, const sweep_case *cases,
                                  int ncases) {
  for (int c = blockIdx.x; c < ncases; c += gridDim.x) {
    const sweep_case &k = cases[c];
    rcc::copy_run(arena + k.d, k.d2 == ABSENT ? nullptr : arena + k.d2,
                  arena + k.a, k.n, threadIdx.x, blockDim.x);
  }
}

/* Host reference values: small integers, exact in every type. */
template <class T> static T host_from(int v) {
  if constexpr (std::is_same<T, __half>::value)
    return __float2half_rn((float)v);
  else if constexpr (std::is_same<T, __nv_bfloat16>::value)
    return __float2bfloat16_rn((float)v);
  else
    return (T)v;
}
template <class T> static double host_to(T x) {
  if constexpr (std::is_same<T, __half>::value)
    return (double)__half2float(x);
  else if constexpr (std::is_same<T, __nv_bfloat16>::value)
    return (double)__bfloat162float(x);
  else
    return (double)x;
}
template <class T, int OP> static T host_op(T x, T y) {
  double a = host_to(x), b = host_to(y), r;
  switch (OP) {
  case RINGCC_PROD: r = a * b; break;
  case RINGCC_MIN: r = a < b ? a : b; break;
  case RINGCC_MAX: r = a > b ? a : b; break;
  default: r = a + b; break;
  }
  if constexpr (std::is_integral<T>::value)
    return (T)(long long)r; /* values stay in range: no wrap needed */
  else
    return host_from<T>((int)r);
}
template <class T> static T host_avg(T x, int n) {
  if constexpr (std::is_integral<T>::value)
    return (T)((long long)x / n);
  else if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value)
    return (T)(x / (T)n);
  else
    return host_from<T>(0) /* unused: the sweep averages 32-bit types */;
}

static int in_value(size_t i, int salt, bool is_unsigned) {
  int v = (int)((i * 7 + (size_t)salt * 3) % 9) - 4; /* -4..4 */
  return is_unsigned ? v + 4 : v;
}

/* Runs every case of (T, OP) at once and checks every element; returns the
 * number of cases with a wrong element (the first few are printed). */
template <class T, int OP>
static int sweep(const char *name, bool copy, bool two, int finish,
                 long *ncases_out) {
  const size_t es = sizeof(T);
  const bool uns = std::is_unsigned<T>::value;
  std::vector<size_t> counts;
  for (size_t n = 0; n <= 70; n++)
    counts.push_back(n);
  for (size_t n : {127, 128, 129, 1000, 4097})
    counts.push_back(n);
  std::vector<sweep_case> cases;
  size_t at = 0;
  auto room = [&](size_t bytes) { /* a 64-aligned region per buffer */
    size_t r = at;
    at += (bytes + 16 + 63) & ~(size_t)63;
    return r;
  };
  for (size_t oa = 0; oa < 16; oa += es)
    for (size_t ob = 0; ob < 16; ob += es)
      for (size_t od = 0; od < 16; od += es)
        for (size_t n : counts) {
          if (n > 70 && es == 1 && (oa % 4 || ob % 4 || od % 4))
            continue; /* the long counts at a few alignments suffice */
          sweep_case k;
          size_t bytes = n * es;
          k.a = room(bytes) + oa;
          k.b = copy ? ABSENT : room(bytes) + ob;
          k.d = room(bytes) + od;
          k.d2 = two ? room(bytes) + (od + ob) % 16 / es * es : ABSENT;
          k.n = copy ? bytes : n;
          k.finish = finish;
          cases.push_back(k);
        }
  std::vector<char> host(at, 0);
  for (const sweep_case &k : cases) {
    size_t n = copy ? k.n / es : k.n;
    for (size_t i = 0; i < n; i++) {
      T x = host_from<T>(in_value(i, 1, uns)), y = host_from<T>(in_value(i, 2, uns));
      memcpy(&host[k.a + i * es], &x, es);
      if (k.b != ABSENT)
        memcpy(&host[k.b + i * es], &y, es);
    }
  }
  char *arena;
  sweep_case *dcases;
  CHECK(cudaMalloc(&arena, at));
  CHECK(cudaMalloc(&dcases, cases.size() * sizeof(sweep_case)));
  CHECK(cudaMemcpy(arena, host.data(), at, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dcases, cases.data(), cases.size() * sizeof(sweep_case),
                   cudaMemcpyHostToDevice));
  int grid = (int)(cases.size() < 4096 ? cases.size() : 4096);
  if (copy)
    sweep_copy_kernel<<<grid, 128>>>(arena, dcases, (int)cases.size());
  else
    sweep_kernel<T, OP><<<grid, 128>>>(arena, dcases, (int)cases.size());
  CHECK(cudaGetLastError());
  std::vector<char> got(at);
  CHECK(cudaMemcpy(got.data(), arena, at, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (const sweep_case &k : cases) {
    size_t n = copy ? k.n / es : k.n;
    for (size_t i = 0; i < n; i++) {
      T x, y, want, g, g2;
      memcpy(&x, &host[k.a + i * es], es);
      want = x;
      if (k.b != ABSENT) {
        memcpy(&y, &host[k.b + i * es], es);
        want = host_op<T, OP>(x, y);
      }
      if (OP == RINGCC_AVG && finish)
        want = host_avg<T>(want, finish);
      memcpy(&g, &got[k.d + i * es], es);
      bool wrong = memcmp(&g, &want, es) != 0;
      if (k.d2 != ABSENT) {
        memcpy(&g2, &got[k.d2 + i * es], es);
        wrong |= memcmp(&g2, &want, es) != 0;
      }
      if (wrong) {
        if (bad++ < 5)
          fprintf(stderr, "reduce_bw: sweep %s: a+%zu b+%zu dst+%zu%s n %zu: "
                  "element %zu is %g, want %g\n", name, k.a % 16,
                  k.b == ABSENT ? 0 : k.b % 16, k.d % 16,
                  k.d2 == ABSENT ? "" : " (and dst2)", n, i, host_to(g),
                  host_to(want));
        break;
      }
    }
  }
  cudaFree(arena);
  cudaFree(dcases);
  *ncases_out += (long)cases.size();
  return bad;
}

static int run_sweep(void) {
  long ncases = 0;
  int bad = 0;
  bad += sweep<int8_t, RINGCC_SUM>("int8 sum", false, false, 0, &ncases);
  bad += sweep<uint8_t, RINGCC_MAX>("uint8 max", false, true, 0, &ncases);
  bad += sweep<__half, RINGCC_SUM>("float16 sum", false, false, 0, &ncases);
  bad += sweep<__half, RINGCC_MIN>("float16 min", false, true, 0, &ncases);
  bad += sweep<__nv_bfloat16, RINGCC_PROD>("bfloat16 prod", false, false, 0,
                                           &ncases);
  bad += sweep<int32_t, RINGCC_AVG>("int32 avg /3", false, true, 3, &ncases);
  bad += sweep<float, RINGCC_SUM>("float32 sum", false, true, 0, &ncases);
  bad += sweep<float, RINGCC_AVG>("float32 avg /4", false, false, 4, &ncases);
  bad += sweep<double, RINGCC_MAX>("float64 max", false, false, 0, &ncases);
  bad += sweep<int64_t, RINGCC_PROD>("int64 prod", false, true, 0, &ncases);
  bad += sweep<uint8_t, RINGCC_SUM>("copy", true, false, 0, &ncases);
  bad += sweep<uint8_t, RINGCC_SUM>("copy to two", true, true, 0, &ncases);
  printf("reduce_bw: alignment sweep: %ld cases (offsets 0..15 of every "
         "pointer, counts 0..70, 127..129, 1000, 4097), %d wrong\n", ncases, bad);
  return bad;
}

/* shift: bytes added to b and dst (0: all co-aligned, 16-byte words; 8 or 4:
 * the widest common word is 8 or 4 bytes). */
template <class T, int OP>
static row measure(const char *what, void *dst, void *a, void *b,
                   size_t bytes, int grid, size_t shift = 0) {
  size_t n = bytes / sizeof(T) - (shift ? 16 / sizeof(T) : 0);
  T *tb = (T *)((char *)b + shift), *td = (T *)((char *)dst + shift);
  fill_kernel<T><<<grid, THREADS>>>((T *)a, n, 1.0f);
  fill_kernel<T><<<grid, THREADS>>>(tb, n, 2.0f);
  double s = time_it([&] {
    reduce_kernel<T, OP><<<grid, THREADS>>>(td, (const T *)a, tb, n);
  });
  bool ok = OP != RINGCC_SUM || spot_check_sum((const T *)td, n);
  return {what, 3.0 * (double)(n * sizeof(T)) / s / 1e9, ok, shift == 0};
}

int main(int argc, char **argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "reduce_bw: no GPU\n");
    return 77;
  }
  size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
  int sweep_bad = run_sweep();
  void *a, *b, *d;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMalloc(&d, bytes));
  int grid = grid_size();
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));

  double memcpy_s = time_it([&] {
    CHECK(cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice));
  });
  double memcpy_gbps = 2.0 * (double)bytes / memcpy_s / 1e9;
  double copy_s = time_it([&] {
    copy_kernel<<<grid, THREADS>>>((char *)d, (const char *)a, bytes);
  });
  double copy_gbps = 2.0 * (double)bytes / copy_s / 1e9;

  row rows[] = {
      measure<float, RINGCC_SUM>("float32 sum", d, a, b, bytes, grid),
      measure<float, RINGCC_MAX>("float32 max", d, a, b, bytes, grid),
      measure<double, RINGCC_SUM>("float64 sum", d, a, b, bytes, grid),
      measure<__half, RINGCC_SUM>("float16 sum (__hadd2)", d, a, b, bytes, grid),
      measure<__half, RINGCC_MIN>("float16 min", d, a, b, bytes, grid),
      measure<__nv_bfloat16, RINGCC_SUM>("bfloat16 sum (__hadd2)", d, a, b,
                                         bytes, grid),
      measure<__nv_bfloat16, RINGCC_PROD>("bfloat16 prod (__hmul2)", d, a, b,
                                          bytes, grid),
      measure<int8_t, RINGCC_SUM>("int8 sum", d, a, b, bytes, grid),
      measure<int32_t, RINGCC_PROD>("int32 prod", d, a, b, bytes, grid),
      measure<uint64_t, RINGCC_MIN>("uint64 min", d, a, b, bytes, grid),
      measure<float, RINGCC_SUM>("float32 sum, 8-byte words", d, a, b, bytes,
                                 grid, 8),
      measure<float, RINGCC_SUM>("float32 sum, 4-byte words", d, a, b, bytes,
                                 grid, 4),
      measure<__half, RINGCC_SUM>("float16 sum, 4-byte words", d, a, b, bytes,
                                  grid, 4),
      measure<int8_t, RINGCC_SUM>("int8 sum, 8-byte words", d, a, b, bytes,
                                  grid, 8),
  };
  printf("reduce_bw: %s, %zu MiB buffers, grid %d x %d\n", prop.name,
         bytes >> 20, grid, THREADS);
  printf("  %-30s %10.1f GB/s  (bytes moved: read + write)\n",
         "cudaMemcpy D2D", memcpy_gbps);
  printf("  %-30s %10.1f GB/s  %5.1f%%\n", "copy_run (reduce.cuh)", copy_gbps,
         100.0 * copy_gbps / memcpy_gbps);
  int bad = 0, targeted = 0;
  double worst = 1e9;
  for (const row &r : rows) {
    double pct = r.gbps / memcpy_gbps;
    bool pass = r.ok && (!r.target || pct >= TARGET);
    printf("  %-30s %10.1f GB/s  %5.1f%%  %s%s\n", r.what, r.gbps, 100 * pct,
           !r.target ? (r.ok ? "(no target)" : "") : pass ? "ok" : "BELOW TARGET",
           r.ok ? "" : " WRONG RESULT");
    bad += !pass;
    targeted += r.target;
    if (r.target && pct < worst)
      worst = pct;
  }
  printf("reduce_bw: %d of %d co-aligned rows below %.0f%% of cudaMemcpy D2D "
         "(worst %.1f%%); sweep %s\n", bad, targeted, TARGET * 100,
         100 * worst, sweep_bad ? "WRONG" : "exact");
  bad += sweep_bad;
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  return bad ? 1 : 0;
}
