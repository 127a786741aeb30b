/*
 * exec_cuda.cu - runs a collective's schedule in a CUDA kernel, for device
 * buffers: the device twin of exec_host.c.
 *
 * One kernel per collective call, enqueued on the caller's stream
 * (cuda.c), with one block of RCC_CUDA_THREADS threads per channel: block c
 * plans channel c of the call (rcc_plan_channel, rcc_plan_build: its share
 * of the data, its own FIFOs, the ring the other way round for odd c), so
 * as many SMs as channels drive the links at once. Each block walks the
 * same schedule as the host executor - the plan and step functions of
 * every schedule file on the list RCC_SCHEDULES (schedule.h) are #included
 * below and compiled for the device - and drives the same FIFO protocol,
 * proto.h, with device hooks:
 *
 *   RCC_LOAD_ACQUIRE    ld.acquire.sys   (counters live in peer GPU memory or
 *   RCC_STORE_RELEASE   st.release.sys    in host memory: system scope)
 *   RCC_PROTO_WAIT      spin on the counter with __nanosleep backoff; every
 *                       few hundred polls check the host-mapped abort flag,
 *                       the failure word (a dead rank or a network error
 *                       this rank learned of: status.failed) and the
 *                       deadline (%globaltimer); returns RINGCC_ERR_ABORTED,
 *                       the failure (RINGCC_ERR_PEER_FAILED, ...) or
 *                       RINGCC_ERR_TIMEOUT
 *   RCC_PROTO_WAKE      nothing: device waiters spin, and the network proxy
 *                       polls while a kernel runs (comm->kernels_started)
 *
 * A step: thread 0 computes it (rcc_plan_step), waits for the incoming slot
 * and/or a free outgoing slot, and checks the slot's meta word; a barrier;
 * every thread moves or reduces its share of the data with 16-byte vectors
 * (reduce.cuh); every thread fences its writes at system scope, a barrier,
 * and thread 0 alone publishes the counters. Only thread 0 touches the FIFO
 * positions (struct rcc_conn in device memory), so a step is one
 * producer/consumer handshake however many threads move the data.
 *
 * A failure (timeout, abort, a dead peer, a peer that sends another size) is
 * written to the mapped status record for the host (cuda.c), and the block
 * ends; later kernels of the communicator see it and end at once. The first
 * block to start counts the kernel started, the last to end counts it done
 * (counts, not launch numbers: a kernel replayed from a CUDA graph counts
 * like any other).
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define RCC_HD __host__ __device__
/* The headers the schedule files include, and this file's. */
#include "algorithms.h"
#include "fold.h"
#include "kernel.h"
#include "launch.cuh"
#include "reduce.cuh"

/* ---- the schedules, compiled for the device ------------------------------- */
/* Every file of the list RCC_SCHEDULES (schedule.h), included in list order:
 * the plan and step functions each defines (RCC_HD) become device functions
 * too, and schedule.h's rcc_plan_build and rcc_plan_step call them. No
 * schedule is named here: slot k includes the list's k-th file,
 * "<file>.c". Their file-local helpers must not share names (one
 * translation unit); what several need is in schedule.h. */
#define RCC_STR_(x) #x
#define RCC_STR(x) RCC_STR_(x)
#define RCC_APPLY(macro, args) macro args
#define RCC_SCHED_FILE_ARG(id, file) file,
#define RCC_SCHED_COUNT_ONE(id, file) +1
#define RCC_SCHED_COUNT (0 RCC_SCHEDULES(RCC_SCHED_COUNT_ONE))
#define RCC_ARG_0(a, ...) a
#define RCC_ARG_1(a, ...) RCC_ARG_0(__VA_ARGS__)
#define RCC_ARG_2(a, ...) RCC_ARG_1(__VA_ARGS__)
#define RCC_ARG_3(a, ...) RCC_ARG_2(__VA_ARGS__)
#define RCC_ARG_4(a, ...) RCC_ARG_3(__VA_ARGS__)
#define RCC_ARG_5(a, ...) RCC_ARG_4(__VA_ARGS__)
#define RCC_ARG_6(a, ...) RCC_ARG_5(__VA_ARGS__)
#define RCC_ARG_7(a, ...) RCC_ARG_6(__VA_ARGS__)
#define RCC_ARG_8(a, ...) RCC_ARG_7(__VA_ARGS__)
#define RCC_ARG_9(a, ...) RCC_ARG_8(__VA_ARGS__)
#define RCC_ARG_10(a, ...) RCC_ARG_9(__VA_ARGS__)
#define RCC_ARG_11(a, ...) RCC_ARG_10(__VA_ARGS__)
#define RCC_SCHED_SOURCE(k)                                                   \
  RCC_STR(RCC_APPLY(RCC_ARG_##k, (RCC_SCHEDULES(RCC_SCHED_FILE_ARG) ~)).c)
#if RCC_SCHED_COUNT > 12
#error "exec_cuda.cu includes 12 schedules: give RCC_SCHEDULES' next one a slot"
#endif
#if RCC_SCHED_COUNT > 0
#include RCC_SCHED_SOURCE(0)
#endif
#if RCC_SCHED_COUNT > 1
#include RCC_SCHED_SOURCE(1)
#endif
#if RCC_SCHED_COUNT > 2
#include RCC_SCHED_SOURCE(2)
#endif
#if RCC_SCHED_COUNT > 3
#include RCC_SCHED_SOURCE(3)
#endif
#if RCC_SCHED_COUNT > 4
#include RCC_SCHED_SOURCE(4)
#endif
#if RCC_SCHED_COUNT > 5
#include RCC_SCHED_SOURCE(5)
#endif
#if RCC_SCHED_COUNT > 6
#include RCC_SCHED_SOURCE(6)
#endif
#if RCC_SCHED_COUNT > 7
#include RCC_SCHED_SOURCE(7)
#endif
#if RCC_SCHED_COUNT > 8
#include RCC_SCHED_SOURCE(8)
#endif
#if RCC_SCHED_COUNT > 9
#include RCC_SCHED_SOURCE(9)
#endif
#if RCC_SCHED_COUNT > 10
#include RCC_SCHED_SOURCE(10)
#endif
#if RCC_SCHED_COUNT > 11
#include RCC_SCHED_SOURCE(11)
#endif

/* ---- the protocol hooks ----------------------------------------------------- */

namespace {

/* What thread 0 knows while it waits. */
struct dev_ctx {
  const struct rcc_plan *plan; /* the block's channel's plan */
  struct rcc_cuda_status *status;
  uint64_t deadline; /* %globaltimer ns; 0: none */
  int peer;
  int waiting_send;
  uint64_t got_meta;
};

/* The hooks are __host__ __device__ because proto.h's functions are RCC_HD;
 * only their device halves ever run. */
RCC_HD inline uint32_t ld_acquire_sys(const uint32_t *p) {
#ifdef __CUDA_ARCH__
  uint32_t v;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

RCC_HD inline void st_release_sys(uint32_t *p, uint32_t v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

__device__ inline uint32_t ld_volatile(const uint32_t *p) {
  return *(const volatile uint32_t *)p;
}

__device__ inline uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#define CHECK_EVERY 256 /* polls between abort/deadline checks */

/* Why a kernel must leave now: an abort, or a failure the host learned of
 * (a dead rank, a network error: status.failed); 0 while neither. */
__device__ inline int told_to_leave(const struct rcc_cuda_status *st) {
  if (ld_volatile(&st->abort))
    return RINGCC_ERR_ABORTED;
  return (int)ld_volatile(&st->failed);
}

RCC_HD inline int dev_wait(dev_ctx *x, uint32_t *word, uint32_t old) {
#ifdef __CUDA_ARCH__
  unsigned sleep_ns = 32;
  for (uint32_t polls = 1;; polls++) {
    if (ld_acquire_sys(word) != old)
      return 0;
    if (polls % CHECK_EVERY == 0) {
      int why = told_to_leave(x->status);
      if (why != 0)
        return why;
      if (x->deadline && globaltimer() > x->deadline)
        return RINGCC_ERR_TIMEOUT;
    }
    __nanosleep(sleep_ns);
    sleep_ns = sleep_ns < 1024 ? 2 * sleep_ns : sleep_ns;
  }
#else
  (void)x, (void)word, (void)old;
  return RINGCC_ERR_INTERNAL;
#endif
}

} /* namespace */

#define RCC_LOAD_ACQUIRE(p) ld_acquire_sys(p)
#define RCC_STORE_RELEASE(p, v) st_release_sys((p), (v))
#define RCC_PROTO_WAIT(ctx, word, waiters, old)                                \
  dev_wait((dev_ctx *)(ctx), (word), (old))
#define RCC_PROTO_WAKE(conn, word, waiters) ((void)0)
#define RCC_PROTO_HEAD_MIRROR 1 /* P2P FIFOs: head in the sender's memory */
#include "proto.h"

/* ---- one step ------------------------------------------------------------------ */

namespace {

/* Thread 0's decisions, shared with the block. */
struct step_state {
  struct rcc_step s;
  const char *in;
  char *out;
  int err;
};

/* The FIFO of a step: the channel's own for collectives (sets 0 ..
 * coll_channels - 1), the one point-to-point set after them. */
__device__ inline struct rcc_conn *conn_of(const rcc_cuda_args &a,
                                           struct rcc_conn *table,
                                           const struct rcc_plan &p, int kind,
                                           int peer) {
  int set = kind == RCC_CONN_COLL ? p.channel : a.coll_channels;
  return &table[(size_t)set * p.nranks + peer];
}

__device__ inline uint64_t meta_of(const struct rcc_step &s, size_t bytes) {
  return (uint64_t)bytes | (s.last ? RCC_META_LAST : 0);
}

/* Thread 0: wait for the incoming slot and check what it holds. */
__device__ int acquire_recv(const rcc_cuda_args &a, dev_ctx *x,
                            const struct rcc_step &s, size_t esize,
                            const char **in) {
  const struct rcc_plan &P = *x->plan;
  struct rcc_conn *c = conn_of(a, a.recv_conns, P, s.conn_kind, s.recv_peer);
  uint64_t meta = 0;
  x->peer = s.recv_peer;
  x->waiting_send = 0;
  int r = rcc_proto_recv_begin(x, c, in, &meta);
  if (r != 0)
    return r;
  if (RCC_META_BYTES(meta) != s.nelem * esize ||
      ((meta & RCC_META_LAST) != 0) != (s.last != 0)) {
    x->got_meta = meta;
    return RINGCC_ERR_INVALID_USAGE;
  }
  return 0;
}

/* Thread 0: wait for a free outgoing slot. */
__device__ int acquire_send(const rcc_cuda_args &a, dev_ctx *x,
                            const struct rcc_step &s, char **out) {
  const struct rcc_plan &P = *x->plan;
  struct rcc_conn *c = conn_of(a, a.send_conns, P, s.conn_kind, s.send_peer);
  x->peer = s.send_peer;
  x->waiting_send = 1;
  return rcc_proto_send_begin(x, c, out);
}

/* Thread 0: the first failure of the communicator goes to the host. */
__device__ void report(const rcc_cuda_args &a, const dev_ctx *x, uint64_t step,
                       const struct rcc_step &s, size_t esize, int err) {
  struct rcc_cuda_status *st = a.status;
  if (ld_volatile(&st->code) != 0)
    return;
  st->coll = a.plan.coll;
  st->seq = a.seq;
  st->step = step;
  st->nsteps = x->plan->nsteps;
  st->peer = x->peer;
  st->waiting_send = x->waiting_send;
  st->got_bytes = RCC_META_BYTES(x->got_meta);
  st->got_last = (x->got_meta & RCC_META_LAST) != 0;
  st->want_bytes = (uint32_t)(s.nelem * esize);
  st->captured = a.captured;
  __threadfence_system();
  st_release_sys(&st->code, (uint32_t)err);
}

/* Every thread: make this thread's slot writes visible to the peer (or the
 * proxy) before thread 0 publishes, then wait for all. */
__device__ inline void fence_and_sync() {
  __threadfence_system();
  __syncthreads();
}

/* The data movement of one step (all threads), slots already acquired; the
 * device twin of exec_host.c's step_data. */
template <class T, int OP>
__device__ void step_data(const rcc_cuda_args &a, const struct rcc_step &s,
                          const char *in, char *out) {
  const size_t tid = threadIdx.x, nt = blockDim.x;
  const size_t n = s.nelem, bytes = n * sizeof(T);
  const T *src = (const T *)a.src + s.src_off;
  T *dst = (T *)a.dst + s.dst_off;
  const T *tin = (const T *)in;
  T *tout = (T *)out;
  const int finish = s.postop ? a.plan.nranks : 0;

  switch (s.kind) {
  case RCC_STEP_SEND:
    rcc::copy_run(out, nullptr,
                  (const char *)(s.acc != RCC_ACC_IN_SRC ? dst : src), bytes,
                  tid, nt);
    return;
  case RCC_STEP_RECV:
    rcc::copy_run((char *)dst, nullptr, in, bytes, tid, nt);
    return;
  case RCC_STEP_COPY:
  case RCC_STEP_COPY_SEND:
    if (finish) { /* dst is the finished copy, out the raw input */
      rcc::reduce_run<T, OP>(dst, nullptr, src, nullptr, n, finish, tid, nt);
      rcc::copy_run(out, nullptr, (const char *)src, out ? bytes : 0, tid, nt);
    } else {
      rcc::copy_run((char *)dst, out, (const char *)src, bytes, tid, nt);
    }
    return;
  case RCC_STEP_RECV_COPY_SEND:
    rcc::copy_run((char *)dst, out, in, bytes, tid, nt);
    return;
  default:
    break;
  }
  /* The reducing steps, as one call (one instance of the loop per kernel):
   *   recvReduceSend        out <- in op src, or dst op in
   *   reduceLocal           dst <- dst op src
   *   recvReduceCopy[Send]  dst (and out) <- the operands acc names
   * acc keeps one operand order on every rank: bitwise agreement. */
  T *rd = dst, *rd2 = tout;
  const T *ra = s.acc == RCC_ACC_DST_IN   ? dst
                : s.acc == RCC_ACC_SRC_IN ? src
                                          : tin;
  const T *rb = s.acc == RCC_ACC_DST_IN || s.acc == RCC_ACC_SRC_IN ? tin
                : s.acc == RCC_ACC_IN_DST                          ? dst
                                                                   : src;
  int fin = finish;
  if (s.kind == RCC_STEP_RECV_REDUCE_SEND) {
    rd = tout;
    rd2 = nullptr;
    fin = 0;
  } else if (s.kind == RCC_STEP_REDUCE_LOCAL) {
    rd2 = nullptr;
    ra = dst;
    rb = src;
  }
  rcc::reduce_run<T, OP>(rd, rd2, ra, rb, n, fin, tid, nt);
}

/* AllToAll and Barrier: send to one peer, then receive from another. */
template <class T>
__device__ int send_recv_step(const rcc_cuda_args &a, dev_ctx *x,
                              step_state &sh, uint64_t step) {
  const struct rcc_plan &P = *x->plan;
  const size_t tid = threadIdx.x, nt = blockDim.x;
  const struct rcc_step &s = sh.s;
  size_t bytes = s.nelem * sizeof(T);

  if (tid == 0 && (sh.err = acquire_send(a, x, s, &sh.out)) != 0)
    report(a, x, step, s, sizeof(T), sh.err);
  __syncthreads();
  if (sh.err)
    return sh.err;
  rcc::copy_run(sh.out, nullptr, (const char *)((const T *)a.src + s.src_off),
                bytes, tid, nt);
  fence_and_sync();
  if (tid == 0) {
    rcc_proto_send_end(conn_of(a, a.send_conns, P, s.conn_kind, s.send_peer),
                       meta_of(s, bytes));
    if ((sh.err = acquire_recv(a, x, s, sizeof(T), &sh.in)) != 0)
      report(a, x, step, s, sizeof(T), sh.err);
  }
  __syncthreads();
  if (sh.err)
    return sh.err;
  rcc::copy_run((char *)((T *)a.dst + s.dst_off), nullptr, sh.in, bytes, tid,
                nt);
  __syncthreads();
  if (tid == 0)
    rcc_proto_recv_end(conn_of(a, a.recv_conns, P, s.conn_kind, s.recv_peer));
  return 0;
}

template <class T, int OP>
__device__ int run_step(const rcc_cuda_args &a, dev_ctx *x, step_state &sh,
                        uint64_t step) {
  const struct rcc_plan &P = *x->plan;
  const size_t tid = threadIdx.x;
  if (tid == 0) {
    rcc_plan_step(&P, step, &sh.s);
    sh.in = nullptr;
    sh.out = nullptr;
    sh.err = 0;
  }
  __syncthreads();
  const struct rcc_step &s = sh.s;
  if (s.kind == RCC_STEP_SEND_RECV)
    return send_recv_step<T>(a, x, sh, step);
  if (tid == 0) {
    if (rcc_step_receives(s.kind))
      sh.err = acquire_recv(a, x, s, sizeof(T), &sh.in);
    if (sh.err == 0 && rcc_step_sends(s.kind))
      sh.err = acquire_send(a, x, s, &sh.out);
    if (sh.err)
      report(a, x, step, s, sizeof(T), sh.err);
  }
  __syncthreads();
  if (sh.err)
    return sh.err;
  step_data<T, OP>(a, s, sh.in, sh.out);
  fence_and_sync();
  if (tid == 0) {
    if (sh.out)
      rcc_proto_send_end(
          conn_of(a, a.send_conns, P, s.conn_kind, s.send_peer),
          meta_of(s, s.nelem * sizeof(T)));
    if (sh.in)
      rcc_proto_recv_end(
          conn_of(a, a.recv_conns, P, s.conn_kind, s.recv_peer));
  }
  return 0;
}

} /* namespace */

/* ---- the kernels: one per datatype x op -------------------------------------- */

template <class T, int OP>
__global__ void __launch_bounds__(RCC_CUDA_THREADS, 1)
    rcc_coll_kernel(const struct rcc_cuda_args a) {
  __shared__ step_state sh;
  __shared__ dev_ctx x;
  __shared__ struct rcc_plan plan; /* this block's channel */
  __shared__ int dead;

  struct rcc_cuda_status *st = a.status;
  if (threadIdx.x == 0) {
    /* The kernel started when its first block did: the host's watchdog
     * then wakes the network engine (kernels of a communicator run one
     * after the other, so the counts are never shared by two). */
    if (atomicAdd(&a.blocks->started, 1u) == 0) {
      st_release_sys(&st->started, ld_volatile(&st->started) + 1);
    }
    rcc_plan_channel(&a.plan, (int)blockIdx.x, &plan);
    rcc_plan_build(&plan);
    x.plan = &plan;
    x.status = st;
    x.deadline = a.timeout_ns ? globaltimer() + a.timeout_ns : 0;
    x.peer = -1;
    x.waiting_send = 0;
    x.got_meta = 0;
    /* An earlier kernel failed (the FIFOs are in an unknown state), or the
     * communicator was aborted or lost a rank: nothing to do but say so. */
    int why = told_to_leave(st);
    dead = ld_volatile(&st->code) != 0 || why != 0;
    if (why != 0 && ld_volatile(&st->code) == 0) {
      struct rcc_step none = {};
      report(a, &x, 0, none, 0, why);
    }
  }
  __syncthreads();
  for (uint64_t i = 0; i < plan.nsteps && !dead; i++)
    if (run_step<T, OP>(a, &x, sh, i) != 0)
      break;
  __syncthreads();
  /* The kernel is done when its last block is: that block says so (and
   * resets the counts for the next kernel, which runs after this one). */
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (atomicAdd(&a.blocks->done, 1u) == gridDim.x - 1) {
      a.blocks->done = 0;
      a.blocks->started = 0;
      __threadfence_system();
      st_release_sys(&st->done, ld_volatile(&st->done) + 1);
    }
  }
}

namespace {
typedef void (*kernel_fn)(const struct rcc_cuda_args);

#define RCC_KERNEL_OF(T, e_op) rcc_coll_kernel<T, e_op>,
#define RCC_KERNEL_ROW(unused, e_dt, T) {RCC_CUDA_OPS(RCC_KERNEL_OF_OP, T)},
#define RCC_KERNEL_OF_OP(T, e_op) RCC_KERNEL_OF(T, e_op)

/* kernels[dt][op], in enum order (RCC_CUDA_DATATYPES, RCC_CUDA_OPS). The
 * float8 rows are empty: coll.c refuses float8 on device buffers. */
const kernel_fn kernels[RINGCC_NUM_DATATYPES][RINGCC_NUM_OPS] = {
    RCC_CUDA_DATATYPES(RCC_KERNEL_ROW, ~)};
} /* namespace */

extern "C" int rcc_cuda_launch(const struct rcc_cuda_args *a, void *stream,
                               char *err, size_t errlen) {
  unsigned blocks = a->plan.nchannels > 1 ? (unsigned)a->plan.nchannels : 1;
  return rcc_launch_of(kernels, "kernel", a->dt, a->op, a, blocks, stream, err,
                       errlen);
}

extern "C" int rcc_cuda_preload(char *err, size_t errlen) {
  return rcc_preload_of(kernels, "collective kernel", err, errlen);
}
