/*
 * fake_cuda.c - a stand-in for the CUDA driver, libcuda.so.1 (built as
 * build/test/libfakecuda.so with that soname) for test_cuda_logic: the
 * context functions gpu.c loads, a thread with or without a current context
 * (fake_cuda_set_context), and counts of what was called, so that a test can
 * see a host-only communicator touch nothing of the driver beyond asking
 * whether the thread has a context. Primary contexts (one per device, up to
 * 8) and a per-process context stack behave as the driver's do, so a test
 * can see which devices got a context and what is current afterwards.
 *
 * The entry points the CUDA runtime looks up first (cuGetProcAddress,
 * cuDriverGetVersion) are counted as "runtime" and fail, so the runtime
 * reports no usable driver instead of running on the fake.
 */
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100,
       CUDA_ERROR_NOT_SUPPORTED = 801 };

#define NDEV 8
#define DEPTH 16

static int has_context, context, primary[NDEV];
static int ctx_queries, inits, retains, pushes, runtime;
static unsigned retained; /* bit d: device d's primary context retained */
static void *stack[DEPTH]; /* pushed contexts, above the thread's own */
static int depth;

EXPORT void fake_cuda_set_context(int on) { has_context = on; }

/* Bit d: device d's primary context was retained; *depth_out: contexts
 * pushed and not popped. */
EXPORT unsigned fake_cuda_retained(int *depth_out) {
  *depth_out = depth;
  return retained;
}

/* The context a test's own code would have made current (its "thread's
 * context"), and each device's primary context, to compare with. */
EXPORT void *fake_cuda_thread_context(void) { return &context; }
EXPORT void *fake_cuda_primary(int dev) { return &primary[dev]; }

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
  return CUDA_SUCCESS;
}

EXPORT int cuCtxGetCurrent(void **ctx) {
  ctx_queries++;
  *ctx = depth > 0 ? stack[depth - 1] : has_context ? &context : NULL;
  return CUDA_SUCCESS;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx) {
  pushes++;
  if (depth == DEPTH)
    return CUDA_ERROR_NOT_SUPPORTED;
  stack[depth++] = ctx;
  return CUDA_SUCCESS;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx) {
  if (depth == 0)
    return CUDA_ERROR_NOT_SUPPORTED; /* the thread's own is not ours */
  *ctx = stack[--depth];
  return CUDA_SUCCESS;
}

EXPORT int cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || ordinal >= NDEV)
    return CUDA_ERROR_NO_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

EXPORT int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  retains++;
  if (dev < 0 || dev >= NDEV)
    return CUDA_ERROR_NO_DEVICE;
  retained |= 1u << dev;
  *ctx = &primary[dev];
  return CUDA_SUCCESS;
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
