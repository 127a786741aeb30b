/*
 * test_multihost.h - what the two sources of test_multihost
 * (test/test_multihost.c and test/parts/multihost_failures.c) share: the
 * virtual network of a test, the layouts, and the helpers test_multihost.c
 * defines for both.
 */
#ifndef TEST_MULTIHOST_H
#define TEST_MULTIHOST_H

#include <stdbool.h>
#include <stdint.h>

#include "harness.h"
#include "netns.h"
#include "ringcc.h"

extern ns_net_t g_net;

typedef struct {
  int nhosts, per_host, nranks;
  bool interleaved;
  int host_of[NS_MAX_RANKS];
  char name[32];
} layout_t;

void net_down(void);
void net_up(int nhosts);
layout_t make_layout(int nhosts, int per_host, bool interleaved);
ringcc_config_t test_config(int64_t timeout_ms);
int body_one_allreduce(h_ctx_t *ctx);

#endif
