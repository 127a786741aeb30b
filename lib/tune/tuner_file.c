/*
 * tuner_file.c - the tuner's calibration: the cache file the library reads
 * at init, the least-squares fit ringcc-bench --calibrate runs, and the
 * timing of the local reduction (gamma).
 *
 * The file is key=value text, one per line; '#' starts a comment line:
 *
 *   # libringcc tuner calibration (ringcc-bench --calibrate)
 *   version=1
 *   host=node1
 *   date=2026-11-29T19:40:00Z
 *   nranks=4
 *   shm.alpha_us=2.1
 *   shm.beta_ns_per_byte=0.25
 *   shm.beta_mem_ns_per_byte=0.8     (0: as beta)
 *   tcp.alpha_us=45
 *   tcp.beta_ns_per_byte=0.9
 *   tcp.beta_mem_ns_per_byte=1.1
 *   gamma_ns_per_byte=0.12
 *   cache_bytes=33554432             (0: one beta whatever the size)
 *
 * Every numeric key is required; an unknown key, a bad number, a long line or
 * a missing key makes the whole file malformed: the reader says which line
 * and why, and the library warns and uses its defaults.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "env.h"
#include "error.h"
#include "reduce.h"
#include "tuner.h"

#define FILE_VERSION 1
#define MAX_FILE_BYTES 65536
#define MAX_LINE 256

int rcc_tuner_file_path(char *path, size_t len, char *why, size_t whylen) {
  const char *file = rcc_getenv("RINGCC_TUNER_FILE");
  const char *xdg = rcc_getenv("XDG_CACHE_HOME");
  const char *home = rcc_getenv("HOME");
  int n;

  if (file != NULL && *file != '\0') {
    if (strcmp(file, "none") == 0) {
      snprintf(why, whylen, "RINGCC_TUNER_FILE=none");
      return -1;
    }
    n = snprintf(path, len, "%s", file);
  } else if (xdg != NULL && xdg[0] == '/') {
    n = snprintf(path, len, "%s/ringcc/tuner.conf", xdg);
  } else if (home != NULL && home[0] == '/') {
    n = snprintf(path, len, "%s/.cache/ringcc/tuner.conf", home);
  } else {
    snprintf(why, whylen, "no RINGCC_TUNER_FILE, XDG_CACHE_HOME or HOME to "
                          "find a calibration file");
    return -1;
  }
  if (n < 0 || (size_t)n >= len) {
    snprintf(why, whylen, "the calibration file's path is too long");
    return -1;
  }
  return 0;
}

/* ---- reading ------------------------------------------------------------- */

struct key {
  const char *name;
  double *value;
  double lo, hi; /* allowed range; lo excluded when lo_open */
  int lo_open;
  int seen;
};

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  char *end = s + strlen(s);
  while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' ||
                     end[-1] == '\n'))
    *--end = '\0';
  return s;
}

static int parse_number(const char *text, double *out) {
  char *end;
  if (!((*text >= '0' && *text <= '9') || *text == '.'))
    return -1; /* no signs, no "inf", no "nan", no hex */
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
    return -1;
  *out = v;
  return 0;
}

static void copy_text(char *dst, size_t len, const char *src) {
  snprintf(dst, len, "%s", src);
  for (char *p = dst; *p; p++)
    if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
      *p = '?'; /* it goes into log lines */
}

/* One key=value line into keys[] or info; -1 with err on any problem. */
static int parse_line(char *line, struct key *keys, int nkeys,
                      struct rcc_tuner_file_info *info, int *version,
                      const char *where, char *err, size_t errlen) {
  char *eq = strchr(line, '=');
  if (eq == NULL) {
    snprintf(err, errlen, "%s: expected key=value, got '%.60s'", where, line);
    return -1;
  }
  *eq = '\0';
  char *key = trim(line), *value = trim(eq + 1);
  double v;
  if (strcmp(key, "host") == 0 || strcmp(key, "date") == 0) {
    copy_text(key[0] == 'h' ? info->host : info->date, sizeof(info->host),
              value);
    return 0;
  }
  if (strcmp(key, "version") == 0 || strcmp(key, "nranks") == 0) {
    if (parse_number(value, &v) != 0 || v != floor(v) || v > 1e6) {
      snprintf(err, errlen, "%s: %s='%.40s' is not a whole number", where,
               key, value);
      return -1;
    }
    *(key[0] == 'v' ? version : &info->nranks) = (int)v;
    return 0;
  }
  for (int k = 0; k < nkeys; k++) {
    if (strcmp(key, keys[k].name) != 0)
      continue;
    if (parse_number(value, &v) != 0 || v < keys[k].lo || v > keys[k].hi ||
        (keys[k].lo_open && v == keys[k].lo)) {
      snprintf(err, errlen, "%s: %s='%.40s' is not a number in %s%g, %g]",
               where, key, value, keys[k].lo_open ? "(" : "[", keys[k].lo,
               keys[k].hi);
      return -1;
    }
    *keys[k].value = v;
    keys[k].seen = 1;
    return 0;
  }
  snprintf(err, errlen, "%s: unknown key '%.40s'", where, key);
  return -1;
}

static int read_lines(FILE *f, const char *path, struct key *keys, int nkeys,
                      struct rcc_tuner_file_info *info, int *version,
                      char *err, size_t errlen) {
  char line[MAX_LINE + 2], where[600];
  int lineno = 0;

  while (fgets(line, sizeof(line), f) != NULL) {
    lineno++;
    snprintf(where, sizeof(where), "%s line %d", path, lineno);
    if (strchr(line, '\n') == NULL && !feof(f)) {
      snprintf(err, errlen, "%s: longer than %d characters", where, MAX_LINE);
      return -1;
    }
    char *text = trim(line);
    if (*text == '\0' || *text == '#')
      continue;
    if (parse_line(text, keys, nkeys, info, version, where, err, errlen) != 0)
      return -1;
  }
  if (ferror(f)) {
    snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

int rcc_tuner_read_file(const char *path, struct rcc_model *model,
                        struct rcc_tuner_file_info *info, char *err,
                        size_t errlen) {
  double v[3 * RCC_NUM_LINKS + 2];
  struct key keys[] = {
      {"shm.alpha_us", &v[0], 0, 1e7, 0, 0},
      {"shm.beta_ns_per_byte", &v[1], 0, 1e6, 1, 0},
      {"shm.beta_mem_ns_per_byte", &v[2], 0, 1e6, 0, 0},
      {"tcp.alpha_us", &v[3], 0, 1e7, 0, 0},
      {"tcp.beta_ns_per_byte", &v[4], 0, 1e6, 1, 0},
      {"tcp.beta_mem_ns_per_byte", &v[5], 0, 1e6, 0, 0},
      {"gamma_ns_per_byte", &v[6], 0, 1e6, 0, 0},
      {"cache_bytes", &v[7], 0, 1e15, 0, 0},
  };
  int nkeys = (int)(sizeof(keys) / sizeof(keys[0])), version = -1;
  struct stat st;

  memset(info, 0, sizeof(*info));
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    if (errno == ENOENT)
      return 0;
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > MAX_FILE_BYTES) {
    snprintf(err, errlen, "%s is not a regular file of at most %d bytes", path,
             MAX_FILE_BYTES);
    fclose(f);
    return -1;
  }
  int r = read_lines(f, path, keys, nkeys, info, &version, err, errlen);
  fclose(f);
  if (r != 0)
    return -1;
  if (version != FILE_VERSION) {
    snprintf(err, errlen, "%s: %s (this library reads version=%d)", path,
             version < 0 ? "no version= line" : "unsupported version",
             FILE_VERSION);
    return -1;
  }
  for (int k = 0; k < nkeys; k++)
    if (!keys[k].seen) {
      snprintf(err, errlen, "%s: no %s= line", path, keys[k].name);
      return -1;
    }
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    model->link[l] = (struct rcc_link_cost){v[3 * l], v[3 * l + 1] * 1e-3,
                                            v[3 * l + 2] * 1e-3};
  model->gamma_us_per_byte = v[6] * 1e-3;
  model->cache_bytes = v[7];
  return 1;
}

/* ---- writing ------------------------------------------------------------- */

/* mkdir -p of path's directory. */
static int make_parent_dirs(const char *path) {
  char dir[600];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL || slash == dir)
    return 0;
  *slash = '\0';
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static double ns(double us) { return us * 1e3; }
static double gbps(double us_per_byte) {
  return us_per_byte > 0 ? 1e-3 / us_per_byte : INFINITY;
}

static void write_body(FILE *f, const struct rcc_model *m,
                       const struct rcc_tuner_file_info *info,
                       const char *comment) {
  fprintf(f, "# libringcc tuner calibration: the alpha-beta cost model's "
             "values for this machine\n"
             "# (docs/tuning.md). alpha: the cost of one step of a rank, us. "
             "beta: time per\n"
             "# byte over one link direction, ns/B, while the ranks' buffers "
             "fit the last-level\n"
             "# cache (cache_bytes); beta_mem: the same beyond it (0: as "
             "beta). gamma: time\n"
             "# per byte of a local float32 sum, ns/B (0: its cost is in "
             "beta).\n");
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    fprintf(f, "# %s: alpha %.2f us, %.2f GB/s, %.2f GB/s beyond the cache\n",
            rcc_link_name(l), m->link[l].alpha_us,
            gbps(m->link[l].beta_us_per_byte),
            gbps(m->link[l].beta_mem_us_per_byte > 0
                     ? m->link[l].beta_mem_us_per_byte
                     : m->link[l].beta_us_per_byte));
  if (m->gamma_us_per_byte > 0)
    fprintf(f, "# reduction: %.2f GB/s\n", gbps(m->gamma_us_per_byte));
  fprintf(f, "# last-level cache: %.0f MiB\n", m->cache_bytes / 1048576.0);
  if (comment != NULL)
    for (const char *p = comment; *p;) {
      const char *nl = strchr(p, '\n');
      int len = nl ? (int)(nl - p) : (int)strlen(p);
      fprintf(f, "# %.*s\n", len > MAX_LINE - 4 ? MAX_LINE - 4 : len, p);
      p += len + (nl != NULL);
    }
  fprintf(f, "version=%d\nhost=%s\ndate=%s\nnranks=%d\n", FILE_VERSION,
          info->host, info->date, info->nranks);
  for (int l = 0; l < RCC_NUM_LINKS; l++) {
    const char *name = rcc_link_name(l);
    fprintf(f, "%s.alpha_us=%.6g\n%s.beta_ns_per_byte=%.6g\n"
               "%s.beta_mem_ns_per_byte=%.6g\n",
            name, m->link[l].alpha_us, name, ns(m->link[l].beta_us_per_byte),
            name, ns(m->link[l].beta_mem_us_per_byte));
  }
  fprintf(f, "gamma_ns_per_byte=%.6g\ncache_bytes=%.0f\n",
          ns(m->gamma_us_per_byte), m->cache_bytes);
}

ringcc_result_t rcc_tuner_write_file(const char *path,
                                     const struct rcc_model *model,
                                     const struct rcc_tuner_file_info *info,
                                     const char *comment, char *err,
                                     size_t errlen) {
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  if (make_parent_dirs(path) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "cannot create the directory of %s: %s", path,
                    strerror(errno));
  FILE *f = fopen(tmp, "w");
  if (f == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "cannot create %s: %s",
                    tmp, strerror(errno));
  write_body(f, model, info, comment);
  int failed = ferror(f);
  if (fclose(f) != 0 || failed || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "cannot write %s: %s",
                    path, strerror(e ? e : EIO));
  }
  return RINGCC_SUCCESS;
}

/* ---- the fit ---------------------------------------------------------------
 *
 * Unknowns: alpha, beta and beta_mem of every link with samples (a sample
 * whose buffers outgrow the cache has its beta term in beta_mem's column),
 * and gamma (shared: one CPU reduces for every link) when fit_gamma. Each
 * sample gives a row
 * of a linear least-squares problem, divided by its measured time so that
 * the fit minimises relative errors. Non-negativity (beta > 0) by trying
 * every subset of the unknowns that may be zero (at most 2^7 small solves)
 * and keeping the best feasible one: exact for a problem this small. */

#define FIT_VARS (3 * RCC_NUM_LINKS + 1)
#define GAMMA_VAR (3 * RCC_NUM_LINKS)

/* Gaussian elimination with partial pivoting; -1 when singular. */
static int solve(double a[FIT_VARS][FIT_VARS], double *b, int n, double *x) {
  for (int c = 0; c < n; c++) {
    int p = c;
    for (int r = c + 1; r < n; r++)
      if (fabs(a[r][c]) > fabs(a[p][c]))
        p = r;
    if (fabs(a[p][c]) < 1e-10)
      return -1;
    for (int k = 0; k < n; k++) {
      double t = a[c][k];
      a[c][k] = a[p][k];
      a[p][k] = t;
    }
    double t = b[c];
    b[c] = b[p];
    b[p] = t;
    for (int r = c + 1; r < n; r++) {
      double f = a[r][c] / a[c][c];
      for (int k = c; k < n; k++)
        a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int c = n - 1; c >= 0; c--) {
    double v = b[c];
    for (int k = c + 1; k < n; k++)
      v -= a[c][k] * x[k];
    x[c] = v / a[c][c];
  }
  return 0;
}

struct fit_rows {
  int n;
  double (*x)[FIT_VARS]; /* scaled by the column norms below */
  double *y;
  double norm[FIT_VARS];
};

/* Least squares over the unknowns in mask; the residual, or -1 when the
 * system is singular or the solution infeasible. */
static double fit_subset(const struct fit_rows *f, unsigned mask,
                         unsigned required, double *out) {
  double a[FIT_VARS][FIT_VARS] = {{0}}, b[FIT_VARS] = {0}, sol[FIT_VARS];
  int idx[FIT_VARS], m = 0;
  for (int v = 0; v < FIT_VARS; v++)
    if (mask & (1u << v))
      idx[m++] = v;
  for (int i = 0; i < f->n; i++)
    for (int j = 0; j < m; j++) {
      b[j] += f->x[i][idx[j]] * f->y[i];
      for (int k = 0; k < m; k++)
        a[j][k] += f->x[i][idx[j]] * f->x[i][idx[k]];
    }
  if (m == 0 || solve(a, b, m, sol) != 0)
    return -1;
  for (int v = 0; v < FIT_VARS; v++)
    out[v] = 0;
  for (int j = 0; j < m; j++) {
    if (sol[j] < 0 || ((required >> idx[j]) & 1u && sol[j] <= 0))
      return -1;
    out[idx[j]] = sol[j];
  }
  double res = 0;
  for (int i = 0; i < f->n; i++) {
    double p = -f->y[i];
    for (int v = 0; v < FIT_VARS; v++)
      p += f->x[i][v] * out[v];
    res += p * p;
  }
  return res;
}

/* The rows of every usable sample; *used gets the unknowns that appear. */
static int build_rows(const struct rcc_fit_sample *s, int n,
                      const struct rcc_model *model, int fit_gamma,
                      struct fit_rows *f, unsigned *used) {
  f->n = 0;
  *used = 0;
  for (int i = 0; i < n; i++) {
    struct rcc_cost_terms t;
    int l = s[i].link;
    if (l < 0 || l >= RCC_NUM_LINKS || !(s[i].time_us > 0) ||
        rcc_model_terms(s[i].coll, s[i].alg, s[i].nranks, s[i].bytes,
                        s[i].chunk_bytes, &t) != 0)
      continue;
    rcc_model_link_terms(l, s[i].alg, s[i].nranks, &t);
    double *x = f->x[f->n];
    memset(x, 0, sizeof(double) * FIT_VARS);
    x[3 * l] = t.alpha_count / s[i].time_us;
    x[3 * l + 1 + rcc_model_in_memory(&t, model->cache_bytes)] =
        t.beta_bytes / s[i].time_us;
    f->y[f->n] = 1.0;
    if (fit_gamma)
      x[GAMMA_VAR] = t.gamma_bytes / s[i].time_us;
    else
      f->y[f->n] -= t.gamma_bytes * model->gamma_us_per_byte / s[i].time_us;
    for (int v = 0; v < FIT_VARS; v++)
      if (x[v] != 0)
        *used |= 1u << v;
    f->n++;
  }
  for (int v = 0; v < FIT_VARS; v++) {
    double sum = 0;
    for (int i = 0; i < f->n; i++)
      sum += f->x[i][v] * f->x[i][v];
    f->norm[v] = sum > 0 ? sqrt(sum) : 1;
    for (int i = 0; i < f->n; i++)
      f->x[i][v] /= f->norm[v];
  }
  return f->n;
}

ringcc_result_t rcc_model_fit(const struct rcc_fit_sample *samples, int n,
                              int fit_gamma, struct rcc_model *model,
                              char *err, size_t errlen) {
  struct fit_rows f = {0};
  unsigned used, required = 0;
  double best[FIT_VARS] = {0}, x[FIT_VARS], best_res = -1;

  f.x = calloc((size_t)(n > 0 ? n : 1), sizeof(*f.x));
  f.y = calloc((size_t)(n > 0 ? n : 1), sizeof(*f.y));
  if (f.x == NULL || f.y == NULL) {
    free(f.x);
    free(f.y);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
  }
  build_rows(samples, n, model, fit_gamma, &f, &used);
  /* Every beta that samples use must be positive. */
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    required |= used & (6u << (3 * l));
  for (unsigned mask = 1; mask < (1u << FIT_VARS); mask++) {
    if ((mask & ~used) || (mask & required) != required)
      continue;
    double res = fit_subset(&f, mask, required, x);
    if (res >= 0 && (best_res < 0 || res < best_res)) {
      best_res = res;
      memcpy(best, x, sizeof(best));
    }
  }
  ringcc_result_t r = RINGCC_SUCCESS;
  if (f.n == 0 || best_res < 0) {
    r = rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                 "cannot fit the model to %d samples: no solution with a "
                 "positive bandwidth (do the times grow with the size?)", f.n);
  } else {
    for (int l = 0; l < RCC_NUM_LINKS; l++) {
      int v = 3 * l;
      if (!(used & (7u << v)))
        continue;
      /* A link whose samples all fit the cache, or none does: one beta. */
      double beta = best[v + 1] / f.norm[v + 1];
      double beta_mem = best[v + 2] / f.norm[v + 2];
      model->link[l] = (struct rcc_link_cost){
          best[v] / f.norm[v], beta > 0 ? beta : beta_mem,
          beta > 0 ? beta_mem : 0};
    }
    if (fit_gamma && (used & (1u << GAMMA_VAR)))
      model->gamma_us_per_byte = best[GAMMA_VAR] / f.norm[GAMMA_VAR]; /* 0 if
        the best fit leaves it out: the reduction hides in beta */
  }
  free(f.x);
  free(f.y);
  return r;
}

/* ---- gamma ------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double rcc_tuner_cache_bytes(void) {
  double best = 0;
  for (int i = 0; i < 8; i++) { /* the largest cache of cpu0 */
    char path[96], text[32];
    snprintf(path, sizeof(path),
             "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue;
    if (fgets(text, sizeof(text), f) != NULL) {
      char *end;
      double v = strtod(text, &end);
      if (*end == 'K')
        v *= 1024;
      else if (*end == 'M')
        v *= 1048576;
      best = v > best ? v : best;
    }
    fclose(f);
  }
  return best;
}

double rcc_tuner_time_reduce(size_t bytes, int reps) {
  size_t n = bytes / sizeof(float);
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  double *t = calloc((size_t)(reps > 0 ? reps : 1), sizeof(double));
  rcc_reduce_fn sum = rcc_reduce_get(RINGCC_FLOAT32, RINGCC_SUM);
  double result = -1;

  if (a != NULL && b != NULL && t != NULL && n > 0 && reps > 0) {
    for (size_t i = 0; i < n; i++)
      a[i] = (float)(i & 7), b[i] = 1.0f;
    sum(a, a, b, n); /* first touch, outside the timing */
    for (int k = 0; k < reps; k++) {
      int64_t t0 = rcc_now_ns();
      sum(a, a, b, n);
      t[k] = (double)(rcc_now_ns() - t0) * 1e-3;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    result = t[reps / 2] / (double)(n * sizeof(float));
  }
  free(a);
  free(b);
  free(t);
  return result;
}
