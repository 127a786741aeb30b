/*
 * netns.h - virtual hosts for multi-host tests, and a runner that starts
 * ranks on them.
 *
 * A virtual network (ns_net_create) is one "switch" network namespace
 * holding a Linux bridge br0, and H host network namespaces, each joined to
 * the bridge by a veth pair whose host end is eth0 with the address
 * 198.18.0.(k+1)/24 (the benchmarking range, RFC 2544), loopback up:
 *
 *      host0 (eth0 198.18.0.1)   host1 (eth0 198.18.0.2)   ...
 *              |                          |
 *          [ v0 ]-------- br0 --------[ v1 ]      switch namespace
 *
 * Each host also has a "host init" process: pid 1 of the host's own PID,
 * UTS (hostname "hostK") and mount namespaces (a fresh /proc). A process
 * started on a host (ns_spawn) joins all four namespaces, so the library
 * sees another hostname and cannot see (or kill(2)) processes of other
 * hosts, as on real separate machines; ranks of one host share /dev/shm,
 * hostname and PID namespace, so they talk over shared memory.
 *
 * Namespaces are named rccmh-PID-SEQ-sw / rccmh-PID-SEQ-hK (PID: the
 * creating process), so concurrent runs never collide and ns_cleanup_stale()
 * can delete what a killed run left behind. Needs root (CAP_SYS_ADMIN) and
 * iproute2's `ip`; ns_supported() says why not.
 *
 * Everything here runs in the test's (Criterion worker's) process; ranks
 * report through exit statuses, captured output and shared memory.
 */
#ifndef RCC_TEST_NETNS_H
#define RCC_TEST_NETNS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "harness.h"

#define NS_MAX_HOSTS 8
#define NS_MAX_RANKS 16
#define NS_IFNAME "eth0"          /* each host's interface on the bridge */
#define NS_SUBNET "198.18.0"      /* host k is NS_SUBNET.(k+1)/24 */
#define NS_NAME_PREFIX "rccmh-"   /* every namespace this file creates */
#define NS_EXIT_SETUP 96          /* a spawned process could not join its host */

/* ---- the virtual network ----------------------------------------------- */

/* What the wire counted (ns_net_impair): frames in, dropped, forwarded. */
typedef struct {
  unsigned long long frames, dropped, forwarded, reordered, corrupted;
  /* Set by the test while the impairing switch runs: 1 + host, whose
   * established TCP traffic (segments with ACK and without SYN or RST, both
   * ways) is dropped; new connections (SYN, SYN-ACK, RST) still pass: a host
   * whose kernel answers while its connections stall. 0: none. */
  volatile int stall_host;
  unsigned long long stalled; /* frames dropped so */
} ns_wire_stats_t;

typedef struct {
  int nhosts; /* 0: nothing created */
  char sw[40];                   /* switch namespace (bridge br0) */
  char host[NS_MAX_HOSTS][40];   /* host namespaces */
  pid_t init[NS_MAX_HOSTS];      /* host init processes (pid 1 inside) */
  int keepalive[NS_MAX_HOSTS];   /* write ends; an init exits on EOF */
  pid_t wire;                    /* the impairing switch (ns_net_impair) */
  ns_wire_stats_t *wire_stats;   /* shared with it */
} ns_net_t;

/* true when this process can create namespaces (root, `ip` found); else
 * false with the reason in why. */
bool ns_supported(char *why, size_t len);

/* Deletes rccmh-* namespaces whose creating process is gone; returns how
 * many. A line on stderr names each. */
int ns_cleanup_stale(void);

/* Creates the switch, nhosts hosts and their init processes. On failure
 * undoes what it made and returns false with the reason in why. */
bool ns_net_create(ns_net_t *net, int nhosts, char *why, size_t len);

/* Kills the host inits (and so everything still running on a host), deletes
 * the namespaces. Safe to call twice, or on a zeroed net. */
void ns_net_destroy(ns_net_t *net);

/* "198.18.0.(host+1)". */
const char *ns_host_addr(int host, char *buf, size_t len);

/* ---- faults on the network ------------------------------------------------ */

/* How host's link fails: its switch port goes down (a cable pulled: the host
 * sees no carrier), or every packet to and from it is dropped silently by a
 * qdisc (pfifo with limit 0 on both ends: carrier and routes stay up). */
typedef enum { NS_CUT_LINK_DOWN, NS_CUT_DROP } ns_cut_t;
const char *ns_cut_name(ns_cut_t how);
bool ns_cut(const ns_net_t *net, int host, ns_cut_t how, char *why,
            size_t len);
bool ns_restore(const ns_net_t *net, int host, ns_cut_t how, char *why,
                size_t len);

/* netem's job where the kernel has no netem (sch_netem is not built here):
 * the switch's bridge is replaced by a process that forwards frames between
 * the ports (AF_PACKET, learning MACs), dropping each with probability loss
 * and delaying it by delay_ms plus a uniform jitter of +-jitter_ms, which
 * reorders frames as netem's jitter does. Applied once per frame, on the
 * way from one host to another. */
typedef struct {
  double loss;
  int delay_ms;
  int jitter_ms;
  /* Probability that a TCP segment over IPv4 with 4 or more payload bytes
   * has two 16-bit words of its payload swapped (two that differ): the
   * corruption TCP's checksum cannot see (a ones'-complement sum does not
   * change when its terms swap places), as a faulty switch or NIC memory
   * makes it. */
  double corrupt;
  /* When > 0, only segments with at least this many payload bytes are
   * corrupted: a test of the data path sets it above the size of the
   * bootstrap's and the handshakes' short messages, so that a run is not
   * lost at init to a corruption the test does not look at. */
  int corrupt_min_payload;
} ns_impair_t;
bool ns_net_impair(ns_net_t *net, const ns_impair_t *im, char *why,
                   size_t len);

/* Every frame that crosses the switch (each port, both ways), as a sniffer
 * on the wire would see it, appended to a shared buffer of cap bytes until
 * ns_capture_stop. */
typedef struct {
  pid_t pid;
  unsigned char *buf;
  size_t cap;
  size_t *len; /* bytes captured so far (in the shared mapping) */
} ns_capture_t;
bool ns_capture_start(const ns_net_t *net, ns_capture_t *c, size_t cap,
                      char *why, size_t len);
void ns_capture_stop(ns_capture_t *c); /* the bytes stay until _free */
void ns_capture_free(ns_capture_t *c);

/* ---- processes on a host ------------------------------------------------- */

typedef int (*ns_fn)(void *arg);

/* Forks a "shell" that joins host's namespaces and forks fn(arg) inside
 * them. Returns the shell's pid (or -1): wait for it; its exit status
 * mirrors fn's (the return value, or the signal that killed it). Killing
 * the shell kills fn's process too (parent-death signal). out_fd >= 0:
 * fn's stdout and stderr go there. */
pid_t ns_spawn(const ns_net_t *net, int host, ns_fn fn, void *arg,
               int out_fd);

/* ---- ranks ------------------------------------------------------------------ */

/* host_of[r] for nranks = nhosts * per_host: host-major (ranks of a host
 * contiguous) or interleaved (rank r on host r % nhosts). */
void ns_layout(int nhosts, int per_host, bool interleaved, int *host_of);

typedef struct {
  const ns_net_t *net;
  int nranks;
  const int *host_of; /* host of each rank; rank 0 should be on host 0 */
  /* After ringcc_comm_init_env (unless skip_init), on every rank. ctx->id
   * is NULL; ctx->comm is destroyed after the body. */
  h_body_fn body;
  void *arg;
  const ringcc_config_t *config;
  bool skip_init;          /* the body makes (or fails to make) its comms */
  const char *const *argv; /* non-NULL: every rank execs this instead */
  const char *const *env;  /* NULL-terminated "NAME=VALUE" for every rank */
  const char *root;        /* RINGCC_ROOT; NULL: rank 0's host, port */
  int port;                /* 0: a new port for every run */
  double timeout_s;        /* whole run; 0: 60 s */
  double grace_s;          /* after the first failure; 0: 5 s; < 0: none */
  bool capture;            /* keep every rank's stdout + stderr */
  const char *name;        /* printed with failures */
  /* Called in this process once every rank is forked: start here any
   * thread the run needs (a fork while another thread starts or allocates
   * can leave the child with that thread's lock held: ASan's allocator
   * takes one as a thread starts, and the rank then hangs in its own). */
  void (*started)(void *started_arg);
  void *started_arg;
} ns_run_opts_t;

typedef struct {
  int nranks;
  int status[NS_MAX_RANKS];   /* waitpid() status (through the shell) */
  bool killed[NS_MAX_RANKS];  /* killed by the runner (deadline, grace) */
  char *output[NS_MAX_RANKS]; /* with capture: NUL-terminated, else NULL */
  double seconds;             /* wall time of the run */
  /* Every rank's ringcc_comm_init_env said RINGCC_ERR_UNSUPPORTED (exit
   * H_EXIT_UNSUPPORTED): the test should skip, saying unsupported_why. */
  bool unsupported;
  char unsupported_why[512];
} ns_result_t;

/* Sets RINGCC_RANK, RINGCC_NRANKS, RINGCC_ROOT, RINGCC_SECRET (random per
 * run) and RINGCC_SOCKET_IFNAME=eth0 on every rank (and unsets
 * RINGCC_HOSTID), starts the ranks on their hosts and waits. true when every
 * rank exited with status 0; otherwise each failed rank is described on
 * stderr (with the tail of its captured output), unless every rank found
 * the configuration unsupported (res->unsupported). res may be NULL. */
bool ns_run(const ns_run_opts_t *o, ns_result_t *res);
void ns_result_free(ns_result_t *res);

/* "exited with status 3", "killed by signal 9 (Killed)". */
const char *ns_describe_status(int status, char *buf, size_t len);

#endif /* RCC_TEST_NETNS_H */
