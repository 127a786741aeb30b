/*
 * probe.c - a fresh TCP connect to a peer's host, to tell a host that is
 * gone from a peer that is only slow (probe.h). The connect is closed with
 * a reset as soon as it is answered, so nothing is left in TIME_WAIT and a
 * listener that accepted it sees a connection that is gone at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "clock.h"
#include "probe.h"

void rcc_probe_init(struct rcc_probe *p) {
  memset(p, 0, sizeof(*p));
  p->fd = -1;
}

void rcc_probe_stop(struct rcc_probe *p) {
  if (p->fd >= 0) {
    struct linger l = {.l_onoff = 1, .l_linger = 0}; /* RST, no TIME_WAIT */
    (void)setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(p->fd);
  }
  p->fd = -1;
}

static void verdict(struct rcc_probe *p, int v, int64_t now_ns,
                    const char *why) {
  p->verdict = v;
  p->verdict_ns = now_ns;
  snprintf(p->why, sizeof(p->why), "%s", why);
  if (v == RCC_PROBE_ANSWERED) {
    p->answered_ns = p->started_ns;
    snprintf(p->answered_why, sizeof(p->answered_why), "%s", why);
  }
  rcc_probe_stop(p);
}

int rcc_probe_start(struct rcc_probe *p, const struct sockaddr_storage *addr,
                    socklen_t len) {
  rcc_probe_stop(p);
  p->verdict = RCC_PROBE_NONE;
  p->why[0] = '\0';
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  if (fd < 0)
    return -1;
  p->started_ns = rcc_now_ns();
  p->fd = fd;
  if (connect(fd, (const struct sockaddr *)addr, len) == 0)
    verdict(p, RCC_PROBE_ANSWERED, p->started_ns, "a fresh connection to it "
            "was accepted");
  else if (errno == ECONNREFUSED)
    verdict(p, RCC_PROBE_ANSWERED, p->started_ns, "its kernel refused a "
            "fresh connection at once (the host is up)");
  else if (errno != EINPROGRESS) {
    char why[96];
    snprintf(why, sizeof(why), "a fresh connection failed: %s",
             strerror(errno));
    verdict(p, RCC_PROBE_SILENT, p->started_ns, why);
  }
  return 0;
}

int rcc_probe_poll(struct rcc_probe *p, int64_t now_ns, int64_t timeout_ns) {
  if (p->fd < 0)
    return p->verdict;
  struct pollfd pfd = {.fd = p->fd, .events = POLLOUT};
  if (poll(&pfd, 1, 0) > 0) {
    int e = 0;
    socklen_t elen = sizeof(e);
    (void)getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &e, &elen);
    if (e == 0)
      verdict(p, RCC_PROBE_ANSWERED, now_ns, "a fresh connection to it was "
              "accepted (the host is up)");
    else if (e == ECONNREFUSED)
      verdict(p, RCC_PROBE_ANSWERED, now_ns, "its kernel refused a fresh "
              "connection (the host is up)");
    else {
      char why[96];
      snprintf(why, sizeof(why), "a fresh connection to it failed: %s",
               strerror(e));
      verdict(p, RCC_PROBE_SILENT, now_ns, why);
    }
  } else if (now_ns - p->started_ns >= timeout_ns) {
    char why[96];
    snprintf(why, sizeof(why), "a fresh connection to it got no answer in "
             "%.1f s", (double)(now_ns - p->started_ns) / 1e9);
    verdict(p, RCC_PROBE_SILENT, now_ns, why);
  }
  return p->verdict;
}

/* Whether a and b are the same host's address (ports aside). */
static int same_host(const struct sockaddr_storage *a,
                     const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family)
    return 0;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  if (a->ss_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr,
                  sizeof(struct in6_addr)) == 0;
  return 0;
}

int rcc_probe_peer_local(int fd) {
  struct sockaddr_storage peer, me;
  socklen_t pl = sizeof(peer), ml = sizeof(me);
  return getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 &&
         getsockname(fd, (struct sockaddr *)&me, &ml) == 0 &&
         same_host(&peer, &me);
}

int rcc_probe_peer(struct rcc_probe *p, int fd, int *local, int64_t now_ns,
                   int64_t silent_since, int64_t wait_ns, int64_t every_ns) {
  struct sockaddr_storage peer;
  socklen_t pl = sizeof(peer);
  if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
    return RCC_PROBE_NONE;
  if (*local == 0)
    *local = rcc_probe_peer_local(fd) ? 1 : -1;
  if (*local == 1) {
    p->started_ns = p->verdict_ns = now_ns;
    verdict(p, RCC_PROBE_ANSWERED, now_ns, "it runs on this host, whose "
            "kernel holds its sockets open");
    return p->verdict;
  }
  if (p->fd < 0 &&
      (p->started_ns < silent_since || now_ns - p->verdict_ns >= every_ns) &&
      rcc_probe_start(p, &peer, pl) != 0)
    return RCC_PROBE_NONE; /* no socket to spare: no verdict, no decision */
  int v = rcc_probe_poll(p, now_ns, wait_ns);
  if (v == RCC_PROBE_NONE && p->answered_ns >= silent_since) {
    /* a probe again in flight: the last one of this silence answered */
    snprintf(p->why, sizeof(p->why), "%s", p->answered_why);
    return RCC_PROBE_ANSWERED;
  }
  return p->started_ns >= silent_since ? v : RCC_PROBE_NONE;
}
