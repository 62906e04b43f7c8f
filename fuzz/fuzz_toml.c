/* Fuzz target: the TOML shim (core/config/toml.cpp) and the experiment schema behind it
 * (core/config/experiment.c). The input is an experiment file. When its first line is a comment
 * "#set KEY=VALUE", that assignment is applied as a --set override too. Every node of the parsed
 * tree is walked through the C API; a document that parses is then validated as an experiment. */
#include "fuzz.h"

#include "config/experiment.h"
#include "config/toml.h"

#include <stdlib.h>
#include <string.h>

/* Visits every node below `node` (recursion is bounded: the shim refuses deeper documents). */
static size_t walk(const bk_toml_node *node, int depth)
{
    size_t seen = 1;
    if (depth > 2 * BK_TOML_MAX_DEPTH + 1)
        abort(); /* the shim let a deeper document through (a file and a --set path: the limit each) */
    bk_toml_pos pos = bk_toml_position(node);
    (void)pos;
    switch (bk_toml_type_of(node)) {
    case BK_TOML_TABLE:
        for (size_t i = 0; i < bk_toml_count(node); i++) {
            bk_toml_entry e;
            if (bk_toml_entry_at(node, i, &e) != 0 || !e.key || !e.value)
                abort();
            if (bk_toml_get(node, e.key) == NULL)
                abort();
            (void)bk_toml_key_position(node, e.key);
            seen += walk(e.value, depth + 1);
        }
        break;
    case BK_TOML_ARRAY:
        for (size_t i = 0; i < bk_toml_count(node); i++)
            seen += walk(bk_toml_at(node, i), depth + 1);
        break;
    case BK_TOML_STRING:
    case BK_TOML_DATE:
    case BK_TOML_TIME:
    case BK_TOML_DATETIME:
        seen += strlen(bk_toml_string(node)) > 0;
        break;
    default:
        (void)bk_toml_int(node);
        (void)bk_toml_float(node);
        (void)bk_toml_bool(node);
        break;
    }
    (void)bk_toml_type_name(bk_toml_type_of(node));
    return seen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bk_error err;
    bk_toml *doc = NULL;
    int rc = bk_toml_parse_buffer((const char *)data, size, "fuzz.toml", &doc, &err);
    if (rc == BK_OK) {
        walk(bk_toml_root(doc), 0);
        bk_toml_free(doc);
    } else if (err.message[0] == '\0') {
        abort(); /* every failure explains itself */
    }
    if (memchr(data, '\0', size))
        return 0; /* refused above; the text entry points take C strings */

    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *set = NULL;
    if (size > 5 && memcmp(text, "#set ", 5) == 0) {
        char *eol = strchr(text, '\n');
        size_t n = eol ? (size_t)(eol - text) - 5 : size - 5;
        set = malloc(n + 1);
        if (set) {
            memcpy(set, text + 5, n);
            set[n] = '\0';
        }
    }
    const char *overrides[1] = {set};
    bk_experiment exp;
    rc = bk_experiment_parse(text, "fuzz.toml", overrides, set ? 1 : 0, &exp, &err);
    if (rc == BK_OK) {
        if (exp.model.heads <= 0 || exp.model.dim % exp.model.heads != 0)
            abort(); /* validation let an impossible model through */
        walk(bk_toml_root(exp.doc), 0);
        bk_experiment_free(&exp);
    } else if (err.message[0] == '\0') {
        abort();
    }
    free(set);
    free(text);
    return 0;
}
