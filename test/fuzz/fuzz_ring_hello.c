/*
 * fuzz_ring_hello - the hello a rank reads from whoever connects to its
 * bootstrap listener, after the secret (rcc_bootstrap_ring_hello_ok): magic,
 * rank, nranks. Only the previous rank of the ring is let in.
 *
 * Input: 8 bytes that choose this side's nranks and the rank it expects,
 * then the hello (any length).
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t pick[8];
  fuzz_take(&data, &size, pick, sizeof(pick));
  int nranks = 2 + (int)(rcc_get_be32(pick) % (RCC_BOOT_MAX_NRANKS - 1));
  int prev = (int)(rcc_get_be32(pick + 4) % (uint32_t)nranks);
  uint8_t *in = malloc(size ? size : 1); /* exact size: ASan sees overreads */
  memcpy(in, data, size);

  int ok = rcc_bootstrap_ring_hello_ok(in, size, prev, nranks);
  int want = size >= RCC_BOOT_RING_HELLO_BYTES &&
             rcc_get_be32(in) == 0x52434352u &&
             rcc_get_be32(in + 4) == (uint32_t)prev &&
             rcc_get_be32(in + 8) == (uint32_t)nranks;
  FUZZ_CHECK(ok == want);
  free(in);
  return 0;
}
