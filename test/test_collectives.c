/*
 * test_collectives.c - every collective, run by real ranks, checked element
 * by element against exact answers.
 *
 * For n in {1, 2, 3, 4, 5, 8}, one Criterion test per n per family
 * (allreduce, reduce_scatter, allgather, bcast, reduce, alltoall, sendrecv,
 * barrier) crosses every datatype x every op (for reductions) x counts
 * {0, 1, 2, 3, 7, 13, 1031, 65537} x out-of-place, NCCL in-place (pointer
 * forms) and MPI in-place (RINGCC_IN_PLACE); rooted collectives run every
 * root for n <= 5 and three roots for n = 8 (one rotating root at 65537).
 * Every mode runs every count, except that n >= 4 runs one mode per
 * (dtype, op) at 65537, rotating so that each mode is covered (time). Each
 * family adds cases of a few MiB. Every case checks every element, the guard
 * bytes around the receive buffer, and that inputs the call must not write
 * are unchanged; allreduce results are also hashed per rank into shared
 * memory and compared bitwise across ranks by the parent.
 *
 * Then subsets: tiny FIFO slots (chunk_bytes 1024/4096, nslots 2) so that
 * every count is many pipeline steps; each forced algorithm and shared memory
 * disabled (the network transport between local ranks), both skipped while
 * init answers RINGCC_ERR_UNSUPPORTED; ranks as threads of one process; a
 * long interleaved sequence of different collectives on one communicator;
 * two communicators used alternately.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algorithms.h"
#include "harness.h"

/* ---- what a case is ----------------------------------------------------- */

enum coll {
  C_ALLREDUCE,
  C_REDUCE_SCATTER,
  C_ALLGATHER,
  C_BCAST,
  C_REDUCE,
  C_ALLTOALL,
  C_SENDRECV,
  C_BARRIER,
  C_NUM
};
static const char *const coll_names[C_NUM] = {
    "allreduce", "reduce_scatter", "allgather", "bcast",
    "reduce",    "alltoall",       "sendrecv",  "barrier"};

enum mode { M_OOP, M_NCCL, M_MPI, M_NUM };
static const char *const mode_names[M_NUM] = {"out-of-place", "in-place(nccl)",
                                              "in-place(mpi)"};

/* Which modes a collective has. */
static unsigned coll_modes(enum coll c) {
  switch (c) {
  case C_BCAST:
  case C_SENDRECV:
  case C_BARRIER:
    return 1u << M_OOP; /* one form only */
  default:
    return (1u << M_NUM) - 1;
  }
}

static bool coll_reduces(enum coll c) {
  return c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_REDUCE;
}

static bool coll_rooted(enum coll c) { return c == C_BCAST || c == C_REDUCE; }

typedef struct {
  enum coll coll;
  ringcc_datatype_t dt;
  ringcc_op_t op;
  size_t count;
  enum mode mode;
  int root;
  uint64_t salt;
} case_t;

/* Cross-rank comparison of allreduce results: every rank writes a hash of its
 * result per case; the parent compares after the run. Shared memory. */
#define HASH_CASES 8192
#define HASH_RANKS 8
typedef struct {
  uint32_t ncases;
  uint32_t overflow;
  struct {
    uint8_t dt, op, mode, comm;
    uint32_t count;
  } desc[HASH_CASES];
  uint64_t hash[HASH_CASES][HASH_RANKS];
} hash_area_t;

/* What a run covers. */
typedef struct {
  unsigned colls;  /* 1 << enum coll */
  unsigned dts;    /* 1 << datatype */
  unsigned ops;    /* 1 << op */
  unsigned modes;  /* 1 << enum mode */
  const size_t *counts;
  int ncounts;
  size_t all_modes_max_count; /* above: one rotating mode per (dt, op) */
  size_t all_roots_max_count; /* above: one rotating root */
  bool big;                   /* the few-MiB cases */
  hash_area_t *hashes;        /* shared; may be NULL */
  uint32_t *barrier_counters; /* shared; for C_BARRIER */
  int interleaved_steps;      /* > 0: the interleaved sequence instead */
  bool two_comms;             /* the two-communicator test instead */
} plan_t;

/* One rank's view while running cases on one communicator. */
typedef struct {
  h_ctx_t *h;
  ringcc_comm_t comm;
  int rank, nranks;
  const char *comm_tag; /* "" or "comm2 " */
  uint8_t comm_id;
  const plan_t *plan;
  int failures;
  uint32_t *hash_next; /* next allreduce hash slot, shared by both comms */
} cc_t;

#define MAX_FAILURES 10

static const size_t std_counts[] = {0, 1, 2, 3, 7, 13, 1031, 65537};
#define NSTD (int)(sizeof std_counts / sizeof std_counts[0])

static void describe(const cc_t *c, const case_t *k, char *out, size_t len) {
  int n = snprintf(out, len, "%s%s", c->comm_tag, coll_names[k->coll]);
  if (coll_reduces(k->coll))
    n += snprintf(out + n, len - (size_t)n, " %s %s", h_dt_name(k->dt),
                  h_op_name(k->op));
  else
    n += snprintf(out + n, len - (size_t)n, " %s", h_dt_name(k->dt));
  n += snprintf(out + n, len - (size_t)n, " count=%zu", k->count);
  if (coll_rooted(k->coll))
    n += snprintf(out + n, len - (size_t)n, " root=%d", k->root);
  if (coll_modes(k->coll) != (1u << M_OOP))
    snprintf(out + n, len - (size_t)n, " %s", mode_names[k->mode]);
  snprintf(out + strlen(out), len - strlen(out), " (nranks=%d)", c->nranks);
}

/* ---- checks shared by the cases ------------------------------------------ */

typedef struct {
  cc_t *c;
  const char *what;
  int rc; /* 0 ok, 1 a check failed, -1 the call failed */
} check_t;

static void check_elems(check_t *ck, const char *part, ringcc_datatype_t dt,
                        const void *got, const void *expected, size_t count) {
  char what[320];
  snprintf(what, sizeof what, "%s: %s", ck->what, part);
  if (!h_check_elems(ck->c->h, what, dt, got, expected, count) && ck->rc == 0)
    ck->rc = 1;
}

static void check_guards(check_t *ck, const char *part, const h_buf_t *b) {
  char what[320];
  snprintf(what, sizeof what, "%s: %s", ck->what, part);
  if (!h_buf_guards_ok(ck->c->h, what, b) && ck->rc == 0)
    ck->rc = 1;
}

static void check_call(check_t *ck, ringcc_result_t r, const char *fn) {
  if (r == RINGCC_SUCCESS)
    return;
  h_fail(ck->c->h, "%s: %s returned %d (%s): %s", ck->what, fn, (int)r,
         ringcc_strerror(r), ringcc_comm_last_error(ck->c->comm));
  ck->rc = -1;
}

static void xbuf(h_buf_t *b, size_t bytes) {
  if (!h_buf_alloc(b, bytes)) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    abort();
  }
}

static void record_hash(cc_t *c, const case_t *k, const void *result,
                        size_t bytes) {
  hash_area_t *ha = c->plan->hashes;
  if (ha == NULL || c->nranks > HASH_RANKS)
    return;
  uint32_t i = (*c->hash_next)++;
  if (i >= HASH_CASES) {
    ha->overflow = 1;
    return;
  }
  ha->hash[i][c->rank] = h_hash_bytes(result, bytes);
  if (c->rank == 0) {
    ha->desc[i].dt = (uint8_t)k->dt;
    ha->desc[i].op = (uint8_t)k->op;
    ha->desc[i].mode = (uint8_t)k->mode;
    ha->desc[i].comm = c->comm_id;
    ha->desc[i].count = (uint32_t)k->count;
    ha->ncases = *c->hash_next;
  }
}

/* ---- allreduce ----------------------------------------------------------- */

static int case_allreduce(cc_t *c, const case_t *k, const char *what) {
  size_t es = h_dt_size(k->dt), bytes = k->count * es;
  void *input = h_xmalloc(bytes), *expect = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, c->rank, 0, k->salt, input, k->count);
  h_fill_expected(k->dt, k->op, c->nranks, 0, k->salt, expect, k->count);
  check_t ck = {c, what, 0};
  h_buf_t send = {0}, recv = {0};
  xbuf(&recv, bytes);
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&send, bytes);
    memcpy(send.p, input, bytes);
    h_buf_scribble(&recv, k->salt);
    r = ringcc_allreduce(send.p, recv.p, k->count, k->dt, k->op, c->comm, NULL);
  } else {
    memcpy(recv.p, input, bytes);
    const void *sb = k->mode == M_NCCL ? recv.p : RINGCC_IN_PLACE;
    r = ringcc_allreduce(sb, recv.p, k->count, k->dt, k->op, c->comm, NULL);
  }
  check_call(&ck, r, "ringcc_allreduce");
  if (ck.rc == 0) {
    check_elems(&ck, "result", k->dt, recv.p, expect, k->count);
    check_guards(&ck, "recvbuf", &recv);
    if (k->mode == M_OOP) {
      check_elems(&ck, "sendbuf changed", k->dt, send.p, input, k->count);
      check_guards(&ck, "sendbuf", &send);
    }
    record_hash(c, k, recv.p, bytes);
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(input);
  free(expect);
  return ck.rc;
}

/* ---- reduce_scatter ------------------------------------------------------- */

static int case_reduce_scatter(cc_t *c, const case_t *k, const char *what) {
  size_t n = (size_t)c->nranks, es = h_dt_size(k->dt);
  size_t bytes = k->count * es, total = n * k->count;
  void *input = h_xmalloc(n * bytes), *expect = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, c->rank, 0, k->salt, input, total);
  h_fill_expected(k->dt, k->op, c->nranks, (size_t)c->rank * k->count, k->salt,
                  expect, k->count);
  check_t ck = {c, what, 0};
  h_buf_t send = {0}, recv = {0};
  ringcc_result_t r;
  const void *result;
  if (k->mode == M_OOP) {
    xbuf(&send, n * bytes);
    xbuf(&recv, bytes);
    memcpy(send.p, input, n * bytes);
    h_buf_scribble(&recv, k->salt);
    r = ringcc_reduce_scatter(send.p, recv.p, k->count, k->dt, k->op, c->comm,
                              NULL);
    result = recv.p;
  } else {
    xbuf(&send, n * bytes);
    memcpy(send.p, input, n * bytes);
    void *rb = k->mode == M_NCCL ? send.p + (size_t)c->rank * bytes : send.p;
    const void *sb = k->mode == M_NCCL ? send.p : RINGCC_IN_PLACE;
    r = ringcc_reduce_scatter(sb, rb, k->count, k->dt, k->op, c->comm, NULL);
    result = rb;
  }
  check_call(&ck, r, "ringcc_reduce_scatter");
  if (ck.rc == 0) {
    check_elems(&ck, "result", k->dt, result, expect, k->count);
    check_guards(&ck, k->mode == M_OOP ? "sendbuf" : "buffer", &send);
    if (k->mode == M_OOP) {
      check_guards(&ck, "recvbuf", &recv);
      check_elems(&ck, "sendbuf changed", k->dt, send.p, input, total);
    } else if (k->mode == M_NCCL) {
      /* The other blocks are the (const) input of this rank. */
      size_t mine = (size_t)c->rank * k->count;
      check_elems(&ck, "sendbuf before the own block changed", k->dt, send.p,
                  input, mine);
      check_elems(&ck, "sendbuf after the own block changed", k->dt,
                  send.p + (mine + k->count) * es,
                  (char *)input + (mine + k->count) * es,
                  total - mine - k->count);
    }
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(input);
  free(expect);
  return ck.rc;
}

/* ---- allgather ------------------------------------------------------------ */

static int case_allgather(cc_t *c, const case_t *k, const char *what) {
  size_t n = (size_t)c->nranks, es = h_dt_size(k->dt), bytes = k->count * es;
  void *expect = h_xmalloc(n * bytes);
  for (size_t i = 0; i < n; i++)
    h_fill_pattern(k->dt, i, 0, k->salt, (char *)expect + i * bytes, k->count);
  const void *mine = (char *)expect + (size_t)c->rank * bytes;
  check_t ck = {c, what, 0};
  h_buf_t send = {0}, recv = {0};
  xbuf(&recv, n * bytes);
  h_buf_scribble(&recv, k->salt + 1);
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&send, bytes);
    memcpy(send.p, mine, bytes);
    r = ringcc_allgather(send.p, recv.p, k->count, k->dt, c->comm, NULL);
  } else {
    void *own = recv.p + (size_t)c->rank * bytes;
    memcpy(own, mine, bytes);
    const void *sb = k->mode == M_NCCL ? own : RINGCC_IN_PLACE;
    r = ringcc_allgather(sb, recv.p, k->count, k->dt, c->comm, NULL);
  }
  check_call(&ck, r, "ringcc_allgather");
  if (ck.rc == 0) {
    check_elems(&ck, "result", k->dt, recv.p, expect, n * k->count);
    check_guards(&ck, "recvbuf", &recv);
    if (k->mode == M_OOP) {
      check_elems(&ck, "sendbuf changed", k->dt, send.p, mine, k->count);
      check_guards(&ck, "sendbuf", &send);
    }
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(expect);
  return ck.rc;
}

/* ---- bcast ------------------------------------------------------------------ */

static int case_bcast(cc_t *c, const case_t *k, const char *what) {
  size_t bytes = k->count * h_dt_size(k->dt);
  void *expect = h_xmalloc(bytes);
  h_fill_pattern(k->dt, (uint64_t)k->root, 0, k->salt, expect, k->count);
  check_t ck = {c, what, 0};
  h_buf_t buf = {0};
  xbuf(&buf, bytes);
  if (c->rank == k->root)
    memcpy(buf.p, expect, bytes);
  else
    h_buf_scribble(&buf, k->salt + (uint64_t)c->rank);
  ringcc_result_t r =
      ringcc_bcast(buf.p, k->count, k->dt, k->root, c->comm, NULL);
  check_call(&ck, r, "ringcc_bcast");
  if (ck.rc == 0) {
    check_elems(&ck, c->rank == k->root ? "root's buffer changed" : "result",
                k->dt, buf.p, expect, k->count);
    check_guards(&ck, "buf", &buf);
  }
  h_buf_free(&buf);
  free(expect);
  return ck.rc;
}

/* ---- reduce ------------------------------------------------------------------ */

static int case_reduce(cc_t *c, const case_t *k, const char *what) {
  size_t es = h_dt_size(k->dt), bytes = k->count * es;
  bool root = c->rank == k->root;
  void *input = h_xmalloc(bytes), *expect = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, c->rank, 0, k->salt, input, k->count);
  if (root)
    h_fill_expected(k->dt, k->op, c->nranks, 0, k->salt, expect, k->count);
  check_t ck = {c, what, 0};
  h_buf_t send = {0}, recv = {0};
  ringcc_result_t r;
  /* Non-roots pass recvbuf NULL for odd counts and a buffer that must stay
   * untouched for even counts. */
  bool nonroot_buf = !root && k->count % 2 == 0;
  if (k->mode == M_NCCL) {
    xbuf(&send, bytes);
    memcpy(send.p, input, bytes);
    r = ringcc_reduce(send.p, send.p, k->count, k->dt, k->op, k->root, c->comm,
                      NULL);
  } else if (k->mode == M_MPI && root) {
    xbuf(&recv, bytes);
    memcpy(recv.p, input, bytes);
    r = ringcc_reduce(RINGCC_IN_PLACE, recv.p, k->count, k->dt, k->op, k->root,
                      c->comm, NULL);
  } else {
    xbuf(&send, bytes);
    memcpy(send.p, input, bytes);
    if (root || nonroot_buf) {
      xbuf(&recv, bytes);
      h_buf_scribble(&recv, k->salt + 7);
    }
    r = ringcc_reduce(send.p, recv.p, k->count, k->dt, k->op, k->root, c->comm,
                      NULL);
  }
  check_call(&ck, r, "ringcc_reduce");
  if (ck.rc == 0) {
    if (k->mode == M_NCCL) {
      check_elems(&ck, root ? "result" : "non-root buffer changed", k->dt,
                  send.p, root ? expect : input, k->count);
      check_guards(&ck, "buffer", &send);
    } else {
      if (send.p != NULL) {
        check_elems(&ck, "sendbuf changed", k->dt, send.p, input, k->count);
        check_guards(&ck, "sendbuf", &send);
      }
      if (root)
        check_elems(&ck, "result", k->dt, recv.p, expect, k->count);
      else if (recv.p != NULL && ck.rc == 0 &&
               !h_buf_scribble_ok(c->h, what, &recv, k->salt + 7, 0, bytes))
        ck.rc = 1; /* a non-root recvbuf is not the library's to write */
      if (recv.p != NULL)
        check_guards(&ck, "recvbuf", &recv);
    }
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(input);
  free(expect);
  return ck.rc;
}

/* ---- alltoall ------------------------------------------------------------------ */

static int case_alltoall(cc_t *c, const case_t *k, const char *what) {
  size_t n = (size_t)c->nranks, es = h_dt_size(k->dt), bytes = k->count * es;
  /* Element e of block j sent by rank i: pattern(owner i, index j*count+e). */
  void *input = h_xmalloc(n * bytes), *expect = h_xmalloc(n * bytes);
  h_fill_pattern(k->dt, (uint64_t)c->rank, 0, k->salt, input, n * k->count);
  for (size_t i = 0; i < n; i++)
    h_fill_pattern(k->dt, i, (size_t)c->rank * k->count, k->salt,
                   (char *)expect + i * bytes, k->count);
  check_t ck = {c, what, 0};
  h_buf_t send = {0}, recv = {0};
  xbuf(&recv, n * bytes);
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&send, n * bytes);
    memcpy(send.p, input, n * bytes);
    h_buf_scribble(&recv, k->salt + 3);
    r = ringcc_alltoall(send.p, recv.p, k->count, k->dt, c->comm, NULL);
  } else {
    memcpy(recv.p, input, n * bytes);
    const void *sb = k->mode == M_NCCL ? recv.p : RINGCC_IN_PLACE;
    r = ringcc_alltoall(sb, recv.p, k->count, k->dt, c->comm, NULL);
  }
  check_call(&ck, r, "ringcc_alltoall");
  if (ck.rc == 0) {
    check_elems(&ck, "result", k->dt, recv.p, expect, n * k->count);
    check_guards(&ck, "recvbuf", &recv);
    if (k->mode == M_OOP) {
      check_elems(&ck, "sendbuf changed", k->dt, send.p, input, n * k->count);
      check_guards(&ck, "sendbuf", &send);
    }
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(input);
  free(expect);
  return ck.rc;
}

/* ---- send / recv ------------------------------------------------------------ */

/* Ring exchange: send to (r+1)%n, receive from (r-1)%n; even ranks send
 * first, odd ranks receive first (no deadlock even when sends block until
 * the receiver takes the message). */
static int case_ring_exchange(cc_t *c, const case_t *k, const char *what) {
  int n = c->nranks, next = (c->rank + 1) % n, prev = (c->rank + n - 1) % n;
  size_t bytes = k->count * h_dt_size(k->dt);
  check_t ck = {c, what, 0};
  if (n == 1)
    return 0;
  h_buf_t send = {0}, recv = {0};
  void *mine = h_xmalloc(bytes), *expect = h_xmalloc(bytes);
  h_fill_pattern(k->dt, (uint64_t)c->rank, 0, k->salt, mine, k->count);
  h_fill_pattern(k->dt, (uint64_t)prev, 0, k->salt, expect, k->count);
  xbuf(&send, bytes);
  xbuf(&recv, bytes);
  memcpy(send.p, mine, bytes);
  h_buf_scribble(&recv, k->salt + 5);
  ringcc_result_t r;
  if (c->rank % 2 == 0) {
    r = ringcc_send(send.p, k->count, k->dt, next, c->comm, NULL);
    check_call(&ck, r, "ringcc_send");
    if (ck.rc == 0) {
      r = ringcc_recv(recv.p, k->count, k->dt, prev, c->comm, NULL);
      check_call(&ck, r, "ringcc_recv");
    }
  } else {
    r = ringcc_recv(recv.p, k->count, k->dt, prev, c->comm, NULL);
    check_call(&ck, r, "ringcc_recv");
    if (ck.rc == 0) {
      r = ringcc_send(send.p, k->count, k->dt, next, c->comm, NULL);
      check_call(&ck, r, "ringcc_send");
    }
  }
  if (ck.rc == 0) {
    check_elems(&ck, "received", k->dt, recv.p, expect, k->count);
    check_guards(&ck, "recv buf", &recv);
    check_elems(&ck, "send buf changed", k->dt, send.p, mine, k->count);
    check_guards(&ck, "send buf", &send);
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(mine);
  free(expect);
  return ck.rc;
}

/* Several messages in a row to the same peer, of different sizes (some over
 * 1 MiB) and datatypes: received in the order sent. */
static int sendrecv_in_order(cc_t *c, uint64_t salt) {
  static const struct {
    ringcc_datatype_t dt;
    size_t count;
  } msgs[] = {{RINGCC_INT32, 1},       {RINGCC_FLOAT64, 1031},
              {RINGCC_UINT8, 7},       {RINGCC_INT32, 300000},
              {RINGCC_FLOAT16, 0},     {RINGCC_INT64, 13},
              {RINGCC_FLOAT32, 65537}, {RINGCC_BFLOAT16, 2}};
  enum { NMSG = sizeof msgs / sizeof msgs[0] };
  int n = c->nranks, next = (c->rank + 1) % n, prev = (c->rank + n - 1) % n;
  if (n == 1)
    return 0;
  h_buf_t send[NMSG], recv[NMSG];
  int rc = 0;
  for (int m = 0; m < NMSG; m++) {
    size_t bytes = msgs[m].count * h_dt_size(msgs[m].dt);
    xbuf(&send[m], bytes);
    xbuf(&recv[m], bytes);
    h_fill_pattern(msgs[m].dt, (uint64_t)c->rank, 0, salt + (uint64_t)m,
                   send[m].p, msgs[m].count);
    h_buf_scribble(&recv[m], salt + 100 + (uint64_t)m);
  }
  char what[160];
  for (int phase = 0; phase < 2 && rc == 0; phase++) {
    bool sending = (phase == 0) == (c->rank % 2 == 0);
    for (int m = 0; m < NMSG && rc == 0; m++) {
      ringcc_result_t r =
          sending ? ringcc_send(send[m].p, msgs[m].count, msgs[m].dt, next,
                                c->comm, NULL)
                  : ringcc_recv(recv[m].p, msgs[m].count, msgs[m].dt, prev,
                                c->comm, NULL);
      if (r != RINGCC_SUCCESS) {
        h_fail(c->h, "%ssendrecv in order: message %d (%s count=%zu) to/from "
                     "%d: %s returned %d (%s): %s", c->comm_tag, m,
               h_dt_name(msgs[m].dt), msgs[m].count, sending ? next : prev,
               sending ? "ringcc_send" : "ringcc_recv", (int)r,
               ringcc_strerror(r), ringcc_comm_last_error(c->comm));
        rc = -1;
      }
    }
  }
  for (int m = 0; m < NMSG && rc == 0; m++) {
    size_t bytes = msgs[m].count * h_dt_size(msgs[m].dt);
    void *expect = h_xmalloc(bytes);
    h_fill_pattern(msgs[m].dt, (uint64_t)prev, 0, salt + (uint64_t)m, expect,
                   msgs[m].count);
    snprintf(what, sizeof what, "%ssendrecv in order (nranks=%d): message %d "
             "of %d (%s count=%zu) from rank %d", c->comm_tag, n, m, NMSG,
             h_dt_name(msgs[m].dt), msgs[m].count, prev);
    check_t ck = {c, what, 0};
    check_elems(&ck, "received", msgs[m].dt, recv[m].p, expect, msgs[m].count);
    check_guards(&ck, "recv buf", &recv[m]);
    if (ck.rc)
      rc = ck.rc;
    free(expect);
  }
  for (int m = 0; m < NMSG; m++) {
    h_buf_free(&send[m]);
    h_buf_free(&recv[m]);
  }
  return rc;
}

/* Every pair exchanges one message each way, pairs taken in one global order
 * (which cannot deadlock): connections between ranks that are not ring
 * neighbours. */
static int sendrecv_all_pairs(cc_t *c, size_t count, uint64_t salt) {
  ringcc_datatype_t dt = RINGCC_INT32;
  size_t bytes = count * h_dt_size(dt);
  h_buf_t send = {0}, recv = {0};
  void *expect = h_xmalloc(bytes);
  xbuf(&send, bytes);
  xbuf(&recv, bytes);
  int rc = 0;
  for (int a = 0; a < c->nranks && rc == 0; a++) {
    for (int b = a + 1; b < c->nranks && rc == 0; b++) {
      if (c->rank != a && c->rank != b)
        continue;
      int peer = c->rank == a ? b : a;
      uint64_t pair_salt = salt ^ h_hash3((uint64_t)a, (uint64_t)b, 0);
      h_fill_pattern(dt, (uint64_t)c->rank, 0, pair_salt, send.p, count);
      h_fill_pattern(dt, (uint64_t)peer, 0, pair_salt, expect, count);
      h_buf_scribble(&recv, pair_salt);
      ringcc_result_t r1, r2;
      if (c->rank == a) {
        r1 = ringcc_send(send.p, count, dt, peer, c->comm, NULL);
        r2 = r1 ? r1 : ringcc_recv(recv.p, count, dt, peer, c->comm, NULL);
      } else {
        r1 = ringcc_recv(recv.p, count, dt, peer, c->comm, NULL);
        r2 = r1 ? r1 : ringcc_send(send.p, count, dt, peer, c->comm, NULL);
      }
      char what[160];
      snprintf(what, sizeof what, "%ssendrecv all pairs (nranks=%d) int32 "
               "count=%zu with rank %d", c->comm_tag, c->nranks, count, peer);
      check_t ck = {c, what, 0};
      check_call(&ck, r1 ? r1 : r2, "ringcc_send/ringcc_recv");
      if (ck.rc == 0) {
        check_elems(&ck, "received", dt, recv.p, expect, count);
        check_guards(&ck, "recv buf", &recv);
      }
      rc = ck.rc;
    }
  }
  h_buf_free(&send);
  h_buf_free(&recv);
  free(expect);
  return rc;
}

/* ---- barrier ---------------------------------------------------------------- */

#define BARRIER_ROUNDS 24

/* Ranks arrive at different times (one late rank per round, or staggered);
 * a rank leaving the barrier must see that every rank entered. */
static int barrier_rounds(cc_t *c, uint32_t *counters) {
  for (int round = 0; round < BARRIER_ROUNDS; round++) {
    int delay_ms = round % 2 == 0 ? (c->rank == round / 2 % c->nranks ? 30 : 0)
                                  : (c->rank * 3 + round) % 7;
    if (delay_ms > 0)
      h_sleep_ms(delay_ms);
    __atomic_fetch_add(&counters[round], 1, __ATOMIC_SEQ_CST);
    ringcc_result_t r = ringcc_barrier(c->comm, NULL);
    if (r != RINGCC_SUCCESS)
      return h_fail(c->h, "%sbarrier round %d (nranks=%d): ringcc_barrier "
                          "returned %d (%s): %s", c->comm_tag, round,
                    c->nranks, (int)r, ringcc_strerror(r),
                    ringcc_comm_last_error(c->comm)), -1;
    uint32_t entered = __atomic_load_n(&counters[round], __ATOMIC_SEQ_CST);
    if (entered != (uint32_t)c->nranks)
      return h_fail(c->h, "%sbarrier round %d (nranks=%d): left the barrier "
                          "when only %u of %d ranks had entered it",
                    c->comm_tag, round, c->nranks, entered, c->nranks);
  }
  return 0;
}

/* ---- dispatch ------------------------------------------------------------------ */

static int run_case(cc_t *c, const case_t *k) {
  char what[256];
  describe(c, k, what, sizeof what);
  int rc;
  switch (k->coll) {
  case C_ALLREDUCE:
    rc = case_allreduce(c, k, what);
    break;
  case C_REDUCE_SCATTER:
    rc = case_reduce_scatter(c, k, what);
    break;
  case C_ALLGATHER:
    rc = case_allgather(c, k, what);
    break;
  case C_BCAST:
    rc = case_bcast(c, k, what);
    break;
  case C_REDUCE:
    rc = case_reduce(c, k, what);
    break;
  case C_ALLTOALL:
    rc = case_alltoall(c, k, what);
    break;
  case C_SENDRECV:
    rc = case_ring_exchange(c, k, what);
    break;
  default: {
    ringcc_result_t r = ringcc_barrier(c->comm, NULL);
    rc = r == RINGCC_SUCCESS ? 0
                             : (h_fail(c->h, "%s: ringcc_barrier returned %d "
                                             "(%s): %s", what, (int)r,
                                       ringcc_strerror(r),
                                       ringcc_comm_last_error(c->comm)), -1);
    break;
  }
  }
  if (rc > 0)
    c->failures++;
  /* A failed call may leave the peers waiting: stop. Wrong results: keep
   * going (every rank runs the same calls) up to MAX_FAILURES. */
  if (rc < 0 || c->failures >= MAX_FAILURES)
    return -1;
  return 0;
}

static uint64_t case_salt(enum coll coll, ringcc_datatype_t dt, ringcc_op_t op,
                          size_t count) {
  return h_hash3((uint64_t)coll, (uint64_t)dt * 16 + (uint64_t)op, count);
}

/* The roots a case runs with: all of them for small counts and n <= 5, else
 * 0, the middle and the last, and one rotating root for large counts. */
static int pick_roots(const cc_t *c, size_t count, unsigned rot, int *roots) {
  int n = c->nranks;
  if (count > c->plan->all_roots_max_count) {
    roots[0] = (int)(rot % (unsigned)n);
    return 1;
  }
  if (n <= 5) {
    for (int i = 0; i < n; i++)
      roots[i] = i;
    return n;
  }
  roots[0] = 0;
  roots[1] = n / 2 - 1;
  roots[2] = n - 1;
  return 3;
}

/* Modes for a count: all for small counts, else one that rotates with rot. */
static unsigned pick_modes(const cc_t *c, enum coll coll, size_t count,
                           unsigned rot) {
  unsigned avail = coll_modes(coll) & c->plan->modes;
  if (avail == 0)
    avail = 1u << M_OOP;
  if (count <= c->plan->all_modes_max_count)
    return avail;
  for (unsigned i = 0; i < M_NUM; i++) {
    unsigned m = (rot + i) % M_NUM;
    if (avail & (1u << m))
      return 1u << m;
  }
  return avail;
}

static int sweep(cc_t *c, enum coll coll) {
  const plan_t *p = c->plan;
  unsigned rot = 0;
  for (int d = 0; d < RINGCC_NUM_DATATYPES; d++) {
    if (!(p->dts & (1u << d)))
      continue;
    bool one_pass_done = false;
    for (int o = 0; o < RINGCC_NUM_OPS; o++) {
      if (!(p->ops & (1u << o)))
        continue;
      if (!coll_reduces(coll)) { /* data movement: one pass per datatype */
        if (one_pass_done)
          break;
        one_pass_done = true;
      }
      for (int ci = 0; ci < p->ncounts; ci++, rot++) {
        size_t count = p->counts[ci];
        unsigned modes = pick_modes(c, coll, count, rot);
        int roots[8] = {0}, nroots = 1;
        if (coll_rooted(coll))
          nroots = pick_roots(c, count, rot, roots);
        for (int m = 0; m < M_NUM; m++) {
          if (!(modes & (1u << m)))
            continue;
          for (int ri = 0; ri < nroots; ri++) {
            case_t k = {coll, (ringcc_datatype_t)d, (ringcc_op_t)o, count,
                        (enum mode)m, roots[ri],
                        case_salt(coll, (ringcc_datatype_t)d, (ringcc_op_t)o,
                                  count)};
            if (run_case(c, &k) < 0)
              return 1;
          }
        }
      }
    }
  }
  return c->failures ? 1 : 0;
}

/* The few-MiB cases of a collective. */
static int big_cases(cc_t *c, enum coll coll) {
  size_t n = (size_t)c->nranks;
  case_t ks[2];
  int nk = 0;
  switch (coll) {
  case C_ALLREDUCE:
    ks[nk++] = (case_t){coll, RINGCC_FLOAT32, RINGCC_SUM, (size_t)1 << 20,
                        M_OOP, 0, 11};
    ks[nk++] = (case_t){coll, RINGCC_BFLOAT16, RINGCC_MAX,
                        ((size_t)3 << 19) + 1, M_MPI, 0, 12};
    break;
  case C_REDUCE_SCATTER:
    ks[nk++] = (case_t){coll, RINGCC_FLOAT32, RINGCC_SUM,
                        ((size_t)1 << 20) / n + 3, M_OOP, 0, 13};
    ks[nk++] = (case_t){coll, RINGCC_INT64, RINGCC_MIN,
                        ((size_t)1 << 19) / n + 1, M_NCCL, 0, 14};
    break;
  case C_ALLGATHER:
    ks[nk++] = (case_t){coll, RINGCC_FLOAT32, 0, ((size_t)1 << 20) / n + 1,
                        M_OOP, 0, 15};
    ks[nk++] = (case_t){coll, RINGCC_UINT8, 0, ((size_t)3 << 20) / n + 5,
                        M_MPI, 0, 16};
    break;
  case C_BCAST:
    ks[nk++] = (case_t){coll, RINGCC_FLOAT32, 0, (size_t)1 << 20, M_OOP,
                        (int)(n - 1), 17};
    break;
  case C_REDUCE:
    ks[nk++] = (case_t){coll, RINGCC_FLOAT32, RINGCC_SUM, (size_t)1 << 20,
                        M_OOP, (int)(n / 2), 18};
    ks[nk++] = (case_t){coll, RINGCC_FLOAT16, RINGCC_AVG,
                        ((size_t)1 << 20) + 7, M_MPI, 0, 19};
    break;
  case C_ALLTOALL:
    ks[nk++] = (case_t){coll, RINGCC_INT32, 0, ((size_t)1 << 20) / n + 5,
                        M_OOP, 0, 20};
    ks[nk++] = (case_t){coll, RINGCC_FLOAT64, 0, ((size_t)1 << 18) / n + 1,
                        M_NCCL, 0, 21};
    break;
  case C_SENDRECV:
    ks[nk++] = (case_t){coll, RINGCC_FLOAT64, 0, (size_t)1 << 19, M_OOP, 0,
                        22};
    break;
  default:
    break;
  }
  for (int i = 0; i < nk; i++)
    if (run_case(c, &ks[i]) < 0)
      return 1;
  return c->failures ? 1 : 0;
}

static int run_coll(cc_t *c, enum coll coll) {
  const plan_t *p = c->plan;
  if (coll == C_BARRIER)
    return p->barrier_counters ? barrier_rounds(c, p->barrier_counters) != 0
                               : 0;
  int rc = sweep(c, coll);
  if (rc == 0 && p->big)
    rc = big_cases(c, coll);
  if (rc == 0 && coll == C_SENDRECV) {
    rc = sendrecv_in_order(c, 0x5e9d) != 0;
    if (rc == 0)
      rc = sendrecv_all_pairs(c, 1031, 0xa11) != 0;
  }
  return rc;
}

/* ---- interleaved sequence and two communicators ---------------------------- */

static uint64_t rng_next(uint64_t *s) {
  *s += 0x9e3779b97f4a7c15ull;
  return h_mix64(*s);
}

/* A pseudo-random case, the same on every rank (same seed). */
static case_t random_case(uint64_t *seed, int nranks, unsigned colls) {
  case_t k;
  do
    k.coll = (enum coll)(rng_next(seed) % C_NUM);
  while (!(colls & (1u << k.coll)));
  k.dt = (ringcc_datatype_t)(rng_next(seed) % RINGCC_NUM_DATATYPES);
  k.op = coll_reduces(k.coll) ? (ringcc_op_t)(rng_next(seed) % RINGCC_NUM_OPS)
                              : RINGCC_SUM;
  uint64_t sz = rng_next(seed) % 16;
  k.count = sz == 0 ? 0 : sz < 12 ? (size_t)(rng_next(seed) % 300)
                        : (size_t)(rng_next(seed) % 70000);
  unsigned modes = coll_modes(k.coll);
  do
    k.mode = (enum mode)(rng_next(seed) % M_NUM);
  while (!(modes & (1u << k.mode)));
  k.root = (int)(rng_next(seed) % (uint64_t)nranks);
  k.salt = rng_next(seed);
  return k;
}

static int interleaved(cc_t *c, int steps) {
  uint64_t seed = 0x1e7e12ea5edull;
  for (int i = 0; i < steps; i++) {
    case_t k = random_case(&seed, c->nranks, (1u << C_NUM) - 1);
    if (run_case(c, &k) < 0)
      return 1;
  }
  return c->failures ? 1 : 0;
}

/* A second communicator over the same ranks in reverse order, used
 * alternately with the first. */
static int two_comms(cc_t *c1) {
  h_ctx_t *h = c1->h;
  ringcc_comm_t comm2 = NULL;
  int rank2 = h->nranks - 1 - h->rank;
  ringcc_result_t r = ringcc_comm_init(&comm2, h->nranks, &h->extra_ids[0],
                                       rank2, h->config);
  if (!h_ok(h, r, "ringcc_comm_init (second communicator)"))
    return 1;
  cc_t c2 = *c1;
  c2.comm = comm2;
  c2.rank = rank2;
  c2.comm_tag = "comm2 ";
  c2.comm_id = 1;
  uint64_t seed1 = 0x7770ull, seed2 = 0x7771ull;
  int rc = 0;
  for (int i = 0; i < 60 && rc == 0; i++) {
    case_t k1 = random_case(&seed1, c1->nranks, (1u << C_BARRIER) - 1);
    case_t k2 = random_case(&seed2, c2.nranks, (1u << C_BARRIER) - 1);
    if (run_case(c1, &k1) < 0 || run_case(&c2, &k2) < 0)
      rc = 1;
  }
  if (c1->failures || c2.failures)
    rc = 1;
  r = ringcc_comm_destroy(comm2);
  if (!h_ok(h, r, "ringcc_comm_destroy (second communicator)"))
    rc = 1;
  return rc;
}

static int body(h_ctx_t *h) {
  const plan_t *p = h->arg;
  uint32_t hash_next = 0;
  cc_t c = {h, h->comm, h->rank, h->nranks, "", 0, p, 0, &hash_next};
  if (p->interleaved_steps > 0)
    return interleaved(&c, p->interleaved_steps);
  if (p->two_comms)
    return two_comms(&c);
  for (int coll = 0; coll < C_NUM; coll++)
    if (p->colls & (1u << coll))
      if (run_coll(&c, (enum coll)coll) != 0)
        return 1;
  return 0;
}

/* ---- running a plan from a Criterion test ------------------------------------- */

/* float8 runs in its own suite (float8/n1..n8, below), so that the families'
 * time stays what it was. */
#define FP8_DTS ((1u << RINGCC_FLOAT8_E4M3) | (1u << RINGCC_FLOAT8_E5M2))
#define ALL_DTS (((1u << RINGCC_NUM_DATATYPES) - 1) & ~FP8_DTS)
#define ALL_OPS ((1u << RINGCC_NUM_OPS) - 1)
#define ALL_MODES ((1u << M_NUM) - 1)

static void compare_hashes(const hash_area_t *ha, int nranks) {
  cr_assert(!ha->overflow, "more allreduce cases than hash slots");
  for (uint32_t i = 0; i < ha->ncases; i++)
    for (int r = 1; r < nranks; r++)
      cr_assert(ha->hash[i][r] == ha->hash[i][0],
                "allreduce results differ bitwise between rank 0 and rank %d "
                "(case %u: %s%s %s count=%u %s)", r, i,
                ha->desc[i].comm ? "comm2 " : "",
                h_dt_name((ringcc_datatype_t)ha->desc[i].dt),
                h_op_name((ringcc_op_t)ha->desc[i].op), ha->desc[i].count,
                mode_names[ha->desc[i].mode]);
}

typedef struct {
  const char *name;
  int nranks;
  const ringcc_config_t *config;
  bool threads;
  double timeout_s;
  int n_extra_ids;
  bool skip_if_unsupported; /* init says RINGCC_ERR_UNSUPPORTED: skip */
} run_spec_t;

static void run_plan(const run_spec_t *s, plan_t *p) {
  hash_area_t *ha = h_shared_alloc(sizeof *ha);
  uint32_t *counters = h_shared_alloc(BARRIER_ROUNDS * sizeof(uint32_t));
  cr_assert(ha != NULL && counters != NULL, "mmap of the shared area failed");
  p->hashes = ha;
  p->barrier_counters = counters;
  h_run_opts_t o = {.nranks = s->nranks,
                    .body = body,
                    .arg = p,
                    .config = s->config,
                    .timeout_s = s->timeout_s,
                    .threads = s->threads,
                    .n_extra_ids = s->n_extra_ids,
                    .name = s->name};
  bool unsupported = false;
  char why[512] = "";
  if (s->skip_if_unsupported) {
    o.unsupported = &unsupported;
    o.unsupported_why = why;
    o.unsupported_why_len = sizeof why;
  }
  double t0 = h_now_s();
  bool ok = h_run(&o);
  double secs = h_now_s() - t0;
  if (unsupported) {
    h_shared_free(ha, sizeof *ha);
    h_shared_free(counters, BARRIER_ROUNDS * sizeof(uint32_t));
    cr_skip_test("%s: not supported by this build: %s", s->name, why);
  }
  if (getenv("RCC_TEST_VERBOSE"))
    fprintf(stderr, "%s: %.2f s, %u allreduce results compared\n", s->name,
            secs, ha->ncases);
  cr_assert(ok, "%s failed (nranks=%d; the lines above say which rank and "
                "what)", s->name, s->nranks);
  compare_hashes(ha, s->nranks);
  h_shared_free(ha, sizeof *ha);
  h_shared_free(counters, BARRIER_ROUNDS * sizeof(uint32_t));
}

/* The full sweep of one collective at n ranks. */
static void full_family_cfg(enum coll coll, int nranks,
                            const ringcc_config_t *cfg, const char *what) {
  char name[96];
  snprintf(name, sizeof name, "%s%s n=%d", what, coll_names[coll], nranks);
  plan_t p = {.colls = 1u << coll,
              .dts = ALL_DTS,
              .ops = ALL_OPS,
              .modes = ALL_MODES,
              .counts = std_counts,
              .ncounts = NSTD,
              /* n >= 4 rotates the mode at 65537: the slowest runs */
              .all_modes_max_count = nranks <= 3 ? 65537 : 1031,
              .all_roots_max_count = 1031,
              .big = true};
  run_spec_t s = {name, nranks, cfg, false, 200, 0, false};
  run_plan(&s, &p);
}

static void full_family(enum coll coll, int nranks) {
  full_family_cfg(coll, nranks, NULL, "");
}

#define FAMILY(coll, suite, tmo)                                               \
  Test(suite, n1, .timeout = tmo) { full_family(coll, 1); }                    \
  Test(suite, n2, .timeout = tmo) { full_family(coll, 2); }                    \
  Test(suite, n3, .timeout = tmo) { full_family(coll, 3); }                    \
  Test(suite, n4, .timeout = tmo) { full_family(coll, 4); }                    \
  Test(suite, n5, .timeout = tmo) { full_family(coll, 5); }                    \
  Test(suite, n8, .timeout = tmo) { full_family(coll, 8); }

FAMILY(C_ALLREDUCE, allreduce, 240)
FAMILY(C_REDUCE_SCATTER, reduce_scatter, 240)
FAMILY(C_ALLGATHER, allgather, 240)
FAMILY(C_BCAST, bcast, 240)
FAMILY(C_REDUCE, reduce, 240)
FAMILY(C_ALLTOALL, alltoall, 240)
FAMILY(C_SENDRECV, sendrecv, 240)
FAMILY(C_BARRIER, barrier, 240)

/* ---- subsets: tiny FIFO slots, forced algorithms, threads ------------------- */

static const size_t subset_counts[] = {0, 1, 7, 13, 1031, 4099, 65537};
#define NSUBSET (int)(sizeof subset_counts / sizeof subset_counts[0])
#define SUBSET_DTS                                                             \
  ((1u << RINGCC_INT8) | (1u << RINGCC_UINT64) | (1u << RINGCC_FLOAT16) |      \
   (1u << RINGCC_BFLOAT16) | (1u << RINGCC_FLOAT32) | (1u << RINGCC_FLOAT64))
#define SUBSET_OPS ((1u << RINGCC_SUM) | (1u << RINGCC_MIN) | (1u << RINGCC_AVG))

static void subset(const char *what, int nranks, const ringcc_config_t *cfg,
                   bool threads, bool skip_if_unsupported) {
  char name[96];
  snprintf(name, sizeof name, "%s n=%d", what, nranks);
  plan_t p = {.colls = (1u << C_NUM) - 1,
              .dts = SUBSET_DTS,
              .ops = SUBSET_OPS,
              .modes = ALL_MODES,
              .counts = subset_counts,
              /* n = 8: up to 4099 (time); smaller n also run 65537 */
              .ncounts = nranks >= 8 ? NSUBSET - 1 : NSUBSET,
              .all_modes_max_count = 4099,
              .all_roots_max_count = 13,
              .big = false};
  run_spec_t s = {name, nranks, cfg, threads, 200, 0, skip_if_unsupported};
  run_plan(&s, &p);
}

/* ---- float8: every collective, op and mode at n = 1..8 ---------------------- */

static void float8_family(int nranks) {
  char name[96];
  snprintf(name, sizeof name, "float8 n=%d", nranks);
  plan_t p = {.colls = (1u << C_NUM) - 1,
              .dts = FP8_DTS,
              .ops = ALL_OPS,
              .modes = ALL_MODES,
              .counts = subset_counts,
              .ncounts = NSUBSET - 1, /* up to 4099 */
              .all_modes_max_count = 4099,
              .all_roots_max_count = 13,
              .big = false};
  run_spec_t s = {name, nranks, NULL, false, 200, 0, false};
  run_plan(&s, &p);
}

Test(float8, n1, .timeout = 240) { float8_family(1); }
Test(float8, n2, .timeout = 240) { float8_family(2); }
Test(float8, n3, .timeout = 240) { float8_family(3); }
Test(float8, n4, .timeout = 240) { float8_family(4); }
Test(float8, n5, .timeout = 300) { float8_family(5); }
Test(float8, n6, .timeout = 300) { float8_family(6); }
Test(float8, n7, .timeout = 300) { float8_family(7); }
Test(float8, n8, .timeout = 300) { float8_family(8); }

/* ---- channels: a call's data split over several FIFOs per edge -------------
 *
 * RINGCC_NCHANNELS=C splits every collective call over exactly C channels
 * (the tuner picks fewer without it), each with FIFOs of its own, the odd
 * ones running the ring the other way round; the host executor runs them in
 * turn. Every collective, datatype and op with every algorithm, over shared
 * memory and over TCP, with counts that leave some channels nothing (1, 7,
 * 13 elements over 3 channels of 64-byte granules). */

static void channels_run(const char *what, int nchannels, int nranks,
                         int shm_disable, int algo, bool every_type) {
  char name[96], value[8];
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = shm_disable;
  cfg.algo = algo;
  snprintf(value, sizeof value, "%d", nchannels);
  setenv("RINGCC_NCHANNELS", value, 1); /* this test's worker and its ranks */
  snprintf(name, sizeof name, "%d channels, %s n=%d", nchannels, what, nranks);
  plan_t p = {.colls = (1u << C_NUM) - 1,
              .dts = every_type ? ALL_DTS : SUBSET_DTS,
              .ops = every_type ? ALL_OPS : SUBSET_OPS,
              .modes = ALL_MODES,
              .counts = subset_counts,
              .ncounts = NSUBSET,
              .all_modes_max_count = 4099,
              .all_roots_max_count = 13,
              .big = false};
  run_spec_t s = {name, nranks, &cfg, false, 200, 0, true};
  run_plan(&s, &p);
  unsetenv("RINGCC_NCHANNELS");
}

Test(channels, c2_every_type_shm_n3, .timeout = 300) {
  channels_run("every datatype and op", 2, 3, 0, RINGCC_ALGO_AUTO, true);
}
Test(channels, c3_every_type_tcp_n4, .timeout = 300) {
  channels_run("every datatype and op, TCP", 3, 4, 1, RINGCC_ALGO_AUTO, true);
}
Test(channels, c3_every_algorithm_shm_n5, .timeout = 300) {
  static const int algos[] = {RINGCC_ALGO_RING, RINGCC_ALGO_TREE,
                              RINGCC_ALGO_ONESHOT, RINGCC_ALGO_RECDOUBLING,
                              RINGCC_ALGO_RABENSEIFNER, RINGCC_ALGO_CMA};
  for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++)
    channels_run(rcc_algo_setting_name(algos[i]), 3, 5, 0, algos[i], false);
}
Test(channels, c4_every_algorithm_tcp_n4, .timeout = 300) {
  static const int algos[] = {RINGCC_ALGO_RING, RINGCC_ALGO_TREE,
                              RINGCC_ALGO_ONESHOT, RINGCC_ALGO_RECDOUBLING,
                              RINGCC_ALGO_RABENSEIFNER};
  for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++)
    channels_run(rcc_algo_setting_name(algos[i]), 4, 4, 1, algos[i], false);
}

static ringcc_config_t tiny_slots(int64_t chunk_bytes) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.chunk_bytes = chunk_bytes;
  cfg.nslots = 2;
  return cfg;
}

Test(tiny_slots, chunk1024_n3, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(1024);
  subset("tiny slots (chunk 1024, 2 slots)", 3, &cfg, false, false);
}
Test(tiny_slots, chunk1024_n5, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(1024);
  subset("tiny slots (chunk 1024, 2 slots)", 5, &cfg, false, false);
}
Test(tiny_slots, chunk4096_n4, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(4096);
  subset("tiny slots (chunk 4096, 2 slots)", 4, &cfg, false, false);
}
Test(tiny_slots, chunk4096_n8, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(4096);
  subset("tiny slots (chunk 4096, 2 slots)", 8, &cfg, false, false);
}

static void forced_algo(int algo, const char *name, int nranks) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = algo;
  char what[64];
  snprintf(what, sizeof what, "algo=%s", name);
  subset(what, nranks, &cfg, false, true);
}

Test(algo, ring_n3, .timeout = 240) { forced_algo(RINGCC_ALGO_RING, "ring", 3); }
Test(algo, ring_n8, .timeout = 240) { forced_algo(RINGCC_ALGO_RING, "ring", 8); }
Test(algo, tree_n5, .timeout = 240) { forced_algo(RINGCC_ALGO_TREE, "tree", 5); }
Test(algo, tree_n8, .timeout = 240) { forced_algo(RINGCC_ALGO_TREE, "tree", 8); }
/* One-shot on host buffers over shared memory goes over the board
 * (exec_host.c); up to 48 bytes the data shares the header's cache line
 * (counts 1, 7, and 13 of one byte), above it starts on the next line.
 * Counts beyond one slot (65537) are not one-shot's: the tuner's pick runs.
 * n = 2: each rank reads one peer; with every rank its own CPU, waiting
 * polls. */
Test(algo, oneshot_n2, .timeout = 240) {
  forced_algo(RINGCC_ALGO_ONESHOT, "oneshot", 2);
}
/* With 512 KiB slots the board holds 256 KiB: one-shot of 65537 float32
 * (256 KiB + 4 B) goes through the FIFOs over shared memory, the smaller
 * counts over the board, alternating call by call. */
Test(algo, oneshot_board_and_fifos_n3, .timeout = 240) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_ONESHOT;
  cfg.chunk_bytes = 512 << 10;
  subset("algo=oneshot, 512 KiB slots", 3, &cfg, false, true);
}
Test(algo, oneshot_n5, .timeout = 240) {
  forced_algo(RINGCC_ALGO_ONESHOT, "oneshot", 5);
}
/* Cross-memory attach: reduce-scatter, allgather and allreduce of 256 KiB
 * and more read the peers' buffers in place (the smaller counts run the
 * tuner's pick). */
Test(algo, cma_n3, .timeout = 240) {
  forced_algo(RINGCC_ALGO_CMA, "cma", 3);
}
/* "direct", the older name: one-shot where it fits, else cross-memory
 * attach where it runs. */
Test(algo, direct_n4, .timeout = 240) {
  forced_algo(RINGCC_ALGO_DIRECT, "direct", 4);
}
/* 6: two ranks fold in before the exchanges and get the total after; 8: a
 * power of two, three exchanges */
Test(algo, recdoubling_n6, .timeout = 240) {
  forced_algo(RINGCC_ALGO_RECDOUBLING, "recdoubling", 6);
}
Test(algo, recdoubling_n8, .timeout = 240) {
  forced_algo(RINGCC_ALGO_RECDOUBLING, "recdoubling", 8);
}
/* Rabenseifner: 5 folds one rank in, 8 halves three times; with 1 KiB slots
 * every half of the larger counts goes in many pieces, and odd halves
 * differ by one element (a piece less on one side). */
Test(algo, rabenseifner_n5, .timeout = 240) {
  forced_algo(RINGCC_ALGO_RABENSEIFNER, "rabenseifner", 5);
}
Test(algo, rabenseifner_n8, .timeout = 240) {
  forced_algo(RINGCC_ALGO_RABENSEIFNER, "rabenseifner", 8);
}
/* 2: the one exchange is the first combine (it reads src, the input on the
 * left at the lower rank) and the last (AVG divides there). */
Test(algo, recdoubling_n2, .timeout = 240) {
  forced_algo(RINGCC_ALGO_RECDOUBLING, "recdoubling", 2);
}
Test(algo, rabenseifner_n2, .timeout = 240) {
  forced_algo(RINGCC_ALGO_RABENSEIFNER, "rabenseifner", 2);
}
/* Over TCP, where the tuner picks it: the first halving sends leave from
 * src, the doubling receives land in dst. */
Test(algo, rabenseifner_tcp_n4, .timeout = 240) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = RINGCC_ALGO_RABENSEIFNER;
  cfg.shm_disable = 1;
  subset("algo=rabenseifner over TCP", 4, &cfg, false, true);
}
Test(algo, rabenseifner_tiny_slots_n6, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(1024);
  cfg.algo = RINGCC_ALGO_RABENSEIFNER;
  subset("algo=rabenseifner, tiny slots (chunk 1024, 2 slots)", 6, &cfg,
         false, true);
}

/* The network transport (TCP sockets) between ranks of one host. */
static void no_shm(int nranks, int64_t chunk_bytes) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  if (chunk_bytes > 0) {
    cfg.chunk_bytes = chunk_bytes;
    cfg.nslots = 2;
  }
  subset(chunk_bytes > 0 ? "shm disabled, tiny slots" : "shm disabled",
         nranks, &cfg, false, true);
}

Test(transport, no_shm_n3, .timeout = 240) { no_shm(3, 0); }

/* The whole matrix (every collective, datatype, op, count and in-place form)
 * with every edge on TCP over loopback. */
Test(transport, no_shm_full_n4, .timeout = 600) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  for (enum coll c = 0; c < C_NUM; c++)
    full_family_cfg(c, 4, &cfg, "tcp ");
}
Test(transport, no_shm_n5_tiny_slots, .timeout = 240) { no_shm(5, 4096); }

/* Large pieces over TCP at an odd n: receives land straight in the user's
 * buffers (exec_host.c), in place and out of place, with every root. */
Test(transport, no_shm_big_n3, .timeout = 240) {
  static const size_t counts[] = {65537, 300007};
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.shm_disable = 1;
  plan_t p = {.colls = (1u << C_NUM) - 1,
              .dts = (1u << RINGCC_FLOAT32) | (1u << RINGCC_UINT8),
              .ops = 1u << RINGCC_SUM,
              .modes = ALL_MODES,
              .counts = counts,
              .ncounts = 2,
              .all_modes_max_count = 300007,
              .all_roots_max_count = 300007,
              .big = true};
  run_spec_t s = {"shm disabled, big pieces n=3", 3, &cfg, false, 200, 0,
                  false};
  run_plan(&s, &p);
}

Test(threads, n4, .timeout = 240) { subset("threads", 4, NULL, true, false); }
Test(threads, n3_tiny_slots, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(1024);
  subset("threads, tiny slots", 3, &cfg, true, false);
}

/* ---- sequences --------------------------------------------------------------- */

static void run_interleaved(int nranks, const ringcc_config_t *cfg,
                            bool threads, int steps) {
  char name[64];
  snprintf(name, sizeof name, "interleaved%s n=%d", threads ? " threads" : "",
           nranks);
  plan_t p = {.interleaved_steps = steps, .all_roots_max_count = 13};
  run_spec_t s = {name, nranks, cfg, threads, 200, 0, false};
  run_plan(&s, &p);
}

Test(sequence, interleaved_n4, .timeout = 240) {
  run_interleaved(4, NULL, false, 300);
}
Test(sequence, interleaved_n5_tiny_slots, .timeout = 240) {
  ringcc_config_t cfg = tiny_slots(1024);
  run_interleaved(5, &cfg, false, 200);
}
Test(sequence, interleaved_n3_threads, .timeout = 240) {
  run_interleaved(3, NULL, true, 200);
}

static void run_two_comms(int nranks, bool threads) {
  char name[64];
  snprintf(name, sizeof name, "two communicators%s n=%d",
           threads ? " threads" : "", nranks);
  plan_t p = {.two_comms = true, .all_roots_max_count = 13};
  run_spec_t s = {name, nranks, NULL, threads, 200, 1, false};
  run_plan(&s, &p);
}

Test(sequence, two_comms_n3, .timeout = 240) { run_two_comms(3, false); }
Test(sequence, two_comms_n4_threads, .timeout = 240) {
  run_two_comms(4, true);
}
