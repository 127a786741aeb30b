/*
 * test_anysource.c - receives from RINGCC_ANY_SOURCE (ringcc_recv and
 * ringcc_recv_from) and ringcc_recv_from's messages shorter than the buffer.
 *
 * Forked ranks over shared memory and over TCP, 2 to 6 ranks: every element
 * received is checked against the pattern of the rank that should have sent
 * it, the source ringcc_recv_from reports against the one whose pattern it
 * is, the count it reports against what was sent, and the bytes past the
 * message and around the buffer against what was there before. Messages of
 * one sender must arrive in the order it sent them; when messages of several
 * senders are all waiting (shared memory, after a barrier), they are taken
 * in turn from after the previous any-source receive's sender.
 *
 * Peers that leave (destroy their communicator, then exit) in the middle:
 * an any-source receive goes on with the others and fails at once when
 * none is left; a collective or a send waiting on one fails naming it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define MAX_RANKS 8
#define ROUNDS 3
#define PER_ROUND 2 /* messages of each sender per round */

/* Sender s's m-th message (m counts from 0 over the whole run): its length,
 * different per sender and message, from empty to several 64 KiB slots. */
static size_t msg_count(int s, int m) {
  static const size_t counts[] = {0, 1, 7, 1031, 40000, 3, 65537, 16384};
  return counts[(size_t)(s * 3 + m) % (sizeof(counts) / sizeof(counts[0]))];
}

#define MAX_COUNT 65537

static ringcc_config_t transport(int tcp) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = tcp;
  return cfg;
}

/* Fan-in: every rank but 0 sends PER_ROUND messages per round to rank 0,
 * which receives them all from RINGCC_ANY_SOURCE with ringcc_recv_from into
 * a buffer of MAX_COUNT; a barrier ends each round. */
static int fan_in(h_ctx_t *h) {
  ringcc_comm_t comm = h->comm;
  const ringcc_datatype_t dt = RINGCC_INT32;
  h_buf_t buf, want;
  int rc = 0;

  if (!h_buf_alloc(&buf, MAX_COUNT * 4) || !h_buf_alloc(&want, MAX_COUNT * 4))
    return h_fail(h, "out of memory");
  for (int round = 0; round < ROUNDS && rc == 0; round++) {
    if (h->rank != 0) {
      for (int k = 0; k < PER_ROUND && rc == 0; k++) {
        int m = round * PER_ROUND + k;
        size_t n = msg_count(h->rank, m);
        h_fill_pattern(dt, (uint64_t)h->rank, 0, (uint64_t)m, want.p, n);
        if (!h_ok(h, ringcc_send(want.p, n, dt, 0, comm, NULL), "ringcc_send"))
          rc = 1;
      }
    } else {
      int next[MAX_RANKS] = {0}; /* each sender's next message this round */
      for (int i = 0; i < (h->nranks - 1) * PER_ROUND && rc == 0; i++) {
        ringcc_recv_status_t st = {-7, 12345};
        uint64_t tag = 0x5ca1ab1e + (uint64_t)i;
        h_buf_scribble(&buf, tag);
        ringcc_result_t r = ringcc_recv_from(buf.p, MAX_COUNT, dt,
                                             RINGCC_ANY_SOURCE, comm, NULL, &st);
        if (!h_ok(h, r, "ringcc_recv_from(RINGCC_ANY_SOURCE)")) {
          rc = 1;
          break;
        }
        if (st.source < 1 || st.source >= h->nranks ||
            next[st.source] >= PER_ROUND) {
          rc = h_fail(h, "round %d receive %d: source %d is not a rank with a "
                      "message left to send", round, i, st.source);
          break;
        }
        int m = round * PER_ROUND + next[st.source]++;
        size_t n = msg_count(st.source, m);
        char what[96];
        snprintf(what, sizeof what, "round %d: message %d of rank %d", round,
                 m, st.source);
        if (st.count != n) {
          rc = h_fail(h, "%s: count %zu, sent %zu", what, st.count, n);
          break;
        }
        h_fill_pattern(dt, (uint64_t)st.source, 0, (uint64_t)m, want.p, n);
        if (!h_check_elems(h, what, dt, buf.p, want.p, n) ||
            !h_buf_scribble_ok(h, what, &buf, tag, n * 4, (MAX_COUNT - n) * 4) ||
            !h_buf_guards_ok(h, what, &buf))
          rc = 1;
      }
    }
    if (rc == 0 && !h_ok(h, ringcc_barrier(comm, NULL), "ringcc_barrier"))
      rc = 1;
  }
  h_buf_free(&buf);
  h_buf_free(&want);
  return rc;
}

/* Every rank sends one message to every other (small enough to sit in the
 * FIFO's slots, so sends complete before any receive), then receives n-1
 * with plain ringcc_recv from RINGCC_ANY_SOURCE: the data says whose it
 * is, and each sender's must come exactly once. */
static int all_to_all(h_ctx_t *h) {
  const ringcc_datatype_t dt = RINGCC_FLOAT64;
  const size_t n = 1000; /* 8000 bytes */
  double out[1000], in[1000], want[1000];
  int seen[MAX_RANKS] = {0};

  for (int k = 1; k < h->nranks; k++) {
    int to = (h->rank + k) % h->nranks;
    h_fill_pattern(dt, (uint64_t)(h->rank * 100 + to), 0, 7, out, n);
    if (!h_ok(h, ringcc_send(out, n, dt, to, h->comm, NULL), "ringcc_send"))
      return 1;
  }
  for (int k = 1; k < h->nranks; k++) {
    if (!h_ok(h, ringcc_recv(in, n, dt, RINGCC_ANY_SOURCE, h->comm, NULL),
              "ringcc_recv(RINGCC_ANY_SOURCE)"))
      return 1;
    int from = -1;
    for (int s = 0; s < h->nranks && from < 0; s++) {
      if (s == h->rank)
        continue;
      h_fill_pattern(dt, (uint64_t)(s * 100 + h->rank), 0, 7, want, n);
      if (memcmp(in, want, sizeof(in)) == 0)
        from = s;
    }
    if (from < 0)
      return h_fail(h, "receive %d: the data is no rank's message to this one",
                    k);
    if (seen[from]++)
      return h_fail(h, "receive %d: rank %d's message came twice", k, from);
  }
  return h_ok(h, ringcc_barrier(h->comm, NULL), "ringcc_barrier") ? 0 : 1;
}

/* Shared memory: with every sender's message waiting, any-source receives
 * take them in turn after the previous one's sender: 1, 2, ..., n-1 from a
 * fresh communicator, and again from rank 1 in the next batch (the turn
 * after rank n-1 wraps past this rank, 0). */
static int turns(h_ctx_t *h) {
  int x = 0, v = 0;
  for (int batch = 0; batch < 2; batch++) {
    if (h->rank != 0) {
      x = h->rank * 10 + batch;
      if (!h_ok(h, ringcc_send(&x, 1, RINGCC_INT32, 0, h->comm, NULL),
                "ringcc_send"))
        return 1;
    }
    if (!h_ok(h, ringcc_barrier(h->comm, NULL), "ringcc_barrier"))
      return 1;
    if (h->rank != 0)
      continue;
    for (int want = 1; want < h->nranks; want++) {
      ringcc_recv_status_t st;
      if (!h_ok(h, ringcc_recv_from(&v, 1, RINGCC_INT32, RINGCC_ANY_SOURCE,
                                    h->comm, NULL, &st),
                "ringcc_recv_from"))
        return 1;
      if (st.source != want || v != want * 10 + batch || st.count != 1)
        return h_fail(h, "batch %d: receive %d came from rank %d (value %d, "
                      "count %zu); the turn was rank %d's", batch, want,
                      st.source, v, st.count, want);
    }
  }
  return 0;
}

/* ringcc_recv_from from a named rank: a message shorter than the buffer is
 * taken whole and its count reported. */
static int named_shorter(h_ctx_t *h) {
  int32_t out[100], in[100];
  int peer = h->rank ^ 1;
  if (peer >= h->nranks)
    return 0;
  for (int m = 0; m < 3; m++) {
    size_t n = (size_t)(m * 37 + h->rank);
    h_fill_pattern(RINGCC_INT32, (uint64_t)h->rank, 0, (uint64_t)m, out, n);
    ringcc_recv_status_t st = {-1, 0};
    ringcc_result_t r;
    if (h->rank < peer) {
      r = ringcc_send(out, n, RINGCC_INT32, peer, h->comm, NULL);
      if (r == RINGCC_SUCCESS)
        r = ringcc_recv_from(in, 100, RINGCC_INT32, peer, h->comm, NULL, &st);
    } else {
      r = ringcc_recv_from(in, 100, RINGCC_INT32, peer, h->comm, NULL, &st);
      if (r == RINGCC_SUCCESS)
        r = ringcc_send(out, n, RINGCC_INT32, peer, h->comm, NULL);
    }
    if (!h_ok(h, r, "ringcc_send/ringcc_recv_from"))
      return 1;
    size_t sent = (size_t)(m * 37 + peer);
    int32_t want[100];
    h_fill_pattern(RINGCC_INT32, (uint64_t)peer, 0, (uint64_t)m, want, sent);
    if (st.source != peer || st.count != sent)
      return h_fail(h, "message %d: status {%d, %zu}, expected {%d, %zu}", m,
                    st.source, st.count, peer, sent);
    if (!h_check_elems(h, "ringcc_recv_from(named)", RINGCC_INT32, in, want,
                       sent))
      return 1;
  }
  return 0;
}

static void run(int nranks, int tcp, h_body_fn body, const char *name) {
  ringcc_config_t cfg = transport(tcp);
  h_run_opts_t o = {.nranks = nranks, .body = body, .config = &cfg,
                    .timeout_s = 120, .name = name};
  cr_assert(h_run(&o), "%s, %d ranks over %s", name, nranks,
            tcp ? "TCP" : "shared memory");
}

Test(anysource, fan_in_shm) {
  for (int n = 2; n <= 6; n++)
    run(n, 0, fan_in, "fan-in");
}
Test(anysource, fan_in_tcp, .timeout = 300) {
  for (int n = 2; n <= 6; n++)
    run(n, 1, fan_in, "fan-in");
}
Test(anysource, all_to_all_shm) {
  for (int n = 2; n <= 6; n++)
    run(n, 0, all_to_all, "all-to-all");
}
Test(anysource, all_to_all_tcp, .timeout = 300) {
  for (int n = 2; n <= 6; n++)
    run(n, 1, all_to_all, "all-to-all");
}
Test(anysource, turns_shm) {
  for (int n = 2; n <= 6; n++)
    run(n, 0, turns, "turns");
}
Test(anysource, named_shorter_shm_tcp) {
  run(4, 0, named_shorter, "named, shorter");
  run(3, 1, named_shorter, "named, shorter");
}

static int expect(h_ctx_t *h, const char *what, ringcc_result_t r,
                  ringcc_result_t want, const char *n1, const char *n2);

/* Senders that leave: rank k (k >= 1) sends one message to rank 0 after
 * (k - 1) x 300 ms, then destroys its communicator and exits. Rank 0's
 * any-source receives wait meanwhile on peers that are done; a peer that
 * left in order is not a failure while others may still send. Once every
 * peer left, one more receive from any source is RINGCC_ERR_INVALID_USAGE
 * at once, not a wait until the deadline, and leaves the communicator
 * usable (a second one says the same). */
static int senders_leave(h_ctx_t *h) {
  const ringcc_datatype_t dt = RINGCC_INT32;
  h_buf_t buf, want;
  int rc = 0;
  if (!h_buf_alloc(&buf, MAX_COUNT * 4) || !h_buf_alloc(&want, MAX_COUNT * 4))
    return h_fail(h, "out of memory");
  if (h->rank != 0) {
    size_t n = msg_count(h->rank, 0);
    h_sleep_ms(300 * (h->rank - 1));
    h_fill_pattern(dt, (uint64_t)h->rank, 0, 0, want.p, n);
    rc = h_ok(h, ringcc_send(want.p, n, dt, 0, h->comm, NULL),
              "ringcc_send") ? 0 : 1;
  } else {
    int seen[MAX_RANKS] = {0};
    for (int i = 1; i < h->nranks && rc == 0; i++) {
      ringcc_recv_status_t st = {-7, 12345};
      h_buf_scribble(&buf, 0x1eaf + (uint64_t)i);
      if (!h_ok(h, ringcc_recv_from(buf.p, MAX_COUNT, dt, RINGCC_ANY_SOURCE,
                                    h->comm, NULL, &st),
                "ringcc_recv_from(RINGCC_ANY_SOURCE) while senders leave")) {
        rc = 1;
        break;
      }
      if (st.source < 1 || st.source >= h->nranks || seen[st.source]++) {
        rc = h_fail(h, "receive %d: source %d is not a rank with a message "
                    "left to send", i, st.source);
        break;
      }
      size_t n = msg_count(st.source, 0);
      if (st.count != n)
        rc = h_fail(h, "receive %d from rank %d: count %zu, expected %zu", i,
                    st.source, st.count, n);
      h_fill_pattern(dt, (uint64_t)st.source, 0, 0, want.p, n);
      if (rc == 0 && memcmp(buf.p, want.p, n * 4) != 0)
        rc = h_fail(h, "receive %d from rank %d: the message differs from "
                    "what it sent", i, st.source);
    }
    double t0 = h_now_s();
    if (rc == 0)
      rc = expect(h, "recv(RINGCC_ANY_SOURCE) once every peer left",
                  ringcc_recv(buf.p, 4, dt, RINGCC_ANY_SOURCE, h->comm, NULL),
                  RINGCC_ERR_INVALID_USAGE, "every peer destroyed", NULL);
    if (rc == 0 && h_now_s() - t0 > 30)
      rc = h_fail(h, "the receive once every peer left took %.1f s",
                  h_now_s() - t0);
    /* That failure moved nothing: the communicator is still usable, and
     * the next such receive says the same, not "unusable". */
    if (rc == 0)
      rc = expect(h, "a second recv(RINGCC_ANY_SOURCE) once every peer left",
                  ringcc_recv(buf.p, 4, dt, RINGCC_ANY_SOURCE, h->comm, NULL),
                  RINGCC_ERR_INVALID_USAGE, "every peer destroyed", NULL);
  }
  h_buf_free(&buf);
  h_buf_free(&want);
  return rc;
}

Test(anysource, senders_leave_shm_tcp, .timeout = 120) {
  for (int tcp = 0; tcp < 2; tcp++)
    for (int n = 3; n <= 5; n++)
      run(n, tcp, senders_leave, "senders that leave");
}

/* A collective whose peer left: rank n-1 destroys its communicator without
 * calling it (a program whose ranks disagree). The others' allreduce ends
 * with RINGCC_ERR_INVALID_USAGE naming it, within seconds, over shared
 * memory as over TCP (its goodbye closes its FIFOs), not at the deadline
 * and not as a failed peer once its process is gone. */
static int collective_peer_left(h_ctx_t *h) {
  int64_t x = h->rank, sum = 0;
  if (h->rank == h->nranks - 1)
    return 0;
  h_sleep_ms(200); /* gone by now */
  double t0 = h_now_s();
  int rc = expect(h, "allreduce after a peer left",
                  ringcc_allreduce(&x, &sum, 1, RINGCC_INT64, RINGCC_SUM,
                                   h->comm, NULL),
                  RINGCC_ERR_INVALID_USAGE, "destroyed its communicator",
                  NULL);
  if (rc == 0 && h_now_s() - t0 > 20)
    rc = h_fail(h, "the allreduce took %.1f s to fail", h_now_s() - t0);
  return rc;
}

Test(anysource, collective_whose_peer_left_shm_tcp, .timeout = 120) {
  for (int tcp = 0; tcp < 2; tcp++)
    run(3, tcp, collective_peer_left, "a collective whose peer left");
}

/* A send whose receiver left: rank 1 destroys its communicator without
 * receiving rank 0's 64 MiB (more than the FIFO and the sockets' buffers
 * hold, so the send waits for it), and stays alive 3 s. Rank 0's send ends
 * with RINGCC_ERR_INVALID_USAGE naming it within seconds, not at the
 * deadline. */
static int send_receiver_left(h_ctx_t *h) {
  size_t n = 64u << 20;
  if (h->rank == 1) {
    ringcc_result_t r = ringcc_comm_destroy(h->comm);
    h->comm = NULL;
    h_sleep_ms(3000);
    return h_ok(h, r, "ringcc_comm_destroy") ? 0 : 1;
  }
  char *buf = calloc(1, n);
  if (buf == NULL)
    return h_fail(h, "out of memory");
  double t0 = h_now_s();
  int rc = expect(h, "send of 64 MiB to a rank that left",
                  ringcc_send(buf, n, RINGCC_UINT8, 1, h->comm, NULL),
                  RINGCC_ERR_INVALID_USAGE, "rank 1 destroyed", NULL);
  if (rc == 0 && h_now_s() - t0 > 20)
    rc = h_fail(h, "the send took %.1f s to fail", h_now_s() - t0);
  free(buf);
  return rc;
}

Test(anysource, send_whose_receiver_left_shm_tcp, .timeout = 120) {
  for (int tcp = 0; tcp < 2; tcp++)
    run(2, tcp, send_receiver_left, "a send whose receiver left");
}

/* ---- bad arguments and mismatched messages ------------------------------- */

/* A failure with code want whose last error names every word in needles. */
static int expect(h_ctx_t *h, const char *what, ringcc_result_t r,
                  ringcc_result_t want, const char *n1, const char *n2) {
  const char *msg = ringcc_comm_last_error(h->comm);
  if (r != want)
    return h_fail(h, "%s: got %s, expected %s (%s)", what, ringcc_strerror(r),
                  ringcc_strerror(want), msg ? msg : "");
  if ((n1 && (!msg || !strstr(msg, n1))) || (n2 && (!msg || !strstr(msg, n2))))
    return h_fail(h, "%s: the message '%s' does not say '%s'%s%s", what,
                  msg ? msg : "(none)", n1 ? n1 : "", n2 ? " and " : "",
                  n2 ? n2 : "");
  return 0;
}

static int bad_args(h_ctx_t *h) {
  int32_t a[4] = {0}, b[4];
  ringcc_recv_status_t st;
  int bad = 0;
  bad |= expect(h, "send(peer=RINGCC_ANY_SOURCE)",
                ringcc_send(a, 4, RINGCC_INT32, RINGCC_ANY_SOURCE, h->comm,
                            NULL),
                RINGCC_ERR_INVALID_ARGUMENT, "'peer'", NULL);
  bad |= expect(h, "recv(peer=-3)",
                ringcc_recv(b, 4, RINGCC_INT32, -3, h->comm, NULL),
                RINGCC_ERR_INVALID_ARGUMENT, "'peer'", "RINGCC_ANY_SOURCE");
  bad |= expect(h, "recv_from(peer=nranks)",
                ringcc_recv_from(b, 4, RINGCC_INT32, h->nranks, h->comm, NULL,
                                 &st),
                RINGCC_ERR_INVALID_ARGUMENT, "'peer'", NULL);
  if (h->nranks == 1) /* the checks below would stop at 'peer' first */
    return bad;
  bad |= expect(h, "recv_from(buf=NULL, count=4)",
                ringcc_recv_from(NULL, 4, RINGCC_INT32, RINGCC_ANY_SOURCE,
                                 h->comm, NULL, &st),
                RINGCC_ERR_INVALID_ARGUMENT, "'buf'", NULL);
  bad |= expect(h, "recv(any source, datatype=99)",
                ringcc_recv(b, 4, (ringcc_datatype_t)99, RINGCC_ANY_SOURCE,
                            h->comm, NULL),
                RINGCC_ERR_INVALID_ARGUMENT, "datatype", NULL);
  if (bad)
    return 1;
  /* The communicator is still usable after all of them. */
  if (h->nranks > 1 && h->rank == 1)
    a[0] = 42, bad = !h_ok(h, ringcc_send(a, 1, RINGCC_INT32, 0, h->comm, NULL),
                           "ringcc_send after the bad arguments");
  if (h->nranks > 1 && h->rank == 0) {
    bad = !h_ok(h, ringcc_recv_from(b, 4, RINGCC_INT32, RINGCC_ANY_SOURCE,
                                    h->comm, NULL, &st),
                "ringcc_recv_from after the bad arguments");
    if (!bad && (st.source != 1 || st.count != 1 || b[0] != 42))
      bad = h_fail(h, "after the bad arguments: {%d, %zu} value %d", st.source,
                   st.count, b[0]);
  }
  return bad;
}

Test(anysource, bad_arguments) {
  run(1, 0, bad_args, "bad arguments");
  run(3, 0, bad_args, "bad arguments");
}

static int one_rank(h_ctx_t *h) {
  int32_t b[4];
  return expect(h, "recv(RINGCC_ANY_SOURCE) on one rank",
                ringcc_recv(b, 4, RINGCC_INT32, RINGCC_ANY_SOURCE, h->comm,
                            NULL),
                RINGCC_ERR_INVALID_ARGUMENT, "RINGCC_ANY_SOURCE", "one rank");
}

Test(anysource, one_rank) { run(1, 0, one_rank, "one rank"); }

/* A message longer than ringcc_recv_from's buffer, and one shorter than
 * ringcc_recv's count (any source): INVALID_USAGE naming the sender. */
static int mismatch(h_ctx_t *h) {
  int32_t a[200] = {0}, b[200];
  int longer = *(int *)h->arg;
  size_t sent = longer ? 200 : 50;
  if (h->rank == 1)
    return h_ok(h, ringcc_send(a, sent, RINGCC_INT32, 0, h->comm, NULL),
                "ringcc_send") ? 0 : 1;
  ringcc_recv_status_t st;
  if (longer)
    return expect(h, "recv_from of a longer message",
                  ringcc_recv_from(b, 100, RINGCC_INT32, RINGCC_ANY_SOURCE,
                                   h->comm, NULL, &st),
                  RINGCC_ERR_INVALID_USAGE, "from rank 1", "longer");
  return expect(h, "recv(any source) of a shorter message",
                ringcc_recv(b, 100, RINGCC_INT32, RINGCC_ANY_SOURCE, h->comm,
                            NULL),
                RINGCC_ERR_INVALID_USAGE, "from rank 1", "shorter");
}

Test(anysource, mismatched_message) {
  for (int longer = 0; longer < 2; longer++)
    for (int tcp = 0; tcp < 2; tcp++) {
      ringcc_config_t cfg = transport(tcp);
      h_run_opts_t o = {.nranks = 2, .body = mismatch, .arg = &longer,
                        .config = &cfg, .timeout_s = 60,
                        .name = "mismatched message"};
      cr_assert(h_run(&o), "%s message over %s", longer ? "longer" : "shorter",
                tcp ? "TCP" : "shared memory");
    }
}

/* Nobody sends: the any-source receive times out, saying so. */
static int nobody(h_ctx_t *h) {
  int32_t b[4];
  if (h->rank != 0) { /* alive meanwhile: peers that left would be skipped */
    h_sleep_ms(2000);
    return 0;
  }
  double t0 = h_now_s();
  int r = expect(h, "recv(RINGCC_ANY_SOURCE) nobody sends",
                 ringcc_recv(b, 4, RINGCC_INT32, RINGCC_ANY_SOURCE, h->comm,
                             NULL),
                 RINGCC_ERR_TIMEOUT, "timed out", "any source");
  double s = h_now_s() - t0;
  if (r == 0 && (s < 0.25 || s > 20))
    r = h_fail(h, "timed out after %.2f s with a 300 ms deadline", s);
  return r;
}

Test(anysource, timeout) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 300;
  h_run_opts_t o = {.nranks = 3, .body = nobody, .config = &cfg,
                    .timeout_s = 60, .name = "timeout"};
  cr_assert(h_run(&o));
}
