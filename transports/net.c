/*
 * net.c - the network transport: FIFOs on both ends of an edge between
 * hosts, joined by a network plugin (net.h) and the proxy thread
 * (net_proxy.c).
 *
 * For every peer it serves and every connection kind, a rank owns a send FIFO
 * (the executor fills slots, the proxy sends them) and a receive FIFO (the
 * proxy receives into free slots, the executor consumes them), both in local
 * memory registered with the plugin. Setup: listen and publish the handle;
 * connect to every peer (the hello carries our rank and the connection kind;
 * the plugin proves the communicator's network key on every connection, so
 * the hello is trusted) and accept every peer's connections, then close the
 * listener: after init nobody can connect. Where the plugin can use a link
 * both ways (reverse), only the lower rank of a pair connects, once per kind,
 * and both ends take their send and receive connections from that link: each
 * message then carries the acknowledgement of the last one that came the
 * other way, where one-way links cost an ACK packet per message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "agree.h"
#include "comm.h"
#include "env.h"
#include "error.h"
#include "transport.h"
#include "log.h"
#include "net.h"
#include "net_proxy.h"
#include "sha256.h"
#include "wire.h"

#define HELLO_MAGIC 0x52434e48u /* "RCNH" */

struct net_hello {
  uint32_t magic;
  int32_t rank;
  int32_t kind;
  int32_t nranks;
};
_Static_assert(sizeof(struct net_hello) <= RCC_NET_HELLO_BYTES, "hello size");

struct net_state {
  const struct rcc_net_plugin *plugin;
  void *listen_comm;
  uint8_t key[RCC_NET_KEY_BYTES]; /* from the communicator's (net_key) */
  struct rcc_proxy_conn *conns; /* [2 * kinds * npeers]: send, recv pairs */
  int nconns;
  int nkinds;   /* comm->nkinds: host kinds, and device kinds (staged) */
  int duplex;   /* one link per pair and kind, used both ways (reverse) */
  struct rcc_proxy *proxy;
  char describe[96];
};

/* The network plugins, best first: RINGCC_NET names one, else the first that
 * every rank with network edges can use carries them. A new plugin is one
 * file (net_<name>.c, a struct rcc_net_plugin) and one line here. */
static const struct rcc_net_plugin *const plugins[] = {
    &rcc_net_socket,
};
#define NUM_PLUGINS (int)(sizeof(plugins) / sizeof(plugins[0]))

static int net_can_connect(const struct ringcc_comm *comm,
                           const struct rcc_peer_info *me,
                           const struct rcc_peer_info *peer) {
  (void)comm, (void)me, (void)peer;
  return 1; /* the last resort: any two ranks that can reach each other */
}

static size_t net_slot_bytes(const struct ringcc_comm *comm) {
  return (size_t)comm->set.net_chunk_bytes;
}

static const char *ifname_spec(const struct ringcc_comm *comm) {
  return comm->config.socket_ifname ? comm->config.socket_ifname
                                    : rcc_getenv("RINGCC_SOCKET_IFNAME");
}

/* The plugins this rank can use (bit p: plugins[p]), trying each in order
 * (only the one RINGCC_NET names, when it is set); INFO says why one is
 * not used. A rank without network edges can use any. */
static ringcc_result_t usable_plugins(struct ringcc_comm *comm, int npeers,
                                      uint32_t *mask) {
  const char *forced = rcc_getenv("RINGCC_NET");
  char err[RCC_ERRLEN];
  int found = forced == NULL;
  *mask = 0;
  for (int p = 0; p < NUM_PLUGINS; p++) {
    if (forced != NULL && strcasecmp(forced, plugins[p]->name) != 0)
      continue;
    found = 1;
    if (npeers == 0) {
      *mask |= 1u << p;
      continue;
    }
    ringcc_result_t r = plugins[p]->init(ifname_spec(comm), err, sizeof(err));
    if (r == RINGCC_SUCCESS) {
      *mask |= 1u << p;
    } else if (forced != NULL) {
      return rcc_comm_error(comm, r, "net on rank %d: RINGCC_NET=%s, but the "
                            "%s plugin cannot run here: %s", comm->rank,
                            forced, plugins[p]->name, err);
    } else {
      RCC_INFO(comm->rank, "net: the %s plugin is not used: %s",
               plugins[p]->name, err);
    }
  }
  if (!found) {
    char names[128];
    int off = 0;
    for (int p = 0; p < NUM_PLUGINS; p++)
      off += snprintf(names + off, sizeof(names) - (size_t)off, "%s%s",
                      p ? ", " : "", plugins[p]->name);
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "net on rank %d: RINGCC_NET=%s is not a network "
                          "plugin (%s)", comm->rank, forced, names);
  }
  return RINGCC_SUCCESS;
}

/* The plugin every rank uses: the first that all can (all ranks call this
 * in the same step of init, so they agree through the bootstrap). */
static ringcc_result_t choose_plugin(struct ringcc_comm *comm, int npeers,
                                     int *chosen) {
  struct record {
    int32_t status;
    uint32_t mask;
  } *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  uint32_t mine = 0, every = ~0u;
  ringcc_result_t r = usable_plugins(comm, npeers, &mine);
  all[comm->rank].mask = mine;
  r = rcc_agree_records(comm, r, all, sizeof(*all), "the choice of a network "
                        "plugin", comm->init_deadline);
  for (int q = 0; q < comm->nranks; q++)
    every &= all[q].mask;
  free(all);
  if (r != RINGCC_SUCCESS)
    return r;
  *chosen = -1;
  for (int p = NUM_PLUGINS - 1; p >= 0; p--)
    if (every & (1u << p))
      *chosen = p;
  if (*chosen < 0 && npeers > 0)
    return rcc_comm_error(comm, RINGCC_ERR_NETWORK,
                          "net on rank %d: no network plugin works on every "
                          "rank (this rank's mask 0x%x, all ranks' 0x%x); "
                          "RINGCC_DEBUG=INFO on each rank says why",
                          comm->rank, mine, every);
  return RINGCC_SUCCESS;
}

/* The network transport's key: derived from the communicator's (which
 * never travels), for the plugin's proofs. */
static void net_key(const struct ringcc_comm *comm,
                    uint8_t key[RCC_NET_KEY_BYTES]) {
  static const char label[] = "ringcc v2: network transport key";
  _Static_assert(RCC_NET_KEY_BYTES == RCC_SHA256_BYTES, "key size");
  rcc_hmac_sha256(comm->key, sizeof(comm->key), label, sizeof(label), key);
}

static ringcc_result_t net_setup(struct ringcc_comm *comm, const int *peers,
                                 int npeers, void *blob, void **state) {
  char err[RCC_ERRLEN];
  struct net_state *st = calloc(1, sizeof(*st));
  int chosen;
  (void)peers;
  *state = st;
  if (st == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  ringcc_result_t r = choose_plugin(comm, npeers, &chosen);
  if (r != RINGCC_SUCCESS || npeers == 0)
    return r;
  st->plugin = plugins[chosen];
  net_key(comm, st->key);
  r = st->plugin->listen(st->key, blob, &st->listen_comm, err, sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "net on rank %d: %s", comm->rank, err);
  snprintf(st->describe, sizeof(st->describe), "NET/%s/%s", st->plugin->name,
           st->plugin->device());
  return RINGCC_SUCCESS;
}

static ringcc_result_t alloc_fifo(struct ringcc_comm *comm,
                                  const struct net_state *st,
                                  struct rcc_proxy_conn *c, int peer,
                                  int is_send) {
  char err[RCC_ERRLEN];
  size_t data = (size_t)comm->set.nslots * net_slot_bytes(comm);
  void *mem = NULL;
  /* Whole pages: device kinds are registered with CUDA (cuda.c), and two
   * FIFOs must never share a page. */
  size_t bytes = (RCC_FIFO_DATA_OFFSET + data + 4095) & ~(size_t)4095;
  if (posix_memalign(&mem, 4096, bytes) != 0)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: no memory for a %zu-byte FIFO",
                          comm->rank, data);
  memset(mem, 0, RCC_FIFO_DATA_OFFSET);
  c->fifo = mem;
  c->data = (char *)mem + RCC_FIFO_DATA_OFFSET;
  c->nslots = (uint32_t)comm->set.nslots;
  c->slot_bytes = net_slot_bytes(comm);
  c->is_send = is_send;
  c->peer = peer;
  (void)st, (void)err;
  return RINGCC_SUCCESS;
}

int rcc_net_hello_parse(const uint8_t *in, size_t len, int my_rank,
                        int nranks, int *peer, int *kind) {
  struct net_hello h;
  if (len < sizeof(h))
    return 0;
  memcpy(&h, in, sizeof(h));
  *peer = h.rank;
  *kind = h.kind;
  return h.magic == HELLO_MAGIC && h.nranks == nranks &&
         h.rank >= 0 && h.rank < nranks && h.rank != my_rank &&
         h.kind >= 0 && h.kind < RCC_MAX_CONN_KINDS;
}

/* The receive connection slot for (peer, kind), or NULL if not ours (or
 * taken, or, both ways, a peer that should not connect to us). */
static struct rcc_proxy_conn *recv_slot(struct net_state *st, int my_rank,
                                        int peer, int kind) {
  if (st->duplex && peer > my_rank)
    return NULL;
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    if (!c->is_send && c->peer == peer && (i / 2) % st->nkinds == kind)
      return c->net_comm ? NULL : c;
  }
  return NULL;
}

static ringcc_result_t connect_all(struct ringcc_comm *comm,
                                   struct net_state *st, const int *peers,
                                   int npeers, const char *all_blobs) {
  char err[RCC_ERRLEN];
  for (int i = 0; i < npeers; i++)
    for (int k = 0; k < st->nkinds; k++) {
      struct rcc_proxy_conn *c = &st->conns[2 * (i * st->nkinds + k)];
      if (st->duplex && peers[i] < comm->rank)
        continue; /* the lower rank connects; we accept */
      struct net_hello hello = {.magic = HELLO_MAGIC, .rank = comm->rank,
                                .kind = k, .nranks = comm->nranks};
      uint8_t wire[RCC_NET_HELLO_BYTES] = {0};
      memcpy(wire, &hello, sizeof(hello));
      ringcc_result_t r = st->plugin->connect(
          st->key, all_blobs + (size_t)peers[i] * RCC_TRANSPORT_BLOB_BYTES,
          wire, &c->net_comm, comm->init_deadline, err, sizeof(err));
      if (r == RINGCC_SUCCESS && st->duplex)
        r = st->plugin->reverse(c->net_comm, &c[1].net_comm, err, sizeof(err));
      if (r != RINGCC_SUCCESS)
        return rcc_comm_error(comm, r,
                              "net on rank %d: cannot connect to rank %d "
                              "(host %s): %s",
                              comm->rank, peers[i],
                              comm->peers[peers[i]].hostname, err);
    }
  return RINGCC_SUCCESS;
}

static ringcc_result_t accept_all(struct ringcc_comm *comm,
                                  struct net_state *st, int expected) {
  char err[RCC_ERRLEN];
  while (expected > 0) {
    uint8_t wire[RCC_NET_HELLO_BYTES];
    int peer, kind;
    void *rc = NULL;
    ringcc_result_t r = st->plugin->accept(st->listen_comm, wire, &rc,
                                           comm->init_deadline, err,
                                           sizeof(err));
    if (r != RINGCC_SUCCESS)
      return rcc_comm_error(comm, r,
                            "net on rank %d: waiting for %d more connection%s "
                            "from peers: %s",
                            comm->rank, expected, expected == 1 ? "" : "s",
                            err);
    struct rcc_proxy_conn *c =
        rcc_net_hello_parse(wire, sizeof(wire), comm->rank, comm->nranks,
                            &peer, &kind)
            ? recv_slot(st, comm->rank, peer, kind)
            : NULL;
    if (c == NULL) {
      RCC_WARN(comm->rank, "net: refused a connection that proved the key "
                           "but is not one this rank expects (rank %d, kind "
                           "%d: taken already, or not a peer of this rank)",
               peer, kind);
      st->plugin->close_recv(rc);
      continue;
    }
    /* Both ways: the send connection to the peer is the same link. Its slot
     * precedes the receive slot (conns holds send, receive pairs). */
    if (st->duplex &&
        (r = st->plugin->reverse(rc, &c[-1].net_comm, err, sizeof(err))) !=
            RINGCC_SUCCESS) {
      st->plugin->close_recv(rc);
      return rcc_comm_error(comm, r, "net on rank %d: the link from rank %d: "
                            "%s", comm->rank, peer, err);
    }
    c->net_comm = rc;
    expected--;
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t net_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  char err[RCC_ERRLEN];
  struct net_state *st = state;
  ringcc_result_t r;
  if (npeers == 0)
    return RINGCC_SUCCESS;
  st->nkinds = comm->nkinds;
  st->nconns = 2 * st->nkinds * npeers;
  st->duplex = st->plugin->reverse != NULL;
  int lower = 0; /* peers that connect to us */
  for (int i = 0; i < npeers; i++)
    lower += peers[i] < comm->rank;
  st->conns = calloc((size_t)st->nconns, sizeof(*st->conns));
  if (st->conns == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  for (int i = 0; i < st->nconns; i++)
    if ((r = alloc_fifo(comm, st, &st->conns[i], peers[i / (2 * st->nkinds)],
                        i % 2 == 0)) != RINGCC_SUCCESS)
      return r;
  if ((r = connect_all(comm, st, peers, npeers, all_blobs)) != RINGCC_SUCCESS ||
      (r = accept_all(comm, st,
                      st->duplex ? lower * st->nkinds : st->nconns / 2)) !=
          RINGCC_SUCCESS)
    return r;
  /* Every peer is connected: nobody may connect any more. */
  st->plugin->close_listen(st->listen_comm);
  st->listen_comm = NULL;
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    r = st->plugin->reg_mr(c->net_comm, c->data,
                           (size_t)c->nslots * c->slot_bytes, &c->mhandle, err,
                           sizeof(err));
    if (r != RINGCC_SUCCESS)
      return rcc_comm_error(comm, r, "net on rank %d: %s", comm->rank, err);
  }
  int links = st->duplex ? st->nkinds : 2 * st->nkinds;
  RCC_INFO(comm->rank, "net: %d peer%s, %d link%s per peer%s", npeers,
           npeers == 1 ? "" : "s", links, links == 1 ? "" : "s",
           st->duplex ? ", each used both ways (the lower rank connects)"
                      : " (one each way)");
  if ((r = rcc_proxy_start(comm, st->plugin, st->conns, st->nconns,
                           &st->proxy)) != RINGCC_SUCCESS)
    return r;
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    int kind = (i / 2) % st->nkinds;
    rcc_proxy_bind(c->is_send ? &comm->send_conn[kind][c->peer]
                              : &comm->recv_conn[kind][c->peer],
                   c);
  }
  return RINGCC_SUCCESS;
}

static void net_finish(struct ringcc_comm *comm, void *state) {
  (void)comm, (void)state;
}

static void net_destroy(struct ringcc_comm *comm, void *state) {
  struct net_state *st = state;
  if (st == NULL)
    return;
  if (comm->forked) { /* a child's copy: no goodbye, no thread to stop */
    rcc_proxy_forget(st->proxy);
  } else {
    rcc_proxy_drain(st->proxy, rcc_deadline_after_ms(comm->set.timeout_ms));
    rcc_proxy_stop(st->proxy); /* first: nothing may touch the conns after */
  }
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    if (c->net_comm) {
      if (c->mhandle)
        st->plugin->dereg_mr(c->net_comm, c->mhandle);
      if (c->is_send)
        st->plugin->close_send(c->net_comm);
      else
        st->plugin->close_recv(c->net_comm);
    }
    free(c->fifo);
  }
  if (st->listen_comm)
    st->plugin->close_listen(st->listen_comm);
  free(st->conns);
  memset(st->key, 0, sizeof(st->key));
  free(st);
}

static const char *net_describe(void *state) {
  return ((struct net_state *)state)->describe;
}

/* The plugin's link kind (agreed: the same plugin on every rank). */
static int net_link(const struct ringcc_comm *comm, void *state, int peer) {
  const struct net_state *st = state;
  (void)comm, (void)peer;
  return st != NULL && st->plugin != NULL ? st->plugin->link : RCC_LINK_TCP;
}

const struct rcc_transport rcc_transport_net = {
    .name = "NET",
    .can_connect = net_can_connect,
    .slot_bytes = net_slot_bytes,
    .setup = net_setup,
    .connect = net_connect,
    .finish = net_finish,
    .destroy = net_destroy,
    .describe = net_describe,
    .link = net_link,
    .flags = RCC_TRANSPORT_NETWORK,
};
