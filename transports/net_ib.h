/*
 * net_ib.h - private to the verbs plugin (net_ib/) and its tests: the table
 * of libibverbs functions the plugin resolves with dlopen/dlsym (the library
 * builds with the verbs headers only and runs where libibverbs is absent),
 * and the pure parts of the plugin's choices, exposed so that unit tests
 * check them without an RDMA device.
 *
 * The data-path verbs (post_send, post_recv, poll_cq, req_notify_cq) are
 * inline in <infiniband/verbs.h>: they call through the context's ops table,
 * which the provider library fills, so they need no entry here.
 */
#ifndef RCC_NET_IB_H
#define RCC_NET_IB_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "ringcc.h"

/* The functions resolved from libibverbs (RINGCC_IBVERBS_LIB, else
 * libibverbs.so.1). Fields are named without the ibv_ prefix: verbs.h makes
 * some of those names macros. The optional ones may be NULL. */
struct rcc_ibv {
  struct ibv_device **(*get_device_list)(int *num_devices);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device);
  int (*close_device)(struct ibv_context *context);
  int (*query_device)(struct ibv_context *context,
                      struct ibv_device_attr *attr);
  int (*query_port)(struct ibv_context *context, uint8_t port_num,
                    struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index,
                   union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length,
                           int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
  int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
  struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe,
                              void *cq_context,
                              struct ibv_comp_channel *channel,
                              int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                      void **cq_context);
  void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd,
                              struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  int (*get_async_event)(struct ibv_context *context,
                         struct ibv_async_event *event);
  void (*ack_async_event)(struct ibv_async_event *event);
  /* Optional: rdma-core 34+ (DMA-BUF, GPUDirect RDMA without
   * nvidia-peermem) and 32+ (GID types without sysfs). */
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset,
                                  size_t length, uint64_t iova, int fd,
                                  int access);
  int (*query_gid_ex)(struct ibv_context *context, uint32_t port_num,
                      uint32_t gid_index, struct ibv_gid_entry *entry,
                      uint32_t flags, size_t entry_size);
};

/* ---- RINGCC_IB_HCA: which devices and ports (NCCL_IB_HCA's syntax) ------
 *
 * "mlx5_0:1,mlx5_1" lists devices, each optionally with a port; a name is a
 * prefix ("mlx5" takes every mlx5_*) unless the list starts with '=' (exact
 * names: "=mlx5_1" does not take mlx5_11); a list starting with '^' names
 * what to leave out instead ("^=mlx5_3", "^mlx5_2:2"). */
#define RCC_IB_HCA_MAX 32
struct rcc_ib_hca_spec {
  int exclude; /* '^': the list names what not to use */
  int exact;   /* '=': names match whole */
  int n;
  struct {
    char name[64];
    int port; /* 0: any port */
  } e[RCC_IB_HCA_MAX];
};
/* Parses spec (NULL or "": every device). INVALID_ARGUMENT with a sentence
 * in err for a malformed port or too many entries. */
ringcc_result_t rcc_ib_hca_parse(const char *spec, struct rcc_ib_hca_spec *out,
                                 char *err, size_t errlen);
/* 1 if the device's port is to be used under the spec. */
int rcc_ib_hca_match(const struct rcc_ib_hca_spec *s, const char *dev,
                     int port);

/* ---- the GID a RoCE port uses ------------------------------------------- */
enum rcc_ib_gid_type {
  RCC_IB_GID_UNKNOWN = 0,
  RCC_IB_GID_IB,      /* InfiniBand (or RoCE v1 where the kernel says so) */
  RCC_IB_GID_ROCE_V1,
  RCC_IB_GID_ROCE_V2
};
struct rcc_ib_gid {
  int index;
  uint8_t raw[16];
  int type; /* enum rcc_ib_gid_type */
};
/* The GID index to use among table[0..n) of a port. link_layer is
 * IBV_LINK_LAYER_INFINIBAND or _ETHERNET; forced >= 0 is
 * RINGCC_IB_GID_INDEX. InfiniBand: forced, else index 0. Ethernet, unless
 * forced: a RoCE v2 GID holding an IPv4 address (::ffff:a.b.c.d), else a
 * RoCE v2 global IPv6 one, else RoCE v2 link-local, else the same order
 * among RoCE v1 (and GIDs of unknown type); empty GIDs never. Returns the
 * index, or -1 (with why) when none fits; why also says why the one chosen
 * was ("RoCE v2, IPv4-mapped, chosen automatically"). */
int rcc_ib_gid_choose(const struct rcc_ib_gid *table, int n, int link_layer,
                      int forced, char *why, size_t whylen);
/* "::ffff:10.0.0.1" or "fe80::1", for logs. */
const char *rcc_ib_gid_str(const uint8_t raw[16], char *buf, size_t len);

/* ---- GPUDirect RDMA: how far the NIC is from the GPU ---------------------
 *
 * NCCL_NET_GDR_LEVEL's scale, nearest first: LOC (same device), PIX (at most
 * one PCIe switch between them), PXB (several switches, not through the
 * CPU), PHB (through the CPU's host bridge), SYS (across CPU sockets). */
enum rcc_ib_distance {
  RCC_IB_LOC = 0,
  RCC_IB_PIX,
  RCC_IB_PXB,
  RCC_IB_PHB,
  RCC_IB_SYS,
  RCC_IB_NUM_DISTANCES
};
const char *rcc_ib_distance_name(int d);
/* "PXB" or "2" -> RCC_IB_PXB; -1 if neither. */
int rcc_ib_distance_parse(const char *s);
/* The distance between two PCI devices from their sysfs paths
 * ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"), and their NUMA
 * nodes (-1: unknown) for paths under different root complexes. */
int rcc_ib_pci_distance(const char *a, const char *b, int numa_a, int numa_b);

/* ---- words for completion statuses and async events --------------------- */
/* "IBV_WC_RETRY_EXC_ERR" and "transport retry counter exceeded". */
const char *rcc_ib_wc_status_name(int status);
const char *rcc_ib_wc_status_words(int status);
const char *rcc_ib_event_name(int event);

/* ---- for tests ------------------------------------------------------------ */
/* The registration cache's counters (process-wide, since init), and how
 * many receives landed in the user's memory. */
struct rcc_ib_cache_stats {
  uint64_t hits;      /* lookups a cached registration served */
  uint64_t misses;    /* lookups that registered memory */
  uint64_t stale;     /* cached registrations found outdated (memory may
                         have been freed and mapped again) and replaced */
  uint64_t evictions; /* registrations dropped for the size cap or age */
  uint64_t entries;   /* registrations held now */
  uint64_t bytes;     /* bytes they cover */
  uint64_t landed;    /* receives moved into the user's buffer (redirect) */
};
void rcc_net_ib_cache_stats(struct rcc_ib_cache_stats *out);
/* Makes receives into memory registered as mhandle flush as device memory
 * does (GPUDirect RDMA), so that the flush runs on hosts without a GPU. */
void rcc_net_ib_force_flush(void *mhandle);
/* Flush reads the plugin has completed (process-wide). */
uint64_t rcc_net_ib_flushes(void);

#endif /* RCC_NET_IB_H */
