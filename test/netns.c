/*
 * netns.c - virtual hosts (network, PID, UTS and mount namespaces) and a
 * rank runner for multi-host tests; see netns.h.
 *
 * The network is built with iproute2 (`ip`, run with posix_spawn), which
 * reads like the commands one would type by hand (docs/testing.md shows
 * them). The per-host init processes are made with clone(2); processes join
 * a host with setns(2).
 */
#include "netns.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define NETNS_DIR "/run/netns"
#define INIT_STACK_BYTES (256 * 1024)
#define PORT_BASE 29400
#define OUTPUT_TAIL_BYTES 4000

/* ---- running ip ----------------------------------------------------------- */

static const char *tool_path(const char *tool) {
  static char path[64];
  static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin",
                                     NULL};
  for (int i = 0; dirs[i]; i++) {
    snprintf(path, sizeof path, "%s/%s", dirs[i], tool);
    if (access(path, X_OK) == 0)
      return path;
  }
  return NULL;
}

static const char *ip_path(void) { return tool_path("ip"); }

/* Runs argv (argv[0]: "ip" or "tc", found in the usual directories); on
 * failure why gets the command and what it printed. */
static bool run_tool(const char *const *argv, char *why, size_t len) {
  char cmd[512] = "";
  size_t off = 0;
  for (int i = 0; argv[i] && off < sizeof cmd; i++)
    off += (size_t)snprintf(cmd + off, sizeof cmd - off, "%s%s", i ? " " : "",
                            argv[i]);
  const char *path = tool_path(argv[0]);
  if (path == NULL) {
    snprintf(why, len, "%s: %s is not installed (iproute2)", cmd, argv[0]);
    return false;
  }
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    snprintf(why, len, "%s: pipe: %s", cmd, strerror(errno));
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  pid_t pid;
  int e = posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  if (e != 0) {
    close(pipefd[0]);
    snprintf(why, len, "%s: posix_spawn: %s", cmd, strerror(e));
    return false;
  }
  char out[512];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(pipefd[0], out + got, sizeof out - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
    if (got == sizeof out - 1) { /* keep draining, keep the start */
      char sink[256];
      while (read(pipefd[0], sink, sizeof sink) > 0) {
      }
      break;
    }
  }
  out[got] = '\0';
  while (got > 0 && (out[got - 1] == '\n' || out[got - 1] == ' '))
    out[--got] = '\0';
  close(pipefd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return true;
  snprintf(why, len, "`%s` failed (%s): %s", cmd,
           WIFEXITED(status) ? "exit status nonzero" : "killed",
           got ? out : "(no output)");
  return false;
}

/* Runs TOOL with the arguments of ap (up to NULL); on failure why says
 * why. */
static bool run_va(const char *tool, char *why, size_t len, va_list ap) {
  const char *argv[24];
  int argc = 0;
  argv[argc++] = tool;
  for (const char *a; argc < 23 && (a = va_arg(ap, const char *)) != NULL;)
    argv[argc++] = a;
  argv[argc] = NULL;
  return run_tool(argv, why, len);
}

/* Runs `ip ARGS...` (NULL-terminated); on failure why says why. */
static bool ip(char *why, size_t len, ...) {
  va_list ap;
  va_start(ap, len);
  bool ok = run_va("ip", why, len, ap);
  va_end(ap);
  return ok;
}

/* The same for `tc ARGS...`. */
static bool tc(char *why, size_t len, ...) {
  va_list ap;
  va_start(ap, len);
  bool ok = run_va("tc", why, len, ap);
  va_end(ap);
  return ok;
}

/* ---- support, stale namespaces ---------------------------------------------- */

bool ns_supported(char *why, size_t len) {
  if (geteuid() != 0) {
    snprintf(why, len, "multi-host tests need root (network namespaces); "
                       "running as uid %d", (int)geteuid());
    return false;
  }
  if (ip_path() == NULL) {
    snprintf(why, len, "multi-host tests need iproute2's ip (not found in "
                       "/usr/sbin, /sbin, /usr/bin, /bin)");
    return false;
  }
  return true;
}

/* The creator pid in "rccmh-PID-...", or -1. */
static pid_t creator_of(const char *name) {
  size_t plen = strlen(NS_NAME_PREFIX);
  if (strncmp(name, NS_NAME_PREFIX, plen) != 0)
    return -1;
  char *end;
  long pid = strtol(name + plen, &end, 10);
  return end != name + plen && *end == '-' && pid > 0 ? (pid_t)pid : -1;
}

int ns_cleanup_stale(void) {
  DIR *d = opendir(NETNS_DIR);
  int removed = 0;
  if (d == NULL)
    return 0;
  char names[64][64];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < 64;) {
    pid_t pid = creator_of(e->d_name);
    if (pid > 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH &&
        strlen(e->d_name) < sizeof names[0])
      snprintf(names[n++], sizeof names[0], "%s", e->d_name);
  }
  closedir(d);
  for (int i = 0; i < n; i++) {
    char why[512];
    if (ip(why, sizeof why, "netns", "delete", names[i], NULL)) {
      fprintf(stderr, "netns: deleted the stale namespace %s (its creator, "
                      "pid %d, is gone)\n", names[i], (int)creator_of(names[i]));
      removed++;
    } else {
      fprintf(stderr, "netns: could not delete the stale namespace %s: %s\n",
              names[i], why);
    }
  }
  return removed;
}

/* ---- host init processes ------------------------------------------------------ */

struct init_arg {
  int host;
  int ready_fd;        /* write "ok" or why not, then close */
  int keepalive_fd;    /* read end: EOF means the creator is gone */
  int keepalive_wr;    /* its write end, the creator's: closed here */
  const ns_net_t *net; /* other hosts' keepalive write ends to close */
};

/* pid 1 of a host's PID, UTS and mount namespaces: names the host, mounts
 * the host's own /proc, then waits until the creator closes keepalive (or
 * dies: the parent-death signal, or EOF). Its death ends every process of
 * the host's PID namespace. */
static int host_init_main(void *p) {
  const struct init_arg *a = p;
  char name[16], msg[256] = "ok";
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  close(a->keepalive_wr);
  for (int k = 0; k < NS_MAX_HOSTS; k++)
    if (a->net->keepalive[k] >= 0)
      close(a->net->keepalive[k]);
  snprintf(name, sizeof name, "host%d", a->host);
  if (sethostname(name, strlen(name)) != 0)
    snprintf(msg, sizeof msg, "sethostname(%s): %s", name, strerror(errno));
  else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    snprintf(msg, sizeof msg, "making / private in the new mount namespace: "
             "%s", strerror(errno));
  else if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                 NULL) != 0)
    snprintf(msg, sizeof msg, "mounting /proc for the new PID namespace: %s",
             strerror(errno));
  ssize_t w = write(a->ready_fd, msg, strlen(msg));
  (void)w;
  close(a->ready_fd);
  if (strcmp(msg, "ok") != 0)
    _exit(1);
  /* Orphans of the host (a rank whose shell was killed) are reaped at once. */
  signal(SIGCHLD, SIG_IGN);
  for (;;) {
    char c;
    ssize_t n = read(a->keepalive_fd, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR))
      _exit(0);
  }
}

static bool start_host_init(ns_net_t *net, int host, char *why, size_t len) {
  int ready[2], life[2];
  if (pipe2(ready, O_CLOEXEC) != 0)
    return snprintf(why, len, "pipe: %s", strerror(errno)), false;
  if (pipe2(life, O_CLOEXEC) != 0) {
    close(ready[0]), close(ready[1]);
    return snprintf(why, len, "pipe: %s", strerror(errno)), false;
  }
  struct init_arg a = {host, ready[1], life[0], life[1], net};
  char *stack = malloc(INIT_STACK_BYTES);
  pid_t pid = -1;
  int e = ENOMEM;
  if (stack != NULL) {
    fflush(NULL);
    pid = clone(host_init_main, stack + INIT_STACK_BYTES,
                CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNS | SIGCHLD, &a);
    e = errno;
  }
  free(stack); /* the child runs on its own copy */
  close(ready[1]);
  close(life[0]);
  if (pid < 0) {
    close(ready[0]), close(life[1]);
    snprintf(why, len, "clone(CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNS) "
             "for host %d: %s", host, strerror(e));
    return false;
  }
  char msg[256];
  ssize_t got = 0, n;
  while ((n = read(ready[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0 ||
         (n < 0 && errno == EINTR))
    got += n > 0 ? n : 0;
  close(ready[0]);
  msg[got] = '\0';
  net->init[host] = pid;
  net->keepalive[host] = life[1];
  if (strcmp(msg, "ok") != 0) {
    snprintf(why, len, "host %d's init process: %s", host,
             got ? msg : "died before it was ready");
    return false;
  }
  return true;
}

/* ---- the network ---------------------------------------------------------------- */

const char *ns_host_addr(int host, char *buf, size_t len) {
  snprintf(buf, len, NS_SUBNET ".%d", host + 1);
  return buf;
}

/* One veth pair: vK on the bridge in the switch, eth0 in the host. */
static bool plug_host(const ns_net_t *net, int k, char *why, size_t len) {
  char port[16], cidr[32], addr[24];
  snprintf(port, sizeof port, "v%d", k);
  snprintf(cidr, sizeof cidr, "%s/24", ns_host_addr(k, addr, sizeof addr));
  return ip(why, len, "netns", "add", net->host[k], NULL) &&
         ip(why, len, "-n", net->host[k], "link", "set", "lo", "up", NULL) &&
         ip(why, len, "-n", net->sw, "link", "add", port, "type", "veth",
            "peer", "name", NS_IFNAME, "netns", net->host[k], NULL) &&
         ip(why, len, "-n", net->sw, "link", "set", port, "master", "br0",
            "up", NULL) &&
         ip(why, len, "-n", net->host[k], "addr", "add", cidr, "dev",
            NS_IFNAME, NULL) &&
         ip(why, len, "-n", net->host[k], "link", "set", NS_IFNAME, "up",
            NULL);
}

bool ns_net_create(ns_net_t *net, int nhosts, char *why, size_t len) {
  static int seq;
  memset(net, 0, sizeof *net);
  for (int k = 0; k < NS_MAX_HOSTS; k++)
    net->keepalive[k] = -1;
  if (nhosts < 1 || nhosts > NS_MAX_HOSTS) {
    snprintf(why, len, "ns_net_create: %d hosts, not 1..%d", nhosts,
             NS_MAX_HOSTS);
    return false;
  }
  int me = (int)getpid(), s = seq++;
  snprintf(net->sw, sizeof net->sw, NS_NAME_PREFIX "%d-%d-sw", me, s);
  for (int k = 0; k < nhosts; k++)
    snprintf(net->host[k], sizeof net->host[k], NS_NAME_PREFIX "%d-%d-h%d",
             me, s, k);
  /* From here on ns_net_destroy undoes whatever was made. */
  net->nhosts = nhosts;
  bool ok = ip(why, len, "netns", "add", net->sw, NULL) &&
            ip(why, len, "-n", net->sw, "link", "add", "br0", "type",
               "bridge", NULL) &&
            ip(why, len, "-n", net->sw, "link", "set", "br0", "up", NULL);
  for (int k = 0; ok && k < nhosts; k++)
    ok = plug_host(net, k, why, len);
  for (int k = 0; ok && k < nhosts; k++)
    ok = start_host_init(net, k, why, len);
  if (!ok)
    ns_net_destroy(net);
  return ok;
}

void ns_net_destroy(ns_net_t *net) {
  if (net->nhosts <= 0)
    return;
  if (net->wire > 0) {
    kill(net->wire, SIGKILL);
    while (waitpid(net->wire, NULL, 0) < 0 && errno == EINTR) {
    }
    net->wire = 0;
  }
  if (net->wire_stats != NULL) {
    munmap(net->wire_stats, sizeof *net->wire_stats);
    net->wire_stats = NULL;
  }
  for (int k = 0; k < net->nhosts; k++) {
    if (net->init[k] > 0) {
      kill(net->init[k], SIGKILL);
      while (waitpid(net->init[k], NULL, 0) < 0 && errno == EINTR) {
      }
      net->init[k] = 0;
    }
    if (net->keepalive[k] >= 0)
      close(net->keepalive[k]);
    net->keepalive[k] = -1;
  }
  /* Only what exists: a failed ns_net_create may have stopped half way. */
  for (int k = 0; k <= net->nhosts; k++) {
    const char *name = k < net->nhosts ? net->host[k] : net->sw;
    char path[96], why[512];
    snprintf(path, sizeof path, NETNS_DIR "/%s", name);
    if (access(path, F_OK) == 0 &&
        !ip(why, sizeof why, "netns", "delete", name, NULL))
      fprintf(stderr, "netns: %s\n", why);
  }
  net->nhosts = 0;
}

/* ---- faults on the network ---------------------------------------------------- */

const char *ns_cut_name(ns_cut_t how) {
  return how == NS_CUT_LINK_DOWN ? "link down" : "packets dropped";
}

bool ns_cut(const ns_net_t *net, int host, ns_cut_t how, char *why,
            size_t len) {
  char port[16];
  snprintf(port, sizeof port, "v%d", host);
  if (how == NS_CUT_LINK_DOWN)
    return ip(why, len, "-n", net->sw, "link", "set", port, "down", NULL);
  return tc(why, len, "-n", net->sw, "qdisc", "add", "dev", port, "root",
            "pfifo", "limit", "0", NULL) &&
         tc(why, len, "-n", net->host[host], "qdisc", "add", "dev", NS_IFNAME,
            "root", "pfifo", "limit", "0", NULL);
}

bool ns_restore(const ns_net_t *net, int host, ns_cut_t how, char *why,
                size_t len) {
  char port[16];
  snprintf(port, sizeof port, "v%d", host);
  if (how == NS_CUT_LINK_DOWN)
    return ip(why, len, "-n", net->sw, "link", "set", port, "up", NULL);
  return tc(why, len, "-n", net->sw, "qdisc", "del", "dev", port, "root",
            NULL) &&
         tc(why, len, "-n", net->host[host], "qdisc", "del", "dev", NS_IFNAME,
            "root", NULL);
}

/* ---- an impaired wire ---------------------------------------------------------- */

/* A frame on its way: due when it leaves on port. The frame carries its
 * virtio_net_hdr (PACKET_VNET_HDR): a TCP segment is often a GSO super-frame
 * with its checksum left to the device, and that must survive the trip. */
struct wire_frame {
  int64_t due;
  uint64_t order; /* arrival order, to count reordering */
  int port;
  size_t len;
  uint8_t *data;
};

struct wire {
  int nports;
  int fd[NS_MAX_HOSTS];
  uint8_t mac[NS_MAX_HOSTS][6]; /* learned: the host behind each port */
  int known[NS_MAX_HOSTS];
  struct wire_frame *heap;
  int nheap, cap;
  uint64_t rnd, arrivals, last_sent[NS_MAX_HOSTS];
  ns_impair_t im;
  ns_wire_stats_t *stats;
};

static int64_t wire_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static double wire_uniform(struct wire *w) { /* [0, 1) */
  w->rnd ^= w->rnd << 13;
  w->rnd ^= w->rnd >> 7;
  w->rnd ^= w->rnd << 17;
  return (double)(w->rnd >> 11) / 9007199254740992.0;
}

static void heap_push(struct wire *w, struct wire_frame f) {
  if (w->nheap == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 1024;
    w->heap = realloc(w->heap, (size_t)w->cap * sizeof *w->heap);
  }
  int i = w->nheap++;
  while (i > 0 && w->heap[(i - 1) / 2].due > f.due) {
    w->heap[i] = w->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  w->heap[i] = f;
}

static struct wire_frame heap_pop(struct wire *w) {
  struct wire_frame top = w->heap[0], last = w->heap[--w->nheap];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= w->nheap)
      break;
    if (c + 1 < w->nheap && w->heap[c + 1].due < w->heap[c].due)
      c++;
    if (w->heap[c].due >= last.due)
      break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (w->nheap > 0)
    w->heap[i] = last;
  return top;
}

#define VNET_HDR 10 /* struct virtio_net_hdr */

/* ns_impair_t.corrupt: swaps two differing 16-bit words of the TCP payload
 * of a frame (past its virtio_net_hdr). Both sit at even offsets from the
 * TCP header (IPv4 and TCP headers are multiples of 4 bytes), so the TCP
 * checksum, a ones'-complement sum of those words, stays right whether it
 * is already in the frame or left to the device. Frames with fewer than
 * min_payload payload bytes are left alone. 1 when it changed bytes. */
static int wire_corrupt(struct wire *w, uint8_t *frame, size_t len,
                        size_t min_payload) {
  uint8_t *eth = frame + VNET_HDR;
  size_t left = len - VNET_HDR;
  if (left < 14 + 20 || eth[12] != 0x08 || eth[13] != 0x00) /* IPv4 */
    return 0;
  uint8_t *iph = eth + 14;
  size_t ihl = (size_t)(iph[0] & 0x0f) * 4;
  size_t total = (size_t)iph[2] << 8 | iph[3];
  if (iph[9] != 6 || ihl < 20 || total > left - 14 || total < ihl + 20)
    return 0; /* not TCP, or a frame this does not understand */
  uint8_t *tcp = iph + ihl;
  size_t doff = (size_t)(tcp[12] >> 4) * 4;
  if (doff < 20 || ihl + doff > total)
    return 0;
  uint8_t *pay = tcp + doff;
  if (total - ihl - doff < min_payload)
    return 0;
  size_t words = (total - ihl - doff) / 2;
  for (int tries = 0; words >= 2 && tries < 8; tries++) {
    size_t a = (size_t)(wire_uniform(w) * (double)words);
    size_t b = (size_t)(wire_uniform(w) * (double)words);
    if (a == b || memcmp(pay + 2 * a, pay + 2 * b, 2) == 0)
      continue;
    uint8_t t[2];
    memcpy(t, pay + 2 * a, 2);
    memcpy(pay + 2 * a, pay + 2 * b, 2);
    memcpy(pay + 2 * b, t, 2);
    return 1;
  }
  return 0;
}

/* ns_wire_stats_t.stall_host: an IPv4 TCP segment of an established
 * connection (ACK set, SYN and RST clear). */
static int wire_established_tcp(const uint8_t *frame, size_t len) {
  const uint8_t *eth = frame + VNET_HDR;
  size_t left = len - VNET_HDR;
  if (left < 14 + 20 || eth[12] != 0x08 || eth[13] != 0x00)
    return 0;
  const uint8_t *iph = eth + 14;
  size_t ihl = (size_t)(iph[0] & 0x0f) * 4;
  if (iph[9] != 6 || ihl < 20 || left < 14 + ihl + 14)
    return 0;
  return (iph[ihl + 13] & 0x16) == 0x10;
}

/* One frame arrived on port in: learn, impair, queue for the way out. */
static void wire_take(struct wire *w, int in, const uint8_t *buf, size_t len) {
  if (len < VNET_HDR + 14)
    return;
  const uint8_t *dst = buf + VNET_HDR, *src = dst + 6;
  memcpy(w->mac[in], src, 6);
  w->known[in] = 1;
  w->stats->frames++;
  uint64_t order = w->arrivals++;
  for (int out = 0; out < w->nports; out++) {
    if (out == in)
      continue;
    int flood = (dst[0] & 1) || !w->known[out];
    if (!flood && memcmp(w->mac[out], dst, 6) != 0)
      continue;
    int stall = w->stats->stall_host;
    if (stall > 0 && (in == stall - 1 || out == stall - 1) &&
        wire_established_tcp(buf, len)) {
      w->stats->stalled++;
      continue;
    }
    if (wire_uniform(w) < w->im.loss || w->nheap > 20000) {
      w->stats->dropped++;
      continue;
    }
    double jitter = (2 * wire_uniform(w) - 1) * w->im.jitter_ms;
    double ms = w->im.delay_ms + jitter;
    struct wire_frame f = {.due = wire_now() + (int64_t)((ms > 0 ? ms : 0) *
                                                         1e6),
                           .order = order, .port = out, .len = len,
                           .data = malloc(len)};
    if (f.data == NULL)
      continue;
    memcpy(f.data, buf, len);
    if (w->im.corrupt > 0 && wire_uniform(w) < w->im.corrupt &&
        wire_corrupt(w, f.data, len,
                     (size_t)(w->im.corrupt_min_payload > 0
                                  ? w->im.corrupt_min_payload : 0)))
      w->stats->corrupted++;
    heap_push(w, f);
  }
}

static _Noreturn void wire_main(struct wire *w) {
  static uint8_t buf[VNET_HDR + 65536 + 64];
  for (;;) {
    struct pollfd pfd[NS_MAX_HOSTS];
    for (int k = 0; k < w->nports; k++)
      pfd[k] = (struct pollfd){.fd = w->fd[k], .events = POLLIN};
    int timeout = 100;
    if (w->nheap > 0) {
      int64_t left = w->heap[0].due - wire_now();
      timeout = left <= 0 ? 0 : (int)(left / 1000000) + 1;
      if (timeout > 100)
        timeout = 100;
    }
    poll(pfd, (nfds_t)w->nports, timeout);
    for (int k = 0; k < w->nports; k++)
      for (int n = 0; n < 256; n++) {
        ssize_t got = recv(w->fd[k], buf, sizeof buf, MSG_DONTWAIT);
        if (got <= 0)
          break;
        wire_take(w, k, buf, (size_t)got);
      }
    int64_t now = wire_now();
    while (w->nheap > 0 && w->heap[0].due <= now) {
      struct wire_frame f = heap_pop(w);
      ssize_t sent = send(w->fd[f.port], f.data, f.len, MSG_DONTWAIT);
      if (sent < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
        f.due = now + 1000000; /* the port is full: a moment later */
        heap_push(w, f);
        break;
      }
      if (sent >= 0) {
        w->stats->forwarded++;
        if (f.order < w->last_sent[f.port])
          w->stats->reordered++;
        else
          w->last_sent[f.port] = f.order;
      } else {
        w->stats->dropped++;
      }
      free(f.data);
    }
  }
}

bool ns_net_impair(ns_net_t *net, const ns_impair_t *im, char *why,
                   size_t len) {
  ns_wire_stats_t *stats = mmap(NULL, sizeof *stats, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (stats == MAP_FAILED)
    return snprintf(why, len, "mmap: %s", strerror(errno)), false;
  memset(stats, 0, sizeof *stats);
  net->wire_stats = stats;
  for (int k = 0; k < net->nhosts; k++) {
    char port[16];
    snprintf(port, sizeof port, "v%d", k);
    if (!ip(why, len, "-n", net->sw, "link", "set", port, "nomaster", NULL))
      return false;
  }
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0)
    return snprintf(why, len, "pipe: %s", strerror(errno)), false;
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(ready[0]), close(ready[1]);
    return snprintf(why, len, "fork: %s", strerror(errno)), false;
  }
  if (pid == 0) {
    char msg[256] = "ok", path[96];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    close(ready[0]);
    static struct wire w;
    w.nports = net->nhosts;
    w.im = *im;
    w.stats = stats;
    if (getrandom(&w.rnd, sizeof w.rnd, 0) != (ssize_t)sizeof w.rnd || !w.rnd)
      w.rnd = 88172645463325252ull;
    snprintf(path, sizeof path, NETNS_DIR "/%s", net->sw);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0)
      snprintf(msg, sizeof msg, "joining %s: %s", path, strerror(errno));
    for (int k = 0; k < w.nports && strcmp(msg, "ok") == 0; k++) {
      char port[16];
      int one = 1, big = 8 << 20;
      snprintf(port, sizeof port, "v%d", k);
      struct sockaddr_ll a = {.sll_family = AF_PACKET,
                              .sll_protocol = htons(ETH_P_ALL),
                              .sll_ifindex = (int)if_nametoindex(port)};
      w.fd[k] = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
      if (w.fd[k] < 0 || a.sll_ifindex == 0 ||
          setsockopt(w.fd[k], SOL_PACKET, PACKET_VNET_HDR, &one,
                     sizeof one) != 0 ||
          setsockopt(w.fd[k], SOL_PACKET, PACKET_IGNORE_OUTGOING, &one,
                     sizeof one) != 0 ||
          bind(w.fd[k], (struct sockaddr *)&a, sizeof a) != 0)
        snprintf(msg, sizeof msg, "an AF_PACKET socket on %s: %s", port,
                 strerror(errno));
      setsockopt(w.fd[k], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
      setsockopt(w.fd[k], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
    }
    ssize_t wr = write(ready[1], msg, strlen(msg));
    (void)wr;
    close(ready[1]);
    if (strcmp(msg, "ok") != 0)
      _exit(1);
    wire_main(&w);
    _exit(0);
  }
  close(ready[1]);
  char msg[256];
  ssize_t got = read(ready[0], msg, sizeof msg - 1);
  close(ready[0]);
  msg[got > 0 ? got : 0] = '\0';
  net->wire = pid;
  if (strcmp(msg, "ok") != 0) {
    snprintf(why, len, "the wire: %s", got > 0 ? msg : "died at start");
    return false;
  }
  return true;
}

/* ---- a sniffer on the switch ---------------------------------------------------- */

bool ns_capture_start(const ns_net_t *net, ns_capture_t *c, size_t cap,
                      char *why, size_t len) {
  memset(c, 0, sizeof *c);
  void *m = mmap(NULL, cap + sizeof(size_t), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return snprintf(why, len, "mmap: %s", strerror(errno)), false;
  c->len = m;
  c->buf = (unsigned char *)m + sizeof(size_t);
  c->cap = cap;
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0)
    return snprintf(why, len, "pipe: %s", strerror(errno)), false;
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    char msg[256] = "ok", path[96];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(1);
    close(ready[0]);
    snprintf(path, sizeof path, NETNS_DIR "/%s", net->sw);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC), big = 16 << 20;
    int fd = -1;
    if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0)
      snprintf(msg, sizeof msg, "joining %s: %s", path, strerror(errno));
    else if ((fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC,
                          htons(ETH_P_ALL))) < 0)
      snprintf(msg, sizeof msg, "an AF_PACKET socket: %s", strerror(errno));
    if (fd >= 0)
      setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    ssize_t wr = write(ready[1], msg, strlen(msg));
    (void)wr;
    close(ready[1]);
    if (strcmp(msg, "ok") != 0)
      _exit(1);
    for (;;) {
      size_t at = __atomic_load_n(c->len, __ATOMIC_RELAXED);
      if (at + 65536 > c->cap)
        pause(); /* full: stop looking */
      ssize_t n = recv(fd, c->buf + at, 65536, 0);
      if (n > 0)
        __atomic_store_n(c->len, at + (size_t)n, __ATOMIC_RELEASE);
    }
  }
  close(ready[1]);
  char msg[256];
  ssize_t got = pid > 0 ? read(ready[0], msg, sizeof msg - 1) : -1;
  close(ready[0]);
  msg[got > 0 ? got : 0] = '\0';
  c->pid = pid;
  if (pid < 0 || strcmp(msg, "ok") != 0) {
    snprintf(why, len, "the sniffer: %s", pid < 0 ? strerror(errno)
                                         : got > 0 ? msg : "died at start");
    return false;
  }
  return true;
}

void ns_capture_stop(ns_capture_t *c) {
  if (c->pid > 0) {
    kill(c->pid, SIGKILL);
    while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    c->pid = 0;
  }
}

void ns_capture_free(ns_capture_t *c) {
  ns_capture_stop(c);
  if (c->len != NULL)
    munmap(c->len, c->cap + sizeof(size_t));
  memset(c, 0, sizeof *c);
}

/* ---- joining a host ------------------------------------------------------------ */

/* Joins host's network, UTS, mount and (for children) PID namespaces. Every
 * file is opened first: after the mount namespace changes, /proc is the
 * host's. */
static bool enter_host(const ns_net_t *net, int host, char *why, size_t len) {
  static const struct {
    const char *name;
    int type;
  } kinds[] = {{"net", CLONE_NEWNET}, {"uts", CLONE_NEWUTS},
               {"pid", CLONE_NEWPID}, {"mnt", CLONE_NEWNS}};
  int fds[4];
  char path[4][96];
  snprintf(path[0], sizeof path[0], NETNS_DIR "/%s", net->host[host]);
  for (int i = 1; i < 4; i++)
    snprintf(path[i], sizeof path[i], "/proc/%d/ns/%s", (int)net->init[host],
             kinds[i].name);
  for (int i = 0; i < 4; i++) {
    fds[i] = open(path[i], O_RDONLY | O_CLOEXEC);
    if (fds[i] < 0) {
      snprintf(why, len, "open %s: %s", path[i], strerror(errno));
      while (i-- > 0)
        close(fds[i]);
      return false;
    }
  }
  bool ok = true;
  for (int i = 0; i < 4 && ok; i++)
    if (setns(fds[i], kinds[i].type) != 0) {
      snprintf(why, len, "setns(%s, %s): %s", path[i], kinds[i].name,
               strerror(errno));
      ok = false;
    }
  for (int i = 0; i < 4; i++)
    close(fds[i]);
  return ok;
}

/* Ends the calling process the way status says its child ended. */
static void mirror_status(int status) {
  if (WIFEXITED(status))
    _exit(WEXITSTATUS(status));
  int sig = WTERMSIG(status);
  struct rlimit no_core = {0, 0};
  sigset_t set;
  setrlimit(RLIMIT_CORE, &no_core); /* the child already dumped, if at all */
  signal(sig, SIG_DFL);
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, NULL);
  kill(getpid(), sig);
  _exit(128 + sig);
}

pid_t ns_spawn(const ns_net_t *net, int host, ns_fn fn, void *arg,
               int out_fd) {
  if (host < 0 || host >= net->nhosts || net->init[host] <= 0) {
    fprintf(stderr, "ns_spawn: no host %d\n", host);
    return -1;
  }
  pid_t parent = getpid();
  fflush(NULL);
  pid_t shell = fork();
  if (shell != 0)
    return shell;

  /* The shell: outside the host's PID namespace, so its child is inside. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent)
    _exit(NS_EXIT_SETUP);
  for (int k = 0; k < NS_MAX_HOSTS; k++)
    if (net->keepalive[k] >= 0)
      close(net->keepalive[k]);
  char why[512];
  if (!enter_host(net, host, why, sizeof why)) {
    fprintf(stderr, "ns_spawn: joining host %d: %s\n", host, why);
    _exit(NS_EXIT_SETUP);
  }
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "ns_spawn: fork inside host %d: %s\n", host,
            strerror(errno));
    _exit(NS_EXIT_SETUP);
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The shell is outside our PID namespace, so getppid() is 0 while it
     * lives; 1 means we were already reparented to the host's init. */
    if (getppid() != 0)
      _exit(NS_EXIT_SETUP);
    if (out_fd >= 0) {
      dup2(out_fd, STDOUT_FILENO);
      dup2(out_fd, STDERR_FILENO);
    }
    int rc = fn(arg);
    fflush(NULL);
    _exit(rc & 0xff ? rc & 0xff : (rc ? 1 : 0));
  }
  int status;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR)
      _exit(NS_EXIT_SETUP);
  mirror_status(status);
  return -1; /* not reached */
}

/* ---- ranks ------------------------------------------------------------------------ */

void ns_layout(int nhosts, int per_host, bool interleaved, int *host_of) {
  for (int r = 0; r < nhosts * per_host; r++)
    host_of[r] = interleaved ? r % nhosts : r / per_host;
}

const char *ns_describe_status(int status, char *buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exited with status %d%s", WEXITSTATUS(status),
             WEXITSTATUS(status) == NS_EXIT_SETUP
                 ? " (could not join its virtual host)"
                 : "");
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "ended with wait status 0x%x", status);
  return buf;
}

struct rank_arg {
  const ns_run_opts_t *o;
  int rank;
  char root[64];
  char secret[33];
  char *why; /* shared memory: rank 0's reason for "unsupported" */
};

static void set_env(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0)
    fprintf(stderr, "setenv %s: %s\n", name, strerror(errno));
}

static int rank_main(void *p) {
  const struct rank_arg *ra = p;
  const ns_run_opts_t *o = ra->o;
  char num[16];
  snprintf(num, sizeof num, "%d", ra->rank);
  set_env("RINGCC_RANK", num);
  snprintf(num, sizeof num, "%d", o->nranks);
  set_env("RINGCC_NRANKS", num);
  set_env("RINGCC_ROOT", ra->root);
  set_env("RINGCC_SECRET", ra->secret);
  set_env("RINGCC_SOCKET_IFNAME", NS_IFNAME);
  unsetenv("RINGCC_HOSTID"); /* the host is the namespace */
  for (int i = 0; o->env && o->env[i]; i++) {
    const char *eq = strchr(o->env[i], '=');
    char name[128];
    if (eq == NULL || (size_t)(eq - o->env[i]) >= sizeof name)
      continue;
    snprintf(name, sizeof name, "%.*s", (int)(eq - o->env[i]), o->env[i]);
    set_env(name, eq + 1);
  }
  if (o->argv != NULL) {
    execv(o->argv[0], (char *const *)o->argv);
    fprintf(stderr, "rank %d: exec %s: %s\n", ra->rank, o->argv[0],
            strerror(errno));
    return 127;
  }
  h_ctx_t ctx = {.rank = ra->rank, .nranks = o->nranks, .arg = o->arg,
                 .config = o->config};
  if (!o->skip_init) {
    ringcc_result_t r = ringcc_comm_init_env(&ctx.comm, o->config);
    if (r == RINGCC_ERR_UNSUPPORTED) {
      if (ra->rank == 0 && ra->why != NULL)
        snprintf(ra->why, sizeof ((ns_result_t *)0)->unsupported_why, "%s",
                 ringcc_comm_last_error(NULL));
      return H_EXIT_UNSUPPORTED;
    }
    if (r != RINGCC_SUCCESS) {
      h_fail(&ctx, "ringcc_comm_init_env (RINGCC_ROOT=%s) returned %d (%s): "
                   "%s", ra->root, (int)r, ringcc_strerror(r),
             ringcc_comm_last_error(NULL));
      return 2;
    }
  }
  int rc = o->body(&ctx);
  if (!o->skip_init) {
    ringcc_result_t r = ringcc_comm_destroy(ctx.comm);
    if (r != RINGCC_SUCCESS && rc == 0)
      rc = h_fail(&ctx, "ringcc_comm_destroy returned %d (%s)", (int)r,
                  ringcc_strerror(r)) + 2;
  }
  return rc;
}

static void random_hex(char *out, size_t bytes) {
  unsigned char raw[32];
  size_t n = bytes < sizeof raw ? bytes : sizeof raw;
  if (getrandom(raw, n, 0) != (ssize_t)n)
    for (size_t i = 0; i < n; i++)
      raw[i] = (unsigned char)(rand() ^ getpid());
  for (size_t i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

/* The whole content of a memfd, NUL-terminated (malloc'd). */
static char *read_all(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return NULL;
  size_t len = (size_t)st.st_size;
  char *buf = malloc(len + 1);
  if (buf == NULL)
    return NULL;
  size_t got = 0;
  while (got < len) {
    ssize_t n = pread(fd, buf + got, len - got, (off_t)got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  buf[got] = '\0';
  return buf;
}

/* Before a rank that outlived the deadline is killed: every thread's stack,
 * from gdb where it is installed (attached for at most 20 s), so that a hang
 * seen once in CI says where it was. The rank is the shell's only child. */
static void print_stacks(int rank, pid_t shell) {
  char path[64], line[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)shell,
           (int)shell);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  int child = 0;
  if (fscanf(f, "%d", &child) != 1)
    child = 0;
  fclose(f);
  char gdb[64] = "", timeout[64] = ""; /* tool_path's buffer is static */
  const char *at = tool_path("gdb");
  snprintf(gdb, sizeof gdb, "%s", at ? at : "");
  at = tool_path("timeout");
  snprintf(timeout, sizeof timeout, "%s", at ? at : "");
  if (child <= 0 || !*gdb || !*timeout) {
    fprintf(stderr, "(no stacks for rank %d: %s)\n", rank,
            child <= 0 ? "its process is gone" : "gdb is not installed");
    return;
  }
  snprintf(line, sizeof line, "%d", child);
  fprintf(stderr, "---- rank %d (pid %d) outlived the deadline; its threads:\n",
          rank, child);
  fflush(stderr);
  char *argv[] = {timeout, "20", gdb, "-nx", "-batch", "-p",
                  line, "-ex", "thread apply all bt", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid;
  if (posix_spawn(&pid, timeout, &fa, NULL, argv, environ) == 0)
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  posix_spawn_file_actions_destroy(&fa);
  fprintf(stderr, "---- end of rank %d's threads\n", rank);
}

/* Waits for the shells; kills the rest at the deadline or grace_s after the
 * first failure (printing the stacks of the first two that outlived the
 * deadline). */
static void wait_ranks(const ns_run_opts_t *o, const pid_t *pids,
                       ns_result_t *res) {
  int n = o->nranks, remaining = 0, stacks = 0;
  bool done[NS_MAX_RANKS] = {false};
  double start = h_now_s(), failed_at = -1;
  double deadline = start + (o->timeout_s > 0 ? o->timeout_s : 60.0);
  double grace = o->grace_s == 0 ? 5.0 : o->grace_s;
  for (int r = 0; r < n; r++)
    if (pids[r] > 0)
      remaining++;
    else
      done[r] = true;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < n; r++) {
      if (done[r] || waitpid(pids[r], &res->status[r], WNOHANG) != pids[r])
        continue;
      done[r] = true;
      remaining--;
      progressed = true;
      if (res->status[r] != 0 && failed_at < 0)
        failed_at = h_now_s();
    }
    double now = h_now_s();
    bool expired = now > deadline;
    bool grace_over = grace >= 0 && failed_at >= 0 && now > failed_at + grace;
    if (remaining > 0 && (expired || grace_over)) {
      const char *name = o->name ? o->name : "run";
      fprintf(stderr, "%s: %s; killing ranks:", name,
              expired ? "the deadline passed" : "a rank failed");
      for (int r = 0; r < n; r++) {
        if (done[r])
          continue;
        fprintf(stderr, " %d", r);
        if (expired && stacks++ < 2) /* gdb takes seconds per rank */
          print_stacks(r, pids[r]);
        kill(pids[r], SIGKILL);
        while (waitpid(pids[r], &res->status[r], 0) < 0 && errno == EINTR) {
        }
        res->killed[r] = true;
        done[r] = true;
      }
      fprintf(stderr, " (%.1f s after the start)\n", now - start);
      break;
    }
    if (!progressed)
      h_sleep_ms(2);
  }
  res->seconds = h_now_s() - start;
}

static void report_failures(const ns_run_opts_t *o, const ns_result_t *res) {
  const char *name = o->name ? o->name : "run";
  for (int r = 0; r < o->nranks; r++) {
    if (res->status[r] == 0)
      continue;
    char st[96];
    fprintf(stderr, "%s: rank %d (host%d) %s%s\n", name, r, o->host_of[r],
            ns_describe_status(res->status[r], st, sizeof st),
            res->killed[r] ? " (killed by the runner)" : "");
    const char *out = res->output[r];
    if (out != NULL && *out != '\0') {
      size_t len = strlen(out);
      const char *tail = len > OUTPUT_TAIL_BYTES ? out + len - OUTPUT_TAIL_BYTES
                                                 : out;
      fprintf(stderr, "---- rank %d output%s ----\n%s%s---- end of rank %d "
                      "----\n", r, tail != out ? " (tail)" : "", tail,
              out[len - 1] == '\n' ? "" : "\n", r);
    }
  }
}

bool ns_run(const ns_run_opts_t *o, ns_result_t *res) {
  static int run_seq;
  ns_result_t local;
  if (res == NULL)
    res = &local;
  memset(res, 0, sizeof *res);
  if (o->nranks < 1 || o->nranks > NS_MAX_RANKS || o->host_of == NULL ||
      (o->body == NULL && o->argv == NULL)) {
    fprintf(stderr, "ns_run: bad options\n");
    return false;
  }
  res->nranks = o->nranks;
  int port = o->port > 0 ? o->port : PORT_BASE + run_seq++ % 1000;
  struct rank_arg ra[NS_MAX_RANKS];
  pid_t pids[NS_MAX_RANKS];
  int fds[NS_MAX_RANKS];
  char addr[24], secret[33];
  char *why = h_shared_alloc(sizeof res->unsupported_why);
  random_hex(secret, 16);
  for (int r = 0; r < o->nranks; r++) {
    ra[r] = (struct rank_arg){.o = o, .rank = r};
    if (o->root)
      snprintf(ra[r].root, sizeof ra[r].root, "%s", o->root);
    else
      snprintf(ra[r].root, sizeof ra[r].root, "%s:%d",
               ns_host_addr(o->host_of[0], addr, sizeof addr), port);
    memcpy(ra[r].secret, secret, sizeof secret);
    ra[r].why = why;
    fds[r] = -1;
    if (o->capture) {
      fds[r] = memfd_create("rank-output", MFD_CLOEXEC);
      if (fds[r] < 0)
        fprintf(stderr, "ns_run: memfd_create: %s (output not captured)\n",
                strerror(errno));
    }
    pids[r] = ns_spawn(o->net, o->host_of[r], rank_main, &ra[r], fds[r]);
    if (pids[r] < 0) {
      fprintf(stderr, "ns_run: cannot start rank %d: %s\n", r,
              strerror(errno));
      res->status[r] = NS_EXIT_SETUP << 8;
    }
  }
  if (o->started != NULL)
    o->started(o->started_arg);
  wait_ranks(o, pids, res);
  bool ok = true;
  int unsupported = 0;
  for (int r = 0; r < o->nranks; r++) {
    if (fds[r] >= 0) {
      res->output[r] = read_all(fds[r]);
      close(fds[r]);
    }
    ok = ok && res->status[r] == 0;
    unsupported += WIFEXITED(res->status[r]) &&
                   WEXITSTATUS(res->status[r]) == H_EXIT_UNSUPPORTED;
  }
  res->unsupported = unsupported == o->nranks;
  if (why != NULL) {
    snprintf(res->unsupported_why, sizeof res->unsupported_why, "%s", why);
    h_shared_free(why, sizeof res->unsupported_why);
  }
  if (!ok && !res->unsupported)
    report_failures(o, res);
  if (res == &local)
    ns_result_free(res);
  return ok;
}

void ns_result_free(ns_result_t *res) {
  for (int r = 0; r < NS_MAX_RANKS; r++) {
    free(res->output[r]);
    res->output[r] = NULL;
  }
}
