/*
 * fifo.h - a communicator's FIFOs: the connection of a kind, channel and
 * peer (comm->send_conn, recv_conn; the sets are numbered in comm.h). Host
 * code only: the kernels get their tables from cuda.c.
 */
#ifndef RCC_FIFO_H
#define RCC_FIFO_H

#include <stddef.h>

#include "comm.h"
#include "proto.h"

/* The FIFO of connection kind `kind`, channel ch, to or from peer. */
static inline struct rcc_conn *rcc_send_conn(const struct ringcc_comm *comm,
                                             int kind, int ch, int peer) {
  return &comm->send_conn[kind][(size_t)ch * (size_t)comm->nranks +
                                (size_t)peer];
}
static inline struct rcc_conn *rcc_recv_conn(const struct ringcc_comm *comm,
                                             int kind, int ch, int peer) {
  return &comm->recv_conn[kind][(size_t)ch * (size_t)comm->nranks +
                                (size_t)peer];
}

#endif /* RCC_FIFO_H */
