/*
 * test_errors.c - bad input gives RINGCC_ERR_INVALID_ARGUMENT with a message
 * that names the argument, nothing is sent, and the communicator keeps
 * working; init failures (bad arguments, a rank that never comes) fail
 * cleanly and in time; the error strings and version.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* ---- helpers --------------------------------------------------------------- */

/* r must be INVALID_ARGUMENT and msg must name the argument. Prints the
 * failure as rank's; returns true when both hold. */
static bool expect_invalid(int rank, const char *call, ringcc_result_t r,
                           const char *msg, const char *arg_name) {
  if (r != RINGCC_ERR_INVALID_ARGUMENT) {
    h_fail_rank(rank, "%s returned %d (%s), expected RINGCC_ERR_INVALID_ARGUMENT",
                call, (int)r, ringcc_strerror(r));
    return false;
  }
  if (msg == NULL || msg[0] == '\0') {
    h_fail_rank(rank, "%s: the last error message is empty", call);
    return false;
  }
  if (arg_name != NULL && strcasestr(msg, arg_name) == NULL) {
    h_fail_rank(rank, "%s: the message \"%s\" does not name the argument "
                      "\"%s\"", call, msg, arg_name);
    return false;
  }
  return true;
}

/* A correct allreduce on every rank: int32 sum of rank+1+i. */
static bool good_allreduce(h_ctx_t *ctx, const char *after) {
  int32_t send[5], recv[5];
  for (int i = 0; i < 5; i++) {
    send[i] = ctx->rank + 1 + i;
    recv[i] = -7;
  }
  ringcc_result_t r = ringcc_allreduce(send, recv, 5, RINGCC_INT32, RINGCC_SUM,
                                       ctx->comm, NULL);
  if (r != RINGCC_SUCCESS) {
    h_fail(ctx, "the allreduce after %s returned %d (%s): %s", after, (int)r,
           ringcc_strerror(r), ringcc_comm_last_error(ctx->comm));
    return false;
  }
  int n = ctx->nranks;
  for (int i = 0; i < 5; i++) {
    int32_t want = n * (n + 1) / 2 + n * i;
    if (recv[i] != want) {
      h_fail(ctx, "the allreduce after %s: element %d is %d, expected %d",
             after, i, recv[i], want);
      return false;
    }
  }
  return true;
}

/* ---- NULL communicator (no ranks needed) ------------------------------------ */

Test(errors, null_comm, .timeout = 20) {
  int32_t a[4] = {1, 2, 3, 4}, b[4];
  int x;
  struct {
    const char *call;
    ringcc_result_t r;
  } calls[] = {
      {"ringcc_allreduce", ringcc_allreduce(a, b, 4, RINGCC_INT32, RINGCC_SUM,
                                            NULL, NULL)},
      {"ringcc_reduce_scatter",
       ringcc_reduce_scatter(a, b, 1, RINGCC_INT32, RINGCC_SUM, NULL, NULL)},
      {"ringcc_allgather", ringcc_allgather(a, b, 1, RINGCC_INT32, NULL, NULL)},
      {"ringcc_bcast", ringcc_bcast(a, 4, RINGCC_INT32, 0, NULL, NULL)},
      {"ringcc_reduce", ringcc_reduce(a, b, 4, RINGCC_INT32, RINGCC_SUM, 0,
                                      NULL, NULL)},
      {"ringcc_alltoall", ringcc_alltoall(a, b, 1, RINGCC_INT32, NULL, NULL)},
      {"ringcc_send", ringcc_send(a, 4, RINGCC_INT32, 0, NULL, NULL)},
      {"ringcc_recv", ringcc_recv(b, 4, RINGCC_INT32, 0, NULL, NULL)},
      {"ringcc_barrier", ringcc_barrier(NULL, NULL)},
      {"ringcc_comm_rank", ringcc_comm_rank(NULL, &x)},
      {"ringcc_comm_size", ringcc_comm_size(NULL, &x)},
      {"ringcc_comm_split", ringcc_comm_split(NULL, 0, 0, (ringcc_comm_t[1]){0})},
      {"ringcc_comm_split_type",
       ringcc_comm_split_type(NULL, RINGCC_SPLIT_HOST, 0, (ringcc_comm_t[1]){0})},
      {"ringcc_comm_get_async_error",
       ringcc_comm_get_async_error(NULL, (ringcc_result_t[1]){0})},
  };
  /* The message is read right after each call, so redo each call here. */
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    cr_expect(calls[i].r == RINGCC_ERR_INVALID_ARGUMENT,
              "%s with a NULL comm returned %d (%s)", calls[i].call,
              (int)calls[i].r, ringcc_strerror(calls[i].r));
  ringcc_result_t r =
      ringcc_allreduce(a, b, 4, RINGCC_INT32, RINGCC_SUM, NULL, NULL);
  cr_assert(expect_invalid(-1, "ringcc_allreduce(comm=NULL)", r,
                           ringcc_comm_last_error(NULL), "comm"));
  r = ringcc_barrier(NULL, NULL);
  cr_assert(expect_invalid(-1, "ringcc_barrier(comm=NULL)", r,
                           ringcc_comm_last_error(NULL), "comm"));
  r = ringcc_comm_rank(NULL, &x);
  cr_assert(expect_invalid(-1, "ringcc_comm_rank(comm=NULL)", r,
                           ringcc_comm_last_error(NULL), "comm"));
  r = ringcc_send(a, 4, RINGCC_INT32, 0, NULL, NULL);
  cr_assert(expect_invalid(-1, "ringcc_send(comm=NULL)", r,
                           ringcc_comm_last_error(NULL), "comm"));
}

/* ---- strings and version --------------------------------------------------- */

Test(errors, strerror_every_code, .timeout = 10) {
  for (int i = 0; i < RINGCC_NUM_RESULTS; i++) {
    const char *s = ringcc_strerror((ringcc_result_t)i);
    cr_assert(s != NULL && s[0] != '\0', "ringcc_strerror(%d) is empty", i);
    for (int j = 0; j < i; j++)
      cr_assert(strcmp(s, ringcc_strerror((ringcc_result_t)j)) != 0,
                "ringcc_strerror(%d) and (%d) are both \"%s\"", i, j, s);
  }
  int unknown[] = {RINGCC_NUM_RESULTS, 99, 12345, -1};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char *s = ringcc_strerror((ringcc_result_t)unknown[i]);
    cr_assert(s != NULL && s[0] != '\0', "ringcc_strerror(%d) is NULL or empty",
              unknown[i]);
    cr_assert(strcmp(s, ringcc_strerror(RINGCC_SUCCESS)) != 0,
              "ringcc_strerror(%d) reads as success: \"%s\"", unknown[i], s);
  }
}

Test(errors, version, .timeout = 10) {
  int v = -1;
  cr_assert_eq(ringcc_get_version(&v), RINGCC_SUCCESS);
  cr_assert_eq(v, RINGCC_VERSION, "version %d, header says %d", v,
               RINGCC_VERSION);
  ringcc_result_t r = ringcc_get_version(NULL);
  cr_assert(expect_invalid(-1, "ringcc_get_version(NULL)", r,
                           ringcc_comm_last_error(NULL), "version"));
}

Test(errors, datatype_and_op_names, .timeout = 10) {
  for (int d = 0; d < RINGCC_NUM_DATATYPES; d++) {
    ringcc_datatype_t dt = (ringcc_datatype_t)d;
    cr_assert_eq(ringcc_datatype_size(dt), h_dt_size(dt), "size of %s",
                 h_dt_name(dt));
    cr_assert(ringcc_datatype_name(dt) != NULL &&
                  strcmp(ringcc_datatype_name(dt), h_dt_name(dt)) == 0,
              "name of datatype %d", d);
  }
  for (int o = 0; o < RINGCC_NUM_OPS; o++)
    cr_assert(ringcc_op_name((ringcc_op_t)o) != NULL &&
                  strcmp(ringcc_op_name((ringcc_op_t)o),
                         h_op_name((ringcc_op_t)o)) == 0,
              "name of op %d", o);
  int bad[] = {-1, 99, RINGCC_NUM_DATATYPES};
  for (size_t i = 0; i < 3; i++) {
    cr_assert_eq(ringcc_datatype_size((ringcc_datatype_t)bad[i]), 0);
    cr_assert_null(ringcc_datatype_name((ringcc_datatype_t)bad[i]));
  }
  cr_assert_null(ringcc_op_name((ringcc_op_t)-1));
  cr_assert_null(ringcc_op_name(RINGCC_NUM_OPS));
}

/* ---- ringcc_comm_init argument checks ---------------------------------------- */

/* Runs in a forked rank with a deadline, so that a check done too late (after
 * trying to connect) shows as a failure instead of a hang. */
static int init_bad_arguments(h_ctx_t *ctx) {
  (void)ctx;
  ringcc_unique_id_t id, zero, garbage;
  if (ringcc_get_unique_id(&id) != RINGCC_SUCCESS)
    return h_fail_rank(0, "ringcc_get_unique_id failed: %s",
                       ringcc_comm_last_error(NULL));
  memset(&zero, 0, sizeof zero);
  uint64_t h = 0x9a7b;
  for (size_t i = 0; i < sizeof garbage.internal; i++) {
    h = h_mix64(h);
    garbage.internal[i] = (char)h;
  }
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 3000;
  ringcc_comm_t comm = NULL;
  int bad = 0;
  struct {
    const char *call;
    int nranks, rank;
    const ringcc_unique_id_t *id;
    const char *arg;
  } cases[] = {
      {"ringcc_comm_init(nranks=2, rank=2)", 2, 2, &id, "rank"},
      {"ringcc_comm_init(nranks=2, rank=7)", 2, 7, &id, "rank"},
      {"ringcc_comm_init(nranks=2, rank=-1)", 2, -1, &id, "rank"},
      {"ringcc_comm_init(nranks=0, rank=0)", 0, 0, &id, "nranks"},
      {"ringcc_comm_init(nranks=-3, rank=0)", -3, 0, &id, "nranks"},
      {"ringcc_comm_init(id=NULL)", 2, 0, NULL, "id"},
      {"ringcc_comm_init(id=zeroed bytes)", 2, 0, &zero, "id"},
      {"ringcc_comm_init(id=random bytes)", 2, 0, &garbage, "id"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double t0 = h_now_s();
    ringcc_result_t r =
        ringcc_comm_init(&comm, cases[i].nranks, cases[i].id, cases[i].rank, &cfg);
    double secs = h_now_s() - t0;
    if (!expect_invalid(0, cases[i].call, r, ringcc_comm_last_error(NULL),
                        cases[i].arg))
      bad++;
    else if (secs > 2.0)
      bad += h_fail_rank(0, "%s took %.2f s: arguments should be checked "
                            "before anything waits", cases[i].call, secs);
  }
  ringcc_result_t r = ringcc_comm_init(NULL, 2, &id, 0, &cfg);
  if (!expect_invalid(0, "ringcc_comm_init(comm=NULL)", r,
                      ringcc_comm_last_error(NULL), "comm"))
    bad++;

  /* Configs that are not what RINGCC_CONFIG_INIT made, or hold bad values. */
  struct bad_config {
    const char *call;
    ringcc_config_t cfg;
    const char *arg;
  } cfgs[6];
  int ncfg = 0;
  ringcc_config_t c = RINGCC_CONFIG_INIT;
  c.magic = 0;
  cfgs[ncfg++] = (struct bad_config){"ringcc_comm_init(config.magic=0)", c, "config"};
  c = (ringcc_config_t)RINGCC_CONFIG_INIT;
  c.size = 0;
  cfgs[ncfg++] = (struct bad_config){"ringcc_comm_init(config.size=0)", c, "config"};
  c = (ringcc_config_t)RINGCC_CONFIG_INIT;
  c.size = 8;
  cfgs[ncfg++] = (struct bad_config){"ringcc_comm_init(config.size=8)", c, "config"};
  c = (ringcc_config_t)RINGCC_CONFIG_INIT;
  c.algo = 99;
  cfgs[ncfg++] = (struct bad_config){"ringcc_comm_init(config.algo=99)", c, "algo"};
  c = (ringcc_config_t)RINGCC_CONFIG_INIT;
  c.nslots = 0;
  cfgs[ncfg++] = (struct bad_config){"ringcc_comm_init(config.nslots=0)", c, "nslots"};
  c = (ringcc_config_t)RINGCC_CONFIG_INIT;
  c.chunk_bytes = 0;
  cfgs[ncfg++] = (struct bad_config){"ringcc_comm_init(config.chunk_bytes=0)", c,
                                   "chunk_bytes"};
  for (int i = 0; i < ncfg; i++) {
    cfgs[i].cfg.timeout_ms = 3000;
    double t0 = h_now_s();
    r = ringcc_comm_init(&comm, 2, &id, 0, &cfgs[i].cfg);
    double secs = h_now_s() - t0;
    if (!expect_invalid(0, cfgs[i].call, r, ringcc_comm_last_error(NULL),
                        cfgs[i].arg))
      bad++;
    else if (secs > 2.0)
      bad += h_fail_rank(0, "%s took %.2f s: the config should be checked "
                            "before anything waits", cfgs[i].call, secs);
  }
  return bad;
}

Test(errors, comm_init_bad_arguments, .timeout = 60) {
  h_run_opts_t o = {.nranks = 1, .body = init_bad_arguments, .skip_init = true,
                    .no_id = true, .timeout_s = 40,
                    .name = "comm_init bad arguments"};
  cr_assert(h_run(&o), "see the lines above");
}

/* ---- the variables that choose algorithms and network plugins ------------- */

/* RINGCC_ALGO and RINGCC_NET name table entries: a name that is none fails
 * init with INVALID_ARGUMENT naming the variable and the names there are;
 * every spelling that is one runs (over TCP, so that RINGCC_NET has edges). */
typedef struct {
  const char *var, *value;
  ringcc_result_t want;
} name_case_t;

static int init_with_names(h_ctx_t *ctx) {
  const name_case_t *c = ctx->arg;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 5000;
  cfg.shm_disable = 1;
  ringcc_comm_t comm = NULL;
  setenv(c->var, c->value, 1);
  ringcc_result_t r = ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank,
                                       &cfg);
  char call[96];
  snprintf(call, sizeof call, "ringcc_comm_init with %s=%s", c->var, c->value);
  if (c->want == RINGCC_ERR_INVALID_ARGUMENT)
    return expect_invalid(ctx->rank, call, r, ringcc_comm_last_error(NULL),
                          c->var)
               ? 0
               : 1;
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "%s: %s", call, ringcc_comm_last_error(NULL));
  double x = ctx->rank + 1, y = 0;
  r = ringcc_allreduce(&x, &y, 1, RINGCC_FLOAT64, RINGCC_SUM, comm, NULL);
  ringcc_comm_destroy(comm);
  if (r != RINGCC_SUCCESS || y != 3.0)
    return h_fail(ctx, "%s: allreduce gave %g (%s)", call, y,
                  ringcc_strerror(r));
  return 0;
}

Test(errors, algorithm_and_plugin_names, .timeout = 120) {
  static const name_case_t cases[] = {
      {"RINGCC_ALGO", "oneshot", RINGCC_SUCCESS},
      {"RINGCC_ALGO", "CMA", RINGCC_SUCCESS},
      {"RINGCC_ALGO", "direct", RINGCC_SUCCESS},
      {"RINGCC_ALGO", "zerocopy", RINGCC_SUCCESS},
      {"RINGCC_ALGO", "One-Shot", RINGCC_SUCCESS}, /* as the logs name it */
      {"RINGCC_ALGO", "zero_copy", RINGCC_SUCCESS},
      {"RINGCC_ALGO", "halving", RINGCC_ERR_INVALID_ARGUMENT},
      {"RINGCC_ALGO", "-", RINGCC_ERR_INVALID_ARGUMENT},
      {"RINGCC_NET", "Socket", RINGCC_SUCCESS},
      {"RINGCC_NET", "socket", RINGCC_SUCCESS},
      {"RINGCC_NET", "carrier-pigeon", RINGCC_ERR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    h_run_opts_t o = {.nranks = 2, .body = init_with_names,
                      .arg = (void *)&cases[i], .skip_init = true,
                      .timeout_s = 30, .name = cases[i].value};
    cr_expect(h_run(&o), "%s=%s: see the lines above", cases[i].var,
              cases[i].value);
  }
}

/* ---- a rank that never comes ---------------------------------------------- */

typedef struct {
  int missing; /* this rank never calls ringcc_comm_init */
} missing_arg_t;

static int init_with_missing_rank(h_ctx_t *ctx) {
  const missing_arg_t *a = ctx->arg;
  if (ctx->rank == a->missing)
    return 0;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 1500;
  ringcc_comm_t comm = NULL;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank, &cfg);
  double secs = h_now_s() - t0;
  if (r != RINGCC_ERR_TIMEOUT)
    return h_fail(ctx, "ringcc_comm_init with rank %d missing returned %d (%s) "
                       "after %.2f s, expected RINGCC_ERR_TIMEOUT: %s",
                  a->missing, (int)r, ringcc_strerror(r), secs,
                  ringcc_comm_last_error(NULL));
  const char *msg = ringcc_comm_last_error(NULL);
  if (msg == NULL || msg[0] == '\0')
    return h_fail(ctx, "ringcc_comm_init timed out with an empty message");
  /* timeout_ms 1500: not (much) earlier, and not later than a loaded
   * 2-core machine can explain. */
  if (secs < 1.0 || secs > 10.0)
    return h_fail(ctx, "ringcc_comm_init (timeout_ms 1500) gave up after "
                       "%.2f s", secs);
  return 0;
}

static void missing_rank(int nranks, int missing) {
  missing_arg_t a = {missing};
  char name[64];
  snprintf(name, sizeof name, "init with rank %d of %d missing", missing,
           nranks);
  h_run_opts_t o = {.nranks = nranks, .body = init_with_missing_rank,
                    .arg = &a, .skip_init = true, .timeout_s = 30,
                    .name = name};
  cr_assert(h_run(&o), "see the lines above");
}

Test(errors, init_timeout_last_rank_missing, .timeout = 45) { missing_rank(3, 2); }
Test(errors, init_timeout_rank0_missing, .timeout = 45) { missing_rank(2, 0); }

/* ---- bad arguments on a live communicator ----------------------------------- */

/* Each bad call is made identically on every rank (or on one rank only when
 * it is valid nowhere else), must fail locally, and is followed by a good
 * allreduce on every rank. */
static int bad_calls(h_ctx_t *ctx) {
  ringcc_comm_t comm = ctx->comm;
  int n = ctx->nranks, me = ctx->rank;
  int32_t a[64] = {0}, b[64] = {0};
  const size_t SZ = SIZE_MAX;
  /* count * 4 fits, count * 4 * nranks does not (nranks >= 2). */
  size_t per_rank_overflow = SIZE_MAX / (4 * (size_t)n) + 1;
  int bad = 0;
  ringcc_result_t r;
  ringcc_comm_t out = NULL;
  int ival;
#define BAD(call_text, arg_name, expr)                                         \
  do {                                                                         \
    r = (expr);                                                                \
    if (!expect_invalid(me, call_text, r, ringcc_comm_last_error(comm),        \
                        arg_name))                                             \
      bad++;                                                                   \
    if (!good_allreduce(ctx, call_text))                                       \
      return 1;                                                                \
  } while (0)

  BAD("allreduce(sendbuf=NULL, count=4)", "sendbuf",
      ringcc_allreduce(NULL, b, 4, RINGCC_INT32, RINGCC_SUM, comm, NULL));
  BAD("allreduce(recvbuf=NULL, count=4)", "recvbuf",
      ringcc_allreduce(a, NULL, 4, RINGCC_INT32, RINGCC_SUM, comm, NULL));
  BAD("allreduce(datatype=99)", "datatype",
      ringcc_allreduce(a, b, 4, (ringcc_datatype_t)99, RINGCC_SUM, comm, NULL));
  BAD("allreduce(datatype=-1)", "datatype",
      ringcc_allreduce(a, b, 4, (ringcc_datatype_t)-1, RINGCC_SUM, comm, NULL));
  BAD("allreduce(datatype=RINGCC_NUM_DATATYPES)", "datatype",
      ringcc_allreduce(a, b, 4, RINGCC_NUM_DATATYPES, RINGCC_SUM, comm, NULL));
  BAD("allreduce(op=99)", "op",
      ringcc_allreduce(a, b, 4, RINGCC_INT32, (ringcc_op_t)99, comm, NULL));
  BAD("allreduce(count=SIZE_MAX/2, float32)", "count",
      ringcc_allreduce(a, b, SZ / 2, RINGCC_FLOAT32, RINGCC_SUM, comm, NULL));
  BAD("allreduce(count=SIZE_MAX/4+1, float32)", "count",
      ringcc_allreduce(a, b, SZ / 4 + 1, RINGCC_FLOAT32, RINGCC_SUM, comm, NULL));
  BAD("allreduce(count=SIZE_MAX, int64)", "count",
      ringcc_allreduce(a, b, SZ, RINGCC_INT64, RINGCC_SUM, comm, NULL));

  BAD("reduce_scatter(sendbuf=NULL, recvcount=2)", "sendbuf",
      ringcc_reduce_scatter(NULL, b, 2, RINGCC_INT32, RINGCC_SUM, comm, NULL));
  BAD("reduce_scatter(recvbuf=NULL, recvcount=2)", "recvbuf",
      ringcc_reduce_scatter(a, NULL, 2, RINGCC_INT32, RINGCC_SUM, comm, NULL));
  BAD("reduce_scatter(datatype=99)", "datatype",
      ringcc_reduce_scatter(a, b, 2, (ringcc_datatype_t)99, RINGCC_SUM, comm,
                            NULL));
  BAD("reduce_scatter(op=5)", "op",
      ringcc_reduce_scatter(a, b, 2, RINGCC_INT32, RINGCC_NUM_OPS, comm, NULL));
  BAD("reduce_scatter(recvcount=SIZE_MAX/2, float32)", "count",
      ringcc_reduce_scatter(a, b, SZ / 2, RINGCC_FLOAT32, RINGCC_SUM, comm,
                            NULL));
  if (n >= 2)
    BAD("reduce_scatter(recvcount*nranks*4 overflows)", "count",
        ringcc_reduce_scatter(a, b, per_rank_overflow, RINGCC_FLOAT32,
                              RINGCC_SUM, comm, NULL));

  BAD("allgather(sendbuf=NULL, sendcount=2)", "sendbuf",
      ringcc_allgather(NULL, b, 2, RINGCC_INT32, comm, NULL));
  BAD("allgather(recvbuf=NULL, sendcount=2)", "recvbuf",
      ringcc_allgather(a, NULL, 2, RINGCC_INT32, comm, NULL));
  BAD("allgather(datatype=-1)", "datatype",
      ringcc_allgather(a, b, 2, (ringcc_datatype_t)-1, comm, NULL));
  BAD("allgather(sendcount=SIZE_MAX/4+1, float32)", "count",
      ringcc_allgather(a, b, SZ / 4 + 1, RINGCC_FLOAT32, comm, NULL));
  if (n >= 2)
    BAD("allgather(sendcount*nranks*4 overflows)", "count",
        ringcc_allgather(a, b, per_rank_overflow, RINGCC_FLOAT32, comm, NULL));

  BAD("alltoall(sendbuf=NULL, count=2)", "sendbuf",
      ringcc_alltoall(NULL, b, 2, RINGCC_INT32, comm, NULL));
  BAD("alltoall(recvbuf=NULL, count=2)", "recvbuf",
      ringcc_alltoall(a, NULL, 2, RINGCC_INT32, comm, NULL));
  BAD("alltoall(datatype=99)", "datatype",
      ringcc_alltoall(a, b, 2, (ringcc_datatype_t)99, comm, NULL));
  if (n >= 2)
    BAD("alltoall(count*nranks*4 overflows)", "count",
        ringcc_alltoall(a, b, per_rank_overflow, RINGCC_FLOAT32, comm, NULL));

  BAD("bcast(root=nranks)", "root",
      ringcc_bcast(a, 4, RINGCC_INT32, n, comm, NULL));
  BAD("bcast(buf=NULL, count=4)", "buf",
      ringcc_bcast(NULL, 4, RINGCC_INT32, 0, comm, NULL));
  BAD("bcast(datatype=99)", "datatype",
      ringcc_bcast(a, 4, (ringcc_datatype_t)99, 0, comm, NULL));
  BAD("bcast(count=SIZE_MAX/2, int32)", "count",
      ringcc_bcast(a, SZ / 2, RINGCC_INT32, 0, comm, NULL));

  BAD("reduce(root=nranks)", "root",
      ringcc_reduce(a, b, 4, RINGCC_INT32, RINGCC_SUM, n, comm, NULL));
  BAD("reduce(op=99)", "op",
      ringcc_reduce(a, b, 4, RINGCC_INT32, (ringcc_op_t)99, 0, comm, NULL));
  BAD("reduce(datatype=-1)", "datatype",
      ringcc_reduce(a, b, 4, (ringcc_datatype_t)-1, RINGCC_SUM, 0, comm, NULL));
  BAD("reduce(sendbuf=NULL, count=4)", "sendbuf",
      ringcc_reduce(NULL, b, 4, RINGCC_INT32, RINGCC_SUM, 0, comm, NULL));
  BAD("reduce(count=SIZE_MAX/4+1, float32)", "count",
      ringcc_reduce(a, b, SZ / 4 + 1, RINGCC_FLOAT32, RINGCC_SUM, 0, comm, NULL));
  /* recvbuf NULL is an error at the root only: only the root calls. */
  if (me == 0) {
    r = ringcc_reduce(a, NULL, 4, RINGCC_INT32, RINGCC_SUM, 0, comm, NULL);
    if (!expect_invalid(me, "reduce(recvbuf=NULL at the root)", r,
                        ringcc_comm_last_error(comm), "recvbuf"))
      bad++;
  }
  if (!good_allreduce(ctx, "reduce(recvbuf=NULL at the root)"))
    return 1;

  BAD("send(peer=-1)", "peer", ringcc_send(a, 4, RINGCC_INT32, -1, comm, NULL));
  BAD("send(peer=nranks)", "peer",
      ringcc_send(a, 4, RINGCC_INT32, n, comm, NULL));
  BAD("send(peer=own rank)", "peer",
      ringcc_send(a, 4, RINGCC_INT32, me, comm, NULL));
  BAD("recv(peer=-1)", "peer", ringcc_recv(b, 4, RINGCC_INT32, -1, comm, NULL));
  BAD("recv(peer=nranks)", "peer",
      ringcc_recv(b, 4, RINGCC_INT32, n, comm, NULL));
  BAD("recv(peer=own rank)", "peer",
      ringcc_recv(b, 4, RINGCC_INT32, me, comm, NULL));
  if (n >= 2) {
    int peer = (me + 1) % n;
    BAD("send(buf=NULL, count=4)", "buf",
        ringcc_send(NULL, 4, RINGCC_INT32, peer, comm, NULL));
    BAD("recv(buf=NULL, count=4)", "buf",
        ringcc_recv(NULL, 4, RINGCC_INT32, peer, comm, NULL));
    BAD("send(datatype=99)", "datatype",
        ringcc_send(a, 4, (ringcc_datatype_t)99, peer, comm, NULL));
    BAD("recv(datatype=-1)", "datatype",
        ringcc_recv(b, 4, (ringcc_datatype_t)-1, peer, comm, NULL));
    BAD("send(count=SIZE_MAX/2, int32)", "count",
        ringcc_send(a, SZ / 2, RINGCC_INT32, peer, comm, NULL));
  }

  BAD("comm_rank(rank=NULL)", "rank", ringcc_comm_rank(comm, NULL));
  BAD("comm_size(size=NULL)", "size", ringcc_comm_size(comm, NULL));
  BAD("comm_get_async_error(result=NULL)", NULL,
      ringcc_comm_get_async_error(comm, NULL));
  BAD("comm_split(color=-5)", "color", ringcc_comm_split(comm, -5, 0, &out));
  BAD("comm_split(out=NULL)", NULL, ringcc_comm_split(comm, 0, 0, NULL));
  BAD("comm_split_type(type=99)", "type",
      ringcc_comm_split_type(comm, 99, 0, &out));

  /* Values a library might use internally as "no op" / "no root" (-1), and
   * RINGCC_IN_PLACE where it is not allowed: last, since accepting them can
   * crash or desynchronise the ranks. */
  BAD("allreduce(op=-1)", "op",
      ringcc_allreduce(a, b, 4, RINGCC_INT32, (ringcc_op_t)-1, comm, NULL));
  BAD("bcast(root=-1)", "root",
      ringcc_bcast(a, 4, RINGCC_INT32, -1, comm, NULL));
  BAD("reduce(root=-1)", "root",
      ringcc_reduce(a, b, 4, RINGCC_INT32, RINGCC_SUM, -1, comm, NULL));
  BAD("reduce_scatter(op=-1)", "op",
      ringcc_reduce_scatter(a, b, 2, RINGCC_INT32, (ringcc_op_t)-1, comm,
                            NULL));
  BAD("reduce(op=-1)", "op",
      ringcc_reduce(a, b, 4, RINGCC_INT32, (ringcc_op_t)-1, 0, comm, NULL));
  BAD("allreduce(recvbuf=RINGCC_IN_PLACE)", "recvbuf",
      ringcc_allreduce(a, (void *)RINGCC_IN_PLACE, 4, RINGCC_INT32, RINGCC_SUM,
                       comm, NULL));
#undef BAD

  /* The good calls still agree about rank and size. */
  if (ringcc_comm_rank(comm, &ival) != RINGCC_SUCCESS || ival != me)
    bad += h_fail(ctx, "ringcc_comm_rank after the bad calls: %d", ival);
  if (ringcc_comm_size(comm, &ival) != RINGCC_SUCCESS || ival != n)
    bad += h_fail(ctx, "ringcc_comm_size after the bad calls: %d", ival);
  return bad ? 1 : 0;
}

Test(errors, bad_arguments_n1, .timeout = 60) {
  cr_assert(h_run_simple(1, bad_calls, NULL, 40), "see the lines above");
}
Test(errors, bad_arguments_n3, .timeout = 60) {
  cr_assert(h_run_simple(3, bad_calls, NULL, 40), "see the lines above");
}

/* NULL buffers with count 0 are fine: every collective, every rank. */
static int null_with_count_zero(h_ctx_t *ctx) {
  ringcc_comm_t comm = ctx->comm;
  int n = ctx->nranks, me = ctx->rank;
  struct {
    const char *call;
    ringcc_result_t r;
  } c[8];
  int nc = 0;
  c[nc].call = "allreduce(NULL, NULL, 0)";
  c[nc++].r = ringcc_allreduce(NULL, NULL, 0, RINGCC_FLOAT32, RINGCC_SUM, comm,
                               NULL);
  c[nc].call = "reduce_scatter(NULL, NULL, 0)";
  c[nc++].r = ringcc_reduce_scatter(NULL, NULL, 0, RINGCC_INT8, RINGCC_MAX,
                                    comm, NULL);
  c[nc].call = "allgather(NULL, NULL, 0)";
  c[nc++].r = ringcc_allgather(NULL, NULL, 0, RINGCC_INT64, comm, NULL);
  c[nc].call = "alltoall(NULL, NULL, 0)";
  c[nc++].r = ringcc_alltoall(NULL, NULL, 0, RINGCC_UINT8, comm, NULL);
  c[nc].call = "bcast(NULL, 0)";
  c[nc++].r = ringcc_bcast(NULL, 0, RINGCC_FLOAT16, n - 1, comm, NULL);
  c[nc].call = "reduce(NULL, NULL, 0)";
  c[nc++].r = ringcc_reduce(NULL, NULL, 0, RINGCC_FLOAT64, RINGCC_PROD, 0,
                            comm, NULL);
  if (n >= 2) {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    ringcc_result_t r1, r2;
    if (me % 2 == 0) {
      r1 = ringcc_send(NULL, 0, RINGCC_INT32, next, comm, NULL);
      r2 = ringcc_recv(NULL, 0, RINGCC_INT32, prev, comm, NULL);
    } else {
      r2 = ringcc_recv(NULL, 0, RINGCC_INT32, prev, comm, NULL);
      r1 = ringcc_send(NULL, 0, RINGCC_INT32, next, comm, NULL);
    }
    c[nc].call = "send(NULL, 0)";
    c[nc++].r = r1;
    c[nc].call = "recv(NULL, 0)";
    c[nc++].r = r2;
  }
  int bad = 0;
  for (int i = 0; i < nc; i++)
    if (c[i].r != RINGCC_SUCCESS)
      bad += h_fail(ctx, "%s returned %d (%s): %s", c[i].call, (int)c[i].r,
                    ringcc_strerror(c[i].r), ringcc_comm_last_error(comm));
  if (!good_allreduce(ctx, "the count-0 calls"))
    bad++;
  return bad ? 1 : 0;
}

Test(errors, null_buffers_with_count_zero_n3, .timeout = 60) {
  cr_assert(h_run_simple(3, null_with_count_zero, NULL, 40),
            "see the lines above");
}
Test(errors, null_buffers_with_count_zero_n1, .timeout = 60) {
  cr_assert(h_run_simple(1, null_with_count_zero, NULL, 40),
            "see the lines above");
}
