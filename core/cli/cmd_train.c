/* biaskit train: train a model described by an experiment file (or continue a checkpoint). */
#include "cli/args.h"
#include "cli/commands.h"
#include "dist/dist.h"
#include "train/train.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: biaskit train <experiment.toml> [--set section.key=value]... [--out DIR]\n"
    "       biaskit train <experiment.toml> --init <checkpoint.safetensors> [--set ...] [--out DIR]\n"
    "       biaskit train --resume <checkpoint.safetensors> [--set ...] [--out DIR]\n\n"
    "Trains the model of the experiment file on its [data] with the [train] settings (see\n"
    "'biaskit config --keys'). Writes DIR/metrics.jsonl (one JSON object per step and per\n"
    "validation) and DIR/checkpoint.safetensors (every [train] checkpoint_every steps, at the end,\n"
    "and on Ctrl-C, SIGTERM or SIGHUP), where DIR is [run] out_dir, by default runs/<experiment name>. The first lines\n"
    "printed say what trains: the model, the device, the memory the model keeps there (one forward's\n"
    "activations and their gradients; parameters, gradients and AdamW moments, and with [run]\n"
    "precision = \"bf16\" the weights' bf16 copies) and the data.\n\n"
    "  --set K=V        override a value of the experiment file (repeatable); with --resume, applied\n"
    "                   on top of the experiment stored in the checkpoint (e.g. train.steps=2000)\n"
    "  --resume CKPT    continue a run exactly where its checkpoint left it\n"
    "  --init CKPT      start from the weights of CKPT (a trained or imported checkpoint) instead of a\n"
    "                   fresh initialisation; everything else (length, data, steps, schedule, terms)\n"
    "                   comes from the experiment, and AdamW starts afresh. Every model tensor must be\n"
    "                   in CKPT with the shape the experiment's [model] gives it (else an error naming\n"
    "                   the tensor and both shapes); a term's tensors carry over when CKPT has a term of\n"
    "                   the same name made by the same plugin, else the term starts from its plugin's\n"
    "                   initialisation; what is initialised afresh and what of CKPT is left out is\n"
    "                   printed. Overrides [train] init; CKPT's seal is recorded in every checkpoint of\n"
    "                   the run. [train] trainable = [\"term.*\", ...] trains only the tensors it\n"
    "                   names (shell globs over checkpoint names; the others stay frozen)\n"
    "  --strict         refuse a plugin file or directory writable by other users (by default a\n"
    "                   warning); with --resume also a checkpoint whose plugins differ from the ones it\n"
    "                   was trained with (version, declarations or file bytes; by default a warning), a\n"
    "                   plugin option changed by --set, or a format 2 checkpoint (no metadata checksum)\n"
    "  --out DIR        write to DIR instead of [run] out_dir (on resume: the checkpoint's directory);\n"
    "                   a DIR that is a symbolic link to a directory holding another run (a checkpoint\n"
    "                   or metrics.jsonl this training does not resume) is refused: name the directory\n"
    "                   itself to replace that run\n"
    "  --stop-after N   stop after N steps of this run, writing a checkpoint (as Ctrl-C does; a\n"
    "                   signal exits with status 128 + its number: 130 for SIGINT, 143 for SIGTERM,\n"
    "                   129 for SIGHUP)\n"
    "  --plain          plain log lines even on a terminal (no redrawn progress line)\n\n"
    "Paths written in the experiment file (or --set) are read from the file's directory; paths on\n"
    "the command line (--out, --resume) from the working directory. Only one training at a time\n"
    "writes a run directory (it is locked); a resumed run cuts metrics.jsonl back to its checkpoint.\n\n"
    "[run] device picks what trains: \"auto\" (the default) the GPU when one answers, else the CPU\n"
    "(OpenBLAS + OpenMP, [run] threads); \"cuda\" the GPU or an error; \"cpu\"; \"emulated\" the CUDA\n"
    "engine's code run on the CPU (very slow; for testing without a GPU). [run] matmul = \"fp32\"\n"
    "| \"tf32\" | \"bf16\" sets the GPU's matmul precision (bf16: tensor cores for cuBLAS and the fused\n"
    "attention). [run] attention = \"fused\" | \"materialized\" | \"auto\" (the default) picks the\n"
    "attention kernel on every device: fused keeps only row statistics, materialized the probabilities;\n"
    "auto is fused on a GPU and materialized for training on the CPU. Checkpoints do not\n"
    "depend on the device: one trained on a GPU resumes or evaluates on the CPU (with \"auto\", or\n"
    "--set run.device=cpu). [run] gpu = N picks the GPU (default: the process's local rank under\n"
    "mpirun/srun, else 0); BIASKIT_CUDA_SYNC=1 checks every GPU kernel as it runs (slow, for debugging).\n\n"
    "Data parallel on CPUs: mpirun -np N biaskit train <experiment.toml> (Open MPI; a biaskit built\n"
    "with MPI). Each process trains on [train] batch / N rows of every batch (batch must be a\n"
    "multiple of N) with its share of the machine's cores; the gradients are averaged in a fixed\n"
    "order, so a run repeated with the same N gives the same bits. Rank 0 writes the log, metrics\n"
    "and checkpoints, which do not depend on N: a run resumes with any N. See docs/scaling.md.\n";

int bk_cmd_train(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"set", 1, 1},       {"resume", 1, 0},
                                        {"out", 1, 0},  {"stop-after", 1, 0}, {"plain", 0, 0},
                                        {"strict", 0, 0}, {"init", 1, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit train", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    const char *resume = bk_args_get(&args, "resume");
    if ((resume && args.n_positional != 0) || (!resume && args.n_positional != 1)) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit train: expected one experiment file, or --resume CHECKPOINT; see "
                                    "'biaskit train --help'");
        return bk_report(&err);
    }
    const char *init = bk_args_get(&args, "init");
    if (resume && init) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit train: --init starts a new run from a checkpoint's weights and --resume "
                                    "continues one; give one of them");
        return bk_report(&err);
    }
    if (init && !*init) {
        bk_fail(&err, BK_ERR_USAGE, "--init: expected a checkpoint file, got an empty string");
        return bk_report(&err);
    }
    const char *sets[BK_ARGS_MAX];
    size_t n_sets = bk_args_all(&args, "set", sets, BK_ARGS_MAX);
    bk_train_options o = {0};
    o.config = resume ? NULL : args.positional[0];
    o.overrides = sets;
    o.n_overrides = (int)n_sets;
    o.resume = resume;
    o.init = init;
    o.out_dir = bk_args_get(&args, "out");
    if (o.out_dir && !*o.out_dir) { /* not the working directory */
        bk_fail(&err, BK_ERR_USAGE, "--out: expected a directory, got an empty string");
        return bk_report(&err);
    }
    o.progress = !bk_args_get(&args, "plain") && isatty(fileno(stderr));
    o.out = stderr;
    const char *v = bk_args_get(&args, "stop-after");
    long stop = 0;
    if (v && bk_args_int("stop-after", v, 1, 2147483647L, &stop, &err))
        return bk_report(&err);
    o.stop_after = stop;
    o.strict = bk_args_get(&args, "strict") != NULL;
    bk_dist dist; /* one process, or one of `mpirun -np N` */
    if (bk_dist_init(&dist, &err))
        return bk_report(&err);
    o.dist = &dist;
    bk_train_summary sum; /* the banner names the device that trains ([run] device) */
    int rc = bk_train(&o, &sum, &err);
    /* the others' errors reach rank 0 (bk_dist_agree), which reports them before anyone exits */
    int status = rc ? (dist.rank == 0 ? bk_report(&err) : 1) : sum.signalled ? 128 + sum.signalled : 0;
    bk_dist_finalize(&dist);
    return status;
}
