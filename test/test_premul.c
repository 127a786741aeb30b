/*
 * test_premul.c - premul-sum ops (ringcc_op_create_premul_sum,
 * ringcc_op_destroy), run by real ranks, every element checked.
 *
 * For n = 1..8 and each algorithm that reduces (the tuner's choice, ring,
 * tree, one-shot, recursive doubling, Rabenseifner, cma, zero-copy on
 * registered buffers): allreduce (out of place, NCCL and MPI in place),
 * reduce (every root at small n) and reduce_scatter (out of place and NCCL
 * in place) over every datatype, counts 0, 1, 13 and 4099, and 70000 for
 * the types of 4 and 8 bytes (from 256 KiB: cma's sizes).
 *
 * The inputs make the answer exact whatever the order of the sum, while
 * the multiply must round: element i is nonzero on two ranks only (one for
 * n = 1), values with every mantissa bit in use, and a scalar that is not a
 * power of two (0.7 rounded to the datatype; 3 or -3 for integers). The
 * expected value is R(R(x_a * s) + R(x_b * s)), where R rounds to the
 * datatype by the harness's own conversions (to nearest even): each input
 * multiplied once and rounded once, then the sum rounded once. A library
 * that summed first and multiplied after would differ in most elements.
 * Then the ops' life: bad ops, destroyed ops, other datatypes and other
 * communicators are refused naming 'op', and the communicator stays usable.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* ---- values and the reference ------------------------------------------ */

static bool is_int(ringcc_datatype_t dt) { return !h_dt_is_float(dt); }

/* Rounds x to dt (nearest even) and stores it. Floats: x must be exact in
 * float for the 16-bit types (products and sums of the inputs below are). */
static void store(ringcc_datatype_t dt, double x, void *p) {
  switch (dt) {
  case RINGCC_FLOAT16: { uint16_t v = h_float_to_half((float)x); memcpy(p, &v, 2); break; }
  case RINGCC_BFLOAT16: { uint16_t v = h_float_to_bf16((float)x); memcpy(p, &v, 2); break; }
  case RINGCC_FLOAT32: { float v = (float)x; memcpy(p, &v, 4); break; }
  case RINGCC_FLOAT64: memcpy(p, &x, 8); break;
  case RINGCC_FLOAT8_E4M3:
  case RINGCC_FLOAT8_E5M2: *(uint8_t *)p = h_fp8_code(dt, x); break;
  default: break;
  }
}

static double load(ringcc_datatype_t dt, const void *p) {
  uint16_t h;
  float f;
  double d;
  switch (dt) {
  case RINGCC_FLOAT16: memcpy(&h, p, 2); return h_half_to_float(h);
  case RINGCC_BFLOAT16: memcpy(&h, p, 2); return h_bf16_to_float(h);
  case RINGCC_FLOAT32: memcpy(&f, p, 4); return f;
  case RINGCC_FLOAT64: memcpy(&d, p, 8); return d;
  case RINGCC_FLOAT8_E4M3:
  case RINGCC_FLOAT8_E5M2: return h_fp8_value(dt, *(const uint8_t *)p);
  default: return 0;
  }
}

/* Integers as their low bits (wrap-around arithmetic). */
static uint64_t load_bits(ringcc_datatype_t dt, const void *p) {
  uint64_t v = 0;
  memcpy(&v, p, h_dt_size(dt)); /* little-endian */
  return v;
}
static void store_bits(ringcc_datatype_t dt, uint64_t v, void *p) {
  memcpy(p, &v, h_dt_size(dt));
}

/* The two ranks with a nonzero element i (the same rank twice at n = 1,
 * where only one contribution exists). */
static void contributors(size_t i, int n, int *a, int *b) {
  *a = (int)(i % (size_t)n);
  *b = n == 1 ? *a : (*a + 1 + (int)((i / (size_t)n) % (size_t)(n - 1))) % n;
}

/* A value of dt using all its mantissa bits, |x| in [0.25, 16). */
static void value(ringcc_datatype_t dt, size_t i, int rank, uint64_t salt,
                  void *p) {
  uint64_t h = h_hash3(i, (uint64_t)rank, salt);
  if (is_int(dt)) {
    store_bits(dt, h_mix64(h), p);
    return;
  }
  double u = (double)(h >> 11) * 0x1p-53; /* [0, 1) */
  double x = (1.0 + u) * ldexp(1.0, (int)((h >> 3) % 6) - 2);
  store(dt, (h & 1) ? -x : x, p);
}

static void input(ringcc_datatype_t dt, size_t i, int rank, int n,
                  uint64_t salt, void *p) {
  int a, b;
  contributors(i, n, &a, &b);
  memset(p, 0, h_dt_size(dt));
  if (rank == a || rank == b)
    value(dt, i, rank, salt, p);
}

static void scalar_of(ringcc_datatype_t dt, void *p) {
  if (is_int(dt))
    store_bits(dt, dt == RINGCC_INT8 || dt == RINGCC_INT32 ||
                           dt == RINGCC_INT64 ? (uint64_t)-3 : 3, p);
  else
    store(dt, dt == RINGCC_FLOAT64 ? 0.7 : (double)(float)0.7, p);
}

/* R(x * s): in double, exact for every type but float64, whose product is
 * the one rounding IEEE multiplication does. */
static void product(ringcc_datatype_t dt, const void *x, const void *s,
                    void *out) {
  if (is_int(dt))
    store_bits(dt, load_bits(dt, x) * load_bits(dt, s), out);
  else
    store(dt, load(dt, x) * load(dt, s), out);
}

static void expected(ringcc_datatype_t dt, size_t i, int n, uint64_t salt,
                     const void *s, void *out) {
  int a, b;
  unsigned char xa[8], xb[8], pa[8], pb[8];
  contributors(i, n, &a, &b);
  value(dt, i, a, salt, xa);
  product(dt, xa, s, pa);
  if (a == b) {
    memcpy(out, pa, h_dt_size(dt));
    return;
  }
  value(dt, i, b, salt, xb);
  product(dt, xb, s, pb);
  if (is_int(dt))
    store_bits(dt, load_bits(dt, pa) + load_bits(dt, pb), out);
  else
    store(dt, load(dt, pa) + load(dt, pb), out);
}

/* ---- the cases ------------------------------------------------------------ */

enum { K_ALLREDUCE, K_ALLREDUCE_NCCL, K_ALLREDUCE_MPI, K_REDUCE,
       K_REDUCE_SCATTER, K_REDUCE_SCATTER_NCCL, K_NUM };
static const char *const kind_names[K_NUM] = {
    "allreduce", "allreduce(in-place nccl)", "allreduce(in-place mpi)",
    "reduce", "reduce_scatter", "reduce_scatter(in-place nccl)"};

static const size_t counts[] = {0, 1, 13, 4099, 70000};

/* Buffers: malloc, or a registered region (zero-copy) cut in two. */
struct bufs {
  unsigned char *send, *recv;
  void *mem;
  ringcc_reg_t reg;
};

static bool bufs_make(h_ctx_t *h, bool registered, size_t bytes,
                      struct bufs *b) {
  memset(b, 0, sizeof *b);
  size_t half = (bytes + 4095) & ~(size_t)4095;
  if (!registered) {
    b->send = h_xmalloc(half);
    b->recv = h_xmalloc(half);
    return true;
  }
  if (!h_ok(h, ringcc_mem_alloc(NULL, 2 * half, &b->mem), "ringcc_mem_alloc"))
    return false;
  b->send = b->mem;
  b->recv = (unsigned char *)b->mem + half;
  return h_ok(h, ringcc_comm_register(h->comm, b->mem, 2 * half, &b->reg),
              "ringcc_comm_register");
}

static bool bufs_drop(h_ctx_t *h, struct bufs *b) {
  if (b->mem == NULL) {
    free(b->send);
    free(b->recv);
    return true;
  }
  bool ok = h_ok(h, ringcc_comm_deregister(h->comm, b->reg),
                 "ringcc_comm_deregister");
  return h_ok(h, ringcc_mem_free(b->mem), "ringcc_mem_free") && ok;
}

static ringcc_result_t call(h_ctx_t *h, int kind, const struct bufs *b,
                            size_t count, ringcc_datatype_t dt, ringcc_op_t op,
                            int root) {
  size_t es = h_dt_size(dt);
  switch (kind) {
  case K_ALLREDUCE:
    return ringcc_allreduce(b->send, b->recv, count, dt, op, h->comm, NULL);
  case K_ALLREDUCE_NCCL:
    return ringcc_allreduce(b->recv, b->recv, count, dt, op, h->comm, NULL);
  case K_ALLREDUCE_MPI:
    return ringcc_allreduce(RINGCC_IN_PLACE, b->recv, count, dt, op, h->comm,
                            NULL);
  case K_REDUCE:
    return ringcc_reduce(b->send, b->recv, count, dt, op, root, h->comm, NULL);
  case K_REDUCE_SCATTER:
    return ringcc_reduce_scatter(b->send, b->recv, count, dt, op, h->comm,
                                 NULL);
  default: /* the output inside the input, at this rank's block */
    return ringcc_reduce_scatter(b->recv, b->recv + (size_t)h->rank * count * es,
                                 count, dt, op, h->comm, NULL);
  }
}

/* One case on this rank: fill, call, check every element of the output. */
static int run_case(h_ctx_t *h, int kind, ringcc_datatype_t dt, size_t count,
                    int root, const struct bufs *b, uint64_t salt) {
  int n = h->nranks;
  size_t es = h_dt_size(dt);
  bool rs = kind == K_REDUCE_SCATTER || kind == K_REDUCE_SCATTER_NCCL;
  size_t in_elems = rs ? count * (size_t)n : count;
  bool in_recv = kind == K_ALLREDUCE_NCCL || kind == K_ALLREDUCE_MPI ||
                 kind == K_REDUCE_SCATTER_NCCL;
  unsigned char *in = in_recv ? b->recv : b->send, s[8], want[8];
  for (size_t i = 0; i < in_elems; i++)
    input(dt, i, h->rank, n, salt, in + i * es);
  scalar_of(dt, s);
  ringcc_op_t op;
  if (!h_ok(h, ringcc_op_create_premul_sum(&op, s, dt, h->comm),
            "ringcc_op_create_premul_sum"))
    return 1;
  memset(s, 0x5a, sizeof s); /* read at create: this changes nothing */
  ringcc_result_t r = call(h, kind, b, count, dt, op, root);
  char what[96];
  snprintf(what, sizeof what, "%s %s count %zu", kind_names[kind],
           h_dt_name(dt), count);
  if (!h_ok(h, r, what))
    return 1;
  if (!h_ok(h, ringcc_op_destroy(op, h->comm), "ringcc_op_destroy"))
    return 1;
  if (kind == K_REDUCE && h->rank != root)
    return 0;
  scalar_of(dt, s);
  size_t first = rs ? (size_t)h->rank * count : 0;
  const unsigned char *out = kind == K_REDUCE_SCATTER_NCCL
                                 ? b->recv + first * es : b->recv;
  for (size_t j = 0; j < count; j++) {
    expected(dt, first + j, n, salt, s, want);
    if (memcmp(out + j * es, want, es) != 0)
      return h_fail(h, "%s: element %zu is %g (bits %llx), expected %g "
                    "(bits %llx)", what, first + j,
                    is_int(dt) ? (double)load_bits(dt, out + j * es)
                               : load(dt, out + j * es),
                    (unsigned long long)load_bits(dt, out + j * es),
                    is_int(dt) ? (double)load_bits(dt, want) : load(dt, want),
                    (unsigned long long)load_bits(dt, want));
  }
  return 0;
}

static int body_every_case(h_ctx_t *h) {
  bool registered = h->config && h->config->algo == RINGCC_ALGO_ZEROCOPY;
  size_t max = counts[sizeof counts / sizeof counts[0] - 1];
  struct bufs b;
  if (!bufs_make(h, registered, max * 8 * (size_t)h->nranks, &b))
    return 1;
  int bad = 0;
  uint64_t salt = 1;
  for (int d = 0; d < RINGCC_NUM_DATATYPES && !bad; d++)
    for (int k = 0; k < K_NUM && !bad; k++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0] && !bad; c++) {
        if (counts[c] > 4099 && h_dt_size(h_all_dtypes[d]) < 4)
          continue; /* large counts (cma, several chunks): the wider types */
        int roots = k == K_REDUCE && h->nranks <= 4 ? h->nranks : 1;
        for (int root = 0; root < roots && !bad; root++)
          bad = run_case(h, k, h_all_dtypes[d], counts[c],
                         roots == 1 ? (int)(c % (size_t)h->nranks) : root, &b,
                         salt++);
      }
  return bufs_drop(h, &b) ? bad : 1;
}

static const struct {
  ringcc_algo_t algo;
  const char *name;
} algos[] = {
    {RINGCC_ALGO_AUTO, "auto"},       {RINGCC_ALGO_RING, "ring"},
    {RINGCC_ALGO_TREE, "tree"},       {RINGCC_ALGO_ONESHOT, "oneshot"},
    {RINGCC_ALGO_RECDOUBLING, "recdoubling"},
    {RINGCC_ALGO_RABENSEIFNER, "rabenseifner"},
    {RINGCC_ALGO_CMA, "cma"},         {RINGCC_ALGO_ZEROCOPY, "zerocopy"},
};

static void every_algorithm(int nranks) {
  for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
    if (nranks == 1 && a > 0)
      break; /* one rank runs no algorithm */
    ringcc_config_t cfg = RINGCC_CONFIG_INIT;
    cfg.algo = algos[a].algo;
    char name[64];
    snprintf(name, sizeof name, "premul n=%d algo=%s", nranks, algos[a].name);
    h_run_opts_t o = {.nranks = nranks, .body = body_every_case,
                      .config = &cfg, .timeout_s = 120, .name = name};
    cr_assert(h_run(&o), "%s failed (see the rank's line above)", name);
  }
}

Test(premul, n1, .timeout = 300) { every_algorithm(1); }
Test(premul, n2, .timeout = 300) { every_algorithm(2); }
Test(premul, n3, .timeout = 300) { every_algorithm(3); }
Test(premul, n4, .timeout = 300) { every_algorithm(4); }
Test(premul, n5, .timeout = 300) { every_algorithm(5); }
Test(premul, n6, .timeout = 300) { every_algorithm(6); }
Test(premul, n7, .timeout = 300) { every_algorithm(7); }
Test(premul, n8, .timeout = 300) { every_algorithm(8); }

/* ---- the ops' life ----------------------------------------------------- */

/* code and a last error that names 'op'. */
static int refused(h_ctx_t *h, ringcc_comm_t comm, ringcc_result_t r,
                   const char *what) {
  const char *msg = ringcc_comm_last_error(comm);
  if (r != RINGCC_ERR_INVALID_ARGUMENT)
    return h_fail(h, "%s returned %d (%s), expected INVALID_ARGUMENT", what,
                  (int)r, ringcc_strerror(r));
  if (strstr(msg, "'op'") == NULL)
    return h_fail(h, "%s: the message does not name 'op': %s", what, msg);
  return 0;
}

static int body_bad_ops(h_ctx_t *h) {
  ringcc_comm_t comm = h->comm;
  float s = 2.0f, x[4] = {1, 2, 3, 4}, y[4];
  ringcc_op_t op, op2, other;
  int bad = 0;
  if (!h_ok(h, ringcc_op_create_premul_sum(&op, &s, RINGCC_FLOAT32, comm),
            "create") ||
      !h_ok(h, ringcc_op_create_premul_sum(&op2, &s, RINGCC_FLOAT32, comm),
            "create a second"))
    return 1;
  if (op == op2 || (int)op < RINGCC_NUM_OPS)
    return h_fail(h, "ops %d and %d: not distinct values past the built-ins",
                  (int)op, (int)op2);
  bad |= refused(h, comm, ringcc_allreduce(x, y, 4, RINGCC_FLOAT64, op, comm,
                                           NULL), "an op of float32 on float64");
  bad |= refused(h, comm, ringcc_allreduce(x, y, 4, RINGCC_FLOAT32,
                                           (ringcc_op_t)(op2 + 1000), comm,
                                           NULL), "an op never made");
  bad |= refused(h, comm, ringcc_allreduce(x, y, 4, RINGCC_FLOAT32,
                                           (ringcc_op_t)-1, comm, NULL),
                 "op -1");
  bad |= refused(h, comm, ringcc_op_destroy(RINGCC_SUM, comm),
                 "destroying RINGCC_SUM");
  if (!h_ok(h, ringcc_op_destroy(op, comm), "destroy"))
    return 1;
  bad |= refused(h, comm, ringcc_op_destroy(op, comm), "destroying twice");
  bad |= refused(h, comm, ringcc_reduce(x, y, 4, RINGCC_FLOAT32, op, 0, comm,
                                        NULL), "a destroyed op in reduce");
  /* another communicator's op */
  ringcc_comm_t half;
  if (!h_ok(h, ringcc_comm_split(comm, 0, h->rank, &half), "split"))
    return 1;
  if (!h_ok(h, ringcc_op_create_premul_sum(&other, &s, RINGCC_FLOAT32, half),
            "create on the split"))
    return 1;
  /* numbers count per communicator: the split's first is the parent's
   * first, destroyed there */
  if (other != op)
    bad |= h_fail(h, "the split's first op is %d, the parent's was %d",
                  (int)other, (int)op);
  bad |= refused(h, comm, ringcc_allreduce(x, y, 4, RINGCC_FLOAT32, other,
                                           comm, NULL),
                 "the split's op on the parent");
  bad |= refused(h, comm, ringcc_op_create_premul_sum(NULL, &s,
                                                      RINGCC_FLOAT32, comm),
                 "create with op NULL");
  if (ringcc_op_create_premul_sum(&op, NULL, RINGCC_FLOAT32, comm) !=
          RINGCC_ERR_INVALID_ARGUMENT ||
      strstr(ringcc_comm_last_error(comm), "'scalar'") == NULL)
    bad |= h_fail(h, "create with scalar NULL: %s",
                  ringcc_comm_last_error(comm));
  if (ringcc_op_create_premul_sum(&op, &s, (ringcc_datatype_t)99, comm) !=
          RINGCC_ERR_INVALID_ARGUMENT ||
      strstr(ringcc_comm_last_error(comm), "'datatype'") == NULL)
    bad |= h_fail(h, "create with datatype 99: %s",
                  ringcc_comm_last_error(comm));
  /* the communicator still works, with the op left alive */
  if (!h_ok(h, ringcc_allreduce(x, y, 4, RINGCC_FLOAT32, op2, comm, NULL),
            "allreduce after the refusals"))
    return 1;
  for (int i = 0; i < 4; i++)
    if (y[i] != 2.0f * x[i] * (float)h->nranks)
      bad |= h_fail(h, "y[%d] = %g, expected %g", i, y[i],
                    2.0f * x[i] * (float)h->nranks);
  bad |= !h_ok(h, ringcc_comm_destroy(half), "destroy the split");
  return bad; /* op2 is freed with the communicator */
}

Test(premul, bad_ops, .timeout = 60) {
  cr_assert(h_run_simple(3, body_bad_ops, NULL, 30));
}
