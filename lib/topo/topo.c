/*
 * topo.c - the path device data takes between two ranks, as a pure function
 * of what the ranks told each other at init (topo.h). The CUDA build fills
 * struct rcc_gpu_info (cuda.c); this file needs no CUDA and is the same in
 * every build, so the selection is tested on machines without a GPU.
 */
#include <stdio.h>
#include <string.h>

#include "comm.h"

int rcc_topo_device_path(const struct rcc_edge_topo *e) {
  if (!e->same_host || e->shm_disable)
    return RCC_PATH_NET;
  if (e->device_capable && !e->p2p_disable) {
    if (e->same_gpu)
      return RCC_PATH_P2P_SAME_GPU;
    if (e->p2p_access)
      return e->nvlink ? RCC_PATH_P2P_NVLINK : RCC_PATH_P2P_PCIE;
  }
  return RCC_PATH_SHM_STAGED;
}

const char *rcc_topo_path_name(int path) {
  static const char *const names[RCC_NUM_PATHS] = {
      [RCC_PATH_P2P_SAME_GPU] = "P2P/same GPU",
      [RCC_PATH_P2P_NVLINK] = "P2P/NVLink",
      [RCC_PATH_P2P_PCIE] = "P2P/PCIe",
      [RCC_PATH_SHM_STAGED] = "SHM/staged",
      [RCC_PATH_NET] = "NET/staged",
  };
  return path >= 0 && path < RCC_NUM_PATHS ? names[path] : "?";
}

/* Index of bus in g's list of GPUs it can access, or -1. */
static int peer_index(const struct rcc_gpu_info *g, uint64_t bus) {
  int n = g->npeer < RCC_TOPO_MAX_PEER_GPUS ? g->npeer : RCC_TOPO_MAX_PEER_GPUS;
  for (int i = 0; i < n; i++)
    if (g->peer_bus[i] == bus)
      return i;
  return -1;
}

void rcc_topo_edge(const struct rcc_peer_info *a, const struct rcc_peer_info *b,
                   struct rcc_edge_topo *e) {
  const struct rcc_gpu_info *ga = &a->gpu, *gb = &b->gpu;
  int ia = peer_index(ga, gb->bus_id), ib = peer_index(gb, ga->bus_id);

  memset(e, 0, sizeof(*e));
  e->same_host = a->host_hash == b->host_hash;
  e->shm_disable = a->shm_disable || b->shm_disable;
  e->p2p_disable = ga->p2p_disable || gb->p2p_disable;
  e->device_capable = ga->device >= 0 && gb->device >= 0;
  e->same_gpu = e->device_capable &&
                memcmp(ga->uuid, gb->uuid, sizeof(ga->uuid)) == 0;
  /* Both directions: a writes into b's FIFOs and b into a's. */
  e->p2p_access = e->device_capable && ia >= 0 && ib >= 0;
  e->nvlink = e->p2p_access && ga->peer_nvlink[ia] && gb->peer_nvlink[ib];
}

uint64_t rcc_topo_bus_id(const char *pci) {
  unsigned domain, bus, dev, fn;
  if (pci == NULL || sscanf(pci, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
    return 0;
  return (uint64_t)domain << 32 | (uint64_t)(bus & 0xff) << 16 |
         (uint64_t)(dev & 0xff) << 8 | (uint64_t)(fn & 0xff);
}
