/*
 * fuzz_net_hello - the hello the network transport checks on every
 * connection it accepts (rcc_net_hello_parse): the communicator's secret,
 * magic, the peer's rank, the connection kind, nranks. Only an accepted
 * hello picks a receive slot, by rank and kind.
 *
 * Input: this side's secret (16 bytes), rank and nranks (4 bytes), then the
 * hello (any length).
 */
#include "fuzz.h"
#include "net.h"
#include "schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t secret[16], pick[4];
  fuzz_take(&data, &size, secret, sizeof(secret));
  fuzz_take(&data, &size, pick, sizeof(pick));
  int nranks = 1 + (int)(rcc_get_be16(pick) % 1024);
  int my_rank = (int)(rcc_get_be16(pick + 2) % (uint32_t)nranks);
  uint8_t *in = malloc(size ? size : 1); /* exact size: ASan sees overreads */
  memcpy(in, data, size);

  int peer = -1, kind = -1;
  int ok = rcc_net_hello_parse(in, size, secret, my_rank, nranks, &peer,
                               &kind);
  if (ok) {
    FUZZ_CHECK(size >= 32);
    FUZZ_CHECK(memcmp(in, secret, sizeof(secret)) == 0);
    FUZZ_CHECK(peer >= 0 && peer < nranks && peer != my_rank);
    FUZZ_CHECK(kind >= 0 && kind < RCC_NET_MAX_SETS);
    /* The slot the core picks, [peer][kind], is inside its table. */
    int *slots = calloc((size_t)nranks * RCC_NET_MAX_SETS, sizeof(int));
    slots[peer * RCC_NET_MAX_SETS + kind] = 1;
    free(slots);
  }
  free(in);
  return 0;
}
