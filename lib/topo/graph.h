/*
 * graph.h - the ring order over the peers' hosts (graph.c).
 */
#ifndef RCC_GRAPH_H
#define RCC_GRAPH_H

#include "ringcc.h"

struct ringcc_comm;

/* Fills comm->ring and comm->ring_pos: ranks of one host contiguous. */
ringcc_result_t rcc_graph_build_ring(struct ringcc_comm *comm);

#endif /* RCC_GRAPH_H */
