/* Deterministic seeding and random numbers of the engine: the SDK's SplitMix64 stream
 * (biaskit/random.h, shared with plugins), plus the derivation of independent seeds from
 * (experiment seed, term, layer). */
#ifndef BK_RNG_H
#define BK_RNG_H

#include <biaskit/random.h>

#include <stdint.h>

#define bk_splitmix64 biaskit_splitmix64
typedef biaskit_rng bk_rng; /* the state is one integer, saved in checkpoints */
#define bk_rng_u64 biaskit_rng_u64
#define bk_rng_uniform biaskit_rng_uniform
#define bk_rng_normal biaskit_rng_normal

/* A seed for stream `a`, sub-stream `b` of a base seed. */
static inline uint64_t bk_derive_seed(uint64_t base, uint64_t a, uint64_t b)
{
    return bk_splitmix64(bk_splitmix64(bk_splitmix64(base) ^ a) ^ b);
}

#endif
