/*
 * gate.h - the listener gate: the one place where a listener holds the
 * connections that have not proven themselves yet. The bootstrap's
 * rendezvous and ring (lib/boot/bootstrap.c), the socket plugin
 * (transports/net_socket.c) and the verbs plugin's side channel
 * (transports/net_ib/listen.c) each give it their listening socket and a
 * proof check; it accepts, reads, drops strangers and hands out the
 * connections that proved themselves.
 *
 * The rules (docs/reliability.md, "Strangers"):
 *   - It holds at most max_held connections that have not proven
 *     themselves. Each is read at once when accepted and whenever it has
 *     something to read, through the check (a real peer's first message
 *     comes with its connect, so it is known before a flood could push it
 *     out); a stranger that says something wrong is dropped as soon as it
 *     does.
 *   - To make room for a new connection it drops the oldest connection that
 *     is neither proven nor started, after reading it once more (so one whose
 *     proof has just arrived is handed out, not dropped). A connection is
 *     started once the check says so: the listener answered it (a
 *     challenge), so its peer may count itself connected as soon as it has
 *     answered. A started connection is never dropped to make room; when
 *     every held connection is started, the gate stops accepting (new
 *     connections wait in the kernel's queue) until one leaves. A flood of
 *     strangers can slow a real peer, never drop it.
 *   - A connection not proven expire_ns after it was accepted is dropped,
 *     but only after what it sent was read: a proof that arrived while the
 *     listener's process was busy or stopped still counts.
 *   - Out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM on accept), it
 *     drops the oldest connection that is neither proven nor started, stops
 *     accepting for backoff_ns, and says so once (WARN); it never fails.
 *   - It never waits for one connection: every read is nonblocking and one
 *     poll() covers the listener and every held connection.
 * A connection that has sent nothing is a stranger's as far as the listener
 * can tell; its connector, if real, was stopped between its connect and its
 * first message. Such a connector finds the connection closed right after
 * that message (rcc_gate_dropped_unread) and connects again.
 */
#ifndef RCC_GATE_H
#define RCC_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ringcc.h"

/* What a check says about a connection after reading what it has sent. */
enum rcc_gate_step {
  RCC_GATE_WAIT = 0, /* nothing decisive yet: more bytes are due */
  RCC_GATE_STARTED,  /* the listener answered it: never dropped for room */
  RCC_GATE_PROVEN,   /* it proved itself: handed out */
  RCC_GATE_DROP,     /* a stranger (why says what it did): INFO */
  RCC_GATE_REFUSE,   /* a false proof (another key or secret): WARN once */
};

/* A connection the gate holds; state is the check's own (state_bytes,
 * zeroed when the connection is accepted). */
struct rcc_gate_conn {
  int fd;
  int started, proven;
  int64_t since_ns; /* accepted at */
  struct sockaddr_storage peer;
  char peer_str[80];
  void *state;
};

/* Reads what c has sent without blocking (and may answer it: a challenge);
 * on RCC_GATE_DROP or RCC_GATE_REFUSE, says why in why[whylen]. The gate
 * closes a dropped connection. */
typedef enum rcc_gate_step (*rcc_gate_check_fn)(void *arg,
                                                struct rcc_gate_conn *c,
                                                char *why, size_t whylen);

struct rcc_gate_config {
  const char *what;  /* log lines: "<what> dropped a connection from ..." */
  int log_rank;      /* for the log; -1: none */
  int max_held;      /* connections held that have not proven themselves */
  int64_t expire_ns; /* a connection not proven by then is dropped */
  int64_t backoff_ns;   /* no accept() this long after running out of fds */
  size_t state_bytes;   /* the check's state per connection */
  rcc_gate_check_fn check;
  void *arg; /* the check's first argument */
};

struct rcc_gate;

/* A gate on listen_fd (which stays the caller's); NULL when out of memory. */
struct rcc_gate *rcc_gate_new(int listen_fd, const struct rcc_gate_config *cfg);
/* Closes every connection the gate holds; not the listener. */
void rcc_gate_free(struct rcc_gate *g);

/* What rcc_gate_next hands out: a connection that proved itself (fd is then
 * the caller's, and the check's state is copied to state_out), or fd -1
 * when extra_fd became readable. */
struct rcc_gate_passed {
  int fd;
  struct sockaddr_storage peer;
  char peer_str[80];
};

/* Accepts, reads and checks until a connection proved itself, extra_fd (if
 * >= 0) is readable, or deadline_ns: RINGCC_SUCCESS, or RINGCC_ERR_TIMEOUT
 * (err says how many connections were held). Another error only when
 * accept() fails for a reason that is this process's own (err says which). */
ringcc_result_t rcc_gate_next(struct rcc_gate *g, int64_t deadline_ns,
                              int extra_fd, struct rcc_gate_passed *out,
                              void *state_out, char *err, size_t errlen);

/* After accept() ran out of descriptors: drops up to n of the oldest held
 * connections that are neither proven nor started (the caller needs
 * descriptors of its own for a connection that proved itself). */
void rcc_gate_make_room(struct rcc_gate *g, int n);

/* The connector's side: 1 when the listener closed fd before it could have
 * read what this side just sent (the end of the stream is already here):
 * its gate dropped the connection as a silent stranger while this process
 * did not run (stopped, or not scheduled between its connect and its first
 * message). The connector then connects again; its peer never saw it. */
int rcc_gate_dropped_unread(int fd);

/* How many connections the gate holds (not proven yet). */
int rcc_gate_held(const struct rcc_gate *g);

/* For a caller that waits in poll() of its own between rcc_gate_next
 * calls: the listener and every held connection (up to max); any of them
 * readable means the next rcc_gate_next has something to do. -1 when it
 * has something to do now: a connection proved itself already (its bytes
 * were read, so poll() would not say so). */
int rcc_gate_fds(const struct rcc_gate *g, int *fds, int max);

#endif
