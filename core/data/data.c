/* Training data: text files (one byte = one token) or llm.c uint16 shards, a train/validation split,
 * and a deterministic, resumable batch loader. */
#define _POSIX_C_SOURCE 200809L

#include "data/data.h"

#include "util/rng.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BK_SHARD_HEADER_BYTES (BK_SHARD_HEADER_INTS * 4)
#define BK_READ_CHUNK (1 << 16)

/* ---- small helpers ---- */

/* "'a', 'b', 'c'" (truncated with "..." when it does not fit). */
static void describe_paths(char *dst, size_t size, const char *const *paths, int n)
{
    size_t used = 0;
    dst[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(dst + used, size - used, "%s'%s'", i ? ", " : "", paths[i]);
        if (w < 0 || (size_t)w >= size - used) {
            if (size >= 4)
                memcpy(dst + size - 4, "...", 4);
            return;
        }
        used += (size_t)w;
    }
}

/* "(extensions: .h, .c)" or "(any extension)". */
static void describe_extensions(char *dst, size_t size, const char *const *ext, int n)
{
    if (n <= 0) {
        bk_copy_text(dst, size, "(any extension)");
        return;
    }
    size_t used = 0;
    dst[0] = '\0';
    for (int i = 0; i <= n; i++) {
        int w = i == n ? snprintf(dst + used, size - used, ")")
                       : snprintf(dst + used, size - used, "%s%s", i ? ", " : "(extensions: ", ext[i]);
        if (w < 0 || (size_t)w >= size - used) {
            if (size >= 5)
                memcpy(dst + size - 5, "...)", 5);
            return;
        }
        used += (size_t)w;
    }
}

static int has_extension(const char *name, const char *const *ext, int n)
{
    if (n <= 0)
        return 1;
    size_t len = strlen(name);
    for (int i = 0; i < n; i++) {
        size_t el = strlen(ext[i]);
        if (el <= len && memcmp(name + len - el, ext[i], el) == 0)
            return 1;
    }
    return 0;
}

/* ---- finding files ---- */

typedef struct file_list {
    char **paths;
    int count, cap;
} file_list;

static void file_list_free(file_list *fl)
{
    for (int i = 0; i < fl->count; i++)
        free(fl->paths[i]);
    free(fl->paths);
    memset(fl, 0, sizeof *fl);
}

static int file_list_add(file_list *fl, const char *path, bk_error *err)
{
    if (fl->count == fl->cap) {
        int cap = fl->cap ? fl->cap * 2 : 16;
        char **p = realloc(fl->paths, (size_t)cap * sizeof *p);
        if (!p)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory listing data files at '%s'", path);
        fl->paths = p;
        fl->cap = cap;
    }
    size_t n = strlen(path) + 1;
    char *copy = malloc(n);
    if (!copy)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory listing data files at '%s'", path);
    memcpy(copy, path, n);
    fl->paths[fl->count++] = copy;
    return BK_OK;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds the matching regular files under directory `dir` (sorted by name, hidden entries skipped,
 * symlinked directories not followed, symlinked files read). */
static int walk_dir(const char *dir, const char *const *ext, int n_ext, file_list *fl, bk_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return bk_fail(err, BK_ERR_IO, "cannot read directory '%s': %s", dir, strerror(errno));
    file_list names = {0};
    int rc = BK_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if ((rc = file_list_add(&names, e->d_name, err)) != BK_OK)
            break;
    }
    closedir(d);
    if (rc != BK_OK) {
        file_list_free(&names);
        return rc;
    }
    if (names.count > 1)
        qsort(names.paths, (size_t)names.count, sizeof *names.paths, compare_names);

    size_t dlen = strlen(dir);
    int slash = dlen > 0 && dir[dlen - 1] == '/';
    for (int i = 0; i < names.count && rc == BK_OK; i++) {
        size_t len = dlen + 1 + strlen(names.paths[i]) + 1;
        char *full = malloc(len);
        if (!full) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory listing data files in '%s'", dir);
            break;
        }
        size_t nlen = strlen(names.paths[i]);
        memcpy(full, dir, dlen);
        size_t k = dlen;
        if (!slash)
            full[k++] = '/';
        memcpy(full + k, names.paths[i], nlen + 1);
        struct stat st;
        if (lstat(full, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                rc = walk_dir(full, ext, n_ext, fl, err);
            } else {
                /* a symlink counts when it points at a regular file; symlinked directories would risk loops */
                int regular = S_ISREG(st.st_mode) || (S_ISLNK(st.st_mode) && stat(full, &st) == 0 && S_ISREG(st.st_mode));
                if (regular && has_extension(names.paths[i], ext, n_ext))
                    rc = file_list_add(fl, full, err);
            }
        }
        free(full);
    }
    file_list_free(&names);
    return rc;
}

/* Adds the files of one configured path; a named regular file is always taken, whatever its name. */
static int collect(const char *path, const char *const *ext, int n_ext, file_list *fl, bk_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return bk_fail(err, BK_ERR_IO, "data path '%s' does not exist", path);
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    }
    int before = fl->count;
    if (S_ISREG(st.st_mode)) {
        int rc = file_list_add(fl, path, err);
        if (rc != BK_OK)
            return rc;
    } else if (S_ISDIR(st.st_mode)) {
        int rc = walk_dir(path, ext, n_ext, fl, err);
        if (rc != BK_OK)
            return rc;
    } else {
        return bk_fail(err, BK_ERR_IO, "data path '%s' is neither a regular file nor a directory", path);
    }
    if (fl->count == before) {
        char desc[512];
        describe_extensions(desc, sizeof desc, ext, n_ext);
        return bk_fail(err, BK_ERR_CONFIG, "no files under '%s' %s", path, desc);
    }
    return BK_OK;
}

/* ---- reading tokens ---- */

typedef struct token_buf {
    uint16_t *tok;
    int64_t count, cap;
} token_buf;

static int token_buf_reserve(token_buf *b, int64_t extra, const char *path, bk_error *err)
{
    if (extra <= b->cap - b->count)
        return BK_OK;
    int64_t need = b->count + extra, cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap > INT64_MAX / 2 ? need : cap * 2;
    if ((uint64_t)cap > SIZE_MAX / sizeof(uint16_t))
        return bk_fail(err, BK_ERR_NOMEM, "'%s': %lld tokens do not fit in memory", path, (long long)need);
    uint16_t *p = realloc(b->tok, (size_t)cap * sizeof *p);
    if (!p)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory reading '%s' (%lld tokens)", path, (long long)need);
    b->tok = p;
    b->cap = cap;
    return BK_OK;
}

/* Appends the bytes of a text file open as `f`, at most `limit` of them (< 0 = all); `path` names it. */
static int read_text_stream(FILE *f, const char *path, int64_t limit, int32_t vocab, token_buf *b, bk_error *err)
{
    unsigned char chunk[BK_READ_CHUNK];
    int64_t offset = 0;
    int rc = BK_OK;
    while (limit < 0 || offset < limit) {
        size_t want = sizeof chunk;
        if (limit >= 0 && (int64_t)want > limit - offset)
            want = (size_t)(limit - offset);
        size_t got = fread(chunk, 1, want, f);
        if (got == 0) {
            if (ferror(f))
                rc = bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
        if ((rc = token_buf_reserve(b, (int64_t)got, path, err)) != BK_OK)
            break;
        for (size_t i = 0; i < got; i++) {
            if (chunk[i] >= vocab) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: byte %d at offset %lld is outside the vocabulary (vocab %d)", path,
                             chunk[i], (long long)(offset + (int64_t)i), (int)vocab);
                break;
            }
            b->tok[b->count++] = chunk[i];
        }
        if (rc != BK_OK)
            break;
        offset += (int64_t)got;
    }
    return rc;
}

static int read_text(const char *path, int64_t limit, int32_t vocab, token_buf *b, bk_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    int rc = read_text_stream(f, path, limit, vocab, b, err);
    fclose(f);
    return rc;
}

static int32_t read_le32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v;
}

/* Appends the tokens of one llm.c shard open as `f`; `path` names it. The file must hold exactly the
 * header and the tokens its header counts, as llm.c's own loader (dataloader.h) requires: fewer is
 * "truncated", more is refused too (a header that undercounts would silently drop the rest). */
static int read_shard_stream(FILE *f, const char *path, int32_t vocab, token_buf *b, bk_error *err)
{
    unsigned char chunk[BK_READ_CHUNK];
    int rc = BK_OK;
    size_t got = fread(chunk, 1, BK_SHARD_HEADER_BYTES, f);
    int32_t magic = 0, version = 0, n = 0;
    if (got < BK_SHARD_HEADER_BYTES) {
        rc = ferror(f) ? bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno))
                       : bk_fail(err, BK_ERR_PARSE, "%s: truncated header (%zu bytes, expected %d)", path, got,
                                 BK_SHARD_HEADER_BYTES);
    } else {
        magic = read_le32(chunk);
        version = read_le32(chunk + 4);
        n = read_le32(chunk + 8);
        if (magic != BK_SHARD_MAGIC)
            rc = bk_fail(err, BK_ERR_PARSE, "%s: not an llm.c token shard (magic %d, expected %d)", path, (int)magic,
                         BK_SHARD_MAGIC);
        else if (version != BK_SHARD_VERSION)
            rc = bk_fail(err, BK_ERR_PARSE, "%s: unsupported shard version %d (expected %d)", path, (int)version,
                         BK_SHARD_VERSION);
        else if (n < 0)
            rc = bk_fail(err, BK_ERR_PARSE, "%s: header says %d tokens, expected a count >= 0", path, (int)n);
    }
    int64_t done = 0; /* tokens of this shard read so far */
    while (rc == BK_OK && done < n) {
        size_t want = sizeof chunk / 2;
        if ((int64_t)want > n - done)
            want = (size_t)(n - done);
        got = fread(chunk, 2, want, f);
        if ((rc = token_buf_reserve(b, (int64_t)got, path, err)) != BK_OK)
            break;
        for (size_t i = 0; i < got; i++) {
            uint16_t t = (uint16_t)(chunk[2 * i] | chunk[2 * i + 1] << 8);
            if (t >= vocab) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: token %u at index %lld is outside the vocabulary (vocab %d)", path,
                             (unsigned)t, (long long)(done + (int64_t)i), (int)vocab);
                break;
            }
            b->tok[b->count++] = t;
        }
        if (rc != BK_OK)
            break;
        done += (int64_t)got;
        if (got < want) {
            rc = ferror(f) ? bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno))
                           : bk_fail(err, BK_ERR_PARSE, "%s: truncated: header says %d tokens, file holds %lld", path,
                                     (int)n, (long long)done);
        }
    }
    if (rc == BK_OK && fgetc(f) != EOF) { /* bytes after the counted tokens */
        off_t end = fseeko(f, 0, SEEK_END) == 0 ? ftello(f) : -1;
        long long extra = end >= 0 ? (long long)end - BK_SHARD_HEADER_BYTES - 2LL * n : -1;
        if (extra < 0)
            rc = bk_fail(err, BK_ERR_PARSE, "%s: header says %d tokens, but the file holds more data after them; "
                         "expected exactly %d header bytes + 2 bytes per token", path, (int)n, BK_SHARD_HEADER_BYTES);
        else
            rc = bk_fail(err, BK_ERR_PARSE, "%s: header says %d tokens, but the file holds %lld (%lld bytes after the "
                         "header, expected %lld); a shard's size must match its header", path, (int)n,
                         (long long)(end - BK_SHARD_HEADER_BYTES) / 2, (long long)(end - BK_SHARD_HEADER_BYTES),
                         2LL * n);
    }
    return rc;
}

static int read_shard(const char *path, int32_t vocab, token_buf *b, bk_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    int rc = read_shard_stream(f, path, vocab, b, err);
    fclose(f);
    return rc;
}

/* Reads one stream from `paths` into `out` (zeroed on failure). */
static int load_stream(const bk_data_config *cfg, const char *const *paths, int n_paths, int32_t vocab, bk_tokens *out,
                       bk_error *err)
{
    memset(out, 0, sizeof *out);
    if (n_paths <= 0 || !paths)
        return bk_fail(err, BK_ERR_CONFIG, "data: no paths given");
    char where[1024];
    describe_paths(where, sizeof where, paths, n_paths);

    int text = cfg->format == BK_DATA_TEXT;
    static const char *const bin_ext[1] = {".bin"};
    const char *const *ext = text ? cfg->extensions : bin_ext;
    int n_ext = text ? (cfg->extensions ? cfg->n_extensions : 0) : 1;

    file_list files = {0};
    token_buf buf = {0};
    int rc = BK_OK, n_read = 0;
    for (int i = 0; i < n_paths && rc == BK_OK; i++)
        rc = collect(paths[i], ext, n_ext, &files, err);
    for (int i = 0; i < files.count && rc == BK_OK; i++) {
        if (text) {
            int64_t limit = -1;
            if (cfg->max_bytes > 0) {
                if (buf.count >= cfg->max_bytes)
                    break;
                limit = cfg->max_bytes - buf.count;
            }
            rc = read_text(files.paths[i], limit, vocab, &buf, err);
        } else {
            rc = read_shard(files.paths[i], vocab, &buf, err);
        }
        n_read++;
    }
    if (rc == BK_OK && buf.count == 0)
        rc = bk_fail(err, BK_ERR_CONFIG, "%s: the corpus is empty (%d file%s, 0 %s)", where, n_read,
                     n_read == 1 ? "" : "s", text ? "bytes" : "tokens");
    if (rc == BK_OK) {
        if (n_paths == 1 && files.count == 1 && strcmp(files.paths[0], paths[0]) == 0) {
            bk_copy_text(out->name, sizeof out->name, paths[0]);
        } else {
            char name[sizeof where + 64];
            int w = snprintf(name, sizeof name, "%d file%s under ", n_read, n_read == 1 ? "" : "s");
            if (w > 0 && (size_t)w < sizeof name) {
                for (int i = 0; i < n_paths; i++) {
                    int k = snprintf(name + w, sizeof name - (size_t)w, "%s%s", i ? ", " : "", paths[i]);
                    if (k < 0 || (size_t)k >= sizeof name - (size_t)w)
                        break;
                    w += k;
                }
            }
            bk_copy_text(out->name, sizeof out->name, name);
        }
        if (buf.cap > buf.count) { /* give back the slack */
            uint16_t *p = realloc(buf.tok, (size_t)buf.count * sizeof *p);
            if (p)
                buf.tok = p;
        }
        out->tokens = buf.tok;
        out->count = buf.count;
        out->n_files = n_read;
    } else {
        free(buf.tok);
    }
    file_list_free(&files);
    return rc;
}

static int check_size(const bk_tokens *t, const char *side, const char *const *paths, int n_paths, int64_t min_tokens,
                      bk_error *err)
{
    if (t->count >= min_tokens)
        return BK_OK;
    char where[1024];
    describe_paths(where, sizeof where, paths, n_paths);
    return bk_fail(err, BK_ERR_CONFIG, "%s data (%s, from %s) has %lld tokens, at least %lld are needed", side, t->name,
                   where, (long long)t->count, (long long)min_tokens);
}

int bk_data_load(const bk_data_config *cfg, int32_t vocab, int64_t min_tokens, bk_tokens *train, bk_tokens *val,
                 bk_error *err)
{
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (cfg->format != BK_DATA_TEXT && cfg->format != BK_DATA_SHARDS)
        return bk_fail(err, BK_ERR_CONFIG, "data: unknown format %d (expected text or shards)", (int)cfg->format);
    if (vocab <= 0)
        return bk_fail(err, BK_ERR_CONFIG, "data: vocabulary size %d must be positive", (int)vocab);
    int by_fraction = cfg->n_val_paths <= 0;
    if (by_fraction && !(cfg->val_fraction > 0.0 && cfg->val_fraction < 1.0))
        return bk_fail(err, BK_ERR_CONFIG,
                       "data: val_fraction %g must be between 0 and 1 (exclusive) when no val_paths are given",
                       cfg->val_fraction);

    int rc = load_stream(cfg, cfg->paths, cfg->n_paths, vocab, train, err);
    if (rc != BK_OK)
        return rc;
    if (by_fraction) {
        int64_t n_val = llround((double)train->count * cfg->val_fraction);
        if (n_val > train->count)
            n_val = train->count;
        if (n_val > 0) {
            val->tokens = malloc((size_t)n_val * sizeof *val->tokens);
            if (!val->tokens) {
                bk_tokens_free(train);
                return bk_fail(err, BK_ERR_NOMEM, "out of memory splitting %lld validation tokens", (long long)n_val);
            }
            memcpy(val->tokens, train->tokens + (train->count - n_val), (size_t)n_val * sizeof *val->tokens);
        }
        val->count = n_val;
        train->count -= n_val;
        val->n_files = train->n_files;
        char base[sizeof train->name];
        bk_copy_text(base, sizeof base, train->name);
        char name[sizeof base + 64];
        int w = snprintf(name, sizeof name, "last %g%% of %s", 100.0 * cfg->val_fraction, base);
        bk_copy_text(val->name, sizeof val->name, w > 0 ? name : base);
        w = snprintf(name, sizeof name, "first %g%% of %s", 100.0 * (1.0 - cfg->val_fraction), base);
        bk_copy_text(train->name, sizeof train->name, w > 0 ? name : base);
    } else {
        rc = load_stream(cfg, cfg->val_paths, cfg->n_val_paths, vocab, val, err);
        if (rc != BK_OK) {
            bk_tokens_free(train);
            return rc;
        }
    }
    rc = check_size(train, "training", cfg->paths, cfg->n_paths, min_tokens, err);
    if (rc == BK_OK)
        rc = by_fraction ? check_size(val, "validation", cfg->paths, cfg->n_paths, min_tokens, err)
                         : check_size(val, "validation", cfg->val_paths, cfg->n_val_paths, min_tokens, err);
    if (rc != BK_OK) {
        bk_tokens_free(train);
        bk_tokens_free(val);
    }
    return rc;
}

int bk_data_read_memory(bk_data_format format, const void *bytes, size_t size, const char *name, int32_t vocab,
                        int64_t max_bytes, bk_tokens *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    if (!name)
        name = "<memory>";
    if (format != BK_DATA_TEXT && format != BK_DATA_SHARDS)
        return bk_fail(err, BK_ERR_CONFIG, "%s: unknown data format %d (expected text or shards)", name, (int)format);
    if (vocab <= 0)
        return bk_fail(err, BK_ERR_CONFIG, "%s: vocabulary size %d must be positive", name, (int)vocab);
    static char empty[1];
    /* fmemopen needs a buffer of at least one byte; an empty one is read as a stream with nothing in it */
    FILE *f = fmemopen(size ? (void *)bytes : empty, size ? size : 1, "rb");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "%s: cannot open %zu bytes as a stream: %s", name, size, strerror(errno));
    if (!size)
        (void)fgetc(f); /* at the end of the stream */
    token_buf buf = {0};
    int rc = format == BK_DATA_TEXT ? read_text_stream(f, name, max_bytes > 0 ? max_bytes : -1, vocab, &buf, err)
                                    : read_shard_stream(f, name, vocab, &buf, err);
    fclose(f);
    if (rc != BK_OK) {
        free(buf.tok);
        return rc;
    }
    out->tokens = buf.tok;
    out->count = buf.count;
    out->n_files = 1;
    bk_copy_text(out->name, sizeof out->name, name);
    return BK_OK;
}

void bk_tokens_free(bk_tokens *t)
{
    if (!t)
        return;
    free(t->tokens);
    memset(t, 0, sizeof *t);
}

/* ---- loader ---- */

/* The window order of `epoch`: identity, or Fisher-Yates from a SplitMix64 stream seeded by (seed, epoch). */
static void compute_order(bk_loader *ld)
{
    for (int64_t i = 0; i < ld->n_windows; i++)
        ld->order[i] = i;
    if (!ld->shuffle)
        return;
    bk_rng rng = {bk_splitmix64(ld->seed ^ ((uint64_t)ld->epoch * BIASKIT_SPLITMIX64_GAMMA))};
    for (int64_t i = ld->n_windows - 1; i > 0; i--) {
        uint64_t bound = (uint64_t)i + 1, limit = UINT64_MAX - UINT64_MAX % bound, r;
        do /* rejection keeps j uniform */
            r = bk_rng_u64(&rng);
        while (r >= limit);
        int64_t j = (int64_t)(r % bound), tmp = ld->order[i];
        ld->order[i] = ld->order[j];
        ld->order[j] = tmp;
    }
}

int bk_loader_init(bk_loader *ld, const bk_tokens *data, int B, int T, uint64_t seed, int shuffle, bk_error *err)
{
    memset(ld, 0, sizeof *ld);
    if (B <= 0 || T <= 0)
        return bk_fail(err, BK_ERR_CONFIG, "loader: batch %d and context %d must be positive", B, T);
    if (!data || data->count < (int64_t)T + 1)
        return bk_fail(err, BK_ERR_CONFIG, "'%s': %lld tokens, a window of context %d needs at least %lld",
                       data ? data->name : "(no data)", data ? (long long)data->count : 0LL, T, (long long)T + 1);
    int64_t n = (data->count - 1) / T;
    if ((uint64_t)n > SIZE_MAX / sizeof(int64_t))
        return bk_fail(err, BK_ERR_NOMEM, "'%s': %lld windows do not fit in memory", data->name, (long long)n);
    ld->order = malloc((size_t)n * sizeof *ld->order);
    if (!ld->order)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the window order of '%s' (%lld windows)", data->name,
                       (long long)n);
    ld->data = data;
    ld->B = B;
    ld->T = T;
    ld->seed = seed;
    ld->shuffle = shuffle;
    ld->n_windows = n;
    compute_order(ld);
    return BK_OK;
}

void bk_loader_free(bk_loader *ld)
{
    if (!ld)
        return;
    free(ld->order);
    memset(ld, 0, sizeof *ld);
}

void bk_loader_next(bk_loader *ld, int32_t *inputs, int32_t *targets)
{
    const int T = ld->T;
    for (int b = 0; b < ld->B; b++) {
        if (ld->index >= ld->n_windows) {
            ld->epoch++;
            ld->index = 0;
            compute_order(ld);
        }
        const uint16_t *tok = ld->data->tokens + ld->order[ld->index++] * T;
        int32_t *in = inputs + (size_t)b * (size_t)T, *tg = targets + (size_t)b * (size_t)T;
        for (int t = 0; t < T; t++) {
            in[t] = tok[t];
            tg[t] = tok[t + 1];
        }
    }
}

int bk_loader_seek(bk_loader *ld, int64_t epoch, int64_t index, bk_error *err)
{
    if (epoch < 0)
        return bk_fail(err, BK_ERR_INVALID, "loader cursor: epoch %lld must be >= 0", (long long)epoch);
    if (index < 0 || index > ld->n_windows)
        return bk_fail(err, BK_ERR_INVALID, "loader cursor: index %lld is outside [0, %lld] ('%s' has %lld windows)",
                       (long long)index, (long long)ld->n_windows, ld->data ? ld->data->name : "",
                       (long long)ld->n_windows);
    ld->epoch = epoch;
    ld->index = index;
    compute_order(ld);
    return BK_OK;
}
