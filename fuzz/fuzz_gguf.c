/* Fuzz target: the GGUF reader (core/io/gguf.c): the header, every metadata value type and array, the
 * tensor infos, the alignment and the data section. The input is the file. Every tensor a successful
 * open returns is dequantized when its type is read here (its data read whole, so ASan sees any offset
 * that escapes the mapping), and every metadata entry's strings and numbers are read. */
#include "fuzz.h"

#include "io/gguf.h"

#include <stdlib.h>
#include <string.h>

#define MAX_VALUES (1u << 22) /* dequantize tensors of at most this many values (the input bounds the rest) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bk_error err;
    bk_gguf *g = NULL;
    int rc = bk_gguf_open(bk_fuzz_file(data, size), &g, &err);
    if (rc != BK_OK) {
        if (err.message[0] == '\0' || g)
            abort();
        return 0;
    }
    volatile size_t sink = 0;
    volatile float values = 0.0f;
    for (size_t i = 0; i < bk_gguf_kv_count(g); i++) {
        const bk_gguf_kv *kv = bk_gguf_kv_at(g, i);
        if (!kv || !kv->key || bk_gguf_find(g, kv->key) != kv)
            abort();
        sink += strlen(kv->key);
        if (kv->type == BK_GGUF_STRING)
            sink += strlen(kv->str);
        for (uint64_t k = 0; kv->type == BK_GGUF_ARRAY && kv->strings && k < kv->count; k++)
            sink += strlen(kv->strings[k]);
        if (kv->type == BK_GGUF_ARRAY && kv->items && kv->count)
            sink += kv->items[0];
    }
    float *out = NULL;
    for (size_t i = 0; i < bk_gguf_tensor_count(g); i++) {
        const bk_gguf_tensor *t = bk_gguf_tensor_at(g, i);
        if (!t || bk_gguf_tensor_find(g, t->name) != t || t->n_dims < 1 || t->n_dims > BK_GGUF_MAX_DIMS)
            abort();
        if (t->values > MAX_VALUES || !bk_gguf_type_bytes(t->type, t->values))
            continue;
        float *grown = realloc(out, (size_t)t->values * sizeof *out);
        if (!grown)
            break;
        out = grown;
        if (bk_gguf_dequantize(g, t, out, &err) != BK_OK)
            abort(); /* a type it sized is a type it reads */
        values += out[t->values - 1];
    }
    if (bk_gguf_tensor_at(g, bk_gguf_tensor_count(g)) != NULL)
        abort();
    free(out);
    (void)sink, (void)values;
    bk_gguf_close(g);
    return 0;
}
