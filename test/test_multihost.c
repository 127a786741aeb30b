/*
 * test_multihost.c - ranks on several virtual hosts, through the real
 * bootstrap, shared memory inside a host and the TCP transport between
 * hosts.
 *
 * Every test builds its own virtual network (netns.h): a bridge in a
 * "switch" namespace and H host namespaces with eth0 = 198.18.0.(k+1)/24,
 * each host with its own hostname, PID and mount namespaces. Ranks are
 * processes started on their host, initialised from the environment
 * (RINGCC_ROOT = host 0's address) as a launcher would, with
 * RINGCC_SOCKET_IFNAME=eth0. Layouts are written HxP: H hosts, P ranks
 * each, host-major (ranks of a host contiguous) unless "interleaved" (rank r
 * on host r % H).
 *
 *   topology     RINGCC_DEBUG=INFO output: the ring keeps each host's ranks
 *                contiguous (also interleaved); edges inside a host are SHM,
 *                between hosts NET/Socket/eth0.
 *   collectives  every collective checked element by element (exact inputs
 *                from the harness) on 2x1, 2x2, 3x2, 4x1, 2x3 and 3x2
 *                interleaved: all 10 datatypes and 5 ops across the layouts,
 *                counts 0, 1, 13, 1031, 65537 out of place and in both
 *                in-place forms, and one case of about a million elements
 *                per collective; then 3x2 with each algorithm forced.
 *   split        ringcc_comm_split_type(RINGCC_SPLIT_HOST): one communicator
 *                per host with the right ranks; a split across hosts too.
 *   examples     build/examples/parallel_groups, 8 ranks on 2 hosts.
 *   errors       an unreachable rendezvous fails in time and names the
 *                address; a rank SIGKILLed on another host during a stream of
 *                allreduces makes the others fail within seconds naming it;
 *                a stranger at the rendezvous does not stop the ranks; a peer
 *                that leaves cleanly (goodbye, then close) right after its
 *                last send is no failure for the ranks still running.
 *   vanishing    a host whose link goes down, or whose packets are dropped,
 *                mid-allreduce: every other rank fails within 10 s naming
 *                it; a link down for 2 s: every rank carries on, exactly;
 *                1 % loss and 50 +- 20 ms delay: random collectives exact;
 *                8 CPU hogs: no live peer taken for a dead one; a sniffer
 *                on the switch never sees the secret or a key. The suite
 *                "measure" repeats these for docs/reliability.md
 *                (scripts/measure-failures.sh).
 *
 * docs/testing.md describes the virtual hosts and how to run this by hand.
 *
 * Needs root; otherwise (or when namespaces cannot be made) every test is
 * skipped with the reason. Each test deletes its namespaces when it ends
 * (.fini) and first deletes any that a killed run left behind.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "harness.h"
#include "netns.h"
#include "soak/random_coll.h"

/* ---- the virtual network of a test ---------------------------------------- */

static ns_net_t g_net;

static void net_down(void) { ns_net_destroy(&g_net); }

/* Builds nhosts virtual hosts, or skips the test saying why. */
static void net_up(int nhosts) {
  char why[600];
  if (!ns_supported(why, sizeof why))
    cr_skip_test("%s", why);
  ns_cleanup_stale();
  if (!ns_net_create(&g_net, nhosts, why, sizeof why))
    cr_skip_test("cannot build %d virtual hosts: %s", nhosts, why);
}

TestSuite(multihost, .fini = net_down);

typedef struct {
  int nhosts, per_host, nranks;
  bool interleaved;
  int host_of[NS_MAX_RANKS];
  char name[32];
} layout_t;

static layout_t make_layout(int nhosts, int per_host, bool interleaved) {
  layout_t l = {.nhosts = nhosts, .per_host = per_host,
                .nranks = nhosts * per_host, .interleaved = interleaved};
  ns_layout(nhosts, per_host, interleaved, l.host_of);
  snprintf(l.name, sizeof l.name, "%dx%d%s", nhosts, per_host,
           interleaved ? " interleaved" : "");
  return l;
}

/* Collectives fail with a library message well before a run's deadline. */
static ringcc_config_t test_config(int64_t timeout_ms) {
  ringcc_config_t c = RINGCC_CONFIG_INIT;
  c.timeout_ms = timeout_ms;
  return c;
}

static void xbuf(h_buf_t *b, size_t bytes) {
  if (!h_buf_alloc(b, bytes)) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    abort();
  }
}

/* ---- topology ---------------------------------------------------------------- */

static int body_one_allreduce(h_ctx_t *ctx) {
  int64_t v = ctx->rank, want = (int64_t)ctx->nranks * (ctx->nranks - 1) / 2;
  if (!h_ok(ctx, ringcc_allreduce(RINGCC_IN_PLACE, &v, 1, RINGCC_INT64,
                                  RINGCC_SUM, ctx->comm, NULL),
            "ringcc_allreduce"))
    return 1;
  return v == want ? 0 : h_fail(ctx, "allreduce gave %lld, expected %lld",
                                (long long)v, (long long)want);
}

/* The ints after "ring 0 order: " in out; returns how many (-1: no line). */
static int parse_ring_order(const char *out, int *order, int max) {
  const char *p = strstr(out, "ring 0 order: ");
  if (p == NULL)
    return -1;
  p += strlen("ring 0 order: ");
  int n = 0;
  while (n < max && *p != '\n' && *p != '\0') {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p)
      break;
    order[n++] = (int)v;
    p = end;
  }
  return n;
}

static void check_topology(const layout_t *L, const ns_result_t *res) {
  int n = L->nranks, order[NS_MAX_RANKS], pos[NS_MAX_RANKS];
  const char *out0 = res->output[0] ? res->output[0] : "";
  cr_assert_eq(parse_ring_order(out0, order, n), n,
               "%s: rank 0 printed no (or a short) \"ring 0 order:\" line at "
               "RINGCC_DEBUG=INFO; its output:\n%s", L->name, out0);
  for (int p = 0; p < n; p++) {
    cr_assert(order[p] >= 0 && order[p] < n, "%s: ring order has rank %d",
              L->name, order[p]);
    pos[order[p]] = p;
  }
  /* Each host's ranks form one run: exactly nhosts - 1 host changes. */
  int changes = 0;
  for (int p = 0; p + 1 < n; p++)
    changes += L->host_of[order[p]] != L->host_of[order[p + 1]];
  char ring[128] = "";
  for (int p = 0, off = 0; p < n; p++)
    off += snprintf(ring + off, sizeof ring - (size_t)off, "%s%d(host%d)",
                    p ? " " : "", order[p], L->host_of[order[p]]);
  cr_assert_eq(changes, L->nhosts - 1,
               "%s: the ring %s does not keep each host's ranks contiguous",
               L->name, ring);

  for (int r = 0; r < n; r++) {
    const char *out = res->output[r] ? res->output[r] : "";
    int other[NS_MAX_RANKS];
    cr_assert_eq(parse_ring_order(out, other, n), n,
                 "%s: rank %d printed no ring order", L->name, r);
    cr_assert_arr_eq(other, order, sizeof(int) * (size_t)n,
                     "%s: rank %d has another ring order than rank 0 (%s)",
                     L->name, r, ring);
    char pattern[32], via[64] = "";
    int from = -1, to = -1;
    snprintf(pattern, sizeof pattern, "ring 0: %d -> ", r);
    const char *line = strstr(out, pattern);
    cr_assert_not_null(line, "%s: rank %d printed no \"%s\" line; its output:"
                       "\n%s", L->name, r, pattern, out);
    cr_assert_eq(sscanf(line, "ring 0: %d -> %d via %63s", &from, &to, via), 3,
                 "%s: cannot parse rank %d's line: %.80s", L->name, r, line);
    int next = order[(pos[r] + 1) % n];
    cr_assert_eq(to, next, "%s: rank %d sends to rank %d, but its ring "
                 "successor is %d (%s)", L->name, r, to, next, ring);
    bool same_host = L->host_of[r] == L->host_of[to];
    if (same_host)
      cr_assert_str_eq(via, "SHM", "%s: edge %d -> %d inside host%d goes "
                       "via %s, not SHM", L->name, r, to, L->host_of[r], via);
    else
      cr_assert_str_eq(via, "NET/Socket/" NS_IFNAME,
                       "%s: edge %d -> %d from host%d to host%d goes via %s, "
                       "not NET/Socket/" NS_IFNAME, L->name, r, to,
                       L->host_of[r], L->host_of[to], via);
  }
}

static void topology(int nhosts, int per_host, bool interleaved) {
  layout_t L = make_layout(nhosts, per_host, interleaved);
  net_up(nhosts);
  static const char *const env[] = {"RINGCC_DEBUG=INFO", NULL};
  ringcc_config_t cfg = test_config(30000);
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_one_allreduce, .config = &cfg, .env = env,
                     .capture = true, .timeout_s = 60, .name = L.name};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  cr_assert(ok, "%s: the ranks failed (see above)", L.name);
  check_topology(&L, &res);
  ns_result_free(&res);
}

Test(multihost, topology_2x2, .timeout = 60) { topology(2, 2, false); }
Test(multihost, topology_2x2_interleaved, .timeout = 60) {
  topology(2, 2, true);
}
Test(multihost, topology_3x2_interleaved, .timeout = 60) {
  topology(3, 2, true);
}

/* ---- collectives ---------------------------------------------------------------- */

enum coll {
  C_ALLREDUCE,
  C_REDUCE_SCATTER,
  C_ALLGATHER,
  C_BCAST,
  C_REDUCE,
  C_ALLTOALL,
  C_SENDRECV,
  C_BARRIER,
  C_NUM
};
static const char *const coll_names[C_NUM] = {
    "allreduce", "reduce_scatter", "allgather", "bcast",
    "reduce",    "alltoall",       "sendrecv",  "barrier"};

/* Out of place; in place as NCCL writes it (sendbuf == recvbuf or the own
 * block of it); in place as MPI writes it (RINGCC_IN_PLACE). */
enum mode { M_OOP, M_NCCL, M_MPI };
static const char *const mode_names[] = {"out-of-place", "in-place(nccl)",
                                         "in-place(mpi)"};

typedef struct {
  enum coll coll;
  ringcc_datatype_t dt;
  ringcc_op_t op;
  size_t count; /* per rank; per block for reduce_scatter/allgather/alltoall */
  enum mode mode;
  int root;  /* bcast, reduce; the shift for sendrecv */
  uint64_t salt;
} case_t;

typedef struct {
  ringcc_datatype_t dt;
  ringcc_op_t op;
} dtop_t;

/* What one layout runs. */
typedef struct {
  layout_t layout;
  dtop_t reductions[3]; /* allreduce, reduce_scatter, reduce */
  int nreductions;
  ringcc_datatype_t move_dt; /* allgather, bcast, alltoall, sendrecv */
  uint32_t *arrivals;        /* shared: barrier arrivals */
  int algo;                  /* config 'algo'; -1: the library picks */
} plan_t;

static const size_t counts[] = {0, 1, 13, 1031, 65537};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])
#define BIG_COUNT ((size_t)1 << 20) /* elements in the "big" case */
#define MAX_FAILED_CASES 5

typedef struct {
  h_ctx_t *h;
  const plan_t *plan;
  const case_t *k;
  char what[200];
  int rc; /* 0 ok, 1 wrong result, -1 the call failed */
} check_t;

static void describe(check_t *ck) {
  const case_t *k = ck->k;
  int n = snprintf(ck->what, sizeof ck->what, "%s: %s %s",
                   ck->plan->layout.name, coll_names[k->coll],
                   h_dt_name(k->dt));
  if (k->coll == C_ALLREDUCE || k->coll == C_REDUCE_SCATTER ||
      k->coll == C_REDUCE)
    n += snprintf(ck->what + n, sizeof ck->what - (size_t)n, " %s",
                  h_op_name(k->op));
  n += snprintf(ck->what + n, sizeof ck->what - (size_t)n, " count=%zu %s",
                k->count, mode_names[k->mode]);
  if (k->coll == C_BCAST || k->coll == C_REDUCE)
    snprintf(ck->what + n, sizeof ck->what - (size_t)n, " root=%d", k->root);
  else if (k->coll == C_SENDRECV)
    snprintf(ck->what + n, sizeof ck->what - (size_t)n, " shift=%d", k->root);
}

static void check_call(check_t *ck, ringcc_result_t r, const char *fn) {
  if (r == RINGCC_SUCCESS)
    return;
  h_fail(ck->h, "%s: %s returned %d (%s): %s", ck->what, fn, (int)r,
         ringcc_strerror(r), ringcc_comm_last_error(ck->h->comm));
  ck->rc = -1;
}

static void check_elems(check_t *ck, const char *part, const void *got,
                        const void *expected, size_t count) {
  char what[320];
  snprintf(what, sizeof what, "%s: %s", ck->what, part);
  if (ck->rc == 0 && !h_check_elems(ck->h, what, ck->k->dt, got, expected,
                                    count))
    ck->rc = 1;
}

static void check_guards(check_t *ck, const char *part, const h_buf_t *b) {
  char what[320];
  snprintf(what, sizeof what, "%s: %s", ck->what, part);
  if (ck->rc == 0 && b->p != NULL && !h_buf_guards_ok(ck->h, what, b))
    ck->rc = 1;
}

static void case_allreduce(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  size_t bytes = k->count * h_dt_size(k->dt);
  void *input = h_xmalloc(bytes), *expect = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, h->rank, 0, k->salt, input, k->count);
  h_fill_expected(k->dt, k->op, h->nranks, 0, k->salt, expect, k->count);
  h_buf_t send = {0}, recv = {0};
  xbuf(&recv, bytes);
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&send, bytes);
    memcpy(send.p, input, bytes);
    r = ringcc_allreduce(send.p, recv.p, k->count, k->dt, k->op, h->comm, NULL);
  } else {
    memcpy(recv.p, input, bytes);
    r = ringcc_allreduce(k->mode == M_NCCL ? recv.p : RINGCC_IN_PLACE, recv.p,
                         k->count, k->dt, k->op, h->comm, NULL);
  }
  check_call(ck, r, "ringcc_allreduce");
  check_elems(ck, "result", recv.p, expect, k->count);
  check_guards(ck, "recvbuf", &recv);
  if (send.p != NULL)
    check_elems(ck, "sendbuf changed", send.p, input, k->count);
  check_guards(ck, "sendbuf", &send);
  h_buf_free(&send), h_buf_free(&recv), free(input), free(expect);
}

static void case_reduce_scatter(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  size_t es = h_dt_size(k->dt), bytes = k->count * es;
  size_t total = (size_t)h->nranks * k->count, mine = (size_t)h->rank * k->count;
  void *input = h_xmalloc(total * es), *expect = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, h->rank, 0, k->salt, input, total);
  h_fill_expected(k->dt, k->op, h->nranks, mine, k->salt, expect, k->count);
  h_buf_t send = {0}, recv = {0};
  xbuf(&send, total * es);
  memcpy(send.p, input, total * es);
  const void *result;
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&recv, bytes);
    r = ringcc_reduce_scatter(send.p, recv.p, k->count, k->dt, k->op, h->comm,
                              NULL);
    result = recv.p;
  } else if (k->mode == M_NCCL) {
    r = ringcc_reduce_scatter(send.p, send.p + mine * es, k->count, k->dt,
                              k->op, h->comm, NULL);
    result = send.p + mine * es;
  } else {
    r = ringcc_reduce_scatter(RINGCC_IN_PLACE, send.p, k->count, k->dt, k->op,
                              h->comm, NULL);
    result = send.p;
  }
  check_call(ck, r, "ringcc_reduce_scatter");
  check_elems(ck, "result", result, expect, k->count);
  check_guards(ck, "recvbuf", &recv);
  check_guards(ck, "sendbuf", &send);
  if (k->mode == M_OOP)
    check_elems(ck, "sendbuf changed", send.p, input, total);
  h_buf_free(&send), h_buf_free(&recv), free(input), free(expect);
}

static void case_allgather(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  size_t n = (size_t)h->nranks, bytes = k->count * h_dt_size(k->dt);
  char *expect = h_xmalloc(n * bytes);
  for (size_t i = 0; i < n; i++)
    h_fill_pattern(k->dt, i, 0, k->salt, expect + i * bytes, k->count);
  const char *mine = expect + (size_t)h->rank * bytes;
  h_buf_t send = {0}, recv = {0};
  xbuf(&recv, n * bytes);
  h_buf_scribble(&recv, k->salt);
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&send, bytes);
    memcpy(send.p, mine, bytes);
    r = ringcc_allgather(send.p, recv.p, k->count, k->dt, h->comm, NULL);
  } else {
    unsigned char *own = recv.p + (size_t)h->rank * bytes;
    memcpy(own, mine, bytes);
    r = ringcc_allgather(k->mode == M_NCCL ? own : RINGCC_IN_PLACE, recv.p,
                         k->count, k->dt, h->comm, NULL);
  }
  check_call(ck, r, "ringcc_allgather");
  check_elems(ck, "result", recv.p, expect, n * k->count);
  check_guards(ck, "recvbuf", &recv);
  if (send.p != NULL)
    check_elems(ck, "sendbuf changed", send.p, mine, k->count);
  h_buf_free(&send), h_buf_free(&recv), free(expect);
}

static void case_bcast(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  size_t bytes = k->count * h_dt_size(k->dt);
  void *expect = h_xmalloc(bytes);
  h_fill_pattern(k->dt, (uint64_t)k->root, 0, k->salt, expect, k->count);
  h_buf_t buf = {0};
  xbuf(&buf, bytes);
  if (h->rank == k->root)
    memcpy(buf.p, expect, bytes);
  else
    h_buf_scribble(&buf, k->salt + (uint64_t)h->rank);
  check_call(ck, ringcc_bcast(buf.p, k->count, k->dt, k->root, h->comm, NULL),
             "ringcc_bcast");
  check_elems(ck, h->rank == k->root ? "root's buffer changed" : "result",
              buf.p, expect, k->count);
  check_guards(ck, "buf", &buf);
  h_buf_free(&buf), free(expect);
}

static void case_reduce(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  size_t bytes = k->count * h_dt_size(k->dt);
  bool root = h->rank == k->root;
  void *input = h_xmalloc(bytes), *expect = h_xmalloc(bytes);
  h_fill_input(k->dt, k->op, h->rank, 0, k->salt, input, k->count);
  h_fill_expected(k->dt, k->op, h->nranks, 0, k->salt, expect, k->count);
  h_buf_t send = {0}, recv = {0};
  const void *result = NULL;
  ringcc_result_t r;
  if (k->mode == M_MPI && root) {
    xbuf(&recv, bytes);
    memcpy(recv.p, input, bytes);
    r = ringcc_reduce(RINGCC_IN_PLACE, recv.p, k->count, k->dt, k->op, k->root,
                      h->comm, NULL);
    result = recv.p;
  } else if (k->mode == M_NCCL) {
    xbuf(&send, bytes);
    memcpy(send.p, input, bytes);
    r = ringcc_reduce(send.p, send.p, k->count, k->dt, k->op, k->root, h->comm,
                      NULL);
    result = root ? send.p : NULL;
  } else { /* out of place; non-roots pass recvbuf NULL */
    xbuf(&send, bytes);
    memcpy(send.p, input, bytes);
    if (root)
      xbuf(&recv, bytes);
    r = ringcc_reduce(send.p, recv.p, k->count, k->dt, k->op, k->root, h->comm,
                      NULL);
    result = recv.p;
  }
  check_call(ck, r, "ringcc_reduce");
  if (root)
    check_elems(ck, "result", result, expect, k->count);
  if (send.p != NULL && result != send.p)
    check_elems(ck, "sendbuf changed", send.p, input, k->count);
  check_guards(ck, "sendbuf", &send);
  check_guards(ck, "recvbuf", &recv);
  h_buf_free(&send), h_buf_free(&recv), free(input), free(expect);
}

static void case_alltoall(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  size_t n = (size_t)h->nranks, me = (size_t)h->rank;
  size_t bytes = k->count * h_dt_size(k->dt);
  char *input = h_xmalloc(n * bytes), *expect = h_xmalloc(n * bytes);
  for (size_t j = 0; j < n; j++) { /* block j goes from me to j */
    h_fill_pattern(k->dt, me * 64 + j, 0, k->salt, input + j * bytes, k->count);
    h_fill_pattern(k->dt, j * 64 + me, 0, k->salt, expect + j * bytes,
                   k->count);
  }
  h_buf_t send = {0}, recv = {0};
  xbuf(&recv, n * bytes);
  ringcc_result_t r;
  if (k->mode == M_OOP) {
    xbuf(&send, n * bytes);
    memcpy(send.p, input, n * bytes);
    h_buf_scribble(&recv, k->salt);
    r = ringcc_alltoall(send.p, recv.p, k->count, k->dt, h->comm, NULL);
  } else {
    memcpy(recv.p, input, n * bytes);
    r = ringcc_alltoall(k->mode == M_NCCL ? recv.p : RINGCC_IN_PLACE, recv.p,
                        k->count, k->dt, h->comm, NULL);
  }
  check_call(ck, r, "ringcc_alltoall");
  check_elems(ck, "result", recv.p, expect, n * k->count);
  check_guards(ck, "recvbuf", &recv);
  if (send.p != NULL)
    check_elems(ck, "sendbuf changed", send.p, input, n * k->count);
  h_buf_free(&send), h_buf_free(&recv), free(input), free(expect);
}

/* Rank r sends to r + shift and receives from r - shift. Send and receive
 * block until matched, so in each cycle of the permutation the lowest rank
 * receives first and the others send first: the chain unwinds from it. */
static void case_sendrecv(check_t *ck) {
  const case_t *k = ck->k;
  h_ctx_t *h = ck->h;
  int n = h->nranks, s = k->root;
  int to = (h->rank + s) % n, from = (h->rank - s % n + n) % n;
  int leader = h->rank;
  for (int q = to; q != h->rank; q = (q + s) % n)
    leader = q < leader ? q : leader;
  size_t bytes = k->count * h_dt_size(k->dt);
  void *out = h_xmalloc(bytes), *expect = h_xmalloc(bytes);
  h_fill_pattern(k->dt, (uint64_t)h->rank * 64 + (uint64_t)to, 0, k->salt, out,
                 k->count);
  h_fill_pattern(k->dt, (uint64_t)from * 64 + (uint64_t)h->rank, 0, k->salt,
                 expect, k->count);
  h_buf_t in = {0};
  xbuf(&in, bytes);
  ringcc_result_t r = RINGCC_SUCCESS;
  for (int step = 0; step < 2 && r == RINGCC_SUCCESS; step++) {
    bool send_now = (step == 0) != (h->rank == leader);
    r = send_now ? ringcc_send(out, k->count, k->dt, to, h->comm, NULL)
                 : ringcc_recv(in.p, k->count, k->dt, from, h->comm, NULL);
    check_call(ck, r, send_now ? "ringcc_send" : "ringcc_recv");
  }
  check_elems(ck, "received", in.p, expect, k->count);
  check_guards(ck, "recvbuf", &in);
  h_buf_free(&in), free(out), free(expect);
}

/* Round j: rank j % n arrives late; after the barrier every rank must see
 * all n arrivals of the round. */
static void case_barrier(check_t *ck, uint32_t *arrivals, int round) {
  h_ctx_t *h = ck->h;
  if (round % h->nranks == h->rank)
    h_sleep_ms(30);
  __atomic_fetch_add(arrivals, 1, __ATOMIC_SEQ_CST);
  check_call(ck, ringcc_barrier(h->comm, NULL), "ringcc_barrier");
  uint32_t seen = __atomic_load_n(arrivals, __ATOMIC_SEQ_CST);
  uint32_t want = (uint32_t)((round + 1) * h->nranks);
  if (ck->rc == 0 && seen < want) {
    h_fail(h, "%s: left barrier round %d after %u arrivals, before all %u",
           ck->what, round, seen, want);
    ck->rc = 1;
  }
}

/* Runs one case; returns its check result. */
static int run_case(h_ctx_t *h, const plan_t *plan, const case_t *k) {
  check_t ck = {.h = h, .plan = plan, .k = k};
  describe(&ck);
  switch (k->coll) {
  case C_ALLREDUCE: case_allreduce(&ck); break;
  case C_REDUCE_SCATTER: case_reduce_scatter(&ck); break;
  case C_ALLGATHER: case_allgather(&ck); break;
  case C_BCAST: case_bcast(&ck); break;
  case C_REDUCE: case_reduce(&ck); break;
  case C_ALLTOALL: case_alltoall(&ck); break;
  case C_SENDRECV: case_sendrecv(&ck); break;
  default: case_barrier(&ck, plan->arrivals, k->root); break;
  }
  return ck.rc;
}

/* Every family x (its datatypes and ops) x counts x (out of place, in
 * place as NCCL and as MPI write it, where the family has them), then one
 * case of about a million elements per family (one mode, rotating), then
 * barriers. */
static int body_collectives(h_ctx_t *h) {
  const plan_t *plan = h->arg;
  const layout_t *L = &plan->layout;
  int n = h->nranks, failed = 0, ncases = 0;
  int shifts[2] = {1, L->per_host > 1 ? L->per_host : n - 1};
  for (int c = 0; c < C_BARRIER; c++) {
    bool reduces = c == C_ALLREDUCE || c == C_REDUCE_SCATTER || c == C_REDUCE;
    bool blocks = c == C_REDUCE_SCATTER || c == C_ALLGATHER || c == C_ALLTOALL;
    bool modes = c != C_BCAST && c != C_SENDRECV;
    int nvariants = reduces ? plan->nreductions : 1;
    for (int v = 0; v <= nvariants; v++) {
      bool big = v == nvariants; /* the big case, first datatype */
      dtop_t d = reduces ? plan->reductions[big ? 0 : v]
                         : (dtop_t){plan->move_dt, RINGCC_SUM};
      for (int ci = 0; ci < (big ? 1 : NCOUNTS); ci++) {
        for (int m = 0; m < (modes && !big ? 3 : 1); m++) {
          case_t k = {.coll = (enum coll)c, .dt = d.dt, .op = d.op,
                      .count = big ? (blocks ? BIG_COUNT / (size_t)n + 3
                                             : BIG_COUNT + 5)
                                   : counts[ci],
                      .mode = big && modes ? (enum mode)(c % 3)
                                           : (enum mode)m,
                      .salt = h_hash3((uint64_t)c, (uint64_t)v,
                                      (uint64_t)(ci * 4 + m))};
          /* Roots rotate over every host; shifts stay on and cross hosts. */
          k.root = c == C_SENDRECV ? shifts[(ci + v) % 2]
                                   : (ci * L->per_host + ci + v) % n;
          ncases++;
          int rc = run_case(h, plan, &k);
          if (rc < 0)
            return 1; /* the communicator may be broken: stop here */
          if (rc > 0 && ++failed >= MAX_FAILED_CASES)
            return h_fail(h, "%s: stopping after %d failed cases",
                          L->name, failed);
        }
      }
    }
  }
  for (int round = 0; round < 3; round++) {
    case_t k = {.coll = C_BARRIER, .root = round};
    ncases++;
    if (run_case(h, plan, &k) != 0)
      return 1;
  }
  if (h->rank == 0)
    fprintf(stderr, "%s: %d cases passed on every rank\n", L->name, ncases);
  return failed != 0;
}

static void collectives(plan_t *plan) {
  const layout_t *L = &plan->layout;
  net_up(L->nhosts);
  plan->arrivals = h_shared_alloc(sizeof(uint32_t));
  cr_assert_not_null(plan->arrivals);
  ringcc_config_t cfg = test_config(30000);
  cfg.algo = plan->algo;
  ns_run_opts_t o = {.net = &g_net, .nranks = L->nranks,
                     .host_of = L->host_of, .body = body_collectives,
                     .arg = plan, .config = &cfg, .timeout_s = 150,
                     .name = L->name};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  fprintf(stderr, "%s: collectives took %.1f s\n", L->name, res.seconds);
  ns_result_free(&res);
  h_shared_free(plan->arrivals, sizeof(uint32_t));
  if (res.unsupported)
    cr_skip_test("%s: %s", L->name, res.unsupported_why);
  cr_assert(ok, "%s: collectives failed (see the ranks' messages above)",
            L->name);
}

/* Datatypes and ops spread so that the layouts together cover all 10
 * datatypes and all 5 ops. */
Test(multihost, collectives_2x1, .timeout = 200) {
  plan_t p = {.layout = make_layout(2, 1, false),
              .reductions = {{RINGCC_FLOAT32, RINGCC_SUM},
                             {RINGCC_INT8, RINGCC_PROD},
                             {RINGCC_UINT64, RINGCC_MAX}},
              .algo = -1, .nreductions = 3, .move_dt = RINGCC_UINT8};
  collectives(&p);
}

Test(multihost, collectives_2x2, .timeout = 200) {
  plan_t p = {.layout = make_layout(2, 2, false),
              .reductions = {{RINGCC_FLOAT16, RINGCC_SUM},
                             {RINGCC_INT32, RINGCC_MIN},
                             {RINGCC_BFLOAT16, RINGCC_AVG}},
              .algo = -1, .nreductions = 3, .move_dt = RINGCC_FLOAT64};
  collectives(&p);
}

Test(multihost, collectives_3x2, .timeout = 200) {
  plan_t p = {.layout = make_layout(3, 2, false),
              .reductions = {{RINGCC_FLOAT64, RINGCC_SUM},
                             {RINGCC_UINT32, RINGCC_PROD},
                             {RINGCC_INT64, RINGCC_AVG}},
              .algo = -1, .nreductions = 3, .move_dt = RINGCC_INT32};
  collectives(&p);
}

Test(multihost, collectives_4x1, .timeout = 200) {
  plan_t p = {.layout = make_layout(4, 1, false),
              .reductions = {{RINGCC_BFLOAT16, RINGCC_MAX},
                             {RINGCC_UINT8, RINGCC_SUM},
                             {RINGCC_FLOAT32, RINGCC_MIN}},
              .algo = -1, .nreductions = 3, .move_dt = RINGCC_FLOAT16};
  collectives(&p);
}

Test(multihost, collectives_2x3, .timeout = 200) {
  plan_t p = {.layout = make_layout(2, 3, false),
              .reductions = {{RINGCC_INT64, RINGCC_SUM},
                             {RINGCC_FLOAT64, RINGCC_AVG},
                             {RINGCC_UINT32, RINGCC_MAX}},
              .algo = -1, .nreductions = 3, .move_dt = RINGCC_INT8};
  collectives(&p);
}

Test(multihost, collectives_3x2_interleaved, .timeout = 200) {
  plan_t p = {.layout = make_layout(3, 2, true),
              .reductions = {{RINGCC_FLOAT32, RINGCC_AVG},
                             {RINGCC_INT32, RINGCC_SUM}},
              .algo = -1, .nreductions = 2, .move_dt = RINGCC_UINT64};
  collectives(&p);
}

/* Each algorithm forced (config 'algo') on 3x2, where the ring, the trees
 * and the direct exchange all cross hosts; skipped while init says an
 * algorithm is not implemented. Families an algorithm does not implement
 * run as the library falls back. */
static void forced_algo(int algo, const char *name) {
  plan_t p = {.layout = make_layout(3, 2, false), .algo = algo,
              .reductions = {{RINGCC_FLOAT32, RINGCC_SUM},
                             {RINGCC_INT64, RINGCC_MAX}},
              .nreductions = 2, .move_dt = RINGCC_BFLOAT16};
  snprintf(p.layout.name, sizeof p.layout.name, "3x2 algo=%s", name);
  collectives(&p);
}

Test(multihost, collectives_3x2_algo_ring, .timeout = 200) {
  forced_algo(RINGCC_ALGO_RING, "ring");
}
Test(multihost, collectives_3x2_algo_tree, .timeout = 200) {
  forced_algo(RINGCC_ALGO_TREE, "tree");
}
Test(multihost, collectives_3x2_algo_direct, .timeout = 200) {
  forced_algo(RINGCC_ALGO_DIRECT, "direct");
}
Test(multihost, collectives_3x2_algo_recdoubling, .timeout = 200) {
  forced_algo(RINGCC_ALGO_RECDOUBLING, "recdoubling");
}
Test(multihost, collectives_3x2_algo_rabenseifner, .timeout = 200) {
  forced_algo(RINGCC_ALGO_RABENSEIFNER, "rabenseifner");
}

/* ---- split by host ------------------------------------------------------------------ */

/* The world ranks in comm, gathered: must be exactly want[0..nwant). */
static int check_members(h_ctx_t *h, ringcc_comm_t comm, const char *what,
                         const int *want, int nwant) {
  int size = -1, rank = -1;
  if (!h_ok(h, ringcc_comm_size(comm, &size), "ringcc_comm_size") ||
      !h_ok(h, ringcc_comm_rank(comm, &rank), "ringcc_comm_rank"))
    return 1;
  if (size != nwant)
    return h_fail(h, "%s: size %d, expected %d", what, size, nwant);
  int32_t mine = h->rank, all[NS_MAX_RANKS];
  if (!h_ok(h, ringcc_allgather(&mine, all, 1, RINGCC_INT32, comm, NULL),
            what))
    return 1;
  for (int i = 0; i < nwant; i++) {
    if (all[i] != want[i])
      return h_fail(h, "%s: rank %d is world rank %d, expected %d", what, i,
                    (int)all[i], want[i]);
    if (want[i] == h->rank && rank != i)
      return h_fail(h, "%s: this rank is rank %d, expected %d", what, rank, i);
  }
  /* An exact allreduce over the new communicator, as its own ranks. */
  float in[1031], got[1031], expect[1031];
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, rank, 0, 77, in, 1031);
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, size, 0, 77, expect, 1031);
  if (!h_ok(h, ringcc_allreduce(in, got, 1031, RINGCC_FLOAT32, RINGCC_SUM,
                                comm, NULL), what))
    return 1;
  char part[96];
  snprintf(part, sizeof part, "%s: allreduce", what);
  return h_check_elems(h, part, RINGCC_FLOAT32, got, expect, 1031) ? 0 : 1;
}

/* split_type(HOST) keyed by world rank: the host's ranks in rank order.
 * Then split(color = position in the host): one rank of every host. */
static int body_split(h_ctx_t *h) {
  const layout_t *L = h->arg;
  int me = h->rank, host = L->host_of[me], local = 0, nlocal = 0;
  int on_host[NS_MAX_RANKS], across[NS_MAX_RANKS], nacross = 0;
  for (int r = 0; r < L->nranks; r++)
    if (L->host_of[r] == host) {
      local += r < me;
      on_host[nlocal++] = r;
    }
  int seen[NS_MAX_HOSTS] = {0}; /* ranks of each host passed so far */
  for (int r = 0; r < L->nranks; r++)
    if (seen[L->host_of[r]]++ == local)
      across[nacross++] = r;
  ringcc_comm_t host_comm = NULL, cross = NULL;
  if (!h_ok(h, ringcc_comm_split_type(h->comm, RINGCC_SPLIT_HOST, me,
                                      &host_comm), "ringcc_comm_split_type"))
    return 1;
  int rc = check_members(h, host_comm, "host communicator", on_host, nlocal);
  if (rc == 0 && !h_ok(h, ringcc_comm_split(h->comm, local, me, &cross),
                       "ringcc_comm_split"))
    rc = 1;
  if (rc == 0)
    rc = check_members(h, cross, "cross-host communicator", across, nacross);
  if (cross != NULL)
    ringcc_comm_destroy(cross);
  ringcc_comm_destroy(host_comm);
  return rc;
}

static void split(int nhosts, int per_host, bool interleaved) {
  layout_t L = make_layout(nhosts, per_host, interleaved);
  net_up(nhosts);
  ringcc_config_t cfg = test_config(30000);
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_split, .arg = &L, .config = &cfg,
                     .timeout_s = 60, .name = L.name};
  cr_assert(ns_run(&o, NULL), "%s: split failed (see above)", L.name);
}

Test(multihost, split_type_host_2x3, .timeout = 90) { split(2, 3, false); }
Test(multihost, split_type_host_3x2_interleaved, .timeout = 90) {
  split(3, 2, true);
}

/* ---- examples/parallel_groups --------------------------------------------------------- */

/* build/examples/parallel_groups: beside RINGCC_BIN_DIR (build/bin), else
 * beside this test binary's directory (build/test). */
static void example_path(const char *name, char *out, size_t len) {
  char dir[PATH_MAX];
  const char *bin = getenv("RINGCC_BIN_DIR");
  ssize_t n;
  if (bin != NULL && *bin != '\0')
    snprintf(dir, sizeof dir, "%s", bin);
  else if ((n = readlink("/proc/self/exe", dir, sizeof dir - 1)) > 0)
    dir[n] = '\0', dirname(dir);
  else
    snprintf(dir, sizeof dir, "build/test");
  snprintf(out, len, "%s/../examples/%s", dir, name);
}

static void parallel_groups(const char *tp, const char *pp) {
  layout_t L = make_layout(2, 4, false);
  char exe[PATH_MAX + 64], name[64];
  example_path("parallel_groups", exe, sizeof exe);
  cr_assert(access(exe, X_OK) == 0, "%s: %s (build it with make examples)",
            exe, strerror(errno));
  net_up(2);
  snprintf(name, sizeof name, "parallel_groups -t %s -p %s", tp, pp);
  const char *argv[] = {exe, "-t", tp, "-p", pp, NULL};
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .argv = argv, .capture = true, .timeout_s = 90,
                     .name = name};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  const char *out0 = res.output[0] ? res.output[0] : "";
  bool said_ok = strstr(out0, "4 ranks per host: ok") != NULL;
  ns_result_free(&res);
  cr_assert(ok, "%s on 2 hosts x 4 ranks failed (see above)", name);
  cr_assert(said_ok, "%s: rank 0 did not print \"4 ranks per host: ok\"",
            name);
}

Test(multihost, parallel_groups_tp4_pp1, .timeout = 120) {
  parallel_groups("4", "1");
}
Test(multihost, parallel_groups_tp2_pp2, .timeout = 120) {
  parallel_groups("2", "2");
}

/* ---- errors: an unreachable rendezvous ------------------------------------------------- */

typedef struct {
  struct {
    int code;
    double seconds;
    char message[600];
  } rank[NS_MAX_RANKS];
} init_area_t;

#define UNREACHABLE_ROOT NS_SUBNET ".99:29398" /* on the subnet, no host */

static int body_unreachable(h_ctx_t *h) {
  init_area_t *a = h->arg;
  ringcc_config_t cfg = test_config(2000);
  ringcc_comm_t comm = NULL;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init_env(&comm, &cfg);
  a->rank[h->rank].seconds = h_now_s() - t0;
  a->rank[h->rank].code = (int)r;
  snprintf(a->rank[h->rank].message, sizeof a->rank[0].message, "%s",
           ringcc_comm_last_error(NULL));
  if (r == RINGCC_SUCCESS)
    ringcc_comm_destroy(comm);
  return 0;
}

Test(multihost, unreachable_root_fails_in_time, .timeout = 60) {
  layout_t L = make_layout(2, 1, false);
  net_up(2);
  init_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_unreachable, .arg = a, .skip_init = true,
                     .root = UNREACHABLE_ROOT, .timeout_s = 30,
                     .name = "unreachable root"};
  cr_assert(ns_run(&o, NULL), "the ranks did not run to the end (see above)");
  for (int r = 0; r < L.nranks; r++) {
    int code = a->rank[r].code;
    cr_assert(code == RINGCC_ERR_TIMEOUT || code == RINGCC_ERR_NETWORK,
              "rank %d: init with RINGCC_ROOT=%s returned %d (%s), expected "
              "RINGCC_ERR_TIMEOUT or RINGCC_ERR_NETWORK: %s", r,
              UNREACHABLE_ROOT, code, ringcc_strerror(code),
              a->rank[r].message);
    cr_assert(a->rank[r].seconds >= 1.0 && a->rank[r].seconds <= 6.0,
              "rank %d: init failed after %.2f s with timeout_ms 2000 "
              "(expected 2-6 s): %s", r, a->rank[r].seconds,
              a->rank[r].message);
    cr_assert(strstr(a->rank[r].message, NS_SUBNET ".99") != NULL,
              "rank %d: the error does not name the address %s: %s", r,
              UNREACHABLE_ROOT, a->rank[r].message);
  }
  h_shared_free(a, sizeof *a);
}

/* ---- errors: a rank killed on another host ------------------------------------------------ */

#define STREAM_COUNT 65537
#define STREAM_MAX_S 20.0

/* How a rank's stream of calls ended: its last result, calls made, when,
 * and ringcc_comm_last_error. */
typedef struct {
  int code, iterations;
  double failed_at;
  char message[600];
} outcome_t;

typedef struct {
  int victim;
  volatile int iterations; /* the victim's, before it died */
  double killed_at;        /* CLOCK_MONOTONIC, shared by all namespaces */
  outcome_t rank[NS_MAX_RANKS];
} kill_area_t;

static void *killer(void *p) {
  kill_area_t *a = p;
  while (a->iterations < 5)
    h_sleep_ms(1);
  h_sleep_ms((int)(h_mix64((uint64_t)getpid()) % 20)); /* mid-call */
  a->killed_at = h_now_s();
  kill(getpid(), SIGKILL);
  return NULL;
}

/* A stream of allreduces until one fails; the victim dies during it. */
static int body_stream(h_ctx_t *h) {
  kill_area_t *a = h->arg;
  float *buf = h_xmalloc(STREAM_COUNT * sizeof(float));
  float *expect = h_xmalloc(STREAM_COUNT * sizeof(float));
  pthread_t tid;
  if (h->rank == a->victim && pthread_create(&tid, NULL, killer, a) != 0)
    return h_fail(h, "pthread_create failed");
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, h->nranks, 0, 5, expect,
                  STREAM_COUNT);
  double start = h_now_s();
  int i = 0;
  ringcc_result_t r = RINGCC_SUCCESS;
  for (; h_now_s() - start < STREAM_MAX_S; i++) {
    h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, h->rank, 0, 5, buf, STREAM_COUNT);
    r = ringcc_allreduce(RINGCC_IN_PLACE, buf, STREAM_COUNT, RINGCC_FLOAT32,
                         RINGCC_SUM, h->comm, NULL);
    if (r != RINGCC_SUCCESS)
      break;
    if (i == 0 && !h_check_elems(h, "first allreduce of the stream",
                                 RINGCC_FLOAT32, buf, expect, STREAM_COUNT))
      return 1;
    if (h->rank == a->victim)
      a->iterations = i + 1;
  }
  a->rank[h->rank].failed_at = h_now_s();
  a->rank[h->rank].code = (int)r;
  a->rank[h->rank].iterations = i;
  snprintf(a->rank[h->rank].message, sizeof a->rank[0].message, "%s",
           ringcc_comm_last_error(h->comm));
  free(buf), free(expect);
  return 0;
}

/* 2x2, ring 0 1 | 2 3: the network edges are 1 -> 2 and 3 -> 0. */
static void killed_peer(int victim) {
  layout_t L = make_layout(2, 2, false);
  net_up(2);
  kill_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->victim = victim;
  ringcc_config_t cfg = test_config(60000);
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_stream, .arg = a, .config = &cfg,
                     .timeout_s = 45, .grace_s = -1, .name = "killed peer"};
  ns_result_t res;
  ns_run(&o, &res);
  char st[96];
  cr_assert(WIFSIGNALED(res.status[victim]) &&
                WTERMSIG(res.status[victim]) == SIGKILL,
            "the victim, rank %d, %s (expected: killed by SIGKILL after 5 "
            "allreduces)", victim,
            ns_describe_status(res.status[victim], st, sizeof st));
  for (int r = 0; r < L.nranks; r++) {
    if (r == victim)
      continue;
    cr_assert_eq(res.status[r], 0, "survivor rank %d %s", r,
                 ns_describe_status(res.status[r], st, sizeof st));
    int code = a->rank[r].code;
    double delay = a->rank[r].failed_at - a->killed_at;
    fprintf(stderr, "victim %d: rank %d failed %.2f s after the kill with "
                    "%s: %s\n", victim, r, delay,
            ringcc_strerror((ringcc_result_t)code), a->rank[r].message);
    cr_assert_neq(code, RINGCC_SUCCESS, "rank %d: %d allreduces in %.0f s "
                  "and none failed, though rank %d was killed", r,
                  a->rank[r].iterations, STREAM_MAX_S, victim);
    cr_assert_lt(delay, 10.0, "rank %d noticed rank %d's death only after "
                 "%.1f s: %s", r, victim, delay, a->rank[r].message);
    cr_assert_eq(code, RINGCC_ERR_PEER_FAILED, "rank %d: the stream failed "
                 "with %s, expected RINGCC_ERR_PEER_FAILED: %s", r,
                 ringcc_strerror((ringcc_result_t)code), a->rank[r].message);
  }
  /* Every survivor names the victim and its host, whichever rank it was
   * waiting for: the ranks that notice the death pass it on (failure.c). */
  char name[16], host[32];
  snprintf(name, sizeof name, "rank %d", victim);
  snprintf(host, sizeof host, "on host host%d", L.host_of[victim]);
  for (int r = 0; r < L.nranks; r++)
    cr_assert(r == victim || (strstr(a->rank[r].message, name) != NULL &&
                              strstr(a->rank[r].message, host) != NULL),
              "rank %d's error does not name the dead %s %s: %s", r, name,
              host, a->rank[r].message);
  ns_result_free(&res);
  h_shared_free(a, sizeof *a);
}

/* Rank 3 sends to rank 0 across hosts: rank 0 sees its sockets close. */
Test(multihost, killed_rank_sending_across_hosts, .timeout = 60) {
  killed_peer(3);
}
/* Rank 2 receives from rank 1 across hosts: rank 1's sends fail. */
Test(multihost, killed_rank_receiving_across_hosts, .timeout = 60) {
  killed_peer(2);
}

/* ---- a peer that leaves cleanly ------------------------------------------------------ */

typedef struct {
  volatile int stopped_pid; /* rank 2, in host1's PID namespace */
  volatile int rank0_gone;
} leave_area_t;

/* Layout {host0: rank 0; host1: ranks 1, 2}. Rank 2 stops itself (SIGSTOP);
 * meanwhile rank 0 sends it one message over the network, destroys its
 * communicator (a goodbye on every connection, then close) and is gone.
 * Rank 1 (same host, so it can signal rank 2) resumes rank 2, whose proxy
 * now finds the message, the goodbye and the close all at once. Rank 2
 * receives the message, then waits for a message from rank 1 (sent 300 ms
 * later, over shared memory): a peer that said goodbye is not a failure,
 * so both receives must succeed. */
static int body_leave(h_ctx_t *h) {
  leave_area_t *a = h->arg;
  ringcc_config_t cfg = test_config(20000);
  if (!h_ok(h, ringcc_comm_init_env(&h->comm, &cfg), "ringcc_comm_init_env"))
    return 1;
  int32_t value = 1000 + h->rank, got = -1;
  int rc = 0;
  double give_up = h_now_s() + 10;
  if (h->rank == 0) {
    while (a->stopped_pid == 0 && h_now_s() < give_up)
      h_sleep_ms(1);
    h_sleep_ms(200); /* rank 2 is stopped by now */
    rc = !h_ok(h, ringcc_send(&value, 1, RINGCC_INT32, 2, h->comm, NULL),
               "ringcc_send to rank 2");
  } else if (h->rank == 1) {
    while (a->rank0_gone == 0 && h_now_s() < give_up)
      h_sleep_ms(1);
    h_sleep_ms(100); /* rank 0's close has reached rank 2's sockets */
    kill(a->stopped_pid, SIGCONT);
    h_sleep_ms(300);
    rc = !h_ok(h, ringcc_send(&value, 1, RINGCC_INT32, 2, h->comm, NULL),
               "ringcc_send to rank 2");
  } else {
    a->stopped_pid = getpid();
    raise(SIGSTOP);
    rc = !h_ok(h, ringcc_recv(&got, 1, RINGCC_INT32, 0, h->comm, NULL),
               "ringcc_recv from rank 0, which then left cleanly");
    if (rc == 0 && got != 1000)
      rc = h_fail(h, "received %d from rank 0, expected 1000", (int)got);
    if (rc == 0)
      rc = !h_ok(h, ringcc_recv(&got, 1, RINGCC_INT32, 1, h->comm, NULL),
                 "ringcc_recv from rank 1 after rank 0 left cleanly");
    if (rc == 0 && got != 1001)
      rc = h_fail(h, "received %d from rank 1, expected 1001", (int)got);
  }
  ringcc_comm_destroy(h->comm);
  h->comm = NULL;
  if (h->rank == 0)
    a->rank0_gone = 1;
  return rc;
}

Test(multihost, peer_leaving_after_its_last_send_is_no_failure,
     .timeout = 60) {
  static const int host_of[3] = {0, 1, 1};
  net_up(2);
  leave_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  ns_run_opts_t o = {.net = &g_net, .nranks = 3, .host_of = host_of,
                     .body = body_leave, .arg = a, .skip_init = true,
                     .timeout_s = 40, .name = "peer leaving cleanly"};
  bool ok = ns_run(&o, NULL);
  h_shared_free(a, sizeof *a);
  cr_assert(ok, "a rank that sent its last message and destroyed its "
            "communicator made a peer fail (see above)");
}

/* ---- errors: a stranger at the rendezvous ---------------------------------------------------- */

#define STRANGER_PORT 29397

typedef struct {
  volatile int stranger_ready; /* 1: connected and babbled; -1: gave up */
  volatile int ranks_done;
  char stranger_msg[256];
  double init_seconds[NS_MAX_RANKS];
} stranger_area_t;

static int connect_root(double give_up_at) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons(STRANGER_PORT)};
  inet_pton(AF_INET, NS_SUBNET ".1", &sa.sin_addr);
  while (h_now_s() < give_up_at) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
      return fd;
    if (fd >= 0)
      close(fd);
    h_sleep_ms(10);
  }
  return -1;
}

/* Runs on host 1: opens three connections to the rendezvous (garbage, a
 * zero "secret" with a huge rank count, silence), keeps them open while
 * the ranks form, then leaves. */
static int stranger_main(void *p) {
  stranger_area_t *a = p;
  double give_up = h_now_s() + 10;
  int fds[3];
  for (int i = 0; i < 3; i++)
    if ((fds[i] = connect_root(give_up)) < 0) {
      snprintf(a->stranger_msg, sizeof a->stranger_msg, "connection %d to "
               NS_SUBNET ".1:%d failed: %s", i, STRANGER_PORT,
               strerror(errno));
      a->stranger_ready = -1;
      return 1;
    }
  unsigned char junk[200], fake[52] = {0};
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (unsigned char)h_mix64(i);
  memcpy(fake + 16, "RCCH", 4);
  memset(fake + 20, 0xff, 8); /* rank and nranks 0xffffffff */
  if (write(fds[0], junk, sizeof junk) < 0 ||
      write(fds[1], fake, sizeof fake) < 0)
    snprintf(a->stranger_msg, sizeof a->stranger_msg, "write: %s",
             strerror(errno));
  a->stranger_ready = 1;
  while (a->ranks_done == 0 && h_now_s() < give_up + 20)
    h_sleep_ms(10);
  for (int i = 0; i < 3; i++)
    close(fds[i]);
  return 0;
}

static int body_after_stranger(h_ctx_t *h) {
  stranger_area_t *a = h->arg;
  if (h->rank != 0) { /* rank 0 serves the rendezvous from the start */
    double give_up = h_now_s() + 15;
    while (a->stranger_ready == 0 && h_now_s() < give_up)
      h_sleep_ms(5);
    if (a->stranger_ready != 1)
      return h_fail(h, "the stranger never got in: %s", a->stranger_msg);
  }
  ringcc_config_t cfg = test_config(30000);
  double t0 = h_now_s();
  if (!h_ok(h, ringcc_comm_init_env(&h->comm, &cfg), "ringcc_comm_init_env"))
    return 1;
  a->init_seconds[h->rank] = h_now_s() - t0;
  int rc = body_one_allreduce(h);
  ringcc_comm_destroy(h->comm);
  h->comm = NULL;
  __atomic_fetch_add(&a->ranks_done, 1, __ATOMIC_SEQ_CST);
  return rc;
}

Test(multihost, stranger_at_the_rendezvous, .timeout = 60) {
  layout_t L = make_layout(2, 2, false);
  net_up(2);
  stranger_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  pid_t stranger = ns_spawn(&g_net, 1, stranger_main, a, -1);
  cr_assert(stranger > 0, "cannot start the stranger");
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_after_stranger, .arg = a, .skip_init = true,
                     .port = STRANGER_PORT, .timeout_s = 40,
                     .name = "stranger at the rendezvous"};
  bool ok = ns_run(&o, NULL);
  a->ranks_done = 1;
  int status = 0;
  double give_up = h_now_s() + 10;
  while (waitpid(stranger, &status, WNOHANG) == 0 && h_now_s() < give_up)
    h_sleep_ms(10);
  if (h_now_s() >= give_up) {
    kill(stranger, SIGKILL);
    waitpid(stranger, &status, 0);
  }
  cr_assert(ok, "the ranks did not form or failed with a stranger at the "
            "rendezvous (see above); stranger: %s", a->stranger_msg);
  /* Not held up by the silent stranger: the server gives it 5 s. */
  for (int r = 1; r < L.nranks; r++)
    cr_assert_lt(a->init_seconds[r], 4.0, "rank %d's init took %.1f s with a "
                 "stranger at the rendezvous", r, a->init_seconds[r]);
  h_shared_free(a, sizeof *a);
}

/* ---- hosts that vanish, links that misbehave ---------------------------------------- */

/* One host's link fails in the middle of a stream of allreduces: its switch
 * port goes down, or every packet to and from it is dropped (netns.h,
 * ns_cut). Nothing closes: no FIN, no RST. Every rank on the other hosts
 * must fail with RINGCC_ERR_NETWORK or RINGCC_ERR_PEER_FAILED naming a rank
 * of that host and the host, within 10 s of the cut (before: only the
 * 10-minute deadline caught it). The delays are printed. */

#define VANISH_HOSTS 3
#define VANISH_PER_HOST 2

typedef struct {
  int victim_host;
  volatile int iterations; /* rank 0's, so that the cut comes mid-stream */
  double cut_at;           /* CLOCK_MONOTONIC, the same in every namespace */
  double stream_s;
  int on_victim[NS_MAX_RANKS]; /* the rank runs on the cut host */
  int survivors, failed;       /* ranks elsewhere; those that ended */
  outcome_t rank[NS_MAX_RANKS];
} vanish_area_t;

/* On the cut host: once every other rank has failed, this rank's fate
 * (its own peers went silent too) is of no interest: it leaves. */
static void *leave_when_survivors_failed(void *p) {
  vanish_area_t *a = p;
  double give_up = h_now_s() + a->stream_s;
  while (__atomic_load_n(&a->failed, __ATOMIC_ACQUIRE) < a->survivors &&
         h_now_s() < give_up)
    h_sleep_ms(20);
  _exit(0);
}

static int body_vanish(h_ctx_t *h) {
  vanish_area_t *a = h->arg;
  pthread_t tid;
  if (a->on_victim[h->rank] &&
      pthread_create(&tid, NULL, leave_when_survivors_failed, a) != 0)
    return h_fail(h, "pthread_create failed");
  float *buf = h_xmalloc(STREAM_COUNT * sizeof(float));
  float *expect = h_xmalloc(STREAM_COUNT * sizeof(float));
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, h->nranks, 0, 5, expect,
                  STREAM_COUNT);
  double start = h_now_s();
  int i = 0;
  ringcc_result_t r = RINGCC_SUCCESS;
  for (; h_now_s() - start < a->stream_s; i++) {
    h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, h->rank, 0, 5, buf, STREAM_COUNT);
    r = ringcc_allreduce(RINGCC_IN_PLACE, buf, STREAM_COUNT, RINGCC_FLOAT32,
                         RINGCC_SUM, h->comm, NULL);
    if (r != RINGCC_SUCCESS)
      break;
    if (!h_check_elems(h, "allreduce of the stream", RINGCC_FLOAT32, buf,
                       expect, STREAM_COUNT))
      return 1;
    if (h->rank == 0)
      a->iterations = i + 1;
  }
  a->rank[h->rank].failed_at = h_now_s();
  a->rank[h->rank].code = (int)r;
  a->rank[h->rank].iterations = i;
  snprintf(a->rank[h->rank].message, sizeof a->rank[0].message, "%s",
           ringcc_comm_last_error(h->comm));
  if (!a->on_victim[h->rank])
    __atomic_fetch_add(&a->failed, 1, __ATOMIC_ACQ_REL);
  free(buf), free(expect);
  return 0;
}

typedef struct {
  vanish_area_t *area;
  const ns_net_t *net;
  ns_cut_t how;
  double flap_s; /* > 0: restore the link after this long */
  int after;     /* rank 0's iterations before the cut */
  bool ok;
  char why[600];
  pthread_t tid;
  bool running; /* tid was started */
} cutter_t;

static void *cutter(void *p) {
  cutter_t *c = p;
  double give_up = h_now_s() + 30;
  while (c->area->iterations < c->after && h_now_s() < give_up)
    h_sleep_ms(1);
  h_sleep_ms((int)(h_mix64((uint64_t)getpid() ^ (uint64_t)h_now_s()) % 30));
  c->area->cut_at = h_now_s();
  c->ok = ns_cut(c->net, c->area->victim_host, c->how, c->why, sizeof c->why);
  if (c->ok && c->flap_s > 0) {
    h_sleep_ms((int)(c->flap_s * 1000));
    c->ok = ns_restore(c->net, c->area->victim_host, c->how, c->why,
                       sizeof c->why);
  }
  return NULL;
}

/* ns_run's started hook: the cutter starts once every rank is forked. */
static void start_cutter(void *p) {
  cutter_t *c = p;
  c->running = pthread_create(&c->tid, NULL, cutter, c) == 0;
  if (!c->running)
    snprintf(c->why, sizeof c->why, "pthread_create failed");
}

static void join_cutter(cutter_t *c) {
  if (c->running)
    pthread_join(c->tid, NULL);
}

/* One trial on g_net: the longest delay among the survivors (< 0: failed,
 * with the reason printed). */
static double vanish_trial(ns_cut_t how, bool assert_each) {
  layout_t L = make_layout(VANISH_HOSTS, VANISH_PER_HOST, false);
  vanish_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  a->victim_host = VANISH_HOSTS - 1;
  a->stream_s = 40;
  for (int r = 0; r < L.nranks; r++) {
    a->on_victim[r] = L.host_of[r] == a->victim_host;
    a->survivors += !a->on_victim[r];
  }
  ringcc_config_t cfg = RINGCC_CONFIG_INIT; /* the default deadline: 10 min */
  cutter_t c = {.area = a, .net = &g_net, .how = how, .after = 3};
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_vanish, .arg = a, .config = &cfg,
                     .timeout_s = 45, .grace_s = 5, .name = "vanished host",
                     .started = start_cutter, .started_arg = &c};
  ns_result_t res;
  ns_run(&o, &res);
  join_cutter(&c);
  cr_assert(c.ok, "cutting host %d's link: %s", a->victim_host, c.why);
  double worst = 0;
  char st[96], host[32];
  snprintf(host, sizeof host, "host%d", a->victim_host);
  for (int r = 0; r < L.nranks; r++) {
    if (L.host_of[r] == a->victim_host)
      continue;
    int code = a->rank[r].code;
    double delay = a->rank[r].failed_at - a->cut_at;
    bool names = false;
    for (int q = 0; q < L.nranks; q++) {
      char rank[16];
      snprintf(rank, sizeof rank, "rank %d", q);
      names |= L.host_of[q] == a->victim_host &&
               strstr(a->rank[r].message, rank) != NULL;
    }
    names = names && strstr(a->rank[r].message, host) != NULL;
    bool good = res.status[r] == 0 &&
                (code == RINGCC_ERR_NETWORK || code == RINGCC_ERR_PEER_FAILED) &&
                delay < 10.0 && names;
    if (assert_each || !good)
      fprintf(stderr, "%s: rank %d (%s) %s after %.2f s with %s: %s\n",
              ns_cut_name(how), r, ns_describe_status(res.status[r], st,
                                                       sizeof st),
              code == RINGCC_SUCCESS ? "never failed" : "failed", delay,
              ringcc_strerror((ringcc_result_t)code), a->rank[r].message);
    if (assert_each) {
      cr_expect_eq(res.status[r], 0, "survivor rank %d %s", r, st);
      cr_expect(code == RINGCC_ERR_NETWORK || code == RINGCC_ERR_PEER_FAILED,
                "rank %d: %s, expected RINGCC_ERR_NETWORK or "
                "RINGCC_ERR_PEER_FAILED", r,
                ringcc_strerror((ringcc_result_t)code));
      cr_expect_lt(delay, 10.0, "rank %d noticed only after %.1f s", r, delay);
      cr_expect(names, "rank %d's error names no rank of %s: %s", r, host,
                a->rank[r].message);
    }
    if (!good)
      worst = -1;
    else if (worst >= 0 && delay > worst)
      worst = delay;
  }
  ns_result_free(&res);
  h_shared_free(a, sizeof *a);
  return worst;
}

Test(multihost, vanished_host_link_down, .timeout = 90) {
  net_up(VANISH_HOSTS);
  double worst = vanish_trial(NS_CUT_LINK_DOWN, true);
  fprintf(stderr, "link down: the last survivor failed %.2f s after the cut\n",
          worst);
}

Test(multihost, vanished_host_packets_dropped, .timeout = 90) {
  net_up(VANISH_HOSTS);
  double worst = vanish_trial(NS_CUT_DROP, true);
  fprintf(stderr, "packets dropped: the last survivor failed %.2f s after "
          "the cut\n", worst);
}

/* A link that goes down for 2 s and comes back, well inside the 6 s after
 * which a silent peer counts as gone: TCP retransmits what was lost, and
 * every rank carries on with exact results (no rank fails; none could fail
 * alone: a rank that gave up would close its sockets, and its peers would
 * fail naming it). The pause is printed. */
static int body_flap(h_ctx_t *h) {
  vanish_area_t *a = h->arg;
  float *buf = h_xmalloc(STREAM_COUNT * sizeof(float));
  float *expect = h_xmalloc(STREAM_COUNT * sizeof(float));
  double longest = 0;
  for (int i = 0; i < 40; i++) {
    h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, h->rank, 0, 5 + i, buf,
                 STREAM_COUNT);
    h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, h->nranks, 0, 5 + i, expect,
                    STREAM_COUNT);
    double t0 = h_now_s();
    ringcc_result_t r = ringcc_allreduce(RINGCC_IN_PLACE, buf, STREAM_COUNT,
                                         RINGCC_FLOAT32, RINGCC_SUM, h->comm,
                                         NULL);
    if (r != RINGCC_SUCCESS)
      return h_fail(h, "allreduce %d (the link flapped at %.2f s): %s", i,
                    a->cut_at, ringcc_comm_last_error(h->comm));
    if (!h_check_elems(h, "allreduce across the flap", RINGCC_FLOAT32, buf,
                       expect, STREAM_COUNT))
      return 1;
    if (h_now_s() - t0 > longest)
      longest = h_now_s() - t0;
    if (h->rank == 0)
      a->iterations = i + 1;
    h_sleep_ms(50);
  }
  a->rank[h->rank].failed_at = longest;
  free(buf), free(expect);
  return 0;
}

Test(multihost, link_flap_of_2s_continues_exactly, .timeout = 90) {
  layout_t L = make_layout(VANISH_HOSTS, 1, false);
  net_up(VANISH_HOSTS);
  vanish_area_t *a = h_shared_alloc(sizeof *a);
  a->victim_host = 1;
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cutter_t c = {.area = a, .net = &g_net, .how = NS_CUT_LINK_DOWN,
                .flap_s = 2.0, .after = 10};
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_flap, .arg = a, .config = &cfg,
                     .timeout_s = 60, .name = "link flap",
                     .started = start_cutter, .started_arg = &c};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  join_cutter(&c);
  cr_assert(c.ok, "flapping host 1's link: %s", c.why);
  cr_assert(ok, "a rank failed across a 2 s flap (above)");
  for (int r = 0; r < L.nranks; r++)
    fprintf(stderr, "link flap (down 2 s): rank %d's longest allreduce took "
            "%.2f s (40 in all, exact)\n", r, a->rank[r].failed_at);
  ns_result_free(&res);
  h_shared_free(a, sizeof *a);
}

/* ---- random collectives on a bad network, and under load ---------------------------- */

typedef struct {
  int calls;       /* every rank makes the same calls */
  bool gaps;       /* idle now and then (up to 3 s): links go quiet */
  uint64_t seed;
  double seconds[NS_MAX_RANKS];
  int done[NS_MAX_RANKS];
} soak_area_t;

/* Random collectives drawn alike on every rank (soak/random_coll.h), each
 * result checked; with gaps, every rank idles alike before some calls. */
static int body_random(h_ctx_t *h) {
  soak_area_t *a = h->arg;
  rc_rank_t s;
  if (!rc_rank_init(&s, h->rank, h->nranks, 4096))
    return h_fail(h, "out of memory");
  double t0 = h_now_s();
  for (int i = 0; i < a->calls; i++) {
    rc_call_t c;
    uint64_t gap = h_hash3(a->seed, (uint64_t)i, 0x676170);
    if (a->gaps && gap % 4 == 0)
      h_sleep_ms((int)(gap / 4 % 3000));
    rc_draw(a->seed, (uint64_t)i, h->nranks, 4096, &c);
    int r = rc_run(&s, &c, h->comm);
    if (r != 0) {
      char what[160];
      rc_describe(&c, what, sizeof what);
      rc_rank_free(&s);
      return h_fail(h, "call %d (%s): %s: %s", i, what,
                    r == RC_WRONG_DATA ? "wrong data"
                                       : ringcc_strerror((ringcc_result_t)r),
                    ringcc_comm_last_error(h->comm));
    }
    a->done[h->rank] = i + 1;
  }
  a->seconds[h->rank] = h_now_s() - t0;
  rc_rank_free(&s);
  return 0;
}

static double run_random(soak_area_t *a, const char *name, double timeout_s) {
  layout_t L = make_layout(VANISH_HOSTS, 1, false);
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_random, .arg = a, .config = &cfg,
                     .timeout_s = timeout_s, .name = name};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  ns_result_free(&res);
  cr_assert(ok, "%s: a rank failed (above): %d, %d, %d calls done", name,
            a->done[0], a->done[1], a->done[2]);
  double worst = 0;
  for (int r = 0; r < L.nranks; r++)
    worst = a->seconds[r] > worst ? a->seconds[r] : worst;
  return worst;
}

/* netem's 1 % loss, 50 ms +- 20 ms delay (which reorders) on the way between
 * any two hosts (ns_net_impair: this kernel has no sch_netem). Every result
 * exact, nothing hangs; the slowdown against the same calls on the clean
 * network is printed. */
static void impaired(int calls, double timeout_s) {
  net_up(VANISH_HOSTS);
  soak_area_t *a = h_shared_alloc(sizeof *a);
  a->calls = calls;
  a->seed = 0x6e6574656dull;
  double clean = run_random(a, "clean network", timeout_s);
  char why[600];
  ns_impair_t im = {.loss = 0.01, .delay_ms = 50, .jitter_ms = 20};
  cr_assert(ns_net_impair(&g_net, &im, why, sizeof why), "%s", why);
  memset(a->seconds, 0, sizeof a->seconds);
  double bad = run_random(a, "impaired network", timeout_s);
  ns_wire_stats_t *w = g_net.wire_stats;
  fprintf(stderr, "impaired network: %d random collectives on 3 hosts took "
          "%.2f s, %.2f s on the clean network (%.0fx slower); the wire "
          "carried %llu frames, dropped %llu (%.2f %%), delivered %llu out of "
          "order; every result exact\n", calls, bad, clean,
          clean > 0 ? bad / clean : 0, w->frames, w->dropped,
          w->frames ? 100.0 * (double)w->dropped / (double)w->frames : 0,
          w->reordered);
  cr_expect_gt(w->dropped, 0, "the wire dropped nothing");
  h_shared_free(a, sizeof *a);
}

Test(multihost, impaired_network_exact_results, .timeout = 240) {
  impaired(40, 150);
}

/* 8 CPU-bound processes on this 2-CPU machine while the ranks run random
 * collectives with idle gaps of up to 3 s (longer than keepalive's first
 * probe): no rank may take a live peer for a dead one. */
static pid_t *start_hogs(int n) {
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  for (int i = 0; i < n; i++) {
    fflush(NULL);
    pids[i] = fork();
    if (pids[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      volatile uint64_t x = (uint64_t)i;
      for (;;)
        x = x * 6364136223846793005ull + 1;
    }
  }
  return pids;
}

static void stop_hogs(pid_t *pids, int n) {
  for (int i = 0; i < n; i++)
    if (pids[i] > 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
  free(pids);
}

static void under_load(int calls, double timeout_s) {
  net_up(VANISH_HOSTS);
  soak_area_t *a = h_shared_alloc(sizeof *a);
  a->calls = calls;
  a->gaps = true;
  a->seed = 0x6c6f6164ull;
  pid_t *hogs = start_hogs(8);
  double took = run_random(a, "under load", timeout_s);
  stop_hogs(hogs, 8);
  fprintf(stderr, "under load 8: %d random collectives with idle gaps on 3 "
          "hosts took %.1f s, no failure\n", calls, took);
  h_shared_free(a, sizeof *a);
}

Test(multihost, no_false_failure_under_load, .timeout = 240) {
  under_load(40, 200);
}

/* ---- the measurements of docs/reliability.md (scripts/measure-failures.sh) ---------- */

/* Skipped unless RCC_MEASURE_TRIALS (trials per fault kind),
 * RCC_MEASURE_IMPAIRED_CALLS or RCC_MEASURE_LOAD_CALLS (calls of the long
 * runs) is set. */
static int measure_env(const char *name) {
  const char *v = getenv(name);
  return v ? atoi(v) : 0;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static void measure_detection(ns_cut_t how) {
  int trials = measure_env("RCC_MEASURE_TRIALS");
  if (trials <= 0)
    cr_skip_test("a measurement: set RCC_MEASURE_TRIALS");
  net_up(VANISH_HOSTS);
  double *d = calloc((size_t)trials, sizeof *d);
  int failed = 0;
  for (int t = 0; t < trials; t++) {
    char why[600];
    d[t] = vanish_trial(how, false);
    cr_assert(ns_restore(&g_net, VANISH_HOSTS - 1, how, why, sizeof why),
              "%s", why);
    if (d[t] < 0)
      failed++;
    fprintf(stderr, "MEASURE %s trial %d: %.3f s\n", ns_cut_name(how), t + 1,
            d[t]);
  }
  qsort(d, (size_t)trials, sizeof *d, cmp_double);
  fprintf(stderr, "MEASURE %s: %d trials (3 hosts x 2 ranks, the last host "
          "cut mid-allreduce), %d failed a check; time from the cut to the "
          "last survivor's error: median %.2f s, min %.2f s, max %.2f s\n",
          ns_cut_name(how), trials, failed, d[trials / 2], d[0],
          d[trials - 1]);
  cr_expect_eq(failed, 0);
  free(d);
}

Test(measure, link_down_detection, .timeout = 7200) {
  measure_detection(NS_CUT_LINK_DOWN);
}
Test(measure, packets_dropped_detection, .timeout = 7200) {
  measure_detection(NS_CUT_DROP);
}
Test(measure, impaired_network_long, .timeout = 7200) {
  int calls = measure_env("RCC_MEASURE_IMPAIRED_CALLS");
  if (calls <= 0)
    cr_skip_test("a measurement: set RCC_MEASURE_IMPAIRED_CALLS");
  impaired(calls, 7000);
}
Test(measure, under_load_long, .timeout = 7200) {
  int calls = measure_env("RCC_MEASURE_LOAD_CALLS");
  if (calls <= 0)
    cr_skip_test("a measurement: set RCC_MEASURE_LOAD_CALLS");
  under_load(calls, 7000);
}
TestSuite(measure, .fini = net_down);

/* ---- the secret never crosses the wire ------------------------------------------------- */

/* What each rank knew, for the sniffer's test to look for. */
typedef struct {
  uint8_t secret[16];   /* RINGCC_SECRET, as bytes */
  char secret_hex[33];
  uint8_t key[NS_MAX_RANKS][32];   /* the communicator's */
  uint8_t split_key[NS_MAX_RANKS][32];
  int split_ok[NS_MAX_RANKS];
} wire_area_t;

static int body_secret(h_ctx_t *h) {
  wire_area_t *a = h->arg;
  const char *hex = getenv("RINGCC_SECRET");
  if (h->rank == 0 && hex != NULL && strlen(hex) == 32) {
    snprintf(a->secret_hex, sizeof a->secret_hex, "%s", hex);
    for (int i = 0; i < 16; i++) {
      unsigned b;
      sscanf(hex + 2 * i, "%2x", &b);
      a->secret[i] = (uint8_t)b;
    }
  }
  memcpy(a->key[h->rank], h->comm->key, 32);
  int64_t v = h->rank;
  if (!h_ok(h, ringcc_allreduce(RINGCC_IN_PLACE, &v, 1, RINGCC_INT64,
                                RINGCC_SUM, h->comm, NULL), "allreduce"))
    return 1;
  ringcc_comm_t sub = NULL; /* one group across both hosts, reversed */
  if (!h_ok(h, ringcc_comm_split(h->comm, 0, -h->rank, &sub), "split"))
    return 1;
  memcpy(a->split_key[h->rank], sub->key, 32);
  v = h->rank;
  if (!h_ok(h, ringcc_allreduce(RINGCC_IN_PLACE, &v, 1, RINGCC_INT64,
                                RINGCC_SUM, sub, NULL), "allreduce in split"))
    return 1;
  a->split_ok[h->rank] = 1;
  return ringcc_comm_destroy(sub) != RINGCC_SUCCESS;
}

static bool holds(const unsigned char *buf, size_t len, const void *what,
                  size_t n) {
  return memmem(buf, len, what, n) != NULL;
}

/* A sniffer on the switch records every frame of a job on 2 hosts (init:
 * rendezvous, bootstrap ring, TCP connections; an allreduce; a split and an
 * allreduce in it). Nowhere on the wire: the secret (bytes, or hex in either
 * case), either communicator's key, or an id with its secret (the split's
 * records carry the new id with the secret zeroed). Before: the secret led
 * every rendezvous and ring hello, the communicator's secret was
 * all-gathered, and the split's id carried its secret. */
Test(multihost, the_secret_never_crosses_the_wire, .timeout = 90) {
  layout_t L = make_layout(2, 1, false);
  net_up(2);
  wire_area_t *a = h_shared_alloc(sizeof *a);
  ns_capture_t cap;
  char why[600];
  cr_assert(ns_capture_start(&g_net, &cap, 64 << 20, why, sizeof why), "%s",
            why);
  ringcc_config_t cfg = test_config(30000);
  ns_run_opts_t o = {.net = &g_net, .nranks = L.nranks, .host_of = L.host_of,
                     .body = body_secret, .arg = a, .config = &cfg,
                     .timeout_s = 60, .name = "secret on the wire"};
  ns_result_t res;
  bool ok = ns_run(&o, &res);
  h_sleep_ms(200); /* the last frames */
  ns_capture_stop(&cap);
  ns_result_free(&res);
  cr_assert(ok, "the ranks failed (above)");
  size_t n = __atomic_load_n(cap.len, __ATOMIC_ACQUIRE);
  const unsigned char *w = cap.buf;
  fprintf(stderr, "secret on the wire: %zu bytes captured\n", n);
  cr_assert(a->secret_hex[0] != '\0' && a->split_ok[0] && a->split_ok[1]);
  cr_assert(holds(w, n, "RCCA", 4), "the capture holds no handshake: the "
            "sniffer saw nothing");
  char upper[33];
  for (int i = 0; i < 33; i++)
    upper[i] = (char)toupper((unsigned char)a->secret_hex[i]);
  cr_expect(!holds(w, n, a->secret, 16), "the secret crossed the wire");
  cr_expect(!holds(w, n, a->secret_hex, 32) && !holds(w, n, upper, 32),
            "the secret crossed the wire in hex");
  for (int r = 0; r < L.nranks; r++) {
    cr_expect(!holds(w, n, a->key[r], 16), "rank %d's key crossed the wire",
              r);
    cr_expect(!holds(w, n, a->split_key[r], 16),
              "rank %d's split communicator's key crossed the wire", r);
  }
  /* Ids on the wire (the split's records): magic, version, and a secret
   * (bytes 32..47) of zeros. */
  static const unsigned char magic[8] = {'R', 'C', 'C', 'I', 0, 1, 0, 0};
  int ids = 0, with_secret = 0;
  for (const unsigned char *p = w; (p = memmem(p, n - (size_t)(p - w), magic,
                                               8)) != NULL; p++) {
    static const unsigned char zero[16];
    ids++;
    with_secret += (size_t)(p - w) + 48 <= n && memcmp(p + 32, zero, 16) != 0;
  }
  fprintf(stderr, "secret on the wire: %d ids seen, %d with a secret\n", ids,
          with_secret);
  cr_expect_eq(with_secret, 0, "an id with its secret crossed the wire");
  ns_capture_free(&cap);
  h_shared_free(a, sizeof *a);
}
