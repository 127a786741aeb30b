/*
 * mem.h - memory that ranks of one host can map (mem.c): what
 * ringcc_mem_alloc hands out, in one table per process.
 *
 * Host memory is a memfd (a shared segment with no name: nothing is ever
 * left in /dev/shm) mapped here; a peer on the same host maps it by opening
 * /proc/PID/fd/FD (registry.c). Device memory is a cuMem allocation whose
 * shareable handle is a file descriptor, mapped by peers the same way
 * (mem_cuda.c). A block stays in the table while a registration points at
 * it, even once freed: registrations then see it is no longer live, so a
 * later allocation at the same addresses is never mistaken for it.
 */
#ifndef RCC_MEM_H
#define RCC_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct rcc_mem_block {
  char *base;   /* what ringcc_mem_alloc returned */
  size_t bytes; /* usable: the size asked for, rounded up to whole pages */
  int fd;       /* the memfd, or the device allocation's shareable handle */
  int device;   /* -1: host memory; else the GPU */
  void *cuda;   /* device: mem_cuda.c's record of the allocation */
  int live;     /* 0 once ringcc_mem_free freed it (atomic) */
  int refs;     /* registrations pointing at it */
  struct rcc_mem_block *next;
};

/* The live block that holds [p, p + bytes), with a reference taken (give it
 * back with rcc_mem_release), or NULL. */
struct rcc_mem_block *rcc_mem_find(const void *p, size_t bytes);
void rcc_mem_release(struct rcc_mem_block *b);
static inline int rcc_mem_live(const struct rcc_mem_block *b) {
  return __atomic_load_n(&b->live, __ATOMIC_ACQUIRE);
}

/* Device allocations (mem_cuda.c; without CUDA they say UNSUPPORTED).
 * Allocates bytes (already rounded to the allocation granularity by the
 * callee) on device, mapped for it; *fd is a shareable handle a peer opens
 * through /proc and imports. */
ringcc_result_t rcc_cuda_mem_alloc(int device, size_t *bytes, void **ptr,
                                   int *fd, void **state, char *err,
                                   size_t errlen);
void rcc_cuda_mem_free(void *ptr, size_t bytes, void *state);
/* A peer's allocation, from the file descriptor opened here: mapped on this
 * rank's device (for its kernels and copies) at *ptr. */
ringcc_result_t rcc_cuda_mem_import(int device, int fd, size_t bytes,
                                    void **ptr, void **state, char *err,
                                    size_t errlen);
void rcc_cuda_mem_unimport(void *ptr, size_t bytes, void *state);

#endif /* RCC_MEM_H */
