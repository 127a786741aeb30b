/*
 * net_proxy.h - the network transport's engine: a progress thread per
 * communicator that moves FIFO slots across the network through a plugin
 * (net.h), and the connection hooks (struct rcc_conn_ops, proto.h) through
 * which a host executor drives it (net_proxy.c). Private to the network
 * transport (net.c).
 */
#ifndef RCC_NET_PROXY_H
#define RCC_NET_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "ringcc.h"

struct ringcc_comm;
struct rcc_net_plugin;
struct rcc_proxy;

/* One FIFO the proxy serves: the executor uses the other end (its struct
 * rcc_conn, bound by rcc_proxy_bind). */
struct rcc_proxy_conn {
  struct rcc_fifo *fifo;  /* local memory */
  char *data;
  uint32_t nslots;
  size_t slot_bytes;
  int is_send;            /* send: slots -> network; recv: network -> slots */
  int peer;
  struct rcc_proxy *proxy; /* set by rcc_proxy_start */
  void *net_comm;         /* the plugin's send or recv comm */
  void *mhandle;
  uint32_t posted;        /* slots handed to the plugin */
  uint32_t done;          /* slots the plugin finished */
  int bye;                /* send: goodbye posted; recv: goodbye received */
  void *bye_request;
  int failed;             /* the plugin reported an error on it */
  int64_t suspect_ns;     /* alive() first said the peer is suspected, or 0 */
  int64_t suspect_warned; /* when that was last logged */
  int tell;               /* send: 1 the FAIL message is posted, 2 done */
  int adopted;            /* a shrunk communicator's connection whose link is
                             the parent's (net.c): unused, failed */
  int kept;               /* a communicator shrunk from the proxy's uses it
                             too: no goodbye at the proxy's comm's destroy */
  int shared;             /* this connection is one a user took over
                             (rcc_proxy_share): failures on it reach users */
  int fail_heard;         /* recv: bye was set by a FAIL message, not by a
                             goodbye (a resync may re-arm it) */
  /* The resync of a link taken over (rcc_proxy_resync): send: 1 the RESYNC
   * message is due once every filled slot is posted, 2 posted, 3 done;
   * recv: 1 messages are dropped until RESYNC comes, 2 it came. */
  int resync;
  void *resync_request;
  /* Lazy links (RINGCC_NET_CONNECT=lazy), on the send connection of a
   * pair (conns[2l], conns[2l + 1] share one link): wanted by a call, and
   * when to connect (or ask the peer to) again. */
  int want;               /* set and cleared by the proxy (want_link,
                             link_made), which counts them; before it starts,
                             net.c may set it (an ask at init) */
  int device;             /* a kernel fills or drains this FIFO (a device
                             kind's): it calls no hook */
  int parking;            /* recv: the plugin parks payloads that will land
                             (plugin->park), since the executor first
                             landed one here */
  int64_t next_try;
  int64_t first_refused; /* the first connect that found no listener */
  void *tell_request;
  void *request[RCC_FIFO_MAX_SLOTS];
  /* send: where slot k's bytes are, when not in the slot (lent by the
   * executor: ops->lend). NULL: the slot. */
  const char *from[RCC_FIFO_MAX_SLOTS];
  /* recv: where slot k's message lands, when not in the slot (ops->land).
   * NULL: the slot. */
  char *to[RCC_FIFO_MAX_SLOTS];
};

/* Links made on first use (net.c, RINGCC_NET_CONNECT=lazy): the listener
 * stays open, and the proxy connects a pair's link (conns[2l] and
 * conns[2l + 1]) when a call first needs it, or takes it from the listener.
 * Both callbacks run under the proxy's lock, in the proxy thread or in an
 * executor that drives it. */
struct rcc_proxy_links {
  void *arg;
  void *listen_comm;
  /* Link l now: this rank connects it (*asked 0), or asks its peer to
   * connect (*asked 1: the peer connects the pairs where it is the lower
   * rank). RINGCC_ERR_TIMEOUT: no listener answered by deadline_ns; try
   * again later. *last_errno: the plugin's (net.h), where it fails: the
   * errno of its last connect() (ECONNREFUSED: the peer's host answered
   * and nothing listens; else no answer), or 0; err says it in words. */
  ringcc_result_t (*connect)(void *arg, int l, int *asked,
                             int64_t deadline_ns, int *last_errno, char *err,
                             size_t errlen);
  /* The next connection that proved the key, by deadline_ns: *l the link it
   * made, or -1 (refused: not one this rank expects); *asked 1 where it
   * only asks this rank to connect link *l. RINGCC_ERR_TIMEOUT: none. */
  ringcc_result_t (*accept)(void *arg, int *l, int *asked,
                            int64_t deadline_ns, char *err, size_t errlen);
};

/* Starts the proxy thread for conns (the plugin's connections are set up;
 * with links, only those made at init). links: NULL, or the lazy links. */
ringcc_result_t rcc_proxy_start(struct ringcc_comm *comm,
                                const struct rcc_net_plugin *plugin,
                                struct rcc_proxy_conn *conns, int nconns,
                                const struct rcc_proxy_links *links,
                                void *state, struct rcc_proxy **out);
/* The executor's end of c: the FIFO, and the hooks that drive the proxy. */
void rcc_proxy_bind(struct rcc_conn *end, struct rcc_proxy_conn *c);
/* Sends every filled slot, then a goodbye on every send connection, so
 * peers can tell a rank that left from a rank that died. */
void rcc_proxy_drain(struct rcc_proxy *proxy, int64_t deadline_ns);
void rcc_proxy_stop(struct rcc_proxy *proxy);
/* In a child forked from the process that started it (destroy after fork):
 * the thread is not here; frees the memory and the doorbell only. */
void rcc_proxy_forget(struct rcc_proxy *proxy);

/* Links shared with a communicator shrunk from the proxy's
 * (ringcc_comm_shrink), net_proxy_share.c has the rules. At most
 * this many ranks (the blob's map of them, net.c). */
#define RCC_PROXY_SHARE_MAX 1024
/* The proxy's connection behind an executor's end, or NULL (not one). */
struct rcc_proxy_conn *rcc_proxy_engine(const struct rcc_conn *end);
/* The state rcc_proxy_start was given (net.c's). */
void *rcc_proxy_state(const struct rcc_proxy *proxy);
/* Communicators besides the proxy's own that use its connections. forked:
 * called in a process forked from the one that started the proxy (its
 * lock is not taken: the thread is not here, and may have held it). */
int rcc_proxy_users(struct rcc_proxy *proxy, int forked);
/* Whether a communicator shrunk from parent may use c: its link is made and
 * sound, and parent is the proxy's comm or its last user. */
int rcc_proxy_shareable(struct rcc_proxy_conn *c,
                        const struct ringcc_comm *parent);
/* comm uses c, whose peer is its rank `rank`; RINGCC_ERR_OUT_OF_MEMORY, or
 * RINGCC_ERR_NETWORK where c failed since rcc_proxy_shareable said yes. */
ringcc_result_t rcc_proxy_share(struct rcc_proxy_conn *c,
                                struct ringcc_comm *comm, int rank);
/* Resyncs the n connections (each taken over with rcc_proxy_share) at a
 * message boundary, so the new user starts on empty streams: a send
 * connection posts a RESYNC message after everything the proxy's comm put
 * in its FIFO (FAIL messages included); a receive connection drops what
 * came and comes until its peer's RESYNC (a FAIL message heard before
 * included). Waits until every RESYNC went out and came in, or deadline_ns
 * (RINGCC_ERR_TIMEOUT), or a connection fails (its error); err says which
 * connection. Afterwards a send FIFO's tail and a receive FIFO's head are
 * where the new user starts. */
ringcc_result_t rcc_proxy_resync(struct rcc_proxy_conn *const *c, int n,
                                 int64_t deadline_ns, char *err,
                                 size_t errlen);
/* comm (a user, destroyed) uses none of the connections any more. */
void rcc_proxy_unshare(struct rcc_proxy *proxy, struct ringcc_comm *comm,
                       int forked);
/* Deregisters and closes c's plugin connection, if it has one (the proxy
 * thread halted): destroy, and the ends no user keeps at a hand-over. */
void rcc_proxy_conn_close(const struct rcc_net_plugin *plugin,
                          struct rcc_proxy_conn *c);
/* The proxy's comm is destroyed while users remain: the connections no
 * user keeps end (goodbyes first, unless forked), and the first user takes
 * the proxy over, in its numbering; returns it. */
struct ringcc_comm *rcc_proxy_hand_over(struct rcc_proxy *proxy, int forked,
                                        int64_t deadline_ns);

#endif /* RCC_NET_PROXY_H */
