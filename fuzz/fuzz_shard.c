/* Fuzz target: the llm.c .bin shard reader (core/data/data.c) and the batch loader over what it
 * reads. The input is the shard; the vocabulary is GPT-2's (50257), so token ids above it are seen
 * too. A shard that reads is then cut into windows and batched for a few steps, shuffled. */
#include "fuzz.h"

#include "data/data.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bk_error err;
    bk_tokens tokens;
    int rc = bk_data_read_memory(BK_DATA_SHARDS, data, size, "fuzz.bin", 50257, 0, &tokens, &err);
    if (rc != BK_OK) {
        if (err.message[0] == '\0')
            abort();
        return 0;
    }
    /* the size of a shard that reads matches its header exactly */
    if ((size_t)tokens.count * 2 + BK_SHARD_HEADER_INTS * 4 != size)
        abort();
    for (int64_t i = 0; i < tokens.count; i++)
        if (tokens.tokens[i] >= 50257)
            abort();
    if (tokens.count >= 2) {
        int T = tokens.count - 1 < 8 ? (int)tokens.count - 1 : 8, B = 3;
        bk_loader ld;
        if (bk_loader_init(&ld, &tokens, B, T, (uint64_t)size, 1, &err) != BK_OK)
            abort();
        int32_t in[3 * 8], tg[3 * 8];
        for (int step = 0; step < 4; step++)
            bk_loader_next(&ld, in, tg);
        if (bk_loader_seek(&ld, 1, ld.n_windows, &err) != BK_OK)
            abort();
        bk_loader_next(&ld, in, tg);
        bk_loader_free(&ld);
    }
    bk_tokens_free(&tokens);
    return 0;
}
