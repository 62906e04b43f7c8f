/* The stored tensors of a checkpoint (train/checkpoint_internal.h): their layout in the model, their
 * checksums, the metadata's seal, and recognising a checkpoint file. */
#define _POSIX_C_SOURCE 200809L
#include "train/checkpoint_internal.h"

#include "bias/mix.h"
#include "util/file.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------------- stored tensors */


/* Every stored tensor of the model registered in `opt`, in optimizer order. */
int bk_ckpt_build_slots(const bk_lm *lm, const bk_adamw *opt, bk_ckpt_slot **out, int *n_out, bk_error *err)
{
    *out = NULL;
    *n_out = 0;
    int cap = opt->n_groups + 8, n = 0;
    bk_ckpt_slot *s = calloc((size_t)cap, sizeof *s);
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
            bk_ckpt_slot *bigger = realloc(s, (size_t)cap * sizeof *s);
            if (!bigger) {
                free(s), free(info);
                return bk_fail(err, BK_ERR_NOMEM, "out of memory listing the checkpoint's tensors");
            }
            s = bigger;
        }
        if (named > 0) {
            for (int32_t k = 0; k < named; k++) {
                bk_ckpt_slot *t = &s[n++];
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
        bk_ckpt_slot *t = &s[n++];
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
float *bk_ckpt_group_array(const bk_param_group *g, int which)
{
    return which == 0 ? g->param_host : which == 1 ? g->m_host : g->v_host;
}

const char *const bk_ckpt_array_prefix[3] = {"", "adam.m.", "adam.v."};

void bk_ckpt_hex64(uint64_t v, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, v);
}

/* Every tensor of the file against its recorded checksum (unless `hash` is 0: --no-verify), and every
 * recorded checksum against a tensor. */
int bk_ckpt_verify_checksums(const char *path, const bk_safetensors *st, const cJSON *meta, int hash, bk_error *err)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(meta, "checksum");
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(meta, "tensors");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, BK_CKPT_CHECKSUM_NAME) != 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: checkpoint metadata 'checksum' is %s%s%s; expected \"%s\"", path,
                       cJSON_IsString(kind) ? "\"" : "", cJSON_IsString(kind) ? kind->valuestring : "missing",
                       cJSON_IsString(kind) ? "\"" : "", BK_CKPT_CHECKSUM_NAME);
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
        bk_ckpt_hex64(bk_xxh64(t->data, count * sizeof(float), 0), got);
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

void bk_checkpoint_seal(const char *json, char out[17])
{
    bk_ckpt_hex64(bk_xxh64(json, strlen(json), 0), out);
}

/* Copies stored tensor `name` (of bk_ckpt_slot s's layout) into array `which` of its optimizer group. */
int bk_ckpt_read_slot(const bk_safetensors *st, const char *path, const bk_ckpt_slot *s, int which, bk_adamw *opt,
                     bk_error *err)
{
    char name[220];
    snprintf(name, sizeof name, "%s%s", bk_ckpt_array_prefix[which], s->name);
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
    float *base = bk_ckpt_group_array(&opt->groups[s->group], which);
    for (int64_t c = 0; c < s->copies; c++)
        memcpy(base + c * s->stride + s->offset, t->data + c * s->count, (size_t)s->count * sizeof(float));
    return BK_OK;
}

/* 1 when file tensor `name` is one of the model's stored tensors (or a moment of one). */
int bk_ckpt_known_tensor(const char *name, const bk_ckpt_slot *slots, int n)
{
    for (int which = 0; which < 3; which++) {
        size_t len = strlen(bk_ckpt_array_prefix[which]);
        if (strncmp(name, bk_ckpt_array_prefix[which], len) != 0)
            continue;
        for (int i = 0; i < n; i++)
            if (strcmp(name + len, slots[i].name) == 0)
                return 1;
    }
    return 0;
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
