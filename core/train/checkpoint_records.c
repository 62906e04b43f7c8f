/* The records of a checkpoint's plugins and optimizer groups (train/checkpoint_internal.h): written on
 * save, compared with the loaded terms on load. */
#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint_internal.h"

#include "util/file.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------------- plugin records */

/* A growing text buffer for the descriptor's canonical form. */
typedef struct text_buf {
    char *p;
    size_t len, cap;
    int failed;
} text_buf;

static void tb_printf(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(text_buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && b->len + (size_t)k < b->cap) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *bigger = realloc(b->p, cap);
        if (!bigger) {
            b->failed = 1;
            return;
        }
        b->p = bigger;
        b->cap = cap;
    }
}

/* XXH64 of the descriptor's declarations that change what a term computes or accepts: the ABI
 * version, name, capabilities, flags, and each option's name, type, default and choices, one line each
 * in a fixed text form. The version is compared on its own; summaries and doc strings are not math.
 * 0 when out of memory. */
static uint64_t descriptor_checksum(const biaskit_plugin *d)
{
    text_buf b = {0};
    tb_printf(&b, "abi %u\nname %s\ncapabilities %u\nflags %u\n", (unsigned)d->abi_version, d->name ? d->name : "",
              (unsigned)d->capabilities, (unsigned)d->flags);
    for (uint32_t i = 0; d->options && i < d->n_options; i++) {
        const biaskit_option *o = &d->options[i];
        tb_printf(&b, "option %s type %d default %.17g '%s' choices '%s'\n", o->name ? o->name : "", (int)o->type,
                  o->default_number, o->default_string ? o->default_string : "", o->choices ? o->choices : "");
    }
    uint64_t h = b.failed || !b.p ? 0 : bk_xxh64(b.p, b.len, 0);
    free(b.p);
    return h;
}

/* XXH64 of a whole file's bytes; 0 with *ok = 0 when it cannot be read (or is no regular file). */
static uint64_t file_checksum(const char *path, int *ok)
{
    *ok = 0;
    FILE *f = NULL;
    uint64_t size = 0;
    bk_error ignored;
    if (!path || bk_file_open_regular(path, "plugin file", 0, &f, &size, &ignored) != BK_OK)
        return 0;
    unsigned char *bytes = size < (uint64_t)SIZE_MAX ? malloc((size_t)size + 1) : NULL;
    uint64_t h = 0;
    if (bytes && fread(bytes, 1, (size_t)size, f) == (size_t)size) {
        h = bk_xxh64(bytes, (size_t)size, 0);
        *ok = 1;
    }
    free(bytes);
    fclose(f);
    return h;
}

cJSON *bk_ckpt_plugin_records(const bk_lm *lm)
{
    cJSON *list = cJSON_CreateArray();
    for (int k = 0; list && k < lm->terms.n; k++) {
        const bk_term *t = &lm->terms.terms[k];
        const biaskit_plugin *d = t->plugin->desc;
        char desc[17], file[17] = "";
        bk_ckpt_hex64(descriptor_checksum(d), desc);
        int ok;
        uint64_t h = file_checksum(t->plugin->path, &ok);
        if (ok) /* an unreadable file is recorded as "" and never compared */
            bk_ckpt_hex64(h, file);
        cJSON *r = cJSON_CreateObject();
        if (!r || !cJSON_AddItemToArray(list, r) || !cJSON_AddStringToObject(r, "term", t->label) ||
            !cJSON_AddStringToObject(r, "plugin", d->name) ||
            !cJSON_AddStringToObject(r, "file", t->plugin->path ? t->plugin->path : "") ||
            !cJSON_AddStringToObject(r, "version", d->version ? d->version : "") ||
            !cJSON_AddStringToObject(r, "descriptor", desc) || !cJSON_AddStringToObject(r, "file_xxh64", file)) {
            cJSON_Delete(list);
            return NULL;
        }
    }
    return list;
}

char *bk_lm_agreement_text(const bk_lm *lm, int64_t step)
{
    text_buf b = {0};
    tb_printf(&b, "[step] %lld\n", (long long)step);
    for (int i = 0; i < lm->n_overrides; i++)
        tb_printf(&b, "[--set] %s\n", lm->overrides[i]);
    for (int k = 0; k < lm->terms.n; k++) {
        const bk_term *t = &lm->terms.terms[k];
        const biaskit_plugin *d = t->plugin->desc;
        char desc[17], file[17] = "unreadable";
        int ok;
        uint64_t h = file_checksum(t->plugin->path, &ok);
        bk_ckpt_hex64(descriptor_checksum(d), desc);
        if (ok)
            bk_ckpt_hex64(h, file);
        /* the file's path may differ between machines; its bytes and declarations may not */
        tb_printf(&b, "[plugin of term '%s'] %s %s, declarations %s, file bytes %s (%s)\n", t->label, d->name,
                  d->version ? d->version : "", desc, file, t->plugin->path ? t->plugin->path : "built in");
    }
    tb_printf(&b, "[experiment file %s]\n%s\n", lm->config_source ? lm->config_source : "",
              lm->config_text ? lm->config_text : "");
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The stored name of a term's parameter group: its tensor's ("term.<label>.<tensor>"), or the whole
 * theta's ("term.<label>.theta"): the names bk_ckpt_build_slots gives them. */
static void group_tensor_name(const bk_term *t, const bk_term_group *g, char *out, size_t size)
{
    snprintf(out, size, "term.%s.%s", t->label, g->name);
}

/* "param_groups": {tensor: {"lr_scale": x, "weight_decay": y or null (the engine's rule)}} for every
 * term tensor that does not train at lr x 1 with the engine's rule; NULL (no key) when none, so that a
 * model without parameter groups writes the metadata it always did. *nomem is set on failure. */
cJSON *bk_ckpt_group_records(const bk_lm *lm, int *nomem)
{
    cJSON *groups = NULL;
    *nomem = 0;
    for (int k = 0; k < lm->terms.n; k++) {
        const bk_term *t = &lm->terms.terms[k];
        for (int g = 0; g < t->n_groups; g++) {
            const bk_term_group *grp = &t->groups[g];
            if (grp->lr_scale == 1.0 && grp->weight_decay < 0.0)
                continue;
            char name[200];
            group_tensor_name(t, grp, name, sizeof name);
            cJSON *r = cJSON_CreateObject();
            if (!groups)
                groups = cJSON_CreateObject();
            if (!r || !groups || !cJSON_AddItemToObject(groups, name, r) ||
                !cJSON_AddNumberToObject(r, "lr_scale", grp->lr_scale) ||
                !(grp->weight_decay >= 0.0 ? cJSON_AddNumberToObject(r, "weight_decay", grp->weight_decay)
                                           : cJSON_AddNullToObject(r, "weight_decay"))) {
                if (r && !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(groups, name)))
                    cJSON_Delete(r);
                cJSON_Delete(groups);
                *nomem = 1;
                return NULL;
            }
        }
    }
    return groups;
}

static const char *record_text(const cJSON *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Appends to line[size] (at *used), after "; " when something follows `start`; stops when full. */
static void append(char *line, size_t size, size_t *used, size_t start, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void append(char *line, size_t size, size_t *used, size_t start, const char *fmt, ...)
{
    if (*used + 1 >= size)
        return;
    if (*used > start) {
        int k = snprintf(line + *used, size - *used, "; ");
        *used += k > 0 ? (size_t)k : 0;
        if (*used + 1 >= size) {
            *used = size - 1;
            return;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line + *used, size - *used, fmt, ap);
    va_end(ap);
    *used += k > 0 ? (size_t)k : 0;
    if (*used >= size)
        *used = size - 1;
}

static void warn_stderr(void *ctx, const char *message)
{
    (void)ctx;
    fprintf(stderr, "biaskit: warning: %s\n", message);
}

/* What only --strict refuses: with strict, the error `code` "LINE; refused (--strict)"; else the
 * warning "LINE (HINT)" through the options' warn function. */
int bk_ckpt_warn_unless_strict(const bk_checkpoint_options *o, int code, const char *line, const char *hint,
                              bk_error *err)
{
    if (o && o->strict)
        return bk_fail(err, code, "%s; refused (--strict)", line);
    char full[BK_ERROR_MESSAGE_MAX + 128];
    snprintf(full, sizeof full, "%s (%s)", line, hint);
    if (o && o->warn)
        o->warn(o->warn_ctx, full);
    else
        warn_stderr(NULL, full);
    return BK_OK;
}

/* Each term's plugin against its record: a warning per changed term, or with strict the first one as
 * an error. */
int bk_ckpt_compare_plugins(const char *path, const cJSON *records, const bk_lm *lm, const bk_checkpoint_options *o,
                           bk_error *err)
{
    bk_checkpoint_warn_fn warn = o && o->warn ? o->warn : warn_stderr;
    void *ctx = o && o->warn ? o->warn_ctx : NULL;
    int strict = o && o->strict;
    if (!cJSON_IsArray(records))
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata has no 'plugins' list (one record per term)", path);
    char line[BK_ERROR_MESSAGE_MAX];
    for (int k = 0; k < lm->terms.n; k++) {
        const bk_term *t = &lm->terms.terms[k];
        const biaskit_plugin *d = t->plugin->desc;
        const cJSON *r = cJSON_GetArrayItem(records, k); /* the records are written in term order */
        size_t used = 0;
        append(line, sizeof line, &used, 0, "checkpoint '%s': term '%s' (plugin %s, %s): ", path, t->label, d->name,
               t->plugin->path ? t->plugin->path : "?");
        size_t start = used;
#define ADD(...) append(line, sizeof line, &used, start, __VA_ARGS__)
        if (!r) {
            ADD("the checkpoint has no record of the plugin this term was trained with (it records %d term%s)",
                cJSON_GetArraySize(records), cJSON_GetArraySize(records) == 1 ? "" : "s");
        } else {
            const char *name = record_text(r, "plugin"), *version = record_text(r, "version");
            const char *label = record_text(r, "term");
            const char *desc = record_text(r, "descriptor"), *file = record_text(r, "file");
            const char *file_sum = record_text(r, "file_xxh64");
            char now_desc[17], now_file[17] = "";
            bk_ckpt_hex64(descriptor_checksum(d), now_desc);
            int ok;
            uint64_t h = file_checksum(t->plugin->path, &ok);
            if (ok)
                bk_ckpt_hex64(h, now_file);
            const char *now_version = d->version ? d->version : "";
            if (!name || strcmp(name, d->name) != 0 || !label || strcmp(label, t->label) != 0)
                ADD("[[term]] #%d was trained with plugin '%s' (term '%s'), now plugin '%s'", k + 1, name ? name : "?",
                    label ? label : "?", d->name);
            if (!version || strcmp(version, now_version) != 0)
                ADD("version %s at save, %s now", version ? version : "?", now_version);
            if (!desc || strcmp(desc, now_desc) != 0)
                ADD("its declarations (capabilities, flags, options) changed: descriptor checksum %s at save, %s now",
                    desc ? desc : "?", now_desc);
            if (file_sum && *file_sum && *now_file && strcmp(file_sum, now_file) != 0)
                ADD("the plugin file's bytes changed: xxh64 %s of %s at save, %s of %s now", file_sum,
                    file ? file : "?", now_file, t->plugin->path ? t->plugin->path : "?");
            else if (file_sum && *file_sum && !*now_file)
                ADD("the plugin file %s cannot be read to compare it with the one trained (%s)",
                    t->plugin->path ? t->plugin->path : "?", file ? file : "?");
        }
#undef ADD
        if (used == start)
            continue;
        if (strict)
            return bk_fail(err, BK_ERR_PLUGIN,
                           "%s; refused (--strict): the model may compute differently than when trained", line);
        append(line, sizeof line, &used, 0, "the model may compute differently than when trained (--strict refuses)");
        warn(ctx, line);
    }
    return BK_OK;
}

/* A weight decay as messages say it: the coefficient, or the engine's rule. */
static const char *decay_text(double wd, char *buf, size_t size)
{
    if (wd >= 0.0)
        snprintf(buf, size, "%g", wd);
    else
        snprintf(buf, size, "the engine's rule");
    return buf;
}

/* On resume: each term tensor's learning-rate scale and weight decay against those the checkpoint
 * recorded ("param_groups"; a tensor it does not name trained at lr x 1 with the engine's rule, as every
 * tensor did before parameter groups existed). A difference is a warning naming the tensor and both
 * settings, or with strict an error: the training goes on differently than it began (a [[term]]
 * lr_scale / weight_decay set by --set, or the plugin's param_group() declaration, changed). */
int bk_ckpt_compare_groups(const char *path, const cJSON *records, const bk_lm *lm, const bk_checkpoint_options *o,
                          bk_error *err)
{
    if (records && !cJSON_IsObject(records))
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'param_groups' must be an object", path);
    for (int k = 0; k < lm->terms.n; k++) {
        const bk_term *t = &lm->terms.terms[k];
        for (int g = 0; g < t->n_groups; g++) {
            const bk_term_group *grp = &t->groups[g];
            char name[200];
            group_tensor_name(t, grp, name, sizeof name);
            double lr = 1.0, wd = -1.0;
            const cJSON *r = records ? cJSON_GetObjectItemCaseSensitive(records, name) : NULL;
            if (r) {
                const cJSON *l = cJSON_GetObjectItemCaseSensitive(r, "lr_scale");
                const cJSON *w = cJSON_GetObjectItemCaseSensitive(r, "weight_decay");
                if (!cJSON_IsObject(r) || !cJSON_IsNumber(l) || !isfinite(l->valuedouble) || l->valuedouble < 0.0 ||
                    !(cJSON_IsNull(w) || (cJSON_IsNumber(w) && isfinite(w->valuedouble) && w->valuedouble >= 0.0)))
                    return bk_fail(err, BK_ERR_PARSE,
                                   "%s: checkpoint metadata 'param_groups' entry '%s': expected {\"lr_scale\": a "
                                   "number >= 0, \"weight_decay\": a number >= 0 or null}", path, name);
                lr = l->valuedouble;
                wd = cJSON_IsNull(w) ? -1.0 : w->valuedouble;
            }
            double now_wd = grp->weight_decay < 0.0 ? -1.0 : grp->weight_decay;
            if (lr == grp->lr_scale && wd == now_wd)
                continue;
            char line[BK_ERROR_MESSAGE_MAX], before[48], after[48];
            snprintf(line, sizeof line,
                     "checkpoint '%s': tensor '%s' trained with lr_scale %g and weight_decay %s, now lr_scale %g and "
                     "weight_decay %s ([[term]] #%d lr_scale / weight_decay, or plugin %s's param_group() declaration, "
                     "changed): the rest of the training differs from a run that never stopped",
                     path, name, lr, decay_text(wd, before, sizeof before), grp->lr_scale,
                     decay_text(now_wd, after, sizeof after), t->index, t->plugin->desc->name);
            int rc = bk_ckpt_warn_unless_strict(o, BK_ERR_CONFIG, line, "--strict refuses", err);
            if (rc)
                return rc;
        }
    }
    return BK_OK;
}
