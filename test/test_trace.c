/*
 * test_trace.c - RINGCC_TRACE (lib/observe/trace.c, lib/comm/clocksync.c),
 * ringcc-run --trace (tools/trace_merge.h), tools/ringcc-trace, and the
 * tutorial's ring (examples/tutorial_ring.c).
 *
 *   trace     the steps of a known schedule (ring AllReduce at n = 4, the
 *             double binary tree at n = 5), in the buffer and in the files,
 *             exactly as the library's own plan functions say (kind, peers,
 *             bytes per step and rank); the buffer keeps the last N events;
 *             the file is written at an error and on RINGCC_REPORT_SIGNAL;
 *             clocks measured across (simulated) hosts are within their
 *             stated error of the truth (one machine: offset 0)
 *   tools     ringcc-run --trace merges the ranks' files (and removes a
 *             former run's), also of split communicators; ringcc-trace
 *             draws a PNG and prints the steps
 *   tutorial  examples/tutorial_ring under ringcc-run -np 4: its ring over
 *             ringcc_send/ringcc_recv matches ringcc_allreduce, and its
 *             trace shows the sends and receives of its ring
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "algorithms.h"
#include "comm.h"
#include "harness.h"
#include "schedule.h"
#include "trace.h"

#define MAX_N 8

/* ---- helpers ------------------------------------------------------------------ */

static const char *bin_dir(void) {
  const char *d = getenv("RINGCC_BIN_DIR");
  return d && *d ? d : "build/bin";
}

/* A fresh directory for one test's traces. */
static void make_tmpdir(char *buf, size_t len) {
  snprintf(buf, len, "/tmp/ringcc-test-trace-%d-XXXXXX", (int)getpid());
  cr_assert(mkdtemp(buf) != NULL, "mkdtemp: %s", strerror(errno));
}

static void remove_tree(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

/* A command's output (stdout and stderr) and exit status. */
static int run_cmd(const char *cmd, char *out, size_t len) {
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  cr_assert(p != NULL, "popen %s: %s", cmd, strerror(errno));
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  if (buf)
    buf[got] = '\0';
  fclose(f);
  return buf;
}

/* The file of rank r in dir (any communicator), or "" if none. */
static void rank_file(const char *dir, int r, char *path, size_t len) {
  char suffix[32];
  DIR *d = opendir(dir);
  struct dirent *de;
  snprintf(suffix, sizeof suffix, "-r%d.json", r);
  path[0] = '\0';
  while (d && (de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name), s = strlen(suffix);
    if (strncmp(de->d_name, "ringcc-trace-", 13) == 0 && n > s &&
        strcmp(de->d_name + n - s, suffix) == 0)
      snprintf(path, len, "%s/%s", dir, de->d_name);
  }
  if (d)
    closedir(d);
}

/* Which step kinds receive and send: written here, not taken from the
 * executor, so the test says what the trace must show. */
static bool kind_receives(int k) {
  return k == RCC_STEP_RECV || k == RCC_STEP_RECV_COPY_SEND ||
         k == RCC_STEP_RECV_REDUCE_SEND || k == RCC_STEP_RECV_REDUCE_COPY ||
         k == RCC_STEP_RECV_REDUCE_COPY_SEND || k == RCC_STEP_SEND_RECV;
}
static bool kind_sends(int k) {
  return k == RCC_STEP_SEND || k == RCC_STEP_COPY_SEND ||
         k == RCC_STEP_RECV_COPY_SEND || k == RCC_STEP_RECV_REDUCE_SEND ||
         k == RCC_STEP_RECV_REDUCE_COPY_SEND || k == RCC_STEP_SEND_RECV;
}

/* The plan rank r runs for the call: the algorithm's own plan function. */
static void plan_for(struct rcc_plan *p, int alg, int coll, int n, int r,
                     const int *ring, size_t count, size_t chunk_elems) {
  memset(p, 0, sizeof(*p));
  p->coll = coll;
  p->nranks = n;
  p->rank = r;
  for (int q = 0; q < n; q++)
    if (ring[q] == r)
      p->pos = q;
  p->ring = ring;
  p->count = count;
  p->chunk_elems = chunk_elems;
  p->nchannels = 1;
  p->granule = rcc_plan_granule(sizeof(float)); /* as coll.c plans */
  p->sched = rcc_algorithms[alg].sched;
  rcc_plan_build(p);
  p->alg = alg; /* the board's plan is the one-shot's */
}

/* The lines ringcc-trace --steps must print for rank r's call seq. */
static size_t expected_steps(const struct rcc_plan *p, int seq, size_t esize,
                             char *out, size_t len) {
  size_t off = 0;
  for (uint64_t i = 0; i < p->nsteps; i++) {
    struct rcc_step s;
    char from[16] = "-", to[16] = "-";
    rcc_plan_step(p, i, &s);
    if (kind_receives(s.kind))
      snprintf(from, sizeof from, "%d", s.recv_peer);
    if (kind_sends(s.kind))
      snprintf(to, sizeof to, "%d", s.send_peer);
    off += (size_t)snprintf(out + off, len - off,
                            "rank %d seq %d step %llu %s from %s to %s bytes "
                            "%zu\n", p->rank, seq, (unsigned long long)i,
                            rcc_step_kind_name(s.kind), from, to,
                            s.nelem * esize);
  }
  return off;
}

/* ---- the steps of a known schedule ---------------------------------------------- */

typedef struct {
  int ring[MAX_N];
  int alg;          /* enum rcc_alg that must run */
  size_t count;
  size_t chunk_bytes;
} known_arg_t;

static int known_body(h_ctx_t *ctx) {
  known_arg_t *a = ctx->arg;
  size_t count = a->count;
  float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
  if (in == NULL || out == NULL)
    return h_fail(ctx, "out of memory");
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, ctx->rank, 0, 7, in, count);
  if (!h_ok(ctx, ringcc_allreduce(in, out, count, RINGCC_FLOAT32, RINGCC_SUM,
                                  ctx->comm, NULL), "ringcc_allreduce"))
    return 1;
  float *want = malloc(count * sizeof(float));
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, ctx->nranks, 0, 7, want, count);
  if (!h_check_elems(ctx, "allreduce", RINGCC_FLOAT32, out, want, count))
    return 1;
  if (ctx->rank == 0)
    memcpy(a->ring, ctx->comm->ring, sizeof(int) * (size_t)ctx->nranks);

  /* In the buffer: the call's steps in plan order, then the call. */
  struct rcc_plan p;
  plan_for(&p, a->alg, RCC_COLL_ALLREDUCE, ctx->nranks, ctx->rank,
           ctx->comm->ring, count, a->chunk_bytes / sizeof(float));
  if (rcc_trace_count(ctx->comm) != p.nsteps + 1)
    return h_fail(ctx, "%llu events recorded, expected %llu steps and the "
                  "call", (unsigned long long)rcc_trace_count(ctx->comm),
                  (unsigned long long)p.nsteps);
  for (uint64_t i = 0; i <= p.nsteps; i++) {
    struct rcc_trace_event e;
    struct rcc_step s;
    if (rcc_trace_get(ctx->comm, i, &e) != 0)
      return h_fail(ctx, "event %llu missing", (unsigned long long)i);
    if (i == p.nsteps) {
      if (e.type != RCC_TRACE_CALL || e.coll != RCC_COLL_ALLREDUCE ||
          e.alg != a->alg || e.bytes != count * sizeof(float) || e.seq != 1 ||
          e.end_ns < e.start_ns)
        return h_fail(ctx, "the call event is wrong (type %d coll %d alg %d "
                      "bytes %llu seq %llu)", e.type, e.coll, e.alg,
                      (unsigned long long)e.bytes, (unsigned long long)e.seq);
      break;
    }
    rcc_plan_step(&p, i, &s);
    int from = kind_receives(s.kind) ? s.recv_peer : -1;
    int to = kind_sends(s.kind) ? s.send_peer : -1;
    if (e.type != RCC_TRACE_STEP || e.kind != s.kind || e.step != i ||
        e.recv_peer != from || e.send_peer != to ||
        e.bytes != s.nelem * sizeof(float) || e.alg != a->alg ||
        e.seq != 1 || e.end_ns < e.start_ns ||
        e.wait_recv_ns + e.wait_send_ns > e.end_ns - e.start_ns)
      return h_fail(ctx, "step %llu: traced %s from %d to %d, %llu bytes; the "
                    "plan says %s from %d to %d, %zu bytes",
                    (unsigned long long)i, rcc_step_kind_name(e.kind),
                    e.recv_peer, e.send_peer, (unsigned long long)e.bytes,
                    rcc_step_kind_name(s.kind), from, to,
                    s.nelem * sizeof(float));
  }
  free(in);
  free(out);
  free(want);
  return 0;
}

static void known_schedule(int setting, int alg, int n, size_t count) {
  char dir[128], cmd[512];
  static char out[1 << 20], want[1 << 20];
  make_tmpdir(dir, sizeof dir);
  cr_assert_eq(setenv("RINGCC_TRACE", dir, 1), 0);
  known_arg_t *a = h_shared_alloc(sizeof *a);
  a->alg = alg;
  a->count = count;
  a->chunk_bytes = 1024; /* several pieces per block */
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = setting;
  cfg.chunk_bytes = (int64_t)a->chunk_bytes;
  h_run_opts_t o = {.nranks = n, .body = known_body, .arg = a,
                    .config = &cfg, .timeout_s = 60, .name = "known schedule"};
  cr_assert(h_run(&o), "the traced allreduce failed");

  /* In the files, read back by ringcc-trace (Python's json): every rank's
   * steps, as the plans say. */
  size_t off = 0;
  for (int r = 0; r < n; r++) {
    struct rcc_plan p;
    plan_for(&p, alg, RCC_COLL_ALLREDUCE, n, r, a->ring, count,
             a->chunk_bytes / sizeof(float));
    off += expected_steps(&p, 1, sizeof(float), want + off, sizeof want - off);
  }
  snprintf(cmd, sizeof cmd, "%s/ringcc-trace %s --steps", bin_dir(), dir);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect_str_eq(out, want, "%s: the files' steps differ from the plans",
                   cmd);
  h_shared_free(a, sizeof *a);
  unsetenv("RINGCC_TRACE");
  remove_tree(dir);
}

Test(trace, ring_allreduce_n4_steps_are_the_plans, .timeout = 120) {
  /* 3000 elements, 256 per slot: 3 loops of 7 steps per rank. */
  known_schedule(RINGCC_ALGO_RING, RCC_ALG_RING, 4, 3000);
}

Test(trace, tree_allreduce_n5_steps_are_the_plans, .timeout = 120) {
  known_schedule(RINGCC_ALGO_TREE, RCC_ALG_TREE, 5, 3001);
}

/* ---- bounded memory --------------------------------------------------------------- */

#define BOUNDED_CALLS 10

static int bounded_body(h_ctx_t *ctx) {
  int32_t x = ctx->rank;
  for (int i = 0; i < BOUNDED_CALLS; i++)
    if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, &x, 1, RINGCC_INT32,
                                    RINGCC_SUM, ctx->comm, NULL),
              "ringcc_allreduce"))
      return 1;
  /* Ring at n = 2: 3 steps and the call per allreduce; 16 events held. */
  uint64_t total = BOUNDED_CALLS * 4;
  struct rcc_trace_event first, last;
  if (rcc_trace_count(ctx->comm) != total)
    return h_fail(ctx, "%llu events counted, expected %llu",
                  (unsigned long long)rcc_trace_count(ctx->comm),
                  (unsigned long long)total);
  if (rcc_trace_get(ctx->comm, 15, &last) != 0 ||
      rcc_trace_get(ctx->comm, 16, &first) == 0)
    return h_fail(ctx, "the buffer does not hold exactly 16 events");
  rcc_trace_get(ctx->comm, 0, &first);
  if (first.seq != BOUNDED_CALLS - 3 || first.type != RCC_TRACE_STEP ||
      first.step != 0 || last.seq != BOUNDED_CALLS ||
      last.type != RCC_TRACE_CALL)
    return h_fail(ctx, "held events from seq %llu step %llu to seq %llu (type "
                  "%d): not the last 16", (unsigned long long)first.seq,
                  (unsigned long long)first.step, (unsigned long long)last.seq,
                  last.type);
  return 0;
}

Test(trace, ring_buffer_keeps_the_last_events, .timeout = 60) {
  char dir[128], path[512];
  make_tmpdir(dir, sizeof dir);
  setenv("RINGCC_TRACE", dir, 1);
  setenv("RINGCC_TRACE_EVENTS", "16", 1);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RING;
  h_run_opts_t o = {.nranks = 2, .body = bounded_body, .config = &cfg,
                    .timeout_s = 60, .name = "bounded"};
  cr_assert(h_run(&o));
  for (int r = 0; r < 2; r++) {
    rank_file(dir, r, path, sizeof path);
    char *text = read_text(path);
    cr_assert_not_null(text, "rank %d wrote no file in %s", r, dir);
    cr_expect(strstr(text, "\"events\":40,\"dropped\":24,\"capacity\":16,"
                           "\"written_at\":\"destroy\"") != NULL,
              "rank %d's file: %s", r, strstr(text, "\"otherData\""));
    int steps = 0;
    for (const char *p = text; (p = strstr(p, "\"cat\":\"step\"")); p++)
      steps++;
    cr_expect_eq(steps, 12, "rank %d's file holds %d steps, not the last 12",
                 r, steps);
    free(text);
  }
  unsetenv("RINGCC_TRACE_EVENTS");
  unsetenv("RINGCC_TRACE");
  remove_tree(dir);
}

Test(trace, bad_event_count_fails_init, .timeout = 30) {
  ringcc_comm_t comm;
  ringcc_unique_id_t id;
  setenv("RINGCC_TRACE", "/tmp", 1);
  setenv("RINGCC_TRACE_EVENTS", "lots", 1);
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  cr_expect_eq(ringcc_comm_init(&comm, 1, &id, 0, NULL),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(ringcc_comm_last_error(NULL), "RINGCC_TRACE_EVENTS=lots"),
            "%s", ringcc_comm_last_error(NULL));
}

/* ---- written at an error and on the report signal ---------------------------------- */

typedef struct {
  char dir[128];
  int pid0;       /* rank 0's pid (atomic) */
  int seen;       /* rank 1 saw rank 0's file written on the signal */
  char what[256]; /* what rank 0's file said when it was */
} flush_arg_t;

static bool file_says(const char *dir, int rank, const char *needle) {
  char path[512];
  rank_file(dir, rank, path, sizeof path);
  char *text = path[0] ? read_text(path) : NULL;
  bool ok = text && strstr(text, needle);
  free(text);
  return ok;
}

static int error_body(h_ctx_t *ctx) {
  flush_arg_t *a = ctx->arg;
  int32_t buf[16] = {0};
  /* The ranks disagree on the count: the call fails on both. */
  ringcc_result_t r = ringcc_allreduce(RINGCC_IN_PLACE, buf,
                                       ctx->rank == 0 ? 8 : 16, RINGCC_INT32,
                                       RINGCC_SUM, ctx->comm, NULL);
  if (r == RINGCC_SUCCESS)
    return h_fail(ctx, "the mismatched allreduce succeeded");
  if (!file_says(a->dir, ctx->rank, "\"written_at\":\"error\""))
    return h_fail(ctx, "no trace file written at the error in %s", a->dir);
  if (!file_says(a->dir, ctx->rank, "\"result\":\""))
    return h_fail(ctx, "the failed call is not in the trace");
  return 0;
}

Test(trace, written_at_an_error, .timeout = 60) {
  flush_arg_t *a = h_shared_alloc(sizeof *a);
  make_tmpdir(a->dir, sizeof a->dir);
  setenv("RINGCC_TRACE", a->dir, 1);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RING;
  cfg.timeout_ms = 5000;
  h_run_opts_t o = {.nranks = 2, .body = error_body, .arg = a, .config = &cfg,
                    .timeout_s = 60, .name = "error"};
  cr_assert(h_run(&o));
  unsetenv("RINGCC_TRACE");
  remove_tree(a->dir);
}

static int signal_body(h_ctx_t *ctx) {
  flush_arg_t *a = ctx->arg;
  int32_t x = 1;
  if (ctx->rank == 0) { /* blocks until rank 1 joins */
    __atomic_store_n(&a->pid0, (int)getpid(), __ATOMIC_RELEASE);
  } else {
    double until = h_now_s() + 20;
    while (__atomic_load_n(&a->pid0, __ATOMIC_ACQUIRE) == 0 && h_now_s() < until)
      h_sleep_ms(5);
    h_sleep_ms(200); /* rank 0 is asleep in its wait by now */
    kill(__atomic_load_n(&a->pid0, __ATOMIC_ACQUIRE), SIGUSR1);
    while (h_now_s() < until && !a->seen) {
      if (file_says(a->dir, 0, "\"written_at\":\"signal\""))
        a->seen = 1;
      h_sleep_ms(10);
    }
    if (!a->seen)
      return h_fail(ctx, "rank 0 wrote no trace on SIGUSR1 within 20 s");
  }
  return h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, &x, 1, RINGCC_INT32,
                                    RINGCC_SUM, ctx->comm, NULL),
              "ringcc_allreduce") ? 0 : 1;
}

Test(trace, written_on_the_report_signal, .timeout = 60) {
  flush_arg_t *a = h_shared_alloc(sizeof *a);
  make_tmpdir(a->dir, sizeof a->dir);
  setenv("RINGCC_TRACE", a->dir, 1);
  setenv("RINGCC_REPORT_SIGNAL", "USR1", 1);
  h_run_opts_t o = {.nranks = 2, .body = signal_body, .arg = a,
                    .timeout_s = 60, .name = "signal"};
  cr_assert(h_run(&o));
  cr_expect(a->seen);
  unsetenv("RINGCC_REPORT_SIGNAL");
  unsetenv("RINGCC_TRACE");
  remove_tree(a->dir);
}

/* ---- clocks across hosts ------------------------------------------------------------ */

static int hosts_body(h_ctx_t *ctx) {
  char host[32];
  ringcc_comm_t comm;
  int32_t x = ctx->rank;
  /* Each rank its own "host": the offsets are measured, over TCP. */
  snprintf(host, sizeof host, "trace-host-%d", ctx->rank);
  setenv("RINGCC_HOSTID", host, 1);
  if (!h_ok(ctx, ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank,
                                  NULL), "ringcc_comm_init"))
    return 1;
  ctx->comm = comm;
  bool ok = h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, &x, 1, RINGCC_INT32,
                                       RINGCC_SUM, comm, NULL),
                 "ringcc_allreduce");
  ringcc_comm_destroy(comm);
  return ok ? 0 : 1;
}

Test(trace, clock_offsets_measured_across_hosts, .timeout = 60) {
  char dir[128], path[512];
  make_tmpdir(dir, sizeof dir);
  setenv("RINGCC_TRACE", dir, 1);
  h_run_opts_t o = {.nranks = 3, .body = hosts_body, .skip_init = true,
                    .timeout_s = 60, .name = "hosts"};
  cr_assert(h_run(&o));
  for (int r = 0; r < 3; r++) {
    rank_file(dir, r, path, sizeof path);
    char *text = read_text(path);
    cr_assert_not_null(text, "rank %d: no file", r);
    const char *c = strstr(text, "\"clock\":\"");
    long long offset = -1, error = -1;
    int rounds = -1;
    cr_assert_not_null(c);
    cr_assert_eq(sscanf(strstr(c, "\"clock_offset_ns\":"),
                        "\"clock_offset_ns\":%lld,\"clock_error_ns\":%lld,"
                        "\"clock_rounds\":%d", &offset, &error, &rounds), 3);
    if (r == 0) {
      cr_expect(strncmp(c, "\"clock\":\"same host\"", 19) == 0, "%.40s", c);
      cr_expect(offset == 0 && error == 0 && rounds == 0);
    } else {
      /* One machine, one clock: the true offset is 0, and the measured one
       * must be within the error it states. */
      cr_expect(strncmp(c, "\"clock\":\"measured\"", 18) == 0, "%.40s", c);
      cr_expect_eq(rounds, 16);
      cr_expect(error > 0 && error < 50000000, "rank %d: error %lld ns", r,
                error);
      cr_expect(llabs(offset) <= error, "rank %d: offset %lld ns, beyond its "
                "error %lld ns", r, offset, error);
    }
    free(text);
  }
  unsetenv("RINGCC_TRACE");
  remove_tree(dir);
}

/* ---- ringcc-run --trace and ringcc-trace -------------------------------------------- */

Test(tools, ringcc_run_merges_the_ranks_files, .timeout = 120) {
  char dir[128], cmd[1024], stale[256], merged[256];
  static char out[1 << 16];
  make_tmpdir(dir, sizeof dir);
  /* A former run's file: removed, not merged. */
  snprintf(stale, sizeof stale, "%s/ringcc-trace-00000000deadbeef-r7.json",
           dir);
  FILE *f = fopen(stale, "w");
  cr_assert_not_null(f);
  fputs("{\"traceEvents\":[\n", f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "RINGCC_ALGO=ring %s/ringcc-run -np 3 --timeout "
           "60 --trace %s %s/../examples/allreduce", bin_dir(), dir,
           bin_dir());
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  snprintf(merged, sizeof merged, "%s/trace.json", dir);
  cr_expect(strstr(out, "3 rank files (1 communicator) merged into") != NULL,
            "%s", out);
  cr_expect(access(stale, F_OK) != 0, "the stale file is still there");
  /* Valid JSON with a process row per rank and every rank's steps. */
  snprintf(cmd, sizeof cmd, "python3 -c 'import json,sys; d=json.load(open("
           "sys.argv[1])); e=d[\"traceEvents\"]; print(sorted(x[\"args\"]"
           "[\"name\"] for x in e if x.get(\"name\")==\"process_name\")); "
           "print(sorted({x[\"pid\"] for x in e if x.get(\"cat\")==\"step\"}))"
           "' %s", merged);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect_str_eq(out, "['rank 0', 'rank 1', 'rank 2']\n[0, 1, 2]\n");
  remove_tree(dir);
}

Test(tools, ringcc_run_merges_split_communicators, .timeout = 120) {
  char dir[128], cmd[1024], merged[256];
  static char out[1 << 16];
  make_tmpdir(dir, sizeof dir);
  snprintf(cmd, sizeof cmd, "%s/ringcc-run -np 4 --timeout 90 --trace %s "
           "%s/../examples/parallel_groups", bin_dir(), dir, bin_dir());
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  const char *said = strstr(out, "rank files (");
  int comms = 0;
  cr_assert_not_null(said, "%s", out);
  cr_assert_eq(sscanf(said, "rank files (%d communicators)", &comms), 1, "%s",
               said);
  cr_expect_gt(comms, 1, "%s", said);
  snprintf(merged, sizeof merged, "%s/trace.json", dir);
  /* Every (communicator, rank) its own process row: unique pids, the
   * largest communicator's ranks 0..3 first. */
  snprintf(cmd, sizeof cmd, "python3 -c 'import json,sys; d=json.load(open("
           "sys.argv[1])); n=[(x[\"pid\"],x[\"args\"][\"name\"]) for x in "
           "d[\"traceEvents\"] if x.get(\"name\")==\"process_name\"]; p=[a for "
           "a,b in n]; print(len(p)==len(set(p)), sorted(n)[:4]==[(i,\"rank "
           "%%d\"%%i) for i in range(4)], all(b.startswith(\"comm \") for a,b "
           "in n if a>=4))' %s", merged);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect_str_eq(out, "True True True\n");
  remove_tree(dir);
}

Test(tools, ringcc_trace_draws_and_lists, .timeout = 120) {
  char dir[128], cmd[1024], png[256];
  static char out[1 << 16];
  make_tmpdir(dir, sizeof dir);
  snprintf(cmd, sizeof cmd, "RINGCC_ALGO=ring %s/ringcc-run -np 4 --timeout "
           "60 --trace %s %s/../examples/allreduce", bin_dir(), dir,
           bin_dir());
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  snprintf(png, sizeof png, "%s/ring.png", dir);
  snprintf(cmd, sizeof cmd, "%s/ringcc-trace %s/trace.json --coll allreduce "
           "--png %s", bin_dir(), dir, png);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  /* examples/allreduce: one allreduce of 2^20 floats; the ring at n = 4
   * with 64 KiB slots runs 16 loops of 7 steps per rank, 6 of them sending
   * a message. */
  cr_expect(strstr(out, "448 steps of 4 ranks, 384 messages") != NULL, "%s",
            out);
  char *bytes = read_text(png);
  cr_assert_not_null(bytes, "no %s", png);
  cr_expect(memcmp(bytes, "\x89PNG", 4) == 0, "%s is not a PNG", png);
  free(bytes);
  snprintf(cmd, sizeof cmd, "%s/ringcc-trace %s/trace.json --coll allreduce "
           "--steps", bin_dir(), dir);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "rank 2 seq 1 step 1 recvReduceSend from 1 to 3 bytes "
                        "65536\n") != NULL, "%.2000s", out);
  snprintf(cmd, sizeof cmd, "%s/ringcc-trace %s/nothing.json", bin_dir(), dir);
  cr_expect_eq(run_cmd(cmd, out, sizeof out), 1, "%s", out);
  snprintf(cmd, sizeof cmd, "%s/ringcc-trace --help", bin_dir());
  cr_expect_eq(run_cmd(cmd, out, sizeof out), 0);
  cr_expect(strstr(out, "--png") != NULL && strstr(out, "--steps") != NULL);
  remove_tree(dir);
}

/* ---- the tutorial ---------------------------------------------------------------------- */

Test(tutorial, ring_over_send_recv_matches_the_library, .timeout = 300) {
  char cmd[1024];
  static char out[1 << 16];
  snprintf(cmd, sizeof cmd, "%s/ringcc-run -np 4 --timeout 240 "
           "%s/../examples/tutorial_ring 1M 3", bin_dir(), bin_dir());
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  cr_expect(strstr(out, "[0] tutorial_ring: every result matches "
                        "ringcc_allreduce") != NULL, "%s", out);
  /* One row per size, 4 KiB to 1 MiB, each "ok". */
  int rows = 0;
  for (const char *p = out; (p = strstr(p, "  ok\n")) != NULL; p++)
    rows++;
  cr_expect_eq(rows, 5, "%s", out);
}

Test(tutorial, its_trace_is_the_ring_of_the_tutorial, .timeout = 120) {
  char dir[128], cmd[1024];
  static char out[1 << 18];
  make_tmpdir(dir, sizeof dir);
  /* 4 KiB, one timed call: two hand-written allreduces (the check, the
   * timed one), each 2(n-1) = 6 sends of one 256-float block to the next
   * rank and 6 receives from the previous. */
  snprintf(cmd, sizeof cmd, "%s/ringcc-run -np 4 --timeout 60 --trace %s "
           "%s/../examples/tutorial_ring 4K 1", bin_dir(), dir, bin_dir());
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  snprintf(cmd, sizeof cmd, "%s/ringcc-trace %s/trace.json --coll send,recv "
           "--steps", bin_dir(), dir);
  cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
  for (int r = 0; r < 4; r++) {
    char send[96], recv[96];
    int sends = 0, recvs = 0, lines = 0;
    snprintf(send, sizeof send, "rank %d seq ", r);
    for (const char *p = out; (p = strstr(p, send)) != NULL; p++)
      lines++;
    snprintf(send, sizeof send, " send from - to %d bytes 1024\n", (r + 1) % 4);
    snprintf(recv, sizeof recv, " recv from %d to - bytes 1024\n", (r + 3) % 4);
    for (const char *line = out; (line = strstr(line, "rank ")) != NULL;
         line++) {
      int rank;
      if (sscanf(line, "rank %d ", &rank) != 1 || rank != r)
        continue;
      const char *nl = strchr(line, '\n');
      const char *s = strstr(line, send), *v = strstr(line, recv);
      sends += s != NULL && s < nl;
      recvs += v != NULL && v < nl;
    }
    cr_expect(sends == 12 && recvs == 12 && lines == 24,
              "rank %d: %d sends to %d, %d receives from %d, %d steps",
              r, sends, (r + 1) % 4, recvs, (r + 3) % 4, lines);
  }
  remove_tree(dir);
}
