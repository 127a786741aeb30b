/*
 * fake_ibverbs.c - a stand-in for libibverbs, for tests of the verbs plugin
 * (transports/net_ib/) on machines without an RDMA device. The Makefile
 * builds it as $(BUILD)/test/libfakeibverbs.so; test_net_ib loads it through
 * RINGCC_IBVERBS_LIB.
 *
 * It implements the functions the plugin resolves, and the data-path ops
 * (post_send, post_recv, poll_cq, req_notify_cq) in each context's ops table,
 * for queue pairs of one process: an RDMA write copies the bytes into the
 * remote queue pair's memory at once and queues the completions; an RDMA
 * write with immediate takes a posted receive of the remote queue pair (or
 * waits for one, as a NIC retrying RNR would); completion channels and the
 * async event fd are pipes. Keys, bounds and access rights are checked as a
 * NIC would. Queue pair numbers are 0x100 + (pid mod 4096) * 0x1000 upwards,
 * so that ranks in other processes are never reached (their writes find no
 * queue pair: IBV_WC_RETRY_EXC_ERR).
 *
 * What it pretends, from the environment:
 *   FAKE_IBV_DEVICES    device names, comma-separated (default "fake0")
 *   FAKE_IBV_LINK       "eth": RoCE ports with a GID table of RoCE v1 and v2
 *                       entries; otherwise InfiniBand (LID 1)
 *   FAKE_IBV_PORT_STATE "down": every port is DOWN
 *   FAKE_IBV_FAULT      the error a VM cannot produce:
 *     retry_exceeded    an RDMA write of 128 bytes or more completes with
 *                       IBV_WC_RETRY_EXC_ERR (status 12, vendor error 0x81)
 *                       and its queue pair goes into ERR
 *     memlock           registrations count against RLIMIT_MEMLOCK (ENOMEM
 *                       beyond it), as for a process without CAP_IPC_LOCK
 *     rtr_timeout       ibv_modify_qp to RTR fails with ETIMEDOUT
 *     fatal             the first RDMA write of 128 bytes or more raises
 *                       IBV_EVENT_DEVICE_FATAL and completes nothing
 *     qp_fatal          ... raises IBV_EVENT_QP_FATAL on its queue pair
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* verbs.h makes these names macros (or inline wrappers) for its callers;
 * this file defines the functions themselves. */
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define API __attribute__((visibility("default")))
#define MAX_DEVS 8
#define MAX_QPS 4096
#define MAX_MRS 4096
#define RQ_DEPTH 1024
#define FAULT_MIN_BYTES 128

struct fctx {
  struct ibv_context ctx; /* first: the plugin sees a struct ibv_context */
  int async_wr;           /* the write end of async_fd's pipe */
};

struct fchan {
  struct ibv_comp_channel ch;
  int wr;
  struct ibv_cq *last;
};

struct fcq {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  int cap, head, count;
  int armed;
};

struct fqp {
  struct ibv_qp qp;
  uint32_t dest;
  int port;
  uint64_t rq[RQ_DEPTH]; /* posted receives (wr_id), a ring */
  int rq_head, rq_count;
  /* writes with immediate waiting for a receive (RNR): their completions */
  struct ibv_wc waiting[RQ_DEPTH];
  int nwaiting;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_device devs[MAX_DEVS];
static struct ibv_device *dev_list[MAX_DEVS + 1];
static int ndevs = -1;
static struct fqp *qps[MAX_QPS];
static struct ibv_mr *mrs[MAX_MRS];
/* Queue pair numbers and keys start at a base of this process's (pid mod
 * 4096, shifted), so that another process's numbers, which a test's ranks
 * exchange, never name something here: a write to them finds nobody. */
static uint32_t next_qpn, next_key;
static pid_t numbered_for;

static void number_once(void) {
  if (numbered_for == getpid())
    return;
  numbered_for = getpid();
  next_qpn = 0x100 + ((uint32_t)(getpid() % 4096) << 12);
  next_key = 0x1000 + ((uint32_t)(getpid() % 65536) << 16);
}
static size_t locked_bytes;
static struct fctx *ctxs[64];
static int nctx;
static int fatal_raised;

static const char *fault(void) {
  const char *f = getenv("FAKE_IBV_FAULT");
  return f ? f : "";
}

static int roce(void) {
  const char *l = getenv("FAKE_IBV_LINK");
  return l != NULL && strcmp(l, "eth") == 0;
}

static void list_devices(void) {
  const char *names = getenv("FAKE_IBV_DEVICES");
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", names ? names : "fake0");
  ndevs = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save);
       t != NULL && ndevs < MAX_DEVS; t = strtok_r(NULL, ",", &save)) {
    struct ibv_device *d = &devs[ndevs];
    memset(d, 0, sizeof(*d));
    d->node_type = IBV_NODE_CA;
    d->transport_type = IBV_TRANSPORT_IB;
    snprintf(d->name, sizeof(d->name), "%s", t);
    snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", ndevs);
    dev_list[ndevs++] = d;
  }
  dev_list[ndevs] = NULL;
}

API struct ibv_device **ibv_get_device_list(int *num) {
  pthread_mutex_lock(&lock);
  if (ndevs < 0)
    list_devices();
  if (num)
    *num = ndevs;
  pthread_mutex_unlock(&lock);
  return dev_list;
}

API void ibv_free_device_list(struct ibv_device **list) { (void)list; }

API const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

/* ---- completion queues ------------------------------------------------- */

static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc) {
  struct fcq *f = (struct fcq *)cq;
  if (f->count == f->cap) {
    fprintf(stderr, "fake_ibverbs: completion queue overrun (%d entries)\n",
            f->cap);
    abort();
  }
  f->ring[(f->head + f->count++) % f->cap] = *wc;
  if (f->armed && cq->channel != NULL) {
    struct fchan *ch = (struct fchan *)cq->channel;
    char b = 1;
    ch->last = cq;
    f->armed = 0;
    if (write(ch->wr, &b, 1) != 1)
      abort();
  }
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  struct fcq *f = (struct fcq *)cq;
  int k = 0;
  pthread_mutex_lock(&lock);
  while (k < n && f->count > 0) {
    wc[k++] = f->ring[f->head];
    f->head = (f->head + 1) % f->cap;
    f->count--;
  }
  pthread_mutex_unlock(&lock);
  return k;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited) {
  (void)solicited;
  pthread_mutex_lock(&lock);
  ((struct fcq *)cq)->armed = 1;
  pthread_mutex_unlock(&lock);
  return 0;
}

/* ---- memory -------------------------------------------------------------- */

static struct ibv_mr *mr_by_key(uint32_t key) {
  for (int i = 0; i < MAX_MRS; i++)
    if (mrs[i] && (mrs[i]->lkey == key || mrs[i]->rkey == key))
      return mrs[i];
  return NULL;
}

static int mr_covers(const struct ibv_mr *m, uint64_t addr, size_t len) {
  return addr >= (uintptr_t)m->addr &&
         addr + len <= (uintptr_t)m->addr + m->length;
}

/* The access flags a registration was made with (kept in the handle). */
#define MR_ACCESS(m) ((int)(m)->handle)

/* ---- queue pairs ----------------------------------------------------------- */

static struct fqp *qp_by_num(uint32_t n) {
  for (int i = 0; i < MAX_QPS; i++)
    if (qps[i] && qps[i]->qp.qp_num == n)
      return qps[i];
  return NULL;
}

static void raise_async(struct ibv_context *ctx, enum ibv_event_type t,
                        struct ibv_qp *qp) {
  struct ibv_async_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.event_type = t;
  if (qp)
    ev.element.qp = qp;
  else
    ev.element.port_num = 1;
  if (write(((struct fctx *)ctx)->async_wr, &ev, sizeof(ev)) != sizeof(ev))
    abort();
}

/* Receives waiting for a posted receive get one, in order. */
static void deliver_waiting(struct fqp *q) {
  while (q->nwaiting > 0 && q->rq_count > 0) {
    struct ibv_wc wc = q->waiting[0];
    memmove(q->waiting, q->waiting + 1,
            (size_t)(--q->nwaiting) * sizeof(q->waiting[0]));
    wc.wr_id = q->rq[q->rq_head];
    q->rq_head = (q->rq_head + 1) % RQ_DEPTH;
    q->rq_count--;
    cq_push(q->qp.recv_cq, &wc);
  }
}

static int local_ok(const struct ibv_sge *s) {
  struct ibv_mr *m = mr_by_key(s->lkey);
  return m != NULL && mr_covers(m, s->addr, s->length);
}

/* One work request; returns the completion status. */
static enum ibv_wc_status execute(struct fqp *q, const struct ibv_send_wr *wr,
                                  size_t len, uint32_t *vendor) {
  struct fqp *r = qp_by_num(q->dest);
  const char *f = fault();
  if (len >= FAULT_MIN_BYTES && wr->opcode != IBV_WR_RDMA_READ) {
    if (strcmp(f, "retry_exceeded") == 0) {
      *vendor = 0x81;
      return IBV_WC_RETRY_EXC_ERR;
    }
  }
  if (wr->num_sge > 0 && !local_ok(&wr->sg_list[0]))
    return IBV_WC_LOC_PROT_ERR;
  if (r == NULL || (r->qp.state != IBV_QPS_RTR && r->qp.state != IBV_QPS_RTS)) {
    *vendor = 0x81;
    return IBV_WC_RETRY_EXC_ERR; /* nobody answers */
  }
  uint64_t raddr = wr->wr.rdma.remote_addr;
  struct ibv_mr *m = len > 0 ? mr_by_key(wr->wr.rdma.rkey) : NULL;
  int need = wr->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ
                                            : IBV_ACCESS_REMOTE_WRITE;
  if (len > 0 && (m == NULL || !mr_covers(m, raddr, len) ||
                  !(MR_ACCESS(m) & need)))
    return IBV_WC_REM_ACCESS_ERR;
  if (wr->opcode == IBV_WR_RDMA_READ) {
    memcpy((void *)(uintptr_t)wr->sg_list[0].addr, (void *)(uintptr_t)raddr,
           len);
    return IBV_WC_SUCCESS;
  }
  if (len > 0)
    memcpy((void *)(uintptr_t)raddr, (void *)(uintptr_t)wr->sg_list[0].addr,
           len);
  if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = (uint32_t)len;
    wc.imm_data = wr->imm_data;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.qp_num = r->qp.qp_num;
    if (r->nwaiting == RQ_DEPTH)
      abort();
    r->waiting[r->nwaiting++] = wc;
    deliver_waiting(r);
  }
  return IBV_WC_SUCCESS;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                          struct ibv_send_wr **bad) {
  struct fqp *q = (struct fqp *)qp;
  pthread_mutex_lock(&lock);
  for (; wr != NULL; wr = wr->next) {
    if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
      *bad = wr;
      pthread_mutex_unlock(&lock);
      return EINVAL;
    }
    size_t len = 0;
    for (int i = 0; i < wr->num_sge; i++)
      len += wr->sg_list[i].length;
    const char *f = fault();
    if (len >= FAULT_MIN_BYTES && wr->opcode != IBV_WR_RDMA_READ &&
        (strcmp(f, "fatal") == 0 || strcmp(f, "qp_fatal") == 0)) {
      if (!fatal_raised) {
        fatal_raised = 1;
        if (strcmp(f, "fatal") == 0)
          for (int i = 0; i < nctx; i++)
            raise_async(&ctxs[i]->ctx, IBV_EVENT_DEVICE_FATAL, NULL);
        else
          raise_async(qp->context, IBV_EVENT_QP_FATAL, qp);
      }
      continue; /* nothing completes */
    }
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = wr->wr_id;
    wc.qp_num = qp->qp_num;
    wc.opcode = wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ
                                               : IBV_WC_RDMA_WRITE;
    uint32_t vendor = 0;
    wc.status = qp->state == IBV_QPS_ERR ? IBV_WC_WR_FLUSH_ERR
                                         : execute(q, wr, len, &vendor);
    wc.vendor_err = vendor;
    if (wc.status != IBV_WC_SUCCESS)
      qp->state = IBV_QPS_ERR; /* an error moves the queue pair to ERR */
    if (wc.status != IBV_WC_SUCCESS || (wr->send_flags & IBV_SEND_SIGNALED))
      cq_push(qp->send_cq, &wc);
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                          struct ibv_recv_wr **bad) {
  struct fqp *q = (struct fqp *)qp;
  pthread_mutex_lock(&lock);
  for (; wr != NULL; wr = wr->next) {
    if (q->rq_count == RQ_DEPTH || qp->state == IBV_QPS_RESET) {
      *bad = wr;
      pthread_mutex_unlock(&lock);
      return ENOMEM;
    }
    q->rq[(q->rq_head + q->rq_count++) % RQ_DEPTH] = wr->wr_id;
  }
  deliver_waiting(q);
  pthread_mutex_unlock(&lock);
  return 0;
}

/* ---- contexts, ports, GIDs ------------------------------------------------- */

API struct ibv_context *ibv_open_device(struct ibv_device *d) {
  struct fctx *f = calloc(1, sizeof(*f));
  int p[2];
  if (f == NULL || pipe(p) != 0) {
    free(f);
    return NULL;
  }
  f->ctx.device = d;
  f->ctx.async_fd = p[0];
  f->async_wr = p[1];
  f->ctx.num_comp_vectors = 1;
  f->ctx.ops.poll_cq = fake_poll_cq;
  f->ctx.ops.req_notify_cq = fake_req_notify_cq;
  f->ctx.ops.post_send = fake_post_send;
  f->ctx.ops.post_recv = fake_post_recv;
  pthread_mutex_init(&f->ctx.mutex, NULL);
  pthread_mutex_lock(&lock);
  if (nctx < 64)
    ctxs[nctx++] = f;
  pthread_mutex_unlock(&lock);
  return &f->ctx;
}

API int ibv_close_device(struct ibv_context *ctx) {
  struct fctx *f = (struct fctx *)ctx;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nctx; i++)
    if (ctxs[i] == f)
      ctxs[i] = ctxs[--nctx];
  pthread_mutex_unlock(&lock);
  close(ctx->async_fd);
  close(f->async_wr);
  free(f);
  return 0;
}

API int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
  (void)ctx;
  memset(a, 0, sizeof(*a));
  a->phys_port_cnt = 1;
  a->max_qp = MAX_QPS;
  a->max_qp_wr = RQ_DEPTH;
  a->max_sge = 4;
  a->max_cqe = 1 << 16;
  a->max_mr = MAX_MRS;
  return 0;
}

/* The exported symbol fills the attributes libibverbs 1.1 had (verbs.h's
 * inline wrapper calls a newer entry point; the plugin calls this one). */
API int ibv_query_port(struct ibv_context *ctx, uint8_t port,
                       struct _compat_ibv_port_attr *compat) {
  const char *st = getenv("FAKE_IBV_PORT_STATE");
  struct ibv_port_attr full, *a = &full;
  (void)ctx;
  if (port != 1)
    return EINVAL;
  memset(a, 0, sizeof(*a));
  a->state = st && strcmp(st, "down") == 0 ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_2048;
  a->gid_tbl_len = 8;
  a->link_layer = roce() ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  a->lid = roce() ? 0 : 1;
  memcpy(compat, a, offsetof(struct ibv_port_attr, flags));
  return 0;
}

/* The GID table: InfiniBand one entry; RoCE fe80::1 and ::ffff:10.0.0.1,
 * each as RoCE v1 and v2. */
static int gid_entry(int i, union ibv_gid *g, uint32_t *type) {
  static const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                 0, 0, 0, 1};
  static const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
                                 10, 0, 0, 1};
  static const uint8_t ib[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x02,
                                 0xc9, 0x03, 0, 0x01, 0, 0x01};
  memset(g, 0, sizeof(*g));
  if (!roce()) {
    if (i != 0)
      return ENODATA;
    memcpy(g->raw, ib, 16);
    *type = IBV_GID_TYPE_IB;
    return 0;
  }
  if (i > 3)
    return ENODATA;
  memcpy(g->raw, i < 2 ? ll : v4, 16);
  *type = i % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  return 0;
}

API int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
                      union ibv_gid *gid) {
  uint32_t type;
  (void)ctx, (void)port;
  gid_entry(index, gid, &type); /* empty entries read as zeros */
  return 0;
}

API int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port,
                          uint32_t index, struct ibv_gid_entry *e,
                          uint32_t flags, size_t size) {
  (void)ctx, (void)flags, (void)size;
  memset(e, 0, sizeof(*e));
  e->gid_index = index;
  e->port_num = port;
  int r = gid_entry((int)index, &e->gid, &e->gid_type);
  if (r != 0)
    errno = r;
  return r;
}

/* ---- protection domains, memory regions ------------------------------------ */

API struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
  struct ibv_pd *pd = calloc(1, sizeof(*pd));
  if (pd)
    pd->context = ctx;
  return pd;
}

API int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
                              int access) {
  struct rlimit rl;
  pthread_mutex_lock(&lock);
  if (strcmp(fault(), "memlock") == 0 &&
      getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      locked_bytes + length > rl.rlim_cur) {
    pthread_mutex_unlock(&lock);
    errno = ENOMEM;
    return NULL;
  }
  int slot = -1;
  for (int i = 0; i < MAX_MRS && slot < 0; i++)
    if (mrs[i] == NULL)
      slot = i;
  struct ibv_mr *m = slot >= 0 ? calloc(1, sizeof(*m)) : NULL;
  if (m == NULL) {
    pthread_mutex_unlock(&lock);
    errno = ENOMEM;
    return NULL;
  }
  m->context = pd->context;
  m->pd = pd;
  m->addr = addr;
  m->length = length;
  m->handle = (uint32_t)access;
  number_once();
  m->lkey = next_key++;
  m->rkey = next_key++;
  mrs[slot] = m;
  locked_bytes += length;
  pthread_mutex_unlock(&lock);
  return m;
}

API int ibv_dereg_mr(struct ibv_mr *m) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_MRS; i++)
    if (mrs[i] == m)
      mrs[i] = NULL;
  locked_bytes -= m->length;
  pthread_mutex_unlock(&lock);
  free(m);
  return 0;
}

/* ---- completion channels and queues ----------------------------------------- */

API struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx) {
  struct fchan *c = calloc(1, sizeof(*c));
  int p[2];
  if (c == NULL || pipe(p) != 0) {
    free(c);
    return NULL;
  }
  c->ch.context = ctx;
  c->ch.fd = p[0];
  c->wr = p[1];
  return &c->ch;
}

API int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
  struct fchan *c = (struct fchan *)ch;
  close(ch->fd);
  close(c->wr);
  free(c);
  return 0;
}

API struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe,
                                 void *cq_context,
                                 struct ibv_comp_channel *ch, int vector) {
  struct fcq *f = calloc(1, sizeof(*f));
  (void)vector;
  if (f == NULL || (f->ring = calloc((size_t)cqe, sizeof(*f->ring))) == NULL) {
    free(f);
    return NULL;
  }
  f->cap = cqe;
  f->cq.context = ctx;
  f->cq.channel = ch;
  f->cq.cq_context = cq_context;
  f->cq.cqe = cqe;
  return &f->cq;
}

API int ibv_destroy_cq(struct ibv_cq *cq) {
  struct fcq *f = (struct fcq *)cq;
  free(f->ring);
  free(f);
  return 0;
}

API int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
                         void **cq_context) {
  struct fchan *c = (struct fchan *)ch;
  char b;
  if (read(ch->fd, &b, 1) != 1)
    return -1;
  *cq = c->last;
  *cq_context = c->last ? c->last->cq_context : NULL;
  return 0;
}

API void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) {
  (void)cq, (void)n;
}

API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
                                 struct ibv_qp_init_attr *a) {
  struct fqp *q = calloc(1, sizeof(*q));
  if (q == NULL)
    return NULL;
  pthread_mutex_lock(&lock);
  int slot = -1;
  for (int i = 0; i < MAX_QPS && slot < 0; i++)
    if (qps[i] == NULL)
      slot = i;
  if (slot < 0) {
    pthread_mutex_unlock(&lock);
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  number_once();
  q->qp.qp_num = next_qpn++;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = a->qp_type;
  qps[slot] = q;
  pthread_mutex_unlock(&lock);
  return &q->qp;
}

API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  struct fqp *q = (struct fqp *)qp;
  if (!(mask & IBV_QP_STATE))
    return 0;
  if (a->qp_state == IBV_QPS_RTR && strcmp(fault(), "rtr_timeout") == 0)
    return ETIMEDOUT;
  pthread_mutex_lock(&lock);
  if (mask & IBV_QP_DEST_QPN)
    q->dest = a->dest_qp_num;
  if (mask & IBV_QP_PORT)
    q->port = a->port_num;
  qp->state = a->qp_state;
  if (a->qp_state == IBV_QPS_ERR) /* posted receives are flushed */
    while (q->rq_count > 0) {
      struct ibv_wc wc;
      memset(&wc, 0, sizeof(wc));
      wc.wr_id = q->rq[q->rq_head];
      wc.status = IBV_WC_WR_FLUSH_ERR;
      wc.qp_num = qp->qp_num;
      q->rq_head = (q->rq_head + 1) % RQ_DEPTH;
      q->rq_count--;
      cq_push(qp->recv_cq, &wc);
    }
  pthread_mutex_unlock(&lock);
  return 0;
}

API int ibv_destroy_qp(struct ibv_qp *qp) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_QPS; i++)
    if (qps[i] == (struct fqp *)qp)
      qps[i] = NULL;
  pthread_mutex_unlock(&lock);
  free(qp);
  return 0;
}

/* ---- async events ------------------------------------------------------------ */

API int ibv_get_async_event(struct ibv_context *ctx,
                            struct ibv_async_event *ev) {
  if (read(ctx->async_fd, ev, sizeof(*ev)) != (ssize_t)sizeof(*ev))
    return -1;
  return 0;
}

API void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }
