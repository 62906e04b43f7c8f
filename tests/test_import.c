#define _GNU_SOURCE /* memmem */
/* biaskit import (core/train/import.h) on a small llama GGUF written here byte by byte (2 layers, dim 8,
 * 2 heads of 4 on 1 key/value head, MLP 12, vocabulary 16; every value t + e / 1024 for the t-th tensor's
 * element e, exact in float):
 *  - the experiment from the metadata (shape, tied or untied, eps, rope base, context);
 *  - every tensor at its place in the checkpoint: the embedding, the norms, q's and k's rows with each
 *    head's pairs taken back from adjacent (2k + i) to rotate-half (i hd/2 + k), v, the output projection,
 *    gate then up in fcw, down; the untied output head;
 *  - the checkpoint reopens (bk_checkpoint_load) and a forward gives a finite loss;
 *  - refusals, each naming what, with nothing written: another architecture, a tensor of another shape,
 *    a missing one, an unknown one, a tokenizer of another size than the embedding, a scaled rope. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf_writer.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/import.h"
#include "train/init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { L = 2, C = 8, H = 2, KV = 1, HD = 4, F = 12, V = 16 };

typedef struct variant {
    const char *arch;
    int untied;
    int bad_k;      /* blk.0.attn_k.weight of ne (8, 8) */
    int drop_up;    /* no blk.1.ffn_up.weight */
    int extra;      /* a rope_freqs.weight tensor */
    int tokens;     /* tokenizer.ggml.tokens of this many entries (0: none) */
    const char *tok_model; /* with tokens = V: tokenizer.ggml.model, BPE_TOKENS, and unless no_merges BPE_MERGES */
    int no_merges;
    const char *scaling;
} variant;

typedef struct info {
    char name[48];
    uint64_t ne0, ne1; /* ne1 0: a vector */
} info;

static char gguf[256], out[256];

/* A byte-level BPE vocabulary of V tokens ("\xc4\xa0" is the space of the byte-level alphabet) and its
 * merges. */
#define SP "\xc4\xa0"
static const char *const BPE_TOKENS[V] = {"a",      "b",       "c",        "d", "e", SP,  "ab", "abc",
                                          SP "a",   SP "ab",   SP "abc",   "f", "g", "h", "i",  "j"};
static const char *const BPE_MERGES[] = {"a b", "ab c", SP " a", SP "a b", SP "ab c"};
#define N_BPE_MERGES 5

/* The tensors of a variant, in file order. */
static int tensors_of(const variant *v, info *t)
{
    int n = 0;
#define ADD(nm, a, b) (snprintf(t[n].name, sizeof t[n].name, "%s", nm), t[n].ne0 = (a), t[n].ne1 = (b), n++)
    ADD("token_embd.weight", C, V);
    ADD("output_norm.weight", C, 0);
    if (v->untied)
        ADD("output.weight", C, V);
    for (int l = 0; l < L; l++) {
        char nm[48];
#define LAYER(part, a, b) (snprintf(nm, sizeof nm, "blk.%d." part ".weight", l), ADD(nm, a, b))
        LAYER("attn_norm", C, 0);
        LAYER("attn_q", C, H * HD);
        LAYER("attn_k", C, l == 0 && v->bad_k ? H * HD : KV * HD);
        LAYER("attn_v", C, KV * HD);
        LAYER("attn_output", H * HD, C);
        LAYER("ffn_norm", C, 0);
        LAYER("ffn_gate", C, F);
        if (!(l == 1 && v->drop_up))
            LAYER("ffn_up", C, F);
        LAYER("ffn_down", F, C);
        if (v->arch && !strcmp(v->arch, "qwen3")) { /* QK-norm */
            LAYER("attn_q_norm", HD, 0);
            LAYER("attn_k_norm", HD, 0);
        }
#undef LAYER
    }
    if (v->extra)
        ADD("rope_freqs.weight", HD / 2, 0);
#undef ADD
    return n;
}

static float value_of(int t, uint64_t e)
{
    return (float)t + (float)e / 1024.0f;
}

static void write_gguf(const variant *v)
{
    info t[64];
    const int n = tensors_of(v, t);
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, (uint64_t)n);
    u64(&b, 11 + (v->tokens ? 1 : 0) + (v->scaling ? 1 : 0) + (v->tok_model ? 2 - v->no_merges : 0));
    str(&b, "general.architecture"), u32(&b, 8), str(&b, v->arch ? v->arch : "llama");
    str(&b, "general.name"), u32(&b, 8), str(&b, "tiny test model");
    static const struct {
        const char *key;
        uint32_t value;
    } u[] = {{"block_count", L},         {"embedding_length", C},        {"feed_forward_length", F},
             {"attention.head_count", H}, {"attention.head_count_kv", KV}, {"context_length", 64},
             {"rope.dimension_count", HD}};
    const char *arch = v->arch ? v->arch : "llama";
    char key[96];
    for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) {
        snprintf(key, sizeof key, "%s.%s", arch, u[k].key);
        str(&b, key), u32(&b, 4), u32(&b, u[k].value);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    str(&b, key), u32(&b, 6), put(&b, &(float){1e-6f}, 4);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    str(&b, key), u32(&b, 6), put(&b, &(float){500.0f}, 4);
    if (v->scaling) {
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        str(&b, key), u32(&b, 8), str(&b, v->scaling);
    }
    if (v->tokens) {
        str(&b, "tokenizer.ggml.tokens"), u32(&b, 9), u32(&b, 8), u64(&b, (uint64_t)v->tokens);
        for (int k = 0; k < v->tokens; k++) {
            char tok[16];
            snprintf(tok, sizeof tok, "t%d", k);
            str(&b, v->tok_model ? BPE_TOKENS[k] : tok);
        }
    }
    if (v->tok_model) {
        str(&b, "tokenizer.ggml.model"), u32(&b, 8), str(&b, v->tok_model);
        if (!v->no_merges) {
            str(&b, "tokenizer.ggml.merges"), u32(&b, 9), u32(&b, 8), u64(&b, N_BPE_MERGES);
            for (int k = 0; k < N_BPE_MERGES; k++)
                str(&b, BPE_MERGES[k]);
        }
    }
    uint64_t offset = 0;
    for (int k = 0; k < n; k++) {
        str(&b, t[k].name);
        u32(&b, t[k].ne1 ? 2 : 1);
        u64(&b, t[k].ne0);
        if (t[k].ne1)
            u64(&b, t[k].ne1);
        u32(&b, 0); /* F32 */
        u64(&b, offset);
        offset += (t[k].ne0 * (t[k].ne1 ? t[k].ne1 : 1) * 4 + 31) / 32 * 32;
    }
    pad_to(&b, 32);
    for (int k = 0; k < n; k++) {
        const uint64_t count = t[k].ne0 * (t[k].ne1 ? t[k].ne1 : 1);
        for (uint64_t e = 0; e < count; e++)
            put(&b, &(float){value_of(k, e)}, 4);
        pad_to(&b, 32);
    }
    FILE *f = fopen(gguf, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    free(b.p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(gguf, sizeof gguf, "/tmp/bk_test_import_%d.gguf", (int)getpid());
    snprintf(out, sizeof out, "/tmp/bk_test_import_%d.safetensors", (int)getpid());
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(gguf);
    unlink(out);
    return 0;
}

/* The file tensor `name`'s index in the variant's order. */
static int index_of(const variant *v, const char *name)
{
    info t[64];
    const int n = tensors_of(v, t);
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

/* rows [r0, r0 + n) of the model tensor from rows of file tensor `file` (of `cols` columns), row map(r) */
static void expect_rows(const float *got, int file, int n, int cols, int permute_heads)
{
    const int hd = permute_heads ? n / permute_heads : 0, half = hd / 2;
    for (int r = 0; r < n; r++) {
        int src = r;
        if (permute_heads) { /* model row h hd + i half + k is file row h hd + 2k + i */
            const int h = r / hd, i = (r % hd) / half, k = r % half;
            src = h * hd + 2 * k + i;
        }
        for (int c = 0; c < cols; c++)
            if (got[(size_t)r * cols + c] != value_of(file, (uint64_t)src * cols + c))
                fail_msg("tensor %d: model row %d column %d holds %.9g, expected file row %d's %.9g", file, r, c,
                         (double)got[(size_t)r * cols + c], src, (double)value_of(file, (uint64_t)src * cols + c));
    }
}

static void run_import(const variant *v, bk_import_summary *s)
{
    write_gguf(v);
    unlink(out);
    bk_error err;
    if (bk_import_gguf(gguf, out, s, &err))
        fail_msg("import: %s", err.message);
}

static void places_every_tensor(const variant *v)
{
    const int qwen3 = v->arch && !strcmp(v->arch, "qwen3"); /* QK-norm; q and k rows as they are */
    bk_import_summary s;
    run_import(v, &s);
    assert_int_equal(s.qk_norm, qwen3);
    assert_int_equal(s.layers, L);
    assert_int_equal(s.heads, H);
    assert_int_equal(s.kv_heads, KV);
    assert_int_equal(s.head_dim, HD);
    assert_int_equal(s.vocab, V);
    assert_int_equal(s.tied, !v->untied);
    assert_int_equal(s.tensors, 2 + (v->untied ? 1 : 0) + (qwen3 ? 11 : 9) * L);
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(out, &st, &err))
        fail_msg("%s", err.message);
    expect_rows(stored(st, "model.wte", V * C), index_of(v, "token_embd.weight"), V, C, 0);
    expect_rows(stored(st, "model.rmsfw", C), index_of(v, "output_norm.weight"), 1, C, 0);
    if (v->untied)
        expect_rows(stored(st, "model.lmhead", V * C), index_of(v, "output.weight"), V, C, 0);
    else
        assert_null(bk_safetensors_find(st, "model.lmhead"));
    const int R = (H + 2 * KV) * HD;
    const float *qkv = stored(st, "model.qkvw", (int64_t)L * R * C), *rms1 = stored(st, "model.rms1w", L * C);
    const float *rms2 = stored(st, "model.rms2w", L * C), *o = stored(st, "model.attprojw", (int64_t)L * C * H * HD);
    const float *fc = stored(st, "model.fcw", (int64_t)L * 2 * F * C), *down = stored(st, "model.fcprojw", L * C * F);
    for (int l = 0; l < L; l++) {
        char nm[64];
#define FILE_OF(part) (snprintf(nm, sizeof nm, "blk.%d." part ".weight", l), index_of(v, nm))
        expect_rows(rms1 + l * C, FILE_OF("attn_norm"), 1, C, 0);
        expect_rows(qkv + (size_t)l * R * C, FILE_OF("attn_q"), H * HD, C, qwen3 ? 0 : H);
        expect_rows(qkv + (size_t)l * R * C + H * HD * C, FILE_OF("attn_k"), KV * HD, C, qwen3 ? 0 : KV);
        expect_rows(qkv + (size_t)l * R * C + (H + KV) * HD * C, FILE_OF("attn_v"), KV * HD, C, 0);
        expect_rows(o + (size_t)l * C * H * HD, FILE_OF("attn_output"), C, H * HD, 0);
        expect_rows(rms2 + l * C, FILE_OF("ffn_norm"), 1, C, 0);
        expect_rows(fc + (size_t)l * 2 * F * C, FILE_OF("ffn_gate"), F, C, 0);
        expect_rows(fc + (size_t)l * 2 * F * C + F * C, FILE_OF("ffn_up"), F, C, 0);
        expect_rows(down + (size_t)l * C * F, FILE_OF("ffn_down"), C, F, 0);
        if (qwen3) {
            expect_rows(stored(st, "model.qnormw", L * HD) + l * HD, FILE_OF("attn_q_norm"), 1, HD, 0);
            expect_rows(stored(st, "model.knormw", L * HD) + l * HD, FILE_OF("attn_k_norm"), 1, HD, 0);
        }
#undef FILE_OF
    }
    bk_safetensors_close(st);

    /* an ordinary checkpoint: it reopens with its experiment, and evaluates */
    bk_lm lm;
    bk_train_state ts;
    if (bk_checkpoint_load(out, NULL, 0, &lm, NULL, &ts, &err))
        fail_msg("reopening the import: %s", err.message);
    assert_int_equal(ts.step, 0);
    assert_int_equal(lm.gpt.family, BK_FAMILY_LLAMA);
    assert_int_equal(lm.gpt.KV, KV);
    assert_int_equal(lm.gpt.tied, !v->untied);
    assert_int_equal(lm.exp.train.length, 64);
    assert_true(fabsf(lm.gpt.eps - 1e-6f) == 0.0f);
    int32_t in[10], tg[10];
    for (int k = 0; k < 10; k++)
        in[k] = k % V, tg[k] = (3 * k + 1) % V;
    if (bk_bias_forward(&lm.bias, 10, &err) || bk_gpt_forward(&lm.gpt, in, tg, 1, 10, 0, &err))
        fail_msg("forward of the import: %s", err.message);
    assert_true(isfinite(lm.gpt.loss));
    bk_lm_close(&lm);
}

static void tied_model(void **state)
{
    (void)state;
    places_every_tensor(&(variant){0});
    char text[4096];
    bk_import_summary s;
    bk_error err;
    assert_int_equal(bk_import_gguf_experiment(gguf, text, sizeof text, &s, &err), BK_OK);
    static const char *const lines[] = {"family = \"llama\"", "layers = 2", "heads = 2", "kv_heads = 1",
                                        "head_dim = 4", "dim = 8", "ffn_dim = 12", "vocab = 16", "tied = true",
                                        "length = 64", "device = \"cpu\"", "plugin = \"rope\"", "base = 500",
                                        "tiny test model"};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        if (!strstr(text, lines[k]))
            fail_msg("the imported experiment lacks '%s':\n%s", lines[k], text);
}

static void untied_model_with_tokenizer(void **state)
{
    (void)state;
    places_every_tensor(&(variant){.untied = 1, .tokens = V});
}

/* llama.cpp's qwen3: QK-norm (attn_q_norm, attn_k_norm), q and k not reordered */
static void qwen3_model(void **state)
{
    (void)state;
    places_every_tensor(&(variant){.arch = "qwen3"});
    char text[4096];
    bk_import_summary s;
    bk_error err;
    assert_int_equal(bk_import_gguf_experiment(gguf, text, sizeof text, &s, &err), BK_OK);
    assert_non_null(strstr(text, "qk_norm = true"));
    assert_non_null(strstr(text, "architecture qwen3"));
}

/* The GGUF's tokenizer travels with the checkpoint: tokenize reads it back, a reopened model reads text
 * through it, and a changed byte of it is refused by its checksum. */
static void tokenizer_is_carried(void **state)
{
    (void)state;
    const variant v = {.tokens = V, .tok_model = "gpt2"};
    bk_import_summary s;
    run_import(&v, &s);
    assert_non_null(strstr(s.tokenizer, "ByteLevel"));
    static const char text[] = "abc abcd ab";
    bk_error err;
    bk_gguf *g = NULL;
    bk_bpe *direct = NULL, *stored_t = NULL;
    int32_t *want = NULL, *got = NULL;
    size_t n_want = 0, n_got = 0;
    if (bk_gguf_open(gguf, &g, &err) || bk_bpe_from_gguf(g, gguf, &direct, &err) ||
        bk_bpe_encode(direct, text, strlen(text), &want, &n_want, &err))
        fail_msg("the GGUF's tokenizer: %s", err.message);
    bk_gguf_close(g);
    if (bk_checkpoint_read_tokenizer(out, &stored_t, &err) ||
        bk_bpe_encode(stored_t, text, strlen(text), &got, &n_got, &err))
        fail_msg("the checkpoint's tokenizer: %s", err.message);
    assert_int_equal(n_got, n_want);
    assert_true(n_want > 0 && n_want < strlen(text)); /* merged: fewer tokens than bytes */
    assert_memory_equal(got, want, n_want * sizeof *want);
    free(got);

    /* a reopened model encodes its text data with it ([data] format = "text", the default) */
    char data[300];
    snprintf(data, sizeof data, "%s.txt", out);
    FILE *f = fopen(data, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    bk_lm lm;
    if (bk_checkpoint_load(out, NULL, 0, &lm, NULL, NULL, &err))
        fail_msg("reopening: %s", err.message);
    assert_non_null(lm.tokenizer);
    bk_tokens train = {0}, val = {0};
    const char *paths[] = {data};
    if (bk_lm_load_data(&lm, paths, 1, 2, NULL, &train, &val, &err))
        fail_msg("loading text: %s", err.message);
    assert_int_equal(val.count, (int64_t)n_want);
    for (size_t k = 0; k < n_want; k++)
        assert_int_equal(val.tokens[k], want[k]);
    bk_tokens_free(&train), bk_tokens_free(&val);
    lm.add_bos = 1; /* this tokenizer has no BOS: --bos says so */
    assert_int_not_equal(bk_lm_load_data(&lm, paths, 1, 2, NULL, &train, &val, &err), BK_OK);
    assert_non_null(strstr(err.message, "no BOS token"));
    bk_lm_close(&lm);
    unlink(data);
    free(want);
    bk_bpe_free(direct), bk_bpe_free(stored_t);

    /* a fine-tuning from it (train --init) takes the tokenizer with the weights */
    char exp_text[4096], described[sizeof s.tokenizer];
    bk_adamw opt = {0};
    bk_init_report rep;
    snprintf(described, sizeof described, "%s", s.tokenizer);
    assert_int_equal(bk_import_gguf_experiment(gguf, exp_text, sizeof exp_text, &s, &err), BK_OK);
    if (bk_lm_open_text(&lm, exp_text, "child", ".", NULL, 0, &err) || bk_lm_register(&lm, &opt, &err) ||
        bk_init_from(out, &lm, &opt, &rep, &err))
        fail_msg("--init from the import: %s", err.message);
    assert_non_null(lm.tokenizer);
    assert_string_equal(bk_bpe_describe(lm.tokenizer), described);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);

    /* one byte of the stored tokenizer changed: its checksum refuses it, by name */
    size_t len = 0;
    f = fopen(out, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    rewind(f);
    char *bytes = malloc(len);
    assert_int_equal(fread(bytes, 1, len, f), len);
    fclose(f);
    char *at = memmem(bytes, len, "ByteLevel", 9);
    assert_non_null(at);
    at[4] = 'a'; /* BytaLevel */
    f = fopen(out, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    free(bytes);
    assert_int_not_equal(bk_checkpoint_read_tokenizer(out, &stored_t, &err), BK_OK);
    assert_non_null(strstr(err.message, "the tokenizer is corrupt"));
    assert_int_not_equal(bk_checkpoint_load(out, NULL, 0, &lm, NULL, NULL, &err), BK_OK);
    assert_non_null(strstr(err.message, "the tokenizer is corrupt"));
}

/* A tokenizer the C tokenizer does not read (SentencePiece: tokenizer.ggml.model "llama") leaves the
 * checkpoint without one, saying why; a BPE tokenizer without its merges refuses the import. */
static void unsupported_and_broken_tokenizers(void **state)
{
    (void)state;
    bk_import_summary s;
    run_import(&(variant){.tokens = V, .tok_model = "llama"}, &s);
    if (strncmp(s.tokenizer, "none: ", 6) != 0 || !strstr(s.tokenizer, "llama"))
        fail_msg("the summary says '%s'", s.tokenizer);
    bk_bpe *t = NULL;
    bk_error err;
    assert_int_equal(bk_checkpoint_read_tokenizer(out, &t, &err), BK_ERR_CONFIG);
    assert_non_null(strstr(err.message, "stores no tokenizer"));
    run_import(&(variant){0}, &s);
    assert_non_null(strstr(s.tokenizer, "no tokenizer.ggml.model"));
}

static void refused(const variant *v, const char *needle1, const char *needle2)
{
    write_gguf(v);
    unlink(out);
    bk_import_summary s;
    bk_error err;
    if (bk_import_gguf(gguf, out, &s, &err) == BK_OK)
        fail_msg("expected a refusal containing '%s'", needle1);
    if (!strstr(err.message, needle1) || (needle2 && !strstr(err.message, needle2)))
        fail_msg("the refusal '%s' lacks '%s' or '%s'", err.message, needle1, needle2 ? needle2 : "");
    assert_int_equal(access(out, F_OK), -1); /* nothing written */
}

static void bad_files_are_refused(void **state)
{
    (void)state;
    refused(&(variant){.arch = "gpt2"}, "architecture 'gpt2'", "'llama'");
    refused(&(variant){.bad_k = 1}, "tensor 'blk.0.attn_k.weight' has 2 dimensions, ne = (8, 8)",
            "expected ne = (8, 4)");
    refused(&(variant){.drop_up = 1}, "no tensor 'blk.1.ffn_up.weight'", NULL);
    refused(&(variant){.extra = 1}, "tensor 'rope_freqs.weight' has no place", NULL);
    refused(&(variant){.tokens = 15}, "the tokenizer has 15 tokens", "the embedding 16 rows");
    refused(&(variant){.scaling = "linear"}, "rope.scaling.type = 'linear'", NULL);
    refused(&(variant){.tokens = V, .tok_model = "gpt2", .no_merges = 1}, "tokenizer.ggml.merges", NULL);
    bk_import_summary s;
    bk_error err;
    assert_int_not_equal(bk_import_gguf("/nonexistent/model.gguf", out, &s, &err), BK_OK);
    assert_non_null(strstr(err.message, "/nonexistent/model.gguf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tied_model),
        cmocka_unit_test(untied_model_with_tokenizer),
        cmocka_unit_test(qwen3_model),
        cmocka_unit_test(bad_files_are_refused),
        cmocka_unit_test(tokenizer_is_carried),
        cmocka_unit_test(unsupported_and_broken_tokenizers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
