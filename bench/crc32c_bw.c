/*
 * crc32c_bw.c - what RINGCC_CHECKSUM=1 costs per byte, apart from any
 * network: the rate of rcc_crc32c (lib/util/crc32c.c, the function the TCP
 * plugin sums its messages with) against memcpy, on one core, over a buffer
 * of SIZE bytes, in cache and out of it.
 *
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -pthread -iquote lib/util \
 *       bench/crc32c_bw.c lib/util/crc32c.c -o build/crc32c_bw
 *   build/crc32c_bw [-s SIZE] [-c CHUNK] [-r REPS]   (defaults 64M, 64K, 10)
 *
 * Printed, GB/s (1e9 B of buffer per second), median of REPS after one
 * untimed repetition:
 *   crc32c SIZE       one pass over the whole buffer (out of cache when SIZE
 *                     is larger than the last-level cache)
 *   crc32c by CHUNK   the buffer CHUNK bytes at a time, each chunk summed
 *                     right after memcpy brought it in (as the plugin's
 *                     receive does after each recv())
 *   memcpy SIZE       bytes copied per second
 *   memcpy by CHUNK   the same chunks, copied only: the difference with the
 *                     line above is what the sum adds while the bytes are hot
 * Also which implementation runs (SSE4.2 or table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mul = 1;
  if (*end == 'K' || *end == 'k')
    mul = 1024;
  else if (*end == 'M' || *end == 'm')
    mul = 1024 * 1024;
  else if (*end == 'G' || *end == 'g')
    mul = 1024 * 1024 * 1024;
  else if (*end != 0)
    return 0;
  return v <= 0 ? 0 : (size_t)(v * (double)mul);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static volatile uint32_t sink;

/* mode: 0 crc whole, 1 copy+crc by chunk, 2 copy whole, 3 copy by chunk */
static double run(int mode, unsigned char *src, unsigned char *dst,
                  size_t size, size_t chunk) {
  double t0 = now_s();
  uint32_t crc = 0;
  switch (mode) {
  case 0:
    crc = rcc_crc32c(0, src, size);
    break;
  case 1:
  case 3:
    for (size_t off = 0; off < size; off += chunk) {
      size_t n = size - off < chunk ? size - off : chunk;
      memcpy(dst + off, src + off, n);
      if (mode == 1)
        crc = rcc_crc32c(crc, dst + off, n);
    }
    break;
  default:
    memcpy(dst, src, size);
  }
  sink = crc ^ dst[size / 2];
  return (double)size / (now_s() - t0) / 1e9;
}

int main(int argc, char **argv) {
  size_t size = 64u << 20, chunk = 64u << 10;
  int reps = 10;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
      size = parse_size(argv[++i]);
    else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
      chunk = parse_size(argv[++i]);
    else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [-s SIZE] [-c CHUNK] [-r REPS] (sizes with "
              "K, M or G; defaults 64M, 64K, 10)\n", argv[0]);
      return 2;
    }
  }
  if (size == 0 || chunk == 0 || reps < 1 || reps > 1000) {
    fprintf(stderr, "%s: -s and -c need a size above 0 (e.g. 64M), -r 1 to "
            "1000\n", argv[0]);
    return 2;
  }
  unsigned char *src = malloc(size), *dst = malloc(size);
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (src == NULL || dst == NULL || t == NULL) {
    fprintf(stderr, "%s: out of memory for 2 x %zu bytes\n", argv[0], size);
    return 1;
  }
  for (size_t i = 0; i < size; i++)
    src[i] = (unsigned char)(i * 2654435761u >> 13);
  memset(dst, 1, size);
  static const char *const names[4] = {"crc32c", "memcpy+crc32c by chunk",
                                       "memcpy", "memcpy by chunk"};
  printf("crc32c implementation: %s; size %zu, chunk %zu, %d reps\n",
         rcc_crc32c_impl(), size, chunk, reps);
  for (int mode = 0; mode < 4; mode++) {
    run(mode, src, dst, size, chunk); /* untimed: page faults, clocks */
    for (int r = 0; r < reps; r++)
      t[r] = run(mode, src, dst, size, chunk);
    qsort(t, (size_t)reps, sizeof(double), cmp);
    printf("%-24s %6.2f GB/s (best %.2f)\n", names[mode], t[reps / 2],
           t[reps - 1]);
  }
  free(src);
  free(dst);
  free(t);
  return 0;
}
