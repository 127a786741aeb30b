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
 *   shrink       3x2: every pair linked (an alltoall, a send to and a
 *                receive from every rank), then ringcc_comm_shrink without
 *                rank 1: the new communicator takes over the shared-memory
 *                FIFOs and the TCP links between hosts (no socket added
 *                but its bootstrap ring's 2); allreduces alternate on it
 *                and on the parent, exact.
 *   examples     build/examples/parallel_groups, 8 ranks on 2 hosts.
 *   errors       an unreachable rendezvous fails in time and names the
 *                address; a rank SIGKILLed on another host during a stream of
 *                allreduces makes the others fail within seconds naming it;
 *                a stranger at the rendezvous does not stop the ranks; a peer
 *                that leaves cleanly (goodbye, then close) right after its
 *                last send is no failure for the ranks still running.
 *   vanishing    a host whose link goes down, or whose packets are dropped,
 *                mid-allreduce: every other rank fails within 10 s naming
 *                it; a link made on first use to a host whose packets
 *                are dropped: RINGCC_ERR_NETWORK (no answer), not a dead
 *                peer; a link down for 2 s: every rank carries on, exactly;
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
 *
 * One program, two sources: from the errors on (errors, vanishing, measure,
 * the secret), the tests are in test/parts/multihost_failures.c; the
 * helpers both use are in test_multihost.h.
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

#include "test_multihost.h"

/* ---- the virtual network of a test ---------------------------------------- */

ns_net_t g_net;

void net_down(void) { ns_net_destroy(&g_net); }

/* Builds nhosts virtual hosts, or skips the test saying why. */
void net_up(int nhosts) {
  char why[600];
  if (!ns_supported(why, sizeof why))
    cr_skip_test("%s", why);
  ns_cleanup_stale();
  if (!ns_net_create(&g_net, nhosts, why, sizeof why))
    cr_skip_test("cannot build %d virtual hosts: %s", nhosts, why);
}

TestSuite(multihost, .fini = net_down);

layout_t make_layout(int nhosts, int per_host, bool interleaved) {
  layout_t l = {.nhosts = nhosts, .per_host = per_host,
                .nranks = nhosts * per_host, .interleaved = interleaved};
  ns_layout(nhosts, per_host, interleaved, l.host_of);
  snprintf(l.name, sizeof l.name, "%dx%d%s", nhosts, per_host,
           interleaved ? " interleaved" : "");
  return l;
}

/* Collectives fail with a library message well before a run's deadline. */
ringcc_config_t test_config(int64_t timeout_ms) {
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

int body_one_allreduce(h_ctx_t *ctx) {
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

/* ---- shrink: a healthy communicator's links taken over ------------------ */

typedef struct {
  layout_t L;
  volatile int added[NS_MAX_RANKS]; /* sockets the shrink left open more */
} shrink_area_t;

/* An exact allreduce of n floats on comm, as rank me of size. */
static int shrink_allreduce(h_ctx_t *h, ringcc_comm_t comm, int me, int size,
                            size_t n, uint64_t salt, const char *what) {
  float *in = h_xmalloc(n * 4), *got = h_xmalloc(n * 4);
  float *want = h_xmalloc(n * 4);
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, me, 0, salt, in, n);
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, size, 0, salt, want, n);
  int rc = h_ok(h, ringcc_allreduce(in, got, n, RINGCC_FLOAT32, RINGCC_SUM,
                                    comm, NULL), what) &&
                   h_check_elems(h, what, RINGCC_FLOAT32, got, want, n)
               ? 0
               : 1;
  free(in);
  free(got);
  free(want);
  return rc;
}

static int body_shrink(h_ctx_t *h) {
  shrink_area_t *a = h->arg;
  int me = h->rank, n = h->nranks, gone = 1, rc = 0;
  size_t count = 4096;
  int32_t *out = h_xmalloc(count * 4 * (size_t)n);
  int32_t *in = h_xmalloc(count * 4 * (size_t)n);
  for (size_t k = 0; k < count * (size_t)n; k++)
    out[k] = me * 1000003 + (int32_t)k;
  /* Every pair's links: collectives (an alltoall) and point to point. */
  if (!h_ok(h, ringcc_alltoall(out, in, count, RINGCC_INT32, h->comm, NULL),
            "alltoall on the parent"))
    rc = 1;
  ringcc_group_start();
  for (int q = 0; q < n; q++)
    if (q != me) {
      ringcc_send(out, count, RINGCC_INT32, q, h->comm, NULL);
      ringcc_recv(in + (size_t)q * count, count, RINGCC_INT32, q, h->comm,
                  NULL);
    }
  if (rc == 0 && !h_ok(h, ringcc_group_end(), "sends and receives"))
    rc = 1;
  for (int q = 0; q < n && rc == 0; q++)
    for (size_t k = 0; k < count && rc == 0 && q != me; k++)
      if (in[(size_t)q * count + k] != q * 1000003 + (int32_t)k)
        rc = h_fail(h, "receive from rank %d: element %zu wrong", q, k);
  free(in);
  free(out);
  ringcc_comm_t child = NULL;
  int cme = me - (me > gone), m = n - 1;
  if (rc == 0 && me != gone) {
    int before = h_count_sockets();
    if (!h_ok(h, ringcc_comm_shrink(h->comm, &gone, 1, &child),
              "ringcc_comm_shrink without rank 1"))
      return 1;
    a->added[me] = h_count_sockets() - before;
    rc = shrink_allreduce(h, child, cme, m, 300000, 1, "child allreduce");
  }
  if (rc == 0)
    rc = shrink_allreduce(h, h->comm, me, n, 65537, 2, "parent allreduce");
  if (rc == 0 && child != NULL)
    rc = shrink_allreduce(h, child, cme, m, 1031, 3, "child allreduce, "
                          "after the parent");
  if (child != NULL)
    ringcc_comm_destroy(child);
  return rc;
}

Test(multihost, shrink_takes_over_the_links_3x2, .timeout = 120) {
  shrink_area_t *a = h_shared_alloc(sizeof(*a));
  a->L = make_layout(3, 2, false);
  net_up(3);
  ringcc_config_t cfg = test_config(30000);
  ns_run_opts_t o = {.net = &g_net, .nranks = a->L.nranks,
                     .host_of = a->L.host_of, .body = body_shrink, .arg = a,
                     .config = &cfg, .timeout_s = 90, .name = a->L.name};
  bool ok = ns_run(&o, NULL);
  int most = 0;
  for (int r = 0; r < a->L.nranks; r++)
    most = a->added[r] > most ? a->added[r] : most;
  fprintf(stderr, "multihost: 3x2, healthy shrink without rank 1: at most "
          "%d sockets more on a rank; allreduces on child and parent: %s\n",
          most, ok ? "exact" : "FAILED");
  cr_assert(ok, "%s: shrink failed (see above)", a->L.name);
  for (int r = 0; r < a->L.nranks; r++)
    cr_expect(a->added[r] <= 2, "rank %d: the shrink added %d sockets (a "
              "link connected anew)", r, a->added[r]);
  h_shared_free(a, sizeof(*a));
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
