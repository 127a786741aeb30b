/*
 * internal.h - declarations shared by the files of libringcc. Nothing here is
 * part of the public API. Internal functions that cross files are rcc_*;
 * file-local ones are static.
 */
#ifndef RCC_INTERNAL_H
#define RCC_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

#define RCC_ERRLEN 512

/* ---- time (debug.c) ---------------------------------------------------- */
int64_t rcc_now_ns(void); /* CLOCK_MONOTONIC */
/* now + timeout_ms, or INT64_MAX when timeout_ms <= 0 (no deadline). */
int64_t rcc_deadline_after_ms(int64_t timeout_ms);

/* ---- logging (debug.c) ------------------------------------------------- */
/* The process-wide level, from RINGCC_DEBUG (read once, or set by a config). */
extern int rcc_log_level;
void rcc_log_init(void);
void rcc_log_set_level(int level);
/* RINGCC_DEBUG_SUBSYS (comma list, e.g. "TUNING,INIT"; ALL): extra subsystems
 * whose INFO lines are printed. */
int rcc_log_subsys(const char *name);
/* Prints "host:pid [rank] RINGCC LEVEL message" to stderr. rank < 0: "[-]". */
void rcc_log(int level, int rank, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define RCC_WARN(rank, ...)                                                    \
  do {                                                                         \
    if (rcc_log_level >= RINGCC_LOG_WARN)                                      \
      rcc_log(RINGCC_LOG_WARN, (rank), __VA_ARGS__);                           \
  } while (0)
#define RCC_INFO(rank, ...)                                                    \
  do {                                                                         \
    if (rcc_log_level >= RINGCC_LOG_INFO)                                      \
      rcc_log(RINGCC_LOG_INFO, (rank), __VA_ARGS__);                           \
  } while (0)
#define RCC_TRACE(rank, ...)                                                   \
  do {                                                                         \
    if (rcc_log_level >= RINGCC_LOG_TRACE)                                     \
      rcc_log(RINGCC_LOG_TRACE, (rank), __VA_ARGS__);                          \
  } while (0)

/* Formats a message into err[errlen] and returns code: the one way internal
 * code that has no communicator reports a failure. */
ringcc_result_t rcc_errf(char *err, size_t errlen, ringcc_result_t code,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- environment (debug.c) --------------------------------------------- */
/* The one place environment variables are read: returns getenv(name) and
 * remembers it for the INFO dump of settings. */
const char *rcc_getenv(const char *name);
/* At RINGCC_DEBUG=INFO, prints every RINGCC_* variable once per process. */
void rcc_log_env_once(void);

/* ---- sockets (socket.c) ------------------------------------------------ */
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

/* ---- bootstrap (bootstrap.c) ------------------------------------------- */
struct rcc_bootstrap;

/* ringcc_get_unique_id: pick the address (RINGCC_SOCKET_IFNAME), listen on an
 * ephemeral port, make a random 128-bit secret, and serve the rendezvous from
 * a detached thread until all ranks arrived or timeout_ms passed. */
ringcc_result_t rcc_bootstrap_new_id(ringcc_unique_id_t *id,
                                     int64_t timeout_ms, char *err,
                                     size_t errlen);
/* An id for a known rendezvous address "host:port" and secret (env launch). */
ringcc_result_t rcc_bootstrap_id_from_root(ringcc_unique_id_t *id,
                                           const char *host_port,
                                           const uint8_t secret[16],
                                           char *err, size_t errlen);
/* Serve the rendezvous of id from a detached thread of this process, listening
 * on id's address (rank 0 of an env launch does this). */
ringcc_result_t rcc_bootstrap_serve(const ringcc_unique_id_t *id,
                                    int64_t timeout_ms, char *err,
                                    size_t errlen);
/* Checks an id's format (magic, version, family, checksum). */
ringcc_result_t rcc_bootstrap_check_id(const ringcc_unique_id_t *id,
                                       char *err, size_t errlen);
/* Joins the rendezvous of id as rank of nranks and connects the bootstrap
 * ring (this rank <-> its neighbours) used by the calls below. Fails with
 * RINGCC_ERR_TIMEOUT at deadline_ns (rcc_now_ns() clock). */
ringcc_result_t rcc_bootstrap_init(struct rcc_bootstrap **out,
                                   const ringcc_unique_id_t *id, int rank,
                                   int nranks, int64_t deadline_ns,
                                   char *err, size_t errlen);
/* data holds nranks records of bytes each; this rank's record (at
 * rank*bytes) is filled in; on return all are. */
ringcc_result_t rcc_bootstrap_allgather(struct rcc_bootstrap *b, void *data,
                                        size_t bytes, int64_t deadline_ns,
                                        char *err, size_t errlen);
ringcc_result_t rcc_bootstrap_barrier(struct rcc_bootstrap *b,
                                      int64_t deadline_ns, char *err,
                                      size_t errlen);
void rcc_bootstrap_close(struct rcc_bootstrap *b);

/* ---- reductions (reduce.c) --------------------------------------------- */
/* dst[i] = a[i] op b[i] for i < n; dst may alias a or b (exactly, not
 * partially). RINGCC_AVG reduces as RINGCC_SUM; the division by nranks is
 * rcc_reduce_avg_finish's. float16/bfloat16 are computed in float and rounded
 * to nearest even; integers wrap modulo 2^bits. */
typedef void (*rcc_reduce_fn)(void *dst, const void *a, const void *b,
                              size_t n);
rcc_reduce_fn rcc_reduce_get(ringcc_datatype_t dt, ringcc_op_t op);
/* dst[i] = src[i] / nranks (integers truncate toward zero); dst may be src. */
void rcc_reduce_avg_finish(ringcc_datatype_t dt, void *dst, const void *src,
                           size_t n, int nranks);
float rcc_half_to_float(uint16_t h);
uint16_t rcc_float_to_half(float f); /* round to nearest even */
float rcc_bf16_to_float(uint16_t h);
uint16_t rcc_float_to_bf16(float f); /* round to nearest even */
/* Kernel instruction sets. The best the CPU has is used unless
 * rcc_reduce_set_isa (tests, benchmarks) caps it; isa < 0 restores the best.
 * Returns the set now in use (lower than asked where the CPU lacks it). */
enum { RCC_ISA_PORTABLE = 0, RCC_ISA_AVX2 = 1, RCC_ISA_AVX512 = 2 };
int rcc_reduce_set_isa(int isa);

/* ---- datatypes (comm.c) ------------------------------------------------ */
static inline int rcc_dt_valid(int dt) {
  return dt >= 0 && dt < RINGCC_NUM_DATATYPES;
}
static inline int rcc_op_valid(int op) { return op >= 0 && op < RINGCC_NUM_OPS; }

#endif /* RCC_INTERNAL_H */
