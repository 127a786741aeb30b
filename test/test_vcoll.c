/*
 * test_vcoll.c - Gather, Scatter, AllGatherv and AllToAllv with real ranks.
 *
 * Every call x every datatype, n = 1..8, over shared memory and TCP, with
 * the tuner's choice and each of Gather's and Scatter's algorithms forced
 * (binomial tree, direct, cross-memory attach), on tiny FIFO slots too
 * (many pieces per block); cross-memory attach around the tuner's
 * threshold (the algorithm each call ran checked in the statistics) and
 * with a rank killed; over TCP with ranks entering calls late (messages
 * parked in the socket until their receiver lands them).
 * Every kind of call mixed in one random stream on one communicator
 * (soak/random_coll.h): these with the AllReduce family, grouped send/recv
 * and requests, shm, TCP and ranks as threads.
 * Layouts are random but the same on every rank (drawn from one seed, which
 * every failure prints; VCOLL_SEED=... reruns one): counts with zeros (some
 * calls all zero), blocks in a shuffled order with gaps between them, in
 * place and not, the root anywhere. Every byte of every output is checked
 * against the value its sender wrote (a hash of sender, receiver, position
 * and the call), and the gaps and the bytes past the end are checked
 * untouched. Bad arguments fail on the rank that made them, naming the
 * argument, and the communicator keeps working.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "soak/random_coll.h"

#define MAXN 8
#define GUARD 0xEE
#define REPS 2 /* layouts per call and datatype */

struct spec {
  uint64_t seed;
  int reg;  /* AllToAllv's large-block tests: A2A_REG_* */
  int huge; /* ... with blocks of megabytes */
};

static uint64_t seed_base(void) {
  const char *s = getenv("VCOLL_SEED");
  return s != NULL ? strtoull(s, NULL, 0) : 0x5eed2026u;
}

/* The byte at position b of what rank src sends rank dst in call salt. */
static uint8_t val(uint64_t salt, int src, int dst, size_t b) {
  return (uint8_t)(h_hash3(salt, (uint64_t)src * 131 + (uint64_t)dst, b) >> 17);
}

static void fill(uint8_t *p, uint64_t salt, int src, int dst, size_t bytes) {
  for (size_t b = 0; b < bytes; b++)
    p[b] = val(salt, src, dst, b);
}

/* The first wrong byte of [p, p+bytes) against val(salt, src, dst), or -1. */
static long wrong_at(const uint8_t *p, uint64_t salt, int src, int dst,
                     size_t bytes) {
  for (size_t b = 0; b < bytes; b++)
    if (p[b] != val(salt, src, dst, b))
      return (long)b;
  return -1;
}

static long guard_at(const uint8_t *p, size_t bytes) {
  for (size_t b = 0; b < bytes; b++)
    if (p[b] != GUARD)
      return (long)b;
  return -1;
}

/* A count: 0 one time in five, sometimes a few thousand, else up to 300. */
static size_t draw_count(uint64_t salt, uint64_t a, uint64_t b) {
  uint64_t h = h_hash3(salt, a, b);
  switch (h % 10) {
  case 0:
  case 1:
    return 0;
  case 2:
    return 1000 + (h >> 8) % 3000;
  default:
    return 1 + (h >> 8) % 300;
  }
}

/* Displacements for counts[0..n): the blocks in a shuffled order, each a
 * random gap after the previous one; returns the extent. */
static size_t draw_displs(uint64_t salt, int n, const size_t *counts,
                          size_t *displs) {
  int order[MAXN];
  for (int i = 0; i < n; i++)
    order[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(h_hash3(salt, 7, (uint64_t)i) % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    at += h_hash3(salt, 8, (uint64_t)k) % 5; /* a gap of 0..4 elements */
    displs[order[k]] = at;
    at += counts[order[k]];
  }
  return at + 3;
}

/* ---- the four calls, each one layout, every byte checked ---------------- */

/* count elements a block (the root and the in-place form drawn from salt). */
static int check_rooted_count(h_ctx_t *h, ringcc_datatype_t dt, uint64_t salt,
                              int gather, size_t count) {
  int n = h->nranks, me = h->rank;
  int root = (int)(h_hash3(salt, 1, 0) % (uint64_t)n);
  int in_place = h_hash3(salt, 2, 0) % 3 == 0;
  size_t es = h_dt_size(dt);
  size_t block = count * es, all = block * (size_t)n;
  const char *name = gather ? "gather" : "scatter";
  uint8_t *one = h_xmalloc(block + 8), *many = NULL;
  memset(one, GUARD, block + 8);
  if (me == root) {
    many = h_xmalloc(all + 8);
    memset(many, GUARD, all + 8);
  }
  ringcc_result_t r;
  if (gather) {
    fill(one, salt, me, root, block);
    if (me == root && in_place)
      fill(many + (size_t)root * block, salt, me, root, block);
    r = ringcc_gather(me == root && in_place ? RINGCC_IN_PLACE : one,
                      me == root ? many : NULL, count, dt, root, h->comm, NULL);
  } else {
    if (me == root)
      for (int p = 0; p < n; p++)
        fill(many + (size_t)p * block, salt, root, p, block);
    r = ringcc_scatter(me == root ? many : NULL,
                       me == root && in_place ? (void *)RINGCC_IN_PLACE : one,
                       count, dt, root, h->comm, NULL);
  }
  int bad = 0;
  if (!h_ok(h, r, name))
    bad = 1;
  for (int p = 0; !bad && me == root && p < n; p++) {
    long at = wrong_at(many + (size_t)p * block, salt, gather ? p : root,
                       gather ? root : p, block);
    if (at >= 0)
      bad = h_fail(h, "%s %s n=%d root %d count %zu%s salt %#llx: block %d "
                   "byte %ld wrong", name, h_dt_name(dt), n, root, count,
                   in_place ? " in place" : "", (unsigned long long)salt, p,
                   at);
  }
  if (!bad && me == root && guard_at(many + all, 8) >= 0)
    bad = h_fail(h, "%s: bytes past the root's buffer written", name);
  if (!bad && !gather && !(me == root && in_place)) {
    long at = wrong_at(one, salt, root, me, block);
    if (at >= 0 || guard_at(one + block, 8) >= 0)
      bad = h_fail(h, "scatter %s n=%d root %d count %zu salt %#llx: byte %ld "
                   "wrong (or past the end)", h_dt_name(dt), n, root, count,
                   (unsigned long long)salt, at);
  }
  free(one);
  free(many);
  return bad;
}

static int check_rooted(h_ctx_t *h, ringcc_datatype_t dt, uint64_t salt,
                        int gather) {
  return check_rooted_count(h, dt, salt, gather, draw_count(salt, 3, 0));
}

static int check_allgatherv(h_ctx_t *h, ringcc_datatype_t dt, uint64_t salt) {
  int n = h->nranks, me = h->rank;
  size_t es = h_dt_size(dt), counts[MAXN], displs[MAXN];
  int all_zero = h_hash3(salt, 4, 0) % 8 == 0;
  int in_place = h_hash3(salt, 5, 0) % 3 == 0;
  for (int i = 0; i < n; i++)
    counts[i] = all_zero ? 0 : draw_count(salt, 6, (uint64_t)i);
  size_t extent = draw_displs(salt, n, counts, displs);
  uint8_t *out = h_xmalloc(extent * es), *in = h_xmalloc(counts[me] * es + 1);
  memset(out, GUARD, extent * es);
  fill(in, salt, me, 0, counts[me] * es);
  if (in_place)
    fill(out + displs[me] * es, salt, me, 0, counts[me] * es);
  ringcc_result_t r = ringcc_allgatherv(in_place ? RINGCC_IN_PLACE : in,
                                        counts[me], out, counts, displs, dt,
                                        h->comm, NULL);
  int bad = !h_ok(h, r, "allgatherv");
  for (int p = 0; !bad && p < n; p++) {
    long at = wrong_at(out + displs[p] * es, salt, p, 0, counts[p] * es);
    if (at >= 0)
      bad = h_fail(h, "allgatherv %s n=%d%s salt %#llx: block %d (count %zu "
                   "at %zu) byte %ld wrong", h_dt_name(dt), n,
                   in_place ? " in place" : "", (unsigned long long)salt, p,
                   counts[p], displs[p], at);
    for (size_t e = 0; !bad && e < extent; e++) { /* the gaps */
      int inside = 0;
      for (int q = 0; q < n; q++)
        inside |= e >= displs[q] && e < displs[q] + counts[q];
      if (!inside && guard_at(out + e * es, es) >= 0)
        bad = h_fail(h, "allgatherv salt %#llx: gap element %zu written",
                     (unsigned long long)salt, e);
    }
  }
  free(out);
  free(in);
  return bad;
}

/* AllToAllv's large-block tests (set in the rank before its calls): blocks
 * mostly past RCC_A2AV_INLINE_MAX, read in place (exec_a2av.c); and the
 * buffers from ringcc_mem_alloc, registered (A2A_REG_BOTH), or only the
 * receive buffer (A2A_REG_RECV: the sends are not readable in place where
 * cross-memory attach is not used, so they follow through the FIFOs). */
enum { A2A_REG_NONE, A2A_REG_BOTH, A2A_REG_RECV };
static int a2a_large, a2a_reg;

/* The counts rank i sends rank j; symmetric for in place. Large: 0 one
 * time in five, small (up to 300) three in ten, else 3000 to 40000; huge
 * (a2a_large 2): 0 one time in five, else 1 to 3 million, so that a call's
 * traffic passes the 16 MiB from which blocks land by non-temporal stores
 * (lib/exec/copy.h), at odd addresses. */
static size_t a2a_count(uint64_t salt, int i, int j, int symmetric) {
  if (symmetric && j < i)
    return a2a_count(salt, j, i, symmetric);
  uint64_t h = h_hash3(salt, 9, (uint64_t)i * MAXN + (uint64_t)j);
  if (!a2a_large)
    return draw_count(salt, 9, (uint64_t)i * MAXN + (uint64_t)j);
  if (a2a_large == 2)
    return h % 10 < 2 ? 0 : 1000001 + (h >> 8) % 2000000;
  return h % 10 < 2 ? 0 : h % 10 < 5 ? 1 + (h >> 8) % 300
                                     : 3000 + (h >> 8) % 37001;
}

/* A buffer of the AllToAllv tests: malloc, or registered memory (*reg). */
static int check_alltoallv(h_ctx_t *h, ringcc_datatype_t dt, uint64_t salt) {
  int n = h->nranks, me = h->rank;
  int in_place = h_hash3(salt, 10, 0) % 3 == 0;
  int all_zero = h_hash3(salt, 11, 0) % 8 == 0;
  size_t es = h_dt_size(dt), sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN];
  for (int j = 0; j < n; j++) {
    sc[j] = all_zero ? 0 : a2a_count(salt, me, j, in_place);
    rc[j] = all_zero ? 0 : a2a_count(salt, j, me, in_place);
  }
  size_t sext = draw_displs(h_hash3(salt, 12, (uint64_t)me), n, sc, sd);
  size_t rext = draw_displs(h_hash3(salt, 13, (uint64_t)me), n, rc, rd);
  ringcc_reg_t in_reg, out_reg; /* registered in this order on every rank */
  uint8_t *in = h_reg_alloc(h, sext * es + 1, a2a_reg == A2A_REG_BOTH, &in_reg);
  uint8_t *out = h_reg_alloc(h, rext * es + 1, a2a_reg != A2A_REG_NONE,
                           &out_reg);
  if (in == NULL || out == NULL)
    return 1;
  memset(out, GUARD, rext * es);
  for (int j = 0; j < n; j++) {
    fill(in + sd[j] * es, salt, me, j, sc[j] * es);
    if (in_place) /* what this rank sends j, where j's block will land */
      fill(out + rd[j] * es, salt, me, j, rc[j] * es);
  }
  ringcc_result_t r = ringcc_alltoallv(in_place ? RINGCC_IN_PLACE : in, sc, sd,
                                       out, rc, rd, dt, h->comm, NULL);
  int bad = !h_ok(h, r, "alltoallv");
  for (int i = 0; !bad && i < n; i++) {
    long at = wrong_at(out + rd[i] * es, salt, i, me, rc[i] * es);
    if (at >= 0)
      bad = h_fail(h, "alltoallv %s n=%d%s salt %#llx: block from %d (count "
                   "%zu at %zu) byte %ld wrong", h_dt_name(dt), n,
                   in_place ? " in place" : "", (unsigned long long)salt, i,
                   rc[i], rd[i], at);
  }
  for (size_t e = 0; !bad && e < rext; e++) {
    int inside = 0;
    for (int q = 0; q < n; q++)
      inside |= e >= rd[q] && e < rd[q] + rc[q];
    if (!inside && guard_at(out + e * es, es) >= 0)
      bad = h_fail(h, "alltoallv salt %#llx: gap element %zu written",
                   (unsigned long long)salt, e);
  }
  bad |= h_reg_free(h, out, out_reg);
  bad |= h_reg_free(h, in, in_reg);
  return bad;
}

/* The algorithm AllToAllv ran as (ringcc_comm_stats): with registered
 * buffers on one host zero-copy, else (n > 1) by the tuner's choice, which
 * the test does not know; so it checks only what registration implies. */
static int check_a2a_algorithm(h_ctx_t *h, int reg) {
  ringcc_comm_stats_t st = RINGCC_COMM_STATS_INIT;
  if (!h_ok(h, ringcc_comm_stats(h->comm, &st), "ringcc_comm_stats"))
    return 1;
  for (int i = 0; i < st.nrows; i++) {
    const ringcc_stats_row_t *row = &st.rows[i];
    if (strcmp(row->collective, "alltoallv") != 0 || h->nranks == 1)
      continue;
    if (reg != A2A_REG_NONE && strcmp(row->algorithm, "zero-copy") != 0)
      return h_fail(h, "alltoallv on registered buffers ran as '%s' (%llu "
                    "calls), not zero-copy", row->algorithm,
                    (unsigned long long)row->calls);
  }
  return 0;
}

/* Every call x every datatype x REPS layouts. */
static int body_all(h_ctx_t *h) {
  const struct spec *s = h->arg;
  for (int d = 0; d < RINGCC_NUM_DATATYPES; d++)
    for (int rep = 0; rep < REPS; rep++) {
      ringcc_datatype_t dt = h_all_dtypes[d];
      uint64_t salt = h_hash3(s->seed, (uint64_t)d, (uint64_t)rep);
      if (check_rooted(h, dt, salt ^ 1, 1) || check_rooted(h, dt, salt ^ 2, 0) ||
          check_allgatherv(h, dt, salt ^ 3) || check_alltoallv(h, dt, salt ^ 4))
        return h_fail(h, "(seed %#llx: rerun with VCOLL_SEED=%#llx)",
                      (unsigned long long)s->seed,
                      (unsigned long long)s->seed);
    }
  return 0;
}

static void run_all(int n, const ringcc_config_t *cfg, const char *what) {
  struct spec s = {seed_base() ^ ((uint64_t)n << 32) ^
                   h_hash3(0, (uint64_t)(cfg ? cfg->algo : 0),
                           (uint64_t)(cfg ? cfg->shm_disable : 0)),
                   A2A_REG_NONE, 0};
  h_run_opts_t o = {.nranks = n, .body = body_all, .arg = &s, .config = cfg,
                    .timeout_s = 120, .name = what};
  cr_assert(h_run(&o), "%s, n=%d, seed %#llx: failed (above)", what, n,
            (unsigned long long)s.seed);
}

static ringcc_config_t config(int algo, int64_t chunk, int no_shm) {
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.algo = algo;
  cfg.shm_disable = no_shm;
  if (chunk > 0) {
    cfg.chunk_bytes = chunk;
    cfg.nslots = 2;
  }
  return cfg;
}

Test(shm, every_n_1_to_8, .timeout = 400) {
  for (int n = 1; n <= MAXN; n++)
    run_all(n, NULL, "shm, the tuner's choice");
}

Test(shm, tree_tiny_slots, .timeout = 300) {
  ringcc_config_t cfg = config(RINGCC_ALGO_TREE, 1024, 0);
  run_all(3, &cfg, "shm, binomial trees, 1 KiB slots");
  run_all(6, &cfg, "shm, binomial trees, 1 KiB slots");
  run_all(8, &cfg, "shm, binomial trees, 1 KiB slots");
}

Test(shm, direct_tiny_slots, .timeout = 300) {
  ringcc_config_t cfg = config(RINGCC_ALGO_DIRECT, 1024, 0);
  run_all(5, &cfg, "shm, direct, 1 KiB slots");
  run_all(7, &cfg, "shm, direct, 1 KiB slots");
}

/* RINGCC_ALGO=cma: AllToAllv, Gather and Scatter (any non-empty block) by
 * cross-memory attach where every pair can (the others as the tuner picks;
 * where ptrace is refused, the FIFOs). */
Test(shm, cma, .timeout = 600) {
  ringcc_config_t cfg = config(RINGCC_ALGO_CMA, 0, 0);
  for (int n = 1; n <= MAXN; n++)
    run_all(n, &cfg, "shm, RINGCC_ALGO=cma");
}

/* ---- Gather and Scatter by cross-memory attach: the tuner's threshold --- */

/* Where this machine lets a rank read a sibling's memory (Yama's
 * ptrace_scope absent, 0 or 1: the library sets PR_SET_PTRACER_ANY), the
 * path must be taken; with scope 2 or 3 it cannot be. */
static int cma_expected(void) { return h_yama_scope() < 2; }

#define CMA_BLOCK (64 << 10) /* lib/algo/algorithms.c, docs/tuning.md */

/* Blocks under, at and over the threshold (odd sizes too), every byte
 * checked, each call's algorithm checked in the statistics: cross-memory
 * attach from CMA_BLOCK on under the tuner, for any block when forced. */
static int body_threshold(h_ctx_t *h) {
  static const size_t blocks[] = {CMA_BLOCK - 8, CMA_BLOCK, CMA_BLOCK + 24,
                                  300001, 1 << 20, 8, 0};
  static const ringcc_datatype_t dts[] = {RINGCC_UINT8, RINGCC_FLOAT64};
  const int *forced = h->arg;
  const char *cma = "cross-memory attach";
  int want_cma = h->nranks > 1 && cma_expected();
  for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++)
    for (int d = 0; d < 2; d++)
      for (int gather = 0; gather < 2; gather++) {
        const char *name = gather ? "gather" : "scatter";
        size_t es = h_dt_size(dts[d]), count = blocks[b] / es;
        uint64_t before = h_calls_by(h->comm, name, cma);
        uint64_t salt = h_hash3(0xc3a, b * 4 + (uint64_t)d * 2 +
                                           (uint64_t)gather, (uint64_t)h->nranks);
        if (check_rooted_count(h, dts[d], salt, gather, count))
          return h_fail(h, "%s of %zu-byte blocks (%s)", name, count * es,
                        *forced ? "RINGCC_ALGO=cma" : "the tuner's choice");
        int ran = h_calls_by(h->comm, name, cma) == before + 1;
        int want = want_cma && count > 0 &&
                   (*forced || count * es >= CMA_BLOCK);
        if (ran != want)
          return h_fail(h, "%s of %zu-byte blocks at n=%d (%s): ran %s cross-"
                        "memory attach, expected %s", name, count * es,
                        h->nranks, *forced ? "forced" : "tuned",
                        ran ? "by" : "without", want ? "by it" : "without");
      }
  return 0;
}

static void run_threshold(int n, int forced) {
  int arg = forced;
  ringcc_config_t cfg = config(forced ? RINGCC_ALGO_CMA : RINGCC_ALGO_AUTO, 0,
                               0);
  h_run_opts_t o = {.nranks = n, .body = body_threshold, .arg = &arg,
                    .config = &cfg, .timeout_s = 120,
                    .name = forced ? "cma threshold, forced" : "cma threshold"};
  cr_assert(h_run(&o), "n=%d, %s: failed (above)", n,
            forced ? "RINGCC_ALGO=cma" : "the tuner's choice");
}

Test(cma_rooted, threshold_tuned, .timeout = 600) {
  for (int n = 1; n <= MAXN; n++)
    run_threshold(n, 0);
}

Test(cma_rooted, threshold_forced, .timeout = 600) {
  for (int n = 2; n <= MAXN; n += 3)
    run_threshold(n, 1);
}

/* A rank killed (SIGKILL) as the others enter a Gather or Scatter by
 * cross-memory attach (4 MiB blocks): the root and every rank that waits
 * for the dead one fail with RINGCC_ERR_PEER_FAILED within seconds; no
 * rank hangs. victim: the root (Scatter: its peers wait for addresses) or
 * a peer (Gather: the root waits for its status word). */
struct killed_arg {
  int gather, victim; /* gather 2: AllToAllv */
  size_t block;
  int code[MAXN];
};

static int killed_body(h_ctx_t *h) {
  struct killed_arg *a = h->arg;
  int n = h->nranks, me = h->rank, root = 0;
  size_t block = a->block, counts[MAXN], displs[MAXN];
  uint8_t *one = h_xmalloc(block * (size_t)n), *many = h_xmalloc(block * (size_t)n);
  memset(one, me, block * (size_t)n);
  memset(many, me, block * (size_t)n);
  for (int j = 0; j < n; j++)
    counts[j] = block, displs[j] = (size_t)j * block;
  if (me == a->victim)
    raise(SIGKILL);
  ringcc_result_t r =
      a->gather == 2 ? ringcc_alltoallv(one, counts, displs, many, counts,
                                        displs, RINGCC_UINT8, h->comm, NULL)
      : a->gather    ? ringcc_gather(one, many, block, RINGCC_UINT8, root,
                                     h->comm, NULL)
                     : ringcc_scatter(many, one, block, RINGCC_UINT8, root,
                                      h->comm, NULL);
  a->code[me] = r == RINGCC_SUCCESS ? -1 : (int)r;
  free(one);
  free(many);
  return 0;
}

static void killed_run(int n, int gather, int victim, size_t block) {
  struct killed_arg *a = h_shared_alloc(sizeof *a);
  ringcc_config_t cfg = config(RINGCC_ALGO_CMA, 0, 0);
  a->gather = gather;
  a->victim = victim;
  a->block = block;
  h_run_opts_t o = {.nranks = n, .body = killed_body, .arg = a, .config = &cfg,
                    .timeout_s = 30, .name = "rank killed"};
  double t0 = h_now_s();
  cr_assert_not(h_run(&o), "the victim's death was not seen");
  double took = h_now_s() - t0;
  for (int r = 0; r < n; r++) {
    if (r == victim)
      continue;
    /* the root, or the root died; AllToAllv: every rank waits for all */
    int must = r == 0 || victim == 0 || gather == 2;
    cr_expect(a->code[r] == RINGCC_ERR_PEER_FAILED ||
                  (!must && a->code[r] == -1),
              "%s, rank %d killed: rank %d's call ended with %d, expected "
              "RINGCC_ERR_PEER_FAILED%s",
              gather == 2 ? "alltoallv" : gather ? "gather" : "scatter",
              victim, r, a->code[r], must ? "" : " or success");
  }
  cr_expect_lt(took, 20, "the survivors took %.1f s", took);
  h_shared_free(a, sizeof *a);
}

Test(cma_rooted, peer_killed, .timeout = 120) {
  killed_run(3, 1, 2, 4 << 20);
  killed_run(4, 0, 3, 4 << 20);
}

Test(cma_rooted, root_killed, .timeout = 120) {
  killed_run(3, 0, 0, 4 << 20);
  killed_run(3, 1, 0, 4 << 20);
}

/* AllToAllv (read in place, and small blocks on the board): every survivor
 * waits for the victim's places, and fails. */
Test(a2av, peer_killed, .timeout = 120) {
  killed_run(4, 2, 2, 4 << 20);
  killed_run(3, 2, 0, 100);
}

/* AllToAllv with large blocks, read in place (exec_a2av.c): 1-, 2-, 4- and
 * 8-byte elements, several layouts each, every byte checked. */
static int body_a2a_large(h_ctx_t *h) {
  static const ringcc_datatype_t dts[] = {RINGCC_UINT8, RINGCC_FLOAT16,
                                          RINGCC_FLOAT32, RINGCC_FLOAT64};
  const struct spec *s = h->arg;
  a2a_large = s->huge ? 2 : 1;
  a2a_reg = s->reg;
  for (int d = 0; d < (s->huge ? 2 : 4); d++)
    for (int rep = 0; rep < 3; rep++) {
      uint64_t salt = h_hash3(s->seed, (uint64_t)d, (uint64_t)rep);
      if (check_alltoallv(h, dts[d], salt))
        return h_fail(h, "(seed %#llx: rerun with VCOLL_SEED=%#llx)",
                      (unsigned long long)s->seed,
                      (unsigned long long)s->seed);
    }
  return check_a2a_algorithm(h, s->reg);
}

static void run_a2a_huge(int n, const ringcc_config_t *cfg, int reg,
                         int huge, const char *what) {
  struct spec s = {seed_base() ^ ((uint64_t)n << 32) ^ 0xa2a, reg, huge};
  h_run_opts_t o = {.nranks = n, .body = body_a2a_large, .arg = &s,
                    .config = cfg, .timeout_s = 120, .name = what};
  cr_assert(h_run(&o), "%s, n=%d, seed %#llx: failed (above)", what, n,
            (unsigned long long)s.seed);
}

static void run_a2a_large(int n, const ringcc_config_t *cfg, int reg,
                          const char *what) {
  run_a2a_huge(n, cfg, reg, 0, what);
}

/* Blocks of megabytes: landed with non-temporal stores, at odd offsets,
 * read by cross-memory attach or from the registered mapping. */
Test(a2av, huge_blocks, .timeout = 400) {
  run_a2a_huge(3, NULL, A2A_REG_NONE, 1, "alltoallv huge blocks");
  run_a2a_huge(4, NULL, A2A_REG_BOTH, 1, "alltoallv huge registered blocks");
}

Test(a2av, large_blocks_n_1_to_8, .timeout = 400) {
  for (int n = 1; n <= MAXN; n++)
    run_a2a_large(n, NULL, A2A_REG_NONE, "alltoallv large blocks, the tuner's "
                  "choice");
}

/* Forced: the pairwise exchange over the FIFOs (any other RINGCC_ALGO). */
Test(a2av, large_blocks_pairwise, .timeout = 300) {
  ringcc_config_t cfg = config(RINGCC_ALGO_RING, 0, 0);
  run_a2a_large(3, &cfg, A2A_REG_NONE, "alltoallv large blocks, pairwise");
  run_a2a_large(8, &cfg, A2A_REG_NONE, "alltoallv large blocks, pairwise");
}

/* Registered memory: large blocks copied from the mapped peer buffer. */
Test(a2av, registered_n_1_to_8, .timeout = 400) {
  for (int n = 1; n <= MAXN; n++)
    run_a2a_large(n, NULL, A2A_REG_BOTH, "alltoallv registered buffers");
}

/* Small FIFO slots (the board's regions are one slot): 256 bytes hold the
 * places of 4 ranks with hardly room for a small block (the others are read
 * in place), not those of 8 (the pairwise exchanges over the FIFOs). */
Test(a2av, small_board, .timeout = 400) {
  static const struct {
    int n, reg;
    const char *what;
  } cases[] = {{4, A2A_REG_NONE, "alltoallv, 256-byte board regions"},
               {8, A2A_REG_NONE, "alltoallv, 256-byte slots, no board"},
               {5, A2A_REG_BOTH, "alltoallv registered, 256-byte regions"}};
  ringcc_config_t cfg = config(RINGCC_ALGO_AUTO, 256, 0);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    run_a2a_large(cases[i].n, &cfg, cases[i].reg, cases[i].what);
}

/* Counts that do not agree between ranks 0 and 1 (rank 0 expects two more
 * elements from rank 1 than rank 1 sends it): both fail with
 * RINGCC_ERR_INVALID_USAGE, naming each other, and move nothing between
 * them; the other ranks' blocks still move, so no rank hangs. */
struct mismatch_arg {
  size_t block;
  int code[MAXN];
};

static int mismatch_body(h_ctx_t *h) {
  struct mismatch_arg *a = h->arg;
  int n = h->nranks, me = h->rank;
  size_t sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN], per = a->block + 2;
  uint8_t *in = h_xmalloc(per * (size_t)n), *out = h_xmalloc(per * (size_t)n);
  for (int j = 0; j < n; j++) {
    sc[j] = rc[j] = a->block;
    sd[j] = rd[j] = (size_t)j * per;
    fill(in + sd[j], 7, me, j, sc[j]);
  }
  if (me == 0)
    rc[1] += 2;
  ringcc_result_t r = ringcc_alltoallv(in, sc, sd, out, rc, rd, RINGCC_UINT8,
                                       h->comm, NULL);
  a->code[me] = r == RINGCC_SUCCESS ? -1 : (int)r;
  int bad = 0;
  if (r == RINGCC_ERR_INVALID_USAGE &&
      strstr(ringcc_comm_last_error(h->comm), "agree pairwise") == NULL)
    bad = h_fail(h, "the mismatch's message does not say what to check: %s",
                 ringcc_comm_last_error(h->comm));
  for (int j = 0; j < n && !bad; j++)
    if (me > 1 && wrong_at(out + rd[j], 7, j, me, rc[j]) >= 0)
      bad = h_fail(h, "alltoallv with a mismatch elsewhere: block from %d "
                   "wrong", j);
  free(in);
  free(out);
  return bad;
}

static void mismatch_run(int n, size_t block) {
  struct mismatch_arg *a = h_shared_alloc(sizeof *a);
  a->block = block;
  h_run_opts_t o = {.nranks = n, .body = mismatch_body, .arg = a,
                    .timeout_s = 30, .name = "alltoallv counts mismatch"};
  cr_assert(h_run(&o), "alltoallv with mismatched counts, n=%d, block %zu: "
            "failed (above)", n, block);
  for (int r = 0; r < n; r++)
    cr_expect(a->code[r] == (r < 2 ? RINGCC_ERR_INVALID_USAGE : -1),
              "alltoallv mismatch between ranks 0 and 1, n=%d, block %zu: "
              "rank %d ended with %d", n, block, r, a->code[r]);
  h_shared_free(a, sizeof *a);
}

Test(a2av, counts_mismatch, .timeout = 120) {
  if (h_yama_scope() >= 3)
    cr_skip_test("Yama ptrace_scope 3: no cross-memory attach, the pairwise "
                 "exchange runs (it checks the receiver's side only)");
  mismatch_run(3, 100);
  mismatch_run(4, 1 << 20);
}

/* RINGCC_ALGO=zerocopy (no cross-memory attach): registered sends read in
 * place; with only the receive buffer registered, the large blocks follow
 * through the FIFOs after the places. */
Test(a2av, zerocopy_forced, .timeout = 400) {
  ringcc_config_t cfg = config(RINGCC_ALGO_ZEROCOPY, 0, 0);
  run_a2a_large(4, &cfg, A2A_REG_BOTH, "alltoallv RINGCC_ALGO=zerocopy");
  run_a2a_large(7, &cfg, A2A_REG_BOTH, "alltoallv RINGCC_ALGO=zerocopy");
  run_a2a_large(2, &cfg, A2A_REG_RECV,
                "alltoallv RINGCC_ALGO=zerocopy, sends not registered");
  run_a2a_large(5, &cfg, A2A_REG_RECV,
                "alltoallv RINGCC_ALGO=zerocopy, sends not registered");
}

Test(tcp, every, .timeout = 400) {
  ringcc_config_t tree = config(RINGCC_ALGO_TREE, 4096, 1);
  ringcc_config_t direct = config(RINGCC_ALGO_DIRECT, 0, 1);
  run_all(2, &direct, "tcp, direct");
  run_all(3, &tree, "tcp, binomial trees, 4 KiB slots");
  run_all(5, &direct, "tcp, direct");
}

/* ---- every kind in one stream (soak/random_coll.h) ---------------------- */

/* Blocks of up to 1.6 MB (8-byte elements, log-uniform: most are small), so
 * that a stream crosses every size threshold: the board's inline blocks,
 * cross-memory attach from 64 KiB, more than a FIFO holds. */
#define MIXED_MAX_COUNT 200000

struct mixed {
  uint64_t seed;
  int calls;
};

/* Calls 0..calls-1 of rc_draw_mixed's stream, every result checked; the
 * first failure names the call and the seed. */
static int body_mixed(h_ctx_t *h) {
  const struct mixed *m = h->arg;
  rc_rank_t st;
  if (!rc_rank_init(&st, h->rank, h->nranks, MIXED_MAX_COUNT)) {
    rc_rank_free(&st);
    return h_fail(h, "out of memory");
  }
  int bad = 0;
  for (int i = 0; i < m->calls && !bad; i++) {
    rc_call_t c;
    rc_draw_mixed(m->seed, (uint64_t)i, h->nranks, MIXED_MAX_COUNT, &c);
    int res = rc_run(&st, &c, h->comm);
    if (res != 0) {
      char what[160];
      rc_describe(&c, what, sizeof what);
      bad = h_fail(h, "call %d (%s): %s (seed %#llx: rerun with "
                   "VCOLL_SEED=%#llx)", i, what,
                   res == RC_WRONG_DATA ? "wrong data (above)"
                                        : ringcc_comm_last_error(h->comm),
                   (unsigned long long)m->seed,
                   (unsigned long long)seed_base());
    }
  }
  rc_rank_free(&st);
  return bad;
}

static void run_mixed(int n, int no_shm, bool threads, int calls) {
  ringcc_config_t cfg = config(RINGCC_ALGO_AUTO, 0, no_shm);
  struct mixed m = {seed_base() ^ ((uint64_t)n << 32) ^
                        ((uint64_t)no_shm << 40) ^ ((uint64_t)threads << 41),
                    calls};
  char what[96];
  snprintf(what, sizeof(what), "mixed stream, %s%s", no_shm ? "tcp" : "shm",
           threads ? ", ranks as threads" : "");
  h_run_opts_t o = {.nranks = n, .body = body_mixed, .arg = &m,
                    .config = &cfg, .threads = threads, .timeout_s = 300,
                    .name = what};
  cr_assert(h_run(&o), "%s, n=%d, seed %#llx: failed (above)", what, n,
            (unsigned long long)m.seed);
}

Test(mixed, stream_shm, .timeout = 600) {
  run_mixed(3, 0, false, 400);
  run_mixed(8, 0, false, 300);
  run_mixed(4, 0, true, 300);
}

Test(mixed, stream_tcp, .timeout = 600) {
  run_mixed(2, 1, false, 300);
  run_mixed(5, 1, false, 300);
}

/* ---- payloads parked in the socket (RINGCC_NET_PARK_US) ----------------- */

/* Over TCP, one rank in turn enters each call late (by 0 to 30 ms), so its
 * peers' large messages reach it before it is ready: they wait in the
 * socket (parked) until it lands them or waits for them, or for
 * RINGCC_NET_PARK_US, and then go to the slots. AllToAllv's large blocks,
 * Gather and Scatter of 32 to 544 KiB blocks, in and out of place, the
 * root anywhere; every byte checked. */
static int body_parked(h_ctx_t *h) {
  static const useconds_t skew_us[] = {0, 300, 3000, 30000};
  static const ringcc_datatype_t dts[] = {RINGCC_FLOAT64, RINGCC_FLOAT32,
                                          RINGCC_UINT8};
  const struct spec *s = h->arg;
  a2a_large = 1;
  for (int call = 0; call < 18; call++) {
    uint64_t salt = h_hash3(s->seed, 77, (uint64_t)call);
    ringcc_datatype_t dt = dts[call % 3];
    size_t count =
        (32768 + h_hash3(salt, 78, 0) % (512 * 1024)) / h_dt_size(dt);
    if (h->rank == call % h->nranks)
      usleep(skew_us[(call / h->nranks) % 4]);
    int bad = call % 3 == 0
                  ? check_alltoallv(h, dt, salt)
                  : check_rooted_count(h, dt, salt, call % 3 == 1, count);
    if (bad)
      return h_fail(h, "call %d (seed %#llx: rerun with VCOLL_SEED=%#llx)",
                    call, (unsigned long long)s->seed,
                    (unsigned long long)s->seed);
  }
  return 0;
}

static void run_parked(int n, const char *park_us) {
  ringcc_config_t cfg = config(RINGCC_ALGO_AUTO, 0, 1);
  struct spec s = {seed_base() ^ ((uint64_t)n << 32) ^ 0x9a4c, 0, 0};
  char what[96];
  snprintf(what, sizeof(what), "tcp, late ranks, RINGCC_NET_PARK_US=%s",
           park_us);
  setenv("RINGCC_NET_PARK_US", park_us, 1); /* this worker and its ranks */
  h_run_opts_t o = {.nranks = n, .body = body_parked, .arg = &s,
                    .config = &cfg, .timeout_s = 120, .name = what};
  int ok = h_run(&o);
  unsetenv("RINGCC_NET_PARK_US");
  cr_assert(ok, "%s, n=%d, seed %#llx: failed (above)", what, n,
            (unsigned long long)s.seed);
}

/* The default; parked until landed or waited for (1 s: never due here);
 * due almost at once; never parked. */
Test(tcp, parked, .timeout = 400) {
  run_parked(3, "2000");
  run_parked(4, "1000000");
  run_parked(5, "100");
  run_parked(2, "0");
}

/* That payloads do wait: AllToAll of 256 KiB blocks over TCP, rank 0
 * entering each call 40 ms after its peers, whose blocks for it are in its
 * socket by then. Parked (1 s), every one of them lands in rank 0's output
 * (ringcc_comm_stats' landed_bytes grows by both blocks a call) from the
 * second call on (the first tells the connection that its receiver lands);
 * read as they come (0), a block sent before rank 0 entered is mostly in
 * its slot by then and only the later one lands (in 8 runs here, each had
 * such a call among calls 1-5, so the assertion above tells parking from
 * none): printed, not asserted (it depends on when the proxy thread reads).
 * Every element checked. */
#define LATE_COUNT (256 * 1024 / 4)
#define LATE_CALLS 6
static int body_late_lands(h_ctx_t *h) {
  int n = h->nranks, me = h->rank;
  const int *must = h->arg;
  float *in = malloc((size_t)n * LATE_COUNT * sizeof(float));
  float *out = malloc((size_t)n * LATE_COUNT * sizeof(float));
  if (in == NULL || out == NULL)
    return h_fail(h, "out of memory");
  uint64_t landed[LATE_CALLS];
  int bad = 0;
  for (int call = 0; call < LATE_CALLS && !bad; call++) {
    for (int j = 0; j < n; j++)
      for (int e = 0; e < LATE_COUNT; e++)
        in[(size_t)j * LATE_COUNT + e] =
            (float)((me * 8 + j) * 1000 + call * 7 + e % 997);
    memset(out, 0xEE, (size_t)n * LATE_COUNT * sizeof(float));
    ringcc_comm_stats_t st0 = RINGCC_COMM_STATS_INIT;
    ringcc_comm_stats_t st1 = RINGCC_COMM_STATS_INIT;
    if (me == 0)
      usleep(40000);
    if (ringcc_comm_stats(h->comm, &st0) != RINGCC_SUCCESS ||
        !h_ok(h, ringcc_alltoall(in, out, LATE_COUNT, RINGCC_FLOAT32, h->comm,
                                 NULL), "alltoall") ||
        ringcc_comm_stats(h->comm, &st1) != RINGCC_SUCCESS)
      return h_fail(h, "call %d failed (above)", call);
    landed[call] = st1.landed_bytes - st0.landed_bytes;
    for (int i = 0; i < n && !bad; i++)
      for (int e = 0; e < LATE_COUNT && !bad; e++) {
        float want = (float)((i * 8 + me) * 1000 + call * 7 + e % 997);
        if (out[(size_t)i * LATE_COUNT + e] != want)
          bad = h_fail(h, "call %d: element %d of the block from rank %d is "
                       "%g, expected %g", call, e, i,
                       (double)out[(size_t)i * LATE_COUNT + e], (double)want);
      }
  }
  free(in);
  free(out);
  if (bad || me != 0)
    return bad;
  uint64_t want = (uint64_t)(n - 1) * LATE_COUNT * sizeof(float);
  char each[160] = "";
  for (int c = 0, off = 0; c < LATE_CALLS; c++)
    off += snprintf(each + off, sizeof each - (size_t)off, " %llu",
                    (unsigned long long)landed[c]);
  fprintf(stderr, "tcp late rank 0, RINGCC_NET_PARK_US=%s: bytes landed per "
          "call:%s (of %llu)\n", *must ? "1000000" : "0", each,
          (unsigned long long)want);
  for (int c = 1; c < LATE_CALLS && *must; c++)
    if (landed[c] != want)
      return h_fail(h, "parked payloads: call %d landed %llu bytes in rank "
                    "0's output, not all %llu that came before it entered "
                    "(per call:%s)", c, (unsigned long long)landed[c],
                    (unsigned long long)want, each);
  return 0;
}

static void run_late_lands(int n, int must) {
  ringcc_config_t cfg = config(RINGCC_ALGO_AUTO, 0, 1);
  setenv("RINGCC_NET_PARK_US", must ? "1000000" : "0", 1);
  h_run_opts_t o = {.nranks = n, .body = body_late_lands, .arg = &must,
                    .config = &cfg, .timeout_s = 60,
                    .name = "tcp, a late rank's payloads land"};
  int ok = h_run(&o);
  unsetenv("RINGCC_NET_PARK_US");
  cr_assert(ok, "tcp, n=%d, RINGCC_NET_PARK_US=%s: failed (above)", n,
            must ? "1000000" : "0");
}

Test(tcp, parked_payloads_land, .timeout = 200) {
  run_late_lands(3, 1);
  run_late_lands(3, 0);
}

/* ---- bad arguments ----------------------------------------------------- */

/* r must be INVALID_ARGUMENT and the last error name `word`. */
static int refused(h_ctx_t *h, ringcc_result_t r, const char *what,
                   const char *word) {
  const char *msg = ringcc_comm_last_error(h->comm);
  if (r != RINGCC_ERR_INVALID_ARGUMENT)
    return h_fail(h, "%s: got %s, not INVALID_ARGUMENT", what,
                  ringcc_strerror(r));
  if (strstr(msg, word) == NULL)
    return h_fail(h, "%s: the message does not name '%s': %s", what, word,
                  msg);
  return 0;
}

static int body_bad(h_ctx_t *h) {
  int n = h->nranks, me = h->rank, bad = 0;
  size_t counts[MAXN] = {0}, displs[MAXN] = {0}, big[MAXN] = {0};
  char buf[256];
  memset(buf, 0, sizeof(buf));
  for (int i = 0; i < n; i++)
    counts[i] = 4, displs[i] = (size_t)i * 4, big[i] = SIZE_MAX / 2;
  ringcc_comm_t c = h->comm;
  ringcc_datatype_t f = RINGCC_FLOAT32;
  /* Each rank alone: nothing is sent, so the others do not wait. */
  bad |= refused(h, ringcc_allgatherv(buf, 4, buf, NULL, displs, f, c, NULL),
                 "allgatherv NULL recvcounts", "'recvcounts'");
  bad |= refused(h, ringcc_allgatherv(buf, 4, buf, counts, NULL, f, c, NULL),
                 "allgatherv NULL displs", "'displs'");
  bad |= refused(h, ringcc_allgatherv(buf, 3, buf + 128, counts, displs, f, c,
                                      NULL),
                 "allgatherv sendcount", "'sendcount'");
  size_t overl[MAXN];
  for (int i = 0; i < n; i++)
    overl[i] = (size_t)i * 2; /* blocks of 4 every 2: overlap */
  if (n > 1)
    bad |= refused(h, ringcc_allgatherv(buf, 4, buf + 128, counts, overl, f, c,
                                        NULL),
                   "allgatherv overlapping displs", "overlap");
  bad |= refused(h, ringcc_allgatherv(buf, 4, buf, big, displs, f, c, NULL),
                 "allgatherv huge counts", "overflow");
  bad |= refused(h, ringcc_alltoallv(buf, NULL, displs, buf + 128, counts,
                                     displs, f, c, NULL),
                 "alltoallv NULL sendcounts", "'sendcounts'");
  bad |= refused(h, ringcc_alltoallv(buf, counts, displs, buf + 128, counts,
                                     NULL, f, c, NULL),
                 "alltoallv NULL rdispls", "'rdispls'");
  bad |= refused(h, ringcc_alltoallv(buf, counts, displs, buf, counts, displs,
                                     f, c, NULL),
                 "alltoallv overlapping buffers", "overlap");
  size_t other[MAXN];
  memcpy(other, counts, sizeof(other));
  other[me] = 3;
  bad |= refused(h, ringcc_alltoallv(buf, counts, displs, buf + 128, other,
                                     displs, f, c, NULL),
                 "alltoallv own block", "'sendcounts'");
  bad |= refused(h, ringcc_alltoallv(NULL, counts, displs, buf + 128, counts,
                                     displs, f, c, NULL),
                 "alltoallv NULL sendbuf", "'sendbuf'");
  bad |= refused(h, ringcc_gather(buf, buf, 4, f, n, c, NULL), "gather root",
                 "'root'");
  bad |= refused(h, ringcc_gather(NULL, buf, 4, f, 0, c, NULL),
                 "gather NULL sendbuf", "'sendbuf'");
  bad |= refused(h, ringcc_gather(buf, NULL, 4, f, me, c, NULL),
                 "gather NULL recvbuf at the root", "'recvbuf'");
  bad |= refused(h, ringcc_gather(buf, buf, SIZE_MAX / 4, f, 0, c, NULL),
                 "gather huge count", "overflow");
  if (n > 1)
    bad |= refused(h, ringcc_gather(RINGCC_IN_PLACE, buf, 4, f, (me + 1) % n,
                                    c, NULL),
                   "gather in place off the root", "root");
  bad |= refused(h, ringcc_scatter(buf, (void *)RINGCC_IN_PLACE, 4, f,
                                   (me + 1) % n == me ? n : (me + 1) % n, c,
                                   NULL),
                 "scatter in place off the root (or a bad root)",
                 n > 1 ? "root" : "'root'");
  bad |= refused(h, ringcc_scatter(buf, buf + 4, 4, f, me, c, NULL),
                 "scatter overlapping at the root", "overlap");
  bad |= refused(h, ringcc_scatter(buf, buf, 4, (ringcc_datatype_t)99, 0, c,
                                   NULL),
                 "scatter datatype", "'datatype'");
  if (bad)
    return 1;
  /* The communicator still works: a correct call of each. */
  return check_allgatherv(h, RINGCC_INT32, 77) ||
         check_alltoallv(h, RINGCC_INT32, 78) ||
         check_rooted(h, RINGCC_INT32, 79, 1) ||
         check_rooted(h, RINGCC_INT32, 80, 0);
}

Test(args, refused_and_still_usable, .timeout = 120) {
  cr_assert(h_run_simple(1, body_bad, NULL, 60));
  cr_assert(h_run_simple(3, body_bad, NULL, 60));
}
