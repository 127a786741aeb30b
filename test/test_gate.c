/*
 * test_gate.c - the listener gate (lib/util/gate.h) on its own, with real
 * sockets on loopback: a connection that proves itself is handed out;
 * strangers that say something wrong are dropped at once; the oldest
 * stranger makes room; a started connection (one the listener answered) is
 * never dropped for strangers, however many come, and a gate full of
 * started ones leaves new connections in the kernel's queue instead of
 * dropping anyone; connections expire, but only after what they sent was
 * read; out of descriptors (EMFILE, in a forked child with a low
 * RLIMIT_NOFILE) the gate backs off and still takes a real peer; it never
 * waits for one stranger.
 *
 * The protocol of these tests (the check below): the peer sends "OPEN"; the
 * listener answers "CHAL" (the connection is then started); the peer
 * answers "GOOD" (proven) or anything else (a false proof, refused). A first
 * message other than "OPEN" is a stranger's.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "gate.h"
#include "socket.h"

struct proto {
  size_t got;
  int challenged;
  char buf[8];
};

static int checks; /* how often the check ran */

static enum rcc_gate_step check(void *arg, struct rcc_gate_conn *c,
                                char *why, size_t whylen) {
  struct proto *p = c->state;
  (void)arg;
  checks++;
  while (p->got < sizeof(p->buf)) {
    ssize_t n = recv(c->fd, p->buf + p->got, sizeof(p->buf) - p->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      break;
    if (n <= 0) {
      snprintf(why, whylen, "%s", n == 0 ? "closed" : strerror(errno));
      return RCC_GATE_DROP;
    }
    p->got += (size_t)n;
    if (p->got >= 4 && memcmp(p->buf, "OPEN", 4) != 0) {
      snprintf(why, whylen, "not an opening");
      return RCC_GATE_DROP;
    }
    if (p->got >= 4 && !p->challenged) {
      if (send(c->fd, "CHAL", 4, MSG_NOSIGNAL) != 4) {
        snprintf(why, whylen, "the challenge did not go");
        return RCC_GATE_DROP;
      }
      p->challenged = 1;
    }
  }
  if (p->got == sizeof(p->buf)) {
    if (memcmp(p->buf + 4, "GOOD", 4) == 0)
      return RCC_GATE_PROVEN;
    snprintf(why, whylen, "a false proof");
    return RCC_GATE_REFUSE;
  }
  return p->challenged ? RCC_GATE_STARTED : RCC_GATE_WAIT;
}

struct listener {
  int fd;
  struct sockaddr_storage addr;
  struct rcc_gate *gate;
};

static void listener_open(struct listener *l, int max_held,
                          int64_t expire_ms) {
  struct sockaddr_storage any;
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_socket_parse_host_port("127.0.0.1:1", &any, err,
                                          sizeof(err)), 0, "%s", err);
  rcc_socket_addr_set_port(&any, 0);
  cr_assert_eq(rcc_socket_listen(&any, &l->fd, &l->addr, err, sizeof(err)),
               RINGCC_SUCCESS, "%s", err);
  struct rcc_gate_config cfg = {
      .what = "test gate", .log_rank = -1, .max_held = max_held,
      .expire_ns = expire_ms * 1000000LL, .backoff_ns = 20 * 1000000LL,
      .state_bytes = sizeof(struct proto), .check = check};
  l->gate = rcc_gate_new(l->fd, &cfg);
  cr_assert_not_null(l->gate);
}

static void listener_close(struct listener *l) {
  rcc_gate_free(l->gate);
  close(l->fd);
}

static int peer_connect(const struct listener *l) {
  int fd;
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_socket_connect(&l->addr, rcc_deadline_after_ms(3000), &fd,
                                  err, sizeof(err)), RINGCC_SUCCESS, "%s",
               err);
  return fd;
}

static void peer_send(int fd, const char *s) {
  cr_assert_eq(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* 1 when the listener closed fd (EOF or a reset); 0 when it is open. */
static int closed_by_listener(int fd) {
  char buf[16];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0)
      continue; /* a challenge: read past it */
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

/* Runs the gate for ms; returns the fd of a connection it handed out, or
 * -1 when none proved itself in that time. */
static int gate_for(struct listener *l, int ms, struct proto *st) {
  struct rcc_gate_passed out;
  char err[RCC_ERRLEN];
  struct proto ignored;
  ringcc_result_t r = rcc_gate_next(l->gate, rcc_deadline_after_ms(ms), -1,
                                    &out, st ? st : &ignored, err, sizeof(err));
  cr_assert(r == RINGCC_SUCCESS || r == RINGCC_ERR_TIMEOUT, "%s", err);
  return r == RINGCC_SUCCESS ? out.fd : -1;
}

/* Whether a and b are the two ends of one connection. */
static int same_connection(int a, int b) {
  struct sockaddr_storage la, pb;
  socklen_t n1 = sizeof(la), n2 = sizeof(pb);
  cr_assert_eq(getsockname(a, (struct sockaddr *)&la, &n1), 0);
  cr_assert_eq(getpeername(b, (struct sockaddr *)&pb, &n2), 0);
  return rcc_socket_addr_port(&la) == rcc_socket_addr_port(&pb);
}

TestSuite(gate, .timeout = 30);

Test(gate, a_proven_connection_is_handed_out) {
  struct listener l;
  struct proto st;
  listener_open(&l, 8, 5000);
  int peer = peer_connect(&l);
  peer_send(peer, "OPENGOOD");
  int fd = gate_for(&l, 2000, &st);
  cr_assert_geq(fd, 0, "the real peer was not handed out");
  cr_expect(same_connection(peer, fd));
  cr_expect_eq(st.got, 8u);
  cr_expect_arr_eq(st.buf, "OPENGOOD", 8);
  char chal[4];
  cr_expect_eq(recv(peer, chal, 4, 0), 4);
  cr_expect_arr_eq(chal, "CHAL", 4);
  cr_expect_eq(rcc_gate_held(l.gate), 0);
  close(fd);
  close(peer);
  listener_close(&l);
}

Test(gate, strangers_that_say_something_wrong_are_dropped_at_once) {
  struct listener l;
  listener_open(&l, 8, 5000);
  int garbage = peer_connect(&l), liar = peer_connect(&l);
  int leaver = peer_connect(&l);
  peer_send(garbage, "GET / HTTP/1.0\r\n\r\n");
  peer_send(liar, "OPENBAD!");
  close(leaver);
  int64_t t0 = rcc_now_ns();
  cr_expect_eq(gate_for(&l, 300, NULL), -1);
  cr_expect_eq(rcc_gate_held(l.gate), 0, "%d held", rcc_gate_held(l.gate));
  cr_expect(closed_by_listener(garbage));
  cr_expect(closed_by_listener(liar));
  cr_expect_lt(rcc_now_ns() - t0, 1000000000LL);
  close(garbage);
  close(liar);
  listener_close(&l);
}

Test(gate, the_oldest_stranger_makes_room) {
  struct listener l;
  int s[5];
  listener_open(&l, 4, 5000);
  for (int i = 0; i < 5; i++) {
    s[i] = peer_connect(&l);
    cr_expect_eq(gate_for(&l, 30, NULL), -1);
  }
  cr_expect_eq(rcc_gate_held(l.gate), 4);
  cr_expect(closed_by_listener(s[0]), "the oldest stranger was kept");
  for (int i = 1; i < 5; i++)
    cr_expect(!closed_by_listener(s[i]), "stranger %d was dropped", i);
  for (int i = 0; i < 5; i++)
    close(s[i]);
  listener_close(&l);
}

/* Issue 32, point 4: a real peer that got its challenge and is paused (its
 * answer not yet sent) while hundreds of strangers come keeps its
 * connection, and is handed out when its answer comes. */
Test(gate, a_started_connection_is_never_dropped_for_strangers) {
  enum { STRANGERS = 400, HELD = 16 };
  struct listener l;
  struct proto st;
  char chal[4];
  int s[STRANGERS];
  listener_open(&l, HELD, 10000);
  int real = peer_connect(&l);
  peer_send(real, "OPEN");
  cr_expect_eq(gate_for(&l, 50, NULL), -1);
  cr_assert_eq(recv(real, chal, 4, 0), 4); /* it counts itself connected */
  for (int i = 0; i < STRANGERS; i++) {
    s[i] = peer_connect(&l);
    if (i % 3 == 1)
      peer_send(s[i], "OP"); /* an opening that never ends */
    if (i % 50 == 49)
      cr_expect_eq(gate_for(&l, 20, NULL), -1);
  }
  cr_expect_eq(gate_for(&l, 100, NULL), -1);
  cr_expect_leq(rcc_gate_held(l.gate), HELD);
  cr_assert(!closed_by_listener(real), "the paused real peer was dropped");
  int open = 0;
  for (int i = 0; i < STRANGERS; i++)
    open += !closed_by_listener(s[i]);
  cr_expect_leq(open, HELD, "%d strangers still connected", open);
  peer_send(real, "GOOD");
  int fd = gate_for(&l, 2000, &st);
  cr_assert_geq(fd, 0, "the real peer was not handed out");
  cr_expect(same_connection(real, fd));
  for (int i = 0; i < STRANGERS; i++)
    close(s[i]);
  close(fd);
  close(real);
  listener_close(&l);
}

/* Every held connection started: the gate drops none of them and leaves the
 * next connection in the kernel's queue until one leaves. */
Test(gate, full_of_started_connections_the_next_one_waits) {
  struct listener l;
  char chal[4];
  listener_open(&l, 2, 10000);
  int a = peer_connect(&l), b = peer_connect(&l);
  peer_send(a, "OPEN");
  peer_send(b, "OPEN");
  cr_expect_eq(gate_for(&l, 50, NULL), -1);
  cr_assert_eq(recv(a, chal, 4, 0), 4);
  cr_assert_eq(recv(b, chal, 4, 0), 4);
  int c = peer_connect(&l); /* the kernel completes it; nobody accepts */
  peer_send(c, "OPEN");
  checks = 0;
  cr_expect_eq(gate_for(&l, 200, NULL), -1);
  cr_expect_eq(rcc_gate_held(l.gate), 2);
  cr_expect(!closed_by_listener(a) && !closed_by_listener(b));
  cr_expect(!closed_by_listener(c));
  cr_expect_eq(recv(c, chal, 4, MSG_DONTWAIT), -1, "c was challenged");
  cr_expect_lt(checks, 400, "the gate spun (%d checks in 200 ms)", checks);
  peer_send(a, "GOOD");
  int fd = gate_for(&l, 1000, NULL);
  cr_assert_geq(fd, 0);
  cr_expect(same_connection(a, fd));
  cr_expect_eq(gate_for(&l, 100, NULL), -1); /* now c comes in */
  cr_expect_eq(recv(c, chal, 4, 0), 4, "c was not taken in after a left");
  cr_expect_eq(rcc_gate_held(l.gate), 2);
  close(fd);
  close(a);
  close(b);
  close(c);
  listener_close(&l);
}

Test(gate, connections_expire) {
  struct listener l;
  listener_open(&l, 8, 300);
  int silent = peer_connect(&l), started = peer_connect(&l);
  peer_send(started, "OPEN");
  int64_t t0 = rcc_now_ns();
  cr_expect_eq(gate_for(&l, 100, NULL), -1);
  cr_expect_eq(rcc_gate_held(l.gate), 2);
  cr_expect_eq(gate_for(&l, 500, NULL), -1);
  double s = (double)(rcc_now_ns() - t0) / 1e9;
  cr_expect_eq(rcc_gate_held(l.gate), 0, "%d held after %.2f s",
               rcc_gate_held(l.gate), s);
  cr_expect(closed_by_listener(silent));
  cr_expect(closed_by_listener(started));
  close(silent);
  close(started);
  listener_close(&l);
}

/* The listener's process did not run for longer than a connection may take
 * (stopped, or busy): what the peer sent meanwhile is read before the
 * connection's time is looked at. */
Test(gate, a_proof_that_came_while_the_listener_slept_counts) {
  struct listener l;
  listener_open(&l, 8, 200);
  int peer = peer_connect(&l);
  cr_expect_eq(gate_for(&l, 50, NULL), -1);
  cr_expect_eq(rcc_gate_held(l.gate), 1);
  peer_send(peer, "OPENGOOD");
  usleep(400000);
  int fd = gate_for(&l, 500, NULL);
  cr_assert_geq(fd, 0, "the connection expired with its proof unread");
  cr_expect(same_connection(peer, fd));
  close(fd);
  close(peer);
  listener_close(&l);
}

Test(gate, never_waits_for_a_stranger) {
  struct listener l;
  listener_open(&l, 8, 5000);
  int silent = peer_connect(&l), partial = peer_connect(&l);
  int started = peer_connect(&l);
  peer_send(partial, "OP");
  peer_send(started, "OPEN");
  cr_expect_eq(gate_for(&l, 50, NULL), -1);
  int peer = peer_connect(&l);
  peer_send(peer, "OPENGOOD");
  int64_t t0 = rcc_now_ns();
  int fd = gate_for(&l, 4000, NULL);
  cr_assert_geq(fd, 0);
  cr_expect(same_connection(peer, fd));
  cr_expect_lt(rcc_now_ns() - t0, 500000000LL, "the real peer waited");
  cr_expect_eq(rcc_gate_held(l.gate), 3);
  close(fd);
  close(peer);
  close(silent);
  close(partial);
  close(started);
  listener_close(&l);
}

Test(gate, extra_fd_wakes_it) {
  struct listener l;
  int p[2];
  listener_open(&l, 8, 5000);
  cr_assert_eq(pipe(p), 0);
  int silent = peer_connect(&l);
  cr_assert_eq(write(p[1], "x", 1), 1);
  struct rcc_gate_passed out;
  char err[RCC_ERRLEN];
  struct proto st;
  int64_t t0 = rcc_now_ns();
  cr_assert_eq(rcc_gate_next(l.gate, rcc_deadline_after_ms(3000), p[0], &out,
                             &st, err, sizeof(err)), RINGCC_SUCCESS, "%s",
               err);
  cr_expect_eq(out.fd, -1);
  cr_expect_lt(rcc_now_ns() - t0, 1000000000LL);
  close(p[0]);
  close(p[1]);
  close(silent);
  listener_close(&l);
}

/* Connect-and-close churn, garbage and silence, hundreds each, with a real
 * peer among them. */
Test(gate, churn_garbage_and_silence) {
  enum { N = 300, HELD = 32 };
  struct listener l;
  int silent[N], fd = -1;
  listener_open(&l, HELD, 5000);
  for (int i = 0; i < N; i++) {
    close(peer_connect(&l));
    int g = peer_connect(&l);
    peer_send(g, "\x16\x03\x01 garbage");
    close(g);
    silent[i] = peer_connect(&l);
    if (i == N / 2) {
      int peer = peer_connect(&l);
      peer_send(peer, "OPENGOOD");
      silent[i] = peer;
    }
    if (i % 40 == 39 && fd < 0)
      fd = gate_for(&l, 10, NULL);
  }
  for (int k = 0; k < 20 && fd < 0; k++)
    fd = gate_for(&l, 100, NULL);
  cr_assert_geq(fd, 0, "the real peer was lost in the churn");
  cr_expect(same_connection(silent[N / 2], fd));
  cr_expect_leq(rcc_gate_held(l.gate), HELD);
  for (int i = 0; i < N; i++)
    close(silent[i]);
  close(fd);
  listener_close(&l);
}

/* The listener's process has few descriptors; 100 silent strangers take
 * them all. The gate backs off, drops the oldest to make room, and takes
 * the real peer; it never fails with EMFILE. */
Test(gate, out_of_descriptors_backs_off) {
  struct listener l;
  listener_open(&l, 64, 8000);
  fflush(NULL);
  int go[2];
  cr_assert_eq(pipe(go), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    char err[RCC_ERRLEN];
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    int highest = 0;
    for (int fd = 0; fd < 1024; fd++)
      if (fcntl(fd, F_GETFD) >= 0)
        highest = fd;
    rl.rlim_cur = (rlim_t)highest + 12; /* a dozen more: strangers take them */
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      _exit(3);
    char c;
    if (read(go[0], &c, 1) != 1) /* the strangers are in the queue */
      _exit(4);
    struct rcc_gate_passed out;
    struct proto st;
    ringcc_result_t r = rcc_gate_next(l.gate, rcc_deadline_after_ms(6000), -1,
                                      &out, &st, err, sizeof(err));
    if (r != RINGCC_SUCCESS) {
      fprintf(stderr, "gate: %s\n", err);
      _exit(1);
    }
    _exit(memcmp(st.buf, "OPENGOOD", 8) == 0 ? 0 : 2);
  }
  close(go[0]);
  int s[100];
  for (int i = 0; i < 100; i++)
    s[i] = peer_connect(&l);
  cr_assert_eq(write(go[1], "g", 1), 1);
  usleep(300000);
  int peer = peer_connect(&l);
  peer_send(peer, "OPENGOOD");
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the gate's process ended with status %d (1: the gate failed, "
            "see above; 2: another connection was handed out)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  for (int i = 0; i < 100; i++)
    close(s[i]);
  close(peer);
  close(go[1]);
  listener_close(&l);
}
