/* GGUF into a checkpoint (train/import.h). */
#include "train/import.h"

#include "io/gguf.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/lm.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A metadata number of the architecture ("llama.block_count"), or `def` when absent (def < 0: required). */
static int arch_uint(const bk_gguf *g, const char *path, const char *arch, const char *key, int64_t def, int64_t max,
                     int *out, bk_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!bk_gguf_find(g, full) && def >= 0) {
        *out = (int)def;
        return BK_OK;
    }
    uint64_t v;
    int rc = bk_gguf_get_uint(g, full, &v, err);
    if (rc)
        return rc;
    if (v < 1 || v > (uint64_t)max)
        return bk_fail(err, BK_ERR_PARSE, "%s: metadata %s = %llu: expected an integer in [1, %lld]", path, full,
                       (unsigned long long)v, (long long)max);
    *out = (int)v;
    return BK_OK;
}

static int arch_float(const bk_gguf *g, const char *path, const char *arch, const char *key, double def, double *out,
                      bk_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!bk_gguf_find(g, full) && def >= 0) {
        *out = def;
        return BK_OK;
    }
    int rc = bk_gguf_get_float(g, full, out, err);
    if (!rc && !(*out > 0.0 && isfinite(*out)))
        return bk_fail(err, BK_ERR_PARSE, "%s: metadata %s = %g: expected a positive number", path, full, *out);
    return rc;
}


/* The shape from the metadata, and the experiment text. */
static int read_shape(const bk_gguf *g, const char *path, bk_import_summary *s, bk_error *err)
{
    memset(s, 0, sizeof *s);
    const char *arch = NULL;
    int rc = bk_gguf_get_string(g, "general.architecture", &arch, err); /* its messages name the file */
    if (rc)
        return rc;
    snprintf(s->architecture, sizeof s->architecture, "%s", arch);
    if (strcmp(arch, "llama") != 0 && strcmp(arch, "qwen3") != 0)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: architecture '%s': import reads GGUF files of architecture 'llama' (LLaMA blocks: "
                       "RMSNorm, SwiGLU, grouped-query attention, RoPE) and 'qwen3' (the same with QK-norm)",
                       path, arch);
    s->qk_norm = !strcmp(arch, "qwen3");
    const char *name = NULL;
    if (bk_gguf_find(g, "general.name") && bk_gguf_get_string(g, "general.name", &name, err) == BK_OK)
        snprintf(s->name, sizeof s->name, "%s", name);
    if ((rc = arch_uint(g, path, arch, "block_count", -1, 1024, &s->layers, err)) ||
        (rc = arch_uint(g, path, arch, "embedding_length", -1, 65536, &s->dim, err)) ||
        (rc = arch_uint(g, path, arch, "feed_forward_length", -1, 1 << 20, &s->ffn_dim, err)) ||
        (rc = arch_uint(g, path, arch, "attention.head_count", -1, 1024, &s->heads, err)) ||
        (rc = arch_uint(g, path, arch, "attention.head_count_kv", s->heads, 1024, &s->kv_heads, err)) ||
        (rc = arch_uint(g, path, arch, "context_length", -1, 1 << 24, &s->context, err)) ||
        (rc = arch_float(g, path, arch, "attention.layer_norm_rms_epsilon", -1.0, &s->norm_eps, err)) ||
        (rc = arch_float(g, path, arch, "rope.freq_base", 10000.0, &s->rope_base, err)))
        return rc;
    const int hd_default = s->dim % s->heads == 0 ? s->dim / s->heads : 0;
    if ((rc = arch_uint(g, path, arch, "attention.key_length", hd_default ? hd_default : -1, 4096, &s->head_dim,
                        err)))
        return rc;
    int rot = 0, vlen = 0;
    if ((rc = arch_uint(g, path, arch, "rope.dimension_count", s->head_dim, 4096, &rot, err)) ||
        (rc = arch_uint(g, path, arch, "attention.value_length", s->head_dim, 4096, &vlen, err)))
        return rc;
    if (rot != s->head_dim)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: %s.rope.dimension_count = %d rotates part of each head of %d; the rope term rotates "
                       "whole heads",
                       path, arch, rot, s->head_dim);
    if (vlen != s->head_dim)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s.attention.value_length = %d differs from key_length = %d", path,
                       arch, vlen, s->head_dim);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *scaling = NULL;
    if (bk_gguf_find(g, key) && (rc = bk_gguf_get_string(g, key, &scaling, err)) == BK_OK && strcmp(scaling, "none"))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: %s = '%s': the model was trained with a scaled rope; import reads unscaled ones (set "
                       "the scaling on the imported checkpoint's rope term instead)",
                       path, key, scaling);
    if (rc)
        return rc;
    if (s->heads % s->kv_heads || s->head_dim % 2)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: %d heads with %d key/value heads of %d: expected key/value heads dividing the heads and "
                       "an even head size",
                       path, s->heads, s->kv_heads, s->head_dim);
    const bk_gguf_tensor *emb = bk_gguf_tensor_find(g, "token_embd.weight");
    if (!emb)
        return bk_fail(err, BK_ERR_PARSE, "%s: no tensor 'token_embd.weight' (the token embedding)", path);
    if (emb->n_dims != 2 || emb->ne[0] != s->dim || emb->ne[1] < 2 || emb->ne[1] > (1 << 20))
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: tensor 'token_embd.weight' has ne = (%lld, %lld); expected (%d, vocabulary)", path,
                       (long long)emb->ne[0], (long long)emb->ne[1], s->dim);
    s->vocab = (int)emb->ne[1];
    const bk_gguf_kv *tokens = bk_gguf_find(g, "tokenizer.ggml.tokens");
    if (tokens && (tokens->type != BK_GGUF_ARRAY || tokens->count != (uint64_t)s->vocab))
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: the tokenizer has %llu tokens (tokenizer.ggml.tokens) but the embedding %d rows", path,
                       (unsigned long long)(tokens->type == BK_GGUF_ARRAY ? tokens->count : 0), s->vocab);
    s->tied = bk_gguf_tensor_find(g, "output.weight") == NULL;
    return BK_OK;
}

int bk_import_tokenizer(int rc, bk_bpe *t, bk_lm *lm, bk_import_summary *s, bk_error *err)
{
    if (rc == BK_ERR_UNSUPPORTED) { /* a kind the C tokenizer does not read: the weights still import */
        snprintf(s->tokenizer, sizeof s->tokenizer, "none: %.180s", err->message);
        bk_error_clear(err);
        return BK_OK;
    }
    if (!rc)
        snprintf(s->tokenizer, sizeof s->tokenizer, "%s", bk_bpe_describe(t));
    return rc ? rc : bk_lm_set_tokenizer(lm, t, err);
}

int bk_import_gguf_experiment(const char *path, char *text, size_t size, bk_import_summary *s, bk_error *err)
{
    bk_gguf *g = NULL;
    int rc = bk_gguf_open(path, &g, err);
    if (!rc)
        rc = read_shape(g, path, s, err);
    bk_gguf_close(g);
    if (rc)
        return rc;
    size_t at = 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    rc = bk_append(text, size, &at, err, "the imported experiment",
                   "# imported by biaskit import from %s (GGUF, architecture %s%s%s)\n"
                   "[model]\nfamily = \"llama\"\nlayers = %d\nheads = %d\nkv_heads = %d\nhead_dim = %d\ndim = %d\n"
                   "ffn_dim = %d\nvocab = %d\nnorm_eps = %.17g\ntied = %s\n%s\n[train]\nlength = %d\n\n[run]\n"
                   "device = \"cpu\"\n\n[[term]]\nplugin = \"rope\"\nbase = %.17g\n",
                   base, s->architecture, s->name[0] ? ": " : "", s->name, s->layers, s->heads, s->kv_heads,
                   s->head_dim, s->dim, s->ffn_dim, s->vocab, s->norm_eps, s->tied ? "true" : "false",
                   s->qk_norm ? "qk_norm = true\n" : "", s->context, s->rope_base);
    return rc;
}

/* One GGUF matrix (ne = (cols, rows)) or, with rows 0, vector (ne = (cols)) into dst, checked against the
 * shape the model needs; `permute_heads` > 0 undoes llama.cpp's reordering of q / k rows for that many heads. */
static int place(const bk_gguf *g, const char *path, const char *name, int64_t rows, int64_t cols,
                 int permute_heads, float *dst, float *scratch, bk_import_summary *s, bk_error *err)
{
    const bk_gguf_tensor *t = bk_gguf_tensor_find(g, name);
    if (!t)
        return bk_fail(err, BK_ERR_PARSE, "%s: no tensor '%s'", path, name);
    if (rows == 0 ? t->n_dims != 1 || t->ne[0] != cols : t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
        char want[64];
        if (rows == 0)
            snprintf(want, sizeof want, "(%lld)", (long long)cols);
        else
            snprintf(want, sizeof want, "(%lld, %lld)", (long long)cols, (long long)rows);
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has %u dimensions, ne = (%lld, %lld); expected ne = %s",
                       path, name, t->n_dims, (long long)t->ne[0], (long long)t->ne[1], want);
    }
    int rc = bk_gguf_dequantize(g, t, permute_heads ? scratch : dst, err); /* its messages name the file */
    if (rc)
        return rc;
    s->quantized += t->type != BK_GGML_F32 && t->type != BK_GGML_F16 && t->type != BK_GGML_BF16;
    if (permute_heads) { /* per head: row 2k + i of the file is row i hd/2 + k of the model */
        const int64_t hd = rows / permute_heads, half = hd / 2;
        for (int64_t h = 0; h < permute_heads; h++)
            for (int64_t k = 0; k < half; k++)
                for (int i = 0; i < 2; i++)
                    memcpy(dst + (h * hd + i * half + k) * cols, scratch + (h * hd + 2 * k + i) * cols,
                           (size_t)cols * sizeof *dst);
    }
    return BK_OK;
}

/* The per-layer tensors import places (blk.N.<part>.weight); the last two with QK-norm only. */
static const char *const layer_parts[11] = {"attn_norm", "attn_q", "attn_k",   "attn_v",     "attn_output", "ffn_norm",
                                            "ffn_gate",  "ffn_up", "ffn_down", "attn_q_norm", "attn_k_norm"};

/* Every tensor of the file into the model's parameters (the llama family's layout, model/gpt.h). llama.cpp
 * reorders q's and k's rows for architecture llama only (its qwen3 keeps HF's rotate-half layout). */
static int place_all(const bk_gguf *g, const char *path, bk_gpt *m, bk_import_summary *s, bk_error *err)
{
    const int permute = !m->qk_norm, parts = m->qk_norm ? 11 : 9;
    const int64_t C = m->C, A = m->A, F = m->F, V = m->V, KVd = (int64_t)m->KV * m->hd;
    const int64_t R = A + 2 * KVd;
    const bk_llama_params *p = &m->lp;
    /* the rows of q (the larger of q and k, H >= KV) before they are reordered; the rest goes straight in */
    float *scratch = malloc((size_t)(A * C) * sizeof *scratch);
    if (!scratch)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for a tensor of %lld values", (long long)(A * C));
    int rc = place(g, path, "token_embd.weight", V, C, 0, p->wte, scratch, s, err);
    if (!rc)
        rc = place(g, path, "output_norm.weight", 0, C, 0, p->rmsfw, scratch, s, err);
    if (!rc && !m->tied)
        rc = place(g, path, "output.weight", V, C, 0, p->lmhead, scratch, s, err);
    size_t placed = 2 + !m->tied;
    for (int l = 0; l < m->L && !rc; l++) {
        char n[11][64];
        for (int k = 0; k < 11; k++)
            snprintf(n[k], sizeof n[k], "blk.%d.%s.weight", l, layer_parts[k]);
        float *qkv = p->qkvw + (size_t)l * R * C, *fc = p->fcw + (size_t)l * 2 * F * C;
        if ((rc = place(g, path, n[0], 0, C, 0, p->rms1w + (size_t)l * C, scratch, s, err)) ||
            (rc = place(g, path, n[1], A, C, permute ? m->H : 0, qkv, scratch, s, err)) ||
            (rc = place(g, path, n[2], KVd, C, permute ? m->KV : 0, qkv + A * C, scratch, s, err)) ||
            (rc = place(g, path, n[3], KVd, C, 0, qkv + (A + KVd) * C, scratch, s, err)) ||
            (rc = place(g, path, n[4], C, A, 0, p->attprojw + (size_t)l * C * A, scratch, s, err)) ||
            (rc = place(g, path, n[5], 0, C, 0, p->rms2w + (size_t)l * C, scratch, s, err)) ||
            (rc = place(g, path, n[6], F, C, 0, fc, scratch, s, err)) ||
            (rc = place(g, path, n[7], F, C, 0, fc + F * C, scratch, s, err)) ||
            (rc = place(g, path, n[8], C, F, 0, p->fcprojw + (size_t)l * C * F, scratch, s, err)) ||
            (m->qk_norm && ((rc = place(g, path, n[9], 0, m->hd, 0, p->qnormw + (size_t)l * m->hd, scratch, s, err)) ||
                            (rc = place(g, path, n[10], 0, m->hd, 0, p->knormw + (size_t)l * m->hd, scratch, s, err)))))
            break;
        placed += (size_t)parts;
    }
    free(scratch);
    if (rc)
        return rc;
    s->tensors = bk_gguf_tensor_count(g);
    if (placed != s->tensors) /* a tensor the model has no place for: computing without it would be wrong */
        for (size_t i = 0; i < s->tensors; i++) {
            const char *name = bk_gguf_tensor_at(g, i)->name;
            int known = !strcmp(name, "token_embd.weight") || !strcmp(name, "output_norm.weight") ||
                        (!m->tied && !strcmp(name, "output.weight"));
            int l = -1, end = 0;
            char part[32];
            if (!known && sscanf(name, "blk.%d.%31[a-z_].weight%n", &l, part, &end) == 2 && name[end] == '\0' &&
                l >= 0 && l < m->L)
                for (int k = 0; k < parts; k++)
                    known |= !strcmp(part, layer_parts[k]);
            if (!known)
                return bk_fail(err, BK_ERR_UNSUPPORTED,
                               "%s: tensor '%s' has no place in a %s model of %d layers (import places "
                               "token_embd, output_norm, output and blk.N.{attn_norm, attn_q, attn_k, attn_v, "
                               "attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down%s})",
                               path, name, s->architecture, m->L, m->qk_norm ? ", attn_q_norm, attn_k_norm" : "");
        }
    return BK_OK;
}

/* The file's tokenizer into the model (and so its checkpoint): with tokenizer.ggml.model, read whole
 * (bk_import_tokenizer); without it, none (the checkpoint reads token ids). */
static int carry_tokenizer(const bk_gguf *g, const char *path, bk_lm *lm, bk_import_summary *s, bk_error *err)
{
    if (!bk_gguf_find(g, "tokenizer.ggml.model")) {
        snprintf(s->tokenizer, sizeof s->tokenizer, "none (the file has no tokenizer.ggml.model)");
        return BK_OK;
    }
    bk_bpe *t = NULL;
    const int rc = bk_bpe_from_gguf(g, path, &t, err);
    return bk_import_tokenizer(rc, t, lm, s, err);
}

int bk_import_gguf(const char *path, const char *out, bk_import_summary *s, bk_error *err)
{
    char text[4096];
    int rc = bk_import_gguf_experiment(path, text, sizeof text, s, err);
    if (rc)
        return rc;
    bk_gguf *g = NULL;
    if ((rc = bk_gguf_open(path, &g, err)))
        return rc;
    bk_lm lm;
    bk_adamw opt;
    memset(&opt, 0, sizeof opt);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char source[512];
    snprintf(source, sizeof source, "%s (imported)", base);
    rc = bk_lm_open_text(&lm, text, source, ".", NULL, 0, err);
    if (rc) {
        bk_gguf_close(g);
        return bk_error_prefix(err, "%s: the imported experiment: ", path);
    }
    if (!(rc = bk_lm_register(&lm, &opt, err)) && !(rc = place_all(g, path, &lm.gpt, s, err)) &&
        !(rc = carry_tokenizer(g, path, &lm, s, err))) {
        s->parameters = lm.gpt.n_params;
        const bk_train_state st = {0, 0, 0, 0, NAN};
        rc = bk_checkpoint_save(out, &lm, &opt, &st, err);
    }
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    bk_gguf_close(g);
    return rc;
}
