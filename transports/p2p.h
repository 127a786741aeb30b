/*
 * p2p.h - what the CUDA IPC transport (p2p.c) offers besides its table
 * (whose device_slot_bytes is rcc_p2p_device_slot_bytes).
 */
#ifndef RCC_P2P_H
#define RCC_P2P_H

#include <stddef.h>

struct ringcc_comm;

/* The slot bytes of CUDA P2P device FIFOs (RINGCC_DEVICE_CHUNK_BYTES, or by
 * the memory they take), the same on every rank; and the GPU memory one
 * rank's device FIFOs take with slots of slot bytes for local peers. */
size_t rcc_p2p_device_slot_bytes(const struct ringcc_comm *comm);
size_t rcc_p2p_fifo_memory(const struct ringcc_comm *comm, size_t slot,
                           int local);

#endif /* RCC_P2P_H */
