/*
 * listen.c - the verbs plugin's side channel (its wire format, the setup
 * exchange, liveness) and listen, connect, accept.
 */
#include "ib.h"

/* ==== the side channel: wire format ======================================= */

/* magic, version, hello (64, zero in an answer), then the qp_info. */
static void wire_encode(uint8_t *w, uint32_t magic, const void *hello,
                        const struct qp_info *q) {
  uint8_t *p = w;
  memset(w, 0, WIRE_BYTES);
  put32(&p, magic);
  put32(&p, WIRE_VERSION);
  if (hello)
    memcpy(p, hello, RCC_NET_HELLO_BYTES);
  p += RCC_NET_HELLO_BYTES;
  put32(&p, q->nqps);
  for (int i = 0; i < MAX_QPS; i++)
    put32(&p, q->qpn[i]);
  put32(&p, q->psn);
  put16(&p, q->lid);
  *p++ = q->link_layer;
  *p++ = q->mtu;
  memcpy(p, q->gid, 16);
  p += 16;
  put32(&p, q->gid_index);
  put64(&p, q->cts_addr);
  put32(&p, q->cts_rkey);
  memcpy(p, q->dev, sizeof(q->dev));
}
_Static_assert(8 + RCC_NET_HELLO_BYTES + 4 + 4 * MAX_QPS + 4 + 2 + 2 + 16 + 4 +
                       8 + 4 + 32 <=
                   MAC_AT,
               "side-channel message size (the offer's proof follows)");

/* An offer's proof: HMAC-SHA-256(key, label || listener's nonce || the
 * offer up to the proof). */
static void offer_mac(const uint8_t key[RCC_NET_KEY_BYTES],
                      const uint8_t nonce[NONCE_BYTES], const uint8_t *offer,
                      uint8_t mac[MAC_BYTES]) {
  struct rcc_hmac m;
  rcc_hmac_init(&m, key, RCC_NET_KEY_BYTES);
  rcc_hmac_update(&m, MAC_LABEL, sizeof(MAC_LABEL));
  rcc_hmac_update(&m, nonce, NONCE_BYTES);
  rcc_hmac_update(&m, offer, MAC_AT);
  rcc_hmac_final(&m, mac);
}

/* 0 and the fields, or -1 with why. */
static int wire_decode(const uint8_t *w, uint32_t magic, void *hello,
                       struct qp_info *q, char *why, size_t len) {
  const uint8_t *p = w;
  uint32_t m = get32(&p), version = get32(&p);
  if (m != magic || version != WIRE_VERSION) {
    snprintf(why, len, "not a NET/IB %s (magic 0x%08x, version %u)",
             magic == OFFER_MAGIC ? "connection offer" : "answer",
             (unsigned)m, (unsigned)version);
    return -1;
  }
  if (hello)
    memcpy(hello, p, RCC_NET_HELLO_BYTES);
  p += RCC_NET_HELLO_BYTES;
  memset(q, 0, sizeof(*q));
  q->nqps = get32(&p);
  for (int i = 0; i < MAX_QPS; i++)
    q->qpn[i] = get32(&p);
  q->psn = get32(&p);
  q->lid = get16(&p);
  q->link_layer = *p++;
  q->mtu = *p++;
  memcpy(q->gid, p, 16);
  p += 16;
  q->gid_index = get32(&p);
  q->cts_addr = get64(&p);
  q->cts_rkey = get32(&p);
  memcpy(q->dev, p, sizeof(q->dev));
  q->dev[sizeof(q->dev) - 1] = '\0';
  if (q->nqps < 1 || q->nqps > MAX_QPS) {
    snprintf(why, len, "%u queue pairs (1..%d)", (unsigned)q->nqps, MAX_QPS);
    return -1;
  }
  if (q->link_layer != rcc_ib_state.dev.link_layer) {
    snprintf(why, len, "the peer's port %s is %s and this rank's %s is %s: "
             "they cannot connect (RINGCC_IB_HCA picks the ports)", q->dev,
             link_name(q->link_layer), rcc_ib_state.dev.label,
             link_name(rcc_ib_state.dev.link_layer));
    return -1;
  }
  return 0;
}

/* Listen handle: magic, family (4 or 6), port, address[16], scope id, the
 * listener's nonce[16] (at 28). */
static void handle_encode(uint8_t *h, const struct sockaddr_storage *a,
                          const uint8_t nonce[NONCE_BYTES]) {
  uint8_t *p = h;
  memset(h, 0, RCC_NET_HANDLE_BYTES);
  memcpy(h + 28, nonce, NONCE_BYTES);
  put32(&p, HANDLE_MAGIC);
  put16(&p, a->ss_family == AF_INET ? 4 : 6);
  put16(&p, (uint16_t)rcc_socket_addr_port(a));
  if (a->ss_family == AF_INET) {
    memcpy(p, &((const struct sockaddr_in *)a)->sin_addr, 4);
  } else {
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)a;
    memcpy(p, &a6->sin6_addr, 16);
    uint8_t *q = p + 16;
    put32(&q, a6->sin6_scope_id);
  }
}

static ringcc_result_t handle_decode(const uint8_t *h,
                                     struct sockaddr_storage *a,
                                     uint8_t nonce[NONCE_BYTES], char *err,
                                     size_t errlen) {
  const uint8_t *p = h;
  uint32_t magic = get32(&p);
  uint16_t family = get16(&p), port = get16(&p);
  memset(a, 0, sizeof(*a));
  memcpy(nonce, h + 28, NONCE_BYTES);
  if (magic != HANDLE_MAGIC || (family != 4 && family != 6) || port == 0)
    return rcc_errf(err, errlen, RINGCC_ERR_INVALID_ARGUMENT,
                    "NET/IB: the peer's listen handle is not a NET/IB handle "
                    "(magic 0x%08x): does the peer use another network "
                    "plugin? (RINGCC_NET must agree on every rank)",
                    (unsigned)magic);
  if (family == 4) {
    struct sockaddr_in *a4 = (struct sockaddr_in *)a;
    a4->sin_family = AF_INET;
    memcpy(&a4->sin_addr, p, 4);
  } else {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)a;
    a6->sin6_family = AF_INET6;
    memcpy(&a6->sin6_addr, p, 16);
    const uint8_t *q = p + 16;
    a6->sin6_scope_id = get32(&q);
  }
  rcc_socket_addr_set_port(a, port);
  return RINGCC_SUCCESS;
}

/* ==== the side channel: setup and liveness =============================== */

/* Reads what the side channel holds, up to the message expected now (an
 * answer, "ready", or "close"), without blocking; a closed or failed
 * channel sets side_end. */
void rcc_ib_side_read(struct ib_comm *c) {
  size_t want = c->hs == HS_ANSWER ? WIRE_BYTES : 4;
  while (c->side_end == 0 && c->wire_got < want) {
    ssize_t n = recv(c->fd, c->wire + c->wire_got, want - c->wire_got,
                     MSG_DONTWAIT);
    if (n > 0) {
      c->wire_got += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      return;
    c->side_end = 1;
    snprintf(c->side_err, sizeof(c->side_err), "%s",
             n == 0 ? "end of stream" : strerror(errno));
    return;
  }
  if (c->hs == HS_DONE && c->wire_got == 4) {
    const uint8_t *p = c->wire;
    if (get32(&p) == CLOSE_MAGIC) {
      c->side_end = 2;
      snprintf(c->side_err, sizeof(c->side_err), "closed cleanly");
    }
    c->wire_got = 0;
  }
}

ringcc_result_t rcc_ib_post_cts_recvs(struct ib_comm *c, int n) {
  for (int i = 0; i < n; i++) {
    struct ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = WRID(WR_CTS_IN, 0, 0, 0);
    int e = ibv_post_recv(c->qps[0], &wr, &bad);
    if (e != 0)
      return rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                       "NET/IB: posting a receive on the connection to %s "
                       "(%s) failed: %s", c->peer, rcc_ib_state.dev.label,
                       strerror(e));
  }
  return RINGCC_SUCCESS;
}

/* The connector got the answer: its queue pairs to RTS, then "ready". */
static ringcc_result_t hs_answer(struct ib_comm *c) {
  char why[300];
  if (wire_decode(c->wire, ANSWER_MAGIC, NULL, &c->remote, why,
                  sizeof(why)) != 0)
    return rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: the answer from %s: %s", c->peer, why);
  if (c->remote.nqps != (uint32_t)c->nqps)
    return rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK,
                     "NET/IB: %s answered with %u queue pairs for %d",
                     c->peer, (unsigned)c->remote.nqps, c->nqps);
  ringcc_result_t r = RINGCC_SUCCESS;
  for (int q = 0; q < c->nqps && r == RINGCC_SUCCESS; q++)
    r = rcc_ib_qp_connect(c, c->qps[q], &c->remote, c->remote.qpn[q]);
  if (r == RINGCC_SUCCESS)
    r = rcc_ib_post_cts_recvs(c, CTS_RECVS);
  if (r != RINGCC_SUCCESS)
    return r;
  uint8_t ready[4], *p = ready;
  char err[RCC_ERRLEN];
  put32(&p, READY_MAGIC);
  r = rcc_socket_send_all(c->fd, ready, 4, rcc_now_ns() + 5000000000LL, err,
                          sizeof(err));
  if (r != RINGCC_SUCCESS)
    return rcc_ib_comm_fail(c, RINGCC_ERR_PEER_FAILED,
                     "NET/IB: telling %s that this side is ready failed: %s",
                     c->peer, err);
  c->hs = HS_DONE;
  c->wire_got = 0;
  return RINGCC_SUCCESS;
}

/* One nonblocking step of the setup exchange. */
void rcc_ib_hs_step(struct ib_comm *c) {
  if (c->hs == HS_DONE || c->error != RINGCC_SUCCESS)
    return;
  rcc_ib_side_read(c);
  if (c->hs == HS_ANSWER && c->wire_got == WIRE_BYTES) {
    hs_answer(c);
    return;
  }
  if (c->hs == HS_READY && c->wire_got == 4) {
    const uint8_t *p = c->wire;
    if (get32(&p) != READY_MAGIC) {
      rcc_ib_comm_fail(c, RINGCC_ERR_NETWORK, "NET/IB: %s sent something else than "
                "'ready' during setup", c->peer);
      return;
    }
    c->hs = HS_DONE;
    c->wire_got = 0;
    return;
  }
  if (c->side_end) {
    rcc_ib_comm_fail(c, RINGCC_ERR_PEER_FAILED,
              "NET/IB: the connection %s %s ended during setup (%s): the "
              "peer failed to set up its side or exited", dir_word(c),
              c->peer, c->side_err);
    return;
  }
  if (rcc_now_ns() >= c->deadline)
    rcc_ib_comm_fail(c, RINGCC_ERR_TIMEOUT,
              "NET/IB: the connection %s %s did not finish its setup (%s) "
              "before the deadline", dir_word(c), c->peer,
              c->hs == HS_ANSWER ? "no answer to the offer"
                                 : "no 'ready' after the answer");
}

ringcc_result_t rcc_ib_ready(void *comm, int64_t deadline_ns, char *err,
                                size_t errlen) {
  struct ib_comm *c = comm;
  if (deadline_ns < c->deadline)
    c->deadline = deadline_ns;
  for (;;) {
    rcc_ib_hs_step(c);
    if (c->error != RINGCC_SUCCESS) {
      snprintf(err, errlen, "%s", c->message);
      return c->error;
    }
    if (c->hs == HS_DONE)
      return RINGCC_SUCCESS;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    int ms = rcc_socket_poll_ms(c->deadline);
    poll(&pfd, 1, ms > 100 ? 100 : ms);
  }
}

/* ---- listen, connect, accept ---------------------------------------------- */

/* An offer on its way in (the gate's check state), and a whole one. */
struct offer_in {
  size_t got;
  uint8_t buf[WIRE_BYTES];
};

struct offer {
  int fd;
  char peer[96];
  uint8_t buf[WIRE_BYTES];
};

struct ib_listen {
  int kind; /* COMM_LISTEN */
  int fd;
  struct rcc_gate *gate; /* the side channels whose offer is not proven */
  uint8_t key[RCC_NET_KEY_BYTES];
  uint8_t nonce[NONCE_BYTES]; /* in the handle: proofs are for us only */
  uint8_t (*accepted)[MAC_BYTES]; /* proofs of the offers accepted */
  int naccepted, cap_accepted;
};

static void listen_free(struct ib_listen *l) {
  rcc_gate_free(l->gate);
  memset(l->key, 0, sizeof(l->key));
  free(l->accepted);
  free(l);
}

static enum rcc_gate_step offer_check(void *arg, struct rcc_gate_conn *c,
                                      char *why, size_t whylen);

ringcc_result_t rcc_ib_listen(const uint8_t *key, void *handle,
                                 void **listen_comm, char *err,
                                 size_t errlen) {
  struct ib_listen *l = calloc(1, sizeof(*l));
  struct sockaddr_storage bound;
  *listen_comm = NULL;
  if (l == NULL)
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  l->kind = COMM_LISTEN;
  l->fd = -1;
  memcpy(l->key, key, RCC_NET_KEY_BYTES);
  int e = rcc_random_bytes(l->nonce, NONCE_BYTES);
  if (e != 0) {
    listen_free(l);
    return rcc_errf(err, errlen, RINGCC_ERR_SYSTEM, "NET/IB: random bytes "
                    "for the listener's nonce failed: %s", strerror(e));
  }
  ringcc_result_t r = rcc_socket_listen(&rcc_ib_state.side_addr, &l->fd, &bound, err,
                                        errlen);
  if (r != RINGCC_SUCCESS) {
    listen_free(l);
    return r;
  }
  char what[140], a[96];
  snprintf(what, sizeof(what), "NET/IB: the side-channel listener %s",
           rcc_socket_addr_str(&bound, a, sizeof(a)));
  struct rcc_gate_config cfg = {
      .what = what, .log_rank = -1, .max_held = PENDING_MAX,
      .expire_ns = OFFER_TIMEOUT_NS, .backoff_ns = BACKOFF_NS,
      .state_bytes = sizeof(struct offer_in), .check = offer_check, .arg = l};
  if ((l->gate = rcc_gate_new(l->fd, &cfg)) == NULL) {
    close(l->fd);
    listen_free(l);
    return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                    "NET/IB: out of memory");
  }
  handle_encode(handle, &bound, l->nonce);
  rcc_ib_live_add(NULL);
  *listen_comm = l;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_ib_connect(const uint8_t *key, const void *handle,
                                  const void *hello, void **send_comm,
                                  int64_t deadline_ns, int *last_errno,
                                  char *err, size_t errlen) {
  struct sockaddr_storage addr;
  struct ib_comm *c;
  uint8_t offer[WIRE_BYTES], nonce[NONCE_BYTES];
  int e = 0;
  *send_comm = NULL;
  if (last_errno != NULL)
    *last_errno = 0;
  ringcc_result_t r = handle_decode(handle, &addr, nonce, err, errlen);
  if (r == RINGCC_SUCCESS)
    r = rcc_ib_comm_new(COMM_SEND, rcc_ib_state.set.qps, &c, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  rcc_socket_addr_str(&addr, c->peer, sizeof(c->peer));
  c->deadline = deadline_ns;
  c->hs = HS_ANSWER;
  wire_encode(offer, OFFER_MAGIC, hello, &c->local);
  offer_mac(key, nonce, offer, offer + MAC_AT);
  /* A side channel the listener closed before it read the offer (this
   * process stopped after its connect: the listener's gate took it for a
   * silent stranger) is opened again; the listener never saw it. */
  for (int tries = 0;; tries++) {
    if ((r = rcc_socket_connect_errno(&addr, deadline_ns, &c->fd, &e, err,
                                      errlen)) == RINGCC_SUCCESS)
      r = rcc_socket_send_all(c->fd, offer, WIRE_BYTES, deadline_ns, err,
                              errlen);
    if (tries == RECONNECTS || c->fd < 0 ||
        (r != RINGCC_SUCCESS && r != RINGCC_ERR_PEER_FAILED) ||
        (r == RINGCC_SUCCESS && !rcc_gate_dropped_unread(c->fd)))
      break;
    RCC_INFO(-1, "NET/IB: %s closed the side channel before it read the "
             "offer (this process did not run for a while?): connecting "
             "again", c->peer);
    close(c->fd);
    c->fd = -1;
  }
  if (r != RINGCC_SUCCESS) {
    if (last_errno != NULL)
      *last_errno = e; /* the side channel's: the process, or its host */
    rcc_ib_comm_free(c);
    return r;
  }
  rcc_ib_live_add(c);
  *send_comm = c;
  return RINGCC_SUCCESS;
}

/* The whole offer is in: 0 when its proof is the key's for this listener
 * and no offer with the same proof was accepted (a replay), else -1 with
 * why. */
static int offer_proven(const struct ib_listen *l, const uint8_t *offer,
                        const char **why) {
  uint8_t mac[MAC_BYTES];
  offer_mac(l->key, l->nonce, offer, mac);
  int ok = rcc_equal_ct(mac, offer + MAC_AT, MAC_BYTES);
  memset(mac, 0, sizeof(mac));
  if (!ok) {
    *why = "it does not prove the communicator's key (a stranger, a peer of "
           "another communicator, or an offer made for another listener)";
    return -1;
  }
  for (int i = 0; i < l->naccepted; i++)
    if (memcmp(l->accepted[i], offer + MAC_AT, MAC_BYTES) == 0) {
      *why = "it repeats an offer already accepted (a replay)";
      return -1;
    }
  return 0;
}

/* The gate's check: reads what has arrived of a side channel's offer; one
 * that is not an offer is dropped as soon as its magic is in, a false
 * proof or a replay as soon as it is whole. Never "started": the connector
 * sends its offer whole with its connect, so one whose proof has not come
 * is a stranger's until it does (the gate reads it once more before it
 * drops it for room). */
static enum rcc_gate_step offer_check(void *arg, struct rcc_gate_conn *c,
                                      char *why, size_t whylen) {
  const struct ib_listen *l = arg;
  struct offer_in *p = c->state;
  while (p->got < WIRE_BYTES) {
    ssize_t n = recv(c->fd, p->buf + p->got, WIRE_BYTES - p->got,
                     MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return RCC_GATE_WAIT;
    if (n <= 0) {
      snprintf(why, whylen, "%s", n == 0 ? "closed before its offer was "
                                           "complete"
                                         : strerror(errno));
      return RCC_GATE_DROP;
    }
    p->got += (size_t)n;
    const uint8_t *q = p->buf;
    if (p->got >= 4 && get32(&q) != OFFER_MAGIC) {
      snprintf(why, whylen, "not a NET/IB connection offer");
      return RCC_GATE_DROP;
    }
  }
  const char *bad;
  if (offer_proven(l, p->buf, &bad) != 0) {
    snprintf(why, whylen, "%s", bad);
    return RCC_GATE_REFUSE;
  }
  return RCC_GATE_PROVEN;
}

/* Remembers an accepted offer's proof, so that a replay is refused. */
static ringcc_result_t offer_accepted(struct ib_listen *l,
                                      const struct offer *p, char *err,
                                      size_t errlen) {
  if (l->naccepted == l->cap_accepted) {
    int cap = l->cap_accepted ? 2 * l->cap_accepted : 16;
    void *a = realloc(l->accepted, (size_t)cap * MAC_BYTES);
    if (a == NULL)
      return rcc_errf(err, errlen, RINGCC_ERR_OUT_OF_MEMORY,
                      "NET/IB: out of memory accepting a connection");
    l->accepted = a;
    l->cap_accepted = cap;
  }
  memcpy(l->accepted[l->naccepted++], p->buf + MAC_AT, MAC_BYTES);
  return RINGCC_SUCCESS;
}

/* The receive comm for a complete offer: queue pairs to RTS, answer. */
static ringcc_result_t accept_offer(struct offer *p, void *hello,
                                    struct ib_comm **out, int64_t deadline,
                                    char *err, size_t errlen) {
  struct qp_info remote;
  char why[300];
  struct ib_comm *c;
  *out = NULL;
  if (wire_decode(p->buf, OFFER_MAGIC, hello, &remote, why, sizeof(why)) != 0)
    return rcc_errf(err, errlen, RINGCC_ERR_NETWORK,
                    "NET/IB: the connection offer from %s: %s", p->peer, why);
  ringcc_result_t r = rcc_ib_comm_new(COMM_RECV, (int)remote.nqps, &c, err, errlen);
  if (r != RINGCC_SUCCESS)
    return r;
  c->remote = remote;
  snprintf(c->peer, sizeof(c->peer), "%s", p->peer);
  c->fd = p->fd;
  p->fd = -1;
  c->deadline = deadline;
  c->hs = HS_READY;
  for (int q = 0; q < c->nqps && r == RINGCC_SUCCESS; q++)
    r = rcc_ib_qp_connect(c, c->qps[q], &c->remote, c->remote.qpn[q]);
  if (r == RINGCC_SUCCESS) {
    uint8_t answer[WIRE_BYTES];
    wire_encode(answer, ANSWER_MAGIC, NULL, &c->local);
    r = rcc_socket_send_all(c->fd, answer, WIRE_BYTES, deadline, c->message,
                            sizeof(c->message));
  }
  if (r != RINGCC_SUCCESS) {
    snprintf(err, errlen, "%s", c->message);
    rcc_ib_comm_free(c); /* closes the side channel: the connector sees it end */
    return r;
  }
  rcc_ib_live_add(c);
  *out = c;
  return RINGCC_SUCCESS;
}

ringcc_result_t rcc_ib_accept(void *listen_comm, void *hello, void **recv_comm,
                              int64_t deadline_ns, char *err, size_t errlen) {
  struct ib_listen *l = listen_comm;
  struct rcc_gate_passed in;
  struct offer_in got;
  struct ib_comm *c = NULL;
  *recv_comm = NULL;
  ringcc_result_t r = rcc_gate_next(l->gate, deadline_ns, -1, &in, &got, err,
                                    errlen);
  if (r == RINGCC_ERR_TIMEOUT) {
    int n = rcc_gate_held(l->gate);
    return rcc_errf(err, errlen, RINGCC_ERR_TIMEOUT,
                    "NET/IB: no connection came before the deadline (%d "
                    "offer%s incomplete)", n, n == 1 ? "" : "s");
  }
  if (r != RINGCC_SUCCESS)
    return r;
  struct offer offer = {.fd = in.fd};
  snprintf(offer.peer, sizeof(offer.peer), "%s", in.peer_str);
  memcpy(offer.buf, got.buf, WIRE_BYTES);
  /* Its connection needs descriptors of its own (a completion channel):
   * where strangers took them all, the oldest make room. */
  rcc_gate_make_room(l->gate, ROOM_FDS);
  r = offer_accepted(l, &offer, err, errlen);
  if (r == RINGCC_SUCCESS)
    r = accept_offer(&offer, hello, &c, deadline_ns, err, errlen);
  if (offer.fd >= 0)
    close(offer.fd);
  *recv_comm = c;
  return r;
}

int rcc_ib_listen_fd(const void *listen_comm) {
  return ((const struct ib_listen *)listen_comm)->fd;
}

void rcc_ib_close_listen(void *listen_comm) {
  struct ib_listen *l = listen_comm;
  if (l == NULL)
    return;
  if (l->fd >= 0)
    close(l->fd);
  listen_free(l); /* and the side channels held in its gate */
  if (!forked_child())
    rcc_ib_live_remove(NULL);
}
