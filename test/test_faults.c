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
 *
 * One program, two sources: from RINGCC_CHECK on, the tests are in
 * test/parts/faults_calls.c; the helpers both use are in test_faults.h.
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

#include "test_faults.h"

/* ---- forked ranks ------------------------------------------------------------ */

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
void job_start(job_t *j, int n, rank_fn fn, void *arg,
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
bool job_wait(job_t *j, double timeout_s) {
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

void expect_all_exited_0(const job_t *j, const char *what) {
  char st[96];
  for (int r = 0; r < j->n; r++)
    cr_expect(WIFEXITED(j->status[r]) && WEXITSTATUS(j->status[r]) == 0,
              "%s: rank %d %s", what, r,
              describe_status(j->status[r], st, sizeof st));
}

/* ---- logs, /dev/shm, zombies ------------------------------------------------------ */

/* An anonymous file for a rank's stderr. */
int log_open(void) {
  FILE *f = tmpfile();
  cr_assert_not_null(f, "tmpfile: %s", strerror(errno));
  int fd = dup(fileno(f));
  fclose(f);
  return fd;
}

/* The whole file (malloc'd, NUL-terminated). */
char *log_read(int fd) {
  struct stat sb;
  cr_assert_eq(fstat(fd, &sb), 0);
  char *text = malloc((size_t)sb.st_size + 1);
  cr_assert_not_null(text);
  ssize_t got = pread(fd, text, (size_t)sb.st_size, 0);
  text[got > 0 ? got : 0] = '\0';
  return text;
}

void log_dump(const char *title, int fd) {
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

ringcc_config_t config_with(int64_t timeout_ms, int tcp) {
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
bool wait_counter(int *counter, int want, double timeout_s) {
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

void *allreduce_thread(void *p) {
  call_thread_t *t = p;
  t->result = ringcc_allreduce(t->buf, t->buf, t->count, RINGCC_INT32,
                               RINGCC_SUM, t->comm, NULL);
  return NULL;
}

/* Polls ringcc_comm_report until it shows a collective waiting. */
bool report_until_waiting(ringcc_comm_t comm, char *buf, size_t len) {
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
