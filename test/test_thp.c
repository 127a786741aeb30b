/*
 * test_thp.c - huge pages for buffers that peers read in place (thp.c):
 * a buffer noted a second time is collapsed into 2 MiB pages with its
 * contents intact (and the huge pages at its ends that it holds half of
 * or more), a range noted once or with RINGCC_THP=0 is not, and
 * collectives that read the same buffers call after call (AllToAllv,
 * Gather, Scatter, send/recv of large messages, by cross-memory attach)
 * deliver every element, with the contents changed between calls.
 *
 * Whether the kernel collapses at all (MADV_COLLAPSE, Linux 6.1) is probed
 * first; where it cannot, the tests of the pages themselves skip and the
 * collectives are still checked.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm.h"
#include "harness.h"
#include "thp.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define MIB ((size_t)1 << 20)

/* Whether this kernel collapses anonymous memory on request. */
static int kernel_collapses(void) {
  size_t bytes = 4 * MIB;
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return 0;
  char *a = (char *)(((uintptr_t)p + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
  memset(p, 1, bytes);
  int ok = madvise(a, 2 * MIB, MADV_COLLAPSE) == 0;
  munmap(p, bytes);
  return ok;
}

/* Kilobytes of [p, p + bytes) mapped by huge pages, from /proc/self/smaps
 * (the AnonHugePages of the mappings that overlap it; the buffers here are
 * mappings of their own). */
static long huge_kib(const void *p, size_t bytes) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  long kib = 0;
  int in = 0;
  uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    uintptr_t s, e;
    long v;
    if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &s, &e) == 2)
      in = s < hi && e > lo;
    else if (in && sscanf(line, "AnonHugePages: %ld kB", &v) == 1)
      kib += v;
  }
  if (f != NULL)
    fclose(f);
  return kib;
}

/* A buffer of its own mapping (not 2 MiB-aligned: malloc's large blocks
 * are not), filled with a pattern of `salt`. */
static char *buffer(size_t bytes) {
  char *p = mmap(NULL, bytes + 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert(p != MAP_FAILED, "mmap: %s", strerror(errno));
  return p + 4096 - 64; /* an odd start, as a malloc'd block's */
}

static void fill(char *p, size_t bytes, uint64_t salt) {
  uint64_t *w = (uint64_t *)p;
  for (size_t i = 0; i < bytes / 8; i++)
    w[i] = h_mix64(salt ^ i);
}

static size_t first_wrong(const char *p, size_t bytes, uint64_t salt) {
  const uint64_t *w = (const uint64_t *)p;
  for (size_t i = 0; i < bytes / 8; i++)
    if (w[i] != h_mix64(salt ^ i))
      return i;
  return SIZE_MAX;
}

static struct ringcc_comm fake(int thp) {
  struct ringcc_comm c;
  memset(&c, 0, sizeof c);
  c.set.thp = thp;
  return c;
}

/* Whether the kernel's refusal is one it calls transient: pages it could
 * not move just now (EAGAIN), no free huge page (ENOMEM), the memory cgroup
 * at its limit (EBUSY: seen under a 28 MiB memory.limit_in_bytes). */
static int transient(int rc) {
  return rc == -EAGAIN || rc == -ENOMEM || rc == -EBUSY;
}

/* Noted once: left alone; noted twice: huge, the same bytes. The kernel may
 * refuse a collapse for want of free huge pages or of room in the memory
 * cgroup (a loaded machine); then the 16th note must try again, and only
 * when the kernel refuses that too is the size of the pages left unchecked
 * (the contents never are). */
Test(thp, second_note_collapses_keeps_contents) {
  if (!kernel_collapses())
    cr_skip_test("this kernel does not collapse on request (MADV_COLLAPSE, "
                 "Linux 6.1)");
  size_t bytes = 24 * MIB;
  char *p = buffer(bytes);
  fill(p, bytes, 0x7e57);
  struct ringcc_comm c = fake(1);
  long before = huge_kib(p, bytes);
  cr_expect_eq(rcc_thp_note(&c, p, bytes), 0, "noted once: collapsed");
  cr_expect_eq(huge_kib(p, bytes), before,
               "noted once: %ld KiB huge, %ld before", huge_kib(p, bytes),
               before);
  int second = rcc_thp_note(&c, p, bytes);
  cr_expect(second == 1 || transient(second),
            "noted twice: %d (%s)", second, second < 0 ? strerror(-second)
                                                        : "not tried");
  long after = huge_kib(p, bytes);
  /* the 2 MiB-aligned interior: 11 of the 12 huge pages the range spans */
  if (second == 1)
    cr_expect_geq(after, 22 * 1024, "noted twice, collapsed: only %ld KiB "
                  "of %zu MiB in huge pages", after, bytes >> 20);
  size_t at = first_wrong(p, bytes, 0x7e57);
  cr_expect_eq(at, SIZE_MAX, "word %zu changed by the collapse", at);
  /* noted again: the 3rd to 15th time not due, the 16th collapses again */
  for (int i = 3; i < 16; i++)
    cr_expect_eq(rcc_thp_note(&c, p, bytes), 0, "note %d collapsed", i);
  int sixteenth = rcc_thp_note(&c, p, bytes);
  cr_expect(sixteenth == 1 || transient(sixteenth), "note 16: %d (%s)",
            sixteenth, sixteenth < 0 ? strerror(-sixteenth) : "not tried");
  if (sixteenth == 1)
    cr_expect_geq(huge_kib(p, bytes), 22 * 1024, "note 16, collapsed: only "
                  "%ld KiB in huge pages", huge_kib(p, bytes));
  cr_expect_eq(first_wrong(p, bytes, 0x7e57), SIZE_MAX,
               "changed by later notes");
  if (second != 1 && sixteenth != 1)
    cr_skip_test("the kernel refused both collapses (%s, %s): no huge page "
                 "to be had now (none free, or the memory cgroup at its "
                 "limit); contents checked",
                 strerror(-second), strerror(-sixteenth));
}

/* 4 MiB of a mapping of its own starting on a 2 MiB boundary (two huge
 * pages), filled with a pattern of `salt`. */
static char *aligned4(uint64_t salt) {
  size_t map = 8 * MIB;
  char *p = mmap(NULL, map, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert(p != MAP_FAILED, "mmap: %s", strerror(errno));
  char *x = (char *)(((uintptr_t)p + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
  if (x > p)
    munmap(p, (size_t)(x - p));
  if (x + 4 * MIB < p + map)
    munmap(x + 4 * MIB, (size_t)(p + map - (x + 4 * MIB)));
  fill(x, 4 * MIB, salt);
  return x;
}

/* RINGCC_THP=0 (set.thp 0): never collapsed. A range holding less than
 * half of every huge page it touches: left alone. One that holds half of
 * a page or more at an end: that whole page collapsed, the memory of it
 * outside the range as it was, the page it holds less of left alone. */
Test(thp, off_and_small_ranges_left_alone) {
  if (!kernel_collapses())
    cr_skip_test("this kernel does not collapse on request");
  struct ringcc_comm off = fake(0), on = fake(1);
  size_t bytes = 16 * MIB;
  char *p = buffer(bytes);
  fill(p, bytes, 1);
  long before = huge_kib(p, bytes);
  for (int i = 0; i < 20; i++)
    cr_expect_eq(rcc_thp_note(&off, p, bytes), 0, "RINGCC_THP=0 tried");
  cr_expect_eq(huge_kib(p, bytes), before, "RINGCC_THP=0 collapsed %ld KiB",
               huge_kib(p, bytes) - before);

  /* 2 MiB - 8 KiB across the boundary of two pages, 1 MiB - 4 KiB of each;
   * then 1 MiB - 8 KiB inside one page */
  char *x = aligned4(2);
  const struct {
    size_t off, len;
  } small[] = {{MIB + 4096, 2 * MIB - 8192}, {4096, MIB - 8192}};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 3; i++)
      cr_expect_eq(rcc_thp_note(&on, x + small[k].off, small[k].len), 0,
                   "a range holding under half of each page (%zu bytes at "
                   "%zu): note %d returned non-zero", small[k].len,
                   small[k].off, i + 1);
  cr_expect_eq(huge_kib(x, 4 * MIB), 0, "under half a page: %ld KiB huge",
               huge_kib(x, 4 * MIB));
  cr_expect_eq(first_wrong(x, 4 * MIB, 2), SIZE_MAX, "changed");

  /* 1.5 MiB + 4 KiB from 512 KiB on: 1.5 MiB of page 0, 4 KiB of page 1 */
  char *y = aligned4(3);
  int r = 0;
  for (int i = 0; i < 2; i++)
    r = rcc_thp_note(&on, y + MIB / 2, 3 * MIB / 2 + 4096);
  cr_expect(r == 1 || transient(r), "noted twice: %d (%s)", r,
            r < 0 ? strerror(-r) : "not tried");
  if (r == 1)
    cr_expect_eq(huge_kib(y, 4 * MIB), 2048, "three quarters of page 0 "
                 "noted twice: %ld KiB huge, not page 0's 2048",
                 huge_kib(y, 4 * MIB));
  cr_expect_eq(first_wrong(y, 4 * MIB, 3), SIZE_MAX,
               "changed (inside the range or out)");

  /* 3 MiB, the whole mapping: page 0 and half of page 1, which reaches
   * past the mapping's end: page 0 collapsed alone */
  char *z = aligned4(4);
  munmap(z + 3 * MIB, MIB);
  for (int i = 0; i < 2; i++)
    r = rcc_thp_note(&on, z, 3 * MIB);
  cr_expect(r == 1 || transient(r), "an end page past the mapping, noted "
            "twice: %d (%s)", r, r < 0 ? strerror(-r) : "not tried");
  long zkib = huge_kib(z, 3 * MIB);
  if (r == 1)
    cr_expect_eq(zkib, 2048, "page 0 of a 3 MiB mapping: %ld KiB huge", zkib);
  else /* the kernel's ENOMEM for the hole must not hide page 0's collapse */
    cr_expect_eq(zkib, 0, "page 0 collapsed, yet the note returned %d (%s)",
                 r, strerror(-r));
  cr_expect_eq(first_wrong(z, 3 * MIB, 4), SIZE_MAX, "changed");
}

/* ---- collectives on reused buffers ------------------------------------- */

#define CALLS 18 /* past the collapses at the 2nd and 16th call */
#define BLOCK (5 * MIB + 4096 + 8) /* bytes a rank sends each peer */

static int reused_body(h_ctx_t *h) {
  int n = h->nranks, me = h->rank;
  size_t total = BLOCK * (size_t)n;
  char *send = h_xmalloc(total), *recv = h_xmalloc(total);
  size_t sc[8], sd[8], rc[8], rd[8];
  for (int j = 0; j < n; j++) {
    /* blocks in reverse order in the send buffer, uneven, one empty */
    size_t cnt = j == (me + 1) % n ? 0 : (BLOCK - 8 * (size_t)j) / 8;
    sc[j] = cnt;
    sd[j] = (size_t)(n - 1 - j) * (BLOCK / 8);
  }
  for (int i = 0; i < n; i++) {
    rc[i] = i == (me + n - 1) % n ? 0 : (BLOCK - 8 * (size_t)me) / 8;
    rd[i] = (size_t)i * (BLOCK / 8);
  }
  for (int call = 0; call < CALLS; call++) {
    uint64_t salt = h_hash3(0x7b9, (uint64_t)call, 0);
    uint64_t *s = (uint64_t *)send;
    for (int j = 0; j < n; j++)
      for (size_t k = 0; k < sc[j]; k++)
        s[sd[j] + k] = h_hash3(salt, (uint64_t)me * 8 + (uint64_t)j, k);
    memset(recv, 0xee, total);
    if (!h_ok(h, ringcc_alltoallv(send, sc, sd, recv, rc, rd, RINGCC_UINT64,
                                  h->comm, NULL), "alltoallv"))
      return 1;
    const uint64_t *r = (const uint64_t *)recv;
    for (int i = 0; i < n; i++)
      for (size_t k = 0; k < rc[i]; k++)
        if (r[rd[i] + k] != h_hash3(salt, (uint64_t)i * 8 + (uint64_t)me, k))
          return h_fail(h, "alltoallv call %d: element %zu from rank %d "
                        "wrong", call, k, i);
    /* Scatter from and Gather into the same buffers, the root turning */
    int root = call % n;
    size_t per = BLOCK / 8;
    if (me == root)
      for (size_t k = 0; k < per * (size_t)n; k++)
        s[k] = h_hash3(salt, 0x5ca, k);
    if (!h_ok(h, ringcc_scatter(send, recv, per, RINGCC_UINT64, root,
                                h->comm, NULL), "scatter"))
      return 1;
    for (size_t k = 0; k < per; k++)
      if (r[k] != h_hash3(salt, 0x5ca, (size_t)me * per + k))
        return h_fail(h, "scatter call %d (root %d): element %zu wrong",
                      call, root, k);
    for (size_t k = 0; k < per; k++)
      s[k] = h_hash3(salt, 0x9a7 + (uint64_t)me, k);
    if (!h_ok(h, ringcc_gather(send, recv, per, RINGCC_UINT64, root, h->comm,
                               NULL), "gather"))
      return 1;
    if (me == root)
      for (int i = 0; i < n; i++)
        for (size_t k = 0; k < per; k++)
          if (r[(size_t)i * per + k] != h_hash3(salt, 0x9a7 + (uint64_t)i, k))
            return h_fail(h, "gather call %d (root %d): element %zu of rank "
                          "%d wrong", call, root, k, i);
    /* a large message read in place by its receiver, round the ring */
    size_t words = total / 8;
    for (size_t k = 0; k < words; k++)
      s[k] = h_hash3(salt, 0x5e9d + (uint64_t)me, k);
    ringcc_result_t a, b;
    int to = (me + 1) % n, from = (me + n - 1) % n;
    ringcc_group_start();
    a = ringcc_send(send, words, RINGCC_UINT64, to, h->comm, NULL);
    b = ringcc_recv(recv, words, RINGCC_UINT64, from, h->comm, NULL);
    ringcc_result_t e = ringcc_group_end();
    if (!h_ok(h, a, "send") || !h_ok(h, b, "recv") ||
        !h_ok(h, e, "group_end"))
      return 1;
    for (size_t k = 0; k < words; k++)
      if (r[k] != h_hash3(salt, 0x5e9d + (uint64_t)from, k))
        return h_fail(h, "send/recv call %d: word %zu from rank %d wrong",
                      call, k, from);
  }
  /* every rank's send buffer was read in place on every call: huge now */
  const char *thp = getenv("RINGCC_THP");
  long kib = huge_kib(send, total);
  int bad = thp != NULL && strcmp(thp, "1") == 0 && kernel_collapses() &&
            kib < 2048;
  free(send);
  free(recv);
  if (bad)
    return h_fail(h, "after %d calls the send buffer (%zu MiB) has %ld KiB "
                  "in huge pages", CALLS, total >> 20, kib);
  return 0;
}

static void run_reused(int n, const char *thp) {
  setenv("RINGCC_THP", thp, 1);
  h_run_opts_t o = {.nranks = n, .body = reused_body, .timeout_s = 240,
                    .name = "reused buffers"};
  bool ok = h_run(&o);
  unsetenv("RINGCC_THP");
  cr_assert(ok, "n=%d, RINGCC_THP=%s: failed (above)", n, thp);
}

Test(thp, reused_buffers_every_element, .timeout = 600) {
  run_reused(3, "1");
  run_reused(4, "1");
  run_reused(2, "0");
}
