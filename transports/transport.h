/*
 * transport.h - the table every transport fills in.
 *
 * A transport only provides FIFOs (lib/fifo/proto.h): for each peer it
 * serves, the receive end of the peer -> me FIFOs (one per connection kind)
 * and the send end of the me -> peer FIFOs. The core tries the transports of
 * rcc_transports[] in order for every peer; the first whose can_connect says
 * yes carries that edge. Setup runs in the same steps on every rank, whether
 * or not a transport serves any of its peers (a transport that serves no
 * edge between any two ranks is skipped by all):
 *
 *   setup    create what this rank owns (e.g. its receive FIFOs) for the peers
 *            it serves, and describe it in a public blob;
 *            (the core all-gathers the blobs)
 *   connect  attach to the peers' resources named in their blobs and fill in
 *            comm->send_conn / recv_conn for those peers;
 *            (the core runs a bootstrap barrier)
 *   finish   drop what must not outlive setup (e.g. shared-memory names);
 *   destroy  free everything (local, never blocks on a peer).
 *
 * Adding a transport means one new file with one designated-initialiser table
 * and one line in rcc_transports[] (transport.c); anything else it offers
 * goes in a header of its own (shm.h, p2p.h) or behind the table. The core never names a
 * transport: it asks an edge's table (link, flags, describe).
 */
#ifndef RCC_TRANSPORT_H
#define RCC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "link.h"
#include "ringcc.h"

struct ringcc_comm;
struct rcc_peer_info;

#define RCC_TRANSPORT_BLOB_BYTES 256

struct rcc_transport {
  const char *name; /* "SHM", shown in "ring 0: 1 -> 2 via SHM" */
  int (*can_connect)(const struct ringcc_comm *comm,
                     const struct rcc_peer_info *me,
                     const struct rcc_peer_info *peer);
  /* Payload bytes of one FIFO slot on this transport's edges. */
  size_t (*slot_bytes)(const struct ringcc_comm *comm);
  /* Optional: the same for its device-kind FIFOs where they differ (p2p's
   * slots in GPU memory); NULL: slot_bytes. The same on every rank. */
  size_t (*device_slot_bytes)(const struct ringcc_comm *comm);
  ringcc_result_t (*setup)(struct ringcc_comm *comm, const int *peers,
                           int npeers, void *blob, void **state);
  ringcc_result_t (*connect)(struct ringcc_comm *comm, void *state,
                             const int *peers, int npeers,
                             const char *all_blobs);
  void (*finish)(struct ringcc_comm *comm, void *state);
  void (*destroy)(struct ringcc_comm *comm, void *state);
  /* Optional: a longer name for the log ("NET/Socket/eth0"). */
  const char *(*describe)(void *state);
  /* Optional: the name of one edge, where edges differ ("P2P/NVLink"). */
  const char *(*describe_peer)(void *state, int peer);
  /* The cost model's link kind of the edge to peer (enum rcc_link); every
   * rank must get the same answer for the same edge. */
  int (*link)(const struct ringcc_comm *comm, void *state, int peer);
  /* Optional: at init, before any setup, removes what ranks of this
   * transport killed during an earlier init left behind (shm: segments
   * whose creator is gone); returns how many. Local, never blocks. */
  int (*sweep)(int log_rank);
  /* Optional: where the room of comm->shm_extra_bytes that rank's memory
   * keeps for the one-shot board is mapped in this process (shm: after the
   * FIFOs of its segment); NULL where this transport does not map it. */
  void *(*extra)(const struct ringcc_comm *comm, void *state, int rank);
  unsigned flags; /* RCC_TRANSPORT_* */
};

/* The device-kind FIFOs are in GPU memory already: kernels use them as
 * they are (p2p). Otherwise they are host memory the CUDA side maps. */
#define RCC_TRANSPORT_DEVICE_FIFOS 1u
/* The edge crosses hosts: its FIFOs are staging slots an engine (the
 * network proxy) moves; device FIFOs are "staged". */
#define RCC_TRANSPORT_NETWORK 2u

extern const struct rcc_transport rcc_transport_p2p;
extern const struct rcc_transport rcc_transport_shm;
extern const struct rcc_transport rcc_transport_net;

/* The ordered table: the first transport that can connect an edge wins.
 * It has at most RCC_MAX_TRANSPORTS entries (comm.h sizes
 * comm->transport_state by it; transport.c checks at compile time). */
extern const struct rcc_transport *const rcc_transports[];
extern const int rcc_num_transports;

/* transport.c: every transport's sweep (init, before the transports). */
void rcc_transports_sweep(int log_rank);
/* After they connected: rank's extra room as the first transport that maps
 * it says (the board), or NULL. */
void *rcc_transports_extra(const struct ringcc_comm *comm, int rank);

/* transport.c: connects every edge with the first transport that can. */
ringcc_result_t rcc_transports_connect(struct ringcc_comm *comm,
                                       int64_t deadline_ns);
/* Last set up, first torn down. */
void rcc_transports_destroy(struct ringcc_comm *comm);
/* "SHM", "NET/Socket/eth0": how this rank reaches peer. */
const char *rcc_edge_name(const struct ringcc_comm *comm, int peer);
/* The cost model's link kind of the edge to peer (enum rcc_link). */
int rcc_edge_link(const struct ringcc_comm *comm, int peer);
/* The RCC_TRANSPORT_* flags of the edge to peer (0 where there is none). */
unsigned rcc_edge_flags(const struct ringcc_comm *comm, int peer);

#endif /* RCC_TRANSPORT_H */
