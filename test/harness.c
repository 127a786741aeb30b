/*
 * harness.c - runs test bodies as N ranks (processes or threads) and computes
 * exact inputs and expected results; see harness.h.
 */
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* After the first rank fails, the others get this long to finish (and print
 * their own view) before they are killed. */
#define H_GRACE_AFTER_FAILURE_S 5.0

/* A forked rank that never got its id (the parent says why). */
#define H_EXIT_NO_ID 96

/* ---- small utilities ---------------------------------------------------- */

double h_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void h_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* One write(2) per line, so that lines of different ranks never interleave. */
static void print_line(const char *prefix, const char *fmt, va_list ap) {
  char line[1024];
  int n = snprintf(line, sizeof line, "%s", prefix);
  if (n < 0)
    n = 0;
  if ((size_t)n < sizeof line) {
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (m > 0)
      n += m;
  }
  if ((size_t)n >= sizeof line - 1)
    n = (int)sizeof line - 2;
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, (size_t)n);
  (void)w;
}

int h_fail_rank(int rank, const char *fmt, ...) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "rank %d: ", rank);
  va_list ap;
  va_start(ap, fmt);
  print_line(prefix, fmt, ap);
  va_end(ap);
  return 1;
}

int h_fail(const h_ctx_t *ctx, const char *fmt, ...) {
  char prefix[48];
  snprintf(prefix, sizeof prefix, "rank %d%s: ", ctx ? ctx->rank : -1,
           ctx && ctx->is_thread ? " (thread)" : "");
  va_list ap;
  va_start(ap, fmt);
  print_line(prefix, fmt, ap);
  va_end(ap);
  return 1;
}

bool h_ok(const h_ctx_t *ctx, ringcc_result_t r, const char *what) {
  if (r == RINGCC_SUCCESS)
    return true;
  h_fail(ctx, "%s returned %d (%s): %s", what, (int)r, ringcc_strerror(r),
         ringcc_comm_last_error(ctx ? ctx->comm : NULL));
  return false;
}

void *h_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    abort();
  }
  return p;
}

void *h_shared_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void h_shared_free(void *p, size_t bytes) {
  if (p != NULL)
    munmap(p, bytes);
}

/* ---- running ranks ------------------------------------------------------ */

#define H_WHY_LEN 512

typedef struct {
  h_run_opts_t opts;
  ringcc_unique_id_t ids[1 + H_MAX_EXTRA_IDS];
  char *why; /* shared memory (H_WHY_LEN): rank 0's "unsupported" reason */
} run_state_t;

/* How forked ranks get their ids: the parent forks every rank first and only
 * then calls ringcc_get_unique_id, whose rendezvous thread would otherwise be
 * running (holding allocator or library locks) at the moment of fork; the
 * ids reach the ranks through this shared page. */
enum { IDS_PENDING, IDS_READY, IDS_FAILED };
typedef struct {
  int state; /* atomic: IDS_* */
  ringcc_unique_id_t ids[1 + H_MAX_EXTRA_IDS];
} id_page_t;

static int run_rank(const run_state_t *st, int rank, bool is_thread) {
  const h_run_opts_t *o = &st->opts;
  h_ctx_t ctx = {
      .comm = NULL,
      .rank = rank,
      .nranks = o->nranks,
      .arg = o->arg,
      .id = &st->ids[0],
      .extra_ids = &st->ids[1],
      .n_extra_ids = o->n_extra_ids,
      .config = o->config,
      .is_thread = is_thread,
  };
  if (!o->skip_init) {
    ringcc_result_t r =
        ringcc_comm_init(&ctx.comm, o->nranks, &st->ids[0], rank, o->config);
    if (r == RINGCC_ERR_UNSUPPORTED && st->why != NULL) {
      if (rank == 0)
        snprintf(st->why, H_WHY_LEN, "%s", ringcc_comm_last_error(NULL));
      return H_EXIT_UNSUPPORTED;
    }
    if (r != RINGCC_SUCCESS) {
      h_fail(&ctx, "ringcc_comm_init(nranks=%d, rank=%d) returned %d (%s): %s",
             o->nranks, rank, (int)r, ringcc_strerror(r),
             ringcc_comm_last_error(NULL));
      return 2;
    }
  }
  int rc = o->body(&ctx);
  if (!o->skip_init && ctx.comm != NULL) { /* (NULL: the body destroyed it) */
    ringcc_result_t r = ringcc_comm_destroy(ctx.comm);
    if (r != RINGCC_SUCCESS && rc == 0) {
      h_fail(&ctx, "ringcc_comm_destroy returned %d (%s)", (int)r,
             ringcc_strerror(r));
      rc = 3;
    }
  }
  return rc;
}

static const char *run_name(const h_run_opts_t *o) {
  return o->name ? o->name : "run";
}

static bool make_ids(run_state_t *st) {
  if (st->opts.no_id)
    return true;
  for (int i = 0; i <= st->opts.n_extra_ids; i++) {
    ringcc_result_t r = ringcc_get_unique_id(&st->ids[i]);
    if (r != RINGCC_SUCCESS) {
      fprintf(stderr, "%s: ringcc_get_unique_id returned %d (%s): %s\n",
              run_name(&st->opts), (int)r, ringcc_strerror(r),
              ringcc_comm_last_error(NULL));
      return false;
    }
  }
  return true;
}

static void describe_status(const run_state_t *st, int rank, int status) {
  const char *name = run_name(&st->opts);
  if (st->why != NULL && WIFEXITED(status) &&
      WEXITSTATUS(status) == H_EXIT_UNSUPPORTED)
    return; /* h_run reports it */
  if (WIFEXITED(status) && WEXITSTATUS(status) == H_EXIT_NO_ID)
    fprintf(stderr, "%s: rank %d got no id and exited\n", name, rank);
  else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    fprintf(stderr, "%s: rank %d exited with status %d\n", name, rank,
            WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    fprintf(stderr, "%s: rank %d was killed by signal %d (%s)\n", name, rank,
            WTERMSIG(status), strsignal(WTERMSIG(status)));
}

/* In a forked rank: waits for the parent's ids (polling the shared page). */
static bool wait_for_ids(run_state_t *st, id_page_t *page) {
  double deadline = h_now_s() + 60.0;
  for (;;) {
    int state = __atomic_load_n(&page->state, __ATOMIC_ACQUIRE);
    if (state == IDS_READY) {
      memcpy(st->ids, page->ids, sizeof st->ids);
      return true;
    }
    if (state == IDS_FAILED || h_now_s() > deadline)
      return false;
    h_sleep_ms(1);
  }
}

static bool run_processes(run_state_t *st) {
  const h_run_opts_t *o = &st->opts;
  int n = o->nranks;
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  int *status = calloc((size_t)n, sizeof *status);
  bool *done = calloc((size_t)n, sizeof *done);
  id_page_t *page = h_shared_alloc(sizeof *page);
  if (!pids || !status || !done || !page) {
    free(pids), free(status), free(done);
    h_shared_free(page, sizeof *page);
    return false;
  }
  bool ok_ids = true;
  pid_t parent = getpid();
  fflush(NULL);
  int started = 0;
  for (; started < n; started++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "%s: fork failed: %s\n", run_name(o), strerror(errno));
      break;
    }
    if (pid == 0) {
      /* Die with the parent: a killed test must not leave spinning ranks. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(98);
      if (!wait_for_ids(st, page))
        _exit(H_EXIT_NO_ID);
      int rc = run_rank(st, started, false);
      fflush(NULL);
      _exit(rc & 0xff ? rc & 0xff : (rc ? 1 : 0));
    }
    pids[started] = pid;
  }
  /* Every rank is forked: now the ids (and the rendezvous thread). */
  bool have_ids = make_ids(st);
  if (have_ids)
    memcpy(page->ids, st->ids, sizeof page->ids);
  __atomic_store_n(&page->state, have_ids ? IDS_READY : IDS_FAILED,
                   __ATOMIC_RELEASE);
  if (!have_ids)
    ok_ids = false;

  double timeout = o->timeout_s > 0 ? o->timeout_s : 60.0;
  double deadline = h_now_s() + timeout;
  double failed_at = -1;
  int remaining = started;
  bool ok = started == n;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < started; r++) {
      if (done[r])
        continue;
      pid_t w = waitpid(pids[r], &status[r], WNOHANG);
      if (w == pids[r]) {
        done[r] = true;
        remaining--;
        progressed = true;
        if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)) {
          ok = false;
          describe_status(st, r, status[r]);
          if (failed_at < 0)
            failed_at = h_now_s();
        }
      }
    }
    if (remaining == 0)
      break;
    double now = h_now_s();
    bool expired = now > deadline;
    bool grace_over = failed_at >= 0 && now > failed_at + H_GRACE_AFTER_FAILURE_S;
    if (expired || grace_over) {
      char list[512] = "";
      size_t len = 0;
      for (int r = 0; r < started; r++) {
        if (done[r])
          continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status[r], 0);
        done[r] = true;
        len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0,
                                " %d", r);
        if (len >= sizeof list)
          len = sizeof list - 1;
      }
      if (expired)
        fprintf(stderr, "%s: deadline of %.1f s passed; killed the ranks still "
                        "running:%s\n", run_name(o), timeout, list);
      else
        fprintf(stderr, "%s: a rank failed; killed the ranks still running "
                        "%.0f s later:%s\n", run_name(o),
                H_GRACE_AFTER_FAILURE_S, list);
      ok = false;
      break;
    }
    if (!progressed)
      h_sleep_ms(2);
  }
  int unsupported = 0;
  for (int r = 0; r < started; r++)
    if (WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == H_EXIT_UNSUPPORTED)
      unsupported++;
  if (st->why != NULL && unsupported == n)
    *o->unsupported = true;
  free(pids), free(status), free(done);
  h_shared_free(page, sizeof *page);
  return ok && ok_ids;
}

typedef struct {
  run_state_t *st;
  int rank;
  int rc;
} thread_arg_t;

static void *thread_main(void *p) {
  thread_arg_t *ta = p;
  ta->rc = run_rank(ta->st, ta->rank, true);
  return NULL;
}

/* Threads cannot be killed: at the deadline (or a grace period after the
 * first failure) the state is leaked (the stuck threads still use it) and the
 * test process ends with the failed test. */
static bool run_threads(run_state_t *st) {
  const char *name = run_name(&st->opts);
  int n = st->opts.nranks;
  pthread_t *tids = calloc((size_t)n, sizeof *tids);
  thread_arg_t *args = calloc((size_t)n, sizeof *args);
  bool *joined = calloc((size_t)n, sizeof *joined);
  if (!tids || !args || !joined)
    return false;
  int started = 0;
  for (; started < n; started++) {
    args[started] = (thread_arg_t){st, started, -1};
    int e = pthread_create(&tids[started], NULL, thread_main, &args[started]);
    if (e != 0) {
      fprintf(stderr, "%s: pthread_create: %s\n", name, strerror(e));
      break;
    }
  }
  double timeout = st->opts.timeout_s > 0 ? st->opts.timeout_s : 60.0;
  double deadline = h_now_s() + timeout, failed_at = -1;
  bool ok = started == n;
  int remaining = started, unsupported = 0;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < started; r++) {
      if (joined[r] || pthread_tryjoin_np(tids[r], NULL) != 0)
        continue;
      joined[r] = true;
      remaining--;
      progressed = true;
      if (args[r].rc == 0)
        continue;
      ok = false;
      if (failed_at < 0)
        failed_at = h_now_s();
      if (args[r].rc == H_EXIT_UNSUPPORTED && st->why != NULL)
        unsupported++;
      else
        fprintf(stderr, "%s: rank %d (thread) returned %d\n", name, r,
                args[r].rc);
    }
    if (remaining == 0)
      break;
    double now = h_now_s();
    bool expired = now > deadline;
    if (expired || (failed_at >= 0 && now > failed_at + H_GRACE_AFTER_FAILURE_S)) {
      if (expired)
        fprintf(stderr, "%s: deadline of %.1f s passed; threads still "
                        "running:", name, timeout);
      else
        fprintf(stderr, "%s: a rank failed; threads still running %.0f s "
                        "later:", name, H_GRACE_AFTER_FAILURE_S);
      for (int r = 0; r < started; r++)
        if (!joined[r])
          fprintf(stderr, " %d", r);
      fprintf(stderr, "\n");
      return false; /* leak st, tids, args: running threads use them */
    }
    if (!progressed)
      h_sleep_ms(2);
  }
  if (unsupported == n)
    *st->opts.unsupported = true;
  free(tids), free(args), free(joined);
  return ok;
}

bool h_run(const h_run_opts_t *opts) {
  if (opts->nranks <= 0 || opts->body == NULL ||
      opts->n_extra_ids < 0 || opts->n_extra_ids > H_MAX_EXTRA_IDS) {
    fprintf(stderr, "h_run: bad options\n");
    return false;
  }
  run_state_t *st = calloc(1, sizeof *st);
  if (st == NULL)
    return false;
  st->opts = *opts;
  if (opts->unsupported != NULL) {
    *opts->unsupported = false;
    st->why = h_shared_alloc(H_WHY_LEN);
  }
  if (opts->threads && !make_ids(st)) { /* processes: after the forks */
    h_shared_free(st->why, H_WHY_LEN);
    free(st);
    return false;
  }
  bool ok;
  if (opts->threads) {
    ok = run_threads(st);
    if (!ok && !(opts->unsupported && *opts->unsupported))
      return false; /* st may still be in use by a stuck thread */
  } else {
    ok = run_processes(st);
  }
  if (st->why != NULL && opts->unsupported_why != NULL)
    snprintf(opts->unsupported_why, opts->unsupported_why_len, "%s", st->why);
  h_shared_free(st->why, H_WHY_LEN);
  free(st);
  return ok;
}

bool h_run_simple(int nranks, h_body_fn body, void *arg, double timeout_s) {
  h_run_opts_t o = {.nranks = nranks, .body = body, .arg = arg,
                    .timeout_s = timeout_s};
  return h_run(&o);
}

/* ---- float16 / bfloat16 --------------------------------------------------- */

static uint32_t float_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static float bits_float(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t h_float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) /* inf stays inf; NaN stays a (quiet) NaN */
    return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31)
    return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) { /* a half subnormal (or zero): value = m * 2^-24 */
    if (e < -10)
      return (uint16_t)sign;
    uint32_t full = mant | 0x800000u;
    int shift = 14 - e;
    uint32_t m = full >> shift;
    uint32_t rem = full & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (m & 1u)))
      m++;
    return (uint16_t)(sign | m);
  }
  uint32_t out = sign | ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (out & 1u)))
    out++; /* a carry into the exponent is right, up to inf */
  return (uint16_t)out;
}

float h_half_to_float(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
  uint32_t mant = (uint32_t)h & 0x3ffu;
  if (exp == 0) {
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  if (exp == 31)
    return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t h_float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
    return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float h_bf16_to_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

/* ---- float8: by the definition, and rounding by search ------------------- */

double h_fp8_value(ringcc_datatype_t dt, uint8_t code) {
  bool e4m3 = dt == RINGCC_FLOAT8_E4M3;
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  int e = (code & 0x7f) >> mbits, m = code & ((1 << mbits) - 1);
  double sign = (code & 0x80) ? -1.0 : 1.0;
  if (e4m3 && (code & 0x7f) == 0x7f)
    return NAN;
  if (!e4m3 && e == 31)
    return m == 0 ? sign * INFINITY : NAN;
  if (e == 0) /* subnormal: 0.m x 2^(1-bias) */
    return sign * ((double)m / (1 << mbits)) * ldexp(1.0, 1 - bias);
  return sign * (1.0 + (double)m / (1 << mbits)) * ldexp(1.0, e - bias);
}

uint8_t h_fp8_code(ringcc_datatype_t dt, double x) {
  bool e4m3 = dt == RINGCC_FLOAT8_E4M3;
  uint8_t sign = signbit(x) ? 0x80 : 0, max_code = e4m3 ? 0x7e : 0x7b;
  if (isnan(x))
    return (uint8_t)(sign | (e4m3 ? 0x7f : 0x7e));
  double a = fabs(x), top = e4m3 ? 448.0 : 57344.0; /* max_code's value */
  if (a > top) {
    if (e4m3)
      return (uint8_t)(sign | max_code); /* saturate */
    /* e5m2: between 57344 and the next step (2^16, Inf) the tie goes to
     * the even code, Inf's 0x7c */
    return (uint8_t)(sign | (a >= (top + 65536.0) / 2 ? 0x7c : max_code));
  }
  static double values[2][128]; /* the positive codes' values, once */
  static bool filled[2];
  double *v = values[e4m3];
  if (!filled[e4m3]) {
    for (unsigned c = 0; c < 128; c++)
      v[c] = h_fp8_value(dt, (uint8_t)c);
    filled[e4m3] = true;
  }
  uint8_t best = 0;
  for (unsigned c = 1; c <= max_code; c++) {
    double d = fabs(v[c] - a), dbest = fabs(v[best] - a);
    if (d < dbest || (d == dbest && (c & 1u) == 0))
      best = (uint8_t)c;
  }
  return (uint8_t)(sign | best);
}

/* ---- datatypes -------------------------------------------------------- */

const ringcc_datatype_t h_all_dtypes[RINGCC_NUM_DATATYPES] = {
    RINGCC_INT8,  RINGCC_UINT8,   RINGCC_INT32,    RINGCC_UINT32,
    RINGCC_INT64, RINGCC_UINT64,  RINGCC_FLOAT16,  RINGCC_BFLOAT16,
    RINGCC_FLOAT32, RINGCC_FLOAT64, RINGCC_FLOAT8_E4M3, RINGCC_FLOAT8_E5M2};
const ringcc_op_t h_all_ops[RINGCC_NUM_OPS] = {RINGCC_SUM, RINGCC_PROD,
                                               RINGCC_MIN, RINGCC_MAX,
                                               RINGCC_AVG};

size_t h_dt_size(ringcc_datatype_t dt) {
  switch (dt) {
  case RINGCC_INT8:
  case RINGCC_UINT8:
  case RINGCC_FLOAT8_E4M3:
  case RINGCC_FLOAT8_E5M2:
    return 1;
  case RINGCC_FLOAT16:
  case RINGCC_BFLOAT16:
    return 2;
  case RINGCC_INT32:
  case RINGCC_UINT32:
  case RINGCC_FLOAT32:
    return 4;
  case RINGCC_INT64:
  case RINGCC_UINT64:
  case RINGCC_FLOAT64:
    return 8;
  default:
    return 0;
  }
}

const char *h_dt_name(ringcc_datatype_t dt) {
  static const char *names[] = {"int8",    "uint8",    "int32",   "uint32",
                                "int64",   "uint64",   "float16", "bfloat16",
                                "float32", "float64",  "float8_e4m3",
                                "float8_e5m2"};
  return (int)dt >= 0 && dt < RINGCC_NUM_DATATYPES ? names[dt] : "?";
}

const char *h_op_name(ringcc_op_t op) {
  static const char *names[] = {"sum", "prod", "min", "max", "avg"};
  return (int)op >= 0 && op < RINGCC_NUM_OPS ? names[op] : "?";
}

bool h_dt_is_float(ringcc_datatype_t dt) {
  return dt == RINGCC_FLOAT16 || dt == RINGCC_BFLOAT16 ||
         dt == RINGCC_FLOAT32 || dt == RINGCC_FLOAT64 ||
         dt == RINGCC_FLOAT8_E4M3 || dt == RINGCC_FLOAT8_E5M2;
}

static bool dt_is_signed_int(ringcc_datatype_t dt) {
  return dt == RINGCC_INT8 || dt == RINGCC_INT32 || dt == RINGCC_INT64;
}

uint64_t h_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t h_hash3(uint64_t a, uint64_t b, uint64_t c) {
  return h_mix64(h_mix64(h_mix64(a) ^ b) ^ c);
}

uint64_t h_hash_bytes(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* ---- exact inputs ------------------------------------------------------ */

/* An input is v * 2^exponent with v a (small) integer: v from input_value,
 * the exponent from input_exponent. Integer types ignore the exponent and
 * wrap v modulo 2^bits. */

static int input_exponent(ringcc_datatype_t dt, ringcc_op_t op) {
  if (op == RINGCC_PROD)
    return 0;
  bool minmax = op == RINGCC_MIN || op == RINGCC_MAX;
  switch (dt) {
  case RINGCC_FLOAT16:
    return minmax ? -2 : -3;
  case RINGCC_BFLOAT16:
    return minmax ? -1 : -4;
  case RINGCC_FLOAT32:
    return minmax ? -10 : -8;
  case RINGCC_FLOAT64:
    return minmax ? -30 : -20;
  case RINGCC_FLOAT8_E4M3:
    return minmax ? -1 : -2;
  case RINGCC_FLOAT8_E5M2:
    return -1;
  default:
    return 0;
  }
}

/* A uniform integer in [-half_range, half_range]. */
static int64_t centered(uint64_t h, int64_t half_range) {
  return (int64_t)(h % (uint64_t)(2 * half_range + 1)) - half_range;
}

/* SUM and AVG: with up to 8 ranks, |sum of v| stays within the exactly
 * representable integers of the type (float16 2048, bfloat16 256, float32
 * 2^24, float64 2^53, float8 e4m3 16, e5m2 8; so does every partial sum) and the signed integer types never overflow; int8,
 * uint8 and the unsigned types wrap, which modular expectations follow. */
static int64_t sum_value(ringcc_datatype_t dt, uint64_t h) {
  switch (dt) {
  case RINGCC_INT8:
    return centered(h, 100);
  case RINGCC_UINT8:
    return (int64_t)(h % 201);
  case RINGCC_INT32:
    return centered(h, (int64_t)1 << 27);
  case RINGCC_UINT32:
    return (int64_t)(h & 0xffffffffu);
  case RINGCC_INT64:
    return centered(h, (int64_t)1 << 59);
  case RINGCC_UINT64:
    return (int64_t)h;
  case RINGCC_FLOAT16:
    return centered(h, 255);
  case RINGCC_BFLOAT16:
    return centered(h, 31);
  case RINGCC_FLOAT32:
    return centered(h, (int64_t)1 << 20);
  case RINGCC_FLOAT64:
    return centered(h, (int64_t)1 << 48);
  case RINGCC_FLOAT8_E4M3:
    return centered(h, 2);
  case RINGCC_FLOAT8_E5M2:
    return centered(h, 1);
  default:
    return 0;
  }
}

/* PROD: mostly 1, a few 2s (and 3s, -1s where exact); products of up to 8
 * ranks stay exact in floats; integers wrap (unsigned, int8) or stay in
 * range (int32, int64). */
static int64_t prod_value(ringcc_datatype_t dt, uint64_t h) {
  unsigned k = (unsigned)(h % 8);
  if (h_dt_is_float(dt))
    return k < 2 ? 2 : k < 4 ? -1 : 1;
  if (dt_is_signed_int(dt))
    return k == 0 ? 2 : k == 1 ? 3 : k < 4 ? -1 : 1;
  if (dt == RINGCC_UINT32 || dt == RINGCC_UINT64)
    return k == 0 ? 2 : k == 1 ? 3 : k == 2 ? 65537 : 1;
  return k == 0 ? 2 : k == 1 ? 3 : 1;
}

/* MIN and MAX: a per-rank distinct high part (base: (r*3 + idx) % 8 differs
 * for every rank below 8) and a low part shared by all ranks, spread over the
 * type's range, negative for signed types. */
static int64_t minmax_value(ringcc_datatype_t dt, int rank, size_t idx,
                            uint64_t h_idx) {
  int64_t base = (int64_t)(h_idx % 25) * 8 + (int64_t)(((uint64_t)rank * 3 + idx) % 8);
  int64_t sb = base - 100; /* [-100, 99] */
  uint64_t low = h_mix64(h_idx);
  switch (dt) {
  case RINGCC_INT8:
    return sb;
  case RINGCC_UINT8:
    return base;
  case RINGCC_INT32:
    return sb * ((int64_t)1 << 24) + (int64_t)(low & 0xffffff);
  case RINGCC_UINT32:
    return base * ((int64_t)1 << 24) + (int64_t)(low & 0xffffff);
  case RINGCC_INT64:
    return sb * ((int64_t)1 << 56) + (int64_t)(low & (((uint64_t)1 << 56) - 1));
  case RINGCC_UINT64:
    return base * ((int64_t)1 << 55) + (int64_t)(low & (((uint64_t)1 << 55) - 1));
  case RINGCC_FLOAT16:
    return sb * 4 + (int64_t)(low & 3);
  case RINGCC_BFLOAT16:
    return sb * 2 + (int64_t)(low & 1);
  case RINGCC_FLOAT32:
    return sb * 65536 + (int64_t)(low & 0xffff);
  case RINGCC_FLOAT64:
    return sb * ((int64_t)1 << 40) + (int64_t)(low & (((uint64_t)1 << 40) - 1));
  case RINGCC_FLOAT8_E4M3: /* 8 values, one per rank below 8, all exact */
  case RINGCC_FLOAT8_E5M2:
    return base % 8 - 4;
  default:
    return 0;
  }
}

static int64_t input_value(ringcc_datatype_t dt, ringcc_op_t op, int rank,
                           size_t idx, uint64_t salt) {
  uint64_t s = salt ^ ((uint64_t)dt << 40) ^ ((uint64_t)op << 48);
  if (op == RINGCC_MIN || op == RINGCC_MAX)
    return minmax_value(dt, rank, idx, h_hash3(s, 0x6d696e, idx));
  uint64_t h = h_hash3(s, (uint64_t)rank, idx);
  return op == RINGCC_PROD ? prod_value(dt, h) : sum_value(dt, h);
}

/* Stores an integer v (integer types, modulo 2^bits) or the float v*2^e. */
static void store_int(ringcc_datatype_t dt, uint64_t u, void *elem) {
  switch (h_dt_size(dt)) {
  case 1: {
    uint8_t x = (uint8_t)u;
    memcpy(elem, &x, 1);
    break;
  }
  case 4: {
    uint32_t x = (uint32_t)u;
    memcpy(elem, &x, 4);
    break;
  }
  default:
    memcpy(elem, &u, 8);
    break;
  }
}

static void store_real(ringcc_datatype_t dt, double x, void *elem) {
  switch (dt) {
  case RINGCC_FLOAT16: {
    uint16_t h = h_float_to_half((float)x);
    memcpy(elem, &h, 2);
    break;
  }
  case RINGCC_BFLOAT16: {
    uint16_t h = h_float_to_bf16((float)x);
    memcpy(elem, &h, 2);
    break;
  }
  case RINGCC_FLOAT32: {
    float f = (float)x;
    memcpy(elem, &f, 4);
    break;
  }
  case RINGCC_FLOAT8_E4M3:
  case RINGCC_FLOAT8_E5M2: {
    uint8_t c = h_fp8_code(dt, x);
    memcpy(elem, &c, 1);
    break;
  }
  default:
    memcpy(elem, &x, 8);
    break;
  }
}

static void store_value(ringcc_datatype_t dt, ringcc_op_t op, int64_t v,
                        void *elem) {
  if (h_dt_is_float(dt))
    store_real(dt, ldexp((double)v, input_exponent(dt, op)), elem);
  else
    store_int(dt, (uint64_t)v, elem);
}

void h_input_store(ringcc_datatype_t dt, ringcc_op_t op, int rank, size_t idx,
                   uint64_t salt, void *elem) {
  store_value(dt, op, input_value(dt, op, rank, idx, salt), elem);
}

void h_fill_input(ringcc_datatype_t dt, ringcc_op_t op, int rank,
                  size_t first_idx, uint64_t salt, void *buf, size_t count) {
  size_t es = h_dt_size(dt);
  for (size_t i = 0; i < count; i++)
    h_input_store(dt, op, rank, first_idx + i, salt, (char *)buf + i * es);
}

/* Sign-extends the low bits of u for a signed type of size bytes. */
static int64_t as_signed(uint64_t u, size_t bytes) {
  if (bytes == 8)
    return (int64_t)u;
  unsigned bits = (unsigned)bytes * 8;
  uint64_t mask = ((uint64_t)1 << bits) - 1;
  u &= mask;
  if (u >> (bits - 1))
    return (int64_t)u - ((int64_t)1 << bits);
  return (int64_t)u;
}

static uint64_t as_unsigned(uint64_t u, size_t bytes) {
  return bytes == 8 ? u : u & (((uint64_t)1 << (bytes * 8)) - 1);
}

/* AVG: floats divide the exact sum in float (double for float64) and round
 * to the type; integers divide the modular sum truncating toward zero. */
static void store_avg(ringcc_datatype_t dt, ringcc_op_t op, int nranks,
                      uint64_t usum, int64_t ssum, void *elem) {
  size_t es = h_dt_size(dt);
  if (dt == RINGCC_FLOAT64) {
    double x = ldexp((double)ssum, input_exponent(dt, op)) / (double)nranks;
    memcpy(elem, &x, 8);
  } else if (h_dt_is_float(dt)) {
    float x = (float)ldexp((double)ssum, input_exponent(dt, op));
    volatile float q = x / (float)nranks;
    store_real(dt, (double)q, elem);
  } else if (dt_is_signed_int(dt)) {
    store_int(dt, (uint64_t)(as_signed(usum, es) / nranks), elem);
  } else {
    store_int(dt, as_unsigned(usum, es) / (uint64_t)nranks, elem);
  }
}

void h_expected_store(ringcc_datatype_t dt, ringcc_op_t op, int nranks,
                      size_t idx, uint64_t salt, void *elem) {
  /* Modulo 2^64 (no overflow UB); for floats the exact sum and product fit
   * in int64 by construction, so the modular result is the exact one. */
  uint64_t usum = 0, uprod = 1;
  int64_t mn = INT64_MAX, mx = INT64_MIN;
  for (int r = 0; r < nranks; r++) {
    int64_t v = input_value(dt, op, r, idx, salt);
    usum += (uint64_t)v;
    uprod *= (uint64_t)v;
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  int64_t ssum = (int64_t)usum, sprod = (int64_t)uprod;
  switch (op) {
  case RINGCC_SUM:
    if (h_dt_is_float(dt))
      store_value(dt, op, ssum, elem);
    else
      store_int(dt, usum, elem);
    break;
  case RINGCC_PROD:
    if (h_dt_is_float(dt))
      store_value(dt, op, sprod, elem);
    else
      store_int(dt, uprod, elem);
    break;
  case RINGCC_MIN:
    store_value(dt, op, mn, elem);
    break;
  case RINGCC_MAX:
    store_value(dt, op, mx, elem);
    break;
  default:
    store_avg(dt, op, nranks, usum, ssum, elem);
    break;
  }
}

void h_fill_expected(ringcc_datatype_t dt, ringcc_op_t op, int nranks,
                     size_t first_idx, uint64_t salt, void *buf, size_t count) {
  size_t es = h_dt_size(dt);
  for (size_t i = 0; i < count; i++)
    h_expected_store(dt, op, nranks, first_idx + i, salt, (char *)buf + i * es);
}

void h_fill_pattern(ringcc_datatype_t dt, uint64_t owner, size_t first_idx,
                    uint64_t salt, void *buf, size_t count) {
  size_t es = h_dt_size(dt);
  for (size_t i = 0; i < count; i++) {
    uint64_t h = h_hash3(salt ^ 0x7061747465726eull, owner, first_idx + i);
    memcpy((char *)buf + i * es, &h, es);
  }
}

const char *h_format_elem(ringcc_datatype_t dt, const void *elem, char *out,
                          size_t len) {
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  float f;
  double d;
  switch (dt) {
  case RINGCC_INT8:
    memcpy(&u8, elem, 1);
    snprintf(out, len, "%d", (int)(int8_t)u8);
    break;
  case RINGCC_UINT8:
    memcpy(&u8, elem, 1);
    snprintf(out, len, "%u", (unsigned)u8);
    break;
  case RINGCC_INT32:
    memcpy(&u32, elem, 4);
    snprintf(out, len, "%d", (int)(int32_t)u32);
    break;
  case RINGCC_UINT32:
    memcpy(&u32, elem, 4);
    snprintf(out, len, "%u", (unsigned)u32);
    break;
  case RINGCC_INT64:
    memcpy(&u64, elem, 8);
    snprintf(out, len, "%lld", (long long)(int64_t)u64);
    break;
  case RINGCC_UINT64:
    memcpy(&u64, elem, 8);
    snprintf(out, len, "%llu", (unsigned long long)u64);
    break;
  case RINGCC_FLOAT16:
    memcpy(&u16, elem, 2);
    snprintf(out, len, "%.9g (0x%04x)", (double)h_half_to_float(u16), u16);
    break;
  case RINGCC_BFLOAT16:
    memcpy(&u16, elem, 2);
    snprintf(out, len, "%.9g (0x%04x)", (double)h_bf16_to_float(u16), u16);
    break;
  case RINGCC_FLOAT32:
    memcpy(&f, elem, 4);
    memcpy(&u32, elem, 4);
    snprintf(out, len, "%.9g (0x%08x)", (double)f, u32);
    break;
  case RINGCC_FLOAT64:
    memcpy(&d, elem, 8);
    snprintf(out, len, "%.17g", d);
    break;
  case RINGCC_FLOAT8_E4M3:
  case RINGCC_FLOAT8_E5M2:
    memcpy(&u8, elem, 1);
    snprintf(out, len, "%.9g (0x%02x)", h_fp8_value(dt, u8), u8);
    break;
  default:
    snprintf(out, len, "?");
    break;
  }
  return out;
}

bool h_check_elems(const h_ctx_t *ctx, const char *what, ringcc_datatype_t dt,
                   const void *got, const void *expected, size_t count) {
  size_t es = h_dt_size(dt);
  if (count == 0 || memcmp(got, expected, count * es) == 0)
    return true;
  size_t first = SIZE_MAX, ndiff = 0;
  for (size_t i = 0; i < count; i++) {
    if (memcmp((const char *)got + i * es, (const char *)expected + i * es,
               es) != 0) {
      if (first == SIZE_MAX)
        first = i;
      ndiff++;
    }
  }
  char a[64], b[64];
  h_fail(ctx, "%s: element %zu is %s, expected %s (%zu of %zu elements differ)",
         what, first, h_format_elem(dt, (const char *)got + first * es, a, sizeof a),
         h_format_elem(dt, (const char *)expected + first * es, b, sizeof b),
         ndiff, count);
  return false;
}

/* ---- guarded buffers -------------------------------------------------- */

static unsigned char guard_byte(size_t i) {
  return (unsigned char)(0xa5u ^ (i * 29u));
}

bool h_buf_alloc(h_buf_t *b, size_t bytes) {
  b->base = malloc(bytes + 2 * H_GUARD);
  b->p = b->base ? b->base + H_GUARD : NULL;
  b->bytes = bytes;
  if (b->base == NULL)
    return false;
  h_buf_scribble(b, 0);
  return true;
}

void h_buf_free(h_buf_t *b) {
  free(b->base);
  b->base = b->p = NULL;
  b->bytes = 0;
}

static void scribble_range(unsigned char *p, uint64_t tag, size_t off,
                           size_t len) {
  for (size_t i = off; i < off + len;) {
    uint64_t h = h_hash3(tag, 0x736372, i / 8);
    for (size_t k = i % 8; k < 8 && i < off + len; k++, i++)
      p[i - off] = (unsigned char)(h >> (8 * k));
  }
}

void h_buf_scribble(h_buf_t *b, uint64_t tag) {
  for (size_t i = 0; i < H_GUARD; i++) {
    b->base[i] = guard_byte(i);
    b->p[b->bytes + i] = guard_byte(H_GUARD + i);
  }
  scribble_range(b->p, tag, 0, b->bytes);
}

bool h_buf_guards_ok(const h_ctx_t *ctx, const char *what, const h_buf_t *b) {
  for (size_t i = 0; i < H_GUARD; i++) {
    if (b->base[i] != guard_byte(i)) {
      h_fail(ctx, "%s: the guard byte %zu before the buffer was overwritten "
                  "(0x%02x, expected 0x%02x)", what, H_GUARD - i, b->base[i],
             guard_byte(i));
      return false;
    }
    if (b->p[b->bytes + i] != guard_byte(H_GUARD + i)) {
      h_fail(ctx, "%s: the guard byte %zu after the end of the buffer (%zu "
                  "bytes) was overwritten (0x%02x, expected 0x%02x)",
             what, i, b->bytes, b->p[b->bytes + i], guard_byte(H_GUARD + i));
      return false;
    }
  }
  return true;
}

bool h_buf_scribble_ok(const h_ctx_t *ctx, const char *what, const h_buf_t *b,
                       uint64_t tag, size_t off, size_t len) {
  unsigned char tmp[512];
  for (size_t done = 0; done < len;) {
    size_t n = len - done < sizeof tmp ? len - done : sizeof tmp;
    /* scribble_range writes bytes [off+done, off+done+n) of the pattern */
    scribble_range(tmp, tag, off + done, n);
    if (memcmp(tmp, b->p + off + done, n) != 0) {
      for (size_t k = 0; k < n; k++)
        if (tmp[k] != b->p[off + done + k]) {
          h_fail(ctx, "%s: byte %zu, which the call must not write, changed "
                      "(0x%02x, was 0x%02x)", what, off + done + k,
                 b->p[off + done + k], tmp[k]);
          return false;
        }
    }
    done += n;
  }
  return true;
}

int h_yama_scope(void) {
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  int scope = 0;
  if (f != NULL) {
    if (fscanf(f, "%d", &scope) != 1)
      scope = 3;
    fclose(f);
  }
  return scope;
}

int h_count_sockets(void) {
  int k = 0;
  char path[64], target[64];
  for (int fd = 0; fd < 4096; fd++) {
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t l = readlink(path, target, sizeof(target) - 1);
    if (l > 0) {
      target[l] = '\0';
      k += strncmp(target, "socket:", 7) == 0;
    }
  }
  return k;
}

void *h_reg_alloc(h_ctx_t *ctx, size_t bytes, bool registered,
                  ringcc_reg_t *reg) {
  void *p = NULL;
  *reg = NULL;
  if (!registered)
    return h_xmalloc(bytes);
  if (!h_ok(ctx, ringcc_mem_alloc(NULL, bytes, &p), "ringcc_mem_alloc"))
    return NULL;
  if (!h_ok(ctx, ringcc_comm_register(ctx->comm, p, bytes, reg),
            "ringcc_comm_register")) {
    ringcc_mem_free(p);
    return NULL;
  }
  return p;
}

int h_reg_free(h_ctx_t *ctx, void *p, ringcc_reg_t reg) {
  if (reg == NULL) {
    free(p);
    return 0;
  }
  int bad = !h_ok(ctx, ringcc_comm_deregister(ctx->comm, reg),
                  "ringcc_comm_deregister");
  return !h_ok(ctx, ringcc_mem_free(p), "ringcc_mem_free") || bad;
}

uint64_t h_calls_by(ringcc_comm_t comm, const char *coll, const char *alg) {
  ringcc_comm_stats_t st = RINGCC_COMM_STATS_INIT;
  if (ringcc_comm_stats(comm, &st) != RINGCC_SUCCESS)
    return UINT64_MAX;
  for (int i = 0; i < st.nrows; i++)
    if (strcmp(st.rows[i].collective, coll) == 0 &&
        strcmp(st.rows[i].algorithm, alg) == 0)
      return st.rows[i].calls;
  return 0;
}
