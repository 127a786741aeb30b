/*
 * sha256.c - SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), written from
 * the standards; checked against the FIPS 180-2 examples and every RFC 4231
 * test case (test_hardening, suite crypto). Small and portable rather than
 * fast: the library hashes a few hundred bytes per connection, never data.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "sha256.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void compress(uint32_t h[8], const uint8_t block[RCC_SHA256_BLOCK]) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
           (uint32_t)block[4 * i + 2] << 8 | block[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3;
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  memcpy(v, h, sizeof(v));
  for (int i = 0; i < 64; i++) {
    uint32_t e = v[4], a = v[0];
    uint32_t t1 = v[7] + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) +
                  ((e & v[5]) ^ (~e & v[6])) + K[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) +
                  ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof(uint32_t));
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++)
    h[i] += v[i];
}

void rcc_sha256_init(struct rcc_sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof(iv));
  s->bytes = 0;
  s->used = 0;
}

void rcc_sha256_update(struct rcc_sha256 *s, const void *data, size_t len) {
  const uint8_t *p = data;
  s->bytes += len;
  while (len > 0) {
    size_t take = RCC_SHA256_BLOCK - s->used < len ? RCC_SHA256_BLOCK - s->used
                                                   : len;
    memcpy(s->block + s->used, p, take);
    s->used += take;
    p += take;
    len -= take;
    if (s->used == RCC_SHA256_BLOCK) {
      compress(s->h, s->block);
      s->used = 0;
    }
  }
}

void rcc_sha256_final(struct rcc_sha256 *s, uint8_t out[RCC_SHA256_BYTES]) {
  uint64_t bits = s->bytes * 8;
  uint8_t pad = 0x80;
  rcc_sha256_update(s, &pad, 1);
  pad = 0;
  while (s->used != RCC_SHA256_BLOCK - 8)
    rcc_sha256_update(s, &pad, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (uint8_t)(bits >> (56 - 8 * i));
  rcc_sha256_update(s, len, sizeof(len));
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++)
      out[4 * i + j] = (uint8_t)(s->h[i] >> (24 - 8 * j));
  memset(s, 0, sizeof(*s));
}

void rcc_sha256(const void *data, size_t len, uint8_t out[RCC_SHA256_BYTES]) {
  struct rcc_sha256 s;
  rcc_sha256_init(&s);
  rcc_sha256_update(&s, data, len);
  rcc_sha256_final(&s, out);
}

void rcc_hmac_init(struct rcc_hmac *m, const void *key, size_t keylen) {
  uint8_t k[RCC_SHA256_BLOCK] = {0}, ipad[RCC_SHA256_BLOCK];
  if (keylen > RCC_SHA256_BLOCK) /* a long key is hashed first */
    rcc_sha256(key, keylen, k);
  else if (keylen > 0)
    memcpy(k, key, keylen);
  for (int i = 0; i < RCC_SHA256_BLOCK; i++) {
    ipad[i] = k[i] ^ 0x36;
    m->opad[i] = k[i] ^ 0x5c;
  }
  rcc_sha256_init(&m->inner);
  rcc_sha256_update(&m->inner, ipad, sizeof(ipad));
  memset(k, 0, sizeof(k));
  memset(ipad, 0, sizeof(ipad));
}

void rcc_hmac_update(struct rcc_hmac *m, const void *data, size_t len) {
  rcc_sha256_update(&m->inner, data, len);
}

void rcc_hmac_final(struct rcc_hmac *m, uint8_t out[RCC_SHA256_BYTES]) {
  uint8_t inner[RCC_SHA256_BYTES];
  struct rcc_sha256 outer;
  rcc_sha256_final(&m->inner, inner);
  rcc_sha256_init(&outer);
  rcc_sha256_update(&outer, m->opad, sizeof(m->opad));
  rcc_sha256_update(&outer, inner, sizeof(inner));
  rcc_sha256_final(&outer, out);
  memset(m, 0, sizeof(*m));
  memset(inner, 0, sizeof(inner));
}

void rcc_hmac_sha256(const void *key, size_t keylen, const void *data,
                     size_t len, uint8_t out[RCC_SHA256_BYTES]) {
  struct rcc_hmac m;
  rcc_hmac_init(&m, key, keylen);
  rcc_hmac_update(&m, data, len);
  rcc_hmac_final(&m, out);
}

int rcc_equal_ct(const void *a, const void *b, size_t n) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++)
    diff |= x[i] ^ y[i];
  return diff == 0;
}

int rcc_random_bytes(void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return got < 0 ? errno : EIO;
    p += got;
    n -= (size_t)got;
  }
  return 0;
}
