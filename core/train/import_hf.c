/* An HF transformers directory (config.json + safetensors) into a checkpoint (train/import.h). */
#define _DEFAULT_SOURCE /* fseeko */
#include "train/import.h"

#include "io/safetensors.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/hf_map.h"
#include "train/lm.h"
#include "util/file.h"
#include "util/half.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PATH_MAX_HF 4096
#define NAME_MAX_HF 256

enum { DT_F32, DT_F16, DT_BF16, DT_OTHER };

/* One tensor of the files: where its bytes are. */
typedef struct hf_tensor {
    char name[NAME_MAX_HF];
    char dtype_name[16];
    int dtype;
    int ndim;
    int64_t shape[BK_ST_MAX_DIMS];
    int64_t count;
    uint64_t offset; /* of its first byte in its file */
    int file;
} hf_tensor;

/* The safetensors files of a directory and every tensor they hold. */
typedef struct hf_files {
    char (*paths)[PATH_MAX_HF];
    FILE **f;
    int n_files;
    hf_tensor *t;
    size_t n, cap;
} hf_files;

static void files_close(hf_files *h)
{
    for (int i = 0; i < h->n_files; i++)
        if (h->f[i])
            fclose(h->f[i]);
    free(h->f);
    free(h->paths);
    free(h->t);
    memset(h, 0, sizeof *h);
}

static int join(char *out, const char *dir, const char *name, bk_error *err)
{
    if (snprintf(out, PATH_MAX_HF, "%s/%s", dir, name) >= PATH_MAX_HF)
        return bk_fail(err, BK_ERR_IO, "%s/%s: the path is longer than %d bytes", dir, name, PATH_MAX_HF - 1);
    return BK_OK;
}

static int read_json(const char *path, const char *what, cJSON **out, bk_error *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = bk_file_read_all(path, what, BK_TEXT_FILE_MAX, &text, &len, err);
    if (rc)
        return rc;
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    const size_t at = end ? (size_t)(end - text) : 0;
    free(text);
    if (!*out)
        return bk_fail(err, BK_ERR_PARSE, "%s: not valid JSON (near byte %zu)", path, at);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return bk_fail(err, BK_ERR_PARSE, "%s: expected a JSON object", path);
    }
    return BK_OK;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static int json_u64(const cJSON *item, uint64_t *v)
{
    if (!cJSON_IsNumber(item) || !(item->valuedouble >= 0.0 && item->valuedouble <= 9007199254740992.0) ||
        item->valuedouble != floor(item->valuedouble))
        return 0;
    *v = (uint64_t)item->valuedouble;
    return 1;
}

/* The header of one safetensors file, every tensor's place checked against the file's size. */
static int read_header(hf_files *h, const char *path, bk_error *err)
{
    FILE *f = NULL;
    uint64_t size = 0;
    int rc = bk_file_open_regular(path, "safetensors file", 0, &f, &size, err);
    if (rc)
        return rc;
    const int file = h->n_files;
    char(*paths)[PATH_MAX_HF] = realloc(h->paths, (size_t)(file + 1) * sizeof *paths);
    FILE **fs = paths ? realloc(h->f, (size_t)(file + 1) * sizeof *fs) : NULL;
    if (paths)
        h->paths = paths;
    if (fs)
        h->f = fs;
    if (!paths || !fs) {
        fclose(f);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the files of the model");
    }
    snprintf(h->paths[file], PATH_MAX_HF, "%s", path);
    h->f[file] = f;
    h->n_files++;
    unsigned char len8[8];
    if (size < 8 || fread(len8, 1, 8, f) != 8)
        return bk_fail(err, BK_ERR_PARSE, "%s: truncated: %llu bytes, shorter than the 8-byte header length", path,
                       (unsigned long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n > BK_ST_MAX_HEADER || n > size - 8)
        return bk_fail(err, BK_ERR_PARSE, "%s: header length %llu: the file holds %llu bytes after it (at most %u)",
                       path, (unsigned long long)n, (unsigned long long)(size - 8), BK_ST_MAX_HEADER);
    char *text = malloc((size_t)n + 1);
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "%s: out of memory for a header of %llu bytes", path, (unsigned long long)n);
    if (fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        return bk_fail(err, BK_ERR_IO, "%s: cannot read the header", path);
    }
    text[n] = '\0';
    cJSON *root = cJSON_ParseWithLength(text, (size_t)n);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bk_fail(err, BK_ERR_PARSE, "%s: the header is not a JSON object", path);
    }
    const uint64_t data = size - 8 - n, base = 8 + n;
    rc = BK_OK;
    for (const cJSON *e = root->child; e && !rc; e = e->next) {
        if (!strcmp(e->string, "__metadata__"))
            continue;
        if (strlen(e->string) >= NAME_MAX_HF) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: a tensor name of %zu bytes (at most %d)", path, strlen(e->string),
                         NAME_MAX_HF - 1);
            break;
        }
        if (h->n == h->cap) {
            size_t cap = h->cap ? 2 * h->cap : 64;
            hf_tensor *t = realloc(h->t, cap * sizeof *t);
            if (!t) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the tensors of %s", path);
                break;
            }
            h->t = t, h->cap = cap;
        }
        hf_tensor *t = &h->t[h->n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", e->string);
        t->file = file;
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        uint64_t b = 0, end = 0;
        if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || cJSON_GetArraySize(offsets) != 2 ||
            !json_u64(cJSON_GetArrayItem(offsets, 0), &b) || !json_u64(cJSON_GetArrayItem(offsets, 1), &end) ||
            end < b) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': expected dtype, shape and data_offsets [begin, end]",
                         path, t->name);
            break;
        }
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtype->valuestring);
        t->dtype = !strcmp(dtype->valuestring, "F32")    ? DT_F32
                   : !strcmp(dtype->valuestring, "F16")  ? DT_F16
                   : !strcmp(dtype->valuestring, "BF16") ? DT_BF16
                                                         : DT_OTHER;
        t->ndim = cJSON_GetArraySize(shape);
        if (t->ndim > BK_ST_MAX_DIMS) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has %d dimensions (at most %d)", path, t->name, t->ndim,
                         BK_ST_MAX_DIMS);
            break;
        }
        t->count = 1;
        for (int d = 0; d < t->ndim && !rc; d++) {
            uint64_t v = 0;
            if (!json_u64(cJSON_GetArrayItem(shape, d), &v) || v > ((uint64_t)1 << 40) ||
                (v && (uint64_t)t->count > ((uint64_t)1 << 40) / v))
                rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': dimension %d of its shape is not a size", path,
                             t->name, d);
            t->shape[d] = (int64_t)v;
            t->count *= (int64_t)v;
        }
        if (rc)
            break;
        const uint64_t width = t->dtype == DT_F32 ? 4 : t->dtype == DT_OTHER ? 0 : 2;
        if (width && end - b != (uint64_t)t->count * width) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' (%s) holds %llu bytes; its shape needs %llu", path,
                         t->name, t->dtype_name, (unsigned long long)(end - b),
                         (unsigned long long)((uint64_t)t->count * width));
            break;
        }
        if (end > data) {
            rc = bk_fail(err, BK_ERR_PARSE,
                         "%s: truncated: tensor '%s' ends at byte %llu of the data, the file holds %llu data bytes",
                         path, t->name, (unsigned long long)end, (unsigned long long)data);
            break;
        }
        t->offset = base + b;
        for (size_t i = 0; i < h->n && !rc; i++)
            if (!strcmp(h->t[i].name, t->name))
                rc = bk_fail(err, BK_ERR_PARSE, "tensor '%s' is in both %s and %s", t->name, h->paths[h->t[i].file],
                             path);
        h->n++;
    }
    cJSON_Delete(root);
    return rc;
}

/* model.safetensors, or the shards model.safetensors.index.json names (each tensor of its weight_map must be
 * in the shard it names). */
static int open_files(const char *dir, hf_files *h, bk_error *err)
{
    memset(h, 0, sizeof *h);
    char path[PATH_MAX_HF];
    struct stat sb;
    int rc = join(path, dir, "model.safetensors", err);
    if (rc)
        return rc;
    if (stat(path, &sb) == 0)
        return read_header(h, path, err);
    if ((rc = join(path, dir, "model.safetensors.index.json", err)))
        return rc;
    if (stat(path, &sb) != 0)
        return bk_fail(err, BK_ERR_IO,
                       "%s: no model.safetensors and no model.safetensors.index.json (import reads safetensors "
                       "weights; a pytorch_model.bin is not read)",
                       dir);
    cJSON *index = NULL;
    if ((rc = read_json(path, "safetensors index", &index, err)))
        return rc;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    if (!cJSON_IsObject(map) || !map->child) {
        cJSON_Delete(index);
        return bk_fail(err, BK_ERR_PARSE, "%s: expected a non-empty object 'weight_map' (tensor name: shard file)",
                       path);
    }
    for (const cJSON *e = map->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') ||
            !strcmp(e->valuestring, "..")) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: weight_map['%s']: expected the name of a file in the directory",
                         path, e->string);
            break;
        }
        int seen = 0; /* a shard named before */
        for (const cJSON *p = map->child; p != e && !seen; p = p->next)
            seen = !strcmp(p->valuestring, e->valuestring);
        if (seen)
            continue;
        char shard[PATH_MAX_HF];
        if ((rc = join(shard, dir, e->valuestring, err)))
            break;
        if (stat(shard, &sb) != 0) {
            rc = bk_fail(err, BK_ERR_IO, "%s: shard '%s' (of tensor '%s') is not in the directory", path,
                         e->valuestring, e->string);
            break;
        }
        rc = read_header(h, shard, err);
    }
    for (const cJSON *e = map->child; e && !rc; e = e->next) {
        size_t i = 0;
        while (i < h->n && strcmp(h->t[i].name, e->string))
            i++;
        const char *in = i < h->n ? strrchr(h->paths[h->t[i].file], '/') + 1 : NULL;
        if (!in || strcmp(in, e->valuestring))
            rc = bk_fail(err, BK_ERR_PARSE, "%s: weight_map puts tensor '%s' in %s, which does not hold it", path,
                         e->string, e->valuestring);
    }
    cJSON_Delete(index);
    return rc;
}

/* The values of a tensor as fp32 (F16 and BF16 widen exactly). */
static int read_values(const hf_files *h, const hf_tensor *t, float *dst, bk_error *err)
{
    const char *path = h->paths[t->file];
    if (t->dtype == DT_OTHER)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; import reads F32, F16 and BF16", path,
                       t->name, t->dtype_name);
    const size_t width = t->dtype == DT_F32 ? 4 : 2, bytes = (size_t)t->count * width;
    unsigned char *raw = t->dtype == DT_F32 ? (unsigned char *)dst : malloc(bytes ? bytes : 1);
    if (!raw)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for tensor '%s'", t->name);
    FILE *f = h->f[t->file];
    int ok = fseeko(f, (off_t)t->offset, SEEK_SET) == 0 && fread(raw, 1, bytes, f) == bytes;
    if (ok && t->dtype != DT_F32)
        for (int64_t i = 0; i < t->count; i++) {
            const uint16_t u = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
            dst[i] = t->dtype == DT_F16 ? bk_f16_value(u) : bk_bf16_value(u);
        }
    if (raw != (unsigned char *)dst)
        free(raw);
    if (!ok)
        return bk_fail(err, BK_ERR_IO, "%s: cannot read tensor '%s' (the file changed while read?)", path, t->name);
    return BK_OK;
}

/* ---- config.json ---- */

static const cJSON *cfg_item(const cJSON *c, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer in [lo, hi]; absent or null: def, or with def < 0 an error. */
static int cfg_int(const char *path, const cJSON *c, const char *key, int64_t def, int64_t lo, int64_t hi, int *out,
                   bk_error *err)
{
    const cJSON *it = cfg_item(c, key);
    if (!it) {
        if (def < 0)
            return bk_fail(err, BK_ERR_PARSE, "%s: no '%s'", path, key);
        *out = (int)def;
        return BK_OK;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < (double)lo ||
        it->valuedouble > (double)hi)
        return bk_fail(err, BK_ERR_PARSE, "%s: '%s': expected an integer in [%lld, %lld]", path, key, (long long)lo,
                       (long long)hi);
    *out = (int)it->valuedouble;
    return BK_OK;
}

/* A positive finite number; absent or null: def. */
static int cfg_num(const char *path, const cJSON *c, const char *key, double def, double *out, bk_error *err)
{
    const cJSON *it = cfg_item(c, key);
    *out = it ? it->valuedouble : def;
    if ((it && !cJSON_IsNumber(it)) || !(*out > 0.0 && isfinite(*out)))
        return bk_fail(err, BK_ERR_PARSE, "%s: '%s': expected a positive number", path, key);
    return BK_OK;
}

static int cfg_bool(const char *path, const cJSON *c, const char *key, int def, int *out, bk_error *err)
{
    const cJSON *it = cfg_item(c, key);
    if (it && !cJSON_IsBool(it))
        return bk_fail(err, BK_ERR_PARSE, "%s: '%s': expected true or false", path, key);
    *out = it ? cJSON_IsTrue(it) : def;
    return BK_OK;
}

static int cfg_str(const char *path, const cJSON *c, const char *key, const char *def, const char **out, bk_error *err)
{
    const cJSON *it = cfg_item(c, key);
    if (it && !cJSON_IsString(it))
        return bk_fail(err, BK_ERR_PARSE, "%s: '%s': expected a string", path, key);
    *out = it ? it->valuestring : def;
    return BK_OK;
}

/* The rope term of a llama model: its plugin options, from rope_theta and rope_scaling. */
typedef struct hf_rope {
    char scaling[8]; /* "none", "pi", "yarn" */
    double factor, beta_fast, beta_slow, attn_factor;
    int original_length;
} hf_rope;

/* The rotary scaling: transformers 4.x's 'rope_scaling' (beside a top-level 'rope_theta'), or 5.x's
 * 'rope_parameters', which holds rope_theta itself and YaRN's original_max_position_embeddings (and may say
 * truncate); both mean the same computation (modeling_rope_utils). *base is rope_theta, replaced by the
 * one in rope_parameters. */
static int read_rope_scaling(const char *path, const cJSON *c, int context, hf_rope *r, double *base, bk_error *err)
{
    snprintf(r->scaling, sizeof r->scaling, "none");
    const cJSON *params = cfg_item(c, "rope_parameters"), *old = cfg_item(c, "rope_scaling");
    if (params && old)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: both 'rope_parameters' (transformers 5) and 'rope_scaling' (transformers 4): expected "
                       "one of them",
                       path);
    const int v5 = params != NULL;
    const char *what = v5 ? "rope_parameters" : "rope_scaling";
    const cJSON *rs = v5 ? params : old;
    if (!rs)
        return BK_OK;
    if (!cJSON_IsObject(rs))
        return bk_fail(err, BK_ERR_PARSE, "%s: '%s': expected an object or null", path, what);
    const char *type = NULL;
    int rc = cfg_str(path, rs, "rope_type", NULL, &type, err);
    if (!rc && !type)
        rc = cfg_str(path, rs, "type", NULL, &type, err);
    if (!rc && v5 && cfg_item(c, "rope_theta")) {
        double top = 0.0, inner = 0.0;
        if (!(rc = cfg_num(path, c, "rope_theta", 0.0, &top, err)) &&
            !(rc = cfg_num(path, rs, "rope_theta", top, &inner, err)) && top != inner)
            return bk_fail(err, BK_ERR_PARSE, "%s: rope_theta %.17g beside rope_parameters' rope_theta %.17g", path,
                           top, inner);
    }
    if (!rc && v5)
        rc = cfg_num(path, rs, "rope_theta", *base, base, err);
    if (rc)
        return rc;
    if (!type)
        return bk_fail(err, BK_ERR_PARSE, "%s: '%s' has no 'rope_type' (or 'type')", path, what);
    if (!strcmp(type, "default") && v5) {
        for (const cJSON *e = rs->child; e; e = e->next)
            if (strcmp(e->string, "rope_type") && strcmp(e->string, "type") && strcmp(e->string, "rope_theta"))
                return bk_fail(err, BK_ERR_UNSUPPORTED,
                               "%s: rope_parameters '%s' of type 'default': import reads rope_theta there, not "
                               "this key",
                               path, e->string);
        return BK_OK;
    }
    if (!strcmp(type, "default"))
        return BK_OK;
    if (strcmp(type, "linear") && strcmp(type, "yarn"))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: %s type '%s': the rope plugin has no such scaling (import maps 'linear' onto "
                       "its \"pi\" and 'yarn' onto its \"yarn\"%s)",
                       path, what, type,
                       !strcmp(type, "dynamic") ? "; transformers' dynamic NTK recomputes the base as "
                                                  "base ((factor length / L) - (factor - 1))^(d / (d - 2)), the "
                                                  "plugin's \"ntk\" with factor 0 as base (length / L)^(d / (d - 2))"
                                                : "");
    const int yarn = !strcmp(type, "yarn");
    for (const cJSON *e = rs->child; e; e = e->next) {
        static const char *const linear_keys[] = {"rope_type", "type", "factor", "rope_theta"};
        static const char *const yarn_keys[] = {"rope_type",        "type", "factor", "beta_fast", "beta_slow",
                                                "attention_factor", "rope_theta", "original_max_position_embeddings",
                                                "truncate"};
        const char *const *keys = yarn ? yarn_keys : linear_keys;
        /* rope_theta, original_max_position_embeddings and truncate are read in rope_parameters only */
        const size_t n = yarn ? (v5 ? sizeof yarn_keys / sizeof *keys : 6) : (v5 ? 4 : 3);
        size_t k = 0;
        while (k < n && strcmp(keys[k], e->string))
            k++;
        if (k == n)
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s '%s' of type '%s': import maps %s onto the rope plugin, not "
                           "this key",
                           path, what, e->string, type,
                           yarn ? (v5 ? "factor, beta_fast, beta_slow, attention_factor, "
                                        "original_max_position_embeddings and truncate"
                                      : "factor, beta_fast, beta_slow and attention_factor")
                                : "factor");
    }
    if ((rc = cfg_num(path, rs, "factor", NAN, &r->factor, err)))
        return rc;
    if (!(r->factor >= 1.0))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s factor %g: expected at least 1", path, what, r->factor);
    if (!yarn) {
        snprintf(r->scaling, sizeof r->scaling, "pi");
        return BK_OK;
    }
    snprintf(r->scaling, sizeof r->scaling, "yarn");
    /* transformers' yarn: L = original_max_position_embeddings (4.x: max_position_embeddings); the plugin
     * multiplies q and k by (0.1 ln s + 1) attn_factor where transformers multiplies them by
     * attention_factor (default 0.1 ln s + 1); its correction range is floored and ceiled (truncate) */
    const double mscale = bk_hf_yarn_mscale(r->factor);
    double af;
    int truncate = 1;
    if ((rc = cfg_num(path, rs, "beta_fast", BK_HF_YARN_BETA_FAST, &r->beta_fast, err)) ||
        (rc = cfg_num(path, rs, "beta_slow", BK_HF_YARN_BETA_SLOW, &r->beta_slow, err)) ||
        (rc = cfg_num(path, rs, "attention_factor", 0.1 * log(r->factor) + 1.0, &af, err)) ||
        (rc = cfg_int(path, rs, "original_max_position_embeddings", context, 1, 1 << 24, &r->original_length, err)) ||
        (rc = cfg_bool(path, rs, "truncate", 1, &truncate, err)))
        return rc;
    if (!truncate)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: rope_parameters truncate = false: the rope plugin's YaRN floors and ceils its ramp's "
                       "ends, as transformers' truncate = true",
                       path);
    r->attn_factor = af / mscale;
    return BK_OK;
}

/* What config.json says beyond the summary's shape: the family, and a llama model's rope term. */
typedef struct hf_model {
    int gpt2;
    hf_rope rope;
} hf_model;

/* The architecture and the shape from config.json, each field checked; what the engine cannot compute is
 * refused by name. */

static int read_config(const char *path, const cJSON *c, bk_import_summary *s, hf_model *m,
                       bk_error *err)
{
    memset(s, 0, sizeof *s);
    memset(m, 0, sizeof *m);
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    if (!cJSON_IsArray(archs) || cJSON_GetArraySize(archs) != 1 || !cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
        return bk_fail(err, BK_ERR_PARSE, "%s: expected 'architectures': [one class name]", path);
    const char *arch = cJSON_GetArrayItem(archs, 0)->valuestring;
    snprintf(s->architecture, sizeof s->architecture, "%s", arch);
    const char *name = NULL;
    if (cfg_str(path, c, "_name_or_path", "", &name, err) == BK_OK)
        snprintf(s->name, sizeof s->name, "%s", name);
    int rc;
    const int llama = !strcmp(arch, "LlamaForCausalLM"), mistral = !strcmp(arch, "MistralForCausalLM");
    const int qwen3 = !strcmp(arch, "Qwen3ForCausalLM"); /* LLaMA blocks with QK-norm */
    m->gpt2 = !strcmp(arch, "GPT2LMHeadModel");
    if (!strncmp(arch, "Qwen2", 5))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: architecture '%s': its q, k and v projections have biases, which the llama family "
                       "does not have",
                       path, arch);
    if (!llama && !mistral && !qwen3 && !m->gpt2)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: architecture '%s': import reads LlamaForCausalLM, MistralForCausalLM (without a sliding "
                       "window), Qwen3ForCausalLM (without a sliding window) and GPT2LMHeadModel",
                       path, arch);
    if (m->gpt2) {
        snprintf(s->family, sizeof s->family, "gpt2");
        const char *act = NULL;
        int n_inner = 0, scale = 0, by_layer = 0, cross = 0;
        double eps = 0;
        if ((rc = cfg_int(path, c, "n_layer", -1, 1, 1024, &s->layers, err)) ||
            (rc = cfg_int(path, c, "n_embd", -1, 2, 65536, &s->dim, err)) ||
            (rc = cfg_int(path, c, "n_head", -1, 1, 1024, &s->heads, err)) ||
            (rc = cfg_int(path, c, "n_positions", -1, 1, 1 << 24, &s->context, err)) ||
            (rc = cfg_int(path, c, "vocab_size", -1, 2, 1 << 24, &s->vocab, err)) ||
            (rc = cfg_int(path, c, "n_inner", 0, 1, 1 << 22, &n_inner, err)) ||
            (rc = cfg_num(path, c, "layer_norm_epsilon", 1e-5, &eps, err)) ||
            (rc = cfg_str(path, c, "activation_function", "gelu_new", &act, err)) ||
            (rc = cfg_bool(path, c, "scale_attn_weights", 1, &scale, err)) ||
            (rc = cfg_bool(path, c, "scale_attn_by_inverse_layer_idx", 0, &by_layer, err)) ||
            (rc = cfg_bool(path, c, "add_cross_attention", 0, &cross, err)) ||
            (rc = cfg_bool(path, c, "tie_word_embeddings", 1, &s->tied, err)))
            return rc;
        if (s->dim % s->heads || s->dim % 2)
            return bk_fail(err, BK_ERR_PARSE, "%s: n_embd %d: expected an even width that n_head %d divides", path,
                           s->dim, s->heads);
        s->kv_heads = s->heads, s->head_dim = s->dim / s->heads, s->ffn_dim = 4 * s->dim, s->norm_eps = eps;
        if (n_inner && n_inner != 4 * s->dim)
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: n_inner = %d: the gpt2 family's MLP is 4 x n_embd = %d", path,
                           n_inner, 4 * s->dim);
        if (fabs(eps - 1e-5) > 1e-12)
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: layer_norm_epsilon = %g: the gpt2 family's LayerNorm epsilon is 1e-5", path, eps);
        if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: activation_function '%s': the gpt2 family's MLP uses GELU's tanh approximation "
                           "(gelu_new, gelu_pytorch_tanh)",
                           path, act);
        if (!scale || by_layer)
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: %s: the engine scales the attention's scores by 1/sqrt(head_dim) in every layer",
                           path, !scale ? "scale_attn_weights = false" : "scale_attn_by_inverse_layer_idx = true");
        if (cross)
            return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: add_cross_attention = true: the engine has no cross-attention",
                           path);
        if (!s->tied)
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: tie_word_embeddings = false: the gpt2 family's output head is its token embedding",
                           path);
        return BK_OK;
    }
    snprintf(s->family, sizeof s->family, "llama");
    const char *act = NULL;
    int attention_bias = 0, mlp_bias = 0;
    double partial = 1.0;
    if ((rc = cfg_int(path, c, "num_hidden_layers", -1, 1, 1024, &s->layers, err)) ||
        (rc = cfg_int(path, c, "hidden_size", -1, 1, 65536, &s->dim, err)) ||
        (rc = cfg_int(path, c, "intermediate_size", -1, 1, 1 << 22, &s->ffn_dim, err)) ||
        (rc = cfg_int(path, c, "num_attention_heads", -1, 1, 1024, &s->heads, err)) ||
        (rc = cfg_int(path, c, "num_key_value_heads", s->heads, 1, 1024, &s->kv_heads, err)) ||
        (rc = cfg_int(path, c, "vocab_size", -1, 2, 1 << 24, &s->vocab, err)) ||
        (rc = cfg_int(path, c, "max_position_embeddings", mistral ? 4096 * 32 : 2048, 1, 1 << 24, &s->context, err)) ||
        (rc = cfg_num(path, c, "rms_norm_eps", 1e-6, &s->norm_eps, err)) ||
        (rc = cfg_num(path, c, "rope_theta", 10000.0, &s->rope_base, err)) ||
        (rc = cfg_bool(path, c, "tie_word_embeddings", 0, &s->tied, err)) ||
        (rc = cfg_bool(path, c, "attention_bias", 0, &attention_bias, err)) ||
        (rc = cfg_bool(path, c, "mlp_bias", 0, &mlp_bias, err)) ||
        (rc = cfg_str(path, c, "hidden_act", "silu", &act, err)) ||
        (rc = cfg_num(path, c, "partial_rotary_factor", 1.0, &partial, err)))
        return rc;
    /* transformers' Qwen3Config defaults head_dim to 128, the others to hidden_size / heads */
    const int head_dim = qwen3 ? 128 : s->dim % s->heads ? -1 : s->dim / s->heads;
    if ((rc = cfg_int(path, c, "head_dim", head_dim, 1, 4096, &s->head_dim, err)))
        return rc;
    s->qk_norm = qwen3;
    int sliding = 0;
    if (qwen3 && (rc = cfg_bool(path, c, "use_sliding_window", 0, &sliding, err)))
        return rc;
    if (sliding)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: use_sliding_window = true: import reads Qwen3ForCausalLM with full attention in every "
                       "layer",
                       path);
    if (attention_bias || mlp_bias)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: %s = true: the llama family has no biases", path,
                       attention_bias ? "attention_bias" : "mlp_bias");
    if (strcmp(act, "silu"))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: hidden_act '%s': the llama family's MLP is SwiGLU (silu)", path,
                       act);
    if (partial != 1.0)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: partial_rotary_factor = %g: the rope term rotates whole heads", path, partial);
    if (mistral) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "sliding_window");
        if (!cJSON_IsNull(w))
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: sliding_window %s: import reads MistralForCausalLM with sliding_window = null (full "
                           "attention)",
                           path, w ? "is set" : "is absent (transformers' default is 4096)");
    }
    if (s->heads % s->kv_heads || s->head_dim % 2)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: %d heads with %d key/value heads of %d: expected key/value heads dividing the heads and "
                       "an even head size",
                       path, s->heads, s->kv_heads, s->head_dim);
    return read_rope_scaling(path, c, s->context, &m->rope, &s->rope_base, err);
}


static int experiment_text(const char *dir, const bk_import_summary *s, const hf_model *m, char *text, size_t size,
                           bk_error *err)
{
    size_t at = 0, dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    size_t b = dl;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    int rc = bk_append(text, size, &at, err, "the imported experiment",
                       "# imported by biaskit import from %.*s (HF transformers, %s%s%s)\n",
                       (int)(dl - b), dir + b, s->architecture, s->name[0] ? ": " : "", s->name);
    if (rc)
        return rc;
    if (m->gpt2)
        return bk_append(text, size, &at, err, "the imported experiment",
                         "[model]\nfamily = \"gpt2\"\nlayers = %d\nheads = %d\ndim = %d\nvocab = %d\n\n"
                         "[train]\nlength = %d\n\n[run]\ndevice = \"cpu\"\n\n[[term]]\nplugin = \"ape\"\n"
                         "variant = \"learned\"\n"
                         "max_positions = %d\n",
                         s->layers, s->heads, s->dim, s->vocab, s->context, s->context);
    rc = bk_append(text, size, &at, err, "the imported experiment",
                   "[model]\nfamily = \"llama\"\nlayers = %d\nheads = %d\nkv_heads = %d\nhead_dim = %d\ndim = %d\n"
                   "ffn_dim = %d\nvocab = %d\nnorm_eps = %.17g\ntied = %s\n%s\n[train]\nlength = %d\n\n[run]\n"
                   "device = \"cpu\"\n\n[[term]]\nplugin = \"rope\"\nbase = %.17g\n",
                   s->layers, s->heads, s->kv_heads, s->head_dim, s->dim, s->ffn_dim, s->vocab, s->norm_eps,
                   s->tied ? "true" : "false", s->qk_norm ? "qk_norm = true\n" : "", s->context, s->rope_base);
    if (!rc && strcmp(m->rope.scaling, "none"))
        rc = bk_append(text, size, &at, err, "the imported experiment",
                       "scaling = \"%s\"\nfactor = %.17g\n", m->rope.scaling, m->rope.factor);
    if (!rc && !strcmp(m->rope.scaling, "yarn"))
        rc = bk_append(text, size, &at, err, "the imported experiment",
                       "original_length = %d\nbeta_fast = %.17g\nbeta_slow = %.17g\nattn_factor = %.17g\n",
                       m->rope.original_length, m->rope.beta_fast, m->rope.beta_slow, m->rope.attn_factor);
    return rc;
}

static int load_config(const char *dir, cJSON **cfg, char *path, bk_error *err)
{
    int rc = join(path, dir, "config.json", err);
    struct stat sb;
    if (!rc && stat(path, &sb) != 0)
        rc = bk_fail(err, BK_ERR_IO, "%s: no config.json (import reads HF transformers directories: config.json and "
                     "model.safetensors or its shards)", dir);
    return rc ? rc : read_json(path, "config.json", cfg, err);
}

int bk_import_hf_experiment(const char *dir, char *text, size_t size, bk_import_summary *s, bk_error *err)
{
    cJSON *cfg = NULL;
    char path[PATH_MAX_HF];
    hf_model m;
    int rc = load_config(dir, &cfg, path, err);
    if (!rc)
        rc = read_config(path, cfg, s, &m, err);
    cJSON_Delete(cfg);
    return rc ? rc : experiment_text(dir, s, &m, text, size, err);
}

/* ---- the tensors ---- */

/* Where one file tensor goes: its name after the layer's prefix, its shape in the file (rows 0: a vector of
 * cols), and, for a GPT-2 Conv1D weight stored (in, out), `transpose`: the engine's matrix is (out, in). */
typedef struct slot {
    const char *part;
    int64_t rows, cols;
    int transpose;
    float *dst;    /* layer 0's place (NULL: compared with `same`, not placed) */
    size_t stride; /* floats from one layer's place to the next */
} slot;

typedef struct plan {
    const char *prefix;       /* of the canonical names in messages: "model." or "transformer." */
    const char *layer_prefix; /* "layers." or "h." */
    slot global[5];
    int n_global;
    slot layer[12];
    int n_layer;
    const char *ignored[2]; /* per-layer buffers that are not weights */
    int n_ignored;
    int L;
} plan;

static void llama_plan(bk_gpt *g, plan *p)
{
    const int64_t C = g->C, A = g->A, F = g->F, V = g->V, KVd = (int64_t)g->KV * g->hd, R = A + 2 * KVd;
    const bk_llama_params *w = &g->lp;
    memset(p, 0, sizeof *p);
    p->prefix = "model.", p->layer_prefix = "layers.", p->L = g->L;
    slot gl[] = {{"embed_tokens.weight", V, C, 0, w->wte, 0},
                 {"norm.weight", 0, C, 0, w->rmsfw, 0},
                 {"lm_head.weight", V, C, 0, g->tied ? NULL : w->lmhead, 0}};
    slot ly[] = {{"input_layernorm.weight", 0, C, 0, w->rms1w, (size_t)C},
                 {"self_attn.q_proj.weight", A, C, 0, w->qkvw, (size_t)(R * C)},
                 {"self_attn.k_proj.weight", KVd, C, 0, w->qkvw + A * C, (size_t)(R * C)},
                 {"self_attn.v_proj.weight", KVd, C, 0, w->qkvw + (A + KVd) * C, (size_t)(R * C)},
                 {"self_attn.o_proj.weight", C, A, 0, w->attprojw, (size_t)(C * A)},
                 {"post_attention_layernorm.weight", 0, C, 0, w->rms2w, (size_t)C},
                 {"mlp.gate_proj.weight", F, C, 0, w->fcw, (size_t)(2 * F * C)},
                 {"mlp.up_proj.weight", F, C, 0, w->fcw + F * C, (size_t)(2 * F * C)},
                 {"mlp.down_proj.weight", C, F, 0, w->fcprojw, (size_t)(C * F)},
                 {"self_attn.q_norm.weight", 0, g->hd, 0, w->qnormw, (size_t)g->hd}, /* QK-norm only */
                 {"self_attn.k_norm.weight", 0, g->hd, 0, w->knormw, (size_t)g->hd}};
    memcpy(p->global, gl, sizeof gl), p->n_global = 3;
    memcpy(p->layer, ly, sizeof ly), p->n_layer = g->qk_norm ? 11 : 9;
    p->ignored[0] = "self_attn.rotary_emb.inv_freq", p->n_ignored = 1;
}

static void gpt2_plan(bk_gpt *g, float *wpe, int positions, plan *p)
{
    const int64_t C = g->C, V = g->V;
    const bk_gpt_params *w = &g->p;
    memset(p, 0, sizeof *p);
    p->prefix = "transformer.", p->layer_prefix = "h.", p->L = g->L;
    slot gl[] = {{"wte.weight", V, C, 0, w->wte, 0},
                 {"wpe.weight", positions, C, 0, wpe, 0},
                 {"ln_f.weight", 0, C, 0, w->lnfw, 0},
                 {"ln_f.bias", 0, C, 0, w->lnfb, 0},
                 {"lm_head.weight", V, C, 0, NULL, 0}};
    slot ly[] = {{"ln_1.weight", 0, C, 0, w->ln1w, (size_t)C},
                 {"ln_1.bias", 0, C, 0, w->ln1b, (size_t)C},
                 {"attn.c_attn.weight", C, 3 * C, 1, w->qkvw, (size_t)(3 * C * C)},
                 {"attn.c_attn.bias", 0, 3 * C, 0, w->qkvb, (size_t)(3 * C)},
                 {"attn.c_proj.weight", C, C, 1, w->attprojw, (size_t)(C * C)},
                 {"attn.c_proj.bias", 0, C, 0, w->attprojb, (size_t)C},
                 {"ln_2.weight", 0, C, 0, w->ln2w, (size_t)C},
                 {"ln_2.bias", 0, C, 0, w->ln2b, (size_t)C},
                 {"mlp.c_fc.weight", C, 4 * C, 1, w->fcw, (size_t)(4 * C * C)},
                 {"mlp.c_fc.bias", 0, 4 * C, 0, w->fcb, (size_t)(4 * C)},
                 {"mlp.c_proj.weight", 4 * C, C, 1, w->fcprojw, (size_t)(C * 4 * C)},
                 {"mlp.c_proj.bias", 0, C, 0, w->fcprojb, (size_t)C}};
    memcpy(p->global, gl, sizeof gl), p->n_global = 5;
    memcpy(p->layer, ly, sizeof ly), p->n_layer = 12;
    p->ignored[0] = "attn.bias", p->ignored[1] = "attn.masked_bias", p->n_ignored = 2; /* causal-mask buffers */
}

/* The slot of a file tensor (*layer -1 for a global one), or -1; *ignored for a buffer that is not a weight. */
static int find_slot(const plan *p, const char *name, int *layer, int *ignored)
{
    *layer = -1, *ignored = 0;
    if (!strcmp(name, "lm_head.weight"))
        for (int i = 0; i < p->n_global; i++)
            if (!strcmp(p->global[i].part, name))
                return i;
    const size_t pl = strlen(p->prefix);
    const char *key = strncmp(name, p->prefix, pl) ? name : name + pl; /* the prefix is optional */
    for (int i = 0; i < p->n_global; i++)
        if (strcmp(p->global[i].part, "lm_head.weight") && !strcmp(p->global[i].part, key))
            return i;
    const size_t ll = strlen(p->layer_prefix);
    if (strncmp(key, p->layer_prefix, ll))
        return -1;
    char *end = NULL;
    const char *num = key + ll;
    if (*num < '0' || *num > '9')
        return -1;
    const long l = strtol(num, &end, 10);
    if (*end != '.' || l >= p->L || (num[0] == '0' && end != num + 1))
        return -1;
    *layer = (int)l;
    for (int i = 0; i < p->n_ignored; i++)
        if (!strcmp(end + 1, p->ignored[i])) {
            *ignored = 1;
            return -1;
        }
    for (int i = 0; i < p->n_layer; i++)
        if (!strcmp(p->layer[i].part, end + 1))
            return i;
    return -1;
}

static void shape_text(char *buf, size_t size, int64_t rows, int64_t cols)
{
    if (rows)
        snprintf(buf, size, "[%lld, %lld]", (long long)rows, (long long)cols);
    else
        snprintf(buf, size, "[%lld]", (long long)cols);
}

/* Every tensor of the files into the model's place for it (plan p), or a refusal naming it; then every place
 * must have been filled. A tied head stored as well must equal the embedding. */
static int place_all(const hf_files *h, const plan *p, int vocab, const float *embedding, bk_import_summary *s,
                     bk_error *err)
{
    const int n_slots = p->n_global + p->n_layer * p->L;
    unsigned char *done = calloc((size_t)n_slots, 1);
    if (!done)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    float *scratch = NULL;
    size_t scratch_n = 0;
    const hf_tensor *head = NULL; /* a tied model's stored head */
    int rc = BK_OK;
    for (size_t i = 0; i < h->n && !rc; i++) { /* the vocabulary first: the head's rows would say it less clearly */
        const hf_tensor *t = &h->t[i];
        int layer, ignored;
        if (find_slot(p, t->name, &layer, &ignored) == 0 && layer < 0 && t->ndim == 2 &&
            t->shape[1] == p->global[0].cols && t->shape[0] != vocab)
            rc = bk_fail(err, BK_ERR_PARSE,
                         "%s: tensor '%s' has %lld rows but config.json's vocab_size is %d: the vocabulary must be "
                         "the embedding's rows",
                         h->paths[t->file], t->name, (long long)t->shape[0], vocab);
    }
    for (size_t i = 0; i < h->n && !rc; i++) {
        const hf_tensor *t = &h->t[i];
        const char *path = h->paths[t->file];
        int layer, ignored;
        const int k = find_slot(p, t->name, &layer, &ignored);
        if (ignored)
            continue;
        if (k < 0) {
            const size_t nl = strlen(t->name);
            rc = bk_fail(err, BK_ERR_UNSUPPORTED, "%s: tensor '%s' has no place in a %s model of %d layers%s", path,
                         t->name, s->family, p->L,
                         nl > 5 && !strcmp(t->name + nl - 5, ".bias") && !strcmp(s->family, "llama")
                             ? " (the llama family has no biases)"
                             : "");
            break;
        }
        const slot *sl = layer < 0 ? &p->global[k] : &p->layer[k];
        const int idx = layer < 0 ? k : p->n_global + layer * p->n_layer + k;
        if (done[idx]) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': its place is filled twice (with and without the '%s' "
                         "prefix?)", path, t->name, p->prefix);
            break;
        }
        done[idx] = 1;
        const int64_t want0 = sl->rows ? sl->rows : sl->cols;
        const int want_nd = sl->rows ? 2 : 1;
        if (t->ndim != want_nd || t->shape[0] != want0 || (want_nd == 2 && t->shape[1] != sl->cols)) {
            char want[48], got[96];
            shape_text(want, sizeof want, sl->rows, sl->cols);
            bk_st_format_shape(got, sizeof got, t->shape, t->ndim);
            rc = bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has shape %s; expected %s", path, t->name, got, want);
            break;
        }
        s->tensors++;
        s->half += t->dtype == DT_F16 || t->dtype == DT_BF16;
        if (!sl->dst) { /* the stored copy of a tied head: compared once the embedding is in */
            head = t;
            continue;
        }
        float *dst = sl->dst + (layer < 0 ? 0 : (size_t)layer * sl->stride);
        if (!sl->transpose) {
            rc = read_values(h, t, dst, err);
            continue;
        }
        if ((size_t)t->count > scratch_n) {
            free(scratch);
            scratch_n = (size_t)t->count;
            if (!(scratch = malloc(scratch_n * sizeof *scratch))) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for tensor '%s'", t->name);
                break;
            }
        }
        if ((rc = read_values(h, t, scratch, err)))
            break;
        const int64_t in = sl->rows, out = sl->cols; /* Conv1D: y = x W, W of (in, out) */
        for (int64_t o = 0; o < out; o++)
            for (int64_t j = 0; j < in; j++)
                dst[o * in + j] = scratch[j * out + o];
    }
    for (int i = 0; i < n_slots && !rc; i++) {
        if (done[i])
            continue;
        const slot *sl = i < p->n_global ? &p->global[i] : &p->layer[(i - p->n_global) % p->n_layer];
        if (!sl->dst)
            continue; /* the tied head, which need not be stored */
        if (i < p->n_global)
            rc = bk_fail(err, BK_ERR_PARSE, "no tensor '%s%s' in the model's files", p->prefix, sl->part);
        else
            rc = bk_fail(err, BK_ERR_PARSE, "no tensor '%s%s%d.%s' in the model's files", p->prefix, p->layer_prefix,
                         (i - p->n_global) / p->n_layer, sl->part);
    }
    if (!rc && head) {
        free(scratch);
        scratch = malloc((size_t)head->count * sizeof *scratch);
        if (!scratch)
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for tensor '%s'", head->name);
        else if (!(rc = read_values(h, head, scratch, err)) &&
                 memcmp(scratch, embedding, (size_t)head->count * sizeof *scratch))
            rc = bk_fail(err, BK_ERR_UNSUPPORTED,
                         "%s: tensor '%s' differs from the token embedding, but the model is tied "
                         "(tie_word_embeddings)",
                         h->paths[head->file], head->name);
    }
    free(scratch);
    free(done);
    return rc;
}

/* DIR/tokenizer.json, when there is one, into the model (bk_import_tokenizer). */
static int carry_tokenizer(const char *dir, bk_lm *lm, bk_import_summary *s, bk_error *err)
{
    char path[PATH_MAX_HF];
    struct stat sb;
    int rc = join(path, dir, "tokenizer.json", err);
    if (rc)
        return rc;
    if (stat(path, &sb) != 0) {
        snprintf(s->tokenizer, sizeof s->tokenizer, "none (no tokenizer.json)");
        return BK_OK;
    }
    char *text = NULL;
    size_t len = 0;
    if ((rc = bk_file_read_all(path, "tokenizer", (uint64_t)1 << 30, &text, &len, err)))
        return rc;
    bk_bpe *t = NULL;
    rc = bk_bpe_from_hf_json(text, len, path, &t, err);
    free(text);
    return bk_import_tokenizer(rc, t, lm, s, err);
}

int bk_import_hf(const char *dir, const char *out, bk_import_summary *s, bk_error *err)
{
    char text[4096], path[PATH_MAX_HF];
    cJSON *cfg = NULL;
    hf_model m;
    int rc = load_config(dir, &cfg, path, err);
    if (!rc)
        rc = read_config(path, cfg, s, &m, err);
    cJSON_Delete(cfg);
    if (rc || (rc = experiment_text(dir, s, &m, text, sizeof text, err)))
        return rc;
    hf_files h;
    if ((rc = open_files(dir, &h, err))) {
        files_close(&h);
        return rc;
    }
    bk_lm lm;
    bk_adamw opt;
    memset(&opt, 0, sizeof opt);
    char source[PATH_MAX_HF + 32];
    snprintf(source, sizeof source, "%s (imported)", dir);
    if (bk_lm_open_text(&lm, text, source, ".", NULL, 0, err)) {
        files_close(&h);
        return bk_error_prefix(err, "%s: the imported experiment: ", dir);
    }
    bk_gpt *g = &lm.gpt;
    plan p;
    float *wpe = NULL;
    if (m.gpt2) { /* the learned positions are the ape term's table */
        const bk_term *ape = lm.terms.n == 1 ? &lm.terms.terms[0] : NULL;
        if (!ape || strcmp(ape->plugin->desc->name, "ape") || ape->n_copies != 1 ||
            ape->n_params != (int64_t)s->context * g->C)
            rc = bk_fail(err, BK_ERR_INTERNAL, "the imported experiment's ape term does not hold %d x %d positions",
                         s->context, g->C);
        else
            wpe = ape->theta;
        gpt2_plan(g, wpe, s->context, &p);
    } else
        llama_plan(g, &p);
    if (!rc && !(rc = bk_lm_register(&lm, &opt, err)) &&
        !(rc = place_all(&h, &p, s->vocab, m.gpt2 ? g->p.wte : g->lp.wte, s, err)) &&
        !(rc = carry_tokenizer(dir, &lm, s, err))) {
        s->parameters = g->n_params + (wpe ? (size_t)s->context * (size_t)g->C : 0);
        const bk_train_state st = {0, 0, 0, 0, NAN};
        rc = bk_checkpoint_save(out, &lm, &opt, &st, err);
    }
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    files_close(&h);
    return rc;
}
