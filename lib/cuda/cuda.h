/*
 * cuda.h - device buffers: the core's interface to the CUDA side (cuda.c,
 * the host glue; the kernels are exec_cuda.cu, and the records the two
 * share are kernel.h).
 *
 * Built with RINGCC_HAVE_CUDA=1 (the Makefile's CUDA=1, the default where
 * nvcc is found), the functions below are real; otherwise cuda.c makes them
 * stubs, and device buffers are RINGCC_ERR_UNSUPPORTED.
 * Either way the library loads and runs host collectives on a machine with
 * no GPU or no driver: the CUDA runtime is linked statically and opens the
 * driver (libcuda.so.1) only when first used.
 *
 * This header is C and C++ (exec_cuda.cu includes it).
 */
#ifndef RCC_CUDA_H
#define RCC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernel.h"
#include "ringcc.h"
#include "schedule.h"
#include "topo.h"

#ifndef RINGCC_HAVE_CUDA
#define RINGCC_HAVE_CUDA 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct ringcc_comm;

/* The core's side. Without CUDA (cuda.c's other half) they are stubs: one
 * GPU-less rank, host FIFOs only, and a non-NULL stream is
 * RINGCC_ERR_UNSUPPORTED. */

/* Init, before the peer infos are exchanged: picks this rank's GPU
 * (config/RINGCC_CUDA_DEVICE, else the current device) and describes it in
 * *me; a machine without GPU or driver is no error (me->device = -1). */
ringcc_result_t rcc_cuda_init(struct ringcc_comm *comm,
                              struct rcc_gpu_info *me);
/* After the exchange: RCC_MAX_CONN_KINDS if every rank has a GPU, else
 * RCC_NUM_CONN_KINDS. */
int rcc_cuda_kinds(const struct ringcc_comm *comm);
/* After the exchange: the channels device collectives want, by the links
 * between this communicator's GPUs: 16 where some same-host pair has
 * NVLink (or shares a GPU), 4 for PCIe peer access, 2 for staging through
 * host memory or the network; where ranks share a GPU, no more than its
 * SMs hold with one block per SM for every rank (the same on every rank). */
int rcc_cuda_channels(const struct ringcc_comm *comm);
/* After the transports connected: makes the device-kind FIFOs usable by
 * kernels (registers staged host FIFOs, uploads the connection tables),
 * logs each edge's path at INFO, and sets comm->kernels_started/done. */
ringcc_result_t rcc_cuda_connect(struct ringcc_comm *comm);
/* Before the transports are torn down: waits for this communicator's
 * kernels, then frees the device side (unregisters the staging FIFOs). */
void rcc_cuda_destroy(struct ringcc_comm *comm);
/* After (the network proxy, stopped by then, reads the status record). */
void rcc_cuda_free(struct ringcc_comm *comm);
/* ringcc_comm_abort: makes every waiting kernel of comm leave. */
void rcc_cuda_abort(struct ringcc_comm *comm);
/* ringcc_comm_revoke: as abort, then waits until comm's kernels ended
 * (the communicator's memory stays: destroy or shrink follows). */
void rcc_cuda_quiesce(struct ringcc_comm *comm);
/* Picks up failures of device collectives (a timeout, a dead peer, a
 * network error, a mismatch, a CUDA error): the first becomes the
 * communicator's sticky failure and last error. Any thread, at any time
 * (ringcc_comm_get_async_error calls it from a framework's watchdog while
 * the owning thread makes calls). */
void rcc_cuda_poll(struct ringcc_comm *comm);
/* The sentence for a failure a kernel reported in st on rank/GPU, into buf
 * (dead: "rank 3 (pid ...) died", for RINGCC_ERR_PEER_FAILED; async: the
 * network error's message; either may be NULL). Pure: the tests give it a
 * status record in plain memory. */
void rcc_cuda_status_message(const struct rcc_cuda_status *st, int rank,
                             int device, const char *dead, const char *async,
                             char *buf, size_t len);

/* ---- sharing one GPU (both builds; pure where they take no comm state) ---- */

/* The most channels a device collective may use where `share` ranks run
 * their kernels on one GPU of `sms` SMs at once (one block per SM each, or a
 * kernel could wait for a peer's block that never gets an SM):
 * RCC_MAX_CHANNELS where nothing is shared or the SMs are unknown. */
int rcc_cuda_channel_cap(int share, int sms);
/* The same for comm's ranks, from their records (RINGCC_NCHANNELS is capped
 * by it as the links' choice is; comm.c). */
int rcc_cuda_channel_limit(const struct ringcc_comm *comm);
/* The hardware queues (work queues of the GPU) a context of this process has,
 * from CUDA_DEVICE_MAX_CONNECTIONS as the driver reads it (env: its value,
 * NULL unset): 8 by default, 1..32. */
int rcc_cuda_hw_queues(const char *env);
/* The most ranks of comm that are threads of one process on one GPU (their
 * kernels, each on its own stream, must each get a hardware queue: two
 * streams on one queue run their kernels one after the other, and a kernel
 * waiting for the other's would wait forever). */
int rcc_cuda_threads_per_gpu(const struct ringcc_comm *comm);
/* 1 when two ranks of comm that are different processes use one GPU (*a,
 * *b: the first such pair): without MPS their contexts time-slice the GPU,
 * and a kernel spinning for its peer holds it while the peer waits for its
 * slice. */
int rcc_cuda_shared_gpu_processes(const struct ringcc_comm *comm, int *a,
                                  int *b);
/* 1 when an MPS control daemon runs: its pipe "control" in pipe_dir
 * (CUDA_MPS_PIPE_DIRECTORY; NULL: its default /tmp/nvidia-mps). */
int rcc_cuda_mps_running(const char *pipe_dir);
/* 1 when comm's device side is refused because processes share a GPU
 * without MPS (the same answer on every rank); why: the sentence. */
int rcc_cuda_shared_refused(const struct ringcc_comm *comm, char *why,
                            size_t len);

/* Where a collective's buffers are. send/recv: the buffers the call reads
 * and writes (NULL where it has none); names as in the error messages.
 * *on_device = 1: device buffers, run with rcc_exec_cuda on stream;
 * 0: host buffers (then stream must be NULL). Mixed locations, memory of
 * another GPU, or a stream with host buffers: INVALID_ARGUMENT naming the
 * argument; a stream where no GPU is usable: UNSUPPORTED. */
ringcc_result_t rcc_cuda_locate(struct ringcc_comm *comm, const char *fn,
                                const void *send, const char *send_name,
                                const void *recv, const char *recv_name,
                                void *stream, int *on_device);
/* "GPU 0 NVIDIA H100 80GB HBM3, PCI 0000:3b:00.0", or "none (why)": a rank's
 * GPU as its all-gathered record says (both builds; ringcc-topo). */
const char *rcc_cuda_gpu_text(const struct rcc_gpu_info *g, char *buf,
                              size_t len);
/* The name of the first of a device call's buffers (NULL: none) that is not
 * aligned to its datatype's esize bytes, or NULL: the kernels load whole
 * elements, and a misaligned one would stop the GPU's context (both
 * builds). */
const char *rcc_cuda_misaligned(const void *send, const char *send_name,
                                const void *recv, const char *recv_name,
                                size_t esize);
/* Enqueues the plan on stream and returns (NCCL semantics). stage_bytes > 0:
 * src is an in-place input the schedule would overwrite before reading all
 * of it (in-place alltoall, one-shot allreduce): a copy of it is made on
 * the stream first - after the communicator's previous collective, which
 * may still be writing it. Inside a CUDA graph capture of stream the
 * collective is captured (rcc_cuda_recipe). */
ringcc_result_t rcc_exec_cuda(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op,
                              void *stream, size_t stage_bytes);

/* Enqueues the zero-copy kernel (kernel.h, exec_zc_cuda.cu) with z's
 * buffers and counters (exec_zc.c fills them; this fills the rest) on
 * stream, blocks CUDA blocks, in the same recipe as rcc_exec_cuda's
 * kernels (no staging). */
ringcc_result_t rcc_exec_cuda_zc(struct ringcc_comm *comm,
                                 struct rcc_zc_dev_args *z, int blocks,
                                 void *stream);

/* The CUDA work of one device collective, in stream order (both builds; the
 * tests check the order without a GPU). */
enum rcc_cuda_step {
  RCC_CUDA_WAIT_LAST,   /* wait for the communicator's previous kernel */
  RCC_CUDA_STAGE_ALLOC, /* cudaMallocAsync the staging copy */
  RCC_CUDA_STAGE_COPY,  /* copy the in-place input into it */
  RCC_CUDA_HOST_KICK,   /* a host node: tell the watchdog a kernel comes */
  RCC_CUDA_KERNEL,      /* the collective's kernel */
  RCC_CUDA_RECORD_LAST, /* record the communicator's event after it */
  RCC_CUDA_STAGE_FREE,  /* cudaFreeAsync the staging copy */
  RCC_CUDA_MAX_STEPS
};
/* Fills steps[] and returns how many. have_last: an earlier kernel of the
 * communicator was enqueued outside a capture; capturing: the stream is
 * being captured into a CUDA graph; stage: an in-place input is copied.
 * Outside a capture the kernel waits for the previous one and records the
 * event the next one waits for (the staging copy comes after the wait: it
 * reads what the previous collective writes). Inside a capture neither (a
 * capture can neither wait for an event recorded outside it nor leave one
 * that is polled later); a host node before the kernel tells the watchdog
 * on every replay instead. */
int rcc_cuda_recipe(int have_last, int capturing, int stage,
                    int steps[RCC_CUDA_MAX_STEPS]);

#ifdef __cplusplus
}
#endif
#endif /* RCC_CUDA_H */
