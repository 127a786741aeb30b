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

#include <stddef.h>
#include <stdint.h>

#define RCC_TOPO_MAX_PEER_GPUS 16
#define RCC_GPU_NAME_LEN 48

/* Why two GPUs have no P2P: NVML's nvmlGpuP2PStatus_t values. */
enum rcc_p2p_status {
  RCC_P2P_OK = 0,
  RCC_P2P_CHIPSET = 1,       /* the chipset does not support it */
  RCC_P2P_GPU = 2,           /* the GPU does not support it */
  RCC_P2P_TOPOLOGY = 3,      /* the PCIe topology does not allow it */
  RCC_P2P_REGKEY = 4,        /* disabled by the driver's registry key */
  RCC_P2P_NOT_SUPPORTED = 5,
  RCC_P2P_UNKNOWN = 6,
  RCC_NUM_P2P_STATUS
};

/* How two GPUs hang off the PCIe tree: NVML's nvmlGpuTopologyLevel_t / 10. */
enum rcc_topo_level {
  RCC_TOPO_LEVEL_BOARD = 0,      /* one board (multi-GPU card) */
  RCC_TOPO_LEVEL_SWITCH = 1,     /* one PCIe switch */
  RCC_TOPO_LEVEL_SWITCHES = 2,   /* several PCIe switches */
  RCC_TOPO_LEVEL_HOSTBRIDGE = 3, /* one PCIe host bridge */
  RCC_TOPO_LEVEL_NUMA = 4,       /* host bridges of one NUMA node */
  RCC_TOPO_LEVEL_SYSTEM = 5,     /* the CPUs' interconnect: NUMA nodes apart */
  RCC_TOPO_LEVEL_UNKNOWN = 255
};

/* How a rank learned which GPUs its GPU reaches. */
enum rcc_gpu_probe {
  RCC_PROBE_NONE = 0, /* not at all */
  RCC_PROBE_CUDA = 1, /* cudaDeviceCanAccessPeer among the GPUs this
                         process sees (no NVML) */
  RCC_PROBE_NVML = 2  /* NVML: every GPU of the node, by PCI bus id */
};

/* Why a rank has no GPU (struct rcc_gpu_info.none_why). */
enum rcc_gpu_none {
  RCC_GPU_NONE_NO_CUDA = 0,  /* this build has no CUDA support */
  RCC_GPU_NONE_ASKED,        /* RINGCC_CUDA_DEVICE=none */
  RCC_GPU_NONE_NO_CONTEXT,   /* the init thread had no CUDA context */
  RCC_GPU_NONE_NO_DEVICE,    /* cudaGetDeviceCount: none_error */
  RCC_GPU_NONE_OLD_DRIVER,   /* a GPU, but its driver (CUDA none_error) is
                                too old for the runtime */
  RCC_GPU_NONE_UNUSABLE,     /* it could not start (context, memory) */
  RCC_GPU_NONE_HAS_GPU = 100 /* device >= 0 */
};

/* One rank's GPU, as all-gathered (fixed size, no pointers). */
struct rcc_gpu_info {
  int32_t device;      /* CUDA device index in that process; -1: none */
  int32_t none_why;    /* enum rcc_gpu_none */
  int32_t none_error;  /* ... its CUDA error or driver version */
  int32_t p2p_disable; /* RINGCC_P2P_DISABLE on that rank */
  uint64_t bus_id;     /* PCI domain:bus:device.function, packed */
  uint8_t uuid[16];    /* the GPU's UUID: equal means the same GPU */
  int32_t npeer;       /* entries in the peer_ arrays */
  int32_t probe;       /* enum rcc_gpu_probe */
  int32_t numa;        /* NUMA node of the GPU (sysfs); -1: unknown */
  int32_t sm_count;    /* multiprocessors */
  char name[RCC_GPU_NAME_LEN]; /* "NVIDIA H100 80GB HBM3" */
  /* The other GPUs of the node (NVML: all of them; CUDA: the visible ones
   * this GPU has peer access to, both ways). */
  uint64_t peer_bus[RCC_TOPO_MAX_PEER_GPUS];
  uint8_t peer_p2p[RCC_TOPO_MAX_PEER_GPUS];    /* P2P read+write both ways */
  uint8_t peer_nvlink[RCC_TOPO_MAX_PEER_GPUS]; /* ... over NVLink */
  uint8_t peer_status[RCC_TOPO_MAX_PEER_GPUS]; /* enum rcc_p2p_status */
  uint8_t peer_level[RCC_TOPO_MAX_PEER_GPUS];  /* enum rcc_topo_level */
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
/* Unpacks it: "0000:3b:00.0". */
const char *rcc_topo_bus_name(uint64_t bus, char *buf, size_t len);

/* Why the device data of edge a -> b (one host, two GPUs) is staged through
 * host memory instead of going GPU to GPU, as one clause naming the two GPUs
 * ("GPU 0000:3b:00.0 (NUMA 0) and GPU 0000:86:00.0 (NUMA 1) have no P2P:
 * NVML says the PCIe topology does not allow it; they are joined through
 * the CPUs' interconnect"); 0 and "" when the edge is not such an edge (other
 * hosts, the same GPU, a rank without GPU, or P2P). */
int rcc_topo_staged_why(const struct rcc_peer_info *a,
                        const struct rcc_peer_info *b, char *buf, size_t len);
/* Names of the P2P statuses and PCIe levels, for the log and ringcc-topo. */
const char *rcc_topo_p2p_status_name(int status);
const char *rcc_topo_level_name(int level);

#define RCC_HOSTNAME_LEN 64

/* What every rank tells the others at init (all-gathered; comm->peers). */
struct rcc_peer_info {
  int32_t rank;
  int32_t pid;
  uint64_t host_hash;  /* hostname + boot id, or RINGCC_HOSTID */
  uint64_t pid_space;  /* boot id + pid namespace: pids comparable if equal */
  int64_t chunk_bytes; /* must agree across ranks */
  int64_t net_chunk_bytes; /* must agree across ranks */
  int64_t device_chunk_bytes; /* RINGCC_DEVICE_CHUNK_BYTES or -1: must agree */
  int32_t nslots;      /* must agree across ranks */
  int32_t nchannels;   /* RINGCC_NCHANNELS, or -1: must agree */
  int32_t shm_disable;
  uint64_t cma_probe_addr; /* exec_cma.c: a word peers try to read at init */
  uint64_t trace_id;   /* RINGCC_TRACE: a random id (trace.c), else 0 */
  struct rcc_gpu_info gpu; /* device -1 when the rank has no GPU */
  char hostname[RCC_HOSTNAME_LEN];
};

#endif /* RCC_TOPO_H */
