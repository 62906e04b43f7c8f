#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint.h"

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

#define META_KEY "biaskit"
#define SEAL_KEY "biaskit_xxh64" /* format 3: the XXH64 of the META_KEY text (bk_checkpoint_seal) */
#define CHECKSUM_NAME "xxh64"
#define SEAL_COVERS "experiment text, overrides, step, data cursor, plugin records and tensor checksums"
#define MAX_COUNT 9007199254740991.0 /* 2^53 - 1: the largest integer a JSON number holds exactly */

/* ----------------------------------------------------------------------------- stored tensors */

/* One stored tensor (its adam.m. / adam.v. twins have the same layout): for each of `copies` copies,
 * `count` floats of optimizer group `group` starting at c * stride + offset. */
typedef struct slot {
    char name[192];
    int ndim;
    int64_t shape[BK_ST_MAX_DIMS];
    int group;
    int64_t copies, stride, offset, count;
} slot;

/* Every stored tensor of the model registered in `opt`, in optimizer order. */
static int build_slots(const bk_lm *lm, const bk_adamw *opt, slot **out, int *n_out, bk_error *err)
{
    *out = NULL;
    *n_out = 0;
    int cap = opt->n_groups + 8, n = 0;
    slot *s = calloc((size_t)cap, sizeof *s);
    biaskit_tensor_info *info = calloc(BK_TERM_MAX_TENSORS, sizeof *info);
    if (!s || !info) {
        free(s), free(info);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory listing the checkpoint's tensors");
    }
    for (int g = 0; g < opt->n_groups; g++) {
        const bk_param_group *pg = &opt->groups[g];
        const bk_term *term = NULL;
        for (int k = 0; k < lm->terms.n && !term; k++)
            if (lm->terms.terms[k].theta == pg->param && lm->terms.terms[k].n_params > 0)
                term = &lm->terms.terms[k];
        int32_t named = term ? bk_term_tensors(term, info) : 0;
        int need = named > 0 ? named : 1;
        if (n + need > cap) {
            cap = (n + need) * 2;
            slot *bigger = realloc(s, (size_t)cap * sizeof *s);
            if (!bigger) {
                free(s), free(info);
                return bk_fail(err, BK_ERR_NOMEM, "out of memory listing the checkpoint's tensors");
            }
            s = bigger;
        }
        if (named > 0) {
            for (int32_t k = 0; k < named; k++) {
                slot *t = &s[n++];
                memset(t, 0, sizeof *t);
                snprintf(t->name, sizeof t->name, "term.%s.%s", term->label, info[k].name);
                t->group = g;
                t->copies = term->n_copies;
                t->stride = term->n_params;
                t->offset = info[k].offset;
                t->count = (int64_t)info[k].rows * info[k].cols;
                if (term->per_layer)
                    t->shape[t->ndim++] = term->n_copies;
                t->shape[t->ndim++] = info[k].rows;
                if (info[k].cols != 1)
                    t->shape[t->ndim++] = info[k].cols;
            }
            continue;
        }
        slot *t = &s[n++];
        memset(t, 0, sizeof *t);
        bk_copy_text(t->name, sizeof t->name, pg->name);
        t->group = g;
        t->copies = 1;
        t->count = (int64_t)pg->n;
        t->ndim = 1;
        t->shape[0] = (int64_t)pg->n;
        if (term) { /* a term's whole theta: (copies, n_params) */
            t->ndim = 2;
            t->shape[0] = term->n_copies;
            t->shape[1] = term->n_params;
        } else if (strncmp(pg->name, "mix.", 4) == 0) { /* (learned terms, heads) when each has a weight per head */
            for (int st = 0; st < BK_STREAM_COUNT; st++) {
                const bk_bias *b = &lm->bias;
                int per_head = b->n_mix[st] > 0 && b->mix_params[st] == pg->param && b->groups[st] > 1;
                for (int k = 0; per_head && k < b->n_on[st]; k++)
                    per_head = b->kind[st][k] != BK_MIX_LEARNED;
                if (per_head) {
                    t->ndim = 2;
                    t->shape[0] = (int64_t)pg->n / b->groups[st];
                    t->shape[1] = b->groups[st];
                }
            }
        } else if (strncmp(pg->name, "model.", 6) == 0) {
            for (int i = 0; i < lm->gpt.n_tensors; i++)
                if (strcmp(lm->gpt.tensors[i].name, pg->name + 6) == 0) {
                    t->ndim = lm->gpt.tensors[i].ndim;
                    memcpy(t->shape, lm->gpt.tensors[i].shape, sizeof t->shape);
                }
        }
    }
    free(info);
    *out = s;
    *n_out = n;
    return BK_OK;
}

/* The host copies checkpoints read and write (adamw.h: the arrays themselves for host memory; for a
 * device group the mirrors bk_adamw_to_host / bk_adamw_to_device synchronise). */
static float *group_array(const bk_param_group *g, int which)
{
    return which == 0 ? g->param_host : which == 1 ? g->m_host : g->v_host;
}

static const char *const array_prefix[3] = {"", "adam.m.", "adam.v."};

static void hex64(uint64_t v, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, v);
}

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

static cJSON *plugin_records(const bk_lm *lm)
{
    cJSON *list = cJSON_CreateArray();
    for (int k = 0; list && k < lm->terms.n; k++) {
        const bk_term *t = &lm->terms.terms[k];
        const biaskit_plugin *d = t->plugin->desc;
        char desc[17], file[17] = "";
        hex64(descriptor_checksum(d), desc);
        int ok;
        uint64_t h = file_checksum(t->plugin->path, &ok);
        if (ok) /* an unreadable file is recorded as "" and never compared */
            hex64(h, file);
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
        hex64(descriptor_checksum(d), desc);
        if (ok)
            hex64(h, file);
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
 * theta's ("term.<label>.theta"): the names build_slots gives them. */
static void group_tensor_name(const bk_term *t, const bk_term_group *g, char *out, size_t size)
{
    snprintf(out, size, "term.%s.%s", t->label, g->name);
}

/* "param_groups": {tensor: {"lr_scale": x, "weight_decay": y or null (the engine's rule)}} for every
 * term tensor that does not train at lr x 1 with the engine's rule; NULL (no key) when none, so that a
 * model without parameter groups writes the metadata it always did. *nomem is set on failure. */
static cJSON *group_records(const bk_lm *lm, int *nomem)
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
static int warn_unless_strict(const bk_checkpoint_options *o, int code, const char *line, const char *hint,
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
static int compare_plugins(const char *path, const cJSON *records, const bk_lm *lm, const bk_checkpoint_options *o,
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
            hex64(descriptor_checksum(d), now_desc);
            int ok;
            uint64_t h = file_checksum(t->plugin->path, &ok);
            if (ok)
                hex64(h, now_file);
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
static int compare_groups(const char *path, const cJSON *records, const bk_lm *lm, const bk_checkpoint_options *o,
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
            int rc = warn_unless_strict(o, BK_ERR_CONFIG, line, "--strict refuses", err);
            if (rc)
                return rc;
        }
    }
    return BK_OK;
}

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
    slot *slots = NULL;
    int n_slots = 0;
    int rc = build_slots(lm, opt, &slots, &n_slots, err);
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
            const slot *s = &slots[i];
            int k = which * n_slots + i;
            bk_st_tensor *t = &tensors[k];
            const float *base = group_array(&opt->groups[s->group], which);
            snprintf(names[k], sizeof names[0], "%s%s", array_prefix[which], s->name);
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
            hex64(bk_xxh64(t->data, count * sizeof(float), 0), sum);
            if (!cJSON_AddStringToObject(sums, t->name, sum)) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
                goto done;
            }
        }
    cJSON *plugins = plugin_records(lm);
    if (!plugins || !cJSON_AddItemToObject(meta, "plugins", plugins)) {
        cJSON_Delete(plugins);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    int nomem = 0;
    cJSON *param_groups = group_records(lm, &nomem);
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
    cJSON_AddStringToObject(meta, "checksum", CHECKSUM_NAME);
    /* counts that a run of this experiment cannot reach are kept as they are, marked unchecked: a format 2
     * checkpoint whose batch, length or accumulation changed on a resume (allowed then) goes on */
    bk_error unreachable;
    if (check_progress(path, 1, st, &lm->exp, &unreachable) != BK_OK)
        cJSON_AddFalseToObject(meta, "counts_checked");
    cJSON *overrides = cJSON_AddArrayToObject(meta, "overrides");
    for (int i = 0; overrides && i < lm->n_overrides; i++)
        cJSON_AddItemToArray(overrides, cJSON_CreateString(lm->overrides[i]));
    if (!overrides || !(json = cJSON_PrintUnformatted(meta))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    char seal[17];
    bk_checkpoint_seal(json, seal);
    bk_st_meta entries[3] = {{"format", "pt"}, {META_KEY, json}, {SEAL_KEY, seal}};
    rc = bk_safetensors_write(path, tensors, n, entries, 3, err);
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

/* Every tensor of the file against its recorded checksum (unless `hash` is 0: --no-verify), and every
 * recorded checksum against a tensor. */
static int verify_checksums(const char *path, const bk_safetensors *st, const cJSON *meta, int hash, bk_error *err)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(meta, "checksum");
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(meta, "tensors");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, CHECKSUM_NAME) != 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'checksum' is %s%s%s; expected \"%s\"", path,
                       cJSON_IsString(kind) ? "\"" : "", cJSON_IsString(kind) ? kind->valuestring : "missing",
                       cJSON_IsString(kind) ? "\"" : "", CHECKSUM_NAME);
    if (!cJSON_IsObject(sums))
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata has no 'tensors' object of checksums", path);
    for (int i = 0; i < bk_safetensors_count(st); i++) {
        const bk_st_tensor *t = bk_safetensors_at(st, i);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(sums, t->name);
        if (!cJSON_IsString(want))
            return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has no checksum in the metadata", path, t->name);
        if (!hash)
            continue;
        size_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            count *= (size_t)t->shape[d];
        char got[17];
        hex64(bk_xxh64(t->data, count * sizeof(float), 0), got);
        if (strcmp(got, want->valuestring) != 0)
            return bk_fail(err, BK_ERR_PARSE,
                           "%s: tensor '%s' is corrupt: its data's xxh64 is %s, the checkpoint recorded %s", path,
                           t->name, got, want->valuestring);
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, sums)
    {
        if (!bk_safetensors_find(st, item->string))
            return bk_fail(err, BK_ERR_PARSE, "%s: the metadata has a checksum for tensor '%s', which the file lacks",
                           path, item->string);
    }
    return BK_OK;
}

/* ------------------------------------------------------------------------------------ metadata */

void bk_checkpoint_seal(const char *json, char out[17])
{
    hex64(bk_xxh64(json, strlen(json), 0), out);
}

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
                           path, *format, SEAL_KEY, SEAL_COVERS);
        char got[17];
        bk_checkpoint_seal(json, got);
        if (strcmp(got, seal) != 0)
            return bk_fail(err, BK_ERR_PARSE,
                           "%s: the checkpoint's metadata does not match its checksum: %s %.16s%s recorded, %s "
                           "computed over the metadata (%s): it was edited or damaged after it was written; refused "
                           "(train again, or resume from an earlier checkpoint)",
                           path, SEAL_KEY, seal, strlen(seal) > 16 ? "..." : "", got, SEAL_COVERS);
        return BK_OK;
    }
    char line[BK_ERROR_MESSAGE_MAX];
    snprintf(line, sizeof line,
             "checkpoint '%s' is format %d, written before checkpoints carried a checksum of their metadata (this "
             "biaskit writes format %d): its experiment, step and plugin records cannot be verified",
             path, *format, BK_CHECKPOINT_FORMAT);
    char hint[96];
    snprintf(hint, sizeof hint, "--strict refuses it; a resumed run writes format %d", BK_CHECKPOINT_FORMAT);
    return warn_unless_strict(o, BK_ERR_PARSE, line, hint, err);
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
        return warn_unless_strict(o, BK_ERR_CONFIG, line, "--strict refuses", err);
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
        return bk_fail(err, BK_ERR_PARSE, "%s: not a biaskit checkpoint (no valid '%s' metadata)", path, META_KEY);
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

/* Copies stored tensor `name` (of slot s's layout) into array `which` of its optimizer group. */
static int read_slot(const bk_safetensors *st, const char *path, const slot *s, int which, bk_adamw *opt,
                     bk_error *err)
{
    char name[220];
    snprintf(name, sizeof name, "%s%s", array_prefix[which], s->name);
    const bk_st_tensor *t = bk_safetensors_find(st, name);
    if (!t)
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint has no tensor '%s' (the model has it)", path, name);
    int same = t->ndim == s->ndim;
    for (int d = 0; same && d < s->ndim; d++)
        same = t->shape[d] == s->shape[d];
    if (!same) {
        char have[160], want[160];
        bk_st_format_shape(have, sizeof have, t->shape, t->ndim);
        bk_st_format_shape(want, sizeof want, s->shape, s->ndim);
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has shape %s, the model expects %s", path, name, have,
                       want);
    }
    float *base = group_array(&opt->groups[s->group], which);
    for (int64_t c = 0; c < s->copies; c++)
        memcpy(base + c * s->stride + s->offset, t->data + c * s->count, (size_t)s->count * sizeof(float));
    return BK_OK;
}

/* 1 when file tensor `name` is one of the model's stored tensors (or a moment of one). */
static int known_tensor(const char *name, const slot *slots, int n)
{
    for (int which = 0; which < 3; which++) {
        size_t len = strlen(array_prefix[which]);
        if (strncmp(name, array_prefix[which], len) != 0)
            continue;
        for (int i = 0; i < n; i++)
            if (strcmp(name + len, slots[i].name) == 0)
                return 1;
    }
    return 0;
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
    slot *slots = NULL;
    int n_slots = 0, lm_open = 0;
    bk_adamw local = {0};
    if ((rc = bk_checkpoint_meta_read(path, bk_safetensors_meta(st, META_KEY), bk_safetensors_meta(st, SEAL_KEY), o,
                                      opt != NULL, &meta, err))) {
        bk_safetensors_close(st);
        return rc;
    }
    if ((rc = verify_checksums(path, st, meta.json, !(o && o->no_verify), err)))
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
    if ((rc = compare_plugins(path, cJSON_GetObjectItemCaseSensitive(meta.json, "plugins"), lm, o, err)) ||
        (opt && (rc = compare_groups(path, cJSON_GetObjectItemCaseSensitive(meta.json, "param_groups"), lm, o, err))))
        goto done;

    bk_adamw *use = opt ? opt : &local;
    if ((rc = bk_lm_register(lm, use, err)) || (rc = build_slots(lm, use, &slots, &n_slots, err)))
        goto done;
    for (int i = 0; i < n_slots && !rc; i++)
        for (int which = 0; which < (opt ? 3 : 1) && !rc; which++)
            rc = read_slot(st, path, &slots[i], which, use, err);
    for (int i = 0; i < bk_safetensors_count(st) && !rc; i++) {
        const char *t = bk_safetensors_at(st, i)->name;
        if (!known_tensor(t, slots, n_slots))
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' is not part of the model the stored experiment builds",
                         path, t);
    }
    if (rc)
        goto done;
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

int bk_checkpoint_is_file(const char *path)
{
    size_t n = strlen(path), ext = strlen(".safetensors");
    if (n >= ext && strcmp(path + n - ext, ".safetensors") == 0)
        return 1;
    FILE *f = NULL;
    uint64_t size = 0;
    bk_error ignored;
    if (bk_file_open_regular(path, "checkpoint", 0, &f, &size, &ignored) != BK_OK)
        return 0; /* missing, or no regular file: whoever reads it next says so */
    unsigned char head[9];
    int yes = 0;
    size_t got = size >= 8 ? fread(head, 1, sizeof head, f) : 0;
    if (got == sizeof head && head[8] == '{') {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)head[i] << (8 * i);
        yes = len <= size - 8;
    }
    /* a damaged one (a header cut short or overwritten): a header length below 4 GiB has four NUL
     * bytes, which no experiment file (TOML text) holds; the checkpoint reader then says what is wrong */
    if (got >= 8 && !head[4] && !head[5] && !head[6] && !head[7])
        yes = 1;
    fclose(f);
    return yes;
}
