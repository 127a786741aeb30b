/*
 * fuzz_rdv_hello - the hello the rendezvous server reads from each rank
 * (rcc_bootstrap_hello_parse), after the secret: magic, rank, nranks, the
 * rank's listener address. Anyone who learned the secret can send anything.
 *
 * Input: a sequence of hellos of RCC_BOOT_HELLO_BYTES (the last one may be
 * short), fed to a model of the server: the first accepted hello fixes
 * nranks, a rank joins once, its address goes to the table at its slot.
 */
#include "fuzz.h"

#define TABLE_MODEL_MAX 4096 /* ranks for which the table is modelled */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t known = 0;
  uint8_t *table = NULL, *joined = NULL;

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
