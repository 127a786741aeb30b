/*
 * gate.c - the listener gate (gate.h): connections that have not proven
 * themselves, held, read, dropped or handed out. The rules are in gate.h.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "gate.h"
#include "log.h"
#include "socket.h"

#define ACCEPTS_PER_WAKE 64 /* then the held ones are read again */

struct rcc_gate {
  int listen_fd;
  struct rcc_gate_config cfg;
  char what[128];
  int nheld;
  struct rcc_gate_conn *held; /* cfg.max_held + 1 */
  unsigned char *states;      /* as many times cfg.state_bytes */
  struct pollfd *pfds;        /* cfg.max_held + 3 */
  int64_t accept_at;  /* out of descriptors: accept() again from then */
  int out_of_fds;     /* accept() ran out of descriptors (warned once) */
  int refused;        /* false proofs seen (the first is a WARN) */
};

struct rcc_gate *rcc_gate_new(int listen_fd,
                              const struct rcc_gate_config *cfg) {
  struct rcc_gate *g = calloc(1, sizeof(*g));
  if (g == NULL || cfg->max_held < 1)
    return free(g), NULL;
  g->listen_fd = listen_fd;
  g->cfg = *cfg;
  snprintf(g->what, sizeof(g->what), "%s", cfg->what ? cfg->what : "?");
  g->cfg.what = g->what;
  size_t n = (size_t)cfg->max_held + 1; /* + 1: see accept_some */
  g->held = calloc(n, sizeof(*g->held));
  g->states = calloc(n, cfg->state_bytes ? cfg->state_bytes : 1);
  g->pfds = calloc(n + 2, sizeof(*g->pfds));
  if (g->held == NULL || g->states == NULL || g->pfds == NULL) {
    rcc_gate_free(g);
    return NULL;
  }
  return g;
}

void rcc_gate_free(struct rcc_gate *g) {
  if (g == NULL)
    return;
  if (g->refused > 1)
    RCC_WARN(g->cfg.log_rank, "%s refused %d connections in all that did "
             "not prove themselves", g->what, g->refused);
  for (int i = 0; i < g->nheld; i++)
    close(g->held[i].fd);
  if (g->states != NULL) /* a check's state may hold secrets (nonces) */
    memset(g->states, 0,
           ((size_t)g->cfg.max_held + 1) * g->cfg.state_bytes);
  free(g->held);
  free(g->states);
  free(g->pfds);
  free(g);
}

int rcc_gate_held(const struct rcc_gate *g) { return g->nheld; }

int rcc_gate_fds(const struct rcc_gate *g, int *fds, int max) {
  int n = 0;
  for (int k = 0; k < g->nheld; k++)
    if (g->held[k].proven)
      return -1; /* read already: handed out by the next rcc_gate_next */
  if (n < max)
    fds[n++] = g->listen_fd;
  for (int k = 0; k < g->nheld && n < max; k++)
    fds[n++] = g->held[k].fd;
  return n;
}

static void *state_of(struct rcc_gate *g, int i) {
  return g->states + (size_t)i * g->cfg.state_bytes;
}

/* Held connection i leaves the gate; the last one takes its place. */
static void remove_at(struct rcc_gate *g, int i) {
  int last = --g->nheld;
  if (i != last) {
    g->held[i] = g->held[last];
    memcpy(state_of(g, i), state_of(g, last), g->cfg.state_bytes);
    g->held[i].state = state_of(g, i);
  }
  memset(state_of(g, last), 0, g->cfg.state_bytes);
}

/* Closes held connection i; the last one takes its place. */
static void drop(struct rcc_gate *g, int i, int warn, const char *why) {
  struct rcc_gate_conn *c = &g->held[i];
  if (warn && g->refused++ == 0)
    RCC_WARN(g->cfg.log_rank, "%s refused a connection from %s: %s (later "
             "ones are logged at INFO)", g->what, c->peer_str, why);
  else
    RCC_INFO(g->cfg.log_rank, "%s dropped a connection from %s: %s",
             g->what, c->peer_str, why);
  close(c->fd);
  remove_at(g, i);
}

/* Runs the check on held connection i: 1 when it was dropped (i then holds
 * another connection), else 0 (proven or started noted). */
static int check(struct rcc_gate *g, int i) {
  struct rcc_gate_conn *c = &g->held[i];
  char why[256] = "";
  if (c->proven)
    return 0;
  enum rcc_gate_step s = g->cfg.check(g->cfg.arg, c, why, sizeof(why));
  switch (s) {
  case RCC_GATE_STARTED:
    c->started = 1;
    return 0;
  case RCC_GATE_PROVEN:
    c->proven = 1;
    return 0;
  case RCC_GATE_DROP:
  case RCC_GATE_REFUSE:
    drop(g, i, s == RCC_GATE_REFUSE, why[0] ? why : "it broke the protocol");
    return 1;
  default:
    return 0;
  }
}

/* The oldest held connection but skip that is neither proven nor started,
 * read once more first (its proof may just have come); -1 when there is
 * none. */
static int oldest_stranger(struct rcc_gate *g, int skip) {
  for (;;) {
    int oldest = -1;
    for (int i = 0; i < g->nheld; i++) {
      const struct rcc_gate_conn *c = &g->held[i];
      if (i != skip && !c->proven && !c->started &&
          (oldest < 0 || c->since_ns < g->held[oldest].since_ns))
        oldest = i;
    }
    if (oldest < 0)
      return -1;
    if (check(g, oldest) == 1) { /* it said something wrong: gone */
      if (skip == g->nheld) /* the last one moved into its place */
        skip = oldest;
      continue;
    }
    if (!g->held[oldest].proven && !g->held[oldest].started)
      return oldest;
  }
}

/* Whether a new connection can be taken: fewer than max_held held, or one
 * that is neither proven nor started (it will make room). */
static int room(const struct rcc_gate *g) {
  if (g->nheld < g->cfg.max_held)
    return 1;
  if (g->nheld > g->cfg.max_held)
    return 0;
  for (int k = 0; k < g->nheld; k++)
    if (!g->held[k].started && !g->held[k].proven)
      return 1;
  return 0;
}

void rcc_gate_make_room(struct rcc_gate *g, int n) {
  for (int k = 0; k < n && g->out_of_fds; k++) {
    int i = oldest_stranger(g, -1);
    if (i < 0)
      return;
    drop(g, i, 0, "out of descriptors: made room for a connection that "
                  "proved itself");
  }
}

/* Takes what the kernel has queued while there is room. Beyond max_held,
 * the oldest connection that is neither proven nor started goes; where all
 * others are started, the new one is held too (max_held + 1) and nothing
 * more is accepted until one leaves. */
static ringcc_result_t accept_some(struct rcc_gate *g, char *err,
                                   size_t errlen) {
  for (int k = 0; k < ACCEPTS_PER_WAKE && room(g); k++) {
    int fd;
    struct sockaddr_storage peer;
    char msg[RCC_ERRLEN];
    ringcc_result_t r = rcc_socket_accept(g->listen_fd, &fd, &peer, msg,
                                          sizeof(msg));
    if (r != RINGCC_SUCCESS) {
      int e = errno;
      if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM)
        return rcc_errf(err, errlen, r, "%s: %s", g->what, msg);
      int oldest = oldest_stranger(g, -1);
      if (!g->out_of_fds)
        RCC_WARN(g->cfg.log_rank, "%s: %s; %s and accepting again in %lld ms",
                 g->what, msg, oldest >= 0 ? "dropping the oldest connection "
                                             "that has not proven itself"
                                           : "waiting",
                 (long long)(g->cfg.backoff_ns / 1000000));
      g->out_of_fds = 1;
      if (oldest >= 0)
        drop(g, oldest, 0, "out of descriptors: made room");
      g->accept_at = rcc_now_ns() + g->cfg.backoff_ns;
      return RINGCC_SUCCESS;
    }
    if (fd < 0)
      return RINGCC_SUCCESS;
    int i = g->nheld++;
    struct rcc_gate_conn *c = &g->held[i];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->since_ns = rcc_now_ns();
    c->peer = peer;
    c->state = state_of(g, i);
    memset(c->state, 0, g->cfg.state_bytes);
    rcc_socket_addr_str(&peer, c->peer_str, sizeof(c->peer_str));
    /* A real peer's first message comes with its connect: read it now, so
     * that a real one is known before anything is dropped for room. */
    if (check(g, i) == 0 && g->nheld > g->cfg.max_held) {
      int oldest = oldest_stranger(g, i);
      if (oldest >= 0)
        drop(g, oldest, 0, "too many connections that have not proven "
                           "themselves (the oldest that has not started "
                           "goes)");
    }
  }
  return RINGCC_SUCCESS;
}

/* Hands out held connection i (proven). */
static void hand_out(struct rcc_gate *g, int i, struct rcc_gate_passed *out,
                     void *state_out) {
  struct rcc_gate_conn *c = &g->held[i];
  out->fd = c->fd;
  out->peer = c->peer;
  snprintf(out->peer_str, sizeof(out->peer_str), "%s", c->peer_str);
  if (state_out != NULL)
    memcpy(state_out, c->state, g->cfg.state_bytes);
  remove_at(g, i);
}

/* Reads every held connection, then drops the overdue: 1 and i when one
 * proved itself. */
static int read_all(struct rcc_gate *g, int *proven) {
  for (int i = 0; i < g->nheld; i++) {
    if (check(g, i) == 1) {
      i--;
      continue;
    }
    if (g->held[i].proven) {
      *proven = i;
      return 1;
    }
  }
  int64_t now = rcc_now_ns();
  for (int i = g->nheld - 1; i >= 0; i--)
    if (now - g->held[i].since_ns >= g->cfg.expire_ns) {
      char why[96];
      snprintf(why, sizeof(why), "not proven within %lld ms of its connect",
               (long long)(g->cfg.expire_ns / 1000000));
      drop(g, i, 0, why);
    }
  return 0;
}

static int ms_until(int64_t t, int64_t now) {
  int64_t ms = (t - now + 999999) / 1000000;
  return ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms;
}

ringcc_result_t rcc_gate_next(struct rcc_gate *g, int64_t deadline_ns,
                              int extra_fd, struct rcc_gate_passed *out,
                              void *state_out, char *err, size_t errlen) {
  out->fd = -1;
  for (;;) {
    int i;
    if (read_all(g, &i)) {
      hand_out(g, i, out, state_out);
      return RINGCC_SUCCESS;
    }
    int64_t now = rcc_now_ns();
    if (now >= deadline_ns)
      return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                      "%s: no connection proved itself before the deadline "
                      "(%d held that had not)", g->what, g->nheld);
    int timeout = ms_until(deadline_ns, now), n = 0;
    /* Full of started connections: new ones wait in the kernel's queue. */
    int accepting = now >= g->accept_at && room(g);
    if (now < g->accept_at && ms_until(g->accept_at, now) < timeout)
      timeout = ms_until(g->accept_at, now);
    g->pfds[n++] = (struct pollfd){.fd = accepting ? g->listen_fd : -1,
                                   .events = POLLIN};
    for (int k = 0; k < g->nheld; k++) {
      int left = ms_until(g->held[k].since_ns + g->cfg.expire_ns, now);
      if (left < timeout)
        timeout = left;
      g->pfds[n++] = (struct pollfd){.fd = g->held[k].fd, .events = POLLIN};
    }
    int extra = n;
    g->pfds[n++] = (struct pollfd){.fd = extra_fd, .events = POLLIN};
    int ready = poll(g->pfds, (nfds_t)n, timeout);
    if (ready > 0 && extra_fd >= 0 && g->pfds[extra].revents != 0)
      return RINGCC_SUCCESS; /* out->fd == -1 */
    if (ready > 0 && (g->pfds[0].revents & POLLIN)) {
      ringcc_result_t r = accept_some(g, err, errlen);
      if (r != RINGCC_SUCCESS)
        return r;
    }
  }
}

int rcc_gate_dropped_unread(int fd) {
  char byte;
  ssize_t n;
  do
    n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}
