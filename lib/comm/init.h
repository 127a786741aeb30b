/*
 * init.h - ringcc_comm_init with a parent (comm.c), for ringcc_comm_shrink.
 */
#ifndef RCC_INIT_H
#define RCC_INIT_H

#include "comm.h"
#include "ringcc.h"

/* ringcc_comm_init for a communicator shrunk from parent: parent_rank[r]
 * is rank r's number in parent. While the transports connect, they may
 * take over the parent's intact links between the same processes
 * (comm->parent; shm.c, net.c); comm->links_reused counts them. parent NULL: a
 * plain init. */
ringcc_result_t rcc_comm_init_from(ringcc_comm_t *out, int nranks,
                                   const ringcc_unique_id_t *id, int rank,
                                   const ringcc_config_t *config,
                                   const struct ringcc_comm *parent,
                                   const int *parent_rank);

#endif /* RCC_INIT_H */
