/* biaskit: train and evaluate transformer language models whose positional information comes from
 * plugins. This file dispatches to the subcommands. */
#include "cli/commands.h"
#include "dist/dist.h"
#include "cuda/device.h"
#include "cpu/gemm.h"
#include "util/blas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BK_VERSION
#define BK_VERSION "unknown"
#endif

/* What a command does when an MPI launcher (mpirun, srun) started it: only train and eval are data
 * parallel; any other command would run whole in every process, each writing the same outputs, so it
 * is refused with more than one process; a sweep is refused under any launcher (every run it starts
 * would inherit the launcher's environment). */
enum { LAUNCH_ONE = 0, LAUNCH_PARALLEL = 1, LAUNCH_NEVER = 2 };

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    int launch; /* under an MPI launcher (dist/dist.h): LAUNCH_ONE, LAUNCH_PARALLEL or LAUNCH_NEVER */
} commands[] = {
    {"train", bk_cmd_train, "train a model (or --resume a checkpoint) on the experiment's data", LAUNCH_PARALLEL},
    {"eval", bk_cmd_eval, "perplexity of a checkpoint at many lengths (the extrapolation curve)", LAUNCH_PARALLEL},
    {"generate", bk_cmd_generate, "continue a prompt with a byte-level checkpoint (greedy, top-k, temperature)", LAUNCH_ONE},
    {"passkey", bk_cmd_passkey, "passkey retrieval accuracy of a checkpoint per length and depth of the key", LAUNCH_ONE},
    {"trf", bk_cmd_trf, "theoretical receptive field of each head's distance table (Qin et al., AAAI 2024)", LAUNCH_ONE},
    {"erf", bk_cmd_erf, "empirical receptive field of a checkpoint's attention, against its TRF", LAUNCH_ONE},
    {"plugins", bk_cmd_plugins, "list the plugins found, with capabilities and options", LAUNCH_ONE},
    {"import", bk_cmd_import, "a pretrained model's GGUF file (llama architecture) into a checkpoint", LAUNCH_ONE},
    {"export", bk_cmd_export, "a checkpoint into an HF transformers directory (--hf: llama with rope, gpt2 with learned positions)", LAUNCH_ONE},
    {"tokenize", bk_cmd_tokenize, "a text through a byte-level BPE tokenizer (tokenizer.json or GGUF), as HF tokenizers does", LAUNCH_ONE},
    {"params", bk_cmd_params, "every plugin parameter and mixing weight of a checkpoint, with its initial value", LAUNCH_ONE},
    {"bias", bk_cmd_bias, "each head's distance table of an experiment or checkpoint (and, with a mask or FIRE, "
                          "what the attention adds at each query and distance), printed or as CSV", LAUNCH_ONE},
    {"new-plugin", bk_cmd_new_plugin, "write a ready folder for a new formula-first plugin (builds and passes check)", LAUNCH_ONE},
    {"check", bk_cmd_check, "conformance checks of a plugin: ABI, bad options, finite tables, gradients, CUDA", LAUNCH_ONE},
    {"config", bk_cmd_config, "check an experiment file and print its resolved values; --keys lists every key", LAUNCH_ONE},
    {"sweep", bk_cmd_sweep, "train and evaluate a grid of experiments (variants x corpora x seeds x grid), resumably",
     LAUNCH_NEVER},
    {"report", bk_cmd_report, "the report of a sweep: perplexity tables (mean +- std over seeds), figures, CSV", LAUNCH_ONE},
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
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'biaskit <command> --help' describes each command.\n");
}

int bk_report(const bk_error *err)
{
    fprintf(stderr, "biaskit: error: %s\n", err->message);
    return err->code == BK_ERR_USAGE ? 2 : 1;
}

static int dispatch(int argc, char **argv)
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
        if (strcmp(argv[1], commands[i].name) == 0) {
            const char *size = NULL, *var = bk_dist_launcher_var(&size);
            const int never = commands[i].launch == LAUNCH_NEVER;
            if (var && commands[i].launch != LAUNCH_PARALLEL && (never || atol(size) > 1)) {
                bk_error err;
                bk_fail(&err, BK_ERR_USAGE,
                        "biaskit %s: started by an MPI launcher (%s=%s): each of its processes would run the whole "
                        "%s. Run 'biaskit %s' without mpirun%s",
                        argv[1], var, size,
                        never ? "sweep into the same directory, and every run would inherit the launcher's environment"
                              : "command and write the same outputs",
                        argv[1],
                        never ? ": each run is its own process (--jobs N runs N at a time); 'mpirun -np N biaskit "
                                "train' trains one experiment data-parallel (docs/scaling.md)"
                              : "; only train and eval are data parallel (mpirun -np N biaskit train|eval)");
                return bk_report(&err);
            }
            return commands[i].run(argc - 2, argv + 2);
        }
    fprintf(stderr, "biaskit: error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

/* Every command's standard output is checked once more at the end: a listing (plugins, config, --help)
 * on a full disk or a closed pipe fails with a message instead of exit 0 with a truncated listing. */
int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    errno = 0;
    int failed = fflush(stdout) != 0 || ferror(stdout);
    if (failed && rc == 0) {
        fprintf(stderr, "biaskit: error: cannot write standard output: %s\n",
                errno ? strerror(errno) : "a write failed");
        rc = 1;
    }
    return rc;
}
