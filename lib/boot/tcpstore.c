/*
 * tcpstore.c - a client of c10d's TCPStore wire protocol (tcpstore.h).
 *
 * The protocol, as torch's TCPStore.cpp and both of its servers (the
 * classic TCPStoreBackend and the libuv one, the default since torch 2.4)
 * speak it: each request is one byte of query type followed by its
 * arguments; a string or byte vector is a uint64 length then the bytes;
 * integers travel in the host's byte order (the client and server of one
 * job share it; every platform torch ships for is little-endian).
 *
 *   VALIDATE (0)  uint32 0x3C85F7CE            first message, no reply
 *   SET (1)       key, value                   no reply
 *   GET (3)       key                          reply: value (key must exist)
 *   ADD (4)       key, int64 delta             reply: int64 new value
 *   WAIT (6)      uint64 nkeys, keys           reply: uint8 0 once all exist
 *
 * torch's client puts "/" before every key (keyPrefix_), so this one does
 * too. A GET of a missing key is an error on the server, so get() waits first,
 * as torch's client does. A wait that times out leaves a reply pending on
 * the connection; the caller closes it instead of cancelling.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "error.h"
#include "socket.h"
#include "tcpstore.h"

enum { Q_VALIDATE = 0, Q_SET = 1, Q_GET = 3, Q_ADD = 4, Q_WAIT = 6 };
#define STORE_MAGIC 0x3C85F7CEu
#define KEY_MAX 512

/* One request: type, then the framed pieces appended in order. */
struct request {
  uint8_t buf[1 + 8 + 8 + KEY_MAX + 8];
  size_t len;
};

static void put(struct request *q, const void *data, size_t n) {
  memcpy(q->buf + q->len, data, n);
  q->len += n;
}

static ringcc_result_t start(struct request *q, uint8_t type, const char *key,
                             char *err, size_t errlen) {
  q->len = 0;
  put(q, &type, 1);
  if (key == NULL)
    return RINGCC_SUCCESS;
  uint64_t n = strlen(key) + 1;
  if (n > KEY_MAX)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "TCPStore key of %zu bytes (at most %d)", strlen(key),
                    KEY_MAX - 1);
  if (type == Q_WAIT) {
    uint64_t one = 1;
    put(q, &one, 8);
  }
  put(q, &n, 8);
  put(q, "/", 1);
  put(q, key, n - 1);
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_tcpstore_connect(const char *host_port, int64_t deadline_ns,
                                     int *fd, char *err, size_t errlen) {
  struct sockaddr_storage addr;
  uint8_t hello[5] = {Q_VALIDATE};
  uint32_t magic = STORE_MAGIC;
  ringcc_result_t r;
  *fd = -1;
  if ((r = rcc_socket_parse_host_port(host_port, &addr, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_socket_connect(&addr, deadline_ns, fd, err, errlen)) !=
          RINGCC_SUCCESS)
    return r;
  memcpy(hello + 1, &magic, 4);
  if ((r = rcc_socket_send_all(*fd, hello, sizeof hello, deadline_ns, err,
                               errlen)) != RINGCC_SUCCESS) {
    close(*fd);
    *fd = -1;
  }
  return r;
}

ringcc_result_t rcc_tcpstore_set(int fd, const char *key, const void *value,
                                 size_t len, int64_t deadline_ns, char *err,
                                 size_t errlen) {
  struct request q;
  uint64_t n = len;
  ringcc_result_t r;
  if ((r = start(&q, Q_SET, key, err, errlen)) != RINGCC_SUCCESS)
    return r;
  put(&q, &n, 8);
  if ((r = rcc_socket_send_all(fd, q.buf, q.len, deadline_ns, err, errlen)) !=
      RINGCC_SUCCESS)
    return r;
  return rcc_socket_send_all(fd, value, len, deadline_ns, err, errlen);
}

ringcc_result_t rcc_tcpstore_get(int fd, const char *key, void *value,
                                 size_t cap, size_t *len, int64_t deadline_ns,
                                 char *err, size_t errlen) {
  struct request q;
  uint8_t reply = 0xff;
  uint64_t n = 0;
  ringcc_result_t r;
  if ((r = start(&q, Q_WAIT, key, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_socket_send_all(fd, q.buf, q.len, deadline_ns, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_socket_recv_all(fd, &reply, 1, deadline_ns, err, errlen)) !=
          RINGCC_SUCCESS)
    return r == RINGCC_ERR_TIMEOUT
               ? rcc_errf(err, errlen, r, "timed out waiting for key '%s' to "
                          "appear in the store", key)
               : r;
  if (reply != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK, "the store answered "
                    "wait('%s') with %u, not 0 (stop waiting)", key, reply);
  if ((r = start(&q, Q_GET, key, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_socket_send_all(fd, q.buf, q.len, deadline_ns, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = rcc_socket_recv_all(fd, &n, 8, deadline_ns, err, errlen)) !=
          RINGCC_SUCCESS)
    return r;
  if (n > cap)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_USAGE, "the store's "
                    "value of '%s' has %llu bytes, more than the %zu expected "
                    "(another program's key?)", key, (unsigned long long)n, cap);
  *len = (size_t)n;
  return rcc_socket_recv_all(fd, value, (size_t)n, deadline_ns, err, errlen);
}

ringcc_result_t rcc_tcpstore_add(int fd, const char *key, int64_t delta,
                                 int64_t *result, int64_t deadline_ns,
                                 char *err, size_t errlen) {
  struct request q;
  ringcc_result_t r;
  if ((r = start(&q, Q_ADD, key, err, errlen)) != RINGCC_SUCCESS)
    return r;
  put(&q, &delta, 8);
  if ((r = rcc_socket_send_all(fd, q.buf, q.len, deadline_ns, err, errlen)) !=
      RINGCC_SUCCESS)
    return r;
  return rcc_socket_recv_all(fd, result, 8, deadline_ns, err, errlen);
}
