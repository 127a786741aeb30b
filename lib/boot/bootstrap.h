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

/* ringcc_get_unique_id: pick the address (RINGCC_SOCKET_IFNAME), listen on an
 * ephemeral port, make a random 128-bit secret, and serve the rendezvous from
 * a detached thread until all ranks arrived or timeout_ms passed. */
ringcc_result_t rcc_bootstrap_new_id(ringcc_unique_id_t *id,
                                     int64_t timeout_ms, char *err,
                                     size_t errlen);
/* An id for a known rendezvous address "host:port" and secret (env launch). */
ringcc_result_t rcc_bootstrap_id_from_root(ringcc_unique_id_t *id,
                                           const char *host_port,
                                           const uint8_t secret[16],
                                           char *err, size_t errlen);
/* Serve the rendezvous of id from a detached thread of this process, listening
 * on id's address (rank 0 of an env launch does this). */
ringcc_result_t rcc_bootstrap_serve(const ringcc_unique_id_t *id,
                                    int64_t timeout_ms, char *err,
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
void rcc_bootstrap_close(struct rcc_bootstrap *b);

#endif /* RCC_BOOTSTRAP_H */
