/*
 * bootstrap.c - rendezvous over TCP, the rank side: joining the rendezvous,
 * the bootstrap ring, and allgather/barrier over that ring. The rendezvous
 * server is rendezvous.c; the unique id and the handshake, which both sides
 * run, handshake.c (handshake.h).
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
#include "handshake.h"
#include "log.h"
#include "sha256.h"
#include "socket.h"
#include "wire.h"

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
    if (rcc_boot_addr_from_wire(table + (size_t)WIRE_ADDR_LEN * i, &peers[i]) !=
        0)
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
  rcc_boot_mac(secret, LABEL_ACCEPTOR, c->purpose, c->nonce_c, c->nonce_a, NULL,
               0, want);
  if (!rcc_equal_ct(want, proof, PROOF_LEN))
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "bootstrap: rank %d: %s "
                    "could not prove that it knows this id's secret: a wrong "
                    "secret (the ranks were given different ids), or a "
                    "stranger listening on that port; this rank sent it "
                    "nothing secret",
                    c->rank, c->whom);
  rcc_boot_mac(secret, LABEL_CONNECTOR, c->purpose, c->nonce_a, c->nonce_c,
               hello, hello_len, answer);
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
    rcc_boot_mac(secret, LABEL_TABLE, PURPOSE_RENDEZVOUS, nonces,
                 nonces + NONCE_LEN, all, REPLY_LEN + tlen, tag);
    if (!rcc_equal_ct(tag, all + REPLY_LEN + tlen, PROOF_LEN))
      r = rcc_errf(msg, sizeof(msg), RINGCC_ERR_NETWORK,
                   "its tag does not "
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
  rcc_boot_addr_to_wire(b->nranks > 1 ? &bound : NULL, hello + 12);
  struct connector c = {
      .fd = fd, .rank = b->rank, .purpose = PURPOSE_RENDEZVOUS, .whom = whom};
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
  struct gate *g = rcc_boot_gate_new(listen_fd, PURPOSE_RING, RING_HELLO_LEN,
                                     secret, b->rank, what);
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
    if (rcc_boot_gate_next(g, short_wait ? chal_deadline : deadline_ns,
                           answered ? -1 : b->next_fd, &in) != RINGCC_SUCCESS) {
      if (!answered)
        r = hs_wait_error(&c, RINGCC_ERR_TIMEOUT, short_wait, "timed out", err,
                          errlen);
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
  rcc_boot_gate_free(g);
  return r;
}

ringcc_result_t rcc_bootstrap_init(struct rcc_bootstrap **out,
                                   const ringcc_unique_id_t *id, int rank,
                                   int nranks, int64_t deadline_ns, char *err,
                                   size_t errlen) {
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
  r = rcc_boot_id_decode(id, &b->root, secret, err, errlen);
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
                    "%s: %s; its connection closed: rank %d died or exited",
                    b->rank, peer, pa, op, msg, peer);
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
