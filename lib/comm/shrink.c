/*
 * shrink.c - ringcc_comm_shrink: a communicator of the survivors.
 *
 * The survivors cannot use the bootstrap ring (a dead rank broke it), so
 * they agree through a leader: the lowest rank that a survivor does not
 * know to have failed. The leader listens again at its bootstrap
 * listener's address (every rank has that address from the rendezvous's
 * table; the port was closed at the end of init), and every other survivor
 * connects there and sends the ranks it knows to have failed (its exclude
 * list, or with exclude NULL: the dead rank this communicator recorded and
 * every peer on this host whose process is gone), proven with the
 * communicator's key. A leader that is gone (its process gone, or its
 * connection refused while it is not alive) is added to the survivor's own
 * list, and the next one is tried. The leader takes the union of every list
 * it hears, waits for every rank outside it (a rank found gone meanwhile
 * joins the union), and sends every survivor the same final list and the
 * id of a new rendezvous that it serves for the survivors only. So every
 * survivor forms the same communicator, or fails: a rank that saw a failure
 * others did not see changes the list for all of them, never for itself
 * alone. A survivor that dies during the shrink fails it: the leader finds
 * its process gone (same host) or the deadline passes; the leader's death
 * closes every survivor's connection to it (RINGCC_ERR_PEER_FAILED).
 *
 * The new communicator is made over that rendezvous (rcc_comm_init_from)
 * with the parent's configuration, like a split's, but its transports may
 * take over the parent's intact links between the same two processes:
 * shared memory does (shm.c: the child's connections point at the parent's
 * FIFOs, no new FIFO is made); so does the network, for the links that
 * are made and sound (net.c: the parent's proxy carries them for both, the
 * child a user of it, net_proxy_share.c), each resynced at a message
 * boundary first (after a failure a stream may have stopped mid-call, or
 * been ended by a FAIL message: rcc_proxy_resync). A link to an
 * excluded rank is never taken. The board and tuner are built for the survivors.
 *
 * Parent and child after the shrink (docs/reliability.md):
 * - a parent that knows of a failure (a dead rank, a sticky error) or was
 *   shrunk with exclude NULL ("the ranks known to have failed") is only fit
 *   for destroy or abort: its calls return its failure, and it lets go of
 *   the shared FIFOs, so that a failure it learns of later (its network
 *   proxy still hears its peers) never marks the child's links;
 * - a healthy parent shrunk with an explicit exclude list stays usable,
 *   but parent and child must not run calls at the same time: they share
 *   FIFOs, and the one that starts a call after the other ran takes its
 *   steps from the FIFOs' counters (links.h).
 * Either may be destroyed first: the mappings go with the last.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "comm.h"
#include "error.h"
#include "failure.h"
#include "fifo.h"
#include "init.h"
#include "links.h"
#include "live.h"
#include "log.h"
#include "sha256.h"
#include "socket.h"
#include "topo.h"
#include "transport.h"

#define SHRINK_MAGIC 0x52434353u /* "RCCS" */
#define SHRINK_HDR 16            /* magic, rank, nranks, shrink number */
#define LEADER_TRY_NS (200 * 1000000LL)
#define JOIN_READ_NS (2 * 1000000000LL)

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* HMAC(key, label || bytes): every message proves the communicator's key. */
static void prove(const struct ringcc_comm *comm, const char *label,
                  const uint8_t *bytes, size_t len, uint8_t mac[32]) {
  size_t ll = strlen(label);
  uint8_t *in = malloc(ll + len);
  if (in == NULL) {
    memset(mac, 0, 32);
    return;
  }
  memcpy(in, label, ll);
  memcpy(in + ll, bytes, len);
  rcc_hmac_sha256(comm->key, sizeof(comm->key), in, ll + len, mac);
  free(in);
}

/* The new communicator's secret: HMAC(key, shrink number, the final
 * list), known to every survivor and never sent. */
static void shrink_secret(const struct ringcc_comm *comm, const uint8_t *gone,
                          size_t gbytes, uint8_t secret[16]) {
  uint8_t *in = calloc(1, 8 + gbytes), mac[32];
  if (in == NULL) {
    memset(secret, 0, 16);
    return;
  }
  for (int i = 0; i < 8; i++)
    in[i] = (uint8_t)(comm->shrinks >> (56 - 8 * i));
  memcpy(in + 8, gone, gbytes);
  prove(comm, "ringcc v2: shrink secret", in, 8 + gbytes, mac);
  memcpy(secret, mac, 16);
  memset(mac, 0, sizeof(mac));
  free(in);
}

#define GONE(set, r) (((set)[(r) / 8] >> ((r) % 8)) & 1)
#define SET_GONE(set, r) ((set)[(r) / 8] |= (uint8_t)(1u << ((r) % 8)))

/* What this rank knows to have failed (exclude NULL). */
static void known_failed(struct ringcc_comm *comm, uint8_t *gone) {
  int dead = rcc_dead_rank(comm, NULL);
  if (dead >= 0 && dead != comm->rank)
    SET_GONE(gone, dead);
  for (int q = 0; q < comm->nranks; q++)
    if (q != comm->rank && !rcc_peer_alive(comm, q))
      SET_GONE(gone, q);
  int lost = rcc_bootstrap_lost(comm->boot);
  if (lost >= 0 && lost != comm->rank)
    SET_GONE(gone, lost);
}

struct joiner {
  int fd;
  int rank;
};

/* The leader: hears every survivor, then answers each with the final list
 * and the new rendezvous's id. */
static ringcc_result_t lead(struct ringcc_comm *comm, uint8_t *gone,
                            size_t gbytes, ringcc_unique_id_t *id,
                            int64_t deadline, char *err, size_t errlen) {
  struct sockaddr_storage addr;
  int n = comm->nranks, lfd = -1, njoined = 0;
  ringcc_result_t r;
  size_t jlen = SHRINK_HDR + gbytes + 32;
  struct joiner *j = calloc((size_t)n, sizeof(*j));
  int *joined = calloc((size_t)n, sizeof(int));
  uint8_t *msg = malloc(jlen + sizeof(*id));
  if (j == NULL || joined == NULL || msg == NULL) {
    r = rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
    goto out;
  }
  if (rcc_bootstrap_peer_addr(comm->boot, comm->rank, &addr) != 0) {
    r = rcc_errf(err, errlen, RINGCC_ERR_INTERNAL, "no bootstrap address");
    goto out;
  }
  if ((r = rcc_socket_listen(&addr, &lfd, NULL, err, errlen)) !=
      RINGCC_SUCCESS)
    goto out;
  joined[comm->rank] = 1;
  for (;;) {
    int waiting = -1;
    for (int q = 0; q < n; q++) {
      if (joined[q] || GONE(gone, q))
        continue;
      if (!rcc_peer_alive(comm, q)) {
        SET_GONE(gone, q); /* died before it joined, or during */
        continue;
      }
      waiting = q;
    }
    if (waiting < 0)
      break;
    if (rcc_now_ns() > deadline) {
      r = rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT, "rank %d (host %s) "
                   "did not join the shrink before the deadline (timeout_ms "
                   "%lld): it failed during the shrink, did not call it, or "
                   "gave another exclude list", waiting,
                   comm->peers[waiting].hostname,
                   (long long)comm->set.timeout_ms);
      goto out;
    }
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    (void)poll(&pfd, 1, 20);
    for (int i = 0; i < njoined; i++) { /* a survivor that joined, then died */
      struct pollfd jp = {.fd = j[i].fd, .events = POLLIN};
      uint8_t byte;
      if (poll(&jp, 1, 0) > 0 && recv(j[i].fd, &byte, 1, MSG_DONTWAIT) <= 0) {
        SET_GONE(gone, j[i].rank);
        joined[j[i].rank] = 2; /* joined, then gone: not waited for again */
        close(j[i].fd);
        j[i--] = j[--njoined];
      }
    }
    int fd = -1;
    if (rcc_socket_accept(lfd, &fd, NULL, err, errlen) != RINGCC_SUCCESS ||
        fd < 0)
      continue;
    int64_t until = rcc_now_ns() + JOIN_READ_NS;
    uint8_t mac[32];
    if (rcc_socket_recv_all(fd, msg, jlen, until < deadline ? until : deadline,
                            err, errlen) != RINGCC_SUCCESS ||
        get32(msg) != SHRINK_MAGIC || get32(msg + 8) != (uint32_t)n ||
        (prove(comm, "ringcc v2: shrink join", msg, SHRINK_HDR + gbytes, mac),
         !rcc_equal_ct(mac, msg + SHRINK_HDR + gbytes, 32))) {
      close(fd); /* a stranger, or a rank of another communicator */
      continue;
    }
    int q = (int)get32(msg + 4);
    if (q < 0 || q >= n || joined[q] || get32(msg + 12) != comm->shrinks) {
      close(fd);
      continue;
    }
    joined[q] = 1;
    j[njoined].fd = fd;
    j[njoined++].rank = q;
    for (size_t b = 0; b < gbytes; b++)
      gone[b] |= msg[SHRINK_HDR + b]; /* the union of what survivors know */
  }
  /* Every survivor is in: the final list, and the survivors' rendezvous. */
  int m = 0;
  for (int q = 0; q < n; q++)
    m += !GONE(gone, q);
  uint8_t secret[16];
  shrink_secret(comm, gone, gbytes, secret);
  int named = -1; /* a rank that joined, yet some survivor's list names it */
  for (int q = 0; q < n && named < 0; q++)
    if (joined[q] == 1 && GONE(gone, q))
      named = q;
  r = named >= 0 ? rcc_errf(err, errlen, RINGCC_ERR_INVALID_USAGE, "rank %d "
                            "called shrink, but another survivor's exclude "
                            "list names it: the lists differ", named)
                 : rcc_bootstrap_new_id(id, secret, comm->set.timeout_ms, err,
                                        errlen);
  ringcc_unique_id_t sent = *id;
  rcc_bootstrap_id_set_secret(&sent, (const uint8_t[16]){0});
  put32(msg, SHRINK_MAGIC);
  put32(msg + 4, (uint32_t)r);
  put32(msg + 8, (uint32_t)m);
  put32(msg + 12, (uint32_t)comm->shrinks);
  memcpy(msg + SHRINK_HDR, gone, gbytes);
  memcpy(msg + SHRINK_HDR + gbytes + 32, &sent, sizeof(sent));
  prove(comm, "ringcc v2: shrink result", msg, SHRINK_HDR + gbytes,
        msg + SHRINK_HDR + gbytes);
  for (int i = 0; i < njoined; i++) {
    char e2[RCC_ERRLEN];
    (void)rcc_socket_send_all(j[i].fd, msg, jlen + sizeof(sent), deadline, e2,
                              sizeof(e2));
  }
  if (r == RINGCC_SUCCESS)
    rcc_bootstrap_id_set_secret(id, secret);
  memset(secret, 0, sizeof(secret));
out:
  for (int i = 0; i < njoined; i++)
    close(j[i].fd);
  if (lfd >= 0)
    close(lfd);
  free(j);
  free(joined);
  free(msg);
  return r;
}

/* A survivor that is not the leader: joins it and gets the final list and
 * the id. *leader_out: the leader (for messages). */
static ringcc_result_t follow(struct ringcc_comm *comm, uint8_t *gone,
                              size_t gbytes, ringcc_unique_id_t *id,
                              int *leader_out, int64_t deadline, char *err,
                              size_t errlen) {
  int n = comm->nranks, fd = -1;
  size_t jlen = SHRINK_HDR + gbytes + 32;
  uint8_t *msg = malloc(jlen + sizeof(*id)), mac[32];
  ringcc_result_t r = RINGCC_SUCCESS;
  int tries = 0, *retries = &tries;
  if (msg == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
again:
  for (;;) {
    int leader = 0;
    while (leader < n && GONE(gone, leader))
      leader++;
    *leader_out = leader;
    if (leader == comm->rank) {
      free(msg);
      return RINGCC_SUCCESS; /* every lower rank is gone: this one leads */
    }
    struct sockaddr_storage addr;
    if (rcc_bootstrap_peer_addr(comm->boot, leader, &addr) != 0) {
      r = rcc_errf(err, errlen, RINGCC_ERR_INTERNAL, "no bootstrap address");
      goto out;
    }
    int64_t until = rcc_now_ns() + LEADER_TRY_NS;
    r = rcc_socket_connect(&addr, until < deadline ? until : deadline, &fd,
                           err, errlen);
    if (r == RINGCC_SUCCESS)
      break;
    if (!rcc_peer_alive(comm, leader)) {
      SET_GONE(gone, leader); /* gone: the next one leads */
      continue;
    }
    if (rcc_now_ns() > deadline) {
      r = rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT, "rank %d (host %s), "
                   "which leads the shrink, did not answer before the "
                   "deadline (timeout_ms %lld): %s", leader,
                   comm->peers[leader].hostname,
                   (long long)comm->set.timeout_ms, err);
      goto out;
    }
  }
  put32(msg, SHRINK_MAGIC);
  put32(msg + 4, (uint32_t)comm->rank);
  put32(msg + 8, (uint32_t)n);
  put32(msg + 12, (uint32_t)comm->shrinks);
  memcpy(msg + SHRINK_HDR, gone, gbytes);
  prove(comm, "ringcc v2: shrink join", msg, SHRINK_HDR + gbytes,
        msg + SHRINK_HDR + gbytes);
  if ((r = rcc_socket_send_all(fd, msg, jlen, deadline, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_socket_recv_all(fd, msg, jlen + sizeof(*id), deadline, err,
                               errlen)) != RINGCC_SUCCESS) {
    if (r != RINGCC_ERR_TIMEOUT && ++*retries <= n) {
      /* The leader's connection closed before its answer: it failed during
       * the shrink (it answers everyone only once all joined). The next
       * one leads; the others find it gone the same way. */
      RCC_WARN(comm->rank, "ringcc_comm_shrink: rank %d (host %s), which led "
               "the shrink, failed during it (%s); the next rank leads",
               *leader_out, comm->peers[*leader_out].hostname, err);
      SET_GONE(gone, *leader_out);
      close(fd);
      fd = -1;
      goto again;
    }
    if (r != RINGCC_ERR_TIMEOUT)
      r = rcc_errf(err, errlen, RINGCC_ERR_PEER_FAILED, "rank %d (host %s), "
                   "which led the shrink, failed during it: %s", *leader_out,
                   comm->peers[*leader_out].hostname, err);
    goto out;
  }
  prove(comm, "ringcc v2: shrink result", msg, SHRINK_HDR + gbytes, mac);
  if (get32(msg) != SHRINK_MAGIC || get32(msg + 12) != comm->shrinks ||
      !rcc_equal_ct(mac, msg + SHRINK_HDR + gbytes, 32)) {
    r = rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "the answer from rank %d, "
                 "which leads the shrink, is malformed or not proven",
                 *leader_out);
    goto out;
  }
  if ((r = (ringcc_result_t)get32(msg + 4)) != RINGCC_SUCCESS) {
    r = rcc_errf(err, errlen, r, "rank %d, which leads the shrink, could not "
                 "complete it (%s)", *leader_out, ringcc_strerror(r));
    goto out;
  }
  memcpy(gone, msg + SHRINK_HDR, gbytes);
  memcpy(id, msg + SHRINK_HDR + gbytes + 32, sizeof(*id));
  uint8_t secret[16];
  shrink_secret(comm, gone, gbytes, secret);
  rcc_bootstrap_id_set_secret(id, secret);
  memset(secret, 0, sizeof(secret));
out:
  if (fd >= 0)
    close(fd);
  free(msg);
  return r;
}

/* The parent after a failure lets go of its shared-memory FIFOs before the
 * child takes them: nothing of the parent (its executor refuses calls from
 * now on; its network proxy may still hear of a failure and mark every
 * FIFO it has, failure.c) touches them again. */
static void retire_links(struct ringcc_comm *comm) {
  if (rcc_comm_fatal(comm) == RINGCC_SUCCESS)
    rcc_comm_set_fatal(comm, RINGCC_ERR_PEER_FAILED);
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++)
      for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank || comm->edge_transport[p] != &rcc_transport_shm)
          continue;
        struct rcc_conn *c[2] = {rcc_send_conn(comm, k, ch, p),
                                 rcc_recv_conn(comm, k, ch, p)};
        for (int i = 0; i < 2; i++)
          __atomic_store_n(&c[i]->fifo, NULL, __ATOMIC_RELEASE);
      }
}

static ringcc_result_t shrink(struct ringcc_comm *comm, const int *exclude,
                              int nexclude, ringcc_comm_t *out) {
  char err[RCC_ERRLEN] = "";
  int n = comm->nranks, leader = -1;
  size_t gbytes = ((size_t)n + 7) / 8;
  ringcc_result_t r;
  if (out == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_shrink: argument 'out' is NULL");
  *out = NULL;
  if (nexclude < 0 || (exclude == NULL && nexclude != 0) || nexclude >= n)
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                          "ringcc_comm_shrink: argument 'nexclude' is %d "
                          "(exclude %s); it must be in [0, nranks-1 = %d], "
                          "and 0 when exclude is NULL", nexclude,
                          exclude == NULL ? "NULL" : "given", n - 1);
  uint8_t *gone = calloc(1, gbytes);
  if (gone == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_comm_shrink: out of memory");
  for (int i = 0; i < nexclude; i++) {
    int q = exclude[i];
    if (q < 0 || q >= n || q == comm->rank || GONE(gone, q)) {
      free(gone);
      return rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_shrink on rank %d: exclude[%d] is "
                            "%d; each must be a rank in [0, %d], named once, "
                            "and not the calling rank (the excluded ranks "
                            "do not call shrink)", comm->rank, i, q, n - 1);
    }
    SET_GONE(gone, q);
  }
  if (exclude == NULL)
    known_failed(comm, gone);
  comm->shrinks++;
  int64_t deadline = rcc_deadline_after_ms(comm->set.timeout_ms);
  ringcc_unique_id_t id;
  memset(&id, 0, sizeof(id));
  r = follow(comm, gone, gbytes, &id, &leader, deadline, err, sizeof(err));
  if (r == RINGCC_SUCCESS && leader == comm->rank)
    r = lead(comm, gone, gbytes, &id, deadline, err, sizeof(err));
  if (r != RINGCC_SUCCESS) {
    free(gone);
    return rcc_comm_error(comm, r, "ringcc_comm_shrink on rank %d: %s",
                          comm->rank, err);
  }
  int m = 0, me = 0, nexcl = 0;
  int *parent_rank = calloc((size_t)n, sizeof(int));
  char list[160] = "";
  for (int q = 0; q < n; q++) {
    if (!GONE(gone, q)) {
      me += q < comm->rank;
      if (parent_rank != NULL)
        parent_rank[m] = q;
      m++;
    } else if (nexcl++ < 16) {
      size_t l = strlen(list);
      snprintf(list + l, sizeof(list) - l, "%s%d", l ? ", " : "", q);
    }
  }
  free(gone);
  if (parent_rank == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_comm_shrink: out of memory");
  RCC_INFO(comm->rank, "ringcc_comm_shrink: %d of %d ranks remain (excluded: "
           "%s; led by rank %d); this rank becomes rank %d", m, n,
           nexcl ? list : "none", leader, me);
  int retire = exclude == NULL || rcc_dead_rank(comm, NULL) >= 0 ||
               rcc_comm_fatal(comm) != RINGCC_SUCCESS;
  if (retire)
    retire_links(comm);
  ringcc_config_t cfg = comm->config;
  int64_t t0 = rcc_now_ns();
  r = rcc_comm_init_from(out, m, &id, me, &cfg, comm, parent_rank);
  memset(&id, 0, sizeof(id));
  free(parent_rank);
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "ringcc_comm_shrink on rank %d: %s",
                          comm->rank, ringcc_comm_last_error(NULL));
  struct ringcc_comm *child = *out;
  if (!retire && child->links_reused > 0 &&
      rcc_links_share(comm, child) != 0) {
    ringcc_comm_destroy(child);
    *out = NULL;
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "ringcc_comm_shrink: out of memory");
  }
  int shm_peers = 0, net_peers = 0;
  for (int q = 0; q < m; q++)
    if (q != me && (rcc_edge_flags(child, q) & RCC_TRANSPORT_NETWORK))
      net_peers++;
    else if (q != me)
      shm_peers++;
  int shm_reused = child->links_reused > child->net_links_reused ? shm_peers
                                                                 : 0;
  RCC_INFO(comm->rank, "ringcc_comm_shrink: reused %d links of the parent "
           "(shared-memory FIFOs to %d peers; %d network links to %d peers, "
           "resynced; no new FIFO or connection for them); %d of %d network "
           "peers connected anew (one link or more); the new communicator in "
           "%.3f s; the parent is %s", child->links_reused, shm_reused,
           child->net_links_reused, child->net_peers_reused,
           child->net_peers_fresh, net_peers,
           (double)(rcc_now_ns() - t0) / 1e9,
           retire ? "only fit for destroy or abort now"
                  : "usable (not at the same time as the new one)");
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_shrink(ringcc_comm_t comm,
                                              const int *exclude, int nexclude,
                                              ringcc_comm_t *out) {
  ringcc_result_t r = rcc_comm_enter(comm, "ringcc_comm_shrink",
                                     RCC_ENTER_CALL);
  if (r != RINGCC_SUCCESS)
    return r;
  r = shrink(comm, exclude, nexclude, out);
  rcc_comm_leave(comm, RCC_ENTER_CALL);
  return r;
}
