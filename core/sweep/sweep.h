/* A sweep: a grid of experiments (base x variant x corpus x grid point x seed) run end to end and
 * resumably by `biaskit sweep` (docs/sweeps.md).
 *
 * This part reads the sweep file, expands it into runs, resolves each run through the experiment
 * layer (so every engine key is validated, with errors naming the sweep file's line and column),
 * writes each run's experiment text, and reads and writes the run states (status.json) and the
 * sweep index (sweep.json). Running the runs (child processes) is the command's job:
 * core/cli/cmd_sweep.c. */
#ifndef BK_SWEEP_H
#define BK_SWEEP_H

#include "util/error.h"
#include "util/isolate.h"

#include <stddef.h>
#include <stdint.h>

#define BK_SWEEP_INDEX_FILE "sweep.json"
#define BK_SWEEP_STATUS_FILE "status.json"
#define BK_SWEEP_EXPERIMENT_FILE "experiment.toml"
#define BK_SWEEP_EVAL_FILE "eval.json"
#define BK_SWEEP_EVAL_SLIDING_FILE "eval-sliding.json"
#define BK_SWEEP_TRAIN_LOG "train.log"
#define BK_SWEEP_EVAL_LOG "eval.log"
#define BK_SWEEP_MAX_LENGTHS 64
#define BK_SWEEP_MAX_PASSKEY_DEPTHS 16
#define BK_SWEEP_PASSKEY_FILE "passkey.json" /* a run's passkey grid (biaskit passkey --json) */

/* The most strings in a [[variant]] eval_set, characters in them all, and bytes of their JSON array
 * (as status.json records it; quotes escaped it fits, and a longer one is refused naming the variant). */
#define BK_SWEEP_MAX_EVAL_SETS 16
#define BK_SWEEP_EVAL_SET_TEXT_MAX 256
#define BK_SWEEP_EVAL_SET_JSON_MAX 1024

/* The states of status.json, in the order of bk_run_state. */
#define BK_RUN_STATE_CHOICES "pending|training|evaluating|done|failed"
typedef enum bk_run_state {
    BK_RUN_PENDING = 0,
    BK_RUN_TRAINING = 1,
    BK_RUN_EVALUATING = 2,
    BK_RUN_DONE = 3,
    BK_RUN_FAILED = 4
} bk_run_state;

typedef struct bk_run_status {
    bk_run_state state;
    char error[BK_ERROR_MESSAGE_MAX]; /* "" when none */
    double train_seconds;           /* summed over the sessions that trained the run */
    double eval_seconds;
    /* the eval_set its evaluation used (status.json "eval_set"), as a JSON array of strings written
     * without spaces; "" when none: a done run whose variant's eval_set changed is evaluated again */
    char eval_set[BK_SWEEP_EVAL_SET_JSON_MAX];
} bk_run_status;

/* One run of the sweep, resolved. */
typedef struct bk_sweep_run {
    char *name;          /* <variant>-<corpus>-s<seed>[-<grid point>]: also its directory's name */
    char *dir;           /* <sweep dir>/<name>, absolute */
    const char *variant; /* names, borrowed from the sweep */
    const char *corpus;  /* without [[corpus]]: named from the data (corpus_owned), see bk_sweep_data_name */
    char *corpus_owned;
    int64_t seed;
    int n_grid;          /* the grid point: key and value text of each grid key */
    char **grid_keys;
    char **grid_values;
    char **sets;         /* every "key=value" the sweep applied to the base, in order */
    int n_sets;
    int n_common_sets;   /* the first ones: an inline base and [sweep] set, the same for every run */
    char **eval_sets;    /* the variant's eval_set: "key=value" given to its evaluation only (biaskit eval
                          * --set), in order; the training (text) is the same without them */
    int n_eval_sets;
    char *eval_set_json; /* the same as a JSON array (bk_run_status eval_set's form); "" when none */
    char *text;          /* the resolved experiment text (experiment.toml) */
    int64_t train_length;
    int64_t threads;     /* [run] threads of the resolved experiment (0 = every core) */
    char *invalid;       /* NULL, or why the run cannot train (a plugin refused its terms) */
} bk_sweep_run;

typedef struct bk_sweep {
    char *path;          /* the sweep file, absolute */
    char *dir;           /* the sweep file's directory, absolute */
    char *out_dir;       /* the sweep directory, absolute */
    char *base;          /* the base experiment file, absolute; NULL when the base is inline */
    int32_t lengths[BK_SWEEP_MAX_LENGTHS]; /* evaluation lengths */
    int n_lengths;
    int64_t sliding;     /* sliding-window stride; 0 = non-overlapping only */
    int64_t tokens;      /* evaluation tokens (0 = all) */
    /* passkey retrieval after the evaluation ([eval] passkey, passkey_depths, passkey_trials; biaskit
     * passkey): n_passkey 0 = none */
    int32_t passkey[BK_SWEEP_MAX_LENGTHS];
    int n_passkey;
    double passkey_depths[BK_SWEEP_MAX_PASSKEY_DEPTHS];
    int n_passkey_depths;
    int64_t passkey_trials;
    int64_t train_length; /* shared by every run */
    bk_sweep_run *runs;
    int n_runs;
    void *priv;          /* the parsed sweep file (names of runs point into it) */
} bk_sweep;

/* The time limit of the plugin check of one run's terms (below), in seconds, when no option gives one. */
#define BK_SWEEP_PLUGIN_TIMEOUT_S BK_ISOLATE_TIMEOUT_S

/* The most runs a sweep file may expand to. */
#define BK_SWEEP_MAX_RUNS 100000

typedef struct bk_sweep_load_options {
    const char *const *only;   /* check the plugins of the runs matching one of these globs only (n_only = 0: all) */
    int n_only;
    unsigned plugin_timeout_s; /* 0: BK_SWEEP_PLUGIN_TIMEOUT_S */
    int no_plugin_check;       /* 1: no plugin code runs, no child process (fuzz/fuzz_sweep.c) */
    int max_runs;              /* 0: BK_SWEEP_MAX_RUNS */
} bk_sweep_load_options;

/* Read `path`, expand it and resolve every run. Errors in the sweep file, in the base or in a
 * value the sweep gives to an engine key name FILE:LINE:COLUMN (and the run) and what was expected;
 * nothing is created or written. A sweep directory that exists and is not a directory (or cannot be
 * created under an ancestor that is not one) is an error naming [sweep] out_dir.
 *
 * Then the plugins check each selected run's terms as the training will (bk_terms_create), in a
 * child process (util/isolate.h) with a time limit: a plugin can crash, exit or hang there, which
 * fails the runs it was checked for, never the sweep. Runs that give the plugins the same model and
 * terms (the seeds and corpora of a variant) are checked once. A run whose plugins refuse their terms
 * (an unknown plugin, a bad plugin option) or crash, exit or hang is not an error here: its
 * `invalid` says why (naming the sweep file's line, the term and its plugin), and it fails alone
 * when run. `o` may be NULL (defaults). */
int bk_sweep_load_ex(const char *path, const bk_sweep_load_options *o, bk_sweep *out, bk_error *err);
/* bk_sweep_load_ex with the defaults: every run checked, BK_SWEEP_PLUGIN_TIMEOUT_S. */
int bk_sweep_load(const char *path, bk_sweep *out, bk_error *err);
void bk_sweep_free(bk_sweep *sw);

/* 1 when the run's name matches one of the shell globs `patterns` (fnmatch), or n == 0. */
int bk_sweep_run_selected(const bk_sweep_run *run, const char *const *patterns, int n);

/* The sweep directory's lock (BK_SWEEP_LOCK_FILE, flock): creates out_dir, then takes the lock for as
 * long as *fd stays open (bk_sweep_unlock closes it). A second sweep of the same directory fails at
 * once naming the directory and the pid of the sweep that holds it. */
#define BK_SWEEP_LOCK_FILE ".sweep.lock"
int bk_sweep_lock(const bk_sweep *sw, int *fd, bk_error *err);
void bk_sweep_unlock(int *fd);

/* Write <out_dir>/sweep.json (atomically: temporary file + rename), creating out_dir. */
int bk_sweep_write_index(const bk_sweep *sw, bk_error *err);

/* Create the run's directory and write experiment.toml when it differs (or is missing). When the
 * directory holds a checkpoint trained from a different experiment text, fails naming the run
 * and the file (the checkpoint would resume the old experiment). */
int bk_sweep_prepare_run(const bk_sweep_run *run, int has_checkpoint, bk_error *err);

/* status.json of a run: a missing file is state pending; a malformed one, or one that is not a regular
 * file (a FIFO, a device: never read), an error naming it. */
int bk_sweep_read_status(const bk_sweep_run *run, bk_run_status *st, bk_error *err);
int bk_sweep_write_status(const bk_sweep_run *run, const bk_run_status *st, bk_error *err);
const char *bk_run_state_name(bk_run_state state);

/* 1 when the evaluation recorded in `st` used the run's eval_set (both none, or the same strings). */
int bk_sweep_eval_set_current(const bk_sweep_run *run, const bk_run_status *st);

/* 1 when <run dir>/checkpoint.safetensors exists. */
int bk_sweep_has_checkpoint(const bk_sweep_run *run);

/* Runs of one resolved experiment (the same experiment.toml text: variants that differ only in their
 * eval_set, with the same corpus, seed and grid point) train the same checkpoint; the sweep trains one
 * and shares its training with the others. bk_sweep_trained_as: 1 when `from`'s directory holds a
 * checkpoint trained from `text` (its experiment.toml is `text`). bk_sweep_share_training: copies
 * `from`'s checkpoint and metrics.jsonl into `to`'s directory (prepared), each through a temporary
 * file and a rename; on an error `to` is left without a checkpoint (and trains itself). */
int bk_sweep_trained_as(const bk_sweep_run *from, const char *text);
int bk_sweep_share_training(const bk_sweep_run *from, const bk_sweep_run *to, bk_error *err);
/* first[i] (n_runs of them): the index of the first run of the sweep whose experiment text is run i's
 * (i when no run before it has that text). */
int bk_sweep_first_of_experiment(const bk_sweep *sw, int *first, bk_error *err);

/* The corpus part of a run's name when the sweep has no [[corpus]]: the basenames of the experiment's
 * [data] paths (a file's last extension dropped: "corpus.txt" -> "corpus"), joined by '+', characters
 * outside A-Z a-z 0-9 _ - . + as '_', at most 48 characters ("data" when nothing is left, "base" when
 * there are no paths). */
void bk_sweep_data_name(const char *const *paths, int n, char *out, size_t size);

/* The help text of `biaskit sweep` that describes the file format (shared by --help and the docs). */
extern const char bk_sweep_format_help[];

#endif
