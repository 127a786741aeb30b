/*
 * bench_common.c - options, sizes, inputs, checks, the timed loop and the
 * output shared by tools/ringcc-bench.c, bench/mpi_bench.c and
 * bench/gloo_bench.cc. See bench_common.h.
 *
 * Conventions (nccl-tests): size = bytes of the buffer for allreduce, bcast,
 * reduce and sendrecv; of the gathered output for allgather; of the full
 * input for reduce_scatter; of the full send buffer for alltoall.
 * algbw = size / time (GB = 1e9 B); busbw = algbw * 2(n-1)/n (allreduce),
 * (n-1)/n (reduce_scatter, allgather, alltoall), 1 (bcast, reduce, sendrecv).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_common.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_MISMATCH_REPORTS 3 /* per rank and check */

/* ---- collectives, datatypes, ops ----------------------------------------- */

struct coll_info {
  const char *name;
  bool has_op, has_root;
  bool per_rank_blocks; /* size must be a multiple of nranks*typesize */
  int busbw;            /* 0: x1, 1: x(n-1)/n, 2: x2(n-1)/n */
};

static const struct coll_info colls[BC_NUM_COLLS] = {
    [BC_ALLREDUCE] = {"allreduce", true, false, false, 2},
    [BC_REDUCE_SCATTER] = {"reduce_scatter", true, false, true, 1},
    [BC_ALLGATHER] = {"allgather", false, false, true, 1},
    [BC_BCAST] = {"bcast", false, true, false, 0},
    [BC_REDUCE] = {"reduce", true, true, false, 0},
    [BC_ALLTOALL] = {"alltoall", false, false, true, 1},
    [BC_SENDRECV] = {"sendrecv", false, false, false, 0},
    [BC_GATHER] = {"gather", false, true, true, 1},
    [BC_SCATTER] = {"scatter", false, true, true, 1},
    [BC_ALLGATHERV] = {"allgatherv", false, false, true, 1},
    [BC_ALLTOALLV] = {"alltoallv", false, false, true, 1},
};

/* The collectives measured out of place only (no in-place group). */
static bool no_in_place(enum bc_coll c) {
  return c == BC_SENDRECV || c == BC_GATHER || c == BC_SCATTER ||
         c == BC_ALLGATHERV || c == BC_ALLTOALLV;
}

size_t bc_vcount(enum bc_coll coll, int nranks, size_t arg, int from, int to) {
  if (nranks < 2)
    return arg;
  size_t w = coll == BC_ALLTOALLV ? (size_t)((from + to) % nranks)
                                  : (size_t)from;
  return 2 * arg * w / (size_t)(nranks - 1);
}

/* Where block `to` starts in rank from's send buffer (alltoallv), or rank
 * from's block in the gathered output (allgatherv): the running sum. */
static size_t vdispl(enum bc_coll coll, int nranks, size_t arg, int from,
                     int to) {
  size_t at = 0;
  for (int k = 0; k < (coll == BC_ALLTOALLV ? to : from); k++)
    at += coll == BC_ALLTOALLV ? bc_vcount(coll, nranks, arg, from, k)
                               : bc_vcount(coll, nranks, arg, k, 0);
  return at;
}

enum kind { K_SINT, K_UINT, K_FLOAT };

struct dt_info {
  const char *name;
  size_t size;
  enum kind kind;
  int64_t exact; /* floats: every integer of magnitude <= exact is exact */
  int max_twos;  /* floats: factors of 2 a product may hold and stay finite */
};

static const struct dt_info dts[BC_NUM_DTYPES] = {
    [BC_INT8] = {"int8", 1, K_SINT, 0, 0},
    [BC_UINT8] = {"uint8", 1, K_UINT, 0, 0},
    [BC_INT32] = {"int32", 4, K_SINT, 0, 0},
    [BC_UINT32] = {"uint32", 4, K_UINT, 0, 0},
    [BC_INT64] = {"int64", 8, K_SINT, 0, 0},
    [BC_UINT64] = {"uint64", 8, K_UINT, 0, 0},
    [BC_FLOAT16] = {"float16", 2, K_FLOAT, 2048, 15},
    [BC_BFLOAT16] = {"bfloat16", 2, K_FLOAT, 256, 127},
    [BC_FLOAT32] = {"float32", 4, K_FLOAT, INT64_C(1) << 24, 127},
    [BC_FLOAT64] = {"float64", 8, K_FLOAT, INT64_C(1) << 53, 1023},
    [BC_FLOAT8_E4M3] = {"float8_e4m3", 1, K_FLOAT, 16, 8},
    [BC_FLOAT8_E5M2] = {"float8_e5m2", 1, K_FLOAT, 8, 15},
};

static const char *const op_names[BC_NUM_OPS] = {
    [BC_SUM] = "sum", [BC_PROD] = "prod", [BC_MIN] = "min",
    [BC_MAX] = "max", [BC_AVG] = "avg"};

const char *bc_coll_name(enum bc_coll coll) { return colls[coll].name; }
const char *bc_dtype_name(enum bc_dtype dt) { return dts[dt].name; }
size_t bc_dtype_size(enum bc_dtype dt) { return dts[dt].size; }
const char *bc_op_name(enum bc_op op) { return op_names[op]; }
bool bc_coll_has_op(enum bc_coll coll) { return colls[coll].has_op; }
bool bc_coll_has_root(enum bc_coll coll) { return colls[coll].has_root; }

static const char *redop_of(const struct bc_options *o) {
  return colls[o->coll].has_op ? op_names[o->op] : "none";
}

static int root_of(const struct bc_options *o) {
  return colls[o->coll].has_root ? o->root : -1;
}

void bc_call_context(const struct bc_options *o, const struct bc_plan *p,
                     bool in_place, char *buf, size_t len) {
  snprintf(buf, len, "(%s, %zu bytes, %s%s%s, %s)", colls[o->coll].name,
           p->bytes, dts[o->dtype].name, colls[o->coll].has_op ? ", " : "",
           colls[o->coll].has_op ? op_names[o->op] : "",
           in_place ? "in place" : "out of place");
}

/* ---- options ------------------------------------------------------------- */

/* The program names that select a collective, as nccl-tests names its
 * binaries (make install links them to ringcc-bench). */
static const char *const perf_names[BC_NUM_COLLS] = {
    [BC_ALLREDUCE] = "all_reduce_perf",
    [BC_REDUCE_SCATTER] = "reduce_scatter_perf",
    [BC_ALLGATHER] = "all_gather_perf",
    [BC_BCAST] = "broadcast_perf",
    [BC_REDUCE] = "reduce_perf",
    [BC_ALLTOALL] = "alltoall_perf",
    [BC_SENDRECV] = "sendrecv_perf"};

int bc_coll_of_prog(const char *argv0) {
  const char *base = argv0 ? strrchr(argv0, '/') : NULL;
  base = base ? base + 1 : argv0;
  for (int k = 0; base && k < BC_NUM_COLLS; k++)
    if (perf_names[k] && strcmp(base, perf_names[k]) == 0) return k;
  return -1;
}

void bc_usage_common(FILE *f) {
  fprintf(f,
"nccl-tests' options, with nccl-tests' meanings:\n"
"  -b, --minbytes SIZE      smallest size (default 8)\n"
"  -e, --maxbytes SIZE      largest size (default 64M)\n"
"  -f, --stepfactor N       sizes go up from -b, times N while <= -e\n"
"                           (default 2; 1: use -i)\n"
"  -i, --stepbytes BYTES    sizes go up from -b by BYTES (used when -f is 1\n"
"                           or -i is given without -f; default 1M)\n"
"                           SIZE and BYTES take a K, M or G suffix (x1024,\n"
"                           x1024^2, x1024^3)\n"
"  -n, --iters N            timed iterations per size (default 20)\n"
"  -w, --warmup_iters N     untimed iterations before them (default 5)\n"
"  -m, --agg_iters 1        calls per iteration: 1 only (timed one by one)\n"
"  -c, --check N            checked calls per size and placement, each on\n"
"                           fresh inputs, every element compared (default 1;\n"
"                           0: no check, #wrong shows N/A)\n"
"  -a, --average 0|1|2|3    the time of rank 0 (0), the mean over ranks (1,\n"
"                           default), the minimum (2) or the maximum (3)\n"
"  -z, --blocking 0|1       1: every rank waits for the others after each\n"
"                           call (a barrier; default 0)\n"
"  -N, --run_cycles N       run the sweep of sizes N times (default 1; 0:\n"
"                           until stopped)\n"
"  -C, --report_cputime 0|1 1: the time column is the time to issue the\n"
"                           calls (the bandwidths still use the time to\n"
"                           complete them; host calls block, so for host\n"
"                           buffers the two are the same)\n"
"  -g, --ngpus 1            GPUs per rank: 1 (start more ranks for more)\n"
"  -t, --nthreads 1         threads per rank: 1\n"
"  -G, --cudagraph N        N > 0: capture the timed calls as a CUDA graph\n"
"                           and replay it N times; with device buffers only\n"
"                           (default 0)\n");
}

void bc_usage(FILE *f, const char *prog, const char *launch, int flags) {
  fprintf(f,
"Usage: %s%s [options]\n"
"Measures a collective over a range of sizes with ringcc-bench's method and\n"
"output (float32, op sum), so the rows compare one for one.\n"
"\n",
          prog, launch);
  bc_usage_common(f);
  fprintf(f,
"  -d float32   -o sum      accepted for ringcc-bench compatibility (the only\n"
"                           datatype and op)\n"
"\n"
"Options of this program:\n"
"  --coll COLL              allreduce | reduce_scatter | allgather (default\n"
"                           allreduce)\n"
"  --min-time SECONDS       time at least this long per size: more iterations\n"
"                           than -n where calls are short (from the warm-up's\n"
"                           time, the slowest rank's; at most 1000000\n"
"                           iterations; default 0)\n");
  if (flags & BC_OPT_IN_PLACE)
    fprintf(f,
"  --in-place 0|1           measure the in-place group too (default 1; 0\n"
"                           prints n/a)\n");
  fprintf(f,
"  --json FILE              also write the rows to FILE as a JSON array\n"
"                           (rank 0)\n");
  if (flags & BC_OPT_FORK)
    fprintf(f,
"  --nranks N               rank processes to fork (default 2)\n"
"  -T, --timeout SECONDS    watchdog: stop every rank after SECONDS (default\n"
"                           600)\n");
  fprintf(f,
"  -h, --help               print this help and exit\n"
"\n"
"Columns (as ringcc-bench): size count type redop root, then for out-of-place\n"
"and in-place: time(us) algbw(GB/s) busbw(GB/s) #wrong. time = per-call\n"
"average of the timed loop, combined over ranks as -a says; algbw =\n"
"size/time (GB = 1e9 B); busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n\n"
"(others).\n"
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

/* nccl-tests' datatype names, then libringcc's. */
static const struct {
  const char *name;
  enum bc_dtype dt;
} dtype_aliases[] = {
    {"half", BC_FLOAT16},         {"float", BC_FLOAT32},
    {"double", BC_FLOAT64},       {"f8e4m3", BC_FLOAT8_E4M3},
    {"f8e5m2", BC_FLOAT8_E5M2},   {"char", BC_INT8},
    {"int", BC_INT32},
};

static bool parse_dtype(const char *s, bool every, struct bc_options *o) {
  int found = -1;
  if (every && strcmp(s, "all") == 0) return o->all_dtypes = true;
  for (int k = 0; k < BC_NUM_DTYPES; k++)
    if (strcmp(s, dts[k].name) == 0) found = k;
  for (size_t k = 0; k < sizeof dtype_aliases / sizeof dtype_aliases[0]; k++)
    if (strcmp(s, dtype_aliases[k].name) == 0) found = (int)dtype_aliases[k].dt;
  if (found < 0 || (!every && found != BC_FLOAT32)) return false;
  o->dtype = (enum bc_dtype)found;
  o->all_dtypes = false;
  return true;
}

static bool parse_op(const char *s, bool every, struct bc_options *o) {
  if (every && strcmp(s, "all") == 0) return o->all_ops = true;
  for (int k = 0; k < BC_NUM_OPS; k++)
    if (strcmp(s, op_names[k]) == 0 && (every || k == BC_SUM)) {
      o->op = (enum bc_op)k;
      o->all_ops = false;
      return true;
    }
  return false;
}

/* Long-only options get codes above the characters. */
enum { OPT_COLL = 256, OPT_JSON, OPT_MIN_TIME, OPT_IN_PLACE, OPT_NRANKS,
       OPT_DEVICE, OPT_CALIBRATE, OPT_REGISTER, OPT_GROUP };

/* Every option any program knows: short letter (or OPT_*), long name, takes
 * a value, and the BC_OPT_* flag a program needs for it (0: every one). */
static const struct {
  int code;
  const char *name;
  bool value;
  int needs;
} known[] = {
    {'b', "minbytes", true, 0},       {'e', "maxbytes", true, 0},
    {'i', "stepbytes", true, 0},      {'f', "stepfactor", true, 0},
    {'n', "iters", true, 0},          {'m', "agg_iters", true, 0},
    {'w', "warmup_iters", true, 0},   {'c', "check", true, 0},
    {'o', "op", true, 0},             {'d', "datatype", true, 0},
    {'r', "root", true, BC_OPT_EVERY}, {'z', "blocking", true, 0},
    {'a', "average", true, 0},        {'G', "cudagraph", true, 0},
    {'N', "run_cycles", true, 0},     {'C', "report_cputime", true, 0},
    {'g', "ngpus", true, 0},          {'t', "nthreads", true, 0},
    {'R', "local_register", true, BC_OPT_REGISTER},
    {'T', "timeout", true, BC_OPT_FORK},
    {'h', "help", false, 0},
    {OPT_COLL, "coll", true, 0},      {OPT_JSON, "json", true, 0},
    {OPT_MIN_TIME, "min-time", true, 0},
    {OPT_IN_PLACE, "in-place", true, BC_OPT_IN_PLACE},
    {OPT_NRANKS, "nranks", true, BC_OPT_FORK},
    {OPT_DEVICE, "device", false, BC_OPT_DEVICE},
    {OPT_CALIBRATE, "calibrate", false, BC_OPT_CALIBRATE},
    {OPT_REGISTER, "register", false, BC_OPT_REGISTER},
    {OPT_GROUP, "group", false, BC_OPT_GROUP},
};
#define NKNOWN (sizeof known / sizeof known[0])

/* The getopt_long tables of the options a program with these flags takes. */
static void known_options(int flags, char *optstring, size_t len,
                          struct option *longopts) {
  size_t at = 0, n = 0;
  optstring[at++] = ':';
  for (size_t k = 0; k < NKNOWN; k++) {
    if (known[k].needs && !(flags & known[k].needs)) continue;
    if (known[k].code < 256 && at + 3 < len) {
      optstring[at++] = (char)known[k].code;
      if (known[k].value) optstring[at++] = ':';
    }
    longopts[n++] = (struct option){known[k].name,
                                    known[k].value ? required_argument
                                                   : no_argument,
                                    NULL, known[k].code};
  }
  optstring[at] = '\0';
  longopts[n] = (struct option){NULL, 0, NULL, 0};
}

/* The collectives --coll may name: every one, or the first three and the
 * four after sendrecv (gather, scatter, the uneven ones). */
static bool parse_coll(const char *s, bool every, enum bc_coll *out) {
  for (int k = 0; k < BC_NUM_COLLS; k++)
    if ((every || k <= BC_ALLGATHER || k > BC_SENDRECV) &&
        strcmp(s, colls[k].name) == 0) {
      *out = (enum bc_coll)k;
      return true;
    }
  return false;
}

/* One option's value into *o. Returns false when the value is invalid. */
static bool parse_one(int c, const char *arg, bool every, struct bc_options *o,
                      bool *step_given, bool *factor_given) {
  int v = 0, factor;
  switch (c) {
  case 'b': return parse_size(arg, &o->min_bytes);
  case 'e': return parse_size(arg, &o->max_bytes);
  case 'i': *step_given = true; return parse_size(arg, &o->step_bytes);
  case 'f':
    *factor_given = true;
    if (!parse_int(arg, 1, 1 << 20, &factor)) return false;
    o->factor = (size_t)factor;
    return true;
  case 'n': return parse_int(arg, 1, INT32_MAX, &o->iters);
  case 'm': return parse_int(arg, 1, 1, &v);
  case 'w': return parse_int(arg, 0, INT32_MAX, &o->warmup);
  case 'c': return parse_int(arg, 0, 1000000, &o->check);
  case 'o': return parse_op(arg, every, o);
  case 'd': return parse_dtype(arg, every, o);
  case 'r': return parse_int(arg, 0, INT32_MAX, &o->root);
  case 'z': return parse_int(arg, 0, 1, &o->blocking);
  case 'a': return parse_int(arg, 0, 3, &o->average);
  case 'G': return parse_int(arg, 0, 1000000, &o->graph_launches);
  case 'N': return parse_int(arg, 0, INT32_MAX, &o->cycles);
  case 'C': return parse_int(arg, 0, 1, &o->cputime);
  case 'g': case 't': return parse_int(arg, 1, 1, &v);
  case 'R':
    if (!parse_int(arg, 0, 2, &v)) return false;
    o->register_buffers = v > 0;
    return true;
  case 'T': return parse_int(arg, 1, 7 * 24 * 3600, &o->watchdog_s);
  case OPT_COLL: return parse_coll(arg, every, &o->coll);
  case OPT_JSON: o->json_path = arg; return true;
  case OPT_MIN_TIME: return parse_seconds(arg, &o->min_time);
  case OPT_IN_PLACE: return parse_int(arg, 0, 1, &o->in_place);
  case OPT_NRANKS: return parse_int(arg, 1, 1024, &o->nranks);
  case OPT_DEVICE: o->device = true; return true;
  case OPT_CALIBRATE: o->calibrate = true; return true;
  case OPT_REGISTER: o->register_buffers = true; return true;
  case OPT_GROUP: o->group = true; return true;
  default: return false;
  }
}

/* What a value may be, for the message of an invalid one. */
static const char *wanted(int c) {
  switch (c) {
  case 'm': return " (1 only: one call per timed iteration)";
  case 'g': return " (1 only: one GPU per rank; start more ranks for more)";
  case 't': return " (1 only: one thread per rank; start more ranks)";
  case 'f': return " (an integer >= 1)";
  case 'a': return " (0, 1, 2 or 3)";
  case 'c': return " (0 .. 1000000)";
  case 'd': return " (a datatype name, or all; see --help)";
  case 'o': return " (sum, prod, min, max, avg, or all)";
  default: return "";
  }
}

static const char *option_name(int c, char *buf, size_t len) {
  for (size_t k = 0; k < NKNOWN; k++)
    if (known[k].code == c) {
      if (c < 256) snprintf(buf, len, "-%c", c);
      else snprintf(buf, len, "--%s", known[k].name);
      return buf;
    }
  return "?";
}

/* How many sizes -b, -e and -f/-i give (at most BC_MAX_SIZES + 1). */
#define BC_MAX_SIZES 4096
static size_t next_size(const struct bc_options *o, size_t s) {
  if (o->factor > 1)
    return s > SIZE_MAX / o->factor ? SIZE_MAX : s * o->factor;
  return s > SIZE_MAX - o->step_bytes ? SIZE_MAX : s + o->step_bytes;
}

static int count_sizes(const struct bc_options *o) {
  int n = 0;
  for (size_t s = o->min_bytes; s <= o->max_bytes && n <= BC_MAX_SIZES;
       s = next_size(o, s)) {
    n++;
    if (s == SIZE_MAX) break;
  }
  return n;
}

/* Checks that need every option. */
static const char *check_options(const struct bc_options *o, int flags,
                                 char *err, size_t errlen) {
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes)
    snprintf(err, errlen, "want 1 <= -b (%zu) <= -e (%zu)", o->min_bytes,
             o->max_bytes);
  else if (o->factor <= 1 && o->step_bytes == 0)
    snprintf(err, errlen, "-i 0 with -f 1: the sizes would not grow");
  else if (count_sizes(o) > BC_MAX_SIZES)
    snprintf(err, errlen, "-b %zu -e %zu with %s %zu give more than %d sizes",
             o->min_bytes, o->max_bytes, o->factor > 1 ? "-f" : "-i",
             o->factor > 1 ? o->factor : o->step_bytes, BC_MAX_SIZES);
  else if (o->graph_launches > 0 && !((flags & BC_OPT_DEVICE) && o->device))
    snprintf(err, errlen, "-G %d: CUDA graphs need device buffers (%s)",
             o->graph_launches,
             flags & BC_OPT_DEVICE ? "--device" : "ringcc-bench --device");
  else if (o->graph_launches > 0 && o->blocking)
    snprintf(err, errlen, "-G with -z 1: a graph cannot wait between calls");
  else
    return NULL;
  return err;
}

const char *bc_parse_options(int argc, char **argv, int flags,
                             struct bc_options *o, char *err, size_t errlen) {
  *o = (struct bc_options){.coll = BC_ALLREDUCE, .dtype = BC_FLOAT32,
                           .op = BC_SUM, .min_bytes = 8,
                           .max_bytes = (size_t)64 << 20, .factor = 2,
                           .step_bytes = (size_t)1 << 20, .iters = 20,
                           .warmup = 5, .root = 0, .check = 1, .cycles = 1,
                           .average = 1, .in_place = 1, .nranks = 2,
                           .watchdog_s = 600};
  bool every = flags & BC_OPT_EVERY;
  bool step_given = false, factor_given = false;
  char optstring[96], name[32];
  struct option longopts[NKNOWN + 1];
  int c, from_name = every && argc > 0 ? bc_coll_of_prog(argv[0]) : -1;
  if (from_name >= 0) o->coll = (enum bc_coll)from_name;
  known_options(flags, optstring, sizeof optstring, longopts);
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
    if (c == 'h') {
      o->help = 1;
      return NULL;
    }
    if (c == ':') {
      snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
      return err;
    }
    if (c == '?') {
      snprintf(err, errlen, "unknown option '%s'", argv[optind - 1]);
      return err;
    }
    if (!parse_one(c, optarg, every, o, &step_given, &factor_given)) {
      snprintf(err, errlen, "invalid value '%s' for %s%s", optarg,
               option_name(c, name, sizeof name), wanted(c));
      return err;
    }
    if (c == OPT_COLL && from_name >= 0 && (int)o->coll != from_name) {
      snprintf(err, errlen, "--coll %s, but this program's name (%s) selects "
               "%s", optarg, perf_names[from_name], colls[from_name].name);
      return err;
    }
  }
  if (optind < argc) {
    snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
    return err;
  }
  if (step_given && !factor_given) o->factor = 1; /* -i alone: fixed steps */
  return check_options(o, flags, err, errlen);
}

const char *bc_check_nranks(const struct bc_options *o, int nranks, char *err,
                            size_t errlen) {
  if (colls[o->coll].has_root && o->root >= nranks) {
    snprintf(err, errlen, "root %d is not a rank (nranks %d)", o->root, nranks);
    return err;
  }
  if (o->coll == BC_SENDRECV && nranks < 2) {
    snprintf(err, errlen, "sendrecv needs at least 2 ranks (nranks %d)",
             nranks);
    return err;
  }
  return NULL;
}

/* ---- 16-bit floats (round to nearest even, like libringcc) --------------- */

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff,
           mant = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) { /* subnormal half, or zero */
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000;
    unsigned shift = (unsigned)(14 - e);
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1),
             mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* may carry to inf */
  return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f,
           mant = h & 0x3ff, x;
  if (exp == 0) {
    float f = (float)mant * 5.9604644775390625e-8f; /* 2^-24 */
    return sign ? -f : f;
  }
  if (exp == 31) x = sign | 0x7f800000 | (mant << 13);
  else x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static float bf16_to_float(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* ---- float8 (OCP e4m3: bias 7, 3 mantissa bits, no infinity, saturating;
 * e5m2: bias 15, 2 mantissa bits, IEEE-like) -------------------------------
 * By value rather than by bits: the quantum at x's binade, rint (nearest
 * even) on the count of quanta, then the code from the rounded value. */

static double fp8_value(uint8_t v, bool e4m3) {
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, emax = e4m3 ? 15 : 31;
  int e = (v & 0x7f) >> mbits, m = v & ((1 << mbits) - 1);
  double sign = (v & 0x80) ? -1.0 : 1.0;
  if (e4m3 && e == emax && m == 7) return NAN;
  if (!e4m3 && e == emax) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * ldexp(m, 1 - bias - mbits);
  return sign * ldexp(1.0 + ldexp(m, -mbits), e - bias);
}

static uint8_t fp8_code(double x, bool e4m3) {
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  uint8_t sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return (uint8_t)(sign | (e4m3 ? 0x7f : 0x7e));
  double a = fabs(x), top = e4m3 ? 448.0 : 57344.0;
  int exp;
  frexp(a, &exp); /* a = f * 2^exp, f in [0.5, 1) */
  int binade = exp - 1 < 1 - bias ? 1 - bias : exp - 1;
  double quantum = ldexp(1.0, binade - mbits), r = rint(a / quantum) * quantum;
  if (isinf(a) || r > top) return (uint8_t)(sign | (e4m3 ? 0x7e : 0x7c));
  if (r < ldexp(1.0, 1 - bias))
    return (uint8_t)(sign | (uint8_t)(r / ldexp(1.0, 1 - bias - mbits)));
  frexp(r, &exp);
  int m = (int)(ldexp(r, mbits - (exp - 1)) - (1 << mbits));
  return (uint8_t)(sign | ((exp - 1 + bias) << mbits) | m);
}

/* ---- element values ---------------------------------------------------------
 * An element is held as a uint64 (integers, sign-extended for signed types,
 * so arithmetic wraps exactly like the type's) or as a double (floats, whose
 * values here are always exact in the element type). */

typedef union {
  uint64_t u;
  double f;
} elem_t;

/* The integer v as the element type would hold it, widened back. */
static uint64_t int_norm(const struct dt_info *t, uint64_t v) {
  bool s = t->kind == K_SINT;
  switch (t->size) {
  case 1: return s ? (uint64_t)(int64_t)(int8_t)v : (uint8_t)v;
  case 4: return s ? (uint64_t)(int64_t)(int32_t)v : (uint32_t)v;
  default: return v;
  }
}

/* The float x rounded to the element type. */
static double float_norm(enum bc_dtype dt, double x) {
  switch (dt) {
  case BC_FLOAT16: return half_to_float(float_to_half((float)x));
  case BC_BFLOAT16: return bf16_to_float(float_to_bf16((float)x));
  case BC_FLOAT32: return (float)x;
  case BC_FLOAT8_E4M3: case BC_FLOAT8_E5M2:
    return fp8_value(fp8_code((float)x, dt == BC_FLOAT8_E4M3),
                     dt == BC_FLOAT8_E4M3);
  default: return x;
  }
}

static void put(enum bc_dtype dt, void *buf, size_t i, elem_t v) {
  char *p = (char *)buf + i * dts[dt].size;
  switch (dt) {
  case BC_INT8: case BC_UINT8: *(uint8_t *)p = (uint8_t)v.u; break;
  case BC_INT32: case BC_UINT32: *(uint32_t *)p = (uint32_t)v.u; break;
  case BC_INT64: case BC_UINT64: *(uint64_t *)p = v.u; break;
  case BC_FLOAT16: *(uint16_t *)p = float_to_half((float)v.f); break;
  case BC_BFLOAT16: *(uint16_t *)p = float_to_bf16((float)v.f); break;
  case BC_FLOAT32: *(float *)p = (float)v.f; break;
  case BC_FLOAT8_E4M3: case BC_FLOAT8_E5M2:
    *(uint8_t *)p = fp8_code(v.f, dt == BC_FLOAT8_E4M3);
    break;
  default: *(double *)p = v.f; break;
  }
}

static elem_t get(enum bc_dtype dt, const void *buf, size_t i) {
  const struct dt_info *t = &dts[dt];
  const char *p = (const char *)buf + i * t->size;
  elem_t v;
  switch (dt) {
  case BC_INT8: case BC_UINT8: v.u = int_norm(t, *(const uint8_t *)p); break;
  case BC_INT32: case BC_UINT32: v.u = int_norm(t, *(const uint32_t *)p); break;
  case BC_INT64: case BC_UINT64: v.u = *(const uint64_t *)p; break;
  case BC_FLOAT16: v.f = half_to_float(*(const uint16_t *)p); break;
  case BC_BFLOAT16: v.f = bf16_to_float(*(const uint16_t *)p); break;
  case BC_FLOAT32: v.f = *(const float *)p; break;
  case BC_FLOAT8_E4M3: case BC_FLOAT8_E5M2:
    v.f = fp8_value(*(const uint8_t *)p, dt == BC_FLOAT8_E4M3);
    break;
  default: v.f = *(const double *)p; break;
  }
  return v;
}

static bool same(const struct dt_info *t, elem_t a, elem_t b) {
  return t->kind == K_FLOAT ? a.f == b.f : a.u == b.u;
}

static void format_elem(const struct dt_info *t, elem_t v, char *buf,
                        size_t len) {
  if (t->kind == K_FLOAT) snprintf(buf, len, "%.9g", v.f);
  else if (t->kind == K_SINT) snprintf(buf, len, "%" PRId64, (int64_t)v.u);
  else snprintf(buf, len, "%" PRIu64, v.u);
}

/* ---- one rank's run ------------------------------------------------------ */

struct run {
  const struct bc_backend *be;
  const struct bc_options *o;
  int rank, nranks;
  char *sbuf, *rbuf;   /* host buffers: filled and checked here */
  int64_t float_range; /* float inputs lie in [-float_range, float_range] */
  int mismatches_reported;
};

/* Prints "PROG: rank R: MESSAGE" and stops the job. */
__attribute__((noreturn, format(printf, 2, 3))) static void fail(
    const struct run *r, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s: rank %d: %s\n", r->be->prog, r->rank, msg);
  fflush(stderr);
  r->be->abort_job(r->be->ctx);
  abort(); /* abort_job does not return */
}

/* ---- inputs and expected results --------------------------------------------
 * GEN_SUM keeps n-rank sums exact, GEN_PROD uses {1,2} ({1,-1} for signed
 * integers) so products are exact, GEN_COPY is for min/max and the
 * collectives that only move data. */

enum gen_mode { GEN_SUM, GEN_PROD, GEN_COPY };

static enum gen_mode gen_mode_of(const struct bc_options *o) {
  if (!colls[o->coll].has_op) return GEN_COPY;
  switch (o->op) {
  case BC_SUM: case BC_AVG: return GEN_SUM;
  case BC_PROD: return GEN_PROD;
  default: return GEN_COPY;
  }
}

static void float_range_setup(struct run *r) {
  int64_t bound = dts[r->o->dtype].exact;
  if (gen_mode_of(r->o) == GEN_SUM) bound /= r->nranks; /* n-rank sums exact */
  r->float_range = bound < 510 ? bound : 510;
}

/* The input of element i on rank q. */
static elem_t gen(const struct run *r, enum gen_mode mode, int q, size_t i) {
  const struct dt_info *t = &dts[r->o->dtype];
  uint64_t p = ((uint64_t)i * 7 + (uint64_t)q * 131) % 1021; /* 0..1020 */
  elem_t v;
  if (t->kind == K_FLOAT) {
    if (mode == GEN_PROD) {
      v.f = (p & 1) && q < t->max_twos ? 2.0 : 1.0;
    } else {
      int64_t h = r->float_range;
      v.f = (double)((int64_t)(p % (uint64_t)(2 * h + 1)) - h);
    }
  } else if (mode == GEN_PROD) {
    v.u = (p & 1) ? (t->kind == K_SINT ? UINT64_MAX /* -1 */ : 2) : 1;
  } else {
    /* 8-bit types wrap 0..1020 into their range; wider signed types get
     * negative values too. */
    uint64_t s = t->kind == K_SINT && t->size > 1 ? p - 510 : p;
    v.u = int_norm(t, s);
  }
  return v;
}

static elem_t combine(const struct run *r, elem_t a, elem_t x) {
  const struct dt_info *t = &dts[r->o->dtype];
  if (t->kind == K_FLOAT) {
    switch (r->o->op) {
    case BC_PROD: a.f *= x.f; break;
    case BC_MIN: a.f = x.f < a.f ? x.f : a.f; break;
    case BC_MAX: a.f = x.f > a.f ? x.f : a.f; break;
    default: a.f += x.f; break;
    }
    return a;
  }
  bool s = t->kind == K_SINT;
  switch (r->o->op) {
  case BC_PROD: a.u = int_norm(t, a.u * x.u); break;
  case BC_MIN:
    if (s ? (int64_t)x.u < (int64_t)a.u : x.u < a.u) a = x;
    break;
  case BC_MAX:
    if (s ? (int64_t)x.u > (int64_t)a.u : x.u > a.u) a = x;
    break;
  default: a.u = int_norm(t, a.u + x.u); break;
  }
  return a;
}

/* The reduction over all ranks of element i, as libringcc defines it:
 * avg = sum/nranks, in float for the float types (then rounded to float16 or
 * bfloat16), truncated toward zero for integers. */
static elem_t reduced(const struct run *r, enum gen_mode mode, size_t i) {
  enum bc_dtype dt = r->o->dtype;
  elem_t acc = gen(r, mode, 0, i);
  for (int q = 1; q < r->nranks; q++) acc = combine(r, acc, gen(r, mode, q, i));
  if (dts[dt].kind == K_FLOAT) {
    if (r->o->op == BC_AVG)
      acc.f = dt == BC_FLOAT64 ? acc.f / r->nranks
                               : (float)acc.f / (float)r->nranks;
    acc.f = float_norm(dt, acc.f);
  } else if (r->o->op == BC_AVG) {
    if (dts[dt].kind == K_SINT)
      acc.u = (uint64_t)((int64_t)acc.u / (int64_t)r->nranks);
    else
      acc.u = acc.u / (uint64_t)r->nranks;
  }
  return acc;
}

static void fill(const struct run *r, void *buf, size_t n, size_t first,
                 enum gen_mode mode) {
  for (size_t i = 0; i < n; i++)
    put(r->o->dtype, buf, i, gen(r, mode, r->rank, first + i));
}

/* Inputs as the call of this plan and placement reads them; every element the
 * call should write is poisoned (all bits set: NaN for the float types). */
static void fill_inputs(const struct run *r, const struct bc_plan *p,
                        bool in_place) {
  size_t ts = dts[r->o->dtype].size, own = (size_t)r->rank * p->arg;
  enum gen_mode mode = gen_mode_of(r->o);
  switch (r->o->coll) {
  case BC_ALLGATHER:
    memset(r->rbuf, 0xff, p->bytes);
    fill(r, in_place ? r->rbuf + own * ts : r->sbuf, p->arg, own, mode);
    break;
  case BC_BCAST:
    if (r->rank == r->o->root) fill(r, r->rbuf, p->count, 0, mode);
    else memset(r->rbuf, 0xff, p->bytes);
    break;
  case BC_GATHER: /* out of place only: rank q's block holds indices q*arg.. */
    memset(r->rbuf, 0xff, p->bytes);
    fill(r, r->sbuf, p->arg, own, mode);
    break;
  case BC_ALLGATHERV: {
    size_t at = vdispl(BC_ALLGATHERV, r->nranks, p->arg, r->rank, 0);
    memset(r->rbuf, 0xff, p->bytes);
    fill(r, r->sbuf, bc_vcount(BC_ALLGATHERV, r->nranks, p->arg, r->rank, 0),
         at, mode);
    break;
  }
  case BC_ALLTOALLV: /* the blocks to every rank, one after the other */
    memset(r->rbuf, 0xff, p->bytes);
    fill(r, r->sbuf, vdispl(BC_ALLTOALLV, r->nranks, p->arg, r->rank,
                            r->nranks),
         0, mode);
    break;
  default: /* the full input is p->count elements from index 0 */
    if (!in_place) memset(r->rbuf, 0xff, p->bytes);
    fill(r, in_place ? r->rbuf : r->sbuf, p->count, 0, mode);
    break;
  }
}

static long long compare(struct run *r, const struct bc_plan *p,
                         bool in_place, size_t at, size_t i, elem_t want) {
  const struct dt_info *t = &dts[r->o->dtype];
  elem_t got = get(r->o->dtype, r->rbuf, at);
  if (same(t, got, want)) return 0;
  if (r->mismatches_reported < MAX_MISMATCH_REPORTS) {
    char g[64], w[64], ctx[160];
    r->mismatches_reported++;
    format_elem(t, got, g, sizeof g);
    format_elem(t, want, w, sizeof w);
    bc_call_context(r->o, p, in_place, ctx, sizeof ctx);
    fprintf(stderr, "%s: rank %d: wrong result %s: element %zu is %s, "
                    "want %s\n", r->be->prog, r->rank, ctx, i, g, w);
  }
  return 1;
}

/* Wrong elements in this rank's result. */
static long long check_result(struct run *r, const struct bc_plan *p,
                              bool in_place) {
  enum gen_mode mode = gen_mode_of(r->o);
  size_t arg = p->arg, n = p->count;
  int rank = r->rank, nranks = r->nranks, root = r->o->root;
  long long wrong = 0;
  r->mismatches_reported = 0;
  switch (r->o->coll) {
  case BC_ALLREDUCE:
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, reduced(r, mode, i));
    break;
  case BC_REDUCE:
    if (rank != root) break;
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, reduced(r, mode, i));
    break;
  case BC_REDUCE_SCATTER: {
    size_t first = (size_t)rank * arg;
    size_t at = in_place && r->be->rs_in_place_at_own_block ? first : 0;
    for (size_t j = 0; j < arg; j++)
      wrong += compare(r, p, in_place, at + j, first + j,
                       reduced(r, mode, first + j));
    break;
  }
  case BC_ALLGATHER: /* block q is rank q's input */
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, gen(r, mode, (int)(i / arg), i));
    break;
  case BC_BCAST:
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i, gen(r, mode, root, i));
    break;
  case BC_GATHER: /* at the root, block q is rank q's input */
    for (size_t i = 0; rank == root && i < n; i++)
      wrong += compare(r, p, in_place, i, i, gen(r, mode, (int)(i / arg), i));
    break;
  case BC_SCATTER: /* block `rank` of the root's input */
    for (size_t j = 0; j < arg; j++)
      wrong += compare(r, p, in_place, j, j,
                       gen(r, mode, root, (size_t)rank * arg + j));
    break;
  case BC_ALLGATHERV:
    for (int q = 0, at = 0; q < nranks; q++) {
      size_t c = bc_vcount(BC_ALLGATHERV, nranks, arg, q, 0);
      for (size_t j = 0; j < c; j++)
        wrong += compare(r, p, in_place, at + j, at + j,
                         gen(r, mode, q, at + j));
      at += (int)c;
    }
    break;
  case BC_ALLTOALLV: /* from rank q: its block for this rank */
    for (int q = 0, at = 0; q < nranks; q++) {
      size_t c = bc_vcount(BC_ALLTOALLV, nranks, arg, q, rank);
      size_t from = vdispl(BC_ALLTOALLV, nranks, arg, q, rank);
      for (size_t j = 0; j < c; j++)
        wrong += compare(r, p, in_place, at + j, at + j,
                         gen(r, mode, q, from + j));
      at += (int)c;
    }
    break;
  case BC_ALLTOALL: /* block q came from rank q's block `rank` */
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i,
                       gen(r, mode, (int)(i / arg),
                           (size_t)rank * arg + i % arg));
    break;
  default: /* sendrecv: from the previous rank */
    for (size_t i = 0; i < n; i++)
      wrong += compare(r, p, in_place, i, i,
                       gen(r, mode, (rank - 1 + nranks) % nranks, i));
    break;
  }
  return wrong;
}

/* ---- sizes --------------------------------------------------------------- */

/* nccl-tests' sizes: from -b up, times -f (or plus -i), while <= -e.
 * Into a new array (count_sizes bounded it); returns how many. */
static int size_grid(const struct bc_options *o, size_t **out) {
  int n = count_sizes(o), k = 0;
  size_t *sizes = calloc((size_t)n, sizeof *sizes);
  if (sizes == NULL) return -1;
  for (size_t s = o->min_bytes; k < n; s = next_size(o, s)) sizes[k++] = s;
  *out = sizes;
  return n;
}

/* The plan for a requested size: rounded down to whole elements, and to
 * whole blocks of nranks elements where each rank owns a block. */
static struct bc_plan make_plan(const struct bc_options *o, int nranks,
                                size_t requested) {
  size_t ts = dts[o->dtype].size;
  struct bc_plan p = {.requested = requested};
  if (colls[o->coll].per_rank_blocks) {
    p.arg = requested / ts / (size_t)nranks;
    p.count = p.arg * (size_t)nranks;
  } else {
    p.arg = p.count = requested / ts;
  }
  p.bytes = p.count * ts;
  return p;
}

/* ---- measuring ----------------------------------------------------------- */

struct bc_result {
  bool valid; /* false: not measured (sendrecv in place, or -I 0) */
  int iters;  /* timed iterations */
  double time_us, algbw, busbw;
  long long wrong; /* -1: not checked */
};

double bc_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double busbw_factor(enum bc_coll coll, int nranks) {
  double n = nranks;
  switch (colls[coll].busbw) {
  case 2: return 2.0 * (n - 1) / n;
  case 1: return (n - 1) / n;
  default: return 1.0;
  }
}

static void run_once(const struct run *r, const struct bc_plan *p,
                     bool in_place) {
  if (r->be->call(r->be->ctx, r->o, p, in_place, r->sbuf, r->rbuf) != 0)
    r->be->abort_job(r->be->ctx);
}

static void stage_in(const struct run *r, const struct bc_plan *p) {
  if (r->be->stage_in) r->be->stage_in(r->be->ctx, p, r->sbuf, r->rbuf);
}

static void sync_calls(const struct run *r) {
  if (r->be->sync) r->be->sync(r->be->ctx);
}

/* The time of the ranks as -a says: rank 0's, the mean, min or max. */
static double over_ranks(const struct run *r, double mine) {
  const struct bc_backend *be = r->be;
  if (r->o->average == 3) return be->max_double(be->ctx, mine);
  double *all = calloc((size_t)r->nranks, sizeof *all), v;
  if (all == NULL) fail(r, "out of memory");
  be->allgather_bytes(be->ctx, &mine, all, sizeof mine);
  v = all[0];
  for (int q = 1; q < r->nranks; q++) {
    if (r->o->average == 1) v += all[q];
    else if (r->o->average == 2 && all[q] < v) v = all[q];
  }
  free(all);
  return r->o->average == 1 ? v / r->nranks : v;
}

/* The timed loop: iters calls (each followed by a wait for every rank with
 * -z 1; replayed from a CUDA graph with -G). *issue_s: seconds to issue
 * them, per call. Returns seconds per call until all were done. */
static double timed_loop(struct run *r, const struct bc_plan *p, bool in_place,
                         int iters, double *issue_s) {
  const struct bc_backend *be = r->be;
  int graphs = r->o->graph_launches;
  be->barrier(be->ctx);
  double t0 = bc_now_s();
  if (graphs > 0) be->graph_begin(be->ctx);
  for (int k = 0; k < iters; k++) {
    run_once(r, p, in_place);
    if (r->o->blocking) {
      sync_calls(r);
      be->barrier(be->ctx);
    }
  }
  if (graphs > 0) {
    be->graph_end(be->ctx); /* captured: time the replays only */
    be->barrier(be->ctx);
    t0 = bc_now_s();
    for (int g = 0; g < graphs; g++) be->graph_launch(be->ctx);
  }
  double calls = (double)iters * (graphs > 0 ? graphs : 1);
  *issue_s = (bc_now_s() - t0) / calls;
  sync_calls(r); /* the issued calls have run */
  return (bc_now_s() - t0) / calls;
}

static struct bc_result measure(struct run *r, const struct bc_plan *p,
                                bool in_place) {
  const struct bc_backend *be = r->be;
  struct bc_result res = {.valid = true, .wrong = -1};
  fill_inputs(r, p, in_place);
  stage_in(r, p);
  double w0 = 0;
  for (int k = 0; k < r->o->warmup; k++) {
    if (k == 1) w0 = bc_now_s(); /* the first call may set things up */
    run_once(r, p, in_place);
  }
  sync_calls(r);
  res.iters = r->o->iters;
  if (r->o->min_time > 0) { /* every rank takes the slowest rank's estimate */
    double est = r->o->warmup >= 2 ? (bc_now_s() - w0) / (r->o->warmup - 1) : 0;
    if (r->o->warmup < 2) {
      w0 = bc_now_s();
      run_once(r, p, in_place);
      sync_calls(r);
      est = bc_now_s() - w0;
    }
    est = be->max_double(be->ctx, est);
    double want = est > 0 ? r->o->min_time / est : 1e6;
    if (want > res.iters) res.iters = want < 1e6 ? (int)want + 1 : 1000000;
  }
  double issue_s, t = over_ranks(r, timed_loop(r, p, in_place, res.iters,
                                               &issue_s));
  res.time_us = (r->o->cputime ? over_ranks(r, issue_s) : t) * 1e6;
  res.algbw = t > 0 ? (double)p->bytes / t / 1e9 : 0;
  res.busbw = res.algbw * busbw_factor(r->o->coll, r->nranks);
  for (int c = 0; c < r->o->check && res.wrong <= 0; c++) {
    fill_inputs(r, p, in_place);
    stage_in(r, p);
    run_once(r, p, in_place);
    sync_calls(r);
    if (be->stage_out) be->stage_out(be->ctx, p, r->rbuf);
    res.wrong = be->sum_ll(be->ctx, check_result(r, p, in_place));
  }
  return res;
}

/* ---- output -------------------------------------------------------------- */

#define LEAD_FMT "%12s %12s %9s %6s %5s"
#define GROUP_FMT " %10s %11s %11s %7s"
#define GROUP_WIDTH 43 /* strlen of a formatted GROUP_FMT */

static const char *const average_names[] = {"rank 0", "mean", "min", "max"};

static void print_header(const struct run *r) {
  const struct bc_options *o = r->o;
  printf("# %s: %s, %s\n", r->be->prog, colls[o->coll].name, r->be->library);
  printf("#  nranks %d  datatype %s  op %s  root %d  minBytes %zu  maxBytes %zu"
         "  step: %zu(%s)  warmup iters: %d  iters: %d  mintime %gs"
         "  validation: %d  blocking %d  cycles %d  graph: %d\n",
         r->nranks, o->all_dtypes ? "all" : dts[o->dtype].name,
         o->all_ops && colls[o->coll].has_op ? "all" : redop_of(o), root_of(o),
         o->min_bytes, o->max_bytes, o->factor > 1 ? o->factor : o->step_bytes,
         o->factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->min_time,
         o->check, o->blocking, o->cycles, o->graph_launches);
  printf("#  %s; time = per-call average of the timed loop, %s over ranks%s; "
         "GB = 1e9 B; busbw = algbw x %.4f\n",
         r->be->call_desc, average_names[o->average],
         o->cputime ? " (time to issue, -C 1)" : "",
         busbw_factor(o->coll, r->nranks));
  if (o->coll == BC_BCAST)
    printf("#  bcast has one buffer: out-of-place and in-place time the same "
           "call\n");
  if (o->coll == BC_SENDRECV)
    printf("#  sendrecv: rank r sends to r+1 and receives from r-1; no "
           "in-place form\n");
  if (o->coll == BC_ALLGATHERV || o->coll == BC_ALLTOALLV)
    printf("#  %s: uneven blocks, b = size/n/typesize: rank i %s "
           "floor(2*b*%s/(n-1)) elements (some none), running-sum "
           "displacements; out of place only\n", colls[o->coll].name,
           o->coll == BC_ALLTOALLV ? "sends rank j" : "contributes",
           o->coll == BC_ALLTOALLV ? "((i+j) mod n)" : "i");
  if (o->coll == BC_GATHER || o->coll == BC_SCATTER)
    printf("#  %s: size = the root's buffer, n blocks of size/n; out of "
           "place only\n", colls[o->coll].name);
}

/* "#  Rank  0 Pid  1234 on host" for every rank, gathered to all. */
static void print_ranks(const struct run *r) {
  struct {
    int32_t pid;
    char host[60];
  } me = {.pid = (int32_t)getpid()}, *all;
  gethostname(me.host, sizeof me.host - 1);
  all = calloc((size_t)r->nranks, sizeof me);
  if (all == NULL) fail(r, "out of memory");
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
  enum bc_dtype dtype;
  enum bc_op op;
  struct bc_plan plan;
  struct bc_result oop, ip;
};

static void print_row(const struct bc_options *o, const struct row *row) {
  char size[24], count[24], root[12];
  snprintf(size, sizeof size, "%zu", row->plan.bytes);
  snprintf(count, sizeof count, "%zu", row->plan.count);
  snprintf(root, sizeof root, "%d", root_of(o));
  printf(" " LEAD_FMT, size, count, dts[o->dtype].name, redop_of(o), root);
  print_group(&row->oop);
  print_group(&row->ip);
  printf("\n");
  fflush(stdout);
}

static void json_group(FILE *f, const char *prefix,
                       const struct bc_result *res) {
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

/* The rows as a JSON array (bench/summarize.py). Returns 0, or -1 with
 * errno set. */
static int write_json(const struct run *r, FILE *f, const struct row *rows,
                      int nrows) {
  const struct bc_options *o = r->o;
  fprintf(f, "[\n");
  for (int k = 0; k < nrows; k++) {
    const struct row *row = &rows[k];
    struct bc_options cur = *o;
    cur.dtype = row->dtype;
    cur.op = row->op;
    fprintf(f, "  {\"collective\": \"%s\", \"nranks\": %d, \"size\": %zu, "
               "\"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
               "\"root\": %d, \"iters\": %d, \"warmup\": %d",
            colls[o->coll].name, r->nranks, row->plan.bytes, row->plan.count,
            dts[row->dtype].name, redop_of(&cur), root_of(o),
            row->oop.valid ? row->oop.iters : row->ip.iters, o->warmup);
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

/* ---- the run ------------------------------------------------------------- */

void *bc_alloc_touched(size_t bytes) {
  void *p = NULL;
  if (bytes == 0) bytes = 64;
  int e = posix_memalign(&p, 4096, bytes);
  if (e != 0) {
    errno = e;
    return NULL;
  }
  memset(p, 0, bytes); /* first touch, outside the timed loops */
  return p;
}

static char *alloc_or_fail(const struct run *r, size_t bytes) {
  if (r->be->alloc_host)
    return r->be->alloc_host(r->be->ctx, bytes ? bytes : 64);
  char *p = bc_alloc_touched(bytes);
  if (p == NULL)
    fail(r, "cannot allocate %zu bytes: %s", bytes ? bytes : 64,
         strerror(errno));
  return p;
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

/* The summary lines and the JSON file, on rank 0. Returns 0 or
 * BC_EXIT_FAILED (the JSON file could not be written). */
static int print_end(const struct run *r, FILE *json, const struct row *rows,
                     int nrows, long long total_wrong, double busbw_avg) {
  int status = 0;
  if (r->o->check)
    printf("# Out of bounds values : %lld %s\n", total_wrong,
           total_wrong ? "FAILED" : "OK");
  else
    printf("# Out of bounds values : N/A (check disabled)\n");
  printf("# Avg bus bandwidth    : %g \n#\n", busbw_avg);
  fflush(stdout);
  if (json) {
    int rc = write_json(r, json, rows, nrows);
    if (fclose(json) != 0 || rc != 0) {
      fprintf(stderr, "%s: cannot write %s: %s\n", r->be->prog,
              r->o->json_path, strerror(errno));
      status = BC_EXIT_FAILED;
    }
  }
  if (total_wrong)
    fprintf(stderr, "%s: FAILED: %lld wrong elements in total (column "
                    "#wrong)\n", r->be->prog, total_wrong);
  return status;
}

/* The rows so far (every sweep's, for the JSON). */
struct rows {
  struct row *at;
  int n, cap;
};

static struct row *new_row(const struct run *r, struct rows *rows) {
  if (rows->n == rows->cap) {
    int cap = rows->cap ? 2 * rows->cap : 64;
    struct row *at = realloc(rows->at, (size_t)cap * sizeof *at);
    if (at == NULL) fail(r, "out of memory");
    rows->at = at;
    rows->cap = cap;
  }
  return &rows->at[rows->n++];
}

struct totals {
  long long wrong;
  double busbw_sum;
  int busbw_n;
};

/* One sweep of the sizes for r->o's datatype and op. */
static void sweep(struct run *r, const size_t *sizes, int nsizes,
                  struct rows *rows, struct totals *t) {
  const struct bc_options *o = r->o;
  float_range_setup(r);
  for (int k = 0; k < nsizes; k++) {
    struct row row = {.dtype = o->dtype, .op = o->op,
                      .plan = make_plan(o, r->nranks, sizes[k])};
    if (row.plan.count == 0) {
      if (r->rank == 0)
        printf("#  size %zu skipped: less than one %s element%s\n",
               row.plan.requested, dts[o->dtype].name,
               colls[o->coll].per_rank_blocks ? " per rank" : "");
      continue;
    }
    row.oop = measure(r, &row.plan, false);
    if (o->in_place && !no_in_place(o->coll) && !o->group)
      row.ip = measure(r, &row.plan, true);
    else
      row.ip = (struct bc_result){.valid = false};
    const struct bc_result *groups[2] = {&row.oop, &row.ip};
    for (int g = 0; g < 2; g++) {
      if (!groups[g]->valid) continue;
      t->busbw_sum += groups[g]->busbw;
      t->busbw_n++;
      if (groups[g]->wrong > 0) t->wrong += groups[g]->wrong;
    }
    *new_row(r, rows) = row;
    if (r->rank == 0) print_row(o, &row);
  }
}

int bc_run(const struct bc_backend *be, const struct bc_options *o, int rank,
           int nranks) {
  struct run r = {.be = be, .o = o, .rank = rank, .nranks = nranks};
  FILE *json;
  if (open_json(&r, &json) != 0) return BC_EXIT_USAGE;

  size_t *sizes = NULL;
  int nsizes = size_grid(o, &sizes);
  if (nsizes < 0) fail(&r, "out of memory");
  r.sbuf = alloc_or_fail(&r, o->max_bytes);
  r.rbuf = alloc_or_fail(&r, o->max_bytes);
  if (be->alloc_buffers) be->alloc_buffers(be->ctx, o->max_bytes);

  if (rank == 0) print_header(&r);
  print_ranks(&r);
  if (rank == 0) print_table_header();

  struct rows rows = {0};
  struct totals t = {0};
  bool ops = o->all_ops && colls[o->coll].has_op;
  int d0 = o->all_dtypes ? 0 : (int)o->dtype;
  int d1 = o->all_dtypes ? BC_NUM_DTYPES : (int)o->dtype + 1;
  int op0 = ops ? 0 : (int)o->op, op1 = ops ? BC_NUM_OPS : (int)o->op + 1;
  for (long cycle = 0; o->cycles == 0 || cycle < o->cycles; cycle++)
    for (int d = d0; d < d1; d++)
      for (int op = op0; op < op1; op++) {
        struct bc_options cur = *o;
        cur.dtype = (enum bc_dtype)d;
        cur.op = (enum bc_op)op;
        r.o = &cur;
        sweep(&r, sizes, nsizes, &rows, &t);
        r.o = o;
      }

  int status = 0;
  if (rank == 0)
    status = print_end(&r, json, rows.at, rows.n, t.wrong,
                       t.busbw_n ? t.busbw_sum / t.busbw_n : 0.0);
  fflush(stdout);
  fflush(stderr);
  if (be->free_host) {
    be->free_host(be->ctx, r.sbuf);
    be->free_host(be->ctx, r.rbuf);
  } else {
    free(r.sbuf);
    free(r.rbuf);
  }
  free(rows.at);
  free(sizes);
  if (t.wrong) return BC_EXIT_WRONG;
  /* rank 0's JSON failure is every rank's */
  return be->sum_ll(be->ctx, status) ? BC_EXIT_FAILED : 0;
}

/* ---- ranks forked by the program (BC_OPT_FORK) ------------------------ */

#define FORK_MAX 1024
static pid_t g_ranks[FORK_MAX]; /* 0 once reaped */
static int g_nranks;
static const char *g_prog;
static volatile sig_atomic_t g_watchdog_fired = 0;
static volatile sig_atomic_t g_stop_signal = 0; /* SIGTERM/SIGINT/SIGHUP */

static void kill_ranks(void) {
  for (int r = 0; r < g_nranks; r++)
    if (g_ranks[r] > 0)
      kill(g_ranks[r], SIGKILL);
}

/* Kills the ranks; wait_ranks() then reaps them. */
static void on_watchdog(int sig) {
  static const char msg[] = ": watchdog (-T) expired, ranks killed\n";
  (void)sig;
  g_watchdog_fired = 1;
  kill_ranks();
  ssize_t w = write(2, g_prog, strlen(g_prog));
  w = write(2, msg, sizeof msg - 1);
  (void)w;
}

/* Stopped from outside (timeout(1), ^C): stop the ranks the same way. */
static void on_stop(int sig) {
  g_stop_signal = sig;
  kill_ranks();
}

/* Waits for every rank; the first failure stops the others. Returns the
 * worst exit status. */
static int wait_ranks(void) {
  int worst = 0;
  for (int left = g_nranks; left > 0; left--) {
    int st = 0, r = 0;
    pid_t p;
    while ((p = wait(&st)) < 0 && errno == EINTR) {
    }
    if (p < 0)
      break;
    while (r < g_nranks && g_ranks[r] != p)
      r++;
    if (r == g_nranks)
      continue;
    g_ranks[r] = 0;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rc != 0 && !g_watchdog_fired && !g_stop_signal) {
      if (rc != BC_EXIT_WRONG)
        fprintf(stderr, "%s: rank %d exited with status %d%s\n", g_prog, r,
                rc, worst ? "" : "; stopping the others");
      if (!worst && rc != BC_EXIT_WRONG)
        kill_ranks();
      if (rc > worst)
        worst = rc;
    }
  }
  return worst;
}

int bc_fork_ranks(const char *prog, const struct bc_options *o,
                  int (*rank_main)(const struct bc_options *o, int rank,
                                   void *arg),
                  void *arg) {
  g_prog = prog;
  g_nranks = 0;
  if (o->nranks < 1 || o->nranks > FORK_MAX) {
    fprintf(stderr, "%s: --nranks %d: 1 to %d\n", prog, o->nranks, FORK_MAX);
    return BC_EXIT_USAGE;
  }
  fflush(stdout); /* a child must not inherit unwritten output */
  fflush(stderr);
  for (int r = 0; r < o->nranks; r++) {
    pid_t p = fork();
    if (p < 0) {
      fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
      kill_ranks();
      wait_ranks();
      return BC_EXIT_FAILED;
    }
    if (p == 0) {
      int rc = rank_main(o, r, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    g_ranks[g_nranks++] = p;
  }
  /* Installed only now: a rank keeps the default actions. */
  signal(SIGALRM, on_watchdog);
  signal(SIGTERM, on_stop);
  signal(SIGINT, on_stop);
  signal(SIGHUP, on_stop);
  alarm((unsigned)o->watchdog_s);
  int worst = wait_ranks();
  alarm(0);
  if (g_stop_signal)
    return 128 + g_stop_signal;
  return g_watchdog_fired ? 124 : worst;
}
