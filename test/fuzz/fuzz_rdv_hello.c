/*
 * fuzz_rdv_hello - what the rendezvous server reads from whoever connects:
 * the handshake's opening (rcc_bootstrap_open_parse: magic, version,
 * purpose, the connector's nonce), and, from ranks that proved the secret,
 * their hellos (rcc_bootstrap_hello_parse): magic, rank, nranks, the rank's
 * listener address. Anyone can send an opening; a hello comes only after a
 * proof, but is parsed as if anyone could send it.
 *
 * Input: one byte choosing the purpose the server expects (1 rendezvous, 2
 * ring), an opening of RCC_BOOT_OPEN_BYTES (may be short), then a sequence
 * of hellos of RCC_BOOT_HELLO_BYTES (the last one may be short), fed to a
 * model of the server: the first accepted hello fixes nranks, a rank joins
 * once, its address goes to the table at its slot.
 */
#include "fuzz.h"

static void fuzz_opening(const uint8_t **data, size_t *size) {
  uint8_t pick[1];
  fuzz_take(data, size, pick, sizeof(pick));
  uint32_t purpose = 1 + pick[0] % 2;
  size_t len = *size < RCC_BOOT_OPEN_BYTES ? *size : RCC_BOOT_OPEN_BYTES;
  uint8_t *in = malloc(len ? len : 1); /* exact size: ASan sees overreads */
  memcpy(in, *data, len);
  *data += len;
  *size -= len;
  uint8_t nonce[RCC_BOOT_NONCE_BYTES];
  char why[128];
  memset(why, 'x', sizeof(why));
  if (rcc_bootstrap_open_parse(in, len, purpose, nonce, why, sizeof(why)) != 0) {
    fuzz_check_message(why, sizeof(why));
  } else {
    FUZZ_CHECK(len == RCC_BOOT_OPEN_BYTES);
    FUZZ_CHECK(rcc_get_be32(in) == 0x52434341u);
    FUZZ_CHECK(rcc_get_be16(in + 6) == purpose);
    FUZZ_CHECK(memcmp(nonce, in + 8, RCC_BOOT_NONCE_BYTES) == 0);
  }
  free(in);
}

#define TABLE_MODEL_MAX 4096 /* ranks for which the table is modelled */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t known = 0;
  uint8_t *table = NULL, *joined = NULL;

  fuzz_opening(&data, &size);

  while (size > 0) {
    size_t len = size < RCC_BOOT_HELLO_BYTES ? size : RCC_BOOT_HELLO_BYTES;
    uint8_t *in = malloc(len); /* exact size: ASan sees overreads */
    memcpy(in, data, len);
    data += len;
    size -= len;

    struct rcc_boot_hello h;
    char why[128];
    memset(why, 'x', sizeof(why));
    int status = rcc_bootstrap_hello_parse(in, len, known, &h, why,
                                           sizeof(why));
    if (status != 0)
      fuzz_check_message(why, sizeof(why));
    if (status < 0) {
      FUZZ_CHECK(status == -1);
      FUZZ_CHECK(len < RCC_BOOT_HELLO_BYTES || rcc_get_be32(in) != 0x52434348u);
      free(in);
      continue;
    }
    FUZZ_CHECK(h.rank == rcc_get_be32(in + 4) && h.nranks == rcc_get_be32(in + 8));
    FUZZ_CHECK(status <= 5 && status != 4); /* 4 (duplicate) is the server's */
    if (status > 0) {
      free(in);
      continue;
    }
    FUZZ_CHECK(len == RCC_BOOT_HELLO_BYTES);
    FUZZ_CHECK(h.nranks >= 1 && h.nranks <= RCC_BOOT_MAX_NRANKS);
    FUZZ_CHECK(h.rank < h.nranks);
    FUZZ_CHECK(known == 0 || h.nranks == known);
    if (h.nranks > 1)
      fuzz_check_boot_addr(&h.listener, in + 12);
    else
      FUZZ_CHECK(h.listener.ss_family == 0);

    if (known == 0) {
      known = h.nranks;
      if (known <= TABLE_MODEL_MAX) {
        table = calloc(1, RCC_BOOT_REPLY_BYTES +
                              (size_t)RCC_BOOT_ADDR_BYTES * known);
        joined = calloc(known, 1);
      }
    }
    if (table != NULL && !joined[h.rank]) {
      joined[h.rank] = 1;
      memcpy(table + RCC_BOOT_REPLY_BYTES +
                 (size_t)RCC_BOOT_ADDR_BYTES * h.rank,
             in + 12, RCC_BOOT_ADDR_BYTES);
    }
    free(in);
  }
  free(table);
  free(joined);
  return 0;
}
