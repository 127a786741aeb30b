/*
 * live.c - which communicators are alive, and which calls are inside them.
 *
 * A ringcc_comm_t is a pointer the user keeps, and may keep too long: after
 * destroy, in another thread while destroy runs, or in a child after fork().
 * So every public call enters through rcc_comm_enter, which
 *   - looks the pointer up in a table of live communicators (an open-addressed
 *     hash set) before it reads anything behind it: a handle used after
 *     destroy is refused without touching freed memory;
 *   - checks the magic word (set at init, cleared at destroy): a handle whose
 *     memory was overwritten, or that is no communicator, is refused too;
 *   - compares the fork generation (counted by a pthread_atfork handler)
 *     with the one of the process that made the communicator: in a forked
 *     child every call is RINGCC_ERR_INVALID_USAGE naming fork, and destroy
 *     frees the child's copy of the memory only;
 *   - counts the call in (users), and a call that moves data (a collective,
 *     split) marks the communicator busy: one at a time, and destroy refuses
 *     while one runs (RINGCC_ERR_INVALID_USAGE) instead of freeing under it.
 * Destroy and abort take the communicator out of the table once no call is
 * inside; abort first makes the blocked call leave (comm->aborted).
 *
 * Cost: a mutex taken twice per call (about 40 ns uncontended), against the
 * microseconds of the smallest collective.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "live.h"
#include "log.h"

#define COMM_MAGIC 0x52434f4du /* "RCOM" */
#define TOMBSTONE ((struct ringcc_comm *)1)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ringcc_comm **g_slots; /* cap entries: NULL, TOMBSTONE, live */
static size_t g_cap, g_used;         /* used: live and tombstones */
static uint64_t g_fork_gen;          /* forks of this process's ancestors */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char not_live[] =
    "argument 'comm' is not a live communicator (destroyed already, never "
    "made by ringcc_comm_init, or its memory was overwritten)";

static void before_fork(void) { pthread_mutex_lock(&g_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void after_fork_child(void) {
  g_fork_gen++;
  pthread_mutex_unlock(&g_lock);
}

static void setup(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static size_t hash(const struct ringcc_comm *c) {
  uint64_t x = (uint64_t)(uintptr_t)c;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return (size_t)x;
}

/* The slot of c, or -1. Under g_lock. */
static long find(const struct ringcc_comm *c) {
  for (size_t i = 0, k = hash(c); g_cap > 0 && i < g_cap; i++) {
    size_t s = (k + i) & (g_cap - 1);
    if (g_slots[s] == NULL)
      return -1;
    if (g_slots[s] == c)
      return (long)s;
  }
  return -1;
}

static void put(struct ringcc_comm **slots, size_t cap, struct ringcc_comm *c) {
  for (size_t i = 0, k = hash(c);; i++) {
    size_t s = (k + i) & (cap - 1);
    if (slots[s] == NULL || slots[s] == TOMBSTONE) {
      slots[s] = c;
      return;
    }
  }
}

/* Room for one more (tombstones dropped): 0, or -1 out of memory. */
static int reserve(void) {
  if ((g_used + 1) * 2 <= g_cap)
    return 0;
  size_t live = 0;
  for (size_t s = 0; s < g_cap; s++)
    live += g_slots[s] != NULL && g_slots[s] != TOMBSTONE;
  size_t cap = 16;
  while (cap < (live + 1) * 4)
    cap *= 2;
  struct ringcc_comm **slots = calloc(cap, sizeof(*slots));
  if (slots == NULL)
    return -1;
  for (size_t s = 0; s < g_cap; s++)
    if (g_slots[s] != NULL && g_slots[s] != TOMBSTONE)
      put(slots, cap, g_slots[s]);
  free(g_slots);
  g_slots = slots;
  g_cap = cap;
  g_used = live;
  return 0;
}

int rcc_live_add(struct ringcc_comm *comm) {
  pthread_once(&g_once, setup);
  pthread_mutex_lock(&g_lock);
  int ok = reserve() == 0;
  if (ok) {
    comm->magic = COMM_MAGIC;
    comm->pid = (int)getpid();
    comm->fork_gen = g_fork_gen;
    put(g_slots, g_cap, comm);
    g_used++;
  }
  pthread_mutex_unlock(&g_lock);
  return ok ? 0 : -1;
}

/* comm is a live communicator (under g_lock): its memory is read only once
 * the table says it is one. */
static int live(const struct ringcc_comm *comm) {
  return find(comm) >= 0 && comm->magic == COMM_MAGIC;
}

static ringcc_result_t forked_error(struct ringcc_comm *comm, const char *fn) {
  return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                        "%s on rank %d: this communicator belongs to process "
                        "%d, and this process (%d) is a child forked from "
                        "it: a communicator does not survive fork(); make a "
                        "new one here (ringcc_comm_destroy frees the child's "
                        "copy without touching the parent's)", fn, comm->rank,
                        comm->pid, (int)getpid());
}

ringcc_result_t rcc_comm_enter(struct ringcc_comm *comm, const char *fn,
                               int kind) {
  if (comm == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "%s: argument 'comm' is NULL", fn);
  pthread_mutex_lock(&g_lock);
  if (!live(comm)) {
    pthread_mutex_unlock(&g_lock);
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                            not_live);
  }
  if (comm->fork_gen != g_fork_gen) {
    pthread_mutex_unlock(&g_lock);
    return forked_error(comm, fn);
  }
  if (comm->closing) {
    pthread_mutex_unlock(&g_lock);
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "%s on rank %d: another thread is destroying (or "
                          "aborting) this communicator", fn, comm->rank);
  }
  if (kind == RCC_ENTER_CALL && comm->busy) {
    const char *inside = comm->inside;
    pthread_mutex_unlock(&g_lock);
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "%s on rank %d: another thread is using this "
                          "communicator (inside %s); a communicator is used "
                          "by one thread at a time", fn, comm->rank, inside);
  }
  if (kind == RCC_ENTER_CALL) {
    __atomic_store_n(&comm->busy, 1, __ATOMIC_RELEASE);
    comm->inside = fn;
  }
  comm->users++;
  pthread_mutex_unlock(&g_lock);
  return RINGCC_SUCCESS;
}

void rcc_comm_leave(struct ringcc_comm *comm, int kind) {
  pthread_mutex_lock(&g_lock);
  if (kind == RCC_ENTER_CALL)
    __atomic_store_n(&comm->busy, 0, __ATOMIC_RELEASE);
  comm->users--;
  pthread_mutex_unlock(&g_lock);
}

int rcc_live_begin_close(struct ringcc_comm *comm, const char *fn,
                         int is_abort, ringcc_result_t *code) {
  *code = RINGCC_SUCCESS;
  if (comm == NULL) {
    *code = rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                             "%s: argument 'comm' is NULL", fn);
    return RCC_CLOSE_REFUSED;
  }
  pthread_once(&g_once, setup);
  pthread_mutex_lock(&g_lock);
  long slot = find(comm);
  if (!live(comm)) {
    pthread_mutex_unlock(&g_lock);
    *code = rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT, "%s: %s", fn,
                             not_live);
    return RCC_CLOSE_REFUSED;
  }
  if (comm->fork_gen != g_fork_gen) { /* the parent's threads are not here */
    if (slot >= 0)
      g_slots[slot] = TOMBSTONE;
    comm->magic = 0;
    pthread_mutex_unlock(&g_lock);
    RCC_INFO(comm->rank, "%s in process %d, a child forked from process %d: "
             "freeing this copy of the communicator only", fn, (int)getpid(),
             comm->pid);
    return RCC_CLOSE_FORKED;
  }
  if (comm->closing) {
    pthread_mutex_unlock(&g_lock);
    *code = rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                           "%s on rank %d: another thread is destroying (or "
                           "aborting) this communicator already", fn,
                           comm->rank);
    return RCC_CLOSE_REFUSED;
  }
  if (!is_abort && comm->busy) {
    const char *inside = comm->inside;
    unsigned long long seq = (unsigned long long)RCC_GET(comm->seq);
    pthread_mutex_unlock(&g_lock);
    *code = rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                           "%s on rank %d: another thread is inside %s (seq "
                           "%llu) on this communicator; destroy it after that "
                           "call returns, or stop the call with "
                           "ringcc_comm_abort", fn, comm->rank, inside, seq);
    return RCC_CLOSE_REFUSED;
  }
  comm->closing = 1;
  if (is_abort)
    comm->aborted = 1;
  pthread_mutex_unlock(&g_lock);
  return RCC_CLOSE_OPEN;
}

int rcc_live_end_close(struct ringcc_comm *comm, int wait_ms) {
  struct timespec tick = {0, 1000000}; /* 1 ms */
  for (int waited = 0;; waited++) {
    pthread_mutex_lock(&g_lock);
    int inside = comm->users;
    if (inside == 0 || waited >= wait_ms) {
      long slot = find(comm);
      if (slot >= 0)
        g_slots[slot] = TOMBSTONE;
      comm->magic = 0;
      pthread_mutex_unlock(&g_lock);
      return inside == 0;
    }
    pthread_mutex_unlock(&g_lock);
    nanosleep(&tick, NULL);
  }
}

int rcc_live_wait_idle(struct ringcc_comm *comm, int64_t wait_ms,
                       const char **inside) {
  struct timespec tick = {0, 1000000}; /* 1 ms */
  for (int64_t waited = 0;; waited++) {
    pthread_mutex_lock(&g_lock);
    int busy = comm->busy;
    *inside = busy ? comm->inside : NULL;
    pthread_mutex_unlock(&g_lock);
    if (!busy)
      return 1;
    if (waited >= wait_ms)
      return 0;
    nanosleep(&tick, NULL);
  }
}

RINGCC_API const char *ringcc_comm_last_error(ringcc_comm_t comm) {
  static const char msg[] = "ringcc_comm_last_error: argument 'comm' is not "
                            "a live communicator (destroyed already, never "
                            "made by ringcc_comm_init, or its memory was "
                            "overwritten)";
  if (comm == NULL)
    return rcc_thread_last_error();
  pthread_mutex_lock(&g_lock);
  const char *s = live(comm) ? comm->last_error : msg;
  pthread_mutex_unlock(&g_lock);
  return s;
}
