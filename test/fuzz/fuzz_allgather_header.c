/*
 * fuzz_allgather_header - the 16-byte header in front of every record the
 * bootstrap allgather passes along the ring (rcc_bootstrap_data_header_ok):
 * magic, call number, bytes per rank. It must match this rank's own call
 * exactly before the record is read into the buffer sized for that call.
 *
 * Input: this rank's call number (4 bytes) and record size (8 bytes), then
 * the header as received (any length).
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t pick[12];
  fuzz_take(&data, &size, pick, sizeof(pick));
  uint32_t call = rcc_get_be32(pick);
  uint64_t bytes = rcc_get_be64(pick + 4);
  uint8_t *hdr = malloc(size ? size : 1); /* exact size: ASan sees overreads */
  memcpy(hdr, data, size);

  int ok = rcc_bootstrap_data_header_ok(hdr, size, call, bytes);
  int want = size >= RCC_BOOT_DATA_HDR_BYTES &&
             rcc_get_be32(hdr) == 0x52434344u && rcc_get_be32(hdr + 4) == call &&
             rcc_get_be64(hdr + 8) == bytes;
  FUZZ_CHECK(ok == want);
  free(hdr);
  return 0;
}
