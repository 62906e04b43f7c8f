#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"

#include "bias/mix.h"
#include "io/safetensors.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SEAL_COVERS "experiment text, overrides, step, data cursor, plugin records and tensor checksums"
#define MAX_COUNT 9007199254740991.0 /* 2^53 - 1: the largest integer a JSON number holds exactly */

/* ----------------------------------------------------------------------------------------- save */

static int check_progress(const char *path, int counts, const bk_train_state *s, const bk_experiment *e,
                          bk_error *err);

/* A count written as a plain integer: cJSON prints a double with 15 significant digits when that reads
 * back within its tolerance, which rounds counts past 10^15 (9007199254740991 becomes ...990). */
static void add_count(cJSON *meta, const char *key, int64_t v)
{
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, v);
    cJSON_AddRawToObject(meta, key, text);
}

int bk_checkpoint_save(const char *path, const bk_lm *lm, const bk_adamw *opt, const bk_train_state *st,
                       bk_error *err)
{
    bk_ckpt_slot *slots = NULL;
    int n_slots = 0;
    int rc = bk_ckpt_build_slots(lm, opt, &slots, &n_slots, err);
    if (rc)
        return rc;
    int n = 3 * n_slots;
    bk_st_tensor *tensors = calloc((size_t)(n ? n : 1), sizeof *tensors);
    char (*names)[200] = calloc((size_t)(n ? n : 1), sizeof *names);
    float **gathered = calloc((size_t)(n ? n : 1), sizeof *gathered);
    cJSON *meta = cJSON_CreateObject();
    cJSON *sums = meta ? cJSON_AddObjectToObject(meta, "tensors") : NULL;
    char *json = NULL;
    if (!tensors || !names || !gathered || !sums) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    /* parameters first, then the first moments, then the second: the weights lead the file */
    for (int which = 0; which < 3; which++)
        for (int i = 0; i < n_slots; i++) {
            const bk_ckpt_slot *s = &slots[i];
            int k = which * n_slots + i;
            bk_st_tensor *t = &tensors[k];
            const float *base = bk_ckpt_group_array(&opt->groups[s->group], which);
            snprintf(names[k], sizeof names[0], "%s%s", bk_ckpt_array_prefix[which], s->name);
            t->name = names[k];
            t->ndim = s->ndim;
            memcpy(t->shape, s->shape, sizeof t->shape);
            size_t count = (size_t)(s->copies * s->count);
            if (s->copies == 1) {
                t->data = base + s->offset;
            } else { /* a per-layer named tensor: its rows of every copy, gathered */
                if (!(gathered[k] = malloc(count * sizeof(float)))) {
                    rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
                    goto done;
                }
                for (int64_t c = 0; c < s->copies; c++)
                    memcpy(gathered[k] + c * s->count, base + c * s->stride + s->offset,
                           (size_t)s->count * sizeof(float));
                t->data = gathered[k];
            }
            char sum[17];
            bk_ckpt_hex64(bk_xxh64(t->data, count * sizeof(float), 0), sum);
            if (!cJSON_AddStringToObject(sums, t->name, sum)) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
                goto done;
            }
        }
    cJSON *plugins = bk_ckpt_plugin_records(lm);
    if (!plugins || !cJSON_AddItemToObject(meta, "plugins", plugins)) {
        cJSON_Delete(plugins);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    int nomem = 0;
    cJSON *param_groups = bk_ckpt_group_records(lm, &nomem);
    if (nomem || (param_groups && !cJSON_AddItemToObject(meta, "param_groups", param_groups))) {
        cJSON_Delete(param_groups);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    cJSON_AddNumberToObject(meta, "format", BK_CHECKPOINT_FORMAT);
    add_count(meta, "step", st->step);
    add_count(meta, "adam_t", opt->t);
    add_count(meta, "tokens", st->tokens);
    add_count(meta, "data_epoch", st->data_epoch);
    add_count(meta, "data_index", st->data_index);
    if (isfinite(st->val_loss))
        cJSON_AddNumberToObject(meta, "val_loss", st->val_loss);
    cJSON_AddStringToObject(meta, "config_source", lm->config_source ? lm->config_source : lm->exp.path);
    cJSON_AddStringToObject(meta, "config_dir", lm->config_dir);
    cJSON_AddStringToObject(meta, "config", lm->config_text);
    cJSON_AddStringToObject(meta, "checksum", BK_CKPT_CHECKSUM_NAME);
    /* counts that a run of this experiment cannot reach are kept as they are, marked unchecked: a format 2
     * checkpoint whose batch, length or accumulation changed on a resume (allowed then) goes on */
    bk_error unreachable;
    if (check_progress(path, 1, st, &lm->exp, &unreachable) != BK_OK)
        cJSON_AddFalseToObject(meta, "counts_checked");
    cJSON *parent = lm->init_record ? cJSON_Parse(lm->init_record) : NULL;
    if (lm->init_record && (!parent || !cJSON_AddItemToObject(meta, BK_CKPT_INIT_KEY, parent))) {
        cJSON_Delete(parent);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    if (lm->tokenizer_json) {
        char sum[17];
        bk_ckpt_hex64(bk_xxh64(lm->tokenizer_json, strlen(lm->tokenizer_json), 0), sum);
        if (!cJSON_AddStringToObject(meta, BK_CKPT_TOKENIZER_KEY "_xxh64", sum)) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
            goto done;
        }
    }
    cJSON *overrides = cJSON_AddArrayToObject(meta, "overrides");
    for (int i = 0; overrides && i < lm->n_overrides; i++)
        cJSON_AddItemToArray(overrides, cJSON_CreateString(lm->overrides[i]));
    if (!overrides || !(json = cJSON_PrintUnformatted(meta))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    char seal[17];
    bk_checkpoint_seal(json, seal);
    bk_st_meta entries[4] = {{"format", "pt"}, {BK_CKPT_META_KEY, json}, {BK_CKPT_SEAL_KEY, seal},
                             {BK_CKPT_TOKENIZER_KEY, lm->tokenizer_json}};
    rc = bk_safetensors_write(path, tensors, n, entries, lm->tokenizer_json ? 4 : 3, err);
done:
    free(json);
    cJSON_Delete(meta);
    for (int k = 0; gathered && k < n; k++)
        free(gathered[k]);
    free(gathered);
    free(tensors);
    free(names);
    free(slots);
    return rc;
}

/* ----------------------------------------------------------------------------------------- load */

/* A metadata count: a JSON number that is an integer in [0, max]. */
static int count_field(const cJSON *meta, const char *key, double max, const char *path, int64_t *out,
                       bk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    if (!cJSON_IsNumber(v))
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata has no number '%s'", path, key);
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0.0 || d > max || floor(d) != d)
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata '%s' is %.17g; expected an integer in [0, %.17g]",
                       path, key, d, max);
    *out = (int64_t)d;
    return BK_OK;
}

/* ------------------------------------------------------------------------------------ metadata */

/* The format: BK_CHECKPOINT_FORMAT_OLDEST .. BK_CHECKPOINT_FORMAT; format 3's seal verified; format 2
 * a warning, or with strict an error. */
static int check_format(const char *path, const cJSON *meta, const char *json, const char *seal,
                        const bk_checkpoint_options *o, int *format, bk_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, "format");
    if (!cJSON_IsNumber(v))
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata has no number 'format'", path);
    double f = v->valuedouble;
    if (!(f >= BK_CHECKPOINT_FORMAT_OLDEST && f <= BK_CHECKPOINT_FORMAT && floor(f) == f))
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: checkpoint format %.17g; this biaskit reads formats %d and %d (format 3 adds the checksum "
                       "of the metadata, format 2 named plugin tensors, per-tensor checksums and plugin records): "
                       "evaluate it with the biaskit that wrote it, or train again",
                       path, f, BK_CHECKPOINT_FORMAT_OLDEST, BK_CHECKPOINT_FORMAT);
    *format = (int)f;
    if (*format >= 3) {
        if (!seal)
            return bk_fail(err, BK_ERR_PARSE,
                           "%s: checkpoint format %d without its metadata checksum '%s' (over the %s): it was edited "
                           "or damaged after it was written; refused",
                           path, *format, BK_CKPT_SEAL_KEY, SEAL_COVERS);
        char got[17];
        bk_checkpoint_seal(json, got);
        if (strcmp(got, seal) != 0)
            return bk_fail(err, BK_ERR_PARSE,
                           "%s: the checkpoint's metadata does not match its checksum: %s %.16s%s recorded, %s "
                           "computed over the metadata (%s): it was edited or damaged after it was written; refused "
                           "(train again, or resume from an earlier checkpoint)",
                           path, BK_CKPT_SEAL_KEY, seal, strlen(seal) > 16 ? "..." : "", got, SEAL_COVERS);
        return BK_OK;
    }
    char line[BK_ERROR_MESSAGE_MAX];
    snprintf(line, sizeof line,
             "checkpoint '%s' is format %d, written before checkpoints carried a checksum of their metadata (this "
             "biaskit writes format %d): its experiment, step and plugin records cannot be verified",
             path, *format, BK_CHECKPOINT_FORMAT);
    char hint[96];
    snprintf(hint, sizeof hint, "--strict refuses it; a resumed run writes format %d", BK_CHECKPOINT_FORMAT);
    return bk_ckpt_warn_unless_strict(o, BK_ERR_PARSE, line, hint, err);
}

/* a * b into *out, or 0 when it does not fit in [0, 2^53) (both non-negative). */
static int count_product(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || (b > 0 && a > (int64_t)MAX_COUNT / b))
        return 0;
    *out = a * b;
    return 1;
}

/* The step and the data cursor against the stored experiment (checkpoint.h): a training never goes past
 * its steps; each step reads batch x accumulate windows of length tokens, so that tokens and where the
 * loader stands (data/data.h: after W windows, epoch * windows per epoch + index = W, 1 <= index <=
 * windows per epoch) follow from the step. With `counts` 0, the step only: format 2 checkpoints (runs
 * then could change batch or length on a resume) and those a save marked counts_checked = false. */
static int check_progress(const char *path, int counts, const bk_train_state *s, const bk_experiment *e,
                          bk_error *err)
{
    if (s->step > e->train.steps)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: checkpoint metadata 'step' is %" PRId64 ", but its experiment trains [train] steps = %" PRId64
                       ": a training never goes past its steps",
                       path, s->step, e->train.steps);
    if (!counts)
        return BK_OK;
    const int64_t per_step = e->train.batch * e->train.accumulate;
    int64_t windows = 0, tokens = 0;
    if (!count_product(s->step, per_step, &windows) || !count_product(windows, e->train.length, &tokens) ||
        s->tokens != tokens)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: checkpoint metadata 'tokens' is %" PRId64 "; %" PRId64 " steps of %" PRId64 " x %" PRId64
                       " tokens x %" PRId64 " accumulated make %" PRId64,
                       path, s->tokens, s->step, e->train.batch, e->train.length, e->train.accumulate, tokens);
    const int64_t epoch = s->data_epoch, index = s->data_index;
    int ok = windows == 0 ? epoch == 0 && index == 0
                          : index >= 1 && index <= windows &&
                                (epoch == 0 ? index == windows
                                            : (windows - index) % epoch == 0 && (windows - index) / epoch >= index);
    if (!ok)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: checkpoint metadata 'data_epoch' %" PRId64 ", 'data_index' %" PRId64 ": not where %" PRId64
                       " steps of %" PRId64 " x %" PRId64 " windows leave the data (%" PRId64
                       " windows read: epoch x windows per epoch + index, with 1 <= index <= windows per epoch)",
                       path, epoch, index, s->step, e->train.batch, e->train.accumulate, windows);
    return BK_OK;
}

/* What --set `set` changed (`c`, from experiment `before` to `after`) may do to a checkpoint's model
 * (checkpoint.h, by the key's role). */
const char *bk_checkpoint_eval_refusal(const bk_experiment_change *c)
{
    switch (c->role) {
    case BK_KEY_RUN:
    case BK_KEY_OPTION: return NULL;
    case BK_KEY_MODEL:
        return "it would change the model's shape or function ([model], [attention], the terms and their plugin, "
               "name, stream, weight and per_layer): the weights were trained for the model as it is";
    case BK_KEY_FACT:
        return strcmp(c->key, "train.length") == 0
                   ? "it is a fact of how its model was trained ([train] length, batch, accumulate and seed); "
                     "eval --lengths evaluates at other lengths"
                   : "it is a fact of how its model was trained ([train] length, batch, accumulate and seed)";
    case BK_KEY_SCHEDULE:
        return "eval, bias and erf do not train: a [train] key (or a term's lr_scale, weight_decay) of a "
               "checkpoint changes only with train --resume";
    }
    return NULL;
}

static int judge_change(const char *path, const char *set, const bk_experiment_change *c, const bk_experiment *after,
                        int64_t step, const bk_checkpoint_options *o, int resume, bk_error *err)
{
    switch (c->role) {
    case BK_KEY_RUN:
        return BK_OK;
    case BK_KEY_MODEL:
        return bk_fail(err, BK_ERR_CONFIG, "--set %s: %s is %s in checkpoint '%s'; %s; train a new model for another",
                       set, c->where, c->before, path, bk_checkpoint_eval_refusal(c));
    case BK_KEY_FACT: /* they also place a resumed run's data cursor */
        return bk_fail(err, BK_ERR_CONFIG, "--set %s: %s is %s in checkpoint '%s'; %s, so it cannot change on a checkpoint",
                       set, c->where, c->before, path, bk_checkpoint_eval_refusal(c));
    case BK_KEY_SCHEDULE:
        if (!resume)
            return bk_fail(err, BK_ERR_CONFIG, "--set %s: %s is %s in checkpoint '%s'; %s", set, c->where, c->before,
                           path, bk_checkpoint_eval_refusal(c));
        if (strcmp(c->key, "train.steps") == 0 && after->train.steps < step)
            return bk_fail(err, BK_ERR_CONFIG,
                           "--set %s: checkpoint '%s' is at step %" PRId64 "; [train] steps must be at least that to "
                           "continue it",
                           set, path, step);
        return BK_OK;
    case BK_KEY_OPTION: {
        char line[BK_ERROR_MESSAGE_MAX];
        snprintf(line, sizeof line,
                 "checkpoint '%s': --set %s changes %s (%s in the checkpoint, now %s): a plugin's option may change "
                 "what the model computes",
                 path, set, c->where, c->before, c->after);
        return bk_ckpt_warn_unless_strict(o, BK_ERR_CONFIG, line, "--strict refuses", err);
    }
    }
    return BK_OK;
}

#define MAX_CHANGES 64 /* keys one --set may change (a whole [[term]] table given at once) */

void bk_checkpoint_meta_free(bk_checkpoint_meta *m)
{
    if (!m)
        return;
    bk_experiment_free(&m->exp);
    free(m->overrides);
    cJSON_Delete(m->json);
    memset(m, 0, sizeof *m);
}

int bk_checkpoint_meta_read(const char *path, const char *json, const char *seal, const bk_checkpoint_options *o,
                            int resume, bk_checkpoint_meta *m, bk_error *err)
{
    memset(m, 0, sizeof *m);
    cJSON *meta = json ? cJSON_Parse(json) : NULL;
    if (!meta || !cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        return bk_fail(err, BK_ERR_PARSE, "%s: not a biaskit checkpoint (no valid '%s' metadata)", path, BK_CKPT_META_KEY);
    }
    m->json = meta;
    bk_train_state *s = &m->state;
    int rc;
    if ((rc = check_format(path, meta, json, seal, o, &m->format, err)) ||
        (rc = count_field(meta, "step", MAX_COUNT, path, &s->step, err)) ||
        (rc = count_field(meta, "adam_t", MAX_COUNT, path, &m->adam_t, err)) ||
        (rc = count_field(meta, "tokens", MAX_COUNT, path, &s->tokens, err)) ||
        (rc = count_field(meta, "data_epoch", MAX_COUNT, path, &s->data_epoch, err)) ||
        (rc = count_field(meta, "data_index", MAX_COUNT, path, &s->data_index, err)))
        goto fail;
    if (m->adam_t != s->step) { /* the optimizer takes exactly one step per training step */
        rc = bk_fail(err, BK_ERR_PARSE,
                     "%s: checkpoint metadata 'adam_t' is %" PRId64 ", expected the step count %" PRId64, path,
                     m->adam_t, s->step);
        goto fail;
    }
    const cJSON *val_loss = cJSON_GetObjectItemCaseSensitive(meta, "val_loss");
    if (val_loss && (!cJSON_IsNumber(val_loss) || !isfinite(val_loss->valuedouble) || val_loss->valuedouble < 0.0)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'val_loss' must be a finite non-negative number",
                     path);
        goto fail;
    }
    s->val_loss = val_loss ? val_loss->valuedouble : NAN;
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(meta, "counts_checked");
    if (counts && !cJSON_IsBool(counts)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'counts_checked' must be true or false", path);
        goto fail;
    }
    m->counts_checked = m->format >= 3 && !cJSON_IsFalse(counts);
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(meta, "config");
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(meta, "config_dir");
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(meta, "config_source");
    const cJSON *overrides = cJSON_GetObjectItemCaseSensitive(meta, "overrides");
    if (!cJSON_IsString(config) || !cJSON_IsString(dir) || !cJSON_IsString(source) || !cJSON_IsArray(overrides)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata lacks the experiment (config, config_dir, "
                     "config_source, overrides)", path);
        goto fail;
    }
    m->config = config->valuestring;
    m->config_dir = dir->valuestring;
    m->config_source = source->valuestring;
    int n_extra = o && o->overrides ? o->n_overrides : 0;
    m->n_saved = cJSON_GetArraySize(overrides);
    m->n_overrides = m->n_saved + n_extra;
    if (!(m->overrides = calloc((size_t)(m->n_overrides ? m->n_overrides : 1), sizeof *m->overrides))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
        goto fail;
    }
    for (int i = 0; i < m->n_saved; i++) {
        const cJSON *v = cJSON_GetArrayItem(overrides, i);
        if (!cJSON_IsString(v)) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'overrides' entry %d is not a string", path, i);
            goto fail;
        }
        m->overrides[i] = v->valuestring;
    }
    for (int i = 0; i < n_extra; i++)
        m->overrides[m->n_saved + i] = o->overrides[i];

    /* the stored experiment, then each --set on top of it, judged by what it changes */
    char name[4096]; /* names the stored experiment in messages only */
    snprintf(name, sizeof name, "%s (experiment saved in %s)", m->config_source, path);
    if ((rc = bk_experiment_parse(m->config, name, m->overrides, (size_t)m->n_saved, &m->exp, err)) ||
        (rc = check_progress(path, m->counts_checked, s, &m->exp, err)))
        goto fail;
    for (int i = 0; i < n_extra; i++) {
        bk_experiment next;
        if ((rc = bk_experiment_parse(m->config, name, m->overrides, (size_t)(m->n_saved + i + 1), &next, err)))
            goto fail;
        bk_experiment_change changes[MAX_CHANGES];
        int n = bk_experiment_diff(&m->exp, &next, changes, MAX_CHANGES);
        if (n > MAX_CHANGES) /* none may go unjudged */
            rc = bk_fail(err, BK_ERR_CONFIG,
                         "--set %s: it changes %d keys of checkpoint '%s' at once, more than the %d this biaskit "
                         "judges one by one; give them as separate --set",
                         o->overrides[i], n, path, MAX_CHANGES);
        for (int c = 0; c < n && c < MAX_CHANGES && !rc; c++)
            rc = judge_change(path, o->overrides[i], &changes[c], &next, s->step, o, resume, err);
        bk_experiment_free(&m->exp);
        m->exp = next;
        if (rc)
            goto fail;
    }
    return BK_OK;
fail:
    bk_checkpoint_meta_free(m);
    return rc;
}

/* ----------------------------------------------------------------------------------------- load */

int bk_ckpt_stored_tokenizer(const char *path, const bk_safetensors *st, const cJSON *meta, bk_bpe **out,
                             bk_error *err)
{
    *out = NULL;
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(meta, BK_CKPT_TOKENIZER_KEY "_xxh64");
    const char *text = bk_safetensors_meta(st, BK_CKPT_TOKENIZER_KEY);
    if (!want && !text)
        return BK_OK;
    if (!cJSON_IsString(want) || !text)
        return bk_fail(err, BK_ERR_PARSE, "%s: the checkpoint's tokenizer is %s", path,
                       text ? "not recorded in its metadata ('" BK_CKPT_TOKENIZER_KEY "_xxh64')"
                            : "missing (its metadata records one)");
    char got[17];
    bk_ckpt_hex64(bk_xxh64(text, strlen(text), 0), got);
    if (strcmp(got, want->valuestring) != 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: the tokenizer is corrupt: its text's xxh64 is %s, the checkpoint "
                       "recorded %s", path, got, want->valuestring);
    char name[4200];
    snprintf(name, sizeof name, "%s (its tokenizer)", path);
    return bk_bpe_from_hf_json(text, strlen(text), name, out, err);
}

int bk_checkpoint_read_tokenizer(const char *path, bk_bpe **out, bk_error *err)
{
    *out = NULL;
    bk_safetensors *st = NULL;
    int rc = bk_safetensors_open_header(path, &st, err);
    if (rc)
        return rc;
    bk_checkpoint_meta meta;
    const bk_checkpoint_options plain = {0};
    if (!(rc = bk_checkpoint_meta_read(path, bk_safetensors_meta(st, BK_CKPT_META_KEY),
                                       bk_safetensors_meta(st, BK_CKPT_SEAL_KEY), &plain, 0, &meta, err))) {
        rc = bk_ckpt_stored_tokenizer(path, st, meta.json, out, err);
        if (!rc && !*out)
            rc = bk_fail(err, BK_ERR_CONFIG, "%s: the checkpoint stores no tokenizer (its model reads bytes, or it "
                         "was imported without one)", path);
        bk_checkpoint_meta_free(&meta);
    }
    bk_safetensors_close(st);
    return rc;
}

int bk_checkpoint_load_ex(const char *path, const bk_checkpoint_options *o, bk_lm *lm, bk_adamw *opt,
                          bk_train_state *state, bk_error *err)
{
    memset(lm, 0, sizeof *lm);
    bk_safetensors *st = NULL;
    int rc = bk_safetensors_open(path, &st, err);
    if (rc)
        return rc;
    bk_checkpoint_meta meta;
    bk_ckpt_slot *slots = NULL;
    int n_slots = 0, lm_open = 0;
    bk_adamw local = {0};
    if ((rc = bk_checkpoint_meta_read(path, bk_safetensors_meta(st, BK_CKPT_META_KEY),
                                      bk_safetensors_meta(st, BK_CKPT_SEAL_KEY), o, opt != NULL, &meta, err))) {
        bk_safetensors_close(st);
        return rc;
    }
    if ((rc = bk_ckpt_verify_checksums(path, st, meta.json, !(o && o->no_verify), err)))
        goto done;
    char name[4096]; /* names the stored experiment in messages only: the checkpoint keeps the plain source */
    snprintf(name, sizeof name, "%s (experiment saved in %s)", meta.config_source, path);
    if ((rc = bk_lm_open_text(lm, meta.config, name, meta.config_dir, meta.overrides, meta.n_overrides, err)))
        goto done;
    lm_open = 1;
    char *plain = strdup(meta.config_source);
    if (!plain) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
        goto done;
    }
    free(lm->config_source);
    lm->config_source = plain;
    if ((rc = bk_ckpt_compare_plugins(path, cJSON_GetObjectItemCaseSensitive(meta.json, "plugins"), lm, o, err)) ||
        (opt && (rc = bk_ckpt_compare_groups(path, cJSON_GetObjectItemCaseSensitive(meta.json, "param_groups"), lm, o, err))))
        goto done;

    bk_adamw *use = opt ? opt : &local;
    if ((rc = bk_lm_register(lm, use, err)) || (rc = bk_ckpt_build_slots(lm, use, &slots, &n_slots, err)))
        goto done;
    for (int i = 0; i < n_slots && !rc; i++)
        for (int which = 0; which < (opt ? 3 : 1) && !rc; which++)
            rc = bk_ckpt_read_slot(st, path, &slots[i], which, use, err);
    for (int i = 0; i < bk_safetensors_count(st) && !rc; i++) {
        const char *t = bk_safetensors_at(st, i)->name;
        if (!bk_ckpt_known_tensor(t, slots, n_slots))
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' is not part of the model the stored experiment builds",
                         path, t);
    }
    if (rc)
        goto done;
    bk_bpe *tokenizer = NULL;
    if ((rc = bk_ckpt_stored_tokenizer(path, st, meta.json, &tokenizer, err)) ||
        (tokenizer && (rc = bk_lm_set_tokenizer(lm, tokenizer, err))))
        goto done;
    const cJSON *parent = cJSON_GetObjectItemCaseSensitive(meta.json, BK_CKPT_INIT_KEY);
    if (cJSON_IsObject(parent) && !(lm->init_record = cJSON_PrintUnformatted(parent))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
        goto done;
    }
    use->t = meta.adam_t;
    /* what was read went into the host copies: the working copies in the backend's memory follow */
    if ((rc = opt ? bk_adamw_to_device(opt, err) : bk_gpt_to_device(&lm->gpt, err)))
        goto done;
    if (lm->bias.learn_weights)
        bk_bias_sync_weights(&lm->bias);
    if (state)
        *state = meta.state;
done:
    bk_adamw_free(&local);
    if (rc && lm_open)
        bk_lm_close(lm);
    free(slots);
    bk_checkpoint_meta_free(&meta);
    bk_safetensors_close(st);
    return rc;
}

int bk_checkpoint_load(const char *path, const char *const *extra_overrides, int n_extra, bk_lm *lm, bk_adamw *opt,
                       bk_train_state *st, bk_error *err)
{
    bk_checkpoint_options o = {extra_overrides, n_extra, 0, NULL, NULL, 0};
    return bk_checkpoint_load_ex(path, &o, lm, opt, st, err);
}
