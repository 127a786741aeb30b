/*
 * link.h - the kinds of link the cost model prices (tuner.h), and which every
 * edge's transport names for its edges (struct rcc_transport.link).
 */
#ifndef RCC_LINK_H
#define RCC_LINK_H

/* Link types with their own alpha and beta. CUDA P2P and verbs join when
 * the model has values for them; until then their edges say the kind that
 * prices them best. */
enum rcc_link { RCC_LINK_SHM, RCC_LINK_TCP, RCC_NUM_LINKS };

#endif /* RCC_LINK_H */
