/* The experiment file: schema defaults, every kind of configuration error with its position, and
 * command-line overrides. */
#include "test_util.h"

#include "config/experiment.h"
#include "model/backend.h" /* bk_precision, bk_matmul_mode */

#include <math.h>

/* Parse `text` as "exp.toml" and expect failure with a message containing each needle. */
static void expect_error(const char *text, const char *const *overrides, size_t n, const char *needle1,
                         const char *needle2)
{
    bk_experiment exp;
    bk_error err;
    int rc = bk_experiment_parse(text, "exp.toml", overrides, n, &exp, &err);
    if (rc == BK_OK) {
        bk_experiment_free(&exp);
        fail_msg("expected an error containing \"%s\" for:\n%s", needle1, text);
    }
    assert_message_has(err.message, needle1);
    if (needle2)
        assert_message_has(err.message, needle2);
}

static void defaults(void **state)
{
    (void)state;
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse("", "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.model.layers, 4);
    assert_int_equal(exp.model.heads, 8);
    assert_int_equal(exp.model.dim, 256);
    assert_int_equal(exp.model.vocab, 256);
    assert_int_equal(exp.attention.mixing, BK_MIX_SUM);
    assert_int_equal(exp.attention.learn_weights, 0);
    assert_int_equal(exp.train.length, 256);
    assert_int_equal(exp.run.device, BK_DEVICE_AUTO);
    assert_int_equal(exp.n_terms, 0);
    assert_int_equal(bk_experiment_head_dim(&exp), 32);
    bk_experiment_free(&exp);
}

static void reads_values_and_terms(void **state)
{
    (void)state;
    const char *text = "[model]\nlayers = 2\nheads = 12\ndim = 384\n"
                       "[attention]\nmixing = \"kernel\"\n"
                       "[[term]]\nplugin = \"alibi\"\nslope_scale = 96.0\n"
                       "[[term]]\nplugin = \"./libmine.so\"\nname = \"mine\"\nstream = \"segment\"\n"
                       "weight = 2\nper_layer = true\n";
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse(text, "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.model.layers, 2);
    assert_int_equal(exp.model.heads, 12);
    assert_int_equal(bk_experiment_head_dim(&exp), 32);
    assert_int_equal(exp.attention.mixing, BK_MIX_KERNEL);
    assert_int_equal(exp.n_terms, 2);
    assert_string_equal(exp.terms[0].plugin, "alibi");
    assert_null(exp.terms[0].name);
    assert_int_equal(exp.terms[0].stream, BK_STREAM_TOKEN);
    assert_true(isnan(exp.terms[0].weight));
    assert_int_equal(exp.terms[0].per_layer, -1);
    assert_int_equal(exp.terms[0].pos.line, 7);
    assert_string_equal(exp.terms[1].plugin, "./libmine.so");
    assert_string_equal(exp.terms[1].name, "mine");
    assert_int_equal(exp.terms[1].stream, BK_STREAM_SEGMENT);
    assert_true(exp.terms[1].weight == 2.0);
    assert_int_equal(exp.terms[1].per_layer, 1);
    assert_int_equal(exp.terms[1].index, 2);
    bk_experiment_free(&exp);
}

static void unknown_section(void **state)
{
    (void)state;
    expect_error("[model]\nheads = 4\n\n[modle]\nlayers = 2\n", NULL, 0, "exp.toml:4:",
                 "unknown section 'modle' (did you mean 'model'?); expected one of: model, attention, train, data, run, term");
}

static void unknown_key_with_position(void **state)
{
    (void)state;
    expect_error("[model]\nlayers = 2\nhaeds = 4\n", NULL, 0, "exp.toml:3:1: unknown key 'haeds' in [model]",
                 "(did you mean 'heads'?); expected one of: layers, heads, dim, vocab");
}

static void wrong_type_with_position(void **state)
{
    (void)state;
    expect_error("[model]\nheads = \"8\"\n", NULL, 0, "exp.toml:2:9: [model] heads: expected an integer, got string",
                 NULL);
    expect_error("[attention]\nlearn_weights = 1\n", NULL, 0,
                 "exp.toml:2:17: [attention] learn_weights: expected a boolean (true or false), got integer", NULL);
    expect_error("model = 3\n", NULL, 0, "exp.toml:1:9: 'model': expected a table ([section]), got integer", NULL);
}

static void out_of_range_and_choices(void **state)
{
    (void)state;
    expect_error("[model]\nheads = 0\n", NULL, 0, "exp.toml:2:9: [model] heads: expected an integer in [1, 1024], got 0",
                 NULL);
    expect_error("[attention]\nmixing = \"prod\"\n", NULL, 0,
                 "exp.toml:2:10: [attention] mixing: expected one of sum, kernel, got 'prod'", NULL);
    expect_error("[model]\nheads = 6\ndim = 256\n", NULL, 0, "exp.toml:3:7: [model] dim: 256 is not a multiple of heads = 6",
                 NULL);
}

static void bad_toml(void **state)
{
    (void)state;
    expect_error("[model]\nheads = 8\nlayers = = 2\n", NULL, 0, "exp.toml:3:", "invalid TOML");
}

static void term_errors(void **state)
{
    (void)state;
    expect_error("[[term]]\nslope_scale = 2.0\n", NULL, 0, "exp.toml:1:1: [[term]] #1 has no 'plugin' key", NULL);
    expect_error("[[term]]\nplugin = 3\n", NULL, 0, "exp.toml:2:10: [[term]] #1: expected a plugin name or path", NULL);
    expect_error("[[term]]\nplugin = \"alibi\"\nstream = \"segmnt\"\n", NULL, 0,
                 "exp.toml:3:10: [[term]] #1 stream: expected one of token, segment, got 'segmnt'", NULL);
    expect_error("[[term]]\nplugin = \"alibi\"\nweight = \"x\"\n", NULL, 0,
                 "exp.toml:3:10: [[term]] #1: expected a number for 'weight', got string", NULL);
    expect_error("[[term]]\nplugin = \"a\"\nname = \"x\"\n[[term]]\nplugin = \"b\"\nname = \"x\"\n", NULL, 0,
                 "exp.toml:6:8: [[term]] #2: name 'x' is already used by [[term]] #1", NULL);
    expect_error("term = 3\n", NULL, 0, "'term': expected an array of tables ([[term]]), got integer", NULL);
}

static void overrides(void **state)
{
    (void)state;
    const char *text = "[model]\nheads = 8\n[[term]]\nplugin = \"alibi\"\n";
    const char *sets[] = {"model.heads=4", "attention.mixing=kernel", "term.0.weight=0.5", "train.length=64"};
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse(text, "exp.toml", sets, 4, &exp, &err), BK_OK);
    assert_int_equal(exp.model.heads, 4);
    assert_int_equal(exp.attention.mixing, BK_MIX_KERNEL);
    assert_true(exp.terms[0].weight == 0.5);
    assert_int_equal(exp.train.length, 64);
    bk_experiment_free(&exp);

    const char *bad[] = {"model.heads=many"};
    expect_error(text, bad, 1, "--set model.heads=many", "[model] heads: expected an integer, got string");
    const char *typo[] = {"model.haeds=4"};
    expect_error(text, typo, 1, "unknown key 'haeds' in [model]", "--set model.haeds=4");
}

static void missing_file(void **state)
{
    (void)state;
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_load("/nonexistent/exp.toml", NULL, 0, &exp, &err), BK_ERR_IO);
    assert_message_has(err.message, "cannot read '/nonexistent/exp.toml'");
}

static void data_and_training_keys(void **state)
{
    (void)state;
    const char *text = "[train]\nbatch = 4\nlr = 3e-4\n[data]\npaths = [\"a\", \"b/c\"]\nval_paths = \"v.txt\"\n"
                       "format = \"shards\"\n[run]\nout_dir = \"runs/x\"\n";
    const char *sets[] = {"data.extensions=[\".h\"]", "train.steps=7"};
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse(text, "exp.toml", sets, 2, &exp, &err), BK_OK);
    assert_int_equal(exp.train.batch, 4);
    assert_true(exp.train.lr == 3e-4);
    assert_int_equal(exp.train.steps, 7);
    assert_int_equal(exp.data.paths.n, 2);
    assert_string_equal(exp.data.paths.items[1], "b/c");
    assert_int_equal(exp.data.val_paths.n, 1); /* one string is a list of one */
    assert_string_equal(exp.data.val_paths.items[0], "v.txt");
    assert_int_equal(exp.data.extensions.n, 1);
    assert_int_equal(exp.data.format, 1);
    assert_string_equal(exp.run.out_dir, "runs/x");
    assert_true(exp.train.beta2 == 0.95); /* defaults */
    assert_int_equal(exp.data.max_bytes, 0);
    bk_experiment_free(&exp);
    expect_error("[data]\npaths = [\"a\", 3]\n", NULL, 0, "exp.toml:2:15: [data] paths element 1: expected a string, got integer",
                 NULL);
    expect_error("[data]\npaths = 3\n", NULL, 0, "exp.toml:2:9: [data] paths: expected a string or an array of strings",
                 NULL);
    expect_error("[run]\nout_dir = false\n", NULL, 0, "exp.toml:2:11: [run] out_dir: expected a string, got boolean",
                 NULL);
    expect_error("[train]\nlr = -1\n", NULL, 0, "exp.toml:2:6: [train] lr: expected a number in [0, 10], got -1", NULL);
    expect_error("[data]\nformat = \"csv\"\n", NULL, 0, "[data] format: expected one of text, shards, got 'csv'", NULL);
}

/* [run] precision: fp32 by default; "bf16" makes matmul "bf16" when matmul is not set; another matmul or
 * the materialized attention with it is an error at that key, from the file or from --set. */
static void precision(void **state)
{
    (void)state;
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse("", "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.run.precision, BK_PRECISION_FP32);
    assert_int_equal(exp.run.matmul, BK_MATMUL_FP32);
    bk_experiment_free(&exp);
    assert_int_equal(bk_experiment_parse("[run]\nprecision = \"bf16\"\n", "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.run.precision, BK_PRECISION_BF16);
    assert_int_equal(exp.run.matmul, BK_MATMUL_BF16);
    bk_experiment_free(&exp);
    const char *both[] = {"run.precision=bf16", "run.matmul=bf16"};
    assert_int_equal(bk_experiment_parse("", "exp.toml", both, 2, &exp, &err), BK_OK);
    assert_int_equal(exp.run.matmul, BK_MATMUL_BF16);
    bk_experiment_free(&exp);
    expect_error("[run]\nprecision = \"bf16\"\nmatmul = \"tf32\"\n", NULL, 0,
                 "exp.toml:3:10: [run] matmul = \"tf32\" with precision = \"bf16\"", "expected matmul = \"bf16\"");
    const char *fp32[] = {"run.matmul=fp32"};
    expect_error("[run]\nprecision = \"bf16\"\n", fp32, 1, "--set run.matmul=fp32", "matmul = \"fp32\" with");
    expect_error("[run]\nprecision = \"bf16\"\nattention = \"materialized\"\n", NULL, 0,
                 "exp.toml:3:13: [run] attention = \"materialized\" with precision = \"bf16\"",
                 "expected attention = \"fused\"");
    expect_error("[run]\nprecision = \"fp16\"\n", NULL, 0, "[run] precision: expected one of fp32, bf16, got 'fp16'",
                 NULL);
}

static void closest_word(void **state)
{
    (void)state;
    const char *words[] = {"layers", "heads", "dim", "vocab"};
    assert_string_equal(bk_closest_word("haeds", words, 4), "heads");
    assert_string_equal(bk_closest_word("layer", words, 4), "layers");
    assert_null(bk_closest_word("zzzzzz", words, 4));
    assert_null(bk_closest_word("x", words, 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(reads_values_and_terms),
        cmocka_unit_test(unknown_section),
        cmocka_unit_test(unknown_key_with_position),
        cmocka_unit_test(wrong_type_with_position),
        cmocka_unit_test(out_of_range_and_choices),
        cmocka_unit_test(bad_toml),
        cmocka_unit_test(term_errors),
        cmocka_unit_test(overrides),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(data_and_training_keys),
        cmocka_unit_test(precision),
        cmocka_unit_test(closest_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
