/* Training data: token streams from text files (byte-level, vocab 256) or llm.c .bin shards
 * (uint16 GPT-2 tokens), a train/validation split, and a deterministic batch loader.
 *
 * llm.c shard format (write_datafile in llm.c's dev/data/data_common.py): a header of 256 int32
 * (little-endian): [0] = magic 20240520, [1] = version 1, [2] = number of tokens N; then N uint16
 * tokens, and nothing after them. */
#ifndef BK_DATA_H
#define BK_DATA_H

#include "data/split.h"
#include "util/error.h"

#include <stdint.h>

#define BK_SHARD_MAGIC 20240520
#define BK_SHARD_VERSION 1
#define BK_SHARD_HEADER_INTS 256
/* The name a shard has under a data directory: the reader takes the files ending so. */
#define BK_SHARD_EXTENSION ".bin"

typedef enum bk_data_format { BK_DATA_TEXT = 0, BK_DATA_SHARDS = 1 } bk_data_format;
/* names: BK_DATA_FORMAT_CHOICES in config/experiment.h */

/* What [data] says. Paths may be files or directories (walked recursively, entries sorted by name
 * so the order never depends on the file system). */
typedef struct bk_data_config {
    bk_data_format format;
    const char *const *paths;     /* training sources */
    int n_paths;
    const char *const *val_paths; /* validation sources; when n_val_paths == 0 the split is by fraction; the
                                   * same array as paths (`eval --data`): both sides read the same files */
    int n_val_paths;
    double val_fraction;          /* validation's share without val_paths (0 < f < 1), as `split` says */
    const char *const *extensions;/* text: only files whose name ends with one of these (e.g. ".h"); none = all */
    int n_extensions;
    int64_t max_bytes;            /* text: stop reading after this many bytes in total (0 = no limit) */
    int split;                    /* without val_paths: BK_SPLIT_DOCUMENTS (0, the default) or BK_SPLIT_TAIL */
    uint64_t split_seed;          /* the documents' shuffle (data/split.h) */
    bk_data_split *split_out;     /* when not NULL, bk_data_load describes its split there (free with
                                   * bk_data_split_free) */
} bk_data_config;

/* A token stream. `name` says where it came from, for messages. */
typedef struct bk_tokens {
    uint16_t *tokens;
    int64_t count;
    int n_files;
    char name[256];
} bk_tokens;

/* Load the training and validation streams. Errors (each names the file or path): a path that does
 * not exist; no files found (with the extension filter); an empty corpus; a shard with a bad magic,
 * version, fewer tokens than its header says ("truncated") or more (the size must match the header);
 * a token >= vocab; a validation split
 * that leaves fewer than `min_tokens` tokens on either side. */
int bk_data_load(const bk_data_config *cfg, int32_t vocab, int64_t min_tokens, bk_tokens *train, bk_tokens *val,
                 bk_error *err);
void bk_tokens_free(bk_tokens *t);

/* The split bk_data_load would make, from the files' sizes, without reading them (`sweep --dry-run`):
 * the same listing and checks of the paths, no token read. */
int bk_data_plan(const bk_data_config *cfg, bk_data_split *out, bk_error *err);

/* Read one file's contents held in memory exactly as bk_data_load reads a file (the fuzzers and tests
 * use it): the bytes of a text file (at most max_bytes when > 0) or one llm.c shard, whose size must
 * match its header. `name` stands for the file in messages. out->tokens is malloc'd (NULL when there
 * are none): free it with bk_tokens_free. */
int bk_data_read_memory(bk_data_format format, const void *bytes, size_t size, const char *name, int32_t vocab,
                        int64_t max_bytes, bk_tokens *out, bk_error *err);

/* Batches of B windows of T+1 tokens (inputs = first T, targets = last T). The stream is cut into
 * non-overlapping windows starting at multiples of T; each epoch visits every window once in an
 * order shuffled from (seed, epoch) with SplitMix64 + Fisher-Yates. The cursor (epoch, index) is
 * the loader's whole state, saved in checkpoints. */
typedef struct bk_loader {
    const bk_tokens *data;
    int B, T;
    uint64_t seed;
    int shuffle;
    int64_t n_windows;
    int64_t *order;   /* the current epoch's window order */
    int64_t epoch;
    int64_t index;    /* next position in `order` */
} bk_loader;

/* Fails when the stream has fewer than T+1 tokens. shuffle = 0 keeps windows in stream order. */
int bk_loader_init(bk_loader *ld, const bk_tokens *data, int B, int T, uint64_t seed, int shuffle, bk_error *err);
void bk_loader_free(bk_loader *ld);
/* Fill inputs and targets (B*T int32 each) with the next B windows, wrapping into a new epoch. */
void bk_loader_next(bk_loader *ld, int32_t *inputs, int32_t *targets);
/* Restore a saved cursor (the order of that epoch is recomputed). */
int bk_loader_seek(bk_loader *ld, int64_t epoch, int64_t index, bk_error *err);

#endif
