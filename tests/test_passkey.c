/* Passkey retrieval and generation (eval/passkey.h, eval/generate.h): the sequence's layout, the
 * teacher-forced scorer on hand-made logits (the right digits: correct; one digit off: not), the keys,
 * the sampler (greedy = argmax, top-k 1 = argmax, a seed = one draw sequence, frequencies follow the
 * softmax), and on a small random model: the logits kept by bk_lm_logits_at against a second path (the
 * evaluation forward's per-token losses, which are smallest for the argmax), and generate's first greedy
 * token against both. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "eval/generate.h"
#include "eval/passkey.h"

#include <math.h>
#include <stdlib.h>

static void text_of(const int32_t *seq, int32_t n, char *out)
{
    for (int32_t i = 0; i < n; i++)
        out[i] = (char)seq[i];
    out[n] = 0;
}

static void test_layout(void **state)
{
    (void)state;
    bk_error err;
    assert_int_equal(bk_passkey_min_length(), 101);
    const int32_t lengths[] = {101, 128, 500, 1000};
    const double depths[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
        for (size_t j = 0; j < sizeof depths / sizeof depths[0]; j++) {
            const int32_t T = lengths[i];
            int32_t *seq = malloc((size_t)(T + 1) * sizeof *seq), at = -1;
            char *text = malloc((size_t)T + 2);
            assert_int_equal(bk_passkey_build(T, depths[j], 12345, seq, &at, &err), BK_OK);
            text_of(seq, T + 1, text);
            const int32_t F = T + 1 - 102;
            /* the end: the question, then the key */
            assert_string_equal(text + T + 1 - 43, "What is the pass key? The pass key is 12345");
            /* the needle where it says, starting a sentence, at or before round(depth F) */
            assert_true(at >= 0 && at <= lround(depths[j] * F));
            assert_memory_equal(text + at, "The pass key is 12345. Remember it. 12345 is the pass key. ", 59);
            assert_true(at == 0 || at == F || (text[at - 1] == ' ' && text[at - 2] == '.'));
            /* the filler around it is the filler stream */
            const char filler[] = BK_PASSKEY_FILLER;
            for (int32_t k = 0; k < at; k++)
                assert_int_equal(text[k], filler[k % (sizeof filler - 1)]);
            for (int32_t k = at; k < F; k++)
                assert_int_equal(text[k + 59], filler[k % (sizeof filler - 1)]);
            if (depths[j] == 0.0)
                assert_int_equal(at, 0);
            if (depths[j] == 1.0)
                assert_int_equal(at, F);
            free(seq), free(text);
        }
    int32_t seq[200], at;
    assert_int_equal(bk_passkey_build(100, 0.5, 12345, seq, &at, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "passkey length 100: the shortest is 101 tokens");
    assert_int_equal(bk_passkey_build(150, 1.5, 12345, seq, &at, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "depth 1.5: expected a relative depth in [0, 1]");
    assert_int_equal(bk_passkey_build(150, NAN, 12345, seq, &at, &err), BK_ERR_INVALID);
}

static void test_grid_checks(void **state)
{
    (void)state;
    bk_error err;
    int32_t ok[] = {128, 256}, short_[] = {128, 64};
    double depths[] = {0, 0.5, 1}, bad_depth[] = {0, -0.25};
    assert_int_equal(bk_passkey_check(ok, 2, depths, 3, 1, 1 << 24, &err), BK_OK);
    assert_int_equal(bk_passkey_check(short_, 2, depths, 3, 1, 1 << 24, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--lengths: 64 is below the shortest passkey length, 101 tokens");
    assert_int_equal(bk_passkey_check(ok, 2, bad_depth, 2, 1, 1 << 24, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--depths: -0.25 is outside [0, 1]");
    assert_int_equal(bk_passkey_check(ok, 2, depths, 3, 0, 1 << 24, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--trials: expected at least 1 trial, got 0");
}

/* The scorer on an oracle: logits whose maximum is on the right digits score 5 (correct); one position
 * with its maximum on the next digit scores 4 (the trial fails); a tie goes to the lower id. */
static void test_scorer(void **state)
{
    (void)state;
    enum { V = 256 };
    const int32_t answer[5] = {'4', '0', '9', '1', '7'};
    float *logits = calloc(5 * V, sizeof *logits);
    for (int j = 0; j < 5; j++) {
        for (int v = 0; v < V; v++)
            logits[j * V + v] = (float)sin(v + 7.0 * j); /* in [-1, 1] */
        logits[j * V + answer[j]] = 2.0f;
    }
    assert_int_equal(bk_passkey_score(logits, V, answer, 5), 5);
    logits[3 * V + '2'] = 3.0f; /* position 3 now prefers '2' over '1' */
    assert_int_equal(bk_passkey_score(logits, V, answer, 5), 4);
    logits[3 * V + '2'] = 2.0f; /* a tie of '1' and '2': the lower id, '1', is the argmax */
    assert_int_equal(bk_passkey_score(logits, V, answer, 5), 5);
    logits[3 * V + '0'] = 2.0f; /* a tie with '0', lower than '1': wrong */
    assert_int_equal(bk_passkey_score(logits, V, answer, 5), 4);
    free(logits);
}

static void test_keys(void **state)
{
    (void)state;
    int distinct = 0;
    for (int t = 0; t < 100; t++) {
        uint32_t k = bk_passkey_key(7, 256, 0.5, t);
        assert_true(k >= 10000 && k <= 99999);
        assert_int_equal(k, bk_passkey_key(7, 256, 0.5, t)); /* deterministic */
        distinct += k != bk_passkey_key(7, 256, 0.5, t + 1);
    }
    assert_true(distinct >= 99);
    assert_int_not_equal(bk_passkey_key(7, 256, 0.5, 0), bk_passkey_key(8, 256, 0.5, 0));
    assert_int_not_equal(bk_passkey_key(7, 256, 0.5, 0), bk_passkey_key(7, 512, 0.5, 0));
    assert_int_not_equal(bk_passkey_key(7, 256, 0.5, 0), bk_passkey_key(7, 256, 0.25, 0));
}

static void test_sampler(void **state)
{
    (void)state;
    enum { V = 8 };
    float logits[V] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, -3.0f, 1.5f};
    char scratch[V * (sizeof(int32_t) + sizeof(double))];
    assert_true(bk_sampler_scratch_size(V) <= sizeof scratch);
    bk_sampler greedy = {0, 1.0, 0};
    assert_int_equal(bk_sampler_next(&greedy, logits, V, scratch), 1); /* tie of 1 and 3: the lower */
    bk_sampler k1 = {1, 5.0, 42};
    for (int i = 0; i < 20; i++)
        assert_int_equal(bk_sampler_next(&k1, logits, V, scratch), 1);
    /* a seed gives one sequence; another seed another */
    bk_sampler a = {V, 1.0, 3}, b = {V, 1.0, 3}, c = {V, 1.0, 4};
    int same_c = 1;
    for (int i = 0; i < 50; i++) {
        int32_t x = bk_sampler_next(&a, logits, V, scratch);
        assert_int_equal(x, bk_sampler_next(&b, logits, V, scratch));
        same_c &= x == bk_sampler_next(&c, logits, V, scratch);
    }
    assert_false(same_c);
    /* top-k 2 of logits (log 3, log 1, ...) at temperature 1: 3/4 and 1/4 */
    float two[V] = {(float)log(1.0), -5, (float)log(3.0), -6, -7, -8, -9, -10};
    bk_sampler s = {2, 1.0, 11};
    int n0 = 0, n2 = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t x = bk_sampler_next(&s, two, V, scratch);
        n0 += x == 0, n2 += x == 2;
    }
    assert_int_equal(n0 + n2, 4000); /* nothing outside the top 2 */
    assert_true(fabs(n2 / 4000.0 - 0.75) < 0.03);
    /* temperature 2 flattens: 3^(1/2) : 1 */
    bk_sampler hot = {2, 2.0, 12};
    n2 = 0;
    for (int i = 0; i < 4000; i++)
        n2 += bk_sampler_next(&hot, two, V, scratch) == 2;
    assert_true(fabs(n2 / 4000.0 - sqrt(3.0) / (1.0 + sqrt(3.0))) < 0.03);
    bk_error err;
    bk_sampler bad = {V + 1, 1.0, 0};
    assert_int_equal(bk_sampler_check(&bad, V, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--top-k: expected an integer in [1, 8] (the vocabulary), got 9");
    bad = (bk_sampler){2, 0.0, 0};
    assert_int_equal(bk_sampler_check(&bad, V, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--temperature: expected a finite number > 0, got 0");
}

/* A small random model (no training needed: the paths must agree on whatever it computes). */
static const char model_text[] = "[model]\nlayers = 2\nheads = 2\ndim = 16\n[train]\nlength = 16\n[data]\n"
                                 "paths = [\"nowhere\"]\n[[term]]\nplugin = \"alibi\"\n";

static void test_model_paths(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err;
    const char *sets[] = {"run.device=cpu"};
    if (bk_lm_open_text(&lm, model_text, "test model", ".", sets, 1, &err))
        fail_msg("%s", err.message);
    enum { T = 12, V = 256 };
    const char prompt[] = "Hello there.";
    int32_t in[T];
    bk_text_encode(prompt, T, in);
    /* the logits of every position, and of position T-1 in a batch of 2 */
    int32_t rows[T];
    for (int t = 0; t < T; t++)
        rows[t] = t;
    float *all = malloc((size_t)T * V * sizeof *all), *pair = malloc(2 * (size_t)V * sizeof *pair);
    int32_t in2[2 * T], last = T - 1;
    memcpy(in2, in, sizeof in), memcpy(in2 + T, in, sizeof in);
    assert_int_equal(bk_lm_logits_at(&lm, in, 1, T, rows, T, all, &err), BK_OK);
    assert_int_equal(bk_lm_logits_at(&lm, in2, 2, T, &last, 1, pair, &err), BK_OK);
    for (int v = 0; v < V; v++) {
        assert_float_equal(pair[v], all[(T - 1) * V + v], 1e-5);
        assert_float_equal(pair[V + v], all[(T - 1) * V + v], 1e-5);
    }
    /* second path: the evaluation forward (no logits kept) with every token as the target of the last
     * position, V sequences at once: loss(v) = logsumexp - logit(v), smallest at the argmax */
    int32_t *inputs = malloc((size_t)V * T * sizeof *inputs), *targets = malloc((size_t)V * T * sizeof *targets);
    for (int v = 0; v < V; v++)
        for (int t = 0; t < T; t++) {
            inputs[v * T + t] = in[t];
            targets[v * T + t] = t + 1 < T ? in[t + 1] : v;
        }
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_OK);
    assert_int_equal(bk_gpt_forward(&lm.gpt, inputs, targets, V, T, 0, &err), BK_OK);
    int32_t best = 0;
    for (int v = 0; v < V; v++) {
        const float loss = lm.gpt.losses[v * T + T - 1];
        if (loss < lm.gpt.losses[best * T + T - 1])
            best = v;
        /* and the loss is logsumexp(logits) - logit(v) of the kept logits */
        double m = all[(T - 1) * V], s = 0.0;
        for (int u = 0; u < V; u++)
            m = fmax(m, all[(T - 1) * V + u]);
        for (int u = 0; u < V; u++)
            s += exp(all[(T - 1) * V + u] - m);
        assert_float_equal(loss, m + log(s) - all[(T - 1) * V + v], 1e-4);
    }
    assert_int_equal(best, bk_argmax(all + (T - 1) * V, V));
    /* an evaluation forward that keeps its predictions (eval --predictions): the argmax of the kept logits
     * at every position */
    int32_t pred[T], tg1[T];
    for (int t = 0; t < T; t++)
        tg1[t] = t + 1 < T ? in[t + 1] : 0;
    lm.gpt.argmax = pred;
    assert_int_equal(bk_gpt_forward(&lm.gpt, in, tg1, 1, T, 0, &err), BK_OK);
    for (int t = 0; t < T; t++)
        assert_int_equal(pred[t], bk_argmax(all + (size_t)t * V, V));
    assert_int_equal(bk_gpt_forward(&lm.gpt, in, tg1, 1, T, 1, &err), BK_ERR_UNSUPPORTED); /* training keeps none */
    assert_message_has(err.message, "the most likely tokens are kept by an evaluation forward");
    lm.gpt.argmax = NULL;
    /* generate's first greedy token is that argmax; 6 greedy tokens twice are the same */
    bk_sampler g = {0, 1.0, 0};
    int32_t out[6], again[6];
    assert_int_equal(bk_generate(&lm, in, T, 6, 64, &g, out, &err), BK_OK);
    assert_int_equal(out[0], best);
    assert_int_equal(bk_generate(&lm, in, T, 6, 64, &g, again, &err), BK_OK);
    assert_memory_equal(out, again, sizeof out);
    /* each greedy token is the argmax given the tokens before it */
    int32_t grown[T + 6];
    memcpy(grown, in, sizeof in), memcpy(grown + T, out, sizeof out);
    for (int t = 0; t < 6; t++) {
        int32_t at = T + t - 1;
        assert_int_equal(bk_lm_logits_at(&lm, grown, 1, T + t, &at, 1, pair, &err), BK_OK);
        assert_int_equal(bk_argmax(pair, V), out[t]);
    }
    /* the limit and the empty prompt */
    assert_int_equal(bk_generate(&lm, in, T, 6, 16, &g, out, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "the prompt (12 tokens) and 6 new tokens need a forward of 17 tokens, beyond "
                                    "the limit of 16 tokens");
    assert_int_equal(bk_generate(&lm, in, 0, 6, 64, &g, out, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "the prompt is empty");
    /* a passkey grid runs on it: accuracies in [0, 1], the trials counted */
    const int32_t lengths[] = {101, 160};
    const double depths[] = {0, 1};
    bk_passkey_cell cells[4];
    assert_int_equal(bk_passkey_run(&lm, lengths, 2, depths, 2, 3, 1, cells, NULL, NULL, &err), BK_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(cells[i].length, lengths[i / 2]);
        assert_true(cells[i].depth == depths[i % 2]);
        assert_int_equal(cells[i].trials, 3);
        assert_true(cells[i].accuracy >= 0 && cells[i].accuracy <= 1);
        assert_true(cells[i].digit_accuracy >= 0 && cells[i].digit_accuracy <= 1);
        assert_true(cells[i].digit_accuracy >= cells[i].accuracy);
    }
    free(all), free(pair), free(inputs), free(targets);
    bk_lm_close(&lm);
}

/* A BPE model (vocab other than 256) is refused with a message that says why. */
static void test_bpe_refused(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err;
    const char *sets[] = {"run.device=cpu", "model.vocab=512", "data.format=\"shards\""};
    if (bk_lm_open_text(&lm, model_text, "test model", ".", sets, 3, &err))
        fail_msg("%s", err.message);
    assert_int_equal(bk_text_model_check(&lm, "passkey", 0, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "passkey: the model has a vocabulary of 512 tokens and its checkpoint carries no tokenizer");
    bk_lm_close(&lm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),  cmocka_unit_test(test_grid_checks), cmocka_unit_test(test_scorer),
        cmocka_unit_test(test_keys),    cmocka_unit_test(test_sampler),     cmocka_unit_test(test_model_paths),
        cmocka_unit_test(test_bpe_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
