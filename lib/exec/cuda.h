/*
 * cuda.h - device buffers: the core's interface to the CUDA side (cuda.c,
 * the host glue, and exec_cuda.cu, the kernels), and the records the two
 * share with the kernels.
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

#include "ringcc.h"
#include "proto.h"
#include "schedule.h"
#include "topo.h"

#ifndef RINGCC_HAVE_CUDA
#define RINGCC_HAVE_CUDA 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct ringcc_comm;

/* Host memory the kernels see (cudaHostAlloc, mapped): how the host stops a
 * kernel, and how a kernel reports what went wrong and that it finished. */
struct rcc_cuda_status {
  uint32_t abort;     /* host -> kernels: leave every wait (comm abort) */
  uint32_t code;      /* kernel -> host: first failure, a ringcc_result_t */
  uint32_t done;      /* kernel -> host: seq of the last kernel that ended */
  int32_t coll;       /* the failure: collective (enum rcc_coll) */
  uint64_t seq;       /* ... its sequence number on the communicator */
  uint64_t step;      /* ... the step */
  uint64_t nsteps;
  int32_t peer;       /* ... the peer waited for */
  int32_t waiting_send; /* ... 1: for a free slot; 0: for data */
  uint32_t got_bytes; /* meta mismatch: what arrived */
  uint32_t want_bytes;
  uint32_t got_last;  /* ... and its "last piece" flag */
  uint32_t blocks_done; /* kernel: blocks of the running kernel that ended
                           (the last one reports done and resets it) */
};

/* Everything one collective kernel needs, by value. */
struct rcc_cuda_args {
  struct rcc_plan plan;         /* the call's plan, not split: block c runs
                                   channel c (rcc_plan_channel); plan.ring
                                   and ring_rev point to device memory */
  const void *src;
  void *dst;
  struct rcc_conn *send_conns;  /* device: [set][nranks], sets the device
                                   collective kind's channels, then the
                                   device point-to-point kind */
  struct rcc_conn *recv_conns;
  int32_t coll_channels;        /* channels of the collective kind */
  struct rcc_cuda_status *status; /* device view of the mapped status */
  uint64_t timeout_ns;          /* each wait; 0: none */
  uint64_t seq;                 /* the collective's sequence number */
  uint32_t launch;              /* kernel count, reported back in done */
  int32_t dt;                   /* ringcc_datatype_t */
  int32_t op;                   /* ringcc_op_t */
};

/* exec_cuda.cu: launches the kernel of a->dt, a->op on stream (a
 * cudaStream_t). Returns 0, or a cudaError_t with err filled in. */
int rcc_cuda_launch(const struct rcc_cuda_args *a, void *stream, char *err,
                    size_t errlen);
/* Threads per block; a collective kernel has one block per channel. */
#define RCC_CUDA_THREADS 512

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
 * NVLink, 4 for PCIe peer access, 2 for staging through host memory or the
 * network (the same on every rank). */
int rcc_cuda_channels(const struct ringcc_comm *comm);
/* After the transports connected: makes the device-kind FIFOs usable by
 * kernels (registers staged host FIFOs, uploads the connection tables),
 * logs each edge's path at INFO, and sets comm->device_busy. */
ringcc_result_t rcc_cuda_connect(struct ringcc_comm *comm);
/* Before the transports are torn down: waits for this communicator's
 * kernels, then frees the device side (unregisters the staging FIFOs). */
void rcc_cuda_destroy(struct ringcc_comm *comm);
/* After (the network proxy, stopped by then, reads the status record). */
void rcc_cuda_free(struct ringcc_comm *comm);
/* ringcc_comm_abort: makes every waiting kernel of comm leave. */
void rcc_cuda_abort(struct ringcc_comm *comm);
/* Picks up failures of kernels that ended (a timeout, a mismatch, a CUDA
 * error): records the message and makes the communicator unusable. */
void rcc_cuda_poll(struct ringcc_comm *comm);

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
/* A device copy of bytes at src, ordered on stream, for inputs a schedule
 * would overwrite before reading (in-place alltoall, one-shot allreduce). */
ringcc_result_t rcc_cuda_stage(struct ringcc_comm *comm, const void *src,
                               size_t bytes, void *stream, const void **copy);
/* Enqueues the plan on stream and returns (NCCL semantics). */
ringcc_result_t rcc_exec_cuda(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op,
                              void *stream);


#ifdef __cplusplus
}
#endif
#endif /* RCC_CUDA_H */
