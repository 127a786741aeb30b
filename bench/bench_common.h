/*
 * bench_common.h - the measuring core shared by bench/mpi_bench.c and
 * bench/gloo_bench.cc.
 *
 * It follows tools/ringcc-bench.c step for step, so the three programs differ
 * only in the library they call: the same sizes (-e down by -f, plus -b), the
 * same inputs (float32, element i of rank q = (7i + 131q) mod 1021 - 510, so
 * any order of summation is exact), the same loop per size and placement
 * (fill, WARMUP calls, barrier, ITERS timed calls, per-call average, max over
 * ranks; with -C 1 fill again, one more call, every element checked and the
 * wrong ones summed over ranks), the same nccl-tests bus-bandwidth factors,
 * and the same output: ringcc-bench's text rows and, with --json FILE, its
 * JSON array. One parser (bench/summarize.py) reads all three.
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

enum bc_coll { BC_ALLREDUCE, BC_REDUCE_SCATTER, BC_ALLGATHER, BC_NUM_COLLS };

struct bc_options {
  enum bc_coll coll;
  size_t min_bytes, max_bytes, factor;
  int iters, warmup, check;
  double min_time; /* -m: seconds of timed iterations at least */
  int in_place;          /* 1: also measure the in-place group */
  const char *json_path; /* NULL: no JSON */
  int help;              /* -h: print bc_usage and exit 0 */
  /* Only for programs that fork their own ranks (BC_OPT_FORK). */
  int nranks;
  int watchdog_s;
};

/* One size, as ringcc-bench plans it. */
struct bc_plan {
  size_t requested; /* the size from -b/-e/-f */
  size_t bytes;     /* the nccl-tests "size": requested, rounded down */
  size_t count;     /* bytes / 4 */
  size_t arg;       /* the count argument of the call (per-rank block for
                       reduce_scatter and allgather) */
};

struct bc_result {
  bool valid; /* false: not measured (in-place group switched off) */
  int iters;  /* timed iterations */
  double time_us, algbw, busbw;
  long long wrong; /* -1: not checked */
};

struct bc_backend {
  const char *prog;    /* "mpi-bench" */
  const char *library; /* "Open MPI v4.1.4" */
  const char *call_desc; /* one header line: what a call is */
  /* Where an in-place reduce_scatter leaves this rank's block: false = at the
   * start of recvbuf (MPI_IN_PLACE), true = at recvbuf + rank*recvcount. */
  bool rs_in_place_at_own_block;
  void *ctx;
  /* One call of o->coll on plan p. sbuf/rbuf are the program's buffers; in
   * place, the input is in rbuf. Returns 0, or -1 after printing why. */
  int (*call)(void *ctx, enum bc_coll coll, const struct bc_plan *p,
              bool in_place, float *sbuf, float *rbuf);
  void (*barrier)(void *ctx);
  double (*max_double)(void *ctx, double mine);
  long long (*sum_ll)(void *ctx, long long mine);
  /* every rank's `bytes` bytes of `mine`, in rank order, into `all` */
  void (*allgather_bytes)(void *ctx, const void *mine, void *all, size_t bytes);
  void (*abort_job)(void *ctx); /* never returns */
};

/* Flags for bc_parse_options. */
#define BC_OPT_FORK 1 /* accept -N NRANKS and -T SECONDS */

/* Parses argv into *o. Returns NULL, or the message of a usage error (put in
 * err). -h sets o->help (the caller prints bc_usage). */
const char *bc_parse_options(int argc, char **argv, int flags,
                             struct bc_options *o, char *err, size_t errlen);
void bc_usage(FILE *f, const char *prog, const char *launch, int flags);

/* Runs every size on this rank; rank 0 prints. Returns the exit status
 * (0, BC_EXIT_FAILED or BC_EXIT_WRONG); every rank returns the same. */
int bc_run(const struct bc_backend *be, const struct bc_options *o, int rank,
           int nranks);

const char *bc_coll_name(enum bc_coll coll);

#ifdef __cplusplus
}
#endif

#endif /* RINGCC_BENCH_COMMON_H */
