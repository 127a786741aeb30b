/*
 * comm.h - the communicator: who the ranks are (peer info), the settings,
 * the connections, and the state every layer keeps on it. Each module's
 * functions are declared in that module's own header.
 */
#ifndef RCC_COMM_H
#define RCC_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "error.h"
#include "proto.h"
#include "schedule.h"
#include "spin.h"
#include "topo.h"
#include "tuner.h"

struct rcc_bootstrap;
struct rcc_cuda;
struct rcc_registry;
struct rcc_stats;
struct rcc_trace;
struct rcc_transport;

#define RCC_MAX_TRANSPORTS 4
#define RCC_HOSTNAME_LEN 64

/* What every rank tells the others at init (all-gathered). */
struct rcc_peer_info {
  int32_t rank;
  int32_t pid;
  uint64_t host_hash;  /* hostname + boot id, or RINGCC_HOSTID */
  uint64_t pid_space;  /* boot id + pid namespace: pids comparable if equal */
  int64_t chunk_bytes; /* must agree across ranks */
  int64_t net_chunk_bytes; /* must agree across ranks */
  int64_t device_chunk_bytes; /* RINGCC_DEVICE_CHUNK_BYTES or -1: must agree */
  int32_t nslots;      /* must agree across ranks */
  int32_t nchannels;   /* RINGCC_NCHANNELS, or -1: must agree */
  int32_t shm_disable;
  int32_t checksum;    /* RINGCC_CHECKSUM: must agree across ranks */
  uint64_t cma_probe_addr; /* exec_cma.c: a word peers try to read at init */
  uint64_t trace_id;   /* RINGCC_TRACE: a random id (trace.c), else 0 */
  struct rcc_gpu_info gpu; /* device -1 when the rank has no GPU */
  char hostname[RCC_HOSTNAME_LEN];
};

/* Settings resolved from ringcc_config_t, the environment and defaults. */
struct rcc_settings {
  int64_t timeout_ms;
  int algo;
  int64_t chunk_bytes;     /* shared-memory slots */
  int64_t net_chunk_bytes; /* network slots */
  int64_t device_chunk_bytes; /* CUDA P2P device FIFO slots
                                 (RINGCC_DEVICE_CHUNK_BYTES); -1: by the
                                 memory they take (p2p.c) */
  int nslots;
  int nchannels;   /* RINGCC_NCHANNELS: channels of collective FIFOs; -1:
                      by kind (host 1, device by link: rcc_cuda_channels) */
  int shm_disable;
  int cuda_device; /* RINGCC_CUDA_DEVICE: -1 current, -2 none */
  int p2p_disable; /* RINGCC_P2P_DISABLE */
  int check;
  int spin;   /* polls before yielding (RINGCC_SPIN); -1: by CPUs */
  int yields; /* sched_yield()s before sleeping (RINGCC_YIELDS); -1 */
  int net_zerocopy; /* network sends from the user's buffers
                       (RINGCC_NET_ZEROCOPY) */
  int checksum;     /* CRC-32C of network payloads (RINGCC_CHECKSUM) */
};

/* Where a communicator stands, kept up to date by the executor for error
 * messages and the hang report (report.c). ringcc_comm_report() may read it
 * from another thread while a collective runs, so every field is written and
 * read with relaxed atomics (RCC_PUT / RCC_GET): each value is one the
 * executor wrote, though a report may mix two neighbouring steps. */
struct rcc_progress {
  int active;                  /* a collective is running */
  int coll;
  int alg;                     /* enum rcc_alg */
  int channel;                 /* of the step (several run in turn) */
  uint64_t step;
  uint64_t nsteps;
  int kind;                    /* of the current step: enum rcc_step_kind */
  int block;
  size_t nelem;
  int peer;                    /* waited for, or -1 */
  const char *waiting_for;     /* "data from", "a free slot to send to" */
  const struct rcc_conn *conn; /* the connection waited on */
  int waiting_send;            /* 1: for a free slot on conn; 0: for data */
  const uint32_t *board_seq;   /* one-shot board: the region waited on (its
                                  seq word), else NULL */
  uint32_t board_want;         /* ... and the call waited for */
};
#define RCC_PUT(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

#define RCC_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

struct ringcc_comm {
  int rank;
  int nranks;
  struct rcc_settings set;
  ringcc_config_t config; /* as given (or RINGCC_CONFIG_INIT), for split */
  struct rcc_bootstrap *boot;
  struct rcc_peer_info *peers; /* [nranks] */

  /* Ring order: ring[pos] is a rank; ranks of one host are contiguous. */
  int *ring;
  int ring_pos;
  int *ring_rev;           /* the same ring the other way round (channels) */
  int ring_pos_rev;

  /* Connections: kind k has kind_channels[k] FIFOs per peer and
   * direction, send_conn[k][channel * nranks + peer] (rcc_send_conn);
   * .fifo == NULL where no edge exists. Point-to-point kinds have one. */
  struct rcc_conn *send_conn[RCC_MAX_CONN_KINDS];
  struct rcc_conn *recv_conn[RCC_MAX_CONN_KINDS];
  int kind_channels[RCC_MAX_CONN_KINDS];
  int nkinds;              /* kinds of FIFOs per peer: host only, or + device */
  struct rcc_cuda *cuda;   /* device-side state (cuda.c); NULL without GPU */
  /* Set by cuda.c once device FIFOs exist: 1 while a kernel of this
   * communicator may run. An engine polls instead of sleeping then, since
   * a kernel that publishes into a staged FIFO wakes nobody. */
  int (*device_busy)(struct ringcc_comm *comm);
  const struct rcc_transport **edge_transport; /* [nranks] */
  void *transport_state[RCC_MAX_TRANSPORTS];

  /* Step sizes every rank derives alike: the ring's (its smallest edge slot)
   * and the whole communicator's (for schedules that use every edge). */
  size_t ring_chunk_bytes;
  size_t all_chunk_bytes;
  /* The same for device collectives, over the device FIFOs (CUDA P2P ones
   * have slots of their own, RINGCC_DEVICE_CHUNK_BYTES; staged ones the
   * host transports' slots). */
  size_t dev_ring_chunk_bytes;
  size_t dev_all_chunk_bytes;
  struct rcc_tuner tuner;  /* the cost model, the same on every rank */
  struct {                 /* the last choice (tuner.c), reused by a call of
                              the same collective, size and buffers */
    int valid, coll, device;
    size_t bytes;
    int alg;
    size_t chunk_bytes;
    int channels;
  } tune_last;

  uint64_t seq;            /* collectives issued on this communicator */
  struct rcc_progress progress;
  struct rcc_stats *stats; /* counters (stats.c); set from init's end */
  struct rcc_trace *trace; /* RINGCC_TRACE's steps (trace.c); NULL: off */
  int report_seen;         /* report signals handled (report.c) */
  void *scratch;           /* staging for in-place alltoall */
  size_t scratch_bytes;
  /* The communicator's key (rcc_bootstrap_key): derived from the id's
   * secret at the rendezvous, never sent; every network connection proves
   * it (net.c, net_socket.c), and ringcc_comm_split derives the new
   * communicators' secrets from it. */
  uint8_t key[32];
  uint64_t splits;         /* ringcc_comm_split calls so far (alike on all) */
  int64_t init_deadline;   /* for transports' connect phase */
  uint64_t cma_probe;      /* exec_cma.c */
  int cma_ok;              /* the direct large-message path is usable */
  int cma_ptracer;         /* holds a share of PR_SET_PTRACER_ANY (exec_cma.c) */
  /* The one-shot board (exec_host.c): each rank's two regions, in its shm
   * segment (shm.c); set where this rank maps every rank's segment. */
  char **board;            /* [nranks] region 0 of each rank's board */
  size_t board_stride;     /* region 1 is at board[r] + board_stride */
  size_t board_bytes;      /* data a region holds */
  int board_ok;            /* every rank has every board (agreed at init) */
  uint32_t board_seq;      /* calls made on the board */
  /* Registered memory and the zero-copy flags (registry.h); NULL until the
   * first ringcc_comm_register. */
  struct rcc_registry *registry;
  volatile int aborted;
  /* Set once by a proxy thread when the network fails under a collective;
   * every wait checks it. */
  volatile int async_error;
  char async_message[RCC_ERRLEN];
  /* Set by cuda.c where kernels may run: a host-mapped word the kernels
   * poll in their waits. The first failure this rank learns of (a dead
   * rank, failure.c; a network error, error.c) is stored there as a
   * ringcc_result_t, so waiting kernels leave (rcc_comm_tell_kernels). */
  uint32_t *fail_word;
  /* The first rank known dead (failure.c): 1 + rank in the low 32 bits,
   * 1 + the rank that told this one in the high 32; 0 while none is. */
  uint64_t dead;
  struct rcc_spin spin;    /* how waits poll, adapted as they go (spin.h) */
  /* Sticky: the communicator is unusable. Written and read with atomics
   * (rcc_comm_set_fatal, rcc_comm_fatal): ringcc_comm_get_async_error may
   * run in another thread (a framework's watchdog) during a call. */
  ringcc_result_t fatal;
  pthread_mutex_t error_lock; /* last_error's writers (error.c) */
  char last_error[RCC_ERRLEN];

  /* Who may use it (live.c): the magic word (cleared at destroy), the
   * process that made it and its fork generation (a forked child's calls
   * are refused), the calls inside and whether one moves data (busy: one at
   * a time, destroy refuses), and closing (destroy or abort under way). */
  uint32_t magic;
  int pid;
  uint64_t fork_gen;
  int users;
  int busy;
  const char *inside;      /* the busy call's name */
  int closing;
  int forked;              /* destroy in a forked child: free memory only;
                              transports then close descriptors and nothing
                              the parent's peers could notice */
};

/* The FIFO of connection kind `kind`, channel ch, to or from peer. */
static inline struct rcc_conn *rcc_send_conn(const struct ringcc_comm *comm,
                                             int kind, int ch, int peer) {
  return &comm->send_conn[kind][(size_t)ch * (size_t)comm->nranks +
                                (size_t)peer];
}
static inline struct rcc_conn *rcc_recv_conn(const struct ringcc_comm *comm,
                                             int kind, int ch, int peer) {
  return &comm->recv_conn[kind][(size_t)ch * (size_t)comm->nranks +
                                (size_t)peer];
}

/* FIFO sets: every (kind, channel) of the first nkinds kinds, numbered kind
 * by kind; a transport makes one FIFO per set, peer and direction. */
static inline int rcc_fifo_sets(const struct ringcc_comm *comm, int nkinds) {
  int sets = 0;
  for (int k = 0; k < nkinds; k++)
    sets += comm->kind_channels[k];
  return sets;
}
static inline int rcc_fifo_set(const struct ringcc_comm *comm, int kind,
                               int ch) {
  return rcc_fifo_sets(comm, kind) + ch;
}
/* The kind and channel of set number set. */
static inline void rcc_fifo_set_kind(const struct ringcc_comm *comm, int set,
                                     int *kind, int *ch) {
  int k = 0;
  while (k < RCC_MAX_CONN_KINDS - 1 && set >= comm->kind_channels[k])
    set -= comm->kind_channels[k++];
  *kind = k;
  *ch = set;
}

#endif /* RCC_COMM_H */
