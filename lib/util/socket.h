/*
 * socket.h - TCP sockets for the bootstrap and the socket network plugin:
 * address choice (RINGCC_SOCKET_IFNAME syntax), listen, accept, connect with
 * retries, and blocking transfers bounded by a deadline.
 */
#ifndef RCC_SOCKET_H
#define RCC_SOCKET_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct sockaddr_storage;
/* Picks the address to listen on / advertise, following RINGCC_SOCKET_IFNAME
 * syntax (NCCL's): "eth,ib" prefixes, "^docker" excludes, "=eth0" exact.
 * spec NULL or "": the first non-loopback interface that is up, else
 * loopback. Writes the interface name to ifname[ifname_len]. */
ringcc_result_t rcc_socket_pick_address(const char *spec,
                                        struct sockaddr_storage *addr,
                                        char *ifname, size_t ifname_len,
                                        char *err, size_t errlen);
/* The same choice among addresses of one family only (AF_INET, AF_INET6;
 * AF_UNSPEC: exactly rcc_socket_pick_address), e.g. for NCCL's
 * NCCL_SOCKET_FAMILY: "lo" with AF_INET6 gives ::1 instead of 127.0.0.1. */
ringcc_result_t rcc_socket_pick_address_family(const char *spec, int family,
                                               struct sockaddr_storage *addr,
                                               char *ifname, size_t ifname_len,
                                               char *err, size_t errlen);
/* "host:port", "[v6addr]:port" or "v6addr:port" -> address (names resolved
 * with getaddrinfo; port 1..65535). */
ringcc_result_t rcc_socket_parse_host_port(const char *host_port,
                                           struct sockaddr_storage *addr,
                                           char *err, size_t errlen);
/* Formats an address as "1.2.3.4:5" or "[::1]:5". */
const char *rcc_socket_addr_str(const struct sockaddr_storage *addr,
                                char *buf, size_t len);
/* The port of an IPv4/IPv6 address (0 for other families), and setting it. */
int rcc_socket_addr_port(const struct sockaddr_storage *addr);
void rcc_socket_addr_set_port(struct sockaddr_storage *addr, int port);
/* Every socket below is nonblocking and close-on-exec, TCP_NODELAY once
 * connected, and every error message names the address and the OS reason.
 * Listens on addr (port 0: an ephemeral port) with SO_REUSEADDR; *bound (may
 * be NULL) gets the address actually bound, port included. */
ringcc_result_t rcc_socket_listen(const struct sockaddr_storage *addr,
                                  int *fd, struct sockaddr_storage *bound,
                                  char *err, size_t errlen);
/* Takes over a listening TCP socket made by another process (an inherited
 * descriptor): checks that fd is one, bound to port (0: any), and makes it
 * nonblocking and close-on-exec; *bound (may be NULL) gets its address. */
ringcc_result_t rcc_socket_adopt_listener(int fd, int port,
                                          struct sockaddr_storage *bound,
                                          char *err, size_t errlen);
/* Receives a listening socket that a launcher offers on the unix socket
 * named name ("@..." for the abstract namespace): *fd, close-on-exec. The
 * peer must run as this user. RINGCC_ERR_TIMEOUT at deadline_ns. */
ringcc_result_t rcc_socket_fetch_listener(const char *name,
                                          int64_t deadline_ns, int *fd,
                                          char *err, size_t errlen);
/* Takes one pending connection; *fd == -1 (and success) when none is. */
ringcc_result_t rcc_socket_accept(int listen_fd, int *fd,
                                  struct sockaddr_storage *peer, char *err,
                                  size_t errlen);
/* Connects, retrying refused/unreachable/timed-out attempts with a short
 * backoff until deadline_ns (the peer may not listen yet); then
 * RINGCC_ERR_TIMEOUT ("connection to 1.2.3.4:5 refused (...)"). */
ringcc_result_t rcc_socket_connect(const struct sockaddr_storage *addr,
                                   int64_t deadline_ns, int *fd, char *err,
                                   size_t errlen);
/* The same, with *last_errno the errno of the last attempt where it fails
 * (ECONNREFUSED: the host answered that nothing listens there; ETIMEDOUT,
 * EHOSTUNREACH, ...: no answer), 0 where it succeeds. */
ringcc_result_t rcc_socket_connect_errno(const struct sockaddr_storage *addr,
                                         int64_t deadline_ns, int *fd,
                                         int *last_errno, char *err,
                                         size_t errlen);
ringcc_result_t rcc_socket_set_nodelay(int fd, char *err, size_t errlen);
/* Sends slen bytes on send_fd while receiving rlen bytes on recv_fd, both at
 * once (no deadlock when two peers exchange large messages); a negative fd
 * skips that side. RINGCC_ERR_TIMEOUT at deadline_ns; RINGCC_ERR_PEER_FAILED
 * when the peer closed or reset the connection; else RINGCC_ERR_NETWORK.
 * *failed_recv (may be NULL) says which side failed. */
ringcc_result_t rcc_socket_sendrecv(int send_fd, const void *sbuf, size_t slen,
                                    int recv_fd, void *rbuf, size_t rlen,
                                    int64_t deadline_ns, int *failed_recv,
                                    char *err, size_t errlen);
ringcc_result_t rcc_socket_send_all(int fd, const void *buf, size_t len,
                                    int64_t deadline_ns, char *err,
                                    size_t errlen);
ringcc_result_t rcc_socket_recv_all(int fd, void *buf, size_t len,
                                    int64_t deadline_ns, char *err,
                                    size_t errlen);
/* A poll() timeout in ms until deadline_ns: rounded up, at most 60000 (so
 * INT64_MAX, "no deadline", works; callers loop). */
int rcc_socket_poll_ms(int64_t deadline_ns);

/* Raises the soft open-file limit (RLIMIT_NOFILE) to want descriptors,
 * within the hard limit, where it is lower; logs it at INFO with why (what
 * needs them). */
void rcc_socket_raise_fd_limit(uint64_t want, const char *why);

/* Closing a TCP connection so that neither end stays in TIME_WAIT (which
 * holds its port for a minute: thousands of communicators made and
 * destroyed in a row used up the ephemeral ports, and then every listen on
 * port 0 failed). TIME_WAIT is kept by the end that sends the first FIN and
 * then receives the other's FIN; an end that receives a reset instead keeps
 * nothing. So each connection has a first closer and a second closer,
 * fixed by role (the end that connected closes first): the first closes
 * as usual (FIN); the second waits up to wait_ms for that FIN, and having
 * seen it (every byte of the peer's is in: nothing can be lost), closes
 * with SO_LINGER 0, a reset, which also ends the first closer's
 * FIN_WAIT_2 without TIME_WAIT. A peer that does not close within wait_ms
 * gets an ordinary close (FIN); after such a wait the calls of this thread
 * do not wait again for a second, so that a destroy with many connections
 * to a slow peer waits once. Only the process that opened fd may call it
 * (a forked child must only close()). */
void rcc_socket_close_second(int fd, int wait_ms);

#endif /* RCC_SOCKET_H */
