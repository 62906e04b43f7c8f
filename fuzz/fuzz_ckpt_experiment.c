/* Fuzz target: the metadata a checkpoint carries, read the way a checkpoint load reads it
 * (bk_checkpoint_meta_read, train/checkpoint.h) before any plugin or model is touched: the JSON, the
 * format and its seal, every number, the stored experiment text with its stored overrides (the TOML
 * shim and the schema), the step and data cursor against that experiment, and the --set overrides of
 * the command line judged by the role of every key they change (bk_experiment_diff).
 *
 * Input: a flags byte, then
 *   raw (flag 4 clear):   the "biaskit" metadata JSON itself;
 *   built (flag 4 set):   lines "#set K=V" (a --set of the command line), "#saved K=V" (an override
 *                         stored in the checkpoint), "#n STEP TOKENS EPOCH INDEX FORMAT" (the numbers;
 *                         adam_t = STEP), and the rest, the experiment text stored in the checkpoint;
 *                         the target wraps them in metadata as a save writes it.
 * Flags: 1 = train --resume (else eval), 2 = strict, 8 = seal the metadata as a save does (else a seal
 * of zeros, or none with 16). Oracle, beyond "no sanitizer report": every failure has a message; a
 * metadata that reads has adam_t = step <= [train] steps, format 3 tokens and data cursor that the steps
 * make, and an experiment whose shape and training facts (and at eval its whole [train]) are those of the
 * stored experiment: no --set got past its role. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz.h"

#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SETS 8

static void quiet(void *ctx, const char *message)
{
    (void)ctx;
    if (!message || !*message)
        abort(); /* a warning says something */
}

/* The "#..." lines of a built input: the strings point into `text` (cut into lines); the other lines,
 * the experiment, are copied to `experiment` (as large as text). */
typedef struct built {
    const char *sets[MAX_SETS], *saved[MAX_SETS];
    int n_sets, n_saved;
    long long step, tokens, epoch, index, format;
} built;

static void read_lines(char *text, char *experiment, built *b)
{
    char *out = experiment;
    for (char *line = text; *line;) {
        char *eol = strchr(line, '\n');
        char *next = eol ? eol + 1 : line + strlen(line);
        if (eol)
            *eol = '\0';
        if (strncmp(line, "#set ", 5) == 0 && b->n_sets < MAX_SETS)
            b->sets[b->n_sets++] = line + 5;
        else if (strncmp(line, "#saved ", 7) == 0 && b->n_saved < MAX_SETS)
            b->saved[b->n_saved++] = line + 7;
        else if (strncmp(line, "#n ", 3) == 0)
            sscanf(line + 3, "%lld %lld %lld %lld %lld", &b->step, &b->tokens, &b->epoch, &b->index, &b->format);
        else {
            size_t n = strlen(line);
            memcpy(out, line, n);
            out += n;
            if (eol)
                *out++ = '\n';
        }
        line = next;
    }
    *out = '\0';
}

static cJSON *count(long long v)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", v);
    return cJSON_CreateRaw(text);
}

static char *build_metadata(char *text, built *b)
{
    b->format = BK_CHECKPOINT_FORMAT;
    char *experiment = malloc(strlen(text) + 1);
    cJSON *m = cJSON_CreateObject();
    cJSON *saved = cJSON_CreateArray();
    if (!experiment || !m || !saved) {
        free(experiment), cJSON_Delete(m), cJSON_Delete(saved);
        return NULL;
    }
    read_lines(text, experiment, b);
    for (int i = 0; i < b->n_saved; i++)
        cJSON_AddItemToArray(saved, cJSON_CreateString(b->saved[i]));
    cJSON_AddItemToObject(m, "tensors", cJSON_CreateObject());
    cJSON_AddItemToObject(m, "plugins", cJSON_CreateArray());
    cJSON_AddItemToObject(m, "format", count(b->format));
    cJSON_AddItemToObject(m, "step", count(b->step));
    cJSON_AddItemToObject(m, "adam_t", count(b->step));
    cJSON_AddItemToObject(m, "tokens", count(b->tokens));
    cJSON_AddItemToObject(m, "data_epoch", count(b->epoch));
    cJSON_AddItemToObject(m, "data_index", count(b->index));
    cJSON_AddStringToObject(m, "config_source", "fuzz.toml");
    cJSON_AddStringToObject(m, "config_dir", "/nonexistent");
    cJSON_AddStringToObject(m, "config", experiment);
    cJSON_AddStringToObject(m, "checksum", "xxh64");
    cJSON_AddItemToObject(m, "overrides", saved);
    char *json = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    free(experiment);
    return json;
}

/* What got through must respect the rules (checkpoint.h). */
static void check_accepted(const bk_checkpoint_meta *m, int resume)
{
    const bk_train_state *s = &m->state;
    if (m->adam_t != s->step || s->step > m->exp.train.steps || m->n_overrides < m->n_saved)
        abort();
    if (m->format < BK_CHECKPOINT_FORMAT_OLDEST || m->format > BK_CHECKPOINT_FORMAT ||
        (m->counts_checked && m->format < 3))
        abort();
    /* the stored experiment, alone: no --set may have changed its shape or training facts */
    bk_experiment stored;
    bk_error err;
    if (bk_experiment_parse(m->config, "stored", m->overrides, (size_t)m->n_saved, &stored, &err) != BK_OK)
        abort(); /* it read once, it reads again */
    bk_experiment_change c[256];
    int n = bk_experiment_diff(&stored, &m->exp, c, 256);
    for (int i = 0; i < n && i < 256; i++)
        if (c[i].role == BK_KEY_MODEL || c[i].role == BK_KEY_FACT || (!resume && c[i].role == BK_KEY_SCHEDULE))
            abort();
    bk_experiment_free(&stored);
    /* with the facts unchanged, the product was checked to fit on load */
    if (m->counts_checked &&
        s->tokens != s->step * m->exp.train.batch * m->exp.train.accumulate * m->exp.train.length)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int flags = data[0], resume = flags & 1;
    char *text = malloc(size); /* the rest, as a C string (cut at a NUL: metadata is text) */
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    built b = {0};
    char *json = text;
    if (flags & 4) {
        json = build_metadata(text, &b);
        if (!json) {
            free(text);
            return 0;
        }
    }
    char seal[17] = "0000000000000000";
    if (flags & 8)
        bk_checkpoint_seal(json, seal);
    bk_checkpoint_options o = {b.sets, b.n_sets, (flags & 2) != 0, quiet, NULL, 0};
    bk_checkpoint_meta m;
    bk_error err;
    err.message[0] = '\0';
    int rc = bk_checkpoint_meta_read("fuzz.safetensors", json, flags & 16 ? NULL : seal, &o, resume, &m, &err);
    if (rc == BK_OK) {
        check_accepted(&m, resume);
        bk_checkpoint_meta_free(&m);
    } else if (err.message[0] == '\0') {
        abort(); /* every failure explains itself */
    }
    if (json != text)
        free(json);
    free(text);
    return 0;
}
