/*
 * tcpring.c - the loopback TCP ceiling of a ring collective on this machine.
 *
 *   tcpring [-N RANKS] [-t SECONDS] [-l WRITE_BYTES]    (defaults 4, 3, 1M)
 *
 * N processes in a ring over 127.0.0.1, the traffic of a ring AllReduce
 * without the reductions: every rank streams to its right neighbour (a sender
 * thread, writes of -l bytes) while it reads from its left one, all starting
 * together, for -t seconds. Printed: each link's receive rate, the slowest,
 * median and mean link, and the aggregate (GB = 1e9 B). A ring runs at the
 * pace of its slowest link, so "slowest" is the busbw ceiling of a TCP ring
 * collective at this N (busbw counts the bytes each rank sends).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct link_result {
  double bytes, seconds;
  int done;
};

struct sender {
  int fd;
  size_t write_bytes;
  double until;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *send_until(void *arg) {
  struct sender *s = arg;
  char *buf = malloc(s->write_bytes);
  if (buf == NULL) return NULL;
  memset(buf, 0x5a, s->write_bytes);
  while (now_s() < s->until) {
    for (size_t off = 0; off < s->write_bytes;) {
      ssize_t w = write(s->fd, buf + off, s->write_bytes - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        perror("tcpring: write");
        goto out;
      }
      off += (size_t)w;
    }
  }
out:
  shutdown(s->fd, SHUT_WR); /* the reader sees EOF */
  free(buf);
  return NULL;
}

/* A listening socket on 127.0.0.1 and a kernel-chosen port. */
static int listen_loopback(unsigned short *port) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(fd, 1) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    perror("tcpring: listen on 127.0.0.1");
    exit(1);
  }
  *port = ntohs(a.sin_port);
  return fd;
}

static int connect_loopback(unsigned short port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("tcpring: connect");
    _exit(1);
  }
  return fd;
}

/* One rank: connect right, accept left, say ready, wait for go, stream. */
static void rank_main(int rank, int nranks, const int *listen_fds,
                      const unsigned short *ports, int ready_fd, int go_fd,
                      double seconds, size_t write_bytes,
                      struct link_result *out) {
  int right = connect_loopback(ports[(rank + 1) % nranks]);
  int left = accept(listen_fds[rank], NULL, NULL);
  if (left < 0) {
    perror("tcpring: accept");
    _exit(1);
  }
  for (int q = 0; q < nranks; q++) close(listen_fds[q]);
  char c = 'r';
  if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 0) _exit(1);
  struct sender s = {.fd = right, .write_bytes = write_bytes,
                     .until = now_s() + seconds};
  pthread_t th;
  pthread_create(&th, NULL, send_until, &s);
  char *buf = malloc(write_bytes);
  double got = 0, t0 = now_s();
  for (;;) {
    ssize_t k = read(left, buf, write_bytes);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (double)k;
  }
  out->seconds = now_s() - t0;
  pthread_join(th, NULL);
  out->bytes = got;
  out->done = 1;
  _exit(0);
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  int nranks = 4, opt;
  double seconds = 3;
  size_t write_bytes = (size_t)1 << 20;
  while ((opt = getopt(argc, argv, "N:t:l:h")) != -1) {
    switch (opt) {
    case 'N': nranks = atoi(optarg); break;
    case 't': seconds = atof(optarg); break;
    case 'l': write_bytes = (size_t)atol(optarg); break;
    default:
      fprintf(opt == 'h' ? stdout : stderr,
              "usage: tcpring [-N RANKS] [-t SECONDS] [-l WRITE_BYTES]\n");
      return opt == 'h' ? 0 : 2;
    }
  }
  if (nranks < 2 || nranks > 256 || seconds <= 0 || write_bytes == 0) {
    fprintf(stderr, "tcpring: want 2 <= -N <= 256, -t > 0, -l > 0\n");
    return 2;
  }
  int *listen_fds = calloc((size_t)nranks, sizeof(int));
  unsigned short *ports = calloc((size_t)nranks, sizeof *ports);
  pid_t *pids = calloc((size_t)nranks, sizeof(pid_t));
  struct link_result *res =
      mmap(NULL, sizeof *res * (size_t)nranks, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int ready[2], go[2];
  if (!listen_fds || !ports || !pids || res == MAP_FAILED || pipe(ready) ||
      pipe(go)) {
    perror("tcpring: setup");
    return 1;
  }
  memset(res, 0, sizeof *res * (size_t)nranks);
  for (int q = 0; q < nranks; q++) listen_fds[q] = listen_loopback(&ports[q]);
  fflush(stdout);
  for (int q = 0; q < nranks; q++) {
    pids[q] = fork();
    if (pids[q] < 0) {
      perror("tcpring: fork");
      return 1;
    }
    if (pids[q] == 0) {
      close(ready[0]);
      close(go[1]);
      rank_main(q, nranks, listen_fds, ports, ready[1], go[0], seconds,
                write_bytes, &res[q]);
    }
  }
  for (int q = 0; q < nranks; q++) close(listen_fds[q]);
  close(ready[1]);
  close(go[0]);
  char c;
  int ready_count = 0;
  while (ready_count < nranks && read(ready[0], &c, 1) == 1) ready_count++;
  close(go[1]); /* go: every rank's read returns 0 */
  int failed = ready_count < nranks;
  for (int q = 0; q < nranks; q++) {
    int st;
    while (waitpid(pids[q], &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !res[q].done) failed = 1;
  }
  if (failed) {
    fprintf(stderr, "tcpring: a rank failed\n");
    return 1;
  }

  double *rate = calloc((size_t)nranks, sizeof(double)), sum = 0;
  printf("# tcpring: %d ranks on 127.0.0.1, each streams to its right "
         "neighbour while reading from its left, %.1f s, %zu B writes; "
         "GB = 1e9 B\n", nranks, seconds, write_bytes);
  for (int q = 0; q < nranks; q++) {
    rate[q] = res[q].bytes / res[q].seconds / 1e9;
    sum += rate[q];
    printf("#  link %d -> %d: %.3f GB/s\n", (q - 1 + nranks) % nranks, q,
           rate[q]);
  }
  qsort(rate, (size_t)nranks, sizeof(double), by_value);
  double median = nranks % 2 ? rate[nranks / 2]
                             : (rate[nranks / 2 - 1] + rate[nranks / 2]) / 2;
  printf("tcpring nranks %d slowest %.3f median %.3f mean %.3f aggregate "
         "%.3f GB/s\n", nranks, rate[0], median, sum / nranks, sum);
  free(rate);
  return 0;
}
