/*
 * wire.h - every parser of bytes that come from the network, as a pure
 * function: bytes and their length in, fields or a refusal out, no I/O. The
 * code that reads the sockets calls these, and so do the fuzz targets
 * (test/fuzz/), so what is fuzzed is what runs. A buffer shorter than its
 * format is refused, never read past.
 *
 * The formats are documented where they are written: lib/boot/bootstrap.c
 * (unique id, handshake, rendezvous hello and table, bootstrap ring hello,
 * allgather step header), transports/net_socket.c (connection preamble, message
 * header) and transports/net.c (connection hello). The big-endian field
 * helpers below are what they are written and read with.
 */
#ifndef RCC_WIRE_H
#define RCC_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ringcc.h"

/* ---- big-endian fields (every format below is network byte order) ------- */
static inline void rcc_put_be16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static inline void rcc_put_be32(uint8_t *p, uint32_t v) {
  rcc_put_be16(p, v >> 16);
  rcc_put_be16(p + 2, v & 0xffff);
}
static inline void rcc_put_be64(uint8_t *p, uint64_t v) {
  rcc_put_be32(p, (uint32_t)(v >> 32));
  rcc_put_be32(p + 4, (uint32_t)v);
}
static inline uint32_t rcc_get_be16(const uint8_t *p) {
  return (uint32_t)p[0] << 8 | p[1];
}
static inline uint32_t rcc_get_be32(const uint8_t *p) {
  return rcc_get_be16(p) << 16 | rcc_get_be16(p + 2);
}
static inline uint64_t rcc_get_be64(const uint8_t *p) {
  return (uint64_t)rcc_get_be32(p) << 32 | rcc_get_be32(p + 4);
}

/* ---- bootstrap (bootstrap.c) --------------------------------------------- */
#define RCC_BOOT_SECRET_BYTES 16
#define RCC_BOOT_NONCE_BYTES 16
#define RCC_BOOT_PROOF_BYTES 32     /* an HMAC-SHA-256 */
#define RCC_BOOT_ID_BYTES 128       /* sizeof(ringcc_unique_id_t) */
#define RCC_BOOT_OPEN_BYTES 24      /* a handshake's opening (connector) */
#define RCC_BOOT_CHALLENGE_BYTES 56 /* its challenge (acceptor) */
#define RCC_BOOT_ADDR_BYTES 24      /* an address in a hello or the table */
#define RCC_BOOT_HELLO_BYTES 36     /* rendezvous hello, after the proof */
#define RCC_BOOT_REPLY_BYTES 28     /* the rendezvous's reply, before the table */
#define RCC_BOOT_REFUSAL_BYTES 200 /* a refusing reply's reason, after it */
#define RCC_BOOT_RING_HELLO_BYTES 12 /* ring hello, after the proof */
#define RCC_BOOT_DATA_HDR_BYTES 16  /* allgather step header */
#define RCC_BOOT_MAX_NRANKS (1 << 20)

/* A handshake's opening, read by the acceptor (a rendezvous, or a rank's
 * bootstrap listener) from whoever connects: 0 when it is one for purpose
 * (nonce[RCC_BOOT_NONCE_BYTES] filled), else -1 and why[] says why. */
int rcc_bootstrap_open_parse(const uint8_t *in, size_t len, uint32_t purpose,
                             uint8_t *nonce, char *why, size_t whylen);
/* The acceptor's challenge, read by the connector from whoever accepted its
 * connection: 0 with nonce[RCC_BOOT_NONCE_BYTES] and the acceptor's
 * proof[RCC_BOOT_PROOF_BYTES] (the caller checks it), or -1. */
int rcc_bootstrap_challenge_parse(const uint8_t *in, size_t len,
                                  uint32_t purpose, uint8_t *nonce,
                                  uint8_t *proof);

/* A unique id: the rendezvous address into *root and the secret into
 * secret[RCC_BOOT_SECRET_BYTES] (either may be NULL). Checks magic, version,
 * checksum and address; RINGCC_ERR_INVALID_ARGUMENT otherwise. */
ringcc_result_t rcc_bootstrap_id_decode(const void *id, size_t len,
                                        struct sockaddr_storage *root,
                                        uint8_t *secret, char *err,
                                        size_t errlen);

/* A rank's hello to the rendezvous (the bytes after its proof). */
struct rcc_boot_hello {
  uint32_t rank, nranks;            /* as sent, also when refused */
  struct sockaddr_storage listener; /* zeroed unless nranks > 1 */
};
/* nranks_known: the nranks of the ranks that arrived before (0 for the
 * first). Returns 0 when the hello may join, -1 when it is not a hello at all
 * (wrong magic, or short), else the reply status that refuses it, with why[].
 * Whether that rank already joined is the rendezvous's own check. */
int rcc_bootstrap_hello_parse(const uint8_t *in, size_t len,
                              uint32_t nranks_known, struct rcc_boot_hello *out,
                              char *why, size_t whylen);

/* The rendezvous's reply to rank of nranks (where: its address, for the
 * message): success when it announces the table for nranks ranks; else the
 * error the rank reports, with the rendezvous's reason when len also covers
 * the RCC_BOOT_REFUSAL_BYTES after a refusal (non-printable bytes shown as
 * '?'). */
ringcc_result_t rcc_bootstrap_reply_check(const uint8_t *reply, size_t len,
                                          int rank, int nranks,
                                          const char *where, char *err,
                                          size_t errlen);
/* The table after the reply: nranks addresses into peers[nranks]. With one
 * rank there is no ring and the entry is not read. RINGCC_ERR_NETWORK names
 * the first entry that is not an address. */
ringcc_result_t rcc_bootstrap_table_decode(const uint8_t *table, size_t len,
                                           int nranks,
                                           struct sockaddr_storage *peers,
                                           char *err, size_t errlen);

/* 1 when a bootstrap ring hello (after the proof) comes from rank prev of
 * nranks, else 0. */
int rcc_bootstrap_ring_hello_ok(const uint8_t *in, size_t len, int prev,
                                int nranks);

/* 1 when an allgather step header is the one of call number call with bytes
 * per rank, as this rank's own, else 0. */
int rcc_bootstrap_data_header_ok(const uint8_t *hdr, size_t len, uint32_t call,
                                 uint64_t bytes);

/* ---- the TCP plugin (transports/net_socket.c) ------------------------------ */
#define RCC_NET_SOCKET_PREAMBLE_BYTES 16 /* then socket 0's hello, a proof */
#define RCC_NET_SOCKET_MAC_BYTES 32
#define RCC_NET_SOCKET_HEADER_BYTES 64 /* then the payload, zeros to 64n */
#define RCC_NET_SOCKET_MAX_SOCKS 16

/* The preamble of an accepted socket. */
struct rcc_net_preamble {
  int index, nsocks; /* this socket's place in its connection */
  uint64_t id;       /* the connection */
  size_t need;       /* bytes the socket sends before messages: preamble,
                        for socket 0 the hello, then its proof (HMAC) */
};
/* 0 when acceptable, else -1 and why[] says why. Whether it clashes with
 * sockets already there is the listener's own check. */
int rcc_net_socket_preamble_parse(const uint8_t *in, size_t len,
                                  struct rcc_net_preamble *out, char *why,
                                  size_t whylen);

/* A message header: *bytes and *imm as sent (also when refused); 0 when the
 * payload fits the slot_bytes of the posted receive, else -1. */
int rcc_net_socket_header_parse(const uint8_t *in, size_t len,
                                size_t slot_bytes, uint32_t *bytes,
                                uint32_t *imm);

/* ---- the network transport (transports/net.c) ------------------------------ */

/* The FIFO sets a network hello may name: (connection kind, channel) pairs,
 * at most 4 kinds of 32 channels (comm.h). */
#define RCC_NET_MAX_SETS 128
/* The hello a connecting peer sent (RCC_NET_HELLO_BYTES; the plugin
 * checked its proof): 1 when it has the magic and names another rank of
 * nranks (not my_rank) and a FIFO set (below RCC_NET_MAX_SETS), into *peer
 * and *kind; else 0. */
int rcc_net_hello_parse(const uint8_t *in, size_t len, int my_rank,
                        int nranks, int *peer, int *kind);

#endif /* RCC_WIRE_H */
