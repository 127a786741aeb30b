/*
 * tsan_sync.h - tells ThreadSanitizer what a FIFO exchange guarantees, for
 * the executors that read peers' buffers in place after one (exec_cma.c,
 * exec_a2av.c, exec_p2p_place.c).
 *
 * Under ThreadSanitizer (make tsan-check runs ranks as threads of one
 * process) the FIFOs that order our reads of peers' buffers are mapped at a
 * different address in each rank, so TSan cannot see that synchronization.
 * Every rank releases this file's object before each FIFO exchange and
 * acquires it after, which tells TSan what the exchange guarantees: whatever
 * a rank did before entering it happens before what any rank does after
 * leaving it. Elsewhere the two macros are nothing.
 */
#ifndef RCC_TSAN_SYNC_H
#define RCC_TSAN_SYNC_H

#if defined(__SANITIZE_THREAD__)
#define RCC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RCC_TSAN 1
#endif
#endif
#ifdef RCC_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char tsan_exchange;
#define TSAN_RELEASE() __tsan_release(&tsan_exchange)
#define TSAN_ACQUIRE() __tsan_acquire(&tsan_exchange)
#else
#define TSAN_RELEASE() ((void)0)
#define TSAN_ACQUIRE() ((void)0)
#endif

#endif /* RCC_TSAN_SYNC_H */
