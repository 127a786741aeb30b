/*
 * ringcc-run - start N local ranks of a program with the environment that
 * ringcc_comm_init_env() reads, relay their output tagged with the rank, and
 * stop the whole job when one rank fails.
 *
 *   ringcc-run -np N [options] [--] PROG [ARGS...]
 *
 * How it works: one process (fork + execvp) per rank, each in its own process
 * group so that a signal reaches whatever the rank started too. Each rank's
 * stdout and stderr are pipes; a single poll loop (ppoll, with SIGCHLD and the
 * forwarded signals unblocked only while waiting) relays whole lines, reaps
 * ranks as they exit and enforces the deadlines (--timeout, the SIGTERM ->
 * SIGKILL grace). The rendezvous's listening socket is opened here before
 * any rank starts and handed to rank 0 when it asks (open_root,
 * serve_handoff), so the port is never free for someone else to take.
 * A rank that ended may have left shared-memory segments: they are removed
 * (remove_segments_of). Standalone: it does not link libringcc (the header is used
 * for the version number only).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringcc.h"
#include "shmname.h"
#include "trace_merge.h"

#define PROG_NAME "ringcc-run"
#define MAX_RANKS 4096
#define KILL_GRACE_NS (2 * 1000000000LL)   /* SIGTERM -> SIGKILL */
#define DRAIN_GRACE_NS (1 * 1000000000LL)  /* all ranks gone, pipes still open */
/* After the first failure, how long to gather the failures that come with it
 * before naming the cause: a rank killed by a signal takes its peers down
 * with it within milliseconds, and its peers may be reaped first. */
#define VERDICT_GRACE_NS (200 * 1000000LL)
#define READ_CHUNK 65536
#define HOLD_MAX 65536 /* a line longer than this is relayed in pieces */
#define DRAIN_ALL 4096 /* reads of a finished rank's pipe: 256 MiB */

#define EXIT_USAGE 2
#define EXIT_INTERNAL 1
#define EXIT_TIMEOUT 124
#define EXIT_CANNOT_RUN 127

enum { OUT_STDOUT = 0, OUT_STDERR = 1 };

/* One of a rank's output pipes, and the text read from it that does not yet
 * end in a newline. */
struct stream {
  int fd; /* read end; -1 once closed */
  char *buf;
  size_t len, cap;
  bool mid_line; /* part of the current line was already relayed */
};

struct rank {
  pid_t pid; /* 0: not started */
  bool running;
  bool failed;     /* ended with a non-zero status before the job was stopped */
  int status;      /* its wait status, when failed */
  int64_t ended_at;
  struct stream out[2]; /* OUT_STDOUT, OUT_STDERR */
};

struct job {
  int nranks;
  int width; /* digits of nranks-1, for the "[R] " prefix */
  bool prefix;
  double timeout_s; /* 0: none */
  char **argv;      /* PROG ARGS... */
  struct rank *ranks;
  int running;
  int exit_code;    /* the cause's code; 0 while none */
  int64_t verdict_at; /* after a failure: when to name the cause and stop */
  bool stopping;    /* SIGTERM sent to the job */
  bool killed;      /* SIGKILL sent to the job */
  int64_t kill_at;  /* when stopping: the SIGKILL deadline */
  int64_t drain_until; /* 0 until every rank has been reaped */
  int signals_received;
  bool out_broken[2]; /* our own stdout / stderr can no longer be written */
  char *staging;      /* the text of one relay write */
  size_t staging_cap;
  int root_fd;        /* the rendezvous's listening socket, until rank 0
                         takes it (-1 then); see open_root */
  int handoff_fd;     /* where rank 0 asks for it (-1: not offered) */
};

/* ---- small helpers ------------------------------------------------------- */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Writes all of data to fd, waiting when fd is non-blocking and full.
 * Returns 0, or -1 with errno set. */
static int write_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n > 0) {
      data += n;
      len -= (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      poll(&p, 1, -1);
    } else {
      if (n == 0) errno = EIO;
      return -1;
    }
  }
  return 0;
}

/* Messages of the launcher itself: straight to fd 2, unbuffered, so they come
 * in order with the rank output relayed there. */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...) {
  char msg[1024];
  int n = snprintf(msg, sizeof msg, PROG_NAME ": ");
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof msg - 2) n = (int)sizeof msg - 2;
  msg[n++] = '\n';
  (void)write_all(STDERR_FILENO, msg, (size_t)n);
}

static void *xrealloc(void *p, size_t bytes) {
  void *q = realloc(p, bytes);
  if (q == NULL) {
    say("out of memory (%zu bytes)", bytes);
    exit(EXIT_INTERNAL);
  }
  return q;
}

static const char *plural(int n, const char *one, const char *many) {
  return n == 1 ? one : many;
}

/* ---- usage and options --------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
"Usage: " PROG_NAME " -np N [options] [--] PROG [ARGS...]\n"
"\n"
"Starts N ranks of PROG on this host with the environment that\n"
"ringcc_comm_init_env() reads, and relays their output tagged with the rank.\n"
"Options end at the first argument that is not an option, or at \"--\".\n"
"\n"
"Options:\n"
"  -np N, -n N         number of ranks to start (1..%d); required\n"
"  --root HOST:PORT    the rendezvous address rank 0 listens on (default:\n"
"                      127.0.0.1 and a port the kernel picks). The launcher\n"
"                      opens the listening socket itself and hands it to\n"
"                      rank 0, so nobody can take the port in between\n"
"  --no-prefix         relay output lines without the \"[R] \" rank tag\n"
"  --timeout SEC       stop the whole job after SEC seconds (decimals allowed)\n"
"                      and exit with status %d\n"
"  --trace DIR         record every step of every collective (RINGCC_TRACE=DIR\n"
"                      for each rank; a former run's rank files there are\n"
"                      removed first) and, when the job ends, merge the\n"
"                      ranks' files into DIR/trace.json: one timeline, the\n"
"                      clocks aligned at init; open it in ui.perfetto.dev or\n"
"                      chrome://tracing, or draw it with ringcc-trace --png\n"
"  -h, --help          print this help and exit\n"
"  --version           print the version and exit\n"
"\n"
"Environment of each rank:\n"
"  RINGCC_RANK         its rank, 0..N-1\n"
"  RINGCC_NRANKS       N\n"
"  RINGCC_LOCAL_RANK   its rank among the ranks on this host (= RINGCC_RANK)\n"
"  RINGCC_LOCAL_SIZE   the number of ranks on this host (= N)\n"
"  RINGCC_ROOT         HOST:PORT of the rendezvous\n"
"  RINGCC_ROOT_HANDOFF rank 0 only: where it asks the launcher for the\n"
"                      rendezvous's listening socket (opened by the launcher\n"
"                      before any rank starts, handed to rank 0 or a process\n"
"                      it started, then closed here)\n"
"  RINGCC_SECRET       the rendezvous secret: 32 random hex digits (128 bits\n"
"                      from getrandom), new for every job\n"
"  RINGCC_TRACE        DIR, with --trace\n"
"\n"
"Output: each rank's stdout and stderr go to the launcher's stdout and\n"
"stderr one whole line at a time, each line prefixed \"[R] \" (R right-aligned\n"
"to the width of N-1); a last line without a newline gets one. Rank 0 reads\n"
"the launcher's stdin unless it is a terminal; the other ranks read /dev/null.\n"
"\n"
"Failures: when a rank exits with a non-zero status or is killed by a signal,\n"
"the launcher gathers the failures of the next 0.2 s (a killed rank's peers\n"
"fail within milliseconds and may end first), names the cause (a rank killed\n"
"by a signal, else the first to fail) and the others that failed with it,\n"
"sends SIGTERM to the other ranks, SIGKILL 2 s later, and exits with the\n"
"cause's status (128+N for signal N). Each rank runs in\n"
"its own process group, and signals go to the whole group. SIGINT, SIGTERM\n"
"and SIGHUP sent to the launcher are forwarded to every rank; the third one\n"
"sends SIGKILL instead.\n"
"\n"
"Exit status: 0 when every rank exited 0; the failing rank's status or\n"
"128+signal; %d when --timeout expired; %d when PROG could not be started;\n"
"%d for a usage error; %d when the launcher itself failed.\n",
          MAX_RANKS, EXIT_TIMEOUT, EXIT_TIMEOUT, EXIT_CANNOT_RUN, EXIT_USAGE,
          EXIT_INTERNAL);
}

__attribute__((noreturn, format(printf, 1, 2))) static void
usage_error(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, PROG_NAME ": %s\nTry '" PROG_NAME " --help'.\n", msg);
  exit(EXIT_USAGE);
}

struct options {
  int nranks;
  const char *root; /* NULL: pick a free port on 127.0.0.1 */
  bool prefix;
  double timeout_s;
  const char *trace_dir; /* --trace DIR, or NULL */
  char **argv;
};

static int parse_nranks(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 1 || v > MAX_RANKS)
    usage_error("invalid number of ranks '%s' (want 1..%d)", s, MAX_RANKS);
  return (int)v;
}

static double parse_timeout(const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > 1e9)
    usage_error("invalid --timeout '%s' (want seconds > 0)", s);
  return v;
}

/* HOST:PORT or [V6ADDR]:PORT with PORT in 1..65535. */
static const char *check_root(const char *s) {
  const char *colon = strrchr(s, ':');
  if (colon == NULL || colon == s || colon[1] == '\0')
    usage_error("invalid --root '%s' (want HOST:PORT)", s);
  char *end;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (errno != 0 || *end != '\0' || port < 1 || port > 65535)
    usage_error("invalid port in --root '%s' (want 1..65535)", s);
  return s;
}

/* Matches "--name VALUE", "--name=VALUE" (and the same with one dash when
 * allowed); returns the value or NULL when arg is not this option. */
static const char *option_value(int argc, char **argv, int *i,
                                const char *name) {
  const char *arg = argv[*i];
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return NULL;
  if (arg[n] == '=') return arg + n + 1;
  if (arg[n] != '\0') return NULL;
  if (*i + 1 >= argc) usage_error("option %s needs a value", name);
  return argv[++*i];
}

static void parse_options(int argc, char **argv, struct options *o) {
  *o = (struct options){.nranks = 0, .root = NULL, .prefix = true};
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i], *v;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-' || a[1] == '\0') break; /* PROG */
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      exit(0);
    } else if (strcmp(a, "--version") == 0) {
      printf(PROG_NAME " (libringcc) %d.%d.%d\n", RINGCC_VERSION_MAJOR,
             RINGCC_VERSION_MINOR, RINGCC_VERSION_PATCH);
      exit(0);
    } else if ((v = option_value(argc, argv, &i, "-np")) ||
               (v = option_value(argc, argv, &i, "--np")) ||
               (v = option_value(argc, argv, &i, "-n"))) {
      o->nranks = parse_nranks(v);
    } else if ((v = option_value(argc, argv, &i, "--root"))) {
      o->root = check_root(v);
    } else if (strcmp(a, "--no-prefix") == 0) {
      o->prefix = false;
    } else if ((v = option_value(argc, argv, &i, "--timeout"))) {
      o->timeout_s = parse_timeout(v);
    } else if ((v = option_value(argc, argv, &i, "--trace"))) {
      if (*v == '\0') usage_error("--trace needs a directory");
      o->trace_dir = v;
    } else {
      usage_error("unknown option '%s'", a);
    }
  }
  if (o->nranks == 0) usage_error("the number of ranks is missing (-np N)");
  if (i >= argc) usage_error("the program to run is missing");
  o->argv = argv + i;
}

/* ---- the job's environment ----------------------------------------------- */

/* A listening socket on addr (close-on-exec): the fd, or -1 with errno. */
static int listen_on(const struct sockaddr *a, socklen_t alen) {
  int one = 1;
  int fd = socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, a, alen) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* The rendezvous's listening socket, kept open from here on and handed to
 * rank 0 (RINGCC_ROOT_FD), so that the port is never free for someone else
 * to take between the launcher's choice and rank 0's listen. Without
 * --root: 127.0.0.1 and a port the kernel picks (written to out). With it:
 * that host's address (else every address, as rank 0 would) and port.
 * Returns the fd, or -1 with errno (*what names the step). */
static int open_root(const char *given, char *out, size_t len,
                     const char **what) {
  if (given == NULL) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(0)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    *what = "listening on 127.0.0.1";
    int fd = listen_on((struct sockaddr *)&a, sizeof a);
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
    snprintf(out, len, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    return fd;
  }
  snprintf(out, len, "%s", given);
  char host[300];
  const char *colon = strrchr(given, ':');
  size_t hlen = (size_t)(colon - given);
  if (given[0] == '[' && hlen >= 2 && given[hlen - 1] == ']')
    snprintf(host, sizeof host, "%.*s", (int)(hlen - 2), given + 1);
  else
    snprintf(host, sizeof host, "%.*s", (int)hlen, given);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  *what = "resolving the --root host";
  int g = getaddrinfo(host, colon + 1, &hints, &ai);
  if (g != 0) {
    errno = g == EAI_SYSTEM ? errno : EADDRNOTAVAIL;
    return -1;
  }
  *what = "listening on the --root address";
  int fd = listen_on(ai->ai_addr, ai->ai_addrlen);
  if (fd < 0 && errno == EADDRNOTAVAIL) {
    /* Not an address of this host (NAT, a name for another interface):
     * every address with that port, as rank 0 itself would. */
    struct sockaddr_storage any;
    memset(&any, 0, sizeof any);
    memcpy(&any, ai->ai_addr, ai->ai_addrlen);
    if (any.ss_family == AF_INET)
      ((struct sockaddr_in *)&any)->sin_addr.s_addr = htonl(INADDR_ANY);
    else
      ((struct sockaddr_in6 *)&any)->sin6_addr = in6addr_any;
    fd = listen_on((struct sockaddr *)&any, ai->ai_addrlen);
  }
  freeaddrinfo(ai);
  return fd;
}

/* Where rank 0 asks for the listening socket: a unix socket in the abstract
 * namespace, "@ringcc-run-PID-RANDOM" (name written to out); the fd, or -1
 * with errno. The launcher answers one request (serve_handoff). */
static int open_handoff(char *out, size_t len) {
  unsigned char rnd[8];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return -1;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ringcc-run-%d-",
                   (int)getpid());
  for (size_t k = 0; k < sizeof rnd; k++)
    n += snprintf(a.sun_path + 1 + n, sizeof a.sun_path - 1 - (size_t)n,
                  "%02x", rnd[k]);
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&a, alen) != 0 || listen(fd, 8) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if ((size_t)n + 2 > len) {
    close(fd);
    errno = ENAMETOOLONG;
    return -1;
  }
  out[0] = '@';
  memcpy(out + 1, a.sun_path + 1, (size_t)n + 1);
  return fd;
}

/* 1 when pid is ancestor or one of its descendants (a wrapper that rank 0's
 * program is may start the process that calls ringcc). */
static bool descends_from(pid_t pid, pid_t ancestor) {
  for (int depth = 0; depth < 64 && pid > 1; depth++) {
    if (pid == ancestor) return true;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* the name may hold anything */
    int ppid;
    if (paren == NULL || sscanf(paren + 1, " %*c %d", &ppid) != 1) return false;
    pid = ppid;
  }
  return pid == ancestor;
}

/* 16 random bytes as 32 lowercase hex digits. */
static int make_secret(char out[33]) {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    got += (size_t)n;
  }
  for (size_t k = 0; k < sizeof bytes; k++)
    snprintf(out + 2 * k, 3, "%02x", bytes[k]);
  return 0;
}

/* Two pipes per rank stay open: raise the soft open-file limit if that many
 * would not fit (the ranks get the original limit back). */
static void raise_nofile(int nranks, struct rlimit *orig) {
  getrlimit(RLIMIT_NOFILE, orig);
  rlim_t need = 2 * (rlim_t)nranks + 64;
  if (orig->rlim_cur == RLIM_INFINITY || orig->rlim_cur >= need) return;
  struct rlimit raised = *orig;
  raised.rlim_cur =
      orig->rlim_max == RLIM_INFINITY || orig->rlim_max > need ? need : orig->rlim_max;
  setrlimit(RLIMIT_NOFILE, &raised);
}

/* ---- signals ------------------------------------------------------------- */

static const int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NFORWARDED (int)(sizeof forwarded_signals / sizeof forwarded_signals[0])
static volatile sig_atomic_t pending_signal[NFORWARDED];

static void on_signal(int sig) {
  for (int k = 0; k < NFORWARDED; k++)
    if (forwarded_signals[k] == sig) pending_signal[k]++;
}

static void on_sigchld(int sig) { (void)sig; /* only interrupts ppoll */ }

/* Handlers in place, and those signals blocked except inside ppoll (the mask
 * before is returned in *wait_mask). SIGPIPE is ignored so that a closed
 * stdout shows up as EPIPE. */
static void setup_signals(sigset_t *wait_mask) {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGCHLD);
  for (int k = 0; k < NFORWARDED; k++) sigaddset(&block, forwarded_signals[k]);
  sigprocmask(SIG_BLOCK, &block, wait_mask);
  for (int k = 0; k < NFORWARDED; k++) sigdelset(wait_mask, forwarded_signals[k]);
  sigdelset(wait_mask, SIGCHLD);

  struct sigaction sa = {0};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_signal;
  for (int k = 0; k < NFORWARDED; k++) sigaction(forwarded_signals[k], &sa, NULL);
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

/* ---- starting ranks ------------------------------------------------------ */

struct rank_env {
  const char *root;
  const char *secret;
  char handoff[64];    /* "@name": where rank 0 asks for the listening socket */
  sigset_t child_mask; /* the signal mask the launcher was started with */
  struct rlimit nofile; /* the open-file limit the launcher was started with */
};

/* What the child reports on its status pipe when it could not run PROG. */
enum child_step { STEP_EXEC, STEP_STDIO, STEP_ENV };
struct child_report {
  int err;  /* errno */
  int step; /* enum child_step */
};

/* In the child, between fork and exec: reports a failure's errno on
 * status_fd (close-on-exec, so a successful exec reports nothing) and exits. */
__attribute__((noreturn)) static void child_fail(int status_fd,
                                                 enum child_step step) {
  struct child_report rep = {.err = errno, .step = step};
  ssize_t n = write(status_fd, &rep, sizeof rep);
  (void)n;
  _exit(EXIT_CANNOT_RUN);
}

__attribute__((noreturn)) static void
child_exec(const struct job *j, int r, const struct rank_env *env,
           const int out_pipe[2], const int err_pipe[2], int status_fd,
           pid_t launcher) {
  setpgid(0, 0);
  /* The launcher's death (even by SIGKILL) must not leave ranks behind. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) _exit(EXIT_INTERNAL);

  struct sigaction dfl = {0};
  sigemptyset(&dfl.sa_mask);
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, NULL);
  sigprocmask(SIG_SETMASK, &env->child_mask, NULL);

  if (dup2(out_pipe[1], STDOUT_FILENO) < 0 ||
      dup2(err_pipe[1], STDERR_FILENO) < 0)
    child_fail(status_fd, STEP_STDIO);
  /* The launcher's pipes would close at exec anyway; closing them now lets
   * the rest work under the original open-file limit. */
  for (int k = 0; k < r; k++)
    for (int s = 0; s < 2; s++)
      if (j->ranks[k].out[s].fd >= 0) close(j->ranks[k].out[s].fd);
  close(out_pipe[0]);
  close(err_pipe[0]);
  close(out_pipe[1]); /* all > 2: main() keeps 0, 1 and 2 open */
  close(err_pipe[1]);
  setrlimit(RLIMIT_NOFILE, &env->nofile);
  if (r != 0 || isatty(STDIN_FILENO)) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0)
      child_fail(status_fd, STEP_STDIO);
    if (null_fd != STDIN_FILENO) close(null_fd);
  }

  char num[16];
  snprintf(num, sizeof num, "%d", r);
  if (setenv("RINGCC_RANK", num, 1) || setenv("RINGCC_LOCAL_RANK", num, 1))
    child_fail(status_fd, STEP_ENV);
  snprintf(num, sizeof num, "%d", j->nranks);
  if (setenv("RINGCC_NRANKS", num, 1) || setenv("RINGCC_LOCAL_SIZE", num, 1) ||
      setenv("RINGCC_ROOT", env->root, 1) ||
      setenv("RINGCC_SECRET", env->secret, 1))
    child_fail(status_fd, STEP_ENV);
  /* Rank 0 (or a process it starts) asks the launcher for the listening
   * socket there; the others are not told. */
  if (r == 0 && env->handoff[0] != '\0' ? setenv("RINGCC_ROOT_HANDOFF",
                                                  env->handoff, 1)
                                         : unsetenv("RINGCC_ROOT_HANDOFF"))
    child_fail(status_fd, STEP_ENV);

  execvp(j->argv[0], j->argv);
  child_fail(status_fd, STEP_EXEC);
}

static void close_pair(int p[2]) {
  if (p[0] >= 0) close(p[0]);
  if (p[1] >= 0) close(p[1]);
  p[0] = p[1] = -1;
}

/* Starts rank r. Returns 0 when PROG is running; otherwise the errno of the
 * failure, with *what naming the step that failed ("fork", "exec", ...). */
static int spawn_rank(struct job *j, int r, const struct rank_env *env,
                      const char **what) {
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, status[2] = {-1, -1};
  *what = "pipe";
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
      pipe2(status, O_CLOEXEC) != 0) {
    int e = errno;
    close_pair(out_pipe);
    close_pair(err_pipe);
    close_pair(status);
    return e;
  }
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0)
    child_exec(j, r, env, out_pipe, err_pipe, status[1], launcher);
  int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(status[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(status[0]);
    *what = "fork";
    return fork_errno;
  }
  setpgid(pid, pid); /* also done by the child; whichever runs first */

  /* EOF: exec succeeded (the close-on-exec write end vanished). */
  struct child_report rep = {0};
  ssize_t n;
  do n = read(status[0], &rep, sizeof rep);
  while (n < 0 && errno == EINTR);
  close(status[0]);

  struct rank *rk = &j->ranks[r];
  rk->pid = pid;
  rk->running = true;
  j->running++;
  rk->out[OUT_STDOUT].fd = out_pipe[0];
  rk->out[OUT_STDERR].fd = err_pipe[0];
  for (int s = 0; s < 2; s++)
    fcntl(rk->out[s].fd, F_SETFL, fcntl(rk->out[s].fd, F_GETFL) | O_NONBLOCK);
  if (n == (ssize_t)sizeof rep) { /* the poll loop reaps the child */
    *what = rep.step == STEP_EXEC    ? "exec"
            : rep.step == STEP_STDIO ? "setting up stdin/stdout/stderr"
                                     : "setting the environment";
    return rep.err ? rep.err : EIO;
  }
  return 0;
}

/* ---- relaying output ----------------------------------------------------- */

static void staging_reserve(struct job *j, size_t bytes) {
  if (bytes <= j->staging_cap) return;
  size_t cap = j->staging_cap ? j->staging_cap : 4096;
  while (cap < bytes) cap *= 2;
  j->staging = xrealloc(j->staging, cap);
  j->staging_cap = cap;
}

static void close_stream(struct stream *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

/* Our stdout or stderr is gone (EPIPE, say): close every rank's pipe that
 * feeds it, so the ranks see the broken pipe themselves. */
static void output_broken(struct job *j, int which) {
  if (j->out_broken[which]) return;
  j->out_broken[which] = true;
  for (int r = 0; r < j->nranks; r++) {
    struct stream *s = &j->ranks[r].out[which];
    close_stream(s);
    s->len = 0;
  }
}

/* Relays the complete lines held for rank r's stream `which`; with `eof`,
 * also the rest (and a newline to end it); with a too long line, a piece. */
static void relay(struct job *j, int r, int which, bool eof) {
  struct stream *s = &j->ranks[r].out[which];
  char prefix[24];
  int plen = j->prefix ? snprintf(prefix, sizeof prefix, "[%*d] ", j->width, r)
                       : 0;
  size_t used = 0, start = 0;
  staging_reserve(j, s->len + (size_t)plen * (s->len + 1) + 1);
  while (start < s->len) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    size_t end;
    bool whole = nl != NULL;
    if (whole) end = (size_t)(nl - s->buf) + 1;
    else if (eof || s->len - start > HOLD_MAX) end = s->len;
    else break;
    if (!s->mid_line) {
      memcpy(j->staging + used, prefix, (size_t)plen);
      used += (size_t)plen;
    }
    memcpy(j->staging + used, s->buf + start, end - start);
    used += end - start;
    s->mid_line = !whole;
    start = end;
  }
  if (eof && s->mid_line) {
    j->staging[used++] = '\n';
    s->mid_line = false;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
  if (used > 0 && !j->out_broken[which] &&
      write_all(which == OUT_STDOUT ? STDOUT_FILENO : STDERR_FILENO, j->staging,
                used) != 0)
    output_broken(j, which);
}

/* Reads what rank r's stream has now (until it would block, EOF, or
 * max_reads reads, so that one chatty rank cannot starve the others). */
static void drain(struct job *j, int r, int which, int max_reads) {
  struct stream *s = &j->ranks[r].out[which];
  for (int reads = 0; s->fd >= 0 && reads < max_reads; reads++) {
    if (s->cap - s->len < READ_CHUNK) {
      s->cap = s->len + READ_CHUNK;
      s->buf = xrealloc(s->buf, s->cap);
    }
    ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
    if (n > 0) {
      s->len += (size_t)n;
      relay(j, r, which, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    /* EOF, or an error that ends this stream just the same. */
    close_stream(s);
    relay(j, r, which, true);
  }
}

/* ---- the rendezvous socket for rank 0 ----------------------------------- */

static void close_root(struct job *j) {
  if (j->root_fd >= 0) close(j->root_fd);
  if (j->handoff_fd >= 0) close(j->handoff_fd);
  j->root_fd = j->handoff_fd = -1;
}

/* A process asked for the listening socket: if it is rank 0 or a process
 * rank 0 started, of this user, it gets the socket (SCM_RIGHTS) and the
 * launcher keeps no copy, so the port closes when rank 0's rendezvous ends.
 * Anyone else is turned away. */
static void serve_handoff(struct job *j) {
  for (;;) {
    int c = accept4(j->handoff_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != geteuid() || j->ranks[0].pid <= 0 ||
        !descends_from(cred.pid, j->ranks[0].pid)) {
      say("refused the rendezvous socket to pid %d: not rank 0's process",
          (int)cred.pid);
      close(c);
      continue;
    }
    char byte = 'R';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
      struct cmsghdr h;
      char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.space,
                         .msg_controllen = sizeof ctl.space};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &j->root_fd, sizeof(int));
    ssize_t n = sendmsg(c, &msg, MSG_NOSIGNAL);
    close(c);
    if (n == 1) { /* handed over: one socket, one rank 0 */
      close_root(j);
      return;
    }
  }
}

/* ---- stopping and reaping ------------------------------------------------ */

/* Sends sig to every rank's process group that may still hold something: a
 * running rank, or a finished one whose pipes are still open (its children). */
static void signal_job(struct job *j, int sig) {
  for (int r = 0; r < j->nranks; r++) {
    struct rank *rk = &j->ranks[r];
    if (rk->pid <= 0) continue;
    bool lingering = rk->out[0].fd >= 0 || rk->out[1].fd >= 0;
    if (!rk->running && !lingering) continue;
    if (kill(-rk->pid, sig) != 0 && rk->running) kill(rk->pid, sig);
  }
}

static void stop_job(struct job *j) {
  if (j->stopping) return;
  j->stopping = true;
  j->kill_at = now_ns() + KILL_GRACE_NS;
  signal_job(j, SIGTERM);
}

static void describe_status(int status, char *buf, size_t len) {
  if (WIFEXITED(status)) {
    snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char *name = strsignal(sig);
    snprintf(buf, len, "was killed by signal %d (%s)%s", sig,
             name ? name : "unknown", WCOREDUMP(status) ? ", core dumped" : "");
  } else {
    snprintf(buf, len, "ended with wait status 0x%x", (unsigned)status);
  }
}

static int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return EXIT_INTERNAL;
}

static void rank_ended(struct job *j, int r, int status) {
  struct rank *rk = &j->ranks[r];
  rk->running = false;
  j->running--;
  /* Everything the rank wrote is in its pipes now: relay it before saying
   * anything about the rank. */
  drain(j, r, OUT_STDOUT, DRAIN_ALL);
  drain(j, r, OUT_STDERR, DRAIN_ALL);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (j->stopping || j->exit_code != 0) return; /* stopped by us, or later */
  rk->failed = true;
  rk->status = status;
  rk->ended_at = now_ns();
  if (j->verdict_at == 0) j->verdict_at = rk->ended_at + VERDICT_GRACE_NS;
}

/* The cause of a failed job, once the failures that came together are in: a
 * rank killed by a signal (its peers only noticed), else the first reaped.
 * Names it, then the others that failed with it, and stops the rest. */
static void verdict(struct job *j) {
  int cause = -1, others = 0;
  for (int r = 0; r < j->nranks; r++) {
    const struct rank *rk = &j->ranks[r];
    if (!rk->failed) continue;
    others++;
    if (cause < 0) { cause = r; continue; }
    const struct rank *c = &j->ranks[cause];
    bool sig = WIFSIGNALED(rk->status), csig = WIFSIGNALED(c->status);
    if ((sig && !csig) || (sig == csig && rk->ended_at < c->ended_at)) cause = r;
  }
  j->verdict_at = 0;
  if (cause < 0) return;
  const struct rank *c = &j->ranks[cause];
  j->exit_code = exit_code_of(c->status);
  if (j->exit_code == 0) j->exit_code = EXIT_INTERNAL;
  char what[128];
  describe_status(c->status, what, sizeof what);
  if (j->running > 0)
    say("rank %d (pid %d) %s; stopping the other %d %s", cause, (int)c->pid,
        what, j->running, plural(j->running, "rank", "ranks"));
  else
    say("rank %d (pid %d) %s", cause, (int)c->pid, what);
  for (int r = 0; r < j->nranks && others > 1; r++)
    if (j->ranks[r].failed && r != cause) {
      describe_status(j->ranks[r].status, what, sizeof what);
      say("rank %d (pid %d) %s too", r, (int)j->ranks[r].pid, what);
    }
  stop_job(j);
}

/* A rank that ended may have left shared-memory segments (killed before its
 * init unlinked them): its name is on them (shmname.h). Same boot and pid
 * namespace as the launcher's, same user. */
static void remove_segments_of(pid_t pid) {
  char boot[RCC_SHM_BOOT_DIGITS + 1], their_boot[RCC_SHM_BOOT_DIGITS + 1];
  unsigned long long pidns, their_ns;
  int their_pid;
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return;
  rcc_shm_identity(boot, &pidns);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    struct stat st;
    if (rcc_shm_name_parse(e->d_name, their_boot, &their_ns, &their_pid) != 0 ||
        their_pid != (int)pid || their_ns != pidns || pidns == 0 ||
        strcmp(their_boot, boot) != 0 ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        st.st_uid != geteuid())
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0)
      say("removed /dev/shm/%s, left by rank process %d", e->d_name, (int)pid);
  }
  closedir(d);
}

static void reap(struct job *j) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    for (int r = 0; r < j->nranks; r++)
      if (j->ranks[r].pid == pid && j->ranks[r].running) {
        rank_ended(j, r, status);
        remove_segments_of(pid);
        break;
      }
  }
}

static void handle_signals(struct job *j) {
  for (int k = 0; k < NFORWARDED; k++) {
    while (pending_signal[k] > 0) {
      pending_signal[k]--;
      int sig = forwarded_signals[k];
      j->signals_received++;
      if (j->signals_received >= 3) {
        say("got signal %d (%s) again; killing the job with SIGKILL", sig,
            strsignal(sig));
        j->stopping = j->killed = true;
        signal_job(j, SIGKILL);
      } else {
        say("got signal %d (%s); forwarding it to %d %s", sig, strsignal(sig),
            j->running, plural(j->running, "rank", "ranks"));
        signal_job(j, sig);
      }
    }
  }
}

/* ---- the loop ------------------------------------------------------------ */

static int64_t earliest(int64_t a, int64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

/* Deadlines and timers, checked after each wakeup. */
static void check_deadlines(struct job *j, int64_t timeout_at) {
  int64_t now = now_ns();
  if (j->verdict_at != 0 && (now >= j->verdict_at || j->running == 0))
    verdict(j);
  if (timeout_at != 0 && now >= timeout_at && j->running > 0 && !j->stopping &&
      j->verdict_at == 0) {
    say("timeout: the job was still running after %g s; stopping %d %s",
        j->timeout_s, j->running, plural(j->running, "rank", "ranks"));
    j->exit_code = EXIT_TIMEOUT;
    stop_job(j);
  }
  if (j->stopping && !j->killed && now >= j->kill_at) {
    j->killed = true;
    signal_job(j, SIGKILL);
  }
  if (j->running == 0 && j->drain_until == 0) j->drain_until = now + DRAIN_GRACE_NS;
  if (j->drain_until != 0 && now >= j->drain_until) {
    /* Ranks are gone; whoever still holds their pipes is not waited for. */
    for (int r = 0; r < j->nranks; r++)
      for (int s = 0; s < 2; s++) {
        drain(j, r, s, DRAIN_ALL);
        close_stream(&j->ranks[r].out[s]);
        relay(j, r, s, true);
      }
  }
}

static int run_loop(struct job *j, const sigset_t *wait_mask) {
  int64_t timeout_at =
      j->timeout_s > 0 ? now_ns() + (int64_t)(j->timeout_s * 1e9) : 0;
  struct pollfd *fds = xrealloc(NULL, sizeof *fds * (2 * (size_t)j->nranks + 1));
  int *owner = xrealloc(NULL, sizeof *owner * (2 * (size_t)j->nranks + 1));
  for (;;) {
    handle_signals(j);
    reap(j);
    check_deadlines(j, timeout_at);
    nfds_t n = 0;
    for (int r = 0; r < j->nranks; r++)
      for (int s = 0; s < 2; s++)
        if (j->ranks[r].out[s].fd >= 0) {
          fds[n] = (struct pollfd){.fd = j->ranks[r].out[s].fd, .events = POLLIN};
          owner[n++] = 2 * r + s;
        }
    if (n == 0 && j->running == 0) break;
    if (j->handoff_fd >= 0) {
      fds[n] = (struct pollfd){.fd = j->handoff_fd, .events = POLLIN};
      owner[n++] = -1;
    }

    int64_t wake = earliest(j->timeout_s > 0 && !j->stopping ? timeout_at : 0,
                            j->stopping && !j->killed ? j->kill_at : 0);
    wake = earliest(wake, j->drain_until);
    wake = earliest(wake, j->verdict_at);
    struct timespec ts, *tsp = NULL;
    if (wake != 0) {
      int64_t left = wake - now_ns();
      if (left < 0) left = 0;
      ts.tv_sec = left / 1000000000LL;
      ts.tv_nsec = left % 1000000000LL;
      tsp = &ts;
    }
    int ready = ppoll(fds, n, tsp, wait_mask);
    if (ready < 0 && errno != EINTR) {
      say("ppoll failed: %s; killing the job", strerror(errno));
      signal_job(j, SIGKILL);
      while (j->running > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno != EINTR) break;
        for (int r = 0; pid > 0 && r < j->nranks; r++)
          if (j->ranks[r].pid == pid && j->ranks[r].running) {
            j->ranks[r].running = false;
            j->running--;
          }
      }
      j->exit_code = EXIT_INTERNAL;
      break;
    }
    for (nfds_t k = 0; ready > 0 && k < n; k++)
      if (fds[k].revents != 0 && owner[k] < 0)
        serve_handoff(j);
      else if (fds[k].revents != 0)
        drain(j, owner[k] / 2, owner[k] % 2, 4);
  }
  close_root(j);
  free(fds);
  free(owner);
  return j->exit_code;
}

/* --trace: the ranks' files into DIR/trace.json, said on stderr. */
static void merge_trace(const char *dir, int nranks) {
  char out[4096], msg[8400];
  int comms;
  snprintf(out, sizeof out, "%s/trace.json", dir);
  int n = trace_merge(dir, out, &comms, msg, sizeof msg);
  if (n < 0)
    say("trace: %s", msg);
  else if (n == 0)
    say("trace: no rank wrote a trace in %s (did the program create a "
        "communicator?)", dir);
  else
    say("trace: %d rank file%s (%d communicator%s%s) merged into %s%s%s",
        n, plural(n, "", "s"), comms, plural(comms, "", "s"),
        comms == 1 && n < nranks ? ", some ranks missing" : "", out,
        msg[0] ? "; " : "", msg);
}

int main(int argc, char **argv) {
  /* Pipes must never become fd 0, 1 or 2 (a launcher started with one of
   * them closed). */
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
      return EXIT_INTERNAL;
  struct options o;
  parse_options(argc, argv, &o);

  char root[300], secret[33];
  const char *step;
  int root_fd = open_root(o.root, root, sizeof root, &step);
  if (root_fd < 0 && o.root == NULL) {
    say("cannot open the rendezvous port: %s: %s", step, strerror(errno));
    return EXIT_INTERNAL;
  }
  if (root_fd < 0) /* rank 0 listens there itself, and says why it cannot */
    say("%s %s: %s; rank 0 will listen there itself", step, o.root,
        strerror(errno));
  if (make_secret(secret) != 0) {
    say("cannot make the rendezvous secret: getrandom: %s", strerror(errno));
    return EXIT_INTERNAL;
  }

  struct job j = {.nranks = o.nranks, .prefix = o.prefix,
                  .timeout_s = o.timeout_s, .argv = o.argv};
  j.width = snprintf(NULL, 0, "%d", o.nranks - 1);
  j.ranks = xrealloc(NULL, sizeof *j.ranks * (size_t)o.nranks);
  memset(j.ranks, 0, sizeof *j.ranks * (size_t)o.nranks);
  for (int r = 0; r < o.nranks; r++)
    j.ranks[r].out[0].fd = j.ranks[r].out[1].fd = -1;

  struct rank_env env = {.root = root, .secret = secret};
  j.root_fd = root_fd;
  j.handoff_fd = root_fd < 0 ? -1 : open_handoff(env.handoff, sizeof env.handoff);
  if (root_fd >= 0 && j.handoff_fd < 0) { /* rank 0 listens itself */
    say("cannot offer the rendezvous socket to rank 0 (%s); rank 0 will "
        "listen on %s itself", strerror(errno), root);
    close_root(&j);
  }
  raise_nofile(o.nranks, &env.nofile);
  sigset_t wait_mask;
  sigprocmask(SIG_SETMASK, NULL, &env.child_mask);
  setup_signals(&wait_mask);

  if (o.trace_dir != NULL) { /* the ranks inherit it */
    trace_clean(o.trace_dir);
    setenv("RINGCC_TRACE", o.trace_dir, 1);
  }
  for (int r = 0; r < o.nranks; r++) {
    const char *what;
    int e = spawn_rank(&j, r, &env, &what);
    if (e == 0) continue;
    if (strcmp(what, "exec") == 0) {
      say("cannot run %s: %s", o.argv[0], strerror(e));
      j.exit_code = EXIT_CANNOT_RUN;
    } else {
      say("cannot start rank %d: %s: %s%s", r, what, strerror(e),
          e == EMFILE ? " (each rank needs 2 open files here: raise the "
                        "limit with ulimit -n)" : "");
      j.exit_code = EXIT_INTERNAL;
    }
    stop_job(&j);
    break;
  }

  int code = run_loop(&j, &wait_mask);
  if (o.trace_dir != NULL)
    merge_trace(o.trace_dir, o.nranks);
  for (int r = 0; r < o.nranks; r++)
    for (int s = 0; s < 2; s++) free(j.ranks[r].out[s].buf);
  free(j.ranks);
  free(j.staging);
  return code;
}
