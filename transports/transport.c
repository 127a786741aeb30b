/*
 * transport.c - the ordered transport table and the setup of every edge.
 *
 * For each peer the first transport of rcc_transports[] whose can_connect
 * says yes carries the edge. Setup runs per transport in lock step on all
 * ranks (setup, all-gather of blobs, connect, barrier, finish); each phase
 * all-gathers a status word too (agree.c), so a rank that fails makes every
 * rank fail with a message naming it, instead of leaving the others waiting.
 */
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "comm.h"
#include "error.h"
#include "topo.h"
#include "transport.h"

const struct rcc_transport *const rcc_transports[] = {
    &rcc_transport_p2p, /* device-capable communicators, GPUs that reach */
    &rcc_transport_shm,
    &rcc_transport_net,
};
#define NUM_TRANSPORTS (sizeof(rcc_transports) / sizeof(rcc_transports[0]))
const int rcc_num_transports = (int)NUM_TRANSPORTS;
_Static_assert(NUM_TRANSPORTS <= RCC_MAX_TRANSPORTS,
               "rcc_transports[] has more entries than RCC_MAX_TRANSPORTS "
               "(comm.h) makes room for in comm->transport_state");

void rcc_transports_sweep(int log_rank) {
  for (int t = 0; t < rcc_num_transports; t++)
    if (rcc_transports[t]->sweep)
      rcc_transports[t]->sweep(log_rank);
}

void *rcc_transports_extra(const struct ringcc_comm *comm, int rank) {
  void *p = NULL;
  for (int t = 0; t < rcc_num_transports && p == NULL; t++)
    if (rcc_transports[t]->extra && comm->transport_state[t])
      p = rcc_transports[t]->extra(comm, comm->transport_state[t], rank);
  return p;
}

struct phase_record {
  int32_t status;
  int32_t pad;
  char blob[RCC_TRANSPORT_BLOB_BYTES];
};

/* All-gathers this rank's status and blob; fails if any rank failed. */
static ringcc_result_t agree(struct ringcc_comm *comm, ringcc_result_t mine,
                             struct phase_record *all, const char *phase,
                             int64_t deadline) {
  return rcc_agree_records(comm, mine, all, sizeof(*all), phase, deadline);
}

static ringcc_result_t assign_edges(struct ringcc_comm *comm) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank)
      continue;
    for (int t = 0; t < rcc_num_transports && !comm->edge_transport[p]; t++)
      if (rcc_transports[t]->can_connect(comm, me, &comm->peers[p]))
        comm->edge_transport[p] = rcc_transports[t];
    if (comm->edge_transport[p] == NULL)
      return rcc_comm_error(
          comm, RINGCC_ERR_UNSUPPORTED,
          "init on rank %d: no transport can connect rank %d (host %s) to "
          "rank %d (host %s)",
          comm->rank, comm->rank, me->hostname, p, comm->peers[p].hostname);
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t connect_one(struct ringcc_comm *comm, int t,
                                   struct phase_record *all, int *peers,
                                   int64_t deadline) {
  const struct rcc_transport *tr = rcc_transports[t];
  int npeers = 0;
  for (int p = 0; p < comm->nranks; p++)
    if (comm->edge_transport[p] == tr)
      peers[npeers++] = p;

  memset(all, 0, (size_t)comm->nranks * sizeof(*all));
  /* A shrunk communicator's transport may take over the parent's links. */
  comm->parent_state = comm->parent ? comm->parent->transport_state[t] : NULL;
  ringcc_result_t r = tr->setup(comm, peers, npeers, all[comm->rank].blob,
                                &comm->transport_state[t]);
  comm->parent_state = NULL;
  if ((r = agree(comm, r, all, tr->name, deadline)) != RINGCC_SUCCESS)
    return r;

  /* connect() reads the blobs at RCC_TRANSPORT_BLOB_BYTES strides. */
  char *blobs = malloc((size_t)comm->nranks * RCC_TRANSPORT_BLOB_BYTES);
  if (blobs == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  for (int p = 0; p < comm->nranks; p++)
    memcpy(blobs + (size_t)p * RCC_TRANSPORT_BLOB_BYTES, all[p].blob,
           RCC_TRANSPORT_BLOB_BYTES);
  r = tr->connect(comm, comm->transport_state[t], peers, npeers, blobs);
  free(blobs);
  if ((r = agree(comm, r, all, tr->name, deadline)) != RINGCC_SUCCESS)
    return r;
  tr->finish(comm, comm->transport_state[t]);
  return RINGCC_SUCCESS;
}

/* The transport of the edge a -> b, as every rank computes it alike. */
static const struct rcc_transport *edge_of(const struct ringcc_comm *comm,
                                           int a, int b) {
  for (int t = 0; t < rcc_num_transports; t++)
    if (rcc_transports[t]->can_connect(comm, &comm->peers[a], &comm->peers[b]))
      return rcc_transports[t];
  return NULL;
}

/* Slot bytes of the edge a -> b from per-transport slots (host or device
 * FIFOs, in rcc_transports[] order); 0 where no transport connects it. */
static size_t edge_slot_bytes(const struct ringcc_comm *comm, int a, int b,
                              const size_t *slots) {
  for (int t = 0; t < rcc_num_transports; t++)
    if (rcc_transports[t]->can_connect(comm, &comm->peers[a], &comm->peers[b]))
      return slots[t];
  return 0;
}

/* 1 if tr carries an edge between some two ranks: the same on every rank,
 * so a transport that carries none is skipped by all. */
static int used_anywhere(const struct ringcc_comm *comm,
                         const struct rcc_transport *tr) {
  for (int a = 0; a < comm->nranks; a++)
    for (int b = a + 1; b < comm->nranks; b++)
      if (edge_of(comm, a, b) == tr)
        return 1;
  return 0;
}

/* Step sizes: a schedule moves at most one slot per step, so the ring's step
 * is its smallest edge's slot and a schedule over all edges takes the
 * smallest of all; device collectives alike over the device FIFOs. O(n^2)
 * once per communicator; each transport's slots are asked once. */
static void smallest_slots(const struct ringcc_comm *comm, const size_t *slots,
                           size_t *ring, size_t *all) {
  int n = comm->nranks;
  *ring = SIZE_MAX, *all = SIZE_MAX;
  for (int p = 0; p < n && n > 1; p++) {
    size_t b = edge_slot_bytes(comm, comm->ring[p], comm->ring[(p + 1) % n],
                               slots);
    *ring = b < *ring ? b : *ring;
  }
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b) {
        size_t s = edge_slot_bytes(comm, a, b, slots);
        *all = s < *all ? s : *all;
      }
  if (n == 1)
    *ring = *all = (size_t)comm->set.chunk_bytes;
}

static void choose_chunks(struct ringcc_comm *comm) {
  size_t host[RCC_MAX_TRANSPORTS], dev[RCC_MAX_TRANSPORTS];
  for (int t = 0; t < rcc_num_transports; t++) {
    const struct rcc_transport *tr = rcc_transports[t];
    host[t] = tr->slot_bytes(comm);
    dev[t] = tr->device_slot_bytes ? tr->device_slot_bytes(comm) : host[t];
  }
  smallest_slots(comm, host, &comm->ring_chunk_bytes, &comm->all_chunk_bytes);
  comm->dev_ring_chunk_bytes = comm->ring_chunk_bytes;
  comm->dev_all_chunk_bytes = comm->all_chunk_bytes;
  if (comm->nkinds == RCC_MAX_CONN_KINDS) /* device FIFOs exist */
    smallest_slots(comm, dev, &comm->dev_ring_chunk_bytes,
                   &comm->dev_all_chunk_bytes);
}

ringcc_result_t rcc_transports_connect(struct ringcc_comm *comm,
                                       int64_t deadline) {
  int n = comm->nranks;
  struct phase_record *all = calloc((size_t)n, sizeof(*all));
  int *peers = calloc((size_t)n, sizeof(int));
  ringcc_result_t r = RINGCC_ERR_OUT_OF_MEMORY;

  if (all == NULL || peers == NULL) {
    rcc_comm_error(comm, r, "init on rank %d: out of memory", comm->rank);
    goto out;
  }
  r = agree(comm, assign_edges(comm), all, "transport selection", deadline);
  choose_chunks(comm);
  for (int t = 0; t < rcc_num_transports && r == RINGCC_SUCCESS; t++)
    if (used_anywhere(comm, rcc_transports[t]))
      r = connect_one(comm, t, all, peers, deadline);
out:
  free(all);
  free(peers);
  return r;
}

/* The state of the transport carrying the edge to peer, or NULL. */
static void *edge_state(const struct ringcc_comm *comm, int peer) {
  for (int t = 0; t < rcc_num_transports; t++)
    if (rcc_transports[t] == comm->edge_transport[peer])
      return comm->transport_state[t];
  return NULL;
}

const char *rcc_edge_name(const struct ringcc_comm *comm, int peer) {
  const struct rcc_transport *tr = comm->edge_transport[peer];
  void *state = tr ? edge_state(comm, peer) : NULL;
  if (state != NULL && tr->describe_peer)
    return tr->describe_peer(state, peer);
  if (state != NULL && tr->describe)
    return tr->describe(state);
  return tr ? tr->name : "none";
}

int rcc_edge_link(const struct ringcc_comm *comm, int peer) {
  const struct rcc_transport *tr = comm->edge_transport[peer];
  return tr ? tr->link(comm, edge_state(comm, peer), peer) : RCC_LINK_SHM;
}

unsigned rcc_edge_flags(const struct ringcc_comm *comm, int peer) {
  const struct rcc_transport *tr = comm->edge_transport[peer];
  return tr ? tr->flags : 0;
}

/* Last set up, first torn down: the network transport's proxy thread may
 * still learn of a dead rank while it drains, and then marks every host
 * FIFO (failure.c), so it stops before shared memory is unmapped. */
void rcc_transports_destroy(struct ringcc_comm *comm) {
  for (int t = rcc_num_transports - 1; t >= 0; t--) {
    if (comm->transport_state[t])
      rcc_transports[t]->destroy(comm, comm->transport_state[t]);
    comm->transport_state[t] = NULL;
  }
}
