/* Training data: walking text corpora (order, hidden entries, symlinks, extension filter, max_bytes),
 * llm.c shards and their errors, the train/validation split, and the deterministic batch loader. */
#define _XOPEN_SOURCE 700

#include "test_util.h"

#include "data/data.h"

#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_root[64];

/* ---- fixtures ---- */

static const char *at(const char *rel)
{
    static char buf[8][512];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 512, "%s/%s", tmp_root, rel);
    return p;
}

static void make_dir(const char *rel)
{
    assert_int_equal(mkdir(at(rel), 0755), 0);
}

static void write_bytes(const char *rel, const void *data, size_t n)
{
    FILE *f = fopen(at(rel), "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *rel, const char *text)
{
    write_bytes(rel, text, strlen(text));
}

static void put_le32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

/* A shard whose header says `header_count` tokens and which holds the first `n_written` of `tok`. */
static void write_shard(const char *rel, int32_t magic, int32_t version, int32_t header_count, const uint16_t *tok,
                        int n_written)
{
    size_t size = BK_SHARD_HEADER_INTS * 4 + 2 * (size_t)n_written;
    unsigned char *buf = calloc(1, size);
    assert_non_null(buf);
    put_le32(buf, magic);
    put_le32(buf + 4, version);
    put_le32(buf + 8, header_count);
    for (int i = 0; i < n_written; i++) {
        buf[BK_SHARD_HEADER_INTS * 4 + 2 * i] = (unsigned char)(tok[i] & 0xff);
        buf[BK_SHARD_HEADER_INTS * 4 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    write_bytes(rel, buf, size);
    free(buf);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/bk_test_data_XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A text config over `paths` that keeps `val_fraction` aside. */
static bk_data_config text_config(const char *const *paths, int n, const char *const *ext, int n_ext, double f)
{
    bk_data_config c = {0};
    c.format = BK_DATA_TEXT;
    c.paths = paths;
    c.n_paths = n;
    c.extensions = ext;
    c.n_extensions = n_ext;
    c.val_fraction = f;
    c.split = BK_SPLIT_TAIL; /* the walk's order shows in the tail; the split by document: split_by_documents */
    return c;
}

static bk_data_config shard_config(const char *const *paths, int n, double f);

/* The whole stream (train then val) as a string, for split-by-fraction loads. */
static void joined(const bk_tokens *train, const bk_tokens *val, char *out, size_t size)
{
    size_t k = 0;
    for (int64_t i = 0; i < train->count && k + 1 < size; i++)
        out[k++] = (char)train->tokens[i];
    for (int64_t i = 0; i < val->count && k + 1 < size; i++)
        out[k++] = (char)val->tokens[i];
    out[k] = '\0';
}

/* ---- text corpora ---- */

static void text_walk(void **state)
{
    (void)state;
    make_dir("walk");
    write_text("walk/B.c", "b"); /* 'B' < 'a' under strcmp */
    write_text("walk/a.c", "aa");
    make_dir("walk/m");
    write_text("walk/m/x.h", "xh");
    write_text("walk/m/y.txt", "no");
    write_text("walk/m.h", "mh"); /* "m" < "m.h": the directory comes first */
    write_text("walk/.hid.c", "HH");
    make_dir("walk/.hd");
    write_text("walk/.hd/q.c", "QQ");
    write_text("walk/z.txt", "zz");
    write_text("outside.c", "LL");
    assert_int_equal(symlink(at("outside.c"), at("walk/lnk.c")), 0); /* read */

    const char *paths[1] = {at("walk")};
    const char *ext[2] = {".c", ".h"};
    bk_tokens train, val;
    bk_error err;
    char all[64];

    bk_data_config c = text_config(paths, 1, ext, 2, 0.25);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    joined(&train, &val, all, sizeof all);
    assert_string_equal(all, "baaLLxhmh");
    assert_int_equal(train.count, 7); /* round(9 * 0.25) = 2 validation tokens */
    assert_int_equal(val.count, 2);
    assert_int_equal(train.n_files, 5);
    assert_non_null(strstr(train.name, "5 files under"));
    assert_non_null(strstr(train.name, "walk"));
    bk_tokens_free(&train);
    bk_tokens_free(&val);
    assert_null(train.tokens);

    c = text_config(paths, 1, NULL, 0, 0.25); /* every extension */
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    joined(&train, &val, all, sizeof all);
    assert_string_equal(all, "baaLLxhnomhzz");
    assert_int_equal(train.n_files, 7);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    c = text_config(paths, 1, ext, 2, 0.25);
    c.max_bytes = 4; /* stops inside the third file */
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    joined(&train, &val, all, sizeof all);
    assert_string_equal(all, "baaL");
    assert_int_equal(train.n_files, 3);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* several paths are concatenated in the given order; a named file is taken whatever its name */
    const char *two[2] = {at("walk/z.txt"), at("walk/m")};
    c = text_config(two, 2, ext, 2, 0.25);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    joined(&train, &val, all, sizeof all);
    assert_string_equal(all, "zzxh");
    bk_tokens_free(&train);
    bk_tokens_free(&val);
}

/* A symlink to a directory is not followed (a loop, or files read twice), nor is a dangling one read:
 * both are skipped; the one that leads out of the walked path and every dangling one are named in a
 * warning (tests/test_reliability.sh reads it). Named in [data] paths, the target is read. */
static void text_linked_directories(void **state)
{
    (void)state;
    bk_tokens train, val;
    bk_error err;
    make_dir("lwalk");
    write_text("lwalk/a.c", "aa");
    make_dir("lwalk/in");
    write_text("lwalk/in/c.c", "cc");
    make_dir("ltarget");
    write_text("ltarget/b.c", "bb");
    assert_int_equal(symlink(at("ltarget"), at("lwalk/more")), 0);   /* outside: skipped, named */
    assert_int_equal(symlink(at("lwalk/in"), at("lwalk/same")), 0);  /* inside: its files are read anyway */
    assert_int_equal(symlink(at("nowhere"), at("lwalk/gone.c")), 0); /* dangling: skipped, named */
    const char *paths[1] = {at("lwalk")};
    bk_data_config c = text_config(paths, 1, NULL, 0, 0.25);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.n_files, 2); /* a.c, in/c.c */
    bk_tokens_free(&train);
    bk_tokens_free(&val);
    const char *both[2] = {at("lwalk/a.c"), at("ltarget")};
    c = text_config(both, 2, NULL, 0, 0.25);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.n_files, 2);
    bk_tokens_free(&train);
    bk_tokens_free(&val);
}

static void text_errors(void **state)
{
    (void)state;
    bk_tokens train, val;
    bk_error err;
    const char *ext[2] = {".h", ".c"};

    const char *missing[1] = {at("no/such/dir")};
    bk_data_config c = text_config(missing, 1, NULL, 0, 0.1);
    assert_int_not_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_message_has(err.message, "data path '");
    assert_message_has(err.message, "no/such/dir' does not exist");
    assert_null(train.tokens);
    assert_null(val.tokens);

    make_dir("txtonly");
    write_text("txtonly/a.txt", "hello");
    const char *txt[1] = {at("txtonly")};
    c = text_config(txt, 1, ext, 2, 0.1);
    assert_int_not_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_message_has(err.message, "no files under '");
    assert_message_has(err.message, "txtonly'");
    assert_message_has(err.message, ".h, .c");

    make_dir("empty");
    write_text("empty/a.c", "");
    write_text("empty/b.h", "");
    const char *empty[1] = {at("empty")};
    c = text_config(empty, 1, ext, 2, 0.1);
    assert_int_not_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_message_has(err.message, "empty'");
    assert_message_has(err.message, "the corpus is empty");

    write_text("high.txt", "ab\xc8z");
    const char *high[1] = {at("high.txt")};
    c = text_config(high, 1, NULL, 0, 0.5);
    assert_int_equal(bk_data_load(&c, 200, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "high.txt");
    assert_message_has(err.message, "byte 200 at offset 2 is outside the vocabulary (vocab 200)");
    assert_null(train.tokens);
    assert_int_equal(bk_data_load(&c, 201, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.tokens[1], 'b');
    assert_int_equal(val.tokens[0], 200);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    if (geteuid() != 0) { /* root reads anything */
        write_text("locked.c", "x");
        assert_int_equal(chmod(at("locked.c"), 0), 0);
        const char *locked[1] = {at("locked.c")};
        c = text_config(locked, 1, NULL, 0, 0.5);
        assert_int_not_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
        assert_message_has(err.message, "cannot read '");
        assert_message_has(err.message, "locked.c': ");
    }
}

/* A FIFO, a device or a socket where a corpus file is expected: reading a FIFO blocks and /dev/zero
 * never ends. A named one is refused saying what it is; inside a data directory, one the name filter
 * would take (or a symlink to one) is refused naming it, where it used to be skipped without a word;
 * one the filter leaves out is no matter. Nothing here may block: an alarm fails the test first. */
static void non_regular_files_are_refused(void **state)
{
    (void)state;
    alarm(20);
    bk_tokens train, val;
    bk_error err;
    make_dir("odd");
    write_text("odd/a.txt", "hello world");
    assert_int_equal(mkfifo(at("odd/pipe.txt"), 0600), 0);
    const char *dir[1] = {at("odd")};
    bk_data_config c = text_config(dir, 1, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "odd/pipe.txt' (in data directory '");
    assert_message_has(err.message, "is a FIFO (named pipe); expected a regular file");
    assert_null(train.tokens);
    assert_null(val.tokens);

    const char *txt[1] = {".txt"}, *md[1] = {".md"};
    c = text_config(dir, 1, txt, 1, 0.1); /* the filter takes it: refused */
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "pipe.txt");
    write_text("odd/b.md", "markdown");
    c = text_config(dir, 1, md, 1, 0.1); /* the filter leaves it out */
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count + val.count, 8);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* a symlink to /dev/zero in a directory, for text and for shards */
    make_dir("zero");
    write_text("zero/a.txt", "hello world");
    assert_int_equal(symlink("/dev/zero", at("zero/z.txt")), 0);
    const char *zdir[1] = {at("zero")};
    c = text_config(zdir, 1, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "zero/z.txt' (in data directory '");
    assert_message_has(err.message, "is a symlink to a character device; expected a regular file");
    make_dir("zshards");
    assert_int_equal(symlink("/dev/zero", at("zshards/z.bin")), 0);
    const char *zs[1] = {at("zshards")};
    c = shard_config(zs, 1, 0.5);
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "zshards/z.bin' (in data directory '");

    /* named as data paths (and as validation paths): refused saying what they are */
    const char *fifo[1] = {at("odd/pipe.txt")}, *zero[1] = {"/dev/zero"}, *good[1] = {at("odd/a.txt")};
    c = text_config(fifo, 1, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "pipe.txt' is a FIFO (named pipe); expected a regular file or a directory");
    c = text_config(zero, 1, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "data path '/dev/zero' is a character device; expected a regular file or a "
                                    "directory");
    c = shard_config(zero, 1, 0.5);
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "'/dev/zero' is a character device");
    c = text_config(good, 1, NULL, 0, 0.1);
    c.val_paths = fifo, c.n_val_paths = 1;
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_IO);
    assert_message_has(err.message, "pipe.txt' is a FIFO (named pipe)");
    assert_null(train.tokens);
    assert_null(val.tokens);
    alarm(0);
}

/* One file reached through two entries would be read twice: in training twice, or (split by fraction,
 * or through val_paths) in training and in validation. Refused naming both entries; a symlink inside
 * one entry's tree stays a file of its own (system trees hold such links). */
static void a_file_is_read_once(void **state)
{
    (void)state;
    bk_tokens train, val;
    bk_error err;
    make_dir("twice");
    make_dir("twice/sub");
    write_text("twice/sub/a.txt", "hello world, hello world");
    write_text("twice/b.txt", "another file");
    const char *same[2] = {at("twice/b.txt"), at("twice/b.txt")};
    bk_data_config c = text_config(same, 2, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "data: paths entry 1 ('");
    assert_message_has(err.message, "twice/b.txt') and paths entry 2 ('");
    assert_message_has(err.message, "twice/b.txt') are the same file; its text would be read twice");
    assert_null(train.tokens);
    assert_null(val.tokens);

    const char *nested[2] = {at("twice"), at("twice/sub")}; /* a directory and one inside it */
    c = text_config(nested, 2, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "twice') and paths entry 2 ('");
    assert_message_has(err.message, "twice/sub') both hold the file '");
    assert_message_has(err.message, "twice/sub/a.txt'");

    assert_int_equal(link(at("twice/b.txt"), at("hard.txt")), 0); /* another name, the same file */
    const char *hard[2] = {at("twice/b.txt"), at("hard.txt")};
    c = text_config(hard, 2, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "hard.txt') are the same file");

    const char *tr[1] = {at("twice")}, *va[1] = {at("twice/sub/a.txt")};
    c = text_config(tr, 1, NULL, 0, 0.1);
    c.val_paths = va, c.n_val_paths = 1;
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "data: paths entry 1 ('");
    assert_message_has(err.message, "twice') and val_paths entry 1 ('");
    assert_message_has(err.message, "the validation text would be in training as well");
    assert_null(train.tokens);
    assert_null(val.tokens);

    /* distinct entries, and a symlink inside one tree, still load */
    assert_int_equal(symlink(at("twice/b.txt"), at("twice/sub/c.txt")), 0);
    const char *both[2] = {at("twice/sub"), at("twice/b.txt")};
    c = text_config(both, 2, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "both hold the file '"); /* the symlink reaches entry 2's file */
    c = text_config(tr, 1, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count + val.count, 12 + 24 + 12); /* b.txt, sub/a.txt, sub/c.txt -> b.txt */
    bk_tokens_free(&train);
    bk_tokens_free(&val);
}

/* ---- split ---- */

static void split_by_fraction(void **state)
{
    (void)state;
    char text[1001];
    for (int i = 0; i < 1000; i++)
        text[i] = (char)('a' + i % 26);
    text[1000] = '\0';
    write_text("thousand.txt", text);
    const char *paths[1] = {at("thousand.txt")};
    bk_tokens train, val;
    bk_error err;

    bk_data_config c = text_config(paths, 1, NULL, 0, 0.1);
    assert_int_equal(bk_data_load(&c, 256, 100, &train, &val, &err), BK_OK);
    assert_int_equal(train.count, 900);
    assert_int_equal(val.count, 100);
    for (int i = 0; i < 900; i++)
        assert_int_equal(train.tokens[i], (unsigned char)text[i]);
    for (int i = 0; i < 100; i++)
        assert_int_equal(val.tokens[i], (unsigned char)text[900 + i]);
    assert_int_equal(train.n_files, 1);
    assert_message_has(train.name, "thousand.txt");
    assert_message_has(val.name, "thousand.txt");
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    c.val_fraction = 0.3;
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count, 700);
    assert_int_equal(val.count, 300);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* 100 * 0.29 is 28.999999999999996 in double: the split rounds, it does not truncate */
    write_bytes("hundred.txt", text, 100);
    const char *hundred[1] = {at("hundred.txt")};
    bk_data_config h = text_config(hundred, 1, NULL, 0, 0.29);
    assert_int_equal(bk_data_load(&h, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count, 71);
    assert_int_equal(val.count, 29);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    const double bad[4] = {0.0, 1.0, -0.5, NAN};
    for (int i = 0; i < 4; i++) {
        c.val_fraction = bad[i];
        assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_ERR_CONFIG);
        assert_message_has(err.message, "val_fraction");
    }

    /* each side needs min_tokens */
    c.val_fraction = 0.1;
    assert_int_equal(bk_data_load(&c, 256, 901, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "training");
    assert_message_has(err.message, "900 tokens");
    assert_message_has(err.message, "901");
    assert_message_has(err.message, "thousand.txt");
    assert_null(train.tokens);
    assert_int_equal(bk_data_load(&c, 256, 101, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "validation");
    assert_message_has(err.message, "100 tokens");
    assert_message_has(err.message, "101");
    assert_null(train.tokens);
    assert_null(val.tokens);
}

static void split_by_paths(void **state)
{
    (void)state;
    make_dir("trainset");
    write_text("trainset/one.c", "0123456789");
    write_text("trainset/two.c", "abcdefghij");
    write_text("valset.c", "VALIDATION");
    const char *paths[1] = {at("trainset")};
    const char *vpaths[1] = {at("valset.c")};
    bk_tokens train, val;
    bk_error err;
    bk_data_config c = text_config(paths, 1, NULL, 0, 0.0); /* val_fraction unused */
    c.val_paths = vpaths;
    c.n_val_paths = 1;
    assert_int_equal(bk_data_load(&c, 256, 10, &train, &val, &err), BK_OK);
    assert_int_equal(train.count, 20);
    assert_int_equal(val.count, 10);
    assert_int_equal(train.n_files, 2);
    assert_int_equal(val.n_files, 1);
    assert_int_equal(train.tokens[0], '0');
    assert_int_equal(train.tokens[19], 'j');
    assert_int_equal(val.tokens[0], 'V');
    assert_int_equal(val.tokens[9], 'N');
    assert_message_has(train.name, "2 files under");
    assert_message_has(val.name, "valset.c");
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    assert_int_equal(bk_data_load(&c, 256, 11, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "validation");
    assert_message_has(err.message, "10 tokens");
    assert_message_has(err.message, "11");
    assert_message_has(err.message, "valset.c");

    const char *vmissing[1] = {at("nope.c")};
    c.val_paths = vmissing;
    assert_int_not_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_message_has(err.message, "nope.c' does not exist");
    assert_null(train.tokens);
}

/* ---- shards ---- */

static bk_data_config shard_config(const char *const *paths, int n, double f)
{
    bk_data_config c = {0};
    c.format = BK_DATA_SHARDS;
    c.paths = paths;
    c.n_paths = n;
    c.val_fraction = f;
    c.split = BK_SPLIT_TAIL; /* the walk's order shows in the tail; the split by document: split_by_documents */
    return c;
}

/* ---- the split by document (data/split.h) ---- */

/* 20 documents doc00.txt .. doc19.txt, document k of 40 + 7 k bytes, every byte the letter 'A' + k: a
 * token says which document it came from. */
static void write_documents(const char *dir)
{
    make_dir(dir);
    for (int k = 0; k < 20; k++) {
        char rel[128], text[256];
        snprintf(rel, sizeof rel, "%s/doc%02d.txt", dir, k);
        memset(text, 'A' + k, (size_t)(40 + 7 * k));
        write_bytes(rel, text, (size_t)(40 + 7 * k));
    }
}

/* Which documents a stream holds (bit k: document k), checking that each is whole, in ascending order. */
static unsigned documents_of(const bk_tokens *t)
{
    unsigned set = 0;
    int64_t i = 0;
    int last = -1;
    while (i < t->count) {
        const int k = t->tokens[i] - 'A';
        assert_true(k >= 0 && k < 20);
        assert_true(k > last); /* the corpus's order, each document once */
        for (int64_t j = 0; j < 40 + 7 * k; j++) /* whole */
            assert_int_equal(t->tokens[i + j], 'A' + k);
        set |= 1u << k, last = k, i += 40 + 7 * k;
    }
    return set;
}

static void split_by_documents(void **state)
{
    (void)state;
    write_documents("docs");
    const char *paths[1] = {at("docs")};
    int64_t total = 0;
    for (int k = 0; k < 20; k++)
        total += 40 + 7 * k;
    bk_tokens train, val;
    bk_error err;
    bk_data_split split;
    bk_data_config c = text_config(paths, 1, NULL, 0, 0.2);
    c.split = BK_SPLIT_DOCUMENTS, c.split_seed = 7, c.split_out = &split;
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    const unsigned tv = documents_of(&train), vv = documents_of(&val);
    assert_int_equal(tv & vv, 0);       /* no document on both sides */
    assert_int_equal(tv | vv, 0xfffff); /* every one on a side */
    assert_int_equal(train.count + val.count, total);
    /* validation holds at least its share and at most twice it (documents are whole) */
    assert_true((double)val.count >= 0.2 * (double)total && (double)val.count <= 0.4 * (double)total);
    /* the description: the documents of validation, in corpus order, with their bytes */
    assert_int_equal(split.mode, BK_SPLIT_DOCUMENTS);
    assert_int_equal(split.units[1], val.count);
    assert_int_equal(split.units[0], train.count);
    assert_int_equal(split.files[0] + split.files[1], 20);
    assert_int_equal(split.n_val, split.files[1]);
    for (int i = 0, k = 0; i < split.n_val; i++, k++) {
        while (!(vv >> k & 1))
            k++;
        char name[32];
        snprintf(name, sizeof name, "doc%02d.txt", k);
        assert_non_null(strstr(split.val_files[i], name));
        assert_int_equal(split.val_units[i], 40 + 7 * k);
    }
    char line[1024];
    bk_data_split_describe(&split, 2, line, sizeof line);
    assert_message_has(line, "validation: ");
    assert_message_has(line, "documents by split_seed 7");
    assert_message_has(line, "bytes");
    assert_message_has(line, "more");
    assert_message_has(val.name, "split_seed 7");
    /* bk_data_plan: the same split from the sizes alone */
    bk_data_split plan;
    assert_int_equal(bk_data_plan(&c, &plan, &err), BK_OK);
    assert_int_equal(plan.n_val, split.n_val);
    assert_int_equal(plan.units[1], split.units[1]);
    for (int i = 0; i < plan.n_val; i++)
        assert_string_equal(plan.val_files[i], split.val_files[i]);
    bk_data_split_free(&plan);
    /* split.json */
    char json[600];
    snprintf(json, sizeof json, "%s/split.json", tmp_root);
    assert_int_equal(bk_data_split_write_json(&split, json, &err), BK_OK);
    FILE *f = fopen(json, "r");
    assert_non_null(f);
    char text[8192];
    const size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    assert_message_has(text, "\"split\": \"documents\", \"seed\": 7");
    assert_message_has(text, "\"unit\": \"bytes\"");
    assert_message_has(text, split.val_files[0]);
    bk_data_split_free(&split);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* the same seed, the same documents; among other seeds, other documents */
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(documents_of(&val), vv);
    bk_data_split_free(&split);
    bk_tokens_free(&train);
    bk_tokens_free(&val);
    int others = 0;
    for (uint64_t seed = 0; seed < 6; seed++) {
        c.split_seed = seed, c.split_out = NULL;
        assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
        others += documents_of(&val) != vv;
        bk_tokens_free(&train);
        bk_tokens_free(&val);
    }
    assert_true(others >= 5);

    /* max_bytes: the documents the limit reaches in sorted order, the last one cut (doc00..doc02 whole:
     * 40 + 47 + 54 = 141 bytes, then 9 of doc03's 61) */
    c.split_seed = 1, c.max_bytes = 150, c.split_out = &split;
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count + val.count, 150);
    assert_int_equal(split.files[0] + split.files[1], 4);
    bk_data_split_free(&split);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* one document: the tail, and the split says why */
    c.max_bytes = 30; /* inside doc00 */
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(split.mode, BK_SPLIT_TAIL);
    assert_message_has(split.note, "one document within max_bytes");
    assert_int_equal(val.count, 6); /* round(30 * 0.2) */
    assert_int_equal(split.first_part, 1);
    bk_data_split_describe(&split, 8, line, sizeof line);
    assert_message_has(line, "the last 20% of the stream");
    assert_message_has(line, "doc00.txt (part)");
    assert_message_has(line, "cannot be split by document");
    bk_data_split_free(&split);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* the tail on request: the alphabetical end, its files listed (doc19 whole, doc18 in part) */
    c.max_bytes = 0, c.split = BK_SPLIT_TAIL;
    assert_int_equal(bk_data_load(&c, 256, 1, &train, &val, &err), BK_OK);
    assert_int_equal(split.mode, BK_SPLIT_TAIL);
    assert_string_equal(split.note, "");
    assert_int_equal(split.units[1], val.count);
    assert_int_equal(val.tokens[val.count - 1], 'A' + 19);
    assert_non_null(strstr(split.val_files[split.n_val - 1], "doc19.txt"));
    int64_t listed = 0;
    for (int i = 0; i < split.n_val; i++)
        listed += split.val_units[i];
    assert_int_equal(listed, val.count);
    bk_data_split_free(&split);
    bk_tokens_free(&train);
    bk_tokens_free(&val);
}

/* bk_split_choose alone: a document more than twice the share is passed over; when all are, the smallest
 * is taken; one document always stays for training. */
static void split_choose_rules(void **state)
{
    (void)state;
    unsigned char val[4];
    const int64_t big[3] = {1000, 1000, 10};
    bk_split_choose(big, 3, 0.05, 3, val); /* share 100.5: only the 10-byte one fits */
    assert_int_equal(val[0] + val[1], 0);
    assert_int_equal(val[2], 1);
    const int64_t huge[2] = {500, 400};
    bk_split_choose(huge, 2, 0.01, 0, val); /* neither fits: the smaller */
    assert_int_equal(val[0], 0);
    assert_int_equal(val[1], 1);
    const int64_t even[3] = {10, 10, 10};
    bk_split_choose(even, 3, 0.9, 5, val); /* 90% asked: two of three, one stays */
    assert_int_equal(val[0] + val[1] + val[2], 2);
}

static void shards(void **state)
{
    (void)state;
    uint16_t a[100], b[50];
    for (int i = 0; i < 100; i++)
        a[i] = (uint16_t)(i * 500); /* up to 49500, above 255 and 32767 */
    for (int i = 0; i < 50; i++)
        b[i] = (uint16_t)(50256 - i);
    make_dir("shards");
    write_shard("shards/train_001.bin", BK_SHARD_MAGIC, 1, 50, b, 50);
    write_shard("shards/train_000.bin", BK_SHARD_MAGIC, 1, 100, a, 100);
    write_text("shards/README.txt", "not a shard");
    write_text("shards/.hidden.bin", "not a shard either");

    const char *paths[1] = {at("shards")};
    bk_tokens train, val;
    bk_error err;
    bk_data_config c = shard_config(paths, 1, 0.2);
    assert_int_equal(bk_data_load(&c, 50257, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count, 120);
    assert_int_equal(val.count, 30);
    assert_int_equal(train.n_files, 2);
    for (int i = 0; i < 100; i++) /* train_000 first */
        assert_int_equal(train.tokens[i], a[i]);
    for (int i = 0; i < 20; i++)
        assert_int_equal(train.tokens[100 + i], b[i]);
    for (int i = 0; i < 30; i++)
        assert_int_equal(val.tokens[i], b[20 + i]);
    assert_message_has(train.name, "2 files under");
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* a vocabulary one too small for the largest token */
    assert_int_equal(bk_data_load(&c, 50256, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "train_001.bin: token 50256 at index 0 is outside the vocabulary (vocab 50256)");

    /* llm.c shards used as val_paths */
    const char *tpath[1] = {at("shards/train_000.bin")}, *vpath[1] = {at("shards/train_001.bin")};
    c = shard_config(tpath, 1, 0.0);
    c.val_paths = vpath;
    c.n_val_paths = 1;
    assert_int_equal(bk_data_load(&c, 50257, 50, &train, &val, &err), BK_OK);
    assert_int_equal(train.count, 100);
    assert_int_equal(val.count, 50);
    assert_int_equal(val.tokens[49], b[49]);
    assert_message_has(train.name, "train_000.bin");
    bk_tokens_free(&train);
    bk_tokens_free(&val);
}

static void shard_errors(void **state)
{
    (void)state;
    uint16_t tok[10] = {1, 2, 3, 60000, 5, 6, 7, 8, 9, 10};
    bk_tokens train, val;
    bk_error err;
    const char *one[1];
    bk_data_config c = shard_config(one, 1, 0.5);

    unsigned char partial[100] = {0};
    write_bytes("short.bin", partial, sizeof partial);
    one[0] = at("short.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "short.bin: truncated header (100 bytes, expected 1024)");

    write_shard("magic.bin", 12345, 1, 10, tok, 10);
    one[0] = at("magic.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "magic.bin: not an llm.c token shard (magic 12345, expected 20240520)");

    write_shard("version.bin", BK_SHARD_MAGIC, 2, 10, tok, 10);
    one[0] = at("version.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "version.bin");
    assert_message_has(err.message, "version 2");

    write_shard("cut.bin", BK_SHARD_MAGIC, 1, 10, tok, 7);
    one[0] = at("cut.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "cut.bin: truncated: header says 10 tokens, file holds 7");
    assert_null(train.tokens);

    write_shard("vocab.bin", BK_SHARD_MAGIC, 1, 10, tok, 10);
    one[0] = at("vocab.bin");
    assert_int_equal(bk_data_load(&c, 50257, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "vocab.bin: token 60000 at index 3 is outside the vocabulary (vocab 50257)");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_OK);
    assert_int_equal(train.count + val.count, 10);
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    write_shard("zero.bin", BK_SHARD_MAGIC, 1, 0, tok, 0);
    one[0] = at("zero.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "zero.bin'");
    assert_message_has(err.message, "the corpus is empty");

    make_dir("noshards");
    write_text("noshards/a.txt", "x");
    one[0] = at("noshards");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "no files under '");
    assert_message_has(err.message, ".bin");
}

/* A header that counts fewer tokens than the file holds used to be read short, silently dropping the
 * rest: the size must match the header (as llm.c's own loader requires), and the error names the
 * file and both counts. */
static void shard_size_must_match_header(void **state)
{
    (void)state;
    uint16_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    bk_tokens train, val;
    bk_error err;
    const char *one[1];
    bk_data_config c = shard_config(one, 1, 0.5);

    write_shard("under.bin", BK_SHARD_MAGIC, 1, 6, tok, 10);
    one[0] = at("under.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "under.bin: header says 6 tokens, but the file holds 10 (20 bytes after the "
                                    "header, expected 12)");
    assert_null(train.tokens);
    assert_null(val.tokens);

    /* one stray byte after the tokens */
    size_t size = BK_SHARD_HEADER_INTS * 4 + 2 * 10 + 1;
    unsigned char *buf = calloc(1, size);
    assert_non_null(buf);
    put_le32(buf, BK_SHARD_MAGIC);
    put_le32(buf + 4, 1);
    put_le32(buf + 8, 10);
    write_bytes("odd.bin", buf, size);
    one[0] = at("odd.bin");
    assert_int_equal(bk_data_load(&c, 65536, 1, &train, &val, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "odd.bin: header says 10 tokens, but the file holds 10 (21 bytes after the header");

    /* the memory entry point reads a shard exactly as a file */
    bk_tokens t;
    assert_int_equal(bk_data_read_memory(BK_DATA_SHARDS, buf, size, "mem.bin", 65536, 0, &t, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "mem.bin: header says 10 tokens, but the file holds 10 (21 bytes");
    assert_null(t.tokens);
    assert_int_equal(bk_data_read_memory(BK_DATA_SHARDS, buf, size - 1, "mem.bin", 65536, 0, &t, &err), BK_OK);
    assert_int_equal(t.count, 10);
    bk_tokens_free(&t);
    assert_int_equal(bk_data_read_memory(BK_DATA_SHARDS, buf, 100, "mem.bin", 65536, 0, &t, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "mem.bin: truncated header (100 bytes, expected 1024)");
    assert_int_equal(bk_data_read_memory(BK_DATA_SHARDS, buf, 0, "mem.bin", 65536, 0, &t, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "mem.bin: truncated header (0 bytes, expected 1024)");
    free(buf);
    assert_int_equal(bk_data_read_memory(BK_DATA_TEXT, "hello", 5, "mem.txt", 256, 3, &t, &err), BK_OK);
    assert_int_equal(t.count, 3);
    assert_int_equal(t.tokens[2], 'l');
    bk_tokens_free(&t);
    assert_int_equal(bk_data_read_memory(BK_DATA_TEXT, "", 0, "mem.txt", 256, 0, &t, &err), BK_OK);
    assert_int_equal(t.count, 0);
    assert_int_equal(bk_data_read_memory(BK_DATA_TEXT, "h\xe9", 2, "mem.txt", 128, 0, &t, &err), BK_ERR_PARSE);
    assert_message_has(err.message, "mem.txt: byte 233 at offset 1 is outside the vocabulary (vocab 128)");
}

/* ---- loader ---- */

/* tokens[i] = i: a window's first input is its start. */
static bk_tokens counting_stream(int64_t n)
{
    bk_tokens t = {0};
    t.tokens = malloc((size_t)n * sizeof *t.tokens);
    assert_non_null(t.tokens);
    for (int64_t i = 0; i < n; i++)
        t.tokens[i] = (uint16_t)i;
    t.count = n;
    snprintf(t.name, sizeof t.name, "counting");
    return t;
}

enum { LT = 4, LWINDOWS = 10 };

/* Window index of row b, after checking that row b holds a whole window and its shifted targets. */
static int64_t window_of(const int32_t *in, const int32_t *tg, int b)
{
    int32_t start = in[b * LT];
    assert_int_equal(start % LT, 0);
    for (int t = 0; t < LT; t++) {
        assert_int_equal(in[b * LT + t], start + t);
        assert_int_equal(tg[b * LT + t], start + t + 1);
    }
    return start / LT;
}

/* The order of one epoch, read through batches of B = 2. */
static void read_epoch(bk_loader *ld, int64_t *order)
{
    int32_t in[2 * LT], tg[2 * LT];
    for (int k = 0; k < LWINDOWS / 2; k++) {
        bk_loader_next(ld, in, tg);
        order[2 * k] = window_of(in, tg, 0);
        order[2 * k + 1] = window_of(in, tg, 1);
    }
}

static void assert_permutation(const int64_t *order)
{
    int seen[LWINDOWS] = {0};
    for (int i = 0; i < LWINDOWS; i++) {
        assert_in_range(order[i], 0, LWINDOWS - 1);
        seen[order[i]]++;
    }
    for (int i = 0; i < LWINDOWS; i++)
        assert_int_equal(seen[i], 1);
}

static void loader_windows_and_epochs(void **state)
{
    (void)state;
    bk_loader zero = {0};
    bk_loader_free(&zero); /* safe on a zeroed struct */
    bk_tokens z = {0};
    bk_tokens_free(&z);

    bk_tokens data = counting_stream(LT * LWINDOWS + 3); /* the 3 spare tokens make no 11th window */
    bk_error err;
    bk_loader ld, same, other, plain;
    assert_int_equal(bk_loader_init(&ld, &data, 2, LT, 42, 1, &err), BK_OK);
    assert_int_equal(ld.n_windows, LWINDOWS);
    assert_int_equal(bk_loader_init(&same, &data, 2, LT, 42, 1, &err), BK_OK);
    assert_int_equal(bk_loader_init(&other, &data, 2, LT, 43, 1, &err), BK_OK);
    assert_int_equal(bk_loader_init(&plain, &data, 2, LT, 42, 0, &err), BK_OK);

    int64_t e0[LWINDOWS], e1[LWINDOWS], s0[LWINDOWS], s1[LWINDOWS], o0[LWINDOWS], p0[LWINDOWS], p1[LWINDOWS];
    read_epoch(&ld, e0);
    assert_int_equal(ld.epoch, 0);
    assert_int_equal(ld.index, LWINDOWS);
    read_epoch(&ld, e1);
    assert_int_equal(ld.epoch, 1);
    read_epoch(&same, s0);
    read_epoch(&same, s1);
    read_epoch(&other, o0);
    read_epoch(&plain, p0);
    read_epoch(&plain, p1);
    assert_permutation(e0);
    assert_permutation(e1);
    assert_permutation(o0);
    assert_memory_equal(e0, s0, sizeof e0); /* same seed, same stream */
    assert_memory_equal(e1, s1, sizeof e1);
    assert_memory_not_equal(e0, e1, sizeof e0); /* a new order each epoch */
    assert_memory_not_equal(e0, o0, sizeof e0); /* another seed, another order */
    int shuffled = 0;
    for (int i = 0; i < LWINDOWS; i++) {
        assert_int_equal(p0[i], i); /* shuffle = 0: stream order, every epoch */
        assert_int_equal(p1[i], i);
        shuffled += e0[i] != i;
    }
    assert_true(shuffled > 0);

    bk_loader_free(&ld);
    bk_loader_free(&same);
    bk_loader_free(&other);
    bk_loader_free(&plain);
    assert_null(ld.order);

    /* windows start at multiples of T and need T+1 tokens: 10 T tokens make 9 windows, 2 T make 1 */
    data.count = LT * LWINDOWS;
    assert_int_equal(bk_loader_init(&ld, &data, 1, LT, 1, 1, &err), BK_OK);
    assert_int_equal(ld.n_windows, LWINDOWS - 1);
    bk_loader_free(&ld);
    data.count = 2 * LT;
    assert_int_equal(bk_loader_init(&ld, &data, 1, LT, 1, 1, &err), BK_OK);
    assert_int_equal(ld.n_windows, 1);
    bk_loader_free(&ld);

    /* exactly T+1 tokens make one window; T tokens none */
    data.count = LT + 1;
    assert_int_equal(bk_loader_init(&ld, &data, 3, LT, 1, 1, &err), BK_OK);
    assert_int_equal(ld.n_windows, 1);
    int32_t in[3 * LT], tg[3 * LT];
    bk_loader_next(&ld, in, tg); /* the one window three times, across epochs */
    for (int b = 0; b < 3; b++)
        assert_int_equal(window_of(in, tg, b), 0);
    assert_int_equal(ld.epoch, 2);
    bk_loader_free(&ld);
    data.count = LT;
    assert_int_equal(bk_loader_init(&ld, &data, 1, LT, 1, 1, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "counting");
    assert_message_has(err.message, "4 tokens");
    assert_null(ld.order);
    bk_tokens_free(&data);
    assert_null(data.tokens);
}

/* Fisher-Yates must give every permutation: each window lands at each position about equally often,
 * and fixed points occur (a biased variant such as Sattolo's algorithm never has one). */
static void loader_shuffle_is_uniform(void **state)
{
    (void)state;
    enum { EPOCHS = 4000 };
    bk_tokens data = counting_stream(LT * LWINDOWS + 1);
    bk_error err;
    bk_loader ld;
    assert_int_equal(bk_loader_init(&ld, &data, 1, LT, 2024, 1, &err), BK_OK);
    static int hits[LWINDOWS][LWINDOWS];
    memset(hits, 0, sizeof hits);
    int with_fixed_point = 0;
    for (int64_t e = 0; e < EPOCHS; e++) {
        assert_int_equal(bk_loader_seek(&ld, e, 0, &err), BK_OK);
        assert_permutation(ld.order);
        int fixed = 0;
        for (int i = 0; i < LWINDOWS; i++) {
            hits[i][ld.order[i]]++;
            fixed += ld.order[i] == i;
        }
        with_fixed_point += fixed > 0;
    }
    /* expected 400 per cell, standard deviation 19: allow about 5 of them */
    for (int i = 0; i < LWINDOWS; i++)
        for (int w = 0; w < LWINDOWS; w++)
            assert_in_range(hits[i][w], 300, 500);
    assert_in_range(with_fixed_point, EPOCHS / 2, EPOCHS * 3 / 4); /* 1 - 1/e = 0.63 of permutations */
    bk_loader_free(&ld);
    bk_tokens_free(&data);
}

static void loader_seek(void **state)
{
    (void)state;
    bk_tokens data = counting_stream(LT * LWINDOWS + 1);
    bk_error err;
    bk_loader ld, resumed;
    enum { B = 3, BEFORE = 5, AFTER = 12 }; /* B does not divide the 10 windows: batches straddle epochs */
    int32_t in[B * LT], tg[B * LT], in2[B * LT], tg2[B * LT];
    assert_int_equal(bk_loader_init(&ld, &data, B, LT, 7, 1, &err), BK_OK);
    for (int k = 0; k < BEFORE; k++)
        bk_loader_next(&ld, in, tg);
    int64_t epoch = ld.epoch, index = ld.index;
    assert_int_equal(epoch, 1); /* 15 windows read: one epoch and a half */
    assert_int_equal(index, 5);

    assert_int_equal(bk_loader_init(&resumed, &data, B, LT, 7, 1, &err), BK_OK);
    assert_int_equal(bk_loader_seek(&resumed, epoch, index, &err), BK_OK);
    for (int k = 0; k < AFTER; k++) {
        bk_loader_next(&ld, in, tg);
        bk_loader_next(&resumed, in2, tg2);
        assert_memory_equal(in, in2, sizeof in);
        assert_memory_equal(tg, tg2, sizeof tg);
    }
    assert_int_equal(resumed.epoch, ld.epoch);
    assert_int_equal(resumed.index, ld.index);

    /* index == n_windows is a valid cursor (the end of an epoch) */
    assert_int_equal(bk_loader_seek(&resumed, 3, LWINDOWS, &err), BK_OK);
    bk_loader_next(&resumed, in, tg);
    assert_int_equal(resumed.epoch, 4);
    assert_int_equal(resumed.index, B);

    assert_int_equal(bk_loader_seek(&resumed, 0, LWINDOWS + 1, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "index 11");
    assert_message_has(err.message, "[0, 10]");
    assert_int_equal(bk_loader_seek(&resumed, 0, -1, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "index -1");
    assert_int_equal(bk_loader_seek(&resumed, -1, 0, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "epoch -1");

    bk_loader_free(&ld);
    bk_loader_free(&resumed);
    bk_tokens_free(&data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_walk),
        cmocka_unit_test(text_linked_directories),
        cmocka_unit_test(text_errors),
        cmocka_unit_test(non_regular_files_are_refused),
        cmocka_unit_test(a_file_is_read_once),
        cmocka_unit_test(split_by_fraction), cmocka_unit_test(split_by_paths),
        cmocka_unit_test(split_by_documents), cmocka_unit_test(split_choose_rules),
        cmocka_unit_test(shards),           cmocka_unit_test(shard_errors),
        cmocka_unit_test(shard_size_must_match_header),
        cmocka_unit_test(loader_windows_and_epochs), cmocka_unit_test(loader_shuffle_is_uniform),
        cmocka_unit_test(loader_seek),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
