/*
 * graph.c - the ring order over the topology.
 *
 * Ranks of one host are kept contiguous on the ring, hosts in the order of
 * their lowest rank, so only one edge per host boundary crosses the network
 * (two per host: in and out). Within a host, ranks keep their order.
 */
#include <stdlib.h>

#include "comm.h"
#include "error.h"
#include "topo.h"

/* The lowest rank on the same host as rank r: the host's sort key. */
static int host_leader(const struct ringcc_comm *comm, int r) {
  for (int q = 0; q < comm->nranks; q++)
    if (comm->peers[q].host_hash == comm->peers[r].host_hash)
      return q;
  return r;
}

ringcc_result_t rcc_graph_build_ring(struct ringcc_comm *comm) {
  int n = comm->nranks, filled = 0;
  int *leader = malloc((size_t)n * sizeof(int));

  comm->ring = malloc((size_t)n * sizeof(int));
  comm->ring_rev = malloc((size_t)n * sizeof(int));
  if (leader == NULL || comm->ring == NULL || comm->ring_rev == NULL) {
    free(leader);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "init on rank %d: out of memory", comm->rank);
  }
  for (int r = 0; r < n; r++)
    leader[r] = host_leader(comm, r);
  /* Hosts by their leader, ranks by number inside each host: O(n^2) once. */
  for (int h = 0; h < n; h++) {
    if (leader[h] != h)
      continue;
    for (int r = h; r < n; r++)
      if (leader[r] == h)
        comm->ring[filled++] = r;
  }
  for (int p = 0; p < n; p++) {
    comm->ring_rev[p] = comm->ring[n - 1 - p]; /* odd channels' direction */
    if (comm->ring[p] == comm->rank)
      comm->ring_pos = p;
  }
  comm->ring_pos_rev = n - 1 - comm->ring_pos;
  free(leader);
  return RINGCC_SUCCESS;
}
