/* Evaluation at many lengths (the extrapolation curve): perplexity on non-overlapping chunks, every
 * token scored (the ALiBi / KERPLE protocol), or with a sliding window; and the loss at each position
 * averaged over chunks (KERPLE §5.5). Memory is one layer of activations for the chunks in flight:
 * no T x T matrix is kept, so lengths far beyond the training length just work. */
#ifndef BK_EVAL_H
#define BK_EVAL_H

#include "data/data.h"
#include "dist/dist.h"
#include "train/lm.h"
#include "util/output.h"

/* Chunks evaluated together: as many as fit in this many tokens (enough per forward to keep the matmuls
 * efficient), at least one. */
#define BK_EVAL_TOKENS_PER_BATCH 8192

typedef struct bk_eval_result {
    int32_t length;
    int64_t chunks;      /* windows evaluated */
    int64_t tokens;      /* tokens scored */
    double loss;         /* mean loss per scored token (nats) */
    double ppl;          /* exp(loss) */
    double *position_loss; /* length values: mean loss at each position (non-overlapping only), or NULL */
    int32_t batch;       /* windows per forward */
    size_t activation_bytes; /* what one forward of `batch` windows allocated (bk_gpt_activation_bytes) */
    int32_t *predictions; /* bk_eval_ex with predictions: windows x length ids, the most likely next token at
                            each position of each chunk (the lowest id on a tie); else NULL */
    double seconds;      /* wall time of this length's forwards (this process's share with N processes) */
    int64_t forwarded;   /* tokens run through the model: windows x length (sliding windows overlap) */
} bk_eval_result;

/* Evaluate `data` (at most max_tokens of it; 0 = all) at each length. stride = 0: non-overlapping
 * chunks of `length` tokens; stride > 0: windows of `length` advanced by `stride`, scoring the last
 * `stride` tokens of each (all tokens of the first). results[i] gets lengths[i]; free with
 * bk_eval_results_free. dist: the processes sharing the work (mpirun), or NULL for one; the results
 * are the same bits whatever their number (batch sums added in batch order). */
int bk_eval(bk_lm *lm, const bk_tokens *data, const int32_t *lengths, int n_lengths, int32_t stride,
            int64_t max_tokens, bk_dist *dist, bk_eval_result *results, bk_error *err);
/* bk_eval, also keeping each scored position's most likely next token when `predictions` (non-overlapping
 * chunks, one process, a backend whose memory is the host's: else BK_ERR_UNSUPPORTED). */
int bk_eval_ex(bk_lm *lm, const bk_tokens *data, const int32_t *lengths, int n_lengths, int32_t stride,
               int64_t max_tokens, int predictions, bk_dist *dist, bk_eval_result *results, bk_error *err);
void bk_eval_results_free(bk_eval_result *results, int n);

/* The files a command reads, which none of its outputs may replace (util/output.h). */
typedef struct bk_eval_inputs {
    bk_output_input *items;
    char **owned; /* the paths made here (the data paths read from the experiment's directory) */
    int n, n_owned;
} bk_eval_inputs;

/* Collects the inputs of a command on an experiment or a checkpoint: `source` (named `what`:
 * "checkpoint", "experiment file"), the shared object of every term's plugin, and, when `e` is not NULL
 * (the experiment of the source): the file experiment_file (not NULL: a checkpoint's, bk_lm_experiment_file)
 * where it still exists, and the
 * data the command reads or the experiment trains on: data[n_data] as given (--data), else e's [data]
 * paths and val_paths read from config_dir, with the names the data reader takes in a directory ([data]
 * extensions for text, .bin for shards). Free with bk_eval_inputs_free. */
int bk_eval_inputs_collect(bk_eval_inputs *in, const char *what, const char *source, const bk_term_set *terms,
                           const bk_experiment *e, const char *config_dir, const char *experiment_file,
                           const char *const *data, int n_data, bk_error *err);
/* The same for the checkpoint `source` that lm was loaded from: its experiment file, terms and data. */
int bk_eval_inputs_checkpoint(bk_eval_inputs *in, const char *source, const bk_lm *lm, const char *const *data,
                              int n_data, bk_error *err);
void bk_eval_inputs_free(bk_eval_inputs *in);

/* The --csv FILE and --plot FILE.png of a command (NULL: not given), with the FILE.gp, FILE.dat and FILE.pdf that
 * report/plot.h writes beside the image: each refused when it names one of inputs[n_inputs], and the
 * CSV when it is one of the plot's files (util/output.h). */
int bk_eval_check_outputs(const char *csv, const char *plot, const bk_output_input *inputs, int n_inputs,
                          bk_error *err);

#endif
