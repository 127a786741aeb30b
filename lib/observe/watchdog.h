/*
 * watchdog.h - a thread that watches for a communicator while its device
 * kernels may run (watchdog.c).
 *
 * A device collective is enqueued and the call returns: no host thread waits
 * in it, so nobody would look at the peers the kernels wait for. While the
 * kernels the host knows of (enqueued) have not all ended (*done, written by
 * the kernels), the watchdog
 *
 *   - every WATCH_PEERS_MS runs rcc_check_peers (failure.c): a same-host
 *     peer whose process is gone, or that named a dead rank in a shared host
 *     FIFO, is recorded - and that stores RINGCC_ERR_PEER_FAILED into the
 *     word the kernels poll (comm->fail_word), so they leave;
 *   - when a kernel starts (*started moves), tells the network engine (its
 *     notify hook), which polls only while a kernel runs (the counts that
 *     comm->kernels_started/done point to differ) and otherwise sleeps - a collective queued behind
 *     compute costs no CPU. Until the start it looks at *started after a
 *     sleep of 1/16 of the time it has waited (20 us to 1 ms), so the
 *     engine joins a kernel within about 6% of how long it was queued.
 *
 * Otherwise it sleeps on a condition variable until rcc_watchdog_kick. It
 * reads the counters through pointers, so the tests drive it with a status
 * record in plain memory and no GPU.
 */
#ifndef RCC_WATCHDOG_H
#define RCC_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>

struct ringcc_comm;
struct rcc_conn;

#define RCC_WATCH_PEERS_MS 20

struct rcc_watchdog {
  struct ringcc_comm *comm;
  const uint32_t *started;  /* kernels that started (kernel-written) */
  const uint32_t *done;     /* kernels that ended (kernel-written) */
  struct rcc_conn *engine;  /* notified when a kernel starts; or NULL */
  uint32_t enqueued;        /* kernels the host knows are coming */
  uint32_t notified;        /* engine notifications (for tests) */
  uint32_t checks;          /* rcc_check_peers rounds (for tests) */
  int running;              /* the thread exists */
  int stop;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
};

/* Starts the thread (idle until kicked). 0, or an errno value. */
int rcc_watchdog_start(struct rcc_watchdog *w, struct ringcc_comm *comm,
                       const uint32_t *started, const uint32_t *done,
                       struct rcc_conn *engine);
/* One more kernel is coming (or, from a graph's host node, about to start). */
void rcc_watchdog_kick(struct rcc_watchdog *w);
/* Whether kernels the host knows of have not all ended. */
int rcc_watchdog_pending(struct rcc_watchdog *w);
/* Ends the thread (after the kernels ended, or were aborted). */
void rcc_watchdog_stop(struct rcc_watchdog *w);

#endif /* RCC_WATCHDOG_H */
