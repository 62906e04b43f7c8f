/* biaskit config: check an experiment file (engine keys, plugins and their options) and print the
 * values it resolves to; --keys prints every engine key with its type, default and meaning. */
#include "cli/args.h"
#include "cli/commands.h"

#include <stdio.h>

static const char help[] =
    "usage: biaskit config <experiment.toml> [--set section.key=value]...\n"
    "       biaskit config --keys\n\n"
    "Checks the experiment file as `train` and `bias` would (unknown keys, wrong types, plugins and\n"
    "their options) and prints the resolved values, defaults included. --keys lists every engine key\n"
    "with its type, default and meaning. --set overrides a value (term.N.key for the N-th [[term]],\n"
    "counted from 0) and may be repeated.\n";

int bk_cmd_config(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"keys", 0, 0}, {"set", 1, 1}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit config", &args, &err))
        return bk_report(&err);
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
    const char *sets[BK_ARGS_MAX];
    size_t n_sets = bk_args_all(&args, "set", sets, BK_ARGS_MAX);
    bk_session s;
    if (bk_session_open(&s, args.positional[0], sets, n_sets, &err))
        return bk_report(&err);
    const bk_experiment *e = &s.exp;
    char a[32];
    printf("%s: ok\n\n", e->path);
    bk_experiment_print_values(e, stdout);
    for (int i = 0; i < s.terms.n; i++) {
        const bk_term *t = &s.terms.terms[i];
        char caps[96];
        printf("\n[[term]]  # %s (%s)\nplugin = \"%s\"\nname = \"%s\"\nstream = \"%s\"\n", t->plugin->path,
               bk_capabilities_string(t->caps, caps, sizeof caps), t->plugin->desc->name, t->label,
               bk_choice_name(BK_STREAM_CHOICES, t->stream, a, sizeof a));
        if (bk_term_has_table(t))
            printf("weight = %g\nper_layer = %s\n", t->weight, t->per_layer ? "true" : "false");
        printf("# %lld learnable parameter%s x %d cop%s\n", (long long)t->n_params, t->n_params == 1 ? "" : "s",
               t->n_copies, t->n_copies == 1 ? "y" : "ies");
    }
    bk_session_close(&s);
    return 0;
}
