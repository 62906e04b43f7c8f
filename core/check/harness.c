/* biaskit check, the harness: report lines, and the child process every call into the plugin runs
 * in, so that a crash (signal), a hang (time limit) or an exit() inside the plugin becomes a FAIL of
 * the check that ran it and the remaining checks go on. */
#define _GNU_SOURCE /* strsignal */
#include "check/internal.h"
#include "util/file.h"
#include "util/isolate.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

void ck_sb_vprintf(strbuf *b, const char *fmt, va_list ap)
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

void ck_sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck_sb_vprintf(b, fmt, ap);
    va_end(ap);
}

const char *ck_sb_text(const strbuf *b)
{
    return b->s ? b->s : "";
}

const char *bk_check_status_name(bk_check_status status)
{
    switch (status) {
    case BK_CHECK_PASS: return "PASS";
    case BK_CHECK_FAIL: return "FAIL";
    case BK_CHECK_SKIP: return "SKIP";
    case BK_CHECK_WARN: return "WARN";
    }
    return "?";
}

/* One line to the parent: TAG \t ID \t TEXT, with tabs and newlines of the text made spaces. */
void ck_child_line(const checker *c, char tag, const char *id, const char *text)
{
    strbuf b = {0};
    ck_sb_printf(&b, "%c\t%s\t%s\n", tag, id, text);
    for (size_t i = 2 + strlen(id) + 1; b.s && i + 1 < b.len; i++)
        if (b.s[i] == '\t' || b.s[i] == '\n' || b.s[i] == '\r')
            b.s[i] = ' ';
    if (b.s)
        (void)bk_write_all(c->out_fd, b.s, b.len); /* a parent gone is the parent's problem */
    free(b.s);
}

bk_check_status ck_tag_status(char tag)
{
    return tag == 'P' ? BK_CHECK_PASS : tag == 'F' ? BK_CHECK_FAIL : tag == 'W' ? BK_CHECK_WARN : BK_CHECK_SKIP;
}

static char status_tag(bk_check_status s)
{
    return s == BK_CHECK_PASS ? 'P' : s == BK_CHECK_FAIL ? 'F' : s == BK_CHECK_WARN ? 'W' : 'S';
}

static void deliver(checker *c, bk_check_status status, const char *id, const char *text)
{
    if (c->out_fd >= 0) {
        ck_child_line(c, status_tag(status), id, text);
        return;
    }
    if (status == BK_CHECK_PASS)
        c->counts->passed++;
    else if (status == BK_CHECK_FAIL)
        c->counts->failed++;
    else if (status == BK_CHECK_WARN)
        c->counts->warned++;
    else
        c->counts->skipped++;
    bk_check_item it = {status, id, text};
    if (c->report)
        c->report(c->ctx, &it);
}

void ck_item(checker *c, bk_check_status status, const char *id,
             const char *fmt, ...)
{
    strbuf b = {0};
    va_list ap;
    va_start(ap, fmt);
    ck_sb_vprintf(&b, fmt, ap);
    va_end(ap);
    deliver(c, status, id, ck_sb_text(&b));
    free(b.s);
}

/* What a child is doing, so that a crash can say where it happened. */
void ck_stage(const checker *c, const char *fmt, ...)
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
    ck_child_line(c, '@', "", text);
}

/* The time limit counts the child's CPU time, so that a loaded machine (other processes taking the cores)
 * does not make a correct plugin fail: each time the clock reaches the limit, a child that has computed
 * in that time (at least BLOCKED_SHARE of it on a core) but used less CPU than the limit gets the rest;
 * a child that has not (blocked: waiting, sleeping, a deadlock) stops then, as does any child after
 * WALL_FACTOR times the limit on the clock. */
#define BLOCKED_SHARE 0.01
#define WALL_FACTOR 20.0

static unsigned limit_s;
static double started_wall, last_wall, last_cpu;

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* async-signal-safe: clock_gettime, alarm, signal, raise */
static void on_alarm(int sig)
{
    const double wall = clock_s(CLOCK_MONOTONIC), cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    const int blocked = cpu - last_cpu < BLOCKED_SHARE * (wall - last_wall);
    if (cpu >= (double)limit_s || blocked || wall - started_wall >= WALL_FACTOR * (double)limit_s) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    last_wall = wall, last_cpu = cpu;
    const double left = (double)limit_s - cpu;
    alarm(left >= 1.0 ? (unsigned)left : 1u);
}

/* The child: default signal actions (a test harness may have installed its own handlers, which
 * must not run inside the child), a time limit, the work, an end line, _exit (not exit: the parent's
 * stdio buffers and atexit handlers are the parent's). */
static _Noreturn void child_main(checker *c, int fd, child_fn fn, const void *arg)
{
    bk_child_default_signals();
    c->out_fd = fd;
    limit_s = c->opt->timeout_s;
    started_wall = last_wall = clock_s(CLOCK_MONOTONIC);
    last_cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(c->opt->timeout_s);
    fn(c, arg);
    ck_child_line(c, 'E', "", "");
    _exit(0);
}

static void scan_markers(child_result *r)
{
    const char *s = ck_sb_text(&r->output);
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

int ck_run_child(checker *c, child_fn fn, const void *arg, child_result *r, bk_error *err)
{
    memset(r, 0, sizeof *r);
    int fds[2];
    if (pipe(fds) != 0)
        return bk_fail(err, BK_ERR_INTERNAL, "biaskit check: cannot create a pipe: %s", strerror(errno));
    fflush(NULL); /* nothing buffered is written twice */
    const double started = clock_s(CLOCK_MONOTONIC);
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
        ck_sb_printf(&r->output, "%.*s", (int)k, buf);
    }
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    r->cpu_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
               1e-6 * (double)ru.ru_stime.tv_usec;
    r->wall_s = clock_s(CLOCK_MONOTONIC) - started;
    if (WIFSIGNALED(status))
        r->signal = WTERMSIG(status);
    else if (WIFEXITED(status))
        r->exit_status = WEXITSTATUS(status);
    scan_markers(r);
    return BK_OK;
}

/* Why a child did not finish, as a phrase: "crashed with signal 11 (Segmentation fault) in create()". */
void ck_describe_abort(const checker *c, const child_result *r, char *buf, size_t size)
{
    char where[300] = "";
    if (r->stage[0])
        snprintf(where, sizeof where, " in %s", r->stage);
    if (r->signal == SIGALRM && r->cpu_s >= 0.9 * c->opt->timeout_s)
        snprintf(buf, size, "did not finish within %u s of CPU time%s (%.0f s on the clock: the limit counts the "
                 "child's CPU time, not the machine's load); raise the limit with --timeout S", c->opt->timeout_s,
                 where, r->wall_s);
    else if (r->signal == SIGALRM)
        snprintf(buf, size, "did not finish within %u s%s, using %.2f s of CPU in %.0f s (blocked or waiting, not "
                 "computing); raise the limit with --timeout S", c->opt->timeout_s, where, r->cpu_s, r->wall_s);
    else if (r->signal)
        snprintf(buf, size, "crashed with signal %d (%s)%s", r->signal, strsignal(r->signal), where);
    else
        snprintf(buf, size, "the process ended with exit status %d%s before the check finished (plugin code must "
                 "never call exit())", r->exit_status, where);
}

void ck_for_each_line(checker *c, const child_result *r, line_fn fn, void *ctx)
{
    strbuf copy = {0};
    ck_sb_printf(&copy, "%s", ck_sb_text(&r->output));
    char *save = NULL;
    for (char *line = copy.s ? strtok_r(copy.s, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        char *id = strchr(line, '\t');
        char *text = id ? strchr(id + 1, '\t') : NULL;
        if (!id || !text || !strchr("PFSRW", line[0]))
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
    bk_check_status s = ck_tag_status(tag);
    deliver(c, s, id, text);
    if (passed && s == BK_CHECK_PASS && strcmp(id, "create") == 0)
        *passed = 1;
}

/* Runs one unit of checks in a child and reports its items; a child that does not finish is a FAIL
 * of `id`. *created (may be NULL) is set when the unit reported "create" as passed. */
int ck_run_unit(checker *c, const char *id, const char *what, child_fn fn, const void *arg, int *created,
                bk_error *err)
{
    child_result r;
    int rc = ck_run_child(c, fn, arg, &r, err);
    if (rc)
        return rc;
    int passed = 0;
    ck_for_each_line(c, &r, forward_line, &passed);
    if (!r.finished) {
        char why[600];
        ck_describe_abort(c, &r, why, sizeof why);
        ck_item(c, BK_CHECK_FAIL, id, "%s: %s", what, why);
    }
    free(r.output.s);
    if (created)
        *created = passed;
    return BK_OK;
}
