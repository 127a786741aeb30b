/*
 * sha256.h - what the library authenticates with: SHA-256 (FIPS 180-4),
 * HMAC-SHA-256 (RFC 2104), a comparison in constant time, and random bytes
 * for secrets and nonces (sha256.c).
 *
 * Every handshake proves knowledge of the communicator's secret with an HMAC
 * over nonces, so the secret itself never crosses the wire
 * (docs/reliability.md, "Threat model"). The implementation is checked
 * against the FIPS 180-2 examples and the RFC 4231 test vectors
 * (test_hardening, suite crypto).
 */
#ifndef RCC_SHA256_H
#define RCC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define RCC_SHA256_BYTES 32
#define RCC_SHA256_BLOCK 64

struct rcc_sha256 {
  uint32_t h[8];
  uint64_t bytes; /* hashed so far */
  uint8_t block[RCC_SHA256_BLOCK];
  size_t used; /* bytes of block filled */
};

void rcc_sha256_init(struct rcc_sha256 *s);
void rcc_sha256_update(struct rcc_sha256 *s, const void *data, size_t len);
void rcc_sha256_final(struct rcc_sha256 *s, uint8_t out[RCC_SHA256_BYTES]);
void rcc_sha256(const void *data, size_t len, uint8_t out[RCC_SHA256_BYTES]);

/* HMAC-SHA-256, incremental: init with the key, update with the message in
 * any pieces, final writes the 32-byte tag. */
struct rcc_hmac {
  struct rcc_sha256 inner;
  uint8_t opad[RCC_SHA256_BLOCK];
};
void rcc_hmac_init(struct rcc_hmac *m, const void *key, size_t keylen);
void rcc_hmac_update(struct rcc_hmac *m, const void *data, size_t len);
void rcc_hmac_final(struct rcc_hmac *m, uint8_t out[RCC_SHA256_BYTES]);
void rcc_hmac_sha256(const void *key, size_t keylen, const void *data,
                     size_t len, uint8_t out[RCC_SHA256_BYTES]);

/* 1 when a[0..n) == b[0..n), taking the same time whatever the bytes, so
 * that a tag cannot be guessed byte by byte. */
int rcc_equal_ct(const void *a, const void *b, size_t n);

/* n bytes from the kernel's random source (getrandom); 0, or an errno. */
int rcc_random_bytes(void *buf, size_t n);

#endif /* RCC_SHA256_H */
