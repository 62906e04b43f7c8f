/* safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
 * "__metadata__": {"key": "string value", ...}}, then the raw little-endian data. Readable by the
 * Python safetensors / PyTorch ecosystem. Only F32 tensors are written; F32 is read (other dtypes are
 * rejected with a message naming the tensor). JSON through cJSON (libcjson-dev). */
#ifndef BK_SAFETENSORS_H
#define BK_SAFETENSORS_H

#include "util/error.h"

#include <stdint.h>

#define BK_ST_MAX_DIMS 4

/* The largest header the reader accepts, in bytes: the limit of the reference implementation
 * (MAX_HEADER_SIZE of the Python/Rust safetensors package), so that a corrupt or hostile length field
 * is refused before anything is allocated for it. */
#define BK_ST_MAX_HEADER 100000000u

typedef struct bk_st_tensor {
    const char *name;
    int ndim;
    int64_t shape[BK_ST_MAX_DIMS];
    const float *data; /* product(shape) floats */
} bk_st_tensor;

typedef struct bk_st_meta {
    const char *key;
    const char *value;
} bk_st_meta;

/* Write atomically: to a temp file "PATH.tmp.<pid>.<random>" made with O_EXCL in the same directory
 * (so two writers of one PATH never share it), fsync, rename over PATH, then fsync the directory so
 * the rename itself survives a crash. PATH is either the old file or the complete new one; on any
 * failure the temp file is removed, and after a write the temp files of writers of PATH that died
 * mid-write (their pid no longer exists) are removed too. Tensor names must be unique. Errors: BK_ERR_IO naming the path
 * and the system's reason. */
int bk_safetensors_write(const char *path, const bk_st_tensor *tensors, int n_tensors, const bk_st_meta *meta,
                         int n_meta, bk_error *err);

typedef struct bk_safetensors bk_safetensors;

/* Read and validate a whole file: a regular file (opened through util/file.h: a FIFO, a device or a
 * directory is refused by name, without blocking), header length within the file and at most
 * BK_ST_MAX_HEADER, valid JSON, every tensor F32 with offsets inside the data and matching its shape,
 * no overlaps. Errors name the path and what is wrong (BK_ERR_IO for unreadable or not a regular file,
 * BK_ERR_PARSE for malformed or truncated:
 * "PATH: truncated: tensor 'NAME' ends at byte E of the data, the file holds D data bytes"). */
int bk_safetensors_open(const char *path, bk_safetensors **out, bk_error *err);
/* The header alone, validated as bk_safetensors_open does (offsets against the file's size), without
 * reading the data: the tensors' `data` is NULL. For what only the metadata says (a checkpoint's step). */
int bk_safetensors_open_header(const char *path, bk_safetensors **out, bk_error *err);
void bk_safetensors_close(bk_safetensors *st);

int bk_safetensors_count(const bk_safetensors *st);
/* Tensor i in file order (by data offset); NULL when out of range. */
const bk_st_tensor *bk_safetensors_at(const bk_safetensors *st, int i);
/* The tensor called `name`, or NULL. */
const bk_st_tensor *bk_safetensors_find(const bk_safetensors *st, const char *name);
/* A __metadata__ value, or NULL. */
const char *bk_safetensors_meta(const bk_safetensors *st, const char *key);

/* "[2, 64]": a shape as messages show it (truncated to size). */
void bk_st_format_shape(char *buf, size_t size, const int64_t *shape, int ndim);

/* XXH64 (xxHash, 64-bit, https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md) of `len`
 * bytes with `seed`: the checksum biaskit stores per checkpoint tensor and per plugin file. Fast
 * (several GB/s in portable C) and well defined; it detects corruption, it is not a cryptographic
 * hash. */
uint64_t bk_xxh64(const void *data, size_t len, uint64_t seed);

#endif
