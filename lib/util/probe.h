/*
 * probe.h - a second, independent look at a peer's host whose link went
 * silent: a fresh TCP connect to it (probe.c). A live host's kernel answers
 * a SYN (with SYN-ACK where something listens, with RST where nothing
 * does) even when the process behind the silent link is stopped, starved
 * or swapping; a host that lost power or its network answers nothing.
 */
#ifndef RCC_PROBE_H
#define RCC_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum rcc_probe_verdict {
  RCC_PROBE_NONE = 0,  /* no probe made yet, or one still waiting */
  RCC_PROBE_ANSWERED,  /* the host's kernel answered: it is up */
  RCC_PROBE_SILENT,    /* no answer within the probe's time, or no route */
};

struct rcc_probe {
  int fd;                 /* the connecting socket, or -1 */
  int64_t started_ns;     /* when the connect went out */
  int64_t verdict_ns;     /* when the verdict came */
  int verdict;            /* enum rcc_probe_verdict */
  char why[96];           /* "connection refused by 1.2.3.4:5" ... */
  int64_t answered_ns;    /* the last probe the host answered: its start */
  char answered_why[96];  /* and its why */
};

void rcc_probe_init(struct rcc_probe *p);
/* Starts a non-blocking connect to addr (the port need not be listening);
 * a probe in flight is dropped first. 0, or -1 (this rank's own failure:
 * no socket; the probe then has no verdict). */
int rcc_probe_start(struct rcc_probe *p, const struct sockaddr_storage *addr,
                    socklen_t len);
/* Looks at a probe in flight without waiting: records the verdict when the
 * host answered (or a route error came), or SILENT once timeout_ns passed
 * since it started. Returns the verdict (RCC_PROBE_NONE while waiting). */
int rcc_probe_poll(struct rcc_probe *p, int64_t now_ns, int64_t timeout_ns);
/* The second look at the peer of a connected socket fd whose link has been
 * silent since silent_since: a fresh connect to the peer's address, made
 * once the silence began and again every every_ns, each waiting wait_ns
 * for an answer. A peer on this host (the same address at both ends; *local
 * caches it: 0 not looked yet, 1 yes, -1 no) is answered at once: its
 * kernel is this one, so its link cannot be cut. Returns the verdict of the
 * last probe started within this silence that has one (p->why says why),
 * or RCC_PROBE_NONE: none yet. */
int rcc_probe_peer(struct rcc_probe *p, int fd, int *local, int64_t now_ns,
                   int64_t silent_since, int64_t wait_ns, int64_t every_ns);
/* 1 when both ends of the connected socket fd have the same address (the
 * peer runs on this host: loopback, or this host's own address), else 0. */
int rcc_probe_peer_local(int fd);
/* Closes a probe in flight; the last verdict stays. */
void rcc_probe_stop(struct rcc_probe *p);

#endif /* RCC_PROBE_H */
