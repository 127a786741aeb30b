/*
 * net.h - the network plugin interface: TCP sockets (net_socket.c) and
 * verbs, InfiniBand and RoCE (net_ib/).
 *
 * A plugin moves whole messages between two ranks on different hosts. The
 * "net" transport (transports/net.c) puts a FIFO on each side in local
 * memory and a proxy thread (net_proxy.c) turns filled slots into isend()s
 * and free slots into irecv()s, so the executors see ordinary FIFOs.
 *
 * Model (NCCL's net plugin, simplified):
 *   listen   once per communicator, during init (the core closes the
 *            listener once every peer connected, or, with links made on
 *            first use, at destroy: the proxy then accepts with a short
 *            deadline when fds() of the listener says so); the handle (an
 *            address, and whatever the plugin's proofs need) goes to peers
 *            through the bootstrap
 *   connect  to a peer's handle, sending a small hello (who we are) that
 *            accept() hands to the core; a connect that fails says what
 *            its last attempt met (the errno of connect(): ECONNREFUSED
 *            where the host answered and nothing listens there, so a lazy
 *            link's peer is gone; no answer, ETIMEDOUT or EHOSTUNREACH,
 *            where its host is unreachable)
 *   key      listen and connect get the communicator's network key
 *            (RCC_NET_KEY_BYTES, never sent): a plugin proves it on every
 *            connection it opens (covering the hello) and accepts only
 *            connections that prove it, for this listener (no proof may be
 *            replayed from another communicator's): the hello is trusted
 *            because of it. A stranger's connection is dropped at once, and
 *            a flood of them must not stop a real peer from getting in.
 *   isend / irecv  post one message of at most the slot size; each carries a
 *            32-bit immediate (the FIFO slot's meta tag); requests on one
 *            connection complete in the order they were posted
 *   test     progress a request; reports completion, size and immediate
 *   reg_mr   make memory usable for isend/irecv (a no-op for TCP; verbs
 *            register it with the NIC)
 *   fds      file descriptors the proxy may poll() on while idle
 *   redirect (optional) a posted receive lands elsewhere: the core moves
 *            a receive into the user's buffer before its payload arrives
 *   reverse  (optional) the same link the other way: the lower rank of a
 *            pair connects, and both use the link both ways
 *
 * Every call that can fail writes one sentence to err[errlen] (what, which
 * address, the OS reason) and returns a ringcc_result_t: RINGCC_ERR_NETWORK
 * for a network failure (a link that failed, or bytes that break the
 * protocol: corrupt below), RINGCC_ERR_PEER_FAILED when the peer closed the
 * connection, RINGCC_ERR_SYSTEM for a failure of this rank's own (a local
 * errno such as EBADF or ENOMEM: not the peer's), RINGCC_ERR_TIMEOUT at a
 * deadline.
 */
#ifndef RCC_NET_H
#define RCC_NET_H

#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "ringcc.h"

#define RCC_NET_HANDLE_BYTES 128 /* a listen handle, opaque to the core */
#define RCC_NET_KEY_BYTES 32     /* the communicator's network key */
#define RCC_NET_LINK_CHECK_MS 500 /* how often the engine calls alive() */
#define RCC_NET_HELLO_BYTES 64   /* the hello sent by connect() */
#define RCC_NET_MAX_REQUESTS 64  /* outstanding requests per connection */

struct rcc_net_locality;

struct rcc_net_plugin {
  const char *name; /* "Socket", "IB"; RINGCC_NET=name forces it */
  int link;         /* the cost model's link kind of its edges (link.h) */
  /* Optional: a variable that leaves the plugin out where it is set and not
   * "0" ("RINGCC_IB_DISABLE"; net.c reads it). */
  const char *disable_env;
  /* Once per process (a second call returns the first's result). spec:
   * the interface choice (RINGCC_SOCKET_IFNAME syntax, NULL for the
   * default). A failure says why the plugin cannot run here; the next
   * plugin is tried unless RINGCC_NET forced this one. */
  ringcc_result_t (*init)(const char *spec, char *err, size_t errlen);
  /* The device in use, for the log: "eth0". */
  const char *(*device)(void);
  ringcc_result_t (*listen)(const uint8_t *key, void *handle,
                            void **listen_comm, char *err, size_t errlen);
  /* *last_errno (NULL: not wanted): where it fails, the errno of its last
   * connect() to the listener (ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH...),
   * or 0 where it failed otherwise (a preamble that could not be sent, a
   * bad handle); 0 on success. */
  ringcc_result_t (*connect)(const uint8_t *key, const void *handle,
                             const void *hello, void **send_comm,
                             int64_t deadline_ns, int *last_errno, char *err,
                             size_t errlen);
  /* Accepts the next connection and returns its hello
   * (RCC_NET_HELLO_BYTES). The core decides whether it is welcome. */
  ringcc_result_t (*accept)(void *listen_comm, void *hello, void **recv_comm,
                            int64_t deadline_ns, char *err, size_t errlen);
  ringcc_result_t (*reg_mr)(void *comm, void *data, size_t bytes,
                            void **mhandle, char *err, size_t errlen);
  void (*dereg_mr)(void *comm, void *mhandle);
  /* *request == NULL on return: no resources now, try again later. */
  ringcc_result_t (*isend)(void *send_comm, const void *data, size_t bytes,
                           uint32_t imm, void *mhandle, void **request,
                           char *err, size_t errlen);
  ringcc_result_t (*irecv)(void *recv_comm, void *data, size_t max_bytes,
                           void *mhandle, void **request, char *err,
                           size_t errlen);
  /* On *done, the request is freed; *bytes and *imm describe the message. */
  ringcc_result_t (*test)(void *request, int *done, size_t *bytes,
                          uint32_t *imm, char *err, size_t errlen);
  /* Up to max fds to poll() for progress (POLLIN and POLLOUT); returns the
   * number written, or -1 when a request can progress without waiting (the
   * plugin holds bytes it already read for it): test() it now. */
  int (*fds)(void *comm, int *fds, int max);
  /* Optional: the bytes of an outstanding send are now at data (the same
   * contents, elsewhere), because the caller takes its buffer back. NULL
   * where a posted send cannot move (RDMA). */
  void (*rebase)(void *request, const void *data);
  /* Optional: a posted receive lands at data (at most max_bytes there)
   * instead of where it was posted; the payload that already arrived is
   * copied over, unless !force, where a receive that took payload bytes
   * stays as it is. A message longer than max_bytes goes back to the
   * first place it was posted (the caller then sees a size that does not
   * match). A receive that is complete but not yet collected by test()
   * moves whole where force is set (its place is about to be given back),
   * and stays where it is otherwise. 0, or -1 when nothing changed. NULL:
   * receives stay where they were posted. */
  int (*redirect)(void *request, void *data, size_t max_bytes, int force);
  /* Optional: a receive whose header announces a payload of at least
   * min_bytes, and whose immediate has a bit of imm_mask set, leaves its
   * payload in the network (the kernel's socket buffers) after its header
   * came: parked, until a redirect moves it (it then reads straight there),
   * want() asks for it, or ns passed since its header came (it then reads
   * where it was posted). A parked receive's socket is left out of fds();
   * fds() returns -1 once one is due. Every call unparks what is parked (it reads on, at the next
   * test()); min_bytes 0 turns parking off. This is the sender waiting for
   * its receiver (MPI's rendezvous): a message that arrives before its
   * receiver is ready waits in the socket rather than in the slot, out of
   * which it would be copied once more. NULL: receives read as they come. */
  void (*park)(void *comm, size_t min_bytes, uint32_t imm_mask, int64_t ns);
  /* With park: milliseconds until the first parked receive of comm is due
   * (0: due now), -1 where none is parked: what a caller sleeping in poll()
   * on fds() may sleep at most. */
  int (*parked_ms)(void *comm);
  /* With park: the caller waits for this posted receive: it reads on,
   * parked or not, and is never parked. 1 if it was parked (the caller
   * polls its socket again), else 0. */
  int (*want)(void *request);
  /* Optional: readiness from the caller's poll(). fd -1: from now on the
   * caller polls the fds of this connection (fds()) before it waits and
   * reports every one poll() found ready (POLLIN, POLLERR or POLLHUP) with
   * its fd, so the plugin may stop reading a socket a read found empty until
   * told: no system call that only says EAGAIN. NULL: test() reads. */
  void (*readable)(void *comm, int fd);
  /* Optional, send connections: all = 1: the connection takes whatever a
   * send gives it, past the plugin's bound on bytes not sent yet (over TCP,
   * RINGCC_SOCKET_NOTSENT_BYTES), until called with 0, which brings the
   * bound back. NULL: no such bound. */
  void (*unsent_all)(void *send_comm, int all);
  /* Optional: a connection the other way over the same link (a receive
   * connection from a send connection's peer, or a send connection to a
   * receive connection's peer), so that one connect() joins two ranks both
   * ways. Each is closed with its own close_*(). NULL: the core connects
   * each way. */
  ringcc_result_t (*reverse)(void *comm, void **other, char *err,
                             size_t errlen);
  /* Optional: whether the link of a connection still works, for links that
   * fail without closing (a host that lost power or its network sends no
   * FIN). The engine calls it about every RCC_NET_LINK_CHECK_MS on every
   * connection; a failure (RINGCC_ERR_NETWORK, one sentence naming the peer
   * and why) fails the connection as a failed test() would. It must never
   * take a peer that is alive but slow, busy or stopped for a dead one: a
   * silent link is confirmed another way before it fails (the socket
   * plugin: a fresh connect to the peer's host). RINGCC_SUCCESS with err
   * non-empty: the peer is suspected (its link is silent, its host answers),
   * one sentence the engine logs at WARN, naming the rank; err is "" when
   * all is well. NULL: only the plugin's own errors say so. */
  ringcc_result_t (*alive)(void *comm, char *err, size_t errlen);
  /* Closing may happen in a process forked from the one that opened the
   * connection (destroy in a child, after fork): then free memory and close
   * descriptors only, nothing the peer or the parent would notice (no
   * shutdown, no goodbye). */
  void (*close_send)(void *send_comm);
  void (*close_recv)(void *recv_comm);
  void (*close_listen)(void *listen_comm);

  /* ---- optional members, appended for the verbs plugin (net_ib/); NULL
   * in the Socket plugin ---- */
  /* Where this process sits, called before init(): a plugin with several
   * NICs picks the one nearest the rank's GPU, else spreads a host's
   * ranks over them. Ignored after the first init(). */
  void (*locate)(const struct rcc_net_locality *where);
  /* Whether the NIC can read and write this GPU's memory directly
   * (GPUDirect RDMA): 1, with how in why[len], or 0 with the reason. Where
   * it can, the core puts device FIFOs in GPU memory and registers them
   * with reg_mr (a receive into device memory completes only once its data
   * is visible to the GPU); else they stay in host memory (staged). */
  int (*gdr)(const char *gpu_pci, char *why, size_t len);
  /* Completes the setup of a connection (a send comm from connect() or a
   * receive comm from accept()) by deadline_ns; the core calls it for
   * every send comm, then every receive comm, once all are accepted, so
   * setup errors surface at init. Without it (or before it) the first
   * isend/irecv/test completes the setup. */
  ringcc_result_t (*ready)(void *comm, int64_t deadline_ns, char *err,
                           size_t errlen);
  /* The poll() events that say a send comm's fds() have news while a send
   * is pending; 0: POLLOUT (a socket with room to write). The verbs
   * plugin's fds are completion channels: POLLIN. */
  short send_events;
  /* Optional: payload checksums on a connection (RINGCC_CHECKSUM): a send
   * comm sends a CRC-32C of every payload with it, a receive comm checks
   * it and fails the message (RINGCC_ERR_NETWORK, one sentence with the
   * bytes and both sums) on a mismatch, so corrupted bytes never reach a
   * FIFO. NULL: the plugin has none (verbs: the link's end-to-end CRC of
   * every packet covers the payload). */
  void (*checksum)(void *comm, int on);
  /* Optional: 1 when the connection failed because what arrived breaks the
   * protocol (a header that claims more than the slot, a checksum that does
   * not match): the peer is alive and sent garbage, or the bytes were
   * corrupted on the way, so the engine reports the connection's error as
   * it is and does not tell the other ranks that the peer is lost. NULL:
   * every RINGCC_ERR_NETWORK is a link that failed. */
  int (*corrupt)(void *comm);
};

/* For locate(): this rank among the ranks of its host, and its GPU. */
struct rcc_net_locality {
  int local_rank;    /* 0-based place among the host's ranks */
  int local_size;
  char gpu_pci[32];  /* "0000:17:00.0"; "" without a GPU */
};

extern const struct rcc_net_plugin rcc_net_socket;
extern const struct rcc_net_plugin rcc_net_ib; /* verbs: InfiniBand, RoCE */

#endif /* RCC_NET_H */
