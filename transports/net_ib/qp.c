/*
 * qp.c - the verbs plugin's connections: a connection's completion queue,
 * queue pairs and clear-to-send ring made, its queue pairs moved to RTS
 * towards the peer's, and everything freed.
 */
#include "ib.h"

/* Records the connection's first failure; every later call reports it. */
ringcc_result_t rcc_ib_comm_fail(struct ib_comm *c, ringcc_result_t code,
                                 const char *fmt, ...) {
  va_list ap;
  if (c->error != RINGCC_SUCCESS)
    return c->error;
  c->error = code;
  va_start(ap, fmt);
  vsnprintf(c->message, sizeof(c->message), fmt, ap);
  va_end(ap);
  return code;
}

static uint32_t random_psn(void) {
  uint32_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
    v = (uint32_t)rcc_now_ns() ^ (uint32_t)getpid() << 8;
  return v & 0xffffff;
}

static const char *qp_state_name(enum ibv_qp_state s) {
  switch (s) {
  case IBV_QPS_INIT:
    return "INIT";
  case IBV_QPS_RTR:
    return "RTR (ready to receive)";
  case IBV_QPS_RTS:
    return "RTS (ready to send)";
  case IBV_QPS_ERR:
    return "ERR";
  default:
    return "?";
  }
}

/* Why moving to RTR/RTS may have failed, beyond errno. */
static void rtr_hint(const struct ib_comm *c, char *buf, size_t len) {
  char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
  if (rcc_ib_state.dev.link_layer == IBV_LINK_LAYER_ETHERNET)
    snprintf(buf, len, " (RoCE: the peer's GID %s cannot be reached from "
             "GID index %d (%s) of this port: check RINGCC_IB_GID_INDEX on "
             "both hosts and that their RoCE interfaces are up and route to "
             "each other)", rcc_ib_gid_str(c->remote.gid, a, sizeof(a)),
             rcc_ib_state.dev.gid_index, rcc_ib_gid_str(rcc_ib_state.dev.gid, b, sizeof(b)));
  else
    snprintf(buf, len, " (InfiniBand: the peer's LID is %u; is a subnet "
             "manager running?)", (unsigned)c->remote.lid);
}

static ringcc_result_t qp_modify(struct ib_comm *c, struct ibv_qp *qp,
                                 struct ibv_qp_attr *a, int mask) {
  int e = IBV->modify_qp(qp, a, mask);
  if (e == 0)
    return RINGCC_SUCCESS;
  char hint[400] = "";
  if (a->qp_state == IBV_QPS_RTR || a->qp_state == IBV_QPS_RTS)
    rtr_hint(c, hint, sizeof(hint));
  return rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                   "NET/IB: moving queue pair 0x%x of the connection %s %s "
                   "on %s to %s failed: %s%s", qp->qp_num, dir_word(c),
                   c->peer, rcc_ib_state.dev.label, qp_state_name(a->qp_state),
                   strerror(e > 0 ? e : errno), hint);
}

ringcc_result_t rcc_ib_qp_create(struct ib_comm *c, struct ibv_qp **out) {
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.qp_context = c;
  ia.send_cq = ia.recv_cq = c->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = c->sq_max;
  ia.cap.max_recv_wr = c->sq_max;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  *out = IBV->create_qp(rcc_ib_state.dev.pd, &ia);
  if (*out == NULL)
    return rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: cannot create a queue pair on %s: %s",
                     rcc_ib_state.dev.label, strerror(errno));
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = (uint8_t)rcc_ib_state.dev.port;
  a.qp_access_flags = ACCESS_ALL;
  return qp_modify(c, *out, &a,
                   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                       IBV_QP_ACCESS_FLAGS);
}

/* INIT -> RTR -> RTS towards the remote queue pair qpn of info. */
ringcc_result_t rcc_ib_qp_connect(struct ib_comm *c, struct ibv_qp *qp,
                                  const struct qp_info *info, uint32_t qpn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = info->mtu < rcc_ib_state.dev.mtu ? (enum ibv_mtu)info->mtu
                                        : rcc_ib_state.dev.mtu;
  a.dest_qp_num = qpn;
  a.rq_psn = info->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = (uint8_t)rcc_ib_state.dev.port;
  a.ah_attr.sl = (uint8_t)rcc_ib_state.set.sl;
  if (rcc_ib_state.dev.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, info->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)rcc_ib_state.dev.gid_index;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = (uint8_t)rcc_ib_state.set.tc;
  } else {
    a.ah_attr.dlid = info->lid;
  }
  ringcc_result_t r = qp_modify(
      c, qp, &a,
      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (r != RINGCC_SUCCESS)
    return r;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)rcc_ib_state.set.timeout;
  a.retry_cnt = (uint8_t)rcc_ib_state.set.retry_cnt;
  a.rnr_retry = 7; /* infinite: a receiver always reposts */
  a.sq_psn = c->local.psn;
  a.max_rd_atomic = 1;
  return qp_modify(c, qp, &a,
                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Every queue pair to ERR: the NIC stops reading and writing their memory. */
void rcc_ib_qps_to_error(struct ib_comm *c) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_ERR;
  for (int q = 0; q < c->nqps; q++)
    if (c->qps[q])
      IBV->modify_qp(c->qps[q], &a, IBV_QP_STATE);
}

/* What a request holds: its cache entries (the NIC no longer reads them). */
void rcc_ib_req_release(struct ib_req *r) {
  rcc_ib_cache_put(r->reg);
  rcc_ib_cache_put(r->treg);
  r->reg = r->treg = NULL;
}

void rcc_ib_comm_free(struct ib_comm *c) {
  if (c == NULL)
    return;
  for (int q = 0; q < c->nqps; q++)
    if (c->qps[q])
      IBV->destroy_qp(c->qps[q]);
  if (c->flush_qp)
    IBV->destroy_qp(c->flush_qp);
  for (int i = 0; i < MAX_REQ; i++) /* the NIC no longer reads them */
    if (c->reqs[i].state != REQ_FREE)
      rcc_ib_req_release(&c->reqs[i]);
  if (c->cq)
    IBV->destroy_cq(c->cq);
  if (c->chan)
    IBV->destroy_comp_channel(c->chan);
  if (c->cts_mr)
    IBV->dereg_mr(c->cts_mr);
  if (c->bounce_mr)
    IBV->dereg_mr(c->bounce_mr);
  if (c->flush_mr)
    IBV->dereg_mr(c->flush_mr);
  free(c->cts);
  free(c->bounce);
  free(c->flush_buf);
  if (c->fd >= 0)
    close(c->fd);
  free(c);
}

/* A send or receive comm with nqps queue pairs in INIT. */
ringcc_result_t rcc_ib_comm_new(int kind, int nqps, struct ib_comm **out,
                                char *err, size_t errlen) {
  struct ib_comm *c = calloc(1, sizeof(*c));
  *out = NULL;
  if (c == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  c->kind = kind;
  c->fd = -1;
  c->nqps = nqps;
  c->sq_max = MAX_REQ + 8;
  snprintf(c->peer, sizeof(c->peer), "?");
  for (int i = 0; i < MAX_REQ; i++)
    c->freel[c->nfree++] = &c->reqs[MAX_REQ - 1 - i];
  ringcc_result_t r = RINGCC_SUCCESS;
  int cqe = (nqps + 2) * (2 * MAX_REQ + 16);
  if ((c->chan = IBV->create_comp_channel(rcc_ib_state.dev.ctx)) == NULL ||
      (c->cq = IBV->create_cq(rcc_ib_state.dev.ctx, cqe, c, c->chan, 0)) == NULL)
    r = rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                  "NET/IB: cannot create a completion %s of %d entries on "
                  "%s: %s", c->chan ? "queue" : "channel", cqe,
                  rcc_ib_state.dev.label, strerror(errno));
  if (r == RINGCC_SUCCESS) {
    int fl = fcntl(c->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(c->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0)
      r = rcc_ib_comm_fail(c, RINGCC_ERR_SYSTEM,
                    "NET/IB: cannot make a completion channel nonblocking: "
                    "%s", strerror(errno));
  }
  for (int q = 0; q < nqps && r == RINGCC_SUCCESS; q++)
    r = rcc_ib_qp_create(c, &c->qps[q]);
  if (r == RINGCC_SUCCESS) {
    size_t bytes = CTS_RING * sizeof(struct cts);
    if (posix_memalign((void **)&c->cts, 4096, bytes) != 0) {
      c->cts = NULL;
      r = rcc_ib_comm_fail(c, RINGCC_ERR_OUT_OF_MEMORY, "NET/IB: out of memory");
    } else {
      memset(c->cts, 0, bytes);
      c->cts_mr = IBV->reg_mr(rcc_ib_state.dev.pd, c->cts, bytes, ACCESS_ALL);
      if (c->cts_mr == NULL)
        r = c->error = rcc_ib_reg_error(bytes, "a clear-to-send ring", errno,
                                 c->message, sizeof(c->message));
    }
  }
  if (r != RINGCC_SUCCESS) {
    snprintf(err, errlen, "%s", c->message);
    rcc_ib_comm_free(c);
    return r;
  }
  struct qp_info *l = &c->local;
  l->nqps = (uint32_t)nqps;
  for (int q = 0; q < nqps; q++)
    l->qpn[q] = c->qps[q]->qp_num;
  l->psn = random_psn();
  l->lid = rcc_ib_state.dev.lid;
  l->link_layer = (uint8_t)rcc_ib_state.dev.link_layer;
  l->mtu = (uint8_t)rcc_ib_state.dev.mtu;
  memcpy(l->gid, rcc_ib_state.dev.gid, 16);
  l->gid_index = (uint32_t)rcc_ib_state.dev.gid_index;
  if (kind == COMM_SEND) {
    l->cts_addr = (uint64_t)(uintptr_t)c->cts;
    l->cts_rkey = c->cts_mr->rkey;
  }
  snprintf(l->dev, sizeof(l->dev), "%.31s", rcc_ib_state.dev.label);
  *out = c;
  return RINGCC_SUCCESS;
}
