/*
 * test_launch.c - ringcc_comm_init_env under real launchers and launcher-style
 * environments.
 *
 * The rank program is this test binary itself: a launcher starts
 * /proc/self/exe with RCC_TEST_LAUNCH_CHILD=1 and --filter=launch_child/run,
 * so each rank runs only the launch_child test, which calls
 * ringcc_comm_init_env, checks rank and size against the launcher's variables,
 * runs an allreduce and an allgather, and leaves a marker file
 * ($RCC_TEST_LAUNCH_DIR/rank.R) so that the parent knows every rank really
 * ran (a skipped child test also exits 0). In a normal run launch_child/run
 * is skipped.
 *
 * (a) build/bin/ringcc-run (RINGCC_BIN_DIR) -np 1, 3, 4;
 * (b) Open MPI's mpirun -np 3 (skipped when mpirun is missing);
 * (c) forked children given torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT),
 *     Slurm (SLURM_PROCID, SLURM_NTASKS), PMI and Open MPI variables by the
 *     test itself, and RINGCC_* winning over all of them; nested launchers
 *     (torchrun's RANK over Slurm's, hydra's PMI_RANK over Slurm's), and
 *     srun's derived rendezvous (node list, job and step id);
 * (d) the real torchrun (standalone and --rdzv-backend c10d; found as
 *     $RINGCC_TORCHRUN, $PY_VENV/bin/torchrun, build/venv/bin/torchrun or on
 *     PATH, else skipped): its children meet through torchrun's TCPStore;
 *     mpirun and MPICH's mpiexec.hydra without RINGCC_ROOT (derived);
 * (e) the real srun (suite launch_slurm): only when RCC_TEST_SLURM=1, which
 *     scripts/slurm-check.sh sets after starting slurmctld and slurmd in a
 *     temporary folder (make slurm-check): srun -n 3, srun --mpi=pmi2, and
 *     srun -n 1 torchrun --nproc-per-node 3 (each child its torchrun RANK);
 * (f) what a missing rendezvous says, and Slurm node-list parsing.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "launcher.h"

extern char **environ;

/* Every variable ringcc_comm_init_env may read for rank, size or rendezvous;
 * cleared before each launch so that the test's own environment (perhaps
 * itself a launched job) cannot leak in. */
static const char *const launcher_vars[] = {
    "RINGCC_RANK",  "RINGCC_NRANKS", "RINGCC_ROOT",  "RINGCC_SECRET",
    "RINGCC_ROOT_HANDOFF",
    "RINGCC_LOCAL_RANK", "RINGCC_LOCAL_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMI_LOCAL_RANK",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID",
    "SLURM_JOB_ID", "SLURM_STEP_ID",
    "SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
    "SLURMD_NODENAME", "SLURM_STEPID", "SLURM_LOCALID",
    "PMI_PORT", "PMI_FD", "PMI_ID", "PMI_JOBID", "MPI_LOCALNRANKS",
    "MPI_LOCALRANKID", "HYDI_CONTROL_FD", "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
    "MASTER_ADDR", "MASTER_PORT", NULL};

#define CHILD_ENV "RCC_TEST_LAUNCH_CHILD"
#define DIR_ENV "RCC_TEST_LAUNCH_DIR"
#define CHILD_FILTER "--filter=launch_child/run"
/* Set by the ringcc-run tests: the rendezvous port must be held before
 * init, and only rank 0 told where to get its socket (check_root_held). */
#define ROOT_FD_ENV "RCC_TEST_EXPECT_ROOT_HELD"

/* ---- the rank's side ---------------------------------------------------------- */

static bool env_int(const char *name, int *out) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0')
    return false;
  *out = atoi(s);
  return true;
}

/* Rank and size as the innermost launcher set them (docs/launch.md):
 * RINGCC_RANK; torchrun's RANK when its markers are there; Open MPI; PMI
 * unless srun set it to its own task numbers; Slurm; RANK. Written here apart
 * from the library's table, so that the two check each other. */
static const char *expected_rank_size(int *rank, int *size) {
  static const char *const pairs[][2] = {
      {"RINGCC_RANK", "RINGCC_NRANKS"},
      {"RANK", "WORLD_SIZE"}, /* torchrun: only with its markers */
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"RANK", "WORLD_SIZE"}};
  int slurm_rank, slurm_size, pmi_rank, pmi_size;
  bool srun_pmi = env_int("SLURM_PROCID", &slurm_rank) &&
                  env_int("SLURM_NTASKS", &slurm_size) &&
                  env_int("PMI_RANK", &pmi_rank) &&
                  env_int("PMI_SIZE", &pmi_size) && slurm_rank == pmi_rank &&
                  slurm_size == pmi_size;
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    if (i == 1 && !getenv("TORCHELASTIC_RUN_ID") && !getenv("GROUP_RANK"))
      continue;
    if (i == 3 && srun_pmi)
      continue;
    if (env_int(pairs[i][0], rank) && env_int(pairs[i][1], size))
      return pairs[i][0];
  }
  *rank = -1;
  *size = -1;
  return NULL;
}

/* Under ringcc-run, before init: the rendezvous port is held already (the
 * launcher opened its listening socket before starting the ranks, so binding
 * it here must fail: nobody can take it in between), rank 0 is told where to
 * ask for that socket (RINGCC_ROOT_HANDOFF), and no other rank is. */
static int check_root_held(int rank) {
  const char *v = getenv("RINGCC_ROOT_HANDOFF");
  if (rank != 0 && v != NULL)
    return h_fail_rank(rank, "RINGCC_ROOT_HANDOFF=%s is set on rank %d; only "
                       "rank 0 serves the rendezvous", v, rank);
  if (rank == 0 && v == NULL)
    return h_fail_rank(0, "rank 0 has no RINGCC_ROOT_HANDOFF: the launcher "
                       "does not hand over the rendezvous's listening socket");
  const char *root = getenv("RINGCC_ROOT");
  const char *colon = root ? strrchr(root, ':') : NULL;
  if (colon == NULL)
    return h_fail_rank(rank, "no RINGCC_ROOT");
  int one = 1, other = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)atoi(colon + 1)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  setsockopt(other, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int bound = bind(other, (struct sockaddr *)&a, sizeof a) == 0 &&
              listen(other, 4) == 0;
  int e = errno;
  close(other);
  if (bound)
    return h_fail_rank(rank, "the rendezvous port %s was free to take "
                       "before init", colon + 1);
  if (e != EADDRINUSE)
    return h_fail_rank(rank, "binding the rendezvous port: %s", strerror(e));
  return 0;
}

/* init_env, check rank/size, allreduce, allgather, marker file. */
static int launched_rank(void) {
  int want_rank, want_size;
  const char *from = expected_rank_size(&want_rank, &want_size);
  if (from == NULL)
    return h_fail_rank(-1, "launched rank: no rank variables in the environment");
  if (getenv(ROOT_FD_ENV) != NULL && check_root_held(want_rank) != 0)
    return 1;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 40000;
  ringcc_comm_t comm = NULL;
  ringcc_result_t r = ringcc_comm_init_env(&comm, &cfg);
  if (r != RINGCC_SUCCESS)
    return h_fail_rank(want_rank, "ringcc_comm_init_env (%s=%d of %d) returned "
                       "%d (%s): %s", from, want_rank, want_size, (int)r,
                       ringcc_strerror(r), ringcc_comm_last_error(NULL));
  int rank = -1, size = -1, rc = 0;
  ringcc_comm_rank(comm, &rank);
  ringcc_comm_size(comm, &size);
  if (rank != want_rank || size != want_size)
    rc = h_fail_rank(want_rank, "ringcc_comm_init_env gave rank %d of %d, "
                     "the environment (%s) says %d of %d", rank, size, from,
                     want_rank, want_size);
  enum { COUNT = 1031 };
  static int64_t in[COUNT], out[COUNT];
  for (int i = 0; i < COUNT && rc == 0; i++)
    in[i] = (int64_t)(rank + 1) * 100000 + i;
  if (rc == 0) {
    r = ringcc_allreduce(in, out, COUNT, RINGCC_INT64, RINGCC_SUM, comm, NULL);
    if (r != RINGCC_SUCCESS)
      rc = h_fail_rank(rank, "allreduce returned %d (%s): %s", (int)r,
                       ringcc_strerror(r), ringcc_comm_last_error(comm));
  }
  int64_t n = size;
  for (int i = 0; i < COUNT && rc == 0; i++)
    if (out[i] != n * (n + 1) / 2 * 100000 + n * i)
      rc = h_fail_rank(rank, "allreduce int64 sum count=%d: element %d is "
                       "%lld, expected %lld", COUNT, i, (long long)out[i],
                       (long long)(n * (n + 1) / 2 * 100000 + n * i));
  int32_t me = rank, all[64];
  if (rc == 0 && size <= 64) {
    r = ringcc_allgather(&me, all, 1, RINGCC_INT32, comm, NULL);
    if (r != RINGCC_SUCCESS)
      rc = h_fail_rank(rank, "allgather returned %d (%s): %s", (int)r,
                       ringcc_strerror(r), ringcc_comm_last_error(comm));
    for (int i = 0; i < size && rc == 0; i++)
      if (all[i] != i)
        rc = h_fail_rank(rank, "allgather of ranks: position %d holds %d", i,
                         all[i]);
  }
  const char *dir = getenv(DIR_ENV);
  if (rc == 0 && dir != NULL) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (f == NULL || fprintf(f, "%d\n", size) < 0 || fclose(f) != 0)
      rc = h_fail_rank(rank, "cannot write %s: %s", path, strerror(errno));
  }
  r = ringcc_comm_destroy(comm);
  if (r != RINGCC_SUCCESS && rc == 0)
    rc = h_fail_rank(rank, "ringcc_comm_destroy returned %d (%s)", (int)r,
                     ringcc_strerror(r));
  return rc;
}

/* The child role: only when a launcher test started this binary. */
Test(launch_child, run, .timeout = 90) {
  if (getenv(CHILD_ENV) == NULL)
    cr_skip_test("the rank side of the launcher tests; runs only under them");
  cr_assert(launched_rank() == 0, "the launched rank failed (see above)");
}

/* ---- the launcher's side -------------------------------------------------- */

static const char *self_exe(void) {
  static char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
  path[n] = '\0';
  return path;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                getsockname(fd, (struct sockaddr *)&a, &len) == 0,
            "bind/getsockname: %s", strerror(errno));
  close(fd);
  return ntohs(a.sin_port);
}

static bool is_launcher_var(const char *entry) {
  for (int i = 0; launcher_vars[i]; i++) {
    size_t n = strlen(launcher_vars[i]);
    if (strncmp(entry, launcher_vars[i], n) == 0 && entry[n] == '=')
      return true;
  }
  /* Criterion's worker marker (BXFI_MAP): a child that inherits it takes
   * itself for a worker of this process and aborts. */
  if (strncmp(entry, "BXFI_", 5) == 0)
    return true;
  return strncmp(entry, CHILD_ENV "=", strlen(CHILD_ENV) + 1) == 0 ||
         strncmp(entry, DIR_ENV "=", strlen(DIR_ENV) + 1) == 0 ||
         strncmp(entry, ROOT_FD_ENV "=", strlen(ROOT_FD_ENV) + 1) == 0;
}

/* environ without launcher variables (nor Criterion's), plus extra
 * ("NAME=value"). */
static char **make_env(char *const *extra) {
  size_t n = 0, ne = 0;
  while (environ[n])
    n++;
  while (extra && extra[ne])
    ne++;
  char **env = calloc(n + ne + 1, sizeof *env);
  cr_assert(env != NULL);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!is_launcher_var(environ[i]))
      env[k++] = environ[i];
  for (size_t i = 0; i < ne; i++)
    env[k++] = extra[i];
  env[k] = NULL;
  return env;
}

typedef struct {
  char dir[64];
  char log[96];
  char dir_env[128];
} launch_dir_t;

static void make_launch_dir(launch_dir_t *d) {
  snprintf(d->dir, sizeof d->dir, "/tmp/rcc-launch-XXXXXX");
  cr_assert(mkdtemp(d->dir) != NULL, "mkdtemp: %s", strerror(errno));
  snprintf(d->log, sizeof d->log, "%s/output", d->dir);
  snprintf(d->dir_env, sizeof d->dir_env, DIR_ENV "=%s", d->dir);
}

static void remove_launch_dir(const launch_dir_t *d) {
  DIR *dp = opendir(d->dir);
  if (dp != NULL) {
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(dp)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(path, sizeof path, "%s/%s", d->dir, e->d_name);
      unlink(path);
    }
    closedir(dp);
  }
  rmdir(d->dir);
}

static void print_log(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  char line[1024];
  fprintf(stderr, "---- output of the launched job ----\n");
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fprintf(stderr, "---- end of output ----\n");
  fclose(f);
}

/* Runs argv with env in its own process group, output to log; kills the
 * group (SIGTERM, then SIGKILL) at the deadline. Returns the wait status, or
 * -1 on timeout. */
static int spawn_and_wait(char *const argv[], char *const env[],
                          const char *log, double timeout_s) {
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, STDIN_FILENO);
    execve(argv[0], argv, env);
    fprintf(stderr, "execve %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  double deadline = h_now_s() + timeout_s;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid)
      break;
    if (h_now_s() > deadline) {
      fprintf(stderr, "%s did not finish in %.0f s: killing it\n", argv[0],
              timeout_s);
      kill(-pid, SIGTERM);
      kill(pid, SIGTERM);
      for (int i = 0; i < 300 && waitpid(pid, &status, WNOHANG) != pid; i++)
        h_sleep_ms(10);
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    h_sleep_ms(20);
  }
  kill(-pid, SIGKILL); /* anything the job left behind in its group */
  return status;
}

/* Every rank 0..n-1 left a marker saying size n, and no other rank did. */
static void check_markers(const launch_dir_t *d, int nranks, const char *what) {
  for (int r = 0; r < nranks + 2; r++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/rank.%d", d->dir, r);
    FILE *f = fopen(path, "r");
    if (r >= nranks) {
      cr_assert(f == NULL, "%s: a rank %d ran, but only %d were started", what,
                r, nranks);
      continue;
    }
    if (f == NULL)
      print_log(d->log);
    cr_assert(f != NULL, "%s: rank %d of %d never finished its checks (no "
                         "marker file; was the child test skipped?)",
              what, r, nranks);
    int size = -1;
    cr_assert(fscanf(f, "%d", &size) == 1 && size == nranks,
              "%s: rank %d saw size %d, expected %d", what, r, size, nranks);
    fclose(f);
  }
}

static void expect_success(int status, const launch_dir_t *d, const char *what) {
  if (!(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0))
    print_log(d->log);
  cr_assert(status != -1, "%s: timed out (output above)", what);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "%s: exit status %d%s (output above)", what,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFSIGNALED(status) ? " (killed by a signal)" : "");
}

/* ---- (a) ringcc-run ------------------------------------------------------------ */

static void under_ringcc_run(int nranks) {
  const char *bindir = getenv("RINGCC_BIN_DIR");
  char launcher[PATH_MAX];
  snprintf(launcher, sizeof launcher, "%s/ringcc-run",
           bindir && *bindir ? bindir : "build/bin");
  cr_assert(access(launcher, X_OK) == 0,
            "%s is missing or not executable (set RINGCC_BIN_DIR, or build "
            "the tools first)", launcher);
  launch_dir_t d;
  make_launch_dir(&d);
  char np[16];
  snprintf(np, sizeof np, "%d", nranks);
  char *argv[] = {launcher, "-np", np, "--timeout", "60", "--",
                  (char *)self_exe(), CHILD_FILTER, "--jobs=1", NULL};
  char *extra[] = {CHILD_ENV "=1", d.dir_env, ROOT_FD_ENV "=1", NULL};
  char **env = make_env(extra);
  char what[64];
  snprintf(what, sizeof what, "ringcc-run -np %d", nranks);
  int status = spawn_and_wait(argv, env, d.log, 90);
  expect_success(status, &d, what);
  check_markers(&d, nranks, what);
  free(env);
  remove_launch_dir(&d);
}

Test(launch, ringcc_run_np1, .timeout = 120) { under_ringcc_run(1); }
Test(launch, ringcc_run_np3, .timeout = 120) { under_ringcc_run(3); }
Test(launch, ringcc_run_np4, .timeout = 120) { under_ringcc_run(4); }

/* ---- (b) Open MPI's mpirun ------------------------------------------------------- */

static const char *find_in_path(const char *prog) {
  static char path[PATH_MAX];
  const char *p = getenv("PATH");
  if (p == NULL)
    p = "/usr/bin:/bin";
  while (*p) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(path, sizeof path, "%.*s/%s", (int)len, p, prog);
    if (len > 0 && access(path, X_OK) == 0)
      return path;
    p += len + (colon ? 1 : 0);
  }
  return NULL;
}

Test(launch, mpirun_np3, .timeout = 150) {
  const char *mpirun = find_in_path("mpirun");
  if (mpirun == NULL)
    cr_skip_test("mpirun is not installed");
  launch_dir_t d;
  make_launch_dir(&d);
  char root[64], root_env[96], child_env[64];
  snprintf(root, sizeof root, "127.0.0.1:%d", free_port());
  snprintf(root_env, sizeof root_env, "RINGCC_ROOT=%s", root);
  snprintf(child_env, sizeof child_env, CHILD_ENV "=1");
  char *argv[] = {(char *)mpirun, "--allow-run-as-root", "--oversubscribe",
                  "-np", "3", "--mca", "btl", "self,vader",
                  "-x", root_env, "-x", child_env, "-x", d.dir_env,
                  (char *)self_exe(), CHILD_FILTER, "--jobs=1", NULL};
  char *extra[] = {"OMPI_ALLOW_RUN_AS_ROOT=1",
                   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", NULL};
  char **env = make_env(extra);
  int status = spawn_and_wait(argv, env, d.log, 120);
  expect_success(status, &d, "mpirun -np 3");
  check_markers(&d, 3, "mpirun -np 3");
  free(env);
  remove_launch_dir(&d);
}

/* ---- (c) launcher environments set by the test for forked ranks ---------------- */

enum env_style {
  ENV_TORCHRUN, ENV_SLURM, ENV_PMI, ENV_OMPI, ENV_RINGCC_WINS,
  ENV_SRUN_TORCHRUN, ENV_HYDRA_IN_SLURM, ENV_SLURM_DERIVED
};

typedef struct {
  enum env_style style;
  int port;
} env_arg_t;

static void set_int(const char *name, int v) {
  char s[16];
  snprintf(s, sizeof s, "%d", v);
  setenv(name, s, 1);
}

static int env_rank(h_ctx_t *ctx) {
  const env_arg_t *a = ctx->arg;
  int r = ctx->rank, n = ctx->nranks;
  for (int i = 0; launcher_vars[i]; i++)
    unsetenv(launcher_vars[i]);
  unsetenv(DIR_ENV);
  char root[64], port[16];
  snprintf(root, sizeof root, "127.0.0.1:%d", a->port);
  snprintf(port, sizeof port, "%d", a->port);
  switch (a->style) {
  case ENV_TORCHRUN:
    set_int("RANK", r);
    set_int("WORLD_SIZE", n);
    set_int("LOCAL_RANK", r);
    set_int("LOCAL_WORLD_SIZE", n);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    break;
  case ENV_SLURM:
    set_int("SLURM_PROCID", r);
    set_int("SLURM_NTASKS", n);
    set_int("SLURM_LOCALID", r);
    setenv("RINGCC_ROOT", root, 1);
    break;
  case ENV_PMI:
    set_int("PMI_RANK", r);
    set_int("PMI_SIZE", n);
    setenv("RINGCC_ROOT", root, 1);
    break;
  case ENV_OMPI:
    set_int("OMPI_COMM_WORLD_RANK", r);
    set_int("OMPI_COMM_WORLD_SIZE", n);
    set_int("OMPI_COMM_WORLD_LOCAL_RANK", r);
    setenv("RINGCC_ROOT", root, 1);
    break;
  case ENV_RINGCC_WINS:
    /* RINGCC_* first; every other launcher says something else. */
    set_int("RINGCC_RANK", r);
    set_int("RINGCC_NRANKS", n);
    setenv("RINGCC_ROOT", root, 1);
    set_int("OMPI_COMM_WORLD_RANK", n - 1 - r);
    set_int("OMPI_COMM_WORLD_SIZE", n + 1);
    set_int("SLURM_PROCID", (r + 1) % n);
    set_int("SLURM_NTASKS", n + 2);
    set_int("RANK", n - 1 - r);
    set_int("WORLD_SIZE", n + 3);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    set_int("MASTER_PORT", a->port == 65535 ? 1 : a->port + 1);
    break;
  case ENV_SRUN_TORCHRUN:
    /* srun -n 1 torchrun: every child has the torchrun task's SLURM_PROCID
     * 0 of 1 (and PMI's, with --mpi=pmi2); torchrun's RANK must win.
     * TORCHELASTIC_USE_AGENT_STORE is left unset: rank 0 listens on
     * MASTER_PORT (the real torchrun's store is tested below). */
    set_int("RANK", r);
    set_int("WORLD_SIZE", n);
    set_int("GROUP_RANK", 0);
    setenv("TORCHELASTIC_RUN_ID", "rcc-test", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    set_int("SLURM_PROCID", 0);
    set_int("SLURM_NTASKS", 1);
    set_int("PMI_RANK", 0);
    set_int("PMI_SIZE", 1);
    setenv("SLURM_JOB_ID", "7", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    break;
  case ENV_HYDRA_IN_SLURM:
    /* mpiexec.hydra inside an sbatch script: the batch step's SLURM_PROCID
     * 0 of 1 in every rank; hydra's PMI_RANK must win. */
    set_int("PMI_RANK", r);
    set_int("PMI_SIZE", n);
    set_int("MPI_LOCALNRANKS", n);
    set_int("SLURM_PROCID", 0);
    set_int("SLURM_NTASKS", 1);
    setenv("RINGCC_ROOT", root, 1);
    break;
  case ENV_SLURM_DERIVED:
    /* srun without RINGCC_ROOT: the root is the step's first node, the port
     * derived from the job and step ids (unique to this test run). */
    set_int("SLURM_PROCID", r);
    set_int("SLURM_NTASKS", n);
    set_int("SLURM_JOB_ID", a->port);
    set_int("SLURM_STEP_ID", 3);
    setenv("SLURM_STEP_NODELIST", "localhost", 1);
    setenv("SLURM_NODELIST", "localhost,node[2-9]", 1);
    break;
  }
  int want_rank, want_size;
  expected_rank_size(&want_rank, &want_size);
  if (want_rank != r || want_size != n)
    return h_fail(ctx, "test bug: the environment says %d of %d", want_rank,
                  want_size);
  return launched_rank();
}

static void env_launch(enum env_style style, int nranks, const char *name) {
  env_arg_t a = {style, free_port()};
  h_run_opts_t o = {.nranks = nranks, .body = env_rank, .arg = &a,
                    .skip_init = true, .no_id = true, .timeout_s = 60,
                    .name = name};
  cr_assert(h_run(&o), "%s: see the lines above", name);
}

Test(launch, torchrun_env_n3, .timeout = 90) {
  env_launch(ENV_TORCHRUN, 3, "torchrun env (RANK, WORLD_SIZE, MASTER_ADDR/PORT)");
}
Test(launch, torchrun_env_n1, .timeout = 90) {
  env_launch(ENV_TORCHRUN, 1, "torchrun env n=1");
}
Test(launch, slurm_env_n4, .timeout = 90) {
  env_launch(ENV_SLURM, 4, "Slurm env (SLURM_PROCID, SLURM_NTASKS)");
}
Test(launch, pmi_env_n3, .timeout = 90) {
  env_launch(ENV_PMI, 3, "PMI env (PMI_RANK, PMI_SIZE)");
}
Test(launch, ompi_env_n2, .timeout = 90) {
  env_launch(ENV_OMPI, 2, "Open MPI env without mpirun");
}
Test(launch, ringcc_vars_win_n3, .timeout = 90) {
  env_launch(ENV_RINGCC_WINS, 3, "RINGCC_* over conflicting launcher vars");
}
Test(launch, srun_torchrun_env_n3, .timeout = 90) {
  env_launch(ENV_SRUN_TORCHRUN, 3, "srun torchrun env (RANK over SLURM_PROCID)");
}
Test(launch, hydra_in_slurm_env_n3, .timeout = 90) {
  env_launch(ENV_HYDRA_IN_SLURM, 3, "hydra in an sbatch step (PMI_RANK over "
             "SLURM_PROCID)");
}
Test(launch, slurm_derived_env_n4, .timeout = 90) {
  env_launch(ENV_SLURM_DERIVED, 4, "Slurm env without RINGCC_ROOT (root from "
             "the node list)");
}

/* ---- (d) real launchers without a hand-set rendezvous ---------------------- */

static const char *find_torchrun(void) {
  static char path[PATH_MAX];
  const char *v = getenv("RINGCC_TORCHRUN");
  const char *venv = getenv("PY_VENV");
  if (v != NULL && access(v, X_OK) == 0)
    return v;
  snprintf(path, sizeof path, "%s/bin/torchrun", venv ? venv : "build/venv");
  if (access(path, X_OK) == 0)
    return path;
  return find_in_path("torchrun");
}

/* argv runs self_exe as the rank program at its end; output checked by the
 * markers of nranks ranks. */
static void run_launcher(char **argv, int nranks, const char *what,
                         char **extra_env) {
  launch_dir_t d;
  make_launch_dir(&d);
  char *extra[16] = {CHILD_ENV "=1", d.dir_env};
  int k = 2;
  for (int i = 0; extra_env && extra_env[i] && k < 15; i++)
    extra[k++] = extra_env[i];
  extra[k] = NULL;
  char **env = make_env(extra);
  int status = spawn_and_wait(argv, env, d.log, 150);
  expect_success(status, &d, what);
  check_markers(&d, nranks, what);
  free(env);
  remove_launch_dir(&d);
}

static void under_torchrun(int nranks, bool c10d) {
  const char *torchrun = find_torchrun();
  if (torchrun == NULL)
    cr_skip_test("torchrun is not installed (set RINGCC_TORCHRUN or PY_VENV)");
  char nproc[32], endpoint[64], what[96];
  snprintf(nproc, sizeof nproc, "--nproc-per-node=%d", nranks);
  snprintf(endpoint, sizeof endpoint, "--rdzv-endpoint=127.0.0.1:%d",
           free_port());
  char *standalone[] = {(char *)torchrun, "--standalone", nproc, "--no-python",
                        (char *)self_exe(), CHILD_FILTER, "--jobs=1", NULL};
  char *rdzv[] = {(char *)torchrun, "--nnodes=1", "--rdzv-backend=c10d",
                  endpoint, nproc, "--no-python", (char *)self_exe(),
                  CHILD_FILTER, "--jobs=1", NULL};
  snprintf(what, sizeof what, "torchrun %s --nproc-per-node %d",
           c10d ? "--rdzv-backend c10d" : "--standalone", nranks);
  run_launcher(c10d ? rdzv : standalone, nranks, what, NULL);
}

Test(launch, torchrun_standalone_n2, .timeout = 180) { under_torchrun(2, false); }
Test(launch, torchrun_c10d_n4, .timeout = 180) { under_torchrun(4, true); }

Test(launch, mpirun_derived_np3, .timeout = 180) {
  const char *mpirun = find_in_path("mpirun");
  if (mpirun == NULL)
    cr_skip_test("mpirun is not installed");
  char *argv[] = {(char *)mpirun, "--allow-run-as-root", "--oversubscribe",
                  "-np", "3", "--mca", "btl", "self,vader",
                  "-x", CHILD_ENV, "-x", DIR_ENV, (char *)self_exe(),
                  CHILD_FILTER, "--jobs=1", NULL};
  char *extra[] = {"OMPI_ALLOW_RUN_AS_ROOT=1",
                   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", NULL};
  run_launcher(argv, 3, "mpirun -np 3 (no RINGCC_ROOT)", extra);
}

Test(launch, hydra_np3, .timeout = 180) {
  const char *hydra = find_in_path("mpiexec.hydra");
  if (hydra == NULL)
    cr_skip_test("MPICH's mpiexec.hydra is not installed (apt-get install "
                 "mpich; scripts/install-deps.sh --launchers)");
  char *argv[] = {(char *)hydra, "-n", "3", (char *)self_exe(), CHILD_FILTER,
                  "--jobs=1", NULL};
  run_launcher(argv, 3, "mpiexec.hydra -n 3 (no RINGCC_ROOT)", NULL);
}

/* ---- (e) the real srun (scripts/slurm-check.sh) -------------------------------- */

static const char *need_srun(void) {
  const char *srun = find_in_path("srun");
  if (getenv("RCC_TEST_SLURM") == NULL || srun == NULL)
    cr_skip_test("needs a running Slurm: make slurm-check (RCC_TEST_SLURM=1)");
  return srun;
}

Test(launch_slurm, srun_n3, .timeout = 180) {
  const char *srun = need_srun();
  char *argv[] = {(char *)srun, "-n", "3", "--overcommit", (char *)self_exe(),
                  CHILD_FILTER, "--jobs=1", NULL};
  run_launcher(argv, 3, "srun -n 3", NULL);
}

Test(launch_slurm, srun_pmi2_n2, .timeout = 180) {
  const char *srun = need_srun();
  char *argv[] = {(char *)srun, "--mpi=pmi2", "-n", "2", "--overcommit",
                  (char *)self_exe(), CHILD_FILTER, "--jobs=1", NULL};
  run_launcher(argv, 2, "srun --mpi=pmi2 -n 2", NULL);
}

Test(launch_slurm, srun_torchrun_n3, .timeout = 180) {
  const char *srun = need_srun();
  const char *torchrun = find_torchrun();
  if (torchrun == NULL)
    cr_skip_test("torchrun is not installed (set RINGCC_TORCHRUN or PY_VENV)");
  char *argv[] = {(char *)srun, "-n", "1", (char *)torchrun, "--standalone",
                  "--nproc-per-node=3", "--no-python", (char *)self_exe(),
                  CHILD_FILTER, "--jobs=1", NULL};
  run_launcher(argv, 3, "srun -n 1 torchrun --nproc-per-node 3", NULL);
}

/* ---- (f) errors and parsing ---------------------------------------------------- */

static void expect_no_rendezvous(const char *launcher) {
  ringcc_comm_t comm = NULL;
  ringcc_result_t r = ringcc_comm_init_env(&comm, NULL);
  const char *msg = ringcc_comm_last_error(NULL);
  cr_assert_eq(r, RINGCC_ERR_INVALID_ARGUMENT, "init_env returned %d (%s): %s",
               (int)r, ringcc_strerror(r), msg);
  cr_assert(strstr(msg, launcher) && strstr(msg, "RINGCC_ROOT"),
            "the error names neither the launcher '%s' nor RINGCC_ROOT: %s",
            launcher, msg);
}

static void clear_launcher_vars(void) {
  for (int i = 0; launcher_vars[i]; i++)
    unsetenv(launcher_vars[i]);
}

Test(launch_errors, slurm_without_step) {
  clear_launcher_vars();
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  expect_no_rendezvous("Slurm srun");
}

Test(launch_errors, hydra_on_several_hosts) {
  clear_launcher_vars();
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "4", 1);
  setenv("MPI_LOCALNRANKS", "2", 1);
  expect_no_rendezvous("MPICH hydra");
  cr_assert(strstr(ringcc_comm_last_error(NULL), "-genv RINGCC_ROOT"),
            "the hydra error does not say how to pass RINGCC_ROOT: %s",
            ringcc_comm_last_error(NULL));
}

Test(launch_errors, open_mpi_on_several_hosts) {
  clear_launcher_vars();
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  setenv("PMIX_NAMESPACE", "prterun-x-1@1", 1);
  expect_no_rendezvous("Open MPI");
}

Test(launch_errors, slurm_node_lists) {
  static const char *const cases[][2] = {
      {"n07", "n07"},           {"n[07-09,12],gpu1", "n07"},
      {"gpu1,n[1-2]", "gpu1"},  {"rack[1-2]-node[3-4]", "rack1-node3"},
      {"a[5]", "a5"},           {"x[3,1]", "x3"}};
  char host[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(rcc_slurm_first_host(cases[i][0], host, sizeof host), 0,
                 "'%s' rejected", cases[i][0]);
    cr_assert_str_eq(host, cases[i][1], "first host of '%s'", cases[i][0]);
  }
  cr_assert_eq(rcc_slurm_first_host("n[1-2", host, sizeof host), -1);
  cr_assert_eq(rcc_slurm_first_host("n]1", host, sizeof host), -1);
  cr_assert_eq(rcc_slurm_first_host("", host, sizeof host), -1);
}
