/*
 * shm.c - shared host memory transport.
 *
 * Every rank owns one POSIX shared-memory segment holding its receive FIFOs:
 * one per (connection kind, channel, sender) for each peer this transport
 * serves. The
 * sender maps the receiver's segment and writes straight into the slots, so
 * a fused ring step reduces into the next rank's slot with no extra copy.
 *
 * A segment of this transport (not p2p.c's host part) ends with
 * comm->shm_extra_bytes of room for whoever asked (the one-shot board,
 * lib/board/); every peer maps it with the FIFOs, and the table's extra
 * says where it is.
 *
 * Segments are created O_CREAT|O_EXCL with mode 0600 under a name holding 128
 * random bits, and unlinked as soon as every peer has mapped them (after the
 * connect barrier), so nothing is left in /dev/shm once a communicator is up,
 * whatever happens to the processes later. A rank killed before that leaves
 * its segment: the name says who made it (shmname.h), and the next init on
 * the host (shm_sweep, through the table) or ringcc-run removes it once its
 * creator is gone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "log.h"
#include "proc.h"
#include "sha256.h"
#include "fifo.h"
#include "shm.h"
#include "shmname.h"
#include "topo.h"
#include "transport.h"

struct shm_blob {
  char name[RCC_SHM_NAME_MAX];
  uint64_t bytes;
  uint64_t fifo_bytes;
};
/* p2p.c puts its own part after this one, at offset 128. */
_Static_assert(sizeof(struct shm_blob) <= 128, "shm blob too large for p2p");

struct shm_state {
  char name[RCC_SHM_NAME_MAX];
  int unlinked;
  void *own;           /* this rank's segment */
  size_t own_bytes;
  void **peer_map;     /* [nranks] peers' segments, NULL where not mapped */
  size_t *peer_bytes;  /* [nranks] */
  int nkinds;          /* FIFO kinds per sender: comm->nkinds, or the host
                          kinds only under p2p.c (rcc_shm_setup_host) */
  int extra;           /* the segments end with comm->shm_extra_bytes (not
                          under p2p.c) */
};

static size_t shm_slot_bytes(const struct ringcc_comm *comm) {
  return (size_t)comm->set.chunk_bytes;
}

static size_t fifo_bytes(const struct ringcc_comm *comm) {
  size_t data = (size_t)comm->set.nslots * (size_t)comm->set.chunk_bytes;
  size_t b = RCC_FIFO_DATA_OFFSET + data;
  return (b + 4095) & ~(size_t)4095;
}

/* FIFO (set, sender) inside a receiver's segment: a set is a (kind,
 * channel) of comm.h's numbering. */
static size_t fifo_offset(const struct ringcc_comm *comm, int set,
                          int sender) {
  return ((size_t)set * (size_t)comm->nranks + (size_t)sender) *
         fifo_bytes(comm);
}

/* Where the extra room starts: after the FIFOs. */
static size_t extra_offset(const struct ringcc_comm *comm,
                           const struct shm_state *st) {
  return fifo_offset(comm, rcc_fifo_sets(comm, st->nkinds), 0);
}

static int shm_can_connect(const struct ringcc_comm *comm,
                           const struct rcc_peer_info *me,
                           const struct rcc_peer_info *peer) {
  (void)comm;
  return !me->shm_disable && !peer->shm_disable &&
         me->host_hash == peer->host_hash;
}

/* "/ringcc-BOOT-PIDNS-PID-RANDOM" (shmname.h): who made it, and 128 random
 * bits. */
static ringcc_result_t random_name(struct ringcc_comm *comm, char *name,
                                   size_t len) {
  uint8_t rnd[16];
  char boot[RCC_SHM_BOOT_DIGITS + 1];
  unsigned long long pidns;
  int e = rcc_random_bytes(rnd, sizeof(rnd));
  if (e != 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: getrandom failed: %s", comm->rank,
                          strerror(e));
  rcc_shm_identity(boot, &pidns);
  rcc_shm_name_format(name, len, boot, pidns, (int)getpid(), rnd);
  return RINGCC_SUCCESS;
}

/* The table's sweep: removes the segments of this user whose creator is
 * gone (same boot and pid namespace, no such process, or a zombie: a rank
 * killed during init); returns how many. */
static int shm_sweep(int log_rank) {
  char boot[RCC_SHM_BOOT_DIGITS + 1], their_boot[RCC_SHM_BOOT_DIGITS + 1];
  unsigned long long pidns, their_ns;
  int pid, removed = 0;
  DIR *d = opendir("/dev/shm");
  if (d == NULL)
    return 0;
  rcc_shm_identity(boot, &pidns);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    struct stat st;
    if (rcc_shm_name_parse(e->d_name, their_boot, &their_ns, &pid) != 0 ||
        strcmp(their_boot, boot) != 0 || their_ns != pidns || pidns == 0 ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != geteuid() || !rcc_pid_gone(pid))
      continue;
    char name[sizeof(e->d_name) + 2];
    snprintf(name, sizeof(name), "/%s", e->d_name);
    if (shm_unlink(name) == 0) {
      removed++;
      RCC_INFO(log_rank, "shm: removed /dev/shm%s: its creator (pid %d) is "
               "gone", name, pid);
    }
  }
  closedir(d);
  return removed;
}

static void *map_segment(int fd, size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? NULL : p;
}

static ringcc_result_t create_segment(struct ringcc_comm *comm,
                                      struct shm_state *st) {
  ringcc_result_t r = random_name(comm, st->name, sizeof(st->name));
  if (r != RINGCC_SUCCESS)
    return r;
  st->own_bytes = fifo_offset(comm, rcc_fifo_sets(comm, st->nkinds), 0);
  if (st->extra)
    st->own_bytes += (comm->shm_extra_bytes + 4095) & ~(size_t)4095;
  int fd = shm_open(st->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot create %s: %s", comm->rank,
                          st->name, strerror(errno));
  if (ftruncate(fd, (off_t)st->own_bytes) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(st->name);
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot size %s to %zu bytes: %s "
                          "(is /dev/shm full?)",
                          comm->rank, st->name, st->own_bytes, strerror(e));
  }
  st->own = map_segment(fd, st->own_bytes);
  int e = errno;
  close(fd);
  if (st->own == NULL) {
    shm_unlink(st->name);
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot map %s (%zu bytes): %s",
                          comm->rank, st->name, st->own_bytes, strerror(e));
  }
  return RINGCC_SUCCESS;
}

static void shm_destroy(struct ringcc_comm *comm, void *state) {
  struct shm_state *st = state;
  if (st == NULL)
    return;
  if (!st->unlinked && st->name[0] && !comm->forked)
    shm_unlink(st->name); /* (a forked child's copy leaves it to the parent) */
  for (int p = 0; st->peer_map && p < comm->nranks; p++)
    if (st->peer_map[p])
      munmap(st->peer_map[p], st->peer_bytes[p]);
  if (st->own)
    munmap(st->own, st->own_bytes);
  free(st->peer_map);
  free(st->peer_bytes);
  free(st);
}

static ringcc_result_t setup_kinds(struct ringcc_comm *comm, int nkinds,
                                   int extra, const int *peers, int npeers,
                                   void *blob, void **state) {
  struct shm_state *st = calloc(1, sizeof(*st));
  struct shm_blob *b = blob;
  if (st == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "shm on rank %d: out of memory", comm->rank);
  st->nkinds = nkinds;
  st->extra = extra && comm->shm_extra_bytes > 0;
  st->peer_map = calloc((size_t)comm->nranks, sizeof(void *));
  st->peer_bytes = calloc((size_t)comm->nranks, sizeof(size_t));
  *state = st;
  (void)peers;
  if (st->peer_map == NULL || st->peer_bytes == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "shm on rank %d: out of memory", comm->rank);
  if (npeers == 0)
    return RINGCC_SUCCESS;
  ringcc_result_t r = create_segment(comm, st);
  if (r != RINGCC_SUCCESS)
    return r;
  memcpy(b->name, st->name, sizeof(b->name));
  b->bytes = st->own_bytes;
  b->fifo_bytes = fifo_bytes(comm);
  return RINGCC_SUCCESS;
}

static ringcc_result_t shm_setup(struct ringcc_comm *comm, const int *peers,
                                 int npeers, void *blob, void **state) {
  return setup_kinds(comm, comm->nkinds, 1, peers, npeers, blob, state);
}

ringcc_result_t rcc_shm_setup_host(struct ringcc_comm *comm, const int *peers,
                                   int npeers, void *blob, void **state) {
  return setup_kinds(comm, RCC_NUM_CONN_KINDS, 0, peers, npeers, blob, state);
}

static void init_conn(struct rcc_conn *c, char *fifo_base,
                      const struct ringcc_comm *comm, int peer) {
  c->fifo = (struct rcc_fifo *)fifo_base;
  c->data = fifo_base + RCC_FIFO_DATA_OFFSET;
  c->nslots = (uint32_t)comm->set.nslots;
  c->slot_bytes = (size_t)comm->set.chunk_bytes;
  c->step = 0;
  c->peer = peer;
  c->ops = NULL; /* both ends are executors */
}

static ringcc_result_t map_peer(struct ringcc_comm *comm,
                                struct shm_state *st, int peer,
                                const struct shm_blob *b) {
  if (b->name[0] != '/' || memchr(b->name, '\0', sizeof(b->name)) == NULL ||
      b->fifo_bytes != fifo_bytes(comm) ||
      (st->extra &&
       b->bytes < extra_offset(comm, st) + comm->shm_extra_bytes))
    return rcc_comm_error(comm, RINGCC_ERR_INVALID_USAGE,
                          "shm on rank %d: rank %d's FIFOs do not match ours "
                          "(do all ranks use the same RINGCC_CHUNK_BYTES and "
                          "RINGCC_NSLOTS?)",
                          comm->rank, peer);
  int fd = shm_open(b->name, O_RDWR, 0);
  if (fd < 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot open rank %d's segment %s: "
                          "%s",
                          comm->rank, peer, b->name, strerror(errno));
  st->peer_map[peer] = map_segment(fd, (size_t)b->bytes);
  int e = errno;
  close(fd);
  if (st->peer_map[peer] == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot map rank %d's segment %s: %s",
                          comm->rank, peer, b->name, strerror(e));
  st->peer_bytes[peer] = (size_t)b->bytes;
  return RINGCC_SUCCESS;
}

static ringcc_result_t shm_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  struct shm_state *st = state;
  for (int i = 0; i < npeers; i++) {
    int p = peers[i];
    const struct shm_blob *b =
        (const void *)(all_blobs + (size_t)p * RCC_TRANSPORT_BLOB_BYTES);
    ringcc_result_t r = map_peer(comm, st, p, b);
    if (r != RINGCC_SUCCESS)
      return r;
    for (int k = 0; k < st->nkinds; k++)
      for (int ch = 0; ch < comm->kind_channels[k]; ch++) {
        int set = rcc_fifo_set(comm, k, ch);
        init_conn(rcc_send_conn(comm, k, ch, p),
                  (char *)st->peer_map[p] + fifo_offset(comm, set, comm->rank),
                  comm, p);
        init_conn(rcc_recv_conn(comm, k, ch, p),
                  (char *)st->own + fifo_offset(comm, set, p), comm, p);
      }
  }
  return RINGCC_SUCCESS;
}

static void shm_finish(struct ringcc_comm *comm, void *state) {
  struct shm_state *st = state;
  (void)comm;
  if (st->name[0] && !st->unlinked) {
    shm_unlink(st->name);
    st->unlinked = 1;
  }
}

/* Shared memory between ranks of one host. */
static int shm_link(const struct ringcc_comm *comm, void *state, int peer) {
  (void)comm, (void)state, (void)peer;
  return RCC_LINK_SHM;
}

/* The table's extra: where rank's segment keeps comm->shm_extra_bytes. */
static void *shm_extra(const struct ringcc_comm *comm, void *state,
                       int rank) {
  const struct shm_state *st = state;
  if (st == NULL || !st->extra || rank < 0 || rank >= comm->nranks)
    return NULL;
  char *base = rank == comm->rank ? st->own : st->peer_map[rank];
  return base != NULL ? base + extra_offset(comm, st) : NULL;
}

const struct rcc_transport rcc_transport_shm = {
    .name = "SHM",
    .can_connect = shm_can_connect,
    .slot_bytes = shm_slot_bytes,
    .setup = shm_setup,
    .connect = shm_connect,
    .finish = shm_finish,
    .destroy = shm_destroy,
    .link = shm_link,
    .sweep = shm_sweep,
    .extra = shm_extra,
};
