/*
 * comm.h - the communicator, as the files of the core see it.
 */
#ifndef RCC_COMM_H
#define RCC_COMM_H

#include <stdint.h>

#include "error.h"
#include "proto.h"
#include "schedule.h"
#include "topo.h"
#include "transport.h"
#include "tuner.h"

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
  int32_t nslots;      /* must agree across ranks */
  int32_t shm_disable;
  uint64_t cma_probe_addr; /* coll_cma.c: a word peers try to read at init */
  struct rcc_gpu_info gpu; /* device -1 when the rank has no GPU */
  uint8_t secret[16];  /* rank 0's becomes the communicator's secret */
  char hostname[RCC_HOSTNAME_LEN];
};

/* Settings resolved from ringcc_config_t, the environment and defaults. */
struct rcc_settings {
  int64_t timeout_ms;
  int algo;
  int64_t chunk_bytes;     /* shared-memory slots */
  int64_t net_chunk_bytes; /* network slots */
  int nslots;
  int shm_disable;
  int cuda_device; /* RINGCC_CUDA_DEVICE: -1 current, -2 none */
  int p2p_disable; /* RINGCC_P2P_DISABLE */
  int check;
  int spin;   /* polls before yielding (RINGCC_SPIN) */
  int yields; /* sched_yield()s before sleeping (RINGCC_YIELDS) */
  int net_zerocopy; /* network sends from the user's buffers
                       (RINGCC_NET_ZEROCOPY) */
};

/* Where a communicator stands, kept up to date by the executor for error
 * messages and the hang report (report.c). ringcc_comm_report() may read it
 * from another thread while a collective runs, so every field is written and
 * read with relaxed atomics (RCC_PUT / RCC_GET): each value is one the
 * executor wrote, though a report may mix two neighbouring steps. */
struct rcc_progress {
  int active;                  /* a collective is running */
  int coll;
  int algo_sched;              /* enum rcc_sched_kind */
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

  /* Connections: [kind][peer]; .fifo == NULL where no edge exists. */
  struct rcc_conn *send_conn[RCC_MAX_CONN_KINDS];
  struct rcc_conn *recv_conn[RCC_MAX_CONN_KINDS];
  int nkinds;              /* kinds of FIFOs per peer: host only, or + device */
  struct rcc_cuda *cuda;   /* device-side state (cuda.c); NULL without GPU */
  const struct rcc_transport **edge_transport; /* [nranks] */
  void *transport_state[RCC_MAX_TRANSPORTS];

  /* Step sizes every rank derives alike: the ring's (its smallest edge slot)
   * and the whole communicator's (for schedules that use every edge). */
  size_t ring_chunk_bytes;
  size_t all_chunk_bytes;
  struct rcc_tuner tuner;  /* the cost model, the same on every rank */
  struct {                 /* the last choice (tuner.c), reused by a call of
                              the same collective and size */
    int valid, coll;
    size_t bytes;
    int algo;
    size_t chunk_bytes;
  } tune_last;

  uint64_t seq;            /* collectives issued on this communicator */
  struct rcc_progress progress;
  int report_seen;         /* report signals handled (report.c) */
  void *scratch;           /* staging for in-place alltoall */
  size_t scratch_bytes;
  uint8_t secret[16];      /* shared by the ranks only (via the bootstrap) */
  int64_t init_deadline;   /* for transports' connect phase */
  uint64_t cma_probe;      /* coll_cma.c */
  int cma_ok;              /* the direct large-message path is usable */
  /* The one-shot board (exec_host.c): each rank's two regions, in its shm
   * segment (shm.c); set where this rank maps every rank's segment. */
  char **board;            /* [nranks] region 0 of each rank's board */
  size_t board_stride;     /* region 1 is at board[r] + board_stride */
  size_t board_bytes;      /* data a region holds */
  int board_ok;            /* every rank has every board (agreed at init) */
  uint32_t board_seq;      /* calls made on the board */
  volatile int aborted;
  /* Set once by a proxy thread when the network fails under a collective;
   * every wait checks it. */
  volatile int async_error;
  char async_message[RCC_ERRLEN];
  /* The first rank known dead (failure.c): 1 + rank in the low 32 bits,
   * 1 + the rank that told this one in the high 32; 0 while none is. */
  uint64_t dead;
  int spin_now;            /* polls before yielding now: adapted between
                              0 and set.spin (exec_host.c) */
  unsigned spin_probe;     /* waits with spin_now below set.spin */
  int64_t spin_full_ns;    /* how long set.spin polls of the network took
                              the last time they ran out (exec_host.c) */
  int busy;                /* a call is running on this communicator */
  ringcc_result_t fatal;   /* sticky: the communicator is unusable */
  char last_error[RCC_ERRLEN];
};

/* Records a failure on comm (last_error, log) and returns code. */
/* "auto", "ring", ...: RINGCC_ALGO's spelling of a ringcc_algo_t. */
const char *rcc_algo_setting_name(int algo);
ringcc_result_t rcc_comm_error(struct ringcc_comm *comm, ringcc_result_t code,
                               const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, for calls without a usable communicator (thread-local message). */
ringcc_result_t rcc_thread_error(ringcc_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* 0 if rank peer's process is known to be gone (same pid space only). */
int rcc_peer_alive(const struct ringcc_comm *comm, int peer);

/* failure.c: records that rank dead died (told_by: the rank that said so,
 * this rank if it noticed) and passes it on along every edge; the first
 * record wins. */
void rcc_peer_dead(struct ringcc_comm *comm, int dead, int told_by);
/* The recorded dead rank (and who told), or -1. */
int rcc_dead_rank(const struct ringcc_comm *comm, int *told_by);
/* The dead rank a host FIFO shared with peer names, or -1. */
int rcc_peer_poisoned(const struct ringcc_comm *comm, int peer);
/* "rank 3 (pid 1234 on host node7) died ..." into buf; the rank, or -1. */
int rcc_dead_describe(const struct ringcc_comm *comm, char *buf, size_t len);

/* report.c: the hang report, on timeout, on demand and on a signal. */
void rcc_report_format(const struct ringcc_comm *comm, char *buf, size_t len);
void rcc_report_signal_setup(void);
int rcc_report_requested(struct ringcc_comm *comm);

/* tuner.c: loads the cost model (calibration file or defaults) and agrees
 * on it with the other ranks (rank 0's values); a collective step of init,
 * after the transports are connected. */
ringcc_result_t rcc_tuner_init(struct ringcc_comm *comm, int64_t deadline);
/* How one call runs, from rcc_tuner_choose. */
struct rcc_tuning {
  int algo;           /* RINGCC_ALGO_DIRECT (one-shot allreduce),
                         RINGCC_ALGO_TREE (double binary tree allreduce), or
                         RINGCC_ALGO_RING: the collective's ring, chain or
                         pairwise schedule */
  size_t chunk_bytes; /* bytes per step: one FIFO slot of the edges used */
  int channels;       /* always 1 for now */
};
/* Picks for coll (enum rcc_coll) on count_bytes = the call's count times
 * the datatype size; logs every candidate under RINGCC_DEBUG_SUBSYS=TUNING.
 * Every rank picks alike. */
void rcc_tuner_choose(struct ringcc_comm *comm, int coll, size_t count_bytes,
                      struct rcc_tuning *out);

/* graph.c: ring order over the peers' hosts. */
ringcc_result_t rcc_graph_build_ring(struct ringcc_comm *comm);

/* exec_host.c: runs a plan on host buffers. */
ringcc_result_t rcc_exec_host(struct ringcc_comm *comm,
                              const struct rcc_plan *plan, const void *src,
                              void *dst, ringcc_datatype_t dt, ringcc_op_t op);

/* proxy.c: the progress thread of network connections. */
struct rcc_net_plugin;
struct rcc_proxy_conn {
  struct rcc_fifo *fifo;  /* local memory; the executor uses the other end */
  char *data;
  uint32_t nslots;
  size_t slot_bytes;
  int is_send;            /* send: slots -> network; recv: network -> slots */
  int peer;
  void *net_comm;         /* the plugin's send or recv comm */
  void *mhandle;
  uint32_t posted;        /* slots handed to the plugin */
  uint32_t done;          /* slots the plugin finished */
  int bye;                /* send: goodbye posted; recv: goodbye received */
  void *bye_request;
  int failed;             /* the plugin reported an error on it */
  int tell;               /* send: 1 the FAIL message is posted, 2 done */
  void *tell_request;
  void *request[RCC_FIFO_MAX_SLOTS];
  /* send: where slot k's bytes are, when not in the slot: the host executor
   * sends a collective's data straight from the user's buffers (exec_host.c,
   * written before the tail that publishes the slot). NULL: the slot. */
  const char *from[RCC_FIFO_MAX_SLOTS];
  /* recv: where slot k's message lands, when not in the slot: the host
   * executor has a receive whose bytes go to the user's buffer unchanged
   * land there (rcc_proxy_land). NULL: the slot. */
  char *to[RCC_FIFO_MAX_SLOTS];
};
struct rcc_proxy;
ringcc_result_t rcc_proxy_start(struct ringcc_comm *comm,
                                const struct rcc_net_plugin *plugin,
                                struct rcc_proxy_conn *conns, int nconns,
                                struct rcc_proxy **out);
int rcc_proxy_doorbell(const struct rcc_proxy *proxy);
/* For the executor (exec_host.c), which drives the network itself while it
 * waits on a network FIFO, so a message costs no thread wake-up:
 *   push   progress on conn (its struct rcc_proxy_conn), after the proxy
 *          thread's round if one runs; returns 1 if sends are still pending
 *          afterwards, else 0
 *   drive  on: the proxy thread stops polling the sockets (this thread
 *          polls them; the proxy thread only runs a round every 100 ms);
 *          off: the proxy thread takes over again, woken at once
 *   settle after a wait: off if sends are pending, else stay on
 *   poll   sleeps until a socket of a connection with work is ready, or
 *          timeout_ms, then progresses the connections that are ready */
int rcc_proxy_push(struct rcc_proxy *proxy, void *conn);
void rcc_proxy_drive(struct rcc_proxy *proxy, int on);
void rcc_proxy_settle(struct rcc_proxy *proxy);
void rcc_proxy_poll(struct rcc_proxy *proxy, int timeout_ms);
/* After a failed call, whose buffers go back to the user: the sends on conn
 * that are still to leave from the user's memory are copied into their
 * slots and leave from there (a plugin that cannot move a posted send gives
 * the connection up instead, as if it had failed). */
void rcc_proxy_detach(struct rcc_proxy *proxy, void *conn);
/* A receive connection's message seq lands at p (bytes long) instead of its
 * slot, if its receive is posted and has taken no payload yet and the
 * plugin can move it: 1 (conn's to[] says so), else 0. */
int rcc_proxy_land(struct rcc_proxy *proxy, void *conn, uint32_t seq, char *p,
                   size_t bytes);
/* After a failed call: the messages of conn landing in (or landed in) the
 * user's memory go back to their slots. */
void rcc_proxy_unland(struct rcc_proxy *proxy, void *conn);
/* Sends every filled slot, then a goodbye on every send connection, so
 * peers can tell a rank that left from a rank that died. */
void rcc_proxy_drain(struct rcc_proxy *proxy, int64_t deadline_ns);
void rcc_proxy_stop(struct rcc_proxy *proxy);
void rcc_proxy_ring(int doorbell_fd);
/* Records the first asynchronous failure (from any thread). */
void rcc_comm_set_async_error(struct ringcc_comm *comm, ringcc_result_t code,
                              const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* transport.c: connects every edge with the first transport that can. */
ringcc_result_t rcc_transports_connect(struct ringcc_comm *comm,
                                       int64_t deadline_ns);
void rcc_transports_destroy(struct ringcc_comm *comm);
/* "SHM", "NET/Socket/eth0": how this rank reaches peer. */
const char *rcc_edge_name(const struct ringcc_comm *comm, int peer);

/* coll_cma.c: direct large-message collectives on one host. */
struct rcc_cma_call {
  int coll;          /* allreduce, reduce_scatter or allgather */
  const void *src;
  void *dst;
  void *scratch;     /* reduce_scatter: output staging when dst overlaps
                        inputs peers still read, else NULL */
  size_t count;      /* as in the public call */
  ringcc_datatype_t dt;
  ringcc_op_t op;
};
void rcc_cma_prepare(struct ringcc_comm *comm, struct rcc_peer_info *me);
ringcc_result_t rcc_cma_setup(struct ringcc_comm *comm, int64_t deadline);

/* The one-shot board (exec_host.c). A region: this header, then the data:
 * in the header's cache line up to RCC_BOARD_INLINE_BYTES (one line moves
 * per peer), else from the next line on (aligned for the vector loops).
 * seq and waiters are futex words, as in a FIFO. */
struct rcc_board {
  uint32_t seq;     /* the board call whose data the region holds */
  uint32_t waiters; /* ranks asleep on seq */
  uint64_t bytes;   /* of that data: every rank checks it against its own */
};
#define RCC_BOARD_INLINE_BYTES 48
#define RCC_BOARD_DATA_OFFSET(bytes) ((bytes) <= RCC_BOARD_INLINE_BYTES ? 16 : 64)
/* Regions hold at most this much (or one slot, if smaller); larger one-shot
 * calls go through the FIFOs. */
#define RCC_BOARD_MAX_BYTES ((size_t)256 << 10)
/* Every rank's ok, AND-ed, through the bootstrap: *all_ok is the same on
 * every rank (transport.c). */
ringcc_result_t rcc_all_agree(struct ringcc_comm *comm, int ok, int *all_ok,
                              int64_t deadline);
/* Agrees comm->board_ok through the bootstrap (transport.c). */
ringcc_result_t rcc_board_setup(struct ringcc_comm *comm, int64_t deadline);
ringcc_result_t rcc_exec_host_board(struct ringcc_comm *comm,
                                    const struct rcc_plan *plan,
                                    const void *src, void *dst,
                                    ringcc_datatype_t dt, ringcc_op_t op);
/* Wakes every rank asleep on this rank's board (failure.c). */
void rcc_board_wake(struct ringcc_comm *comm);
ringcc_result_t rcc_cma_run(struct ringcc_comm *comm,
                            const struct rcc_cma_call *call);

#endif /* RCC_COMM_H */
