/*
 * crc32c.c - CRC-32C (crc32c.h). The hardware path runs three crc32
 * streams over three thirds of each block (the instruction's latency is
 * three cycles and its throughput one per cycle, so one stream leaves two
 * thirds of the unit idle) and joins them with the "shift by n bytes"
 * operator of the CRC, precomputed per block size as a table (Mark Adler's
 * crc32c.c does the same).
 */
#include <pthread.h>
#include <string.h>

#include "crc32c.h"

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t table8[8][256];
/* Shifting a CRC over LONG_BYTES / SHORT_BYTES zero bytes: 4 tables of 256. */
#define LONG_BYTES 8192
#define SHORT_BYTES 256
static uint32_t shift_long[4][256], shift_short[4][256];
static int have_sse42;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Multiplies a (a polynomial mod P, reflected) by x^(8*bytes): the CRC
 * register after bytes zero bytes, by squaring (GF(2) matrices). */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, mat++)
    if (vec & 1)
      sum ^= *mat;
  return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
  for (int n = 0; n < 32; n++)
    square[n] = gf2_times(mat, mat[n]);
}

/* op: the operator that shifts a CRC register over `bytes` zero bytes. */
static void zeros_operator(uint32_t *op, size_t bytes) {
  uint32_t even[32], odd[32];
  odd[0] = POLY; /* one zero bit */
  for (int n = 1; n < 32; n++)
    odd[n] = 1u << (n - 1);
  gf2_square(even, odd); /* two bits */
  gf2_square(odd, even); /* four */
  do {                   /* bytes are at least one */
    gf2_square(even, odd);
    bytes >>= 1;
    if (bytes == 0) {
      memcpy(op, even, sizeof(even));
      return;
    }
    gf2_square(odd, even);
    bytes >>= 1;
  } while (bytes != 0);
  memcpy(op, odd, sizeof(odd));
}

/* zeros_operator's operator as four byte tables. */
static void zeros_table(uint32_t table[4][256], size_t bytes) {
  uint32_t op[32];
  zeros_operator(op, bytes);
  for (uint32_t n = 0; n < 256; n++) {
    table[0][n] = gf2_times(op, n);
    table[1][n] = gf2_times(op, n << 8);
    table[2][n] = gf2_times(op, n << 16);
    table[3][n] = gf2_times(op, n << 24);
  }
}

static uint32_t shift(const uint32_t table[4][256], uint32_t crc) {
  return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^
         table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

static void init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t crc = n;
    for (int k = 0; k < 8; k++)
      crc = crc & 1 ? (crc >> 1) ^ POLY : crc >> 1;
    table8[0][n] = crc;
  }
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t crc = table8[0][n];
    for (int k = 1; k < 8; k++) {
      crc = table8[0][crc & 0xff] ^ (crc >> 8);
      table8[k][n] = crc;
    }
  }
  zeros_table(shift_long, LONG_BYTES);
  zeros_table(shift_short, SHORT_BYTES);
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t table_raw(uint32_t crc, const unsigned char *p, size_t n) {
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    crc = table8[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    w ^= crc; /* little-endian: the register meets the first four bytes */
    crc = table8[7][w & 0xff] ^ table8[6][(w >> 8) & 0xff] ^
          table8[5][(w >> 16) & 0xff] ^ table8[4][(w >> 24) & 0xff] ^
          table8[3][(w >> 32) & 0xff] ^ table8[2][(w >> 40) & 0xff] ^
          table8[1][(w >> 48) & 0xff] ^ table8[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    crc = table8[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

uint32_t rcc_crc32c_table(uint32_t crc, const void *data, size_t bytes) {
  pthread_once(&once, init);
  return ~table_raw(~crc, data, bytes);
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
hw_raw(uint32_t crc0, const unsigned char *p, size_t n) {
  uint64_t c0 = crc0;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    n--;
  }
  /* Three streams over blocks of 3 x LONG_BYTES, then 3 x SHORT_BYTES. */
  static const size_t block[2] = {LONG_BYTES, SHORT_BYTES};
  for (int b = 0; b < 2; b++) {
    size_t len = block[b];
    while (n >= 3 * len) {
      uint64_t c1 = 0, c2 = 0, w;
      const unsigned char *end = p + len;
      do {
        memcpy(&w, p, 8);
        c0 = __builtin_ia32_crc32di(c0, w);
        memcpy(&w, p + len, 8);
        c1 = __builtin_ia32_crc32di(c1, w);
        memcpy(&w, p + 2 * len, 8);
        c2 = __builtin_ia32_crc32di(c2, w);
        p += 8;
      } while (p < end);
      const uint32_t(*t)[256] = b == 0 ? shift_long : shift_short;
      c0 = shift(t, (uint32_t)c0) ^ c1;
      c0 = shift(t, (uint32_t)c0) ^ c2;
      p += 2 * len;
      n -= 3 * len;
    }
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c0 = __builtin_ia32_crc32di(c0, w);
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
  return (uint32_t)c0;
}
#endif

uint32_t rcc_crc32c(uint32_t crc, const void *data, size_t bytes) {
  pthread_once(&once, init);
#if defined(__x86_64__)
  if (have_sse42)
    return ~hw_raw(~crc, data, bytes);
#endif
  return ~table_raw(~crc, data, bytes);
}

const char *rcc_crc32c_impl(void) {
  pthread_once(&once, init);
  return have_sse42 ? "SSE4.2" : "table";
}
