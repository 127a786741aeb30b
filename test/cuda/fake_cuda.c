/*
 * fake_cuda.c - a stand-in for the CUDA driver, libcuda.so.1 (built as
 * build/test/libfakecuda.so with that soname) for test_cuda_logic: the
 * context functions gpu.c loads, a thread with or without a current context
 * (fake_cuda_set_context), and counts of what was called, so that a test can
 * see a host-only communicator touch nothing of the driver beyond asking
 * whether the thread has a context.
 *
 * The entry points the CUDA runtime looks up first (cuGetProcAddress,
 * cuDriverGetVersion) are counted as "runtime" and fail, so the runtime
 * reports no usable driver instead of running on the fake.
 */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100,
       CUDA_ERROR_NOT_SUPPORTED = 801 };

static int has_context, context;
static int ctx_queries, inits, retains, pushes, runtime;

EXPORT void fake_cuda_set_context(int on) { has_context = on; }

/* What was called besides cuCtxGetCurrent: cuInit, primary contexts
 * retained, pushes, and the runtime's own lookups. */
EXPORT void fake_cuda_counts(int *queries, int *init, int *retain, int *push,
                             int *runtime_calls) {
  *queries = ctx_queries;
  *init = inits;
  *retain = retains;
  *push = pushes;
  *runtime_calls = runtime;
}

EXPORT int cuInit(unsigned flags) {
  (void)flags;
  inits++;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT int cuCtxGetCurrent(void **ctx) {
  ctx_queries++;
  *ctx = has_context ? &context : NULL;
  return CUDA_SUCCESS;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx) {
  (void)ctx;
  pushes++;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx) {
  *ctx = NULL;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT int cuDeviceGet(int *dev, int ordinal) {
  *dev = ordinal;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  (void)dev;
  retains++;
  *ctx = NULL;
  return CUDA_ERROR_NO_DEVICE;
}

EXPORT int cuGetErrorString(int rc, const char **s) {
  (void)rc;
  *s = "fake CUDA driver";
  return CUDA_SUCCESS;
}

EXPORT int cuDriverGetVersion(int *version) {
  runtime++;
  *version = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT int cuGetProcAddress(const char *symbol, void **fn, int version,
                            unsigned long long flags) {
  (void)symbol, (void)version, (void)flags;
  runtime++;
  *fn = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT int cuGetProcAddress_v2(const char *symbol, void **fn, int version,
                               unsigned long long flags, int *status) {
  (void)symbol, (void)version, (void)flags;
  runtime++;
  *fn = NULL;
  if (status)
    *status = 0;
  return CUDA_ERROR_NOT_SUPPORTED;
}
