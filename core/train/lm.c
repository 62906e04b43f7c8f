#define _POSIX_C_SOURCE 200809L /* strdup */
#include "train/lm.h"

#include "cuda/device.h"
#include "util/path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where [run] device was set, for messages: "FILE:LINE:COL", "--set run.device=..." or the file. */
static void device_origin(const bk_experiment *e, char *out, size_t size)
{
    const bk_toml_node *run = bk_toml_get(bk_toml_root(e->doc), "run");
    const bk_toml_node *device = bk_toml_get(run, "device");
    bk_toml_pos pos = device ? bk_toml_position(device) : (bk_toml_pos){e->path, 0, 0};
    if (pos.source && pos.line && strncmp(pos.source, "--set ", 6) != 0) /* "--set K=V" says it all */
        snprintf(out, size, "%s:%u:%u", pos.source, pos.line, pos.column);
    else
        snprintf(out, size, "%s", pos.source ? pos.source : "the experiment");
}

/* The cuda backend on [run] gpu's device (-1: the local rank's, cuda/policy.h); an error about it names
 * where [run] gpu was set. */
static int create_cuda(const bk_experiment *e, bk_matmul_mode matmul, bk_backend **out, bk_error *err)
{
    char where[600] = "[run] gpu";
    const bk_toml_node *gpu = bk_toml_get(bk_toml_get(bk_toml_root(e->doc), "run"), "gpu");
    bk_toml_pos pos = gpu ? bk_toml_position(gpu) : (bk_toml_pos){NULL, 0, 0};
    if (pos.source && pos.line && strncmp(pos.source, "--set ", 6) != 0)
        snprintf(where, sizeof where, "%s:%u:%u: [run] gpu", pos.source, pos.line, pos.column);
    else if (pos.source)
        snprintf(where, sizeof where, "[run] gpu (%s)", pos.source);
    return bk_backend_cuda_create_on(out, matmul, e->run.gpu, where, err);
}

/* The backend [run] device and matmul ask for. Resolved on the final experiment (file, --set, or the
 * one stored in a checkpoint), so a checkpoint trained on a GPU with device = "cuda" evaluates and
 * resumes on a machine without one under --set run.device=cpu, and under "auto" without anything. */
static int choose_backend(const bk_experiment *e, bk_backend **out, char *note, size_t note_size, bk_error *err)
{
    *out = NULL;
    const bk_matmul_mode matmul = e->run.matmul == BK_MATMUL_TF32   ? BK_MATMUL_TF32
                                  : e->run.matmul == BK_MATMUL_BF16 ? BK_MATMUL_BF16
                                                                    : BK_MATMUL_FP32;
    char probe[256];
    switch ((bk_device_choice)e->run.device) {
    case BK_DEVICE_CPU:
        *out = bk_backend_cpu_attention((bk_attention_mode)e->run.attention);
        return BK_OK;
    case BK_DEVICE_EMULATED:
        return bk_backend_emulated_create(out, matmul, err);
    case BK_DEVICE_AUTO:
        if (!bk_device_probe(probe, sizeof probe)) {
            snprintf(note, note_size, "[run] device = \"auto\", and no GPU answers: %s", probe);
            *out = bk_backend_cpu_attention((bk_attention_mode)e->run.attention);
            return BK_OK;
        }
        return create_cuda(e, matmul, out, err);
    case BK_DEVICE_CUDA:
        if (!bk_device_probe(probe, sizeof probe)) {
            char where[512];
            device_origin(e, where, sizeof where);
            return bk_fail(err, BK_ERR_DEVICE, "[run] device = \"cuda\" (%s) but no GPU answers: %s; use \"auto\" or "
                           "\"cpu\" (e.g. --set run.device=cpu)", where, probe);
        }
        return create_cuda(e, matmul, out, err);
    }
    return bk_fail(err, BK_ERR_INTERNAL, "[run] device: unknown choice %lld", (long long)e->run.device);
}

/* ... with [run] attention and precision, which a device backend takes before the model sizes its
 * buffers (the CPU computes fp32 with its one attention and ignores both). */
static int create_backend(const bk_experiment *e, bk_backend **out, char *note, size_t note_size, bk_error *err)
{
    note[0] = '\0';
    int rc = choose_backend(e, out, note, note_size, err);
    if (rc != BK_OK || !(*out)->on_device)
        return rc;
    bk_backend *be = *out;
    be->attention = e->run.attention == BK_ATTENTION_MATERIALIZED ? BK_ATTENTION_MATERIALIZED : BK_ATTENTION_FUSED;
    if (e->run.precision == BK_PRECISION_BF16) {
        be->precision = BK_PRECISION_BF16;
        const size_t len = strlen(be->description);
        snprintf(be->description + len, sizeof be->description - len, ", bf16 storage");
    }
    return BK_OK;
}

int bk_lm_open_text(bk_lm *lm, const char *text, const char *source_name, const char *config_dir,
                    const char *const *overrides, int n_overrides, bk_error *err)
{
    memset(lm, 0, sizeof *lm);
    int rc;
    lm->config_text = strdup(text);
    lm->config_source = strdup(source_name ? source_name : "");
    lm->config_dir = strdup(config_dir ? config_dir : ".");
    lm->overrides = calloc((size_t)(n_overrides > 0 ? n_overrides : 1), sizeof *lm->overrides);
    if (!lm->config_text || !lm->config_source || !lm->config_dir || !lm->overrides) {
        bk_lm_close(lm);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_overrides; i++) {
        if (!(lm->overrides[i] = strdup(overrides[i]))) {
            bk_lm_close(lm);
            return bk_fail(err, BK_ERR_NOMEM, "out of memory");
        }
        lm->n_overrides++;
    }
    if ((rc = bk_experiment_parse(text, source_name, overrides, (size_t)n_overrides, &lm->exp, err)) ||
        (rc = bk_registry_init(&lm->reg, err))) {
        bk_lm_close(lm);
        return rc;
    }
    lm->reg.relative_to = lm->config_dir; /* a [[term]] plugin path is read from the file's directory */
    const bk_experiment *e = &lm->exp;
    const bk_gpt_shape shape = bk_gpt_shape_of(e);
    if ((rc = bk_terms_create(&lm->terms, e, &lm->reg, err)) ||
        (rc = bk_bias_init(&lm->bias, &lm->terms, (int)e->model.layers, 1, err)) || /* terms say which weights train */
        (rc = bk_gpt_init_shape(&lm->gpt, &shape, &lm->bias, (uint64_t)e->train.seed, err)) ||
        (rc = create_backend(e, &lm->be, lm->device_note, sizeof lm->device_note, err)) || (rc = bk_gpt_set_backend(&lm->gpt, lm->be, err)) ||
        (rc = bk_bias_set_backend(&lm->bias, lm->be, err))) {
        bk_lm_close(lm);
        return rc;
    }
    lm->gpt.recompute = e->run.recompute != 0;
    return BK_OK;
}

int bk_lm_open_file(bk_lm *lm, const char *path, const char *const *overrides, int n_overrides, bk_error *err)
{
    memset(lm, 0, sizeof *lm);
    /* the reader `biaskit config` uses too (config/toml.h): a NUL byte is an error, not the file's end */
    char *text = NULL;
    size_t len = 0;
    int read_rc = bk_toml_read_file(path, &text, &len, err);
    if (read_rc)
        return read_rc;
    char dir[4096];
    int rc = bk_path_dir_of(path, dir, sizeof dir, err);
    if (!rc)
        rc = bk_lm_open_text(lm, text, path, dir, overrides, n_overrides, err);
    free(text);
    return rc;
}

void bk_lm_close(bk_lm *lm)
{
    if (!lm)
        return;
    bk_gpt_free(&lm->gpt);
    if (lm->bias.set)
        bk_bias_free(&lm->bias);
    if (lm->be) /* after the model and the bias, whose memory it holds */
        bk_backend_destroy(lm->be);
    bk_terms_free(&lm->terms); /* instances go before the plugins' code is unloaded */
    bk_registry_free(&lm->reg);
    bk_experiment_free(&lm->exp);
    for (int i = 0; i < lm->n_overrides; i++)
        free(lm->overrides[i]);
    free(lm->overrides);
    free(lm->config_text);
    free(lm->config_source);
    free(lm->config_dir);
    free(lm->init_record);
    bk_bpe_free(lm->tokenizer);
    free(lm->tokenizer_json);
    memset(lm, 0, sizeof *lm);
}

/* A term's parameter groups (bk_term_group) as the segments of its optimizer group: each tensor of each
 * copy (a per-layer term repeats its tensors copy after copy). A term whose tensors all train at lr x 1
 * with the engine's decay rule keeps the plain group. */
static int term_segments(bk_adamw *opt, int group, const bk_term *term, bk_error *err)
{
    int plain = 1;
    for (int g = 0; g < term->n_groups; g++)
        plain &= term->groups[g].lr_scale == 1.0 && term->groups[g].weight_decay < 0.0;
    if (plain)
        return BK_OK;
    const int n = term->n_copies * term->n_groups;
    bk_adamw_segment *seg = malloc((size_t)n * sizeof *seg);
    if (!seg)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the parameter groups of term '%s'", term->label);
    for (int c = 0, k = 0; c < term->n_copies; c++)
        for (int g = 0; g < term->n_groups; g++, k++)
            seg[k] = (bk_adamw_segment){(size_t)c * (size_t)term->n_params + (size_t)term->groups[g].offset,
                                        (size_t)term->groups[g].count, term->groups[g].lr_scale,
                                        term->groups[g].weight_decay};
    int rc = bk_adamw_set_segments(opt, group, seg, n, err);
    free(seg);
    return rc;
}

int bk_lm_register(bk_lm *lm, bk_adamw *opt, bk_error *err)
{
    bk_gpt *m = &lm->gpt;
    int rc = bk_gpt_alloc_grads(m, err);
    if (rc)
        return rc;
    int decay_all = lm->exp.train.decay_all;
    char name[96];
    for (int i = 0; i < m->n_tensors; i++) {
        const bk_gpt_tensor *t = &m->tensors[i];
        snprintf(name, sizeof name, "model.%s", t->name);
        if ((rc = bk_adamw_add_on(opt, m->be, name, m->wparams + t->offset, m->wgrads + t->offset,
                                  m->params + t->offset, t->count, t->decay || decay_all, err)))
            return rc;
    }
    for (int t = 0; t < lm->terms.n; t++) {
        const bk_term *term = &lm->terms.terms[t];
        if (!term->n_params)
            continue;
        if (snprintf(name, sizeof name, "term.%s.theta", term->label) >= (int)sizeof name)
            return bk_fail(err, BK_ERR_INVALID, "term name '%s' is too long (at most %zu bytes)", term->label,
                              sizeof name - 1 - strlen("term..theta"));
        if ((rc = bk_adamw_add(opt, name, term->theta, lm->bias.dtheta[t],
                               (size_t)term->n_copies * (size_t)term->n_params, decay_all, err)) ||
            (rc = term_segments(opt, opt->n_groups - 1, term, err)))
            return rc;
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!lm->bias.n_mix[s])
            continue;
        char stream[32];
        snprintf(name, sizeof name, "mix.%s", bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream));
        if ((rc = bk_adamw_add(opt, name, lm->bias.mix_params[s], lm->bias.mix_grads[s], (size_t)lm->bias.n_mix[s],
                               decay_all, err)))
            return rc;
    }
    return BK_OK;
}

int bk_lm_zero_grad(bk_lm *lm, bk_error *err)
{
    int rc = bk_gpt_zero_grad(&lm->gpt, err);
    if (!rc)
        bk_bias_zero_grad(&lm->bias);
    return rc;
}

int bk_lm_gradients_ready(bk_lm *lm, bk_error *err)
{
    return bk_bias_gradients_to_host(&lm->bias, err);
}

int bk_lm_after_update(bk_lm *lm, bk_error *err)
{
    int rc = bk_bias_project(&lm->bias, err);
    if (!rc && lm->bias.learn_weights)
        bk_bias_sync_weights(&lm->bias);
    return rc;
}

int bk_lm_after_step(bk_lm *lm, int32_t distances, bk_error *err)
{
    int rc = bk_lm_after_update(lm, err);
    return rc ? rc : bk_bias_forward(&lm->bias, distances, err);
}

int bk_lm_path(const bk_lm *lm, const char *path, char *out, size_t size, bk_error *err)
{
    return bk_path_resolve(lm->config_dir, path, out, size, err);
}

int bk_lm_experiment_file(const bk_lm *lm, char *out, size_t size, bk_error *err)
{
    const char *name = lm->config_source ? lm->config_source : "";
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    return bk_path_resolve(lm->config_dir, base, out, size, err);
}

int bk_lm_set_tokenizer(bk_lm *lm, bk_bpe *t, bk_error *err)
{
    const int n = bk_bpe_vocab_size(t);
    char *json = NULL;
    size_t len = 0;
    int rc = BK_OK;
    if (n > lm->gpt.V || n > 65536)
        rc = bk_fail(err, BK_ERR_CONFIG,
                     "the tokenizer (%s) has %d tokens: the model's vocabulary holds %d%s", bk_bpe_describe(t), n,
                     lm->gpt.V, n > 65536 ? " and token streams hold at most 65536 (uint16 ids)" : "");
    else
        rc = bk_bpe_to_hf_json(t, &json, &len, err);
    if (rc) {
        bk_bpe_free(t);
        return rc;
    }
    bk_bpe_free(lm->tokenizer);
    free(lm->tokenizer_json);
    lm->tokenizer = t;
    lm->tokenizer_json = json;
    return BK_OK;
}

/* A text stream (bytes as tokens) encoded with the model's tokenizer in place. */
static int encode_stream(const bk_lm *lm, bk_tokens *t, int64_t min_tokens, bk_error *err)
{
    char *text = malloc((size_t)t->count + 1);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the text of %s", t->name);
    for (int64_t i = 0; i < t->count; i++)
        text[i] = (char)t->tokens[i];
    int rc = bk_bpe_encode(lm->tokenizer, text, (size_t)t->count, &ids, &n, err);
    free(text);
    if (rc)
        return bk_error_prefix(err, "%s: ", t->name);
    const int bos = lm->add_bos ? bk_bpe_bos(lm->tokenizer) : -1;
    if (lm->add_bos && bos < 0)
        rc = bk_fail(err, BK_ERR_CONFIG, "--bos: the tokenizer (%s) has no BOS token", bk_bpe_describe(lm->tokenizer));
    else if ((int64_t)n + (bos >= 0) < min_tokens)
        rc = bk_fail(err, BK_ERR_INVALID, "%s: %lld tokens once encoded by the model's tokenizer, fewer than the %lld "
                     "needed", t->name, (long long)n + (bos >= 0), (long long)min_tokens);
    uint16_t *out = rc ? NULL : malloc((n + 1) * sizeof *out);
    if (!rc && !out)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the tokens of %s", t->name);
    if (!rc) {
        size_t k = 0;
        if (bos >= 0)
            out[k++] = (uint16_t)bos;
        for (size_t i = 0; i < n; i++)
            out[k++] = (uint16_t)ids[i]; /* below 65536: bk_lm_set_tokenizer */
        free(t->tokens);
        t->tokens = out;
        t->count = (int64_t)k;
    }
    free(ids);
    return rc;
}

int bk_lm_load_data(const bk_lm *lm, const char *const *data, int n_data, int64_t min_tokens, const char *hint,
                    bk_tokens *train, bk_tokens *val, bk_error *err)
{
    return bk_lm_load_data_split(lm, data, n_data, min_tokens, hint, train, val, NULL, err);
}

/* The data configuration of experiment e (paths read from config_dir), or of the command line's `data`
 * (n_data > 0: every token evaluation data), with its path strings in *buf / *ptr (free both); then
 * either loaded (train, val; every token below `vocab`) or only planned (train NULL). */
static int with_data_config(const bk_experiment *e, const char *config_dir, const char *const *data, int n_data,
                            int64_t min_tokens, const char *hint, int32_t vocab, bk_tokens *train, bk_tokens *val,
                            bk_data_split *split, bk_error *err)
{
    if (n_data == 0 && e->data.paths.n == 0)
        return bk_fail(err, BK_ERR_CONFIG, "%s: [data] paths: no training data; set e.g. paths = [\"corpus/\"] or "
                       "--set data.paths=DIR%s", e->path, hint ? hint : "");
    /* the experiment's paths, read from its file's directory, or the command line's as given */
    const int n = n_data ? n_data : e->data.paths.n + e->data.val_paths.n;
    char(*buf)[4096] = calloc((size_t)n, sizeof *buf);
    const char **ptr = calloc((size_t)n, sizeof *ptr);
    int rc = buf && ptr ? BK_OK : bk_fail(err, BK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        if (n_data)
            bk_copy_text(buf[i], sizeof buf[i], data[i]);
        else
            rc = bk_path_resolve(config_dir,
                                 i < e->data.paths.n ? e->data.paths.items[i] : e->data.val_paths.items[i - e->data.paths.n],
                                 buf[i], sizeof buf[i], err);
        ptr[i] = buf[i];
    }
    if (!rc) {
        bk_data_config dc = {
            .format = (bk_data_format)e->data.format,
            .paths = ptr,
            .n_paths = n_data ? n_data : e->data.paths.n,
            .val_paths = n_data ? ptr : ptr + e->data.paths.n, /* --data: every token is evaluation data */
            .n_val_paths = n_data ? n_data : e->data.val_paths.n,
            .val_fraction = n_data ? 0.5 : e->data.val_fraction,
            .extensions = e->data.extensions.items,
            .n_extensions = e->data.extensions.n,
            .max_bytes = n_data ? 0 : e->data.max_bytes,
            .split = (int)e->data.split,
            .split_seed = (uint64_t)e->data.split_seed,
            .split_out = split,
        };
        rc = train ? bk_data_load(&dc, vocab, min_tokens, train, val, err)
                   : bk_data_plan(&dc, split, err);
    }
    free(buf), free(ptr);
    return rc;
}

int bk_lm_load_data_split(const bk_lm *lm, const char *const *data, int n_data, int64_t min_tokens, const char *hint,
                          bk_tokens *train, bk_tokens *val, bk_data_split *split, bk_error *err)
{
    const int bpe = lm->tokenizer && lm->exp.data.format == BK_DATA_TEXT;
    /* the byte streams are split first; the token counts are checked once encoded */
    int rc = with_data_config(&lm->exp, lm->config_dir, data, n_data, bpe ? 0 : min_tokens, hint,
                              bpe ? 256 : (int32_t)lm->exp.model.vocab, train, val, split, err);
    if (rc || !bpe)
        return rc;
    if ((rc = encode_stream(lm, val, min_tokens, err)) ||
        (train->tokens && (rc = encode_stream(lm, train, n_data ? 0 : min_tokens, err)))) {
        bk_tokens_free(train);
        bk_tokens_free(val);
    }
    return rc;
}

int bk_experiment_data_plan(const bk_experiment *e, const char *config_dir, bk_data_split *out, bk_error *err)
{
    return with_data_config(e, config_dir, NULL, 0, 0, NULL, (int32_t)e->model.vocab, NULL, NULL, out, err);
}
