/* biaskit import: a pretrained model's file into a checkpoint (train/import.h). */
#include "cli/args.h"
#include "cli/commands.h"
#include "train/import.h"
#include "util/output.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: biaskit import <model.gguf> --out <checkpoint.safetensors> [--experiment]\n"
    "       biaskit import <hf_dir> --out <checkpoint.safetensors> [--experiment]\n\n"
    "Writes an ordinary checkpoint (what 'biaskit train' writes: sealed, with its experiment) from a\n"
    "pretrained model's GGUF file or HF transformers directory, so that eval, bias, params and train\n"
    "--resume read it.\n\n"
    "GGUF v3 files of architecture 'llama' (LLaMA, SmolLM2, ...) and 'qwen3' (with QK-norm), tensors in\n"
    "F32, F16, BF16, Q8_0, Q4_0 or Q4_1, dequantized to fp32 exactly as ggml defines the types. The\n"
    "experiment comes from the file's metadata: [model] family = \"llama\" with its layers, heads,\n"
    "key/value heads, head size, width, MLP width, vocabulary (the embedding's rows), RMSNorm epsilon,\n"
    "tied or untied output and (qwen3) qk_norm; one rope term with the file's rope.freq_base; [train]\n"
    "length = its context_length; [run] device = \"cpu\".\n"
    "llama.cpp stores q's and k's rows with each head's rotary pairs adjacent (2k, 2k + 1) for 'llama';\n"
    "the engine rotates the pairs (k, k + head_dim/2), as HF transformers does: import reorders those\n"
    "rows ('qwen3' files already have them so).\n\n"
    "A directory (HF transformers' save_pretrained): config.json and model.safetensors, or the shards of\n"
    "model.safetensors.index.json; tensors in F32, F16 or BF16, widened to fp32 exactly.\n"
    "  LlamaForCausalLM, MistralForCausalLM with sliding_window null: family \"llama\" from config.json's\n"
    "    shape, one rope term with rope_theta (rope_scaling linear: scaling \"pi\"; yarn: \"yarn\"); q and\n"
    "    k are already in the rotate-half layout; [train] length = max_position_embeddings.\n"
    "  Qwen3ForCausalLM with use_sliding_window false: the same, with qk_norm = true (its q_norm and\n"
    "    k_norm weights).\n"
    "  GPT2LMHeadModel: family \"gpt2\", its learned positions wpe as an ape term (variant \"learned\",\n"
    "    max_positions = n_positions); the Conv1D weights, stored (in, out), are transposed.\n\n"
    "The tokenizer goes into the checkpoint when the C tokenizer reads it: a GGUF file's byte-level BPE\n"
    "(tokenizer.ggml.model = \"gpt2\"), a directory's tokenizer.json (a BPE model); then eval, train,\n"
    "generate and tokenize read text through it. Another kind imports without one, saying why (evaluate\n"
    "that checkpoint on token ids: [data] format = \"shards\"); a malformed one is refused.\n\n"
    "Refused, naming what: another architecture (Qwen2: q/k/v biases), a scaled rope in the GGUF\n"
    "metadata, rope_scaling other than linear or yarn, attention or MLP biases in a llama model, an untied\n"
    "GPT-2 head, a rotary dimension other than the head's, a missing, misshapen or unknown tensor, a\n"
    "missing or truncated shard, a vocabulary that is not the embedding's rows.\n\n"
    "  --out FILE     the checkpoint to write (atomically; refused when it names the input, or a\n"
    "                 .safetensors or .json file inside the input directory)\n"
    "  --experiment   print the experiment the model gives and write nothing (no --out needed)\n";

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
    struct stat sb;
    const int hf = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode); /* an HF transformers directory */
    if (bk_args_get(&args, "experiment")) {
        char text[4096];
        if ((hf ? bk_import_hf_experiment : bk_import_gguf_experiment)(path, text, sizeof text, &s, &err))
            return bk_report(&err);
        fputs(text, stdout);
        return 0;
    }
    if (!out) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit import: expected --out <checkpoint.safetensors>");
        return bk_report(&err);
    }
    static const char *const weights[] = {".safetensors", ".json"}; /* what an HF directory's reader takes */
    const bk_output_input input = {hf ? "model directory" : "model file", path, hf ? weights : NULL, hf ? 2 : 0};
    if (bk_output_check("--out", out, &input, 1, &err) ||
        (hf ? bk_import_hf : bk_import_gguf)(path, out, &s, &err))
        return bk_report(&err);
    if (hf)
        printf("import: %s (%s%s%s): %zu tensors (%zu in F16 or BF16) into %zu fp32 parameters\n", path,
               s.architecture, s.name[0] ? ", " : "", s.name, s.tensors, s.half, s.parameters);
    else
        printf("import: %s (architecture %s%s%s): %zu tensors (%zu quantized) into %zu fp32 parameters\n", path,
               s.architecture, s.name[0] ? ", " : "", s.name, s.tensors, s.quantized, s.parameters);
    if (!strcmp(s.family, "gpt2"))
        printf("model: gpt2, %d layers, %d heads of %d, dim %d, vocab %d, tied output; learned positions (ape) %d\n",
               s.layers, s.heads, s.head_dim, s.dim, s.vocab, s.context);
    else
        printf("model: llama, %d layers, %d heads (%d key/value) of %d, dim %d, ffn %d, vocab %d, %s output%s; "
               "rope base %g; context %d\n",
               s.layers, s.heads, s.kv_heads, s.head_dim, s.dim, s.ffn_dim, s.vocab, s.tied ? "tied" : "untied",
               s.qk_norm ? ", QK-norm" : "", s.rope_base, s.context);
    printf("tokenizer: %s\n", s.tokenizer);
    printf("wrote %s\n", out);
    return 0;
}
