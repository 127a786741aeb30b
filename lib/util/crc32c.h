/*
 * crc32c.h - CRC-32C (Castagnoli, the iSCSI and ext4 checksum) of a buffer,
 * for the payload checksums of the network transport (RINGCC_CHECKSUM):
 * the SSE4.2 crc32 instruction where the CPU has it (three streams at once,
 * combined), else a table (slicing by eight).
 */
#ifndef RCC_CRC32C_H
#define RCC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of data[0..bytes) continued from crc (0 to start):
 * rcc_crc32c(rcc_crc32c(0, a, n), b, m) is the CRC of a then b.
 * rcc_crc32c(0, "123456789", 9) is 0xe3069283. */
uint32_t rcc_crc32c(uint32_t crc, const void *data, size_t bytes);
/* The same without the instruction, whatever the CPU (tests compare). */
uint32_t rcc_crc32c_table(uint32_t crc, const void *data, size_t bytes);
/* "SSE4.2" or "table": what rcc_crc32c uses here. */
const char *rcc_crc32c_impl(void);

#endif /* RCC_CRC32C_H */
