/*
 * registry.c - ringcc_comm_register / ringcc_comm_deregister: a
 * communicator's registered memory, each peer's range on this host mapped
 * here once, and the zero-copy flags (registry.h).
 *
 * Registering is collective, and happens outside the timed path: every rank
 * all-gathers, through the bootstrap, what it registers (its pid, the file
 * descriptor of the memory, the range's offset and size, and, the first
 * time, the file descriptor of its flags), then maps the ranges of the
 * peers on its host by opening /proc/PID/fd/FD (ranks that are threads of
 * one process use each other's addresses), and the ranks agree on the
 * outcome: a rank that cannot register makes every rank fail, naming it,
 * and nothing is registered. A call then names its buffers to its peers as
 * (slot, offset), and each peer finds them in its own mappings.
 *
 * Mapping a peer's memory takes a reference to its pages: a peer that dies,
 * or frees memory it registered, does not take the pages from under this
 * rank; they go when every mapping of them has gone (deregistration,
 * ringcc_comm_destroy).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap.h"
#include "clock.h"
#include "comm.h"
#include "error.h"
#include "live.h"
#include "log.h"
#include "mem.h"
#include "registry.h"
#include "topo.h"

#define WHY_LEN 200

/* What each rank says about one registration (all-gathered). */
struct reg_record {
  int32_t status; /* ringcc_result_t: this rank's part failed */
  int32_t pid;
  int32_t fd;     /* of the memory */
  int32_t device; /* -1: host memory */
  uint64_t offset; /* of the range in the memory */
  uint64_t bytes;  /* of the range */
  uint64_t block_bytes;
  uint64_t addr;   /* of the range in the owner */
  int32_t ctl_fd;  /* the owner's flags */
  int32_t slot;    /* deregistration: the slot */
  uint64_t ctl_addr;
  int32_t dev_fd;     /* the owner's device counters (-1: none yet) */
  uint64_t dev_bytes;
  uint64_t dev_addr;
  char why[WHY_LEN];
};

/* ---- who is on this host ---------------------------------------------------- */

static int same_host(const struct ringcc_comm *comm, int a, int b) {
  const struct rcc_peer_info *p = &comm->peers[a], *q = &comm->peers[b];
  return p->host_hash == q->host_hash && p->pid_space == q->pid_space;
}

/* Index of rank among the ranks of its host (ascending ranks). */
static int local_index(const struct ringcc_comm *comm, int rank) {
  int i = 0;
  for (int q = 0; q < rank; q++)
    i += same_host(comm, q, rank);
  return i;
}

static int host_size(const struct ringcc_comm *comm, int rank) {
  int k = 0;
  for (int q = 0; q < comm->nranks; q++)
    k += same_host(comm, q, rank);
  return k;
}

/* The groups, from the peer infos alone, so every rank finds the same. */
static ringcc_result_t find_groups(struct ringcc_comm *comm,
                                   struct rcc_registry *reg) {
  int n = comm->nranks, me = comm->rank;
  reg->local = calloc((size_t)n, sizeof(int));
  reg->rail = calloc((size_t)n, sizeof(int));
  if (reg->local == NULL || reg->rail == NULL)
    return RINGCC_ERR_OUT_OF_MEMORY;
  reg->me_local = local_index(comm, me);
  for (int q = 0; q < n; q++) {
    if (same_host(comm, q, me))
      reg->local[reg->nlocal++] = q;
    if (local_index(comm, q) == reg->me_local) {
      if (q == me)
        reg->rail_pos = reg->nrail;
      reg->rail[reg->nrail++] = q;
    }
  }
  reg->uniform = 1;
  for (int q = 0; q < n; q++)
    reg->uniform &= host_size(comm, q) == reg->nlocal;
  return RINGCC_SUCCESS;
}

static int compute_kind(const struct ringcc_comm *comm,
                        const struct rcc_registry *reg) {
  int n = comm->nranks;
  for (int q = 0; q < n; q++)
    if (comm->peers[q].shm_disable)
      return RCC_ZC_NONE;
  if (n < 2 || reg->nlive == 0)
    return RCC_ZC_NONE;
  if (reg->nlocal == n)
    return RCC_ZC_ONE_HOST;
  if (reg->uniform && reg->nlocal >= 2 && reg->nrail >= 2)
    return RCC_ZC_PER_HOST;
  return RCC_ZC_NONE;
}

/* ---- mapping a peer's memory -------------------------------------------------- */

/* Maps bytes at offset of the file fd of process pid; *base is the offset's
 * address here. populate: fill the page tables now (registration is outside
 * the timed path; the first call would otherwise fault on every page). */
static ringcc_result_t map_peer_fd(int pid, int fd, uint64_t offset,
                                   size_t bytes, int populate, void **map,
                                   size_t *map_bytes, char **base, char *err,
                                   size_t errlen) {
  char path[64];
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t start = offset / page * page;
  size_t len = (size_t)(offset - start) + bytes;
  len = (len + page - 1) / page * page;
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "cannot open %s: %s",
                    path, strerror(errno));
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | (populate ? MAP_POPULATE : 0), f, (off_t)start);
  int e = errno;
  close(f);
  if (p == MAP_FAILED)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "cannot map %zu bytes of %s: %s", len, path, strerror(e));
  *map = p;
  *map_bytes = len;
  *base = (char *)p + (offset - start);
  return RINGCC_SUCCESS;
}

/* forked: in a child forked after init, which cannot use CUDA (device
 * imports are left as they are; the process's exit drops them). */
static void unmap_view(struct rcc_reg_view *v, int forked) {
  if (v->cuda != NULL) {
    if (!forked)
      rcc_cuda_mem_unimport(v->map, v->map_bytes, v->cuda);
  } else if (v->map != NULL)
    munmap(v->map, v->map_bytes);
  memset(v, 0, sizeof(*v));
}

/* A peer's device memory, imported on this rank's GPU. */
static ringcc_result_t import_device(struct ringcc_comm *comm,
                                     const struct reg_record *q,
                                     struct rcc_reg_view *v, char *err,
                                     size_t errlen) {
  char path[64];
  int dev = comm->peers[comm->rank].gpu.device;
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", q->pid, q->fd);
  int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "cannot open %s: %s",
                    path, strerror(errno));
  void *p = NULL;
  ringcc_result_t r = rcc_cuda_mem_import(dev, f, (size_t)q->block_bytes, &p,
                                          &v->cuda, err, errlen);
  close(f);
  if (r != RINGCC_SUCCESS)
    return r;
  v->map = p;
  v->map_bytes = (size_t)q->block_bytes;
  v->base = (char *)p + q->offset;
  v->bytes = (size_t)q->bytes;
  return RINGCC_SUCCESS;
}

/* Peer p's range as seen here: its own address where p is a thread of this
 * process; otherwise host memory mapped, device memory imported where this
 * rank has a GPU (not mapped where it has none: only device calls could use
 * it). */
static ringcc_result_t map_view(struct ringcc_comm *comm, int p,
                                const struct reg_record *q,
                                struct rcc_reg_view *v, char *err,
                                size_t errlen) {
  memset(v, 0, sizeof(*v));
  if (q->pid == (int32_t)getpid()) {
    v->base = (char *)(uintptr_t)q->addr;
    v->bytes = (size_t)q->bytes;
    return RINGCC_SUCCESS;
  }
  ringcc_result_t r = RINGCC_SUCCESS;
  if (q->device >= 0) {
    if (comm->peers[comm->rank].gpu.device >= 0)
      r = import_device(comm, q, v, err, errlen);
  } else {
    r = map_peer_fd(q->pid, q->fd, q->offset, (size_t)q->bytes, 1, &v->map,
                    &v->map_bytes, &v->base, err, errlen);
    v->bytes = (size_t)q->bytes;
  }
  if (r != RINGCC_SUCCESS)
    snprintf(err + strlen(err), errlen - strlen(err), " (rank %d's memory)",
             p);
  return r;
}

/* ---- the flags ------------------------------------------------------------------ */

/* The flags' segment: whole pages. */
static size_t flags_bytes(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (sizeof(struct rcc_zc_ctl) + page - 1) / page * page;
}

static ringcc_result_t create_flags(struct rcc_registry *reg, char *err,
                                    size_t errlen) {
  size_t bytes = flags_bytes();
  int fd = memfd_create("ringcc-flags", MFD_CLOEXEC);
  if (fd < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "memfd_create for the zero-copy flags failed: %s",
                    strerror(errno));
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)bytes) == 0)
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "cannot make the zero-copy flags: %s", strerror(e));
  }
  reg->ctl_fd = fd;
  reg->ctl_own = p;
  return RINGCC_SUCCESS;
}

/* This rank's device counters, on the GPU of its first registered device
 * memory (zeroed by the allocation). */
static ringcc_result_t create_dev_flags(struct rcc_registry *reg, int device,
                                        char *err, size_t errlen) {
  size_t bytes = sizeof(struct rcc_zc_dev_flags);
  void *p = NULL;
  ringcc_result_t r = rcc_cuda_mem_alloc(device, &bytes, &p, &reg->dev_fd,
                                         &reg->dev_state, err, errlen);
  if (r != RINGCC_SUCCESS) {
    snprintf(err + strlen(err), errlen - strlen(err),
             " (the device zero-copy counters)");
    return r;
  }
  reg->dev_own = p;
  reg->dev_bytes = bytes;
  return RINGCC_SUCCESS;
}

/* Peer p's device counters, mapped on this rank's GPU once (where p has
 * them: p registered device memory too). */
static ringcc_result_t map_dev_flags(struct ringcc_comm *comm,
                                     struct rcc_registry *reg, int p,
                                     const struct reg_record *q, char *err,
                                     size_t errlen) {
  if (reg->dev_view[p].base != NULL || q->dev_fd < 0)
    return RINGCC_SUCCESS;
  struct reg_record counters = {.pid = q->pid, .fd = q->dev_fd, .device = 0,
                                .offset = 0, .bytes = q->dev_bytes,
                                .block_bytes = q->dev_bytes,
                                .addr = q->dev_addr};
  return map_view(comm, p, &counters, &reg->dev_view[p], err, errlen);
}

static ringcc_result_t map_flags(struct ringcc_comm *comm,
                                 struct rcc_registry *reg, int p,
                                 const struct reg_record *q, char *err,
                                 size_t errlen) {
  if (reg->ctl[p] != NULL)
    return RINGCC_SUCCESS;
  if (q->pid == (int32_t)getpid()) {
    reg->ctl[p] = (struct rcc_zc_ctl *)(uintptr_t)q->ctl_addr;
    return RINGCC_SUCCESS;
  }
  void *map;
  size_t map_bytes;
  char *base;
  ringcc_result_t r = map_peer_fd(q->pid, q->ctl_fd, 0,
                                  sizeof(struct rcc_zc_ctl), 0, &map,
                                  &map_bytes, &base, err, errlen);
  if (r != RINGCC_SUCCESS) {
    snprintf(err + strlen(err), errlen - strlen(err), " (rank %d's flags)", p);
    return r;
  }
  (void)comm;
  reg->ctl_map[p] = map;
  reg->ctl[p] = (struct rcc_zc_ctl *)base;
  return RINGCC_SUCCESS;
}

/* ---- the registry ---------------------------------------------------------------- */

static struct rcc_registry *registry_get(struct ringcc_comm *comm, char *err,
                                         size_t errlen) {
  if (comm->registry != NULL)
    return comm->registry;
  size_t n = (size_t)comm->nranks;
  struct rcc_registry *reg = calloc(1, sizeof(*reg));
  if (reg == NULL)
    goto oom;
  reg->ctl_fd = -1;
  reg->dev_fd = -1;
  reg->dev_view = calloc(n, sizeof(*reg->dev_view));
  reg->ctl = calloc(n, sizeof(*reg->ctl));
  reg->ctl_map = calloc(n, sizeof(*reg->ctl_map));
  reg->in = calloc(n, sizeof(*reg->in));
  reg->out = calloc(n, sizeof(*reg->out));
  if (reg->ctl == NULL || reg->ctl_map == NULL || reg->in == NULL ||
      reg->dev_view == NULL ||
      reg->out == NULL ||
      posix_memalign((void **)&reg->tmp, 64, RCC_ZC_CHUNK) != 0 ||
      find_groups(comm, reg) != RINGCC_SUCCESS)
    goto oom;
  comm->registry = reg;
  return reg;
oom:
  if (reg != NULL) {
    free(reg->dev_view);
    free(reg->in);
    free(reg->out);
    free(reg->ctl);
    free(reg->ctl_map);
    free(reg->tmp);
    free(reg->local);
    free(reg->rail);
    free(reg);
  }
  rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
  return NULL;
}

static void free_registration(struct ringcc_comm *comm, struct ringcc_reg *h) {
  for (int p = 0; h->view != NULL && p < comm->nranks; p++)
    unmap_view(&h->view[p], comm->forked);
  free(h->view);
  /* A forked child's destroy leaves CUDA alone: its last reference to
   * device memory would free it through the driver. */
  if (!(comm->forked && h->block != NULL && h->block->device >= 0))
    rcc_mem_release(h->block);
  free(h);
}

void rcc_registry_free(struct ringcc_comm *comm) {
  struct rcc_registry *reg = comm->registry;
  if (reg == NULL)
    return;
  for (uint32_t s = 0; s < reg->nslots; s++)
    if (reg->slots[s] != NULL)
      free_registration(comm, reg->slots[s]);
  for (int p = 0; p < comm->nranks; p++)
    if (reg->ctl_map[p] != NULL)
      munmap(reg->ctl_map[p], flags_bytes());
  if (reg->ctl_own != NULL)
    munmap(reg->ctl_own, flags_bytes());
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank)
      unmap_view(&reg->dev_view[p], comm->forked);
  if (reg->dev_own != NULL && !comm->forked)
    rcc_cuda_mem_free(reg->dev_own, reg->dev_bytes, reg->dev_state);
  if (reg->dev_fd >= 0)
    close(reg->dev_fd);
  free(reg->dev_view);
  if (reg->ctl_fd >= 0)
    close(reg->ctl_fd);
  free(reg->slots);
  free(reg->ctl);
  free(reg->ctl_map);
  free(reg->in);
  free(reg->out);
  free(reg->local);
  free(reg->rail);
  free(reg->tmp);
  free(reg->stage);
  free(reg);
  comm->registry = NULL;
}

int rcc_registry_kind(const struct ringcc_comm *comm) {
  return comm->registry != NULL ? comm->registry->kind : RCC_ZC_NONE;
}

uint32_t rcc_registry_find(const struct rcc_registry *reg, const void *p,
                           size_t bytes, int device, uint64_t *off) {
  const char *c = p;
  for (uint32_t s = 0; s < reg->nslots; s++) {
    const struct ringcc_reg *h = reg->slots[s];
    if (h == NULL || !rcc_mem_live(h->block) ||
        (h->block->device >= 0) != (device != 0) ||
        c < h->base ||
        c > h->base + h->bytes || bytes > (size_t)(h->base + h->bytes - c))
      continue;
    *off = (uint64_t)(c - h->base);
    return s;
  }
  return RCC_ZC_NO_SLOT;
}

struct rcc_zc_dev_flags *rcc_registry_dev_flags(const struct rcc_registry *reg,
                                                int peer) {
  return (struct rcc_zc_dev_flags *)reg->dev_view[peer].base;
}

char *rcc_registry_peer(const struct rcc_registry *reg, int peer,
                        uint32_t slot, uint64_t off, size_t bytes) {
  if (slot >= reg->nslots || reg->slots[slot] == NULL)
    return NULL;
  const struct rcc_reg_view *v = &reg->slots[slot]->view[peer];
  if (v->base == NULL || off > v->bytes || bytes > v->bytes - off)
    return NULL;
  return v->base + off;
}

/* ---- register ------------------------------------------------------------------- */

/* The way into a collective call that is no collective (live.c): a live
 * communicator, used by one thread, and usable; give it back with leave(). */
static ringcc_result_t enter(struct ringcc_comm *comm, const char *fn) {
  ringcc_result_t r = rcc_comm_enter(comm, fn, RCC_ENTER_CALL);
  if (r != RINGCC_SUCCESS)
    return r;
  ringcc_result_t fatal = rcc_comm_fatal(comm);
  if (comm->aborted || fatal != RINGCC_SUCCESS) {
    r = rcc_comm_error(comm, comm->aborted ? RINGCC_ERR_ABORTED : fatal,
                       "%s on rank %d: the communicator is unusable after "
                       "an earlier failure", fn, comm->rank);
    rcc_comm_leave(comm, RCC_ENTER_CALL);
  }
  return r;
}

static void leave(struct ringcc_comm *comm) {
  rcc_comm_leave(comm, RCC_ENTER_CALL);
}

/* All-gathers the records (mine filled in); then the first failure: mine
 * (already recorded) or a peer's, named. */
static ringcc_result_t exchange(struct ringcc_comm *comm, const char *fn,
                                struct reg_record *all, ringcc_result_t mine,
                                const char *phase, const char *undone) {
  char err[RCC_ERRLEN];
  all[comm->rank].status = (int32_t)mine;
  ringcc_result_t r = rcc_bootstrap_allgather(
      comm->boot, all, sizeof(*all),
      rcc_deadline_after_ms(comm->set.timeout_ms), err, sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_comm_error(comm, r, "%s on rank %d: %s", fn, comm->rank, err);
  if (mine != RINGCC_SUCCESS)
    return mine;
  for (int p = 0; p < comm->nranks; p++)
    if (all[p].status != RINGCC_SUCCESS) {
      all[p].why[WHY_LEN - 1] = '\0';
      return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                            "%s on rank %d: rank %d %s (%s: %s); nothing was "
                            "%s", fn, comm->rank, p, phase,
                            ringcc_strerror((ringcc_result_t)all[p].status),
                            all[p].why, undone);
    }
  return RINGCC_SUCCESS;
}

/* This rank's part of a registration: the memory and the record. */
static ringcc_result_t describe_mine(struct ringcc_comm *comm,
                                     struct rcc_registry *reg, void *ptr,
                                     size_t size, ringcc_reg_t *handle,
                                     struct rcc_mem_block **block,
                                     struct reg_record *rec) {
  char err[RCC_ERRLEN] = "";
  ringcc_result_t r = RINGCC_SUCCESS;
  *block = NULL;
  rec->pid = (int32_t)getpid();
  if (handle == NULL)
    r = rcc_errf(err, sizeof(err), RINGCC_ERR_INVALID_ARGUMENT,
                 "argument 'handle' is NULL");
  else if (ptr == NULL || size == 0)
    r = rcc_errf(err, sizeof(err), RINGCC_ERR_INVALID_ARGUMENT,
                 "argument '%s' is %s", ptr == NULL ? "ptr" : "size",
                 ptr == NULL ? "NULL" : "0");
  else if ((*block = rcc_mem_find(ptr, size)) == NULL)
    r = rcc_errf(err, sizeof(err), RINGCC_ERR_INVALID_ARGUMENT,
                 "argument 'ptr' (%p, size %zu) is not inside memory of "
                 "ringcc_mem_alloc (peers can map only that)", ptr, size);
  else if (reg == NULL)
    r = rcc_errf(err, sizeof(err), RINGCC_ERR_OUT_OF_MEMORY, "out of memory");
  else if (reg->ctl_own == NULL &&
           (r = create_flags(reg, err, sizeof(err))) == RINGCC_SUCCESS)
    reg->ctl[comm->rank] = reg->ctl_own;
  if (r == RINGCC_SUCCESS && (*block)->device >= 0 && reg->dev_own == NULL &&
      (r = create_dev_flags(reg, (*block)->device, err, sizeof(err))) ==
          RINGCC_SUCCESS) {
    reg->dev_view[comm->rank].base = (char *)reg->dev_own;
    reg->dev_view[comm->rank].bytes = reg->dev_bytes;
  }
  rec->dev_fd = reg != NULL ? reg->dev_fd : -1;
  rec->dev_bytes = reg != NULL ? reg->dev_bytes : 0;
  rec->dev_addr = reg != NULL ? (uint64_t)(uintptr_t)reg->dev_own : 0;
  if (r == RINGCC_SUCCESS) {
    rec->fd = (*block)->fd;
    rec->device = (*block)->device;
    rec->offset = (uint64_t)((char *)ptr - (*block)->base);
    rec->bytes = size;
    rec->block_bytes = (*block)->bytes;
    rec->addr = (uint64_t)(uintptr_t)ptr;
    rec->ctl_fd = reg->ctl_fd;
    rec->ctl_addr = (uint64_t)(uintptr_t)reg->ctl_own;
    return RINGCC_SUCCESS;
  }
  snprintf(rec->why, WHY_LEN, "%s", err);
  return rcc_comm_error(comm, r, "ringcc_comm_register on rank %d: %s",
                        comm->rank, err);
}

/* Maps every peer's flags and range on this host into h->view. */
static ringcc_result_t map_peers(struct ringcc_comm *comm,
                                 struct rcc_registry *reg, struct ringcc_reg *h,
                                 const struct reg_record *all,
                                 struct reg_record *rec) {
  char err[RCC_ERRLEN] = "";
  ringcc_result_t r = RINGCC_SUCCESS;
  for (int i = 0; i < reg->nlocal && r == RINGCC_SUCCESS; i++) {
    int p = reg->local[i];
    if (p == comm->rank) {
      h->view[p].base = h->base;
      h->view[p].bytes = h->bytes;
      continue;
    }
    r = map_flags(comm, reg, p, &all[p], err, sizeof(err));
    if (r == RINGCC_SUCCESS)
      r = map_view(comm, p, &all[p], &h->view[p], err, sizeof(err));
    if (r == RINGCC_SUCCESS && comm->peers[comm->rank].gpu.device >= 0)
      r = map_dev_flags(comm, reg, p, &all[p], err, sizeof(err));
  }
  /* Device calls need every local rank's counters here. */
  reg->dev_ready = r == RINGCC_SUCCESS;
  for (int i = 0; i < reg->nlocal; i++)
    reg->dev_ready &= reg->dev_view[reg->local[i]].base != NULL;
  if (r == RINGCC_SUCCESS)
    return r;
  snprintf(rec->why, WHY_LEN, "%s", err);
  return rcc_comm_error(comm, r, "ringcc_comm_register on rank %d: %s",
                        comm->rank, err);
}

static ringcc_result_t add_slot(struct rcc_registry *reg,
                                struct ringcc_reg *h) {
  uint32_t s = 0;
  while (s < reg->nslots && reg->slots[s] != NULL)
    s++;
  if (s == reg->nslots) {
    struct ringcc_reg **more =
        realloc(reg->slots, (reg->nslots + 8) * sizeof(*more));
    if (more == NULL)
      return RINGCC_ERR_OUT_OF_MEMORY;
    memset(more + reg->nslots, 0, 8 * sizeof(*more));
    reg->slots = more;
    reg->nslots += 8;
  }
  h->slot = s;
  reg->slots[s] = h;
  return RINGCC_SUCCESS;
}

static ringcc_result_t do_register(struct ringcc_comm *comm, void *ptr,
                                   size_t size, ringcc_reg_t *handle) {
  static const char fn[] = "ringcc_comm_register";
  char err[RCC_ERRLEN] = "";
  int n = comm->nranks;
  struct reg_record *all = calloc((size_t)n, sizeof(*all));
  struct rcc_registry *reg = registry_get(comm, err, sizeof(err));
  struct ringcc_reg *h = calloc(1, sizeof(*h));
  struct rcc_mem_block *block = NULL;
  ringcc_result_t r;

  if (all == NULL || h == NULL) {
    free(all);
    free(h);
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s on rank %d: out of memory", fn, comm->rank);
  }
  r = describe_mine(comm, reg, ptr, size, handle, &block, &all[comm->rank]);
  r = exchange(comm, fn, all, r, "could not register its buffer",
               "registered");
  if (r == RINGCC_SUCCESS) {
    h->block = block;
    h->base = ptr;
    h->bytes = size;
    h->view = calloc((size_t)n, sizeof(*h->view));
    if (h->view == NULL)
      r = rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                         "%s on rank %d: out of memory", fn, comm->rank);
    else
      r = map_peers(comm, reg, h, all, &all[comm->rank]);
    if (r == RINGCC_SUCCESS && add_slot(reg, h) != RINGCC_SUCCESS)
      r = rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                         "%s on rank %d: out of memory", fn, comm->rank);
    r = exchange(comm, fn, all, r, "could not map its peers' memory",
                 "registered");
    if (r != RINGCC_SUCCESS && reg->slots != NULL && h->slot < reg->nslots &&
        reg->slots[h->slot] == h)
      reg->slots[h->slot] = NULL;
  }
  free(all);
  if (r != RINGCC_SUCCESS) {
    if (h->view != NULL)
      free_registration(comm, h);
    else {
      rcc_mem_release(block);
      free(h);
    }
    return r;
  }
  reg->nlive++;
  reg->kind = compute_kind(comm, reg);
  RCC_INFO(comm->rank, "%s: %zu bytes at %p, slot %u (%d registered); "
           "zero-copy: %s", fn, size, ptr, h->slot, reg->nlive,
           reg->kind == RCC_ZC_ONE_HOST   ? "every rank on this host"
           : reg->kind == RCC_ZC_PER_HOST ? "AllReduce per host, a ring "
                                            "between hosts"
                                          : "not available (shared memory "
                                            "disabled, or hosts with "
                                            "different numbers of ranks)");
  *handle = h;
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_register(ringcc_comm_t comm, void *ptr,
                                                size_t size,
                                                ringcc_reg_t *handle) {
  if (comm == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_register: argument 'comm' is NULL");
  ringcc_result_t r = enter(comm, "ringcc_comm_register");
  if (r != RINGCC_SUCCESS)
    return r;
  if (handle != NULL)
    *handle = NULL;
  r = do_register(comm, ptr, size, handle);
  leave(comm);
  return r;
}

/* ---- deregister ----------------------------------------------------------------- */

static ringcc_result_t do_deregister(struct ringcc_comm *comm,
                                     ringcc_reg_t handle) {
  static const char fn[] = "ringcc_comm_deregister";
  struct rcc_registry *reg = comm->registry;
  int n = comm->nranks;
  struct reg_record *all = calloc((size_t)n, sizeof(*all));
  ringcc_result_t r = RINGCC_SUCCESS;

  if (all == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "%s on rank %d: out of memory", fn, comm->rank);
  struct reg_record *mine = &all[comm->rank];
  /* Found by its address among the slots: a stale handle is never read. */
  int found = 0;
  for (uint32_t k = 0; reg != NULL && handle != NULL && k < reg->nslots; k++)
    found |= reg->slots[k] == handle;
  mine->slot = found ? (int32_t)handle->slot : -1;
  if (!found) {
    snprintf(mine->why, WHY_LEN, "argument 'handle' (%p) is not a "
             "registration of this communicator (or was deregistered "
             "already)", (void *)handle);
    r = rcc_comm_error(comm, RINGCC_ERR_INVALID_ARGUMENT, "%s on rank %d: %s",
                       fn, comm->rank, mine->why);
  }
  r = exchange(comm, fn, all, r, "could not deregister", "deregistered");
  for (int p = 0; p < n && r == RINGCC_SUCCESS; p++)
    if (all[p].slot != mine->slot)
      r = rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                         "%s on rank %d: rank %d deregisters its registration "
                         "%d where this rank deregisters its %d (every rank "
                         "must pass the same registration); nothing was "
                         "deregistered", fn, comm->rank, p, all[p].slot,
                         mine->slot);
  int slot = mine->slot;
  free(all);
  if (r != RINGCC_SUCCESS)
    return r;
  reg->slots[handle->slot] = NULL;
  free_registration(comm, handle);
  reg->nlive--;
  reg->kind = compute_kind(comm, reg);
  RCC_INFO(comm->rank, "%s: slot %d (%d still registered)", fn, slot,
           reg->nlive);
  return RINGCC_SUCCESS;
}

RINGCC_API ringcc_result_t ringcc_comm_deregister(ringcc_comm_t comm,
                                                  ringcc_reg_t handle) {
  if (comm == NULL)
    return rcc_thread_error(RINGCC_ERR_INVALID_ARGUMENT,
                            "ringcc_comm_deregister: argument 'comm' is NULL");
  ringcc_result_t r = enter(comm, "ringcc_comm_deregister");
  if (r != RINGCC_SUCCESS)
    return r;
  r = do_deregister(comm, handle);
  leave(comm);
  return r;
}
