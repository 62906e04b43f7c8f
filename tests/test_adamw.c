/* AdamW with global-norm clipping: the gradient norm is a fixed-order sum, so clipped steps give the
 * same bits with any number of OpenMP threads (an OpenMP reduction(+) groups the additions by thread
 * count and by the order threads finish in). */
#include "test_util.h"

#include "train/adamw.h"

#include <biaskit/random.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* Groups large enough that the sum order shows: one of a million values, a middle and a tiny one. */
static const size_t group_sizes[] = {1000003, 70001, 17};
enum { N_GROUPS = sizeof group_sizes / sizeof group_sizes[0] };

static void fill(bk_adamw *opt, float **bufs)
{
    bk_error err;
    biaskit_rng r = biaskit_rng_seeded(7);
    for (int i = 0; i < N_GROUPS; i++) {
        size_t n = group_sizes[i];
        float *p = bufs[2 * i] = malloc(n * sizeof(float)), *g = bufs[2 * i + 1] = malloc(n * sizeof(float));
        assert_non_null(p);
        assert_non_null(g);
        for (size_t k = 0; k < n; k++) {
            p[k] = (float)(0.02 * biaskit_rng_normal(&r));
            /* magnitudes over six decades, so rounding differs with the grouping of the sum */
            g[k] = (float)(biaskit_rng_normal(&r) * pow(10.0, 6.0 * biaskit_rng_uniform(&r) - 3.0));
        }
        char name[32];
        snprintf(name, sizeof name, "g%d", i);
        assert_int_equal(bk_adamw_add(opt, name, p, g, n, i == 0, &err), BK_OK);
    }
}

static void release(bk_adamw *opt, float **bufs)
{
    bk_adamw_free(opt);
    for (int i = 0; i < 2 * N_GROUPS; i++)
        free(bufs[i]);
}

static void grad_norm_is_bit_identical_across_thread_counts(void **state)
{
    (void)state;
    const int threads[] = {1, 3, 7};
    double norms[3];
    for (int t = 0; t < 3; t++) {
        bk_adamw opt = {0};
        float *bufs[2 * N_GROUPS];
        fill(&opt, bufs);
        omp_set_num_threads(threads[t]);
        norms[t] = bk_adamw_grad_norm(&opt);
        if (t == 0) { /* and it is the norm: against a long-double sum */
            long double ref = 0.0L;
            for (int i = 0; i < N_GROUPS; i++)
                for (size_t k = 0; k < opt.groups[i].n; k++)
                    ref += (long double)opt.groups[i].grad[k] * opt.groups[i].grad[k];
            assert_float_equal(norms[0], (double)sqrtl(ref), 1e-12 * norms[0]);
        }
        release(&opt, bufs);
    }
    for (int t = 1; t < 3; t++)
        if (memcmp(&norms[0], &norms[t], sizeof(double)) != 0)
            fail_msg("gradient norm with %d threads is %.17g, with 1 thread %.17g", threads[t], norms[t], norms[0]);
}

/* Clip and step, as training does, with 1, 3 and 7 threads: the parameters come out bit-identical. */
static void clipped_steps_are_bit_identical_across_thread_counts(void **state)
{
    (void)state;
    const int threads[] = {1, 3, 7};
    float *first[2 * N_GROUPS] = {0};
    for (int t = 0; t < 3; t++) {
        bk_adamw opt = {0};
        float *bufs[2 * N_GROUPS];
        fill(&opt, bufs);
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < 3; s++) {
            double norm = bk_adamw_grad_norm(&opt);
            bk_adamw_scale_grads(&opt, (float)(1.0 / norm)); /* grad_clip = 1 */
            bk_adamw_step(&opt, 1e-3, 0.9, 0.95, 1e-8, 0.1);
        }
        for (int i = 0; i < N_GROUPS; i++) {
            if (t == 0) {
                first[i] = malloc(group_sizes[i] * sizeof(float));
                assert_non_null(first[i]);
                memcpy(first[i], opt.groups[i].param, group_sizes[i] * sizeof(float));
            } else if (memcmp(first[i], opt.groups[i].param, group_sizes[i] * sizeof(float)) != 0)
                fail_msg("group %d differs between 1 and %d threads", i, threads[t]);
        }
        release(&opt, bufs);
    }
    for (int i = 0; i < N_GROUPS; i++)
        free(first[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grad_norm_is_bit_identical_across_thread_counts),
        cmocka_unit_test(clipped_steps_are_bit_identical_across_thread_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
