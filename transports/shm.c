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
 *
 * A communicator shrunk from another (ringcc_comm_shrink) makes no FIFOs of
 * its own where it can take the parent's: its connections point into the
 * parent's segments, at the FIFOs between the same two processes, with the
 * steps the FIFOs' counters say (links.h), and its own segment holds only
 * the extra room (the board's state is each communicator's own). The
 * mappings are counted (refs): the parent's destroy leaves them to the
 * last communicator that uses them. Every rank decides alike (the
 * configuration is the parent's, the parent served the same edges) and the
 * blobs say so: a rank that could not is an error naming it, never a
 * silent mix.
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
#include <sys/statvfs.h>
#include <linux/futex.h>
#include <limits.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "failure.h"
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
  uint32_t reuse; /* 1: the parent's FIFOs (a shrink); the segment is the
                     extra room only */
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
  int nranks;          /* of the communicator that made it */
  int refs;            /* this communicator's, and one per communicator
                          shrunk from it that uses its FIFOs */
  /* Where this communicator's FIFOs are: this state, or (a shrunk
   * communicator's) the first one's whose FIFOs it uses, with each rank's
   * number there (fifo_rank, NULL where the same) and its layout. */
  struct shm_state *fifos;
  int *fifo_rank;
  size_t layout_fifo_bytes;
  int layout_nranks;
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

/* Where the extra room starts: after the FIFOs (at 0 in a segment that
 * holds no FIFOs: a shrunk communicator's). */
static size_t extra_offset(const struct ringcc_comm *comm,
                           const struct shm_state *st) {
  return st->fifos != st ? 0
                         : fifo_offset(comm, rcc_fifo_sets(comm, st->nkinds),
                                       0);
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

/* Sizes the segment and reserves its pages now: ftruncate alone makes a
 * sparse file, and a tmpfs too small for it would then kill the process
 * with SIGBUS at the first touch of a page it cannot supply (in the first
 * collective, on every rank), where a reservation fails here, at init,
 * with ENOSPC. posix_fallocate may be interrupted by a signal (EINTR): it
 * is tried again. 0, or an errno. */
static int reserve_pages(int fd, size_t bytes) {
  int e;
  do
    e = posix_fallocate(fd, 0, (off_t)bytes);
  while (e == EINTR);
  if (e == EOPNOTSUPP || e == EINVAL) /* no fallocate here: size it only */
    e = ftruncate(fd, (off_t)bytes) == 0 ? 0 : errno;
  return e;
}

/* The sentence for a segment that could not be reserved: /dev/shm's free
 * bytes, what this rank needed, and the variables that shrink it. */
static ringcc_result_t reserve_error(struct ringcc_comm *comm,
                                     const struct shm_state *st, int e) {
  struct statvfs vfs;
  char free_bytes[64] = "unknown";
  if (statvfs("/dev/shm", &vfs) == 0)
    snprintf(free_bytes, sizeof(free_bytes), "%llu",
             (unsigned long long)vfs.f_bavail * vfs.f_frsize);
  return rcc_comm_error(
      comm, e == ENOSPC || e == ENOMEM ? RINGCC_ERR_OUT_OF_MEMORY
                                       : RINGCC_ERR_SYSTEM,
      "shm on rank %d: cannot reserve %zu bytes in /dev/shm for %s: %s "
      "(/dev/shm has %s bytes free; this rank's FIFOs need nslots x "
      "chunk_bytes x channels x peers: lower RINGCC_NSLOTS (%d), "
      "RINGCC_CHUNK_BYTES (%lld) or RINGCC_NCHANNELS (%d), or enlarge "
      "/dev/shm, e.g. docker --shm-size)",
      comm->rank, st->own_bytes, st->name, strerror(e), free_bytes,
      comm->set.nslots, (long long)comm->set.chunk_bytes,
      comm->kind_channels[RCC_CONN_COLL]);
}

static ringcc_result_t create_segment(struct ringcc_comm *comm,
                                      struct shm_state *st) {
  ringcc_result_t r = random_name(comm, st->name, sizeof(st->name));
  if (r != RINGCC_SUCCESS)
    return r;
  st->own_bytes = extra_offset(comm, st);
  if (st->extra)
    st->own_bytes += (comm->shm_extra_bytes + 4095) & ~(size_t)4095;
  int fd = shm_open(st->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot create %s: %s", comm->rank,
                          st->name, strerror(errno));
  int e = reserve_pages(fd, st->own_bytes);
  if (e != 0) {
    close(fd);
    shm_unlink(st->name);
    return reserve_error(comm, st, e);
  }
  st->own = map_segment(fd, st->own_bytes);
  e = errno;
  close(fd);
  if (st->own == NULL) {
    shm_unlink(st->name);
    return rcc_comm_error(comm, RINGCC_ERR_SYSTEM,
                          "shm on rank %d: cannot map %s (%zu bytes): %s",
                          comm->rank, st->name, st->own_bytes, strerror(e));
  }
  return RINGCC_SUCCESS;
}

/* Unmaps what st mapped and frees it. */
static void release(struct shm_state *st) {
  for (int p = 0; st->peer_map && p < st->nranks; p++)
    if (st->peer_map[p])
      munmap(st->peer_map[p], st->peer_bytes[p]);
  if (st->own)
    munmap(st->own, st->own_bytes);
  free(st->peer_map);
  free(st->peer_bytes);
  free(st->fifo_rank);
  free(st);
}

/* A rank that leaves in order (destroy, no failure known, not aborted)
 * says so in every FIFO it sends on, as the network's goodbye does
 * (net_proxy.c): a peer still waiting there for data fails at once, naming
 * it (exec_host.c), and a receive from any source stops waiting on it
 * rather than taking its ended process for a dead one. Said by the last
 * communicator that uses the FIFOs (shrink shares them), before they go. */
static void say_goodbye(struct ringcc_comm *comm) {
  if (comm->forked || comm->aborted || comm->edge_transport == NULL ||
      rcc_comm_fatal(comm) != RINGCC_SUCCESS || rcc_dead_rank(comm, NULL) >= 0)
    return;
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; comm->send_conn[k] && ch < comm->kind_channels[k]; ch++)
      for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank || comm->edge_transport[p] != &rcc_transport_shm)
          continue;
        struct rcc_fifo *f = rcc_send_conn(comm, k, ch, p)->fifo;
        if (f == NULL)
          continue;
        __atomic_store_n(&f->closed, 1, __ATOMIC_RELEASE);
        if (__atomic_load_n(&f->tail_waiters, __ATOMIC_SEQ_CST) != 0)
          syscall(SYS_futex, &f->tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
      }
}

/* One reference less to a state whose FIFOs are in use (comm's, or those
 * of a communicator shrunk from it); the last says goodbye, and goes. */
static void unref(struct ringcc_comm *comm, struct shm_state *st) {
  if (__atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  say_goodbye(comm);
  release(st);
}

static void shm_destroy(struct ringcc_comm *comm, void *state) {
  struct shm_state *st = state;
  if (st == NULL)
    return;
  if (!st->unlinked && st->name[0] && !comm->forked)
    shm_unlink(st->name); /* (a forked child's copy leaves it to the parent) */
  struct shm_state *fifos = st->fifos;
  if (fifos != NULL && fifos != st) {
    release(st); /* its own room; the FIFOs are another's */
    unref(comm, fifos);
  } else {
    unref(comm, st); /* the communicators shrunk from this one may use it */
  }
}

/* The parent's state of this transport, if comm is a shrunk communicator
 * whose every edge of this transport the parent's FIFOs can carry (the
 * same layout, the parent served the edge): NULL where it cannot. */
static struct shm_state *parent_fifos(const struct ringcc_comm *comm,
                                      const int *peers, int npeers) {
  const struct ringcc_comm *pc = comm->parent;
  struct shm_state *ps = comm->parent_state; /* (this transport's) */
  if (pc == NULL || comm->parent_rank == NULL)
    return NULL;
  if (ps == NULL || ps->fifos == NULL || !ps->extra ||
      ps->nkinds != comm->nkinds || pc->set.nslots != comm->set.nslots ||
      pc->set.chunk_bytes != comm->set.chunk_bytes)
    return NULL;
  for (int k = 0; k < comm->nkinds; k++)
    if (pc->kind_channels[k] != comm->kind_channels[k])
      return NULL;
  for (int i = 0; i < npeers; i++) {
    int pp = comm->parent_rank[peers[i]];
    int rp = ps->fifo_rank != NULL ? ps->fifo_rank[pp] : pp;
    if (pc->edge_transport[pp] != &rcc_transport_shm ||
        ps->fifos->peer_map[rp] == NULL)
      return NULL;
  }
  return ps;
}

/* This shrunk communicator's FIFOs are the parent's (ps): where, and one
 * more reference to them. */
static int adopt(const struct ringcc_comm *comm, struct shm_state *st,
                 struct shm_state *ps) {
  struct shm_state *root = ps->fifos;
  st->fifo_rank = calloc((size_t)comm->nranks, sizeof(int));
  if (st->fifo_rank == NULL)
    return -1;
  for (int q = 0; q < comm->nranks; q++) {
    int pq = comm->parent_rank[q];
    st->fifo_rank[q] = ps->fifo_rank != NULL ? ps->fifo_rank[pq] : pq;
  }
  st->fifos = root;
  st->layout_fifo_bytes = root->layout_fifo_bytes;
  st->layout_nranks = root->layout_nranks;
  __atomic_add_fetch(&root->refs, 1, __ATOMIC_ACQ_REL);
  return 0;
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
  st->nranks = comm->nranks;
  st->refs = 1;
  st->fifos = st;
  st->layout_fifo_bytes = fifo_bytes(comm);
  st->layout_nranks = comm->nranks;
  st->peer_map = calloc((size_t)comm->nranks, sizeof(void *));
  st->peer_bytes = calloc((size_t)comm->nranks, sizeof(size_t));
  *state = st;
  if (st->peer_map == NULL || st->peer_bytes == NULL)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "shm on rank %d: out of memory", comm->rank);
  if (npeers == 0)
    return RINGCC_SUCCESS;
  struct shm_state *ps = extra ? parent_fifos(comm, peers, npeers) : NULL;
  if (ps != NULL && adopt(comm, st, ps) != 0)
    return rcc_comm_error(comm, RINGCC_ERR_OUT_OF_MEMORY,
                          "shm on rank %d: out of memory", comm->rank);
  b->reuse = ps != NULL;
  if (ps != NULL && !st->extra)
    return RINGCC_SUCCESS; /* no room to make either */
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

/* A FIFO of the first communicator's layout (root's segments) for this
 * shrunk one: set, sender rank and receiver's segment, in root's numbers. */
static char *root_fifo(const struct shm_state *st, char *segment, int set,
                       int sender) {
  return segment + ((size_t)set * (size_t)st->layout_nranks + (size_t)sender) *
                       st->layout_fifo_bytes;
}

/* The connections of a shrunk communicator to peer p: the parent's FIFOs
 * between the two processes. Every survivor's parent is quiet by now (it
 * returned from its last call before the shrink; the setup's agreement is
 * behind us), so each counter is final: a sender goes on from its tail,
 * and a receiver from there too, dropping what a call the parent's failure
 * cut short published and never consumed (head = tail: those slots are
 * free). The receiver clears the dead word of its receive FIFOs: the
 * failure the parent learned of is not this communicator's (the parent,
 * once shrunk after a failure, no longer marks them: shrink.c). */
static void connect_reused(struct ringcc_comm *comm, struct shm_state *st,
                           int p) {
  struct shm_state *root = st->fifos;
  int me = st->fifo_rank[comm->rank], them = st->fifo_rank[p];
  for (int k = 0; k < st->nkinds; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++) {
      int set = rcc_fifo_set(comm, k, ch);
      struct rcc_conn *s = rcc_send_conn(comm, k, ch, p);
      struct rcc_conn *r = rcc_recv_conn(comm, k, ch, p);
      init_conn(s, root_fifo(st, root->peer_map[them], set, me), comm, p);
      init_conn(r, root_fifo(st, root->own, set, them), comm, p);
      __atomic_store_n(&r->fifo->dead, 0, __ATOMIC_RELEASE);
      s->step = __atomic_load_n(&s->fifo->tail, __ATOMIC_ACQUIRE);
      r->step = __atomic_load_n(&r->fifo->tail, __ATOMIC_ACQUIRE);
      __atomic_store_n(&r->fifo->head, r->step, __ATOMIC_RELEASE);
      comm->links_reused++;
    }
}

static ringcc_result_t shm_connect(struct ringcc_comm *comm, void *state,
                                   const int *peers, int npeers,
                                   const char *all_blobs) {
  struct shm_state *st = state;
  for (int i = 0; i < npeers; i++) {
    int p = peers[i];
    const struct shm_blob *b =
        (const void *)(all_blobs + (size_t)p * RCC_TRANSPORT_BLOB_BYTES);
    int reuse = st->fifos != st;
    if ((int)b->reuse != reuse)
      return rcc_comm_error(comm, RINGCC_ERR_INTERNAL,
                            "shm on rank %d: rank %d %s the parent's FIFOs "
                            "and this rank %s (a shrunk communicator's ranks "
                            "must agree)", comm->rank, p,
                            b->reuse ? "reuses" : "does not reuse",
                            reuse ? "does" : "does not");
    ringcc_result_t r =
        b->name[0] == '\0' && reuse ? RINGCC_SUCCESS
                                    : map_peer(comm, st, p, b);
    if (r != RINGCC_SUCCESS)
      return r;
    if (reuse) {
      connect_reused(comm, st, p);
      continue;
    }
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
