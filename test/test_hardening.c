/*
 * test_hardening.c - what issue 16 asked for, each part on its own: the
 * SHA-256 / HMAC-SHA-256 the handshakes use, against the published vectors;
 * integer and secret variables parsed strictly; no rank listens once init
 * is over.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm.h"
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

/* ---- env: integers are base 10, RINGCC_SECRET is 32 hex digits ----------- */

/* A one-rank communicator from a fresh id; NULL (and *r) when init fails. */
static ringcc_comm_t one_rank(const ringcc_unique_id_t *id, ringcc_result_t *r) {
  ringcc_comm_t comm = NULL;
  *r = ringcc_comm_init(&comm, 1, id, 0, NULL);
  return *r == RINGCC_SUCCESS ? comm : NULL;
}

Test(env, integers_are_decimal, .timeout = 30) {
  ringcc_unique_id_t id;
  ringcc_result_t r;
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  setenv("RINGCC_TIMEOUT_MS", "010", 1); /* ten, not eight */
  setenv("RINGCC_NSLOTS", "08", 1);      /* not an octal error */
  ringcc_comm_t comm = one_rank(&id, &r);
  cr_assert_eq(r, RINGCC_SUCCESS, "init: %s", ringcc_comm_last_error(NULL));
  cr_expect_eq(comm->set.timeout_ms, 10, "RINGCC_TIMEOUT_MS=010 gave %lld ms",
               (long long)comm->set.timeout_ms);
  cr_expect_eq(comm->set.nslots, 8);
  ringcc_comm_destroy(comm);
  unsetenv("RINGCC_NSLOTS");

  static const char *const bad[] = {"0x10", "0X10", " 10", "10 ", "+10",
                                    "1e3",  "0b1",  "--1", "10ms", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("RINGCC_TIMEOUT_MS", bad[i], 1);
    comm = one_rank(&id, &r);
    cr_expect_eq(r, RINGCC_ERR_INVALID_ARGUMENT,
                 "RINGCC_TIMEOUT_MS=\"%s\": init returned %d (%s)", bad[i],
                 (int)r, ringcc_strerror(r));
    cr_expect(strstr(ringcc_comm_last_error(NULL), "RINGCC_TIMEOUT_MS") != NULL,
              "RINGCC_TIMEOUT_MS=\"%s\": the message does not name it: %s",
              bad[i], ringcc_comm_last_error(NULL));
    if (comm != NULL)
      ringcc_comm_destroy(comm);
  }
  unsetenv("RINGCC_TIMEOUT_MS");
}

/* A port nobody listens on right now (for a one-rank RINGCC_ROOT). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t len = sizeof a;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &len) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

Test(env, secret_is_exactly_32_hex_digits, .timeout = 60) {
  static const char *const bad[] = {
      "0x0x0x0x0x0x0x0x0x0x0x0x0x0x0x0x", /* was read as all zeros */
      "0x0123456789abcdef0123456789abcd",
      " 0123456789abcdef0123456789abcde",
      "+0123456789abcdef0123456789abcde",
      "-0123456789abcdef0123456789abcde",
      "0123456789abcdef0123456789abcde",   /* 31 */
      "0123456789abcdef0123456789abcdef0", /* 33 */
      "0123456789abcdef 123456789abcdef",
      "0123456789abcdefg123456789abcdef",
  };
  char root[64];
  ringcc_comm_t comm;
  setenv("RINGCC_RANK", "0", 1);
  setenv("RINGCC_NRANKS", "1", 1);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(root, sizeof root, "127.0.0.1:%d", free_port());
    setenv("RINGCC_ROOT", root, 1);
    setenv("RINGCC_SECRET", bad[i], 1);
    ringcc_result_t r = ringcc_comm_init_env(&comm, NULL);
    const char *msg = ringcc_comm_last_error(NULL);
    cr_expect_eq(r, RINGCC_ERR_INVALID_ARGUMENT,
                 "RINGCC_SECRET=\"%s\": init returned %d (%s)", bad[i], (int)r,
                 ringcc_strerror(r));
    cr_expect(strstr(msg, "RINGCC_SECRET") != NULL &&
                  strstr(msg, "32 hex digits") != NULL,
              "RINGCC_SECRET=\"%s\": unclear message: %s", bad[i], msg);
    cr_expect(strstr(msg, bad[i]) == NULL,
              "the message repeats the secret: %s", msg);
    if (r == RINGCC_SUCCESS)
      ringcc_comm_destroy(comm);
  }
  static const char *const good[] = {"0123456789abcdef0123456789ABCDEF",
                                     "00000000000000000000000000000001"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    snprintf(root, sizeof root, "127.0.0.1:%d", free_port());
    setenv("RINGCC_ROOT", root, 1);
    setenv("RINGCC_SECRET", good[i], 1);
    ringcc_result_t r = ringcc_comm_init_env(&comm, NULL);
    cr_expect_eq(r, RINGCC_SUCCESS, "RINGCC_SECRET=%s: %s", good[i],
                 ringcc_comm_last_error(NULL));
    if (r == RINGCC_SUCCESS)
      ringcc_comm_destroy(comm);
  }
}

/* ---- listeners: none once init is over ----------------------------------- */

/* TCP sockets of this process in the LISTEN state (/proc/net/tcp{,6} state
 * 0A, matched by inode with /proc/self/fd). */
static int listening_sockets(void) {
  unsigned long inodes[1024];
  int n = 0, found = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL && n < 1024) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, link, sizeof link - 1);
    if (len <= 0)
      continue;
    link[len] = '\0';
    if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1)
      n++;
  }
  if (d != NULL)
    closedir(d);
  static const char *const tables[] = {"/proc/self/net/tcp",
                                       "/proc/self/net/tcp6"};
  for (int t = 0; t < 2; t++) {
    FILE *f = fopen(tables[t], "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f)) {
      unsigned state;
      unsigned long inode;
      if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &state,
                 &inode) != 2 || state != 0x0A)
        continue;
      for (int i = 0; i < n; i++)
        found += inodes[i] == inode;
    }
    if (f != NULL)
      fclose(f);
  }
  return found;
}

static int no_listener_body(h_ctx_t *ctx) {
  int n = listening_sockets();
  if (n != 0)
    return h_fail(ctx, "%d TCP socket%s of this rank still listen%s after "
                  "init", n, n == 1 ? "" : "s", n == 1 ? "s" : "");
  int32_t v = ctx->rank + 1, sum = 0;
  ringcc_result_t r = ringcc_allreduce(&v, &sum, 1, RINGCC_INT32, RINGCC_SUM,
                                       ctx->comm, NULL);
  if (r != RINGCC_SUCCESS || sum != ctx->nranks * (ctx->nranks + 1) / 2)
    return h_fail(ctx, "allreduce: %d (%s), sum %d", (int)r,
                  ringcc_comm_last_error(ctx->comm), sum);
  return 0;
}

/* Once init is over nobody can connect to a rank: the network transport's
 * listener closes when every peer connected (it stayed open until destroy),
 * and the bootstrap's when the ring is up. Over TCP (shm disabled). */
Test(net, no_listener_after_init, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  h_run_opts_t o = {.nranks = 3, .body = no_listener_body, .config = &cfg,
                    .timeout_s = 40, .name = "no_listener_after_init"};
  cr_assert(h_run(&o));
}
