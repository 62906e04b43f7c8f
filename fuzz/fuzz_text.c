/* Fuzz target: the text loader (core/data/data.c) through bk_data_load, as `train` calls it: a text
 * file of bytes, a validation split by fraction, a byte limit and a minimum size. The first two input
 * bytes choose the settings (vocabulary 128 or 256, max_bytes, val_fraction, min_tokens); the rest is
 * the file's contents, read from a memfd by path. */
#include "fuzz.h"

#include "data/data.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const uint8_t a = data[0], b = data[1];
    data += 2;
    size -= 2;
    const char *path = bk_fuzz_file(data, size);
    const char *paths[1] = {path};
    bk_data_config cfg = {0};
    cfg.format = BK_DATA_TEXT;
    cfg.paths = paths;
    cfg.n_paths = 1;
    cfg.val_fraction = (double)(b % 100 + 1) / 102.0;          /* in (0, 1) */
    cfg.max_bytes = (a & 0x40) ? (int64_t)(b >> 1) * 7 : 0;    /* sometimes a limit */
    int32_t vocab = (a & 0x80) ? 128 : 256;
    int64_t min_tokens = a & 0x0f;
    bk_tokens train, val;
    bk_error err;
    int rc = bk_data_load(&cfg, vocab, min_tokens, &train, &val, &err);
    if (rc != BK_OK) {
        if (err.message[0] == '\0' || train.tokens || val.tokens)
            abort();
        return 0;
    }
    int64_t expected = cfg.max_bytes > 0 && (int64_t)size > cfg.max_bytes ? cfg.max_bytes : (int64_t)size;
    if (train.count + val.count != expected || train.count < min_tokens || val.count < min_tokens)
        abort();
    for (int64_t i = 0; i < train.count; i++)
        if (train.tokens[i] != data[i])
            abort();
    for (int64_t i = 0; i < val.count; i++)
        if (val.tokens[i] != data[train.count + i])
            abort();
    bk_tokens_free(&train);
    bk_tokens_free(&val);

    /* the same bytes through the memory entry point */
    bk_tokens t;
    rc = bk_data_read_memory(BK_DATA_TEXT, data, size, "fuzz.txt", vocab, cfg.max_bytes, &t, &err);
    if (rc == BK_OK) {
        if (t.count != expected)
            abort();
        bk_tokens_free(&t);
    }
    return 0;
}
