/*
 * test_split.c - ringcc_comm_split (MPI_Comm_split semantics) and
 * ringcc_comm_split_type.
 *
 * Each rank computes, from the colors and keys every rank passes, which world
 * ranks its new communicator should hold and in what order (sorted by
 * (key, old rank)); then checks ringcc_comm_rank/size, an allgather of world
 * ranks (the order the communicator really has) and an allreduce with an
 * exact answer in the new communicator; and that the parent still works.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MAX_RANKS 16

/* A rule: the color and key each rank passes. */
typedef struct {
  const char *name;
  int (*color)(int rank, int nranks);
  int (*key)(int rank, int nranks);
} rule_t;

static int color_mod2(int r, int n) { (void)n; return r % 2; }
static int color_mod3(int r, int n) { (void)n; return r % 3; }
static int color_same(int r, int n) { (void)r; (void)n; return 7; }
static int color_halves(int r, int n) { return r < n / 2 ? 0 : 1; }
static int color_nocolor_mod3(int r, int n) {
  (void)n;
  return r % 3 == 0 ? RINGCC_SPLIT_NOCOLOR : 1 + r % 2;
}
static int key_reverse(int r, int n) { (void)n; return -r; }
static int key_zero(int r, int n) { (void)r; (void)n; return 0; }
static int key_ties(int r, int n) { (void)n; return r / 2; } /* ties: by rank */
static int key_rotate(int r, int n) { return (r + n / 2) % n * 10; }
static int key_identity(int r, int n) { (void)n; return r; }

/* The old ranks (indices into the parent) that share rank's color, in the
 * order of (key, old rank). Returns their number; 0 for NOCOLOR. */
static int expected_members(const rule_t *rule, int nranks, int rank,
                            int *members) {
  int mine = rule->color(rank, nranks);
  if (mine == RINGCC_SPLIT_NOCOLOR)
    return 0;
  int m = 0;
  for (int r = 0; r < nranks; r++)
    if (rule->color(r, nranks) == mine)
      members[m++] = r;
  /* insertion sort by (key, old rank) */
  for (int i = 1; i < m; i++) {
    int x = members[i], kx = rule->key(x, nranks), j = i - 1;
    while (j >= 0 && (rule->key(members[j], nranks) > kx ||
                      (rule->key(members[j], nranks) == kx && members[j] > x))) {
      members[j + 1] = members[j];
      j--;
    }
    members[j + 1] = x;
  }
  return m;
}

/* Checks comm against the expected world ranks (in new-rank order): rank,
 * size, allgather of world ranks, an exact allreduce. */
static int verify_comm(h_ctx_t *ctx, const char *what, ringcc_comm_t comm,
                       const int *world_members, int m) {
  int me = -1;
  for (int i = 0; i < m; i++)
    if (world_members[i] == ctx->rank)
      me = i;
  int rank = -1, size = -1;
  ringcc_result_t r1 = ringcc_comm_rank(comm, &rank);
  ringcc_result_t r2 = ringcc_comm_size(comm, &size);
  if (r1 != RINGCC_SUCCESS || r2 != RINGCC_SUCCESS)
    return h_fail(ctx, "%s: ringcc_comm_rank/size failed: %s", what,
                  ringcc_comm_last_error(comm));
  if (size != m || rank != me)
    return h_fail(ctx, "%s: rank %d of %d, expected rank %d of %d", what, rank,
                  size, me, m);
  int32_t world = ctx->rank, got[MAX_RANKS];
  for (int i = 0; i < MAX_RANKS; i++)
    got[i] = -1;
  ringcc_result_t r = ringcc_allgather(&world, got, 1, RINGCC_INT32, comm, NULL);
  if (r != RINGCC_SUCCESS)
    return h_fail(ctx, "%s: allgather returned %d (%s): %s", what, (int)r,
                  ringcc_strerror(r), ringcc_comm_last_error(comm));
  for (int i = 0; i < m; i++)
    if (got[i] != world_members[i])
      return h_fail(ctx, "%s: allgather of world ranks: position %d holds "
                         "world rank %d, expected %d", what, i, got[i],
                    world_members[i]);
  /* allreduce: element i = sum over members of (world+1)*1000 + i */
  enum { COUNT = 1031 };
  int64_t *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
  if (!in || !out)
    return h_fail(ctx, "out of memory");
  int64_t base = 0;
  for (int i = 0; i < m; i++)
    base += (world_members[i] + 1) * 1000;
  for (int i = 0; i < COUNT; i++)
    in[i] = (ctx->rank + 1) * 1000 + i;
  r = ringcc_allreduce(in, out, COUNT, RINGCC_INT64, RINGCC_SUM, comm, NULL);
  int rc = 0;
  if (r != RINGCC_SUCCESS)
    rc = h_fail(ctx, "%s: allreduce returned %d (%s): %s", what, (int)r,
                ringcc_strerror(r), ringcc_comm_last_error(comm));
  for (int i = 0; i < COUNT && rc == 0; i++)
    if (out[i] != base + (int64_t)m * i)
      rc = h_fail(ctx, "%s: allreduce int64 sum count=%d: element %d is "
                       "%lld, expected %lld", what, COUNT, i,
                  (long long)out[i], (long long)(base + (int64_t)m * i));
  free(in);
  free(out);
  return rc;
}

static int verify_world(h_ctx_t *ctx, const char *what) {
  int all[MAX_RANKS];
  for (int i = 0; i < ctx->nranks; i++)
    all[i] = i;
  return verify_comm(ctx, what, ctx->comm, all, ctx->nranks);
}

/* Splits comm (whose members are parent_world[], in comm's rank order) by
 * rule applied to ranks in comm; returns the new comm (or NULL) and fills the
 * world ranks of its members. -1 on failure. */
static int split_and_check(h_ctx_t *ctx, ringcc_comm_t comm,
                           const int *parent_world, int parent_n,
                           int my_parent_rank, const rule_t *rule,
                           const char *what, ringcc_comm_t *out,
                           int *world_members) {
  int members[MAX_RANKS];
  int m = expected_members(rule, parent_n, my_parent_rank, members);
  for (int i = 0; i < m; i++)
    world_members[i] = parent_world[members[i]];
  *out = (ringcc_comm_t)(uintptr_t)0x1; /* must be overwritten */
  ringcc_result_t r = ringcc_comm_split(comm, rule->color(my_parent_rank, parent_n),
                                        rule->key(my_parent_rank, parent_n), out);
  if (r != RINGCC_SUCCESS) {
    h_fail(ctx, "%s: ringcc_comm_split(color=%d, key=%d) returned %d (%s): %s",
           what, rule->color(my_parent_rank, parent_n),
           rule->key(my_parent_rank, parent_n), (int)r, ringcc_strerror(r),
           ringcc_comm_last_error(comm));
    return -1;
  }
  if (m == 0) {
    if (*out != NULL) {
      h_fail(ctx, "%s: RINGCC_SPLIT_NOCOLOR gave a communicator, expected "
                  "*out == NULL", what);
      return -1;
    }
    return 0;
  }
  if (*out == NULL || *out == (ringcc_comm_t)(uintptr_t)0x1) {
    h_fail(ctx, "%s: ringcc_comm_split succeeded but gave no communicator",
           what);
    return -1;
  }
  if (verify_comm(ctx, what, *out, world_members, m) != 0)
    return -1;
  return m;
}

/* ---- one split of the world ------------------------------------------------- */

static int one_split(h_ctx_t *ctx) {
  const rule_t *rule = ctx->arg;
  int world[MAX_RANKS], members[MAX_RANKS];
  for (int i = 0; i < ctx->nranks; i++)
    world[i] = i;
  char what[96];
  snprintf(what, sizeof what, "split %s (nranks=%d)", rule->name, ctx->nranks);
  ringcc_comm_t sub = NULL;
  int m = split_and_check(ctx, ctx->comm, world, ctx->nranks, ctx->rank, rule,
                          what, &sub, members);
  if (m < 0)
    return 1;
  /* Parent and child used alternately. */
  int rc = verify_world(ctx, "the parent after the split");
  if (rc == 0 && sub != NULL)
    rc = verify_comm(ctx, what, sub, members, m);
  if (sub != NULL) {
    ringcc_result_t r = ringcc_comm_destroy(sub);
    if (r != RINGCC_SUCCESS)
      rc = h_fail(ctx, "%s: ringcc_comm_destroy returned %d (%s)", what,
                  (int)r, ringcc_strerror(r));
  }
  if (rc == 0)
    rc = verify_world(ctx, "the parent after destroying the split");
  return rc;
}

static const rule_t rule_mod2_reverse = {"color r%2, key -r", color_mod2,
                                         key_reverse};
static const rule_t rule_mod3_reverse = {"color r%3, key -r", color_mod3,
                                         key_reverse};
static const rule_t rule_mod3_ties = {"color r%3, key r/2", color_mod3,
                                      key_ties};
static const rule_t rule_same_rotate = {"one color, rotated keys", color_same,
                                        key_rotate};
static const rule_t rule_same_zero = {"one color, key 0", color_same, key_zero};
static const rule_t rule_nocolor = {"NOCOLOR for r%3==0", color_nocolor_mod3,
                                    key_reverse};

static void run(int nranks, h_body_fn body, const void *arg, bool threads) {
  h_run_opts_t o = {.nranks = nranks, .body = body, .arg = (void *)arg,
                    .timeout_s = 60, .threads = threads, .name = "split"};
  cr_assert(h_run(&o), "see the lines above");
}

Test(split, mod2_reverse_n5, .timeout = 90) { run(5, one_split, &rule_mod2_reverse, false); }
Test(split, mod2_reverse_n6, .timeout = 90) { run(6, one_split, &rule_mod2_reverse, false); }
Test(split, mod3_reverse_n7, .timeout = 90) { run(7, one_split, &rule_mod3_reverse, false); }
Test(split, mod3_key_ties_n6, .timeout = 90) { run(6, one_split, &rule_mod3_ties, false); }
Test(split, one_color_rotated_keys_n5, .timeout = 90) {
  run(5, one_split, &rule_same_rotate, false);
}
Test(split, one_color_key0_n4, .timeout = 90) { run(4, one_split, &rule_same_zero, false); }
Test(split, nocolor_n6, .timeout = 90) { run(6, one_split, &rule_nocolor, false); }
Test(split, single_rank, .timeout = 90) { run(1, one_split, &rule_mod2_reverse, false); }
Test(split, threads_mod2_reverse_n4, .timeout = 90) {
  run(4, one_split, &rule_mod2_reverse, true);
}

/* ---- splits of splits, several alive at once ---------------------------------- */

static int nested(h_ctx_t *ctx) {
  int n = ctx->nranks, me = ctx->rank;
  int world[MAX_RANKS];
  for (int i = 0; i < n; i++)
    world[i] = i;
  static const rule_t by_parity = {"color r%2, key r", color_mod2, key_identity};
  static const rule_t by_half = {"halves, key -r", color_halves, key_reverse};
  static const rule_t sub_rule = {"color r%2, key -r", color_mod2, key_reverse};
  static const rule_t sub_sub_rule = {"one color, rotated", color_same,
                                      key_rotate};
  ringcc_comm_t a = NULL, b = NULL, c = NULL, d = NULL;
  int am[MAX_RANKS], bm[MAX_RANKS], cm[MAX_RANKS], dm[MAX_RANKS];
  int rc = 1;
  /* a: parity; b: halves (overlapping a, alive at the same time) */
  int na = split_and_check(ctx, ctx->comm, world, n, me, &by_parity,
                           "nested: a = split(world, r%2)", &a, am);
  if (na <= 0)
    goto out;
  int nb = split_and_check(ctx, ctx->comm, world, n, me, &by_half,
                           "nested: b = split(world, halves)", &b, bm);
  if (nb <= 0)
    goto out;
  /* c: a split of a (by rank in a); d: a split of c. */
  int a_rank = -1;
  ringcc_comm_rank(a, &a_rank);
  int nc = split_and_check(ctx, a, am, na, a_rank, &sub_rule,
                           "nested: c = split(a, rank_in_a%2)", &c, cm);
  if (nc <= 0)
    goto out;
  int c_rank = -1;
  ringcc_comm_rank(c, &c_rank);
  int nd = split_and_check(ctx, c, cm, nc, c_rank, &sub_sub_rule,
                           "nested: d = split(c, one color)", &d, dm);
  if (nd <= 0)
    goto out;
  /* All alive: use them alternately, twice. */
  for (int round = 0; round < 2; round++) {
    if (verify_comm(ctx, "nested: world again", ctx->comm, world, n) ||
        verify_comm(ctx, "nested: d again", d, dm, nd) ||
        verify_comm(ctx, "nested: a again", a, am, na) ||
        verify_comm(ctx, "nested: c again", c, cm, nc) ||
        verify_comm(ctx, "nested: b again", b, bm, nb))
      goto out;
  }
  rc = 0;
out:
  /* Destroy the parents first: children must not depend on them. */
  if (a)
    ringcc_comm_destroy(a);
  if (rc == 0 && verify_comm(ctx, "nested: c after destroying a", c, cm, nc))
    rc = 1;
  if (c)
    ringcc_comm_destroy(c);
  if (rc == 0 && verify_comm(ctx, "nested: d after destroying c", d, dm, nd))
    rc = 1;
  if (d)
    ringcc_comm_destroy(d);
  if (b)
    ringcc_comm_destroy(b);
  return rc;
}

Test(split, nested_n8, .timeout = 90) { run(8, nested, NULL, false); }
Test(split, nested_n5, .timeout = 90) { run(5, nested, NULL, false); }

/* ---- split_type ------------------------------------------------------------- */

typedef struct {
  int key_kind; /* 0: key 0, 1: key -r */
} split_type_arg_t;

static int split_type(h_ctx_t *ctx) {
  const split_type_arg_t *a = ctx->arg;
  int n = ctx->nranks, members[MAX_RANKS];
  /* Every rank is on this host: one communicator of all ranks. */
  for (int i = 0; i < n; i++)
    members[i] = a->key_kind ? n - 1 - i : i;
  int key = a->key_kind ? -ctx->rank : 0;
  ringcc_comm_t host = NULL;
  ringcc_result_t r = ringcc_comm_split_type(ctx->comm, RINGCC_SPLIT_HOST, key,
                                             &host);
  if (r != RINGCC_SUCCESS || host == NULL)
    return h_fail(ctx, "ringcc_comm_split_type(HOST, key=%d) returned %d (%s), "
                       "comm %p: %s", key, (int)r, ringcc_strerror(r),
                  (void *)host, ringcc_comm_last_error(ctx->comm));
  char what[64];
  snprintf(what, sizeof what, "split_type HOST key=%s (nranks=%d)",
           a->key_kind ? "-r" : "0", n);
  int rc = verify_comm(ctx, what, host, members, n);
  if (rc == 0)
    rc = verify_world(ctx, "the parent after split_type");
  ringcc_comm_destroy(host);
  return rc;
}

static const split_type_arg_t key0 = {0}, key_rev = {1};
Test(split_type, host_key0_n4, .timeout = 60) { run(4, split_type, &key0, false); }
Test(split_type, host_reverse_n5, .timeout = 60) {
  run(5, split_type, &key_rev, false);
}
Test(split_type, host_n1, .timeout = 60) { run(1, split_type, &key_rev, false); }
