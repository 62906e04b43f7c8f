/* The train/validation split by document and the description of a split (data/split.h). */
#define _POSIX_C_SOURCE 200809L

#include "data/split.h"

#include "util/output.h"
#include "util/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The split's own stream: the seed mixed with a constant of its own, so that split_seed = 1 and a run's
 * seed = 1 draw unrelated orders. */
#define BK_SPLIT_STREAM 0x5b117ULL

void bk_data_split_free(bk_data_split *s)
{
    for (int i = 0; i < s->n_val; i++)
        free(s->val_files[i]);
    free(s->val_files);
    free(s->val_units);
    s->val_files = NULL, s->val_units = NULL, s->n_val = 0;
}

void bk_split_choose(const int64_t *units, int n, double fraction, uint64_t seed, unsigned char *val)
{
    memset(val, 0, (size_t)n);
    if (n < 2)
        return;
    int64_t *order = malloc((size_t)n * sizeof *order);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += units[i];
    const double target = fraction * (double)total;
    if (order) {
        for (int i = 0; i < n; i++)
            order[i] = i;
        bk_rng rng = {bk_derive_seed(seed, BK_SPLIT_STREAM, 0)};
        bk_shuffle(order, n, &rng);
    }
    int64_t have = 0;
    int taken = 0;
    for (int k = 0; k < n && (double)have < target && taken < n - 1; k++) {
        const int i = order ? (int)order[k] : k;
        if ((double)(have + units[i]) - target <= target - (double)have) /* not further from the share */
            val[i] = 1, have += units[i], taken++;
    }
    if (!taken) { /* every document is more than twice the share: the smallest (the first of equals) */
        int best = 0;
        for (int i = 1; i < n; i++)
            best = units[i] < units[best] ? i : best;
        val[best] = 1;
    }
    free(order);
}

/* "1,234,567" */
static void grouped(int64_t v, char *out, size_t size)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
    size_t k = 0;
    if (v < 0 && k + 1 < size)
        out[k++] = '-';
    for (int i = 0; i < n && k + 1 < size; i++) {
        out[k++] = digits[i];
        if ((n - 1 - i) % 3 == 0 && i < n - 1 && k + 1 < size)
            out[k++] = ',';
    }
    out[k] = '\0';
}

/* The name of a file without its directories. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

void bk_data_split_describe(const bk_data_split *s, int max_files, char *out, size_t size)
{
    char amount[40];
    grouped(s->units[1], amount, sizeof amount);
    const char *unit = s->text ? "bytes" : "tokens";
    const int64_t all = s->units[0] + s->units[1];
    const double share = all > 0 ? 100.0 * (double)s->units[1] / (double)all : 0.0;
    int w;
    if (s->mode == BK_SPLIT_DOCUMENTS)
        w = snprintf(out, size, "validation: %d of %d documents by split_seed %llu, %s %s (%.1f%%): ", s->files[1],
                     s->files[0] + s->files[1], (unsigned long long)s->seed, amount, unit, share);
    else if (s->mode == BK_SPLIT_TAIL)
        w = snprintf(out, size, "validation: the last %g%% of the stream, %s %s, in %d file%s: ", 100.0 * s->fraction,
                     amount, unit, s->n_val, s->n_val == 1 ? "" : "s");
    else
        w = snprintf(out, size, "validation: val_paths, %d file%s, %s %s: ", s->files[1], s->files[1] == 1 ? "" : "s",
                     amount, unit);
    size_t used = w > 0 && (size_t)w < size ? (size_t)w : size - 1;
    for (int i = 0; i < s->n_val && used + 1 < size; i++) {
        if (i == max_files) {
            w = snprintf(out + used, size - used, ", and %d more", s->n_val - i);
            used += w > 0 && (size_t)w < size - used ? (size_t)w : size - used - 1;
            break;
        }
        w = snprintf(out + used, size - used, "%s%s%s", i ? ", " : "", base_name(s->val_files[i]),
                     i == 0 && s->first_part ? " (part)" : "");
        used += w > 0 && (size_t)w < size - used ? (size_t)w : size - used - 1;
    }
    if (s->note[0] && used + 1 < size)
        snprintf(out + used, size - used, " (%s)", s->note);
}

int bk_data_split_write_json(const bk_data_split *s, const char *path, bk_error *err)
{
    bk_output o;
    int rc = bk_output_open(&o, "split.json", path, NULL, 0, err);
    if (rc != BK_OK)
        return rc;
    static const char *const modes[] = {"documents", "tail", "val_paths"};
    bk_output_printf(&o, "{\"split\": \"%s\", \"seed\": %llu, \"fraction\": %.17g, \"unit\": \"%s\",\n", modes[s->mode],
                     (unsigned long long)s->seed, s->fraction, s->text ? "bytes" : "tokens");
    bk_output_printf(&o, " \"training\": {\"files\": %d, \"units\": %lld},\n", s->files[0], (long long)s->units[0]);
    bk_output_printf(&o, " \"validation\": {\"files\": %d, \"units\": %lld, \"first_part\": %s, \"list\": [",
                     s->files[1], (long long)s->units[1], s->first_part ? "true" : "false");
    for (int i = 0; i < s->n_val; i++) {
        bk_output_printf(&o, "%s\n  {\"file\": ", i ? "," : "");
        bk_output_json_string(&o, s->val_files[i]);
        bk_output_printf(&o, ", \"units\": %lld}", (long long)s->val_units[i]);
    }
    bk_output_printf(&o, "]},\n \"note\": ");
    bk_output_json_string(&o, s->note);
    bk_output_printf(&o, "}\n");
    return bk_output_close(&o, err);
}
