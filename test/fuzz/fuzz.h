/*
 * fuzz.h - what the libFuzzer targets in test/fuzz/ share: a check that
 * aborts (libFuzzer then saves the input as a crash), big-endian readers,
 * and the properties every refusal must have.
 *
 * Each target feeds one parser of lib/util/wire.h with bytes as they could come
 * off a socket, plus the expectations the receiving side would have, taken
 * from the input too, and checks what the parser promises.
 */
#ifndef RCC_FUZZ_H
#define RCC_FUZZ_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

#define FUZZ_CHECK(cond)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* Takes n bytes off the front of the input; zeros past its end. */
static inline void fuzz_take(const uint8_t **data, size_t *size, void *out,
                             size_t n) {
  size_t k = *size < n ? *size : n;
  memset(out, 0, n);
  memcpy(out, *data, k);
  *data += k;
  *size -= k;
}

/* A refusal says why in one terminated, non-empty sentence. */
static inline void fuzz_check_message(const char *msg, size_t cap) {
  FUZZ_CHECK(memchr(msg, '\0', cap) != NULL);
  FUZZ_CHECK(msg[0] != '\0');
}

/* An address the parser accepted is a usable IPv4/IPv6 address with a port,
 * and is the one in wire (bootstrap layout: family u16, port u16, scope u32,
 * address 16 bytes). */
static inline void fuzz_check_boot_addr(const struct sockaddr_storage *a,
                                        const uint8_t *wire) {
  if (rcc_get_be16(wire) == 4) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)a;
    FUZZ_CHECK(in->sin_family == AF_INET);
    FUZZ_CHECK(ntohs(in->sin_port) == rcc_get_be16(wire + 2));
    FUZZ_CHECK(memcmp(&in->sin_addr, wire + 8, 4) == 0);
  } else {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
    FUZZ_CHECK(rcc_get_be16(wire) == 6);
    FUZZ_CHECK(in6->sin6_family == AF_INET6);
    FUZZ_CHECK(ntohs(in6->sin6_port) == rcc_get_be16(wire + 2));
    FUZZ_CHECK(in6->sin6_scope_id == rcc_get_be32(wire + 4));
    FUZZ_CHECK(memcmp(&in6->sin6_addr, wire + 8, 16) == 0);
  }
  FUZZ_CHECK(rcc_get_be16(wire + 2) != 0);
}

#endif /* RCC_FUZZ_H */
