/* Float buffers for the cmocka tests (include after test_util.h): pseudo-random normal values from
 * the engine's generator, and copies. A failed allocation fails the test. */
#ifndef BK_TEST_FLOATS_H
#define BK_TEST_FLOATS_H

#include "util/rng.h"

#include <stdlib.h>
#include <string.h>

/* n values scale * N(0, 1) from r (at least one float is allocated, so n = 0 gives a valid pointer) */
static inline float *normal_floats(bk_rng *r, size_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * bk_rng_normal(r));
    return x;
}

static inline float *copy_floats(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    assert_non_null(y);
    if (n)
        memcpy(y, x, n * sizeof *y);
    return y;
}

#endif
