/*
 * bootstrap.h - the rendezvous over TCP: unique ids, joining as a rank, and
 * the all-gather and barrier the communicator's setup runs on (bootstrap.c).
 */
#ifndef RCC_BOOTSTRAP_H
#define RCC_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

struct rcc_bootstrap;
struct sockaddr_storage;

#define RCC_BOOT_KEY_BYTES 32

/* ringcc_get_unique_id: pick the address (RINGCC_SOCKET_IFNAME), listen on an
 * ephemeral port, take secret[16] (NULL: make a random 128-bit one), and
 * serve the rendezvous from a detached thread until all ranks arrived or
 * timeout_ms passed. */
ringcc_result_t rcc_bootstrap_new_id(ringcc_unique_id_t *id,
                                     const uint8_t *secret,
                                     int64_t timeout_ms, char *err,
                                     size_t errlen);
/* Puts secret[16] into id (and its checksum): an id whose secret travelled
 * apart from it (split: every member derives it, nobody sends it). */
void rcc_bootstrap_id_set_secret(ringcc_unique_id_t *id,
                                 const uint8_t secret[16]);
/* An id for a known rendezvous address "host:port" and secret (env launch). */
ringcc_result_t rcc_bootstrap_id_from_root(ringcc_unique_id_t *id,
                                           const char *host_port,
                                           const uint8_t secret[16],
                                           char *err, size_t errlen);
/* Serve the rendezvous of id from a detached thread of this process (rank 0
 * of an env launch does this): on listen_fd when it is >= 0 (a launcher's
 * listening socket bound to id's port, taken over), else listening on id's
 * address. */
ringcc_result_t rcc_bootstrap_serve(const ringcc_unique_id_t *id,
                                    int listen_fd, int64_t timeout_ms,
                                    char *err, size_t errlen);
/* ringcc_unique_id_release: stops the rendezvous that this process serves
 * for id (made by rcc_bootstrap_new_id or rcc_bootstrap_serve), refusing the
 * ranks that already joined, and returns once its listener is closed;
 * *released says whether one was still running. RINGCC_ERR_INVALID_ARGUMENT
 * when id is not an id. */
ringcc_result_t rcc_bootstrap_release_id(const ringcc_unique_id_t *id,
                                         int *released, char *err,
                                         size_t errlen);
/* Checks an id's format (magic, version, family, checksum). */
ringcc_result_t rcc_bootstrap_check_id(const ringcc_unique_id_t *id,
                                       char *err, size_t errlen);
/* Joins the rendezvous of id as rank of nranks and connects the bootstrap
 * ring (this rank <-> its neighbours) used by the calls below. Fails with
 * RINGCC_ERR_TIMEOUT at deadline_ns (rcc_now_ns() clock). */
ringcc_result_t rcc_bootstrap_init(struct rcc_bootstrap **out,
                                   const ringcc_unique_id_t *id, int rank,
                                   int nranks, int64_t deadline_ns,
                                   char *err, size_t errlen);
/* data holds nranks records of bytes each; this rank's record (at
 * rank*bytes) is filled in; on return all are. */
ringcc_result_t rcc_bootstrap_allgather(struct rcc_bootstrap *b, void *data,
                                        size_t bytes, int64_t deadline_ns,
                                        char *err, size_t errlen);
ringcc_result_t rcc_bootstrap_barrier(struct rcc_bootstrap *b,
                                      int64_t deadline_ns, char *err,
                                      size_t errlen);
/* The communicator's key: HMAC(secret, label || the rendezvous's session
 * nonce), the same on every rank of this rendezvous and new for each; it
 * never crosses the wire. */
void rcc_bootstrap_key(const struct rcc_bootstrap *b,
                       uint8_t key[RCC_BOOT_KEY_BYTES]);
/* News from the ring while this rank waits on something else (the network
 * transport's connections), without taking anything: the records the
 * previous ranks already sent for the next all-gather, each a record of
 * the agreed steps (agree.c) starting with an int32_t status. 1 and
 * *status, *rank where one of them is not 0 (a rank failed, or stopped
 * for another's failure); -1 and *rank where the previous rank closed its
 * connection with no such record before (it died or exited); else 0. */
int rcc_bootstrap_news(struct rcc_bootstrap *b, int32_t *status, int *rank);
/* The rank a failed all-gather or barrier found gone (its connection
 * closed), or -1. */
int rcc_bootstrap_lost(const struct rcc_bootstrap *b);
/* This rank failed (code, why): instead of its next all-gather step it
 * sends the failure along the ring, where every rank passes it on and fails
 * its all-gather with it (at once, wherever that all-gather stands). */
void rcc_bootstrap_fail(struct rcc_bootstrap *b, int32_t code,
                        const char *why);
/* The failure a failed all-gather met (this rank's own, one passed on, or
 * a rank gone: *code, why[len]): its rank, or -1. */
int rcc_bootstrap_failure(const struct rcc_bootstrap *b, int32_t *code,
                          char *why, size_t len);
/* Where rank's bootstrap listener was (its address and port; the listener
 * itself closed at the end of init): ringcc_comm_shrink's leader listens
 * there again, so that every survivor knows where to find it. 0, or -1. */
int rcc_bootstrap_peer_addr(const struct rcc_bootstrap *b, int rank,
                            struct sockaddr_storage *addr);
/* The all-gathers and barriers this rank made on the ring so far (init's
 * cost model: each is nranks - 1 steps). */
uint32_t rcc_bootstrap_calls(const struct rcc_bootstrap *b);
void rcc_bootstrap_close(struct rcc_bootstrap *b);

#endif /* RCC_BOOTSTRAP_H */
