/* A small C view of a TOML document, over toml++ (the one C++ file of the engine: toml.cpp).
 *
 * Every node remembers where it came from (file, line, column) so that every configuration error
 * can point at the text that caused it. Nodes are borrowed from their document and stay valid until
 * bk_toml_free() (or until an override replaces them). */
#ifndef BK_TOML_H
#define BK_TOML_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bk_toml bk_toml;           /* a parsed document; owns all its nodes */
typedef struct bk_toml_node bk_toml_node; /* a node inside a document */

typedef enum bk_toml_type {
    BK_TOML_NONE = 0,
    BK_TOML_TABLE,
    BK_TOML_ARRAY,
    BK_TOML_STRING,
    BK_TOML_INT,
    BK_TOML_FLOAT,
    BK_TOML_BOOL,
    BK_TOML_DATE,
    BK_TOML_TIME,
    BK_TOML_DATETIME
} bk_toml_type;

/* Where a node or key was written. `source` is the file's path, or "--set KEY=VALUE" for a value
 * given on the command line; line and column are 1-based (0 when unknown). */
typedef struct bk_toml_pos {
    const char *source;
    uint32_t line;
    uint32_t column;
} bk_toml_pos;

/* One key of a table with its value. */
typedef struct bk_toml_entry {
    const char *key;
    bk_toml_pos key_pos;
    const bk_toml_node *value;
} bk_toml_entry;

/* The deepest nesting of tables and arrays a document may have (a table header [a.b.c] or a dotted
 * key a.b.c = 1 counts one level per key). The tree is converted and freed recursively, so a bound
 * keeps a hostile file from overflowing the stack; real experiment files nest 3 or 4 levels. */
#define BK_TOML_MAX_DEPTH 128

/* Read a whole TOML file into a NUL-terminated, malloc'd buffer (*len bytes, without the final NUL).
 * The one reader of experiment files: `biaskit config` (bk_toml_parse_file) and `train`
 * (core/train/lm.c) both read through it, so both see the same text. A NUL byte inside the file is
 * refused (a C string would silently end there). Errors: BK_ERR_IO "cannot read 'PATH': REASON";
 * BK_ERR_PARSE "PATH:LINE:COL: invalid TOML: a NUL byte ...". */
int bk_toml_read_file(const char *path, char **text, size_t *len, bk_error *err);

/* Parse a file. Errors: BK_ERR_IO "cannot read 'PATH': REASON"; BK_ERR_PARSE
 * "PATH:LINE:COL: invalid TOML: DESCRIPTION", also for a NUL byte and for nesting deeper than
 * BK_TOML_MAX_DEPTH. */
int bk_toml_parse_file(const char *path, bk_toml **out, bk_error *err);
/* Parse text; `source_name` is used in positions and messages. */
int bk_toml_parse_string(const char *text, const char *source_name, bk_toml **out, bk_error *err);
/* Parse `len` bytes that need not end in NUL (a NUL byte inside them is an error, as in a file). */
int bk_toml_parse_buffer(const char *text, size_t len, const char *source_name, bk_toml **out, bk_error *err);
void bk_toml_free(bk_toml *doc);

const bk_toml_node *bk_toml_root(const bk_toml *doc);

bk_toml_type bk_toml_type_of(const bk_toml_node *node);
/* "table", "array", "string", "integer", "float", "boolean", "date", "time", "date-time". */
const char *bk_toml_type_name(bk_toml_type type);
bk_toml_pos bk_toml_position(const bk_toml_node *node);

/* Number of entries of a table or elements of an array; 0 for anything else. */
size_t bk_toml_count(const bk_toml_node *node);
/* The i-th entry of a table (in key order); returns 0 and fills *out, or -1 when out of range. */
int bk_toml_entry_at(const bk_toml_node *table, size_t i, bk_toml_entry *out);
/* Value of `key` in a table, or NULL (also when `table` is not a table). */
const bk_toml_node *bk_toml_get(const bk_toml_node *table, const char *key);
/* Position of `key` itself inside `table` (falls back to the table's position). */
bk_toml_pos bk_toml_key_position(const bk_toml_node *table, const char *key);
/* The i-th element of an array, or NULL. */
const bk_toml_node *bk_toml_at(const bk_toml_node *array, size_t i);

/* Scalar values; the caller checks the type first. bk_toml_float also accepts an integer node. */
int64_t bk_toml_int(const bk_toml_node *node);
double bk_toml_float(const bk_toml_node *node);
int bk_toml_bool(const bk_toml_node *node);
const char *bk_toml_string(const bk_toml_node *node);

/* Apply a command-line override "dotted.path=value" (biaskit --set). Path segments are table keys;
 * a segment that is a decimal number indexes an array (term.0.weight). Missing tables on the way
 * are created; an index past the end of an array, or a segment that crosses a scalar, is an error.
 * The value is read as a TOML value (12, 1.5, true, "x", [1, 2]); text that is not a TOML value is
 * taken as a bare string (mixing=kernel). The new node's position names the override. A path of
 * more than BK_TOML_MAX_DEPTH segments is refused. Errors: BK_ERR_USAGE "--set 'TEXT': REASON". */
int bk_toml_override(bk_toml *doc, const char *assignment, bk_error *err);

#ifdef __cplusplus
}
#endif

#endif
