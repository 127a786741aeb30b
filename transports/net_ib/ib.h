/*
 * ib.h - what the files of the verbs network plugin ("IB": net.h over
 * InfiniBand or RoCE reliable-connected queue pairs, with GPUDirect RDMA)
 * share; private to transports/net_ib/ (the tests use ../net_ib.h).
 *
 * The files, bottom up (each calls only those above it, no circle):
 *   pure.c     the pure parts (net_ib.h): RINGCC_IB_HCA, the GID choice, PCI
 *              distances, the names of statuses and events
 *   device.c   the process-wide state: settings (every variable of the
 *              plugin is read there), libibverbs through dlopen, devices,
 *              ports and GIDs (the choice at init), asynchronous events
 *   gdr.c      GPUDirect RDMA: the CUDA driver through dlopen, whether and
 *              how GPU memory can be registered (DMA-BUF, nvidia-peermem)
 *   mr.c       memory registration (reg_mr), the registration cache of user
 *              memory, the live connections
 *   qp.c       connections: their queue pairs, made, moved to RTS, freed
 *   listen.c   the side channel (wire format, setup, liveness) and listen,
 *              connect, accept: the listener holds offers in the listener
 *              gate (lib/util/gate.h)
 *   data.c     the data path (isend, irecv, test, redirect, rebase, fds,
 *              close) and the plugin's table, rcc_net_ib
 *
 * Loading. libibverbs is opened with dlopen (RINGCC_IBVERBS_LIB, else
 * libibverbs.so.1) at init, so the library needs only the verbs headers to
 * build. Where libibverbs is missing, has no device, or no port is ACTIVE,
 * init fails with one sentence and the core takes the next plugin (TCP).
 * Init picks one device and port for the process (RINGCC_IB_HCA; with
 * several, the NIC nearest the rank's GPU, else the ranks of a host spread
 * over the NICs) and, on RoCE, the GID (RINGCC_IB_GID_INDEX, else a RoCE v2
 * GID holding an IPv4 address).
 *
 * Connections. Every connection has a TCP side channel to its peer, opened
 * from the listen handle (an address on the bootstrap interface, and the
 * listener's random nonce). connect() sends the hello and its queue pairs'
 * metadata (QPNs, PSN, LID, GID, MTU, the address and rkey of its
 * clear-to-send ring), followed by its proof of the communicator's network
 * key: HMAC-SHA-256(key, label || the listener's nonce || the offer), so a
 * proof is good for that listener only. accept() drops an offer whose proof
 * is wrong, or that repeats one it accepted, as soon as it is in, before it
 * makes a queue pair for it (a stranger never reaches the queue pairs); the
 * side channels whose offers are not proven are held in the listener gate
 * (gate.h: at most PENDING_MAX, the oldest dropped beyond; out of
 * descriptors the oldest is dropped and accept() retries BACKOFF_NS later).
 * It takes the first connection whose offer is complete and proven, brings
 * its queue pairs to RTS and answers with its own metadata; the connector brings its queue pairs to RTS
 * when the answer arrives and says "ready", and only then does the receiver
 * write to it. connect() and accept() never wait for the other side, so two
 * ranks connecting to each other at once cannot deadlock; ready() (the core
 * calls it after every accept) or any later call completes the exchange.
 * The side channel stays open: its end tells a receiver that the sender died
 * (a clean close says so first), and a sender that the receiver did.
 *
 * Data. Message k of a connection lands where the receiver's clear-to-send
 * (CTS) entry k says: the receiver RDMA-writes the entry (address, rkey and
 * size of the buffer, and of the slot the receive was posted in) into the
 * sender's CTS ring with an immediate, at most CTS_WINDOW messages ahead of
 * those that arrived, so a receive still without its entry can be redirected
 * into the user's buffer (zero copy). The sender writes the message with
 * RDMA WRITE_WITH_IMM (the immediate is the FIFO slot's meta tag), split
 * over RINGCC_IB_QPS_PER_CONN queue pairs; the receiver counts one completion
 * per queue pair. The proxy polls the completion queues from test(), and
 * sleeps on their completion channels (fds()). Device memory the NIC wrote
 * is flushed (an RDMA read through a loopback queue pair) before the receive
 * completes, so a GPU consumer never reads ahead of the data.
 *
 * Memory. reg_mr registers the FIFOs: host memory with ibv_reg_mr, device
 * memory (GPUDirect RDMA) through DMA-BUF (cuMemGetHandleForAddressRange and
 * ibv_reg_dmabuf_mr), else through nvidia-peermem (ibv_reg_mr on the device
 * pointer). A send from elsewhere (the user's buffer) is copied into a
 * bounce buffer when small, else registered through a process-wide cache:
 * registrations outlive a call; an entry is trusted only while the process
 * has taken no page fault since it was made or checked (memory freed and
 * mapped again at the same address must be faulted in before it holds new
 * data; device memory is checked by its CUDA buffer id instead), unused
 * entries leave after REG_MAX_AGE_NS or beyond RINGCC_IB_REG_CACHE_MB, and
 * the cache empties when the last connection closes.
 *
 * Errors. An error completion fails the connection with its status in words
 * and the likely cause: RINGCC_ERR_PEER_FAILED where the side channel shows
 * the peer gone, RINGCC_ERR_NETWORK otherwise. Asynchronous events (a fatal
 * device error, a port going down, a queue pair in error) come from the
 * device's event fd, polled with the others, and fail the connections they
 * concern or are logged.
 */
#ifndef RCC_NET_IB_IB_H
#define RCC_NET_IB_IB_H

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "env.h"
#include "error.h"
#include "gate.h"
#include "log.h"
#include "net.h"
#include "net_ib.h"

#include "sha256.h"
#include "socket.h"

#define HANDLE_MAGIC 0x52434942u /* "RCIB": a listen handle */
#define OFFER_MAGIC 0x5243494fu  /* "RCIO": connector's metadata + hello */
#define ANSWER_MAGIC 0x52434941u /* "RCIA": acceptor's metadata */
#define READY_MAGIC 0x52434952u  /* "RCIR": the connector is at RTS */
#define CLOSE_MAGIC 0x52434943u  /* "RCIC": a clean close */
#define WIRE_VERSION 1
#define WIRE_BYTES 256           /* an offer or an answer */
#define MAX_QPS 16
#define MAX_REQ RCC_NET_MAX_REQUESTS
#define CTS_RING MAX_REQ
/* Receives granted (CTS written) ahead of the messages that arrived. More
 * keeps the link busier when slots are small; fewer leaves more receives
 * that can still be redirected into the user's buffer. Four slots of the
 * default 256 KiB are 1 MiB in flight, about 40 us at 200 Gb/s. */
#define CTS_WINDOW 4
#define BOUNCE_BYTES 4096 /* sends from unregistered memory up to this: copied */
#define PENDING_MAX 128   /* side channels held whose offers are not proven */
#define BACKOFF_NS (20 * 1000000LL) /* after accept() ran out of descriptors */
#define ROOM_FDS 4 /* dropped for a new connection's own, once out of them */
#define RECONNECTS 3 /* a side channel dropped unread is opened again */
#define NONCE_BYTES 16    /* the listener's, in its handle */
#define MAC_BYTES 32      /* an offer's proof of the key, at its end */
#define MAC_AT (WIRE_BYTES - MAC_BYTES)
#define MAC_LABEL "ringcc v2: NET/IB offer"
#define OFFER_TIMEOUT_NS (5 * 1000000000LL) /* for a stranger's offer */
#define SIDE_CHECK_NS (50 * 1000000LL)   /* side-channel look without hints */
#define ASYNC_CHECK_NS (100 * 1000000LL) /* async events without hints */
#define REG_WINDOW ((size_t)2 << 20)     /* cache registrations: 2 MiB aligned */
#define REG_MAX_AGE_NS (30 * 1000000000LL)
#define REBASE_WAIT_NS (2 * 1000000000LL)

_Static_assert(sizeof(struct rcc_ib_hca_spec) < 4096, "hca spec size");

#define ACCESS_ALL                                                             \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* ==== process-wide state ================================================== */

struct ib_settings {
  const char *lib;  /* RINGCC_IBVERBS_LIB */
  const char *hca;  /* RINGCC_IB_HCA */
  int gid_index;    /* RINGCC_IB_GID_INDEX; -1: automatic */
  int tc, sl;       /* RINGCC_IB_TC, RINGCC_IB_SL */
  int timeout;      /* RINGCC_IB_TIMEOUT: 4.096 us * 2^timeout per retry */
  int retry_cnt;    /* RINGCC_IB_RETRY_CNT */
  int qps;          /* RINGCC_IB_QPS_PER_CONN */
  int gdr_level;    /* RINGCC_NET_GDR_LEVEL */
  int gdr_disable;  /* RINGCC_NET_GDR_DISABLE */
  size_t cache_max; /* RINGCC_IB_REG_CACHE_MB, in bytes; 0: no cache */
};

struct ib_dev {
  char name[64];
  int port;
  char label[80]; /* "rxe0:1", also the plugin's device() */
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  int link_layer; /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET */
  uint16_t lid;
  enum ibv_mtu mtu;
  int gid_index;
  uint8_t gid[16];
  char gid_why[200];
  char pci[PATH_MAX]; /* sysfs path of the PCI function, "" if none */
  int numa;
  int async_fd;
  int fatal;        /* atomic: a DEVICE_FATAL event came */
  int port_down;    /* atomic: a PORT_ERR event came (and no PORT_ACTIVE) */
  char fatal_msg[300];
};

/* A registration of the cache (user memory). */
struct reg {
  struct reg *prev, *next; /* most recently used first */
  char *addr;
  size_t bytes;
  struct ibv_mr *mr;
  int writable; /* receives may land in it */
  int device;   /* GPU memory (GDR) */
  uint64_t buffer_id; /* device: CUDA's buffer id at registration */
  uint64_t faults;    /* host: the process's page faults when last checked */
  int refs;           /* requests using it */
  int retired;        /* outdated: deregistered when refs reach 0 */
  int64_t last_use;
};

struct ib_comm;

struct ib_state {
  pthread_mutex_t lock; /* init, the cache, the live list, async events */
  int tried;
  ringcc_result_t result;
  char err[RCC_ERRLEN];
  struct ib_settings set;
  void *lib;
  struct rcc_ibv ibv;
  struct ib_dev dev;
  int have_where;
  struct rcc_net_locality where;
  struct sockaddr_storage side_addr; /* port 0: where side channels listen */
  char side_if[64];
  struct reg *cache; /* LRU list */
  struct rcc_ib_cache_stats stats;
  uint64_t flushes;
  struct ib_comm *live; /* every open comm (listen, send, recv) */
  int nlive;
  pid_t pid; /* the process that opened the device */
};
extern struct ib_state rcc_ib_state; /* device.c */

#define IBV (&rcc_ib_state.ibv)

/* In a process forked from the one that opened the device (a communicator
 * destroyed in a child after fork), the verbs objects, registrations and
 * side channels are the parent's: the device's file is shared, so
 * destroying a queue pair or a registration here would destroy the
 * parent's, and a CLOSE on a side channel would end the parent's
 * connection. Closing then only closes this process's descriptors and
 * frees what is not registered; no verbs call, no message, and no lock a
 * thread of the parent may have held at fork. */
static inline int forked_child(void) {
  return rcc_ib_state.pid != 0 && rcc_ib_state.pid != getpid();
}

static inline const char *link_name(int ll) {
  return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

/* ---- the CUDA driver, for GPUDirect RDMA (dlopen'd; absent: no GDR) ------- */

typedef int cu_result;
typedef unsigned long long cu_ptr;
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_MEMORYTYPE_DEVICE 2
#define CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

struct ib_cuda {
  pthread_once_t once;
  void *lib;
  cu_result (*init)(unsigned flags);
  cu_result (*pointer_attr)(void *data, int attr, cu_ptr p);
  cu_result (*range_handle)(void *handle, cu_ptr p, size_t size, int type,
                            unsigned long long flags);
  cu_result (*device_by_pci)(int *dev, const char *pci);
  cu_result (*device_attr)(int *value, int attr, int dev);
};
extern struct ib_cuda rcc_ib_cuda; /* gdr.c */

/* ==== connections: state ================================================== */

enum { COMM_LISTEN = 0x4c, COMM_SEND = 0x53, COMM_RECV = 0x52 };
/* Handshake: a send comm waits for the answer, a recv comm for "ready". */
enum { HS_ANSWER = 1, HS_READY, HS_DONE };
enum { REQ_FREE = 0, REQ_QUEUED, REQ_ISSUED, REQ_DONE };
/* What a completion belongs to (the top byte of its wr_id). */
enum { WR_DATA = 1, WR_DATA_IN, WR_CTS, WR_CTS_IN, WR_FLUSH };

/* A clear-to-send entry, as written into the sender's ring (big-endian). */
struct cts {
  uint64_t addr, home_addr;
  uint32_t rkey, home_rkey;
  uint32_t size, home_size;
  uint32_t seq;
  uint32_t pad[7];
};
_Static_assert(sizeof(struct cts) == 64, "cts entry size");

/* What each side tells the other about its queue pairs. */
struct qp_info {
  uint32_t nqps;
  uint32_t qpn[MAX_QPS];
  uint32_t psn;
  uint16_t lid;
  uint8_t link_layer;
  uint8_t mtu;
  uint8_t gid[16];
  uint32_t gid_index;
  uint64_t cts_addr; /* the sender's ring (offer); 0 in an answer */
  uint32_t cts_rkey;
  char dev[32];
};

/* A memory registration: the mhandle of reg_mr. */
struct ib_mr {
  struct ibv_mr *mr;
  char *addr;
  size_t bytes;
  int device;      /* GPU memory: receives into it are flushed */
  const char *how; /* "host", "DMA-BUF", "nvidia-peermem" */
};

struct ib_req {
  int state;
  int is_send;
  struct ib_comm *c;
  uint64_t seq;
  size_t bytes;    /* send: the size; receive: what arrived */
  uint32_t imm;
  int parts_left;  /* completions still to come (one per QP) */
  int flushing;    /* receive: the flush read is posted */
  int flushed;     /* ... or has been */
  /* send: where the bytes leave from */
  const char *src;
  uint32_t lkey;
  struct reg *reg; /* a cache entry it holds, or NULL */
  /* receive: where it lands (target), and the slot it was posted in (home) */
  char *target;
  size_t target_bytes;
  uint32_t target_rkey;
  int target_flush;
  struct reg *treg;
  char *home;
  size_t home_bytes;
  uint32_t home_rkey;
  int home_flush;
  int granted;     /* its CTS went out: it can no longer move */
};

struct ib_comm {
  int kind;
  struct ib_comm *live_next; /* rcc_ib_state.live */
  int hs;
  int fd;          /* the side channel */
  int side_end;    /* the peer's side channel: 0 open, 1 EOF or error, 2 CLOSE */
  char side_err[128];
  int hinted;      /* the caller reports the fds poll() finds ready */
  int64_t deadline;
  int64_t next_side_check, next_async_check;
  uint8_t wire[WIRE_BYTES];
  size_t wire_got;
  char peer[96];   /* "10.0.0.2:41000" */
  struct qp_info local, remote;
  struct ibv_comp_channel *chan;
  struct ibv_cq *cq;
  int armed;
  int nqps;
  struct ibv_qp *qps[MAX_QPS];
  uint32_t sq_out[MAX_QPS]; /* signalled sends not yet completed, per QP */
  uint32_t sq_max;
  /* CTS: the sender's ring (written by the peer), the receiver's staging */
  struct cts *cts;
  struct ibv_mr *cts_mr;
  uint64_t cts_count; /* send: entries arrived; receive: entries written */
  /* requests: the incomplete ones in seq order are queue[head..tail) */
  struct ib_req reqs[MAX_REQ];
  struct ib_req *freel[MAX_REQ];
  int nfree;
  struct ib_req *queue[MAX_REQ];
  uint64_t head, next, tail; /* next: the first not yet issued / granted */
  uint64_t arrived;          /* receive: messages whose parts all came */
  char *bounce;              /* send: small sends from unregistered memory */
  struct ibv_mr *bounce_mr;
  const struct ib_mr *fifo;  /* the mhandle last passed to isend/irecv */
  /* receive: the flush through a loopback QP, made on first need */
  struct ibv_qp *flush_qp;
  uint32_t *flush_buf;
  struct ibv_mr *flush_mr;
  ringcc_result_t error; /* the first failure; sticky */
  char message[RCC_ERRLEN];
  int async_failed;      /* atomic: an async event failed it (async_msg) */
  char async_msg[300];
};

static inline const char *dir_word(const struct ib_comm *c) {
  return c->kind == COMM_SEND ? "to" : "from";
}


/* Work request ids and the CTS receives (queue pairs, data path). */
#define WRID(type, q, idx, seq)                                                \
  ((uint64_t)(type) << 56 | (uint64_t)(q) << 48 | (uint64_t)(idx) << 32 |      \
   (uint64_t)(uint32_t)(seq))
#define WRID_TYPE(w) ((int)((w) >> 56))
#define WRID_QP(w) ((int)(((w) >> 48) & 0xff))
#define WRID_IDX(w) ((int)(((w) >> 32) & 0xffff))
#define WRID_SEQ(w) ((uint32_t)(w))
#define CTS_RECVS (2 * CTS_WINDOW + 2) /* CTS receives a sender keeps posted */

/* Big-endian fields of the side channel and the CTS entries. */
static inline void put16(uint8_t **p, uint16_t v) {
  v = htons(v);
  memcpy(*p, &v, 2);
  *p += 2;
}
static inline void put32(uint8_t **p, uint32_t v) {
  v = htonl(v);
  memcpy(*p, &v, 4);
  *p += 4;
}
static inline void put64(uint8_t **p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p, (uint32_t)v);
}
static inline uint16_t get16(const uint8_t **p) {
  uint16_t v;
  memcpy(&v, *p, 2);
  *p += 2;
  return ntohs(v);
}
static inline uint32_t get32(const uint8_t **p) {
  uint32_t v;
  memcpy(&v, *p, 4);
  *p += 4;
  return ntohl(v);
}
static inline uint64_t get64(const uint8_t **p) {
  uint64_t hi = get32(p);
  return hi << 32 | get32(p);
}

/* ---- pure.c ---------------------------------------------------------------- */
const char *rcc_ib_event_words(int event);

/* ---- device.c -------------------------------------------------------------- */
void rcc_ib_pci_of(const char *sysfs_dev, char *out, int *numa);
ringcc_result_t rcc_ib_init(const char *spec, char *err, size_t errlen);
const char *rcc_ib_device(void);
void rcc_ib_locate(const struct rcc_net_locality *where);
void rcc_ib_async_drain(void);

/* ---- gdr.c ----------------------------------------------------------------- */
int rcc_ib_is_device_ptr(const void *p);
uint64_t rcc_ib_cu_buffer_id(const void *p);
int rcc_ib_gdr(const char *gpu_pci, char *why, size_t len);
struct ibv_mr *rcc_ib_reg_device(void *p, size_t bytes, const char **how,
                                 char *why, size_t whylen);

/* ---- mr.c ------------------------------------------------------------------ */
void rcc_ib_live_add(struct ib_comm *c);
void rcc_ib_live_remove(struct ib_comm *c);
ringcc_result_t rcc_ib_reg_error(size_t bytes, const char *what, int e,
                                 char *err, size_t errlen);
ringcc_result_t rcc_ib_reg_mr(void *comm, void *data, size_t bytes,
                              void **mhandle, char *err, size_t errlen);
void rcc_ib_dereg_mr(void *comm, void *mhandle);
ringcc_result_t rcc_ib_cache_get(const char *p, size_t len, int writable,
                                 struct reg **out, char *err, size_t errlen);
void rcc_ib_cache_put(struct reg *e);

/* ---- qp.c ------------------------------------------------------------------ */
ringcc_result_t rcc_ib_comm_fail(struct ib_comm *c, ringcc_result_t code,
                                 const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ringcc_result_t rcc_ib_qp_create(struct ib_comm *c, struct ibv_qp **out);
ringcc_result_t rcc_ib_qp_connect(struct ib_comm *c, struct ibv_qp *qp,
                                  const struct qp_info *info, uint32_t qpn);
void rcc_ib_qps_to_error(struct ib_comm *c);
void rcc_ib_req_release(struct ib_req *r);
void rcc_ib_comm_free(struct ib_comm *c);
ringcc_result_t rcc_ib_comm_new(int kind, int nqps, struct ib_comm **out,
                                char *err, size_t errlen);

/* ---- listen.c -------------------------------------------------------------- */
void rcc_ib_side_read(struct ib_comm *c);
ringcc_result_t rcc_ib_post_cts_recvs(struct ib_comm *c, int n);
void rcc_ib_hs_step(struct ib_comm *c);
ringcc_result_t rcc_ib_ready(void *comm, int64_t deadline_ns, char *err,
                             size_t errlen);
ringcc_result_t rcc_ib_listen(const uint8_t *key, void *handle,
                              void **listen_comm, char *err, size_t errlen);
ringcc_result_t rcc_ib_connect(const uint8_t *key, const void *handle,
                               const void *hello, void **send_comm,
                               int64_t deadline_ns, int *last_errno, char *err,
                               size_t errlen);
ringcc_result_t rcc_ib_accept(void *listen_comm, void *hello, void **recv_comm,
                              int64_t deadline_ns, char *err, size_t errlen);
int rcc_ib_listen_fd(const void *listen_comm);
void rcc_ib_close_listen(void *listen_comm);

#endif
