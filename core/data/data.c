/* Training data: text files (one byte = one token) or llm.c uint16 shards, a train/validation split,
 * and a deterministic, resumable batch loader. */
#define _DEFAULT_SOURCE /* readlink, realpath */

#include "data/data.h"
#include "data/split.h"

#include "util/file.h"
#include "util/path.h"
#include "util/rng.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* What a walk left out that the user should hear of: symlinks to directories outside the walked path
 * (their files are not read; a link inside it, such as libpng -> libpng16, only names files read
 * anyway) and dangling symlinks. The first few are kept by name. */
enum { SKIPPED_NAMED = 3 };
typedef struct skipped {
    const char *root; /* the real path of the configured path walked */
    int outside, dangling;
    char names[2][SKIPPED_NAMED][600];
} skipped;

static void skipped_note(skipped *sk, int dangling, const char *path, const char *target)
{
    int *n = dangling ? &sk->dangling : &sk->outside;
    if (*n < SKIPPED_NAMED)
        snprintf(sk->names[dangling][*n], sizeof sk->names[dangling][*n], "'%.280s' -> '%.280s'", path, target);
    (*n)++;
}

/* One warning per configured path for what its walk left out. */
static void skipped_warn(const skipped *sk, const char *path)
{
    static const char *const what[2][2] = {
        {"symlink to a directory outside it", "symlinks to directories outside it"},
        {"dangling symlink", "dangling symlinks"}};
    static const char *const fate[2] = {"not followed, their files are not read", "skipped"};
    const int counts[2] = {sk->outside, sk->dangling};
    for (int k = 0; k < 2; k++) {
        if (!counts[k])
            continue;
        fprintf(stderr, "biaskit: warning: data path '%s': %d %s (%s):", path, counts[k], what[k][counts[k] > 1],
                fate[k]);
        for (int i = 0; i < counts[k] && i < SKIPPED_NAMED; i++)
            fprintf(stderr, "%s %s", i ? "," : "", sk->names[k][i]);
        fprintf(stderr, "%s%s\n", counts[k] > SKIPPED_NAMED ? ", ..." : "",
                k == 0 ? "; name a target in [data] paths to read it" : "");
    }
}

/* Adds the matching regular files under directory `dir` (sorted by name, hidden entries skipped,
 * symlinked files read). Symlinked directories are not followed (a loop, or a tree read twice), and a
 * dangling symlink holds nothing: both are skipped, and noted in `sk` when they matter (a link out of
 * the walked path; every dangling one). An entry that the name filter would take but that is neither a
 * regular file nor a directory (a FIFO, a socket, a device, or a symlink to one) is refused, naming
 * it: reading a FIFO would block and a device would never end, and skipping it would train on less
 * than the directory holds without a word. */
static int walk_dir(const char *dir, const char *const *ext, int n_ext, file_list *fl, skipped *sk, bk_error *err)
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
            const int link = S_ISLNK(st.st_mode);
            const int dangling = link && stat(full, &st) != 0; /* a symlink counts as what it points at */
            if (dangling) {
                char target[PATH_MAX];
                ssize_t n = readlink(full, target, sizeof target - 1);
                target[n > 0 ? n : 0] = '\0';
                skipped_note(sk, 1, full, target);
            } else if (link && S_ISDIR(st.st_mode)) {
                char real[PATH_MAX];
                if (realpath(full, real) && !bk_path_within(real, sk->root))
                    skipped_note(sk, 0, full, real);
            } else if (S_ISDIR(st.st_mode)) {
                rc = walk_dir(full, ext, n_ext, fl, sk, err);
            } else if (bk_name_has_suffix(names.paths[i], ext, n_ext)) {
                if (S_ISREG(st.st_mode))
                    rc = file_list_add(fl, full, err);
                else
                    rc = bk_fail(err, BK_ERR_IO, "'%s' (in data directory '%s') is %s%s; expected a regular file: "
                                 "a corpus directory may hold only regular files, directories and symlinks (remove "
                                 "it, or name the files to read with [data] extensions)", full, dir,
                                 link ? "a symlink to " : "", bk_file_kind(st.st_mode));
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
        char root[PATH_MAX];
        skipped sk = {.root = realpath(path, root) ? root : path};
        int rc = walk_dir(path, ext, n_ext, fl, &sk, err);
        if (rc != BK_OK)
            return rc;
        skipped_warn(&sk, path);
    } else {
        return bk_fail(err, BK_ERR_IO, "data path '%s' is %s; expected a regular file or a directory", path,
                       bk_file_kind(st.st_mode));
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

/* Appends the bytes of a text file open as `f` of `size` bytes, at most `limit` of them (< 0 = all);
 * `path` names it. Only the bytes the file held when it was opened are read: one that shrinks meanwhile
 * is an error, and one that grows (a log being written) is read as it was. */
static int read_text_stream(FILE *f, const char *path, uint64_t size, int64_t limit, int32_t vocab, token_buf *b,
                            bk_error *err)
{
    unsigned char chunk[BK_READ_CHUNK];
    int64_t offset = 0;
    if (size > (uint64_t)INT64_MAX)
        size = (uint64_t)INT64_MAX;
    if (limit < 0 || (uint64_t)limit > size)
        limit = (int64_t)size;
    int rc = token_buf_reserve(b, limit, path, err);
    while (rc == BK_OK && offset < limit) {
        size_t want = sizeof chunk;
        if ((int64_t)want > limit - offset)
            want = (size_t)(limit - offset);
        size_t got = fread(chunk, 1, want, f);
        if (got == 0) {
            if (ferror(f))
                rc = bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
            else
                rc = bk_fail(err, BK_ERR_IO, "'%s' changed while it was read: %llu bytes when opened, only %lld "
                             "could be read", path, (unsigned long long)size, (long long)offset);
            break;
        }
        for (size_t i = 0; i < got; i++) { /* room for all `limit` bytes was reserved above */
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

/* What the readers call a file in messages (util/file.h): "data file '<path>' is a FIFO ...". */
#define BK_DATA_FILE "data file"

static int read_text(const char *path, int64_t limit, int32_t vocab, token_buf *b, bk_error *err)
{
    FILE *f;
    uint64_t size;
    int rc = bk_file_open_regular(path, BK_DATA_FILE, 0, &f, &size, err);
    if (rc != BK_OK)
        return rc;
    rc = read_text_stream(f, path, size, limit, vocab, b, err);
    fclose(f);
    return rc;
}

static int32_t read_le32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v;
}

/* "header says N tokens, but the file holds M (...)": a shard longer than its header counts. */
static int shard_longer(const char *path, int32_t n, long long end, bk_error *err)
{
    return bk_fail(err, BK_ERR_PARSE, "%s: header says %d tokens, but the file holds %lld (%lld bytes after the "
                   "header, expected %lld); a shard's size must match its header", path, (int)n,
                   (end - BK_SHARD_HEADER_BYTES) / 2, end - BK_SHARD_HEADER_BYTES, 2LL * n);
}

/* Appends the tokens of one llm.c shard open as `f` of `size` bytes; `path` names it. The file must
 * hold exactly the header and the tokens its header counts, as llm.c's own loader (dataloader.h)
 * requires: fewer is "truncated", more is refused too (a header that undercounts would silently drop
 * the rest). The size is compared with the header before any token is read, and again by the reading
 * (a file that changes meanwhile). */
static int read_shard_stream(FILE *f, const char *path, uint64_t size, int32_t vocab, token_buf *b, bk_error *err)
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
        else if (size < (uint64_t)BK_SHARD_HEADER_BYTES + 2 * (uint64_t)n)
            rc = bk_fail(err, BK_ERR_PARSE, "%s: truncated: header says %d tokens, file holds %lld", path, (int)n,
                         (long long)(size > BK_SHARD_HEADER_BYTES ? (size - BK_SHARD_HEADER_BYTES) / 2 : 0));
        else if (size > (uint64_t)BK_SHARD_HEADER_BYTES + 2 * (uint64_t)n)
            rc = shard_longer(path, n, size > (uint64_t)LLONG_MAX ? LLONG_MAX : (long long)size, err);
        else
            rc = token_buf_reserve(b, n, path, err);
    }
    int64_t done = 0; /* tokens of this shard read so far */
    while (rc == BK_OK && done < n) {
        size_t want = sizeof chunk / 2;
        if ((int64_t)want > n - done)
            want = (size_t)(n - done);
        got = fread(chunk, 2, want, f);
        for (size_t i = 0; i < got; i++) { /* room for the header's n tokens was reserved above */
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
            rc = shard_longer(path, n, (long long)end, err);
    }
    return rc;
}

static int read_shard(const char *path, int32_t vocab, token_buf *b, bk_error *err)
{
    FILE *f;
    uint64_t size;
    int rc = bk_file_open_regular(path, BK_DATA_FILE, 0, &f, &size, err);
    if (rc != BK_OK)
        return rc;
    rc = read_shard_stream(f, path, size, vocab, b, err);
    fclose(f);
    return rc;
}

/* The files of one stream: those of each entry of its paths in turn; entry e gave files
 * start[e] .. start[e + 1] - 1. */
typedef struct stream_files {
    const char *key; /* "paths" or "val_paths", for messages */
    const char *const *paths;
    int n_paths;
    file_list files;
    int *start; /* n_paths + 1 */
} stream_files;

static void stream_files_free(stream_files *sf)
{
    file_list_free(&sf->files);
    free(sf->start);
    sf->start = NULL;
}

static int collect_stream(const bk_data_config *cfg, const char *key, const char *const *paths, int n_paths,
                          stream_files *sf, bk_error *err)
{
    memset(sf, 0, sizeof *sf);
    sf->key = key, sf->paths = paths, sf->n_paths = n_paths;
    if (n_paths <= 0 || !paths)
        return bk_fail(err, BK_ERR_CONFIG, "data: no paths given");
    if (!(sf->start = malloc(((size_t)n_paths + 1) * sizeof *sf->start)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory listing the data files of %s", key);
    int text = cfg->format == BK_DATA_TEXT;
    static const char *const bin_ext[1] = {BK_SHARD_EXTENSION};
    const char *const *ext = text ? cfg->extensions : bin_ext;
    int n_ext = text ? (cfg->extensions ? cfg->n_extensions : 0) : 1;
    int rc = BK_OK;
    for (int i = 0; i < n_paths && rc == BK_OK; i++) {
        sf->start[i] = sf->files.count;
        rc = collect(paths[i], ext, n_ext, &sf->files, err);
    }
    sf->start[n_paths] = sf->files.count;
    if (rc != BK_OK)
        stream_files_free(sf);
    return rc;
}

/* A file of the streams: its identity, and where it was found. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    int side;  /* 0: the training stream's paths, 1: val_paths */
    int entry; /* index in that list */
    int index; /* in its stream's files */
} file_id;

static int compare_ids(const void *pa, const void *pb)
{
    const file_id *a = pa, *b = pb;
    if (a->dev != b->dev)
        return a->dev < b->dev ? -1 : 1;
    if (a->ino != b->ino)
        return a->ino < b->ino ? -1 : 1;
    if (a->side != b->side)
        return a->side - b->side;
    if (a->entry != b->entry)
        return a->entry - b->entry;
    return a->index - b->index;
}

/* One file reached through two entries (of paths, or of paths and val_paths) would be read twice: its
 * text counted twice in training, or in training and in validation as well. Refused naming both
 * entries. (Within one entry's directory a symlink to a file of the same tree is read as a file of its
 * own, as it always was: system trees such as /usr/include hold such links.) */
static int check_distinct(stream_files *const *streams, int n_streams, bk_error *err)
{
    size_t n = 0;
    for (int s = 0; s < n_streams; s++)
        n += (size_t)streams[s]->files.count;
    file_id *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory comparing %zu data files", n);
    size_t k = 0;
    for (int s = 0; s < n_streams; s++)
        for (int e = 0; e < streams[s]->n_paths; e++)
            for (int i = streams[s]->start[e]; i < streams[s]->start[e + 1]; i++) {
                struct stat st;
                if (stat(streams[s]->files.paths[i], &st) != 0)
                    continue; /* gone since it was listed: the read says so */
                ids[k++] = (file_id){st.st_dev, st.st_ino, s, e, i};
            }
    qsort(ids, k, sizeof *ids, compare_ids);
    int rc = BK_OK;
    for (size_t run = 0, end; run < k && rc == BK_OK; run = end) {
        for (end = run + 1; end < k && ids[end].dev == ids[run].dev && ids[end].ino == ids[run].ino; end++)
            ;
        const file_id *a = &ids[run], *b = &ids[end - 1]; /* the first and last entry that reach it */
        if (a->side == b->side && a->entry == b->entry)
            continue;
        const stream_files *sa = streams[a->side], *sb = streams[b->side];
        const char *fa = sa->files.paths[a->index], *fb = sb->files.paths[b->index];
        const char *ea = sa->paths[a->entry], *eb = sb->paths[b->entry];
        const char *why = a->side != b->side ? "the validation text would be in training as well"
                                             : "its text would be read twice";
        if (strcmp(fa, ea) == 0 && strcmp(fb, eb) == 0)
            rc = bk_fail(err, BK_ERR_CONFIG, "data: %s entry %d ('%s') and %s entry %d ('%s') are the same file; %s",
                         sa->key, a->entry + 1, ea, sb->key, b->entry + 1, eb, why);
        else
            rc = bk_fail(err, BK_ERR_CONFIG, "data: %s entry %d ('%s') and %s entry %d ('%s') both hold the file "
                         "'%s'%s%s%s; %s", sa->key, a->entry + 1, ea, sb->key, b->entry + 1, eb, fa,
                         strcmp(fa, fb) ? " (as '" : "", strcmp(fa, fb) ? fb : "", strcmp(fa, fb) ? "')" : "", why);
    }
    free(ids);
    return rc;
}

/* "a, b, c" of the configured entries, as much as fits. */
static void list_entries(char *dst, size_t size, const char *const *paths, int n_paths)
{
    size_t w = 0;
    dst[0] = '\0';
    for (int i = 0; i < n_paths; i++) {
        int k = snprintf(dst + w, size - w, "%s%s", i ? ", " : "", paths[i]);
        if (k < 0 || (size_t)k >= size - w)
            break;
        w += (size_t)k;
    }
}

/* out takes the tokens of buf (the slack given back). */
static void tokens_take(bk_tokens *out, token_buf *buf, int n_read)
{
    if (buf->cap > buf->count) {
        uint16_t *p = realloc(buf->tok, (size_t)buf->count * sizeof *p);
        if (p)
            buf->tok = p;
    }
    out->tokens = buf->tok;
    out->count = buf->count;
    out->n_files = n_read;
}

/* Reads one stream from the files of `sf` into `out` (zeroed on failure). */
static int load_stream(const bk_data_config *cfg, const stream_files *sf, int32_t vocab, bk_tokens *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    const char *const *paths = sf->paths;
    const int n_paths = sf->n_paths;
    const file_list files = sf->files;
    char where[1024];
    describe_paths(where, sizeof where, paths, n_paths);
    int text = cfg->format == BK_DATA_TEXT;
    token_buf buf = {0};
    int rc = BK_OK, n_read = 0;
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
            if (w > 0 && (size_t)w < sizeof name)
                list_entries(name + w, sizeof name - (size_t)w, paths, n_paths);
            bk_copy_text(out->name, sizeof out->name, name);
        }
        tokens_take(out, &buf, n_read);
    } else {
        free(buf.tok);
    }
    return rc;
}

/* ---- the split by document (data/split.h) ---- */

/* The units (bytes of text, tokens of a shard) each file gives, from its size: a text file at most what
 * max_bytes leaves after the files before it (0 past the limit), as load_stream reads them. */
static int file_units(const bk_data_config *cfg, const file_list *files, int64_t *units, bk_error *err)
{
    const int text = cfg->format == BK_DATA_TEXT;
    int64_t used = 0;
    for (int i = 0; i < files->count; i++) {
        struct stat st;
        if (stat(files->paths[i], &st) != 0)
            return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", files->paths[i], strerror(errno));
        int64_t u = text ? (int64_t)st.st_size : ((int64_t)st.st_size - BK_SHARD_HEADER_BYTES) / 2;
        u = u < 0 ? 0 : u;
        if (text && cfg->max_bytes > 0)
            u = u < cfg->max_bytes - used ? u : cfg->max_bytes - used;
        units[i] = u;
        used += u;
    }
    return BK_OK;
}

static int split_add(bk_data_split *s, const char *path, int64_t units, bk_error *err)
{
    char **f = realloc(s->val_files, ((size_t)s->n_val + 1) * sizeof *f);
    if (f)
        s->val_files = f;
    int64_t *u = realloc(s->val_units, ((size_t)s->n_val + 1) * sizeof *u);
    if (u)
        s->val_units = u;
    char *copy = f && u ? strdup(path) : NULL;
    if (!copy)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory describing the validation split");
    s->val_files[s->n_val] = copy, s->val_units[s->n_val++] = units;
    return BK_OK;
}

/* The split of a configuration without val_paths, from the training paths' files and their units: val[i]
 * = 1 for the documents of validation (all 0 when the split is the tail). */
static int plan_fraction(const bk_data_config *cfg, const file_list *files, const int64_t *units, unsigned char *val,
                         bk_data_split *s, bk_error *err)
{
    int n = 0, rc = BK_OK;
    int64_t total = 0;
    for (int i = 0; i < files->count; i++)
        n += units[i] > 0, total += units[i];
    memset(val, 0, (size_t)files->count);
    s->mode = cfg->split == BK_SPLIT_TAIL ? BK_SPLIT_TAIL : BK_SPLIT_DOCUMENTS;
    if (s->mode == BK_SPLIT_DOCUMENTS && n < 2) {
        s->mode = BK_SPLIT_TAIL;
        snprintf(s->note, sizeof s->note, "one document%s cannot be split by document: its tail is validation; give "
                 "two or more files, or val_paths", cfg->max_bytes > 0 && files->count > 1 ? " within max_bytes" : "");
    }
    if (s->mode == BK_SPLIT_DOCUMENTS) {
        int64_t *u = malloc((size_t)n * sizeof *u);
        int *at = malloc((size_t)n * sizeof *at);
        unsigned char *pick = malloc((size_t)n);
        if (!u || !at || !pick)
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory splitting %d documents", n);
        for (int i = 0, k = 0; !rc && i < files->count; i++)
            if (units[i] > 0)
                u[k] = units[i], at[k++] = i;
        if (!rc)
            bk_split_choose(u, n, cfg->val_fraction, cfg->split_seed, pick);
        for (int k = 0; !rc && k < n; k++) {
            val[at[k]] = pick[k];
            s->files[pick[k]]++, s->units[pick[k]] += u[k];
            if (pick[k])
                rc = split_add(s, files->paths[at[k]], u[k], err);
        }
        free(u), free(at), free(pick);
        return rc;
    }
    /* the tail: the files it covers, from the end (the token count as bk_data_load cuts it) */
    const int64_t tail = llround((double)total * cfg->val_fraction);
    int first = files->count;
    for (int64_t need = tail; first > 0 && need > 0; need -= units[--first])
        ;
    int64_t before = 0;
    for (int i = 0; i < first; i++)
        before += units[i];
    s->units[1] = tail, s->units[0] = total - tail;
    for (int i = first; !rc && i < files->count; i++) {
        if (units[i] == 0)
            continue;
        const int64_t in_val = i == first ? units[i] - (total - tail - before) : units[i];
        s->first_part = s->first_part || (i == first && in_val < units[i]);
        s->files[1]++;
        rc = split_add(s, files->paths[i], in_val, err);
    }
    for (int i = 0; i < files->count; i++)
        s->files[0] += units[i] > 0 && (i < first || (i == first && s->first_part));
    return rc;
}

/* One side of a split by document: the files of `files` with val[i] == side, in order, each up to its
 * units (data/split.h). */
static int load_documents(const bk_data_config *cfg, const file_list *files, const int64_t *units,
                          const unsigned char *val, int side, int32_t vocab, bk_tokens *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    token_buf buf = {0};
    int rc = BK_OK, n_read = 0;
    for (int i = 0; i < files->count && rc == BK_OK; i++) {
        if (units[i] <= 0 || val[i] != side)
            continue;
        rc = cfg->format == BK_DATA_TEXT ? read_text(files->paths[i], units[i], vocab, &buf, err)
                                         : read_shard(files->paths[i], vocab, &buf, err);
        n_read++;
    }
    if (rc != BK_OK) {
        free(buf.tok);
        return rc;
    }
    char name[sizeof out->name];
    int w = snprintf(name, sizeof name, "%d document%s (split_seed %llu) under ", n_read, n_read == 1 ? "" : "s",
                     (unsigned long long)cfg->split_seed);
    if (w > 0 && (size_t)w < sizeof name)
        list_entries(name + w, sizeof name - (size_t)w, cfg->paths, cfg->n_paths);
    bk_copy_text(out->name, sizeof out->name, name);
    tokens_take(out, &buf, n_read);
    return BK_OK;
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

/* The split of the collected streams (sf[1] only without by_fraction): its description, and for a split by
 * fraction the files' units and the documents of validation (*units, *docs: malloc'd, or NULL). */
static int plan_stream(const bk_data_config *cfg, const stream_files *sf, int by_fraction, bk_data_split *plan,
                       int64_t **units, unsigned char **docs, bk_error *err)
{
    memset(plan, 0, sizeof *plan);
    plan->seed = cfg->split_seed, plan->fraction = cfg->val_fraction, plan->text = cfg->format == BK_DATA_TEXT;
    *units = NULL, *docs = NULL;
    const file_list *files = by_fraction ? &sf[0].files : &sf[1].files;
    const size_t n = files->count > 0 ? (size_t)files->count : 1;
    int64_t *u = malloc(n * sizeof *u);
    unsigned char *v = malloc(n);
    int rc = u && v ? file_units(cfg, files, u, err) : bk_fail(err, BK_ERR_NOMEM, "out of memory listing %zu files", n);
    if (rc == BK_OK && by_fraction) {
        rc = plan_fraction(cfg, files, u, v, plan, err);
    } else if (rc == BK_OK) { /* val_paths: every file of them; training: its files */
        plan->mode = BK_SPLIT_PATHS;
        for (int i = 0; rc == BK_OK && i < files->count; i++)
            if (u[i] > 0)
                plan->files[1]++, plan->units[1] += u[i], rc = split_add(plan, files->paths[i], u[i], err);
        int64_t *t = rc == BK_OK ? malloc((sf[0].files.count > 0 ? (size_t)sf[0].files.count : 1) * sizeof *t) : NULL;
        if (rc == BK_OK && !t)
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory listing %d files", sf[0].files.count);
        if (rc == BK_OK && (rc = file_units(cfg, &sf[0].files, t, err)) == BK_OK)
            for (int i = 0; i < sf[0].files.count; i++)
                plan->files[0] += t[i] > 0, plan->units[0] += t[i];
        free(t);
    }
    if (rc != BK_OK) {
        free(u), free(v);
        bk_data_split_free(plan);
        return rc;
    }
    *units = u, *docs = v;
    return BK_OK;
}

int bk_data_plan(const bk_data_config *cfg, bk_data_split *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    const int by_fraction = cfg->n_val_paths <= 0;
    stream_files sf[2];
    memset(sf, 0, sizeof sf);
    int rc = collect_stream(cfg, "paths", cfg->paths, cfg->n_paths, &sf[0], err);
    if (rc == BK_OK && !by_fraction)
        rc = collect_stream(cfg, "val_paths", cfg->val_paths, cfg->n_val_paths, &sf[1], err);
    int64_t *units = NULL;
    unsigned char *docs = NULL;
    if (rc == BK_OK)
        rc = plan_stream(cfg, sf, by_fraction, out, &units, &docs, err);
    free(units), free(docs);
    stream_files_free(&sf[0]);
    stream_files_free(&sf[1]);
    return rc;
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

    stream_files sf[2];
    int rc = collect_stream(cfg, "paths", cfg->paths, cfg->n_paths, &sf[0], err);
    if (rc != BK_OK)
        return rc;
    if (!by_fraction && (rc = collect_stream(cfg, "val_paths", cfg->val_paths, cfg->n_val_paths, &sf[1], err))) {
        stream_files_free(&sf[0]);
        return rc;
    }
    stream_files *streams[2] = {&sf[0], &sf[1]};
    /* `eval --data`: both sides are the same list on purpose (every token is evaluation data), so only
     * the list itself must not name one file twice */
    const int one_list = !by_fraction && cfg->val_paths == cfg->paths && cfg->n_val_paths == cfg->n_paths;
    rc = check_distinct(streams, by_fraction || one_list ? 1 : 2, err);
    bk_data_split plan;
    memset(&plan, 0, sizeof plan);
    if (cfg->split_out)
        memset(cfg->split_out, 0, sizeof *cfg->split_out);
    int64_t *units = NULL;
    unsigned char *docs = NULL;
    rc = rc ? rc : plan_stream(cfg, sf, by_fraction, &plan, &units, &docs, err);
    const int by_documents = rc == BK_OK && by_fraction && plan.mode == BK_SPLIT_DOCUMENTS;
    if (rc == BK_OK && by_documents) {
        if ((rc = load_documents(cfg, &sf[0].files, units, docs, 0, vocab, train, err)) == BK_OK &&
            (rc = load_documents(cfg, &sf[0].files, units, docs, 1, vocab, val, err)) != BK_OK)
            bk_tokens_free(train);
    } else if (rc == BK_OK) {
        rc = load_stream(cfg, &sf[0], vocab, train, err);
        if (rc == BK_OK && !by_fraction && (rc = load_stream(cfg, &sf[1], vocab, val, err)))
            bk_tokens_free(train);
    }
    free(units), free(docs);
    stream_files_free(&sf[0]);
    if (!by_fraction)
        stream_files_free(&sf[1]);
    if (rc != BK_OK) {
        bk_data_split_free(&plan);
        return rc;
    }
    if (by_fraction && !by_documents) {
        int64_t n_val = llround((double)train->count * cfg->val_fraction);
        if (n_val > train->count)
            n_val = train->count;
        if (n_val > 0) {
            val->tokens = malloc((size_t)n_val * sizeof *val->tokens);
            if (!val->tokens) {
                bk_tokens_free(train);
                bk_data_split_free(&plan);
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
    }
    rc = check_size(train, "training", cfg->paths, cfg->n_paths, min_tokens, err);
    if (rc == BK_OK)
        rc = by_fraction ? check_size(val, "validation", cfg->paths, cfg->n_paths, min_tokens, err)
                         : check_size(val, "validation", cfg->val_paths, cfg->n_val_paths, min_tokens, err);
    if (rc != BK_OK) {
        bk_tokens_free(train);
        bk_tokens_free(val);
    }
    if (rc == BK_OK && cfg->split_out)
        *cfg->split_out = plan;
    else
        bk_data_split_free(&plan);
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
    int rc = format == BK_DATA_TEXT ? read_text_stream(f, name, size, max_bytes > 0 ? max_bytes : -1, vocab, &buf, err)
                                    : read_shard_stream(f, name, size, vocab, &buf, err);
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
    bk_shuffle(ld->order, ld->n_windows, &rng);
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
