/* GGUF v3 reading and dequantization (io/gguf.h). */
#define _POSIX_C_SOURCE 200809L
#include "io/gguf.h"

#include "util/file.h"
#include "util/half.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GGUF_VERSION 3
#define DEFAULT_ALIGNMENT 32
#define MAX_STRING (1u << 30)   /* a key or string value longer than this is a damaged file */
#define MAX_ENTRIES (1u << 24)  /* metadata entries, tensors, array elements per array of strings */

struct bk_gguf {
    char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    bk_gguf_kv *kv;
    size_t n_kv;
    bk_gguf_tensor *tensors;
    size_t n_tensors;
    uint64_t alignment, data_start;
};

/* ---- the cursor over the mapping ---- */

typedef struct cursor {
    const bk_gguf *g;
    size_t at;
    bk_error *err;
} cursor;

static int truncated(cursor *c, const char *what, uint64_t need)
{
    return bk_fail(c->err, BK_ERR_PARSE, "%s: truncated: %s needs %" PRIu64 " bytes at offset %zu, the file has %zu",
                   c->g->path, what, need, c->at, c->g->size);
}

static int take(cursor *c, void *out, size_t n, const char *what)
{
    if (n > c->g->size - c->at)
        return truncated(c, what, n);
    memcpy(out, c->g->map + c->at, n);
    c->at += n;
    return BK_OK;
}

static int take_u32(cursor *c, uint32_t *v, const char *what)
{
    uint8_t b[4] = {0, 0, 0, 0};
    int rc = take(c, b, 4, what);
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return rc;
}

static int take_u64(cursor *c, uint64_t *v, const char *what)
{
    uint32_t lo = 0, hi = 0;
    int rc = take_u32(c, &lo, what);
    if (!rc)
        rc = take_u32(c, &hi, what);
    *v = (uint64_t)hi << 32 | lo;
    return rc;
}

/* A GGUF string (u64 length, bytes) as a NUL-terminated copy. */
static int take_string(cursor *c, char **out, const char *what)
{
    uint64_t n;
    int rc = take_u64(c, &n, what);
    if (rc)
        return rc;
    if (n > MAX_STRING)
        return bk_fail(c->err, BK_ERR_PARSE, "%s: %s at offset %zu claims %" PRIu64 " bytes (at most %u)", c->g->path,
                       what, c->at - 8, n, MAX_STRING);
    if (n > c->g->size - c->at)
        return truncated(c, what, n);
    char *s = malloc((size_t)n + 1);
    if (!s)
        return bk_fail(c->err, BK_ERR_NOMEM, "%s: out of memory for %s", c->g->path, what);
    memcpy(s, c->g->map + c->at, (size_t)n);
    s[n] = '\0';
    c->at += (size_t)n;
    *out = s;
    return BK_OK;
}

/* Bytes of one scalar of metadata type t, 0 for strings, arrays and unknown types. */
static size_t scalar_bytes(uint32_t t)
{
    switch (t) {
    case BK_GGUF_U8:
    case BK_GGUF_I8:
    case BK_GGUF_BOOL: return 1;
    case BK_GGUF_U16:
    case BK_GGUF_I16: return 2;
    case BK_GGUF_U32:
    case BK_GGUF_I32:
    case BK_GGUF_F32: return 4;
    case BK_GGUF_U64:
    case BK_GGUF_I64:
    case BK_GGUF_F64: return 8;
    default: return 0;
    }
}

static uint64_t little(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

/* A scalar of type t at p into kv->num. */
static void read_scalar(bk_gguf_kv *kv, uint32_t t, const uint8_t *p)
{
    const uint64_t raw = little(p, scalar_bytes(t));
    switch (t) {
    case BK_GGUF_I8: kv->num.i = (int8_t)raw; break;
    case BK_GGUF_I16: kv->num.i = (int16_t)raw; break;
    case BK_GGUF_I32: kv->num.i = (int32_t)raw; break;
    case BK_GGUF_I64: kv->num.i = (int64_t)raw; break;
    case BK_GGUF_F32: {
        const uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, sizeof f);
        kv->num.f = f;
        break;
    }
    case BK_GGUF_F64: memcpy(&kv->num.f, &raw, sizeof kv->num.f); break;
    default: kv->num.u = raw; break;
    }
}

static int read_kv(cursor *c, bk_gguf_kv *kv, size_t index)
{
    char what[96];
    snprintf(what, sizeof what, "metadata entry %zu's key", index);
    int rc = take_string(c, &kv->key, what);
    uint32_t t = 0;
    if (!rc)
        rc = take_u32(c, &t, "a metadata value type");
    if (rc)
        return rc;
    kv->type = (bk_gguf_type)t;
    if (t == BK_GGUF_STRING)
        return take_string(c, &kv->str, kv->key);
    if (t != BK_GGUF_ARRAY) {
        const size_t n = scalar_bytes(t);
        if (!n)
            return bk_fail(c->err, BK_ERR_PARSE, "%s: metadata '%s' has value type %u (expected 0 .. 12)", c->g->path,
                           kv->key, t);
        if (n > c->g->size - c->at)
            return truncated(c, kv->key, n);
        read_scalar(kv, t, c->g->map + c->at);
        c->at += n;
        return BK_OK;
    }
    uint32_t et = 0;
    uint64_t count = 0;
    if ((rc = take_u32(c, &et, "an array's element type")) || (rc = take_u64(c, &count, "an array's length")))
        return rc;
    kv->elem = (bk_gguf_type)et;
    kv->count = count;
    if (et == BK_GGUF_STRING) {
        if (count > MAX_ENTRIES)
            return bk_fail(c->err, BK_ERR_PARSE, "%s: metadata '%s' is an array of %" PRIu64 " strings (at most %u)",
                           c->g->path, kv->key, count, MAX_ENTRIES);
        if (count > (c->g->size - c->at) / 8) /* each string takes at least its 8-byte length */
            return truncated(c, kv->key, count * 8);
        if (!(kv->strings = calloc(count ? (size_t)count : 1, sizeof *kv->strings)))
            return bk_fail(c->err, BK_ERR_NOMEM, "%s: out of memory for metadata '%s'", c->g->path, kv->key);
        for (uint64_t k = 0; k < count; k++)
            if ((rc = take_string(c, &kv->strings[k], kv->key)))
                return rc;
        return BK_OK;
    }
    const size_t n = scalar_bytes(et);
    if (!n)
        return bk_fail(c->err, BK_ERR_PARSE,
                       "%s: metadata '%s' is an array of element type %u (expected a number, bool or string type)",
                       c->g->path, kv->key, et);
    if (count > (c->g->size - c->at) / n)
        return truncated(c, kv->key, count * n);
    kv->items = c->g->map + c->at;
    c->at += (size_t)(count * n);
    return BK_OK;
}

/* ---- tensor types ---- */

typedef struct type_info {
    uint32_t type;
    const char *name;
    uint32_t block, block_bytes;
} type_info;

static const type_info types[] = {
    {BK_GGML_F32, "F32", 1, 4},    {BK_GGML_F16, "F16", 1, 2},    {BK_GGML_BF16, "BF16", 1, 2},
    {BK_GGML_Q8_0, "Q8_0", 32, 34}, {BK_GGML_Q4_0, "Q4_0", 32, 18}, {BK_GGML_Q4_1, "Q4_1", 32, 20},
};

static const type_info *type_of(uint32_t type)
{
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].type == type)
            return &types[i];
    return NULL;
}

const char *bk_gguf_type_name(uint32_t type, char *buf, size_t size)
{
    const type_info *ti = type_of(type);
    if (ti)
        snprintf(buf, size, "%s", ti->name);
    else
        snprintf(buf, size, "type %u", type);
    return buf;
}

uint64_t bk_gguf_type_bytes(uint32_t type, uint64_t n)
{
    const type_info *ti = type_of(type);
    return ti && n % ti->block == 0 ? n / ti->block * ti->block_bytes : 0;
}

static int read_tensor(cursor *c, bk_gguf_tensor *t, size_t index)
{
    char what[96];
    snprintf(what, sizeof what, "tensor %zu's name", index);
    int rc = take_string(c, &t->name, what);
    if (!rc)
        rc = take_u32(c, &t->n_dims, t->name);
    if (rc)
        return rc;
    if (t->n_dims < 1 || t->n_dims > BK_GGUF_MAX_DIMS)
        return bk_fail(c->err, BK_ERR_PARSE, "%s: tensor '%s' has %u dimensions (expected 1 .. %d)", c->g->path,
                       t->name, t->n_dims, BK_GGUF_MAX_DIMS);
    t->values = 1;
    for (int d = 0; d < BK_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if ((uint32_t)d < t->n_dims && (rc = take_u64(c, &ne, t->name)))
            return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX || t->values > UINT64_MAX / 4 / ne / 2)
            return bk_fail(c->err, BK_ERR_PARSE, "%s: tensor '%s': dimension %d is %" PRIu64 " (expected 1 .. 2^62 "
                           "values in all)", c->g->path, t->name, d, ne);
        t->ne[d] = (int64_t)ne;
        t->values *= ne;
    }
    if ((rc = take_u32(c, &t->type, t->name)) || (rc = take_u64(c, &t->offset, t->name)))
        return rc;
    return BK_OK;
}

/* ---- open ---- */

static int parse(bk_gguf *g, bk_error *err)
{
    cursor c = {g, 0, err};
    char magic[4];
    int rc = take(&c, magic, 4, "the magic");
    if (rc)
        return rc;
    if (memcmp(magic, "GGUF", 4) != 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: not a GGUF file: it begins with %02x %02x %02x %02x, not \"GGUF\"",
                       g->path, (unsigned char)magic[0], (unsigned char)magic[1], (unsigned char)magic[2],
                       (unsigned char)magic[3]);
    uint64_t n_tensors = 0, n_kv = 0;
    if ((rc = take_u32(&c, &g->version, "the version")) || (rc = take_u64(&c, &n_tensors, "the tensor count")) ||
        (rc = take_u64(&c, &n_kv, "the metadata count")))
        return rc;
    if (g->version != GGUF_VERSION)
        return bk_fail(err, BK_ERR_PARSE, "%s: GGUF version %u; this reader reads version %d", g->path, g->version,
                       GGUF_VERSION);
    if (n_tensors > MAX_ENTRIES || n_kv > MAX_ENTRIES)
        return bk_fail(err, BK_ERR_PARSE, "%s: %" PRIu64 " tensors and %" PRIu64 " metadata entries (at most %u each)",
                       g->path, n_tensors, n_kv, MAX_ENTRIES);
    /* an entry takes at least 13 bytes (key length, type, one byte of value), a tensor info 28 (name
     * length, n_dims, one dimension, type, offset): a count beyond what the file holds is a damaged
     * header, refused before anything is allocated for it */
    if (n_kv > g->size / 13 || n_tensors > g->size / 28)
        return bk_fail(err, BK_ERR_PARSE, "%s: truncated: the header claims %" PRIu64 " metadata entries and %" PRIu64
                       " tensors, more than a file of %zu bytes holds", g->path, n_kv, n_tensors, g->size);
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return bk_fail(err, BK_ERR_NOMEM, "%s: out of memory for its header", g->path);
    for (uint64_t k = 0; k < n_kv; k++) {
        g->n_kv = (size_t)k + 1;
        if ((rc = read_kv(&c, &g->kv[k], (size_t)k)))
            return rc;
        for (uint64_t j = 0; j < k; j++)
            if (strcmp(g->kv[j].key, g->kv[k].key) == 0)
                return bk_fail(err, BK_ERR_PARSE, "%s: metadata key '%s' appears twice", g->path, g->kv[k].key);
    }
    g->alignment = DEFAULT_ALIGNMENT;
    const bk_gguf_kv *al = bk_gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != BK_GGUF_U32 || al->num.u == 0 || (al->num.u & (al->num.u - 1)))
            return bk_fail(err, BK_ERR_PARSE, "%s: general.alignment must be a u32 power of two", g->path);
        g->alignment = al->num.u;
    }
    for (uint64_t k = 0; k < n_tensors; k++) {
        g->n_tensors = (size_t)k + 1;
        if ((rc = read_tensor(&c, &g->tensors[k], (size_t)k)))
            return rc;
        for (uint64_t j = 0; j < k; j++)
            if (strcmp(g->tensors[j].name, g->tensors[k].name) == 0)
                return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' appears twice", g->path, g->tensors[k].name);
    }
    g->data_start = ((uint64_t)c.at + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_start > g->size && n_tensors)
        return bk_fail(err, BK_ERR_PARSE, "%s: truncated: the data section would begin at byte %" PRIu64
                       ", the file has %zu", g->path, g->data_start, g->size);
    const uint64_t data_bytes = g->data_start <= g->size ? g->size - g->data_start : 0;
    for (size_t k = 0; k < g->n_tensors; k++) {
        bk_gguf_tensor *t = &g->tensors[k];
        char tn[32];
        if (t->offset % g->alignment)
            return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' begins at data offset %" PRIu64
                           ", not a multiple of the alignment %" PRIu64, g->path, t->name, t->offset, g->alignment);
        const type_info *ti = type_of(t->type);
        if (ti && t->ne[0] % ti->block)
            return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' (%s) has rows of %" PRId64 " values, not a multiple of "
                           "its block of %u", g->path, t->name, bk_gguf_type_name(t->type, tn, sizeof tn), t->ne[0],
                           ti->block);
        t->bytes = bk_gguf_type_bytes(t->type, t->values);
        if (t->offset > data_bytes || t->bytes > data_bytes - t->offset)
            return bk_fail(err, BK_ERR_PARSE, "%s: truncated: tensor '%s' (%s) needs data bytes %" PRIu64 " .. %" PRIu64
                           ", the data section holds %" PRIu64, g->path, t->name,
                           bk_gguf_type_name(t->type, tn, sizeof tn), t->offset, t->offset + t->bytes, data_bytes);
        t->data = g->map + g->data_start + t->offset;
        for (size_t j = 0; j < k && ti; j++) {
            const bk_gguf_tensor *o = &g->tensors[j];
            if (o->bytes && t->offset < o->offset + o->bytes && o->offset < t->offset + t->bytes)
                return bk_fail(err, BK_ERR_PARSE, "%s: tensors '%s' and '%s' overlap in the data section", g->path,
                               o->name, t->name);
        }
    }
    return BK_OK;
}

int bk_gguf_open(const char *path, bk_gguf **out, bk_error *err)
{
    *out = NULL;
    FILE *f = NULL;
    uint64_t size = 0;
    int rc = bk_file_open_regular(path, "GGUF file", 0, &f, &size, err);
    if (rc)
        return rc;
    bk_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        fclose(f);
        free(g);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory opening '%s'", path);
    }
    g->size = (size_t)size;
    if (size) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (m == MAP_FAILED) {
            rc = bk_fail(err, BK_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
            fclose(f);
            bk_gguf_close(g);
            return rc;
        }
        g->map = m;
    }
    fclose(f);
    if ((rc = parse(g, err))) {
        bk_gguf_close(g);
        return rc;
    }
    *out = g;
    return BK_OK;
}

void bk_gguf_close(bk_gguf *g)
{
    if (!g)
        return;
    for (size_t k = 0; k < g->n_kv; k++) {
        free(g->kv[k].key);
        free(g->kv[k].str);
        if (g->kv[k].strings)
            for (uint64_t j = 0; j < g->kv[k].count; j++)
                free(g->kv[k].strings[j]);
        free(g->kv[k].strings);
    }
    for (size_t k = 0; k < g->n_tensors; k++)
        free(g->tensors[k].name);
    free(g->kv);
    free(g->tensors);
    if (g->map)
        munmap((void *)g->map, g->size);
    free(g->path);
    free(g);
}

/* ---- access ---- */

uint32_t bk_gguf_version(const bk_gguf *g)
{
    return g->version;
}

size_t bk_gguf_kv_count(const bk_gguf *g)
{
    return g->n_kv;
}

const bk_gguf_kv *bk_gguf_kv_at(const bk_gguf *g, size_t i)
{
    return i < g->n_kv ? &g->kv[i] : NULL;
}

const bk_gguf_kv *bk_gguf_find(const bk_gguf *g, const char *key)
{
    for (size_t k = 0; k < g->n_kv; k++)
        if (g->kv[k].key && strcmp(g->kv[k].key, key) == 0)
            return &g->kv[k];
    return NULL;
}

static int missing(const bk_gguf *g, const char *key, const bk_gguf_kv *kv, const char *expected, bk_error *err)
{
    if (!kv)
        return bk_fail(err, BK_ERR_PARSE, "%s: no metadata '%s' (expected %s)", g->path, key, expected);
    return bk_fail(err, BK_ERR_PARSE, "%s: metadata '%s' has value type %u (expected %s)", g->path, key,
                   (unsigned)kv->type, expected);
}

int bk_gguf_get_string(const bk_gguf *g, const char *key, const char **out, bk_error *err)
{
    const bk_gguf_kv *kv = bk_gguf_find(g, key);
    if (!kv || kv->type != BK_GGUF_STRING)
        return missing(g, key, kv, "a string", err);
    *out = kv->str;
    return BK_OK;
}

int bk_gguf_get_uint(const bk_gguf *g, const char *key, uint64_t *out, bk_error *err)
{
    const bk_gguf_kv *kv = bk_gguf_find(g, key);
    const int signed_type = kv && (kv->type == BK_GGUF_I8 || kv->type == BK_GGUF_I16 || kv->type == BK_GGUF_I32 ||
                                   kv->type == BK_GGUF_I64);
    const int unsigned_type = kv && (kv->type == BK_GGUF_U8 || kv->type == BK_GGUF_U16 || kv->type == BK_GGUF_U32 ||
                                     kv->type == BK_GGUF_U64);
    if (!signed_type && !unsigned_type)
        return missing(g, key, kv, "an integer", err);
    if (signed_type && kv->num.i < 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: metadata '%s' is %" PRId64 " (expected >= 0)", g->path, key, kv->num.i);
    *out = signed_type ? (uint64_t)kv->num.i : kv->num.u;
    return BK_OK;
}

int bk_gguf_get_float(const bk_gguf *g, const char *key, double *out, bk_error *err)
{
    const bk_gguf_kv *kv = bk_gguf_find(g, key);
    if (!kv || (kv->type != BK_GGUF_F32 && kv->type != BK_GGUF_F64))
        return missing(g, key, kv, "a float", err);
    *out = kv->num.f;
    return BK_OK;
}

size_t bk_gguf_tensor_count(const bk_gguf *g)
{
    return g->n_tensors;
}

const bk_gguf_tensor *bk_gguf_tensor_at(const bk_gguf *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const bk_gguf_tensor *bk_gguf_tensor_find(const bk_gguf *g, const char *name)
{
    for (size_t k = 0; k < g->n_tensors; k++)
        if (strcmp(g->tensors[k].name, name) == 0)
            return &g->tensors[k];
    return NULL;
}

/* ---- dequantization (ggml's definitions) ---- */

static uint16_t u16_at(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

int bk_gguf_dequantize(const bk_gguf *g, const bk_gguf_tensor *t, float *out, bk_error *err)
{
    const uint8_t *p = t->data;
    const uint64_t n = t->values;
    char tn[32];
    switch (t->type) {
    case BK_GGML_F32:
        for (uint64_t k = 0; k < n; k++) {
            const uint32_t u = (uint32_t)little(p + 4 * k, 4);
            memcpy(&out[k], &u, sizeof u);
        }
        return BK_OK;
    case BK_GGML_F16:
        for (uint64_t k = 0; k < n; k++)
            out[k] = bk_f16_value(u16_at(p + 2 * k));
        return BK_OK;
    case BK_GGML_BF16:
        for (uint64_t k = 0; k < n; k++)
            out[k] = bk_bf16_value(u16_at(p + 2 * k));
        return BK_OK;
    case BK_GGML_Q8_0:
        for (uint64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = p + 34 * b;
            const float d = bk_f16_value(u16_at(blk));
            for (int j = 0; j < 32; j++)
                out[32 * b + (uint64_t)j] = (float)(int8_t)blk[2 + j] * d;
        }
        return BK_OK;
    case BK_GGML_Q4_0:
        for (uint64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = p + 18 * b;
            const float d = bk_f16_value(u16_at(blk));
            for (int j = 0; j < 16; j++) {
                out[32 * b + (uint64_t)j] = (float)((blk[2 + j] & 0x0f) - 8) * d;
                out[32 * b + (uint64_t)j + 16] = (float)((blk[2 + j] >> 4) - 8) * d;
            }
        }
        return BK_OK;
    case BK_GGML_Q4_1:
        for (uint64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = p + 20 * b;
            const float d = bk_f16_value(u16_at(blk)), m = bk_f16_value(u16_at(blk + 2));
            for (int j = 0; j < 16; j++) {
                out[32 * b + (uint64_t)j] = (float)(blk[4 + j] & 0x0f) * d + m;
                out[32 * b + (uint64_t)j + 16] = (float)(blk[4 + j] >> 4) * d + m;
            }
        }
        return BK_OK;
    default:
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: tensor '%s' is of ggml %s, which this reader does not dequantize (F32, F16, BF16, Q8_0, "
                       "Q4_0 and Q4_1 it does)",
                       g->path, t->name, bk_gguf_type_name(t->type, tn, sizeof tn));
    }
}
