/* Running untrusted code in a child process (isolate.h).
 *
 * The child runs fn with its text going to a memory stream, then sends one record through a pipe:
 * "BKISO <code> <message length> <text length>\n", the message, the text. A child that ends without
 * the whole record did not finish. The parent reads with poll() against a deadline and kills the
 * child's process group (the child and anything it started) when the deadline passes. */
#define _GNU_SOURCE /* open_memstream, strsignal */
#include "util/isolate.h"
#include "util/clock.h"
#include "util/file.h"
#include "util/sigsafe.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORD_TAG "BKISO"

/* The child: default actions for the crash signals (the parent's handlers must not run here), a
 * time limit of its own in case the parent is gone, the work, the record, _exit (the parent's stdio
 * buffers and atexit handlers are the parent's). */
void bk_child_default_signals(void)
{
    static const int signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP, SIGALRM, SIGPIPE,
                                  SIGINT, SIGTERM};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        signal(signals[i], SIG_DFL);
        sigaddset(&set, signals[i]);
    }
    sigprocmask(SIG_UNBLOCK, &set, NULL);
}

static _Noreturn void child_main(int fd, bk_isolated_fn fn, void *ctx, unsigned timeout_s)
{
    bk_child_default_signals();
    alarm(timeout_s + 1);
    char *text = NULL;
    size_t text_len = 0;
    FILE *out = open_memstream(&text, &text_len);
    bk_error err;
    bk_error_clear(&err);
    int rc = out ? fn(ctx, out, &err) : bk_fail(&err, BK_ERR_NOMEM, "out of memory for a child's output stream");
    if (out && fclose(out) != 0) {
        text = NULL;
        text_len = 0;
    }
    char head[96];
    size_t msg_len = strlen(err.message);
    int n = snprintf(head, sizeof head, RECORD_TAG " %d %zu %zu\n", rc, msg_len, text_len);
    int bad = bk_write_all(fd, head, (size_t)n) || bk_write_all(fd, err.message, msg_len) ||
              (text_len && bk_write_all(fd, text, text_len));
    _exit(bad ? 125 : 0);
}

typedef struct {
    char *s;
    size_t len, cap;
    int overflow;
} buffer;

/* The most a child may send: its text is a listing or a report, never data. */
#define CHILD_OUTPUT_MAX ((size_t)16 << 20)

static void buffer_add(buffer *b, const char *s, size_t n)
{
    if (b->overflow)
        return;
    if (b->len + n + 1 > CHILD_OUTPUT_MAX) {
        b->overflow = 1;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->overflow = 1;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

/* Parses the record; 1 when whole. */
static int parse_record(const buffer *b, int *rc, const char **msg, size_t *msg_len, const char **text,
                        size_t *text_len)
{
    if (!b->s || b->overflow)
        return 0;
    const char *nl = memchr(b->s, '\n', b->len);
    if (!nl)
        return 0;
    size_t m = 0, t = 0;
    int code = 0;
    if (sscanf(b->s, RECORD_TAG " %d %zu %zu", &code, &m, &t) != 3)
        return 0;
    size_t head = (size_t)(nl - b->s) + 1;
    if (head + m + t != b->len)
        return 0;
    *rc = code;
    *msg = b->s + head;
    *msg_len = m;
    *text = b->s + head + m;
    *text_len = t;
    return 1;
}

int bk_isolate(bk_isolated_fn fn, void *ctx, unsigned timeout_s, const char *what, bk_isolated *res, bk_error *err)
{
    bk_isolated local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    if (!timeout_s)
        timeout_s = BK_ISOLATE_TIMEOUT_S;
    int fds[2];
    if (pipe(fds) != 0)
        return bk_fail(err, BK_ERR_INTERNAL, "%s: cannot create a pipe for a child process: %s", what, strerror(errno));
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return bk_fail(err, BK_ERR_INTERNAL, "%s: cannot start a child process (fork): %s", what, strerror(e));
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: a kill at the deadline reaches whatever it started */
        close(fds[0]);
        child_main(fds[1], fn, ctx, timeout_s);
    }
    setpgid(pid, pid); /* also here: whichever of the two runs first */
    close(fds[1]);

    buffer b = {0};
    double deadline = bk_now_seconds() + (double)timeout_s;
    int status = 0, reaped = 0;
    for (;;) {
        double left = deadline - bk_now_seconds();
        if (left <= 0) {
            res->timed_out = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int wait_ms = left > 0.2 ? 200 : (int)(left * 1000) + 1;
        int k = poll(&p, 1, wait_ms);
        if (k < 0 && errno != EINTR)
            break;
        if (k > 0) {
            char chunk[4096];
            ssize_t got = read(fds[0], chunk, sizeof chunk);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                break; /* end of the pipe: the child is done (or closed it) */
            buffer_add(&b, chunk, (size_t)got);
            continue;
        }
        /* nothing to read for a while: the child may be gone while something it started holds the pipe */
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            reaped = 1;
            /* take what is still in the pipe, without waiting */
            for (;;) {
                struct pollfd q = {fds[0], POLLIN, 0};
                char chunk[4096];
                if (poll(&q, 1, 0) <= 0)
                    break;
                ssize_t got = read(fds[0], chunk, sizeof chunk);
                if (got <= 0)
                    break;
                buffer_add(&b, chunk, (size_t)got);
            }
            break;
        }
    }
    close(fds[0]);
    /* the pipe is closed or drained: wait for the child to end, up to the deadline */
    while (!reaped && !res->timed_out) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) {
            reaped = 1;
            break;
        }
        if (bk_now_seconds() >= deadline) {
            res->timed_out = 1;
            break;
        }
        struct timespec pause = {0, 5 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (res->timed_out) {
        kill(-pid, SIGKILL); /* the child's group: it and whatever it started */
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }

    int rc = BK_OK;
    const char *msg = NULL, *text = NULL;
    size_t msg_len = 0, text_len = 0;
    if (!res->timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
        parse_record(&b, &rc, &msg, &msg_len, &text, &text_len)) {
        res->finished = 1;
        res->output = malloc(text_len + 1);
        if (!res->output) {
            free(b.s);
            return bk_fail(err, BK_ERR_NOMEM, "%s: out of memory for the %zu bytes a child process sent", what,
                           text_len);
        }
        memcpy(res->output, text, text_len);
        res->output[text_len] = '\0';
        res->output_len = text_len;
        if (rc != BK_OK) {
            if (err) {
                err->code = rc;
                size_t n = msg_len < sizeof err->message - 1 ? msg_len : sizeof err->message - 1;
                memcpy(err->message, msg, n);
                err->message[n] = '\0';
            }
        }
        free(b.s);
        return rc;
    }
    free(b.s);
    if (res->timed_out)
        return bk_fail(err, BK_ERR_PLUGIN, "%s did not finish within %u s (killed)", what, timeout_s);
    if (WIFSIGNALED(status)) {
        res->signal = WTERMSIG(status);
        const char *name = bk_sigsafe_signal_name(res->signal);
        return bk_fail(err, BK_ERR_PLUGIN, "%s crashed with signal %d (%s)", what, res->signal,
                       name ? name : strsignal(res->signal));
    }
    res->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (b.overflow)
        return bk_fail(err, BK_ERR_PLUGIN, "%s sent more than %zu bytes back", what, CHILD_OUTPUT_MAX);
    return bk_fail(err, BK_ERR_PLUGIN,
                   "%s ended the process (exit status %d) before finishing (plugin code must never call exit())",
                   what, res->exit_status);
}
