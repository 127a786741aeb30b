/*
 * net_socket_env.c - the socket plugin's settings read from the environment
 * (each read here only), and the keepalive timed from the link timeout.
 * net_socket.c reads them once per process (socket_init) and the socket
 * count again at every connect.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "env.h"
#include "error.h"
#include "net_socket_env.h"
#include "probe.h"

#define LINK_TIMEOUT_DEFAULT_MS 6000
#define NOTSENT_DEFAULT_BYTES 65536
#define NOTSENT_MAX_BYTES (1 << 30)

/* RINGCC_SOCKET_LINK_TIMEOUT_MS: how long a peer may leave this rank's data
 * or keepalive probes unacknowledged before its link counts as down. Read
 * here only, once per process. */
ringcc_result_t rcc_net_socket_link_timeout(int64_t *ms, char *err,
                                            size_t errlen) {
  const char *v = rcc_getenv("RINGCC_SOCKET_LINK_TIMEOUT_MS");
  *ms = LINK_TIMEOUT_DEFAULT_MS;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (rcc_parse_decimal(v, ms) != 0 || *ms < 0 ||
      (*ms > 0 && *ms < 2000) || *ms > 3600000)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: RINGCC_SOCKET_LINK_TIMEOUT_MS=\"%s\" is not "
                    "0 (off) or a number of milliseconds in 2000..3600000", v);
  return RINGCC_SUCCESS;
}

/* RINGCC_SOCKET_NOTSENT_BYTES: the most bytes a data socket holds that the
 * kernel has not sent yet (TCP_NOTSENT_LOWAT). Without a bound a sender
 * copies far ahead of the peer's receive window into its socket, and the
 * receiver's own reads then transmit that backlog, in the softirq of the
 * window update they send (loopback and every peer on one host: the sender's
 * protocol work lands on the receiver's CPU, docs/performance.md). With it
 * the sender's send() stops at the bound and the sender, woken when the
 * window opens, copies and transmits its bytes itself. Read here only, once
 * per process. */
ringcc_result_t rcc_net_socket_notsent(int *bytes, char *err, size_t errlen) {
  const char *v = rcc_getenv("RINGCC_SOCKET_NOTSENT_BYTES");
  int64_t x;
  *bytes = NOTSENT_DEFAULT_BYTES;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (rcc_parse_decimal(v, &x) != 0 || x < 0 || (x > 0 && x < 4096) ||
      x > NOTSENT_MAX_BYTES)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: RINGCC_SOCKET_NOTSENT_BYTES=\"%s\" is not 0 "
                    "(the kernel's bound, net.ipv4.tcp_notsent_lowat) or a "
                    "number of bytes in 4096..%d", v, NOTSENT_MAX_BYTES);
  *bytes = (int)x;
  return RINGCC_SUCCESS;
}

void rcc_net_socket_bound_unsent(int fd, int bytes) {
  if (fd >= 0)
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &bytes,
                     sizeof(bytes));
}

/* TCP_KEEPCNT's maximum: with T = 6 s the kernel gives up on an idle link
 * after 2 + 127 s, long after alive() declared a host that is really gone. */
#define KEEPALIVE_PROBES 127
#ifndef TCP_RTO_MAX_MS
#define TCP_RTO_MAX_MS 44 /* Linux 6.15 */
#endif

/* Keepalive on a connection's socket, timed from the link timeout T: first
 * probe after T/3 idle, then every T/6; the kernel closes the socket only
 * after KEEPALIVE_PROBES of them went unanswered (the verdict that counts
 * is alive()'s, confirmed by a fresh connect: net_socket.c). The
 * retransmission timeout is
 * capped at T/4 where the kernel allows it (TCP_RTO_MAX_MS, Linux 6.15), so
 * that retransmissions and window probes keep asking while a link is down
 * for a moment, and resume soon after it is back. */
void rcc_net_socket_keepalive(int fd, int64_t t) {
  if (t <= 0 || fd < 0 || rcc_probe_peer_local(fd))
    return; /* a peer on this host: its death closes the socket */
  int one = 1, idle = (int)(t / 3000), intvl = (int)(t / 6000);
  idle = idle < 1 ? 1 : idle;
  intvl = intvl < 1 ? 1 : intvl;
  int cnt = KEEPALIVE_PROBES;
  int rto_max = (int)(t / 4);
  rto_max = rto_max < 1000 ? 1000 : rto_max > 120000 ? 120000 : rto_max;
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  (void)setsockopt(fd, IPPROTO_TCP, TCP_RTO_MAX_MS, &rto_max, sizeof(rto_max));
}

/* RINGCC_NSOCKS_PERPEER is read here only, at init (for the log) and at every
 * connect (the acceptor learns N from the preamble). */
ringcc_result_t rcc_net_socket_count(int *n, char *err, size_t errlen) {
  const char *v = rcc_getenv("RINGCC_NSOCKS_PERPEER");
  int64_t x;
  *n = NSOCKS_DEFAULT;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (rcc_parse_decimal(v, &x) != 0 || x < 1 || x > NSOCKS_MAX)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: RINGCC_NSOCKS_PERPEER=\"%s\" is not a "
                    "number in 1..%d", v, NSOCKS_MAX);
  *n = (int)x;
  return RINGCC_SUCCESS;
}

/* RINGCC_SOCKET_FAMILY (NCCL_SOCKET_FAMILY's values): AF_INET or AF_INET6
 * restricts the interface choice to that family. Read here only. */
ringcc_result_t rcc_net_socket_family(int *family, char *err, size_t errlen) {
  const char *v = rcc_getenv("RINGCC_SOCKET_FAMILY");
  *family = AF_UNSPEC;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (strcmp(v, "AF_INET") == 0)
    *family = AF_INET;
  else if (strcmp(v, "AF_INET6") == 0)
    *family = AF_INET6;
  else
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/Socket: RINGCC_SOCKET_FAMILY=\"%s\" is neither "
                    "AF_INET nor AF_INET6", v);
  return RINGCC_SUCCESS;
}

/* "192.0.2.2" or "fd00::2": the address without its port. */
const char *rcc_net_socket_host(const struct sockaddr_storage *a, char *buf,
                                size_t len) {
  const void *raw = a->ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
  if (inet_ntop(a->ss_family, raw, buf, (socklen_t)len) == NULL)
    snprintf(buf, len, "?");
  return buf;
}

