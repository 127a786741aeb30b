/*
 * net_proxy_int.h - the network proxy's own state, shared by its two files:
 * net_proxy.c (the engine) and net_proxy_share.c (connections shared with
 * shrunk communicators). Private to them.
 */
#ifndef RCC_NET_PROXY_INT_H
#define RCC_NET_PROXY_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdint.h>

#include "error.h"
#include "net_proxy.h"

struct rcc_proxy {
  struct ringcc_comm *comm;
  const struct rcc_net_plugin *plugin;
  struct rcc_proxy_conn *conns;
  int nconns;
  int doorbell;
  volatile int stop;
  volatile int closing;    /* destroy: send goodbyes once drained */
  volatile int bye_done;   /* every goodbye went out, and every peer's
                              came in (or BYE_WAIT_MS passed) */
  int64_t bye_wait_until;  /* progress_goodbye: for the peers' goodbyes */
  volatile int byes_out;   /* this rank's goodbyes went out */
  volatile int told;       /* every FAIL message went out, or TELL_MS passed */
  int64_t tell_deadline;
  /* The first connection that failed, published after the round that saw
   * it, so that what its peer sent before it went is read first. */
  struct rcc_proxy_conn *fail_conn;
  ringcc_result_t fail_code;
  int64_t next_link_check; /* check_links */
  char fail_err[RCC_ERRLEN];
  int fail_published;
  pthread_t thread;
  struct pollfd *pfds;
  int *pconn;          /* the connection of each of pfds (-1: doorbell) */
  /* Rounds run under lock, in the proxy thread or in the executor (push). */
  pthread_mutex_t lock;
  volatile int driven; /* the executor polls the sockets (drive) */
  struct pollfd *xfds; /* the executor's poll set */
  int *xconn;          /* the connection of each of xfds */
  /* Lazy links (RINGCC_NET_CONNECT=lazy): connect == NULL where every link
   * was made at init. */
  struct rcc_proxy_links links;
  int listen_now; /* listener_fds: the listener has a connection to take */
  /* Links wanted and not made yet (want set, no net_comm, not failed):
   * progress_links walks the links only while there is one, or while a
   * device FIFO may ask for one (device_due). */
  int nwant;
  int device_links;      /* device send FIFOs on links not made at init */
  int device_seen_valid; /* device_seen holds a count already */
  uint32_t device_seen;  /* kernels_done at the last look at them */
  /* The other communicators that use some of the connections (shrunk from
   * comm, or from one of these: a chain, each one's ranks among the
   * previous one's), under lock; and whose state (net.c) the connections
   * are. */
  struct proxy_user *users;
  int nusers;
  void *state;
  int has_thread;
};

/* A communicator shrunk from px->comm (ringcc_comm_shrink) that uses the
 * connections to some of its peers: each of px->comm's ranks' number in
 * it (-1: not one of its peers over these connections), and the first
 * failure on a connection it uses, published to it in its numbers. */
struct proxy_user {
  struct ringcc_comm *comm;
  int *rank; /* [px->comm->nranks] */
  struct rcc_proxy_conn *fail_conn;
  ringcc_result_t fail_code;
  int fail_published;
  char fail_err[RCC_ERRLEN];
};

/* u's number for px->comm's rank p, or -1. */
static inline int user_rank(const struct proxy_user *u, int p) {
  return p >= 0 ? u->rank[p] : -1;
}

/* The immediate of the message that ends a stream taken over by a shrunk
 * communicator (rcc_proxy_resync): what came before it is the old
 * communicator's, dropped; what comes after it the new one's. The other
 * immediates (a goodbye, a FAIL message) are net_proxy.c's. */
#define IMM_RESYNC 0x10000000u

/* One round over every connection, and the link check when due; the
 * caller holds the lock. Returns progress. */
int rcc_proxy_round(struct rcc_proxy *px);
/* c failed (r, err), published at once; the caller holds the lock. */
void rcc_proxy_fail(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                    ringcc_result_t r, const char *err);

/* Starts the thread (rcc_proxy_start, and after a hand-over): 0 or the
 * errno of pthread_create. */
int rcc_proxy_run(struct rcc_proxy *px);
/* Stops the thread, if it runs (rcc_proxy_run starts it again). */
void rcc_proxy_halt(struct rcc_proxy *px);

#endif /* RCC_NET_PROXY_INT_H */
