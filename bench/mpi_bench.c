/*
 * mpi_bench.c - ringcc-bench's measurement of MPI collectives, for the
 * side-by-side comparison (scripts/bench-compare.sh).
 *
 *   mpirun -np 4 mpi-bench --coll allreduce -b 8 -e 64M -f 2 [--json FILE]
 *
 * The calls, on MPI_COMM_WORLD with host buffers, float32 and MPI_SUM:
 *   allreduce       MPI_Allreduce(sendbuf, recvbuf, count, ...)
 *   reduce_scatter  MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, ...)
 *   allgather       MPI_Allgather(sendbuf, count, ..., recvbuf, count, ...)
 * In place, sendbuf is MPI_IN_PLACE (the input is in recvbuf; a
 * reduce_scatter leaves this rank's block at the start of recvbuf).
 * Everything else - options, sizes, inputs, the timed loop, the check of
 * every element, the columns and the JSON - is bench_common.c, the
 * measurement of tools/ringcc-bench.c too.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define PROG_NAME "mpi-bench"

static const char *const call_descs[BC_NUM_COLLS] = {
    [BC_ALLREDUCE] = "MPI_Allreduce(sendbuf | MPI_IN_PLACE, recvbuf, count, "
                     "MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), host buffers",
    [BC_REDUCE_SCATTER] = "MPI_Reduce_scatter_block(sendbuf | MPI_IN_PLACE, "
                          "recvbuf, count/n, MPI_FLOAT, MPI_SUM, "
                          "MPI_COMM_WORLD), host buffers",
    [BC_ALLGATHER] = "MPI_Allgather(sendbuf | MPI_IN_PLACE, count/n, MPI_FLOAT, "
                     "recvbuf, count/n, MPI_FLOAT, MPI_COMM_WORLD), host buffers",
    [BC_GATHER] = "MPI_Gather(sendbuf, count/n, MPI_FLOAT, recvbuf, count/n, "
                  "MPI_FLOAT, 0, MPI_COMM_WORLD), host buffers",
    [BC_SCATTER] = "MPI_Scatter(sendbuf, count/n, MPI_FLOAT, recvbuf, "
                   "count/n, MPI_FLOAT, 0, MPI_COMM_WORLD), host buffers",
    [BC_ALLGATHERV] = "MPI_Allgatherv(sendbuf, counts[rank], MPI_FLOAT, "
                      "recvbuf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD), "
                      "host buffers",
    [BC_ALLTOALLV] = "MPI_Alltoallv(sendbuf, scounts, sdispls, MPI_FLOAT, "
                     "recvbuf, rcounts, rdispls, MPI_FLOAT, MPI_COMM_WORLD), "
                     "host buffers",
};

struct mpi_ctx {
  int rank, nranks;
  int *vc[4]; /* sendcounts, sdispls, recvcounts, rdispls (bc_vcount) */
};

/* The uneven rule's counts and displacements, made on every call as
 * ringcc-bench makes them. */
static void v_arrays(struct mpi_ctx *c, enum bc_coll coll, size_t arg) {
  int n = c->nranks, sat = 0, rat = 0;
  for (int k = 0; k < 4; k++)
    if (c->vc[k] == NULL && (c->vc[k] = calloc((size_t)n, sizeof(int))) == NULL)
      MPI_Abort(MPI_COMM_WORLD, BC_EXIT_FAILED);
  for (int q = 0; q < n; q++) {
    c->vc[0][q] = (int)bc_vcount(coll, n, arg, c->rank, q);
    c->vc[1][q] = sat;
    c->vc[2][q] = (int)bc_vcount(coll, n, arg, q, c->rank);
    c->vc[3][q] = rat;
    sat += coll == BC_ALLTOALLV ? c->vc[0][q] : 0;
    rat += c->vc[2][q];
  }
}

static void fail(struct mpi_ctx *c, const char *call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  msg[0] = '\0';
  MPI_Error_string(rc, msg, &len);
  fprintf(stderr, PROG_NAME ": rank %d: %s failed: %s\n", c->rank, call, msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, BC_EXIT_FAILED);
}

static int mpi_call(void *ctx, const struct bc_options *o,
                    const struct bc_plan *p, bool in_place, void *sbuf,
                    void *rbuf) {
  struct mpi_ctx *c = ctx;
  int count = (int)p->arg, rc;
  const char *call;
  void *send = in_place ? MPI_IN_PLACE : sbuf;
  switch (o->coll) {
  case BC_ALLREDUCE:
    call = "MPI_Allreduce";
    rc = MPI_Allreduce(send, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    break;
  case BC_REDUCE_SCATTER:
    call = "MPI_Reduce_scatter_block";
    rc = MPI_Reduce_scatter_block(send, rbuf, count, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
    break;
  case BC_GATHER:
    call = "MPI_Gather";
    rc = MPI_Gather(sbuf, count, MPI_FLOAT, rbuf, count, MPI_FLOAT, o->root,
                    MPI_COMM_WORLD);
    break;
  case BC_SCATTER:
    call = "MPI_Scatter";
    rc = MPI_Scatter(sbuf, count, MPI_FLOAT, rbuf, count, MPI_FLOAT, o->root,
                     MPI_COMM_WORLD);
    break;
  case BC_ALLGATHERV:
    call = "MPI_Allgatherv";
    v_arrays(c, o->coll, p->arg);
    rc = MPI_Allgatherv(sbuf, c->vc[0][0], MPI_FLOAT, rbuf, c->vc[2], c->vc[3],
                        MPI_FLOAT, MPI_COMM_WORLD);
    break;
  case BC_ALLTOALLV:
    call = "MPI_Alltoallv";
    v_arrays(c, o->coll, p->arg);
    rc = MPI_Alltoallv(sbuf, c->vc[0], c->vc[1], MPI_FLOAT, rbuf, c->vc[2],
                       c->vc[3], MPI_FLOAT, MPI_COMM_WORLD);
    break;
  default:
    call = "MPI_Allgather";
    rc = MPI_Allgather(send, count, MPI_FLOAT, rbuf, count, MPI_FLOAT,
                       MPI_COMM_WORLD);
    break;
  }
  if (rc != MPI_SUCCESS) {
    char ctxbuf[128];
    snprintf(ctxbuf, sizeof ctxbuf, "%s (%zu bytes, %s)", call, p->bytes,
             in_place ? "in place" : "out of place");
    fail(c, ctxbuf, rc);
  }
  return 0;
}

static void mpi_barrier(void *ctx) {
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) fail(ctx, "MPI_Barrier", rc);
}

static double mpi_max_double(void *ctx, double mine) {
  double all = 0;
  int rc = MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) fail(ctx, "MPI_Allreduce (max of the times)", rc);
  return all;
}

static long long mpi_sum_ll(void *ctx, long long mine) {
  long long all = 0;
  int rc = MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) fail(ctx, "MPI_Allreduce (sum of #wrong)", rc);
  return all;
}

static void mpi_allgather_bytes(void *ctx, const void *mine, void *all,
                                size_t bytes) {
  int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE,
                         MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) fail(ctx, "MPI_Allgather (rank list)", rc);
}

static void mpi_abort_job(void *ctx) {
  (void)ctx;
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, BC_EXIT_FAILED);
  exit(BC_EXIT_FAILED); /* not reached */
}

/* "Open MPI v4.1.4" out of "Open MPI v4.1.4, package: ..., ident: ...". */
static void library_name(char *out, size_t len) {
  char full[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  full[0] = '\0';
  MPI_Get_library_version(full, &n);
  full[strcspn(full, ",\n")] = '\0';
  snprintf(out, len, "%s", full[0] ? full : "MPI (unknown library)");
}

/* Rank 0 says what is wrong; every rank finalizes and exits with status. */
static int finish_early(int rank, const char *msg, int status) {
  if (rank == 0 && msg)
    fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", msg);
  MPI_Finalize();
  return status;
}

int main(int argc, char **argv) {
  struct bc_options o;
  char err[512];
  const char *usage_err = bc_parse_options(argc, argv, BC_OPT_IN_PLACE, &o, err,
                                           sizeof err);
  if (usage_err == NULL && o.max_bytes / sizeof(float) > (size_t)INT_MAX) {
    snprintf(err, sizeof err, "-e %zu: more than INT_MAX floats per call",
             o.max_bytes);
    usage_err = err;
  }

  MPI_Init(&argc, &argv);
  struct mpi_ctx ctx = {0};
  int nranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &ctx.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ctx.nranks = nranks;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (usage_err) return finish_early(ctx.rank, usage_err, BC_EXIT_USAGE);
  if (o.help) {
    if (ctx.rank == 0)
      bc_usage(stdout, "mpirun -np N " PROG_NAME, "", BC_OPT_IN_PLACE);
    return finish_early(ctx.rank, NULL, 0);
  }

  char library[128];
  library_name(library, sizeof library);
  struct bc_backend be = {
      .prog = PROG_NAME,
      .library = library,
      .call_desc = call_descs[o.coll],
      .rs_in_place_at_own_block = false,
      .ctx = &ctx,
      .call = mpi_call,
      .barrier = mpi_barrier,
      .max_double = mpi_max_double,
      .sum_ll = mpi_sum_ll,
      .allgather_bytes = mpi_allgather_bytes,
      .abort_job = mpi_abort_job,
  };
  int status = bc_run(&be, &o, ctx.rank, nranks);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
