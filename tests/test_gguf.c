/* The GGUF reader (core/io/gguf.h) on files written here byte by byte: metadata of every value type and
 * arrays, tensors of F32, F16, BF16, Q8_0, Q4_0 and Q4_1 dequantized to the values ggml's definitions
 * give (worked by hand below), the alignment, and each kind of malformed file refused with its reason. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "io/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf_writer.h"

static char path[256];

static void write_file(const buf *b)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/bk_test_gguf_%d.gguf", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

/* Writes b (and frees it), then opens the file, which must succeed. */
static bk_gguf *written_and_opened(buf *b)
{
    write_file(b);
    free(b->p);
    bk_gguf *g = NULL;
    bk_error err;
    if (bk_gguf_open(path, &g, &err))
        fail_msg("%s", err.message);
    return g;
}

/* f16 bits of a few exact values */
enum { H_1 = 0x3c00, H_HALF = 0x3800, H_2 = 0x4000, H_M3 = 0xc200, H_QUARTER = 0x3400 };

/* A file with metadata of every kind and one tensor of each type read here. */
static buf sample(void)
{
    buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, 6); /* tensors */
    u64(&b, 5); /* metadata */
    str(&b, "general.architecture"), u32(&b, 8), str(&b, "llama");
    str(&b, "llama.block_count"), u32(&b, 4), u32(&b, 30);
    str(&b, "llama.rope.freq_base"), u32(&b, 6), put(&b, &(float){100000.0f}, 4);
    str(&b, "tokenizer.ggml.tokens"), u32(&b, 9), u32(&b, 8), u64(&b, 3), str(&b, "a"), str(&b, "b"), str(&b, "<|im_end|>");
    str(&b, "general.file_type"), u32(&b, 5), u32(&b, (uint32_t)-7); /* an i32 */
    /* tensor infos: name, n_dims, ne, type, offset */
    const struct {
        const char *name;
        uint64_t ne0, ne1;
        uint32_t type;
        uint64_t offset;
    } infos[] = {{"f32", 3, 1, 0, 0},    {"f16", 4, 1, 1, 32},   {"bf16", 2, 1, 30, 64},
                 {"q8_0", 32, 2, 8, 96}, {"q4_0", 32, 1, 2, 192}, {"q4_1", 32, 1, 3, 224}};
    for (int k = 0; k < 6; k++) {
        str(&b, infos[k].name);
        u32(&b, 2);
        u64(&b, infos[k].ne0), u64(&b, infos[k].ne1);
        u32(&b, infos[k].type);
        u64(&b, infos[k].offset);
    }
    pad_to(&b, 32);
    const size_t data = b.n;
    put(&b, (float[]){1.5f, -2.0f, 0.25f}, 12);
    pad_to(&b, 32);
    const uint16_t f16[4] = {H_1, H_HALF, H_M3, 0x0001}; /* 1, 0.5, -3, the smallest subnormal 2^-24 */
    put(&b, f16, 8);
    pad_to(&b, 32);
    const uint16_t bf16[2] = {0x3fc0, 0xc120}; /* 1.5, -10 */
    put(&b, bf16, 4);
    pad_to(&b, 32);
    for (int blk = 0; blk < 2; blk++) { /* Q8_0: d = 0.5 then 2; q = j - 16 */
        const uint16_t d = blk ? H_2 : H_HALF;
        put(&b, &d, 2);
        for (int j = 0; j < 32; j++)
            put(&b, &(int8_t){(int8_t)(j - 16)}, 1);
    }
    pad_to(&b, 32);
    { /* Q4_0: d = 0.25; byte j = (j low, 15 - j high) */
        const uint16_t d = H_QUARTER;
        put(&b, &d, 2);
        for (int j = 0; j < 16; j++)
            put(&b, &(uint8_t){(uint8_t)(j | (15 - j) << 4)}, 1);
    }
    pad_to(&b, 32);
    { /* Q4_1: d = 0.5, m = -3; the same nibbles */
        const uint16_t d = H_HALF, m = H_M3;
        put(&b, &d, 2), put(&b, &m, 2);
        for (int j = 0; j < 16; j++)
            put(&b, &(uint8_t){(uint8_t)(j | (15 - j) << 4)}, 1);
    }
    assert_int_equal(data % 32, 0);
    return b;
}

static void reads_metadata_and_every_type(void **state)
{
    (void)state;
    buf b = sample();
    bk_gguf *g = written_and_opened(&b);
    bk_error err;
    assert_int_equal(bk_gguf_version(g), 3);
    assert_int_equal(bk_gguf_kv_count(g), 5);
    const char *arch = NULL;
    assert_int_equal(bk_gguf_get_string(g, "general.architecture", &arch, &err), BK_OK);
    assert_string_equal(arch, "llama");
    uint64_t blocks = 0;
    assert_int_equal(bk_gguf_get_uint(g, "llama.block_count", &blocks, &err), BK_OK);
    assert_int_equal(blocks, 30);
    double base = 0;
    assert_int_equal(bk_gguf_get_float(g, "llama.rope.freq_base", &base, &err), BK_OK);
    assert_true(base == 100000.0);
    const bk_gguf_kv *tok = bk_gguf_find(g, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_int_equal(tok->type, BK_GGUF_ARRAY);
    assert_int_equal(tok->count, 3);
    assert_string_equal(tok->strings[2], "<|im_end|>");
    assert_int_equal(bk_gguf_get_uint(g, "general.file_type", &blocks, &err), BK_ERR_PARSE);
    assert_non_null(strstr(err.message, "metadata 'general.file_type' is -7 (expected >= 0)"));
    assert_int_equal(bk_gguf_get_uint(g, "no.such", &blocks, &err), BK_ERR_PARSE);
    assert_non_null(strstr(err.message, "no metadata 'no.such' (expected an integer)"));
    assert_int_equal(bk_gguf_get_string(g, "llama.block_count", &arch, &err), BK_ERR_PARSE);

    assert_int_equal(bk_gguf_tensor_count(g), 6);
    float out[64];
    const struct {
        const char *name;
        int n;
        float want[64];
    } cases[] = {
        {"f32", 3, {1.5f, -2.0f, 0.25f}},
        {"f16", 4, {1.0f, 0.5f, -3.0f, 5.9604644775390625e-08f}},
        {"bf16", 2, {1.5f, -10.0f}},
    };
    for (size_t c = 0; c < 3; c++) {
        const bk_gguf_tensor *t = bk_gguf_tensor_find(g, cases[c].name);
        assert_non_null(t);
        assert_int_equal(t->values, cases[c].n);
        assert_int_equal(bk_gguf_dequantize(g, t, out, &err), BK_OK);
        for (int k = 0; k < cases[c].n; k++)
            if (out[k] != cases[c].want[k])
                fail_msg("%s[%d] = %.9g, expected %.9g", cases[c].name, k, (double)out[k], (double)cases[c].want[k]);
    }
    const bk_gguf_tensor *q8 = bk_gguf_tensor_find(g, "q8_0");
    assert_int_equal(q8->ne[0], 32);
    assert_int_equal(q8->ne[1], 2);
    assert_int_equal(q8->bytes, 68);
    assert_int_equal(bk_gguf_dequantize(g, q8, out, &err), BK_OK);
    for (int j = 0; j < 64; j++)
        assert_true(out[j] == (float)(j % 32 - 16) * (j < 32 ? 0.5f : 2.0f));
    assert_int_equal(bk_gguf_dequantize(g, bk_gguf_tensor_find(g, "q4_0"), out, &err), BK_OK);
    for (int j = 0; j < 16; j++) { /* element j: low nibble j; element j + 16: high nibble 15 - j */
        assert_true(out[j] == (float)(j - 8) * 0.25f);
        assert_true(out[j + 16] == (float)(15 - j - 8) * 0.25f);
    }
    assert_int_equal(bk_gguf_dequantize(g, bk_gguf_tensor_find(g, "q4_1"), out, &err), BK_OK);
    for (int j = 0; j < 16; j++) {
        assert_true(out[j] == (float)j * 0.5f - 3.0f);
        assert_true(out[j + 16] == (float)(15 - j) * 0.5f - 3.0f);
    }
    char name[32];
    assert_string_equal(bk_gguf_type_name(3, name, sizeof name), "Q4_1");
    assert_string_equal(bk_gguf_type_name(12, name, sizeof name), "type 12");
    bk_gguf_close(g);
}

/* A header of n_tensors with one F32 tensor of `values` floats at `offset`; `version`, `magic` as given. */
static buf header(const char *magic, uint32_t version, uint32_t type, uint64_t ne0, uint64_t offset)
{
    buf b = {0};
    put(&b, magic, 4);
    u32(&b, version);
    u64(&b, 1), u64(&b, 0);
    str(&b, "w"), u32(&b, 1), u64(&b, ne0), u32(&b, type), u64(&b, offset);
    pad_to(&b, 32);
    return b;
}

static void expect_refused(const buf *b, int code, const char *needle)
{
    write_file(b);
    bk_gguf *g = (bk_gguf *)(void *)&(int){0};
    bk_error err;
    assert_int_equal(bk_gguf_open(path, &g, &err), code);
    assert_null(g);
    if (!strstr(err.message, needle) || !strstr(err.message, path))
        fail_msg("message \"%s\" lacks \"%s\" or the path", err.message, needle);
}

static void malformed_files_are_refused(void **state)
{
    (void)state;
    buf b = header("GGML", 3, 0, 4, 0);
    expect_refused(&b, BK_ERR_PARSE, "not a GGUF file: it begins with 47 47 4d 4c");
    free(b.p);
    b = header("GGUF", 2, 0, 4, 0);
    expect_refused(&b, BK_ERR_PARSE, "GGUF version 2; this reader reads version 3");
    free(b.p);
    b = header("GGUF", 3, 0, 4, 0); /* no data at all */
    expect_refused(&b, BK_ERR_PARSE, "truncated: tensor 'w' (F32) needs data bytes 0 .. 16, the data section holds 0");
    put(&b, (float[]){1, 2, 3, 4}, 16);
    write_file(&b);
    bk_gguf *g = NULL;
    bk_error err;
    assert_int_equal(bk_gguf_open(path, &g, &err), BK_OK); /* the same file, whole */
    bk_gguf_close(g);
    free(b.p);
    b = header("GGUF", 3, 0, 4, 8); /* an offset not a multiple of 32 */
    put(&b, (float[]){1, 2, 3, 4, 5, 6}, 24);
    expect_refused(&b, BK_ERR_PARSE, "tensor 'w' begins at data offset 8, not a multiple of the alignment 32");
    free(b.p);
    b = header("GGUF", 3, 8, 40, 0); /* Q8_0 rows of 40: not whole blocks */
    expect_refused(&b, BK_ERR_PARSE, "tensor 'w' (Q8_0) has rows of 40 values, not a multiple of its block of 32");
    free(b.p);
    b = header("GGUF", 3, 12, 256, 0); /* Q4_K: opens, but is not dequantized */
    write_file(&b);
    assert_int_equal(bk_gguf_open(path, &g, &err), BK_OK);
    float out[256];
    assert_int_equal(bk_gguf_dequantize(g, bk_gguf_tensor_at(g, 0), out, &err), BK_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "tensor 'w' is of ggml type 12, which this reader does not dequantize"));
    bk_gguf_close(g);
    free(b.p);
    /* a string past the end, an unknown value type, a cut header */
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, 1);
    u64(&b, 1000), put(&b, "abc", 3);
    expect_refused(&b, BK_ERR_PARSE, "truncated: metadata entry 0's key needs 1000 bytes");
    free(b.p);
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, 1);
    str(&b, "k"), u32(&b, 13), u32(&b, 0);
    expect_refused(&b, BK_ERR_PARSE, "metadata 'k' has value type 13 (expected 0 .. 12)");
    free(b.p);
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3);
    expect_refused(&b, BK_ERR_PARSE, "truncated: the tensor count needs 4 bytes");
    free(b.p);
    /* counts beyond what the file holds are refused before anything is allocated for them (the fuzzer
     * found a 40-byte file that made the reader zero 128 MB for an array of 2^24 strings) */
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, 1);
    str(&b, "s"), u32(&b, 9), u32(&b, 8), u64(&b, 1u << 24);
    expect_refused(&b, BK_ERR_PARSE, "truncated: s needs 134217728 bytes");
    free(b.p);
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 1000000), u64(&b, 0);
    expect_refused(&b, BK_ERR_PARSE, "the header claims 0 metadata entries and 1000000 tensors, more than a file of 24");
    free(b.p);
    /* two tensors over the same bytes; a key twice */
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 2), u64(&b, 0);
    str(&b, "a"), u32(&b, 1), u64(&b, 16), u32(&b, 0), u64(&b, 0);
    str(&b, "b"), u32(&b, 1), u64(&b, 8), u32(&b, 0), u64(&b, 32);
    pad_to(&b, 32);
    for (int k = 0; k < 16; k++)
        put(&b, &(float){(float)k}, 4);
    expect_refused(&b, BK_ERR_PARSE, "tensors 'a' and 'b' overlap in the data section");
    free(b.p);
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, 2);
    str(&b, "k"), u32(&b, 4), u32(&b, 1);
    str(&b, "k"), u32(&b, 4), u32(&b, 2);
    expect_refused(&b, BK_ERR_PARSE, "metadata key 'k' appears twice");
    free(b.p);
    /* a FIFO or a missing file: the file rule's messages */
    unlink(path);
    assert_int_equal(bk_gguf_open(path, &g, &err), BK_ERR_IO);
    assert_null(g);
}

/* general.alignment moves the data section and the offsets' multiple. */
static void alignment_is_read(void **state)
{
    (void)state;
    buf b = {0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 1), u64(&b, 1);
    str(&b, "general.alignment"), u32(&b, 4), u32(&b, 64);
    str(&b, "w"), u32(&b, 1), u64(&b, 2), u32(&b, 0), u64(&b, 0);
    pad_to(&b, 64);
    put(&b, (float[]){7.0f, -1.0f}, 8);
    bk_gguf *g = written_and_opened(&b);
    bk_error err;
    float out[2];
    assert_int_equal(bk_gguf_dequantize(g, bk_gguf_tensor_at(g, 0), out, &err), BK_OK);
    assert_true(out[0] == 7.0f && out[1] == -1.0f);
    bk_gguf_close(g);
    b = (buf){0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, 1);
    str(&b, "general.alignment"), u32(&b, 4), u32(&b, 24);
    expect_refused(&b, BK_ERR_PARSE, "general.alignment must be a u32 power of two");
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(reads_metadata_and_every_type, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_files_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(alignment_is_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
