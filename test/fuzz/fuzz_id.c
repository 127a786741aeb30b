/*
 * fuzz_id - the unique id decoder (rcc_bootstrap_id_decode, and
 * rcc_bootstrap_check_id on the same bytes). An id travels from the process
 * that made it to every rank by whatever means the user chose, so any 128
 * bytes can arrive.
 *
 * Input: one mode byte, then the id (any length). Mode bit 0 rewrites the
 * checksum to match, so that the fuzzer also gets past it to the address;
 * bits 1..7 pick a byte to corrupt for the checksum property below.
 */
#include "bootstrap.h"
#include "error.h"
#include "fuzz.h"

static uint32_t fnv1a(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 16777619u;
  return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t mode = 0;
  fuzz_take(&data, &size, &mode, 1);
  uint8_t *id = malloc(size ? size : 1); /* exact size: ASan sees overreads */
  memcpy(id, data, size);
  if ((mode & 1) && size >= RCC_BOOT_ID_BYTES) {
    uint32_t sum = fnv1a(id, 124);
    id[124] = (uint8_t)(sum >> 24), id[125] = (uint8_t)(sum >> 16);
    id[126] = (uint8_t)(sum >> 8), id[127] = (uint8_t)sum;
  }

  struct sockaddr_storage root;
  uint8_t secret[RCC_BOOT_SECRET_BYTES];
  char err[RCC_ERRLEN];
  memset(err, 'x', sizeof(err));
  ringcc_result_t r = rcc_bootstrap_id_decode(id, size, &root, secret, err,
                                              sizeof(err));
  if (r != RINGCC_SUCCESS) {
    FUZZ_CHECK(r == RINGCC_ERR_INVALID_ARGUMENT);
    fuzz_check_message(err, sizeof(err));
  } else {
    FUZZ_CHECK(size >= RCC_BOOT_ID_BYTES);
    FUZZ_CHECK(rcc_get_be32(id) == 0x52434349u && rcc_get_be16(id + 4) == 1);
    FUZZ_CHECK(rcc_get_be32(id + 124) == fnv1a(id, 124));
    fuzz_check_boot_addr(&root, id + 8);
    FUZZ_CHECK(memcmp(secret, id + 32, RCC_BOOT_SECRET_BYTES) == 0);
    /* FNV-1a steps are bijections: any one changed byte breaks the sum. */
    size_t pos = (size_t)(mode >> 1) % 124;
    id[pos] ^= 0x5a;
    FUZZ_CHECK(rcc_bootstrap_id_decode(id, size, NULL, NULL, err,
                                       sizeof(err)) != RINGCC_SUCCESS);
    id[pos] ^= 0x5a;
  }

  /* The public check reads the same bytes the same way. */
  if (size >= RCC_BOOT_ID_BYTES) {
    ringcc_unique_id_t uid;
    memcpy(uid.internal, id, sizeof(uid.internal));
    FUZZ_CHECK(rcc_bootstrap_check_id(&uid, err, sizeof(err)) == r);
  }
  free(id);
  return 0;
}
