/* safetensors files: round trips, the header as written on disk, atomic overwrite (one temp file per writer, so
 * concurrent writers of one path never mix their bytes), the header-size cap, XXH64 against its reference values,
 * a message for each way a file can be malformed (truncated, bad JSON, wrong dtype, mismatched or overlapping
 * offsets), and regular files only (a FIFO or a device refused without blocking). */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include "io/safetensors.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct fixture {
    char dir[512];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/bk_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

/* Removes the temp directory and everything in it (files, and the directories a test made). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                remove_tree(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int teardown(void **state)
{
    fixture *fx = *state;
    remove_tree(fx->dir);
    free(fx);
    return 0;
}

static const char *path_in(void **state, const char *name, char *buf, size_t size)
{
    fixture *fx = *state;
    snprintf(buf, size, "%s/%s", fx->dir, name);
    return buf;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    unsigned char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_bytes(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A hand-made file: length `header_len` (little-endian), the header text, then `data_len` bytes of data. */
static void write_raw(const char *path, uint64_t header_len, const char *header, const void *data, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)(header_len >> (8 * i));
    assert_int_equal(fwrite(len, 1, 8, f), 8);
    size_t h = strlen(header);
    assert_int_equal(fwrite(header, 1, h, f), h);
    if (data_len)
        assert_int_equal(fwrite(data, 1, data_len, f), data_len);
    assert_int_equal(fclose(f), 0);
}

static void write_crafted(const char *path, const char *header, const void *data, size_t data_len)
{
    write_raw(path, strlen(header), header, data, data_len);
}

static void expect_open_fails(const char *path, int code, const char *needle)
{
    static int dummy;
    bk_safetensors *st = (bk_safetensors *)(void *)&dummy; /* must come back NULL */
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(bk_safetensors_open(path, &st, &err), code);
    assert_null(st);
    assert_int_equal(err.code, code);
    assert_message_has(err.message, path);
    assert_message_has(err.message, needle);
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The round-trip set: a 0-d scalar, a vector with special values, 2-d, 3-d, and an empty tensor. */
static const float scalar_v[1] = {3.5f};
static float vec_v[5];
static const float mat_v[6] = {0, 1, 2, 3, 4, 5};
static const float cube_v[4] = {-1.25f, 2.5f, 1e30f, -7.0f};

static int sample_tensors(bk_st_tensor *t)
{
    vec_v[0] = 1.0f;
    vec_v[1] = -0.0f;
    vec_v[2] = INFINITY;
    vec_v[3] = NAN;
    vec_v[4] = 1e-40f; /* subnormal */
    t[0] = (bk_st_tensor){"scalar", 0, {0}, scalar_v};
    t[1] = (bk_st_tensor){"vec", 1, {5}, vec_v};
    t[2] = (bk_st_tensor){"mat", 2, {2, 3}, mat_v};
    t[3] = (bk_st_tensor){"cube", 3, {2, 1, 2}, cube_v};
    t[4] = (bk_st_tensor){"empty", 2, {0, 3}, NULL};
    return 5;
}

static const bk_st_meta sample_meta[2] = {{"format", "pt"}, {"note", "quote \" backslash \\ tab\t \xc3\xbcnicode"}};

static void write_sample(const char *path)
{
    bk_st_tensor t[5];
    int n = sample_tensors(t);
    bk_error err;
    assert_int_equal(bk_safetensors_write(path, t, n, sample_meta, 2, &err), BK_OK);
}

static void round_trip(void **state)
{
    char path[600];
    path_in(state, "model.safetensors", path, sizeof path);
    bk_st_tensor t[5];
    int n = sample_tensors(t);
    write_sample(path);

    bk_safetensors *st = NULL;
    bk_error err;
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_non_null(st);
    assert_int_equal(bk_safetensors_count(st), n);
    for (int i = 0; i < n; i++) {
        const bk_st_tensor *got = bk_safetensors_find(st, t[i].name);
        assert_non_null(got);
        assert_ptr_equal(got, bk_safetensors_at(st, i)); /* written contiguously in the given order */
        assert_string_equal(got->name, t[i].name);
        assert_int_equal(got->ndim, t[i].ndim);
        size_t count = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            assert_int_equal(got->shape[d], t[i].shape[d]);
            count *= (size_t)t[i].shape[d];
        }
        assert_non_null(got->data);
        assert_int_equal((uintptr_t)got->data % sizeof(float), 0);
        if (count) /* bit for bit: -0, inf, NaN and subnormals survive */
            assert_memory_equal(got->data, t[i].data, count * sizeof(float));
    }
    assert_float_equal(bk_safetensors_find(st, "scalar")->data[0], 3.5f, 0);
    assert_true(isnan(bk_safetensors_find(st, "vec")->data[3]));
    assert_float_equal(bk_safetensors_find(st, "mat")->data[5], 5.0f, 0);
    assert_string_equal(bk_safetensors_meta(st, "format"), "pt");
    assert_string_equal(bk_safetensors_meta(st, "note"), sample_meta[1].value);
    assert_null(bk_safetensors_meta(st, "missing"));
    assert_null(bk_safetensors_meta(st, "__metadata__"));
    assert_null(bk_safetensors_find(st, "missing"));
    assert_null(bk_safetensors_find(st, "__metadata__"));
    assert_null(bk_safetensors_at(st, -1));
    assert_null(bk_safetensors_at(st, n));
    bk_safetensors_close(st);

    /* no tensors and no metadata: still a valid file */
    path_in(state, "empty.safetensors", path, sizeof path);
    assert_int_equal(bk_safetensors_write(path, NULL, 0, NULL, 0, &err), BK_OK);
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_int_equal(bk_safetensors_count(st), 0);
    assert_null(bk_safetensors_at(st, 0));
    assert_null(bk_safetensors_meta(st, "format"));
    bk_safetensors_close(st);
    bk_safetensors_close(NULL);
}

/* The header alone: the same tensors, shapes and metadata, no data; a truncated data section is
 * still refused (the offsets are checked against the file's size). */
static void header_only(void **state)
{
    char path[600], cut[600];
    path_in(state, "model.safetensors", path, sizeof path);
    path_in(state, "cut.safetensors", cut, sizeof cut);
    bk_st_tensor t[5];
    int n = sample_tensors(t);
    write_sample(path);
    bk_safetensors *st = NULL;
    bk_error err;
    assert_int_equal(bk_safetensors_open_header(path, &st, &err), BK_OK);
    assert_int_equal(bk_safetensors_count(st), n);
    for (int i = 0; i < n; i++) {
        const bk_st_tensor *got = bk_safetensors_find(st, t[i].name);
        assert_non_null(got);
        assert_int_equal(got->ndim, t[i].ndim);
        assert_null(got->data);
    }
    assert_string_equal(bk_safetensors_meta(st, "note"), sample_meta[1].value);
    bk_safetensors_close(st);

    size_t len;
    unsigned char *bytes = read_all(path, &len);
    write_bytes(cut, bytes, len - 1);
    assert_int_equal(bk_safetensors_open_header(cut, &st, &err), BK_ERR_PARSE);
    assert_null(st);
    assert_message_has(err.message, "tensor 'cube' ends at byte 64 of the data, the file holds 63 data bytes");
    free(bytes);
}

static void header_is_aligned_json(void **state)
{
    char path[600];
    path_in(state, "h.safetensors", path, sizeof path);
    write_sample(path);
    size_t len;
    unsigned char *bytes = read_all(path, &len);
    assert_true(len >= 8);
    uint64_t n = le64(bytes);
    assert_int_equal((8 + n) % 8, 0);
    assert_int_equal(len, 8 + n + 64); /* 1 + 5 + 6 + 4 floats, nothing after */
    assert_int_equal(bytes[8], '{');

    const char *header = (const char *)bytes + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, (size_t)n, &end, 0);
    assert_non_null(root);
    for (const char *p = end; p < header + n; p++) /* the padding is spaces only */
        assert_int_equal(*p, ' ');
    assert_true(end + 8 > header + n); /* less than 8 bytes of padding */

    cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    assert_true(cJSON_IsObject(meta));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(meta, "format")->valuestring, "pt");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(meta, "note")->valuestring, sample_meta[1].value);
    cJSON *mat = cJSON_GetObjectItemCaseSensitive(root, "mat");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(mat, "dtype")->valuestring, "F32");
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(mat, "shape");
    assert_int_equal(cJSON_GetArraySize(shape), 2);
    assert_int_equal(cJSON_GetArrayItem(shape, 0)->valueint, 2);
    assert_int_equal(cJSON_GetArrayItem(shape, 1)->valueint, 3);
    cJSON *offsets = cJSON_GetObjectItemCaseSensitive(mat, "data_offsets");
    assert_int_equal(cJSON_GetArrayItem(offsets, 0)->valueint, 24);
    assert_int_equal(cJSON_GetArrayItem(offsets, 1)->valueint, 48);
    cJSON *scalar = cJSON_GetObjectItemCaseSensitive(root, "scalar");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(scalar, "shape")), 0);
    cJSON_Delete(root);
    /* integers as plain digits (never 2.4e+01), as Rust's u64 parser wants */
    char *text = strndup(header, (size_t)n);
    assert_non_null(strstr(text, "\"data_offsets\":[24,48]"));
    assert_non_null(strstr(text, "\"shape\":[2,1,2]"));
    free(text);

    /* the data section holds the floats little-endian */
    float mat5;
    memcpy(&mat5, bytes + 8 + n + 24 + 5 * 4, 4);
    assert_float_equal(mat5, 5.0f, 0);
    free(bytes);
}

static void file_order_is_data_order(void **state)
{
    char path[600];
    bk_error err;
    bk_safetensors *st = NULL;
    /* written order is file order, whatever the names */
    path_in(state, "order.safetensors", path, sizeof path);
    const float a[2] = {1, 2}, b[1] = {3};
    bk_st_tensor t[2] = {{"zeta", 1, {2}, a}, {"alpha", 1, {1}, b}};
    assert_int_equal(bk_safetensors_write(path, t, 2, NULL, 0, &err), BK_OK);
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_string_equal(bk_safetensors_at(st, 0)->name, "zeta");
    assert_string_equal(bk_safetensors_at(st, 1)->name, "alpha");
    assert_float_equal(bk_safetensors_at(st, 1)->data[0], 3.0f, 0);
    bk_safetensors_close(st);

    /* a header listing tensors out of data order, its data at an unaligned place in the file (a 118-byte
     * header: the data begins at file byte 126, not a multiple of 4) */
    path_in(state, "shuffled.safetensors", path, sizeof path);
    unsigned char data[12] = {0};
    const float first = 1.5f, second[2] = {-2.0f, 8.0f};
    memcpy(data, &first, 4);
    memcpy(data + 4, second, 8);
    write_crafted(path,
                  "{\"second\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                  "\"first\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}  ",
                  data, sizeof data);
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_int_equal(bk_safetensors_count(st), 2);
    assert_string_equal(bk_safetensors_at(st, 0)->name, "first");
    assert_string_equal(bk_safetensors_at(st, 1)->name, "second");
    const bk_st_tensor *s = bk_safetensors_find(st, "second");
    assert_ptr_equal(s, bk_safetensors_at(st, 1));
    assert_int_equal((uintptr_t)s->data % sizeof(float), 0);
    assert_float_equal(s->data[0], -2.0f, 0);
    assert_float_equal(s->data[1], 8.0f, 0);
    assert_float_equal(bk_safetensors_find(st, "first")->data[0], 1.5f, 0);
    bk_safetensors_close(st);
}

/* Entries of `dir` whose name starts with `prefix` (the temp files a writer of `prefix` leaves). */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void overwrite_is_atomic(void **state)
{
    fixture *fx = *state;
    char path[600], tmp[700];
    path_in(state, "ckpt.safetensors", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    write_sample(path);
    const float v[3] = {7, 8, 9};
    bk_st_tensor t = {"only", 1, {3}, v};
    const bk_st_meta m = {"format", "np"};
    bk_error err;
    assert_int_equal(bk_safetensors_write(path, &t, 1, &m, 1, &err), BK_OK);
    assert_false(file_exists(tmp));
    assert_int_equal(count_prefixed(fx->dir, "ckpt.safetensors.tmp"), 0);
    bk_safetensors *st = NULL;
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_int_equal(bk_safetensors_count(st), 1);
    assert_null(bk_safetensors_find(st, "mat"));
    assert_float_equal(bk_safetensors_find(st, "only")->data[2], 9.0f, 0);
    assert_string_equal(bk_safetensors_meta(st, "format"), "np");
    bk_safetensors_close(st);

    /* another writer's temp file (here at the fixed name PATH.tmp that every writer once shared) is
     * neither used nor removed: each write makes its own, with O_EXCL */
    assert_int_equal(mkdir(tmp, 0700), 0);
    if (bk_safetensors_write(path, &t, 1, NULL, 0, &err))
        fail_msg("%s", err.message);
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_null(bk_safetensors_meta(st, "format"));
    bk_safetensors_close(st);
    assert_int_equal(rmdir(tmp), 0); /* left alone: the writer did not make it */

    /* when the final rename fails (PATH is a directory) the written tmp file is removed */
    char dir_path[600];
    path_in(state, "adir", dir_path, sizeof dir_path);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir_path);
    assert_int_equal(mkdir(dir_path, 0700), 0);
    assert_int_equal(bk_safetensors_write(dir_path, &t, 1, &m, 1, &err), BK_ERR_IO);
    assert_message_has(err.message, "cannot write '");
    assert_message_has(err.message, dir_path);
    assert_message_has(err.message, "Is a directory");
    assert_false(file_exists(tmp));
    assert_int_equal(count_prefixed(fx->dir, "adir.tmp"), 0);
}

/* A writer killed mid-write leaves its temp file; the next write of the same path removes it, but not
 * the temp file of a writer still alive (here: this process) nor files of other names. */
static void stale_temp_files_are_removed(void **state)
{
    fixture *fx = *state;
    char path[600], dead[700], alive[700], other[700];
    path_in(state, "run.safetensors", path, sizeof path);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child); /* reaped: its pid names no process now */
    snprintf(dead, sizeof dead, "%s.tmp.%ld.0badc0de", path, (long)child);
    snprintf(alive, sizeof alive, "%s.tmp.%ld.00c0ffee", path, (long)getpid());
    snprintf(other, sizeof other, "%s/other.safetensors.tmp.%ld.0badc0de", fx->dir, (long)child);
    write_bytes(dead, "partial", 7);
    write_bytes(alive, "partial", 7);
    write_bytes(other, "partial", 7);
    write_sample(path);
    assert_false(file_exists(dead));
    assert_true(file_exists(alive));
    assert_true(file_exists(other));
}

/* Two processes writing one path over and over: every file either sees is a complete one of the two
 * (with one shared temp file, one writer truncated the other's file before its rename). */
static void concurrent_writers(void **state)
{
    fixture *fx = *state;
    char path[600];
    path_in(state, "shared.safetensors", path, sizeof path);
    enum { SMALL = 64, LARGE = 65536, ROUNDS = 150 };
    pid_t pids[2];
    for (int w = 0; w < 2; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] > 0)
            continue;
        int64_t n = w ? LARGE : SMALL;
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)(w + 1);
        bk_st_tensor t = {"w", 1, {n}, v};
        int bad = 0;
        for (int r = 0; r < ROUNDS && !bad; r++) {
            bk_error err;
            bk_safetensors *st = NULL;
            bad = bk_safetensors_write(path, &t, 1, NULL, 0, &err) != BK_OK;
            if (!bad && bk_safetensors_open(path, &st, &err) != BK_OK)
                bad = 2;
            if (!bad) {
                const bk_st_tensor *got = bk_safetensors_find(st, "w");
                int64_t len = got ? got->shape[0] : 0;
                bad = !got || (len != SMALL && len != LARGE) || got->data[len - 1] != (len == SMALL ? 1.0f : 2.0f);
            }
            if (bad)
                fprintf(stderr, "writer %d round %d: %s\n", w, r, bad == 2 ? err.message : "wrong contents");
            bk_safetensors_close(st);
        }
        free(v);
        _exit(bad);
    }
    for (int w = 0; w < 2; w++) {
        int status = 0;
        assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(count_prefixed(fx->dir, "shared.safetensors.tmp"), 0);
}

/* The length field is capped (100 MB, as the reference implementation) before anything is allocated for
 * it: a file that really is that long with a corrupt length is refused without reading its header. */
static void header_size_is_capped(void **state)
{
    char path[600];
    path_in(state, "huge.safetensors", path, sizeof path);
    const uint64_t claimed = (uint64_t)BK_ST_MAX_HEADER + 8;
    write_raw(path, claimed, "{}", NULL, 0);
    assert_int_equal(truncate(path, (off_t)(8 + claimed + 16)), 0); /* sparse: no disk used */
    expect_open_fails(path, BK_ERR_PARSE, "its length field says 100000008 bytes, more than the 100000000");
    /* exactly at the cap is a length like any other (here: a header of spaces after "{}") */
    write_raw(path, BK_ST_MAX_HEADER, "{}", NULL, 0);
    assert_int_equal(truncate(path, (off_t)(8 + BK_ST_MAX_HEADER)), 0);
    expect_open_fails(path, BK_ERR_PARSE, "unexpected text after the JSON at byte 2"); /* NULs, not spaces */
}

/* XXH64 against the reference values of the xxHash specification, lengths that take every branch. */
static void xxh64_reference_values(void **state)
{
    (void)state;
    assert_true(bk_xxh64("", 0, 0) == 0xef46db3751d8e999ULL);
    assert_true(bk_xxh64("", 0, 1) == 0xd5afba1336a3be4bULL);
    assert_true(bk_xxh64("a", 1, 0) == 0xd24ec4f1a98c6e5bULL);
    assert_true(bk_xxh64("as", 2, 0) == 0x1c330fb2d66be179ULL);
    assert_true(bk_xxh64("asd", 3, 0) == 0x631c37ce72a97393ULL);
    assert_true(bk_xxh64("asdf", 4, 0) == 0x415872f599cea71eULL);
    assert_true(bk_xxh64("abc", 3, 0) == 0x44bc2cf5ad770999ULL);
    assert_true(bk_xxh64("Call me Ishmael.", 16, 0) == 0x6d04390fc9d61a90ULL);
    const char *long46 = "Some years ago--never mind how long precisely-";
    assert_true(bk_xxh64(long46, strlen(long46), 0) == 0x8f26f2b986afdc52ULL);
    const char *long39 = "Nobody inspects the spammish repetition";
    assert_true(bk_xxh64(long39, strlen(long39), 0) == 0xfbcea83c8a378bf1ULL);
}

static void truncated_files(void **state)
{
    char path[600], cut[600], needle[256];
    path_in(state, "full.safetensors", path, sizeof path);
    path_in(state, "cut.safetensors", cut, sizeof cut);
    write_sample(path);
    size_t len;
    unsigned char *bytes = read_all(path, &len);
    uint64_t n = le64(bytes);

    const size_t short_cuts[] = {0, 3, 7};
    for (size_t i = 0; i < sizeof short_cuts / sizeof *short_cuts; i++) {
        write_bytes(cut, bytes, short_cuts[i]);
        snprintf(needle, sizeof needle, "truncated: %zu bytes, too short for a safetensors header", short_cuts[i]);
        expect_open_fails(cut, BK_ERR_PARSE, needle);
    }
    /* inside the header */
    write_bytes(cut, bytes, 8 + (size_t)n / 2);
    snprintf(needle, sizeof needle, "truncated: the header claims %" PRIu64 " bytes, the file has only %" PRIu64, n,
             n / 2);
    expect_open_fails(cut, BK_ERR_PARSE, needle);
    write_bytes(cut, bytes, 8 + (size_t)n - 1);
    expect_open_fails(cut, BK_ERR_PARSE, "the file has only");
    /* no data at all: the scalar (bytes 0..4) is the first tensor past the end */
    write_bytes(cut, bytes, 8 + (size_t)n);
    expect_open_fails(cut, BK_ERR_PARSE,
                      "truncated: tensor 'scalar' ends at byte 4 of the data, the file holds 0 data bytes");
    /* inside the data: vec (bytes 4..24) is cut */
    write_bytes(cut, bytes, 8 + (size_t)n + 10);
    expect_open_fails(cut, BK_ERR_PARSE,
                      "truncated: tensor 'vec' ends at byte 24 of the data, the file holds 10 data bytes");
    /* one byte short of the end: the last float of cube */
    write_bytes(cut, bytes, len - 1);
    expect_open_fails(cut, BK_ERR_PARSE, "tensor 'cube' ends at byte 64 of the data, the file holds 63 data bytes");
    /* the whole file still opens */
    write_bytes(cut, bytes, len);
    bk_safetensors *st = NULL;
    bk_error err;
    assert_int_equal(bk_safetensors_open(cut, &st, &err), BK_OK);
    bk_safetensors_close(st);
    free(bytes);
}

static void header_length_too_large(void **state)
{
    char path[600];
    path_in(state, "big.safetensors", path, sizeof path);
    const char *header = "{}";
    write_raw(path, (uint64_t)1 << 40, header, NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "truncated: the header claims 1099511627776 bytes, the file has only 2");
    write_raw(path, UINT64_MAX, header, NULL, 0); /* no overflow in the size check */
    expect_open_fails(path, BK_ERR_PARSE, "the header claims 18446744073709551615 bytes");
    write_raw(path, 3, header, NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "the header claims 3 bytes, the file has only 2");
}

static void invalid_json(void **state)
{
    char path[600];
    path_in(state, "bad.safetensors", path, sizeof path);
    write_crafted(path, "{\"w\": {\"dtype\": \"F32\", ", NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "bad safetensors header: invalid JSON near byte");
    write_crafted(path, "{\"w\" 12}", NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "invalid JSON near byte 5");
    write_crafted(path, "", NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "invalid JSON near byte 0");
    write_crafted(path, "{} x", NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "bad safetensors header: unexpected text after the JSON at byte 3");
    write_crafted(path, "[1, 2]", NULL, 0);
    expect_open_fails(path, BK_ERR_PARSE, "bad safetensors header: expected a JSON object");
    write_crafted(path, "{}   \n ", NULL, 0); /* trailing whitespace is allowed */
    bk_safetensors *st = NULL;
    bk_error err;
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_int_equal(bk_safetensors_count(st), 0);
    bk_safetensors_close(st);
}

static void wrong_dtype(void **state)
{
    char path[600];
    path_in(state, "bf16.safetensors", path, sizeof path);
    const unsigned char data[4] = {0};
    write_crafted(path, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(path, BK_ERR_PARSE, "tensor 'w' has dtype BF16, biaskit reads F32");
    write_crafted(path, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(path, BK_ERR_PARSE, "tensor 'w' has no dtype");
}

static void shape_offset_mismatch(void **state)
{
    char path[600];
    path_in(state, "mismatch.safetensors", path, sizeof path);
    const unsigned char data[24] = {0};
    write_crafted(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", data, 24);
    expect_open_fails(path, BK_ERR_PARSE, "tensor 'w': shape [2, 3] needs 24 bytes, data_offsets give 20");
    write_crafted(path, "{\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", data, 24);
    expect_open_fails(path, BK_ERR_PARSE, "tensor 's': shape [] needs 4 bytes, data_offsets give 0");
}

static void malformed_entries(void **state)
{
    char path[600];
    path_in(state, "entries.safetensors", path, sizeof path);
    const unsigned char data[64] = {0};
    static const struct {
        const char *header, *needle;
    } cases[] = {
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
         "tensor 'w': shape entry 0 is not a non-negative integer"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1.5],\"data_offsets\":[0,4]}}",
         "tensor 'w': shape entry 1 is not a non-negative integer"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", "shape entry 1"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}",
         "tensor 'w' has 5 dimensions, biaskit reads at most 4"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}", "tensor 'w' has no shape array"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
         "tensor 'w': data_offsets must be [begin, end]"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", "tensor 'w': data_offsets must be"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", "tensor 'w': data_offsets must be"},
        {"{\"w\":[1,2]}", "tensor 'w': expected an object"},
        {"{\"__metadata__\":{\"epoch\":3}}", "__metadata__ value 'epoch' is not a string"},
        {"{\"__metadata__\":[\"a\"]}", "__metadata__ must be an object of strings"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         "tensor 'w' appears twice"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}",
         "tensor 'w': shape [1099511627776, 1099511627776] is too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_crafted(path, cases[i].header, data, sizeof data);
        expect_open_fails(path, BK_ERR_PARSE, cases[i].needle);
    }
}

static void overlapping_tensors(void **state)
{
    char path[600];
    path_in(state, "overlap.safetensors", path, sizeof path);
    const unsigned char data[16] = {0};
    write_crafted(path,
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  data, sizeof data);
    expect_open_fails(path, BK_ERR_PARSE, "tensors 'a' (bytes 0..8) and 'b' (bytes 4..12) overlap");
    /* the same bytes twice, listed in the other order */
    write_crafted(path,
                  "{\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                  data, sizeof data);
    expect_open_fails(path, BK_ERR_PARSE, "tensors 'b' (bytes 4..16) and 'a' (bytes 8..12) overlap");
    /* touching is not overlapping; an empty tensor takes no bytes */
    write_crafted(path,
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                  data, sizeof data);
    bk_safetensors *st = NULL;
    bk_error err;
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    assert_int_equal(bk_safetensors_count(st), 3);
    assert_string_equal(bk_safetensors_at(st, 2)->name, "b");
    bk_safetensors_close(st);
}

/* The data is entirely indexed: bytes appended after the last tensor, or a hole between two, are
 * refused (both used to open without a word). */
static void data_holes_and_trailing_bytes(void **state)
{
    char path[600];
    path_in(state, "holes.safetensors", path, sizeof path);
    const unsigned char data[20] = {0};
    write_crafted(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 13);
    expect_open_fails(path, BK_ERR_PARSE,
                      "5 bytes after the last tensor's data (the tensors end at byte 8 of the data, the file holds "
                      "13 data bytes)");
    write_crafted(path,
                  "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                  data, 16);
    expect_open_fails(path, BK_ERR_PARSE,
                      "tensor 'b' begins at byte 8 of the data, expected 4 (where the previous tensor ends)");
    write_crafted(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", data, 8);
    expect_open_fails(path, BK_ERR_PARSE, "tensor 'a' begins at byte 4 of the data, expected 0 (where the header ends)");
    write_crafted(path, "{\"__metadata__\":{\"k\":\"v\"}}", data, 1);
    expect_open_fails(path, BK_ERR_PARSE, "1 bytes after the last tensor's data");
    write_crafted(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    bk_safetensors *st = NULL;
    bk_error err;
    assert_int_equal(bk_safetensors_open(path, &st, &err), BK_OK);
    bk_safetensors_close(st);
}

static void unreadable_files(void **state)
{
    char path[600];
    path_in(state, "missing.safetensors", path, sizeof path);
    expect_open_fails(path, BK_ERR_IO, "cannot read '");
    expect_open_fails(path, BK_ERR_IO, "No such file or directory");
    fixture *fx = *state;
    expect_open_fails(fx->dir, BK_ERR_IO, "is a directory; expected a regular file");
    /* a FIFO (or a device) is refused by name at once: opening it for reading would block */
    path_in(state, "fifo.safetensors", path, sizeof path);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20); /* a blocking open fails the test instead of hanging it */
    expect_open_fails(path, BK_ERR_IO, "is a FIFO (named pipe); expected a regular file");
    expect_open_fails("/dev/zero", BK_ERR_IO, "is a character device");
    alarm(0);
}

static void write_into_missing_directory(void **state)
{
    char path[600], needle[700];
    path_in(state, "no/such/dir/model.safetensors", path, sizeof path);
    bk_st_tensor t[5];
    int n = sample_tensors(t);
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(bk_safetensors_write(path, t, n, sample_meta, 2, &err), BK_ERR_IO);
    assert_int_equal(err.code, BK_ERR_IO);
    snprintf(needle, sizeof needle, "cannot write '%s': No such file or directory", path);
    assert_message_has(err.message, needle);
    assert_false(file_exists(path));
}

static void write_rejects_bad_input(void **state)
{
    char path[600];
    path_in(state, "rejected.safetensors", path, sizeof path);
    const float v[4] = {1, 2, 3, 4};
    bk_error err;
    bk_st_tensor dup[2] = {{"w", 1, {2}, v}, {"w", 1, {2}, v + 2}};
    assert_int_equal(bk_safetensors_write(path, dup, 2, NULL, 0, &err), BK_ERR_INVALID);
    assert_message_has(err.message, path);
    assert_message_has(err.message, "two tensors are called 'w'");
    bk_st_tensor five = {"w", 5, {1, 1, 1, 1}, v};
    assert_int_equal(bk_safetensors_write(path, &five, 1, NULL, 0, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "tensor 'w' has 5 dimensions, expected 0..4");
    bk_st_tensor negative = {"w", -1, {0}, v};
    assert_int_equal(bk_safetensors_write(path, &negative, 1, NULL, 0, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "tensor 'w' has -1 dimensions");
    bk_st_tensor bad_dim = {"w", 2, {2, -2}, v};
    assert_int_equal(bk_safetensors_write(path, &bad_dim, 1, NULL, 0, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "dimension 1 of size -2");
    bk_st_tensor reserved = {"__metadata__", 1, {1}, v};
    assert_int_equal(bk_safetensors_write(path, &reserved, 1, NULL, 0, &err), BK_ERR_INVALID);
    bk_st_tensor ok = {"w", 1, {4}, v};
    const bk_st_meta dup_meta[2] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(bk_safetensors_write(path, &ok, 1, dup_meta, 2, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "two metadata entries have the key 'k'");
    assert_false(file_exists(path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(header_only, setup, teardown),
        cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(header_is_aligned_json, setup, teardown),
        cmocka_unit_test_setup_teardown(file_order_is_data_order, setup, teardown),
        cmocka_unit_test_setup_teardown(overwrite_is_atomic, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_temp_files_are_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(header_size_is_capped, setup, teardown),
        cmocka_unit_test(xxh64_reference_values),
        cmocka_unit_test_setup_teardown(truncated_files, setup, teardown),
        cmocka_unit_test_setup_teardown(header_length_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(invalid_json, setup, teardown),
        cmocka_unit_test_setup_teardown(wrong_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(shape_offset_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(data_holes_and_trailing_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(overlapping_tensors, setup, teardown),
        cmocka_unit_test_setup_teardown(unreadable_files, setup, teardown),
        cmocka_unit_test_setup_teardown(write_into_missing_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(write_rejects_bad_input, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
