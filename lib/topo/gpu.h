/*
 * gpu.h - the process's GPUs as the layers above see them (gpu.c):
 *
 *  - entering a GPU for some CUDA calls and leaving the calling thread as it
 *    was: the GPU's primary context is pushed and popped with the driver's
 *    context stack, so a thread that had no context has none afterwards and
 *    no other GPU is touched (cudaSetDevice to "restore" device 0 would
 *    create a context on GPU 0 in every process);
 *  - whether the calling thread uses CUDA at all (a current context);
 *  - the driver against the runtime: which driver a build's CUDA runtime
 *    needs, and the sentence that says so when the one present is older;
 *  - NVML, loaded once per process (each query is an nvmlInit/nvmlShutdown
 *    pair; NVML counts them): the other GPUs of the node by PCI bus id, with
 *    CUDA_VISIBLE_DEVICES or not, whether each pair has P2P (and why not),
 *    NVLink, and how they hang off the PCIe tree.
 *
 * The driver (libcuda.so.1) and NVML (libnvidia-ml.so.1) are opened with
 * dlopen, so the library loads where neither exists. Without CUDA
 * (RINGCC_HAVE_CUDA 0) every function says "no GPU".
 */
#ifndef RCC_GPU_H
#define RCC_GPU_H

#include <stddef.h>
#include <stdint.h>

struct rcc_gpu_info;

/* 1: the calling thread has a current CUDA context (it uses CUDA); 0: it
 * has none, or this process has not started the CUDA driver. */
int rcc_gpu_thread_has_context(void);

/* A GPU entered by rcc_gpu_enter, to leave with rcc_gpu_leave. */
struct rcc_gpu_scope {
  int pushed; /* 1: our context was pushed and must be popped */
};

/* Makes device (a CUDA runtime index of this process) current for the
 * calling thread through its primary context (retained once per process).
 * 0, or -1 with why[] filled ("cuDevicePrimaryCtxRetain: out of memory"). */
int rcc_gpu_enter(int device, struct rcc_gpu_scope *scope, char *why,
                  size_t whylen);
/* Leaves the thread with the context it had before rcc_gpu_enter. */
void rcc_gpu_leave(struct rcc_gpu_scope *scope);

/* A GPU is present on this machine (/dev/nvidia0.. or the driver's list in
 * /proc), whether or not CUDA can use it. */
int rcc_gpu_present(void);

/* The oldest NVIDIA driver branch a CUDA runtime of this version (e.g.
 * 13000, as cudaRuntimeGetVersion gives it) runs on with minor-version
 * compatibility: 580 for CUDA 13.x, 525 for 12.x, 450 for 11.x; 0 unknown. */
int rcc_gpu_min_driver_branch(int runtime_version);
/* The sentence for a GPU whose driver is too old: the runtime version and
 * the driver branch it needs, the driver's CUDA version (driver_version as
 * cudaDriverGetVersion gives it; 0: none) and release (e.g. "535.104.05";
 * NULL or "": unknown), and what to do. */
void rcc_gpu_driver_message(int runtime_version, int driver_version,
                            const char *driver_release, char *buf,
                            size_t len);
/* The NVIDIA driver release this machine runs ("535.104.05"), from
 * /proc/driver/nvidia/version; "" if unknown. */
void rcc_gpu_driver_release(char *buf, size_t len);

/* NVML's view of the node from the GPU at PCI bus id my_bus ("0000:3b:00.0"):
 * fills me->name, and for every other GPU of the node (all of them, whatever
 * this process sees) its bus id, P2P (read and write both OK both ways),
 * NVLink, the first failing P2P status (RCC_NVML_P2P_*) and the PCIe level
 * that joins the two (RCC_TOPO_LEVEL_*). 1 if NVML answered, else 0 (me is
 * left as it was). */
int rcc_gpu_nvml_probe(const char *my_bus, struct rcc_gpu_info *me);

/* 1 when this process has loaded the CUDA driver (libcuda.so.1): a context
 * may exist; 0: none can, and settings the driver reads when it creates one
 * (CUDA_DEVICE_MAX_CONNECTIONS) still take effect if set now. */
int rcc_gpu_driver_loaded(void);

/* ---- frees that never synchronize the device ----------------------------------
 * cudaFree, cudaDeviceSynchronize and the like wait for every kernel of the
 * process on the device, the spinning kernels of other ranks (threads of
 * this process) included, which may wait for this thread: a deadlock. So
 * the library's kernels are tracked by their communicators' "last kernel"
 * events (cuda.c), and memory that only a device-wide free can release is
 * freed when none of them is pending: at once if so, else at a later sweep
 * (every communicator's init and destroy, and every free, sweep). */

/* Tracks event (a cudaEvent_t) of device until rcc_gpu_untrack. */
void rcc_gpu_track(int device, void *event);
void rcc_gpu_untrack(void *event);
/* 1 when no tracked event of device (every device: -1) is pending. */
int rcc_gpu_quiet(int device);
/* Runs fn(arg) with device current (device -1: as the thread is) now if the
 * device is quiet, else at the first sweep that finds it so. */
void rcc_gpu_free_when_quiet(int device, void (*fn)(void *arg), void *arg);
/* Runs the deferred frees whose device is quiet now; returns how many are
 * left. */
int rcc_gpu_sweep(void);
/* The tests' stand-in for cudaEventQuery (1: pending); NULL: the real one. */
void rcc_gpu_set_event_query(int (*pending)(void *event));

/* NUMA node of a PCI device ("0000:3b:00.0"), from sysfs; -1 unknown. */
int rcc_gpu_pci_numa(const char *bus);

#endif /* RCC_GPU_H */
