/* biaskit export: a checkpoint into an HF transformers directory (train/export.h). */
#include "cli/args.h"
#include "cli/commands.h"
#include "train/export.h"

#include <stdio.h>
#include <string.h>

static const char help[] =
    "usage: biaskit export CKPT --hf DIR [--force] [--no-verify]\n\n"
    "Writes DIR/config.json and DIR/model.safetensors (F32), a directory that HF transformers loads\n"
    "with from_pretrained(DIR): the inverse of 'biaskit import DIR', for the models transformers can\n"
    "express. When the checkpoint carries a tokenizer (an imported model's, and its fine-tunings'), also\n"
    "DIR/tokenizer.json (its canonical form, as 'biaskit tokenize --dump-json' writes it) and\n"
    "DIR/tokenizer_config.json (PreTrainedTokenizerFast, adding no BOS or EOS), which AutoTokenizer loads.\n\n"
    "  family \"llama\" with one rope term: LlamaForCausalLM (with qk_norm: Qwen3ForCausalLM, its\n"
    "    q_norm and k_norm weights). rope_theta = the term's base; scaling\n"
    "    \"none\": no rope_scaling; \"pi\" with factor f: {\"rope_type\": \"linear\", \"factor\": f};\n"
    "    \"yarn\": {\"rope_type\": \"yarn\", factor, beta_fast, beta_slow, attention_factor = attn_factor\n"
    "    x (0.1 ln factor + 1)}. max_position_embeddings = [train] length, except under yarn, where\n"
    "    transformers takes it as YaRN's original context: there it is the term's original_length.\n"
    "    qkvw's rows become q_proj, k_proj, v_proj (rotate-half layout, as transformers'), fcw's\n"
    "    gate_proj and up_proj; lm_head.weight when untied.\n"
    "  family \"gpt2\" with one ape term of variant \"learned\": GPT2LMHeadModel, the table as wpe\n"
    "    (n_positions = its rows), the Conv1D weights transposed to (in, out).\n\n"
    "Refused, naming the term and its plugin and why (nothing is written): any other positional term\n"
    "(alibi, t5, kerple, ...), no term or more than one, rope on gpt2 or ape on llama, a sinusoidal ape,\n"
    "a term on the segment stream or per layer, a plugin option transformers has no field for, rope\n"
    "scaling \"ntk\" or factor 0 (dynamic), learnable mixing weights.\n\n"
    "  --hf DIR       the directory to write: created when absent (its parent must exist); refused when it\n"
    "                 is not a directory, or holds anything, unless --force\n"
    "  --force        write into a non-empty DIR: the files above are replaced, each atomically; its\n"
    "                 other files are left as they are (never the checkpoint itself)\n"
    "  --no-verify    skip the checkpoint's tensor checksums (its metadata seal is still checked)\n";

int bk_cmd_export(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"hf", 1, 0}, {"force", 0, 0}, {"no-verify", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit export", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit export: expected one checkpoint; see 'biaskit export --help'");
        return bk_report(&err);
    }
    const char *ckpt = args.positional[0], *dir = bk_args_get(&args, "hf");
    if (!dir) {
        bk_fail(&err, BK_ERR_USAGE,
                "biaskit export: expected --hf DIR (the one format it writes: an HF transformers directory)");
        return bk_report(&err);
    }
    const bk_export_options o = {bk_args_get(&args, "force") != NULL, bk_args_get(&args, "no-verify") != NULL};
    bk_export_summary s;
    if (bk_export_hf(ckpt, dir, &o, &s, &err))
        return bk_report(&err);
    if (!strcmp(s.architecture, "GPT2LMHeadModel"))
        printf("model: %s, %d layers, %d heads of %d, n_embd %d, vocab %d, tied; %s\n", s.architecture, s.layers,
               s.heads, s.head_dim, s.dim, s.vocab, s.positions);
    else
        printf("model: %s, %d layers, %d heads (%d key/value) of %d, hidden %d, intermediate %d, vocab %d, %s; %s; "
               "max_position_embeddings %d\n",
               s.architecture, s.layers, s.heads, s.kv_heads, s.head_dim, s.dim, s.ffn_dim, s.vocab,
               s.tied ? "tied" : "untied", s.positions, s.context);
    printf("export: %s: %zu tensors, %zu fp32 values; %s\n", ckpt, s.tensors, s.parameters,
           s.tokenizer ? "its tokenizer" : "no tokenizer (the checkpoint carries none)");
    printf("wrote %s/config.json and %s/model.safetensors%s%s%s\n", dir, dir, s.tokenizer ? ", " : "",
           s.tokenizer ? dir : "", s.tokenizer ? "/tokenizer.json and tokenizer_config.json" : "");
    return 0;
}
