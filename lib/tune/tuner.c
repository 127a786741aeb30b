/*
 * tuner.c - the communicator's tuner: loads the cost model (a calibration
 * file, else the defaults), agrees on it at init so every rank decides
 * alike, and picks each call's algorithm and chunk with model.c's choice.
 *
 * The values come from the calibration file (tuner_file.c, written by
 * ringcc-bench --calibrate) or the defaults (model.c). Every rank must decide
 * alike, so at init the ranks all-gather their values and all use rank 0's.
 *
 * RINGCC_ALGO forces a choice. With RINGCC_DEBUG=INFO and
 * RINGCC_DEBUG_SUBSYS=TUNING every call is printed with each candidate's
 * predicted time, split into latency and bandwidth terms, and the winner.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "board.h"
#include "bootstrap.h"
#include "cma.h"
#include "comm.h"
#include "error.h"
#include "live.h"
#include "log.h"
#include "registry.h"
#include "transport.h"
#include "tuner.h"

/* ---- the library's tuner ------------------------------------------------------ */

/* What each rank contributes at init; every rank then uses rank 0's model
 * and the union of everybody's edges. */
struct tuner_record {
  struct rcc_model model;
  uint32_t ring_out_links; /* bit l: the edge to the ring successor is l */
  uint32_t links;          /* bit l: one of this rank's edges is l */
};


/* The component-wise worst of the links in mask. */
static struct rcc_link_cost worst_link(const struct rcc_model *m,
                                       unsigned mask) {
  struct rcc_link_cost w = {0, 0, 0};
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    if (mask & (1u << l)) {
      const struct rcc_link_cost *c = &m->link[l];
      w.alpha_us = fmax(w.alpha_us, c->alpha_us);
      w.beta_us_per_byte = fmax(w.beta_us_per_byte, c->beta_us_per_byte);
      w.beta_mem_us_per_byte =
          fmax(w.beta_mem_us_per_byte, c->beta_mem_us_per_byte > 0
                                           ? c->beta_mem_us_per_byte
                                           : c->beta_us_per_byte);
    }
  return w;
}

static void links_text(unsigned mask, char *buf, size_t len) {
  int off = 0;
  buf[0] = '\0';
  for (int l = 0; l < RCC_NUM_LINKS; l++)
    if (mask & (1u << l))
      off += snprintf(buf + off, len - (size_t)off, "%s%s", off ? "+" : "",
                      rcc_link_name(l));
  if (off == 0)
    snprintf(buf, len, "none");
}

static double gbps(double us_per_byte) {
  return us_per_byte > 0 ? 1e-3 / us_per_byte : INFINITY;
}

static void model_text(const struct rcc_model *m, char *buf, size_t len) {
  int off = 0;
  for (int l = 0; l < RCC_NUM_LINKS && off < (int)len; l++) {
    const struct rcc_link_cost *c = &m->link[l];
    off += snprintf(buf + off, len - (size_t)off, "%s alpha %.2f us, %.2f GB/s",
                    rcc_link_name(l), c->alpha_us, gbps(c->beta_us_per_byte));
    if (c->beta_mem_us_per_byte > 0 && m->cache_bytes > 0 && off < (int)len)
      off += snprintf(buf + off, len - (size_t)off, " (%.2f GB/s beyond the "
                      "cache)", gbps(c->beta_mem_us_per_byte));
    if (off < (int)len)
      off += snprintf(buf + off, len - (size_t)off, "; ");
  }
  if (off < (int)len && m->gamma_us_per_byte > 0)
    off += snprintf(buf + off, len - (size_t)off, "gamma %.2f GB/s",
                    gbps(m->gamma_us_per_byte));
  else if (off < (int)len)
    off += snprintf(buf + off, len - (size_t)off, "gamma 0 (in beta)");
  if (off < (int)len)
    snprintf(buf + off, len - (size_t)off, "; cache %.0f MiB",
             m->cache_bytes / 1048576.0);
}

/* This rank's model: the calibration file, else the defaults. */
static void load_model(struct ringcc_comm *comm, struct rcc_model *m) {
  char path[512], why[RCC_ERRLEN], values[600], source[800];
  struct rcc_tuner_file_info info;

  *m = rcc_model_defaults;
  if (rcc_tuner_file_path(path, sizeof(path), why, sizeof(why)) != 0) {
    snprintf(source, sizeof(source), "built-in defaults (%s)", why);
  } else {
    int r = rcc_tuner_read_file(path, m, &info, why, sizeof(why));
    if (r < 0)
      RCC_WARN(comm->rank, "tuner: %s; using the built-in defaults instead",
               why);
    if (r > 0)
      snprintf(source, sizeof(source), "%s (calibrated on %s, %s, %d ranks)",
               path, info.host[0] ? info.host : "?",
               info.date[0] ? info.date : "?", info.nranks);
    else
      snprintf(source, sizeof(source),
               "built-in defaults (%s %s; ringcc-bench --calibrate measures "
               "this machine)",
               path, r == 0 ? "does not exist" : "is malformed");
  }
  if (rcc_log_level >= RINGCC_LOG_INFO) {
    model_text(m, values, sizeof(values));
    RCC_INFO(comm->rank, "tuner: values from %s: %s", source, values);
  }
}

ringcc_result_t rcc_tuner_init(struct ringcc_comm *comm, int64_t deadline) {
  if (comm->tuner == NULL &&
      (comm->tuner = calloc(1, sizeof(*comm->tuner))) == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory (tuner)", comm->rank);
  struct rcc_tuner *t = comm->tuner;
  int n = comm->nranks;
  struct tuner_record *all = calloc((size_t)n, sizeof(*all));
  char err[RCC_ERRLEN];

  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory (tuner)", comm->rank);
  struct tuner_record *me = &all[comm->rank];
  struct rcc_model mine;
  load_model(comm, &mine);
  me->model = mine;
  for (int p = 0; p < n; p++)
    if (p != comm->rank && comm->edge_transport[p] != NULL)
      me->links |= 1u << rcc_edge_link(comm, p);
  if (n > 1)
    me->ring_out_links =
        1u << rcc_edge_link(comm, comm->ring[(comm->ring_pos + 1) % n]);
  ringcc_result_t r = n > 1 ? rcc_bootstrap_allgather(comm->boot, all,
                                                      sizeof(*all), deadline,
                                                      err, sizeof(err))
                            : RINGCC_SUCCESS;
  if (r != RINGCC_SUCCESS) {
    free(all);
    return rcc_comm_error(comm, r, "init on rank %d: tuner: %s", comm->rank,
                          err);
  }
  memset(t, 0, sizeof(*t));
  t->model = all[0].model;
  for (int p = 0; p < n; p++) {
    t->ring_links |= all[p].ring_out_links;
    t->all_links |= all[p].links;
  }
  free(all);
  if (memcmp(&t->model, &mine, sizeof(mine)) != 0)
    RCC_INFO(comm->rank, "tuner: using rank 0's values, which differ from "
                         "this rank's, so that every rank decides alike");
  t->ring_link = worst_link(&t->model, t->ring_links);
  t->all_link = worst_link(&t->model, t->all_links);
  if (comm->rank == 0 && rcc_log_level >= RINGCC_LOG_INFO) {
    char ring[32], every[32];
    links_text(t->ring_links, ring, sizeof(ring));
    links_text(t->all_links, every, sizeof(every));
    RCC_INFO(comm->rank,
             "tuner: ring edges %s, all edges %s; chunk = one FIFO slot "
             "(ring %zu B, all edges %zu B; device calls %zu B, %zu B); "
             "channels: host %d, device %d (%s); RINGCC_ALGO %s",
             ring, every, comm->ring_chunk_bytes, comm->all_chunk_bytes,
             comm->dev_ring_chunk_bytes, comm->dev_all_chunk_bytes,
             comm->kind_channels[RCC_CONN_COLL],
             comm->nkinds == RCC_MAX_CONN_KINDS
                 ? comm->kind_channels[RCC_CONN_DEVICE + RCC_CONN_COLL]
                 : 0,
             comm->set.nchannels > 0 ? "RINGCC_NCHANNELS: every call"
                                     : "at most; one per 64 KiB of a call",
             rcc_algo_setting_name(comm->set.algo));
  }
  return RINGCC_SUCCESS;
}

/* The channels the model may use for a call (tuner.h): RINGCC_NCHANNELS
 * exactly where it is set (every call then exercises every channel, shares
 * of nothing included); else, for host buffers, the one channel there is
 * (the CPU runs channels in turn: more would only add steps), and for
 * device buffers up to the FIFOs the links were given (rcc_cuda_channels
 * sizes them so that that many blocks keep up with the link: one block is
 * taken to move 1/max of it), at least CHANNEL_MIN_BYTES each. */
#define CHANNEL_MIN_BYTES (64 << 10)

static struct rcc_channel_model channel_model(const struct ringcc_comm *comm,
                                              const struct rcc_link_cost *ring,
                                              int device) {
  int have = comm->kind_channels[device ? RCC_CONN_DEVICE + RCC_CONN_COLL
                                        : RCC_CONN_COLL];
  return (struct rcc_channel_model){
      .max = have,
      .exact = comm->set.nchannels > 0,
      .serial = !device,
      .beta_us_per_byte = device ? ring->beta_us_per_byte * have : 0,
      .min_bytes = CHANNEL_MIN_BYTES,
  };
}

/* S in nccl-tests' convention from the call's count argument. */
static double call_bytes(const struct ringcc_comm *comm, int coll,
                         size_t count_bytes) {
  if (coll == RCC_COLL_REDUCE_SCATTER || coll == RCC_COLL_ALLGATHER ||
      coll == RCC_COLL_ALLTOALL)
    return (double)count_bytes * comm->nranks;
  return (double)count_bytes;
}

static void log_choice(const struct ringcc_comm *comm,
                       const struct rcc_model_input *in,
                       const struct rcc_candidate *cand, int count, int winner,
                       const struct rcc_tuning *out) {
  char line[1200], ring[32], every[32];
  int off;

  links_text(comm->tuner->ring_links, ring, sizeof(ring));
  links_text(comm->tuner->all_links, every, sizeof(every));
  off = snprintf(line, sizeof(line), "TUNING %s S=%.0f B, %d ranks (ring "
                 "edges %s, all edges %s):", rcc_coll_name(in->coll),
                 in->bytes, in->nranks, ring, every);
  for (int i = 0; i < count && off < (int)sizeof(line); i++) {
    const struct rcc_candidate *c = &cand[i];
    char total[32], lat[32], bw[32], chans[24] = "";
    rcc_format_us(rcc_prediction_total(c->pred), total, sizeof(total));
    rcc_format_us(c->pred.latency_us, lat, sizeof(lat));
    rcc_format_us(c->pred.bandwidth_us, bw, sizeof(bw));
    if (c->pred.channels > 1)
      snprintf(chans, sizeof(chans), ", %d channels", c->pred.channels);
    if (!c->runnable)
      off += snprintf(line + off, sizeof(line) - (size_t)off,
                      "%s %s %s but n/a (%s)", i ? "," : "",
                      rcc_alg_name(c->alg), total, c->why_not);
    else
      off += snprintf(line + off, sizeof(line) - (size_t)off,
                      "%s %s %s (latency %s + bandwidth %s%s%s)",
                      i ? "," : "", rcc_alg_name(c->alg), total, lat, bw,
                      c->pred.in_memory ? ", beyond the cache" : "", chans);
  }
  char forced[40] = "";
  if (in->forced != RINGCC_ALGO_AUTO)
    snprintf(forced, sizeof(forced), " (RINGCC_ALGO=%s)",
             rcc_algo_setting_name(in->forced));
  if (off < (int)sizeof(line))
    snprintf(line + off, sizeof(line) - (size_t)off,
             " -> %s%s%s, chunk %zu B, %d channel(s)",
             rcc_alg_name(cand[winner].alg),
             count == 1 ? " (its only schedule)" : "", forced,
             out->chunk_bytes, out->channels);
  rcc_log(RINGCC_LOG_INFO, comm->rank, "%s", line);
}

static void choose(struct ringcc_comm *comm, int coll, size_t count_bytes,
                   int device, int registered, struct rcc_tuning *out) {
  const struct rcc_tuner *t = comm->tuner;
  int logging = rcc_log_level >= RINGCC_LOG_INFO;
  struct rcc_candidate cand[RCC_MAX_CANDIDATES];
  struct rcc_model_input in = {
      .coll = coll,
      .nranks = comm->nranks,
      .bytes = call_bytes(comm, coll, count_bytes),
      .ring_link = t->ring_link,
      .all_link = t->all_link,
      .all_link_type =
          (t->all_links >> RCC_LINK_TCP) & 1 ? RCC_LINK_TCP : RCC_LINK_SHM,
      .network_only = t->all_links == 1u << RCC_LINK_TCP,
      .gamma_us_per_byte = t->model.gamma_us_per_byte,
      .cache_bytes = t->model.cache_bytes,
      .ring_chunk_bytes = (double)(device ? comm->dev_ring_chunk_bytes
                                          : comm->ring_chunk_bytes),
      .all_chunk_bytes = (double)(device ? comm->dev_all_chunk_bytes
                                         : comm->all_chunk_bytes),
      .board_bytes = (double)rcc_board_bytes(comm),
      .cma = rcc_cma_usable(comm),
      .device = device,
      .forced = comm->set.algo,
      .registered = registered,
      .channels = channel_model(comm, &t->ring_link, device),
  };
  int winner, count = rcc_model_choose(&in, cand, &winner);
  const struct rcc_algorithm *a = &rcc_algorithms[cand[winner].alg];

  out->alg = a->id;
  out->chunk_bytes = (size_t)((a->flags & RCC_ALG_ALL_EDGES)
                                   ? in.all_chunk_bytes
                                   : in.ring_chunk_bytes);
  out->channels = cand[winner].pred.channels;
  out->predicted_us = rcc_prediction_total(cand[winner].pred);
  if (logging && rcc_log_subsys("TUNING"))
    log_choice(comm, &in, cand, count, winner, out);
  if (logging && in.forced != RINGCC_ALGO_AUTO &&
      !rcc_alg_forced_by(a->id, in.forced)) {
    const char *why = "";
    for (int i = 0; i < count; i++)
      if (rcc_alg_forced_by(cand[i].alg, in.forced) && !cand[i].runnable)
        why = cand[i].why_not;
    RCC_INFO(comm->rank, "RINGCC_ALGO=%s does not apply to a %zu-byte %s "
             "(%s): using %s", rcc_algo_setting_name(in.forced), count_bytes,
             rcc_coll_name(coll), why[0] ? why : "it does not run it",
             a->name);
  }
}

void rcc_tuner_choose(struct ringcc_comm *comm, int coll, size_t count_bytes,
                      int device, struct rcc_tuning *out) {
  /* Training loops repeat the same calls: skip the model (about 5% of an
   * 8-byte allreduce) when nothing would be logged. Registering or
   * deregistering memory changes the registry's kind, and so the key. */
  struct rcc_tuner *t = comm->tuner;
  int registered = rcc_registry_kind(comm);
  if (rcc_log_level < RINGCC_LOG_INFO && t->last.valid &&
      t->last.coll == coll && t->last.bytes == count_bytes &&
      t->last.device == device && t->last.registered == registered) {
    out->alg = t->last.alg;
    out->chunk_bytes = t->last.chunk_bytes;
    out->channels = t->last.channels;
    out->predicted_us = t->last.predicted_us;
    return;
  }
  choose(comm, coll, count_bytes, device, registered, out);
  t->last.valid = 1;
  t->last.coll = coll;
  t->last.bytes = count_bytes;
  t->last.device = device;
  t->last.registered = registered;
  t->last.alg = out->alg;
  t->last.chunk_bytes = out->chunk_bytes;
  t->last.channels = out->channels;
  t->last.predicted_us = out->predicted_us;
}

/* The tuner's prediction, without running anything: choose() does not
 * touch the communicator (no cache), so any thread may ask. */
RINGCC_API ringcc_result_t ringcc_comm_predict(ringcc_comm_t comm,
                                               const char *collective,
                                               size_t count,
                                               ringcc_datatype_t dt,
                                               double *seconds) {
  const char *fn = "ringcc_comm_predict";
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  int coll = -1;
  for (int c = 0; c <= RCC_COLL_ALLTOALL && collective != NULL; c++)
    if (strcmp(collective, rcc_coll_name(c)) == 0)
      coll = c;
  size_t esize = ringcc_datatype_size(dt);
  if (coll < 0 || esize == 0 || seconds == NULL) {
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                       "%s on rank %d: argument '%s' is %s", fn, comm->rank,
                       coll < 0 ? "collective" : esize == 0 ? "datatype"
                                                           : "seconds",
                       coll < 0 ? "not allreduce, reduce_scatter, allgather, "
                                  "bcast, reduce or alltoall"
                       : esize == 0 ? "not a ringcc_datatype_t" : "NULL");
  } else if (comm->nranks == 1) {
    *seconds = 0; /* a local copy at most: nothing the model counts */
  } else {
    struct rcc_tuning tune;
    choose(comm, coll, count * esize, 0, rcc_registry_kind(comm), &tune);
    *seconds = tune.predicted_us * 1e-6;
  }
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

void rcc_tuner_free(struct ringcc_comm *comm) {
  free(comm->tuner);
  comm->tuner = NULL;
}

void rcc_tuner_choose_unregistered(struct ringcc_comm *comm, int coll,
                                   size_t count_bytes, int device,
                                   struct rcc_tuning *out) {
  choose(comm, coll, count_bytes, device, 0, out);
}
