/*
 * topo.h - who is where, for device buffers: each rank's GPU and which GPUs
 * it reaches with CUDA peer access (and whether over NVLink), and the one
 * pure function that turns a pair of ranks into the path their device data
 * takes.
 *
 * Every rank fills its struct rcc_gpu_info at init (cuda.c, from the CUDA
 * runtime and, when it can be loaded, NVML); the core all-gathers it inside
 * struct rcc_peer_info. From then on every rank can say, for any pair (a, b),
 * how a's device data reaches b: the transports' can_connect and the step
 * sizes must agree on every rank, so nothing here asks the local GPU.
 */
#ifndef RCC_TOPO_H
#define RCC_TOPO_H

#include <stdint.h>

#define RCC_TOPO_MAX_PEER_GPUS 16

/* One rank's GPU, as all-gathered (fixed size, no pointers). */
struct rcc_gpu_info {
  int32_t device;      /* CUDA device index in that process; -1: none */
  int32_t p2p_disable; /* RINGCC_P2P_DISABLE on that rank */
  uint64_t bus_id;     /* PCI domain:bus:device.function, packed */
  uint8_t uuid[16];    /* the GPU's UUID: equal means the same GPU */
  int32_t npeer;       /* entries in peer_bus / peer_nvlink */
  int32_t pad;
  uint64_t peer_bus[RCC_TOPO_MAX_PEER_GPUS]; /* GPUs this one can access */
  uint8_t peer_nvlink[RCC_TOPO_MAX_PEER_GPUS]; /* ... over NVLink */
};

/* How device data of one edge travels (the order is the preference). */
enum rcc_path {
  RCC_PATH_P2P_SAME_GPU, /* both ranks on one GPU: FIFO in that GPU's memory */
  RCC_PATH_P2P_NVLINK,   /* FIFO in the receiver's GPU, written over NVLink */
  RCC_PATH_P2P_PCIE,     /* FIFO in the receiver's GPU, written over PCIe */
  RCC_PATH_SHM_STAGED,   /* FIFO in pinned shared host memory */
  RCC_PATH_NET,          /* pinned host FIFOs moved by the network proxy */
  RCC_NUM_PATHS
};

/* The facts about one edge that decide its path. */
struct rcc_edge_topo {
  int same_host;      /* the two ranks share a host (shared memory works) */
  int shm_disable;    /* RINGCC_SHM_DISABLE on either rank */
  int p2p_disable;    /* RINGCC_P2P_DISABLE on either rank */
  int device_capable; /* both ranks have a GPU (device FIFOs exist) */
  int same_gpu;       /* both ranks use the same GPU */
  int p2p_access;     /* each GPU can access the other's memory */
  int nvlink;         /* ... and the link between them is NVLink */
};

/* The path of an edge: p2p when the GPUs reach each other (or are one) on
 * one host and P2P is not disabled; else staged through shared memory on one
 * host; else the network. Pure: the same answer on every rank. */
int rcc_topo_device_path(const struct rcc_edge_topo *e);

/* "P2P/NVLink", "P2P/PCIe", "P2P/same GPU", "SHM/staged", "NET/staged". */
const char *rcc_topo_path_name(int path);

/* The edge facts of ranks a -> b from their all-gathered infos. */
struct rcc_peer_info;
void rcc_topo_edge(const struct rcc_peer_info *a, const struct rcc_peer_info *b,
                   struct rcc_edge_topo *e);

/* Packs "0000:3b:00.0" (cudaDeviceGetPCIBusId's form); 0 if malformed. */
uint64_t rcc_topo_bus_id(const char *pci);

#endif /* RCC_TOPO_H */
