/*
 * test_hardening.c - what issue 16 asked for, each part on its own: the
 * SHA-256 / HMAC-SHA-256 the handshakes use, against the published vectors.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sha256.h"

/* ---- crypto: SHA-256 and HMAC-SHA-256 against the published vectors ------ */

static void hex(const uint8_t *p, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", p[i]);
}

/* FIPS 180-2, appendix B (and the empty message). */
Test(crypto, sha256_fips180_examples, .timeout = 20) {
  static const struct {
    const char *msg;
    size_t repeat;
    const char *digest;
  } cases[] = {
      {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", 1,
       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"a", 1000000,
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    struct rcc_sha256 s;
    uint8_t out[32];
    char got[65];
    rcc_sha256_init(&s);
    /* Pieces of odd sizes cross the block boundaries every way. */
    size_t len = strlen(cases[c].msg);
    for (size_t r = 0; r < cases[c].repeat; r++)
      for (size_t off = 0; off < len; off += 7)
        rcc_sha256_update(&s, cases[c].msg + off, len - off < 7 ? len - off : 7);
    rcc_sha256_final(&s, out);
    hex(out, 32, got);
    cr_expect_str_eq(got, cases[c].digest, "SHA-256 of case %zu", c);
  }
}

static size_t unhex(const char *h, uint8_t *out) {
  size_t n = strlen(h) / 2;
  for (size_t i = 0; i < n; i++) {
    unsigned b;
    sscanf(h + 2 * i, "%2x", &b);
    out[i] = (uint8_t)b;
  }
  return n;
}

/* RFC 4231, section 4: every HMAC-SHA-256 test case (case 5 compares the
 * first 128 bits, as the RFC does). */
Test(crypto, hmac_sha256_rfc4231, .timeout = 20) {
  char long_key[263];
  memset(long_key, 'a', 262); /* 131 bytes of 0xaa (cases 6, 7) */
  long_key[262] = '\0';
  const struct {
    const char *key_hex;
    const char *data;     /* text, or NULL: data_hex */
    const char *data_hex;
    const char *mac;
  } cases[] = {
      {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "Hi There", NULL,
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"4a656665", "what do ya want for nothing?", NULL,
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL,
       "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
       "dddddddddddddddddddddddddddddddd",
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"0102030405060708090a0b0c0d0e0f10111213141516171819", NULL,
       "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
       "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {"0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c", "Test With Truncation",
       NULL, "a3b6167473100ee06e0c796c2955552b"},
      {long_key, "Test Using Larger Than Block-Size Key - Hash Key First", NULL,
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {long_key,
       "This is a test using a larger than block-size key and a larger than "
       "block-size data. The key needs to be hashed before being used by the "
       "HMAC algorithm.",
       NULL,
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint8_t key[200], data[200], out[32];
    char got[65];
    size_t klen = unhex(cases[c].key_hex, key);
    size_t dlen = cases[c].data ? strlen(cases[c].data)
                                : unhex(cases[c].data_hex, data);
    if (cases[c].data)
      memcpy(data, cases[c].data, dlen);
    rcc_hmac_sha256(key, klen, data, dlen, out);
    hex(out, 32, got);
    size_t want = strlen(cases[c].mac);
    cr_expect(strncmp(got, cases[c].mac, want) == 0,
              "HMAC-SHA-256 of RFC 4231 case %zu: %s, expected %s", c + 1, got,
              cases[c].mac);
    /* The incremental form, one byte at a time, agrees. */
    struct rcc_hmac m;
    uint8_t out2[32];
    rcc_hmac_init(&m, key, klen);
    for (size_t i = 0; i < dlen; i++)
      rcc_hmac_update(&m, data + i, 1);
    rcc_hmac_final(&m, out2);
    cr_expect(memcmp(out, out2, 32) == 0, "case %zu: incremental differs",
              c + 1);
  }
}

Test(crypto, equal_ct_and_random, .timeout = 10) {
  uint8_t a[32], b[32];
  cr_assert_eq(rcc_random_bytes(a, sizeof a), 0);
  memcpy(b, a, sizeof a);
  cr_expect(rcc_equal_ct(a, b, sizeof a));
  for (size_t i = 0; i < sizeof a; i++) {
    b[i] ^= 0x40;
    cr_expect(!rcc_equal_ct(a, b, sizeof a), "byte %zu differs", i);
    b[i] ^= 0x40;
  }
  cr_expect(rcc_random_bytes(b, sizeof b) == 0 && memcmp(a, b, 32) != 0);
}
