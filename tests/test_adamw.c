/* AdamW with global-norm clipping: the gradient norm is a fixed-order sum, so clipped steps give the
 * same bits with any number of OpenMP threads (an OpenMP reduction(+) groups the additions by thread
 * count and by the order threads finish in). */
#include "test_util.h"

#include "train/adamw.h"

#include <biaskit/random.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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
    bk_error err;
    for (int t = 0; t < 3; t++) {
        bk_adamw opt = {0};
        float *bufs[2 * N_GROUPS];
        fill(&opt, bufs);
        omp_set_num_threads(threads[t]);
        assert_int_equal(bk_adamw_grad_norm(&opt, &norms[t], &err), BK_OK);
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
    bk_error err;
    for (int t = 0; t < 3; t++) {
        bk_adamw opt = {0};
        float *bufs[2 * N_GROUPS];
        fill(&opt, bufs);
        omp_set_num_threads(threads[t]);
        for (int s = 0; s < 3; s++) {
            double norm;
            assert_int_equal(bk_adamw_grad_norm(&opt, &norm, &err), BK_OK);
            assert_int_equal(bk_adamw_scale_grads(&opt, (float)(1.0 / norm), &err), BK_OK); /* grad_clip = 1 */
            assert_int_equal(bk_adamw_step(&opt, 1e-3, 0.9, 0.95, 1e-8, 0.1, &err), BK_OK);
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

/* The same groups with the first two on the emulated device backend (model/backend.h: the CUDA
 * backend's code run on the host) and the third on the host, against all three on the host: the
 * norm is bit-identical (same chunked order), and so are the parameters and moments after three
 * clipped steps, since both evaluate train/adamw_math.h in fp32 on the same arguments (the host
 * computes lr, the bias corrections and the rest once per step and passes them). Bit-identity is
 * asserted; a GPU, where nvcc may contract into FMAs, would be within a few ulps instead. */
static void emulated_device_groups_match_the_host(void **state)
{
    (void)state;
    bk_error err;
    bk_backend *dev = NULL;
    if (bk_backend_emulated_create(&dev, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("emulated backend: %s", err.message);
    assert_true(dev->on_device);
    omp_set_num_threads(3);
    bk_adamw host = {0}, mixed = {0};
    float *bufs[2 * N_GROUPS];
    fill(&host, bufs);
    /* the same values in the emulated device's memory for groups 0 and 1 */
    float *dparam[N_GROUPS] = {0}, *dgrad[N_GROUPS] = {0}, *hgrad[N_GROUPS] = {0};
    float *mirror[N_GROUPS] = {0};
    for (int i = 0; i < N_GROUPS; i++) {
        size_t n = group_sizes[i], bytes = n * sizeof(float);
        const bk_param_group *h = &host.groups[i];
        char name[32];
        snprintf(name, sizeof name, "g%d", i);
        if (i < 2) {
            assert_int_equal(dev->alloc(dev, (void **)&dparam[i], bytes, &err), BK_OK);
            assert_int_equal(dev->alloc(dev, (void **)&dgrad[i], bytes, &err), BK_OK);
            assert_int_equal(dev->upload(dev, dparam[i], h->param, bytes, &err), BK_OK);
            assert_int_equal(dev->upload(dev, dgrad[i], h->grad, bytes, &err), BK_OK);
            mirror[i] = malloc(bytes); /* the caller's host mirror for group 0; the optimizer's own for 1 */
            assert_non_null(mirror[i]);
            assert_int_equal(bk_adamw_add_on(&mixed, dev, name, dparam[i], dgrad[i], i == 0 ? mirror[i] : NULL, n,
                                             i == 0, &err),
                             BK_OK);
            assert_true(i == 0 ? mixed.groups[i].param_host == mirror[i] : mixed.groups[i].owns_param_host);
        } else {
            dparam[i] = malloc(bytes), hgrad[i] = malloc(bytes);
            assert_non_null(dparam[i]);
            assert_non_null(hgrad[i]);
            memcpy(dparam[i], h->param, bytes), memcpy(hgrad[i], h->grad, bytes);
            assert_int_equal(bk_adamw_add(&mixed, name, dparam[i], hgrad[i], n, i == 0, &err), BK_OK);
        }
    }
    for (int s = 0; s < 3; s++) {
        double norm_host, norm_mixed;
        assert_int_equal(bk_adamw_grad_norm(&host, &norm_host, &err), BK_OK);
        assert_int_equal(bk_adamw_grad_norm(&mixed, &norm_mixed, &err), BK_OK);
        if (memcmp(&norm_host, &norm_mixed, sizeof(double)) != 0)
            fail_msg("step %d: gradient norm %.17g on the host, %.17g with emulated groups", s, norm_host, norm_mixed);
        assert_int_equal(bk_adamw_scale_grads(&host, (float)(1.0 / norm_host), &err), BK_OK);
        assert_int_equal(bk_adamw_scale_grads(&mixed, (float)(1.0 / norm_mixed), &err), BK_OK);
        assert_int_equal(bk_adamw_step(&host, 1e-3, 0.9, 0.95, 1e-8, 0.1, &err), BK_OK);
        assert_int_equal(bk_adamw_step(&mixed, 1e-3, 0.9, 0.95, 1e-8, 0.1, &err), BK_OK);
    }
    /* the device groups' host mirrors are stale until bk_adamw_to_host */
    assert_int_equal(bk_adamw_to_host(&mixed, &err), BK_OK);
    for (int i = 0; i < N_GROUPS; i++) {
        const bk_param_group *h = &host.groups[i], *d = &mixed.groups[i];
        size_t bytes = group_sizes[i] * sizeof(float);
        if (memcmp(h->param, d->param_host, bytes) != 0 || memcmp(h->m, d->m_host, bytes) != 0 ||
            memcmp(h->v, d->v_host, bytes) != 0)
            fail_msg("group %d (%s): parameters or moments differ between the host and the emulated device", i,
                     i < 2 ? "emulated" : "host");
        float *grad = malloc(bytes);
        assert_non_null(grad);
        assert_int_equal(bk_adamw_grad_to_host(&mixed, i, grad, &err), BK_OK);
        if (memcmp(h->grad, grad, bytes) != 0)
            fail_msg("group %d: the clipped gradients differ", i);
        free(grad);
    }
    /* and back: edited mirrors reach the device (a checkpoint load) */
    mixed.groups[0].param_host[5] = 42.0f, mixed.groups[1].v_host[7] = 0.5f;
    assert_int_equal(bk_adamw_to_device(&mixed, &err), BK_OK);
    float back[8];
    assert_int_equal(dev->download(dev, back, mixed.groups[0].param, sizeof back, &err), BK_OK);
    assert_true(back[5] == 42.0f);
    assert_int_equal(dev->download(dev, back, mixed.groups[1].v, sizeof back, &err), BK_OK);
    assert_true(back[7] == 0.5f);
    bk_adamw_free(&mixed);
    for (int i = 0; i < N_GROUPS; i++) {
        if (i < 2) {
            dev->release(dev, dparam[i]);
            dev->release(dev, dgrad[i]);
        } else
            free(dparam[i]), free(hgrad[i]);
        free(mirror[i]);
    }
    release(&host, bufs);
    bk_backend_destroy(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grad_norm_is_bit_identical_across_thread_counts),
        cmocka_unit_test(clipped_steps_are_bit_identical_across_thread_counts),
        cmocka_unit_test(emulated_device_groups_match_the_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
