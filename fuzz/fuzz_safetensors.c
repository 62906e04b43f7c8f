/* Fuzz target: the safetensors reader (core/io/safetensors.c): the 8-byte header length, the JSON
 * header through cJSON (tensors, dtypes, shapes, offsets, __metadata__) and the data section. The
 * input is the file. Every tensor a successful open returns is read whole, so ASan sees any offset
 * that escapes the data. */
#include "fuzz.h"

#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bk_error err;
    bk_safetensors *st = NULL;
    int rc = bk_safetensors_open(bk_fuzz_file(data, size), &st, &err);
    if (rc != BK_OK) {
        if (err.message[0] == '\0')
            abort();
        return 0;
    }
    volatile float sink = 0.0f;
    int n = bk_safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const bk_st_tensor *t = bk_safetensors_at(st, i);
        if (!t || !t->name || t->ndim < 0 || t->ndim > BK_ST_MAX_DIMS)
            abort();
        if (bk_safetensors_find(st, t->name) != t)
            abort();
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            count *= (uint64_t)t->shape[d];
        for (uint64_t k = 0; k < count; k++)
            sink += t->data[k];
    }
    if (bk_safetensors_at(st, n) != NULL || bk_safetensors_at(st, -1) != NULL)
        abort();
    (void)bk_safetensors_meta(st, "format");
    (void)bk_safetensors_meta(st, "biaskit.experiment");
    (void)sink;
    bk_safetensors_close(st);
    return 0;
}
