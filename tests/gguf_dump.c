/* Test helper: a GGUF file's tensors as the reader dequantizes them (core/io/gguf.h), for the peer test
 * against gguf-py (tests/gguf_peer.py). usage: gguf_dump FILE OUTDIR: writes OUTDIR/<index>.f32 (the
 * floats, little-endian) for every tensor of a type it reads and prints one line per tensor:
 * "index name type ne0,ne1,... values", then one line per scalar or string metadata entry: "key=value"
 * (a string's '\' and new lines escaped as \\ and \n). */
#include "io/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gguf_dump FILE OUTDIR\n");
        return 2;
    }
    bk_gguf *g = NULL;
    bk_error err;
    if (bk_gguf_open(argv[1], &g, &err)) {
        fprintf(stderr, "gguf_dump: %s\n", err.message);
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < bk_gguf_tensor_count(g) && !rc; i++) {
        const bk_gguf_tensor *t = bk_gguf_tensor_at(g, i);
        char tn[32], dims[128] = "";
        size_t used = 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%" PRId64, d ? "," : "", t->ne[d]);
        printf("%zu %s %s %s %" PRIu64 "\n", i, t->name, bk_gguf_type_name(t->type, tn, sizeof tn), dims, t->values);
        if (!bk_gguf_type_bytes(t->type, t->values))
            continue;
        float *out = malloc((size_t)t->values * sizeof *out);
        char path[4096];
        snprintf(path, sizeof path, "%s/%zu.f32", argv[2], i);
        FILE *f = out ? fopen(path, "wb") : NULL;
        if (!f || bk_gguf_dequantize(g, t, out, &err) || fwrite(out, sizeof *out, (size_t)t->values, f) != t->values) {
            fprintf(stderr, "gguf_dump: tensor '%s': %s\n", t->name, f ? err.message : "cannot write");
            rc = 1;
        }
        if (f)
            fclose(f);
        free(out);
    }
    for (size_t i = 0; i < bk_gguf_kv_count(g); i++) {
        const bk_gguf_kv *kv = bk_gguf_kv_at(g, i);
        if (kv->type == BK_GGUF_STRING) { /* one line: '\\' and new lines escaped */
            printf("%s=", kv->key);
            for (const char *c = kv->str; *c; c++)
                fputs(*c == '\n' ? "\\n" : *c == '\\' ? "\\\\" : (char[]){*c, 0}, stdout);
            printf("\n");
        }
        else if (kv->type == BK_GGUF_F32 || kv->type == BK_GGUF_F64)
            printf("%s=%.17g\n", kv->key, kv->num.f);
        else if (kv->type == BK_GGUF_I8 || kv->type == BK_GGUF_I16 || kv->type == BK_GGUF_I32 || kv->type == BK_GGUF_I64)
            printf("%s=%" PRId64 "\n", kv->key, kv->num.i);
        else if (kv->type != BK_GGUF_ARRAY)
            printf("%s=%" PRIu64 "\n", kv->key, kv->num.u);
        else
            printf("%s=array of %" PRIu64 "\n", kv->key, kv->count);
    }
    bk_gguf_close(g);
    return rc;
}
