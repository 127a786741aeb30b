/*
 * tcp_bench.c - ringcc-bench's measurement of AllToAllv, Gather and Scatter
 * written directly on TCP sockets over 127.0.0.1, no library: what the
 * exchange itself costs on this machine, next to libringcc and Open MPI over
 * the same loopback (scripts/bench-vcoll.sh, configuration tcp-raw).
 *
 *   tcp-bench --nranks 4 --coll alltoallv -b 4K -e 64M -f 4 [--json FILE]
 *
 * The program forks its N ranks. Before it forks, it listens on 127.0.0.1
 * (an ephemeral port) once per rank, so every rank knows every port; rank r
 * connects to the ranks below it and accepts the ranks above it: a full
 * mesh, one socket per pair, TCP_NODELAY, non-blocking. A call posts all of
 * the rank's sends and receives at once and moves them in the rank's one
 * thread, sleeping in poll() until a socket is ready, then send() or recv()
 * of the rest of each ready block: each block leaves in as few system calls
 * as the socket buffers allow and lands straight in the user's buffer. There
 * are no headers, no slots, no progress thread and no matching, so a library
 * over one socket per pair does at least this work; it may still be faster
 * by ordering or pacing its writes (this program does not).
 *   alltoallv: rank i sends rank j bc_vcount() elements (the uneven rule of
 *              every program's --help), its own block by memcpy;
 *   gather, scatter: every rank's block to / from rank 0, the root's own
 *              by memcpy.
 * The few collectives the measurement itself needs (barrier, max, sum, an
 * allgather of a few bytes) are the same exchange of small messages. Out of
 * place only, any -d (the bytes move unchanged). Everything else - options,
 * sizes, inputs, the timed loop, the check of every element, the columns and
 * the JSON - is bench_common.c, the measurement of tools/ringcc-bench.c too.
 *
 * The parent only waits (bc_fork_ranks): when a rank fails it stops the
 * others; after -T seconds (exit 124), or on SIGTERM/SIGINT/SIGHUP (exit
 * 128+signal), it stops them all.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_common.h"

#define PROG_NAME "tcp-bench"
#define MAX_RANKS 64

static const char *const call_descs[BC_NUM_COLLS] = {
    [BC_GATHER] = "every rank's block sent to rank 0 (send/recv on one "
                  "socket per pair, poll()), host buffers",
    [BC_SCATTER] = "rank 0 sends every rank its block (send/recv on one "
                   "socket per pair, poll()), host buffers",
    [BC_ALLTOALLV] = "every pair's uneven blocks at once (send/recv on one "
                     "socket per pair, poll()), host buffers",
};

/* One rank's part of an exchange with peer p: bytes to send and to receive. */
struct xfer {
  const char *s;
  size_t slen, sdone;
  char *r;
  size_t rlen, rdone;
};

struct tcp_ctx {
  int rank, nranks;
  int fd[MAX_RANKS]; /* -1 for this rank */
  struct xfer x[MAX_RANKS];
};

static void die(const struct tcp_ctx *c, const char *what, int e) {
  fprintf(stderr, PROG_NAME ": rank %d: %s: %s\n", c->rank, what,
          e ? strerror(e) : "the peer closed the connection");
  fflush(stdout);
  fflush(stderr);
  _exit(BC_EXIT_FAILED);
}

/* Moves every pending part of c->x until all are done (this rank's own entry
 * is never pending). */
static void exchange(struct tcp_ctx *c) {
  struct pollfd pf[MAX_RANKS];
  int who[MAX_RANKS];
  for (;;) {
    int np = 0;
    for (int p = 0; p < c->nranks; p++) {
      struct xfer *x = &c->x[p];
      short ev = (short)((x->sdone < x->slen ? POLLOUT : 0) |
                         (x->rdone < x->rlen ? POLLIN : 0));
      if (p == c->rank || ev == 0)
        continue;
      pf[np] = (struct pollfd){.fd = c->fd[p], .events = ev};
      who[np++] = p;
    }
    if (np == 0)
      return;
    if (poll(pf, (nfds_t)np, -1) < 0) {
      if (errno == EINTR)
        continue;
      die(c, "poll", errno);
    }
    for (int k = 0; k < np; k++) {
      struct xfer *x = &c->x[who[k]];
      if (pf[k].revents & (POLLERR | POLLNVAL))
        die(c, "socket error", ECONNRESET);
      if ((pf[k].revents & (POLLOUT | POLLHUP)) && x->sdone < x->slen) {
        ssize_t w = send(pf[k].fd, x->s + x->sdone, x->slen - x->sdone,
                         MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
          die(c, "send", errno);
        if (w > 0)
          x->sdone += (size_t)w;
      }
      if ((pf[k].revents & (POLLIN | POLLHUP)) && x->rdone < x->rlen) {
        ssize_t r = recv(pf[k].fd, x->r + x->rdone, x->rlen - x->rdone, 0);
        if (r == 0)
          die(c, "recv", 0);
        if (r < 0 && errno != EAGAIN && errno != EINTR)
          die(c, "recv", errno);
        if (r > 0)
          x->rdone += (size_t)r;
      }
    }
  }
}

static void plan_clear(struct tcp_ctx *c) {
  memset(c->x, 0, sizeof(c->x[0]) * (size_t)c->nranks);
}

static int tcp_call(void *ctx, const struct bc_options *o,
                    const struct bc_plan *p, bool in_place, void *sbuf,
                    void *rbuf) {
  struct tcp_ctx *c = ctx;
  int n = c->nranks, me = c->rank, root = o->root;
  size_t es = bc_dtype_size(o->dtype), blk = p->arg * es;
  const char *s = sbuf;
  char *r = rbuf;
  (void)in_place; /* out of place only: bc_run never asks otherwise */
  plan_clear(c);
  if (o->coll == BC_ALLTOALLV) {
    size_t so = 0, ro = 0;
    for (int q = 0; q < n; q++) {
      size_t sb = bc_vcount(o->coll, n, p->arg, me, q) * es;
      size_t rb = bc_vcount(o->coll, n, p->arg, q, me) * es;
      if (q == me)
        memcpy(r + ro, s + so, sb); /* sb == rb: the rule is symmetric */
      else
        c->x[q] = (struct xfer){.s = s + so, .slen = sb, .r = r + ro,
                                .rlen = rb};
      so += sb;
      ro += rb;
    }
  } else if (o->coll == BC_GATHER) {
    if (me == root) {
      memcpy(r + (size_t)root * blk, s, blk);
      for (int q = 0; q < n; q++)
        if (q != me)
          c->x[q] = (struct xfer){.r = r + (size_t)q * blk, .rlen = blk};
    } else {
      c->x[root] = (struct xfer){.s = s, .slen = blk};
    }
  } else { /* BC_SCATTER */
    if (me == root) {
      memcpy(r, s + (size_t)root * blk, blk);
      for (int q = 0; q < n; q++)
        if (q != me)
          c->x[q] = (struct xfer){.s = s + (size_t)q * blk, .slen = blk};
    } else {
      c->x[root] = (struct xfer){.r = r, .rlen = blk};
    }
  }
  exchange(c);
  return 0;
}

static void tcp_allgather_bytes(void *ctx, const void *mine, void *all,
                                size_t bytes) {
  struct tcp_ctx *c = ctx;
  char *a = all;
  plan_clear(c);
  memcpy(a + (size_t)c->rank * bytes, mine, bytes);
  for (int q = 0; q < c->nranks; q++)
    if (q != c->rank)
      c->x[q] = (struct xfer){.s = mine, .slen = bytes,
                              .r = a + (size_t)q * bytes, .rlen = bytes};
  exchange(c);
}

static void tcp_barrier(void *ctx) {
  char mine = 1, all[MAX_RANKS];
  tcp_allgather_bytes(ctx, &mine, all, 1);
}

static double tcp_max_double(void *ctx, double mine) {
  struct tcp_ctx *c = ctx;
  double all[MAX_RANKS], m = mine;
  tcp_allgather_bytes(ctx, &mine, all, sizeof(mine));
  for (int q = 0; q < c->nranks; q++)
    m = all[q] > m ? all[q] : m;
  return m;
}

static long long tcp_sum_ll(void *ctx, long long mine) {
  struct tcp_ctx *c = ctx;
  long long all[MAX_RANKS], s = 0;
  tcp_allgather_bytes(ctx, &mine, all, sizeof(mine));
  for (int q = 0; q < c->nranks; q++)
    s += all[q];
  return s;
}

static void tcp_abort_job(void *ctx) {
  (void)ctx;
  fflush(stdout);
  fflush(stderr);
  _exit(BC_EXIT_FAILED); /* the parent stops the others */
}

static int set_fast(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
                 fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0
             ? -1
             : 0;
}

/* Every rank's listening socket and its port, made before the fork. */
struct listeners {
  int fd[MAX_RANKS];
  uint16_t port[MAX_RANKS];
};

/* Rank r: the mesh (connect below, accept above), then the measurement. */
static int rank_main(const struct bc_options *o, int rank, void *arg) {
  const struct listeners *ls = arg;
  const int *lfd = ls->fd;
  const uint16_t *port = ls->port;
  struct tcp_ctx c = {.rank = rank, .nranks = o->nranks};
  for (int q = 0; q < o->nranks; q++) {
    c.fd[q] = -1;
    if (q != rank)
      close(lfd[q]);
  }
  for (int q = 0; q < rank; q++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port[q]),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
      die(&c, "connect", errno);
    uint32_t me = (uint32_t)rank;
    if (write(fd, &me, sizeof(me)) != (ssize_t)sizeof(me))
      die(&c, "write (hello)", errno);
    c.fd[q] = fd;
  }
  for (int k = rank + 1; k < o->nranks; k++) {
    uint32_t who = 0;
    int fd = accept(lfd[rank], NULL, NULL);
    if (fd < 0)
      die(&c, "accept", errno);
    if (read(fd, &who, sizeof(who)) != (ssize_t)sizeof(who) ||
        who <= (uint32_t)rank || who >= (uint32_t)o->nranks ||
        c.fd[who] >= 0)
      die(&c, "a stranger's or a wrong hello", EPROTO);
    c.fd[who] = fd;
  }
  close(lfd[rank]);
  for (int q = 0; q < o->nranks; q++)
    if (q != rank && set_fast(c.fd[q]) != 0)
      die(&c, "setsockopt/fcntl", errno);

  struct bc_backend be = {
      .prog = PROG_NAME,
      .library = "none: TCP sockets on 127.0.0.1, one per pair, poll()",
      .call_desc = call_descs[o->coll],
      .ctx = &c,
      .call = tcp_call,
      .barrier = tcp_barrier,
      .max_double = tcp_max_double,
      .sum_ll = tcp_sum_ll,
      .allgather_bytes = tcp_allgather_bytes,
      .abort_job = tcp_abort_job,
  };
  int status = bc_run(&be, o, rank, o->nranks);
  tcp_barrier(&c); /* nobody closes while another still reads */
  for (int q = 0; q < o->nranks; q++)
    if (c.fd[q] >= 0)
      close(c.fd[q]);
  return status;
}

int main(int argc, char **argv) {
  struct bc_options o;
  char err[512];
  const char *usage_err =
      bc_parse_options(argc, argv, BC_OPT_FORK, &o, err, sizeof err);
  if (usage_err == NULL && o.help) {
    bc_usage(stdout, PROG_NAME, " --nranks N", BC_OPT_FORK);
    return 0;
  }
  if (usage_err == NULL && o.coll != BC_ALLTOALLV && o.coll != BC_GATHER &&
      o.coll != BC_SCATTER) {
    snprintf(err, sizeof err, "--coll %s: only alltoallv, gather and scatter "
             "are written on raw sockets", bc_coll_name(o.coll));
    usage_err = err;
  }
  if (usage_err == NULL && (o.nranks < 1 || o.nranks > MAX_RANKS)) {
    snprintf(err, sizeof err, "--nranks %d: 1 to %d", o.nranks, MAX_RANKS);
    usage_err = err;
  }
  if (usage_err == NULL)
    usage_err = bc_check_nranks(&o, o.nranks, err, sizeof err);
  if (usage_err) {
    fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n",
            usage_err);
    return BC_EXIT_USAGE;
  }

  struct listeners ls;
  for (int r = 0; r < o.nranks; r++) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ls.fd[r] = socket(AF_INET, SOCK_STREAM, 0);
    if (ls.fd[r] < 0 ||
        bind(ls.fd[r], (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(ls.fd[r], MAX_RANKS) != 0 ||
        getsockname(ls.fd[r], (struct sockaddr *)&a, &len) != 0) {
      fprintf(stderr, PROG_NAME ": listening on 127.0.0.1: %s\n",
              strerror(errno));
      return BC_EXIT_FAILED;
    }
    ls.port[r] = ntohs(a.sin_port);
  }
  int status = bc_fork_ranks(PROG_NAME, &o, rank_main, &ls);
  for (int r = 0; r < o.nranks; r++)
    close(ls.fd[r]);
  return status;
}
