/*
 * trace.c - RINGCC_TRACE=DIR (trace.h): the ring buffer of events and the
 * Chrome trace-event JSON it is written as.
 *
 * One file per rank and communicator, DIR/ringcc-trace-ID-rRANK.json, one
 * event per line so that ringcc-run --trace can merge the ranks' files by
 * lines (tools/trace_merge.h):
 *
 *   {"traceEvents":[
 *   {"pid":2,"tid":0,"ph":"M","name":"process_name","args":{"name":"rank 2"}},
 *   ...
 *   {"pid":2,"tid":1,"ph":"X","cat":"step","name":"recvReduceSend","ts":...,
 *    "dur":...,"args":{"collective":"allreduce","seq":3,...,"label":
 *    "allreduce seq 3, ring, step 1 of 7: recvReduceSend block 1, 250
 *    elements"}},
 *   {"pid":2,"tid":1,"ph":"X","cat":"wait","name":"wait for data from rank 1",...},
 *   {"pid":2,"tid":1,"ph":"s","cat":"message","id":"...",...},
 *   ...
 *   ],
 *   "displayTimeUnit":"ns",
 *   "otherData":{"ringcc_trace":1,"comm":"...","rank":2,"nranks":4,...}}
 *
 * A process row per rank (pid = rank), a thread row for the calls (tid 0)
 * and one per channel (tid 1 + channel). Times are microseconds on rank
 * 0's clock: this rank's CLOCK_MONOTONIC minus the offset measured at init
 * (exactly 0 on rank 0's host, one clock). A step's waits come first in it
 * (the executor waits for the incoming slot and a free outgoing one, then
 * moves the data), so each is drawn as a slice at the step's start; a
 * message is a flow arrow from the sender's step to the receiver's, joined
 * by the FIFO's message number, which both ends count alike.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algorithms.h"
#include "comm.h"
#include "env.h"
#include "error.h"
#include "log.h"
#include "report.h"
#include "topo.h"
#include "trace.h"

#define DEFAULT_EVENTS 65536
#define MAX_EVENTS (1 << 26)

struct rcc_trace {
  struct rcc_trace_event *ev; /* cap entries; event k at ev[k % cap] */
  uint64_t cap, count;
  char path[PATH_MAX];
  char host[64];
  uint64_t comm_id;
  struct rcc_clock_offset clock;
  int signals_seen; /* RINGCC_REPORT_SIGNAL's count when last looked */
  int warned;       /* a write failed (said once) */
};

uint64_t rcc_trace_id(void) {
  uint64_t id = 0;
  if (rcc_getenv("RINGCC_TRACE") == NULL)
    return 0;
  if (getrandom(&id, sizeof(id), 0) != sizeof(id))
    id = (uint64_t)getpid() << 20 ^ (uint64_t)(uintptr_t)&id;
  return id ? id : 1;
}

/* RINGCC_TRACE_EVENTS: events per rank. */
static ringcc_result_t capacity(struct ringcc_comm *comm, uint64_t *cap) {
  const char *v = rcc_getenv("RINGCC_TRACE_EVENTS");
  int64_t n;
  *cap = DEFAULT_EVENTS;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (rcc_parse_decimal(v, &n) != 0 || n < 16 || n > MAX_EVENTS)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "init on rank %d: RINGCC_TRACE_EVENTS=%s is not a "
                          "number of events from 16 to %d", comm->rank, v,
                          MAX_EVENTS);
  *cap = (uint64_t)n;
  return RINGCC_SUCCESS;
}

/* mkdir -p dir; 0 or an errno. */
static int make_dir(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s", dir);
  for (char *p = path + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return errno;
      *p = '/';
    }
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return errno;
  return 0;
}

ringcc_result_t rcc_trace_open(struct ringcc_comm *comm,
                               const struct rcc_clock_offset *clock) {
  const char *dir = rcc_getenv("RINGCC_TRACE");
  uint64_t cap;
  ringcc_result_t r;
  if (dir == NULL)
    return RINGCC_SUCCESS;
  if ((r = capacity(comm, &cap)) != RINGCC_SUCCESS)
    return r;
  int e = make_dir(dir);
  if (e != 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "init on rank %d: RINGCC_TRACE=%s: cannot create the "
                          "directory: %s", comm->rank, dir, strerror(e));
  struct rcc_trace *t = calloc(1, sizeof(*t));
  if (t != NULL)
    t->ev = calloc(cap, sizeof(*t->ev));
  if (t == NULL || t->ev == NULL) {
    free(t);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: no memory for %llu trace events "
                          "(RINGCC_TRACE_EVENTS)", comm->rank,
                          (unsigned long long)cap);
  }
  t->cap = cap;
  t->clock = *clock;
  /* The communicator's id: that of its lowest rank that traces. */
  for (int p = comm->nranks - 1; p >= 0; p--)
    if (comm->peers[p].trace_id != 0)
      t->comm_id = comm->peers[p].trace_id;
  snprintf(t->path, sizeof(t->path), "%s/ringcc-trace-%016llx-r%d.json", dir,
           (unsigned long long)t->comm_id, comm->rank);
  snprintf(t->host, sizeof(t->host), "%s", comm->peers[comm->rank].hostname);
  t->signals_seen = rcc_report_signals();
  comm->trace = t;
  RCC_INFO(comm->rank, "trace: %s (%llu events, clock %s, offset %lld ns "
           "+- %lld ns)", t->path, (unsigned long long)cap,
           clock->measured ? "measured against rank 0" : "rank 0's host's",
           (long long)clock->offset_ns, (long long)clock->error_ns);
  return RINGCC_SUCCESS;
}

void rcc_trace_record(struct ringcc_comm *comm,
                      const struct rcc_trace_event *e) {
  struct rcc_trace *t = comm->trace;
  t->ev[t->count % t->cap] = *e;
  t->count++;
}

void rcc_trace_call(struct ringcc_comm *comm, int coll, int alg,
                    uint64_t bytes, int64_t t0, int64_t t1,
                    ringcc_result_t result) {
  struct rcc_trace_event e;
  memset(&e, 0, sizeof(e));
  e.type = RCC_TRACE_CALL;
  e.start_ns = t0;
  e.end_ns = t1;
  e.seq = comm->seq;
  e.bytes = bytes;
  e.coll = (uint8_t)coll;
  e.alg = (uint8_t)(alg < 0 ? RCC_NUM_ALGS : alg);
  e.result = (int8_t)result;
  e.send_peer = e.recv_peer = -1;
  rcc_trace_record(comm, &e);
}

uint64_t rcc_trace_count(const struct ringcc_comm *comm) {
  return comm->trace ? comm->trace->count : 0;
}

int rcc_trace_get(const struct ringcc_comm *comm, uint64_t i,
                  struct rcc_trace_event *e) {
  const struct rcc_trace *t = comm->trace;
  if (t == NULL)
    return -1;
  uint64_t held = t->count < t->cap ? t->count : t->cap;
  if (i >= held)
    return -1;
  *e = t->ev[(t->count - held + i) % t->cap];
  return 0;
}

/* ---- the file ------------------------------------------------------------- */

/* A time on rank 0's clock, in microseconds with nanosecond digits. */
static void put_us(FILE *f, const struct rcc_trace *t, int64_t ns) {
  ns -= t->clock.offset_ns;
  if (ns < 0)
    ns = 0;
  fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

static void put_peer(FILE *f, int peer) {
  if (peer >= 0)
    fprintf(f, "%d", peer);
  else
    fputs("null", f);
}

/* The head of an event on this rank's row tid; every event line starts
 * with the separator from the one before. */
static void head(FILE *f, const struct ringcc_comm *comm, int tid,
                 const char *ph, const char *cat) {
  fprintf(f, ",\n{\"pid\":%d,\"tid\":%d,\"ph\":\"%s\",\"cat\":\"%s\",",
          comm->rank, tid, ph, cat);
}

static void write_call(FILE *f, const struct ringcc_comm *comm,
                       const struct rcc_trace *t,
                       const struct rcc_trace_event *e) {
  const char *alg = e->alg < RCC_NUM_ALGS ? rcc_alg_name(e->alg) : "none";
  const char *result = ringcc_strerror((ringcc_result_t)e->result);
  head(f, comm, 0, "X", "call");
  fprintf(f, "\"name\":\"%s\",\"ts\":", rcc_coll_name(e->coll));
  put_us(f, t, e->start_ns);
  fprintf(f, ",\"dur\":%lld.%03lld,\"args\":{\"collective\":\"%s\",\"seq\":%llu,"
          "\"algorithm\":\"%s\",\"bytes\":%llu,\"result\":\"%.*s\",\"label\":"
          "\"%s seq %llu, %s, %llu bytes\"}}",
          (long long)((e->end_ns - e->start_ns) / 1000),
          (long long)((e->end_ns - e->start_ns) % 1000),
          rcc_coll_name(e->coll), (unsigned long long)e->seq, alg,
          (unsigned long long)e->bytes, (int)strcspn(result, ":"), result,
          rcc_coll_name(e->coll),
          (unsigned long long)e->seq, alg, (unsigned long long)e->bytes);
}

static void put_dur(FILE *f, int64_t ns) {
  if (ns < 0)
    ns = 0;
  fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* A message's flow id: the same string on the sender and the receiver. */
static void put_flow(FILE *f, const struct ringcc_comm *comm,
                     const struct rcc_trace *t, const char *ph, int from,
                     int to, const struct rcc_trace_event *e, uint32_t msg,
                     int64_t at) {
  head(f, comm, 1 + e->channel, ph, "message");
  fprintf(f, "\"name\":\"message\",%s\"id\":\"%llx-%d-%d-%d-%u\",\"ts\":",
          ph[0] == 'f' ? "\"bp\":\"e\"," : "",
          (unsigned long long)t->comm_id, from, to, e->conn_kind, msg);
  put_us(f, t, at);
  fputs("}", f);
}

static void write_step(FILE *f, const struct ringcc_comm *comm,
                       const struct rcc_trace *t,
                       const struct rcc_trace_event *e) {
  char label[256];
  struct rcc_step_label l = {
      .coll = e->coll,
      .seq = (unsigned long long)e->seq,
      .alg = e->alg,
      .channel = e->channel,
      .step = e->step,
      .nsteps = e->nsteps,
      .kind = e->kind,
      .block = e->block,
      .nelem = (size_t)e->nelem,
  };
  int64_t dur = e->end_ns - e->start_ns;
  int64_t wait = e->wait_recv_ns + e->wait_send_ns;
  int tid = 1 + e->channel;

  rcc_step_describe(label, sizeof(label), &l);
  head(f, comm, tid, "X", "step");
  fprintf(f, "\"name\":\"%s\",\"ts\":", rcc_step_kind_name(e->kind));
  put_us(f, t, e->start_ns);
  fputs(",\"dur\":", f);
  put_dur(f, dur);
  fprintf(f, ",\"args\":{\"collective\":\"%s\",\"seq\":%llu,\"algorithm\":"
          "\"%s\",\"channel\":%d,\"step\":%llu,\"kind\":\"%s\",\"from\":",
          rcc_coll_name(e->coll), (unsigned long long)e->seq,
          rcc_alg_name(e->alg), e->channel, (unsigned long long)e->step,
          rcc_step_kind_name(e->kind));
  put_peer(f, e->recv_peer);
  fputs(",\"to\":", f);
  put_peer(f, e->send_peer);
  fprintf(f, ",\"bytes\":%llu,\"wait_us\":", (unsigned long long)e->bytes);
  put_dur(f, wait);
  fputs(",\"work_us\":", f);
  put_dur(f, dur - wait);
  fprintf(f, ",\"label\":\"%s\"}}", label);
  /* The waits, as slices inside the step, in the order they happen. */
  if (e->wait_recv_ns > 0 && e->recv_peer >= 0) {
    head(f, comm, tid, "X", "wait");
    fprintf(f, "\"name\":\"wait for data from rank %d\",\"ts\":",
            e->recv_peer);
    put_us(f, t, e->start_ns);
    fputs(",\"dur\":", f);
    put_dur(f, e->wait_recv_ns);
    fputs("}", f);
  }
  if (e->wait_send_ns > 0) {
    head(f, comm, tid, "X", "wait");
    if (e->send_peer >= 0)
      fprintf(f, "\"name\":\"wait for a free slot to rank %d\",\"ts\":",
              e->send_peer);
    else
      fputs("\"name\":\"wait for sends to leave\",\"ts\":", f);
    put_us(f, t, e->start_ns + e->wait_recv_ns);
    fputs(",\"dur\":", f);
    put_dur(f, e->wait_send_ns);
    fputs("}", f);
  }
  /* Messages: leave at the end of the sender's step, arrive when the
   * receiver's wait for them ends. */
  if (e->send_peer >= 0 && e->send_msg != UINT32_MAX)
    put_flow(f, comm, t, "s", comm->rank, e->send_peer, e, e->send_msg,
             e->end_ns > e->start_ns ? e->end_ns - 1 : e->end_ns);
  if (e->recv_peer >= 0 && e->recv_msg != UINT32_MAX)
    put_flow(f, comm, t, "f", e->recv_peer, comm->rank, e, e->recv_msg,
             e->start_ns + e->wait_recv_ns);
}

static void write_meta(FILE *f, const struct ringcc_comm *comm,
                       const struct rcc_trace *t) {
  int r = comm->rank;
  fprintf(f, "{\"pid\":%d,\"tid\":0,\"ph\":\"M\",\"name\":\"process_name\","
          "\"args\":{\"name\":\"rank %d\"}},\n", r, r);
  fprintf(f, "{\"pid\":%d,\"tid\":0,\"ph\":\"M\",\"name\":"
          "\"process_sort_index\",\"args\":{\"sort_index\":%d}},\n", r, r);
  fprintf(f, "{\"pid\":%d,\"tid\":0,\"ph\":\"M\",\"name\":\"process_labels\","
          "\"args\":{\"labels\":\"%s pid %d, clock %s\"}},\n", r, t->host,
          (int)getpid(), t->clock.measured ? "measured" : "rank 0's host's");
  fprintf(f, "{\"pid\":%d,\"tid\":0,\"ph\":\"M\",\"name\":\"thread_name\","
          "\"args\":{\"name\":\"calls\"}},\n", r);
  fprintf(f, "{\"pid\":%d,\"tid\":0,\"ph\":\"M\",\"name\":"
          "\"thread_sort_index\",\"args\":{\"sort_index\":0}},\n", r);
  /* A row per channel the held events use (channel 0 at least). */
  int top = 0;
  uint64_t held = t->count < t->cap ? t->count : t->cap;
  for (uint64_t i = t->count - held; i < t->count; i++)
    if (t->ev[i % t->cap].channel > top)
      top = t->ev[i % t->cap].channel;
  for (int c = 0; c <= top; c++)
    fprintf(f, "%s{\"pid\":%d,\"tid\":%d,\"ph\":\"M\",\"name\":"
            "\"thread_name\",\"args\":{\"name\":\"channel %d\"}},\n"
            "{\"pid\":%d,\"tid\":%d,\"ph\":\"M\",\"name\":"
            "\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
            c > 0 ? ",\n" : "", r, 1 + c, c, r, 1 + c, 1 + c);
}

/* Writes to path.tmp, then renames: a reader never sees half a file. */
static int write_file(const struct ringcc_comm *comm,
                      const struct rcc_trace *t, const char *why) {
  char tmp[PATH_MAX + 8];
  snprintf(tmp, sizeof(tmp), "%s.tmp", t->path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL)
    return errno;
  uint64_t held = t->count < t->cap ? t->count : t->cap;
  fputs("{\"traceEvents\":[\n", f);
  write_meta(f, comm, t);
  for (uint64_t i = t->count - held; i < t->count; i++) {
    const struct rcc_trace_event *e = &t->ev[i % t->cap];
    if (e->type == RCC_TRACE_CALL)
      write_call(f, comm, t, e);
    else
      write_step(f, comm, t, e);
  }
  fprintf(f, "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{"
          "\"ringcc_trace\":1,\"comm\":\"%016llx\",\"rank\":%d,\"nranks\":%d,"
          "\"host\":\"%s\",\"os_pid\":%d,\"clock\":\"%s\",\"clock_offset_ns\":"
          "%lld,\"clock_error_ns\":%lld,\"clock_rounds\":%d,\"events\":%llu,"
          "\"dropped\":%llu,\"capacity\":%llu,\"written_at\":\"%s\"}}\n",
          (unsigned long long)t->comm_id, comm->rank, comm->nranks, t->host,
          (int)getpid(), t->clock.measured ? "measured" : "same host",
          (long long)t->clock.offset_ns, (long long)t->clock.error_ns,
          t->clock.rounds, (unsigned long long)t->count,
          (unsigned long long)(t->count - held), (unsigned long long)t->cap,
          why);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return errno ? errno : EIO;
  return rename(tmp, t->path) == 0 ? 0 : errno;
}

void rcc_trace_flush(struct ringcc_comm *comm, const char *why) {
  struct rcc_trace *t = comm->trace;
  if (t == NULL)
    return;
  int e = write_file(comm, t, why);
  if (e != 0 && !t->warned) {
    t->warned = 1;
    RCC_WARN(comm->rank, "trace: cannot write %s: %s", t->path, strerror(e));
  } else if (e == 0) {
    RCC_INFO(comm->rank, "trace: wrote %s (%s)", t->path, why);
  }
}

void rcc_trace_poll_signal(struct ringcc_comm *comm) {
  struct rcc_trace *t = comm->trace;
  int now = rcc_report_signals();
  if (t == NULL || now == t->signals_seen)
    return;
  t->signals_seen = now;
  rcc_trace_flush(comm, "signal");
}

void rcc_trace_close(struct ringcc_comm *comm) {
  struct rcc_trace *t = comm->trace;
  if (t == NULL)
    return;
  /* A forked child's copy holds the parent's events: the parent writes
   * the rank's file, the child must not overwrite it. */
  if (!comm->forked)
    rcc_trace_flush(comm, "destroy");
  free(t->ev);
  free(t);
  comm->trace = NULL;
}
