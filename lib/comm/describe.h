/*
 * describe.h - one rank's place in the job, as ringcc-topo prints it: its
 * GPU (bus id, name, NUMA node), its NIC, and for each edge of its ring and
 * of its trees which transport carries host and device data and, where two
 * GPUs of one host do not go GPU to GPU, why (describe.c).
 *
 * The record is fixed-size and pointer-free: the ranks all-gather it with
 * an ordinary ringcc_allgather of bytes, and rank 0 prints them all. Every
 * string comes from the code that decides (the transports' names, the
 * topology's path and its reasons), so it says what the communicator does.
 */
#ifndef RCC_DESCRIBE_H
#define RCC_DESCRIBE_H

#include <stdint.h>

#include "ringcc.h"

#define RCC_DESC_MAX_EDGES 8

/* What an edge is to the rank that describes it (bits). */
#define RCC_DESC_RING_NEXT 1u /* ring 0's next rank (channel 0's ring) */
#define RCC_DESC_RING_PREV 2u
#define RCC_DESC_TREE 4u      /* a parent or child in the double binary tree */

struct rcc_edge_desc {
  int32_t peer;
  uint32_t roles;   /* RCC_DESC_* */
  char host[64];    /* host buffers: "SHM", "NET/Socket/eth0", ... */
  char device[64];  /* device buffers: "P2P/NVLink", "SHM/staged", ... */
  char why[256];    /* why two GPUs of one host are staged; "" otherwise */
};

struct rcc_rank_desc {
  int32_t rank;
  int32_t nranks;
  int32_t pid;
  int32_t numa;            /* the GPU's NUMA node, -1 unknown */
  int32_t nic_numa;        /* the NIC's NUMA node, -1 unknown */
  int32_t device_channels; /* device collective channels (0: host-only) */
  int64_t device_step;     /* device ring step, bytes (0: host-only) */
  int32_t p2p_peers;       /* GPUs of this host this one reaches by P2P */
  int32_t nvlink_peers;    /* ... over NVLink */
  int32_t probe;           /* enum rcc_gpu_probe */
  int32_t nedges;
  char host[64];
  char gpu[160];           /* rcc_cuda_gpu_text */
  char nic[64];            /* "eth0", the interface the network uses */
  char nic_use[64];        /* "network edges", "bootstrap only" */
  struct rcc_edge_desc edges[RCC_DESC_MAX_EDGES];
};

/* Fills d for the calling rank of comm. */
void rcc_describe_rank(ringcc_comm_t comm, struct rcc_rank_desc *d);

#endif /* RCC_DESCRIBE_H */
