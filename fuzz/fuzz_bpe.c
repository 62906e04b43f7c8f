/* Fuzz target: the byte-level BPE tokenizer (core/data/bpe.c): the tokenizer.json reader, then encode and
 * decode. The input is a tokenizer.json text, optionally followed by a NUL byte and a text to encode (without
 * one, a fixed text is encoded). A tokenizer that loads must: encode the text (or refuse it as invalid UTF-8),
 * decode its ids, write its canonical tokenizer.json, read that back, and encode the text to the same ids
 * again; the bytes after the NUL, read as 32-bit ids, must decode or be refused naming an id. */
#include "fuzz.h"

#include "data/bpe.h"

#include <stdlib.h>
#include <string.h>

static const char fixed[] = "Hello, world! don't 123 <|endoftext|> \xc3\xa9\xe6\x97\xa5 \xf0\x9f\x98\x80\n\n  x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : fixed;
    size_t text_len = nul ? size - json_len - 1 : sizeof fixed - 1;
    bk_bpe *t = NULL;
    bk_error err;
    if (bk_bpe_from_hf_json((const char *)data, json_len, "fuzz.json", &t, &err) != BK_OK) {
        if (t || err.message[0] == '\0')
            abort();
        return 0;
    }
    int32_t *ids = NULL, *again = NULL;
    size_t n = 0, m = 0, len = 0, jlen = 0;
    char *back = NULL, *json = NULL;
    int rc = bk_bpe_encode(t, text, text_len, &ids, &n, &err);
    if (rc != BK_OK && rc != BK_ERR_INVALID)
        abort();
    if (rc == BK_OK) {
        if (bk_bpe_decode(t, ids, n, &back, &len, &err) != BK_OK)
            abort();
        free(back);
    }
    if (bk_bpe_to_hf_json(t, &json, &jlen, &err) != BK_OK)
        abort();
    bk_bpe *u = NULL;
    if (bk_bpe_from_hf_json(json, jlen, "canonical", &u, &err) != BK_OK)
        abort(); /* the canonical text always reads back */
    if (rc == BK_OK) {
        if (bk_bpe_encode(u, text, text_len, &again, &m, &err) != BK_OK || m != n ||
            (n && memcmp(ids, again, n * sizeof *ids) != 0))
            abort();
    }
    if (nul && text_len >= 4) {
        size_t k = text_len / 4;
        int32_t *raw = malloc(k * sizeof *raw);
        if (raw) {
            memcpy(raw, text, k * sizeof *raw);
            rc = bk_bpe_decode(t, raw, k, &back, &len, &err);
            if (rc == BK_OK)
                free(back);
            else if (rc != BK_ERR_INVALID || !strstr(err.message, "token id"))
                abort();
            free(raw);
        }
    }
    free(ids);
    free(again);
    free(json);
    bk_bpe_free(u);
    bk_bpe_free(t);
    return 0;
}
