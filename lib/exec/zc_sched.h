/*
 * zc_sched.h - the zero-copy schedule (exec_zc.c): which part of a
 * registered buffer each rank computes, and in what order it visits its
 * peers' buffers. Pure functions of the call's shape, so the executor and
 * the tests (test_registered.c, "sched") use the same code and any other
 * executor that reads and writes peers' buffers in place can share it.
 *
 * This header is C and C++ (a CUDA file may include it: the functions are
 * then host and device functions).
 */
#ifndef RCC_ZC_SCHED_H
#define RCC_ZC_SCHED_H

#include <stddef.h>

#ifdef __CUDACC__
#define RCC_ZC_HD __host__ __device__
#else
#define RCC_ZC_HD
#endif

/* Blocks start at multiples of this many bytes (where the element size
 * divides it), so no two ranks write one cache line. */
#define RCC_ZC_ALIGN 64

/* Block b of parts nearly equal blocks of count elements of esize bytes,
 * cut at RCC_ZC_ALIGN-byte boundaries: [*off, *off + *len) in elements.
 * The blocks b = 0 .. parts-1 are disjoint, in order, and cover
 * [0, count); late ones may be empty (*off = count, *len = 0). */
RCC_ZC_HD static inline void rcc_zc_block(size_t count, size_t esize,
                                          int parts, int b, size_t *off,
                                          size_t *len) {
  size_t align = esize < RCC_ZC_ALIGN ? RCC_ZC_ALIGN / esize : 1;
  size_t per = (count + (size_t)parts - 1) / (size_t)parts;
  per = (per + align - 1) / align * align;
  size_t start = per * (size_t)b < count ? per * (size_t)b : count;
  *off = start;
  *len = count - start < per ? count - start : per;
}

/* The j-th rank (j = 0 .. n-1) that rank me of n visits when it writes
 * into every rank's buffer: itself first, then the next ones in rank
 * order, wrapping; so at each j the n ranks write n different ranks'
 * buffers. */
RCC_ZC_HD static inline int rcc_zc_peer(int me, int j, int n) {
  return (me + j) % n;
}

#endif /* RCC_ZC_SCHED_H */
