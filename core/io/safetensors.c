#define _POSIX_C_SOURCE 200809L

#include "io/safetensors.h"
#include "util/file.h"

#include <stddef.h>

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The data section is the host's float bytes written and read as they are: the format is little-endian. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/safetensors.c assumes a little-endian host (safetensors data is little-endian)"
#endif
#endif
_Static_assert(sizeof(float) == 4, "safetensors F32 needs a 4-byte float");

#define ST_METADATA "__metadata__"
#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: JSON numbers above this are not exact in a double */

struct bk_safetensors {
    unsigned char *data;   /* the data section (malloc'd, so float-aligned) */
    bk_st_tensor *tensors; /* n, sorted by data offset; names owned */
    void **copies;         /* n: a tensor's own aligned copy when its offset is not a multiple of 4, else NULL */
    int n;
    bk_st_meta *meta; /* keys and values owned */
    int n_meta;
};

static char *dup_text(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that appears twice (in sorted order), or NULL; *nomem set when the scratch array fails. */
static const char *find_duplicate(const char **names, int n, int *nomem)
{
    *nomem = 0;
    if (n < 2)
        return NULL;
    const char **sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        *nomem = 1;
        return NULL;
    }
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_names);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            dup = sorted[i];
    free(sorted);
    return dup;
}

/* 4 * product(shape) in bytes; 0 when it does not fit in uint64 / size_t. *ok says which. */
static uint64_t shape_bytes(const int64_t *shape, int ndim, int *ok)
{
    *ok = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0)
            return 0;
    uint64_t bytes = 4;
    for (int d = 0; d < ndim; d++) {
        uint64_t dim = (uint64_t)shape[d];
        if (bytes > UINT64_MAX / dim || bytes * dim > (uint64_t)SIZE_MAX) {
            *ok = 0;
            return 0;
        }
        bytes *= dim;
    }
    return bytes;
}

void bk_st_format_shape(char *buf, size_t size, const int64_t *shape, int ndim)
{
    size_t used = 0;
    int n = snprintf(buf, size, "[");
    used = n > 0 ? (size_t)n : 0;
    for (int d = 0; d < ndim && used < size; d++) {
        n = snprintf(buf + used, size - used, "%s%" PRId64, d ? ", " : "", shape[d]);
        used += n > 0 ? (size_t)n : 0;
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

static cJSON *json_u64(uint64_t v)
{
    char text[32]; /* printed as a plain integer, never 1e+15 */
    snprintf(text, sizeof text, "%" PRIu64, v);
    return cJSON_CreateRaw(text);
}

/* ---------------------------------------------------------------------------------------- XXH64 */

/* The five primes and the steps of the XXH64 specification (doc/xxhash_spec.md of xxHash). */
#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
#define XXH_P3 0x165667B19E3779F9ULL
#define XXH_P4 0x85EBCA77C2B2AE63ULL
#define XXH_P5 0x27D4EB2F165667C5ULL

static uint64_t xxh_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t xxh_read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8); /* the host is little-endian (checked above), as the specification reads */
    return v;
}

static uint32_t xxh_read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t xxh_round(uint64_t acc, uint64_t input)
{
    acc += input * XXH_P2;
    acc = xxh_rotl(acc, 31);
    return acc * XXH_P1;
}

static uint64_t xxh_merge(uint64_t acc, uint64_t v)
{
    acc ^= xxh_round(0, v);
    return acc * XXH_P1 + XXH_P4;
}

uint64_t bk_xxh64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data, *end = p + len;
    uint64_t h;
    if (len >= 32) {
        uint64_t v1 = seed + XXH_P1 + XXH_P2, v2 = seed + XXH_P2, v3 = seed, v4 = seed - XXH_P1;
        for (; end - p >= 32; p += 32) {
            v1 = xxh_round(v1, xxh_read64(p));
            v2 = xxh_round(v2, xxh_read64(p + 8));
            v3 = xxh_round(v3, xxh_read64(p + 16));
            v4 = xxh_round(v4, xxh_read64(p + 24));
        }
        h = xxh_rotl(v1, 1) + xxh_rotl(v2, 7) + xxh_rotl(v3, 12) + xxh_rotl(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = seed + XXH_P5;
    }
    h += (uint64_t)len;
    for (; end - p >= 8; p += 8) {
        h ^= xxh_round(0, xxh_read64(p));
        h = xxh_rotl(h, 27) * XXH_P1 + XXH_P4;
    }
    if (end - p >= 4) {
        h ^= (uint64_t)xxh_read32(p) * XXH_P1;
        h = xxh_rotl(h, 23) * XXH_P2 + XXH_P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (uint64_t)*p * XXH_P5;
        h = xxh_rotl(h, 11) * XXH_P1;
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

/* ---------------------------------------------------------------------------------------- write */

static int validate_for_write(const char *path, const bk_st_tensor *tensors, int n_tensors, const bk_st_meta *meta,
                              int n_meta, uint64_t *data_bytes, bk_error *err)
{
    if (n_tensors < 0 || n_meta < 0 || (n_tensors > 0 && !tensors) || (n_meta > 0 && !meta))
        return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': %d tensors and %d metadata entries given", path,
                       n_tensors, n_meta);
    uint64_t total = 0;
    for (int i = 0; i < n_tensors; i++) {
        const bk_st_tensor *t = &tensors[i];
        if (!t->name)
            return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': tensor %d has no name", path, i);
        if (strcmp(t->name, ST_METADATA) == 0)
            return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': a tensor cannot be called '%s'", path,
                           ST_METADATA);
        if (t->ndim < 0 || t->ndim > BK_ST_MAX_DIMS)
            return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': tensor '%s' has %d dimensions, expected 0..%d",
                           path, t->name, t->ndim, BK_ST_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0)
                return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': tensor '%s' has dimension %d of size %" PRId64,
                               path, t->name, d, t->shape[d]);
        int ok;
        uint64_t bytes = shape_bytes(t->shape, t->ndim, &ok);
        if (!ok || bytes > UINT64_MAX - total || total + bytes > (uint64_t)SIZE_MAX)
            return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': tensor '%s' is too large (the file's data at most %zu "
                             "bytes here)", path, t->name, (size_t)SIZE_MAX);
        if (bytes > 0 && !t->data)
            return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': tensor '%s' has no data", path, t->name);
        total += bytes;
    }
    for (int i = 0; i < n_meta; i++)
        if (!meta[i].key || !meta[i].value)
            return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': metadata entry %d has no %s", path, i,
                           meta[i].key ? "value" : "key");

    int nomem = 0;
    const char *dup = NULL;
    const char **names = malloc((size_t)(n_tensors > n_meta ? n_tensors : n_meta) * sizeof *names + 1);
    if (!names)
        return bk_fail(err, BK_ERR_NOMEM, "cannot write '%s': out of memory", path);
    for (int i = 0; i < n_tensors; i++)
        names[i] = tensors[i].name;
    dup = find_duplicate(names, n_tensors, &nomem);
    if (dup || nomem) {
        free(names);
        return nomem ? bk_fail(err, BK_ERR_NOMEM, "cannot write '%s': out of memory", path)
                     : bk_fail(err, BK_ERR_INVALID, "cannot write '%s': two tensors are called '%s'", path, dup);
    }
    for (int i = 0; i < n_meta; i++)
        names[i] = meta[i].key;
    dup = find_duplicate(names, n_meta, &nomem);
    free(names);
    if (nomem)
        return bk_fail(err, BK_ERR_NOMEM, "cannot write '%s': out of memory", path);
    if (dup)
        return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': two metadata entries have the key '%s'", path, dup);
    *data_bytes = total;
    return BK_OK;
}

/* The header JSON, unformatted (cJSON_free it), or NULL when out of memory. */
static char *build_header(const bk_st_tensor *tensors, int n_tensors, const bk_st_meta *meta, int n_meta)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    int ok = 1;
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, ST_METADATA);
        ok = m != NULL;
        for (int i = 0; ok && i < n_meta; i++)
            ok = cJSON_AddStringToObject(m, meta[i].key, meta[i].value) != NULL;
    }
    uint64_t offset = 0;
    for (int i = 0; ok && i < n_tensors; i++) {
        const bk_st_tensor *t = &tensors[i];
        int fits;
        uint64_t bytes = shape_bytes(t->shape, t->ndim, &fits);
        cJSON *entry = cJSON_AddObjectToObject(root, t->name);
        ok = entry && cJSON_AddStringToObject(entry, "dtype", "F32");
        cJSON *shape = ok ? cJSON_AddArrayToObject(entry, "shape") : NULL;
        ok = ok && shape;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = cJSON_AddItemToArray(shape, json_u64((uint64_t)t->shape[d]));
        cJSON *offsets = ok ? cJSON_AddArrayToObject(entry, "data_offsets") : NULL;
        ok = ok && offsets && cJSON_AddItemToArray(offsets, json_u64(offset)) &&
             cJSON_AddItemToArray(offsets, json_u64(offset + bytes));
        offset += bytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

static int write_all(FILE *f, const void *p, size_t n)
{
    if (n == 0)
        return 1;
    if (fwrite(p, 1, n, f) == n)
        return 1;
    if (!errno)
        errno = EIO;
    return 0;
}

/* Creates "PATH.tmp.<pid>.<random>" with O_EXCL: a name no other writer (another process, or another
 * thread here) uses at the same time. Returns the stream, the name in tmp[size]; NULL with errno. */
static FILE *create_temp(const char *path, char *tmp, size_t size)
{
    static unsigned counter; /* only makes names differ; O_EXCL is what guarantees uniqueness */
    for (int attempt = 0; attempt < 64; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t seed[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec,
                            (uint64_t)(uintptr_t)&ts ^ ((uint64_t)++counter << 32) ^ (uint64_t)attempt};
        uint64_t r = bk_xxh64(seed, sizeof seed, 0);
        if (snprintf(tmp, size, "%s.tmp.%ld.%08" PRIx32, path, (long)getpid(), (uint32_t)r) >= (int)size) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            FILE *f = fdopen(fd, "wb");
            if (!f) {
                int e = errno;
                close(fd);
                unlink(tmp);
                errno = e;
            }
            return f;
        }
        if (errno != EEXIST)
            return NULL;
    }
    errno = EEXIST;
    return NULL;
}

/* Removes "PATH.tmp.<pid>.<8 hex>" files of writers that are gone (kill(pid, 0) says no such process):
 * what a writer killed mid-write leaves, since its name is unique it would stay forever. Files of
 * processes still alive are left alone. Best effort: nothing here fails a write. */
static void remove_stale_temps(const char *path)
{
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir)
        return;
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? path + (slash - dir) + 1 : path;
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    size_t base_len = strlen(base);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *name = e->d_name;
        if (strncmp(name, base, base_len) != 0 || strncmp(name + base_len, ".tmp.", 5) != 0)
            continue;
        const char *p = name + base_len + 5;
        char *end;
        errno = 0;
        long pid = strtol(p, &end, 10);
        if (end == p || errno || pid <= 0 || *end != '.' || strlen(end + 1) != 8 ||
            strspn(end + 1, "0123456789abcdef") != 8)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        size_t full = strlen(dir) + strlen(name) + 2;
        char *victim = malloc(full);
        if (victim) {
            snprintf(victim, full, "%s/%s", dir, name);
            unlink(victim);
            free(victim);
        }
    }
    if (d)
        closedir(d);
    free(dir);
}

int bk_safetensors_write(const char *path, const bk_st_tensor *tensors, int n_tensors, const bk_st_meta *meta,
                         int n_meta, bk_error *err)
{
    if (!path)
        return bk_fail(err, BK_ERR_INVALID, "cannot write a safetensors file: no path given");
    uint64_t data_bytes = 0;
    int rc = validate_for_write(path, tensors, n_tensors, meta, n_meta, &data_bytes, err);
    if (rc != BK_OK)
        return rc;

    char *json = build_header(tensors, n_tensors, meta, n_meta);
    size_t tmp_size = strlen(path) + 48;
    char *tmp = malloc(tmp_size);
    if (!json || !tmp) {
        cJSON_free(json);
        free(tmp);
        return bk_fail(err, BK_ERR_NOMEM, "cannot write '%s': out of memory building the header", path);
    }

    /* pad with spaces so that the data section starts at a multiple of 8 */
    size_t json_len = strlen(json), header_len = (json_len + 7) / 8 * 8;
    if (header_len > BK_ST_MAX_HEADER) {
        cJSON_free(json);
        free(tmp);
        return bk_fail(err, BK_ERR_INVALID, "cannot write '%s': the header would take %zu bytes, more than the %u a "
                       "safetensors reader accepts", path, header_len, BK_ST_MAX_HEADER);
    }
    unsigned char length[8];
    for (int i = 0; i < 8; i++)
        length[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    static const char spaces[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

    errno = 0;
    FILE *f = create_temp(path, tmp, tmp_size);
    int ok = f != NULL, saved = errno, renamed = 0;
    if (f) { /* from here on a failure removes the tmp file */
        ok = write_all(f, length, sizeof length) && write_all(f, json, json_len) &&
             write_all(f, spaces, header_len - json_len);
        for (int i = 0; ok && i < n_tensors; i++) {
            int fits;
            ok = write_all(f, tensors[i].data, (size_t)shape_bytes(tensors[i].shape, tensors[i].ndim, &fits));
        }
        ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
        saved = errno;
        if (fclose(f) != 0 && ok) {
            ok = 0;
            saved = errno;
        }
        if (ok && rename(tmp, path) != 0) {
            ok = 0;
            saved = errno;
        }
        renamed = ok;
        if (!ok)
            remove(tmp);
    }
    if (renamed && bk_file_sync_dir(path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (renamed)
        remove_stale_temps(path);
    cJSON_free(json);
    free(tmp);
    if (!ok && renamed)
        return bk_fail(err, BK_ERR_IO, "wrote '%s' but could not sync its directory: %s", path,
                       strerror(saved ? saved : EIO));
    if (!ok)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(saved ? saved : EIO));
    return BK_OK;
}

/* ----------------------------------------------------------------------------------------- open */

void bk_safetensors_close(bk_safetensors *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n; i++) {
        free((char *)st->tensors[i].name);
        if (st->copies)
            free(st->copies[i]);
    }
    for (int i = 0; i < st->n_meta; i++) {
        free((char *)st->meta[i].key);
        free((char *)st->meta[i].value);
    }
    free(st->tensors);
    free(st->copies);
    free(st->meta);
    free(st->data);
    free(st);
}

/* Reads exactly n bytes: BK_OK, or an error naming the path (the file can change while it is read). */
static int read_exact(FILE *f, void *p, size_t n, const char *path, bk_error *err)
{
    if (n == 0)
        return BK_OK;
    errno = 0;
    if (fread(p, 1, n, f) == n)
        return BK_OK;
    if (ferror(f))
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno ? errno : EIO));
    return bk_fail(err, BK_ERR_IO, "cannot read '%s': the file became shorter while it was read", path);
}

/* A non-negative integer JSON number below 2^53, into *v. */
static int json_count(const cJSON *item, uint64_t *v)
{
    if (!cJSON_IsNumber(item))
        return 0;
    double d = item->valuedouble;
    if (!isfinite(d) || d < 0.0 || d >= ST_MAX_EXACT || floor(d) != d)
        return 0;
    *v = (uint64_t)d;
    return 1;
}

typedef struct st_entry {
    uint64_t begin, end;
    int index; /* position in the header, to keep equal offsets in header order */
} st_entry;

static int compare_entries(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* One tensor entry of the header checked against a data section of data_bytes: fills t (name not set),
 * begin and end. */
static int parse_tensor(const char *path, const cJSON *entry, uint64_t data_bytes, bk_st_tensor *t, uint64_t *begin,
                        uint64_t *end, bk_error *err)
{
    const char *name = entry->string;
    if (!cJSON_IsObject(entry))
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': expected an object with dtype, shape and data_offsets",
                       path, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype))
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has no dtype string", path, name);
    if (strcmp(dtype->valuestring, "F32") != 0)
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has dtype %s, biaskit reads F32", path, name,
                       dtype->valuestring);
    if (!cJSON_IsArray(shape))
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has no shape array", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > BK_ST_MAX_DIMS)
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s' has %d dimensions, biaskit reads at most %d", path, name,
                       ndim, BK_ST_MAX_DIMS);
    t->ndim = ndim;
    int d = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape)
    {
        uint64_t v;
        if (!json_count(dim, &v))
            return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': shape entry %d is not a non-negative integer", path,
                           name, d);
        t->shape[d++] = (int64_t)v;
    }
    uint64_t b = 0, e = 0;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_count(cJSON_GetArrayItem(offsets, 0), &b) || !json_count(cJSON_GetArrayItem(offsets, 1), &e) || b > e)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: tensor '%s': data_offsets must be [begin, end], non-negative integers with begin <= end",
                       path, name);
    int fits;
    uint64_t bytes = shape_bytes(t->shape, ndim, &fits);
    char dims[160];
    bk_st_format_shape(dims, sizeof dims, t->shape, ndim);
    if (!fits)
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': shape %s is too large (its bytes must fit in 64 bits)",
                       path, name, dims);
    if (e - b != bytes)
        return bk_fail(err, BK_ERR_PARSE, "%s: tensor '%s': shape %s needs %" PRIu64 " bytes, data_offsets give %" PRIu64,
                       path, name, dims, bytes, e - b);
    if (e > data_bytes)
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: truncated: tensor '%s' ends at byte %" PRIu64 " of the data, the file holds %" PRIu64
                       " data bytes",
                       path, name, e, data_bytes);
    *begin = b;
    *end = e;
    return BK_OK;
}

static int parse_metadata(const char *path, const cJSON *m, bk_safetensors *st, bk_error *err)
{
    if (!cJSON_IsObject(m))
        return bk_fail(err, BK_ERR_PARSE, "%s: %s must be an object of strings", path, ST_METADATA);
    int n = cJSON_GetArraySize(m);
    st->meta = calloc((size_t)n + 1, sizeof *st->meta);
    if (!st->meta)
        return bk_fail(err, BK_ERR_NOMEM, "%s: out of memory reading the header", path);
    const cJSON *item;
    cJSON_ArrayForEach(item, m)
    {
        if (!cJSON_IsString(item))
            return bk_fail(err, BK_ERR_PARSE, "%s: %s value '%s' is not a string", path, ST_METADATA, item->string);
        for (int i = 0; i < st->n_meta; i++)
            if (strcmp(st->meta[i].key, item->string) == 0)
                return bk_fail(err, BK_ERR_PARSE, "%s: %s has the key '%s' twice", path, ST_METADATA, item->string);
        bk_st_meta *e = &st->meta[st->n_meta];
        e->key = dup_text(item->string);
        e->value = e->key ? dup_text(item->valuestring) : NULL;
        if (!e->key || !e->value) {
            free((char *)e->key);
            e->key = NULL;
            return bk_fail(err, BK_ERR_NOMEM, "%s: out of memory reading the header", path);
        }
        st->n_meta++;
    }
    return BK_OK;
}

/* The header JSON against a data section of data_bytes: fills st's tensors (data pointers not set yet) and
 * metadata. */
static int parse_header(const char *path, const char *header, size_t header_len, uint64_t data_bytes,
                        bk_safetensors *st, st_entry **entries_out, bk_error *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, header_len, &end, 0);
    if (!root) {
        size_t at = end && end >= header && end <= header + header_len ? (size_t)(end - header) : 0;
        return bk_fail(err, BK_ERR_PARSE, "%s: bad safetensors header: invalid JSON near byte %zu of the header", path,
                       at);
    }
    int rc = BK_OK;
    for (const char *p = end; p < header + header_len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: bad safetensors header: unexpected text after the JSON at byte %zu",
                         path, (size_t)(p - header));
            break;
        }
    if (rc == BK_OK && !cJSON_IsObject(root))
        rc = bk_fail(err, BK_ERR_PARSE, "%s: bad safetensors header: expected a JSON object", path);
    if (rc != BK_OK) {
        cJSON_Delete(root);
        return rc;
    }

    int n = cJSON_GetArraySize(root);
    st->tensors = calloc((size_t)n + 1, sizeof *st->tensors);
    st->copies = calloc((size_t)n + 1, sizeof *st->copies);
    st_entry *entries = calloc((size_t)n + 1, sizeof *entries);
    const char **names = calloc((size_t)n + 1, sizeof *names);
    if (!st->tensors || !st->copies || !entries || !names)
        rc = bk_fail(err, BK_ERR_NOMEM, "%s: out of memory reading the header", path);
    int seen_meta = 0, k = 0;
    const cJSON *item;
    for (item = root->child; rc == BK_OK && item; item = item->next) {
        if (strcmp(item->string, ST_METADATA) == 0) {
            if (seen_meta++)
                rc = bk_fail(err, BK_ERR_PARSE, "%s: bad safetensors header: %s appears twice", path, ST_METADATA);
            else
                rc = parse_metadata(path, item, st, err);
            continue;
        }
        bk_st_tensor t = {0};
        rc = parse_tensor(path, item, data_bytes, &t, &entries[k].begin, &entries[k].end, err);
        if (rc != BK_OK)
            break;
        names[k] = item->string;
        entries[k].index = k;
        st->tensors[k] = t;
        k++;
    }
    int nomem = 0;
    const char *dup = rc == BK_OK ? find_duplicate(names, k, &nomem) : NULL;
    if (rc == BK_OK && (dup || nomem))
        rc = nomem ? bk_fail(err, BK_ERR_NOMEM, "%s: out of memory reading the header", path)
                   : bk_fail(err, BK_ERR_PARSE, "%s: bad safetensors header: tensor '%s' appears twice", path, dup);

    if (rc == BK_OK) {
        /* file order: by data offset; then no tensor may start before the previous one ends */
        qsort(entries, (size_t)k, sizeof *entries, compare_entries);
        for (int i = 1; i < k && rc == BK_OK; i++)
            if (entries[i].begin < entries[i - 1].end)
                rc = bk_fail(err, BK_ERR_PARSE,
                             "%s: tensors '%s' (bytes %" PRIu64 "..%" PRIu64 ") and '%s' (bytes %" PRIu64 "..%" PRIu64
                             ") overlap",
                             path, names[entries[i - 1].index], entries[i - 1].begin, entries[i - 1].end,
                             names[entries[i].index], entries[i].begin, entries[i].end);
        /* the format's rule: the data is entirely indexed, without holes or trailing bytes (a file with
         * bytes appended, or one tensor's data dropped, is damaged) */
        uint64_t at = 0;
        for (int i = 0; i < k && rc == BK_OK; i++) {
            if (entries[i].begin != at)
                rc = bk_fail(err, BK_ERR_PARSE,
                             "%s: tensor '%s' begins at byte %" PRIu64 " of the data, expected %" PRIu64
                             " (where %s ends): safetensors data holds no gaps",
                             path, names[entries[i].index], entries[i].begin, at,
                             i ? "the previous tensor" : "the header");
            at = entries[i].end;
        }
        if (rc == BK_OK && at != data_bytes)
            rc = bk_fail(err, BK_ERR_PARSE,
                         "%s: %" PRIu64 " bytes after the last tensor's data (the tensors end at byte %" PRIu64
                         " of the data, the file holds %" PRIu64 " data bytes): expected none, the file was "
                         "appended to or damaged",
                         path, data_bytes - at, at, data_bytes);
    }
    if (rc == BK_OK) {
        bk_st_tensor *sorted = calloc((size_t)k + 1, sizeof *sorted);
        if (!sorted)
            rc = bk_fail(err, BK_ERR_NOMEM, "%s: out of memory reading the header", path);
        for (int i = 0; rc == BK_OK && i < k; i++) {
            sorted[i] = st->tensors[entries[i].index];
            sorted[i].name = dup_text(names[entries[i].index]);
            if (!sorted[i].name)
                rc = bk_fail(err, BK_ERR_NOMEM, "%s: out of memory reading the header", path);
            else
                st->n = i + 1;
        }
        if (sorted) {
            free(st->tensors);
            st->tensors = sorted;
        }
    }
    free(names);
    cJSON_Delete(root);
    if (rc != BK_OK) {
        free(entries);
        return rc;
    }
    *entries_out = entries;
    return BK_OK;
}

static int open_file(const char *path, int with_data, bk_safetensors **out, bk_error *err)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return bk_fail(err, BK_ERR_INVALID, "cannot read a safetensors file: no path or result given");
    FILE *f = NULL; /* a regular file only: a FIFO or a device is refused by name, without blocking */
    uint64_t size = 0;
    int rc = bk_file_open_regular(path, "safetensors file", 0, &f, &size, err);
    if (rc != BK_OK)
        return rc;
    if (size < 8) {
        fclose(f);
        return bk_fail(err, BK_ERR_PARSE, "%s: truncated: %" PRIu64 " bytes, too short for a safetensors header", path,
                       size);
    }
    unsigned char length[8];
    rc = read_exact(f, length, sizeof length, path, err);
    if (rc != BK_OK) {
        fclose(f);
        return rc;
    }
    uint64_t header_len = 0;
    for (int i = 0; i < 8; i++)
        header_len |= (uint64_t)length[i] << (8 * i);
    if (header_len > size - 8) {
        fclose(f);
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: truncated: the header claims %" PRIu64 " bytes, the file has only %" PRIu64, path,
                       header_len, size - 8);
    }
    /* a length beyond the file reads as truncation (above); within it, still capped before allocating */
    if (header_len > BK_ST_MAX_HEADER) {
        fclose(f);
        return bk_fail(err, BK_ERR_PARSE,
                       "%s: bad safetensors header: its length field says %" PRIu64 " bytes, more than the %u a "
                       "header may have",
                       path, header_len, BK_ST_MAX_HEADER);
    }
    uint64_t data_bytes = size - 8 - header_len;
    if (header_len >= (uint64_t)SIZE_MAX || data_bytes >= (uint64_t)SIZE_MAX) {
        fclose(f);
        return bk_fail(err, BK_ERR_NOMEM, "%s: the file is too large to read here (header and data each below %zu "
                       "bytes)", path, (size_t)SIZE_MAX);
    }

    bk_safetensors *st = calloc(1, sizeof *st);
    char *header = malloc((size_t)header_len + 1);
    st_entry *entries = NULL;
    if (!st || !header)
        rc = bk_fail(err, BK_ERR_NOMEM, "%s: out of memory for a %" PRIu64 "-byte header", path, header_len);
    if (rc == BK_OK)
        rc = read_exact(f, header, (size_t)header_len, path, err);
    if (rc == BK_OK) {
        header[header_len] = '\0';
        rc = parse_header(path, header, (size_t)header_len, data_bytes, st, &entries, err);
    }
    free(header);
    if (!with_data) { /* the header alone: the tensors have no data */
        fclose(f);
        free(entries);
        if (rc != BK_OK) {
            bk_safetensors_close(st);
            return rc;
        }
        *out = st;
        return BK_OK;
    }
    if (rc == BK_OK) {
        st->data = malloc(data_bytes ? (size_t)data_bytes : 1);
        if (!st->data)
            rc = bk_fail(err, BK_ERR_NOMEM, "%s: out of memory for %" PRIu64 " data bytes", path, data_bytes);
    }
    if (rc == BK_OK)
        rc = read_exact(f, st->data, (size_t)data_bytes, path, err);
    fclose(f);

    /* entries is sorted like st->tensors: point each tensor at its bytes (or an aligned copy) */
    for (int i = 0; rc == BK_OK && i < st->n; i++) {
        unsigned char *p = st->data + entries[i].begin;
        size_t bytes = (size_t)(entries[i].end - entries[i].begin);
        if (entries[i].begin % sizeof(float) != 0) {
            st->copies[i] = malloc(bytes ? bytes : 1);
            if (!st->copies[i]) {
                rc = bk_fail(err, BK_ERR_NOMEM, "%s: out of memory copying tensor '%s'", path, st->tensors[i].name);
                break;
            }
            memcpy(st->copies[i], p, bytes);
            p = st->copies[i];
        }
        st->tensors[i].data = (const float *)(void *)p;
    }
    free(entries);
    if (rc != BK_OK) {
        bk_safetensors_close(st);
        return rc;
    }
    *out = st;
    return BK_OK;
}

int bk_safetensors_open(const char *path, bk_safetensors **out, bk_error *err)
{
    return open_file(path, 1, out, err);
}

int bk_safetensors_open_header(const char *path, bk_safetensors **out, bk_error *err)
{
    return open_file(path, 0, out, err);
}

int bk_safetensors_count(const bk_safetensors *st)
{
    return st ? st->n : 0;
}

const bk_st_tensor *bk_safetensors_at(const bk_safetensors *st, int i)
{
    return st && i >= 0 && i < st->n ? &st->tensors[i] : NULL;
}

const bk_st_tensor *bk_safetensors_find(const bk_safetensors *st, const char *name)
{
    if (!st || !name)
        return NULL;
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

const char *bk_safetensors_meta(const bk_safetensors *st, const char *key)
{
    if (!st || !key)
        return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].value;
    return NULL;
}
