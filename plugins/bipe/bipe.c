/* BiPE as a biaskit plugin: the `segment` capability (token ids -> segment index and position inside
 * the segment) and the `embed` capability (the learned intra-segment absolute embedding, added at the
 * input and reset at every segment). The inter-segment encoding is any other term on the segment
 * stream: ALiBi with slope_scale = 96 (BiPE-ALiBi), RoPE (BiPE-RoPE), KERPLE, MEP, ...
 *
 * Delimiters: `delimiters` lists one-byte strings for byte-level text (vocab 256; "." and "\n" by
 * default, "=" for arithmetic); `delimiter_ids` lists token ids instead (tokenised shards).
 * `semantics`: "paper" = every delimiter closes its segment (§3.1: full stop and newline); "code" =
 * what the released checkpoints do (Llama tokens 869 '▁.' and 13 newline): a newline always closes,
 * another delimiter byte only right after a space. With delimiter_ids the ids are taken as given. */
#include "../ape/ape_math.h"
#include "bipe_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef BIASKIT_WITH_CUDA
#include "../ape/ape_cuda.h"
#endif

#define BIPE_MAX_DELIMITERS 64
#define BIPE_NEWLINE 10
#define BIPE_SPACE 32

typedef struct bipe {
    const biaskit_services *svc;
    int32_t vocab;
    int32_t dim;
    int code_semantics;
    int by_id;        /* delimiter_ids given: taken as they are under both semantics (README.md) */
    int32_t n_delims;
    int32_t delims[BIPE_MAX_DELIMITERS];
    int intra;        /* the learned intra-segment embedding is on */
    int32_t rows;     /* its table rows; positions past them read the last row */
    double init_std;
    int64_t *device_runs; /* CUDA builds: scratch of embed_backward_cuda */
    int64_t device_runs_capacity;
} bipe;

static const biaskit_option options[] = {
    BIASKIT_OPTION_STRING_ARRAY("delimiters", "one-byte strings that close a segment (default [\".\", \"\\n\"]; \"=\" for arithmetic)"),
    BIASKIT_OPTION_DOUBLE_ARRAY("delimiter_ids", "token ids that close a segment, instead of delimiters (tokenised shards)"),
    BIASKIT_OPTION_CHOICE("semantics", "paper", "paper|code",
                          "paper: every delimiter closes; code: newline always, others only after a space (released models)"),
    BIASKIT_OPTION_BOOL("intra_embedding", 1, "add the learned intra-segment position embedding at the input"),
    BIASKIT_OPTION_INT("max_position", 0, "rows of the intra-segment embedding (0 = the training length)"),
    BIASKIT_OPTION_DOUBLE("init_std", 0.02, "standard deviation of the initial intra-segment embedding"),
};

static void destroy(void *inst)
{
#ifdef BIASKIT_WITH_CUDA
    if (inst)
        bk_ape_cuda_release(((bipe *)inst)->device_runs);
#endif
    free(inst);
}

static int read_delimiters(bipe *b, const biaskit_services *svc, const biaskit_config *cfg, biaskit_error *err)
{
    int rc;
    if (svc->is_set(cfg, "delimiters") && svc->is_set(cfg, "delimiter_ids"))
        return svc->config_error(cfg, "delimiter_ids", err, "'delimiters' and 'delimiter_ids' exclude each other; set one");
    if (svc->is_set(cfg, "delimiter_ids")) {
        b->by_id = 1;
        double ids[BIPE_MAX_DELIMITERS];
        if ((rc = svc->get_double_array(cfg, "delimiter_ids", ids, BIPE_MAX_DELIMITERS, &b->n_delims, err)))
            return rc;
        if (b->n_delims == 0)
            return svc->config_error(cfg, "delimiter_ids", err, "expected at least one token id");
        for (int32_t i = 0; i < b->n_delims; i++) {
            if (!(ids[i] >= 0 && ids[i] < b->vocab && ids[i] == floor(ids[i])))
                return svc->config_error(cfg, "delimiter_ids", err, "id %d: expected a whole token id in 0 .. %d, got %g",
                                         (int)i, (int)b->vocab - 1, ids[i]);
            b->delims[i] = (int32_t)ids[i];
        }
        return BIASKIT_OK;
    }
    if (b->vocab > 256 && !svc->is_set(cfg, "delimiters"))
        return svc->config_error(cfg, "delimiter_ids", err,
                                 "the vocabulary has %d tokens, so delimiters are not bytes: give their token ids in "
                                 "delimiter_ids",
                                 (int)b->vocab);
    const char *text[BIPE_MAX_DELIMITERS];
    if (svc->is_set(cfg, "delimiters")) {
        if ((rc = svc->get_string_array(cfg, "delimiters", text, BIPE_MAX_DELIMITERS, &b->n_delims, err)))
            return rc;
        if (b->n_delims == 0)
            return svc->config_error(cfg, "delimiters", err, "expected at least one delimiter");
    } else {
        text[0] = ".", text[1] = "\n";
        b->n_delims = 2;
    }
    for (int32_t i = 0; i < b->n_delims; i++) {
        if (strlen(text[i]) != 1)
            return svc->config_error(cfg, "delimiters", err,
                                     "delimiter %d: expected a one-byte string (a byte-level token), got \"%s\"", (int)i,
                                     text[i]);
        b->delims[i] = (unsigned char)text[i][0];
        if (b->delims[i] >= b->vocab)
            return svc->config_error(cfg, "delimiters", err, "delimiter %d: byte %d is outside the vocabulary of %d",
                                     (int)i, (int)b->delims[i], (int)b->vocab);
    }
    return BIASKIT_OK;
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    bipe *b = calloc(1, sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    b->svc = svc;
    b->vocab = geo->vocab_size;
    b->dim = geo->d_model;
    const char *semantics;
    int64_t rows;
    int rc;
    if ((rc = read_delimiters(b, svc, cfg, err)) || (rc = svc->get_string(cfg, "semantics", &semantics, err)) ||
        (rc = svc->get_bool(cfg, "intra_embedding", &b->intra, err)) ||
        (rc = svc->get_int(cfg, "max_position", &rows, err)) || (rc = svc->get_double(cfg, "init_std", &b->init_std, err))) {
        free(b);
        return rc;
    }
    b->code_semantics = strcmp(semantics, "code") == 0;
    if (rows < 0 || rows > (1 << 24)) {
        free(b);
        return svc->config_error(cfg, "max_position", err, "expected 0 (the training length) or 1 .. 16777216, got %lld",
                                 (long long)rows);
    }
    b->rows = rows ? (int32_t)rows : geo->train_length;
    if (b->rows < 1)
        rc = svc->config_error(cfg, "max_position", err, "expected at least one row (the training length is %d)",
                               (int)geo->train_length);
    else if (!isfinite(b->init_std) || b->init_std < 0.0)
        rc = svc->config_error(cfg, "init_std", err, "expected a finite standard deviation >= 0, got %g", b->init_std);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b;
    return BIASKIT_OK;
}

static int is_delimiter(const bipe *b, int32_t token)
{
    for (int32_t i = 0; i < b->n_delims; i++)
        if (b->delims[i] == token)
            return 1;
    return 0;
}

static int segment(const void *inst, const int32_t *tokens, int64_t count, int32_t *segment_index,
                   int32_t *segment_position, biaskit_error *err)
{
    (void)err;
    const bipe *b = inst;
    int32_t seg = 0, pos = 0;
    for (int64_t n = 0; n < count; n++) {
        int closes = is_delimiter(b, tokens[n]);
        if (closes && b->code_semantics && !b->by_id && tokens[n] != BIPE_NEWLINE)
            closes = n > 0 && tokens[n - 1] == BIPE_SPACE; /* Llama's '▁.' is a period after a space */
        bk_bipe_step(closes, &seg, &pos, &segment_index[n], &segment_position[n]);
    }
    return BIASKIT_OK;
}

static int64_t param_count(const void *inst)
{
    const bipe *b = inst;
    return b->intra ? (int64_t)b->rows * b->dim : 0;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const bipe *b = inst;
    bk_ape_learned_init(theta, param_count(inst), b->init_std, seed);
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const bipe *b = inst;
    if (!b->intra)
        return 0;
    if (capacity >= 1)
        out[0] = (biaskit_tensor_info){"intra", 0, b->rows, b->dim};
    return 1;
}

static int embed(const void *inst, const float *theta, const int32_t *positions, int64_t count, float *out,
                 biaskit_error *err)
{
    (void)err;
    const bipe *b = inst;
    if (b->intra)
        bk_ape_learned_embed(theta, b->rows, b->dim, positions, count, out);
    return BIASKIT_OK;
}

static int embed_backward(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                          const float *dout, float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const bipe *b = inst;
    if (b->intra)
        bk_ape_learned_backward(b->rows, b->dim, positions, count, dout, dtheta);
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int embed_cuda(const void *inst, const float *theta, const int32_t *positions, int64_t count, float *out,
                      void *stream, biaskit_error *err)
{
    const bipe *b = inst;
    if (!b->intra)
        return BIASKIT_OK;
    if (!theta)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "expected %lld parameters (theta), got NULL",
                             (long long)param_count(inst));
    return bk_ape_embed_cuda(b->svc, theta, b->rows, 0.0, 0.0, b->dim, positions, count, out, stream, err);
}

static int embed_backward_cuda(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                               const float *dout, float *dtheta, void *stream, biaskit_error *err)
{
    (void)theta;
    bipe *b = (bipe *)inst; /* the device scratch is a cache */
    if (!b->intra)
        return BIASKIT_OK;
    return bk_ape_embed_backward_cuda(b->svc, b->rows, b->dim, positions, count, dout, dtheta, &b->device_runs,
                                      &b->device_runs_capacity, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "bipe",
    .version = "1.0.0",
    .summary = "BiPE: segments at delimiters + learned intra-segment embedding; pair with a segment-stream term",
    .reference = "He et al., Two Stones Hit One Bird: Bilevel Positional Encoding for Better Length Extrapolation, ICML 2024",
    .capabilities = BIASKIT_CAP_SEGMENT | BIASKIT_CAP_EMBED,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .segment = segment,
    .embed = embed,
    .embed_backward = embed_backward,
#ifdef BIASKIT_WITH_CUDA
    .embed_cuda = embed_cuda,
    .embed_backward_cuda = embed_backward_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
