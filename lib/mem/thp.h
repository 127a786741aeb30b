/*
 * thp.h - transparent huge pages for the user buffers that peers on this
 * host pin by cross-memory attach (thp.c).
 *
 * process_vm_readv / process_vm_writev pin the other process's pages one
 * 4 KiB page at a time; where that memory is mapped by 2 MiB pages the
 * kernel walks and pins 512 times fewer entries, and the same copy runs
 * about 1.4 times as fast on this project's machines (docs/performance.md,
 * "Huge pages for buffers read in place"). A rank whose buffer its peers
 * will read or write in place therefore notes it here before it hands them
 * the address; a range noted a second time (a buffer the program reuses,
 * as a training loop or a benchmark does) is collapsed into huge pages
 * with madvise(MADV_COLLAPSE), which keeps its contents. A range seen only
 * once is left alone: collapsing costs about two copies of it.
 *
 * RINGCC_THP=0 turns it off (per communicator). A range the kernel
 * refuses (kernels before Linux 6.1 have no MADV_COLLAPSE; file mappings,
 * MADV_NOHUGEPAGE) is not tried again while the table remembers it.
 */
#ifndef RCC_THP_H
#define RCC_THP_H

#include <stddef.h>

struct ringcc_comm;

/* Peers will pin [buf, buf + bytes) of this process in this call. What
 * is collapsed: the 2 MiB-aligned pages the range holds at least half of
 * (those inside it, and at each end the page it shares with other memory
 * where it holds half of that page or more: a range of 2 MiB at any start
 * has one, and the peers' pins of a 256 KiB-block AllToAllv at n = 8 then
 * take 2 MiB at a time; docs/performance.md). The rest of such an end
 * page is collapsed with it, its contents kept too, its untouched 4 KiB
 * pages made resident (at most 1 MiB an end); where the end page reaches
 * past the buffer's mapping, the pages inside are collapsed alone.
 * Returns 1 when it collapsed the range now, 0 when it was not due (or is
 * off, or holds no half page), -errno when the kernel refused: EAGAIN,
 * ENOMEM and EBUSY are transient (pages busy, no free huge page, the
 * memory cgroup at its limit; tried again at a later note), the others
 * are not. Callers need not look: a refusal leaves the buffer as it was,
 * and only the speed of the copies depends on it. */
int rcc_thp_note(const struct ringcc_comm *comm, const void *buf,
                 size_t bytes);

#endif /* RCC_THP_H */
