/*
 * comm.h - the communicator as every layer sees it: who the ranks are, the
 * settings, the ring, the connections, the error, fatal and dead words, and
 * who may use it. It sits at the bottom (lib/util) and includes nothing of
 * a higher folder: what a module keeps on a communicator is its own struct,
 * defined in its own header and reached here through an opaque pointer
 * (the CUDA side, the board, cross-memory attach, the tuner, the registry,
 * the statistics, the trace). Where a lower layer must see what a higher one
 * does, the higher one leaves it here as data (fail_word, kernels_started,
 * lost_wake, shm_extra_bytes), never as a callback. The lifecycle (init,
 * split, destroy) is lib/comm/; each module's functions are declared in its
 * own header.
 */
#ifndef RCC_COMM_H
#define RCC_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "connkind.h"
#include "error.h"
#include "ringcc.h"
#include "spin.h"

struct rcc_board_set;
struct rcc_bootstrap;
struct rcc_cma;
struct rcc_conn;
struct rcc_cuda;
struct rcc_links;
struct rcc_peer_info; /* topo.h */
struct rcc_registry;
struct rcc_stats;
struct rcc_trace;
struct rcc_transport;
struct rcc_tuner;

/* Entries rcc_transports[] may have (transport.c checks at compile time). */
#define RCC_MAX_TRANSPORTS 4

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
  int thp; /* huge pages for buffers peers read in place (RINGCC_THP,
              thp.h) */
  int64_t net_park_us; /* how long a network payload may wait in the socket
                          for its receiver to land it (RINGCC_NET_PARK_US,
                          net_proxy.c); 0: never */
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
  /* Set by cuda.c once device FIFOs exist (kernels_done first, then
   * kernels_started, with release): the host-mapped counts of this
   * communicator's kernels that started and that ended, kept by the kernels.
   * A kernel runs while they differ: an engine polls instead of sleeping
   * then, since a kernel that publishes into a staged FIFO wakes nobody. */
  const uint32_t *kernels_started;
  const uint32_t *kernels_done;
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
  struct rcc_tuner *tuner; /* the cost model, the same on every rank
                              (tuner.h); NULL until init sets it up */

  uint64_t seq;            /* collectives issued on this communicator */
  struct rcc_progress progress;
  struct rcc_stats *stats; /* counters (stats.c); set from init's end */
  struct rcc_trace *trace; /* RINGCC_TRACE's steps (trace.c); NULL: off */
  int report_seen;         /* report signals handled (report.c) */
  int any_source_next;     /* where an any-source receive starts looking
                              (exec_host.c rcc_exec_host_recv_from) */
  void *scratch;           /* staging for in-place alltoall */
  size_t scratch_bytes;
  void *a2av_scratch;      /* AllToAllv's per-peer plan (exec_a2av.c):
                              made at its first call, for nranks */
  /* Premul-sum ops (coll/premul.c): the live ones, under premul_lock (made
   * and destroyed from any thread, read by the collective that uses one),
   * and the staging of the scaled inputs. */
  struct rcc_premul_op *premul;
  int npremul, premul_cap;
  unsigned premul_next;    /* the next op's number */
  pthread_mutex_t premul_lock;
  void *premul_stage;
  size_t premul_stage_bytes;
  /* The communicator's key (rcc_bootstrap_key): derived from the id's
   * secret at the rendezvous, never sent; every network connection proves
   * it (net.c, net_socket.c), and ringcc_comm_split derives the new
   * communicators' secrets from it. */
  uint8_t key[32];
  uint64_t splits;         /* ringcc_comm_split calls so far (alike on all) */
  uint64_t shrinks;        /* ringcc_comm_shrink calls so far (shrink.c) */
  /* During the init of a shrunk communicator only (shrink.c): the one it
   * was shrunk from, and each rank's number there ([nranks]); the
   * transports that can take over the parent's intact links read them
   * (shm.c). NULL otherwise. */
  const struct ringcc_comm *parent;
  const int *parent_rank;
  void *parent_state;      /* the parent's state of the transport being set
                              up (transport.c), NULL without a parent */
  int links_reused;        /* of the parent's, by the transports at init */
  int net_links_reused;    /* network links (peer x FIFO set) of the
                              parent's, among those (net.c) */
  int net_peers_reused;    /* network peers with one of those or more */
  int net_peers_fresh;     /* network peers with a link of its own */
  struct rcc_links *links; /* FIFOs shared with a shrunk communicator or
                              its parent (links.h); NULL: none */
  int64_t init_deadline;   /* for transports' connect phase */
  struct rcc_cma *cma;     /* cross-memory attach (exec_cma.c); NULL until
                              init prepares it */
  struct rcc_board_set *board; /* the one-shot board (board.h); NULL: none */
  /* Bytes each rank's shared-memory segment keeps after its FIFOs (set
   * before the transports connect by the board, which lives there; shm.c
   * reserves and maps them, and the board finds them through the table:
   * rcc_transports_extra). */
  size_t shm_extra_bytes;
  /* Futex words that sleepers outside the FIFOs wait on (the board's seq
   * words, set by board.c): the failure code (failure.c) wakes them when a
   * peer is lost. */
#define RCC_LOST_WAKE_MAX 2
  uint32_t *lost_wake[RCC_LOST_WAKE_MAX];
  /* Registered memory and the zero-copy flags (registry.h); NULL until the
   * first ringcc_comm_register. */
  struct rcc_registry *registry;
  volatile int aborted;
  /* Set once by ringcc_comm_revoke (any thread): every wait checks it, as
   * aborted, and the communicator is fatal from then on (comm.c). */
  volatile int revoked;
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
  /* Set by an executor, read by the call that ran it (one thread, inside
   * the communicator): the current call's failure left every FIFO in a
   * known state (a mismatched message taken whole or refused, see
   * rcc_comm_failed_locally), so the communicator stays usable. Cleared
   * at each call's start. */
  int failed_locally;
  /* Collectives that ran RINGCC_CHECK's agreement so far (coll.c): the
   * number it compares, the same on ranks that made the same collectives
   * whatever sends and receives some of them made between (those count in
   * seq). */
  uint64_t checked_calls;
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
