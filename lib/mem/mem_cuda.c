/*
 * mem_cuda.c - device memory that peers can map (mem.h): cuMemCreate with a
 * POSIX file descriptor as its shareable handle, as NCCL's ncclMemAlloc.
 *
 * The owner keeps the exported descriptor open; a peer on the same host
 * opens it as /proc/PID/fd/FD (registry.c), imports it and maps it on its
 * own device. The driver's cuMem* functions are reached through the
 * runtime's cudaGetDriverEntryPointByVersion, so the library still links
 * the runtime only (statically) and loads where there is no driver.
 *
 * Compile-tested where there is no GPU; make gpu-check exercises it.
 */
#include <string.h>

#include "mem.h"

#if RINGCC_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "error.h"
#include "gpu.h"

struct cu_mem_api {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                      unsigned long long);
  CUresult (*free_va)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *,
                         size_t);
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                          CUmemAllocationGranularity_flags);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle,
                        CUmemAllocationHandleType, unsigned long long);
  CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *,
                        CUmemAllocationHandleType);
  CUresult (*error_string)(CUresult, const char **);
  int ok;
};

static struct cu_mem_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void *entry(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

static void load_api(void) {
  api.create = (CUresult(*)(CUmemGenericAllocationHandle *, size_t,
                            const CUmemAllocationProp *,
                            unsigned long long))entry("cuMemCreate");
  api.release = (CUresult(*)(CUmemGenericAllocationHandle))entry("cuMemRelease");
  api.reserve = (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                             unsigned long long))entry("cuMemAddressReserve");
  api.free_va = (CUresult(*)(CUdeviceptr, size_t))entry("cuMemAddressFree");
  api.map = (CUresult(*)(CUdeviceptr, size_t, size_t,
                         CUmemGenericAllocationHandle,
                         unsigned long long))entry("cuMemMap");
  api.unmap = (CUresult(*)(CUdeviceptr, size_t))entry("cuMemUnmap");
  api.set_access = (CUresult(*)(CUdeviceptr, size_t, const CUmemAccessDesc *,
                                size_t))entry("cuMemSetAccess");
  api.granularity = (CUresult(*)(size_t *, const CUmemAllocationProp *,
                                 CUmemAllocationGranularity_flags))
      entry("cuMemGetAllocationGranularity");
  api.export_fd = (CUresult(*)(void *, CUmemGenericAllocationHandle,
                               CUmemAllocationHandleType,
                               unsigned long long))
      entry("cuMemExportToShareableHandle");
  api.import_fd = (CUresult(*)(CUmemGenericAllocationHandle *, void *,
                               CUmemAllocationHandleType))
      entry("cuMemImportFromShareableHandle");
  api.error_string = (CUresult(*)(CUresult, const char **))entry("cuGetErrorString");
  api.ok = api.create && api.release && api.reserve && api.free_va &&
           api.map && api.unmap && api.set_access && api.granularity &&
           api.export_fd && api.import_fd;
}

struct cu_mem {
  CUmemGenericAllocationHandle handle;
  int device; /* the GPU it is mapped on */
  void *ptr;  /* where, and how much: set when freed (deferred) */
  size_t bytes;
};

static ringcc_result_t cu_failed(char *err, size_t errlen, const char *what,
                                 CUresult e) {
  const char *why = "unknown error";
  if (api.error_string)
    api.error_string(e, &why);
  return rcc_errf(err, errlen, RINGCC_ERR_CUDA, "%s failed: %s (%d)", what,
                  why, (int)e);
}

/* Makes dev's primary context current for the driver calls (gpu.c: pushed,
 * and popped by leave(), so a thread that had no context has none after
 * and no other GPU gets one). */
static ringcc_result_t enter(int dev, struct rcc_gpu_scope *scope, char *err,
                             size_t errlen) {
  char why[160];
  pthread_once(&api_once, load_api);
  if (!api.ok)
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "the CUDA driver has no cuMem* functions (a driver for "
                    "CUDA 12 or newer is needed)");
  if (rcc_gpu_enter(dev, scope, why, sizeof(why)) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_CUDA, "GPU %d: %s", dev, why);
  return RINGCC_SUCCESS;
}

static void leave(struct rcc_gpu_scope *scope) { rcc_gpu_leave(scope); }

/* Maps handle at a new address range of bytes on dev, read-write. */
static ringcc_result_t map_on(int dev, CUmemGenericAllocationHandle h,
                              size_t bytes, size_t align, void **ptr,
                              char *err, size_t errlen) {
  CUdeviceptr va = 0;
  CUresult e = api.reserve(&va, bytes, align, 0, 0);
  if (e != CUDA_SUCCESS)
    return cu_failed(err, errlen, "cuMemAddressReserve", e);
  e = api.map(va, bytes, 0, h, 0);
  if (e != CUDA_SUCCESS) {
    api.free_va(va, bytes);
    return cu_failed(err, errlen, "cuMemMap", e);
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof(access));
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  e = api.set_access(va, bytes, &access, 1);
  if (e != CUDA_SUCCESS) {
    api.unmap(va, bytes);
    api.free_va(va, bytes);
    return cu_failed(err, errlen, "cuMemSetAccess", e);
  }
  *ptr = (void *)(uintptr_t)va;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_cuda_mem_alloc(int device, size_t *bytes, void **ptr,
                                   int *fd, void **state, char *err,
                                   size_t errlen) {
  struct rcc_gpu_scope scope;
  ringcc_result_t r = enter(device, &scope, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  struct cu_mem *m = calloc(1, sizeof(*m));
  if (m != NULL)
    m->device = device;
  CUresult e = api.granularity(&gran, &prop,
                               CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (m == NULL)
    r = rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
  else if (e != CUDA_SUCCESS)
    r = cu_failed(err, errlen, "cuMemGetAllocationGranularity", e);
  if (r == RINGCC_SUCCESS) {
    *bytes = (*bytes + gran - 1) / gran * gran;
    if ((e = api.create(&m->handle, *bytes, &prop, 0)) != CUDA_SUCCESS)
      r = cu_failed(err, errlen, "cuMemCreate", e);
    else if ((r = map_on(device, m->handle, *bytes, gran, ptr, err,
                         errlen)) != RINGCC_SUCCESS)
      api.release(m->handle);
  }
  if (r == RINGCC_SUCCESS) {
    int shared = -1;
    e = api.export_fd(&shared, m->handle,
                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    cudaError_t z = e == CUDA_SUCCESS ? cudaMemset(*ptr, 0, *bytes)
                                      : cudaSuccess;
    if (e != CUDA_SUCCESS || z != cudaSuccess) {
      r = e != CUDA_SUCCESS
              ? cu_failed(err, errlen, "cuMemExportToShareableHandle", e)
              : rcc_errf(err, errlen, RINGCC_ERR_CUDA, "cudaMemset: %s",
                         cudaGetErrorString(z));
      api.unmap((CUdeviceptr)(uintptr_t)*ptr, *bytes);
      api.free_va((CUdeviceptr)(uintptr_t)*ptr, *bytes);
      api.release(m->handle);
    }
    *fd = shared;
  }
  leave(&scope);
  if (r != RINGCC_SUCCESS) {
    free(m);
    *ptr = NULL;
    return r;
  }
  *state = m;
  return RINGCC_SUCCESS;
}

/* Unmaps and releases a block, its device current (rcc_gpu_free_when_quiet). */
static void unmap_now(void *arg) {
  struct cu_mem *m = arg;
  api.unmap((CUdeviceptr)(uintptr_t)m->ptr, m->bytes);
  api.free_va((CUdeviceptr)(uintptr_t)m->ptr, m->bytes);
  api.release(m->handle);
  free(m);
}

void rcc_cuda_mem_free(void *ptr, size_t bytes, void *state) {
  struct cu_mem *m = state;
  if (m == NULL)
    return;
  m->ptr = ptr;
  m->bytes = bytes;
  /* No kernel of the library may still use it: unmapped when none is
   * pending (gpu.h), never with cudaDeviceSynchronize, which would also
   * wait for other ranks' kernels that may be waiting for this thread. */
  rcc_gpu_free_when_quiet(m->device, unmap_now, m);
  rcc_gpu_sweep();
}

ringcc_result_t rcc_cuda_mem_import(int device, int fd, size_t bytes,
                                    void **ptr, void **state, char *err,
                                    size_t errlen) {
  struct rcc_gpu_scope scope;
  ringcc_result_t r = enter(device, &scope, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  struct cu_mem *m = calloc(1, sizeof(*m));
  if (m != NULL)
    m->device = device;
  CUresult e = CUDA_SUCCESS;
  if (m == NULL)
    r = rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
  else if ((e = api.import_fd(&m->handle, (void *)(uintptr_t)fd,
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) !=
           CUDA_SUCCESS)
    r = cu_failed(err, errlen, "cuMemImportFromShareableHandle", e);
  else if ((r = map_on(device, m->handle, bytes, 0, ptr, err, errlen)) !=
           RINGCC_SUCCESS)
    api.release(m->handle);
  leave(&scope);
  if (r != RINGCC_SUCCESS) {
    free(m);
    return r;
  }
  *state = m;
  return RINGCC_SUCCESS;
}

void rcc_cuda_mem_unimport(void *ptr, size_t bytes, void *state) {
  rcc_cuda_mem_free(ptr, bytes, state);
}

#else /* !RINGCC_HAVE_CUDA ---------------------------------------------------- */

#include "error.h"

ringcc_result_t rcc_cuda_mem_alloc(int device, size_t *bytes, void **ptr,
                                   int *fd, void **state, char *err,
                                   size_t errlen) {
  (void)device, (void)bytes, (void)fd, (void)state;
  *ptr = NULL;
  return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                  "device memory needs a build with CUDA (CUDA=1)");
}

void rcc_cuda_mem_free(void *ptr, size_t bytes, void *state) {
  (void)ptr, (void)bytes, (void)state;
}

ringcc_result_t rcc_cuda_mem_import(int device, int fd, size_t bytes,
                                    void **ptr, void **state, char *err,
                                    size_t errlen) {
  (void)device, (void)fd, (void)bytes, (void)state;
  *ptr = NULL;
  return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                  "device memory needs a build with CUDA (CUDA=1)");
}

void rcc_cuda_mem_unimport(void *ptr, size_t bytes, void *state) {
  (void)ptr, (void)bytes, (void)state;
}

#endif /* RINGCC_HAVE_CUDA */
