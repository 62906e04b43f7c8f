/* The byte-level BPE tokenizer (core/data/bpe.h) on a small fixed sample, always run:
 * tests/data/bpe_tokenizer.json (a ByteLevel BPE of 500 merges trained by HF tokenizers on the repository's
 * docs, with the special token <|endoftext|> and the added token <tool>) and tests/data/bpe_cases.json (HF
 * tokenizers' ids for varied texts, with three pre-tokenizers over the same vocabulary: GPT-2's ByteLevel,
 * SmolLM2's Digits + ByteLevel, Llama 3's Split + ByteLevel with ignore_merges). Checked: the ids exactly,
 * decoding back to the text, the canonical tokenizer.json read back, GGUF metadata with the same tokens,
 * merges and tokenizer.ggml.pre encoding alike, and each refused input with its code and message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "data/bpe.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf_writer.h"

#define FIXTURE BK_TEST_SOURCE_DIR "/tests/data/bpe_tokenizer.json"
#define CASES BK_TEST_SOURCE_DIR "/tests/data/bpe_cases.json"

static const char *const VARIANTS[] = {"gpt2", "smollm", "llama3"};
static const char SMOLLM_PRE[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}";
static const char LLAMA3_PRE[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";

static char *slurp(const char *path, size_t *len)
{
    char *text;
    bk_error err;
    int rc = bk_file_read_all(path, "test data", 0, &text, len, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.message);
    assert_int_equal(rc, BK_OK);
    return text;
}

/* The fixture with variant v's pre-tokenizer, as tokenizer.json text (to free). */
static char *variant_json(int v)
{
    size_t len;
    char *text = slurp(FIXTURE, &len);
    if (v == 0)
        return text;
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "pre_tokenizer", cJSON_Parse(v == 1 ? SMOLLM_PRE : LLAMA3_PRE));
    if (v == 2)
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(root, "model"), "ignore_merges", cJSON_CreateTrue());
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
}

static bk_bpe *load_text(const char *text)
{
    bk_bpe *t = NULL;
    bk_error err;
    int rc = bk_bpe_from_hf_json(text, strlen(text), "fixture", &t, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.message);
    assert_int_equal(rc, BK_OK);
    return t;
}

static cJSON *cases(void)
{
    size_t len;
    char *text = slurp(CASES, &len);
    cJSON *c = cJSON_Parse(text);
    free(text);
    assert_non_null(c);
    return c;
}

/* Every sample through t: HF's ids of variant v, and decoded back to the sample. */
static void check_cases(const bk_bpe *t, int v)
{
    cJSON *c = cases();
    const cJSON *samples = cJSON_GetObjectItem(c, "samples");
    const cJSON *expect = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "ids"), VARIANTS[v]);
    assert_true(cJSON_GetArraySize(samples) >= 10);
    assert_int_equal(cJSON_GetArraySize(samples), cJSON_GetArraySize(expect));
    const cJSON *ids_j = expect->child;
    int k = 0;
    for (const cJSON *s = samples->child; s; s = s->next, ids_j = ids_j->next, k++) {
        int32_t *ids;
        size_t n;
        bk_error err;
        const char *text = s->valuestring;
        assert_int_equal(bk_bpe_encode(t, text, strlen(text), &ids, &n, &err), BK_OK);
        size_t want = (size_t)cJSON_GetArraySize(ids_j);
        if (n != want)
            fprintf(stderr, "%s: sample %d: %zu tokens, HF %zu\n", VARIANTS[v], k, n, want);
        assert_int_equal(n, want);
        size_t i = 0;
        for (const cJSON *x = ids_j->child; x; x = x->next, i++) {
            if (ids[i] != x->valueint)
                fprintf(stderr, "%s: sample %d: token %zu is %d, HF %d\n", VARIANTS[v], k, i, ids[i], x->valueint);
            assert_int_equal(ids[i], x->valueint);
        }
        char *back;
        size_t blen;
        assert_int_equal(bk_bpe_decode(t, ids, n, &back, &blen, &err), BK_OK);
        assert_int_equal(blen, strlen(text));
        assert_memory_equal(back, text, blen);
        free(back);
        free(ids);
    }
    cJSON_Delete(c);
}

static void test_fixture_matches_hf(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) {
        char *text = variant_json(v);
        bk_bpe *t = load_text(text);
        free(text);
        assert_int_equal(bk_bpe_vocab_size(t), 758);
        assert_int_equal(bk_bpe_eos(t), 0); /* <|endoftext|> */
        assert_int_equal(bk_bpe_bos(t), -1);
        assert_true(bk_bpe_is_special(t, 0));
        assert_string_equal(bk_bpe_token(t, 757), "<tool>");
        assert_false(bk_bpe_is_special(t, 757));
        check_cases(t, v);
        bk_bpe_free(t);
    }
    /* through bk_bpe_open, on the file and on its directory's name */
    bk_bpe *t;
    bk_error err;
    assert_int_equal(bk_bpe_open(FIXTURE, &t, &err), BK_OK);
    check_cases(t, 0);
    bk_bpe_free(t);
}

static void test_json_round_trip(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) {
        char *text = variant_json(v), *out, *again;
        size_t len, len2;
        bk_error err;
        bk_bpe *t = load_text(text);
        free(text);
        assert_int_equal(bk_bpe_to_hf_json(t, &out, &len, &err), BK_OK);
        assert_int_equal(strlen(out), len);
        bk_bpe *u = load_text(out);
        assert_int_equal(bk_bpe_vocab_size(u), bk_bpe_vocab_size(t));
        assert_int_equal(bk_bpe_eos(u), bk_bpe_eos(t));
        assert_int_equal(bk_bpe_bos(u), bk_bpe_bos(t));
        assert_string_equal(bk_bpe_describe(u), bk_bpe_describe(t));
        check_cases(u, v);
        assert_int_equal(bk_bpe_to_hf_json(u, &again, &len2, &err), BK_OK);
        assert_int_equal(len2, len);
        assert_memory_equal(again, out, len); /* canonical: the same text again */
        free(out);
        free(again);
        bk_bpe_free(t);
        bk_bpe_free(u);
    }
}

/* ---- GGUF */

static char gguf_path[256];

typedef struct gguf_spec {
    const char *model;  /* tokenizer.ggml.model; NULL: left out */
    const char *pre;    /* NULL: left out */
    int tokens, merges; /* 0: that key left out */
    int bos;            /* -1: left out */
} gguf_spec;

/* A GGUF file (no tensors) with the fixture's vocabulary and merges as `s` says; token_type marks
 * <|endoftext|> CONTROL and <tool> USER_DEFINED. */
static void write_gguf(const gguf_spec *s)
{
    size_t len;
    char *text = slurp(FIXTURE, &len);
    bk_bpe *t = load_text(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "merges");
    const int n = bk_bpe_vocab_size(t);
    buf kv = {0};
    uint64_t count = 0;
    if (s->model)
        str(&kv, "tokenizer.ggml.model"), u32(&kv, BK_GGUF_STRING), str(&kv, s->model), count++;
    if (s->pre)
        str(&kv, "tokenizer.ggml.pre"), u32(&kv, BK_GGUF_STRING), str(&kv, s->pre), count++;
    if (s->tokens) {
        str(&kv, "tokenizer.ggml.tokens"), u32(&kv, BK_GGUF_ARRAY), u32(&kv, BK_GGUF_STRING), u64(&kv, (uint64_t)n);
        for (int i = 0; i < n; i++)
            str(&kv, bk_bpe_token(t, i));
        str(&kv, "tokenizer.ggml.token_type"), u32(&kv, BK_GGUF_ARRAY), u32(&kv, BK_GGUF_I32), u64(&kv, (uint64_t)n);
        for (int i = 0; i < n; i++)
            u32(&kv, i == 0 ? 3 : i == n - 1 ? 4 : 1);
        count += 2;
    }
    if (s->merges) {
        str(&kv, "tokenizer.ggml.merges"), u32(&kv, BK_GGUF_ARRAY), u32(&kv, BK_GGUF_STRING),
            u64(&kv, (uint64_t)cJSON_GetArraySize(merges));
        for (const cJSON *m = merges->child; m; m = m->next) {
            char pair[256];
            snprintf(pair, sizeof pair, "%s %s", m->child->valuestring, m->child->next->valuestring);
            str(&kv, pair);
        }
        count++;
    }
    if (s->bos >= 0)
        str(&kv, "tokenizer.ggml.bos_token_id"), u32(&kv, BK_GGUF_U32), u32(&kv, (uint32_t)s->bos), count++;
    str(&kv, "tokenizer.ggml.eos_token_id"), u32(&kv, BK_GGUF_U32), u32(&kv, 0), count++;
    buf b = {0};
    put(&b, "GGUF", 4), u32(&b, 3), u64(&b, 0), u64(&b, count);
    put(&b, kv.p, kv.n);
    pad_to(&b, 32);
    FILE *f = fopen(gguf_path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    free(kv.p);
    free(b.p);
    cJSON_Delete(root);
    bk_bpe_free(t);
}

static int open_gguf(bk_bpe **t, bk_error *err)
{
    bk_gguf *g;
    int rc = bk_gguf_open(gguf_path, &g, err);
    if (rc)
        return rc;
    rc = bk_bpe_from_gguf(g, gguf_path, t, err);
    bk_gguf_close(g);
    return rc;
}

static void test_gguf_matches_json(void **state)
{
    (void)state;
    static const char *const pres[] = {"gpt2", "smollm", "llama3"};
    for (int v = 0; v < 3; v++) {
        gguf_spec s = {"gpt2", pres[v], 1, 1, 5};
        write_gguf(&s);
        bk_bpe *t;
        bk_error err;
        int rc = open_gguf(&t, &err);
        if (rc)
            fprintf(stderr, "%s\n", err.message);
        assert_int_equal(rc, BK_OK);
        assert_int_equal(bk_bpe_vocab_size(t), 758);
        assert_int_equal(bk_bpe_bos(t), 5);
        assert_int_equal(bk_bpe_eos(t), 0);
        assert_true(bk_bpe_is_special(t, 0));
        check_cases(t, v);
        /* and its tokenizer.json reads back alike */
        char *out;
        size_t len;
        assert_int_equal(bk_bpe_to_hf_json(t, &out, &len, &err), BK_OK);
        bk_bpe *u = load_text(out);
        assert_int_equal(bk_bpe_bos(u), 5);
        check_cases(u, v);
        free(out);
        bk_bpe_free(u);
        bk_bpe_free(t);
    }
    /* llama-bpe is llama3; bk_bpe_open finds a GGUF file by its magic */
    gguf_spec s = {"gpt2", "llama-bpe", 1, 1, -1};
    write_gguf(&s);
    bk_bpe *t;
    bk_error err;
    assert_int_equal(bk_bpe_open(gguf_path, &t, &err), BK_OK);
    assert_int_equal(bk_bpe_bos(t), -1);
    check_cases(t, 2);
    bk_bpe_free(t);
    /* "default" (and no pre at all) is llama.cpp's default: four regexes */
    gguf_spec d = {"gpt2", NULL, 1, 1, -1};
    write_gguf(&d);
    assert_int_equal(open_gguf(&t, &err), BK_OK);
    assert_non_null(strstr(bk_bpe_describe(t), "Split(regex, Isolated), Split(regex, Isolated)"));
    int32_t *ids;
    size_t n;
    assert_int_equal(bk_bpe_encode(t, "a+=1234;", 8, &ids, &n, &err), BK_OK);
    char *back;
    size_t blen;
    assert_int_equal(bk_bpe_decode(t, ids, n, &back, &blen, &err), BK_OK);
    assert_string_equal(back, "a+=1234;");
    free(back);
    free(ids);
    bk_bpe_free(t);
}

static void expect_gguf_refused(const gguf_spec *s, int code, const char *part)
{
    write_gguf(s);
    bk_bpe *t = (bk_bpe *)1;
    bk_error err;
    int rc = open_gguf(&t, &err);
    if (rc != code || !strstr(err.message, part))
        fprintf(stderr, "expected %d '%s', got %d '%s'\n", code, part, rc, err.message);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err.message, part));
    assert_null(t);
}

static void test_gguf_refused(void **state)
{
    (void)state;
    gguf_spec no_tokens = {"gpt2", "gpt2", 0, 1, -1};
    expect_gguf_refused(&no_tokens, BK_ERR_PARSE, "no tokenizer.ggml.tokens in the metadata");
    gguf_spec no_merges = {"gpt2", "gpt2", 1, 0, -1};
    expect_gguf_refused(&no_merges, BK_ERR_PARSE, "no tokenizer.ggml.merges in the metadata");
    gguf_spec pre = {"gpt2", "deepseek-coder", 1, 1, -1};
    expect_gguf_refused(&pre, BK_ERR_UNSUPPORTED, "tokenizer.ggml.pre: 'deepseek-coder' is not supported");
    gguf_spec model = {"llama", "gpt2", 1, 1, -1};
    expect_gguf_refused(&model, BK_ERR_UNSUPPORTED, "tokenizer.ggml.model: 'llama' is not supported");
    gguf_spec no_model = {NULL, "gpt2", 1, 1, -1};
    expect_gguf_refused(&no_model, BK_ERR_PARSE, "tokenizer.ggml.model");
    gguf_spec bos = {"gpt2", "gpt2", 1, 1, 100000};
    expect_gguf_refused(&bos, BK_ERR_PARSE, "tokenizer.ggml.bos_token_id: 100000 is not a token id");
}

/* ---- refused tokenizer.json files */

static void expect_json_refused(const char *text, int code, const char *part)
{
    bk_bpe *t = (bk_bpe *)1;
    bk_error err;
    int rc = bk_bpe_from_hf_json(text, strlen(text), "tok.json", &t, &err);
    if (rc != code || !strstr(err.message, part))
        fprintf(stderr, "expected %d '%s', got %d '%s'\n", code, part, rc, err.message);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err.message, part));
    assert_non_null(strstr(err.message, "tok.json"));
    assert_null(t);
}

#define PRE_BL "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}"
#define MODEL(extra, merges) \
    "\"model\": {\"type\": \"BPE\"" extra ", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": " merges "}"

static void test_json_refused(void **state)
{
    (void)state;
    expect_json_refused("{\"model\": {\"type\": \"BPE\",\n  \"vocab\": {\"a\": 0,,}}}", BK_ERR_PARSE,
                        "not valid JSON (line 2, column");
    expect_json_refused("{" PRE_BL ", \"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", BK_ERR_UNSUPPORTED,
                        "model.type: 'WordPiece' is not supported (only BPE)");
    expect_json_refused("{" PRE_BL ", " MODEL("", "[\"a c\"]") "}", BK_ERR_PARSE,
                        "model.merges[0]: token 'c' is not in the vocabulary");
    expect_json_refused("{" PRE_BL ", " MODEL("", "[[\"b\", \"a\"]]") "}", BK_ERR_PARSE,
                        "the merge of 'b' and 'a', 'ba', is not in the vocabulary");
    expect_json_refused("{" PRE_BL ", " MODEL("", "[\"abc\"]") "}", BK_ERR_PARSE, "model.merges[0]: expected \"a b\"");
    expect_json_refused("{" PRE_BL ", " MODEL(", \"byte_fallback\": true", "[]") "}", BK_ERR_UNSUPPORTED,
                        "model.byte_fallback: true is not supported");
    expect_json_refused("{\"normalizer\": {\"type\": \"NFC\"}, " PRE_BL ", " MODEL("", "[]") "}", BK_ERR_UNSUPPORTED,
                        "normalizer: only null is supported, got type 'NFC'");
    expect_json_refused("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, " MODEL("", "[]") "}", BK_ERR_UNSUPPORTED,
                        "pre_tokenizer: pre-tokenizer 'Whitespace' is not supported");
    expect_json_refused("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
                        "{\"type\": \"Digits\"}]}, " MODEL("", "[]") "}",
                        BK_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1]: a Digits pre-tokenizer after ByteLevel");
    expect_json_refused("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": "
                        "\"Isolated\"}, " MODEL("", "[]") "}",
                        BK_ERR_PARSE, "pre_tokenizer.pattern: the regex '(a' does not compile");
    expect_json_refused("{\"pre_tokenizer\": {\"type\": \"Digits\"}, " MODEL("", "[]") "}", BK_ERR_UNSUPPORTED,
                        "no ByteLevel step");
    expect_json_refused("{" PRE_BL ", \"decoder\": {\"type\": \"WordPiece\"}, " MODEL("", "[]") "}",
                        BK_ERR_UNSUPPORTED, "decoder: 'WordPiece' is not supported");
    expect_json_refused("{" PRE_BL ", " MODEL(", \"continuing_subword_prefix\": \"##\"", "[]") "}",
                        BK_ERR_UNSUPPORTED, "model.continuing_subword_prefix: \"##\" is not supported");
    expect_json_refused("{" PRE_BL ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2}, \"merges\": []}}",
                        BK_ERR_PARSE, "model.vocab[\"b\"]: expected an id in [0, 2)");
    expect_json_refused("{\"added_tokens\": [{\"id\": 7, \"content\": \"<s>\", \"special\": true}], " PRE_BL
                        ", " MODEL("", "[]") "}",
                        BK_ERR_UNSUPPORTED, "added_tokens[0] ('<s>'): id 7, but HF tokenizers gives it id 3");
    expect_json_refused("{\"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"lstrip\": true}], " PRE_BL
                        ", " MODEL("", "[]") "}",
                        BK_ERR_UNSUPPORTED, "lstrip true is not supported");
    expect_json_refused("{" PRE_BL ", " MODEL(", \"unk_token\": \"<unk>\"", "[]") "}", BK_ERR_PARSE,
                        "model.unk_token: '<unk>' is not in the vocabulary");
    expect_json_refused("[1, 2]", BK_ERR_PARSE, "the top level: expected an object");
    /* an id far outside int's range is refused before it is converted (it was undefined behaviour) */
    expect_json_refused("{" PRE_BL ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2e48}, \"merges\": "
                        "[]}}",
                        BK_ERR_PARSE, "model.vocab[\"b\"]");
    expect_json_refused("{" PRE_BL ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": -1e300}, "
                        "\"merges\": []}}",
                        BK_ERR_PARSE, "model.vocab[\"b\"]");
}

static void test_decode_and_encode_refused(void **state)
{
    (void)state;
    bk_bpe *t;
    bk_error err;
    assert_int_equal(bk_bpe_open(FIXTURE, &t, &err), BK_OK);
    int32_t ids[3] = {5, 758, 7};
    char *text = (char *)1;
    size_t len;
    assert_int_equal(bk_bpe_decode(t, ids, 3, &text, &len, &err), BK_ERR_INVALID);
    assert_non_null(strstr(err.message, "token id 758 at position 1 is out of range (ids are 0 to 757)"));
    assert_null(text);
    ids[1] = -1;
    assert_int_equal(bk_bpe_decode(t, ids, 3, &text, &len, &err), BK_ERR_INVALID);
    assert_non_null(strstr(err.message, "token id -1 at position 1"));
    int32_t *out = (int32_t *)1;
    size_t n;
    assert_int_equal(bk_bpe_encode(t, "ok \xc3\x28 no", 8, &out, &n, &err), BK_ERR_INVALID);
    assert_non_null(strstr(err.message, "not valid UTF-8 at byte offset 3 (byte 0xc3)"));
    assert_null(out);
    assert_int_equal(bk_bpe_encode(t, "\xed\xa0\x80", 3, &out, &n, &err), BK_ERR_INVALID); /* a surrogate */
    assert_int_equal(bk_bpe_encode(t, "", 0, &out, &n, &err), BK_OK);
    assert_int_equal(n, 0);
    free(out);
    /* added ids decode as their text: the special token and <tool> */
    int32_t added[2] = {0, 757};
    assert_int_equal(bk_bpe_decode(t, added, 2, &text, &len, &err), BK_OK);
    assert_string_equal(text, "<|endoftext|><tool>");
    free(text);
    /* the missing file, through bk_bpe_open */
    bk_bpe *u = (bk_bpe *)1;
    assert_int_equal(bk_bpe_open("/nonexistent/tokenizer.json", &u, &err), BK_ERR_IO);
    assert_non_null(strstr(err.message, "/nonexistent/tokenizer.json"));
    assert_null(u);
    bk_bpe_free(t);
}

/* A long word (one run of letters, one run of spaces) goes through the heap, not a quadratic loop. */
static void test_long_words(void **state)
{
    (void)state;
    bk_bpe *t;
    bk_error err;
    assert_int_equal(bk_bpe_open(FIXTURE, &t, &err), BK_OK);
    const size_t n = 1 << 20;
    char *text = malloc(2 * n + 1);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        text[i] = "abcdefghij"[i % 10];
    memset(text + n, ' ', n);
    text[2 * n] = '\0';
    int32_t *ids;
    size_t k;
    clock_t c0 = clock();
    assert_int_equal(bk_bpe_encode(t, text, 2 * n, &ids, &k, &err), BK_OK);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    assert_true(k > 0 && k < n);
    assert_true(secs < 20.0);
    char *back;
    size_t blen;
    assert_int_equal(bk_bpe_decode(t, ids, k, &back, &blen, &err), BK_OK);
    assert_int_equal(blen, 2 * n);
    assert_memory_equal(back, text, blen);
    free(back);
    free(ids);
    free(text);
    bk_bpe_free(t);
}

int main(void)
{
    snprintf(gguf_path, sizeof gguf_path, "/tmp/bk_test_bpe_%d.gguf", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_matches_hf),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_gguf_matches_json),
        cmocka_unit_test(test_gguf_refused),
        cmocka_unit_test(test_json_refused),
        cmocka_unit_test(test_decode_and_encode_refused),
        cmocka_unit_test(test_long_words),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(gguf_path);
    return rc;
}
