/* Deterministic seeding: SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014) to derive independent seeds from (experiment seed, term, layer). */
#ifndef BK_RNG_H
#define BK_RNG_H

#include <math.h>
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

/* A stream of random numbers: SplitMix64 over a counter. The state is one integer, saved in
 * checkpoints. */
typedef struct bk_rng {
    uint64_t state;
} bk_rng;

static inline uint64_t bk_rng_u64(bk_rng *r)
{
    uint64_t out = bk_splitmix64(r->state);
    r->state += 0x9E3779B97F4A7C15ull;
    return out;
}

/* Uniform in (0, 1]: never 0, so log() of it is finite. */
static inline double bk_rng_uniform(bk_rng *r)
{
    return ((double)(bk_rng_u64(r) >> 11) + 1.0) * 0x1.0p-53;
}

/* Standard normal (Box-Muller). */
static inline double bk_rng_normal(bk_rng *r)
{
    double u1 = bk_rng_uniform(r), u2 = bk_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
