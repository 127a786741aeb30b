/*
 * net_ib.c - the verbs network plugin ("IB"): net.h over InfiniBand or RoCE
 * reliable-connected queue pairs, with GPUDirect RDMA.
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
 * makes a queue pair for it (a stranger never reaches the queue pairs);
 * at most PENDING_MAX offers are held, the oldest dropped beyond, and out of
 * descriptors the oldest is dropped and accept() retries BACKOFF_NS later.
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
#define PENDING_MAX 128   /* side-channel sockets accepted, offers not proven */
#define BACKOFF_NS (20 * 1000000LL) /* after accept() ran out of descriptors */
#define ROOM_FDS 4 /* dropped for a new connection's own, once out of them */
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

/* ==== pure parts (net_ib.h) ============================================== */

ringcc_result_t rcc_ib_hca_parse(const char *spec, struct rcc_ib_hca_spec *out,
                                 char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (spec == NULL)
    return RINGCC_SUCCESS;
  const char *p = spec;
  for (;;) { /* "^=" and "=^" both */
    if (*p == '^' && !out->exclude)
      out->exclude = 1, p++;
    else if (*p == '=' && !out->exact)
      out->exact = 1, p++;
    else
      break;
  }
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) {
      if (out->n == RCC_IB_HCA_MAX)
        return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                        "NET/IB: RINGCC_IB_HCA=\"%s\" names more than %d "
                        "devices", spec, RCC_IB_HCA_MAX);
      char item[128];
      snprintf(item, sizeof(item), "%.*s", (int)len, p);
      char *colon = strchr(item, ':');
      int port = 0;
      if (colon != NULL) {
        char *pend;
        long v = strtol(colon + 1, &pend, 10);
        if (colon[1] == '\0' || *pend != '\0' || v < 1 || v > 255)
          return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                          "NET/IB: RINGCC_IB_HCA=\"%s\": \"%s\" has no port "
                          "number 1..255 after ':'", spec, item);
        *colon = '\0';
        port = (int)v;
      }
      if (item[0] == '\0' || strlen(item) >= sizeof(out->e[0].name))
        return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                        "NET/IB: RINGCC_IB_HCA=\"%s\": a device name is empty "
                        "or longer than %zu characters", spec,
                        sizeof(out->e[0].name) - 1);
      snprintf(out->e[out->n].name, sizeof(out->e[0].name), "%s", item);
      out->e[out->n++].port = port;
    }
    if (end == NULL)
      break;
    p = end + 1;
  }
  return RINGCC_SUCCESS;
}

int rcc_ib_hca_match(const struct rcc_ib_hca_spec *s, const char *dev,
                     int port) {
  if (s->n == 0)
    return 1; /* nothing named (also a bare "^"): every device */
  int hit = 0;
  for (int i = 0; i < s->n && !hit; i++) {
    const char *name = s->e[i].name;
    int same = s->exact ? strcmp(name, dev) == 0
                        : strncmp(name, dev, strlen(name)) == 0;
    hit = same && (s->e[i].port == 0 || s->e[i].port == port);
  }
  return s->exclude ? !hit : hit;
}

static int gid_empty(const uint8_t *g) {
  for (int i = 0; i < 16; i++)
    if (g[i] != 0)
      return 0;
  return 1;
}

static int gid_v4mapped(const uint8_t *g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g, prefix, 12) == 0;
}

static int gid_linklocal(const uint8_t *g) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

const char *rcc_ib_gid_str(const uint8_t raw[16], char *buf, size_t len) {
  if (inet_ntop(AF_INET6, raw, buf, (socklen_t)len) == NULL)
    snprintf(buf, len, "?");
  return buf;
}

static const char *gid_type_name(int t) {
  switch (t) {
  case RCC_IB_GID_IB:
    return "IB/RoCE v1";
  case RCC_IB_GID_ROCE_V1:
    return "RoCE v1";
  case RCC_IB_GID_ROCE_V2:
    return "RoCE v2";
  default:
    return "type unknown";
  }
}

/* Rank of a GID for the automatic RoCE choice: lower is better, -1 never. */
static int gid_rank(const struct rcc_ib_gid *g) {
  if (gid_empty(g->raw))
    return -1;
  int base = g->type == RCC_IB_GID_ROCE_V2 ? 0 : 3;
  if (gid_v4mapped(g->raw))
    return base;
  return base + (gid_linklocal(g->raw) ? 2 : 1);
}

int rcc_ib_gid_choose(const struct rcc_ib_gid *table, int n, int link_layer,
                      int forced, char *why, size_t whylen) {
  char s[INET6_ADDRSTRLEN];
  if (forced >= 0) {
    for (int i = 0; i < n; i++)
      if (table[i].index == forced) {
        if (gid_empty(table[i].raw))
          break;
        snprintf(why, whylen, "%s, %s, set by RINGCC_IB_GID_INDEX",
                 rcc_ib_gid_str(table[i].raw, s, sizeof(s)),
                 gid_type_name(table[i].type));
        return forced;
      }
    size_t off = (size_t)snprintf(why, whylen,
                                  "RINGCC_IB_GID_INDEX=%d is not a GID of "
                                  "this port; its GIDs:", forced);
    int any = 0;
    for (int i = 0; i < n && off < whylen; i++)
      if (!gid_empty(table[i].raw)) {
        off += (size_t)snprintf(why + off, whylen - off, "%s %d (%s, %s)",
                                any ? "," : "", table[i].index,
                                rcc_ib_gid_str(table[i].raw, s, sizeof(s)),
                                gid_type_name(table[i].type));
        any = 1;
      }
    if (!any && off < whylen)
      snprintf(why + off, whylen - off, " none");
    return -1;
  }
  if (link_layer != IBV_LINK_LAYER_ETHERNET) {
    for (int i = 0; i < n; i++)
      if (table[i].index == 0 && !gid_empty(table[i].raw)) {
        snprintf(why, whylen, "%s, InfiniBand: index 0",
                 rcc_ib_gid_str(table[i].raw, s, sizeof(s)));
        return 0;
      }
    snprintf(why, whylen, "InfiniBand port without GID 0 (routed by LID)");
    return 0;
  }
  int best = -1, best_rank = 99;
  for (int i = 0; i < n; i++) {
    int r = gid_rank(&table[i]);
    if (r >= 0 && r < best_rank)
      best = i, best_rank = r;
  }
  if (best < 0) {
    snprintf(why, whylen, "the port has no GID (is its network interface up "
                          "with an address?)");
    return -1;
  }
  const struct rcc_ib_gid *g = &table[best];
  snprintf(why, whylen, "%s, %s, %s, chosen automatically",
           rcc_ib_gid_str(g->raw, s, sizeof(s)), gid_type_name(g->type),
           gid_v4mapped(g->raw)     ? "IPv4-mapped"
           : gid_linklocal(g->raw) ? "IPv6 link-local"
                                   : "IPv6");
  return g->index;
}

static const char *const distance_names[RCC_IB_NUM_DISTANCES] = {
    "LOC", "PIX", "PXB", "PHB", "SYS"};

const char *rcc_ib_distance_name(int d) {
  return d >= 0 && d < RCC_IB_NUM_DISTANCES ? distance_names[d] : "?";
}

int rcc_ib_distance_parse(const char *s) {
  if (s == NULL)
    return -1;
  for (int i = 0; i < RCC_IB_NUM_DISTANCES; i++)
    if (strcasecmp(s, distance_names[i]) == 0)
      return i;
  if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
    return s[0] - '0';
  return -1;
}

/* Splits a sysfs device path into its components below /sys/devices. */
static int pci_components(const char *path, char comp[][32], int max) {
  const char *p = strstr(path, "/devices/");
  int n = 0;
  p = p ? p + strlen("/devices/") : path;
  while (*p && n < max) {
    while (*p == '/')
      p++;
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 0)
      break;
    snprintf(comp[n++], 32, "%.*s", (int)len, p);
    if (e == NULL)
      break;
    p = e;
  }
  return n;
}

int rcc_ib_pci_distance(const char *a, const char *b, int numa_a, int numa_b) {
  char ca[32][32], cb[32][32];
  if (a == NULL || b == NULL || *a == '\0' || *b == '\0')
    return RCC_IB_SYS;
  int na = pci_components(a, ca, 32), nb = pci_components(b, cb, 32), k = 0;
  if (na == 0 || nb == 0)
    return RCC_IB_SYS;
  while (k < na && k < nb && strcmp(ca[k], cb[k]) == 0)
    k++;
  if (k == na && k == nb)
    return RCC_IB_LOC;
  if (k == 0) /* different root complexes */
    return numa_a >= 0 && numa_a == numa_b ? RCC_IB_PHB : RCC_IB_SYS;
  if (k == 1) /* only the host bridge in common */
    return RCC_IB_PHB;
  /* Below a common bridge: a PCIe switch shows as two levels (upstream and
   * downstream port), so two devices at most two levels below the bridge
   * they share sit behind one switch. */
  return na - k <= 2 && nb - k <= 2 ? RCC_IB_PIX : RCC_IB_PXB;
}

struct named {
  int value;
  const char *name, *words;
};

static const struct named wc_statuses[] = {
    {IBV_WC_SUCCESS, "IBV_WC_SUCCESS", "success"},
    {IBV_WC_LOC_LEN_ERR, "IBV_WC_LOC_LEN_ERR", "local length error"},
    {IBV_WC_LOC_QP_OP_ERR, "IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
    {IBV_WC_LOC_EEC_OP_ERR, "IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
    {IBV_WC_LOC_PROT_ERR, "IBV_WC_LOC_PROT_ERR", "local protection error"},
    {IBV_WC_WR_FLUSH_ERR, "IBV_WC_WR_FLUSH_ERR", "work request flushed"},
    {IBV_WC_MW_BIND_ERR, "IBV_WC_MW_BIND_ERR", "memory window bind error"},
    {IBV_WC_BAD_RESP_ERR, "IBV_WC_BAD_RESP_ERR", "bad response error"},
    {IBV_WC_LOC_ACCESS_ERR, "IBV_WC_LOC_ACCESS_ERR", "local access error"},
    {IBV_WC_REM_INV_REQ_ERR, "IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
    {IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR", "remote access error"},
    {IBV_WC_REM_OP_ERR, "IBV_WC_REM_OP_ERR", "remote operation error"},
    {IBV_WC_RETRY_EXC_ERR, "IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
    {IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
    {IBV_WC_LOC_RDD_VIOL_ERR, "IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
    {IBV_WC_REM_INV_RD_REQ_ERR, "IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
    {IBV_WC_REM_ABORT_ERR, "IBV_WC_REM_ABORT_ERR", "aborted error"},
    {IBV_WC_INV_EECN_ERR, "IBV_WC_INV_EECN_ERR", "invalid EE context number"},
    {IBV_WC_INV_EEC_STATE_ERR, "IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
    {IBV_WC_FATAL_ERR, "IBV_WC_FATAL_ERR", "fatal error"},
    {IBV_WC_RESP_TIMEOUT_ERR, "IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
    {IBV_WC_GENERAL_ERR, "IBV_WC_GENERAL_ERR", "general error"},
};

static const struct named *find_named(const struct named *t, size_t n,
                                      int v) {
  for (size_t i = 0; i < n; i++)
    if (t[i].value == v)
      return &t[i];
  return NULL;
}

const char *rcc_ib_wc_status_name(int status) {
  const struct named *s =
      find_named(wc_statuses, sizeof(wc_statuses) / sizeof(*wc_statuses), status);
  return s ? s->name : "IBV_WC_(unknown)";
}

const char *rcc_ib_wc_status_words(int status) {
  const struct named *s =
      find_named(wc_statuses, sizeof(wc_statuses) / sizeof(*wc_statuses), status);
  return s ? s->words : "unknown status";
}

static const struct named events[] = {
    {IBV_EVENT_CQ_ERR, "IBV_EVENT_CQ_ERR", "completion queue overrun"},
    {IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_FATAL", "queue pair in error state"},
    {IBV_EVENT_QP_REQ_ERR, "IBV_EVENT_QP_REQ_ERR", "invalid request on a queue pair"},
    {IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR", "access violation on a queue pair"},
    {IBV_EVENT_COMM_EST, "IBV_EVENT_COMM_EST", "communication established"},
    {IBV_EVENT_SQ_DRAINED, "IBV_EVENT_SQ_DRAINED", "send queue drained"},
    {IBV_EVENT_PATH_MIG, "IBV_EVENT_PATH_MIG", "path migrated"},
    {IBV_EVENT_PATH_MIG_ERR, "IBV_EVENT_PATH_MIG_ERR", "path migration failed"},
    {IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL", "local catastrophic error"},
    {IBV_EVENT_PORT_ACTIVE, "IBV_EVENT_PORT_ACTIVE", "port active"},
    {IBV_EVENT_PORT_ERR, "IBV_EVENT_PORT_ERR", "port down"},
    {IBV_EVENT_LID_CHANGE, "IBV_EVENT_LID_CHANGE", "LID changed"},
    {IBV_EVENT_PKEY_CHANGE, "IBV_EVENT_PKEY_CHANGE", "P_Key table changed"},
    {IBV_EVENT_SM_CHANGE, "IBV_EVENT_SM_CHANGE", "subnet manager changed"},
    {IBV_EVENT_SRQ_ERR, "IBV_EVENT_SRQ_ERR", "shared receive queue error"},
    {IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED", "SRQ limit reached"},
    {IBV_EVENT_QP_LAST_WQE_REACHED, "IBV_EVENT_QP_LAST_WQE_REACHED", "last WQE reached"},
    {IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", "client reregistration"},
    {IBV_EVENT_GID_CHANGE, "IBV_EVENT_GID_CHANGE", "GID table changed"},
};

const char *rcc_ib_event_name(int event) {
  const struct named *e =
      find_named(events, sizeof(events) / sizeof(*events), event);
  return e ? e->name : "IBV_EVENT_(unknown)";
}

static const char *event_words(int event) {
  const struct named *e =
      find_named(events, sizeof(events) / sizeof(*events), event);
  return e ? e->words : "unknown event";
}

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

static struct {
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
} g_ib = {.lock = PTHREAD_MUTEX_INITIALIZER, .dev = {.async_fd = -1}};

/* In a process forked from the one that opened the device (a communicator
 * destroyed in a child after fork), the verbs objects, registrations and
 * side channels are the parent's: the device's file is shared, so
 * destroying a queue pair or a registration here would destroy the
 * parent's, and a CLOSE on a side channel would end the parent's
 * connection. Closing then only closes this process's descriptors and
 * frees what is not registered; no verbs call, no message, and no lock a
 * thread of the parent may have held at fork. */
static int forked_child(void) {
  return g_ib.pid != 0 && g_ib.pid != getpid();
}

#define IBV (&g_ib.ibv)

/* ---- settings: every variable of the plugin is read here ----------------- */

static ringcc_result_t env_int(const char *name, int lo, int hi, int def,
                               int *out, char *err, size_t errlen) {
  const char *v = rcc_getenv(name);
  int64_t x;
  *out = def;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (rcc_parse_decimal(v, &x) != 0 || x < lo || x > hi)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: %s=\"%s\" is not a number in %d..%d", name, v,
                    lo, hi);
  *out = (int)x;
  return RINGCC_SUCCESS;
}

static ringcc_result_t read_settings(struct ib_settings *s, char *err,
                                     size_t errlen) {
  ringcc_result_t r;
  int cache_mb;
  s->lib = rcc_getenv("RINGCC_IBVERBS_LIB");
  s->hca = rcc_getenv("RINGCC_IB_HCA");
  if ((r = env_int("RINGCC_IB_GID_INDEX", 0, 1023, -1, &s->gid_index, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_TC", 0, 255, 0, &s->tc, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_SL", 0, 15, 0, &s->sl, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_TIMEOUT", 1, 31, 20, &s->timeout, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_RETRY_CNT", 0, 7, 7, &s->retry_cnt, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_QPS_PER_CONN", 1, MAX_QPS, 1, &s->qps, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_NET_GDR_DISABLE", 0, 1, 0, &s->gdr_disable, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_REG_CACHE_MB", 0, 1 << 20, 1024, &cache_mb, err,
                   errlen)) != RINGCC_SUCCESS)
    return r;
  s->cache_max = (size_t)cache_mb << 20;
  const char *lvl = rcc_getenv("RINGCC_NET_GDR_LEVEL");
  s->gdr_level = lvl ? rcc_ib_distance_parse(lvl) : RCC_IB_PXB;
  if (s->gdr_level < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: RINGCC_NET_GDR_LEVEL=\"%s\" is none of LOC, PIX, "
                    "PXB, PHB, SYS (or 0..4)", lvl);
  return RINGCC_SUCCESS;
}

/* ---- libibverbs through dlopen -------------------------------------------- */

#define SYM(field, name, required)                                             \
  { offsetof(struct rcc_ibv, field), name, required }
static const struct {
  size_t off;
  const char *name;
  int required;
} ibv_symbols[] = {
    SYM(get_device_list, "ibv_get_device_list", 1),
    SYM(free_device_list, "ibv_free_device_list", 1),
    SYM(get_device_name, "ibv_get_device_name", 1),
    SYM(open_device, "ibv_open_device", 1),
    SYM(close_device, "ibv_close_device", 1),
    SYM(query_device, "ibv_query_device", 1),
    SYM(query_port, "ibv_query_port", 1),
    SYM(query_gid, "ibv_query_gid", 1),
    SYM(alloc_pd, "ibv_alloc_pd", 1),
    SYM(dealloc_pd, "ibv_dealloc_pd", 1),
    SYM(reg_mr, "ibv_reg_mr", 1),
    SYM(dereg_mr, "ibv_dereg_mr", 1),
    SYM(create_comp_channel, "ibv_create_comp_channel", 1),
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel", 1),
    SYM(create_cq, "ibv_create_cq", 1),
    SYM(destroy_cq, "ibv_destroy_cq", 1),
    SYM(get_cq_event, "ibv_get_cq_event", 1),
    SYM(ack_cq_events, "ibv_ack_cq_events", 1),
    SYM(create_qp, "ibv_create_qp", 1),
    SYM(modify_qp, "ibv_modify_qp", 1),
    SYM(destroy_qp, "ibv_destroy_qp", 1),
    SYM(get_async_event, "ibv_get_async_event", 1),
    SYM(ack_async_event, "ibv_ack_async_event", 1),
    SYM(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", 0),
    SYM(query_gid_ex, "_ibv_query_gid_ex", 0),
};

static ringcc_result_t ibv_load(char *err, size_t errlen) {
  const char *path = g_ib.set.lib ? g_ib.set.lib : "libibverbs.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "NET/IB: cannot load %s%s: %s%s", path,
                    g_ib.set.lib ? " (RINGCC_IBVERBS_LIB)" : "", dlerror(),
                    g_ib.set.lib ? "" : " (install libibverbs1 / rdma-core)");
  for (size_t i = 0; i < sizeof(ibv_symbols) / sizeof(*ibv_symbols); i++) {
    void *f = dlsym(lib, ibv_symbols[i].name);
    if (f == NULL && ibv_symbols[i].required) {
      dlclose(lib);
      return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                      "NET/IB: %s has no %s (too old a libibverbs?)", path,
                      ibv_symbols[i].name);
    }
    memcpy((char *)&g_ib.ibv + ibv_symbols[i].off, &f, sizeof(f));
  }
  g_ib.lib = lib;
  return RINGCC_SUCCESS;
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

static struct {
  pthread_once_t once;
  void *lib;
  cu_result (*init)(unsigned flags);
  cu_result (*pointer_attr)(void *data, int attr, cu_ptr p);
  cu_result (*range_handle)(void *handle, cu_ptr p, size_t size, int type,
                            unsigned long long flags);
  cu_result (*device_by_pci)(int *dev, const char *pci);
  cu_result (*device_attr)(int *value, int attr, int dev);
} g_cu = {.once = PTHREAD_ONCE_INIT};

static void cu_load_once(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *f[5];
  static const char *const names[5] = {
      "cuInit", "cuPointerGetAttribute", "cuMemGetHandleForAddressRange",
      "cuDeviceGetByPCIBusId", "cuDeviceGetAttribute"};
  if (lib == NULL)
    return;
  for (int i = 0; i < 5; i++)
    f[i] = dlsym(lib, names[i]);
  if (f[0] == NULL || f[1] == NULL) {
    dlclose(lib);
    return;
  }
  memcpy(&g_cu.init, &f[0], sizeof(void *));
  memcpy(&g_cu.pointer_attr, &f[1], sizeof(void *));
  memcpy(&g_cu.range_handle, &f[2], sizeof(void *));
  memcpy(&g_cu.device_by_pci, &f[3], sizeof(void *));
  memcpy(&g_cu.device_attr, &f[4], sizeof(void *));
  if (g_cu.init(0) != 0) {
    dlclose(lib);
    return;
  }
  g_cu.lib = lib;
}

static int cu_loaded(void) {
  pthread_once(&g_cu.once, cu_load_once);
  return g_cu.lib != NULL;
}

/* 1 if p is GPU memory (cudaMalloc, not managed or host memory). */
static int is_device_ptr(const void *p) {
  unsigned type = 0;
  if (p == NULL || !cu_loaded() ||
      g_cu.pointer_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                        (cu_ptr)(uintptr_t)p) != 0)
    return 0;
  return type == CU_MEMORYTYPE_DEVICE;
}

static uint64_t cu_buffer_id(const void *p) {
  unsigned long long id = 0;
  if (!cu_loaded() || g_cu.pointer_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                        (cu_ptr)(uintptr_t)p) != 0)
    return 0;
  return id;
}

/* How this process can register GPU memory with the NIC: "DMA-BUF",
 * "nvidia-peermem", or NULL with the reason in why. gpu: a CUDA device
 * index, or -1 for any. */
static const char *gdr_mechanism(int gpu, char *why, size_t len) {
  if (!cu_loaded()) {
    snprintf(why, len, "the CUDA driver (libcuda.so.1) is not loadable");
    return NULL;
  }
  int dmabuf = 0;
  if (IBV->reg_dmabuf_mr != NULL && g_cu.range_handle != NULL &&
      g_cu.device_attr != NULL && gpu >= 0 &&
      g_cu.device_attr(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, gpu) != 0)
    dmabuf = 0;
  if (dmabuf)
    return "DMA-BUF";
  struct stat st;
  if (stat("/sys/module/nvidia_peermem", &st) == 0 ||
      stat("/sys/kernel/mm/memory_peers/nv_mem/version", &st) == 0 ||
      stat("/sys/module/nv_peer_mem", &st) == 0)
    return "nvidia-peermem";
  snprintf(why, len, "neither DMA-BUF (%s) nor the nvidia-peermem module is "
                     "available",
           IBV->reg_dmabuf_mr == NULL ? "libibverbs has no ibv_reg_dmabuf_mr"
           : g_cu.range_handle == NULL
               ? "the CUDA driver has no cuMemGetHandleForAddressRange"
               : "the GPU or its driver does not support it");
  return NULL;
}

/* ---- devices, ports, GIDs: the choice at init ----------------------------- */

struct cand {
  struct ibv_device *device;
  char name[64];
  int port;
  struct ibv_port_attr attr;
  char pci[PATH_MAX];
  int numa;
};

static const char *port_state_name(int s) {
  static const char *const names[] = {"NOP",   "DOWN",   "INIT",
                                      "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  return s >= 0 && s < 6 ? names[s] : "?";
}

static const char *link_name(int ll) {
  return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

static int read_int_file(const char *path, int def) {
  FILE *f = fopen(path, "r");
  int v = def;
  if (f != NULL) {
    if (fscanf(f, "%d", &v) != 1)
      v = def;
    fclose(f);
  }
  return v;
}

/* The sysfs path of a device's PCI function and its NUMA node. */
static void pci_of(const char *sysfs_dev, char *out, int *numa) {
  char path[PATH_MAX + 32];
  out[0] = '\0';
  *numa = -1;
  if (realpath(sysfs_dev, out) == NULL) {
    out[0] = '\0';
    return;
  }
  snprintf(path, sizeof(path), "%s/numa_node", out);
  *numa = read_int_file(path, -1);
}

static void gid_type_sysfs(const char *dev, int port, int index, int *type) {
  char path[256], buf[32] = "";
  snprintf(path, sizeof(path),
           "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port,
           index);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  if (fgets(buf, sizeof(buf), f) != NULL)
    *type = strstr(buf, "v2") ? RCC_IB_GID_ROCE_V2
            : strstr(buf, "v1") ? RCC_IB_GID_ROCE_V1
                                : RCC_IB_GID_IB;
  fclose(f);
}

/* Reads up to max GIDs of a port; returns how many were read. */
static int read_gids(struct ibv_context *ctx, const char *dev, int port,
                     int len, struct rcc_ib_gid *out, int max) {
  int n = 0;
  for (int i = 0; i < len && n < max; i++) {
    struct rcc_ib_gid *g = &out[n];
    memset(g, 0, sizeof(*g));
    g->index = i;
    if (IBV->query_gid_ex != NULL) {
      struct ibv_gid_entry e;
      if (IBV->query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0,
                            sizeof(e)) != 0)
        continue; /* an empty entry */
      memcpy(g->raw, e.gid.raw, 16);
      g->type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? RCC_IB_GID_ROCE_V2
                : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? RCC_IB_GID_ROCE_V1
                                                     : RCC_IB_GID_IB;
    } else {
      union ibv_gid gid;
      if (IBV->query_gid(ctx, (uint8_t)port, i, &gid) != 0)
        continue;
      memcpy(g->raw, gid.raw, 16);
      gid_type_sysfs(dev, port, i, &g->type);
    }
    n++;
  }
  return n;
}

/* Appends "what" to a "; "-separated note. */
static void note(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(char *buf, size_t len, const char *fmt, ...) {
  size_t off = strlen(buf);
  va_list ap;
  if (off + 3 >= len)
    return;
  if (off > 0)
    off += (size_t)snprintf(buf + off, len - off, ", ");
  va_start(ap, fmt);
  vsnprintf(buf + off, len - off, fmt, ap);
  va_end(ap);
}

/* Every ACTIVE port RINGCC_IB_HCA allows, into c[max]; seen says what was
 * found and why each other port was left out. */
static int list_ports(struct ibv_device **list, int ndev,
                      const struct rcc_ib_hca_spec *spec, struct cand *c,
                      int max, char *seen, size_t seenlen) {
  int n = 0;
  for (int d = 0; d < ndev; d++) {
    const char *name = IBV->get_device_name(list[d]);
    struct ibv_context *ctx = IBV->open_device(list[d]);
    struct ibv_device_attr da;
    if (ctx == NULL) {
      note(seen, seenlen, "%s (cannot open: %s)", name, strerror(errno));
      continue;
    }
    if (IBV->query_device(ctx, &da) != 0) {
      note(seen, seenlen, "%s (cannot query: %s)", name, strerror(errno));
      IBV->close_device(ctx);
      continue;
    }
    for (int p = 1; p <= da.phys_port_cnt; p++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (!rcc_ib_hca_match(spec, name, p)) {
        note(seen, seenlen, "%s:%d (left out by RINGCC_IB_HCA)", name, p);
        continue;
      }
      if (IBV->query_port(ctx, (uint8_t)p, &pa) != 0) {
        note(seen, seenlen, "%s:%d (cannot query: %s)", name, p,
             strerror(errno));
        continue;
      }
      if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
          pa.link_layer != IBV_LINK_LAYER_ETHERNET &&
          pa.link_layer != IBV_LINK_LAYER_UNSPECIFIED) {
        note(seen, seenlen, "%s:%d (link layer %d is neither InfiniBand nor "
             "Ethernet)", name, p, pa.link_layer);
        continue;
      }
      if (pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED)
        pa.link_layer = IBV_LINK_LAYER_INFINIBAND;
      if (pa.state != IBV_PORT_ACTIVE) {
        note(seen, seenlen, "%s:%d (%s, port %s)", name, p,
             link_name(pa.link_layer), port_state_name(pa.state));
        continue;
      }
      note(seen, seenlen, "%s:%d (%s, ACTIVE)", name, p,
           link_name(pa.link_layer));
      if (n < max) {
        char sys[PATH_MAX];
        c[n].device = list[d];
        snprintf(c[n].name, sizeof(c[n].name), "%s", name);
        c[n].port = p;
        c[n].attr = pa;
        snprintf(sys, sizeof(sys), "/sys/class/infiniband/%s/device", name);
        pci_of(sys, c[n].pci, &c[n].numa);
        n++;
      }
    }
    IBV->close_device(ctx);
  }
  return n;
}

/* Which of c[0..n) this rank uses: the nearest to its GPU (PCI paths), the
 * ties (or every port, without a GPU) spread by the rank's place on its
 * host. why says how. */
static int choose_port(const struct cand *c, int n, char *why, size_t len) {
  int local = g_ib.have_where ? g_ib.where.local_rank : 0;
  int dist[64], best = RCC_IB_NUM_DISTANCES, nbest = 0;
  if (local < 0)
    local = 0;
  if (g_ib.have_where && g_ib.where.gpu_pci[0] != '\0') {
    char sys[128], gpu[PATH_MAX];
    int gnuma;
    snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s", g_ib.where.gpu_pci);
    pci_of(sys, gpu, &gnuma);
    for (int i = 0; i < n; i++) {
      dist[i] = rcc_ib_pci_distance(gpu, c[i].pci, gnuma, c[i].numa);
      if (dist[i] < best)
        best = dist[i];
    }
    for (int i = 0; i < n; i++)
      nbest += dist[i] == best;
    int pick = local % nbest;
    for (int i = 0; i < n; i++)
      if (dist[i] == best && pick-- == 0) {
        snprintf(why, len, "nearest to GPU %s (%s)%s", g_ib.where.gpu_pci,
                 rcc_ib_distance_name(best),
                 nbest > 1 ? ", spread over the equally near ones by local "
                             "rank" : "");
        return i;
      }
  }
  snprintf(why, len, n > 1 ? "local rank %d of %d spread over %d ports"
                           : "the only one",
           local, g_ib.have_where ? g_ib.where.local_size : 1, n);
  return local % n;
}

static ringcc_result_t open_port(const struct cand *c, char *err,
                                 size_t errlen) {
  struct ib_dev *d = &g_ib.dev;
  struct rcc_ib_gid gids[128];
  snprintf(d->name, sizeof(d->name), "%s", c->name);
  d->port = c->port;
  snprintf(d->label, sizeof(d->label), "%s:%d", c->name, c->port);
  d->link_layer = c->attr.link_layer;
  d->lid = c->attr.lid;
  d->mtu = c->attr.active_mtu;
  snprintf(d->pci, sizeof(d->pci), "%s", c->pci);
  d->numa = c->numa;
  if ((d->ctx = IBV->open_device(c->device)) == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "NET/IB: cannot open %s: %s", c->name, strerror(errno));
  if ((d->pd = IBV->alloc_pd(d->ctx)) == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "NET/IB: cannot allocate a protection domain on %s: %s",
                    c->name, strerror(errno));
  int ngid = read_gids(d->ctx, c->name, c->port, c->attr.gid_tbl_len, gids,
                       128);
  d->gid_index = rcc_ib_gid_choose(gids, ngid, d->link_layer,
                                   g_ib.set.gid_index, d->gid_why,
                                   sizeof(d->gid_why));
  if (d->gid_index < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: %s: %s", d->label, d->gid_why);
  for (int i = 0; i < ngid; i++)
    if (gids[i].index == d->gid_index)
      memcpy(d->gid, gids[i].raw, 16);
  d->async_fd = d->ctx->async_fd;
  int fl = fcntl(d->async_fd, F_GETFL);
  if (fl < 0 || fcntl(d->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "NET/IB: cannot make the event fd of %s nonblocking: %s",
                    c->name, strerror(errno));
  return RINGCC_SUCCESS;
}

static ringcc_result_t init_locked(const char *spec, char *err,
                                   size_t errlen) {
  ringcc_result_t r;
  struct rcc_ib_hca_spec hca;
  struct cand c[64];
  char seen[1024] = "", why[200];
  int ndev = 0;
  if ((r = read_settings(&g_ib.set, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_ib_hca_parse(g_ib.set.hca, &hca, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = ibv_load(err, errlen)) != RINGCC_SUCCESS)
    return r;
  struct ibv_device **list = IBV->get_device_list(&ndev);
  if (list == NULL || ndev == 0) {
    int e = errno;
    if (list)
      IBV->free_device_list(list);
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "NET/IB: no RDMA device%s%s (no driver loaded, or no "
                    "/dev/infiniband in this container?)",
                    list == NULL ? ": " : "", list == NULL ? strerror(e) : "");
  }
  int n = list_ports(list, ndev, &hca, c, 64, seen, sizeof(seen));
  if (n == 0) {
    IBV->free_device_list(list);
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "NET/IB: no ACTIVE port to use%s%s; found: %s",
                    g_ib.set.hca ? " with RINGCC_IB_HCA=" : "",
                    g_ib.set.hca ? g_ib.set.hca : "", seen);
  }
  int pick = choose_port(c, n, why, sizeof(why));
  r = open_port(&c[pick], err, errlen);
  IBV->free_device_list(list);
  if (r != RINGCC_SUCCESS)
    return r;
  if ((r = rcc_socket_pick_address(spec, &g_ib.side_addr, g_ib.side_if,
                                   sizeof(g_ib.side_if), err, errlen)) !=
      RINGCC_SUCCESS)
    return r;
  const struct ib_dev *d = &g_ib.dev;
  RCC_INFO(-1, "NET/IB: ports found: %s", seen);
  RCC_INFO(-1, "NET/IB: using %s (%s), %s; LID %u, MTU %d; GID index %d (%s)",
           d->label, link_name(d->link_layer), why, (unsigned)d->lid,
           128 << d->mtu, d->gid_index, d->gid_why);
  RCC_INFO(-1, "NET/IB: %d QP%s per connection, timeout %d (%.1f ms per "
           "try), retry count %d, SL %d, TC %d; connection setup over %s; "
           "registration cache %zu MiB",
           g_ib.set.qps, g_ib.set.qps == 1 ? "" : "s", g_ib.set.timeout,
           4.096e-3 * (double)(1LL << g_ib.set.timeout), g_ib.set.retry_cnt,
           g_ib.set.sl, g_ib.set.tc, g_ib.side_if, g_ib.set.cache_max >> 20);
  return RINGCC_SUCCESS;
}

/* Undoes a failed init, so a later process-wide retry starts clean. */
static void init_undo(void) {
  struct ib_dev *d = &g_ib.dev;
  if (d->pd)
    IBV->dealloc_pd(d->pd);
  if (d->ctx)
    IBV->close_device(d->ctx);
  if (g_ib.lib)
    dlclose(g_ib.lib);
  memset(d, 0, sizeof(*d));
  d->async_fd = -1;
  g_ib.lib = NULL;
}

static ringcc_result_t ib_init(const char *spec, char *err, size_t errlen) {
  rcc_log_init();
  pthread_mutex_lock(&g_ib.lock);
  if (!g_ib.tried) { /* once per process: the first outcome stands */
    g_ib.tried = 1;
    g_ib.pid = getpid();
    g_ib.result = init_locked(spec, g_ib.err, sizeof(g_ib.err));
    if (g_ib.result != RINGCC_SUCCESS)
      init_undo();
  }
  ringcc_result_t r = g_ib.result;
  if (r != RINGCC_SUCCESS)
    snprintf(err, errlen, "%s", g_ib.err);
  pthread_mutex_unlock(&g_ib.lock);
  return r;
}

static const char *ib_device(void) { return g_ib.dev.label; }

static void ib_locate(const struct rcc_net_locality *where) {
  pthread_mutex_lock(&g_ib.lock);
  if (!g_ib.tried) {
    g_ib.where = *where;
    g_ib.have_where = 1;
  }
  pthread_mutex_unlock(&g_ib.lock);
}

static int ib_gdr(const char *gpu_pci, char *why, size_t len) {
  char sys[128], gpu[PATH_MAX], mwhy[200];
  int gnuma, cudev = -1;
  if (!g_ib.tried || g_ib.result != RINGCC_SUCCESS) {
    snprintf(why, len, "NET/IB is not in use");
    return 0;
  }
  if (g_ib.set.gdr_disable) {
    snprintf(why, len, "RINGCC_NET_GDR_DISABLE=1");
    return 0;
  }
  snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s", gpu_pci);
  pci_of(sys, gpu, &gnuma);
  int dist = rcc_ib_pci_distance(gpu, g_ib.dev.pci, gnuma, g_ib.dev.numa);
  if (dist > g_ib.set.gdr_level) {
    snprintf(why, len, "%s is %s from GPU %s%s, beyond RINGCC_NET_GDR_LEVEL "
             "%s", g_ib.dev.label, rcc_ib_distance_name(dist), gpu_pci,
             g_ib.dev.pci[0] ? "" : " (it has no PCI path: a software NIC?)",
             rcc_ib_distance_name(g_ib.set.gdr_level));
    return 0;
  }
  if (cu_loaded() && g_cu.device_by_pci != NULL)
    g_cu.device_by_pci(&cudev, gpu_pci);
  const char *how = gdr_mechanism(cudev, mwhy, sizeof(mwhy));
  if (how == NULL) {
    snprintf(why, len, "%s", mwhy);
    return 0;
  }
  snprintf(why, len, "GPUDirect RDMA through %s, %s is %s from GPU %s", how,
           g_ib.dev.label, rcc_ib_distance_name(dist), gpu_pci);
  return 1;
}

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
  struct ib_comm *live_next; /* g_ib.live */
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

/* Records the connection's first failure; every later call reports it. */
static ringcc_result_t comm_fail(struct ib_comm *c, ringcc_result_t code,
                                 const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ringcc_result_t comm_fail(struct ib_comm *c, ringcc_result_t code,
                                 const char *fmt, ...) {
  va_list ap;
  if (c->error != RINGCC_SUCCESS)
    return c->error;
  c->error = code;
  va_start(ap, fmt);
  vsnprintf(c->message, sizeof(c->message), fmt, ap);
  va_end(ap);
  return code;
}

static const char *dir_word(const struct ib_comm *c) {
  return c->kind == COMM_SEND ? "to" : "from";
}

/* c NULL: a listen comm (counted only). */
static void live_add(struct ib_comm *c) {
  pthread_mutex_lock(&g_ib.lock);
  if (c != NULL) {
    c->live_next = g_ib.live;
    g_ib.live = c;
  }
  g_ib.nlive++;
  pthread_mutex_unlock(&g_ib.lock);
}

static void cache_flush_locked(void);

/* c NULL: a listen comm (counted only). */
static void live_remove(struct ib_comm *c) {
  pthread_mutex_lock(&g_ib.lock);
  for (struct ib_comm **p = &g_ib.live; c != NULL && *p != NULL;
       p = &(*p)->live_next)
    if (*p == c) {
      *p = c->live_next;
      break;
    }
  if (--g_ib.nlive == 0)
    cache_flush_locked(); /* nothing can use the registrations now */
  pthread_mutex_unlock(&g_ib.lock);
}

/* ==== asynchronous events ================================================= */

/* Reads every pending event of the device (the caller holds g_ib.lock). */
static void async_drain_locked(void) {
  struct ib_dev *d = &g_ib.dev;
  struct ibv_async_event ev;
  while (d->ctx != NULL && IBV->get_async_event(d->ctx, &ev) == 0) {
    int t = ev.event_type;
    switch (t) {
    case IBV_EVENT_DEVICE_FATAL:
      snprintf(d->fatal_msg, sizeof(d->fatal_msg),
               "NET/IB: device %s reported a fatal error (%s, %s): every "
               "connection through it has failed; the NIC needs a reset or "
               "its driver reloaded", d->name, rcc_ib_event_name(t),
               event_words(t));
      __atomic_store_n(&d->fatal, 1, __ATOMIC_RELEASE);
      RCC_WARN(-1, "%s", d->fatal_msg);
      break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
      if (ev.element.port_num != d->port)
        break;
      __atomic_store_n(&d->port_down, t == IBV_EVENT_PORT_ERR,
                       __ATOMIC_RELEASE);
      if (t == IBV_EVENT_PORT_ERR)
        RCC_WARN(-1, "NET/IB: port %s went down (%s): transfers through it "
                     "fail unless it comes back within the retry time "
                     "(RINGCC_IB_TIMEOUT, RINGCC_IB_RETRY_CNT)", d->label,
                 rcc_ib_event_name(t));
      else
        RCC_INFO(-1, "NET/IB: port %s is active again", d->label);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_CQ_ERR: {
      void *ctx = t == IBV_EVENT_CQ_ERR ? ev.element.cq->cq_context
                                        : ev.element.qp->qp_context;
      for (struct ib_comm *c = g_ib.live; c != NULL; c = c->live_next)
        if (c == ctx && !__atomic_load_n(&c->async_failed, __ATOMIC_ACQUIRE)) {
          snprintf(c->async_msg, sizeof(c->async_msg),
                   "NET/IB: %s of the connection %s %s on %s reported %s "
                   "(%s)", t == IBV_EVENT_CQ_ERR ? "the completion queue"
                                                 : "a queue pair",
                   dir_word(c), c->peer, d->label, rcc_ib_event_name(t),
                   event_words(t));
          __atomic_store_n(&c->async_failed, 1, __ATOMIC_RELEASE);
        }
      break;
    }
    default:
      RCC_INFO(-1, "NET/IB: %s: event %s (%s)", d->label,
               rcc_ib_event_name(t), event_words(t));
    }
    IBV->ack_async_event(&ev);
  }
}

static void async_drain(void) {
  pthread_mutex_lock(&g_ib.lock);
  async_drain_locked();
  pthread_mutex_unlock(&g_ib.lock);
}

/* ==== memory registration ================================================= */

static const char *human_bytes(size_t b, char *buf, size_t len) {
  if (b >= ((size_t)1 << 30))
    snprintf(buf, len, "%.1f GiB", (double)b / (1 << 30));
  else if (b >= ((size_t)1 << 20))
    snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
  else
    snprintf(buf, len, "%.1f KiB", (double)b / 1024);
  return buf;
}

/* The sentence for a failed registration of bytes. */
static ringcc_result_t reg_error(size_t bytes, const char *what, int e,
                                 char *err, size_t errlen) {
  struct rlimit rl;
  char h[32], lim[32];
  human_bytes(bytes, h, sizeof(h));
  if ((e == ENOMEM || e == EAGAIN || e == EPERM) &&
      getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "NET/IB: registering %zu bytes (%s) of %s with %s failed: "
                    "%s; the locked-memory limit of this process is %llu "
                    "bytes (%s, ulimit -l %llu): raise it (ulimit -l "
                    "unlimited, memlock in /etc/security/limits.conf, or "
                    "docker run --ulimit memlock=-1)",
                    bytes, h, what, g_ib.dev.name, strerror(e),
                    (unsigned long long)rl.rlim_cur,
                    human_bytes((size_t)rl.rlim_cur, lim, sizeof(lim)),
                    (unsigned long long)rl.rlim_cur / 1024);
  return rcc_errf(err, errlen,
                  e == ENOMEM ? RINGCC_ERR_OUT_OF_MEMORY : RINGCC_ERR_SYSTEM,
                  "NET/IB: registering %zu bytes (%s) of %s with %s failed: "
                  "%s", bytes, h, what, g_ib.dev.name, strerror(e));
}

#define ACCESS_ALL                                                             \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* GPU memory: DMA-BUF if it works, else through nvidia-peermem. */
static struct ibv_mr *reg_device(void *p, size_t bytes, const char **how,
                                 char *why, size_t whylen) {
  struct ibv_mr *mr = NULL;
  char dmabuf_why[96] = "";
  if (IBV->reg_dmabuf_mr != NULL && g_cu.range_handle != NULL) {
    cu_ptr start = 0;
    size_t size = 0;
    uintptr_t a = (uintptr_t)p, base = a & ~(uintptr_t)4095;
    uintptr_t end = (a + bytes + 4095) & ~(uintptr_t)4095;
    if (g_cu.pointer_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                          (cu_ptr)a) == 0 &&
        g_cu.pointer_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (cu_ptr)a) ==
            0) {
      if (base < start)
        base = (uintptr_t)start;
      if (end > start + size)
        end = (uintptr_t)(start + size);
    }
    int fd = -1;
    cu_result cr = g_cu.range_handle(&fd, (cu_ptr)base, end - base,
                                     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (cr == 0 && fd >= 0) {
      mr = IBV->reg_dmabuf_mr(g_ib.dev.pd, a - base, bytes, a, fd, ACCESS_ALL);
      int e = errno;
      close(fd);
      if (mr != NULL) {
        *how = "DMA-BUF";
        return mr;
      }
      snprintf(dmabuf_why, sizeof(dmabuf_why), "ibv_reg_dmabuf_mr: %s",
               strerror(e));
    } else {
      snprintf(dmabuf_why, sizeof(dmabuf_why),
               "cuMemGetHandleForAddressRange: CUDA error %d", cr);
    }
  }
  mr = IBV->reg_mr(g_ib.dev.pd, p, bytes, ACCESS_ALL);
  if (mr != NULL) {
    *how = "nvidia-peermem";
    return mr;
  }
  int e = errno;
  snprintf(why, whylen, "%s%sibv_reg_mr of GPU memory (nvidia-peermem): %s",
           dmabuf_why, dmabuf_why[0] ? "; " : "", strerror(e));
  errno = e;
  return NULL;
}

static ringcc_result_t ib_reg_mr(void *comm, void *data, size_t bytes,
                                 void **mhandle, char *err, size_t errlen) {
  struct ib_mr *m = calloc(1, sizeof(*m));
  char why[300];
  (void)comm;
  *mhandle = NULL;
  if (m == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  m->addr = data;
  m->bytes = bytes;
  m->device = is_device_ptr(data);
  if (m->device) {
    m->mr = reg_device(data, bytes, &m->how, why, sizeof(why));
    if (m->mr == NULL) {
      free(m);
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "NET/IB: registering %zu bytes of GPU memory with %s "
                      "failed: %s (set RINGCC_NET_GDR_DISABLE=1 to stage "
                      "through host memory)", bytes, g_ib.dev.name, why);
    }
  } else {
    m->how = "host";
    m->mr = IBV->reg_mr(g_ib.dev.pd, data, bytes, ACCESS_ALL);
    if (m->mr == NULL) {
      int e = errno;
      free(m);
      return reg_error(bytes, "a FIFO", e, err, errlen);
    }
  }
  *mhandle = m;
  return RINGCC_SUCCESS;
}

static void ib_dereg_mr(void *comm, void *mhandle) {
  struct ib_mr *m = mhandle;
  (void)comm;
  if (m == NULL)
    return;
  if (!forked_child()) /* the parent's registration, else */
    IBV->dereg_mr(m->mr);
  free(m);
}

void rcc_net_ib_force_flush(void *mhandle) {
  ((struct ib_mr *)mhandle)->device = 1;
}

uint64_t rcc_net_ib_flushes(void) {
  return __atomic_load_n(&g_ib.flushes, __ATOMIC_RELAXED);
}

/* ---- the registration cache (user memory) -------------------------------- */

/* Page faults of the process (all threads) and of the calling thread. */
static uint64_t faults_of(int who) {
  struct rusage ru;
  if (getrusage(who, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
}

static void cache_unlink(struct reg *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    g_ib.cache = e->next;
  if (e->next)
    e->next->prev = e->prev;
  e->prev = e->next = NULL;
}

static void cache_push_front(struct reg *e) {
  e->prev = NULL;
  e->next = g_ib.cache;
  if (g_ib.cache)
    g_ib.cache->prev = e;
  g_ib.cache = e;
}

static void cache_drop_locked(struct reg *e) {
  cache_unlink(e);
  IBV->dereg_mr(e->mr);
  g_ib.stats.entries--;
  g_ib.stats.bytes -= e->bytes;
  free(e);
}

/* Drops unused entries that are retired or too old, then (beyond the cap)
 * the least recently used unused ones. */
static void cache_trim_locked(int64_t now) {
  struct reg *e = g_ib.cache, *next;
  for (; e != NULL; e = next) {
    next = e->next;
    if (e->refs == 0 && (e->retired || now - e->last_use > REG_MAX_AGE_NS)) {
      if (!e->retired)
        g_ib.stats.evictions++;
      cache_drop_locked(e);
    }
  }
  struct reg *last = g_ib.cache;
  while (last && last->next)
    last = last->next;
  for (e = last; e != NULL && g_ib.stats.bytes > g_ib.set.cache_max;
       e = next) {
    next = e->prev;
    if (e->refs == 0) {
      g_ib.stats.evictions++;
      cache_drop_locked(e);
    }
  }
}

static void cache_flush_locked(void) {
  struct reg *e = g_ib.cache, *next;
  for (; e != NULL; e = next) {
    next = e->next;
    if (e->refs == 0)
      cache_drop_locked(e);
  }
}

/* A new registration covering [p, p + len): a REG_WINDOW-aligned window
 * around it where that is mapped (one registration serves the neighbouring
 * pieces of the same buffer), else just its pages; read-only memory
 * (a send from a constant) without write access. */
/* 1 if every page of [a, b) is mapped. */
static int mapped(uintptr_t a, uintptr_t b) {
  static unsigned char vec[REG_WINDOW / 4096]; /* under g_ib.lock */
  return b <= a || (b - a <= REG_WINDOW &&
                    mincore((void *)a, b - a, vec) == 0);
}

/* Extends [lo, hi) (page aligned) down to floor and up to ceil while the
 * pages are mapped, so a registration never asks for a hole. */
static void mapped_extent(uintptr_t *lo, uintptr_t *hi, uintptr_t floor,
                          uintptr_t ceil) {
  uintptr_t in = *lo, out = floor; /* the lowest mapped start in [out, in] */
  while (in - out > 4096) {
    uintptr_t mid = (out + (in - out) / 2) & ~(uintptr_t)4095;
    if (mapped(mid, *lo))
      in = mid;
    else
      out = mid;
  }
  if (mapped(out, *lo))
    in = out;
  *lo = in;
  in = *hi, out = ceil; /* the highest mapped end in [in, out] */
  while (out - in > 4096) {
    uintptr_t mid = (in + (out - in) / 2) & ~(uintptr_t)4095;
    if (mapped(*hi, mid))
      in = mid;
    else
      out = mid;
  }
  if (mapped(*hi, out))
    in = out;
  *hi = in;
}

static struct ibv_mr *reg_host(const char *p, size_t len, int writable,
                               int *got_writable, int *e) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t lo = a & ~(uintptr_t)4095, hi = (a + len + 4095) & ~(uintptr_t)4095;
  uintptr_t wlo = lo, whi = hi;
  mapped_extent(&wlo, &whi, a & ~(uintptr_t)(REG_WINDOW - 1),
                (a + len + REG_WINDOW - 1) & ~(uintptr_t)(REG_WINDOW - 1));
  uintptr_t spans[2][2] = {{wlo, whi}, {lo, hi}};
  struct ibv_mr *mr = NULL;
  for (int i = 0; i < 2 && mr == NULL; i++) {
    mr = IBV->reg_mr(g_ib.dev.pd, (void *)spans[i][0],
                     spans[i][1] - spans[i][0], ACCESS_ALL);
    *e = errno;
    if (mr == NULL && (*e == ENOMEM || *e == EAGAIN || *e == EPERM))
      return NULL; /* a limit: a smaller window will not help much */
  }
  *got_writable = mr != NULL;
  if (mr == NULL && !writable) {
    mr = IBV->reg_mr(g_ib.dev.pd, (void *)spans[1][0],
                     spans[1][1] - spans[1][0], 0);
    *e = errno;
  }
  return mr;
}

static ringcc_result_t cache_get(const char *p, size_t len, int writable,
                                 struct reg **out, char *err, size_t errlen) {
  int64_t now = rcc_now_ns();
  int device = is_device_ptr(p);
  uint64_t bid = device ? cu_buffer_id(p) : 0;
  *out = NULL;
  pthread_mutex_lock(&g_ib.lock);
  uint64_t faults = faults_of(RUSAGE_SELF);
  cache_trim_locked(now);
  for (struct reg *e = g_ib.cache; e != NULL; e = e->next) {
    if (e->retired || e->device != device || p < e->addr ||
        p + len > e->addr + e->bytes || (writable && !e->writable))
      continue;
    if (device ? e->buffer_id != bid : e->faults != faults) {
      /* The memory may have been freed and mapped again: its pages may not
       * be the ones this registration pinned. */
      e->retired = 1;
      g_ib.stats.stale++;
      continue;
    }
    e->refs++;
    e->last_use = now;
    cache_unlink(e);
    cache_push_front(e);
    g_ib.stats.hits++;
    *out = e;
    pthread_mutex_unlock(&g_ib.lock);
    return RINGCC_SUCCESS;
  }
  struct reg *e = calloc(1, sizeof(*e));
  int errnum = ENOMEM, w = 0;
  uint64_t mine = faults_of(RUSAGE_THREAD);
  struct ibv_mr *mr = NULL;
  const char *how = "";
  char why[300] = "";
  if (e != NULL && device) {
    /* The whole allocation: one registration per cudaMalloc. */
    cu_ptr start = 0;
    size_t size = 0;
    if (g_cu.pointer_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                          (cu_ptr)(uintptr_t)p) == 0 &&
        g_cu.pointer_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                          (cu_ptr)(uintptr_t)p) == 0 &&
        size >= len)
      mr = reg_device((void *)(uintptr_t)start, size, &how, why, sizeof(why));
    else
      mr = reg_device((void *)p, len, &how, why, sizeof(why));
    errnum = errno;
    w = 1;
  } else if (e != NULL) {
    mr = reg_host(p, len, writable, &w, &errnum);
  }
  if (mr == NULL) {
    free(e);
    pthread_mutex_unlock(&g_ib.lock);
    if (device)
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "NET/IB: registering %zu bytes of GPU memory (a user "
                      "buffer) with %s failed: %s", len, g_ib.dev.name, why);
    return reg_error(len, "a user buffer", errnum, err, errlen);
  }
  /* The registration faulted its pages in. If no other thread took a fault
   * meanwhile, the entries that were valid still are. */
  uint64_t after = faults_of(RUSAGE_SELF);
  if (after - faults == faults_of(RUSAGE_THREAD) - mine)
    for (struct reg *o = g_ib.cache; o != NULL; o = o->next)
      if (!o->device && o->faults == faults)
        o->faults = after;
  e->addr = mr->addr;
  e->bytes = mr->length;
  e->mr = mr;
  e->writable = w;
  e->device = device;
  e->buffer_id = bid;
  e->faults = after;
  e->refs = 1;
  e->last_use = now;
  cache_push_front(e);
  g_ib.stats.misses++;
  g_ib.stats.entries++;
  g_ib.stats.bytes += e->bytes;
  cache_trim_locked(now);
  *out = e;
  pthread_mutex_unlock(&g_ib.lock);
  return RINGCC_SUCCESS;
}

static void cache_put(struct reg *e) {
  if (e == NULL)
    return;
  pthread_mutex_lock(&g_ib.lock);
  if (--e->refs == 0 && (e->retired || g_ib.set.cache_max == 0))
    cache_drop_locked(e);
  pthread_mutex_unlock(&g_ib.lock);
}

void rcc_net_ib_cache_stats(struct rcc_ib_cache_stats *out) {
  pthread_mutex_lock(&g_ib.lock);
  *out = g_ib.stats;
  pthread_mutex_unlock(&g_ib.lock);
}

/* ==== queue pairs ========================================================= */

#define WRID(type, q, idx, seq)                                                \
  ((uint64_t)(type) << 56 | (uint64_t)(q) << 48 | (uint64_t)(idx) << 32 |      \
   (uint64_t)(uint32_t)(seq))
#define WRID_TYPE(w) ((int)((w) >> 56))
#define WRID_QP(w) ((int)(((w) >> 48) & 0xff))
#define WRID_IDX(w) ((int)(((w) >> 32) & 0xffff))
#define WRID_SEQ(w) ((uint32_t)(w))
#define CTS_RECVS (2 * CTS_WINDOW + 2) /* CTS receives a sender keeps posted */

static uint32_t random_psn(void) {
  uint32_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
    v = (uint32_t)rcc_now_ns() ^ (uint32_t)getpid() << 8;
  return v & 0xffffff;
}

static const char *qp_state_name(enum ibv_qp_state s) {
  switch (s) {
  case IBV_QPS_INIT:
    return "INIT";
  case IBV_QPS_RTR:
    return "RTR (ready to receive)";
  case IBV_QPS_RTS:
    return "RTS (ready to send)";
  case IBV_QPS_ERR:
    return "ERR";
  default:
    return "?";
  }
}

/* Why moving to RTR/RTS may have failed, beyond errno. */
static void rtr_hint(const struct ib_comm *c, char *buf, size_t len) {
  char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
  if (g_ib.dev.link_layer == IBV_LINK_LAYER_ETHERNET)
    snprintf(buf, len, " (RoCE: the peer's GID %s cannot be reached from "
             "GID index %d (%s) of this port: check RINGCC_IB_GID_INDEX on "
             "both hosts and that their RoCE interfaces are up and route to "
             "each other)", rcc_ib_gid_str(c->remote.gid, a, sizeof(a)),
             g_ib.dev.gid_index, rcc_ib_gid_str(g_ib.dev.gid, b, sizeof(b)));
  else
    snprintf(buf, len, " (InfiniBand: the peer's LID is %u; is a subnet "
             "manager running?)", (unsigned)c->remote.lid);
}

static ringcc_result_t qp_modify(struct ib_comm *c, struct ibv_qp *qp,
                                 struct ibv_qp_attr *a, int mask) {
  int e = IBV->modify_qp(qp, a, mask);
  if (e == 0)
    return RINGCC_SUCCESS;
  char hint[400] = "";
  if (a->qp_state == IBV_QPS_RTR || a->qp_state == IBV_QPS_RTS)
    rtr_hint(c, hint, sizeof(hint));
  return comm_fail(c, RINGCC_ERR_NETWORK,
                   "NET/IB: moving queue pair 0x%x of the connection %s %s "
                   "on %s to %s failed: %s%s", qp->qp_num, dir_word(c),
                   c->peer, g_ib.dev.label, qp_state_name(a->qp_state),
                   strerror(e > 0 ? e : errno), hint);
}

static ringcc_result_t qp_create(struct ib_comm *c, struct ibv_qp **out) {
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.qp_context = c;
  ia.send_cq = ia.recv_cq = c->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = c->sq_max;
  ia.cap.max_recv_wr = c->sq_max;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  *out = IBV->create_qp(g_ib.dev.pd, &ia);
  if (*out == NULL)
    return comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: cannot create a queue pair on %s: %s",
                     g_ib.dev.label, strerror(errno));
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = (uint8_t)g_ib.dev.port;
  a.qp_access_flags = ACCESS_ALL;
  return qp_modify(c, *out, &a,
                   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                       IBV_QP_ACCESS_FLAGS);
}

/* INIT -> RTR -> RTS towards the remote queue pair qpn of info. */
static ringcc_result_t qp_connect(struct ib_comm *c, struct ibv_qp *qp,
                                  const struct qp_info *info, uint32_t qpn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = info->mtu < g_ib.dev.mtu ? (enum ibv_mtu)info->mtu
                                        : g_ib.dev.mtu;
  a.dest_qp_num = qpn;
  a.rq_psn = info->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = (uint8_t)g_ib.dev.port;
  a.ah_attr.sl = (uint8_t)g_ib.set.sl;
  if (g_ib.dev.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, info->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)g_ib.dev.gid_index;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = (uint8_t)g_ib.set.tc;
  } else {
    a.ah_attr.dlid = info->lid;
  }
  ringcc_result_t r = qp_modify(
      c, qp, &a,
      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (r != RINGCC_SUCCESS)
    return r;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)g_ib.set.timeout;
  a.retry_cnt = (uint8_t)g_ib.set.retry_cnt;
  a.rnr_retry = 7; /* infinite: a receiver always reposts */
  a.sq_psn = c->local.psn;
  a.max_rd_atomic = 1;
  return qp_modify(c, qp, &a,
                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Every queue pair to ERR: the NIC stops reading and writing their memory. */
static void qps_to_error(struct ib_comm *c) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_ERR;
  for (int q = 0; q < c->nqps; q++)
    if (c->qps[q])
      IBV->modify_qp(c->qps[q], &a, IBV_QP_STATE);
}

static void req_release(struct ib_req *r);

static void comm_free(struct ib_comm *c) {
  if (c == NULL)
    return;
  for (int q = 0; q < c->nqps; q++)
    if (c->qps[q])
      IBV->destroy_qp(c->qps[q]);
  if (c->flush_qp)
    IBV->destroy_qp(c->flush_qp);
  for (int i = 0; i < MAX_REQ; i++) /* the NIC no longer reads them */
    if (c->reqs[i].state != REQ_FREE)
      req_release(&c->reqs[i]);
  if (c->cq)
    IBV->destroy_cq(c->cq);
  if (c->chan)
    IBV->destroy_comp_channel(c->chan);
  if (c->cts_mr)
    IBV->dereg_mr(c->cts_mr);
  if (c->bounce_mr)
    IBV->dereg_mr(c->bounce_mr);
  if (c->flush_mr)
    IBV->dereg_mr(c->flush_mr);
  free(c->cts);
  free(c->bounce);
  free(c->flush_buf);
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

/* A send or receive comm with nqps queue pairs in INIT. */
static ringcc_result_t comm_new(int kind, int nqps, struct ib_comm **out,
                                char *err, size_t errlen) {
  struct ib_comm *c = calloc(1, sizeof(*c));
  *out = NULL;
  if (c == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  c->kind = kind;
  c->fd = -1;
  c->nqps = nqps;
  c->sq_max = MAX_REQ + 8;
  snprintf(c->peer, sizeof(c->peer), "?");
  for (int i = 0; i < MAX_REQ; i++)
    c->freel[c->nfree++] = &c->reqs[MAX_REQ - 1 - i];
  ringcc_result_t r = RINGCC_SUCCESS;
  int cqe = (nqps + 2) * (2 * MAX_REQ + 16);
  if ((c->chan = IBV->create_comp_channel(g_ib.dev.ctx)) == NULL ||
      (c->cq = IBV->create_cq(g_ib.dev.ctx, cqe, c, c->chan, 0)) == NULL)
    r = comm_fail(c, RINGCC_ERR_NETWORK,
                  "NET/IB: cannot create a completion %s of %d entries on "
                  "%s: %s", c->chan ? "queue" : "channel", cqe,
                  g_ib.dev.label, strerror(errno));
  if (r == RINGCC_SUCCESS) {
    int fl = fcntl(c->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(c->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0)
      r = comm_fail(c, RINGCC_ERR_SYSTEM,
                    "NET/IB: cannot make a completion channel nonblocking: "
                    "%s", strerror(errno));
  }
  for (int q = 0; q < nqps && r == RINGCC_SUCCESS; q++)
    r = qp_create(c, &c->qps[q]);
  if (r == RINGCC_SUCCESS) {
    size_t bytes = CTS_RING * sizeof(struct cts);
    if (posix_memalign((void **)&c->cts, 4096, bytes) != 0) {
      c->cts = NULL;
      r = comm_fail(c, RINGCC_ERR_OUT_OF_MEMORY, "NET/IB: out of memory");
    } else {
      memset(c->cts, 0, bytes);
      c->cts_mr = IBV->reg_mr(g_ib.dev.pd, c->cts, bytes, ACCESS_ALL);
      if (c->cts_mr == NULL)
        r = c->error = reg_error(bytes, "a clear-to-send ring", errno,
                                 c->message, sizeof(c->message));
    }
  }
  if (r != RINGCC_SUCCESS) {
    snprintf(err, errlen, "%s", c->message);
    comm_free(c);
    return r;
  }
  struct qp_info *l = &c->local;
  l->nqps = (uint32_t)nqps;
  for (int q = 0; q < nqps; q++)
    l->qpn[q] = c->qps[q]->qp_num;
  l->psn = random_psn();
  l->lid = g_ib.dev.lid;
  l->link_layer = (uint8_t)g_ib.dev.link_layer;
  l->mtu = (uint8_t)g_ib.dev.mtu;
  memcpy(l->gid, g_ib.dev.gid, 16);
  l->gid_index = (uint32_t)g_ib.dev.gid_index;
  if (kind == COMM_SEND) {
    l->cts_addr = (uint64_t)(uintptr_t)c->cts;
    l->cts_rkey = c->cts_mr->rkey;
  }
  snprintf(l->dev, sizeof(l->dev), "%.31s", g_ib.dev.label);
  *out = c;
  return RINGCC_SUCCESS;
}

/* ==== the side channel: wire format ======================================= */

static void put16(uint8_t **p, uint16_t v) {
  v = htons(v);
  memcpy(*p, &v, 2);
  *p += 2;
}
static void put32(uint8_t **p, uint32_t v) {
  v = htonl(v);
  memcpy(*p, &v, 4);
  *p += 4;
}
static void put64(uint8_t **p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p, (uint32_t)v);
}
static uint16_t get16(const uint8_t **p) {
  uint16_t v;
  memcpy(&v, *p, 2);
  *p += 2;
  return ntohs(v);
}
static uint32_t get32(const uint8_t **p) {
  uint32_t v;
  memcpy(&v, *p, 4);
  *p += 4;
  return ntohl(v);
}
static uint64_t get64(const uint8_t **p) {
  uint64_t hi = get32(p);
  return hi << 32 | get32(p);
}

/* magic, version, hello (64, zero in an answer), then the qp_info. */
static void wire_encode(uint8_t *w, uint32_t magic, const void *hello,
                        const struct qp_info *q) {
  uint8_t *p = w;
  memset(w, 0, WIRE_BYTES);
  put32(&p, magic);
  put32(&p, WIRE_VERSION);
  if (hello)
    memcpy(p, hello, RCC_NET_HELLO_BYTES);
  p += RCC_NET_HELLO_BYTES;
  put32(&p, q->nqps);
  for (int i = 0; i < MAX_QPS; i++)
    put32(&p, q->qpn[i]);
  put32(&p, q->psn);
  put16(&p, q->lid);
  *p++ = q->link_layer;
  *p++ = q->mtu;
  memcpy(p, q->gid, 16);
  p += 16;
  put32(&p, q->gid_index);
  put64(&p, q->cts_addr);
  put32(&p, q->cts_rkey);
  memcpy(p, q->dev, sizeof(q->dev));
}
_Static_assert(8 + RCC_NET_HELLO_BYTES + 4 + 4 * MAX_QPS + 4 + 2 + 2 + 16 + 4 +
                       8 + 4 + 32 <=
                   MAC_AT,
               "side-channel message size (the offer's proof follows)");

/* An offer's proof: HMAC-SHA-256(key, label || listener's nonce || the
 * offer up to the proof). */
static void offer_mac(const uint8_t key[RCC_NET_KEY_BYTES],
                      const uint8_t nonce[NONCE_BYTES], const uint8_t *offer,
                      uint8_t mac[MAC_BYTES]) {
  struct rcc_hmac m;
  rcc_hmac_init(&m, key, RCC_NET_KEY_BYTES);
  rcc_hmac_update(&m, MAC_LABEL, sizeof(MAC_LABEL));
  rcc_hmac_update(&m, nonce, NONCE_BYTES);
  rcc_hmac_update(&m, offer, MAC_AT);
  rcc_hmac_final(&m, mac);
}

/* 0 and the fields, or -1 with why. */
static int wire_decode(const uint8_t *w, uint32_t magic, void *hello,
                       struct qp_info *q, char *why, size_t len) {
  const uint8_t *p = w;
  uint32_t m = get32(&p), version = get32(&p);
  if (m != magic || version != WIRE_VERSION) {
    snprintf(why, len, "not a NET/IB %s (magic 0x%08x, version %u)",
             magic == OFFER_MAGIC ? "connection offer" : "answer",
             (unsigned)m, (unsigned)version);
    return -1;
  }
  if (hello)
    memcpy(hello, p, RCC_NET_HELLO_BYTES);
  p += RCC_NET_HELLO_BYTES;
  memset(q, 0, sizeof(*q));
  q->nqps = get32(&p);
  for (int i = 0; i < MAX_QPS; i++)
    q->qpn[i] = get32(&p);
  q->psn = get32(&p);
  q->lid = get16(&p);
  q->link_layer = *p++;
  q->mtu = *p++;
  memcpy(q->gid, p, 16);
  p += 16;
  q->gid_index = get32(&p);
  q->cts_addr = get64(&p);
  q->cts_rkey = get32(&p);
  memcpy(q->dev, p, sizeof(q->dev));
  q->dev[sizeof(q->dev) - 1] = '\0';
  if (q->nqps < 1 || q->nqps > MAX_QPS) {
    snprintf(why, len, "%u queue pairs (1..%d)", (unsigned)q->nqps, MAX_QPS);
    return -1;
  }
  if (q->link_layer != g_ib.dev.link_layer) {
    snprintf(why, len, "the peer's port %s is %s and this rank's %s is %s: "
             "they cannot connect (RINGCC_IB_HCA picks the ports)", q->dev,
             link_name(q->link_layer), g_ib.dev.label,
             link_name(g_ib.dev.link_layer));
    return -1;
  }
  return 0;
}

/* Listen handle: magic, family (4 or 6), port, address[16], scope id, the
 * listener's nonce[16] (at 28). */
static void handle_encode(uint8_t *h, const struct sockaddr_storage *a,
                          const uint8_t nonce[NONCE_BYTES]) {
  uint8_t *p = h;
  memset(h, 0, RCC_NET_HANDLE_BYTES);
  memcpy(h + 28, nonce, NONCE_BYTES);
  put32(&p, HANDLE_MAGIC);
  put16(&p, a->ss_family == AF_INET ? 4 : 6);
  put16(&p, (uint16_t)rcc_socket_addr_port(a));
  if (a->ss_family == AF_INET) {
    memcpy(p, &((const struct sockaddr_in *)a)->sin_addr, 4);
  } else {
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)a;
    memcpy(p, &a6->sin6_addr, 16);
    uint8_t *q = p + 16;
    put32(&q, a6->sin6_scope_id);
  }
}

static ringcc_result_t handle_decode(const uint8_t *h,
                                     struct sockaddr_storage *a,
                                     uint8_t nonce[NONCE_BYTES], char *err,
                                     size_t errlen) {
  const uint8_t *p = h;
  uint32_t magic = get32(&p);
  uint16_t family = get16(&p), port = get16(&p);
  memset(a, 0, sizeof(*a));
  memcpy(nonce, h + 28, NONCE_BYTES);
  if (magic != HANDLE_MAGIC || (family != 4 && family != 6) || port == 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: the peer's listen handle is not a NET/IB handle "
                    "(magic 0x%08x): does the peer use another network "
                    "plugin? (RINGCC_NET must agree on every rank)",
                    (unsigned)magic);
  if (family == 4) {
    struct sockaddr_in *a4 = (struct sockaddr_in *)a;
    a4->sin_family = AF_INET;
    memcpy(&a4->sin_addr, p, 4);
  } else {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)a;
    a6->sin6_family = AF_INET6;
    memcpy(&a6->sin6_addr, p, 16);
    const uint8_t *q = p + 16;
    a6->sin6_scope_id = get32(&q);
  }
  rcc_socket_addr_set_port(a, port);
  return RINGCC_SUCCESS;
}

/* ==== the side channel: setup and liveness =============================== */

/* Reads what the side channel holds, up to the message expected now (an
 * answer, "ready", or "close"), without blocking; a closed or failed
 * channel sets side_end. */
static void side_read(struct ib_comm *c) {
  size_t want = c->hs == HS_ANSWER ? WIRE_BYTES : 4;
  while (c->side_end == 0 && c->wire_got < want) {
    ssize_t n = recv(c->fd, c->wire + c->wire_got, want - c->wire_got,
                     MSG_DONTWAIT);
    if (n > 0) {
      c->wire_got += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return;
    c->side_end = 1;
    snprintf(c->side_err, sizeof(c->side_err), "%s",
             n == 0 ? "end of stream" : strerror(errno));
    return;
  }
  if (c->hs == HS_DONE && c->wire_got == 4) {
    const uint8_t *p = c->wire;
    if (get32(&p) == CLOSE_MAGIC) {
      c->side_end = 2;
      snprintf(c->side_err, sizeof(c->side_err), "closed cleanly");
    }
    c->wire_got = 0;
  }
}

static ringcc_result_t post_cts_recvs(struct ib_comm *c, int n) {
  for (int i = 0; i < n; i++) {
    struct ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WRID(WR_CTS_IN, 0, 0, 0);
    int e = ibv_post_recv(c->qps[0], &wr, &bad);
    if (e != 0)
      return comm_fail(c, RINGCC_ERR_NETWORK,
                       "NET/IB: posting a receive on the connection to %s "
                       "(%s) failed: %s", c->peer, g_ib.dev.label,
                       strerror(e));
  }
  return RINGCC_SUCCESS;
}

/* The connector got the answer: its queue pairs to RTS, then "ready". */
static ringcc_result_t hs_answer(struct ib_comm *c) {
  char why[300];
  if (wire_decode(c->wire, ANSWER_MAGIC, NULL, &c->remote, why,
                  sizeof(why)) != 0)
    return comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: the answer from %s: %s", c->peer, why);
  if (c->remote.nqps != (uint32_t)c->nqps)
    return comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: %s answered with %u queue pairs for %d",
                     c->peer, (unsigned)c->remote.nqps, c->nqps);
  ringcc_result_t r = RINGCC_SUCCESS;
  for (int q = 0; q < c->nqps && r == RINGCC_SUCCESS; q++)
    r = qp_connect(c, c->qps[q], &c->remote, c->remote.qpn[q]);
  if (r == RINGCC_SUCCESS)
    r = post_cts_recvs(c, CTS_RECVS);
  if (r != RINGCC_SUCCESS)
    return r;
  uint8_t ready[4], *p = ready;
  char err[RCC_ERRLEN];
  put32(&p, READY_MAGIC);
  r = rcc_socket_send_all(c->fd, ready, 4, rcc_now_ns() + 5000000000LL, err,
                          sizeof(err));
  if (r != RINGCC_SUCCESS)
    return comm_fail(c, RINGCC_ERR_PEER_FAILED,
                     "NET/IB: telling %s that this side is ready failed: %s",
                     c->peer, err);
  c->hs = HS_DONE;
  c->wire_got = 0;
  return RINGCC_SUCCESS;
}

/* One nonblocking step of the setup exchange. */
static void hs_step(struct ib_comm *c) {
  if (c->hs == HS_DONE || c->error != RINGCC_SUCCESS)
    return;
  side_read(c);
  if (c->hs == HS_ANSWER && c->wire_got == WIRE_BYTES) {
    hs_answer(c);
    return;
  }
  if (c->hs == HS_READY && c->wire_got == 4) {
    const uint8_t *p = c->wire;
    if (get32(&p) != READY_MAGIC) {
      comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: %s sent something else than "
                "'ready' during setup", c->peer);
      return;
    }
    c->hs = HS_DONE;
    c->wire_got = 0;
    return;
  }
  if (c->side_end) {
    comm_fail(c, RINGCC_ERR_PEER_FAILED,
              "NET/IB: the connection %s %s ended during setup (%s): the "
              "peer failed to set up its side or exited", dir_word(c),
              c->peer, c->side_err);
    return;
  }
  if (rcc_now_ns() >= c->deadline)
    comm_fail(c, RINGCC_ERR_TIMEOUT,
              "NET/IB: the connection %s %s did not finish its setup (%s) "
              "before the deadline", dir_word(c), c->peer,
              c->hs == HS_ANSWER ? "no answer to the offer"
                                 : "no 'ready' after the answer");
}

static ringcc_result_t ib_ready(void *comm, int64_t deadline_ns, char *err,
                                size_t errlen) {
  struct ib_comm *c = comm;
  if (deadline_ns < c->deadline)
    c->deadline = deadline_ns;
  for (;;) {
    hs_step(c);
    if (c->error != RINGCC_SUCCESS) {
      snprintf(err, errlen, "%s", c->message);
      return c->error;
    }
    if (c->hs == HS_DONE)
      return RINGCC_SUCCESS;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int ms = rcc_socket_poll_ms(c->deadline);
    poll(&pfd, 1, ms > 100 ? 100 : ms);
  }
}

/* ---- listen, connect, accept ---------------------------------------------- */

struct pending {
  int fd;
  size_t got;
  int64_t t0;
  char peer[96];
  uint8_t buf[WIRE_BYTES];
};

struct ib_listen {
  int kind; /* COMM_LISTEN */
  int fd;
  int npending;
  struct pending *pending; /* PENDING_MAX */
  uint8_t key[RCC_NET_KEY_BYTES];
  uint8_t nonce[NONCE_BYTES]; /* in the handle: proofs are for us only */
  uint8_t (*accepted)[MAC_BYTES]; /* proofs of the offers accepted */
  int naccepted, cap_accepted;
  int64_t accept_at;  /* out of descriptors: accept() again from then */
  int out_of_fds;     /* accept() ran out of descriptors (warned once) */
};

static void listen_free(struct ib_listen *l) {
  memset(l->key, 0, sizeof(l->key));
  free(l->accepted);
  free(l->pending);
  free(l);
}

static ringcc_result_t ib_listen(const uint8_t *key, void *handle,
                                 void **listen_comm, char *err,
                                 size_t errlen) {
  struct ib_listen *l = calloc(1, sizeof(*l));
  struct sockaddr_storage bound;
  *listen_comm = NULL;
  if (l == NULL || (l->pending = calloc(PENDING_MAX, sizeof(*l->pending))) ==
                       NULL) {
    free(l);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  }
  l->kind = COMM_LISTEN;
  l->fd = -1;
  memcpy(l->key, key, RCC_NET_KEY_BYTES);
  int e = rcc_random_bytes(l->nonce, NONCE_BYTES);
  if (e != 0) {
    listen_free(l);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "NET/IB: random bytes "
                    "for the listener's nonce failed: %s", strerror(e));
  }
  ringcc_result_t r = rcc_socket_listen(&g_ib.side_addr, &l->fd, &bound, err,
                                        errlen);
  if (r != RINGCC_SUCCESS) {
    listen_free(l);
    return r;
  }
  handle_encode(handle, &bound, l->nonce);
  live_add(NULL);
  *listen_comm = l;
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_connect(const uint8_t *key, const void *handle,
                                  const void *hello, void **send_comm,
                                  int64_t deadline_ns, char *err,
                                  size_t errlen) {
  struct sockaddr_storage addr;
  struct ib_comm *c;
  uint8_t offer[WIRE_BYTES], nonce[NONCE_BYTES];
  *send_comm = NULL;
  ringcc_result_t r = handle_decode(handle, &addr, nonce, err, errlen);
  if (r == RINGCC_SUCCESS)
    r = comm_new(COMM_SEND, g_ib.set.qps, &c, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  rcc_socket_addr_str(&addr, c->peer, sizeof(c->peer));
  c->deadline = deadline_ns;
  c->hs = HS_ANSWER;
  wire_encode(offer, OFFER_MAGIC, hello, &c->local);
  offer_mac(key, nonce, offer, offer + MAC_AT);
  if ((r = rcc_socket_connect(&addr, deadline_ns, &c->fd, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_socket_send_all(c->fd, offer, WIRE_BYTES, deadline_ns, err,
                               errlen)) != RINGCC_SUCCESS) {
    comm_free(c);
    return r;
  }
  live_add(c);
  *send_comm = c;
  return RINGCC_SUCCESS;
}

static void pending_drop(struct ib_listen *l, int i, const char *why) {
  RCC_INFO(-1, "NET/IB: dropped a side-channel connection from %s: %s",
           l->pending[i].peer, why);
  close(l->pending[i].fd);
  l->pending[i] = l->pending[--l->npending];
}

static int oldest_pending(const struct ib_listen *l) {
  int oldest = -1;
  for (int i = 0; i < l->npending; i++)
    if (oldest < 0 || l->pending[i].t0 < l->pending[oldest].t0)
      oldest = i;
  return oldest;
}

/* Takes what the kernel has queued. Beyond PENDING_MAX sockets whose offer
 * is not in, the oldest is dropped (a flood of strangers cannot keep a real
 * peer out: its offer comes with its connect); out of descriptors (EMFILE,
 * ENFILE), the oldest is dropped too and accept() waits BACKOFF_NS instead
 * of failing. */
static ringcc_result_t accept_new(struct ib_listen *l, char *err,
                                  size_t errlen) {
  int64_t now = rcc_now_ns();
  for (int k = 0; k < 256 && now >= l->accept_at; k++) {
    int fd;
    struct sockaddr_storage peer;
    ringcc_result_t r = rcc_socket_accept(l->fd, &fd, &peer, err, errlen);
    if (r != RINGCC_SUCCESS) {
      int e = errno;
      if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM)
        return r;
      int oldest = oldest_pending(l);
      if (!l->out_of_fds)
        RCC_WARN(-1, "NET/IB: %s; %s and retrying in %lld ms", err,
                 oldest >= 0 ? "dropping the oldest connection whose offer "
                               "is not in"
                             : "waiting",
                 BACKOFF_NS / 1000000);
      l->out_of_fds = 1;
      if (oldest >= 0)
        pending_drop(l, oldest, "out of descriptors: made room");
      l->accept_at = now + BACKOFF_NS;
      return RINGCC_SUCCESS;
    }
    if (fd < 0)
      return RINGCC_SUCCESS;
    if (l->npending == PENDING_MAX)
      pending_drop(l, oldest_pending(l), "too many connections whose offer "
                   "is not in (the oldest goes)");
    struct pending *p = &l->pending[l->npending++];
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->t0 = rcc_now_ns();
    rcc_socket_addr_str(&peer, p->peer, sizeof(p->peer));
  }
  return RINGCC_SUCCESS;
}

/* The whole offer is in: 0 when its proof is the key's for this listener
 * and no offer with the same proof was accepted (a replay), else -1 with
 * why. */
static int offer_check(const struct ib_listen *l, const struct pending *p,
                       const char **why) {
  uint8_t mac[MAC_BYTES];
  offer_mac(l->key, l->nonce, p->buf, mac);
  int ok = rcc_equal_ct(mac, p->buf + MAC_AT, MAC_BYTES);
  memset(mac, 0, sizeof(mac));
  if (!ok) {
    *why = "it does not prove the communicator's key (a stranger, a peer of "
           "another communicator, or an offer made for another listener)";
    return -1;
  }
  for (int i = 0; i < l->naccepted; i++)
    if (memcmp(l->accepted[i], p->buf + MAC_AT, MAC_BYTES) == 0) {
      *why = "it repeats an offer already accepted (a replay)";
      return -1;
    }
  return 0;
}

/* Remembers an accepted offer's proof, so that a replay is refused. */
static ringcc_result_t offer_accepted(struct ib_listen *l,
                                      const struct pending *p, char *err,
                                      size_t errlen) {
  if (l->naccepted == l->cap_accepted) {
    int cap = l->cap_accepted ? 2 * l->cap_accepted : 16;
    void *a = realloc(l->accepted, (size_t)cap * MAC_BYTES);
    if (a == NULL)
      return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                      "NET/IB: out of memory accepting a connection");
    l->accepted = a;
    l->cap_accepted = cap;
  }
  memcpy(l->accepted[l->naccepted++], p->buf + MAC_AT, MAC_BYTES);
  return RINGCC_SUCCESS;
}

/* Reads the pending offers; returns the index of a complete, proven one, or
 * -1. An offer with a wrong proof is dropped as soon as it is in. */
static int read_pending(struct ib_listen *l) {
  int64_t now = rcc_now_ns();
  for (int i = 0; i < l->npending;) {
    struct pending *p = &l->pending[i];
    ssize_t n = p->got < WIRE_BYTES
                    ? recv(p->fd, p->buf + p->got, WIRE_BYTES - p->got,
                           MSG_DONTWAIT)
                    : 0;
    if (n > 0)
      p->got += (size_t)n;
    if (p->got >= 4) {
      const uint8_t *q = p->buf;
      if (get32(&q) != OFFER_MAGIC) {
        pending_drop(l, i, "not a NET/IB connection offer");
        continue;
      }
    }
    const char *why;
    if (p->got == WIRE_BYTES && offer_check(l, p, &why) != 0) {
      pending_drop(l, i, why);
      continue;
    }
    if (p->got == WIRE_BYTES)
      return i;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR)) {
      pending_drop(l, i, n == 0 ? "closed before its offer was complete"
                                : strerror(errno));
      continue;
    }
    if (now - p->t0 > OFFER_TIMEOUT_NS) {
      pending_drop(l, i, "no complete offer within 5 s");
      continue;
    }
    i++;
  }
  return -1;
}

/* The receive comm for a complete offer: queue pairs to RTS, answer. */
static ringcc_result_t accept_offer(struct pending *p, void *hello,
                                    struct ib_comm **out, int64_t deadline,
                                    char *err, size_t errlen) {
  struct qp_info remote;
  char why[300];
  struct ib_comm *c;
  *out = NULL;
  if (wire_decode(p->buf, OFFER_MAGIC, hello, &remote, why, sizeof(why)) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "NET/IB: the connection offer from %s: %s", p->peer, why);
  ringcc_result_t r = comm_new(COMM_RECV, (int)remote.nqps, &c, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  c->remote = remote;
  snprintf(c->peer, sizeof(c->peer), "%s", p->peer);
  c->fd = p->fd;
  p->fd = -1;
  c->deadline = deadline;
  c->hs = HS_READY;
  for (int q = 0; q < c->nqps && r == RINGCC_SUCCESS; q++)
    r = qp_connect(c, c->qps[q], &c->remote, c->remote.qpn[q]);
  if (r == RINGCC_SUCCESS) {
    uint8_t answer[WIRE_BYTES];
    wire_encode(answer, ANSWER_MAGIC, NULL, &c->local);
    r = rcc_socket_send_all(c->fd, answer, WIRE_BYTES, deadline, c->message,
                            sizeof(c->message));
  }
  if (r != RINGCC_SUCCESS) {
    snprintf(err, errlen, "%s", c->message);
    comm_free(c); /* closes the side channel: the connector sees it end */
    return r;
  }
  live_add(c);
  *out = c;
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_accept(void *listen_comm, void *hello,
                                 void **recv_comm, int64_t deadline_ns,
                                 char *err, size_t errlen) {
  struct ib_listen *l = listen_comm;
  struct pollfd pfds[PENDING_MAX + 1];
  *recv_comm = NULL;
  for (;;) {
    ringcc_result_t r = accept_new(l, err, errlen);
    if (r != RINGCC_SUCCESS)
      return r;
    int i = read_pending(l);
    if (i >= 0) {
      struct ib_comm *c = NULL;
      struct pending offer = l->pending[i];
      l->pending[i] = l->pending[--l->npending];
      /* Its connection needs descriptors of its own (a completion
       * channel): where strangers took them all, the oldest make room. */
      for (int k = 0; l->out_of_fds && k < ROOM_FDS && l->npending > 0; k++)
        pending_drop(l, oldest_pending(l), "out of descriptors: made room "
                     "for a connection that proved the key");
      r = offer_accepted(l, &offer, err, errlen);
      if (r == RINGCC_SUCCESS)
        r = accept_offer(&offer, hello, &c, deadline_ns, err, errlen);
      if (offer.fd >= 0)
        close(offer.fd);
      *recv_comm = c;
      return r;
    }
    if (rcc_now_ns() >= deadline_ns)
      return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                      "NET/IB: no connection came before the deadline (%d "
                      "offer%s incomplete)", l->npending,
                      l->npending == 1 ? "" : "s");
    int n = 0, ms = rcc_socket_poll_ms(deadline_ns);
    int64_t now = rcc_now_ns();
    if (now >= l->accept_at) /* else backing off: the listener waits */
      pfds[n++] = (struct pollfd){.fd = l->fd, .events = POLLIN};
    else if (ms > (int)((l->accept_at - now) / 1000000) + 1)
      ms = (int)((l->accept_at - now) / 1000000) + 1;
    for (int k = 0; k < l->npending; k++)
      pfds[n++] = (struct pollfd){.fd = l->pending[k].fd, .events = POLLIN};
    poll(pfds, (nfds_t)n, ms > 200 ? 200 : ms);
  }
}

/* ==== the data path ======================================================= */

static struct ib_req *req_new(struct ib_comm *c, int is_send) {
  if (c->nfree == 0)
    return NULL;
  struct ib_req *r = c->freel[--c->nfree];
  memset(r, 0, sizeof(*r));
  r->c = c;
  r->is_send = is_send;
  r->state = REQ_QUEUED;
  r->seq = c->tail;
  c->queue[c->tail % MAX_REQ] = r;
  c->tail++;
  return r;
}

static int req_index(const struct ib_req *r) {
  return (int)(r - r->c->reqs);
}

static void req_release(struct ib_req *r) {
  cache_put(r->reg);
  cache_put(r->treg);
  r->reg = r->treg = NULL;
}

static void req_free(struct ib_req *r) {
  req_release(r);
  r->state = REQ_FREE;
  r->c->freel[r->c->nfree++] = r;
}

static int inside(const struct ib_mr *m, const void *p, size_t len) {
  return m != NULL && (const char *)p >= m->addr &&
         (const char *)p + len <= m->addr + m->bytes;
}

static const char *peer_gone_cause(const struct ib_comm *c, char *buf,
                                   size_t len) {
  char a[INET6_ADDRSTRLEN];
  size_t off = (size_t)snprintf(
      buf, len, "the peer's NIC did not acknowledge within %d retries of "
      "%.1f ms: the peer process may have died, or the route between the "
      "hosts is broken (link, cable, switch)", g_ib.set.retry_cnt,
      4.096e-3 * (double)(1LL << g_ib.set.timeout));
  if (g_ib.dev.link_layer == IBV_LINK_LAYER_ETHERNET && off < len)
    off += (size_t)snprintf(buf + off, len - off,
                            ", or the GID index is wrong on one side (this "
                            "rank uses GID %d, %s; RINGCC_IB_GID_INDEX)",
                            g_ib.dev.gid_index,
                            rcc_ib_gid_str(g_ib.dev.gid, a, sizeof(a)));
  if (__atomic_load_n(&g_ib.dev.port_down, __ATOMIC_ACQUIRE) && off < len)
    snprintf(buf + off, len - off, "; port %s went down (IBV_EVENT_PORT_ERR)",
             g_ib.dev.label);
  (void)c;
  return buf;
}

/* An error completion: the connection fails, naming the status in words
 * and its likely cause. */
static void wc_fail(struct ib_comm *c, const struct ibv_wc *wc) {
  int type = WRID_TYPE(wc->wr_id), st = wc->status;
  char cause[400] = "";
  if (c->error != RINGCC_SUCCESS)
    return; /* the flushed requests after the first error */
  const char *what = type == WR_DATA    ? "RDMA write of a message"
                     : type == WR_CTS   ? "RDMA write of a clear-to-send entry"
                     : type == WR_FLUSH ? "flush read of received data"
                                        : "receive";
  switch (st) {
  case IBV_WC_RETRY_EXC_ERR:
    peer_gone_cause(c, cause, sizeof(cause));
    break;
  case IBV_WC_RNR_RETRY_EXC_ERR:
    snprintf(cause, sizeof(cause), "the peer had no receive posted in time");
    break;
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_REM_OP_ERR:
    snprintf(cause, sizeof(cause), "the peer's NIC refused it (its memory is "
                                   "no longer registered: is it closing?)");
    break;
  case IBV_WC_LOC_PROT_ERR:
  case IBV_WC_LOC_ACCESS_ERR:
  case IBV_WC_LOC_LEN_ERR:
    snprintf(cause, sizeof(cause), "local memory was not registered as "
                                   "needed (a bug in NET/IB)");
    break;
  case IBV_WC_WR_FLUSH_ERR:
    snprintf(cause, sizeof(cause), "the queue pair had gone into the error "
                                   "state");
    break;
  default:
    snprintf(cause, sizeof(cause), "see the NIC's documentation");
  }
  side_read(c); /* a peer that died has closed its side channel too */
  int gone = c->side_end != 0;
  comm_fail(c, gone ? RINGCC_ERR_PEER_FAILED : RINGCC_ERR_NETWORK,
            "NET/IB: %s %s %s on %s failed: %s (%s, status %d, vendor error "
            "0x%x): %s%s", what, dir_word(c), c->peer, g_ib.dev.label,
            rcc_ib_wc_status_words(st), rcc_ib_wc_status_name(st), st,
            (unsigned)wc->vendor_err, cause,
            gone ? "; its side channel has ended too: the peer is gone" : "");
}

static void handle_wc(struct ib_comm *c, const struct ibv_wc *wc) {
  int type = WRID_TYPE(wc->wr_id), q = WRID_QP(wc->wr_id);
  int idx = WRID_IDX(wc->wr_id);
  uint32_t seq = WRID_SEQ(wc->wr_id);
  struct ib_req *r = idx < MAX_REQ ? &c->reqs[idx] : NULL;
  if (type == WR_DATA || type == WR_CTS)
    c->sq_out[q < MAX_QPS ? q : 0]--;
  if (type == WR_DATA && (r == NULL || r->state != REQ_ISSUED ||
                          (uint32_t)r->seq != seq))
    return; /* a write given up on (side_gone): nobody waits for it */
  if (wc->status != IBV_WC_SUCCESS) {
    wc_fail(c, wc);
    return;
  }
  switch (type) {
  case WR_DATA:
    if ((uint32_t)r->seq == seq && r->parts_left > 0)
      r->parts_left--;
    break;
  case WR_CTS:
    break;
  case WR_CTS_IN: {
    uint32_t imm = ntohl(wc->imm_data);
    if (imm != (uint32_t)c->cts_count) {
      comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: clear-to-send entry %u from "
                "%s arrived where %u was due", (unsigned)imm, c->peer,
                (unsigned)c->cts_count);
      return;
    }
    c->cts_count++;
    post_cts_recvs(c, 1);
    break;
  }
  case WR_DATA_IN: {
    uint32_t imm = ntohl(wc->imm_data);
    if (r == NULL || (uint32_t)r->seq != seq || r->parts_left <= 0) {
      comm_fail(c, RINGCC_ERR_INTERNAL, "NET/IB: a message from %s matches "
                "no receive", c->peer);
      return;
    }
    if (r->parts_left < c->nqps && imm != r->imm) {
      comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: the parts of message %llu "
                "from %s carry different immediates (0x%08x, 0x%08x)",
                (unsigned long long)r->seq, c->peer, (unsigned)r->imm,
                (unsigned)imm);
      return;
    }
    r->imm = imm;
    r->bytes += wc->byte_len;
    if (--r->parts_left == 0)
      c->arrived++;
    break;
  }
  case WR_FLUSH:
    r->flushing = 0;
    __atomic_fetch_add(&g_ib.flushes, 1, __ATOMIC_RELAXED);
    break;
  default:
    comm_fail(c, RINGCC_ERR_INTERNAL, "NET/IB: a completion of unknown kind "
              "%d", type);
  }
}

/* Consumes the completion channel's events (nonblocking); disarms. */
static void drain_chan(struct ib_comm *c) {
  struct ibv_cq *cq;
  void *ctx;
  while (IBV->get_cq_event(c->chan, &cq, &ctx) == 0)
    IBV->ack_cq_events(cq, 1);
  c->armed = 0;
}

/* Processes every completion there is; returns how many. */
static int poll_cq(struct ib_comm *c) {
  struct ibv_wc wc[32];
  int total = 0;
  for (;;) {
    int n = ibv_poll_cq(c->cq, 32, wc);
    if (n < 0) {
      comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: polling the completion queue "
                "of the connection %s %s failed", dir_word(c), c->peer);
      return total;
    }
    for (int i = 0; i < n; i++)
      handle_wc(c, &wc[i]);
    total += n;
    if (n < 32)
      break;
  }
  if (total > 0 && c->armed)
    drain_chan(c); /* the event those completions raised */
  return total;
}

static ringcc_result_t post_write(struct ib_comm *c, int q, uint64_t wr_id,
                                  const void *src, size_t len, uint32_t lkey,
                                  uint64_t raddr, uint32_t rkey, uint32_t imm,
                                  const char *what) {
  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = (uint32_t)len,
                        .lkey = lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = len > 0 ? &sge : NULL;
  wr.num_sge = len > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(imm);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  int e = ibv_post_send(c->qps[q], &wr, &bad);
  if (e != 0)
    return comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: posting the RDMA write of %s to %s on %s "
                     "failed: %s", what, c->peer, g_ib.dev.label, strerror(e));
  c->sq_out[q]++;
  return RINGCC_SUCCESS;
}

/* Where part q of n of a message of bytes starts (64-byte aligned). */
static size_t part_off(size_t bytes, int q, int n) {
  if (q == n)
    return bytes;
  return (size_t)((unsigned __int128)bytes * (unsigned)q / (unsigned)n) &
         ~(size_t)63;
}

/* Sender: writes the queued messages whose CTS entries have come. */
static void issue(struct ib_comm *c) {
  while (c->error == RINGCC_SUCCESS && c->next < c->tail &&
         c->cts_count > c->next) {
    struct ib_req *r = c->queue[c->next % MAX_REQ];
    const struct cts *e = &c->cts[r->seq % CTS_RING];
    const uint8_t *p = (const uint8_t *)e;
    uint64_t addr = get64(&p), home_addr = get64(&p);
    uint32_t rkey = get32(&p), home_rkey = get32(&p);
    uint32_t size = get32(&p), home_size = get32(&p), seq = get32(&p);
    if (seq != (uint32_t)r->seq) {
      comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: the clear-to-send entry for "
                "message %llu from %s names message %u",
                (unsigned long long)r->seq, c->peer, (unsigned)seq);
      return;
    }
    if (r->bytes > size) { /* longer than a redirected receive: its slot */
      addr = home_addr;
      rkey = home_rkey;
      size = home_size;
    }
    if (r->bytes > size) {
      comm_fail(c, RINGCC_ERR_INVALID_USAGE, "NET/IB: a message of %zu bytes "
                "to %s is longer than the receive buffer there (%u bytes): "
                "do all ranks use the same RINGCC_NET_CHUNK_BYTES?",
                r->bytes, c->peer, (unsigned)size);
      return;
    }
    for (int q = 0; q < c->nqps; q++)
      if (c->sq_out[q] >= c->sq_max)
        return; /* completions first */
    for (int q = 0; q < c->nqps; q++) {
      size_t off = part_off(r->bytes, q, c->nqps);
      size_t len = part_off(r->bytes, q + 1, c->nqps) - off;
      if (post_write(c, q, WRID(WR_DATA, q, req_index(r), r->seq),
                     r->src ? r->src + off : NULL, len, r->lkey, addr + off,
                     rkey, r->imm, "a message") != RINGCC_SUCCESS)
        return;
    }
    r->parts_left = c->nqps;
    r->state = REQ_ISSUED;
    c->next++;
  }
}

static uint32_t clamp32(size_t v) {
  return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* Receiver: grants the posted receives, at most CTS_WINDOW ahead of the
 * messages that arrived: a receive for each part, then the CTS entry. */
static void grant(struct ib_comm *c) {
  while (c->error == RINGCC_SUCCESS && c->next < c->tail &&
         c->next - c->arrived < CTS_WINDOW && c->sq_out[0] < c->sq_max) {
    struct ib_req *r = c->queue[c->next % MAX_REQ];
    for (int q = 0; q < c->nqps; q++) {
      struct ibv_recv_wr wr, *bad;
      memset(&wr, 0, sizeof(wr));
      wr.wr_id = WRID(WR_DATA_IN, q, req_index(r), r->seq);
      int e = ibv_post_recv(c->qps[q], &wr, &bad);
      if (e != 0) {
        comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: posting a receive on the "
                  "connection from %s (%s) failed: %s", c->peer,
                  g_ib.dev.label, strerror(e));
        return;
      }
    }
    struct cts *e = &c->cts[r->seq % CTS_RING];
    uint8_t *p = (uint8_t *)e;
    put64(&p, (uint64_t)(uintptr_t)r->target);
    put64(&p, (uint64_t)(uintptr_t)r->home);
    put32(&p, r->target_rkey);
    put32(&p, r->home_rkey);
    put32(&p, clamp32(r->target_bytes));
    put32(&p, clamp32(r->home_bytes));
    put32(&p, (uint32_t)r->seq);
    r->granted = 1;
    r->parts_left = c->nqps;
    r->state = REQ_ISSUED;
    c->next++;
    if (post_write(c, 0, WRID(WR_CTS, 0, req_index(r), r->seq), e,
                   sizeof(*e), c->cts_mr->lkey,
                   c->remote.cts_addr + (r->seq % CTS_RING) * sizeof(*e),
                   c->remote.cts_rkey, (uint32_t)r->seq,
                   "a clear-to-send entry") != RINGCC_SUCCESS)
      return;
  }
}

/* The loopback queue pair that flushes device memory, made on first need. */
static ringcc_result_t flush_setup(struct ib_comm *c) {
  if (posix_memalign((void **)&c->flush_buf, 64, 64) != 0) {
    c->flush_buf = NULL;
    return comm_fail(c, RINGCC_ERR_OUT_OF_MEMORY, "NET/IB: out of memory");
  }
  c->flush_mr = IBV->reg_mr(g_ib.dev.pd, c->flush_buf, 64, ACCESS_ALL);
  if (c->flush_mr == NULL)
    return c->error = reg_error(64, "the flush buffer", errno, c->message,
                                sizeof(c->message));
  ringcc_result_t r = qp_create(c, &c->flush_qp);
  if (r != RINGCC_SUCCESS)
    return r;
  struct qp_info self = c->local;
  self.psn = c->local.psn;
  return qp_connect(c, c->flush_qp, &self, c->flush_qp->qp_num);
}

/* Receiver: reads one byte of what the NIC wrote into device memory, so the
 * data is in GPU memory before the receive completes (PCIe ordering). */
static void post_flush(struct ib_comm *c, struct ib_req *r, int at_home) {
  if (c->flush_qp == NULL && flush_setup(c) != RINGCC_SUCCESS)
    return;
  struct ibv_sge sge = {.addr = (uintptr_t)c->flush_buf, .length = 1,
                        .lkey = c->flush_mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = WRID(WR_FLUSH, 0, req_index(r), r->seq);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uintptr_t)(at_home ? r->home : r->target);
  wr.wr.rdma.rkey = at_home ? r->home_rkey : r->target_rkey;
  int e = ibv_post_send(c->flush_qp, &wr, &bad);
  if (e != 0) {
    comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: posting the flush read on %s "
              "failed: %s", g_ib.dev.label, strerror(e));
    return;
  }
  r->flushing = 1;
  r->flushed = 1;
}

/* Completes the oldest requests whose parts (and flush) are all done, in
 * order. */
static void retire(struct ib_comm *c) {
  while (c->error == RINGCC_SUCCESS && c->head < c->next) {
    struct ib_req *r = c->queue[c->head % MAX_REQ];
    if (r->parts_left > 0 || r->flushing)
      return;
    if (!r->is_send && !r->flushed && r->bytes > 0) {
      int at_home = r->bytes > r->target_bytes;
      if (at_home ? r->home_flush : r->target_flush) {
        post_flush(c, r, at_home);
        return;
      }
    }
    r->state = REQ_DONE;
    c->head++;
  }
}

/* The side channel ended: messages that came first are taken, then what
 * still waits fails (a zero-byte send to a receiver that closed cleanly is
 * done: nothing listens for it). */
static void side_gone(struct ib_comm *c) {
  poll_cq(c);
  retire(c);
  if (c->error != RINGCC_SUCCESS || c->tail == c->head)
    return;
  if (c->kind == COMM_SEND && c->side_end == 2) {
    /* Empty messages (a goodbye) to a receiver that closed cleanly are done,
     * written or not: a write it took may just not be acknowledged yet. */
    while (c->head < c->tail && c->queue[c->head % MAX_REQ]->bytes == 0) {
      struct ib_req *r = c->queue[c->head % MAX_REQ];
      r->state = REQ_DONE;
      if (c->next == c->head)
        c->next++;
      c->head++;
    }
    if (c->tail == c->head)
      return;
    comm_fail(c, RINGCC_ERR_PEER_FAILED,
              "NET/IB: %s closed its receiving end (its communicator was "
              "destroyed?) with %llu message%s of this rank not taken",
              c->peer, (unsigned long long)(c->tail - c->head),
              c->tail - c->head == 1 ? "" : "s");
    return;
  }
  comm_fail(c, RINGCC_ERR_PEER_FAILED,
            "NET/IB: the connection %s %s ended (%s) with %llu message%s "
            "still to %s: the peer process %s", dir_word(c), c->peer,
            c->side_err, (unsigned long long)(c->tail - c->head),
            c->tail - c->head == 1 ? "" : "s",
            c->kind == COMM_SEND ? "send" : "come",
            c->side_end == 2 ? "closed the connection" : "died or exited");
}

/* Everything that can move on a connection without waiting. */
static void progress(struct ib_comm *c) {
  if (c->error != RINGCC_SUCCESS)
    return;
  if (__atomic_load_n(&c->async_failed, __ATOMIC_ACQUIRE)) {
    comm_fail(c, RINGCC_ERR_NETWORK, "%s", c->async_msg);
    return;
  }
  if (__atomic_load_n(&g_ib.dev.fatal, __ATOMIC_ACQUIRE)) {
    comm_fail(c, RINGCC_ERR_NETWORK, "%s", g_ib.dev.fatal_msg);
    return;
  }
  int64_t now = rcc_now_ns();
  if (!c->hinted && now >= c->next_async_check) {
    async_drain(); /* nobody reports the event fd ready: look sometimes */
    c->next_async_check = now + ASYNC_CHECK_NS;
  }
  if (c->hs != HS_DONE) {
    hs_step(c);
    if (c->hs != HS_DONE)
      return;
  }
  poll_cq(c);
  if (c->side_end == 0 && !c->hinted && c->tail > c->head &&
      now >= c->next_side_check) { /* hinted: readable() reads it */
    side_read(c);
    c->next_side_check = now + SIDE_CHECK_NS;
  }
  if (c->kind == COMM_SEND)
    issue(c);
  else
    grant(c);
  retire(c);
  if (c->side_end != 0)
    side_gone(c);
}

static ringcc_result_t comm_error(const struct ib_comm *c, char *err,
                                  size_t errlen) {
  snprintf(err, errlen, "%s", c->message);
  return c->error;
}

/* Registered room for a small send from each request (allocated once). */
static ringcc_result_t bounce_setup(struct ib_comm *c) {
  size_t b = (size_t)MAX_REQ * BOUNCE_BYTES;
  if (posix_memalign((void **)&c->bounce, 4096, b) != 0) {
    c->bounce = NULL;
    return comm_fail(c, RINGCC_ERR_OUT_OF_MEMORY, "NET/IB: out of memory");
  }
  c->bounce_mr = IBV->reg_mr(g_ib.dev.pd, c->bounce, b, ACCESS_ALL);
  if (c->bounce_mr == NULL) {
    int e = errno;
    free(c->bounce);
    c->bounce = NULL;
    return c->error = reg_error(b, "bounce buffers", e, c->message,
                                sizeof(c->message));
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_isend(void *send_comm, const void *data,
                                size_t bytes, uint32_t imm, void *mhandle,
                                void **request, char *err, size_t errlen) {
  struct ib_comm *c = send_comm;
  const struct ib_mr *m = mhandle;
  *request = NULL;
  if (c->error != RINGCC_SUCCESS)
    return comm_error(c, err, errlen);
  if (m != NULL)
    c->fifo = m;
  struct ib_req *r = req_new(c, 1);
  if (r == NULL)
    return RINGCC_SUCCESS; /* every request in use: later */
  r->bytes = bytes;
  r->imm = imm;
  if (bytes == 0) {
    r->src = NULL;
  } else if (inside(m, data, bytes)) {
    r->src = data;
    r->lkey = m->mr->lkey;
  } else if (bytes <= BOUNCE_BYTES && !is_device_ptr(data)) {
    if (c->bounce == NULL && bounce_setup(c) != RINGCC_SUCCESS)
      return comm_error(c, err, errlen);
    char *b = c->bounce + (size_t)req_index(r) * BOUNCE_BYTES;
    memcpy(b, data, bytes);
    r->src = b;
    r->lkey = c->bounce_mr->lkey;
  } else {
    ringcc_result_t e = cache_get(data, bytes, 0, &r->reg, c->message,
                                  sizeof(c->message));
    if (e != RINGCC_SUCCESS) {
      c->error = e;
      return comm_error(c, err, errlen);
    }
    r->src = data;
    r->lkey = r->reg->mr->lkey;
  }
  *request = r;
  progress(c);
  return RINGCC_SUCCESS;
}

/* Receive keys for [p, p + len): the FIFO's, or a cache entry's. */
static ringcc_result_t recv_keys(struct ib_comm *c, char *p, size_t len,
                                 uint32_t *rkey, int *flush,
                                 struct reg **reg) {
  *reg = NULL;
  if (inside(c->fifo, p, len)) {
    *rkey = c->fifo->mr->rkey;
    *flush = c->fifo->device;
    return RINGCC_SUCCESS;
  }
  ringcc_result_t r = cache_get(p, len, 1, reg, c->message,
                                sizeof(c->message));
  if (r != RINGCC_SUCCESS)
    return r;
  *rkey = (*reg)->mr->rkey;
  *flush = (*reg)->device;
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_irecv(void *recv_comm, void *data, size_t max_bytes,
                                void *mhandle, void **request, char *err,
                                size_t errlen) {
  struct ib_comm *c = recv_comm;
  *request = NULL;
  if (c->error != RINGCC_SUCCESS)
    return comm_error(c, err, errlen);
  if (mhandle != NULL)
    c->fifo = mhandle;
  struct ib_req *r = req_new(c, 0);
  if (r == NULL)
    return RINGCC_SUCCESS;
  r->home = r->target = data;
  r->home_bytes = r->target_bytes = max_bytes;
  ringcc_result_t e = recv_keys(c, data, max_bytes, &r->home_rkey,
                                &r->home_flush, &r->reg);
  if (e != RINGCC_SUCCESS) {
    c->error = e;
    return comm_error(c, err, errlen);
  }
  r->target_rkey = r->home_rkey;
  r->target_flush = r->home_flush;
  *request = r;
  progress(c);
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_test(void *request, int *done, size_t *bytes,
                               uint32_t *imm, char *err, size_t errlen) {
  struct ib_req *r = request;
  struct ib_comm *c = r->c;
  progress(c);
  *done = 0;
  if (r->state == REQ_DONE) {
    *done = 1;
    *bytes = r->bytes;
    *imm = r->imm;
    req_free(r);
    return RINGCC_SUCCESS;
  }
  if (c->error != RINGCC_SUCCESS)
    return comm_error(c, err, errlen);
  return RINGCC_SUCCESS;
}

static int ib_redirect(void *request, void *data, size_t max_bytes,
                       int force) {
  struct ib_req *r = request;
  struct ib_comm *c = r->c;
  if (r->is_send || r->state == REQ_DONE || c->error != RINGCC_SUCCESS)
    return -1;
  if (!r->granted) { /* its CTS has not gone out: it can still move */
    struct reg *reg = NULL;
    uint32_t rkey = r->home_rkey;
    int flush = r->home_flush;
    if ((char *)data != r->home) {
      char ignored[RCC_ERRLEN];
      if (cache_get(data, max_bytes, 1, &reg, ignored, sizeof(ignored)) !=
          RINGCC_SUCCESS)
        return -1; /* it stays in its slot */
      rkey = reg->mr->rkey;
      flush = reg->device;
    }
    cache_put(r->treg);
    if (reg != NULL) {
      pthread_mutex_lock(&g_ib.lock);
      g_ib.stats.landed++;
      pthread_mutex_unlock(&g_ib.lock);
    }
    r->treg = reg;
    r->target = data;
    r->target_bytes = (char *)data == r->home ? r->home_bytes : max_bytes;
    r->target_rkey = rkey;
    r->target_flush = flush;
    return 0;
  }
  if (!force || r->target == r->home)
    return -1;
  /* Its bytes may be on their way into the user's buffer, which goes back
   * to the user now: stop the connection so that nothing more lands. */
  qps_to_error(c);
  comm_fail(c, RINGCC_ERR_NETWORK,
            "NET/IB: a receive from %s that was to land in the user's buffer "
            "could not be moved back to its slot after the call failed; the "
            "connection is closed so that nothing more is written there",
            c->peer);
  return -1;
}

static void ib_rebase(void *request, const void *data) {
  struct ib_req *r = request;
  struct ib_comm *c = r->c;
  if (!r->is_send || r->state == REQ_DONE)
    return;
  if (r->state == REQ_QUEUED) { /* not written yet: leave from data */
    cache_put(r->reg);
    r->reg = NULL;
    r->src = data;
    if (inside(c->fifo, data, r->bytes))
      r->lkey = c->fifo->mr->lkey;
    else if (r->bytes > 0 &&
             cache_get(data, r->bytes, 0, &r->reg, c->message,
                       sizeof(c->message)) == RINGCC_SUCCESS)
      r->lkey = r->reg->mr->lkey;
    else if (r->bytes > 0)
      c->error = RINGCC_ERR_SYSTEM;
    return;
  }
  /* On the wire: the NIC may still read the old place; wait for it. */
  int64_t until = rcc_now_ns() + REBASE_WAIT_NS;
  while (r->parts_left > 0 && c->error == RINGCC_SUCCESS &&
         rcc_now_ns() < until)
    poll_cq(c);
  if (r->parts_left == 0 && c->error == RINGCC_SUCCESS)
    return;
  qps_to_error(c);
  comm_fail(c, RINGCC_ERR_NETWORK,
            "NET/IB: a send to %s from the user's buffer was still on the "
            "wire when the call failed; the connection is closed so that the "
            "NIC stops reading that memory", c->peer);
  until = rcc_now_ns() + REBASE_WAIT_NS;
  while (r->parts_left > 0 && rcc_now_ns() < until) {
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(c->cq, 16, wc);
    for (int i = 0; i < n; i++)
      if (WRID_TYPE(wc[i].wr_id) == WR_DATA &&
          WRID_IDX(wc[i].wr_id) < MAX_REQ)
        c->reqs[WRID_IDX(wc[i].wr_id)].parts_left--;
    if (n <= 0)
      usleep(100);
  }
}

/* The completion channel (armed first), the device's event fd, and the side
 * channel where it can say something: during setup, and on a receive comm
 * (the sender's end). -1: a completion is already there: test() now. */
static int ib_fds(void *comm, int *fds, int max) {
  if (comm == NULL || max < 1)
    return 0;
  if (*(const int *)comm == COMM_LISTEN) {
    fds[0] = ((const struct ib_listen *)comm)->fd;
    return 1;
  }
  struct ib_comm *c = comm;
  int n = 0;
  if (c->error != RINGCC_SUCCESS)
    return 0;
  if (c->hs == HS_DONE) {
    if (!c->armed) {
      drain_chan(c); /* a stale event would end every poll() */
      ibv_req_notify_cq(c->cq, 0);
      c->armed = 1;
      if (poll_cq(c) > 0)
        return -1;
    }
    fds[n++] = c->chan->fd;
  }
  if (n < max && g_ib.dev.async_fd >= 0)
    fds[n++] = g_ib.dev.async_fd;
  if (n < max && c->side_end == 0 && (c->hs != HS_DONE || c->kind == COMM_RECV))
    fds[n++] = c->fd;
  return n;
}

static void ib_readable(void *comm, int fd) {
  struct ib_comm *c = comm;
  if (c == NULL || c->kind == COMM_LISTEN)
    return;
  if (fd < 0)
    c->hinted = 1;
  else if (c->chan != NULL && fd == c->chan->fd)
    drain_chan(c);
  else if (fd == g_ib.dev.async_fd)
    async_drain();
  else if (fd == c->fd) /* read now: a closed channel must leave fds() */
    side_read(c);
}

static void ib_close(void *comm) {
  struct ib_comm *c = comm;
  if (c == NULL)
    return;
  if (forked_child()) { /* the rest is the parent's (forked_child) */
    if (c->fd >= 0)
      close(c->fd);
    if (c->chan != NULL)
      close(c->chan->fd);
    free(c);
    return;
  }
  if (c->fd >= 0 && c->side_end == 0 && c->hs == HS_DONE) {
    uint8_t m[4], *p = m;
    put32(&p, CLOSE_MAGIC);
    ssize_t n = send(c->fd, m, 4, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n; /* a peer that is gone need not hear it */
  }
  live_remove(c); /* no async event reaches it from here on */
  comm_free(c);
}

static void ib_close_listen(void *listen_comm) {
  struct ib_listen *l = listen_comm;
  if (l == NULL)
    return;
  for (int i = 0; i < l->npending; i++)
    close(l->pending[i].fd);
  if (l->fd >= 0)
    close(l->fd);
  listen_free(l);
  if (!forked_child())
    live_remove(NULL);
}

const struct rcc_net_plugin rcc_net_ib = {
    .name = "IB",
    /* Priced as the network link the model knows (link.h) until it has
     * values of its own for verbs: a step's cost is the proxy's. */
    .link = RCC_LINK_TCP,
    .disable_env = "RINGCC_IB_DISABLE",
    .init = ib_init,
    .device = ib_device,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .fds = ib_fds,
    .rebase = ib_rebase,
    .redirect = ib_redirect,
    .readable = ib_readable,
    .reverse = NULL,
    .close_send = ib_close,
    .close_recv = ib_close,
    .close_listen = ib_close_listen,
    .locate = ib_locate,
    .gdr = ib_gdr,
    .ready = ib_ready,
    .send_events = POLLIN, /* completion channels, event fds, never POLLOUT */
};
