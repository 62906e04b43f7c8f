/* Reading a user's file: regular files only, with a size cap where a file can be large.
 *
 * A path given by a user (an experiment, sweep or base file, a checkpoint, a plugin, a report's
 * JSON) may name a FIFO, which blocks an open() or read() for ever, or a device such as /dev/zero,
 * which a reader grows into without end. Every reader of such a path opens it through this file:
 * the open does not block (O_NONBLOCK, cleared once the file is known to be regular), anything but a
 * regular file is refused naming the path and what it is, and a file over the caller's cap is
 * refused before it is read. */
#ifndef BK_FILE_H
#define BK_FILE_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Caps (bytes) for the text files a user hands in. */
#define BK_TEXT_FILE_MAX ((uint64_t)64 << 20)   /* experiment, sweep, base files, a report's JSON */
#define BK_JSONL_FILE_MAX ((uint64_t)1 << 30)   /* metrics.jsonl: one line a step */

/* What kind of file `mode` (st_mode) is, in words: "a FIFO", "a directory", "a character device", ... */
const char *bk_file_kind(unsigned mode);

/* Opens `path` for reading; it must be a regular file of at most max_bytes (0: no cap). `what` names
 * it in errors ("experiment file", "checkpoint"). The open never blocks. On success *out is the open
 * stream (close it with fclose) and *size its size when size is not NULL. Fails with BK_ERR_IO,
 * naming the path: missing or unreadable, not a regular file, or larger than the cap. */
int bk_file_open_regular(const char *path, const char *what, uint64_t max_bytes, FILE **out, uint64_t *size,
                         bk_error *err);

/* Checks without reading that `path` is a regular file (for paths another library opens, such as
 * dlopen's); the same errors as bk_file_open_regular. */
int bk_file_check_regular(const char *path, const char *what, bk_error *err);

/* Reads the whole of a regular file of at most max_bytes into a NUL-terminated buffer (*text, to
 * free); *len is its length without the NUL. A file that grows past the cap while read is refused. */
int bk_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **text, size_t *len,
                     bk_error *err);

/* fsync of the directory holding `path`, so that a rename into it is durable; 0, or -1 with errno set.
 * A file system that cannot sync a directory (EINVAL) is not an error. */
int bk_file_sync_dir(const char *path);

/* Writes all n bytes to fd, again after EINTR and short writes; 0, or -1 with errno set. */
int bk_write_all(int fd, const void *buf, size_t n);

/* 1 when `name` ends with one of suffixes[n], or n <= 0 (no filter): which names a data directory's
 * reader takes (data/data.c), and so which an output must not be written as (util/output.c). */
int bk_name_has_suffix(const char *name, const char *const *suffixes, int n);

/* Takes the lock file `path` (created when missing; a regular file, not followed through a symbolic
 * link) with an exclusive flock(), held while *fd stays open, and writes this process's pid into it.
 * When another process holds it: BK_OK with *fd = -1 and that process's pid (as its file says, or
 * "unknown") in holder[size], for the caller's message. `what` names the lock in errors ("the lock
 * file of the run directory"). Closing *fd releases the lock; the file stays (removing it would race
 * the next holder). */
int bk_file_lock(const char *path, const char *what, int *fd, char *holder, size_t size, bk_error *err);

#ifdef __cplusplus
}
#endif

#endif
