#ifndef HK_CRC32C_H
#define HK_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* CRC-32C with the CPU's crc32 instruction (x86-64 SSE4.2). The Store module keeps a portable
 * table-driven version and uses this one only where hk_crc32c_hardware() says it exists. */

/* Whether this CPU has the instruction. */
int hk_crc32c_hardware(void);

/* Continues the raw (not inverted) register `crc` over `n` bytes; callers invert before and after. */
uint32_t hk_crc32c_update(uint32_t crc, const void *data, size_t n);

#endif
