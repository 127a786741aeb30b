/*
 * fuzz_net_hello - the hello the network transport checks on every
 * connection the plugin accepted (rcc_net_hello_parse): magic, the peer's
 * rank, the connection kind, nranks. The plugin trusts it because its
 * socket proved the communicator's key; it is parsed as if anyone could send
 * it. Only an accepted hello picks a receive slot, by rank and kind.
 *
 * Input: 16 bytes (unused: where the secret used to be), this side's rank
 * and nranks (4 bytes), then the hello (any length).
 */
#include "fuzz.h"
#include "net.h"
#include "schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t unused[16], pick[4];
  fuzz_take(&data, &size, unused, sizeof(unused));
  fuzz_take(&data, &size, pick, sizeof(pick));
  int nranks = 1 + (int)(rcc_get_be16(pick) % 1024);
  int my_rank = (int)(rcc_get_be16(pick + 2) % (uint32_t)nranks);
  uint8_t *in = malloc(size ? size : 1); /* exact size: ASan sees overreads */
  memcpy(in, data, size);

  int peer = -1, kind = -1;
  int ok = rcc_net_hello_parse(in, size, my_rank, nranks, &peer, &kind);
  if (ok) {
    FUZZ_CHECK(size >= 16);
    uint32_t magic;
    memcpy(&magic, in, sizeof(magic)); /* native order, as the core writes */
    FUZZ_CHECK(magic == 0x52434e48u);
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
