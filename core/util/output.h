/* The files a command writes (eval --csv/--json/--positions, bias/trf/erf --csv; --plot's files are
 * checked here and written by report/plot.h): one way for all of them.
 *
 *   - "-" is standard output. Its writes are checked too: `--csv - >/dev/full` is an error.
 *   - An output is refused before anything is written (BK_ERR_USAGE, naming the flag and both paths)
 *     when it is the same file as one of the command's inputs (the same device and inode: through a
 *     symbolic link or a hard link too), or when it lies in an input data directory where the data
 *     reader would take it (a name not hidden, ending with one of the data's extensions); also when two
 *     outputs of one command name the same file (or both "-"), when the path is empty, and when it is
 *     a directory.
 *   - A regular file, or a new one, is written atomically: into a temporary file in the same directory
 *     (created with O_EXCL under a unique name), every write checked, then flushed, fsync'ed, closed and
 *     renamed over the target. Any failure (a full disk, a file-size limit, an I/O error) removes the
 *     temporary file and leaves the old file as it was. A symbolic link is followed: its target is
 *     replaced and the link stays. A replaced file keeps its permission bits; a file of several hard
 *     links gets a new inode under this name (the other names keep the old text).
 *   - A character device or a FIFO (/dev/null, /dev/full, the pipe of a shell's process substitution)
 *     cannot be replaced atomically: it is written directly, with every write and the close checked. A
 *     FIFO that no process reads is refused at once instead of waited on. A block device or a socket is
 *     refused.
 */
#ifndef BK_OUTPUT_H
#define BK_OUTPUT_H

#include "util/error.h"

#include <stddef.h>
#include <stdio.h>

#define BK_OUTPUT_PATH_MAX 4096

/* One input of a command, which no output may replace. */
typedef struct bk_output_input {
    const char *what;        /* "checkpoint", "experiment file", "data path", "plugin" */
    const char *path;
    /* when path is a directory (a data path): the names the data reader takes under it, by suffix
     * (n_ext 0: every file); hidden names are never taken */
    const char *const *ext;
    int n_ext;
} bk_output_input;

typedef enum bk_output_kind {
    BK_OUTPUT_CLOSED = 0,
    BK_OUTPUT_STDOUT,  /* "-" */
    BK_OUTPUT_ATOMIC,  /* a temporary file renamed over the target */
    BK_OUTPUT_DIRECT   /* a character device or a FIFO, written in place */
} bk_output_kind;

typedef struct bk_output {
    FILE *f;                              /* where the command writes; NULL once closed */
    bk_output_kind kind;
    int error;                            /* errno of the first write that failed; 0: none */
    char flag[32];                        /* "--csv" */
    char path[BK_OUTPUT_PATH_MAX];        /* as given */
    char target[BK_OUTPUT_PATH_MAX];      /* ATOMIC: the file replaced (a link's target), absolute */
    char tmp[BK_OUTPUT_PATH_MAX + 64];    /* ATOMIC: the temporary file */
} bk_output;

/* Checks, writing nothing, that `path` may be the output of `flag` ("--csv"): the rules above against
 * inputs[n_inputs]; a missing directory or one not writable is reported here too (BK_ERR_IO), so that
 * a command fails before its work rather than after. */
int bk_output_check(const char *flag, const char *path, const bk_output_input *inputs, int n_inputs,
                    bk_error *err);

/* The same for a file `written` beside the output `path` of `flag` (--plot's .gp and .dat). */
int bk_output_check_beside(const char *flag, const char *path, const char *written, const bk_output_input *inputs,
                           int n_inputs, bk_error *err);

/* Refuses two outputs naming one file (n of them; NULL paths are skipped): "--json 'a' is the same
 * file as --csv 'a'"; two "-" are refused too (their texts would mix on standard output). */
int bk_output_check_distinct(const char *const *flags, const char *const *paths, int n, bk_error *err);

/* Checks (bk_output_check) and opens `path` for writing; o->f is where the command writes. Close with
 * bk_output_close (which commits) or bk_output_discard. */
int bk_output_open(bk_output *o, const char *flag, const char *path, const bk_output_input *inputs, int n_inputs,
                   bk_error *err);

/* Formatted write; a failure is kept (o->error) and reported by bk_output_close; later writes are
 * skipped. Returns 0, or -1 once a write failed. Writes made directly to o->f are checked at close. */
int bk_output_printf(bk_output *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `s` as a JSON string literal (quotes, backslashes and control characters escaped). */
int bk_output_json_string(bk_output *o, const char *s);

/* Finishes the output: any failed write, the flush, fsync and close are errors (BK_ERR_IO, naming the
 * flag, the file and the cause); then the temporary file is renamed over the target. On failure the
 * temporary file is removed and the target is as it was. Standard output is flushed, not closed. */
int bk_output_close(bk_output *o, bk_error *err);

/* Abandons the output: the temporary file is removed, the target untouched. Safe on a closed output. */
void bk_output_discard(bk_output *o);

/* A text cell of a CSV file (RFC 4180): quoted, with '"' doubled, when it holds a comma, a quote or a line
 * break; a cell that begins with '=', '+', '-', '@', a tab or a carriage return is prefixed with "'", so that
 * a spreadsheet shows it as text and never runs it as a formula. NULL is the empty cell. Numbers are not
 * cells of this kind (they are printed as numbers). */
void bk_csv_field(FILE *f, const char *s);

/* Flushes standard output and reports a write to it that failed (a full disk, /dev/full):
 * "cannot write standard output: ...". A command calls it before it exits 0. */
int bk_output_stdout_check(bk_error *err);

#endif
