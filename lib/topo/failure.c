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
 *                  and reads it in the FIFO from this rank);
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

#include "board.h"
#include "comm.h"
#include "error.h"
#include "failure.h"
#include "log.h"

static void wake(uint32_t *word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Marks one host FIFO and wakes whoever sleeps on it (either end). */
static void poison(struct rcc_conn *c, int dead, struct rcc_conn **engine) {
  if (c == NULL || c->fifo == NULL)
    return;
  if (c->ops != NULL) { /* an engine's FIFO: the engine tells the peer */
    *engine = c;
    return;
  }
  __atomic_store_n(&c->fifo->dead, (uint32_t)dead + 1, __ATOMIC_RELEASE);
  wake(&c->fifo->tail);
  wake(&c->fifo->head);
}

int rcc_peer_alive(const struct ringcc_comm *comm, int peer) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  const struct rcc_peer_info *q = &comm->peers[peer];
  char path[64], stat[256];

  if (q->pid_space != me->pid_space || q->pid == me->pid)
    return 1; /* another host, or a thread of this process */
  if (kill(q->pid, 0) != 0 && errno == ESRCH)
    return 0;
  /* A killed child its parent has not reaped yet is a zombie: gone too. */
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)q->pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 1;
  size_t n = fread(stat, 1, sizeof(stat) - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *paren = strrchr(stat, ')');
  return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

int rcc_dead_rank(const struct ringcc_comm *comm, int *told_by) {
  uint64_t d = __atomic_load_n(&comm->dead, __ATOMIC_ACQUIRE);
  if (d == 0)
    return -1;
  if (told_by != NULL)
    *told_by = (int)(d >> 32) - 1;
  return (int)(uint32_t)d - 1;
}

void rcc_peer_dead(struct ringcc_comm *comm, int dead, int told_by) {
  if (dead < 0 || dead >= comm->nranks || dead == comm->rank)
    return;
  uint64_t want = (uint64_t)(uint32_t)(told_by + 1) << 32 | (uint32_t)(dead + 1);
  uint64_t have = __atomic_load_n(&comm->dead, __ATOMIC_ACQUIRE);
  for (;;) {
    /* First wins, except that a rank we believed dead which tells us about
     * another was alive when it learned it: its word is the better one. */
    if (have != 0 && (int)(uint32_t)have - 1 != told_by)
      return;
    if (have == want)
      return;
    if (__atomic_compare_exchange_n(&comm->dead, &have, want, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      break;
  }
  const struct rcc_peer_info *q = &comm->peers[dead];
  if (told_by == comm->rank)
    RCC_INFO(comm->rank, "rank %d (pid %d on host %s) died; telling the "
                         "peers", dead, (int)q->pid, q->hostname);
  else
    RCC_INFO(comm->rank, "rank %d told this rank that rank %d (pid %d on host "
                         "%s) died; passing it on", told_by, dead, (int)q->pid,
             q->hostname);
  struct rcc_conn *engine = NULL;
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++)
      for (int p = 0; p < comm->nranks; p++) {
        if (comm->send_conn[k] != NULL)
          poison(rcc_send_conn(comm, k, ch, p), dead, &engine);
        if (comm->recv_conn[k] != NULL)
          poison(rcc_recv_conn(comm, k, ch, p), dead, &engine);
      }
  if (engine != NULL) /* one engine serves every network edge */
    engine->ops->notify(engine);
  rcc_board_wake(comm); /* peers asleep on this rank's one-shot board */
  rcc_comm_tell_kernels(comm, RINGCC_ERR_PEER_FAILED); /* device waits too */
}

int rcc_check_peers(struct ringcc_comm *comm) {
  const struct rcc_peer_info *me = &comm->peers[comm->rank];
  for (int p = 0; p < comm->nranks && rcc_dead_rank(comm, NULL) < 0; p++) {
    const struct rcc_peer_info *q = &comm->peers[p];
    if (p == comm->rank || q->pid_space != me->pid_space || q->pid == me->pid)
      continue; /* another host (its engine tells), or a thread of ours */
    int told = rcc_peer_poisoned(comm, p); /* p knew of a dead rank */
    if (told >= 0)
      rcc_peer_dead(comm, told, p);
    else if (!rcc_peer_alive(comm, p))
      rcc_peer_dead(comm, p, comm->rank);
  }
  return rcc_dead_rank(comm, NULL);
}

int rcc_peer_poisoned(const struct ringcc_comm *comm, int peer) {
  for (int k = 0; k < comm->nkinds && k < RCC_CONN_DEVICE; k++)
    for (int ch = 0; ch < comm->kind_channels[k]; ch++) {
      if (comm->send_conn[k] == NULL || comm->recv_conn[k] == NULL)
        continue;
      const struct rcc_conn *both[2] = {rcc_send_conn(comm, k, ch, peer),
                                        rcc_recv_conn(comm, k, ch, peer)};
      for (int i = 0; i < 2; i++) {
        const struct rcc_conn *c = both[i];
        if (c->fifo == NULL || c->ops != NULL)
          continue;
        uint32_t d = __atomic_load_n(&c->fifo->dead, __ATOMIC_ACQUIRE);
        if (d != 0)
          return (int)d - 1;
      }
    }
  return -1;
}

int rcc_dead_describe(const struct ringcc_comm *comm, char *buf, size_t len) {
  int told_by;
  int dead = rcc_dead_rank(comm, &told_by);
  if (dead < 0)
    return -1;
  const struct rcc_peer_info *q = &comm->peers[dead];
  if (told_by == comm->rank)
    snprintf(buf, len, "rank %d (pid %d on host %s) died", dead, (int)q->pid,
             q->hostname);
  else
    snprintf(buf, len, "rank %d (pid %d on host %s) died (rank %d passed the "
             "news on)", dead, (int)q->pid, q->hostname, told_by);
  return dead;
}
