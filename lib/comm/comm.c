/*
 * comm.c - communicator lifecycle: init (from an id or from the launcher's
 * environment), split, destroy, abort, and error reporting.
 *
 * Init: validate, resolve the settings (config field, else RINGCC_* variable,
 * else default), join the bootstrap, all-gather what each rank is (host, pid,
 * FIFO geometry), lay out the ring, and connect every edge through the
 * transport table. Every failure leaves one sentence in the last-error buffer
 * naming what failed, on which rank, with which peer, and why.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <strings.h>
#include <unistd.h>

#include "agree.h"
#include "algorithms.h"
#include "board.h"
#include "bootstrap.h"
#include "clock.h"
#include "clocksync.h"
#include "cma.h"
#include "comm.h"
#include "cuda.h"
#include "env.h"
#include "error.h"
#include "graph.h"
#include "init.h"
#include "group.h"
#include "launcher.h"
#include "links.h"
#include "live.h"
#include "log.h"
#include "registry.h"
#include "report.h"
#include "sha256.h"
#include "socket.h"
#include "stats.h"
#include "trace.h"
#include "transport.h"
#include "tuner.h"

#define DEFAULT_TIMEOUT_MS 600000
#define DEFAULT_CHUNK_BYTES 65536
/* TCP wants larger messages than shared memory (each costs a syscall or
 * two), but not so large that a step waits for a whole slot before it
 * reduces or forwards it (docs/performance.md has the sizes measured). */
#define DEFAULT_NET_CHUNK_BYTES (256 << 10)
#define DEFAULT_NSLOTS 8
/* Polls of a FIFO counter before yielding, where every thread has a CPU
 * (adapt_waiting); else none. */
#define DEFAULT_SPIN_ROOMY 100
#define DEFAULT_YIELDS 32

/* ---- version, async errors -------------------------------------------- */

RINGCC_API ringcc_result_t ringcc_get_version(int *version) {
  if (version == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_get_version: argument 'version' is NULL");
  *version = RINGCC_VERSION;
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_get_async_error(ringcc_comm_t comm,
                                                       ringcc_result_t *result) {
  static const char fn[] = "ringcc_comm_get_async_error";
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  if (result == NULL) {
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "%s: argument 'result' is NULL", fn);
  } else {
    /* Any thread may ask while calls run in another (a framework's
     * watchdog): what it writes is the sticky failure (atomic) and
     * last_error (locked). */
    rcc_cuda_poll(comm); /* failures of device collectives that ended */
    *result = comm->aborted ? RINGCC_ERR_ABORTED : rcc_comm_fatal(comm);
  }
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

/* ---- settings --------------------------------------------------------- */

/* An integer setting: the config field if set (>= 0), else the variable
 * (base 10 only: rcc_parse_decimal), else the default; bounds checked with a
 * message naming the source. */
static ringcc_result_t int_setting(int64_t field, const char *var,
                                   int64_t def, int64_t lo, int64_t hi,
                                   int64_t *out, char *err, size_t errlen) {
  const char *env = rcc_getenv(var);
  const char *from = "default";
  int64_t v = def;
  if (field >= 0) {
    v = field;
    from = "config";
  } else if (env != NULL) {
    if (rcc_parse_decimal(env, &v) != 0)
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "%s=%s is not a decimal integer (digits only, base 10: "
                      "no sign but '-', no spaces, no 0x)", var, env);
    from = "environment";
  }
  if (v < lo || v > hi)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "%s (from the %s) is %lld, outside [%lld, %lld]", var,
                    from, (long long)v, (long long)lo, (long long)hi);
  *out = v;
  return RINGCC_SUCCESS;
}

static ringcc_result_t algo_setting(int field, int *out, char *err,
                                    size_t errlen) {
  const char *env = rcc_getenv("RINGCC_ALGO");
  *out = RINGCC_ALGO_AUTO;
  if (field >= 0) {
    if (field >= RINGCC_NUM_ALGOS)
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "config field 'algo' is %d, not a ringcc_algo_t", field);
    *out = field;
  } else if (env != NULL) {
    int found = rcc_algo_setting_parse(env);
    if (found < 0)
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "RINGCC_ALGO=%s is not one of auto, ring, tree, oneshot, "
                      "recdoubling, rabenseifner, cma, zerocopy, direct",
                      env);
    *out = found;
  }
  return RINGCC_SUCCESS;
}

/* RINGCC_CUDA_DEVICE: a device index, or "none" (RINGCC_CUDA_DEVICE_NONE). */
static ringcc_result_t cuda_device_setting(int field, int *out, char *err,
                                           size_t errlen) {
  const char *env = rcc_getenv("RINGCC_CUDA_DEVICE");
  int64_t v;
  *out = field;
  if (field >= 0 || field == RINGCC_CUDA_DEVICE_NONE)
    return RINGCC_SUCCESS;
  if (field != -1)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "config field 'cuda_device' is %d; it must be a device "
                    "index, -1 (unset) or RINGCC_CUDA_DEVICE_NONE", field);
  if (env != NULL && strcasecmp(env, "none") == 0) {
    *out = RINGCC_CUDA_DEVICE_NONE;
    return RINGCC_SUCCESS;
  }
  ringcc_result_t r = int_setting(-1, "RINGCC_CUDA_DEVICE", -1, -1, 1023, &v,
                                  err, errlen);
  *out = (int)v;
  return r;
}

static ringcc_result_t check_config(const ringcc_config_t *c, char *err,
                                    size_t errlen) {
  if (c->size != sizeof(ringcc_config_t) || c->magic != RINGCC_CONFIG_MAGIC)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "argument 'config' was not initialised with "
                    "RINGCC_CONFIG_INIT (size %zu, magic 0x%x)",
                    c->size, c->magic);
  return RINGCC_SUCCESS;
}

static ringcc_result_t resolve_settings(const ringcc_config_t *c,
                                        struct rcc_settings *s, char *err,
                                        size_t errlen) {
  int64_t v;
  ringcc_result_t r;

#define SETTING(field, var, def, lo, hi, dst)                                  \
  do {                                                                         \
    if ((r = int_setting((field), (var), (def), (lo), (hi), &v, err,           \
                         errlen)) != RINGCC_SUCCESS)                           \
      return r;                                                                \
    (dst) = v;                                                                 \
  } while (0)
  SETTING(c->timeout_ms, "RINGCC_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 0,
          INT64_MAX / 1000000, s->timeout_ms);
  SETTING(c->chunk_bytes, "RINGCC_CHUNK_BYTES", DEFAULT_CHUNK_BYTES, 64,
          64 << 20, s->chunk_bytes);
  SETTING(c->net_chunk_bytes, "RINGCC_NET_CHUNK_BYTES",
          DEFAULT_NET_CHUNK_BYTES, 64, 64 << 20, s->net_chunk_bytes);
  SETTING(c->nslots, "RINGCC_NSLOTS", DEFAULT_NSLOTS, 2, RCC_FIFO_MAX_SLOTS,
          s->nslots);
  SETTING(c->shm_disable, "RINGCC_SHM_DISABLE", 0, 0, 1, s->shm_disable);
  SETTING(-1, "RINGCC_P2P_DISABLE", 0, 0, 1, s->p2p_disable);
  SETTING(c->check, "RINGCC_CHECK", 0, 0, 1, s->check);
  SETTING(c->checksum, "RINGCC_CHECKSUM", 0, 0, 1, s->checksum);
  SETTING(-1, "RINGCC_SPIN", -1, -1, 1 << 24, s->spin);
  SETTING(-1, "RINGCC_YIELDS", -1, -1, 1 << 24, s->yields);
  SETTING(-1, "RINGCC_NET_ZEROCOPY", 1, 0, 1, s->net_zerocopy);
  SETTING(-1, "RINGCC_THP", 1, 0, 1, s->thp);
  SETTING(-1, "RINGCC_NET_PARK_US", 2000, 0, 1000000, s->net_park_us);
  s->nchannels = -1; /* unset: by collective and link (kind_channels) */
  if (rcc_getenv("RINGCC_NCHANNELS") != NULL) /* set: 1..32, as documented */
    SETTING(-1, "RINGCC_NCHANNELS", 1, 1, RCC_MAX_CHANNELS, s->nchannels);
  SETTING(-1, "RINGCC_DEVICE_CHUNK_BYTES", -1, -1, 64 << 20,
          s->device_chunk_bytes);
#undef SETTING
  if (s->device_chunk_bytes == 0 ||
      (s->device_chunk_bytes > 0 &&
       (s->device_chunk_bytes < 64 || s->device_chunk_bytes % 64 != 0)))
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "RINGCC_DEVICE_CHUNK_BYTES (%lld) must be a multiple of "
                    "64, at least 64 (or -1: unset)",
                    (long long)s->device_chunk_bytes);
  if (s->chunk_bytes % 64 != 0 || s->net_chunk_bytes % 64 != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "RINGCC_CHUNK_BYTES / config 'chunk_bytes' (%lld) and "
                    "RINGCC_NET_CHUNK_BYTES / 'net_chunk_bytes' (%lld) must be "
                    "multiples of 64",
                    (long long)s->chunk_bytes, (long long)s->net_chunk_bytes);
  if (c->debug_level >= 0)
    rcc_log_set_level(c->debug_level);
  if ((r = cuda_device_setting(c->cuda_device, &s->cuda_device, err,
                               errlen)) != RINGCC_SUCCESS)
    return r;
  return algo_setting(c->algo, &s->algo, err, errlen);
}

/* ---- who this rank is ------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* Hostname plus boot id: two containers with one hostname are not one host. */
static void fill_peer_info(struct ringcc_comm *comm, struct rcc_peer_info *me) {
  char boot_id[64] = "";
  const char *hostid = rcc_getenv("RINGCC_HOSTID");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

  memset(me, 0, sizeof(*me));
  if (f) {
    if (fgets(boot_id, sizeof(boot_id), f) == NULL)
      boot_id[0] = '\0';
    fclose(f);
  }
  if (gethostname(me->hostname, sizeof(me->hostname)) != 0)
    strcpy(me->hostname, "unknown");
  me->hostname[sizeof(me->hostname) - 1] = '\0';
  me->host_hash = 0xcbf29ce484222325ULL;
  if (hostid != NULL) {
    me->host_hash = fnv1a(me->host_hash, hostid, strlen(hostid));
  } else {
    me->host_hash = fnv1a(me->host_hash, me->hostname, strlen(me->hostname));
    me->host_hash = fnv1a(me->host_hash, boot_id, strlen(boot_id));
  }
  char pidns[64] = "";
  ssize_t len = readlink("/proc/self/ns/pid", pidns, sizeof(pidns) - 1);
  me->pid_space = fnv1a(0xcbf29ce484222325ULL, boot_id, strlen(boot_id));
  me->pid_space = fnv1a(me->pid_space, pidns, len > 0 ? (size_t)len : 0);
  me->rank = comm->rank;
  me->pid = (int32_t)getpid();
  me->chunk_bytes = comm->set.chunk_bytes;
  me->net_chunk_bytes = comm->set.net_chunk_bytes;
  me->device_chunk_bytes = comm->set.device_chunk_bytes;
  me->nslots = comm->set.nslots;
  me->nchannels = comm->set.nchannels;
  me->shm_disable = comm->set.shm_disable;
  me->checksum = comm->set.checksum;
  rcc_cma_prepare(comm, me);
  me->trace_id = rcc_trace_id();
}

static ringcc_result_t exchange_peer_info(struct ringcc_comm *comm,
                                          int64_t deadline) {
  char err[RCC_ERRLEN];
  comm->peers = calloc((size_t)comm->nranks, sizeof(*comm->peers));
  if (comm->peers == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  fill_peer_info(comm, &comm->peers[comm->rank]);
  ringcc_result_t r = rcc_cuda_init(comm, &comm->peers[comm->rank].gpu);
  if (r != RINGCC_SUCCESS)
    return r;
  r = rcc_bootstrap_allgather(comm->boot, comm->peers, sizeof(*comm->peers),
                              deadline, err, sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "init on rank %d: %s", comm->rank, err);
  for (int p = 0; p < comm->nranks; p++) {
    const struct rcc_peer_info *q = &comm->peers[p];
    if (q->chunk_bytes != comm->set.chunk_bytes ||
        q->net_chunk_bytes != comm->set.net_chunk_bytes ||
        q->nslots != comm->set.nslots || q->nchannels != comm->set.nchannels ||
        q->device_chunk_bytes != comm->set.device_chunk_bytes)
      return rcc_comm_error(
          comm, RINGCC_ERR_INVALID_USAGE,
          "init on rank %d: rank %d uses chunk_bytes=%lld net_chunk_bytes=%lld "
          "nslots=%d nchannels=%d device_chunk_bytes=%lld but rank %d uses "
          "%lld, %lld, %d, %d, %lld; all ranks must agree (RINGCC_CHUNK_BYTES, "
          "RINGCC_NET_CHUNK_BYTES, RINGCC_NSLOTS, RINGCC_NCHANNELS, "
          "RINGCC_DEVICE_CHUNK_BYTES; -1 is unset)",
          comm->rank, p, (long long)q->chunk_bytes,
          (long long)q->net_chunk_bytes, q->nslots, q->nchannels,
          (long long)q->device_chunk_bytes, comm->rank,
          (long long)comm->set.chunk_bytes,
          (long long)comm->set.net_chunk_bytes, comm->set.nslots,
          comm->set.nchannels, (long long)comm->set.device_chunk_bytes);
    if (q->checksum != comm->set.checksum)
      return rcc_comm_error(
          comm, RINGCC_ERR_INVALID_USAGE,
          "init on rank %d: rank %d uses RINGCC_CHECKSUM=%d but rank %d uses "
          "%d; all ranks must agree (a rank that checks would refuse every "
          "message of one that does not sum)", comm->rank, p, q->checksum,
          comm->rank, comm->set.checksum);
  }
  return RINGCC_SUCCESS;
}

/* Waiting without RINGCC_SPIN / RINGCC_YIELDS: a few sched_yield()s (which
 * return at once on an idle CPU, so they poll too), then sleep on the futex;
 * and a short busy poll first, but only where every thread of this host's
 * ranks has a CPU of its own: a rank that polls where it has none holds the
 * CPU its peer needs (docs/performance.md has the figures). */
static void adapt_waiting(struct ringcc_comm *comm) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  int local = 0;
  for (int q = 0; q < comm->nranks; q++)
    local += comm->peers[q].host_hash == me->host_hash;
  /* A rank with network edges has a proxy thread as well, but it stands
   * aside while the rank waits on the network (net_proxy.c, op_wait): the
   * ranks' own threads are the ones that want a CPU. */
  int threads = local;
  cpu_set_t cpus;
  int ncpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                  ? CPU_COUNT(&cpus)
                  : (int)sysconf(_SC_NPROCESSORS_ONLN);
  int roomy = comm->nranks > 1 && threads <= ncpus;
  comm->spin.spin = comm->set.spin >= 0 ? comm->set.spin
                  : roomy               ? DEFAULT_SPIN_ROOMY
                                        : 0;
  comm->spin.yields = comm->set.yields >= 0 ? comm->set.yields : DEFAULT_YIELDS;
  comm->spin.now = comm->spin.spin;
  RCC_INFO(comm->rank, "waiting: %d ranks on this host, %d CPUs: %s", local,
           ncpus,
           roomy ? "polls briefly before yielding"
                 : "yields at once (a CPU per thread is not there)");
}

/* ---- init ------------------------------------------------------------- */

static void comm_free(struct ringcc_comm *comm) {
  rcc_trace_close(comm); /* writes the trace: edges still named */
  rcc_stats_destroy(comm); /* logs the summary at INFO */
  rcc_cuda_destroy(comm); /* first: kernels may still use the FIFOs */
  rcc_registry_free(comm);
  rcc_board_free(comm); /* before the segments it lives in go */
  rcc_transports_destroy(comm);
  rcc_links_drop(comm);
  rcc_cma_free(comm);
  rcc_tuner_free(comm);
  rcc_cuda_free(comm);
  if (comm->boot)
    rcc_bootstrap_close(comm->boot);
  for (int k = 0; k < RCC_MAX_CONN_KINDS; k++) {
    free(comm->send_conn[k]);
    free(comm->recv_conn[k]);
  }
  free(comm->edge_transport);
  free(comm->ring);
  free(comm->ring_rev);
  free(comm->peers);
  free(comm->scratch);
  free(comm->a2av_scratch);
  free(comm->premul);
  free(comm->premul_stage);
  pthread_mutex_destroy(&comm->premul_lock);
  pthread_mutex_destroy(&comm->error_lock);
  memset(comm->key, 0, sizeof(comm->key));
  free(comm);
}

/* Channels of each kind of FIFO: point-to-point kinds one; the collective
 * kinds RINGCC_NCHANNELS, else one for host collectives (the CPU runs its
 * channels in turn: more only cost memory) and, for device collectives,
 * as many as the links want (rcc_cuda_channels). */
static void kind_channels(struct ringcc_comm *comm) {
  for (int k = 0; k < RCC_MAX_CONN_KINDS; k++) {
    int coll = k % RCC_NUM_CONN_KINDS == RCC_CONN_COLL;
    int device = k >= RCC_CONN_DEVICE;
    comm->kind_channels[k] = !coll ? 1
                             : comm->set.nchannels > 0 ? comm->set.nchannels
                             : device ? rcc_cuda_channels(comm)
                                      : 1;
    /* RINGCC_NCHANNELS on device kinds: no more blocks than the SMs of a
     * shared GPU hold for every rank (the cap of the links' choice too). */
    int cap = device && coll ? rcc_cuda_channel_limit(comm) : RCC_MAX_CHANNELS;
    if (comm->kind_channels[k] > cap) {
      RCC_INFO(comm->rank, "RINGCC_NCHANNELS=%d for device collectives: %d "
               "(ranks sharing a GPU get one block per SM each)",
               comm->kind_channels[k], cap);
      comm->kind_channels[k] = cap;
    }
  }
}

static ringcc_result_t alloc_conns(struct ringcc_comm *comm) {
  size_t n = (size_t)comm->nranks;
  kind_channels(comm);
  comm->edge_transport = calloc(n, sizeof(*comm->edge_transport));
  int ok = comm->edge_transport != NULL;
  for (int k = 0; k < RCC_MAX_CONN_KINDS; k++) {
    size_t conns = n * (size_t)comm->kind_channels[k];
    comm->send_conn[k] = calloc(conns, sizeof(struct rcc_conn));
    comm->recv_conn[k] = calloc(conns, sizeof(struct rcc_conn));
    ok = ok && comm->send_conn[k] && comm->recv_conn[k];
  }
  return ok ? RINGCC_SUCCESS
            : rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                             "init on rank %d: out of memory", comm->rank);
}

static void log_ring(const struct ringcc_comm *comm) {
  char order[512];
  int off = 0;
  for (int p = 0; p < comm->nranks && off < (int)sizeof(order) - 16; p++)
    off += snprintf(order + off, sizeof(order) - (size_t)off, "%s%d",
                    p ? " " : "", comm->ring[p]);
  RCC_INFO(comm->rank, "ring 0 order: %s%s", order,
           off >= (int)sizeof(order) - 16 ? " ..." : "");
  if (comm->nranks > 1) {
    int next = comm->ring[(comm->ring_pos + 1) % comm->nranks];
    RCC_INFO(comm->rank, "ring 0: %d -> %d via %s", comm->rank, next,
             rcc_edge_name(comm, next));
  }
  RCC_INFO(comm->rank,
           "settings: nranks %d, timeout_ms %lld, chunk_bytes %lld (ring step "
           "%zu), net_chunk_bytes %lld, nslots %d, channels %d (device %d), "
           "device ring step %zu, shm_disable %d, spin %d, yields %d, "
           "checksum %d",
           comm->nranks, (long long)comm->set.timeout_ms,
           (long long)comm->set.chunk_bytes, comm->ring_chunk_bytes,
           (long long)comm->set.net_chunk_bytes, comm->set.nslots,
           comm->kind_channels[RCC_CONN_COLL],
           comm->nkinds == RCC_MAX_CONN_KINDS
               ? comm->kind_channels[RCC_CONN_DEVICE + RCC_CONN_COLL]
               : 0,
           comm->nkinds == RCC_MAX_CONN_KINDS ? comm->dev_ring_chunk_bytes : 0,
           comm->set.shm_disable, comm->spin.spin, comm->spin.yields,
           comm->set.checksum);
}

static ringcc_result_t comm_setup(struct ringcc_comm *comm,
                                  const ringcc_unique_id_t *id) {
  char err[RCC_ERRLEN];
  int64_t start = rcc_now_ns();
  int64_t deadline = rcc_deadline_after_ms(comm->set.timeout_ms);
  comm->init_deadline = deadline;
  rcc_transports_sweep(comm->rank); /* what ranks killed in an init left */
  ringcc_result_t r =
      rcc_bootstrap_init(&comm->boot, id, comm->rank, comm->nranks, deadline,
                         err, sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "init on rank %d of %d: %s", comm->rank,
                          comm->nranks, err);
  rcc_bootstrap_key(comm->boot, comm->key);
  if ((r = exchange_peer_info(comm, deadline)) != RINGCC_SUCCESS)
    return r;
  adapt_waiting(comm);
  comm->nkinds = rcc_cuda_kinds(comm); /* device FIFOs if every rank has a GPU */
  if ((r = rcc_graph_build_ring(comm)) != RINGCC_SUCCESS ||
      (r = alloc_conns(comm)) != RINGCC_SUCCESS ||
      (r = rcc_stats_create(comm)) != RINGCC_SUCCESS)
    return r;
  rcc_board_reserve(comm); /* its room in the shared-memory segments */
  if ((r = rcc_transports_connect(comm, deadline)) != RINGCC_SUCCESS)
    return r;
  /* The device side of the FIFOs; agreed on, so that no rank launches a
   * kernel before every rank finished its CUDA setup. */
  if (comm->nkinds == RCC_MAX_CONN_KINDS &&
      (r = rcc_agree_status(comm, rcc_cuda_connect(comm), "CUDA setup",
                            deadline)) != RINGCC_SUCCESS)
    return r;
  if ((r = rcc_cma_setup(comm, deadline)) != RINGCC_SUCCESS ||
      (r = rcc_board_setup(comm, deadline)) != RINGCC_SUCCESS)
    return r;
  log_ring(comm);
  if ((r = rcc_tuner_init(comm, deadline)) != RINGCC_SUCCESS ||
      (r = rcc_trace_setup(comm, deadline)) != RINGCC_SUCCESS)
    return r;
  rcc_stats_start(comm); /* the user's calls from here on */
  RCC_INFO(comm->rank, "init: %.3f s, %u all-gathers on the bootstrap ring "
           "of %d ranks", (double)(rcc_now_ns() - start) / 1e9,
           rcc_bootstrap_calls(comm->boot), comm->nranks);
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_init(ringcc_comm_t *out, int nranks,
                                            const ringcc_unique_id_t *id,
                                            int rank,
                                            const ringcc_config_t *config) {
  return rcc_comm_init_from(out, nranks, id, rank, config, NULL, NULL);
}

ringcc_result_t rcc_comm_init_from(ringcc_comm_t *out, int nranks,
                                   const ringcc_unique_id_t *id, int rank,
                                   const ringcc_config_t *config,
                                   const struct ringcc_comm *parent,
                                   const int *parent_rank) {
  static const ringcc_config_t defaults = RINGCC_CONFIG_INIT;
  char err[RCC_ERRLEN];
  ringcc_result_t r;

  static pthread_once_t signal_once = PTHREAD_ONCE_INIT;
  rcc_log_env_once();
  pthread_once(&signal_once, rcc_report_signal_setup);
  if (out == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_init: argument 'comm' is NULL");
  *out = NULL;
  if (nranks <= 0)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_init: argument 'nranks' is %d; it "
                            "must be >= 1", nranks);
  if (rank < 0 || rank >= nranks)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_init: argument 'rank' is %d; it "
                            "must be in [0, nranks-1 = %d]", rank, nranks - 1);
  if (id == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_init: argument 'id' is NULL");
  if ((r = rcc_bootstrap_check_id(id, err, sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_init: argument 'id' is not a "
                            "ringcc_unique_id_t: %s", err);
  if (config == NULL)
    config = &defaults;
  if ((r = check_config(config, err, sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_comm_init: %s", err);

  struct ringcc_comm *comm = calloc(1, sizeof(*comm));
  if (comm == NULL)
    return rcc_thread_error(RINGCC_ERR_OUT_OF_MEMORY,
                            "ringcc_comm_init: out of memory");
  comm->rank = rank;
  comm->nranks = nranks;
  comm->config = *config;
  pthread_mutex_init(&comm->error_lock, NULL);
  pthread_mutex_init(&comm->premul_lock, NULL);
  if ((r = resolve_settings(config, &comm->set, err, sizeof(err))) !=
      RINGCC_SUCCESS) {
    pthread_mutex_destroy(&comm->premul_lock);
    pthread_mutex_destroy(&comm->error_lock);
    free(comm);
    return rcc_thread_error(r, "ringcc_comm_init on rank %d: %s", rank, err);
  }
  comm->parent = parent; /* for the transports' setup only */
  comm->parent_rank = parent_rank;
  r = comm_setup(comm, id);
  comm->parent = NULL;
  comm->parent_rank = NULL;
  if (r != RINGCC_SUCCESS) {
    rcc_thread_error(r, "%s", comm->last_error);
    comm_free(comm);
    return r;
  }
  if (rcc_live_add(comm) != 0) {
    comm_free(comm);
    return rcc_thread_error(RINGCC_ERR_OUT_OF_MEMORY, "ringcc_comm_init on "
                            "rank %d: out of memory", rank);
  }
  *out = comm;
  return RINGCC_SUCCESS;
}

/* ---- init from a launcher's environment -------------------------------- */

/* RINGCC_ROOT_HANDOFF: where the launcher (ringcc-run) offers the
 * rendezvous's listening socket, which it opened before starting the ranks,
 * so that the port is never free between its choice and rank 0's listen.
 * Asked once per process; -1 (listen on RINGCC_ROOT as usual) when unset,
 * already taken, or not to be had (then a warning says why). */
static int env_root_handoff(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static int asked;
  const char *name = rcc_getenv("RINGCC_ROOT_HANDOFF");
  char err[RCC_ERRLEN];
  int fd = -1;
  if (name == NULL)
    return -1;
  pthread_mutex_lock(&lock);
  int again = asked;
  asked = 1;
  pthread_mutex_unlock(&lock);
  if (again) { /* a second communicator from the environment */
    RCC_INFO(0, "RINGCC_ROOT_HANDOFF was used by an earlier communicator; "
                "this one listens on RINGCC_ROOT itself");
    return -1;
  }
  if (rcc_socket_fetch_listener(name, rcc_deadline_after_ms(5000), &fd, err,
                                sizeof(err)) != RINGCC_SUCCESS) {
    RCC_WARN(0, "the launcher's rendezvous socket (RINGCC_ROOT_HANDOFF=%s) "
                "is not to be had: %s; listening on RINGCC_ROOT instead",
             name, err);
    return -1;
  }
  return fd;
}

RINGCC_API ringcc_result_t ringcc_comm_init_env(ringcc_comm_t *out,
                                                const ringcc_config_t *config) {
  static const ringcc_config_t defaults = RINGCC_CONFIG_INIT;
  const ringcc_config_t *c = config ? config : &defaults;
  struct rcc_launch l;
  struct rcc_settings s;
  char err[RCC_ERRLEN];
  uint8_t secret[16];
  ringcc_unique_id_t id;
  ringcc_result_t r;

  rcc_log_init();
  if (out == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_init_env: argument 'comm' is NULL");
  *out = NULL;
  if ((r = rcc_launch_detect(&l, err, sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_comm_init_env: %s", err);
  RCC_INFO(l.rank, "init from environment: launcher %s (%s): rank %d (%s) of "
           "%d (%s)", l.launcher, l.why, l.rank, l.rank_var, l.nranks,
           l.size_var);
  if ((r = rcc_launch_rendezvous(&l, err, sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_comm_init_env on rank %d: %s", l.rank,
                            err);
  RCC_INFO(l.rank, "rendezvous %s (%s)", l.root, l.root_why);
  if ((r = check_config(c, err, sizeof(err))) != RINGCC_SUCCESS ||
      (r = resolve_settings(c, &s, err, sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_comm_init_env on rank %d: %s", l.rank,
                            err);
  if (l.use_store) {
    if ((r = rcc_launch_store_id(&l, &id, s.timeout_ms, err, sizeof(err))) !=
        RINGCC_SUCCESS)
      return rcc_thread_error(r, "ringcc_comm_init_env on rank %d: %s",
                              l.rank, err);
    return ringcc_comm_init(out, l.nranks, &id, l.rank, config);
  }
  if ((r = rcc_launch_secret(&l, secret, err, sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_comm_init_env: %s", err);
  if ((r = rcc_bootstrap_id_from_root(&id, l.root, secret, err,
                                      sizeof(err))) != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_comm_init_env: rendezvous '%s' (%s): %s",
                            l.root, l.root_why, err);
  if (l.rank == 0) {
    int root_fd = env_root_handoff();
    if ((r = rcc_bootstrap_serve(&id, root_fd, s.timeout_ms, err,
                                 sizeof(err))) != RINGCC_SUCCESS)
      return rcc_thread_error(r, "ringcc_comm_init_env on rank 0 (launcher "
                              "%s): cannot serve the rendezvous at %s (%s): "
                              "%s%s", l.launcher, l.root, l.root_why, err,
                              strstr(err, "in use")
                                  ? "; another program holds that port (under "
                                    "torchrun, torch's own TCPStore): set "
                                    "RINGCC_ROOT to a free host:port"
                                  : "");
  }
  return ringcc_comm_init(out, l.nranks, &id, l.rank, config);
}

RINGCC_API ringcc_result_t ringcc_get_unique_id(ringcc_unique_id_t *id) {
  char err[RCC_ERRLEN];
  int64_t timeout_ms = DEFAULT_TIMEOUT_MS;
  ringcc_result_t r;

  rcc_log_init();
  if (id == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_get_unique_id: argument 'id' is NULL");
  if (int_setting(-1, "RINGCC_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 0,
                  INT64_MAX / 1000000, &timeout_ms, err, sizeof(err)) !=
      RINGCC_SUCCESS)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_get_unique_id: %s", err);
  if ((r = rcc_bootstrap_new_id(id, NULL, timeout_ms, err, sizeof(err))) !=
      RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_get_unique_id: %s", err);
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_unique_id_release(
    const ringcc_unique_id_t *id) {
  char err[RCC_ERRLEN];
  int released;
  rcc_log_init();
  if (id == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_unique_id_release: argument 'id' is NULL");
  ringcc_result_t r = rcc_bootstrap_release_id(id, &released, err,
                                               sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_thread_error(r, "ringcc_unique_id_release: argument 'id': %s",
                            err);
  RCC_INFO(-1, "ringcc_unique_id_release: %s", released ? "the rendezvous "
            "stopped" : "no rendezvous of this id was running here");
  return RINGCC_SUCCESS;
}

/* ---- queries, destroy, abort ----------------------------------------- */

enum query { QUERY_RANK, QUERY_SIZE, QUERY_CUDA_DEVICE };

/* One int of comm into *out (fn's argument arg). */
static ringcc_result_t query_int(ringcc_comm_t comm, const char *fn,
                                 const char *arg, int *out, enum query q) {
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  if (out == NULL)
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "%s: argument '%s' is NULL", fn, arg);
  else
    *out = q == QUERY_RANK   ? comm->rank
           : q == QUERY_SIZE ? comm->nranks
                             : comm->peers[comm->rank].gpu.device;
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

RINGCC_API ringcc_result_t ringcc_comm_rank(ringcc_comm_t comm, int *rank) {
  return query_int(comm, "ringcc_comm_rank", "rank", rank, QUERY_RANK);
}

RINGCC_API ringcc_result_t ringcc_comm_size(ringcc_comm_t comm, int *size) {
  return query_int(comm, "ringcc_comm_size", "size", size, QUERY_SIZE);
}

RINGCC_API ringcc_result_t ringcc_comm_cuda_device(ringcc_comm_t comm,
                                                   int *device) {
  return query_int(comm, "ringcc_comm_cuda_device", "device", device,
                   QUERY_CUDA_DEVICE);
}

/* Destroy and abort: comm is out of the table of live communicators (no
 * call can enter any more), and no call is inside. In a child forked after
 * init (comm->forked), the transports free memory and close descriptors
 * only: no goodbye, no shutdown, no unlink, nothing the parent's peers see. */
RINGCC_API ringcc_result_t ringcc_comm_destroy(ringcc_comm_t comm) {
  static const char fn[] = "ringcc_comm_destroy";
  ringcc_result_t code = rcc_group_comm_close(comm, fn, 0);
  if (code != RINGCC_SUCCESS) /* requests in flight */
    return code;
  switch (rcc_live_begin_close(comm, fn, 0, &code)) {
  case RCC_CLOSE_REFUSED:
    return code;
  case RCC_CLOSE_FORKED:
    comm->forked = 1;
    comm_free(comm);
    return RINGCC_SUCCESS;
  }
  /* Only queries (rank, size, report) can be inside: they leave at once. */
  if (!rcc_live_end_close(comm, 1000)) {
    RCC_WARN(comm->rank, "%s: a call of another thread is still inside this "
             "communicator after 1 s; its memory is kept (leaked) so that "
             "call cannot crash", fn);
    return RINGCC_SUCCESS;
  }
  comm_free(comm);
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_abort(ringcc_comm_t comm) {
  static const char fn[] = "ringcc_comm_abort";
  ringcc_result_t code;
  switch (rcc_live_begin_close(comm, fn, 1, &code)) {
  case RCC_CLOSE_REFUSED:
    return code;
  case RCC_CLOSE_FORKED:
    comm->forked = 1;
    comm_free(comm);
    return RINGCC_SUCCESS;
  }
  rcc_cuda_abort(comm); /* kernels waiting in a FIFO leave too */
  rcc_group_comm_close(comm, fn, 1); /* its requests end ABORTED */
  /* A collective blocked in another thread notices within one sleep slice
   * (exec_host.c) and leaves; give it a second before freeing. */
  if (!rcc_live_end_close(comm, 1000)) {
    RCC_WARN(comm->rank, "%s: a call is still running on this "
                         "communicator; its memory is kept (leaked) so that "
                         "call cannot crash", fn);
    return RINGCC_SUCCESS;
  }
  comm_free(comm);
  return RINGCC_SUCCESS;
}

/* Revoke: the calls in flight end (a blocking call of another thread leaves
 * its wait within one sleep slice, exec_host.c; requests fail; kernels
 * leave), nothing new runs (the communicator is fatal from now on), and it
 * returns once nothing is inside. Unlike abort nothing is freed: shrink,
 * split and destroy still work (they use the bootstrap's sockets and the
 * communicator's key, not the FIFOs, whose state a stopped call left
 * unknown). */
RINGCC_API ringcc_result_t ringcc_comm_revoke(ringcc_comm_t comm) {
  static const char fn[] = "ringcc_comm_revoke";
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  if (__atomic_exchange_n(&comm->revoked, 1, __ATOMIC_ACQ_REL)) {
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE, "%s on rank %d: the "
                       "communicator was revoked already (shrink, split or "
                       "destroy it)", fn, comm->rank);
    rcc_comm_leave(comm, RCC_ENTER_QUERY);
    return r;
  }
  rcc_comm_set_fatal(comm, RINGCC_ERR_ABORTED);
  rcc_comm_error(comm, RINGCC_ERR_ABORTED, "%s on rank %d: revoked; calls "
                 "in flight end with RINGCC_ERR_ABORTED and so do later ones "
                 "(shrink, split or destroy the communicator)", fn,
                 comm->rank);
  rcc_cuda_abort(comm);  /* kernels waiting in a FIFO leave */
  rcc_group_drain(comm); /* requests: each fails at its next wait, or at once */
  int64_t ms = comm->set.timeout_ms > 0 ? comm->set.timeout_ms + 1000
                                        : INT64_MAX;
  const char *inside = NULL;
  if (!rcc_live_wait_idle(comm, ms, &inside))
    r = rcc_comm_error(comm, RINGCC_ERR_TIMEOUT, "%s on rank %d: another "
                       "thread's %s did not leave within %lld ms; the "
                       "communicator is revoked nonetheless", fn, comm->rank,
                       inside ? inside : "call", (long long)ms);
  rcc_cuda_quiesce(comm); /* and the last kernel ended */
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

/* ---- split ------------------------------------------------------------ */

struct split_record {
  int32_t color;
  int32_t key;
  int32_t status;
  int32_t pad;
  ringcc_unique_id_t id; /* filled by each group's leader */
};

/* This rank's new rank and its group's leader: members sorted by (key, rank). */
static void split_place(const struct split_record *all, int n, int me,
                        int *new_rank, int *size, int *leader) {
  *new_rank = 0;
  *size = 0;
  *leader = -1;
  for (int q = 0; q < n; q++) {
    if (all[q].color != all[me].color)
      continue;
    (*size)++;
    if (all[q].key < all[me].key || (all[q].key == all[me].key && q < me))
      (*new_rank)++;
    if (*leader < 0 || all[q].key < all[*leader].key)
      *leader = q;
  }
}

/* The secret of a split's group: HMAC(key, split number, color, leader), so
 * every member knows it and nobody sends it; each split call gets new ones
 * (comm->splits counts them alike on every rank). */
static void split_secret(struct ringcc_comm *comm, int color, int leader,
                         uint8_t secret[16]) {
  static const char label[] = "ringcc v2: split secret";
  uint8_t in[sizeof(label) + 16], mac[RCC_SHA256_BYTES];
  memcpy(in, label, sizeof(label));
  uint64_t n = comm->splits;
  for (int i = 0; i < 8; i++)
    in[sizeof(label) + i] = (uint8_t)(n >> (56 - 8 * i));
  for (int i = 0; i < 4; i++) {
    in[sizeof(label) + 8 + i] = (uint8_t)((uint32_t)color >> (24 - 8 * i));
    in[sizeof(label) + 12 + i] = (uint8_t)((uint32_t)leader >> (24 - 8 * i));
  }
  rcc_hmac_sha256(comm->key, sizeof(comm->key), in, sizeof(in), mac);
  memcpy(secret, mac, 16);
  memset(mac, 0, sizeof(mac));
}

static ringcc_result_t split(struct ringcc_comm *comm, int color, int key,
                             ringcc_comm_t *out);

RINGCC_API ringcc_result_t ringcc_comm_split(ringcc_comm_t comm, int color,
                                             int key, ringcc_comm_t *out) {
  ringcc_result_t r = rcc_comm_enter(comm, "ringcc_comm_split",
                                     RCC_ENTER_CALL);
  if (r != RINGCC_SUCCESS)
    return r;
  r = split(comm, color, key, out);
  rcc_comm_leave(comm, RCC_ENTER_CALL);
  return r;
}

static ringcc_result_t split(struct ringcc_comm *comm, int color, int key,
                             ringcc_comm_t *out) {
  char err[RCC_ERRLEN];
  int new_rank, size, leader;
  uint8_t secret[16] = {0};
  ringcc_result_t r;

  if (out == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_split: argument 'out' is NULL");
  if (color < 0 && color != RINGCC_SPLIT_NOCOLOR)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_split: argument 'color' is %d; it must "
                          "be >= 0 or RINGCC_SPLIT_NOCOLOR", color);
  *out = NULL;
  int64_t deadline = rcc_deadline_after_ms(comm->set.timeout_ms);
  struct split_record *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_comm_split: out of memory");
  struct split_record *mine = &all[comm->rank];
  mine->color = color;
  mine->key = key;
  r = rcc_bootstrap_allgather(comm->boot, all, sizeof(*all), deadline, err,
                              sizeof(err));
  if (r != RINGCC_SUCCESS)
    goto fail;
  split_place(all, comm->nranks, comm->rank, &new_rank, &size, &leader);
  comm->splits++;
  /* Round two: each group's leader makes the id its members join. */
  memset(mine, 0, sizeof(*mine));
  mine->color = color;
  mine->key = key;
  /* The group's secret is derived by every member, never sent: the records
   * carry the id with its secret zeroed. */
  split_secret(comm, color, leader, secret);
  if (color != RINGCC_SPLIT_NOCOLOR && leader == comm->rank) {
    mine->status = (int32_t)rcc_bootstrap_new_id(
        &mine->id, secret, comm->set.timeout_ms, err, sizeof(err));
    rcc_bootstrap_id_set_secret(&mine->id, (const uint8_t[16]){0});
  }
  if (mine->status != RINGCC_SUCCESS) {
    r = (ringcc_result_t)mine->status;
    rcc_comm_error(comm, r, "ringcc_comm_split on rank %d: %s", comm->rank, err);
  }
  ringcc_result_t r2 = rcc_bootstrap_allgather(comm->boot, all, sizeof(*all),
                                               deadline, err, sizeof(err));
  if (r2 != RINGCC_SUCCESS) {
    r = r2;
    goto fail;
  }
  if (r != RINGCC_SUCCESS)
    goto out;
  if (color != RINGCC_SPLIT_NOCOLOR) {
    if (all[leader].status != RINGCC_SUCCESS) {
      r = rcc_comm_error(comm, (ringcc_result_t)all[leader].status,
                         "ringcc_comm_split on rank %d: the group's leader, "
                         "rank %d, could not create its id", comm->rank, leader);
      goto out;
    }
    rcc_bootstrap_id_set_secret(&all[leader].id, secret);
    r = ringcc_comm_init(out, size, &all[leader].id, new_rank, &comm->config);
    if (r != RINGCC_SUCCESS)
      rcc_comm_error(comm, r, "ringcc_comm_split on rank %d: %s", comm->rank,
                     ringcc_comm_last_error(NULL));
  }
  goto out;
fail:
  rcc_comm_error(comm, r, "ringcc_comm_split on rank %d: %s", comm->rank, err);
out:
  memset(secret, 0, sizeof(secret));
  free(all);
  return r;
}

RINGCC_API ringcc_result_t ringcc_comm_split_type(ringcc_comm_t comm, int type,
                                                  int key, ringcc_comm_t *out) {
  ringcc_result_t r = rcc_comm_enter(comm, "ringcc_comm_split_type",
                                     RCC_ENTER_CALL);
  if (r != RINGCC_SUCCESS)
    return r;
  if (type != RINGCC_SPLIT_HOST) {
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "ringcc_comm_split_type: argument 'type' is %d; only "
                       "RINGCC_SPLIT_HOST (%d) exists", type,
                       RINGCC_SPLIT_HOST);
  } else {
    int color = comm->rank;
    for (int q = comm->nranks - 1; q >= 0; q--)
      if (comm->peers[q].host_hash == comm->peers[comm->rank].host_hash)
        color = q; /* the lowest rank on this host names the group */
    r = split(comm, color, key, out);
  }
  rcc_comm_leave(comm, RCC_ENTER_CALL);
  return r;
}
