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
 * Header-only (static functions) because it is shared by test/test_faults.c,
 * which the Makefile builds, and test/soak/soak.c, which scripts/soak.sh
 * builds; both link test/harness.c.
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
  RC_NUM_KINDS
};

static const char *const rc_kind_names[RC_NUM_KINDS] = {
    "allreduce", "reduce_scatter", "allgather", "bcast",
    "reduce",    "alltoall",       "sendrecv",  "barrier"};

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

static inline bool rc_rank_init(rc_rank_t *s, int rank, int nranks,
                                size_t max_count) {
  size_t bytes = max_count * (size_t)nranks * 8 + 64;
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

static inline void rc_draw(uint64_t seed, uint64_t i, int nranks,
                           size_t max_count, rc_call_t *c) {
  uint64_t h = h_hash3(seed, i, 0x636f6c6cull);
  int log2max = 0;
  while (((size_t)2 << log2max) <= max_count)
    log2max++;
  c->kind = (enum rc_kind)(h % RC_NUM_KINDS);
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
  default:
    return (int)ringcc_barrier(comm, NULL);
  }
}

#endif /* RCC_TEST_RANDOM_COLL_H */
