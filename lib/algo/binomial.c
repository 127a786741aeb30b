/*
 * binomial.c - Gather and Scatter over a binomial tree (the tuner's choice
 * for small messages; direct.c has the direct ones for large).
 *
 * Ranks are numbered relative to the root, v = (rank - root) mod n. Rank v
 * > 0 has the parent v - lowbit(v); its children are v + 2^j for 2^j <
 * lowbit(v) (the root: every 2^j < n) below n, and its subtree is the ranks
 * v .. v + span(v) - 1, span(v) = min(lowbit(v), n - v) (rcc_binomial_span,
 * schedule.h). A subtree's blocks are contiguous in relative order, so a
 * rank moves its whole subtree to or from its parent as one range, in
 * slot-sized pieces: for B bytes a block that fit a slot, one message per
 * edge.
 *
 *   Gather   a rank copies its own block to the start of its buffer (a leaf
 *            sends straight from its input), receives each child's subtree
 *            after it (smallest child first), then sends the whole range to
 *            its parent. The root receives into its output directly.
 *   Scatter  the other way: a rank receives its subtree's range from its
 *            parent, sends each child its part (largest first), and keeps
 *            its own block.
 *
 * A rank other than the root with children works in a scratch buffer of
 * span(v) blocks that the caller provides as dst (gather) or dst (scatter,
 * whose own block the caller then copies out: coll/vcoll.c); the root works
 * in the user's buffers, where relative block v is rank (v + root) mod n's:
 * a range that passes rank n-1 is cut there into two, on both ends of an
 * edge alike (at W = (n - root) blocks), so each piece is contiguous in the
 * root's buffer.
 *
 * With S = n*B (the root's buffer): ceil(log2 n) messages on the critical
 * path; the root's edges carry (n-1)/n*S, and every byte that passes a rank
 * between its owner and the root is copied into and out of a slot once more
 * (on average (ceil(log2 n) - 1)/2 times):
 *   T = ceil(log2 n)*alpha + (n-1)/n*S*(1 + (ceil(log2 n) - 1)/2)*beta
 */
#include "algorithms.h"
#include "schedule.h"

void rcc_binomial_terms(int coll, int n, double S, double C,
                        struct rcc_cost_terms *t) {
  double f = n > 0 ? (n - 1.0) / n : 0, L = rcc_ceil_log2(n);
  double extra = L > 1 ? (L - 1) / 2 : 0;
  (void)coll, (void)C;
  rcc_set_terms(t, L, f * S * (1 + extra), 0, f * S);
}

/* Pieces of the relative range [lo, hi) (elements), cut at w and into
 * chunks of c: how many, and piece j's start and length. */
RCC_HD static uint64_t bino_npieces(size_t lo, size_t hi, size_t w, size_t c) {
  size_t cut = lo < w && w < hi ? w : hi;
  return rcc_div_up(cut - lo, c) + rcc_div_up(hi - cut, c);
}
RCC_HD static void bino_piece(size_t lo, size_t hi, size_t w, size_t c,
                              uint64_t j, size_t *off, size_t *len) {
  size_t cut = lo < w && w < hi ? w : hi;
  uint64_t first = rcc_div_up(cut - lo, c);
  size_t start = j < first ? lo : cut, end = j < first ? cut : hi;
  uint64_t k = j < first ? j : j - first;
  *off = start + (size_t)k * c;
  *len = rcc_min_sz(c, end - *off);
}

/* Where relative element e lies in a rank's buffer: the root's is the
 * user's, in rank order; another rank's starts with its own block. */
RCC_HD static size_t bino_at(const struct rcc_plan *p, int v, size_t e) {
  size_t all = (size_t)p->nranks * p->count;
  if (v != 0)
    return e - (size_t)v * p->count;
  e += (size_t)p->root * p->count;
  return e >= all ? e - all : e;
}

RCC_HD static int bino_rel(const struct rcc_plan *p) {
  return rcc_mod_n((long)p->rank - p->root, p->nranks);
}

/* The sections of a rank's steps, in order: its own block (gather: a copy,
 * unless it is a leaf), its parent's range (scatter: receive), one per
 * child, its parent's range (gather: send), its own block (scatter, the
 * root: a copy). Children in the order the collective takes them. */
struct bino_section {
  int kind;   /* enum rcc_step_kind */
  int peer;   /* rank, or -1 */
  size_t lo, hi; /* the relative range */
};

/* Section k of rank v's steps; 0 past the last. */
RCC_HD static int bino_section(const struct rcc_plan *p, int v, int k,
                               struct bino_section *sec) {
  int n = p->nranks, gather = p->coll == RCC_COLL_GATHER;
  int span = rcc_binomial_span(n, v), low = v == 0 ? n : (v & -v);
  int nchild = 0;
  size_t B = p->count;
  while ((1 << nchild) < low && v + (1 << nchild) < n)
    nchild++;
  int parent = v == 0 ? -1 : (v - (v & -v) + p->root) % n;
  int first = gather ? (v == 0 || span > 1) : v != 0;
  sec->lo = (size_t)v * B;
  sec->hi = sec->lo + (size_t)span * B;
  if (k < first) {
    sec->kind = gather ? RCC_STEP_COPY : RCC_STEP_RECV;
    sec->peer = gather ? -1 : parent;
    if (gather)
      sec->hi = sec->lo + B;
    return 1;
  }
  k -= first;
  if (k < nchild) {
    int j = gather ? k : nchild - 1 - k, c = v + (1 << j);
    sec->kind = gather ? RCC_STEP_RECV : RCC_STEP_SEND;
    sec->peer = (c + p->root) % n;
    sec->lo = (size_t)c * B;
    sec->hi = sec->lo + (size_t)rcc_binomial_span(n, c) * B;
    return 1;
  }
  k -= nchild;
  if (k == 0 && gather && v != 0) {
    sec->kind = RCC_STEP_SEND;
    sec->peer = parent;
    return 1;
  }
  if (k == 0 && !gather && v == 0) {
    sec->kind = RCC_STEP_COPY;
    sec->peer = -1;
    sec->hi = sec->lo + B;
    return 1;
  }
  return 0;
}

RCC_HD static uint64_t bino_section_steps(const struct rcc_plan *p,
                                          const struct bino_section *sec) {
  if (sec->kind == RCC_STEP_COPY)
    return 1;
  return bino_npieces(sec->lo, sec->hi,
                      (size_t)(p->nranks - p->root) * p->count,
                      p->chunk_elems);
}

RCC_HD void rcc_plan_binomial(struct rcc_plan *p) {
  struct bino_section sec;
  int v = bino_rel(p);
  p->sched = RCC_SCHED_BINOMIAL;
  p->alg = RCC_ALG_BINOMIAL;
  p->steps_per_loop = 1;
  p->nsteps = 0;
  if (p->count == 0)
    return;
  for (int k = 0; bino_section(p, v, k, &sec); k++)
    p->nsteps += bino_section_steps(p, &sec);
}

RCC_HD void rcc_binomial_step(const struct rcc_plan *p, uint64_t i,
                              struct rcc_step *s) {
  struct bino_section sec;
  int v = bino_rel(p), gather = p->coll == RCC_COLL_GATHER;
  size_t w = (size_t)(p->nranks - p->root) * p->count, off, len;

  rcc_step_whole(p, s);
  s->kind = RCC_STEP_NONE;
  s->nelem = 0;
  for (int k = 0; bino_section(p, v, k, &sec); k++) {
    uint64_t steps = bino_section_steps(p, &sec);
    if (i >= steps) {
      i -= steps;
      continue;
    }
    s->kind = (uint8_t)sec.kind;
    s->block = rcc_mod_n((long)(sec.lo / (p->count ? p->count : 1)) +
                             p->root, p->nranks);
    if (sec.kind == RCC_STEP_COPY) { /* the own block */
      s->nelem = p->count;
      s->src_off = gather ? 0 : bino_at(p, v, sec.lo);
      s->dst_off = gather ? bino_at(p, v, sec.lo) : 0;
      return;
    }
    bino_piece(sec.lo, sec.hi, w, p->chunk_elems, i, &off, &len);
    s->nelem = len;
    if (sec.kind == RCC_STEP_RECV) {
      s->recv_peer = sec.peer;
      s->dst_off = bino_at(p, v, off);
    } else if (v == 0 || (gather && rcc_binomial_span(p->nranks, v) == 1)) {
      /* the root's input, or a leaf's own block: from src */
      s->send_peer = sec.peer;
      s->src_off = v == 0 ? bino_at(p, v, off) : off - (size_t)v * p->count;
    } else { /* what this rank gathered or received: from dst */
      s->send_peer = sec.peer;
      s->acc = RCC_ACC_DST_IN;
      s->dst_off = bino_at(p, v, off);
    }
    return;
  }
}
