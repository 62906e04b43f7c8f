/* biaskit sweep: a grid of experiments trained and evaluated end to end, resumably (docs/sweeps.md).
 *
 * Each phase of a run (train, eval, the sliding eval) is a child process of this binary
 * (/proc/self/exe train|eval ...): a crash or an abort in one run cannot take the sweep down, each
 * child sets its own thread count, and what a run prints goes to its own log. */
#define _GNU_SOURCE /* prctl, setenv, dprintf */
#include "cli/args.h"
#include "util/clock.h"
#include "cli/commands.h"
#include "dist/dist.h"
#include "sweep/sweep.h"
#include "sweep/stale.h"
#include "train/lm.h"
#include "util/file.h"
#include "util/path.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char help_head[] =
    "usage: biaskit sweep <sweep.toml> [--jobs N] [--dry-run] [--only NAME-GLOB]... [--report]\n"
    "                     [--plugin-timeout S] [--rerun-stale]\n\n"
    "Trains and evaluates every run of a sweep file: a base experiment crossed with [[variant]]s\n"
    "(positional schemes), [[corpus]]es, [grid] values and seeds. Every run is resolved and\n"
    "validated before anything runs. Runs already done are skipped (unless stale: trained from another\n"
    "experiment than the file now asks for; see --rerun-stale); an interrupted run resumes from\n"
    "its checkpoint; a failed run is reported with its error while the others go on, and the exit\n"
    "status is then 1 (130 after Ctrl-C, which stops every run at a checkpoint). Runs of one\n"
    "experiment (variants that differ only in their eval_set) train once: the others get a copy of\n"
    "its checkpoint and metrics, and are only evaluated.\n\n"
    "  --jobs N         run N runs at a time; each gets [run] threads / N CPU threads (the machine's\n"
    "                   cores when [run] threads is 0), at least 1 (default 1)\n"
    "  --dry-run        resolve and list the runs, their state and settings, and what validation holds\n"
    "                   for each corpus; write nothing (exit 1 when a run cannot train)\n"
    "  --only GLOB      only the runs whose name matches the shell pattern, e.g. 'alibi-*'; repeat it\n"
    "                   for the runs that match any of them\n"
    "  --report         then write the sweep's report, as `biaskit report <sweep dir>` does (also after\n"
    "                   failed runs, which it lists; not after Ctrl-C)\n"
    "  --plugin-timeout S  time limit in seconds of the plugins' check of a variant's terms, run in a\n"
    "                   child process before anything trains (default 60): a plugin that crashes,\n"
    "                   exits or hangs there fails that variant's runs, and the others run\n"
    "  --rerun-stale    train again the stale runs: runs done (or with a checkpoint) whose\n"
    "                   experiment.toml differs from what the sweep file now asks for (it was edited).\n"
    "                   Without it a sweep with a stale run refuses to start, naming each one and the\n"
    "                   first key that differs, and writes nothing (its results would be reported\n"
    "                   under settings they were not trained with)\n\n"
    "The sweep directory holds sweep.json (the runs), and per run <name>/: experiment.toml (the\n"
    "resolved experiment), the training's files, eval.json (and eval-sliding.json), status.json,\n"
    "train.log and eval.log. One sweep at a time works in a sweep directory (.sweep.lock); a sweep\n"
    "started by an MPI launcher (mpirun) is refused: every run is its own process. See docs/sweeps.md.\n\n";

/* ------------------------------------------------------------------------------------------------
 * Signals: Ctrl-C (SIGINT) or SIGTERM stop the sweep; they are passed on to the children, which run
 * in their own process groups (so that a terminal's Ctrl-C reaches them once, through here).
 * ---------------------------------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signals;

static void on_stop(int sig)
{
    (void)sig;
    stop_signals++;
}

static void on_child(int sig)
{
    (void)sig;
}

/* ------------------------------------------------------------------------------------------------
 * Runs in flight
 * ---------------------------------------------------------------------------------------------- */

enum { PHASE_TRAIN = 0, PHASE_EVAL = 1, PHASE_SLIDING = 2, PHASE_PASSKEY = 3 };

typedef struct job {
    bk_sweep_run *run;
    bk_run_status st;
    int number;         /* 1-based among the runs started */
    int phase;
    pid_t pid;          /* 0 when no child */
    double started;     /* of the phase */
    long log_offset;    /* where this phase's output starts in its log */
    int signalled;      /* stop signals passed on to the child */
    int resumed;
    const char *reevaluate; /* done before, evaluated again: why ("its variant's eval_set changed"), or NULL */
    char *prepare_error; /* why its directory could not be prepared, or NULL */
    /* an earlier run of the same experiment (a variant that differs only in its eval_set): its
     * training is this run's too; NULL when none (or this run has a checkpoint of its own) */
    const bk_sweep_run *twin;
    int twin_state;      /* the twin's state before this sweep (when it is not in the queue) */
    struct job *twin_job; /* the twin's job in this sweep, or NULL */
    int trained;         /* its training is complete: ended well in this sweep, or before it */
} job;

typedef struct sweep_ctx {
    const bk_sweep *sw;
    int jobs;
    long threads_per_run_total; /* the machine's cores */
    int total;                  /* runs to start */
    int n_done, n_failed, n_interrupted;
    char **failures;            /* "NAME: error" */
    int n_failures;
} sweep_ctx;

static int run_threads(const sweep_ctx *c, const bk_sweep_run *run)
{
    long total = run->threads > 0 ? (long)run->threads : c->threads_per_run_total;
    long t = total / c->jobs;
    return t < 1 ? 1 : (int)t;
}

static void log_path(const job *j, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", j->run->dir, j->phase == PHASE_TRAIN ? BK_SWEEP_TRAIN_LOG : BK_SWEEP_EVAL_LOG);
}

static void json_path(const job *j, int tmp, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s%s", j->run->dir,
             j->phase == PHASE_SLIDING   ? BK_SWEEP_EVAL_SLIDING_FILE
             : j->phase == PHASE_PASSKEY ? BK_SWEEP_PASSKEY_FILE
                                         : BK_SWEEP_EVAL_FILE,
             tmp ? ".tmp" : "");
}

/* "128,256,512": the --lengths argument of eval and passkey. */
static void join_lengths(const int32_t *v, int n, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%d", i ? "," : "", (int)v[i]);
}

/* Start the child of the job's phase: fork, then exec this binary. */
static int spawn(sweep_ctx *c, job *j, bk_error *err)
{
    char ckpt[4200], exp[4200], log[4200], json[4200], threads[64], lengths[BK_SWEEP_MAX_LENGTHS * 12 + 1] = "";
    char tokens[32], sliding[32], trials[32], plens[BK_SWEEP_MAX_LENGTHS * 12 + 1] = "";
    char depths[BK_SWEEP_MAX_PASSKEY_DEPTHS * 24 + 1] = "";
    const bk_sweep_run *r = j->run;
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", r->dir);
    snprintf(exp, sizeof exp, "%s/" BK_SWEEP_EXPERIMENT_FILE, r->dir);
    snprintf(threads, sizeof threads, "run.threads=%d", run_threads(c, r));
    log_path(j, log, sizeof log);
    json_path(j, 1, json, sizeof json);
    join_lengths(c->sw->lengths, c->sw->n_lengths, lengths, sizeof lengths);
    join_lengths(c->sw->passkey, c->sw->n_passkey, plens, sizeof plens);
    snprintf(tokens, sizeof tokens, "%lld", (long long)c->sw->tokens);
    snprintf(sliding, sizeof sliding, "%lld", (long long)c->sw->sliding);
    snprintf(trials, sizeof trials, "%lld", (long long)c->sw->passkey_trials);
    size_t used = 0;
    for (int i = 0; i < c->sw->n_passkey_depths; i++)
        used += (size_t)snprintf(depths + used, sizeof depths - used, "%s%.17g", i ? "," : "", c->sw->passkey_depths[i]);

    const char *argv[24 + 2 * BK_SWEEP_MAX_EVAL_SETS];
    int n = 0;
    argv[n++] = "biaskit";
    if (j->phase == PHASE_TRAIN) {
        argv[n++] = "train";
        if (j->resumed) {
            argv[n++] = "--resume";
            argv[n++] = ckpt;
        } else {
            argv[n++] = exp;
            argv[n++] = "--out";
            argv[n++] = r->dir;
        }
        argv[n++] = "--plain";
    } else {
        const int pk = j->phase == PHASE_PASSKEY;
        argv[n++] = pk ? "passkey" : "eval";
        argv[n++] = ckpt;
        argv[n++] = "--lengths";
        argv[n++] = pk ? plens : lengths;
        argv[n++] = pk ? "--depths" : "--tokens";
        argv[n++] = pk ? depths : tokens;
        if (pk) {
            argv[n++] = "--trials";
            argv[n++] = trials;
        }
        argv[n++] = "--json";
        argv[n++] = json;
        if (j->phase == PHASE_SLIDING) {
            argv[n++] = "--sliding";
            argv[n++] = sliding;
        }
        /* the variant's eval_set: the evaluation only (before the thread count, which is the sweep's) */
        for (int i = 0; i < r->n_eval_sets; i++) {
            argv[n++] = "--set";
            argv[n++] = r->eval_sets[i];
        }
    }
    argv[n++] = "--set";
    argv[n++] = threads;
    argv[n] = NULL;

    /* a FIFO or a device put there is refused, never opened (O_NONBLOCK: nor one put there meanwhile) */
    struct stat sb;
    if (stat(log, &sb) == 0 && !S_ISREG(sb.st_mode))
        return bk_fail(err, BK_ERR_IO, "run '%s': its log '%s' is %s; expected a regular file", r->name, log,
                       bk_file_kind(sb.st_mode));
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
    if (fd < 0)
        return bk_fail(err, BK_ERR_IO, "run '%s': cannot write '%s': %s", r->name, log, strerror(errno));
    int stat_failed = fstat(fd, &sb) != 0, e = errno;
    if (stat_failed || !S_ISREG(sb.st_mode)) {
        close(fd);
        if (stat_failed)
            return bk_fail(err, BK_ERR_IO, "run '%s': cannot write '%s': %s", r->name, log, strerror(e));
        return bk_fail(err, BK_ERR_IO, "run '%s': its log '%s' is %s; expected a regular file", r->name, log,
                       bk_file_kind(sb.st_mode));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    j->log_offset = (long)sb.st_size;
    dprintf(fd, "$");
    for (int i = 0; i < n; i++)
        dprintf(fd, " %s", argv[i]);
    dprintf(fd, "\n");

    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fd);
        return bk_fail(err, BK_ERR_INTERNAL, "run '%s': cannot start a process: %s", r->name, strerror(e));
    }
    if (pid == 0) {
        /* the child: its own process group, stopped (with a checkpoint) when the sweep dies */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGINT);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGINT, &dfl, NULL), sigaction(SIGTERM, &dfl, NULL), sigaction(SIGCHLD, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0)
            dup2(in, 0);
        dup2(fd, 1), dup2(fd, 2);
        if (c->jobs > 1) /* idle OpenMP threads that spin would take the cores of the other runs */
            setenv("OMP_WAIT_POLICY", "passive", 0);
        execv("/proc/self/exe", (char *const *)argv);
        dprintf(2, "biaskit: error: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no race with a signal passed on before the child ran */
    close(fd);
    j->pid = pid;
    j->started = bk_now_seconds();
    j->signalled = 0;
    return BK_OK;
}

/* Whether the sweep asks for a passkey grid that the run's directory does not hold. */
static int passkey_missing(const bk_sweep *sw, const bk_sweep_run *r)
{
    if (sw->n_passkey == 0)
        return 0;
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/" BK_SWEEP_PASSKEY_FILE, r->dir);
    return stat(path, &sb) != 0 || !S_ISREG(sb.st_mode);
}

/* The last "biaskit: error: " line the phase wrote, else a description of how it ended. */
static void child_error(const job *j, int status, char *out, size_t size)
{
    char log[4200];
    log_path(j, log, sizeof log);
    const char *what = j->phase == PHASE_TRAIN     ? "train"
                       : j->phase == PHASE_EVAL    ? "eval"
                       : j->phase == PHASE_SLIDING ? "eval --sliding"
                                                   : "passkey";
    if (WIFSIGNALED(status))
        snprintf(out, size, "%s killed by signal %d (%s); see %.1024s", what, WTERMSIG(status), strsignal(WTERMSIG(status)),
                 log);
    else
        snprintf(out, size, "%s exited with status %d; see %.1024s", what, WEXITSTATUS(status), log);
    FILE *f;
    bk_error ignored; /* a log that cannot be read (or is no longer a regular file) leaves the description */
    if (bk_file_open_regular(log, "run log", 0, &f, NULL, &ignored))
        return;
    fseek(f, j->log_offset, SEEK_SET);
    char line[BK_ERROR_MESSAGE_MAX + 64];
    static const char tag[] = "biaskit: error: ";
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, tag);
        if (!p)
            continue;
        p += sizeof tag - 1;
        p[strcspn(p, "\n")] = '\0';
        snprintf(out, size, "%s: %s", what, p);
    }
    fclose(f);
}

static void note_failure(sweep_ctx *c, const bk_sweep_run *r, const char *error)
{
    char **f = realloc(c->failures, (size_t)(c->n_failures + 1) * sizeof *f);
    if (!f)
        return;
    c->failures = f;
    size_t n = strlen(r->name) + strlen(error) + 3;
    if ((f[c->n_failures] = malloc(n)))
        snprintf(f[c->n_failures++], n, "%s: %s", r->name, error);
}

static void save_status(job *j)
{
    bk_error err;
    if (bk_sweep_write_status(j->run, &j->st, &err))
        fprintf(stderr, "biaskit: warning: %s\n", err.message);
}

static void fail_run(sweep_ctx *c, job *j, const char *error, double seconds)
{
    j->st.state = BK_RUN_FAILED;
    bk_copy_text(j->st.error, sizeof j->st.error, error);
    save_status(j);
    c->n_failed++;
    note_failure(c, j->run, error);
    printf("[%d/%d] %s: FAILED after %.1f s: %s\n", j->number, c->total, j->run->name, seconds, error);
    fflush(stdout);
}

/* Start the job's current phase; a run that cannot start fails. Returns 1 when a child runs. */
static int start_phase(sweep_ctx *c, job *j)
{
    bk_error err;
    j->st.state = j->phase == PHASE_TRAIN ? BK_RUN_TRAINING : BK_RUN_EVALUATING;
    j->st.error[0] = '\0';
    if (j->phase != PHASE_TRAIN) /* what the evaluation uses, recorded: a later change evaluates it again */
        bk_copy_text(j->st.eval_set, sizeof j->st.eval_set, j->run->eval_set_json ? j->run->eval_set_json : "");
    save_status(j);
    if (spawn(c, j, &err)) {
        fail_run(c, j, err.message, 0.0);
        return 0;
    }
    if (j->phase == PHASE_TRAIN)
        printf("[%d/%d] %s: %s (%d thread%s)\n", j->number, c->total, j->run->name,
               j->resumed ? "resuming from its checkpoint" : "training", run_threads(c, j->run),
               run_threads(c, j->run) == 1 ? "" : "s");
    fflush(stdout);
    return 1;
}

/* The sweep is stopping: the run keeps the state of what was under way; the next sweep resumes it. */
static void interrupt_run(sweep_ctx *c, job *j, bk_run_state state, const char *what, double seconds)
{
    j->st.state = state;
    snprintf(j->st.error, sizeof j->st.error, "interrupted %s; the next sweep resumes it", what);
    save_status(j);
    c->n_interrupted++;
    printf("[%d/%d] %s: interrupted %s after %.1f s\n", j->number, c->total, j->run->name, what, seconds);
    fflush(stdout);
}

/* A child of `j` ended with `status`: the next phase, or the run's end. Returns 1 when a child runs. */
static int child_ended(sweep_ctx *c, job *j, int status)
{
    double seconds = bk_now_seconds() - j->started;
    j->pid = 0;
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (j->phase == PHASE_TRAIN)
        j->st.train_seconds += seconds;
    else
        j->st.eval_seconds += seconds;
    if (!ok && stop_signals &&
        ((WIFEXITED(status) && WEXITSTATUS(status) == 130) ||
         (WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGKILL)))) {
        interrupt_run(c, j, j->phase == PHASE_TRAIN ? BK_RUN_TRAINING : BK_RUN_EVALUATING,
                      j->phase == PHASE_TRAIN ? "while training" : "while evaluating", seconds);
        return 0;
    }
    if (!ok) {
        char error[BK_ERROR_MESSAGE_MAX];
        child_error(j, status, error, sizeof error);
        fail_run(c, j, error, seconds);
        return 0;
    }
    if (j->phase != PHASE_TRAIN) { /* the evaluation's JSON, complete: into place */
        char tmp[4200], final[4200];
        json_path(j, 1, tmp, sizeof tmp);
        json_path(j, 0, final, sizeof final);
        if (rename(tmp, final) != 0) {
            char error[BK_ERROR_MESSAGE_MAX];
            snprintf(error, sizeof error, "cannot move '%.900s' to '%.900s': %s", tmp, final, strerror(errno));
            fail_run(c, j, error, seconds);
            return 0;
        }
    } else {
        j->trained = 1;
        printf("[%d/%d] %s: trained in %.1f s\n", j->number, c->total, j->run->name, seconds);
        fflush(stdout);
    }
    /* the next phase: train, eval, the sliding eval when asked, passkey retrieval when asked */
    int next = -1;
    if (j->phase == PHASE_TRAIN)
        next = PHASE_EVAL;
    else if (j->phase == PHASE_EVAL && c->sw->sliding > 0)
        next = PHASE_SLIDING;
    else if (j->phase != PHASE_PASSKEY && c->sw->n_passkey > 0)
        next = PHASE_PASSKEY;
    if (next >= 0) {
        if (stop_signals) {
            interrupt_run(c, j, BK_RUN_EVALUATING, "before evaluating", 0.0);
            return 0;
        }
        j->phase = next;
        return start_phase(c, j);
    }
    j->st.state = BK_RUN_DONE;
    j->st.error[0] = '\0';
    save_status(j);
    c->n_done++;
    printf("[%d/%d] %s: done (train %.1f s, eval %.1f s)\n", j->number, c->total, j->run->name, j->st.train_seconds,
           j->st.eval_seconds);
    fflush(stdout);
    return 0;
}

/* Whether a run with a twin (an earlier run of the same experiment) waits for the twin's training. */
static int waits_for_twin(const job *j)
{
    const job *t = j->twin_job;
    if (!j->twin || j->resumed || !t)
        return 0;
    if (t->number == 0) /* not started: it is earlier in the queue, and starts first */
        return !(t->prepare_error || t->run->invalid);
    return t->pid > 0 && t->phase == PHASE_TRAIN;
}

/* A run whose twin's training is complete takes a copy of it (its checkpoint and metrics) and is only
 * evaluated: 1 when it did. Else (no twin, the twin's training failed, or the copy failed: said) it
 * trains itself. */
static int share_twin_training(sweep_ctx *c, job *j)
{
    if (!j->twin || j->resumed)
        return 0;
    int ready = j->twin_job ? j->twin_job->trained
                            : (j->twin_state == BK_RUN_DONE || j->twin_state == BK_RUN_EVALUATING);
    /* a twin outside this sweep's queue (done, or not selected): its checkpoint must be of this experiment */
    if (!ready || !bk_sweep_trained_as(j->twin, j->run->text))
        return 0;
    bk_error err;
    char log[4200];
    snprintf(log, sizeof log, "%s/" BK_SWEEP_TRAIN_LOG, j->run->dir);
    if (bk_sweep_share_training(j->twin, j->run, &err)) {
        printf("[%d/%d] %s: %s; it trains itself\n", j->number, c->total, j->run->name, err.message);
        fflush(stdout);
        return 0;
    }
    FILE *f = fopen(log, "a"); /* the run's training log says where its training is */
    if (f) {
        fprintf(f, "the same experiment as run '%s' (experiment.toml): its checkpoint and metrics are copies of "
                   "that run's, trained once\n", j->twin->name);
        fclose(f);
    }
    j->resumed = 1;
    j->trained = 1;
    printf("[%d/%d] %s: the same experiment as %s: its training is shared; evaluating\n", j->number, c->total,
           j->run->name, j->twin->name);
    fflush(stdout);
    return 1;
}

/* ------------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------------- */

static void print_run(const bk_sweep_run *r, const bk_run_status *st, const bk_sweep_run *twin, const char *stale,
                      int rerun_stale)
{
    printf("%s  [%s]%s%s%s\n", r->name, bk_run_state_name(st->state), st->error[0] ? "  " : "", st->error,
           st->state == BK_RUN_DONE && !bk_sweep_eval_set_current(r, st)
               ? "  (evaluated with another eval_set: the sweep evaluates it again)"
               : "");
    for (int i = r->n_common_sets; i < r->n_sets; i++)
        printf("    %s\n", r->sets[i]);
    for (int i = 0; i < r->n_eval_sets; i++)
        printf("    eval: %s\n", r->eval_sets[i]);
    if (stale)
        printf("    STALE: %s (%s)\n", stale,
               rerun_stale ? "--rerun-stale: trained again" : "the sweep refuses to start; --rerun-stale trains it again");
    if (twin)
        printf("    training: %s's (the same experiment, trained once)\n", twin->name);
    if (r->invalid)
        printf("    cannot train: %s\n", r->invalid);
}

/* What validation holds for each corpus of the selected runs (the first run of each: [data] is the
 * corpus's), from the files' sizes: "data 'code': validation: 56 of 422 documents ...". */
static void print_validation(const bk_sweep *sw, const char *const *only, int n_only)
{
    for (int i = 0; i < sw->n_runs; i++) {
        const bk_sweep_run *r = &sw->runs[i];
        if (!bk_sweep_run_selected(r, only, n_only) || r->invalid)
            continue;
        int seen = 0;
        for (int k = 0; k < i && !seen; k++)
            seen = bk_sweep_run_selected(&sw->runs[k], only, n_only) && !sw->runs[k].invalid &&
                   !strcmp(sw->runs[k].corpus, r->corpus);
        if (seen)
            continue;
        bk_experiment exp;
        bk_data_split split;
        bk_error err = {0};
        char line[2048];
        if (bk_experiment_parse(r->text, r->name, NULL, 0, &exp, &err) == BK_OK) {
            if (bk_experiment_data_plan(&exp, r->dir, &split, &err) == BK_OK) {
                bk_data_split_describe(&split, 8, line, sizeof line);
                bk_data_split_free(&split);
            } else {
                snprintf(line, sizeof line, "validation: cannot be listed: %.1900s", err.message);
            }
            bk_experiment_free(&exp);
        } else {
            snprintf(line, sizeof line, "validation: cannot be listed: %.1900s", err.message);
        }
        printf("data '%s': %s\n", r->corpus, line);
    }
}

static int dry_run(const bk_sweep *sw, const char *const *only, int n_only, const bk_run_status *sts, int rerun_stale)
{
    int invalid = 0, n = 0, shared = 0, n_stale = 0;
    char shown[4096];
    bk_path_display(sw->path, shown, sizeof shown);
    printf("sweep: %s\n", shown);
    bk_path_display(sw->out_dir, shown, sizeof shown);
    printf("sweep directory: %s\n", shown);
    if (sw->base)
        bk_path_display(sw->base, shown, sizeof shown);
    printf("base: %s\n", sw->base ? shown : "(inline [base])");
    for (int i = 0; sw->n_runs && i < sw->runs[0].n_common_sets; i++)
        printf("    %s\n", sw->runs[0].sets[i]);
    printf("train length %lld; evaluation at", (long long)sw->train_length);
    for (int i = 0; i < sw->n_lengths; i++)
        printf("%s%d", i ? "," : " ", (int)sw->lengths[i]);
    printf(" (non-overlapping");
    if (sw->sliding)
        printf("; sliding, stride %lld", (long long)sw->sliding);
    printf("), %lld tokens\n", (long long)sw->tokens);
    if (sw->n_passkey) {
        printf("passkey retrieval at");
        for (int i = 0; i < sw->n_passkey; i++)
            printf("%s%d", i ? "," : " ", (int)sw->passkey[i]);
        printf("; depths");
        for (int i = 0; i < sw->n_passkey_depths; i++)
            printf("%s%g", i ? "," : " ", sw->passkey_depths[i]);
        printf("; %lld trials per cell\n", (long long)sw->passkey_trials);
    }
    print_validation(sw, only, n_only);
    printf("\n");
    bk_error err;
    int *first = calloc((size_t)sw->n_runs, sizeof *first);
    if (first && bk_sweep_first_of_experiment(sw, first, &err))
        free(first), first = NULL;
    for (int i = 0; i < sw->n_runs; i++) {
        if (!bk_sweep_run_selected(&sw->runs[i], only, n_only))
            continue;
        /* as the sweep would share it (a run with a checkpoint of its own resumes that instead) */
        const bk_sweep_run *twin = first && first[i] != i && !sw->runs[first[i]].invalid && !sw->runs[i].invalid &&
                                           !bk_sweep_has_checkpoint(&sw->runs[i])
                                       ? &sw->runs[first[i]]
                                       : NULL;
        char why[BK_SWEEP_STALE_WHY_MAX];
        int stale = bk_sweep_run_stale(&sw->runs[i], &sts[i], why, sizeof why);
        n_stale += stale;
        print_run(&sw->runs[i], &sts[i], twin, stale ? why : NULL, rerun_stale);
        shared += twin != NULL;
        invalid += sw->runs[i].invalid != NULL;
        n++;
    }
    free(first);
    printf("\n%d run%s", n, n == 1 ? "" : "s");
    if (shared)
        printf(", %d distinct trainings (%d run%s share%s the training of an identical experiment)",
               n - shared - invalid, shared, shared == 1 ? "" : "s", shared == 1 ? "s" : "");
    if (invalid)
        printf(", %d cannot train", invalid);
    if (n_stale)
        printf(", %d stale (%s)", n_stale, rerun_stale ? "trained again" : "the sweep refuses them: --rerun-stale");
    printf(" (dry run: nothing written)\n");
    return invalid || (n_stale && !rerun_stale) ? 1 : 0;
}

/* Every run's status.json; a damaged one is a warning, and the run starts again (from its checkpoint,
 * if any). */
static void read_states(const bk_sweep *sw, bk_run_status *sts)
{
    bk_error err;
    for (int i = 0; i < sw->n_runs; i++)
        if (bk_sweep_read_status(&sw->runs[i], &sts[i], &err)) {
            fprintf(stderr, "biaskit: warning: %s\n", err.message);
            sts[i].state = BK_RUN_PENDING;
        }
}

/* Stale runs (sweep/stale.h), before sweep.json is written: every run of the sweep is checked (sweep.json
 * describes them all, selected or not). Without `rerun` each is named on stderr with its first differing
 * key and the sweep refuses to start; with it, the stale runs are cleared (their state pending) and
 * trained again, unless --only leaves one out (sweep.json would still describe it with the new values). */
static int handle_stale(const bk_sweep *sw, bk_run_status *sts, const char *const *only, int n_only, int rerun,
                        bk_error *err)
{
    int n_stale = 0, unselected = 0;
    const char *example = NULL;
    char why[BK_SWEEP_STALE_WHY_MAX];
    for (int i = 0; i < sw->n_runs; i++) {
        if (!bk_sweep_run_stale(&sw->runs[i], &sts[i], why, sizeof why))
            continue;
        int selected = bk_sweep_run_selected(&sw->runs[i], only, n_only);
        n_stale++;
        example = example ? example : sw->runs[i].name;
        if (!rerun || !selected)
            fprintf(stderr, "biaskit: stale run '%s' [%s]: %s%s\n", sw->runs[i].name, bk_run_state_name(sts[i].state),
                    why, rerun ? " (not selected by --only)" : "");
        unselected += !selected;
    }
    if (!n_stale)
        return BK_OK;
    if (!rerun)
        return bk_fail(err, BK_ERR_CONFIG,
                       "biaskit sweep: %d run%s of '%s' %s stale (listed above, e.g. '%s'): %s trained from another "
                       "experiment than the sweep file now asks for, and %s results would be reported under the new "
                       "settings. Nothing was run or written. Train %s again with --rerun-stale, restore the sweep "
                       "file, or give the edited sweep another [sweep] out_dir",
                       n_stale, n_stale == 1 ? "" : "s", sw->path, n_stale == 1 ? "is" : "are", example,
                       n_stale == 1 ? "it was" : "they were", n_stale == 1 ? "its" : "their",
                       n_stale == 1 ? "it" : "them");
    if (unselected)
        return bk_fail(err, BK_ERR_USAGE,
                       "biaskit sweep --rerun-stale: %d stale run%s %s not selected by --only (listed above): "
                       "sweep.json would describe %s with settings %s not trained with; select %s too, or leave "
                       "--only out. Nothing was run or written",
                       unselected, unselected == 1 ? "" : "s", unselected == 1 ? "is" : "are",
                       unselected == 1 ? "it" : "them", unselected == 1 ? "it was" : "they were",
                       unselected == 1 ? "it" : "them");
    for (int i = 0; i < sw->n_runs; i++) {
        if (!bk_sweep_run_stale(&sw->runs[i], &sts[i], why, sizeof why))
            continue;
        printf("sweep: stale run %s: %s; training it again\n", sw->runs[i].name, why);
        int rc = bk_sweep_clear_run(&sw->runs[i], err);
        if (rc)
            return rc;
        memset(&sts[i], 0, sizeof sts[i]);
        sts[i].state = BK_RUN_PENDING;
    }
    fflush(stdout);
    return BK_OK;
}

int bk_cmd_sweep(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0},   {"jobs", 1, 0},   {"dry-run", 0, 0},
                                        {"only", 1, 1},   {"report", 0, 0}, {"plugin-timeout", 1, 0},
                                        {"rerun-stale", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit sweep", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help_head, stdout);
        fputs(bk_sweep_format_help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit sweep: expected one sweep file; see 'biaskit sweep --help'");
        return bk_report(&err);
    }
    long jobs = 1, timeout = BK_SWEEP_PLUGIN_TIMEOUT_S;
    const char *v = bk_args_get(&args, "jobs");
    if (v && bk_args_int("jobs", v, 1, 256, &jobs, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "plugin-timeout")) && bk_args_int("plugin-timeout", v, 1, 86400, &timeout, &err))
        return bk_report(&err);
    const char *only[BK_ARGS_MAX];
    int n_only = (int)bk_args_all(&args, "only", only, BK_ARGS_MAX);

    bk_sweep sw;
    bk_sweep_load_options lo = {only, n_only, (unsigned)timeout, 0, 0};
    if (bk_sweep_load_ex(args.positional[0], &lo, &sw, &err))
        return bk_report(&err);
    int selected = 0;
    for (int i = 0; i < sw.n_runs; i++)
        selected += bk_sweep_run_selected(&sw.runs[i], only, n_only);
    if (!selected) {
        char list[1024] = "";
        size_t used = 0;
        for (int i = 0; i < n_only && used < sizeof list; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", only[i]);
        bk_fail(&err, BK_ERR_USAGE, "biaskit sweep: no run of '%s' matches --only %s (%d runs, e.g. '%s')", sw.path,
                list, sw.n_runs, sw.runs[0].name);
        bk_sweep_free(&sw);
        return bk_report(&err);
    }
    bk_run_status *sts = calloc((size_t)sw.n_runs, sizeof *sts);
    job *jobsv = calloc((size_t)sw.n_runs, sizeof *jobsv);
    if (!sts || !jobsv) {
        free(sts), free(jobsv);
        bk_sweep_free(&sw);
        bk_fail(&err, BK_ERR_NOMEM, "out of memory");
        return bk_report(&err);
    }
    int rc = 0, dry = bk_args_get(&args, "dry-run") != NULL, rerun_stale = bk_args_get(&args, "rerun-stale") != NULL;
    if (dry) {
        read_states(&sw, sts);
        rc = dry_run(&sw, only, n_only, sts, rerun_stale);
        free(sts), free(jobsv);
        bk_sweep_free(&sw);
        return rc;
    }

    sweep_ctx c = {&sw, (int)jobs, sysconf(_SC_NPROCESSORS_ONLN), 0, 0, 0, 0, NULL, 0};
    if (c.threads_per_run_total < 1)
        c.threads_per_run_total = 1;
    /* one sweep at a time in a sweep directory: the states are read under its lock, before sweep.json is
     * written (a stale run stops the sweep with nothing written) */
    int lock = -1;
    int failed = bk_sweep_lock(&sw, &lock, &err);
    if (!failed)
        read_states(&sw, sts);
    if (failed || handle_stale(&sw, sts, only, n_only, rerun_stale, &err) || bk_sweep_write_index(&sw, &err)) {
        bk_sweep_unlock(&lock);
        free(sts), free(jobsv);
        bk_sweep_free(&sw);
        return bk_report(&err);
    }

    /* the queue: every selected run not yet done */
    int n_queue = 0, skipped = 0;
    for (int i = 0; i < sw.n_runs; i++) {
        if (!bk_sweep_run_selected(&sw.runs[i], only, n_only))
            continue;
        const int eval_set_current = bk_sweep_eval_set_current(&sw.runs[i], &sts[i]);
        if (sts[i].state == BK_RUN_DONE && eval_set_current && !passkey_missing(&sw, &sw.runs[i])) {
            skipped++;
            continue;
        }
        job *j = &jobsv[n_queue++];
        j->run = &sw.runs[i];
        j->st = sts[i];
        j->st.error[0] = '\0';
        if (sts[i].state == BK_RUN_DONE) { /* trained; its variant's eval_set changed since it was evaluated, or
                                              * the sweep now asks for a passkey grid it has not */
            j->st.state = BK_RUN_EVALUATING;
            j->reevaluate = eval_set_current ? "no passkey grid yet" : "its variant's eval_set changed";
        }
        /* every run's directory from the start: experiment.toml, and status.json "pending" when new */
        j->resumed = bk_sweep_has_checkpoint(j->run);
        if (bk_sweep_prepare_run(j->run, j->resumed, &err)) {
            if (!(j->prepare_error = strdup(err.message)))
                j->prepare_error = (char *)"out of memory";
        } else if (sts[i].state == BK_RUN_PENDING && bk_sweep_write_status(j->run, &j->st, &err))
            fprintf(stderr, "biaskit: warning: %s\n", err.message);
    }
    /* twins: a run whose experiment an earlier run has shares that run's training (no checkpoint of its own) */
    int *first = calloc((size_t)sw.n_runs, sizeof *first);
    job **of_run = calloc((size_t)sw.n_runs, sizeof *of_run);
    if (!first || !of_run || bk_sweep_first_of_experiment(&sw, first, &err)) {
        if (first && of_run)
            fprintf(stderr, "biaskit: warning: %s; runs of one experiment train separately\n", err.message);
        free(first), free(of_run);
        first = NULL, of_run = NULL;
    }
    for (int q = 0; first && q < n_queue; q++)
        of_run[jobsv[q].run - sw.runs] = &jobsv[q];
    for (int q = 0; first && q < n_queue; q++) {
        job *j = &jobsv[q];
        int k = first[j->run - sw.runs];
        if (k == (int)(j->run - sw.runs) || j->resumed || sw.runs[k].invalid)
            continue;
        j->twin = &sw.runs[k];
        j->twin_job = of_run[k];
        j->twin_state = sts[k].state;
        if (j->twin_job && j->twin_job->resumed && j->twin_job->st.state == BK_RUN_EVALUATING)
            j->twin_job->trained = 1; /* trained before: only evaluated */
    }
    free(first), free(of_run);
    c.total = n_queue;
    char shown[4096];
    bk_path_display(sw.out_dir, shown, sizeof shown);
    printf("sweep: %d run%s in %s", selected, selected == 1 ? "" : "s", shown);
    if (skipped)
        printf("; %d already done, skipped", skipped);
    printf("; %d to run, %d at a time\n", n_queue, c.jobs);
    fflush(stdout);

    struct sigaction sa, old_int, old_term, old_chld;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, &old_int), sigaction(SIGTERM, &sa, &old_term);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, &old_chld);
    sigset_t block, orig;
    sigemptyset(&block);
    sigaddset(&block, SIGINT), sigaddset(&block, SIGTERM), sigaddset(&block, SIGCHLD);
    sigprocmask(SIG_BLOCK, &block, &orig);
    stop_signals = 0;

    /* next: the first run not started; a run waiting for its twin's training lets later ones start */
    int next = 0, active = 0, started = 0;
    for (;;) {
        int progress = 0;
        for (int q = next; !stop_signals && active < c.jobs && q < n_queue; q++) {
            job *j = &jobsv[q];
            if (j->number || waits_for_twin(j))
                continue;
            j->number = ++started;
            progress = 1;
            if (j->prepare_error || j->run->invalid) {
                fail_run(&c, j, j->prepare_error ? j->prepare_error : j->run->invalid, 0.0);
                continue;
            }
            /* "evaluating" is written once training ended: such a run only evaluates again */
            j->phase = j->resumed && j->st.state == BK_RUN_EVALUATING ? PHASE_EVAL : PHASE_TRAIN;
            if (j->phase == PHASE_EVAL) {
                j->trained = 1;
                printf("[%d/%d] %s: trained before; evaluating%s%s%s\n", j->number, c.total, j->run->name,
                       j->reevaluate ? " again (" : "", j->reevaluate ? j->reevaluate : "", j->reevaluate ? ")" : "");
                fflush(stdout);
            } else if (share_twin_training(&c, j))
                j->phase = PHASE_EVAL;
            active += start_phase(&c, j);
        }
        while (next < n_queue && jobsv[next].number)
            next++;
        if (stop_signals) /* pass each stop on to the children (a third one kills them) */
            for (int i = 0; i < n_queue; i++)
                if (jobsv[i].pid > 0 && jobsv[i].signalled < stop_signals) {
                    kill(jobsv[i].pid, stop_signals >= 3 ? SIGKILL : SIGINT);
                    jobsv[i].signalled = stop_signals;
                }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            progress = 1;
            for (int i = 0; i < n_queue; i++)
                if (jobsv[i].pid == pid) {
                    if (!child_ended(&c, &jobsv[i], status))
                        active--;
                    break;
                }
        }
        if (active == 0 && (stop_signals || next == n_queue))
            break;
        if (!progress)
            sigsuspend(&orig);
    }
    sigprocmask(SIG_SETMASK, &orig, NULL);
    sigaction(SIGINT, &old_int, NULL), sigaction(SIGTERM, &old_term, NULL), sigaction(SIGCHLD, &old_chld, NULL);

    int not_started = n_queue - started;
    printf("\nsweep: %d run%s: %d done (%d before this sweep), %d failed", selected, selected == 1 ? "" : "s",
           c.n_done + skipped, skipped, c.n_failed);
    if (c.n_interrupted || not_started)
        printf(", %d interrupted, %d not started", c.n_interrupted, not_started);
    printf("\n");
    for (int i = 0; i < c.n_failures; i++)
        printf("  FAILED %s\n", c.failures[i]);
    if (stop_signals)
        printf("stopped by a signal: run the same command again to resume\n");
    rc = stop_signals ? 130 : c.n_failed ? 1 : 0;
    if (!stop_signals && bk_args_get(&args, "report")) {
        printf("\n");
        fflush(stdout);
        int report_rc = bk_report_sweep_dir(sw.out_dir, NULL, 0.0);
        rc = rc ? rc : report_rc;
    }
    bk_sweep_unlock(&lock);
    for (int i = 0; i < c.n_failures; i++)
        free(c.failures[i]);
    free(c.failures);
    for (int i = 0; i < n_queue; i++)
        if (jobsv[i].prepare_error && strcmp(jobsv[i].prepare_error, "out of memory") != 0)
            free(jobsv[i].prepare_error);
    free(sts), free(jobsv);
    bk_sweep_free(&sw);
    return rc;
}
