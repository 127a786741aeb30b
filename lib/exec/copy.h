/*
 * copy.h - copies into a block's final place (a caller's receive buffer,
 * read by nobody in this call) that are large enough to write around the
 * cache: non-temporal stores skip reading each destination line before
 * writing it, which a plain memcpy does (glibc switches to them only past
 * a threshold it takes from the L3 size the CPU reports, which virtual
 * machines report far above what one guest gets). docs/performance.md has
 * the measurement behind RCC_NT_MIN_FOOTPRINT.
 *
 *   rcc_nt_copy      memcpy with non-temporal stores (memcpy where the
 *                    target has none)
 *   rcc_store_fence  orders them before what follows (before the caller
 *                    gets its buffer back, or a peer is told it is done)
 */
#ifndef RCC_COPY_H
#define RCC_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define RCC_HAVE_NT_STORES 1
#else
#define RCC_HAVE_NT_STORES 0
#endif

/* Outputs are written with non-temporal stores from this much traffic on,
 * all ranks of the call together. */
#define RCC_NT_MIN_FOOTPRINT ((size_t)16 << 20)

#if RCC_HAVE_NT_STORES
static inline void rcc_nt_copy(void *dst, const void *src, size_t bytes) {
  char *d = dst;
  const char *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > bytes)
    head = bytes;
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s);
    __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  memcpy(d, s, bytes);
}
static inline void rcc_store_fence(void) { _mm_sfence(); }
#else
static inline void rcc_nt_copy(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
}
static inline void rcc_store_fence(void) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif

#endif /* RCC_COPY_H */
