/* biaskit config: check an experiment file (engine keys, plugins and their options) and print the
 * values it resolves to; --keys prints every engine key with its type, default and meaning. */
#include "cli/args.h"
#include "cli/commands.h"
#include "util/isolate.h"

#include <stdio.h>
#include <stdlib.h>

static const char help[] =
    "usage: biaskit config <experiment.toml> [--set section.key=value]... [--timeout S]\n"
    "       biaskit config --keys\n\n"
    "Checks the experiment file as `train` and `bias` would (unknown keys, wrong types, plugins and\n"
    "their options) and prints the resolved values, defaults included. --keys lists every engine key\n"
    "with its type, default and meaning. --set overrides a value (term.N.key for the N-th [[term]],\n"
    "counted from 0) and may be repeated.\n\n"
    "The plugins are loaded and their terms created in a child process: a plugin that crashes, calls\n"
    "exit() or does not return (in its constructors, its entry point or create()) is an error naming\n"
    "the plugin, its file, the call and what happened.\n"
    "  --timeout S   time limit of that child in seconds (default 60)\n"
    "  --strict      refuse a plugin file or directory writable by other users (by default a warning)\n\n"
    "exit status: 0 the file is valid, 1 it is not (or a plugin failed), 2 bad usage.\n";

typedef struct config_job {
    const char *path;
    const char *const *sets;
    size_t n_sets;
} config_job;

/* The learning-rate scale and weight decay of a term's parameters as training applies them: one value,
 * or an inline table per tensor when they differ; the engine's decay rule resolved ([train]
 * weight_decay with decay_all, else none). */
static void print_groups(FILE *out, const bk_term *t, const bk_experiment *e)
{
    if (t->n_groups == 0)
        return;
    static const char *const keys[2] = {"lr_scale", "weight_decay"};
    for (int which = 0; which < 2; which++) {
        double first = 0.0;
        int same = 1, ruled = 0;
        char values[1024];
        size_t used = 0;
        for (int g = 0; g < t->n_groups; g++) {
            const bk_term_group *grp = &t->groups[g];
            double v = which ? grp->weight_decay : grp->lr_scale;
            if (which && v == BIASKIT_WEIGHT_DECAY_DEFAULT) {
                v = e->train.decay_all ? e->train.weight_decay : 0.0;
                ruled = 1;
            }
            if (g == 0)
                first = v;
            same &= v == first;
            char num[40];
            bk_double_text(v, num, sizeof num);
            if (used < sizeof values)
                used += (size_t)snprintf(values + used, sizeof values - used, "%s%s = %s", g ? ", " : "", grp->name,
                                         num);
        }
        char num[40];
        bk_double_text(first, num, sizeof num);
        fprintf(out, "%s = %s%s%s%s\n", keys[which], same ? num : "{", same ? "" : values, same ? "" : "}",
                !ruled ? ""
                : e->train.decay_all ? "  # [train] weight_decay (decay_all = true)"
                                     : "  # no decay: plugin parameters decay with decay_all = true only");
    }
}

/* In the child: open the session (plugins loaded, terms created) and write the resolved values. */
static int check_in_child(void *ctx, FILE *out, bk_error *err)
{
    const config_job *job = ctx;
    bk_session s;
    int rc = bk_session_open(&s, job->path, job->sets, job->n_sets, err);
    if (rc)
        return rc;
    const bk_experiment *e = &s.exp;
    char a[32];
    fprintf(out, "%s: ok\n\n", e->path);
    bk_experiment_print_values(e, out);
    for (int i = 0; i < s.terms.n; i++) {
        const bk_term *t = &s.terms.terms[i];
        char caps[96];
        fprintf(out, "\n[[term]]  # %s (%s)\nplugin = \"%s\"\nname = \"%s\"\nstream = \"%s\"\n", t->plugin->path,
                bk_capabilities_string(t->caps, caps, sizeof caps), t->plugin->desc->name, t->label,
                bk_choice_name(BK_STREAM_CHOICES, t->stream, a, sizeof a));
        if (bk_term_has_table(t))
            fprintf(out, "weight = %g\nper_layer = %s\n", t->weight, t->per_layer ? "true" : "false");
        if (t->layers_on) { /* [[term]] layers: the layers it resolved to */
            fprintf(out, "layers = [");
            for (int l = 0, first = 1; l < e->model.layers; l++)
                if (t->layers_on[l])
                    fprintf(out, "%s%d", first ? "" : ", ", l), first = 0;
            fprintf(out, "]\n");
        }
        print_groups(out, t, e);
        const biaskit_plugin *d = t->plugin->desc;
        for (uint32_t k = 0; k < d->n_options; k++) {
            char text[1024];
            int given;
            bk_config_option_text(&t->view, &d->options[k], text, sizeof text, &given);
            fprintf(out, "%s = %s%s\n", d->options[k].name, text, given ? "" : "  # default");
        }
        fprintf(out, "# %lld learnable parameter%s x %d cop%s\n", (long long)t->n_params, t->n_params == 1 ? "" : "s",
                t->n_copies, t->n_copies == 1 ? "y" : "ies");
    }
    bk_session_close(&s);
    return BK_OK;
}

int bk_cmd_config(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"keys", 0, 0}, {"set", 1, 1}, {"timeout", 1, 0}, {"strict", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit config", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (bk_args_get(&args, "keys")) {
        bk_experiment_print_keys(stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit config: expected one experiment file; see 'biaskit config --help'");
        return bk_report(&err);
    }
    long timeout = BK_ISOLATE_TIMEOUT_S;
    const char *t = bk_args_get(&args, "timeout");
    if (t && bk_args_int("timeout", t, 1, 86400, &timeout, &err))
        return bk_report(&err);
    const char *sets[BK_ARGS_MAX];
    config_job job = {args.positional[0], sets, bk_args_all(&args, "set", sets, BK_ARGS_MAX)};
    char what[512];
    snprintf(what, sizeof what, "checking '%s'", args.positional[0]);
    bk_isolated res;
    int rc = bk_plugin_isolate(check_in_child, &job, (unsigned)timeout, what, &res, &err);
    if (res.output)
        fputs(res.output, stdout);
    free(res.output);
    return rc ? bk_report(&err) : 0;
}
