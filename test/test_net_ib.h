/*
 * test_net_ib.h - what the two sources of test_net_ib (test/test_net_ib.c
 * and test/parts/net_ib_errors.c) share: the plugin under test, the fifo
 * sizes, the network key, a connected pair, and the helpers test_net_ib.c
 * defines for both.
 */
#ifndef TEST_NET_IB_H
#define TEST_NET_IB_H

#include <stddef.h>
#include <stdint.h>

#include "net.h"
#include "net_ib.h"

#define P rcc_net_ib
#define SLOT 65536
#define NSLOT 8
#define FIFO_BYTES (SLOT * NSLOT)
#define WAIT_S 20.0

/* The communicator's network key every connection proves. */
extern const uint8_t KEY[RCC_NET_KEY_BYTES];

typedef struct {
  uint8_t handle[RCC_NET_HANDLE_BYTES];
  char addr[96]; /* the listen address, as the plugin names it */
  void *listen, *send, *recv;
  char *sfifo, *rfifo;
  void *smh, *rmh;
} pair_t;

void unset_ib_env(void);
void use_fake(const char *fault);
void init_ok(void);
void pair_listen(pair_t *p);
void pair_connect(pair_t *p);
void pair_fifos(pair_t *p);
void pair_open(pair_t *p);
void pair_close(pair_t *p);
ringcc_result_t wait_fail(void *req, char *err, size_t errlen,
                          const char *what);
void *post_recv(pair_t *p, char *dst, size_t max);
void *post_send(pair_t *p, const char *src, size_t bytes,
                uint32_t imm);
void one_message(pair_t *p, char *src, size_t bytes, char *dst,
                 size_t max, uint32_t imm, uint64_t tag);

#endif
