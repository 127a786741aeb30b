/*
 * describe.c - one rank's GPU, NIC and edges, for ringcc-topo (describe.h).
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "comm.h"
#include "cuda.h"
#include "describe.h"
#include "env.h"
#include "schedule.h"
#include "socket.h"
#include "transport.h"

static int read_int_file(const char *path) {
  FILE *f = fopen(path, "r");
  int v = -1;
  if (f == NULL)
    return -1;
  if (fscanf(f, "%d", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

/* The interface of this rank's network edges ("NET/Socket/eth0" -> eth0),
 * else the one the bootstrap and the network would pick. */
static void describe_nic(struct ringcc_comm *comm, struct rcc_rank_desc *d) {
  char path[160], err[256];
  struct sockaddr_storage addr;
  d->nic[0] = '\0';
  for (int p = 0; p < comm->nranks && !d->nic[0]; p++)
    if (p != comm->rank && (rcc_edge_flags(comm, p) & RCC_TRANSPORT_NETWORK)) {
      const char *name = rcc_edge_name(comm, p), *slash = strrchr(name, '/');
      snprintf(d->nic, sizeof(d->nic), "%s", slash ? slash + 1 : name);
      snprintf(d->nic_use, sizeof(d->nic_use), "network edges (%.40s)", name);
    }
  if (!d->nic[0]) {
    if (rcc_socket_pick_address(rcc_getenv("RINGCC_SOCKET_IFNAME"), &addr,
                                d->nic, sizeof(d->nic), err,
                                sizeof(err)) != RINGCC_SUCCESS)
      snprintf(d->nic, sizeof(d->nic), "?");
    snprintf(d->nic_use, sizeof(d->nic_use), "bootstrap only (no network "
             "edge)");
  }
  snprintf(path, sizeof(path), "/sys/class/net/%.64s/device/numa_node",
           d->nic);
  d->nic_numa = read_int_file(path);
}

/* Adds (or marks) the edge to peer with role. */
static void add_edge(struct rcc_rank_desc *d, int peer, uint32_t role) {
  for (int i = 0; i < d->nedges; i++)
    if (d->edges[i].peer == peer) {
      d->edges[i].roles |= role;
      return;
    }
  if (d->nedges < RCC_DESC_MAX_EDGES) {
    d->edges[d->nedges].peer = peer;
    d->edges[d->nedges].roles = role;
    d->nedges++;
  }
}

/* The peers the double binary tree AllReduce makes this rank talk to, from
 * the tree's own schedule (every step of one channel). */
static void tree_peers(struct ringcc_comm *comm, struct rcc_rank_desc *d) {
  struct rcc_plan call = {
      .alg = RCC_ALG_TREE,
      .sched = RCC_SCHED_TREE,
      .coll = RCC_COLL_ALLREDUCE,
      .nranks = comm->nranks,
      .rank = comm->rank,
      .pos = comm->ring_pos,
      .ring = comm->ring,
      .nchannels = 1,
      .granule = 1,
      .ring_rev = comm->ring_rev,
      .pos_rev = comm->ring_pos_rev,
      .count = (size_t)comm->nranks * 4,
      .chunk_elems = 2,
  }, ch;
  struct rcc_step s;
  rcc_plan_channel(&call, 0, &ch);
  rcc_plan_build(&ch);
  for (uint64_t i = 0; i < ch.nsteps; i++) {
    rcc_plan_step(&ch, i, &s);
    if (s.send_peer >= 0 && s.send_peer != comm->rank)
      add_edge(d, s.send_peer, RCC_DESC_TREE);
    if (s.recv_peer >= 0 && s.recv_peer != comm->rank)
      add_edge(d, s.recv_peer, RCC_DESC_TREE);
  }
}

static void describe_edge(struct ringcc_comm *comm, struct rcc_edge_desc *e) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  const struct rcc_peer_info *q = &comm->peers[e->peer];
  snprintf(e->host, sizeof(e->host), "%s", rcc_edge_name(comm, e->peer));
  e->why[0] = '\0';
  if (comm->nkinds != RCC_MAX_CONN_KINDS) {
    snprintf(e->device, sizeof(e->device), "none (host-only communicator)");
    return;
  }
  struct rcc_edge_topo t;
  rcc_topo_edge(me, q, &t);
  if (rcc_edge_flags(comm, e->peer) & RCC_TRANSPORT_NETWORK)
    snprintf(e->device, sizeof(e->device), "%.50s/staged",
             rcc_edge_name(comm, e->peer));
  else
    snprintf(e->device, sizeof(e->device), "%s",
             rcc_topo_path_name(rcc_topo_device_path(&t)));
  rcc_topo_staged_why(me, q, e->why, sizeof(e->why));
}

void rcc_describe_rank(ringcc_comm_t comm, struct rcc_rank_desc *d) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  const struct rcc_gpu_info *g = &me->gpu;
  int n = comm->nranks;
  memset(d, 0, sizeof(*d));
  d->rank = comm->rank;
  d->nranks = n;
  d->pid = me->pid;
  snprintf(d->host, sizeof(d->host), "%s", me->hostname);
  rcc_cuda_gpu_text(g, d->gpu, sizeof(d->gpu));
  d->numa = g->device >= 0 ? g->numa : -1;
  d->probe = g->probe;
  for (int i = 0; i < g->npeer && i < RCC_TOPO_MAX_PEER_GPUS; i++) {
    d->p2p_peers += g->peer_p2p[i];
    d->nvlink_peers += g->peer_nvlink[i];
  }
  if (comm->nkinds == RCC_MAX_CONN_KINDS) {
    d->device_channels = comm->kind_channels[RCC_CONN_DEVICE + RCC_CONN_COLL];
    d->device_step = (int64_t)comm->dev_ring_chunk_bytes;
  }
  describe_nic(comm, d);
  if (n > 1) {
    add_edge(d, comm->ring[(comm->ring_pos + 1) % n], RCC_DESC_RING_NEXT);
    add_edge(d, comm->ring[(comm->ring_pos + n - 1) % n], RCC_DESC_RING_PREV);
    tree_peers(comm, d);
  }
  for (int i = 0; i < d->nedges; i++)
    describe_edge(comm, &d->edges[i]);
}
