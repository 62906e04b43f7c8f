/* 16-bit floats read as float, host and device: IEEE binary16 (f16, GGUF's F16 and the scales of its
 * quantized blocks) and bfloat16 (bf16: the top half of a float). Both conversions are exact. */
#ifndef BK_UTIL_HALF_H
#define BK_UTIL_HALF_H

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <stdint.h>
#include <string.h>

static inline BIASKIT_HD float bk_bf16_value(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits; subnormals, infinities and NaN kept. */
static inline BIASKIT_HD float bk_f16_value(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1fu) /* inf or NaN */
        u = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) /* normal */
        u = sign | ((exp + 112u) << 23) | (man << 13);
    else if (man == 0) /* zero */
        u = sign;
    else { /* subnormal: man * 2^-24, normalised */
        int e = -1;
        uint32_t m = man;
        do {
            m <<= 1;
            e++;
        } while (!(m & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((m & 0x3ffu) << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
