/* Running untrusted code (a plugin's constructor, entry point or create()) in a child process.
 *
 * A plugin is arbitrary code: it can crash, call exit() or abort(), or never return, in dlopen()
 * (its constructors), in its entry function or in create(). Commands that only need an answer from
 * it (is this plugin loadable, does this experiment's term accept its options, what does the plugin
 * describe) ask that question in a fork()ed child: the child runs `fn`, which may write text for the
 * parent to `out`, and sends back fn's code, message and text. A child that is killed by a signal,
 * ends the process before fn returns, or runs past the time limit becomes an error of the parent
 * naming `what` and what happened; the parent goes on. */
#ifndef BK_ISOLATE_H
#define BK_ISOLATE_H

#include "util/error.h"

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The time limit when a command has no option for it, in seconds. */
#define BK_ISOLATE_TIMEOUT_S 60u

/* The work of the child: returns a code and fills err; may write text to `out`. */
typedef int (*bk_isolated_fn)(void *ctx, FILE *out, bk_error *err);

typedef struct bk_isolated {
    int finished;    /* fn returned in the child */
    int signal;      /* the signal that ended the child (0: none) */
    int exit_status; /* the child's exit status when it ended without finishing */
    int timed_out;   /* killed at the time limit */
    char *output;    /* what fn wrote to out, NUL-terminated (NULL when it did not finish); free() it */
    size_t output_len;
} bk_isolated;

/* In a fork()ed child, before plugin code runs: the default action for the signals a crash, a time
 * limit or an interrupt sends (a parent's handlers, a test harness's included, must not run there), and
 * none of them blocked. */
void bk_child_default_signals(void);

/* Runs fn(ctx, out, err) in a child with a limit of timeout_s seconds (0: BK_ISOLATE_TIMEOUT_S).
 * Returns fn's code with fn's message when the child finished (res->output holds its text, also on
 * failure); BK_ERR_PLUGIN with "WHAT crashed with signal 11 (SIGSEGV, ...)", "WHAT did not finish
 * within N s (killed)" or "WHAT ended the process (exit status 3) before finishing" when it did not;
 * BK_ERR_INTERNAL when no child could be started. res may be NULL when the text is not wanted. */
int bk_isolate(bk_isolated_fn fn, void *ctx, unsigned timeout_s, const char *what, bk_isolated *res, bk_error *err);

#ifdef __cplusplus
}
#endif

#endif
