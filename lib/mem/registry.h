/*
 * registry.h - a communicator's registered memory (registry.c): the ranges
 * each rank registered with ringcc_comm_register, each peer's on this host
 * mapped here once, and the flags through which the zero-copy executor
 * (exec_zc.c) synchronises.
 *
 * Registrations are collective: the k-th registration of every rank has the
 * same slot, so a call can name a buffer to its peers as (slot, offset).
 * Peers on this host are the ranks with this rank's host and pid namespace
 * (neither with shared memory disabled); only their ranges are mapped.
 *
 * The flags: every rank owns one small segment (a memfd, mapped by its
 * peers on this host at the first registration) of two arrival records,
 * used by calls alternately, and one "done" record. Only the owner writes
 * them; peers read them and sleep on their seq words (futex). exec_zc.c
 * says what each record means and why two arrival records suffice.
 */
#ifndef RCC_REGISTRY_H
#define RCC_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "ringcc.h"

struct ringcc_comm;
struct rcc_mem_block;

/* What a call on registered buffers can run as (agreed: the same on every
 * rank, from the peer infos and the number of registrations). */
enum rcc_zc_kind {
  RCC_ZC_NONE = 0,     /* no registration, or the ranks do not allow it */
  RCC_ZC_ONE_HOST = 1, /* every rank on one host: the zero-copy algorithms */
  RCC_ZC_PER_HOST = 2, /* several hosts, the same number (>= 2) of ranks on
                          each: AllReduce per host, a ring between hosts */
};

#define RCC_ZC_NO_SLOT 0xffffffffu
/* Bytes the executor reduces at a time (registry->tmp): in the L2 cache
 * while it is copied to every output (docs/performance.md: 256 KiB was as
 * fast as 128 KiB or faster, and faster than 32 KiB, at n = 4 and 8). */
#define RCC_ZC_CHUNK (256 << 10)

/* One record, one cache line. */
struct rcc_zc_flag {
  uint32_t seq;      /* the zero-copy call it describes (futex word) */
  uint32_t waiters;  /* peers asleep on seq */
  uint32_t what;     /* coll | dt << 8 | op << 16 | usable << 24 */
  int32_t root;
  uint64_t count;
  uint32_t src_slot; /* registration slot of the input, RCC_ZC_NO_SLOT */
  uint32_t dst_slot; /* ... of the output */
  uint64_t src_off;  /* offset of the buffer in that registration */
  uint64_t dst_off;
  uint8_t pad[16];
};
_Static_assert(sizeof(struct rcc_zc_flag) == 64, "one cache line");

struct rcc_zc_ctl {
  struct rcc_zc_flag arrive[2]; /* call s uses arrive[s & 1] */
  struct rcc_zc_flag done;
};

/* A registration (the public ringcc_reg_t points at one). */
struct ringcc_reg {
  uint32_t slot;
  struct rcc_mem_block *block; /* this rank's memory, a reference held */
  char *base;                  /* the registered range here */
  size_t bytes;
  struct rcc_reg_view *view;   /* [nranks] each peer's range as mapped here */
};

struct rcc_reg_view {
  char *base;    /* the peer's range at this rank (NULL: not mapped here) */
  size_t bytes;
  void *map;     /* what to unmap: a host mapping, or a device import */
  size_t map_bytes;
  void *cuda;    /* device import state */
};

struct rcc_registry {
  struct ringcc_reg **slots; /* [nslots]; NULL where free */
  uint32_t nslots;
  int nlive;                 /* registrations: the same on every rank */
  int kind;                  /* enum rcc_zc_kind while nlive > 0 */
  /* Ranks on this host (local[], ascending), this rank's index there; and
   * the rail: the ranks with this index on every host (ascending). */
  int *local, nlocal, me_local;
  int *rail, nrail, rail_pos;
  int uniform;               /* every host has nlocal ranks */
  /* The flags. */
  int ctl_fd;
  struct rcc_zc_ctl *ctl_own;
  struct rcc_zc_ctl **ctl;   /* [nranks]: peers on this host, mapped here */
  void **ctl_map;            /* [nranks]: what to unmap */
  uint32_t seq;              /* zero-copy calls made */
  uint64_t ran;              /* ... of which ran zero-copy (tests read it) */
  /* For the executor (exec_zc.c): each local rank's buffers as mapped
   * here ([nlocal], by index in local[]), and staging. */
  const char **in;
  char **out;
  char *tmp;                 /* RCC_ZC_CHUNK bytes, cache-line aligned */
  /* Device counters: this rank's (its allocation and descriptor), and
   * every local rank's as mapped on this rank's GPU ([nranks]; NULL until
   * mapped). dev_ready: every local rank's are mapped here. */
  struct rcc_zc_dev_flags *dev_own;
  size_t dev_bytes;
  int dev_fd;
  void *dev_state;
  struct rcc_reg_view *dev_view;
  int dev_ready;
  void *stage;
  size_t stage_bytes;
};

/* The kind of zero-copy a call may take on comm (0 without registrations). */
int rcc_registry_kind(const struct ringcc_comm *comm);
/* The live registration slot of this rank that holds [p, p + bytes) in
 * device memory (device) or host memory (!device), and p's offset in it;
 * RCC_ZC_NO_SLOT where none does. */
uint32_t rcc_registry_find(const struct rcc_registry *reg, const void *p,
                           size_t bytes, int device, uint64_t *off);
/* Rank peer's device counters as mapped on this rank's GPU (NULL: not). */
struct rcc_zc_dev_flags *rcc_registry_dev_flags(const struct rcc_registry *reg,
                                                int peer);
/* Rank peer's buffer at (slot, off), bytes long, as mapped here; NULL when
 * that is not inside the peer's registered range. */
char *rcc_registry_peer(const struct rcc_registry *reg, int peer,
                        uint32_t slot, uint64_t off, size_t bytes);
/* Frees everything (ringcc_comm_destroy). */
void rcc_registry_free(struct ringcc_comm *comm);

#endif /* RCC_REGISTRY_H */
