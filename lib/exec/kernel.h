/*
 * kernel.h - what the CUDA executor's kernels (exec_cuda.cu) share with the
 * host side that launches them (cuda.c): the status record in mapped host
 * memory, the arguments of one launch, and the launch itself.
 *
 * This header is C and C++ (exec_cuda.cu includes it).
 */
#ifndef RCC_KERNEL_H
#define RCC_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host memory the kernels see (cudaHostAlloc, mapped): how the host stops a
 * kernel, and how a kernel reports what went wrong, that it started and
 * that it ended. The counters are counts of kernels, kept by the kernels
 * themselves (a kernel replayed from a CUDA graph counts too). Kernels only
 * load and store here (system-scope release/acquire): an atomic
 * read-modify-write on host memory needs host-native atomics
 * (cudaDevAttrHostNativeAtomicSupported), which PCIe GPUs lack; the
 * counts of blocks, the only such atomics, live in device memory
 * (struct rcc_cuda_blocks). */
struct rcc_cuda_status {
  uint32_t abort;     /* host -> kernels: leave every wait (comm abort) */
  uint32_t failed;    /* host -> kernels: leave every wait with this
                         ringcc_result_t - a dead rank, a network error
                         (comm->fail_word points here); 0: none */
  uint32_t code;      /* kernel -> host: first failure, a ringcc_result_t */
  uint32_t started;   /* kernels that started (the first block of each) */
  uint32_t done;      /* kernels that ended (the last block of each) */
  int32_t coll;       /* the failure: collective (enum rcc_coll) */
  uint64_t seq;       /* ... its sequence number on the communicator */
  uint64_t step;      /* ... the step */
  uint64_t nsteps;
  int32_t peer;       /* ... the peer waited for */
  int32_t waiting_send; /* ... 1: for a free slot; 0: for data */
  uint32_t got_bytes; /* meta mismatch: what arrived */
  uint32_t want_bytes;
  uint32_t got_last;  /* ... and its "last piece" flag */
  uint32_t captured;  /* ... the kernel was launched from a CUDA graph */
};

/* Device memory: the blocks of the running kernel that started and ended
 * (atomicAdd by its blocks; the last resets both for the next kernel). */
struct rcc_cuda_blocks {
  uint32_t started;
  uint32_t done;
};

/* Everything one collective kernel needs, by value. Nothing in it changes
 * from one launch to the next of the same call, so a kernel captured into a
 * CUDA graph replays as it was recorded (positions in the FIFOs live in
 * device memory, the counters in the status record). */
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
  struct rcc_cuda_blocks *blocks; /* device memory */
  uint64_t timeout_ns;          /* each wait; 0: none */
  uint64_t seq;                 /* the collective's sequence number */
  uint32_t captured;            /* launched into a CUDA graph capture */
  int32_t dt;                   /* ringcc_datatype_t */
  int32_t op;                   /* ringcc_op_t */
  /* Host side only: where not NULL, the step that launches the kernel
   * launches the zero-copy kernel with these arguments instead (cuda.c's
   * rcc_exec_cuda_zc); the rest of the recipe is the same. */
  const struct rcc_zc_dev_args *zc;
};

/* The zero-copy kernel (exec_zc_cuda.cu) on registered device memory:
 * every local rank's buffers and counters as mapped on this GPU, by index
 * among the ranks of this host (registry.h). */
/* AllReduce out of place up to this many bytes runs one-shot: each rank
 * reduces the whole of every input into its own output. */
#define RCC_ZC_DEV_ONESHOT_MAX ((uint64_t)256 << 10)

struct rcc_zc_dev_flags;

struct rcc_zc_dev_args {
  int32_t n, me;          /* local ranks, this one's index */
  int32_t local[RCC_ZC_DEV_MAX]; /* their ranks (what a failure names) */
  int32_t nranks;         /* AVG divides by it */
  int32_t coll, dt, op;   /* AllReduce, Reduce-Scatter or AllGather */
  int32_t one_shot;       /* AllReduce: one-shot, else two-phase */
  uint64_t count;         /* as in the public call */
  uint64_t seq;           /* the collective's sequence number (reports) */
  uint64_t timeout_ns;    /* each wait; 0: none */
  const void *in[RCC_ZC_DEV_MAX]; /* inputs (this rank's own: its src) */
  void *out[RCC_ZC_DEV_MAX];      /* outputs (this rank's own: its dst) */
  struct rcc_zc_dev_flags *flags[RCC_ZC_DEV_MAX]; /* counters, mapped here */
  struct rcc_cuda_status *status;
  struct rcc_cuda_blocks *blocks;
  uint32_t captured;
};

/* exec_cuda.cu: launches the kernel of a->dt, a->op on stream (a
 * cudaStream_t). Returns 0, or a cudaError_t with err filled in. */
int rcc_cuda_launch(const struct rcc_cuda_args *a, void *stream, char *err,
                    size_t errlen);
/* exec_zc_cuda.cu: launches the zero-copy kernel of a->dt, a->op with
 * blocks blocks on stream. 0, or a cudaError_t with err filled in. */
int rcc_cuda_zc_launch(const struct rcc_zc_dev_args *a, unsigned blocks,
                       void *stream, char *err, size_t errlen);
/* exec_zc_cuda.cu: rcc_cuda_preload for the zero-copy kernels. */
int rcc_cuda_zc_preload(char *err, size_t errlen);
/* exec_cuda.cu: loads every kernel's module into the current context now
 * (cudaFuncGetAttributes), as NCCL does: with lazy loading (CUDA 12's
 * default) a first launch loads it, which waits for the device's running
 * kernels - other ranks' spinning ones among them. 0, or a cudaError_t with
 * err filled in. */
int rcc_cuda_preload(char *err, size_t errlen);
/* Threads per block; a collective kernel has one block per channel. */
#define RCC_CUDA_THREADS 512

#ifdef __cplusplus
}
#endif
#endif /* RCC_KERNEL_H */
