/* GGUF v3 files (llama.cpp / ggml's model format): the header, the metadata, the tensor infos and the
 * tensors' data, read-only from a mapping of the file; and the tensors dequantized to float as ggml
 * defines each type.
 *
 * Layout (little-endian): "GGUF", u32 version (3), u64 tensor count, u64 metadata count; each metadata
 * entry a key (u64 length + bytes), a u32 value type and the value (an array: u32 element type, u64 count,
 * the elements); each tensor info its name, u32 n_dims, n_dims x u64 ne (ne[0] varies fastest), u32 ggml
 * type and u64 offset into the data section; the data section begins at the first multiple of
 * general.alignment (default 32) after the infos, and every offset is a multiple of it.
 *
 * Types read: F32, F16, BF16 and the 32-value blocks Q8_0 (f16 d, 32 x i8: q d), Q4_0 (f16 d, 16 bytes:
 * (q - 8) d) and Q4_1 (f16 d, f16 m, 16 bytes: q d + m), whose byte j holds element j in its low nibble
 * and element j + 16 in its high one. Any other type is refused when its tensor is dequantized, naming
 * the type. Every malformed file (a wrong magic or version, a count, string or array past the end, a
 * tensor whose data lies outside the file, overlaps another or is misaligned, an unknown value type)
 * is refused when opened, naming the file and what is wrong. */
#ifndef BK_IO_GGUF_H
#define BK_IO_GGUF_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#define BK_GGUF_MAX_DIMS 4

/* Metadata value types (GGUF's numbering). */
typedef enum bk_gguf_type {
    BK_GGUF_U8 = 0,
    BK_GGUF_I8 = 1,
    BK_GGUF_U16 = 2,
    BK_GGUF_I16 = 3,
    BK_GGUF_U32 = 4,
    BK_GGUF_I32 = 5,
    BK_GGUF_F32 = 6,
    BK_GGUF_BOOL = 7,
    BK_GGUF_STRING = 8,
    BK_GGUF_ARRAY = 9,
    BK_GGUF_U64 = 10,
    BK_GGUF_I64 = 11,
    BK_GGUF_F64 = 12
} bk_gguf_type;

/* Tensor types read (ggml's numbering). */
enum { BK_GGML_F32 = 0, BK_GGML_F16 = 1, BK_GGML_Q4_0 = 2, BK_GGML_Q4_1 = 3, BK_GGML_Q8_0 = 8, BK_GGML_BF16 = 30 };

/* One metadata entry. A string's bytes are not NUL-terminated in the file: `str` is a copy that is. An
 * array's elements: numbers in `items` (their raw bytes in the mapping, elem_type says how to read
 * them), strings in `strings` (copies). */
typedef struct bk_gguf_kv {
    char *key;
    bk_gguf_type type;
    union {
        uint64_t u;
        int64_t i;
        double f;
    } num;             /* the number (or bool) of a scalar entry; f for F32/F64 */
    char *str;         /* BK_GGUF_STRING */
    bk_gguf_type elem; /* BK_GGUF_ARRAY: the element type */
    uint64_t count;    /* BK_GGUF_ARRAY: the element count */
    const uint8_t *items;
    char **strings;
} bk_gguf_kv;

typedef struct bk_gguf_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[BK_GGUF_MAX_DIMS]; /* ne[0] varies fastest; unused dimensions are 1 */
    uint32_t type;
    uint64_t offset;   /* into the data section */
    uint64_t values;   /* ne[0] x ... */
    uint64_t bytes;    /* of its data in the file */
    const uint8_t *data;
} bk_gguf_tensor;

typedef struct bk_gguf bk_gguf;

/* Maps and parses the file at `path` into *out (free with bk_gguf_close). */
int bk_gguf_open(const char *path, bk_gguf **out, bk_error *err);
void bk_gguf_close(bk_gguf *g);

uint32_t bk_gguf_version(const bk_gguf *g);
size_t bk_gguf_kv_count(const bk_gguf *g);
const bk_gguf_kv *bk_gguf_kv_at(const bk_gguf *g, size_t i);
/* The entry named `key`, or NULL. */
const bk_gguf_kv *bk_gguf_find(const bk_gguf *g, const char *key);
/* Typed reads of an entry: BK_ERR_PARSE naming the file and the key when it is missing or of another type
 * (any integer type reads as an integer in range, F32/F64 as a double). */
int bk_gguf_get_string(const bk_gguf *g, const char *key, const char **out, bk_error *err);
int bk_gguf_get_uint(const bk_gguf *g, const char *key, uint64_t *out, bk_error *err);
int bk_gguf_get_float(const bk_gguf *g, const char *key, double *out, bk_error *err);

size_t bk_gguf_tensor_count(const bk_gguf *g);
const bk_gguf_tensor *bk_gguf_tensor_at(const bk_gguf *g, size_t i);
const bk_gguf_tensor *bk_gguf_tensor_find(const bk_gguf *g, const char *name);

/* "F32", "Q4_1", ...; "type 12" for one this reader does not know by name. */
const char *bk_gguf_type_name(uint32_t type, char *buf, size_t size);
/* Bytes of n values of `type` (n a multiple of its block size), 0 when the type is not read here. */
uint64_t bk_gguf_type_bytes(uint32_t type, uint64_t n);

/* The tensor's t->values values as floats into out, exactly as ggml dequantizes them; BK_ERR_UNSUPPORTED
 * naming the tensor and its type for a type not read here. */
int bk_gguf_dequantize(const bk_gguf *g, const bk_gguf_tensor *t, float *out, bk_error *err);

#endif
