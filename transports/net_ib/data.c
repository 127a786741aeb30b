/*
 * data.c - the verbs plugin's data path (isend, irecv, test, redirect,
 * rebase, the fds to poll, close) and its table, rcc_net_ib. ib.h says how
 * the plugin works and which file holds what.
 */
#include "ib.h"

/* ==== the data path ======================================================= */

static struct ib_req *req_new(struct ib_comm *c, int is_send) {
  if (c->nfree == 0)
    return NULL;
  struct ib_req *r = c->freel[--c->nfree];
  memset(r, 0, sizeof(*r));
  r->c = c;
  r->is_send = is_send;
  r->state = REQ_QUEUED;
  r->seq = c->tail;
  c->queue[c->tail % MAX_REQ] = r;
  c->tail++;
  return r;
}

static int req_index(const struct ib_req *r) {
  return (int)(r - r->c->reqs);
}


static void req_free(struct ib_req *r) {
  rcc_ib_req_release(r);
  r->state = REQ_FREE;
  r->c->freel[r->c->nfree++] = r;
}

static int inside(const struct ib_mr *m, const void *p, size_t len) {
  return m != NULL && (const char *)p >= m->addr &&
         (const char *)p + len <= m->addr + m->bytes;
}

static const char *peer_gone_cause(const struct ib_comm *c, char *buf,
                                   size_t len) {
  char a[INET6_ADDRSTRLEN];
  size_t off = (size_t)snprintf(
      buf, len, "the peer's NIC did not acknowledge within %d retries of "
      "%.1f ms: the peer process may have died, or the route between the "
      "hosts is broken (link, cable, switch)", rcc_ib_state.set.retry_cnt,
      4.096e-3 * (double)(1LL << rcc_ib_state.set.timeout));
  if (rcc_ib_state.dev.link_layer == IBV_LINK_LAYER_ETHERNET && off < len)
    off += (size_t)snprintf(buf + off, len - off,
                            ", or the GID index is wrong on one side (this "
                            "rank uses GID %d, %s; RINGCC_IB_GID_INDEX)",
                            rcc_ib_state.dev.gid_index,
                            rcc_ib_gid_str(rcc_ib_state.dev.gid, a, sizeof(a)));
  if (__atomic_load_n(&rcc_ib_state.dev.port_down, __ATOMIC_ACQUIRE) && off < len)
    snprintf(buf + off, len - off, "; port %s went down (IBV_EVENT_PORT_ERR)",
             rcc_ib_state.dev.label);
  (void)c;
  return buf;
}

/* An error completion: the connection fails, naming the status in words
 * and its likely cause. */
static void wc_fail(struct ib_comm *c, const struct ibv_wc *wc) {
  int type = WRID_TYPE(wc->wr_id), st = wc->status;
  char cause[400] = "";
  if (c->error != RINGCC_SUCCESS)
    return; /* the flushed requests after the first error */
  const char *what = type == WR_DATA    ? "RDMA write of a message"
                     : type == WR_CTS   ? "RDMA write of a clear-to-send entry"
                     : type == WR_FLUSH ? "flush read of received data"
                                        : "receive";
  switch (st) {
  case IBV_WC_RETRY_EXC_ERR:
    peer_gone_cause(c, cause, sizeof(cause));
    break;
  case IBV_WC_RNR_RETRY_EXC_ERR:
    snprintf(cause, sizeof(cause), "the peer had no receive posted in time");
    break;
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_REM_OP_ERR:
    snprintf(cause, sizeof(cause), "the peer's NIC refused it (its memory is "
                                   "no longer registered: is it closing?)");
    break;
  case IBV_WC_LOC_PROT_ERR:
  case IBV_WC_LOC_ACCESS_ERR:
  case IBV_WC_LOC_LEN_ERR:
    snprintf(cause, sizeof(cause), "local memory was not registered as "
                                   "needed (a bug in NET/IB)");
    break;
  case IBV_WC_WR_FLUSH_ERR:
    snprintf(cause, sizeof(cause), "the queue pair had gone into the error "
                                   "state");
    break;
  default:
    snprintf(cause, sizeof(cause), "see the NIC's documentation");
  }
  rcc_ib_side_read(c); /* a peer that died has closed its side channel too */
  int gone = c->side_end != 0;
  rcc_ib_comm_fail(c, gone ? RINGCC_ERR_PEER_FAILED : RINGCC_ERR_NETWORK,
            "NET/IB: %s %s %s on %s failed: %s (%s, status %d, vendor error "
            "0x%x): %s%s", what, dir_word(c), c->peer, rcc_ib_state.dev.label,
            rcc_ib_wc_status_words(st), rcc_ib_wc_status_name(st), st,
            (unsigned)wc->vendor_err, cause,
            gone ? "; its side channel has ended too: the peer is gone" : "");
}

static void handle_wc(struct ib_comm *c, const struct ibv_wc *wc) {
  int type = WRID_TYPE(wc->wr_id), q = WRID_QP(wc->wr_id);
  int idx = WRID_IDX(wc->wr_id);
  uint32_t seq = WRID_SEQ(wc->wr_id);
  struct ib_req *r = idx < MAX_REQ ? &c->reqs[idx] : NULL;
  if (type == WR_DATA || type == WR_CTS)
    c->sq_out[q < MAX_QPS ? q : 0]--;
  if (type == WR_DATA && (r == NULL || r->state != REQ_ISSUED ||
                          (uint32_t)r->seq != seq))
    return; /* a write given up on (side_gone): nobody waits for it */
  if (wc->status != IBV_WC_SUCCESS) {
    wc_fail(c, wc);
    return;
  }
  switch (type) {
  case WR_DATA:
    if ((uint32_t)r->seq == seq && r->parts_left > 0)
      r->parts_left--;
    break;
  case WR_CTS:
    break;
  case WR_CTS_IN: {
    uint32_t imm = ntohl(wc->imm_data);
    if (imm != (uint32_t)c->cts_count) {
      rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: clear-to-send entry %u from "
                "%s arrived where %u was due", (unsigned)imm, c->peer,
                (unsigned)c->cts_count);
      return;
    }
    c->cts_count++;
    rcc_ib_post_cts_recvs(c, 1);
    break;
  }
  case WR_DATA_IN: {
    uint32_t imm = ntohl(wc->imm_data);
    if (r == NULL || (uint32_t)r->seq != seq || r->parts_left <= 0) {
      rcc_ib_comm_fail(c, RINGCC_ERR_INTERNAL, "NET/IB: a message from %s matches "
                "no receive", c->peer);
      return;
    }
    if (r->parts_left < c->nqps && imm != r->imm) {
      rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: the parts of message %llu "
                "from %s carry different immediates (0x%08x, 0x%08x)",
                (unsigned long long)r->seq, c->peer, (unsigned)r->imm,
                (unsigned)imm);
      return;
    }
    r->imm = imm;
    r->bytes += wc->byte_len;
    if (--r->parts_left == 0)
      c->arrived++;
    break;
  }
  case WR_FLUSH:
    r->flushing = 0;
    __atomic_fetch_add(&rcc_ib_state.flushes, 1, __ATOMIC_RELAXED);
    break;
  default:
    rcc_ib_comm_fail(c, RINGCC_ERR_INTERNAL, "NET/IB: a completion of unknown kind "
              "%d", type);
  }
}

/* Consumes the completion channel's events (nonblocking); disarms. */
static void drain_chan(struct ib_comm *c) {
  struct ibv_cq *cq;
  void *ctx;
  while (IBV->get_cq_event(c->chan, &cq, &ctx) == 0)
    IBV->ack_cq_events(cq, 1);
  c->armed = 0;
}

/* Processes every completion there is; returns how many. */
static int poll_cq(struct ib_comm *c) {
  struct ibv_wc wc[32];
  int total = 0;
  for (;;) {
    int n = ibv_poll_cq(c->cq, 32, wc);
    if (n < 0) {
      rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: polling the completion queue "
                "of the connection %s %s failed", dir_word(c), c->peer);
      return total;
    }
    for (int i = 0; i < n; i++)
      handle_wc(c, &wc[i]);
    total += n;
    if (n < 32)
      break;
  }
  if (total > 0 && c->armed)
    drain_chan(c); /* the event those completions raised */
  return total;
}

static ringcc_result_t post_write(struct ib_comm *c, int q, uint64_t wr_id,
                                  const void *src, size_t len, uint32_t lkey,
                                  uint64_t raddr, uint32_t rkey, uint32_t imm,
                                  const char *what) {
  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = (uint32_t)len,
                        .lkey = lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = len > 0 ? &sge : NULL;
  wr.num_sge = len > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = htonl(imm);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  int e = ibv_post_send(c->qps[q], &wr, &bad);
  if (e != 0)
    return rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: posting the RDMA write of %s to %s on %s "
                     "failed: %s", what, c->peer, rcc_ib_state.dev.label, strerror(e));
  c->sq_out[q]++;
  return RINGCC_SUCCESS;
}

/* Where part q of n of a message of bytes starts (64-byte aligned). */
static size_t part_off(size_t bytes, int q, int n) {
  if (q == n)
    return bytes;
  return (size_t)((unsigned __int128)bytes * (unsigned)q / (unsigned)n) &
         ~(size_t)63;
}

/* Sender: writes the queued messages whose CTS entries have come. */
static void issue(struct ib_comm *c) {
  while (c->error == RINGCC_SUCCESS && c->next < c->tail &&
         c->cts_count > c->next) {
    struct ib_req *r = c->queue[c->next % MAX_REQ];
    const struct cts *e = &c->cts[r->seq % CTS_RING];
    const uint8_t *p = (const uint8_t *)e;
    uint64_t addr = get64(&p), home_addr = get64(&p);
    uint32_t rkey = get32(&p), home_rkey = get32(&p);
    uint32_t size = get32(&p), home_size = get32(&p), seq = get32(&p);
    if (seq != (uint32_t)r->seq) {
      rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: the clear-to-send entry for "
                "message %llu from %s names message %u",
                (unsigned long long)r->seq, c->peer, (unsigned)seq);
      return;
    }
    if (r->bytes > size) { /* longer than a redirected receive: its slot */
      addr = home_addr;
      rkey = home_rkey;
      size = home_size;
    }
    if (r->bytes > size) {
      rcc_ib_comm_fail(c, RINGCC_ERR_INVALID_USAGE, "NET/IB: a message of %zu bytes "
                "to %s is longer than the receive buffer there (%u bytes): "
                "do all ranks use the same RINGCC_NET_CHUNK_BYTES?",
                r->bytes, c->peer, (unsigned)size);
      return;
    }
    for (int q = 0; q < c->nqps; q++)
      if (c->sq_out[q] >= c->sq_max)
        return; /* completions first */
    for (int q = 0; q < c->nqps; q++) {
      size_t off = part_off(r->bytes, q, c->nqps);
      size_t len = part_off(r->bytes, q + 1, c->nqps) - off;
      if (post_write(c, q, WRID(WR_DATA, q, req_index(r), r->seq),
                     r->src ? r->src + off : NULL, len, r->lkey, addr + off,
                     rkey, r->imm, "a message") != RINGCC_SUCCESS)
        return;
    }
    r->parts_left = c->nqps;
    r->state = REQ_ISSUED;
    c->next++;
  }
}

static uint32_t clamp32(size_t v) {
  return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* Receiver: grants the posted receives, at most CTS_WINDOW ahead of the
 * messages that arrived: a receive for each part, then the CTS entry. */
static void grant(struct ib_comm *c) {
  while (c->error == RINGCC_SUCCESS && c->next < c->tail &&
         c->next - c->arrived < CTS_WINDOW && c->sq_out[0] < c->sq_max) {
    struct ib_req *r = c->queue[c->next % MAX_REQ];
    for (int q = 0; q < c->nqps; q++) {
      struct ibv_recv_wr wr, *bad;
      memset(&wr, 0, sizeof(wr));
      wr.wr_id = WRID(WR_DATA_IN, q, req_index(r), r->seq);
      int e = ibv_post_recv(c->qps[q], &wr, &bad);
      if (e != 0) {
        rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: posting a receive on the "
                  "connection from %s (%s) failed: %s", c->peer,
                  rcc_ib_state.dev.label, strerror(e));
        return;
      }
    }
    struct cts *e = &c->cts[r->seq % CTS_RING];
    uint8_t *p = (uint8_t *)e;
    put64(&p, (uint64_t)(uintptr_t)r->target);
    put64(&p, (uint64_t)(uintptr_t)r->home);
    put32(&p, r->target_rkey);
    put32(&p, r->home_rkey);
    put32(&p, clamp32(r->target_bytes));
    put32(&p, clamp32(r->home_bytes));
    put32(&p, (uint32_t)r->seq);
    r->granted = 1;
    r->parts_left = c->nqps;
    r->state = REQ_ISSUED;
    c->next++;
    if (post_write(c, 0, WRID(WR_CTS, 0, req_index(r), r->seq), e,
                   sizeof(*e), c->cts_mr->lkey,
                   c->remote.cts_addr + (r->seq % CTS_RING) * sizeof(*e),
                   c->remote.cts_rkey, (uint32_t)r->seq,
                   "a clear-to-send entry") != RINGCC_SUCCESS)
      return;
  }
}

/* The loopback queue pair that flushes device memory, made on first need. */
static ringcc_result_t flush_setup(struct ib_comm *c) {
  if (posix_memalign((void **)&c->flush_buf, 64, 64) != 0) {
    c->flush_buf = NULL;
    return rcc_ib_comm_fail(c, RINGCC_ERR_OUT_OF_MEMORY, "NET/IB: out of memory");
  }
  c->flush_mr = IBV->reg_mr(rcc_ib_state.dev.pd, c->flush_buf, 64, ACCESS_ALL);
  if (c->flush_mr == NULL)
    return c->error = rcc_ib_reg_error(64, "the flush buffer", errno, c->message,
                                sizeof(c->message));
  ringcc_result_t r = rcc_ib_qp_create(c, &c->flush_qp);
  if (r != RINGCC_SUCCESS)
    return r;
  struct qp_info self = c->local;
  self.psn = c->local.psn;
  return rcc_ib_qp_connect(c, c->flush_qp, &self, c->flush_qp->qp_num);
}

/* Receiver: reads one byte of what the NIC wrote into device memory, so the
 * data is in GPU memory before the receive completes (PCIe ordering). */
static void post_flush(struct ib_comm *c, struct ib_req *r, int at_home) {
  if (c->flush_qp == NULL && flush_setup(c) != RINGCC_SUCCESS)
    return;
  struct ibv_sge sge = {.addr = (uintptr_t)c->flush_buf, .length = 1,
                        .lkey = c->flush_mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = WRID(WR_FLUSH, 0, req_index(r), r->seq);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uintptr_t)(at_home ? r->home : r->target);
  wr.wr.rdma.rkey = at_home ? r->home_rkey : r->target_rkey;
  int e = ibv_post_send(c->flush_qp, &wr, &bad);
  if (e != 0) {
    rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: posting the flush read on %s "
              "failed: %s", rcc_ib_state.dev.label, strerror(e));
    return;
  }
  r->flushing = 1;
  r->flushed = 1;
}

/* Completes the oldest requests whose parts (and flush) are all done, in
 * order. */
static void retire(struct ib_comm *c) {
  while (c->error == RINGCC_SUCCESS && c->head < c->next) {
    struct ib_req *r = c->queue[c->head % MAX_REQ];
    if (r->parts_left > 0 || r->flushing)
      return;
    if (!r->is_send && !r->flushed && r->bytes > 0) {
      int at_home = r->bytes > r->target_bytes;
      if (at_home ? r->home_flush : r->target_flush) {
        post_flush(c, r, at_home);
        return;
      }
    }
    r->state = REQ_DONE;
    c->head++;
  }
}

/* The side channel ended: messages that came first are taken, then what
 * still waits fails (a zero-byte send to a receiver that closed cleanly is
 * done: nothing listens for it). */
static void side_gone(struct ib_comm *c) {
  poll_cq(c);
  retire(c);
  if (c->error != RINGCC_SUCCESS || c->tail == c->head)
    return;
  if (c->kind == COMM_SEND && c->side_end == 2) {
    /* Empty messages (a goodbye) to a receiver that closed cleanly are done,
     * written or not: a write it took may just not be acknowledged yet. */
    while (c->head < c->tail && c->queue[c->head % MAX_REQ]->bytes == 0) {
      struct ib_req *r = c->queue[c->head % MAX_REQ];
      r->state = REQ_DONE;
      if (c->next == c->head)
        c->next++;
      c->head++;
    }
    if (c->tail == c->head)
      return;
    rcc_ib_comm_fail(c, RINGCC_ERR_PEER_FAILED,
              "NET/IB: %s closed its receiving end (its communicator was "
              "destroyed?) with %llu message%s of this rank not taken",
              c->peer, (unsigned long long)(c->tail - c->head),
              c->tail - c->head == 1 ? "" : "s");
    return;
  }
  rcc_ib_comm_fail(c, RINGCC_ERR_PEER_FAILED,
            "NET/IB: the connection %s %s ended (%s) with %llu message%s "
            "still to %s: the peer process %s", dir_word(c), c->peer,
            c->side_err, (unsigned long long)(c->tail - c->head),
            c->tail - c->head == 1 ? "" : "s",
            c->kind == COMM_SEND ? "send" : "come",
            c->side_end == 2 ? "closed the connection" : "died or exited");
}

/* Everything that can move on a connection without waiting. */
static void progress(struct ib_comm *c) {
  if (c->error != RINGCC_SUCCESS)
    return;
  if (__atomic_load_n(&c->async_failed, __ATOMIC_ACQUIRE)) {
    rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "%s", c->async_msg);
    return;
  }
  if (__atomic_load_n(&rcc_ib_state.dev.fatal, __ATOMIC_ACQUIRE)) {
    rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "%s", rcc_ib_state.dev.fatal_msg);
    return;
  }
  int64_t now = rcc_now_ns();
  if (!c->hinted && now >= c->next_async_check) {
    rcc_ib_async_drain(); /* nobody reports the event fd ready: look sometimes */
    c->next_async_check = now + ASYNC_CHECK_NS;
  }
  if (c->hs != HS_DONE) {
    rcc_ib_hs_step(c);
    if (c->hs != HS_DONE)
      return;
  }
  poll_cq(c);
  if (c->side_end == 0 && !c->hinted && c->tail > c->head &&
      now >= c->next_side_check) { /* hinted: readable() reads it */
    rcc_ib_side_read(c);
    c->next_side_check = now + SIDE_CHECK_NS;
  }
  if (c->kind == COMM_SEND)
    issue(c);
  else
    grant(c);
  retire(c);
  if (c->side_end != 0)
    side_gone(c);
}

static ringcc_result_t comm_error(const struct ib_comm *c, char *err,
                                  size_t errlen) {
  snprintf(err, errlen, "%s", c->message);
  return c->error;
}

/* Registered room for a small send from each request (allocated once). */
static ringcc_result_t bounce_setup(struct ib_comm *c) {
  size_t b = (size_t)MAX_REQ * BOUNCE_BYTES;
  if (posix_memalign((void **)&c->bounce, 4096, b) != 0) {
    c->bounce = NULL;
    return rcc_ib_comm_fail(c, RINGCC_ERR_OUT_OF_MEMORY, "NET/IB: out of memory");
  }
  c->bounce_mr = IBV->reg_mr(rcc_ib_state.dev.pd, c->bounce, b, ACCESS_ALL);
  if (c->bounce_mr == NULL) {
    int e = errno;
    free(c->bounce);
    c->bounce = NULL;
    return c->error = rcc_ib_reg_error(b, "bounce buffers", e, c->message,
                                sizeof(c->message));
  }
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_isend(void *send_comm, const void *data,
                                size_t bytes, uint32_t imm, void *mhandle,
                                void **request, char *err, size_t errlen) {
  struct ib_comm *c = send_comm;
  const struct ib_mr *m = mhandle;
  *request = NULL;
  if (c->error != RINGCC_SUCCESS)
    return comm_error(c, err, errlen);
  if (m != NULL)
    c->fifo = m;
  struct ib_req *r = req_new(c, 1);
  if (r == NULL)
    return RINGCC_SUCCESS; /* every request in use: later */
  r->bytes = bytes;
  r->imm = imm;
  if (bytes == 0) {
    r->src = NULL;
  } else if (inside(m, data, bytes)) {
    r->src = data;
    r->lkey = m->mr->lkey;
  } else if (bytes <= BOUNCE_BYTES && !rcc_ib_is_device_ptr(data)) {
    if (c->bounce == NULL && bounce_setup(c) != RINGCC_SUCCESS)
      return comm_error(c, err, errlen);
    char *b = c->bounce + (size_t)req_index(r) * BOUNCE_BYTES;
    memcpy(b, data, bytes);
    r->src = b;
    r->lkey = c->bounce_mr->lkey;
  } else {
    ringcc_result_t e = rcc_ib_cache_get(data, bytes, 0, &r->reg, c->message,
                                  sizeof(c->message));
    if (e != RINGCC_SUCCESS) {
      c->error = e;
      return comm_error(c, err, errlen);
    }
    r->src = data;
    r->lkey = r->reg->mr->lkey;
  }
  *request = r;
  progress(c);
  return RINGCC_SUCCESS;
}

/* Receive keys for [p, p + len): the FIFO's, or a cache entry's. */
static ringcc_result_t recv_keys(struct ib_comm *c, char *p, size_t len,
                                 uint32_t *rkey, int *flush,
                                 struct reg **reg) {
  *reg = NULL;
  if (inside(c->fifo, p, len)) {
    *rkey = c->fifo->mr->rkey;
    *flush = c->fifo->device;
    return RINGCC_SUCCESS;
  }
  ringcc_result_t r = rcc_ib_cache_get(p, len, 1, reg, c->message,
                                sizeof(c->message));
  if (r != RINGCC_SUCCESS)
    return r;
  *rkey = (*reg)->mr->rkey;
  *flush = (*reg)->device;
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_irecv(void *recv_comm, void *data, size_t max_bytes,
                                void *mhandle, void **request, char *err,
                                size_t errlen) {
  struct ib_comm *c = recv_comm;
  *request = NULL;
  if (c->error != RINGCC_SUCCESS)
    return comm_error(c, err, errlen);
  if (mhandle != NULL)
    c->fifo = mhandle;
  struct ib_req *r = req_new(c, 0);
  if (r == NULL)
    return RINGCC_SUCCESS;
  r->home = r->target = data;
  r->home_bytes = r->target_bytes = max_bytes;
  ringcc_result_t e = recv_keys(c, data, max_bytes, &r->home_rkey,
                                &r->home_flush, &r->reg);
  if (e != RINGCC_SUCCESS) {
    c->error = e;
    return comm_error(c, err, errlen);
  }
  r->target_rkey = r->home_rkey;
  r->target_flush = r->home_flush;
  *request = r;
  progress(c);
  return RINGCC_SUCCESS;
}

static ringcc_result_t ib_test(void *request, int *done, size_t *bytes,
                               uint32_t *imm, char *err, size_t errlen) {
  struct ib_req *r = request;
  struct ib_comm *c = r->c;
  progress(c);
  *done = 0;
  if (r->state == REQ_DONE) {
    *done = 1;
    *bytes = r->bytes;
    *imm = r->imm;
    req_free(r);
    return RINGCC_SUCCESS;
  }
  if (c->error != RINGCC_SUCCESS)
    return comm_error(c, err, errlen);
  return RINGCC_SUCCESS;
}

static int ib_redirect(void *request, void *data, size_t max_bytes,
                       int force) {
  struct ib_req *r = request;
  struct ib_comm *c = r->c;
  if (r->is_send || r->state == REQ_DONE || c->error != RINGCC_SUCCESS)
    return -1;
  if (!r->granted) { /* its CTS has not gone out: it can still move */
    struct reg *reg = NULL;
    uint32_t rkey = r->home_rkey;
    int flush = r->home_flush;
    if ((char *)data != r->home) {
      char ignored[RCC_ERRLEN];
      if (rcc_ib_cache_get(data, max_bytes, 1, &reg, ignored, sizeof(ignored)) !=
          RINGCC_SUCCESS)
        return -1; /* it stays in its slot */
      rkey = reg->mr->rkey;
      flush = reg->device;
    }
    rcc_ib_cache_put(r->treg);
    if (reg != NULL) {
      pthread_mutex_lock(&rcc_ib_state.lock);
      rcc_ib_state.stats.landed++;
      pthread_mutex_unlock(&rcc_ib_state.lock);
    }
    r->treg = reg;
    r->target = data;
    r->target_bytes = (char *)data == r->home ? r->home_bytes : max_bytes;
    r->target_rkey = rkey;
    r->target_flush = flush;
    return 0;
  }
  if (!force || r->target == r->home)
    return -1;
  /* Its bytes may be on their way into the user's buffer, which goes back
   * to the user now: stop the connection so that nothing more lands. */
  rcc_ib_qps_to_error(c);
  rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
            "NET/IB: a receive from %s that was to land in the user's buffer "
            "could not be moved back to its slot after the call failed; the "
            "connection is closed so that nothing more is written there",
            c->peer);
  return -1;
}

static void ib_rebase(void *request, const void *data) {
  struct ib_req *r = request;
  struct ib_comm *c = r->c;
  if (!r->is_send || r->state == REQ_DONE)
    return;
  if (r->state == REQ_QUEUED) { /* not written yet: leave from data */
    rcc_ib_cache_put(r->reg);
    r->reg = NULL;
    r->src = data;
    if (inside(c->fifo, data, r->bytes))
      r->lkey = c->fifo->mr->lkey;
    else if (r->bytes > 0 &&
             rcc_ib_cache_get(data, r->bytes, 0, &r->reg, c->message,
                       sizeof(c->message)) == RINGCC_SUCCESS)
      r->lkey = r->reg->mr->lkey;
    else if (r->bytes > 0)
      c->error = RINGCC_ERR_SYSTEM;
    return;
  }
  /* On the wire: the NIC may still read the old place; wait for it. */
  int64_t until = rcc_now_ns() + REBASE_WAIT_NS;
  while (r->parts_left > 0 && c->error == RINGCC_SUCCESS &&
         rcc_now_ns() < until)
    poll_cq(c);
  if (r->parts_left == 0 && c->error == RINGCC_SUCCESS)
    return;
  rcc_ib_qps_to_error(c);
  rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
            "NET/IB: a send to %s from the user's buffer was still on the "
            "wire when the call failed; the connection is closed so that the "
            "NIC stops reading that memory", c->peer);
  until = rcc_now_ns() + REBASE_WAIT_NS;
  while (r->parts_left > 0 && rcc_now_ns() < until) {
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(c->cq, 16, wc);
    for (int i = 0; i < n; i++)
      if (WRID_TYPE(wc[i].wr_id) == WR_DATA &&
          WRID_IDX(wc[i].wr_id) < MAX_REQ)
        c->reqs[WRID_IDX(wc[i].wr_id)].parts_left--;
    if (n <= 0)
      usleep(100);
  }
}

/* The completion channel (armed first), the device's event fd, and the side
 * channel where it can say something: during setup, and on a receive comm
 * (the sender's end). -1: a completion is already there: test() now. */
static int ib_fds(void *comm, int *fds, int max) {
  if (comm == NULL || max < 1)
    return 0;
  if (*(const int *)comm == COMM_LISTEN) {
    fds[0] = rcc_ib_listen_fd(comm);
    return 1;
  }
  struct ib_comm *c = comm;
  int n = 0;
  if (c->error != RINGCC_SUCCESS)
    return 0;
  if (c->hs == HS_DONE) {
    if (!c->armed) {
      drain_chan(c); /* a stale event would end every poll() */
      ibv_req_notify_cq(c->cq, 0);
      c->armed = 1;
      if (poll_cq(c) > 0)
        return -1;
    }
    fds[n++] = c->chan->fd;
  }
  if (n < max && rcc_ib_state.dev.async_fd >= 0)
    fds[n++] = rcc_ib_state.dev.async_fd;
  if (n < max && c->side_end == 0 && (c->hs != HS_DONE || c->kind == COMM_RECV))
    fds[n++] = c->fd;
  return n;
}

static void ib_readable(void *comm, int fd) {
  struct ib_comm *c = comm;
  if (c == NULL || c->kind == COMM_LISTEN)
    return;
  if (fd < 0)
    c->hinted = 1;
  else if (c->chan != NULL && fd == c->chan->fd)
    drain_chan(c);
  else if (fd == rcc_ib_state.dev.async_fd)
    rcc_ib_async_drain();
  else if (fd == c->fd) /* read now: a closed channel must leave fds() */
    rcc_ib_side_read(c);
}

static void ib_close(void *comm) {
  struct ib_comm *c = comm;
  if (c == NULL)
    return;
  if (forked_child()) { /* the rest is the parent's (forked_child) */
    if (c->fd >= 0)
      close(c->fd);
    if (c->chan != NULL)
      close(c->chan->fd);
    free(c);
    return;
  }
  if (c->fd >= 0 && c->side_end == 0 && c->hs == HS_DONE) {
    uint8_t m[4], *p = m;
    put32(&p, CLOSE_MAGIC);
    ssize_t n = send(c->fd, m, 4, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)n; /* a peer that is gone need not hear it */
  }
  rcc_ib_live_remove(c); /* no async event reaches it from here on */
  rcc_ib_comm_free(c);
}

const struct rcc_net_plugin rcc_net_ib = {
    .name = "IB",
    /* Priced as the network link the model knows (link.h) until it has
     * values of its own for verbs: a step's cost is the proxy's. */
    .link = RCC_LINK_TCP,
    .disable_env = "RINGCC_IB_DISABLE",
    .init = rcc_ib_init,
    .device = rcc_ib_device,
    .listen = rcc_ib_listen,
    .connect = rcc_ib_connect,
    .accept = rcc_ib_accept,
    .reg_mr = rcc_ib_reg_mr,
    .dereg_mr = rcc_ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .test = ib_test,
    .fds = ib_fds,
    .rebase = ib_rebase,
    .redirect = ib_redirect,
    .readable = ib_readable,
    .reverse = NULL,
    .close_send = ib_close,
    .close_recv = ib_close,
    .close_listen = rcc_ib_close_listen,
    .locate = rcc_ib_locate,
    .gdr = rcc_ib_gdr,
    .ready = rcc_ib_ready,
    .send_events = POLLIN, /* completion channels, event fds, never POLLOUT */
};
