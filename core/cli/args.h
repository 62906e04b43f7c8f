/* A small command-line reader: positional arguments and options given as "--name value" or
 * "--name=value" (repeatable options such as --set are collected in order). */
#ifndef BK_ARGS_H
#define BK_ARGS_H

#include "util/error.h"

#include <stddef.h>

typedef struct bk_arg_spec {
    const char *name;  /* "layer" for --layer */
    int takes_value;   /* 0: a flag */
    int repeatable;    /* values collected in a list */
} bk_arg_spec;

#define BK_ARGS_MAX 64

typedef struct bk_args {
    const char *positional[BK_ARGS_MAX];
    size_t n_positional;
    struct {
        const bk_arg_spec *spec;
        const char *value; /* "1" for a flag */
    } given[BK_ARGS_MAX];
    size_t n_given;
} bk_args;

/* Errors (BK_ERR_USAGE): unknown option (with a suggestion), missing value, flag given a value. */
int bk_args_parse(int argc, char **argv, const bk_arg_spec *specs, size_t n_specs, const char *command,
                  bk_args *out, bk_error *err);
/* Last value of --name, or NULL. */
const char *bk_args_get(const bk_args *a, const char *name);
/* Every value of a repeatable --name, in order, into out (at most cap); returns the count. */
size_t bk_args_all(const bk_args *a, const char *name, const char **out, size_t cap);
/* Parse an integer option value in [min, max] ("--layer: expected an integer in [0, 3], got 'x'"). */
int bk_args_int(const char *name, const char *value, long min, long max, long *out, bk_error *err);

#endif
