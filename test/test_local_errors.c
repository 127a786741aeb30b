/*
 * test_local_errors.c - failures that stay local: a clear code, a message
 * naming the argument and the peer, no wait until the deadline, and a
 * communicator that still works (docs/reliability.md, "Which failures leave
 * the communicator usable").
 *
 * Forked ranks over shared memory and over TCP, a deadline (timeout_ms) of
 * 30 s: every failing call must return within LIMIT_S, so a hang until the
 * deadline fails the test. After each failure both ranks run a correct
 * send/recv and an allreduce whose every element is checked, and
 * ringcc_comm_get_async_error must still say RINGCC_SUCCESS.
 *
 *   p2p           ringcc_recv and ringcc_recv_from whose count does not
 *                 match the message: shorter and longer, small (in one
 *                 slot), several slots, larger than the FIFO (read in place
 *                 over shared memory: its sender fails too, naming the
 *                 receive), plain and in a group (ended by
 *                 ringcc_group_end, or as a request) whose other operations
 *                 must still complete exactly;
 *   group         a group whose send to this rank itself does not match its
 *                 receive from it: its operations with the peer still run;
 *   vcoll         with RINGCC_CHECK=1, an AllToAllv and an AllGatherv
 *                 whose counts do not pair up across ranks and a Gather
 *                 whose count differs: every rank fails alike, naming the
 *                 ranks and the argument; without it, an AllToAllv on the
 *                 board whose pair of ranks disagrees: both fail, naming
 *                 each other, the third rank gets its blocks;
 *   in_place      a message read in place whose sender unmaps the buffer
 *                 before the receiver reads it: both fail at once with
 *                 RINGCC_ERR_SYSTEM (fatal), not at the deadline.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

#define LIMIT_S 10.0      /* a failing call returns within this */
#define DEADLINE_MS 30000 /* the communicator's timeout_ms */
#define FIFO_BYTES_SHM ((size_t)512 << 10) /* 8 slots of 64 KiB */
#define CHECK_COUNT 100003 /* the allreduce after each failure */

static ringcc_config_t transport(int tcp) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = tcp;
  cfg.timeout_ms = DEADLINE_MS;
  return cfg;
}

static bool contains(const char *msg, const char *part) {
  return part == NULL || strstr(msg, part) != NULL;
}

/* r must be want, and the last error name every part (NULL ends them). */
static int expect(h_ctx_t *h, const char *what, ringcc_result_t r,
                  ringcc_result_t want, const char *const *parts) {
  const char *msg = ringcc_comm_last_error(h->comm);
  if (r != want)
    return h_fail(h, "%s returned %s, expected %s (%s)", what,
                  ringcc_strerror(r), ringcc_strerror(want), msg);
  for (; want != RINGCC_SUCCESS && *parts != NULL; parts++)
    if (!contains(msg, *parts))
      return h_fail(h, "%s: the message does not say '%s': %s", what, *parts,
                    msg);
  return 0;
}

/* The communicator still works: rank 1 sends rank 0 a message of n int32
 * (every element checked), then an allreduce of CHECK_COUNT int32 (every
 * element checked), and no asynchronous error. */
static int still_works(h_ctx_t *h, size_t n, uint64_t salt) {
  int32_t *buf = h_xmalloc(n * 4 + 4), *want = h_xmalloc(n * 4 + 4);
  int rc = 0;
  h_fill_pattern(RINGCC_INT32, 77, 0, salt, want, n);
  if (h->rank == 1)
    rc = !h_ok(h, ringcc_send(want, n, RINGCC_INT32, 0, h->comm, NULL),
               "the send after the failure");
  else if (h->rank == 0) {
    memset(buf, 0xee, n * 4);
    rc = !h_ok(h, ringcc_recv(buf, n, RINGCC_INT32, 1, h->comm, NULL),
               "the receive after the failure") ||
         !h_check_elems(h, "the message after the failure", RINGCC_INT32, buf,
                        want, n);
  }
  free(buf);
  free(want);
  int32_t *x = h_xmalloc(CHECK_COUNT * 4), *sum = h_xmalloc(CHECK_COUNT * 4);
  int32_t *exp = h_xmalloc(CHECK_COUNT * 4);
  h_fill_input(RINGCC_INT32, RINGCC_SUM, h->rank, 0, salt, x, CHECK_COUNT);
  h_fill_expected(RINGCC_INT32, RINGCC_SUM, h->nranks, 0, salt, exp,
                  CHECK_COUNT);
  if (rc == 0)
    rc = !h_ok(h, ringcc_allreduce(x, sum, CHECK_COUNT, RINGCC_INT32,
                                   RINGCC_SUM, h->comm, NULL),
               "the allreduce after the failure") ||
         !h_check_elems(h, "the allreduce after the failure", RINGCC_INT32,
                        sum, exp, CHECK_COUNT);
  ringcc_result_t async = RINGCC_ERR_INTERNAL;
  if (rc == 0 &&
      (ringcc_comm_get_async_error(h->comm, &async) != RINGCC_SUCCESS ||
       async != RINGCC_SUCCESS))
    rc = h_fail(h, "the async error after the failure is %s",
                ringcc_strerror(async));
  free(x);
  free(sum);
  free(exp);
  return rc;
}

/* ---- p2p: a receive whose count does not match the message ------------ */

struct mismatch {
  size_t sent, posted; /* float32 elements */
  bool upto;           /* ringcc_recv_from (at most), else ringcc_recv */
  bool grouped;        /* each rank's call in a group with another exchange */
  bool request;        /* the group ended by ringcc_group_end_async, waited */
  int tcp;
};

/* Whether rank 1's message goes read in place (p2p_place.h): over shared
 * memory, past the FIFO's capacity, where cross-memory attach runs. */
static bool in_place(const struct mismatch *m) {
  return !m->tcp && m->sent * 4 > FIFO_BYTES_SHM && h_yama_scope() < 2;
}

/* Rank 1 sends m->sent float32 to rank 0, which posts m->posted. In a
 * group, each also exchanges a correct message of 1000 int32 the other
 * way, which must arrive exactly. */
static int mismatch_body(h_ctx_t *h) {
  const struct mismatch *m = h->arg;
  size_t big = m->sent > m->posted ? m->sent : m->posted;
  float *buf = h_xmalloc(big * 4);
  int32_t side[1000], side_want[1000];
  h_fill_pattern(RINGCC_FLOAT32, 1, 0, 3, buf, m->sent);
  h_fill_pattern(RINGCC_INT32, 5, 0, 3, side_want, 1000);
  memset(side, 0xee, sizeof side);
  int rc = 0;
  double t0 = h_now_s();
  ringcc_result_t r;
  if (m->grouped)
    ringcc_group_start();
  if (h->rank == 1) {
    r = ringcc_send(buf, m->sent, RINGCC_FLOAT32, 0, h->comm, NULL);
    if (m->grouped)
      ringcc_recv(side, 1000, RINGCC_INT32, 0, h->comm, NULL);
  } else {
    ringcc_recv_status_t st;
    r = m->upto ? ringcc_recv_from(buf, m->posted, RINGCC_FLOAT32, 1, h->comm,
                                   NULL, &st)
                : ringcc_recv(buf, m->posted, RINGCC_FLOAT32, 1, h->comm, NULL);
    if (m->grouped)
      ringcc_send(side_want, 1000, RINGCC_INT32, 1, h->comm, NULL);
  }
  if (m->grouped) {
    if (r != RINGCC_SUCCESS)
      rc = h_fail(h, "recording the call in the group: %s",
                  ringcc_strerror(r));
    ringcc_request_t req = NULL;
    r = m->request ? ringcc_group_end_async(&req) : ringcc_group_end();
    if (m->request && r == RINGCC_SUCCESS)
      r = ringcc_wait(req);
  }
  double took = h_now_s() - t0;
  char what[160], posted[96];
  snprintf(what, sizeof what, "%s%s of %zu float32 for a message of %zu%s",
           h->rank == 1 ? "the send" : m->upto ? "recv_from" : "recv",
           m->grouped ? " (grouped)" : "", h->rank == 1 ? m->sent : m->posted,
           m->sent, m->tcp ? " over TCP" : "");
  snprintf(posted, sizeof posted, "rank 0 posted a receive of %s%zu float32",
           m->upto ? "at most " : "", m->posted);
  if (rc == 0 && h->rank == 0)
    rc = expect(h, what, r, RINGCC_ERR_INVALID_USAGE,
                (const char *const[]){"from rank 1", "(count)", NULL});
  else if (rc == 0 && in_place(m))
    rc = expect(h, what, r, RINGCC_ERR_INVALID_USAGE,
                (const char *const[]){"to rank 0", posted, NULL});
  else if (rc == 0)
    rc = expect(h, what, r, RINGCC_SUCCESS, NULL);
  if (rc == 0 && took > LIMIT_S)
    rc = h_fail(h, "%s took %.1f s (deadline %d ms)", what, took,
                DEADLINE_MS);
  if (rc == 0 && m->grouped && h->rank == 1)
    rc = !h_check_elems(h, "the group's other message", RINGCC_INT32, side,
                        side_want, 1000);
  free(buf);
  return rc ? rc : still_works(h, m->posted + 3, m->sent);
}

static void mismatch_run(struct mismatch m) {
  for (m.tcp = 0; m.tcp < 2; m.tcp++) {
    ringcc_config_t cfg = transport(m.tcp);
    h_run_opts_t o = {.nranks = 2, .body = mismatch_body, .arg = &m,
                      .config = &cfg, .timeout_s = 60,
                      .name = "mismatched receive"};
    cr_assert(h_run(&o), "%s of %zu float32 for a message of %zu%s over %s",
              m.upto ? "recv_from" : "recv", m.posted, m.sent,
              m.request ? " (a request)" : m.grouped ? " (grouped)" : "",
              m.tcp ? "TCP" : "shared memory");
  }
}

/* In one slot: longer and shorter. */
Test(p2p, small_longer_and_shorter, .timeout = 240) {
  mismatch_run((struct mismatch){.sent = 200, .posted = 100});
  mismatch_run((struct mismatch){.sent = 100, .posted = 200});
  mismatch_run((struct mismatch){.sent = 200, .posted = 100, .upto = true});
}

/* Several slots (64 KiB each), within the FIFO (not read in place): the
 * mismatch shows at a later piece, the receive takes the rest. */
Test(p2p, several_slots, .timeout = 240) {
  mismatch_run((struct mismatch){.sent = 100000, .posted = 60000});
  mismatch_run((struct mismatch){.sent = 60000, .posted = 100000});
  mismatch_run((struct mismatch){.sent = 100000, .posted = 60000,
                                 .upto = true});
}

/* Past the FIFO: read in place over shared memory (refused; the sender
 * fails too), through every slot several times over TCP (the sender waits
 * for room that the receive's taking the rest makes). */
Test(p2p, larger_than_the_fifo, .timeout = 240) {
  mismatch_run((struct mismatch){.sent = 1000000, .posted = 999999});
  mismatch_run((struct mismatch){.sent = 1000000, .posted = 1000001});
  mismatch_run((struct mismatch){.sent = 1000000, .posted = 300000,
                                 .upto = true});
}

/* In a group with another exchange, which must still complete exactly;
 * the group ended by ringcc_group_end or as a request. */
Test(p2p, grouped, .timeout = 240) {
  mismatch_run((struct mismatch){.sent = 200, .posted = 100, .grouped = true});
  mismatch_run((struct mismatch){.sent = 100000, .posted = 60000,
                                 .grouped = true});
  mismatch_run((struct mismatch){.sent = 1000000, .posted = 999999,
                                 .grouped = true});
  mismatch_run((struct mismatch){.sent = 100000, .posted = 60000,
                                 .grouped = true, .request = true});
  mismatch_run((struct mismatch){.sent = 1000000, .posted = 999999,
                                 .grouped = true, .request = true});
}

/* ---- group: a send to this rank itself that does not match ------------- */

/* Rank 0's group sends 10 int32 to itself and receives 20 from itself, and
 * exchanges 5000 int32 with rank 1 both ways; rank 1's group is that
 * exchange. Rank 0's end fails naming the mismatch; the exchange completes
 * exactly on both. */
static int self_body(h_ctx_t *h) {
  int32_t self_out[10] = {0}, self_in[20];
  int32_t *out = h_xmalloc(5000 * 4), *in = h_xmalloc(5000 * 4);
  int32_t *want = h_xmalloc(5000 * 4);
  int peer = 1 - h->rank, rc = 0;
  h_fill_pattern(RINGCC_INT32, (uint64_t)h->rank, 0, 9, out, 5000);
  h_fill_pattern(RINGCC_INT32, (uint64_t)peer, 0, 9, want, 5000);
  double t0 = h_now_s();
  ringcc_group_start();
  if (h->rank == 0) {
    ringcc_send(self_out, 10, RINGCC_INT32, 0, h->comm, NULL);
    ringcc_recv(self_in, 20, RINGCC_INT32, 0, h->comm, NULL);
  }
  ringcc_send(out, 5000, RINGCC_INT32, peer, h->comm, NULL);
  ringcc_recv(in, 5000, RINGCC_INT32, peer, h->comm, NULL);
  ringcc_result_t r = ringcc_group_end();
  if (h->rank == 0)
    rc = expect(h, "a group with a mismatched send to itself", r,
                RINGCC_ERR_INVALID_USAGE,
                (const char *const[]){"this rank itself", "40", NULL});
  else
    rc = expect(h, "the peer's group", r, RINGCC_SUCCESS, NULL);
  if (rc == 0 && h_now_s() - t0 > LIMIT_S)
    rc = h_fail(h, "the group took %.1f s", h_now_s() - t0);
  if (rc == 0)
    rc = !h_check_elems(h, "the exchange in the group", RINGCC_INT32, in,
                        want, 5000);
  free(out);
  free(in);
  free(want);
  return rc ? rc : still_works(h, 4321, 11);
}

Test(group, mismatched_send_to_itself, .timeout = 120) {
  for (int tcp = 0; tcp < 2; tcp++) {
    ringcc_config_t cfg = transport(tcp);
    h_run_opts_t o = {.nranks = 2, .body = self_body, .config = &cfg,
                      .timeout_s = 60, .name = "self mismatch"};
    cr_assert(h_run(&o), "over %s", tcp ? "TCP" : "shared memory");
  }
}

/* ---- in_place: a read that fails ---------------------------------------- */

#define UNMAPPED_BYTES ((size_t)4 << 20)

static void *unmap_later(void *p) {
  h_sleep_ms(300); /* the send's place is out by then */
  munmap(p, UNMAPPED_BYTES);
  return NULL;
}

/* Rank 1 sends 4 MiB from an mmap'd buffer that another of its threads
 * unmaps 300 ms later; rank 0 receives after 1 s: its read fails (EFAULT),
 * both calls fail at once with RINGCC_ERR_SYSTEM, the sender's naming the
 * receiver's failed read. */
static int unmapped_body(h_ctx_t *h) {
  size_t n = UNMAPPED_BYTES / 4;
  double t0 = h_now_s();
  int rc;
  if (h->rank == 1) {
    void *p = mmap(NULL, UNMAPPED_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_t t;
    if (p == MAP_FAILED)
      return h_fail(h, "mmap failed");
    h_fill_pattern(RINGCC_INT32, 1, 0, 1, p, n);
    if (pthread_create(&t, NULL, unmap_later, p) != 0)
      return h_fail(h, "pthread_create failed");
    ringcc_result_t r = ringcc_send(p, n, RINGCC_INT32, 0, h->comm, NULL);
    pthread_join(t, NULL);
    rc = expect(h, "the send whose buffer went away", r, RINGCC_ERR_SYSTEM,
                (const char *const[]){"rank 0 could not read", "Bad address",
                                      NULL});
  } else {
    int32_t *buf = h_xmalloc(UNMAPPED_BYTES);
    h_sleep_ms(1000);
    t0 = h_now_s();
    rc = expect(h, "the receive of a message whose buffer went away",
                ringcc_recv(buf, n, RINGCC_INT32, 1, h->comm, NULL),
                RINGCC_ERR_SYSTEM,
                (const char *const[]){"from rank 1", "Bad address", NULL});
    free(buf);
  }
  if (rc == 0 && h_now_s() - t0 > LIMIT_S)
    rc = h_fail(h, "the failure took %.1f s (deadline %d ms)",
                h_now_s() - t0, DEADLINE_MS);
  return rc;
}

Test(in_place, sender_buffer_unmapped, .timeout = 60) {
  if (h_yama_scope() >= 2)
    cr_skip_test("Yama ptrace_scope >= 2: no cross-memory attach here");
  ringcc_config_t cfg = transport(0);
  h_run_opts_t o = {.nranks = 2, .body = unmapped_body, .config = &cfg,
                    .timeout_s = 40, .name = "unmapped"};
  cr_assert(h_run(&o));
}

/* ---- vcoll: uneven collectives whose counts do not pair up --------------- */

/* With RINGCC_CHECK=1 (config.check), 3 ranks: an AllToAllv where rank 0
 * sends rank 1 one element more than rank 1 receives from it, an AllGatherv
 * where rank 2 receives one element less from rank 1 than rank 1 sends, and
 * a Gather whose sendcount differs on rank 2. Every rank fails at once with
 * RINGCC_ERR_INVALID_USAGE naming the ranks and the argument (without the
 * check such calls fail with a piece of the wrong size, or wait for the
 * deadline); the communicator then works. */
static int vcounts_body(h_ctx_t *h) {
  enum { N = 3, B = 7 };
  size_t sc[N], rc_[N], sd[N], rd[N], ag[N], agd[N];
  int32_t sbuf[N * (B + 1)], rbuf[N * (B + 1)], g[N * (B + 1)];
  int me = h->rank, rc = 0;
  for (int j = 0; j < N; j++) {
    sc[j] = rc_[j] = ag[j] = B;
    sd[j] = rd[j] = agd[j] = (size_t)j * (B + 1);
  }
  if (me == 0)
    sc[1] = B + 1;
  if (me == 2)
    ag[1] = B - 1;
  memset(sbuf, 0, sizeof sbuf);
  double t0 = h_now_s();
  rc = expect(h, "alltoallv whose counts do not pair up",
              ringcc_alltoallv(sbuf, sc, sd, rbuf, rc_, rd, RINGCC_INT32,
                               h->comm, NULL),
              RINGCC_ERR_INVALID_USAGE,
              (const char *const[]){"RINGCC_CHECK",
                                    "rank 0 sends rank 1 8 elements "
                                    "('sendcounts'[1])",
                                    "rank 1 receives 7 from rank 0 "
                                    "('recvcounts'[0])", NULL});
  if (rc == 0)
    rc = expect(h, "allgatherv whose counts do not pair up",
                ringcc_allgatherv(sbuf, B, rbuf, ag, agd, RINGCC_INT32,
                                  h->comm, NULL),
                RINGCC_ERR_INVALID_USAGE,
                (const char *const[]){"rank 1 sends 7 elements ('sendcount')",
                                      "rank 2 receives 6 from it "
                                      "('recvcounts'[1])", NULL});
  if (rc == 0)
    rc = expect(h, "gather whose sendcount differs on rank 2",
                ringcc_gather(sbuf, g, me == 2 ? B + 1 : B, RINGCC_INT32, 0,
                              h->comm, NULL),
                RINGCC_ERR_INVALID_USAGE,
                (const char *const[]){"count: rank 0 has 7, rank 2 has 8",
                                      NULL});
  if (rc == 0 && h_now_s() - t0 > LIMIT_S)
    rc = h_fail(h, "the three mismatches took %.1f s", h_now_s() - t0);
  /* A correct AllToAllv, every element checked. */
  sc[1] = ag[1] = B;
  for (int j = 0; j < N && rc == 0; j++)
    h_fill_pattern(RINGCC_INT32, (uint64_t)(me * N + j), 0, 5,
                   sbuf + sd[j], B);
  if (rc == 0 &&
      !h_ok(h, ringcc_alltoallv(sbuf, sc, sd, rbuf, rc_, rd, RINGCC_INT32,
                                h->comm, NULL), "the alltoallv after them"))
    rc = 1;
  for (int j = 0; j < N && rc == 0; j++) {
    int32_t want[B];
    h_fill_pattern(RINGCC_INT32, (uint64_t)(j * N + me), 0, 5, want, B);
    rc = !h_check_elems(h, "the alltoallv after the mismatches",
                        RINGCC_INT32, rbuf + rd[j], want, B);
  }
  return rc ? rc : still_works(h, 1000, 21);
}

Test(vcoll, counts_that_do_not_pair_up_with_check, .timeout = 120) {
  for (int tcp = 0; tcp < 2; tcp++) {
    ringcc_config_t cfg = transport(tcp);
    cfg.check = 1;
    h_run_opts_t o = {.nranks = 3, .body = vcounts_body, .config = &cfg,
                      .timeout_s = 60, .name = "vcoll counts"};
    cr_assert(h_run(&o), "over %s", tcp ? "TCP" : "shared memory");
  }
}

/* Without RINGCC_CHECK, over shared memory (AllToAllv on the board, whose
 * places carry each pair's sizes): rank 0 sends rank 1 one element more
 * than rank 1 receives. Ranks 0 and 1 fail at once naming each other, rank
 * 2 gets its blocks; every communicator then works (both ranks of the pair
 * saw it, and the other blocks moved). */
static int a2av_pair_body(h_ctx_t *h) {
  enum { N = 3, B = 7 };
  size_t sc[N], rcn[N], sd[N], rd[N];
  int32_t sbuf[N * (B + 1)], rbuf[N * (B + 1)], want[B];
  int me = h->rank, rc = 0;
  for (int j = 0; j < N; j++) {
    sc[j] = rcn[j] = B;
    sd[j] = rd[j] = (size_t)j * (B + 1);
    h_fill_pattern(RINGCC_INT32, (uint64_t)(me * N + j), 0, 6, sbuf + sd[j],
                   B);
  }
  if (me == 0)
    sc[1] = B + 1;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_alltoallv(sbuf, sc, sd, rbuf, rcn, rd,
                                       RINGCC_INT32, h->comm, NULL);
  if (me == 2)
    rc = expect(h, "the alltoallv of the rank outside the pair", r,
                RINGCC_SUCCESS, NULL);
  else
    rc = expect(h, "an alltoallv whose pair of ranks disagrees", r,
                RINGCC_ERR_INVALID_USAGE,
                (const char *const[]){me == 0 ? "rank 1 sends it 28 bytes"
                                              : "rank 0 sends it 32 bytes",
                                      "sendcounts and recvcounts", NULL});
  if (rc == 0 && h_now_s() - t0 > LIMIT_S)
    rc = h_fail(h, "the alltoallv took %.1f s", h_now_s() - t0);
  for (int j = 0; j < N && rc == 0; j++) {
    if ((me == 0 && j == 1) || (me == 1 && j == 0))
      continue; /* the pair moved nothing between them */
    h_fill_pattern(RINGCC_INT32, (uint64_t)(j * N + me), 0, 6, want, B);
    rc = !h_check_elems(h, "a block of the alltoallv outside the pair",
                        RINGCC_INT32, rbuf + rd[j], want, B);
  }
  return rc ? rc : still_works(h, 1000, 23);
}

Test(vcoll, alltoallv_pair_that_disagrees_shm, .timeout = 60) {
  ringcc_config_t cfg = transport(0);
  h_run_opts_t o = {.nranks = 3, .body = a2av_pair_body, .config = &cfg,
                    .timeout_s = 40, .name = "alltoallv pair"};
  cr_assert(h_run(&o));
}
