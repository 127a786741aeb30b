/*
 * net_proxy.c - the network transport's engine: the progress thread that
 * moves FIFO slots across the network, and the hooks through which a host
 * executor drives it (net_proxy.h).
 *
 * One thread per communicator with network edges. For a send connection it
 * turns every slot the executor filled (tail) into a plugin isend and, when
 * that completes, frees the slot (head). For a receive connection it posts an
 * irecv into every free slot (head) and, when a message lands, publishes it
 * (tail) with its meta word. The executors therefore see ordinary FIFOs.
 * A host executor may keep a message's bytes in the user's buffer instead of
 * the slot: a send leaves from from[slot] (lend), a receive lands at
 * to[slot] (land); after a failed call reclaim brings them back into the
 * slots.
 *
 * Who runs the rounds. A round (proxy_round) runs under px->lock, in the
 * proxy thread or in a host executor, through the connection hooks:
 *   - an executor that publishes a network slot runs that connection's
 *     progress itself (published): a small message leaves in the caller's
 *     sendmsg(), with no thread to wake;
 *   - an executor that waits on a network FIFO "drives" (net_wait): it
 *     sleeps in poll() on the sockets itself and progresses the connections
 *     poll() reports ready, so an arriving message wakes the thread that
 *     wants it. The proxy thread meanwhile sleeps on its doorbell alone (and
 *     runs a round every POLL_MS, which notices failures between calls);
 *   - when sends are still pending (a socket was full) the executor hands
 *     them back: it clears driven and rings the doorbell.
 * docs/performance.md has what this saves (latency and bandwidth over
 * loopback, measured when it was introduced).
 *
 * Idle and not driven, the thread sleeps in poll() on the plugin's sockets
 * and an eventfd doorbell (but only polls while a CUDA kernel of the
 * communicator runs: kernels fill and drain pinned staging FIFOs without
 * ringing). Before sleeping it registers as a waiter on the counters it is
 * waiting for, so an executor that publishes rings the doorbell (notify);
 * it is the futex protocol of proto.h with poll().
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "comm.h"
#include "error.h"
#include "failure.h"
#include "log.h"
#include "net.h"
#include "net_proxy.h"
#include "net_proxy_int.h"
#include "spin.h"
#include "topo.h"

/* Rounds without progress before sleeping in poll(). Polling sockets that
 * have nothing ready is expensive (and steals the CPU from the ranks on an
 * oversubscribed host), so the proxy sleeps almost at once. */
#define IDLE_SPINS 2
/* The immediate of the goodbye message a leaving rank sends (not a slot). */
#define IMM_BYE 0x80000000u
/* The immediate of the message that names a dead rank (failure.c): the rank
 * in the low bits. Like the goodbye, the sender sends nothing after it. */
#define IMM_FAIL 0x40000000u
#define IMM_UNREACHABLE 0x20000000u /* with IMM_FAIL: lost, not dead */
#define IMM_RANK_MASK 0x00ffffffu
/* How long a rank that knows of a dead peer tries to pass it on before it
 * lets destroy or abort go on. */
#define TELL_MS 300
/* How long an orderly destroy waits, after its own goodbyes went out, for
 * its peers' goodbyes before it closes the links (progress_goodbye). */
#define BYE_WAIT_MS 3000
#define POLL_MS 100
#define MAX_POLL_FDS 1024
/* An executor waiting on the network sleeps in poll() this long at most
 * between its checks of the deadline and of abort. */
#define WAIT_SLICE_MS 20

/* Parked payloads (net.h park): a message of a collective whose receives
 * land (RCC_META_LANDS) and at least PARK_MIN_BYTES long waits in the
 * socket, once its header came, until the executor lands it, waits for it,
 * or RINGCC_NET_PARK_US passed: a message that arrives before its receiver
 * entered the call (from a peer that left the call before) then still
 * lands, rather than being read into its slot and copied out of it. */
#define PARK_MIN_BYTES 32768
#define IMM_LANDS ((uint32_t)(RCC_META_LANDS >> 32))

/* In a poll set, the listener's descriptors (lazy links), not a
 * connection's. */
#define LISTENER (-2)

static void ring(int doorbell_fd) {
  uint64_t one = 1;
  ssize_t r = write(doorbell_fd, &one, sizeof(one));
  (void)r; /* a full counter still wakes the reader */
}

/* A kernel of the communicator may publish into (or drain) a staged device
 * FIFO: it cannot ring the doorbell, so the proxy polls instead of sleeping
 * while one runs (comm->kernels_started/done, set by the CUDA side). */
static int device_busy(struct rcc_proxy *px) {
  const uint32_t *started =
      __atomic_load_n(&px->comm->kernels_started, __ATOMIC_ACQUIRE);
  const uint32_t *done =
      started ? __atomic_load_n(&px->comm->kernels_done, __ATOMIC_ACQUIRE)
              : NULL;
  return done != NULL && __atomic_load_n(started, __ATOMIC_ACQUIRE) !=
                             __atomic_load_n(done, __ATOMIC_ACQUIRE);
}

static void wake_executor(uint32_t *word, uint32_t *waiters) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (__atomic_load_n(waiters, __ATOMIC_RELAXED) != 0)
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Wakes every executor waiter, so they see an asynchronous error. */
static void wake_all(struct rcc_proxy *px) {
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_fifo *f = px->conns[i].fifo;
    syscall(SYS_futex, &f->head, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    syscall(SYS_futex, &f->tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
}

/* Marks c failed; the first failure is published by publish_failure. */
static ringcc_result_t fail(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                            ringcc_result_t r, const char *err) {
  c->failed = 1;
  if (px->fail_conn == NULL) {
    px->fail_conn = c;
    px->fail_code = r;
    snprintf(px->fail_err, sizeof(px->fail_err), "%s", err);
  }
  for (int i = 0; i < px->nusers; i++) {
    struct proxy_user *u = &px->users[i];
    if (u->fail_conn == NULL && c->shared && user_rank(u, c->peer) >= 0) {
      u->fail_conn = c;
      u->fail_code = r;
      snprintf(u->fail_err, sizeof(u->fail_err), "%s", err);
    }
  }
  return r;
}

/* A failure of c (code, err) becomes comm's, where c's peer is rank peer
 * (px->comm's, or a user's number for it). A peer that went away is
 * recorded as dead unless, in the same round, it had named another rank
 * as dead before leaving (failure.c). */
static void publish_to(struct rcc_proxy *px, struct ringcc_comm *comm,
                       int peer, struct rcc_proxy_conn *c,
                       ringcc_result_t code, const char *err) {
  /* A peer that went away is dead; one the network lost (no answer, an
   * error) is unreachable: either way the peers are told (failure.c), so
   * that they name it, not this rank, which leaves after its error. */
  /* Not so where the bytes that arrived broke the protocol (the peer may
   * be alive: its bytes were corrupted) or this rank's own failed (a local
   * errno, RINGCC_ERR_SYSTEM): the error then names that cause alone. */
  int corrupt = px->plugin->corrupt != NULL && c->net_comm != NULL &&
                px->plugin->corrupt(c->net_comm);
  if (code == RINGCC_ERR_PEER_FAILED)
    rcc_peer_dead(comm, peer, comm->rank);
  else if (code == RINGCC_ERR_NETWORK && !corrupt)
    rcc_peer_lost(comm, peer, comm->rank, 1);
  const struct rcc_peer_info *info = &comm->peers[peer];
  char ranks[128];
  rcc_host_ranks(comm, peer, ranks, sizeof(ranks));
  rcc_comm_set_async_error(comm, code,
                           "network %s rank %d -> rank %d (host %s, which "
                           "holds %s): %s",
                           c->is_send ? "send" : "receive",
                           c->is_send ? comm->rank : peer,
                           c->is_send ? peer : comm->rank, info->hostname,
                           ranks, err);
}

/* After a round: the first failure becomes the communicator's, and the
 * first on a connection a user shares becomes that user's. */
static void publish_failure(struct rcc_proxy *px) {
  int woke = 0;
  for (int i = 0; i < px->nusers; i++) {
    struct proxy_user *u = &px->users[i];
    int q = u->fail_conn != NULL ? user_rank(u, u->fail_conn->peer) : -1;
    if (q < 0 || u->fail_published)
      continue;
    u->fail_published = woke = 1;
    publish_to(px, u->comm, q, u->fail_conn, u->fail_code, u->fail_err);
  }
  struct rcc_proxy_conn *c = px->fail_conn;
  if (c != NULL && !px->fail_published) {
    px->fail_published = woke = 1;
    publish_to(px, px->comm, c->peer, c, px->fail_code, px->fail_err);
  }
  if (woke)
    wake_all(px);
}

/* A FAIL message: the peer names a dead rank and sends nothing more. */
static int fail_message(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                        uint32_t imm, ringcc_result_t *r) {
  struct ringcc_comm *comm = px->comm;
  int dead = (int)(imm & IMM_RANK_MASK);
  int unreachable = (imm & IMM_UNREACHABLE) != 0;
  char err[RCC_ERRLEN];
  if ((imm & ~(IMM_FAIL | IMM_UNREACHABLE | IMM_RANK_MASK)) != 0 ||
      dead >= comm->nranks || dead == c->peer) {
    snprintf(err, sizeof(err), "malformed FAIL message (immediate 0x%08x) "
             "from rank %d", (unsigned)imm, c->peer);
    *r = fail(px, c, RINGCC_ERR_NETWORK, err);
    return 0;
  }
  c->bye = c->fail_heard = 1;
  rcc_peer_lost(comm, dead, c->peer, unreachable);
  rcc_comm_set_async_error(comm,
                           unreachable ? RINGCC_ERR_NETWORK
                                       : RINGCC_ERR_PEER_FAILED,
                           "rank %d (host %s) reports that rank %d (pid %d "
                           "on host %s) %s", c->peer,
                           comm->peers[c->peer].hostname, dead,
                           (int)comm->peers[dead].pid,
                           comm->peers[dead].hostname,
                           unreachable ? "is unreachable" : "died");
  for (int i = 0; i < px->nusers; i++) {
    struct proxy_user *u = &px->users[i];
    int from = user_rank(u, c->peer), d = user_rank(u, dead);
    if (from < 0 || !c->shared || c->resync != 2)
      continue; /* (not a connection it took over, or one whose RESYNC has
                   not come: what comes before it is the old one's) */
    if (d >= 0)
      rcc_peer_lost(u->comm, d, from, unreachable);
    /* A rank it excluded: the link is over for it all the same (the peer
     * sends nothing more on it). */
    char who[96];
    if (d >= 0)
      snprintf(who, sizeof(who), "rank %d", d);
    else
      snprintf(who, sizeof(who), "rank %d of the communicator it was shrunk "
               "from (one it excluded)", dead);
    rcc_comm_set_async_error(
        u->comm, unreachable ? RINGCC_ERR_NETWORK : RINGCC_ERR_PEER_FAILED,
        "rank %d (host %s) reports that %s (pid %d on host %s) %s", from,
        comm->peers[c->peer].hostname, who, (int)comm->peers[dead].pid,
        comm->peers[dead].hostname,
        unreachable ? "is unreachable" : "died");
  }
  wake_all(px);
  return 1;
}

/* A send connection being resynced (rcc_proxy_resync): once every slot
 * filled so far is posted, the RESYNC message goes after them (and after a
 * FAIL message posted before: its request is retired here, the proxy's comm
 * may be done telling). Returns progress. */
static int resync_send(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                       uint32_t tail, ringcc_result_t *r) {
  char err[RCC_ERRLEN];
  int moved = 0, done = 0;
  size_t bytes;
  uint32_t imm;
  if (c->tell == 1) {
    if (px->plugin->test(c->tell_request, &done, &bytes, &imm, err,
                         sizeof(err)) != RINGCC_SUCCESS || done)
      c->tell = 2, moved = 1;
    done = 0;
  }
  if (c->resync == 1 && c->posted == tail) {
    *r = px->plugin->isend(c->net_comm, c->data, 0, IMM_RESYNC, c->mhandle,
                           &c->resync_request, err, sizeof(err));
    if (*r != RINGCC_SUCCESS)
      return fail(px, c, *r, err), 0;
    if (c->resync_request != NULL)
      c->resync = 2, moved = 1;
  }
  if (c->resync == 2) {
    *r = px->plugin->test(c->resync_request, &done, &bytes, &imm, err,
                          sizeof(err));
    if (*r != RINGCC_SUCCESS)
      return fail(px, c, *r, err), 0;
    if (done)
      c->resync = 3, c->resync_request = NULL, moved = 1;
  }
  return moved;
}

/* A receive connection being resynced: a message (or FAIL message) that
 * came before the peer's RESYNC is the old communicator's, dropped (both
 * counters pass it; nobody reads this FIFO meanwhile), and RESYNC itself
 * too; a goodbye there means the peer left instead. Returns 1 once RESYNC
 * came, 0 for a message dropped, -1 where the link failed. */
static int resync_recv(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                       uint32_t imm, ringcc_result_t *r) {
  if ((imm & IMM_BYE) != 0) {
    char err[RCC_ERRLEN];
    snprintf(err, sizeof(err), "rank %d said goodbye on a link being taken "
             "over by a shrunk communicator (it destroyed the communicator "
             "instead)", c->peer);
    *r = fail(px, c, RINGCC_ERR_PEER_FAILED, err);
    return -1;
  }
  c->to[c->done % c->nslots] = NULL;
  c->done++;
  __atomic_store_n(&c->fifo->tail, c->done, __ATOMIC_RELEASE);
  __atomic_store_n(&c->fifo->head, c->done, __ATOMIC_RELEASE);
  if ((imm & (IMM_RESYNC | IMM_FAIL)) != IMM_RESYNC)
    return 0;
  c->resync = 2;
  return 1;
}

/* Hands the published slots of a send connection to the plugin (which may
 * only queue them); 1 if any. */
static int post_sends(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                      uint32_t tail, ringcc_result_t *r) {
  char err[RCC_ERRLEN];
  int moved = 0;
  while (c->posted != tail) {
    uint32_t slot = c->posted % c->nslots;
    uint64_t meta = c->fifo->meta[slot];
    void *req = NULL;
    const char *from = c->from[slot] != NULL
                           ? c->from[slot]
                           : c->data + (size_t)slot * c->slot_bytes;
    *r = px->plugin->isend(c->net_comm, from,
                           RCC_META_BYTES(meta), (uint32_t)(meta >> 32),
                           c->mhandle, &req, err, sizeof(err));
    if (*r != RINGCC_SUCCESS)
      return fail(px, c, *r, err), 0;
    if (req == NULL)
      break;
    c->request[slot] = req;
    c->posted++;
    moved = 1;
  }
  return moved;
}

/* Posts what can be posted and retires what completed; returns progress. */
static int progress_send(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                         ringcc_result_t *r) {
  char err[RCC_ERRLEN];
  uint32_t tail = __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE);

  if (c->net_comm == NULL)
    return 0; /* a lazy link not made yet (progress_links) */
  int moved = post_sends(px, c, tail, r);
  if (c->failed)
    return 0;
  if (c->resync != 0 && c->resync != 3 && resync_send(px, c, tail, r))
    moved = 1;
  if (c->failed)
    return 0;
  while (c->done != c->posted) {
    int done = 0;
    size_t bytes;
    uint32_t imm;
    *r = px->plugin->test(c->request[c->done % c->nslots], &done, &bytes, &imm,
                          err, sizeof(err));
    if (*r != RINGCC_SUCCESS)
      return fail(px, c, *r, err), 0;
    if (!done)
      break;
    c->done++;
    __atomic_store_n(&c->fifo->head, c->done, __ATOMIC_RELEASE);
    wake_executor(&c->fifo->head, &c->fifo->head_waiters);
    moved = 1;
  }
  return moved;
}

/* Posts receives into the free slots; unless post_only, also retires the
 * messages that landed (which reads the sockets). */
static int progress_recv_posts(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                               ringcc_result_t *r, int post_only) {
  char err[RCC_ERRLEN];
  int moved = 0;
  uint32_t head = __atomic_load_n(&c->fifo->head, __ATOMIC_ACQUIRE);

  if (c->bye || c->net_comm == NULL)
    return 0;
  while ((uint32_t)(c->posted - head) < c->nslots) {
    uint32_t slot = c->posted % c->nslots;
    void *req = NULL;
    *r = px->plugin->irecv(c->net_comm, c->data + (size_t)slot * c->slot_bytes,
                           c->slot_bytes, c->mhandle, &req, err, sizeof(err));
    if (*r != RINGCC_SUCCESS)
      return fail(px, c, *r, err), 0;
    if (req == NULL)
      break;
    c->request[slot] = req;
    c->posted++;
    moved = 1;
  }
  while (!post_only && c->done != c->posted) {
    int done = 0;
    size_t bytes;
    uint32_t imm;
    uint32_t slot = c->done % c->nslots;
    *r = px->plugin->test(c->request[slot], &done, &bytes, &imm, err,
                          sizeof(err));
    if (*r != RINGCC_SUCCESS)
      return fail(px, c, *r, err), 0;
    if (!done)
      break;
    if (c->resync == 1) { /* the old communicator's: dropped */
      if (resync_recv(px, c, imm, r) < 0)
        return 0;
      moved = 1;
      continue;
    }
    if ((imm & IMM_FAIL) && !(imm & IMM_BYE))
      return fail_message(px, c, imm, r);
    if (imm & IMM_BYE) { /* the peer left cleanly: nothing more comes */
      c->bye = 1;
      __atomic_store_n(&c->fifo->closed, 1, __ATOMIC_RELEASE);
      syscall(SYS_futex, &c->fifo->tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
      return 1;
    }
    c->fifo->meta[slot] = (uint64_t)bytes | (uint64_t)imm << 32;
    c->done++;
    __atomic_store_n(&c->fifo->tail, c->done, __ATOMIC_RELEASE);
    wake_executor(&c->fifo->tail, &c->fifo->tail_waiters);
    moved = 1;
  }
  return moved;
}

static int progress_recv(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                         ringcc_result_t *r) {
  return progress_recv_posts(px, c, r, 0);
}

/* ---- lazy links (RINGCC_NET_CONNECT=lazy, net.c) -------------------------
 * A pair's link (send conns[2l], receive conns[2l + 1]) is made when a call
 * first needs it: an executor publishes into its send FIFO or waits on
 * either FIFO (want_link), or a kernel filled its send FIFO. The lower rank
 * of the pair connects; the higher asks it to, with a connection that says
 * so and is closed at once (links.connect), and asks again every
 * ASK_AGAIN_MS until the link is there. Connections come in through the
 * listener, which stays open and which the proxy polls beside its links;
 * the plugin proves the key on each, as at init. A peer whose listener
 * refuses connections for REFUSED_MS is gone (it closes its listener only
 * when its process ends or it destroys the communicator): the link fails
 * as a link whose peer closed it does, so a call that needs a rank it had
 * no link to still ends with RINGCC_ERR_PEER_FAILED.
 *
 * A round looks at the links only while one is wanted: px->nwant counts
 * the send connections with want set, no link and not failed, kept where
 * want changes (want_link sets it, for every way a link comes to be
 * wanted: an executor's publish or wait, an ask taken by the listener;
 * link_made and a failed connect clear it; an ask taken at init, before
 * the proxy starts, is counted by rcc_proxy_start). A kernel publishing
 * into a device FIFO (CUDA) calls no hook, so for those only the FIFO's
 * slots tell: see device_due. */
#define LINK_SLICE_MS 200 /* one connect try, under the lock */
#define ASK_AGAIN_MS 1000
#define RETRY_MS 50
#define REFUSED_MS 1000

/* The caller holds px->lock. */
static void want_link(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  struct rcc_proxy_conn *s = &px->conns[(c - px->conns) & ~(ptrdiff_t)1];
  if (px->links.connect != NULL && s->net_comm == NULL && !s->want &&
      !s->failed) {
    s->want = 1;
    s->next_try = 0;
    px->nwant++;
  }
}

/* The link of send connection c was made, or failed: no longer wanted. */
static void unwant_link(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  if (c->want)
    px->nwant--;
  c->want = 0;
}

/* Whether this round looks at the device FIFOs of links not made yet
 * (comm->kernels_started/done, as device_busy). Only a communicator with
 * device FIFOs on such links does, and then only while a kernel runs, or
 * when one ended since the last look (done moved): a kernel publishes
 * into a FIFO between its start and its end, so a look after it ended
 * (done read before the look, acquire) sees what it published, and a
 * kernel still running is looked at every round. Without the counters
 * (no kernel state yet) every round looks. The look walks every link. */
static int device_due(struct rcc_proxy *px) {
  if (!px->device_links)
    return 0;
  const uint32_t *started =
      __atomic_load_n(&px->comm->kernels_started, __ATOMIC_ACQUIRE);
  const uint32_t *done =
      started ? __atomic_load_n(&px->comm->kernels_done, __ATOMIC_ACQUIRE)
              : NULL;
  if (done == NULL)
    return 1;
  uint32_t d = __atomic_load_n(done, __ATOMIC_ACQUIRE);
  uint32_t s = __atomic_load_n(started, __ATOMIC_ACQUIRE);
  if (s == d && px->device_seen_valid && d == px->device_seen)
    return 0;
  px->device_seen = d;
  px->device_seen_valid = 1;
  return 1;
}

/* Adds the listener's descriptors (its socket, and those of connections
 * it holds that have not proven the key yet) to a poll set; listen_now
 * when one proved itself already (accept() takes it without waiting). */
static int listener_fds(struct rcc_proxy *px, struct pollfd *pfds, int *conn,
                        int nfds) {
  int fds[16];
  px->listen_now = 0;
  if (px->links.connect == NULL)
    return nfds;
  int k = px->plugin->fds(px->links.listen_comm, fds, 16);
  px->listen_now = k < 0;
  for (int j = 0; j < k && nfds < MAX_POLL_FDS; j++) {
    conn[nfds] = LISTENER;
    pfds[nfds++] = (struct pollfd){.fd = fds[j], .events = POLLIN};
  }
  return nfds;
}

static int listener_ready(const struct pollfd *pfds, const int *conn,
                          int nfds) {
  for (int j = 0; j < nfds; j++)
    if (conn[j] == LISTENER && pfds[j].revents != 0)
      return 1;
  return 0;
}

/* Link l was made (its net_comms are set). */
static void link_made(struct rcc_proxy *px, int l) {
  struct rcc_proxy_conn *c = &px->conns[2 * l];
  unwant_link(px, c);
  c->first_refused = 0;
  if (px->plugin->readable != NULL)
    px->plugin->readable(c[1].net_comm, -1);
  /* What waited for the link goes now, and receives are posted, whoever
   * runs the next round (an executor polls only connections with
   * requests). */
  ringcc_result_t r = RINGCC_SUCCESS;
  progress_send(px, c, &r);
  progress_recv_posts(px, &c[1], &r, 1);
  /* A dead rank known already is named on the new link too (a peer that
   * linked to this rank only now would not hear of it otherwise). */
  if (rcc_dead_rank(px->comm, NULL) >= 0 && px->told) {
    px->tell_deadline = 0;
    __atomic_store_n(&px->told, 0, __ATOMIC_RELEASE);
  }
  RCC_TRACE(px->comm->rank, "net: linked with rank %d on first use (link "
            "%d)", c->peer, l);
}

/* Takes the connections the listener holds (listen_ready: poll() said so),
 * and makes (or asks for) the links that are wanted and due; the caller
 * holds px->lock. Returns progress. */
static int progress_links(struct rcc_proxy *px, int listen_ready) {
  char err[RCC_ERRLEN];
  int moved = 0, l, asked, last_errno;
  ringcc_result_t r;
  if (px->links.connect == NULL)
    return 0;
  while (listen_ready) {
    r = px->links.accept(px->links.arg, &l, &asked,
                         rcc_now_ns() + 1000000LL, err, sizeof(err));
    if (r == RINGCC_ERR_TIMEOUT)
      break;
    if (r != RINGCC_SUCCESS) { /* this rank's own (out of descriptors) */
      RCC_WARN(px->comm->rank, "net: the listener: %s", err);
      break;
    }
    if (l < 0)
      continue;
    if (asked)
      want_link(px, &px->conns[2 * l]);
    else
      link_made(px, l), moved = 1;
  }
  /* Nothing wanted (the common round): no walk, unless a kernel may have
   * filled a device FIFO. */
  int device = device_due(px);
  if (px->nwant == 0 && !device)
    return moved;
  for (l = 0; l < px->nconns / 2; l++) {
    struct rcc_proxy_conn *c = &px->conns[2 * l];
    if (c->net_comm != NULL || c->failed)
      continue;
    /* A kernel fills a device FIFO without a hook: its slots say (a host
     * executor's publish calls want_link itself). */
    if (device && c->device &&
        c->posted != __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE))
      want_link(px, c);
    int64_t now = rcc_now_ns();
    if (!c->want || now < c->next_try)
      continue;
    r = px->links.connect(px->links.arg, l, &asked,
                          now + LINK_SLICE_MS * 1000000LL, &last_errno, err,
                          sizeof(err));
    now = rcc_now_ns();
    if (r == RINGCC_SUCCESS) {
      c->first_refused = 0;
      if (!asked) {
        link_made(px, l);
        moved = 1;
      } else {
        c->next_try = now + ASK_AGAIN_MS * 1000000LL;
      }
      continue;
    }
    if (r == RINGCC_ERR_TIMEOUT) {
      if (c->first_refused == 0)
        c->first_refused = now;
      if (now - c->first_refused < REFUSED_MS * 1000000LL) {
        c->next_try = now + RETRY_MS * 1000000LL;
        continue;
      }
      /* No listener there: the host answered that nothing listens
       * (ECONNREFUSED: the process is gone), or nothing answered (its host
       * is unreachable). */
      int gone = last_errno == ECONNREFUSED;
      int silent = last_errno == ETIMEDOUT || last_errno == EHOSTUNREACH ||
                   last_errno == ENETUNREACH || last_errno == EHOSTDOWN ||
                   last_errno == ENETDOWN;
      size_t at = strlen(err);
      double s = (double)(now - c->first_refused) / 1e9;
      if (gone)
        snprintf(err + at, sizeof(err) - at, "; refused for %.1f s: its "
                 "host answers, but nothing listens there any more (the "
                 "process ended, or destroyed the communicator)", s);
      else if (silent)
        snprintf(err + at, sizeof(err) - at, "; no answer for %.1f s: its "
                 "host is down, or its network is cut", s);
      r = gone ? RINGCC_ERR_PEER_FAILED : RINGCC_ERR_NETWORK;
    }
    unwant_link(px, c);
    c[1].failed = 1;
    fail(px, c, r, err);
    moved = 1;
  }
  return moved;
}

/* Tells the plugin which sockets poll() found ready (fds[j] of conns[conn[j]],
 * conn -1 for none); the caller holds px->lock. */
static void tell_readable(struct rcc_proxy *px, const struct pollfd *fds,
                          const int *conn, int nfds) {
  if (px->plugin->readable == NULL)
    return;
  for (int j = 0; j < nfds; j++)
    if (conn[j] >= 0 && fds[j].fd >= 0 &&
        (fds[j].revents & (POLLIN | POLLERR | POLLHUP)))
      px->plugin->readable(px->conns[conn[j]].net_comm, fds[j].fd);
}

/* The counter this connection waits on while idle: the executor's side. */
static uint32_t *idle_word(struct rcc_proxy_conn *c, uint32_t **waiters) {
  *waiters = c->is_send ? &c->fifo->tail_waiters : &c->fifo->head_waiters;
  return c->is_send ? &c->fifo->tail : &c->fifo->head;
}

/* The sleep of a poll() on c's fds, shortened to when a parked payload of
 * c is due. */
static int park_timeout(const struct rcc_proxy *px,
                        const struct rcc_proxy_conn *c, int timeout_ms) {
  if (!c->parking || c->net_comm == NULL)
    return timeout_ms;
  int ms = px->plugin->parked_ms(c->net_comm);
  return ms >= 0 && (timeout_ms < 0 || ms < timeout_ms) ? ms : timeout_ms;
}

/* Sleeps until a socket is ready, the doorbell rings, or POLL_MS passed
 * (1 ms while FAIL messages are still going out). */
static void idle_sleep(struct rcc_proxy *px) {
  int nfds = 0, changed = 0, timeout = POLL_MS;
  px->pconn[nfds] = -1;
  px->pfds[nfds++] = (struct pollfd){.fd = px->doorbell, .events = POLLIN};
  if (__atomic_load_n(&px->driven, __ATOMIC_ACQUIRE) &&
      !device_busy(px)) {
    /* The executor polls the sockets and runs the rounds; it rings when it
     * hands them back. The listener (lazy links) is this thread's still: an
     * executor waiting on anything else (shared memory, or no call at all)
     * must not keep a peer's connection waiting. */
    pthread_mutex_lock(&px->lock);
    nfds = listener_fds(px, px->pfds, px->pconn, nfds);
    int now = px->listen_now;
    pthread_mutex_unlock(&px->lock);
    poll(px->pfds, (nfds_t)nfds, now ? 0 : POLL_MS);
    if (now || listener_ready(px->pfds, px->pconn, nfds)) {
      pthread_mutex_lock(&px->lock);
      progress_links(px, 1);
      pthread_mutex_unlock(&px->lock);
    }
    if (px->pfds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t r = read(px->doorbell, &v, sizeof(v));
      (void)r;
    }
    return;
  }
  if (__atomic_load_n(&px->closing, __ATOMIC_ACQUIRE) && !px->bye_done &&
      !__atomic_load_n(&px->byes_out, __ATOMIC_ACQUIRE))
    changed = 1; /* the goodbye needs progress, not sleep (the peers' come
                    through the sockets polled below) */
  /* The connections' state is shared with executors that run rounds. */
  pthread_mutex_lock(&px->lock);
  if (rcc_dead_rank(px->comm, NULL) >= 0 && !px->told)
    timeout = 1;
  /* After a failure only receives matter: a peer may still name the rank
   * that died (and a send socket whose peer left reports EOF forever). */
  int failed = px->fail_conn != NULL ||
               __atomic_load_n(&px->comm->async_error, __ATOMIC_ACQUIRE);
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    uint32_t *waiters, *word = idle_word(c, &waiters);
    __atomic_fetch_add(waiters, 1, __ATOMIC_SEQ_CST);
    if (c->failed || c->net_comm == NULL || (!c->is_send && c->bye) ||
        (failed && c->is_send && !c->shared))
      continue; /* nothing more comes from it, or only EOF; or no link (a
                   link a user took over goes on for the user) */
    uint32_t now = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    /* Work arrived while we were deciding to sleep: do not sleep. */
    if (c->is_send ? now != c->posted
                   : (uint32_t)(c->posted - now) < c->nslots)
      changed = 1;
    int fds[16];
    int k = px->plugin->fds(c->net_comm, fds, 16);
    if (k < 0) /* bytes already read wait for a round */
      changed = 1;
    timeout = park_timeout(px, c, timeout);
    /* A send connection waits for room (a socket) or a completion (verbs:
     * send_events); not for its socket to be readable: over TCP a receive
     * connection the other way may share it, and leave bytes there on
     * purpose (parked), or with its slots full. */
    short events = !c->is_send ? POLLIN
                   : px->plugin->send_events ? px->plugin->send_events
                                             : POLLOUT;
    for (int j = 0; j < k && nfds < MAX_POLL_FDS; j++) {
      px->pconn[nfds] = i;
      px->pfds[nfds++] = (struct pollfd){.fd = fds[j], .events = events};
    }
  }
  nfds = listener_fds(px, px->pfds, px->pconn, nfds);
  int listen_now = px->listen_now;
  if (listen_now)
    changed = 1;
  pthread_mutex_unlock(&px->lock);
  /* A kernel publishing into (or draining) a staged device FIFO cannot ring
   * the doorbell: while one may run, only look, do not sleep. */
  for (int j = 0; j < nfds; j++)
    px->pfds[j].revents = 0;
  /* With work there already (changed) only look, without sleeping: the
   * listener is served here alone, and a rank that destroys while its last
   * message waits for a link its peer makes must take that connection. */
  if (!__atomic_load_n(&px->stop, __ATOMIC_ACQUIRE))
    poll(px->pfds, (nfds_t)nfds, changed || device_busy(px) ? 0 : timeout);
  pthread_mutex_lock(&px->lock);
  tell_readable(px, px->pfds, px->pconn, nfds);
  if (listen_now || listener_ready(px->pfds, px->pconn, nfds))
    progress_links(px, 1);
  pthread_mutex_unlock(&px->lock);
  for (int i = 0; i < px->nconns; i++) {
    uint32_t *waiters;
    idle_word(&px->conns[i], &waiters);
    __atomic_fetch_sub(waiters, 1, __ATOMIC_SEQ_CST);
  }
  if (px->pfds[0].revents & POLLIN) {
    uint64_t v;
    ssize_t r = read(px->doorbell, &v, sizeof(v));
    (void)r;
  }
}

/* Whether a user (a communicator shrunk from px->comm) has px->comm's rank
 * p among its ranks. */
static int user_has(const struct rcc_proxy *px, int p) {
  for (int i = 0; i < px->nusers; i++)
    if (user_rank(&px->users[i], p) >= 0)
      return 1;
  return 0;
}

/* Once a dead rank is known, names it on every send connection (failure.c),
 * for at most TELL_MS; told when done. Not on a connection a user took over
 * where no user has the dead rank (a rank the shrink excluded: the user's
 * peer learned it before its own shrink, and the user must not). Returns
 * progress. */
static int progress_tell(struct rcc_proxy *px) {
  char err[RCC_ERRLEN];
  int dead = rcc_dead_rank(px->comm, NULL);
  if (dead < 0 || px->told)
    return 0;
  if (px->tell_deadline == 0)
    px->tell_deadline = rcc_now_ns() + TELL_MS * 1000000LL;
  int moved = 0, pending = 0;
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (!c->is_send || c->failed || c->bye || c->peer == dead ||
        c->tell == 2 || c->net_comm == NULL ||
        (c->tell == 0 && c->shared && !user_has(px, dead)))
      continue;
    if (c->tell == 0) {
      ringcc_result_t r = px->plugin->isend(
          c->net_comm, c->data, 0,
          IMM_FAIL | (rcc_dead_unreachable(px->comm) ? IMM_UNREACHABLE : 0) |
              (uint32_t)dead,
          c->mhandle,
          &c->tell_request, err, sizeof(err));
      if (r != RINGCC_SUCCESS || c->tell_request == NULL) {
        c->tell = r != RINGCC_SUCCESS ? 2 : 0; /* full: try again */
        pending |= c->tell == 0;
        continue;
      }
      c->tell = 1;
      moved = 1;
    }
    int done = 0;
    size_t bytes;
    uint32_t imm;
    if (px->plugin->test(c->tell_request, &done, &bytes, &imm, err,
                         sizeof(err)) != RINGCC_SUCCESS || done) {
      c->tell = 2; /* out, or the peer is gone too: nothing more to do */
      moved = 1;
      continue;
    }
    pending = 1;
  }
  if (!pending || rcc_now_ns() >= px->tell_deadline)
    __atomic_store_n(&px->told, 1, __ATOMIC_RELEASE);
  return moved;
}

/* A receive connection whose peer's goodbye may still come: it has not
 * come, the link did not fail, and a receive is posted or can be (a FIFO
 * full of messages nobody consumed takes nothing more: a peer that sent
 * what this rank never received). */
static int bye_awaited(const struct rcc_proxy_conn *c) {
  uint32_t head = __atomic_load_n(&c->fifo->head, __ATOMIC_ACQUIRE);
  return !c->is_send && !c->failed && !c->bye && c->net_comm != NULL &&
         !c->kept && (c->done != c->posted || (uint32_t)(c->posted - head) < c->nslots);
}

/* Once every send FIFO is empty, post a goodbye on each; bye_done when all
 * went out and every peer's goodbye came in. The goodbye is the last thing
 * a rank sends, so a rank that closed its links only after its peers' came
 * in never has bytes arrive on a closed socket: closed first, the kernel
 * answers them with a reset, and the peer, whose own goodbye was then still
 * on its way, saw its link fail (EPIPE) while it left in order. A peer that
 * does not destroy within BYE_WAIT_MS (a program that destroys its
 * communicators in another order on different ranks) is not waited for
 * longer. Returns progress. */
static int progress_goodbye(struct rcc_proxy *px, ringcc_result_t *r) {
  char err[RCC_ERRLEN];
  int moved = 0, pending = 0;
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (!c->is_send || c->failed)
      continue; /* (failed: what it holds never leaves; a link of the
                   communicator this one was shrunk from after a failure,
                   closed at the hand-over) */
    if (c->done != c->posted ||
        c->posted != __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE))
      return 0; /* not drained yet */
  }
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (!c->is_send || c->bye == 2 || c->net_comm == NULL || c->kept)
      continue; /* (kept: another communicator goes on with it) */
    if (!c->bye) {
      *r = px->plugin->isend(c->net_comm, c->data, 0, IMM_BYE, c->mhandle,
                             &c->bye_request, err, sizeof(err));
      if (*r != RINGCC_SUCCESS)
        return fail(px, c, *r, err), 0;
      c->bye = c->bye_request != NULL;
      moved |= c->bye;
    }
    if (c->bye == 1) {
      int done = 0;
      size_t bytes;
      uint32_t imm;
      *r = px->plugin->test(c->bye_request, &done, &bytes, &imm, err,
                            sizeof(err));
      if (*r != RINGCC_SUCCESS)
        return fail(px, c, *r, err), 0;
      if (done)
        c->bye = 2, moved = 1;
    }
    pending |= c->bye != 2;
  }
  if (pending)
    return moved;
  __atomic_store_n(&px->byes_out, 1, __ATOMIC_RELEASE);
  if (px->bye_wait_until == 0)
    px->bye_wait_until = rcc_now_ns() + BYE_WAIT_MS * 1000000LL;
  for (int i = 0; i < px->nconns && !pending; i++)
    pending = bye_awaited(&px->conns[i]);
  if (!pending || rcc_now_ns() >= px->bye_wait_until)
    __atomic_store_n(&px->bye_done, 1, __ATOMIC_RELEASE);
  return moved;
}

/* A peer whose link is silent but whose host answered (alive() said so in
 * err): suspected, not lost. Logged at WARN when it starts and every
 * SUSPECT_WARN_MS while it lasts, one line per check for all the links that
 * are due (the first one's sentence, then the other peers' ranks), and at
 * INFO when a link answers again. Returns whether c is due. */
#define SUSPECT_WARN_MS 10000
#define SUSPECT_LIST 12 /* ranks named after the first */
static int suspicion(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                     const char *err, int64_t now) {
  struct ringcc_comm *comm = px->comm;
  if (err[0] == '\0') {
    if (c->suspect_ns != 0 && c->suspect_warned != 0)
      RCC_INFO(comm->rank, "rank %d (host %s) answers again on the network "
               "%s link after being suspected for %.1f s", c->peer,
               comm->peers[c->peer].hostname, c->is_send ? "send" : "receive",
               (double)(now - c->suspect_ns) / 1e9);
    c->suspect_ns = c->suspect_warned = 0;
    return 0;
  }
  if (c->suspect_ns == 0)
    c->suspect_ns = now;
  return c->suspect_warned == 0 ||
         now - c->suspect_warned >= SUSPECT_WARN_MS * 1000000LL;
}

static void warn_suspects(struct rcc_proxy *px, const int *due, int ndue,
                          const char *first_err, int64_t now) {
  struct ringcc_comm *comm = px->comm;
  const struct rcc_proxy_conn *c = &px->conns[due[0]];
  char others[160] = "";
  int named = 0, more = 0;
  for (int k = 1; k < ndue; k++) {
    int peer = px->conns[due[k]].peer, seen = peer == c->peer;
    for (int m = 1; m < k && !seen; m++)
      seen = px->conns[due[m]].peer == peer;
    if (seen)
      continue;
    if (named == SUSPECT_LIST) {
      more++;
      continue;
    }
    size_t l = strlen(others);
    snprintf(others + l, sizeof(others) - l, "%s%d", named ? ", " : "", peer);
    named++;
  }
  for (int k = 0; k < ndue; k++)
    px->conns[due[k]].suspect_warned = now;
  char tail[200] = "";
  if (named > 0)
    snprintf(tail, sizeof(tail), "; also suspected: rank%s %s%s", named + more
             > 1 ? "s" : "", others, more ? " and more" : "");
  if (more > 0)
    snprintf(tail + strlen(tail), sizeof(tail) - strlen(tail), " (%d)",
             named + more);
  RCC_WARN(comm->rank, "rank %d (host %s) is suspected, not declared lost: "
           "network %s link rank %d -> rank %d: %s%s", c->peer,
           comm->peers[c->peer].hostname, c->is_send ? "send" : "receive",
           c->is_send ? comm->rank : c->peer, c->is_send ? c->peer : comm->rank,
           first_err, tail);
}

/* Links that fail without closing: every RCC_NET_LINK_CHECK_MS the plugin
 * looks at each connection (alive); the caller holds px->lock. */
static void check_links(struct rcc_proxy *px) {
  char err[RCC_ERRLEN], first[RCC_ERRLEN];
  int64_t now = rcc_now_ns();
  int due[1024], ndue = 0;
  /* After px->comm failed, the links users took over are still checked for
   * them. */
  int failed = px->fail_conn != NULL;
  if (px->plugin->alive == NULL || now < px->next_link_check ||
      (failed && px->nusers == 0))
    return;
  px->next_link_check = now + RCC_NET_LINK_CHECK_MS * 1000000LL;
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (c->failed || c->bye || c->net_comm == NULL || (failed && !c->shared))
      continue;
    err[0] = '\0';
    ringcc_result_t r = px->plugin->alive(c->net_comm, err, sizeof(err));
    if (r != RINGCC_SUCCESS) {
      fail(px, c, r, err);
      break;
    }
    if (suspicion(px, c, err, now) && ndue < (int)(sizeof(due) / sizeof(due[0]))) {
      if (ndue == 0)
        snprintf(first, sizeof(first), "%s", err);
      due[ndue++] = i;
    }
  }
  if (ndue > 0 && (px->fail_conn == NULL || failed))
    warn_suspects(px, due, ndue, first, now);
  publish_failure(px);
}

/* One round over every connection; the caller holds px->lock. Returns
 * progress. */
static int proxy_round(struct rcc_proxy *px) {
  int moved = progress_links(px, 0);
  for (int i = 0; i < px->nconns; i++) {
    ringcc_result_t r = RINGCC_SUCCESS;
    struct rcc_proxy_conn *c = &px->conns[i];
    if (!c->failed)
      moved |= c->is_send ? progress_send(px, c, &r) : progress_recv(px, c, &r);
  }
  if (__atomic_load_n(&px->closing, __ATOMIC_ACQUIRE) && !px->bye_done &&
      px->fail_conn == NULL) {
    ringcc_result_t r = RINGCC_SUCCESS;
    moved |= progress_goodbye(px, &r);
  }
  publish_failure(px);
  moved |= progress_tell(px);
  return moved;
}

int rcc_proxy_round(struct rcc_proxy *px) {
  int moved = proxy_round(px);
  check_links(px);
  return moved;
}

void rcc_proxy_fail(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                    ringcc_result_t r, const char *err) {
  fail(px, c, r, err);
  publish_failure(px);
}

/* A send connection with slots not yet handed over, or not yet sent; the
 * caller holds px->lock. */
static int sends_pending(struct rcc_proxy *px) {
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (c->is_send && !c->failed &&
        (c->done != c->posted ||
         c->posted != __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE)))
      return 1;
  }
  return 0;
}

static void *proxy_main(void *arg);

int rcc_proxy_run(struct rcc_proxy *px) {
  int e = pthread_create(&px->thread, NULL, proxy_main, px);
  px->has_thread = e == 0;
  return e;
}

static void *proxy_main(void *arg) {
  struct rcc_proxy *px = arg;
  int idle = 0;

  while (!__atomic_load_n(&px->stop, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&px->lock);
    int moved = proxy_round(px);
    check_links(px);
    pthread_mutex_unlock(&px->lock);
    if (moved)
      idle = 0;
    else if (++idle > IDLE_SPINS)
      idle_sleep(px);
  }
  return NULL;
}

/* Progress on c from the executor's thread, after the proxy thread's round
 * if one runs; 1 if sends are still pending afterwards, else 0. */
static int push(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  /* A round of the proxy thread is short (nothing under the lock sleeps):
   * wait for it rather than hand the work back, which would wake the
   * thread for nothing and let it contend again on the next call. */
  pthread_mutex_lock(&px->lock);
  want_link(px, c);
  if (!c->failed) {
    ringcc_result_t r = RINGCC_SUCCESS;
    if (c->is_send)
      progress_send(px, c, &r);
    else /* a slot came free: post into it; poll() says when to read */
      progress_recv_posts(px, c, &r, 1);
    publish_failure(px);
  }
  int pending = sends_pending(px);
  pthread_mutex_unlock(&px->lock);
  return pending;
}

/* After a failed call, whose buffers go back to the user: the sends on c
 * that are still to leave from the user's memory are copied into their
 * slots and leave from there (a plugin that cannot move a posted send gives
 * the connection up instead, as if it had failed). */
static void detach(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  int moved = 0, lost = 0;
  pthread_mutex_lock(&px->lock);
  uint32_t tail = __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE);
  for (uint32_t s = c->done; s != tail; s++) {
    uint32_t slot = s % c->nslots;
    if (c->from[slot] == NULL)
      continue;
    char *to = c->data + (size_t)slot * c->slot_bytes;
    if (!c->failed) {
      memcpy(to, c->from[slot], RCC_META_BYTES(c->fifo->meta[slot]));
      if ((int32_t)(s - c->posted) >= 0)
        moved++; /* not posted yet: it will leave from the slot */
      else if (px->plugin->rebase != NULL)
        px->plugin->rebase(c->request[slot], to), moved++;
      else
        lost = 1;
    }
    c->from[slot] = NULL;
  }
  if (lost)
    c->failed = 1; /* a posted send still reads the user's memory */
  pthread_mutex_unlock(&px->lock);
  RCC_INFO(px->comm->rank, "network send rank %d -> rank %d: %d message%s "
           "from the user's buffers copied to their slots after the call "
           "failed%s", px->comm->rank, c->peer, moved, moved == 1 ? "" : "s",
           lost ? "; the connection is given up (the plugin cannot move a "
                  "posted send)" : "");
}

/* A receive connection's message seq lands at p (bytes long) instead of its
 * slot, if its receive is posted and has taken no payload yet and the
 * plugin can move it: 1 (c->to[] says so), else 0. */
static int land(struct rcc_proxy *px, struct rcc_proxy_conn *c, uint32_t seq,
                char *p, size_t bytes) {
  int ok = 0;
  if (px->plugin->redirect == NULL)
    return 0;
  pthread_mutex_lock(&px->lock);
  if (!c->parking && !c->device && !c->failed && c->net_comm != NULL &&
      px->plugin->park != NULL && px->plugin->want != NULL &&
      px->comm->set.net_park_us > 0) {
    c->parking = 1; /* its receiver lands: payloads may wait for it */
    px->plugin->park(c->net_comm, PARK_MIN_BYTES, IMM_LANDS,
                     px->comm->set.net_park_us * 1000);
  }
  /* Slots the executor freed since the engine last ran a round (the proxy
   * thread runs one only every POLL_MS while an executor drives): their
   * receives are posted now, or a message due there could not land. */
  if (!c->failed && (int32_t)(c->posted - seq) <= 0) {
    ringcc_result_t r = RINGCC_SUCCESS; /* (a failure marks c failed) */
    (void)progress_recv_posts(px, c, &r, 1);
  }
  uint32_t slot = seq % c->nslots;
  /* Posted and not done: done <= seq < posted. */
  if (!c->failed && !c->bye && (int32_t)(seq - c->done) >= 0 &&
      (int32_t)(c->posted - seq) > 0 && c->to[slot] == NULL &&
      px->plugin->redirect(c->request[slot], p, bytes, 0) == 0) {
    c->to[slot] = p;
    ok = 1;
  }
  pthread_mutex_unlock(&px->lock);
  return ok;
}

/* After a failed call: the messages of c landing in (or landed in) the
 * user's memory go back to their slots. */
static void unland(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  int moved = 0;
  pthread_mutex_lock(&px->lock);
  uint32_t head = __atomic_load_n(&c->fifo->head, __ATOMIC_ACQUIRE);
  for (uint32_t s = head; s != c->posted; s++) {
    uint32_t slot = s % c->nslots;
    char *home = c->data + (size_t)slot * c->slot_bytes;
    if (c->to[slot] == NULL)
      continue;
    if ((int32_t)(s - c->done) < 0) /* landed: the executor did not take it */
      memcpy(home, c->to[slot], RCC_META_BYTES(c->fifo->meta[slot]));
    else if (!c->failed) /* still landing: what came so far moves along */
      (void)px->plugin->redirect(c->request[slot], home, c->slot_bytes, 1);
    c->to[slot] = NULL;
    moved++;
  }
  pthread_mutex_unlock(&px->lock);
  if (moved > 0)
    RCC_INFO(px->comm->rank, "network receive rank %d <- rank %d: %d "
             "message%s landing in the user's buffers moved to their slots "
             "after the call failed", px->comm->rank, c->peer, moved,
             moved == 1 ? "" : "s");
}

/* The executor waits for receive connection c's message seq, the next it
 * reads: it is read as it comes, never left in the socket for a landing
 * (parked), and its receive is posted now if it was not, so that it cannot
 * park before anybody asks. Where seq is in already (it came after the
 * executor looked), nothing: the next message is a later call's, and must
 * still be free to park and land there (wanting it instead made a whole
 * call's receives miss their landing, under load). 1 if seq was parked.
 * The caller holds px->lock. */
static int want_next(struct rcc_proxy *px, struct rcc_proxy_conn *c,
                     uint32_t seq) {
  ringcc_result_t r = RINGCC_SUCCESS;
  if (!c->parking || c->failed || c->net_comm == NULL)
    return 0;
  (void)progress_recv_posts(px, c, &r, 1);
  if (c->failed || (int32_t)(c->done - seq) > 0 ||
      (int32_t)(c->posted - seq) <= 0)
    return 0;
  return px->plugin->want(c->request[seq % c->nslots]);
}

/* on: the proxy thread stops polling the sockets (the executor's thread
 * polls them; the proxy thread only runs a round every POLL_MS); off: the
 * proxy thread takes over again, woken at once. */
static void drive(struct rcc_proxy *px, int on) {
  if (on) {
    __atomic_store_n(&px->driven, 1, __ATOMIC_RELEASE);
    return;
  }
  if (!__atomic_exchange_n(&px->driven, 0, __ATOMIC_ACQ_REL))
    return;
  ring(px->doorbell); /* out of its doorbell-only sleep */
}

/* After a wait: off if sends are pending, else stay on. */
static void settle(struct rcc_proxy *px) {
  /* Nothing left to send: the executor keeps the sockets (the proxy thread
   * still runs a round every POLL_MS, for failures between calls). */
  pthread_mutex_lock(&px->lock);
  int pending = sends_pending(px) || px->fail_conn != NULL ||
                (rcc_dead_rank(px->comm, NULL) >= 0 && !px->told);
  pthread_mutex_unlock(&px->lock);
  if (pending)
    drive(px, 0);
}

/* Sleeps until a socket of a connection with work is ready, or timeout_ms,
 * then progresses the connections that are ready. */
static void poll_ready(struct rcc_proxy *px, int timeout_ms) {
  int nfds = 0;
  /* What a send connection waits for: room in a socket, or news. */
  short send_events = px->plugin->send_events ? px->plugin->send_events
                                              : POLLOUT;
  pthread_mutex_lock(&px->lock);
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (c->failed || c->net_comm == NULL || (!c->is_send && c->bye) ||
        (c->is_send && c->done == c->posted))
      continue; /* nothing can come, or nothing to send; or no link */
    int fds[16];
    int k = px->plugin->fds(c->net_comm, fds, 16);
    timeout_ms = park_timeout(px, c, timeout_ms);
    if (k < 0 && nfds < MAX_POLL_FDS) {
      /* The plugin already holds bytes for it: progress it, do not sleep
       * (poll() ignores a negative fd and reports it as not ready). */
      px->xconn[nfds] = i;
      px->xfds[nfds++] = (struct pollfd){.fd = -1};
      timeout_ms = 0;
    }
    for (int j = 0; j < k && nfds < MAX_POLL_FDS; j++) {
      px->xconn[nfds] = i;
      px->xfds[nfds++] = (struct pollfd){
          .fd = fds[j], .events = c->is_send ? send_events : POLLIN};
    }
  }
  nfds = listener_fds(px, px->xfds, px->xconn, nfds);
  int listen_now = px->listen_now;
  /* A link this call waits for, not made yet: connect it (or ask) now. */
  if (progress_links(px, 0) || listen_now)
    timeout_ms = 0;
  pthread_mutex_unlock(&px->lock);
  int ready = poll(px->xfds, (nfds_t)nfds, timeout_ms);
  for (int j = 0; j < nfds; j++)
    if (px->xfds[j].fd < 0) {
      px->xfds[j].revents = POLLIN;
      ready++;
    }
  ready += listen_now;
  if (ready <= 0)
    return;
  /* Progress the connections whose sockets are ready, and only those. */
  pthread_mutex_lock(&px->lock);
  tell_readable(px, px->xfds, px->xconn, nfds);
  int last = -1;
  if (listen_now || listener_ready(px->xfds, px->xconn, nfds))
    progress_links(px, 1);
  for (int j = 0; j < nfds; j++) {
    if (px->xfds[j].revents == 0 || px->xconn[j] == last ||
        px->xconn[j] < 0)
      continue;
    last = px->xconn[j];
    struct rcc_proxy_conn *c = &px->conns[last];
    ringcc_result_t r = RINGCC_SUCCESS;
    if (!c->failed)
      (void)(c->is_send ? progress_send(px, c, &r) : progress_recv(px, c, &r));
  }
  publish_failure(px);
  progress_tell(px);
  pthread_mutex_unlock(&px->lock);
}

/* ---- the connection hooks (struct rcc_conn_ops) ---------------------------- */

static struct rcc_proxy_conn *engine(const struct rcc_conn *c) {
  return c->engine;
}

/* A slot published (a send filled, a receive slot freed): hand it to the
 * network from the executor's thread, so the proxy thread need not wake
 * up; unless a send could not finish. This hook stands in for the futex
 * wake of a FIFO without an engine (rcc_host_wake), so it keeps that
 * protocol too: a proxy thread asleep in idle_sleep is this FIFO word's
 * waiter, and its poll() set predates what push just posted (a receive on
 * a connection that had none pending, all its slots full, left the
 * connection's sockets out of it: it would see the bytes only at its
 * POLL_MS round), so it is rung to look again. */
static void op_published(struct rcc_conn *end) {
  struct rcc_proxy_conn *c = engine(end);
  uint32_t *waiters;
  if (push(c->proxy, c) != 0)
    drive(c->proxy, 0); /* the proxy thread finishes it */
  (void)idle_word(c, &waiters);
  __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the post before the look */
  if (__atomic_load_n(waiters, __ATOMIC_RELAXED) != 0)
    ring(c->proxy->doorbell);
}

/* A send published to leave with the ones the executor publishes next
 * (published_later in proto.h): handed to the plugin, which queues it
 * (TCP) or posts it (verbs); op_flush, or the executor's next wait, moves
 * the queue, so a run of sends leaves in one sendmsg() a socket, not one
 * each (docs/performance.md). The proxy thread, if it runs a round
 * meanwhile, may send them sooner. */
static void op_published_later(struct rcc_conn *end) {
  struct rcc_proxy_conn *c = engine(end);
  struct rcc_proxy *px = c->proxy;
  pthread_mutex_lock(&px->lock);
  want_link(px, c);
  if (!c->failed && c->net_comm != NULL) {
    ringcc_result_t r = RINGCC_SUCCESS;
    (void)post_sends(px, c, __atomic_load_n(&c->fifo->tail, __ATOMIC_ACQUIRE),
                     &r);
    publish_failure(px);
  }
  pthread_mutex_unlock(&px->lock);
}

/* Moves what op_published_later queued on c (all of c's posted sends); as
 * op_published, unless the executor waits through the engine next
 * (then_wait), which then moves what the sockets could not take yet: the
 * proxy thread is left asleep. */
static void op_flush(struct rcc_conn *end, int then_wait) {
  if (!then_wait)
    op_published(end);
  else
    (void)push(engine(end)->proxy, engine(end));
}

/* Waiting on a network FIFO: this thread sleeps in poll() on the sockets
 * itself and progresses the connections that are ready (the proxy thread
 * stands aside), so a message that arrives wakes the thread that wants it,
 * not a proxy thread that then wakes it.
 *
 * Polling adapts as the executor's waits do (spin.h), with one more rule: a
 * wait that outlasted the polling but ended sooner after it than the full
 * budget of polls takes restores them. Sleeping in poll() and being woken
 * costs more here than polling does, and a peer that sleeps answers late,
 * which makes this rank's waits outlast its polling too: halving alone lets
 * both ranks settle into sleeping for whole runs. A wait that lasts longer
 * than all the polling (a peer without a CPU) still halves it. */
static int op_wait(struct rcc_conn *end, const uint32_t *word, uint32_t old,
                   int (*check)(void *ctx), void *ctx) {
  struct rcc_proxy *px = engine(end)->proxy;
  struct rcc_spin *spin = &px->comm->spin;
  int budget = rcc_spin_budget(spin), i, r = 0;
  int64_t t0 = 0, t_out = 0;
  struct rcc_proxy_conn *c = engine(end);
  pthread_mutex_lock(&px->lock);
  want_link(px, c);
  if (!c->is_send && word == &c->fifo->tail)
    (void)want_next(px, c, end->step); /* this thread polls its socket next */
  pthread_mutex_unlock(&px->lock);
  drive(px, 1);
  for (i = 0; __atomic_load_n(word, __ATOMIC_ACQUIRE) == old; i++) {
    /* Poll the sockets (without sleeping) up to budget times, then yield
     * twice (a message on its way may land), then sleep in poll(). */
    int sleep = i >= budget + 2;
    if (i == 0 && budget == spin->spin)
      t0 = rcc_now_ns(); /* times the full polling (full_ns) */
    if (i == budget)
      t_out = rcc_now_ns();
    if (!sleep && i >= budget)
      sched_yield();
    poll_ready(px, sleep ? WAIT_SLICE_MS : 0);
    if (sleep && __atomic_load_n(word, __ATOMIC_ACQUIRE) == old &&
        (r = check(ctx)) != 0)
      break;
  }
  if (i <= budget) {
    spin->now = budget;
  } else {
    if (budget == spin->spin && budget > 0)
      spin->full_ns = t_out - t0;
    spin->now = rcc_now_ns() - t_out < spin->full_ns ? spin->spin : budget / 2;
  }
  settle(px);
  return r;
}

/* op_wait for whichever of several FIFOs of this engine is ready first
 * (ready(ctx)): the executor polls every socket with work, as in op_wait,
 * so the message or the room it waits for wakes the thread that wants it,
 * not the proxy thread and then it. */
static int op_wait_any(struct rcc_conn *const *conns, int n,
                       int (*ready)(void *ctx), int (*check)(void *ctx),
                       void *ctx) {
  struct rcc_proxy *px = engine(conns[0])->proxy;
  struct rcc_spin *spin = &px->comm->spin;
  int budget = rcc_spin_budget(spin), i, r = 0;
  pthread_mutex_lock(&px->lock);
  for (int k = 0; k < n; k++) { /* as op_wait, for each */
    struct rcc_proxy_conn *c = engine(conns[k]);
    want_link(px, c);
    if (!c->is_send)
      (void)want_next(px, c, conns[k]->step);
  }
  pthread_mutex_unlock(&px->lock);
  drive(px, 1);
  for (i = 0; !ready(ctx); i++) {
    int sleep = i >= budget + 2;
    if (!sleep && i >= budget)
      sched_yield();
    poll_ready(px, sleep ? WAIT_SLICE_MS : 0);
    if (sleep && !ready(ctx) && (r = check(ctx)) != 0)
      break;
  }
  settle(px);
  return r;
}

static void op_notify(struct rcc_conn *end) {
  ring(engine(end)->proxy->doorbell);
}

static void op_release(struct rcc_conn *end) {
  drive(engine(end)->proxy, 0);
}

/* The executor writes from[] before the tail that publishes the slot, and
 * the proxy reads it only after loading that tail (acquire). */
static void op_lend(struct rcc_conn *end, const char *p) {
  struct rcc_proxy_conn *c = engine(end);
  c->from[end->step % c->nslots] = p;
}

static int op_land(struct rcc_conn *end, uint32_t seq, char *p, size_t bytes) {
  struct rcc_proxy_conn *c = engine(end);
  return land(c->proxy, c, seq, p, bytes);
}

/* A channel executor is about to sleep on the FIFO's counter until its next
 * message is in, while the proxy thread serves the sockets: where that
 * message was parked, the proxy thread polls its socket again. */
static void op_want(struct rcc_conn *end) {
  struct rcc_proxy_conn *c = engine(end);
  struct rcc_proxy *px = c->proxy;
  pthread_mutex_lock(&px->lock);
  int woke = want_next(px, c, end->step);
  pthread_mutex_unlock(&px->lock);
  if (woke)
    ring(px->doorbell);
}

static void op_landed(struct rcc_conn *end, uint32_t seq) {
  struct rcc_proxy_conn *c = engine(end);
  c->to[seq % c->nslots] = NULL;
}

static void op_reclaim(struct rcc_conn *end) {
  struct rcc_proxy_conn *c = engine(end);
  if (c->is_send)
    detach(c->proxy, c);
  else
    unland(c->proxy, c);
}

static void op_unsent_all(struct rcc_conn *end, int all) {
  struct rcc_proxy_conn *c = engine(end);
  struct rcc_proxy *px = c->proxy;
  if (px->plugin->unsent_all == NULL)
    return;
  pthread_mutex_lock(&px->lock);
  if (c->is_send && c->net_comm != NULL && !c->failed)
    px->plugin->unsent_all(c->net_comm, all);
  pthread_mutex_unlock(&px->lock);
}

static const struct rcc_conn_ops net_conn_ops = {
    .published = op_published,
    .published_later = op_published_later,
    .flush = op_flush,
    .wait = op_wait,
    .wait_any = op_wait_any,
    .notify = op_notify,
    .release = op_release,
    .lend = op_lend,
    .land = op_land,
    .landed = op_landed,
    .want = op_want,
    .reclaim = op_reclaim,
    .unsent_all = op_unsent_all,
};

void rcc_proxy_bind(struct rcc_conn *end, struct rcc_proxy_conn *c) {
  end->fifo = c->fifo;
  end->data = c->data;
  end->nslots = c->nslots;
  end->slot_bytes = c->slot_bytes;
  end->step = 0;
  end->peer = c->peer;
  end->ops = &net_conn_ops;
  end->engine = c;
}

ringcc_result_t rcc_proxy_start(struct ringcc_comm *comm,
                                const struct rcc_net_plugin *plugin,
                                struct rcc_proxy_conn *conns, int nconns,
                                const struct rcc_proxy_links *links,
                                void *state, struct rcc_proxy **out) {
  struct rcc_proxy *px = calloc(1, sizeof(*px));
  if (px == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  px->comm = comm;
  px->state = state;
  px->plugin = plugin;
  px->conns = conns;
  px->nconns = nconns;
  if (links != NULL)
    px->links = *links;
  for (int i = 0; i < nconns; i++) {
    struct rcc_proxy_conn *c = &conns[i];
    c->proxy = px;
    if (!c->is_send)
      continue;
    if (links == NULL || c->net_comm != NULL || c->failed) {
      c->want = 0; /* made at init (an ask that crossed it) */
      continue;
    }
    px->nwant += c->want; /* asked for at init (accept_one) */
    px->device_links |= c->device;
  }
  px->pfds = calloc(MAX_POLL_FDS, sizeof(struct pollfd));
  px->pconn = calloc(MAX_POLL_FDS, sizeof(int));
  px->xfds = calloc(MAX_POLL_FDS, sizeof(struct pollfd));
  px->xconn = calloc(MAX_POLL_FDS, sizeof(int));
  px->doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pthread_mutex_init(&px->lock, NULL);
  if (px->pfds == NULL || px->pconn == NULL || px->xfds == NULL ||
      px->xconn == NULL || px->doorbell < 0) {
    int e = errno;
    rcc_proxy_forget(px);
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "init on rank %d: cannot create the proxy's "
                          "doorbell: %s", comm->rank, strerror(e));
  }
  /* Every wait for a socket goes through poll() here (idle_sleep,
   * rcc_proxy_poll), which reports what it found ready: the plugin need not
   * read a socket it found empty until then. */
  for (int i = 0; i < nconns && plugin->readable != NULL; i++)
    if (!conns[i].is_send && conns[i].net_comm != NULL)
      plugin->readable(conns[i].net_comm, -1);
  int e = rcc_proxy_run(px);
  if (e != 0) {
    rcc_proxy_forget(px);
    struct rlimit rl;
    char lim[160] = "";
    if (e == EAGAIN && getrlimit(RLIMIT_NPROC, &rl) == 0)
      snprintf(lim, sizeof(lim), " (the thread limit: RLIMIT_NPROC is %llu "
               "for this user, or kernel.threads-max; this communicator needs "
               "1 more thread, the network proxy)",
               (unsigned long long)rl.rlim_cur);
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "init on rank %d: cannot start the proxy thread: "
                          "%s%s", comm->rank, strerror(e), lim);
  }
  *out = px;
  return RINGCC_SUCCESS;
}

void rcc_proxy_halt(struct rcc_proxy *px) {
  if (!px->has_thread)
    return;
  __atomic_store_n(&px->stop, 1, __ATOMIC_RELEASE);
  ring(px->doorbell);
  pthread_join(px->thread, NULL);
  px->has_thread = 0;
  px->stop = 0;
}

void rcc_proxy_drain(struct rcc_proxy *px, int64_t deadline_ns) {
  /* After a failure or an abort the rank does not leave cleanly: no goodbye,
   * so peers see a failed peer, not one that destroyed its communicator. */
  if (px == NULL)
    return;
  drive(px, 0); /* the proxy thread finishes what is left */
  /* A rank that knows of a dead peer passes it on before it goes. */
  if (rcc_dead_rank(px->comm, NULL) >= 0) {
    ring(px->doorbell);
    int64_t until = rcc_now_ns() + (TELL_MS + 50) * 1000000LL;
    while (!__atomic_load_n(&px->told, __ATOMIC_ACQUIRE) &&
           rcc_now_ns() < until)
      usleep(100);
    return;
  }
  if (px->comm->aborted || rcc_comm_fatal(px->comm) != RINGCC_SUCCESS)
    return;
  __atomic_store_n(&px->closing, 1, __ATOMIC_RELEASE);
  ring(px->doorbell);
  /* The peers' goodbyes may take a while (they come when each destroys):
   * short sleeps first, then longer ones, which leave the CPU to them. */
  for (int waits = 0; !__atomic_load_n(&px->bye_done, __ATOMIC_ACQUIRE);
       waits++) {
    if (px->comm->aborted ||
        __atomic_load_n(&px->comm->async_error, __ATOMIC_ACQUIRE) != 0)
      return;
    if (rcc_now_ns() >= deadline_ns) {
      RCC_WARN(px->comm->rank, "destroy: gave up waiting for the network to "
                               "take the last messages of this rank");
      return;
    }
    usleep(waits < 50 ? 100 : 2000);
  }
}

void rcc_proxy_forget(struct rcc_proxy *px) {
  if (px == NULL)
    return;
  if (px->doorbell >= 0)
    close(px->doorbell);
  free(px->pfds);
  free(px->pconn);
  free(px->xfds);
  free(px->xconn);
  for (int i = 0; i < px->nusers; i++)
    free(px->users[i].rank);
  free(px->users);
  free(px);
}

void rcc_proxy_stop(struct rcc_proxy *px) {
  if (px == NULL)
    return;
  rcc_proxy_halt(px);
  pthread_mutex_destroy(&px->lock);
  rcc_proxy_forget(px);
}

/* The proxy's connection behind an executor's end (net_proxy_share.c). */
struct rcc_proxy_conn *rcc_proxy_engine(const struct rcc_conn *end) {
  return end != NULL && end->ops == &net_conn_ops ? end->engine : NULL;
}
