/*
 * ringcc-bench - bandwidth and latency of libringcc collectives, modelled on
 * nccl-tests (same columns, same size and bus-bandwidth conventions), so the
 * numbers can be compared with nccl-tests and with the MPI and Gloo
 * benchmarks of bench/.
 *
 *   ringcc-run -np 4 ringcc-bench --coll allreduce -b 8 -e 64M -f 2
 *   mpirun -np 4 all_reduce_perf -b 8 -e 64M -f 2 -g 1
 *                    (ringcc_comm_init_env reads mpirun's variables too)
 *
 * It takes nccl-tests' options with their meanings, and installed under
 * nccl-tests' program names (all_reduce_perf, all_gather_perf, ...: links
 * to this program) the name selects the collective, so nccl-tests command
 * lines run unchanged.
 *
 * The measurement - options, sizes, inputs, the timed loop, the check of
 * every element, the columns and the JSON - is bench/bench_common.c, shared
 * with bench/mpi_bench.c and bench/gloo_bench.cc. This file is its libringcc
 * backend: one call of each collective, the helper collectives the loop needs
 * (barrier, max of the times, sum of #wrong, the rank list), and with
 * --device the device buffers and CUDA graphs (bench_device.h).
 *
 * With --calibrate it measures this machine for the tuner instead (see
 * calibrate() below and docs/tuning.md) and writes the tuner's cache file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcc.h"
#include "bench_common.h"
#include "bench_device.h"

/* --calibrate fits the library's own cost model (tuner.h); this tool links
 * libringcc.a (TOOLS_STATIC in the Makefile) for it. */
#include "comm.h"
#include "tuner.h"

#define PROG_NAME "ringcc-bench"

/* bench_common's datatypes and ops as libringcc names them. */
static const ringcc_datatype_t rcc_dtypes[BC_NUM_DTYPES] = {
    [BC_INT8] = RINGCC_INT8,       [BC_UINT8] = RINGCC_UINT8,
    [BC_INT32] = RINGCC_INT32,     [BC_UINT32] = RINGCC_UINT32,
    [BC_INT64] = RINGCC_INT64,     [BC_UINT64] = RINGCC_UINT64,
    [BC_FLOAT16] = RINGCC_FLOAT16, [BC_BFLOAT16] = RINGCC_BFLOAT16,
    [BC_FLOAT32] = RINGCC_FLOAT32, [BC_FLOAT64] = RINGCC_FLOAT64,
    [BC_FLOAT8_E4M3] = RINGCC_FLOAT8_E4M3,
    [BC_FLOAT8_E5M2] = RINGCC_FLOAT8_E5M2};
static const ringcc_op_t rcc_ops[BC_NUM_OPS] = {
    [BC_SUM] = RINGCC_SUM, [BC_PROD] = RINGCC_PROD, [BC_MIN] = RINGCC_MIN,
    [BC_MAX] = RINGCC_MAX, [BC_AVG] = RINGCC_AVG};

/* The backend's state (bench_common's ctx). */
struct bench {
  const struct bc_options *o;
  ringcc_comm_t comm;
  int rank, nranks;
  char *dsbuf, *drbuf; /* --device: what the calls use; host buffers fill and check */
  void *stream;        /* -G: a cudaStream_t */
  ringcc_reg_t regs[2]; /* --register: the two buffers' registrations */
  void *reg_ptr[2];
  size_t *vc[4]; /* allgatherv, alltoallv: sendcounts, sdispls, recvcounts,
                    rdispls (nranks each) */
};

/* ---- errors -------------------------------------------------------------- */

static struct bench *g_bench; /* for die(): abort the communicator */

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt,
                                                                ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_bench && g_bench->comm)
    fprintf(stderr, PROG_NAME ": rank %d: %s\n", g_bench->rank, msg);
  else
    fprintf(stderr, PROG_NAME ": %s\n", msg);
  fflush(stderr);
  if (g_bench && g_bench->comm) ringcc_comm_abort(g_bench->comm);
  exit(BC_EXIT_FAILED);
}

/* Every libringcc call goes through this: on failure, the code's name and the
 * communicator's detailed message. */
static void check_call(struct bench *b, ringcc_result_t r, const char *call,
                       const char *context) {
  if (r == RINGCC_SUCCESS) return;
  const char *detail = ringcc_comm_last_error(b ? b->comm : NULL);
  die("%s failed%s%s: %s%s%s", call, context ? " " : "", context ? context : "",
      ringcc_strerror(r), detail && *detail ? ": " : "", detail ? detail : "");
}

/* ---- usage and options --------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
"Usage: " PROG_NAME " [options]\n"
"       all_reduce_perf | all_gather_perf | reduce_scatter_perf |\n"
"       broadcast_perf | reduce_perf | alltoall_perf | sendrecv_perf [options]\n"
"Measures a libringcc collective over a range of sizes, nccl-tests style;\n"
"under nccl-tests' program names (links to " PROG_NAME ") the name picks the\n"
"collective. Run it under a launcher: ringcc-run -np N all_reduce_perf ...,\n"
"or mpirun/srun (ranks join with ringcc_comm_init_env).\n"
"\n");
  bc_usage_common(f);
  fprintf(f,
"  -d, --datatype TYPE      int8 | uint8 | int32 | uint32 | int64 | uint64 |\n"
"                           float16 | bfloat16 | float32 | float64 |\n"
"                           float8_e4m3 | float8_e5m2, nccl-tests' half |\n"
"                           float | double | f8e4m3 | f8e5m2, or all\n"
"                           (default float32)\n"
"  -o, --op OP              sum | prod | min | max | avg, or all (default\n"
"                           sum); used by allreduce, reduce_scatter, reduce\n"
"  -r, --root ROOT          root rank of bcast and reduce (default 0)\n"
"  -R, --local_register 0|1|2  1 or 2: as --register\n"
"\n"
"libringcc's own options:\n"
"  --coll COLL              allreduce | reduce_scatter | allgather | bcast |\n"
"                           reduce | alltoall | sendrecv | gather | scatter |\n"
"                           allgatherv | alltoallv (default allreduce, or the\n"
"                           one the program's name picks)\n"
"  --device                 device buffers (cudaMalloc) on one stream; needs a\n"
"                           CUDA build and a GPU (RINGCC_CUDA_DEVICE picks it)\n"
"  --group                  sendrecv and alltoall as one group of ringcc_send\n"
"                           and ringcc_recv per peer (ringcc_group_start/\n"
"                           end), as NCCL programs and nccl-tests write them;\n"
"                           host buffers, measured out of place only\n"
"  --register               host buffers from ringcc_mem_alloc, registered once\n"
"                           with ringcc_comm_register (outside the timed\n"
"                           loops): collectives on one host may then run\n"
"                           zero-copy (docs/algorithms.md)\n"
"  --min-time SECONDS       time at least this long per size: more iterations\n"
"                           than -n where calls are short (from the warm-up's\n"
"                           time, the slowest rank's; at most 1000000\n"
"                           iterations; default 0)\n"
"  --json FILE              also write the rows to FILE as a JSON array (rank 0)\n"
"  --calibrate              measure this machine for the tuner instead: alpha\n"
"               and beta of shared memory and of TCP (communicators with\n"
"               shm_disable=1), gamma (local reduction), fitted to ring\n"
"               allreduce, one-shot allreduce and ping-pong times; writes the\n"
"               tuner's file (RINGCC_TUNER_FILE, else\n"
"               $XDG_CACHE_HOME/ringcc/tuner.conf, else\n"
"               ~/.cache/ringcc/tuner.conf). All ranks on one host, at least\n"
"               2; other options are ignored. docs/tuning.md\n"
"  -h, --help               print this help and exit\n"
"\n"
"Columns (rank 0 prints one row per size), as nccl-tests:\n"
"  size count type redop root, then for out-of-place and for in-place:\n"
"  time(us) algbw(GB/s) busbw(GB/s) #wrong\n"
"  size: bytes of the buffer (allreduce, bcast, reduce, sendrecv), of the\n"
"  gathered output (allgather), of the full input (reduce_scatter), of the\n"
"  send buffer (alltoall), of the root's buffer (gather, scatter), of\n"
"  n blocks of b = size/n/typesize elements on average (allgatherv,\n"
"  alltoallv: uneven, see below); rounded down to a multiple of the element size,\n"
"  and of nranks elements where each rank has a block; count = size/typesize.\n"
"  time: per-call average of the timed loop, combined over the ranks as -a\n"
"  says (default the mean). algbw = size/time, GB = 1e9 bytes.\n"
"  busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (reduce_scatter, allgather,\n"
"  alltoall, gather, scatter, allgatherv, alltoallv), 1 (bcast, reduce,\n"
"  sendrecv).\n"
"  Uneven blocks: rank i contributes floor(2*b*i/(n-1)) elements\n"
"  (allgatherv: rank 0 none, rank n-1 about 2b), and sends rank j\n"
"  floor(2*b*((i+j) mod n)/(n-1)) (alltoallv: from none to about 2b);\n"
"  displacements are the running sums (blocks in rank order, no gaps).\n"
"  #wrong: wrong elements summed over the ranks (N/A with -c 0).\n"
"  In place: the same buffer for allreduce, reduce, alltoall; sendbuf =\n"
"  recvbuf + rank*sendcount (allgather); recvbuf = sendbuf + rank*recvcount\n"
"  (reduce_scatter). bcast has one buffer, so both groups time the same call;\n"
"  sendrecv (rank r sends to r+1 and receives from r-1), gather, scatter,\n"
"  allgatherv and alltoallv are measured out of place only.\n"
"  The last lines: '# Out of bounds values : N OK|FAILED' (the sum of\n"
"  #wrong) and '# Avg bus bandwidth    : X' (the mean busbw of all rows).\n"
"\n"
"What ran: ringcc-run --trace DIR records every step of every call (each\n"
"  timed call has its sequence number), and ringcc-trace DIR/trace.json\n"
"  --calls, --summary or --png draws them (docs/trace.md). RINGCC_TRACE and\n"
"  RINGCC_STATS=time read the clock at every step and wait: time without them.\n"
"\n"
"Exit status: 0 when every call succeeded and every element was right;\n"
"%d when a call failed; %d for a usage error; %d when elements were wrong.\n",
          BC_EXIT_FAILED, BC_EXIT_USAGE, BC_EXIT_WRONG);
}


/* ---- the backend: one call of each collective ---------------------------- */

/* --group: sendrecv and alltoall as NCCL programs (and nccl-tests'
 * sendrecv_perf and alltoall_perf) write them, one group of a ringcc_send
 * and a ringcc_recv per peer (the rank itself included for alltoall). */
static ringcc_result_t grouped(struct bench *b, const struct bc_plan *p,
                               ringcc_datatype_t dt, char *s, char *r,
                               bool all, const char **call) {
  int n = b->nranks;
  size_t block = all ? p->arg * ringcc_datatype_size(dt) : 0;
  ringcc_result_t res = ringcc_group_start();
  *call = "ringcc_group_start";
  for (int k = all ? 0 : 1; k < (all ? n : 2) && res == RINGCC_SUCCESS; k++) {
    int to = (b->rank + k) % n, from = (b->rank - k + n) % n;
    *call = "ringcc_send (in a group)";
    res = ringcc_send(s + (size_t)to * block, p->arg, dt, to, b->comm,
                      b->stream);
    if (res == RINGCC_SUCCESS) {
      *call = "ringcc_recv (in a group)";
      res = ringcc_recv(r + (size_t)from * block, p->arg, dt, from, b->comm,
                        b->stream);
    }
  }
  ringcc_result_t end = ringcc_group_end();
  if (res == RINGCC_SUCCESS && end != RINGCC_SUCCESS)
    *call = "ringcc_group_end";
  return res != RINGCC_SUCCESS ? res : end;
}

static ringcc_result_t sendrecv(struct bench *b, const struct bc_plan *p,
                                ringcc_datatype_t dt, char *s, char *r,
                                const char **call) {
  int next = (b->rank + 1) % b->nranks;
  int prev = (b->rank - 1 + b->nranks) % b->nranks;
  if (b->o->group)
    return grouped(b, p, dt, s, r, false, call);
  /* Blocking calls: even ranks send first, odd ranks receive first, so every
   * send meets a receive (also with an odd number of ranks). */
  for (int step = 0; step < 2; step++) {
    ringcc_result_t res;
    if ((step == 0) == (b->rank % 2 == 0)) {
      *call = "ringcc_send";
      res = ringcc_send(s, p->arg, dt, next, b->comm, b->stream);
    } else {
      *call = "ringcc_recv";
      res = ringcc_recv(r, p->arg, dt, prev, b->comm, b->stream);
    }
    if (res != RINGCC_SUCCESS) return res;
  }
  return RINGCC_SUCCESS;
}

/* The counts and displacements of bench_common's uneven rule (bc_vcount),
 * made on every call as a program would. */
static void v_arrays(struct bench *b, enum bc_coll coll, size_t arg) {
  int n = b->nranks;
  for (int k = 0; k < 4; k++)
    if (b->vc[k] == NULL && (b->vc[k] = calloc((size_t)n, sizeof(size_t))) == NULL)
      die("out of memory");
  size_t sat = 0, rat = 0;
  for (int q = 0; q < n; q++) {
    int all = coll == BC_ALLTOALLV;
    b->vc[0][q] = bc_vcount(coll, n, arg, b->rank, q);
    b->vc[1][q] = sat;
    b->vc[2][q] = bc_vcount(coll, n, arg, q, b->rank);
    b->vc[3][q] = rat;
    sat += all ? b->vc[0][q] : 0;
    rat += b->vc[2][q];
  }
}

/* One call of the collective; *call names the libringcc function. In place:
 * the same buffer for allreduce, reduce, alltoall; sendbuf = recvbuf +
 * rank*sendcount (allgather); recvbuf = sendbuf + rank*recvcount
 * (reduce_scatter). */
static ringcc_result_t call_coll(struct bench *b, const struct bc_options *o,
                                 const struct bc_plan *p, bool in_place,
                                 char *s, char *r, const char **call) {
  ringcc_datatype_t dt = rcc_dtypes[o->dtype];
  ringcc_op_t op = rcc_ops[o->op];
  char *own_block = r + (size_t)b->rank * p->arg * bc_dtype_size(o->dtype);
  ringcc_comm_t c = b->comm;
  switch (o->coll) {
  case BC_ALLREDUCE:
    *call = "ringcc_allreduce";
    return ringcc_allreduce(in_place ? r : s, r, p->arg, dt, op, c, b->stream);
  case BC_REDUCE_SCATTER:
    *call = "ringcc_reduce_scatter";
    return in_place ? ringcc_reduce_scatter(r, own_block, p->arg, dt, op, c, b->stream)
                    : ringcc_reduce_scatter(s, r, p->arg, dt, op, c, b->stream);
  case BC_ALLGATHER:
    *call = "ringcc_allgather";
    return ringcc_allgather(in_place ? own_block : s, r, p->arg, dt, c, b->stream);
  case BC_BCAST:
    *call = "ringcc_bcast";
    return ringcc_bcast(r, p->arg, dt, o->root, c, b->stream);
  case BC_REDUCE:
    *call = "ringcc_reduce";
    return ringcc_reduce(in_place ? r : s, r, p->arg, dt, op, o->root, c, b->stream);
  case BC_ALLTOALL:
    if (o->group)
      return grouped(b, p, dt, s, r, true, call);
    *call = "ringcc_alltoall";
    return ringcc_alltoall(in_place ? r : s, r, p->arg, dt, c, b->stream);
  case BC_GATHER:
    *call = "ringcc_gather";
    return ringcc_gather(s, r, p->arg, dt, o->root, c, b->stream);
  case BC_SCATTER:
    *call = "ringcc_scatter";
    return ringcc_scatter(s, r, p->arg, dt, o->root, c, b->stream);
  case BC_ALLGATHERV:
    *call = "ringcc_allgatherv";
    v_arrays(b, o->coll, p->arg);
    return ringcc_allgatherv(s, b->vc[0][0], r, b->vc[2], b->vc[3], dt, c,
                             b->stream);
  case BC_ALLTOALLV:
    *call = "ringcc_alltoallv";
    v_arrays(b, o->coll, p->arg);
    return ringcc_alltoallv(s, b->vc[0], b->vc[1], r, b->vc[2], b->vc[3], dt,
                            c, b->stream);
  default:
    return sendrecv(b, p, dt, s, r, call);
  }
}

/* call_coll on the host buffers, or with --device on their device twins; dies
 * with the details on failure (formatted only then, so the timed loop does
 * nothing but call). */
static int rcc_call(void *ctx, const struct bc_options *o,
                    const struct bc_plan *p, bool in_place, void *sbuf,
                    void *rbuf) {
  struct bench *b = ctx;
  const char *call = "";
  ringcc_result_t r = call_coll(b, o, p, in_place, o->device ? b->dsbuf : sbuf,
                                o->device ? b->drbuf : rbuf, &call);
  if (r != RINGCC_SUCCESS) {
    char context[160];
    bc_call_context(o, p, in_place, context, sizeof context);
    check_call(b, r, call, context);
  }
  return 0;
}

static void rcc_barrier(void *ctx) {
  check_call(ctx, ringcc_barrier(((struct bench *)ctx)->comm, NULL),
             "ringcc_barrier", NULL);
}

static double max_over_ranks(struct bench *b, double mine) {
  double all = 0;
  check_call(b, ringcc_allreduce(&mine, &all, 1, RINGCC_FLOAT64, RINGCC_MAX,
                                 b->comm, NULL),
             "ringcc_allreduce", "(max of the times)");
  return all;
}

static double rcc_max_double(void *ctx, double mine) {
  return max_over_ranks(ctx, mine);
}

static long long rcc_sum_ll(void *ctx, long long mine) {
  struct bench *b = ctx;
  int64_t in = mine, all = 0;
  check_call(b, ringcc_allreduce(&in, &all, 1, RINGCC_INT64, RINGCC_SUM,
                                 b->comm, NULL),
             "ringcc_allreduce", "(sum over the ranks)");
  return all;
}

static void rcc_allgather_bytes(void *ctx, const void *mine, void *all,
                                size_t bytes) {
  struct bench *b = ctx;
  check_call(b, ringcc_allgather(mine, all, bytes, RINGCC_UINT8, b->comm, NULL),
             "ringcc_allgather", "(rank list)");
}

static void rcc_abort_job(void *ctx) {
  struct bench *b = ctx;
  if (b->comm) ringcc_comm_abort(b->comm);
  exit(BC_EXIT_FAILED);
}

/* -G: device twins of the host buffers; the host inputs copied to them, the
 * result back; the stream synchronized after the warm-up and the loop. */
static void dev_alloc_buffers(void *ctx, size_t bytes) {
  struct bench *b = ctx;
  b->dsbuf = dev_alloc(bytes, &b->stream);
  b->drbuf = dev_alloc(bytes, &b->stream);
}

static void dev_stage_in(void *ctx, const struct bc_plan *p, const void *sbuf,
                         const void *rbuf) {
  struct bench *b = ctx;
  dev_put(b->dsbuf, sbuf, p->bytes ? p->bytes : 1, b->stream);
  dev_put(b->drbuf, rbuf, p->bytes ? p->bytes : 1, b->stream);
}

static void dev_stage_out(void *ctx, const struct bc_plan *p, void *rbuf) {
  struct bench *b = ctx;
  dev_get(rbuf, b->drbuf, p->bytes ? p->bytes : 1, b->stream);
}

static void dev_sync_calls(void *ctx) {
  dev_sync(((struct bench *)ctx)->stream);
}

static void dev_graph_begin_calls(void *ctx) {
  dev_graph_begin(((struct bench *)ctx)->stream);
}

static void dev_graph_end_calls(void *ctx) {
  dev_graph_end(((struct bench *)ctx)->stream);
}

static void dev_graph_launch_calls(void *ctx) {
  dev_graph_launch(((struct bench *)ctx)->stream);
}

/* --register: the host buffers are shared memory every rank registers (all
 * ranks allocate them at once, so the collective registrations match). */
static void *reg_alloc_host(void *ctx, size_t bytes) {
  struct bench *b = ctx;
  int k = b->reg_ptr[0] != NULL;
  void *p = NULL;
  check_call(b, ringcc_mem_alloc(NULL, bytes, &p), "ringcc_mem_alloc", NULL);
  memset(p, 0, bytes); /* first touch, outside the timed loops */
  check_call(b, ringcc_comm_register(b->comm, p, bytes, &b->regs[k]),
             "ringcc_comm_register", NULL);
  b->reg_ptr[k] = p;
  return p;
}

static void reg_free_host(void *ctx, void *p) {
  struct bench *b = ctx;
  int k = p == b->reg_ptr[1];
  check_call(b, ringcc_comm_deregister(b->comm, b->regs[k]),
             "ringcc_comm_deregister", NULL);
  check_call(b, ringcc_mem_free(p), "ringcc_mem_free", NULL);
  b->reg_ptr[k] = NULL;
}

/* ---- setup --------------------------------------------------------------- */

/* Every rank ends here (after rank 0 has printed why, where there is a why):
 * nobody exits before rank 0 has said everything, since a launcher stops the
 * whole job at the first non-zero exit. */
__attribute__((noreturn)) static void finish(struct bench *b, int status) {
  fflush(stdout);
  fflush(stderr);
  check_call(b, ringcc_barrier(b->comm, NULL), "ringcc_barrier", "(the end)");
  check_call(b, ringcc_comm_destroy(b->comm), "ringcc_comm_destroy", NULL);
  b->comm = NULL;
  dev_free(b->dsbuf, NULL);
  dev_free(b->drbuf, b->stream);
  exit(status);
}

static void *alloc_touched(size_t bytes) {
  void *p = bc_alloc_touched(bytes);
  if (p == NULL) die("cannot allocate %zu bytes: %s", bytes, strerror(errno));
  return p;
}

/* ---- --calibrate: measure this machine for the tuner ------------------------
 *
 * For shared memory and for TCP (a communicator with shm_disable=1), ring
 * allreduce and one-shot allreduce (communicators with algo forced) at a few
 * sizes, and a ping-pong between ranks 0 and 1; gamma from the library's
 * float32 sum kernel, timed on every rank at once (as in a collective, where
 * every rank reduces). A time is the per-call average of a block of calls,
 * the maximum over ranks, as bench_common.c measures; the median of
 * CAL_BLOCKS blocks; and the median of CAL_ROUNDS rounds of the whole
 * sweep (cal_measure).
 *
 * alpha, beta and beta_mem (beyond the last-level cache) of each link, and
 * gamma, are fitted (rcc_model_fit: least squares of relative errors) to
 * the collectives' times: those are what the tuner predicts, with every
 * rank busy at once; the reduction kernel's own speed is printed beside the
 * fitted gamma. The ping-pong, one edge busy and
 * the other ranks idle, gets a fit of its own, printed and kept in the
 * file's comments: where ranks outnumber cores, or the machine is loaded,
 * the two differ, and the difference is the price of running n ranks at
 * once. Rank 0 writes the tuner's file. */

#define CAL_ROUNDS 5
#define CAL_BLOCKS 3
#define CAL_BLOCK_US 5000.0 /* aim for blocks of at least this long */
#define CAL_MAX_SAMPLES 64
#define CAL_BUF_BYTES ((size_t)64 << 20)

/* make bench's range, 8 B to 64 MiB, every factor of 16 and the top, and
 * 64 KiB: with only 32 KiB and 512 KiB around it, the fit left the sizes
 * where alpha and beta both matter 30% under the measured time. */
static const size_t cal_ring_sizes[] = {8, 128, 2048, 32768, 65536, 524288,
                                        8388608, 67108864};
static const size_t cal_direct_sizes[] = {8, 1024, 16384, 65536};
static const size_t cal_pingpong_sizes[] = {8, 16384, 262144, 4194304};

enum cal_kind { CAL_RING, CAL_DIRECT, CAL_PINGPONG };
static const char *const cal_kind_names[] = {"ring allreduce",
                                             "one-shot allreduce",
                                             "ping-pong (one way)"};

struct calibration {
  struct bench *b;
  char *sbuf, *rbuf;
  ringcc_comm_t link_comms[RCC_NUM_LINKS][2]; /* ring, one-shot forced */
  struct rcc_fit_sample samples[CAL_MAX_SAMPLES];
  ringcc_comm_t comms[CAL_MAX_SAMPLES];
  int kinds[CAL_MAX_SAMPLES];
  int nsamples;
};

static void cal_sync(struct bench *b) {
  check_call(b, ringcc_barrier(b->comm, NULL), "ringcc_barrier",
             "(--calibrate)");
}

/* k calls of one measurement on comm; returns this rank's seconds. */
static double cal_run(struct calibration *c, ringcc_comm_t comm, int kind,
                      size_t bytes, int k) {
  struct bench *b = c->b;
  size_t count = bytes / sizeof(float);
  double t0 = bc_now_s();
  for (int i = 0; i < k; i++) {
    ringcc_result_t r = RINGCC_SUCCESS;
    if (kind != CAL_PINGPONG)
      r = ringcc_allreduce(c->sbuf, c->rbuf, count, RINGCC_FLOAT32,
                           RINGCC_SUM, comm, NULL);
    else if (b->rank <= 1) { /* rank 0 sends first, rank 1 answers */
      int peer = 1 - b->rank;
      if (b->rank == 0)
        r = ringcc_send(c->sbuf, count, RINGCC_FLOAT32, peer, comm, NULL);
      if (r == RINGCC_SUCCESS)
        r = ringcc_recv(c->rbuf, count, RINGCC_FLOAT32, peer, comm, NULL);
      if (r == RINGCC_SUCCESS && b->rank == 1)
        r = ringcc_send(c->sbuf, count, RINGCC_FLOAT32, peer, comm, NULL);
    }
    check_call(b, r, kind == CAL_PINGPONG ? "ringcc_send/recv" : "ringcc_allreduce",
               "(--calibrate)");
  }
  return bc_now_s() - t0;
}

static int cmp_dbl(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Microseconds per call (per one-way message for the ping-pong). */
static double cal_time(struct calibration *c, ringcc_comm_t comm, int kind,
                       size_t bytes) {
  struct bench *b = c->b;
  double per_call = kind == CAL_PINGPONG ? 2.0 : 1.0, t[CAL_BLOCKS];
  cal_run(c, comm, kind, bytes, 2); /* warm up */
  cal_sync(b);
  double once = max_over_ranks(b, cal_run(c, comm, kind, bytes, 1)) * 1e6;
  int k = once > 0 ? (int)(CAL_BLOCK_US / once) + 1 : 1;
  if (k > 1000) k = 1000;
  for (int i = 0; i < CAL_BLOCKS; i++) {
    cal_sync(b);
    t[i] = max_over_ranks(b, cal_run(c, comm, kind, bytes, k)) * 1e6 /
           (k * per_call);
  }
  qsort(t, CAL_BLOCKS, sizeof(double), cmp_dbl);
  return t[CAL_BLOCKS / 2];
}

/* Plans one measurement; cal_measure times it. */
static void cal_add(struct calibration *c, ringcc_comm_t comm, int link,
                    int kind, size_t bytes) {
  struct ringcc_comm *in = comm;
  if (c->nsamples == CAL_MAX_SAMPLES) return;
  c->comms[c->nsamples] = comm;
  c->kinds[c->nsamples] = kind;
  c->samples[c->nsamples++] = (struct rcc_fit_sample){
      .coll = kind == CAL_PINGPONG ? RCC_COLL_SEND : RCC_COLL_ALLREDUCE,
      .alg = kind == CAL_RING ? RCC_ALG_RING
             : kind == CAL_DIRECT
                 /* one-shot over shared memory runs on the board */
                 ? (link == RCC_LINK_TCP ? RCC_ALG_ONESHOT : RCC_ALG_BOARD)
                 : RCC_ALG_P2P,
      .link = link,
      .nranks = c->b->nranks,
      .bytes = (double)bytes,
      .chunk_bytes = (double)in->ring_chunk_bytes};
}

/* Every planned measurement, CAL_ROUNDS times over, interleaved: a burst
 * of load from elsewhere spoils one round of a few samples, not all rounds
 * of one kind; each sample's time is its median over the rounds. The same
 * for gamma. */
static double cal_measure(struct calibration *c) {
  double t[CAL_ROUNDS], gamma[CAL_ROUNDS];
  static double times[CAL_MAX_SAMPLES][CAL_ROUNDS];
  for (int r = 0; r < CAL_ROUNDS; r++) {
    if (c->b->rank == 0) {
      printf("# round %d of %d ...\n", r + 1, CAL_ROUNDS);
      fflush(stdout);
    }
    cal_sync(c->b);
    gamma[r] = max_over_ranks(c->b, rcc_tuner_time_reduce((size_t)16 << 20, 5));
    for (int i = 0; i < c->nsamples; i++)
      times[i][r] = cal_time(c, c->comms[i], c->kinds[i],
                             (size_t)c->samples[i].bytes);
  }
  for (int i = 0; i < c->nsamples; i++) {
    memcpy(t, times[i], sizeof t);
    qsort(t, CAL_ROUNDS, sizeof(double), cmp_dbl);
    c->samples[i].time_us = t[CAL_ROUNDS / 2];
  }
  qsort(gamma, CAL_ROUNDS, sizeof(double), cmp_dbl);
  return gamma[CAL_ROUNDS / 2];
}

/* A communicator over the same ranks with shm_disable and algo set. */
static ringcc_comm_t cal_comm(struct bench *b, int shm_disable, int algo) {
  ringcc_unique_id_t id;
  ringcc_comm_t comm;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  if (b->rank == 0)
    check_call(b, ringcc_get_unique_id(&id), "ringcc_get_unique_id",
               "(--calibrate)");
  check_call(b, ringcc_bcast(&id, sizeof id, RINGCC_UINT8, 0, b->comm, NULL),
             "ringcc_bcast", "(--calibrate id)");
  cfg.shm_disable = shm_disable;
  cfg.algo = algo;
  check_call(b, ringcc_comm_init(&comm, b->nranks, &id, b->rank, &cfg),
             "ringcc_comm_init", shm_disable ? "(--calibrate, TCP)"
                                             : "(--calibrate, shm)");
  return comm;
}

/* The communicators of a link (ring and one-shot forced) and what to
 * measure on them. */
static void cal_link(struct calibration *c, int link) {
  struct bench *b = c->b;
  int tcp = link == RCC_LINK_TCP;
  ringcc_comm_t ring = c->link_comms[link][0] = cal_comm(b, tcp, RINGCC_ALGO_RING);
  ringcc_comm_t direct = c->link_comms[link][1] =
      cal_comm(b, tcp, RINGCC_ALGO_ONESHOT);
  size_t slot = ((struct ringcc_comm *)direct)->all_chunk_bytes;
  for (size_t i = 0; i < sizeof cal_ring_sizes / sizeof *cal_ring_sizes; i++)
    cal_add(c, ring, link, CAL_RING, cal_ring_sizes[i]);
  for (size_t i = 0; i < sizeof cal_direct_sizes / sizeof *cal_direct_sizes; i++)
    if (cal_direct_sizes[i] <= slot) /* else it would run the ring */
      cal_add(c, direct, link, CAL_DIRECT, cal_direct_sizes[i]);
  for (size_t i = 0; i < sizeof cal_pingpong_sizes / sizeof *cal_pingpong_sizes; i++)
    cal_add(c, ring, link, CAL_PINGPONG, cal_pingpong_sizes[i]);
}

/* Every rank on this host? (--calibrate measures one machine.) */
static bool cal_one_host(struct bench *b, char host[64]) {
  char *all = calloc((size_t)b->nranks, 64);
  if (all == NULL) die("out of memory");
  memset(host, 0, 64);
  gethostname(host, 63);
  check_call(b, ringcc_allgather(host, all, 64, RINGCC_UINT8, b->comm, NULL),
             "ringcc_allgather", "(--calibrate hosts)");
  bool same = true;
  for (int r = 0; r < b->nranks; r++)
    same = same && strncmp(all + (size_t)r * 64, host, 64) == 0;
  free(all);
  return same;
}

/* The samples of one kind of measurement (collectives or ping-pong). */
static int cal_select(const struct calibration *c, bool pingpong,
                      struct rcc_fit_sample *out) {
  int n = 0;
  for (int i = 0; i < c->nsamples; i++)
    if ((c->kinds[i] == CAL_PINGPONG) == pingpong) out[n++] = c->samples[i];
  return n;
}

static void cal_report(const struct calibration *c, const struct rcc_model *m,
                       const struct rcc_model *pp, char *comment, size_t len) {
  int off = snprintf(comment, len, "samples (%d ranks): link, what, bytes, "
                     "measured us, model us", c->b->nranks);
  printf("#\n# %-4s %-20s %10s %13s %11s %7s\n", "link", "measurement",
         "bytes", "measured(us)", "model(us)", "error");
  for (int i = 0; i < c->nsamples; i++) {
    const struct rcc_fit_sample *s = &c->samples[i];
    const struct rcc_model *use = c->kinds[i] == CAL_PINGPONG ? pp : m;
    struct rcc_cost_terms t;
    rcc_model_terms(s->coll, s->alg, s->nranks, s->bytes, s->chunk_bytes, &t);
    rcc_model_link_terms(s->link, s->alg, s->nranks, &t);
    struct rcc_prediction p = rcc_model_predict(
        &t, &use->link[s->link], use->gamma_us_per_byte, use->cache_bytes);
    double model = rcc_prediction_total(p);
    printf("  %-4s %-20s %10.0f %13.2f %11.2f %6.0f%%%s\n",
           rcc_link_name(s->link), cal_kind_names[c->kinds[i]], s->bytes,
           s->time_us, model, 100.0 * (model - s->time_us) / s->time_us,
           p.in_memory ? "  (beyond the cache)" : "");
    if (off < (int)len)
      off += snprintf(comment + off, len - (size_t)off,
                      "\n  %s %s %.0f %.2f %.2f", rcc_link_name(s->link),
                      cal_kind_names[c->kinds[i]], s->bytes, s->time_us, model);
  }
  printf("# (ping-pong rows: its own fit, below)\n");
  for (int l = 0; l < RCC_NUM_LINKS && off < (int)len; l++)
    off += snprintf(comment + off, len - (size_t)off,
                    "\nping-pong alone (not used by the tuner): %s alpha "
                    "%.2f us, %.2f GB/s", rcc_link_name(l),
                    pp->link[l].alpha_us, 1e-3 / pp->link[l].beta_us_per_byte);
}

static double cal_gbps(double us_per_byte) {
  return us_per_byte > 0 ? 1e-3 / us_per_byte : 0;
}

static void cal_print_model(const char *what, const struct rcc_model *m) {
  printf("# %s:\n", what);
  for (int l = 0; l < RCC_NUM_LINKS; l++) {
    const struct rcc_link_cost *k = &m->link[l];
    printf("#   %s alpha %.2f us, %.2f GB/s in cache, %.2f GB/s beyond\n",
           rcc_link_name(l), k->alpha_us, cal_gbps(k->beta_us_per_byte),
           cal_gbps(k->beta_mem_us_per_byte > 0 ? k->beta_mem_us_per_byte
                                                : k->beta_us_per_byte));
  }
  if (m->gamma_us_per_byte > 0)
    printf("#   gamma %.2f GB/s\n", cal_gbps(m->gamma_us_per_byte));
  else
    printf("#   gamma 0: the best fit puts the reduction's cost into beta\n");
}

static int cal_write(const struct calibration *c, const struct rcc_model *m,
                     const struct rcc_model *pp, const char *host) {
  char path[512], why[512], comment[4096];
  struct rcc_tuner_file_info info = {.nranks = c->b->nranks};
  time_t now = time(NULL);
  struct tm tm;
  snprintf(info.host, sizeof info.host, "%s", host);
  strftime(info.date, sizeof info.date, "%Y-%m-%dT%H:%M:%SZ",
           gmtime_r(&now, &tm));
  cal_report(c, m, pp, comment, sizeof comment);
  printf("#\n");
  cal_print_model("fitted to the collectives (the tuner's values)", m);
  cal_print_model("fitted to the ping-pong alone (for comparison)", pp);
  if (rcc_tuner_file_path(path, sizeof path, why, sizeof why) != 0) {
    fprintf(stderr, PROG_NAME ": --calibrate: not written: %s\n", why);
    return BC_EXIT_FAILED;
  }
  if (rcc_tuner_write_file(path, m, &info, comment, why, sizeof why) !=
      RINGCC_SUCCESS) {
    fprintf(stderr, PROG_NAME ": --calibrate: %s\n", why);
    return BC_EXIT_FAILED;
  }
  printf("# wrote %s\n", path);
  return 0;
}

/* Rank 0: the two fits, then the file. */
static int cal_fit(struct calibration *c, struct rcc_model *model,
                   const char *host) {
  struct rcc_fit_sample sel[CAL_MAX_SAMPLES];
  struct rcc_model pp = *model;
  char err[512], comment[4096];
  int n = cal_select(c, false, sel);
  ringcc_result_t r = rcc_model_fit(sel, n, 1, model, err, sizeof err);
  if (r == RINGCC_SUCCESS) {
    n = cal_select(c, true, sel);
    r = rcc_model_fit(sel, n, 0, &pp, err, sizeof err);
  }
  if (r == RINGCC_SUCCESS) return cal_write(c, model, &pp, host);
  cal_report(c, model, &pp, comment, sizeof comment);
  fprintf(stderr, PROG_NAME ": --calibrate: %s; nothing written\n", err);
  return BC_EXIT_FAILED;
}

static int calibrate(struct bench *b) {
  static struct calibration cal;
  struct calibration *c = &cal;
  struct rcc_model model = rcc_model_defaults;
  char host[64];
  int32_t status = 0;

  if (!cal_one_host(b, host) || b->nranks < 2) {
    if (b->rank == 0)
      fprintf(stderr, PROG_NAME ": --calibrate measures one machine: run at "
              "least 2 ranks, all on one host (nranks %d)\n", b->nranks);
    return BC_EXIT_USAGE;
  }
  c->b = b;
  c->sbuf = alloc_touched(CAL_BUF_BYTES);
  c->rbuf = alloc_touched(CAL_BUF_BYTES);
  memset(c->sbuf, 0, CAL_BUF_BYTES); /* zeros: any sum is exact */
  if (b->rank == 0)
    printf("# " PROG_NAME " --calibrate: %d ranks on %s\n", b->nranks, host);
  cal_link(c, RCC_LINK_SHM);
  cal_link(c, RCC_LINK_TCP);
  model.gamma_us_per_byte = cal_measure(c);
  model.cache_bytes = rcc_tuner_cache_bytes();
  if (b->rank == 0)
    printf("# the reduction kernel alone (float32 sum, every rank at once): "
           "%.2f GB/s; last-level cache %.0f MiB: beyond it (an allreduce of "
           "more than %.0f KiB over %d ranks) beta_mem applies\n",
           1e-3 / model.gamma_us_per_byte, model.cache_bytes / 1048576.0,
           model.cache_bytes / (4.0 * b->nranks) / 1024.0, b->nranks);
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    for (int k = 0; k < 2; k++)
      check_call(b, ringcc_comm_destroy(c->link_comms[l][k]),
                 "ringcc_comm_destroy", "(--calibrate)");
  if (b->rank == 0) {
    status = cal_fit(c, &model, host);
    fflush(stdout);
  }
  free(c->sbuf);
  free(c->rbuf);
  check_call(b, ringcc_bcast(&status, 1, RINGCC_INT32, 0, b->comm, NULL),
             "ringcc_bcast", "(--calibrate status)");
  return status;
}


int main(int argc, char **argv) {
  static struct bench bench;
  struct bench *b = &bench;
  struct bc_options o;
  char err[512], library[64];
  const char *usage_err = bc_parse_options(
      argc, argv,
      BC_OPT_EVERY | BC_OPT_DEVICE | BC_OPT_CALIBRATE | BC_OPT_REGISTER |
          BC_OPT_GROUP,
      &o, err, sizeof err);
  if (usage_err == NULL && o.group &&
      ((o.coll != BC_SENDRECV && o.coll != BC_ALLTOALL) || o.device)) {
    snprintf(err, sizeof err, "--group: sendrecv or alltoall, on host "
             "buffers (grouped sends and receives take host buffers)");
    usage_err = err;
  }
  if (usage_err == NULL && o.help) {
    usage(stdout);
    exit(0);
  }
  b->o = &o;

  if (o.device && usage_err == NULL) dev_select(); /* before init */
  ringcc_result_t r = ringcc_comm_init_env(&b->comm, NULL);
  if (r != RINGCC_SUCCESS && usage_err != NULL) {
    fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", usage_err);
    return BC_EXIT_USAGE;
  }
  check_call(NULL, r, "ringcc_comm_init_env", NULL);
  g_bench = b;
  check_call(b, ringcc_comm_rank(b->comm, &b->rank), "ringcc_comm_rank", NULL);
  check_call(b, ringcc_comm_size(b->comm, &b->nranks), "ringcc_comm_size", NULL);
  if (usage_err == NULL)
    usage_err = bc_check_nranks(&o, b->nranks, err, sizeof err);
  if (usage_err != NULL) {
    if (b->rank == 0)
      fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", usage_err);
    finish(b, BC_EXIT_USAGE);
  }
  if (o.calibrate) finish(b, calibrate(b));

  int version = 0;
  check_call(NULL, ringcc_get_version(&version), "ringcc_get_version", NULL);
  snprintf(library, sizeof library, "libringcc %d.%d.%d", version / 10000,
           version / 100 % 100, version % 100);
  struct bc_backend be = {
      .prog = PROG_NAME,
      .library = library,
      .call_desc = o.device ? "device buffers (--device), one stream, "
                              "synchronized after the loop"
                   : o.register_buffers
                       ? "registered host buffers (ringcc_mem_alloc + "
                         "ringcc_comm_register, --register), NULL stream"
                       : "host buffers, NULL stream",
      .rs_in_place_at_own_block = true,
      .ctx = b,
      .call = rcc_call,
      .barrier = rcc_barrier,
      .max_double = rcc_max_double,
      .sum_ll = rcc_sum_ll,
      .allgather_bytes = rcc_allgather_bytes,
      .abort_job = rcc_abort_job,
  };
  if (o.register_buffers && !o.device) {
    be.alloc_host = reg_alloc_host;
    be.free_host = reg_free_host;
  }
  if (o.device) {
    be.alloc_buffers = dev_alloc_buffers;
    be.stage_in = dev_stage_in;
    be.stage_out = dev_stage_out;
    be.sync = dev_sync_calls;
    be.graph_begin = dev_graph_begin_calls;
    be.graph_end = dev_graph_end_calls;
    be.graph_launch = dev_graph_launch_calls;
  }
  finish(b, bc_run(&be, &o, b->rank, b->nranks));
}
