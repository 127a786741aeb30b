/*
 * fuzz_net_header - the 64-byte header in front of every message on a TCP
 * plugin socket (rcc_net_socket_header_parse: payload bytes, immediate,
 * zeros). The payload is then received straight into the posted slot, so a
 * size larger than the slot must be refused.
 *
 * Input: the slot size of the posted receive (4 bytes, at most 64 KiB here),
 * then the byte stream of one socket: header, payload, zeros to a multiple
 * of 64, header, payload...
 * Each accepted payload is copied into a buffer of exactly the slot size, as
 * the receive does; ASan sees any overflow.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t pick[4];
  fuzz_take(&data, &size, pick, sizeof(pick));
  size_t slot_bytes = rcc_get_be32(pick) % (64 * 1024 + 1);
  uint8_t *slot = malloc(slot_bytes ? slot_bytes : 1);

  while (size > 0) {
    size_t len = size < RCC_NET_SOCKET_HEADER_BYTES
                     ? size
                     : RCC_NET_SOCKET_HEADER_BYTES;
    uint8_t *hdr = malloc(len); /* exact size: ASan sees overreads */
    memcpy(hdr, data, len);
    data += len;
    size -= len;
    uint32_t bytes, imm;
    int rc = rcc_net_socket_header_parse(hdr, len, slot_bytes, &bytes, &imm);
    if (len == RCC_NET_SOCKET_HEADER_BYTES) {
      FUZZ_CHECK(bytes == rcc_get_be32(hdr) && imm == rcc_get_be32(hdr + 4));
      FUZZ_CHECK((rc == 0) == (bytes <= slot_bytes));
    } else {
      FUZZ_CHECK(rc != 0);
    }
    free(hdr);
    if (rc != 0)
      break; /* the connection fails: nothing after this is read */
    size_t got = size < bytes ? size : bytes;
    memcpy(slot, data, got);
    data += got;
    size -= got;
    size_t pad = (64 - bytes % 64) % 64; /* dropped */
    got = size < pad ? size : pad;
    data += got;
    size -= got;
  }
  free(slot);
  return 0;
}
