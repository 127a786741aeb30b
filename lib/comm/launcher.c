/*
 * launcher.c - which launcher started this process and where its ranks meet
 * (launcher.h). docs/launch.md holds the same table for users.
 *
 * Launchers nest: `srun torchrun ...` gives torchrun's children Slurm's
 * variables of the torchrun task as well as torchrun's own; mpirun inside an
 * sbatch script leaves the batch step's SLURM_PROCID in every rank. The
 * innermost launcher is the one that started this process, so the order is
 * innermost first: explicit RINGCC_RANK, torchrun (its markers present),
 * Open MPI's mpirun, a PMI launcher (MPICH's hydra) unless srun itself
 * started the ranks with its PMI (then both say the same rank and size),
 * Slurm's srun, and last RANK/WORLD_SIZE set by hand (torch's env://).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "env.h"
#include "error.h"
#include "launcher.h"
#include "log.h"
#include "proc.h"
#include "sha256.h"
#include "tcpstore.h"

/* 1 and *v when name holds a non-negative int, 0 when unset, -1 when not
 * a number. */
static int env_int(const char *name, int *v) {
  const char *s = rcc_getenv(name);
  int64_t parsed;
  if (s == NULL)
    return 0;
  if (rcc_parse_decimal(s, &parsed) != 0 || parsed < 0 || parsed > INT32_MAX)
    return -1;
  *v = (int)parsed;
  return 1;
}

static int env_equal(const char *a, const char *b) {
  int x, y;
  return env_int(a, &x) == 1 && env_int(b, &y) == 1 && x == y;
}

/* srun started this process with its own PMI: Slurm's and PMI's rank and
 * size agree. Otherwise a PMI launcher (hydra) ran inside a Slurm step. */
static int srun_ran_pmi(void) {
  return env_equal("SLURM_PROCID", "PMI_RANK") &&
         env_equal("SLURM_NTASKS", "PMI_SIZE");
}

static int is_hydra(void) {
  return rcc_getenv("HYDI_CONTROL_FD") != NULL ||
         rcc_getenv("MPI_LOCALNRANKS") != NULL;
}

struct candidate {
  const char *launcher, *rank_var, *size_var;
  const char *why;
};

/* The first launcher whose variables are here, innermost first. */
static struct candidate pick(void) {
  if (rcc_getenv("RINGCC_RANK"))
    return (struct candidate){"RINGCC_RANK", "RINGCC_RANK", "RINGCC_NRANKS",
                              "RINGCC_RANK is set (by ringcc-run or by hand); "
                              "it wins over every launcher's variables"};
  if (rcc_getenv("RANK") && (rcc_getenv("TORCHELASTIC_RUN_ID") ||
                             rcc_getenv("GROUP_RANK")))
    return (struct candidate){"torchrun", "RANK", "WORLD_SIZE",
                              "TORCHELASTIC_RUN_ID/GROUP_RANK are set: "
                              "torchrun started this process, so its RANK "
                              "wins over Slurm's and MPI's variables"};
  if (rcc_getenv("OMPI_COMM_WORLD_RANK"))
    return (struct candidate){"Open MPI", "OMPI_COMM_WORLD_RANK",
                              "OMPI_COMM_WORLD_SIZE",
                              "OMPI_COMM_WORLD_RANK is set (mpirun of Open "
                              "MPI started this process)"};
  if (rcc_getenv("PMI_RANK") && !(rcc_getenv("SLURM_PROCID") && srun_ran_pmi()))
    return (struct candidate){
        is_hydra() ? "MPICH hydra" : "PMI", "PMI_RANK", "PMI_SIZE",
        rcc_getenv("SLURM_PROCID")
            ? "PMI_RANK is set and differs from Slurm's SLURM_PROCID/"
              "SLURM_NTASKS: a PMI launcher inside a Slurm step started "
              "this process"
            : "PMI_RANK is set (a PMI launcher: MPICH's mpiexec.hydra, "
              "or another)"};
  if (rcc_getenv("SLURM_PROCID"))
    return (struct candidate){"Slurm srun", "SLURM_PROCID", "SLURM_NTASKS",
                              rcc_getenv("PMI_RANK")
                                  ? "SLURM_PROCID is set and PMI_RANK agrees "
                                    "with it: srun started the ranks itself"
                                  : "SLURM_PROCID is set (srun started this "
                                    "process)"};
  if (rcc_getenv("RANK"))
    return (struct candidate){"torch env://", "RANK", "WORLD_SIZE",
                              "RANK is set without torchrun's markers "
                              "(TORCHELASTIC_RUN_ID, GROUP_RANK): torch's "
                              "env:// variables, set by hand or a script"};
  return (struct candidate){NULL, NULL, NULL, NULL};
}

ringcc_result_t rcc_launch_detect(struct rcc_launch *l, char *err,
                                  size_t errlen) {
  struct candidate c = pick();
  memset(l, 0, sizeof *l);
  l->rank = l->nranks = -1;
  if (c.launcher == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "no rank or size in the environment: set RINGCC_RANK and "
                    "RINGCC_NRANKS, or start the program with ringcc-run, "
                    "mpirun, srun or torchrun");
  l->launcher = c.launcher;
  l->rank_var = c.rank_var;
  l->size_var = c.size_var;
  snprintf(l->why, sizeof l->why, "%s", c.why);
  int got_rank = env_int(c.rank_var, &l->rank);
  int got_size = env_int(c.size_var, &l->nranks);
  if (got_rank < 0 || got_size <= 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "launcher %s detected (%s), but %s is %s", c.launcher,
                    c.why, got_rank < 0 ? c.rank_var : c.size_var,
                    got_rank < 0 || got_size < 0 ? "not a number" : "not set");
  if (l->nranks == 0 || l->rank >= l->nranks)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "launcher %s: %s=%d is not a rank of %s=%d", c.launcher,
                    c.rank_var, l->rank, c.size_var, l->nranks);
  return RINGCC_SUCCESS;
}

/* ---- the rendezvous ------------------------------------------------------ */

int rcc_slurm_first_host(const char *list, char *host, size_t len) {
  size_t k = 0;
  for (const char *p = list; *p && *p != ','; p++) {
    if (*p == '[') {
      for (p++; *p && *p != ',' && *p != '-' && *p != ']'; p++)
        if (k + 1 < len)
          host[k++] = *p;
      while (*p && *p != ']')
        p++;
      if (*p != ']')
        return -1;
      continue;
    }
    if (*p == ']')
      return -1;
    if (k + 1 < len)
      host[k++] = *p;
  }
  host[k] = '\0';
  return k > 0 && k + 1 < len ? 0 : -1;
}

/* The hydra proxy that started this process on this host: its pid and start
 * time name the job here (hydra sets no job id in PMI_FD mode). */
static int hydra_proxy_key(char *out, size_t len) {
  int pid = (int)getppid();
  for (int depth = 0; depth < 8 && pid > 1; depth++) {
    char buf[1024], name[64];
    const char *after = rcc_proc_stat(pid, buf, sizeof buf, name, sizeof name);
    if (after == NULL)
      return -1;
    /* fields after the name: state ppid ... starttime is field 22 */
    int ppid = 0;
    unsigned long long start = 0;
    if (sscanf(after, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
               "%*d %*d %*d %*d %*d %*d %llu", &ppid, &start) != 2)
      return -1;
    if (strcmp(name, "hydra_pmi_proxy") == 0) {
      snprintf(out, len, "hydra proxy %d started at %llu", pid, start);
      return 0;
    }
    pid = ppid;
  }
  return -1;
}

/* A port from the job key: the same on every rank, different per job
 * (collisions 1 in 16384), in 16384..32767, below Linux's ephemeral range
 * (32768..60999 by default), where a connection's own port never lands. */
static int derived_port(const char *job) {
  uint8_t h[RCC_SHA256_BYTES];
  rcc_sha256(job, strlen(job), h);
  uint32_t v = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16;
  return 16384 + (int)(v % 16384);
}

static void format_root(char *root, size_t len, const char *host,
                        const char *port) {
  int v6 = strchr(host, ':') != NULL;
  snprintf(root, len, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* One host, no address given: every rank derives the port from the job. */
static void local_root(struct rcc_launch *l, const char *local_var) {
  char port[16];
  snprintf(port, sizeof port, "%d", derived_port(l->job));
  format_root(l->root, sizeof l->root, "127.0.0.1", port);
  snprintf(l->root_why, sizeof l->root_why, "all %d ranks are on this host "
           "(%s), port derived from the job (%s)", l->nranks, local_var, l->job);
}

static ringcc_result_t slurm_root(struct rcc_launch *l, char *err,
                                  size_t errlen) {
  static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_NODELIST",
                                      "SLURM_JOB_NODELIST", NULL};
  const char *job = rcc_getenv("SLURM_JOB_ID");
  const char *step = rcc_getenv("SLURM_STEP_ID");
  const char *list = NULL, *list_var = NULL;
  char host[256], port[16];
  for (int i = 0; lists[i] && list == NULL; i++)
    if ((list = rcc_getenv(lists[i])) != NULL)
      list_var = lists[i];
  if (job == NULL || step == NULL || list == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "no rendezvous address: launcher Slurm srun detected (%s), "
                    "but %s is not set, so no rendezvous can be derived: set "
                    "RINGCC_ROOT=host:port (where rank 0 listens)", l->why,
                    job == NULL ? "SLURM_JOB_ID" : step == NULL ? "SLURM_STEP_ID"
                                                    : "SLURM_STEP_NODELIST");
  if (rcc_slurm_first_host(list, host, sizeof host) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "%s='%s' is not a Slurm node list (host, host[1-3,5], "
                    "...); set RINGCC_ROOT=host:port", list_var, list);
  const char *me = rcc_getenv("SLURMD_NODENAME");
  if (l->rank == 0 && me != NULL && strcmp(me, host) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "Slurm placed task 0 on %s, not on %s, the first node "
                    "of %s (a --distribution or --relative that moves it?): "
                    "set RINGCC_ROOT=host:port", me, host, list_var);
  snprintf(l->job, sizeof l->job, "slurm job %s step %s", job, step);
  snprintf(port, sizeof port, "%d", derived_port(l->job));
  format_root(l->root, sizeof l->root, host, port);
  snprintf(l->root_why, sizeof l->root_why, "the first node of %s, port "
           "derived from SLURM_JOB_ID and SLURM_STEP_ID", list_var);
  return RINGCC_SUCCESS;
}

static int all_local(const char *var, int nranks) {
  int local;
  return env_int(var, &local) == 1 && local == nranks;
}

ringcc_result_t rcc_launch_rendezvous(struct rcc_launch *l, char *err,
                                      size_t errlen) {
  const char *root = rcc_getenv("RINGCC_ROOT");
  const char *addr = rcc_getenv("MASTER_ADDR");
  const char *port = rcc_getenv("MASTER_PORT");
  const char *agent = rcc_getenv("TORCHELASTIC_USE_AGENT_STORE");
  const char *launcher = l->launcher;

  if (root != NULL) {
    snprintf(l->root, sizeof l->root, "%s", root);
    snprintf(l->root_why, sizeof l->root_why, "RINGCC_ROOT");
    return RINGCC_SUCCESS;
  }
  if (addr != NULL && port != NULL) {
    format_root(l->root, sizeof l->root, addr, port);
    if (strcmp(launcher, "torchrun") == 0 && agent != NULL &&
        strcmp(agent, "True") == 0) {
      l->use_store = 1;
      snprintf(l->root_why, sizeof l->root_why, "torchrun's TCPStore at "
               "MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True); "
               "rank 0 publishes the rendezvous and a random secret there");
    } else {
      snprintf(l->root_why, sizeof l->root_why, "MASTER_ADDR/MASTER_PORT "
               "(rank 0 listens there)");
    }
    return RINGCC_SUCCESS;
  }
  if (strcmp(launcher, "Open MPI") == 0) {
    const char *job = rcc_getenv("PMIX_NAMESPACE");
    if (job == NULL)
      job = rcc_getenv("OMPI_MCA_ess_base_jobid");
    if (job != NULL && all_local("OMPI_COMM_WORLD_LOCAL_SIZE", l->nranks)) {
      snprintf(l->job, sizeof l->job, "open mpi job %s", job);
      local_root(l, "OMPI_COMM_WORLD_LOCAL_SIZE");
      return RINGCC_SUCCESS;
    }
  } else if (strcmp(launcher, "MPICH hydra") == 0 &&
             all_local("MPI_LOCALNRANKS", l->nranks)) {
    const char *pmi_port = rcc_getenv("PMI_PORT");
    char proxy[128];
    if (pmi_port != NULL)
      snprintf(l->job, sizeof l->job, "hydra PMI_PORT %s", pmi_port);
    else if (hydra_proxy_key(proxy, sizeof proxy) == 0)
      snprintf(l->job, sizeof l->job, "%s", proxy);
    if (l->job[0] != '\0') {
      local_root(l, "MPI_LOCALNRANKS");
      return RINGCC_SUCCESS;
    }
  } else if (strcmp(launcher, "Slurm srun") == 0) {
    return slurm_root(l, err, errlen);
  }
  int hydra = strcmp(launcher, "MPICH hydra") == 0;
  return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                  "no rendezvous address: launcher %s detected (%s), and it "
                  "says nothing that gives one%s: set RINGCC_ROOT=host:port "
                  "(where rank 0 listens) or MASTER_ADDR and MASTER_PORT%s",
                  launcher, l->why,
                  strcmp(launcher, "Open MPI") == 0 || hydra
                      ? " for ranks on several hosts" : "",
                  hydra ? " (hydra names no host in the ranks' environment: "
                          "mpiexec -genv RINGCC_ROOT <first host>:<port>; "
                          "docs/launch.md)"
                        : "");
}

ringcc_result_t rcc_launch_secret(const struct rcc_launch *l,
                                  uint8_t secret[16], char *err,
                                  size_t errlen) {
  const char *hex = rcc_getenv("RINGCC_SECRET");
  uint8_t h[RCC_SHA256_BYTES];
  if (hex != NULL) {
    int bad = rcc_parse_hex(hex, secret, 16);
    if (bad < 0)
      return RINGCC_SUCCESS;
    memset(secret, 0, 16);
    if ((size_t)bad == strlen(hex))
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "RINGCC_SECRET has %zu characters; it must be exactly "
                      "32 hex digits (128 bits, no 0x)", strlen(hex));
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "RINGCC_SECRET must be exactly 32 hex digits (128 bits, "
                    "no 0x, no spaces or signs); character %d of its %zu is "
                    "not one", bad + 1, strlen(hex));
  }
  struct rcc_sha256 s;
  rcc_sha256_init(&s);
  rcc_sha256_update(&s, "ringcc derived secret", 21);
  rcc_sha256_update(&s, l->root, strlen(l->root) + 1);
  rcc_sha256_update(&s, l->job, strlen(l->job));
  rcc_sha256_final(&s, h);
  memcpy(secret, h, 16);
  RCC_INFO(l->rank, "RINGCC_SECRET is not set and %s hands out no secret: the "
           "rendezvous secret is derived from the address%s. It keeps out "
           "strays and other jobs' ranks (a wrong port, a stale rank of an "
           "earlier run); it keeps out no one who knows %s (anyone who can "
           "see this job, e.g. with ps or squeue, can compute it). Against "
           "them, set RINGCC_SECRET to 32 random hex digits on every rank "
           "(ringcc-run does)", l->launcher,
           l->job[0] ? " and the job id" : "",
           l->job[0] ? l->job : "the address");
  return RINGCC_SUCCESS;
}

/* ---- torchrun's store ---------------------------------------------------- */

/* The key of this process's n-th init_env in this run and restart: every
 * rank calls init_env in the same order, so they count alike. */
static void store_key(char *key, size_t len) {
  static int calls;
  int n = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  const char *run = rcc_getenv("TORCHELASTIC_RUN_ID");
  const char *restart = rcc_getenv("TORCHELASTIC_RESTART_COUNT");
  snprintf(key, len, "ringcc/%s/%s/init_env.%d/id", run ? run : "-",
           restart ? restart : "0", n);
}

ringcc_result_t rcc_launch_store_id(const struct rcc_launch *l,
                                    ringcc_unique_id_t *id,
                                    int64_t timeout_ms, char *err,
                                    size_t errlen) {
  char key[400], why[RCC_ERRLEN];
  int64_t deadline = rcc_deadline_after_ms(timeout_ms);
  size_t got = 0;
  int fd = -1;
  ringcc_result_t r;
  store_key(key, sizeof key);
  if ((r = rcc_tcpstore_connect(l->root, deadline, &fd, why, sizeof why)) !=
      RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r, "cannot reach torchrun's TCPStore at %s "
                    "(MASTER_ADDR:MASTER_PORT): %s", l->root, why);
  if (l->rank == 0) {
    if ((r = rcc_bootstrap_new_id(id, NULL, timeout_ms, why, sizeof why)) ==
        RINGCC_SUCCESS)
      r = rcc_tcpstore_set(fd, key, id, sizeof *id, deadline, why, sizeof why);
  } else {
    r = rcc_tcpstore_get(fd, key, id, sizeof *id, &got, deadline, why,
                         sizeof why);
    if (r == RINGCC_SUCCESS && got != sizeof *id)
      r = rcc_errf(why, sizeof why, RINGCC_ERR_INVALID_USAGE, "its value has "
                   "%zu bytes, not the %zu of a unique id", got, sizeof *id);
    if (r == RINGCC_SUCCESS)
      r = rcc_bootstrap_check_id(id, why, sizeof why);
  }
  close(fd);
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r, "rendezvous through torchrun's TCPStore "
                    "at %s, key '%s': %s", l->root, key, why);
  RCC_INFO(l->rank, "rendezvous through torchrun's TCPStore at %s: %s key "
           "'%s' (rank 0's unique id: its address and a random secret)",
           l->root, l->rank == 0 ? "set" : "read", key);
  return RINGCC_SUCCESS;
}
