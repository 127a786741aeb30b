/*
 * harness.h - run a test body as N real ranks, and the exact-input helpers
 * the collective tests share.
 *
 * h_run() forks N processes (or starts N threads): rank r joins a
 * communicator made from one ringcc_get_unique_id() of the parent, runs the
 * body, destroys the communicator and reports 0 (success) or nonzero. The
 * parent forks every rank before it calls ringcc_get_unique_id (whose
 * rendezvous thread must not be running at a fork: its locks would be
 * inherited held) and passes the id through shared memory. A body
 * never uses Criterion asserts (they do not work in forked children); it
 * prints one precise line with h_fail() and returns nonzero. The parent
 * waits with a deadline, kills every rank still running when it passes (or a
 * few seconds after the first rank failed) and says which ranks were stuck.
 *
 * Exact inputs (as nccl-tests does): h_input() chooses small integers, scaled
 * by a power of two for floating types, so that every partial result of
 * every reduction order is exactly representable; h_expected() computes the
 * answer with scalar code that shares nothing with the library.
 */
#ifndef RCC_TEST_HARNESS_H
#define RCC_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

/* ---- running ranks ----------------------------------------------------- */

typedef struct h_ctx {
  ringcc_comm_t comm; /* NULL when the run has skip_init */
  int rank;
  int nranks;
  void *arg;                          /* h_run_opts_t.arg */
  const ringcc_unique_id_t *id;       /* the id comm was made from */
  const ringcc_unique_id_t *extra_ids; /* h_run_opts_t.n_extra_ids more ids */
  int n_extra_ids;
  const ringcc_config_t *config; /* what comm was made with (may be NULL) */
  bool is_thread;                /* ranks are threads of one process */
} h_ctx_t;

/* Returns 0 on success; nonzero after printing why with h_fail(). */
typedef int (*h_body_fn)(h_ctx_t *ctx);

typedef struct {
  int nranks;
  h_body_fn body;
  void *arg;
  const ringcc_config_t *config; /* for ringcc_comm_init; NULL: defaults */
  double timeout_s;              /* whole run; 0: 60 s */
  bool threads;                  /* ranks as threads of this process */
  bool skip_init;                /* the body makes (or fails to make) comms */
  bool no_id;                    /* don't call ringcc_get_unique_id */
  int n_extra_ids;               /* more ids for more communicators (<= 4) */
  const char *name;              /* printed with failures; may be NULL */
  /* Non-NULL: when ringcc_comm_init returns RINGCC_ERR_UNSUPPORTED on every
   * rank, h_run sets *unsupported (and returns false) so that the test can
   * skip; the reason is in unsupported_why. */
  bool *unsupported;
  char *unsupported_why;
  size_t unsupported_why_len;
} h_run_opts_t;

/* The exit status of a rank whose ringcc_comm_init said "unsupported". */
#define H_EXIT_UNSUPPORTED 77

#define H_MAX_EXTRA_IDS 4

/* Runs the ranks; true when every rank reported success. */
bool h_run(const h_run_opts_t *opts);
/* The common case: processes, default config. */
bool h_run_simple(int nranks, h_body_fn body, void *arg, double timeout_s);

/* Prints "rank R: <message>" on one line to stderr; returns 1. */
int h_fail(const h_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same for code that has only a rank number. */
int h_fail_rank(int rank, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Checks a ringcc call: on failure prints what, the code and last error of
 * comm (or of NULL) and returns false. */
bool h_ok(const h_ctx_t *ctx, ringcc_result_t r, const char *what);

/* Shared memory (MAP_SHARED | MAP_ANONYMOUS, zeroed) that children write and
 * the parent reads after they exit. Allocate before h_run. */
/* malloc that aborts with a message when out of memory (0 bytes: 1). */
void *h_xmalloc(size_t bytes);
void *h_shared_alloc(size_t bytes);
void h_shared_free(void *p, size_t bytes);

double h_now_s(void); /* CLOCK_MONOTONIC seconds */
void h_sleep_ms(int ms);

/* ---- float16 / bfloat16 (independent of the library) ------------------- */
uint16_t h_float_to_half(float f); /* round to nearest even */
float h_half_to_float(uint16_t h);
uint16_t h_float_to_bf16(float f); /* round to nearest even */
float h_bf16_to_float(uint16_t h);
/* float8 (RINGCC_FLOAT8_E4M3 or _E5M2): the value of a code (NaN for NaN
 * codes), and the code of a value: the nearest of the finite codes, a tie
 * to the even code; above the largest finite value e4m3 saturates (+-448)
 * and e5m2 gives +-Inf from the midpoint to 2^16 on. */
double h_fp8_value(ringcc_datatype_t dt, uint8_t code);
uint8_t h_fp8_code(ringcc_datatype_t dt, double x);

/* ---- datatypes, values, exact inputs ------------------------------------ */

extern const ringcc_datatype_t h_all_dtypes[RINGCC_NUM_DATATYPES];
extern const ringcc_op_t h_all_ops[RINGCC_NUM_OPS];

size_t h_dt_size(ringcc_datatype_t dt);
const char *h_dt_name(ringcc_datatype_t dt);
const char *h_op_name(ringcc_op_t op);
bool h_dt_is_float(ringcc_datatype_t dt);

uint64_t h_mix64(uint64_t x); /* splitmix64 finaliser */
uint64_t h_hash3(uint64_t a, uint64_t b, uint64_t c);
/* FNV-1a over bytes. */
uint64_t h_hash_bytes(const void *p, size_t n);

/* The exact input of element idx on rank for (dt, op): small integers with a
 * known exact result in any reduction order. salt varies the data by case. */
void h_input_store(ringcc_datatype_t dt, ringcc_op_t op, int rank,
                   size_t idx, uint64_t salt, void *elem);
/* Fills buf[0..count) with the inputs of elements first_idx..first_idx+count. */
void h_fill_input(ringcc_datatype_t dt, ringcc_op_t op, int rank,
                  size_t first_idx, uint64_t salt, void *buf, size_t count);
/* The exact result over ranks 0..nranks-1 of element idx. */
void h_expected_store(ringcc_datatype_t dt, ringcc_op_t op, int nranks,
                      size_t idx, uint64_t salt, void *elem);
void h_fill_expected(ringcc_datatype_t dt, ringcc_op_t op, int nranks,
                     size_t first_idx, uint64_t salt, void *buf, size_t count);

/* Raw bytes for data-movement collectives: element idx of "owner" (a rank,
 * or any tag), distinct per owner and index. */
void h_fill_pattern(ringcc_datatype_t dt, uint64_t owner, size_t first_idx,
                    uint64_t salt, void *buf, size_t count);

/* Formats one element ("5", "-0.25 (0xb400)") into out. */
const char *h_format_elem(ringcc_datatype_t dt, const void *elem, char *out,
                          size_t len);

/* Compares count elements bitwise; on the first difference prints
 * "rank R: <what>: element I is X, expected Y (N elements differ)" and
 * returns false. */
bool h_check_elems(const h_ctx_t *ctx, const char *what, ringcc_datatype_t dt,
                   const void *got, const void *expected, size_t count);

/* ---- guarded buffers ---------------------------------------------------- */
/* A buffer with H_GUARD bytes of a known pattern before and after it, to see
 * writes outside the result. */
#define H_GUARD 64
typedef struct {
  unsigned char *base;
  unsigned char *p; /* the usable bytes */
  size_t bytes;
} h_buf_t;

bool h_buf_alloc(h_buf_t *b, size_t bytes);
void h_buf_free(h_buf_t *b);
/* Fills the usable bytes with a pattern of (tag, byte index) and re-arms the
 * guards. */
void h_buf_scribble(h_buf_t *b, uint64_t tag);
/* true when the guards are intact; else prints which byte changed. */
bool h_buf_guards_ok(const h_ctx_t *ctx, const char *what, const h_buf_t *b);
/* true when bytes [off, off+len) still hold the h_buf_scribble(tag) pattern. */
bool h_buf_scribble_ok(const h_ctx_t *ctx, const char *what, const h_buf_t *b,
                       uint64_t tag, size_t off, size_t len);

/* Yama's ptrace_scope: 0 without Yama; 2 or 3 (or unreadable: 3) where a
 * rank cannot read a sibling's memory, so cross-memory attach cannot run. */
int h_yama_scope(void);
/* Sockets this process has open (its descriptors 0..4095 in /proc/self/fd
 * that are sockets): what a call added, counted before and after. */
int h_count_sockets(void);

/* bytes of host memory: from ringcc_mem_alloc and registered on ctx->comm
 * where registered (every rank registers in the same order), else malloc'd
 * (*reg NULL). NULL after h_fail on failure. */
void *h_reg_alloc(h_ctx_t *ctx, size_t bytes, bool registered,
                  ringcc_reg_t *reg);
/* Frees what h_reg_alloc gave (deregistering it): 0, or 1 after h_fail. */
int h_reg_free(h_ctx_t *ctx, void *p, ringcc_reg_t reg);

/* Calls of coll ("send", "gather", ...) that comm's statistics count under
 * the algorithm alg (ringcc_comm_stats' rows); UINT64_MAX if it fails. */
uint64_t h_calls_by(ringcc_comm_t comm, const char *coll, const char *alg);

#endif /* RCC_TEST_HARNESS_H */
