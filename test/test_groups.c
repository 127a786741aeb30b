/*
 * test_groups.c - groups (ringcc_group_start/end) and requests
 * (ringcc_group_end_async, ringcc_test, ringcc_wait), over shared memory and
 * TCP, with real ranks.
 *
 * Every message carries a pattern that names its sender, receiver and index
 * (h_fill_pattern), and every element received is checked. The exchanges
 * that hang without a group (both ranks sending 8 MiB first; random orders
 * of large sends and receives) run inside one; the hang itself is checked
 * too, outside a group, against a short deadline and its message.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MIB ((size_t)1 << 20)
#define MAX_RANKS 8

static bool ok(h_ctx_t *h, ringcc_comm_t comm, ringcc_result_t r,
               const char *what) {
  if (r == RINGCC_SUCCESS)
    return true;
  h_fail(h, "%s: %s (%s)", what, ringcc_strerror(r),
         ringcc_comm_last_error(comm));
  return false;
}

/* The message k from rank `from` to rank `to`: its pattern's owner. */
static uint64_t owner(int from, int to, int k) {
  return ((uint64_t)from << 20) | ((uint64_t)to << 10) | (uint64_t)k;
}

static bool check_msg(h_ctx_t *h, const char *what, ringcc_datatype_t dt,
                      const void *got, int from, int to, int k, size_t n) {
  void *want = h_xmalloc(n * h_dt_size(dt));
  h_fill_pattern(dt, owner(from, to, k), 0, 7, want, n);
  bool same = h_check_elems(h, what, dt, got, want, n);
  free(want);
  return same;
}

static ringcc_config_t config(bool tcp) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = tcp ? 1 : 0;
  cfg.timeout_ms = 20000;
  return cfg;
}

static void run(const char *name, int n, h_body_fn body, void *arg, bool tcp,
                int extra_ids) {
  ringcc_config_t cfg = config(tcp);
  h_run_opts_t o = {.nranks = n, .body = body, .arg = arg, .config = &cfg,
                    .timeout_s = 60, .name = name, .n_extra_ids = extra_ids};
  cr_assert(h_run(&o), "%s (n=%d, %s) failed", name, n, tcp ? "TCP" : "shm");
}

/* ---- both sides send 8 MiB first ----------------------------------------- */

/* Every rank sends 8 MiB to each other rank, then receives from each: the
 * order that deadlocks without a group (a send that outgrows the FIFO waits
 * for its receiver). */
static int symmetric_body(h_ctx_t *h) {
  size_t n = 8 * MIB / 4;
  int p = h->nranks;
  char *send = h_xmalloc((size_t)p * n * 4), *recv = h_xmalloc((size_t)p * n * 4);
  for (int q = 0; q < p; q++)
    h_fill_pattern(RINGCC_INT32, owner(h->rank, q, 0), 0, 7, send + q * n * 4, n);
  memset(recv, 0, (size_t)p * n * 4);
  bool good = ok(h, h->comm, ringcc_group_start(), "group_start");
  for (int q = 0; q < p && good; q++)
    if (q != h->rank)
      good = ok(h, h->comm, ringcc_send(send + q * n * 4, n, RINGCC_INT32, q,
                                        h->comm, NULL), "send");
  for (int q = 0; q < p && good; q++)
    if (q != h->rank)
      good = ok(h, h->comm, ringcc_recv(recv + q * n * 4, n, RINGCC_INT32, q,
                                        h->comm, NULL), "recv");
  good = good && ok(h, h->comm, ringcc_group_end(), "group_end");
  for (int q = 0; q < p && good; q++)
    if (q != h->rank)
      good = check_msg(h, "8 MiB from a rank that sent first", RINGCC_INT32,
                       recv + q * n * 4, q, h->rank, 0, n);
  free(send);
  free(recv);
  return good ? 0 : 1;
}

Test(groups, symmetric_8mib_shm, .timeout = 120) {
  run("symmetric 8 MiB", 2, symmetric_body, NULL, false, 0);
  run("symmetric 8 MiB", 3, symmetric_body, NULL, false, 0);
}
Test(groups, symmetric_8mib_tcp, .timeout = 120) {
  run("symmetric 8 MiB", 2, symmetric_body, NULL, true, 0);
}

/* Blocking calls, outside a group: a token one way, then a message larger
 * than the FIFO the other way, round after round (a pipeline's control
 * message and its payload). The receiver frees slots while the network
 * engine's thread serves the sockets alone; it must take the rest of the
 * message when it comes (before b256f0d it slept through it until its
 * 100 ms round). Every element checked; the time of a round trip is
 * printed, not judged. */
static int token_then_large_body(h_ctx_t *h) {
  size_t n = 4 * MIB / 4 + 3;
  char *buf = h_xmalloc(n * 4);
  double t0 = h_now_s();
  const int rounds = 12;
  for (int k = 0; k < rounds; k++) {
    int32_t token = k;
    if (h->rank == 0) {
      if (!ok(h, h->comm, ringcc_send(&token, 1, RINGCC_INT32, 1, h->comm,
                                      NULL), "send token") ||
          !ok(h, h->comm, ringcc_recv(buf, n, RINGCC_INT32, 1, h->comm, NULL),
              "recv large") ||
          !check_msg(h, "a large message after a token", RINGCC_INT32, buf,
                     1, 0, k, n))
        return 1;
    } else {
      token = -1;
      if (!ok(h, h->comm, ringcc_recv(&token, 1, RINGCC_INT32, 0, h->comm,
                                      NULL), "recv token"))
        return 1;
      if (token != k)
        return h_fail(h, "round %d: the token says %d", k, (int)token);
      h_fill_pattern(RINGCC_INT32, owner(1, 0, k), 0, 7, buf, n);
      if (!ok(h, h->comm, ringcc_send(buf, n, RINGCC_INT32, 0, h->comm, NULL),
              "send large"))
        return 1;
    }
  }
  if (h->rank == 0)
    printf("token then 4 MiB, blocking, 2 ranks: %.2f ms a round trip\n",
           (h_now_s() - t0) * 1e3 / rounds);
  free(buf);
  return 0;
}

Test(p2p, token_then_large_blocking_tcp, .timeout = 120) {
  run("token then large", 2, token_then_large_body, NULL, true, 0);
}
Test(p2p, token_then_large_blocking_shm, .timeout = 120) {
  run("token then large", 2, token_then_large_body, NULL, false, 0);
}

/* Outside a group the same exchange still hangs, and says what to do. */
static int send_send_body(h_ctx_t *h) {
  size_t n = 8 * MIB / 4;
  char *buf = h_xmalloc(n * 4);
  memset(buf, 0, n * 4);
  ringcc_result_t r =
      ringcc_send(buf, n, RINGCC_INT32, 1 - h->rank, h->comm, NULL);
  const char *why = ringcc_comm_last_error(h->comm);
  free(buf);
  if (r != RINGCC_ERR_TIMEOUT)
    return h_fail(h, "two ranks sending 8 MiB first returned %s, expected "
                  "RINGCC_ERR_TIMEOUT", ringcc_strerror(r));
  if (strstr(why, "use a group (ringcc_group_start/end)") == NULL)
    return h_fail(h, "the hang's message does not point to groups: %s", why);
  return 0;
}

Test(groups, send_send_outside_a_group_times_out, .timeout = 60) {
  ringcc_config_t cfg = config(false);
  cfg.timeout_ms = 1500;
  h_run_opts_t o = {.nranks = 2, .body = send_send_body, .config = &cfg,
                    .timeout_s = 30, .name = "send-send"};
  cr_assert(h_run(&o));
}

/* ---- random orders, random sizes, messages to oneself ---------------------- */

/* Messages of one run: msgs[from][to] of them, message k of count(from, to,
 * k) elements of dtype(from, to, k); every rank computes the same. */
struct perm_arg {
  uint64_t seed;
  size_t max_elems;
};

static uint64_t rnd(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  return h_hash3(seed ^ a * 0x9e3779b97f4a7c15ull, b, c);
}
static int nmsgs(const struct perm_arg *a, int from, int to) {
  return (int)(rnd(a->seed, 1, (uint64_t)from, (uint64_t)to) % 3);
}
static size_t msg_count(const struct perm_arg *a, int from, int to, int k) {
  uint64_t x = rnd(a->seed, 2, owner(from, to, k), 0);
  if (x % 5 == 0)
    return 0; /* an empty message still matches in order */
  return (size_t)(x >> 8) % (a->max_elems + 1);
}
static ringcc_datatype_t msg_dt(const struct perm_arg *a, int from, int to,
                                int k) {
  static const ringcc_datatype_t dts[] = {RINGCC_UINT8, RINGCC_FLOAT16,
                                          RINGCC_INT32, RINGCC_FLOAT64};
  return dts[rnd(a->seed, 3, owner(from, to, k), 0) % 4];
}

struct op {
  int send, peer, k;
  size_t count;
  ringcc_datatype_t dt;
  void *buf;
};

static int perm_body(h_ctx_t *h) {
  const struct perm_arg *a = h->arg;
  int p = h->nranks, me = h->rank, nops = 0;
  struct op *ops = h_xmalloc(sizeof(*ops) * (size_t)p * 4);
  for (int q = 0; q < p; q++) {
    for (int k = 0; k < nmsgs(a, me, q); k++)
      ops[nops++] = (struct op){1, q, k, 0, 0, NULL};
    for (int k = 0; k < nmsgs(a, q, me); k++)
      ops[nops++] = (struct op){0, q, k, 0, 0, NULL};
  }
  /* A random order; then message indices per (peer, direction) in the order
   * posted, as matching goes. */
  for (int i = nops - 1; i > 0; i--) {
    int j = (int)(rnd(a->seed, 4, (uint64_t)me, (uint64_t)i) % (uint64_t)(i + 1));
    struct op t = ops[i];
    ops[i] = ops[j];
    ops[j] = t;
  }
  int seen[2][MAX_RANKS] = {{0}};
  for (int i = 0; i < nops; i++) {
    struct op *o = &ops[i];
    o->k = seen[o->send][o->peer]++;
    int from = o->send ? me : o->peer, to = o->send ? o->peer : me;
    o->count = msg_count(a, from, to, o->k);
    o->dt = msg_dt(a, from, to, o->k);
    o->buf = h_xmalloc(o->count * h_dt_size(o->dt));
    if (o->send)
      h_fill_pattern(o->dt, owner(from, to, o->k), 0, 7, o->buf, o->count);
    else
      memset(o->buf, 0xee, o->count * h_dt_size(o->dt));
  }
  bool good = ok(h, h->comm, ringcc_group_start(), "group_start");
  for (int i = 0; i < nops && good; i++) {
    struct op *o = &ops[i];
    good = ok(h, h->comm,
              o->send ? ringcc_send(o->buf, o->count, o->dt, o->peer, h->comm, NULL)
                      : ringcc_recv(o->buf, o->count, o->dt, o->peer, h->comm, NULL),
              o->send ? "send in a group" : "recv in a group");
  }
  good = good && ok(h, h->comm, ringcc_group_end(), "group_end");
  for (int i = 0; i < nops && good; i++) {
    struct op *o = &ops[i];
    char what[96];
    snprintf(what, sizeof what, "message %d from rank %d (%zu x %s)", o->k,
             o->peer, o->count, h_dt_name(o->dt));
    if (!o->send)
      good = check_msg(h, what, o->dt, o->buf, o->peer, me, o->k, o->count);
  }
  for (int i = 0; i < nops; i++)
    free(ops[i].buf);
  free(ops);
  return good ? 0 : 1;
}

Test(groups, random_orders_shm, .timeout = 180) {
  for (int n = 1; n <= 8; n++) {
    struct perm_arg a = {0x5eed0000u + (uint64_t)n, n <= 4 ? 400000 : 100000};
    run("random orders", n, perm_body, &a, false, 0);
  }
}
Test(groups, random_orders_tcp, .timeout = 180) {
  for (int n = 2; n <= 4; n++) {
    struct perm_arg a = {0x7c900000u + (uint64_t)n, 300000};
    run("random orders", n, perm_body, &a, true, 0);
  }
}

/* ---- a collective and point-to-point in one group ------------------------ */

static int mixed_body(h_ctx_t *h) {
  int p = h->nranks, me = h->rank, next = (me + 1) % p, prev = (me + p - 1) % p;
  size_t n = 3 * MIB / 4 + 5, m = 100003;
  float *x = h_xmalloc(m * 4), *want = h_xmalloc(m * 4);
  int32_t *out = h_xmalloc(n * 4), *in = h_xmalloc(n * 4);
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, me, 0, 3, x, m);
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, p, 0, 3, want, m);
  h_fill_pattern(RINGCC_INT32, owner(me, next, 0), 0, 7, out, n);
  bool good = ok(h, h->comm, ringcc_group_start(), "group_start");
  /* Half the ranks post the p2p first: the group orders nothing by it. */
  if (me % 2) {
    good = good && ok(h, h->comm, ringcc_send(out, n, RINGCC_INT32, next, h->comm, NULL), "send");
    good = good && ok(h, h->comm, ringcc_recv(in, n, RINGCC_INT32, prev, h->comm, NULL), "recv");
  }
  good = good && ok(h, h->comm, ringcc_allreduce(x, x, m, RINGCC_FLOAT32, RINGCC_SUM, h->comm, NULL), "allreduce");
  if (me % 2 == 0) {
    good = good && ok(h, h->comm, ringcc_recv(in, n, RINGCC_INT32, prev, h->comm, NULL), "recv");
    good = good && ok(h, h->comm, ringcc_send(out, n, RINGCC_INT32, next, h->comm, NULL), "send");
  }
  good = good && ok(h, h->comm, ringcc_group_end(), "group_end");
  good = good && h_check_elems(h, "allreduce in a group", RINGCC_FLOAT32, x, want, m);
  good = good && check_msg(h, "recv in a group with an allreduce",
                           RINGCC_INT32, in, prev, me, 0, n);
  free(x), free(want), free(out), free(in);
  return good ? 0 : 1;
}

Test(groups, collective_and_p2p, .timeout = 120) {
  for (int n = 2; n <= 5; n += 3)
    run("allreduce + send/recv", n, mixed_body, NULL, false, 0);
  run("allreduce + send/recv", 3, mixed_body, NULL, true, 0);
}

/* ---- two communicators in one group -------------------------------------- */

/* Rank 0 sends 8 MiB on comm A and receives 8 MiB on comm B; rank 1 does it
 * the other way round, posting B's send first. Run one communicator after
 * the other and each rank waits for the other's second: the group must
 * progress both at once. Then an allreduce on each in one group. */
static int two_comms_body(h_ctx_t *h) {
  ringcc_comm_t b = NULL;
  int me = h->rank, other = 1 - me;
  ringcc_config_t cfg = *h->config; /* the first one's transport */
  if (!ok(h, NULL, ringcc_comm_init(&b, h->nranks, &h->extra_ids[0], me, &cfg),
          "comm_init (second communicator)"))
    return 1;
  size_t n = 8 * MIB / 8;
  double *s = h_xmalloc(n * 8), *r = h_xmalloc(n * 8);
  h_fill_pattern(RINGCC_FLOAT64, owner(me, other, 0), 0, 7, s, n);
  ringcc_comm_t on_send = me == 0 ? h->comm : b, on_recv = me == 0 ? b : h->comm;
  bool good = ok(h, NULL, ringcc_group_start(), "group_start");
  good = good && ok(h, on_send, ringcc_send(s, n, RINGCC_FLOAT64, other, on_send, NULL), "send");
  good = good && ok(h, on_recv, ringcc_recv(r, n, RINGCC_FLOAT64, other, on_recv, NULL), "recv");
  good = good && ok(h, NULL, ringcc_group_end(), "group_end (two communicators)");
  good = good && check_msg(h, "8 MiB on the other communicator", RINGCC_FLOAT64, r, other, me, 0, n);
  int64_t va = me + 1, vb = 10 * (me + 1);
  good = good && ok(h, NULL, ringcc_group_start(), "group_start");
  good = good && ok(h, b, ringcc_allreduce(&vb, &vb, 1, RINGCC_INT64, RINGCC_SUM, b, NULL), "allreduce b");
  good = good && ok(h, h->comm, ringcc_allreduce(&va, &va, 1, RINGCC_INT64, RINGCC_SUM, h->comm, NULL), "allreduce a");
  good = good && ok(h, NULL, ringcc_group_end(), "group_end (two allreduces)");
  if (good && (va != 3 || vb != 30))
    good = !h_fail(h, "allreduces in one group on two communicators gave %lld "
                   "and %lld, expected 3 and 30", (long long)va, (long long)vb);
  free(s), free(r);
  good = ok(h, b, ringcc_comm_destroy(b), "comm_destroy (second)") && good;
  return good ? 0 : 1;
}

Test(groups, two_communicators, .timeout = 120) {
  run("two communicators", 2, two_comms_body, NULL, false, 1);
  run("two communicators", 2, two_comms_body, NULL, true, 1);
}

/* One thread driving both ranks' communicators (as ncclCommInitAll users
 * do): the ranks are threads; rank 1 hands its communicator to rank 0 and
 * waits, and rank 0 runs both ranks' parts in one group: an allreduce on
 * each, and 8 MiB each way, each rank sending first. */
struct drive_arg {
  ringcc_comm_t comm1;
  int state; /* 1: comm1 handed over; 2: rank 0 is done with it */
};

static int drive_body(h_ctx_t *h) {
  struct drive_arg *a = h->arg;
  if (h->rank == 1) {
    __atomic_store_n(&a->comm1, h->comm, __ATOMIC_RELEASE);
    __atomic_store_n(&a->state, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&a->state, __ATOMIC_ACQUIRE) != 2)
      h_sleep_ms(1);
    return 0;
  }
  while (__atomic_load_n(&a->state, __ATOMIC_ACQUIRE) != 1)
    h_sleep_ms(1);
  ringcc_comm_t c[2] = {h->comm, a->comm1};
  size_t n = 8 * MIB / 4;
  int32_t *s[2], *r[2], v[2] = {5, 7};
  bool good = ok(h, NULL, ringcc_group_start(), "group_start");
  for (int k = 0; k < 2; k++) {
    s[k] = h_xmalloc(n * 4), r[k] = h_xmalloc(n * 4);
    h_fill_pattern(RINGCC_INT32, owner(k, 1 - k, 0), 0, 7, s[k], n);
    good = good && ok(h, c[k], ringcc_allreduce(&v[k], &v[k], 1, RINGCC_INT32, RINGCC_SUM, c[k], NULL), "allreduce");
    good = good && ok(h, c[k], ringcc_send(s[k], n, RINGCC_INT32, 1 - k, c[k], NULL), "send");
  }
  for (int k = 0; k < 2; k++)
    good = good && ok(h, c[k], ringcc_recv(r[k], n, RINGCC_INT32, 1 - k, c[k], NULL), "recv");
  good = good && ok(h, NULL, ringcc_group_end(), "group_end (both ranks)");
  for (int k = 0; k < 2 && good; k++) {
    good = check_msg(h, "8 MiB between two communicators of one thread",
                     RINGCC_INT32, r[k], 1 - k, k, 0, n);
    if (good && v[k] != 12)
      good = !h_fail(h, "allreduce of rank %d in the group gave %d, not 12", k, v[k]);
  }
  for (int k = 0; k < 2; k++)
    free(s[k]), free(r[k]);
  __atomic_store_n(&a->state, 2, __ATOMIC_RELEASE);
  return good ? 0 : 1;
}

Test(groups, one_thread_drives_two_ranks, .timeout = 120) {
  for (int tcp = 0; tcp <= 1; tcp++) {
    struct drive_arg a = {NULL, 0};
    ringcc_config_t cfg = config(tcp);
    h_run_opts_t o = {.nranks = 2, .body = drive_body, .arg = &a,
                      .config = &cfg, .timeout_s = 60, .threads = true,
                      .name = tcp ? "one thread, two ranks, TCP"
                                  : "one thread, two ranks"};
    cr_assert(h_run(&o));
  }
}

/* ---- usage ------------------------------------------------------------------ */

static int usage_body(h_ctx_t *h) {
  int p = h->nranks, me = h->rank, next = (me + 1) % p, prev = (me + p - 1) % p;
  ringcc_request_t req = (ringcc_request_t)&req;
  if (ringcc_group_end() != RINGCC_ERR_INVALID_USAGE)
    return h_fail(h, "group_end without group_start did not return INVALID_USAGE");
  if (ringcc_group_end_async(&req) != RINGCC_ERR_INVALID_USAGE || req != NULL)
    return h_fail(h, "group_end_async without group_start did not return "
                  "INVALID_USAGE with *req NULL");
  size_t n = MIB + 3;
  uint8_t *s = h_xmalloc(n), *r = h_xmalloc(n), *self = h_xmalloc(n);
  h_fill_pattern(RINGCC_UINT8, owner(me, next, 0), 0, 7, s, n);
  /* Nested: only the outermost end runs the group. */
  bool good = ok(h, h->comm, ringcc_group_start(), "group_start");
  good = good && ok(h, h->comm, ringcc_group_start(), "group_start (nested)");
  good = good && ok(h, h->comm, ringcc_send(s, n, RINGCC_UINT8, next, h->comm, NULL), "send");
  if (good && ringcc_group_end_async(&req) != RINGCC_ERR_INVALID_USAGE)
    good = !h_fail(h, "group_end_async in an inner group was not refused");
  good = good && ok(h, h->comm, ringcc_group_end(), "group_end (inner)");
  /* Bad arguments fail the call and leave the group as it was. */
  ringcc_result_t bad = ringcc_recv(r, n, RINGCC_UINT8, p, h->comm, NULL);
  if (good && bad != RINGCC_ERR_INVALID_ARGUMENT)
    good = !h_fail(h, "recv from rank %d (nranks) in a group returned %s", p,
                   ringcc_strerror(bad));
  bad = ringcc_send(s, n, (ringcc_datatype_t)99, next, h->comm, NULL);
  if (good && (bad != RINGCC_ERR_INVALID_ARGUMENT ||
               !strstr(ringcc_comm_last_error(h->comm), "'datatype'")))
    good = !h_fail(h, "a send of datatype 99 in a group returned %s: %s",
                   ringcc_strerror(bad), ringcc_comm_last_error(h->comm));
  bad = ringcc_allreduce(NULL, r, 5, RINGCC_UINT8, RINGCC_SUM, h->comm, NULL);
  if (good && bad != RINGCC_ERR_INVALID_ARGUMENT)
    good = !h_fail(h, "allreduce of NULL in a group returned %s", ringcc_strerror(bad));
  good = good && ok(h, h->comm, ringcc_group_start(), "group_start (nested)");
  good = good && ok(h, h->comm, ringcc_recv(r, n, RINGCC_UINT8, prev, h->comm, NULL), "recv");
  good = good && ok(h, h->comm, ringcc_send(s, n, RINGCC_UINT8, me, h->comm, NULL), "send to oneself");
  good = good && ok(h, h->comm, ringcc_recv(self, n, RINGCC_UINT8, me, h->comm, NULL), "recv from oneself");
  good = good && ok(h, h->comm, ringcc_group_end(), "group_end (inner)");
  good = good && ok(h, h->comm, ringcc_group_end(), "group_end (outer)");
  good = good && check_msg(h, "recv of a nested group", RINGCC_UINT8, r, prev, me, 0, n);
  good = good && check_msg(h, "recv from oneself", RINGCC_UINT8, self, me, next, 0, n);
  /* Outside a group, sending to oneself still is an error. */
  if (good && ringcc_send(s, 1, RINGCC_UINT8, me, h->comm, NULL) != RINGCC_ERR_INVALID_ARGUMENT)
    good = !h_fail(h, "a blocking send to oneself was not refused");
  /* A send to oneself without its receive: the group's end says so. */
  good = good && ok(h, h->comm, ringcc_group_start(), "group_start");
  good = good && ok(h, h->comm, ringcc_send(s, 4, RINGCC_UINT8, me, h->comm, NULL), "send to oneself");
  if (good && ringcc_group_end() != RINGCC_ERR_INVALID_USAGE)
    good = !h_fail(h, "an unmatched send to oneself was not refused");
  /* ... and the communicator still works. */
  int32_t v = 1;
  good = good && ok(h, h->comm, ringcc_allreduce(&v, &v, 1, RINGCC_INT32, RINGCC_SUM, h->comm, NULL), "allreduce after");
  if (good && v != p)
    good = !h_fail(h, "allreduce after the refused group gave %d", v);
  free(s), free(r), free(self);
  return good ? 0 : 1;
}

Test(groups, usage, .timeout = 60) {
  for (int n = 1; n <= 4; n += 3)
    run("usage", n, usage_body, NULL, false, 0);
}

/* ---- a group's network messages land in the user's buffers ------------------
 *
 * Over TCP a group's receives land straight in their buffers and its sends
 * leave from theirs (exec_host.c, rcc_exec_host_p2p). */

/* A receive that does not match its message, inside a group, over TCP:
 * rank 1 posts a receive of `want` elements for a message of MSG_N (longer
 * or shorter, on a piece boundary or not), then one for the next message
 * on the same link. The group fails with RINGCC_ERR_INVALID_USAGE naming
 * the first, quickly; the second still gets exactly its message (pieces of
 * it that landed where the first receive's buffer was move back: nothing
 * of them may be lost or misplaced), the sender's group succeeds, and the
 * communicator stays usable. */
#define MSG_N (MIB / 4) /* 1 MiB of int32: four pieces over TCP */
static int group_mismatch_body(h_ctx_t *h) {
  static const size_t want[] = {2 * MSG_N, MSG_N / 2, MSG_N / 2 + 1,
                                MSG_N + 1, MSG_N - 1};
  static const char *how[] = {"shorter", "longer", "longer", "shorter",
                              "longer"};
  int32_t *a = h_xmalloc((2 * MSG_N + 1) * 4), *b = h_xmalloc(MSG_N * 4);
  bool good = true;
  for (int k = 0; k < (int)(sizeof(want) / sizeof(want[0])) && good; k++) {
    if (h->rank == 0) {
      h_fill_pattern(RINGCC_INT32, owner(0, 1, 3 * k), 0, 7, a, MSG_N);
      h_fill_pattern(RINGCC_INT32, owner(0, 1, 3 * k + 1), 0, 7, b, MSG_N);
      good = ok(h, h->comm, ringcc_group_start(), "group_start") &&
             ok(h, h->comm, ringcc_send(a, MSG_N, RINGCC_INT32, 1, h->comm,
                                        NULL), "send") &&
             ok(h, h->comm, ringcc_send(b, MSG_N, RINGCC_INT32, 1, h->comm,
                                        NULL), "send") &&
             ok(h, h->comm, ringcc_group_end(), "the sender's group_end");
    } else {
      memset(b, 0xee, MSG_N * 4);
      double t0 = h_now_s();
      good = ok(h, h->comm, ringcc_group_start(), "group_start") &&
             ok(h, h->comm, ringcc_recv(a, want[k], RINGCC_INT32, 0, h->comm,
                                        NULL), "recv") &&
             ok(h, h->comm, ringcc_recv(b, MSG_N, RINGCC_INT32, 0, h->comm,
                                        NULL), "recv");
      ringcc_result_t r = good ? ringcc_group_end() : RINGCC_SUCCESS;
      const char *why = ringcc_comm_last_error(h->comm);
      if (good && (r != RINGCC_ERR_INVALID_USAGE ||
                   strstr(why, how[k]) == NULL))
        good = !h_fail(h, "a receive of %zu elements for a message of %zu: "
                       "group_end returned %s (%s), expected "
                       "RINGCC_ERR_INVALID_USAGE naming it %s", want[k],
                       MSG_N, ringcc_strerror(r), why, how[k]);
      if (good && h_now_s() - t0 > 5)
        good = !h_fail(h, "the failed group took %.1f s", h_now_s() - t0);
      good = good && check_msg(h, "the message after the mismatched one",
                               RINGCC_INT32, b, 0, 1, 3 * k + 1, MSG_N);
    }
    /* Usable: one more message, the other way, in a group. */
    if (good) {
      if (h->rank == 1)
        h_fill_pattern(RINGCC_INT32, owner(1, 0, 3 * k + 2), 0, 7, b, MSG_N);
      else
        memset(b, 0xee, MSG_N * 4);
      good = ok(h, h->comm, ringcc_group_start(), "group_start") &&
             ok(h, h->comm,
                h->rank == 1
                    ? ringcc_send(b, MSG_N, RINGCC_INT32, 0, h->comm, NULL)
                    : ringcc_recv(b, MSG_N, RINGCC_INT32, 1, h->comm, NULL),
                "send or recv") &&
             ok(h, h->comm, ringcc_group_end(), "group_end after it");
      if (good && h->rank == 0)
        good = check_msg(h, "the message after the failed group",
                         RINGCC_INT32, b, 1, 0, 3 * k + 2, MSG_N);
    }
  }
  free(a);
  free(b);
  return good ? 0 : 1;
}

Test(lands, mismatch_then_the_next_message_tcp, .timeout = 120) {
  run("a mismatched grouped receive", 2, group_mismatch_body, NULL, true, 0);
}

/* That they land: AllToAll written as a group of sends and receives (the
 * rank's own block included) of 256 KiB blocks over TCP, rank 0 entering
 * each of ten groups 40 ms after its peers, whose blocks for it are in its
 * socket by then. With payloads parked (RINGCC_NET_PARK_US=1000000), from
 * the second group on every block from a peer lands in rank 0's buffer
 * (ringcc_comm_stats' landed_bytes grows by all of them); every element
 * checked. */
/* Starts a group and posts an AllToAll of n int32 a block in it: a send to
 * and a receive from each rank (this one included), interleaved. */
static bool post_alltoall(h_ctx_t *h, const int32_t *s, int32_t *r,
                          size_t n) {
  int p = h->nranks;
  bool good = ok(h, h->comm, ringcc_group_start(), "group_start");
  for (int k = 0; k < p && good; k++) {
    int to = (h->rank + k) % p, from = (h->rank - k + p) % p;
    good = ok(h, h->comm, ringcc_send(s + (size_t)to * n, n, RINGCC_INT32,
                                      to, h->comm, NULL), "send") &&
           ok(h, h->comm, ringcc_recv(r + (size_t)from * n, n, RINGCC_INT32,
                                      from, h->comm, NULL), "recv");
  }
  return good;
}

#define LAND_N (256 * 1024 / 4)
#define LAND_GROUPS 10
static int group_lands_body(h_ctx_t *h) {
  int p = h->nranks;
  int32_t *s = h_xmalloc((size_t)p * LAND_N * 4);
  int32_t *r = h_xmalloc((size_t)p * LAND_N * 4);
  uint64_t landed[LAND_GROUPS];
  bool good = true;
  for (int g = 0; g < LAND_GROUPS && good; g++) {
    for (int q = 0; q < p; q++)
      h_fill_pattern(RINGCC_INT32, owner(h->rank, q, g), 0, 7,
                     s + (size_t)q * LAND_N, LAND_N);
    memset(r, 0xee, (size_t)p * LAND_N * 4);
    ringcc_comm_stats_t st0 = RINGCC_COMM_STATS_INIT;
    ringcc_comm_stats_t st1 = RINGCC_COMM_STATS_INIT;
    if (h->rank == 0)
      h_sleep_ms(40);
    good = ringcc_comm_stats(h->comm, &st0) == RINGCC_SUCCESS &&
           post_alltoall(h, s, r, LAND_N) &&
           ok(h, h->comm, ringcc_group_end(), "group_end") &&
           ringcc_comm_stats(h->comm, &st1) == RINGCC_SUCCESS;
    landed[g] = st1.landed_bytes - st0.landed_bytes;
    for (int q = 0; q < p && good; q++)
      good = check_msg(h, "a block of the grouped alltoall", RINGCC_INT32,
                       r + (size_t)q * LAND_N, q, h->rank, g, LAND_N);
  }
  free(s);
  free(r);
  if (!good || h->rank != 0)
    return good ? 0 : 1;
  uint64_t all = (uint64_t)(p - 1) * LAND_N * 4;
  fprintf(stderr, "grouped alltoall over TCP, n=%d, rank 0 late: bytes "
          "landed per group (of %llu):", p, (unsigned long long)all);
  for (int g = 0; g < LAND_GROUPS; g++)
    fprintf(stderr, " %llu", (unsigned long long)landed[g]);
  fprintf(stderr, "\n");
  for (int g = 1; g < LAND_GROUPS; g++)
    if (landed[g] != all)
      return h_fail(h, "group %d landed %llu bytes in rank 0's buffers, not "
                    "all %llu that came before it entered", g,
                    (unsigned long long)landed[g], (unsigned long long)all);
  return 0;
}

Test(lands, late_receiver_tcp, .timeout = 120) {
  /* Pieces of 256 KiB, eight receives posted ahead: only pieces of 32 KiB
   * and more wait in the socket, and only posted receives can land. */
  setenv("RINGCC_NET_CHUNK_BYTES", "262144", 1);
  setenv("RINGCC_NSLOTS", "8", 1);
  setenv("RINGCC_NET_PARK_US", "1000000", 1);
  ringcc_config_t cfg = config(true);
  h_run_opts_t o = {.nranks = 3, .body = group_lands_body, .config = &cfg,
                    .timeout_s = 60, .name = "grouped receives land"};
  bool good = h_run(&o);
  unsetenv("RINGCC_NET_PARK_US");
  unsetenv("RINGCC_NSLOTS");
  unsetenv("RINGCC_NET_CHUNK_BYTES");
  cr_assert(good, "grouped receives over TCP: failed (above)");
}

/* A rank killed in the middle of grouped exchanges over TCP, while its
 * peers' sends leave from their buffers and their receives land in theirs:
 * the survivors' group fails with RINGCC_ERR_PEER_FAILED (or a network
 * error) within seconds, and once it returned nothing writes into their
 * buffers any more (a receive still landing there was moved back): the
 * pattern they write over them right after stays as it is. */
#define KILL_N (4 * MIB / 4) /* 4 MiB blocks */
struct mid_kill {
  int code[MAX_RANKS];
  int rounds[MAX_RANKS];
};

static void *kill_soon(void *arg) {
  h_sleep_ms(*(int *)arg);
  raise(SIGKILL);
  return NULL;
}

static int mid_kill_body(h_ctx_t *h) {
  struct mid_kill *a = h->arg;
  int p = h->nranks, me = h->rank, victim = p - 1;
  int32_t *s = h_xmalloc((size_t)p * KILL_N * 4);
  int32_t *r = h_xmalloc((size_t)p * KILL_N * 4);
  for (int q = 0; q < p; q++)
    h_fill_pattern(RINGCC_INT32, owner(me, q, 0), 0, 7,
                   s + (size_t)q * KILL_N, KILL_N);
  static int delay_ms = 15;
  for (int round = 0; round < 100; round++) {
    if (me == victim && round == 2) {
      pthread_t t;
      pthread_create(&t, NULL, kill_soon, &delay_ms);
    }
    if (!post_alltoall(h, s, r, KILL_N))
      return 1;
    ringcc_result_t res = ringcc_group_end();
    if (res == RINGCC_SUCCESS)
      continue;
    a->code[me] = (int)res;
    a->rounds[me] = round;
    /* The buffers are the caller's again: nothing may land in them now. */
    memset(r, 0x5a, (size_t)p * KILL_N * 4);
    memset(s, 0x5a, (size_t)p * KILL_N * 4);
    h_sleep_ms(300);
    for (size_t i = 0; i < (size_t)p * KILL_N; i++)
      if (r[i] != 0x5a5a5a5a)
        return h_fail(h, "after the failed group returned, element %zu of "
                      "its receive buffer changed to %d", i, r[i]);
    free(s);
    free(r);
    return 0;
  }
  return h_fail(h, "100 grouped exchanges, and the victim's death was not "
                "seen");
}

Test(lands, peer_killed_mid_exchange_tcp, .timeout = 120) {
  struct mid_kill *a = h_shared_alloc(sizeof *a);
  ringcc_config_t cfg = config(true);
  h_run_opts_t o = {.nranks = 3, .body = mid_kill_body, .arg = a,
                    .config = &cfg, .timeout_s = 60,
                    .name = "rank killed in grouped exchanges"};
  double t0 = h_now_s();
  cr_assert_not(h_run(&o), "the victim's death was not seen");
  double took = h_now_s() - t0;
  for (int q = 0; q < 2; q++) {
    fprintf(stderr, "rank %d: grouped exchange failed in round %d with %d\n",
            q, a->rounds[q], a->code[q]);
    cr_expect(a->code[q] == RINGCC_ERR_PEER_FAILED ||
                  a->code[q] == RINGCC_ERR_NETWORK,
              "rank %d's group completed with %d, expected "
              "RINGCC_ERR_PEER_FAILED", q, a->code[q]);
  }
  cr_expect_lt(took, 30, "the survivors took %.1f s", took);
  h_shared_free(a, sizeof *a);
}

/* ---- requests ---------------------------------------------------------------- */

/* k requests in flight on one communicator: allreduces of their own
 * buffers, one with a ring exchange; waited in reverse order (they complete
 * in order: once the last is done, every earlier one is). */
static int inflight_body(h_ctx_t *h) {
  int p = h->nranks, me = h->rank, nreq = 4, good = 1;
  size_t m = 2 * MIB / 4 + 1;
  ringcc_request_t req[4];
  int32_t *x[4], *want = h_xmalloc(m * 4);
  uint8_t *s = h_xmalloc(MIB), *r = h_xmalloc(MIB);
  h_fill_pattern(RINGCC_UINT8, owner(me, (me + 1) % p, 0), 0, 7, s, MIB);
  for (int k = 0; k < nreq && good; k++) {
    x[k] = h_xmalloc(m * 4);
    h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, (uint64_t)k, x[k], m);
    good = ok(h, h->comm, ringcc_group_start(), "group_start");
    good = good && ok(h, h->comm, ringcc_allreduce(x[k], x[k], m, RINGCC_INT32, RINGCC_SUM, h->comm, NULL), "allreduce");
    if (k == 2 && p > 1) {
      good = good && ok(h, h->comm, ringcc_send(s, MIB, RINGCC_UINT8, (me + 1) % p, h->comm, NULL), "send");
      good = good && ok(h, h->comm, ringcc_recv(r, MIB, RINGCC_UINT8, (me + p - 1) % p, h->comm, NULL), "recv");
    }
    good = good && ok(h, h->comm, ringcc_group_end_async(&req[k]), "group_end_async");
  }
  /* Poll the last without blocking; when done, every earlier one is. */
  int done = 0, polls = 0;
  while (good && !done) {
    ringcc_result_t t = ringcc_test(req[nreq - 1], &done);
    good = ok(h, h->comm, t, "test");
    polls++;
    if (!done)
      h_sleep_ms(1);
  }
  for (int k = nreq - 2; k >= 0 && good; k--) {
    int d = 0;
    good = ok(h, h->comm, ringcc_test(req[k], &d), "test of an earlier request");
    if (good && !d)
      good = !h_fail(h, "request %d not done after request %d was", k, nreq - 1);
  }
  for (int k = 0; k < nreq && good; k++) {
    h_fill_expected(RINGCC_INT32, RINGCC_SUM, p, 0, (uint64_t)k, want, m);
    good = h_check_elems(h, "allreduce of a request", RINGCC_INT32, x[k], want, m);
  }
  if (good && p > 1)
    good = check_msg(h, "recv of a request", RINGCC_UINT8, r, (me + p - 1) % p, me, 0, MIB);
  /* A blocking call after a request runs after it. */
  if (good) {
    h_fill_input(RINGCC_INT32, RINGCC_SUM, me, 0, 9, x[0], m);
    memcpy(x[1], x[0], m * 4);
    good = ok(h, h->comm, ringcc_group_start(), "group_start");
    good = good && ok(h, h->comm, ringcc_allreduce(x[0], x[0], m, RINGCC_INT32, RINGCC_SUM, h->comm, NULL), "allreduce");
    ringcc_request_t q;
    good = good && ok(h, h->comm, ringcc_group_end_async(&q), "group_end_async");
    good = good && ok(h, h->comm, ringcc_allreduce(x[1], x[1], m, RINGCC_INT32, RINGCC_SUM, h->comm, NULL), "blocking allreduce behind a request");
    /* It is done (the blocking call waited for it): test says so. */
    if (good) {
      int d = 0;
      good = ok(h, h->comm, ringcc_test(q, &d), "test");
      if (good && !d)
        good = !h_fail(h, "the request was not done after a blocking call");
    }
    h_fill_expected(RINGCC_INT32, RINGCC_SUM, p, 0, 9, want, m);
    good = good && h_check_elems(h, "allreduce of a request", RINGCC_INT32, x[0], want, m);
    good = good && h_check_elems(h, "blocking allreduce after it", RINGCC_INT32, x[1], want, m);
  }
  /* Destroy with a request in flight is refused: rank 0's receive from
   * rank 1, which sends only once rank 0's destroy returned (*tried). */
  int *tried = h->arg;
  if (good && p > 1 && me == 0) {
    ringcc_request_t q;
    good = ok(h, h->comm, ringcc_group_start(), "group_start");
    good = good && ok(h, h->comm, ringcc_recv(r, 16, RINGCC_UINT8, 1, h->comm, NULL), "recv");
    good = good && ok(h, h->comm, ringcc_group_end_async(&q), "group_end_async");
    ringcc_result_t d = good ? ringcc_comm_destroy(h->comm) : RINGCC_SUCCESS;
    __atomic_store_n(tried, 1, __ATOMIC_RELEASE);
    if (good && d != RINGCC_ERR_INVALID_USAGE)
      return h_fail(h, "destroy with a request in flight returned %s", ringcc_strerror(d));
    good = good && ok(h, h->comm, ringcc_wait(q), "wait");
  } else if (good && p > 1 && me == 1) {
    while (!__atomic_load_n(tried, __ATOMIC_ACQUIRE))
      h_sleep_ms(1); /* the harness's deadline ends a rank 0 that fails */
    good = ok(h, h->comm, ringcc_send(s, 16, RINGCC_UINT8, 0, h->comm, NULL), "send");
  }
  for (int k = 0; k < nreq; k++)
    free(x[k]);
  free(want), free(s), free(r);
  (void)polls;
  return good ? 0 : 1;
}

static void inflight_run(int n, bool tcp) {
  int *tried = h_shared_alloc(sizeof *tried);
  run("requests in flight", n, inflight_body, tried, tcp, 0);
  h_shared_free(tried, sizeof *tried);
}

Test(requests, in_flight_in_order_shm, .timeout = 120) {
  for (int n = 1; n <= 8; n *= 2)
    inflight_run(n, false);
}
Test(requests, in_flight_in_order_tcp, .timeout = 120) {
  inflight_run(3, true);
}

/* A rank killed (SIGKILL) while the others' requests are in flight: they
 * complete with RINGCC_ERR_PEER_FAILED (or, over TCP, a network error),
 * within seconds. */
struct killed_arg {
  int code[MAX_RANKS];
};

static int killed_body(h_ctx_t *h) {
  struct killed_arg *a = h->arg;
  int p = h->nranks, me = h->rank, victim = p - 1;
  size_t m = 4 * MIB / 4;
  float *x = h_xmalloc(m * 4);
  ringcc_request_t req[3];
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, me, 0, 1, x, m);
  if (me == victim)
    raise(SIGKILL); /* before it posts anything: the others wait for it */
  for (int k = 0; k < 3; k++) {
    if (!ok(h, h->comm, ringcc_group_start(), "group_start") ||
        !ok(h, h->comm, ringcc_allreduce(x, x, m, RINGCC_FLOAT32, RINGCC_SUM, h->comm, NULL), "allreduce") ||
        !ok(h, h->comm, ringcc_group_end_async(&req[k]), "group_end_async"))
      return 1;
  }
  ringcc_result_t first = ringcc_wait(req[0]);
  a->code[me] = first == RINGCC_SUCCESS ? -1 : (int)first;
  for (int k = 1; k < 3; k++)
    if (ringcc_wait(req[k]) == RINGCC_SUCCESS)
      return h_fail(h, "request %d after the failure succeeded", k);
  free(x);
  return 0;
}

static void killed_run(int n, bool tcp) {
  struct killed_arg *a = h_shared_alloc(sizeof *a);
  ringcc_config_t cfg = config(tcp);
  h_run_opts_t o = {.nranks = n, .body = killed_body, .arg = a, .config = &cfg,
                    .timeout_s = 30, .name = "rank killed"};
  double t0 = h_now_s();
  cr_assert_not(h_run(&o), "the victim's death was not seen");
  double took = h_now_s() - t0;
  for (int r = 0; r < n - 1; r++)
    cr_expect(a->code[r] == RINGCC_ERR_PEER_FAILED ||
                  (tcp && a->code[r] == RINGCC_ERR_NETWORK),
              "rank %d's request completed with %d, expected "
              "RINGCC_ERR_PEER_FAILED", r, a->code[r]);
  cr_expect_lt(took, 20, "the survivors took %.1f s", took);
  h_shared_free(a, sizeof *a);
}

Test(requests, rank_killed_shm, .timeout = 60) { killed_run(3, false); }
Test(requests, rank_killed_tcp, .timeout = 60) { killed_run(2, true); }

/* ---- large messages read in place (lib/exec/exec_p2p_place.c) ------------- */

/* A message is read in place from RCC_P2P_PLACE_MIN (64 KiB) on, and only
 * past the shared-memory FIFO's capacity (8 slots of 64 KiB by default):
 * a send that returned before its receiver came still does. */
#define PLACE_FROM ((size_t)512 << 10)

struct place_arg {
  bool registered;
  bool cma_off;   /* RINGCC_ALGO=ring: no cross-memory attach */
  bool grouped;   /* each exchange in a group, both ranks sending first */
};

/* What moved a message of bytes: "p2p" (the FIFOs), "zero-copy" (read from
 * the registered buffer as mapped), "cross-memory attach". */
static const char *place_alg(const struct place_arg *a, size_t bytes) {
  if (bytes <= PLACE_FROM)
    return "p2p";
  if (a->registered)
    return "zero-copy";
  return !a->cma_off && h_yama_scope() < 2 ? "cross-memory attach" : "p2p";
}

/* Two ranks exchange messages of sizes across the threshold (odd counts of
 * 4-byte elements), plain (rank 0 sends first, rank 1 receives first) or
 * grouped (both send first); every element checked, and the algorithm
 * that moved each message checked in the statistics on both ends. */
static int sizes_body(h_ctx_t *h) {
  const struct place_arg *a = h->arg;
  static const size_t sizes[] = {(64 << 10) - 4, PLACE_FROM - 4, PLACE_FROM,
                                 PLACE_FROM + 4, (1 << 20) + 12,
                                 (8 << 20) + 4};
  int me = h->rank, peer = 1 - me;
  bool good = true;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes && good; i++) {
    size_t bytes = sizes[i], n = bytes / 4;
    ringcc_reg_t sreg, rreg;
    int32_t *s = h_reg_alloc(h, bytes, a->registered, &sreg);
    int32_t *r = h_reg_alloc(h, bytes, a->registered, &rreg);
    if (s == NULL || r == NULL)
      return 1;
    h_fill_pattern(RINGCC_INT32, owner(me, peer, (int)i), 0, 7, s, n);
    memset(r, 0xee, bytes);
    const char *alg = place_alg(a, bytes);
    uint64_t sent0 = h_calls_by(h->comm, "send", alg);
    uint64_t recv0 = h_calls_by(h->comm, "recv", alg);
    if (a->grouped) {
      good = ok(h, h->comm, ringcc_group_start(), "group_start") &&
             ok(h, h->comm, ringcc_send(s, n, RINGCC_INT32, peer, h->comm,
                                        NULL), "send") &&
             ok(h, h->comm, ringcc_recv(r, n, RINGCC_INT32, peer, h->comm,
                                        NULL), "recv") &&
             ok(h, h->comm, ringcc_group_end(), "group_end");
    } else {
      for (int step = 0; step < 2 && good; step++)
        good = (step == me)
                   ? ok(h, h->comm, ringcc_recv(r, n, RINGCC_INT32, peer,
                                                h->comm, NULL), "recv")
                   : ok(h, h->comm, ringcc_send(s, n, RINGCC_INT32, peer,
                                                h->comm, NULL), "send");
    }
    char what[96];
    snprintf(what, sizeof what, "%zu bytes from rank %d", bytes, peer);
    good = good && check_msg(h, what, RINGCC_INT32, r, peer, me, (int)i, n);
    if (good && (h_calls_by(h->comm, "send", alg) != sent0 + 1 ||
                 h_calls_by(h->comm, "recv", alg) != recv0 + 1))
      good = !h_fail(h, "%zu bytes (%s%s%s): the send and the receive are "
                     "not counted as '%s' (%llu, %llu more)", bytes,
                     a->grouped ? "grouped" : "plain",
                     a->registered ? ", registered" : "",
                     a->cma_off ? ", RINGCC_ALGO=ring" : "", alg,
                     (unsigned long long)(h_calls_by(h->comm, "send", alg) -
                                          sent0),
                     (unsigned long long)(h_calls_by(h->comm, "recv", alg) -
                                          recv0));
    good &= !h_reg_free(h, r, rreg);
    good &= !h_reg_free(h, s, sreg);
  }
  return good ? 0 : 1;
}

static void sizes_run(bool registered, bool cma_off, bool grouped) {
  struct place_arg a = {registered, cma_off, grouped};
  ringcc_config_t cfg = config(false);
  if (cma_off)
    cfg.algo = RINGCC_ALGO_RING;
  h_run_opts_t o = {.nranks = 2, .body = sizes_body, .arg = &a,
                    .config = &cfg, .timeout_s = 90, .name = "in place"};
  cr_assert(h_run(&o), "sizes across the threshold (%s, %s%s) failed",
            grouped ? "grouped" : "plain",
            registered ? "registered" : "unregistered",
            cma_off ? ", cross-memory attach off" : "");
}

Test(in_place, sizes_plain, .timeout = 120) { sizes_run(false, false, false); }
Test(in_place, sizes_grouped, .timeout = 120) { sizes_run(false, false, true); }
Test(in_place, sizes_registered, .timeout = 120) {
  sizes_run(true, false, false);
  sizes_run(true, false, true);
}
/* Cross-memory attach off (RINGCC_ALGO names another algorithm): the FIFOs,
 * as before; registered memory is still read in place. */
Test(in_place, sizes_cma_off, .timeout = 120) {
  sizes_run(false, true, true);
  sizes_run(true, true, false);
}

/* One group per rank with, to every peer and itself: 8 MiB, 1 KiB and
 * 2 MiB + 4 in that order (the same FIFO: matched in order, large ones
 * read in place, the small one through the slots between them), both
 * directions posted sends first; then a request with the same. */
static size_t mixed_count(int k) {
  return k == 0 ? 2 * MIB : k == 1 ? 256 : MIB / 2 + 1;
}

static int mixed_large_body(h_ctx_t *h) {
  int p = h->nranks, me = h->rank;
  int32_t *s[MAX_RANKS][3], *r[MAX_RANKS][3];
  bool good = true;
  for (int round = 0; round < 2 && good; round++) {
    for (int q = 0; q < p; q++)
      for (int k = 0; k < 3; k++) {
        size_t n = mixed_count(k);
        s[q][k] = h_xmalloc(n * 4);
        r[q][k] = h_xmalloc(n * 4);
        h_fill_pattern(RINGCC_INT32, owner(me, q, k + 3 * round), 0, 7,
                       s[q][k], n);
        memset(r[q][k], 0xee, n * 4);
      }
    good = ok(h, h->comm, ringcc_group_start(), "group_start");
    for (int q = 0; q < p && good; q++)
      for (int k = 0; k < 3 && good; k++)
        good = ok(h, h->comm, ringcc_send(s[q][k], mixed_count(k),
                                          RINGCC_INT32, q, h->comm, NULL),
                  "send");
    for (int q = p - 1; q >= 0 && good; q--)
      for (int k = 0; k < 3 && good; k++)
        good = ok(h, h->comm, ringcc_recv(r[q][k], mixed_count(k),
                                          RINGCC_INT32, q, h->comm, NULL),
                  "recv");
    if (good && round == 0) {
      good = ok(h, h->comm, ringcc_group_end(), "group_end");
    } else if (good) {
      ringcc_request_t req;
      good = ok(h, h->comm, ringcc_group_end_async(&req), "group_end_async") &&
             ok(h, h->comm, ringcc_wait(req), "wait");
    }
    for (int q = 0; q < p; q++)
      for (int k = 0; k < 3; k++) {
        char what[96];
        snprintf(what, sizeof what, "round %d message %d from rank %d",
                 round, k, q);
        good = good && check_msg(h, what, RINGCC_INT32, r[q][k], q, me,
                                 k + 3 * round, mixed_count(k));
        free(s[q][k]);
        free(r[q][k]);
      }
  }
  return good ? 0 : 1;
}

Test(in_place, mixed_sizes_same_peer_and_self, .timeout = 120) {
  run("mixed sizes", 2, mixed_large_body, NULL, false, 0);
  run("mixed sizes", 4, mixed_large_body, NULL, false, 0);
}

/* A receive larger than the message: ringcc_recv fails at once, naming it
 * shorter, and so does its sender where the message went read in place
 * (refused: its sender learns why at once, not at its deadline), naming the
 * receive; ringcc_recv_from takes it and says how long it was. Both
 * communicators stay usable: the same message then goes through. */
static int mismatch_body(h_ctx_t *h) {
  size_t n = MIB / 4;
  int32_t *buf = h_xmalloc(2 * n * 4);
  int bad = 0;
  int placed = h_yama_scope() < 2; /* 1 MiB: past the FIFO, read in place */
  h_fill_pattern(RINGCC_INT32, owner(0, 1, 0), 0, 7, buf, n);
  if (h->rank == 0) {
    ringcc_result_t r1 = ringcc_send(buf, n, RINGCC_INT32, 1, h->comm, NULL);
    if (r1 != RINGCC_SUCCESS)
      bad = h_fail(h, "the send taken by ringcc_recv_from: %s",
                   ringcc_strerror(r1));
    double t0 = h_now_s();
    r1 = bad ? r1 : ringcc_send(buf, n, RINGCC_INT32, 1, h->comm, NULL);
    const char *why = ringcc_comm_last_error(h->comm);
    if (!bad && placed &&
        (r1 != RINGCC_ERR_INVALID_USAGE ||
         strstr(why, "rank 1 posted a receive of 524288 int32") == NULL))
      bad = h_fail(h, "the send whose receive failed returned %s (%s), "
                   "expected RINGCC_ERR_INVALID_USAGE naming the receive",
                   ringcc_strerror(r1), why);
    else if (!bad && !placed && r1 != RINGCC_SUCCESS)
      bad = h_fail(h, "the send through the FIFO whose receive failed "
                   "returned %s (%s)", ringcc_strerror(r1), why);
    if (!bad && h_now_s() - t0 > 5)
      bad = h_fail(h, "the send whose receive failed took %.1f s",
                   h_now_s() - t0);
    if (!bad)
      bad = !ok(h, h->comm, ringcc_send(buf, n, RINGCC_INT32, 1, h->comm,
                                        NULL), "the send after the refusal");
  } else {
    ringcc_recv_status_t st;
    memset(buf, 0xee, 2 * n * 4);
    if (!ok(h, h->comm, ringcc_recv_from(buf, 2 * n, RINGCC_INT32, 0,
                                         h->comm, NULL, &st), "recv_from"))
      bad = 1;
    else if (st.count != n || st.source != 0)
      bad = h_fail(h, "recv_from: count %zu from %d, expected %zu from 0",
                   st.count, st.source, n);
    else if (!check_msg(h, "the message recv_from took", RINGCC_INT32, buf,
                        0, 1, 0, n))
      bad = 1;
    ringcc_result_t r = ringcc_recv(buf, 2 * n, RINGCC_INT32, 0, h->comm,
                                    NULL);
    const char *why = ringcc_comm_last_error(h->comm);
    if (!bad && (r != RINGCC_ERR_INVALID_USAGE ||
                 strstr(why, "shorter") == NULL))
      bad = h_fail(h, "a receive of twice the message returned %s (%s), "
                   "expected RINGCC_ERR_INVALID_USAGE naming it shorter",
                   ringcc_strerror(r), why);
    memset(buf, 0xee, 2 * n * 4);
    if (!bad && (!ok(h, h->comm, ringcc_recv(buf, n, RINGCC_INT32, 0,
                                             h->comm, NULL),
                     "the receive after the mismatch") ||
                 !check_msg(h, "the message after the mismatch",
                            RINGCC_INT32, buf, 0, 1, 0, n)))
      bad = 1;
  }
  free(buf);
  return bad;
}

Test(in_place, recv_larger_than_send, .timeout = 60) {
  ringcc_config_t cfg = config(false); /* a deadline of 20 s */
  h_run_opts_t o = {.nranks = 2, .body = mismatch_body, .config = &cfg,
                    .timeout_s = 30, .name = "count mismatch"};
  cr_assert(h_run(&o));
}

/* A rank killed mid-transfer: the sender of a 64 MiB message, once its
 * place is out (the receiver reads from a process that is gone), or the
 * receiver before it read (the sender waits for its acknowledgement). The
 * survivor fails with RINGCC_ERR_PEER_FAILED within seconds. */
struct place_killed {
  int victim_sends;
  int pid[2];
  int code;
};

static int place_killed_body(h_ctx_t *h) {
  struct place_killed *a = h->arg;
  size_t n = 64 * MIB / 4;
  int32_t *buf = h_xmalloc(n * 4);
  memset(buf, 1, n * 4);
  a->pid[h->rank] = (int)getpid();
  int victim = a->victim_sends ? 0 : 1;
  ringcc_result_t r;
  if (h->rank == 0) { /* the sender */
    if (victim == 1)
      h_sleep_ms(300); /* ... and the receiver dies meanwhile: */
    r = ringcc_send(buf, n, RINGCC_INT32, 1, h->comm, NULL);
  } else {
    if (victim == 1)
      raise(SIGKILL); /* before it reads anything */
    h_sleep_ms(300); /* the sender's place is out: kill it, then read */
    kill(a->pid[0], SIGKILL);
    h_sleep_ms(100);
    r = ringcc_recv(buf, n, RINGCC_INT32, 0, h->comm, NULL);
  }
  a->code = (int)r;
  free(buf);
  return 0;
}

static void place_killed_run(int victim_sends) {
  struct place_killed *a = h_shared_alloc(sizeof *a);
  a->victim_sends = victim_sends;
  a->code = -1;
  ringcc_config_t cfg = config(false);
  h_run_opts_t o = {.nranks = 2, .body = place_killed_body, .arg = a,
                    .config = &cfg, .timeout_s = 30, .name = "killed"};
  double t0 = h_now_s();
  cr_assert_not(h_run(&o), "the victim's death was not seen");
  double took = h_now_s() - t0;
  cr_expect(a->code == RINGCC_ERR_PEER_FAILED, "the %s returned %d, expected "
            "RINGCC_ERR_PEER_FAILED", victim_sends ? "receiver" : "sender",
            a->code);
  cr_expect_lt(took, 15, "the survivor took %.1f s", took);
  h_shared_free(a, sizeof *a);
}

Test(in_place, sender_killed_while_read, .timeout = 60) {
  if (h_yama_scope() >= 2)
    cr_skip_test("Yama ptrace_scope >= 2: no cross-memory attach here");
  place_killed_run(1);
}
Test(in_place, receiver_killed_before_it_read, .timeout = 60) {
  place_killed_run(0);
}
