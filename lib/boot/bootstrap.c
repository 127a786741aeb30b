/*
 * bootstrap.c - rendezvous over TCP: the unique id, the rendezvous server, the
 * bootstrap ring, and allgather/barrier over that ring.
 *
 * How ranks meet:
 *   1. ringcc_get_unique_id (rcc_bootstrap_new_id) listens on an ephemeral
 *      port and serves the rendezvous from a detached thread. The id carries
 *      that address and a random 128-bit secret.
 *   2. Each rank connects to the rendezvous, learns from getsockname() which
 *      local address reaches it, opens its own listener there, and runs the
 *      handshake below, its hello (rank, nranks, listener address) in it.
 *   3. When all nranks arrived, the rendezvous sends every rank the table of
 *      listener addresses, with a session nonce and a tag, and exits.
 *   4. Each rank connects to rank+1's listener (the handshake again, with a
 *      ring hello) and accepts rank-1's connection: the bootstrap ring. Two
 *      ranks use two connections, one per direction; one rank uses none.
 *   5. The communicator's key is HMAC(secret, "communicator key" || session
 *      nonce): new for every rendezvous, known only to ranks that hold the
 *      secret (the network transport proves it on every connection).
 *
 * The handshake (challenge-response, both ways; the secret never travels):
 *   connector -> acceptor   open: "RCCA" u32, version u16, purpose u16,
 *                           nonce_c (16)                                = 24
 *   acceptor -> connector   challenge: "RCCB" u32, purpose u16, 0 u16,
 *                           nonce_a (16), HMAC(secret, "acceptor" ||
 *                           purpose || nonce_c || nonce_a) (32)          = 56
 *   the connector checks that proof, then
 *   connector -> acceptor   answer: HMAC(secret, "connector" || purpose ||
 *                           nonce_a || nonce_c || hello) (32), hello
 * HMAC is HMAC-SHA-256 (sha256.c). A stranger that accepts a rank's
 * connection (a squatter on the rendezvous port) cannot prove itself, and the
 * rank leaves having sent only its nonce; a stranger that connects cannot
 * answer; a proof seen on the wire is bound to nonces that are not reused.
 *
 * Wire format (integers big-endian; an address is 24 bytes: family u16 (4 or
 * 6), port u16, IPv6 scope id u32, address 16 bytes):
 *   unique id (128): magic "RCCI" u32, version u16, 0 u16, address (24),
 *                    secret (16), zeros (76), FNV-1a of bytes 0..123 u32.
 *   rank's hello:         "RCCH" u32, rank u32, nranks u32,
 *                         listener address (24)                     = 36
 *   rendezvous -> rank:   "RCCT" u32, status u32, nranks u32, session nonce
 *                         (16), then on status 0 nranks addresses, else
 *                         the reason as text, NUL-padded (200), then
 *                         HMAC(secret, "table" || purpose || nonce_c ||
 *                         nonce_a || all of that) (32)   = 28+24n+32 or 260
 *   ring hello:           "RCCR" u32, rank u32, nranks u32          = 12
 *   allgather step:       "RCCD" u32, call number u32, bytes u64, then the
 *                         record (bytes)
 *
 * A hello the rendezvous refuses (a rank number that already joined, an
 * nranks other than the first rank's, a rank out of range) means that the
 * ranks were started wrong: the communicator cannot form as meant, so the
 * rendezvous refuses every rank, those that joined and those still to come
 * (for FAILED_LINGER_NS), each with the same sentence naming the cause.
 *
 * Safety: every listener (the rendezvous, each rank's ring) holds its
 * connections in the listener gate (gate.h) until they complete the
 * handshake: at most MAX_PENDING, each read without waiting, each given
 * HELLO_TIMEOUT_NS; a challenged connection is never dropped to make room
 * for strangers, so a silent or babbling stranger never blocks or breaks
 * the real ranks. Sizes read off the wire are checked against what this
 * side expects before anything is allocated or read.
 *
 * Cost: allgather of n records of B bytes takes n-1 steps, each rank sending
 * and receiving (n-1)*B bytes in total (plus a 16-byte header per step). The
 * handshake adds one round trip and three HMACs per connection.
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
#include "log.h"
#include "sha256.h"
#include "socket.h"
#include "wire.h"

#define ID_MAGIC 0x52434349u    /* "RCCI" */
#define ID_VERSION 1u
#define OPEN_MAGIC 0x52434341u  /* "RCCA" */
#define CHAL_MAGIC 0x52434342u  /* "RCCB" */
#define HELLO_MAGIC 0x52434348u /* "RCCH" */
#define TABLE_MAGIC 0x52434354u /* "RCCT" */
#define RING_MAGIC 0x52434352u  /* "RCCR" */
#define DATA_MAGIC 0x52434344u  /* "RCCD" */
#define FAIL_MAGIC 0x52434346u  /* "RCCF": in place of a step header, a
                                   rank's failure (rcc_bootstrap_fail) */
#define FAIL_WHY_MAX 512        /* its sentence, with room for the NUL */
#define FAIL_SEND_NS (2 * 1000000000LL) /* passing one on */
#define HANDSHAKE_VERSION 2u    /* 1 sent the secret itself */

enum { PURPOSE_RENDEZVOUS = 1, PURPOSE_RING = 2 };
/* What each HMAC proves (a label per role, so that no proof can be played
 * back as another). */
#define LABEL_ACCEPTOR "ringcc handshake v2: acceptor"
#define LABEL_CONNECTOR "ringcc handshake v2: connector"
#define LABEL_TABLE "ringcc handshake v2: table"
#define LABEL_KEY "ringcc v2: communicator key"

#define SECRET_LEN 16
#define NONCE_LEN 16
#define PROOF_LEN RCC_SHA256_BYTES
#define WIRE_ADDR_LEN 24
#define ID_ADDR_OFF 8
#define ID_SECRET_OFF 32
#define ID_SUM_OFF 124
#define OPEN_LEN (8 + NONCE_LEN)
#define CHAL_LEN (8 + NONCE_LEN + PROOF_LEN)
#define HELLO_LEN (12 + WIRE_ADDR_LEN)
#define RING_HELLO_LEN 12
#define REPLY_LEN (12 + NONCE_LEN)
#define REFUSAL_LEN 200 /* the reason after a refusing reply */
#define DATA_HDR_LEN 16
_Static_assert(SECRET_LEN == RCC_BOOT_SECRET_BYTES &&
                   NONCE_LEN == RCC_BOOT_NONCE_BYTES &&
                   PROOF_LEN == RCC_BOOT_PROOF_BYTES &&
                   OPEN_LEN == RCC_BOOT_OPEN_BYTES &&
                   CHAL_LEN == RCC_BOOT_CHALLENGE_BYTES &&
                   WIRE_ADDR_LEN == RCC_BOOT_ADDR_BYTES &&
                   HELLO_LEN == RCC_BOOT_HELLO_BYTES &&
                   REPLY_LEN == RCC_BOOT_REPLY_BYTES &&
                   REFUSAL_LEN == RCC_BOOT_REFUSAL_BYTES &&
                   RING_HELLO_LEN == RCC_BOOT_RING_HELLO_BYTES &&
                   DATA_HDR_LEN == RCC_BOOT_DATA_HDR_BYTES &&
                   sizeof(ringcc_unique_id_t) == RCC_BOOT_ID_BYTES,
               "wire.h sizes");

#define MAX_NRANKS RCC_BOOT_MAX_NRANKS
#define MAX_PENDING 128 /* connections held that have not proven themselves */
#define HELLO_TIMEOUT_NS (5 * 1000000000LL)
#define ACCEPT_BACKOFF_NS (20 * 1000000LL) /* out of descriptors */
#define OPEN_RETRIES 3 /* a connection dropped unread is opened again */
/* A rank waits this long for the challenge: a rendezvous answers at once, so
 * silence means something else took the connection. */
#define CHALLENGE_TIMEOUT_NS (10 * 1000000000LL)
#define TABLE_SEND_TIMEOUT_NS (30 * 1000000000LL)
#define DEFAULT_SERVER_TIMEOUT_MS 600000
/* How long a rendezvous that refused the communicator stays to tell the
 * ranks still to come. */
#define FAILED_LINGER_NS (30 * 1000000000LL)
/* How long the second closer of a connection waits for the first's FIN
 * (rcc_socket_close_second): ranks leave together, within milliseconds. */
#define RING_CLOSE_WAIT_MS 200

/* Reply status from the rendezvous. */
enum {
  ST_OK = 0,
  ST_BAD_NRANKS = 1,
  ST_NRANKS_MISMATCH = 2,
  ST_BAD_RANK = 3,
  ST_DUP_RANK = 4,
  ST_BAD_ADDR = 5,
  ST_RELEASED = 6, /* the id was released before every rank arrived */
};

struct rcc_bootstrap {
  int rank, nranks;
  int pid;              /* the process that connected the ring */
  int next_fd, prev_fd; /* -1 when nranks == 1 */
  uint32_t calls;       /* allgather/barrier calls so far: checked per step */
  int lost;             /* a rank known to have left the ring, or -1 */
  int fail_rank;        /* the failure passed along the ring, or -1 */
  int32_t fail_code;
  char fail_why[FAIL_WHY_MAX];
  struct sockaddr_storage root;
  struct sockaddr_storage *peers; /* every rank's bootstrap listener */
  uint8_t key[RCC_BOOT_KEY_BYTES]; /* the communicator's (rcc_bootstrap_key) */
};

/* ---- bytes ----------------------------------------------------------------- */

static uint32_t fnv1a(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 16777619u;
  return h;
}

/* HMAC(secret, label || purpose || a || b || extra): a handshake's proofs
 * and the table's tag. */
static void mac(const uint8_t secret[SECRET_LEN], const char *label,
                uint32_t purpose, const uint8_t a[NONCE_LEN],
                const uint8_t b[NONCE_LEN], const uint8_t *extra,
                size_t extra_len, uint8_t out[PROOF_LEN]) {
  struct rcc_hmac m;
  uint8_t p[2];
  rcc_put_be16(p, purpose);
  rcc_hmac_init(&m, secret, SECRET_LEN);
  rcc_hmac_update(&m, label, strlen(label) + 1);
  rcc_hmac_update(&m, p, sizeof(p));
  rcc_hmac_update(&m, a, NONCE_LEN);
  rcc_hmac_update(&m, b, NONCE_LEN);
  if (extra_len > 0)
    rcc_hmac_update(&m, extra, extra_len);
  rcc_hmac_final(&m, out);
}

int rcc_bootstrap_open_parse(const uint8_t *in, size_t len, uint32_t purpose,
                             uint8_t *nonce, char *why, size_t whylen) {
  if (len < OPEN_LEN || rcc_get_be32(in) != OPEN_MAGIC) {
    snprintf(why, whylen, "not a ringcc handshake (magic 0x%08x)",
             len < 4 ? 0u : (unsigned)rcc_get_be32(in));
    return -1;
  }
  if (rcc_get_be16(in + 4) != HANDSHAKE_VERSION) {
    snprintf(why, whylen, "handshake version %u, this library speaks %u "
             "(another ringcc version?)", (unsigned)rcc_get_be16(in + 4),
             HANDSHAKE_VERSION);
    return -1;
  }
  if (rcc_get_be16(in + 6) != purpose) {
    snprintf(why, whylen, "a handshake for purpose %u here, which serves %u",
             (unsigned)rcc_get_be16(in + 6), (unsigned)purpose);
    return -1;
  }
  memcpy(nonce, in + 8, NONCE_LEN);
  return 0;
}

int rcc_bootstrap_challenge_parse(const uint8_t *in, size_t len,
                                  uint32_t purpose, uint8_t *nonce,
                                  uint8_t *proof) {
  if (len < CHAL_LEN || rcc_get_be32(in) != CHAL_MAGIC ||
      rcc_get_be16(in + 4) != purpose || rcc_get_be16(in + 6) != 0)
    return -1;
  memcpy(nonce, in + 8, NONCE_LEN);
  memcpy(proof, in + 8 + NONCE_LEN, PROOF_LEN);
  return 0;
}

static void addr_to_wire(const struct sockaddr_storage *a, uint8_t *w) {
  memset(w, 0, WIRE_ADDR_LEN);
  if (a == NULL)
    return;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)a;
    rcc_put_be16(w, 4);
    rcc_put_be16(w + 2, ntohs(in->sin_port));
    memcpy(w + 8, &in->sin_addr, 4);
  } else if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
    rcc_put_be16(w, 6);
    rcc_put_be16(w + 2, ntohs(in6->sin6_port));
    rcc_put_be32(w + 4, in6->sin6_scope_id);
    memcpy(w + 8, &in6->sin6_addr, 16);
  }
}

/* 0, or -1 when the family is not 4 or 6 or the port is 0. */
static int addr_from_wire(const uint8_t *w, struct sockaddr_storage *a) {
  memset(a, 0, sizeof(*a));
  if (rcc_get_be16(w + 2) == 0)
    return -1;
  if (rcc_get_be16(w) == 4) {
    struct sockaddr_in *in = (struct sockaddr_in *)a;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)rcc_get_be16(w + 2));
    memcpy(&in->sin_addr, w + 8, 4);
    return 0;
  }
  if (rcc_get_be16(w) == 6) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)a;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)rcc_get_be16(w + 2));
    in6->sin6_scope_id = rcc_get_be32(w + 4);
    memcpy(&in6->sin6_addr, w + 8, 16);
    return 0;
  }
  return -1;
}

/* ---- the unique id --------------------------------------------------------- */

static void id_encode(ringcc_unique_id_t *id,
                      const struct sockaddr_storage *root,
                      const uint8_t secret[SECRET_LEN]) {
  uint8_t *p = (uint8_t *)id->internal;
  memset(p, 0, sizeof(id->internal));
  rcc_put_be32(p, ID_MAGIC);
  rcc_put_be16(p + 4, ID_VERSION);
  addr_to_wire(root, p + ID_ADDR_OFF);
  memcpy(p + ID_SECRET_OFF, secret, SECRET_LEN);
  rcc_put_be32(p + ID_SUM_OFF, fnv1a(p, ID_SUM_OFF));
}

ringcc_result_t rcc_bootstrap_id_decode(const void *id, size_t len,
                                        struct sockaddr_storage *root,
                                        uint8_t *secret, char *err,
                                        size_t errlen) {
  struct sockaddr_storage tmp;
  const uint8_t *p = id;
  if (id == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is NULL");
  if (len < RCC_BOOT_ID_BYTES)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is truncated: %zu of %d bytes", len,
                    RCC_BOOT_ID_BYTES);
  if (rcc_get_be32(p) != ID_MAGIC)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is malformed: bad magic 0x%08x (not made by "
                    "ringcc_get_unique_id, or not copied whole)", rcc_get_be32(p));
  if (rcc_get_be16(p + 4) != ID_VERSION)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is malformed: format version %u, this library "
                    "reads version %u", rcc_get_be16(p + 4), ID_VERSION);
  if (rcc_get_be32(p + ID_SUM_OFF) != fnv1a(p, ID_SUM_OFF))
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is malformed: bad checksum (the id was "
                    "corrupted or truncated on its way to this rank)");
  if (addr_from_wire(p + ID_ADDR_OFF, root ? root : &tmp) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is malformed: bad address (family %u, port "
                    "%u)", rcc_get_be16(p + ID_ADDR_OFF), rcc_get_be16(p + ID_ADDR_OFF + 2));
  if (secret != NULL)
    memcpy(secret, p + ID_SECRET_OFF, SECRET_LEN);
  return RINGCC_SUCCESS;
}

static ringcc_result_t id_decode(const ringcc_unique_id_t *id,
                                 struct sockaddr_storage *root,
                                 uint8_t secret[SECRET_LEN], char *err,
                                 size_t errlen) {
  return rcc_bootstrap_id_decode(id ? id->internal : NULL, sizeof(*id), root,
                                 secret, err, errlen);
}

ringcc_result_t rcc_bootstrap_check_id(const ringcc_unique_id_t *id,
                                       char *err, size_t errlen) {
  return id_decode(id, NULL, NULL, err, errlen);
}

static ringcc_result_t make_secret(uint8_t secret[SECRET_LEN], char *err,
                                   size_t errlen) {
  int e = rcc_random_bytes(secret, SECRET_LEN);
  if (e != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "bootstrap: getrandom for the id's secret failed: %s",
                    strerror(e));
  return RINGCC_SUCCESS;
}

void rcc_bootstrap_id_set_secret(ringcc_unique_id_t *id,
                                 const uint8_t secret[16]) {
  uint8_t *p = (uint8_t *)id->internal;
  memcpy(p + ID_SECRET_OFF, secret, SECRET_LEN);
  rcc_put_be32(p + ID_SUM_OFF, fnv1a(p, ID_SUM_OFF));
}

ringcc_result_t rcc_bootstrap_id_from_root(ringcc_unique_id_t *id,
                                           const char *host_port,
                                           const uint8_t secret[16],
                                           char *err, size_t errlen) {
  struct sockaddr_storage root;
  uint8_t zero[SECRET_LEN] = {0};
  if (id == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: id_from_root needs an id to fill");
  ringcc_result_t r = rcc_socket_parse_host_port(host_port, &root, err,
                                                 errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  id_encode(id, &root, secret != NULL ? secret : zero);
  return RINGCC_SUCCESS;
}

/* ---- the gate: the handshake as the listener gate's check ---------------- */

/* A connection's handshake so far, on the acceptor's side: the state of the
 * check in the listener gate (gate.h), which holds, reads and drops the
 * connections that have not proven themselves. */
struct handshake {
  int answering; /* 0: reading the opening; 1: challenged, reading the answer */
  size_t got;
  uint8_t nonce_c[NONCE_LEN], nonce_a[NONCE_LEN];
  uint8_t buf[PROOF_LEN + HELLO_LEN]; /* the opening, then proof + hello */
};

struct gate {
  struct rcc_gate *gate;
  uint32_t purpose;
  size_t hdr_len; /* the hello after the proof: at most HELLO_LEN */
  uint8_t secret[SECRET_LEN];
};

/* What a connection that passed the gate brings. */
struct passed {
  int fd;
  struct sockaddr_storage peer;
  uint8_t nonce_c[NONCE_LEN], nonce_a[NONCE_LEN];
  uint8_t hello[HELLO_LEN];
};

static void gate_free(struct gate *g) {
  if (g == NULL)
    return;
  rcc_gate_free(g->gate);
  memset(g->secret, 0, sizeof(g->secret));
  free(g);
}

/* The opening is in: answers it with the challenge. 0, or -1 with why. */
static int gate_challenge(const struct gate *g, int fd, struct handshake *h,
                          char *why, size_t whylen) {
  uint8_t chal[CHAL_LEN];
  if (rcc_bootstrap_open_parse(h->buf, OPEN_LEN, g->purpose, h->nonce_c, why,
                               whylen) != 0)
    return -1;
  if (rcc_random_bytes(h->nonce_a, NONCE_LEN) != 0) {
    snprintf(why, whylen, "getrandom for a nonce failed");
    return -1;
  }
  rcc_put_be32(chal, CHAL_MAGIC);
  rcc_put_be16(chal + 4, g->purpose);
  rcc_put_be16(chal + 6, 0);
  memcpy(chal + 8, h->nonce_a, NONCE_LEN);
  mac(g->secret, LABEL_ACCEPTOR, g->purpose, h->nonce_c, h->nonce_a, NULL, 0,
      chal + 8 + NONCE_LEN);
  /* A fresh connection's send buffer holds 56 bytes: all go at once. */
  ssize_t n;
  do
    n = send(fd, chal, sizeof(chal), MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(chal)) {
    snprintf(why, whylen, "%s",
             n < 0 ? strerror(errno) : "the challenge did not fit");
    return -1;
  }
  h->answering = 1;
  h->got = 0;
  return 0;
}

/* The gate's check: reads what the connection has sent; challenges a whole
 * opening (the connection is then started: the rank counts itself
 * connected once it answered); proven when the answer holds the right
 * proof and a whole hello. */
static enum rcc_gate_step gate_check(void *arg, struct rcc_gate_conn *c,
                                     char *why, size_t whylen) {
  const struct gate *g = arg;
  struct handshake *h = c->state;
  for (;;) {
    size_t want = h->answering ? PROOF_LEN + g->hdr_len : OPEN_LEN;
    while (h->got < want) {
      ssize_t n = recv(c->fd, h->buf + h->got, want - h->got, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return h->answering ? RCC_GATE_STARTED : RCC_GATE_WAIT;
      if (n <= 0) {
        snprintf(why, whylen, "%s", n < 0 ? strerror(errno)
                                    : h->answering ? "closed before answering "
                                                     "the challenge (another "
                                                     "id's rank?)"
                                                   : "closed before its "
                                                     "handshake");
        return RCC_GATE_DROP;
      }
      h->got += (size_t)n;
    }
    if (h->answering)
      break;
    if (gate_challenge(g, c->fd, h, why, whylen) != 0)
      return RCC_GATE_DROP;
  }
  uint8_t proof[PROOF_LEN];
  mac(g->secret, LABEL_CONNECTOR, g->purpose, h->nonce_a, h->nonce_c,
      h->buf + PROOF_LEN, g->hdr_len, proof);
  if (!rcc_equal_ct(proof, h->buf, PROOF_LEN)) {
    snprintf(why, whylen, "it could not prove that it knows the secret (a "
             "stranger, or a rank given another id)");
    return RCC_GATE_REFUSE;
  }
  return RCC_GATE_PROVEN;
}

/* Hands out the next connection that proved itself with a whole hello.
 * Strangers are dropped on the way. With extra_fd >= 0, returns with
 * out->fd == -1 as soon as that descriptor is readable (or closed) instead.
 * RINGCC_ERR_TIMEOUT at deadline_ns. */
static ringcc_result_t gate_next(struct gate *g, int64_t deadline_ns,
                                 int extra_fd, struct passed *out) {
  struct rcc_gate_passed p;
  struct handshake h;
  char err[RCC_ERRLEN];
  ringcc_result_t r = rcc_gate_next(g->gate, deadline_ns, extra_fd, &p, &h,
                                    err, sizeof(err));
  if (r != RINGCC_SUCCESS) {
    if (r != RINGCC_ERR_TIMEOUT)
      RCC_WARN(-1, "bootstrap: %s", err);
    return r;
  }
  out->fd = p.fd;
  if (p.fd >= 0) {
    out->peer = p.peer;
    memcpy(out->nonce_c, h.nonce_c, NONCE_LEN);
    memcpy(out->nonce_a, h.nonce_a, NONCE_LEN);
    memcpy(out->hello, h.buf + PROOF_LEN, g->hdr_len);
  }
  memset(&h, 0, sizeof(h));
  return RINGCC_SUCCESS;
}

static struct gate *gate_new(int listen_fd, uint32_t purpose, size_t hdr_len,
                             const uint8_t secret[SECRET_LEN], int log_rank,
                             const char *what) {
  struct gate *g = calloc(1, sizeof(*g));
  char name[160];
  if (g == NULL)
    return NULL;
  g->purpose = purpose;
  g->hdr_len = hdr_len;
  memcpy(g->secret, secret, SECRET_LEN);
  snprintf(name, sizeof(name), "bootstrap: %s", what);
  struct rcc_gate_config cfg = {
      .what = name, .log_rank = log_rank, .max_held = MAX_PENDING,
      .expire_ns = HELLO_TIMEOUT_NS, .backoff_ns = ACCEPT_BACKOFF_NS,
      .state_bytes = sizeof(struct handshake), .check = gate_check, .arg = g};
  if ((g->gate = rcc_gate_new(listen_fd, &cfg)) == NULL) {
    gate_free(g);
    return NULL;
  }
  return g;
}

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
  mac(s->secret, LABEL_TABLE, PURPOSE_RENDEZVOUS, hs->nonce_c, hs->nonce_a,
      msg, len, tag);
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
  if (nranks > 1 && addr_from_wire(in + 12, &out->listener) != 0) {
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
        addr_from_wire(s->table + REPLY_LEN + (size_t)WIRE_ADDR_LEN * rank,
                       &was) == 0)
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
  gate_free(s->gate);
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
    if (gate_next(s->gate, s->deadline_ns, s->stop[0], &hs) != RINGCC_SUCCESS)
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
  ringcc_result_t r = id_decode(id, &addr, secret, err, errlen);
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
    s->gate = gate_new(listen_fd, PURPOSE_RENDEZVOUS, HELLO_LEN, secret, -1,
                       what);
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
  else if ((r = make_secret(secret, err, errlen)) != RINGCC_SUCCESS)
    return r;
  r = rcc_socket_listen(&addr, &fd, &bound, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  id_encode(id, &bound, secret);
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
  ringcc_result_t r = id_decode(id, &addr, secret, err, errlen);
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

/* ---- joining: the rank side ----------------------------------------------- */

static long long ms_since(int64_t start_ns) {
  return (long long)((rcc_now_ns() - start_ns) / 1000000);
}

static const char *status_str(uint32_t status) {
  switch (status) {
  case ST_BAD_NRANKS:
    return "nranks out of range";
  case ST_NRANKS_MISMATCH:
    return "other ranks gave a different nranks";
  case ST_BAD_RANK:
    return "rank out of range";
  case ST_DUP_RANK:
    return "another rank already joined with this rank number";
  case ST_BAD_ADDR:
    return "bad listener address";
  case ST_RELEASED:
    return "the id was released";
  default:
    return "unknown status";
  }
}

ringcc_result_t rcc_bootstrap_reply_check(const uint8_t *reply, size_t len,
                                          int rank, int nranks,
                                          const char *where, char *err,
                                          size_t errlen) {
  if (len < REPLY_LEN || rcc_get_be32(reply) != TABLE_MAGIC)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: "
                    "the rendezvous at %s answered garbage (magic 0x%08x)",
                    rank, where, len < 4 ? 0 : rcc_get_be32(reply));
  if (rcc_get_be32(reply + 4) != ST_OK && len >= REPLY_LEN + REFUSAL_LEN) {
    char why[REFUSAL_LEN];
    size_t n = 0;
    for (; n + 1 < REFUSAL_LEN && reply[REPLY_LEN + n] != 0; n++) {
      uint8_t c = reply[REPLY_LEN + n];
      why[n] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    why[n] = 0;
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: rank %d of %d: the rendezvous at %s refused "
                    "the communicator: %s (%s)", rank, nranks, where, why,
                    status_str(rcc_get_be32(reply + 4)));
  }
  if (rcc_get_be32(reply + 4) != ST_OK)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: rank %d of %d refused by the rendezvous at %s: "
                    "%s (the rendezvous has nranks %u)", rank, nranks,
                    where, status_str(rcc_get_be32(reply + 4)), rcc_get_be32(reply + 8));
  if (rcc_get_be32(reply + 8) != (uint32_t)nranks)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: "
                    "the rendezvous at %s sent a table for %u ranks, not %d",
                    rank, where, rcc_get_be32(reply + 8), nranks);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_bootstrap_table_decode(const uint8_t *table, size_t len,
                                           int nranks,
                                           struct sockaddr_storage *peers,
                                           char *err, size_t errlen) {
  if (nranks < 1 || len / WIRE_ADDR_LEN < (size_t)nranks)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "the table of %d ranks "
                    "needs %zu bytes, not %zu", nranks,
                    (size_t)WIRE_ADDR_LEN * (nranks < 1 ? 0 : (size_t)nranks),
                    len);
  for (int i = 0; i < nranks && nranks > 1; i++)
    if (addr_from_wire(table + (size_t)WIRE_ADDR_LEN * i, &peers[i]) != 0)
      return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                      "the entry of rank %d is not an address", i);
  return RINGCC_SUCCESS;
}

/* The connector's side of the handshake (see the top), in two halves so that
 * the bootstrap ring can serve its own listener in between: hs_open sends the
 * opening, hs_answer checks the acceptor's challenge and proof and only then
 * proves that this rank knows the secret, sending hello with the proof. whom
 * names the acceptor for messages ("the rendezvous at 1.2.3.4:5"). */
struct connector {
  int fd, rank;
  uint32_t purpose;
  const char *whom;
  uint8_t nonce_c[NONCE_LEN], nonce_a[NONCE_LEN];
};

static ringcc_result_t hs_open(struct connector *c, int64_t deadline_ns,
                               char *err, size_t errlen) {
  uint8_t open_msg[OPEN_LEN];
  char msg[RCC_ERRLEN];
  int e = rcc_random_bytes(c->nonce_c, NONCE_LEN);
  if (e != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "bootstrap: rank %d: "
                    "getrandom for a nonce failed: %s", c->rank, strerror(e));
  rcc_put_be32(open_msg, OPEN_MAGIC);
  rcc_put_be16(open_msg + 4, HANDSHAKE_VERSION);
  rcc_put_be16(open_msg + 6, c->purpose);
  memcpy(open_msg + 8, c->nonce_c, NONCE_LEN);
  ringcc_result_t r = rcc_socket_send_all(c->fd, open_msg, sizeof(open_msg),
                                          deadline_ns, msg, sizeof(msg));
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r == RINGCC_ERR_PEER_FAILED
                                     ? RINGCC_ERR_NETWORK : r,
                    "bootstrap: rank %d: opening the handshake with %s: %s",
                    c->rank, c->whom, msg);
  return RINGCC_SUCCESS;
}

/* hs_open, and where the listener closed the connection before it could
 * read the opening (its gate dropped it as a silent stranger while this
 * process did not run, stopped after its connect: gate.h), a new
 * connection to addr and the opening again; the listener never saw it. */
static ringcc_result_t hs_open_at(struct connector *c,
                                  const struct sockaddr_storage *addr,
                                  int64_t deadline_ns, char *err,
                                  size_t errlen) {
  for (int tries = 0;; tries++) {
    ringcc_result_t r = hs_open(c, deadline_ns, err, errlen);
    if (r != RINGCC_SUCCESS || tries == OPEN_RETRIES ||
        !rcc_gate_dropped_unread(c->fd))
      return r;
    RCC_INFO(c->rank, "bootstrap: rank %d: %s closed the connection before "
             "it read the opening (this process did not run for a while?): "
             "connecting again", c->rank, c->whom);
    char msg[RCC_ERRLEN];
    close(c->fd);
    c->fd = -1;
    r = rcc_socket_connect(addr, deadline_ns, &c->fd, msg, sizeof(msg));
    if (r != RINGCC_SUCCESS)
      return rcc_errf(err, errlen, r, "bootstrap: rank %d: connecting again "
                      "to %s: %s", c->rank, c->whom, msg);
  }
}

static ringcc_result_t hs_answer(struct connector *c,
                                 const uint8_t chal[CHAL_LEN],
                                 const uint8_t secret[SECRET_LEN],
                                 const uint8_t *hello, size_t hello_len,
                                 int64_t deadline_ns, char *err,
                                 size_t errlen) {
  uint8_t proof[PROOF_LEN], want[PROOF_LEN], answer[PROOF_LEN + HELLO_LEN];
  char msg[RCC_ERRLEN];
  if (rcc_bootstrap_challenge_parse(chal, CHAL_LEN, c->purpose, c->nonce_a,
                                    proof) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: %s "
                    "answered the handshake with garbage (magic 0x%08x): not "
                    "a ringcc %s, or another version", c->rank, c->whom,
                    rcc_get_be32(chal),
                    c->purpose == PURPOSE_RING ? "rank" : "rendezvous");
  mac(secret, LABEL_ACCEPTOR, c->purpose, c->nonce_c, c->nonce_a, NULL, 0,
      want);
  if (!rcc_equal_ct(want, proof, PROOF_LEN))
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: %s "
                    "could not prove that it knows this id's secret: a wrong "
                    "secret (the ranks were given different ids), or a "
                    "stranger listening on that port; this rank sent it "
                    "nothing secret", c->rank, c->whom);
  mac(secret, LABEL_CONNECTOR, c->purpose, c->nonce_a, c->nonce_c, hello,
      hello_len, answer);
  memcpy(answer + PROOF_LEN, hello, hello_len);
  ringcc_result_t r = rcc_socket_send_all(c->fd, answer, PROOF_LEN + hello_len,
                                          deadline_ns, msg, sizeof(msg));
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r == RINGCC_ERR_PEER_FAILED
                                     ? RINGCC_ERR_NETWORK : r,
                    "bootstrap: rank %d: sending its hello to %s: %s", c->rank,
                    c->whom, msg);
  return RINGCC_SUCCESS;
}

/* Words a failed wait for the challenge. */
static ringcc_result_t hs_wait_error(const struct connector *c,
                                     ringcc_result_t r, int short_wait,
                                     const char *msg, char *err,
                                     size_t errlen) {
  if (r == RINGCC_ERR_TIMEOUT && short_wait)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: %s "
                    "accepted the connection but did not answer the handshake "
                    "within %lld s (is something other than ringcc listening "
                    "there?)", c->rank, c->whom,
                    CHALLENGE_TIMEOUT_NS / 1000000000LL);
  if (r == RINGCC_ERR_PEER_FAILED)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: %s "
                    "closed the connection during the handshake (it timed out "
                    "or already completed, or it is not ringcc)", c->rank,
                    c->whom);
  return rcc_errf(err, errlen, r, "bootstrap: rank %d: waiting for the "
                  "handshake of %s: %s", c->rank, c->whom, msg);
}

/* Receives the rendezvous's reply, the table and its tag into b->peers, and
 * derives the communicator's key from the session nonce. */
static ringcc_result_t recv_table(struct rcc_bootstrap *b, int fd,
                                  const uint8_t secret[SECRET_LEN],
                                  const uint8_t nonces[2 * NONCE_LEN],
                                  int64_t start, int64_t deadline_ns,
                                  char *err, size_t errlen) {
  uint8_t reply[REPLY_LEN];
  char msg[RCC_ERRLEN], where[80];
  ringcc_result_t r;
  rcc_socket_addr_str(&b->root, where, sizeof(where));

  r = rcc_socket_recv_all(fd, reply, sizeof(reply), deadline_ns, msg,
                          sizeof(msg));
  if (r == RINGCC_ERR_TIMEOUT)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d timed out after %lld "
                    "ms waiting for the rendezvous at %s: not all %d ranks "
                    "arrived (were all started, with this id?)", b->rank,
                    ms_since(start), where, b->nranks);
  if (r == RINGCC_ERR_PEER_FAILED)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "bootstrap: rank %d: "
                    "the rendezvous at %s closed the connection (wrong secret, "
                    "or the rendezvous timed out or already completed)",
                    b->rank, where);
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d: waiting for the "
                    "rendezvous at %s: %s", b->rank, where, msg);
  if (rcc_get_be32(reply) != TABLE_MAGIC)
    return rcc_bootstrap_reply_check(reply, sizeof(reply), b->rank, b->nranks,
                                     where, err, errlen);
  /* The table follows only a success for this nranks, the reason a
   * refusal; the tag always. */
  int has_table = rcc_get_be32(reply + 4) == ST_OK &&
                  rcc_get_be32(reply + 8) == (uint32_t)b->nranks;
  size_t tlen = has_table ? (size_t)WIRE_ADDR_LEN * b->nranks
                : rcc_get_be32(reply + 4) != ST_OK ? REFUSAL_LEN : 0;
  uint8_t *all = malloc(REPLY_LEN + tlen + PROOF_LEN);
  b->peers = calloc((size_t)b->nranks, sizeof(*b->peers));
  if (all == NULL || b->peers == NULL) {
    free(all);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "bootstrap: rank "
                    "%d: out of memory for the table of %d ranks", b->rank,
                    b->nranks);
  }
  memcpy(all, reply, REPLY_LEN);
  r = rcc_socket_recv_all(fd, all + REPLY_LEN, tlen + PROOF_LEN, deadline_ns,
                          msg, sizeof(msg));
  uint8_t tag[PROOF_LEN];
  if (r == RINGCC_SUCCESS) {
    mac(secret, LABEL_TABLE, PURPOSE_RENDEZVOUS, nonces, nonces + NONCE_LEN,
        all, REPLY_LEN + tlen, tag);
    if (!rcc_equal_ct(tag, all + REPLY_LEN + tlen, PROOF_LEN))
      r = rcc_errf(msg, sizeof(msg), RINGCC_ERR_NETWORK, "its tag does not "
                   "match (the reply was changed on its way)");
  }
  if (r == RINGCC_SUCCESS)
    r = rcc_bootstrap_reply_check(all, REPLY_LEN + tlen, b->rank, b->nranks,
                                  where, msg, sizeof(msg));
  if (r == RINGCC_SUCCESS)
    r = rcc_bootstrap_table_decode(all + REPLY_LEN, tlen, b->nranks, b->peers,
                                   msg, sizeof(msg));
  free(all);
  if (r == RINGCC_ERR_INVALID_ARGUMENT) /* refused: the message says why */
    return rcc_errf(err, errlen, r, "%s", msg);
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d: receiving the table "
                    "of ranks from the rendezvous at %s: %s", b->rank, where,
                    msg);
  /* The communicator's key: fresh for every rendezvous, never on the wire. */
  struct rcc_hmac m;
  rcc_hmac_init(&m, secret, SECRET_LEN);
  rcc_hmac_update(&m, LABEL_KEY, sizeof(LABEL_KEY));
  rcc_hmac_update(&m, reply + 12, NONCE_LEN);
  rcc_hmac_final(&m, b->key);
  return RINGCC_SUCCESS;
}

/* Meets the others at the rendezvous; *listen_fd gets this rank's listener
 * (n > 1), opened on the local address that reaches the rendezvous. */
static ringcc_result_t join_rendezvous(struct rcc_bootstrap *b,
                                       const uint8_t secret[SECRET_LEN],
                                       int64_t deadline_ns, int *listen_fd,
                                       char *err, size_t errlen) {
  uint8_t hello[HELLO_LEN], nonces[2 * NONCE_LEN];
  struct sockaddr_storage local, bound;
  socklen_t llen = sizeof(local);
  char msg[RCC_ERRLEN], where[80], whom[120];
  int64_t start = rcc_now_ns();
  int fd;
  ringcc_result_t r;

  rcc_socket_addr_str(&b->root, where, sizeof(where));
  snprintf(whom, sizeof(whom), "the rendezvous at %s", where);
  r = rcc_socket_connect(&b->root, deadline_ns, &fd, msg, sizeof(msg));
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d could not reach the "
                    "rendezvous: %s; is the process that made the id still "
                    "running, and its address reachable from here?", b->rank,
                    msg);
  memset(&bound, 0, sizeof(bound));
  if (b->nranks > 1) {
    memset(&local, 0, sizeof(local));
    if (getsockname(fd, (struct sockaddr *)&local, &llen) != 0) {
      r = rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "bootstrap: rank %d: "
                   "getsockname of the connection to %s: %s", b->rank, where,
                   strerror(errno));
      close(fd);
      return r;
    }
    rcc_socket_addr_set_port(&local, 0);
    r = rcc_socket_listen(&local, listen_fd, &bound, msg, sizeof(msg));
    if (r != RINGCC_SUCCESS) {
      close(fd);
      return rcc_errf(err, errlen, r, "bootstrap: rank %d: %s", b->rank, msg);
    }
  }
  rcc_put_be32(hello, HELLO_MAGIC);
  rcc_put_be32(hello + 4, (uint32_t)b->rank);
  rcc_put_be32(hello + 8, (uint32_t)b->nranks);
  addr_to_wire(b->nranks > 1 ? &bound : NULL, hello + 12);
  struct connector c = {.fd = fd, .rank = b->rank,
                        .purpose = PURPOSE_RENDEZVOUS, .whom = whom};
  r = hs_open_at(&c, &b->root, deadline_ns, err, errlen);
  fd = c.fd;
  if (r == RINGCC_SUCCESS) {
    uint8_t chal[CHAL_LEN];
    int64_t chal_deadline = rcc_now_ns() + CHALLENGE_TIMEOUT_NS;
    int short_wait = chal_deadline < deadline_ns;
    r = rcc_socket_recv_all(fd, chal, sizeof(chal),
                            short_wait ? chal_deadline : deadline_ns, msg,
                            sizeof(msg));
    if (r != RINGCC_SUCCESS)
      r = hs_wait_error(&c, r, short_wait, msg, err, errlen);
    else
      r = hs_answer(&c, chal, secret, hello, sizeof(hello), deadline_ns, err,
                    errlen);
  }
  memcpy(nonces, c.nonce_c, NONCE_LEN);
  memcpy(nonces + NONCE_LEN, c.nonce_a, NONCE_LEN);
  if (r == RINGCC_SUCCESS)
    r = recv_table(b, fd, secret, nonces, start, deadline_ns, err, errlen);
  /* The rendezvous closes first, once every rank has its table. */
  if (r == RINGCC_SUCCESS)
    rcc_socket_close_second(fd, RING_CLOSE_WAIT_MS);
  else
    close(fd);
  return r;
}

int rcc_bootstrap_ring_hello_ok(const uint8_t *in, size_t len, int prev,
                                int nranks) {
  return len >= RING_HELLO_LEN && rcc_get_be32(in) == RING_MAGIC &&
         rcc_get_be32(in + 4) == (uint32_t)prev && rcc_get_be32(in + 8) == (uint32_t)nranks;
}

/* Connects to the next rank and accepts the previous one. */
static ringcc_result_t connect_ring(struct rcc_bootstrap *b,
                                    const uint8_t secret[SECRET_LEN],
                                    int listen_fd, int64_t deadline_ns,
                                    char *err, size_t errlen) {
  int next = (b->rank + 1) % b->nranks;
  int prev = (b->rank - 1 + b->nranks) % b->nranks;
  char msg[RCC_ERRLEN], na[80], pa[80], whom[160];
  uint8_t hello[RING_HELLO_LEN];
  int64_t start = rcc_now_ns();
  ringcc_result_t r;

  rcc_socket_addr_str(&b->peers[next], na, sizeof(na));
  rcc_socket_addr_str(&b->peers[prev], pa, sizeof(pa));
  snprintf(whom, sizeof(whom), "rank %d's bootstrap listener at %s", next, na);
  r = rcc_socket_connect(&b->peers[next], deadline_ns, &b->next_fd, msg,
                         sizeof(msg));
  if (r != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d could not connect to "
                    "rank %d for the bootstrap ring: %s", b->rank, next, msg);

  char what[64];
  snprintf(what, sizeof(what), "rank %d's bootstrap ring", b->rank);
  struct gate *g = gate_new(listen_fd, PURPOSE_RING, RING_HELLO_LEN, secret,
                            b->rank, what);
  if (g == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "bootstrap: rank %d: out of memory", b->rank);
  /* Both halves at once: every rank waits for its next rank's challenge
   * while its own gate challenges the previous rank, so no rank waits for
   * one that waits in turn. */
  struct connector c = {.fd = b->next_fd, .rank = b->rank,
                        .purpose = PURPOSE_RING, .whom = whom};
  uint8_t chal[CHAL_LEN];
  size_t chal_got = 0;
  int64_t chal_deadline = rcc_now_ns() + CHALLENGE_TIMEOUT_NS;
  int answered = 0;
  rcc_put_be32(hello, RING_MAGIC);
  rcc_put_be32(hello + 4, (uint32_t)b->rank);
  rcc_put_be32(hello + 8, (uint32_t)b->nranks);
  r = hs_open_at(&c, &b->peers[next], deadline_ns, err, errlen);
  b->next_fd = c.fd;
  while (r == RINGCC_SUCCESS && (!answered || b->prev_fd < 0)) {
    struct passed in;
    int short_wait = !answered && chal_deadline < deadline_ns;
    if (gate_next(g, short_wait ? chal_deadline : deadline_ns,
                  answered ? -1 : b->next_fd, &in) != RINGCC_SUCCESS) {
      if (!answered)
        r = hs_wait_error(&c, RINGCC_ERR_TIMEOUT, short_wait, "timed out",
                          err, errlen);
      else
        r = rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT, "bootstrap: rank %d "
                     "timed out after %lld ms waiting for rank %d (%s) to "
                     "connect (bootstrap ring)", b->rank, ms_since(start),
                     prev, pa);
      break;
    }
    if (in.fd < 0) { /* the next rank's challenge is arriving */
      ssize_t n = recv(b->next_fd, chal + chal_got, CHAL_LEN - chal_got,
                       MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        continue;
      if (n <= 0) {
        r = hs_wait_error(&c, n == 0 ? RINGCC_ERR_PEER_FAILED
                                     : RINGCC_ERR_NETWORK,
                          0, strerror(errno), err, errlen);
        break;
      }
      chal_got += (size_t)n;
      if (chal_got == CHAL_LEN) {
        r = hs_answer(&c, chal, secret, hello, sizeof(hello), deadline_ns,
                      err, errlen);
        answered = 1;
      }
      continue;
    }
    if (rcc_bootstrap_ring_hello_ok(in.hello, RING_HELLO_LEN, prev,
                                    b->nranks)) {
      b->prev_fd = in.fd;
      continue;
    }
    RCC_WARN(b->rank, "bootstrap: rank %d expected rank %d of %d on its "
             "bootstrap ring but %s says it is rank %u of %u (magic 0x%08x); "
             "dropped", b->rank, prev, b->nranks,
             rcc_socket_addr_str(&in.peer, msg, sizeof(msg)),
             rcc_get_be32(in.hello + 4), rcc_get_be32(in.hello + 8),
             rcc_get_be32(in.hello));
    close(in.fd);
  }
  gate_free(g);
  return r;
}

ringcc_result_t rcc_bootstrap_init(struct rcc_bootstrap **out,
                                   const ringcc_unique_id_t *id, int rank,
                                   int nranks, int64_t deadline_ns,
                                   char *err, size_t errlen) {
  uint8_t secret[SECRET_LEN];
  struct rcc_bootstrap *b;
  int listen_fd = -1;
  ringcc_result_t r;

  rcc_log_init();
  if (out == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: init needs a place for the handle");
  *out = NULL;
  if (nranks < 1 || nranks > MAX_NRANKS || rank < 0 || rank >= nranks)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: rank %d of nranks %d is invalid (need 0 <= "
                    "rank < nranks <= %d)", rank, nranks, MAX_NRANKS);
  b = calloc(1, sizeof(*b));
  if (b == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "bootstrap: rank %d: out of memory", rank);
  b->rank = rank;
  b->nranks = nranks;
  b->pid = (int)getpid();
  b->lost = b->fail_rank = -1;
  b->next_fd = b->prev_fd = -1;
  r = id_decode(id, &b->root, secret, err, errlen);
  if (r == RINGCC_SUCCESS)
    r = join_rendezvous(b, secret, deadline_ns, &listen_fd, err, errlen);
  if (r == RINGCC_SUCCESS && nranks > 1)
    r = connect_ring(b, secret, listen_fd, deadline_ns, err, errlen);
  memset(secret, 0, sizeof(secret));
  if (listen_fd >= 0)
    close(listen_fd);
  if (r != RINGCC_SUCCESS) {
    rcc_bootstrap_close(b);
    return r;
  }
  RCC_INFO(rank, "bootstrap: rank %d of %d joined the bootstrap ring",
           rank, nranks);
  *out = b;
  return RINGCC_SUCCESS;
}

void rcc_bootstrap_key(const struct rcc_bootstrap *b,
                       uint8_t key[RCC_BOOT_KEY_BYTES]) {
  memcpy(key, b->key, RCC_BOOT_KEY_BYTES);
}

/* ---- allgather over the ring ------------------------------------------- */

/* Words a failed exchange with the ring neighbours in step terms. */
static ringcc_result_t ring_error(struct rcc_bootstrap *b, ringcc_result_t r,
                                  int failed_recv, const char *op,
                                  int64_t start, const char *msg, char *err,
                                  size_t errlen) {
  int peer = failed_recv ? (b->rank - 1 + b->nranks) % b->nranks
                         : (b->rank + 1) % b->nranks;
  char pa[80];
  rcc_socket_addr_str(&b->peers[peer], pa, sizeof(pa));
  if (r == RINGCC_ERR_TIMEOUT)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d timed out after %lld "
                    "ms %s rank %d (%s) in %s", b->rank, ms_since(start),
                    failed_recv ? "waiting for" : "sending to", peer, pa, op);
  if (r == RINGCC_ERR_PEER_FAILED)
    return rcc_errf(err, errlen, r, "bootstrap: rank %d lost rank %d (%s) in "
                    "%s: %s; did rank %d fail or exit?", b->rank, peer, pa,
                    op, msg, peer);
  return rcc_errf(err, errlen, r, "bootstrap: rank %d, %s with rank %d (%s): "
                  "%s", b->rank, op, peer, pa, msg);
}

int rcc_bootstrap_data_header_ok(const uint8_t *hdr, size_t len, uint32_t call,
                                 uint64_t bytes) {
  return len >= DATA_HDR_LEN && rcc_get_be32(hdr) == DATA_MAGIC &&
         rcc_get_be32(hdr + 4) == call && rcc_get_be64(hdr + 8) == bytes;
}

/* A failure passed along the ring (rcc_bootstrap_fail): in place of a step
 * header, FAIL_MAGIC, the rank, its ringcc_result_t and the length of its
 * sentence, then the sentence. Every rank that reads one where it expects a
 * header passes it on (after the data of the step it is in, so that the
 * next rank reads it where it expects a header too) and fails with it, so a
 * failure reaches every rank in one trip round the ring, however far the
 * all-gather got: no rank waits on another's lockstep. */
static void ring_send_failure_to(struct rcc_bootstrap *b, int fd) {
  uint8_t msg[DATA_HDR_LEN + FAIL_WHY_MAX];
  size_t len = strnlen(b->fail_why, FAIL_WHY_MAX - 1);
  rcc_put_be32(msg, FAIL_MAGIC);
  rcc_put_be32(msg + 4, (uint32_t)b->fail_rank);
  rcc_put_be32(msg + 8, (uint32_t)b->fail_code);
  rcc_put_be32(msg + 12, (uint32_t)len);
  memcpy(msg + DATA_HDR_LEN, b->fail_why, len);
  char ignored[RCC_ERRLEN];
  (void)rcc_socket_send_all(fd, msg, DATA_HDR_LEN + len,
                            rcc_now_ns() + FAIL_SEND_NS, ignored,
                            sizeof(ignored));
}

static void ring_send_failure(struct rcc_bootstrap *b) {
  if (b->next_fd >= 0 && b->fail_rank != (b->rank + 1) % b->nranks)
    ring_send_failure_to(b, b->next_fd); /* not to the one that is gone */
}

static void ring_record_failure(struct rcc_bootstrap *b, int rank,
                                int32_t code, const char *why);

/* The next rank closed its connection: it may have said why first, back
 * the other way (rcc_bootstrap_fail), before it left. 1 with the failure
 * recorded, else 0. */
static int ring_failure_back(struct rcc_bootstrap *b) {
  uint8_t hdr[DATA_HDR_LEN];
  char why[FAIL_WHY_MAX], msg[RCC_ERRLEN];
  int64_t until = rcc_now_ns() + 100 * 1000000LL;
  int n = b->nranks;
  if (rcc_socket_recv_all(b->next_fd, hdr, sizeof(hdr), until, msg,
                          sizeof(msg)) != RINGCC_SUCCESS ||
      rcc_get_be32(hdr) != FAIL_MAGIC)
    return 0;
  uint32_t rank = rcc_get_be32(hdr + 4), len = rcc_get_be32(hdr + 12);
  int32_t code = (int32_t)rcc_get_be32(hdr + 8);
  if (rank >= (uint32_t)n || len >= FAIL_WHY_MAX || code <= 0 ||
      rcc_socket_recv_all(b->next_fd, why, len, until, msg, sizeof(msg)) !=
          RINGCC_SUCCESS)
    return 0;
  why[len] = '\0';
  ring_record_failure(b, (int)rank, code, why);
  return 1;
}

static void ring_record_failure(struct rcc_bootstrap *b, int rank,
                                int32_t code, const char *why) {
  if (b->fail_rank >= 0)
    return; /* the first one stands */
  b->fail_rank = rank;
  b->fail_code = code;
  snprintf(b->fail_why, sizeof(b->fail_why), "%s", why);
}

void rcc_bootstrap_fail(struct rcc_bootstrap *b, int32_t code,
                        const char *why) {
  if (b == NULL || b->nranks == 1)
    return;
  ring_record_failure(b, b->rank, code, why);
  ring_send_failure(b);
  /* And back to the previous rank, which reads it should it find this one
   * gone before the news came round (ring_failure_back). */
  if (b->prev_fd >= 0 && b->nranks > 2)
    ring_send_failure_to(b, b->prev_fd);
}

int rcc_bootstrap_failure(const struct rcc_bootstrap *b, int32_t *code,
                          char *why, size_t len) {
  if (b == NULL || b->fail_rank < 0)
    return -1;
  *code = b->fail_code;
  snprintf(why, len, "%s", b->fail_why);
  return b->fail_rank;
}

/* A step header that is a FAIL message: its sentence read, recorded and
 * passed on (after this step's data). The error, or RINGCC_SUCCESS when
 * the header is none. */
static ringcc_result_t ring_failure_in(struct rcc_bootstrap *b,
                                       const uint8_t *hdr, const void *out,
                                       size_t out_len, int64_t deadline_ns,
                                       char *err, size_t errlen) {
  char why[FAIL_WHY_MAX], msg[RCC_ERRLEN];
  int n = b->nranks, prev = (b->rank - 1 + n) % n;
  if (rcc_get_be32(hdr) != FAIL_MAGIC)
    return RINGCC_SUCCESS;
  uint32_t rank = rcc_get_be32(hdr + 4), len = rcc_get_be32(hdr + 12);
  int32_t code = (int32_t)rcc_get_be32(hdr + 8);
  if (rank >= (uint32_t)n || len >= FAIL_WHY_MAX || code <= 0 ||
      rcc_socket_recv_all(b->prev_fd, why, len, deadline_ns, msg,
                          sizeof(msg)) != RINGCC_SUCCESS)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_USAGE, "bootstrap: rank "
                    "%d got a malformed failure message from rank %d",
                    b->rank, prev);
  why[len] = '\0';
  ring_record_failure(b, (int)rank, code, why);
  (void)rcc_socket_send_all(b->next_fd, out, out_len,
                            rcc_now_ns() + FAIL_SEND_NS, msg, sizeof(msg));
  ring_send_failure(b);
  return rcc_errf(err, errlen, (ringcc_result_t)code, "rank %d failed: %s",
                  (int)rank, why[0] ? why : "(no reason given)");
}

/* The previous rank's connection closed (it died or exited): recorded and
 * passed on as its failure, so that every rank names it, not the neighbour
 * that stopped talking because of it. Not where this rank knows the cause
 * already. */
static void ring_lost(struct rcc_bootstrap *b, int gone, const void *out,
                      size_t out_len) {
  char msg[RCC_ERRLEN];
  if (b->fail_rank >= 0)
    return;
  snprintf(msg, sizeof(msg), "its bootstrap connection to rank %d closed: it "
           "died or exited", b->rank);
  if (gone != (b->rank + 1) % b->nranks || !ring_failure_back(b))
    ring_record_failure(b, gone, RINGCC_ERR_PEER_FAILED, msg);
  b->lost = gone;
  if (out_len > 0)
    (void)rcc_socket_send_all(b->next_fd, out, out_len,
                              rcc_now_ns() + FAIL_SEND_NS, msg, sizeof(msg));
  ring_send_failure(b);
}

int rcc_bootstrap_lost(const struct rcc_bootstrap *b) {
  return b == NULL ? -1 : b->lost;
}

static ringcc_result_t ring_allgather(struct rcc_bootstrap *b, uint8_t *data,
                                      size_t bytes, int64_t deadline_ns,
                                      const char *op, char *err,
                                      size_t errlen) {
  int n = b->nranks, prev = (b->rank - 1 + n) % n, next = (b->rank + 1) % n;
  int64_t start = rcc_now_ns();
  uint32_t call = ++b->calls;
  char msg[RCC_ERRLEN];

  for (int step = 0; step < n - 1; step++) {
    int send_idx = (b->rank - step + n) % n;
    int recv_idx = (b->rank - step - 1 + n) % n;
    uint8_t out_hdr[DATA_HDR_LEN], in_hdr[DATA_HDR_LEN];
    const uint8_t *out = data + (size_t)send_idx * bytes;
    int failed_recv;
    rcc_put_be32(out_hdr, DATA_MAGIC);
    rcc_put_be32(out_hdr + 4, call);
    rcc_put_be64(out_hdr + 8, bytes);
    ringcc_result_t r = rcc_socket_sendrecv(
        b->next_fd, out_hdr, sizeof(out_hdr), b->prev_fd, in_hdr,
        sizeof(in_hdr), deadline_ns, &failed_recv, msg, sizeof(msg));
    if (r == RINGCC_ERR_PEER_FAILED)
      ring_lost(b, failed_recv ? prev : next, out, failed_recv ? bytes : 0);
    if (r != RINGCC_SUCCESS)
      return ring_error(b, r, failed_recv, op, start, msg, err, errlen);
    if ((r = ring_failure_in(b, in_hdr, out, bytes, deadline_ns, err,
                             errlen)) != RINGCC_SUCCESS)
      return r;
    if (!rcc_bootstrap_data_header_ok(in_hdr, sizeof(in_hdr), call, bytes))
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_USAGE,
                      "bootstrap: rank %d in %s (call %u, %zu bytes per rank) "
                      "got call %u with %llu bytes per rank from rank %d: the "
                      "ranks made different bootstrap calls", b->rank, op,
                      call, bytes, rcc_get_be32(in_hdr + 4),
                      (unsigned long long)rcc_get_be64(in_hdr + 8), prev);
    r = rcc_socket_sendrecv(b->next_fd, out, bytes, b->prev_fd,
                            data + (size_t)recv_idx * bytes, bytes,
                            deadline_ns, &failed_recv, msg, sizeof(msg));
    if (r == RINGCC_ERR_PEER_FAILED)
      ring_lost(b, failed_recv ? prev : next, NULL, 0);
    if (r != RINGCC_SUCCESS)
      return ring_error(b, r, failed_recv, op, start, msg, err, errlen);
  }
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_bootstrap_allgather(struct rcc_bootstrap *b, void *data,
                                        size_t bytes, int64_t deadline_ns,
                                        char *err, size_t errlen) {
  if (b == NULL || (data == NULL && bytes > 0))
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: allgather needs a handle and a buffer");
  if (bytes > SIZE_MAX / (size_t)b->nranks)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: rank %d: allgather of %zu bytes from each of "
                    "%d ranks does not fit in memory", b->rank, bytes,
                    b->nranks);
  if (b->nranks == 1)
    return RINGCC_SUCCESS;
  return ring_allgather(b, data, bytes, deadline_ns, "allgather", err, errlen);
}

ringcc_result_t rcc_bootstrap_barrier(struct rcc_bootstrap *b,
                                      int64_t deadline_ns, char *err,
                                      size_t errlen) {
  if (b == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "bootstrap: barrier needs a handle");
  if (b->nranks == 1)
    return RINGCC_SUCCESS;
  uint8_t *flags = calloc((size_t)b->nranks, 1);
  if (flags == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "bootstrap: rank %d: out of memory in barrier", b->rank);
  ringcc_result_t r = ring_allgather(b, flags, 1, deadline_ns, "barrier", err,
                                     errlen);
  free(flags);
  return r;
}

int rcc_bootstrap_news(struct rcc_bootstrap *b, int32_t *status, int *rank) {
  static __thread uint8_t buf[64 * 1024];
  int n = b->nranks;
  if (n == 1 || b->prev_fd < 0)
    return 0;
  ssize_t got;
  do
    got = recv(b->prev_fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  while (got < 0 && errno == EINTR);
  *rank = (b->rank - 1 + n) % n;
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
    return -1; /* closed (or reset) before anything */
  /* Step k of the next all-gather carries the record of rank - 1 - k. */
  size_t off = 0;
  for (int step = 0; got > 0 && step < n - 1; step++) {
    if ((size_t)got - off >= DATA_HDR_LEN &&
        rcc_get_be32(buf + off) == FAIL_MAGIC &&
        rcc_get_be32(buf + off + 4) < (uint32_t)n) {
      *rank = (int)rcc_get_be32(buf + off + 4);
      *status = (int32_t)rcc_get_be32(buf + off + 8);
      return 1; /* a failure on its way round */
    }
    if ((size_t)got - off < DATA_HDR_LEN + sizeof(int32_t) ||
        rcc_get_be32(buf + off) != DATA_MAGIC ||
        rcc_get_be32(buf + off + 4) != b->calls + 1)
      return 0;
    uint64_t bytes = rcc_get_be64(buf + off + 8);
    if (bytes < sizeof(int32_t))
      return 0;
    memcpy(status, buf + off + DATA_HDR_LEN, sizeof(*status));
    if (*status != 0) {
      *rank = (b->rank - 1 - step + 2 * n) % n;
      return 1;
    }
    if (bytes > (uint64_t)got - off - DATA_HDR_LEN)
      return 0;
    off += DATA_HDR_LEN + (size_t)bytes;
  }
  return 0;
}

uint32_t rcc_bootstrap_calls(const struct rcc_bootstrap *b) {
  return b == NULL ? 0 : b->calls;
}

int rcc_bootstrap_peer_addr(const struct rcc_bootstrap *b, int rank,
                            struct sockaddr_storage *addr) {
  if (b == NULL || b->peers == NULL || rank < 0 || rank >= b->nranks)
    return -1;
  *addr = b->peers[rank];
  return 0;
}

void rcc_bootstrap_close(struct rcc_bootstrap *b) {
  if (b == NULL)
    return;
  memset(b->key, 0, sizeof(b->key));
  /* Each ring connection's connecting end (to next) closes first, its
   * accepting end second (socket.h: neither keeps a TIME_WAIT). */
  if (b->next_fd >= 0)
    close(b->next_fd);
  if (b->prev_fd >= 0 && b->pid == (int)getpid())
    rcc_socket_close_second(b->prev_fd, RING_CLOSE_WAIT_MS);
  else if (b->prev_fd >= 0)
    close(b->prev_fd);
  free(b->peers);
  free(b);
}
