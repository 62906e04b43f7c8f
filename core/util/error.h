/* Engine errors: a code and a one-line message that names the thing (file, key, line, plugin) and
 * what was expected. Library code fills one of these and returns the code; only the CLI prints. */
#ifndef BK_ERROR_H
#define BK_ERROR_H

#include <biaskit/plugin.h>
#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BK_ERROR_MESSAGE_MAX 2048

/* The plugin ABI's codes (biaskit_status) plus the engine's own. */
enum {
    BK_OK = BIASKIT_OK,
    BK_ERR_CONFIG = BIASKIT_ERR_CONFIG,
    BK_ERR_INVALID = BIASKIT_ERR_INVALID,
    BK_ERR_NOMEM = BIASKIT_ERR_NOMEM,
    BK_ERR_UNSUPPORTED = BIASKIT_ERR_UNSUPPORTED,
    BK_ERR_DEVICE = BIASKIT_ERR_DEVICE,
    BK_ERR_INTERNAL = BIASKIT_ERR_INTERNAL,
    BK_ERR_IO = 20,     /* a file could not be read or written */
    BK_ERR_PARSE = 21,  /* a file is malformed */
    BK_ERR_PLUGIN = 22, /* a plugin could not be found, loaded or accepted */
    BK_ERR_USAGE = 23   /* bad command line */
};

typedef struct bk_error {
    int code;
    char message[BK_ERROR_MESSAGE_MAX];
} bk_error;

/* Sets err (if not NULL) to `code` and the formatted message; returns `code`. */
int bk_fail(bk_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int bk_vfail(bk_error *err, int code, const char *fmt, va_list ap);

/* Prepends context to an existing message ("while loading X: " + message); returns err->code. */
int bk_error_prefix(bk_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends the formatted text at text + *at (text holds `size` bytes in all) and advances *at; when it does
 * not fit, BK_ERR_INVALID saying that `what` is longer than size bytes (text then holds a truncated copy). */
int bk_append(char *text, size_t size, size_t *at, bk_error *err, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Copies `src` into dst[size], truncating; always terminates (size > 0). */
void bk_copy_text(char *dst, size_t size, const char *src);

/* Clears err to BK_OK with an empty message. */
void bk_error_clear(bk_error *err);

#ifdef __cplusplus
}
#endif

#endif
