/*
 * test_hardening.c - what issue 16 asked for, each part on its own: the
 * SHA-256 / HMAC-SHA-256 the handshakes use, against the published vectors;
 * integer and secret variables parsed strictly; no rank listens once init
 * is over, but for the network transport's listener where links are made
 * on first use, which refuses a stranger without the key; misuse caught (destroy under a running call, a handle used after
 * destroy, a communicator used in a forked child, partly overlapping
 * buffers); the ptrace exception only where cross-memory attach can run;
 * /dev/shm segments of dead creators swept at init.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "prctl_spy.h"
#include "sha256.h"
#include "shmname.h"

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

  /* RINGCC_TRACE_EVENTS (16 or more): 017 is seventeen (octal would be 15,
   * too few), 0x20 no number at all. */
  char dir[] = "/tmp/rcc-trace-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  setenv("RINGCC_TRACE", dir, 1);
  setenv("RINGCC_TRACE_EVENTS", "017", 1);
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS); /* one init each */
  comm = one_rank(&id, &r);
  cr_expect_eq(r, RINGCC_SUCCESS, "RINGCC_TRACE_EVENTS=017: %s",
               ringcc_comm_last_error(NULL));
  if (comm != NULL)
    ringcc_comm_destroy(comm);
  setenv("RINGCC_TRACE_EVENTS", "0x20", 1);
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  comm = one_rank(&id, &r);
  cr_expect_eq(r, RINGCC_ERR_INVALID_ARGUMENT, "RINGCC_TRACE_EVENTS=0x20: %s",
               ringcc_strerror(r));
  cr_expect(strstr(ringcc_comm_last_error(NULL), "RINGCC_TRACE_EVENTS") !=
                NULL, "%s", ringcc_comm_last_error(NULL));
  if (comm != NULL)
    ringcc_comm_destroy(comm);
  unsetenv("RINGCC_TRACE_EVENTS");
  unsetenv("RINGCC_TRACE");
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
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
 * 0A, matched by inode with /proc/self/fd); the IPv4 address and port of
 * the last one found in *where (port 0 if none was IPv4). */
static int listening_sockets_at(struct sockaddr_in *where) {
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
      unsigned state, ip, port;
      unsigned long inode;
      if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &state,
                 &inode) != 2 || state != 0x0A)
        continue;
      for (int i = 0; i < n; i++)
        if (inodes[i] == inode) {
          found++;
          if (t == 0 && where != NULL &&
              sscanf(line, "%*s %x:%x", &ip, &port) == 2) {
            where->sin_family = AF_INET;
            where->sin_addr.s_addr = ip; /* as the kernel stores it */
            where->sin_port = htons((uint16_t)port);
          }
        }
    }
    if (f != NULL)
      fclose(f);
  }
  return found;
}

static int listening_sockets(void) { return listening_sockets_at(NULL); }

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

/* With every link made at init (RINGCC_NET_CONNECT=eager) nobody can
 * connect to a rank once init is over: the network transport's listener
 * closes when every peer connected (it stayed open until destroy), and the
 * bootstrap's when the ring is up. Over TCP (shm disabled). */
Test(net, no_listener_after_init, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  setenv("RINGCC_NET_CONNECT", "eager", 1);
  h_run_opts_t o = {.nranks = 3, .body = no_listener_body, .config = &cfg,
                    .timeout_s = 40, .name = "no_listener_after_init"};
  int ok = h_run(&o);
  unsetenv("RINGCC_NET_CONNECT");
  cr_assert(ok);
}

/* Links on first use (the default): the network transport's listener, and
 * nothing else, stays open after init; rank 0 connects to its own as a
 * stranger would, with a preamble whose proof is not made with the key: it
 * is closed at once, and an alltoall (which makes links 0-2 and 1-3 late)
 * is exact on every rank. */
static int stranger_body(h_ctx_t *ctx) {
  struct sockaddr_in at = {0};
  int n = listening_sockets_at(&at);
  if (n != 1)
    return h_fail(ctx, "%d TCP sockets of this rank listen after init, not "
                  "1 (the network transport's)", n);
  if (ctx->rank == 0) {
    if (at.sin_port == 0)
      return h_fail(ctx, "the listener is not IPv4");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&at, sizeof(at)) != 0)
      return h_fail(ctx, "cannot connect to the listener: %s",
                    strerror(errno));
    /* "RCNS", socket 0 of 2, an id, a hello naming rank 1, a false proof */
    uint8_t pre[16 + 64 + 32];
    memset(pre, 0x5a, sizeof(pre));
    memcpy(pre, "RCNS\0\0\0\2", 8);
    if (write(fd, pre, sizeof(pre)) != (ssize_t)sizeof(pre))
      return h_fail(ctx, "write to the listener: %s", strerror(errno));
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char byte;
    double t0 = h_now_s();
    ssize_t got = recv(fd, &byte, 1, 0);
    int e = errno;
    close(fd);
    if (got != 0 && !(got < 0 && e == ECONNRESET))
      return h_fail(ctx, "the listener did not close the stranger's "
                    "connection (recv: %zd, %s after %.1f s)", got,
                    got < 0 ? strerror(e) : "bytes", h_now_s() - t0);
  }
  int np = ctx->nranks;
  int32_t in[16], out[16];
  for (int q = 0; q < np; q++)
    in[q] = ctx->rank * 100 + q;
  ringcc_result_t r = ringcc_alltoall(in, out, 1, RINGCC_INT32, ctx->comm,
                                      NULL);
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "alltoall: %s", ringcc_comm_last_error(ctx->comm));
  for (int q = 0; q < np; q++)
    if (out[q] != q * 100 + ctx->rank)
      return h_fail(ctx, "alltoall block %d: %d", q, (int)out[q]);
  return 0;
}

Test(net, lazy_listener_refuses_a_stranger, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  h_run_opts_t o = {.nranks = 4, .body = stranger_body, .config = &cfg,
                    .timeout_s = 40, .name = "lazy_listener_refuses_a_stranger"};
  cr_assert(h_run(&o));
}

/* ---- misuse: destroy under a call, use after destroy, fork, overlaps ----- */

struct bg_call {
  ringcc_comm_t comm;
  int32_t in[4099], out[4099];
  ringcc_result_t r;
};

static void *bg_allreduce(void *arg) {
  struct bg_call *b = arg;
  b->r = ringcc_allreduce(b->in, b->out, 4099, RINGCC_INT32, RINGCC_SUM,
                          b->comm, NULL);
  return NULL;
}

/* Rank 0: a thread is inside an allreduce (rank 1 comes 1.5 s late) when the
 * main thread calls destroy: refused with RINGCC_ERR_INVALID_USAGE naming the
 * call, and the allreduce then completes exactly (before: destroy freed the
 * communicator under it, and the rank crashed in the wait). */
static int destroy_busy_body(h_ctx_t *ctx) {
  static struct bg_call b;
  h_fill_input(RINGCC_INT32, RINGCC_SUM, ctx->rank, 0, 5, b.in, 4099);
  b.comm = ctx->comm;
  if (ctx->rank != 0) {
    h_sleep_ms(1500);
    bg_allreduce(&b);
  } else {
    pthread_t t;
    pthread_create(&t, NULL, bg_allreduce, &b);
    h_sleep_ms(300);
    ringcc_result_t r = ringcc_comm_destroy(ctx->comm);
    const char *msg = ringcc_comm_last_error(ctx->comm);
    if (r != RINGCC_ERR_INVALID_USAGE || strstr(msg, "ringcc_allreduce") == NULL)
      return h_fail(ctx, "destroy during an allreduce returned %d (%s): %s",
                    (int)r, ringcc_strerror(r), msg);
    pthread_join(t, NULL);
  }
  if (b.r != RINGCC_SUCCESS)
    return h_fail(ctx, "the allreduce: %d (%s)", (int)b.r,
                  ringcc_comm_last_error(ctx->comm));
  int32_t want[4099];
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, ctx->nranks, 0, 5, want, 4099);
  return !h_check_elems(ctx, "allreduce", RINGCC_INT32, b.out, want, 4099);
}

static void destroy_busy(int tcp) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = tcp;
  h_run_opts_t o = {.nranks = 2, .body = destroy_busy_body, .config = &cfg,
                    .timeout_s = 30, .name = "destroy_while_a_collective_runs"};
  cr_assert(h_run(&o));
}

Test(misuse, destroy_while_a_collective_runs_shm, .timeout = 40) {
  destroy_busy(0);
}
Test(misuse, destroy_while_a_collective_runs_tcp, .timeout = 40) {
  destroy_busy(1);
}

/* A handle used after destroy (or one that never was a communicator) is
 * RINGCC_ERR_INVALID_ARGUMENT, from every entry point, without reading the
 * freed memory (before: a use after free). */
Test(misuse, use_after_destroy, .timeout = 30) {
  ringcc_unique_id_t id;
  ringcc_result_t r;
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  ringcc_comm_t comm = one_rank(&id, &r);
  cr_assert_eq(r, RINGCC_SUCCESS, "%s", ringcc_comm_last_error(NULL));
  cr_assert_eq(ringcc_comm_destroy(comm), RINGCC_SUCCESS);
  static uint64_t zeros[1024]; /* not a communicator either */
  ringcc_comm_t handles[2] = {comm, (ringcc_comm_t)(void *)zeros};
  void *mem = NULL; /* memory a live communicator could register */
  cr_assert_eq(ringcc_mem_alloc(NULL, 4096, &mem), RINGCC_SUCCESS);
  for (int h = 0; h < 2; h++) {
    ringcc_comm_t c = handles[h];
    int32_t a[4] = {1, 2, 3, 4}, b[4];
    int x;
    char buf[256];
    ringcc_result_t rs;
    ringcc_comm_t out = NULL;
    ringcc_comm_stats_t stats = RINGCC_COMM_STATS_INIT;
    void *got = NULL;
    ringcc_reg_t reg = NULL;
    struct {
      const char *call;
      ringcc_result_t r;
    } calls[] = {
        {"ringcc_allreduce", ringcc_allreduce(a, b, 4, RINGCC_INT32,
                                              RINGCC_SUM, c, NULL)},
        {"ringcc_bcast", ringcc_bcast(a, 4, RINGCC_INT32, 0, c, NULL)},
        {"ringcc_barrier", ringcc_barrier(c, NULL)},
        {"ringcc_send", ringcc_send(a, 4, RINGCC_INT32, 0, c, NULL)},
        {"ringcc_comm_rank", ringcc_comm_rank(c, &x)},
        {"ringcc_comm_size", ringcc_comm_size(c, &x)},
        {"ringcc_comm_get_async_error", ringcc_comm_get_async_error(c, &rs)},
        {"ringcc_comm_report", ringcc_comm_report(c, buf, sizeof buf)},
        {"ringcc_comm_stats", ringcc_comm_stats(c, &stats)},
        {"ringcc_comm_split", ringcc_comm_split(c, 0, 0, &out)},
        {"ringcc_comm_split_type",
         ringcc_comm_split_type(c, RINGCC_SPLIT_HOST, 0, &out)},
        {"ringcc_mem_alloc", ringcc_mem_alloc(c, 4096, &got)},
        {"ringcc_comm_register", ringcc_comm_register(c, mem, 4096, &reg)},
        {"ringcc_comm_deregister", ringcc_comm_deregister(c, reg)},
        {"ringcc_comm_cuda_device", ringcc_comm_cuda_device(c, &x)},
        {"ringcc_comm_revoke", ringcc_comm_revoke(c)},
        {"ringcc_comm_abort", ringcc_comm_abort(c)},
        {"ringcc_comm_destroy", ringcc_comm_destroy(c)},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
      cr_expect_eq(calls[i].r, RINGCC_ERR_INVALID_ARGUMENT,
                   "%s on a %s returned %d (%s)", calls[i].call,
                   h ? "buffer of zeros" : "destroyed communicator",
                   (int)calls[i].r, ringcc_strerror(calls[i].r));
    r = ringcc_allreduce(a, b, 4, RINGCC_INT32, RINGCC_SUM, c, NULL);
    cr_expect(strstr(ringcc_comm_last_error(NULL), "not a live communicator"),
              "the message: %s", ringcc_comm_last_error(NULL));
    cr_expect(strstr(ringcc_comm_last_error(c), "not a live communicator"),
              "ringcc_comm_last_error of the dead handle: %s",
              ringcc_comm_last_error(c));
  }
  cr_expect_eq(ringcc_mem_free(mem), RINGCC_SUCCESS);
}

/* Rank 0 forks after init. In the child every call on the inherited
 * communicator is RINGCC_ERR_INVALID_USAGE naming fork, and destroy frees
 * the child's copy only; the parents then run their collectives as if
 * nothing happened (before: the child's collective ran through the parent's
 * FIFOs and timed out, and its destroy shut the parent's sockets down, so
 * the parents' next call failed). */
static int fork_body(h_ctx_t *ctx) {
  if (ctx->rank == 0) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      int32_t a[8] = {0}, b[8];
      int x, bad = 0;
      ringcc_result_t r = ringcc_allreduce(a, b, 8, RINGCC_INT32, RINGCC_SUM,
                                           ctx->comm, NULL);
      const char *msg = ringcc_comm_last_error(ctx->comm);
      if (r != RINGCC_ERR_INVALID_USAGE || strstr(msg, "fork") == NULL)
        bad = h_fail(ctx, "child: allreduce returned %d (%s): %s", (int)r,
                     ringcc_strerror(r), msg);
      r = ringcc_comm_rank(ctx->comm, &x);
      if (r != RINGCC_ERR_INVALID_USAGE)
        bad = h_fail(ctx, "child: ringcc_comm_rank returned %d", (int)r);
      r = ringcc_comm_destroy(ctx->comm);
      if (r != RINGCC_SUCCESS)
        bad = h_fail(ctx, "child: destroy returned %d (%s)", (int)r,
                     ringcc_strerror(r));
      _exit(bad);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      return h_fail(ctx, "the forked child failed (status 0x%x)", status);
  }
  for (int round = 0; round < 3; round++) {
    int32_t in[1031], out[1031], want[1031];
    h_fill_input(RINGCC_INT32, RINGCC_SUM, ctx->rank, 0, round, in, 1031);
    h_fill_expected(RINGCC_INT32, RINGCC_SUM, ctx->nranks, 0, round, want,
                    1031);
    ringcc_result_t r = ringcc_allreduce(in, out, 1031, RINGCC_INT32,
                                         RINGCC_SUM, ctx->comm, NULL);
    if (r != RINGCC_SUCCESS)
      return h_fail(ctx, "allreduce %d after the fork: %d (%s): %s", round,
                    (int)r, ringcc_strerror(r),
                    ringcc_comm_last_error(ctx->comm));
    if (!h_check_elems(ctx, "allreduce after the fork", RINGCC_INT32, out,
                       want, 1031))
      return 1;
  }
  return 0;
}

static void fork_case(int tcp) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = tcp;
  cfg.timeout_ms = 5000;
  h_run_opts_t o = {.nranks = 2, .body = fork_body, .config = &cfg,
                    .timeout_s = 40, .name = "fork"};
  cr_assert(h_run(&o));
}

Test(misuse, fork_child_cannot_use_the_parents_comm_shm, .timeout = 60) {
  fork_case(0);
}
Test(misuse, fork_child_cannot_use_the_parents_comm_tcp, .timeout = 60) {
  fork_case(1);
}

/* Files in dir whose name starts with prefix. */
static int files_named(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d != NULL)
    closedir(d);
  return n;
}

/* With RINGCC_TRACE, a child forked after init destroys its copy without
 * writing the parent's trace file (before: it wrote the rank's file with
 * the parent's events, which the parent's own destroy then had to
 * overwrite); the parent's destroy still writes it. */
Test(misuse, fork_child_writes_no_trace, .timeout = 30) {
  char dir[] = "/tmp/rcc-trace-XXXXXX";
  ringcc_unique_id_t id;
  ringcc_result_t r;
  cr_assert_not_null(mkdtemp(dir));
  setenv("RINGCC_TRACE", dir, 1);
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  ringcc_comm_t comm = one_rank(&id, &r);
  cr_assert_eq(r, RINGCC_SUCCESS, "init: %s", ringcc_comm_last_error(NULL));
  int32_t a[4] = {1, 2, 3, 4}, b[4];
  cr_assert_eq(ringcc_allreduce(a, b, 4, RINGCC_INT32, RINGCC_SUM, comm,
                                NULL), RINGCC_SUCCESS);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0)
    _exit(ringcc_comm_destroy(comm) == RINGCC_SUCCESS ? 0 : 1);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child's destroy: status 0x%x", status);
  cr_expect_eq(files_named(dir, "ringcc-trace-"), 0,
               "the forked child wrote a trace file into %s", dir);
  cr_assert_eq(ringcc_comm_destroy(comm), RINGCC_SUCCESS);
  cr_expect_eq(files_named(dir, "ringcc-trace-"), 1,
               "the parent's destroy wrote no trace file into %s", dir);
  unsetenv("RINGCC_TRACE");
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

/* Every collective with two buffers refuses partly overlapping ones
 * (before: allreduce and allgather returned success with wrong results),
 * names both ranges, sends nothing, and keeps working; the documented
 * in-place forms still run, exactly. */
static int expect_overlap(h_ctx_t *ctx, const char *what, ringcc_result_t r) {
  const char *msg = ringcc_comm_last_error(ctx->comm);
  if (r != RINGCC_ERR_INVALID_ARGUMENT || strstr(msg, "overlap") == NULL ||
      strstr(msg, "'sendbuf' [") == NULL || strstr(msg, "'recvbuf' [") == NULL)
    return h_fail(ctx, "%s: returned %d (%s): %s", what, (int)r,
                  ringcc_strerror(r), msg);
  return 0;
}

static int overlap_body(h_ctx_t *ctx) {
  enum { N = 4096 };
  int n = ctx->nranks, me = ctx->rank, bad = 0;
  static int32_t buf[(N + 64) * 8];
  int32_t *b = buf;
  ringcc_comm_t c = ctx->comm;
  /* sendbuf and recvbuf 64 elements apart: partly overlapping. */
  bad |= expect_overlap(ctx, "allreduce", ringcc_allreduce(
      b, b + 64, N, RINGCC_INT32, RINGCC_SUM, c, NULL));
  bad |= expect_overlap(ctx, "reduce at the root", ringcc_reduce(
      b, b + 64, N, RINGCC_INT32, RINGCC_SUM, me, c, NULL));
  bad |= expect_overlap(ctx, "reduce_scatter", ringcc_reduce_scatter(
      b, b + (size_t)me * N + 64, N, RINGCC_INT32, RINGCC_SUM, c, NULL));
  bad |= expect_overlap(ctx, "allgather", ringcc_allgather(
      b + (size_t)me * N + 64, b, N, RINGCC_INT32, c, NULL));
  bad |= expect_overlap(ctx, "alltoall", ringcc_alltoall(
      b, b + 64, N, RINGCC_INT32, c, NULL));
  bad |= expect_overlap(ctx, "allreduce, recvbuf first", ringcc_allreduce(
      b + 64, b, N, RINGCC_INT32, RINGCC_SUM, c, NULL));
  if (bad)
    return 1;
  /* The in-place forms, exactly. */
  int32_t want[N];
  h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, 9, b, N);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, n, 0, 9, want, N);
  ringcc_result_t r = ringcc_allreduce(b, b, N, RINGCC_INT32, RINGCC_SUM, c,
                                       NULL);
  if (r != RINGCC_SUCCESS || !h_check_elems(ctx, "allreduce in place",
                                            RINGCC_INT32, b, want, N))
    return h_fail(ctx, "allreduce in place: %d", (int)r);
  h_fill_pattern(RINGCC_INT32, (uint64_t)me, 0, 3, b + (size_t)me * N, N);
  r = ringcc_allgather(b + (size_t)me * N, b, N, RINGCC_INT32, c, NULL);
  for (int q = 0; q < n && r == RINGCC_SUCCESS; q++) {
    h_fill_pattern(RINGCC_INT32, (uint64_t)q, 0, 3, want, N);
    if (!h_check_elems(ctx, "allgather in place", RINGCC_INT32,
                       b + (size_t)q * N, want, N))
      return 1;
  }
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "allgather in place: %d", (int)r);
  /* A reduce's recvbuf away from the root is not used: no overlap there. */
  if (me != 0) {
    h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, 4, b, N);
    r = ringcc_reduce(b, b + 64, N, RINGCC_INT32, RINGCC_SUM, 0, c, NULL);
  } else {
    static int32_t out[N];
    h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, 4, b, N);
    r = ringcc_reduce(b, out, N, RINGCC_INT32, RINGCC_SUM, 0, c, NULL);
    h_fill_expected(RINGCC_INT32, RINGCC_SUM, n, 0, 4, want, N);
    if (r == RINGCC_SUCCESS &&
        !h_check_elems(ctx, "reduce", RINGCC_INT32, out, want, N))
      return 1;
  }
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "reduce with an unused overlapping recvbuf: %d (%s)",
                  (int)r, ringcc_comm_last_error(c));
  return 0;
}

Test(misuse, partly_overlapping_buffers_refused, .timeout = 40) {
  h_run_opts_t o = {.nranks = 3, .body = overlap_body, .timeout_s = 30,
                    .name = "overlap"};
  cr_assert(h_run(&o));
}

/* ---- ptrace: the exception only where cross-memory attach can run -------- */

/* What the library set PR_SET_PTRACER to: test/prctl_spy.c is this
 * binary's prctl (libringcc.a, linked statically, calls it). */

struct ptracer_case {
  int shm_disable;
  int algo;
  int want_set; /* PR_SET_PTRACER_ANY while the communicator lives */
};

static int ptracer_body(h_ctx_t *ctx) {
  const struct ptracer_case *c = ctx->arg;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = c->shm_disable;
  cfg.algo = c->algo;
  ringcc_comm_t comm;
  ringcc_result_t r = ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank,
                                       &cfg);
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "init: %s", ringcc_comm_last_error(NULL));
  int set = h_ptracer_calls() > 0 &&
            h_ptracer_last() == (unsigned long)PR_SET_PTRACER_ANY;
  int calls = h_ptracer_calls();
  ringcc_comm_destroy(comm);
  if (set != c->want_set)
    return h_fail(ctx, "shm_disable %d, algo %d: PR_SET_PTRACER_ANY is %s "
                  "after init (%d prctl calls), expected %s", c->shm_disable,
                  c->algo, set ? "set" : "not set", calls,
                  c->want_set ? "set" : "not set");
  if (h_ptracer_calls() > 0 && h_ptracer_last() != 0)
    return h_fail(ctx, "PR_SET_PTRACER is still %lu after destroy (not "
                  "withdrawn)", h_ptracer_last());
  return 0;
}

static void ptracer_case(int shm_disable, int algo, int want_set) {
  struct ptracer_case c = {shm_disable, algo, want_set};
  h_run_opts_t o = {.nranks = 2, .body = ptracer_body, .arg = &c,
                    .skip_init = true, .timeout_s = 30, .name = "ptracer"};
  cr_assert(h_run(&o));
}

/* Shared memory disabled, or the algorithm not forced: no rank may read
 * another's memory outside a call, so none allows it past init (before:
 * every rank, always; under auto the ranks allow it while they probe each
 * other at init, for Gather and Scatter, and withdraw it before init
 * returns). */
Test(ptracer, not_set_without_shared_memory, .timeout = 40) {
  ptracer_case(1, RINGCC_ALGO_CMA, 0);
}
Test(ptracer, not_set_when_another_algorithm_is_forced, .timeout = 40) {
  ptracer_case(0, RINGCC_ALGO_RING, 0);
}
Test(ptracer, not_set_past_init_by_default, .timeout = 40) {
  ptracer_case(0, -1, 0);
}
/* Forced on one host: set while the communicator lives, withdrawn at
 * destroy (before: never withdrawn). */
Test(ptracer, set_for_cma_and_withdrawn_at_destroy, .timeout = 40) {
  ptracer_case(0, RINGCC_ALGO_CMA, 1);
}

/* Under the tuner, a Gather and a Scatter by cross-memory attach (1 MiB
 * blocks, one host): the root allows its peers for the call and withdraws
 * it before returning; a peer never allows anything. */
static int ptracer_call_body(h_ctx_t *ctx) {
  size_t block = 1 << 20, n = (size_t)ctx->nranks;
  char *one = h_xmalloc(block), *many = h_xmalloc(block * n);
  memset(one, ctx->rank + 1, block);
  int before = h_ptracer_calls();
  ringcc_result_t r = ringcc_gather(one, many, block, RINGCC_UINT8, 0,
                                    ctx->comm, NULL);
  if (r == RINGCC_SUCCESS)
    r = ringcc_scatter(many, one, block, RINGCC_UINT8, 0, ctx->comm, NULL);
  int calls = h_ptracer_calls() - before;
  int bad = 0;
  for (size_t i = 0; r == RINGCC_SUCCESS && ctx->rank == 0 && i < n * block;
       i += 4093)
    bad |= many[i] != (char)(i / block + 1);
  for (size_t i = 0; r == RINGCC_SUCCESS && i < block; i += 4093)
    bad |= one[i] != (char)(ctx->rank + 1);
  free(one);
  free(many);
  if (r != RINGCC_SUCCESS || bad)
    return h_fail(ctx, "gather/scatter: %s%s", ringcc_strerror(r),
                  bad ? " (wrong bytes)" : "");
  int scope = h_yama_scope();
  if (ctx->rank == 0 && calls != (scope < 2 ? 4 : 0))
    return h_fail(ctx, "the root made %d prctl calls in a gather and a "
                  "scatter, expected %d (allow, withdraw, each)", calls,
                  scope < 2 ? 4 : 0);
  if (ctx->rank != 0 && calls != 0)
    return h_fail(ctx, "a peer made %d prctl calls, expected none", calls);
  if (h_ptracer_calls() > 0 && h_ptracer_last() != 0)
    return h_fail(ctx, "PR_SET_PTRACER is %lu after the calls (not "
                  "withdrawn)", h_ptracer_last());
  return 0;
}

/* A rank's prctl calls in what it did were want (allow, withdraw: where
 * Yama lets cross-memory attach run), and the exception is withdrawn. */
static int ptracer_calls_were(h_ctx_t *ctx, int calls, int want,
                              const char *did) {
  if (calls != want)
    return h_fail(ctx, "rank %d made %d prctl calls in %s, expected %d "
                  "(allow, withdraw)", ctx->rank, calls, did, want);
  if (h_ptracer_calls() > 0 && h_ptracer_last() != 0)
    return h_fail(ctx, "PR_SET_PTRACER is %lu after the call (not "
                  "withdrawn)", h_ptracer_last());
  return 0;
}

/* Under the tuner, an AllToAllv with 1 MiB blocks reads them in place:
 * every rank is a sender whose buffer its peers read, so every rank allows
 * them for the call (allow, withdraw) and withdraws before returning. */
static int ptracer_a2av_body(h_ctx_t *ctx) {
  size_t block = 1 << 20, n = (size_t)ctx->nranks;
  char *src = h_xmalloc(block * n), *dst = h_xmalloc(block * n);
  size_t *counts = h_xmalloc(n * sizeof(size_t));
  size_t *displs = h_xmalloc(n * sizeof(size_t));
  for (size_t p = 0; p < n; p++) {
    counts[p] = block;
    displs[p] = p * block;
    memset(src + p * block, (int)(ctx->rank * n + p + 1), block);
  }
  int before = h_ptracer_calls();
  ringcc_result_t r = ringcc_alltoallv(src, counts, displs, dst, counts,
                                       displs, RINGCC_UINT8, ctx->comm, NULL);
  int calls = h_ptracer_calls() - before, bad = 0;
  for (size_t i = 0; r == RINGCC_SUCCESS && i < n * block; i += 4093)
    bad |= dst[i] != (char)((i / block) * n + (size_t)ctx->rank + 1);
  free(src);
  free(dst);
  free(counts);
  free(displs);
  if (r != RINGCC_SUCCESS || bad)
    return h_fail(ctx, "alltoallv: %s%s", ringcc_strerror(r),
                  bad ? " (wrong bytes)" : "");
  return ptracer_calls_were(ctx, calls, h_yama_scope() < 2 ? 2 : 0,
                            "an alltoallv of large blocks");
}

Test(ptracer, held_by_every_sender_for_an_alltoallv, .timeout = 40) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_AUTO;
  h_run_opts_t o = {.nranks = 3, .body = ptracer_a2av_body, .config = &cfg,
                    .timeout_s = 30, .name = "ptracer alltoallv"};
  cr_assert(h_run(&o));
}

/* Under the tuner, a 1 MiB send (past the FIFO's capacity: read in place,
 * lib/exec/exec_p2p_place.c), plain and in a group: the sender allows its
 * receiver for the call and withdraws before returning; the receiver and a
 * send that fits the FIFO (256 KiB) make no prctl call. */
static int ptracer_p2p_body(h_ctx_t *ctx) {
  size_t big = 1 << 20, small = 256 << 10;
  char *buf = h_xmalloc(big);
  int before = h_ptracer_calls(), bad = 0;
  ringcc_result_t r = RINGCC_SUCCESS;
  memset(buf, ctx->rank == 0 ? 7 : 0, big);
  for (int k = 0; k < 3 && r == RINGCC_SUCCESS; k++) {
    size_t bytes = k == 2 ? small : big;
    if (k == 1)
      r = ringcc_group_start();
    if (r == RINGCC_SUCCESS)
      r = ctx->rank == 0
              ? ringcc_send(buf, bytes, RINGCC_UINT8, 1, ctx->comm, NULL)
              : ringcc_recv(buf, bytes, RINGCC_UINT8, 0, ctx->comm, NULL);
    if (k == 1 && r == RINGCC_SUCCESS)
      r = ringcc_group_end();
    for (size_t i = 0; r == RINGCC_SUCCESS && i < bytes; i++)
      bad |= buf[i] != 7;
  }
  int calls = h_ptracer_calls() - before;
  free(buf);
  if (r != RINGCC_SUCCESS || bad)
    return h_fail(ctx, "send/recv: %s%s", ringcc_strerror(r),
                  bad ? " (wrong bytes)" : "");
  return ptracer_calls_were(ctx, calls,
                            ctx->rank == 0 && h_yama_scope() < 2 ? 4 : 0,
                            ctx->rank == 0
                                ? "two large sends (plain, grouped) and a "
                                  "small one: 2 each large send"
                                : "receiving them");
}

Test(ptracer, held_by_a_large_sender_for_the_call, .timeout = 40) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_AUTO;
  h_run_opts_t o = {.nranks = 2, .body = ptracer_p2p_body, .config = &cfg,
                    .timeout_s = 30, .name = "ptracer send/recv"};
  cr_assert(h_run(&o));
}

Test(ptracer, held_by_the_root_for_a_cma_gather, .timeout = 40) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_AUTO;
  h_run_opts_t o = {.nranks = 2, .body = ptracer_call_body, .config = &cfg,
                    .timeout_s = 30, .name = "ptracer per call"};
  cr_assert(h_run(&o));
}

/* ---- /dev/shm: segments of dead creators are swept ---------------------- */

static void make_segment(char *name, size_t len, const char *boot,
                         unsigned long long pidns, int pid) {
  uint8_t rnd[16];
  cr_assert_eq(rcc_random_bytes(rnd, sizeof rnd), 0);
  rcc_shm_name_format(name, len, boot, pidns, pid, rnd);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  cr_assert(fd >= 0, "shm_open %s: %s", name, strerror(errno));
  close(fd);
}

static bool segment_exists(const char *name) {
  char path[200];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  return access(path, F_OK) == 0;
}

/* A rank killed during init leaves its segment. The next init on the host
 * removes the segments of its naming whose creator is gone (same boot, same
 * pid namespace), and only those (before: nothing removed them). */
Test(shm, init_sweeps_segments_of_dead_creators, .timeout = 30) {
  char boot[RCC_SHM_BOOT_DIGITS + 1], dead[RCC_SHM_NAME_MAX],
      alive[RCC_SHM_NAME_MAX], other_boot[RCC_SHM_NAME_MAX],
      other_ns[RCC_SHM_NAME_MAX];
  unsigned long long pidns;
  rcc_shm_identity(boot, &pidns);
  pid_t child = fork();
  if (child == 0)
    _exit(0);
  cr_assert(child > 0 && waitpid(child, NULL, 0) == child);
  make_segment(dead, sizeof dead, boot, pidns, child); /* creator gone */
  make_segment(alive, sizeof alive, boot, pidns, getpid());
  make_segment(other_boot, sizeof other_boot, "0123456789ab", pidns, child);
  make_segment(other_ns, sizeof other_ns, boot, pidns + 1, child);

  ringcc_unique_id_t id;
  ringcc_result_t r;
  cr_assert_eq(ringcc_get_unique_id(&id), RINGCC_SUCCESS);
  ringcc_comm_t comm = one_rank(&id, &r);
  cr_assert_eq(r, RINGCC_SUCCESS, "%s", ringcc_comm_last_error(NULL));
  ringcc_comm_destroy(comm);
  bool gone = !segment_exists(dead), kept[3] = {segment_exists(alive),
                                                segment_exists(other_boot),
                                                segment_exists(other_ns)};
  shm_unlink(dead);
  shm_unlink(alive);
  shm_unlink(other_boot);
  shm_unlink(other_ns);
  cr_expect(gone, "%s (creator pid %d exited) was not removed at init", dead,
            (int)child);
  cr_expect(kept[0], "%s (this live process's) was removed", alive);
  cr_expect(kept[1], "%s (another boot's) was removed", other_boot);
  cr_expect(kept[2], "%s (another pid namespace's) was removed", other_ns);
}
