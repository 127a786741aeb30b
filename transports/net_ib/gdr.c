/*
 * gdr.c - GPUDirect RDMA for the verbs plugin: the CUDA driver through
 * dlopen (absent: no GDR), whether this process can register GPU memory with
 * the NIC (DMA-BUF, else nvidia-peermem) and the registration itself.
 */
#include "ib.h"

/* The CUDA driver's functions GPUDirect RDMA needs (ib.h). */
struct ib_cuda rcc_ib_cuda = {.once = PTHREAD_ONCE_INIT};

static void cu_load_once(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *f[5];
  static const char *const names[5] = {
      "cuInit", "cuPointerGetAttribute", "cuMemGetHandleForAddressRange",
      "cuDeviceGetByPCIBusId", "cuDeviceGetAttribute"};
  if (lib == NULL)
    return;
  for (int i = 0; i < 5; i++)
    f[i] = dlsym(lib, names[i]);
  if (f[0] == NULL || f[1] == NULL) {
    dlclose(lib);
    return;
  }
  memcpy(&rcc_ib_cuda.init, &f[0], sizeof(void *));
  memcpy(&rcc_ib_cuda.pointer_attr, &f[1], sizeof(void *));
  memcpy(&rcc_ib_cuda.range_handle, &f[2], sizeof(void *));
  memcpy(&rcc_ib_cuda.device_by_pci, &f[3], sizeof(void *));
  memcpy(&rcc_ib_cuda.device_attr, &f[4], sizeof(void *));
  if (rcc_ib_cuda.init(0) != 0) {
    dlclose(lib);
    return;
  }
  rcc_ib_cuda.lib = lib;
}

static int cu_loaded(void) {
  pthread_once(&rcc_ib_cuda.once, cu_load_once);
  return rcc_ib_cuda.lib != NULL;
}

/* 1 if p is GPU memory (cudaMalloc, not managed or host memory). */
int rcc_ib_is_device_ptr(const void *p) {
  unsigned type = 0;
  if (p == NULL || !cu_loaded() ||
      rcc_ib_cuda.pointer_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                        (cu_ptr)(uintptr_t)p) != 0)
    return 0;
  return type == CU_MEMORYTYPE_DEVICE;
}

uint64_t rcc_ib_cu_buffer_id(const void *p) {
  unsigned long long id = 0;
  if (!cu_loaded() || rcc_ib_cuda.pointer_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                        (cu_ptr)(uintptr_t)p) != 0)
    return 0;
  return id;
}

/* How this process can register GPU memory with the NIC: "DMA-BUF",
 * "nvidia-peermem", or NULL with the reason in why. gpu: a CUDA device
 * index, or -1 for any. */
static const char *gdr_mechanism(int gpu, char *why, size_t len) {
  if (!cu_loaded()) {
    snprintf(why, len, "the CUDA driver (libcuda.so.1) is not loadable");
    return NULL;
  }
  int dmabuf = 0;
  if (IBV->reg_dmabuf_mr != NULL && rcc_ib_cuda.range_handle != NULL &&
      rcc_ib_cuda.device_attr != NULL && gpu >= 0 &&
      rcc_ib_cuda.device_attr(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, gpu) != 0)
    dmabuf = 0;
  if (dmabuf)
    return "DMA-BUF";
  struct stat st;
  if (stat("/sys/module/nvidia_peermem", &st) == 0 ||
      stat("/sys/kernel/mm/memory_peers/nv_mem/version", &st) == 0 ||
      stat("/sys/module/nv_peer_mem", &st) == 0)
    return "nvidia-peermem";
  snprintf(why, len, "neither DMA-BUF (%s) nor the nvidia-peermem module is "
                     "available",
           IBV->reg_dmabuf_mr == NULL ? "libibverbs has no ibv_reg_dmabuf_mr"
           : rcc_ib_cuda.range_handle == NULL
               ? "the CUDA driver has no cuMemGetHandleForAddressRange"
               : "the GPU or its driver does not support it");
  return NULL;
}

int rcc_ib_gdr(const char *gpu_pci, char *why, size_t len) {
  char sys[128], gpu[PATH_MAX], mwhy[200];
  int gnuma, cudev = -1;
  if (!rcc_ib_state.tried || rcc_ib_state.result != RINGCC_SUCCESS) {
    snprintf(why, len, "NET/IB is not in use");
    return 0;
  }
  if (rcc_ib_state.set.gdr_disable) {
    snprintf(why, len, "RINGCC_NET_GDR_DISABLE=1");
    return 0;
  }
  snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s", gpu_pci);
  rcc_ib_pci_of(sys, gpu, &gnuma);
  int dist = rcc_ib_pci_distance(gpu, rcc_ib_state.dev.pci, gnuma, rcc_ib_state.dev.numa);
  if (dist > rcc_ib_state.set.gdr_level) {
    snprintf(why, len, "%s is %s from GPU %s%s, beyond RINGCC_NET_GDR_LEVEL "
             "%s", rcc_ib_state.dev.label, rcc_ib_distance_name(dist), gpu_pci,
             rcc_ib_state.dev.pci[0] ? "" : " (it has no PCI path: a software NIC?)",
             rcc_ib_distance_name(rcc_ib_state.set.gdr_level));
    return 0;
  }
  if (cu_loaded() && rcc_ib_cuda.device_by_pci != NULL)
    rcc_ib_cuda.device_by_pci(&cudev, gpu_pci);
  const char *how = gdr_mechanism(cudev, mwhy, sizeof(mwhy));
  if (how == NULL) {
    snprintf(why, len, "%s", mwhy);
    return 0;
  }
  snprintf(why, len, "GPUDirect RDMA through %s, %s is %s from GPU %s", how,
           rcc_ib_state.dev.label, rcc_ib_distance_name(dist), gpu_pci);
  return 1;
}
/* GPU memory: DMA-BUF if it works, else through nvidia-peermem. */
struct ibv_mr *rcc_ib_reg_device(void *p, size_t bytes, const char **how,
                                 char *why, size_t whylen) {
  struct ibv_mr *mr = NULL;
  char dmabuf_why[96] = "";
  if (IBV->reg_dmabuf_mr != NULL && rcc_ib_cuda.range_handle != NULL) {
    cu_ptr start = 0;
    size_t size = 0;
    uintptr_t a = (uintptr_t)p, base = a & ~(uintptr_t)4095;
    uintptr_t end = (a + bytes + 4095) & ~(uintptr_t)4095;
    if (rcc_ib_cuda.pointer_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                          (cu_ptr)a) == 0 &&
        rcc_ib_cuda.pointer_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (cu_ptr)a) ==
            0) {
      if (base < start)
        base = (uintptr_t)start;
      if (end > start + size)
        end = (uintptr_t)(start + size);
    }
    int fd = -1;
    cu_result cr = rcc_ib_cuda.range_handle(&fd, (cu_ptr)base, end - base,
                                     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (cr == 0 && fd >= 0) {
      mr = IBV->reg_dmabuf_mr(rcc_ib_state.dev.pd, a - base, bytes, a, fd, ACCESS_ALL);
      int e = errno;
      close(fd);
      if (mr != NULL) {
        *how = "DMA-BUF";
        return mr;
      }
      snprintf(dmabuf_why, sizeof(dmabuf_why), "ibv_reg_dmabuf_mr: %s",
               strerror(e));
    } else {
      snprintf(dmabuf_why, sizeof(dmabuf_why),
               "cuMemGetHandleForAddressRange: CUDA error %d", cr);
    }
  }
  mr = IBV->reg_mr(rcc_ib_state.dev.pd, p, bytes, ACCESS_ALL);
  if (mr != NULL) {
    *how = "nvidia-peermem";
    return mr;
  }
  int e = errno;
  snprintf(why, whylen, "%s%sibv_reg_mr of GPU memory (nvidia-peermem): %s",
           dmabuf_why, dmabuf_why[0] ? "; " : "", strerror(e));
  errno = e;
  return NULL;
}
