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
    /* names are keys of checkpoints, CSV cells and table cells: commas, new lines, '=' and '<' refused */
    static const char *const bad_names[] = {"a,b", "a\\nb", "=HYPERLINK(1)", "<script>", "-x", ".hidden",
                                            "x23456789012345678901234567890123456789012345678901"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "[[term]]\nplugin = \"alibi\"\nname = \"%s\"\n", bad_names[i]);
        expect_error(text, NULL, 0, "exp.toml:3:8: [[term]] #1 name '",
                     "': expected 1-48 characters of A-Z a-z 0-9 _ - . + (not starting with '.', '-' or '+')");
    }
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

/* What each key is to a trained model (experiment.h, bk_key_role): one rule for every schema key. */
static void key_roles(void **state)
{
    (void)state;
    assert_int_equal(bk_experiment_key_role("model", "heads"), BK_KEY_MODEL);
    assert_int_equal(bk_experiment_key_role("model", "vocab"), BK_KEY_MODEL);
    assert_int_equal(bk_experiment_key_role("attention", "mixing"), BK_KEY_MODEL);
    assert_int_equal(bk_experiment_key_role("term", "plugin"), BK_KEY_MODEL);
    assert_int_equal(bk_experiment_key_role("train", "length"), BK_KEY_FACT);
    assert_int_equal(bk_experiment_key_role("train", "batch"), BK_KEY_FACT);
    assert_int_equal(bk_experiment_key_role("train", "accumulate"), BK_KEY_FACT);
    assert_int_equal(bk_experiment_key_role("train", "seed"), BK_KEY_FACT);
    assert_int_equal(bk_experiment_key_role("train", "steps"), BK_KEY_SCHEDULE);
    assert_int_equal(bk_experiment_key_role("train", "lr"), BK_KEY_SCHEDULE);
    assert_int_equal(bk_experiment_key_role("train", "nonfinite"), BK_KEY_SCHEDULE);
    assert_int_equal(bk_experiment_key_role("data", "paths"), BK_KEY_RUN);
    assert_int_equal(bk_experiment_key_role("run", "device"), BK_KEY_RUN);
    assert_int_equal(bk_experiment_key_role("train", "nosuch"), BK_KEY_RUN);
}

/* The differences between an experiment and the same with overrides: each changed key once, with its
 * role, its --set spelling, its name in messages and both values; a key set to its own value (an
 * integer for a float included) is no change. */
static void differences(void **state)
{
    (void)state;
    const char *text = "[model]\nheads = 4\ndim = 32\n[train]\nlength = 32\nlr = 0.001\n[data]\npaths = [\"a\"]\n"
                       "[[term]]\nplugin = \"alibi\"\nslope_scale = 1\n"
                       "[[term]]\nplugin = \"kerple\"\nweight = 0.5\n";
    bk_experiment a, b;
    bk_error err;
    assert_int_equal(bk_experiment_parse(text, "exp.toml", NULL, 0, &a, &err), BK_OK);
    const char *same[] = {"model.heads=4", "train.lr=1e-3", "term.0.slope_scale=1.0", "term.1.weight=0.5",
                          "data.paths=[\"a\"]"};
    assert_int_equal(bk_experiment_parse(text, "exp.toml", same, 5, &b, &err), BK_OK);
    bk_experiment_change c[16];
    assert_int_equal(bk_experiment_diff(&a, &b, c, 16), 0);
    bk_experiment_free(&b);

    const char *sets[] = {"model.heads=8",          "train.length=64",  "train.steps=9",       "run.threads=2",
                          "data.paths=[\"a\", \"b\"]", "term.0.slope_scale=0.5", "term.1.ratio=2", "term.1.weight=1",
                          "attention.mixing=kernel"};
    assert_int_equal(bk_experiment_parse(text, "exp.toml", sets, 9, &b, &err), BK_OK);
    int n = bk_experiment_diff(&a, &b, c, 16);
    assert_int_equal(n, 9);
    /* schema order, then the terms (engine keys, then options) */
    const struct {
        bk_key_role role;
        const char *key, *where, *before, *after;
    } want[] = {
        {BK_KEY_MODEL, "model.heads", "[model] heads", "4", "8"},
        {BK_KEY_MODEL, "attention.mixing", "[attention] mixing", "\"sum\"", "\"kernel\""},
        {BK_KEY_FACT, "train.length", "[train] length", "32", "64"},
        {BK_KEY_SCHEDULE, "train.steps", "[train] steps", "1000", "9"},
        {BK_KEY_RUN, "data.paths", "[data] paths", "[\"a\"]", "[\"a\", \"b\"]"},
        {BK_KEY_RUN, "run.threads", "[run] threads", "0", "2"},
        {BK_KEY_OPTION, "term.0.slope_scale", "[[term]] #1 (alibi) option 'slope_scale'", "1", "0.5"},
        {BK_KEY_MODEL, "term.1.weight", "[[term]] #2 weight", "0.5", "1.0"},
        {BK_KEY_OPTION, "term.1.ratio", "[[term]] #2 (kerple) option 'ratio'", "not set", "2"},
    };
    for (int i = 0; i < n; i++) {
        assert_int_equal(c[i].role, want[i].role);
        assert_string_equal(c[i].key, want[i].key);
        assert_string_equal(c[i].where, want[i].where);
        assert_string_equal(c[i].before, want[i].before);
        assert_string_equal(c[i].after, want[i].after);
    }
    /* room for fewer: the count is still whole */
    assert_int_equal(bk_experiment_diff(&a, &b, c, 2), 9);
    assert_int_equal(bk_experiment_diff(&a, &b, NULL, 0), 9);
    bk_experiment_free(&b);

    /* another number of terms */
    assert_int_equal(bk_experiment_parse("[model]\nheads = 4\ndim = 32\n", "exp.toml", NULL, 0, &b, &err), BK_OK);
    n = bk_experiment_diff(&a, &b, c, 16);
    assert_true(n >= 1);
    assert_string_equal(c[n - 1].key, "term");
    assert_string_equal(c[n - 1].before, "2 terms");
    assert_string_equal(c[n - 1].after, "0 terms");
    assert_int_equal(c[n - 1].role, BK_KEY_MODEL);
    bk_experiment_free(&b);
    bk_experiment_free(&a);
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

/* [model] family: llama's keys and their defaults, and the errors of each rule, at the key */
static void model_families(void **state)
{
    (void)state;
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse("", "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.model.family, BK_FAMILY_GPT2);
    assert_int_equal(bk_experiment_kv_heads(&exp), 8);
    bk_experiment_free(&exp);
    const char *llama = "[model]\nfamily = \"llama\"\nheads = 9\nkv_heads = 3\ndim = 576\nhead_dim = 64\n"
                        "ffn_dim = 1536\ntied = false\nnorm_eps = 1e-6\n";
    assert_int_equal(bk_experiment_parse(llama, "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.model.family, BK_FAMILY_LLAMA);
    assert_int_equal(bk_experiment_kv_heads(&exp), 3);
    assert_int_equal(bk_experiment_head_dim(&exp), 64);
    assert_int_equal(exp.model.ffn_dim, 1536);
    assert_int_equal(exp.model.tied, 0);
    assert_true(exp.model.norm_eps == 1e-6);
    bk_experiment_free(&exp);
    /* head_dim frees dim from being a multiple of heads */
    assert_int_equal(bk_experiment_parse("[model]\nfamily = \"llama\"\nheads = 3\ndim = 32\nhead_dim = 8\n"
                                         "ffn_dim = 64\n",
                                         "exp.toml", NULL, 0, &exp, &err),
                     BK_OK);
    bk_experiment_free(&exp);
    expect_error("[model]\nkv_heads = 2\n", NULL, 0, "exp.toml:2:12: [model] kv_heads: read by family = \"llama\" only",
                 NULL);
    expect_error("[model]\ntied = false\n", NULL, 0, "exp.toml:2:8: [model] tied: read by family = \"llama\" only", NULL);
    expect_error("[model]\nfamily = \"llama\"\n", NULL, 0, "[model] family = \"llama\" needs ffn_dim",
                 "e.g. 704 for dim = 256");
    expect_error("[model]\nfamily = \"llama\"\nheads = 8\nkv_heads = 3\nffn_dim = 64\n", NULL, 0,
                 "exp.toml:4:12: [model] kv_heads: 3 does not divide heads = 8", NULL);
    expect_error("[model]\nfamily = \"llama\"\nhead_dim = 7\nffn_dim = 64\n", NULL, 0,
                 "exp.toml:3:12: [model] head_dim: 7 is odd", NULL);
    expect_error("[model]\nfamily = \"falcon\"\n", NULL, 0, "exp.toml:2:10: [model] family", "gpt2");
    const char *sets[] = {"model.family=\"llama\""};
    expect_error("", sets, 1, "needs ffn_dim", NULL);
}

/* [[term]] layers: the patterns and lists resolve to the layers they name; each kind of bad value is an
 * error at its position. */
static void term_layers(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        const char *on; /* of 6 layers */
    } cases[] = {
        {"\"all\"", "111111"},           {"\"every 2 from 1\"", "010101"}, {"\"every 4 from 3\"", "000100"},
        {"\"except every 4 from 3\"", "111011"}, {"\"every 1 from 0\"", "111111"}, {"\"first 2\"", "110000"},
        {"\"last 1\"", "000001"},        {"\"last 9\"", "111111"},         {"[5, 0, 2]", "101001"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[256];
        snprintf(text, sizeof text, "[model]\nlayers = 6\n[[term]]\nplugin = \"rope\"\nlayers = %s\n", cases[k].value);
        bk_experiment exp;
        bk_error err;
        if (bk_experiment_parse(text, "exp.toml", NULL, 0, &exp, &err))
            fail_msg("layers = %s: %s", cases[k].value, err.message);
        unsigned char on[6];
        assert_int_equal(bk_term_layers(&exp.terms[0], 6, on, &err), BK_OK);
        for (int l = 0; l < 6; l++)
            if (on[l] != (cases[k].on[l] == '1'))
                fail_msg("layers = %s: layer %d is %s, expected %s", cases[k].value, l, on[l] ? "on" : "off",
                         cases[k].on[l] == '1' ? "on" : "off");
        bk_experiment_free(&exp);
    }
    /* without the key: every layer */
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse("[model]\nlayers = 3\n[[term]]\nplugin = \"alibi\"\n", "exp.toml", NULL, 0,
                                         &exp, &err),
                     BK_OK);
    assert_null(exp.terms[0].layers);
    unsigned char on[3] = {0, 0, 0};
    assert_int_equal(bk_term_layers(&exp.terms[0], 3, on, &err), BK_OK);
    assert_true(on[0] && on[1] && on[2]);
    bk_experiment_free(&exp);

    const char *head = "[model]\nlayers = 4\n[[term]]\nplugin = \"alibi\"\n";
    char text[256];
#define BAD(value, needle1, needle2)                                                                                 \
    snprintf(text, sizeof text, "%slayers = %s\n", head, value), expect_error(text, NULL, 0, needle1, needle2)
    BAD("[0, 4]", "exp.toml:5:14: [[term]] #1 layers: layer 4 does not exist", "the model has 4 (0 .. 3)");
    BAD("[-1]", "exp.toml:5:11: [[term]] #1 layers: layer -1 does not exist", NULL);
    BAD("[2, 2]", "exp.toml:5:14: [[term]] #1 layers: layer 2 is listed twice", NULL);
    BAD("[]", "exp.toml:5:10: [[term]] #1 layers: selects none of the model's 4 layers", NULL);
    BAD("\"every 2 from 7\"", "exp.toml:5:10: [[term]] #1 layers: selects none", NULL);
    BAD("\"every 0 from 1\"", "exp.toml:5:10: [[term]] #1 layers: expected a list of layer indices or one of",
        "got 'every 0 from 1'");
    BAD("\"sometimes\"", "[[term]] #1 layers: expected a list", "got 'sometimes'");
    BAD("\"first 0\"", "[[term]] #1 layers: expected a list", NULL);
    BAD("\"except first 2\"", "[[term]] #1 layers: expected a list", NULL);
    BAD("\"every 2 from 1 or so\"", "[[term]] #1 layers: expected a list", NULL);
    BAD("1.5", "exp.toml:5:10: [[term]] #1 layers: expected a list of layer indices or a pattern string, got float",
        NULL);
    BAD("[\"a\"]", "exp.toml:5:11: [[term]] #1 layers: expected a layer index (an integer), got string", NULL);
#undef BAD
    /* an override too, named as the override */
    const char *set[1] = {"term.0.layers=[7]"};
    expect_error(head, set, 1, "--set term.0.layers=[7]", "layer 7 does not exist");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults),
        cmocka_unit_test(model_families),
        cmocka_unit_test(reads_values_and_terms),
        cmocka_unit_test(unknown_section),
        cmocka_unit_test(unknown_key_with_position),
        cmocka_unit_test(wrong_type_with_position),
        cmocka_unit_test(out_of_range_and_choices),
        cmocka_unit_test(bad_toml),
        cmocka_unit_test(term_errors),
        cmocka_unit_test(term_layers),
        cmocka_unit_test(overrides),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(data_and_training_keys),
        cmocka_unit_test(precision),
        cmocka_unit_test(key_roles),
        cmocka_unit_test(differences),
        cmocka_unit_test(closest_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
