#define _POSIX_C_SOURCE 200809L /* strdup */
#include "train/lm.h"

#include "util/path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model is built for the CPU: this version has no CUDA training path (README.md). Checked on the
 * resolved experiment (file, --set, or the experiment stored in a checkpoint), so `train`, `train
 * --resume` and `eval` refuse device = "cuda" the same way, naming where it was set. */
static int check_device(const bk_experiment *e, bk_error *err)
{
    if (e->run.device != BK_DEVICE_CUDA)
        return BK_OK;
    const bk_toml_node *run = bk_toml_get(bk_toml_root(e->doc), "run");
    const bk_toml_node *device = bk_toml_get(run, "device");
    bk_toml_pos pos = device ? bk_toml_position(device) : (bk_toml_pos){e->path, 0, 0};
    return bk_fail_at(err, BK_ERR_UNSUPPORTED, pos,
                      "[run] device = \"cuda\": this version trains and evaluates on the CPU only (the CUDA "
                      "training path is not built yet); use device = \"cpu\" or \"auto\"");
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
        (rc = check_device(&lm->exp, err)) || (rc = bk_registry_init(&lm->reg, err))) {
        bk_lm_close(lm);
        return rc;
    }
    lm->reg.relative_to = lm->config_dir; /* a [[term]] plugin path is read from the file's directory */
    const bk_experiment *e = &lm->exp;
    if ((rc = bk_terms_create(&lm->terms, e, &lm->reg, err)) ||
        (rc = bk_bias_init(&lm->bias, &lm->terms, (int)e->model.layers, e->attention.learn_weights, err)) ||
        (rc = bk_gpt_init(&lm->gpt, (int)e->model.layers, (int)e->model.heads, (int)e->model.dim, (int)e->model.vocab,
                          &lm->bias, (uint64_t)e->train.seed, err))) {
        bk_lm_close(lm);
        return rc;
    }
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
    bk_terms_free(&lm->terms); /* instances go before the plugins' code is unloaded */
    bk_registry_free(&lm->reg);
    bk_experiment_free(&lm->exp);
    for (int i = 0; i < lm->n_overrides; i++)
        free(lm->overrides[i]);
    free(lm->overrides);
    free(lm->config_text);
    free(lm->config_source);
    free(lm->config_dir);
    memset(lm, 0, sizeof *lm);
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
        if ((rc = bk_adamw_add(opt, name, m->params + t->offset, m->grads + t->offset, t->count,
                               t->decay || decay_all, err)))
            return rc;
    }
    for (int t = 0; t < lm->terms.n; t++) {
        const bk_term *term = &lm->terms.terms[t];
        if (!term->n_params)
            continue;
        if (snprintf(name, sizeof name, "term.%s.theta", term->label) >= (int)sizeof name)
            return bk_fail(err, BK_ERR_INVALID, "term name '%s' is too long", term->label);
        if ((rc = bk_adamw_add(opt, name, term->theta, lm->bias.dtheta[t],
                               (size_t)term->n_copies * (size_t)term->n_params, decay_all, err)))
            return rc;
    }
    if (lm->exp.attention.learn_weights)
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            if (!lm->bias.n_on[s])
                continue;
            char stream[32];
            snprintf(name, sizeof name, "mix.%s", bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream));
            if ((rc = bk_adamw_add(opt, name, lm->bias.mix_params[s], lm->bias.mix_grads[s], (size_t)lm->bias.n_on[s],
                                   decay_all, err)))
                return rc;
        }
    return BK_OK;
}

void bk_lm_zero_grad(bk_lm *lm)
{
    bk_gpt_zero_grad(&lm->gpt);
    bk_bias_zero_grad(&lm->bias);
}

int bk_lm_after_update(bk_lm *lm, bk_error *err)
{
    int rc = bk_bias_project(&lm->bias, err);
    if (!rc && lm->exp.attention.learn_weights)
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
