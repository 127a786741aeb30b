/*
 * handshake.c - the bootstrap's shared pieces (handshake.h): bytes on the
 * wire, the unique id, and the handshake as the listener gate's check, used
 * by the rank side (bootstrap.c) and the rendezvous server (rendezvous.c).
 * The protocol is described at the top of bootstrap.c.
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

/* ---- bytes ----------------------------------------------------------------- */

static uint32_t fnv1a(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 16777619u;
  return h;
}

/* HMAC(secret, label || purpose || a || b || extra): a handshake's proofs
 * and the table's tag. */
void rcc_boot_mac(const uint8_t secret[SECRET_LEN], const char *label,
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

void rcc_boot_addr_to_wire(const struct sockaddr_storage *a, uint8_t *w) {
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
int rcc_boot_addr_from_wire(const uint8_t *w, struct sockaddr_storage *a) {
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

void rcc_boot_id_encode(ringcc_unique_id_t *id,
                        const struct sockaddr_storage *root,
                        const uint8_t secret[SECRET_LEN]) {
  uint8_t *p = (uint8_t *)id->internal;
  memset(p, 0, sizeof(id->internal));
  rcc_put_be32(p, ID_MAGIC);
  rcc_put_be16(p + 4, ID_VERSION);
  rcc_boot_addr_to_wire(root, p + ID_ADDR_OFF);
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
  if (rcc_boot_addr_from_wire(p + ID_ADDR_OFF, root ? root : &tmp) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "unique id is malformed: bad address (family %u, port "
                    "%u)",
                    rcc_get_be16(p + ID_ADDR_OFF),
                    rcc_get_be16(p + ID_ADDR_OFF + 2));
  if (secret != NULL)
    memcpy(secret, p + ID_SECRET_OFF, SECRET_LEN);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_boot_id_decode(const ringcc_unique_id_t *id,
                                   struct sockaddr_storage *root,
                                   uint8_t secret[SECRET_LEN], char *err,
                                   size_t errlen) {
  return rcc_bootstrap_id_decode(id ? id->internal : NULL, sizeof(*id), root,
                                 secret, err, errlen);
}

ringcc_result_t rcc_bootstrap_check_id(const ringcc_unique_id_t *id,
                                       char *err, size_t errlen) {
  return rcc_boot_id_decode(id, NULL, NULL, err, errlen);
}

ringcc_result_t rcc_boot_make_secret(uint8_t secret[SECRET_LEN], char *err,
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
  rcc_boot_id_encode(id, &root, secret != NULL ? secret : zero);
  return RINGCC_SUCCESS;
}

/* ---- the gate: the handshake as the listener gate's check ---------------- */

void rcc_boot_gate_free(struct gate *g) {
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
  rcc_boot_mac(g->secret, LABEL_ACCEPTOR, g->purpose, h->nonce_c, h->nonce_a,
               NULL, 0, chal + 8 + NONCE_LEN);
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
  rcc_boot_mac(g->secret, LABEL_CONNECTOR, g->purpose, h->nonce_a, h->nonce_c,
               h->buf + PROOF_LEN, g->hdr_len, proof);
  if (!rcc_equal_ct(proof, h->buf, PROOF_LEN)) {
    snprintf(why, whylen,
             "it could not prove that it knows the secret (a "
             "stranger, or a rank given another id)");
    return RCC_GATE_REFUSE;
  }
  return RCC_GATE_PROVEN;
}

/* Hands out the next connection that proved itself with a whole hello.
 * Strangers are dropped on the way. With extra_fd >= 0, returns with
 * out->fd == -1 as soon as that descriptor is readable (or closed) instead.
 * RINGCC_ERR_TIMEOUT at deadline_ns. */
ringcc_result_t rcc_boot_gate_next(struct gate *g, int64_t deadline_ns,
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

struct gate *rcc_boot_gate_new(int listen_fd, uint32_t purpose, size_t hdr_len,
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
    rcc_boot_gate_free(g);
    return NULL;
  }
  return g;
}
