/*
 * test_net_ib.c - the verbs network plugin (transports/net_ib/).
 *
 *   ib_unit   the pure parts: RINGCC_IB_HCA parsing and matching, the GID a
 *             RoCE port uses, the PCI distance scale of GPUDirect RDMA, the
 *             words for completion statuses.
 *   ib_fake   the plugin against test/ibverbs/fake_ibverbs.c (loaded through
 *             RINGCC_IBVERBS_LIB): connection setup and the data path in one
 *             process, and the error paths a real device cannot produce on
 *             demand (retry-exceeded completion, memlock limit, modify_qp
 *             timeout, fatal and queue-pair async events, ports down, no
 *             library, no device), each asserting the exact code and
 *             message; device choice (RINGCC_IB_HCA, spreading ranks) and the
 *             GID chosen, read from the INFO log.
 *   ib_real   the same data-path tests on a real device (libibverbs.so.1),
 *             skipped where no RDMA port is ACTIVE; make ib-check runs them
 *             on Soft-RoCE in a VM.
 *   ib_coll   real ranks (processes) over NET/IB (RINGCC_NET=IB,
 *             RINGCC_SHM_DISABLE=1) on a real device: every collective x
 *             datatype x op at n = 2, 3 and 4 with counts 0, 1, 1031 and
 *             70001 (17 slots of 16 KiB), checked element by element; zero
 *             copy with the registration cache; a rank killed with SIGKILL in
 *             the middle of a stream of allreduces. Skipped without a device.
 *
 * The data-path tests run both ends of a connection in one process: the
 * plugin's connect() and accept() never wait for each other, and ready()
 * completes the exchange (net.h).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "clock.h"
#include "env.h"
#include "error.h"
#include "log.h"
#include "net.h"
#include "net_ib.h"
#include "socket.h"

#define P rcc_net_ib
#define SLOT 65536
#define NSLOT 8
#define FIFO_BYTES (SLOT * NSLOT)
#define WAIT_S 20.0

/* The communicator's network key every connection proves, and another. */
static const uint8_t KEY[RCC_NET_KEY_BYTES] = "the test's network key, 32 byte";
static const uint8_t OTHER_KEY[RCC_NET_KEY_BYTES] = "another communicator's key, 32 ";

/* ==== unit tests of the pure parts ========================================= */

TestSuite(ib_unit);

static struct rcc_ib_hca_spec hca(const char *s) {
  struct rcc_ib_hca_spec spec;
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_ib_hca_parse(s, &spec, err, sizeof err), RINGCC_SUCCESS,
               "%s: %s", s, err);
  return spec;
}

Test(ib_unit, hca_prefixes_ports_exact_exclude) {
  struct rcc_ib_hca_spec s = hca("mlx5_0:1,mlx5_1");
  cr_assert(rcc_ib_hca_match(&s, "mlx5_0", 1));
  cr_assert(!rcc_ib_hca_match(&s, "mlx5_0", 2), "mlx5_0:1 takes port 1 only");
  cr_assert(rcc_ib_hca_match(&s, "mlx5_1", 2));
  cr_assert(rcc_ib_hca_match(&s, "mlx5_11", 1), "names are prefixes");
  cr_assert(!rcc_ib_hca_match(&s, "mlx4_0", 1));

  s = hca("=mlx5_1");
  cr_assert(rcc_ib_hca_match(&s, "mlx5_1", 1));
  cr_assert(!rcc_ib_hca_match(&s, "mlx5_11", 1), "'=' is exact");

  s = hca("^mlx5_2:2");
  cr_assert(!rcc_ib_hca_match(&s, "mlx5_2", 2));
  cr_assert(rcc_ib_hca_match(&s, "mlx5_2", 1));
  cr_assert(rcc_ib_hca_match(&s, "rxe0", 1));

  s = hca("^=mlx5_3");
  cr_assert(!rcc_ib_hca_match(&s, "mlx5_3", 1));
  cr_assert(rcc_ib_hca_match(&s, "mlx5_30", 1));
  s = hca("=^mlx5_3");
  cr_assert(s.exclude && s.exact);

  s = hca(NULL);
  cr_assert(rcc_ib_hca_match(&s, "anything", 3));
  s = hca("");
  cr_assert(rcc_ib_hca_match(&s, "anything", 1));
  s = hca("rxe,,mlx5_0:1,");
  cr_assert_eq(s.n, 2);
}

Test(ib_unit, hca_malformed) {
  struct rcc_ib_hca_spec s;
  char err[RCC_ERRLEN];
  cr_assert_eq(rcc_ib_hca_parse("mlx5_0:x", &s, err, sizeof err),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: RINGCC_IB_HCA=\"mlx5_0:x\": \"mlx5_0:x\" "
                        "has no port number 1..255 after ':'");
  cr_assert_eq(rcc_ib_hca_parse("mlx5_0:0", &s, err, sizeof err),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_eq(rcc_ib_hca_parse(":1", &s, err, sizeof err),
               RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: RINGCC_IB_HCA=\":1\": a device name is empty "
                        "or longer than 63 characters");
}

static struct rcc_ib_gid gid(int index, const char *addr, int type) {
  struct rcc_ib_gid g = {.index = index, .type = type};
  cr_assert_eq(inet_pton(AF_INET6, addr, g.raw), 1, "%s", addr);
  return g;
}

Test(ib_unit, gid_choice_roce) {
  struct rcc_ib_gid t[] = {
      gid(0, "fe80::1", RCC_IB_GID_ROCE_V1),
      gid(1, "fe80::1", RCC_IB_GID_ROCE_V2),
      gid(2, "::ffff:10.0.0.1", RCC_IB_GID_ROCE_V1),
      gid(3, "::ffff:10.0.0.1", RCC_IB_GID_ROCE_V2),
      gid(4, "2001:db8::1", RCC_IB_GID_ROCE_V2),
      gid(5, "::", RCC_IB_GID_UNKNOWN),
  };
  char why[400];
  cr_assert_eq(rcc_ib_gid_choose(t, 6, IBV_LINK_LAYER_ETHERNET, -1, why,
                                 sizeof why), 3);
  cr_assert_str_eq(why, "::ffff:10.0.0.1, RoCE v2, IPv4-mapped, chosen "
                        "automatically");
  /* Without the v2 IPv4 entry: global IPv6 v2, then link-local v2, then v1. */
  struct rcc_ib_gid u[] = {t[0], t[1], t[2], t[4]};
  cr_assert_eq(rcc_ib_gid_choose(u, 4, IBV_LINK_LAYER_ETHERNET, -1, why,
                                 sizeof why), 4);
  struct rcc_ib_gid v[] = {t[0], t[1], t[2]};
  cr_assert_eq(rcc_ib_gid_choose(v, 3, IBV_LINK_LAYER_ETHERNET, -1, why,
                                 sizeof why), 1);
  struct rcc_ib_gid w[] = {t[0], t[2]};
  cr_assert_eq(rcc_ib_gid_choose(w, 2, IBV_LINK_LAYER_ETHERNET, -1, why,
                                 sizeof why), 2);
  cr_assert_str_eq(why, "::ffff:10.0.0.1, RoCE v1, IPv4-mapped, chosen "
                        "automatically");
  /* Forced. */
  cr_assert_eq(rcc_ib_gid_choose(t, 6, IBV_LINK_LAYER_ETHERNET, 0, why,
                                 sizeof why), 0);
  cr_assert_str_eq(why, "fe80::1, RoCE v1, set by RINGCC_IB_GID_INDEX");
  cr_assert_eq(rcc_ib_gid_choose(t, 6, IBV_LINK_LAYER_ETHERNET, 5, why,
                                 sizeof why), -1);
  cr_assert_str_eq(why, "RINGCC_IB_GID_INDEX=5 is not a GID of this port; "
                        "its GIDs: 0 (fe80::1, RoCE v1), 1 (fe80::1, RoCE "
                        "v2), 2 (::ffff:10.0.0.1, RoCE v1), 3 "
                        "(::ffff:10.0.0.1, RoCE v2), 4 (2001:db8::1, RoCE v2)");
  /* Nothing usable. */
  cr_assert_eq(rcc_ib_gid_choose(&t[5], 1, IBV_LINK_LAYER_ETHERNET, -1, why,
                                 sizeof why), -1);
  cr_assert_str_eq(why, "the port has no GID (is its network interface up "
                        "with an address?)");
}

Test(ib_unit, gid_choice_infiniband) {
  struct rcc_ib_gid t[] = {gid(0, "fe80::2:c903:1:1", RCC_IB_GID_IB)};
  char why[200];
  cr_assert_eq(rcc_ib_gid_choose(t, 1, IBV_LINK_LAYER_INFINIBAND, -1, why,
                                 sizeof why), 0);
  cr_assert_str_eq(why, "fe80::2:c903:1:1, InfiniBand: index 0");
}

Test(ib_unit, pci_distance) {
  const char *sw = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
  char gpu[200], nic[200], far[200];
  /* One switch: upstream port 0000:01:00.0, downstream ports 02:0x.0. */
  snprintf(gpu, sizeof gpu, "%s/0000:02:08.0/0000:03:00.0", sw);
  snprintf(nic, sizeof nic, "%s/0000:02:10.0/0000:04:00.0", sw);
  cr_assert_eq(rcc_ib_pci_distance(gpu, nic, 0, 0), RCC_IB_PIX);
  cr_assert_eq(rcc_ib_pci_distance(gpu, gpu, 0, 0), RCC_IB_LOC);
  /* Two levels of switches. */
  snprintf(far, sizeof far, "%s/0000:02:10.0/0000:04:00.0/0000:05:00.0/"
           "0000:06:00.0", sw);
  cr_assert_eq(rcc_ib_pci_distance(gpu, far, 0, 0), RCC_IB_PXB);
  /* Only the host bridge in common, and other root complexes. */
  cr_assert_eq(rcc_ib_pci_distance(
                   "/sys/devices/pci0000:00/0000:00:02.0",
                   "/sys/devices/pci0000:00/0000:00:03.0", 0, 0), RCC_IB_PHB);
  cr_assert_eq(rcc_ib_pci_distance(
                   "/sys/devices/pci0000:00/0000:00:02.0",
                   "/sys/devices/pci0000:80/0000:80:03.0", 0, 0), RCC_IB_PHB);
  cr_assert_eq(rcc_ib_pci_distance(
                   "/sys/devices/pci0000:00/0000:00:02.0",
                   "/sys/devices/pci0000:80/0000:80:03.0", 0, 1), RCC_IB_SYS);
  cr_assert_eq(rcc_ib_pci_distance("", gpu, 0, 0), RCC_IB_SYS,
               "a NIC without a PCI path (rxe) is as far as it gets");
  cr_assert_eq(rcc_ib_distance_parse("pxb"), RCC_IB_PXB);
  cr_assert_eq(rcc_ib_distance_parse("4"), RCC_IB_SYS);
  cr_assert_eq(rcc_ib_distance_parse("NVL"), -1);
  cr_assert_str_eq(rcc_ib_distance_name(RCC_IB_PHB), "PHB");
}

Test(ib_unit, status_words) {
  cr_assert_str_eq(rcc_ib_wc_status_name(12), "IBV_WC_RETRY_EXC_ERR");
  cr_assert_str_eq(rcc_ib_wc_status_words(12),
                   "transport retry counter exceeded");
  cr_assert_str_eq(rcc_ib_wc_status_words(IBV_WC_REM_ACCESS_ERR),
                   "remote access error");
  cr_assert_str_eq(rcc_ib_event_name(IBV_EVENT_DEVICE_FATAL),
                   "IBV_EVENT_DEVICE_FATAL");
  cr_assert_str_eq(rcc_ib_wc_status_name(999), "IBV_WC_(unknown)");
}

/* ==== the plugin on a (fake or real) device ================================= */

static void unset_ib_env(void) {
  static const char *const vars[] = {
      "RINGCC_IBVERBS_LIB",  "RINGCC_IB_HCA",          "RINGCC_IB_GID_INDEX",
      "RINGCC_IB_TC",        "RINGCC_IB_SL",           "RINGCC_IB_TIMEOUT",
      "RINGCC_IB_RETRY_CNT", "RINGCC_IB_QPS_PER_CONN", "RINGCC_IB_REG_CACHE_MB",
      "FAKE_IBV_DEVICES",    "FAKE_IBV_LINK",          "FAKE_IBV_PORT_STATE",
      "FAKE_IBV_FAULT",      "RINGCC_NET_GDR_LEVEL",   "RINGCC_NET_GDR_DISABLE",
      "RINGCC_DEBUG",        "RINGCC_NET",             "RINGCC_IB_DISABLE"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    unsetenv(vars[i]);
}

static const char *fake_lib(void) {
  static char path[PATH_MAX + 32];
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  cr_assert(n > 0);
  exe[n] = '\0';
  snprintf(path, sizeof path, "%s/libfakeibverbs.so", dirname(exe));
  cr_assert_eq(access(path, R_OK), 0, "no %s (make builds it)", path);
  return path;
}

/* The fake device; fault: FAKE_IBV_FAULT, or NULL. */
static void use_fake(const char *fault) {
  unset_ib_env();
  setenv("RINGCC_IBVERBS_LIB", fake_lib(), 1);
  if (fault)
    setenv("FAKE_IBV_FAULT", fault, 1);
}

/* A real device, or skip: init must succeed with libibverbs.so.1. */
static void use_real(void) {
  char err[RCC_ERRLEN];
  unsetenv("RINGCC_IBVERBS_LIB");
  if (P.init(NULL, err, sizeof err) != RINGCC_SUCCESS)
    cr_skip_test("no usable RDMA device here: %s", err);
}

typedef struct {
  uint8_t handle[RCC_NET_HANDLE_BYTES];
  char addr[96]; /* the listen address, as the plugin names it */
  void *listen, *send, *recv;
  char *sfifo, *rfifo;
  void *smh, *rmh;
} pair_t;

static void init_ok(void) {
  char err[RCC_ERRLEN];
  cr_assert_eq(P.init(NULL, err, sizeof err), RINGCC_SUCCESS, "init: %s",
               err);
}

static void handle_addr(const uint8_t *h, char *out, size_t len) {
  struct sockaddr_storage a;
  uint16_t family, port;
  memset(&a, 0, sizeof a);
  memcpy(&family, h + 4, 2);
  memcpy(&port, h + 6, 2);
  if (ntohs(family) == 4) {
    struct sockaddr_in *a4 = (struct sockaddr_in *)&a;
    a4->sin_family = AF_INET;
    memcpy(&a4->sin_addr, h + 8, 4);
  } else {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&a;
    a6->sin6_family = AF_INET6;
    memcpy(&a6->sin6_addr, h + 8, 16);
  }
  rcc_socket_addr_set_port(&a, ntohs(port));
  rcc_socket_addr_str(&a, out, len);
}

static void pair_listen(pair_t *p) {
  char err[RCC_ERRLEN];
  memset(p, 0, sizeof *p);
  init_ok();
  cr_assert_eq(P.listen(KEY, p->handle, &p->listen, err, sizeof err),
               RINGCC_SUCCESS, "listen: %s", err);
  handle_addr(p->handle, p->addr, sizeof p->addr);
}

static void pair_connect(pair_t *p) {
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "a hello from the connector";
  uint8_t got[RCC_NET_HELLO_BYTES];
  int64_t dl = rcc_now_ns() + (int64_t)(WAIT_S * 1e9);
  cr_assert_eq(P.connect(KEY, p->handle, hello, &p->send, dl, err, sizeof err),
               RINGCC_SUCCESS, "connect: %s", err);
  cr_assert_eq(P.accept(p->listen, got, &p->recv, dl, err, sizeof err),
               RINGCC_SUCCESS, "accept: %s", err);
  cr_assert_eq(memcmp(hello, got, sizeof hello), 0, "the hello arrived");
  cr_assert_eq(P.ready(p->send, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (send): %s", err);
  cr_assert_eq(P.ready(p->recv, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (receive): %s", err);
}

static void pair_fifos(pair_t *p) {
  char err[RCC_ERRLEN];
  cr_assert_eq(posix_memalign((void **)&p->sfifo, 4096, FIFO_BYTES), 0);
  cr_assert_eq(posix_memalign((void **)&p->rfifo, 4096, FIFO_BYTES), 0);
  memset(p->sfifo, 0, FIFO_BYTES);
  memset(p->rfifo, 0, FIFO_BYTES);
  cr_assert_eq(P.reg_mr(p->send, p->sfifo, FIFO_BYTES, &p->smh, err,
                        sizeof err), RINGCC_SUCCESS, "reg_mr: %s", err);
  cr_assert_eq(P.reg_mr(p->recv, p->rfifo, FIFO_BYTES, &p->rmh, err,
                        sizeof err), RINGCC_SUCCESS, "reg_mr: %s", err);
}

static void pair_open(pair_t *p) {
  pair_listen(p);
  pair_connect(p);
  pair_fifos(p);
}

static void pair_close(pair_t *p) {
  if (p->smh)
    P.dereg_mr(p->send, p->smh);
  if (p->rmh)
    P.dereg_mr(p->recv, p->rmh);
  if (p->send)
    P.close_send(p->send);
  if (p->recv)
    P.close_recv(p->recv);
  if (p->listen)
    P.close_listen(p->listen);
  free(p->sfifo);
  free(p->rfifo);
}

/* Tests req until it is done; fails the test on an error or after WAIT_S. */
static void wait_req(void *req, size_t *bytes, uint32_t *imm,
                     const char *what) {
  char err[RCC_ERRLEN];
  double until = h_now_s() + WAIT_S;
  size_t b;
  uint32_t i;
  for (;;) {
    int done = 0;
    ringcc_result_t r = P.test(req, &done, &b, &i, err, sizeof err);
    cr_assert_eq(r, RINGCC_SUCCESS, "%s: %s", what, err);
    if (done)
      break;
    cr_assert(h_now_s() < until, "%s: not done after %.0f s", what, WAIT_S);
  }
  if (bytes)
    *bytes = b;
  if (imm)
    *imm = i;
}

/* Tests req until it fails; returns the code, err gets the message. */
static ringcc_result_t wait_fail(void *req, char *err, size_t errlen,
                                 const char *what) {
  double until = h_now_s() + WAIT_S;
  for (;;) {
    int done = 0;
    size_t b;
    uint32_t i;
    ringcc_result_t r = P.test(req, &done, &b, &i, err, errlen);
    if (r != RINGCC_SUCCESS)
      return r;
    cr_assert(!done, "%s: completed, but should have failed", what);
    cr_assert(h_now_s() < until, "%s: no failure after %.0f s", what, WAIT_S);
    usleep(1000);
  }
}

/* As the proxy does: poll() the comm's fds, report the ready ones, test. */
static ringcc_result_t wait_fail_polled(void *comm, void *req, char *err,
                                        size_t errlen, const char *what) {
  double until = h_now_s() + WAIT_S;
  for (;;) {
    int fds[8], n = P.fds(comm, fds, 8);
    struct pollfd pfd[8];
    for (int i = 0; i < n; i++)
      pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    if (n > 0 && poll(pfd, (nfds_t)n, 100) > 0)
      for (int i = 0; i < n; i++)
        if (pfd[i].revents)
          P.readable(comm, fds[i]);
    int done = 0;
    size_t b;
    uint32_t imm;
    ringcc_result_t r = P.test(req, &done, &b, &imm, err, errlen);
    if (r != RINGCC_SUCCESS)
      return r;
    cr_assert(!done, "%s: completed, but should have failed", what);
    cr_assert(h_now_s() < until, "%s: no failure after %.0f s", what, WAIT_S);
  }
}

static void *post_recv(pair_t *p, char *dst, size_t max) {
  char err[RCC_ERRLEN];
  void *req = NULL;
  cr_assert_eq(P.irecv(p->recv, dst, max, p->rmh, &req, err, sizeof err),
               RINGCC_SUCCESS, "irecv: %s", err);
  cr_assert_not_null(req);
  return req;
}

static void *post_send(pair_t *p, const char *src, size_t bytes,
                       uint32_t imm) {
  char err[RCC_ERRLEN];
  void *req = NULL;
  cr_assert_eq(P.isend(p->send, src, bytes, imm, p->smh, &req, err,
                       sizeof err), RINGCC_SUCCESS, "isend: %s", err);
  cr_assert_not_null(req);
  return req;
}

static void fill(char *p, size_t n, uint64_t tag) {
  for (size_t i = 0; i < n; i++)
    p[i] = (char)(h_mix64(tag * 0x10001 + i) & 0xff);
}

static void check_fill(const char *p, size_t n, uint64_t tag,
                       const char *what) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (char)(h_mix64(tag * 0x10001 + i) & 0xff))
      cr_assert_fail("%s: byte %zu of %zu differs", what, i, n);
}

/* One message from src (filled with tag already) to dst; checks size,
 * immediate and bytes. */
static void message_of(pair_t *p, const char *src, size_t bytes, char *dst,
                       size_t max, uint32_t imm, uint64_t tag) {
  void *rr = post_recv(p, dst, max);
  void *sr = post_send(p, src, bytes, imm);
  size_t got;
  uint32_t gimm;
  wait_req(sr, NULL, NULL, "send");
  wait_req(rr, &got, &gimm, "receive");
  cr_assert_eq(got, bytes, "size %zu arrived as %zu", bytes, got);
  cr_assert_eq(gimm, imm, "immediate 0x%x arrived as 0x%x", imm, gimm);
  check_fill(dst, bytes, tag, "message");
}

/* The same, filling src first. */
static void one_message(pair_t *p, char *src, size_t bytes, char *dst,
                        size_t max, uint32_t imm, uint64_t tag) {
  fill(src, bytes, tag);
  message_of(p, src, bytes, dst, max, imm, tag);
}

static void t_messages(void) {
  pair_t p;
  pair_open(&p);
  static const size_t sizes[] = {0, 1, 7, 64, 4095, 4096, 4097, 65537,
                                 FIFO_BYTES};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    memset(p.rfifo, 0x5a, FIFO_BYTES);
    one_message(&p, p.sfifo, n, p.rfifo, FIFO_BYTES, 0xc0de0000u + (uint32_t)k,
                k + 1);
    for (size_t i = n; i < FIFO_BYTES && i < n + 4096; i++)
      cr_assert_eq(p.rfifo[i], 0x5a, "size %zu: byte %zu past the message "
                   "was written", n, i);
  }
  pair_close(&p);
}

/* Messages through NSLOT slots, up to NSLOT of them in flight each way, as
 * the proxy posts them; sizes vary, immediates number them. */
static void t_stream(int nmsg) {
  pair_t p;
  pair_open(&p);
  void *rreq[NSLOT], *sreq[NSLOT];
  int rposted = 0, rdone = 0, sposted = 0, sdone = 0;
  double until = h_now_s() + 60;
  while (rdone < nmsg) {
    while (rposted < nmsg && rposted - rdone < NSLOT) {
      rreq[rposted % NSLOT] = post_recv(&p, p.rfifo + (rposted % NSLOT) * SLOT,
                                        SLOT);
      rposted++;
    }
    while (sposted < nmsg && sposted - sdone < NSLOT) {
      size_t bytes = (size_t)(h_mix64((uint64_t)sposted) % (SLOT + 1));
      char *s = p.sfifo + (sposted % NSLOT) * SLOT;
      fill(s, bytes, (uint64_t)sposted);
      sreq[sposted % NSLOT] = post_send(&p, s, bytes, (uint32_t)sposted);
      sposted++;
    }
    char err[RCC_ERRLEN];
    int done = 0;
    size_t b;
    uint32_t imm;
    if (sdone < sposted) {
      cr_assert_eq(P.test(sreq[sdone % NSLOT], &done, &b, &imm, err,
                          sizeof err), RINGCC_SUCCESS, "send: %s", err);
      sdone += done;
    }
    done = 0;
    cr_assert_eq(P.test(rreq[rdone % NSLOT], &done, &b, &imm, err,
                        sizeof err), RINGCC_SUCCESS, "receive: %s", err);
    if (done) {
      size_t want = (size_t)(h_mix64((uint64_t)rdone) % (SLOT + 1));
      cr_assert_eq(imm, (uint32_t)rdone, "message %d arrived as %u", rdone,
                   imm);
      cr_assert_eq(b, want, "message %d: %zu bytes, expected %zu", rdone, b,
                   want);
      check_fill(p.rfifo + (rdone % NSLOT) * SLOT, b, (uint64_t)rdone,
                 "stream");
      rdone++;
    }
    cr_assert(h_now_s() < until, "stream: %d of %d messages after 60 s",
              rdone, nmsg);
  }
  while (sdone < sposted)
    wait_req(sreq[sdone++ % NSLOT], NULL, NULL, "send");
  pair_close(&p);
}

/* Sends from memory outside the FIFO: small ones through the bounce
 * buffers, large ones registered through the cache, reused. */
static void t_zero_copy_send(void) {
  pair_t p;
  struct rcc_ib_cache_stats a, b;
  pair_open(&p);
  char *small = malloc(100), *large = malloc(4 << 20);
  cr_assert(small && large);
  one_message(&p, small, 100, p.rfifo, FIFO_BYTES, 1, 11);
  /* Pieces of one buffer written before (as a collective's input is): no
   * page is faulted in between, so the registration stays trusted. */
  for (int i = 0; i < 10; i++)
    fill(large + (size_t)i * SLOT, SLOT, 100 + (uint64_t)i);
  rcc_net_ib_cache_stats(&a);
  for (int i = 0; i < 10; i++)
    message_of(&p, large + (size_t)i * SLOT, SLOT, p.rfifo, FIFO_BYTES,
               (uint32_t)i, 100 + (uint64_t)i);
  rcc_net_ib_cache_stats(&b);
  cr_assert_geq(b.misses - a.misses, 1, "the first large send registers");
  cr_assert_geq(b.hits - a.hits, 5, "later ones reuse it (hits %llu, misses "
                "%llu, stale %llu)", (unsigned long long)(b.hits - a.hits),
                (unsigned long long)(b.misses - a.misses),
                (unsigned long long)(b.stale - a.stale));
  free(small);
  free(large);
  pair_close(&p);
}

/* Receives redirected into the user's buffer before their CTS went out. */
static void t_redirect(void) {
  pair_t p;
  pair_open(&p);
  char *user = malloc(SLOT), *tiny = malloc(1000);
  void *rreq[NSLOT], *sreq[NSLOT];
  cr_assert(user && tiny);
  memset(user, 0x33, SLOT);
  memset(tiny, 0x44, 1000);
  for (int k = 0; k < NSLOT; k++)
    rreq[k] = post_recv(&p, p.rfifo + k * SLOT, SLOT);
  cr_assert_eq(P.redirect(rreq[0], user, SLOT, 0), -1,
               "a granted receive cannot move");
  cr_assert_eq(P.redirect(rreq[6], user, SLOT, 0), 0,
               "a receive not yet granted can");
  cr_assert_eq(P.redirect(rreq[7], tiny, 1000, 0), 0);
  for (int k = 0; k < NSLOT; k++) {
    char *s = p.sfifo + k * SLOT;
    size_t bytes = k == 7 ? 2000 : SLOT;
    fill(s, bytes, 200 + (uint64_t)k);
    sreq[k] = post_send(&p, s, bytes, (uint32_t)k);
  }
  for (int k = 0; k < NSLOT; k++) {
    size_t got;
    uint32_t imm;
    wait_req(sreq[k], NULL, NULL, "send");
    wait_req(rreq[k], &got, &imm, "receive");
    cr_assert_eq(imm, (uint32_t)k);
    const char *where = k == 6 ? user : p.rfifo + k * SLOT;
    check_fill(where, got, 200 + (uint64_t)k, "redirected stream");
  }
  for (int i = 0; i < 1000; i++)
    cr_assert_eq(tiny[i], 0x44, "a message longer than the buffer it was "
                 "redirected to lands in its slot");
  struct rcc_ib_cache_stats st;
  rcc_net_ib_cache_stats(&st);
  cr_assert_eq(st.landed, 2);
  free(user);
  free(tiny);
  pair_close(&p);
}

/* RINGCC_IB_REG_CACHE_MB=0: a registration lasts as long as its send. */
static void t_no_cache(void) {
  pair_t p;
  struct rcc_ib_cache_stats st;
  pair_open(&p);
  char *buf = malloc(1 << 20);
  cr_assert_not_null(buf);
  for (int i = 0; i < 3; i++)
    one_message(&p, buf, SLOT, p.rfifo, FIFO_BYTES, (uint32_t)i,
                350 + (uint64_t)i);
  rcc_net_ib_cache_stats(&st);
  cr_assert(st.misses == 3 && st.hits == 0 && st.entries == 0,
            "misses %llu, hits %llu, %llu left registered",
            (unsigned long long)st.misses, (unsigned long long)st.hits,
            (unsigned long long)st.entries);
  free(buf);
  pair_close(&p);
}

/* Registrations beyond RINGCC_IB_REG_CACHE_MB (4 here) leave once unused.
 * Each message sits at the start of a 2 MiB-aligned window (net_ib/ib.h's
 * REG_WINDOW) that its mapping covers whole, so every registration is that
 * window, whatever addresses mmap chose (a message near a mapping's edge
 * registers less, and more of them would fit under the cap). */
#define CACHE_WINDOW ((size_t)2 << 20)
static void t_cache_eviction(void) {
  pair_t p;
  struct rcc_ib_cache_stats st;
  pair_open(&p);
  char *buf[6];
  for (int i = 0; i < 6; i++) {
    buf[i] = mmap(NULL, 2 * CACHE_WINDOW, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(buf[i], MAP_FAILED);
  }
  for (int i = 0; i < 6; i++) {
    uintptr_t at = ((uintptr_t)buf[i] + CACHE_WINDOW - 1) &
                   ~(uintptr_t)(CACHE_WINDOW - 1);
    one_message(&p, (char *)at, SLOT, p.rfifo, FIFO_BYTES, (uint32_t)i,
                300 + (uint64_t)i);
  }
  for (int i = 0; i < 6; i++)
    munmap(buf[i], 2 * CACHE_WINDOW);
  rcc_net_ib_cache_stats(&st);
  fprintf(stderr, "cache_eviction: hits %llu, misses %llu, stale %llu, "
          "evictions %llu, entries %llu, %llu bytes\n",
          (unsigned long long)st.hits, (unsigned long long)st.misses,
          (unsigned long long)st.stale, (unsigned long long)st.evictions,
          (unsigned long long)st.entries, (unsigned long long)st.bytes);
  cr_assert_geq(st.evictions + st.stale, 4, "evictions %llu, stale %llu",
                (unsigned long long)st.evictions,
                (unsigned long long)st.stale);
  cr_assert_leq(st.entries, 2, "%llu registrations left",
                (unsigned long long)st.entries);
  pair_close(&p);
  rcc_net_ib_cache_stats(&st);
  cr_assert_eq(st.entries, 0, "the last connection closed: nothing stays "
               "registered");
}

/* Memory freed and allocated again at the same address holds new pages: a
 * send from it must carry the new bytes, not what the old registration
 * pinned. */
static void t_freed_memory(void) {
  pair_t p;
  pair_open(&p);
  size_t big = 8 << 20;
  char *a = mmap(NULL, big, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(a, MAP_FAILED);
  one_message(&p, a + SLOT, SLOT, p.rfifo, FIFO_BYTES, 1, 401);
  uintptr_t old = (uintptr_t)a;
  munmap(a, big);
  char *b = mmap(NULL, big, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(b, MAP_FAILED);
  one_message(&p, b + SLOT, SLOT, p.rfifo, FIFO_BYTES, 2, 402);
  struct rcc_ib_cache_stats st;
  rcc_net_ib_cache_stats(&st);
  fprintf(stderr, "freed_memory: %s address; hits %llu, misses %llu, stale "
          "%llu\n", (uintptr_t)b == old ? "same" : "another",
          (unsigned long long)st.hits, (unsigned long long)st.misses,
          (unsigned long long)st.stale);
  if ((uintptr_t)b == old)
    cr_assert_geq(st.stale, 1, "the old registration was not trusted");
  munmap(b, big);
  pair_close(&p);
}

/* Receives into memory that is flushed (as device memory is). */
static void t_flush(void) {
  pair_t p;
  pair_open(&p);
  rcc_net_ib_force_flush(p.rmh);
  uint64_t before = rcc_net_ib_flushes();
  for (int i = 0; i < 5; i++)
    one_message(&p, p.sfifo, 1000 + (size_t)i, p.rfifo, FIFO_BYTES,
                (uint32_t)i, 500 + (uint64_t)i);
  one_message(&p, p.sfifo, 0, p.rfifo, FIFO_BYTES, 9, 509);
  cr_assert_eq(rcc_net_ib_flushes() - before, 5, "one flush per non-empty "
               "receive");
  pair_close(&p);
}

/* The sender leaves cleanly: a receive still waiting fails, naming why. */
static void t_sender_closes(void) {
  pair_t p;
  char err[RCC_ERRLEN];
  pair_open(&p);
  one_message(&p, p.sfifo, 10, p.rfifo, FIFO_BYTES, 1, 601);
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  P.dereg_mr(p.send, p.smh);
  P.close_send(p.send);
  p.send = p.smh = NULL;
  P.readable(p.recv, -1); /* this test reports readiness, as the proxy does */
  cr_assert_eq(wait_fail_polled(p.recv, rr, err, sizeof err, "receive"),
               RINGCC_ERR_PEER_FAILED);
  const char *pre = "NET/IB: the connection from ";
  const char *post = " ended (closed cleanly) with 1 message still to come: "
                     "the peer process closed the connection";
  cr_assert(strncmp(err, pre, strlen(pre)) == 0 &&
                strlen(err) > strlen(post) &&
                strcmp(err + strlen(err) - strlen(post), post) == 0,
            "%s", err);
  pair_close(&p);
}

/* The receiver leaves cleanly: a zero-byte send to it completes (nothing
 * listens), a message fails. */
static void t_receiver_closes(void) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  pair_open(&p);
  one_message(&p, p.sfifo, 10, p.rfifo, FIFO_BYTES, 1, 701);
  P.dereg_mr(p.recv, p.rmh);
  P.close_recv(p.recv);
  p.recv = p.rmh = NULL;
  usleep(100000);
  void *bye = post_send(&p, p.sfifo, 0, 0x80000000u);
  wait_req(bye, NULL, NULL, "a goodbye to a receiver that left");
  void *sr = post_send(&p, p.sfifo, 100, 2);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_PEER_FAILED);
  snprintf(want, sizeof want, "NET/IB: %s closed its receiving end (its "
           "communicator was destroyed?) with 1 message of this rank not "
           "taken", p.addr);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

/* A stranger on the listener is dropped; the real connection comes in. */
static void t_stranger(void) {
  pair_t p;
  char err[RCC_ERRLEN];
  pair_listen(&p);
  struct sockaddr_storage a;
  cr_assert_eq(rcc_socket_parse_host_port(p.addr, &a, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  int fd;
  cr_assert_eq(rcc_socket_connect(&a, rcc_now_ns() + 5000000000LL, &fd, err,
                                  sizeof err), RINGCC_SUCCESS, "%s", err);
  char junk[300];
  memset(junk, 'x', sizeof junk);
  cr_assert_eq(rcc_socket_send_all(fd, junk, sizeof junk,
                                   rcc_now_ns() + 5000000000LL, err,
                                   sizeof err), RINGCC_SUCCESS, "%s", err);
  pair_connect(&p);
  pair_fifos(&p);
  one_message(&p, p.sfifo, 123, p.rfifo, FIFO_BYTES, 7, 801);
  close(fd);
  pair_close(&p);
}

/* Offers that do not prove the key are dropped as soon as the accepting
 * listener has read them, before any queue pair is made for them: one made
 * with another key, one made for another listener (its nonce in the
 * handle), and a copy of an offer this listener accepted already (a
 * replay). Each stranger's side channel ends; the real connection still
 * comes in. */
static void t_unproven_offers(void) {
  pair_t p, other;
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "a stranger's hello";
  uint8_t got[RCC_NET_HELLO_BYTES], mixed[RCC_NET_HANDLE_BYTES];
  int64_t dl = rcc_now_ns() + (int64_t)(WAIT_S * 1e9);
  void *wrong_key, *wrong_listener;
  pair_listen(&other);
  pair_listen(&p);
  memcpy(mixed, p.handle, sizeof mixed); /* p's address, other's nonce */
  memcpy(mixed + 28, other.handle + 28, 16);
  cr_assert_eq(P.connect(OTHER_KEY, p.handle, hello, &wrong_key, dl, err,
                         sizeof err), RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(P.connect(KEY, mixed, hello, &wrong_listener, dl, err,
                         sizeof err), RINGCC_SUCCESS, "%s", err);
  void *none = NULL;
  ringcc_result_t r = P.accept(p.listen, got, &none,
                               rcc_now_ns() + 1500000000LL, err, sizeof err);
  if (none != NULL)
    P.close_recv(none);
  cr_assert_eq(r, RINGCC_ERR_TIMEOUT, "a stranger's offer was accepted: %s",
               err);
  double t0 = h_now_s();
  int64_t soon = rcc_now_ns() + 3000000000LL;
  cr_assert_eq(P.ready(wrong_key, soon, err, sizeof err),
               RINGCC_ERR_PEER_FAILED, "another key's offer: %s", err);
  cr_assert(strstr(err, "ended during setup") != NULL, "%s", err);
  cr_assert_eq(P.ready(wrong_listener, soon, err, sizeof err),
               RINGCC_ERR_PEER_FAILED, "another listener's offer: %s", err);
  cr_assert(h_now_s() - t0 < 1.5, "the strangers were dropped after %.2f s",
            h_now_s() - t0);
  P.close_send(wrong_key);
  P.close_send(wrong_listener);
  pair_connect(&p); /* the real one still comes in */

  /* A replay: an offer for p caught on the way (sent to a socket of ours
   * instead), then given to p twice. */
  struct sockaddr_storage a, bound;
  int cap_fd, fd = -1, copy[2];
  uint8_t offer[256]; /* an offer, its proof at the end (net_ib/listen.c) */
  void *caught, *first;
  cr_assert_eq(rcc_socket_parse_host_port(p.addr, &a, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  rcc_socket_addr_set_port(&a, 0);
  cr_assert_eq(rcc_socket_listen(&a, &cap_fd, &bound, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  uint8_t via[RCC_NET_HANDLE_BYTES];
  uint16_t port = htons((uint16_t)rcc_socket_addr_port(&bound));
  memcpy(via, p.handle, sizeof via);
  memcpy(via + 6, &port, 2);
  cr_assert_eq(P.connect(KEY, via, hello, &caught, dl, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  while (fd < 0 && rcc_now_ns() < dl) {
    cr_assert_eq(rcc_socket_accept(cap_fd, &fd, NULL, err, sizeof err),
                 RINGCC_SUCCESS, "%s", err);
    if (fd < 0)
      h_sleep_ms(10);
  }
  cr_assert(fd >= 0, "the offer never came to the catching socket");
  cr_assert_eq(rcc_socket_recv_all(fd, offer, sizeof offer, dl, err,
                                   sizeof err), RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(rcc_socket_parse_host_port(p.addr, &a, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(rcc_socket_connect(&a, dl, &copy[i], err, sizeof err),
                 RINGCC_SUCCESS, "%s", err);
    cr_assert_eq(rcc_socket_send_all(copy[i], offer, sizeof offer, dl, err,
                                     sizeof err), RINGCC_SUCCESS, "%s", err);
    if (i == 1)
      break;
    cr_assert_eq(P.accept(p.listen, got, &first, dl, err, sizeof err),
                 RINGCC_SUCCESS, "the first copy: %s", err);
    cr_assert_eq(memcmp(got, hello, sizeof got), 0);
  }
  void *replayed = NULL;
  r = P.accept(p.listen, got, &replayed,
               rcc_now_ns() + 1500000000LL, err, sizeof err);
  if (replayed != NULL)
    P.close_recv(replayed);
  cr_assert_eq(r, RINGCC_ERR_TIMEOUT, "the replay: %s", err);
  char byte;
  struct pollfd pfd = {.fd = copy[1], .events = POLLIN};
  cr_assert_eq(poll(&pfd, 1, 0), 1, "the replay's socket is still open");
  cr_assert_eq(recv(copy[1], &byte, 1, MSG_DONTWAIT), 0,
               "the replay's socket was not closed");
  P.close_recv(first);
  P.close_send(caught);
  close(copy[0]), close(copy[1]), close(fd), close(cap_fd);
  pair_close(&p);
  pair_close(&other);
}

/* A child forked after the connections were made closes its copies (as
 * ringcc_comm_destroy does in a child): the parent's connection does not
 * notice, and its messages still arrive exactly. */
static void t_forked_child_closes(void) {
  pair_t p;
  pair_open(&p);
  one_message(&p, p.sfifo, 10, p.rfifo, FIFO_BYTES, 1, 901);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    P.dereg_mr(p.send, p.smh);
    P.dereg_mr(p.recv, p.rmh);
    P.close_send(p.send);
    P.close_recv(p.recv);
    P.close_listen(p.listen);
    _exit(0);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child's close ended with status 0x%x", status);
  /* A receive waits half a second for nothing (test() looks at the side
   * channel every 50 ms): it must not hear a CLOSE from the child. */
  char err[RCC_ERRLEN];
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  for (double until = h_now_s() + 0.5; h_now_s() < until;) {
    int done = 0;
    size_t bytes;
    uint32_t imm;
    cr_assert_eq(P.test(rr, &done, &bytes, &imm, err, sizeof err),
                 RINGCC_SUCCESS, "the receive after the child's close: %s",
                 err);
    cr_assert(!done, "a receive completed with nothing sent");
    usleep(10000);
  }
  fill(p.sfifo, 1000, 902);
  void *sr = post_send(&p, p.sfifo, 1000, 2);
  size_t got;
  uint32_t imm;
  wait_req(sr, NULL, NULL, "send");
  wait_req(rr, &got, &imm, "receive");
  cr_assert_eq(got, 1000);
  cr_assert_eq(imm, 2);
  check_fill(p.rfifo, 1000, 902, "message");
  one_message(&p, p.sfifo, 5000, p.rfifo, FIFO_BYTES, 3, 903);
  pair_close(&p);
}

/* Nobody accepts: the connector's setup ends at its deadline. */
static void t_setup_timeout(void) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = {0};
  pair_listen(&p);
  int64_t dl = rcc_now_ns() + 300000000LL;
  cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send, dl, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(P.ready(p.send, dl, err, sizeof err), RINGCC_ERR_TIMEOUT);
  snprintf(want, sizeof want, "NET/IB: the connection to %s did not finish "
           "its setup (no answer to the offer) before the deadline", p.addr);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

/* Each test on both devices; var=value (or NULL) is set before init. */
static void setting(const char *var, const char *value) {
  if (var)
    setenv(var, value, 1);
}

#define BOTH(name, timeout_s, var, value, body)                                \
  Test(ib_fake, name, .timeout = timeout_s) {                                  \
    use_fake(NULL);                                                            \
    setting(var, value);                                                       \
    body;                                                                      \
  }                                                                            \
  Test(ib_real, name, .timeout = timeout_s) {                                  \
    unset_ib_env();                                                            \
    setting(var, value);                                                       \
    use_real();                                                                \
    body;                                                                      \
  }

BOTH(messages, 60, NULL, NULL, t_messages())
BOTH(stream, 120, NULL, NULL, t_stream(300))
BOTH(stream_3qps, 120, "RINGCC_IB_QPS_PER_CONN", "3", t_stream(300))
BOTH(zero_copy_send, 60, NULL, NULL, t_zero_copy_send())
BOTH(redirect, 60, NULL, NULL, t_redirect())
BOTH(cache_eviction, 60, "RINGCC_IB_REG_CACHE_MB", "4", t_cache_eviction())
BOTH(no_cache, 60, "RINGCC_IB_REG_CACHE_MB", "0", t_no_cache())
BOTH(freed_memory, 60, NULL, NULL, t_freed_memory())
BOTH(flush, 60, NULL, NULL, t_flush())
BOTH(sender_closes, 60, NULL, NULL, t_sender_closes())
BOTH(receiver_closes, 60, NULL, NULL, t_receiver_closes())
BOTH(stranger, 60, NULL, NULL, t_stranger())
BOTH(unproven_offers, 60, NULL, NULL, t_unproven_offers())
BOTH(forked_child_closes, 60, NULL, NULL, t_forked_child_closes())
BOTH(setup_timeout, 60, NULL, NULL, t_setup_timeout())

/* ==== error paths on the fake device ========================================= */

TestSuite(ib_fake);

/* A raw TCP connection to the listener of p, from a stranger. */
static int stranger_connect(const pair_t *p) {
  struct sockaddr_storage a;
  char err[RCC_ERRLEN];
  int fd;
  cr_assert_eq(rcc_socket_parse_host_port(p->addr, &a, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(rcc_socket_connect(&a, rcc_now_ns() + 5000000000LL, &fd, err,
                                  sizeof err), RINGCC_SUCCESS, "%s", err);
  return fd;
}

/* Raises the open-file limit to n, or skips the test. */
static void open_files_or_skip(rlim_t n) {
  struct rlimit rl = {.rlim_cur = n, .rlim_max = n};
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
    cr_skip_test("cannot raise the open-file limit to %lu: %s",
                 (unsigned long)n, strerror(errno));
}

/* 600 strangers connect and stay silent (more than the 128 offers the
 * listener holds), then a real peer: it gets in at once, because the
 * oldest stranger goes when the listener is full, not the newcomer. */
Test(ib_fake, flood_of_strangers_then_a_real_peer, .timeout = 60) {
  enum { FLOOD = 600 };
  open_files_or_skip(4096);
  use_fake(NULL);
  pair_t p;
  char err[RCC_ERRLEN];
  uint8_t got[RCC_NET_HELLO_BYTES];
  int *fds = malloc(FLOOD * sizeof(int));
  cr_assert_not_null(fds);
  pair_listen(&p);
  for (int i = 0; i < FLOOD; i++) {
    fds[i] = stranger_connect(&p);
    if (i % 100 == 99) { /* the listener takes them as they come */
      void *none = NULL;
      (void)P.accept(p.listen, got, &none, rcc_now_ns() + 20000000LL, err,
                     sizeof err);
      cr_assert_null(none);
    }
  }
  double t0 = h_now_s();
  pair_connect(&p);
  double took = h_now_s() - t0;
  cr_expect_lt(took, 2.0, "the real peer needed %.2f s", took);
  int open_fds = 0;
  for (int i = 0; i < FLOOD; i++) {
    char c;
    ssize_t n = recv(fds[i], &c, 1, MSG_DONTWAIT);
    open_fds += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    close(fds[i]);
  }
  printf("flood: a real peer got in after %.3f s; %d of %d strangers' "
         "connections still held by the listener\n", took, open_fds, FLOOD);
  cr_expect_leq(open_fds, 128, "the listener holds %d strangers", open_fds);
  free(fds);
  pair_close(&p);
}

/* Issue 32, point 4, on the verbs plugin: a real peer's offer waits in the
 * kernel's queue among hundreds of strangers (silent, garbage, connect and
 * close), before it and after it, while the listener does not run accept()
 * (its rank busy elsewhere, or stopped): the listener gate reads each
 * connection when it takes it, so the strangers after the offer cannot push
 * it out; the connection comes up and carries a message exactly. */
Test(ib_fake, real_offer_amid_strangers_while_the_listener_is_busy,
     .timeout = 60) {
  enum { BEFORE = 60, AFTER = 450 };
  static const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  open_files_or_skip(4096);
  use_fake(NULL);
  pair_t p;
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "the real peer amid strangers";
  uint8_t got[RCC_NET_HELLO_BYTES];
  int *fds = malloc((BEFORE + AFTER) * sizeof(int));
  cr_assert_not_null(fds);
  pair_listen(&p);
  int64_t dl = rcc_now_ns() + (int64_t)(WAIT_S * 1e9);
  for (int i = 0; i < BEFORE + AFTER; i++) {
    if (i == BEFORE)
      cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send, dl, err,
                             sizeof err), RINGCC_SUCCESS, "connect: %s", err);
    fds[i] = stranger_connect(&p);
    if (i % 3 == 1)
      (void)send(fds[i], junk, sizeof junk, MSG_NOSIGNAL);
    if (i % 3 == 2) {
      close(fds[i]);
      fds[i] = -1;
    }
  }
  cr_assert_eq(P.accept(p.listen, got, &p.recv, dl, err, sizeof err),
               RINGCC_SUCCESS, "accept: %s", err);
  cr_assert_eq(memcmp(hello, got, sizeof hello), 0, "another hello came");
  cr_assert_eq(P.ready(p.send, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (send): %s", err);
  cr_assert_eq(P.ready(p.recv, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (receive): %s", err);
  pair_fifos(&p);
  one_message(&p, p.sfifo, 65537, p.rfifo, FIFO_BYTES, 5, 905);
  for (int i = 0; i < BEFORE + AFTER; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
  pair_close(&p);
}

/* A listener whose process has too few descriptors to hold 200 silent
 * strangers backs off, makes room, and still takes the real peer: accept()
 * fails only at its deadline, never with "Too many open files". */
Test(ib_fake, out_of_descriptors_backs_off, .timeout = 60) {
  use_fake(NULL);
  pair_t p;
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "a hello from the connector";
  pair_listen(&p);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) { /* the listener's process, with few descriptors */
    struct rlimit rl = {.rlim_cur = 64, .rlim_max = 64};
    uint8_t got[RCC_NET_HELLO_BYTES];
    void *rc = NULL;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      _exit(3);
    ringcc_result_t r = P.accept(p.listen, got, &rc,
                                 rcc_now_ns() + 15000000000LL, err,
                                 sizeof err);
    if (r != RINGCC_SUCCESS) {
      fprintf(stderr, "accept: %s\n", err);
      _exit(1);
    }
    _exit(memcmp(got, hello, sizeof got) == 0 ? 0 : 2);
  }
  int fds[200];
  for (int i = 0; i < 200; i++) /* silent strangers: far more than 64 */
    fds[i] = stranger_connect(&p);
  usleep(300000);
  cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send,
                         rcc_now_ns() + 15000000000LL, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the listener's process ended with status %d (1: accept failed, "
            "see above)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  for (int i = 0; i < 200; i++)
    close(fds[i]);
  pair_close(&p);
}

Test(ib_fake, retry_exceeded) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  use_fake("retry_exceeded");
  pair_open(&p);
  one_message(&p, p.sfifo, 100, p.rfifo, FIFO_BYTES, 1, 901); /* < 128 B */
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  void *sr = post_send(&p, p.sfifo, 4096, 2);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_NETWORK);
  snprintf(want, sizeof want,
           "NET/IB: RDMA write of a message to %s on fake0:1 failed: "
           "transport retry counter exceeded (IBV_WC_RETRY_EXC_ERR, status "
           "12, vendor error 0x81): the peer's NIC did not acknowledge within "
           "7 retries of 4295.0 ms: the peer process may have died, or the "
           "route between the hosts is broken (link, cable, switch)", p.addr);
  cr_assert_str_eq(err, want);
  (void)rr;
  pair_close(&p);
}

Test(ib_fake, retry_exceeded_peer_gone) {
  pair_t p;
  char err[RCC_ERRLEN];
  use_fake("retry_exceeded");
  setenv("RINGCC_IB_TIMEOUT", "14", 1);
  setenv("RINGCC_IB_RETRY_CNT", "3", 1);
  pair_open(&p);
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  (void)rr;
  /* The receiving process is gone: its side channel ends first. */
  P.close_recv(p.recv);
  p.recv = NULL;
  P.dereg_mr(NULL, p.rmh);
  p.rmh = NULL;
  usleep(100000);
  void *sr = post_send(&p, p.sfifo, 4096, 2);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"),
               RINGCC_ERR_PEER_FAILED, "%s", err);
  const char *tail = "the peer's NIC did not acknowledge within 3 retries of "
                     "67.1 ms: the peer process may have died, or the route "
                     "between the hosts is broken (link, cable, switch); its "
                     "side channel has ended too: the peer is gone";
  cr_assert(strstr(err, tail) != NULL, "%s", err);
  pair_close(&p);
}

Test(ib_fake, memlock_fifo) {
  pair_t p;
  char err[RCC_ERRLEN];
  void *mh;
  use_fake("memlock");
  struct rlimit rl = {65536, 65536};
  pair_listen(&p);
  pair_connect(&p);
  cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
  char *fifo;
  cr_assert_eq(posix_memalign((void **)&fifo, 4096, 4 << 20), 0);
  cr_assert_eq(P.reg_mr(p.recv, fifo, 4 << 20, &mh, err, sizeof err),
               RINGCC_ERR_SYSTEM);
  cr_assert_str_eq(err, "NET/IB: registering 4194304 bytes (4.0 MiB) of a "
                        "FIFO with fake0 failed: Cannot allocate memory; the "
                        "locked-memory limit of this process is 65536 bytes "
                        "(64.0 KiB, ulimit -l 64): raise it (ulimit -l "
                        "unlimited, memlock in /etc/security/limits.conf, or "
                        "docker run --ulimit memlock=-1)");
  free(fifo);
  pair_close(&p);
}

Test(ib_fake, memlock_user_buffer) {
  pair_t p;
  char err[RCC_ERRLEN];
  use_fake(NULL);
  pair_open(&p);
  setenv("FAKE_IBV_FAULT", "memlock", 1);
  struct rlimit rl = {1 << 20, 1 << 20};
  cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
  char *user = malloc(2 << 20);
  cr_assert_not_null(user);
  void *req = NULL;
  cr_assert_eq(P.isend(p.send, user + 4096, SLOT, 1, p.smh, &req, err,
                       sizeof err), RINGCC_ERR_SYSTEM);
  cr_assert_str_eq(err, "NET/IB: registering 65536 bytes (64.0 KiB) of a "
                        "user buffer with fake0 failed: Cannot allocate "
                        "memory; the locked-memory limit of this process is "
                        "1048576 bytes (1.0 MiB, ulimit -l 1024): raise it "
                        "(ulimit -l unlimited, memlock in "
                        "/etc/security/limits.conf, or docker run --ulimit "
                        "memlock=-1)");
  free(user);
  pair_close(&p);
}

static void rtr_timeout(const char *hint) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = {0}, got[RCC_NET_HELLO_BYTES];
  pair_listen(&p);
  int64_t dl = rcc_now_ns() + 10000000000LL;
  cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send, dl, err, sizeof err),
               RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(P.accept(p.listen, got, &p.recv, dl, err, sizeof err),
               RINGCC_ERR_NETWORK);
  char pre[100]; /* the fake's second queue pair in this process */
  snprintf(pre, sizeof pre, "NET/IB: moving queue pair 0x%x of the "
           "connection from ", 0x101u + ((unsigned)(getpid() % 4096) << 12));
  char post[600];
  snprintf(post, sizeof post, " on fake0:1 to RTR (ready to receive) failed: "
           "Connection timed out%s", hint);
  cr_assert(strncmp(err, pre, strlen(pre)) == 0 &&
                strcmp(err + strlen(err) - strlen(post), post) == 0,
            "%s", err);
  /* The connector hears that setup ended on the other side. */
  cr_assert_eq(P.ready(p.send, dl, err, sizeof err), RINGCC_ERR_PEER_FAILED);
  snprintf(want, sizeof want, "NET/IB: the connection to %s ended during "
           "setup (end of stream): the peer failed to set up its side or "
           "exited", p.addr);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

Test(ib_fake, modify_qp_timeout) {
  use_fake("rtr_timeout");
  rtr_timeout(" (InfiniBand: the peer's LID is 1; is a subnet manager "
              "running?)");
}

Test(ib_fake, modify_qp_timeout_roce) {
  use_fake("rtr_timeout");
  setenv("FAKE_IBV_LINK", "eth", 1);
  rtr_timeout(" (RoCE: the peer's GID ::ffff:10.0.0.1 cannot be reached from "
              "GID index 3 (::ffff:10.0.0.1) of this port: check "
              "RINGCC_IB_GID_INDEX on both hosts and that their RoCE "
              "interfaces are up and route to each other)");
}

Test(ib_fake, fatal_async_event) {
  pair_t p;
  char err[RCC_ERRLEN];
  const char *want = "NET/IB: device fake0 reported a fatal error "
                     "(IBV_EVENT_DEVICE_FATAL, local catastrophic error): "
                     "every connection through it has failed; the NIC needs "
                     "a reset or its driver reloaded";
  use_fake("fatal");
  pair_open(&p);
  void *rr = post_recv(&p, p.rfifo, FIFO_BYTES);
  void *sr = post_send(&p, p.sfifo, 4096, 1);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_NETWORK);
  cr_assert_str_eq(err, want);
  cr_assert_eq(wait_fail(rr, err, sizeof err, "receive"), RINGCC_ERR_NETWORK);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

Test(ib_fake, qp_async_event) {
  pair_t p;
  char err[RCC_ERRLEN], want[RCC_ERRLEN];
  use_fake("qp_fatal");
  pair_open(&p);
  post_recv(&p, p.rfifo, FIFO_BYTES);
  void *sr = post_send(&p, p.sfifo, 4096, 1);
  /* Readiness reported as the proxy does: the event fd wakes it. */
  int fds[8], n = P.fds(p.send, fds, 8);
  for (int i = 0; i < n; i++)
    P.readable(p.send, fds[i]);
  cr_assert_eq(wait_fail(sr, err, sizeof err, "send"), RINGCC_ERR_NETWORK);
  snprintf(want, sizeof want, "NET/IB: a queue pair of the connection to %s "
           "on fake0:1 reported IBV_EVENT_QP_FATAL (queue pair in error "
           "state)", p.addr);
  cr_assert_str_eq(err, want);
  pair_close(&p);
}

static ringcc_result_t init_err(char *err, size_t len) {
  return P.init(NULL, err, len);
}

Test(ib_fake, port_down) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("FAKE_IBV_PORT_STATE", "down", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: no ACTIVE port to use; found: fake0:1 "
                        "(InfiniBand, port DOWN)");
}

Test(ib_fake, no_device) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("FAKE_IBV_DEVICES", "", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: no RDMA device (no driver loaded, or no "
                        "/dev/infiniband in this container?)");
}

Test(ib_fake, no_library) {
  char err[RCC_ERRLEN];
  unset_ib_env();
  setenv("RINGCC_IBVERBS_LIB", "/nonexistent/libibverbs.so.1", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: cannot load /nonexistent/libibverbs.so.1 "
                        "(RINGCC_IBVERBS_LIB): /nonexistent/libibverbs.so.1: "
                        "cannot open shared object file: No such file or "
                        "directory");
}

Test(ib_fake, bad_setting) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("RINGCC_IB_TIMEOUT", "40", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: RINGCC_IB_TIMEOUT=\"40\" is not a number in "
                        "1..31");
}

/* Integers are decimal digits only, as every variable's (env.h): no sign,
 * no spaces. */
Test(ib_fake, bad_setting_not_decimal) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("RINGCC_IB_TIMEOUT", "+20", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: RINGCC_IB_TIMEOUT=\"+20\" is not a number in "
                        "1..31");
}

Test(ib_fake, hca_matches_nothing) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("RINGCC_IB_HCA", "mlx5", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_UNSUPPORTED);
  cr_assert_str_eq(err, "NET/IB: no ACTIVE port to use with "
                        "RINGCC_IB_HCA=mlx5; found: fake0:1 (left out by "
                        "RINGCC_IB_HCA)");
}

static void choose(const char *devices, const char *spec, int local_rank,
                   int local_size, const char *want) {
  use_fake(NULL);
  setenv("FAKE_IBV_DEVICES", devices, 1);
  if (spec)
    setenv("RINGCC_IB_HCA", spec, 1);
  struct rcc_net_locality where = {local_rank, local_size, ""};
  P.locate(&where);
  init_ok();
  cr_assert_str_eq(P.device(), want);
}

Test(ib_fake, hca_exact) { choose("mlx5_0,mlx5_1,mlx5_11", "=mlx5_1", 0, 1, "mlx5_1:1"); }
Test(ib_fake, hca_prefix_spread) { choose("mlx5_0,mlx5_1,mlx5_11", "mlx5_1", 1, 2, "mlx5_11:1"); }
Test(ib_fake, hca_exclude) { choose("mlx5_0,mlx5_1", "^mlx5_0", 0, 4, "mlx5_1:1"); }
Test(ib_fake, spread_local_ranks) { choose("mlx5_0,mlx5_1", NULL, 3, 4, "mlx5_1:1"); }

/* Runs init with RINGCC_DEBUG=INFO and returns what it logged. */
static char *init_log(ringcc_result_t *r, char *err, size_t errlen) {
  static char text[8192];
  char path[] = "/tmp/test_net_ib_XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  cr_assert(fd >= 0 && saved >= 0);
  unlink(path);
  setenv("RINGCC_DEBUG", "INFO", 1);
  fflush(stderr);
  dup2(fd, 2);
  *r = P.init(NULL, err, errlen);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  close(fd);
  text[n > 0 ? n : 0] = '\0';
  return text;
}

Test(ib_fake, roce_gid_logged) {
  char err[RCC_ERRLEN];
  ringcc_result_t r;
  use_fake(NULL);
  setenv("FAKE_IBV_LINK", "eth", 1);
  char *log = init_log(&r, err, sizeof err);
  cr_assert_eq(r, RINGCC_SUCCESS, "%s", err);
  cr_assert(strstr(log, "NET/IB: using fake0:1 (RoCE), the only one; LID 0, "
                        "MTU 2048; GID index 3 (::ffff:10.0.0.1, RoCE v2, "
                        "IPv4-mapped, chosen automatically)") != NULL,
            "%s", log);
}

Test(ib_fake, roce_gid_forced_empty) {
  char err[RCC_ERRLEN];
  use_fake(NULL);
  setenv("FAKE_IBV_LINK", "eth", 1);
  setenv("RINGCC_IB_GID_INDEX", "6", 1);
  cr_assert_eq(init_err(err, sizeof err), RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(err, "NET/IB: fake0:1: RINGCC_IB_GID_INDEX=6 is not a GID "
                        "of this port; its GIDs: 0 (fe80::1, RoCE v1), 1 "
                        "(fe80::1, RoCE v2), 2 (::ffff:10.0.0.1, RoCE v1), 3 "
                        "(::ffff:10.0.0.1, RoCE v2)");
}

Test(ib_fake, gdr_without_gpu) {
  char why[300];
  use_fake(NULL);
  init_ok();
  cr_assert_eq(P.gdr("0000:17:00.0", why, sizeof why), 0);
  cr_assert_str_eq(why, "fake0:1 is SYS from GPU 0000:17:00.0 (it has no "
                        "PCI path: a software NIC?), beyond "
                        "RINGCC_NET_GDR_LEVEL PXB");
}

Test(ib_fake, gdr_disabled) {
  char why[300];
  use_fake(NULL);
  setenv("RINGCC_NET_GDR_DISABLE", "1", 1);
  init_ok();
  cr_assert_eq(P.gdr("0000:17:00.0", why, sizeof why), 0);
  cr_assert_str_eq(why, "RINGCC_NET_GDR_DISABLE=1");
}

/* ==== collectives over NET/IB on a real device ================================ */

/* An ACTIVE port in sysfs (without opening the device: the ranks are forked
 * and must each open it themselves). */
static bool rdma_port_active(void) {
  glob_t g;
  bool active = false;
  if (glob("/sys/class/infiniband/*/ports/*/state", 0, NULL, &g) != 0)
    return false;
  for (size_t i = 0; i < g.gl_pathc && !active; i++) {
    char buf[64] = "";
    FILE *f = fopen(g.gl_pathv[i], "r");
    if (f != NULL) {
      active = fgets(buf, sizeof buf, f) != NULL && strstr(buf, "ACTIVE");
      fclose(f);
    }
  }
  globfree(&g);
  return active;
}

static void coll_env(void) {
  if (!rdma_port_active())
    cr_skip_test("no ACTIVE RDMA port here (make ib-check runs this on "
                 "Soft-RoCE in a VM)");
  unset_ib_env();
  setenv("RINGCC_NET", "IB", 1);
  setenv("RINGCC_SHM_DISABLE", "1", 1);
}

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_REDUCE, C_ALLGATHER, C_BCAST,
       C_ALLTOALL, C_SENDRECV, C_BARRIER, C_NUM };
static const char *const coll_names[C_NUM] = {
    "allreduce", "reduce_scatter", "reduce", "allgather",
    "bcast",     "alltoall",       "sendrecv", "barrier"};
static const size_t coll_counts[] = {0, 1, 1031, 70001};
#define MAX_COUNT 70001
#define MAX_N 4

typedef struct {
  char *s, *r, *e;
} bufs_t;

static bool ok(h_ctx_t *ctx, ringcc_result_t r, const char *what) {
  return h_ok(ctx, r, what);
}

/* One call of coll, checked element by element; 0 or 1. */
static int run_case(h_ctx_t *ctx, bufs_t *b, int coll, ringcc_datatype_t dt,
                    ringcc_op_t op, size_t count) {
  ringcc_comm_t comm = ctx->comm;
  int n = ctx->nranks, me = ctx->rank;
  size_t es = h_dt_size(dt);
  uint64_t salt = h_hash3((uint64_t)coll, (uint64_t)dt * 8 + (uint64_t)op,
                          count);
  int root = (int)(salt % (uint64_t)n);
  char what[160];
  snprintf(what, sizeof what, "%s %s %s count %zu", coll_names[coll],
           h_dt_name(dt), h_op_name(op), count);
  memset(b->r, 0xee, (size_t)MAX_COUNT * MAX_N * 8);
  switch (coll) {
  case C_ALLREDUCE:
    h_fill_input(dt, op, me, 0, salt, b->s, count);
    if (!ok(ctx, ringcc_allreduce(b->s, b->r, count, dt, op, comm, NULL), what))
      return 1;
    h_fill_expected(dt, op, n, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_REDUCE_SCATTER:
    h_fill_input(dt, op, me, 0, salt, b->s, count * (size_t)n);
    if (!ok(ctx, ringcc_reduce_scatter(b->s, b->r, count, dt, op, comm, NULL),
            what))
      return 1;
    h_fill_expected(dt, op, n, (size_t)me * count, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_REDUCE:
    h_fill_input(dt, op, me, 0, salt, b->s, count);
    if (!ok(ctx, ringcc_reduce(b->s, b->r, count, dt, op, root, comm, NULL),
            what))
      return 1;
    if (me != root)
      return 0;
    h_fill_expected(dt, op, n, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_ALLGATHER:
    h_fill_pattern(dt, (uint64_t)me, 0, salt, b->s, count);
    if (!ok(ctx, ringcc_allgather(b->s, b->r, count, dt, comm, NULL), what))
      return 1;
    for (int j = 0; j < n; j++)
      h_fill_pattern(dt, (uint64_t)j, 0, salt, b->e + (size_t)j * count * es,
                     count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count * (size_t)n);
  case C_BCAST:
    if (me == root)
      h_fill_pattern(dt, (uint64_t)root, 0, salt, b->r, count);
    if (!ok(ctx, ringcc_bcast(b->r, count, dt, root, comm, NULL), what))
      return 1;
    h_fill_pattern(dt, (uint64_t)root, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  case C_ALLTOALL:
    for (int j = 0; j < n; j++) {
      h_fill_pattern(dt, (uint64_t)(me * n + j), 0, salt,
                     b->s + (size_t)j * count * es, count);
      h_fill_pattern(dt, (uint64_t)(j * n + me), 0, salt,
                     b->e + (size_t)j * count * es, count);
    }
    if (!ok(ctx, ringcc_alltoall(b->s, b->r, count, dt, comm, NULL), what))
      return 1;
    return !h_check_elems(ctx, what, dt, b->r, b->e, count * (size_t)n);
  case C_SENDRECV: {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    h_fill_pattern(dt, (uint64_t)me, 0, salt, b->s, count);
    for (int step = 0; step < 2; step++)
      if ((step == 0) == (me % 2 == 0)) {
        if (!ok(ctx, ringcc_send(b->s, count, dt, next, comm, NULL), what))
          return 1;
      } else if (!ok(ctx, ringcc_recv(b->r, count, dt, prev, comm, NULL),
                     what)) {
        return 1;
      }
    h_fill_pattern(dt, (uint64_t)prev, 0, salt, b->e, count);
    return !h_check_elems(ctx, what, dt, b->r, b->e, count);
  }
  default:
    return !ok(ctx, ringcc_barrier(comm, NULL), what);
  }
}

static int matrix_body(h_ctx_t *ctx) {
  bufs_t b;
  size_t bytes = (size_t)MAX_COUNT * MAX_N * 8;
  b.s = malloc(bytes);
  b.r = malloc(bytes);
  b.e = malloc(bytes);
  if (!b.s || !b.r || !b.e)
    return h_fail(ctx, "out of memory");
  int bad = 0, calls = 0;
  double t0 = h_now_s();
  for (int coll = 0; coll < C_NUM && !bad; coll++)
    for (int d = 0; d < RINGCC_NUM_DATATYPES && !bad; d++)
      for (int o = 0; o < RINGCC_NUM_OPS && !bad; o++) {
        int reduces = coll <= C_REDUCE;
        if ((!reduces && o > 0) || (coll == C_BARRIER && d > 0))
          continue;
        for (size_t k = 0; k < sizeof coll_counts / sizeof *coll_counts && !bad;
             k++, calls++)
          bad = run_case(ctx, &b, coll, h_all_dtypes[d], h_all_ops[o],
                         coll_counts[k]);
      }
  if (ctx->rank == 0 && !bad)
    fprintf(stderr, "ib_coll: n = %d, %d calls checked in %.1f s\n",
            ctx->nranks, calls, h_now_s() - t0);
  free(b.s);
  free(b.r);
  free(b.e);
  return bad;
}

static void matrix(int n) {
  coll_env();
  ringcc_config_t cfg = RINGCC_CONFIG_INIT;
  cfg.net_chunk_bytes = 16384; /* 70001 float32 are 17 slots */
  cfg.nslots = 4;
  h_run_opts_t o = {.nranks = n, .body = matrix_body, .config = &cfg,
                    .timeout_s = 1500, .name = "ib_coll matrix"};
  cr_assert(h_run(&o), "every collective x datatype x op over NET/IB at "
            "n = %d", n);
}

TestSuite(ib_coll);
Test(ib_coll, matrix_n2, .timeout = 1600) { matrix(2); }
Test(ib_coll, matrix_n3, .timeout = 1600) { matrix(3); }
Test(ib_coll, matrix_n4, .timeout = 1600) { matrix(4); }

/* Large calls with the default slots: sends from and receives into the
 * user's buffers, through the registration cache. */
static int zero_copy_body(h_ctx_t *ctx) {
  size_t count = 1 << 19; /* 2 MiB of float32 */
  float *s = malloc(count * 4), *r = malloc(count * 4 * MAX_N);
  float *e = malloc(count * 4 * MAX_N);
  if (!s || !r || !e)
    return h_fail(ctx, "out of memory");
  for (int it = 0; it < 4; it++) {
    uint64_t salt = 77 + (uint64_t)it;
    h_fill_input(RINGCC_FLOAT32, RINGCC_SUM, ctx->rank, 0, salt, s, count);
    if (!h_ok(ctx, ringcc_allreduce(s, r, count, RINGCC_FLOAT32, RINGCC_SUM,
                                    ctx->comm, NULL), "allreduce"))
      return 1;
    h_fill_expected(RINGCC_FLOAT32, RINGCC_SUM, ctx->nranks, 0, salt, e, count);
    if (!h_check_elems(ctx, "allreduce", RINGCC_FLOAT32, r, e, count))
      return 1;
    h_fill_pattern(RINGCC_FLOAT32, (uint64_t)ctx->rank, 0, salt, s, count);
    if (!h_ok(ctx, ringcc_allgather(s, r, count, RINGCC_FLOAT32, ctx->comm,
                                    NULL), "allgather"))
      return 1;
    for (int j = 0; j < ctx->nranks; j++)
      h_fill_pattern(RINGCC_FLOAT32, (uint64_t)j, 0, salt, e + (size_t)j * count,
                     count);
    if (!h_check_elems(ctx, "allgather", RINGCC_FLOAT32, r, e,
                       count * (size_t)ctx->nranks))
      return 1;
  }
  struct rcc_ib_cache_stats st;
  rcc_net_ib_cache_stats(&st);
  fprintf(stderr, "ib_coll zero copy: rank %d: registrations %llu made, "
          "%llu reused, %llu outdated, %llu evicted; %llu receives landed in "
          "the user's buffer\n", ctx->rank, (unsigned long long)st.misses,
          (unsigned long long)st.hits, (unsigned long long)st.stale,
          (unsigned long long)st.evictions, (unsigned long long)st.landed);
  if (st.hits == 0)
    return h_fail(ctx, "no registration of a user buffer was reused");
  if (st.landed == 0)
    return h_fail(ctx, "no receive landed in the user's buffer");
  free(s);
  free(r);
  free(e);
  return 0;
}

Test(ib_coll, zero_copy, .timeout = 600) {
  coll_env();
  setenv("RINGCC_NET_ZEROCOPY", "1", 1);
  h_run_opts_t o = {.nranks = 3, .body = zero_copy_body, .timeout_s = 500,
                    .name = "ib_coll zero copy"};
  cr_assert(h_run(&o));
}

/* ---- a rank killed with SIGKILL in the middle of a stream of calls --------- */

typedef struct {
  int code[MAX_N];
  char message[MAX_N][RCC_ERRLEN];
  double failed_at[MAX_N];
  double killed_at;
  int calls[MAX_N];
  ringcc_unique_id_t id;
  int id_ready;
} kill_area_t;

static void *suicide(void *arg) {
  kill_area_t *a = arg;
  usleep(2000 + (useconds_t)(h_mix64((uint64_t)getpid()) % 20000));
  a->killed_at = h_now_s();
  raise(SIGKILL);
  return NULL;
}

static void kill_rank_main(kill_area_t *a, int rank, int n, int victim) {
  ringcc_comm_t comm;
  while (!__atomic_load_n(&a->id_ready, __ATOMIC_ACQUIRE))
    usleep(1000);
  if (ringcc_comm_init(&comm, n, &a->id, rank, NULL) != RINGCC_SUCCESS)
    _exit(2);
  size_t count = 1 << 16;
  float *s = calloc(count, 4), *r = calloc(count, 4);
  for (int it = 0; it < 100000; it++) {
    if (rank == victim && it == 20) {
      pthread_t t;
      pthread_create(&t, NULL, suicide, a); /* dies inside the next call */
    }
    ringcc_result_t res = ringcc_allreduce(s, r, count, RINGCC_FLOAT32,
                                           RINGCC_SUM, comm, NULL);
    a->calls[rank] = it + 1;
    if (res != RINGCC_SUCCESS) {
      a->failed_at[rank] = h_now_s();
      a->code[rank] = res;
      snprintf(a->message[rank], RCC_ERRLEN, "%s",
               ringcc_comm_last_error(comm));
      ringcc_comm_destroy(comm);
      _exit(0);
    }
  }
  _exit(3); /* never noticed */
}

static void kill_one(int n) {
  coll_env();
  kill_area_t *a = h_shared_alloc(sizeof *a);
  pid_t pid[MAX_N];
  int victim = n - 1, status[MAX_N];
  for (int r = 0; r < n; r++)
    if ((pid[r] = fork()) == 0)
      kill_rank_main(a, r, n, victim);
  cr_assert_eq(ringcc_get_unique_id(&a->id), RINGCC_SUCCESS);
  __atomic_store_n(&a->id_ready, 1, __ATOMIC_RELEASE);
  double until = h_now_s() + 120;
  for (int r = 0; r < n; r++) {
    while (waitpid(pid[r], &status[r], WNOHANG) == 0) {
      if (h_now_s() > until) {
        for (int k = 0; k < n; k++)
          kill(pid[k], SIGKILL);
        cr_assert_fail("n = %d: ranks still running 120 s after the start "
                       "(rank %d at call %d)", n, r, a->calls[r]);
      }
      usleep(10000);
    }
  }
  cr_assert(WIFSIGNALED(status[victim]) && WTERMSIG(status[victim]) == SIGKILL,
            "the victim was not killed (status 0x%x, %d calls)",
            status[victim], a->calls[victim]);
  char name[32];
  snprintf(name, sizeof name, "rank %d", victim);
  for (int r = 0; r < n; r++) {
    if (r == victim)
      continue;
    cr_assert(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0,
              "survivor rank %d: status 0x%x", r, status[r]);
    cr_assert_eq(a->code[r], RINGCC_ERR_PEER_FAILED, "survivor rank %d: %s",
                 r, a->message[r]);
    cr_assert(strstr(a->message[r], name) != NULL, "survivor rank %d does "
              "not name %s: %s", r, name, a->message[r]);
    double delay = a->failed_at[r] - a->killed_at;
    cr_assert(delay < 10, "survivor rank %d took %.1f s", r, delay);
    fprintf(stderr, "ib_coll kill n = %d: rank %d failed %.3f s after the "
            "kill: %s\n", n, r, delay, a->message[r]);
  }
  h_shared_free(a, sizeof *a);
}

Test(ib_coll, sigkill_n3, .timeout = 200) { kill_one(3); }
Test(ib_coll, sigkill_n4, .timeout = 200) { kill_one(4); }

/* ==== the plugin under the core, on the fake device =========================== */

/* What rank r's init and first allreduce said, for the parent to check. */
typedef struct {
  int init_code[2], call_code[2];
  char message[2][RCC_ERRLEN];
} lib_area_t;

static int lib_body(h_ctx_t *ctx) {
  lib_area_t *a = ctx->arg;
  ringcc_comm_t comm;
  ringcc_result_t r = ringcc_comm_init(&comm, ctx->nranks, ctx->id, ctx->rank,
                                       NULL);
  a->init_code[ctx->rank] = r;
  if (r != RINGCC_SUCCESS) {
    snprintf(a->message[ctx->rank], RCC_ERRLEN, "%s",
             ringcc_comm_last_error(NULL));
    return 0;
  }
  float x[1024] = {0}, y[1024];
  r = ringcc_allreduce(x, y, 1024, RINGCC_FLOAT32, RINGCC_SUM, comm, NULL);
  a->call_code[ctx->rank] = r;
  snprintf(a->message[ctx->rank], RCC_ERRLEN, "%s",
           r == RINGCC_SUCCESS ? "" : ringcc_comm_last_error(comm));
  ringcc_comm_destroy(comm);
  return 0;
}

static lib_area_t *lib_run(void) {
  lib_area_t *a = h_shared_alloc(sizeof *a);
  cr_assert_not_null(a);
  setenv("RINGCC_SHM_DISABLE", "1", 1);
  setenv("RINGCC_TIMEOUT_MS", "20000", 1);
  h_run_opts_t o = {.nranks = 2, .body = lib_body, .arg = a,
                    .skip_init = true, .timeout_s = 60, .name = "lib"};
  cr_assert(h_run(&o));
  return a;
}

/* A completion with IBV_WC_RETRY_EXC_ERR under a collective: the call fails
 * with RINGCC_ERR_NETWORK, naming the ranks, the host, the device and the
 * status in words. */
Test(ib_fake, library_retry_exceeded, .timeout = 90) {
  char host[256];
  use_fake("retry_exceeded");
  setenv("RINGCC_NET", "IB", 1);
  cr_assert_eq(gethostname(host, sizeof host), 0);
  lib_area_t *a = lib_run();
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(a->init_code[r], RINGCC_SUCCESS, "rank %d: %s", r,
                 a->message[r]);
    cr_assert_eq(a->call_code[r], RINGCC_ERR_NETWORK, "rank %d: %d: %s", r,
                 a->call_code[r], a->message[r]);
    char ranks[400], where[300], peer[32];
    snprintf(ranks, sizeof ranks, "(host %s, which holds ranks 0, 1): "
             "NET/IB: RDMA write of ", host);
    snprintf(peer, sizeof peer, "rank %d", 1 - r);
    snprintf(where, sizeof where, "on fake0:1 failed: transport retry "
             "counter exceeded (IBV_WC_RETRY_EXC_ERR, status 12, vendor "
             "error 0x81)");
    cr_assert(strstr(a->message[r], ranks) && strstr(a->message[r], where) &&
                  strstr(a->message[r], peer),
              "rank %d: %s", r, a->message[r]);
    fprintf(stderr, "library_retry_exceeded: rank %d: %s\n", r,
            a->message[r]);
  }
  h_shared_free(a, sizeof *a);
}

Test(ib_fake, library_forced_ib_without_port, .timeout = 90) {
  use_fake(NULL);
  setenv("FAKE_IBV_PORT_STATE", "down", 1);
  setenv("RINGCC_NET", "ib", 1);
  lib_area_t *a = lib_run();
  for (int r = 0; r < 2; r++) {
    char want[300];
    snprintf(want, sizeof want, "net on rank %d: RINGCC_NET=ib, but: NET/IB: "
             "no ACTIVE port to use; found: fake0:1 (InfiniBand, port DOWN)",
             r);
    cr_assert_eq(a->init_code[r], RINGCC_ERR_UNSUPPORTED, "rank %d: %s", r,
                 a->message[r]);
    cr_assert(strstr(a->message[r], want), "rank %d: %s", r, a->message[r]);
  }
  h_shared_free(a, sizeof *a);
}

Test(ib_fake, library_choice_errors, .timeout = 90) {
  use_fake(NULL);
  setenv("RINGCC_NET", "Verbs", 1);
  lib_area_t *a = lib_run();
  cr_assert_eq(a->init_code[0], RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(a->message[0], "net on rank 0: RINGCC_NET=\"Verbs\" names "
                                  "no network plugin (IB or Socket)"),
            "%s", a->message[0]);
  h_shared_free(a, sizeof *a);
  setenv("RINGCC_NET", "IB", 1);
  setenv("RINGCC_IB_DISABLE", "1", 1);
  a = lib_run();
  cr_assert_eq(a->init_code[1], RINGCC_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(a->message[1], "net on rank 1: RINGCC_NET=IB but "
                                  "RINGCC_IB_DISABLE=1"), "%s", a->message[1]);
  unsetenv("RINGCC_IB_DISABLE");
  h_shared_free(a, sizeof *a);
}

/* Without RINGCC_NET: IB where it works (the fake's ports cannot reach
 * another process, so here it is left out), TCP otherwise. */
Test(ib_fake, library_disabled_uses_tcp, .timeout = 90) {
  use_fake(NULL);
  setenv("RINGCC_IB_DISABLE", "1", 1);
  lib_area_t *a = lib_run();
  for (int r = 0; r < 2; r++)
    cr_assert(a->init_code[r] == RINGCC_SUCCESS &&
                  a->call_code[r] == RINGCC_SUCCESS,
              "rank %d over TCP: %s", r, a->message[r]);
  h_shared_free(a, sizeof *a);
}
