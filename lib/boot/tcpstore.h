/*
 * tcpstore.h - a client of PyTorch's c10d TCPStore (tcpstore.c): the
 * key-value store torchrun serves at MASTER_ADDR:MASTER_PORT for its
 * workers. ringcc_comm_init_env uses it as the rendezvous under torchrun:
 * rank 0 publishes its unique id (address and a random secret) under a key,
 * the other ranks wait for the key and read it (docs/launch.md).
 *
 * Only what that needs: validate, set, wait+get, add. Keys are given as
 * torch's Python API names them; the client adds the "/" that torch's own
 * TCPStore client puts in front of every key, so torch.distributed.TCPStore
 * reads and writes the same entries.
 */
#ifndef RCC_TCPSTORE_H
#define RCC_TCPSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

/* Connects to the store at "host:port" (retrying while it does not listen
 * yet) and sends the validation message; *fd is then the connection. */
ringcc_result_t rcc_tcpstore_connect(const char *host_port, int64_t deadline_ns,
                                     int *fd, char *err, size_t errlen);
ringcc_result_t rcc_tcpstore_set(int fd, const char *key, const void *value,
                                 size_t len, int64_t deadline_ns, char *err,
                                 size_t errlen);
/* Waits until key exists (RINGCC_ERR_TIMEOUT at deadline_ns: the
 * connection is then unusable, close it), then reads its value: at most cap
 * bytes into value, its whole length into *len (a longer value is an error). */
ringcc_result_t rcc_tcpstore_get(int fd, const char *key, void *value,
                                 size_t cap, size_t *len, int64_t deadline_ns,
                                 char *err, size_t errlen);
/* Adds delta to the integer stored at key (created as 0); *result the sum. */
ringcc_result_t rcc_tcpstore_add(int fd, const char *key, int64_t delta,
                                 int64_t *result, int64_t deadline_ns,
                                 char *err, size_t errlen);

#endif /* RCC_TCPSTORE_H */
