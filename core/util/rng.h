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

/* order[0 .. n-1] permuted uniformly at random (Fisher-Yates from the end, rejection sampling so that
 * every index is equally likely), drawing from rng. */
static inline void bk_shuffle(int64_t *order, int64_t n, bk_rng *rng)
{
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t bound = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % bound, r;
        do
            r = bk_rng_u64(rng);
        while (r >= limit);
        int64_t j = (int64_t)(r % bound), tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

#endif
