/*
 * watchdog.c - the thread that watches peers and wakes the network engine
 * while a communicator's device kernels may run (watchdog.h).
 */
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "comm.h"
#include "error.h"
#include "failure.h"
#include "proto.h"
#include "watchdog.h"

#define MIN_SLEEP_NS 20000LL
#define MAX_SLEEP_NS 1000000LL

static uint32_t load(const uint32_t *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

int rcc_watchdog_pending(struct rcc_watchdog *w) {
  return __atomic_load_n(&w->enqueued, __ATOMIC_ACQUIRE) != load(w->done);
}

static void nap(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  nanosleep(&ts, NULL);
}

/* One look while kernels may run; returns how long to sleep. */
static int64_t look(struct rcc_watchdog *w, uint32_t *seen_started,
                    int64_t *queued_since, int64_t *next_check) {
  int64_t now = rcc_now_ns();
  uint32_t started = load(w->started), done = load(w->done);
  if (started != *seen_started) { /* a kernel started: the engine joins */
    *seen_started = started;
    if (w->engine != NULL && started != done) {
      w->engine->ops->notify(w->engine);
      __atomic_fetch_add(&w->notified, 1, __ATOMIC_RELAXED);
    }
  }
  if (now >= *next_check) {
    int dead = rcc_check_peers(w->comm);
    __atomic_fetch_add(&w->checks, 1, __ATOMIC_RELAXED);
    if (dead >= 0) /* recorded before the word existed, or by another */
      rcc_comm_tell_kernels(w->comm, RINGCC_ERR_PEER_FAILED);
    *next_check = now + RCC_WATCH_PEERS_MS * 1000000LL;
  }
  if (w->engine == NULL || started != done)
    return RCC_WATCH_PEERS_MS * 1000000LL / 4; /* peers only */
  /* Queued, not started: look again soon, sooner the fresher the wait. */
  if (*queued_since == 0)
    *queued_since = now;
  int64_t ns = (now - *queued_since) / 16;
  return ns < MIN_SLEEP_NS ? MIN_SLEEP_NS : ns > MAX_SLEEP_NS ? MAX_SLEEP_NS
                                                               : ns;
}

static void *watch(void *arg) {
  struct rcc_watchdog *w = arg;
  uint32_t seen_started = load(w->started);
  int64_t queued_since = 0, next_check = 0;
  pthread_mutex_lock(&w->lock);
  while (!w->stop) {
    if (!rcc_watchdog_pending(w)) {
      queued_since = 0;
      next_check = 0; /* the first look of a new kernel checks the peers */
      pthread_cond_wait(&w->cond, &w->lock);
      continue;
    }
    pthread_mutex_unlock(&w->lock);
    int64_t ns = look(w, &seen_started, &queued_since, &next_check);
    if (load(w->started) != load(w->done))
      queued_since = 0;
    nap(ns);
    pthread_mutex_lock(&w->lock);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

int rcc_watchdog_start(struct rcc_watchdog *w, struct ringcc_comm *comm,
                       const uint32_t *started, const uint32_t *done,
                       struct rcc_conn *engine) {
  w->comm = comm;
  w->started = started;
  w->done = done;
  w->engine = engine;
  w->enqueued = load(done);
  w->notified = w->checks = 0;
  w->stop = 0;
  w->running = 0;
  pthread_mutex_init(&w->lock, NULL);
  pthread_cond_init(&w->cond, NULL);
  int e = pthread_create(&w->thread, NULL, watch, w);
  if (e != 0) {
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    return e;
  }
  w->running = 1;
  return 0;
}

void rcc_watchdog_kick(struct rcc_watchdog *w) {
  if (!w->running)
    return;
  pthread_mutex_lock(&w->lock);
  __atomic_fetch_add(&w->enqueued, 1, __ATOMIC_ACQ_REL);
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

void rcc_watchdog_stop(struct rcc_watchdog *w) {
  if (!w->running)
    return;
  pthread_mutex_lock(&w->lock);
  w->stop = 1;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
  pthread_join(w->thread, NULL);
  pthread_cond_destroy(&w->cond);
  pthread_mutex_destroy(&w->lock);
  w->running = 0;
}
