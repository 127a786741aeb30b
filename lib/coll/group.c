/*
 * group.c - groups (ringcc_group_start/end) and requests
 * (ringcc_group_end_async, ringcc_test, ringcc_wait).
 *
 * A group belongs to a thread and nests, as NCCL's: the calls between the
 * outermost start and its end are validated at the call (coll.c: a bad
 * argument fails that call, the group goes on) and kept here; the end runs
 * them. Per communicator, a group's work is a batch: its collectives in call
 * order, then its sends and receives all at once (rcc_exec_host_p2p: each
 * moves whenever its FIFO lets it, so no order and no size deadlocks), the
 * ones to and from this rank itself being copies matched in order.
 *
 * Batches run on the calling thread where that cannot deadlock (one
 * communicator, nothing of it in flight) and otherwise on the
 * communicator's progress thread: one per communicator, made at its first
 * use, which runs the batches given to it one after another, in the order
 * they came. A group that spans several communicators hands each batch to
 * its communicator's thread, so they progress at once (one thread driving
 * several ranks' communicators cannot wait for itself); ringcc_group_end
 * waits for them, ringcc_group_end_async returns a request at once. The
 * progress thread enters the communicator for each batch as any call does
 * (rcc_comm_enter), so the communicator's rules hold: a blocking call of the
 * user's thread first waits for the requests in flight (rcc_group_drain:
 * it runs after them, as on a CUDA stream), destroy refuses while one is in
 * flight, abort ends them with RINGCC_ERR_ABORTED, and a forked child
 * has neither the thread nor its requests.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "exec.h"
#include "group.h"
#include "links.h"
#include "live.h"
#include "log.h"
#include "stats.h"

/* ---- what a group keeps ------------------------------------------------ */

struct rec {
  struct ringcc_comm *comm;
  struct call *call; /* a collective (coll.c's copy), or NULL: p2p */
  ringcc_result_t (*run)(struct call *);
  void (*drop)(struct call *);
  struct rcc_p2p_op p2p;
};

struct group {
  int depth; /* ringcc_group_start calls not yet ended */
  struct rec *recs;
  int n, cap;
};

static _Thread_local struct group g_group;

int rcc_group_recording(void) { return g_group.depth > 0; }

static ringcc_result_t keep(const struct rec *r) {
  struct group *g = &g_group;
  if (g->n == g->cap) {
    int cap = g->cap ? g->cap * 2 : 16;
    struct rec *recs = realloc(g->recs, (size_t)cap * sizeof(*recs));
    if (recs == NULL)
      return RINGCC_ERR_OUT_OF_MEMORY;
    g->recs = recs;
    g->cap = cap;
  }
  g->recs[g->n++] = *r;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_group_add_call(struct ringcc_comm *comm, struct call *kept,
                                   ringcc_result_t (*run)(struct call *),
                                   void (*drop)(struct call *)) {
  struct rec r = {.comm = comm, .call = kept, .run = run, .drop = drop};
  if (keep(&r) == RINGCC_SUCCESS)
    return RINGCC_SUCCESS;
  drop(kept);
  return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                        "a collective inside a group on rank %d: out of "
                        "memory to keep it", comm->rank);
}

ringcc_result_t rcc_group_add_p2p(struct ringcc_comm *comm, const char *fn,
                                  const struct rcc_p2p_op *op) {
  struct rec r = {.comm = comm, .p2p = *op};
  if (keep(&r) == RINGCC_SUCCESS)
    return RINGCC_SUCCESS;
  return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                        "%s inside a group on rank %d: out of memory to keep "
                        "it", fn, comm->rank);
}

/* ---- a communicator's share of a group: a batch ------------------------- */

struct batch {
  struct ringcc_comm *comm;
  struct rec *colls; /* its collectives, in call order */
  int ncolls;
  struct rcc_p2p_op *p2p; /* its sends and receives, in call order */
  int np2p;
  struct ringcc_request *req; /* told when it is done */
  struct batch *next;         /* in its progress thread's queue */
};

static void batch_free(struct batch *b) {
  for (int i = 0; i < b->ncolls; i++)
    b->colls[i].drop(b->colls[i].call);
  free(b->colls);
  free(b->p2p);
  free(b);
}

/* The first of b's operations from i on that is a send (send 1) or a
 * receive (0) to or from this rank itself. */
static int next_self(const struct batch *b, int i, int send) {
  while (!(b->p2p[i].peer == b->comm->rank && b->p2p[i].send == send))
    i++;
  return i;
}

/* Whether the group's sends to this rank itself match its receives from
 * it (the k-th send the k-th receive, of the same bytes). */
static ringcc_result_t self_match(struct batch *b, int *nsend) {
  struct ringcc_comm *comm = b->comm;
  int nrecv = 0;
  *nsend = 0;
  for (int i = 0; i < b->np2p; i++)
    if (b->p2p[i].peer == comm->rank)
      b->p2p[i].send ? (*nsend)++ : nrecv++;
  if (*nsend != nrecv)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "ringcc_group_end on rank %d: the group sends %d "
                          "message(s) to this rank itself and receives %d "
                          "from it; each send to oneself needs its receive "
                          "in the same group", comm->rank, *nsend, nrecv);
  for (int k = 0, s = -1, r = -1; k < *nsend; k++) {
    s = next_self(b, s + 1, 1);
    r = next_self(b, r + 1, 0);
    size_t sb = b->p2p[s].count * ringcc_datatype_size(b->p2p[s].dt);
    size_t rb = b->p2p[r].count * ringcc_datatype_size(b->p2p[r].dt);
    if (sb != rb)
      return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                            "ringcc_group_end on rank %d: send %d to this "
                            "rank itself is %zu bytes, its matching receive "
                            "%zu (send and recv counts and datatypes must "
                            "agree)", comm->rank, k, sb, rb);
  }
  return RINGCC_SUCCESS;
}

/* The send to this rank that matches the k-th receive from it: the k-th,
 * copied where they match (else none is, and the result says why); the
 * operations with other ranks go to the front (*nremote of them) and run
 * all the same, so that no peer waits for a message this rank owes it. */
static ringcc_result_t self_copies(struct batch *b, int *nremote) {
  struct ringcc_comm *comm = b->comm;
  int nsend = 0, n = 0;
  ringcc_result_t r = self_match(b, &nsend);
  for (int k = 0, s = -1, q = -1; k < nsend && r == RINGCC_SUCCESS; k++) {
    s = next_self(b, s + 1, 1);
    q = next_self(b, q + 1, 0);
    size_t bytes = b->p2p[s].count * ringcc_datatype_size(b->p2p[s].dt);
    if (bytes > 0)
      memmove(b->p2p[q].buf, b->p2p[s].buf, bytes);
  }
  for (int i = 0; i < b->np2p; i++) /* the others, in order, to the front */
    if (b->p2p[i].peer != comm->rank)
      b->p2p[n++] = b->p2p[i];
  *nremote = n;
  return r;
}

static ringcc_result_t run_p2p(struct batch *b) {
  struct ringcc_comm *comm = b->comm;
  if (comm->aborted || rcc_comm_fatal(comm) != RINGCC_SUCCESS) {
    ringcc_result_t code =
        comm->aborted ? RINGCC_ERR_ABORTED : rcc_comm_fatal(comm);
    RCC_WARN(comm->rank, "ringcc_group_end on rank %d: the communicator is "
             "unusable after an earlier failure: %s", comm->rank,
             comm->last_error);
    return code;
  }
  int nremote = 0;
  ringcc_result_t self = self_copies(b, &nremote), r = RINGCC_SUCCESS;
  comm->failed_locally = 0;
  if (nremote > 0) {
    RCC_PUT(comm->seq, comm->seq + 1); /* the hang report reads it */
    struct rcc_stats *st = comm->stats;
    struct rcc_stats_mark mark = {.sent = st->sent_total};
    if (st->timing)
      rcc_stats_time_begin(st, &mark);
    r = rcc_exec_host_p2p(comm, b->p2p, nremote, 1);
    /* Each counted in its row as a blocking call is, by what moved it; the
     * batch's bytes on the wire, its time and its waits go to its first. */
    for (int i = 0; i < nremote && r == RINGCC_SUCCESS; i++) {
      const struct rcc_p2p_op *op = &b->p2p[i];
      int coll = op->send ? RCC_COLL_SEND : RCC_COLL_RECV;
      rcc_stats_count(st, coll, op->ran,
                      op->count * ringcc_datatype_size(op->dt), &mark);
      if (i == 0 && st->timing)
        (void)rcc_stats_time_end(st, coll, op->ran, &mark);
      mark.sent = st->sent_total;
    }
  }
  /* A mismatch of this rank with itself moved nothing: local. */
  if (r == RINGCC_SUCCESS && self != RINGCC_SUCCESS) {
    comm->failed_locally = 1;
    r = self;
  }
  /* Data moved: the FIFOs are in an unknown state after a failure, unless
   * the executor marked it local. */
  return rcc_comm_end_call(comm, r);
}

/* Runs the batch inside its communicator; the first failure ends it. */
static ringcc_result_t batch_run(struct batch *b, const char *fn) {
  ringcc_result_t r = rcc_comm_enter(b->comm, fn, RCC_ENTER_CALL);
  if (r != RINGCC_SUCCESS)
    return r;
  rcc_links_use(b->comm);
  for (int i = 0; i < b->ncolls && r == RINGCC_SUCCESS; i++)
    r = b->colls[i].run(b->colls[i].call);
  if (r == RINGCC_SUCCESS && b->np2p > 0)
    r = run_p2p(b);
  rcc_comm_leave(b->comm, RCC_ENTER_CALL);
  return r;
}

/* The group's records, one batch per communicator (in order of first use);
 * the records are consumed. NULL with *r set when out of memory. */
static struct batch *make_batches(struct rec *recs, int n, int *nbatches,
                                  ringcc_result_t *r) {
  struct batch *head = NULL, **tail = &head;
  int nb = 0;
  *r = RINGCC_SUCCESS;
  for (int i = 0; i < n; i++) {
    if (recs[i].comm == NULL)
      continue; /* taken by an earlier batch */
    struct batch *b = calloc(1, sizeof(*b));
    int nc = 0, np = 0;
    for (int j = i; j < n; j++)
      if (recs[j].comm == recs[i].comm)
        recs[j].call ? nc++ : np++;
    if (b != NULL) {
      b->comm = recs[i].comm;
      b->colls = nc ? malloc((size_t)nc * sizeof(*b->colls)) : NULL;
      b->p2p = np ? malloc((size_t)np * sizeof(*b->p2p)) : NULL;
    }
    if (b == NULL || (nc && !b->colls) || (np && !b->p2p)) {
      if (b != NULL)
        free(b->colls), free(b->p2p), free(b);
      *r = RINGCC_ERR_OUT_OF_MEMORY;
      break;
    }
    struct ringcc_comm *comm = recs[i].comm;
    for (int j = i; j < n; j++) {
      if (recs[j].comm != comm)
        continue;
      if (recs[j].call)
        b->colls[b->ncolls++] = recs[j];
      else
        b->p2p[b->np2p++] = recs[j].p2p;
      recs[j].comm = NULL;
    }
    *tail = b;
    tail = &b->next;
    nb++;
  }
  for (int i = 0; i < n; i++) /* what no batch took (out of memory) */
    if (recs[i].comm != NULL && recs[i].call != NULL)
      recs[i].drop(recs[i].call);
  if (*r != RINGCC_SUCCESS) {
    while (head != NULL) {
      struct batch *next = head->next;
      batch_free(head);
      head = next;
    }
    return NULL;
  }
  *nbatches = nb;
  return head;
}

/* ---- requests ------------------------------------------------------------ */

struct ringcc_request {
  pthread_mutex_t lock;
  pthread_cond_t done;
  int pending;            /* batches not finished */
  ringcc_result_t result; /* the first failure */
};

static struct ringcc_request *request_new(int pending) {
  struct ringcc_request *q = calloc(1, sizeof(*q));
  if (q == NULL)
    return NULL;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->done, NULL);
  q->pending = pending;
  return q;
}

static void request_free(struct ringcc_request *q) {
  pthread_cond_destroy(&q->done);
  pthread_mutex_destroy(&q->lock);
  free(q);
}

static void request_finish(struct ringcc_request *q, ringcc_result_t r) {
  pthread_mutex_lock(&q->lock);
  if (q->result == RINGCC_SUCCESS)
    q->result = r;
  if (--q->pending == 0)
    pthread_cond_broadcast(&q->done);
  pthread_mutex_unlock(&q->lock);
}

/* ---- progress threads ------------------------------------------------------ */

struct worker {
  struct ringcc_comm *comm; /* the key: compared, never read through */
  int pid;                  /* the process whose thread it is */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake; /* a batch came, or stop */
  pthread_cond_t idle; /* the queue emptied */
  struct batch *head, *tail;
  int running; /* a batch is being run */
  int stop;    /* 1: end when the queue is empty; 2: abort what is queued */
  struct worker *next;
};

static pthread_mutex_t g_workers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct worker *g_workers;
static int g_nworkers; /* read without the lock: 0 skips the look-up */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void before_fork(void) { pthread_mutex_lock(&g_workers_lock); }
static void after_fork(void) { pthread_mutex_unlock(&g_workers_lock); }
static void setup(void) { pthread_atfork(before_fork, after_fork, after_fork); }

static void *worker_main(void *arg) {
  struct worker *w = arg;
  pthread_mutex_lock(&w->lock);
  for (;;) {
    while (w->head == NULL && !w->stop)
      pthread_cond_wait(&w->wake, &w->lock);
    if (w->head == NULL)
      break;
    struct batch *b = w->head;
    w->head = b->next;
    if (w->head == NULL)
      w->tail = NULL;
    w->running = 1;
    int aborted = w->stop == 2;
    pthread_mutex_unlock(&w->lock);
    ringcc_result_t r = aborted ? RINGCC_ERR_ABORTED
                                : batch_run(b, "ringcc_group_end_async");
    struct ringcc_request *q = b->req;
    batch_free(b);
    /* Idle and done in one step under the worker's lock: a destroy that
     * follows the wait finds nothing in flight, and a blocking call that
     * drained the queue (rcc_group_drain) finds the request done. Lock
     * order: w->lock, then the request's. */
    pthread_mutex_lock(&w->lock);
    w->running = 0;
    request_finish(q, r);
    if (w->head == NULL)
      pthread_cond_broadcast(&w->idle);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

/* comm's progress thread (made where make is set), or NULL. Under
 * g_workers_lock. */
static struct worker *worker_find(struct ringcc_comm *comm) {
  for (struct worker *w = g_workers; w != NULL; w = w->next)
    if (w->comm == comm)
      return w;
  return NULL;
}

static struct worker *worker_get(struct ringcc_comm *comm) {
  struct worker *w = worker_find(comm);
  if (w != NULL)
    return w;
  w = calloc(1, sizeof(*w));
  if (w == NULL)
    return NULL;
  w->comm = comm;
  w->pid = (int)getpid();
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->wake, NULL);
  pthread_cond_init(&w->idle, NULL);
  if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
    pthread_cond_destroy(&w->idle);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return NULL;
  }
  w->next = g_workers;
  g_workers = w;
  __atomic_store_n(&g_nworkers, g_nworkers + 1, __ATOMIC_RELEASE);
  return w;
}

/* Queues the batches on their communicators' threads; those that cannot
 * be (no thread) finish at once with the error. */
static void submit(struct batch *list, struct ringcc_request *q) {
  pthread_once(&g_once, setup);
  pthread_mutex_lock(&g_workers_lock);
  while (list != NULL) {
    struct batch *b = list;
    list = b->next;
    b->next = NULL;
    b->req = q;
    struct worker *w = worker_get(b->comm);
    if (w == NULL) {
      ringcc_result_t r = rcc_comm_error(
          b->comm, RINGCC_ERR_SYSTEM, "ringcc_group_end on rank %d: cannot "
          "start the communicator's progress thread", b->comm->rank);
      batch_free(b);
      request_finish(q, r);
      continue;
    }
    pthread_mutex_lock(&w->lock);
    if (w->tail != NULL)
      w->tail->next = b;
    else
      w->head = b;
    w->tail = b;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
  }
  pthread_mutex_unlock(&g_workers_lock);
}

/* 1 when comm has nothing queued or running on its progress thread. */
static int comm_idle(struct ringcc_comm *comm) {
  if (__atomic_load_n(&g_nworkers, __ATOMIC_ACQUIRE) == 0)
    return 1;
  pthread_mutex_lock(&g_workers_lock);
  struct worker *w = worker_find(comm);
  int idle = 1;
  if (w != NULL && w->pid == (int)getpid()) {
    pthread_mutex_lock(&w->lock);
    idle = w->head == NULL && !w->running;
    pthread_mutex_unlock(&w->lock);
  }
  pthread_mutex_unlock(&g_workers_lock);
  return idle;
}

void rcc_group_drain(struct ringcc_comm *comm) {
  if (__atomic_load_n(&g_nworkers, __ATOMIC_ACQUIRE) == 0)
    return;
  pthread_mutex_lock(&g_workers_lock);
  struct worker *w = worker_find(comm);
  if (w != NULL && w->pid == (int)getpid()) {
    pthread_mutex_lock(&w->lock);
    pthread_mutex_unlock(&g_workers_lock); /* w stays: destroy refuses */
    while (w->head != NULL || w->running)
      pthread_cond_wait(&w->idle, &w->lock);
    pthread_mutex_unlock(&w->lock);
    return;
  }
  pthread_mutex_unlock(&g_workers_lock);
}

ringcc_result_t rcc_group_comm_close(struct ringcc_comm *comm, const char *fn,
                                     int is_abort) {
  if (__atomic_load_n(&g_nworkers, __ATOMIC_ACQUIRE) == 0)
    return RINGCC_SUCCESS;
  pthread_once(&g_once, setup);
  pthread_mutex_lock(&g_workers_lock);
  struct worker **at = &g_workers;
  while (*at != NULL && (*at)->comm != comm)
    at = &(*at)->next;
  struct worker *w = *at;
  if (w == NULL) {
    pthread_mutex_unlock(&g_workers_lock);
    return RINGCC_SUCCESS;
  }
  if (w->pid != (int)getpid()) { /* a forked child: the thread is not here */
    *at = w->next;
    __atomic_store_n(&g_nworkers, g_nworkers - 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_workers_lock);
    return RINGCC_SUCCESS; /* its locks may be held: w is not touched */
  }
  pthread_mutex_lock(&w->lock);
  int in_flight = (w->head != NULL) + w->running;
  if (in_flight && !is_abort) {
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_unlock(&g_workers_lock);
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "%s on rank %d: requests are in flight on this "
                          "communicator (ringcc_group_end_async); "
                          "ringcc_wait for them first", fn, comm->rank);
  }
  w->stop = is_abort ? 2 : 1;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->lock);
  *at = w->next;
  __atomic_store_n(&g_nworkers, g_nworkers - 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_workers_lock);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->idle);
  pthread_cond_destroy(&w->wake);
  pthread_mutex_destroy(&w->lock);
  free(w);
  return RINGCC_SUCCESS;
}

/* ---- the public calls ------------------------------------------------------ */

RINGCC_API ringcc_result_t ringcc_group_start(void) {
  g_group.depth++;
  return RINGCC_SUCCESS;
}

/* Ends the outermost group: its batches, or NULL when it kept nothing. */
static ringcc_result_t end_group(const char *fn, struct batch **list,
                                 int *nbatches) {
  struct group *g = &g_group;
  *list = NULL;
  *nbatches = 0;
  g->depth = 0;
  ringcc_result_t r = RINGCC_SUCCESS;
  if (g->n > 0)
    *list = make_batches(g->recs, g->n, nbatches, &r);
  g->n = 0;
  free(g->recs); /* nothing stays with the thread (it may exit) */
  g->recs = NULL;
  g->cap = 0;
  if (r != RINGCC_SUCCESS)
    return rcc_thread_error(r, "%s: out of memory for the group's work", fn);
  return RINGCC_SUCCESS;
}

static ringcc_result_t not_in_group(const char *fn) {
  return rcc_thread_error(RINGCC_ERR_INVALID_USAGE,
                          "%s: this thread is not in a group (no "
                          "ringcc_group_start before it)", fn);
}

static ringcc_result_t wait_request(struct ringcc_request *q) {
  pthread_mutex_lock(&q->lock);
  while (q->pending > 0)
    pthread_cond_wait(&q->done, &q->lock);
  ringcc_result_t r = q->result;
  pthread_mutex_unlock(&q->lock);
  request_free(q);
  return r;
}

RINGCC_API ringcc_result_t ringcc_group_end(void) {
  static const char fn[] = "ringcc_group_end";
  if (g_group.depth == 0)
    return not_in_group(fn);
  if (g_group.depth > 1) { /* an inner group: the outermost end runs it */
    g_group.depth--;
    return RINGCC_SUCCESS;
  }
  struct batch *list;
  int nb;
  ringcc_result_t r = end_group(fn, &list, &nb);
  if (r != RINGCC_SUCCESS || list == NULL)
    return r;
  if (nb == 1 && comm_idle(list->comm)) { /* on this thread */
    r = batch_run(list, fn);
    batch_free(list);
    return r;
  }
  struct ringcc_request *q = request_new(nb);
  if (q == NULL) {
    while (list != NULL) {
      struct batch *next = list->next;
      batch_free(list);
      list = next;
    }
    return rcc_thread_error(RINGCC_ERR_OUT_OF_MEMORY,
                            "%s: out of memory for the group's work", fn);
  }
  submit(list, q);
  return wait_request(q);
}

RINGCC_API ringcc_result_t ringcc_group_end_async(ringcc_request_t *req) {
  static const char fn[] = "ringcc_group_end_async";
  if (req == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "%s: argument 'req' is NULL", fn);
  *req = NULL;
  if (g_group.depth == 0)
    return not_in_group(fn);
  if (g_group.depth > 1)
    return rcc_thread_error(RINGCC_ERR_INVALID_USAGE,
                            "%s: ends the outermost group only (this thread "
                            "is %d groups deep; end the inner ones with "
                            "ringcc_group_end)", fn, g_group.depth);
  struct batch *list;
  int nb;
  struct ringcc_request *q = request_new(0);
  if (q == NULL)
    return rcc_thread_error(RINGCC_ERR_OUT_OF_MEMORY,
                            "%s: out of memory for the request", fn);
  ringcc_result_t r = end_group(fn, &list, &nb);
  if (r != RINGCC_SUCCESS) {
    request_free(q);
    return r;
  }
  q->pending = nb;
  submit(list, q);
  *req = q;
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_test(ringcc_request_t req, int *done) {
  if (req == NULL || done == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_test: argument '%s' is NULL",
                            req == NULL ? "req" : "done");
  pthread_mutex_lock(&req->lock);
  int finished = req->pending == 0;
  ringcc_result_t r = req->result;
  pthread_mutex_unlock(&req->lock);
  *done = finished;
  if (!finished)
    return RINGCC_SUCCESS;
  request_free(req);
  return r;
}

RINGCC_API ringcc_result_t ringcc_wait(ringcc_request_t req) {
  if (req == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_wait: argument 'req' is NULL");
  return wait_request(req);
}
