/*
 * ringcc-topo - where the ranks of a job are, and how each edge carries data:
 * the first thing to run when bandwidth is low.
 *
 *   ringcc-run -np 8 ringcc-topo           (or mpirun, srun, torchrun)
 *   ringcc-topo                            (no launcher: this process alone)
 *
 * Every rank makes a communicator exactly as a program would (so the same
 * environment gives the same choices: RINGCC_CUDA_DEVICE, RINGCC_P2P_DISABLE,
 * RINGCC_SHM_DISABLE, CUDA_VISIBLE_DEVICES ...), describes itself - its GPU
 * (index, name, PCI bus id, NUMA node), its NIC, and for each edge of its
 * ring and of its double binary tree the transport of host buffers and of
 * device buffers, and why two GPUs of one host do not go GPU to GPU - and
 * rank 0 prints every rank's record (all-gathered with ringcc_allgather).
 * It links libringcc.a for the internal query (lib/comm/describe.c).
 *
 * Before making the communicator, a rank with a GPU makes it current (as a
 * program that uses device buffers would): RINGCC_CUDA_DEVICE, else
 * RINGCC_LOCAL_RANK (or LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK)
 * modulo the GPUs it sees, else device 0. Without a GPU it says why.
 *
 * Exit status: 0, or 1 when the communicator cannot be made.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringcc.h"
#include "describe.h"

#if RINGCC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PROG_NAME "ringcc-topo"

/* Why this process has no GPU, when CUDA itself says so ("" otherwise). */
static char no_gpu[160];

/* The GPU a rank of a launcher uses, made current with its context. */
static void select_gpu(void) {
#if RINGCC_HAVE_CUDA
  static const char *const locals[] = {"RINGCC_LOCAL_RANK", "LOCAL_RANK",
                                       "SLURM_LOCALID",
                                       "OMPI_COMM_WORLD_LOCAL_RANK", NULL};
  const char *env = getenv("RINGCC_CUDA_DEVICE");
  int count = 0, dev = 0;
  if (env != NULL && strcmp(env, "none") == 0)
    return;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    snprintf(no_gpu, sizeof(no_gpu), "none (cudaGetDeviceCount: %s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    cudaGetLastError();
    return; /* the library says more at init (an old driver: a WARN) */
  }
  if (env != NULL) {
    dev = atoi(env);
  } else {
    for (int i = 0; locals[i]; i++)
      if (getenv(locals[i])) {
        dev = atoi(getenv(locals[i])) % count;
        break;
      }
  }
  if (cudaSetDevice(dev) != cudaSuccess || cudaFree(NULL) != cudaSuccess)
    cudaGetLastError();
#endif
}

static const char *roles(uint32_t r, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s%s%s",
           r & RCC_DESC_RING_NEXT ? "ring" : "",
           (r & RCC_DESC_RING_NEXT) && (r & RCC_DESC_TREE) ? "+" : "",
           r & RCC_DESC_TREE ? "tree" : "",
           !(r & (RCC_DESC_RING_NEXT | RCC_DESC_TREE)) && (r & RCC_DESC_RING_PREV)
               ? "ring (in)" : "",
           "");
  return buf;
}

static void print_numa(int numa) {
  if (numa >= 0)
    printf("%-5d", numa);
  else
    printf("%-5s", "-");
}

static void print_job(const struct rcc_rank_desc *all, int n) {
  int hosts = 0, staged = 0, p2p = 0;
  for (int r = 0; r < n; r++) {
    int first = 1;
    for (int q = 0; q < r; q++)
      first &= strcmp(all[q].host, all[r].host) != 0;
    hosts += first;
  }
  printf("%s: %d rank%s on %d host%s\n", PROG_NAME, n, n == 1 ? "" : "s",
         hosts, hosts == 1 ? "" : "s");
  printf("\nranks:\n  %-4s %-16s %-8s %-5s %-6s %s\n", "rank", "host", "pid",
         "NUMA", "NIC", "GPU");
  for (int r = 0; r < n; r++) {
    const struct rcc_rank_desc *d = &all[r];
    printf("  %-4d %-16.16s %-8d ", d->rank, d->host, d->pid);
    print_numa(d->numa);
    printf(" %-6.16s %s\n", d->nic, d->gpu);
  }
  printf("\nper rank:\n");
  for (int r = 0; r < n; r++) {
    const struct rcc_rank_desc *d = &all[r];
    printf("  rank %d: NIC %s (NUMA %d) for %s", d->rank, d->nic, d->nic_numa,
           d->nic_use);
    if (d->device_channels > 0)
      printf("; device collectives: %d channel(s), ring step %lld B; P2P to "
             "%d GPU(s) of its host, %d over NVLink (probed with %s)",
             d->device_channels, (long long)d->device_step, d->p2p_peers,
             d->nvlink_peers,
             d->probe == 2 ? "NVML" : d->probe == 1 ? "CUDA (no NVML)" : "-");
    else
      printf("; device collectives: none (host-only communicator)");
    printf("\n");
  }
  if (n > 1)
    printf("\nedges (each rank's ring successor and tree neighbours):\n  "
           "%-9s %-10s %-34s %s\n", "edge", "used by", "host buffers",
           "device buffers");
  for (int r = 0; r < n; r++)
    for (int i = 0; i < all[r].nedges; i++) {
      const struct rcc_edge_desc *e = &all[r].edges[i];
      char role[32], edge[24];
      if (e->roles == RCC_DESC_RING_PREV)
        continue; /* shown by the rank it comes from */
      if ((e->roles & RCC_DESC_TREE) && !(e->roles & RCC_DESC_RING_NEXT) &&
          e->peer < r)
        continue; /* tree edges once, from their lower rank */
      snprintf(edge, sizeof(edge), "%d -> %d", r, e->peer);
      printf("  %-9s %-10s %-34s %s\n", edge, roles(e->roles, role,
             sizeof(role)), e->host, e->device);
      if (e->why[0]) {
        printf("            staged: %s\n", e->why);
        staged++;
      } else if (strncmp(e->device, "P2P", 3) == 0) {
        p2p++;
      }
    }
  printf("\n");
  if (staged > 0)
    printf("%s: %d edge%s between GPUs of one host stage%s device data "
           "through host memory (why above): bandwidth there is host "
           "memory's, not NVLink's\n", PROG_NAME, staged,
           staged == 1 ? "" : "s", staged == 1 ? "s" : "");
  else if (p2p > 0)
    printf("%s: every edge between GPUs of one host goes GPU to GPU\n",
           PROG_NAME);
  else
    printf("%s: no edge between GPUs of one host\n", PROG_NAME);
}

int main(int argc, char **argv) {
  ringcc_comm_t comm = NULL;
  ringcc_result_t r;
  if (argc > 1) {
    fprintf(stderr, "usage: ringcc-run -np N %s   (or mpirun/srun/torchrun; "
                    "alone: this process only)\n", PROG_NAME);
    return strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ? 0
                                                                          : 2;
  }
  select_gpu();
  if (getenv("RINGCC_RANK") || getenv("OMPI_COMM_WORLD_RANK") ||
      getenv("PMI_RANK") || getenv("SLURM_PROCID") || getenv("RANK")) {
    r = ringcc_comm_init_env(&comm, NULL);
  } else {
    ringcc_unique_id_t id;
    r = ringcc_get_unique_id(&id);
    if (r == RINGCC_SUCCESS)
      r = ringcc_comm_init(&comm, 1, &id, 0, NULL);
  }
  if (r != RINGCC_SUCCESS) {
    fprintf(stderr, "%s: cannot make the communicator: %s: %s\n", PROG_NAME,
            ringcc_strerror(r), ringcc_comm_last_error(NULL));
    return 1;
  }
  int rank = 0, n = 1;
  ringcc_comm_rank(comm, &rank);
  ringcc_comm_size(comm, &n);
  struct rcc_rank_desc mine, *all = calloc((size_t)n, sizeof(*all));
  if (all == NULL) {
    fprintf(stderr, "%s: out of memory\n", PROG_NAME);
    return 1;
  }
  rcc_describe_rank(comm, &mine);
  if (no_gpu[0] && strncmp(mine.gpu, "none", 4) == 0)
    snprintf(mine.gpu, sizeof(mine.gpu), "%s", no_gpu);
  r = ringcc_allgather(&mine, all, sizeof(mine), RINGCC_UINT8, comm, NULL);
  if (r != RINGCC_SUCCESS) {
    fprintf(stderr, "%s: rank %d: gathering the records: %s: %s\n", PROG_NAME,
            rank, ringcc_strerror(r), ringcc_comm_last_error(comm));
    ringcc_comm_destroy(comm);
    free(all);
    return 1;
  }
  if (rank == 0)
    print_job(all, n);
  fflush(stdout);
  ringcc_comm_destroy(comm);
  free(all);
  return 0;
}
