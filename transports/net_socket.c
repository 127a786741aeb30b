/*
 * net_socket.c - the TCP network plugin ("Socket"): net.h over plain sockets.
 *
 * Connections. connect() opens N sockets to the listener (N from
 * RINGCC_NSOCKS_PERPEER, default 2). Each starts with a 16-byte preamble
 * (magic, socket index, N, a random 64-bit connection id); socket 0 follows
 * it with the 64-byte hello; then every socket proves the communicator's
 * key: HMAC-SHA-256(key, label || the listener's nonce || preamble [|| hello])
 * (32 bytes). The nonce is random per listener and travels in its handle, so
 * a proof is good for that listener only (no replay from another
 * communicator), and an id once taken is not taken again (no replay into
 * this one). The listener holds the sockets that have not proven
 * themselves in the listener gate (gate.h: at most MAX_UNPROVEN, the oldest
 * dropped beyond, each read without blocking; out of descriptors it backs
 * off instead of failing); a socket whose preamble is malformed, whose proof
 * is wrong, or that is not complete within PREAMBLE_TIMEOUT_NS, is dropped
 * at once. Proven sockets are grouped by connection id, and accept() returns
 * the first connection whose N sockets are all there, whatever order sockets
 * of different peers arrived in. A stranger is never waited for.
 *
 * Links that fail without closing (a host that lost power or its network
 * sends no FIN). alive(), which the engine calls about twice a second, reads
 * TCP_INFO: a socket with data in flight (or keepalive or window probes
 * out) and no acknowledgement for half the link timeout T
 * (RINGCC_SOCKET_LINK_TIMEOUT_MS, default 6 s) makes the plugin look at the
 * peer's host a second, independent way: a fresh connect to it (probe.h),
 * which a live host's kernel answers even when the peer's process is
 * stopped, starved or holds its socket locked. Silent for T: the peer is
 * declared lost only if that connect got no answer; if its host answered,
 * the peer is only *suspected* (alive() says so, the engine logs it at
 * intervals) and waited for: the call's own deadline (timeout_ms) still
 * applies. A peer on this host (the same address at both ends) is never
 * declared lost for silence, and its sockets have no keepalive: its kernel
 * is this one, and its death closes them. Keepalive keeps probes
 * going on idle links (first after T/3, then every T/6) so that silence is
 * seen there too; the kernel's own keepalive verdict comes only after 127
 * unanswered probes (TCP_KEEPCNT's maximum), since 4 of them misfired when
 * a peer's socket stayed locked on a host with 128 ranks on 2 cores.
 * TCP_USER_TIMEOUT is not used: it also ends a connection whose receiver is
 * alive but has not read for that long (the window stays closed), a peer
 * that merely computes.
 *
 * Messages. A 64-byte header (u32 bytes, u32 imm, network order, then
 * zeros), the payload, and zeros up to a multiple of 64 bytes (see
 * MSG_HEADER_BYTES for why). Message k of a connection travels on socket
 * k % N at both ends, so each socket carries its messages in order and both
 * ends agree where message k is. A request is a small state machine (bytes
 * moved, header included): a send leaves with one sendmsg() of header +
 * payload straight from the caller's buffer + zeros from a static block,
 * together with the messages queued behind it on its socket (SEND_BATCH); a
 * receive reads the header, then the payload straight into the caller's
 * buffer, and drops the zeros (a header, and a short payload, through a
 * 4 KiB read buffer, so a small message takes one recv(); a long payload's
 * recvmsg() fills the read buffer with what follows it, the next header
 * included, so a large message takes one call too). test() moves the
 * request's own socket and, while that request is not done, every other
 * socket of the connection as far as it goes without blocking, so a proxy
 * that tests requests in posting order keeps all N sockets busy.
 *
 * Both ways. reverse() gives a connection the other way over the same N
 * sockets (a twin: its own requests, read buffers and failures), so two ranks
 * need one connection, not two, and each message carries the TCP ACK of the
 * last one that came the other way, where one-way sockets cost a separate
 * ACK packet per message (docs/performance.md). The twins close on
 * their own: the send side's close shuts the sockets for writing (the peer
 * reads the end of its stream, as if they had closed), and the second close
 * closes them.
 *
 * Unsent bytes. Every socket holds at most RINGCC_SOCKET_NOTSENT_BYTES that
 * the kernel has not sent (TCP_NOTSENT_LOWAT): a sender stops there and
 * moves the rest itself as the peer's window opens, rather than leaving a
 * backlog that the receiver's window updates would transmit on the
 * receiver's CPU (net_socket_env.c; unsent_all lifts it for a call).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "crc32c.h"
#include "env.h"
#include "error.h"
#include "gate.h"
#include "log.h"
#include "net.h"
#include "net_socket_env.h"
#include "probe.h"
#include "sha256.h"
#include "socket.h"
#include "wire.h"

#define HANDLE_MAGIC 0x52434e4cu   /* "RCNL": a listen handle */
#define PREAMBLE_MAGIC 0x52434e53u /* "RCNS": a socket of a connection */
#define HANDLE_BYTES 44 /* magic, family, port, address, scope, nonce */
#define PREAMBLE_BYTES 16          /* magic, index, nsocks, connection id */
#define NONCE_BYTES 16             /* the listener's, in its handle */
#define MAC_BYTES RCC_SHA256_BYTES /* after the preamble (and hello) */
#define MAC_LABEL "ringcc v2: net socket preamble"
/* A message on the wire: a 64-byte header (payload bytes, imm, 56 bytes of
 * zeros), the payload, and zeros up to the next multiple of 64 (MSG_ALIGN).
 * The kernel copies a send into socket buffer pages at the sending thread's
 * running offset, with rep movsb on x86, which is many times slower when the
 * destination sits 1-15 bytes past the source modulo 4 KiB; an 8-byte header
 * put every payload from an aligned buffer exactly there
 * (docs/performance.md). Whole multiples of 64 keep a payload at the
 * alignment of the thread's page offset, the same for every message. */
#define MSG_HEADER_BYTES 64 /* payload bytes, imm, CRC-32C, flags, zeros */
#define HDR_FLAG_CRC 1u     /* flags: the CRC-32C of the payload is there */
#define MSG_ALIGN 64
/* A receive reads a header, or what is left of a payload when it is shorter
 * than this, through a buffer of this size: one recv() then takes a small
 * message whole, with the headers (and small messages) that follow it. */
#define RBUF_BYTES 4096
/* Queued messages of a socket that one sendmsg() takes, at most. */
#define SEND_BATCH 8
/* A stranger gets this long to send its preamble, and a connection this long
 * (from its first socket) to bring the others. Both are counted from when
 * accept() took the socket from the kernel, so a late accept() is no fault. */
#define PREAMBLE_TIMEOUT_NS (5 * 1000000000LL)
#define GROUP_TIMEOUT_NS (30 * 1000000000LL)
#define MAX_UNPROVEN 128 /* accepted sockets that have not proven the key */
#define MAX_TAKEN 4096   /* connection ids remembered against replays */
#define RECONNECTS 3     /* a socket dropped unread is opened again */
#define BACKOFF_NS (20 * 1000000LL) /* after accept() ran out of descriptors */
#define CLOSE_WAIT_MS 200 /* for the peer's FIN at close (conn_free) */

_Static_assert(HANDLE_BYTES <= RCC_NET_HANDLE_BYTES, "handle size");
_Static_assert(PREAMBLE_BYTES == RCC_NET_SOCKET_PREAMBLE_BYTES &&
                   MAC_BYTES == RCC_NET_SOCKET_MAC_BYTES &&
                   MSG_HEADER_BYTES == RCC_NET_SOCKET_HEADER_BYTES &&
                   NSOCKS_MAX == RCC_NET_SOCKET_MAX_SOCKS,
               "wire.h sizes");

/* ---- the process-wide choice ------------------------------------------- */

static struct {
  pthread_mutex_t lock;
  int ready;
  struct sockaddr_storage addr; /* port 0 */
  char ifname[IF_NAMESIZE + 1];
  int64_t link_timeout_ms; /* RINGCC_SOCKET_LINK_TIMEOUT_MS; 0: off */
  int notsent;             /* RINGCC_SOCKET_NOTSENT_BYTES; 0: the kernel's */
} g_net = {.lock = PTHREAD_MUTEX_INITIALIZER, .ifname = "none"};

/* How long a fresh connect to a silent peer's host may wait for an answer,
 * and how often it is made again while the link stays silent (fractions of
 * the link timeout T). */
#define PROBE_AFTER_DIV 2   /* first probe after T/2 of silence */
#define PROBE_WAIT_DIV 2    /* each waits T/2 for an answer */
#define PROBE_EVERY_DIV 3   /* again every T/3 while silent */

/* A socket of a connection, connected or accepted: keepalive timed from the
 * link timeout, and the bound on its unsent bytes (see the top). */
static void data_socket_setup(int fd) {
  rcc_net_socket_keepalive(fd, g_net.link_timeout_ms);
  if (g_net.notsent > 0)
    rcc_net_socket_bound_unsent(fd, g_net.notsent);
}

static ringcc_result_t socket_init(const char *spec, char *err,
                                   size_t errlen) {
  ringcc_result_t r = RINGCC_SUCCESS;
  int nsocks, family;
  char host[INET6_ADDRSTRLEN];
  int named = spec != NULL && *spec != '\0';

  rcc_log_init();
  pthread_mutex_lock(&g_net.lock);
  if (g_net.ready) /* once per process: the first choice stands */
    goto out;
  if ((r = rcc_net_socket_count(&nsocks, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_net_socket_family(&family, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_net_socket_link_timeout(&g_net.link_timeout_ms, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_net_socket_notsent(&g_net.notsent, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_socket_pick_address_family(spec, family, &g_net.addr,
                                          g_net.ifname, sizeof(g_net.ifname),
                                          err, errlen)) != RINGCC_SUCCESS)
    goto out;
  g_net.ready = 1;
  RCC_INFO(-1, "NET/Socket: using interface %s (%s), %d socket%s per "
               "connection, link timeout %lld ms, %d unsent bytes a socket at "
               "most%s%s%s%s",
           g_net.ifname, rcc_net_socket_host(&g_net.addr, host, sizeof(host)), nsocks,
           nsocks == 1 ? "" : "s", (long long)g_net.link_timeout_ms,
           g_net.notsent,
           named ? ", RINGCC_SOCKET_IFNAME=" : "",
           named ? spec : "",
           family != AF_UNSPEC ? ", RINGCC_SOCKET_FAMILY=" : "",
           family == AF_INET    ? "AF_INET"
           : family == AF_INET6 ? "AF_INET6"
                                : "");
out:
  pthread_mutex_unlock(&g_net.lock);
  return r;
}

static const char *socket_device(void) { return g_net.ifname; }

/* Handle: magic u32, family u16 (4 or 6), port u16, address[16], scope u32,
 * the listener's nonce[16]. */
static void handle_encode(uint8_t *h, const struct sockaddr_storage *a,
                          const uint8_t nonce[NONCE_BYTES]) {
  memset(h, 0, RCC_NET_HANDLE_BYTES);
  memcpy(h + 28, nonce, NONCE_BYTES);
  rcc_put_be32(h, HANDLE_MAGIC);
  rcc_put_be16(h + 6, (uint16_t)rcc_socket_addr_port(a));
  if (a->ss_family == AF_INET) {
    rcc_put_be16(h + 4, 4);
    memcpy(h + 8, &((const struct sockaddr_in *)a)->sin_addr, 4);
  } else {
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)a;
    rcc_put_be16(h + 4, 6);
    memcpy(h + 8, &a6->sin6_addr, 16);
    rcc_put_be32(h + 24, a6->sin6_scope_id);
  }
}

static ringcc_result_t handle_decode(const uint8_t *h,
                                     struct sockaddr_storage *a,
                                     uint8_t nonce[NONCE_BYTES], char *err,
                                     size_t errlen) {
  uint16_t family = rcc_get_be16(h + 4);
  memset(a, 0, sizeof(*a));
  memcpy(nonce, h + 28, NONCE_BYTES);
  if (rcc_get_be32(h) != HANDLE_MAGIC || (family != 4 && family != 6) ||
      rcc_get_be16(h + 6) == 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: the peer's listen handle is not a Socket "
                    "plugin handle (magic 0x%08x, family %u)",
                    (unsigned)rcc_get_be32(h), (unsigned)family);
  if (family == 4) {
    struct sockaddr_in *a4 = (struct sockaddr_in *)a;
    a4->sin_family = AF_INET;
    memcpy(&a4->sin_addr, h + 8, 4);
  } else {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)a;
    a6->sin6_family = AF_INET6;
    memcpy(&a6->sin6_addr, h + 8, 16);
    a6->sin6_scope_id = rcc_get_be32(h + 24);
  }
  rcc_socket_addr_set_port(a, rcc_get_be16(h + 6));
  return RINGCC_SUCCESS;
}

/* The proof a socket sends after its preamble (and socket 0's hello). */
static void preamble_mac(const uint8_t key[RCC_NET_KEY_BYTES],
                         const uint8_t nonce[NONCE_BYTES], const uint8_t *pre,
                         const uint8_t *hello, uint8_t mac[MAC_BYTES]) {
  struct rcc_hmac m;
  rcc_hmac_init(&m, key, RCC_NET_KEY_BYTES);
  rcc_hmac_update(&m, MAC_LABEL, sizeof(MAC_LABEL));
  rcc_hmac_update(&m, nonce, NONCE_BYTES);
  rcc_hmac_update(&m, pre, PREAMBLE_BYTES);
  if (hello != NULL)
    rcc_hmac_update(&m, hello, RCC_NET_HELLO_BYTES);
  rcc_hmac_final(&m, mac);
}

static uint64_t random_id(void) {
  static uint64_t counter;
  uint64_t id = 0;
  if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != (ssize_t)sizeof(id))
    id = (uint64_t)rcc_now_ns() ^ (uint64_t)getpid() << 40 ^
         __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) *
             0x9e3779b97f4a7c15ull;
  return id;
}

/* ---- connections and requests ------------------------------------------ */

enum { COMM_LISTEN = 0x4c, COMM_SEND = 0x53, COMM_RECV = 0x52 };
enum { REQ_FREE = 0, REQ_POSTED, REQ_DONE };

struct net_conn;

/* Bytes of a message with a payload of this size on the wire. */
static size_t wire_bytes(size_t payload) {
  return MSG_HEADER_BYTES + (payload + MSG_ALIGN - 1) / MSG_ALIGN * MSG_ALIGN;
}

static const uint8_t zeros[MSG_ALIGN];

struct net_request {
  struct net_conn *conn;
  void *data;
  size_t bytes; /* send: the size; receive: the slot, then the size */
  size_t moved; /* bytes moved so far, header included */
  uint64_t seq; /* message number on the connection: socket seq % nsocks */
  uint32_t imm;
  uint32_t sum, flags; /* a receive's header's CRC-32C and flags (the
                          header's bytes take the padding after it) */
  uint32_t crc;        /* RINGCC_CHECKSUM: a receive's CRC-32C so far, of
                          each recv()'s bytes as they arrive (still in cache) */
  int state;
  uint8_t header[MSG_HEADER_BYTES];
  void *home; /* a redirected receive: where it was posted, and its size */
  size_t home_bytes;
  int64_t parked_at; /* a receive parked (socket_park): when; 0: not */
  int go;            /* a receive that reads on: never parked (again) */
};

/* The requests of one socket, in posting order: the head moves first. A
 * receive socket has a read buffer: rbuf[roff, rlen) arrived but belongs to
 * no request yet. */
struct sock_queue {
  int fd;
  int eof;  /* the peer closed it between messages */
  int idle; /* a read found it empty, and poll() has not said otherwise
               since (only where the caller reports readiness: hinted) */
  unsigned head, count;
  unsigned roff, rlen;
  uint8_t *rbuf; /* RBUF_BYTES; receive connections only */
  struct net_request *q[RCC_NET_MAX_REQUESTS];
};

struct net_conn {
  int kind; /* COMM_SEND or COMM_RECV */
  int nsocks;
  int pid;  /* the process that opened it: only it may shut the sockets */
  uint64_t posted;
  ringcc_result_t error; /* the first failure; sticky */
  char message[RCC_ERRLEN];
  char peer[80]; /* "1.2.3.4:5": the remote end, for messages */
  struct net_conn *twin; /* the other way over the same sockets, or NULL */
  int connected;         /* this end connected (it closes first: conn_free) */
  int checksum;          /* RINGCC_CHECKSUM: send a CRC-32C / require one */
  int corrupt;           /* failed on bytes that break the protocol */
  int hinted;            /* the caller reports poll()'s readiness (readable) */
  int local_peer;        /* alive(): 0 not looked yet, 1 this host, -1 not */
  size_t park_min;       /* socket_park: 0 off */
  uint32_t park_mask;
  int64_t park_ns;
  int nparked;           /* receives parked now */
  struct rcc_probe probe; /* alive(): a fresh connect to a silent peer */
  int nfree;
  struct net_request *free_list[RCC_NET_MAX_REQUESTS];
  struct net_request reqs[RCC_NET_MAX_REQUESTS];
  struct sock_queue socks[]; /* nsocks */
};

static struct net_conn *conn_new(int kind, int nsocks) {
  struct net_conn *c =
      calloc(1, sizeof(*c) + (size_t)nsocks * sizeof(struct sock_queue));
  if (c == NULL)
    return NULL;
  c->kind = kind;
  c->nsocks = nsocks;
  c->pid = (int)getpid();
  rcc_probe_init(&c->probe);
  for (int i = 0; i < nsocks; i++)
    c->socks[i].fd = -1;
  for (int i = 0; i < nsocks && kind == COMM_RECV; i++)
    if ((c->socks[i].rbuf = malloc(RBUF_BYTES)) == NULL) {
      while (i-- > 0)
        free(c->socks[i].rbuf);
      free(c);
      return NULL;
    }
  for (int i = 0; i < RCC_NET_MAX_REQUESTS; i++)
    c->free_list[c->nfree++] = &c->reqs[RCC_NET_MAX_REQUESTS - 1 - i];
  return c;
}

/* In a process forked from the one that opened it, only close(): a
 * shutdown would end the parent's connection too. */
static void conn_free(struct net_conn *c) {
  if (c == NULL)
    return;
  int forked = c->pid != (int)getpid();
  /* The end that connected closes first, the end that accepted waits for
   * its FIN and resets (socket.h: neither keeps a TIME_WAIT, which held a
   * minute's ports per communicator). The goodbye (net_proxy.c) already
   * told both ends that nothing more comes. */
  for (int i = 0; i < c->nsocks; i++) {
    int fd = c->socks[i].fd;
    if (fd >= 0 && c->twin == NULL && !c->connected && !forked)
      rcc_socket_close_second(fd, CLOSE_WAIT_MS);
    else if (fd >= 0 && c->twin == NULL)
      close(fd);
    else if (fd >= 0 && c->kind == COMM_SEND && c->connected && !forked)
      shutdown(fd, SHUT_WR); /* the twin still reads from it */
    free(c->socks[i].rbuf);
  }
  if (c->twin != NULL)
    c->twin->twin = NULL; /* it closes the sockets */
  rcc_probe_stop(&c->probe);
  free(c);
}

/* Records the connection's first failure; every later test() reports it. */
static void conn_fail(struct net_conn *c, ringcc_result_t code,
                      const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void conn_fail(struct net_conn *c, ringcc_result_t code,
                      const char *fmt, ...) {
  va_list ap;
  if (c->error != RINGCC_SUCCESS)
    return;
  c->error = code;
  va_start(ap, fmt);
  vsnprintf(c->message, sizeof(c->message), fmt, ap);
  va_end(ap);
}

/* "message 7, 100 of 65544 bytes": how far a request got, for messages.
 * Before its header is in, a receive does not know its size yet. */
static const char *request_where(const struct net_conn *c,
                                 const struct net_request *r, char *buf,
                                 size_t len) {
  if (c->kind == COMM_RECV && r->moved < MSG_HEADER_BYTES)
    snprintf(buf, len, "message %llu, %s", (unsigned long long)r->seq,
             r->moved == 0 ? "between messages" : "inside its header");
  else
    snprintf(buf, len, "message %llu, %zu of %zu bytes",
             (unsigned long long)r->seq, r->moved, wire_bytes(r->bytes));
  return buf;
}

/* Why a socket error says a host stopped answering, or "". */
static const char *unreachable_why(int e) {
  if (e == ETIMEDOUT)
    return " (the peer's host stopped answering: no acknowledgement of "
           "keepalive probes or data for RINGCC_SOCKET_LINK_TIMEOUT_MS; it is "
           "down, or its network is cut)";
  if (e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN ||
      e == ENETDOWN)
    return " (no route to the peer's host: it is down, or its network is "
           "cut)";
  return "";
}

/* An errno of this rank's own making (its descriptors, its memory), not
 * the network's or the peer's. */
static int local_errno(int e) {
  return e == EBADF || e == ENOTSOCK || e == EFAULT || e == EINVAL ||
         e == ENOMEM || e == ENOBUFS || e == EMFILE || e == ENFILE;
}

/* A failed send/recv: a peer that went away is PEER_FAILED; a local errno
 * is SYSTEM, this rank's failure (the peer is not reported lost). */
static void conn_fail_io(struct net_conn *c, int sock, int e,
                         const struct net_request *r) {
  char where[96];
  int gone = e == ECONNRESET || e == EPIPE, local = local_errno(e);
  conn_fail(c, gone    ? RINGCC_ERR_PEER_FAILED
               : local ? RINGCC_ERR_SYSTEM
                       : RINGCC_ERR_NETWORK,
            "NET/Socket: %s %s failed on socket %d of %d (%s): %s%s%s%s",
            c->kind == COMM_SEND ? "send to" : "receive from", c->peer, sock,
            c->nsocks, request_where(c, r, where, sizeof(where)), strerror(e),
            gone ? " (the peer closed the connection or died)" : "",
            local ? " (a failure of this rank's own, not of the peer or the "
                    "network)"
                  : "",
            unreachable_why(e));
}

/* The head request of a socket is complete: off the queue; test() frees it. */
static void request_finish(struct sock_queue *s, struct net_request *r) {
  r->state = REQ_DONE;
  s->head = (s->head + 1) % RCC_NET_MAX_REQUESTS;
  s->count--;
}

/* What is left of send request r on the wire (header, payload, zeros from
 * r->moved on) as iovecs at iov[*n] on (3 at most); returns its bytes. */
static size_t send_iov(const struct net_request *r, struct iovec *iov,
                       int *n) {
  size_t end = MSG_HEADER_BYTES + r->bytes, total = wire_bytes(r->bytes);
  size_t off = r->moved > MSG_HEADER_BYTES ? r->moved - MSG_HEADER_BYTES : 0;
  size_t pad = r->moved > end ? r->moved - end : 0;
  if (r->moved < MSG_HEADER_BYTES)
    iov[(*n)++] = (struct iovec){(void *)(r->header + r->moved),
                                 MSG_HEADER_BYTES - r->moved};
  if (r->bytes > off)
    iov[(*n)++] = (struct iovec){(char *)r->data + off, r->bytes - off};
  if (total > end + pad)
    iov[(*n)++] = (struct iovec){(void *)(zeros + pad), total - end - pad};
  return total - r->moved;
}

/* Sends the queued messages of one socket until it would block: up to
 * SEND_BATCH of them per sendmsg(), so that a queue of messages becomes one
 * stream of full segments, not one short segment (and its ACK) at the end
 * of every message (docs/performance.md). */
static void progress_send(struct net_conn *c, int sock) {
  struct sock_queue *s = &c->socks[sock];
  while (s->count > 0 && c->error == RINGCC_SUCCESS) {
    struct iovec iov[3 * SEND_BATCH];
    int n = 0;
    size_t ask = 0;
    for (unsigned k = 0; k < s->count && k < SEND_BATCH; k++)
      ask += send_iov(s->q[(s->head + k) % RCC_NET_MAX_REQUESTS], iov, &n);
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t sent = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        conn_fail_io(c, sock, errno, s->q[s->head]);
      return;
    }
    for (size_t left = (size_t)sent, take; left > 0; left -= take) {
      struct net_request *r = s->q[s->head]; /* the bytes, in order */
      take = wire_bytes(r->bytes) - r->moved;
      take = left < take ? left : take;
      if ((r->moved += take) == wire_bytes(r->bytes))
        request_finish(s, r);
    }
    if ((size_t)sent < ask)
      return; /* the socket is full: poll() says when it has room */
  }
}

int rcc_net_socket_header_parse(const uint8_t *in, size_t len,
                                size_t slot_bytes, uint32_t *bytes,
                                uint32_t *imm) {
  *bytes = *imm = 0;
  if (len < MSG_HEADER_BYTES)
    return -1;
  *bytes = rcc_get_be32(in);
  *imm = rcc_get_be32(in + 4);
  return *bytes > slot_bytes ? -1 : 0;
}

/* The header of a receive is in: checks the size against the slot. */
static int header_arrived(struct net_conn *c, int sock,
                          struct net_request *r) {
  uint32_t bytes;
  int bad = rcc_net_socket_header_parse(r->header, sizeof(r->header), r->bytes,
                                        &bytes, &r->imm) != 0;
  if (bad && r->home != NULL) {
    /* Longer than where it was redirected: back to where it was posted. */
    r->data = r->home;
    r->bytes = r->home_bytes;
    bad = rcc_net_socket_header_parse(r->header, sizeof(r->header), r->bytes,
                                      &bytes, &r->imm) != 0;
  }
  r->home = NULL;
  r->sum = rcc_get_be32(r->header + 8);
  r->flags = rcc_get_be32(r->header + 12);
  if (bad) {
    c->corrupt = 1;
    conn_fail(c, RINGCC_ERR_NETWORK,
              "NET/Socket: protocol violation: the header of message %llu "
              "from %s (socket %d of %d) claims %u bytes for a %zu-byte slot "
              "(header bytes 0-7: %02x%02x%02x%02x %02x%02x%02x%02x); the "
              "stream is corrupt or out of step",
              (unsigned long long)r->seq, c->peer, sock, c->nsocks,
              (unsigned)bytes, r->bytes, r->header[0], r->header[1],
              r->header[2], r->header[3], r->header[4], r->header[5],
              r->header[6], r->header[7]);
    return -1;
  }
  r->bytes = bytes;
  if (c->checksum) { /* message_crc, continued as the payload arrives */
    uint8_t head[8];
    rcc_put_be32(head, bytes);
    rcc_put_be32(head + 4, r->imm);
    r->crc = rcc_crc32c(0, head, sizeof(head));
  }
  return 0;
}

/* The CRC-32C a message carries: of its size and immediate (the header's
 * first 8 bytes: a flipped bit there would change what the payload means)
 * and of its payload. */
static uint32_t message_crc(uint32_t imm, const void *data, size_t bytes) {
  uint8_t head[8];
  rcc_put_be32(head, (uint32_t)bytes);
  rcc_put_be32(head + 4, imm);
  return rcc_crc32c(rcc_crc32c(0, head, sizeof(head)), data, bytes);
}

/* A whole message is in: where the connection sums payloads
 * (RINGCC_CHECKSUM), its CRC-32C (summed as it arrived, progress_recv; the
 * same as message_crc of what is in r->data) must be the one its header
 * carries, else
 * the connection fails: corrupted bytes never reach the FIFO. */
static int checksum_ok(struct net_conn *c, int sock,
                       const struct net_request *r) {
  if (!c->checksum)
    return 1;
  uint32_t sent = r->sum;
  c->corrupt = 1; /* unless it matches, below */
  if ((r->flags & HDR_FLAG_CRC) == 0) {
    conn_fail(c, RINGCC_ERR_NETWORK,
              "NET/Socket: message %llu from %s (%zu bytes, socket %d of %d) "
              "carries no checksum, though RINGCC_CHECKSUM=1 here: a protocol "
              "violation", (unsigned long long)r->seq, c->peer, r->bytes, sock,
              c->nsocks);
    return 0;
  }
  uint32_t got = r->crc; /* progress_recv summed the payload */
  if (got == sent)
    return c->corrupt = 0, 1;
  conn_fail(c, RINGCC_ERR_NETWORK,
            "NET/Socket: checksum mismatch: message %llu from %s, %zu bytes "
            "(socket %d of %d), CRC-32C 0x%08x here but 0x%08x sent: the "
            "bytes were corrupted on the way (RINGCC_CHECKSUM=1 kept them "
            "out of the result)", (unsigned long long)r->seq, c->peer,
            r->bytes, sock, c->nsocks, (unsigned)got, (unsigned)sent);
  return 0;
}

/* ---- parked receives (socket_park) --------------------------------------- */

static void unpark(struct net_conn *c, struct net_request *r) {
  if (r->parked_at != 0)
    c->nparked--;
  r->parked_at = 0;
  r->go = 1;
}

/* Receive r's header is in and none of its payload: 1 if the payload stays
 * in the socket for now (parked, or parked from now on), 0 if it is read. */
static int parks(struct net_conn *c, struct net_request *r) {
  if (r->go)
    return 0;
  if (c->park_min == 0 || r->bytes < c->park_min ||
      (r->imm & c->park_mask) == 0) {
    r->go = 1;
    return 0;
  }
  int64_t now = rcc_now_ns();
  if (r->parked_at == 0) {
    r->parked_at = now;
    c->nparked++;
  }
  if (now - r->parked_at < c->park_ns)
    return 1;
  unpark(c, r); /* due: nobody came for it */
  return 0;
}

/* The head receive of socket s: 1 parked, -1 parked and due, 0 neither. */
static int head_parked(const struct net_conn *c, const struct sock_queue *s) {
  if (c->nparked == 0 || s->count == 0)
    return 0;
  const struct net_request *r = s->q[s->head];
  if (r->parked_at == 0)
    return 0;
  return rcc_now_ns() - r->parked_at < c->park_ns ? 1 : -1;
}

static void socket_park(void *comm, size_t min_bytes, uint32_t imm_mask,
                        int64_t ns) {
  struct net_conn *c = comm;
  if (c == NULL || c->kind != COMM_RECV)
    return;
  for (int i = 0; i < c->nsocks && c->nparked > 0; i++) {
    struct sock_queue *s = &c->socks[i];
    for (unsigned k = 0; k < s->count; k++) {
      struct net_request *r = s->q[(s->head + k) % RCC_NET_MAX_REQUESTS];
      if (r->parked_at != 0)
        unpark(c, r);
    }
  }
  c->park_min = ns > 0 ? min_bytes : 0;
  c->park_mask = imm_mask;
  c->park_ns = ns;
}

static int socket_want(void *request) {
  struct net_request *r = request;
  if (r == NULL || r->state != REQ_POSTED || r->conn->kind != COMM_RECV)
    return 0;
  int was = r->parked_at != 0;
  unpark(r->conn, r);
  return was;
}

static int socket_parked_ms(void *comm) {
  const struct net_conn *c = comm;
  if (c == NULL || c->kind != COMM_RECV || c->nparked == 0)
    return -1;
  int64_t first = INT64_MAX, now = rcc_now_ns();
  for (int i = 0; i < c->nsocks; i++) {
    const struct sock_queue *s = &c->socks[i];
    if (head_parked(c, s) != 0 && s->q[s->head]->parked_at < first)
      first = s->q[s->head]->parked_at;
  }
  if (first == INT64_MAX)
    return -1;
  int64_t left = first + c->park_ns - now;
  return left <= 0 ? 0 : (int)((left + 999999) / 1000000);
}

/* Receives into the posted requests of one socket until it would block.
 * Bytes come from the read buffer first. A header, or a payload remainder
 * shorter than RBUF_BYTES, is read through the buffer (what follows it stays
 * there for the next requests); a longer remainder straight into the
 * caller's memory. A recv() that returns less than it asked for emptied the
 * socket: no second call that would only say EAGAIN, in this pass or, where
 * the caller reports poll()'s readiness (socket_readable), before the next
 * message until poll() says the socket has more (before, most recv() calls
 * said only EAGAIN: docs/performance.md). */
static void progress_recv(struct net_conn *c, int sock) {
  struct sock_queue *s = &c->socks[sock];
  int drained = 0;
  while (s->count > 0 && !s->eof && c->error == RINGCC_SUCCESS) {
    struct net_request *r = s->q[s->head];
    if (r->moved == MSG_HEADER_BYTES && parks(c, r))
      return; /* the payload waits in the socket */
    int in_header = r->moved < MSG_HEADER_BYTES;
    size_t end = MSG_HEADER_BYTES + r->bytes; /* the payload's end */
    char *to;
    size_t want;
    if (in_header) {
      to = (char *)r->header + r->moved;
      want = MSG_HEADER_BYTES - r->moved;
    } else if (r->moved < end) {
      to = (char *)r->data + (r->moved - MSG_HEADER_BYTES);
      want = end - r->moved;
    } else { /* the zeros after the payload: dropped into the header */
      to = (char *)r->header;
      want = wire_bytes(r->bytes) - r->moved;
    }
    size_t got;
    if (s->roff < s->rlen) { /* want > 0 */
      got = s->rlen - s->roff < want ? s->rlen - s->roff : want;
      memcpy(to, s->rbuf + s->roff, got);
      s->roff += (unsigned)got;
    } else {
      /* Between messages, a socket found empty waits for poll(); inside
       * one, the rest is on its way: read on, as before. */
      if (drained || (c->hinted && s->idle && r->moved == 0))
        return;
      int buffered = want < RBUF_BYTES;
      /* A long remainder, and what follows it (the next header) into the
       * empty read buffer: one recvmsg() per message, not two. */
      struct iovec iov[2] = {{buffered ? (void *)s->rbuf : to,
                              buffered ? RBUF_BYTES : want},
                             {s->rbuf, RBUF_BYTES}};
      size_t ask = buffered ? RBUF_BYTES : want + RBUF_BYTES;
      struct msghdr msg = {.msg_iov = iov, .msg_iovlen = buffered ? 1 : 2};
      ssize_t n = recvmsg(s->fd, &msg, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          conn_fail_io(c, sock, errno, r);
        s->idle = 1;
        return;
      }
      if (n == 0 && r->moved == 0) {
        /* A peer that left after its last message (and its goodbye, which
         * may sit unread on another socket) closes every socket: an error
         * only if this message is ever waited for (socket_test). */
        s->eof = 1;
        return;
      }
      if (n == 0) {
        char where[96];
        conn_fail(c, RINGCC_ERR_PEER_FAILED,
                  "NET/Socket: connection from %s closed by the peer (socket "
                  "%d of %d, %s)", c->peer, sock, c->nsocks,
                  request_where(c, r, where, sizeof(where)));
        return;
      }
      drained = (size_t)n < ask;
      s->idle = drained;
      if (buffered) {
        s->roff = 0;
        s->rlen = (unsigned)n;
        continue; /* taken from the buffer above */
      }
      got = (size_t)n < want ? (size_t)n : want;
      s->roff = 0;
      s->rlen = (unsigned)((size_t)n - got); /* read ahead, in rbuf */
    }
    if (c->checksum && !in_header && r->moved < end)
      r->crc = rcc_crc32c(r->crc, to, got); /* payload, just copied in */
    r->moved += got;
    if (in_header && r->moved == MSG_HEADER_BYTES &&
        header_arrived(c, sock, r) != 0)
      return;
    if (r->moved == wire_bytes(r->bytes) && /* false inside the header */
        checksum_ok(c, sock, r))
      request_finish(s, r);
  }
}

/* Moves the request's own socket; unless that finished the request, every
 * other socket of the connection too (while this one waits, the others'
 * messages move, which keeps N sockets busy with large messages; a small
 * message that is done does not cost a recv() per idle socket). */
static void progress_conn(struct net_conn *c, int first,
                          const struct net_request *r) {
  for (int i = 0; i < c->nsocks && c->error == RINGCC_SUCCESS; i++) {
    int sock = (first + i) % c->nsocks;
    if (i > 0 && r->state != REQ_POSTED)
      return;
    if (c->socks[sock].count == 0)
      continue;
    if (c->kind == COMM_SEND)
      progress_send(c, sock);
    else
      progress_recv(c, sock);
  }
}

/* Takes a free request and queues it on the socket of the next message;
 * NULL when RCC_NET_MAX_REQUESTS are outstanding. */
static struct net_request *post(struct net_conn *c, void *data, size_t bytes) {
  if (c->nfree == 0)
    return NULL;
  struct net_request *r = c->free_list[--c->nfree];
  struct sock_queue *s = &c->socks[c->posted % (uint64_t)c->nsocks];
  *r = (struct net_request){.conn = c, .data = data, .bytes = bytes,
                            .seq = c->posted++, .state = REQ_POSTED};
  s->q[(s->head + s->count) % RCC_NET_MAX_REQUESTS] = r;
  s->count++;
  return r;
}

static ringcc_result_t socket_isend(void *send_comm, const void *data,
                                    size_t bytes, uint32_t imm, void *mhandle,
                                    void **request, char *err, size_t errlen) {
  struct net_conn *c = send_comm;
  (void)mhandle;
  *request = NULL;
  if (c == NULL || c->kind != COMM_SEND)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: isend on something that is not a send "
                    "connection");
  if (bytes > UINT32_MAX || (data == NULL && bytes > 0))
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: isend of %zu bytes from %p to %s: a message "
                    "holds at most %u bytes, from a valid buffer", bytes, data,
                    c->peer, (unsigned)UINT32_MAX);
  if (c->error != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, c->error, "%s", c->message);
  struct net_request *r = post(c, (void *)data, bytes);
  if (r != NULL) {
    r->imm = imm;
    memset(r->header, 0, sizeof(r->header));
    rcc_put_be32(r->header, (uint32_t)bytes);
    rcc_put_be32(r->header + 4, imm);
    if (c->checksum) { /* the bytes are final: the executor published them */
      rcc_put_be32(r->header + 8, message_crc(imm, data, bytes));
      rcc_put_be32(r->header + 12, HDR_FLAG_CRC);
    }
  }
  *request = r;
  return RINGCC_SUCCESS;
}

static ringcc_result_t socket_irecv(void *recv_comm, void *data,
                                    size_t max_bytes, void *mhandle,
                                    void **request, char *err, size_t errlen) {
  struct net_conn *c = recv_comm;
  (void)mhandle;
  *request = NULL;
  if (c == NULL || c->kind != COMM_RECV)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: irecv on something that is not a receive "
                    "connection");
  if (data == NULL && max_bytes > 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: irecv of up to %zu bytes into NULL",
                    max_bytes);
  if (c->error != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, c->error, "%s", c->message);
  *request = post(c, data, max_bytes);
  return RINGCC_SUCCESS;
}

static ringcc_result_t socket_test(void *request, int *done, size_t *bytes,
                                   uint32_t *imm, char *err, size_t errlen) {
  struct net_request *r = request;
  *done = 0;
  if (r == NULL || r->state == REQ_FREE)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: test of a request that is not outstanding");
  struct net_conn *c = r->conn;
  int sock = (int)(r->seq % (uint64_t)c->nsocks);
  if (r->state == REQ_POSTED)
    progress_conn(c, sock, r);
  if (r->state == REQ_POSTED && c->socks[sock].eof) {
    char where[96];
    conn_fail(c, RINGCC_ERR_PEER_FAILED,
              "NET/Socket: connection from %s closed by the peer (socket %d "
              "of %d, %s)", c->peer, sock, c->nsocks,
              request_where(c, r, where, sizeof(where)));
  }
  if (r->state == REQ_DONE) {
    *done = 1;
    if (bytes != NULL)
      *bytes = r->bytes;
    if (imm != NULL)
      *imm = r->imm;
    r->state = REQ_FREE;
    c->free_list[c->nfree++] = r;
    return RINGCC_SUCCESS;
  }
  if (c->error != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, c->error, "%s", c->message);
  return RINGCC_SUCCESS;
}

static void socket_rebase(void *request, const void *data) {
  struct net_request *r = request;
  r->data = (void *)data; /* progress_send reads from data + what moved */
}

static int socket_redirect(void *request, void *data, size_t max_bytes,
                           int force) {
  struct net_request *r = request;
  if (r == NULL || r->conn->kind != COMM_RECV)
    return -1;
  if (r->state == REQ_DONE) { /* all in, not yet collected by test(): a
                                 forced move takes all of it */
    if (!force || r->bytes > max_bytes)
      return -1;
    if (r->bytes > 0 && r->data != data)
      memcpy(data, r->data, r->bytes);
    r->data = data;
    return 0;
  }
  if (r->state != REQ_POSTED)
    return -1;
  size_t have = r->moved > MSG_HEADER_BYTES ? r->moved - MSG_HEADER_BYTES : 0;
  if (have > r->bytes) /* into the zeros after the payload */
    have = r->bytes;
  if ((have > 0 && !force) ||
      (r->moved >= MSG_HEADER_BYTES && r->bytes > max_bytes))
    return -1; /* too late, or the message is known not to fit */
  if (have > 0)
    memcpy(data, r->data, have);
  unpark(r->conn, r); /* landed: it reads on, straight there */
  if (r->moved < MSG_HEADER_BYTES) {
    if (r->home == NULL) { /* the first place: for a message that is longer */
      r->home = r->data;
      r->home_bytes = r->bytes;
    }
    r->bytes = max_bytes;
  }
  r->data = data;
  return 0;
}

static ringcc_result_t socket_reg_mr(void *comm, void *data, size_t bytes,
                                     void **mhandle, char *err,
                                     size_t errlen) {
  (void)comm, (void)data, (void)bytes, (void)err, (void)errlen;
  *mhandle = NULL; /* TCP reads and writes any memory */
  return RINGCC_SUCCESS;
}

static void socket_dereg_mr(void *comm, void *mhandle) {
  (void)comm, (void)mhandle;
}

/* ---- connect ----------------------------------------------------------- */

static ringcc_result_t socket_connect(const uint8_t *key, const void *handle,
                                      const void *hello, void **send_comm,
                                      int64_t deadline_ns, int *last_errno,
                                      char *err, size_t errlen) {
  struct sockaddr_storage addr;
  uint8_t nonce[NONCE_BYTES];
  char why[RCC_ERRLEN];
  int nsocks, e = 0;
  ringcc_result_t r;

  *send_comm = NULL;
  if (last_errno != NULL)
    *last_errno = 0;
  if ((r = handle_decode(handle, &addr, nonce, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_net_socket_count(&nsocks, err, errlen)) != RINGCC_SUCCESS)
    return r;
  struct net_conn *c = conn_new(COMM_SEND, nsocks);
  if (c == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/Socket: out of memory for a connection");
  rcc_socket_addr_str(&addr, c->peer, sizeof(c->peer));
  c->connected = 1;
  uint64_t id = random_id();
  for (int i = 0; i < nsocks; i++) {
    uint8_t pre[PREAMBLE_BYTES + RCC_NET_HELLO_BYTES + MAC_BYTES];
    size_t hlen = i == 0 ? RCC_NET_HELLO_BYTES : 0;
    size_t len = PREAMBLE_BYTES + hlen + MAC_BYTES;
    rcc_put_be32(pre, PREAMBLE_MAGIC);
    rcc_put_be16(pre + 4, (uint16_t)i);
    rcc_put_be16(pre + 6, (uint16_t)nsocks);
    rcc_put_be64(pre + 8, id);
    if (i == 0 && hello != NULL)
      memcpy(pre + PREAMBLE_BYTES, hello, RCC_NET_HELLO_BYTES);
    else if (i == 0)
      memset(pre + PREAMBLE_BYTES, 0, RCC_NET_HELLO_BYTES);
    preamble_mac(key, nonce, pre, i == 0 ? pre + PREAMBLE_BYTES : NULL,
                 pre + PREAMBLE_BYTES + hlen);
    /* A socket the listener closed before it read this preamble (this
     * process stopped after its connect: the listener's gate took it for a
     * silent stranger) is opened again; the listener never saw it. */
    for (int tries = 0;; tries++) {
      r = rcc_socket_connect_errno(&addr, deadline_ns, &c->socks[i].fd, &e,
                                   why, sizeof(why));
      if (r == RINGCC_SUCCESS) {
        data_socket_setup(c->socks[i].fd);
        r = rcc_socket_send_all(c->socks[i].fd, pre, len, deadline_ns, why,
                                sizeof(why));
      }
      if (tries == RECONNECTS || c->socks[i].fd < 0 ||
          (r != RINGCC_SUCCESS && r != RINGCC_ERR_PEER_FAILED) ||
          (r == RINGCC_SUCCESS && !rcc_gate_dropped_unread(c->socks[i].fd)))
        break;
      RCC_INFO(-1, "NET/Socket: %s closed socket %d before it read its "
               "preamble (this process did not run for a while?): opening "
               "it again", c->peer, i);
      close(c->socks[i].fd);
      c->socks[i].fd = -1;
    }
    if (r != RINGCC_SUCCESS) {
      if (last_errno != NULL)
        *last_errno = e;
      rcc_errf(err, errlen, r, "NET/Socket: opening socket %d of %d to %s: %s",
               i, nsocks, c->peer, why);
      conn_free(c);
      return r;
    }
  }
  RCC_TRACE(-1, "NET/Socket: connected to %s with %d socket%s (id %016llx)",
            c->peer, nsocks, nsocks == 1 ? "" : "s", (unsigned long long)id);
  *send_comm = c;
  return RINGCC_SUCCESS;
}

/* The connection the other way over the sockets of comm (see the top). */
static ringcc_result_t socket_reverse(void *comm, void **other, char *err,
                                      size_t errlen) {
  struct net_conn *c = comm;
  *other = NULL;
  if (c == NULL || (c->kind != COMM_SEND && c->kind != COMM_RECV))
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: reverse of something that is not a "
                    "connection");
  if (c->twin != NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_USAGE,
                    "NET/Socket: the connection with %s is already used both "
                    "ways", c->peer);
  struct net_conn *o =
      conn_new(c->kind == COMM_SEND ? COMM_RECV : COMM_SEND, c->nsocks);
  if (o == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/Socket: out of memory for a connection");
  memcpy(o->peer, c->peer, sizeof(o->peer));
  o->connected = c->connected;
  for (int i = 0; i < c->nsocks; i++)
    o->socks[i].fd = c->socks[i].fd;
  c->twin = o;
  o->twin = c;
  *other = o;
  return RINGCC_SUCCESS;
}

/* ---- listen and accept ------------------------------------------------- */

/* A socket in the listener gate (gate.h): what of its preamble, hello and
 * proof has arrived (the check's state). */
struct preamble_in {
  int index, nsocks; /* from the preamble, once got >= PREAMBLE_BYTES */
  uint64_t id;
  size_t got, need; /* preamble (+ hello for socket 0) + proof bytes */
  uint8_t buf[PREAMBLE_BYTES + RCC_NET_HELLO_BYTES + MAC_BYTES];
};

/* A socket that proved the key, waiting for the other sockets of its
 * connection. */
struct member {
  int fd;
  int index, nsocks;
  uint64_t id;
  int64_t since_ns;
  char peer[80];
  uint8_t hello[RCC_NET_HELLO_BYTES]; /* socket 0's */
};

struct net_listen {
  int kind; /* COMM_LISTEN */
  int fd;
  char addr[80];
  uint8_t key[RCC_NET_KEY_BYTES];
  uint8_t nonce[NONCE_BYTES]; /* in the handle: proofs are for us only */
  struct rcc_gate *gate;      /* the sockets that have not proven the key */
  int nmembers, cap;
  struct member *members;
  int clashes; /* proven sockets that clash with another (WARN once) */
  int ntaken;
  uint64_t taken[MAX_TAKEN]; /* ids of connections handed out (replays) */
};

static enum rcc_gate_step preamble_check(void *arg, struct rcc_gate_conn *c,
                                         char *why, size_t whylen);

static ringcc_result_t socket_listen(const uint8_t *key, void *handle,
                                     void **listen_comm, char *err,
                                     size_t errlen) {
  struct sockaddr_storage addr, bound;
  ringcc_result_t r;

  *listen_comm = NULL;
  pthread_mutex_lock(&g_net.lock);
  int ready = g_net.ready;
  addr = g_net.addr;
  pthread_mutex_unlock(&g_net.lock);
  if (!ready)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_USAGE,
                    "NET/Socket: listen before init");
  struct net_listen *l = calloc(1, sizeof(*l));
  if (l == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/Socket: out of memory for a listener");
  l->kind = COMM_LISTEN;
  l->fd = -1;
  memcpy(l->key, key, RCC_NET_KEY_BYTES);
  int e = rcc_random_bytes(l->nonce, NONCE_BYTES);
  if (e != 0)
    r = rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "NET/Socket: getrandom for "
                 "the listener's nonce failed: %s", strerror(e));
  else
    r = rcc_socket_listen(&addr, &l->fd, &bound, err, errlen);
  if (r == RINGCC_SUCCESS) {
    char what[120];
    rcc_socket_addr_str(&bound, l->addr, sizeof(l->addr));
    snprintf(what, sizeof(what), "NET/Socket: the listener %s", l->addr);
    struct rcc_gate_config cfg = {
        .what = what, .log_rank = -1, .max_held = MAX_UNPROVEN,
        .expire_ns = PREAMBLE_TIMEOUT_NS, .backoff_ns = BACKOFF_NS,
        .state_bytes = sizeof(struct preamble_in), .check = preamble_check,
        .arg = l};
    if ((l->gate = rcc_gate_new(l->fd, &cfg)) == NULL)
      r = rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                   "NET/Socket: out of memory for a listener");
  }
  if (r != RINGCC_SUCCESS) {
    if (l->fd >= 0)
      close(l->fd);
    free(l);
    return r;
  }
  handle_encode(handle, &bound, l->nonce);
  *listen_comm = l;
  return RINGCC_SUCCESS;
}

int rcc_net_socket_preamble_parse(const uint8_t *in, size_t len,
                                  struct rcc_net_preamble *out, char *why,
                                  size_t whylen) {
  memset(out, 0, sizeof(*out));
  if (len < PREAMBLE_BYTES || rcc_get_be32(in) != PREAMBLE_MAGIC) {
    snprintf(why, whylen, "bad magic 0x%08x: not a RingCC Socket "
             "connection", len < 4 ? 0u : (unsigned)rcc_get_be32(in));
    return -1;
  }
  out->index = rcc_get_be16(in + 4);
  out->nsocks = rcc_get_be16(in + 6);
  out->id = rcc_get_be64(in + 8);
  if (out->nsocks < 1 || out->nsocks > NSOCKS_MAX ||
      out->index >= out->nsocks) {
    snprintf(why, whylen, "socket %d of %d is not a valid socket index "
             "and count (1..%d)", out->index, out->nsocks, NSOCKS_MAX);
    return -1;
  }
  out->need = PREAMBLE_BYTES + (out->index == 0 ? RCC_NET_HELLO_BYTES : 0) +
              MAC_BYTES;
  return 0;
}

/* The gate's check: reads what has arrived of a socket's preamble, hello
 * and proof. A malformed preamble is dropped as soon as it is in, a false
 * proof or a replay refused; proven when the whole proof holds. Never
 * "started": a connector sends all of it with its connect and waits for no
 * answer, so a socket whose proof has not come is a stranger's until it
 * does (the gate reads it once more before it drops it for room). */
static enum rcc_gate_step preamble_check(void *arg, struct rcc_gate_conn *c,
                                         char *why, size_t whylen) {
  const struct net_listen *l = arg;
  struct preamble_in *p = c->state;
  if (p->need == 0)
    p->need = PREAMBLE_BYTES;
  while (p->got < p->need) {
    ssize_t n = recv(c->fd, p->buf + p->got, p->need - p->got, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return RCC_GATE_WAIT;
    if (n <= 0) {
      snprintf(why, whylen, "%s", n == 0 ? "closed before its preamble"
                                         : strerror(errno));
      return RCC_GATE_DROP;
    }
    p->got += (size_t)n;
    if (p->got == PREAMBLE_BYTES) {
      struct rcc_net_preamble pre;
      if (rcc_net_socket_preamble_parse(p->buf, PREAMBLE_BYTES, &pre, why,
                                        whylen) != 0)
        return RCC_GATE_DROP;
      p->index = pre.index;
      p->nsocks = pre.nsocks;
      p->id = pre.id;
      p->need = pre.need;
    }
  }
  uint8_t mac[MAC_BYTES];
  size_t hlen = p->index == 0 ? RCC_NET_HELLO_BYTES : 0;
  preamble_mac(l->key, l->nonce, p->buf,
               p->index == 0 ? p->buf + PREAMBLE_BYTES : NULL, mac);
  if (!rcc_equal_ct(mac, p->buf + PREAMBLE_BYTES + hlen, MAC_BYTES)) {
    snprintf(why, whylen, "it does not prove the communicator's key (a "
             "stranger, a peer of another communicator, or a replay)");
    return RCC_GATE_REFUSE;
  }
  for (int i = 0; i < l->ntaken; i++)
    if (l->taken[i] == p->id) {
      snprintf(why, whylen, "connection %016llx was accepted already: a "
               "replay", (unsigned long long)p->id);
      return RCC_GATE_REFUSE;
    }
  return RCC_GATE_PROVEN;
}

/* Drops member i: a WARN the first time (a socket that proved the key but
 * does not fit, or whose connection never came whole), INFO after. */
static void member_drop(struct net_listen *l, int i, const char *why) {
  struct member *m = &l->members[i];
  if (l->clashes++ == 0)
    RCC_WARN(-1, "NET/Socket: dropped a connection from %s to %s: %s",
             m->peer, l->addr, why);
  else
    RCC_INFO(-1, "NET/Socket: dropped a connection from %s to %s: %s",
             m->peer, l->addr, why);
  close(m->fd);
  l->members[i] = l->members[--l->nmembers];
}

/* A socket that proved the key joins its connection's members; one that
 * clashes with a member (the same index, another count) is dropped. */
static ringcc_result_t member_add(struct net_listen *l,
                                  const struct rcc_gate_passed *in,
                                  const struct preamble_in *p, char *err,
                                  size_t errlen) {
  for (int i = 0; i < l->nmembers; i++) {
    const struct member *o = &l->members[i];
    if (o->id == p->id && (o->index == p->index || o->nsocks != p->nsocks)) {
      char why[200];
      snprintf(why, sizeof(why), "socket %d of %d of connection %016llx "
               "clashes with socket %d of %d", p->index, p->nsocks,
               (unsigned long long)p->id, o->index, o->nsocks);
      if (l->clashes++ == 0)
        RCC_WARN(-1, "NET/Socket: dropped a connection from %s to %s: %s",
                 in->peer_str, l->addr, why);
      else
        RCC_INFO(-1, "NET/Socket: dropped a connection from %s to %s: %s",
                 in->peer_str, l->addr, why);
      close(in->fd);
      return RINGCC_SUCCESS;
    }
  }
  if (l->nmembers == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    struct member *m = realloc(l->members, (size_t)cap * sizeof(*m));
    if (m == NULL) {
      close(in->fd);
      return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                      "NET/Socket: out of memory accepting on %s", l->addr);
    }
    l->members = m;
    l->cap = cap;
  }
  struct member *m = &l->members[l->nmembers++];
  memset(m, 0, sizeof(*m));
  m->fd = in->fd;
  m->index = p->index;
  m->nsocks = p->nsocks;
  m->id = p->id;
  m->since_ns = rcc_now_ns();
  snprintf(m->peer, sizeof(m->peer), "%s", in->peer_str);
  if (p->index == 0)
    memcpy(m->hello, p->buf + PREAMBLE_BYTES, RCC_NET_HELLO_BYTES);
  return RINGCC_SUCCESS;
}

/* Drops the members whose connection did not come whole in time. */
static void expire_members(struct net_listen *l) {
  int64_t now = rcc_now_ns();
  for (int i = 0; i < l->nmembers; i++)
    if (now - l->members[i].since_ns > GROUP_TIMEOUT_NS) {
      char why[128];
      snprintf(why, sizeof(why), "the other %d sockets of its connection did "
               "not arrive within %lld s", l->members[i].nsocks - 1,
               GROUP_TIMEOUT_NS / 1000000000LL);
      member_drop(l, i--, why);
    }
}

/* A connection whose sockets are all here, taken out of the members; NULL
 * if none is complete (or memory ran out: the sockets stay for a retry). */
static struct net_conn *take_complete(struct net_listen *l, void *hello) {
  for (int i = 0; i < l->nmembers; i++) {
    const struct member *p = &l->members[i];
    int have = 0;
    if (p->index != 0)
      continue;
    for (int j = 0; j < l->nmembers; j++)
      have += l->members[j].id == p->id;
    if (have != p->nsocks)
      continue;
    struct net_conn *c = conn_new(COMM_RECV, p->nsocks);
    if (c == NULL)
      return NULL;
    memcpy(hello, p->hello, RCC_NET_HELLO_BYTES);
    snprintf(c->peer, sizeof(c->peer), "%s", p->peer);
    uint64_t id = p->id;
    if (l->ntaken < MAX_TAKEN)
      l->taken[l->ntaken++] = id;
    for (int j = 0; j < l->nmembers; j++) {
      struct member *q = &l->members[j];
      if (q->id != id)
        continue;
      c->socks[q->index].fd = q->fd;
      data_socket_setup(q->fd);
      l->members[j--] = l->members[--l->nmembers];
    }
    return c;
  }
  return NULL;
}

static ringcc_result_t socket_accept(void *listen_comm, void *hello,
                                     void **recv_comm, int64_t deadline_ns,
                                     char *err, size_t errlen) {
  struct net_listen *l = listen_comm;
  *recv_comm = NULL;
  if (l == NULL || l->kind != COMM_LISTEN)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: accept on something that is not a listener");
  for (;;) {
    struct net_conn *c = take_complete(l, hello);
    if (c != NULL) {
      RCC_TRACE(-1, "NET/Socket: accepted a connection from %s with %d "
                    "socket%s on %s", c->peer, c->nsocks,
                c->nsocks == 1 ? "" : "s", l->addr);
      *recv_comm = c;
      return RINGCC_SUCCESS;
    }
    expire_members(l);
    int64_t now = rcc_now_ns();
    if (now >= deadline_ns)
      return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                      "NET/Socket: no complete connection arrived on %s "
                      "before the deadline (%d socket%s of incomplete "
                      "connections waiting, %d that proved nothing)",
                      l->addr, l->nmembers, l->nmembers == 1 ? "" : "s",
                      rcc_gate_held(l->gate));
    /* Members expire on their own: look at them at least once a second. */
    int64_t until = now + 1000000000LL < deadline_ns ? now + 1000000000LL
                                                     : deadline_ns;
    struct rcc_gate_passed in;
    struct preamble_in p;
    ringcc_result_t r = rcc_gate_next(l->gate, until, -1, &in, &p, err,
                                      errlen);
    if (r == RINGCC_ERR_TIMEOUT)
      continue;
    if (r == RINGCC_SUCCESS)
      r = member_add(l, &in, &p, err, errlen);
    if (r != RINGCC_SUCCESS)
      return r;
  }
}

/* ---- the rest of the table --------------------------------------------- */

/* Only the sockets with requests queued: an idle socket of a send connection
 * is always writable and one of a receive connection may hold the next
 * messages' bytes, so either would end every poll() at once. With nothing
 * queued there is nothing to wait for here (0 fds). -1 when a queued receive
 * has bytes in its socket's read buffer: poll() would not say so. A
 * listener: its socket and the sockets its gate holds, not proven yet (one
 * readable: accept() has something to take), or -1 when a connection that
 * proved itself waits to be taken. */
static int socket_fds(void *comm, int *fds, int max) {
  int n = 0;
  if (comm == NULL)
    return 0;
  if (*(const int *)comm == COMM_LISTEN) /* and what its gate holds */
    return rcc_gate_fds(((const struct net_listen *)comm)->gate, fds, max);
  const struct net_conn *c = comm;
  for (int i = 0; i < c->nsocks; i++) {
    int parked = head_parked(c, &c->socks[i]);
    if (parked < 0 || (parked == 0 && c->socks[i].count > 0 &&
                       c->socks[i].roff < c->socks[i].rlen))
      return -1; /* due, or bytes already read */
  }
  for (int i = 0; i < c->nsocks && n < max; i++)
    if (c->socks[i].count > 0 && !c->socks[i].eof &&
        head_parked(c, &c->socks[i]) == 0)
      fds[n++] = c->socks[i].fd;
  return n;
}

/* poll() found fd ready: the receive socket behind it (of this connection,
 * or of its twin, which reads the same sockets) may be read again. */
static void socket_readable(void *comm, int fd) {
  struct net_conn *c = comm;
  if (c == NULL || c->kind == COMM_LISTEN)
    return;
  if (c->kind == COMM_SEND)
    c = c->twin;
  if (c == NULL)
    return;
  if (fd < 0) {
    c->hinted = 1;
    return;
  }
  for (int i = 0; i < c->nsocks; i++)
    if (c->socks[i].fd == fd)
      c->socks[i].idle = 0;
}

/* TCP_NOTSENT_LOWAT off (0: the kernel's, unbounded by default) or back to
 * RINGCC_SOCKET_NOTSENT_BYTES on the connection's sockets. */
static void socket_unsent_all(void *send_comm, int all) {
  struct net_conn *c = send_comm;
  for (int i = 0; i < c->nsocks && g_net.notsent > 0; i++)
    rcc_net_socket_bound_unsent(c->socks[i].fd, all ? 0 : g_net.notsent);
}

/* The link of a connection still carries acknowledgements (see the top).
 * For each socket: the kernel gave up on it (closed, with its error), or it
 * has data in flight or probes out and nothing acknowledged: silence. Silent
 * for the link timeout T and a fresh connect to the peer's host unanswered:
 * the connection fails (the first failure sticks to it and its twin, which
 * shares the sockets). Silent for T and the host answered: RINGCC_SUCCESS
 * with err saying so (the engine logs the suspicion). */
static ringcc_result_t socket_alive(void *comm, char *err, size_t errlen) {
  struct net_conn *c = comm;
  int64_t t = g_net.link_timeout_ms;
  uint32_t silent_ms = 0;
  int silent_sock = -1, in_flight = 0;
  if (errlen > 0)
    err[0] = '\0';
  if (c == NULL || c->kind == COMM_LISTEN)
    return RINGCC_SUCCESS;
  for (int i = 0; i < c->nsocks && t > 0 && c->error == RINGCC_SUCCESS; i++) {
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (c->socks[i].fd < 0 || c->socks[i].eof ||
        getsockopt(c->socks[i].fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
      continue;
    if (ti.tcpi_state == TCP_CLOSE) {
      int e = 0;
      socklen_t elen = sizeof(e);
      getsockopt(c->socks[i].fd, SOL_SOCKET, SO_ERROR, &e, &elen);
      if (e != 0)
        conn_fail(c, RINGCC_ERR_NETWORK, "NET/Socket: the connection with %s "
                  "failed on socket %d of %d: %s%s", c->peer, i, c->nsocks,
                  strerror(e), unreachable_why(e));
    } else if ((ti.tcpi_unacked > 0 || ti.tcpi_probes >= 2) &&
               ti.tcpi_last_ack_recv > silent_ms) {
      silent_ms = ti.tcpi_last_ack_recv;
      silent_sock = i;
      in_flight = ti.tcpi_unacked > 0;
    }
  }
  if (c->error == RINGCC_SUCCESS && silent_sock >= 0 &&
      silent_ms >= (uint32_t)(t / PROBE_AFTER_DIV)) {
    int64_t now = rcc_now_ns(), t_ns = t * 1000000LL;
    int v = rcc_probe_peer(&c->probe, c->socks[0].fd, &c->local_peer, now,
                           now - (int64_t)silent_ms * 1000000LL,
                           t_ns / PROBE_WAIT_DIV, t_ns / PROBE_EVERY_DIV);
    if (silent_ms < (uint32_t)t)
      ;
    else if (v == RCC_PROBE_SILENT)
      conn_fail(c, RINGCC_ERR_NETWORK, "NET/Socket: %s acknowledged nothing "
                "for %.1f s with %s on socket %d of %d, and %s: its host is "
                "down, or its network is cut "
                "(RINGCC_SOCKET_LINK_TIMEOUT_MS=%lld)",
                c->peer, silent_ms / 1000.0,
                in_flight ? "data in flight" : "probes out", silent_sock,
                c->nsocks, c->probe.why, (long long)t);
    else
      snprintf(err, errlen, "%s has acknowledged nothing for %.1f s (%s on "
               "socket %d of %d), but %s: alive, but slow, stopped or "
               "starved; waiting for it (the call's timeout_ms still "
               "applies)", c->peer, silent_ms / 1000.0,
               in_flight ? "data in flight" : "probes out", silent_sock,
               c->nsocks,
               v == RCC_PROBE_ANSWERED ? c->probe.why
                                       : "a fresh connection to its host "
                                         "is still waiting for an answer");
  } else if (silent_sock < 0) {
    rcc_probe_stop(&c->probe);
  }
  if (c->error != RINGCC_SUCCESS && c->twin != NULL)
    conn_fail(c->twin, c->error, "%s", c->message);
  if (c->error != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, c->error, "%s", c->message);
  return RINGCC_SUCCESS;
}

static void socket_close_conn(void *comm) { conn_free(comm); }

static void socket_checksum(void *comm, int on) {
  ((struct net_conn *)comm)->checksum = on;
}

static int socket_corrupt(void *comm) {
  return ((struct net_conn *)comm)->corrupt;
}

static void socket_close_listen(void *listen_comm) {
  struct net_listen *l = listen_comm;
  if (l == NULL)
    return;
  rcc_gate_free(l->gate); /* says how many false proofs it refused */
  for (int i = 0; i < l->nmembers; i++)
    close(l->members[i].fd);
  if (l->fd >= 0)
    close(l->fd);
  free(l->members);
  memset(l->key, 0, sizeof(l->key));
  free(l);
}

const struct rcc_net_plugin rcc_net_socket = {
    .name = "Socket",
    .link = RCC_LINK_TCP,
    .init = socket_init,
    .device = socket_device,
    .listen = socket_listen,
    .connect = socket_connect,
    .accept = socket_accept,
    .reg_mr = socket_reg_mr,
    .dereg_mr = socket_dereg_mr,
    .isend = socket_isend,
    .irecv = socket_irecv,
    .test = socket_test,
    .fds = socket_fds,
    .rebase = socket_rebase,
    .redirect = socket_redirect,
    .park = socket_park,
    .parked_ms = socket_parked_ms,
    .want = socket_want,
    .readable = socket_readable,
    .unsent_all = socket_unsent_all,
    .reverse = socket_reverse,
    .alive = socket_alive,
    .close_send = socket_close_conn,
    .close_recv = socket_close_conn,
    .close_listen = socket_close_listen,
    .checksum = socket_checksum,
    .corrupt = socket_corrupt,
};
