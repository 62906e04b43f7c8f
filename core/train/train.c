#define _XOPEN_SOURCE 700 /* POSIX 2008 with sigaltstack and SA_ONSTACK (the crash report) */
#include "train/train.h"
#include "util/clock.h"

#include "data/data.h"
#include "train/checkpoint.h"
#include "train/init.h"
#include "train/reopen.h"
#include "train/lm.h"
#include "train/rundir.h"
#include "cpu/gemm.h"
#include "io/safetensors.h" /* bk_xxh64 */
#include "util/blas.h"
#include "util/number.h"
#include "util/sigsafe.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The signal that asked the training to stop (0: none): SIGINT, SIGTERM or SIGHUP, each handled as
 * Ctrl-C is (a checkpoint, then the exit status 128 + the signal). Schedulers, kill, systemd and
 * Slurm's time limit send SIGTERM; a closed terminal sends SIGHUP. */
static volatile sig_atomic_t interrupted;
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_STOP_SIGNALS ((int)(sizeof stop_signals / sizeof stop_signals[0]))

static void on_interrupt(int sig)
{
    if (!interrupted)
        interrupted = sig;
}

/* ------------------------------------------------------------------------------------------------
 * A crash during the step loop (tests/test_misbehave.sh). A fatal signal (a plugin writing through a bad
 * pointer, say) cannot be recovered from, but the run can say where it died: the handler writes one
 * line with write(2) (async-signal-safe, no stdio) naming the plugin call in progress
 * (bk_plugin_call_describe, core/bias/terms.h), the step and the last checkpoint written; then, the
 * handler being reset on entry (SA_RESETHAND), it re-raises the signal and the process dies of it as
 * it would have. The handler runs on its own stack, so a stack overflow is reported too. Checkpoints
 * are written to a temporary file and renamed (core/io/safetensors.c): the last one on disk is whole.
 * ---------------------------------------------------------------------------------------------- */

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_CRASH_SIGNALS (sizeof crash_signals / sizeof crash_signals[0])

static struct {
    volatile int64_t step;            /* the step being computed */
    volatile int64_t checkpoint_step; /* the step of the last checkpoint written or resumed from; -1: none */
    char checkpoint[4096];
    struct sigaction old[N_CRASH_SIGNALS];
    stack_t old_stack;
    int installed, alt_stack;
} crash;
static char crash_stack[1 << 16];

static void on_crash(int sig)
{
    char line[6144], call[1024];
    size_t at = bk_sigsafe_put(line, sizeof line, 0, "\nbiaskit: error: crashed with signal ");
    at = bk_sigsafe_put_int(line, sizeof line, at, sig);
    const char *name = bk_sigsafe_signal_name(sig);
    if (name) {
        at = bk_sigsafe_put(line, sizeof line, at, " (");
        at = bk_sigsafe_put(line, sizeof line, at, name);
        at = bk_sigsafe_put(line, sizeof line, at, ")");
    }
    if (bk_plugin_call_describe(call, sizeof call)) {
        at = bk_sigsafe_put(line, sizeof line, at, " inside ");
        at = bk_sigsafe_put(line, sizeof line, at, call);
    } else {
        at = bk_sigsafe_put(line, sizeof line, at, " at step ");
        at = bk_sigsafe_put_int(line, sizeof line, at, crash.step);
        at = bk_sigsafe_put(line, sizeof line, at, " (not inside a plugin call)");
    }
    if (crash.checkpoint_step >= 0) {
        at = bk_sigsafe_put(line, sizeof line, at, "; the last checkpoint, ");
        at = bk_sigsafe_put(line, sizeof line, at, crash.checkpoint);
        at = bk_sigsafe_put(line, sizeof line, at, ", holds step ");
        at = bk_sigsafe_put_int(line, sizeof line, at, crash.checkpoint_step);
    } else
        at = bk_sigsafe_put(line, sizeof line, at, "; no checkpoint was written in this run");
    at = bk_sigsafe_put(line, sizeof line, at, "\n");
    ssize_t ignored = write(STDERR_FILENO, line, at);
    (void)ignored;
    raise(sig); /* the default action now: the process ends with this signal */
}

static void crash_guard_install(const char *checkpoint, int64_t checkpoint_step)
{
    bk_copy_text(crash.checkpoint, sizeof crash.checkpoint, checkpoint);
    crash.checkpoint_step = checkpoint_step;
    crash.step = 0;
    stack_t ss = {.ss_sp = crash_stack, .ss_size = sizeof crash_stack, .ss_flags = 0};
    crash.alt_stack = sigaltstack(&ss, &crash.old_stack) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_CRASH_SIGNALS; i++)
        sigaction(crash_signals[i], &sa, &crash.old[i]);
    crash.installed = 1;
}

static void crash_guard_remove(void)
{
    if (!crash.installed)
        return;
    for (size_t i = 0; i < N_CRASH_SIGNALS; i++)
        sigaction(crash_signals[i], &crash.old[i], NULL);
    if (crash.alt_stack)
        sigaltstack(&crash.old_stack, NULL);
    crash.installed = 0;
}

/* Appends "; the last checkpoint, PATH, holds step N" (or that there is none) to a failure of the loop. */
static void note_checkpoint(bk_error *err, const char *path, int64_t step)
{
    size_t len = strlen(err->message);
    if (step >= 0)
        snprintf(err->message + len, sizeof err->message - len, "; the last checkpoint, %s, holds step %lld", path,
                 (long long)step);
    else
        snprintf(err->message + len, sizeof err->message - len, "; no checkpoint was written in this run");
}

/* A group's gradient on the host: its own array for host memory, else a download into *scratch
 * (grown as needed). NULL with err filled when the download fails. */
static const float *host_gradient(const bk_adamw *opt, int i, float **scratch, size_t *cap, bk_error *err)
{
    const bk_param_group *g = &opt->groups[i];
    if (!g->be || !g->be->on_device)
        return g->grad;
    if (*cap < g->n) {
        float *bigger = realloc(*scratch, (g->n ? g->n : 1) * sizeof(float));
        if (!bigger) {
            bk_fail(err, BK_ERR_NOMEM, "out of memory reading the gradient of '%s' (%zu values)", g->name, g->n);
            return NULL;
        }
        *scratch = bigger, *cap = g->n;
    }
    return bk_adamw_grad_to_host(opt, i, *scratch, err) ? NULL : *scratch;
}

/* What is not finite in a step: the loss, the gradient norm, and the first gradient at fault (a
 * plugin's, named by the bias, else the first optimizer tensor with a NaN or an inf; gradients in a
 * device's memory are downloaded, on this rare path only). */
static void describe_nonfinite(const bk_lm *lm, const bk_adamw *opt, double loss, double norm, char *buf, size_t size)
{
    int at = snprintf(buf, size, "the loss is %g and the gradient norm is %g", loss, norm);
    if (at < 0 || (size_t)at >= size)
        return;
    if (lm->bias.nonfinite[0]) {
        snprintf(buf + at, size - (size_t)at, "; %s", lm->bias.nonfinite);
        return;
    }
    float *scratch = NULL;
    size_t cap = 0;
    for (int i = 0; i < opt->n_groups; i++) {
        const bk_param_group *g = &opt->groups[i];
        bk_error derr;
        const float *grad = host_gradient(opt, i, &scratch, &cap, &derr);
        if (!grad) {
            snprintf(buf + at, size - (size_t)at, "; the gradient of %s could not be read: %.400s", g->name,
                     derr.message);
            break;
        }
        size_t k = 0;
        while (k < g->n && isfinite(grad[k]))
            k++;
        if (k < g->n) {
            snprintf(buf + at, size - (size_t)at, "; first non-finite gradient: %s[%zu] = %g", g->name, k,
                     (double)grad[k]);
            break;
        }
    }
    free(scratch);
}

/* Name of the optimizer tensor with the largest gradient norm (for the warning about a huge norm);
 * gradients in a device's memory are downloaded (this warning is rare). */
static const char *largest_gradient(const bk_adamw *opt, double *out_norm)
{
    const char *name = "?";
    double best = -1.0;
    float *scratch = NULL;
    size_t cap = 0;
    for (int i = 0; i < opt->n_groups; i++) {
        bk_error derr;
        const float *grad = opt->groups[i].frozen ? NULL : host_gradient(opt, i, &scratch, &cap, &derr);
        if (!grad)
            continue; /* a frozen tensor, or one that cannot be read (a warning's detail), is left out */
        double sq = 0.0;
        for (size_t k = 0; k < opt->groups[i].n; k++)
            sq += (double)grad[k] * grad[k];
        if (sq > best)
            best = sq, name = opt->groups[i].name;
    }
    free(scratch);
    *out_norm = sqrt(best > 0 ? best : 0);
    return name;
}

/* Mean loss over the first `batches` batches of the validation stream (always the same tokens). With N
 * processes, batch i is computed by rank i mod N and the losses are added in batch order on every rank:
 * the same bits as one process. */
static int validate(bk_lm *lm, const bk_tokens *val, int B, int T, int64_t batches, int32_t *in, int32_t *tg,
                    bk_dist *dist, double *out, bk_error *err)
{
    bk_loader ld;
    int rc = bk_loader_init(&ld, val, B, T, 0, 0, err);
    int64_t n = rc ? 0 : batches < (ld.n_windows + B - 1) / B ? batches : (ld.n_windows + B - 1) / B;
    double *mine = calloc((size_t)n + 1, sizeof *mine), *all = calloc(((size_t)n + 1) * (size_t)dist->size, sizeof *all);
    if (!rc && (!mine || !all))
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for %lld validation losses", (long long)n);
    for (int64_t i = 0; i < n && !rc; i++) {
        bk_loader_next(&ld, in, tg);
        if (i % dist->size == dist->rank && !(rc = bk_gpt_forward(&lm->gpt, in, tg, B, T, 0, err)))
            mine[i] = lm->gpt.loss;
    }
    if (!(rc = bk_dist_agree(dist, rc, err)) && !(rc = bk_dist_allgather(dist, mine, (size_t)n + 1, all, err))) {
        double total = 0.0;
        for (int64_t i = 0; i < n; i++)
            total += all[(size_t)(i % dist->size) * ((size_t)n + 1) + (size_t)i];
        *out = total / (double)(n ? n : 1);
    }
    free(mine), free(all);
    bk_loader_free(&ld);
    return rc;
}

/* Every group's gradient averaged over the processes (one bk_dist_mean over the groups packed in order;
 * host memory: the data-parallel run is on the CPU backend). */
static int average_gradients(bk_adamw *opt, bk_dist *dist, float **pack, size_t *cap, bk_error *err)
{
    if (dist->size == 1)
        return BK_OK;
    size_t n = 0;
    for (int i = 0; i < opt->n_groups; i++)
        n += opt->groups[i].n;
    if (n > *cap) {
        float *p = realloc(*pack, n * sizeof *p);
        if (!p)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu gradient values", n);
        *pack = p, *cap = n;
    }
    size_t at = 0;
    for (int i = 0; i < opt->n_groups; at += opt->groups[i++].n)
        memcpy(*pack + at, opt->groups[i].grad, opt->groups[i].n * sizeof(float));
    int rc = bk_dist_mean(dist, *pack, n, err);
    at = 0;
    for (int i = 0; !rc && i < opt->n_groups; at += opt->groups[i++].n)
        memcpy(opt->groups[i].grad, *pack + at, opt->groups[i].n * sizeof(float));
    return rc;
}

/* Before the work of `step` (1-based; a validation counts as the next step's, whose tables it reads):
 * the step that messages and the crash report name, and the tables, computed only when the parameters
 * moved since (*tables_for is the step the bias holds tables for; -1 once they moved). */
static int enter_step(bk_lm *lm, int64_t step, int T, int64_t *tables_for, bk_error *err)
{
    crash.step = lm->bias.step = lm->gpt.pos.step = step;
    if (*tables_for == step)
        return BK_OK;
    int rc = bk_bias_forward(&lm->bias, T, err);
    if (!rc)
        *tables_for = step;
    return rc;
}

/* With [attention] learn_weights: the mixing weights after this step, per stream that has terms, in
 * the order of the stream's terms in the experiment (bias->on[s]): `, "mix": {"token": [w0, w1]}`
 * (`biaskit report` plots them). A weight that is not finite is written as null. Nothing otherwise. */
static void write_mix_weights(FILE *f, const bk_bias *b)
{
    if (!b->learn_weights)
        return;
    int first = 1;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (b->n_on[s] == 0)
            continue;
        char name[16];
        bk_choice_name(BK_STREAM_CHOICES, s, name, sizeof name);
        fprintf(f, "%s\"%s\": [", first ? ", \"mix\": {" : ", ", name);
        for (int k = 0; k < b->n_on[s]; k++) {
            double w = b->set->terms[b->on[s][k]].weight;
            if (isfinite(w))
                fprintf(f, "%s%.6g", k ? ", " : "", w);
            else
                fprintf(f, "%snull", k ? ", " : "");
        }
        fprintf(f, "]");
        first = 0;
    }
    if (!first)
        fprintf(f, "}");
}

/* The plugin parameters of the terms after this step (issue 27: KERPLE's r1, r2 ... drawn over training
 * like the mixing weights): `, "params": {"term.<label>.<tensor>": [v, ...]}`, one key per named tensor
 * of each term with parameters (its param_tensors(), else "theta"), the values in theta's order (per
 * head for the per-head scalars); a per_layer term gives one array per layer: [[layer 0], [layer 1], ...].
 * Only tensors of at most BK_TRAIN_LOG_TENSOR_MAX values per copy are logged: tables of learned values
 * (T5's buckets, a learned table) are in the checkpoint, not in every line. A value that is not finite
 * is written as null. Returns how many values the line would hold (0: nothing written). */
/* A step loss above LOSS_RISE_FACTOR times the median of the last LOSS_WINDOW finite step losses (after
 * LOSS_WINDOW_MIN of them: the first step's loss is a reference) is a warning naming the step: a divergence
 * that stays finite. */
#define LOSS_RISE_FACTOR 10.0
#define LOSS_WINDOW 64
#define LOSS_WINDOW_MIN 1

typedef struct loss_watch {
    double recent[LOSS_WINDOW];
    int n, next;
    int above;             /* the last loss was above the factor (one warning per rise) */
    int64_t rises;         /* warnings given */
    int64_t first_rise;    /* the step of the first, 0: none */
} loss_watch;

/* The median of the window (n >= 1). */
static double loss_median(const loss_watch *w)
{
    double v[LOSS_WINDOW];
    memcpy(v, w->recent, (size_t)w->n * sizeof *v);
    for (int i = 1; i < w->n; i++) /* insertion sort: at most 64 values */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return w->n % 2 ? v[w->n / 2] : 0.5 * (v[w->n / 2 - 1] + v[w->n / 2]);
}

/* Adds the finite loss of `step`; prints a warning when it rises above the factor. */
static void loss_watch_add(loss_watch *w, double loss, int64_t step, FILE *out, int progress)
{
    if (w->n >= LOSS_WINDOW_MIN) {
        const double median = loss_median(w);
        const int above = median > 0 && loss > LOSS_RISE_FACTOR * median;
        if (above && !w->above) {
            fprintf(out, "%sstep %lld: warning: the loss %.4g is %.3g times its running median %.4g (of the last %d "
                    "step%s): the training may be diverging (lower [train] lr?)\n", progress ? "\n" : "",
                    (long long)step, loss, loss / median, median, w->n, w->n == 1 ? "" : "s");
            if (!w->rises++)
                w->first_rise = step;
        }
        w->above = above;
    }
    w->recent[w->next] = loss;
    w->next = (w->next + 1) % LOSS_WINDOW;
    w->n += w->n < LOSS_WINDOW;
}

/* After bk_adamw_to_host: how many parameters and AdamW moments are not finite, and the first (by the
 * name the checkpoint gives it) in `first`. An update can make them so (eps = 0 with beta2 = 0 divides
 * by zero) a step before any forward shows it: such a state is never checkpointed. */
static size_t nonfinite_state(const bk_adamw *opt, char *first, size_t size)
{
    size_t count = 0;
    first[0] = '\0';
    for (int i = 0; i < opt->n_groups; i++) {
        const bk_param_group *g = &opt->groups[i];
        const float *arrays[3] = {g->param_host, g->m_host, g->v_host};
        static const char *const prefix[3] = {"", "adam.m.", "adam.v."};
        for (int a = 0; a < 3; a++)
            for (size_t k = 0; arrays[a] && k < g->n; k++)
                if (!isfinite(arrays[a][k]) && !count++)
                    snprintf(first, size, "%s%s[%zu] = %g", prefix[a], g->name, k, (double)arrays[a][k]);
    }
    return count;
}

#define BK_TRAIN_LOG_TENSOR_MAX 64
#define BK_TRAIN_LOG_PARAMS_EVERY_STEP 64
static int64_t term_param_count(const bk_term_set *set)
{
    int64_t n = 0;
    for (int t = 0; t < set->n; t++)
        for (int g = 0; g < set->terms[t].n_groups && set->terms[t].n_params > 0; g++)
            if (set->terms[t].groups[g].count <= BK_TRAIN_LOG_TENSOR_MAX)
                n += set->terms[t].groups[g].count * set->terms[t].n_copies;
    return n;
}

static void write_term_params(FILE *f, const bk_term_set *set)
{
    int first = 1;
    for (int t = 0; t < set->n; t++) {
        const bk_term *term = &set->terms[t];
        if (term->n_params <= 0 || !term->theta)
            continue;
        for (int g = 0; g < term->n_groups; g++) {
            const bk_term_group *grp = &term->groups[g];
            if (grp->count > BK_TRAIN_LOG_TENSOR_MAX)
                continue;
            fprintf(f, "%s\"term.%s.%s\": %s", first ? ", \"params\": {" : ", ", term->label, grp->name,
                    term->per_layer ? "[" : "");
            for (int c = 0; c < term->n_copies; c++) {
                const float *v = term->theta + (size_t)c * (size_t)term->n_params + grp->offset;
                fprintf(f, "%s[", c ? ", " : "");
                for (int64_t k = 0; k < grp->count; k++) {
                    if (isfinite(v[k]))
                        fprintf(f, "%s%.6g", k ? ", " : "", (double)v[k]);
                    else
                        fprintf(f, "%snull", k ? ", " : "");
                }
                fprintf(f, "]");
            }
            fprintf(f, "%s", term->per_layer ? "]" : "");
            first = 0;
        }
    }
    if (!first)
        fprintf(f, "}");
}

static void format_duration(double s, char *buf, size_t size)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, size, "%lds", t);
}

int bk_train(const bk_train_options *o, bk_train_summary *sum, bk_error *err)
{
    memset(sum, 0, sizeof *sum);
    sum->val_loss = NAN;
    bk_dist one;
    bk_dist_single(&one);
    bk_dist *dist = o->dist ? o->dist : &one;
    const int lead = dist->rank == 0; /* rank 0 logs, writes the metrics and the checkpoints */
    FILE *quiet = lead ? NULL : fopen("/dev/null", "w");
    if (!lead && !quiet)
        return bk_fail(err, BK_ERR_IO, "rank %d: cannot open /dev/null: %s", dist->rank, strerror(errno));
    FILE *out = quiet ? quiet : o->out ? o->out : stderr;
    float *grad_pack = NULL;
    size_t grad_pack_n = 0;
    double *gathered = NULL; /* per process: its step loss and whether it was interrupted */
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st = {0, 0, 0, 0, NAN};
    bk_tokens train = {0}, val = {0};
    bk_data_split split = {0};
    bk_loader ld = {0};
    int32_t *in = NULL, *tg = NULL;
    FILE *metrics = NULL;
    bk_run_dir run = {.lock_fd = -1};
    int rc;

    if (o->resume)
        rc = bk_reopen(o->resume,
                       &(bk_reopen_request){.purpose = BK_REOPEN_RESUME, .sets = o->overrides,
                                            .n_sets = o->n_overrides, .strict = o->strict},
                       &lm, &opt, &st, err);
    else if (!(rc = bk_lm_open_file(&lm, o->config, o->overrides, o->n_overrides, err)) &&
             (rc = bk_lm_register(&lm, &opt, err)))
        bk_lm_close(&lm);
    int opened = rc == BK_OK; /* another process may have failed where this one did not */
    /* a fine-tuning: the weights of --init (from the working directory) or [train] init (from the
     * experiment's), then which tensors train (a resumed run keeps its record and its frozen tensors) */
    bk_init_report init = {0};
    char init_path[4096] = "";
    size_t n_trainable = 0;
    if (opened && !o->resume && (o->init || lm.exp.train.init[0])) {
        if (o->init)
            bk_copy_text(init_path, sizeof init_path, o->init);
        else
            rc = bk_lm_path(&lm, lm.exp.train.init, init_path, sizeof init_path, err);
        if (!rc)
            rc = bk_init_from(init_path, &lm, &opt, &init, err);
    }
    if (opened && !rc)
        rc = bk_init_trainable(&lm, &opt, &n_trainable, err);
    rc = bk_dist_agree(dist, rc, err);
    if (!rc && dist->size > 1) { /* ranks agree or stop: a rank with another experiment would corrupt or hang */
        char *mine = bk_lm_agreement_text(&lm, st.step);
        rc = bk_dist_same(dist, "experiment", mine ? mine : "(out of memory)", err);
        free(mine);
    }
    if (rc) {
        if (opened)
            bk_lm_close(&lm);
        bk_adamw_free(&opt);
        if (quiet)
            fclose(quiet);
        return rc;
    }
    const bk_experiment *e = &lm.exp;
    if (e->run.threads > 0)
        omp_set_num_threads((int)e->run.threads);
    else if (dist->size > 1)
        omp_set_num_threads(bk_dist_threads(dist));
    const int B = (int)e->train.batch, T = (int)e->train.length;
    const int64_t steps = e->train.steps;
    const int Bl = B / dist->size; /* this process's rows of every batch */

    /* One process on the CPU backend, or several: each trains on B/N rows of every batch. */
    if (dist->size > 1 && lm.be && lm.be->kind != BK_BACKEND_CPU)
        rc = bk_fail(err, BK_ERR_INVALID, "%d processes: data-parallel training runs on the CPU backend; set [run] "
                     "device = \"cpu\" (this run's device: %s)", dist->size, lm.be->description);
    else if (B % dist->size != 0)
        rc = bk_fail(err, BK_ERR_CONFIG, "%s: [train] batch = %d is not a multiple of the %d processes (each "
                     "trains on an equal share of every batch)", e->path, B, dist->size);
    if (rc)
        goto setup_done;
    /* the run directory (README.md "Paths"), locked before anything is read or written in it; the other
     * processes write nothing (their metrics go to /dev/null) */
    char dir[4096];
    if (lead && ((rc = bk_run_dir_choose(&lm, o->out_dir, o->resume, dir, sizeof dir, err)) ||
                 (rc = bk_run_dir_open(&run, dir, err))))
        goto setup_done;
    if (lead && snprintf(sum->checkpoint, sizeof sum->checkpoint, "%s/" BK_RUN_CHECKPOINT_FILE, run.path) >=
                    (int)sizeof sum->checkpoint) {
        rc = bk_fail(err, BK_ERR_INVALID, "run directory name too long: '%s' (at most %zu bytes with '/%s')", run.path,
                     sizeof sum->checkpoint - 1 - strlen("/" BK_RUN_CHECKPOINT_FILE), BK_RUN_CHECKPOINT_FILE);
        goto setup_done;
    }
    if ((rc = bk_lm_load_data_split(&lm, NULL, 0, e->train.length + 1, NULL, &train, &val, &split, err)) ||
        (rc = bk_loader_init(&ld, &train, B, T, (uint64_t)e->train.seed, 1, err)))
        goto setup_done;
    if (lead) { /* what validation holds, for the report and for a reader of the run directory */
        char path[4096 + 32];
        snprintf(path, sizeof path, "%s/" BK_RUN_SPLIT_FILE, run.path);
        if ((rc = bk_data_split_write_json(&split, path, err)))
            goto setup_done;
    }
    if (o->resume && (rc = bk_loader_seek(&ld, st.data_epoch, st.data_index, err)))
        goto setup_done;
    if (lead && (rc = bk_run_dir_metrics(&run, o->resume != NULL, st.step, &metrics, err)))
        goto setup_done;
    if (!lead && !(metrics = fopen("/dev/null", "w"))) {
        rc = bk_fail(err, BK_ERR_IO, "rank %d: cannot open /dev/null: %s", dist->rank, strerror(errno));
        goto setup_done;
    }
    in = malloc((size_t)B * T * sizeof *in);
    tg = malloc((size_t)B * T * sizeof *tg);
    gathered = malloc(2 * (size_t)dist->size * sizeof *gathered);
    if (!in || !tg || !gathered)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for batches");
setup_done:
    if ((rc = bk_dist_agree(dist, rc, err)))
        goto done;
    if (dist->size > 1) { /* the same data on every rank: its size and bytes */
        char data[256];
        snprintf(data, sizeof data, "[data] %lld training tokens (xxh64 %016llx), %lld validation tokens (xxh64 %016llx)\n",
                 (long long)train.count, (unsigned long long)bk_xxh64(train.tokens, (size_t)train.count * sizeof *train.tokens, 0),
                 (long long)val.count, (unsigned long long)bk_xxh64(val.tokens, (size_t)val.count * sizeof *val.tokens, 0));
        if ((rc = bk_dist_same(dist, "data", data, err)))
            goto done;
    }

    if (lm.gpt.family == BK_FAMILY_LLAMA)
        fprintf(out, "train: %s; llama, %d layers, %d heads (%d key/value) of %d, dim %d, ffn %d, vocab %d%s; %zu model "
                     "parameters, %d term%s\n",
                e->path, lm.gpt.L, lm.gpt.H, lm.gpt.KV, lm.gpt.hd, lm.gpt.C, lm.gpt.F, lm.gpt.V,
                lm.gpt.tied ? ", tied output" : "", lm.gpt.n_params, lm.terms.n, lm.terms.n == 1 ? "" : "s");
    else
        fprintf(out, "train: %s; %d layers, %d heads, dim %d, vocab %d; %zu model parameters, %d term%s\n", e->path,
                lm.gpt.L, lm.gpt.H, lm.gpt.C, lm.gpt.V, lm.gpt.n_params, lm.terms.n, lm.terms.n == 1 ? "" : "s");
    fprintf(out, "device: %s%s%s\n", lm.be ? lm.be->description : "cpu", lm.device_note[0] ? "; " : "",
            lm.device_note);
    if (!lm.be || !lm.be->on_device) /* the CPU's products: which library and kernels */
        fprintf(out, "blas: %s; linear layers: %s; attention products: %s\n", bk_blas_describe(), bk_gemm_describe(),
                bk_gemm_attention_describe());
    /* what the model keeps on its backend: a training forward's activations and their gradients, and
     * four floats per parameter (value, gradient, AdamW's two moments; with bf16 storage a bf16 copy) */
    const int copies = bk_gpt_parameter_bytes(&lm.gpt) > lm.gpt.n_params * 4 * sizeof(float);
    fprintf(out, "memory: %.1f MiB of activations and their gradients (%d x %d tokens per forward), %.1f MiB of "
                 "parameters, gradients and AdamW moments%s\n",
            (double)bk_gpt_model_activation_bytes(&lm.gpt, Bl, T, 1) / 1048576.0,
            Bl, T, (double)bk_gpt_parameter_bytes(&lm.gpt) / 1048576.0, copies ? " and the weights' bf16 copies" : "");
    if (dist->size > 1)
        fprintf(out, "processes: %d (MPI), each %d of the %d rows of every batch, %d thread%s each\n", dist->size, Bl,
                B, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
    fprintf(out, "data: %s (%lld tokens) / validation %s (%lld tokens); batch %d x %d x %lld accumulated\n",
            train.name, (long long)train.count, val.name, (long long)val.count, B, T, (long long)e->train.accumulate);
    char held[1024];
    bk_data_split_describe(&split, 8, held, sizeof held);
    fprintf(out, "%s\n", held);
    if (o->resume)
        fprintf(out, "resuming from %s at step %lld\n", o->resume, (long long)st.step);
    if (init_path[0])
        fprintf(out, "init: %s (step %lld, seal %s): %d tensor%s carried over; %d initialised afresh%s%s; %d of "
                     "the checkpoint left out%s%s\n",
                init_path, (long long)init.step, init.seal[0] ? init.seal : "none", init.carried,
                init.carried == 1 ? "" : "s", init.fresh, init.fresh ? ": " : "", init.fresh_names, init.dropped,
                init.dropped ? ": " : "", init.dropped_names);
    if (lm.exp.train.trainable.n) {
        size_t all = 0;
        for (int i = 0; i < opt.n_groups; i++)
            all += opt.groups[i].n;
        fprintf(out, "trainable: %zu of %zu parameters ([train] trainable); the others are frozen\n", n_trainable,
                all);
    }
    fprintf(out, "writing %s\n", run.path);

    interrupted = 0;
    struct sigaction sa, old[N_STOP_SIGNALS];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    for (int k = 0; k < N_STOP_SIGNALS; k++)
        sigaction(stop_signals[k], &sa, &old[k]);

    const double start = bk_now_seconds();
    double window_start = start;
    int64_t window_tokens = 0, first_step = st.step;
    const int64_t n_param_values = term_param_count(lm.bias.set);
    /* The tables are computed at the start of the step that reads them (and before a validation), so
     * that a plugin failing on them fails in that step, after the checkpoint of the one before. */
    int64_t tables_for = -1;     /* the step whose tables the bias holds */
    int64_t skipped_in_row = 0;  /* [train] nonfinite = "skip" */
    double norm_ema = 0.0;       /* running mean of the gradient norm, for the warning about a huge one */
    loss_watch watch = {0};      /* the step losses, for the warning about a rise */
    int64_t checkpoint_step = o->resume ? st.step : -1;
    crash_guard_install(sum->checkpoint, checkpoint_step);
    while (st.step < steps && !rc) {
        if ((rc = enter_step(&lm, st.step + 1, T, &tables_for, err)))
            break;
        if ((rc = bk_lm_zero_grad(&lm, err)))
            break;
        double loss = 0.0;
        for (int64_t micro = 0; micro < e->train.accumulate && !rc; micro++) {
            bk_loader_next(&ld, in, tg); /* the whole batch; this process takes its rows */
            const int32_t *rin = in + (size_t)dist->rank * (size_t)Bl * (size_t)T;
            const int32_t *rtg = tg + (size_t)dist->rank * (size_t)Bl * (size_t)T;
            if (!(rc = bk_gpt_forward(&lm.gpt, rin, rtg, Bl, T, 1, err)))
                rc = bk_gpt_backward(&lm.gpt, rin, rtg, 1.0f / (float)e->train.accumulate, err);
            loss += lm.gpt.loss / (double)e->train.accumulate;
        }
        if (!rc)
            rc = bk_lm_gradients_ready(&lm, err);
        if ((rc = bk_dist_agree(dist, rc, err)))
            break;
        if (dist->size > 1) { /* the mean gradient and loss of the processes; Ctrl-C on any stops all */
            double mine[2] = {loss, (double)interrupted}; /* the signal's number, 0 for none */
            if ((rc = average_gradients(&opt, dist, &grad_pack, &grad_pack_n, err)) ||
                (rc = bk_dist_allgather(dist, mine, 2, gathered, err)))
                break;
            loss = 0.0;
            for (int r = 0; r < dist->size; r++) {
                loss += gathered[2 * r];
                if (gathered[2 * r + 1] != 0.0 && !interrupted)
                    interrupted = (int)gathered[2 * r + 1];
            }
            loss /= (double)dist->size;
        }
        /* A NaN or an inf anywhere in the step shows in the loss or the gradient norm, both computed
         * anyway: the check costs two comparisons. */
        double norm;
        if ((rc = bk_adamw_grad_norm(&opt, &norm, err)))
            break;
        double lr = bk_lr_schedule(st.step, steps, e->train.warmup, e->train.lr, e->train.final_lr);
        int skipped = !isfinite(norm) || !isfinite(loss);
        if (skipped) {
            char why[1536];
            describe_nonfinite(&lm, &opt, loss, norm, why, sizeof why);
            if (e->train.nonfinite != BK_NONFINITE_SKIP) {
                rc = bk_fail(err, BK_ERR_INTERNAL, "step %lld: %s; stopped (%sset [train] nonfinite = \"skip\" to "
                             "skip such steps)", (long long)st.step + 1, why,
                             lm.bias.nonfinite[0] ? "" : "lower [train] lr, or ");
                break;
            }
            if (++skipped_in_row >= BK_NONFINITE_MAX_SKIPS) {
                rc = bk_fail(err, BK_ERR_INTERNAL, "step %lld: %s; stopped after %d steps in a row skipped "
                             "([train] nonfinite = \"skip\")", (long long)st.step + 1, why, BK_NONFINITE_MAX_SKIPS);
                break;
            }
            fprintf(out, "%sstep %lld: skipped, not finite: %s ([train] nonfinite = \"skip\"; %lld in a row)\n",
                    o->progress ? "\n" : "", (long long)st.step + 1, why, (long long)skipped_in_row);
        } else {
            skipped_in_row = 0;
            /* Exploding but finite: clipping bounds the update; a jump far above the usual norm is
             * worth a line naming the tensor that carries it. */
            if (st.step > first_step && norm_ema > 0 && norm > 1000.0 * norm_ema) {
                double part;
                const char *name = largest_gradient(&opt, &part);
                fprintf(out, "%sstep %lld: warning: gradient norm %.3g is %.3g times its running mean %.3g "
                        "(largest: %s, %.3g)%s\n", o->progress ? "\n" : "", (long long)st.step + 1, norm,
                        norm / norm_ema, norm_ema, name, part,
                        e->train.grad_clip > 0 ? "; clipped to [train] grad_clip" : "");
            }
            norm_ema = st.step == first_step ? norm : 0.9 * norm_ema + 0.1 * norm;
            loss_watch_add(&watch, loss, st.step + 1, out, o->progress);
            if (e->train.grad_clip > 0 && norm > e->train.grad_clip &&
                (rc = bk_adamw_scale_grads(&opt, (float)(e->train.grad_clip / norm), err)))
                break;
            if ((rc = bk_adamw_step(&opt, lr, e->train.beta1, e->train.beta2, e->train.eps, e->train.weight_decay,
                                    err)) ||
                (rc = bk_lm_after_update(&lm, err)))
                break;
            tables_for = -1; /* the parameters moved */
        }
        st.step++;
        st.tokens += (int64_t)B * T * e->train.accumulate;
        window_tokens += (int64_t)B * T * e->train.accumulate;
        st.data_epoch = ld.epoch, st.data_index = ld.index;
        sum->train_loss = loss;

        double t = bk_now_seconds();
        double rate = window_tokens / (t - window_start > 1e-9 ? t - window_start : 1e-9);
        if (skipped) { /* JSON has no NaN: a value that is not finite is written as null */
            char loss_text[32] = "null", norm_text[32] = "null";
            if (isfinite(loss))
                snprintf(loss_text, sizeof loss_text, "%.6f", loss);
            if (isfinite(norm))
                snprintf(norm_text, sizeof norm_text, "%.6g", norm);
            fprintf(metrics, "{\"step\": %lld, \"skipped\": \"nonfinite\", \"loss\": %s, \"lr\": %.6g, "
                    "\"grad_norm\": %s, \"tokens\": %lld}\n", (long long)st.step, loss_text, lr, norm_text,
                    (long long)st.tokens);
        } else {
            fprintf(metrics, "{\"step\": %lld, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6g, \"tokens\": %lld, "
                    "\"tokens_per_s\": %.1f", (long long)st.step, loss, lr, norm, (long long)st.tokens, rate);
            write_mix_weights(metrics, &lm.bias);
            /* every step, as the mixing weights, while a line holds at most BK_TRAIN_LOG_PARAMS_EVERY_STEP
             * values; more (per-layer terms of a deep model) on the progress lines' steps only */
            if (n_param_values <= BK_TRAIN_LOG_PARAMS_EVERY_STEP || st.step % e->train.log_every == 0 ||
                st.step == steps || st.step == first_step + 1)
                write_term_params(metrics, lm.bias.set);
            fprintf(metrics, "}\n");
        }
        int last = st.step == steps;
        if (o->progress || st.step % e->train.log_every == 0 || last || st.step == first_step + 1) {
            char eta[32];
            double per_step = (t - start) / (double)(st.step - first_step);
            format_duration(per_step * (double)(steps - st.step), eta, sizeof eta);
            fprintf(out, "%sstep %lld/%lld | loss %.4f | lr %.3g | %.0f tok/s | ETA %s%s", o->progress ? "\r" : "",
                    (long long)st.step, (long long)steps, loss, lr, rate, eta, o->progress ? "   " : "\n");
            fflush(out);
            if (st.step % e->train.log_every == 0)
                window_start = t, window_tokens = 0;
        }
        if ((e->train.eval_every > 0 && st.step % e->train.eval_every == 0) || last) {
            if ((rc = enter_step(&lm, st.step + 1, T, &tables_for, err)))
                break;
            if ((rc = validate(&lm, &val, B, T, e->train.eval_batches, in, tg, dist, &st.val_loss, err)))
                break;
            sum->val_loss = st.val_loss;
            fprintf(metrics, "{\"step\": %lld, \"val_loss\": %.6f, \"val_ppl\": %.4f}\n", (long long)st.step,
                    st.val_loss, exp(st.val_loss));
            char ppl[32];
            fprintf(out, "%sstep %lld: validation loss %.4f (perplexity %s)\n", o->progress ? "\n" : "",
                    (long long)st.step, st.val_loss, bk_number_text(exp(st.val_loss), 3, ppl, sizeof ppl));
        }
        if (fflush(metrics) != 0 || ferror(metrics)) { /* a full disk: say so rather than lose the log */
            rc = bk_fail(err, BK_ERR_IO, "cannot write '%s/" BK_RUN_METRICS_FILE "': %s", run.path, strerror(errno));
            break;
        }
        int stop = interrupted || (o->stop_after > 0 && st.step - first_step >= o->stop_after);
        if (last || stop || (e->train.checkpoint_every > 0 && st.step % e->train.checkpoint_every == 0)) {
            /* the checkpoint reads the host copies: parameters and moments come back from the device */
            char first[256];
            size_t bad = 0;
            if (!(rc = bk_adamw_to_host(&opt, err)) && (bad = nonfinite_state(&opt, first, sizeof first)))
                rc = bk_fail(err, BK_ERR_INTERNAL, "step %lld: %zu parameter%s or AdamW moment%s not finite after the "
                             "update (the first: %s), so it is not checkpointed; stopped (lower [train] lr, or raise "
                             "[train] eps or beta2)", (long long)st.step, bad, bad == 1 ? "" : "s",
                             bad == 1 ? " is" : "s are", first);
            else if (!rc && lead)
                rc = bk_checkpoint_save(sum->checkpoint, &lm, &opt, &st, err);
            if ((rc = bk_dist_agree(dist, rc, err)))
                break;
            crash.checkpoint_step = checkpoint_step = st.step;
        }
        if (stop && !last) {
            sum->interrupted = 1;
            sum->signalled = interrupted;
            const char *by = interrupted ? bk_sigsafe_signal_name(interrupted) : NULL;
            fprintf(out, "%sstopped at step %lld%s%s; checkpoint %s (continue with --resume)\n",
                    o->progress ? "\n" : "", (long long)st.step, by ? " by " : "", by ? by : "", sum->checkpoint);
            break;
        }
    }
    crash_guard_remove();
    if (rc)
        note_checkpoint(err, sum->checkpoint, checkpoint_step);
    for (int k = 0; k < N_STOP_SIGNALS; k++)
        sigaction(stop_signals[k], &old[k], NULL);
    sum->steps = st.step;
    sum->seconds = bk_now_seconds() - start;
    sum->tokens_per_second = (double)(st.step - first_step) * B * T * e->train.accumulate /
                             (sum->seconds > 1e-9 ? sum->seconds : 1e-9);
    if (!rc && watch.rises)
        fprintf(out, "%swarning: the loss rose above %g times its running median %lld time%s, first at step %lld: "
                "see the warnings above\n", o->progress ? "\n" : "", LOSS_RISE_FACTOR, (long long)watch.rises,
                watch.rises == 1 ? "" : "s", (long long)watch.first_rise);
    if (!rc && !sum->interrupted)
        fprintf(out, "%sdone: %lld steps in %.1f s (%.0f tokens/s); checkpoint %s\n", o->progress ? "\n" : "",
                (long long)st.step, sum->seconds, sum->tokens_per_second, sum->checkpoint);
done:
    free(grad_pack);
    free(gathered);
    if (quiet)
        fclose(quiet);
    if (metrics)
        fclose(metrics);
    bk_run_dir_close(&run);
    free(in), free(tg);
    bk_loader_free(&ld);
    bk_tokens_free(&train);
    bk_tokens_free(&val);
    bk_data_split_free(&split);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    return rc;
}
