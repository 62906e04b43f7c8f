/* A training started from another checkpoint's weights, and the tensors that train (train/init.h). */
#define _GNU_SOURCE /* fnmatch */
#include "train/init.h"

#include "train/checkpoint_internal.h"
#include "util/name.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends ", name" (or "name") to list[size], ending in "..." once full. */
static void list_add(char *list, size_t size, const char *name)
{
    size_t used = strlen(list);
    if (used + 4 >= size)
        return;
    int k = snprintf(list + used, size - used, "%s%s", used ? ", " : "", name);
    if (k < 0 || used + (size_t)k >= size)
        snprintf(list + size - 4, 4, "...");
}

/* The term of lm whose tensors slot `name` is ("term.<label>."), or NULL. */
static const bk_term *term_of(const bk_lm *lm, const char *name)
{
    if (strncmp(name, "term.", 5) != 0)
        return NULL;
    for (int k = 0; k < lm->terms.n; k++) {
        size_t len = strlen(lm->terms.terms[k].label);
        if (strncmp(name + 5, lm->terms.terms[k].label, len) == 0 && name[5 + len] == '.')
            return &lm->terms.terms[k];
    }
    return NULL;
}

/* The plugin the checkpoint's term `label` was made by (its "plugins" records), or NULL. */
static const char *stored_plugin(const cJSON *meta, const char *label)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(meta, "plugins"))
    {
        const cJSON *term = cJSON_GetObjectItemCaseSensitive(r, "term");
        const cJSON *plugin = cJSON_GetObjectItemCaseSensitive(r, "plugin");
        if (cJSON_IsString(term) && cJSON_IsString(plugin) && strcmp(term->valuestring, label) == 0)
            return plugin->valuestring;
    }
    return NULL;
}

static int same_shape(const bk_st_tensor *t, const bk_ckpt_slot *s)
{
    int same = t->ndim == s->ndim;
    for (int d = 0; same && d < s->ndim; d++)
        same = t->shape[d] == s->shape[d];
    return same;
}

static int record_parent(const char *path, const bk_checkpoint_meta *meta, const char *seal, bk_lm *lm,
                         bk_error *err)
{
    cJSON *r = cJSON_CreateObject();
    if (!r || !cJSON_AddStringToObject(r, "checkpoint", path) || !cJSON_AddStringToObject(r, "seal", seal) ||
        !cJSON_AddNumberToObject(r, "step", (double)meta->state.step) ||
        !cJSON_AddStringToObject(r, "config_source", meta->config_source) ||
        !(lm->init_record = cJSON_PrintUnformatted(r))) {
        cJSON_Delete(r);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory recording --init checkpoint '%s'", path);
    }
    cJSON_Delete(r);
    return BK_OK;
}

int bk_init_from(const char *path, bk_lm *lm, bk_adamw *opt, bk_init_report *rep, bk_error *err)
{
    memset(rep, 0, sizeof *rep);
    bk_safetensors *st = NULL;
    int rc = bk_safetensors_open(path, &st, err);
    if (rc)
        return bk_error_prefix(err, "--init: ");
    bk_checkpoint_meta meta = {0};
    bk_ckpt_slot *slots = NULL;
    int n_slots = 0;
    unsigned char *taken = calloc((size_t)bk_safetensors_count(st) + 1, 1);
    const char *seal = bk_safetensors_meta(st, BK_CKPT_SEAL_KEY);
    if (!taken) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading --init checkpoint '%s'", path);
        goto done;
    }
    /* the stored experiment is checked as for evaluation (format, seal, counts), then every tensor's data */
    const bk_checkpoint_options plain = {0};
    if ((rc = bk_checkpoint_meta_read(path, bk_safetensors_meta(st, BK_CKPT_META_KEY), seal, &plain, 0, &meta, err)) ||
        (rc = bk_ckpt_verify_checksums(path, st, meta.json, 1, err)) ||
        (rc = bk_ckpt_build_slots(lm, opt, &slots, &n_slots, err))) {
        bk_error_prefix(err, "--init: ");
        goto done;
    }
    bk_bpe *tokenizer = NULL; /* the weights' tokenizer comes with them */
    if ((rc = bk_ckpt_stored_tokenizer(path, st, meta.json, &tokenizer, err)) ||
        (tokenizer && (rc = bk_lm_set_tokenizer(lm, tokenizer, err)))) {
        bk_error_prefix(err, "--init: ");
        goto done;
    }
    bk_copy_text(rep->seal, sizeof rep->seal, seal ? seal : "");
    rep->step = meta.state.step;
    for (int i = 0; i < n_slots && !rc; i++) {
        const bk_ckpt_slot *s = &slots[i];
        const bk_st_tensor *t = bk_safetensors_find(st, s->name);
        const bk_term *term = term_of(lm, s->name);
        const char *was = term ? stored_plugin(meta.json, term->label) : NULL;
        const int is_model = strncmp(s->name, "model.", 6) == 0;
        int carry = t != NULL;
        if (term && (!was || strcmp(was, term->plugin->desc->name) != 0))
            carry = 0; /* a new term, or one another plugin makes now: its own initialisation */
        if (!t && is_model) {
            rc = bk_fail(err, BK_ERR_CONFIG,
                         "--init %s: the checkpoint has no tensor '%s', which the new model needs (every model "
                         "tensor starts from the checkpoint: [model] must describe the model it holds)",
                         path, s->name);
            break;
        }
        if (carry && !same_shape(t, s)) {
            if (!is_model && !term) { /* a mixing weight of another shape: initialised afresh */
                carry = 0;
            } else {
                char have[160], want[160];
                bk_st_format_shape(have, sizeof have, t->shape, t->ndim);
                bk_st_format_shape(want, sizeof want, s->shape, s->ndim);
                rc = bk_fail(err, BK_ERR_CONFIG,
                             "--init %s: tensor '%s' has shape %s there, the new model's is %s (a model of "
                             "another shape cannot start from it)",
                             path, s->name, have, want);
                break;
            }
        }
        if (!carry) {
            rep->fresh++;
            list_add(rep->fresh_names, sizeof rep->fresh_names, s->name);
            continue;
        }
        if ((rc = bk_ckpt_read_slot(st, path, s, 0, opt, err)))
            break;
        rep->carried++;
        for (int k = 0; k < bk_safetensors_count(st); k++)
            if (bk_safetensors_at(st, k) == t)
                taken[k] = 1;
    }
    for (int k = 0; k < bk_safetensors_count(st) && !rc; k++) {
        const char *name = bk_safetensors_at(st, k)->name;
        if (!taken[k] && strncmp(name, "adam.", 5) != 0) {
            rep->dropped++;
            list_add(rep->dropped_names, sizeof rep->dropped_names, name);
        }
    }
    /* the host copies were written: the working copies on the backend follow (moments: zero) */
    if (!rc && !(rc = bk_adamw_to_device(opt, err)) && !(rc = record_parent(path, &meta, rep->seal, lm, err)) &&
        lm->bias.learn_weights)
        bk_bias_sync_weights(&lm->bias);
done:
    free(taken);
    free(slots);
    bk_checkpoint_meta_free(&meta);
    bk_safetensors_close(st);
    return rc;
}

/* The lowest layer a group that trains needs the backward to reach: a term acting in some layers only
 * ([[term]] layers) the lowest of them; anything else (a model tensor, a term of every layer or of the
 * embedding, mixing weights) layer 0. */
static int lowest_layer_of(const bk_lm *lm, const char *group)
{
    const bk_term *t = term_of(lm, group);
    if (!t || !t->layers_on)
        return 0;
    for (int l = 0; l < lm->gpt.L; l++)
        if (t->layers_on[l])
            return l;
    return 0;
}

/* The model's tensors of frozen groups skip their weight gradients (bk_gpt.frozen), and the backward
 * stops at the lowest layer where something trains (bk_gpt.backward_from). */
static void freeze_model_tensors(bk_lm *lm, const bk_adamw *opt)
{
    bk_gpt *m = &lm->gpt;
    char name[96];
    for (int i = 0; i < m->n_tensors; i++) {
        snprintf(name, sizeof name, "model.%s", m->tensors[i].name);
        m->frozen[i] = 0;
        for (int g = 0; g < opt->n_groups; g++)
            if (!strcmp(opt->groups[g].name, name))
                m->frozen[i] = (unsigned char)opt->groups[g].frozen;
    }
    int from = m->L;
    for (int g = 0; g < opt->n_groups; g++)
        if (!opt->groups[g].frozen) {
            const int l = lowest_layer_of(lm, opt->groups[g].name);
            from = l < from ? l : from;
        }
    m->backward_from = from < m->L ? from : 0;
}

int bk_init_trainable(bk_lm *lm, bk_adamw *opt, size_t *n_trainable, bk_error *err)
{
    const bk_string_list *pat = &lm->exp.train.trainable;
    *n_trainable = 0;
    bk_ckpt_slot *slots = NULL;
    int n_slots = 0;
    int rc = bk_ckpt_build_slots(lm, opt, &slots, &n_slots, err);
    if (rc)
        return rc;
    int *hits = calloc((size_t)pat->n + 1, sizeof *hits);
    if (!hits) {
        free(slots);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for [train] trainable");
    }
    for (int g = 0; g < opt->n_groups && !rc; g++) {
        int named = 0, matched = 0;
        const char *in = NULL, *out = NULL;
        for (int i = 0; i < n_slots; i++) {
            if (slots[i].group != g)
                continue;
            named++;
            int any = pat->n == 0;
            for (int p = 0; p < pat->n; p++)
                if (fnmatch(pat->items[p], slots[i].name, 0) == 0)
                    any = 1, hits[p]++;
            matched += any;
            *(any ? &in : &out) = slots[i].name;
        }
        if (matched && matched < named)
            rc = bk_fail(err, BK_ERR_CONFIG,
                         "%s: [train] trainable selects '%s' but not '%s': the tensors of one term train together "
                         "(name them all, e.g. with a pattern ending in '*')",
                         lm->exp.path, in, out);
        opt->groups[g].frozen = !matched;
        if (matched)
            *n_trainable += opt->groups[g].n;
    }
    for (int p = 0; p < pat->n && !rc; p++)
        if (!hits[p]) {
            char names[1024] = "";
            for (int i = 0; i < n_slots; i++)
                list_add(names, sizeof names, slots[i].name);
            rc = bk_fail(err, BK_ERR_CONFIG, "%s: [train] trainable pattern '%s' matches no tensor of the model (%s)",
                         lm->exp.path, pat->items[p], names);
        }
    free(hits);
    free(slots);
    if (!rc)
        freeze_model_tensors(lm, opt);
    return rc;
}
