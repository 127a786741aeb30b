/*
 * tuner.h - the alpha-beta cost model: one set of formulas, in model.c, that
 * the library's tuner, ringcc-model and ringcc-bench --calibrate all use.
 *
 * A collective's predicted time is
 *
 *   T = a * alpha + b * beta + g * gamma
 *
 * where alpha is the latency of handing one message over an edge, beta the
 * time per byte on that edge (one direction), gamma the time per byte of a
 * local reduction (dst = x op y, per byte of one operand), and a, b, g are
 * the algorithm's terms for n ranks and S bytes (rcc_model_terms). Host
 * memory has two speeds, so a link may have two betas: one while the ranks'
 * buffers fit in the last-level cache, one (beta_mem) once they do not. S follows
 * nccl-tests: the buffer for allreduce, bcast, reduce and send; the gathered
 * output for allgather; the full input for reduce_scatter; the whole send
 * buffer for alltoall.
 */
#ifndef RCC_TUNER_H
#define RCC_TUNER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "algorithms.h"
#include "link.h"
#include "ringcc.h"


struct rcc_link_cost {
  double alpha_us;             /* per message */
  double beta_us_per_byte;     /* 1 / bandwidth of one direction */
  double beta_mem_us_per_byte; /* the same once the buffers outgrow the
                                  cache (rcc_model_in_memory); 0: as beta */
};

struct rcc_model {
  struct rcc_link_cost link[RCC_NUM_LINKS];
  double gamma_us_per_byte; /* 1 / local reduction speed */
  double cache_bytes;       /* the last-level cache the ranks of a host
                               share; 0: one beta whatever the size */
};

/* The built-in values, used when no calibration file is read. */
extern const struct rcc_model rcc_model_defaults;
const char *rcc_link_name(int link); /* "shm", "tcp" */

/* Fills *t for alg (enum rcc_alg, the table's) running coll (enum
 * rcc_coll) over nranks ranks on S = bytes; chunk_bytes is the pipeline
 * chunk (one FIFO slot) where the algorithm pipelines (chains). Returns 0,
 * or -1 when alg does not run coll (*t zeroed). */
int rcc_model_terms(int coll, int alg, int nranks, double bytes,
                    double chunk_bytes, struct rcc_cost_terms *t);
/* What the link kind changes in them, where the algorithm says (its
 * link_terms in algorithms.h; measured, docs/tuning.md). */
void rcc_model_link_terms(int link, int alg, int nranks,
                          struct rcc_cost_terms *t);
/* The algorithm's formula as text, e.g. "2(n-1)*alpha + 2(n-1)/n*S*beta +
 * (n-1)/n*S*gamma"; "" where alg does not run coll. */
const char *rcc_model_formula(int coll, int alg);

/* 1 when a call's buffers, with the slots and copies in flight, outgrow
 * the cache (2 * footprint > cache_bytes) and beta_mem applies. */
int rcc_model_in_memory(const struct rcc_cost_terms *t, double cache_bytes);

/* A predicted time, split into its latency and bandwidth terms; the
 * bandwidth term includes the reduction (gamma) part, also given alone,
 * beside the wire's (beta) part. */
struct rcc_prediction {
  double latency_us;   /* alpha's term */
  double bandwidth_us; /* wire_us + reduce_us */
  double wire_us;      /* beta's term: bytes over the link / bandwidth */
  double reduce_us;    /* gamma's term: bytes reduced / reduction rate */
  int in_memory;       /* beta_mem was used */
  int channels;        /* the call's data over this many channels */
  double engine_us;    /* the channels' own term (rcc_model_channels);
                          where it exceeds wire_us it replaces it in
                          bandwidth_us */
};
struct rcc_prediction rcc_model_predict(const struct rcc_cost_terms *t,
                                        const struct rcc_link_cost *link,
                                        double gamma_us_per_byte,
                                        double cache_bytes);
static inline double rcc_prediction_total(struct rcc_prediction p) {
  return p.latency_us + p.bandwidth_us;
}

/* Channels (algorithms.md): a call's data split over C copies of its
 * schedule, each with FIFOs of its own. What C changes in a prediction:
 *
 *   - where one thread runs the channels in turn (the host executor), each
 *     channel's steps cost their alpha: the latency term times C; where
 *     they run at once (the CUDA executor's blocks), it stays;
 *   - each channel's engine (a GPU block) moves at most 1/beta_channel
 *     bytes/s, so C of them need beta_bytes * beta_channel / C; the
 *     bandwidth term is the larger of that and the wire's. 0: no limit per
 *     channel (the host: its one thread is priced by the link's beta).
 *
 * A channel gets at least min_bytes of the call (one share of every block
 * of it), so small calls run on fewer. */
struct rcc_channel_model {
  int max;                  /* channels there are FIFOs for (>= 1) */
  int exact;                /* 1: every FIFO call uses max (RINGCC_NCHANNELS
                               set), the model only prices it */
  int serial;               /* 1: one thread runs them in turn */
  double beta_us_per_byte;  /* of one channel's engine; 0: no limit */
  double min_bytes;         /* of S per channel */
};
/* The one-channel prediction `one` of terms t over C channels. */
struct rcc_prediction rcc_model_channels(struct rcc_prediction one,
                                         const struct rcc_cost_terms *t,
                                         int channels,
                                         const struct rcc_channel_model *m);

/* A hierarchical AllReduce over hosts x per_host ranks (docs/tuning.md):
 * a reduce-scatter inside every host (a ring over its per_host ranks, on
 * the intra link), then per_host concurrent ring AllReduces across the
 * hosts, each of one 1/per_host shard (on the inter link, each getting
 * inter_share of one link's bandwidth: the host's NICs split among the
 * per_host rings), then an allgather inside every host:
 *
 *   T = 2(G-1)*a_in + 2(G-1)/G*S*b_in + 2(H-1)*a_net
 *       + 2(H-1)/H*S/G*b_net/share + ((G-1)/G + (H-1)/(H*G))*S*gamma
 *
 * (H hosts, G ranks per host). libringcc runs one flat ring or tree today;
 * this is the model ringcc-model --hosts compares them with. *sent: the
 * bytes each rank sends (may be NULL). */
struct rcc_prediction rcc_model_hierarchical(int hosts, int per_host, double S,
                                             const struct rcc_link_cost *intra,
                                             const struct rcc_link_cost *inter,
                                             double inter_share,
                                             double gamma_us_per_byte,
                                             double *sent);

/* What the tuner chooses from. */
struct rcc_model_input {
  int coll;                        /* enum rcc_coll */
  int nranks;
  double bytes;                    /* S */
  struct rcc_link_cost ring_link;  /* the ring's slowest edge */
  struct rcc_link_cost all_link;   /* the slowest edge of all */
  double gamma_us_per_byte;
  double cache_bytes;      /* see struct rcc_model */
  double ring_chunk_bytes; /* the chunk of ring and chain schedules (one
                              slot of the ring's edges): their pipeline */
  double all_chunk_bytes;  /* the chunk of the others (one slot of every
                              edge): what one-step algorithms (one-shot,
                              recursive doubling) fit */
  double board_bytes;      /* a one-shot board region; 0: no board */
  int cma;                 /* cross-memory attach works between all ranks */
  int device;              /* the call's buffers are in GPU memory */
  int forced;              /* RINGCC_ALGO (a ringcc_algo_t) */
  int all_link_type;       /* enum rcc_link of all_link (0: shm) */
  int network_only;        /* 1: every edge crosses the network */
  int registered;          /* registered memory (rcc_alg_context's) */
  struct rcc_channel_model channels; /* max 0: one channel */
};

#define RCC_MAX_CANDIDATES RCC_NUM_ALGS

struct rcc_candidate {
  int alg;             /* enum rcc_alg */
  int runnable;        /* 0: why_not says why it was left out */
  const char *why_not;
  struct rcc_cost_terms terms;
  struct rcc_prediction pred;
};

/* The algorithms of the table (algorithms.h) that run in->coll, each with
 * its prediction (on the channels that make it fastest, the fewest of
 * equals; one for algorithms that run without FIFOs or have no data) and
 * whether it can run (why_not), in table order, and the
 * one the tuner picks (*winner, an index into cand): the fastest runnable
 * one (a tie goes to the earlier); with RINGCC_ALGO set, the fastest
 * runnable one it forces, and where none of those can run, the first
 * runnable one (the collective's ring or chain). Returns the number of
 * candidates. The library's tuner and ringcc-model both decide with this
 * function. */
int rcc_model_choose(const struct rcc_model_input *in,
                     struct rcc_candidate cand[RCC_MAX_CANDIDATES],
                     int *winner);

/* A communicator's tuner (tuner.c): rank 0's model and the link types of
 * the edges, the same on every rank. */
struct rcc_tuner {
  struct rcc_model model;
  unsigned ring_links; /* bit l: some ring edge is of link type l */
  unsigned all_links;  /* bit l: some edge is */
  struct rcc_link_cost ring_link; /* the worst alpha and beta of ring_links */
  struct rcc_link_cost all_link;  /* of all_links */
  struct {             /* the last choice, reused by a call of the same
                          collective, size, buffers and registrations */
    int valid, coll, device, registered;
    size_t bytes;
    int alg;
    size_t chunk_bytes;
    int channels;
    double predicted_us;
  } last;
};

/* ---- the calibration file ----------------------------------------------- */

/* Where the file is: RINGCC_TUNER_FILE, else $XDG_CACHE_HOME/ringcc/
 * tuner.conf, else $HOME/.cache/ringcc/tuner.conf. Returns 0, or -1 when
 * there is none to use (RINGCC_TUNER_FILE=none, or neither variable is
 * set); why says which. */
int rcc_tuner_file_path(char *path, size_t len, char *why, size_t whylen);

struct rcc_tuner_file_info {
  char host[64];  /* from the file's host= line, "" if none */
  char date[64];  /* date= */
  int nranks;     /* nranks= (ranks it was calibrated with), 0 if none */
};

/* Reads path into *model. 1: read; 0: no such file (*model untouched);
 * -1: unreadable or malformed, with err saying where and why (*model
 * untouched). Never trusts the file: each line is checked. */
int rcc_tuner_read_file(const char *path, struct rcc_model *model,
                        struct rcc_tuner_file_info *info, char *err,
                        size_t errlen);
/* Writes model to path (creating its directory), atomically (a temporary
 * file renamed over it). comment (may be NULL) is added as '#' lines. */
ringcc_result_t rcc_tuner_write_file(const char *path,
                                     const struct rcc_model *model,
                                     const struct rcc_tuner_file_info *info,
                                     const char *comment, char *err,
                                     size_t errlen);

/* ---- calibration ---------------------------------------------------------- */

/* One measured time, for rcc_model_fit. */
struct rcc_fit_sample {
  int coll, alg, link, nranks;
  double bytes, chunk_bytes;
  double time_us;
};

/* Fits alpha, beta and beta_mem of every link that has samples (beta_mem
 * from the samples that outgrow model->cache_bytes, 0 if none do), and
 * gamma (one for all links) when fit_gamma, else with gamma as
 * model->gamma_us_per_byte; minimises the sum of squared relative errors
 * (so 8-byte and 64-MiB samples count alike) with alpha, gamma >= 0 and
 * betas > 0. Links without samples keep their values. */
ringcc_result_t rcc_model_fit(const struct rcc_fit_sample *samples, int n,
                              int fit_gamma, struct rcc_model *model,
                              char *err, size_t errlen);

/* Times the library's float32 sum kernel on buffers of bytes bytes (out of
 * cache for large ones): the median of reps runs, in microseconds per byte
 * of one operand. */
double rcc_tuner_time_reduce(size_t bytes, int reps);
/* This machine's last-level cache in bytes (sysfs), or 0 if unknown. */
double rcc_tuner_cache_bytes(void);

/* ---- text in and out (tuner_text.c) --------------------------------------- */

/* "8", "64K" (binary, as ringcc-bench -b/-e), "16KB"/"16kB" (10^3),
 * "16KiB" (2^10); likewise M, G, T. A decimal mantissa is allowed with a
 * unit ("1.5GiB") if the result is a whole number of bytes. Returns 0, or -1
 * with why[] saying what is wrong. */
int rcc_parse_size(const char *s, double *bytes, char *why, size_t len);
/* "50GB/s", "50GBps" (bytes), "400Gb/s", "400Gbit/s", "400Gbps" (bits);
 * prefixes k M G T decimal, Ki Mi Gi Ti binary. Into bytes per second. */
int rcc_parse_bandwidth(const char *s, double *bytes_per_s, char *why,
                        size_t len);
/* "2", "2us", "800ns", "0.01ms": microseconds (plain numbers are us). */
int rcc_parse_latency_us(const char *s, double *us, char *why, size_t len);
/* "16 GB", "64 KiB", "1.5 MB", "8 B": a size for people. */
const char *rcc_format_bytes(double bytes, int binary, char *buf, size_t len);
/* "12.3 us", "4.56 ms", "7.89 s". */
const char *rcc_format_us(double us, char *buf, size_t len);

/* Prints the steps of the ring schedule of coll (RCC_COLL_ALLREDUCE,
 * _REDUCE_SCATTER or _ALLGATHER) for nranks ranks (2..RCC_EXPLAIN_MAX_RANKS),
 * one chunk per rank, as a Markdown table generated by running the
 * library's own schedule code (rcc_plan_ring, rcc_plan_step) and following
 * every message. Returns 0, or -1 (nothing printed) for another coll or n. */
#define RCC_EXPLAIN_MAX_RANKS 8
int rcc_model_explain(FILE *out, int coll, int nranks);

/* ---- the communicator's tuner (tuner.c) ---------------------------------- */

struct ringcc_comm;

/* Loads the cost model (calibration file or defaults) and agrees
 * on it with the other ranks (rank 0's values); a collective step of init,
 * after the transports are connected. */
ringcc_result_t rcc_tuner_init(struct ringcc_comm *comm, int64_t deadline);
/* Frees comm->tuner (destroy; NULL is fine). */
void rcc_tuner_free(struct ringcc_comm *comm);
/* How one call runs, from rcc_tuner_choose. */
struct rcc_tuning {
  int alg;            /* enum rcc_alg: an entry of rcc_algorithms[] */
  size_t chunk_bytes; /* bytes per step: one FIFO slot of the edges used */
  int channels;       /* the call's data over this many channels, each on
                         FIFOs of its own (RINGCC_NCHANNELS) */
  double predicted_us; /* the cost model's time for the winner */
};
/* Picks for coll (enum rcc_coll) on count_bytes = the call's count times
 * the datatype size, on host (device 0) or device buffers; logs every
 * candidate under RINGCC_DEBUG_SUBSYS=TUNING. Every rank picks alike. */
void rcc_tuner_choose(struct ringcc_comm *comm, int coll, size_t count_bytes,
                      int device, struct rcc_tuning *out);
/* The same as if nothing were registered: where the tuner chose zero-copy
 * and some rank's buffers turned out not to be registered (every rank
 * learns that alike, exec_zc.c). Not cached. */
void rcc_tuner_choose_unregistered(struct ringcc_comm *comm, int coll,
                                   size_t count_bytes, int device,
                                   struct rcc_tuning *out);

#endif /* RCC_TUNER_H */
