/*
 * device.c - the verbs plugin's process-wide state: its settings (every
 * variable of the plugin is read here), libibverbs through dlopen, the
 * device, port and GID chosen at init, and the device's asynchronous events.
 */
#include "ib.h"

/* The process's device, settings, cache and live connections (ib.h). */
struct ib_state rcc_ib_state = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                .dev = {.async_fd = -1}};

/* ---- settings: every variable of the plugin is read here ----------------- */

static ringcc_result_t env_int(const char *name, int lo, int hi, int def,
                               int *out, char *err, size_t errlen) {
  const char *v = rcc_getenv(name);
  int64_t x;
  *out = def;
  if (v == NULL)
    return RINGCC_SUCCESS;
  if (rcc_parse_decimal(v, &x) != 0 || x < lo || x > hi)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: %s=\"%s\" is not a number in %d..%d", name, v,
                    lo, hi);
  *out = (int)x;
  return RINGCC_SUCCESS;
}

static ringcc_result_t read_settings(struct ib_settings *s, char *err,
                                     size_t errlen) {
  ringcc_result_t r;
  int cache_mb;
  s->lib = rcc_getenv("RINGCC_IBVERBS_LIB");
  s->hca = rcc_getenv("RINGCC_IB_HCA");
  if ((r = env_int("RINGCC_IB_GID_INDEX", 0, 1023, -1, &s->gid_index, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_TC", 0, 255, 0, &s->tc, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_SL", 0, 15, 0, &s->sl, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_TIMEOUT", 1, 31, 20, &s->timeout, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_RETRY_CNT", 0, 7, 7, &s->retry_cnt, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_QPS_PER_CONN", 1, MAX_QPS, 1, &s->qps, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_NET_GDR_DISABLE", 0, 1, 0, &s->gdr_disable, err,
                   errlen)) != RINGCC_SUCCESS ||
      (r = env_int("RINGCC_IB_REG_CACHE_MB", 0, 1 << 20, 1024, &cache_mb, err,
                   errlen)) != RINGCC_SUCCESS)
    return r;
  s->cache_max = (size_t)cache_mb << 20;
  const char *lvl = rcc_getenv("RINGCC_NET_GDR_LEVEL");
  s->gdr_level = lvl ? rcc_ib_distance_parse(lvl) : RCC_IB_PXB;
  if (s->gdr_level < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: RINGCC_NET_GDR_LEVEL=\"%s\" is none of LOC, PIX, "
                    "PXB, PHB, SYS (or 0..4)", lvl);
  return RINGCC_SUCCESS;
}

/* ---- libibverbs through dlopen -------------------------------------------- */

#define SYM(field, name, required)                                             \
  { offsetof(struct rcc_ibv, field), name, required }
static const struct {
  size_t off;
  const char *name;
  int required;
} ibv_symbols[] = {
    SYM(get_device_list, "ibv_get_device_list", 1),
    SYM(free_device_list, "ibv_free_device_list", 1),
    SYM(get_device_name, "ibv_get_device_name", 1),
    SYM(open_device, "ibv_open_device", 1),
    SYM(close_device, "ibv_close_device", 1),
    SYM(query_device, "ibv_query_device", 1),
    SYM(query_port, "ibv_query_port", 1),
    SYM(query_gid, "ibv_query_gid", 1),
    SYM(alloc_pd, "ibv_alloc_pd", 1),
    SYM(dealloc_pd, "ibv_dealloc_pd", 1),
    SYM(reg_mr, "ibv_reg_mr", 1),
    SYM(dereg_mr, "ibv_dereg_mr", 1),
    SYM(create_comp_channel, "ibv_create_comp_channel", 1),
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel", 1),
    SYM(create_cq, "ibv_create_cq", 1),
    SYM(destroy_cq, "ibv_destroy_cq", 1),
    SYM(get_cq_event, "ibv_get_cq_event", 1),
    SYM(ack_cq_events, "ibv_ack_cq_events", 1),
    SYM(create_qp, "ibv_create_qp", 1),
    SYM(modify_qp, "ibv_modify_qp", 1),
    SYM(destroy_qp, "ibv_destroy_qp", 1),
    SYM(get_async_event, "ibv_get_async_event", 1),
    SYM(ack_async_event, "ibv_ack_async_event", 1),
    SYM(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", 0),
    SYM(query_gid_ex, "_ibv_query_gid_ex", 0),
};

static ringcc_result_t ibv_load(char *err, size_t errlen) {
  const char *path = rcc_ib_state.set.lib ? rcc_ib_state.set.lib : "libibverbs.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "NET/IB: cannot load %s%s: %s%s", path,
                    rcc_ib_state.set.lib ? " (RINGCC_IBVERBS_LIB)" : "", dlerror(),
                    rcc_ib_state.set.lib ? "" : " (install libibverbs1 / rdma-core)");
  for (size_t i = 0; i < sizeof(ibv_symbols) / sizeof(*ibv_symbols); i++) {
    void *f = dlsym(lib, ibv_symbols[i].name);
    if (f == NULL && ibv_symbols[i].required) {
      dlclose(lib);
      return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                      "NET/IB: %s has no %s (too old a libibverbs?)", path,
                      ibv_symbols[i].name);
    }
    memcpy((char *)&rcc_ib_state.ibv + ibv_symbols[i].off, &f, sizeof(f));
  }
  rcc_ib_state.lib = lib;
  return RINGCC_SUCCESS;
}

/* ---- devices, ports, GIDs: the choice at init ----------------------------- */

struct cand {
  struct ibv_device *device;
  char name[64];
  int port;
  struct ibv_port_attr attr;
  char pci[PATH_MAX];
  int numa;
};

static const char *port_state_name(int s) {
  static const char *const names[] = {"NOP",   "DOWN",   "INIT",
                                      "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  return s >= 0 && s < 6 ? names[s] : "?";
}


static int read_int_file(const char *path, int def) {
  FILE *f = fopen(path, "r");
  int v = def;
  if (f != NULL) {
    if (fscanf(f, "%d", &v) != 1)
      v = def;
    fclose(f);
  }
  return v;
}

/* The sysfs path of a device's PCI function and its NUMA node. */
void rcc_ib_pci_of(const char *sysfs_dev, char *out, int *numa) {
  char path[PATH_MAX + 32];
  out[0] = '\0';
  *numa = -1;
  if (realpath(sysfs_dev, out) == NULL) {
    out[0] = '\0';
    return;
  }
  snprintf(path, sizeof(path), "%s/numa_node", out);
  *numa = read_int_file(path, -1);
}

static void gid_type_sysfs(const char *dev, int port, int index, int *type) {
  char path[256], buf[32] = "";
  snprintf(path, sizeof(path),
           "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port,
           index);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  if (fgets(buf, sizeof(buf), f) != NULL)
    *type = strstr(buf, "v2") ? RCC_IB_GID_ROCE_V2
            : strstr(buf, "v1") ? RCC_IB_GID_ROCE_V1
                                : RCC_IB_GID_IB;
  fclose(f);
}

/* Reads up to max GIDs of a port; returns how many were read. */
static int read_gids(struct ibv_context *ctx, const char *dev, int port,
                     int len, struct rcc_ib_gid *out, int max) {
  int n = 0;
  for (int i = 0; i < len && n < max; i++) {
    struct rcc_ib_gid *g = &out[n];
    memset(g, 0, sizeof(*g));
    g->index = i;
    if (IBV->query_gid_ex != NULL) {
      struct ibv_gid_entry e;
      if (IBV->query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0,
                            sizeof(e)) != 0)
        continue; /* an empty entry */
      memcpy(g->raw, e.gid.raw, 16);
      g->type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? RCC_IB_GID_ROCE_V2
                : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? RCC_IB_GID_ROCE_V1
                                                     : RCC_IB_GID_IB;
    } else {
      union ibv_gid gid;
      if (IBV->query_gid(ctx, (uint8_t)port, i, &gid) != 0)
        continue;
      memcpy(g->raw, gid.raw, 16);
      gid_type_sysfs(dev, port, i, &g->type);
    }
    n++;
  }
  return n;
}

/* Appends "what" to a "; "-separated note. */
static void note(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(char *buf, size_t len, const char *fmt, ...) {
  size_t off = strlen(buf);
  va_list ap;
  if (off + 3 >= len)
    return;
  if (off > 0)
    off += (size_t)snprintf(buf + off, len - off, ", ");
  va_start(ap, fmt);
  vsnprintf(buf + off, len - off, fmt, ap);
  va_end(ap);
}

/* Every ACTIVE port RINGCC_IB_HCA allows, into c[max]; seen says what was
 * found and why each other port was left out. */
static int list_ports(struct ibv_device **list, int ndev,
                      const struct rcc_ib_hca_spec *spec, struct cand *c,
                      int max, char *seen, size_t seenlen) {
  int n = 0;
  for (int d = 0; d < ndev; d++) {
    const char *name = IBV->get_device_name(list[d]);
    struct ibv_context *ctx = IBV->open_device(list[d]);
    struct ibv_device_attr da;
    if (ctx == NULL) {
      note(seen, seenlen, "%s (cannot open: %s)", name, strerror(errno));
      continue;
    }
    if (IBV->query_device(ctx, &da) != 0) {
      note(seen, seenlen, "%s (cannot query: %s)", name, strerror(errno));
      IBV->close_device(ctx);
      continue;
    }
    for (int p = 1; p <= da.phys_port_cnt; p++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (!rcc_ib_hca_match(spec, name, p)) {
        note(seen, seenlen, "%s:%d (left out by RINGCC_IB_HCA)", name, p);
        continue;
      }
      if (IBV->query_port(ctx, (uint8_t)p, &pa) != 0) {
        note(seen, seenlen, "%s:%d (cannot query: %s)", name, p,
             strerror(errno));
        continue;
      }
      if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
          pa.link_layer != IBV_LINK_LAYER_ETHERNET &&
          pa.link_layer != IBV_LINK_LAYER_UNSPECIFIED) {
        note(seen, seenlen, "%s:%d (link layer %d is neither InfiniBand nor "
             "Ethernet)", name, p, pa.link_layer);
        continue;
      }
      if (pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED)
        pa.link_layer = IBV_LINK_LAYER_INFINIBAND;
      if (pa.state != IBV_PORT_ACTIVE) {
        note(seen, seenlen, "%s:%d (%s, port %s)", name, p,
             link_name(pa.link_layer), port_state_name(pa.state));
        continue;
      }
      note(seen, seenlen, "%s:%d (%s, ACTIVE)", name, p,
           link_name(pa.link_layer));
      if (n < max) {
        char sys[PATH_MAX];
        c[n].device = list[d];
        snprintf(c[n].name, sizeof(c[n].name), "%s", name);
        c[n].port = p;
        c[n].attr = pa;
        snprintf(sys, sizeof(sys), "/sys/class/infiniband/%s/device", name);
        rcc_ib_pci_of(sys, c[n].pci, &c[n].numa);
        n++;
      }
    }
    IBV->close_device(ctx);
  }
  return n;
}

/* Which of c[0..n) this rank uses: the nearest to its GPU (PCI paths), the
 * ties (or every port, without a GPU) spread by the rank's place on its
 * host. why says how. */
static int choose_port(const struct cand *c, int n, char *why, size_t len) {
  int local = rcc_ib_state.have_where ? rcc_ib_state.where.local_rank : 0;
  int dist[64], best = RCC_IB_NUM_DISTANCES, nbest = 0;
  if (local < 0)
    local = 0;
  if (rcc_ib_state.have_where && rcc_ib_state.where.gpu_pci[0] != '\0') {
    char sys[128], gpu[PATH_MAX];
    int gnuma;
    snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s", rcc_ib_state.where.gpu_pci);
    rcc_ib_pci_of(sys, gpu, &gnuma);
    for (int i = 0; i < n; i++) {
      dist[i] = rcc_ib_pci_distance(gpu, c[i].pci, gnuma, c[i].numa);
      if (dist[i] < best)
        best = dist[i];
    }
    for (int i = 0; i < n; i++)
      nbest += dist[i] == best;
    int pick = local % nbest;
    for (int i = 0; i < n; i++)
      if (dist[i] == best && pick-- == 0) {
        snprintf(why, len, "nearest to GPU %s (%s)%s", rcc_ib_state.where.gpu_pci,
                 rcc_ib_distance_name(best),
                 nbest > 1 ? ", spread over the equally near ones by local "
                             "rank" : "");
        return i;
      }
  }
  snprintf(why, len, n > 1 ? "local rank %d of %d spread over %d ports"
                           : "the only one",
           local, rcc_ib_state.have_where ? rcc_ib_state.where.local_size : 1, n);
  return local % n;
}

static ringcc_result_t open_port(const struct cand *c, char *err,
                                 size_t errlen) {
  struct ib_dev *d = &rcc_ib_state.dev;
  struct rcc_ib_gid gids[128];
  snprintf(d->name, sizeof(d->name), "%s", c->name);
  d->port = c->port;
  snprintf(d->label, sizeof(d->label), "%s:%d", c->name, c->port);
  d->link_layer = c->attr.link_layer;
  d->lid = c->attr.lid;
  d->mtu = c->attr.active_mtu;
  snprintf(d->pci, sizeof(d->pci), "%s", c->pci);
  d->numa = c->numa;
  if ((d->ctx = IBV->open_device(c->device)) == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "NET/IB: cannot open %s: %s", c->name, strerror(errno));
  if ((d->pd = IBV->alloc_pd(d->ctx)) == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "NET/IB: cannot allocate a protection domain on %s: %s",
                    c->name, strerror(errno));
  int ngid = read_gids(d->ctx, c->name, c->port, c->attr.gid_tbl_len, gids,
                       128);
  d->gid_index = rcc_ib_gid_choose(gids, ngid, d->link_layer,
                                   rcc_ib_state.set.gid_index, d->gid_why,
                                   sizeof(d->gid_why));
  if (d->gid_index < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: %s: %s", d->label, d->gid_why);
  for (int i = 0; i < ngid; i++)
    if (gids[i].index == d->gid_index)
      memcpy(d->gid, gids[i].raw, 16);
  d->async_fd = d->ctx->async_fd;
  int fl = fcntl(d->async_fd, F_GETFL);
  if (fl < 0 || fcntl(d->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM,
                    "NET/IB: cannot make the event fd of %s nonblocking: %s",
                    c->name, strerror(errno));
  return RINGCC_SUCCESS;
}

static ringcc_result_t init_locked(const char *spec, char *err,
                                   size_t errlen) {
  ringcc_result_t r;
  struct rcc_ib_hca_spec hca;
  struct cand c[64];
  char seen[1024] = "", why[200];
  int ndev = 0;
  if ((r = read_settings(&rcc_ib_state.set, err, errlen)) != RINGCC_SUCCESS ||
      (r = rcc_ib_hca_parse(rcc_ib_state.set.hca, &hca, err, errlen)) !=
          RINGCC_SUCCESS ||
      (r = ibv_load(err, errlen)) != RINGCC_SUCCESS)
    return r;
  struct ibv_device **list = IBV->get_device_list(&ndev);
  if (list == NULL || ndev == 0) {
    int e = errno;
    if (list)
      IBV->free_device_list(list);
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "NET/IB: no RDMA device%s%s (no driver loaded, or no "
                    "/dev/infiniband in this container?)",
                    list == NULL ? ": " : "", list == NULL ? strerror(e) : "");
  }
  int n = list_ports(list, ndev, &hca, c, 64, seen, sizeof(seen));
  if (n == 0) {
    IBV->free_device_list(list);
    return rcc_errf(err, errlen, RINGCC_ERR_UNSUPPORTED,
                    "NET/IB: no ACTIVE port to use%s%s; found: %s",
                    rcc_ib_state.set.hca ? " with RINGCC_IB_HCA=" : "",
                    rcc_ib_state.set.hca ? rcc_ib_state.set.hca : "", seen);
  }
  int pick = choose_port(c, n, why, sizeof(why));
  r = open_port(&c[pick], err, errlen);
  IBV->free_device_list(list);
  if (r != RINGCC_SUCCESS)
    return r;
  if ((r = rcc_socket_pick_address(spec, &rcc_ib_state.side_addr, rcc_ib_state.side_if,
                                   sizeof(rcc_ib_state.side_if), err, errlen)) !=
      RINGCC_SUCCESS)
    return r;
  const struct ib_dev *d = &rcc_ib_state.dev;
  RCC_INFO(-1, "NET/IB: ports found: %s", seen);
  RCC_INFO(-1, "NET/IB: using %s (%s), %s; LID %u, MTU %d; GID index %d (%s)",
           d->label, link_name(d->link_layer), why, (unsigned)d->lid,
           128 << d->mtu, d->gid_index, d->gid_why);
  RCC_INFO(-1, "NET/IB: %d QP%s per connection, timeout %d (%.1f ms per "
           "try), retry count %d, SL %d, TC %d; connection setup over %s; "
           "registration cache %zu MiB",
           rcc_ib_state.set.qps, rcc_ib_state.set.qps == 1 ? "" : "s", rcc_ib_state.set.timeout,
           4.096e-3 * (double)(1LL << rcc_ib_state.set.timeout), rcc_ib_state.set.retry_cnt,
           rcc_ib_state.set.sl, rcc_ib_state.set.tc, rcc_ib_state.side_if, rcc_ib_state.set.cache_max >> 20);
  return RINGCC_SUCCESS;
}

/* Undoes a failed init, so a later process-wide retry starts clean. */
static void init_undo(void) {
  struct ib_dev *d = &rcc_ib_state.dev;
  if (d->pd)
    IBV->dealloc_pd(d->pd);
  if (d->ctx)
    IBV->close_device(d->ctx);
  if (rcc_ib_state.lib)
    dlclose(rcc_ib_state.lib);
  memset(d, 0, sizeof(*d));
  d->async_fd = -1;
  rcc_ib_state.lib = NULL;
}

ringcc_result_t rcc_ib_init(const char *spec, char *err, size_t errlen) {
  rcc_log_init();
  pthread_mutex_lock(&rcc_ib_state.lock);
  if (!rcc_ib_state.tried) { /* once per process: the first outcome stands */
    rcc_ib_state.tried = 1;
    rcc_ib_state.pid = getpid();
    rcc_ib_state.result = init_locked(spec, rcc_ib_state.err, sizeof(rcc_ib_state.err));
    if (rcc_ib_state.result != RINGCC_SUCCESS)
      init_undo();
  }
  ringcc_result_t r = rcc_ib_state.result;
  if (r != RINGCC_SUCCESS)
    snprintf(err, errlen, "%s", rcc_ib_state.err);
  pthread_mutex_unlock(&rcc_ib_state.lock);
  return r;
}

const char *rcc_ib_device(void) { return rcc_ib_state.dev.label; }

void rcc_ib_locate(const struct rcc_net_locality *where) {
  pthread_mutex_lock(&rcc_ib_state.lock);
  if (!rcc_ib_state.tried) {
    rcc_ib_state.where = *where;
    rcc_ib_state.have_where = 1;
  }
  pthread_mutex_unlock(&rcc_ib_state.lock);
}


/* ==== asynchronous events ================================================= */

/* Reads every pending event of the device (the caller holds rcc_ib_state.lock). */
static void async_drain_locked(void) {
  struct ib_dev *d = &rcc_ib_state.dev;
  struct ibv_async_event ev;
  while (d->ctx != NULL && IBV->get_async_event(d->ctx, &ev) == 0) {
    int t = ev.event_type;
    switch (t) {
    case IBV_EVENT_DEVICE_FATAL:
      snprintf(d->fatal_msg, sizeof(d->fatal_msg),
               "NET/IB: device %s reported a fatal error (%s, %s): every "
               "connection through it has failed; the NIC needs a reset or "
               "its driver reloaded", d->name, rcc_ib_event_name(t),
               rcc_ib_event_words(t));
      __atomic_store_n(&d->fatal, 1, __ATOMIC_RELEASE);
      RCC_WARN(-1, "%s", d->fatal_msg);
      break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
      if (ev.element.port_num != d->port)
        break;
      __atomic_store_n(&d->port_down, t == IBV_EVENT_PORT_ERR,
                       __ATOMIC_RELEASE);
      if (t == IBV_EVENT_PORT_ERR)
        RCC_WARN(-1, "NET/IB: port %s went down (%s): transfers through it "
                     "fail unless it comes back within the retry time "
                     "(RINGCC_IB_TIMEOUT, RINGCC_IB_RETRY_CNT)", d->label,
                 rcc_ib_event_name(t));
      else
        RCC_INFO(-1, "NET/IB: port %s is active again", d->label);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_CQ_ERR: {
      void *ctx = t == IBV_EVENT_CQ_ERR ? ev.element.cq->cq_context
                                        : ev.element.qp->qp_context;
      for (struct ib_comm *c = rcc_ib_state.live; c != NULL; c = c->live_next)
        if (c == ctx && !__atomic_load_n(&c->async_failed, __ATOMIC_ACQUIRE)) {
          snprintf(c->async_msg, sizeof(c->async_msg),
                   "NET/IB: %s of the connection %s %s on %s reported %s "
                   "(%s)", t == IBV_EVENT_CQ_ERR ? "the completion queue"
                                                 : "a queue pair",
                   dir_word(c), c->peer, d->label, rcc_ib_event_name(t),
                   rcc_ib_event_words(t));
          __atomic_store_n(&c->async_failed, 1, __ATOMIC_RELEASE);
        }
      break;
    }
    default:
      RCC_INFO(-1, "NET/IB: %s: event %s (%s)", d->label,
               rcc_ib_event_name(t), rcc_ib_event_words(t));
    }
    IBV->ack_async_event(&ev);
  }
}

void rcc_ib_async_drain(void) {
  pthread_mutex_lock(&rcc_ib_state.lock);
  async_drain_locked();
  pthread_mutex_unlock(&rcc_ib_state.lock);
}
