/*
 * thp.c - huge pages for buffers that peers read or write in place (thp.h
 * says why).
 *
 * One table per process remembers the last RANGES ranges noted (the
 * 2 MiB-aligned pages they hold half of or more: thp.h; least recently
 * noted replaced first) and how often each was. A range is collapsed
 * when it is noted for the 2nd, 16th, 128th ... time: the first makes a
 * reused buffer huge; the later ones, on memory that is already huge,
 * return in microseconds, and where the program freed and reallocated the
 * buffer in between they make the new pages huge too, at a cost that the
 * growing gaps keep small. The collapse runs in the calling thread,
 * outside the table's lock, before the peers learn the address, so no peer
 * pins the pages while they move; the kernel keeps the contents (and
 * refuses, EAGAIN, pages pinned by others).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "clock.h"
#include "comm.h"
#include "log.h"
#include "thp.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

#define HUGE ((uintptr_t)2 << 20)
#define RANGES 64
#define GROWTH 8 /* collapses at uses 2, 16, 128, ... */

struct range {
  uintptr_t a, e;   /* [a, e): whole huge pages; e == 0: unused */
  uint64_t uses;
  uint64_t next;    /* collapse when uses reaches it; 0: never again */
  uint64_t touched; /* the table's clock when last noted */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct range table[RANGES];
static uint64_t ticks;
static int told; /* INFO said once what happened */

/* The range's entry, a new one in the least recently noted place if it has
 * none; whether it is due for a collapse. */
static int due(uintptr_t a, uintptr_t e) {
  struct range *r = NULL, *old = &table[0];
  for (int i = 0; i < RANGES && r == NULL; i++) {
    if (table[i].a == a && table[i].e == e)
      r = &table[i];
    else if (table[i].touched < old->touched)
      old = &table[i];
  }
  if (r == NULL) {
    r = old;
    *r = (struct range){.a = a, .e = e, .next = 2};
  }
  r->touched = ++ticks;
  if (++r->uses != r->next)
    return 0;
  r->next = r->uses * GROWTH;
  return 1;
}

/* The kernel's refusals that say "not now" (madvise(2)): EAGAIN, pages it
 * could not move just then; ENOMEM, no free huge page; EBUSY, the huge page
 * not charged to the memory cgroup, at its limit. */
static int transient(int err) {
  return err == EAGAIN || err == ENOMEM || err == EBUSY;
}

static void never_again(uintptr_t a, uintptr_t e) {
  for (int i = 0; i < RANGES; i++)
    if (table[i].a == a && table[i].e == e)
      table[i].next = 0;
}

/* Bytes of [lo, hi) in the huge page at p. */
static uintptr_t covered(uintptr_t lo, uintptr_t hi, uintptr_t p) {
  uintptr_t s = lo > p ? lo : p, e = hi < p + HUGE ? hi : p + HUGE;
  return e > s ? e - s : 0;
}

int rcc_thp_note(const struct ringcc_comm *comm, const void *buf,
                 size_t bytes) {
  uintptr_t lo = (uintptr_t)buf, hi = lo + bytes;
  /* The pages inside, and those at the ends the range holds half of. */
  uintptr_t in_a = (lo + HUGE - 1) & ~(HUGE - 1), in_e = hi & ~(HUGE - 1);
  uintptr_t a = lo & ~(HUGE - 1), e = (hi + HUGE - 1) & ~(HUGE - 1);
  if (!comm->set.thp || bytes < HUGE / 2)
    return 0;
  if (covered(lo, hi, a) < HUGE / 2)
    a += HUGE;
  if (e > a && covered(lo, hi, e - HUGE) < HUGE / 2)
    e -= HUGE;
  if (e <= a)
    return 0;
  pthread_mutex_lock(&lock);
  int go = due(a, e);
  pthread_mutex_unlock(&lock);
  if (!go)
    return 0;
  int64_t t0 = rcc_now_ns();
  int rc = madvise((void *)a, e - a, MADV_COLLAPSE);
  int err = rc == 0 ? 0 : errno;
  /* An end page may reach past the buffer's mapping (ENOMEM: a hole) or
   * into one that cannot be collapsed (EINVAL): the kernel did the others;
   * the pages inside are what must be huge. */
  if (err != 0 && (a != in_a || e != in_e) && in_e > in_a &&
      madvise((void *)in_a, in_e - in_a, MADV_COLLAPSE) == 0)
    err = 0;
  int64_t us = (rcc_now_ns() - t0) / 1000;
  pthread_mutex_lock(&lock);
  if (err != 0 && !transient(err)) /* not this memory (a file,
                                       NOHUGEPAGE), or a kernel without it */
    never_again(a, e);
  int first = !told;
  told = 1;
  pthread_mutex_unlock(&lock);
  if (first)
    RCC_INFO(comm->rank, "huge pages for buffers peers read in place: "
             "madvise(MADV_COLLAPSE) of %zu MiB at %p: %s (%lld us)%s",
             (size_t)((e - a) >> 20), (void *)a,
             err == 0 ? "done" : strerror(err), (long long)us,
             err == 0 || transient(err) ? "" : "; not tried again on it");
  else
    RCC_TRACE(comm->rank, "madvise(MADV_COLLAPSE) of %zu MiB at %p: %s "
              "(%lld us)", (size_t)((e - a) >> 20), (void *)a,
              err == 0 ? "done" : strerror(err), (long long)us);
  return err == 0 ? 1 : -err;
}
