/*
 * fuzz_net_preamble - the accept path of the TCP plugin: the 16-byte
 * preamble every socket of a connection starts with
 * (rcc_net_socket_preamble_parse: magic, socket index, socket count,
 * connection id), and on socket 0 the 64-byte hello that follows, which the
 * core checks (rcc_net_hello_parse) once the plugin checked the proof (an
 * HMAC, not parsed: compared). Any stranger that reaches the listener can
 * send these.
 *
 * Input: a sequence of sockets: each a preamble, then for an accepted socket
 * 0 its hello. The core side is rank 1 of 4.
 */
#include "fuzz.h"
#include "net.h"
#include "schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  while (size > 0) {
    size_t len = size < RCC_NET_SOCKET_PREAMBLE_BYTES
                     ? size
                     : RCC_NET_SOCKET_PREAMBLE_BYTES;
    uint8_t *in = malloc(len); /* exact size: ASan sees overreads */
    memcpy(in, data, len);
    data += len;
    size -= len;

    struct rcc_net_preamble p;
    char why[160];
    memset(why, 'x', sizeof(why));
    if (rcc_net_socket_preamble_parse(in, len, &p, why, sizeof(why)) != 0) {
      fuzz_check_message(why, sizeof(why));
      free(in);
      continue;
    }
    FUZZ_CHECK(len == RCC_NET_SOCKET_PREAMBLE_BYTES);
    FUZZ_CHECK(rcc_get_be32(in) == 0x52434e53u);
    FUZZ_CHECK(p.nsocks >= 1 && p.nsocks <= RCC_NET_SOCKET_MAX_SOCKS);
    FUZZ_CHECK(p.index >= 0 && p.index < p.nsocks);
    FUZZ_CHECK(p.index == (int)rcc_get_be16(in + 4));
    FUZZ_CHECK(p.nsocks == (int)rcc_get_be16(in + 6));
    FUZZ_CHECK(p.id == rcc_get_be64(in + 8));
    /* The listener reads need bytes into a buffer of preamble, hello and
     * proof. */
    FUZZ_CHECK(p.need == RCC_NET_SOCKET_PREAMBLE_BYTES +
                             (p.index == 0 ? RCC_NET_HELLO_BYTES : 0) +
                             RCC_NET_SOCKET_MAC_BYTES);
    free(in);
    if (p.index != 0 || size < RCC_NET_HELLO_BYTES)
      continue;

    uint8_t hello[RCC_NET_HELLO_BYTES];
    memcpy(hello, data, sizeof(hello));
    data += sizeof(hello);
    size -= sizeof(hello);
    int peer = -1, kind = -1;
    if (rcc_net_hello_parse(hello, sizeof(hello), 1, 4, &peer, &kind)) {
      FUZZ_CHECK(peer >= 0 && peer < 4 && peer != 1);
      FUZZ_CHECK(kind >= 0 && kind < RCC_NET_MAX_SETS);
    }
  }
  return 0;
}
