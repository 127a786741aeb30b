/*
 * bench_common.c - sizes, inputs, checks, the timed loop and the output of
 * bench/mpi_bench.c and bench/gloo_bench.cc, written to match
 * tools/ringcc-bench.c (float32, op sum) so that their rows can be compared
 * with ringcc-bench's one for one. See bench_common.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_common.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_MISMATCH_REPORTS 3 /* per rank and check */
#define MAX_SIZES 128

struct coll_info {
  const char *name;
  bool per_rank_blocks; /* size must be a multiple of nranks*4 */
  int busbw;            /* 1: x(n-1)/n, 2: x2(n-1)/n */
};

static const struct coll_info colls[BC_NUM_COLLS] = {
    [BC_ALLREDUCE] = {"allreduce", false, 2},
    [BC_REDUCE_SCATTER] = {"reduce_scatter", true, 1},
    [BC_ALLGATHER] = {"allgather", true, 1},
};

const char *bc_coll_name(enum bc_coll coll) { return colls[coll].name; }

/* ---- options ----------------------------------------------------------------- */

void bc_usage(FILE *f, const char *prog, const char *launch, int flags) {
  fprintf(f,
"Usage: %s%s [options]\n"
"Measures a collective over a range of sizes with ringcc-bench's method and\n"
"output (float32, op sum), so the rows compare one for one.\n"
"\n"
"Options:\n"
"  -c COLL      allreduce | reduce_scatter | allgather (default allreduce)\n"
"  -b SIZE      smallest size in bytes (default 8)\n"
"  -e SIZE      largest size in bytes (default 64M)\n"
"  -f FACTOR    sizes go down from -e by FACTOR, plus -b itself (default 2)\n"
"               SIZE takes a K, M or G suffix (x1024, x1024^2, x1024^3)\n"
"  -d float32   -o sum   accepted for ringcc-bench compatibility (the only\n"
"               datatype and op)\n"
"  -n ITERS     timed iterations per size (default 20)\n"
"  -w WARMUP    untimed iterations before them (default 5)\n"
"  -m SECONDS   time at least this long per size: more iterations than -n\n"
"               where calls are short (from the warm-up's time, the slowest\n"
"               rank's; at most 1000000; default 0)\n"
"  -C 0|1       check every element of every result (default 1)\n"
"  -I 0|1       measure the in-place group too (default 1; 0 prints n/a)\n"
"  --json FILE  also write the rows to FILE as a JSON array (rank 0)\n",
          prog, launch);
  if (flags & BC_OPT_FORK)
    fprintf(f,
"  -N NRANKS    rank processes to fork (default 2)\n"
"  -T SECONDS   watchdog: stop every rank after SECONDS (default 600)\n");
  fprintf(f,
"  -h, --help   print this help and exit\n"
"\n"
"Columns (as ringcc-bench): size count type redop root, then for out-of-place\n"
"and in-place: time(us) algbw(GB/s) busbw(GB/s) #wrong. time = per-call\n"
"average of the timed loop, maximum over the ranks; algbw = size/time\n"
"(GB = 1e9 B); busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (others).\n"
"\n"
"Exit status: 0 when every call succeeded and every element was right; %d\n"
"when a call failed; %d for a usage error; %d when elements were wrong.\n",
          BC_EXIT_FAILED, BC_EXIT_USAGE, BC_EXIT_WRONG);
}

/* "8", "64K", "1M", "2G" (binary multiples). */
static bool parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  if (*s == '-' || *s == '\0') return false;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  default: break;
  }
  if (*end != '\0' || (v << shift) >> shift != v || v << shift > SIZE_MAX)
    return false;
  *out = (size_t)(v << shift);
  return true;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= 0 && v <= 3600))
    return false;
  *out = v;
  return true;
}

static bool parse_coll(const char *s, enum bc_coll *out) {
  for (int k = 0; k < BC_NUM_COLLS; k++)
    if (strcmp(s, colls[k].name) == 0) {
      *out = (enum bc_coll)k;
      return true;
    }
  return false;
}

const char *bc_parse_options(int argc, char **argv, int flags,
                             struct bc_options *o, char *err, size_t errlen) {
  *o = (struct bc_options){.coll = BC_ALLREDUCE, .min_bytes = 8,
                           .max_bytes = (size_t)64 << 20, .factor = 2,
                           .iters = 20, .warmup = 5, .check = 1, .in_place = 1,
                           .json_path = NULL, .help = 0, .nranks = 2,
                           .watchdog_s = 600};
  static const struct option longopts[] = {{"json", required_argument, NULL, 'J'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  const char *optstring = (flags & BC_OPT_FORK) ? ":c:b:e:f:d:o:n:w:m:C:I:N:T:h"
                                                : ":c:b:e:f:d:o:n:w:m:C:I:h";
  int c, factor;
  opterr = 0;
  while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
    bool ok = true;
    switch (c) {
    case 'c': ok = parse_coll(optarg, &o->coll); break;
    case 'b': ok = parse_size(optarg, &o->min_bytes); break;
    case 'e': ok = parse_size(optarg, &o->max_bytes); break;
    case 'f':
      ok = parse_int(optarg, 2, 1 << 20, &factor);
      o->factor = (size_t)factor;
      break;
    case 'd': ok = strcmp(optarg, "float32") == 0; break;
    case 'o': ok = strcmp(optarg, "sum") == 0; break;
    case 'n': ok = parse_int(optarg, 1, INT32_MAX, &o->iters); break;
    case 'w': ok = parse_int(optarg, 0, INT32_MAX, &o->warmup); break;
    case 'm': ok = parse_seconds(optarg, &o->min_time); break;
    case 'C': ok = parse_int(optarg, 0, 1, &o->check); break;
    case 'I': ok = parse_int(optarg, 0, 1, &o->in_place); break;
    case 'N': ok = parse_int(optarg, 1, 1024, &o->nranks); break;
    case 'T': ok = parse_int(optarg, 1, 7 * 24 * 3600, &o->watchdog_s); break;
    case 'J': o->json_path = optarg; break;
    case 'h': o->help = 1; return NULL;
    case ':':
      snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
      return err;
    default:
      snprintf(err, errlen, "unknown option '%s'", argv[optind - 1]);
      return err;
    }
    if (!ok) {
      snprintf(err, errlen, "invalid value '%s' for -%c", optarg, c);
      return err;
    }
  }
  if (optind < argc) {
    snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
    return err;
  }
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) {
    snprintf(err, errlen, "want 1 <= -b (%zu) <= -e (%zu)", o->min_bytes,
             o->max_bytes);
    return err;
  }
  return NULL;
}

/* ---- sizes and inputs ------------------------------------------------------- */

/* ringcc-bench's grid: from -e down by the factor while >= -b, then -b if it
 * is not on that grid. Ascending into sizes[]; returns how many. */
static int size_grid(const struct bc_options *o, size_t sizes[MAX_SIZES]) {
  size_t grid[MAX_SIZES];
  int n = 0;
  for (size_t s = o->max_bytes; s >= o->min_bytes && n < MAX_SIZES - 1;
       s /= o->factor) {
    grid[n++] = s;
    if (s / o->factor == 0) break;
  }
  if (n == 0 || grid[n - 1] != o->min_bytes) grid[n++] = o->min_bytes;
  for (int k = 0; k < n; k++) sizes[k] = grid[n - 1 - k];
  return n;
}

static struct bc_plan make_plan(enum bc_coll coll, int nranks, size_t requested) {
  struct bc_plan p = {.requested = requested};
  if (colls[coll].per_rank_blocks) {
    p.arg = requested / sizeof(float) / (size_t)nranks;
    p.count = p.arg * (size_t)nranks;
  } else {
    p.arg = p.count = requested / sizeof(float);
  }
  p.bytes = p.count * sizeof(float);
  return p;
}

/* Element i of rank q: ringcc-bench's float input for op sum (range 510). */
static float input(int q, size_t i) {
  uint64_t p = ((uint64_t)i * 7 + (uint64_t)q * 131) % 1021;
  return (float)((int64_t)p - 510);
}

static float reduced(int nranks, size_t i) {
  float acc = 0;
  for (int q = 0; q < nranks; q++) acc += input(q, i);
  return acc;
}

static void fill(float *buf, size_t n, int rank, size_t first) {
  for (size_t i = 0; i < n; i++) buf[i] = input(rank, first + i);
}

/* Inputs as the call reads them; every element the call writes is poisoned
 * (all bits set: NaN). */
static void fill_inputs(enum bc_coll coll, int rank, const struct bc_plan *p,
                        bool in_place, float *sbuf, float *rbuf) {
  size_t own = (size_t)rank * p->arg;
  if (coll == BC_ALLGATHER) {
    memset(rbuf, 0xff, p->bytes);
    fill(in_place ? rbuf + own : sbuf, p->arg, rank, own);
    return;
  }
  if (!in_place) memset(rbuf, 0xff, p->bytes);
  fill(in_place ? rbuf : sbuf, p->count, rank, 0);
}

static long long compare(const char *prog, enum bc_coll coll, int rank,
                         const struct bc_plan *p, bool in_place,
                         const float *rbuf, size_t at, size_t i, float want,
                         int *reported) {
  float got = rbuf[at];
  if (got == want) return 0;
  if (*reported < MAX_MISMATCH_REPORTS) {
    (*reported)++;
    fprintf(stderr, "%s: rank %d: wrong result (%s, %zu bytes, float32, sum, "
                    "%s): element %zu is %.9g, want %.9g\n",
            prog, rank, colls[coll].name, p->bytes,
            in_place ? "in place" : "out of place", i, (double)got,
            (double)want);
  }
  return 1;
}

/* Wrong elements in this rank's result. */
static long long check_result(const struct bc_backend *be, enum bc_coll coll,
                              int rank, int nranks, const struct bc_plan *p,
                              bool in_place, const float *rbuf) {
  long long wrong = 0;
  int reported = 0;
  size_t arg = p->arg;
  switch (coll) {
  case BC_ALLREDUCE:
    for (size_t i = 0; i < p->count; i++)
      wrong += compare(be->prog, coll, rank, p, in_place, rbuf, i, i,
                       reduced(nranks, i), &reported);
    break;
  case BC_REDUCE_SCATTER: {
    size_t first = (size_t)rank * arg;
    size_t at = in_place && be->rs_in_place_at_own_block ? first : 0;
    for (size_t j = 0; j < arg; j++)
      wrong += compare(be->prog, coll, rank, p, in_place, rbuf, at + j,
                       first + j, reduced(nranks, first + j), &reported);
    break;
  }
  default: /* allgather: block q is rank q's input */
    for (size_t i = 0; i < p->count; i++)
      wrong += compare(be->prog, coll, rank, p, in_place, rbuf, i, i,
                       input((int)(i / arg), i), &reported);
    break;
  }
  return wrong;
}

/* ---- measuring -------------------------------------------------------------- */

struct run {
  const struct bc_backend *be;
  const struct bc_options *o;
  int rank, nranks;
  float *sbuf, *rbuf;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double busbw_factor(enum bc_coll coll, int nranks) {
  double n = nranks;
  return colls[coll].busbw == 2 ? 2.0 * (n - 1) / n : (n - 1) / n;
}

static void run_once(const struct run *r, const struct bc_plan *p,
                     bool in_place) {
  if (r->be->call(r->be->ctx, r->o->coll, p, in_place, r->sbuf, r->rbuf) != 0)
    r->be->abort_job(r->be->ctx);
}

/* ringcc-bench's measure(), step for step. */
static struct bc_result measure(const struct run *r, const struct bc_plan *p,
                                bool in_place) {
  const struct bc_backend *be = r->be;
  struct bc_result res = {.valid = true, .wrong = -1};
  fill_inputs(r->o->coll, r->rank, p, in_place, r->sbuf, r->rbuf);
  double w0 = 0;
  for (int k = 0; k < r->o->warmup; k++) {
    if (k == 1) w0 = now_s(); /* the first call may set things up */
    run_once(r, p, in_place);
  }
  res.iters = r->o->iters;
  if (r->o->min_time > 0) { /* every rank takes the slowest rank's estimate */
    double est = r->o->warmup >= 2 ? (now_s() - w0) / (r->o->warmup - 1) : 0;
    if (r->o->warmup < 2) {
      w0 = now_s();
      run_once(r, p, in_place);
      est = now_s() - w0;
    }
    est = be->max_double(be->ctx, est);
    double want = est > 0 ? r->o->min_time / est : 1e6;
    if (want > res.iters) res.iters = want < 1e6 ? (int)want + 1 : 1000000;
  }
  be->barrier(be->ctx);
  double t0 = now_s();
  for (int k = 0; k < res.iters; k++) run_once(r, p, in_place);
  double mine = (now_s() - t0) / res.iters;
  double t = be->max_double(be->ctx, mine);
  res.time_us = t * 1e6;
  res.algbw = t > 0 ? (double)p->bytes / t / 1e9 : 0;
  res.busbw = res.algbw * busbw_factor(r->o->coll, r->nranks);
  if (r->o->check) {
    fill_inputs(r->o->coll, r->rank, p, in_place, r->sbuf, r->rbuf);
    run_once(r, p, in_place);
    res.wrong = be->sum_ll(be->ctx, check_result(be, r->o->coll, r->rank,
                                                 r->nranks, p, in_place,
                                                 r->rbuf));
  }
  return res;
}

/* ---- output (ringcc-bench's format) ----------------------------------------- */

#define LEAD_FMT "%12s %12s %9s %6s %5s"
#define GROUP_FMT " %10s %11s %11s %7s"
#define GROUP_WIDTH 43 /* strlen of a formatted GROUP_FMT */

static void print_header(const struct run *r) {
  const struct bc_options *o = r->o;
  printf("# %s: %s, %s\n", r->be->prog, colls[o->coll].name, r->be->library);
  printf("#  nranks %d  datatype float32  op %s  root -1  minBytes %zu  "
         "maxBytes %zu  step %zu(factor)  warmup %d  iters %d  mintime %gs  "
         "check %d\n",
         r->nranks, o->coll == BC_ALLGATHER ? "none" : "sum", o->min_bytes,
         o->max_bytes, o->factor, o->warmup, o->iters, o->min_time, o->check);
  printf("#  %s; time = per-call average of the timed loop, max over ranks; "
         "GB = 1e9 B; busbw = algbw x %.4f\n",
         r->be->call_desc, busbw_factor(o->coll, r->nranks));
}

static void print_ranks(const struct run *r) {
  struct {
    int32_t pid;
    char host[60];
  } me = {.pid = (int32_t)getpid()}, *all;
  gethostname(me.host, sizeof me.host - 1);
  all = calloc((size_t)r->nranks, sizeof me);
  if (all == NULL) {
    fprintf(stderr, "%s: out of memory\n", r->be->prog);
    r->be->abort_job(r->be->ctx);
  }
  r->be->allgather_bytes(r->be->ctx, &me, all, sizeof me);
  if (r->rank == 0)
    for (int q = 0; q < r->nranks; q++)
      printf("#  Rank %2d Pid %6d on %s\n", q, (int)all[q].pid, all[q].host);
  free(all);
}

static int center_pad(const char *label) {
  int len = (int)strlen(label);
  return (GROUP_WIDTH - len) / 2 + len;
}

static void print_table_header(void) {
  printf("#\n#" LEAD_FMT " %*s%*s %*s\n", "", "", "", "", "",
         center_pad("out-of-place"), "out-of-place",
         GROUP_WIDTH - center_pad("out-of-place") - 1, "",
         center_pad("in-place"), "in-place");
  printf("#" LEAD_FMT GROUP_FMT GROUP_FMT "\n", "size", "count", "type",
         "redop", "root", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

static void print_group(const struct bc_result *res) {
  if (!res->valid) {
    printf(GROUP_FMT, "n/a", "n/a", "n/a", "n/a");
    return;
  }
  char wrong[24];
  if (res->wrong < 0) snprintf(wrong, sizeof wrong, "N/A");
  else snprintf(wrong, sizeof wrong, "%lld", res->wrong);
  printf(" %10.2f %11.2f %11.2f %7s", res->time_us, res->algbw, res->busbw,
         wrong);
}

struct row {
  struct bc_plan plan;
  struct bc_result oop, ip;
};

static const char *redop_of(enum bc_coll coll) {
  return coll == BC_ALLGATHER ? "none" : "sum";
}

static void print_row(enum bc_coll coll, const struct row *row) {
  char size[24], count[24];
  snprintf(size, sizeof size, "%zu", row->plan.bytes);
  snprintf(count, sizeof count, "%zu", row->plan.count);
  printf(" " LEAD_FMT, size, count, "float32", redop_of(coll), "-1");
  print_group(&row->oop);
  print_group(&row->ip);
  printf("\n");
  fflush(stdout);
}

static void json_group(FILE *f, const char *prefix, const struct bc_result *res) {
  if (!res->valid) {
    fprintf(f, ", \"%s_time_us\": null, \"%s_algbw_GBps\": null, "
               "\"%s_busbw_GBps\": null, \"%s_wrong\": null",
            prefix, prefix, prefix, prefix);
    return;
  }
  fprintf(f, ", \"%s_time_us\": %.9g, \"%s_algbw_GBps\": %.9g, "
             "\"%s_busbw_GBps\": %.9g, \"%s_wrong\": ",
          prefix, res->time_us, prefix, res->algbw, prefix, res->busbw, prefix);
  if (res->wrong < 0) fprintf(f, "null");
  else fprintf(f, "%lld", res->wrong);
}

/* ringcc-bench's JSON schema. Returns 0, or -1 with errno set. */
static int write_json(const struct run *r, FILE *f, const struct row *rows,
                      int nrows) {
  fprintf(f, "[\n");
  for (int k = 0; k < nrows; k++) {
    const struct row *row = &rows[k];
    fprintf(f, "  {\"collective\": \"%s\", \"nranks\": %d, \"size\": %zu, "
               "\"count\": %zu, \"type\": \"float32\", \"redop\": \"%s\", "
               "\"root\": -1, \"iters\": %d, \"warmup\": %d",
            colls[r->o->coll].name, r->nranks, row->plan.bytes,
            row->plan.count, redop_of(r->o->coll),
            row->oop.valid ? row->oop.iters : row->ip.iters, r->o->warmup);
    json_group(f, "oop", &row->oop);
    json_group(f, "ip", &row->ip);
    fprintf(f, "}%s\n", k + 1 < nrows ? "," : "");
  }
  fprintf(f, "]\n");
  if (ferror(f)) {
    errno = EIO;
    return -1;
  }
  return 0;
}

/* ---- the run ---------------------------------------------------------------- */

static float *alloc_touched(const struct bc_backend *be, size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 64;
  int e = posix_memalign(&p, 4096, bytes);
  if (e != 0) {
    fprintf(stderr, "%s: cannot allocate %zu bytes: %s\n", be->prog, bytes,
            strerror(e));
    be->abort_job(be->ctx);
  }
  memset(p, 0, bytes); /* first touch, outside the timed loops */
  return (float *)p;
}

/* Opens the JSON file on rank 0; every rank learns whether that worked. */
static int open_json(const struct run *r, FILE **out) {
  long long failed = 0;
  *out = NULL;
  if (r->rank == 0 && r->o->json_path) {
    *out = fopen(r->o->json_path, "w");
    if (*out == NULL) {
      fprintf(stderr, "%s: cannot write %s: %s\n", r->be->prog,
              r->o->json_path, strerror(errno));
      failed = 1;
    }
  }
  return r->be->sum_ll(r->be->ctx, failed) ? -1 : 0;
}

int bc_run(const struct bc_backend *be, const struct bc_options *o, int rank,
           int nranks) {
  struct run r = {.be = be, .o = o, .rank = rank, .nranks = nranks};
  FILE *json;
  if (open_json(&r, &json) != 0) return BC_EXIT_USAGE;

  size_t sizes[MAX_SIZES], buf_bytes = 0;
  int nsizes = size_grid(o, sizes);
  struct row rows[MAX_SIZES];
  for (int k = 0; k < nsizes; k++) {
    rows[k] = (struct row){.plan = make_plan(o->coll, nranks, sizes[k])};
    if (rows[k].plan.bytes > buf_bytes) buf_bytes = rows[k].plan.bytes;
  }
  r.sbuf = alloc_touched(be, buf_bytes);
  r.rbuf = alloc_touched(be, buf_bytes);

  if (rank == 0) print_header(&r);
  print_ranks(&r);
  if (rank == 0) print_table_header();

  long long total_wrong = 0;
  double busbw_sum = 0;
  int busbw_n = 0, measured = 0;
  for (int k = 0; k < nsizes; k++) {
    struct row *row = &rows[k];
    if (row->plan.count == 0) {
      if (rank == 0)
        printf("#  size %zu skipped: less than one float32 element%s\n",
               row->plan.requested,
               colls[o->coll].per_rank_blocks ? " per rank" : "");
      continue;
    }
    row->oop = measure(&r, &row->plan, false);
    if (o->in_place) row->ip = measure(&r, &row->plan, true);
    else row->ip = (struct bc_result){.valid = false};
    const struct bc_result *groups[2] = {&row->oop, &row->ip};
    for (int g = 0; g < 2; g++) {
      if (!groups[g]->valid) continue;
      busbw_sum += groups[g]->busbw;
      busbw_n++;
      if (groups[g]->wrong > 0) total_wrong += groups[g]->wrong;
    }
    rows[measured++] = *row;
    if (rank == 0) print_row(o->coll, row);
  }

  int status = 0;
  if (rank == 0) {
    if (o->check)
      printf("# Out of bounds values : %lld %s\n", total_wrong,
             total_wrong ? "FAILED" : "OK");
    else
      printf("# Out of bounds values : N/A (check disabled)\n");
    printf("# Avg bus bandwidth    : %g \n#\n",
           busbw_n ? busbw_sum / busbw_n : 0.0);
    fflush(stdout);
    if (json) {
      int rc = write_json(&r, json, rows, measured);
      if (fclose(json) != 0 || rc != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", be->prog, o->json_path,
                strerror(errno));
        status = BC_EXIT_FAILED;
      }
    }
    if (total_wrong)
      fprintf(stderr, "%s: FAILED: %lld wrong elements in total (column "
                      "#wrong)\n", be->prog, total_wrong);
  }
  fflush(stdout);
  fflush(stderr);
  free(r.sbuf);
  free(r.rbuf);
  if (total_wrong) return BC_EXIT_WRONG;
  /* rank 0's JSON failure is every rank's */
  return be->sum_ll(be->ctx, status) ? BC_EXIT_FAILED : 0;
}
