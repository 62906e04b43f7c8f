#include "cli/args.h"

#include "config/experiment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const bk_arg_spec *find_spec(const bk_arg_spec *specs, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0)
            return &specs[i];
    return NULL;
}

int bk_args_parse(int argc, char **argv, const bk_arg_spec *specs, size_t n_specs, const char *command,
                  bk_args *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            if (out->n_positional == BK_ARGS_MAX)
                return bk_fail(err, BK_ERR_USAGE, "%s: too many arguments (at most %d)", command, BK_ARGS_MAX);
            out->positional[out->n_positional++] = arg;
            continue;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const bk_arg_spec *spec = find_spec(specs, n_specs, name, len);
        if (!spec) {
            const char *names[BK_ARGS_MAX];
            size_t k = 0;
            for (; k < n_specs && k < BK_ARGS_MAX; k++)
                names[k] = specs[k].name;
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)len, name);
            const char *hint = bk_closest_word(word, names, k);
            if (hint)
                return bk_fail(err, BK_ERR_USAGE, "%s: unknown option '--%s' (did you mean '--%s'?); see '%s --help'",
                               command, word, hint, command);
            return bk_fail(err, BK_ERR_USAGE, "%s: unknown option '--%s'; see '%s --help'", command, word, command);
        }
        const char *value = "1";
        if (spec->takes_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return bk_fail(err, BK_ERR_USAGE, "%s: option '--%s' needs a value", command, spec->name);
        } else if (eq) {
            return bk_fail(err, BK_ERR_USAGE, "%s: option '--%s' takes no value", command, spec->name);
        }
        if (out->n_given == BK_ARGS_MAX)
            return bk_fail(err, BK_ERR_USAGE, "%s: too many options (at most %d)", command, BK_ARGS_MAX);
        out->given[out->n_given].spec = spec;
        out->given[out->n_given++].value = value;
    }
    return BK_OK;
}

const char *bk_args_get(const bk_args *a, const char *name)
{
    const char *v = NULL;
    for (size_t i = 0; i < a->n_given; i++)
        if (strcmp(a->given[i].spec->name, name) == 0)
            v = a->given[i].value;
    return v;
}

size_t bk_args_all(const bk_args *a, const char *name, const char **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < a->n_given && n < cap; i++)
        if (strcmp(a->given[i].spec->name, name) == 0)
            out[n++] = a->given[i].value;
    return n;
}

int bk_args_int(const char *name, const char *value, long min, long max, long *out, bk_error *err)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < min || v > max)
        return bk_fail(err, BK_ERR_USAGE, "--%s: expected an integer in [%ld, %ld], got '%s'", name, min, max, value);
    *out = v;
    return BK_OK;
}
