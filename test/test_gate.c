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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
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
#include "harness.h"
#include "proc.h"
#include "socket.h"
#include "stop_spy.h"

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

/* ---- the gate at init: the listeners of the library -------------------- */

/* Strangers for one port: half silent (held open), a quarter garbage (sent,
 * then held), a quarter churn (connect, close). Returns how many
 * connections it made. */
static int strangers_at(const struct sockaddr_storage *a, int *held,
                        int *nheld, int max_held, int n) {
  static const char junk[] = "\x16\x03\x01\x02\x00 garbage, not a handshake";
  int made = 0;
  for (int i = 0; i < n; i++) {
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      break;
    socklen_t len = a->ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                            : sizeof(struct sockaddr_in6);
    if (connect(fd, (const struct sockaddr *)a, len) != 0) {
      close(fd);
      continue; /* that listener closed: init moved on */
    }
    made++;
    if (i % 4 == 3) { /* churn */
      close(fd);
      continue;
    }
    if (i % 4 == 2)
      (void)send(fd, junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (*nheld == max_held) { /* the oldest of ours goes: room for more */
      close(held[0]);
      memmove(held, held + 1, (size_t)(max_held - 1) * sizeof(*held));
      (*nheld)--;
    }
    held[(*nheld)++] = fd;
  }
  return made;
}

/* The IPv4 TCP listeners of the processes pids[n] (their sockets from
 * /proc/PID/fd, listening ones from /proc/self/net/tcp: one network
 * namespace), into a[max]; returns how many. */
static int listeners_of(const pid_t *pids, int npids,
                        struct sockaddr_storage *a, int max) {
  char path[64], line[512];
  unsigned long inodes[1024];
  int ninodes = 0, n = 0;
  for (int p = 0; p < npids; p++) {
    if (pids[p] <= 0)
      continue;
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pids[p]);
    DIR *d = opendir(path);
    if (d == NULL)
      continue;
    for (struct dirent *e; (e = readdir(d)) != NULL && ninodes < 1024;) {
      char link[384], target[64];
      snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
      ssize_t len = readlink(link, target, sizeof(target) - 1);
      if (len <= 0)
        continue;
      target[len] = '\0';
      unsigned long ino;
      if (sscanf(target, "socket:[%lu]", &ino) == 1)
        inodes[ninodes++] = ino;
    }
    closedir(d);
  }
  FILE *f = fopen("/proc/self/net/tcp", "r");
  if (f == NULL)
    return 0;
  while (fgets(line, sizeof(line), f) != NULL && n < max) {
    unsigned ip, port, st;
    unsigned long ino;
    if (sscanf(line, " %*d: %8X:%4X %*X:%*X %X %*X:%*X %*X:%*X %*X %*d %*d "
                     "%lu", &ip, &port, &st, &ino) != 4 || st != 0x0A)
      continue;
    for (int k = 0; k < ninodes; k++)
      if (inodes[k] == ino) {
        struct sockaddr_in *in = (struct sockaddr_in *)&a[n++];
        memset(in, 0, sizeof(*in));
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        in->sin_addr.s_addr = ip ? ip : htonl(INADDR_LOOPBACK);
        break;
      }
  }
  fclose(f);
  return n;
}

enum { INIT_RANKS = 3, VICTIM = 1, PER_PORT = 400 };

struct init_area {
  pid_t pids[INIT_RANKS]; /* written by each rank */
  int flooding;           /* the flooder is at work (atomic) */
  int stop;               /* the parent: enough (atomic) */
  size_t stop_len, stop_off; /* where the victim stops (stop_spy.h) */
  char stop_pattern[8];
  int paused_ms;          /* how long the victim was stopped */
  int ports, strangers;   /* listeners flooded, connections made */
  int paused_strangers;   /* connections made while the victim was stopped */
  int most_in_pause;      /* ... the most on one listener */
  int stopped[INIT_RANKS]; /* the rank's armed send stopped it */
  double init_s[INIT_RANKS];
};

/* 1 when pid is stopped (state T in /proc/PID/stat). */
static int is_stopped(pid_t pid) {
  char buf[256];
  const char *state = rcc_proc_stat((int)pid, buf, sizeof(buf), NULL, 0);
  return state != NULL && state[0] == 'T';
}

/* The flooder: every listener of the parent (the rendezvous) and of the
 * ranks gets PER_PORT strangers, silent, garbage and churn; when the victim
 * has stopped itself (mid-handshake, stop_spy.h), it is continued two
 * seconds later, the strangers still coming. */
static void flooder(struct init_area *a, pid_t parent) {
  struct rlimit rl = {.rlim_cur = 8192, .rlim_max = 8192};
  (void)setrlimit(RLIMIT_NOFILE, &rl);
  enum { MAXP = 32, KEEP = PER_PORT };
  struct sockaddr_storage seen[MAXP];
  int made[MAXP] = {0}, in_pause[MAXP] = {0}, nseen = 0;
  static int held[MAXP][KEEP];
  int nheld[MAXP] = {0};
  int64_t stopped_at = 0;
  int resumed = 0;
  __atomic_store_n(&a->flooding, 1, __ATOMIC_RELEASE);
  struct sockaddr_storage l[MAXP];
  int nl = 0;
  int64_t next_scan = 0;
  while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
    if (rcc_now_ns() >= next_scan) { /* /proc is slow: now and then */
      pid_t pids[1 + INIT_RANKS] = {parent};
      for (int r = 0; r < INIT_RANKS; r++)
        pids[1 + r] = __atomic_load_n(&a->pids[r], __ATOMIC_ACQUIRE);
      nl = listeners_of(pids, 1 + INIT_RANKS, l, MAXP);
      next_scan = rcc_now_ns() + 20000000LL;
    }
    for (int k = 0; k < nl; k++) {
      int i = 0;
      while (i < nseen && memcmp(&seen[i], &l[k], sizeof(l[k])) != 0)
        i++;
      if (i == nseen && nseen < MAXP)
        seen[nseen++] = l[k];
      int pausing = stopped_at != 0 && !resumed;
      if (i < MAXP && (pausing ? in_pause[i] < PER_PORT
                               : made[i] < PER_PORT)) {
        int m = strangers_at(&l[k], held[i], &nheld[i], KEEP, 12);
        made[i] += m;
        in_pause[i] += pausing ? m : 0;
      }
    }
    pid_t v = __atomic_load_n(&a->pids[VICTIM], __ATOMIC_ACQUIRE);
    if (!resumed && stopped_at == 0 && v > 0 && is_stopped(v)) {
      stopped_at = rcc_now_ns();
    } else if (!resumed && stopped_at != 0 &&
               rcc_now_ns() - stopped_at >= 2000000000LL) {
      kill(v, SIGCONT);
      a->paused_ms = (int)((rcc_now_ns() - stopped_at) / 1000000);
      resumed = 1;
    }
    usleep(1000);
  }
  pid_t v = __atomic_load_n(&a->pids[VICTIM], __ATOMIC_ACQUIRE);
  if (v > 0)
    kill(v, SIGCONT); /* whatever happened, never leave it stopped */
  int total = 0, most = 0;
  for (int i = 0; i < nseen; i++) {
    total += made[i];
    most = in_pause[i] > most ? in_pause[i] : most;
    a->paused_strangers += in_pause[i];
  }
  a->ports = nseen;
  a->strangers = total;
  a->most_in_pause = most;
}

static int init_body(h_ctx_t *h) {
  struct init_area *a = h->arg;
  enum { COUNT = 100003 };
  __atomic_store_n(&a->pids[h->rank], getpid(), __ATOMIC_RELEASE);
  for (int k = 0; k < 5000 && !__atomic_load_n(&a->flooding,
                                               __ATOMIC_ACQUIRE); k++)
    usleep(1000);
  usleep(50000); /* the flooder is at the rendezvous */
  if (h->rank == VICTIM)
    h_stop_before_send(a->stop_len, a->stop_off, a->stop_pattern);
  ringcc_comm_t comm;
  double t0 = h_now_s();
  ringcc_result_t r = ringcc_comm_init(&comm, h->nranks, h->id, h->rank, NULL);
  a->stopped[h->rank] = h_stopped_before_send();
  if (r != RINGCC_SUCCESS)
    return h_fail(h, "init among strangers: %s (%s)", ringcc_strerror(r),
                  ringcc_comm_last_error(NULL));
  a->init_s[h->rank] = h_now_s() - t0;
  h->comm = comm;
  float *in = h_xmalloc(COUNT * sizeof(float));
  float *out = h_xmalloc(COUNT * sizeof(float));
  float *want = h_xmalloc(COUNT * sizeof(float));
  h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, h->rank, 0, 7, in, COUNT);
  h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, h->nranks, 0, 7, want, COUNT);
  int bad = !h_ok(h, ringcc_allreduce(in, out, COUNT, RINGCC_FLOAT32,
                                      RINGCC_SUM, comm, NULL), "allreduce") ||
            !h_check_elems(h, "allreduce after init among strangers",
                           RINGCC_FLOAT32, out, want, COUNT);
  free(in);
  free(out);
  free(want);
  ringcc_comm_destroy(comm);
  return bad;
}

/* Ranks over TCP (no shared memory) while strangers flood every listener
 * (the rendezvous, each rank's bootstrap ring, each rank's socket plugin);
 * rank 1 stops itself for two seconds right before it sends len bytes with
 * pattern at off: init succeeds on every rank and the allreduce is exact. */
static void init_among_strangers(const char *where, size_t len, size_t off,
                                 const char *pattern) {
  struct init_area *a = h_shared_alloc(sizeof(*a));
  a->stop_len = len;
  a->stop_off = off;
  snprintf(a->stop_pattern, sizeof(a->stop_pattern), "%s", pattern);
  setenv("RINGCC_SHM_DISABLE", "1", 1);
  setenv("RINGCC_NET", "Socket", 1);
  fflush(NULL);
  pid_t parent = getpid(), f = fork();
  cr_assert_geq(f, 0);
  if (f == 0) {
    flooder(a, parent);
    _exit(0);
  }
  h_run_opts_t o = {.nranks = INIT_RANKS, .body = init_body, .arg = a,
                    .skip_init = true, .timeout_s = 50,
                    .name = "init among strangers"};
  bool ok = h_run(&o);
  __atomic_store_n(&a->stop, 1, __ATOMIC_RELEASE);
  int status;
  cr_assert_eq(waitpid(f, &status, 0), f);
  unsetenv("RINGCC_SHM_DISABLE");
  unsetenv("RINGCC_NET");
  printf("init among strangers: rank %d stopped for %d ms %s; %d strangers "
         "on %d listeners, %d of them while it was stopped (up to %d on one "
         "listener); init took %.2f, %.2f, %.2f s\n", VICTIM, a->paused_ms,
         where, a->strangers, a->ports, a->paused_strangers,
         a->most_in_pause, a->init_s[0], a->init_s[1], a->init_s[2]);
  cr_assert(ok, "init or the allreduce failed among strangers (see above)");
  cr_expect(a->stopped[VICTIM], "rank %d never stopped %s", VICTIM, where);
  cr_expect_geq(a->paused_ms, 1900, "rank %d was stopped for %d ms only",
                VICTIM, a->paused_ms);
  cr_expect_geq(a->ports, 2, "only %d listeners were flooded",
                a->ports);
  cr_expect_geq(a->most_in_pause, PER_PORT, "no listener got %d strangers "
                "while rank %d was stopped (the most: %d)", PER_PORT, VICTIM,
                a->most_in_pause);
  h_shared_free(a, sizeof(*a));
}

TestSuite(gate_init, .timeout = 90);

/* Issue 32, point 4: the rank got the rendezvous's challenge and stops
 * before its answer (proof + hello, "RCCH" at 32): the rendezvous holds
 * the connection, started, while hundreds of strangers come. */
Test(gate_init, rank_stopped_before_answering_the_rendezvous) {
  init_among_strangers("before answering the rendezvous's challenge",
                       32 + 36, 32, "RCCH");
}

/* The same on the bootstrap ring: its next rank's listener holds it. */
Test(gate_init, rank_stopped_before_answering_its_ring_neighbour) {
  init_among_strangers("before answering its ring neighbour's challenge",
                       32 + 12, 32, "RCCR");
}

/* The socket plugin: stopped after its connect, before its preamble (with
 * the hello and the proof, "RCNS" at 0): its peer's listener sees a silent
 * socket among the strangers. */
Test(gate_init, rank_stopped_before_its_socket_preamble) {
  init_among_strangers("before its first socket's preamble", 16 + 64 + 32, 0,
                       "RCNS");
}

/* Stopped after its connect to the rendezvous, before its opening ("RCCA",
 * 24 bytes): the rendezvous sees a silent connection among the strangers. */
Test(gate_init, rank_stopped_before_its_opening) {
  init_among_strangers("before its opening to the rendezvous", 24, 0, "RCCA");
}
