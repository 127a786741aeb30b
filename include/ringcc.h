/*
 * ringcc.h - the public C API of libringcc, a collective-communication library.
 *
 * Ranks join a communicator and run AllReduce, Reduce-Scatter, AllGather,
 * Broadcast, Reduce, AllToAll, Send/Recv and Barrier. Argument order follows
 * MPI; the trailing stream argument follows NCCL (pass NULL for host buffers).
 *
 * Buffers may be host memory (pass stream NULL: the call blocks until done)
 * or CUDA device memory of the rank's GPU (the call is enqueued on stream
 * and returns, as in NCCL; later failures come from
 * ringcc_comm_get_async_error). See docs/cuda.md.
 *
 * Every call returns a ringcc_result_t. ringcc_strerror() names the code;
 * ringcc_comm_last_error() gives the detailed message of the last failure on a
 * communicator (what failed, on which rank and peer, and why).
 *
 * A communicator is used by one thread at a time; different communicators may
 * be used from different threads. Ranks may be processes or threads.
 */
#ifndef RINGCC_H
#define RINGCC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RINGCC_API __attribute__((visibility("default")))
#else
#define RINGCC_API
#endif

#define RINGCC_VERSION_MAJOR 0
#define RINGCC_VERSION_MINOR 1
#define RINGCC_VERSION_PATCH 0
/* ringcc_get_version() returns MAJOR*10000 + MINOR*100 + PATCH. */
#define RINGCC_VERSION                                                         \
  (RINGCC_VERSION_MAJOR * 10000 + RINGCC_VERSION_MINOR * 100 +                 \
   RINGCC_VERSION_PATCH)

typedef enum {
  RINGCC_SUCCESS = 0,
  RINGCC_ERR_INVALID_ARGUMENT = 1, /* a bad argument; nothing was sent */
  RINGCC_ERR_INVALID_USAGE = 2,    /* a call that is wrong in this state */
  RINGCC_ERR_SYSTEM = 3,           /* an OS call failed (errno in the message) */
  RINGCC_ERR_CUDA = 4,             /* a CUDA call failed */
  RINGCC_ERR_NETWORK = 5,          /* a socket or network failure */
  RINGCC_ERR_TIMEOUT = 6,          /* a deadline passed */
  RINGCC_ERR_PEER_FAILED = 7,      /* a peer rank died or left */
  RINGCC_ERR_ABORTED = 8,          /* the communicator was aborted */
  RINGCC_ERR_UNSUPPORTED = 9,      /* not supported in this build or setup */
  RINGCC_ERR_OUT_OF_MEMORY = 10,   /* an allocation failed */
  RINGCC_ERR_INTERNAL = 11,        /* a bug in libringcc: please report it */
  RINGCC_NUM_RESULTS
} ringcc_result_t;

typedef enum {
  RINGCC_INT8 = 0,
  RINGCC_UINT8 = 1,
  RINGCC_INT32 = 2,
  RINGCC_UINT32 = 3,
  RINGCC_INT64 = 4,
  RINGCC_UINT64 = 5,
  RINGCC_FLOAT16 = 6,  /* IEEE 754 binary16; reduced in float, rounded to nearest even */
  RINGCC_BFLOAT16 = 7, /* bfloat16; reduced in float, rounded to nearest even */
  RINGCC_FLOAT32 = 8,
  RINGCC_FLOAT64 = 9,
  /* OCP FP8 (the NVIDIA/ml_dtypes float8_e4m3fn and float8_e5m2 encodings).
   * Reduced in float and rounded to nearest even once per step (each
   * combination of two values). Overflow: e4m3 has no infinity and
   * saturates to +-448 (as CUDA's and NCCL's conversions do; +-Inf inputs
   * too); e5m2 overflows to +-Inf like float16. NaNs stay NaN. Host buffers
   * only: on device buffers the call returns RINGCC_ERR_UNSUPPORTED. */
  RINGCC_FLOAT8_E4M3 = 10,
  RINGCC_FLOAT8_E5M2 = 11,
  RINGCC_NUM_DATATYPES
} ringcc_datatype_t;

typedef enum {
  RINGCC_SUM = 0,
  RINGCC_PROD = 1,
  RINGCC_MIN = 2,
  RINGCC_MAX = 3,
  RINGCC_AVG = 4, /* sum / nranks; on integers truncated toward zero */
  RINGCC_NUM_OPS
} ringcc_op_t;

/* Algorithm choice for ringcc_config_t.algo (RINGCC_ALGO): forces the
 * algorithm where it can run the call (else the library picks, and says so
 * at RINGCC_DEBUG=INFO). Each value has one RINGCC_ALGO spelling, given
 * beside it (case, '-' and '_' do not matter: "one-shot" is "oneshot");
 * docs/algorithms.md describes each. */
typedef enum {
  RINGCC_ALGO_AUTO = 0, /* "auto": the library picks */
  RINGCC_ALGO_RING = 1, /* "ring" (allreduce, reduce_scatter, allgather) */
  RINGCC_ALGO_TREE = 2, /* "tree": double binary tree AllReduce */
  RINGCC_ALGO_DIRECT = 3, /* "direct", deprecated: the name before oneshot
                             and cma had theirs; forces either (one-shot
                             where the message fits one slot, else
                             cross-memory attach where it runs) */
  RINGCC_ALGO_RECDOUBLING = 4, /* "recdoubling": recursive-doubling
                                  AllReduce */
  RINGCC_ALGO_RABENSEIFNER = 5, /* "rabenseifner": halving reduce-scatter +
                                   doubling allgather AllReduce */
  RINGCC_ALGO_ONESHOT = 6, /* "oneshot": one-shot AllReduce (over the FIFOs,
                              or the shared board where it runs) */
  RINGCC_ALGO_CMA = 7, /* "cma": cross-memory attach (one host, from
                          256 KiB) */
  RINGCC_ALGO_ZEROCOPY = 8, /* "zerocopy": registered buffers read and
                               written in place (ringcc_comm_register; one
                               host, or per host with a ring between hosts
                               for AllReduce) */
  RINGCC_NUM_ALGOS
} ringcc_algo_t;

/* Log levels for ringcc_config_t.debug_level (RINGCC_DEBUG). */
typedef enum {
  RINGCC_LOG_NONE = 0,
  RINGCC_LOG_WARN = 1,
  RINGCC_LOG_INFO = 2,
  RINGCC_LOG_TRACE = 3
} ringcc_log_level_t;

typedef struct ringcc_comm *ringcc_comm_t;
typedef struct {
  char internal[128];
} ringcc_unique_id_t;
typedef void *ringcc_stream_t; /* a cudaStream_t, or NULL */

/* MPI_IN_PLACE's counterpart: pass as sendbuf (see each collective). */
#define RINGCC_IN_PLACE ((const void *)1)

/* ringcc_comm_split(): a rank passing this color gets *out == NULL. */
#define RINGCC_SPLIT_NOCOLOR (-1)
/* ringcc_comm_split_type() types. */
#define RINGCC_SPLIT_HOST 1

/*
 * Communicator configuration. Start from RINGCC_CONFIG_INIT and set only what
 * you need. A field left at its "unset" value takes the environment variable
 * named beside it, or else the default. A field you set wins over the
 * environment.
 */
typedef struct {
  size_t size;      /* sizeof(ringcc_config_t), set by RINGCC_CONFIG_INIT */
  unsigned magic;   /* set by RINGCC_CONFIG_INIT */
  unsigned version; /* RINGCC_VERSION, set by RINGCC_CONFIG_INIT */
  int64_t timeout_ms;   /* RINGCC_TIMEOUT_MS; -1 unset; 0 = no deadline; default 600000 */
  int algo;             /* RINGCC_ALGO (a ringcc_algo_t's spelling); -1 unset; RINGCC_ALGO_AUTO */
  int debug_level;      /* RINGCC_DEBUG (WARN|INFO|TRACE); -1 unset; process-wide */
  int64_t chunk_bytes;  /* RINGCC_CHUNK_BYTES; -1 unset; bytes per slot of
                           shared-memory FIFOs (the pipeline chunk), default 65536 */
  int nslots;           /* RINGCC_NSLOTS; -1 unset; slots per FIFO, default 8 */
  int shm_disable;      /* RINGCC_SHM_DISABLE; -1 unset; default 0 */
  int check;            /* RINGCC_CHECK; -1 unset; cross-rank argument check, default 0 */
  const char *socket_ifname; /* RINGCC_SOCKET_IFNAME; NULL unset */
  int64_t net_chunk_bytes; /* RINGCC_NET_CHUNK_BYTES; -1 unset; bytes per slot
                              of network FIFOs, default 262144 (256 KiB) */
  int cuda_device;       /* RINGCC_CUDA_DEVICE; -1 unset: the current CUDA
                           device at init; RINGCC_CUDA_DEVICE_NONE: no GPU
                           (host buffers only) */
  int checksum;          /* RINGCC_CHECKSUM; -1 unset; 1: a CRC-32C of every
                            network message, checked on receive (a mismatch
                            fails the call with RINGCC_ERR_NETWORK instead of
                            giving a wrong result); default 0 */
  int reserved[14];
} ringcc_config_t;

/* ringcc_config_t.cuda_device (RINGCC_CUDA_DEVICE=none): this rank uses no
 * GPU, so the communicator carries host buffers only. */
#define RINGCC_CUDA_DEVICE_NONE (-2)

#define RINGCC_CONFIG_MAGIC 0x52434346u /* "RCCF" */
#define RINGCC_CONFIG_INIT                                                     \
  {sizeof(ringcc_config_t), RINGCC_CONFIG_MAGIC, RINGCC_VERSION, -1, -1, -1,   \
   -1, -1, -1, -1, NULL, -1, -1, -1, {0}}

/* ---- version and errors ---------------------------------------------- */
RINGCC_API ringcc_result_t ringcc_get_version(int *version);
RINGCC_API const char *ringcc_strerror(ringcc_result_t r);
/* The detailed message of the last failure on comm; with comm == NULL, the
 * last failure of a call made by this thread that had no usable communicator
 * (e.g. a failed ringcc_comm_init). Never NULL; "" when nothing failed. */
RINGCC_API const char *ringcc_comm_last_error(ringcc_comm_t comm);

/* ---- communicators ----------------------------------------------------- */
/* Makes an id for ringcc_comm_init: the rendezvous address (this process
 * serves the rendezvous from a background thread until every rank arrived or
 * the timeout passed) and a random 128-bit secret. Give the same id to all
 * ranks; keep it secret from everybody else. */
RINGCC_API ringcc_result_t ringcc_get_unique_id(ringcc_unique_id_t *id);
/* Stops the rendezvous that this process serves for id (made here by
 * ringcc_get_unique_id) and returns once its thread let go of its listening
 * port: for an id that will not be used, or no longer (its thread and port
 * would otherwise stay until every rank arrived or RINGCC_TIMEOUT_MS
 * passed). Ranks that already joined fail with the id's release named; ranks
 * still to come cannot reach it. RINGCC_SUCCESS also when no rendezvous of id
 * is running here (its communicator formed, it timed out, it was released,
 * or another process serves it); RINGCC_ERR_INVALID_ARGUMENT when id is NULL
 * or not an id. */
RINGCC_API ringcc_result_t ringcc_unique_id_release(
    const ringcc_unique_id_t *id);
RINGCC_API ringcc_result_t ringcc_comm_init(ringcc_comm_t *comm, int nranks,
                                            const ringcc_unique_id_t *id,
                                            int rank,
                                            const ringcc_config_t *config);
/* Rank and size from the innermost launcher: RINGCC_RANK/RINGCC_NRANKS,
 * torchrun, Open MPI, PMI (MPICH hydra), Slurm, else RANK/WORLD_SIZE; the
 * rendezvous from RINGCC_ROOT (host:port where rank 0 listens), torchrun's
 * TCPStore, MASTER_ADDR/MASTER_PORT, or what the launcher implies
 * (docs/launch.md). */
RINGCC_API ringcc_result_t ringcc_comm_init_env(ringcc_comm_t *comm,
                                                const ringcc_config_t *config);
/* MPI_Comm_split: ranks with the same color form a communicator, ordered by
 * (key, old rank). Collective over comm. */
RINGCC_API ringcc_result_t ringcc_comm_split(ringcc_comm_t comm, int color,
                                             int key, ringcc_comm_t *out);
/* MPI_Comm_split_type with MPI_COMM_TYPE_SHARED: one communicator per host. */
RINGCC_API ringcc_result_t ringcc_comm_split_type(ringcc_comm_t comm, int type,
                                                  int key, ringcc_comm_t *out);
RINGCC_API ringcc_result_t ringcc_comm_rank(ringcc_comm_t comm, int *rank);
RINGCC_API ringcc_result_t ringcc_comm_size(ringcc_comm_t comm, int *size);
RINGCC_API ringcc_result_t ringcc_comm_destroy(ringcc_comm_t comm);
RINGCC_API ringcc_result_t ringcc_comm_abort(ringcc_comm_t comm);
RINGCC_API ringcc_result_t ringcc_comm_get_async_error(ringcc_comm_t comm,
                                                       ringcc_result_t *result);
/* Where this rank stands: the collective, its sequence number, the step, the
 * peer waited for and that FIFO's counters (or "idle"). Safe to call from
 * another thread while a collective runs (the values may be a moment old).
 * The same report is logged when a deadline passes, and when the process
 * gets the signal named by RINGCC_REPORT_SIGNAL (USR1 or USR2). */
RINGCC_API ringcc_result_t ringcc_comm_report(ringcc_comm_t comm, char *buf,
                                              size_t len);

/* ---- statistics ------------------------------------------------------- */
/* What a communicator did, counted by this rank since init: calls and bytes
 * per collective and algorithm, bytes per transport and per edge (peer),
 * and the time spent in collectives and waiting for peers, so that an edge
 * that carries most of the wait stands out. Times are measured only when
 * timing is on (RINGCC_STATS=time, RINGCC_TRACE or RINGCC_DEBUG=INFO; `timed`
 * says so), since reading the clock costs an 8-byte call more than the call
 * itself on fast links; counts always are. With RINGCC_DEBUG=INFO the same
 * figures are logged at ringcc_comm_destroy(). Safe to call from another
 * thread while a collective runs (the values may be a moment old). */

/* One (collective, algorithm) pair. Names are the library's static
 * strings: "allreduce", "ring" (docs/algorithms.md's table). */
typedef struct {
  const char *collective;
  const char *algorithm;
  uint64_t calls;
  uint64_t bytes;      /* S of the calls, as ringcc-bench and nccl-tests
                          count it: the buffer (allreduce, bcast, reduce,
                          send, recv), the gathered output (allgather), the
                          whole input (reduce_scatter), the whole send
                          buffer (alltoall) */
  uint64_t sent_bytes; /* what this rank sent to its peers in these calls */
  uint64_t time_ns;    /* time inside these calls (0 unless timed) */
  uint64_t wait_ns;    /* of which waiting for peers (0 unless timed) */
} ringcc_stats_row_t;

/* This rank's traffic with one peer (both directions of the pair). */
typedef struct {
  int peer;
  const char *transport; /* how this rank reaches it: "SHM",
                            "NET/Socket/eth0"; NULL for the rank itself */
  uint64_t sent_bytes;
  uint64_t received_bytes;
  uint64_t send_wait_ns; /* waiting for a free slot toward the peer */
  uint64_t recv_wait_ns; /* waiting for the peer's data */
} ringcc_stats_edge_t;

/* The edges of one transport, added up. */
typedef struct {
  const char *transport; /* "SHM", "NET", "P2P" */
  int edges;
  uint64_t sent_bytes;
  uint64_t received_bytes;
  uint64_t wait_ns;
} ringcc_stats_transport_t;

#define RINGCC_STATS_MAX_ROWS 32
#define RINGCC_STATS_MAX_TRANSPORTS 4
#define RINGCC_STATS_MAGIC 0x52435354u /* "RCST" */

typedef struct {
  size_t size;    /* sizeof(ringcc_comm_stats_t): RINGCC_COMM_STATS_INIT */
  unsigned magic; /* RINGCC_STATS_MAGIC: RINGCC_COMM_STATS_INIT */
  /* In: where to put one entry per peer (edges[p] is the edge to rank p),
   * or NULL; room for edges_len entries (nranks covers every peer). */
  ringcc_stats_edge_t *edges;
  int edges_len;
  /* Out: */
  int rank, nranks;
  int timed;           /* 1: the *_ns fields were measured */
  int nedges;          /* entries written to edges: min(edges_len, nranks) */
  uint64_t calls;      /* every collective and send/recv */
  uint64_t bytes;      /* their S, summed */
  uint64_t sent_bytes, received_bytes; /* over every edge */
  uint64_t time_ns;    /* inside calls (timed) */
  uint64_t wait_ns;    /* waiting for peers (timed) */
  int nrows;           /* rows[0 .. nrows): pairs with calls, table order */
  ringcc_stats_row_t rows[RINGCC_STATS_MAX_ROWS];
  int ntransports;
  ringcc_stats_transport_t transports[RINGCC_STATS_MAX_TRANSPORTS];
} ringcc_comm_stats_t;

#define RINGCC_COMM_STATS_INIT                                                 \
  {.size = sizeof(ringcc_comm_stats_t), .magic = RINGCC_STATS_MAGIC}

/* Fills *stats (initialised with RINGCC_COMM_STATS_INIT; set edges and
 * edges_len to get the per-peer entries). A caller built against an older,
 * shorter ringcc_comm_stats_t gets the fields its size covers. */
RINGCC_API ringcc_result_t ringcc_comm_stats(ringcc_comm_t comm,
                                             ringcc_comm_stats_t *stats);

/* ---- collectives ------------------------------------------------------- */
/* In place: sendbuf == recvbuf, or sendbuf == RINGCC_IN_PLACE (input read from
 * recvbuf). */
RINGCC_API ringcc_result_t ringcc_allreduce(const void *sendbuf, void *recvbuf,
                                            size_t count, ringcc_datatype_t dt,
                                            ringcc_op_t op, ringcc_comm_t comm,
                                            ringcc_stream_t stream);
/* sendbuf holds nranks blocks of recvcount; rank r gets the reduced block r.
 * In place: recvbuf == sendbuf + rank*recvcount, or sendbuf == RINGCC_IN_PLACE
 * (all nranks blocks read from recvbuf, result written at recvbuf). */
RINGCC_API ringcc_result_t ringcc_reduce_scatter(const void *sendbuf,
                                                 void *recvbuf,
                                                 size_t recvcount,
                                                 ringcc_datatype_t dt,
                                                 ringcc_op_t op,
                                                 ringcc_comm_t comm,
                                                 ringcc_stream_t stream);
/* Rank r's sendcount elements land at recvbuf + r*sendcount on every rank.
 * In place: sendbuf == recvbuf + rank*sendcount, or sendbuf ==
 * RINGCC_IN_PLACE (own block read from recvbuf + rank*sendcount). */
RINGCC_API ringcc_result_t ringcc_allgather(const void *sendbuf, void *recvbuf,
                                            size_t sendcount,
                                            ringcc_datatype_t dt,
                                            ringcc_comm_t comm,
                                            ringcc_stream_t stream);
RINGCC_API ringcc_result_t ringcc_bcast(void *buf, size_t count,
                                        ringcc_datatype_t dt, int root,
                                        ringcc_comm_t comm,
                                        ringcc_stream_t stream);
/* recvbuf is used at the root only (may be NULL elsewhere). In place:
 * sendbuf == recvbuf at the root, or sendbuf == RINGCC_IN_PLACE at the root. */
RINGCC_API ringcc_result_t ringcc_reduce(const void *sendbuf, void *recvbuf,
                                         size_t count, ringcc_datatype_t dt,
                                         ringcc_op_t op, int root,
                                         ringcc_comm_t comm,
                                         ringcc_stream_t stream);
/* Block j (count elements) of sendbuf goes to rank j; block i of recvbuf comes
 * from rank i. In place: sendbuf == recvbuf or RINGCC_IN_PLACE. */
RINGCC_API ringcc_result_t ringcc_alltoall(const void *sendbuf, void *recvbuf,
                                           size_t count, ringcc_datatype_t dt,
                                           ringcc_comm_t comm,
                                           ringcc_stream_t stream);
/* Point to point, matched in order per (sender, receiver) pair. Both block
 * until the message has been handed over (host buffers). ringcc_recv's peer
 * may be RINGCC_ANY_SOURCE (host buffers): the next message of whichever
 * rank's comes first, of exactly count elements as any ringcc_recv
 * (ringcc_recv_from also says which rank sent it). */
RINGCC_API ringcc_result_t ringcc_send(const void *buf, size_t count,
                                       ringcc_datatype_t dt, int peer,
                                       ringcc_comm_t comm,
                                       ringcc_stream_t stream);
RINGCC_API ringcc_result_t ringcc_recv(void *buf, size_t count,
                                       ringcc_datatype_t dt, int peer,
                                       ringcc_comm_t comm,
                                       ringcc_stream_t stream);

/* ringcc_recv's and ringcc_recv_from's peer: a message from any rank
 * (MPI_ANY_SOURCE's counterpart). Messages of one sender are still received
 * in the order it sent them; when messages of several senders are waiting,
 * they are taken in turn, starting after the rank the previous any-source
 * receive of the communicator took (no sender starves); the first piece of
 * a message decides, and the receive then takes that whole message. */
#define RINGCC_ANY_SOURCE (-2)

/* What a ringcc_recv_from received. */
typedef struct {
  int source;   /* the sender's rank */
  size_t count; /* elements received, at most the count asked for */
} ringcc_recv_status_t;

/* ringcc_recv (peer a rank or RINGCC_ANY_SOURCE) that accepts a message of
 * at most count elements, as MPI_Recv, and fills *status (may be NULL) with
 * its sender and length; a longer message fails the call
 * (RINGCC_ERR_INVALID_USAGE) and leaves the communicator unusable, as any
 * mismatched message does. Host buffers only (RINGCC_ERR_UNSUPPORTED for
 * device buffers). Not in DESIGN.md's fixed set: an addition. */
RINGCC_API ringcc_result_t ringcc_recv_from(void *buf, size_t count,
                                            ringcc_datatype_t dt, int peer,
                                            ringcc_comm_t comm,
                                            ringcc_stream_t stream,
                                            ringcc_recv_status_t *status);
RINGCC_API ringcc_result_t ringcc_barrier(ringcc_comm_t comm,
                                          ringcc_stream_t stream);

/* ---- registered memory -------------------------------------------------
 *
 * Collectives on one host can read their peers' inputs and write their
 * outputs in place, with no FIFO in between, when every rank's buffers are
 * memory the others can map: memory from ringcc_mem_alloc, registered once
 * with the communicator (docs/algorithms.md, "Zero-copy"). Calls on buffers
 * that are not registered run as they always have. */

/* A registration of memory with one communicator. */
typedef struct ringcc_reg *ringcc_reg_t;

/* size bytes (page-aligned, zeroed) that ranks on this host can map. With
 * comm NULL, or a communicator whose rank uses no GPU: host memory, a shared
 * segment with no name (nothing is left in /dev/shm, whatever happens to the
 * process). With a communicator whose rank has a GPU: device memory of that
 * GPU that peers can map (cuMemCreate), as NCCL's ncclMemAlloc. Not
 * collective. */
RINGCC_API ringcc_result_t ringcc_mem_alloc(ringcc_comm_t comm, size_t size,
                                            void **ptr);
/* Frees memory of ringcc_mem_alloc (ptr as it returned). Memory that is
 * still registered may be freed: its registrations no longer count (calls
 * on those addresses take the unregistered path) and their handles stay
 * valid for ringcc_comm_deregister. */
RINGCC_API ringcc_result_t ringcc_mem_free(void *ptr);
/* Collective over comm: every rank registers size bytes at ptr, inside
 * memory of ringcc_mem_alloc, and maps the ranges of the peers on its host,
 * once, here rather than in each call. From then on a collective whose
 * buffers all lie inside registered ranges, on every rank, may run
 * zero-copy; where some rank's buffers are not registered, every rank takes
 * the unregistered path. A rank whose ptr is not such memory makes every
 * rank fail (INVALID_ARGUMENT there, INVALID_USAGE on the others, naming
 * it); the communicator stays usable. */
RINGCC_API ringcc_result_t ringcc_comm_register(ringcc_comm_t comm, void *ptr,
                                                size_t size,
                                                ringcc_reg_t *handle);
/* Collective: every rank passes the handle of the same registration (the
 * k-th of each rank's ringcc_comm_register calls still registered). */
RINGCC_API ringcc_result_t ringcc_comm_deregister(ringcc_comm_t comm,
                                                  ringcc_reg_t handle);

/* Bytes of one element of dt, or 0 for an unknown datatype. */
RINGCC_API size_t ringcc_datatype_size(ringcc_datatype_t dt);
/* "float32", "sum", ... or NULL for an unknown value. */
RINGCC_API const char *ringcc_datatype_name(ringcc_datatype_t dt);
RINGCC_API const char *ringcc_op_name(ringcc_op_t op);

#ifdef __cplusplus
}
#endif
#endif /* RINGCC_H */
