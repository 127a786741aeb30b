/*
 * test_bench.c - ringcc-bench as nccl-tests command lines use it: the
 * program names that pick the collective (all_reduce_perf, ... links in
 * build/bin), nccl-tests' flags with nccl-tests' meanings (sizes up from -b
 * by -f or -i, -c checked calls, -N cycles, -d/-o all), the columns, the
 * "#wrong" of every row and the closing "# Avg bus bandwidth" line, and the
 * usage errors for what ringcc-bench cannot do. Real ranks under ringcc-run.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *bin_dir(void) {
  const char *d = getenv("RINGCC_BIN_DIR");
  return d && *d ? d : "build/bin";
}

struct out {
  char text[1 << 16];
  int status; /* exit status, or -1 */
};

/* ringcc-run -np NP --no-prefix BIN/PROG ARGS, stdout and stderr. */
static void bench(struct out *o, int np, const char *prog, const char *args) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "RINGCC_TUNER_FILE=none timeout 120 %s/ringcc-run -np %d "
           "--no-prefix %s/%s %s 2>&1",
           bin_dir(), np, bin_dir(), prog, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "popen %s", cmd);
  size_t n = fread(o->text, 1, sizeof o->text - 1, p);
  o->text[n] = '\0';
  int st = pclose(p);
  o->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The rows (lines that start with a size), in order: size, type, redop, and
 * the two #wrong columns. Returns how many. */
struct row {
  unsigned long size;
  char type[16], redop[8], wrong_oop[8], wrong_ip[8];
};

static int rows_of(const struct out *o, struct row *rows, int max) {
  int n = 0;
  for (const char *line = o->text; line && *line && n < max;) {
    const char *end = strchr(line, '\n');
    struct row r;
    char t1[16], t2[16], t3[16], t4[16], t5[16], t6[16];
    long root;
    unsigned long count;
    if (line[0] != '#' &&
        sscanf(line, "%lu %lu %15s %7s %ld %15s %15s %15s %7s %15s %15s %15s "
                     "%7s",
               &r.size, &count, r.type, r.redop, &root, t1, t2, t3,
               r.wrong_oop, t4, t5, t6, r.wrong_ip) == 13)
      rows[n++] = r;
    line = end ? end + 1 : NULL;
  }
  return n;
}

static void expect_ok(const struct out *o, const char *what) {
  cr_assert_eq(o->status, 0, "%s: exit status %d:\n%s", what, o->status,
               o->text);
  cr_assert(strstr(o->text, "# Out of bounds values : 0 OK") != NULL,
            "%s: no '# Out of bounds values : 0 OK':\n%s", what, o->text);
  cr_assert(strstr(o->text, "# Avg bus bandwidth    : ") != NULL,
            "%s: no '# Avg bus bandwidth' line:\n%s", what, o->text);
}

Test(bench, perf_names_pick_the_collective, .timeout = 240) {
  static const char *const names[][2] = {
      {"all_reduce_perf", "allreduce"},  {"all_gather_perf", "allgather"},
      {"reduce_scatter_perf", "reduce_scatter"}, {"broadcast_perf", "bcast"},
      {"reduce_perf", "reduce"},         {"alltoall_perf", "alltoall"},
      {"sendrecv_perf", "sendrecv"}};
  static struct out o;
  struct row rows[64];
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    bench(&o, 3, names[k][0], "-b 8 -e 4K -f 4 -g 1 -n 2 -w 1");
    expect_ok(&o, names[k][0]);
    char want[64];
    snprintf(want, sizeof want, "# ringcc-bench: %s,", names[k][1]);
    cr_assert(strstr(o.text, want) != NULL, "%s: no '%s':\n%s", names[k][0],
              want, o.text);
    int n = rows_of(&o, rows, 64);
    cr_assert(n >= 4, "%s: %d rows:\n%s", names[k][0], n, o.text);
    for (int i = 0; i < n; i++)
      cr_assert(strcmp(rows[i].wrong_oop, "0") == 0, "%s row %d: #wrong %s",
                names[k][0], i, rows[i].wrong_oop);
  }
}

/* -f goes up from -b; -i steps by bytes; -N repeats; -c 0: N/A. */
Test(bench, sizes_and_cycles, .timeout = 120) {
  static struct out o;
  struct row rows[64];
  bench(&o, 2, "all_reduce_perf", "-b 8 -e 64K -f 8 -n 2 -w 1");
  expect_ok(&o, "-f 8");
  unsigned long want_f[] = {8, 64, 512, 4096, 32768};
  int n = rows_of(&o, rows, 64);
  cr_assert_eq(n, 5, "-b 8 -e 64K -f 8: %d rows:\n%s", n, o.text);
  for (int i = 0; i < n; i++)
    cr_assert_eq(rows[i].size, want_f[i], "-f 8 row %d: size %lu", i,
                 rows[i].size);

  bench(&o, 2, "all_reduce_perf", "-b 1K -e 4K -i 1K -n 2 -w 1 -N 2 -c 3");
  expect_ok(&o, "-i 1K -N 2");
  n = rows_of(&o, rows, 64);
  cr_assert_eq(n, 8, "-b 1K -e 4K -i 1K -N 2: %d rows:\n%s", n, o.text);
  for (int i = 0; i < n; i++)
    cr_assert_eq(rows[i].size, 1024ul * (unsigned long)(i % 4 + 1),
                 "-i 1K row %d: size %lu", i, rows[i].size);

  bench(&o, 2, "all_reduce_perf", "-b 8 -e 8 -n 2 -w 1 -c 0");
  cr_assert_eq(o.status, 0, "-c 0: %s", o.text);
  cr_assert(rows_of(&o, rows, 64) == 1 && strcmp(rows[0].wrong_oop, "N/A") == 0,
            "-c 0: #wrong should be N/A:\n%s", o.text);
}

/* -d all -o all: a sweep per datatype and op, float8 included, every row
 * checked; nccl-tests' datatype names. */
Test(bench, every_datatype_and_op, .timeout = 240) {
  static struct out o;
  static struct row rows[128];
  bench(&o, 3, "all_reduce_perf", "-b 64 -e 64 -d all -o all -n 2 -w 1");
  expect_ok(&o, "-d all -o all");
  int n = rows_of(&o, rows, 128);
  cr_assert_eq(n, 12 * 5, "-d all -o all: %d rows:\n%s", n, o.text);
  bench(&o, 4, "reduce_scatter_perf", "-b 1K -e 1K -d f8e5m2 -o avg");
  expect_ok(&o, "-d f8e5m2");
  n = rows_of(&o, rows, 128);
  cr_assert(n == 1 && strcmp(rows[0].type, "float8_e5m2") == 0 &&
                strcmp(rows[0].redop, "avg") == 0,
            "-d f8e5m2 -o avg:\n%s", o.text);
  bench(&o, 2, "all_reduce_perf", "-b 64 -e 64 -d half -n 2 -w 1");
  expect_ok(&o, "-d half");
  cr_assert(rows_of(&o, rows, 128) == 1 &&
                strcmp(rows[0].type, "float16") == 0,
            "-d half is float16:\n%s", o.text);
}

/* What ringcc-bench cannot do says so, exit status 2, before any call. */
Test(bench, usage_errors, .timeout = 120) {
  static const char *const cases[][3] = {
      {"all_reduce_perf", "-g 2", "-g (1 only"},
      {"all_reduce_perf", "-t 4", "-t (1 only"},
      {"all_reduce_perf", "-m 4", "-m (1 only"},
      {"all_reduce_perf", "-G 1", "CUDA graphs need device buffers"},
      {"all_reduce_perf", "-f 0", "for -f"},
      {"all_reduce_perf", "-b 1K -e 8K -f 1 -i 0", "would not grow"},
      {"all_reduce_perf", "--coll allgather",
       "this program's name (all_reduce_perf) selects allreduce"},
      {"all_reduce_perf", "-d float128", "for -d"},
      {"ringcc-bench", "-C 2", "for -C"},
  };
  static struct out o;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    bench(&o, 2, cases[k][0], cases[k][1]);
    cr_assert_eq(o.status, 2, "%s %s: exit status %d, want 2:\n%s",
                 cases[k][0], cases[k][1], o.status, o.text);
    cr_assert(strstr(o.text, cases[k][2]) != NULL,
              "%s %s: no '%s' in:\n%s", cases[k][0], cases[k][1], cases[k][2],
              o.text);
  }
}
