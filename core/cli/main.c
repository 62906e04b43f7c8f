/* biaskit: train and evaluate transformer language models whose positional information comes from
 * plugins. This file dispatches to the subcommands. */
#include "cli/commands.h"
#include "dist/dist.h"
#include "cuda/device.h"
#include "cpu/gemm.h"
#include "util/blas.h"

#include <stdio.h>
#include <string.h>

#ifndef BK_VERSION
#define BK_VERSION "unknown"
#endif

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"train", bk_cmd_train, "train a model (or --resume a checkpoint) on the experiment's data"},
    {"eval", bk_cmd_eval, "perplexity of a checkpoint at many lengths (the extrapolation curve)"},
    {"generate", bk_cmd_generate, "continue a prompt with a byte-level checkpoint (greedy, top-k, temperature)"},
    {"passkey", bk_cmd_passkey, "passkey retrieval accuracy of a checkpoint per length and depth of the key"},
    {"trf", bk_cmd_trf, "theoretical receptive field of each head's distance table (Qin et al., AAAI 2024)"},
    {"erf", bk_cmd_erf, "empirical receptive field of a checkpoint's attention, against its TRF"},
    {"plugins", bk_cmd_plugins, "list the plugins found, with capabilities and options"},
    {"params", bk_cmd_params, "every plugin parameter and mixing weight of a checkpoint, with its initial value"},
    {"bias", bk_cmd_bias, "print (or write as CSV) each head's distance table of an experiment"},
    {"new-plugin", bk_cmd_new_plugin, "write a ready folder for a new formula-first plugin (builds and passes check)"},
    {"check", bk_cmd_check, "conformance checks of a plugin: ABI, bad options, finite tables, gradients, CUDA"},
    {"config", bk_cmd_config, "check an experiment file and print its resolved values; --keys lists every key"},
    {"sweep", bk_cmd_sweep, "train and evaluate a grid of experiments (variants x corpora x seeds x grid), resumably"},
    {"report", bk_cmd_report, "the report of a sweep: perplexity tables (mean +- std over seeds), figures, CSV"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: biaskit <command> [options]\n"
               "       biaskit --version | --help\n\n"
               "Positional schemes (ALiBi, KERPLE, T5, ...) are plugins: shared objects found on\n"
               "BIASKIT_PLUGIN_PATH (colon-separated), then in ../lib/biaskit/plugins beside the\n"
               "biaskit binary when that directory exists (an installed biaskit), else in the build\n"
               "directory it was built in ('biaskit plugins' prints the search path). An experiment\n"
               "file (TOML) names them in [[term]] tables.\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'biaskit <command> --help' describes each command.\n");
}

int bk_report(const bk_error *err)
{
    fprintf(stderr, "biaskit: error: %s\n", err->message);
    return err->code == BK_ERR_USAGE ? 2 : 1;
}

int main(int argc, char **argv)
{
    /* an OpenBLAS that took this CPU for an older one: start again with its kernels named (util/blas.h) */
    bk_blas_restart_with_better_kernels(argv);
    char gemm_msg[256];
    if (bk_gemm_check_env(gemm_msg, sizeof gemm_msg) != 0) {
        fprintf(stderr, "biaskit: error: %s\n", gemm_msg);
        return 2;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        char device[256];
        int gpu = bk_device_probe(device, sizeof device);
        printf("biaskit %s (plugin ABI %u)\ndevice: %s\n", BK_VERSION, BIASKIT_ABI_VERSION, device);
#ifdef BK_HAVE_CUDA
        printf("backends: cpu, cuda (built with CUDA), emulated; [run] device = \"auto\" trains on %s\n",
               gpu ? "the GPU (cuda)" : "the CPU (no GPU answers)");
#else
        (void)gpu;
        printf("backends: cpu, emulated (built without CUDA: no cuda backend); [run] device = \"auto\" trains "
               "on the CPU\n");
#endif
        printf("blas: %s\n", bk_blas_describe());
        printf("linear layers: %s\n", bk_gemm_describe());
        printf("attention products: %s\n", bk_gemm_attention_describe());
        printf("processes: %s\n", bk_dist_available()
                                       ? "MPI (mpirun -np N biaskit train|eval ...: data parallel)"
                                       : "one (built without MPI)");
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "biaskit: error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
