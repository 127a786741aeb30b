/*
 * topo.c - the path device data takes between two ranks, as a pure function
 * of what the ranks told each other at init (topo.h). The CUDA build fills
 * struct rcc_gpu_info (cuda.c); this file needs no CUDA and is the same in
 * every build, so the selection is tested on machines without a GPU.
 */
#include <stdio.h>
#include <string.h>

#include "topo.h"

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
  e->p2p_access = e->device_capable && ia >= 0 && ib >= 0 &&
                  ga->peer_p2p[ia] && gb->peer_p2p[ib];
  e->nvlink = e->p2p_access && ga->peer_nvlink[ia] && gb->peer_nvlink[ib];
}

/* Why an edge has no P2P, from the two ranks' probes (for the log). */
struct edge_why {
  int listed; /* each rank's probe lists the other's GPU */
  int nvml;   /* both ranks probed with NVML */
  int status; /* enum rcc_p2p_status: the first failing one */
  int level;  /* enum rcc_topo_level */
};

static void edge_why(const struct rcc_gpu_info *ga,
                     const struct rcc_gpu_info *gb, struct edge_why *w) {
  int ia = peer_index(ga, gb->bus_id), ib = peer_index(gb, ga->bus_id);
  w->listed = ia >= 0 && ib >= 0;
  w->nvml = ga->probe == RCC_PROBE_NVML && gb->probe == RCC_PROBE_NVML;
  w->status = RCC_P2P_OK;
  w->level = RCC_TOPO_LEVEL_UNKNOWN;
  if (ia >= 0) {
    w->status = ga->peer_status[ia];
    w->level = ga->peer_level[ia];
  }
  if (ib >= 0 && w->status == RCC_P2P_OK)
    w->status = gb->peer_status[ib];
}

const char *rcc_topo_p2p_status_name(int status) {
  static const char *const names[RCC_NUM_P2P_STATUS] = {
      [RCC_P2P_OK] = "P2P works",
      [RCC_P2P_CHIPSET] = "the chipset does not support P2P",
      [RCC_P2P_GPU] = "the GPU does not support P2P",
      [RCC_P2P_TOPOLOGY] = "the PCIe topology does not allow P2P (the GPUs "
                           "are under different CPU sockets or root "
                           "complexes)",
      [RCC_P2P_REGKEY] = "P2P is disabled by the driver's registry key",
      [RCC_P2P_NOT_SUPPORTED] = "P2P is not supported",
      [RCC_P2P_UNKNOWN] = "P2P status unknown",
  };
  return status >= 0 && status < RCC_NUM_P2P_STATUS ? names[status]
                                                    : "P2P status unknown";
}

const char *rcc_topo_level_name(int level) {
  static const char *const names[] = {
      [RCC_TOPO_LEVEL_BOARD] = "one board",
      [RCC_TOPO_LEVEL_SWITCH] = "one PCIe switch",
      [RCC_TOPO_LEVEL_SWITCHES] = "several PCIe switches",
      [RCC_TOPO_LEVEL_HOSTBRIDGE] = "one PCIe host bridge",
      [RCC_TOPO_LEVEL_NUMA] = "host bridges of one NUMA node",
      [RCC_TOPO_LEVEL_SYSTEM] = "the CPUs' interconnect (other NUMA node)",
  };
  return level >= 0 && level <= RCC_TOPO_LEVEL_SYSTEM ? names[level]
                                                      : "an unknown path";
}

const char *rcc_topo_bus_name(uint64_t bus, char *buf, size_t len) {
  snprintf(buf, len, "%04x:%02x:%02x.%x", (unsigned)(bus >> 32),
           (unsigned)(bus >> 16) & 0xff, (unsigned)(bus >> 8) & 0xff,
           (unsigned)bus & 0xff);
  return buf;
}

static void gpu_name(const struct rcc_gpu_info *g, char *buf, size_t len) {
  char bus[32];
  rcc_topo_bus_name(g->bus_id, bus, sizeof(bus));
  if (g->numa >= 0)
    snprintf(buf, len, "GPU %s (NUMA %d)", bus, g->numa);
  else
    snprintf(buf, len, "GPU %s", bus);
}

int rcc_topo_staged_why(const struct rcc_peer_info *a,
                        const struct rcc_peer_info *b, char *buf,
                        size_t len) {
  struct rcc_edge_topo e;
  struct edge_why w;
  char ga[64], gb[64];
  rcc_topo_edge(a, b, &e);
  edge_why(&a->gpu, &b->gpu, &w);
  buf[0] = '\0';
  int path = rcc_topo_device_path(&e);
  if (!e.same_host || !e.device_capable || e.same_gpu ||
      (path != RCC_PATH_SHM_STAGED && path != RCC_PATH_NET))
    return 0;
  gpu_name(&a->gpu, ga, sizeof(ga));
  gpu_name(&b->gpu, gb, sizeof(gb));
  if (e.shm_disable)
    snprintf(buf, len, "%s and %s: RINGCC_SHM_DISABLE=1 on rank %d (device "
             "data goes through the network proxy)", ga, gb,
             a->shm_disable ? a->rank : b->rank);
  else if (e.p2p_disable)
    snprintf(buf, len, "%s and %s: RINGCC_P2P_DISABLE=1 on rank %d", ga, gb,
             a->gpu.p2p_disable ? a->rank : b->rank);
  else if (w.listed && w.status != RCC_P2P_OK)
    snprintf(buf, len, "%s and %s have no P2P: %s says %s%s%s", ga, gb,
             w.nvml ? "NVML" : "CUDA", rcc_topo_p2p_status_name(w.status),
             w.level != RCC_TOPO_LEVEL_UNKNOWN ? "; they are joined through "
                                               : "",
             w.level != RCC_TOPO_LEVEL_UNKNOWN ? rcc_topo_level_name(w.level)
                                               : "");
  else if (w.listed)
    snprintf(buf, len, "%s and %s have no P2P both ways", ga, gb);
  else if (!w.nvml)
    snprintf(buf, len, "%s and %s: peer access could not be probed (NVML "
             "did not load on rank %d, and CUDA sees only the GPUs of its "
             "own process: CUDA_VISIBLE_DEVICES?)", ga, gb,
             a->gpu.probe != RCC_PROBE_NVML ? a->rank : b->rank);
  else
    snprintf(buf, len, "%s and %s: NVML does not list one from the other",
             ga, gb);
  return 1;
}

uint64_t rcc_topo_bus_id(const char *pci) {
  unsigned domain, bus, dev, fn;
  if (pci == NULL || sscanf(pci, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
    return 0;
  return (uint64_t)domain << 32 | (uint64_t)(bus & 0xff) << 16 |
         (uint64_t)(dev & 0xff) << 8 | (uint64_t)(fn & 0xff);
}
