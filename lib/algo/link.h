/*
 * link.h - the kinds of link the cost model prices (tuner.h): every edge's
 * transport says which its edges are (struct rcc_transport.link), and an
 * algorithm's cost may depend on it (algorithms.h, link_terms).
 */
#ifndef RCC_LINK_H
#define RCC_LINK_H

/* Link types with their own alpha and beta. CUDA P2P and verbs join when
 * the model has values for them; until then their edges say the kind that
 * prices them best. */
enum rcc_link { RCC_LINK_SHM, RCC_LINK_TCP, RCC_NUM_LINKS };

#endif /* RCC_LINK_H */
