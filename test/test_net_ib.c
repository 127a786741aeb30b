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
 *
 * One program, two sources: from ib_fake's error paths on (ib_fake, ib_coll
 * and the library's choices), the tests are in test/parts/net_ib_errors.c;
 * the helpers both use are in test_net_ib.h.
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

#include "test_net_ib.h"

/* The communicator's network key every connection proves, and another. */
const uint8_t KEY[RCC_NET_KEY_BYTES] = "the test's network key, 32 byte";
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

void unset_ib_env(void) {
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
void use_fake(const char *fault) {
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

void init_ok(void) {
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

void pair_listen(pair_t *p) {
  char err[RCC_ERRLEN];
  memset(p, 0, sizeof *p);
  init_ok();
  cr_assert_eq(P.listen(KEY, p->handle, &p->listen, err, sizeof err),
               RINGCC_SUCCESS, "listen: %s", err);
  handle_addr(p->handle, p->addr, sizeof p->addr);
}

void pair_connect(pair_t *p) {
  char err[RCC_ERRLEN];
  uint8_t hello[RCC_NET_HELLO_BYTES] = "a hello from the connector";
  uint8_t got[RCC_NET_HELLO_BYTES];
  int64_t dl = rcc_now_ns() + (int64_t)(WAIT_S * 1e9);
  cr_assert_eq(P.connect(KEY, p->handle, hello, &p->send, dl, NULL, err, sizeof err),
               RINGCC_SUCCESS, "connect: %s", err);
  cr_assert_eq(P.accept(p->listen, got, &p->recv, dl, err, sizeof err),
               RINGCC_SUCCESS, "accept: %s", err);
  cr_assert_eq(memcmp(hello, got, sizeof hello), 0, "the hello arrived");
  cr_assert_eq(P.ready(p->send, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (send): %s", err);
  cr_assert_eq(P.ready(p->recv, dl, err, sizeof err), RINGCC_SUCCESS,
               "ready (receive): %s", err);
}

void pair_fifos(pair_t *p) {
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

void pair_open(pair_t *p) {
  pair_listen(p);
  pair_connect(p);
  pair_fifos(p);
}

void pair_close(pair_t *p) {
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
ringcc_result_t wait_fail(void *req, char *err, size_t errlen,
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

void *post_recv(pair_t *p, char *dst, size_t max) {
  char err[RCC_ERRLEN];
  void *req = NULL;
  cr_assert_eq(P.irecv(p->recv, dst, max, p->rmh, &req, err, sizeof err),
               RINGCC_SUCCESS, "irecv: %s", err);
  cr_assert_not_null(req);
  return req;
}

void *post_send(pair_t *p, const char *src, size_t bytes,
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
void one_message(pair_t *p, char *src, size_t bytes, char *dst,
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
  cr_assert_eq(P.connect(OTHER_KEY, p.handle, hello, &wrong_key, dl, NULL, err,
                         sizeof err), RINGCC_SUCCESS, "%s", err);
  cr_assert_eq(P.connect(KEY, mixed, hello, &wrong_listener, dl, NULL, err,
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
  cr_assert_eq(P.connect(KEY, via, hello, &caught, dl, NULL, err, sizeof err),
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
  cr_assert_eq(P.connect(KEY, p.handle, hello, &p.send, dl, NULL, err, sizeof err),
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
