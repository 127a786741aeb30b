/*
 * rendezvous.c - the rendezvous server: ringcc_get_unique_id's listener and
 * the detached thread that serves it, until every rank sent its hello and
 * got the table of listener addresses (or the rendezvous refused them all,
 * or its id was released). The protocol is described at the top of
 * bootstrap.c; the handshake it runs through the listener gate is in
 * handshake.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "env.h"
#include "error.h"
#include "gate.h"
#include "handshake.h"
#include "log.h"
#include "sha256.h"
#include "socket.h"
#include "wire.h"

/* ---- the rendezvous server ------------------------------------------------ */

struct server {
  struct server *next; /* in servers, while its thread runs */
  struct gate *gate;
  int listen_fd;
  int stop[2];          /* a pipe: a byte in it stops the server */
  uint32_t port;        /* with secret: which id it serves */
  uint64_t serial;      /* this process's count of servers when it started */
  char where[96]; /* "1.2.3.4:5555" */
  int64_t start_ns, deadline_ns;
  int nranks, arrived;
  int first_rank; /* the rank whose hello fixed nranks */
  uint32_t failed; /* 0, or the status that refused the communicator */
  char failed_why[REFUSAL_LEN]; /* then the sentence every rank gets */
  int *rank_fd;   /* nranks entries, -1 until that rank arrived */
  uint8_t (*nonces)[2 * NONCE_LEN]; /* each rank's handshake: nonce_c, _a */
  uint8_t session[NONCE_LEN];       /* in every reply: the key derives from it */
  uint8_t secret[SECRET_LEN];
  uint8_t *table; /* the reply: REPLY_LEN + nranks * WIRE_ADDR_LEN + a tag */
};

/* Every rendezvous this process serves, for rcc_bootstrap_release_id. */
static pthread_mutex_t servers_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t servers_gone = PTHREAD_COND_INITIALIZER;
static struct server *servers;
static uint64_t servers_started;

static void send_best_effort(int fd, const uint8_t *buf, size_t len) {
  ssize_t n;
  do
    n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
}

/* The tag after a reply (and its table) to the rank whose handshake had
 * these nonces: the rank knows that the table is the rendezvous's. */
static void table_tag(const struct server *s, const struct passed *hs,
                      const uint8_t *msg, size_t len, uint8_t tag[PROOF_LEN]) {
  rcc_boot_mac(s->secret, LABEL_TABLE, PURPOSE_RENDEZVOUS, hs->nonce_c,
               hs->nonce_a, msg, len, tag);
}

/* Sends a refusal (status, the sentence why) on fd to the rank whose
 * handshake had these nonces, and closes fd. */
static void server_refuse(struct server *s, int fd, const uint8_t *nonce_c,
                          const uint8_t *nonce_a, uint32_t status,
                          const char *why) {
  uint8_t reply[REPLY_LEN + REFUSAL_LEN + PROOF_LEN];
  struct passed hs;
  memset(reply, 0, sizeof(reply));
  rcc_put_be32(reply, TABLE_MAGIC);
  rcc_put_be32(reply + 4, status);
  rcc_put_be32(reply + 8, (uint32_t)s->nranks);
  memcpy(reply + 12, s->session, NONCE_LEN);
  memcpy(reply + REPLY_LEN, why, strnlen(why, REFUSAL_LEN - 1)); /* cut */
  memcpy(hs.nonce_c, nonce_c, NONCE_LEN);
  memcpy(hs.nonce_a, nonce_a, NONCE_LEN);
  table_tag(s, &hs, reply, REPLY_LEN + REFUSAL_LEN,
            reply + REPLY_LEN + REFUSAL_LEN);
  send_best_effort(fd, reply, sizeof(reply));
  close(fd);
}

/* The communicator cannot form (why): refuses the rank of hs and every rank
 * that joined; the ranks still to come are refused as they arrive. */
static void server_fail(struct server *s, const struct passed *hs,
                        uint32_t status, const char *why) {
  s->failed = status;
  memset(s->failed_why, 0, sizeof(s->failed_why));
  memcpy(s->failed_why, why, strnlen(why, sizeof(s->failed_why) - 1));
  server_refuse(s, hs->fd, hs->nonce_c, hs->nonce_a, status, why);
  for (int r = 0; r < s->nranks; r++) {
    if (s->rank_fd[r] < 0)
      continue;
    server_refuse(s, s->rank_fd[r], s->nonces[r], s->nonces[r] + NONCE_LEN,
                  status, why);
    s->rank_fd[r] = -1;
  }
  s->arrived = 0;
  int64_t linger = rcc_now_ns() + FAILED_LINGER_NS;
  if (linger < s->deadline_ns)
    s->deadline_ns = linger;
  RCC_WARN(-1, "bootstrap: rendezvous %s refused the communicator: %s",
           s->where, why);
}

/* The server needs one descriptor per rank until the table goes out. */
static void raise_fd_limit(int nranks) {
  char why[64];
  snprintf(why, sizeof(why), "the rendezvous of %d ranks", nranks);
  rcc_socket_raise_fd_limit((uint64_t)nranks + 256, why);
}

int rcc_bootstrap_hello_parse(const uint8_t *in, size_t len,
                              uint32_t nranks_known, struct rcc_boot_hello *out,
                              char *why, size_t whylen) {
  memset(out, 0, sizeof(*out));
  if (len < HELLO_LEN || rcc_get_be32(in) != HELLO_MAGIC) {
    snprintf(why, whylen, "not a hello");
    return -1;
  }
  uint32_t rank = out->rank = rcc_get_be32(in + 4);
  uint32_t nranks = out->nranks = rcc_get_be32(in + 8);
  if (nranks < 1 || nranks > MAX_NRANKS) {
    snprintf(why, whylen, "nranks %u is not in 1..%d", nranks, MAX_NRANKS);
    return ST_BAD_NRANKS;
  }
  if (nranks_known != 0 && nranks != nranks_known) {
    snprintf(why, whylen, "it says nranks %u, the ranks before it said %u",
             nranks, nranks_known);
    return ST_NRANKS_MISMATCH;
  }
  if (rank >= nranks) {
    snprintf(why, whylen, "rank %u is not in 0..%u", rank, nranks - 1);
    return ST_BAD_RANK;
  }
  if (nranks > 1 && rcc_boot_addr_from_wire(in + 12, &out->listener) != 0) {
    snprintf(why, whylen, "its listener address is not IPv4/IPv6");
    return ST_BAD_ADDR;
  }
  return ST_OK;
}

/* The first rank fixes nranks: 0, or -1 when out of memory. */
static int server_size(struct server *s, uint32_t nranks) {
  s->rank_fd = malloc(sizeof(int) * nranks);
  s->nonces = malloc(sizeof(*s->nonces) * nranks);
  s->table = calloc(1, REPLY_LEN + (size_t)WIRE_ADDR_LEN * nranks + PROOF_LEN);
  if (s->rank_fd == NULL || s->nonces == NULL || s->table == NULL) {
    free(s->rank_fd);
    free(s->nonces);
    free(s->table);
    s->rank_fd = NULL;
    s->nonces = NULL;
    s->table = NULL;
    RCC_WARN(-1, "bootstrap: rendezvous %s: out of memory for %u ranks",
             s->where, nranks);
    return -1;
  }
  for (uint32_t r = 0; r < nranks; r++)
    s->rank_fd[r] = -1;
  s->nranks = (int)nranks;
  raise_fd_limit(s->nranks);
  return 0;
}

/* Takes a connection that proved itself and sent a hello. */
static void server_hello(struct server *s, const struct passed *hs) {
  struct rcc_boot_hello h;
  const uint8_t *wire = hs->hello + 12;
  char a[80], why[128] = "";
  int status = rcc_bootstrap_hello_parse(hs->hello, HELLO_LEN,
                                         (uint32_t)s->nranks, &h, why,
                                         sizeof(why));
  uint32_t rank = h.rank, nranks = h.nranks;

  if (status < 0) {
    RCC_WARN(-1, "bootstrap: rendezvous %s dropped %s: it knows the secret "
             "but sent no hello (magic 0x%08x); a different ringcc version?",
             s->where, rcc_socket_addr_str(&hs->peer, a, sizeof(a)),
             rcc_get_be32(hs->hello));
    close(hs->fd);
    return;
  }
  if (s->failed != 0) {
    server_refuse(s, hs->fd, hs->nonce_c, hs->nonce_a, s->failed,
                  s->failed_why);
    return;
  }
  char first[80], second[80], named[384]; /* cut to REFUSAL_LEN on the wire */
  rcc_socket_addr_str(&hs->peer, second, sizeof(second));
  if (status == ST_OK && s->rank_fd != NULL && s->rank_fd[rank] >= 0) {
    struct sockaddr_storage was;
    status = ST_DUP_RANK;
    if (nranks > 1 &&
        rcc_boot_addr_from_wire(
            s->table + REPLY_LEN + (size_t)WIRE_ADDR_LEN * rank, &was) == 0)
      rcc_socket_addr_str(&was, first, sizeof(first));
    else
      snprintf(first, sizeof(first), "another process");
    if (nranks > 1)
      rcc_socket_addr_str(&h.listener, second, sizeof(second));
    snprintf(named, sizeof(named), "rank %u joined twice (listening at %s and "
             "at %s): two processes were given the same rank", rank, first,
             second);
  } else if (status == ST_NRANKS_MISMATCH) {
    snprintf(named, sizeof(named), "rank %u says the communicator has %u "
             "ranks, rank %d says %d (from %s: was it started for another "
             "job?)", rank, nranks, s->first_rank, s->nranks, second);
  } else if (status != ST_OK) {
    snprintf(named, sizeof(named), "the hello from %s: %s", second, why);
  }
  if (status != ST_OK) {
    server_fail(s, hs, (uint32_t)status, named);
    return;
  }
  if (s->nranks == 0) {
    if (server_size(s, nranks) != 0) {
      close(hs->fd);
      return;
    }
    s->first_rank = (int)rank;
  }
  s->rank_fd[rank] = hs->fd;
  memcpy(s->nonces[rank], hs->nonce_c, NONCE_LEN);
  memcpy(s->nonces[rank] + NONCE_LEN, hs->nonce_a, NONCE_LEN);
  memcpy(s->table + REPLY_LEN + (size_t)WIRE_ADDR_LEN * rank, wire,
         WIRE_ADDR_LEN);
  s->arrived++;
  RCC_INFO(-1, "bootstrap: rendezvous %s: rank %u of %u arrived from %s "
           "(%d/%u)", s->where, rank, nranks,
           rcc_socket_addr_str(&hs->peer, a, sizeof(a)), s->arrived, nranks);
}

static void server_send_tables(struct server *s) {
  size_t len = REPLY_LEN + (size_t)WIRE_ADDR_LEN * s->nranks;
  int64_t deadline = rcc_now_ns() + TABLE_SEND_TIMEOUT_NS;
  rcc_put_be32(s->table, TABLE_MAGIC);
  rcc_put_be32(s->table + 4, ST_OK);
  rcc_put_be32(s->table + 8, (uint32_t)s->nranks);
  memcpy(s->table + 12, s->session, NONCE_LEN);
  for (int r = 0; r < s->nranks; r++) {
    char msg[RCC_ERRLEN];
    struct passed hs;
    memcpy(hs.nonce_c, s->nonces[r], NONCE_LEN);
    memcpy(hs.nonce_a, s->nonces[r] + NONCE_LEN, NONCE_LEN);
    table_tag(s, &hs, s->table, len, s->table + len);
    if (rcc_socket_send_all(s->rank_fd[r], s->table, len + PROOF_LEN,
                            deadline, msg, sizeof(msg)) != RINGCC_SUCCESS)
      RCC_WARN(-1, "bootstrap: rendezvous %s could not send the table to "
               "rank %d: %s", s->where, r, msg);
  }
  RCC_INFO(-1, "bootstrap: rendezvous %s complete: %d ranks in %lld ms",
           s->where, s->nranks,
           (long long)((rcc_now_ns() - s->start_ns) / 1000000));
}

static void server_report_missing(struct server *s) {
  char missing[256] = "";
  size_t used = 0;
  int shown = 0;
  for (int r = 0; r < s->nranks && shown < 16; r++) {
    if (s->rank_fd[r] >= 0)
      continue;
    int n = snprintf(missing + used, sizeof(missing) - used, "%s%d",
                     shown ? ", " : "", r);
    if (n < 0 || (size_t)n >= sizeof(missing) - used)
      break;
    used += (size_t)n;
    shown++;
  }
  RCC_WARN(-1, "bootstrap: rendezvous %s gave up after %lld ms: %d of %d "
           "ranks arrived%s%s%s", s->where,
           (long long)((rcc_now_ns() - s->start_ns) / 1000000), s->arrived,
           s->nranks, shown ? " (missing: " : "", missing,
           shown ? (s->nranks - s->arrived > shown ? ", ...)" : ")") : "");
}

static void server_free(struct server *s) {
  for (int r = 0; r < s->nranks; r++)
    if (s->rank_fd[r] >= 0)
      close(s->rank_fd[r]);
  rcc_boot_gate_free(s->gate);
  close(s->listen_fd);
  if (s->stop[0] >= 0) {
    close(s->stop[0]);
    close(s->stop[1]);
  }
  free(s->rank_fd);
  free(s->nonces);
  free(s->table);
  memset(s->secret, 0, sizeof(s->secret));
  free(s);
}

static void *server_main(void *arg) {
  struct server *s = arg;
  int released = 0;
  while (s->failed != 0 || s->nranks == 0 || s->arrived < s->nranks) {
    struct passed hs;
    if (rcc_boot_gate_next(s->gate, s->deadline_ns, s->stop[0], &hs) !=
        RINGCC_SUCCESS)
      break;
    if (hs.fd < 0) { /* rcc_bootstrap_release_id */
      released = 1;
      break;
    }
    server_hello(s, &hs);
  }
  if (released) {
    for (int r = 0; r < s->nranks && s->failed == 0; r++) {
      if (s->rank_fd[r] < 0)
        continue;
      server_refuse(s, s->rank_fd[r], s->nonces[r], s->nonces[r] + NONCE_LEN,
                    ST_RELEASED, "the process that made the id released it "
                    "(ringcc_unique_id_release) before every rank arrived");
      s->rank_fd[r] = -1;
    }
    RCC_INFO(-1, "bootstrap: rendezvous %s released after %lld ms (%d of %d "
             "ranks had arrived)", s->where,
             (long long)((rcc_now_ns() - s->start_ns) / 1000000), s->arrived,
             s->nranks);
  } else if (s->failed != 0)
    ; /* every rank that came was told */
  else if (s->nranks > 0 && s->arrived == s->nranks)
    server_send_tables(s);
  else if (s->nranks > 0)
    server_report_missing(s);
  else
    RCC_WARN(-1, "bootstrap: rendezvous %s gave up after %lld ms: no rank "
             "arrived", s->where,
             (long long)((rcc_now_ns() - s->start_ns) / 1000000));
  pthread_mutex_lock(&servers_lock);
  for (struct server **p = &servers; *p != NULL; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  server_free(s); /* its listener closed before a release returns */
  pthread_cond_broadcast(&servers_gone);
  pthread_mutex_unlock(&servers_lock);
  return NULL;
}

ringcc_result_t rcc_bootstrap_release_id(const ringcc_unique_id_t *id,
                                         int *released, char *err,
                                         size_t errlen) {
  struct sockaddr_storage addr;
  uint8_t secret[SECRET_LEN];
  ringcc_result_t r = rcc_boot_id_decode(id, &addr, secret, err, errlen);
  *released = 0;
  if (r != RINGCC_SUCCESS)
    return r;
  uint32_t port = rcc_socket_addr_port(&addr);
  pthread_mutex_lock(&servers_lock);
  struct server *s = servers;
  while (s != NULL && (s->port != port ||
                       memcmp(s->secret, secret, SECRET_LEN) != 0))
    s = s->next;
  if (s != NULL) {
    ssize_t n;
    do
      n = write(s->stop[1], "x", 1);
    while (n < 0 && errno == EINTR);
    *released = 1;
    uint64_t serial = s->serial;
    /* Until its thread closed the listener and left the list. */
    for (;;) {
      struct server *t = servers;
      while (t != NULL && t->serial != serial)
        t = t->next;
      if (t == NULL)
        break;
      pthread_cond_wait(&servers_gone, &servers_lock);
    }
  }
  pthread_mutex_unlock(&servers_lock);
  memset(secret, 0, sizeof(secret));
  return RINGCC_SUCCESS;
}

/* Serves the rendezvous on listen_fd (taken over, closed on every path) from
 * a detached thread. */
static ringcc_result_t server_start(int listen_fd,
                                    const struct sockaddr_storage *bound,
                                    const uint8_t secret[SECRET_LEN],
                                    int64_t timeout_ms, char *err,
                                    size_t errlen) {
  struct server *s = calloc(1, sizeof(*s));
  pthread_attr_t attr;
  pthread_t tid;
  int rc;

  char what[128], a[80];
  snprintf(what, sizeof(what), "rendezvous %s",
           rcc_socket_addr_str(bound, a, sizeof(a)));
  if (s != NULL)
    s->gate = rcc_boot_gate_new(listen_fd, PURPOSE_RENDEZVOUS, HELLO_LEN,
                                secret, -1, what);
  if (s == NULL || s->gate == NULL) {
    free(s);
    close(listen_fd);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "bootstrap: out of memory for the rendezvous server");
  }
  s->listen_fd = listen_fd;
  s->stop[0] = s->stop[1] = -1;
  s->port = rcc_socket_addr_port(bound);
  memcpy(s->secret, secret, SECRET_LEN);
  if (pipe2(s->stop, O_CLOEXEC | O_NONBLOCK) != 0) {
    int e = errno;
    s->stop[0] = s->stop[1] = -1;
    server_free(s);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "bootstrap: pipe for the "
                    "rendezvous thread: %s", strerror(e));
  }
  int e = rcc_random_bytes(s->session, NONCE_LEN);
  if (e != 0) {
    server_free(s);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "bootstrap: getrandom "
                    "for the rendezvous's session nonce failed: %s",
                    strerror(e));
  }
  rcc_socket_addr_str(bound, s->where, sizeof(s->where));
  s->start_ns = rcc_now_ns();
  s->deadline_ns = rcc_deadline_after_ms(
      timeout_ms > 0 ? timeout_ms : DEFAULT_SERVER_TIMEOUT_MS);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&servers_lock);
  s->next = servers;
  s->serial = ++servers_started;
  servers = s;
  rc = pthread_create(&tid, &attr, server_main, s);
  if (rc != 0)
    servers = s->next;
  pthread_mutex_unlock(&servers_lock);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    server_free(s);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "bootstrap: cannot start the rendezvous thread: %s",
                    strerror(rc));
  }
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_bootstrap_new_id(ringcc_unique_id_t *id,
                                     const uint8_t *given_secret,
                                     int64_t timeout_ms, char *err,
                                     size_t errlen) {
  struct sockaddr_storage addr, bound;
  uint8_t secret[SECRET_LEN];
  char ifname[64] = "", a[80];
  const char *spec = rcc_getenv("RINGCC_SOCKET_IFNAME");
  int fd;
  ringcc_result_t r;

  rcc_log_init();
  if (id == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: the unique id pointer is NULL");
  r = rcc_socket_pick_address(spec, &addr, ifname, sizeof(ifname), err,
                              errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  if (given_secret != NULL)
    memcpy(secret, given_secret, SECRET_LEN);
  else if ((r = rcc_boot_make_secret(secret, err, errlen)) != RINGCC_SUCCESS)
    return r;
  r = rcc_socket_listen(&addr, &fd, &bound, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  rcc_boot_id_encode(id, &bound, secret);
  RCC_INFO(-1, "bootstrap: rendezvous listening on %s (interface %s%s%s)",
           rcc_socket_addr_str(&bound, a, sizeof(a)), ifname,
           spec ? ", RINGCC_SOCKET_IFNAME=" : "", spec ? spec : "");
  r = server_start(fd, &bound, secret, timeout_ms, err, errlen);
  memset(secret, 0, sizeof(secret));
  return r;
}

ringcc_result_t rcc_bootstrap_serve(const ringcc_unique_id_t *id,
                                    int listen_fd, int64_t timeout_ms,
                                    char *err, size_t errlen) {
  struct sockaddr_storage addr, bound;
  uint8_t secret[SECRET_LEN];
  char a[80];
  int fd = listen_fd;
  rcc_log_init();
  ringcc_result_t r = rcc_boot_id_decode(id, &addr, secret, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  if (listen_fd >= 0) {
    /* The launcher's listener, open since before the ranks started: nobody
     * else could take the port in between. */
    char why[RCC_ERRLEN];
    r = rcc_socket_adopt_listener(listen_fd, rcc_socket_addr_port(&addr),
                                  &bound, why, sizeof(why));
    if (r != RINGCC_SUCCESS)
      return rcc_errf(err, errlen, r, "bootstrap: cannot serve the rendezvous "
                      "on the inherited descriptor %d: %s", listen_fd, why);
    RCC_INFO(-1, "bootstrap: rendezvous on the launcher's listener %s "
             "(descriptor %d)", rcc_socket_addr_str(&bound, a, sizeof(a)),
             listen_fd);
    return server_start(fd, &bound, secret, timeout_ms, err, errlen);
  }
  char first[RCC_ERRLEN];
  r = rcc_socket_listen(&addr, &fd, &bound, first, sizeof(first));
  if (r != RINGCC_SUCCESS) {
    /* The advertised address may not be local (NAT, a name that resolves
     * elsewhere): listen on every address with the same port instead. */
    struct sockaddr_storage any;
    memset(&any, 0, sizeof(any));
    any.ss_family = addr.ss_family;
    rcc_socket_addr_set_port(&any, rcc_socket_addr_port(&addr));
    if (rcc_socket_listen(&any, &fd, &bound, NULL, 0) != RINGCC_SUCCESS)
      return rcc_errf(err, errlen, r, "bootstrap: cannot serve the "
                      "rendezvous: %s", first);
    RCC_INFO(-1, "bootstrap: %s; listening on %s instead", first,
             rcc_socket_addr_str(&bound, a, sizeof(a)));
  }
  RCC_INFO(-1, "bootstrap: rendezvous listening on %s",
           rcc_socket_addr_str(&bound, a, sizeof(a)));
  return server_start(fd, &bound, secret, timeout_ms, err, errlen);
}
