/* The activation memory of the model (bk_gpt_activation_bytes, model/gpt.h): that it is what a forward
 * allocates, and how it grows with the length T on each backend, from its formula at GPT-2 small's shape
 * (12 layers, 12 heads, 768 channels, vocabulary 50,257):
 *  - evaluation is linear in T on the CPU and on the device backends, fused or materialized: no T x T
 *    buffer, so long lengths need memory in proportion (the bound at T = 65,536 below);
 *  - training is linear in T with the fused attention (row statistics), and has exactly the T^2 term
 *    of the saved probabilities (B*H*T*T floats per layer; nothing takes their gradient, so none is
 *    allocated) on the CPU and with the materialized attention.
 * Linear in T means f(4T) - f(2T) = 2 (f(2T) - f(T)); a term c T^2 adds 6 c T^2 to the left side.
 * With bf16 storage ([run] precision = "bf16") the activations that are kept in bf16 take half their
 * room, less the fp32 stage they are computed in, by exactly the formula below. */
#include "test_util.h"

#include "model/backend.h"
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>

enum { L = 12, H = 12, C = 768, V = 50257 };

/* f(4T) - f(2T) - 2 (f(2T) - f(T)) in bytes (exact in signed 64-bit arithmetic at these sizes) */
static int64_t curvature(bk_backend *be, int B, int T, int train)
{
    const int64_t f1 = (int64_t)bk_gpt_activation_bytes(be, L, H, C, V, B, T, train);
    const int64_t f2 = (int64_t)bk_gpt_activation_bytes(be, L, H, C, V, B, 2 * T, train);
    const int64_t f4 = (int64_t)bk_gpt_activation_bytes(be, L, H, C, V, B, 4 * T, train);
    return (f4 - f2) - 2 * (f2 - f1);
}

/* the T^2 term of saved probabilities: L layers x B*H*T*T floats, once (no gradient slot) */
static int64_t probs_curvature(int B, int T)
{
    return 6 * (int64_t)T * T * ((int64_t)sizeof(float) * L * B * H);
}

static bk_backend *emulated(void)
{
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    return be;
}

static void eval_is_linear_in_length(void **state)
{
    (void)state;
    bk_backend *emu = emulated(), *cpu = bk_backend_cpu();
    for (int T = 1024; T <= 16384; T *= 4) { /* past the block of logits rows evaluation keeps */
        assert_int_equal(curvature(cpu, 1, T, 0), 0);
        emu->attention = BK_ATTENTION_FUSED;
        assert_int_equal(curvature(emu, 1, T, 0), 0);
        emu->attention = BK_ATTENTION_MATERIALIZED;
        assert_int_equal(curvature(emu, 1, T, 0), 0);
    }
    /* one sequence of 65,536 tokens: one layer's activations and a block of logits, about 4 GiB */
    emu->attention = BK_ATTENTION_FUSED;
    const size_t bytes = bk_gpt_activation_bytes(emu, L, H, C, V, 1, 65536, 0);
    print_message("GPT-2 small, evaluation of 1 x 65536 tokens: %.3f GiB of activations\n",
                  (double)bytes / (1024.0 * 1024 * 1024));
    assert_true(bytes < (size_t)4200 * 1024 * 1024);
    assert_true(bytes > (size_t)65536 * 20 * C * sizeof(float)); /* the 20 C floats per token it must hold */
    bk_backend_destroy(emu);
}

static void training_memory_by_attention(void **state)
{
    (void)state;
    bk_backend *emu = emulated(), *cpu = bk_backend_cpu();
    for (int B = 1; B <= 4; B *= 4)
        for (int T = 256; T <= 4096; T *= 4) {
            emu->attention = BK_ATTENTION_FUSED;
            assert_int_equal(curvature(emu, B, T, 1), 0);
            emu->attention = BK_ATTENTION_MATERIALIZED;
            assert_int_equal(curvature(emu, B, T, 1), probs_curvature(B, T));
            assert_int_equal(curvature(cpu, B, T, 1), probs_curvature(B, T));
        }
    /* at 8 x 1024 tokens the fused attention keeps 8 * 12 * 1024 floats per layer instead of
     * 8 * 12 * 1024 * 1024 probabilities */
    emu->attention = BK_ATTENTION_MATERIALIZED;
    const size_t materialized = bk_gpt_activation_bytes(emu, L, H, C, V, 8, 1024, 1);
    emu->attention = BK_ATTENTION_FUSED;
    const size_t fused = bk_gpt_activation_bytes(emu, L, H, C, V, 8, 1024, 1);
    assert_int_equal(materialized - fused, sizeof(float) * L * 8 * H * (1024 * 1024 - 1024));
    /* docs/design.md: fused, 14.8 GiB; the two gradient slots training leaves out (of the saved attention
     * and of the probabilities: acts - dacts, as matches_what_forward_allocates asserts) would add 1.5
     * GiB, and 4.5 GiB more with the materialized attention */
    const double gib = 1024.0 * 1024 * 1024;
    double left_out[2];
    for (int mat = 0; mat <= 1; mat++) {
        emu->attention = mat ? BK_ATTENTION_MATERIALIZED : BK_ATTENTION_FUSED;
        left_out[mat] = (double)sizeof(float) * ((double)L * emu->attention_saved(emu, 8, 1024, H) + 8.0 * 1024 * V);
    }
    print_message("GPT-2 small, training of 8 x 1024 tokens, fused: %.3f GiB; the two gradient slots left out: %.3f GiB "
                  "fused, %.3f GiB more materialized\n", (double)fused / gib, left_out[0] / gib,
                  (left_out[1] - left_out[0]) / gib);
    assert_true(fabs((double)fused / gib - 14.8) < 0.05);
    assert_true(fabs(left_out[0] / gib - 1.5) < 0.05);
    assert_true(fabs((left_out[1] - left_out[0]) / gib - 4.5) < 0.05);
    bk_backend_destroy(emu);
}

/* bf16 storage keeps ln1, qkv, atty, ln2 and fch_gelu of every layer (10 C values per token) and lnf (C)
 * in 2 bytes instead of 4, and adds an fp32 stage of 3 C floats per token; gradients stay fp32. */
static void bf16_storage_memory(void **state)
{
    (void)state;
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_emulated_create(&be, BK_MATMUL_BF16, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    for (int train = 0; train <= 1; train++) {
        const int B = 8, T = 1024;
        const int64_t BT = (int64_t)B * T, La = train ? L : 1;
        be->precision = BK_PRECISION_FP32;
        const int64_t fp32 = (int64_t)bk_gpt_activation_bytes(be, L, H, C, V, B, T, train);
        be->precision = BK_PRECISION_BF16;
        const int64_t bf16 = (int64_t)bk_gpt_activation_bytes(be, L, H, C, V, B, T, train);
        assert_int_equal(fp32 - bf16, 2 * (La * BT * 10 * C + BT * C) - 4 * BT * 3 * C);
        print_message("GPT-2 small, %s of 8 x 1024 tokens: %.3f GiB of activations in fp32, %.3f GiB with bf16 "
                      "storage\n",
                      train ? "training" : "evaluation", (double)fp32 / (1 << 30), (double)bf16 / (1 << 30));
        assert_int_equal(curvature(be, 1, T, train), 0); /* still linear in T with the fused attention */
    }
    bk_backend_destroy(be);
}

/* The function reports what a forward allocates (m->acts_size floats, and m->dacts_size when training),
 * on the CPU, on the emulated device with the fused and the materialized attention, and with bf16
 * storage. */
static void matches_what_forward_allocates(void **state)
{
    (void)state;
    bk_error err = {0};
    for (int kind = 0; kind < 4; kind++) {
        bk_backend *be = kind == 0 ? bk_backend_cpu() : emulated();
        if (kind == 2)
            be->attention = BK_ATTENTION_MATERIALIZED;
        if (kind == 3)
            be->matmul = BK_MATMUL_BF16, be->precision = BK_PRECISION_BF16;
        bk_gpt m;
        if (bk_gpt_init(&m, 2, 2, 8, 16, NULL, 1, &err) != BK_OK || bk_gpt_set_backend(&m, be, &err) != BK_OK)
            fail_msg("model: %s", err.message);
        const int B = 2, T = 300;
        int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
        assert_non_null(in);
        assert_non_null(tg);
        for (int n = 0; n < B * T; n++)
            in[n] = n % 16, tg[n] = (n * 7) % 16;
        for (int train = 0; train <= 1; train++) {
            if (bk_gpt_forward(&m, in, tg, B, T, train, &err) != BK_OK)
                fail_msg("forward (%s, train %d): %s", be->name, train, err.message);
            assert_int_equal((m.acts_size + m.dacts_size) * sizeof(float),
                             bk_gpt_activation_bytes(be, 2, 2, 8, 16, B, T, train));
            assert_int_equal(m.dacts_size == 0, !train);
            /* fp32: gradients of everything but the saved attention and the probabilities */
            if (train && kind < 3)
                assert_int_equal(m.acts_size - m.dacts_size, 2 * be->attention_saved(be, B, T, 2) + (size_t)B * T * 16);
        }
        free(in);
        free(tg);
        bk_gpt_free(&m);
        if (kind)
            bk_backend_destroy(be);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eval_is_linear_in_length),
        cmocka_unit_test(training_memory_by_attention),
        cmocka_unit_test(bf16_storage_memory),
        cmocka_unit_test(matches_what_forward_allocates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
