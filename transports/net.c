/*
 * net.c - the network transport: FIFOs on both ends of an edge between
 * hosts, joined by a network plugin (net.h) and the proxy thread
 * (net_proxy.c).
 *
 * For every peer it serves and every FIFO set (connection kind and channel,
 * comm.h), a rank owns a send FIFO (the executor fills slots, the proxy
 * sends them) and a receive FIFO (the proxy receives into free slots, the
 * executor consumes them), both in local memory registered with the
 * plugin. Setup: listen and publish the handle; connect to every peer (the
 * hello carries our rank and the FIFO set; the plugin proves the
 * communicator's network key on every connection, so the hello is trusted)
 * and accept every peer's connections, then close the listener: after init
 * nobody can connect. Where the plugin can use a link both ways (reverse),
 * only the lower rank of a pair connects, once per set,
 * and both ends take their send and receive connections from that link: each
 * message then carries the acknowledgement of the last one that came the
 * other way, where one-way links cost an ACK packet per message.
 *
 * Links on first use (RINGCC_NET_CONNECT=lazy, the default, where the
 * plugin links both ways and sets a connection up in connect() and accept()
 * alone: TCP). Init links each rank to the ring's neighbours in rank order
 * only (rank - 1 and rank + 1: the network is proven at init, and every
 * rank watches a link each way); FIFOs are made for every peer, but a
 * pair's other links wait for a call that needs them. The listener stays
 * open, and the proxy (net_proxy.c, progress_links) makes a link when an
 * executor first publishes into or waits on one of its FIFOs: the lower
 * rank connects (lazy_connect), the higher sends an ask (a connection whose
 * hello says HELLO_ASK, closed at once) until the lower one's connection
 * comes (lazy_accept). The plugin proves the key on each of them as at
 * init. The open-file limit is raised for every link at init as before;
 * below what they need, init warns, and the call whose link runs out fails
 * with RINGCC_ERR_SYSTEM naming the limit and the number.
 *
 * The plugin: RINGCC_NET (IB or Socket) forces one; RINGCC_IB_DISABLE=1
 * leaves verbs out; otherwise the first of plugins[] whose init succeeds on
 * every rank with network edges (verbs where a port is active, else TCP):
 * the ranks agree on it at init, so ranks that would choose differently
 * fail with a sentence, not a hang. Where
 * the plugin registers GPU memory (gdr), device-kind FIFOs keep their slots
 * in GPU memory (GPUDirect RDMA); else in host memory, staged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "clock.h"
#include "agree.h"
#include "comm.h"
#include "crc32c.h"
#include "env.h"
#include "error.h"
#include "failure.h"
#include "fifo.h"
#include "topo.h"
#include "transport.h"
#include "log.h"
#include "net.h"
#include "net_proxy.h"
#include "sha256.h"
#include "socket.h"
#include "wire.h"

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu.h"
#endif

#define HELLO_MAGIC 0x52434e48u /* "RCNH" */

struct net_hello {
  uint32_t magic;
  int32_t rank;
  int32_t kind;   /* the FIFO set: (connection kind, channel), comm.h */
  int32_t nranks;
  uint32_t flags; /* HELLO_ASK, or 0 */
};
/* Lazy links: the connection only asks the listener's rank (the lower of
 * the pair) to connect the link (rank, kind); it is closed at once. */
#define HELLO_ASK 1u
_Static_assert(sizeof(struct net_hello) <= RCC_NET_HELLO_BYTES, "hello size");

struct net_state {
  struct ringcc_comm *comm;
  const struct rcc_net_plugin *plugin;
  void *listen_comm;
  uint8_t key[RCC_NET_KEY_BYTES]; /* from the communicator's (net_key) */
  struct rcc_proxy_conn *conns; /* [2 * sets * npeers]: send, recv pairs */
  char **gpu_data;              /* [nconns] slots in GPU memory, or NULL */
  int nconns;
  int nsets;    /* FIFO sets (kinds x channels, comm.h) of comm->nkinds
                   kinds: host kinds, and device kinds */
  int duplex;   /* one link per pair and kind, used both ways (reverse) */
  int gdr;      /* device kinds' slots in GPU memory (GPUDirect RDMA) */
  int lazy;     /* RINGCC_NET_CONNECT=lazy: links made on first use */
  int npeers;
  int *peers;       /* lazy: the network peers, */
  uint8_t *handles; /* and their listen handles (RCC_NET_HANDLE_BYTES) */
  struct rcc_proxy *proxy;
  char describe[96];
  /* A shrunk communicator's: the child ranks whose parent links this rank
   * can take over (a bit each, sent in the blob after the handle), and the
   * states (of the parent, or of a communicator it was shrunk from) whose
   * proxies carry the links it took. */
  uint8_t reuse_map[RCC_TRANSPORT_BLOB_BYTES - RCC_NET_HANDLE_BYTES];
  struct net_state **borrowed;
  int nborrowed;
  const char *all_blobs; /* during connect only */
};
#define REUSE_MAP_BYTES (RCC_TRANSPORT_BLOB_BYTES - RCC_NET_HANDLE_BYTES)
_Static_assert(REUSE_MAP_BYTES * 8 >= RCC_PROXY_SHARE_MAX, "reuse map size");
#define REUSE_BIT(map, q) (((map)[(q) / 8] >> ((q) % 8)) & 1)

/* The network plugins, best first: RINGCC_NET names one, else the first that
 * every rank with network edges can use carries them. A new plugin is one
 * file (net_<name>.c, a struct rcc_net_plugin) and one line here. */
static const struct rcc_net_plugin *const plugins[] = {
    &rcc_net_ib,
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

/* For a plugin's locate(): this rank's place on its host and its GPU. */
static void locality(const struct ringcc_comm *comm,
                     struct rcc_net_locality *where) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  memset(where, 0, sizeof(*where));
  for (int p = 0; p < comm->nranks; p++)
    if (comm->peers[p].host_hash == me->host_hash) {
      where->local_rank += p < comm->rank;
      where->local_size++;
    }
  uint64_t b = me->gpu.bus_id;
  if (me->gpu.device >= 0 && b != 0)
    snprintf(where->gpu_pci, sizeof(where->gpu_pci), "%04x:%02x:%02x.%x",
             (unsigned)(b >> 32), (unsigned)(b >> 16) & 0xff,
             (unsigned)(b >> 8) & 0xff, (unsigned)b & 0xff);
}

/* A plugin's disable_env (RINGCC_IB_DISABLE for verbs): 0 (or unset) or 1,
 * read here only; *off is set to 1 when it leaves the plugin out. An other
 * value is an error that names the variable. */
static ringcc_result_t disabled_by(struct ringcc_comm *comm,
                                   const struct rcc_net_plugin *pl, int *off) {
  const char *v = pl->disable_env ? rcc_getenv(pl->disable_env) : NULL;
  int64_t x = 0;
  *off = 0;
  if (v != NULL && (rcc_parse_decimal(v, &x) != 0 || x < 0 || x > 1))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "net on rank %d: %s=\"%s\" is neither 0 nor 1",
                          comm->rank, pl->disable_env, v);
  *off = (int)x;
  return RINGCC_SUCCESS;
}

/* A plugin's init failed: a setting of the user's that is wrong (the plugin
 * says RINGCC_ERR_INVALID_ARGUMENT and names the variable) fails init on
 * this rank, as every other bad RINGCC_* variable does; anything else only
 * means the plugin cannot run here (INFO says why, in why[]). */
static int bad_setting(ringcc_result_t r, const char *err) {
  return r == RINGCC_ERR_INVALID_ARGUMENT && strstr(err, "RINGCC_") != NULL;
}

/* The plugins this rank can use (bit p: plugins[p]), trying each in order:
 * only the one RINGCC_NET names, when it is set; none that its disable_env
 * leaves out (RINGCC_NET and those variables are read here only). INFO says
 * why one is not used; where none can, the error gives each one's reason. A
 * rank without network edges can use any. */
static ringcc_result_t usable_plugins(struct ringcc_comm *comm, int npeers,
                                      uint32_t *mask) {
  const char *forced = rcc_getenv("RINGCC_NET");
  char err[RCC_ERRLEN], names[128], why[RCC_ERRLEN] = "";
  int found = forced == NULL, len = 0, wlen = 0, off[NUM_PLUGINS];
  for (int p = 0; p < NUM_PLUGINS; p++)
    if (disabled_by(comm, plugins[p], &off[p]) != RINGCC_SUCCESS)
      return RINGCC_ERR_INVALID_ARGUMENT;
  for (int p = 0; p < NUM_PLUGINS; p++) {
    const struct rcc_net_plugin *pl = plugins[p];
    len += snprintf(names + len, sizeof(names) - (size_t)len, "%s%s",
                    p == 0 ? "" : p == NUM_PLUGINS - 1 ? " or " : ", ",
                    pl->name);
    if (forced == NULL || strcasecmp(forced, pl->name) != 0)
      continue;
    found = 1;
    if (off[p])
      return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                            "net on rank %d: RINGCC_NET=%s but %s=1",
                            comm->rank, forced, pl->disable_env);
  }
  if (!found)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "net on rank %d: RINGCC_NET=\"%s\" names no "
                          "network plugin (%s)", comm->rank, forced, names);
  struct rcc_net_locality where;
  locality(comm, &where);
  *mask = 0;
  for (int p = 0; p < NUM_PLUGINS; p++) {
    const struct rcc_net_plugin *pl = plugins[p];
    if (forced != NULL && strcasecmp(forced, pl->name) != 0)
      continue;
    if (npeers == 0) {
      *mask |= 1u << p;
      continue;
    }
    if (off[p]) {
      RCC_INFO(comm->rank, "net: NET/%s left out (%s=1)", pl->name,
               pl->disable_env);
      continue;
    }
    if (pl->locate)
      pl->locate(&where);
    ringcc_result_t r = pl->init(ifname_spec(comm), err, sizeof(err));
    if (r == RINGCC_SUCCESS)
      *mask |= 1u << p;
    else if (forced != NULL)
      return rcc_comm_error(comm, r, "net on rank %d: RINGCC_NET=%s, but: %s",
                            comm->rank, forced, err);
    else if (bad_setting(r, err))
      return rcc_comm_error(comm, r, "net on rank %d: %s", comm->rank, err);
    else {
      RCC_INFO(comm->rank, "net: NET/%s is not used: %s", pl->name, err);
      if (wlen < (int)sizeof(why))
        wlen += snprintf(why + wlen, sizeof(why) - (size_t)wlen, "%s%s",
                         wlen ? "; " : "", err);
    }
  }
  if (*mask == 0 && npeers > 0)
    return rcc_comm_error(comm, RINGCC_ERR_NETWORK,
                          "net on rank %d: no network plugin can run here: %s",
                          comm->rank, why);
  return RINGCC_SUCCESS;
}

/* RINGCC_NET_CONNECT: "lazy" (the default: a link is made when a call
 * first needs it) or "eager" (every link at init), any case. */
static ringcc_result_t connect_mode(struct ringcc_comm *comm, int *lazy) {
  const char *v = rcc_getenv("RINGCC_NET_CONNECT");
  *lazy = v == NULL || strcasecmp(v, "lazy") == 0;
  if (v != NULL && !*lazy && strcasecmp(v, "eager") != 0)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "net on rank %d: RINGCC_NET_CONNECT=\"%s\" is "
                          "neither eager nor lazy", comm->rank, v);
  return RINGCC_SUCCESS;
}

/* The plugin every rank uses: the first that all can (all ranks call this
 * in the same step of init, so they agree through the bootstrap; ranks
 * that set RINGCC_NET differently fail here, with a sentence). The same
 * for RINGCC_NET_CONNECT (*lazy). */
static ringcc_result_t choose_plugin(struct ringcc_comm *comm, int npeers,
                                     int *chosen, int *lazy) {
  struct record {
    int32_t status;
    uint32_t mask;
    int32_t lazy;
  } *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  uint32_t mine = 0, every = ~0u;
  ringcc_result_t r = connect_mode(comm, lazy);
  if (r == RINGCC_SUCCESS)
    r = usable_plugins(comm, npeers, &mine);
  all[comm->rank].mask = mine;
  all[comm->rank].lazy = *lazy;
  r = rcc_agree_records(comm, r, all, sizeof(*all), "the choice of a network "
                        "plugin", comm->init_deadline);
  int other = -1;
  for (int q = 0; q < comm->nranks; q++) {
    every &= all[q].mask;
    if (all[q].lazy != *lazy && other < 0)
      other = q;
  }
  free(all);
  if (r != RINGCC_SUCCESS)
    return r;
  if (other >= 0)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "net on rank %d: RINGCC_NET_CONNECT is %s here but "
                          "%s on rank %d: it must be the same on every rank",
                          comm->rank, *lazy ? "lazy" : "eager",
                          *lazy ? "eager" : "lazy", other);
  *chosen = -1;
  for (int p = NUM_PLUGINS - 1; p >= 0; p--)
    if (every & (1u << p))
      *chosen = p;
  if (*chosen < 0 && npeers > 0)
    return rcc_comm_error(comm, RINGCC_ERR_NETWORK,
                          "net on rank %d: no network plugin works on every "
                          "rank (this rank's mask 0x%x, all ranks' 0x%x; "
                          "RINGCC_NET must agree); RINGCC_DEBUG=INFO on each "
                          "rank says why", comm->rank, mine, every);
  if (npeers > 0 && (mine & ~every) != 0)
    RCC_INFO(comm->rank, "net: using NET/%s, the first plugin every rank can",
             plugins[*chosen]->name);
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

/* ---- links taken over from the communicator this one was shrunk from ----
 * ringcc_comm_shrink, of a healthy communicator or after a failure: where
 * the parent's link to a survivor for a FIFO set is made and sound,
 * and the survivor can take its end too, the child's connections for that
 * set are the parent's (net_proxy.c: the parent's proxy carries them for
 * both, the child a user of it), no new connection. Each rank says which
 * (peer, set) links it can take in its blob (a bit each after the handle,
 * so up to REUSE_MAP_BYTES * 8 of them: nranks x sets); a pair takes a link
 * over where both can, and makes it anew otherwise (at init, or on first
 * use), so both ends always decide alike. Each link taken over is resynced
 * at a message boundary (resync_adopted), then the child's steps start
 * where the FIFOs' counters stand (links.h): parent and child never run
 * calls at the same time. A revoked or aborted parent keeps its links (the
 * child connects anew), as does a communicator with device FIFOs. */
#define REUSE_BIT_OF(nsets, q, set) ((q) * (nsets) + (set))

static int parent_set_reusable(const struct ringcc_comm *comm,
                               const struct net_state *st, int q, int set) {
  const struct ringcc_comm *pc = comm->parent;
  int pq = comm->parent_rank[q], k, ch;
  if (pq < 0 || pq >= pc->nranks || pq == pc->rank ||
      pc->edge_transport[pq] != &rcc_transport_net)
    return 0;
  rcc_fifo_set_kind(comm, set, &k, &ch);
  struct rcc_conn *ends[2] = {rcc_send_conn(pc, k, ch, pq),
                              rcc_recv_conn(pc, k, ch, pq)};
  for (int j = 0; j < 2; j++) {
    struct rcc_proxy_conn *e = rcc_proxy_engine(ends[j]);
    const struct net_state *home =
        e != NULL ? rcc_proxy_state(e->proxy) : NULL;
    if (home == NULL || home->plugin != st->plugin ||
        !rcc_proxy_shareable(e, pc))
      return 0;
  }
  return 1;
}

/* Whether this shrunk communicator may take links over at all: the parent
 * not revoked or aborted (a failure is fine: each link is resynced), the
 * same FIFO layout, room in the blobs' map. */
static int may_reuse(const struct ringcc_comm *comm, int nsets) {
  const struct ringcc_comm *pc = comm->parent;
  if (pc == NULL || comm->parent_rank == NULL ||
      (size_t)comm->nranks * (size_t)nsets > REUSE_MAP_BYTES * 8 ||
      pc->revoked || pc->aborted || comm->nkinds != pc->nkinds ||
      comm->nkinds == RCC_MAX_CONN_KINDS || /* device FIFOs: not shared */
      comm->set.nslots != pc->set.nslots ||
      comm->set.net_chunk_bytes != pc->set.net_chunk_bytes)
    return 0;
  for (int k = 0; k < comm->nkinds; k++)
    if (comm->kind_channels[k] != pc->kind_channels[k])
      return 0;
  return 1;
}

static void reuse_map(const struct ringcc_comm *comm, struct net_state *st,
                      const int *peers, int npeers) {
  int nsets = rcc_fifo_sets(comm, comm->nkinds);
  memset(st->reuse_map, 0, sizeof(st->reuse_map));
  if (!may_reuse(comm, nsets))
    return;
  for (int i = 0; i < npeers; i++)
    for (int set = 0; set < nsets; set++)
      if (parent_set_reusable(comm, st, peers[i], set)) {
        int b = REUSE_BIT_OF(nsets, peers[i], set);
        st->reuse_map[b / 8] |= (uint8_t)(1u << (b % 8));
      }
}

/* Whether the link to peer for FIFO set `set` is taken over (both ends
 * can: this rank's map and the peer's, in its blob). */
static int taken_over(const struct ringcc_comm *comm,
                      const struct net_state *st, const char *all_blobs,
                      int peer, int set) {
  int nsets = rcc_fifo_sets(comm, comm->nkinds);
  if ((size_t)comm->nranks * (size_t)nsets > REUSE_MAP_BYTES * 8)
    return 0;
  const uint8_t *theirs = (const uint8_t *)all_blobs +
                          (size_t)peer * RCC_TRANSPORT_BLOB_BYTES +
                          RCC_NET_HANDLE_BYTES;
  return REUSE_BIT(st->reuse_map, REUSE_BIT_OF(nsets, peer, set)) &&
         REUSE_BIT(theirs, REUSE_BIT_OF(nsets, comm->rank, set));
}

/* st uses links of home's proxy (home: once, in st->borrowed). */
static int borrow(struct net_state *st, struct net_state *home) {
  for (int i = 0; i < st->nborrowed; i++)
    if (st->borrowed[i] == home)
      return 0;
  struct net_state **more =
      realloc(st->borrowed, (size_t)(st->nborrowed + 1) * sizeof(*more));
  if (more == NULL)
    return -1;
  st->borrowed = more;
  st->borrowed[st->nborrowed++] = home;
  return 0;
}

/* The connections to child rank q for FIFO set `set`: the parent's, from
 * their counters. */
static ringcc_result_t adopt_link(struct ringcc_comm *comm,
                                  struct net_state *st, int q, int set) {
  const struct ringcc_comm *pc = comm->parent;
  int pq = comm->parent_rank[q], k, ch;
  rcc_fifo_set_kind(comm, set, &k, &ch);
  struct rcc_conn *ends[2] = {rcc_send_conn(comm, k, ch, q),
                              rcc_recv_conn(comm, k, ch, q)};
  struct rcc_conn *pends[2] = {rcc_send_conn(pc, k, ch, pq),
                               rcc_recv_conn(pc, k, ch, pq)};
  for (int j = 0; j < 2; j++) {
    struct rcc_proxy_conn *e = rcc_proxy_engine(pends[j]);
    ringcc_result_t r = e != NULL ? rcc_proxy_share(e, comm, q)
                                  : RINGCC_ERR_INTERNAL;
    if (r == RINGCC_SUCCESS && borrow(st, rcc_proxy_state(e->proxy)) != 0)
      r = RINGCC_ERR_OUT_OF_MEMORY;
    if (r != RINGCC_SUCCESS)
      return rcc_comm_error(comm, r, "net on rank %d: cannot take over the "
                            "link to rank %d (host %s) of the communicator "
                            "this one was shrunk from: %s", comm->rank, q,
                            comm->peers[q].hostname,
                            r == RINGCC_ERR_NETWORK
                                ? "it failed during the shrink"
                                : ringcc_strerror(r));
    rcc_proxy_bind(ends[j], e);
    ends[j]->peer = q; /* its step: once resynced (resync_adopted) */
  }
  comm->links_reused++;
  comm->net_links_reused++;
  return RINGCC_SUCCESS;
}

/* The links taken over, resynced at a message boundary (net_proxy.h): the
 * parent's streams may have stopped mid-call, or been ended by a FAIL
 * message, when it failed; a healthy parent's are resynced all the same
 * (its peers do it alike: both ends of a link decide alike, the blobs).
 * Then each end starts where its FIFO's counter stands. */
static ringcc_result_t resync_adopted(struct ringcc_comm *comm,
                                      const struct net_state *st) {
  int nsets = rcc_fifo_sets(comm, comm->nkinds), n = 0;
  struct rcc_proxy_conn **e =
      malloc((size_t)comm->nranks * (size_t)nsets * 2 * sizeof(*e));
  struct rcc_conn **ends =
      malloc((size_t)comm->nranks * (size_t)nsets * 2 * sizeof(*ends));
  if (e == NULL || ends == NULL) {
    free(e), free(ends);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  }
  for (int q = 0; q < comm->nranks; q++)
    for (int set = 0; set < nsets && q != comm->rank; set++) {
      int k, ch;
      rcc_fifo_set_kind(comm, set, &k, &ch);
      struct rcc_conn *two[2] = {rcc_send_conn(comm, k, ch, q),
                                 rcc_recv_conn(comm, k, ch, q)};
      for (int j = 0; j < 2; j++) {
        struct rcc_proxy_conn *c = rcc_proxy_engine(two[j]);
        if (c != NULL && c->proxy != NULL &&
            rcc_proxy_state(c->proxy) != st)
          ends[n] = two[j], e[n++] = c;
      }
    }
  char err[RCC_ERRLEN];
  int64_t t0 = rcc_now_ns();
  ringcc_result_t r = rcc_proxy_resync(
      e, n, rcc_deadline_after_ms(comm->set.timeout_ms), err, sizeof(err));
  for (int i = 0; i < n && r == RINGCC_SUCCESS; i++)
    ends[i]->step = __atomic_load_n(e[i]->is_send ? &e[i]->fifo->tail
                                                  : &e[i]->fifo->head,
                                    __ATOMIC_ACQUIRE);
  free(e), free(ends);
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "net on rank %d: cannot take over the "
                          "links of the communicator this one was shrunk "
                          "from: %s", comm->rank, err);
  RCC_INFO(comm->rank, "net: %d connections taken over, resynced in %.3f s",
           n, (double)(rcc_now_ns() - t0) / 1e9);
  return RINGCC_SUCCESS;
}

static ringcc_result_t net_setup(struct ringcc_comm *comm, const int *peers,
                                 int npeers, void *blob, void **state) {
  char err[RCC_ERRLEN];
  struct net_state *st = calloc(1, sizeof(*st));
  int chosen = -1, lazy = 0;
  *state = st;
  if (st == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  st->comm = comm;
  ringcc_result_t r = choose_plugin(comm, npeers, &chosen, &lazy);
  if (r != RINGCC_SUCCESS || npeers == 0)
    return r;
  st->plugin = plugins[chosen];
  /* Links on first use need a link that serves both ways (the lower rank
   * connects) and set up in connect() and accept() alone: the verbs plugin
   * (ready(): a handshake with the peer's core) stays eager. */
  st->lazy = lazy && st->plugin->reverse != NULL && st->plugin->ready == NULL;
  if (lazy && !st->lazy)
    RCC_INFO(comm->rank, "net: RINGCC_NET_CONNECT=lazy: NET/%s connects "
             "every link at init", st->plugin->name);
  reuse_map(comm, st, peers, npeers);
  memcpy((uint8_t *)blob + RCC_NET_HANDLE_BYTES, st->reuse_map,
         REUSE_MAP_BYTES);
  net_key(comm, st->key);
  r = st->plugin->listen(st->key, blob, &st->listen_comm, err, sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "net on rank %d: %s", comm->rank, err);
  snprintf(st->describe, sizeof(st->describe), "NET/%s/%s", st->plugin->name,
           st->plugin->device());
  return RINGCC_SUCCESS;
}

/* Device kinds over a plugin that registers GPU memory: slots in GPU memory
 * (the FIFO header, which the proxy reads, stays in host memory). */
static void gdr_decide(struct ringcc_comm *comm, struct net_state *st) {
  struct rcc_net_locality where;
  char why[300] = "the plugin cannot register GPU memory";
  if (comm->nkinds != RCC_MAX_CONN_KINDS)
    return; /* host buffers only */
  locality(comm, &where);
#if RINGCC_HAVE_CUDA
  st->gdr = st->plugin->gdr != NULL && where.gpu_pci[0] != '\0' &&
            st->plugin->gdr(where.gpu_pci, why, sizeof(why));
#else
  snprintf(why, sizeof(why), "built without CUDA");
#endif
  RCC_INFO(comm->rank, "net: device FIFOs %s: %s",
           st->gdr ? "in GPU memory" : "staged through host memory", why);
}

/* The slots of a GPUDirect RDMA FIFO, in this rank's GPU. */
static ringcc_result_t alloc_gpu_slots(struct ringcc_comm *comm, size_t bytes,
                                       char **out) {
#if RINGCC_HAVE_CUDA
  int dev = comm->peers[comm->rank].gpu.device;
  void *p = NULL;
  struct rcc_gpu_scope scope;
  char why[256];
  /* The GPU's primary context pushed and popped (gpu.c), never
   * cudaSetDevice: no context appears on a GPU this process does not use. */
  if (rcc_gpu_enter(dev, &scope, why, sizeof(why)) != 0)
    return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                          "net on rank %d: cannot make GPU %d current for "
                          "its FIFO slots: %s", comm->rank, dev, why);
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess)
    cudaGetLastError();
  rcc_gpu_leave(&scope);
  if (e != cudaSuccess)
    return rcc_comm_error(comm, RINGCC_ERR_CUDA,
                          "net on rank %d: cudaMalloc of %zu bytes of FIFO "
                          "slots on GPU %d failed: %s", comm->rank, bytes, dev,
                          cudaGetErrorString(e));
  *out = p;
  return RINGCC_SUCCESS;
#else
  (void)bytes, (void)out;
  return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                        "net on rank %d: GPU FIFO slots without CUDA",
                        comm->rank);
#endif
}

#if RINGCC_HAVE_CUDA
static void cuda_free_now(void *slots) { cudaFree(slots); }

/* Frees slots of alloc_gpu_slots, with their GPU's context current, once no
 * kernel of the library is pending on it: cudaFree waits for every kernel
 * of the device, other ranks' spinning ones included (gpu.h). */
static void free_gpu_slots(const struct ringcc_comm *comm, char *slots) {
  rcc_gpu_free_when_quiet(comm->peers[comm->rank].gpu.device, cuda_free_now,
                          slots);
  rcc_gpu_sweep();
}
#endif

/* Whether FIFO set `set` is of a device kind. */
static int set_is_device(const struct ringcc_comm *comm, int set) {
  int kind, ch;
  rcc_fifo_set_kind(comm, set, &kind, &ch);
  return kind >= RCC_CONN_DEVICE;
}

static ringcc_result_t alloc_fifo(struct ringcc_comm *comm,
                                  const struct net_state *st,
                                  struct rcc_proxy_conn *c, int peer,
                                  int is_send, int device_kind, char **gpu) {
  size_t data = (size_t)comm->set.nslots * net_slot_bytes(comm);
  void *mem = NULL;
  int on_gpu = device_kind && st->gdr;
  /* Whole pages: device kinds are registered with CUDA (cuda.c), and two
   * FIFOs must never share a page. */
  size_t bytes = (RCC_FIFO_DATA_OFFSET + (on_gpu ? 0 : data) + 4095) &
                 ~(size_t)4095;
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
  c->device = device_kind;
  if (!on_gpu)
    return RINGCC_SUCCESS;
  ringcc_result_t r = alloc_gpu_slots(comm, data, gpu);
  if (r == RINGCC_SUCCESS)
    c->data = *gpu; /* cuda.c sees slots away from the header: GDR */
  return r;
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
         h.kind >= 0 && h.kind < RCC_NET_MAX_SETS;
}

/* The receive connection slot for (peer, set), or NULL if not ours (or
 * taken, or, both ways, a peer that should not connect to us). */
static struct rcc_proxy_conn *recv_slot(struct net_state *st, int my_rank,
                                        int peer, int kind) {
  if (st->duplex && peer > my_rank)
    return NULL;
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    if (!c->is_send && c->peer == peer && (i / 2) % st->nsets == kind)
      return c->net_comm || c->adopted ? NULL : c;
  }
  return NULL;
}

/* How long one connect() or accept() may wait before init looks at the
 * ring for news (rcc_agree_news): a rank that failed or left. A plugin
 * whose connections finish in connect() and accept() (no ready()) is given
 * this much per try and tried again; verbs' connections keep the deadline
 * they are given for the handshake that follows, so they get the whole of
 * it (and the ring is looked at only between them). */
#define CONNECT_SLICE_NS (500 * 1000000LL)
#define ACCEPT_SLICE_NS (100 * 1000000LL)

static int64_t slice_end(int64_t slice, int64_t deadline) {
  int64_t end = rcc_now_ns() + slice;
  return end < deadline ? end : deadline;
}

/* Why a connect to peer failed, in out: with the descriptors it needs
 * where this rank ran out of them. */
static void connect_why(const struct net_state *st, int peer,
                        ringcc_result_t r, const char *err, char *out,
                        size_t len) {
  const struct ringcc_comm *comm = st->comm;
  if (r == RINGCC_ERR_SYSTEM) /* out of descriptors, say: what it needs */
    snprintf(out, len, "net on rank %d: cannot connect to rank %d (host %s): "
             "%s; it needs %d connections (%d peers x %d FIFO sets) of "
             "RINGCC_NSOCKS_PERPEER sockets (default 2)%s: raise ulimit -n "
             "or lower that", comm->rank, peer, comm->peers[peer].hostname,
             err, st->nconns / (st->duplex ? 2 : 1),
             st->nconns / (2 * st->nsets), st->nsets,
             st->lazy ? " once every link is made" : "");
  else
    snprintf(out, len, "net on rank %d: cannot connect to rank %d (host %s): "
             "%s", comm->rank, peer, comm->peers[peer].hostname, err);
}

/* Connects the link to peers[i] for FIFO set k by until (both ways where
 * the plugin can), or, ask, asks peers[i] to connect it: a connection whose
 * hello says so, closed at once. */
static ringcc_result_t link_connect(struct net_state *st, const int *peers,
                                    int i, int k, const void *handle, int ask,
                                    int64_t until, int *last_errno, char *err,
                                    size_t errlen) {
  struct rcc_proxy_conn *c = &st->conns[2 * (i * st->nsets + k)];
  struct net_hello hello = {.magic = HELLO_MAGIC, .rank = st->comm->rank,
                            .kind = k, .nranks = st->comm->nranks,
                            .flags = ask ? HELLO_ASK : 0};
  uint8_t wire[RCC_NET_HELLO_BYTES] = {0};
  void *sc = NULL;
  memcpy(wire, &hello, sizeof(hello));
  (void)peers;
  ringcc_result_t r = st->plugin->connect(st->key, handle, wire, &sc, until,
                                          last_errno, err, errlen);
  if (r != RINGCC_SUCCESS || ask) {
    if (sc != NULL)
      st->plugin->close_send(sc);
    return r;
  }
  c->net_comm = sc;
  if (st->duplex &&
      (r = st->plugin->reverse(sc, &c[1].net_comm, err, errlen)) !=
          RINGCC_SUCCESS) {
    st->plugin->close_send(sc);
    c->net_comm = NULL;
  }
  return r;
}

/* One connection to peers[i] for FIFO set k: RINGCC_SUCCESS, a failure
 * (recorded), or RINGCC_ERR_TIMEOUT at the end of a slice (try again). */
static ringcc_result_t connect_one(struct ringcc_comm *comm,
                                   struct net_state *st, const int *peers,
                                   int i, int k, const char *all_blobs) {
  char err[RCC_ERRLEN], why[RCC_ERRLEN + 200];
  const char *blob = all_blobs + (size_t)peers[i] * RCC_TRANSPORT_BLOB_BYTES;
  int sliced = st->plugin->ready == NULL;
  int64_t until = sliced ? slice_end(CONNECT_SLICE_NS, comm->init_deadline)
                         : comm->init_deadline;
  ringcc_result_t r = link_connect(st, peers, i, k, blob, 0, until, NULL,
                                   err, sizeof(err));
  if (r == RINGCC_ERR_TIMEOUT && until < comm->init_deadline)
    return r;
  if (r == RINGCC_SUCCESS)
    return r;
  connect_why(st, peers[i], r, err, why, sizeof(why));
  return rcc_comm_error(comm, r, "%s", why);
}

/* A connection that proved the key (rc, its hello in wire) made link *l
 * (both ways where the plugin can), asked for one (*asked: lazy links, *l
 * the link this rank is to connect, or -1 where it is made already), or was
 * refused (*l -1: WARN, closed). Another result: the link failed (err). */
static ringcc_result_t link_accept(struct net_state *st, void *rc,
                                   const uint8_t *wire, int *l, int *asked,
                                   char *err, size_t errlen) {
  struct ringcc_comm *comm = st->comm;
  struct net_hello h;
  int peer = -1, kind = -1;
  *l = -1;
  *asked = 0;
  memcpy(&h, wire, sizeof(h));
  int ok = rcc_net_hello_parse(wire, RCC_NET_HELLO_BYTES, comm->rank,
                               comm->nranks, &peer, &kind) &&
           (h.flags & ~HELLO_ASK) == 0;
  if (ok && (h.flags & HELLO_ASK) && st->lazy && peer > comm->rank) {
    st->plugin->close_recv(rc); /* it only asks */
    for (int i = 0; i < st->nconns && *l < 0; i += 2)
      if (st->conns[i].peer == peer && (i / 2) % st->nsets == kind)
        *l = st->conns[i].net_comm == NULL && !st->conns[i].adopted ? i / 2
                                                                    : -2;
    *asked = *l >= 0;
    if (*l == -2)
      *l = -1; /* made already: the ask crossed our connect */
    else if (*l < 0)
      RCC_WARN(comm->rank, "net: refused an ask that proved the key but "
               "names no link of this rank (rank %d, kind %d)", peer, kind);
    return RINGCC_SUCCESS;
  }
  struct rcc_proxy_conn *c = ok && !(h.flags & HELLO_ASK)
                                 ? recv_slot(st, comm->rank, peer, kind)
                                 : NULL;
  if (c == NULL) {
    RCC_WARN(comm->rank, "net: refused a connection that proved the key "
                         "but is not one this rank expects (rank %d, kind "
                         "%d: taken already, or not a peer of this rank)",
             peer, kind);
    st->plugin->close_recv(rc);
    return RINGCC_SUCCESS;
  }
  /* Both ways: the send connection to the peer is the same link. Its slot
   * precedes the receive slot (conns holds send, receive pairs). */
  ringcc_result_t r;
  if (st->duplex &&
      (r = st->plugin->reverse(rc, &c[-1].net_comm, err, errlen)) !=
          RINGCC_SUCCESS) {
    st->plugin->close_recv(rc);
    return r;
  }
  c->net_comm = rc;
  *l = (int)(c - st->conns) / 2;
  return RINGCC_SUCCESS;
}

/* The next connection from a peer, within a slice: RINGCC_SUCCESS (taken or
 * refused), a failure (recorded), or RINGCC_ERR_TIMEOUT at the end of a
 * slice. *expected counts down for each one taken. */
static ringcc_result_t accept_one(struct ringcc_comm *comm,
                                  struct net_state *st, int *expected) {
  char err[RCC_ERRLEN];
  uint8_t wire[RCC_NET_HELLO_BYTES];
  void *rc = NULL;
  int l, asked;
  int64_t until = st->plugin->ready == NULL
                      ? slice_end(ACCEPT_SLICE_NS, comm->init_deadline)
                      : comm->init_deadline;
  ringcc_result_t r = st->plugin->accept(st->listen_comm, wire, &rc, until,
                                         err, sizeof(err));
  if (r == RINGCC_ERR_TIMEOUT && until < comm->init_deadline)
    return r;
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r,
                          "net on rank %d: waiting for %d more connection%s "
                          "from peers: %s",
                          comm->rank, *expected, *expected == 1 ? "" : "s",
                          err);
  if ((r = link_accept(st, rc, wire, &l, &asked, err, sizeof(err))) !=
      RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "net on rank %d: the link from a peer: %s",
                          comm->rank, err);
  if (l >= 0 && !asked)
    (*expected)--;
  else if (asked) /* a peer already past init: made once init is done */
    st->conns[2 * l].want = 1;
  return RINGCC_SUCCESS;
}

/* Lazy links: the links made at init, to the ring's neighbours in rank
 * order (init then proves that the network works, and every rank has a
 * link to watch both ways); every other link on first use. */
static int linked_at_init(const struct net_state *st, int peer) {
  const struct ringcc_comm *comm = st->comm;
  return !st->lazy || peer == (comm->rank + 1) % comm->nranks ||
         peer == (comm->rank + comm->nranks - 1) % comm->nranks;
}

/* Connects to every peer this rank connects to and accepts every peer's
 * connections, in turns: a try of each connect still to make, then an
 * accept, so a rank whose connect is refused for a while (its peer not
 * listening yet, or gone) still serves its own listener; and between turns
 * it looks at the ring for a rank that failed or left (rcc_agree_news),
 * which ends the wait with that status (for rcc_agree_records). */
static ringcc_result_t connect_and_accept(struct ringcc_comm *comm,
                                          struct net_state *st,
                                          const int *peers, int npeers,
                                          const char *all_blobs,
                                          int expected) {
  ringcc_result_t r;
  for (;;) {
    int to_connect = 0;
    for (int i = 0; i < npeers; i++)
      for (int k = 0; k < st->nsets; k++) {
        struct rcc_proxy_conn *c = &st->conns[2 * (i * st->nsets + k)];
        if ((st->duplex && peers[i] < comm->rank) || c->net_comm != NULL ||
            !linked_at_init(st, peers[i]) || c->adopted)
          continue; /* the lower rank connects; we accept. Or done, or
                       lazy */
        r = connect_one(comm, st, peers, i, k, all_blobs);
        if (r != RINGCC_SUCCESS && r != RINGCC_ERR_TIMEOUT)
          return r;
        /* A slice spent on one peer (refused: gone, or not listening any
         * more because it failed): the ring may have news already. */
        if (r == RINGCC_ERR_TIMEOUT &&
            (r = rcc_agree_news(comm)) != RINGCC_SUCCESS)
          return r;
        to_connect += c->net_comm == NULL;
      }
    if (to_connect == 0 && expected == 0)
      return RINGCC_SUCCESS;
    if (expected > 0 && (r = accept_one(comm, st, &expected)) !=
                            RINGCC_SUCCESS && r != RINGCC_ERR_TIMEOUT)
      return r;
    if (rcc_now_ns() >= comm->init_deadline) /* a slice that ended there */
      return rcc_comm_error(comm, RINGCC_ERR_TIMEOUT, "net on rank %d: "
                            "timed out connecting (%d connection%s to make, "
                            "%d to accept)", comm->rank, to_connect,
                            to_connect == 1 ? "" : "s", expected);
    if ((r = rcc_agree_news(comm)) != RINGCC_SUCCESS)
      return r;
  }
}

/* Where the plugin finishes setups apart (ready): the send connections,
 * whose peers answered in accept(), then the receive ones. */
static ringcc_result_t ready_all(struct ringcc_comm *comm,
                                 struct net_state *st) {
  char err[RCC_ERRLEN];
  if (st->plugin->ready == NULL)
    return RINGCC_SUCCESS;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < st->nconns; i++) {
      struct rcc_proxy_conn *c = &st->conns[i];
      if (c->is_send != (pass == 0) || c->net_comm == NULL)
        continue;
      ringcc_result_t r = st->plugin->ready(c->net_comm, comm->init_deadline,
                                            err, sizeof(err));
      if (r != RINGCC_SUCCESS)
        return rcc_comm_error(comm, r, "net on rank %d: the connection %s "
                              "rank %d (host %s): %s", comm->rank,
                              c->is_send ? "to" : "from", c->peer,
                              comm->peers[c->peer].hostname, err);
    }
  return RINGCC_SUCCESS;
}

/* RINGCC_CHECKSUM: every connection sums its payloads where the plugin can
 * (the Socket plugin: a CRC-32C in each message's header); verbs rely on
 * the link's own CRC, which covers every packet end to end. */
static void checksums(struct ringcc_comm *comm, struct net_state *st) {
  if (!comm->set.checksum)
    return;
  if (st->plugin->checksum == NULL) {
    RCC_INFO(comm->rank, "net: RINGCC_CHECKSUM: NET/%s sums nothing itself; "
             "its link's CRC covers every packet", st->plugin->name);
    return;
  }
  for (int i = 0; i < st->nconns; i++)
    if (st->conns[i].net_comm != NULL)
      st->plugin->checksum(st->conns[i].net_comm, 1);
  RCC_INFO(comm->rank, "net: RINGCC_CHECKSUM: a CRC-32C (%s) of every "
           "message, checked on receive", rcc_crc32c_impl());
}

/* A link made after init: what init does for each connection (checksums,
 * registration). */
static ringcc_result_t link_ready(struct net_state *st, int l, char *err,
                                  size_t errlen) {
  for (int j = 0; j < 2; j++) {
    struct rcc_proxy_conn *c = &st->conns[2 * l + j];
    if (st->comm->set.checksum && st->plugin->checksum != NULL)
      st->plugin->checksum(c->net_comm, 1);
    ringcc_result_t r = st->plugin->reg_mr(c->net_comm, c->data,
                                           (size_t)c->nslots * c->slot_bytes,
                                           &c->mhandle, err, errlen);
    if (r != RINGCC_SUCCESS)
      return r;
  }
  return RINGCC_SUCCESS;
}

/* The proxy's callbacks (struct rcc_proxy_links): link l is to
 * st->peers[l / nsets] for FIFO set l % nsets. */
static ringcc_result_t lazy_connect(void *arg, int l, int *asked,
                                    int64_t deadline_ns, int *last_errno,
                                    char *err, size_t errlen) {
  struct net_state *st = arg;
  char why[RCC_ERRLEN];
  int i = l / st->nsets, peer = st->peers[i];
  *asked = peer < st->comm->rank; /* the lower rank connects */
  ringcc_result_t r = link_connect(
      st, st->peers, i, l % st->nsets,
      st->handles + (size_t)i * RCC_NET_HANDLE_BYTES, *asked, deadline_ns,
      last_errno, why, sizeof(why));
  if (r == RINGCC_SUCCESS && !*asked)
    r = link_ready(st, l, why, sizeof(why));
  if (r != RINGCC_SUCCESS)
    connect_why(st, peer, r, why, err, errlen);
  return r;
}

static ringcc_result_t lazy_accept(void *arg, int *l, int *asked,
                                   int64_t deadline_ns, char *err,
                                   size_t errlen) {
  struct net_state *st = arg;
  uint8_t wire[RCC_NET_HELLO_BYTES];
  void *rc = NULL;
  *l = -1;
  *asked = 0;
  ringcc_result_t r = st->plugin->accept(st->listen_comm, wire, &rc,
                                         deadline_ns, err, errlen);
  if (r == RINGCC_SUCCESS)
    r = link_accept(st, rc, wire, l, asked, err, errlen);
  if (r == RINGCC_SUCCESS && *l >= 0 && !*asked &&
      (r = link_ready(st, *l, err, errlen)) != RINGCC_SUCCESS) {
    RCC_WARN(st->comm->rank, "net: a link from rank %d: %s",
             st->conns[2 * *l].peer, err);
    *l = -1; /* its peer sees it closed (destroy closes it) */
    return RINGCC_SUCCESS;
  }
  return r;
}

/* Lazy links: what the proxy needs to make a link later, kept from init
 * (the peers' handles), and a word on the descriptors an all-to-all will
 * need where the open-file limit is below that. */
static ringcc_result_t lazy_keep(struct ringcc_comm *comm,
                                 struct net_state *st, const int *peers,
                                 int npeers, const char *all_blobs,
                                 uint64_t fds) {
  st->npeers = npeers;
  st->peers = malloc((size_t)npeers * sizeof(*st->peers));
  st->handles = malloc((size_t)npeers * RCC_NET_HANDLE_BYTES);
  if (st->peers == NULL || st->handles == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  for (int i = 0; i < npeers; i++) {
    st->peers[i] = peers[i];
    memcpy(st->handles + (size_t)i * RCC_NET_HANDLE_BYTES,
           all_blobs + (size_t)peers[i] * RCC_TRANSPORT_BLOB_BYTES,
           RCC_NET_HANDLE_BYTES);
  }
  /* The sockets of every link at the plugin's default (2 per link), and
   * room for the rest of the process. */
  uint64_t least = (uint64_t)npeers * (uint64_t)st->nsets * 2 + 64;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)least)
    RCC_WARN(comm->rank, "net: the open-file limit (RLIMIT_NOFILE) is %llu, "
             "below the %llu descriptors or more (up to %llu) that a call "
             "linking this rank to all %d network peers needs "
             "(RINGCC_NET_CONNECT=lazy makes links on first use; a link "
             "that runs out fails its call with RINGCC_ERR_SYSTEM): raise "
             "ulimit -n", (unsigned long long)rl.rlim_cur,
             (unsigned long long)least, (unsigned long long)fds, npeers);
  return RINGCC_SUCCESS;
}

/* The links this communicator makes itself (every one, unless it took
 * some over from the one it was shrunk from). */
static ringcc_result_t connect_new(struct ringcc_comm *comm,
                                   struct net_state *st, const int *peers,
                                   int npeers, const char *all_blobs) {
  char err[RCC_ERRLEN];
  ringcc_result_t r;
  if (npeers == 0) {
    if (st->listen_comm != NULL) /* every link taken over: none to make */
      st->plugin->close_listen(st->listen_comm);
    st->listen_comm = NULL;
    return RINGCC_SUCCESS;
  }
  st->nsets = rcc_fifo_sets(comm, comm->nkinds);
  st->nconns = 2 * st->nsets * npeers;
  /* A connection per peer and FIFO set, of up to RCC_NET_SOCKET_MAX_SOCKS
   * sockets: a soft limit below that (1024 is common) is raised. */
  char why[96];
  snprintf(why, sizeof(why), "%d network peers x %d FIFO sets", npeers,
           st->nsets);
  uint64_t fds = (uint64_t)npeers * (uint64_t)st->nsets *
                     RCC_NET_SOCKET_MAX_SOCKS + 256;
  rcc_socket_raise_fd_limit(fds, why);
  st->duplex = st->plugin->reverse != NULL;
  st->conns = calloc((size_t)st->nconns, sizeof(*st->conns));
  st->gpu_data = calloc((size_t)st->nconns, sizeof(*st->gpu_data));
  if (st->conns == NULL || st->gpu_data == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  gdr_decide(comm, st);
  for (int i = 0; i < st->nconns; i++)
    if ((r = alloc_fifo(comm, st, &st->conns[i], peers[i / (2 * st->nsets)],
                        i % 2 == 0, set_is_device(comm, (i / 2) % st->nsets),
                        &st->gpu_data[i])) != RINGCC_SUCCESS)
      return r;
  int expected = 0; /* links that peers connect to us (at init) */
  for (int i = 0; i < st->nconns; i += 2) {
    struct rcc_proxy_conn *c = &st->conns[i];
    if (st->all_blobs != NULL &&
        taken_over(comm, st, st->all_blobs, c->peer, (i / 2) % st->nsets))
      c->adopted = c->failed = c[1].adopted = c[1].failed = 1;
    else if (!st->duplex ||
             (c->peer < comm->rank && linked_at_init(st, c->peer)))
      expected++;
  }
  if ((r = connect_and_accept(comm, st, peers, npeers, all_blobs,
                              expected)) != RINGCC_SUCCESS ||
      (r = ready_all(comm, st)) != RINGCC_SUCCESS)
    return r;
  if (st->lazy && (r = lazy_keep(comm, st, peers, npeers, all_blobs, fds)) !=
                      RINGCC_SUCCESS)
    return r;
  if (!st->lazy) {
    /* Every peer is connected: nobody may connect any more. */
    st->plugin->close_listen(st->listen_comm);
    st->listen_comm = NULL;
  }
  checksums(comm, st);
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    if (c->net_comm == NULL)
      continue; /* lazy: link_ready when it is made */
    r = st->plugin->reg_mr(c->net_comm, c->data,
                           (size_t)c->nslots * c->slot_bytes, &c->mhandle, err,
                           sizeof(err));
    if (r != RINGCC_SUCCESS)
      return rcc_comm_error(comm, r, "net on rank %d: %s", comm->rank, err);
  }
  int links = st->duplex ? st->nsets : 2 * st->nsets;
  RCC_INFO(comm->rank, "net: %d peer%s, %d link%s per peer%s%s", npeers,
           npeers == 1 ? "" : "s", links, links == 1 ? "" : "s",
           st->duplex ? ", each used both ways (the lower rank connects)"
                      : " (one each way)",
           st->lazy ? "; made on first use (RINGCC_NET_CONNECT=lazy), "
                      "to the ring's neighbours at init" : "");
  struct rcc_proxy_links lazy = {.arg = st, .listen_comm = st->listen_comm,
                                 .connect = lazy_connect,
                                 .accept = lazy_accept};
  if ((r = rcc_proxy_start(comm, st->plugin, st->conns, st->nconns,
                           st->lazy ? &lazy : NULL, st, &st->proxy)) !=
      RINGCC_SUCCESS)
    return r;
  for (int i = 0; i < st->nconns; i++) {
    struct rcc_proxy_conn *c = &st->conns[i];
    int kind, ch;
    if (c->adopted)
      continue; /* bound to the parent's (adopt_link) */
    rcc_fifo_set_kind(comm, (i / 2) % st->nsets, &kind, &ch);
    rcc_proxy_bind(c->is_send ? rcc_send_conn(comm, kind, ch, c->peer)
                              : rcc_recv_conn(comm, kind, ch, c->peer),
                   c);
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t net_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  struct net_state *st = state;
  int nsets = rcc_fifo_sets(comm, comm->nkinds), nfresh = 0;
  int *fresh = calloc((size_t)npeers + 1, sizeof(int));
  ringcc_result_t r = RINGCC_SUCCESS;
  if (fresh == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "net on rank %d: out of memory", comm->rank);
  st->all_blobs = all_blobs; /* for connect_new's taken_over() */
  for (int i = 0; i < npeers; i++) {
    int all = 1;
    for (int set = 0; set < nsets && all; set++)
      all = taken_over(comm, st, all_blobs, peers[i], set);
    if (!all)
      fresh[nfresh++] = peers[i];
  }
  r = connect_new(comm, st, fresh, nfresh, all_blobs);
  for (int i = 0; i < npeers && r == RINGCC_SUCCESS; i++) {
    int before = comm->net_links_reused;
    for (int set = 0; set < nsets && r == RINGCC_SUCCESS; set++)
      if (taken_over(comm, st, all_blobs, peers[i], set))
        r = adopt_link(comm, st, peers[i], set);
    comm->net_peers_reused += comm->net_links_reused > before;
  }
  if (r == RINGCC_SUCCESS && comm->net_links_reused > 0)
    r = resync_adopted(comm, st);
  st->all_blobs = NULL;
  comm->net_peers_fresh = nfresh;
  if (r == RINGCC_SUCCESS && comm->net_links_reused > 0)
    RCC_INFO(comm->rank, "net: %d links (of %d peers x %d FIFO sets) are "
             "the communicator's this one was shrunk from (no new "
             "connection); %d peers get links of their own",
             comm->net_links_reused, npeers, nsets, nfresh);
  free(fresh);
  return r;
}

static void net_finish(struct ringcc_comm *comm, void *state) {
  (void)comm, (void)state;
}

/* The state comm made (or took over): with users of its links left, the
 * first of them takes it over (net_proxy.c) and destroys it later. */
static void destroy_own(struct ringcc_comm *comm, struct net_state *st) {
  if (rcc_proxy_users(st->proxy, comm->forked) > 0) {
    st->comm = rcc_proxy_hand_over(st->proxy, comm->forked,
                                   rcc_deadline_after_ms(comm->set.timeout_ms));
    if (st->listen_comm != NULL) /* the links it keeps are made */
      st->plugin->close_listen(st->listen_comm);
    st->listen_comm = NULL;
    return;
  }
  if (comm->forked) { /* a child's copy: no goodbye, no thread to stop */
    rcc_proxy_forget(st->proxy);
  } else {
    rcc_proxy_drain(st->proxy, rcc_deadline_after_ms(comm->set.timeout_ms));
    rcc_proxy_stop(st->proxy); /* first: nothing may touch the conns after */
  }
  /* The links this rank connected first (the lower rank of a pair): their
   * ends close first, and the accepting ends wait for that (net_socket.c,
   * no TIME_WAIT), so closing ours before we wait on our peers' keeps
   * those waits from queueing behind each other round the ranks. */
  for (int pass = 0; pass < 2 && st->conns != NULL; pass++)
    for (int i = 0; i < st->nconns; i++) {
      struct rcc_proxy_conn *c = &st->conns[i];
      if ((c->peer > comm->rank) != (pass == 0))
        continue;
      rcc_proxy_conn_close(st->plugin, c);
      free(c->fifo);
#if RINGCC_HAVE_CUDA
      if (st->gpu_data && st->gpu_data[i])
        free_gpu_slots(comm, st->gpu_data[i]);
#endif
    }
  if (st->listen_comm)
    st->plugin->close_listen(st->listen_comm);
  free(st->conns);
  free(st->peers);
  free(st->handles);
  memset(st->key, 0, sizeof(st->key));
  free(st->gpu_data);
  free(st->borrowed);
  free(st);
}

static void net_destroy(struct ringcc_comm *comm, void *state) {
  struct net_state *st = state;
  if (st == NULL)
    return;
  for (int i = 0; i < st->nborrowed; i++) {
    struct net_state *home = st->borrowed[i];
    if (home->comm == comm) /* handed over to this one */
      destroy_own(comm, home);
    else
      rcc_proxy_unshare(home->proxy, comm, comm->forked);
  }
  st->nborrowed = 0;
  destroy_own(comm, st);
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
