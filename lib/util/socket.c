/*
 * socket.c - TCP plumbing shared by the bootstrap and the socket transport:
 * choosing the interface to advertise (RINGCC_SOCKET_IFNAME), parsing
 * "host:port", listening, connecting with retries until a deadline, and
 * moving bytes with a deadline.
 *
 * Every socket made here is nonblocking and close-on-exec; waits are done
 * with poll() so that a deadline always holds. Every error message names the
 * address involved and the OS reason.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "socket.h"

#define CONNECT_BACKOFF_MIN_NS (5 * 1000000LL)
#define CONNECT_BACKOFF_MAX_NS (100 * 1000000LL)

/* ---- addresses ----------------------------------------------------------- */

static socklen_t addr_len(const struct sockaddr_storage *addr) {
  if (addr->ss_family == AF_INET)
    return sizeof(struct sockaddr_in);
  if (addr->ss_family == AF_INET6)
    return sizeof(struct sockaddr_in6);
  return 0;
}

int rcc_socket_addr_port(const struct sockaddr_storage *addr) {
  if (addr->ss_family == AF_INET)
    return ntohs(((const struct sockaddr_in *)addr)->sin_port);
  if (addr->ss_family == AF_INET6)
    return ntohs(((const struct sockaddr_in6 *)addr)->sin6_port);
  return 0;
}

void rcc_socket_addr_set_port(struct sockaddr_storage *addr, int port) {
  if (addr->ss_family == AF_INET)
    ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
  else if (addr->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
}

const char *rcc_socket_addr_str(const struct sockaddr_storage *addr,
                                char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (buf == NULL || len == 0)
    return "";
  if (addr == NULL) {
    snprintf(buf, len, "(none)");
  } else if (addr->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    snprintf(buf, len, "%s:%d", host, ntohs(a->sin_port));
  } else if (addr->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
    char scope[IF_NAMESIZE + 2] = "";
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    if (a->sin6_scope_id != 0) {
      char name[IF_NAMESIZE];
      if (if_indextoname(a->sin6_scope_id, name) != NULL)
        snprintf(scope, sizeof(scope), "%%%s", name);
      else
        snprintf(scope, sizeof(scope), "%%%u", (unsigned)a->sin6_scope_id);
    }
    snprintf(buf, len, "[%s%s]:%d", host, scope, ntohs(a->sin6_port));
  } else {
    snprintf(buf, len, "(address family %d)", (int)addr->ss_family);
  }
  return buf;
}

/* The peer of a connected socket, for error messages. */
static const char *peer_str(int fd, char *buf, size_t len) {
  struct sockaddr_storage peer;
  socklen_t plen = sizeof(peer);
  memset(&peer, 0, sizeof(peer));
  if (getpeername(fd, (struct sockaddr *)&peer, &plen) != 0) {
    snprintf(buf, len, "fd %d", fd);
    return buf;
  }
  return rcc_socket_addr_str(&peer, buf, len);
}

/* ---- RINGCC_SOCKET_IFNAME ------------------------------------------------ */

/* Parsed form of "^=eth0,ib": a list of names, exclusion and exactness. */
struct if_spec {
  int exclude;
  int exact;
  int count;
  char names[16][IF_NAMESIZE + 1];
};

static void parse_if_spec(const char *spec, struct if_spec *s) {
  memset(s, 0, sizeof(*s));
  if (spec == NULL)
    return;
  if (*spec == '^') {
    s->exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    s->exact = 1;
    spec++;
  }
  while (*spec != '\0' && s->count < 16) {
    size_t n = strcspn(spec, ",");
    if (n > 0) {
      size_t copy = n < IF_NAMESIZE ? n : IF_NAMESIZE;
      memcpy(s->names[s->count], spec, copy);
      s->names[s->count][copy] = '\0';
      s->count++;
    }
    spec += n;
    if (*spec == ',')
      spec++;
  }
}

static int if_spec_matches(const struct if_spec *s, const char *ifname) {
  int listed = 0;
  for (int i = 0; i < s->count && !listed; i++) {
    if (s->exact)
      listed = strcmp(ifname, s->names[i]) == 0;
    else
      listed = strncmp(ifname, s->names[i], strlen(s->names[i])) == 0;
  }
  return s->exclude ? !listed : listed;
}

/* Lower is better: global IPv4, global IPv6, link-local IPv6, loopback. */
static int addr_preference(const struct sockaddr *sa, unsigned flags) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    int loop = (flags & IFF_LOOPBACK) ||
               (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    return loop ? 3 : 0;
  }
  const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
  if ((flags & IFF_LOOPBACK) || IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
    return 4;
  if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr))
    return 2;
  return 1;
}

/* Appends "name (state, addr)" to the list of interfaces seen, once per
 * interface name and address. */
static void note_interface(char *seen, size_t seen_len,
                           const struct ifaddrs *ifa) {
  char host[INET6_ADDRSTRLEN] = "no IP address";
  char item[IF_NAMESIZE + INET6_ADDRSTRLEN + 32];
  size_t used = strlen(seen);
  if (ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET)
    inet_ntop(AF_INET, &((struct sockaddr_in *)ifa->ifa_addr)->sin_addr, host,
              sizeof(host));
  else if (ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
              host, sizeof(host));
  else
    return; /* link-layer entries: the IP entries describe the interface */
  snprintf(item, sizeof(item), "%s%s (%s, %s)", used ? ", " : "",
           ifa->ifa_name, (ifa->ifa_flags & IFF_UP) ? "up" : "down", host);
  if (used + strlen(item) + 1 < seen_len)
    memcpy(seen + used, item, strlen(item) + 1);
}

/* The best up interface address that matches spec and family (AF_UNSPEC:
 * any), first in getifaddrs order among equals; NULL when none does. */
static const struct ifaddrs *best_match(const struct ifaddrs *list,
                                        const struct if_spec *s, int named,
                                        int family) {
  const struct ifaddrs *best = NULL;
  int best_pref = INT_MAX;
  for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP))
      continue;
    int f = ifa->ifa_addr->sa_family;
    if ((f != AF_INET && f != AF_INET6) ||
        (family != AF_UNSPEC && f != family))
      continue;
    if (named && !if_spec_matches(s, ifa->ifa_name))
      continue;
    int pref = addr_preference(ifa->ifa_addr, ifa->ifa_flags);
    if (pref < best_pref) {
      best_pref = pref;
      best = ifa;
    }
  }
  return best;
}

/* Says why nothing matched, listing the interfaces that exist. */
static ringcc_result_t no_match(const struct ifaddrs *list,
                                const struct if_spec *s, const char *spec,
                                int family, char *err, size_t errlen) {
  const char *fname = family == AF_INET    ? "an IPv4"
                      : family == AF_INET6 ? "an IPv6"
                                           : "an IP";
  const char *other = "";
  char seen[1024] = "";
  int named = spec != NULL && *spec != '\0';
  for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next)
    note_interface(seen, sizeof(seen), ifa);
  if (family != AF_UNSPEC && best_match(list, s, named, AF_UNSPEC) != NULL)
    other = family == AF_INET ? " (only IPv6 addresses match)"
                              : " (only IPv4 addresses match)";
  if (named)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: RINGCC_SOCKET_IFNAME=\"%s\" matches no interface "
                    "that is up and has %s address%s; interfaces seen: %s",
                    spec, fname, other, seen[0] ? seen : "none");
  return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                  "socket: no network interface is up with %s address%s; "
                  "interfaces seen: %s", fname, other,
                  seen[0] ? seen : "none");
}

ringcc_result_t rcc_socket_pick_address_family(const char *spec, int family,
                                               struct sockaddr_storage *addr,
                                               char *ifname, size_t ifname_len,
                                               char *err, size_t errlen) {
  struct ifaddrs *list = NULL;
  struct if_spec s;
  int named = spec != NULL && *spec != '\0';

  if (addr == NULL ||
      (family != AF_UNSPEC && family != AF_INET && family != AF_INET6))
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: pick_address needs an address to fill and "
                    "AF_UNSPEC, AF_INET or AF_INET6 (got family %d)", family);
  if (getifaddrs(&list) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "socket: getifaddrs failed: %s", strerror(errno));
  parse_if_spec(named ? spec : NULL, &s);
  const struct ifaddrs *best = best_match(list, &s, named, family);
  if (best == NULL) {
    ringcc_result_t r = no_match(list, &s, spec, family, err, errlen);
    freeifaddrs(list);
    return r;
  }
  memset(addr, 0, sizeof(*addr));
  memcpy(addr, best->ifa_addr, best->ifa_addr->sa_family == AF_INET
                                   ? sizeof(struct sockaddr_in)
                                   : sizeof(struct sockaddr_in6));
  rcc_socket_addr_set_port(addr, 0);
  if (ifname != NULL && ifname_len > 0)
    snprintf(ifname, ifname_len, "%s", best->ifa_name);
  freeifaddrs(list);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_socket_pick_address(const char *spec,
                                        struct sockaddr_storage *addr,
                                        char *ifname, size_t ifname_len,
                                        char *err, size_t errlen) {
  return rcc_socket_pick_address_family(spec, AF_UNSPEC, addr, ifname,
                                        ifname_len, err, errlen);
}

/* ---- "host:port" ---------------------------------------------------------- */

static int parse_port(const char *s) {
  char *end;
  long v;
  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > 65535)
    return -1;
  return (int)v;
}

/* Splits "host:port", "[v6]:port" or "v6addr:port" into host[hostlen] and a
 * pointer to the port text. */
static ringcc_result_t split_host_port(const char *host_port, char *host,
                                       size_t hostlen, const char **port_str,
                                       char *err, size_t errlen) {
  const char *host_start = host_port, *host_end;
  if (host_port[0] == '[') { /* "[v6]:port" */
    host_end = strchr(host_port, ']');
    if (host_end == NULL || host_end[1] != ':')
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "socket: \"%s\" is not [ipv6-address]:port", host_port);
    host_start = host_port + 1;
    *port_str = host_end + 2;
  } else {
    host_end = strrchr(host_port, ':');
    if (host_end == NULL)
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "socket: \"%s\" has no port; write host:port (or "
                      "[ipv6-address]:port)", host_port);
    *port_str = host_end + 1;
  }
  size_t len = (size_t)(host_end - host_start);
  if (len == 0 || len >= hostlen)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: \"%s\" has %s host name", host_port,
                    len == 0 ? "an empty" : "a too long");
  memcpy(host, host_start, len);
  host[len] = '\0';
  if (host_port[0] != '[' && strchr(host, ':') != NULL) {
    /* Unbracketed IPv6: only "v6addr:port" where what precedes the last
     * colon is a whole IPv6 address ("fe80::1" alone has no port). */
    struct in6_addr probe;
    char bare[256];
    snprintf(bare, sizeof(bare), "%s", host);
    bare[strcspn(bare, "%")] = '\0';
    if (inet_pton(AF_INET6, bare, &probe) != 1)
      return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                      "socket: \"%s\" is not host:port; write an IPv6 "
                      "address as [address]:port", host_port);
  }
  return RINGCC_SUCCESS;
}

/* Resolves host (numeric or a name) to its first IPv4/IPv6 address. */
static ringcc_result_t resolve(const char *host, const char *port_str,
                               const char *host_port,
                               struct sockaddr_storage *addr, char *err,
                               size_t errlen) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int rc = getaddrinfo(host, port_str, &hints, &res);
  if (rc != 0 || res == NULL)
    return rcc_errf(err, errlen,
                    rc == EAI_AGAIN ? RINGCC_ERR_NETWORK
                                    : RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: cannot resolve host \"%s\" of \"%s\": %s", host,
                    host_port, rc == EAI_SYSTEM ? strerror(errno)
                                                : gai_strerror(rc));
  const struct addrinfo *pick = NULL;
  for (const struct addrinfo *ai = res; ai != NULL && pick == NULL;
       ai = ai->ai_next)
    if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
      pick = ai;
  if (pick != NULL) {
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, pick->ai_addr, pick->ai_addrlen);
  }
  freeaddrinfo(res);
  if (pick == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: host \"%s\" of \"%s\" has no IPv4 or IPv6 "
                    "address", host, host_port);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_socket_parse_host_port(const char *host_port,
                                           struct sockaddr_storage *addr,
                                           char *err, size_t errlen) {
  char host[256];
  const char *port_str = "";
  if (host_port == NULL || addr == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: no host:port given");
  ringcc_result_t r = split_host_port(host_port, host, sizeof(host),
                                     &port_str, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  int port = parse_port(port_str);
  if (port < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: \"%s\": port \"%s\" is not a number in 1..65535",
                    host_port, port_str);
  r = resolve(host, port_str, host_port, addr, err, errlen);
  if (r == RINGCC_SUCCESS)
    rcc_socket_addr_set_port(addr, port);
  return r;
}

/* ---- listen, accept, connect ------------------------------------------- */

ringcc_result_t rcc_socket_set_nodelay(int fd, char *err, size_t errlen) {
  int one = 1;
  char p[80];
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "socket: setting TCP_NODELAY on the connection to %s: %s",
                    peer_str(fd, p, sizeof(p)), strerror(errno));
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_socket_listen(const struct sockaddr_storage *addr,
                                  int *fd_out, struct sockaddr_storage *bound,
                                  char *err, size_t errlen) {
  char a[80];
  int one = 1;
  socklen_t len = addr_len(addr);

  *fd_out = -1;
  rcc_socket_addr_str(addr, a, sizeof(a));
  if (len == 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: cannot listen on %s: not IPv4 or IPv6", a);
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  if (fd < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "socket: socket() to listen on %s: %s", a,
                    strerror(errno));
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, (const struct sockaddr *)addr, len) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    close(fd);
    return rcc_errf(err, errlen,
                    e == EADDRINUSE || e == EADDRNOTAVAIL ? RINGCC_ERR_NETWORK
                                                          : RINGCC_ERR_SYSTEM,
                    "socket: cannot listen on %s: %s", a, strerror(e));
  }
  if (bound != NULL) {
    socklen_t blen = sizeof(*bound);
    memset(bound, 0, sizeof(*bound));
    if (getsockname(fd, (struct sockaddr *)bound, &blen) != 0) {
      int e = errno;
      close(fd);
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "socket: getsockname of the listener on %s: %s", a,
                      strerror(e));
    }
  }
  *fd_out = fd;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_socket_adopt_listener(int fd, int port,
                                          struct sockaddr_storage *bound,
                                          char *err, size_t errlen) {
  struct sockaddr_storage self;
  socklen_t slen = sizeof(self), olen = sizeof(int);
  int type = 0, accepting = 0;
  char a[80];
  memset(&self, 0, sizeof(self));
  if (fcntl(fd, F_GETFD) < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: descriptor %d is not open: %s", fd,
                    strerror(errno));
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &olen) != 0 ||
      getsockname(fd, (struct sockaddr *)&self, &slen) != 0 ||
      (self.ss_family != AF_INET && self.ss_family != AF_INET6) ||
      type != SOCK_STREAM)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: descriptor %d is not a TCP socket", fd);
  rcc_socket_addr_str(&self, a, sizeof(a));
  olen = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &olen) != 0 ||
      !accepting)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: descriptor %d (%s) is not listening", fd, a);
  if (port > 0 && rcc_socket_addr_port(&self) != port)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: descriptor %d listens on %s, not on port %d", fd,
                    a, port);
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "socket: making descriptor %d (%s) nonblocking: %s", fd, a,
                    strerror(errno));
  if (bound != NULL)
    *bound = self;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_socket_fetch_listener(const char *name,
                                          int64_t deadline_ns, int *fd_out,
                                          char *err, size_t errlen) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t n = strlen(name);
  *fd_out = -1;
  if (n < 2 || n > sizeof(a.sun_path) - 1)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: \"%s\" is not a unix socket name", name);
  memcpy(a.sun_path, name, n); /* '@': the abstract namespace */
  if (name[0] == '@')
    a.sun_path[0] = '\0';
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (c < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "socket: socket(AF_UNIX): "
                    "%s", strerror(errno));
  struct timeval tv = {.tv_sec = 0, .tv_usec = 0};
  int ms = rcc_socket_poll_ms(deadline_ns);
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(c, (struct sockaddr *)&a, alen) != 0) {
    int e = errno;
    close(c);
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "socket: connecting to "
                    "%s: %s", name, strerror(e));
  }
  struct ucred cred;
  socklen_t clen = sizeof(cred);
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 ||
      cred.uid != geteuid()) {
    close(c);
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "socket: %s is served by "
                    "another user (uid %d)", name, (int)cred.uid);
  }
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    struct cmsghdr h;
    char space[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = ctl.space,
                       .msg_controllen = sizeof(ctl.space)};
  ssize_t got = recvmsg(c, &msg, MSG_CMSG_CLOEXEC);
  int e = errno;
  close(c);
  struct cmsghdr *cm = got == 1 ? CMSG_FIRSTHDR(&msg) : NULL;
  if (cm == NULL || cm->cmsg_level != SOL_SOCKET ||
      cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
    return rcc_errf(err, errlen,
                    got < 0 && (e == EAGAIN || e == EWOULDBLOCK)
                        ? RINGCC_ERR_TIMEOUT
                        : RINGCC_ERR_NETWORK,
                    "socket: %s sent no descriptor%s%s", name,
                    got < 0 ? ": " : " (refused: not rank 0's process?)",
                    got < 0 ? strerror(e) : "");
  memcpy(fd_out, CMSG_DATA(cm), sizeof(int));
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_socket_accept(int listen_fd, int *fd_out,
                                  struct sockaddr_storage *peer, char *err,
                                  size_t errlen) {
  struct sockaddr_storage tmp;
  socklen_t plen = sizeof(tmp);
  memset(&tmp, 0, sizeof(tmp));
  *fd_out = -1;
  int fd = accept4(listen_fd, (struct sockaddr *)&tmp, &plen,
                   SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
        errno == ECONNABORTED || errno == EPROTO)
      return RINGCC_SUCCESS; /* nothing (usable) pending */
    struct sockaddr_storage self;
    socklen_t slen = sizeof(self);
    char a[80] = "?";
    int e = errno;
    if (getsockname(listen_fd, (struct sockaddr *)&self, &slen) == 0)
      rcc_socket_addr_str(&self, a, sizeof(a));
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "socket: accept on %s: %s%s", a, strerror(e),
                    e == EMFILE || e == ENFILE ? " (raise ulimit -n)" : "");
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (peer != NULL)
    *peer = tmp;
  *fd_out = fd;
  return RINGCC_SUCCESS;
}

/* poll() timeout in ms until deadline_ns, rounded up, at most a minute so
 * that "no deadline" (INT64_MAX) still works. */
int rcc_socket_poll_ms(int64_t deadline_ns) {
  if (deadline_ns == INT64_MAX)
    return 60000;
  int64_t left = deadline_ns - rcc_now_ns();
  if (left <= 0)
    return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms > 60000 ? 60000 : (int)ms;
}

void rcc_socket_close_second(int fd, int wait_ms) {
  static __thread int64_t impatient_until; /* a peer did not close lately */
  if (fd < 0)
    return;
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  int ms = rcc_now_ns() < impatient_until ? 0 : wait_ms, n;
  do
    n = poll(&p, 1, ms);
  while (n < 0 && errno == EINTR);
  if (n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  } else if (n == 0 && ms > 0) {
    impatient_until = rcc_now_ns() + 1000000000LL;
  }
  close(fd);
}

void rcc_socket_raise_fd_limit(uint64_t want, const char *why) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)want ||
      rl.rlim_cur >= rl.rlim_max)
    return;
  rlim_t old = rl.rlim_cur;
  rl.rlim_cur = (rlim_t)want < rl.rlim_max ? (rlim_t)want : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    RCC_INFO(-1, "raised the open-file limit (RLIMIT_NOFILE) from %llu to "
             "%llu for %s", (unsigned long long)old,
             (unsigned long long)rl.rlim_cur, why);
}

/* "the open-file limit (RLIMIT_NOFILE) is 64, 64 descriptors are open" */
static const char *fd_limit_str(void) {
  static __thread char buf[128];
  struct rlimit rl;
  int open_fds = 0;
  DIR *d = opendir("/proc/self/fd"); /* needs a descriptor itself */
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
    open_fds += e->d_name[0] != '.';
  if (d != NULL)
    closedir(d), open_fds--; /* the directory's own */
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    snprintf(buf, sizeof(buf), "%d descriptors are open", open_fds);
  else if (d == NULL)
    snprintf(buf, sizeof(buf), "the open-file limit (RLIMIT_NOFILE) is %llu, "
             "and every one is in use", (unsigned long long)rl.rlim_cur);
  else
    snprintf(buf, sizeof(buf), "the open-file limit (RLIMIT_NOFILE) is %llu, "
             "%d descriptors are open", (unsigned long long)rl.rlim_cur,
             open_fds);
  return buf;
}

static int connect_retryable(int e) {
  return e == ECONNREFUSED || e == ETIMEDOUT || e == ENETUNREACH ||
         e == EHOSTUNREACH || e == ECONNRESET || e == ECONNABORTED;
}

/* One connection attempt: 0 with *fd_out on success, else an errno. */
static int connect_once(const struct sockaddr_storage *addr,
                        int64_t deadline_ns, int *fd_out) {
  int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  if (fd < 0)
    return errno;
  if (connect(fd, (const struct sockaddr *)addr, addr_len(addr)) !=
          0 &&
      errno != EINPROGRESS && errno != EINTR) {
    int e = errno;
    close(fd);
    return e;
  }
  for (;;) { /* wait for the handshake to finish */
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n = poll(&p, 1, rcc_socket_poll_ms(deadline_ns));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return e;
    }
    if (n > 0)
      break;
    if (rcc_now_ns() >= deadline_ns) {
      close(fd);
      return ETIMEDOUT;
    }
  }
  int soerr = 0;
  socklen_t slen = sizeof(soerr);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &slen) != 0)
    soerr = errno;
  if (soerr != 0) {
    close(fd);
    return soerr;
  }
  *fd_out = fd;
  return 0;
}

ringcc_result_t rcc_socket_connect(const struct sockaddr_storage *addr,
                                   int64_t deadline_ns, int *fd_out, char *err,
                                   size_t errlen) {
  int last_errno;
  return rcc_socket_connect_errno(addr, deadline_ns, fd_out, &last_errno, err,
                                  errlen);
}

ringcc_result_t rcc_socket_connect_errno(const struct sockaddr_storage *addr,
                                         int64_t deadline_ns, int *fd_out,
                                         int *last_errno, char *err,
                                         size_t errlen) {
  char a[80];
  int64_t start = rcc_now_ns();
  int64_t backoff = CONNECT_BACKOFF_MIN_NS;
  int attempts = 0, e;

  *fd_out = -1;
  *last_errno = 0;
  rcc_socket_addr_str(addr, a, sizeof(a));
  if (addr_len(addr) == 0 || rcc_socket_addr_port(addr) == 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "socket: cannot connect to %s: not an IPv4 or IPv6 "
                    "address with a port", a);
  for (;;) {
    attempts++;
    e = connect_once(addr, deadline_ns, fd_out);
    *last_errno = e;
    if (e == 0) {
      int one = 1;
      (void)setsockopt(*fd_out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return RINGCC_SUCCESS;
    }
    if (e == EMFILE || e == ENFILE)
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "no socket for %s: %s (this rank's own failure: %s)", a,
                      strerror(e), fd_limit_str());
    if (e == ENOMEM || e == ENOBUFS)
      return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                      "no socket for %s: %s (this rank's own failure)", a,
                      strerror(e));
    if (!connect_retryable(e))
      return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                      "connection to %s failed: %s", a, strerror(e));
    int64_t now = rcc_now_ns();
    if (now >= deadline_ns)
      break;
    int64_t wait = backoff < deadline_ns - now ? backoff : deadline_ns - now;
    struct timespec ts = {.tv_sec = wait / 1000000000LL,
                          .tv_nsec = wait % 1000000000LL};
    nanosleep(&ts, NULL);
    backoff = backoff * 2 > CONNECT_BACKOFF_MAX_NS ? CONNECT_BACKOFF_MAX_NS
                                                   : backoff * 2;
  }
  return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                  "connection to %s %s (%d attempts in %lld ms)", a,
                  e == ECONNREFUSED ? "refused"
                  : e == ETIMEDOUT  ? "timed out"
                                    : strerror(e),
                  attempts, (long long)((rcc_now_ns() - start) / 1000000));
}

/* ---- moving bytes ------------------------------------------------------- */

/* Classifies a failed send/recv: a peer that went away is PEER_FAILED. */
static ringcc_result_t io_error(int fd, int e, const char *verb, char *err,
                                size_t errlen) {
  char p[80];
  peer_str(fd, p, sizeof(p));
  if (e == ECONNRESET || e == EPIPE)
    return rcc_errf(err, errlen, RINGCC_ERR_PEER_FAILED, "%s %s: %s", verb, p,
                    strerror(e));
  return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "%s %s: %s", verb, p,
                  strerror(e));
}

/* Moves as much as the socket takes now: 1 progress or nothing to do yet,
 * 0 would block, <0 failed (err filled, *code set). */
static int try_send(int fd, const char *buf, size_t len, size_t *done,
                    ringcc_result_t *code, char *err, size_t errlen) {
  while (*done < len) {
    ssize_t n = send(fd, buf + *done, len - *done, MSG_NOSIGNAL);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    *code = io_error(fd, n < 0 ? errno : EPIPE, "send to", err, errlen);
    return -1;
  }
  return 1;
}

static int try_recv(int fd, char *buf, size_t len, size_t *done,
                    ringcc_result_t *code, char *err, size_t errlen) {
  while (*done < len) {
    ssize_t n = recv(fd, buf + *done, len - *done, 0);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n == 0) {
      char p[80];
      *code = rcc_errf(err, errlen, RINGCC_ERR_PEER_FAILED,
                       "%s closed the connection (after %zu of %zu bytes)",
                       peer_str(fd, p, sizeof(p)), *done, len);
      return -1;
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    *code = io_error(fd, errno, "recv from", err, errlen);
    return -1;
  }
  return 1;
}

ringcc_result_t rcc_socket_sendrecv(int send_fd, const void *sbuf,
                                    size_t slen, int recv_fd, void *rbuf,
                                    size_t rlen, int64_t deadline_ns,
                                    int *failed_recv, char *err,
                                    size_t errlen) {
  size_t sent = 0, got = 0;
  ringcc_result_t code = RINGCC_SUCCESS;
  int dummy;
  if (failed_recv == NULL)
    failed_recv = &dummy;
  *failed_recv = 0;
  if (send_fd < 0)
    slen = 0;
  if (recv_fd < 0)
    rlen = 0;
  for (;;) {
    if (sent < slen && try_send(send_fd, sbuf, slen, &sent, &code, err,
                                errlen) < 0)
      return code;
    if (got < rlen &&
        try_recv(recv_fd, rbuf, rlen, &got, &code, err, errlen) < 0) {
      *failed_recv = 1;
      return code;
    }
    if (sent == slen && got == rlen)
      return RINGCC_SUCCESS;

    struct pollfd p[2];
    int np = 0;
    if (sent < slen)
      p[np++] = (struct pollfd){.fd = send_fd, .events = POLLOUT};
    if (got < rlen)
      p[np++] = (struct pollfd){.fd = recv_fd, .events = POLLIN};
    int n = poll(p, (nfds_t)np, rcc_socket_poll_ms(deadline_ns));
    if (n < 0 && errno != EINTR) {
      char q[80];
      return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                      "poll on the connection to %s: %s",
                      peer_str(p[0].fd, q, sizeof(q)), strerror(errno));
    }
    if (n == 0 && rcc_now_ns() >= deadline_ns) {
      char q[80];
      int on_recv = got < rlen;
      *failed_recv = on_recv;
      if (on_recv)
        return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                        "timed out receiving from %s (%zu of %zu bytes)",
                        peer_str(recv_fd, q, sizeof(q)), got, rlen);
      return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                      "timed out sending to %s (%zu of %zu bytes)",
                      peer_str(send_fd, q, sizeof(q)), sent, slen);
    }
  }
}

ringcc_result_t rcc_socket_send_all(int fd, const void *buf, size_t len,
                                    int64_t deadline_ns, char *err,
                                    size_t errlen) {
  return rcc_socket_sendrecv(fd, buf, len, -1, NULL, 0, deadline_ns, NULL, err,
                             errlen);
}

ringcc_result_t rcc_socket_recv_all(int fd, void *buf, size_t len,
                                    int64_t deadline_ns, char *err,
                                    size_t errlen) {
  return rcc_socket_sendrecv(-1, NULL, 0, fd, buf, len, deadline_ns, NULL, err,
                             errlen);
}
