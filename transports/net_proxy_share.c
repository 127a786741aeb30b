/*
 * net_proxy_share.c - the network proxy's connections shared with
 * communicators shrunk from its own (net.c, net_proxy.h).
 *
 * ringcc_comm_shrink of a healthy communicator hands the new one the
 * intact links between the same two processes: its ends are bound to this
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
  }
}

int rcc_proxy_shareable(struct rcc_proxy_conn *c,
                        const struct ringcc_comm *parent) {
  struct rcc_proxy *px = c->proxy;
  pthread_mutex_lock(&px->lock);
  /* The chain: a new user is shrunk from the last one (or from comm). */
  const struct ringcc_comm *last =
      px->nusers > 0 ? px->users[px->nusers - 1].comm : px->comm;
  int ok = last == parent && c->net_comm != NULL && !c->failed && !c->bye &&
           c->tell == 0 && px->fail_conn == NULL && !px->closing;
  pthread_mutex_unlock(&px->lock);
  return ok;
}

ringcc_result_t rcc_proxy_share(struct rcc_proxy_conn *c,
                                struct ringcc_comm *comm, int rank) {
  struct rcc_proxy *px = c->proxy;
  ringcc_result_t r = RINGCC_SUCCESS;
  pthread_mutex_lock(&px->lock);
  if (c->failed || c->bye || c->net_comm == NULL) {
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
  c->kept = 1;
out:
  pthread_mutex_unlock(&px->lock);
  return r;
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

/* Ends connection c (nobody keeps it): the thread is halted. */
static void close_conn(struct rcc_proxy *px, struct rcc_proxy_conn *c) {
  if (c->net_comm != NULL) {
    if (c->mhandle != NULL)
      px->plugin->dereg_mr(c->net_comm, c->mhandle);
    if (c->is_send)
      px->plugin->close_send(c->net_comm);
    else
      px->plugin->close_recv(c->net_comm);
  }
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
