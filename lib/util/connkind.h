/*
 * connkind.h - which FIFO of a peer pair a step uses. Collectives and
 * point-to-point traffic never share one, so a send the peer has not yet
 * received cannot be mistaken for collective data.
 *
 * Device collectives run on FIFOs of their own, so that host collectives on
 * the same communicator keep working while a kernel is in flight: kind
 * RCC_CONN_DEVICE + k is the device twin of host kind k (a schedule names
 * only host kinds; the CUDA executor uses the twins). They exist when every
 * rank has a GPU (comm->nkinds == RCC_MAX_CONN_KINDS, cuda.c); transports
 * make comm->nkinds kinds of FIFOs per peer.
 *
 * C and C++ (the schedules compile for the device too); no includes.
 */
#ifndef RCC_CONNKIND_H
#define RCC_CONNKIND_H

enum rcc_conn_kind { RCC_CONN_COLL = 0, RCC_CONN_P2P = 1, RCC_NUM_CONN_KINDS };
#define RCC_CONN_DEVICE RCC_NUM_CONN_KINDS
#define RCC_MAX_CONN_KINDS (2 * RCC_NUM_CONN_KINDS)

#endif /* RCC_CONNKIND_H */
