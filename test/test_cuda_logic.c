/*
 * test_cuda_logic.c - the logic of the CUDA support that a CPU can run,
 * without a GPU (make gpu-check runs the kernels where there is one):
 *
 *  - device FIFO slots: RINGCC_DEVICE_CHUNK_BYTES, and the rule that keeps
 *    one rank's device FIFOs within their memory budget however many
 *    channels and peers there are; host FIFOs keep their own slots;
 *  - the vector words of the reduction and copy kernels (vec_split.h): for
 *    every alignment of the pointers and every tail, which elements go one
 *    by one and which as 16-, 8- or 4-byte words.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "cuda.h"
#include "transport.h"
#include "vec_split.h"

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

/* ---- vector words of reduce.cuh (vec_split.h) ----------------------------------- */

/* The widest word every pointer agrees on and that holds whole elements. */
static unsigned widest(const uintptr_t *p, int np, size_t esize) {
  for (unsigned w = 16; w >= 4; w /= 2) {
    int ok = w % esize == 0 && p[0] % esize == 0;
    for (int i = 1; i < np && ok; i++)
      ok = (p[i] - p[0]) % w == 0;
    if (ok)
      return w;
  }
  return 0;
}

/* Every alignment of up to four pointers (a, b, dst, dst2) within 32 bytes
 * and every count up to 70 (and some larger): the split covers [0, n)
 * exactly once, its words start aligned in every pointer, it uses the
 * widest word possible, and the tail is less than one word. */
Test(cuda_logic, vector_words_for_every_alignment_and_tail, .timeout = 60) {
  static const size_t esizes[] = {1, 2, 4, 8};
  static const size_t big[] = {1000, 4097, 65536 + 3};
  long checked = 0;
  for (size_t ei = 0; ei < 4; ei++) {
    size_t es = esizes[ei];
    for (int np = 1; np <= 4; np++)
      for (unsigned code = 0; code < (1u << (5 * np)); code++) {
        uintptr_t p[4], mix = 0;
        for (int i = 0; i < np; i++) {
          p[i] = 0x10000 + ((code >> (5 * i)) & 31);
          mix |= p[i] ^ p[0];
        }
        if (p[0] % es != 0)
          continue; /* element pointers are aligned (coll.c checks) */
        int skip = 0;
        for (int i = 1; i < np; i++)
          skip |= p[i] % es != 0;
        if (skip)
          continue;
        unsigned want_word = widest(p, np, es);
        for (size_t n = 0; n < 70 + 3; n++) {
          size_t count = n < 70 ? n : big[n - 70];
          struct rcc_vec_split sp = rcc_vec_split(mix, p[0], count, es);
          checked++;
          cr_assert_eq(sp.word, want_word, "esize %zu, pointers %u: word %u, "
                       "want %u", es, code, sp.word, want_word);
          cr_assert(sp.head <= count && sp.tail_from <= count);
          if (sp.word == 0) {
            cr_assert(sp.head == count && sp.nvec == 0);
            continue;
          }
          size_t per = sp.word / es;
          cr_assert_eq(sp.head + sp.nvec * per, sp.tail_from);
          cr_assert(count - sp.tail_from < per || sp.nvec == 0,
                    "tail of %zu elements holds a whole word",
                    count - sp.tail_from);
          if (sp.nvec > 0)
            for (int i = 0; i < np; i++)
              cr_assert_eq((p[i] + sp.head * es) % sp.word, 0,
                           "pointer %d not aligned at the first word", i);
          /* The head stops at the first boundary (or the end). */
          cr_assert(sp.head * es < sp.word);
          if (sp.head < count)
            cr_assert_eq((p[0] + sp.head * es) % sp.word, 0);
          /* Without a whole word after the head, the tail takes the rest. */
          if (sp.nvec == 0)
            cr_assert((count - sp.head) * es < sp.word);
        }
      }
  }
  cr_log_info("%ld splits checked", checked);
}
