/*
 * failure.c - what a rank knows about a dead peer, and how it tells others.
 *
 * A rank killed with SIGKILL is noticed first by the ranks that wait on it
 * (its process is gone, or its sockets reach EOF). The other survivors wait
 * on ranks that are alive but have stopped, and would otherwise see only
 * those ranks leave. So the first rank known dead is recorded once per
 * communicator (comm->dead) and passed on along every edge before the call
 * that noticed it returns:
 *
 *   shared memory  the FIFO header's 'dead' word (1 + rank), on both
 *                  directions of every host FIFO, with a futex wake, so a
 *                  peer blocked on this rank wakes and reads the cause (a
 *                  peer asleep on this rank's one-shot board is woken too,
 *                  through comm->lost_wake, and reads it in the FIFO from
 *                  this rank);
 *   network        the engine (the proxy thread) sends a zero-byte FAIL
 *                  message naming the rank on every send connection
 *                  (net_proxy.c; woken through the connection's notify
 *                  hook), and
 *                  ringcc_comm_destroy/abort wait briefly for it to leave.
 *
 * A peer that learns the cause records it and passes it on the same way, so
 * every survivor reports the killed rank and its host, whichever rank it was
 * waiting for. Device kernels learn it too: rcc_peer_dead stores
 * RINGCC_ERR_PEER_FAILED through comm->fail_word (error.c), a host-mapped
 * word the CUDA side registered, which every kernel wait polls. While a
 * kernel may wait no host thread does, so the CUDA side's watchdog
 * (watchdog.c) runs rcc_check_peers: the host executor's checks, for every
 * same-host peer.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "failure.h"
#include "fifo.h"
#include "log.h"
#include "proc.h"
#include "topo.h"

static void wake(uint32_t *word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Marks one host FIFO and wakes whoever sleeps on it (either end). */
static void poison(struct rcc_conn *c, uint32_t word, struct rcc_conn **engine) {
  /* (read once: a communicator shrunk after a failure lets go of its
   * shared-memory FIFOs, shrink.c, while its proxy may run this) */
  struct rcc_fifo *f = c != NULL ? __atomic_load_n(&c->fifo, __ATOMIC_ACQUIRE)
                                 : NULL;
  if (f == NULL)
    return;
  if (c->ops != NULL) { /* an engine's FIFO: the engine tells the peer */
    *engine = c;
    return;
  }
  __atomic_store_n(&f->dead, word, __ATOMIC_RELEASE);
  wake(&f->tail);
  wake(&f->head);
}

int rcc_peer_alive(const struct ringcc_comm *comm, int peer) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  const struct rcc_peer_info *q = &comm->peers[peer];
  if (q->pid_space != me->pid_space || q->pid == me->pid)
    return 1; /* another host, or a thread of this process */
  /* A killed child its parent has not reaped yet is a zombie: gone too. */
  return !rcc_pid_gone((int)q->pid);
}

int rcc_dead_rank(const struct ringcc_comm *comm, int *told_by) {
  uint64_t d = __atomic_load_n(&comm->dead, __ATOMIC_ACQUIRE);
  if (d == 0)
    return -1;
  if (told_by != NULL)
    *told_by = (int)(d >> 32) - 1;
  return RCC_DEAD_RANK((uint32_t)d);
}

int rcc_dead_unreachable(const struct ringcc_comm *comm) {
  uint64_t d = __atomic_load_n(&comm->dead, __ATOMIC_ACQUIRE);
  return d != 0 && ((uint32_t)d & RCC_DEAD_UNREACHABLE) != 0;
}

void rcc_peer_dead(struct ringcc_comm *comm, int dead, int told_by) {
  rcc_peer_lost(comm, dead, told_by, 0);
}

void rcc_peer_lost(struct ringcc_comm *comm, int dead, int told_by,
                   int unreachable) {
  if (dead < 0 || dead >= comm->nranks || dead == comm->rank)
    return;
  uint32_t word = (uint32_t)(dead + 1) | (unreachable ? RCC_DEAD_UNREACHABLE
                                                      : 0);
  uint64_t want = (uint64_t)(uint32_t)(told_by + 1) << 32 | word;
  uint64_t have = __atomic_load_n(&comm->dead, __ATOMIC_ACQUIRE);
  for (;;) {
    /* First wins, except that a rank we believed dead which tells us about
     * another was alive when it learned it: its word is the better one. */
    if (have != 0 && RCC_DEAD_RANK((uint32_t)have) != told_by)
      return;
    if (have == want)
      return;
    if (__atomic_compare_exchange_n(&comm->dead, &have, want, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      break;
  }
  const struct rcc_peer_info *q = &comm->peers[dead];
  const char *what = unreachable ? "is unreachable" : "died";
  if (told_by == comm->rank)
    RCC_INFO(comm->rank, "rank %d (pid %d on host %s) %s; telling the "
                         "peers", dead, (int)q->pid, q->hostname, what);
  else
    RCC_INFO(comm->rank, "rank %d told this rank that rank %d (pid %d on host "
                         "%s) %s; passing it on", told_by, dead, (int)q->pid,
             q->hostname, what);
  struct rcc_conn *engine = NULL;
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++)
      for (int p = 0; p < comm->nranks; p++) {
        if (comm->send_conn[k] != NULL)
          poison(rcc_send_conn(comm, k, ch, p), word, &engine);
        if (comm->recv_conn[k] != NULL)
          poison(rcc_recv_conn(comm, k, ch, p), word, &engine);
      }
  if (engine != NULL) /* one engine serves every network edge */
    engine->ops->notify(engine);
  /* Peers asleep on words outside the FIFOs (this rank's one-shot board):
   * the modules that own them left them in comm->lost_wake. */
  for (int i = 0; i < RCC_LOST_WAKE_MAX; i++) {
    uint32_t *w = __atomic_load_n(&comm->lost_wake[i], __ATOMIC_ACQUIRE);
    if (w != NULL)
      syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
  /* Device waits too. */
  rcc_comm_tell_kernels(comm, unreachable ? RINGCC_ERR_NETWORK
                                          : RINGCC_ERR_PEER_FAILED);
}

int rcc_check_peers(struct ringcc_comm *comm) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  for (int p = 0; p < comm->nranks && rcc_dead_rank(comm, NULL) < 0; p++) {
    const struct rcc_peer_info *q = &comm->peers[p];
    if (p == comm->rank || q->pid_space != me->pid_space || q->pid == me->pid)
      continue; /* another host (its engine tells), or a thread of ours */
    int unreachable = 0;
    int told = rcc_peer_poisoned(comm, p, &unreachable); /* p knew first */
    if (told >= 0)
      rcc_peer_lost(comm, told, p, unreachable);
    else if (!rcc_peer_alive(comm, p))
      rcc_peer_dead(comm, p, comm->rank);
  }
  return rcc_dead_rank(comm, NULL);
}

int rcc_peer_poisoned(const struct ringcc_comm *comm, int peer,
                      int *unreachable) {
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++) {
      const struct rcc_conn *s =
          comm->send_conn[k] ? rcc_send_conn(comm, k, ch, peer) : NULL;
      const struct rcc_conn *r =
          comm->recv_conn[k] ? rcc_recv_conn(comm, k, ch, peer) : NULL;
      const struct rcc_conn *both[2] = {s, r};
      for (int i = 0; i < 2; i++) {
        const struct rcc_conn *c = both[i];
        if (c == NULL || c->fifo == NULL || c->ops != NULL)
          continue;
        uint32_t d = __atomic_load_n(&c->fifo->dead, __ATOMIC_ACQUIRE);
        if (d != 0 && unreachable != NULL)
          *unreachable = (d & RCC_DEAD_UNREACHABLE) != 0;
        if (d != 0)
          return RCC_DEAD_RANK(d);
      }
    }
  return -1;
}

void rcc_host_ranks(const struct ringcc_comm *comm, int rank, char *buf,
                    size_t len) {
  uint64_t host = comm->peers[rank].host_hash;
  int n = 0, off;
  for (int q = 0; q < comm->nranks; q++)
    n += comm->peers[q].host_hash == host;
  off = snprintf(buf, len, "rank%s", n == 1 ? "" : "s");
  for (int q = 0, k = 0; q < comm->nranks && off > 0 && (size_t)off < len; q++)
    if (comm->peers[q].host_hash == host) {
      if (k == 8) {
        snprintf(buf + off, len - (size_t)off, ", ...");
        break;
      }
      off += snprintf(buf + off, len - (size_t)off, "%s %d", k++ ? "," : "",
                      q);
    }
}

int rcc_dead_describe(const struct ringcc_comm *comm, char *buf, size_t len) {
  int told_by;
  int dead = rcc_dead_rank(comm, &told_by);
  if (dead < 0)
    return -1;
  const struct rcc_peer_info *q = &comm->peers[dead];
  if (rcc_dead_unreachable(comm)) {
    /* A host that vanished takes all of its ranks: name them. */
    char ranks[128];
    rcc_host_ranks(comm, dead, ranks, sizeof(ranks));
    snprintf(buf, len, "rank %d (on host %s, which holds %s) is unreachable: "
             "its host stopped acknowledging (down, or its network cut)",
             dead, q->hostname, ranks);
  } else {
    snprintf(buf, len, "rank %d (pid %d on host %s) died", dead, (int)q->pid,
             q->hostname);
  }
  if (told_by != comm->rank) {
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, " (rank %d passed the news on)", told_by);
  }
  return dead;
}
