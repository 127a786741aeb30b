/*
 * pure.c - the verbs plugin's pure parts (net_ib.h), checked by the unit
 * tests without an RDMA device: RINGCC_IB_HCA, the GID choice, PCI
 * distances, the names of completion statuses and asynchronous events.
 */
#include "ib.h"

/* ==== pure parts (net_ib.h) ============================================== */

ringcc_result_t rcc_ib_hca_parse(const char *spec, struct rcc_ib_hca_spec *out,
                                 char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (spec == NULL)
    return RINGCC_SUCCESS;
  const char *p = spec;
  for (;;) { /* "^=" and "=^" both */
    if (*p == '^' && !out->exclude)
      out->exclude = 1, p++;
    else if (*p == '=' && !out->exact)
      out->exact = 1, p++;
    else
      break;
  }
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) {
      if (out->n == RCC_IB_HCA_MAX)
        return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                        "NET/IB: RINGCC_IB_HCA=\"%s\" names more than %d "
                        "devices", spec, RCC_IB_HCA_MAX);
      char item[128];
      snprintf(item, sizeof(item), "%.*s", (int)len, p);
      char *colon = strchr(item, ':');
      int port = 0;
      if (colon != NULL) {
        char *pend;
        long v = strtol(colon + 1, &pend, 10);
        if (colon[1] == '\0' || *pend != '\0' || v < 1 || v > 255)
          return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                          "NET/IB: RINGCC_IB_HCA=\"%s\": \"%s\" has no port "
                          "number 1..255 after ':'", spec, item);
        *colon = '\0';
        port = (int)v;
      }
      if (item[0] == '\0' || strlen(item) >= sizeof(out->e[0].name))
        return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                        "NET/IB: RINGCC_IB_HCA=\"%s\": a device name is empty "
                        "or longer than %zu characters", spec,
                        sizeof(out->e[0].name) - 1);
      snprintf(out->e[out->n].name, sizeof(out->e[0].name), "%s", item);
      out->e[out->n++].port = port;
    }
    if (end == NULL)
      break;
    p = end + 1;
  }
  return RINGCC_SUCCESS;
}

int rcc_ib_hca_match(const struct rcc_ib_hca_spec *s, const char *dev,
                     int port) {
  if (s->n == 0)
    return 1; /* nothing named (also a bare "^"): every device */
  int hit = 0;
  for (int i = 0; i < s->n && !hit; i++) {
    const char *name = s->e[i].name;
    int same = s->exact ? strcmp(name, dev) == 0
                        : strncmp(name, dev, strlen(name)) == 0;
    hit = same && (s->e[i].port == 0 || s->e[i].port == port);
  }
  return s->exclude ? !hit : hit;
}

static int gid_empty(const uint8_t *g) {
  for (int i = 0; i < 16; i++)
    if (g[i] != 0)
      return 0;
  return 1;
}

static int gid_v4mapped(const uint8_t *g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g, prefix, 12) == 0;
}

static int gid_linklocal(const uint8_t *g) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

const char *rcc_ib_gid_str(const uint8_t raw[16], char *buf, size_t len) {
  if (inet_ntop(AF_INET6, raw, buf, (socklen_t)len) == NULL)
    snprintf(buf, len, "?");
  return buf;
}

static const char *gid_type_name(int t) {
  switch (t) {
  case RCC_IB_GID_IB:
    return "IB/RoCE v1";
  case RCC_IB_GID_ROCE_V1:
    return "RoCE v1";
  case RCC_IB_GID_ROCE_V2:
    return "RoCE v2";
  default:
    return "type unknown";
  }
}

/* Rank of a GID for the automatic RoCE choice: lower is better, -1 never. */
static int gid_rank(const struct rcc_ib_gid *g) {
  if (gid_empty(g->raw))
    return -1;
  int base = g->type == RCC_IB_GID_ROCE_V2 ? 0 : 3;
  if (gid_v4mapped(g->raw))
    return base;
  return base + (gid_linklocal(g->raw) ? 2 : 1);
}

int rcc_ib_gid_choose(const struct rcc_ib_gid *table, int n, int link_layer,
                      int forced, char *why, size_t whylen) {
  char s[INET6_ADDRSTRLEN];
  if (forced >= 0) {
    for (int i = 0; i < n; i++)
      if (table[i].index == forced) {
        if (gid_empty(table[i].raw))
          break;
        snprintf(why, whylen, "%s, %s, set by RINGCC_IB_GID_INDEX",
                 rcc_ib_gid_str(table[i].raw, s, sizeof(s)),
                 gid_type_name(table[i].type));
        return forced;
      }
    size_t off = (size_t)snprintf(why, whylen,
                                  "RINGCC_IB_GID_INDEX=%d is not a GID of "
                                  "this port; its GIDs:", forced);
    int any = 0;
    for (int i = 0; i < n && off < whylen; i++)
      if (!gid_empty(table[i].raw)) {
        off += (size_t)snprintf(why + off, whylen - off, "%s %d (%s, %s)",
                                any ? "," : "", table[i].index,
                                rcc_ib_gid_str(table[i].raw, s, sizeof(s)),
                                gid_type_name(table[i].type));
        any = 1;
      }
    if (!any && off < whylen)
      snprintf(why + off, whylen - off, " none");
    return -1;
  }
  if (link_layer != IBV_LINK_LAYER_ETHERNET) {
    for (int i = 0; i < n; i++)
      if (table[i].index == 0 && !gid_empty(table[i].raw)) {
        snprintf(why, whylen, "%s, InfiniBand: index 0",
                 rcc_ib_gid_str(table[i].raw, s, sizeof(s)));
        return 0;
      }
    snprintf(why, whylen, "InfiniBand port without GID 0 (routed by LID)");
    return 0;
  }
  int best = -1, best_rank = 99;
  for (int i = 0; i < n; i++) {
    int r = gid_rank(&table[i]);
    if (r >= 0 && r < best_rank)
      best = i, best_rank = r;
  }
  if (best < 0) {
    snprintf(why, whylen, "the port has no GID (is its network interface up "
                          "with an address?)");
    return -1;
  }
  const struct rcc_ib_gid *g = &table[best];
  snprintf(why, whylen, "%s, %s, %s, chosen automatically",
           rcc_ib_gid_str(g->raw, s, sizeof(s)), gid_type_name(g->type),
           gid_v4mapped(g->raw)     ? "IPv4-mapped"
           : gid_linklocal(g->raw) ? "IPv6 link-local"
                                   : "IPv6");
  return g->index;
}

static const char *const distance_names[RCC_IB_NUM_DISTANCES] = {
    "LOC", "PIX", "PXB", "PHB", "SYS"};

const char *rcc_ib_distance_name(int d) {
  return d >= 0 && d < RCC_IB_NUM_DISTANCES ? distance_names[d] : "?";
}

int rcc_ib_distance_parse(const char *s) {
  if (s == NULL)
    return -1;
  for (int i = 0; i < RCC_IB_NUM_DISTANCES; i++)
    if (strcasecmp(s, distance_names[i]) == 0)
      return i;
  if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
    return s[0] - '0';
  return -1;
}

/* Splits a sysfs device path into its components below /sys/devices. */
static int pci_components(const char *path, char comp[][32], int max) {
  const char *p = strstr(path, "/devices/");
  int n = 0;
  p = p ? p + strlen("/devices/") : path;
  while (*p && n < max) {
    while (*p == '/')
      p++;
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 0)
      break;
    snprintf(comp[n++], 32, "%.*s", (int)len, p);
    if (e == NULL)
      break;
    p = e;
  }
  return n;
}

int rcc_ib_pci_distance(const char *a, const char *b, int numa_a, int numa_b) {
  char ca[32][32], cb[32][32];
  if (a == NULL || b == NULL || *a == '\0' || *b == '\0')
    return RCC_IB_SYS;
  int na = pci_components(a, ca, 32), nb = pci_components(b, cb, 32), k = 0;
  if (na == 0 || nb == 0)
    return RCC_IB_SYS;
  while (k < na && k < nb && strcmp(ca[k], cb[k]) == 0)
    k++;
  if (k == na && k == nb)
    return RCC_IB_LOC;
  if (k == 0) /* different root complexes */
    return numa_a >= 0 && numa_a == numa_b ? RCC_IB_PHB : RCC_IB_SYS;
  if (k == 1) /* only the host bridge in common */
    return RCC_IB_PHB;
  /* Below a common bridge: a PCIe switch shows as two levels (upstream and
   * downstream port), so two devices at most two levels below the bridge
   * they share sit behind one switch. */
  return na - k <= 2 && nb - k <= 2 ? RCC_IB_PIX : RCC_IB_PXB;
}

struct named {
  int value;
  const char *name, *words;
};

static const struct named wc_statuses[] = {
    {IBV_WC_SUCCESS, "IBV_WC_SUCCESS", "success"},
    {IBV_WC_LOC_LEN_ERR, "IBV_WC_LOC_LEN_ERR", "local length error"},
    {IBV_WC_LOC_QP_OP_ERR, "IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
    {IBV_WC_LOC_EEC_OP_ERR, "IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
    {IBV_WC_LOC_PROT_ERR, "IBV_WC_LOC_PROT_ERR", "local protection error"},
    {IBV_WC_WR_FLUSH_ERR, "IBV_WC_WR_FLUSH_ERR", "work request flushed"},
    {IBV_WC_MW_BIND_ERR, "IBV_WC_MW_BIND_ERR", "memory window bind error"},
    {IBV_WC_BAD_RESP_ERR, "IBV_WC_BAD_RESP_ERR", "bad response error"},
    {IBV_WC_LOC_ACCESS_ERR, "IBV_WC_LOC_ACCESS_ERR", "local access error"},
    {IBV_WC_REM_INV_REQ_ERR, "IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
    {IBV_WC_REM_ACCESS_ERR, "IBV_WC_REM_ACCESS_ERR", "remote access error"},
    {IBV_WC_REM_OP_ERR, "IBV_WC_REM_OP_ERR", "remote operation error"},
    {IBV_WC_RETRY_EXC_ERR, "IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
    {IBV_WC_RNR_RETRY_EXC_ERR, "IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
    {IBV_WC_LOC_RDD_VIOL_ERR, "IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
    {IBV_WC_REM_INV_RD_REQ_ERR, "IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
    {IBV_WC_REM_ABORT_ERR, "IBV_WC_REM_ABORT_ERR", "aborted error"},
    {IBV_WC_INV_EECN_ERR, "IBV_WC_INV_EECN_ERR", "invalid EE context number"},
    {IBV_WC_INV_EEC_STATE_ERR, "IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
    {IBV_WC_FATAL_ERR, "IBV_WC_FATAL_ERR", "fatal error"},
    {IBV_WC_RESP_TIMEOUT_ERR, "IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
    {IBV_WC_GENERAL_ERR, "IBV_WC_GENERAL_ERR", "general error"},
};

static const struct named *find_named(const struct named *t, size_t n,
                                      int v) {
  for (size_t i = 0; i < n; i++)
    if (t[i].value == v)
      return &t[i];
  return NULL;
}

const char *rcc_ib_wc_status_name(int status) {
  const struct named *s =
      find_named(wc_statuses, sizeof(wc_statuses) / sizeof(*wc_statuses), status);
  return s ? s->name : "IBV_WC_(unknown)";
}

const char *rcc_ib_wc_status_words(int status) {
  const struct named *s =
      find_named(wc_statuses, sizeof(wc_statuses) / sizeof(*wc_statuses), status);
  return s ? s->words : "unknown status";
}

static const struct named events[] = {
    {IBV_EVENT_CQ_ERR, "IBV_EVENT_CQ_ERR", "completion queue overrun"},
    {IBV_EVENT_QP_FATAL, "IBV_EVENT_QP_FATAL", "queue pair in error state"},
    {IBV_EVENT_QP_REQ_ERR, "IBV_EVENT_QP_REQ_ERR", "invalid request on a queue pair"},
    {IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR", "access violation on a queue pair"},
    {IBV_EVENT_COMM_EST, "IBV_EVENT_COMM_EST", "communication established"},
    {IBV_EVENT_SQ_DRAINED, "IBV_EVENT_SQ_DRAINED", "send queue drained"},
    {IBV_EVENT_PATH_MIG, "IBV_EVENT_PATH_MIG", "path migrated"},
    {IBV_EVENT_PATH_MIG_ERR, "IBV_EVENT_PATH_MIG_ERR", "path migration failed"},
    {IBV_EVENT_DEVICE_FATAL, "IBV_EVENT_DEVICE_FATAL", "local catastrophic error"},
    {IBV_EVENT_PORT_ACTIVE, "IBV_EVENT_PORT_ACTIVE", "port active"},
    {IBV_EVENT_PORT_ERR, "IBV_EVENT_PORT_ERR", "port down"},
    {IBV_EVENT_LID_CHANGE, "IBV_EVENT_LID_CHANGE", "LID changed"},
    {IBV_EVENT_PKEY_CHANGE, "IBV_EVENT_PKEY_CHANGE", "P_Key table changed"},
    {IBV_EVENT_SM_CHANGE, "IBV_EVENT_SM_CHANGE", "subnet manager changed"},
    {IBV_EVENT_SRQ_ERR, "IBV_EVENT_SRQ_ERR", "shared receive queue error"},
    {IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED", "SRQ limit reached"},
    {IBV_EVENT_QP_LAST_WQE_REACHED, "IBV_EVENT_QP_LAST_WQE_REACHED", "last WQE reached"},
    {IBV_EVENT_CLIENT_REREGISTER, "IBV_EVENT_CLIENT_REREGISTER", "client reregistration"},
    {IBV_EVENT_GID_CHANGE, "IBV_EVENT_GID_CHANGE", "GID table changed"},
};

const char *rcc_ib_event_name(int event) {
  const struct named *e =
      find_named(events, sizeof(events) / sizeof(*events), event);
  return e ? e->name : "IBV_EVENT_(unknown)";
}

const char *rcc_ib_event_words(int event) {
  const struct named *e =
      find_named(events, sizeof(events) / sizeof(*events), event);
  return e ? e->words : "unknown event";
}
