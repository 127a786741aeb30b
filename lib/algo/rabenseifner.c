/*
 * rabenseifner.c - Rabenseifner's AllReduce: a reduce-scatter by recursive
 * halving, then an allgather by recursive doubling.
 *
 * With p the largest power of two <= n and L = log2 p, among the first p
 * ranks: at halving step k (0 <= k < L) rank r and its partner r ^ 2^k hold
 * the same range of the vector; each keeps one half (the lower half where
 * bit k of r is 0), sends the other half to its partner and reduces the
 * partner's copy of its own half into it. After L steps rank r holds the
 * total of its 1/p of the vector. The doubling steps run the same pairs in
 * reverse: each sends the range it holds and receives its partner's, until
 * every rank holds the whole total. Ranks p..n-1 first hand their input to
 * rank r - p (which folds it in) and get the total back at the end (Thakur,
 * Rabenseifner and Gropp 2005; Open MPI's "rabenseifner").
 *
 * Like the ring, each rank sends 2(p-1)/p S bytes (plus 2S for a fold), but
 * in 2L exchanges with one partner each instead of 2(n-1) steps along the
 * ring, and an exchange waits only for its partner: where ranks outnumber
 * CPUs (every step of the ring waits for the whole ring to be scheduled)
 * and each message costs system calls (TCP), that is fewer and shorter
 * waits.
 *
 *   T = (2L [+ 2]) * alpha + (2(p-1)/p S [+ 2S]) * beta
 *       + ((p-1)/p S [+ S]) * gamma
 *
 * Each exchange moves its half in pieces of one FIFO slot, the sends two
 * pieces ahead of the receives (hd_order; the halves differ by at most one
 * element, so one side may have a piece less: that step is "none"; the
 * partner's count is the mirror image, so both agree on every message).
 *
 * The first combine of a rank reads its input from src and writes dst (the
 * fold, or else the first halving exchange, which also sends from src):
 * the input is never copied into dst first, which out of place cost a read
 * and a write of S per rank before the first byte left.
 *
 * Bitwise agreement: at every combine the lower rank's partial is the left
 * operand (RCC_ACC_DST_IN on the lower rank, RCC_ACC_IN_DST on the upper;
 * at the first combine RCC_ACC_SRC_IN and RCC_ACC_IN_SRC), and each
 * element's total is computed by one rank and copied to the others. In place works as is: dst is written only
 * where nothing is still to be sent from it.
 */
#include "algorithms.h"
#include "fold.h"
#include "schedule.h"

void rcc_rabenseifner_terms(int coll, int n, double S, double C,
                            struct rcc_cost_terms *t) {
  (void)coll, (void)C;
  /* 2 log2 p exchanges of halves among the first p ranks, each rank
   * sending (p-1)/p S per phase; the others fold in (S) and get the total
   * back (S): 2 more steps */
  int pw = 1 << rcc_floor_log2(n), extra = n > 0 && n != pw;
  double fp = n > 0 ? (pw - 1.0) / pw : 0;
  rcc_set_terms(t, 2 * rcc_floor_log2(n) + 2 * extra,
                2 * fp * S + 2 * extra * S, fp * S + extra * S,
                2 * fp * S + extra * S);
}

static RCC_HD uint64_t hd_pieces(size_t elems, size_t chunk) {
  return elems == 0 ? 0 : (elems + chunk - 1) / chunk;
}

/* The range rank r and its partner share before halving step k. */
static RCC_HD void hd_range(size_t count, int r, int k, size_t *lo,
                            size_t *hi) {
  *lo = 0;
  *hi = count;
  for (int b = 0; b < k; b++) {
    size_t mid = *lo + (*hi - *lo) / 2;
    if ((r >> b) & 1)
      *lo = mid;
    else
      *hi = mid;
  }
}

/* The halves of that range: the one rank r keeps and the one it sends. */
static RCC_HD void hd_halves(size_t count, int r, int k, size_t *keep_off,
                             size_t *keep_n, size_t *send_off,
                             size_t *send_n) {
  size_t lo, hi;
  hd_range(count, r, k, &lo, &hi);
  size_t mid = lo + (hi - lo) / 2;
  if ((r >> k) & 1) {
    *keep_off = mid, *keep_n = hi - mid;
    *send_off = lo, *send_n = mid - lo;
  } else {
    *keep_off = lo, *keep_n = mid - lo;
    *send_off = mid, *send_n = hi - mid;
  }
}

/* Steps of the exchange at level k (halving or doubling alike). */
static RCC_HD uint64_t hd_exchange_steps(const struct rcc_plan *p, int k) {
  size_t ko, kn, so, sn;
  hd_halves(p->count, p->rank, k, &ko, &kn, &so, &sn);
  uint64_t a = hd_pieces(kn, p->chunk_elems), b = hd_pieces(sn, p->chunk_elems);
  return 2 * (a > b ? a : b);
}

RCC_HD void rcc_plan_rabenseifner(struct rcc_plan *p) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n), extra = n - pw;
  uint64_t whole = hd_pieces(p->count, p->chunk_elems), steps = 0;
  p->sched = RCC_SCHED_RABENSEIFNER;
  p->alg = RCC_ALG_RABENSEIFNER;
  if (r >= pw) {
    steps = 2 * whole; /* hand the input over, get the total back */
  } else {
    steps = (n == 1) + (r < extra ? 2 * whole : 0); /* copy; fold; back */
    for (int k = 0; k < rcc_log2_of(pw); k++)
      steps += 2 * hd_exchange_steps(p, k);
  }
  p->steps_per_loop = steps;
  p->nsteps = p->count == 0 ? 0 : steps;
}

/* Piece j of the range [off, off + n) as a step's offsets and size; "none"
 * when the range has fewer pieces. */
static RCC_HD int hd_piece(const struct rcc_plan *p, size_t off, size_t n,
                           uint64_t j, struct rcc_step *s) {
  size_t start = (size_t)j * p->chunk_elems;
  if (start >= n) {
    s->kind = RCC_STEP_NONE;
    s->nelem = 0;
    return 0;
  }
  s->src_off = s->dst_off = off + start;
  s->nelem = n - start < p->chunk_elems ? n - start : p->chunk_elems;
  return 1;
}

/* The order of an exchange of P pieces each way: the first HD_AHEAD sends,
 * then receive j and send j + HD_AHEAD in turn, then the last receives. A
 * send runs ahead of the receive it waits for, so the partner's next piece
 * is already on its way while this rank reduces the last one (with one send
 * per receive the two ranks took turns). HD_AHEAD <= 2 fits the smallest
 * FIFO (RINGCC_NSLOTS >= 2). Returns 1 for a send; *piece is its index. */
#define HD_AHEAD 2
static RCC_HD int hd_order(uint64_t P, uint64_t t, uint64_t *piece) {
  uint64_t ahead = P < HD_AHEAD ? P : HD_AHEAD, both = 2 * (P - ahead);
  if (t < ahead)
    return *piece = t, 1;
  uint64_t u = t - ahead;
  if (u < both) {
    *piece = u % 2 ? ahead + u / 2 : u / 2;
    return (int)(u % 2);
  }
  *piece = P - ahead + (u - both);
  return 0;
}

RCC_HD void rcc_rabenseifner_step(const struct rcc_plan *p, uint64_t i,
                                  struct rcc_step *s) {
  int n = p->nranks, r = p->rank, pw = rcc_pow2_floor(n), extra = n - pw;
  int logp = rcc_log2_of(pw);
  uint64_t whole = hd_pieces(p->count, p->chunk_elems);

  uint64_t j, piece;

  rcc_step_whole(p, s);
  int fold = rcc_fold_before(p, i, whole, s, &j, &piece);
  if (fold == RCC_FOLD_STEP)
    hd_piece(p, 0, p->count, piece, s);
  if (fold != RCC_FOLD_NONE)
    return;
  for (int phase = 0; phase < 2; phase++) {
    for (int t = 0; t < logp; t++) {
      int k = phase == 0 ? t : logp - 1 - t, q = r ^ (1 << k);
      uint64_t len = hd_exchange_steps(p, k);
      if (j >= len) {
        j -= len;
        continue;
      }
      size_t ko, kn, so, sn;
      int first = phase == 0 && k == 0 && r >= extra; /* partial: src */
      hd_halves(p->count, r, k, &ko, &kn, &so, &sn);
      s->acc = first ? RCC_ACC_IN_SRC : RCC_ACC_DST_IN;
      if (hd_order(len / 2, j, &piece)) {
        /* halving: the half we give up; doubling: ours */
        s->kind = RCC_STEP_SEND;
        s->send_peer = q;
        if (phase == 0)
          hd_piece(p, so, sn, piece, s);
        else
          hd_piece(p, ko, kn, piece, s);
      } else if (phase == 0) { /* the partner's copy of our half */
        s->kind = RCC_STEP_RECV_REDUCE_COPY;
        s->recv_peer = q;
        s->acc = r < q ? (first ? RCC_ACC_SRC_IN : RCC_ACC_DST_IN)
                       : (first ? RCC_ACC_IN_SRC : RCC_ACC_IN_DST);
        s->postop = (uint8_t)(k == logp - 1 && p->postop);
        hd_piece(p, ko, kn, piece, s);
      } else { /* the partner's total of its half */
        s->kind = RCC_STEP_RECV;
        s->recv_peer = q;
        s->acc = RCC_ACC_IN_SRC;
        hd_piece(p, so, sn, piece, s);
      }
      return;
    }
  }
  rcc_fold_back_step(r, pw, s); /* the total to rank r + p */
  hd_piece(p, 0, p->count, j, s);
}
