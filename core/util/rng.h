/* Deterministic seeding: SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014) to derive independent seeds from (experiment seed, term, layer). */
#ifndef BK_RNG_H
#define BK_RNG_H

#include <stdint.h>

static inline uint64_t bk_splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A seed for stream `a`, sub-stream `b` of a base seed. */
static inline uint64_t bk_derive_seed(uint64_t base, uint64_t a, uint64_t b)
{
    return bk_splitmix64(bk_splitmix64(bk_splitmix64(base) ^ a) ^ b);
}

#endif
