/*
 * launch.cuh - the host side the kernel files (exec_cuda.cu,
 * exec_zc_cuda.cu) share: each has a table of its kernel's instances by
 * datatype and op (table[dt][op], in enum order; NULL where there is none),
 * launched and preloaded here.
 */
#ifndef RCC_LAUNCH_CUH
#define RCC_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>

#include "kernel.h"
#include "ringcc.h"

/* Launches table[dt][op](*arg) with blocks blocks (at least 1) of
 * RCC_CUDA_THREADS on stream. 0, or a cudaError_t with err filled in
 * (what: the kernel, as the message names it). */
template <class Fn>
inline int rcc_launch_of(Fn const (&table)[RINGCC_NUM_DATATYPES][RINGCC_NUM_OPS],
                         const char *what, int dt, int op, const void *arg,
                         unsigned blocks, void *stream, char *err,
                         size_t errlen) {
  if (dt < 0 || dt >= RINGCC_NUM_DATATYPES || op < 0 ||
      op >= RINGCC_NUM_OPS || table[dt][op] == NULL) {
    snprintf(err, errlen, "no %s for datatype %d, op %d", what, dt, op);
    return (int)cudaErrorInvalidValue;
  }
  void *args[] = {(void *)arg};
  cudaError_t e = cudaLaunchKernel((const void *)table[dt][op],
                                   dim3(blocks > 1 ? blocks : 1),
                                   dim3(RCC_CUDA_THREADS), args, 0,
                                   (cudaStream_t)stream);
  if (e != cudaSuccess)
    snprintf(err, errlen, "cudaLaunchKernel: %s (%s)", cudaGetErrorString(e),
             cudaGetErrorName(e));
  return (int)e;
}

/* Loads every instance's module now (cudaFuncGetAttributes; kernel.h's
 * rcc_cuda_preload says why). 0, or a cudaError_t with err filled in. */
template <class Fn>
inline int rcc_preload_of(Fn const (&table)[RINGCC_NUM_DATATYPES][RINGCC_NUM_OPS],
                          const char *what, char *err, size_t errlen) {
  for (int dt = 0; dt < RINGCC_NUM_DATATYPES; dt++)
    for (int op = 0; op < RINGCC_NUM_OPS; op++) {
      struct cudaFuncAttributes attr;
      if (table[dt][op] == NULL)
        continue;
      cudaError_t e = cudaFuncGetAttributes(&attr, (const void *)table[dt][op]);
      if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaFuncGetAttributes (%s, datatype %d, op "
                 "%d): %s (%s)", what, dt, op, cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return (int)e;
      }
    }
  return 0;
}

#endif /* RCC_LAUNCH_CUH */
