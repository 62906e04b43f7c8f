/*
 * biaskit plugin SDK: deterministic random numbers for param_init().
 *
 * param_init() receives a 64-bit seed that the engine derives from the experiment's seed, the term
 * and the layer: biaskit_splitmix64(biaskit_splitmix64(biaskit_splitmix64(s) ^ t) ^ l) for [train] seed
 * s, the term's 1-based [[term]] position t and the layer copy l (0 for a term shared by every layer; the
 * SDK guide, <prefix>/share/doc/biaskit/SDK.md, "Per-layer parameters"). These helpers turn it into a stream of numbers that is the same on every machine:
 * SplitMix64 over a counter (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014), uniform doubles from the top 53 bits, normals by Box-Muller. The engine uses the same
 * functions for its own initialisation.
 *
 *     biaskit_rng r = biaskit_rng_seeded(seed);
 *     for (int32_t h = 0; h < heads; h++) theta[h] = (float)(2.0 * biaskit_rng_uniform(&r));
 *
 * Plain C11, header only, no dependency but <math.h> and <stdint.h>.
 */
#ifndef BIASKIT_RANDOM_H
#define BIASKIT_RANDOM_H

#include <math.h>
#include <stdint.h>

typedef struct biaskit_rng {
    uint64_t state;
} biaskit_rng;

#define BIASKIT_SPLITMIX64_GAMMA 0x9E3779B97F4A7C15ull

static inline uint64_t biaskit_splitmix64(uint64_t x)
{
    x += BIASKIT_SPLITMIX64_GAMMA;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline biaskit_rng biaskit_rng_seeded(uint64_t seed)
{
    biaskit_rng r = {seed};
    return r;
}

static inline uint64_t biaskit_rng_u64(biaskit_rng *r)
{
    uint64_t out = biaskit_splitmix64(r->state);
    r->state += BIASKIT_SPLITMIX64_GAMMA;
    return out;
}

/* Uniform in (0, 1]: never 0, so log() of it is finite. */
static inline double biaskit_rng_uniform(biaskit_rng *r)
{
    return ((double)(biaskit_rng_u64(r) >> 11) + 1.0) * 0x1.0p-53;
}

/* Standard normal (Box-Muller, one value per call). */
static inline double biaskit_rng_normal(biaskit_rng *r)
{
    double u1 = biaskit_rng_uniform(r), u2 = biaskit_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif /* BIASKIT_RANDOM_H */
