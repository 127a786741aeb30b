/*
 * tree.c - double binary tree AllReduce.
 *
 * Two binary trees over the ring positions, each carrying half of the data.
 * The second tree is the first one mirrored (n even) or shifted by one (n
 * odd), so that the leaves of one tree are interior nodes of the other: no
 * rank is interior in both (for n a power of two; close to it otherwise), and
 * every rank's links carry about the same load.
 *
 * Per tree, in chunks of one slot, pipelined:
 *   up    a leaf sends its input to its parent; an interior rank receives
 *         from its children and sends input op children's partial sums up;
 *         the root ends with the total (and divides for AVG)
 *   down  the root sends the total to its children; an interior rank
 *         receives it into the output and passes it on; a leaf receives it
 * All up steps of both trees come first (chunk by chunk, tree A then tree B),
 * then all down steps. Each result is computed once, at a root, so every rank
 * gets the same bits.
 *
 * With depth d = ceil(log2 n), K chunks of C bytes per tree and S = 2*K*C:
 *   T = 2 * (d + K) * (alpha + C * beta)   ~ 2d*alpha + 2*K*C*beta
 * and each rank sends about 2S in all (half of S up and up to two copies of
 * it down, in each tree), against the ring's 2(n-1)*alpha +
 * 2(n-1)/n*S*beta: fewer latencies (log n instead of n), so it wins for
 * mid-sized messages on many ranks.
 *
 * The tuner's alpha is what one step costs a rank: an interior rank takes
 * two messages in and hands one on per level going up (one in, two on going
 * down), and its schedule runs tree A's step before tree B's, so it charges
 *   T = 3*ceil(log2 n)*alpha + 2*S*beta + S*gamma
 * (the textbook 2d made the tree win 8-byte calls it lost by 3x to
 * one-shot; docs/tuning.md).
 */
#include "algorithms.h"
#include "schedule.h"

void rcc_tree_terms(int coll, int n, double S, double C,
                    struct rcc_cost_terms *t) {
  (void)coll, (void)C;
  rcc_set_terms(t, 3 * rcc_ceil_log2(n), 2 * S, S, 2 * S);
}

/* NCCL's binary tree over 0..n-1: parent of r and its two children. */
RCC_HD static void btree(int n, int r, int *up, int *down0, int *down1) {
  int bit;
  for (bit = 1; bit < n; bit <<= 1)
    if (bit & r)
      break;
  if (r == 0) {
    *up = -1;
    *down0 = -1;
    *down1 = n > 1 ? bit >> 1 : -1;
    return;
  }
  *up = (r ^ bit) | (bit << 1);
  if (*up >= n)
    *up = r ^ bit;
  int lowbit = bit >> 1;
  *down0 = lowbit == 0 ? -1 : r - lowbit;
  *down1 = -1;
  while (lowbit > 0 && *down1 < 0) {
    if (r + lowbit < n)
      *down1 = r + lowbit;
    lowbit >>= 1;
  }
}

/* The second tree: mirrored (n even) or shifted by one (n odd). */
RCC_HD static void dtree(int n, int r, int *up, int *down0, int *down1) {
  int u, d0, d1;
  if (n % 2 == 1) {
    btree(n, (r - 1 + n) % n, &u, &d0, &d1);
    *up = u < 0 ? -1 : (u + 1) % n;
    *down0 = d0 < 0 ? -1 : (d0 + 1) % n;
    *down1 = d1 < 0 ? -1 : (d1 + 1) % n;
  } else {
    btree(n, n - 1 - r, &u, &d0, &d1);
    *up = u < 0 ? -1 : n - 1 - u;
    *down0 = d0 < 0 ? -1 : n - 1 - d0;
    *down1 = d1 < 0 ? -1 : n - 1 - d1;
  }
}

RCC_HD static int nchildren(const struct rcc_plan *p, int t) {
  return (p->state.tree.down[t][0] >= 0) + (p->state.tree.down[t][1] >= 0);
}

RCC_HD void rcc_plan_tree(struct rcc_plan *p) {
  struct rcc_tree_plan *tp = &p->state.tree;
  int n = p->nranks, up, d0, d1;

  p->sched = RCC_SCHED_TREE;
  p->alg = RCC_ALG_TREE;
  for (int t = 0; t < 2; t++) {
    (t == 0 ? btree : dtree)(n, p->pos, &up, &d0, &d1);
    /* Positions to ranks; keep children in order, present ones first. */
    tp->up[t] = up < 0 ? -1 : p->ring[up];
    tp->down[t][0] = d0 >= 0 ? p->ring[d0] : d1 >= 0 ? p->ring[d1] : -1;
    tp->down[t][1] = d0 >= 0 && d1 >= 0 ? p->ring[d1] : -1;
    int kids = nchildren(p, t);
    tp->up_steps[t] = (uint32_t)(kids == 0 ? 1 : kids);
    tp->down_steps[t] = (uint32_t)(kids == 0 ? 1 : kids);
  }
  size_t half = (p->count + 1) / 2;
  uint64_t chunks = (half + p->chunk_elems - 1) / p->chunk_elems;
  p->steps_per_loop = chunks; /* chunks per tree */
  p->nsteps = chunks * (tp->up_steps[0] + tp->up_steps[1] +
                        tp->down_steps[0] + tp->down_steps[1]);
}

/* Tree t's share of chunk k: tree 0 the first half, tree 1 the rest. */
RCC_HD static void tree_chunk(const struct rcc_plan *p, int t, uint64_t k,
                              struct rcc_step *s) {
  size_t half = (p->count + 1) / 2;
  size_t base = t == 0 ? 0 : half, end = t == 0 ? half : p->count;
  size_t off = rcc_min_sz(base + (size_t)k * p->chunk_elems, end);
  s->src_off = s->dst_off = off;
  s->nelem = rcc_min_sz(p->chunk_elems, end - off);
  s->block = t;
}

/* Up step j of tree t: receive children's partial sums, send ours up. */
RCC_HD static void up_step(const struct rcc_plan *p, int t, uint32_t j,
                           struct rcc_step *s) {
  int kids = nchildren(p, t), parent = p->state.tree.up[t];
  int last = (int)j == kids - 1;

  if (kids == 0) {
    s->kind = RCC_STEP_SEND;
    s->send_peer = parent;
    return;
  }
  s->recv_peer = p->state.tree.down[t][j];
  /* the first child reduces with the input, later ones with the partial
   * sum kept in the output */
  s->acc = j > 0 ? RCC_ACC_DST_IN : RCC_ACC_IN_SRC;
  if (!last) {
    s->kind = RCC_STEP_RECV_REDUCE_COPY;
  } else if (parent >= 0) {
    s->kind = RCC_STEP_RECV_REDUCE_SEND;
    s->send_peer = parent;
  } else {
    s->kind = RCC_STEP_RECV_REDUCE_COPY;
    s->postop = (uint8_t)p->postop;
  }
}

/* Down step j of tree t: pass the total from the parent to the children. */
RCC_HD static void down_step(const struct rcc_plan *p, int t, uint32_t j,
                             struct rcc_step *s) {
  int kids = nchildren(p, t), parent = p->state.tree.up[t];

  if (kids == 0) {
    s->kind = RCC_STEP_RECV;
    s->recv_peer = parent;
    return;
  }
  s->send_peer = p->state.tree.down[t][j];
  if (j == 0 && parent >= 0) {
    s->kind = RCC_STEP_RECV_COPY_SEND;
    s->recv_peer = parent;
  } else {
    s->kind = RCC_STEP_SEND;
    s->acc = RCC_ACC_DST_IN; /* send the total from the output */
  }
}

RCC_HD void rcc_tree_step(const struct rcc_plan *p, uint64_t i,
                          struct rcc_step *s) {
  const struct rcc_tree_plan *tp = &p->state.tree;
  uint64_t chunks = p->steps_per_loop;
  uint32_t up = tp->up_steps[0] + tp->up_steps[1];
  uint32_t down = tp->down_steps[0] + tp->down_steps[1];
  int is_up = i < chunks * up;
  uint64_t rel = is_up ? i : i - chunks * up;
  uint32_t per = is_up ? up : down,
           first = is_up ? tp->up_steps[0] : tp->down_steps[0];
  uint64_t k = rel / per;
  uint32_t j = (uint32_t)(rel % per);
  int t = j >= first;

  s->postop = 0;
  s->conn_kind = RCC_CONN_COLL;
  s->last = 0;
  s->acc = RCC_ACC_IN_SRC;
  s->send_peer = s->recv_peer = -1;
  tree_chunk(p, t, k, s);
  if (is_up)
    up_step(p, t, t ? j - first : j, s);
  else
    down_step(p, t, t ? j - first : j, s);
}
