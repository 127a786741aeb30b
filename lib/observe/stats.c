/*
 * stats.c - a communicator's counters (stats.h), ringcc_comm_stats(), and
 * the summary logged at destroy with RINGCC_DEBUG=INFO:
 *
 *   stats: 12 calls, 48 MB (S), sent 36 MB, received 36 MB; 21.5 ms in
 *     calls, 9.1 ms of it waiting for peers
 *   stats: allreduce/ring 10 calls, 40 MB, sent 30 MB, 20.1 ms (wait 8.8 ms)
 *   stats: waits by edge: from rank 3 (SHM) 8.2 ms (90%), to rank 1 (SHM)
 *     0.9 ms (10%)
 *   stats: transports: SHM 2 edges, sent 36 MB, received 36 MB
 *   (and where a network connection received into the caller's buffers:
 *   "; 20 MB of it received straight into the caller's buffers")
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "algorithms.h"
#include "clock.h"
#include "comm.h"
#include "env.h"
#include "error.h"
#include "live.h"
#include "log.h"
#include "stats.h"
#include "transport.h"

#define GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/* RINGCC_STATS: "counts" (the default) or "time". */
static int timing_wanted(const struct ringcc_comm *comm) {
  const char *v = rcc_getenv("RINGCC_STATS");
  if (v != NULL && strcasecmp(v, "time") != 0 && strcasecmp(v, "counts") != 0)
    RCC_WARN(comm->rank, "RINGCC_STATS=%s is not 'counts' or 'time'; "
             "counting only", v);
  return (v != NULL && strcasecmp(v, "time") == 0) || comm->trace != NULL ||
         rcc_log_level >= RINGCC_LOG_INFO;
}

ringcc_result_t rcc_stats_create(struct ringcc_comm *comm) {
  struct rcc_stats *st = calloc(1, sizeof(*st));
  if (st != NULL)
    st->edge = calloc((size_t)comm->nranks, sizeof(*st->edge));
  if (st == NULL || st->edge == NULL) {
    free(st);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory for statistics",
                          comm->rank);
  }
  comm->stats = st;
  return RINGCC_SUCCESS;
}

void rcc_stats_start(struct ringcc_comm *comm) {
  struct rcc_stats *st = comm->stats;
  struct rcc_stats_edge *edge = st->edge;
  memset(edge, 0, (size_t)comm->nranks * sizeof(*edge));
  memset(st, 0, sizeof(*st));
  st->edge = edge;
  st->timing = timing_wanted(comm);
  st->live = 1;
}

void rcc_stats_time_begin(struct rcc_stats *st, struct rcc_stats_mark *m) {
  m->wait = st->wait_total;
  m->t0 = rcc_now_ns();
}

int64_t rcc_stats_time_end(struct rcc_stats *st, int coll, int alg,
                           const struct rcc_stats_mark *m) {
  int64_t t1 = rcc_now_ns();
  if (alg >= 0 && alg < RCC_NUM_ALGS && coll >= 0 && coll < RCC_NUM_COLLS) {
    struct rcc_stats_row *row = &st->row[coll][alg];
    rcc_stats_add(&row->time_ns, (uint64_t)(t1 - m->t0));
    rcc_stats_add(&row->wait_ns, st->wait_total - m->wait);
  }
  return t1;
}

/* ---- reading them -------------------------------------------------------- */

/* The end of the first version's fields: a caller's size must cover them. */
#define STATS_MIN_SIZE                                                         \
  (offsetof(ringcc_comm_stats_t, transports) +                                 \
   sizeof(((ringcc_comm_stats_t *)0)->transports))

static void collect(const struct ringcc_comm *comm, ringcc_comm_stats_t *out,
                    ringcc_stats_edge_t *edges, int edges_len) {
  const struct rcc_stats *st = comm->stats;
  out->rank = comm->rank;
  out->nranks = comm->nranks;
  out->timed = st->timing;
  out->wait_ns = GET(st->wait_total);
  out->landed_bytes = GET(st->landed);
  for (int c = 0; c < RCC_NUM_COLLS; c++)
    for (int a = 0; a < RCC_NUM_ALGS; a++) {
      const struct rcc_stats_row *row = &st->row[c][a];
      ringcc_stats_row_t r = {rcc_coll_name(c), rcc_alg_name(a),
                              GET(row->calls), GET(row->bytes),
                              GET(row->sent), GET(row->time_ns),
                              GET(row->wait_ns)};
      if (r.calls == 0)
        continue;
      out->calls += r.calls;
      out->bytes += r.bytes;
      out->time_ns += r.time_ns;
      if (out->nrows < RINGCC_STATS_MAX_ROWS)
        out->rows[out->nrows++] = r;
    }
  uint64_t board = GET(st->board);
  for (int p = 0; p < comm->nranks; p++) {
    const struct rcc_stats_edge *e = &st->edge[p];
    const struct rcc_transport *tr = comm->edge_transport[p];
    ringcc_stats_edge_t one = {p, NULL, GET(e->sent), GET(e->received),
                               GET(e->send_wait_ns), GET(e->recv_wait_ns)};
    if (p != comm->rank) /* the board: each peer read, and was read, alike */
      one.sent_bytes += board, one.received_bytes += board;
    out->sent_bytes += one.sent_bytes;
    out->received_bytes += one.received_bytes;
    if (p != comm->rank && tr != NULL) {
      one.transport = rcc_edge_name(comm, p);
      int t = 0;
      while (t < out->ntransports &&
             strcmp(out->transports[t].transport, tr->name) != 0)
        t++;
      if (t < RINGCC_STATS_MAX_TRANSPORTS) {
        ringcc_stats_transport_t *sum = &out->transports[t];
        if (t == out->ntransports)
          out->ntransports++, sum->transport = tr->name;
        sum->edges++;
        sum->sent_bytes += one.sent_bytes;
        sum->received_bytes += one.received_bytes;
        sum->wait_ns += one.send_wait_ns + one.recv_wait_ns;
      }
    }
    if (edges != NULL && p < edges_len) {
      edges[p] = one;
      out->nedges = p + 1;
    }
  }
}

/* The arguments checked and the counters copied out; comm is live. */
static ringcc_result_t comm_stats(ringcc_comm_t comm,
                                  ringcc_comm_stats_t *stats) {
  if (stats == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_stats: argument 'stats' is NULL");
  if (stats->size < STATS_MIN_SIZE || stats->magic != RINGCC_STATS_MAGIC)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_stats: argument 'stats' was not "
                          "initialised with RINGCC_COMM_STATS_INIT (size %zu, "
                          "magic 0x%x)", stats->size, stats->magic);
  if (stats->edges_len < 0 || (stats->edges == NULL && stats->edges_len > 0))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_stats: 'edges_len' is %d with 'edges' "
                          "%s", stats->edges_len,
                          stats->edges ? "set" : "NULL");
  ringcc_comm_stats_t all;
  memset(&all, 0, sizeof(all));
  collect(comm, &all, stats->edges, stats->edges_len);
  all.size = stats->size;
  all.magic = stats->magic;
  all.edges = stats->edges;
  all.edges_len = stats->edges_len;
  memcpy(stats, &all,
         stats->size < sizeof(all) ? stats->size : sizeof(all));
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_stats(ringcc_comm_t comm,
                                             ringcc_comm_stats_t *stats) {
  /* A handle that is not a live communicator (NULL, destroyed, a forked
   * child's) is refused before anything behind it is read. */
  ringcc_result_t r = rcc_comm_enter(comm, "ringcc_comm_stats",
                                     RCC_ENTER_QUERY);
  if (r != RINGCC_SUCCESS)
    return r;
  r = comm_stats(comm, stats);
  rcc_comm_leave(comm, RCC_ENTER_QUERY);
  return r;
}

/* ---- the summary --------------------------------------------------------- */

#define PRINT(...)                                                             \
  do {                                                                         \
    if (off < len)                                                             \
      off += (size_t)snprintf(buf + off, len - off, __VA_ARGS__);             \
  } while (0)

/* "12.3 us", "4.56 ms", "7.89 s". */
static const char *us(uint64_t ns, char *b, size_t len) {
  if (ns < 1000000)
    snprintf(b, len, "%.3g us", (double)ns / 1e3);
  else if (ns < 1000000000)
    snprintf(b, len, "%.3g ms", (double)ns / 1e6);
  else
    snprintf(b, len, "%.3g s", (double)ns / 1e9);
  return b;
}

/* "512 B", "4 kB", "36.2 MB" (powers of 1000). */
static const char *mb(uint64_t bytes, char *b, size_t len) {
  static const char *const unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1000 && u < 5)
    v /= 1000, u++;
  snprintf(b, len, u ? "%.3g %s" : "%.0f %s", v, unit[u]);
  return b;
}

/* Up to 4 edges with the most wait, each with its share. */
static size_t format_waits(const struct ringcc_comm *comm,
                           ringcc_stats_edge_t *e, uint64_t total,
                           char *buf, size_t off, size_t len) {
  char t[32];
  uint64_t shown = 0;
  int printed = 0, rest = 0;
  PRINT("stats: waits by edge:");
  for (int k = 0; k < 4; k++) {
    int best = -1, send = 0;
    uint64_t most = 0;
    for (int p = 0; p < comm->nranks; p++)
      for (int s = 0; s < 2; s++) {
        uint64_t w = s ? e[p].send_wait_ns : e[p].recv_wait_ns;
        if (w > most) {
          most = w, best = p, send = s;
        }
      }
    if (best < 0)
      break;
    PRINT("%s %s rank %d (%s) %s (%.0f%%)", printed ? "," : "",
          send ? "to" : "from", best, e[best].transport ? e[best].transport
                                                         : "itself",
          us(most, t, sizeof t), total ? 100.0 * (double)most / total : 0);
    shown += most;
    printed++;
    /* Taken: zero it in this copy of the edges. */
    *(send ? &e[best].send_wait_ns : &e[best].recv_wait_ns) = 0;
  }
  for (int p = 0; p < comm->nranks; p++)
    rest += (e[p].send_wait_ns > 0) + (e[p].recv_wait_ns > 0);
  if (rest > 0)
    PRINT(", %d more edges %s", rest, us(total - shown, t, sizeof t));
  if (printed == 0)
    PRINT(" none");
  PRINT("\n");
  return off;
}

void rcc_stats_format(const struct ringcc_comm *comm, char *buf, size_t len) {
  ringcc_comm_stats_t s;
  ringcc_stats_edge_t *e = calloc((size_t)comm->nranks, sizeof(*e));
  char a[32], b[32], c[32], d[32];
  size_t off = 0;

  buf[0] = '\0';
  memset(&s, 0, sizeof(s));
  collect(comm, &s, e, e ? comm->nranks : 0);
  PRINT("stats: %llu calls, %s (S), sent %s, received %s",
        (unsigned long long)s.calls, mb(s.bytes, a, sizeof a),
        mb(s.sent_bytes, b, sizeof b), mb(s.received_bytes, c, sizeof c));
  if (s.timed)
    PRINT("; %s in calls, %s of it waiting for peers\n",
          us(s.time_ns, a, sizeof a), us(s.wait_ns, b, sizeof b));
  else
    PRINT(" (not timed: RINGCC_STATS=time)\n");
  for (int i = 0; i < s.nrows; i++) {
    const ringcc_stats_row_t *r = &s.rows[i];
    PRINT("stats: %s/%s %llu calls, %s, sent %s", r->collective, r->algorithm,
          (unsigned long long)r->calls, mb(r->bytes, a, sizeof a),
          mb(r->sent_bytes, b, sizeof b));
    if (s.timed)
      PRINT(", %s (wait %s)", us(r->time_ns, c, sizeof c),
            us(r->wait_ns, d, sizeof d));
    PRINT("\n");
  }
  if (s.timed && e != NULL)
    off = format_waits(comm, e, s.wait_ns, buf, off, len);
  PRINT("stats: transports:");
  for (int t = 0; t < s.ntransports; t++)
    PRINT("%s %s %d edge%s, sent %s, received %s", t ? ";" : "",
          s.transports[t].transport, s.transports[t].edges,
          s.transports[t].edges == 1 ? "" : "s",
          mb(s.transports[t].sent_bytes, a, sizeof a),
          mb(s.transports[t].received_bytes, b, sizeof b));
  if (s.landed_bytes > 0)
    PRINT("; %s of it received straight into the caller's buffers",
          mb(s.landed_bytes, a, sizeof a));
  PRINT("%s\n", s.ntransports ? "" : " none");
  free(e);
}

void rcc_stats_destroy(struct ringcc_comm *comm) {
  if (comm->stats == NULL)
    return;
  /* A forked child's copy counted nothing of its own: no summary. */
  if (rcc_log_level >= RINGCC_LOG_INFO && comm->stats->live && !comm->forked) {
    char text[4096];
    rcc_stats_format(comm, text, sizeof(text));
    /* One log line per line of the summary. */
    for (char *line = text, *nl; *line; line = nl + 1) {
      nl = strchr(line, '\n');
      if (nl == NULL)
        nl = line + strlen(line) - 1;
      else
        *nl = '\0';
      rcc_log(RINGCC_LOG_INFO, comm->rank, "%s", line);
    }
  }
  free(comm->stats->edge);
  free(comm->stats);
  comm->stats = NULL;
}
