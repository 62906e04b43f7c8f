/* biaskit check: conformance checks of a plugin (check.h says what is checked and why). Layout:
 *   1. small tools: text buffers, random numbers, guarded float buffers
 *   2. reporting and the child processes every plugin call runs in
 *   3. the descriptor checks (no plugin code runs)
 *   4. instances and the plugin's functions, wrapped so every failure becomes a sentence
 *   5. the checks that call the plugin, one "unit" (child process) each
 *   6. the probes: create() with bad option values and bad geometries
 *   7. bk_check_plugin */
#define _GNU_SOURCE /* strsignal */
#include "plugin/check.h"

#include "config/experiment.h"
#include "device.h"
#include "model/positions.h"
#include "plugin/services.h"
#include "util/rng.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Gradients: central differences of L in float64 over shrinking steps, extrapolated to step 0 by
 * Ridders' method (the estimate with the smallest error estimate wins), so that neither truncation
 * (large steps) nor the float32 rounding of the plugin's outputs (small steps) decides the verdict. */
#define GRAD_FIRST_STEP 0.1      /* first h = 0.1 * max(|theta_i|, floor), for both floors: */
#define GRAD_STEP_FLOOR 0.1      /*   parameters of natural size ~1 resting near 0 (exponents) */
#define GRAD_STEP_FLOOR_SMALL 1e-3 /* parameters whose function bends within |theta| of them */
#define GRAD_SHRINK 1.4          /* h /= 1.4 per step, at most GRAD_STEPS steps */
#define GRAD_STEPS 10
#define GRAD_TOLERANCE 1e-3      /* relative error, see relative_error() */
#define GRAD_SCALE_SHARE 5e-2    /* a denominator is at least 5% of sum_k |w_k dOut_k/dtheta_i| */
#define GRAD_MAX_TABLE_ENTRIES 256
#define GRAD_MAX_EMBED_ENTRIES 64
#define ADD_TOLERANCE 1e-6       /* backward into a non-zero start: start + gradient, relative */
#define PREFIX_TOLERANCE 1e-6    /* the table at D distances vs the first D of the longest table */
#define EMBED_ADD_TOLERANCE 1e-6 /* embed into a non-zero start: start + embedding, relative */
#define CUDA_TABLE_RTOL 1e-5     /* |cuda - host| <= RTOL |host| + ATOL max|host of the head| */
#define CUDA_TABLE_ATOL 1e-6
#define CUDA_GRAD_TOL 1e-4       /* |cuda - host| <= TOL (|host_i| + max_j |host_j|) */
#define WILD_MIN_EXP (-3)        /* wild parameters for project(): random sign, 10^U(-3, 6) */
#define WILD_MAX_EXP 6
#define PERTURB_REL 0.25         /* random parameters: theta + N(0, (0.25 |theta| + 0.05)^2) */
#define PERTURB_ABS 0.05
#define GUARD_FLOATS 16          /* sentinels after every output: writing past the end is caught */
#define MAX_PARAMS (1ll << 28)
#define MAX_REPORTED 4           /* failing entries named in one line */

/* ================================================================================================
 * 1. Small tools
 * ============================================================================================== */

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_vprintf(strbuf *b, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *grown = realloc(b->s, cap);
        if (!grown)
            return; /* the text is cut short; a report line is never worth failing over */
        b->s = grown;
        b->cap = cap;
    }
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    b->len += (size_t)n;
}

__attribute__((format(printf, 2, 3))) static void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

static const char *sb_text(const strbuf *b)
{
    return b->s ? b->s : "";
}

/* The engine's SplitMix64 stream (util/rng.h), one per (seed, purpose, index). */
typedef bk_rng rng;

static rng rng_for(uint64_t seed, uint64_t purpose, uint64_t index)
{
    return (rng){bk_derive_seed(seed, purpose, index)};
}

static double rng_sym(rng *r) /* (-1, 1] */
{
    return 2.0 * bk_rng_uniform(r) - 1.0;
}

/* Random purposes (the second argument of rng_for). */
enum { R_PERTURB = 1, R_WEIGHTS, R_START, R_ENTRIES, R_WILD, R_POSITIONS, R_TOKENS, R_INIT };

/* A quiet NaN with a payload no arithmetic produces: marks memory a plugin has not written. */
static const uint32_t SENTINEL_BITS = 0x7fc5a5a5u;

static int is_sentinel(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits == SENTINEL_BITS;
}

static void fill_sentinel(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy(&v[i], &SENTINEL_BITS, sizeof SENTINEL_BITS);
}

/* n floats plus the guard, sentinel-filled; NULL when out of memory. */
static float *guarded_alloc(size_t n)
{
    float *v = malloc((n + GUARD_FLOATS) * sizeof *v);
    if (v)
        fill_sentinel(v, n + GUARD_FLOATS);
    return v;
}

static int guard_intact(const float *v, size_t n)
{
    for (size_t i = n; i < n + GUARD_FLOATS; i++)
        if (!is_sentinel(v[i]))
            return 0;
    return 1;
}

/* Index of the first non-finite value, or -1. */
static long long first_non_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return (long long)i;
    return -1;
}

static int bits_equal(const float *a, const float *b, size_t n, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0) {
            *at = i;
            return 0;
        }
    return 1;
}

/* ================================================================================================
 * 2. Reporting, and the child processes
 * ============================================================================================== */

typedef struct checker {
    const bk_check_options *opt;
    const bk_plugin *plugin;
    const biaskit_plugin *d;
    biaskit_geometry geo;
    char *exp_text;             /* the experiment the default configuration comes from */
    char **overrides;           /* "term.0.KEY=VALUE" for each --set, then one free slot for a probe */
    size_t n_overrides;
    bk_experiment exp;
    int have_exp;
    biaskit_config view;        /* the default configuration */
    bk_check_report_fn report;
    void *ctx;
    bk_check_counts *counts;
    int out_fd;                 /* in a child: the pipe to the parent; -1 in the parent */
} checker;

const char *bk_check_status_name(bk_check_status status)
{
    switch (status) {
    case BK_CHECK_PASS: return "PASS";
    case BK_CHECK_FAIL: return "FAIL";
    case BK_CHECK_SKIP: return "SKIP";
    }
    return "?";
}

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        s += k;
        n -= (size_t)k;
    }
}

/* One line to the parent: TAG \t ID \t TEXT, with tabs and newlines of the text made spaces. */
static void child_line(const checker *c, char tag, const char *id, const char *text)
{
    strbuf b = {0};
    sb_printf(&b, "%c\t%s\t%s\n", tag, id, text);
    for (size_t i = 2 + strlen(id) + 1; b.s && i + 1 < b.len; i++)
        if (b.s[i] == '\t' || b.s[i] == '\n' || b.s[i] == '\r')
            b.s[i] = ' ';
    if (b.s)
        write_all(c->out_fd, b.s, b.len);
    free(b.s);
}

static char status_tag(bk_check_status s)
{
    return s == BK_CHECK_PASS ? 'P' : s == BK_CHECK_FAIL ? 'F' : 'S';
}

static void deliver(checker *c, bk_check_status status, const char *id, const char *text)
{
    if (c->out_fd >= 0) {
        child_line(c, status_tag(status), id, text);
        return;
    }
    if (status == BK_CHECK_PASS)
        c->counts->passed++;
    else if (status == BK_CHECK_FAIL)
        c->counts->failed++;
    else
        c->counts->skipped++;
    bk_check_item it = {status, id, text};
    if (c->report)
        c->report(c->ctx, &it);
}

__attribute__((format(printf, 4, 5))) static void item(checker *c, bk_check_status status, const char *id,
                                                       const char *fmt, ...)
{
    strbuf b = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    deliver(c, status, id, sb_text(&b));
    free(b.s);
}

/* What a child is doing, so that a crash can say where it happened. */
__attribute__((format(printf, 2, 3))) static void stage(const checker *c, const char *fmt, ...)
{
    if (c->out_fd < 0)
        return;
    static char last[256]; /* a child announces each new stage once */
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (strcmp(text, last) == 0)
        return;
    memcpy(last, text, sizeof last);
    child_line(c, '@', "", text);
}

typedef void (*child_fn)(checker *c, const void *arg);

typedef struct child_result {
    strbuf output;   /* every line the child wrote */
    int finished;    /* it wrote its end line */
    int signal;      /* killed by this signal, or 0 */
    int exit_status; /* when it exited */
    char stage[256]; /* the last stage it announced */
} child_result;

/* The child: default signal actions (a test harness may have installed its own handlers, which
 * must not run inside the child), a time limit, the work, an end line, _exit (not exit: the parent's
 * stdio buffers and atexit handlers are the parent's). */
static _Noreturn void child_main(checker *c, int fd, child_fn fn, const void *arg)
{
    static const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP, SIGALRM, SIGPIPE};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        signal(signals[i], SIG_DFL);
        sigaddset(&set, signals[i]);
    }
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    c->out_fd = fd;
    alarm(c->opt->timeout_s);
    fn(c, arg);
    child_line(c, 'E', "", "");
    _exit(0);
}

static void scan_markers(child_result *r)
{
    const char *s = sb_text(&r->output);
    while (*s) {
        const char *end = strchr(s, '\n');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len >= 1 && s[0] == 'E')
            r->finished = 1;
        if (len >= 3 && s[0] == '@') {
            size_t n = len - 3 < sizeof r->stage - 1 ? len - 3 : sizeof r->stage - 1;
            memcpy(r->stage, s + 3, n);
            r->stage[n] = '\0';
        }
        s += len + (end ? 1 : 0);
    }
}

static int run_child(checker *c, child_fn fn, const void *arg, child_result *r, bk_error *err)
{
    memset(r, 0, sizeof *r);
    int fds[2];
    if (pipe(fds) != 0)
        return bk_fail(err, BK_ERR_INTERNAL, "biaskit check: cannot create a pipe: %s", strerror(errno));
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return bk_fail(err, BK_ERR_INTERNAL, "biaskit check: cannot start a child process (fork): %s", strerror(e));
    }
    if (pid == 0) {
        close(fds[0]);
        child_main(c, fds[1], fn, arg);
    }
    close(fds[1]);
    char buf[4096];
    for (;;) {
        ssize_t k = read(fds[0], buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        sb_printf(&r->output, "%.*s", (int)k, buf);
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status))
        r->signal = WTERMSIG(status);
    else if (WIFEXITED(status))
        r->exit_status = WEXITSTATUS(status);
    scan_markers(r);
    return BK_OK;
}

/* Why a child did not finish, as a phrase: "crashed with signal 11 (Segmentation fault) in create()". */
static void describe_abort(const checker *c, const child_result *r, char *buf, size_t size)
{
    char where[300] = "";
    if (r->stage[0])
        snprintf(where, sizeof where, " in %s", r->stage);
    if (r->signal == SIGALRM)
        snprintf(buf, size, "did not finish within %u s%s", c->opt->timeout_s, where);
    else if (r->signal)
        snprintf(buf, size, "crashed with signal %d (%s)%s", r->signal, strsignal(r->signal), where);
    else
        snprintf(buf, size, "the process ended with exit status %d%s before the check finished (plugin code must "
                 "never call exit())", r->exit_status, where);
}

/* Calls fn(line fields) for each item line (tags P, F, S, R) a child wrote. */
typedef void (*line_fn)(checker *c, char tag, const char *id, const char *text, void *ctx);

static void for_each_line(checker *c, const child_result *r, line_fn fn, void *ctx)
{
    strbuf copy = {0};
    sb_printf(&copy, "%s", sb_text(&r->output));
    char *save = NULL;
    for (char *line = copy.s ? strtok_r(copy.s, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        char *id = strchr(line, '\t');
        char *text = id ? strchr(id + 1, '\t') : NULL;
        if (!id || !text || !strchr("PFSR", line[0]))
            continue;
        *id++ = '\0';
        *text++ = '\0';
        fn(c, line[0], id, text, ctx);
    }
    free(copy.s);
}

static void forward_line(checker *c, char tag, const char *id, const char *text, void *ctx)
{
    int *passed = ctx; /* set when the unit reported "create" as passed */
    if (tag == 'R')
        return;
    bk_check_status s = tag == 'P' ? BK_CHECK_PASS : tag == 'F' ? BK_CHECK_FAIL : BK_CHECK_SKIP;
    deliver(c, s, id, text);
    if (passed && s == BK_CHECK_PASS && strcmp(id, "create") == 0)
        *passed = 1;
}

/* Runs one unit of checks in a child and reports its items; a child that does not finish is a FAIL
 * of `id`. *created (may be NULL) is set when the unit reported "create" as passed. */
static int run_unit(checker *c, const char *id, const char *what, child_fn fn, const void *arg, int *created,
                    bk_error *err)
{
    child_result r;
    int rc = run_child(c, fn, arg, &r, err);
    if (rc)
        return rc;
    int passed = 0;
    for_each_line(c, &r, forward_line, &passed);
    if (!r.finished) {
        char why[600];
        describe_abort(c, &r, why, sizeof why);
        item(c, BK_CHECK_FAIL, id, "%s: %s", what, why);
    }
    free(r.output.s);
    if (created)
        *created = passed;
    return BK_OK;
}

/* ================================================================================================
 * 3. The descriptor (nothing of the plugin runs)
 * ============================================================================================== */

static int is_identifier(const char *s, int allow_dash)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || (allow_dash && *s == '-')))
            return 0;
    return 1;
}

static int is_one_line(const char *s)
{
    return s && *s && !strchr(s, '\n') && !strchr(s, '\r');
}

static void check_descriptor_fields(checker *c)
{
    const biaskit_plugin *d = c->d;
    strbuf bad = {0};
    if (!is_identifier(d->name, 1))
        sb_printf(&bad, "; name '%s' is not [a-z0-9_-]+", d->name ? d->name : "(null)");
    if (!is_one_line(d->version))
        sb_printf(&bad, "; version must be a non-empty one-line string");
    if (!is_one_line(d->summary))
        sb_printf(&bad, "; summary must be a non-empty one-line string (`biaskit plugins` prints it on one line)");
    if (d->reference && !is_one_line(d->reference))
        sb_printf(&bad, "; reference must be NULL or a non-empty one-line string");
    if (bad.len)
        item(c, BK_CHECK_FAIL, "descriptor", "descriptor fields: %s", bad.s + 2);
    else
        item(c, BK_CHECK_PASS, "descriptor", "descriptor: name '%s', version '%s', summary%s present", d->name,
             d->version, d->reference ? " and reference" : "");
    free(bad.s);
}

static void check_capabilities(checker *c)
{
    const biaskit_plugin *d = c->d;
    uint32_t caps = d->capabilities;
    const uint32_t known = BIASKIT_CAP_TABLE | BIASKIT_CAP_SEGMENT | BIASKIT_CAP_EMBED | BIASKIT_CAP_ROTARY;
    strbuf bad = {0};
    if (!caps)
        sb_printf(&bad, "; declares no capability (TABLE, SEGMENT, EMBED or ROTARY): the engine has nothing to call");
    if (caps & BIASKIT_CAP_WEIGHT)
        sb_printf(&bad, "; declares BIASKIT_CAP_WEIGHT, which is reserved and not part of ABI %u", BIASKIT_ABI_VERSION);
    if (caps & ~(known | BIASKIT_CAP_WEIGHT))
        sb_printf(&bad, "; unknown capability bits 0x%x", caps & ~(known | BIASKIT_CAP_WEIGHT));
    if (d->flags & ~(uint32_t)BIASKIT_FLAG_PER_LAYER)
        sb_printf(&bad, "; unknown flag bits 0x%x", d->flags & ~(uint32_t)BIASKIT_FLAG_PER_LAYER);
    int table = (caps & BIASKIT_CAP_TABLE) != 0, embed = (caps & BIASKIT_CAP_EMBED) != 0;
    if (table && !d->table)
        sb_printf(&bad, "; TABLE needs table()");
    if (table && d->param_count && !d->table_backward)
        sb_printf(&bad, "; TABLE with parameters (param_count) needs table_backward()");
    if (d->param_count && !d->param_init)
        sb_printf(&bad, "; param_count needs param_init()");
    if ((caps & BIASKIT_CAP_SEGMENT) && !d->segment)
        sb_printf(&bad, "; SEGMENT needs segment()");
    if (embed && !d->embed)
        sb_printf(&bad, "; EMBED needs embed()");
    if (embed && d->param_count && !d->embed_backward)
        sb_printf(&bad, "; EMBED with parameters (param_count) needs embed_backward()");
    if ((caps & BIASKIT_CAP_ROTARY) && !d->rotary_frequencies)
        sb_printf(&bad, "; ROTARY needs rotary_frequencies()");
    if (d->table_backward_cuda && !d->table_cuda)
        sb_printf(&bad, "; table_backward_cuda() without table_cuda() is suspicious: the forward table would come "
                  "from the host and its gradient from the device");
    if (!table && (d->table || d->table_backward || d->table_cuda || d->table_backward_cuda))
        sb_printf(&bad, "; has table functions but does not declare BIASKIT_CAP_TABLE (the engine never calls them)");
    if (!(caps & BIASKIT_CAP_SEGMENT) && d->segment)
        sb_printf(&bad, "; has segment() but does not declare BIASKIT_CAP_SEGMENT");
    if (!embed && (d->embed || d->embed_backward))
        sb_printf(&bad, "; has embed functions but does not declare BIASKIT_CAP_EMBED");
    if (!(caps & BIASKIT_CAP_ROTARY) && d->rotary_frequencies)
        sb_printf(&bad, "; has rotary_frequencies() but does not declare BIASKIT_CAP_ROTARY");
    char names[128];
    bk_capabilities_string(caps, names, sizeof names);
    if (bad.len)
        item(c, BK_CHECK_FAIL, "capabilities", "capabilities (%s): %s", names, bad.s + 2);
    else
        item(c, BK_CHECK_PASS, "capabilities", "capabilities (%s%s%s) match the function pointers", names,
             d->param_count ? "; learnable" : "", d->table_cuda ? "; CUDA table" : "");
    free(bad.s);
}

/* Problems of a choice list "a|b|c" (empty alternatives, repeats), appended to bad. */
static void check_choice_list(const biaskit_option *o, strbuf *bad)
{
    const char *s = o->choices;
    size_t n = strlen(s);
    if (n == 0 || s[0] == '|' || s[n - 1] == '|' || strstr(s, "||"))
        sb_printf(bad, "; option '%s': choices \"%s\" has an empty alternative", o->name, s);
    for (const char *a = s; *a;) {
        size_t len = strcspn(a, "|");
        for (const char *b = a + len + (a[len] ? 1 : 0); *b;) {
            size_t blen = strcspn(b, "|");
            if (blen == len && len > 0 && strncmp(a, b, len) == 0)
                sb_printf(bad, "; option '%s': choice '%.*s' is listed twice", o->name, (int)len, a);
            b += blen + (b[blen] ? 1 : 0);
        }
        a += len + (a[len] ? 1 : 0);
    }
}

static void check_option_declaration(const biaskit_option *o, strbuf *bad)
{
    if (!is_identifier(o->name, 0)) {
        sb_printf(bad, "; an option name '%s' is not [a-z0-9_]+", o->name ? o->name : "(null)");
        return;
    }
    if (!is_one_line(o->doc))
        sb_printf(bad, "; option '%s': doc must be a non-empty one-line string (`biaskit plugins` shows it)", o->name);
    double v = o->default_number;
    switch (o->type) {
    case BIASKIT_OPT_BOOL:
        if (v != 0.0 && v != 1.0)
            sb_printf(bad, "; option '%s': a bool default must be 0 or 1, got %g", o->name, v);
        break;
    case BIASKIT_OPT_INT:
        if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0)
            sb_printf(bad, "; option '%s': an int default must be a whole number, got %g", o->name, v);
        break;
    case BIASKIT_OPT_DOUBLE:
        if (!isfinite(v))
            sb_printf(bad, "; option '%s': a float default must be finite, got %g", o->name, v);
        break;
    case BIASKIT_OPT_STRING:
        if (!o->default_string)
            sb_printf(bad, "; option '%s': a string default must not be NULL (give \"\" for none)", o->name);
        break;
    case BIASKIT_OPT_DOUBLE_ARRAY:
    case BIASKIT_OPT_STRING_ARRAY: break;
    }
    if (o->choices && o->type != BIASKIT_OPT_STRING)
        sb_printf(bad, "; option '%s': choices are only checked for string options, this one is a %s", o->name,
                  bk_option_type_name(o->type));
    if (o->choices && o->type == BIASKIT_OPT_STRING) {
        check_choice_list(o, bad);
        if (o->default_string && bk_choice_index(o->choices, o->default_string) < 0)
            sb_printf(bad, "; option '%s': default \"%s\" is not one of its choices \"%s\"", o->name, o->default_string,
                      o->choices);
    }
}

static void check_option_declarations(checker *c)
{
    const biaskit_plugin *d = c->d;
    strbuf bad = {0};
    for (uint32_t i = 0; i < d->n_options; i++)
        check_option_declaration(&d->options[i], &bad);
    if (bad.len)
        item(c, BK_CHECK_FAIL, "options", "option declarations: %s", bad.s + 2);
    else
        item(c, BK_CHECK_PASS, "options", "%u option declaration%s well formed (names, docs, defaults, choices)",
             d->n_options, d->n_options == 1 ? "" : "s");
    free(bad.s);
}

/* ================================================================================================
 * 4. Instances and the plugin's functions
 * ============================================================================================== */

typedef struct instance {
    const checker *c;
    void *inst;
    biaskit_geometry geo;
    int64_t n_params;
    float *theta; /* n_params values; NULL when there are none */
} instance;

static void instance_close(instance *in)
{
    if (in->c) {
        stage(in->c, "destroy()");
        in->c->d->destroy(in->inst);
    }
    free(in->theta);
    memset(in, 0, sizeof *in);
}

/* How a call went: done, refused with a message (an allowed answer to bad input), or broken (no
 * message, output written past its end or left unwritten, nonsense counts). */
enum { CALL_OK = 0, CALL_REFUSED = 1, CALL_BROKEN = 2 };

/* The answer of a failed call: CALL_REFUSED with its message, or CALL_BROKEN without one. */
static int refusal(const char *call, int rc, biaskit_error *pe, char *why, size_t size)
{
    pe->message[sizeof pe->message - 1] = '\0';
    if (pe->message[0]) {
        snprintf(why, size, "%s failed: %s", call, pe->message);
        return CALL_REFUSED;
    }
    snprintf(why, size, "%s failed (code %d) without a message", call, rc);
    return CALL_BROKEN;
}

/* create() and the parameter vector (zeros): CALL_OK, or CALL_REFUSED / CALL_BROKEN with why. */
static int instance_create(const checker *c, const biaskit_config *view, const biaskit_geometry *geo,
                           instance *in, char *why, size_t size)
{
    memset(in, 0, sizeof *in);
    in->geo = *geo;
    biaskit_error pe = {0};
    stage(c, "create()");
    int rc = c->d->create(bk_services(), view, geo, &in->inst, &pe);
    if (rc != BIASKIT_OK)
        return refusal("create()", rc, &pe, why, size);
    in->c = c;
    stage(c, "param_count()");
    in->n_params = c->d->param_count ? c->d->param_count(in->inst) : 0;
    if (in->n_params < 0 || in->n_params > MAX_PARAMS) {
        snprintf(why, size, "param_count() returned %lld (expected 0 .. %lld)", (long long)in->n_params,
                 (long long)MAX_PARAMS);
        instance_close(in);
        return CALL_BROKEN;
    }
    if (in->n_params > 0 && !(in->theta = calloc((size_t)in->n_params, sizeof *in->theta))) {
        snprintf(why, size, "out of memory for %lld parameters", (long long)in->n_params);
        instance_close(in);
        return CALL_BROKEN;
    }
    return CALL_OK;
}

static size_t n_params(const instance *in)
{
    return (size_t)in->n_params;
}

static void project(const instance *in, float *theta)
{
    if (in->n_params > 0 && in->c->d->param_project) {
        stage(in->c, "param_project()");
        in->c->d->param_project(in->inst, theta);
    }
}

/* param_init(seed) into theta (in->theta when NULL), then param_project. */
static int init_params(const instance *in, float *theta, uint64_t seed, char *why, size_t size)
{
    if (in->n_params == 0)
        return 0;
    theta = theta ? theta : in->theta;
    biaskit_error pe = {0};
    stage(in->c, "param_init()");
    int rc = in->c->d->param_init(in->inst, theta, seed, &pe);
    if (rc != BIASKIT_OK)
        return refusal("param_init()", rc, &pe, why, size);
    project(in, theta);
    return 0;
}

/* Random parameters: param_init, theta + N(0, (0.25 |theta| + 0.05)^2), param_project. */
static int random_params(const instance *in, uint64_t seed, char *why, size_t size)
{
    if (init_params(in, NULL, bk_derive_seed(seed, R_INIT, 0), why, size))
        return 1;
    rng r = rng_for(seed, R_PERTURB, 0);
    for (size_t i = 0; i < n_params(in); i++) {
        double t = in->theta[i];
        in->theta[i] = (float)(t + (PERTURB_REL * fabs(t) + PERTURB_ABS) * bk_rng_normal(&r));
    }
    project(in, in->theta);
    return 0;
}

/* Names entry i of theta after the plugin's tensors: "r2[3]", "table[5,17]", else "theta[i]". */
static void entry_name(const instance *in, int64_t i, char *buf, size_t size)
{
    biaskit_tensor_info t[64];
    int32_t n = in->c->d->param_tensors ? in->c->d->param_tensors(in->inst, t, 64) : 0;
    for (int32_t k = 0; k < n && k < 64; k++) {
        int64_t len = (int64_t)t[k].rows * t[k].cols;
        if (t[k].name && i >= t[k].offset && i < t[k].offset + len && t[k].cols > 0) {
            int64_t j = i - t[k].offset;
            if (t[k].cols == 1)
                snprintf(buf, size, "%s[%lld]", t[k].name, (long long)j);
            else
                snprintf(buf, size, "%s[%lld,%lld]", t[k].name, (long long)(j / t[k].cols), (long long)(j % t[k].cols));
            return;
        }
    }
    snprintf(buf, size, "theta[%lld]", (long long)i);
}

/* What the gradient checks differentiate: the table at `distances`, or the embedding of `positions`. */
typedef enum { FN_TABLE, FN_EMBED } fn_kind;

typedef struct model_fn {
    fn_kind kind;
    int32_t distances;
    const int32_t *positions;
    int64_t count;
} model_fn;

static size_t fn_outputs(const instance *in, const model_fn *m)
{
    if (m->kind == FN_TABLE)
        return (size_t)(in->geo.n_heads > 0 ? in->geo.n_heads : 0) * (size_t)m->distances;
    return (size_t)m->count * (size_t)(in->geo.d_model > 0 ? in->geo.d_model : 0);
}

/* "head 3, distance 40000" or "token 5, channel 17" for output index k. */
static void output_place(const instance *in, const model_fn *m, size_t k, char *buf, size_t size)
{
    if (m->kind == FN_TABLE)
        snprintf(buf, size, "head %zu, distance %zu", k / (size_t)m->distances, k % (size_t)m->distances);
    else
        snprintf(buf, size, "position %d (token %zu), channel %zu", m->positions[k / (size_t)in->geo.d_model],
                 k / (size_t)in->geo.d_model, k % (size_t)in->geo.d_model);
}

static void fn_label(const model_fn *m, char *buf, size_t size)
{
    if (m->kind == FN_TABLE)
        snprintf(buf, size, "table() with %d distances", m->distances);
    else
        snprintf(buf, size, "embed() of %lld positions", (long long)m->count);
}

/* The plugin's output into out (fn_outputs + guard floats): the table, or the embedding added to
 * zeros (or to `start` when not NULL). CALL_OK; CALL_REFUSED (failed with a message) or CALL_BROKEN
 * (failed without one, wrote past its end, left an entry unwritten) with why. Non-finite values are
 * the caller's business. */
static int forward(const instance *in, const model_fn *m, const float *theta, const float *start, float *out,
                   char *why, size_t size)
{
    size_t n = fn_outputs(in, m);
    char label[96];
    fn_label(m, label, sizeof label);
    fill_sentinel(out, n + GUARD_FLOATS);
    if (m->kind == FN_EMBED)
        for (size_t k = 0; k < n; k++)
            out[k] = start ? start[k] : 0.0f;
    biaskit_error pe = {0};
    stage(in->c, "%s", label);
    int rc = m->kind == FN_TABLE ? in->c->d->table(in->inst, theta, m->distances, out, &pe)
                                 : in->c->d->embed(in->inst, theta, m->positions, m->count, out, &pe);
    if (rc != BIASKIT_OK)
        return refusal(label, rc, &pe, why, size);
    if (!guard_intact(out, n)) {
        snprintf(why, size, "%s wrote past the end of its %zu output values", label, n);
        return CALL_BROKEN;
    }
    for (size_t k = 0; k < n; k++)
        if (is_sentinel(out[k])) {
            char place[96];
            output_place(in, m, k, place, sizeof place);
            snprintf(why, size, "%s left %s unwritten", label, place);
            return CALL_BROKEN;
        }
    return CALL_OK;
}

/* forward() that also requires every value to be finite. */
static int forward_finite(const instance *in, const model_fn *m, const float *theta, float *out, char *why,
                          size_t size)
{
    if (forward(in, m, theta, NULL, out, why, size))
        return 1;
    long long k = first_non_finite(out, fn_outputs(in, m));
    if (k < 0)
        return 0;
    char label[96], place[96];
    fn_label(m, label, sizeof label);
    output_place(in, m, (size_t)k, place, sizeof place);
    snprintf(why, size, "%s gives %g at %s", label, (double)out[k], place);
    return 1;
}

/* dtheta += d(sum w * out)/dtheta through table_backward or embed_backward. */
static int backward(const instance *in, const model_fn *m, const float *theta, const float *w, float *dtheta,
                    char *why, size_t size)
{
    const char *name = m->kind == FN_TABLE ? "table_backward()" : "embed_backward()";
    biaskit_error pe = {0};
    stage(in->c, "%s", name);
    int rc = m->kind == FN_TABLE
                 ? in->c->d->table_backward(in->inst, theta, m->distances, w, dtheta, &pe)
                 : in->c->d->embed_backward(in->inst, theta, m->positions, m->count, w, dtheta, &pe);
    if (rc != BIASKIT_OK)
        return refusal(name, rc, &pe, why, size);
    if (!guard_intact(dtheta, n_params(in))) {
        snprintf(why, size, "%s wrote past the end of dtheta (%lld values)", name, (long long)in->n_params);
        return 1;
    }
    long long k = first_non_finite(dtheta, n_params(in));
    if (k >= 0) {
        char entry[64];
        entry_name(in, k, entry, sizeof entry);
        snprintf(why, size, "%s gives %g for %s", name, (double)dtheta[k], entry);
        return 1;
    }
    return 0;
}

static void random_fill(float *v, size_t n, rng *r)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)rng_sym(r);
}

/* ================================================================================================
 * 5. The checks that call the plugin
 * ============================================================================================== */

/* Opens the default instance with parameters from `seed` (random when `random`, else initial); on
 * failure reports `id` as FAIL (the checks of this unit cannot run) and returns 1. */
static int open_default(checker *c, const char *id, uint64_t seed, int random, instance *in)
{
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (instance_create(c, &c->view, &c->geo, in, why, sizeof why)) {
        item(c, BK_CHECK_FAIL, id, "%s: cannot run: %s", id, why);
        return 1;
    }
    if (random ? random_params(in, seed, why, sizeof why) : init_params(in, NULL, seed, why, sizeof why)) {
        item(c, BK_CHECK_FAIL, id, "%s: %s", id, why);
        instance_close(in);
        return 1;
    }
    return 0;
}

static int32_t table_heads(const checker *c)
{
    return c->geo.n_heads;
}

/* ---- create() with the default configuration ---------------------------------------------------- */

static void check_tensors(checker *c, const instance *in)
{
    const biaskit_plugin *d = c->d;
    if (in->n_params == 0) {
        item(c, BK_CHECK_PASS, "parameters", "no learnable parameters with the default configuration");
        return;
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 64];
    if (init_params(in, NULL, c->opt->seed, why, sizeof why)) {
        item(c, BK_CHECK_FAIL, "parameters", "%lld parameters: %s", (long long)in->n_params, why);
        return;
    }
    if (!d->param_tensors) {
        item(c, BK_CHECK_PASS, "parameters", "%lld learnable parameters, param_init works (no param_tensors: entries "
             "are called theta[i])", (long long)in->n_params);
        return;
    }
    biaskit_tensor_info probe = {"(untouched)", -7, -7, -7};
    stage(c, "param_tensors()");
    int32_t n = d->param_tensors(in->inst, &probe, 0);
    strbuf bad = {0}, list = {0};
    if (probe.offset != -7)
        sb_printf(&bad, "; param_tensors(capacity 0) wrote an entry");
    biaskit_tensor_info *t = n > 0 ? calloc((size_t)n, sizeof *t) : NULL;
    if (n < 0 || (n > 0 && !t))
        sb_printf(&bad, "; param_tensors() returned %d", n);
    int32_t again = t ? d->param_tensors(in->inst, t, n) : 0;
    if (t && again != n)
        sb_printf(&bad, "; param_tensors() returned %d, then %d", n, again);
    int64_t covered = 0;
    for (int32_t k = 0; t && k < n; k++) {
        int64_t len = (int64_t)t[k].rows * t[k].cols;
        if (!t[k].name || !*t[k].name || t[k].rows < 1 || t[k].cols < 1 || t[k].offset < 0 ||
            t[k].offset + len > in->n_params)
            sb_printf(&bad, "; tensor #%d (%s) offset %lld, %dx%d is not inside theta (%lld values)", k,
                      t[k].name ? t[k].name : "no name", (long long)t[k].offset, t[k].rows, t[k].cols,
                      (long long)in->n_params);
        for (int32_t j = 0; j < k; j++) {
            if (t[j].name && t[k].name && strcmp(t[j].name, t[k].name) == 0)
                sb_printf(&bad, "; tensor name '%s' is used twice", t[k].name);
            int64_t jl = (int64_t)t[j].rows * t[j].cols;
            if (t[k].offset < t[j].offset + jl && t[j].offset < t[k].offset + len)
                sb_printf(&bad, "; tensors '%s' and '%s' overlap", t[j].name ? t[j].name : "?",
                          t[k].name ? t[k].name : "?");
        }
        covered += len;
        sb_printf(&list, "%s%s[%dx%d]", k ? ", " : "", t[k].name ? t[k].name : "?", t[k].rows, t[k].cols);
    }
    if (t && !bad.len && covered != in->n_params)
        sb_printf(&bad, "; the tensors cover %lld of the %lld parameters", (long long)covered, (long long)in->n_params);
    if (bad.len)
        item(c, BK_CHECK_FAIL, "parameters", "%lld parameters: %s", (long long)in->n_params, bad.s + 2);
    else
        item(c, BK_CHECK_PASS, "parameters", "%lld learnable parameters (%s), param_init works",
             (long long)in->n_params, sb_text(&list));
    free(t);
    free(bad.s);
    free(list.s);
}

static void unit_create(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    const biaskit_geometry *g = &c->geo;
    char config[160];
    snprintf(config, sizeof config, "%d layers, %d heads, d_model %d, d_head %d, vocab %d, train_length %d%s",
             g->n_layers, g->n_heads, g->d_model, g->d_head, g->vocab_size, g->train_length,
             c->opt->n_sets ? ", with --set options" : "");
    if (instance_create(c, &c->view, g, &in, why, sizeof why)) {
        item(c, BK_CHECK_FAIL, "create", "create() with the default configuration (%s): %s", config, why);
        return;
    }
    item(c, BK_CHECK_PASS, "create", "create() with the default configuration (%s)", config);
    check_tensors(c, &in);
    instance_close(&in);
}

/* ---- tables ------------------------------------------------------------------------------------- */

static void check_table_prefixes(checker *c, const instance *in, const float *longest, int32_t longest_d)
{
    int32_t L = c->geo.train_length;
    int32_t lengths[] = {1, 2, 7, L, L + 1, 1000};
    int32_t H = table_heads(c);
    strbuf done = {0};
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    float *t = guarded_alloc((size_t)H * (size_t)(L + 1 > 1000 ? L + 1 : 1000));
    for (size_t k = 0; t && k < sizeof lengths / sizeof lengths[0]; k++) {
        int32_t D = lengths[k];
        if (D > longest_d || (k > 0 && D == lengths[k - 1]))
            continue;
        model_fn m = {FN_TABLE, D, NULL, 0};
        if (forward_finite(in, &m, in->theta, t, why, sizeof why)) {
            item(c, BK_CHECK_FAIL, "table-prefix", "table with %d distances: %s", D, why);
            free(t), free(done.s);
            return;
        }
        for (int32_t h = 0; h < H; h++)
            for (int32_t d = 0; d < D; d++) {
                double a = t[(size_t)h * (size_t)D + (size_t)d], b = longest[(size_t)h * (size_t)longest_d + (size_t)d];
                if (fabs(a - b) > PREFIX_TOLERANCE * fmax(fabs(a), fabs(b))) {
                    item(c, BK_CHECK_FAIL, "table-prefix",
                         "T[h][d] depends on the number of distances asked for: head %d, distance %d is %.9g with %d "
                         "distances and %.9g with %d (T must be a function of theta only; tolerance %g relative)",
                         h, d, a, D, b, longest_d, PREFIX_TOLERANCE);
                    free(t), free(done.s);
                    return;
                }
            }
        sb_printf(&done, "%s%d", done.len ? ", " : "", D);
    }
    if (!t)
        item(c, BK_CHECK_FAIL, "table-prefix", "out of memory for the table comparison");
    else
        item(c, BK_CHECK_PASS, "table-prefix",
             "tables with %s distances equal the first entries of the %d-distance table (within %g relative)",
             sb_text(&done), longest_d, PREFIX_TOLERANCE);
    free(t);
    free(done.s);
}

static void check_random_tables(checker *c, instance *in, float *t, int32_t D)
{
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (in->n_params == 0) {
        item(c, BK_CHECK_SKIP, "table-random", "table with random parameters: no parameters");
        return;
    }
    for (int s = 0; s < c->opt->n_seeds; s++) {
        model_fn m = {FN_TABLE, D, NULL, 0};
        if (random_params(in, bk_derive_seed(c->opt->seed, 100, (uint64_t)s), why, sizeof why) ||
            forward_finite(in, &m, in->theta, t, why, sizeof why)) {
            item(c, BK_CHECK_FAIL, "table-random", "random projected parameters (set %d): %s", s + 1, why);
            return;
        }
    }
    item(c, BK_CHECK_PASS, "table-random",
         "table finite up to %d distances with %d random projected parameter sets (param_init, + N(0, (%g|theta| + "
         "%g)^2), param_project)", D, c->opt->n_seeds, PERTURB_REL, PERTURB_ABS);
}

static void unit_tables(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (open_default(c, "table-finite", c->opt->seed, 0, &in))
        return;
    int32_t D = c->opt->max_distances, H = table_heads(c);
    float *t = guarded_alloc((size_t)H * (size_t)D);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    model_fn m = {FN_TABLE, D, NULL, 0};
    int rc = t ? forward(&in, &m, in.theta, NULL, t, why, sizeof why) : CALL_BROKEN;
    long long k = rc == CALL_OK ? first_non_finite(t, (size_t)H * (size_t)D) : -1;
    if (!t)
        item(c, BK_CHECK_FAIL, "table-finite", "out of memory for a %d x %d table", H, D);
    else if (rc != CALL_OK)
        item(c, BK_CHECK_FAIL, "table-finite", "table up to %d distances (default parameters): %s", D, why);
    else if (k >= 0)
        item(c, BK_CHECK_FAIL, "table-finite", "table up to %d distances (default parameters) is %g at head %lld, "
             "distance %lld", D, (double)t[k], k / D, k % D);
    else
        item(c, BK_CHECK_PASS, "table-finite", "table finite up to %d distances (default parameters)", D);
    if (rc == CALL_OK) /* the comparisons read only the first 1000 distances of the long table */
        check_table_prefixes(c, &in, t, D);
    if (t)
        check_random_tables(c, &in, t, D);
    free(t);
    instance_close(&in);
}

/* ---- gradients ---------------------------------------------------------------------------------- */

typedef struct fd_work {
    float *a, *b, *base; /* outputs at theta + h, theta - h and at theta */
} fd_work;

/* The output with theta[i] moved by `step`; *moved gets the move as stored in float. 1 when it worked
 * and every value is finite. */
static int moved_output(const instance *in, const model_fn *m, float *theta, int64_t i, double step, float *out,
                        double *moved)
{
    float orig = theta[i];
    theta[i] = (float)((double)orig + step);
    *moved = (double)theta[i] - (double)orig;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    int ok = *moved != 0.0 && !forward(in, m, theta, NULL, out, why, sizeof why) &&
             first_non_finite(out, fn_outputs(in, m)) < 0;
    theta[i] = orig;
    return ok;
}

/* (L(theta_i + h) - L(theta_i - h)) / 2h for L = sum_k w_k out_k, in float64 over the float outputs
 * (with the steps as stored in float). *scale gets sum_k |w_k d out_k / dtheta_i|, the size of the
 * terms the gradient sums. 1 when both outputs are finite. */
static int central_difference(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i,
                              double h, fd_work *wk, double *value, double *scale)
{
    double mp, mm;
    if (!moved_output(in, m, theta, i, h, wk->a, &mp) || !moved_output(in, m, theta, i, -h, wk->b, &mm))
        return 0;
    double sum = 0.0, abs_sum = 0.0;
    for (size_t k = 0, n = fn_outputs(in, m); k < n; k++) {
        double term = (double)w[k] * ((double)wk->a[k] - (double)wk->b[k]);
        sum += term;
        abs_sum += fabs(term);
    }
    *value = sum / (mp - mm);
    *scale = abs_sum / (mp - mm);
    return 1;
}

/* d(sum w * out)/dtheta_i by Ridders' extrapolation of central differences (Numerical Recipes'
 * dfridr) from first step h: steps h, h/1.4, h/1.4^2, ...; a first step whose outputs are not finite
 * is quartered (a parameter near the edge of its domain). *error gets the method's error estimate.
 * 0 when no step gives finite outputs. */
static int ridders(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i, double h,
                   fd_work *wk, double *value, double *scale, double *error)
{
    double a[GRAD_STEPS][GRAD_STEPS], ignored;
    int tries = 0;
    while (!central_difference(in, m, w, theta, i, h, wk, &a[0][0], scale))
        if (++tries > 8)
            return 0;
        else
            h /= 4.0;
    double best = a[0][0], err = INFINITY;
    const double shrink2 = GRAD_SHRINK * GRAD_SHRINK;
    for (int k = 1; k < GRAD_STEPS; k++) {
        h /= GRAD_SHRINK;
        if (!central_difference(in, m, w, theta, i, h, wk, &a[0][k], &ignored))
            break;
        double fac = shrink2;
        for (int j = 1; j <= k; j++, fac *= shrink2) {
            a[j][k] = (a[j - 1][k] * fac - a[j - 1][k - 1]) / (fac - 1.0);
            double e = fmax(fabs(a[j][k] - a[j - 1][k]), fabs(a[j][k] - a[j - 1][k - 1]));
            if (e <= err) {
                err = e;
                best = a[j][k];
            }
        }
        if (fabs(a[k][k] - a[k - 1][k - 1]) >= 2.0 * err)
            break; /* higher orders only add rounding noise now */
    }
    *value = best;
    *error = err;
    return 1;
}

/* Ridders from a first step of 0.1 max(|theta_i|, 0.1) and of 0.1 max(|theta_i|, 1e-3): the estimate
 * with the smaller error estimate. 0 when neither gives finite outputs. */
static int numeric_derivative(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i,
                              fd_work *wk, double *value, double *scale)
{
    double t = fabs((double)theta[i]), v, s, e, best_e = INFINITY;
    double starts[2] = {GRAD_FIRST_STEP * fmax(t, GRAD_STEP_FLOOR), GRAD_FIRST_STEP * fmax(t, GRAD_STEP_FLOOR_SMALL)};
    int found = 0;
    for (int k = 0; k < 2; k++) {
        if (k == 1 && starts[1] == starts[0])
            break;
        if (ridders(in, m, w, theta, i, starts[k], wk, &v, &s, &e) && (!found || e < best_e)) {
            *value = v;
            *scale = s;
            best_e = e;
            found = 1;
        }
    }
    return found;
}

/* The entries of theta to check: all of them up to `cap`, else a random sample, 3/4 from the entries
 * with a non-zero analytic gradient and the rest from the others. Returns the count. */
static size_t choose_entries(const float *analytic, size_t n, size_t cap, rng *r, int64_t *out)
{
    if (n <= cap) {
        for (size_t i = 0; i < n; i++)
            out[i] = (int64_t)i;
        return n;
    }
    int64_t *order = malloc(n * sizeof *order);
    if (!order)
        return 0;
    for (size_t i = 0; i < n; i++)
        order[i] = (int64_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(bk_rng_u64(r) % (uint64_t)(i + 1));
        int64_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    size_t k = 0, want_nonzero = cap * 3 / 4;
    for (size_t i = 0; i < n && k < want_nonzero; i++)
        if (analytic[order[i]] != 0.0f) {
            out[k++] = order[i];
            order[i] = -1;
        }
    for (size_t i = 0; i < n && k < cap; i++)
        if (order[i] >= 0)
            out[k++] = order[i];
    free(order);
    return k;
}

/* |a - n| / max(|a|, |n|, 5% of the terms' size, 1e-6 of the largest terms' size in this set): where
 * the sum cancels, the error is measured against the size of what was summed. */
static double relative_error(double analytic, double numeric, double scale, double max_scale)
{
    double denom = fmax(fmax(fabs(analytic), fabs(numeric)), fmax(GRAD_SCALE_SHARE * scale, 1e-6 * max_scale));
    double diff = fabs(analytic - numeric);
    return denom > 0.0 ? diff / denom : (diff > 0.0 ? INFINITY : 0.0);
}

typedef struct grad_report {
    const char *id, *adds_id;
    double worst;
    char worst_entry[64];
    int checked, failed, unchecked, adds_failed;
    char first_fail[600];
    char adds_fail[600];
    char setup_fail[BIASKIT_ERROR_MESSAGE_MAX + 200];
} grad_report;

/* Backward into a non-zero start must give start + gradient. */
static void check_adds(const instance *in, const model_fn *m, const float *w, const float *g0, grad_report *gr,
                       uint64_t seed)
{
    size_t n = n_params(in);
    float *start = malloc(n * sizeof *start), *g1 = guarded_alloc(n);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    rng r = rng_for(seed, R_START, 0);
    for (size_t i = 0; start && g1 && i < n; i++) {
        double mag = (0.5 + 0.5 * bk_rng_uniform(&r)) * fmax(fabs((double)g0[i]), 1.0);
        start[i] = (float)(bk_rng_uniform(&r) < 0.5 ? -mag : mag);
        g1[i] = start[i];
    }
    if (!start || !g1)
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "out of memory for %zu gradient values", n);
    else if (backward(in, m, in->theta, w, g1, why, sizeof why))
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "%s", why);
    for (size_t i = 0; start && g1 && !gr->setup_fail[0] && i < n; i++) {
        double want = (double)start[i] + (double)g0[i];
        if (fabs((double)g1[i] - want) > ADD_TOLERANCE * (fabs((double)start[i]) + fabs((double)g0[i]))) {
            if (!gr->adds_failed++) {
                char entry[64];
                entry_name(in, (int64_t)i, entry, sizeof entry);
                snprintf(gr->adds_fail, sizeof gr->adds_fail,
                         "%s started at %.9g, expected %.9g + %.9g = %.9g, got %.9g (backward functions must add "
                         "into their output, +=)", entry, (double)start[i], (double)start[i], (double)g0[i], want,
                         (double)g1[i]);
            }
        }
    }
    free(start);
    free(g1);
}

static void record_entry(const instance *in, const model_fn *m, int64_t i, double a, double num, double err,
                         int seed_index, grad_report *gr)
{
    char entry[64];
    entry_name(in, i, entry, sizeof entry);
    if (err > gr->worst) {
        gr->worst = err;
        snprintf(gr->worst_entry, sizeof gr->worst_entry, "%s", entry);
    }
    gr->checked++;
    if (err > GRAD_TOLERANCE && !gr->failed++) {
        char label[96];
        fn_label(m, label, sizeof label);
        snprintf(gr->first_fail, sizeof gr->first_fail,
                 "%s: analytic %.6g vs central difference %.6g (rel. error %.1e > %g; parameter set %d, %s)", entry, a,
                 num, err, GRAD_TOLERANCE, seed_index + 1, label);
    }
}

/* One parameter set and one output shape: backward vs numeric derivative for the chosen entries. */
static void check_gradient_case(const instance *in, const model_fn *m, uint64_t seed, int seed_index, size_t cap,
                                grad_report *gr)
{
    size_t n = n_params(in), n_out = fn_outputs(in, m);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    float *w = malloc((n_out ? n_out : 1) * sizeof *w), *g0 = guarded_alloc(n);
    fd_work wk = {guarded_alloc(n_out), guarded_alloc(n_out), guarded_alloc(n_out)};
    int64_t *entries = malloc((cap < n ? cap : n) * sizeof *entries);
    double *num = malloc((cap < n ? cap : n) * sizeof *num), *scale = malloc((cap < n ? cap : n) * sizeof *scale);
    int *ok = malloc((cap < n ? cap : n) * sizeof *ok);
    if (!w || !g0 || !wk.a || !wk.b || !wk.base || !entries || !num || !scale || !ok) {
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "out of memory for the gradient check");
        goto done;
    }
    rng r = rng_for(seed, R_WEIGHTS, (uint64_t)m->distances);
    random_fill(w, n_out, &r);
    memset(g0, 0, n * sizeof *g0);
    if (backward(in, m, in->theta, w, g0, why, sizeof why) || forward_finite(in, m, in->theta, wk.base, why, sizeof why)) {
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "%s", why);
        goto done;
    }
    check_adds(in, m, w, g0, gr, seed);
    if (gr->setup_fail[0])
        goto done;
    rng re = rng_for(seed, R_ENTRIES, (uint64_t)m->distances);
    size_t k = choose_entries(g0, n, cap, &re, entries);
    double max_scale = 0.0;
    for (size_t e = 0; e < k; e++) {
        ok[e] = numeric_derivative(in, m, w, in->theta, entries[e], &wk, &num[e], &scale[e]);
        if (ok[e])
            max_scale = fmax(max_scale, scale[e]);
        else
            gr->unchecked++;
    }
    for (size_t e = 0; e < k; e++)
        if (ok[e])
            record_entry(in, m, entries[e], g0[entries[e]], num[e],
                         relative_error(g0[entries[e]], num[e], scale[e], max_scale), seed_index, gr);
done:
    free(w), free(g0), free(wk.a), free(wk.b), free(wk.base), free(entries), free(num), free(scale), free(ok);
}

static void report_gradient(checker *c, const grad_report *gr, const char *what, const char *cases, size_t cap)
{
    if (gr->setup_fail[0]) {
        item(c, BK_CHECK_FAIL, gr->id, "%s: %s", what, gr->setup_fail);
        return;
    }
    if (gr->adds_failed)
        item(c, BK_CHECK_FAIL, gr->adds_id, "%s does not add into dtheta in %d entries: %s", what, gr->adds_failed,
             gr->adds_fail);
    else
        item(c, BK_CHECK_PASS, gr->adds_id, "%s adds into a non-zero dtheta (+=; within %g relative)", what,
             ADD_TOLERANCE);
    char unchecked[96] = "";
    if (gr->unchecked)
        snprintf(unchecked, sizeof unchecked, "; %d entries not checkable (outputs not finite at theta +- any step)",
                 gr->unchecked);
    if (gr->failed)
        item(c, BK_CHECK_FAIL, gr->id, "%s gradient %s; %d of %d checks fail, worst rel. error %.1e at %s%s", what,
             gr->first_fail, gr->failed, gr->checked, gr->worst, gr->worst_entry, unchecked);
    else if (gr->checked == 0)
        item(c, BK_CHECK_FAIL, gr->id, "%s gradient: no entry could be checked%s", what, unchecked);
    else
        item(c, BK_CHECK_PASS, gr->id,
             "%s gradient vs central differences in float64: %s, up to %zu entries each, %d checks; worst rel. error "
             "%.1e at %s (tolerance %g; steps %g x max(|theta|, %g or %g) / %g^k, Ridders-extrapolated)%s",
             what, cases, cap, gr->checked, gr->worst, gr->worst_entry[0] ? gr->worst_entry : "-", GRAD_TOLERANCE,
             GRAD_FIRST_STEP, GRAD_STEP_FLOOR, GRAD_STEP_FLOOR_SMALL, GRAD_SHRINK, unchecked);
}

static void unit_table_gradient(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    grad_report gr = {.id = "table-gradient", .adds_id = "table-backward-adds"};
    if (open_default(c, "table-gradient", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->table_backward) {
        item(c, BK_CHECK_SKIP, "table-gradient", "table gradient: %s", in.n_params == 0
             ? "no parameters with the default configuration" : "no table_backward() (see capabilities)");
        instance_close(&in);
        return;
    }
    static const int32_t sizes[] = {64, 300};
    for (int s = 0; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 200, (uint64_t)s);
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
        if (random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (size_t k = 0; k < 2 && !gr.setup_fail[0]; k++) {
            model_fn m = {FN_TABLE, sizes[k], NULL, 0};
            check_gradient_case(&in, &m, seed, s, GRAD_MAX_TABLE_ENTRIES, &gr);
        }
    }
    char cases[128];
    snprintf(cases, sizeof cases, "L = sum dtable*T, dtable ~ U[-1,1], %d random parameter sets x distances 64, 300",
             c->opt->n_seeds);
    report_gradient(c, &gr, "table_backward", cases, GRAD_MAX_TABLE_ENTRIES);
    instance_close(&in);
}

/* Positions for the embedding checks: 0 .. L-1, or `count` random ones below L (with repeats). */
static int32_t *embed_positions(int32_t L, int64_t count, int sequential, uint64_t seed)
{
    int32_t *p = malloc((size_t)(count > 0 ? count : 1) * sizeof *p);
    rng r = rng_for(seed, R_POSITIONS, (uint64_t)count);
    for (int64_t n = 0; p && n < count; n++)
        p[n] = sequential ? (int32_t)n : (int32_t)(bk_rng_u64(&r) % (uint64_t)L);
    return p;
}

static void unit_embed_gradient(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    grad_report gr = {.id = "embed-gradient", .adds_id = "embed-backward-adds"};
    if (open_default(c, "embed-gradient", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->embed_backward) {
        item(c, BK_CHECK_SKIP, "embed-gradient", "embed gradient: %s", in.n_params == 0
             ? "no parameters with the default configuration" : "no embed_backward() (see capabilities)");
        instance_close(&in);
        return;
    }
    int32_t L = c->geo.train_length;
    for (int s = 0; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 300, (uint64_t)s);
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
        if (random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (int sequential = 1; sequential >= 0 && !gr.setup_fail[0]; sequential--) {
            int64_t count = sequential ? L : 64;
            int32_t *pos = embed_positions(L, count, sequential, seed);
            model_fn m = {FN_EMBED, 0, pos, count};
            if (!pos)
                snprintf(gr.setup_fail, sizeof gr.setup_fail, "out of memory for %lld positions", (long long)count);
            else
                check_gradient_case(&in, &m, seed, s, GRAD_MAX_EMBED_ENTRIES, &gr);
            free(pos);
        }
    }
    char cases[160];
    snprintf(cases, sizeof cases, "L = sum out*R, R ~ U[-1,1], %d random parameter sets x positions 0..%d and 64 random "
             "positions (repeats)", c->opt->n_seeds, L - 1);
    report_gradient(c, &gr, "embed_backward", cases, GRAD_MAX_EMBED_ENTRIES);
    instance_close(&in);
}

/* ---- project() ---------------------------------------------------------------------------------- */

/* Wild parameters: random sign and magnitude 10^U(-3, 6), some exact zeros. */
static void wild_params(float *theta, size_t n, uint64_t seed)
{
    rng r = rng_for(seed, R_WILD, 0);
    for (size_t i = 0; i < n; i++) {
        double mag = pow(10.0, WILD_MIN_EXP + (WILD_MAX_EXP - WILD_MIN_EXP) * bk_rng_uniform(&r));
        double u = bk_rng_uniform(&r);
        theta[i] = u < 0.1 ? 0.0f : (float)(u < 0.55 ? -mag : mag);
    }
    if (n > 0)
        theta[0] = (float)-pow(10.0, WILD_MAX_EXP);
    if (n > 1)
        theta[1] = (float)pow(10.0, WILD_MAX_EXP);
}

/* project(x) twice vs once, bitwise; 0 or 1 with why. */
static int check_idempotent(const instance *in, float *x, float *y, const char *what, char *why, size_t size)
{
    size_t n = n_params(in);
    project(in, x);
    memcpy(y, x, n * sizeof *y);
    project(in, y);
    size_t at;
    if (bits_equal(x, y, n, &at))
        return 0;
    char entry[64];
    entry_name(in, (int64_t)at, entry, sizeof entry);
    snprintf(why, size, "not idempotent on %s: %s is %.9g after one projection and %.9g after two", what, entry,
             (double)x[at], (double)y[at]);
    return 1;
}

/* After projecting wild values: every parameter finite, and the outputs finite. */
static int check_in_range(const instance *in, const float *x, char *why, size_t size)
{
    long long k = first_non_finite(x, n_params(in));
    if (k >= 0) {
        char entry[64];
        entry_name(in, k, entry, sizeof entry);
        snprintf(why, size, "leaves %s = %g after projecting wild values", entry, (double)x[k]);
        return 1;
    }
    const checker *c = in->c;
    model_fn m = {FN_TABLE, c->opt->max_distances, NULL, 0};
    int32_t L = c->geo.train_length;
    int32_t *pos = NULL;
    if (!(c->d->capabilities & BIASKIT_CAP_TABLE)) {
        if (!(c->d->capabilities & BIASKIT_CAP_EMBED))
            return 0;
        pos = embed_positions(L, L, 1, 0);
        m = (model_fn){FN_EMBED, 0, pos, L};
    }
    float *out = guarded_alloc(fn_outputs(in, &m));
    char inner[BIASKIT_ERROR_MESSAGE_MAX + 128];
    int bad = !out || (m.kind == FN_EMBED && !pos) || forward_finite(in, &m, x, out, inner, sizeof inner);
    if (bad)
        snprintf(why, size, "after projecting wild values: %s", out ? inner : "out of memory");
    free(out);
    free(pos);
    return bad;
}

static void unit_project(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (open_default(c, "project", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->param_project) {
        item(c, BK_CHECK_SKIP, "project", "project(): %s", in.n_params == 0 ? "no parameters"
                                                                           : "no param_project (unconstrained parameters)");
        instance_close(&in);
        return;
    }
    size_t n = n_params(&in);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = !x || !y;
    if (bad)
        snprintf(why, sizeof why, "out of memory for %zu parameters", n);
    for (int s = 0; !bad && s < c->opt->n_seeds; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 400, (uint64_t)s);
        bad = init_params(&in, x, seed, why, sizeof why) || check_idempotent(&in, x, y, "initial parameters", why, sizeof why);
        if (!bad && !(bad = random_params(&in, seed, why, sizeof why))) {
            memcpy(x, in.theta, n * sizeof *x);
            bad = check_idempotent(&in, x, y, "random parameters", why, sizeof why);
        }
        if (!bad) {
            wild_params(x, n, seed);
            bad = check_idempotent(&in, x, y, "wild parameters", why, sizeof why) || check_in_range(&in, x, why, sizeof why);
        }
    }
    if (bad)
        item(c, BK_CHECK_FAIL, "project", "project(): %s", why);
    else
        item(c, BK_CHECK_PASS, "project",
             "project() idempotent (bitwise) on initial, random and wild parameters (random sign, 10^U(%d,%d)); wild "
             "values end finite with finite %s (%d sets)", WILD_MIN_EXP, WILD_MAX_EXP,
             c->d->capabilities & BIASKIT_CAP_TABLE ? "tables" : "outputs", c->opt->n_seeds);
    free(x);
    free(y);
    instance_close(&in);
}

/* ---- determinism ---------------------------------------------------------------------------------- */

/* Two calls of `what` into a and b (n values) must agree bit for bit; 0 or 1 with why. */
static int same_bits(const float *a, const float *b, size_t n, const char *what, char *why, size_t size)
{
    size_t at;
    if (bits_equal(a, b, n, &at))
        return 0;
    snprintf(why, size, "%s differs between two identical calls at value %zu: %.9g vs %.9g", what, at, (double)a[at],
             (double)b[at]);
    return 1;
}

static int twice_forward(const instance *in, const model_fn *m, char *why, size_t size)
{
    size_t n = fn_outputs(in, m);
    float *a = guarded_alloc(n), *b = guarded_alloc(n);
    char label[96];
    fn_label(m, label, sizeof label);
    int bad = !a || !b || forward(in, m, in->theta, NULL, a, why, size) || forward(in, m, in->theta, NULL, b, why, size) ||
              same_bits(a, b, n, label, why, size);
    if (!a || !b)
        snprintf(why, size, "out of memory for %zu values", n);
    free(a);
    free(b);
    return bad;
}

static int twice_backward(const instance *in, const model_fn *m, char *why, size_t size)
{
    size_t n = n_params(in), n_out = fn_outputs(in, m);
    float *w = malloc((n_out ? n_out : 1) * sizeof *w), *a = guarded_alloc(n), *b = guarded_alloc(n);
    int bad = !w || !a || !b;
    if (bad)
        snprintf(why, size, "out of memory for %zu values", n);
    if (!bad) {
        rng r = rng_for(0, R_WEIGHTS, 7);
        random_fill(w, n_out, &r);
        memset(a, 0, n * sizeof *a);
        memset(b, 0, n * sizeof *b);
        bad = backward(in, m, in->theta, w, a, why, size) || backward(in, m, in->theta, w, b, why, size) ||
              same_bits(a, b, n, m->kind == FN_TABLE ? "table_backward()" : "embed_backward()", why, size);
    }
    free(w), free(a), free(b);
    return bad;
}

static int twice_init(const instance *in, char *why, size_t size)
{
    size_t n = n_params(in);
    float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    int bad = !a || !b || init_params(in, a, 12345, why, size) || init_params(in, b, 12345, why, size) ||
              same_bits(a, b, n, "param_init() + param_project() with one seed", why, size);
    free(a), free(b);
    return bad;
}

static int twice_segment(const instance *in, char *why, size_t size)
{
    static const char text[] = "The cat sat. The dog ran.\nx = 12 + 30\nno delimiter here";
    int64_t n = (int64_t)sizeof text - 1;
    int32_t tokens[sizeof text], ia[sizeof text], pa[sizeof text], ib[sizeof text], pb[sizeof text];
    for (int64_t k = 0; k < n; k++)
        tokens[k] = (unsigned char)text[k] % (in->geo.vocab_size > 0 ? in->geo.vocab_size : 256);
    biaskit_error pe = {0};
    stage(in->c, "segment()");
    int rc = in->c->d->segment(in->inst, tokens, n, ia, pa, &pe);
    if (rc == BIASKIT_OK)
        rc = in->c->d->segment(in->inst, tokens, n, ib, pb, &pe);
    if (rc != BIASKIT_OK) {
        snprintf(why, size, "segment() failed: %s", pe.message[0] ? pe.message : "(no message)");
        return 1;
    }
    if (memcmp(ia, ib, (size_t)n * sizeof *ia) || memcmp(pa, pb, (size_t)n * sizeof *pa)) {
        snprintf(why, size, "segment() differs between two identical calls");
        return 1;
    }
    return 0;
}

static int twice_rotary(const instance *in, char *why, size_t size)
{
    int32_t half = in->geo.d_head / 2;
    float *a = guarded_alloc((size_t)half), *b = guarded_alloc((size_t)half);
    biaskit_error pe = {0};
    stage(in->c, "rotary_frequencies()");
    int bad = !a || !b || in->c->d->rotary_frequencies(in->inst, a, &pe) != BIASKIT_OK ||
              in->c->d->rotary_frequencies(in->inst, b, &pe) != BIASKIT_OK;
    if (bad)
        snprintf(why, size, "rotary_frequencies() failed: %s", pe.message[0] ? pe.message : "(no message)");
    else
        bad = same_bits(a, b, (size_t)half, "rotary_frequencies()", why, size);
    free(a), free(b);
    return bad;
}

static void unit_determinism(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (open_default(c, "determinism", bk_derive_seed(c->opt->seed, 500, 0), 1, &in))
        return;
    const biaskit_plugin *d = c->d;
    uint32_t caps = d->capabilities;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    strbuf done = {0};
    int bad = 0;
    int32_t L = c->geo.train_length;
    int32_t *pos = embed_positions(L, 64, 0, c->opt->seed);
    model_fn table = {FN_TABLE, 1000, NULL, 0}, embed = {FN_EMBED, 0, pos, 64};
    if (!bad && in.n_params > 0 && !(bad = twice_init(&in, why, sizeof why)))
        sb_printf(&done, ", param_init");
    if (!bad && (caps & BIASKIT_CAP_TABLE) && !(bad = twice_forward(&in, &table, why, sizeof why)))
        sb_printf(&done, ", table");
    if (!bad && (caps & BIASKIT_CAP_TABLE) && in.n_params > 0 && d->table_backward &&
        !(bad = twice_backward(&in, &table, why, sizeof why)))
        sb_printf(&done, ", table_backward");
    if (!bad && (caps & BIASKIT_CAP_EMBED) && pos && !(bad = twice_forward(&in, &embed, why, sizeof why)))
        sb_printf(&done, ", embed");
    if (!bad && (caps & BIASKIT_CAP_EMBED) && pos && in.n_params > 0 && d->embed_backward &&
        !(bad = twice_backward(&in, &embed, why, sizeof why)))
        sb_printf(&done, ", embed_backward");
    if (!bad && (caps & BIASKIT_CAP_SEGMENT) && !(bad = twice_segment(&in, why, sizeof why)))
        sb_printf(&done, ", segment");
    if (!bad && (caps & BIASKIT_CAP_ROTARY) && !(bad = twice_rotary(&in, why, sizeof why)))
        sb_printf(&done, ", rotary_frequencies");
    if (bad)
        item(c, BK_CHECK_FAIL, "determinism", "not deterministic: %s", why);
    else if (done.len)
        item(c, BK_CHECK_PASS, "determinism", "deterministic: two calls give bit-identical results (%s)", done.s + 2);
    else
        item(c, BK_CHECK_SKIP, "determinism", "determinism: nothing to call twice");
    free(done.s);
    free(pos);
    instance_close(&in);
}

/* ---- segment ------------------------------------------------------------------------------------ */

/* The contract on one token sequence; 0 or 1 with why. */
static int check_segments(const instance *in, const char *label, const int32_t *tokens, int64_t n, char *why,
                          size_t size)
{
    int32_t *idx = malloc((size_t)(n + GUARD_FLOATS) * sizeof *idx), *pos = malloc((size_t)(n + GUARD_FLOATS) * sizeof *pos);
    if (!idx || !pos) {
        free(idx), free(pos);
        snprintf(why, size, "out of memory for %lld tokens", (long long)n);
        return 1;
    }
    for (int64_t k = 0; k < n + GUARD_FLOATS; k++)
        idx[k] = pos[k] = -7;
    biaskit_error pe = {0};
    stage(in->c, "segment() on %s", label);
    int rc = in->c->d->segment(in->inst, tokens, n, idx, pos, &pe), bad = 1;
    if (rc != BIASKIT_OK)
        snprintf(why, size, "segment() on %s failed: %s", label, pe.message[0] ? pe.message : "(no message)");
    else if (idx[n] != -7 || pos[n] != -7)
        snprintf(why, size, "segment() on %s wrote past the end of its %lld outputs", label, (long long)n);
    else {
        int64_t k = bk_segments_first_violation(idx, pos, n);
        bad = k >= 0;
        if (k == 0)
            snprintf(why, size, "segment() on %s: the first token has segment %d, position %d (expected 0, 0)",
                     label, idx[0], pos[0]);
        else if (k > 0)
            snprintf(why, size, "segment() on %s: token %lld has segment %d, position %d after segment %d, position "
                     "%d (segments must grow by 0 or 1; positions restart at 0 in a new segment, else grow by 1)",
                     label, (long long)k, idx[k], pos[k], idx[k - 1], pos[k - 1]);
    }
    free(idx), free(pos);
    return bad;
}

static void unit_segment(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (open_default(c, "segment", c->opt->seed, 0, &in))
        return;
    static const char *const texts[][2] = {
        {"text with '.' and '\\n'", "The cat sat on the mat. It was warm.\nThe dog did not mind. Then it rained.\n"},
        {"arithmetic with '='", "12+34=46\n7*8=56\n100-1=99"},
        {"text without any delimiter", "no delimiter at all in this sentence"},
        {"one token", "."},
        {"delimiters only", "..\n\n==.\n"},
    };
    int32_t V = c->geo.vocab_size > 0 ? c->geo.vocab_size : 256;
    int32_t tokens[4096];
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = 0;
    for (size_t t = 0; !bad && t < sizeof texts / sizeof texts[0]; t++) {
        int64_t n = (int64_t)strlen(texts[t][1]);
        for (int64_t k = 0; k < n; k++)
            tokens[k] = (unsigned char)texts[t][1][k] % V;
        bad = check_segments(&in, texts[t][0], tokens, n, why, sizeof why);
    }
    if (!bad) {
        rng r = rng_for(c->opt->seed, R_TOKENS, 0);
        for (int k = 0; k < 4096; k++)
            tokens[k] = (int32_t)(bk_rng_u64(&r) % (uint64_t)V);
        bad = check_segments(&in, "4096 random tokens", tokens, 4096, why, sizeof why);
    }
    if (bad)
        item(c, BK_CHECK_FAIL, "segment", "%s", why);
    else
        item(c, BK_CHECK_PASS, "segment",
             "segment(): indices start at 0 and grow by 0 or 1, positions restart at 0 in each new segment (text with "
             "'.', '\\n', '=', without delimiters, one token, 4096 random tokens)");
    instance_close(&in);
}

/* ---- embed -------------------------------------------------------------------------------------- */

/* embed() into a random start must give start + the embedding into zeros. */
static int check_embed_adds(const instance *in, const model_fn *m, const float *alone, char *why, size_t size)
{
    size_t n = fn_outputs(in, m);
    float *start = malloc((n ? n : 1) * sizeof *start), *out = guarded_alloc(n);
    int bad = !start || !out;
    if (bad)
        snprintf(why, size, "out of memory for %zu values", n);
    rng r = rng_for(0, R_START, 1);
    for (size_t k = 0; !bad && k < n; k++)
        start[k] = (float)rng_sym(&r);
    if (!bad)
        bad = forward(in, m, in->theta, start, out, why, size);
    for (size_t k = 0; !bad && k < n; k++) {
        double want = (double)start[k] + (double)alone[k];
        if (fabs((double)out[k] - want) > EMBED_ADD_TOLERANCE * (fabs((double)start[k]) + fabs((double)alone[k]))) {
            char place[96];
            output_place(in, m, k, place, sizeof place);
            snprintf(why, size, "embed() does not add into out at %s: started at %.9g, embedding %.9g, got %.9g "
                     "(expected their sum: embed must +=)", place, (double)start[k], (double)alone[k], (double)out[k]);
            bad = 1;
        }
    }
    free(start), free(out);
    return bad;
}

/* Positions past the training length: finite values or a refusal with a message. */
static int check_far_positions(const instance *in, char *note, size_t note_size, char *why, size_t size)
{
    int32_t far[] = {in->geo.train_length, 2 * in->geo.train_length, 4095, in->c->opt->max_distances - 1};
    model_fn m = {FN_EMBED, 0, far, 4};
    float *out = guarded_alloc(fn_outputs(in, &m));
    char inner[BIASKIT_ERROR_MESSAGE_MAX + 128];
    int bad = !out;
    if (bad)
        snprintf(why, size, "out of memory");
    else if ((bad = forward(in, &m, in->theta, NULL, out, inner, sizeof inner)) != CALL_OK) {
        /* a refusal with a message is a fine answer; a broken call is not */
        bad = bad == CALL_BROKEN;
        if (bad)
            snprintf(why, size, "%s", inner);
        else
            snprintf(note, note_size, "refused with a message");
    } else if (first_non_finite(out, fn_outputs(in, &m)) >= 0) {
        snprintf(why, size, "embed() of positions %d, %d, 4095, %d gives non-finite values", far[0], far[1], far[3]);
        bad = 1;
    } else {
        snprintf(note, note_size, "finite");
    }
    free(out);
    return bad;
}

static void unit_embed(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (open_default(c, "embed", c->opt->seed, 0, &in))
        return;
    int32_t L = c->geo.train_length;
    int32_t *pos = embed_positions(L, L, 1, 0);
    model_fn m = {FN_EMBED, 0, pos, L};
    float *alone = pos ? guarded_alloc(fn_outputs(&in, &m)) : NULL;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], note[BIASKIT_ERROR_MESSAGE_MAX + 64] = "";
    int bad = !alone;
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    bad = bad || forward_finite(&in, &m, in.theta, alone, why, sizeof why) || check_embed_adds(&in, &m, alone, why, sizeof why) ||
          check_far_positions(&in, note, sizeof note, why, sizeof why);
    if (bad)
        item(c, BK_CHECK_FAIL, "embed", "%s", why);
    else
        item(c, BK_CHECK_PASS, "embed",
             "embed() adds into out (+=, within %g relative) and is finite for positions 0..%d; positions %d..%d: %s",
             EMBED_ADD_TOLERANCE, L - 1, L, c->opt->max_distances - 1, note);
    free(alone), free(pos);
    instance_close(&in);
}

/* ---- rotary ------------------------------------------------------------------------------------- */

static void unit_rotary(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (open_default(c, "rotary", c->opt->seed, 0, &in))
        return;
    int32_t half = c->geo.d_head / 2;
    float *f = guarded_alloc((size_t)half);
    biaskit_error pe = {0};
    stage(c, "rotary_frequencies()");
    int rc = f ? c->d->rotary_frequencies(in.inst, f, &pe) : BIASKIT_ERR_NOMEM;
    if (rc != BIASKIT_OK) {
        item(c, BK_CHECK_FAIL, "rotary", "rotary_frequencies() failed: %s", pe.message[0] ? pe.message : "(no message)");
    } else if (!guard_intact(f, (size_t)half)) {
        item(c, BK_CHECK_FAIL, "rotary", "rotary_frequencies() wrote more than d_head/2 = %d values", half);
    } else {
        int32_t k = 0;
        while (k < half && isfinite(f[k]) && f[k] > 0.0f)
            k++;
        if (k < half)
            item(c, BK_CHECK_FAIL, "rotary", "rotary_frequencies(): inverse frequency %d is %s (expected finite and > 0)",
                 k, is_sentinel(f[k]) ? "unwritten" : "not positive and finite");
        else
            item(c, BK_CHECK_PASS, "rotary", "rotary_frequencies(): d_head/2 = %d inverse frequencies, finite and > 0 "
                 "(%.3g .. %.3g)", half, half ? (double)f[0] : 0.0, half ? (double)f[half - 1] : 0.0);
    }
    free(f);
    instance_close(&in);
}

/* ---- CUDA --------------------------------------------------------------------------------------- */

/* Device buffers of one comparison; every pointer may be NULL. */
typedef struct device_bufs {
    void *theta, *table, *dtable, *dtheta;
} device_bufs;

static void device_bufs_free(device_bufs *b)
{
    bk_device_free(b->theta);
    bk_device_free(b->table);
    bk_device_free(b->dtable);
    bk_device_free(b->dtheta);
    memset(b, 0, sizeof *b);
}

static int device_copy_of(void **dst, const float *src, size_t n, bk_error *err)
{
    *dst = NULL;
    if (n == 0)
        return BK_OK;
    int rc = bk_device_alloc(dst, n * sizeof(float), err);
    return rc ? rc : (src ? bk_device_upload(*dst, src, n * sizeof(float), err) : BK_OK);
}

/* table_cuda at D distances into host memory `out`. */
static int cuda_table(const instance *in, const float *theta, int32_t D, float *out, char *why, size_t size)
{
    size_t n = (size_t)in->geo.n_heads * (size_t)D;
    device_bufs b = {0};
    bk_error e = {0};
    biaskit_error pe = {0};
    int rc = device_copy_of(&b.theta, theta, n_params(in), &e);
    if (!rc)
        rc = bk_device_alloc(&b.table, n * sizeof(float), &e);
    if (!rc) {
        stage(in->c, "table_cuda() with %d distances", D);
        if (in->c->d->table_cuda(in->inst, b.theta, D, b.table, NULL, &pe) != BIASKIT_OK)
            rc = bk_fail(&e, BK_ERR_PLUGIN, "table_cuda() with %d distances failed: %s", D,
                         pe.message[0] ? pe.message : "(no message)");
    }
    if (!rc)
        rc = bk_device_download(out, b.table, n * sizeof(float), &e);
    device_bufs_free(&b);
    if (rc)
        bk_copy_text(why, size, e.message);
    return rc != BK_OK;
}

/* table_backward_cuda: dtheta (host, in and out) += the device gradient. */
static int cuda_backward(const instance *in, const float *theta, int32_t D, const float *dtable, float *dtheta,
                         char *why, size_t size)
{
    size_t n = n_params(in), n_out = (size_t)in->geo.n_heads * (size_t)D;
    device_bufs b = {0};
    bk_error e = {0};
    biaskit_error pe = {0};
    int rc = device_copy_of(&b.theta, theta, n, &e);
    if (!rc)
        rc = device_copy_of(&b.dtable, dtable, n_out, &e);
    if (!rc)
        rc = device_copy_of(&b.dtheta, dtheta, n, &e);
    if (!rc) {
        stage(in->c, "table_backward_cuda() with %d distances", D);
        if (in->c->d->table_backward_cuda(in->inst, b.theta, D, b.dtable, b.dtheta, NULL, &pe) != BIASKIT_OK)
            rc = bk_fail(&e, BK_ERR_PLUGIN, "table_backward_cuda() with %d distances failed: %s", D,
                         pe.message[0] ? pe.message : "(no message)");
    }
    if (!rc)
        rc = bk_device_download(dtheta, b.dtheta, n * sizeof(float), &e);
    device_bufs_free(&b);
    if (rc)
        bk_copy_text(why, size, e.message);
    return rc != BK_OK;
}

/* |cuda - host| <= RTOL |host| + ATOL max over the head of |host|. */
static int compare_tables(const float *dev, const float *host, int32_t H, int32_t D, char *why, size_t size)
{
    for (int32_t h = 0; h < H; h++) {
        const float *x = host + (size_t)h * (size_t)D, *y = dev + (size_t)h * (size_t)D;
        double head_max = 0.0;
        for (int32_t d = 0; d < D; d++)
            head_max = fmax(head_max, fabs((double)x[d]));
        for (int32_t d = 0; d < D; d++) {
            double diff = fabs((double)y[d] - (double)x[d]);
            if (!(diff <= CUDA_TABLE_RTOL * fabs((double)x[d]) + CUDA_TABLE_ATOL * head_max)) {
                snprintf(why, size, "head %d, distance %d of %d: CUDA %.9g vs host %.9g", h, d, D, (double)y[d],
                         (double)x[d]);
                return 1;
            }
        }
    }
    return 0;
}

static void cuda_compare_tables(checker *c, instance *in)
{
    int32_t L = c->geo.train_length, H = c->geo.n_heads, maxd = c->opt->max_distances;
    int32_t lengths[] = {1, L, 4097, maxd};
    float *host = guarded_alloc((size_t)H * (size_t)maxd), *dev = malloc((size_t)H * (size_t)maxd * sizeof *dev),
          *again = malloc((size_t)H * (size_t)maxd * sizeof *again);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = !host || !dev || !again;
    if (bad)
        snprintf(why, sizeof why, "out of memory for %d x %d tables", H, maxd);
    for (int set = 0; !bad && set < 2; set++) {
        if (set == 1 && in->n_params == 0)
            break;
        if (set == 1 && (bad = random_params(in, bk_derive_seed(c->opt->seed, 600, 0), why, sizeof why)))
            break;
        for (size_t k = 0; !bad && k < sizeof lengths / sizeof lengths[0]; k++) {
            int32_t D = lengths[k];
            if (D > maxd)
                continue;
            model_fn m = {FN_TABLE, D, NULL, 0};
            bad = forward_finite(in, &m, in->theta, host, why, sizeof why) || cuda_table(in, in->theta, D, dev, why, sizeof why) ||
                  compare_tables(dev, host, H, D, why, sizeof why);
        }
    }
    if (!bad)
        bad = cuda_table(in, in->theta, maxd, dev, why, sizeof why) || cuda_table(in, in->theta, maxd, again, why, sizeof why) ||
              same_bits(dev, again, (size_t)H * (size_t)maxd, "table_cuda()", why, sizeof why);
    if (bad)
        item(c, BK_CHECK_FAIL, "cuda-table", "CUDA table vs host: %s", why);
    else
        item(c, BK_CHECK_PASS, "cuda-table",
             "CUDA table vs host at 1, %d, 4097, %d distances, %s: |cuda - host| <= %g |host| + %g max|head|; "
             "bit-identical on repeat", L, maxd, in->n_params ? "initial and random parameters" : "fixed table",
             CUDA_TABLE_RTOL, CUDA_TABLE_ATOL);
    free(host), free(dev), free(again);
}

static int compare_gradients(const instance *in, const float *dev, const float *host, char *why, size_t size)
{
    size_t n = n_params(in);
    double top = 0.0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, fabs((double)host[i]));
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)dev[i] - (double)host[i]);
        if (!(diff <= CUDA_GRAD_TOL * (fabs((double)host[i]) + top))) {
            char entry[64];
            entry_name(in, (int64_t)i, entry, sizeof entry);
            snprintf(why, size, "%s: CUDA %.9g vs host %.9g", entry, (double)dev[i], (double)host[i]);
            return 1;
        }
    }
    return 0;
}

static void cuda_compare_gradients(checker *c, instance *in)
{
    static const int32_t sizes[] = {64, 300, 4097};
    size_t n = n_params(in);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    float *w = malloc((size_t)c->geo.n_heads * 4097 * sizeof *w), *host = guarded_alloc(n), *dev = calloc(n, sizeof *dev),
          *again = calloc(n, sizeof *again);
    int bad = !w || !host || !dev || !again;
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    if (!bad)
        bad = random_params(in, bk_derive_seed(c->opt->seed, 700, 0), why, sizeof why);
    for (size_t k = 0; !bad && k < 3; k++) {
        model_fn m = {FN_TABLE, sizes[k], NULL, 0};
        rng r = rng_for(c->opt->seed, R_WEIGHTS, 1000 + k);
        random_fill(w, fn_outputs(in, &m), &r);
        memset(host, 0, n * sizeof *host);
        memset(dev, 0, n * sizeof *dev);
        memset(again, 0, n * sizeof *again);
        bad = backward(in, &m, in->theta, w, host, why, sizeof why) ||
              cuda_backward(in, in->theta, sizes[k], w, dev, why, sizeof why) ||
              compare_gradients(in, dev, host, why, sizeof why) ||
              cuda_backward(in, in->theta, sizes[k], w, again, why, sizeof why) ||
              same_bits(dev, again, n, "table_backward_cuda()", why, sizeof why);
    }
    if (!bad) { /* into a non-zero start: start + gradient */
        for (size_t i = 0; i < n; i++)
            again[i] = (float)(1.0 + fabs((double)dev[i]));
        float *start = malloc(n * sizeof *start);
        if (start)
            memcpy(start, again, n * sizeof *start);
        else
            snprintf(why, sizeof why, "out of memory");
        bad = !start || cuda_backward(in, in->theta, sizes[2], w, again, why, sizeof why);
        for (size_t i = 0; !bad && i < n; i++)
            if (fabs((double)again[i] - ((double)start[i] + (double)dev[i])) >
                ADD_TOLERANCE * (fabs((double)start[i]) + fabs((double)dev[i]))) {
                char entry[64];
                entry_name(in, (int64_t)i, entry, sizeof entry);
                snprintf(why, sizeof why, "table_backward_cuda() does not add into dtheta: %s started at %.9g, "
                         "gradient %.9g, got %.9g", entry, (double)start[i], (double)dev[i], (double)again[i]);
                bad = 1;
            }
        free(start);
    }
    if (bad)
        item(c, BK_CHECK_FAIL, "cuda-backward", "CUDA table gradient vs host: %s", why);
    else
        item(c, BK_CHECK_PASS, "cuda-backward",
             "CUDA table gradient vs host at 64, 300, 4097 distances: |cuda - host| <= %g (|host_i| + max|host|); "
             "adds (+=); bit-identical on repeat", CUDA_GRAD_TOL);
    free(w), free(host), free(dev), free(again);
}

static void unit_cuda(checker *c, const void *arg)
{
    (void)arg;
    const biaskit_plugin *d = c->d;
    char device[256];
    int gpu = bk_device_probe(device, sizeof device);
    int want_backward = d->table_backward_cuda != NULL;
    if (!d->table_cuda)
        item(c, BK_CHECK_SKIP, "cuda-table", "CUDA table vs host: the plugin has no table_cuda() (the engine "
             "computes the table on the host and copies it)");
    else if (!gpu)
        item(c, BK_CHECK_SKIP, "cuda-table", "CUDA table vs host: no GPU (%s)", device);
    if (want_backward && !gpu)
        item(c, BK_CHECK_SKIP, "cuda-backward", "CUDA table gradient vs host: no GPU (%s)", device);
    if (!gpu || (!d->table_cuda && !want_backward))
        return;
    instance in;
    if (open_default(c, "cuda-table", c->opt->seed, 0, &in))
        return;
    if (d->table_cuda)
        cuda_compare_tables(c, &in);
    if (want_backward && in.n_params > 0 && d->table_backward)
        cuda_compare_gradients(c, &in);
    else if (want_backward)
        item(c, BK_CHECK_SKIP, "cuda-backward", "CUDA table gradient vs host: %s",
             in.n_params ? "no host table_backward() to compare with" : "no parameters with the default configuration");
    instance_close(&in);
}

/* ================================================================================================
 * 6. Probes: create() with bad option values and bad geometries
 * ============================================================================================== */

typedef struct probe {
    char *literal; /* TOML value */
    char *label;   /* how the report names it */
} probe;

typedef struct probe_list {
    probe *p;
    int n, cap;
} probe_list;

static void add_probe(probe_list *l, const char *literal, const char *label)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        probe *grown = realloc(l->p, (size_t)cap * sizeof *grown);
        if (!grown)
            return;
        l->p = grown;
        l->cap = cap;
    }
    char *lit = strdup(literal), *lab = strdup(label ? label : literal);
    if (!lit || !lab) {
        free(lit), free(lab);
        return;
    }
    l->p[l->n++] = (probe){lit, lab};
}

static void free_probes(probe_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->p[i].literal), free(l->p[i].label);
    free(l->p);
    memset(l, 0, sizeof *l);
}

/* "[v, v, ..., v]" with `count` copies of v. */
static void add_array_probe(probe_list *l, const char *v, int count, const char *label)
{
    strbuf b = {0};
    sb_printf(&b, "[");
    for (int i = 0; i < count; i++)
        sb_printf(&b, "%s%s", i ? ", " : "", v);
    sb_printf(&b, "]");
    add_probe(l, sb_text(&b), label);
    free(b.s);
}

/* The values tried for one option: wrong or out of any sensible range, plus each declared choice. */
static void option_probes(const biaskit_option *o, int32_t heads, probe_list *l)
{
    static const char *const numbers[] = {"-1", "0", "-1e30", "1e30", "nan", "inf", "-inf"};
    static const char *const ints[] = {"-1", "0", "1", "2147483648", "-9223372036854775808", "9223372036854775807"};
    char label[64];
    switch (o->type) {
    case BIASKIT_OPT_BOOL:
        add_probe(l, "true", NULL);
        add_probe(l, "false", NULL);
        break;
    case BIASKIT_OPT_INT:
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
            add_probe(l, ints[i], NULL);
        break;
    case BIASKIT_OPT_DOUBLE:
        for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
            add_probe(l, numbers[i], NULL);
        break;
    case BIASKIT_OPT_STRING:
        add_probe(l, "\"\"", NULL);
        add_probe(l, "\"no-such-value\"", NULL);
        for (const char *a = o->choices ? o->choices : ""; *a;) {
            size_t len = strcspn(a, "|");
            char lit[128];
            snprintf(lit, sizeof lit, "\"%.*s\"", (int)(len < 100 ? len : 100), a);
            add_probe(l, lit, NULL);
            a += len + (a[len] ? 1 : 0);
        }
        break;
    case BIASKIT_OPT_DOUBLE_ARRAY:
        add_probe(l, "[]", NULL);
        add_probe(l, "[0.5]", NULL);
        snprintf(label, sizeof label, "[0.5 x %d]", heads + 1);
        add_array_probe(l, "0.5", heads + 1, label);
        for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
            snprintf(label, sizeof label, "[%s x %d]", numbers[i], heads);
            add_array_probe(l, numbers[i], heads, label);
        }
        break;
    case BIASKIT_OPT_STRING_ARRAY:
        add_probe(l, "[]", NULL);
        add_probe(l, "[\"\"]", NULL);
        add_probe(l, "[\"no-such-value\"]", NULL);
        snprintf(label, sizeof label, "[\"x\" x %d]", heads + 1);
        add_array_probe(l, "\"x\"", heads + 1, label);
        break;
    }
}

typedef struct probe_arg {
    const char *override;  /* "term.0.KEY=VALUE", or NULL: the default configuration */
    biaskit_geometry geo;
} probe_arg;

/* Outputs of an instance made from a probe: finite table over train_length distances, finite
 * embedding of positions 0..train_length-1, finite positive rotary frequencies, a segment() call. */
static int probe_outputs(const instance *in, char *why, size_t size)
{
    const checker *c = in->c;
    uint32_t caps = c->d->capabilities;
    int32_t L = in->geo.train_length > 0 ? in->geo.train_length : 1;
    if (init_params(in, NULL, c->opt->seed, why, size))
        return 1;
    int32_t *pos = embed_positions(L, L, 1, 0);
    model_fn table = {FN_TABLE, L, NULL, 0}, embed = {FN_EMBED, 0, pos, L};
    model_fn *fns[2] = {(caps & BIASKIT_CAP_TABLE) ? &table : NULL, (caps & BIASKIT_CAP_EMBED) && pos ? &embed : NULL};
    int bad = 0;
    for (int k = 0; k < 2 && !bad; k++) {
        if (!fns[k])
            continue;
        float *out = guarded_alloc(fn_outputs(in, fns[k]));
        bad = !out || forward_finite(in, fns[k], in->theta, out, why, size);
        free(out);
    }
    free(pos);
    if (!bad && (caps & BIASKIT_CAP_ROTARY) && in->geo.d_head >= 0) {
        int32_t half = in->geo.d_head / 2;
        float *f = guarded_alloc((size_t)half);
        biaskit_error pe = {0};
        stage(c, "rotary_frequencies()");
        bad = !f || c->d->rotary_frequencies(in->inst, f, &pe) != BIASKIT_OK;
        if (bad)
            snprintf(why, size, "rotary_frequencies() failed: %s", pe.message[0] ? pe.message : "(no message)");
        for (int32_t k = 0; !bad && k < half; k++)
            if (!(isfinite(f[k]) && f[k] > 0.0f)) {
                snprintf(why, size, "rotary inverse frequency %d is %g (expected finite and > 0)", k, (double)f[k]);
                bad = 1;
            }
        free(f);
    }
    if (!bad && (caps & BIASKIT_CAP_SEGMENT)) {
        int32_t tokens[16], idx[16], spos[16];
        for (int k = 0; k < 16; k++)
            tokens[k] = (int32_t)((unsigned char)"ab. cd\nef = 12.x"[k] % (uint32_t)(in->geo.vocab_size > 0 ? in->geo.vocab_size : 256));
        biaskit_error pe = {0};
        stage(c, "segment()");
        int rc = c->d->segment(in->inst, tokens, 16, idx, spos, &pe);
        bad = rc != BIASKIT_OK && refusal("segment()", rc, &pe, why, size) == CALL_BROKEN;
    }
    return bad;
}

/* In a child: one probe, reported as one R line "accepted", "refused", "host" or "bad". */
static void probe_child(checker *c, const void *varg)
{
    const probe_arg *a = varg;
    bk_experiment exp;
    biaskit_config view;
    const biaskit_config *v = &c->view;
    bk_error e;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    if (a->override) {
        c->overrides[c->n_overrides] = (char *)a->override;
        stage(c, "reading the value");
        if (bk_experiment_parse(c->exp_text, "(biaskit check)", (const char *const *)c->overrides, c->n_overrides + 1,
                                &exp, &e) ||
            bk_config_view_init(&view, c->d, exp.terms[0].table, exp.terms[0].pos, c->view.label, &e)) {
            child_line(c, 'R', "host", e.message);
            return;
        }
        v = &view;
    }
    instance in;
    int rc = instance_create(c, v, &a->geo, &in, why, sizeof why);
    if (rc != CALL_OK) {
        child_line(c, 'R', rc == CALL_REFUSED ? "refused" : "bad", why);
        return;
    }
    int bad = probe_outputs(&in, why, sizeof why);
    child_line(c, 'R', bad ? "bad" : "accepted", bad ? why : "");
    instance_close(&in);
}

typedef struct probe_outcome {
    char kind[16];
    char text[BIASKIT_ERROR_MESSAGE_MAX + 300];
} probe_outcome;

static void take_outcome(checker *c, char tag, const char *id, const char *text, void *ctx)
{
    (void)c;
    probe_outcome *o = ctx;
    if (tag != 'R')
        return;
    snprintf(o->kind, sizeof o->kind, "%s", id);
    snprintf(o->text, sizeof o->text, "%s", text);
}

/* Runs one probe; a crash, hang or exit becomes kind "bad" with the reason. */
static int run_probe(checker *c, const probe_arg *a, probe_outcome *o, bk_error *err)
{
    child_result r;
    memset(o, 0, sizeof *o);
    int rc = run_child(c, probe_child, a, &r, err);
    if (rc)
        return rc;
    for_each_line(c, &r, take_outcome, o);
    if (!r.finished) {
        snprintf(o->kind, sizeof o->kind, "bad");
        describe_abort(c, &r, o->text, sizeof o->text);
    } else if (!o->kind[0]) {
        snprintf(o->kind, sizeof o->kind, "bad");
        snprintf(o->text, sizeof o->text, "the probe reported nothing");
    }
    free(r.output.s);
    return BK_OK;
}

/* Sorts probe labels by outcome for the summary line. */
typedef struct probe_summary {
    strbuf accepted, refused, host, bad;
    int n_bad, n;
} probe_summary;

static void summarise(probe_summary *s, const char *label, const probe_outcome *o)
{
    s->n++;
    if (strcmp(o->kind, "bad") == 0) {
        if (s->n_bad++ < MAX_REPORTED)
            sb_printf(&s->bad, "%s%s: %s", s->bad.len ? "; " : "", label, o->text);
        return;
    }
    strbuf *b = strcmp(o->kind, "accepted") == 0 ? &s->accepted : strcmp(o->kind, "refused") == 0 ? &s->refused : &s->host;
    sb_printf(b, "%s%s", b->len ? ", " : "", label);
}

static void report_summary(checker *c, const char *id, const char *what, probe_summary *s)
{
    strbuf fine = {0};
    if (s->accepted.len)
        sb_printf(&fine, "; accepted (finite outputs): %s", s->accepted.s);
    if (s->refused.len)
        sb_printf(&fine, "; refused by create() with a message: %s", s->refused.s);
    if (s->host.len)
        sb_printf(&fine, "; rejected by the host before create(): %s", s->host.s);
    if (s->n_bad)
        item(c, BK_CHECK_FAIL, id, "%s: %d of %d probes fail: %s%s%s", what, s->n_bad, s->n, s->bad.s,
             s->n_bad > MAX_REPORTED ? "; ..." : "", sb_text(&fine));
    else
        item(c, BK_CHECK_PASS, id, "%s: %d probes handled%s", what, s->n, sb_text(&fine));
    free(fine.s), free(s->accepted.s), free(s->refused.s), free(s->host.s), free(s->bad.s);
}

static int probe_option(checker *c, const biaskit_option *o, bk_error *err)
{
    probe_list l = {0};
    option_probes(o, c->geo.n_heads, &l);
    probe_summary s = {0};
    int rc = BK_OK;
    for (int i = 0; i < l.n && !rc; i++) {
        strbuf assign = {0};
        sb_printf(&assign, "term.0.%s=%s", o->name, l.p[i].literal);
        probe_arg a = {sb_text(&assign), c->geo};
        probe_outcome out;
        if (!(rc = run_probe(c, &a, &out, err)))
            summarise(&s, l.p[i].label, &out);
        free(assign.s);
    }
    char id[128], what[160];
    snprintf(id, sizeof id, "option:%s", o->name);
    snprintf(what, sizeof what, "option %s (%s)", o->name, bk_option_type_name(o->type));
    if (!rc)
        report_summary(c, id, what, &s);
    else
        free(s.accepted.s), free(s.refused.s), free(s.host.s), free(s.bad.s);
    free_probes(&l);
    return rc;
}

static int probe_geometries(checker *c, bk_error *err)
{
    biaskit_geometry zero = c->geo, one = c->geo, odd = c->geo;
    zero.n_heads = 0, zero.d_head = 0;
    one.n_heads = 1, one.d_model = c->geo.d_head, one.d_head = c->geo.d_head;
    odd.d_head = c->geo.d_head | 1, odd.d_model = c->geo.n_heads * odd.d_head;
    struct {
        const biaskit_geometry *geo;
        char label[48];
    } cases[] = {{&zero, "0 heads"}, {&one, "1 head"}, {&odd, ""}};
    snprintf(cases[2].label, sizeof cases[2].label, "odd d_head %d", odd.d_head);
    probe_summary s = {0};
    for (size_t i = 0; i < 3; i++) {
        probe_arg a = {NULL, *cases[i].geo};
        probe_outcome out;
        int rc = run_probe(c, &a, &out, err);
        if (rc) {
            free(s.accepted.s), free(s.refused.s), free(s.host.s), free(s.bad.s);
            return rc;
        }
        summarise(&s, cases[i].label, &out);
    }
    report_summary(c, "geometry", "create() with other geometries", &s);
    return BK_OK;
}

/* ================================================================================================
 * 7. The whole check
 * ============================================================================================== */

void bk_check_options_default(bk_check_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->layers = 2;
    opt->heads = 12;
    opt->dim = 192;
    opt->vocab = 256;
    opt->length = 128;
    opt->max_distances = 65536;
    opt->n_seeds = 3;
    opt->seed = 20240611;
    opt->timeout_s = 60;
}

static int usage_error(bk_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(bk_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bk_vfail(err, BK_ERR_USAGE, fmt, ap);
    va_end(ap);
    return BK_ERR_USAGE;
}

/* An error of reading the configuration, as a usage error naming the command. */
static int as_usage_error(bk_error *err)
{
    bk_error_prefix(err, "biaskit check: ");
    err->code = BK_ERR_USAGE;
    return BK_ERR_USAGE;
}

static int check_options_valid(const bk_check_options *o, bk_error *err)
{
    if (o->max_distances < 1 || o->n_seeds < 1 || o->timeout_s < 1)
        return usage_error(err, "biaskit check: distances, seeds and time limit must be positive (got %d, %d, %u)",
                           o->max_distances, o->n_seeds, o->timeout_s);
    for (size_t i = 0; i < o->n_sets; i++) {
        const char *eq = strchr(o->sets[i], '=');
        if (!eq || eq == o->sets[i])
            return usage_error(err, "--set '%s': expected KEY=VALUE, KEY one of the plugin's options", o->sets[i]);
    }
    return BK_OK;
}

/* The default configuration: an experiment with the geometry and one [[term]] carrying the --set
 * options, checked against the plugin's declarations like any experiment file. */
static int open_config(checker *c, bk_error *err)
{
    const bk_check_options *o = c->opt;
    strbuf text = {0};
    sb_printf(&text, "[model]\nlayers = %d\nheads = %d\ndim = %d\nvocab = %d\n[train]\nlength = %d\n[[term]]\n"
              "plugin = \"%s\"\n", o->layers, o->heads, o->dim, o->vocab, o->length, c->d->name);
    c->exp_text = text.s;
    c->overrides = calloc(o->n_sets + 1, sizeof *c->overrides);
    if (!c->exp_text || !c->overrides)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < o->n_sets; i++) {
        strbuf b = {0};
        sb_printf(&b, "term.0.%s", o->sets[i]);
        if (!(c->overrides[c->n_overrides++] = b.s))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    int rc = bk_experiment_parse(c->exp_text, "(biaskit check)", (const char *const *)c->overrides, c->n_overrides,
                                 &c->exp, err);
    if (rc)
        return as_usage_error(err);
    c->have_exp = 1;
    char label[128];
    snprintf(label, sizeof label, "[[term]] (%s)", c->d->name);
    if (bk_config_view_init(&c->view, c->d, c->exp.terms[0].table, c->exp.terms[0].pos, label, err))
        return as_usage_error(err);
    c->geo = (biaskit_geometry){sizeof(biaskit_geometry), o->layers, o->heads, o->dim, o->dim / o->heads, o->vocab,
                                o->length};
    return BK_OK;
}

static void close_config(checker *c)
{
    if (c->have_exp)
        bk_experiment_free(&c->exp);
    for (size_t i = 0; i < c->n_overrides; i++)
        free(c->overrides[i]);
    free(c->overrides);
    free(c->exp_text);
}

typedef struct unit {
    const char *id, *what;
    uint32_t needs; /* a capability, or 0 */
    child_fn fn;
} unit;

static const unit units[] = {
    {"table-finite", "table checks", BIASKIT_CAP_TABLE, unit_tables},
    {"table-gradient", "table gradient", BIASKIT_CAP_TABLE, unit_table_gradient},
    {"embed", "embed checks", BIASKIT_CAP_EMBED, unit_embed},
    {"embed-gradient", "embed gradient", BIASKIT_CAP_EMBED, unit_embed_gradient},
    {"segment", "segment checks", BIASKIT_CAP_SEGMENT, unit_segment},
    {"rotary", "rotary checks", BIASKIT_CAP_ROTARY, unit_rotary},
    {"project", "project checks", 0, unit_project},
    {"determinism", "determinism checks", 0, unit_determinism},
    {"cuda-table", "CUDA checks", BIASKIT_CAP_TABLE, unit_cuda},
};

static int run_checks(checker *c, bk_error *err)
{
    int rc, created = 0;
    if ((rc = run_unit(c, "create", "create() with the default configuration", unit_create, NULL, &created, err)))
        return rc;
    if ((rc = probe_geometries(c, err)))
        return rc;
    for (uint32_t i = 0; i < c->d->n_options && !rc; i++)
        rc = probe_option(c, &c->d->options[i], err);
    if (rc)
        return rc;
    if (!created) {
        item(c, BK_CHECK_SKIP, "remaining", "tables, gradients, project, determinism and CUDA: create() with the "
             "default configuration failed");
        return BK_OK;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0] && !rc; i++)
        if (!units[i].needs || (c->d->capabilities & units[i].needs))
            rc = run_unit(c, units[i].id, units[i].what, units[i].fn, NULL, NULL, err);
    return rc;
}

int bk_check_plugin(bk_registry *reg, const char *name_or_path, const bk_check_options *opt,
                    bk_check_report_fn report, void *ctx, bk_check_counts *counts, bk_error *err)
{
    memset(counts, 0, sizeof *counts);
    int rc = check_options_valid(opt, err);
    if (rc)
        return rc;
    checker c = {.opt = opt, .report = report, .ctx = ctx, .counts = counts, .out_fd = -1};
    bk_error load_err;
    if (bk_registry_load(reg, name_or_path, &c.plugin, &load_err)) {
        item(&c, BK_CHECK_FAIL, "load", "%s", load_err.message);
        return BK_OK;
    }
    c.d = c.plugin->desc;
    if ((rc = open_config(&c, err)) == BK_OK) { /* a bad --set is reported before any check */
        item(&c, BK_CHECK_PASS, "load", "loads: %s %s from %s (ABI %u, descriptor %u bytes)", c.d->name,
             c.d->version, c.plugin->path, c.d->abi_version, c.d->struct_size);
        check_descriptor_fields(&c);
        check_capabilities(&c);
        check_option_declarations(&c);
        rc = run_checks(&c, err);
    }
    close_config(&c);
    return rc;
}
