/*
 * test_cuda_logic.c - the logic of the CUDA support that a CPU can run,
 * without a GPU (make gpu-check runs the kernels where there is one):
 *
 *  - device FIFO slots: RINGCC_DEVICE_CHUNK_BYTES, and the rule that keeps
 *    one rank's device FIFOs within their memory budget however many
 *    channels and peers there are; host FIFOs keep their own slots.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda.h"
#include "transport.h"

/* ---- a communicator as init would leave it, without transports ------------- */

struct fake {
  struct ringcc_comm comm;
  struct rcc_peer_info peers[64];
};

/* n ranks on one host, every one on the same GPU (P2P/same GPU), with
 * channels collective device channels. */
static void fake_comm(struct fake *f, int n, int channels) {
  memset(f, 0, sizeof(*f));
  struct ringcc_comm *c = &f->comm;
  c->nranks = n;
  c->rank = 0;
  c->peers = f->peers;
  c->nkinds = RCC_MAX_CONN_KINDS;
  c->set.nslots = 8;
  c->set.chunk_bytes = 65536;
  c->set.net_chunk_bytes = 262144;
  c->set.device_chunk_bytes = -1;
  for (int k = 0; k < RCC_MAX_CONN_KINDS; k++)
    c->kind_channels[k] = k % RCC_NUM_CONN_KINDS == RCC_CONN_COLL &&
                                  k >= RCC_CONN_DEVICE
                              ? channels
                              : 1;
  for (int r = 0; r < n; r++) {
    struct rcc_peer_info *p = &f->peers[r];
    p->rank = r;
    p->host_hash = 42;
    p->gpu.device = 0;
    p->gpu.bus_id = 0x3b00;
    memset(p->gpu.uuid, 0xaa, sizeof(p->gpu.uuid));
  }
}

/* ---- device FIFO slots --------------------------------------------------------- */

Test(cuda_logic, device_slots_within_the_memory_budget, .timeout = 10) {
  struct fake *f = malloc(sizeof(*f));
  cr_assert(f != NULL);
  const size_t budget = (size_t)1 << 30, kib = 1024;
  struct {
    int n, channels;
    int64_t asked;
    size_t want; /* with CUDA P2P; without, the default */
  } cases[] = {
      {2, 16, -1, 512 * kib},  /* an NVLink pair: the default */
      {8, 16, -1, 512 * kib},  /* 8 GPUs: 17 sets x 7 peers x 4 MiB */
      {16, 16, -1, 512 * kib}, /* 15 peers: just within 1 GiB */
      {16, 32, -1, 256 * kib}, /* 33 sets x 15 peers: halved */
      {32, 16, -1, 128 * kib}, /* 17 sets x 31 peers */
      {64, 32, -1, 64 * kib},  /* never below 64 KiB */
      {8, 16, 1 << 20, 1 << 20}, /* asked for: exactly that */
      {2, 1, 65536, 65536},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    fake_comm(f, cases[i].n, cases[i].channels);
    f->comm.set.device_chunk_bytes = cases[i].asked;
    size_t got = rcc_p2p_device_slot_bytes(&f->comm);
    size_t want = RINGCC_HAVE_CUDA || cases[i].asked > 0 ? cases[i].want
                                                         : 512 * kib;
    cr_expect_eq(got, want, "case %zu (%d ranks, %d channels): %zu, want %zu",
                 i, cases[i].n, cases[i].channels, got, want);
    size_t mem = rcc_p2p_fifo_memory(&f->comm, got, cases[i].n - 1);
    if (cases[i].asked < 0 && got > 64 * kib)
      cr_expect(mem <= budget, "case %zu: %zu MiB of device FIFOs", i,
                mem >> 20);
    /* Host FIFOs keep the shared-memory slot. */
    cr_expect_eq(rcc_transport_p2p.slot_bytes(&f->comm), 65536);
    if (RINGCC_HAVE_CUDA)
      cr_expect_eq(rcc_transport_p2p.device_slot_bytes(&f->comm), got);
  }
  free(f);
}
