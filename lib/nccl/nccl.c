/*
 * nccl.c - libnccl.so.2: NCCL's host API on libringcc's public API.
 *
 * Compiled against the CUDA toolkit's nccl.h (NCCL 2.28.9, found through
 * CUDA_HOME by the Makefile; never copied into the tree); the names that
 * the torch wheel's NCCL (2.30) adds are declared here with that header's
 * signatures. Every function is defined as pncclX and exported twice, as
 * pncclX and ncclX (NCCL's profiling aliases). Only include/ringcc.h is
 * used: enums go through the tables below (never a cast: ringcc's float32
 * is 8 where NCCL's is 7, its MIN/MAX the other way round), results through
 * one table back.
 *
 * Extensions and differences are in docs/nccl.md: host buffers with a NULL
 * stream run blocking; what is not supported returns ncclInvalidUsage and
 * ncclGetLastError says what.
 */
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_layer.h"

/* The version this library reports: that of the newest nccl.h whose host
 * functions it exports, the torch wheel's NCCL 2.30.7 (torch compares the
 * runtime version with the one it was built against, and its
 * torch.cuda.nccl.version() is the latter); docs/nccl.md says more. */
#define RCC_NCCL_VERSION NCCL_VERSION(2, 30, 7)

/* ---- errors ------------------------------------------------------------- */

static __thread char last_error[512];

ncclResult_t rcc_nccl_fail(ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return r;
}

static const struct {
  ringcc_result_t ringcc;
  ncclResult_t nccl;
} results[] = {
    {RINGCC_SUCCESS, ncclSuccess},
    {RINGCC_ERR_INVALID_ARGUMENT, ncclInvalidArgument},
    {RINGCC_ERR_INVALID_USAGE, ncclInvalidUsage},
    {RINGCC_ERR_SYSTEM, ncclSystemError},
    {RINGCC_ERR_CUDA, ncclUnhandledCudaError},
    {RINGCC_ERR_NETWORK, ncclRemoteError},
    {RINGCC_ERR_TIMEOUT, ncclRemoteError},
    {RINGCC_ERR_PEER_FAILED, ncclRemoteError},
    {RINGCC_ERR_ABORTED, ncclInvalidUsage},
    {RINGCC_ERR_UNSUPPORTED, ncclInvalidUsage},
    {RINGCC_ERR_OUT_OF_MEMORY, ncclSystemError},
    {RINGCC_ERR_INTERNAL, ncclInternalError},
};

/* A ringcc result as NCCL's; the message of a failure is kept for
 * ncclGetLastError (comm's detailed one where there is a comm). */
ncclResult_t rcc_nccl_from(ringcc_result_t r, ringcc_comm_t comm,
                                const char *fn) {
  if (r == RINGCC_SUCCESS)
    return ncclSuccess;
  for (size_t i = 0; i < sizeof results / sizeof results[0]; i++)
    if (results[i].ringcc == r)
      return rcc_nccl_fail(results[i].nccl, "%s: %s: %s", fn, ringcc_strerror(r),
                  ringcc_comm_last_error(comm));
  return rcc_nccl_fail(ncclInternalError, "%s: ringcc result %d has no NCCL code", fn,
              (int)r);
}

ncclResult_t pncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version) {
  if (version == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclGetVersion: argument 'version' is NULL");
  *version = RCC_NCCL_VERSION;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion)

const char *pncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the libringcc developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
NCCL_ALIAS(ncclGetErrorString)

const char *pncclGetLastError(ncclComm_t comm) {
  (void)comm; /* the calling thread's last failure, whatever the comm */
  return last_error;
}
NCCL_ALIAS(ncclGetLastError)

/* ---- enums -------------------------------------------------------------- */

static const int datatypes[ncclNumTypes] = {
    [ncclInt8] = RINGCC_INT8,         [ncclUint8] = RINGCC_UINT8,
    [ncclInt32] = RINGCC_INT32,       [ncclUint32] = RINGCC_UINT32,
    [ncclInt64] = RINGCC_INT64,       [ncclUint64] = RINGCC_UINT64,
    [ncclFloat16] = RINGCC_FLOAT16,   [ncclFloat32] = RINGCC_FLOAT32,
    [ncclFloat64] = RINGCC_FLOAT64,   [ncclBfloat16] = RINGCC_BFLOAT16,
    [ncclFloat8e4m3] = RINGCC_FLOAT8_E4M3,
    [ncclFloat8e5m2] = RINGCC_FLOAT8_E5M2,
};

ncclResult_t rcc_nccl_dt(const char *fn, ncclDataType_t dt,
                           ringcc_datatype_t *out) {
  if ((int)dt < 0 || (int)dt >= ncclNumTypes)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'datatype' is %d, not an "
                "ncclDataType_t (0..%d)", fn, (int)dt, ncclNumTypes - 1);
  *out = (ringcc_datatype_t)datatypes[dt];
  return ncclSuccess;
}

static const int ops[ncclNumOps] = {
    [ncclSum] = RINGCC_SUM, [ncclProd] = RINGCC_PROD, [ncclMax] = RINGCC_MAX,
    [ncclMin] = RINGCC_MIN, [ncclAvg] = RINGCC_AVG,
};

/* Built-in ops by the table; ops of ncclRedOpCreatePreMulSum are ringcc's
 * premul-sum ops, numbered from ncclNumOps as ringcc numbers them from
 * RINGCC_NUM_OPS (ringcc checks they are live). */
ncclResult_t rcc_nccl_op(const char *fn, ncclRedOp_t op, ringcc_op_t *out) {
  if ((int)op < 0)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'op' is %d, not an "
                "ncclRedOp_t", fn, (int)op);
  *out = (int)op < ncclNumOps
             ? (ringcc_op_t)ops[op]
             : (ringcc_op_t)((int)op - ncclNumOps + RINGCC_NUM_OPS);
  return ncclSuccess;
}

/* ---- NCCL_* environment ------------------------------------------------- */

/* A value as ringcc's variable takes it, or NULL where it has none. */
typedef const char *(*env_translate)(const char *v, char *buf, size_t len);

static const char *same(const char *v, char *buf, size_t len) {
  (void)buf, (void)len;
  return v;
}

/* VERSION and ABORT are WARN for ringcc; INFO and TRACE are the same. */
static const char *debug_level(const char *v, char *buf, size_t len) {
  (void)buf, (void)len;
  if (strcasecmp(v, "VERSION") == 0 || strcasecmp(v, "WARN") == 0 ||
      strcasecmp(v, "ABORT") == 0)
    return "WARN";
  if (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0)
    return v;
  return NULL;
}

/* A list of subsystems to add; NCCL's "^A,B" (all but) has no equivalent. */
static const char *subsys(const char *v, char *buf, size_t len) {
  (void)buf, (void)len;
  return v[0] == '^' ? NULL : v;
}

/* One algorithm both have; NCCL's lists and exclusions are not ringcc's. */
static const char *algo(const char *v, char *buf, size_t len) {
  (void)buf, (void)len;
  return strcasecmp(v, "ring") == 0 ? "ring"
         : strcasecmp(v, "tree") == 0 ? "tree" : NULL;
}

/* NCCL's channel counts as ringcc's (1 to 32; above, 32). */
static const char *channels(const char *v, char *buf, size_t len) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < 1)
    return NULL;
  snprintf(buf, len, "%ld", n > 32 ? 32 : n);
  return buf;
}

/* NCCL's variable, ringcc's (NULL: none), and how the value carries over.
 * docs/nccl.md has this table. */
static const struct {
  const char *nccl, *ringcc;
  env_translate translate;
} env_map[] = {
    {"NCCL_DEBUG", "RINGCC_DEBUG", debug_level},
    {"NCCL_DEBUG_SUBSYS", "RINGCC_DEBUG_SUBSYS", subsys},
    {"NCCL_SOCKET_IFNAME", "RINGCC_SOCKET_IFNAME", same},
    {"NCCL_SOCKET_FAMILY", "RINGCC_SOCKET_FAMILY", same},
    {"NCCL_IB_HCA", "RINGCC_IB_HCA", same},
    {"NCCL_IB_DISABLE", "RINGCC_IB_DISABLE", same},
    {"NCCL_IB_GID_INDEX", "RINGCC_IB_GID_INDEX", same},
    {"NCCL_IB_TIMEOUT", "RINGCC_IB_TIMEOUT", same},
    {"NCCL_IB_RETRY_CNT", "RINGCC_IB_RETRY_CNT", same},
    {"NCCL_IB_SL", "RINGCC_IB_SL", same},
    {"NCCL_IB_TC", "RINGCC_IB_TC", same},
    {"NCCL_IB_QPS_PER_CONNECTION", "RINGCC_IB_QPS_PER_CONN", same},
    {"NCCL_NET_GDR_LEVEL", "RINGCC_NET_GDR_LEVEL", same},
    {"NCCL_NET", "RINGCC_NET", same},
    {"NCCL_SHM_DISABLE", "RINGCC_SHM_DISABLE", same},
    {"NCCL_ALGO", "RINGCC_ALGO", algo},
    {"NCCL_MAX_NCHANNELS", "RINGCC_NCHANNELS", channels},
    {"NCCL_MIN_NCHANNELS", "RINGCC_NCHANNELS", channels},
};

extern char **environ;

/* Once, before the first communicator: each NCCL_* variable with a ringcc
 * equivalent sets it unless the RINGCC_* one is set (which wins); the
 * others are listed once on stderr at NCCL_DEBUG/RINGCC_DEBUG=INFO. */
static void map_env_once(void) {
  const char *dbg = getenv("RINGCC_DEBUG");
  if (dbg == NULL)
    dbg = getenv("NCCL_DEBUG");
  int info = dbg && (strcasecmp(dbg, "INFO") == 0 || strcasecmp(dbg, "TRACE") == 0);
  for (size_t i = 0; i < sizeof env_map / sizeof env_map[0]; i++) {
    const char *v = getenv(env_map[i].nccl);
    if (v == NULL)
      continue;
    char buf[32];
    const char *value = env_map[i].translate(v, buf, sizeof buf);
    const char *why = value == NULL ? "this value has no ringcc equivalent"
                      : getenv(env_map[i].ringcc) != NULL
                          ? "the RINGCC_ variable is set and wins" : NULL;
    if (why == NULL)
      setenv(env_map[i].ringcc, value, 0);
    if (info)
      fprintf(stderr, "libnccl (ringcc) INFO %s=%s %s%s\n", env_map[i].nccl, v,
              why ? "not used: " : "sets ", why ? why : env_map[i].ringcc);
  }
  for (char **e = environ; info && e && *e; e++) { /* the others, once */
    size_t len = strcspn(*e, "=");
    int known = strncmp(*e, "NCCL_", 5) != 0;
    for (size_t i = 0; i < sizeof env_map / sizeof env_map[0] && !known; i++)
      known = strlen(env_map[i].nccl) == len && !strncmp(env_map[i].nccl, *e, len);
    if (!known)
      fprintf(stderr, "libnccl (ringcc) INFO %.*s not used: ringcc has no "
              "equivalent (docs/nccl.md)\n", (int)len, *e);
  }
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* ---- ids and communicators ---------------------------------------------- */

_Static_assert(sizeof(ncclUniqueId) == sizeof(ringcc_unique_id_t),
               "ncclUniqueId carries ringcc_unique_id_t");

ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (uniqueId == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclGetUniqueId: argument 'uniqueId' is NULL");
  pthread_once(&env_once, map_env_once);
  ringcc_unique_id_t id;
  ringcc_result_t r = ringcc_get_unique_id(&id);
  if (r == RINGCC_SUCCESS)
    memcpy(uniqueId->internal, id.internal, sizeof id.internal);
  return rcc_nccl_from(r, NULL, "ncclGetUniqueId");
}
NCCL_ALIAS(ncclGetUniqueId)

/* NCCL_CONFIG_UNDEF_INT or the value. */
static int defined_int(int v) { return v != NCCL_CONFIG_UNDEF_INT; }

ncclResult_t rcc_nccl_check_config(const char *fn, const ncclConfig_t *config) {
  if (config == NULL)
    return ncclSuccess;
  if (config->magic != 0xcafebeef)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'config' has magic 0x%x, "
                "not 0xcafebeef: initialise it with NCCL_CONFIG_INITIALIZER",
                fn, config->magic);
  if (config->size < offsetof(ncclConfig_t, commName) ||
      config->size > (1u << 16))
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'config' has size %zu; "
                "NCCL_CONFIG_INITIALIZER sets it", fn, config->size);
  if (config->version < NCCL_VERSION(2, 14, 0))
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'config' has version %u, "
                "older than any ncclConfig_t", fn, config->version);
  if (defined_int(config->blocking) && config->blocking != 0 &&
      config->blocking != 1)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: config->blocking is %d; it must be "
                "0 or 1", fn, config->blocking);
  return ncclSuccess;
}

struct ncclComm *rcc_nccl_comm_new(int nranks, int rank,
                                 const ncclConfig_t *config) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  c->rank = rank;
  c->nranks = nranks;
  ringcc_config_t defaults = RINGCC_CONFIG_INIT;
  c->config = defaults;
  if (config != NULL) {
    c->nonblocking = defined_int(config->blocking) && config->blocking == 0;
    if (config->size > offsetof(ncclConfig_t, commName) && config->commName)
      snprintf(c->name, sizeof c->name, "%s", config->commName);
  }
  return c;
}

static void *init_thread(void *arg) {
  struct ncclComm *c = arg;
  ringcc_result_t r = ringcc_comm_init(&c->rc, c->nranks, &c->id, c->rank,
                                       &c->config);
  __atomic_store_n(&c->init_state, (int)rcc_nccl_from(r, NULL, "ncclCommInitRank"),
                   __ATOMIC_RELEASE);
  return NULL;
}

/* device: the GPU (ringcc_config_t.cuda_device), or -1 for ringcc's choice
 * (the device current in the thread that calls init); RINGCC_CUDA_DEVICE,
 * where set, wins. */
static ncclResult_t init_rank(const char *fn, ncclComm_t *comm, int nranks,
                              const ncclUniqueId *id, int rank,
                              const ncclConfig_t *config, int device) {
  ncclResult_t nr;
  if (comm == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'comm' is NULL", fn);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: rank %d of nranks %d: it must be "
                "in [0, nranks)", fn, rank, nranks);
  if ((nr = rcc_nccl_check_config(fn, config)) != ncclSuccess)
    return nr;
  pthread_once(&env_once, map_env_once);
  struct ncclComm *c = rcc_nccl_comm_new(nranks, rank, config);
  if (c == NULL)
    return rcc_nccl_fail(ncclSystemError, "%s: out of memory", fn);
  memcpy(c->id.internal, id->internal, sizeof c->id.internal);
  if (device >= 0 && getenv("RINGCC_CUDA_DEVICE") == NULL)
    c->config.cuda_device = device;
  *comm = c;
  if (c->nonblocking) { /* init runs in a thread; GetAsyncError polls it */
    /* ... which has no CUDA context: ringcc's choice there would be host
     * buffers only, so it gets the device current here, as NCCL's. */
    int current = -1;
    if (c->config.cuda_device < 0 && getenv("RINGCC_CUDA_DEVICE") == NULL &&
        ringcc_cuda_current_device(&current) == RINGCC_SUCCESS && current >= 0)
      c->config.cuda_device = current;
    c->init_state = ncclInProgress;
    if (pthread_create(&c->init_thread, NULL, init_thread, c) != 0) {
      free(c);
      *comm = NULL;
      return rcc_nccl_fail(ncclSystemError, "%s: no thread for a non-blocking init", fn);
    }
    return ncclInProgress;
  }
  ringcc_result_t r = ringcc_comm_init(&c->rc, nranks, &c->id, rank, &c->config);
  if (r != RINGCC_SUCCESS) {
    free(c);
    *comm = NULL;
  }
  return rcc_nccl_from(r, NULL, fn);
}

ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks,
                               ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL, -1);
}
NCCL_ALIAS(ncclCommInitRank)

ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                     ncclUniqueId commId, int rank,
                                     ncclConfig_t *config) {
  return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank,
                   config, -1);
}
NCCL_ALIAS(ncclCommInitRankConfig)

ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks,
                                       int myrank, int nId,
                                       ncclUniqueId *commIds,
                                       ncclConfig_t *config) {
  if (nId < 1 || commIds == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclCommInitRankScalable: nId is %d "
                "and commIds %p; one id at least", nId, (void *)commIds);
  /* One rendezvous is enough for ringcc: the first id's (the same on every
   * rank, as NCCL requires). */
  return init_rank("ncclCommInitRankScalable", newcomm, nranks, commIds,
                   myrank, config, -1);
}
NCCL_ALIAS(ncclCommInitRankScalable)

struct init_all_arg {
  ncclComm_t *comm;
  int nranks, rank, device;
  const ncclUniqueId *id;
  ncclResult_t r;
};

static void *init_all_rank(void *p) {
  struct init_all_arg *a = p;
  a->r = init_rank("ncclCommInitAll", a->comm, a->nranks, a->id, a->rank,
                   NULL, a->device);
  return NULL;
}

/* One process, ndev ranks: each rank's init in a thread of its own (ringcc's
 * init waits for every rank), rank i on GPU devlist[i]; without devlist,
 * ringcc's choice (a thread that has not used CUDA: host buffers only). */
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
  if (comm == NULL || ndev < 1)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclCommInitAll: comm %p, ndev %d",
                (void *)comm, ndev);
  ncclUniqueId id;
  ncclResult_t r = pncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return r;
  struct init_all_arg *args = calloc((size_t)ndev, sizeof *args);
  pthread_t *threads = calloc((size_t)ndev, sizeof *threads);
  if (args == NULL || threads == NULL) {
    free(args);
    free(threads);
    return rcc_nccl_fail(ncclSystemError, "ncclCommInitAll: out of memory");
  }
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    args[i] = (struct init_all_arg){&comm[i], ndev, i, devlist ? devlist[i] : -1,
                                    &id, ncclSuccess};
    if (pthread_create(&threads[i], NULL, init_all_rank, &args[i]) != 0)
      break;
    started++;
  }
  r = started == ndev ? ncclSuccess : rcc_nccl_fail(ncclSystemError, "ncclCommInitAll: no thread");
  for (int i = 0; i < started; i++) {
    pthread_join(threads[i], NULL);
    if (args[i].r != ncclSuccess && r == ncclSuccess)
      r = args[i].r;
  }
  ringcc_unique_id_t rid;
  memcpy(rid.internal, id.internal, sizeof rid.internal);
  ringcc_unique_id_release(&rid);
  free(args);
  free(threads);
  return r;
}
NCCL_ALIAS(ncclCommInitAll)

/* The communicator of a call: NULL, or one still initialising, refused. */
ncclResult_t rcc_nccl_ready(const char *fn, ncclComm_t comm) {
  if (comm == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'comm' is NULL", fn);
  int state = __atomic_load_n(&comm->init_state, __ATOMIC_ACQUIRE);
  if (state == ncclInProgress)
    return rcc_nccl_fail(ncclInProgress, "%s: the communicator's non-blocking init "
                "is still in progress (poll ncclCommGetAsyncError)", fn);
  if (comm->nonblocking && !comm->init_joined) {
    pthread_join(comm->init_thread, NULL);
    comm->init_joined = 1;
  }
  if (comm->rc == NULL)
    return rcc_nccl_fail(ncclInvalidUsage, "%s: the communicator's init failed", fn);
  return ncclSuccess;
}

ncclResult_t rcc_nccl_usable(const char *fn, ncclComm_t comm) {
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r == ncclSuccess && __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE))
    r = rcc_nccl_fail(ncclInvalidUsage, "%s: the communicator was revoked "
                      "(ncclCommRevoke): shrink, split or destroy it", fn);
  return r;
}

ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  if (comm == NULL || asyncError == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "ncclCommGetAsyncError: argument '%s' "
                "is NULL", comm == NULL ? "comm" : "asyncError");
  int state = __atomic_load_n(&comm->init_state, __ATOMIC_ACQUIRE);
  if (state != ncclSuccess) { /* init running, or failed */
    *asyncError = (ncclResult_t)state;
    return ncclSuccess;
  }
  ncclResult_t r = rcc_nccl_ready("ncclCommGetAsyncError", comm);
  if (r != ncclSuccess)
    return r;
  int revoked = __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE);
  if (revoked) { /* as NCCL: in progress until quiescent, then success */
    *asyncError = revoked == 1 ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
  }
  ringcc_result_t async = RINGCC_SUCCESS;
  ringcc_result_t q = ringcc_comm_get_async_error(comm->rc, &async);
  if (q != RINGCC_SUCCESS)
    return rcc_nccl_from(q, comm->rc, "ncclCommGetAsyncError");
  *asyncError = rcc_nccl_from(async, comm->rc, "ncclCommGetAsyncError");
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetAsyncError)

static ncclResult_t close_comm(const char *fn, ncclComm_t comm, int abort) {
  if (comm == NULL)
    return ncclSuccess; /* as NCCL: destroying NULL is fine */
  if (comm->nonblocking && !comm->init_joined) {
    pthread_join(comm->init_thread, NULL);
    comm->init_joined = 1;
  }
  ringcc_result_t r = RINGCC_SUCCESS;
  if (comm->rc != NULL)
    r = abort ? ringcc_comm_abort(comm->rc) : ringcc_comm_destroy(comm->rc);
  ncclResult_t nr = rcc_nccl_from(r, NULL, fn);
  if (r == RINGCC_SUCCESS || abort)
    free(comm);
  return abort ? ncclSuccess : nr;
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return close_comm("ncclCommDestroy", comm, 0);
}
NCCL_ALIAS(ncclCommDestroy)

ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return close_comm("ncclCommAbort", comm, 1);
}
NCCL_ALIAS(ncclCommAbort)

/* Host collectives are complete when they return: nothing to flush. After
 * ncclCommRevoke it is invalid, as NCCL says. */
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return rcc_nccl_usable("ncclCommFinalize", comm);
}
NCCL_ALIAS(ncclCommFinalize)

/* ringcc_comm_revoke: local; what is in flight ends with an error, later
 * operations are ncclInvalidUsage, and it returns once the communicator is
 * quiescent, for blocking and non-blocking communicators alike (the latter
 * then see ncclSuccess from ncclCommGetAsyncError, as NCCL's do once
 * quiescent). Shrink, split and destroy follow. */
/* 1: comm->revoked went from 0 to 1 for this caller, who revokes. */
static int start_revoke(ncclComm_t comm) {
  int none = 0;
  return __atomic_compare_exchange_n(&comm->revoked, &none, 1, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* comm's revoke, once start_revoke said so: quiescent (2) when ringcc's
 * returns. */
static ncclResult_t revoke(ncclComm_t comm, const char *fn) {
  ringcc_result_t r = ringcc_comm_revoke(comm->rc);
  __atomic_store_n(&comm->revoked, 2, __ATOMIC_RELEASE);
  return rcc_nccl_from(r, comm->rc, fn);
}

ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  static const char fn[] = "ncclCommRevoke";
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r != ncclSuccess)
    return r;
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'revokeFlags' is "
                         "%d; it must be NCCL_REVOKE_DEFAULT (0)", fn,
                         revokeFlags);
  if (!start_revoke(comm))
    return rcc_nccl_fail(ncclInvalidArgument, "%s: the communicator was "
                         "revoked already", fn);
  return revoke(comm, fn);
}
NCCL_ALIAS(ncclCommRevoke)

/* A communicator that a split or shrink made (NULL: none for this rank)
 * as NCCL's; complete when the call returns, whatever config->blocking. */
static ncclResult_t adopt(const char *fn, ringcc_comm_t out,
                          const ncclConfig_t *config, ncclComm_t *newcomm) {
  *newcomm = NULL;
  if (out == NULL)
    return ncclSuccess;
  struct ncclComm *c = rcc_nccl_comm_new(0, 0, config);
  if (c == NULL) {
    ringcc_comm_destroy(out);
    return rcc_nccl_fail(ncclSystemError, "%s: out of memory", fn);
  }
  c->rc = out;
  ringcc_comm_rank(out, &c->rank);
  ringcc_comm_size(out, &c->nranks);
  c->nonblocking = 0;
  *newcomm = c;
  return ncclSuccess;
}

ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                            ncclComm_t *newcomm, ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r != ncclSuccess || (r = rcc_nccl_check_config(fn, config)) != ncclSuccess)
    return r;
  if (newcomm == NULL)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'newcomm' is NULL", fn);
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'color' is %d; it must be "
                ">= 0 or NCCL_SPLIT_NOCOLOR", fn, color);
  ringcc_comm_t out = NULL;
  /* ringcc's split: a negative color is no communicator, as NOCOLOR */
  ringcc_result_t rr = ringcc_comm_split(comm->rc, color, key, &out);
  if (rr != RINGCC_SUCCESS)
    return rcc_nccl_from(rr, comm->rc, fn);
  return adopt(fn, out, config, newcomm);
}
NCCL_ALIAS(ncclCommSplit)

ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                             int excludeRanksCount, ncclComm_t *newcomm,
                             ncclConfig_t *config, int shrinkFlags) {
  const char *fn = "ncclCommShrink";
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r != ncclSuccess || (r = rcc_nccl_check_config(fn, config)) != ncclSuccess)
    return r;
  if (newcomm == NULL || excludeRanksCount < 0 ||
      (excludeRanksCount > 0 && excludeRanksList == NULL))
    return rcc_nccl_fail(ncclInvalidArgument, "%s: newcomm %p, "
                         "excludeRanksList %p with excludeRanksCount %d",
                         fn, (void *)newcomm, (void *)excludeRanksList,
                         excludeRanksCount);
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'shrinkFlags' is "
                         "%d, not NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT",
                         fn, shrinkFlags);
  /* NCCL_SHRINK_ABORT: what is in flight on comm is stopped first */
  if (shrinkFlags == NCCL_SHRINK_ABORT &&
      start_revoke(comm) &&
      (r = revoke(comm, fn)) != ncclSuccess)
    return r;
  ringcc_comm_t out = NULL;
  ringcc_result_t rr = ringcc_comm_shrink(comm->rc, excludeRanksList,
                                          excludeRanksCount, &out);
  if (rr != RINGCC_SUCCESS)
    return rcc_nccl_from(rr, comm->rc, fn);
  return adopt(fn, out, config, newcomm); /* NULL: this rank was excluded */
}
NCCL_ALIAS(ncclCommShrink)

/* One int of a ready communicator into *out (the argument named arg). */
static ncclResult_t comm_int(const char *fn, ncclComm_t comm, int *out,
                             const char *arg, int which) {
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r == ncclSuccess && out == NULL)
    r = rcc_nccl_fail(ncclInvalidArgument, "%s: argument '%s' is NULL", fn, arg);
  if (r == ncclSuccess)
    *out = which == 0 ? comm->nranks : comm->rank;
  return r;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
  return comm_int("ncclCommCount", comm, count, "count", 0);
}
NCCL_ALIAS(ncclCommCount)

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
  return comm_int("ncclCommUserRank", comm, rank, "rank", 1);
}
NCCL_ALIAS(ncclCommUserRank)

/* The GPU the communicator uses (the device current at init, as NCCL's),
 * or -1 where it carries host buffers only (docs/nccl.md). */
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device) {
  static const char fn[] = "ncclCommCuDevice";
  ncclResult_t r = rcc_nccl_ready(fn, comm);
  if (r == ncclSuccess && device == NULL)
    r = rcc_nccl_fail(ncclInvalidArgument, "%s: argument 'device' is NULL", fn);
  if (r == ncclSuccess)
    r = rcc_nccl_from(ringcc_comm_cuda_device(comm->rc, device), comm->rc, fn);
  return r;
}
NCCL_ALIAS(ncclCommCuDevice)

