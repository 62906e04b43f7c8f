/* Where relative paths are read from: the one place the rule of README.md "Paths" is written.
 *
 *   - A path written in an experiment file ([data] paths and val_paths, [run] out_dir, a [[term]]
 *     plugin given as a path; `--set` edits the file, so its values follow the same rule) is read
 *     from the experiment file's directory. That directory is made absolute when the file is opened
 *     and checkpoints store it so, so `eval` and `--resume` work from any working directory.
 *   - A path given as a command-line argument (the experiment file, --out, --resume, --data, a
 *     plugin path of `biaskit plugins` / `biaskit check`) is read from the working directory.
 *   - With no out_dir anywhere, a training writes runs/<experiment file name without .toml> in the
 *     working directory. */
#ifndef BK_PATH_H
#define BK_PATH_H

#include "util/error.h"

#include <stddef.h>

/* `path` read from `base_dir`: an absolute path (or a NULL or empty base) as is, else base_dir/path;
 * lexically cleaned (bk_path_clean). Fails (BK_ERR_INVALID, naming the path) when it does not fit. */
int bk_path_resolve(const char *base_dir, const char *path, char *out, size_t size, bk_error *err);

/* The absolute directory of `file` (which need not exist): the real path of its directory when that
 * exists, else the working directory joined with it, cleaned. */
int bk_path_dir_of(const char *file, char *out, size_t size, bk_error *err);

/* 1 when `path` (which need not exist) is the directory `dir` or lies under it, by real paths: through
 * symbolic links, and for a path not made yet by the real path of its deepest existing directory; 0 when
 * not, or when `dir` does not exist. */
int bk_path_within(const char *path, const char *dir);

/* Lexical clean-up in place: repeated '/' and "." components go, as does a trailing '/';
 * "dir/.." pairs are kept (dir may be a symbolic link). "" becomes ".". */
void bk_path_clean(char *path);

/* How a path is shown to the user: its real path when it exists, else the cleaned path. */
void bk_path_display(const char *path, char *out, size_t size);

/* The name a figure title gives an experiment or a run: the file's name without its directories and
 * ".toml" / ".safetensors"; a run's checkpoint (checkpoint*.safetensors) is named by its run directory
 * ("runs/demo_alibi/checkpoint.safetensors" -> "demo_alibi"). */
void bk_path_title(const char *path, char *out, size_t size);

#endif
