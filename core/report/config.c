/* The report of a sweep, its configuration section (report_internal.h): the setup of the first run
 * (model, training, tokens seen; the sweep's settings are the same for every run but the variants' and
 * the grid's), what validation holds for each corpus (the run's split.json, described as `train` prints
 * it), and each variant's terms as its experiment.toml gives them. */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include "config/experiment.h"
#include "data/split.h"
#include "train/rundir.h"
#include "util/file.h"

#include <stdlib.h>
#include <string.h>

/* The first run of a corpus / a variant (-1 when none). */
static int first_run(const report_ctx *c, const char *corpus, int variant)
{
    for (int i = 0; i < c->n_runs; i++)
        if ((!corpus || !strcmp(c->runs[i].corpus, corpus)) && (variant < 0 || c->runs[i].variant_index == variant))
            return i;
    return -1;
}

/* The split.json of run r as the line train printed, into out; 0 when it cannot be read. */
static int validation_line(const run_rec *r, char *out, size_t size)
{
    char path[REPORT_PATH_MAX + 32], why[256];
    snprintf(path, sizeof path, "%s/" BK_RUN_SPLIT_FILE, r->path);
    cJSON *j = rp_read_json(path, "split file", why, sizeof why);
    if (!j)
        return 0;
    bk_data_split s;
    memset(&s, 0, sizeof s);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(j, "split");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(j, "training"), *va = cJSON_GetObjectItemCaseSensitive(j, "validation");
    const cJSON *list = va ? cJSON_GetObjectItemCaseSensitive(va, "list") : NULL;
    const cJSON *note = cJSON_GetObjectItemCaseSensitive(j, "note"), *unit = cJSON_GetObjectItemCaseSensitive(j, "unit");
    int ok = cJSON_IsString(mode) && tr && va && cJSON_IsArray(list);
    if (ok) {
        s.mode = !strcmp(mode->valuestring, "documents") ? BK_SPLIT_DOCUMENTS
                 : !strcmp(mode->valuestring, "tail")    ? BK_SPLIT_TAIL
                                                         : BK_SPLIT_PATHS;
        s.seed = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "seed"));
        s.fraction = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "fraction"));
        s.text = !cJSON_IsString(unit) || !strcmp(unit->valuestring, "bytes");
        s.first_part = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "first_part"));
        s.files[0] = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tr, "files"));
        s.units[0] = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tr, "units"));
        s.files[1] = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(va, "files"));
        s.units[1] = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(va, "units"));
        if (cJSON_IsString(note))
            bk_copy_text(s.note, sizeof s.note, note->valuestring);
        const int n = cJSON_GetArraySize(list);
        s.val_files = calloc((size_t)(n > 0 ? n : 1), sizeof *s.val_files);
        s.val_units = calloc((size_t)(n > 0 ? n : 1), sizeof *s.val_units);
        ok = s.val_files && s.val_units;
        const cJSON *e;
        cJSON_ArrayForEach(e, list)
        {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
            if (!ok || !cJSON_IsString(f) || !(s.val_files[s.n_val] = rp_dup_text(f->valuestring))) {
                ok = 0;
                break;
            }
            s.val_units[s.n_val++] = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "units"));
        }
    }
    if (ok)
        bk_data_split_describe(&s, 8, out, size);
    bk_data_split_free(&s);
    cJSON_Delete(j);
    return ok;
}

/* The [[term]] tables of an experiment.toml, each as "key = value; key = value" (the file as the sweep
 * wrote it: one key a line), tables joined by " + "; "(none)" without one. */
static void terms_text(const char *path, char *out, size_t size)
{
    char *text = NULL;
    size_t n = 0;
    bk_error err;
    out[0] = '\0';
    if (bk_file_read_all(path, "experiment file", 1 << 20, &text, &n, &err) != BK_OK) {
        snprintf(out, size, "(cannot read experiment.toml)");
        return;
    }
    size_t used = 0;
    int in_term = 0, terms = 0, keys = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        while (*line == ' ' || *line == '\t')
            line++;
        if (*line == '[') {
            in_term = !strncmp(line, "[[term]]", 8);
            if (in_term && used < size)
                used += (size_t)snprintf(out + used, size - used, "%s", terms++ ? " + " : ""), keys = 0;
            continue;
        }
        if (!in_term || !*line || *line == '#' || used >= size)
            continue;
        used += (size_t)snprintf(out + used, size - used, "%s%s", keys++ ? "; " : "", line);
    }
    if (!terms)
        snprintf(out, size, "(none)");
    free(text);
}

void rp_write_config(report_ctx *c, FILE *md)
{
    const int r0 = first_run(c, NULL, -1);
    if (r0 < 0)
        return;
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/experiment.toml", c->runs[r0].path);
    bk_experiment e;
    bk_error err;
    fprintf(md, "## Configuration\n\n");
    if (bk_experiment_load(path, NULL, 0, &e, &err) != BK_OK) {
        fprintf(md, "*The experiment of run `%s` cannot be read: ", c->runs[r0].name);
        rp_md_cell(md, err.message);
        fprintf(md, "*\n\n");
        return;
    }
    char seeds[256] = "";
    size_t used = 0;
    for (int i = 0; i < c->n_runs && used < sizeof seeds; i++) {
        int dup = 0;
        for (int k = 0; k < i && !dup; k++)
            dup = c->runs[k].seed == c->runs[i].seed;
        if (!dup)
            used += (size_t)snprintf(seeds + used, sizeof seeds - used, "%s%lld", used ? ", " : "", c->runs[i].seed);
    }
    const long long tokens = (long long)(e.train.steps * e.train.batch * e.train.length * e.train.accumulate);
    fprintf(md, "As run `%s` was trained (every run the same, but for its variant's terms, its corpus and grid "
                "point, and its seed):\n\n",
            c->runs[r0].name);
    fprintf(md, "| setting | value |\n|---|---|\n");
    fprintf(md, "| model | %lld layers, %lld heads, dim %lld, vocabulary %lld%s |\n", (long long)e.model.layers,
            (long long)e.model.heads, (long long)e.model.dim, (long long)e.model.vocab,
            e.model.vocab == 256 ? " (bytes)" : "");
    fprintf(md, "| training | %lld steps of %lld x %lld tokens%s = %lld tokens; seeds %s |\n", (long long)e.train.steps,
            (long long)e.train.batch, (long long)e.train.length, e.train.accumulate > 1 ? " (accumulated)" : "", tokens,
            seeds);
    fprintf(md, "| optimizer | AdamW, lr %g, %lld warm-up steps, cosine to %g x lr, weight decay %g, betas %g / %g, "
                "gradient clip %g |\n",
            e.train.lr, (long long)e.train.warmup, e.train.final_lr, e.train.weight_decay, e.train.beta1, e.train.beta2,
            e.train.grad_clip);
    fprintf(md, "| evaluation | lengths");
    for (int l = 0; l < c->n_lengths; l++)
        fprintf(md, "%s %d", l ? "," : "", (int)c->lengths[l]);
    fprintf(md, "; non-overlapping chunks%s |\n", c->sliding > 0 ? " and a sliding window" : "");
    bk_experiment_free(&e);
    /* per corpus: its data and what validation holds */
    for (int i = 0; i < c->n_runs; i++) {
        if (first_run(c, c->runs[i].corpus, -1) != i)
            continue;
        char line[2048];
        fprintf(md, "| data `");
        rp_md_cell(md, c->runs[i].corpus);
        fprintf(md, "` | ");
        if (validation_line(&c->runs[i], line, sizeof line))
            rp_md_cell(md, line);
        else
            fprintf(md, "(no split.json in run `%s`: trained before the runs recorded their split)", c->runs[i].name);
        fprintf(md, " |\n");
    }
    fprintf(md, "\n| variant | terms (its experiment.toml) |\n|---|---|\n");
    for (int v = 0; v < c->n_variants; v++) {
        const int r = first_run(c, NULL, v);
        if (r < 0)
            continue;
        char terms[1500];
        snprintf(path, sizeof path, "%s/experiment.toml", c->runs[r].path);
        terms_text(path, terms, sizeof terms);
        fprintf(md, "| `");
        rp_md_cell(md, c->variants[v]);
        fprintf(md, "` | `");
        rp_md_cell(md, terms);
        fprintf(md, "` |\n");
    }
    fprintf(md, "\n");
}
