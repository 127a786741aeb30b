/*
 * bench_common.h - the one measurement behind tools/ringcc-bench.c,
 * bench/mpi_bench.c and bench/gloo_bench.cc.
 *
 * It owns everything but the library call: the options (nccl-tests' short
 * flags with nccl-tests' meanings, the programs' own as long options), the
 * sizes (-b up to -e by the factor -f or the step -i), the inputs (element i
 * of rank q from (7i + 131q) mod 1021, chosen per datatype and op so that any
 * order of reduction gives the same, exactly representable, result), the loop
 * per size and placement (fill, WARMUP calls, barrier, ITERS timed calls,
 * per-call average over them, combined over ranks as -a says; -c times: fill
 * again, one more call, every element checked and the wrong ones summed over
 * ranks), the nccl-tests bus-bandwidth factors, and the output: the text rows
 * and, with --json FILE, the JSON array that bench/summarize.py reads. So the
 * three programs differ only in the library they call, and their rows compare
 * one for one.
 *
 * A program supplies a struct bc_backend: how to run one collective call and
 * the few helper collectives the loop needs.
 */
#ifndef RINGCC_BENCH_COMMON_H
#define RINGCC_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BC_EXIT_FAILED 1 /* a library call or the system failed */
#define BC_EXIT_USAGE 2
#define BC_EXIT_WRONG 3 /* some result element was wrong */

enum bc_coll {
  BC_ALLREDUCE,
  BC_REDUCE_SCATTER,
  BC_ALLGATHER,
  BC_BCAST,
  BC_REDUCE,
  BC_ALLTOALL,
  BC_SENDRECV,
  BC_GATHER,
  BC_SCATTER,
  BC_ALLGATHERV,
  BC_ALLTOALLV,
  BC_NUM_COLLS
};

enum bc_dtype {
  BC_INT8,
  BC_UINT8,
  BC_INT32,
  BC_UINT32,
  BC_INT64,
  BC_UINT64,
  BC_FLOAT16,
  BC_BFLOAT16,
  BC_FLOAT32,
  BC_FLOAT64,
  BC_FLOAT8_E4M3,
  BC_FLOAT8_E5M2,
  BC_NUM_DTYPES
};

enum bc_op { BC_SUM, BC_PROD, BC_MIN, BC_MAX, BC_AVG, BC_NUM_OPS };

struct bc_options {
  enum bc_coll coll;
  enum bc_dtype dtype;
  enum bc_op op;
  bool all_dtypes, all_ops;   /* -d all, -o all: one sweep of sizes each */
  size_t min_bytes, max_bytes;
  size_t factor;              /* -f: sizes multiply by it (> 1), else ... */
  size_t step_bytes;          /* -i: ... grow by this many bytes */
  int iters, warmup, root;
  int check;                  /* -c: checked calls per size (0: none) */
  int cycles;                 /* -N: sweeps of the sizes (0: until stopped) */
  int blocking;               /* -z 1: every rank waits for each call */
  int average;                /* -a: time of rank 0 (0), mean (1), min (2), max (3) */
  int cputime;                /* -C 1: the time column is the time to issue */
  int graph_launches;         /* -G: CUDA graph replays (0: no graph) */
  double min_time;            /* --min-time: seconds of timed iterations at least */
  int in_place;               /* 1: also measure the in-place group */
  const char *json_path;      /* NULL: no JSON */
  int help;                   /* -h: the caller prints its usage and exits 0 */
  bool device;           /* --device (BC_OPT_DEVICE) */
  bool calibrate;        /* --calibrate (BC_OPT_CALIBRATE) */
  bool register_buffers; /* --register, -R 1|2 (BC_OPT_REGISTER) */
  bool group;            /* --group (BC_OPT_GROUP) */
  /* Only for programs that fork their own ranks (BC_OPT_FORK). */
  int nranks;
  int watchdog_s;
};

/* One size. */
struct bc_plan {
  size_t requested; /* the size from -b/-e/-f */
  size_t bytes;     /* the nccl-tests "size": requested, rounded down */
  size_t count;     /* bytes / element size */
  size_t arg;       /* the count argument of the call (per-rank block where
                       the collective works in blocks) */
};

struct bc_backend {
  const char *prog;      /* "mpi-bench" */
  const char *library;   /* "Open MPI v4.1.4" */
  const char *call_desc; /* one header line: what a call is */
  /* Where an in-place reduce_scatter leaves this rank's block: false = at the
   * start of recvbuf (MPI_IN_PLACE), true = at recvbuf + rank*recvcount. */
  bool rs_in_place_at_own_block;
  void *ctx;
  /* One call of o->coll on plan p. sbuf/rbuf are the host buffers; in place,
   * the input is in rbuf. Returns 0, or -1 after printing why. */
  int (*call)(void *ctx, const struct bc_options *o, const struct bc_plan *p,
              bool in_place, void *sbuf, void *rbuf);
  void (*barrier)(void *ctx);
  double (*max_double)(void *ctx, double mine);
  long long (*sum_ll)(void *ctx, long long mine);
  /* every rank's `bytes` bytes of `mine`, in rank order, into `all` */
  void (*allgather_bytes)(void *ctx, const void *mine, void *all, size_t bytes);
  void (*abort_job)(void *ctx); /* never returns */
  /* Optional (NULL: none), for calls on buffers other than the host ones
   * (ringcc-bench -G): buffers of `bytes` for the calls, made once before
   * the first size; the host inputs copied to them after each fill; the
   * result copied back before a check; waiting until the calls issued have
   * run, after the warm-up and after the timed loop. */
  void (*alloc_buffers)(void *ctx, size_t bytes);
  void (*stage_in)(void *ctx, const struct bc_plan *p, const void *sbuf,
                   const void *rbuf);
  void (*stage_out)(void *ctx, const struct bc_plan *p, void *rbuf);
  void (*sync)(void *ctx);
  /* Optional (NULL: page-aligned malloc'd memory, touched): the two host
   * buffers of `bytes` each, made on every rank at once, before the first
   * size (ringcc-bench --register: shared memory, registered); and how
   * they go at the end. alloc_host does not return on failure. */
  void *(*alloc_host)(void *ctx, size_t bytes);
  void (*free_host)(void *ctx, void *p);
  /* Needed for -G N (device buffers only): start capturing the calls on the
   * stream, end the capture and make the graph, launch it once. */
  void (*graph_begin)(void *ctx);
  void (*graph_end)(void *ctx);
  void (*graph_launch)(void *ctx);
};

/* Flags for bc_parse_options: what a program accepts beyond nccl-tests'
 * -b -e -i -f -n -m 1 -w -c -a -z -N -C -g 1 -t 1 -G 0 -d float32 -o sum,
 * --coll allreduce | reduce_scatter | allgather, --min-time, --json, -h. */
#define BC_OPT_FORK 1      /* --nranks N and -T SECONDS */
#define BC_OPT_IN_PLACE 2  /* --in-place 0|1 */
#define BC_OPT_EVERY 4     /* every collective, datatype and op; -r ROOT;
                              the collective from the program's name
                              (all_reduce_perf ...) */
#define BC_OPT_DEVICE 8    /* --device; -G N (CUDA graphs) with it */
#define BC_OPT_CALIBRATE 16 /* --calibrate */
#define BC_OPT_REGISTER 32 /* --register, -R 1|2 */
#define BC_OPT_GROUP 64    /* --group: sendrecv, alltoall as one group of
                              sends and receives */

/* Parses argv into *o. Returns NULL, or the message of a usage error (put in
 * err). -h sets o->help and stops there. */
const char *bc_parse_options(int argc, char **argv, int flags,
                             struct bc_options *o, char *err, size_t errlen);
/* Usage errors that need the number of ranks (a root that is no rank,
 * sendrecv alone). Returns NULL or the message (in err). */
const char *bc_check_nranks(const struct bc_options *o, int nranks, char *err,
                            size_t errlen);
/* The usage text of the programs that take the flags BC_OPT_IN_PLACE and
 * maybe BC_OPT_FORK (mpi-bench, gloo-bench). */
void bc_usage(FILE *f, const char *prog, const char *launch, int flags);
/* The options every program shares, with nccl-tests' meanings (one part of
 * each program's usage text). */
void bc_usage_common(FILE *f);
/* The collective a program name selects ("all_reduce_perf", a path to it),
 * or -1. */
int bc_coll_of_prog(const char *argv0);

/* Runs every size on this rank; rank 0 prints. Returns the exit status
 * (0, BC_EXIT_FAILED, BC_EXIT_USAGE when the JSON file cannot be written,
 * or BC_EXIT_WRONG); every rank returns the same. */
int bc_run(const struct bc_backend *be, const struct bc_options *o, int rank,
           int nranks);

/* For the programs that fork their own ranks (BC_OPT_FORK): forks
 * o->nranks processes, rank r running rank_main(o, r, arg) and exiting with
 * what it returns, and waits for them. The first rank that fails (but for
 * BC_EXIT_WRONG, which every rank returns alike) stops the others; after -T
 * seconds (124), or on SIGTERM/SIGINT/SIGHUP (128 + signal), all are
 * stopped. Returns the worst exit status, BC_EXIT_FAILED if a fork failed.
 * prog names the program in its messages. */
int bc_fork_ranks(const char *prog, const struct bc_options *o,
                  int (*rank_main)(const struct bc_options *o, int rank,
                                   void *arg),
                  void *arg);

const char *bc_coll_name(enum bc_coll coll);
/* The uneven collectives' counts (the rule in every program's --help): with
 * b = the plan's per-rank block (arg) and n ranks, rank `from` sends rank
 * `to` floor(2*b*((from+to) mod n)/(n-1)) elements (alltoallv), and rank
 * `from` contributes floor(2*b*from/(n-1)) (allgatherv; `to` ignored); one
 * rank: b. Each rank's total is at most n*b (the buffers' size), some
 * blocks are empty. Displacements are the running sums, blocks in rank
 * order (as torch's split sizes). */
size_t bc_vcount(enum bc_coll coll, int nranks, size_t arg, int from, int to);
const char *bc_dtype_name(enum bc_dtype dt);
size_t bc_dtype_size(enum bc_dtype dt);
const char *bc_op_name(enum bc_op op);
bool bc_coll_has_op(enum bc_coll coll);
bool bc_coll_has_root(enum bc_coll coll);

/* "(allreduce, 1024 bytes, float32, sum, in place)": what a failure message
 * names. */
void bc_call_context(const struct bc_options *o, const struct bc_plan *p,
                     bool in_place, char *buf, size_t len);

/* CLOCK_MONOTONIC seconds. */
double bc_now_s(void);
/* bytes (at least 64), page-aligned and touched; NULL with errno set. */
void *bc_alloc_touched(size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* RINGCC_BENCH_COMMON_H */
