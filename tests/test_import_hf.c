/* biaskit import of HF transformers directories (core/train/import.h, bk_import_hf) on tiny models written
 * here: config.json as text, the safetensors files byte by byte (any dtype, sharded, cut short).
 *  - a llama model (2 layers, dim 8, 2 heads of 4 on 1 key/value head, MLP 12, vocabulary 16; untied, tied,
 *    sharded, with F16 and BF16 tensors): every value at its place -- q_proj, k_proj, v_proj as qkvw's rows,
 *    gate_proj then up_proj in fcw, the norms, the heads -- and the experiment from config.json;
 *  - a GPT-2 model (1 layer, dim 8, 2 heads, 6 positions): the Conv1D weights transposed value by value, the
 *    biases, wpe as the ape term's table, the causal-mask buffer ignored;
 *  - both reopen as checkpoints and evaluate;
 *  - refusals, each naming what, with nothing written: no config.json, another architecture, Qwen2,
 *    attention_bias, a dynamic rope scaling, an untied GPT-2, a missing tensor, a misshapen one, an unknown
 *    one, a vocabulary that is not the embedding's rows, an index naming a missing shard, a tensor the index
 *    puts in the wrong shard, a truncated file, a dtype not read, a tied head that differs from the embedding,
 *    no weights at all. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/import.h"
#include "util/half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { L = 2, C = 8, H = 2, KV = 1, HD = 4, F = 12, V = 16, GL = 1, P = 6 };
enum { F32, F16, BF16, F64 };

typedef struct variant {
    int gpt2;
    int tied;
    int half;                 /* some tensors in F16 and BF16 */
    int shards;               /* two shards and an index */
    int missing_shard;        /* ... whose second shard is not written */
    int wrong_shard;          /* ... whose index puts the first tensor in the second shard */
    int truncate;             /* bytes cut from the end of the last file */
    int no_config, no_weights;
    const char *arch;         /* config.json's architecture instead of the family's */
    const char *extra_config; /* more members of config.json, each followed by a comma */
    int config_vocab;         /* config.json's vocab_size instead of V */
    const char *drop;         /* this tensor is not written */
    const char *bad_shape;    /* this tensor is written as [C, C] */
    const char *extra;        /* a tensor of shape [C] more */
    const char *f64;          /* this tensor in F64 */
    int head_differs;         /* a tied model's lm_head.weight, not equal to the embedding */
    int qwen3;                /* Qwen3ForCausalLM: q_norm and k_norm weights (QK-norm) */
} variant;

typedef struct tensor {
    char name[96];
    int dtype;
    int ndim;
    int64_t shape[4];
} tensor;

static char dir[256], out[300];

static int64_t count_of(const tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

/* Element e of the k-th tensor: exact in every dtype used (F16 and BF16 tensors repeat every 8 elements). */
static float value_of(int k, int dtype, int64_t e)
{
    if (dtype == F16 || dtype == BF16)
        return (float)k + (float)(e % 8) / 8.0f;
    return (float)k + (float)e / 1024.0f;
}

static int tensors_of(const variant *v, tensor *t)
{
    int n = 0;
#define ADD(nm, dt, nd, a, b)                                                                                          \
    do {                                                                                                               \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                                               \
        t[n].dtype = dt, t[n].ndim = nd, t[n].shape[0] = a, t[n].shape[1] = b;                                         \
        if (v->bad_shape && !strcmp(v->bad_shape, t[n].name))                                                         \
            t[n].ndim = 2, t[n].shape[0] = C, t[n].shape[1] = C;                                                       \
        if (v->f64 && !strcmp(v->f64, t[n].name))                                                                      \
            t[n].dtype = F64;                                                                                          \
        if (!v->drop || strcmp(v->drop, t[n].name))                                                                    \
            n++;                                                                                                       \
    } while (0)
    char nm[96];
    if (v->gpt2) {
        ADD("transformer.wte.weight", F32, 2, V, C);
        ADD("transformer.wpe.weight", F32, 2, P, C);
        for (int l = 0; l < GL; l++) {
#define LAYER(part, dt, nd, a, b)                                                                                      \
    do {                                                                                                               \
        snprintf(nm, sizeof nm, "transformer.h.%d." part, l);                                                          \
        ADD(nm, dt, nd, a, b);                                                                                         \
    } while (0)
            LAYER("ln_1.weight", F32, 1, C, 0);
            LAYER("ln_1.bias", F32, 1, C, 0);
            LAYER("attn.c_attn.weight", F32, 2, C, 3 * C);
            LAYER("attn.c_attn.bias", F32, 1, 3 * C, 0);
            LAYER("attn.c_proj.weight", F32, 2, C, C);
            LAYER("attn.c_proj.bias", F32, 1, C, 0);
            LAYER("ln_2.weight", F32, 1, C, 0);
            LAYER("ln_2.bias", F32, 1, C, 0);
            LAYER("mlp.c_fc.weight", v->half ? BF16 : F32, 2, C, 4 * C);
            LAYER("mlp.c_fc.bias", F32, 1, 4 * C, 0);
            LAYER("mlp.c_proj.weight", F32, 2, 4 * C, C);
            LAYER("mlp.c_proj.bias", F32, 1, C, 0);
            snprintf(nm, sizeof nm, "transformer.h.%d.attn.bias", l); /* the causal mask, [1, 1, P, P] */
            ADD(nm, F32, 4, 1, 1);
            t[n - 1].shape[2] = P, t[n - 1].shape[3] = P;
#undef LAYER
        }
        ADD("transformer.ln_f.weight", F32, 1, C, 0);
        ADD("transformer.ln_f.bias", F32, 1, C, 0);
    } else {
        ADD("model.embed_tokens.weight", F32, 2, V, C);
        ADD("model.norm.weight", F32, 1, C, 0);
        if (!v->tied || v->head_differs)
            ADD("lm_head.weight", F32, 2, V, C);
        for (int l = 0; l < L; l++) {
#define LAYER(part, dt, a, b)                                                                                          \
    do {                                                                                                               \
        snprintf(nm, sizeof nm, "model.layers.%d." part, l);                                                           \
        ADD(nm, dt, b ? 2 : 1, a, b);                                                                                  \
    } while (0)
            LAYER("input_layernorm.weight", F32, C, 0);
            LAYER("self_attn.q_proj.weight", F32, H * HD, C);
            LAYER("self_attn.k_proj.weight", F32, KV * HD, C);
            LAYER("self_attn.v_proj.weight", F32, KV * HD, C);
            LAYER("self_attn.o_proj.weight", v->half ? F16 : F32, C, H * HD);
            if (v->qwen3) {
                LAYER("self_attn.q_norm.weight", F32, HD, 0);
                LAYER("self_attn.k_norm.weight", F32, HD, 0);
            }
            LAYER("post_attention_layernorm.weight", F32, C, 0);
            LAYER("mlp.gate_proj.weight", F32, F, C);
            LAYER("mlp.up_proj.weight", F32, F, C);
            LAYER("mlp.down_proj.weight", v->half ? BF16 : F32, C, F);
#undef LAYER
        }
    }
    if (v->extra)
        ADD(v->extra, F32, 1, C, 0);
#undef ADD
    return n;
}

static void write_text(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void put_value(FILE *f, int dtype, float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (dtype == F32)
        fwrite(&x, 4, 1, f);
    else if (dtype == F64)
        fwrite(&(double){x}, 8, 1, f);
    else if (dtype == BF16)
        fwrite(&(uint16_t){(uint16_t)(u >> 16)}, 2, 1, f); /* exact: the values have 8 significant bits */
    else { /* binary16 of a normal value with at most 11 significant bits */
        const uint32_t sign = u >> 31, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
        const uint16_t h = x == 0.0f ? (uint16_t)(sign << 15)
                                     : (uint16_t)(sign << 15 | (exp - 112) << 10 | man >> 13);
        fwrite(&h, 2, 1, f);
    }
}

/* One safetensors file of tensors [k0, k1) of t. */
static void write_file(const char *name, const tensor *t, int k0, int k1, int cut)
{
    static const char *const dtypes[] = {"F32", "F16", "BF16", "F64"};
    static const int widths[] = {4, 2, 2, 8};
    char header[16384];
    size_t at = (size_t)snprintf(header, sizeof header, "{\"__metadata__\": {\"format\": \"pt\"}");
    int64_t offset = 0;
    for (int k = k0; k < k1; k++) {
        at += (size_t)snprintf(header + at, sizeof header - at, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", t[k].name,
                               dtypes[t[k].dtype]);
        for (int d = 0; d < t[k].ndim; d++)
            at += (size_t)snprintf(header + at, sizeof header - at, "%s%lld", d ? ", " : "", (long long)t[k].shape[d]);
        const int64_t bytes = count_of(&t[k]) * widths[t[k].dtype];
        at += (size_t)snprintf(header + at, sizeof header - at, "], \"data_offsets\": [%lld, %lld]}",
                               (long long)offset, (long long)(offset + bytes));
        offset += bytes;
    }
    at += (size_t)snprintf(header + at, sizeof header - at, "}");
    while (at % 8)
        header[at++] = ' ';
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const uint64_t n = at;
    fwrite(&n, 8, 1, f);
    fwrite(header, 1, at, f);
    for (int k = k0; k < k1; k++)
        for (int64_t e = 0; e < count_of(&t[k]); e++)
            put_value(f, t[k].dtype, value_of(k, t[k].dtype == F64 ? F32 : t[k].dtype, e));
    const long size = ftell(f);
    fclose(f);
    if (cut)
        assert_int_equal(truncate(path, size - cut), 0);
}

static void clear_dir(void)
{
    static const char *const names[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        unlink(path);
    }
    unlink(out);
}

static int write_model(const variant *v, tensor *t)
{
    clear_dir();
    const int n = tensors_of(v, t);
    char cfg[2048];
    if (v->gpt2)
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"%s\"], %s\"n_layer\": %d, \"n_embd\": %d, \"n_head\": %d, "
                 "\"n_positions\": %d, "
                 "\"vocab_size\": %d, \"n_inner\": null, \"layer_norm_epsilon\": 1e-05, \"activation_function\": "
                 "\"gelu_new\", \"model_type\": \"gpt2\"}\n",
                 v->arch ? v->arch : "GPT2LMHeadModel", v->extra_config ? v->extra_config : "", GL, C, H, P,
                 v->config_vocab ? v->config_vocab : V);
    else
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"%s\"], %s\"_name_or_path\": \"tiny-llama\", \"hidden_size\": %d, "
                 "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
                 "\"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 64, "
                 "\"rms_norm_eps\": 1e-06, \"rope_theta\": 500.0, \"rope_scaling\": null, \"tie_word_embeddings\": %s, "
                 "\"attention_bias\": false, \"hidden_act\": \"silu\", \"model_type\": \"llama\"}\n",
                 v->arch ? v->arch : v->qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM",
                 v->extra_config ? v->extra_config : "", C, F, L, H, KV, HD,
                 v->config_vocab ? v->config_vocab : V, v->tied ? "true" : "false");
    if (!v->no_config)
        write_text("config.json", cfg);
    if (v->no_weights)
        return n;
    if (!v->shards) {
        write_file("model.safetensors", t, 0, n, v->truncate);
        return n;
    }
    const int half = n / 2;
    write_file("model-00001-of-00002.safetensors", t, 0, half, 0);
    if (!v->missing_shard)
        write_file("model-00002-of-00002.safetensors", t, half, n, v->truncate);
    char index[8192];
    size_t at = (size_t)snprintf(index, sizeof index, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int k = 0; k < n; k++)
        at += (size_t)snprintf(index + at, sizeof index - at, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                               k ? ", " : "", t[k].name, k < half && !(k == 0 && v->wrong_shard) ? 1 : 2);
    snprintf(index + at, sizeof index - at, "}}\n");
    write_text("model.safetensors.index.json", index);
    return n;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_import_hf_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s.safetensors", dir);
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    clear_dir();
    rmdir(dir);
    return 0;
}

static int index_of(const tensor *t, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(t[k].name, name))
            return k;
    fail_msg("no tensor %s in the variant", name);
    return -1;
}

static const float *stored(const bk_safetensors *st, const char *name, int64_t count)
{
    const bk_st_tensor *t = bk_safetensors_find(st, name);
    if (!t)
        fail_msg("the checkpoint has no %s", name);
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    assert_int_equal(n, count);
    return t->data;
}

/* got[r][c] for r < rows, c < cols against file tensor `name`: element r cols + c, or with `transpose` (a Conv1D
 * weight of the file's shape (cols, rows)) element c rows + r. */
static void expect(const float *got, const tensor *t, int n, const char *name, int rows, int cols, int transpose)
{
    const int k = index_of(t, n, name);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const int64_t e = transpose ? (int64_t)c * rows + r : (int64_t)r * cols + c;
            const float want = value_of(k, t[k].dtype, e);
            if (got[(size_t)r * cols + c] != want)
                fail_msg("%s: the checkpoint's [%d][%d] holds %.9g, expected the file's element %lld, %.9g", name, r,
                         c, (double)got[(size_t)r * cols + c], (long long)e, (double)want);
        }
}

static void reopens(int family, int64_t length)
{
    bk_lm lm;
    bk_train_state ts;
    bk_error err;
    if (bk_checkpoint_load(out, NULL, 0, &lm, NULL, &ts, &err))
        fail_msg("reopening the import: %s", err.message);
    assert_int_equal(ts.step, 0);
    assert_int_equal(lm.gpt.family, family);
    assert_int_equal(lm.exp.train.length, length);
    int32_t in[5], tg[5];
    for (int k = 0; k < 5; k++)
        in[k] = k % V, tg[k] = (3 * k + 1) % V;
    if (bk_bias_forward(&lm.bias, 5, &err) || bk_gpt_forward(&lm.gpt, in, tg, 1, 5, 0, &err))
        fail_msg("forward of the import: %s", err.message);
    assert_true(isfinite(lm.gpt.loss));
    bk_lm_close(&lm);
}

static void llama_places_every_tensor(const variant *v)
{
    tensor t[64];
    const int n = write_model(v, t);
    bk_import_summary s;
    bk_error err;
    if (bk_import_hf(dir, out, &s, &err))
        fail_msg("import: %s", err.message);
    assert_string_equal(s.family, "llama");
    assert_string_equal(s.architecture, v->qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    assert_int_equal(s.qk_norm, v->qwen3);
    assert_string_equal(s.name, "tiny-llama");
    assert_int_equal(s.tensors, n);
    assert_int_equal(s.half, v->half ? 2 * L : 0);
    assert_int_equal(s.tied, v->tied);
    bk_safetensors *st = NULL;
    if (bk_safetensors_open(out, &st, &err))
        fail_msg("%s", err.message);
    expect(stored(st, "model.wte", V * C), t, n, "model.embed_tokens.weight", V, C, 0);
    expect(stored(st, "model.rmsfw", C), t, n, "model.norm.weight", 1, C, 0);
    if (v->tied)
        assert_null(bk_safetensors_find(st, "model.lmhead"));
    else
        expect(stored(st, "model.lmhead", V * C), t, n, "lm_head.weight", V, C, 0);
    const int A = H * HD, R = A + 2 * KV * HD;
    const float *qkv = stored(st, "model.qkvw", (int64_t)L * R * C), *rms1 = stored(st, "model.rms1w", L * C);
    const float *rms2 = stored(st, "model.rms2w", L * C), *o = stored(st, "model.attprojw", (int64_t)L * C * A);
    const float *fc = stored(st, "model.fcw", (int64_t)L * 2 * F * C), *down = stored(st, "model.fcprojw", L * C * F);
    for (int l = 0; l < L; l++) {
        char nm[96];
#define NAME(part) (snprintf(nm, sizeof nm, "model.layers.%d." part, l), nm)
        expect(rms1 + l * C, t, n, NAME("input_layernorm.weight"), 1, C, 0);
        expect(qkv + (size_t)l * R * C, t, n, NAME("self_attn.q_proj.weight"), A, C, 0);
        expect(qkv + (size_t)l * R * C + A * C, t, n, NAME("self_attn.k_proj.weight"), KV * HD, C, 0);
        expect(qkv + (size_t)l * R * C + (A + KV * HD) * C, t, n, NAME("self_attn.v_proj.weight"), KV * HD, C, 0);
        expect(o + (size_t)l * C * A, t, n, NAME("self_attn.o_proj.weight"), C, A, 0);
        expect(rms2 + l * C, t, n, NAME("post_attention_layernorm.weight"), 1, C, 0);
        expect(fc + (size_t)l * 2 * F * C, t, n, NAME("mlp.gate_proj.weight"), F, C, 0);
        expect(fc + (size_t)l * 2 * F * C + F * C, t, n, NAME("mlp.up_proj.weight"), F, C, 0);
        expect(down + (size_t)l * C * F, t, n, NAME("mlp.down_proj.weight"), C, F, 0);
        if (v->qwen3) {
            expect(stored(st, "model.qnormw", L * HD) + l * HD, t, n, NAME("self_attn.q_norm.weight"), 1, HD, 0);
            expect(stored(st, "model.knormw", L * HD) + l * HD, t, n, NAME("self_attn.k_norm.weight"), 1, HD, 0);
        }
#undef NAME
    }
    if (!v->qwen3)
        assert_null(bk_safetensors_find(st, "model.qnormw"));
    bk_safetensors_close(st);
    reopens(BK_FAMILY_LLAMA, 64);
}

static void llama_untied(void **state)
{
    (void)state;
    llama_places_every_tensor(&(variant){0});
    char text[4096];
    bk_import_summary s;
    bk_error err;
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    static const char *const lines[] = {"(HF transformers, LlamaForCausalLM: tiny-llama)", "family = \"llama\"",
                                        "layers = 2", "heads = 2", "kv_heads = 1", "head_dim = 4", "dim = 8",
                                        "ffn_dim = 12", "vocab = 16", "tied = false", "length = 64",
                                        "device = \"cpu\"", "plugin = \"rope\"", "base = 500"};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        if (!strstr(text, lines[k]))
            fail_msg("the imported experiment lacks '%s':\n%s", lines[k], text);
    assert_null(strstr(text, "scaling"));
}

static void llama_tied_sharded_half(void **state)
{
    (void)state;
    llama_places_every_tensor(&(variant){.tied = 1, .shards = 1, .half = 1});
}

/* Qwen3: the LLaMA blocks with QK-norm, its q_norm / k_norm weights in qnormw / knormw */
static void qwen3_qk_norm(void **state)
{
    (void)state;
    llama_places_every_tensor(&(variant){.qwen3 = 1, .tied = 1});
    char text[4096];
    bk_import_summary s;
    bk_error err;
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    if (!strstr(text, "qk_norm = true") || !strstr(text, "(HF transformers, Qwen3ForCausalLM: tiny-llama)"))
        fail_msg("the imported experiment lacks QK-norm or its class:\n%s", text);
}

static void llama_rope_scalings(void **state)
{
    (void)state;
    char text[4096];
    bk_import_summary s;
    bk_error err;
    tensor t[64];
    write_model(&(variant){.extra_config = "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0},"}, t);
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    assert_non_null(strstr(text, "scaling = \"pi\"\nfactor = 4\n"));
    write_model(&(variant){.extra_config = "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                                           "\"beta_fast\": 16.0},"},
                t);
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    /* transformers' default attention_factor is the plugin's own mscale: attn_factor 1 */
    assert_non_null(strstr(text, "scaling = \"yarn\"\nfactor = 4\noriginal_length = 64\nbeta_fast = 16\n"
                                 "beta_slow = 1\nattn_factor = 1\n"));
    /* transformers 5's rope_parameters: rope_theta inside, YaRN's original context given */
    write_model(&(variant){.extra_config = "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2.0, "
                                           "\"rope_theta\": 500.0, \"original_max_position_embeddings\": 32, "
                                           "\"truncate\": true, \"attention_factor\": 1.2},"},
                t);
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    if (!strstr(text, "base = 500\nscaling = \"yarn\"\nfactor = 2\noriginal_length = 32\nbeta_fast = 32\n"))
        fail_msg("rope_parameters' yarn is not the experiment's:\n%s", text);
    write_model(&(variant){.extra_config = "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500.0},"},
                t);
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    assert_non_null(strstr(text, "base = 500\n"));
    assert_null(strstr(text, "scaling"));
}

static void gpt2_places_every_tensor(void **state)
{
    (void)state;
    for (int half = 0; half < 2; half++) {
        tensor t[64];
        const variant v = {.gpt2 = 1, .half = half, .shards = half};
        const int n = write_model(&v, t);
        bk_import_summary s;
        bk_error err;
        if (bk_import_hf(dir, out, &s, &err))
            fail_msg("import: %s", err.message);
        assert_string_equal(s.family, "gpt2");
        assert_int_equal(s.tensors, n - GL); /* the causal-mask buffers are not placed */
        assert_int_equal(s.context, P);
        bk_safetensors *st = NULL;
        if (bk_safetensors_open(out, &st, &err))
            fail_msg("%s", err.message);
        expect(stored(st, "model.wte", V * C), t, n, "transformer.wte.weight", V, C, 0);
        expect(stored(st, "term.ape.table", P * C), t, n, "transformer.wpe.weight", P, C, 0);
        expect(stored(st, "model.lnfw", C), t, n, "transformer.ln_f.weight", 1, C, 0);
        expect(stored(st, "model.lnfb", C), t, n, "transformer.ln_f.bias", 1, C, 0);
        expect(stored(st, "model.ln1w", C), t, n, "transformer.h.0.ln_1.weight", 1, C, 0);
        expect(stored(st, "model.ln1b", C), t, n, "transformer.h.0.ln_1.bias", 1, C, 0);
        expect(stored(st, "model.ln2w", C), t, n, "transformer.h.0.ln_2.weight", 1, C, 0);
        expect(stored(st, "model.ln2b", C), t, n, "transformer.h.0.ln_2.bias", 1, C, 0);
        expect(stored(st, "model.qkvw", 3 * C * C), t, n, "transformer.h.0.attn.c_attn.weight", 3 * C, C, 1);
        expect(stored(st, "model.qkvb", 3 * C), t, n, "transformer.h.0.attn.c_attn.bias", 1, 3 * C, 0);
        expect(stored(st, "model.attprojw", C * C), t, n, "transformer.h.0.attn.c_proj.weight", C, C, 1);
        expect(stored(st, "model.attprojb", C), t, n, "transformer.h.0.attn.c_proj.bias", 1, C, 0);
        expect(stored(st, "model.fcw", 4 * C * C), t, n, "transformer.h.0.mlp.c_fc.weight", 4 * C, C, 1);
        expect(stored(st, "model.fcb", 4 * C), t, n, "transformer.h.0.mlp.c_fc.bias", 1, 4 * C, 0);
        expect(stored(st, "model.fcprojw", 4 * C * C), t, n, "transformer.h.0.mlp.c_proj.weight", C, 4 * C, 1);
        expect(stored(st, "model.fcprojb", C), t, n, "transformer.h.0.mlp.c_proj.bias", 1, C, 0);
        bk_safetensors_close(st);
        reopens(BK_FAMILY_GPT2, P);
    }
    char text[4096];
    bk_import_summary s;
    bk_error err;
    assert_int_equal(bk_import_hf_experiment(dir, text, sizeof text, &s, &err), BK_OK);
    static const char *const lines[] = {"family = \"gpt2\"", "layers = 1", "heads = 2", "dim = 8", "vocab = 16",
                                        "length = 6", "plugin = \"ape\"", "variant = \"learned\"",
                                        "max_positions = 6"};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        if (!strstr(text, lines[k]))
            fail_msg("the imported experiment lacks '%s':\n%s", lines[k], text);
}

static void refused(const variant *v, const char *needle1, const char *needle2)
{
    tensor t[64];
    write_model(v, t);
    bk_import_summary s;
    bk_error err;
    if (bk_import_hf(dir, out, &s, &err) == BK_OK)
        fail_msg("expected a refusal containing '%s'", needle1);
    if (!strstr(err.message, needle1) || (needle2 && !strstr(err.message, needle2)))
        fail_msg("the refusal '%s' lacks '%s' or '%s'", err.message, needle1, needle2 ? needle2 : "");
    assert_int_equal(access(out, F_OK), -1); /* nothing written */
}

static void bad_directories_are_refused(void **state)
{
    (void)state;
    refused(&(variant){.no_config = 1}, "no config.json", NULL);
    refused(&(variant){.no_weights = 1}, "no model.safetensors and no model.safetensors.index.json", NULL);
    refused(&(variant){.arch = "BertForMaskedLM"}, "architecture 'BertForMaskedLM'", "LlamaForCausalLM");
    refused(&(variant){.arch = "Qwen2ForCausalLM"}, "architecture 'Qwen2ForCausalLM'", "biases");
    refused(&(variant){.arch = "MistralForCausalLM"}, "sliding_window", "absent");
    refused(&(variant){.qwen3 = 1, .extra_config = "\"use_sliding_window\": true,"}, "use_sliding_window = true",
            "Qwen3ForCausalLM");
    refused(&(variant){.qwen3 = 1, .arch = "LlamaForCausalLM"}, "tensor 'model.layers.0.self_attn.q_norm.weight'",
            "no place");
    refused(&(variant){.extra_config = "\"attention_bias\": true,"}, "attention_bias = true", "no biases");
    refused(&(variant){.extra_config = "\"mlp_bias\": true,"}, "mlp_bias = true", NULL);
    refused(&(variant){.extra_config = "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0},"},
            "rope_scaling type 'dynamic'", "no such scaling");
    refused(&(variant){.extra_config = "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0},"},
            "rope_scaling type 'llama3'", NULL);
    refused(&(variant){.extra_config = "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2.0, \"mscale\": 1},"},
            "rope_scaling 'mscale'", NULL);
    refused(&(variant){.extra_config = "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2.0, "
                                       "\"rope_theta\": 500.0, \"truncate\": false},"},
            "truncate = false", NULL);
    refused(&(variant){.extra_config = "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000.0},"},
            "rope_theta 500 beside rope_parameters' rope_theta 1000", NULL);
    refused(&(variant){.extra_config = "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                                       "\"rope_theta\": 500.0},"},
            "rope_parameters type 'llama3'", NULL);
    refused(&(variant){.extra_config = "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500.0}, "
                                       "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0},"},
            "both 'rope_parameters'", NULL);
    refused(&(variant){.gpt2 = 1, .extra_config = "\"tie_word_embeddings\": false,"}, "tie_word_embeddings = false",
            NULL);
    refused(&(variant){.gpt2 = 1, .extra_config = "\"activation_function\": \"relu\","}, "activation_function 'relu'",
            NULL);
    refused(&(variant){.drop = "model.layers.1.mlp.up_proj.weight"}, "no tensor 'model.layers.1.mlp.up_proj.weight'",
            NULL);
    refused(&(variant){.gpt2 = 1, .drop = "transformer.wpe.weight"}, "no tensor 'transformer.wpe.weight'", NULL);
    refused(&(variant){.bad_shape = "model.layers.0.self_attn.k_proj.weight"},
            "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 8]; expected [4, 8]", NULL);
    refused(&(variant){.config_vocab = 20},
            "'model.embed_tokens.weight' has 16 rows but config.json's vocab_size is 20", NULL);
    refused(&(variant){.extra = "model.layers.0.self_attn.q_proj.bias"},
            "tensor 'model.layers.0.self_attn.q_proj.bias' has no place", "the llama family has no biases");
    refused(&(variant){.extra = "model.layers.2.input_layernorm.weight"},
            "tensor 'model.layers.2.input_layernorm.weight' has no place in a llama model of 2 layers", NULL);
    refused(&(variant){.shards = 1, .missing_shard = 1}, "shard 'model-00002-of-00002.safetensors'",
            "is not in the directory");
    refused(&(variant){.shards = 1, .wrong_shard = 1}, "weight_map puts tensor 'model.embed_tokens.weight' in "
            "model-00002-of-00002.safetensors, which does not hold it", NULL);
    refused(&(variant){.shards = 1, .truncate = 4}, "model-00002-of-00002.safetensors: truncated: tensor", NULL);
    refused(&(variant){.truncate = 1}, "model.safetensors: truncated: tensor", NULL);
    refused(&(variant){.f64 = "model.norm.weight"}, "tensor 'model.norm.weight' has dtype F64", NULL);
    refused(&(variant){.tied = 1, .head_differs = 1}, "tensor 'lm_head.weight' differs from the token embedding",
            NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_untied),
        cmocka_unit_test(llama_tied_sharded_half),
        cmocka_unit_test(qwen3_qk_norm),
        cmocka_unit_test(llama_rope_scalings),
        cmocka_unit_test(gpt2_places_every_tensor),
        cmocka_unit_test(bad_directories_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
