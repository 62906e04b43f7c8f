/* biaskit export --hf (core/train/export.h, bk_export_hf) on tiny models:
 *  - round trips: an HF transformers directory written here (config.json, model.safetensors in F32) is
 *    imported (bk_import_hf), the checkpoint exported, and every tensor of the export is compared value by
 *    value (bit for bit) with the original file's, with the same names and shapes and no tensor more or
 *    less; config.json's fields too. For llama with GQA and heads narrower than dim / heads, untied; tied
 *    with YaRN (factor 4, attention_factor 1.2, beta_fast 16); untied with a linear scaling; and GPT-2 (its
 *    Conv1D weights transposed back, wpe from the ape term's table);
 *  - a YaRN fine-tune past its parent's length (original_length 16, [train] length 32): exported with
 *    max_position_embeddings 16, what transformers takes as YaRN's original context, and imported back to
 *    the same rope term;
 *  - --force: a non-empty directory's config.json and model.safetensors replaced, its other files kept;
 *  - refusals, each with its message and nothing written: alibi, two terms, no term, rope scaling ntk, a
 *    dynamic factor (0), rope on gpt2, ape on llama, a sinusoidal ape, an option transformers has no field
 *    for, a non-empty directory without --force, a directory that is a file, the checkpoint itself as the
 *    model.safetensors to replace. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include "test_util.h"

#include "data/bpe.h"
#include "io/safetensors.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/import.h"
#include "train/lm.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char base[256], hf[320], ckpt[512], out[320];

enum { L = 2, C = 16 };
static int V = 32; /* the vocabulary: tokenizer_travels sets that of tests/data/bpe_tokenizer.json */

static void path_in(char *buf, size_t size, const char *dir, const char *name)
{
    snprintf(buf, size, "%s/%s", dir, name);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_dir(const char *dir)
{
    static const char *const names[] = {"config.json", "model.safetensors", "notes.txt", "tokenizer.json",
                                        "tokenizer_config.json"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char p[512];
        path_in(p, sizeof p, dir, names[k]);
        unlink(p);
    }
    rmdir(dir);
}

static void clean(void)
{
    remove_dir(hf);
    remove_dir(out);
    unlink(out); /* when a test made it a file */
    unlink(ckpt);
}

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/bk_test_export_hf_XXXXXX");
    assert_non_null(mkdtemp(base));
    snprintf(hf, sizeof hf, "%s/hf", base);
    snprintf(ckpt, sizeof ckpt, "%s/model.ckpt.safetensors", base);
    snprintf(out, sizeof out, "%s/export", base);
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    clean();
    rmdir(base);
    return 0;
}

/* ---- HF directories written here, all F32 ---- */

typedef struct hf_model {
    int n;
    char names[64][96];
    bk_st_tensor t[64];
    float *data[64];
} hf_model;

static void add(hf_model *m, const char *name, int64_t rows, int64_t cols)
{
    const int k = m->n++;
    snprintf(m->names[k], sizeof m->names[k], "%s", name);
    const int64_t count = rows ? rows * cols : cols;
    m->data[k] = malloc((size_t)count * sizeof(float));
    assert_non_null(m->data[k]);
    for (int64_t e = 0; e < count; e++) /* distinct values, not exact in few bits */
        m->data[k][e] = (float)(sin(0.37 * (double)(k * 1000 + e) + 0.1) * (1.0 + 0.01 * k));
    m->t[k] = (bk_st_tensor){m->names[k], rows ? 2 : 1, {rows ? rows : cols, rows ? cols : 0, 0, 0}, m->data[k]};
}

static void free_model(hf_model *m)
{
    for (int k = 0; k < m->n; k++)
        free(m->data[k]);
    m->n = 0;
}

static void write_hf(const hf_model *m, const char *config)
{
    mkdir(hf, 0777);
    char p[512];
    path_in(p, sizeof p, hf, "config.json");
    write_text(p, config);
    path_in(p, sizeof p, hf, "model.safetensors");
    const bk_st_meta meta[] = {{"format", "pt"}};
    bk_error err;
    if (bk_safetensors_write(p, m->t, m->n, meta, 1, &err))
        fail_msg("%s", err.message);
}

/* A llama model of L layers, width C, H heads of HD on KV key/value heads, MLP F; with qk, Qwen3's (the
 * same with q_norm and k_norm). */
static void llama_dir(hf_model *m, int H, int KV, int HD, int F, int tied, const char *rope_scaling, int qk)
{
    memset(m, 0, sizeof *m);
    char nm[96];
    add(m, "model.embed_tokens.weight", V, C);
    for (int l = 0; l < L; l++) {
#define LAYER(part, rows, cols) (snprintf(nm, sizeof nm, "model.layers.%d." part, l), add(m, nm, rows, cols))
        LAYER("input_layernorm.weight", 0, C);
        LAYER("self_attn.q_proj.weight", H * HD, C);
        LAYER("self_attn.k_proj.weight", KV * HD, C);
        LAYER("self_attn.v_proj.weight", KV * HD, C);
        LAYER("self_attn.o_proj.weight", C, H * HD);
        if (qk) {
            LAYER("self_attn.q_norm.weight", 0, HD);
            LAYER("self_attn.k_norm.weight", 0, HD);
        }
        LAYER("post_attention_layernorm.weight", 0, C);
        LAYER("mlp.gate_proj.weight", F, C);
        LAYER("mlp.up_proj.weight", F, C);
        LAYER("mlp.down_proj.weight", C, F);
#undef LAYER
    }
    add(m, "model.norm.weight", 0, C);
    if (!tied)
        add(m, "lm_head.weight", V, C);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 64, "
             "\"rms_norm_eps\": 1e-06, \"rope_theta\": 500.0, \"rope_scaling\": %s, \"tie_word_embeddings\": %s, "
             "%s\"attention_bias\": false, \"mlp_bias\": false, \"hidden_act\": \"silu\"}\n",
             qk ? "Qwen3ForCausalLM" : "LlamaForCausalLM", qk ? "qwen3" : "llama", C, F, L, H, KV, HD, V,
             rope_scaling, tied ? "true" : "false", qk ? "\"use_sliding_window\": false, " : "");
    write_hf(m, cfg);
}

static void gpt2_dir(hf_model *m, int H, int P)
{
    memset(m, 0, sizeof *m);
    char nm[96];
    add(m, "transformer.wte.weight", V, C);
    add(m, "transformer.wpe.weight", P, C);
    for (int l = 0; l < L; l++) {
#define LAYER(part, rows, cols) (snprintf(nm, sizeof nm, "transformer.h.%d." part, l), add(m, nm, rows, cols))
        LAYER("ln_1.weight", 0, C);
        LAYER("ln_1.bias", 0, C);
        LAYER("attn.c_attn.weight", C, 3 * C);
        LAYER("attn.c_attn.bias", 0, 3 * C);
        LAYER("attn.c_proj.weight", C, C);
        LAYER("attn.c_proj.bias", 0, C);
        LAYER("ln_2.weight", 0, C);
        LAYER("ln_2.bias", 0, C);
        LAYER("mlp.c_fc.weight", C, 4 * C);
        LAYER("mlp.c_fc.bias", 0, 4 * C);
        LAYER("mlp.c_proj.weight", 4 * C, C);
        LAYER("mlp.c_proj.bias", 0, C);
#undef LAYER
    }
    add(m, "transformer.ln_f.weight", 0, C);
    add(m, "transformer.ln_f.bias", 0, C);
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_layer\": %d, \"n_embd\": %d, "
             "\"n_head\": %d, \"n_positions\": %d, \"vocab_size\": %d, \"n_inner\": null, "
             "\"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu_new\"}\n",
             L, C, H, P, V);
    write_hf(m, cfg);
}

/* ---- comparisons ---- */

static cJSON *read_config(const char *dir)
{
    char p[512];
    path_in(p, sizeof p, dir, "config.json");
    FILE *f = fopen(p, "r");
    if (!f)
        fail_msg("no %s", p);
    static char text[16384];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *c = cJSON_Parse(text);
    if (!c)
        fail_msg("%s is not JSON:\n%s", p, text);
    return c;
}

/* Two JSON values: numbers within rel (0: equal), strings, booleans, null, objects member by member. */
static void same_json(const char *key, const cJSON *a, const cJSON *b, double rel)
{
    if (!a || !b)
        fail_msg("config.json '%s': %s", key, a ? "absent from the export" : "absent from the original");
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) {
        const double d = fabs(a->valuedouble - b->valuedouble);
        if (rel ? d > rel * fabs(b->valuedouble) : d != 0.0)
            fail_msg("config.json '%s': exported %.17g, original %.17g", key, a->valuedouble, b->valuedouble);
        return;
    }
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        assert_int_equal(cJSON_GetArraySize(a), cJSON_GetArraySize(b));
        for (const cJSON *e = b->child; e; e = e->next)
            same_json(e->string, cJSON_GetObjectItemCaseSensitive(a, e->string), e, rel);
        return;
    }
    if (!cJSON_Compare(a, b, 1))
        fail_msg("config.json '%s': exported %s, original %s", key, cJSON_PrintUnformatted(a),
                 cJSON_PrintUnformatted(b));
}

static void same_config(const char *const *keys, size_t n, double rel)
{
    cJSON *a = read_config(out), *b = read_config(hf);
    for (size_t k = 0; k < n; k++)
        same_json(keys[k], cJSON_GetObjectItemCaseSensitive(a, keys[k]), cJSON_GetObjectItemCaseSensitive(b, keys[k]),
                  rel);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* Every tensor of the original, bit for bit, under its name and shape in the export, which has no other. */
static void same_tensors(const hf_model *m)
{
    char p[512];
    path_in(p, sizeof p, out, "model.safetensors");
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(p, &st, &err))
        fail_msg("%s", err.message);
    assert_int_equal(bk_safetensors_count(st), m->n);
    for (int k = 0; k < m->n; k++) {
        const bk_st_tensor *t = bk_safetensors_find(st, m->names[k]);
        if (!t)
            fail_msg("the export has no tensor '%s'", m->names[k]);
        assert_int_equal(t->ndim, m->t[k].ndim);
        int64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            assert_int_equal(t->shape[d], m->t[k].shape[d]);
            count *= t->shape[d];
        }
        for (int64_t e = 0; e < count; e++)
            if (memcmp(&t->data[e], &m->data[k][e], sizeof(float)))
                fail_msg("'%s' element %lld: exported %.9g, original %.9g", m->names[k], (long long)e,
                         (double)t->data[e], (double)m->data[k][e]);
    }
    assert_string_equal(bk_safetensors_meta(st, "format"), "pt");
    bk_safetensors_close(st);
}

static void import_export(bk_export_summary *s)
{
    bk_import_summary is;
    bk_error err;
    if (bk_import_hf(hf, ckpt, &is, &err))
        fail_msg("import: %s", err.message);
    if (bk_export_hf(ckpt, out, NULL, s, &err))
        fail_msg("export: %s", err.message);
}

static const char *const llama_keys[] = {"architectures", "model_type", "hidden_size", "intermediate_size",
                                         "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                         "head_dim", "rms_norm_eps", "vocab_size", "tie_word_embeddings",
                                         "max_position_embeddings", "rope_theta", "attention_bias", "mlp_bias",
                                         "hidden_act"};

static void llama_round_trip(int H, int KV, int HD, int F, int tied, const char *rope_scaling, int qk)
{
    clean();
    hf_model m;
    llama_dir(&m, H, KV, HD, F, tied, rope_scaling, qk);
    bk_export_summary s;
    import_export(&s);
    assert_string_equal(s.architecture, qk ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    assert_int_equal(s.tensors, m.n);
    same_tensors(&m);
    same_config(llama_keys, sizeof llama_keys / sizeof *llama_keys, 0.0);
    /* rope_scaling: the same keys and values; attention_factor through the plugin's attn_factor and back */
    const char *rs[] = {"rope_scaling"};
    same_config(rs, 1, 1e-15);
    cJSON *c = read_config(out);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(c, "torch_dtype")->valuestring, "float32");
    cJSON_Delete(c);
    char p[512];
    path_in(p, sizeof p, out, "tokenizer.json"); /* the checkpoint carries none */
    assert_int_equal(s.tokenizer, 0);
    assert_int_equal(access(p, F_OK), -1);
    free_model(&m);
}


/* A model imported with its tokenizer.json exports it: the checkpoint's canonical tokenizer.json, a
 * tokenizer_config.json naming PreTrainedTokenizerFast, and the export imports back with the same tokenizer. */
static void tokenizer_travels(void **state)
{
    (void)state;
    clean();
    V = 758; /* the tokenizer's ids 0 .. 757 */
    hf_model m;
    llama_dir(&m, 2, 1, 8, 24, 1, "null", 0);
    char p[512];
    path_in(p, sizeof p, hf, "tokenizer.json");
    char *original = bk_test_read_all(BK_TEST_SOURCE_DIR "/tests/data/bpe_tokenizer.json");
    write_text(p, original);
    bk_export_summary s;
    import_export(&s);
    assert_int_equal(s.tokenizer, 1);
    bk_bpe *t = NULL;
    bk_error err;
    if (bk_checkpoint_read_tokenizer(ckpt, &t, &err))
        fail_msg("%s", err.message);
    char *canonical = NULL;
    size_t len = 0;
    if (bk_bpe_to_hf_json(t, &canonical, &len, &err))
        fail_msg("%s", err.message);
    path_in(p, sizeof p, out, "tokenizer.json");
    char *written = bk_test_read_all(p);
    assert_string_equal(written, canonical);
    path_in(p, sizeof p, out, "tokenizer_config.json");
    char *config = bk_test_read_all(p);
    assert_non_null(strstr(config, "\"tokenizer_class\": \"PreTrainedTokenizerFast\""));
    assert_non_null(strstr(config, "\"add_bos_token\": false"));
    /* and back: the export is an HF directory whose tokenizer imports as the same one */
    char again[600];
    snprintf(again, sizeof again, "%s/again.safetensors", base);
    bk_import_summary is;
    if (bk_import_hf(out, again, &is, &err))
        fail_msg("import of the export: %s", err.message);
    bk_bpe *t2 = NULL;
    char *canonical2 = NULL;
    if (bk_checkpoint_read_tokenizer(again, &t2, &err) || bk_bpe_to_hf_json(t2, &canonical2, &len, &err))
        fail_msg("%s", err.message);
    assert_string_equal(canonical2, canonical);
    unlink(again);
    bk_bpe_free(t), bk_bpe_free(t2);
    free(original), free(canonical), free(canonical2), free(written), free(config);
    free_model(&m);
    V = 32;
}

static void llama_gqa_untied(void **state)
{
    (void)state;
    llama_round_trip(4, 2, 6, 20, 0, "null", 0);
}

static void llama_tied_yarn(void **state)
{
    (void)state;
    llama_round_trip(2, 1, 8, 24, 1,
                     "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"attention_factor\": 1.2, \"beta_fast\": 16.0, "
                     "\"beta_slow\": 1.0}", 0);
}

static void qwen3_qk_norm(void **state)
{
    (void)state;
    llama_round_trip(4, 2, 6, 20, 1, "null", 1);
    const char *sw[] = {"use_sliding_window"};
    same_config(sw, 1, 0.0);
}

static void llama_linear(void **state)
{
    (void)state;
    llama_round_trip(2, 2, 8, 24, 0, "{\"rope_type\": \"linear\", \"factor\": 2.0}", 0);
}

static void gpt2_round_trip(void **state)
{
    (void)state;
    clean();
    hf_model m;
    gpt2_dir(&m, 2, 10);
    bk_export_summary s;
    import_export(&s);
    assert_string_equal(s.architecture, "GPT2LMHeadModel");
    assert_int_equal(s.context, 10);
    same_tensors(&m);
    static const char *const keys[] = {"architectures", "model_type", "n_layer", "n_embd", "n_head", "n_positions",
                                       "vocab_size", "n_inner", "layer_norm_epsilon", "activation_function"};
    same_config(keys, sizeof keys / sizeof *keys, 0.0);
    cJSON *c = read_config(out);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(c, "n_ctx")->valueint, 10);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings")));
    cJSON_Delete(c);
    free_model(&m);
}

/* ---- checkpoints from experiment text ---- */

static void make_ckpt(const char *family, const char *terms)
{
    char text[2048];
    if (!strcmp(family, "gpt2"))
        snprintf(text, sizeof text,
                 "[model]\nfamily = \"gpt2\"\nlayers = 1\nheads = 2\ndim = 8\nvocab = 16\n\n[train]\nlength = 32\n\n"
                 "[run]\ndevice = \"cpu\"\n\n%s",
                 terms);
    else
        snprintf(text, sizeof text,
                 "[model]\nfamily = \"llama\"\nlayers = 1\nheads = 2\nkv_heads = 1\ndim = 8\nffn_dim = 12\n"
                 "vocab = 16\n\n[train]\nlength = 32\n\n[run]\ndevice = \"cpu\"\n\n%s",
                 terms);
    bk_lm lm;
    bk_adamw opt;
    memset(&opt, 0, sizeof opt);
    bk_error err;
    if (bk_lm_open_text(&lm, text, "test_export_hf", ".", NULL, 0, &err))
        fail_msg("%s\n%s", err.message, text);
    const bk_train_state st = {0, 0, 0, 0, NAN};
    if (bk_lm_register(&lm, &opt, &err) || bk_checkpoint_save(ckpt, &lm, &opt, &st, &err))
        fail_msg("%s", err.message);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
}

static void yarn_past_parent_length(void **state)
{
    (void)state;
    clean();
    make_ckpt("llama", "[[term]]\nplugin = \"rope\"\nbase = 1000.0\nscaling = \"yarn\"\nfactor = 2.0\n"
                       "original_length = 16\nattn_factor = 1.1\n");
    bk_export_summary s;
    bk_error err;
    if (bk_export_hf(ckpt, out, NULL, &s, &err))
        fail_msg("export: %s", err.message);
    assert_int_equal(s.context, 16);
    cJSON *c = read_config(out);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(c, "max_position_embeddings")->valueint, 16);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(rs, "rope_type")->valuestring, "yarn");
    assert_true(fabs(cJSON_GetObjectItemCaseSensitive(rs, "attention_factor")->valuedouble -
                     1.1 * (0.1 * log(2.0) + 1.0)) < 1e-15);
    assert_true(cJSON_GetObjectItemCaseSensitive(rs, "beta_fast")->valuedouble == 32.0);
    cJSON_Delete(c);
    /* and back: the same rope term (its attn_factor within a rounding of 1.1) */
    char text[4096];
    bk_import_summary is;
    if (bk_import_hf_experiment(out, text, sizeof text, &is, &err))
        fail_msg("import of the export: %s", err.message);
    if (!strstr(text, "base = 1000\nscaling = \"yarn\"\nfactor = 2\noriginal_length = 16\nbeta_fast = 32\n"
                      "beta_slow = 1\nattn_factor = 1.1"))
        fail_msg("the export imports as:\n%s", text);
}

static void force_replaces(void **state)
{
    (void)state;
    clean();
    make_ckpt("gpt2", "[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\nmax_positions = 20\ninit_std = 0.5\n");
    mkdir(out, 0777);
    char p[512], notes[512];
    path_in(p, sizeof p, out, "config.json");
    write_text(p, "old");
    path_in(notes, sizeof notes, out, "notes.txt");
    write_text(notes, "kept");
    bk_export_summary s;
    bk_error err;
    const bk_export_options force = {1, 0};
    if (bk_export_hf(ckpt, out, &force, &s, &err))
        fail_msg("export --force: %s", err.message);
    assert_int_equal(s.context, 20);
    cJSON *c = read_config(out);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(c, "n_positions")->valueint, 20);
    cJSON_Delete(c);
    assert_int_equal(access(notes, F_OK), 0);
}

/* The export is refused with both needles in its message, and nothing is written (DIR absent, or as it was). */
static void refused_export(const char *dir, int force, const char *needle1, const char *needle2)
{
    struct stat before, after;
    const int existed = stat(dir, &before) == 0;
    bk_export_summary s;
    bk_error err;
    const bk_export_options o = {force, 0};
    if (bk_export_hf(ckpt, dir, &o, &s, &err) == BK_OK)
        fail_msg("expected a refusal containing '%s'", needle1);
    if (!strstr(err.message, needle1) || (needle2 && !strstr(err.message, needle2)))
        fail_msg("the refusal '%s' lacks '%s' or '%s'", err.message, needle1, needle2 ? needle2 : "");
    print_message("refused: %s\n", err.message);
    if (!existed) {
        assert_int_equal(access(dir, F_OK), -1);
        return;
    }
    assert_int_equal(stat(dir, &after), 0);
    assert_int_equal(after.st_mtime, before.st_mtime);
    assert_int_equal(after.st_size, before.st_size);
}

static void refused_model(const char *family, const char *terms, const char *needle1, const char *needle2)
{
    clean();
    make_ckpt(family, terms);
    refused_export(out, 0, needle1, needle2);
}

static void refusals(void **state)
{
    (void)state;
    static const char writes[] =
        "export --hf writes rope (none, pi, yarn) on llama and learned absolute positions on gpt2";
    refused_model("llama", "[[term]]\nplugin = \"alibi\"\n",
                  "term 'alibi' (plugin alibi): HF's LlamaForCausalLM has no such positional scheme", writes);
    refused_model("llama", "[[term]]\nplugin = \"rope\"\n[[term]]\nplugin = \"alibi\"\n",
                  "2 positional terms ('rope' (plugin rope), 'alibi' (plugin alibi))", "exactly one term");
    refused_model("llama", "", "no positional term (NoPE)", NULL);
    refused_model("llama", "[[term]]\nplugin = \"rope\"\nscaling = \"ntk\"\nfactor = 2.0\n",
                  "term 'rope' (plugin rope) has scaling = \"ntk\"", "no static NTK-aware rope_type");
    refused_model("llama", "[[term]]\nplugin = \"rope\"\nscaling = \"yarn\"\nfactor = 0.0\n",
                  "scaling = \"yarn\" with factor = 0 (dynamic", writes);
    refused_model("gpt2", "[[term]]\nplugin = \"rope\"\n",
                  "term 'rope' (plugin rope): HF's GPT2LMHeadModel has no such positional scheme", writes);
    refused_model("llama", "[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\n",
                  "term 'ape' (plugin ape): HF's LlamaForCausalLM has no such positional scheme", NULL);
    refused_model("gpt2", "[[term]]\nplugin = \"ape\"\n", "term 'ape' (plugin ape) of variant \"sinusoidal\"", NULL);
    refused_model("gpt2", "[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\nbase = 500.0\n",
                  "term 'ape' (plugin ape) sets option 'base': HF's GPT2LMHeadModel has no field for it", NULL);
    /* the directory: not empty, a file, the checkpoint itself */
    clean();
    make_ckpt("llama", "[[term]]\nplugin = \"rope\"\n");
    mkdir(out, 0777);
    char notes[512];
    path_in(notes, sizeof notes, out, "notes.txt");
    write_text(notes, "mine");
    refused_export(out, 0, "is not empty (1 entry, 'notes.txt')", "--force");
    char p[512];
    path_in(p, sizeof p, out, "config.json");
    assert_int_equal(access(p, F_OK), -1);
    char file[512];
    snprintf(file, sizeof file, "%s/afile", base);
    write_text(file, "x");
    refused_export(file, 0, "exists and is not a directory", NULL);
    refused_export(file, 1, "exists and is not a directory", NULL);
    unlink(file);
    path_in(p, sizeof p, out, "model.safetensors"); /* the checkpoint as the file --force would replace */
    assert_int_equal(rename(ckpt, p), 0);
    snprintf(ckpt, sizeof ckpt, "%s", p);
    refused_export(out, 1, "--hf", "checkpoint");
    path_in(p, sizeof p, out, "config.json");
    assert_int_equal(access(p, F_OK), -1);
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(ckpt, &st, &err)) /* still the checkpoint */
        fail_msg("%s", err.message);
    assert_non_null(bk_safetensors_meta(st, "biaskit"));
    bk_safetensors_close(st);
    unlink(ckpt);
    snprintf(ckpt, sizeof ckpt, "%s/model.ckpt.safetensors", base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_gqa_untied),
        cmocka_unit_test(llama_tied_yarn),
        cmocka_unit_test(qwen3_qk_norm),
        cmocka_unit_test(tokenizer_travels),
        cmocka_unit_test(llama_linear),
        cmocka_unit_test(gpt2_round_trip),
        cmocka_unit_test(yarn_past_parent_length),
        cmocka_unit_test(force_replaces),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
