#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint.h"

#include "io/safetensors.h"

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
#define CHECKSUM_NAME "xxh64"
#define MAX_COUNT 9007199254740991.0 /* 2^53 - 1: the largest integer a JSON number holds exactly */
#define MAX_PLUGIN_TENSORS 256       /* named tensors read from one plugin's param_tensors() */

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

/* The named tensors of a term when they tile one copy of theta exactly (each value in one tensor,
 * names unique and usable in a tensor name); 0 otherwise, and the term is stored whole as theta. */
static int32_t term_tensors(const bk_term *term, biaskit_tensor_info *info)
{
    const biaskit_plugin *d = term->plugin->desc;
    if (!d->param_tensors || term->n_params <= 0)
        return 0;
    int32_t n = d->param_tensors(term->instance, info, MAX_PLUGIN_TENSORS);
    if (n <= 0 || n > MAX_PLUGIN_TENSORS)
        return 0;
    int64_t covered = 0;
    for (int32_t k = 0; k < n; k++) {
        const biaskit_tensor_info *t = &info[k];
        if (!t->name || !*t->name || strlen(t->name) > 64 || strchr(t->name, '"') || strcmp(t->name, "theta") == 0 ||
            t->rows < 1 || t->cols < 1 || t->offset < 0 || t->offset + (int64_t)t->rows * t->cols > term->n_params)
            return 0;
        for (int32_t j = 0; j < k; j++) {
            int64_t len_j = (int64_t)info[j].rows * info[j].cols, len_k = (int64_t)t->rows * t->cols;
            if (strcmp(info[j].name, t->name) == 0 ||
                (t->offset < info[j].offset + len_j && info[j].offset < t->offset + len_k))
                return 0;
        }
        covered += (int64_t)t->rows * t->cols;
    }
    return covered == term->n_params ? n : 0;
}

/* Every stored tensor of the model registered in `opt`, in optimizer order. */
static int build_slots(const bk_lm *lm, const bk_adamw *opt, slot **out, int *n_out, bk_error *err)
{
    *out = NULL;
    *n_out = 0;
    int cap = opt->n_groups + 8, n = 0;
    slot *s = calloc((size_t)cap, sizeof *s);
    biaskit_tensor_info *info = calloc(MAX_PLUGIN_TENSORS, sizeof *info);
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
        int32_t named = term ? term_tensors(term, info) : 0;
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

/* XXH64 of a whole file's bytes; 0 with *ok = 0 when it cannot be read. */
static uint64_t file_checksum(const char *path, int *ok)
{
    *ok = 0;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return 0;
    struct stat sb;
    unsigned char *bytes = NULL;
    uint64_t h = 0;
    if (fstat(fileno(f), &sb) == 0 && sb.st_size >= 0 && (bytes = malloc((size_t)sb.st_size + 1)) &&
        fread(bytes, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size) {
        h = bk_xxh64(bytes, (size_t)sb.st_size, 0);
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
        const cJSON *r = NULL, *item;
        cJSON_ArrayForEach(item, records)
        {
            const char *label = record_text(item, "term");
            if (label && strcmp(label, t->label) == 0)
                r = item;
        }
        size_t used = 0;
        append(line, sizeof line, &used, 0, "checkpoint '%s': term '%s' (plugin %s, %s): ", path, t->label, d->name,
               t->plugin->path ? t->plugin->path : "?");
        size_t start = used;
#define ADD(...) append(line, sizeof line, &used, start, __VA_ARGS__)
        if (!r) {
            ADD("the checkpoint has no record of the plugin this term was trained with");
        } else {
            const char *name = record_text(r, "plugin"), *version = record_text(r, "version");
            const char *desc = record_text(r, "descriptor"), *file = record_text(r, "file");
            const char *file_sum = record_text(r, "file_xxh64");
            char now_desc[17], now_file[17] = "";
            hex64(descriptor_checksum(d), now_desc);
            int ok;
            uint64_t h = file_checksum(t->plugin->path, &ok);
            if (ok)
                hex64(h, now_file);
            const char *now_version = d->version ? d->version : "";
            if (!name || strcmp(name, d->name) != 0)
                ADD("trained with plugin '%s', now '%s'", name ? name : "?", d->name);
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

/* ----------------------------------------------------------------------------------------- save */

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
    cJSON_AddNumberToObject(meta, "format", BK_CHECKPOINT_FORMAT);
    cJSON_AddNumberToObject(meta, "step", (double)st->step);
    cJSON_AddNumberToObject(meta, "adam_t", (double)opt->t);
    cJSON_AddNumberToObject(meta, "tokens", (double)st->tokens);
    cJSON_AddNumberToObject(meta, "data_epoch", (double)st->data_epoch);
    cJSON_AddNumberToObject(meta, "data_index", (double)st->data_index);
    if (isfinite(st->val_loss))
        cJSON_AddNumberToObject(meta, "val_loss", st->val_loss);
    cJSON_AddStringToObject(meta, "config_source", lm->config_source ? lm->config_source : lm->exp.path);
    cJSON_AddStringToObject(meta, "config_dir", lm->config_dir);
    cJSON_AddStringToObject(meta, "config", lm->config_text);
    cJSON_AddStringToObject(meta, "checksum", CHECKSUM_NAME);
    cJSON *overrides = cJSON_AddArrayToObject(meta, "overrides");
    for (int i = 0; overrides && i < lm->n_overrides; i++)
        cJSON_AddItemToArray(overrides, cJSON_CreateString(lm->overrides[i]));
    if (!overrides || !(json = cJSON_PrintUnformatted(meta))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
        goto done;
    }
    bk_st_meta entries[2] = {{"format", "pt"}, {META_KEY, json}};
    rc = bk_safetensors_write(path, tensors, n, entries, 2, err);
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

/* Every tensor of the file against its recorded checksum, and every recorded checksum against a tensor. */
static int verify_checksums(const char *path, const bk_safetensors *st, const cJSON *meta, bk_error *err)
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
    cJSON *meta = NULL;
    slot *slots = NULL;
    int n_slots = 0, lm_open = 0;
    bk_adamw local = {0};
    const char *json = bk_safetensors_meta(st, META_KEY);
    if (!json || !(meta = cJSON_Parse(json)) || !cJSON_IsObject(meta)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: not a biaskit checkpoint (no valid '%s' metadata)", path, META_KEY);
        goto done;
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(meta, "format");
    if (!cJSON_IsNumber(format)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata has no number 'format'", path);
        goto done;
    }
    if (format->valuedouble != BK_CHECKPOINT_FORMAT) {
        rc = bk_fail(err, BK_ERR_PARSE,
                     "%s: checkpoint format %.17g; this biaskit reads format %d only (format %d adds named plugin "
                     "tensors, per-tensor checksums and plugin records): evaluate it with the biaskit that wrote "
                     "it, or train again",
                     path, format->valuedouble, BK_CHECKPOINT_FORMAT, BK_CHECKPOINT_FORMAT);
        goto done;
    }
    int64_t step = 0, adam_t = 0, tokens = 0, epoch = 0, index = 0;
    if ((rc = count_field(meta, "step", MAX_COUNT, path, &step, err)) ||
        (rc = count_field(meta, "adam_t", MAX_COUNT, path, &adam_t, err)) ||
        (rc = count_field(meta, "tokens", MAX_COUNT, path, &tokens, err)) ||
        (rc = count_field(meta, "data_epoch", MAX_COUNT, path, &epoch, err)) ||
        (rc = count_field(meta, "data_index", MAX_COUNT, path, &index, err)))
        goto done;
    if (adam_t != step) { /* the optimizer takes exactly one step per training step */
        rc = bk_fail(err, BK_ERR_PARSE,
                     "%s: checkpoint metadata 'adam_t' is %" PRId64 ", expected the step count %" PRId64, path, adam_t,
                     step);
        goto done;
    }
    const cJSON *val_loss = cJSON_GetObjectItemCaseSensitive(meta, "val_loss");
    if (val_loss && (!cJSON_IsNumber(val_loss) || !isfinite(val_loss->valuedouble) || val_loss->valuedouble < 0.0)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'val_loss' must be a finite non-negative number",
                     path);
        goto done;
    }
    if ((rc = verify_checksums(path, st, meta, err)))
        goto done;
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(meta, "config");
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(meta, "config_dir");
    const cJSON *source = cJSON_GetObjectItemCaseSensitive(meta, "config_source");
    const cJSON *overrides = cJSON_GetObjectItemCaseSensitive(meta, "overrides");
    if (!cJSON_IsString(config) || !cJSON_IsString(dir) || !cJSON_IsString(source) || !cJSON_IsArray(overrides)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata lacks the experiment (config, config_dir, "
                     "config_source, overrides)", path);
        goto done;
    }
    int n_extra = o ? o->n_overrides : 0;
    int n_saved = cJSON_GetArraySize(overrides), n_all = n_saved + n_extra;
    const char **all = calloc((size_t)(n_all ? n_all : 1), sizeof *all);
    if (!all) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
        goto done;
    }
    for (int i = 0; i < n_saved; i++) {
        const cJSON *v = cJSON_GetArrayItem(overrides, i);
        if (!cJSON_IsString(v)) {
            free(all);
            rc = bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'overrides' entry %d is not a string", path, i);
            goto done;
        }
        all[i] = v->valuestring;
    }
    for (int i = 0; i < n_extra; i++)
        all[n_saved + i] = o->overrides[i];
    char name[4096]; /* names the stored experiment in messages only: the checkpoint keeps the plain source */
    snprintf(name, sizeof name, "%s (experiment saved in %s)", source->valuestring, path);
    rc = bk_lm_open_text(lm, config->valuestring, name, dir->valuestring, all, n_all, err);
    free(all);
    if (rc)
        goto done;
    lm_open = 1;
    char *plain = strdup(source->valuestring);
    if (!plain) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
        goto done;
    }
    free(lm->config_source);
    lm->config_source = plain;
    if ((rc = compare_plugins(path, cJSON_GetObjectItemCaseSensitive(meta, "plugins"), lm, o, err)))
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
    use->t = adam_t;
    /* what was read went into the host copies: the working copies in the backend's memory follow */
    if ((rc = opt ? bk_adamw_to_device(opt, err) : bk_gpt_to_device(&lm->gpt, err)))
        goto done;
    if (lm->exp.attention.learn_weights)
        bk_bias_sync_weights(&lm->bias);
    if (state) {
        state->step = step;
        state->tokens = tokens;
        state->data_epoch = epoch;
        state->data_index = index;
        state->val_loss = val_loss ? val_loss->valuedouble : NAN;
    }
done:
    bk_adamw_free(&local);
    if (rc && lm_open)
        bk_lm_close(lm);
    free(slots);
    cJSON_Delete(meta);
    bk_safetensors_close(st);
    return rc;
}

int bk_checkpoint_load(const char *path, const char *const *extra_overrides, int n_extra, bk_lm *lm, bk_adamw *opt,
                       bk_train_state *st, bk_error *err)
{
    bk_checkpoint_options o = {extra_overrides, n_extra, 0, NULL, NULL};
    return bk_checkpoint_load_ex(path, &o, lm, opt, st, err);
}

int bk_checkpoint_is_file(const char *path)
{
    size_t n = strlen(path), ext = strlen(".safetensors");
    if (n >= ext && strcmp(path + n - ext, ".safetensors") == 0)
        return 1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char head[9];
    struct stat sb;
    int yes = 0;
    if (fread(head, 1, sizeof head, f) == sizeof head && fstat(fileno(f), &sb) == 0 && head[8] == '{') {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++)
            len |= (uint64_t)head[i] << (8 * i);
        yes = len <= (uint64_t)sb.st_size - 8;
    }
    fclose(f);
    return yes;
}
