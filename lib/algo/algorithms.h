/*
 * algorithms.h - the table of algorithms: every way libringcc can run a
 * collective, with its one name, the RINGCC_ALGO setting that forces it,
 * the schedule that plans it and the executor that runs it, its cost terms,
 * and when it can run (algorithms.c). The tuner, the forced choice,
 * ringcc-model, the logs and the hang report all read this one table.
 *
 * Two choices make an algorithm: a schedule (sched: a file of lib/algo/ on
 * the list RCC_SCHEDULES, schedule.h, which opens with its steps and its
 * cost) and an executor (exec: who runs it). The FIFO executors
 * (exec_host.c, exec_cuda.cu) run any schedule and know nothing of
 * algorithms; the others run one thing each: the one-shot board runs the
 * one-shot schedule over shared memory (exec_board.c), cross-memory attach
 * (exec_cma.c) and zero-copy on registered buffers (exec_zc.c) have no
 * schedule of steps.
 */
#ifndef RCC_ALGORITHMS_H
#define RCC_ALGORITHMS_H

#include <math.h>
#include <stddef.h>

#include "ringcc.h"
#include "link.h"
#include "schedule.h"

/* The terms of one algorithm for one call: its time is
 *   T = alpha_count * alpha + beta_bytes * beta + gamma_bytes * gamma
 * (tuner.h prices them). */
struct rcc_cost_terms {
  double alpha_count; /* message latencies on the critical path */
  double beta_bytes;  /* bytes moved over one edge on the critical path */
  double gamma_bytes; /* bytes reduced on the critical path */
  double bytes_sent;  /* bytes the busiest rank sends */
  double footprint_bytes; /* bytes all ranks' buffers span together */
};

/* The executor that runs an algorithm. */
enum rcc_exec_kind {
  RCC_EXEC_FIFO,  /* its schedule's steps over the FIFOs (host or CUDA
                     executor) */
  RCC_EXEC_BOARD, /* its schedule (one-shot) on the board in shared memory
                     (exec_host.c) */
  RCC_EXEC_CMA,   /* cross-memory attach (exec_cma.c) */
  RCC_EXEC_ZC,    /* registered buffers in place (exec_zc.c); where some
                     rank's buffers turn out not to be registered, every
                     rank runs the tuner's unregistered choice instead */
};

/* What decides whether an algorithm can run a call; the same on every rank. */
struct rcc_alg_context {
  int coll;            /* enum rcc_coll */
  int nranks;
  double bytes;        /* S, in nccl-tests' convention */
  double all_chunk_bytes; /* the chunk of algorithms that use every edge
                             (one slot of each): what one that sends the
                             whole message in one step fits */
  double board_bytes;  /* a one-shot board region; 0: no board */
  int network_only;    /* every edge crosses the network */
  int cma;             /* cross-memory attach works between every pair */
  int device;          /* the buffers are in GPU memory */
  int forced;          /* RINGCC_ALGO (a ringcc_algo_t) */
  int registered;      /* registered memory (enum rcc_zc_kind, registry.h):
                          0 none; 1 every rank on one host; 2 several hosts
                          with the same number (>= 2) of ranks each */
};

#define RCC_COLL_BIT(c) (1u << (c))
/* Every collective of enum rcc_coll. */
#define RCC_ALL_COLLS (RCC_COLL_BIT(RCC_NUM_COLLS) - 1u)

/* Flags of an algorithm. */
#define RCC_ALG_ALL_EDGES 1u /* talks to every peer: priced at the slowest
                                of all edges, not the ring's */
#define RCC_ALG_STAGE_IN_PLACE 2u /* in place, the input is copied aside
                                     first: the schedule writes dst before
                                     it has read all of src */
#define RCC_ALG_ONE_RANK 4u  /* for one rank only: a candidate only there */

struct rcc_algorithm {
  int id;               /* enum rcc_alg: its index in rcc_algorithms[] */
  const char *name;     /* "ring", "one-shot", ...: logs, report, model */
  int setting;          /* the ringcc_algo_t that forces it; RINGCC_ALGO_AUTO
                           for the only schedule of its collectives */
  unsigned colls;       /* RCC_COLL_BIT of each collective it runs */
  int sched;            /* enum rcc_sched: the schedule of its plans
                           (rcc_plan_build); RCC_SCHED_NONE where its
                           executor has none */
  int exec;             /* enum rcc_exec_kind: the executor that runs it */
  unsigned flags;       /* RCC_ALG_* */
  /* The cost terms for coll on nranks ranks and S bytes; C is the
   * pipeline chunk (one FIFO slot) where the schedule pipelines. */
  void (*terms)(int coll, int nranks, double S, double C,
                struct rcc_cost_terms *t);
  /* Optional: what the link kind (enum rcc_link) changes in them, where
   * that was measured (a message that is a store into shared memory costs
   * less than one that costs system calls). */
  void (*link_terms)(int link, int nranks, struct rcc_cost_terms *t);
  const char *formula[RCC_NUM_COLLS]; /* the terms of each collective it
                                         runs, as text (ringcc-model) */
  /* NULL if it can run the call, else why not (one phrase). */
  const char *(*why_not)(const struct rcc_alg_context *c);
};

extern const struct rcc_algorithm rcc_algorithms[RCC_NUM_ALGS];

/* "ring", "one-shot", ... ("?" for another value). */
const char *rcc_alg_name(int alg);
/* The algorithm's terms for a call, link adjustments included when link >=
 * 0: 0, or -1 (*t zeroed) where alg does not run coll. */
int rcc_alg_terms(int alg, int coll, int link, int nranks, double S, double C,
                  struct rcc_cost_terms *t);
/* 1 if setting (a ringcc_algo_t) forces alg. RINGCC_ALGO_DIRECT, kept for
 * programs written before oneshot and cma had names, forces either. */
int rcc_alg_forced_by(int alg, int setting);

/* A ringcc_algo_t's one spelling: "auto", "ring", "tree", "oneshot", ...;
 * and the ringcc_algo_t a spelling names (case, '-' and '_' ignored:
 * "One-Shot" is "oneshot"), or -1. */
const char *rcc_algo_setting_name(int setting);
int rcc_algo_setting_parse(const char *name);

/* The algorithms' own terms (each in the file of its schedule). */
void rcc_ring_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t);
void rcc_chain_terms(int coll, int n, double S, double C,
                     struct rcc_cost_terms *t);
void rcc_pairwise_terms(int coll, int n, double S, double C,
                        struct rcc_cost_terms *t);
void rcc_p2p_terms(int coll, int n, double S, double C,
                   struct rcc_cost_terms *t);
void rcc_dissemination_terms(int coll, int n, double S, double C,
                             struct rcc_cost_terms *t);
void rcc_local_terms(int coll, int n, double S, double C,
                     struct rcc_cost_terms *t);
void rcc_oneshot_terms(int coll, int n, double S, double C,
                       struct rcc_cost_terms *t);
void rcc_oneshot_link_terms(int link, int n, struct rcc_cost_terms *t);
void rcc_board_link_terms(int link, int n, struct rcc_cost_terms *t);
void rcc_tree_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t);
void rcc_recdoubling_terms(int coll, int n, double S, double C,
                           struct rcc_cost_terms *t);
void rcc_recdoubling_link_terms(int link, int n, struct rcc_cost_terms *t);
void rcc_rabenseifner_terms(int coll, int n, double S, double C,
                            struct rcc_cost_terms *t);
void rcc_a2av_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t);
void rcc_cma_terms(int coll, int n, double S, double C,
                   struct rcc_cost_terms *t);
void rcc_zc_terms(int coll, int n, double S, double C,
                  struct rcc_cost_terms *t);
void rcc_zc_dev_terms(int coll, int n, double S, double C,
                      struct rcc_cost_terms *t);
void rcc_hier_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t);
void rcc_direct_terms(int coll, int n, double S, double C,
                      struct rcc_cost_terms *t);
void rcc_binomial_terms(int coll, int n, double S, double C,
                        struct rcc_cost_terms *t);

/* Helpers for the terms. */
static inline void rcc_set_terms(struct rcc_cost_terms *t, double a, double b,
                                 double g, double sent) {
  t->alpha_count = a;
  t->beta_bytes = b;
  t->gamma_bytes = g;
  t->bytes_sent = sent;
}
static inline int rcc_floor_log2(int n) {
  int l = 0;
  while (n > 1 && (1 << (l + 1)) <= n)
    l++;
  return l;
}
static inline int rcc_ceil_log2(int n) {
  int k = 0;
  while ((1L << k) < n)
    k++;
  return k;
}

#endif /* RCC_ALGORITHMS_H */
