/* biaskit import: a pretrained model's file into a checkpoint (train/import.h). */
#include "cli/args.h"
#include "cli/commands.h"
#include "train/import.h"
#include "util/output.h"

#include <stdio.h>
#include <string.h>

static const char help[] =
    "usage: biaskit import <model.gguf> --out <checkpoint.safetensors> [--experiment]\n\n"
    "Writes an ordinary checkpoint (what 'biaskit train' writes: sealed, with its experiment) from a\n"
    "pretrained model's GGUF file, so that eval, bias, params and train --resume read it.\n\n"
    "GGUF v3 files of architecture 'llama' (LLaMA, SmolLM2, ...), tensors in F32, F16, BF16, Q8_0, Q4_0\n"
    "or Q4_1, dequantized to fp32 exactly as ggml defines the types. The experiment comes from the file's\n"
    "metadata: [model] family = \"llama\" with its layers, heads, key/value heads, head size, width, MLP\n"
    "width, vocabulary (the embedding's rows), RMSNorm epsilon and tied or untied output; one rope term\n"
    "with the file's rope.freq_base; [train] length = its context_length; [run] device = \"cpu\".\n"
    "llama.cpp stores q's and k's rows with each head's rotary pairs adjacent (2k, 2k + 1); the engine\n"
    "rotates the pairs (k, k + head_dim/2), as HF transformers does: import reorders those rows.\n\n"
    "Refused, naming what: another architecture, a scaled rope in the metadata, a rotary dimension other\n"
    "than the head's, a missing, misshapen or unknown tensor, a tokenizer whose vocabulary is not the\n"
    "embedding's. The tokenizer is not carried yet: evaluate the checkpoint on token ids ([data] format =\n"
    "\"shards\"), not on text.\n\n"
    "  --out FILE     the checkpoint to write (atomically; refused when it names the input)\n"
    "  --experiment   print the experiment the file gives and write nothing (no --out needed)\n";

int bk_cmd_import(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"out", 1, 0}, {"experiment", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit import", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit import: expected one model file; see 'biaskit import --help'");
        return bk_report(&err);
    }
    const char *path = args.positional[0], *out = bk_args_get(&args, "out");
    bk_import_summary s;
    if (bk_args_get(&args, "experiment")) {
        char text[4096];
        if (bk_import_gguf_experiment(path, text, sizeof text, &s, &err))
            return bk_report(&err);
        fputs(text, stdout);
        return 0;
    }
    if (!out) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit import: expected --out <checkpoint.safetensors>");
        return bk_report(&err);
    }
    const bk_output_input input = {"model file", path, NULL, 0};
    if (bk_output_check("--out", out, &input, 1, &err) || bk_import_gguf(path, out, &s, &err))
        return bk_report(&err);
    printf("import: %s (architecture %s%s%s): %zu tensors (%zu quantized) into %zu fp32 parameters\n", path,
           s.architecture, s.name[0] ? ", " : "", s.name, s.tensors, s.quantized, s.parameters);
    printf("model: llama, %d layers, %d heads (%d key/value) of %d, dim %d, ffn %d, vocab %d, %s output; rope base "
           "%g; context %d\n",
           s.layers, s.heads, s.kv_heads, s.head_dim, s.dim, s.ffn_dim, s.vocab, s.tied ? "tied" : "untied",
           s.rope_base, s.context);
    printf("wrote %s\n", out);
    return 0;
}
