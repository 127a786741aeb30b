/*
 * random_coll.h - a stream of random collectives that every rank draws alike
 * from one seed, each result checked element by element against exact
 * answers (the inputs of harness.h).
 *
 * Call i of a stream is rc_draw(seed, i, nranks, max_count): its kind
 * (allreduce, reduce_scatter, allgather, bcast, reduce, alltoall, a pairwise
 * send/recv, barrier), count (zero now and then, otherwise log-uniform up to
 * max_count elements per block), datatype, op, root, in-place form and data
 * salt are hashes of (seed, i), so ranks agree without talking. rc_run()
 * makes the call on one rank and checks what it got.
 *
 * rc_draw_mixed() draws from those kinds and the later ones: AllToAllv and
 * AllGatherv (uneven counts with zeros, blocks in a shuffled order with a
 * gap after each, the gaps checked untouched), Gather and Scatter (the
 * root anywhere, in place at the root or not), a group of point-to-point
 * calls (each rank sends to the ranks one or two shifts away, itself
 * included, and receives from the ranks as far the other way, sizes of up
 * to max_count elements, sends or receives first) and two AllReduces in
 * flight as requests (ringcc_group_end_async, waited for or tested in
 * either order). Mixed in one stream, calls of every algorithm and
 * executor follow each other on one communicator (the shared board of the
 * one-shot AllReduce and AllToAllv, cross-memory attach, the FIFOs, the
 * network), which tests of one collective at a time do not show.
 *
 * Header-only (static functions) because it is shared by test programs the
 * Makefile builds (test_faults, test_multihost, test_vcoll) and by
 * test/soak/soak.c, which scripts/soak.sh builds; all link test/harness.c.
 */
#ifndef RCC_TEST_RANDOM_COLL_H
#define RCC_TEST_RANDOM_COLL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum rc_kind {
  RC_ALLREDUCE,
  RC_REDUCE_SCATTER,
  RC_ALLGATHER,
  RC_BCAST,
  RC_REDUCE,
  RC_ALLTOALL,
  RC_SENDRECV, /* ranks 2k and 2k+1 exchange one message each way */
  RC_BARRIER,
  RC_NUM_KINDS, /* rc_draw's kinds end here; rc_draw_mixed's go on */
  RC_ALLTOALLV = RC_NUM_KINDS,
  RC_ALLGATHERV,
  RC_GATHER,
  RC_SCATTER,
  RC_GROUP_P2P, /* one group of sends and receives, self included */
  RC_REQUESTS,  /* two AllReduces in flight as requests */
  RC_NUM_ALL_KINDS
};

static const char *const rc_kind_names[RC_NUM_ALL_KINDS] = {
    "allreduce", "reduce_scatter", "allgather", "bcast",
    "reduce",    "alltoall",       "sendrecv",  "barrier",
    "alltoallv", "allgatherv",     "gather",    "scatter",
    "group_p2p", "requests"};

typedef struct {
  enum rc_kind kind;
  size_t count; /* elements per rank's block */
  ringcc_datatype_t dt;
  ringcc_op_t op;
  int root;
  bool in_place;
  uint64_t salt;
} rc_call_t;

/* Buffers for one rank, big enough for any call of max_count. */
typedef struct {
  h_ctx_t ctx; /* rank and nranks, for h_check_elems' messages */
  size_t max_count;
  unsigned char *send, *recv, *expect;
} rc_rank_t;

/* The result of rc_run on a call whose data came back wrong. */
#define RC_WRONG_DATA (-1)

/* Room for n blocks of max_count elements of 8 bytes with a gap after each
 * (the uneven layouts of rc_draw_mixed's calls), at least two. */
static inline size_t rc_rank_bytes(int nranks, size_t max_count) {
  return (max_count + 1) * (size_t)(nranks < 2 ? 2 : nranks) * 8 + 64;
}

static inline bool rc_rank_init(rc_rank_t *s, int rank, int nranks,
                                size_t max_count) {
  size_t bytes = rc_rank_bytes(nranks, max_count);
  memset(s, 0, sizeof *s);
  s->ctx.rank = rank;
  s->ctx.nranks = nranks;
  s->max_count = max_count;
  s->send = malloc(bytes);
  s->recv = malloc(bytes);
  s->expect = malloc(bytes);
  return s->send && s->recv && s->expect;
}

static inline void rc_rank_free(rc_rank_t *s) {
  free(s->send), free(s->recv), free(s->expect);
  memset(s, 0, sizeof *s);
}

static inline void rc_draw_from(uint64_t seed, uint64_t i, int nranks,
                                size_t max_count, int kinds, rc_call_t *c) {
  uint64_t h = h_hash3(seed, i, 0x636f6c6cull);
  int log2max = 0;
  while (((size_t)2 << log2max) <= max_count)
    log2max++;
  c->kind = (enum rc_kind)(h % (uint64_t)kinds);
  uint64_t hc = h_mix64(h ^ 1);
  if (hc % 16 == 0) {
    c->count = 0;
  } else {
    size_t span = (size_t)1 << (h_mix64(hc) % (uint64_t)(log2max + 1));
    c->count = 1 + (size_t)(h_mix64(hc ^ 2) % span);
    if (c->count > max_count)
      c->count = max_count;
  }
  c->dt = (ringcc_datatype_t)(h_mix64(h ^ 3) % RINGCC_NUM_DATATYPES);
  c->op = (ringcc_op_t)(h_mix64(h ^ 4) % RINGCC_NUM_OPS);
  c->root = (int)(h_mix64(h ^ 5) % (uint64_t)nranks);
  c->in_place = h_mix64(h ^ 6) & 1;
  c->salt = h_mix64(h ^ 7);
}

/* The stream of the first RC_NUM_KINDS kinds (test_faults and the
 * multi-host tests replay it by its seed: keep it as it is). */
static inline void rc_draw(uint64_t seed, uint64_t i, int nranks,
                           size_t max_count, rc_call_t *c) {
  rc_draw_from(seed, i, nranks, max_count, RC_NUM_KINDS, c);
}

/* Every kind. */
static inline void rc_draw_mixed(uint64_t seed, uint64_t i, int nranks,
                                 size_t max_count, rc_call_t *c) {
  rc_draw_from(seed, i, nranks, max_count, RC_NUM_ALL_KINDS, c);
}

static inline int rc_describe(const rc_call_t *c, char *buf, size_t len) {
  return snprintf(buf, len, "%s count %zu %s %s root %d%s",
                  rc_kind_names[c->kind], c->count, h_dt_name(c->dt),
                  h_op_name(c->op), c->root, c->in_place ? " in place" : "");
}

/* Poisons a receive area so that an element the call forgot shows up. */
static inline void rc_poison(void *p, size_t bytes) { memset(p, 0xee, bytes); }

static inline int rc_check(rc_rank_t *s, const rc_call_t *c, const void *got,
                           size_t count) {
  char what[160];
  rc_describe(c, what, sizeof what);
  return h_check_elems(&s->ctx, what, c->dt, got, s->expect, count)
             ? 0
             : RC_WRONG_DATA;
}

static inline int rc_allreduce(rc_rank_t *s, const rc_call_t *c,
                               ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  void *src = c->in_place ? s->recv : s->send;
  h_fill_input(c->dt, c->op, me, 0, c->salt, src, c->count);
  if (!c->in_place)
    rc_poison(s->recv, c->count * h_dt_size(c->dt));
  ringcc_result_t r = ringcc_allreduce(src, s->recv, c->count, c->dt, c->op,
                                       comm, NULL);
  if (r != RINGCC_SUCCESS)
    return (int)r;
  h_fill_expected(c->dt, c->op, n, 0, c->salt, s->expect, c->count);
  return rc_check(s, c, s->recv, c->count);
}

static inline int rc_reduce_scatter(rc_rank_t *s, const rc_call_t *c,
                                    ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t total = c->count * (size_t)n;
  /* In place (MPI form): all blocks read from recvbuf, result at recvbuf. */
  void *in = c->in_place ? s->recv : s->send;
  h_fill_input(c->dt, c->op, me, 0, c->salt, in, total);
  if (!c->in_place)
    rc_poison(s->recv, c->count * h_dt_size(c->dt));
  ringcc_result_t r = ringcc_reduce_scatter(
      c->in_place ? RINGCC_IN_PLACE : s->send, s->recv, c->count, c->dt, c->op,
      comm, NULL);
  if (r != RINGCC_SUCCESS)
    return (int)r;
  h_fill_expected(c->dt, c->op, n, (size_t)me * c->count, c->salt, s->expect,
                  c->count);
  return rc_check(s, c, s->recv, c->count);
}

static inline int rc_allgather(rc_rank_t *s, const rc_call_t *c,
                               ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t es = h_dt_size(c->dt), block = c->count * es;
  rc_poison(s->recv, block * (size_t)n);
  void *own = c->in_place ? s->recv + (size_t)me * block : s->send;
  h_fill_pattern(c->dt, (uint64_t)me, 0, c->salt, own, c->count);
  ringcc_result_t r = ringcc_allgather(c->in_place ? RINGCC_IN_PLACE : s->send,
                                       s->recv, c->count, c->dt, comm, NULL);
  if (r != RINGCC_SUCCESS)
    return (int)r;
  for (int q = 0; q < n; q++)
    h_fill_pattern(c->dt, (uint64_t)q, 0, c->salt, s->expect + (size_t)q * block,
                   c->count);
  return rc_check(s, c, s->recv, c->count * (size_t)n);
}

static inline int rc_bcast(rc_rank_t *s, const rc_call_t *c,
                           ringcc_comm_t comm) {
  int me = s->ctx.rank;
  if (me == c->root)
    h_fill_pattern(c->dt, (uint64_t)c->root, 0, c->salt, s->recv, c->count);
  else
    rc_poison(s->recv, c->count * h_dt_size(c->dt));
  ringcc_result_t r =
      ringcc_bcast(s->recv, c->count, c->dt, c->root, comm, NULL);
  if (r != RINGCC_SUCCESS)
    return (int)r;
  h_fill_pattern(c->dt, (uint64_t)c->root, 0, c->salt, s->expect, c->count);
  return rc_check(s, c, s->recv, c->count);
}

static inline int rc_reduce(rc_rank_t *s, const rc_call_t *c,
                            ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  bool root = me == c->root, in_place = root && c->in_place;
  void *in = in_place ? s->recv : s->send;
  h_fill_input(c->dt, c->op, me, 0, c->salt, in, c->count);
  if (root && !in_place)
    rc_poison(s->recv, c->count * h_dt_size(c->dt));
  ringcc_result_t r =
      ringcc_reduce(in_place ? RINGCC_IN_PLACE : s->send, root ? s->recv : NULL,
                    c->count, c->dt, c->op, c->root, comm, NULL);
  if (r != RINGCC_SUCCESS || !root)
    return (int)r;
  h_fill_expected(c->dt, c->op, n, 0, c->salt, s->expect, c->count);
  return rc_check(s, c, s->recv, c->count);
}

static inline int rc_alltoall(rc_rank_t *s, const rc_call_t *c,
                              ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t block = c->count * h_dt_size(c->dt);
  /* Block j of rank q's input is owner q*n+j; in place: sendbuf == recvbuf. */
  unsigned char *in = c->in_place ? s->recv : s->send;
  for (int j = 0; j < n; j++)
    h_fill_pattern(c->dt, (uint64_t)me * (uint64_t)n + (uint64_t)j, 0, c->salt,
                   in + (size_t)j * block, c->count);
  if (!c->in_place)
    rc_poison(s->recv, block * (size_t)n);
  ringcc_result_t r =
      ringcc_alltoall(in, s->recv, c->count, c->dt, comm, NULL);
  if (r != RINGCC_SUCCESS)
    return (int)r;
  for (int i = 0; i < n; i++)
    h_fill_pattern(c->dt, (uint64_t)i * (uint64_t)n + (uint64_t)me, 0, c->salt,
                   s->expect + (size_t)i * block, c->count);
  return rc_check(s, c, s->recv, c->count * (size_t)n);
}

/* Ranks 2k and 2k+1 swap one message; the lower one sends first. A last
 * rank without a partner (odd n) sits this call out. */
static inline int rc_sendrecv(rc_rank_t *s, const rc_call_t *c,
                              ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks, partner = me ^ 1;
  if (partner >= n)
    return 0;
  h_fill_pattern(c->dt, 1000u + (uint64_t)me, 0, c->salt, s->send, c->count);
  rc_poison(s->recv, c->count * h_dt_size(c->dt));
  ringcc_result_t r;
  if (me < partner) {
    r = ringcc_send(s->send, c->count, c->dt, partner, comm, NULL);
    if (r == RINGCC_SUCCESS)
      r = ringcc_recv(s->recv, c->count, c->dt, partner, comm, NULL);
  } else {
    r = ringcc_recv(s->recv, c->count, c->dt, partner, comm, NULL);
    if (r == RINGCC_SUCCESS)
      r = ringcc_send(s->send, c->count, c->dt, partner, comm, NULL);
  }
  if (r != RINGCC_SUCCESS)
    return (int)r;
  h_fill_pattern(c->dt, 1000u + (uint64_t)partner, 0, c->salt, s->expect,
                 c->count);
  return rc_check(s, c, s->recv, c->count);
}

/* ---- rc_draw_mixed's kinds ---------------------------------------------- */

/* Elements rank src sends rank dst in an uneven call: 0 for about one pair
 * in five, else 1 to c->count. sym: the same both ways (in-place AllToAllv,
 * where block j is sent from where rank j's block lands). */
static inline size_t rc_vcount(const rc_call_t *c, int src, int dst,
                               bool sym) {
  if (sym && src > dst) {
    int t = src;
    src = dst, dst = t;
  }
  uint64_t h = h_hash3(c->salt, (uint64_t)src * 131 + (uint64_t)dst, 0x7663);
  return c->count == 0 || h % 5 == 0 ? 0 : 1 + (size_t)(h_mix64(h) % c->count);
}

/* Displacements of n blocks of counts[] in a shuffled order (block
 * (k*a + b) mod n at the k-th place, a = 1 or n-1, b by the salt), each
 * followed by a gap of one element; the elements spanned. */
static inline size_t rc_layout(const rc_call_t *c, uint64_t which, int n,
                               const size_t *counts, size_t *displs) {
  uint64_t h = h_hash3(c->salt, which, 0x6c6179);
  int a = (h & 1) ? n - 1 : 1, b = (int)((h >> 1) % (uint64_t)n);
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    int j = (int)(((int64_t)k * a + b) % n);
    displs[j] = at;
    at += counts[j] + 1;
  }
  return at;
}

/* The id of the data rank src sends rank dst in a mixed call (distinct
 * from the ids above). */
static inline uint64_t rc_owner(int base, int n, int src, int dst) {
  return (uint64_t)base * 100000u + (uint64_t)src * (uint64_t)n + (uint64_t)dst;
}

/* Checks the span elements of recvbuf of an uneven call: rank q's block,
 * counts[q] elements of rc_owner(base, n, q, to), at displs[q]; the gaps
 * poisoned still. */
static inline int rc_check_layout(rc_rank_t *s, const rc_call_t *c, int base,
                                  int to, const size_t *counts,
                                  const size_t *displs, size_t span) {
  int n = s->ctx.nranks;
  size_t es = h_dt_size(c->dt);
  rc_poison(s->expect, span * es);
  for (int q = 0; q < n; q++)
    h_fill_pattern(c->dt, rc_owner(base, n, q, to), 0, c->salt,
                   s->expect + displs[q] * es, counts[q]);
  return rc_check(s, c, s->recv, span);
}

static inline int rc_alltoallv(rc_rank_t *s, const rc_call_t *c,
                               ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t es = h_dt_size(c->dt);
  size_t *sc = calloc(4 * (size_t)n, sizeof(size_t));
  if (sc == NULL)
    return (int)RINGCC_ERR_OUT_OF_MEMORY;
  size_t *sd = sc + n, *rcn = sd + n, *rd = rcn + n;
  for (int j = 0; j < n; j++) {
    sc[j] = rc_vcount(c, me, j, c->in_place);
    rcn[j] = rc_vcount(c, j, me, c->in_place);
  }
  size_t span = rc_layout(c, 2 + (uint64_t)me, n, rcn, rd);
  rc_poison(s->recv, span * es);
  if (c->in_place) { /* block j leaves from where rank j's block lands */
    for (int j = 0; j < n; j++)
      h_fill_pattern(c->dt, rc_owner(5, n, me, j), 0, c->salt,
                     s->recv + rd[j] * es, rcn[j]);
  } else {
    rc_layout(c, 1000 + (uint64_t)me, n, sc, sd);
    for (int j = 0; j < n; j++)
      h_fill_pattern(c->dt, rc_owner(5, n, me, j), 0, c->salt,
                     s->send + sd[j] * es, sc[j]);
  }
  ringcc_result_t r = ringcc_alltoallv(
      c->in_place ? RINGCC_IN_PLACE : s->send, sc, sd, s->recv, rcn, rd, c->dt,
      comm, NULL);
  int res = r == RINGCC_SUCCESS ? rc_check_layout(s, c, 5, me, rcn, rd, span)
                                : (int)r;
  free(sc);
  return res;
}

static inline int rc_allgatherv(rc_rank_t *s, const rc_call_t *c,
                                ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t es = h_dt_size(c->dt);
  size_t *cn = calloc(2 * (size_t)n, sizeof(size_t));
  if (cn == NULL)
    return (int)RINGCC_ERR_OUT_OF_MEMORY;
  size_t *d = cn + n;
  for (int q = 0; q < n; q++)
    cn[q] = rc_vcount(c, q, 0, false);
  size_t span = rc_layout(c, 1, n, cn, d);
  rc_poison(s->recv, span * es);
  void *own = c->in_place ? s->recv + d[me] * es : s->send;
  h_fill_pattern(c->dt, rc_owner(7, n, me, 0), 0, c->salt, own, cn[me]);
  ringcc_result_t r =
      ringcc_allgatherv(c->in_place ? RINGCC_IN_PLACE : s->send, cn[me],
                        s->recv, cn, d, c->dt, comm, NULL);
  int res = r == RINGCC_SUCCESS ? rc_check_layout(s, c, 7, 0, cn, d, span)
                                : (int)r;
  free(cn);
  return res;
}

static inline int rc_gather(rc_rank_t *s, const rc_call_t *c,
                            ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  bool root = me == c->root, in_place = root && c->in_place;
  size_t es = h_dt_size(c->dt), block = c->count * es;
  if (root)
    rc_poison(s->recv, block * (size_t)n);
  void *own = in_place ? s->recv + (size_t)me * block : s->send;
  h_fill_pattern(c->dt, rc_owner(9, n, me, 0), 0, c->salt, own, c->count);
  ringcc_result_t r =
      ringcc_gather(in_place ? RINGCC_IN_PLACE : s->send, root ? s->recv : NULL,
                    c->count, c->dt, c->root, comm, NULL);
  if (r != RINGCC_SUCCESS || !root)
    return (int)r;
  for (int q = 0; q < n; q++)
    h_fill_pattern(c->dt, rc_owner(9, n, q, 0), 0, c->salt,
                   s->expect + (size_t)q * block, c->count);
  return rc_check(s, c, s->recv, c->count * (size_t)n);
}

static inline int rc_scatter(rc_rank_t *s, const rc_call_t *c,
                             ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  bool root = me == c->root, in_place = root && c->in_place;
  size_t es = h_dt_size(c->dt), block = c->count * es;
  if (root)
    for (int j = 0; j < n; j++)
      h_fill_pattern(c->dt, rc_owner(11, n, 0, j), 0, c->salt,
                     s->send + (size_t)j * block, c->count);
  if (!in_place)
    rc_poison(s->recv, block);
  ringcc_result_t r =
      ringcc_scatter(root ? s->send : NULL, in_place ? (void *)RINGCC_IN_PLACE
                                                     : (void *)s->recv,
                     c->count, c->dt, c->root, comm, NULL);
  if (r != RINGCC_SUCCESS)
    return (int)r;
  /* In place the root's block stays where it was, in sendbuf. */
  const unsigned char *got = in_place ? s->send + (size_t)me * block : s->recv;
  h_fill_pattern(c->dt, rc_owner(11, n, 0, me), 0, c->salt, s->expect,
                 c->count);
  return rc_check(s, c, got, c->count);
}

/* One group: for each of one or two shifts k (0 included: a rank's message
 * to itself), a send to me+k and a receive from me-k, of rc_vcount(src,
 * dst) elements each; sends first or receives first, by the salt. Message t
 * lands at t*(max_count+1) elements into recvbuf. */
static inline int rc_group_p2p(rc_rank_t *s, const rc_call_t *c,
                               ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t es = h_dt_size(c->dt), stride = s->max_count + 1;
  int shift[2] = {(int)(c->salt % (uint64_t)n),
                  (int)((c->salt >> 20) % (uint64_t)n)};
  int shifts = n > 1 && shift[1] != shift[0] ? 2 : 1;
  bool sends_first = (c->salt >> 40) & 1;
  rc_poison(s->recv, (size_t)shifts * stride * es);
  for (int t = 0; t < shifts; t++) {
    int to = (me + shift[t]) % n;
    h_fill_pattern(c->dt, rc_owner(13 + t, n, me, to), 0, c->salt,
                   s->send + (size_t)t * stride * es, rc_vcount(c, me, to, false));
  }
  ringcc_result_t r = ringcc_group_start();
  for (int pass = 0; pass < 2 && r == RINGCC_SUCCESS; pass++)
    for (int t = 0; t < shifts && r == RINGCC_SUCCESS; t++) {
      int to = (me + shift[t]) % n, from = (me - shift[t] + n) % n;
      if ((pass == 0) == sends_first)
        r = ringcc_send(s->send + (size_t)t * stride * es,
                        rc_vcount(c, me, to, false), c->dt, to, comm, NULL);
      else
        r = ringcc_recv(s->recv + (size_t)t * stride * es,
                        rc_vcount(c, from, me, false), c->dt, from, comm, NULL);
    }
  ringcc_result_t e = ringcc_group_end();
  if (r == RINGCC_SUCCESS)
    r = e;
  if (r != RINGCC_SUCCESS)
    return (int)r;
  for (int t = 0; t < shifts; t++) {
    int from = (me - shift[t] + n) % n;
    size_t cnt = rc_vcount(c, from, me, false);
    unsigned char *want = s->expect + (size_t)t * stride * es;
    rc_poison(want, stride * es);
    h_fill_pattern(c->dt, rc_owner(13 + t, n, from, me), 0, c->salt, want, cnt);
  }
  return rc_check(s, c, s->recv, (size_t)shifts * stride);
}

/* Two AllReduces started as requests (a one-call group each), the second
 * while the first may still run, then finished by ringcc_wait or by
 * polling ringcc_test, the second one first or not, by the salt. */
static inline int rc_requests(rc_rank_t *s, const rc_call_t *c,
                              ringcc_comm_t comm) {
  int me = s->ctx.rank, n = s->ctx.nranks;
  size_t es = h_dt_size(c->dt), stride = s->max_count + 1;
  ringcc_request_t req[2] = {NULL, NULL};
  ringcc_result_t r = RINGCC_SUCCESS, res[2] = {RINGCC_SUCCESS, RINGCC_SUCCESS};
  for (int k = 0; k < 2; k++) {
    unsigned char *in = s->send + (size_t)k * stride * es;
    h_fill_input(c->dt, c->op, me, 0, c->salt + (uint64_t)k, in, c->count);
    rc_poison(s->recv + (size_t)k * stride * es, c->count * es);
  }
  for (int k = 0; k < 2 && r == RINGCC_SUCCESS; k++) {
    r = ringcc_group_start();
    ringcc_result_t a =
        r != RINGCC_SUCCESS ? r
                            : ringcc_allreduce(s->send + (size_t)k * stride * es,
                                               s->recv + (size_t)k * stride * es,
                                               c->count, c->dt, c->op, comm,
                                               NULL);
    if (r == RINGCC_SUCCESS)
      r = ringcc_group_end_async(&req[k]);
    if (r == RINGCC_SUCCESS && a != RINGCC_SUCCESS)
      r = a;
  }
  bool poll = (c->salt >> 41) & 1, second_first = (c->salt >> 42) & 1;
  for (int i = 0; i < 2; i++) {
    int k = second_first ? 1 - i : i;
    if (req[k] == NULL)
      continue;
    if (poll) {
      int done = 0;
      do
        res[k] = ringcc_test(req[k], &done);
      while (!done && res[k] == RINGCC_SUCCESS);
    } else {
      res[k] = ringcc_wait(req[k]);
    }
  }
  if (r != RINGCC_SUCCESS)
    return (int)r;
  for (int k = 0; k < 2; k++)
    if (res[k] != RINGCC_SUCCESS)
      return (int)res[k];
  for (int k = 0; k < 2; k++) {
    h_fill_expected(c->dt, c->op, n, 0, c->salt + (uint64_t)k, s->expect,
                    c->count);
    int bad = rc_check(s, c, s->recv + (size_t)k * stride * es, c->count);
    if (bad != 0)
      return bad;
  }
  return 0;
}

/* Makes call c on this rank: 0 when it succeeded with the exact result, the
 * ringcc_result_t when it failed, RC_WRONG_DATA (after printing the first
 * wrong element) when it returned success with a wrong result. */
static inline int rc_run(rc_rank_t *s, const rc_call_t *c, ringcc_comm_t comm) {
  switch (c->kind) {
  case RC_ALLREDUCE:
    return rc_allreduce(s, c, comm);
  case RC_REDUCE_SCATTER:
    return rc_reduce_scatter(s, c, comm);
  case RC_ALLGATHER:
    return rc_allgather(s, c, comm);
  case RC_BCAST:
    return rc_bcast(s, c, comm);
  case RC_REDUCE:
    return rc_reduce(s, c, comm);
  case RC_ALLTOALL:
    return rc_alltoall(s, c, comm);
  case RC_SENDRECV:
    return rc_sendrecv(s, c, comm);
  case RC_ALLTOALLV:
    return rc_alltoallv(s, c, comm);
  case RC_ALLGATHERV:
    return rc_allgatherv(s, c, comm);
  case RC_GATHER:
    return rc_gather(s, c, comm);
  case RC_SCATTER:
    return rc_scatter(s, c, comm);
  case RC_GROUP_P2P:
    return rc_group_p2p(s, c, comm);
  case RC_REQUESTS:
    return rc_requests(s, c, comm);
  default:
    return (int)ringcc_barrier(comm, NULL);
  }
}

#endif /* RCC_TEST_RANDOM_COLL_H */
