/*
 * test_faults.c - what happens when things go wrong: a rank killed with
 * SIGKILL in the middle of a stream of random collectives (over shared memory
 * and over TCP, and under ringcc-run), a rank that never makes the call (the
 * deadline and the hang report, on timeout, on request and on a signal),
 * ranks that disagree about a call (RINGCC_CHECK), ringcc_comm_abort from
 * another thread, and ids or strangers that are not what they claim.
 *
 * Ranks are fork()ed processes that join with the public API. A rank body
 * never uses Criterion asserts (they do not work in forked children): it
 * writes what it saw into shared memory, or prints one line and exits
 * nonzero, and the parent checks. The parent reaps every child, killing any
 * that outlives its deadline.
 *
 * The kill tests repeat for a fixed time budget and print how many runs they
 * made and how long the survivors took to see the failure (median and max).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "error.h"
#include "harness.h"
#include "shmname.h"
#include "soak/random_coll.h"
#include "socket.h"
#include "wire.h"

#define MAX_RANKS 8
#define MSG_LEN 600

/* ---- forked ranks ------------------------------------------------------------ */

typedef int (*rank_fn)(int rank, int nranks, const ringcc_unique_id_t *id,
                       void *arg);

typedef struct {
  int n;
  pid_t pid[MAX_RANKS];
  int status[MAX_RANKS];
  bool reaped[MAX_RANKS];
  ringcc_unique_id_t id; /* the parent's copy */
} job_t;

enum { IDS_PENDING, IDS_READY, IDS_FAILED };
typedef struct {
  int state;
  ringcc_unique_id_t id;
} id_page_t;

static void child_wait_id(id_page_t *page, ringcc_unique_id_t *id) {
  double deadline = h_now_s() + 30;
  for (;;) {
    int s = __atomic_load_n(&page->state, __ATOMIC_ACQUIRE);
    if (s == IDS_READY) {
      *id = page->id;
      return;
    }
    if (s == IDS_FAILED || h_now_s() > deadline)
      _exit(96);
    h_sleep_ms(1);
  }
}

/* Forks n ranks running fn; rank r's stderr goes to err_fd[r] when err_fd is
 * not NULL. The id is made after the fork (its rendezvous thread must not be
 * running when a child is forked) and handed over in shared memory. */
static void job_start(job_t *j, int n, rank_fn fn, void *arg,
                      const int *err_fd) {
  id_page_t *page = h_shared_alloc(sizeof *page);
  cr_assert_not_null(page);
  memset(j, 0, sizeof *j);
  j->n = n;
  pid_t parent = getpid();
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(98);
      if (err_fd != NULL && err_fd[r] >= 0)
        dup2(err_fd[r], STDERR_FILENO);
      ringcc_unique_id_t id;
      child_wait_id(page, &id);
      int rc = fn(r, n, &id, arg);
      fflush(NULL);
      _exit(rc & 0xff ? rc & 0xff : (rc ? 1 : 0));
    }
    j->pid[r] = pid;
  }
  ringcc_result_t r = ringcc_get_unique_id(&j->id);
  page->id = j->id;
  __atomic_store_n(&page->state, r == RINGCC_SUCCESS ? IDS_READY : IDS_FAILED,
                   __ATOMIC_RELEASE);
  /* The children copy the id within milliseconds; the page can go once they
   * have (each child's own mapping stays until it exits). */
  h_shared_free(page, sizeof *page);
  cr_assert_eq(r, RINGCC_SUCCESS, "ringcc_get_unique_id: %s",
               ringcc_comm_last_error(NULL));
}

/* Reaps whatever finished; returns how many ranks still run. */
static int job_poll(job_t *j) {
  int running = 0;
  for (int r = 0; r < j->n; r++) {
    if (j->reaped[r])
      continue;
    if (waitpid(j->pid[r], &j->status[r], WNOHANG) == j->pid[r])
      j->reaped[r] = true;
    else
      running++;
  }
  return running;
}

/* Waits for every rank; at the deadline kills the rest (and says so).
 * Returns true when all exited by themselves. */
static bool job_wait(job_t *j, double timeout_s) {
  double deadline = h_now_s() + timeout_s;
  while (job_poll(j) > 0) {
    if (h_now_s() > deadline) {
      for (int r = 0; r < j->n; r++)
        if (!j->reaped[r]) {
          fprintf(stderr, "rank %d (pid %d) still running after %.0f s: "
                          "killed\n", r, (int)j->pid[r], timeout_s);
          kill(j->pid[r], SIGKILL);
          waitpid(j->pid[r], &j->status[r], 0);
          j->reaped[r] = true;
        }
      return false;
    }
    h_sleep_ms(1);
  }
  return true;
}

static const char *describe_status(int status, char *buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "ended with wait status 0x%x", (unsigned)status);
  return buf;
}

static void expect_all_exited_0(const job_t *j, const char *what) {
  char st[96];
  for (int r = 0; r < j->n; r++)
    cr_expect(WIFEXITED(j->status[r]) && WEXITSTATUS(j->status[r]) == 0,
              "%s: rank %d %s", what, r,
              describe_status(j->status[r], st, sizeof st));
}

/* ---- logs, /dev/shm, zombies ------------------------------------------------------ */

/* An anonymous file for a rank's stderr. */
static int log_open(void) {
  FILE *f = tmpfile();
  cr_assert_not_null(f, "tmpfile: %s", strerror(errno));
  int fd = dup(fileno(f));
  fclose(f);
  return fd;
}

/* The whole file (malloc'd, NUL-terminated). */
static char *log_read(int fd) {
  struct stat sb;
  cr_assert_eq(fstat(fd, &sb), 0);
  char *text = malloc((size_t)sb.st_size + 1);
  cr_assert_not_null(text);
  ssize_t got = pread(fd, text, (size_t)sb.st_size, 0);
  text[got > 0 ? got : 0] = '\0';
  return text;
}

static void log_dump(const char *title, int fd) {
  char *text = log_read(fd);
  fprintf(stderr, "---- %s ----\n%s---- end ----\n", title, text);
  free(text);
}

/* Names in /dev/shm that belong to one of pids (ringcc-BOOT-PIDNS-PID-...,
 * shmname.h), written into found (comma separated); returns how many. */
static int shm_leftovers(const pid_t *pids, int n, char *found, size_t len) {
  DIR *d = opendir("/dev/shm");
  int count = 0;
  size_t off = 0;
  found[0] = '\0';
  if (d == NULL)
    return 0;
  char boot[RCC_SHM_BOOT_DIGITS + 1], their_boot[RCC_SHM_BOOT_DIGITS + 1];
  unsigned long long pidns, their_ns;
  int pid;
  rcc_shm_identity(boot, &pidns);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    for (int i = 0; i < n; i++) {
      if (rcc_shm_name_parse(e->d_name, their_boot, &their_ns, &pid) != 0 ||
          pid != (int)pids[i] || their_ns != pidns ||
          strcmp(their_boot, boot) != 0)
        continue;
      count++;
      if (off < len)
        off += (size_t)snprintf(found + off, len - off, "%s%s",
                                off ? ", " : "", e->d_name);
    }
  }
  closedir(d);
  return count;
}

/* True when this process has no child left (so none is a zombie). */
static bool no_children_left(void) {
  int status;
  return waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD;
}

/* "rank 3" as a word: not the start of "rank 31". */
static bool names_rank(const char *text, int rank) {
  char word[24];
  int len = snprintf(word, sizeof word, "rank %d", rank);
  for (const char *p = text; (p = strstr(p, word)) != NULL; p += len)
    if (p[len] < '0' || p[len] > '9')
      return true;
  return false;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_of(double *v, int n) {
  if (n == 0)
    return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double max_of(const double *v, int n) {
  double m = 0;
  for (int i = 0; i < n; i++)
    m = v[i] > m ? v[i] : m;
  return m;
}

static ringcc_config_t config_with(int64_t timeout_ms, int tcp) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  cfg.shm_disable = tcp;
  return cfg;
}

/* ---- a rank killed in a stream of random collectives -------------------------------- */

#define KILL_MAX_COUNT 4096  /* elements per block: short calls, many states */
#define KILL_BUDGET_S 33.0   /* per transport */
#define KILL_MIN_RUNS 12
#define KILL_MAX_RUNS 400
#define KILL_DETECT_MAX_S 10.0
#define KILL_TEARDOWN_MAX_S 5.0
#define KILL_STREAM_MAX_S 30.0

typedef struct {
  uint64_t seed;
  int tcp;
  int use_abort; /* survivors leave with ringcc_comm_abort, else destroy */
  struct {
    uint64_t ops; /* calls completed (atomic) */
    int code;     /* the call that failed, or RC_WRONG_DATA */
    int init_code;
    double failed_at; /* CLOCK_MONOTONIC */
    double teardown_s;
    char call[160];
    char message[MSG_LEN];
  } rank[MAX_RANKS];
} kill_area_t;

static int stream_rank(int rank, int n, const ringcc_unique_id_t *id,
                       void *arg) {
  kill_area_t *a = arg;
  ringcc_config_t cfg = config_with(20000, a->tcp);
  ringcc_comm_t comm;
  ringcc_result_t r = ringcc_comm_init(&comm, n, id, rank, &cfg);
  a->rank[rank].init_code = (int)r;
  if (r != RINGCC_SUCCESS) {
    snprintf(a->rank[rank].message, MSG_LEN, "%s",
             ringcc_comm_last_error(NULL));
    return 2;
  }
  rc_rank_t s;
  if (!rc_rank_init(&s, rank, n, KILL_MAX_COUNT))
    return 3;
  double start = h_now_s();
  int code = 0;
  rc_call_t c = {0};
  for (uint64_t i = 0; h_now_s() - start < KILL_STREAM_MAX_S; i++) {
    rc_draw(a->seed, i, n, KILL_MAX_COUNT, &c);
    if ((code = rc_run(&s, &c, comm)) != 0)
      break;
    __atomic_store_n(&a->rank[rank].ops, i + 1, __ATOMIC_RELEASE);
  }
  a->rank[rank].failed_at = h_now_s();
  a->rank[rank].code = code;
  rc_describe(&c, a->rank[rank].call, sizeof a->rank[rank].call);
  snprintf(a->rank[rank].message, MSG_LEN, "%s", ringcc_comm_last_error(comm));
  double t0 = h_now_s();
  if (a->use_abort)
    ringcc_comm_abort(comm);
  else
    ringcc_comm_destroy(comm);
  a->rank[rank].teardown_s = h_now_s() - t0;
  rc_rank_free(&s);
  return 0;
}

typedef struct {
  int runs, victims_rank0, survivors;
  int by_size[MAX_RANKS + 1];
  double *detect, *teardown;
  int ndetect;
} kill_stats_t;

/* Waits until the victim completed `after` calls; false if it (or anyone)
 * ended first. */
static bool wait_for_ops(job_t *j, kill_area_t *a, int victim,
                         uint64_t after) {
  double deadline = h_now_s() + 20;
  while (__atomic_load_n(&a->rank[victim].ops, __ATOMIC_ACQUIRE) < after) {
    if (job_poll(j) < j->n || h_now_s() > deadline)
      return false;
    usleep(200);
  }
  return true;
}

/* Survivor r's error names the killed rank and its host, whichever rank r
 * was waiting for: the ranks that see the death pass it on (failure.c). */
static bool names_victim(const kill_area_t *a, int victim, int r) {
  char host[300], name[256];
  if (gethostname(name, sizeof name) != 0)
    return false;
  name[sizeof name - 1] = '\0';
  snprintf(host, sizeof host, "on host %s)", name);
  return names_rank(a->rank[r].message, victim) &&
         strstr(a->rank[r].message, host) != NULL;
}

static void kill_one_run(int run, int tcp, kill_stats_t *st, int logfd) {
  kill_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  uint64_t h = h_hash3(0x6b696c6c, (uint64_t)run, (uint64_t)tcp);
  int n = 2 + (int)(h % 3);                     /* 2, 3 or 4 ranks */
  int victim = run % 4 == 0 ? 0 : (int)(h_mix64(h) % (uint64_t)n);
  uint64_t after = 1 + h_mix64(h ^ 1) % 40;      /* calls before the kill */
  int delay_us = (int)(h_mix64(h ^ 2) % 3000);   /* into the next call */
  a->seed = h_mix64(h ^ 3);
  a->tcp = tcp;
  a->use_abort = run % 2;
  cr_assert_eq(ftruncate(logfd, 0), 0);
  cr_assert_eq(lseek(logfd, 0, SEEK_SET), 0);
  int err_fd[MAX_RANKS];
  for (int r = 0; r < n; r++)
    err_fd[r] = logfd;

  job_t j;
  job_start(&j, n, stream_rank, a, err_fd);
  char where[160], st_text[96];
  snprintf(where, sizeof where, "%s run %d: %d ranks, rank %d killed after "
           "%llu calls + %d us", tcp ? "TCP" : "shm", run, n, victim,
           (unsigned long long)after, delay_us);
  if (!wait_for_ops(&j, a, victim, after)) {
    job_wait(&j, 1);
    log_dump(where, logfd);
    cr_assert_fail("%s: the stream stopped before the kill (rank %d at %llu "
                   "calls: %s)", where, victim,
                   (unsigned long long)a->rank[victim].ops,
                   a->rank[victim].message);
  }
  usleep((useconds_t)delay_us);
  double killed_at = h_now_s();
  kill(j.pid[victim], SIGKILL);
  bool finished = job_wait(&j, 30);
  bool ok = finished;

  char failure[1200] = "";
  if (!(WIFSIGNALED(j.status[victim]) && WTERMSIG(j.status[victim]) == SIGKILL))
    snprintf(failure, sizeof failure, "the victim %s",
             describe_status(j.status[victim], st_text, sizeof st_text));
  for (int r = 0; r < n && failure[0] == '\0'; r++) {
    if (r == victim)
      continue;
    double delay = a->rank[r].failed_at - killed_at;
    if (!(WIFEXITED(j.status[r]) && WEXITSTATUS(j.status[r]) == 0))
      snprintf(failure, sizeof failure, "survivor rank %d %s", r,
               describe_status(j.status[r], st_text, sizeof st_text));
    else if (a->rank[r].code != RINGCC_ERR_PEER_FAILED)
      snprintf(failure, sizeof failure, "survivor rank %d: %s returned %d "
               "(%s), expected RINGCC_ERR_PEER_FAILED: %s", r,
               a->rank[r].call, a->rank[r].code,
               a->rank[r].code > 0
                   ? ringcc_strerror((ringcc_result_t)a->rank[r].code)
                   : "wrong data or no failure",
               a->rank[r].message);
    else if (delay < 0 || delay > KILL_DETECT_MAX_S)
      snprintf(failure, sizeof failure, "survivor rank %d failed %.3f s "
               "after the kill: %s", r, delay, a->rank[r].message);
    else if (a->rank[r].teardown_s > KILL_TEARDOWN_MAX_S)
      snprintf(failure, sizeof failure, "survivor rank %d: %s after the "
               "failure took %.2f s", r,
               a->use_abort ? "ringcc_comm_abort" : "ringcc_comm_destroy",
               a->rank[r].teardown_s);
    else if (!names_victim(a, victim, r))
      snprintf(failure, sizeof failure, "survivor rank %d: the error does not "
               "name the dead rank %d and its host: %s", r, victim,
               a->rank[r].message);
  }
  char leftovers[512];
  if (failure[0] == '\0' && shm_leftovers(j.pid, n, leftovers, sizeof leftovers))
    snprintf(failure, sizeof failure, "left in /dev/shm: %s", leftovers);
  if (failure[0] == '\0' && !no_children_left())
    snprintf(failure, sizeof failure, "a child process is left (zombie?)");
  if (!ok || failure[0] != '\0') {
    log_dump(where, logfd);
    cr_assert_fail("%s: %s", where, failure[0] ? failure : "ranks hung");
  }

  st->runs++;
  st->by_size[n]++;
  st->victims_rank0 += victim == 0;
  for (int r = 0; r < n; r++) {
    if (r == victim)
      continue;
    st->survivors++;
    st->detect[st->ndetect] = a->rank[r].failed_at - killed_at;
    st->teardown[st->ndetect++] = a->rank[r].teardown_s;
  }
  h_shared_free(a, sizeof *a);
}

static void kill_runs(int tcp) {
  kill_stats_t st = {0};
  st.detect = calloc(KILL_MAX_RUNS * MAX_RANKS, sizeof(double));
  st.teardown = calloc(KILL_MAX_RUNS * MAX_RANKS, sizeof(double));
  cr_assert(st.detect && st.teardown);
  int logfd = log_open();
  double start = h_now_s();
  for (int run = 0; run < KILL_MAX_RUNS; run++) {
    if (run >= KILL_MIN_RUNS && h_now_s() - start > KILL_BUDGET_S)
      break;
    kill_one_run(run, tcp, &st, logfd);
  }
  close(logfd);
  double secs = h_now_s() - start;
  double tmax = max_of(st.teardown, st.ndetect);
  double tmed = median_of(st.teardown, st.ndetect);
  double dmax = max_of(st.detect, st.ndetect);
  double dmed = median_of(st.detect, st.ndetect);
  fprintf(stderr,
          "faults: SIGKILL over %s: %d runs in %.1f s (2/3/4 ranks: %d/%d/%d; "
          "rank 0 killed in %d), %d survivors, all got "
          "RINGCC_ERR_PEER_FAILED naming the killed rank and its host: "
          "detection median %.3f s, max %.3f s; "
          "destroy/abort afterwards median %.3f s, max %.3f s\n",
          tcp ? "TCP" : "shared memory", st.runs, secs, st.by_size[2],
          st.by_size[3], st.by_size[4], st.victims_rank0, st.survivors,
          dmed, dmax, tmed,
          tmax);
  free(st.detect);
  free(st.teardown);
}

Test(faults, kill_rank_shm, .timeout = 120) { kill_runs(0); }
Test(faults, kill_rank_tcp, .timeout = 120) { kill_runs(1); }

/* ---- a rank killed under ringcc-run ----------------------------------------------- */

static const char *bin_path(const char *name, char *buf, size_t len) {
  const char *dir = getenv("RINGCC_BIN_DIR");
  snprintf(buf, len, "%s/%s", dir && *dir ? dir : "build/bin", name);
  return buf;
}

/* The parent pid of pid (from /proc/PID/stat), or -1. */
static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  int ppid;
  if (paren == NULL || sscanf(paren + 2, "%*c %d", &ppid) != 1)
    return -1;
  return (pid_t)ppid;
}

/* RINGCC_RANK of pid, from its environment, or -1. */
static int rank_of(pid_t pid) {
  char path[64], env[16384];
  snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, env, sizeof env - 1);
  close(fd);
  if (n <= 0)
    return -1;
  env[n] = '\0';
  for (char *p = env; p < env + n; p += strlen(p) + 1)
    if (strncmp(p, "RINGCC_RANK=", 12) == 0)
      return atoi(p + 12);
  return -1;
}

/* The launcher's children, by rank; returns how many were found. */
static int find_ranks(pid_t launcher, pid_t *pids, int nranks) {
  DIR *d = opendir("/proc");
  int found = 0;
  cr_assert_not_null(d);
  for (int r = 0; r < nranks; r++)
    pids[r] = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid <= 0 || parent_of(pid) != launcher)
      continue;
    int r = rank_of(pid);
    if (r >= 0 && r < nranks && pids[r] == 0) {
      pids[r] = pid;
      found++;
    }
  }
  closedir(d);
  return found;
}

static int count_substr(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

/* ringcc-run -np 3 ringcc-bench (an endless allreduce loop); once every rank
 * finished init, SIGKILL one: the launcher must exit non-zero within a few
 * seconds, naming that rank and the signal, and leave nothing behind. */
static void launcher_kill(int victim, int tcp) {
  enum { NP = 3 };
  char run[4096], bench[4096];
  bin_path("ringcc-run", run, sizeof run);
  bin_path("ringcc-bench", bench, sizeof bench);
  cr_assert(access(run, X_OK) == 0 && access(bench, X_OK) == 0,
            "%s or %s is not built (set RINGCC_BIN_DIR)", run, bench);
  int out = log_open(), err = log_open();
  double start = h_now_s();
  pid_t launcher = fork();
  cr_assert_geq(launcher, 0);
  if (launcher == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int in = open("/dev/null", O_RDONLY);
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    setenv("RINGCC_DEBUG", "INFO", 1);
    setenv("RINGCC_SHM_DISABLE", tcp ? "1" : "0", 1);
    execl(run, run, "-np", "3", "--timeout", "60", bench, "-b", "256K", "-e",
          "256K", "-n", "100000000", "-w", "0", (char *)NULL);
    _exit(126);
  }
  /* Every rank prints "ring 0: R -> NEXT via ..." at the end of init. */
  pid_t pids[NP];
  char *text = NULL;
  bool ready = false;
  while (!ready && h_now_s() - start < 20) {
    h_sleep_ms(20);
    free(text);
    text = log_read(err);
    ready = count_substr(text, "RINGCC INFO ring 0: ") == NP &&
            find_ranks(launcher, pids, NP) == NP;
  }
  if (!ready) {
    kill(launcher, SIGKILL);
    waitpid(launcher, NULL, 0);
    cr_assert_fail("the job did not get going in 20 s; its stderr:\n%s", text);
  }
  free(text);
  h_sleep_ms(300); /* well inside the stream of allreduces */
  double killed_at = h_now_s();
  cr_assert_eq(kill(pids[victim], SIGKILL), 0);
  int status = 0;
  while (waitpid(launcher, &status, WNOHANG) == 0 && h_now_s() - killed_at < 15)
    h_sleep_ms(5);
  double took = h_now_s() - killed_at;
  if (took >= 15) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
  }
  text = log_read(err);
  char want[64], st[96];
  snprintf(want, sizeof want, "rank %d (pid %d)", victim, (int)pids[victim]);
  cr_expect(took < 10, "ringcc-run took %.1f s to end after the kill", took);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 0,
            "ringcc-run %s, expected a non-zero exit; stderr:\n%s",
            describe_status(status, st, sizeof st), text);
  cr_expect(strstr(text, want) != NULL && strstr(text, "killed by signal 9"),
            "ringcc-run's stderr does not say that %s was killed by signal "
            "9:\n%s", want, text);
  for (int r = 0; r < NP; r++) {
    int tries = 0;
    while (kill(pids[r], 0) == 0 && tries++ < 200)
      h_sleep_ms(10);
    cr_expect(kill(pids[r], 0) != 0 && errno == ESRCH,
              "rank %d (pid %d) is still there", r, (int)pids[r]);
  }
  char leftovers[512];
  cr_expect_eq(shm_leftovers(pids, NP, leftovers, sizeof leftovers), 0,
               "left in /dev/shm: %s", leftovers);
  cr_expect(no_children_left(), "a child process is left");
  fprintf(stderr, "faults: ringcc-run over %s, rank %d killed: exit status "
          "%d %.2f s after the kill\n", tcp ? "TCP" : "shared memory", victim,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, took);
  free(text);
  close(out);
  close(err);
}

Test(faults, launcher_reports_killed_rank_shm, .timeout = 60) {
  launcher_kill(1, 0);
}
Test(faults, launcher_reports_killed_rank0_tcp, .timeout = 60) {
  launcher_kill(0, 1);
}

/* ---- a rank that never makes the call: deadline and hang report ---------------------- */

#define HANG_TIMEOUT_MS 1500
#define HANG_COUNT (1 << 18) /* floats: several pipeline steps */
#define HANG_BOARD_COUNT 2    /* floats: the one-shot over the board */

typedef struct {
  int tcp;
  int board; /* a small one-shot: over shared memory, the board */
  int withholder;
  int finished; /* ranks done with their call (atomic) */
  struct {
    int code;
    double took_s, destroy_s;
    char message[MSG_LEN];
  } rank[MAX_RANKS];
} hang_area_t;

/* Waits (bounded) until *counter reaches want. */
static bool wait_counter(int *counter, int want, double timeout_s) {
  double deadline = h_now_s() + timeout_s;
  while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < want) {
    if (h_now_s() > deadline)
      return false;
    h_sleep_ms(2);
  }
  return true;
}

static int hang_rank(int rank, int n, const ringcc_unique_id_t *id, void *arg) {
  hang_area_t *a = arg;
  ringcc_config_t cfg = config_with(HANG_TIMEOUT_MS, a->tcp);
  if (a->board)
    cfg.algo = RINGCC_ALGO_DIRECT;
  size_t count = a->board ? HANG_BOARD_COUNT : HANG_COUNT;
  ringcc_comm_t comm;
  ringcc_result_t r = ringcc_comm_init(&comm, n, id, rank, &cfg);
  if (r != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  if (rank == a->withholder) {
    /* Alive but silent until the others gave up (a rank that exited would
     * be a dead peer, not a hang). */
    if (!wait_counter(&a->finished, n - 1, 30))
      return h_fail_rank(rank, "the others never gave up");
  } else {
    float *buf = calloc(count, sizeof *buf);
    double t0 = h_now_s();
    r = ringcc_allreduce(buf, buf, count, RINGCC_FLOAT32, RINGCC_SUM, comm,
                         NULL);
    a->rank[rank].took_s = h_now_s() - t0;
    a->rank[rank].code = (int)r;
    snprintf(a->rank[rank].message, MSG_LEN, "%s", ringcc_comm_last_error(comm));
    free(buf);
    __atomic_fetch_add(&a->finished, 1, __ATOMIC_ACQ_REL);
    /* Nobody leaves before all gave up: a rank that exited would be a dead
     * peer to those still waiting. */
    if (!wait_counter(&a->finished, n - 1, 30))
      return h_fail_rank(rank, "the others never gave up");
  }
  double t0 = h_now_s();
  ringcc_comm_destroy(comm);
  a->rank[rank].destroy_s = h_now_s() - t0;
  return 0;
}

/* The report that follows `header` in a log: the rank line names the
 * collective, its sequence number and step and the peer waited for; the
 * next line the FIFO's counters, or for the one-shot over the board the
 * call the peer's board holds and the one waited for. Returns NULL when all
 * is there, else what is missing. */
static const char *report_missing(const char *log, const char *header,
                                  int rank, const char *coll, int seq,
                                  int board) {
  static char missing[160];
  const char *p = strstr(log, header);
  if (p == NULL)
    return header;
  char want[96];
  snprintf(want, sizeof want, "rank %d: %s seq %d, ", rank, coll, seq);
  const char *line = strstr(p, want);
  if (line == NULL)
    return snprintf(missing, sizeof missing, "'%s'", want), missing;
  const char *fifo[] = {", step ", " of ", "; waiting for ", " rank ",
                        "\n    ", ": tail ", " head ", " slots full"};
  const char *onboard[] = {", step ", " of ", "; waiting for data from rank ",
                           "\n    board of rank ", ": holds its call 0, "
                           "this rank waits for call 1"};
  const char **need = board ? onboard : fifo;
  size_t nneed = board ? sizeof onboard / sizeof onboard[0]
                       : sizeof fifo / sizeof fifo[0];
  for (size_t i = 0; i < nneed; i++)
    if (strstr(line, need[i]) == NULL)
      return snprintf(missing, sizeof missing, "'%s' after '%s'", need[i],
                      want), missing;
  return NULL;
}

static void hang(int n, int withholder, int tcp, int board) {
  hang_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->tcp = tcp;
  a->board = board;
  a->withholder = withholder;
  int err_fd[MAX_RANKS];
  for (int r = 0; r < n; r++)
    err_fd[r] = log_open();
  job_t j;
  job_start(&j, n, hang_rank, a, err_fd);
  cr_assert(job_wait(&j, 30), "the ranks hung past the deadline");
  expect_all_exited_0(&j, "hang");
  for (int r = 0; r < n; r++) {
    char *log = log_read(err_fd[r]);
    if (r == withholder) {
      cr_expect_null(strstr(log, "where this rank stands"),
                     "rank %d, which never called, logged a hang report:\n%s",
                     r, log);
    } else {
      cr_expect_eq(a->rank[r].code, RINGCC_ERR_TIMEOUT,
                   "rank %d: allreduce returned %d, expected "
                   "RINGCC_ERR_TIMEOUT: %s", r, a->rank[r].code,
                   a->rank[r].message);
      cr_expect(a->rank[r].took_s > HANG_TIMEOUT_MS / 1000.0 - 0.05 &&
                    a->rank[r].took_s < HANG_TIMEOUT_MS / 1000.0 + 3.0,
                "rank %d gave up after %.2f s (timeout_ms %d)", r,
                a->rank[r].took_s, HANG_TIMEOUT_MS);
      cr_expect(strstr(a->rank[r].message, "allreduce (seq 1)") &&
                    strstr(a->rank[r].message, "timed out after 1500 ms") &&
                    strstr(a->rank[r].message, "waiting for"),
                "rank %d's error: %s", r, a->rank[r].message);
      const char *missing = report_missing(
          log, "timeout; where this rank stands:\n", r, "allreduce", 1,
          board && !tcp);
      cr_expect_null(missing, "rank %d's log lacks %s:\n%s", r, missing, log);
      cr_expect_lt(a->rank[r].destroy_s, 5.0,
                   "rank %d: destroy after the timeout took %.2f s", r,
                   a->rank[r].destroy_s);
    }
    free(log);
    close(err_fd[r]);
  }
  cr_expect(no_children_left());
  h_shared_free(a, sizeof *a);
}

Test(faults, timeout_and_hang_report_shm, .timeout = 40) { hang(3, 2, 0, 0); }
Test(faults, timeout_and_hang_report_tcp_rank0_silent, .timeout = 40) {
  hang(3, 0, 1, 0);
}
/* The one-shot over the board: the peers wait on the silent rank's board. */
Test(faults, timeout_and_hang_report_one_shot_board, .timeout = 40) {
  hang(3, 1, 0, 1);
}

/* ---- the report on request: another thread, and a signal --------------------------- */

typedef struct {
  int tcp, use_signal;
  int blocked; /* rank 0 is inside its allreduce (atomic) */
  int release; /* rank 1 may join (atomic) */
  char report_busy[2048], report_idle[512];
  int report_code, call_code;
} request_area_t;

typedef struct {
  ringcc_comm_t comm;
  int32_t *buf;
  size_t count;
  ringcc_result_t result;
} call_thread_t;

static void *allreduce_thread(void *p) {
  call_thread_t *t = p;
  t->result = ringcc_allreduce(t->buf, t->buf, t->count, RINGCC_INT32,
                               RINGCC_SUM, t->comm, NULL);
  return NULL;
}

/* Polls ringcc_comm_report until it shows a collective waiting. */
static bool report_until_waiting(ringcc_comm_t comm, char *buf, size_t len) {
  double deadline = h_now_s() + 10;
  while (h_now_s() < deadline) {
    if (ringcc_comm_report(comm, buf, len) != RINGCC_SUCCESS)
      return false;
    if (strstr(buf, "waiting for") != NULL)
      return true;
    h_sleep_ms(5);
  }
  return false;
}

#define REQ_COUNT 100000

static int request_rank(int rank, int n, const ringcc_unique_id_t *id,
                        void *arg) {
  request_area_t *a = arg;
  if (a->use_signal)
    setenv("RINGCC_REPORT_SIGNAL", "USR1", 1); /* read by the first init */
  ringcc_config_t cfg = config_with(20000, a->tcp);
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  int32_t *buf = malloc(REQ_COUNT * sizeof *buf);
  int32_t *expect = malloc(REQ_COUNT * sizeof *expect);
  h_fill_input(RINGCC_INT32, RINGCC_SUM, rank, 0, 9, buf, REQ_COUNT);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, n, 0, 9, expect, REQ_COUNT);
  h_ctx_t ctx = {.rank = rank, .nranks = n};
  int rc = 0;
  if (rank == 1) { /* late: joins only when told */
    if (!wait_counter(&a->release, 1, 20))
      return h_fail_rank(rank, "never released");
    ringcc_result_t r = ringcc_allreduce(buf, buf, REQ_COUNT, RINGCC_INT32,
                                         RINGCC_SUM, comm, NULL);
    if (r != RINGCC_SUCCESS)
      rc = h_fail_rank(rank, "allreduce: %s", ringcc_comm_last_error(comm));
  } else if (a->use_signal) { /* blocks in the call; the parent signals */
    __atomic_store_n(&a->blocked, 1, __ATOMIC_RELEASE);
    a->call_code = (int)ringcc_allreduce(buf, buf, REQ_COUNT, RINGCC_INT32,
                                         RINGCC_SUM, comm, NULL);
  } else { /* the call in a thread, the report from this one */
    call_thread_t t = {comm, buf, REQ_COUNT, RINGCC_SUCCESS};
    pthread_t tid;
    if (pthread_create(&tid, NULL, allreduce_thread, &t) != 0)
      return h_fail_rank(rank, "pthread_create failed");
    if (!report_until_waiting(comm, a->report_busy, sizeof a->report_busy))
      rc = h_fail_rank(rank, "ringcc_comm_report never showed the blocked "
                             "call: '%s'", a->report_busy);
    __atomic_store_n(&a->release, 1, __ATOMIC_RELEASE);
    pthread_join(tid, NULL);
    a->call_code = (int)t.result;
    a->report_code = (int)ringcc_comm_report(comm, a->report_idle,
                                             sizeof a->report_idle);
  }
  if (rank == 0 && a->call_code != RINGCC_SUCCESS)
    rc = h_fail_rank(rank, "allreduce: %s", ringcc_comm_last_error(comm));
  else if (rc == 0 && !h_check_elems(&ctx, "allreduce after the report",
                                     RINGCC_INT32, buf, expect, REQ_COUNT))
    rc = 1;
  ringcc_comm_destroy(comm);
  free(buf);
  free(expect);
  return rc;
}

static void report_on_request(int use_signal, int tcp) {
  request_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->tcp = tcp;
  a->use_signal = use_signal;
  int err_fd[2] = {log_open(), -1};
  job_t j;
  job_start(&j, 2, request_rank, a, err_fd);
  if (use_signal) {
    cr_assert(wait_counter(&a->blocked, 1, 20), "rank 0 never got going");
    h_sleep_ms(300); /* inside the allreduce, asleep on the FIFO */
    kill(j.pid[0], SIGUSR1);
    h_sleep_ms(200); /* printed at its next wake-up, within 20 ms */
    __atomic_store_n(&a->release, 1, __ATOMIC_RELEASE);
  }
  cr_assert(job_wait(&j, 30), "the ranks hung");
  char *log = log_read(err_fd[0]);
  expect_all_exited_0(&j, use_signal ? "report on SIGUSR1" : "report from a thread");
  if (use_signal) {
    const char *missing =
        report_missing(log, "report on request:\n", 0, "allreduce", 1, 0);
    cr_expect_null(missing, "after SIGUSR1 rank 0's log lacks %s:\n%s",
                   missing, log);
  } else {
    const char *missing = report_missing(a->report_busy, "", 0, "allreduce", 1,
                                         0);
    cr_expect_null(missing, "ringcc_comm_report from another thread lacks "
                   "%s: '%s'", missing, a->report_busy);
    cr_expect(strstr(a->report_busy, "waiting for data from rank 1") ||
                  strstr(a->report_busy, "waiting for a free slot to send to "
                                         "rank 1"),
              "the report does not name rank 1: '%s'", a->report_busy);
    cr_expect_eq(a->report_code, RINGCC_SUCCESS);
    cr_expect(strstr(a->report_idle, "rank 0: idle (last collective: seq 1)"),
              "the report after the call: '%s'", a->report_idle);
  }
  free(log);
  close(err_fd[0]);
  h_shared_free(a, sizeof *a);
}

Test(faults, report_from_another_thread, .timeout = 40) {
  report_on_request(0, 0);
}
Test(faults, report_from_another_thread_tcp, .timeout = 40) {
  report_on_request(0, 1);
}
Test(faults, report_on_sigusr1, .timeout = 40) { report_on_request(1, 0); }

Test(faults, report_bad_arguments, .timeout = 10) {
  char buf[8];
  cr_expect_eq(ringcc_comm_report(NULL, buf, sizeof buf),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(ringcc_comm_last_error(NULL), "'comm' is NULL"), "%s",
            ringcc_comm_last_error(NULL));
}

/* ---- RINGCC_CHECK: ranks that disagree about a call ---------------------------------- */

enum mismatch { MM_COUNT, MM_DATATYPE, MM_OP, MM_ROOT, MM_COLL, MM_COLL_BARRIER,
                MM_NUM };
static const struct {
  const char *field; /* as the message names it */
  int odd;           /* the rank that differs */
} mismatches[MM_NUM] = {
    [MM_COUNT] = {"count", 1},       [MM_DATATYPE] = {"datatype", 2},
    [MM_OP] = {"op", 0},             [MM_ROOT] = {"root", 1},
    [MM_COLL] = {"collective", 2},   [MM_COLL_BARRIER] = {"collective", 0},
};

#define CHECK_COUNT 1000

typedef struct {
  int tcp;
  struct {
    int code[MM_NUM];
    char message[MM_NUM][MSG_LEN];
  } rank[MAX_RANKS];
} check_area_t;

/* The call of mismatch m as rank `rank` makes it. */
static ringcc_result_t mismatched_call(enum mismatch m, int rank,
                                       ringcc_comm_t comm, float *buf) {
  bool odd = rank == mismatches[m].odd;
  switch (m) {
  case MM_COUNT:
    return ringcc_allreduce(buf, buf, CHECK_COUNT + odd, RINGCC_FLOAT32,
                            RINGCC_SUM, comm, NULL);
  case MM_DATATYPE:
    return ringcc_allreduce(buf, buf, CHECK_COUNT,
                            odd ? RINGCC_INT32 : RINGCC_FLOAT32, RINGCC_SUM,
                            comm, NULL);
  case MM_OP:
    return ringcc_allreduce(buf, buf, CHECK_COUNT, RINGCC_FLOAT32,
                            odd ? RINGCC_MAX : RINGCC_SUM, comm, NULL);
  case MM_ROOT:
    return ringcc_bcast(buf, CHECK_COUNT, RINGCC_FLOAT32, odd ? rank : 0, comm,
                        NULL);
  case MM_COLL:
    if (odd)
      return ringcc_allgather(buf, buf + CHECK_COUNT, CHECK_COUNT,
                              RINGCC_FLOAT32, comm, NULL);
    return ringcc_allreduce(buf, buf, CHECK_COUNT, RINGCC_FLOAT32, RINGCC_SUM,
                            comm, NULL);
  default:
    if (odd)
      return ringcc_barrier(comm, NULL);
    return ringcc_reduce(buf, buf, CHECK_COUNT, RINGCC_FLOAT32, RINGCC_SUM, 1,
                         comm, NULL);
  }
}

static int check_rank(int rank, int n, const ringcc_unique_id_t *id, void *arg) {
  check_area_t *a = arg;
  ringcc_config_t cfg = config_with(10000, a->tcp);
  cfg.check = 1;
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  float *buf = calloc((size_t)CHECK_COUNT * (size_t)(n + 1) + 1, sizeof *buf);
  int32_t got[1031], expect[1031];
  h_ctx_t ctx = {.rank = rank, .nranks = n};
  int rc = 0;
  for (int m = 0; m < MM_NUM && rc == 0; m++) {
    a->rank[rank].code[m] = (int)mismatched_call((enum mismatch)m, rank, comm, buf);
    snprintf(a->rank[rank].message[m], MSG_LEN, "%s",
             ringcc_comm_last_error(comm));
    /* The communicator still works: an exact allreduce, checked here. */
    h_fill_input(RINGCC_INT32, RINGCC_SUM, rank, 0, (uint64_t)m, got, 1031);
    h_fill_expected(RINGCC_INT32, RINGCC_SUM, n, 0, (uint64_t)m, expect, 1031);
    ringcc_result_t r = ringcc_allreduce(got, got, 1031, RINGCC_INT32,
                                         RINGCC_SUM, comm, NULL);
    if (r != RINGCC_SUCCESS)
      rc = h_fail_rank(rank, "the allreduce after the %s mismatch returned "
                             "%s: %s", mismatches[m].field, ringcc_strerror(r),
                       ringcc_comm_last_error(comm));
    else if (!h_check_elems(&ctx, "allreduce after a mismatch", RINGCC_INT32,
                            got, expect, 1031))
      rc = 1;
  }
  ringcc_comm_destroy(comm);
  free(buf);
  return rc;
}

static void check_mismatches(int tcp) {
  enum { N = 3 };
  check_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->tcp = tcp;
  int logfd = log_open(), err_fd[N] = {logfd, logfd, logfd};
  job_t j;
  job_start(&j, N, check_rank, a, err_fd);
  bool done = job_wait(&j, 40);
  if (!done)
    log_dump("RINGCC_CHECK", logfd);
  close(logfd);
  cr_assert(done, "the ranks hung");
  expect_all_exited_0(&j, "RINGCC_CHECK");
  for (int m = 0; m < MM_NUM; m++) {
    const char *first = NULL;
    for (int r = 0; r < N; r++) {
      const char *msg = a->rank[r].message[m];
      cr_expect_eq(a->rank[r].code[m], RINGCC_ERR_INVALID_USAGE,
                   "%s mismatch, rank %d: code %d, expected "
                   "RINGCC_ERR_INVALID_USAGE: %s", mismatches[m].field, r,
                   a->rank[r].code[m], msg);
      char field[64], odd[48];
      snprintf(field, sizeof field, "%s: rank ", mismatches[m].field);
      snprintf(odd, sizeof odd, "rank %d has ", mismatches[m].odd);
      cr_expect(strstr(msg, "(RINGCC_CHECK)") && strstr(msg, field) &&
                    strstr(msg, odd),
                "%s mismatch, rank %d: the message does not name the field "
                "and rank %d: %s", mismatches[m].field, r, mismatches[m].odd,
                msg);
      /* Every rank describes the disagreement alike. */
      const char *what = strstr(msg, "do not match: ");
      cr_expect_not_null(what, "rank %d: %s", r, msg);
      if (what && first)
        cr_expect_str_eq(what, first, "%s mismatch: rank %d says '%s', rank 0 "
                         "'%s'", mismatches[m].field, r, what, first);
      else if (what)
        first = what;
    }
  }
  fprintf(stderr, "faults: RINGCC_CHECK over %s, e.g.: %s\n",
          tcp ? "TCP" : "shared memory", a->rank[1].message[MM_COLL]);
  h_shared_free(a, sizeof *a);
}

Test(faults, check_mismatches_shm, .timeout = 40) { check_mismatches(0); }
Test(faults, check_mismatches_tcp, .timeout = 40) { check_mismatches(1); }

/* ---- the one-shot over the board: ranks that disagree on the count ---------------- */

/* Without RINGCC_CHECK, rank 1 gives one element more. Every rank reads
 * every board, so every rank fails at once, naming a rank and both sizes,
 * instead of reading bytes the other never wrote. */
typedef struct {
  struct {
    int code;
    double took_s;
    char message[MSG_LEN];
  } rank[3];
} board_area_t;

static int board_mismatch_rank(int rank, int n, const ringcc_unique_id_t *id,
                               void *arg) {
  board_area_t *a = arg;
  ringcc_config_t cfg = config_with(10000, 0);
  cfg.algo = RINGCC_ALGO_DIRECT;
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  float in[3] = {1, 2, 3}, out[3];
  double t0 = h_now_s();
  a->rank[rank].code = (int)ringcc_allreduce(in, out, rank == 1 ? 3 : 2,
                                             RINGCC_FLOAT32, RINGCC_SUM, comm,
                                             NULL);
  a->rank[rank].took_s = h_now_s() - t0;
  snprintf(a->rank[rank].message, MSG_LEN, "%s", ringcc_comm_last_error(comm));
  ringcc_comm_destroy(comm);
  return 0;
}

Test(faults, one_shot_board_count_mismatch, .timeout = 40) {
  enum { N = 3 };
  board_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  int logfd = log_open(), err_fd[N] = {logfd, logfd, logfd};
  job_t j;
  job_start(&j, N, board_mismatch_rank, a, err_fd);
  bool done = job_wait(&j, 30);
  if (!done)
    log_dump("one-shot count mismatch", logfd);
  close(logfd);
  cr_assert(done, "the ranks hung");
  expect_all_exited_0(&j, "one-shot count mismatch");
  for (int r = 0; r < N; r++) {
    char want[96];
    snprintf(want, sizeof want, "rank %d gave %d bytes to the one-shot where "
             "%d were expected", r == 1 ? 0 : 1, r == 1 ? 8 : 12,
             r == 1 ? 12 : 8);
    cr_expect_eq(a->rank[r].code, RINGCC_ERR_INVALID_USAGE,
                 "rank %d: code %d, expected RINGCC_ERR_INVALID_USAGE: %s", r,
                 a->rank[r].code, a->rank[r].message);
    cr_expect_not_null(strstr(a->rank[r].message, want),
                       "rank %d: the error lacks '%s': %s", r, want,
                       a->rank[r].message);
    cr_expect_lt(a->rank[r].took_s, 5.0, "rank %d failed after %.2f s", r,
                 a->rank[r].took_s);
  }
  h_shared_free(a, sizeof *a);
}

/* ---- ringcc_comm_abort from another thread ---------------------------------------------- */

typedef struct {
  int tcp;
  int aborted; /* rank 0 is done (atomic) */
  int call_code, report_ok;
  double abort_s, call_return_s, idle_abort_s;
} abort_area_t;

#define ABORT_COUNT (1 << 16)

static int abort_rank(int rank, int n, const ringcc_unique_id_t *id, void *arg) {
  abort_area_t *a = arg;
  ringcc_config_t cfg = config_with(20000, a->tcp);
  ringcc_comm_t comm;
  if (ringcc_comm_init(&comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  if (rank != 0) { /* never calls; leaves once rank 0 aborted */
    if (!wait_counter(&a->aborted, 1, 20))
      return h_fail_rank(rank, "rank 0 never finished");
    double t0 = h_now_s();
    ringcc_comm_abort(comm); /* idle: no call in flight */
    a->idle_abort_s = h_now_s() - t0;
    return 0;
  }
  int32_t *buf = calloc(ABORT_COUNT, sizeof *buf);
  call_thread_t t = {comm, buf, ABORT_COUNT, RINGCC_SUCCESS};
  pthread_t tid;
  char report[2048];
  if (pthread_create(&tid, NULL, allreduce_thread, &t) != 0)
    return h_fail_rank(rank, "pthread_create failed");
  a->report_ok = report_until_waiting(comm, report, sizeof report);
  double t0 = h_now_s();
  ringcc_comm_abort(comm);
  a->abort_s = h_now_s() - t0;
  pthread_join(tid, NULL);
  a->call_return_s = h_now_s() - t0;
  a->call_code = (int)t.result;
  __atomic_store_n(&a->aborted, 1, __ATOMIC_RELEASE);
  free(buf);
  return 0;
}

static void abort_blocked(int tcp) {
  abort_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->tcp = tcp;
  int logfd = log_open(), err_fd[2] = {logfd, logfd};
  job_t j;
  job_start(&j, 2, abort_rank, a, err_fd);
  bool done = job_wait(&j, 30);
  char *log = log_read(logfd);
  close(logfd);
  cr_assert(done, "the ranks hung; their log:\n%s", log);
  cr_expect(strstr(log, "aborted while waiting for"), "rank 0 did not log the "
            "abort of its blocked call:\n%s", log);
  free(log);
  expect_all_exited_0(&j, "abort");
  cr_expect(a->report_ok, "the allreduce never blocked");
  cr_expect_eq(a->call_code, RINGCC_ERR_ABORTED,
               "the blocked allreduce returned %d (%s), expected "
               "RINGCC_ERR_ABORTED", a->call_code,
               ringcc_strerror((ringcc_result_t)a->call_code));
  cr_expect_lt(a->abort_s, 5.0, "ringcc_comm_abort took %.3f s", a->abort_s);
  cr_expect_lt(a->call_return_s, 5.0, "the blocked call returned %.3f s after "
               "the abort", a->call_return_s);
  cr_expect_lt(a->idle_abort_s, 5.0, "aborting the peer's idle communicator "
               "took %.3f s", a->idle_abort_s);
  fprintf(stderr, "faults: ringcc_comm_abort over %s: returned in %.3f s, the "
          "blocked call %.3f s after it began; idle abort %.3f s\n",
          tcp ? "TCP" : "shared memory", a->abort_s, a->call_return_s,
          a->idle_abort_s);
  h_shared_free(a, sizeof *a);
}

Test(faults, abort_blocked_call_shm, .timeout = 30) { abort_blocked(0); }
Test(faults, abort_blocked_call_tcp, .timeout = 30) { abort_blocked(1); }

/* ---- a failed call gives the user's buffers back ------------------------------------- */

/* Over TCP a collective sends straight from the user's buffers. When the
 * call fails with sends still on their way (here: the peer does not read, so
 * its slots and the sockets fill up, and the broadcast's deadline passes),
 * the sends must leave from copies, because the user may change or free the
 * buffers as soon as the call returns. Rank 0 overwrites its buffer at
 * once; then rank 1 joins the broadcast and takes what arrives until it
 * gives up too: every element it got must be what rank 0 sent, not the
 * bytes written over it. */
#define INFLIGHT_COUNT (16u << 20) /* floats: 64 MiB, far more than fits */
#define INFLIGHT_UNSET -1.0f

typedef struct {
  int gave_up; /* rank 0's call returned (atomic) */
  int done;    /* rank 1's call returned (atomic) */
  int code[2];
  double took_s;
  size_t got, wrong, first_wrong;
  char message[2][MSG_LEN];
} inflight_area_t;

static float inflight_value(size_t i) { return (float)(i % 1000); }

/* Both ranks: a TCP communicator with a 1 s deadline, INFO logs, and the
 * 64 MiB buffer (rank 0's values, or unset on rank 1). 0, or the failure. */
static int inflight_setup(int rank, int n, const ringcc_unique_id_t *id,
                          ringcc_comm_t *comm, float **buf) {
  setenv("RINGCC_DEBUG", "INFO", 1);
  ringcc_config_t cfg = config_with(1000, 1);
  if (ringcc_comm_init(comm, n, id, rank, &cfg) != RINGCC_SUCCESS)
    return h_fail_rank(rank, "init: %s", ringcc_comm_last_error(NULL));
  *buf = malloc(INFLIGHT_COUNT * sizeof **buf);
  if (*buf == NULL)
    return h_fail_rank(rank, "out of memory");
  for (size_t i = 0; i < INFLIGHT_COUNT; i++)
    (*buf)[i] = rank == 0 ? inflight_value(i) : INFLIGHT_UNSET;
  return 0;
}

/* The broadcast from rank 0: its result into the area; how long it took. */
static double inflight_bcast(inflight_area_t *a, int rank, ringcc_comm_t comm,
                             float *buf) {
  double t0 = h_now_s();
  ringcc_result_t r =
      ringcc_bcast(buf, INFLIGHT_COUNT, RINGCC_FLOAT32, 0, comm, NULL);
  a->code[rank] = (int)r;
  snprintf(a->message[rank], MSG_LEN, "%s", ringcc_comm_last_error(comm));
  return h_now_s() - t0;
}

static int inflight_rank(int rank, int n, const ringcc_unique_id_t *id,
                         void *arg) {
  inflight_area_t *a = arg;
  ringcc_comm_t comm;
  float *buf;
  int rc = inflight_setup(rank, n, id, &comm, &buf);
  if (rc != 0)
    return rc;
  /* Rank 1 stays silent (alive) until rank 0 gave up and took its buffer
   * back. The root of a broadcast only sends: many messages are out when
   * its peer stops taking them. */
  if (rank == 1 && !wait_counter(&a->gave_up, 1, 30))
    return h_fail_rank(rank, "rank 0 never gave up");
  double took = inflight_bcast(a, rank, comm, buf);
  if (rank == 0) {
    a->took_s = took;
    memset(buf, 0xff, INFLIGHT_COUNT * sizeof *buf); /* the user's again */
    __atomic_store_n(&a->gave_up, 1, __ATOMIC_RELEASE);
    wait_counter(&a->done, 1, 30); /* the proxy sends meanwhile */
    free(buf);
  } else {
    for (size_t i = 0; i < INFLIGHT_COUNT; i++) {
      if (buf[i] == INFLIGHT_UNSET)
        continue;
      if (buf[i] != inflight_value(i) && a->wrong++ == 0)
        a->first_wrong = i;
      a->got++;
    }
    free(buf);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
  }
  ringcc_comm_destroy(comm);
  return 0;
}

/* Runs fn on 2 ranks over a fresh shared area (their logs go to err_fd):
 * rank quitter's broadcast must time out after its 1 s deadline, and the
 * other rank's, which joins after that, must fail too. */
static inflight_area_t *run_inflight(rank_fn fn, int err_fd[2],
                                     const char *what, int quitter) {
  inflight_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  err_fd[0] = log_open();
  err_fd[1] = log_open();
  job_t j;
  job_start(&j, 2, fn, a, err_fd);
  cr_assert(job_wait(&j, 45), "the ranks hung");
  expect_all_exited_0(&j, what);
  int q = quitter, other = 1 - quitter;
  cr_expect_eq(a->code[q], RINGCC_ERR_TIMEOUT, "rank %d's bcast returned %d: "
               "%s", q, a->code[q], a->message[q]);
  cr_expect(a->took_s > 0.9 && a->took_s < 10.0,
            "rank %d gave up after %.2f s (timeout 1 s)", q, a->took_s);
  cr_expect_neq(a->code[other], RINGCC_SUCCESS, "rank %d's bcast succeeded, "
                "though rank %d gave up on it", other, q);
  return a;
}

/* The line of log around at (a match inside it): its start, and its length
 * as the return value. */
static int line_around(const char *log, const char *at, const char **start) {
  const char *line = at, *end = strchr(at, '\n');
  while (line > log && line[-1] != '\n')
    line--;
  *start = line;
  return (int)(end != NULL ? end - line : (long)strlen(line));
}

Test(faults, failed_call_gives_the_buffers_back_tcp, .timeout = 60) {
  int err_fd[2];
  inflight_area_t *a = run_inflight(inflight_rank, err_fd, "in flight", 0);
  char *log = log_read(err_fd[0]);
  cr_expect_eq(a->wrong, 0, "rank 1 got %zu of %zu elements wrong (the first: "
               "element %zu): sent from memory the user had taken back",
               a->wrong, a->got, a->first_wrong);
  const char *copied = strstr(log, "from the user's buffers copied to their "
                                   "slots after the call failed");
  cr_expect_not_null(copied, "rank 0 did not log that it copied its sends "
                     "still in flight:\n%s", log);
  if (copied != NULL) {
    const char *line;
    int len = line_around(log, copied, &line);
    fprintf(stderr, "faults: a failed call with sends in flight: %.*s; rank 1 "
            "then got %zu elements, all right\n", len, line, a->got);
  }
  free(log);
  close(err_fd[0]);
  close(err_fd[1]);
  h_shared_free(a, sizeof *a);
}

/* Over TCP a receive whose bytes go to the user's buffer unchanged lands
 * there straight from the socket, posted ahead of the data. When the call
 * fails before the data came (here: rank 1's broadcast times out because
 * rank 0 has not called it yet), those receives must go back to their
 * slots: rank 1 then owns its buffer again and fills it, rank 0 broadcasts
 * into the void until it gives up, and rank 1's buffer must hold nothing of
 * what rank 0 sent. */
static int landing_rank(int rank, int n, const ringcc_unique_id_t *id,
                        void *arg) {
  inflight_area_t *a = arg;
  ringcc_comm_t comm;
  float *buf;
  int rc = inflight_setup(rank, n, id, &comm, &buf);
  if (rc != 0)
    return rc;
  if (rank == 0 && !wait_counter(&a->done, 1, 30)) /* rank 1 gave up */
    return h_fail_rank(rank, "rank 1 never gave up");
  double took = inflight_bcast(a, rank, comm, buf);
  if (rank == 1) {
    a->took_s = took;
    for (size_t i = 0; i < INFLIGHT_COUNT; i++) /* the user's again */
      buf[i] = INFLIGHT_UNSET;
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    wait_counter(&a->gave_up, 1, 30); /* rank 0 sends meanwhile */
    usleep(200 * 1000);               /* and the proxy takes what came */
    for (size_t i = 0; i < INFLIGHT_COUNT; i++)
      if (buf[i] != INFLIGHT_UNSET && a->wrong++ == 0)
        a->first_wrong = i;
  } else {
    __atomic_store_n(&a->gave_up, 1, __ATOMIC_RELEASE);
  }
  free(buf);
  ringcc_comm_destroy(comm);
  return 0;
}

Test(faults, failed_receive_gives_the_buffer_back_tcp, .timeout = 60) {
  int err_fd[2];
  inflight_area_t *a = run_inflight(landing_rank, err_fd, "landing", 1);
  char *log = log_read(err_fd[1]);
  cr_expect_eq(a->wrong, 0, "%zu elements of rank 1's buffer were written "
               "after its call had failed (the first: element %zu)", a->wrong,
               a->first_wrong);
  const char *moved = strstr(log, "landing in the user's buffers moved to "
                                  "their slots after the call failed");
  cr_expect_not_null(moved, "rank 1 did not log that it moved its receives "
                     "landing in its buffer:\n%s", log);
  if (moved != NULL) {
    const char *line;
    int len = line_around(log, moved, &line);
    fprintf(stderr, "faults: a failed call with receives landing in the "
            "user's buffer: %.*s; nothing written there afterwards\n", len,
            line);
  }
  free(log);
  close(err_fd[0]);
  close(err_fd[1]);
  h_shared_free(a, sizeof *a);
}

/* ---- ids that are not what they claim, strangers at the rendezvous -------------------- */

static void expect_bad_id(const ringcc_unique_id_t *id, const char *what,
                          const char *reason) {
  /* A 60 s deadline: refused at once is then told apart from waited for
   * the deadline however loaded the machine is. */
  ringcc_config_t cfg = config_with(60000, 0);
  ringcc_comm_t comm = (ringcc_comm_t)&cfg; /* must come back NULL */
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, 2, id, 0, &cfg);
  double took = h_now_s() - t0;
  const char *msg = ringcc_comm_last_error(NULL);
  cr_expect_eq(r, RINGCC_ERR_INVALID_ARGUMENT, "%s: code %d: %s", what, (int)r,
               msg);
  cr_expect_null(comm, "%s: *comm was not cleared", what);
  cr_expect_lt(took, 10.0, "%s: refused only after %.3f s (deadline 60 s)",
               what, took);
  cr_expect(strstr(msg, reason) != NULL, "%s: the message lacks '%s': %s",
            what, reason, msg);
}

Test(faults, init_refuses_garbage_ids, .timeout = 20) {
  ringcc_unique_id_t id, good;
  char err[RCC_ERRLEN], hp[64];
  uint8_t secret[16];

  expect_bad_id(NULL, "a NULL id", "argument 'id' is NULL");
  memset(&id, 0, sizeof id);
  expect_bad_id(&id, "an all-zero id", "bad magic");
  for (int k = 0; k < 200; k++) {
    for (size_t i = 0; i < sizeof id.internal; i += 8) {
      uint64_t h = h_hash3(0x6964, (uint64_t)k, i);
      memcpy(id.internal + i, &h, 8);
    }
    if (k % 2) /* half of them with the right magic: the checksum catches it */
      memcpy(id.internal, "RCCI", 4);
    expect_bad_id(&id, "a random id", "is not a ringcc_unique_id_t");
  }
  /* A good id made for a port nobody listens on, then damaged. */
  snprintf(hp, sizeof hp, "127.0.0.1:%d", 1);
  for (int i = 0; i < 16; i++)
    secret[i] = (uint8_t)(i * 17 + 1);
  cr_assert_eq(rcc_bootstrap_id_from_root(&good, hp, secret, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  id = good;
  memset(id.internal + 64, 0, sizeof id.internal - 64);
  expect_bad_id(&id, "an id cut after 64 bytes", "bad checksum");
  id = good;
  id.internal[40] ^= 0x20; /* a bit of the secret */
  expect_bad_id(&id, "an id with one bit of its secret flipped", "bad checksum");
  id = good;
  id.internal[sizeof id.internal - 1] ^= 1;
  expect_bad_id(&id, "an id with its last byte changed", "bad checksum");
}

/* A well-formed id whose rendezvous is not there: a timeout at the deadline
 * that names the address. */
Test(faults, init_with_nobody_at_the_rendezvous, .timeout = 20) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN], hp[64];
  int fd;
  uint8_t secret[16] = {7};
  cr_assert_eq(rcc_socket_parse_host_port("127.0.0.1:1", &a, err, sizeof err),
               0, "%s", err);
  rcc_socket_addr_set_port(&a, 0);
  cr_assert_eq(rcc_socket_listen(&a, &fd, &a, err, sizeof err), 0, "%s", err);
  close(fd); /* a port that was free a moment ago */
  snprintf(hp, sizeof hp, "127.0.0.1:%d", rcc_socket_addr_port(&a));
  ringcc_unique_id_t id;
  cr_assert_eq(rcc_bootstrap_id_from_root(&id, hp, secret, err, sizeof err), 0);
  ringcc_config_t cfg = config_with(1000, 0);
  ringcc_comm_t comm;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, 2, &id, 1, &cfg);
  double took = h_now_s() - t0;
  const char *msg = ringcc_comm_last_error(NULL);
  cr_expect_eq(r, RINGCC_ERR_TIMEOUT, "code %d: %s", (int)r, msg);
  cr_expect(took > 0.9 && took < 10.0, "gave up after %.2f s (timeout 1 s)",
            took);
  cr_expect(strstr(msg, hp) != NULL, "the message does not name %s: %s", hp,
            msg);
}

/* The processes of the stranger test: ranks 0..2 are real, then an
 * impostor (another secret) and a late-comer (after the rendezvous). */
enum { ID_REAL = 3, ID_IMPOSTOR = 3, ID_LATE = 4 };

typedef struct {
  int strangers_in; /* the parent's strangers are connected (atomic) */
  int formed;       /* real ranks whose communicator is up (atomic) */
  int impostor_done; /* the impostor's init returned (atomic) */
  struct {
    int code;
    double took_s;
    char message[MSG_LEN];
  } who[5];
} stranger_area_t;

/* The id of the same rendezvous with another secret. */
static void impostor_id(const ringcc_unique_id_t *real, ringcc_unique_id_t *out,
                        char *hp, size_t hplen) {
  struct sockaddr_storage root;
  uint8_t secret[16];
  char err[RCC_ERRLEN];
  if (rcc_bootstrap_id_decode(real->internal, sizeof real->internal, &root,
                              secret, err, sizeof err) != RINGCC_SUCCESS)
    _exit(90);
  rcc_socket_addr_str(&root, hp, hplen);
  secret[3] ^= 0x5a;
  if (rcc_bootstrap_id_from_root(out, hp, secret, err, sizeof err) !=
      RINGCC_SUCCESS)
    _exit(91);
}

static int stranger_rank(int who, int nprocs, const ringcc_unique_id_t *id,
                         void *arg) {
  stranger_area_t *a = arg;
  (void)nprocs;
  if (!wait_counter(&a->strangers_in, 1, 20))
    return h_fail_rank(who, "the strangers never came");
  /* The impostor gets a 30 s deadline: turned away at once is then told
   * apart from gave up at its deadline. */
  ringcc_config_t cfg =
      config_with(who < ID_REAL ? 10000 : who == ID_IMPOSTOR ? 30000 : 1500, 0);
  ringcc_unique_id_t use = *id;
  int rank = who < ID_REAL ? who : who == ID_IMPOSTOR ? 2 : 1;
  char hp[80];
  if (who == ID_IMPOSTOR)
    impostor_id(id, &use, hp, sizeof hp);
  if (who == ID_LATE && !wait_counter(&a->formed, ID_REAL, 20))
    return h_fail_rank(who, "the real ranks never formed their communicator");
  /* The last real rank joins only after the impostor tried: otherwise, on a
   * quiet machine, the rendezvous can be over (its port closed) before the
   * impostor arrives, and it would be refused for the wrong reason. */
  if (who == ID_REAL - 1 && !wait_counter(&a->impostor_done, 1, 20))
    return h_fail_rank(who, "the impostor never finished its init");
  ringcc_comm_t comm = NULL;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, ID_REAL, &use, rank, &cfg);
  a->who[who].took_s = h_now_s() - t0;
  a->who[who].code = (int)r;
  snprintf(a->who[who].message, MSG_LEN, "%s", ringcc_comm_last_error(NULL));
  if (who == ID_IMPOSTOR)
    __atomic_store_n(&a->impostor_done, 1, __ATOMIC_RELEASE);
  if (who >= ID_REAL) {
    if (r == RINGCC_SUCCESS)
      ringcc_comm_destroy(comm);
    return 0;
  }
  if (r != RINGCC_SUCCESS)
    return h_fail_rank(who, "init: %s", a->who[who].message);
  __atomic_fetch_add(&a->formed, 1, __ATOMIC_ACQ_REL);
  int32_t got[4099], expect[4099];
  h_ctx_t ctx = {.rank = rank, .nranks = ID_REAL};
  h_fill_input(RINGCC_INT32, RINGCC_SUM, rank, 0, 3, got, 4099);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, ID_REAL, 0, 3, expect, 4099);
  r = ringcc_allreduce(got, got, 4099, RINGCC_INT32, RINGCC_SUM, comm, NULL);
  int rc = r != RINGCC_SUCCESS
               ? h_fail_rank(who, "allreduce: %s", ringcc_comm_last_error(comm))
               : !h_check_elems(&ctx, "allreduce", RINGCC_INT32, got, expect,
                                4099);
  ringcc_comm_destroy(comm);
  return rc;
}

static int stranger_connect(const struct sockaddr_storage *root) {
  char err[RCC_ERRLEN];
  int fd = -1;
  cr_assert_eq(rcc_socket_connect(root, rcc_deadline_after_ms(2000), &fd, err,
                                  sizeof err), 0, "%s", err);
  return fd;
}

/* Strangers at the rendezvous (silent, babbling, public openings left
 * unanswered or followed by a made-up proof),
 * an impostor with a valid-looking id but another secret,
 * and a late-comer once the rendezvous is over: each gets a clear error or
 * is dropped, and the three real ranks still form their communicator. */
Test(faults, strangers_and_impostors_at_the_rendezvous, .timeout = 40) {
  stranger_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  int logfd = log_open();
  int err_fd[5] = {logfd, logfd, logfd, logfd, logfd};
  job_t j;
  job_start(&j, 5, stranger_rank, a, err_fd);

  struct sockaddr_storage root;
  uint8_t secret[16], junk[300];
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_bootstrap_id_decode(j.id.internal, sizeof j.id.internal,
                                       &root, secret, err, sizeof err), 0);
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (uint8_t)(h_mix64(i) >> 7);
  /* A handshake's opening is public (magic, version 2, purpose 1, a nonce);
   * what follows the challenge needs the secret. */
  uint8_t opening[RCC_BOOT_OPEN_BYTES] = {0x52, 0x43, 0x43, 0x41, 0, 2, 0, 1};
  uint8_t answer[RCC_BOOT_PROOF_BYTES + RCC_BOOT_HELLO_BYTES];
  memcpy(answer, junk, sizeof answer); /* a made-up proof */
  answer[RCC_BOOT_PROOF_BYTES] = 0x52; /* then a hello's magic */
  (void)secret;
  int fds[8], nfd = 0;
  fds[nfd++] = stranger_connect(&root); /* silent */
  fds[nfd] = stranger_connect(&root);
  (void)send(fds[nfd++], junk, 5, MSG_NOSIGNAL);
  fds[nfd] = stranger_connect(&root);
  (void)send(fds[nfd++], junk, sizeof junk, MSG_NOSIGNAL);
  fds[nfd] = stranger_connect(&root); /* an opening, then gone */
  (void)send(fds[nfd], opening, sizeof opening, MSG_NOSIGNAL);
  close(fds[nfd]);
  fds[nfd] = stranger_connect(&root); /* an opening, then silent */
  (void)send(fds[nfd++], opening, sizeof opening, MSG_NOSIGNAL);
  fds[nfd] = stranger_connect(&root); /* an opening and a wrong proof */
  (void)send(fds[nfd], opening, sizeof opening, MSG_NOSIGNAL);
  (void)send(fds[nfd++], answer, sizeof answer, MSG_NOSIGNAL);
  close(stranger_connect(&root)); /* connects and leaves */
  double t0 = h_now_s();
  __atomic_store_n(&a->strangers_in, 1, __ATOMIC_RELEASE);

  bool done = job_wait(&j, 30);
  double took = h_now_s() - t0;
  for (int i = 0; i < nfd; i++)
    close(fds[i]);
  if (!done)
    log_dump("strangers", logfd);
  cr_assert(done, "the processes hung");
  expect_all_exited_0(&j, "strangers");
  /* Each real rank got in well under the 5 s a stranger is given to finish
   * its hello: nobody waited for the strangers. */
  for (int r = 0; r < ID_REAL; r++) {
    cr_expect_eq(a->who[r].code, RINGCC_SUCCESS, "real rank %d: %s", r,
                 a->who[r].message);
    cr_expect_lt(a->who[r].took_s, 4.5, "real rank %d's init took %.2f s", r,
                 a->who[r].took_s);
  }
  cr_expect_lt(took, 20, "the run took %.2f s", took);
  const char *imp = a->who[ID_IMPOSTOR].message;
  cr_expect_eq(a->who[ID_IMPOSTOR].code, RINGCC_ERR_NETWORK,
               "the impostor got code %d: %s", a->who[ID_IMPOSTOR].code, imp);
  cr_expect(strstr(imp, "wrong secret") != NULL,
            "the impostor's error does not suggest a wrong secret: %s", imp);
  cr_expect_lt(a->who[ID_IMPOSTOR].took_s, 10.0,
               "the impostor was turned away only after %.2f s (deadline 30 s)",
               a->who[ID_IMPOSTOR].took_s);
  const char *late = a->who[ID_LATE].message;
  cr_expect(a->who[ID_LATE].code == RINGCC_ERR_TIMEOUT ||
                a->who[ID_LATE].code == RINGCC_ERR_NETWORK,
            "the late-comer got code %d: %s", a->who[ID_LATE].code, late);
  cr_expect(strstr(late, "rendezvous") != NULL,
            "the late-comer's error does not mention the rendezvous: %s", late);
  cr_expect_lt(a->who[ID_LATE].took_s, 10.0, "the late-comer gave up after "
               "%.2f s (timeout 1.5 s)", a->who[ID_LATE].took_s);
  fprintf(stderr, "faults: impostor (%.3f s): %s\nfaults: late-comer (%.2f s): "
          "%s\n", a->who[ID_IMPOSTOR].took_s, imp, a->who[ID_LATE].took_s,
          late);
  close(logfd);
  h_shared_free(a, sizeof *a);
}
