/* The train/validation split of a corpus given without val_paths ([data] split, split_seed), and what each
 * side holds, for the banner of `train`, `sweep --dry-run`, the run directory's split.json and the report.
 *
 *   documents (the default): the files (documents) are shuffled by split_seed (Fisher-Yates on a
 *       SplitMix64 stream) and taken in that order into validation until it holds val_fraction of the
 *       corpus (counted in bytes for text, tokens for shards; a document that would leave validation further
 *       from its share than it is is passed over, and when every one would, the smallest is taken: so
 *       validation holds at most twice its share); each side is
 *       read in the corpus's own (sorted) order. The seed is not the run's: every run of a sweep, whatever
 *       its seed, sees the same validation documents. With max_bytes the documents are those the limit
 *       reaches in sorted order, the last one cut. A corpus of one document cannot be split so: its tail is
 *       taken, and the split says why.
 *   tail: the last val_fraction of the token stream, the files in sorted order (the alphabetical tail of a
 *       directory: what earlier versions did, kept on request).
 *   paths: [data] val_paths named the validation files. */
#ifndef BK_DATA_SPLIT_H
#define BK_DATA_SPLIT_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

typedef enum bk_split_mode { BK_SPLIT_DOCUMENTS = 0, BK_SPLIT_TAIL = 1, BK_SPLIT_PATHS = 2 } bk_split_mode;
/* names of the first two: BK_DATA_SPLIT_CHOICES in config/experiment.h */

/* What a split holds, from the files' sizes (bk_data_plan / bk_data_load). Side 0 is training, 1 validation. */
typedef struct bk_data_split {
    bk_split_mode mode;      /* as done: BK_SPLIT_TAIL also when documents were asked but impossible (note) */
    uint64_t seed;           /* split_seed (documents) */
    double fraction;         /* val_fraction asked */
    int text;                /* units are bytes (text) or tokens (shards) */
    char note[256];          /* why the tail was taken though documents were asked; "" otherwise */
    int files[2];            /* files with something on each side (tail: the file cut is on both) */
    int64_t units[2];        /* bytes or tokens on each side */
    int n_val;               /* validation's files, in corpus order: the documents, val_paths' files, or the
                              * files the tail covers (the first of them in part) */
    char **val_files;
    int64_t *val_units;      /* of each: what validation holds of it */
    int first_part;          /* tail: validation holds only the end of its first file (training the rest) */
} bk_data_split;

void bk_data_split_free(bk_data_split *s);

/* Which of n documents of units[i] > 0 go to validation (val[i] = 1), as described above; at least one
 * document stays for training (n >= 2). */
void bk_split_choose(const int64_t *units, int n, double fraction, uint64_t seed, unsigned char *val);

/* One line without a newline: "validation: 3 of 40 documents by split_seed 0, 51,200 bytes (5.1%):
 * a.h, b.h, c.h" (at most max_files names, then "and N more"), or for the tail "validation: the last 5%
 * of the stream, 51,200 bytes, in 2 files: y.h (part), z.h", with the note when there is one. */
void bk_data_split_describe(const bk_data_split *s, int max_files, char *out, size_t size);

/* The split as JSON to `path` (written atomically): {"split": "documents", "seed": 0, "fraction": 0.05,
 * "unit": "bytes", "training": {"files": N, "units": N}, "validation": {"files": N, "units": N,
 * "first_part": false, "list": [{"file": "...", "units": N}, ...]}, "note": "..."}. */
int bk_data_split_write_json(const bk_data_split *s, const char *path, bk_error *err);

#endif
