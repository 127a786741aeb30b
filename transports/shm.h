/*
 * shm.h - what the shared-memory transport (shm.c) offers besides its table.
 */
#ifndef RCC_SHM_H
#define RCC_SHM_H

#include "ringcc.h"

struct ringcc_comm;

/* For p2p.c: shm's setup with FIFOs of the host kinds only (p2p carries the
 * device kinds in GPU memory) and no extra room; then shm's connect, finish
 * and destroy apply to the state as usual. */
ringcc_result_t rcc_shm_setup_host(struct ringcc_comm *comm, const int *peers,
                                   int npeers, void *blob, void **state);

#endif /* RCC_SHM_H */
