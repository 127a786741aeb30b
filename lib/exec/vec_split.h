/*
 * vec_split.h - how an element-wise loop over n elements splits into
 * single elements and whole vector words: the rule reduce.cuh's loops
 * (reductions and copies) follow, written in C so that test_cuda_logic runs
 * it on the CPU for every alignment and tail.
 *
 * The pointers of one call (the inputs a and b, the outputs dst and dst2)
 * move together, so they can be read and written a word at a time only where
 * they agree modulo the word: the word is the widest of 16, 8 and 4 bytes
 * (uint4, uint2, uint32_t) that every pointer agrees on modulo itself and
 * that holds whole elements. Then
 *
 *   [0, head)              single elements, up to the first word boundary
 *   [head, tail_from)      nvec words of word/esize elements each
 *   [tail_from, n)         single elements, fewer than one word's worth
 *
 * word 0: no word fits (pointers disagree modulo 4, or an element is wider
 * than the word they agree on): every element on its own.
 */
#ifndef RCC_VEC_SPLIT_H
#define RCC_VEC_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#ifndef RCC_HD
#define RCC_HD
#endif

struct rcc_vec_split {
  unsigned word;    /* bytes per vector word: 16, 8, 4, or 0 */
  size_t head;      /* elements before the first word */
  size_t nvec;      /* whole words */
  size_t tail_from; /* first element after the last word */
};

/* mix: the bits in which the call's pointers differ from a (OR of a ^ p for
 * each other pointer p); a: the first input; esize: bytes per element. */
RCC_HD static inline struct rcc_vec_split
rcc_vec_split(uintptr_t mix, uintptr_t a, size_t n, size_t esize) {
  struct rcc_vec_split s = {0, n, 0, n};
  unsigned w = 16;
  while (w >= 4 && ((mix & (w - 1)) != 0 || w % esize != 0))
    w /= 2;
  if (w < 4 || (a & (esize - 1)) != 0)
    return s; /* word 0: elements only */
  size_t head = (size_t)((w - (a & (w - 1))) & (w - 1)) / esize;
  head = head < n ? head : n;
  s.word = w;
  s.head = head;
  s.nvec = (n - head) * esize / w;
  s.tail_from = head + s.nvec * (w / esize);
  return s;
}

#endif /* RCC_VEC_SPLIT_H */
