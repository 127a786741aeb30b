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

/* Result codes. After a failed call the communicator is usable again
 * (the failure was local: every FIFO is at a message boundary) for
 * RINGCC_ERR_INVALID_ARGUMENT, RINGCC_ERR_OUT_OF_MEMORY, a call wrong in
 * this state found before anything moved, a RINGCC_CHECK mismatch, and the
 * point-to-point mismatches: a receive whose message does not match its
 * count (the receive takes the rest of the message, or, for a message read
 * in place, refuses it, and then its sender fails too), a group's send to
 * itself that does not match its receive, a receive from RINGCC_ANY_SOURCE
 * whose peers all left. Every other failure (RINGCC_ERR_TIMEOUT,
 * _PEER_FAILED, _NETWORK, _SYSTEM, _ABORTED, a collective whose ranks'
 * counts differ) makes it unusable: later calls return the same code at
 * once; destroy or shrink it. docs/reliability.md has the table. */
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
   * saturates to +-448 (as CUDA's __NV_SATFINITE conversion, NCCL and
   * torch's float8_e4m3fn casts do; +-Inf inputs too; ml_dtypes and OCP's
   * non-saturating mode give NaN from 480 up instead); e5m2 overflows to
   * +-Inf like float16. NaNs stay NaN. Host buffers only: on device buffers
   * the call returns RINGCC_ERR_UNSUPPORTED. */
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
  RINGCC_ALGO_TREE = 2, /* "tree": double binary tree AllReduce; binomial
                           tree Gather and Scatter */
  RINGCC_ALGO_DIRECT = 3, /* "direct": Gather and Scatter straight to or
                             from the root; for AllReduce, deprecated (the
                             name before oneshot and cma had theirs), it
                             forces either (one-shot where the message fits
                             one slot, else cross-memory attach where it
                             runs) */
  RINGCC_ALGO_RECDOUBLING = 4, /* "recdoubling": recursive-doubling
                                  AllReduce */
  RINGCC_ALGO_RABENSEIFNER = 5, /* "rabenseifner": halving reduce-scatter +
                                   doubling allgather AllReduce */
  RINGCC_ALGO_ONESHOT = 6, /* "oneshot": one-shot AllReduce (over the FIFOs,
                              or the shared board where it runs) */
  RINGCC_ALGO_CMA = 7, /* "cma": cross-memory attach (one host, from
                          256 KiB; AllToAllv at any size, where it is
                          also the default) */
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
/* ULFM's MPI_Comm_shrink, NCCL's ncclCommShrink: a communicator of the
 * ranks of comm that are not excluded, renumbered in order. Called by those
 * ranks only, on a healthy communicator or one that lost ranks (after
 * RINGCC_ERR_PEER_FAILED). exclude NULL (nexclude 0): the ranks known to
 * have failed, agreed among the survivors (every survivor gets the same
 * communicator, or an error). A failure during the shrink is an error,
 * never a hang. The new communicator reuses the survivors' shared-memory
 * FIFOs and the network links they have made already between each other
 * (TCP, verbs; each resynced at a message boundary first, so that what a
 * failed call left in a stream never reaches it; a revoked or aborted
 * comm's links are not reused). Afterwards comm, if it had failed or
 * exclude was NULL, is only fit for destroy or abort; a healthy comm shrunk with an exclude list stays
 * usable, but never at the same time as the new one (docs/reliability.md).
 * Either may be destroyed first. */
RINGCC_API ringcc_result_t ringcc_comm_shrink(ringcc_comm_t comm,
                                              const int *exclude, int nexclude,
                                              ringcc_comm_t *out);
RINGCC_API ringcc_result_t ringcc_comm_rank(ringcc_comm_t comm, int *rank);
RINGCC_API ringcc_result_t ringcc_comm_size(ringcc_comm_t comm, int *size);
RINGCC_API ringcc_result_t ringcc_comm_destroy(ringcc_comm_t comm);
RINGCC_API ringcc_result_t ringcc_comm_abort(ringcc_comm_t comm);
/* Stops this rank's work on comm without freeing it (NCCL's ncclCommRevoke;
 * the local half of ULFM's MPIX_Comm_revoke). comm: a live communicator;
 * any thread may call this, also while another thread is inside a call on
 * comm (that is what it is for: a watchdog stopping a call stuck on a peer
 * that does not come). Local: not collective, nothing is sent.
 *   - What is in flight on this rank ends with RINGCC_ERR_ABORTED: a
 *     blocking call of another thread (at its next wait, within 20 ms), the
 *     requests of ringcc_group_end_async (queued or running; ringcc_wait and
 *     ringcc_test return the error), device kernels (they leave their
 *     waits). Their output buffers hold undefined data.
 *   - It returns once comm is quiescent: no call of another thread inside,
 *     no request in flight, no kernel running. A call that does not leave
 *     within timeout_ms + 1 s (one blocked outside the FIFOs: a split's or
 *     shrink's socket wait) makes it return RINGCC_ERR_TIMEOUT, comm
 *     revoked nonetheless.
 *   - From then on every collective, send, receive, group and registration
 *     on comm fails with RINGCC_ERR_ABORTED, and ringcc_comm_get_async_error
 *     says RINGCC_ERR_ABORTED (or the failure recorded before). What still
 *     works: ringcc_comm_shrink (its survivors may be revoked or not),
 *     ringcc_comm_split (when every rank calls it: it runs on the
 *     bootstrap's sockets, not the FIFOs), ringcc_comm_destroy, _abort, and
 *     the queries (rank, size, report, stats, last error).
 *   - Peers are not told: a peer waiting for this rank goes on waiting
 *     until it revokes too, its deadline passes, or this rank destroys comm.
 * RINGCC_ERR_INVALID_USAGE when comm was revoked already;
 * RINGCC_ERR_INVALID_ARGUMENT when it is NULL or not a live communicator
 * (destroyed, aborted). */
RINGCC_API ringcc_result_t ringcc_comm_revoke(ringcc_comm_t comm);
/* The CUDA device (a CUDA runtime index in this process) that comm's rank
 * uses for device buffers, into *device; -1 where it carries host buffers
 * only: a build without CUDA, RINGCC_CUDA_DEVICE=none (config cuda_device
 * RINGCC_CUDA_DEVICE_NONE), no usable GPU, or no current CUDA context in
 * the thread that made comm (with cuda_device unset, ringcc uses the
 * device of that context: the current device at init, as NCCL). */
RINGCC_API ringcc_result_t ringcc_comm_cuda_device(ringcc_comm_t comm,
                                                   int *device);
/* The device of the calling thread's current CUDA context, into *device
 * (what cudaGetDevice says), or -1 where the thread has no current context
 * or this build has no CUDA. Creates no context. */
RINGCC_API ringcc_result_t ringcc_cuda_current_device(int *device);
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
  /* Of received_bytes, those a network connection wrote straight into the
   * caller's buffer (no copy out of a slot): large blocks whose receive
   * was posted before they came, or that waited in the socket for it
   * (RINGCC_NET_ZEROCOPY, RINGCC_NET_PARK_US). */
  uint64_t landed_bytes;
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
/* Point to point, matched in order per (sender, receiver) pair. Outside a
 * group both block until the message has been handed over (host buffers):
 * a send larger than the FIFO (512 KiB over shared memory, 2 MiB over TCP by
 * default) waits for its receiver, so two ranks that both send first
 * deadlock until the timeout; post such exchanges in a group (below).
 * Outside a group, peer must be another rank; inside one it may be this rank
 * (a copy, matched in order with this rank's receive from itself).
 * Outside a group, ringcc_recv's peer may be RINGCC_ANY_SOURCE (host
 * buffers): the next message of whichever rank's comes first, of exactly
 * count elements as any ringcc_recv (ringcc_recv_from also says which rank
 * sent it). A receive from RINGCC_ANY_SOURCE inside a group is refused
 * (RINGCC_ERR_INVALID_USAGE). */
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
 * a message decides, and the receive then takes that whole message. A peer
 * that destroyed its communicator is not waited for (its messages sent
 * before still come); once every peer has, the receive returns
 * RINGCC_ERR_INVALID_USAGE. A peer that died fails it (PEER_FAILED). */
#define RINGCC_ANY_SOURCE (-2)

/* What a ringcc_recv_from received. */
typedef struct {
  int source;   /* the sender's rank */
  size_t count; /* elements received, at most the count asked for */
} ringcc_recv_status_t;

/* ringcc_recv (peer a rank or RINGCC_ANY_SOURCE) that accepts a message of
 * at most count elements, as MPI_Recv, and fills *status (may be NULL) with
 * its sender and length; a longer message fails the call
 * (RINGCC_ERR_INVALID_USAGE, naming the sender and count), as a message
 * of another length fails ringcc_recv: the receive takes the rest of the
 * message and drops it (or refuses a message read in place, whose send then
 * fails too, naming the receive), and the communicator stays usable. Host
 * buffers only (RINGCC_ERR_UNSUPPORTED for
 * device buffers). Not in DESIGN.md's fixed set: an addition. */
RINGCC_API ringcc_result_t ringcc_recv_from(void *buf, size_t count,
                                            ringcc_datatype_t dt, int peer,
                                            ringcc_comm_t comm,
                                            ringcc_stream_t stream,
                                            ringcc_recv_status_t *status);
RINGCC_API ringcc_result_t ringcc_barrier(ringcc_comm_t comm,
                                          ringcc_stream_t stream);

/* ---- premul-sum ops ----------------------------------------------------
 *
 * NCCL's ncclRedOpCreatePreMulSum: an op that multiplies each rank's input
 * by a scalar, then sums. For allreduce, reduce and reduce_scatter.
 *
 * *op gets a new op of comm, for calls on datatype dt (any of them; integers
 * multiply modulo 2^bits). The scalar is read from host memory now, as one
 * value of dt: a later change to *scalar changes nothing. Where the multiply
 * happens: on each rank, over its own input, before any byte moves (into
 * staging the communicator keeps), by the datatype's product: float16,
 * bfloat16 and float8 multiply in float and round once to nearest even,
 * float32 and float64 round once in their own type; then the sum rounds
 * once per step as RINGCC_SUM does. So the result is sum_r round(x_r * s),
 * not round(s * sum_r x_r). Every algorithm runs it (the staging is not
 * registered memory: where a sum over registered buffers would run
 * zero-copy, a premul-sum takes the copying algorithms). The op is this
 * communicator's only (not its
 * splits'), lives until ringcc_op_destroy or the communicator's destroy,
 * and is refused with RINGCC_ERR_INVALID_ARGUMENT ('op') by a call of
 * another datatype and after it is destroyed (op values are not reused).
 * Host buffers only: on device buffers a call with it returns
 * RINGCC_ERR_UNSUPPORTED. Safe from any thread, also while a collective
 * runs on comm. */
RINGCC_API ringcc_result_t ringcc_op_create_premul_sum(ringcc_op_t *op,
                                                       const void *scalar,
                                                       ringcc_datatype_t dt,
                                                       ringcc_comm_t comm);
/* Frees an op of ringcc_op_create_premul_sum; a built-in op, an op of
 * another communicator or one destroyed already is
 * RINGCC_ERR_INVALID_ARGUMENT naming 'op'. */
RINGCC_API ringcc_result_t ringcc_op_destroy(ringcc_op_t op,
                                             ringcc_comm_t comm);

/* The tuner's predicted time, in seconds, of one collective on host
 * buffers of comm: collective is "allreduce", "reduce_scatter",
 * "allgather", "bcast", "reduce" or "alltoall", count and dt as the call
 * would give them. The cost model's time for the algorithm the tuner would
 * pick (docs/tuning.md); nothing runs, nothing is sent. 0 on one rank. */
RINGCC_API ringcc_result_t ringcc_comm_predict(ringcc_comm_t comm,
                                               const char *collective,
                                               size_t count,
                                               ringcc_datatype_t dt,
                                               double *seconds);

/* ---- groups and requests ------------------------------------------------
 *
 * Groups, as NCCL's ncclGroupStart/End: per thread, and nestable (only the
 * outermost end runs anything). Between ringcc_group_start and
 * ringcc_group_end, collective and point-to-point calls are checked at the
 * call (a bad argument fails that call with its error and leaves the group
 * as it was) and kept; the end runs them and returns when all are done:
 *   - per communicator, its collectives in call order (every rank must make
 *     the same collective calls on it in the same order, as outside a
 *     group), then its sends and receives all together: each moves whenever
 *     its FIFO lets it, so sends and receives of any size in any order
 *     cannot deadlock (both ranks sending 8 MiB first, an alltoallv written
 *     as a send and a recv per peer); messages between two ranks match in
 *     the order they were posted, across groups too;
 *   - several communicators (one thread driving the communicators of
 *     several ranks, as with ncclCommInitAll) progress at once, each on its
 *     own progress thread (below).
 * The buffers must stay valid and untouched until the group's end (or its
 * request's completion). A send to this rank itself, inside a group, is a
 * copy to the matching receive from itself. Grouped sends and receives take
 * host buffers. ringcc_group_end without ringcc_group_start is
 * RINGCC_ERR_INVALID_USAGE; a failure at the end returns the first one
 * (ringcc_comm_last_error of its communicator says which). A send or
 * receive that fails locally (a mismatched message, a send to itself that
 * does not match its receive: see the result codes) does not stop the
 * group's others, which run to their end.
 *
 * Requests. ringcc_group_end_async ends the outermost group like
 * ringcc_group_end but returns at once with *req: the work runs on the
 * communicator's progress thread (one per communicator, started at its
 * first group that needs it, ended by destroy). A single collective becomes
 * non-blocking as a one-call group:
 *
 *     ringcc_group_start();
 *     ringcc_allreduce(x, x, n, RINGCC_FLOAT32, RINGCC_SUM, comm, NULL);
 *     ringcc_request_t req;
 *     ringcc_group_end_async(&req);
 *     ... compute, not touching x ...
 *     ringcc_wait(req);
 *
 * Requests on one communicator complete in the order they were made. A
 * request whose communicator fails (a peer dies, the deadline passes,
 * ringcc_comm_abort) completes with that error. While requests are in
 * flight on a communicator, a blocking call on it from the user's thread
 * (or a group that ends with ringcc_group_end) runs after them: it waits
 * for them first. ringcc_comm_destroy with requests in flight is refused
 * with RINGCC_ERR_INVALID_USAGE (wait for them first); ringcc_comm_abort
 * ends them with RINGCC_ERR_ABORTED. Every request must be completed by
 * ringcc_wait or by ringcc_test reporting done (which frees it). */
RINGCC_API ringcc_result_t ringcc_group_start(void);
RINGCC_API ringcc_result_t ringcc_group_end(void);
typedef struct ringcc_request *ringcc_request_t;
/* Inside an inner group: RINGCC_ERR_INVALID_USAGE (end those with
 * ringcc_group_end). An empty group gives a request that is done. */
RINGCC_API ringcc_result_t ringcc_group_end_async(ringcc_request_t *req);
/* Never blocks. *done = 0: still running (req stays valid), returns
 * RINGCC_SUCCESS; *done = 1: req is freed and the call returns the
 * request's result. */
RINGCC_API ringcc_result_t ringcc_test(ringcc_request_t req, int *done);
/* Waits for req, frees it, and returns its result. */
RINGCC_API ringcc_result_t ringcc_wait(ringcc_request_t req);
/* ---- gather, scatter, uneven collectives ---------------------------------
 *
 * Counts and displacements are in elements of the datatype (as MPI's, not
 * bytes), size_t (MPI's are int: no 2^31 limit). Every rank passes arrays
 * of nranks entries where an argument is an array; an array is read during
 * the call only. Zero counts are allowed anywhere (an empty block moves no
 * message). Where a count a rank sends and the count its peer receives
 * differ, the call fails with RINGCC_ERR_INVALID_USAGE (a piece of the
 * wrong size; the communicator is then unusable) or, where one side
 * expects nothing, waits until the deadline: they are the caller's to keep
 * equal, as in MPI. With RINGCC_CHECK=1 every rank fails alike before any
 * data moves, naming the ranks and the argument ('sendcounts'[j],
 * 'recvcounts'[q]), and the communicator stays usable; so does an
 * AllToAllv over shared memory on one host whose pair of ranks disagrees
 * (both fail, naming each other; the other blocks move).
 * Host buffers: every algorithm. Device buffers: Gather and Scatter run
 * (the direct schedule, enqueued on stream); AllGatherv and AllToAllv on
 * device buffers return RINGCC_ERR_UNSUPPORTED (docs/cuda.md). */

/* Rank r's sendcount elements land at recvbuf + r*sendcount of the root
 * (MPI_Gather with equal send and receive counts). recvbuf is used at the
 * root only (may be NULL elsewhere). In place, at the root: sendbuf ==
 * RINGCC_IN_PLACE (MPI's form) or sendbuf == recvbuf + root*sendcount; the
 * root's block is then already in place. */
RINGCC_API ringcc_result_t ringcc_gather(const void *sendbuf, void *recvbuf,
                                         size_t sendcount,
                                         ringcc_datatype_t dt, int root,
                                         ringcc_comm_t comm,
                                         ringcc_stream_t stream);
/* Block r (recvcount elements) of the root's sendbuf goes to rank r's
 * recvbuf (MPI_Scatter with equal counts). sendbuf is used at the root only
 * (may be NULL elsewhere). In place, at the root: recvbuf ==
 * RINGCC_IN_PLACE (MPI's form: the root keeps its block in sendbuf) or
 * recvbuf == sendbuf + root*recvcount. */
RINGCC_API ringcc_result_t ringcc_scatter(const void *sendbuf, void *recvbuf,
                                          size_t recvcount,
                                          ringcc_datatype_t dt, int root,
                                          ringcc_comm_t comm,
                                          ringcc_stream_t stream);
/* Rank r's sendcount elements land at recvbuf + displs[r] on every rank;
 * recvcounts[r] must equal rank r's sendcount (checked on rank r), and
 * recvcounts and displs must be the same on every rank. Blocks may come in
 * any order in recvbuf and leave gaps (left untouched); they must not
 * overlap, and recvbuf must hold max(displs[r] + recvcounts[r]) elements.
 * (NCCL has no AllGatherv; MPI_Allgatherv's arguments, in this order.) In
 * place: sendbuf == RINGCC_IN_PLACE (the rank's block already at recvbuf +
 * displs[rank]; sendcount must still equal recvcounts[rank]) or sendbuf ==
 * recvbuf + displs[rank]. */
RINGCC_API ringcc_result_t ringcc_allgatherv(const void *sendbuf,
                                             size_t sendcount, void *recvbuf,
                                             const size_t *recvcounts,
                                             const size_t *displs,
                                             ringcc_datatype_t dt,
                                             ringcc_comm_t comm,
                                             ringcc_stream_t stream);
/* sendcounts[j] elements from sendbuf + sdispls[j] go to rank j, which
 * receives them as its recvcounts[i] elements at recvbuf + rdispls[i] (i
 * this rank): sendcounts[j] here must equal recvcounts[i] on rank j, as in
 * MPI_Alltoallv (and torch's all_to_all_single with split sizes, whose
 * displacements are the running sums of the splits). The receive blocks
 * must not overlap; send blocks may. In place: sendbuf == RINGCC_IN_PLACE
 * (MPI's form: each block j is sent from recvbuf + rdispls[j] and replaced
 * there by rank j's; sendcounts and sdispls are ignored, so recvcounts[j]
 * here must equal recvcounts[i] on rank j). Send and receive buffers
 * that overlap otherwise are refused. */
RINGCC_API ringcc_result_t ringcc_alltoallv(const void *sendbuf,
                                            const size_t *sendcounts,
                                            const size_t *sdispls,
                                            void *recvbuf,
                                            const size_t *recvcounts,
                                            const size_t *rdispls,
                                            ringcc_datatype_t dt,
                                            ringcc_comm_t comm,
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
/* size bytes (zeroed) of device memory on CUDA device `device` (>= 0),
 * which ranks on this host can map, as ringcc_mem_alloc gives to a
 * communicator whose rank has that GPU: for memory made before the
 * communicator, as NCCL's ncclMemAlloc (on the current device). Not
 * collective. RINGCC_ERR_UNSUPPORTED in a build without CUDA; the CUDA
 * error where device is not a usable GPU. Free it with ringcc_mem_free. */
RINGCC_API ringcc_result_t ringcc_mem_alloc_device(int device, size_t size,
                                                   void **ptr);
/* Frees memory of ringcc_mem_alloc or _alloc_device (ptr as it returned).
 * Memory that is still registered may be freed: its registrations no
 * longer count (calls on those addresses take the unregistered path) and
 * their handles stay valid for ringcc_comm_deregister. */
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
