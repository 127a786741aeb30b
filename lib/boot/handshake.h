/*
 * handshake.h - what the rank side (bootstrap.c) and the rendezvous server
 * (rendezvous.c) share, private to lib/boot: the wire's constants, the
 * unique id's encoding, the keyed proofs, and the listener gate's check
 * that runs the handshake (handshake.c). The protocol itself is described
 * at the top of bootstrap.c.
 */
#ifndef RCC_BOOT_HANDSHAKE_H
#define RCC_BOOT_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "bootstrap.h"
#include "gate.h"
#include "sha256.h"
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

void rcc_boot_mac(const uint8_t secret[SECRET_LEN], const char *label,
                  uint32_t purpose, const uint8_t a[NONCE_LEN],
                  const uint8_t b[NONCE_LEN], const uint8_t *extra,
                  size_t extra_len, uint8_t out[PROOF_LEN]);
void rcc_boot_addr_to_wire(const struct sockaddr_storage *a, uint8_t *w);
int rcc_boot_addr_from_wire(const uint8_t *w, struct sockaddr_storage *a);
void rcc_boot_id_encode(ringcc_unique_id_t *id,
                        const struct sockaddr_storage *root,
                        const uint8_t secret[SECRET_LEN]);
ringcc_result_t rcc_boot_id_decode(const ringcc_unique_id_t *id,
                                   struct sockaddr_storage *root,
                                   uint8_t secret[SECRET_LEN], char *err,
                                   size_t errlen);
ringcc_result_t rcc_boot_make_secret(uint8_t secret[SECRET_LEN], char *err,
                                     size_t errlen);
void rcc_boot_gate_free(struct gate *g);
ringcc_result_t rcc_boot_gate_next(struct gate *g, int64_t deadline_ns,
                                   int extra_fd, struct passed *out);
struct gate *rcc_boot_gate_new(int listen_fd, uint32_t purpose, size_t hdr_len,
                               const uint8_t secret[SECRET_LEN], int log_rank,
                               const char *what);

#endif /* RCC_BOOT_HANDSHAKE_H */
