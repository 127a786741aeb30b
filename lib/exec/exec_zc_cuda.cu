/*
 * exec_zc_cuda.cu - the zero-copy kernel (kernel.h's rcc_zc_dev_args): the
 * device twin of exec_zc.c, for registered device memory. Each rank's
 * kernel reads and writes its peers' registered buffers where they are
 * (imported on this GPU at registration: registry.c), so an AllReduce moves
 * about 2 S of memory per rank where the FIFO ring moves (6n-4)/n S.
 *
 * The host half of a call is exec_zc.c's: the ranks publish their buffers
 * as (slot, offset) on the host board and check that they make the same
 * call; then each enqueues this kernel (cuda.c's rcc_exec_cuda_zc, the
 * same recipe as the ring's kernels). The kernels synchronise through two
 * counters per rank in device memory (registry.h's rcc_zc_dev_flags:
 * written by their owner's kernels only, read by the peers' at system
 * scope), not through the host board. Call v of a rank (v = its done
 * counter + 1, read by every block at its start; the counters live in
 * memory, so a kernel replayed from a CUDA graph counts like any other):
 *
 *   1. block 0 publishes arrive = v: the stream has reached the call, so
 *      its inputs are final and its outputs free;
 *   2. thread 0 of every block waits until every peer's arrive reached v;
 *   3. the work, on zc_sched.h's schedule (the host's: rcc_zc_block,
 *      rcc_zc_peer), each CUDA block taking its share (rcc_zc_block again,
 *      parts = the grid's blocks):
 *        AllReduce, two-phase: rank r reduces block r of every input in
 *          rank order (peer reads: the reduce-scatter) and writes it into
 *          block r of every output, its own first (peer writes: the
 *          all-gather)
 *        AllReduce, one-shot (out of place, up to RCC_ZC_DEV_ONESHOT_MAX
 *          bytes, decided alike on every rank by exec_zc.c): rank r
 *          reduces the whole of every input into its own output
 *        Reduce-Scatter: block r of every input, reduced into its output
 *        AllGather: its input written into block r of every output;
 *   4. every block fences at system scope; the last block to end
 *      publishes done = v and waits until every peer's done reached v, so
 *      no peer reads this rank's input or writes its output after the
 *      kernel: the stream's next work may.
 *
 * Every element is reduced in rank order, on every rank alike: the same
 * bits everywhere. Waits poll with __nanosleep backoff and leave on an
 * abort, a failure the host learned of, or the deadline, reporting in the
 * status record as the ring's kernels do (exec_cuda.cu); the started/done
 * counts are kept the same way.
 *
 * Compile-tested where there is no GPU; make gpu-check runs it (perf-zc).
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RCC_HD __host__ __device__
#include "kernel.h"
#include "launch.cuh"
#include "reduce.cuh"
#include "schedule.h"
#include "zc_sched.h"

namespace {

__device__ inline uint32_t ld_acquire(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ inline void st_release(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ inline uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Thread 0: waits until every peer's word has reached v (wrap-around
 * compare); 0, or why it left (abort, a failure the host learned of, the
 * deadline), reported in the status record. */
__device__ int wait_all(const struct rcc_zc_dev_args &a, int done_word,
                        uint32_t v, uint64_t deadline) {
  for (int q = 0; q < a.n; q++) {
    if (q == a.me)
      continue;
    unsigned sleep_ns = 32;
    uint32_t *w = done_word ? &a.flags[q]->done : &a.flags[q]->arrive;
    for (uint32_t polls = 1; (int32_t)(ld_acquire(w) - v) < 0; polls++) {
      if (polls % 256 == 0) {
        int why = *(volatile uint32_t *)&a.status->abort
                      ? RINGCC_ERR_ABORTED
                      : (int)*(volatile uint32_t *)&a.status->failed;
        if (why == 0 && deadline && now_ns() > deadline)
          why = RINGCC_ERR_TIMEOUT;
        if (why != 0) {
          struct rcc_cuda_status *st = a.status;
          if (*(volatile uint32_t *)&st->code == 0) {
            st->coll = a.coll;
            st->seq = a.seq;
            st->step = done_word ? 2 : 0;
            st->nsteps = 3;
            st->peer = a.local[q];
            st->waiting_send = 0;
            st->captured = a.captured;
            __threadfence_system();
            st_release(&st->code, (uint32_t)why);
          }
          return why;
        }
      }
      __nanosleep(sleep_ns);
      sleep_ns = sleep_ns < 1024 ? 2 * sleep_ns : sleep_ns;
    }
  }
  return 0;
}

/* Elements [from, to) of the reduction of ins[0..n) (rank order) into
 * every outs[j] (j < nout), 16-byte words where every pointer allows. */
template <class T, int OP>
__device__ void reduce_n(const struct rcc_zc_dev_args &a, const T *const *ins,
                         T *const *outs, int nout, size_t from, size_t to) {
  using Op = typename rcc::op_of<OP>::type;
  const size_t tid = threadIdx.x, nt = blockDim.x;
  const int finish = OP == RINGCC_AVG ? a.nranks : 0;
  uintptr_t mix = 0;
  for (int q = 0; q < a.n; q++)
    mix |= (uintptr_t)(ins[q] + from);
  for (int j = 0; j < nout; j++)
    mix |= (uintptr_t)(outs[j] + from);
  /* 16-byte words where every pointer is 16-byte aligned at from. */
  size_t nvec = (mix & 15) == 0 ? (to - from) * sizeof(T) / 16 : 0, i = tid;
  /* RCC_CUDA_UNROLL words in flight per thread and input. */
  for (; i + (RCC_CUDA_UNROLL - 1) * nt < nvec; i += RCC_CUDA_UNROLL * nt) {
    uint4 r[RCC_CUDA_UNROLL], x[RCC_CUDA_UNROLL];
#pragma unroll
    for (int u = 0; u < RCC_CUDA_UNROLL; u++)
      r[u] = rcc::ld_vec((const uint4 *)(ins[0] + from) + i + u * nt);
    for (int q = 1; q < a.n; q++) {
#pragma unroll
      for (int u = 0; u < RCC_CUDA_UNROLL; u++)
        x[u] = rcc::ld_vec((const uint4 *)(ins[q] + from) + i + u * nt);
#pragma unroll
      for (int u = 0; u < RCC_CUDA_UNROLL; u++)
        r[u] = rcc::vec_op<T, OP, uint4>(r[u], x[u]);
    }
#pragma unroll
    for (int u = 0; u < RCC_CUDA_UNROLL; u++) {
      if constexpr (OP == RINGCC_AVG)
        r[u] = rcc::vec_avg<T, uint4>(r[u], finish);
      for (int j = 0; j < nout; j++)
        ((uint4 *)(outs[j] + from))[i + u * nt] = r[u];
    }
  }
  for (; i < nvec; i += nt) {
    uint4 r = rcc::ld_vec((const uint4 *)(ins[0] + from) + i);
    for (int q = 1; q < a.n; q++)
      r = rcc::vec_op<T, OP, uint4>(
          r, rcc::ld_vec((const uint4 *)(ins[q] + from) + i));
    if constexpr (OP == RINGCC_AVG)
      r = rcc::vec_avg<T, uint4>(r, finish);
    for (int j = 0; j < nout; j++)
      ((uint4 *)(outs[j] + from))[i] = r;
  }
  /* The elements after the words (all of them where unaligned). */
  size_t e0 = from + nvec * 16 / sizeof(T);
  for (size_t i = e0 + tid; i < to; i += nt) {
    T r = __ldcg(ins[0] + i);
    for (int q = 1; q < a.n; q++)
      r = Op()(r, __ldcg(ins[q] + i));
    if constexpr (OP == RINGCC_AVG)
      r = rcc::avg_div(r, finish);
    for (int j = 0; j < nout; j++)
      outs[j][i] = r;
  }
}

/* This CUDA block's share of [off, off + len). */
__device__ inline void share(size_t off, size_t len, size_t esize,
                             size_t *from, size_t *to) {
  size_t o, l;
  rcc_zc_block(len, esize, (int)gridDim.x, (int)blockIdx.x, &o, &l);
  *from = off + o;
  *to = off + o + l;
}

template <class T, int OP>
__device__ void work(const struct rcc_zc_dev_args &a) {
  const T *ins[RCC_ZC_DEV_MAX];
  T *outs[RCC_ZC_DEV_MAX];
  size_t off, len, from, to, count = a.count;
  for (int q = 0; q < a.n; q++)
    ins[q] = (const T *)a.in[q];
  switch (a.coll) {
  case RCC_COLL_ALLREDUCE:
    if (a.one_shot) {
      outs[0] = (T *)a.out[a.me];
      share(0, count, sizeof(T), &from, &to);
      reduce_n<T, OP>(a, ins, outs, 1, from, to);
      return;
    }
    rcc_zc_block((size_t)count, sizeof(T), a.n, a.me, &off, &len);
    for (int j = 0; j < a.n; j++)
      outs[j] = (T *)a.out[rcc_zc_peer(a.me, j, a.n)];
    share(off, len, sizeof(T), &from, &to);
    reduce_n<T, OP>(a, ins, outs, a.n, from, to);
    return;
  case RCC_COLL_REDUCE_SCATTER:
    /* Input q holds n blocks of count; this rank's is block me. */
    for (int q = 0; q < a.n; q++)
      ins[q] += (size_t)a.me * count;
    outs[0] = (T *)a.out[a.me];
    share(0, count, sizeof(T), &from, &to);
    reduce_n<T, OP>(a, ins, outs, 1, from, to);
    return;
  default: { /* AllGather: bytes, the element type does not matter */
    const char *src = (const char *)a.in[a.me];
    size_t bytes = count * sizeof(T), base = (size_t)a.me * bytes;
    share(0, bytes, 1, &from, &to);
    for (int j = 0; j < a.n; j++) {
      char *dst = (char *)a.out[rcc_zc_peer(a.me, j, a.n)] + base;
      if (dst != src)
        rcc::copy_run(dst + from, nullptr, src + from, to - from, threadIdx.x,
                      blockDim.x);
    }
    return;
  }
  }
}

} /* namespace */

template <class T, int OP>
__global__ void __launch_bounds__(RCC_CUDA_THREADS, 1)
    rcc_zc_kernel(const struct rcc_zc_dev_args a) {
  __shared__ uint32_t v;
  __shared__ int err;
  struct rcc_cuda_status *st = a.status;
  if (threadIdx.x == 0) {
    if (atomicAdd(&a.blocks->started, 1u) == 0)
      st_release(&st->started, *(volatile uint32_t *)&st->started + 1);
    uint64_t deadline = a.timeout_ns ? now_ns() + a.timeout_ns : 0;
    v = *(volatile uint32_t *)&a.flags[a.me]->done + 1;
    /* An earlier kernel failed, or the communicator was aborted or lost a
     * rank: nothing to do (the host reports it). */
    err = *(volatile uint32_t *)&st->code != 0 ||
          *(volatile uint32_t *)&st->abort != 0 ||
          *(volatile uint32_t *)&st->failed != 0;
    if (!err && blockIdx.x == 0)
      st_release(&a.flags[a.me]->arrive, v);
    if (!err)
      err = wait_all(a, 0, v, deadline);
  }
  __syncthreads();
  if (!err)
    work<T, OP>(a);
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&a.blocks->done, 1u) == gridDim.x - 1) {
    /* The last block: this rank is done with its peers' buffers; then wait
     * until they are done with its own. A failed block skips both: every
     * peer then leaves by its own deadline or the host's abort. */
    if (*(volatile uint32_t *)&st->code == 0) {
      st_release(&a.flags[a.me]->done, v);
      wait_all(a, 1, v, a.timeout_ns ? now_ns() + a.timeout_ns : 0);
    }
    a.blocks->done = 0;
    a.blocks->started = 0;
    __threadfence_system();
    st_release(&st->done, *(volatile uint32_t *)&st->done + 1);
  }
}

namespace {
typedef void (*zc_kernel_fn)(const struct rcc_zc_dev_args);
#define RCC_ZC_KERNEL_OF(T, e_op) rcc_zc_kernel<T, e_op>,
#define RCC_ZC_KERNEL_ROW(unused, e_dt, T) {RCC_CUDA_OPS(RCC_ZC_KERNEL_OF, T)},
const zc_kernel_fn zc_kernels[RINGCC_NUM_DATATYPES][RINGCC_NUM_OPS] = {
    RCC_CUDA_DATATYPES(RCC_ZC_KERNEL_ROW, ~)};

} /* namespace */

extern "C" int rcc_cuda_zc_launch(const struct rcc_zc_dev_args *a,
                                  unsigned blocks, void *stream, char *err,
                                  size_t errlen) {
  if (a->n < 2 || a->n > RCC_ZC_DEV_MAX) {
    snprintf(err, errlen, "no zero-copy kernel for %d ranks (2 to %d)", a->n,
             RCC_ZC_DEV_MAX);
    return (int)cudaErrorInvalidValue;
  }
  return rcc_launch_of(zc_kernels, "zero-copy kernel", a->dt, a->op, a,
                       blocks, stream, err, errlen);
}

extern "C" int rcc_cuda_zc_preload(char *err, size_t errlen) {
  return rcc_preload_of(zc_kernels, "zero-copy kernel", err, errlen);
}
