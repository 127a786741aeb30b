/*
 * env.c - the one place environment variables are read (env.h), and the
 * strict parsers of their values.
 */
#include <stdint.h>
#include <stdlib.h>

#include "env.h"

const char *rcc_getenv(const char *name) {
  const char *v = getenv(name);
  return (v != NULL && *v != '\0') ? v : NULL;
}

int rcc_parse_decimal(const char *s, int64_t *out) {
  int neg = *s == '-';
  const char *p = s + neg;
  uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  if (*p == '\0')
    return -1;
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9')
      return -1;
    unsigned d = (unsigned)(*p - '0');
    if (v > (limit - d) / 10)
      return -1; /* out of range */
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
}

int rcc_parse_hex(const char *s, uint8_t *out, size_t bytes) {
  size_t i = 0;
  for (; s[i] != '\0'; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0 || i >= 2 * bytes)
      return (int)i;
    if (i % 2 == 0)
      out[i / 2] = (uint8_t)(d << 4);
    else
      out[i / 2] |= (uint8_t)d;
  }
  return i == 2 * bytes ? -1 : (int)i;
}
