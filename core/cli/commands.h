/* The subcommands of the `biaskit` program. Each returns the process exit code: 0 success,
 * 1 failure (message already printed), 2 bad usage. */
#ifndef BK_COMMANDS_H
#define BK_COMMANDS_H

#include "bias/terms.h"
#include "cli/args.h"
#include "config/experiment.h"
#include "plugin/host.h"
#include "train/reopen.h"
#include "util/error.h"

int bk_cmd_plugins(int argc, char **argv);
int bk_cmd_bias(int argc, char **argv);
int bk_cmd_check(int argc, char **argv);
int bk_cmd_config(int argc, char **argv);
int bk_cmd_train(int argc, char **argv);
int bk_cmd_eval(int argc, char **argv);
int bk_cmd_generate(int argc, char **argv);
int bk_cmd_passkey(int argc, char **argv);
/* `biaskit report DIR [--out OUT]` without the argument parsing; returns the exit status. */
int bk_report_sweep_dir(const char *dir, const char *out, double clip);
int bk_cmd_report(int argc, char **argv);
int bk_cmd_sweep(int argc, char **argv);
int bk_cmd_trf(int argc, char **argv);
int bk_cmd_erf(int argc, char **argv);
int bk_cmd_params(int argc, char **argv);
int bk_cmd_import(int argc, char **argv);
int bk_cmd_export(int argc, char **argv);
int bk_cmd_tokenize(int argc, char **argv);
int bk_cmd_new_plugin(int argc, char **argv);

/* An experiment opened for a command: the validated file, the plugin registry and the created terms. */
typedef struct bk_session {
    bk_experiment exp;
    bk_registry reg;
    bk_term_set terms;
    char dir[4096]; /* the experiment file's directory, absolute: a relative plugin path is read from it */
} bk_session;

/* Load `path` with its --set overrides, then load the plugins and create the terms. */
int bk_session_open(bk_session *s, const char *path, const char *const *overrides, size_t n_overrides,
                    bk_error *err);
void bk_session_close(bk_session *s);

/* A command's --strict (given: `strict` is not 0): a plugin file or directory writable by others is
 * refused when it loads, not only warned about (plugin/host.h). */
void bk_cli_plugin_strictness(int strict);

/* The reopening request of a command that opens a checkpoint (train/reopen.h), from its flags: every
 * --set (into sets_buf[cap]), --strict and --no-verify (each 0 when the command does not take it); the
 * plugins' strictness set as --strict says. */
bk_reopen_request bk_cli_reopen_request(const bk_args *args, bk_reopen_purpose purpose, const char **sets_buf,
                                        size_t cap);

/* Print "biaskit: error: MESSAGE" and return the exit code for the error. */
int bk_report(const bk_error *err);

#endif
