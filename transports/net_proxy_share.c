/*
 * net_proxy_share.c - the network proxy's connections shared with
 * communicators shrunk from its own (net.c, net_proxy.h).
 *
 * ringcc_comm_shrink hands the new one the intact links between the same
 * two processes (after a failure too: each resynced at a message boundary
 * first, rcc_proxy_resync): its ends are bound to this
 * proxy's connections (rcc_proxy_share), and it becomes a user, with its
 * own number for each rank it reaches here. Failures on a connection reach
 * every communicator that uses it, each in its own numbers; the connections
 * a user keeps get no goodbye when px->comm is destroyed (kept). Then the
 * first user (the one with the most peers here: every later one was shrunk
 * from it or from one of its own) takes the proxy over (rcc_proxy_hand_over):
 * the connections nobody keeps end, with their goodbyes, and the rest go on
 * in its numbering. The last one does the goodbyes and closes them.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "comm.h"
#include "log.h"
#include "net.h"
#include "net_proxy.h"
#include "net_proxy_int.h"

void *rcc_proxy_state(const struct rcc_proxy *px) { return px->state; }

/* forked: in a process forked from the one that runs the thread, whose
 * lock it may have held at the fork (so it is not taken). */
int rcc_proxy_users(struct rcc_proxy *px, int forked) {
  if (px == NULL)
    return 0;
  if (!forked)
    pthread_mutex_lock(&px->lock);
  int n = px->nusers;
  if (!forked)
    pthread_mutex_unlock(&px->lock);
  return n;
}

/* kept: a user reaches c's peer over this proxy. The caller holds the lock. */
static void keep_marks(struct rcc_proxy *px) {
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    c->kept = 0;
    for (int k = 0; k < px->nusers && !c->kept; k++)
      c->kept = user_rank(&px->users[k], c->peer) >= 0;
    if (!c->kept)
      c->shared = 0;
  }
}

int rcc_proxy_shareable(struct rcc_proxy_conn *c,
                        const struct ringcc_comm *parent) {
  struct rcc_proxy *px = c->proxy;
  pthread_mutex_lock(&px->lock);
  /* The chain: a new user is shrunk from the last one (or from comm). */
  const struct ringcc_comm *last =
      px->nusers > 0 ? px->users[px->nusers - 1].comm : px->comm;
  /* After a failure too: a stream that stopped mid-call, or that a FAIL
   * message ended (a receive's bye, fail_heard), is resynced when taken
   * (rcc_proxy_resync); a goodbye ends it for good. */
  int ok = last == parent && c->net_comm != NULL && !c->failed &&
           (!c->bye || (!c->is_send && c->fail_heard)) && !px->closing;
  pthread_mutex_unlock(&px->lock);
  return ok;
}

ringcc_result_t rcc_proxy_share(struct rcc_proxy_conn *c,
                                struct ringcc_comm *comm, int rank) {
  struct rcc_proxy *px = c->proxy;
  ringcc_result_t r = RINGCC_SUCCESS;
  pthread_mutex_lock(&px->lock);
  if (c->failed || (c->bye && (c->is_send || !c->fail_heard)) ||
      c->net_comm == NULL) {
    r = RINGCC_ERR_NETWORK; /* it failed since the blobs said it would do */
    goto out;
  }
  int i = 0;
  while (i < px->nusers && px->users[i].comm != comm)
    i++;
  if (i == px->nusers) {
    struct proxy_user *more =
        realloc(px->users, (size_t)(px->nusers + 1) * sizeof(*more));
    int *map = malloc((size_t)px->comm->nranks * sizeof(int));
    if (more != NULL)
      px->users = more;
    if (more == NULL || map == NULL) {
      free(map);
      r = RINGCC_ERR_OUT_OF_MEMORY;
      goto out;
    }
    memset(&px->users[i], 0, sizeof(px->users[i]));
    px->users[i].comm = comm;
    px->users[i].rank = map;
    for (int p = 0; p < px->comm->nranks; p++)
      map[p] = -1;
    px->nusers++;
  }
  px->users[i].rank[c->peer] = rank;
  c->kept = c->shared = 1;
out:
  pthread_mutex_unlock(&px->lock);
  return r;
}

/* Starts the resync of c (rcc_proxy_resync); the caller holds the lock. */
static void resync_start(struct rcc_proxy_conn *c) {
  if (c->is_send) {
    c->resync = 1;
    return;
  }
  uint32_t head = __atomic_load_n(&c->fifo->head, __ATOMIC_ACQUIRE), s;
  /* The peer's RESYNC may have come already (its shrink got here first),
   * and the new communicator's messages after it: they stay. */
  for (s = head; s != c->done; s++)
    if ((uint32_t)(c->fifo->meta[s % c->nslots] >> 32) == IMM_RESYNC)
      break;
  int found = s != c->done;
  if (!found && c->bye && c->fail_heard) {
    /* A FAIL message took the receive posted at done, and nothing was
     * read after it: that receive is retired, and the link re-armed. */
    c->to[c->done % c->nslots] = NULL;
    c->done++;
    c->bye = c->fail_heard = 0;
  }
  uint32_t start = found ? s + 1 : c->done; /* the new user's first */
  for (uint32_t t = head; t != start; t++)
    c->to[t % c->nslots] = NULL;
  c->resync = found ? 2 : 1;
  __atomic_store_n(&c->fifo->tail, c->done, __ATOMIC_RELEASE);
  __atomic_store_n(&c->fifo->head, start, __ATOMIC_RELEASE);
}

static int resync_done(const struct rcc_proxy_conn *c) {
  return c->resync == (c->is_send ? 3 : 2);
}

ringcc_result_t rcc_proxy_resync(struct rcc_proxy_conn *const *c, int n,
                                 int64_t deadline_ns, char *err,
                                 size_t errlen) {
  uint64_t one = 1;
  for (int i = 0; i < n; i++) {
    struct rcc_proxy *px = c[i]->proxy;
    pthread_mutex_lock(&px->lock);
    resync_start(c[i]);
    pthread_mutex_unlock(&px->lock);
    /* The proxy thread polls the sockets (an executor may have left them
     * to itself: the plugin reads a socket poll() found ready), now. */
    __atomic_store_n(&px->driven, 0, __ATOMIC_RELEASE);
    ssize_t w = write(px->doorbell, &one, sizeof(one));
    (void)w;
  }
  /* The rounds run here too, for the RESYNC messages to go out at once. */
  for (int sleep_us = 20;; sleep_us = sleep_us < 1000 ? 2 * sleep_us : 1000) {
    int pending = -1, failed = -1;
    for (int i = 0; i < n; i++) {
      struct rcc_proxy *px = c[i]->proxy;
      int seen = 0;
      for (int j = 0; j < i && !seen; j++)
        seen = c[j]->proxy == px;
      if (!seen) {
        pthread_mutex_lock(&px->lock);
        rcc_proxy_round(px);
        pthread_mutex_unlock(&px->lock);
      }
    }
    for (int i = 0; i < n; i++) {
      struct rcc_proxy *px = c[i]->proxy;
      pthread_mutex_lock(&px->lock);
      if (c[i]->failed && failed < 0)
        failed = i;
      else if (!resync_done(c[i]) && pending < 0)
        pending = i;
      pthread_mutex_unlock(&px->lock);
    }
    int bad = failed >= 0 ? failed : pending;
    if (bad < 0)
      return RINGCC_SUCCESS;
    if (failed >= 0 || rcc_now_ns() >= deadline_ns) {
      /* Never half a resync: what did not finish fails, for every
       * communicator that uses it. */
      ringcc_result_t r = failed >= 0 ? RINGCC_ERR_NETWORK : RINGCC_ERR_TIMEOUT;
      snprintf(err, errlen, "the %s link with rank %d (of the communicator "
               "shrunk from) %s", c[bad]->is_send ? "send" : "receive",
               c[bad]->peer,
               failed >= 0 ? "failed while it was resynced"
                           : c[bad]->is_send
                                 ? "did not take its RESYNC message before "
                                   "the deadline"
                                 : "brought no RESYNC message before the "
                                   "deadline (the peer did not shrink, or "
                                   "is stopped)");
      for (int i = 0; i < n; i++) {
        struct rcc_proxy *px = c[i]->proxy;
        pthread_mutex_lock(&px->lock);
        if (!c[i]->failed && !resync_done(c[i]))
          rcc_proxy_fail(px, c[i], r, err);
        pthread_mutex_unlock(&px->lock);
      }
      return r;
    }
    usleep((useconds_t)sleep_us);
  }
}

void rcc_proxy_unshare(struct rcc_proxy *px, struct ringcc_comm *comm,
                       int forked) {
  if (!forked)
    pthread_mutex_lock(&px->lock);
  for (int i = 0; i < px->nusers; i++)
    if (px->users[i].comm == comm) {
      free(px->users[i].rank);
      memmove(&px->users[i], &px->users[i + 1],
              (size_t)(px->nusers - i - 1) * sizeof(px->users[i]));
      px->nusers--;
      break;
    }
  keep_marks(px);
  if (!forked)
    pthread_mutex_unlock(&px->lock);
}

void rcc_proxy_conn_close(const struct rcc_net_plugin *plugin,
                          struct rcc_proxy_conn *c) {
  if (c->net_comm == NULL)
    return;
  if (c->mhandle != NULL)
    plugin->dereg_mr(c->net_comm, c->mhandle);
  if (c->is_send)
    plugin->close_send(c->net_comm);
  else
    plugin->close_recv(c->net_comm);
}

/* Ends connection c (nobody keeps it): the thread is halted. */
static void close_conn(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  rcc_proxy_conn_close(px->plugin, c);
  c->net_comm = c->mhandle = NULL;
  c->failed = 1;
  c->peer = -1;
}

struct ringcc_comm *rcc_proxy_hand_over(struct rcc_proxy *px, int forked,
                                        int64_t deadline_ns) {
  int map[RCC_PROXY_SHARE_MAX];
  if (!forked) {
    rcc_proxy_drain(px, deadline_ns); /* goodbyes on what nobody keeps */
    rcc_proxy_halt(px);
  }
  /* What the heir does not use ends (every other user's peers are among
   * its own: the chain). As destroy does: the links this rank connected
   * (the lower rank) first, then the ones it accepted. */
  struct proxy_user heir = px->users[0];
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < px->nconns; i++) {
      struct rcc_proxy_conn *c = &px->conns[i];
      if (c->peer >= 0 && user_rank(&heir, c->peer) < 0 &&
          (c->peer > px->comm->rank) == (pass == 0))
        close_conn(px, c);
    }
  memmove(&px->users[0], &px->users[1],
          (size_t)(px->nusers - 1) * sizeof(px->users[0]));
  px->nusers--;
  for (int i = 0; i < px->nconns; i++) {
    struct rcc_proxy_conn *c = &px->conns[i];
    if (c->peer >= 0)
      c->peer = heir.rank[c->peer];
    c->tell = 0;
  }
  for (int k = 0; k < px->nusers; k++) { /* the others, in heir's numbers */
    struct proxy_user *u = &px->users[k];
    for (int q = 0; q < heir.comm->nranks; q++)
      map[q] = -1;
    for (int p = 0; p < px->comm->nranks; p++)
      if (heir.rank[p] >= 0)
        map[heir.rank[p]] = u->rank[p];
    memcpy(u->rank, map, (size_t)heir.comm->nranks * sizeof(int));
  }
  px->comm = heir.comm;
  px->fail_conn = heir.fail_conn;
  px->fail_code = heir.fail_code;
  px->fail_published = heir.fail_published;
  memcpy(px->fail_err, heir.fail_err, sizeof(px->fail_err));
  free(heir.rank);
  px->closing = px->bye_done = px->byes_out = px->told = 0;
  px->bye_wait_until = px->tell_deadline = px->next_link_check = 0;
  memset(&px->links, 0, sizeof(px->links)); /* its links are made */
  px->nwant = px->device_links = px->listen_now = 0;
  px->driven = 0;
  keep_marks(px);
  if (!forked) {
    int e = rcc_proxy_run(px);
    if (e != 0)
      RCC_WARN(px->comm->rank, "net: cannot restart the proxy thread of the "
               "links this communicator took over from the one it was "
               "shrunk from: %s; its calls progress them alone",
               strerror(e));
  }
  RCC_INFO(px->comm->rank, "net: the links shared with the communicator "
           "this one was shrunk from are this one's now (that one was "
           "destroyed)");
  return px->comm;
}
