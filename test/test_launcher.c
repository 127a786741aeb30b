/*
 * test_launcher.c - tests of tools/ringcc-run, the local launcher.
 *
 * Each test runs the built launcher (from $RINGCC_BIN_DIR, default
 * "build/bin") on /bin/sh -c scripts, captures its stdout and stderr, and
 * waits for it with waitpid. Ranks that should be killed record their pid in a
 * temporary directory (and exec sleep, so the recorded pid is the rank
 * itself); the tests check that those processes are gone afterwards.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- running the launcher ------------------------------------------------ */

struct launch {
  pid_t pid;
  int out_fd, err_fd;
  struct timespec start;
};

struct result {
  int status; /* from waitpid */
  char *out, *err;
  double seconds;
};

static const char *launcher_path(void) {
  static char path[4096];
  const char *dir = getenv("RINGCC_BIN_DIR");
  snprintf(path, sizeof path, "%s/ringcc-run", dir && *dir ? dir : "build/bin");
  return path;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Starts "ringcc-run args..." (args NULL-terminated) with piped output;
 * stdin is /dev/null, or a pipe that holds `input` and is then closed. */
static struct launch start_launcher_input(const char *const *args,
                                          const char *input) {
  const char *path = launcher_path();
  cr_assert(access(path, X_OK) == 0,
            "%s is not built (set RINGCC_BIN_DIR): %s", path, strerror(errno));
  int out[2], err[2], in[2] = {-1, -1};
  cr_assert(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0);
  if (input) cr_assert(pipe2(in, O_CLOEXEC) == 0);
  const char *argv[64] = {path};
  int n = 1;
  for (; args[n - 1] != NULL && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;

  struct launch l = {0};
  clock_gettime(CLOCK_MONOTONIC, &l.start);
  l.pid = fork();
  cr_assert(l.pid >= 0, "fork: %s", strerror(errno));
  if (l.pid == 0) {
    int in_fd = input ? in[0] : open("/dev/null", O_RDONLY);
    dup2(in_fd, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execv(path, (char *const *)argv);
    _exit(126);
  }
  close(out[1]);
  close(err[1]);
  if (input) {
    close(in[0]);
    size_t len = strlen(input); /* small: fits in the pipe */
    cr_assert_eq(write(in[1], input, len), (ssize_t)len);
    close(in[1]);
  }
  l.out_fd = out[0];
  l.err_fd = err[0];
  return l;
}

static void append(char **buf, size_t *len, const char *data, size_t n) {
  *buf = realloc(*buf, *len + n + 1);
  cr_assert(*buf != NULL);
  memcpy(*buf + *len, data, n);
  *len += n;
  (*buf)[*len] = '\0';
}

static struct launch start_launcher(const char *const *args) {
  return start_launcher_input(args, NULL);
}

/* Reads both pipes to EOF, then waits for the launcher. */
static struct result finish_launcher(struct launch *l) {
  struct result r = {0};
  size_t out_len = 0, err_len = 0;
  append(&r.out, &out_len, "", 0);
  append(&r.err, &err_len, "", 0);
  struct pollfd p[2] = {{.fd = l->out_fd, .events = POLLIN},
                        {.fd = l->err_fd, .events = POLLIN}};
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    if (poll(p, 2, -1) < 0) {
      cr_assert(errno == EINTR, "poll: %s", strerror(errno));
      continue;
    }
    for (int k = 0; k < 2; k++) {
      if (p[k].fd < 0 || p[k].revents == 0) continue;
      char chunk[65536];
      ssize_t n = read(p[k].fd, chunk, sizeof chunk);
      if (n > 0) {
        if (k == 0) append(&r.out, &out_len, chunk, (size_t)n);
        else append(&r.err, &err_len, chunk, (size_t)n);
      } else if (n == 0 || errno != EINTR) {
        close(p[k].fd);
        p[k].fd = -1;
      }
    }
  }
  pid_t w;
  do w = waitpid(l->pid, &r.status, 0);
  while (w < 0 && errno == EINTR);
  cr_assert_eq(w, l->pid, "waitpid: %s", strerror(errno));
  r.seconds = seconds_since(&l->start);
  return r;
}

static struct result run_launcher(const char *const *args) {
  struct launch l = start_launcher(args);
  return finish_launcher(&l);
}

static void free_result(struct result *r) {
  free(r->out);
  free(r->err);
}

static int exit_status(const struct result *r) {
  cr_assert(WIFEXITED(r->status), "the launcher did not exit normally (0x%x)",
            (unsigned)r->status);
  return WEXITSTATUS(r->status);
}

/* ---- helpers ------------------------------------------------------------- */

static int count_lines(const char *text, const char *line) {
  int n = 0;
  size_t len = strlen(line);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t l = nl ? (size_t)(nl - p) : strlen(p);
    if (l == len && strncmp(p, line, len) == 0) n++;
    if (!nl) break;
    p = nl + 1;
  }
  return n;
}

static int total_lines(const char *text) {
  int n = 0;
  for (const char *p = text; *p; p++) n += *p == '\n';
  return n;
}

/* A fresh directory for pid files; its path in dir[PATH_MAX]. */
static void make_tmpdir(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/ringcc-launcher-test.XXXXXX");
  cr_assert(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

/* The pid written by rank r into dir/pid.r, or 0 when there is none. */
static pid_t read_pid(const char *dir, int r) {
  char path[4200];
  snprintf(path, sizeof path, "%s/pid.%d", dir, r);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  int pid = 0;
  if (fscanf(f, "%d", &pid) != 1) pid = 0;
  fclose(f);
  unlink(path);
  return (pid_t)pid;
}

/* 'Z' for a zombie, 0 when pid does not exist. */
static char process_state(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' ? paren[2] : '?';
}

/* True when pid no longer exists, not even as a zombie (waits up to 2 s), or
 * with zombie_ok, when it is at most a zombie (an orphan whose reaper is
 * init, which need not be quick, or at all, in a container). */
static int process_gone_or(pid_t pid, int zombie_ok) {
  for (int tries = 0; tries < 200; tries++) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    if (zombie_ok && process_state(pid) == 'Z') return 1;
    usleep(10000);
  }
  return 0;
}

static int process_gone(pid_t pid) { return process_gone_or(pid, 0); }

static void check_ranks_gone(const char *dir, int nranks, int skip) {
  for (int r = 0; r < nranks; r++) {
    if (r == skip) continue;
    pid_t pid = read_pid(dir, r);
    cr_assert(pid > 0, "rank %d did not record its pid", r);
    cr_expect(process_gone(pid), "rank %d (pid %d) is still there", r, (int)pid);
  }
  rmdir(dir);
}

/* ---- tests --------------------------------------------------------------- */

Test(launcher, environment_of_each_rank, .timeout = 20) {
  const char *args[] = {
      "-np", "4", "/bin/sh", "-c",
      "echo \"env $RINGCC_RANK $RINGCC_NRANKS $RINGCC_LOCAL_RANK "
      "$RINGCC_LOCAL_SIZE $RINGCC_ROOT $RINGCC_SECRET\"",
      NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_assert_eq(total_lines(r.out), 4, "stdout: %s", r.out);

  int seen[4] = {0};
  char root0[128] = "", secret0[64] = "";
  for (const char *p = r.out; *p; p = strchr(p, '\n') + 1) {
    int tag, rank, nranks, local_rank, local_size;
    char root[128], secret[64];
    int got = sscanf(p, "[%d] env %d %d %d %d %127s %63s", &tag, &rank,
                     &nranks, &local_rank, &local_size, root, secret);
    cr_assert_eq(got, 7, "unexpected line in: %s", r.out);
    cr_assert(rank >= 0 && rank < 4, "RINGCC_RANK %d", rank);
    cr_expect_eq(tag, rank, "line of rank %d tagged [%d]", rank, tag);
    cr_expect_eq(nranks, 4);
    cr_expect_eq(local_rank, rank);
    cr_expect_eq(local_size, 4);
    seen[rank]++;
    cr_expect_eq(strncmp(root, "127.0.0.1:", 10), 0, "RINGCC_ROOT %s", root);
    int port = atoi(root + 10);
    cr_expect(port > 0 && port < 65536, "RINGCC_ROOT %s", root);
    cr_expect_eq(strlen(secret), 32, "RINGCC_SECRET %s", secret);
    cr_expect_eq(strspn(secret, "0123456789abcdefABCDEF"), 32,
                 "RINGCC_SECRET %s", secret);
    if (root0[0] == '\0') {
      strcpy(root0, root);
      strcpy(secret0, secret);
    }
    cr_expect_str_eq(root, root0, "ranks disagree on RINGCC_ROOT");
    cr_expect_str_eq(secret, secret0, "ranks disagree on RINGCC_SECRET");
  }
  for (int k = 0; k < 4; k++) cr_expect_eq(seen[k], 1, "rank %d seen %d times", k, seen[k]);
  free_result(&r);

  /* A new job gets a new secret. */
  struct result again = run_launcher(args);
  cr_assert_eq(exit_status(&again), 0);
  cr_expect_null(strstr(again.out, secret0), "the secret was reused");
  free_result(&again);
}

Test(launcher, root_option_and_n_alias, .timeout = 20) {
  const char *args[] = {"-n", "2", "--root", "10.1.2.3:29500", "--", "/bin/sh",
                        "-c", "echo root=$RINGCC_ROOT", NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_expect_eq(count_lines(r.out, "[0] root=10.1.2.3:29500"), 1, "%s", r.out);
  cr_expect_eq(count_lines(r.out, "[1] root=10.1.2.3:29500"), 1, "%s", r.out);
  free_result(&r);
}

Test(launcher, stdout_and_stderr_are_tagged, .timeout = 20) {
  const char *args[] = {
      "-np", "3", "/bin/sh", "-c",
      "echo out$RINGCC_RANK; echo err$RINGCC_RANK >&2; echo two$RINGCC_RANK; "
      "printf tail$RINGCC_RANK; printf etail$RINGCC_RANK >&2",
      NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr: %s", r.err);
  for (int k = 0; k < 3; k++) {
    char line[64];
    snprintf(line, sizeof line, "[%d] out%d", k, k);
    cr_expect_eq(count_lines(r.out, line), 1, "no '%s' in stdout:\n%s", line, r.out);
    snprintf(line, sizeof line, "[%d] two%d", k, k);
    cr_expect_eq(count_lines(r.out, line), 1, "no '%s' in stdout:\n%s", line, r.out);
    snprintf(line, sizeof line, "[%d] tail%d", k, k);
    cr_expect_eq(count_lines(r.out, line), 1,
                 "partial last line '%s' lost:\n%s", line, r.out);
    snprintf(line, sizeof line, "[%d] err%d", k, k);
    cr_expect_eq(count_lines(r.err, line), 1, "no '%s' in stderr:\n%s", line, r.err);
    snprintf(line, sizeof line, "[%d] etail%d", k, k);
    cr_expect_eq(count_lines(r.err, line), 1,
                 "partial last line '%s' lost:\n%s", line, r.err);
  }
  cr_expect_eq(total_lines(r.out), 9, "stdout:\n%s", r.out);
  cr_expect_eq(total_lines(r.err), 6, "stderr:\n%s", r.err);
  free_result(&r);
}

Test(launcher, prefix_is_padded_to_the_widest_rank, .timeout = 20) {
  const char *args[] = {"-np", "12", "/bin/sh", "-c", "echo x", NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_expect_eq(count_lines(r.out, "[ 0] x"), 1, "%s", r.out);
  cr_expect_eq(count_lines(r.out, "[ 9] x"), 1, "%s", r.out);
  cr_expect_eq(count_lines(r.out, "[11] x"), 1, "%s", r.out);
  free_result(&r);
}

Test(launcher, no_prefix, .timeout = 20) {
  const char *args[] = {"-np", "2", "--no-prefix", "/bin/sh", "-c",
                        "echo plain; printf nonl", NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_expect_eq(count_lines(r.out, "plain"), 2, "%s", r.out);
  cr_expect_eq(count_lines(r.out, "nonl"), 2, "%s", r.out);
  free_result(&r);
}

Test(launcher, no_output_is_lost, .timeout = 30) {
  /* 4 ranks x 20000 lines on stdout and 5000 on stderr, all at once. */
  const char *args[] = {
      "-np", "4", "/bin/sh", "-c",
      "i=0; while [ $i -lt 5000 ]; do echo e$i >&2; i=$((i+1)); done & "
      "seq 1 20000; wait",
      NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr tail: %s",
               r.err + (strlen(r.err) > 200 ? strlen(r.err) - 200 : 0));
  cr_expect_eq(total_lines(r.out), 4 * 20000);
  cr_expect_eq(total_lines(r.err), 4 * 5000);
  /* Each rank's lines arrive whole and in order. */
  int next[4] = {1, 1, 1, 1};
  for (const char *p = r.out; *p; p = strchr(p, '\n') + 1) {
    int rank, v;
    cr_assert_eq(sscanf(p, "[%d] %d", &rank, &v), 2, "bad line %.40s", p);
    cr_assert(rank >= 0 && rank < 4);
    cr_assert_eq(v, next[rank], "rank %d: line %d after %d", rank, v,
                 next[rank] - 1);
    next[rank]++;
  }
  free_result(&r);
}

Test(launcher, long_line_without_newline, .timeout = 20) {
  /* 200000 characters and no newline at all: more than the launcher holds. */
  const char *args[] = {"-np", "1", "/bin/sh", "-c",
                        "head -c 200000 /dev/zero | tr '\\0' a", NULL};
  struct result r = run_launcher(args);
  cr_assert_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_assert_eq(strncmp(r.out, "[0] a", 5), 0);
  cr_expect_eq(strlen(r.out), 4 + 200000 + 1, "got %zu bytes", strlen(r.out));
  cr_expect_eq(strspn(r.out + 4, "a"), 200000);
  cr_expect_eq(r.out[strlen(r.out) - 1], '\n');
  free_result(&r);
}

Test(launcher, failing_rank_stops_the_job, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "if [ $RINGCC_RANK = 2 ]; then sleep 0.3; echo bye >&2; exit 3; fi; "
           "echo $$ > %s/pid.$RINGCC_RANK; exec sleep 100",
           dir);
  const char *args[] = {"-np", "4", "/bin/sh", "-c", script, NULL};
  struct result r = run_launcher(args);
  int code = exit_status(&r);
  cr_expect_neq(code, 0);
  cr_expect_eq(code, 3, "exit status %d, want the rank's 3", code);
  cr_expect_lt(r.seconds, 10.0, "took %.2f s to stop (the others sleep 100 s)",
               r.seconds);
  cr_expect_eq(count_lines(r.err, "[2] bye"), 1, "stderr: %s", r.err);
  cr_expect_not_null(strstr(r.err, "rank 2 (pid "), "stderr: %s", r.err);
  cr_expect_not_null(strstr(r.err, "exited with status 3"), "stderr: %s", r.err);
  cr_expect_not_null(strstr(r.err, "stopping the other 3 ranks"), "stderr: %s",
                     r.err);
  /* The rank's own output comes before the launcher's verdict. */
  cr_expect_lt(strstr(r.err, "[2] bye"), strstr(r.err, "rank 2 (pid "));
  check_ranks_gone(dir, 4, 2);
  free_result(&r);
}

Test(launcher, rank_killed_by_a_signal, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "echo $$ > %s/pid.$RINGCC_RANK; "
           "if [ $RINGCC_RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; "
           "exec sleep 100",
           dir);
  const char *args[] = {"-np", "3", "/bin/sh", "-c", script, NULL};
  struct result r = run_launcher(args);
  cr_expect_eq(exit_status(&r), 128 + 9);
  cr_expect_lt(r.seconds, 10.0, "took %.2f s to stop (the others sleep 100 s)",
               r.seconds);
  cr_expect_not_null(strstr(r.err, "rank 1 (pid "), "stderr: %s", r.err);
  cr_expect_not_null(strstr(r.err, "killed by signal 9"), "stderr: %s", r.err);
  check_ranks_gone(dir, 3, -1);
  free_result(&r);
}

/* A rank killed before its init unlinked its shared-memory segment leaves it
 * in /dev/shm, named after its creator (shmname.h): the launcher removes the
 * segments of the ranks it reaped (before: they stayed). */
Test(launcher, segments_of_a_killed_rank_are_removed, .timeout = 20) {
  char dir[256], script[1024], path[300], seg[256] = "";
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "boot=$(tr -d - < /proc/sys/kernel/random/boot_id | cut -c1-12); "
           "ns=$(stat -Lc %%i /proc/self/ns/pid); "
           "seg=/dev/shm/ringcc-$boot-$ns-$$-0123456789abcdef0123456789abcdef; "
           ": > $seg; echo $seg > %s/seg; kill -9 $$",
           dir);
  const char *args[] = {"-np", "1", "/bin/sh", "-c", script, NULL};
  struct result r = run_launcher(args);
  cr_expect_eq(exit_status(&r), 128 + 9, "stderr: %s", r.err);
  snprintf(path, sizeof path, "%s/seg", dir);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "the rank did not make its segment; stderr: %s",
                     r.err);
  cr_assert_not_null(fgets(seg, sizeof seg, f));
  fclose(f);
  seg[strcspn(seg, "\n")] = '\0';
  bool left = access(seg, F_OK) == 0;
  unlink(seg);
  unlink(path);
  rmdir(dir);
  cr_expect(!left, "%s was left in /dev/shm; stderr: %s", seg, r.err);
  cr_expect_not_null(strstr(r.err, "removed /dev/shm/ringcc-"), "stderr: %s",
                     r.err);
  free_result(&r);
}

/* A rank killed by a signal takes its peers down within milliseconds, and
 * they may be reaped first: the launcher names the killed rank as the cause
 * (and its exit status), and the rank that only noticed as well. Here rank 2
 * even exits 50 ms before rank 1 is killed. */
Test(launcher, killed_rank_is_the_cause_not_its_peer, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "echo $$ > %s/pid.$RINGCC_RANK; "
           "if [ $RINGCC_RANK = 2 ]; then sleep 0.3; echo 'peer died' >&2; "
           "exit 1; fi; "
           "if [ $RINGCC_RANK = 1 ]; then sleep 0.35; kill -9 $$; fi; "
           "exec sleep 100",
           dir);
  const char *args[] = {"-np", "4", "/bin/sh", "-c", script, NULL};
  struct result r = run_launcher(args);
  cr_expect_eq(exit_status(&r), 128 + 9, "exit status %d, want 137; stderr: %s",
               exit_status(&r), r.err);
  const char *cause = strstr(r.err, "rank 1 (pid ");
  cr_expect(cause != NULL && strstr(cause, "killed by signal 9") != NULL &&
                strstr(cause, "stopping the other 2 ranks") != NULL,
            "stderr: %s", r.err);
  const char *also = strstr(r.err, "rank 2 (pid ");
  cr_expect(also != NULL && strstr(also, "exited with status 1 too") != NULL,
            "stderr: %s", r.err);
  cr_expect(cause != NULL && also != NULL && cause < also,
            "the cause comes first; stderr: %s", r.err);
  check_ranks_gone(dir, 4, 2);
  free_result(&r);
}

Test(launcher, rank_ignoring_sigterm_gets_sigkill, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "echo $$ > %s/pid.$RINGCC_RANK; "
           "if [ $RINGCC_RANK = 0 ]; then sleep 0.3; exit 5; fi; "
           "trap '' TERM; while :; do sleep 0.05; done",
           dir);
  const char *args[] = {"-np", "2", "/bin/sh", "-c", script, NULL};
  struct result r = run_launcher(args);
  cr_expect_eq(exit_status(&r), 5);
  cr_expect(r.seconds > 1.5 && r.seconds < 6.0,
            "took %.2f s; want the 2 s SIGTERM grace, then SIGKILL", r.seconds);
  check_ranks_gone(dir, 2, -1);
  free_result(&r);
}

Test(launcher, signals_are_forwarded, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "trap 'echo got TERM; exit 0' TERM; echo $$ > %s/pid.$RINGCC_RANK; "
           "while :; do sleep 0.05; done",
           dir);
  const char *args[] = {"-np", "3", "/bin/sh", "-c", script, NULL};
  struct launch l = start_launcher(args);
  usleep(500000);
  kill(l.pid, SIGTERM);
  struct result r = finish_launcher(&l);
  cr_expect_eq(exit_status(&r), 0, "every rank exited 0; stderr: %s", r.err);
  cr_expect_lt(r.seconds, 10.0, "took %.2f s", r.seconds);
  for (int k = 0; k < 3; k++) {
    char line[32];
    snprintf(line, sizeof line, "[%d] got TERM", k);
    cr_expect_eq(count_lines(r.out, line), 1, "stdout: %s", r.out);
  }
  check_ranks_gone(dir, 3, -1);
  free_result(&r);
}

Test(launcher, timeout_stops_the_job, .timeout = 20) {
  const char *args[] = {"-np", "2", "--timeout", "0.5", "sleep", "100", NULL};
  struct result r = run_launcher(args);
  cr_expect_eq(exit_status(&r), 124);
  cr_expect_lt(r.seconds, 10.0, "took %.2f s", r.seconds);
  cr_expect_not_null(strstr(r.err, "timeout"), "stderr: %s", r.err);
  free_result(&r);
}

Test(launcher, help_and_version, .timeout = 20) {
  const char *help[] = {"--help", NULL};
  struct result r = run_launcher(help);
  cr_expect_eq(exit_status(&r), 0);
  const char *words[] = {"-np", "--root", "--no-prefix", "--timeout",
                         "--version", "RINGCC_RANK", "RINGCC_NRANKS",
                         "RINGCC_LOCAL_RANK", "RINGCC_LOCAL_SIZE",
                         "RINGCC_ROOT", "RINGCC_SECRET"};
  for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
    cr_expect_not_null(strstr(r.out, words[k]), "--help does not mention %s",
                       words[k]);
  free_result(&r);

  const char *h[] = {"-h", NULL};
  r = run_launcher(h);
  cr_expect_eq(exit_status(&r), 0);
  cr_expect_not_null(strstr(r.out, "-np"));
  free_result(&r);

  const char *version[] = {"--version", NULL};
  r = run_launcher(version);
  cr_expect_eq(exit_status(&r), 0);
  cr_expect_not_null(strstr(r.out, "ringcc-run"));
  free_result(&r);
}

Test(launcher, usage_errors, .timeout = 20) {
  const char *cases[][6] = {
      {"/bin/true", NULL},                 /* no -np */
      {"-np", "0", "/bin/true", NULL},     /* bad count */
      {"-np", "2", NULL},                  /* no program */
      {"-np", "2", "--bogus", "/bin/true", NULL},
      {"-np", "2", "--root", "nohostport", "/bin/true", NULL},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    struct result r = run_launcher(cases[k]);
    cr_expect_eq(exit_status(&r), 2, "case %zu: stderr %s", k, r.err);
    cr_expect_not_null(strstr(r.err, "ringcc-run:"), "case %zu: %s", k, r.err);
    free_result(&r);
  }
}

Test(launcher, nonexistent_program, .timeout = 20) {
  const char *args[] = {"-np", "3", "/nonexistent/ringcc-no-such-prog", NULL};
  struct result r = run_launcher(args);
  cr_expect_eq(exit_status(&r), 127);
  cr_expect_not_null(
      strstr(r.err, "cannot run /nonexistent/ringcc-no-such-prog: No such file"),
      "stderr: %s", r.err);
  cr_expect_lt(r.seconds, 10.0, "took %.2f s", r.seconds);
  free_result(&r);
}

Test(launcher, exit_zero_only_when_all_ranks_succeed, .timeout = 20) {
  const char *ok[] = {"-np", "4", "/bin/true", NULL};
  struct result r = run_launcher(ok);
  cr_expect_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_expect_str_empty(r.err);
  free_result(&r);

  /* The last rank fails after the others finished: nobody left to stop. */
  const char *late[] = {"-np", "3", "/bin/sh", "-c",
                        "[ $RINGCC_RANK = 2 ] && sleep 0.2 && exit 7; exit 0",
                        NULL};
  r = run_launcher(late);
  cr_expect_eq(exit_status(&r), 7);
  cr_expect_not_null(strstr(r.err, "rank 2 (pid "), "stderr: %s", r.err);
  free_result(&r);
}

Test(launcher, stdin_goes_to_rank_0, .timeout = 20) {
  const char *args[] = {"-np", "3", "/bin/sh", "-c",
                        "read line; echo \"read '$line'\"", NULL};
  struct launch l = start_launcher_input(args, "hello\n");
  struct result r = finish_launcher(&l);
  cr_expect_eq(exit_status(&r), 0, "stderr: %s", r.err);
  cr_expect_eq(count_lines(r.out, "[0] read 'hello'"), 1, "stdout: %s", r.out);
  cr_expect_eq(count_lines(r.out, "[1] read ''"), 1, "stdout: %s", r.out);
  cr_expect_eq(count_lines(r.out, "[2] read ''"), 1, "stdout: %s", r.out);
  free_result(&r);
}

Test(launcher, sigint_stops_the_ranks, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "echo $$ > %s/pid.$RINGCC_RANK; exec sleep 100", dir);
  const char *args[] = {"-np", "3", "/bin/sh", "-c", script, NULL};
  struct launch l = start_launcher(args);
  usleep(500000);
  kill(l.pid, SIGINT);
  struct result r = finish_launcher(&l);
  cr_expect_eq(exit_status(&r), 128 + SIGINT, "stderr: %s", r.err);
  cr_expect_lt(r.seconds, 10.0, "took %.2f s", r.seconds);
  cr_expect_not_null(strstr(r.err, "forwarding"), "stderr: %s", r.err);
  check_ranks_gone(dir, 3, -1);
  free_result(&r);
}

Test(launcher, ranks_die_with_the_launcher, .timeout = 20) {
  char dir[256], script[1024];
  make_tmpdir(dir, sizeof dir);
  snprintf(script, sizeof script,
           "echo $$ > %s/pid.$RINGCC_RANK; exec sleep 100", dir);
  const char *args[] = {"-np", "2", "/bin/sh", "-c", script, NULL};
  struct launch l = start_launcher(args);
  usleep(500000);
  kill(l.pid, SIGKILL);
  struct result r = finish_launcher(&l);
  cr_expect(WIFSIGNALED(r.status));
  for (int k = 0; k < 2; k++) {
    pid_t pid = read_pid(dir, k);
    cr_assert(pid > 0, "rank %d did not record its pid", k);
    cr_expect(process_gone_or(pid, 1), "rank %d (pid %d) outlived the launcher",
              k, (int)pid);
  }
  rmdir(dir);
  free_result(&r);
}
