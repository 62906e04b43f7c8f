#define _POSIX_C_SOURCE 200809L /* strdup */
#include "eval/eval.h"
#include "util/clock.h"

#include "util/path.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Non-overlapping chunks (stride 0) or sliding windows of length L, in batches of B windows. Batch k is
 * computed by process k mod N; each batch's loss sum (and, for chunks, its per-position sums) is added
 * in order within the batch, and the batches' sums are added in batch order on every process, so the
 * totals are the same bits whatever N. */
static int eval_length(bk_lm *lm, const bk_tokens *data, int64_t n_tokens, int32_t L, int32_t stride,
                       int predictions, bk_dist *dist, bk_eval_result *r, bk_error *err)
{
    memset(r, 0, sizeof *r);
    r->length = L;
    if (n_tokens < (int64_t)L + 1)
        return bk_fail(err, BK_ERR_INVALID, "length %d: the evaluation data (%s) has %lld tokens, fewer than %d",
                       (int)L, data->name, (long long)n_tokens, (int)L + 1);
    /* window starts and the first position scored in each */
    int64_t n_windows = stride ? (n_tokens - 1 - L) / stride + 1 : (n_tokens - 1) / L;
    int64_t step = stride ? stride : L;
    int B = BK_EVAL_TOKENS_PER_BATCH / L > 1 ? BK_EVAL_TOKENS_PER_BATCH / L : 1;
    if (B > n_windows)
        B = (int)n_windows;
    int64_t n_batches = (n_windows + B - 1) / B;
    const bk_gpt *m = &lm->gpt;
    r->batch = B;
    r->activation_bytes = bk_gpt_model_activation_bytes(m, B, L, 0);
    /* per batch: its loss sum, then (chunks) its sum at each position */
    size_t rec = 1 + (stride ? 0 : (size_t)L), per_rank = (size_t)n_batches * rec;
    int32_t *in = malloc((size_t)B * L * sizeof *in), *tg = malloc((size_t)B * L * sizeof *tg);
    double *mine = calloc(per_rank, sizeof *mine), *all = dist->size > 1 ? malloc(per_rank * (size_t)dist->size * sizeof *all) : mine;
    int rc = BK_OK;
    if (!in || !tg || !mine || !all)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory evaluating length %d", (int)L);
    int64_t scored = 0;
    if (!rc && predictions && !(r->predictions = malloc((size_t)n_windows * L * sizeof *r->predictions)))
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the predictions at length %d", (int)L);
    const double start = bk_now_seconds();
    for (int64_t k = 0; k < n_batches && !rc; k++) {
        int64_t w0 = k * B;
        int nb = n_windows - w0 < B ? (int)(n_windows - w0) : B;
        for (int b = 0; b < nb; b++)
            scored += L - (stride && w0 + b > 0 ? L - stride : 0);
        if (k % dist->size != dist->rank)
            continue;
        for (int b = 0; b < nb; b++) {
            const uint16_t *src = data->tokens + (w0 + b) * step;
            for (int32_t t = 0; t < L; t++)
                in[(size_t)b * L + t] = src[t], tg[(size_t)b * L + t] = src[t + 1];
        }
        lm->gpt.argmax = r->predictions ? r->predictions + (size_t)w0 * L : NULL;
        rc = bk_gpt_forward(&lm->gpt, in, tg, nb, L, 0, err);
        lm->gpt.argmax = NULL;
        if (rc)
            break;
        double *sums = mine + (size_t)k * rec, total = 0.0;
        for (int b = 0; b < nb; b++) {
            int32_t first = stride && w0 + b > 0 ? L - stride : 0;
            for (int32_t t = first; t < L; t++) {
                double loss = lm->gpt.losses[(size_t)b * L + t];
                total += loss;
                if (!stride)
                    sums[1 + t] += loss;
            }
        }
        sums[0] = total;
    }
    r->seconds = bk_now_seconds() - start;
    r->forwarded = n_windows * (int64_t)L;
    free(in), free(tg);
    if (!(rc = bk_dist_agree(dist, rc, err)) && dist->size > 1)
        rc = bk_dist_allgather(dist, mine, per_rank, all, err);
    double total = 0.0, *pos = rc || stride ? NULL : calloc((size_t)L, sizeof *pos);
    if (!rc && !stride && !pos)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory evaluating length %d", (int)L);
    for (int64_t k = 0; k < n_batches && !rc; k++) {
        const double *sums = all + (size_t)(k % dist->size) * per_rank + (size_t)k * rec;
        total += sums[0];
        for (int32_t t = 0; pos && t < L; t++)
            pos[t] += sums[1 + t];
    }
    if (all != mine)
        free(all);
    free(mine);
    if (rc) {
        free(pos);
        return rc;
    }
    r->chunks = n_windows;
    r->tokens = scored;
    r->loss = total / (double)scored;
    r->ppl = exp(r->loss);
    if (pos) {
        for (int32_t t = 0; t < L; t++)
            pos[t] /= (double)n_windows;
        r->position_loss = pos;
    }
    return BK_OK;
}

int bk_eval(bk_lm *lm, const bk_tokens *data, const int32_t *lengths, int n_lengths, int32_t stride,
            int64_t max_tokens, bk_dist *dist, bk_eval_result *results, bk_error *err)
{
    return bk_eval_ex(lm, data, lengths, n_lengths, stride, max_tokens, 0, dist, results, err);
}

int bk_eval_ex(bk_lm *lm, const bk_tokens *data, const int32_t *lengths, int n_lengths, int32_t stride,
               int64_t max_tokens, int predictions, bk_dist *dist, bk_eval_result *results, bk_error *err)
{
    bk_dist one;
    bk_dist_single(&one);
    if (!dist)
        dist = &one;
    memset(results, 0, (size_t)n_lengths * sizeof *results);
    if (predictions && (stride || dist->size > 1 || (lm->be && lm->be->on_device)))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "the predictions are kept for non-overlapping chunks, by one "
                       "process, on the CPU (%s)", stride ? "not with --sliding" : dist->size > 1 ? "not under mpirun"
                                                                                            : "not on a device");
    int32_t longest = 0;
    for (int i = 0; i < n_lengths; i++) {
        if (lengths[i] < 1)
            return bk_fail(err, BK_ERR_INVALID, "evaluation length %d: expected a positive length", (int)lengths[i]);
        if (stride && stride > lengths[i])
            return bk_fail(err, BK_ERR_INVALID, "sliding stride %d is longer than the length %d", (int)stride,
                           (int)lengths[i]);
        longest = lengths[i] > longest ? lengths[i] : longest;
    }
    lm->bias.training = 0; /* the plugins' context says evaluation (e.g. logn's form = "qwen") */
    int rc = bk_bias_forward(&lm->bias, longest, err);
    int64_t n = max_tokens > 0 && max_tokens < data->count ? max_tokens : data->count;
    for (int i = 0; i < n_lengths && !rc; i++)
        if (!(rc = eval_length(lm, data, n, lengths[i], stride, predictions, dist, &results[i], err)) &&
            !isfinite(results[i].loss))
            rc = bk_fail(err, BK_ERR_INVALID, "evaluation at length %d: the loss is %g: the model is not finite (its "
                         "parameters? see biaskit params); no perplexity is made from it", (int)lengths[i],
                         results[i].loss);
    if (rc)
        bk_eval_results_free(results, n_lengths);
    return rc;
}

void bk_eval_results_free(bk_eval_result *results, int n)
{
    for (int i = 0; i < n; i++) {
        free(results[i].position_loss);
        results[i].position_loss = NULL;
        free(results[i].predictions);
        results[i].predictions = NULL;
    }
}

/* The data reader's names for shards (data/data.h). */
static const char *const shard_extensions[] = {BK_SHARD_EXTENSION};

/* One more path of the inputs, copied (in->owned keeps it). */
static int add_owned(bk_eval_inputs *in, const char *what, const char *path, const char *const *ext, int n_ext,
                     const char *source, bk_error *err)
{
    if (!(in->owned[in->n_owned] = strdup(path)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory listing the inputs of '%s'", source);
    in->items[in->n++] = (bk_output_input){what, in->owned[in->n_owned++], ext, n_ext};
    return BK_OK;
}

int bk_eval_inputs_collect(bk_eval_inputs *in, const char *what, const char *source, const bk_term_set *terms,
                           const bk_experiment *e, const char *config_dir, const char *experiment_file,
                           const char *const *data, int n_data, bk_error *err)
{
    memset(in, 0, sizeof *in);
    int n_exp_data = e && n_data == 0 ? e->data.paths.n + e->data.val_paths.n : 0;
    int cap = 2 + (terms ? terms->n : 0) + (e ? n_data + n_exp_data : 0);
    in->items = calloc((size_t)cap, sizeof *in->items);
    in->owned = calloc((size_t)n_exp_data + 1, sizeof *in->owned);
    if (!in->items || !in->owned) {
        bk_eval_inputs_free(in);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory listing the inputs of '%s'", source);
    }
    in->items[in->n++] = (bk_output_input){what, source, NULL, 0};
    int rc = BK_OK;
    /* a checkpoint's experiment file, where it still is: an input too (its text is in the checkpoint, but a
     * user who names it as an output means another file) */
    if (experiment_file && strcmp(experiment_file, source) != 0 && access(experiment_file, F_OK) == 0)
        rc = add_owned(in, "experiment file", experiment_file, NULL, 0, source, err);
    for (int i = 0; terms && i < terms->n; i++)
        if (terms->terms[i].plugin && terms->terms[i].plugin->path)
            in->items[in->n++] = (bk_output_input){"plugin", terms->terms[i].plugin->path, NULL, 0};
    if (!e || rc) {
        if (rc)
            bk_eval_inputs_free(in);
        return rc;
    }
    const int text = e->data.format == BK_DATA_TEXT;
    const char *const *ext = text ? e->data.extensions.items : shard_extensions;
    const int n_ext = text ? e->data.extensions.n : 1;
    for (int i = 0; i < n_data; i++)
        in->items[in->n++] = (bk_output_input){"data path", data[i], ext, n_ext};
    for (int i = 0; i < n_exp_data && !rc; i++) {
        const char *p = i < e->data.paths.n ? e->data.paths.items[i] : e->data.val_paths.items[i - e->data.paths.n];
        char buf[4096];
        if (!(rc = bk_path_resolve(config_dir, p, buf, sizeof buf, err)))
            rc = add_owned(in, "data path", buf, ext, n_ext, source, err);
    }
    if (rc)
        bk_eval_inputs_free(in);
    return rc;
}

int bk_eval_inputs_checkpoint(bk_eval_inputs *in, const char *source, const bk_lm *lm, const char *const *data,
                              int n_data, bk_error *err)
{
    char file[4096];
    int rc = bk_lm_experiment_file(lm, file, sizeof file, err);
    return rc ? rc
              : bk_eval_inputs_collect(in, "checkpoint", source, &lm->terms, &lm->exp, lm->config_dir, file, data,
                                       n_data, err);
}

void bk_eval_inputs_free(bk_eval_inputs *in)
{
    for (int i = 0; in->owned && i < in->n_owned; i++)
        free(in->owned[i]);
    free(in->owned), free(in->items);
    memset(in, 0, sizeof *in);
}

int bk_eval_check_outputs(const char *csv, const char *plot, const bk_output_input *inputs, int n_inputs,
                          bk_error *err)
{
    int rc = csv ? bk_output_check("--csv", csv, inputs, n_inputs, err) : BK_OK;
    if (rc || !plot)
        return rc;
    size_t stem = strlen(plot) > 4 ? strlen(plot) - 4 : 0; /* without ".png" (the commands require it) */
    char files[4][4200]; /* the image and what report/plot.h writes beside it */
    snprintf(files[0], sizeof files[0], "%s", plot);
    snprintf(files[1], sizeof files[1], "%.*s.gp", (int)stem, plot);
    snprintf(files[2], sizeof files[2], "%.*s.dat", (int)stem, plot);
    snprintf(files[3], sizeof files[3], "%.*s.pdf", (int)stem, plot);
    for (int k = 0; k < 4 && !rc; k++) {
        rc = k ? bk_output_check_beside("--plot", plot, files[k], inputs, n_inputs, err)
               : bk_output_check("--plot", plot, inputs, n_inputs, err);
        const char *flags[2] = {"--csv", "--plot"}, *paths[2] = {csv, files[k]};
        if (!rc && bk_output_check_distinct(flags, paths, 2, err))
            rc = k ? bk_fail(err, BK_ERR_USAGE, "--plot '%s' writes '%s', which is the file of --csv '%s'; give each "
                             "output its own file", plot, files[k], csv)
                   : err->code;
    }
    return rc;
}
