/*
 * test_registered.c - registered memory and the zero-copy collectives
 * (ringcc_mem_alloc, ringcc_comm_register, exec_zc.c), run by real ranks
 * and checked element by element against exact answers.
 *
 *   every         every collective x every datatype x every op (reductions)
 *                 on registered buffers, with zero-copy forced, at n = 2, 3,
 *                 4, 5 and 8: counts 1, 3, 13, 1031 and 65537, out of place
 *                 and in both in-place forms, rooted collectives at two
 *                 roots; the buffers sit at offsets into one registered
 *                 region with guard bytes around them. Each case checks
 *                 every element, the guards, the inputs it must not write,
 *                 and that the call ran zero-copy (the registry's count of
 *                 calls that did); allreduce results are compared bitwise
 *                 across ranks. Also with the tuner choosing (auto), and
 *                 with ranks as threads of one process.
 *   partial       buffers that run past the end of their registration, that
 *                 only some ranks registered, or that were never
 *                 registered: every rank takes the unregistered path (the
 *                 count does not move) and the results are right.
 *   lifecycle     deregistration while unused; freeing registered memory
 *                 (and a new allocation at the same address); bad
 *                 arguments of every new call; a registration that one rank
 *                 cannot make fails on every rank, naming it, and leaves the
 *                 communicator working; ranks that deregister different
 *                 registrations; ranks that call different zero-copy
 *                 collectives fail at once, naming the rank.
 *   kill          a rank SIGKILLed during a stream of zero-copy calls: the
 *                 others fail with RINGCC_ERR_PEER_FAILED naming it within
 *                 seconds, and nothing of theirs is left in /dev/shm.
 *   multihost     virtual hosts (netns.h): AllReduce per host with a ring
 *                 between hosts on 2x2, 3x2 and 2x3, every op, in place and
 *                 not; a rank with unregistered buffers sends every rank to
 *                 the unregistered path.
 *   tuner         the model picks zero-copy where memory is registered, the
 *                 device zero-copy kernel on registered device memory
 *                 (AllReduce, Reduce-Scatter, AllGather, up to 8 ranks),
 *                 neither elsewhere.
 *   sched         the schedule itself (zc_sched.h), in this process: for
 *                 n = 1..9 ranks, element sizes 1..32 bytes and counts
 *                 around every alignment edge, the blocks are in order,
 *                 disjoint, cover the buffer exactly, start on 64-byte
 *                 boundaries and are as even as that allows; the order of
 *                 peers starts at the rank itself, visits every rank once,
 *                 and at each step the ranks visit n different ranks.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "netns.h"
#include "registry.h"
#include "zc_sched.h"

#define REGION_BYTES ((size_t)24 << 20)
#define MAX_RANKS 8
#define MAX_FAILED 8

/* Calls that ran zero-copy on this rank so far. */
static uint64_t zc_ran(ringcc_comm_t comm) {
  return comm->registry != NULL ? comm->registry->ran : 0;
}

/* Calls of this rank that ringcc_comm_stats counts as zero-copy (either
 * entry); UINT64_MAX if it fails. */
static uint64_t stats_zc_calls(ringcc_comm_t comm) {
  ringcc_comm_stats_t st = RINGCC_COMM_STATS_INIT;
  if (ringcc_comm_stats(comm, &st) != RINGCC_SUCCESS)
    return UINT64_MAX;
  uint64_t calls = 0;
  for (int i = 0; i < st.nrows; i++)
    if (strstr(st.rows[i].algorithm, "zero-copy") != NULL)
      calls += st.rows[i].calls;
  return calls;
}

/* One registered region of a rank. */
typedef struct {
  char *base;
  size_t bytes;
  ringcc_reg_t reg;
} region_t;

static bool region_make(h_ctx_t *h, ringcc_comm_t comm, region_t *r,
                        size_t bytes) {
  memset(r, 0, sizeof *r);
  if (!h_ok(h, ringcc_mem_alloc(NULL, bytes, (void **)&r->base),
            "ringcc_mem_alloc"))
    return false;
  r->bytes = bytes;
  return h_ok(h, ringcc_comm_register(comm, r->base, bytes, &r->reg),
              "ringcc_comm_register");
}

static bool region_drop(h_ctx_t *h, ringcc_comm_t comm, region_t *r) {
  bool ok = h_ok(h, ringcc_comm_deregister(comm, r->reg),
                 "ringcc_comm_deregister");
  return h_ok(h, ringcc_mem_free(r->base), "ringcc_mem_free") && ok;
}

/* A guarded buffer of bytes at offset off of a region (h_buf_t's guards
 * before and after it, inside the region). */
static h_buf_t carve(const region_t *r, size_t off, size_t bytes) {
  h_buf_t b = {.base = (unsigned char *)r->base + off,
               .p = (unsigned char *)r->base + off + H_GUARD,
               .bytes = bytes};
  if (off + bytes + 2 * H_GUARD > r->bytes) {
    fprintf(stderr, "carve: %zu + %zu bytes do not fit the region\n", off,
            bytes);
    abort();
  }
  return b;
}

static size_t up8(size_t x) { return (x + 7) & ~(size_t)7; }

/* ---- one case --------------------------------------------------------------- */

enum coll { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BCAST, C_REDUCE,
            C_ALLTOALL, C_NUM };
static const char *const coll_names[C_NUM] = {
    "allreduce", "reduce_scatter", "allgather", "bcast", "reduce", "alltoall"};
enum mode { M_OOP, M_NCCL, M_MPI, M_NUM };
static const char *const mode_names[M_NUM] = {"out-of-place", "in-place(nccl)",
                                              "in-place(mpi)"};

static bool reduces(int c) {
  return c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_REDUCE;
}

typedef struct {
  int coll;
  ringcc_datatype_t dt;
  ringcc_op_t op;
  size_t count;
  int mode;
  int root;
  uint64_t salt;
} case_t;

typedef struct {
  h_ctx_t *h;
  ringcc_comm_t comm;
  const region_t *region;
  int rank, n;
  bool expect_zc;     /* the call must run zero-copy */
  uint64_t *hashes;   /* shared: [case][rank] allreduce result hashes */
  uint32_t ncase;
  char what[256];
  int rc;             /* 0 ok, 1 wrong, -1 the call failed */
} run_t;

static void describe(run_t *t, const case_t *k) {
  snprintf(t->what, sizeof t->what, "%s %s %s count=%zu %s root=%d (n=%d)",
           coll_names[k->coll], h_dt_name(k->dt),
           reduces(k->coll) ? h_op_name(k->op) : "-", k->count,
           mode_names[k->mode], k->root, t->n);
}

static void elems(run_t *t, const char *part, ringcc_datatype_t dt,
                  const void *got, const void *want, size_t count) {
  char what[400];
  snprintf(what, sizeof what, "%s: %s", t->what, part);
  if (!h_check_elems(t->h, what, dt, got, want, count) && t->rc == 0)
    t->rc = 1;
}

static void guards(run_t *t, const char *part, const h_buf_t *b) {
  char what[400];
  snprintf(what, sizeof what, "%s: %s", t->what, part);
  if (!h_buf_guards_ok(t->h, what, b) && t->rc == 0)
    t->rc = 1;
}

static void called(run_t *t, ringcc_result_t r, const char *fn, uint64_t before) {
  if (r != RINGCC_SUCCESS) {
    h_fail(t->h, "%s: %s returned %d (%s): %s", t->what, fn, (int)r,
           ringcc_strerror(r), ringcc_comm_last_error(t->comm));
    t->rc = -1;
    return;
  }
  uint64_t ran = zc_ran(t->comm) - before;
  if (t->expect_zc && ran != 1) {
    h_fail(t->h, "%s: the call did not run zero-copy (%llu zero-copy calls)",
           t->what, (unsigned long long)ran);
    t->rc = 1;
  }
}

/* Where the case's buffers go in the region: send first, recv after it, at
 * offsets that vary with the case (multiples of 8, rarely of 64). */
static void place(const run_t *t, const case_t *k, size_t send_bytes,
                  size_t recv_bytes, h_buf_t *send, h_buf_t *recv) {
  size_t off = 8 * (1 + k->salt % 13);
  *send = carve(t->region, off, send_bytes);
  *recv = carve(t->region, up8(off + send_bytes + 2 * H_GUARD) + 8 * (k->salt % 5),
                recv_bytes);
  h_buf_scribble(send, k->salt);
  h_buf_scribble(recv, k->salt + 1);
}

static void case_allreduce(run_t *t, const case_t *k) {
  size_t bytes = k->count * h_dt_size(k->dt);
  void *in = h_xmalloc(bytes), *want = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, t->rank, 0, k->salt, in, k->count);
  h_fill_expected(k->dt, k->op, t->n, 0, k->salt, want, k->count);
  h_buf_t s, r;
  place(t, k, bytes, bytes, &s, &r);
  uint64_t before = zc_ran(t->comm);
  ringcc_result_t res;
  if (k->mode == M_OOP) {
    memcpy(s.p, in, bytes);
    res = ringcc_allreduce(s.p, r.p, k->count, k->dt, k->op, t->comm, NULL);
  } else {
    memcpy(r.p, in, bytes);
    res = ringcc_allreduce(k->mode == M_NCCL ? r.p : RINGCC_IN_PLACE, r.p,
                           k->count, k->dt, k->op, t->comm, NULL);
  }
  called(t, res, "ringcc_allreduce", before);
  if (t->rc == 0) {
    elems(t, "result", k->dt, r.p, want, k->count);
    guards(t, "recvbuf", &r);
    if (k->mode == M_OOP) {
      elems(t, "sendbuf changed", k->dt, s.p, in, k->count);
      guards(t, "sendbuf", &s);
    }
    if (t->hashes != NULL && t->ncase < 4096)
      t->hashes[t->ncase * MAX_RANKS + (uint32_t)t->rank] =
          h_hash_bytes(r.p, bytes);
  }
  t->ncase++;
  free(in);
  free(want);
}

static void case_reduce_scatter(run_t *t, const case_t *k) {
  size_t es = h_dt_size(k->dt), bytes = k->count * es, n = (size_t)t->n;
  void *in = h_xmalloc(n * bytes), *want = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, t->rank, 0, k->salt, in, n * k->count);
  h_fill_expected(k->dt, k->op, t->n, (size_t)t->rank * k->count, k->salt,
                  want, k->count);
  h_buf_t s, r;
  place(t, k, n * bytes, k->mode == M_MPI ? n * bytes : bytes, &s, &r);
  uint64_t before = zc_ran(t->comm);
  ringcc_result_t res;
  const unsigned char *result = r.p;
  if (k->mode == M_OOP) {
    memcpy(s.p, in, n * bytes);
    res = ringcc_reduce_scatter(s.p, r.p, k->count, k->dt, k->op, t->comm,
                                NULL);
  } else if (k->mode == M_NCCL) {
    memcpy(s.p, in, n * bytes);
    result = s.p + (size_t)t->rank * bytes;
    res = ringcc_reduce_scatter(s.p, (void *)result, k->count, k->dt, k->op,
                                t->comm, NULL);
  } else {
    memcpy(r.p, in, n * bytes);
    res = ringcc_reduce_scatter(RINGCC_IN_PLACE, r.p, k->count, k->dt, k->op,
                                t->comm, NULL);
  }
  called(t, res, "ringcc_reduce_scatter", before);
  if (t->rc == 0) {
    elems(t, "result", k->dt, result, want, k->count);
    guards(t, "sendbuf", &s);
    guards(t, "recvbuf", &r);
    if (k->mode == M_OOP)
      elems(t, "sendbuf changed", k->dt, s.p, in, n * k->count);
    if (k->mode == M_NCCL) {
      size_t mine = (size_t)t->rank * k->count;
      elems(t, "input before the own block changed", k->dt, s.p, in, mine);
      elems(t, "input after the own block changed", k->dt,
            s.p + (mine + k->count) * es, (char *)in + (mine + k->count) * es,
            (n - 1 - (size_t)t->rank) * k->count);
    }
  }
  free(in);
  free(want);
}

static void case_allgather(run_t *t, const case_t *k) {
  size_t bytes = k->count * h_dt_size(k->dt), n = (size_t)t->n;
  char *want = h_xmalloc(n * bytes);
  for (size_t i = 0; i < n; i++)
    h_fill_pattern(k->dt, i, 0, k->salt, want + i * bytes, k->count);
  const char *mine = want + (size_t)t->rank * bytes;
  h_buf_t s, r;
  place(t, k, bytes, n * bytes, &s, &r);
  uint64_t before = zc_ran(t->comm);
  ringcc_result_t res;
  if (k->mode == M_OOP) {
    memcpy(s.p, mine, bytes);
    res = ringcc_allgather(s.p, r.p, k->count, k->dt, t->comm, NULL);
  } else {
    unsigned char *own = r.p + (size_t)t->rank * bytes;
    memcpy(own, mine, bytes);
    res = ringcc_allgather(k->mode == M_NCCL ? own : RINGCC_IN_PLACE, r.p,
                           k->count, k->dt, t->comm, NULL);
  }
  called(t, res, "ringcc_allgather", before);
  if (t->rc == 0) {
    elems(t, "result", k->dt, r.p, want, n * k->count);
    guards(t, "recvbuf", &r);
    if (k->mode == M_OOP) {
      elems(t, "sendbuf changed", k->dt, s.p, mine, k->count);
      guards(t, "sendbuf", &s);
    }
  }
  free(want);
}

static void case_bcast(run_t *t, const case_t *k) {
  size_t bytes = k->count * h_dt_size(k->dt);
  void *want = h_xmalloc(bytes);
  h_fill_pattern(k->dt, (uint64_t)k->root, 0, k->salt, want, k->count);
  h_buf_t s, r;
  place(t, k, 8, bytes, &s, &r);
  if (t->rank == k->root)
    memcpy(r.p, want, bytes);
  uint64_t before = zc_ran(t->comm);
  called(t, ringcc_bcast(r.p, k->count, k->dt, k->root, t->comm, NULL),
         "ringcc_bcast", before);
  if (t->rc == 0) {
    elems(t, t->rank == k->root ? "root's buffer changed" : "result", k->dt,
          r.p, want, k->count);
    guards(t, "buf", &r);
  }
  free(want);
}

static void case_reduce(run_t *t, const case_t *k) {
  size_t bytes = k->count * h_dt_size(k->dt);
  bool root = t->rank == k->root;
  void *in = h_xmalloc(bytes), *want = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, t->rank, 0, k->salt, in, k->count);
  h_fill_expected(k->dt, k->op, t->n, 0, k->salt, want, k->count);
  h_buf_t s, r;
  place(t, k, bytes, bytes, &s, &r);
  uint64_t before = zc_ran(t->comm);
  ringcc_result_t res;
  const unsigned char *result = r.p;
  if (k->mode == M_NCCL) {
    memcpy(s.p, in, bytes);
    result = s.p;
    res = ringcc_reduce(s.p, s.p, k->count, k->dt, k->op, k->root, t->comm,
                        NULL);
  } else if (k->mode == M_MPI && root) {
    memcpy(r.p, in, bytes);
    res = ringcc_reduce(RINGCC_IN_PLACE, r.p, k->count, k->dt, k->op, k->root,
                        t->comm, NULL);
  } else {
    memcpy(s.p, in, bytes);
    res = ringcc_reduce(s.p, root || k->mode == M_OOP ? r.p : NULL, k->count,
                        k->dt, k->op, k->root, t->comm, NULL);
  }
  called(t, res, "ringcc_reduce", before);
  if (t->rc == 0) {
    if (root)
      elems(t, "result", k->dt, result, want, k->count);
    else if (k->mode == M_NCCL)
      elems(t, "a non-root's buffer changed", k->dt, s.p, in, k->count);
    else if (k->mode == M_OOP &&
             !h_buf_scribble_ok(t->h, t->what, &r, k->salt + 1, 0, bytes))
      t->rc = 1; /* a non-root's recvbuf is not the library's to write */
    if (k->mode == M_OOP || (k->mode == M_MPI && !root))
      elems(t, "sendbuf changed", k->dt, s.p, in, k->count);
    guards(t, "sendbuf", &s);
    guards(t, "recvbuf", &r);
  }
  free(in);
  free(want);
}

static void case_alltoall(run_t *t, const case_t *k) {
  size_t bytes = k->count * h_dt_size(k->dt), n = (size_t)t->n;
  char *in = h_xmalloc(n * bytes), *want = h_xmalloc(n * bytes);
  h_fill_pattern(k->dt, (uint64_t)t->rank, 0, k->salt, in, n * k->count);
  for (size_t i = 0; i < n; i++)
    h_fill_pattern(k->dt, i, (size_t)t->rank * k->count, k->salt,
                   want + i * bytes, k->count);
  h_buf_t s, r;
  place(t, k, n * bytes, n * bytes, &s, &r);
  uint64_t before = zc_ran(t->comm);
  ringcc_result_t res;
  if (k->mode == M_OOP) {
    memcpy(s.p, in, n * bytes);
    res = ringcc_alltoall(s.p, r.p, k->count, k->dt, t->comm, NULL);
  } else {
    memcpy(r.p, in, n * bytes);
    res = ringcc_alltoall(k->mode == M_NCCL ? r.p : RINGCC_IN_PLACE, r.p,
                          k->count, k->dt, t->comm, NULL);
  }
  called(t, res, "ringcc_alltoall", before);
  if (t->rc == 0) {
    elems(t, "result", k->dt, r.p, want, n * k->count);
    guards(t, "recvbuf", &r);
    if (k->mode == M_OOP) {
      elems(t, "sendbuf changed", k->dt, s.p, in, n * k->count);
      guards(t, "sendbuf", &s);
    }
  }
  free(in);
  free(want);
}

static int run_case(run_t *t, const case_t *k) {
  describe(t, k);
  t->rc = 0;
  switch (k->coll) {
  case C_ALLREDUCE: case_allreduce(t, k); break;
  case C_REDUCE_SCATTER: case_reduce_scatter(t, k); break;
  case C_ALLGATHER: case_allgather(t, k); break;
  case C_BCAST: case_bcast(t, k); break;
  case C_REDUCE: case_reduce(t, k); break;
  default: case_alltoall(t, k); break;
  }
  return t->rc;
}

/* ---- every collective x datatype x op ------------------------------------------ */

typedef struct {
  bool expect_zc;          /* zero-copy forced: every call must run so */
  bool all_counts;         /* every count for every (dt, op), else a few */
  uint64_t *hashes;        /* shared, [4096][MAX_RANKS] */
  uint32_t *ncases;        /* shared: allreduce cases rank 0 ran */
} every_t;

static const size_t counts[] = {1, 3, 13, 1031, 65537};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

static int body_every(h_ctx_t *h) {
  const every_t *e = h->arg;
  region_t region;
  if (!region_make(h, h->comm, &region, REGION_BYTES))
    return 1;
  run_t t = {.h = h, .comm = h->comm, .region = &region, .rank = h->rank,
             .n = h->nranks, .expect_zc = e->expect_zc, .hashes = e->hashes};
  int failed = 0, cases = 0;
  for (int c = 0; c < C_NUM; c++)
    for (int d = 0; d < RINGCC_NUM_DATATYPES; d++)
      for (int o = 0; o < (reduces(c) ? RINGCC_NUM_OPS : 1); o++)
        for (int ci = 0; ci < NCOUNTS; ci++) {
          /* The largest count: one mode per (dt, op), rotating. */
          bool big = counts[ci] > 2000;
          if (!e->all_counts && ci % 2 == (d + o) % 2 && !big)
            continue;
          for (int m = 0; m < M_NUM; m++) {
            if ((c == C_BCAST && m != M_OOP) ||
                (big && m != (c + d + o) % M_NUM && c != C_BCAST))
              continue;
            case_t k = {.coll = c, .dt = h_all_dtypes[d], .op = h_all_ops[o],
                        .count = counts[ci], .mode = m,
                        .salt = h_hash3((uint64_t)c, (uint64_t)(d * 8 + o),
                                        (uint64_t)(ci * 4 + m)),
                        .root = (d + o + ci + m) % h->nranks};
            cases++;
            int rc = run_case(&t, &k);
            if (rc < 0)
              return 1; /* the communicator may be unusable */
            if (rc > 0 && ++failed >= MAX_FAILED)
              return h_fail(h, "stopping after %d failed cases", failed);
          }
        }
  if (stats_zc_calls(h->comm) != zc_ran(h->comm))
    failed = h_fail(h, "ringcc_comm_stats counts %llu zero-copy calls where "
                       "%llu ran zero-copy",
                    (unsigned long long)stats_zc_calls(h->comm),
                    (unsigned long long)zc_ran(h->comm));
  if (h->rank == 0) {
    *e->ncases = t.ncase;
    fprintf(stderr, "registered n=%d%s: %d cases passed on every rank%s\n",
            h->nranks, h->is_thread ? " (threads)" : "", cases,
            e->expect_zc ? ", each ran zero-copy" : "");
  }
  if (!region_drop(h, h->comm, &region))
    return 1;
  return failed != 0;
}

static void every(int nranks, bool forced, bool threads, bool all_counts) {
  size_t hbytes = 4096 * MAX_RANKS * sizeof(uint64_t);
  every_t e = {.expect_zc = forced, .all_counts = all_counts,
               .hashes = h_shared_alloc(hbytes),
               .ncases = h_shared_alloc(sizeof(uint32_t))};
  cr_assert(e.hashes && e.ncases);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  cfg.algo = forced ? RINGCC_ALGO_ZEROCOPY : RINGCC_ALGO_AUTO;
  h_run_opts_t o = {.nranks = nranks, .body = body_every, .arg = &e,
                    .config = &cfg, .timeout_s = 220, .threads = threads,
                    .name = "registered"};
  cr_assert(h_run(&o), "registered collectives at n=%d failed (see above)",
            nranks);
  /* Allreduce: every rank got the same bits. */
  for (uint32_t i = 0; i < *e.ncases && i < 4096; i++)
    for (int r = 1; r < nranks; r++)
      cr_assert_eq(e.hashes[i * MAX_RANKS + (uint32_t)r], e.hashes[i * MAX_RANKS],
                   "allreduce case %u: rank %d's result differs bitwise from "
                   "rank 0's", i, r);
  h_shared_free(e.hashes, hbytes);
  h_shared_free(e.ncases, sizeof(uint32_t));
}

Test(every, n2, .timeout = 240) { every(2, true, false, true); }
Test(every, n3, .timeout = 240) { every(3, true, false, true); }
Test(every, n4, .timeout = 240) { every(4, true, false, true); }
Test(every, n5, .timeout = 240) { every(5, true, false, false); }
Test(every, n8, .timeout = 240) { every(8, true, false, false); }
Test(every, auto_n4, .timeout = 240) { every(4, false, false, false); }
Test(every, threads_n4, .timeout = 240) { every(4, true, true, false); }

/* ---- buffers that are not (all) registered ----------------------------------- */

/* One float32 sum allreduce of count elements from send into recv, checked;
 * ran: whether it must have run zero-copy. */
static int checked_allreduce(h_ctx_t *h, ringcc_comm_t comm, float *send,
                             float *recv, size_t count, bool ran,
                             const char *what) {
  float *want = h_xmalloc(count * sizeof(float));
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, h->rank, 0, count, send, count);
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, h->nranks, 0, count, want,
                  count);
  uint64_t before = zc_ran(comm), counted = stats_zc_calls(comm);
  ringcc_result_t r = ringcc_allreduce(send, recv, count, RINGCC_FLOAT32,
                                       RINGCC_SUM, comm, NULL);
  uint64_t after = zc_ran(comm);
  /* The statistics count what ran, also where the call fell back. */
  counted = stats_zc_calls(comm) - counted;
  int rc = 0;
  if (r != RINGCC_SUCCESS)
    rc = h_fail(h, "%s: ringcc_allreduce returned %d (%s): %s", what, (int)r,
                ringcc_strerror(r), ringcc_comm_last_error(comm));
  else if (!h_check_elems(h, what, RINGCC_FLOAT32, recv, want, count))
    rc = 1;
  else if ((after - before == 1) != ran)
    rc = h_fail(h, "%s: expected the call %s zero-copy, it %s", what,
                ran ? "to run" : "not to run", ran ? "did not" : "did");
  else if (counted != after - before)
    rc = h_fail(h, "%s: ringcc_comm_stats counted %llu zero-copy calls, "
                   "%llu ran", what, (unsigned long long)counted,
                (unsigned long long)(after - before));
  free(want);
  return rc;
}

#define PART_COUNT ((size_t)100000)
#define PART_BYTES (PART_COUNT * sizeof(float))

static int body_partial(h_ctx_t *h) {
  ringcc_comm_t comm = h->comm;
  int rc = 0;
  char *mem;
  ringcc_reg_t half;
  /* 4 buffers' worth allocated, the first 2 registered. */
  if (!h_ok(h, ringcc_mem_alloc(NULL, 4 * PART_BYTES, (void **)&mem),
            "ringcc_mem_alloc") ||
      !h_ok(h, ringcc_comm_register(comm, mem, 2 * PART_BYTES, &half),
            "ringcc_comm_register"))
    return 1;
  float *a = (float *)mem, *b = (float *)(mem + PART_BYTES);
  rc |= checked_allreduce(h, comm, a, b, PART_COUNT, true,
                          "both buffers registered");
  /* The output runs half a buffer past the registered range. */
  float *straddle = (float *)(mem + PART_BYTES + PART_BYTES / 2);
  rc |= checked_allreduce(h, comm, a, straddle, PART_COUNT, false,
                          "an output partly registered");
  /* Registered at an offset: inside the range, not at its start. */
  rc |= checked_allreduce(h, comm, a + 3, b + 5, PART_COUNT - 1000, true,
                          "buffers at offsets into the registration");
  /* Rank 1's buffers are plain malloc'd memory. */
  float *plain = h_xmalloc(2 * PART_BYTES);
  bool mine_plain = h->rank == 1;
  rc |= checked_allreduce(h, comm, mine_plain ? plain : a,
                          mine_plain ? plain + PART_COUNT : b, PART_COUNT,
                          false, "only some ranks' buffers registered");
  rc |= checked_allreduce(h, comm, plain, plain + PART_COUNT, PART_COUNT,
                          false, "no rank's buffers registered");
  /* An input registered, an output not. */
  rc |= checked_allreduce(h, comm, a, plain, PART_COUNT, false,
                          "the output not registered");
  /* Reduce-Scatter reads only inputs in place: an unregistered output is
   * no obstacle. */
  size_t per = PART_COUNT / (size_t)h->nranks;
  float *want = h_xmalloc(per * sizeof(float));
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, h->rank, 0, 1, a, per * h->nranks);
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, h->nranks, per * h->rank, 1,
                  want, per);
  uint64_t before = zc_ran(comm);
  if (!h_ok(h, ringcc_reduce_scatter(a, plain, per, RINGCC_FLOAT32,
                                     RINGCC_SUM, comm, NULL),
            "ringcc_reduce_scatter"))
    rc = 1;
  else if (!h_check_elems(h, "reduce_scatter into an unregistered output",
                          RINGCC_FLOAT32, plain, want, per))
    rc = 1;
  else if (zc_ran(comm) != before + 1)
    rc = h_fail(h, "reduce_scatter with registered inputs did not run "
                   "zero-copy");
  free(want);
  free(plain);
  if (!h_ok(h, ringcc_comm_deregister(comm, half), "ringcc_comm_deregister") ||
      !h_ok(h, ringcc_mem_free(mem), "ringcc_mem_free"))
    rc = 1;
  return rc;
}

static void run_body(h_body_fn body, int nranks, int algo, void *arg,
                     const char *name) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 30000;
  cfg.algo = algo;
  h_run_opts_t o = {.nranks = nranks, .body = body, .arg = arg,
                    .config = &cfg, .timeout_s = 90, .name = name};
  cr_assert(h_run(&o), "%s failed (see the ranks' messages above)", name);
}

Test(partial, not_all_registered_n4, .timeout = 120) {
  run_body(body_partial, 4, RINGCC_ALGO_ZEROCOPY, NULL, "partial");
}
Test(partial, not_all_registered_auto_n3, .timeout = 120) {
  run_body(body_partial, 3, RINGCC_ALGO_AUTO, NULL, "partial auto");
}

/* ---- lifecycle and bad arguments ------------------------------------------------ */

/* r is code, and the last error of comm (NULL: this thread's) contains
 * every one of the words. */
static int expect_error(h_ctx_t *h, ringcc_comm_t comm, ringcc_result_t r,
                        ringcc_result_t code, const char *what,
                        const char *const *words) {
  const char *msg = ringcc_comm_last_error(comm);
  if (r != code)
    return h_fail(h, "%s: returned %d (%s), expected %s: %s", what, (int)r,
                  ringcc_strerror(r), ringcc_strerror(code), msg);
  for (; words != NULL && *words != NULL; words++)
    if (strstr(msg, *words) == NULL)
      return h_fail(h, "%s: the message does not say '%s': %s", what, *words,
                    msg);
  return 0;
}

static int mem_errors(h_ctx_t *h) {
  int rc = 0;
  void *p = NULL, *q = (void *)1;
  int on_stack;
  rc |= expect_error(h, NULL, ringcc_mem_alloc(NULL, 64, NULL),
                     RINGCC_ERR_INVALID_ARGUMENT, "ringcc_mem_alloc(ptr NULL)",
                     (const char *const[]){"'ptr'", NULL});
  rc |= expect_error(h, NULL, ringcc_mem_alloc(NULL, 0, &q),
                     RINGCC_ERR_INVALID_ARGUMENT, "ringcc_mem_alloc(size 0)",
                     (const char *const[]){"'size'", NULL});
  if (q != NULL)
    rc |= h_fail(h, "a failed ringcc_mem_alloc left *ptr at %p, not NULL", q);
  rc |= expect_error(h, NULL, ringcc_mem_free(&on_stack),
                     RINGCC_ERR_INVALID_ARGUMENT, "ringcc_mem_free(stack)",
                     (const char *const[]){"'ptr'", "ringcc_mem_alloc", NULL});
  if (!h_ok(h, ringcc_mem_alloc(h->comm, 100, &p), "ringcc_mem_alloc(comm)"))
    return 1;
  if ((uintptr_t)p % 4096 != 0 || ((char *)p)[99] != 0)
    rc |= h_fail(h, "ringcc_mem_alloc: %p is not page-aligned, zeroed memory",
                 p);
  rc |= expect_error(h, NULL, ringcc_mem_free((char *)p + 8),
                     RINGCC_ERR_INVALID_ARGUMENT, "ringcc_mem_free(inside)",
                     (const char *const[]){"'ptr'", NULL});
  rc |= !h_ok(h, ringcc_mem_free(p), "ringcc_mem_free");
  rc |= expect_error(h, NULL, ringcc_mem_free(p), RINGCC_ERR_INVALID_ARGUMENT,
                     "ringcc_mem_free twice",
                     (const char *const[]){"freed already", NULL});
  rc |= !h_ok(h, ringcc_mem_free(NULL), "ringcc_mem_free(NULL)");
  return rc;
}

/* A registration where rank `bad` passes what kind says: every rank fails,
 * the bad one with INVALID_ARGUMENT naming the argument, the others with
 * INVALID_USAGE naming the rank. */
static int failed_register(h_ctx_t *h, int bad, int kind, char *mem,
                           size_t bytes) {
  static const char *const arg_names[] = {"'ptr'", "'handle'", "'size'",
                                          "'ptr'"};
  char *plain = h_xmalloc(256);
  ringcc_reg_t handle = (ringcc_reg_t)1, *hp = &handle;
  void *ptr = mem;
  size_t size = bytes;
  if (h->rank == bad) {
    if (kind == 0)
      ptr = plain;
    else if (kind == 1)
      hp = NULL;
    else if (kind == 2)
      size = 0;
    else
      size = bytes + 8192; /* past the end of the allocation */
  }
  ringcc_result_t r = ringcc_comm_register(h->comm, ptr, size, hp);
  char who[32], what[96];
  snprintf(who, sizeof who, "rank %d", bad);
  snprintf(what, sizeof what, "ringcc_comm_register with a bad %s on rank %d",
           arg_names[kind], bad);
  int rc = h->rank == bad
               ? expect_error(h, h->comm, r, RINGCC_ERR_INVALID_ARGUMENT, what,
                              (const char *const[]){arg_names[kind], NULL})
               : expect_error(h, h->comm, r, RINGCC_ERR_INVALID_USAGE, what,
                              (const char *const[]){who, arg_names[kind],
                                                    NULL});
  if (hp != NULL && handle != NULL)
    rc |= h_fail(h, "%s: a failed registration left a handle", what);
  free(plain);
  return rc;
}

static int body_lifecycle(h_ctx_t *h) {
  ringcc_comm_t comm = h->comm;
  int rc = mem_errors(h), n = h->nranks;
  if (rc)
    return rc;
  rc |= expect_error(h, NULL, ringcc_comm_register(NULL, NULL, 0, NULL),
                     RINGCC_ERR_INVALID_ARGUMENT, "ringcc_comm_register(NULL)",
                     (const char *const[]){"'comm'", NULL});
  char *a, *b;
  ringcc_reg_t ra, rb;
  if (!h_ok(h, ringcc_mem_alloc(NULL, 3 * PART_BYTES, (void **)&a),
            "ringcc_mem_alloc") ||
      !h_ok(h, ringcc_mem_alloc(NULL, 3 * PART_BYTES, (void **)&b),
            "ringcc_mem_alloc"))
    return 1;
  for (int kind = 0; kind < 4 && rc == 0; kind++)
    rc |= failed_register(h, (kind + 1) % n, kind, a, 3 * PART_BYTES);
  if (rc)
    return rc;
  /* The communicator still works, registrations included. */
  if (!h_ok(h, ringcc_comm_register(comm, a, 3 * PART_BYTES, &ra),
            "ringcc_comm_register(a)") ||
      !h_ok(h, ringcc_comm_register(comm, b, 3 * PART_BYTES, &rb),
            "ringcc_comm_register(b)"))
    return 1;
  float *fa = (float *)a, *fb = (float *)b;
  rc |= checked_allreduce(h, comm, fa, fa + PART_COUNT, PART_COUNT, true,
                          "after failed registrations");
  /* Deregistering: ranks that pass different registrations, a bad one. */
  ringcc_result_t r = ringcc_comm_deregister(comm, h->rank == 0 ? ra : rb);
  rc |= expect_error(h, comm, r, RINGCC_ERR_INVALID_USAGE,
                     "ringcc_comm_deregister of different registrations",
                     (const char *const[]){"rank", "same registration", NULL});
  r = ringcc_comm_deregister(comm, h->rank == n - 1 ? NULL : ra);
  rc |= expect_error(h, comm, r,
                     h->rank == n - 1 ? RINGCC_ERR_INVALID_ARGUMENT
                                      : RINGCC_ERR_INVALID_USAGE,
                     "ringcc_comm_deregister(NULL) on the last rank",
                     (const char *const[]){"'handle'", NULL});
  /* Deregistration while unused: a's calls take the unregistered path. */
  rc |= !h_ok(h, ringcc_comm_deregister(comm, ra), "ringcc_comm_deregister(a)");
  rc |= checked_allreduce(h, comm, fa, fa + PART_COUNT, PART_COUNT, false,
                          "after a was deregistered");
  rc |= checked_allreduce(h, comm, fb, fb + PART_COUNT, PART_COUNT, true,
                          "b, still registered");
  r = ringcc_comm_deregister(comm, ra);
  rc |= expect_error(h, comm, r, RINGCC_ERR_INVALID_ARGUMENT,
                     "ringcc_comm_deregister twice",
                     (const char *const[]){"'handle'", NULL});
  /* Freeing registered memory: its registration no longer counts, even for
   * memory allocated at the same addresses afterwards. */
  rc |= !h_ok(h, ringcc_mem_free(b), "ringcc_mem_free(b, registered)");
  char *c;
  ringcc_reg_t rcr;
  if (!h_ok(h, ringcc_mem_alloc(NULL, 3 * PART_BYTES, (void **)&c),
            "ringcc_mem_alloc(c)"))
    return 1;
  float *fc = (float *)c;
  rc |= checked_allreduce(h, comm, fc, fc + PART_COUNT, PART_COUNT, false,
                          c == b ? "new memory where freed registered memory "
                                   "was"
                                 : "new memory after freeing registered");
  rc |= !h_ok(h, ringcc_comm_register(comm, c, 3 * PART_BYTES, &rcr),
              "ringcc_comm_register(c)");
  rc |= checked_allreduce(h, comm, fc, fc + PART_COUNT, PART_COUNT, true,
                          "c registered");
  rc |= !h_ok(h, ringcc_comm_deregister(comm, rb),
              "ringcc_comm_deregister(b, freed)");
  rc |= checked_allreduce(h, comm, fc, fc + PART_COUNT, PART_COUNT, true,
                          "c after b's deregistration");
  /* c stays registered: ringcc_comm_destroy takes it down. */
  if (rc == 0 && h->rank == 0)
    fprintf(stderr, "lifecycle n=%d: every step as documented\n", n);
  rc |= !h_ok(h, ringcc_mem_free(a), "ringcc_mem_free(a)");
  return rc;
}

Test(lifecycle, register_deregister_free_n3, .timeout = 120) {
  run_body(body_lifecycle, 3, RINGCC_ALGO_ZEROCOPY, NULL, "lifecycle");
}

/* Ranks that disagree about a zero-copy call fail at once, naming a rank;
 * the communicator is then unusable, as after any failed call. */
static int body_mismatch(h_ctx_t *h) {
  region_t region;
  if (!region_make(h, h->comm, &region, 4 * PART_BYTES))
    return 1;
  float *f = (float *)region.base;
  size_t count = PART_COUNT + (h->rank == 1 ? 16 : 0);
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_allreduce(f, f + 2 * PART_COUNT, count,
                                       RINGCC_FLOAT32, RINGCC_SUM, h->comm,
                                       NULL);
  int rc = expect_error(h, h->comm, r, RINGCC_ERR_INVALID_USAGE,
                        "allreduce with another count on rank 1",
                        (const char *const[]){"rank", "count", NULL});
  if (h_now_s() - t0 > 5)
    rc |= h_fail(h, "the mismatch took %.1f s to fail", h_now_s() - t0);
  return rc;
}

Test(lifecycle, mismatched_calls_fail_n3, .timeout = 60) {
  run_body(body_mismatch, 3, RINGCC_ALGO_ZEROCOPY, NULL, "mismatch");
}

/* ---- a rank killed during zero-copy calls -------------------------------------- */

#define KILL_COUNT ((size_t)1 << 20) /* 4 MiB of float32 a call */
#define KILL_STREAM_S 20.0

typedef struct {
  int victim;
  int delay_us;               /* after the victim's first call */
  int pid[MAX_RANKS];
  double killed_at;           /* CLOCK_MONOTONIC, set by the victim */
  struct {
    int code;                 /* of the call that failed; -1: none did */
    uint64_t calls;
    double failed_at;
    char message[600];
  } rank[MAX_RANKS];
} kill_area_t;

static void *killer(void *p) {
  kill_area_t *a = p;
  usleep((useconds_t)a->delay_us);
  a->killed_at = h_now_s();
  raise(SIGKILL);
  return NULL;
}

static int body_kill(h_ctx_t *h) {
  kill_area_t *a = h->arg;
  region_t region;
  a->pid[h->rank] = (int)getpid();
  a->rank[h->rank].code = -1;
  if (!region_make(h, h->comm, &region, 2 * KILL_COUNT * sizeof(float)))
    return 1;
  float *f = (float *)region.base;
  for (size_t i = 0; i < KILL_COUNT; i++)
    f[i] = 1.0f;
  double start = h_now_s();
  ringcc_result_t r = RINGCC_SUCCESS;
  while (r == RINGCC_SUCCESS && h_now_s() - start < KILL_STREAM_S) {
    r = ringcc_allreduce(f, f + KILL_COUNT, KILL_COUNT, RINGCC_FLOAT32,
                         RINGCC_SUM, h->comm, NULL);
    if (r == RINGCC_SUCCESS && a->rank[h->rank].calls++ == 0 &&
        h->rank == a->victim) {
      pthread_t t;
      pthread_create(&t, NULL, killer, a);
    }
  }
  a->rank[h->rank].failed_at = h_now_s();
  a->rank[h->rank].code = (int)r;
  snprintf(a->rank[h->rank].message, sizeof a->rank[h->rank].message, "%s",
           ringcc_comm_last_error(h->comm));
  return 0; /* the parent judges */
}

/* Entries of /dev/shm named after one of the ranks (ringcc-PID-...). */
static int shm_leftovers(const kill_area_t *a, int n, char *found,
                         size_t len) {
  DIR *d = opendir("/dev/shm");
  int count = 0;
  found[0] = '\0';
  if (d == NULL)
    return 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    for (int r = 0; r < n; r++) {
      char prefix[48];
      snprintf(prefix, sizeof prefix, "ringcc-%d-", a->pid[r]);
      if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
        count++;
        size_t used = strlen(found);
        snprintf(found + used, len - used, "%s%s", used ? ", " : "",
                 e->d_name);
      }
    }
  closedir(d);
  return count;
}

static void kill_during_zero_copy(int n, int victim, int delay_us) {
  kill_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->victim = victim;
  a->delay_us = delay_us;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 30000;
  cfg.algo = RINGCC_ALGO_ZEROCOPY;
  h_run_opts_t o = {.nranks = n, .body = body_kill, .arg = a, .config = &cfg,
                    .timeout_s = 60, .name = "kill"};
  h_run(&o); /* fails: the victim was killed; the survivors' records tell */
  cr_assert(a->killed_at > 0, "the victim (rank %d) never killed itself",
            victim);
  char word[32];
  snprintf(word, sizeof word, "rank %d", victim);
  double worst = 0;
  for (int r = 0; r < n; r++) {
    if (r == victim)
      continue;
    double delay = a->rank[r].failed_at - a->killed_at;
    cr_assert_eq(a->rank[r].code, RINGCC_ERR_PEER_FAILED,
                 "rank %d: after %llu calls got %d, expected "
                 "RINGCC_ERR_PEER_FAILED: %s", r,
                 (unsigned long long)a->rank[r].calls, a->rank[r].code,
                 a->rank[r].message);
    cr_assert(strstr(a->rank[r].message, word) != NULL &&
                  strstr(a->rank[r].message, "died") != NULL,
              "rank %d: the error does not name the dead %s: %s", r, word,
              a->rank[r].message);
    cr_assert(delay >= 0 && delay < 10, "rank %d failed %.3f s after the kill",
              r, delay);
    worst = delay > worst ? delay : worst;
  }
  char left[512];
  cr_assert_eq(shm_leftovers(a, n, left, sizeof left), 0,
               "left in /dev/shm: %s", left);
  fprintf(stderr, "kill: rank %d of %d killed %d us after its first "
          "zero-copy call (%llu calls); every survivor failed with "
          "RINGCC_ERR_PEER_FAILED naming it within %.3f s\n", victim, n,
          delay_us, (unsigned long long)a->rank[victim].calls, worst);
  h_shared_free(a, sizeof *a);
}

Test(kill, rank_killed_during_zero_copy_n4, .timeout = 120) {
  kill_during_zero_copy(4, 2, 20000);
}
Test(kill, rank0_killed_during_zero_copy_n3, .timeout = 120) {
  kill_during_zero_copy(3, 0, 3000);
}
Test(kill, rank_killed_at_once_n5, .timeout = 120) {
  kill_during_zero_copy(5, 4, 0);
}

/* ---- several hosts: AllReduce per host, a ring between hosts ------------------ */

static ns_net_t g_net;

static void net_down(void) { ns_net_destroy(&g_net); }

TestSuite(multihost, .fini = net_down);

typedef struct {
  bool per_host; /* registered calls must run per host (else: unregistered) */
} mh_t;

static int body_multihost(h_ctx_t *h) {
  const mh_t *m = h->arg;
  static const ringcc_datatype_t dts[] = {RINGCC_FLOAT32, RINGCC_INT32,
                                          RINGCC_FLOAT64, RINGCC_BFLOAT16,
                                          RINGCC_UINT8};
  static const size_t mh_counts[] = {1, 13, 1031, 65537, 300001};
  region_t region;
  if (!region_make(h, h->comm, &region, REGION_BYTES))
    return 1;
  run_t t = {.h = h, .comm = h->comm, .region = &region, .rank = h->rank,
             .n = h->nranks, .expect_zc = m->per_host};
  int cases = 0;
  for (int o = 0; o < RINGCC_NUM_OPS; o++)
    for (int d = 0; d < 5; d++)
      for (int ci = 0; ci < 5; ci++)
        for (int mode = 0; mode < M_NUM; mode++) {
          if (ci == 4 && mode != (o + d) % M_NUM)
            continue;
          case_t k = {.coll = C_ALLREDUCE, .dt = dts[d], .op = h_all_ops[o],
                      .count = mh_counts[ci], .mode = mode, .root = -1,
                      .salt = h_hash3((uint64_t)o, (uint64_t)d,
                                      (uint64_t)(ci * 4 + mode))};
          cases++;
          int rc = run_case(&t, &k);
          if (rc != 0)
            return 1;
        }
  /* Other collectives on registered buffers take the unregistered path
   * across hosts. */
  t.expect_zc = false;
  for (int c = C_REDUCE_SCATTER; c < C_NUM; c++) {
    case_t k = {.coll = c, .dt = RINGCC_FLOAT32, .op = RINGCC_SUM,
                .count = 20000, .mode = M_OOP, .root = 1,
                .salt = 77 + (uint64_t)c};
    uint64_t before = zc_ran(h->comm);
    cases++;
    if (run_case(&t, &k) != 0)
      return 1;
    if (zc_ran(h->comm) != before)
      return h_fail(h, "%s across hosts ran zero-copy", coll_names[c]);
  }
  /* One rank's buffers unregistered: every rank takes the unregistered
   * path, on every host. */
  float *plain = h_xmalloc(2 * PART_BYTES);
  float *f = (float *)region.base;
  bool mine_plain = h->rank == h->nranks - 1;
  cases++;
  if (checked_allreduce(h, h->comm, mine_plain ? plain : f,
                        mine_plain ? plain + PART_COUNT : f + PART_COUNT,
                        PART_COUNT, false, "one rank's buffers unregistered"))
    return 1;
  free(plain);
  if (h->rank == 0)
    fprintf(stderr, "multihost registered: %d cases passed on every rank%s\n",
            cases, m->per_host ? ", allreduces per host with a ring between"
                               : "");
  return region_drop(h, h->comm, &region) ? 0 : 1;
}

static void multihost(int nhosts, const int *host_of, int nranks,
                      bool per_host, const char *name) {
  char why[600];
  if (!ns_supported(why, sizeof why))
    cr_skip_test("%s", why);
  ns_cleanup_stale();
  if (!ns_net_create(&g_net, nhosts, why, sizeof why))
    cr_skip_test("cannot build %d virtual hosts: %s", nhosts, why);
  mh_t m = {.per_host = per_host};
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 30000;
  cfg.algo = RINGCC_ALGO_ZEROCOPY;
  ns_run_opts_t o = {.net = &g_net, .nranks = nranks, .host_of = host_of,
                     .body = body_multihost, .arg = &m, .config = &cfg,
                     .timeout_s = 150, .name = name};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  fprintf(stderr, "%s: took %.1f s\n", name, res.seconds);
  ns_result_free(&res);
  cr_assert(ok, "%s failed (see the ranks' messages above)", name);
}

static void multihost_layout(int nhosts, int per_host, bool interleaved) {
  int host_of[NS_MAX_RANKS];
  char name[48];
  ns_layout(nhosts, per_host, interleaved, host_of);
  snprintf(name, sizeof name, "registered %dx%d%s", nhosts, per_host,
           interleaved ? " interleaved" : "");
  multihost(nhosts, host_of, nhosts * per_host, true, name);
}

Test(multihost, per_host_2x2, .timeout = 200) { multihost_layout(2, 2, false); }
Test(multihost, per_host_3x2_interleaved, .timeout = 200) {
  multihost_layout(3, 2, true);
}
Test(multihost, per_host_2x3, .timeout = 200) { multihost_layout(2, 3, false); }
/* Hosts with different numbers of ranks: registered calls run as others. */
Test(multihost, uneven_hosts_2_1, .timeout = 200) {
  static const int host_of[] = {0, 0, 1};
  multihost(2, host_of, 3, false, "registered 2+1");
}

/* ---- the tuner ------------------------------------------------------------------- */

#include "tuner.h"

/* The model's choice for coll on S bytes over n ranks of one kind of link
 * (rcc_model_defaults), with registered memory of the given kind. */
static struct rcc_candidate pick_of(int want, int coll, int n, double S,
                                    int link, int registered, int device,
                                    int *alg) {
  static struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  const struct rcc_link_cost *l = &rcc_model_defaults.link[link];
  struct rcc_model_input in = {
      .coll = coll, .nranks = n, .bytes = S, .ring_link = *l,
      .all_link = *l, .gamma_us_per_byte = rcc_model_defaults.gamma_us_per_byte,
      .ring_chunk_bytes = 65536, .all_chunk_bytes = 65536,
      .board_bytes = link == RCC_LINK_SHM ? 65536 : 0,
      .cma = link == RCC_LINK_SHM, .device = device,
      .forced = RINGCC_ALGO_AUTO, .all_link_type = link,
      .network_only = 0, .registered = registered};
  int w, count = rcc_model_choose(&in, cand, &w);
  *alg = cand[w].alg;
  for (int i = 0; i < count; i++)
    if (cand[i].alg == want)
      return cand[i];
  return (struct rcc_candidate){.alg = -1};
}

/* ---- sched: zc_sched.h ------------------------------------------------------- */

Test(sched, blocks_cover_in_order_aligned) {
  static const size_t esizes[] = {1, 2, 4, 8, 16, 32};
  static const size_t counts[] = {0,  1,   2,   3,    7,     13,    63,
                                  64, 65,  127, 128,  129,   1031,  4096,
                                  65537, (size_t)1 << 30, ((size_t)1 << 30) + 17};
  for (size_t e = 0; e < sizeof esizes / sizeof esizes[0]; e++)
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
      for (int n = 1; n <= 9; n++) {
        size_t es = esizes[e], count = counts[i], next = 0, first_len = 0;
        size_t align = es < RCC_ZC_ALIGN ? RCC_ZC_ALIGN / es : 1;
        for (int b = 0; b < n; b++) {
          size_t off, len;
          rcc_zc_block(count, es, n, b, &off, &len);
          cr_assert(off == next && len <= count - off,
                    "esize %zu, count %zu, n %d: block %d is [%zu, +%zu), "
                    "expected to start at %zu inside the buffer", es, count,
                    n, b, off, len, next);
          if (len > 0)
            cr_assert(off % align == 0,
                      "esize %zu, count %zu, n %d: block %d starts at "
                      "element %zu, not on a %d-byte boundary", es, count, n,
                      b, off, RCC_ZC_ALIGN);
          if (b == 0)
            first_len = len;
          /* Every block but the last non-empty one is as long as the
           * first: ceil(count / n) rounded up to the alignment. */
          if (off + len < count)
            cr_assert(len == first_len,
                      "esize %zu, count %zu, n %d: block %d has %zu "
                      "elements, block 0 %zu", es, count, n, b, len,
                      first_len);
          next = off + len;
        }
        cr_assert(next == count,
                  "esize %zu, count %zu, n %d: the blocks cover %zu elements",
                  es, count, n, next);
        size_t per = (count + (size_t)n - 1) / (size_t)n;
        /* As even as the alignment allows: at least an even share (or
         * everything), less than one alignment unit more. */
        cr_assert((first_len >= per || first_len == count) &&
                      first_len < per + align,
                  "esize %zu, count %zu, n %d: block 0 has %zu elements for "
                  "%zu per rank", es, count, n, first_len, per);
      }
}

Test(sched, peers_each_once_self_first) {
  for (int n = 1; n <= 9; n++) {
    for (int me = 0; me < n; me++) {
      int seen[16] = {0};
      cr_assert(rcc_zc_peer(me, 0, n) == me, "n %d: rank %d starts at %d", n,
                me, rcc_zc_peer(me, 0, n));
      for (int j = 0; j < n; j++) {
        int q = rcc_zc_peer(me, j, n);
        cr_assert(q >= 0 && q < n && !seen[q],
                  "n %d: rank %d visits %d at step %d (out of range or twice)",
                  n, me, q, j);
        seen[q] = 1;
      }
    }
    for (int j = 0; j < n; j++) {
      int seen[16] = {0};
      for (int me = 0; me < n; me++) {
        int q = rcc_zc_peer(me, j, n);
        cr_assert(!seen[q], "n %d, step %d: two ranks write rank %d's buffer",
                  n, j, q);
        seen[q] = 1;
      }
    }
  }
}

/* The zero-copy candidate (one host). */
static struct rcc_candidate pick(int coll, int n, double S, int link,
                                 int registered, int device, int *alg) {
  return pick_of(RCC_ALG_ZEROCOPY, coll, n, S, link, registered, device, alg);
}

Test(tuner, zero_copy_where_registered) {
  static const int colls[] = {RCC_COLL_ALLREDUCE, RCC_COLL_REDUCE_SCATTER,
                              RCC_COLL_ALLGATHER, RCC_COLL_BCAST,
                              RCC_COLL_REDUCE, RCC_COLL_ALLTOALL};
  int alg;
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    for (int n = 2; n <= 8; n *= 2) {
      struct rcc_candidate c = pick(colls[i], n, 1 << 20, RCC_LINK_SHM, 1, 0,
                                    &alg);
      cr_expect(c.runnable && alg == RCC_ALG_ZEROCOPY,
                "%s, n=%d, 1 MiB, registered: the tuner chose %s",
                rcc_coll_name(colls[i]), n, rcc_alg_name(alg));
      c = pick(colls[i], n, 1 << 20, RCC_LINK_SHM, 0, 0, &alg);
      cr_expect(!c.runnable && strstr(c.why_not, "ringcc_comm_register"),
                "%s without registrations: zero-copy %s (%s)",
                rcc_coll_name(colls[i]), c.runnable ? "runnable" : "not",
                c.why_not ? c.why_not : "");
      c = pick(colls[i], n, 1 << 20, RCC_LINK_SHM, 1, 1, &alg);
      cr_expect(!c.runnable, "%s on device buffers: zero-copy runnable",
                rcc_coll_name(colls[i]));
    }
  /* An 8-byte allreduce: one exchange on the board beats two. */
  pick(RCC_COLL_ALLREDUCE, 4, 8, RCC_LINK_SHM, 1, 0, &alg);
  cr_expect_eq(alg, RCC_ALG_BOARD, "8 B, registered: %s", rcc_alg_name(alg));
  /* Several hosts: AllReduce per host and a ring between them; the other
   * collectives have no such path. */
  struct rcc_candidate c = pick_of(RCC_ALG_HIER, RCC_COLL_ALLREDUCE, 4,
                                   64 << 20, RCC_LINK_TCP, 2, 0, &alg);
  cr_expect(c.runnable && alg == RCC_ALG_HIER,
            "allreduce 64 MiB on 2x2 hosts, registered: %s", rcc_alg_name(alg));
  c = pick(RCC_COLL_ALLGATHER, 4, 64 << 20, RCC_LINK_TCP, 2, 0, &alg);
  cr_expect(alg != RCC_ALG_HIER && alg != RCC_ALG_ZEROCOPY && !c.runnable,
            "allgather on several hosts: %s", rcc_alg_name(alg));
}

/* Registered device memory: the device zero-copy kernel for AllReduce,
 * Reduce-Scatter and AllGather, chosen from 1 MiB to 256 MiB (its P2P cost
 * beats the FIFO ring's; at 8 bytes the one-exchange FIFO schedules may win
 * on latency, but it can run); nowhere else. */
Test(tuner, device_zero_copy_where_registered) {
  static const int colls[] = {RCC_COLL_ALLREDUCE, RCC_COLL_REDUCE_SCATTER,
                              RCC_COLL_ALLGATHER};
  static const double sizes[] = {8, 1 << 20, 256 << 20};
  int alg;
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    for (int n = 2; n <= 8; n *= 2)
      for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        struct rcc_candidate c = pick_of(RCC_ALG_ZEROCOPY_DEV, colls[i], n,
                                         sizes[k], RCC_LINK_SHM, 1, 1, &alg);
        cr_expect(c.runnable &&
                      (sizes[k] < 1024 || alg == RCC_ALG_ZEROCOPY_DEV),
                  "%s, n=%d, %.0f B, registered device memory: the tuner "
                  "chose %s (device zero-copy %s)", rcc_coll_name(colls[i]), n,
                  sizes[k], rcc_alg_name(alg),
                  c.runnable ? "runnable" : "not runnable");
        c = pick_of(RCC_ALG_ZEROCOPY_DEV, colls[i], n, sizes[k], RCC_LINK_SHM,
                    0, 1, &alg);
        cr_expect(!c.runnable && c.why_not &&
                      strstr(c.why_not, "ringcc_comm_register"),
                  "%s on unregistered device memory: device zero-copy %s",
                  rcc_coll_name(colls[i]), c.runnable ? "runnable" : "not");
        c = pick_of(RCC_ALG_ZEROCOPY_DEV, colls[i], n, sizes[k], RCC_LINK_SHM,
                    1, 0, &alg);
        cr_expect(!c.runnable && alg != RCC_ALG_ZEROCOPY_DEV,
                  "%s on registered host memory: %s",
                  rcc_coll_name(colls[i]), rcc_alg_name(alg));
      }
  /* More local ranks than the kernel takes. */
  struct rcc_candidate c = pick_of(RCC_ALG_ZEROCOPY_DEV, RCC_COLL_ALLREDUCE,
                                   RCC_ZC_DEV_MAX + 1, 1 << 20, RCC_LINK_SHM,
                                   1, 1, &alg);
  cr_expect(!c.runnable && alg != RCC_ALG_ZEROCOPY_DEV,
            "allreduce, n=%d on registered device memory: %s",
            RCC_ZC_DEV_MAX + 1, rcc_alg_name(alg));
  /* The collectives it does not take: not it, nor the host zero-copy. */
  static const int others[] = {RCC_COLL_BCAST, RCC_COLL_REDUCE,
                               RCC_COLL_ALLTOALL};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    pick_of(RCC_ALG_ZEROCOPY_DEV, others[i], 4, 1 << 20, RCC_LINK_SHM, 1, 1,
            &alg);
    cr_expect(alg != RCC_ALG_ZEROCOPY_DEV && alg != RCC_ALG_ZEROCOPY,
              "%s on registered device memory: %s", rcc_coll_name(others[i]),
              rcc_alg_name(alg));
  }
}

/* Ranks of one host that disagree about a call: they fail at once, and so
 * do the other hosts' ranks (they learn it from the agreement between
 * hosts), instead of waiting for their deadline. */

/* Where each rank, its call returned, leaves a file, and then waits for
 * every other rank's: a rank that exits while the others still run their
 * agreement between hosts would fail them with PEER_FAILED instead (an
 * exit is a death to the ranks still talking). Set before the ranks fork. */
static char g_returned_dir[96];

static int wait_all_returned(h_ctx_t *h) {
  char path[128];
  snprintf(path, sizeof path, "%s/%d", g_returned_dir, h->rank);
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return h_fail(h, "cannot create %s", path);
  fclose(f);
  for (double t0 = h_now_s(); h_now_s() - t0 < 30; h_sleep_ms(10)) {
    int seen = 0;
    for (int r = 0; r < h->nranks; r++) {
      snprintf(path, sizeof path, "%s/%d", g_returned_dir, r);
      seen += access(path, F_OK) == 0;
    }
    if (seen == h->nranks)
      return 0;
  }
  return h_fail(h, "the other ranks' calls did not return within 30 s");
}

static int body_multihost_mismatch(h_ctx_t *h) {
  region_t region;
  if (!region_make(h, h->comm, &region, 4 * PART_BYTES))
    return 1;
  float *f = (float *)region.base;
  size_t count = PART_COUNT + (h->rank == h->nranks - 1 ? 64 : 0);
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_allreduce(f, f + 2 * PART_COUNT, count,
                                       RINGCC_FLOAT32, RINGCC_SUM, h->comm,
                                       NULL);
  int rc = expect_error(h, h->comm, r, RINGCC_ERR_INVALID_USAGE,
                        "allreduce with another count on the last rank",
                        (const char *const[]){"another call", NULL});
  if (h_now_s() - t0 > 5)
    rc |= h_fail(h, "the mismatch took %.1f s to fail", h_now_s() - t0);
  return rc | wait_all_returned(h);
}

Test(multihost, mismatch_fails_every_host_2x2, .timeout = 120) {
  char why[600];
  int host_of[NS_MAX_RANKS];
  if (!ns_supported(why, sizeof why))
    cr_skip_test("%s", why);
  ns_cleanup_stale();
  if (!ns_net_create(&g_net, 2, why, sizeof why))
    cr_skip_test("cannot build 2 virtual hosts: %s", why);
  ns_layout(2, 2, false, host_of);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 30000;
  cfg.algo = RINGCC_ALGO_ZEROCOPY;
  ns_run_opts_t o = {.net = &g_net, .nranks = 4, .host_of = host_of,
                     .body = body_multihost_mismatch, .config = &cfg,
                     .timeout_s = 60, .name = "registered 2x2 mismatch"};
  snprintf(g_returned_dir, sizeof g_returned_dir,
           "/tmp/ringcc-test-mismatch-%d", (int)getpid());
  cr_assert(mkdir(g_returned_dir, 0700) == 0, "mkdir %s", g_returned_dir);
  bool ok = ns_run(&o, NULL);
  char path[128];
  for (int r = 0; r < 4; r++) {
    snprintf(path, sizeof path, "%s/%d", g_returned_dir, r);
    unlink(path);
  }
  rmdir(g_returned_dir);
  cr_assert(ok, "a mismatch on one host: see the ranks above");
}

/* A rank that never makes the call: the others' wait ends at the deadline,
 * naming the rank they wait for; a report taken meanwhile from another
 * thread says which zero-copy call that is. */
typedef struct {
  ringcc_comm_t comm;
  char report[1024];
} watch_t;

static void *watch(void *p) {
  watch_t *w = p;
  usleep(500000);
  ringcc_comm_report(w->comm, w->report, sizeof w->report);
  return NULL;
}

static int body_silent_rank(h_ctx_t *h) {
  region_t region;
  if (!region_make(h, h->comm, &region, 4 * PART_BYTES))
    return 1;
  if (h->rank == h->nranks - 1) {
    h_sleep_ms(4000); /* past the others' deadline, then leave */
    return 0;
  }
  float *f = (float *)region.base;
  watch_t w = {.comm = h->comm};
  pthread_t t;
  pthread_create(&t, NULL, watch, &w);
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_allreduce(f, f + 2 * PART_COUNT, PART_COUNT,
                                       RINGCC_FLOAT32, RINGCC_SUM, h->comm,
                                       NULL);
  double took = h_now_s() - t0;
  pthread_join(t, NULL);
  char who[48];
  snprintf(who, sizeof who, "the arrival of rank %d", h->nranks - 1);
  int rc = expect_error(h, h->comm, r, RINGCC_ERR_TIMEOUT,
                        "allreduce a rank never calls",
                        (const char *const[]){who, "timed out", NULL});
  if (took < 1.0 || took > 3.9)
    rc |= h_fail(h, "the deadline of 1.5 s ended the wait after %.2f s", took);
  if (strstr(w.report, "zero-copy board of rank") == NULL ||
      strstr(w.report, "waits for call 1") == NULL)
    rc |= h_fail(h, "the report taken during the wait does not say so: %s",
                 w.report);
  return rc;
}

Test(lifecycle, silent_rank_times_out_n3, .timeout = 60) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.timeout_ms = 1500;
  cfg.algo = RINGCC_ALGO_ZEROCOPY;
  h_run_opts_t o = {.nranks = 3, .body = body_silent_rank, .config = &cfg,
                    .timeout_s = 30, .name = "silent rank"};
  cr_assert(h_run(&o), "a rank that never calls: see the ranks above");
}
