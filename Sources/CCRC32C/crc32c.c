#include "hk_crc32c.h"
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>

int hk_crc32c_hardware(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_SSE4_2) != 0;
}

__attribute__((target("sse4.2")))
uint32_t hk_crc32c_update(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    while (n > 0) {
        c = _mm_crc32_u8((uint32_t)c, *p);
        p++;
        n--;
    }
    return (uint32_t)c;
}
#else
int hk_crc32c_hardware(void) { return 0; }
uint32_t hk_crc32c_update(uint32_t crc, const void *data, size_t n) { (void)data; (void)n; return crc; }
#endif
