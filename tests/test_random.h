/* A small pseudo-random stream for the attention tests (include after test_util.h): xorshift64*, whose
 * state the test seeds (rng_state = ...) so that each case draws the same values every run. */
#ifndef BK_TEST_RANDOM_H
#define BK_TEST_RANDOM_H

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state;

/* the next value in [-1, 1) */
static inline double uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) / 4503599627370496.0 - 1.0;
}

/* n values amplitude * uniform() (at least one float is allocated, so n = 0 gives a valid pointer) */
static inline float *random_floats(size_t n, double amplitude)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(amplitude * uniform());
    return x;
}

#endif
