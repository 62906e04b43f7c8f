/* What the checkpoint's files share (internal to core/train): checkpoint.c (save, load, the rules of a
 * reopened run's metadata), checkpoint_io.c (the stored tensors, their checksums, the seal) and
 * checkpoint_records.c (the records of each term's plugin and optimizer groups, compared on load). */
#ifndef BK_TRAIN_CHECKPOINT_INTERNAL_H
#define BK_TRAIN_CHECKPOINT_INTERNAL_H

#include "io/safetensors.h"
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <stdint.h>

#define BK_CKPT_CHECKSUM_NAME "xxh64"
#define BK_CKPT_META_KEY "biaskit"
#define BK_CKPT_SEAL_KEY "biaskit_xxh64" /* format 3: the XXH64 of the BK_CKPT_META_KEY text (bk_checkpoint_seal) */
/* The metadata's record of the checkpoint a training started from (train --init, train/init.h). */
#define BK_CKPT_INIT_KEY "init"
/* The model's tokenizer: its canonical tokenizer.json text under this __metadata__ key, and its XXH64 under
 * this key + "_xxh64" in the BK_CKPT_META_KEY object (so the seal covers it). */
#define BK_CKPT_TOKENIZER_KEY "tokenizer"

/* One stored tensor (its adam.m. / adam.v. twins have the same layout): for each of `copies` copies,
 * `count` floats of optimizer group `group` starting at c * stride + offset. */
typedef struct bk_ckpt_slot {
    char name[192];
    int ndim;
    int64_t shape[BK_ST_MAX_DIMS];
    int group;
    int64_t copies, stride, offset, count;
} bk_ckpt_slot;

/* ---- checkpoint_io.c ---- */

/* Every stored tensor of the model registered in `opt`, in optimizer order (*out: free it). */
int bk_ckpt_build_slots(const bk_lm *lm, const bk_adamw *opt, bk_ckpt_slot **out, int *n_out, bk_error *err);
/* The host array `which` (0 the parameters, 1 and 2 AdamW's moments) of an optimizer group. */
float *bk_ckpt_group_array(const bk_param_group *g, int which);
/* The stored names' prefixes of those arrays: "", "adam.m.", "adam.v.". */
extern const char *const bk_ckpt_array_prefix[3];
/* v as 16 lowercase hex digits. */
void bk_ckpt_hex64(uint64_t v, char out[17]);
/* Every tensor of the file against its recorded checksum (unless `hash` is 0: --no-verify), and every
 * recorded checksum against a tensor. */
int bk_ckpt_verify_checksums(const char *path, const bk_safetensors *st, const cJSON *meta, int hash, bk_error *err);
/* Copies stored tensor `s` (array `which`) into its optimizer group. */
int bk_ckpt_read_slot(const bk_safetensors *st, const char *path, const bk_ckpt_slot *s, int which, bk_adamw *opt,
                      bk_error *err);
/* 1 when file tensor `name` is one of the model's stored tensors (or a moment of one). */
int bk_ckpt_known_tensor(const char *name, const bk_ckpt_slot *slots, int n);

/* ---- checkpoint.c ---- */

/* The tokenizer stored in st (the file at `path`, whose verified metadata is `meta`), its text checked
 * against the recorded checksum; *out NULL when there is none. */
int bk_ckpt_stored_tokenizer(const char *path, const bk_safetensors *st, const cJSON *meta, bk_bpe **out,
                             bk_error *err);

/* ---- checkpoint_records.c ---- */

/* The records of each term's plugin (file, version, checksums of its declarations and of its file). */
cJSON *bk_ckpt_plugin_records(const bk_lm *lm);
/* The records of each term's optimizer groups (lr_scale, weight_decay per tensor); *nomem on failure. */
cJSON *bk_ckpt_group_records(const bk_lm *lm, int *nomem);
/* A difference from the records: a warning (o->warn, else stderr), or under o->strict an error. */
int bk_ckpt_warn_unless_strict(const bk_checkpoint_options *o, int code, const char *line, const char *hint,
                               bk_error *err);
/* The loaded terms' plugins and optimizer groups against their records. */
int bk_ckpt_compare_plugins(const char *path, const cJSON *records, const bk_lm *lm, const bk_checkpoint_options *o,
                            bk_error *err);
int bk_ckpt_compare_groups(const char *path, const cJSON *records, const bk_lm *lm, const bk_checkpoint_options *o,
                           bk_error *err);

#endif
