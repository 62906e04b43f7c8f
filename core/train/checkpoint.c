#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint.h"

#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_KEY "biaskit"

/* The shape a group is stored with: model tensors keep theirs, a term's theta is (copies, n),
 * anything else is a vector. */
static void group_shape(const bk_lm *lm, const bk_param_group *g, bk_st_tensor *t)
{
    t->ndim = 1;
    t->shape[0] = (int64_t)g->n;
    if (strncmp(g->name, "model.", 6) == 0) {
        for (int i = 0; i < lm->gpt.n_tensors; i++)
            if (strcmp(lm->gpt.tensors[i].name, g->name + 6) == 0) {
                t->ndim = lm->gpt.tensors[i].ndim;
                memcpy(t->shape, lm->gpt.tensors[i].shape, sizeof lm->gpt.tensors[i].shape);
            }
        return;
    }
    for (int k = 0; k < lm->terms.n; k++)
        if (lm->terms.terms[k].theta == g->param) {
            t->ndim = 2;
            t->shape[0] = lm->terms.terms[k].n_copies;
            t->shape[1] = lm->terms.terms[k].n_params;
        }
}

int bk_checkpoint_save(const char *path, const bk_lm *lm, const bk_adamw *opt, const bk_train_state *st,
                       bk_error *err)
{
    int n = opt->n_groups * 3;
    bk_st_tensor *tensors = calloc((size_t)(n ? n : 1), sizeof *tensors);
    char (*names)[128] = calloc((size_t)(n ? n : 1), sizeof *names);
    cJSON *meta = cJSON_CreateObject();
    int rc = BK_OK;
    if (!tensors || !names || !meta) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    for (int i = 0; i < opt->n_groups; i++) {
        const bk_param_group *g = &opt->groups[i];
        const float *data[3] = {g->param, g->m, g->v};
        const char *prefix[3] = {"", "adam.m.", "adam.v."};
        for (int k = 0; k < 3; k++) {
            bk_st_tensor *t = &tensors[3 * i + k];
            snprintf(names[3 * i + k], sizeof names[0], "%s%s", prefix[k], g->name);
            t->name = names[3 * i + k];
            group_shape(lm, g, t);
            t->data = data[k];
        }
    }
    cJSON_AddNumberToObject(meta, "format", BK_CHECKPOINT_FORMAT);
    cJSON_AddNumberToObject(meta, "step", (double)st->step);
    cJSON_AddNumberToObject(meta, "adam_t", (double)opt->t);
    cJSON_AddNumberToObject(meta, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(meta, "data_epoch", (double)st->data_epoch);
    cJSON_AddNumberToObject(meta, "data_index", (double)st->data_index);
    if (isfinite(st->val_loss))
        cJSON_AddNumberToObject(meta, "val_loss", st->val_loss);
    cJSON_AddStringToObject(meta, "config_source", lm->exp.path);
    cJSON_AddStringToObject(meta, "config_dir", lm->config_dir);
    cJSON_AddStringToObject(meta, "config", lm->config_text);
    cJSON *overrides = cJSON_AddArrayToObject(meta, "overrides");
    for (int i = 0; overrides && i < lm->n_overrides; i++)
        cJSON_AddItemToArray(overrides, cJSON_CreateString(lm->overrides[i]));
    char *json = cJSON_PrintUnformatted(meta);
    if (!json) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    bk_st_meta entries[2] = {{"format", "pt"}, {META_KEY, json}};
    rc = bk_safetensors_write(path, tensors, n, entries, 2, err);
    free(json);
done:
    cJSON_Delete(meta);
    free(tensors);
    free(names);
    return rc;
}

static int number(const cJSON *meta, const char *key, const char *path, double *out, bk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    if (!cJSON_IsNumber(v))
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata has no number '%s'", path, key);
    *out = v->valuedouble;
    return BK_OK;
}

static int copy_tensor(const bk_safetensors *st, const char *path, const char *name, float *dst, size_t n,
                       bk_error *err)
{
    const bk_st_tensor *t = bk_safetensors_find(st, name);
    if (!t)
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint has no tensor '%s'", path, name);
    size_t count = 1;
    for (int d = 0; d < t->ndim; d++)
        count *= (size_t)t->shape[d];
    if (count != n)
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has %zu values, the model expects %zu", path, name, count, n);
    memcpy(dst, t->data, n * sizeof(float));
    return BK_OK;
}

int bk_checkpoint_load(const char *path, const char *const *extra_overrides, int n_extra, bk_lm *lm, bk_adamw *opt,
                       bk_train_state *state, bk_error *err)
{
    memset(lm, 0, sizeof *lm);
    bk_safetensors *st = NULL;
    int rc = bk_safetensors_open(path, &st, err);
    if (rc)
        return rc;
    cJSON *meta = NULL;
    const char *json = bk_safetensors_meta(st, META_KEY);
    if (!json || !(meta = cJSON_Parse(json))) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: not a biaskit checkpoint (no valid '%s' metadata)", path, META_KEY);
        goto done;
    }
    double format = 0, step = 0, adam_t = 0, tokens = 0, epoch = 0, index = 0;
    if ((rc = number(meta, "format", path, &format, err)) || (rc = number(meta, "step", path, &step, err)) ||
        (rc = number(meta, "adam_t", path, &adam_t, err)) || (rc = number(meta, "tokens", path, &tokens, err)) ||
        (rc = number(meta, "data_epoch", path, &epoch, err)) || (rc = number(meta, "data_index", path, &index, err)))
        goto done;
    if (format != BK_CHECKPOINT_FORMAT) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint format %g, this biaskit reads format %d", path, format,
                     BK_CHECKPOINT_FORMAT);
        goto done;
    }
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(meta, "config");
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(meta, "config_dir");
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(meta, "config_source");
    const cJSON *overrides = cJSON_GetObjectItemCaseSensitive(meta, "overrides");
    if (!cJSON_IsString(config) || !cJSON_IsString(dir) || !cJSON_IsString(source) || !cJSON_IsArray(overrides)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata lacks the experiment (config, config_dir, "
                     "config_source, overrides)", path);
        goto done;
    }
    int n_saved = cJSON_GetArraySize(overrides), n_all = n_saved + n_extra;
    const char **all = calloc((size_t)(n_all ? n_all : 1), sizeof *all);
    if (!all) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_saved; i++) {
        const cJSON *o = cJSON_GetArrayItem(overrides, i);
        all[i] = cJSON_IsString(o) ? o->valuestring : "";
    }
    for (int i = 0; i < n_extra; i++)
        all[n_saved + i] = extra_overrides[i];
    char name[4096];
    snprintf(name, sizeof name, "%s (experiment saved in %s)", source->valuestring, path);
    rc = bk_lm_open_text(lm, config->valuestring, name, dir->valuestring, all, n_all, err);
    free(all);
    if (rc)
        goto done;

    bk_adamw local = {0};
    bk_adamw *o = opt ? opt : &local;
    if (!(rc = bk_lm_register(lm, o, err))) {
        char key[160];
        for (int i = 0; i < o->n_groups && !rc; i++) {
            bk_param_group *g = &o->groups[i];
            rc = copy_tensor(st, path, g->name, g->param, g->n, err);
            if (!rc && opt) {
                snprintf(key, sizeof key, "adam.m.%s", g->name);
                rc = copy_tensor(st, path, key, g->m, g->n, err);
                snprintf(key, sizeof key, "adam.v.%s", g->name);
                if (!rc)
                    rc = copy_tensor(st, path, key, g->v, g->n, err);
            }
        }
        o->t = (int64_t)adam_t;
    }
    if (!opt)
        bk_adamw_free(&local);
    if (rc) {
        bk_lm_close(lm);
        goto done;
    }
    if (lm->exp.attention.learn_weights)
        bk_bias_sync_weights(&lm->bias);
    if (state) {
        state->step = (int64_t)step;
        state->tokens = (int64_t)tokens;
        state->data_epoch = (int64_t)epoch;
        state->data_index = (int64_t)index;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, "val_loss");
        state->val_loss = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    }
done:
    cJSON_Delete(meta);
    bk_safetensors_close(st);
    return rc;
}
