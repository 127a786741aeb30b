/*
 * net_socket_env.h - the socket plugin's settings read from the
 * environment, and the keepalive they time (net_socket_env.c).
 */
#ifndef RCC_NET_SOCKET_ENV_H
#define RCC_NET_SOCKET_ENV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ringcc.h"

#define NSOCKS_DEFAULT 2 /* sockets per connection */
#define NSOCKS_MAX 16

/* RINGCC_SOCKET_LINK_TIMEOUT_MS (default 6000; 0: off). */
ringcc_result_t rcc_net_socket_link_timeout(int64_t *ms, char *err,
                                            size_t errlen);
/* RINGCC_NSOCKS_PERPEER (default NSOCKS_DEFAULT). */
ringcc_result_t rcc_net_socket_count(int *n, char *err, size_t errlen);
/* RINGCC_SOCKET_FAMILY: AF_INET, AF_INET6 or AF_UNSPEC where unset. */
ringcc_result_t rcc_net_socket_family(int *family, char *err, size_t errlen);
/* RINGCC_SOCKET_NOTSENT_BYTES (default 64 KiB; 0: the kernel's bound). */
ringcc_result_t rcc_net_socket_notsent(int *bytes, char *err, size_t errlen);
/* TCP_NOTSENT_LOWAT on a connection's socket (0: the kernel's bound). */
void rcc_net_socket_bound_unsent(int fd, int bytes);
/* Keepalive and the retransmission cap on a connection's socket, timed from
 * the link timeout t (ms; 0: none). */
void rcc_net_socket_keepalive(int fd, int64_t t);
/* The address of a without its port, in buf. */
const char *rcc_net_socket_host(const struct sockaddr_storage *a, char *buf,
                                size_t len);

#endif /* RCC_NET_SOCKET_ENV_H */
