/*
 * reduce_bw.cu - throughput of the reduction kernels (lib/reduce.cuh, the
 * code the collective kernels run) against a device-to-device copy, on one
 * GPU (needs a GPU; run by scripts/gpu-check.sh).
 *
 * dst = a op b over BYTES-sized buffers moves 3 * BYTES (two reads, one
 * write); cudaMemcpy device-to-device moves 2 * BYTES. Both are reported as
 * bytes moved per second, and the reduction as a percentage of the copy:
 * a reduction that streams at memory bandwidth scores ~100%. The target is
 * >= 90%. Each kernel's result is spot-checked, so nothing is optimised
 * away.
 *
 *   reduce_bw [MiB]   (buffer size, default 256)
 * Exit status: 0 when every row meets the target, 1 otherwise.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

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
};

template <class T, int OP>
static row measure(const char *what, void *dst, void *a, void *b,
                   size_t bytes, int grid) {
  size_t n = bytes / sizeof(T);
  fill_kernel<T><<<grid, THREADS>>>((T *)a, n, 1.0f);
  fill_kernel<T><<<grid, THREADS>>>((T *)b, n, 2.0f);
  double s = time_it([&] {
    reduce_kernel<T, OP><<<grid, THREADS>>>((T *)dst, (const T *)a,
                                            (const T *)b, n);
  });
  bool ok = OP != RINGCC_SUM || spot_check_sum((const T *)dst, n);
  return {what, 3.0 * (double)bytes / s / 1e9, ok};
}

int main(int argc, char **argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "reduce_bw: no GPU\n");
    return 77;
  }
  size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
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
  };
  printf("reduce_bw: %s, %zu MiB buffers, grid %d x %d\n", prop.name,
         bytes >> 20, grid, THREADS);
  printf("  %-26s %10.1f GB/s  (bytes moved: read + write)\n",
         "cudaMemcpy D2D", memcpy_gbps);
  printf("  %-26s %10.1f GB/s  %5.1f%%\n", "copy_run (reduce.cuh)", copy_gbps,
         100.0 * copy_gbps / memcpy_gbps);
  int bad = 0;
  for (const row &r : rows) {
    double pct = r.gbps / memcpy_gbps;
    bool pass = r.ok && pct >= TARGET;
    printf("  %-26s %10.1f GB/s  %5.1f%%  %s%s\n", r.what, r.gbps, 100 * pct,
           pass ? "ok" : "BELOW TARGET", r.ok ? "" : " (WRONG RESULT)");
    bad += !pass;
  }
  printf("reduce_bw: %d of %zu rows below %.0f%% of cudaMemcpy D2D\n", bad,
         sizeof(rows) / sizeof(rows[0]), TARGET * 100);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  return bad ? 1 : 0;
}
