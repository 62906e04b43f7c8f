/* biaskit generate: continue a prompt with a trained (byte-level) checkpoint, for a quick look. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "cli/args.h"
#include "cli/commands.h"
#include "eval/generate.h"
#include "train/checkpoint.h"
#include "util/file.h"
#include "util/output.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit generate <checkpoint.safetensors> (--prompt TEXT | --prompt-file FILE) [--tokens N]\n"
    "                        [--greedy | [--top-k K] [--temperature T]] [--seed S] [--max-length N]\n\n"
    "Rebuilds the model stored in the checkpoint and continues the prompt, one token at a time, printing\n"
    "the new text (not the prompt) on standard output. Each new token runs the forward over the whole\n"
    "sequence so far (no KV cache: simple and exact, quadratic in the length; fine for a quick look at\n"
    "a small model). A byte-level model reads and writes bytes; a model whose checkpoint carries its\n"
    "tokenizer (an imported one) reads the prompt through it (no BOS added) and its tokens are decoded;\n"
    "a BPE model without one is refused. The same checkpoint, prompt and options give the same text:\n"
    "greedy decoding has no randomness, and sampling draws from --seed alone.\n\n"
    "  --prompt TEXT       the text to continue (its bytes, or its tokens with the model's tokenizer)\n"
    "  --prompt-file FILE  read the prompt from FILE instead (its bytes, as is)\n"
    "  --tokens N          how many tokens to generate (default 200)\n"
    "  --greedy            take the most likely token each time (the default; the lower token id on a tie)\n"
    "  --top-k K           sample among the K most likely tokens (1 <= K <= vocab; default: the whole vocab\n"
    "                      when only --temperature is given)\n"
    "  --temperature T     divide the logits by T > 0 before the softmax (default 1 when --top-k is given)\n"
    "  --seed S            the sampler's seed (default 0)\n"
    "  --max-length N      the longest forward allowed, in tokens: prompt + N - 1 (default 16 x the\n"
    "                      training length); beyond it the prompt is refused, with the limit in the message\n"
    "  --set K=V           override a value of the stored experiment (as biaskit eval), e.g. a RoPE scaling\n"
    "  --no-verify         skip the checksums of the tensors' data\n"
    "  --strict            refuse a checkpoint whose plugins differ from the ones it was trained with, or a\n"
    "                      plugin file or directory writable by other users (by default warnings)\n";

int bk_cmd_generate(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0},        {"prompt", 1, 0}, {"prompt-file", 1, 0},
                                        {"tokens", 1, 0},      {"greedy", 0, 0}, {"top-k", 1, 0},
                                        {"temperature", 1, 0}, {"seed", 1, 0},   {"max-length", 1, 0},
                                        {"set", 1, 1},         {"no-verify", 0, 0}, {"strict", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit generate", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit generate: expected one checkpoint; see 'biaskit generate --help'");
        return bk_report(&err);
    }
    const char *prompt = bk_args_get(&args, "prompt"), *prompt_file = bk_args_get(&args, "prompt-file");
    if (!prompt == !prompt_file) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit generate: give the prompt with either --prompt TEXT or --prompt-file "
                                    "FILE (%s)", prompt ? "not both" : "none given");
        return bk_report(&err);
    }
    long n_new = 200, seed = 0, top_k = -1, max_length = 0;
    double temperature = NAN;
    const char *v;
    if ((v = bk_args_get(&args, "tokens")) && bk_args_int("tokens", v, 1, 1L << 20, &n_new, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "seed")) && bk_args_int("seed", v, 0, 9007199254740991L, &seed, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "max-length")) && bk_args_int("max-length", v, 1, 1L << 24, &max_length, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "top-k"))) {
        char *end;
        errno = 0;
        top_k = strtol(v, &end, 10);
        if (end == v || *end || errno || top_k < 1 || top_k > (1L << 30)) {
            bk_fail(&err, BK_ERR_USAGE, "--top-k: expected an integer >= 1 (at most the vocabulary), got '%s'", v);
            return bk_report(&err);
        }
    }
    if ((v = bk_args_get(&args, "temperature"))) {
        char *end;
        errno = 0;
        temperature = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(temperature) || temperature <= 0.0) {
            bk_fail(&err, BK_ERR_USAGE, "--temperature: expected a finite number > 0, got '%s'", v);
            return bk_report(&err);
        }
    }
    const int greedy = bk_args_get(&args, "greedy") != NULL;
    if (greedy && (top_k > 0 || !isnan(temperature))) {
        bk_fail(&err, BK_ERR_USAGE, "--greedy takes the most likely token: it cannot go with %s (sampling)",
                top_k > 0 ? "--top-k" : "--temperature");
        return bk_report(&err);
    }

    char *text = NULL;
    size_t len = 0;
    if (prompt_file) {
        if (bk_file_read_all(prompt_file, "prompt file", 1u << 26, &text, &len, &err)) {
            bk_error_prefix(&err, "--prompt-file: ");
            return bk_report(&err);
        }
    } else if (!(text = strdup(prompt))) {
        bk_fail(&err, BK_ERR_NOMEM, "out of memory for the prompt");
        return bk_report(&err);
    } else
        len = strlen(text);
    if (len == 0) {
        free(text);
        bk_fail(&err, BK_ERR_USAGE, "%s is empty: give at least one byte of text to continue",
                prompt_file ? "--prompt-file" : "--prompt");
        return bk_report(&err);
    }

    const char *sets[BK_ARGS_MAX];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_EVALUATE, sets, BK_ARGS_MAX);
    bk_lm lm;
    bk_train_state st;
    if (bk_reopen(args.positional[0], &reopen, &lm, NULL, &st, &err)) {
        free(text);
        return bk_report(&err);
    }
    if (lm.exp.run.threads > 0)
        omp_set_num_threads((int)lm.exp.run.threads);
    int rc = bk_text_model_check(&lm, "generate", 1, &err);
    const int32_t V = lm.gpt.V;
    bk_sampler s = {top_k > 0 ? (int32_t)top_k : (!isnan(temperature) ? V : 0),
                    isnan(temperature) ? 1.0 : temperature, (uint64_t)seed};
    if (!rc)
        rc = bk_sampler_check(&s, V, &err);
    if (!max_length)
        max_length = (long)(BK_GENERATE_MAX_FACTOR * lm.exp.train.length);
    int32_t *tokens = NULL, *out = malloc((size_t)n_new * sizeof *out);
    if (!rc && lm.tokenizer) { /* the prompt's tokens: the model's tokenizer's, else its bytes */
        size_t n = 0;
        if (!(rc = bk_bpe_encode(lm.tokenizer, text, len, &tokens, &n, &err)) && n == 0)
            rc = bk_fail(&err, BK_ERR_USAGE, "the prompt encodes to no token");
        len = n;
    } else if (!rc && (tokens = malloc(len * sizeof *tokens)))
        bk_text_encode(text, len, tokens);
    if (!rc && (!tokens || !out))
        rc = bk_fail(&err, BK_ERR_NOMEM, "out of memory for a prompt of %zu bytes", len);
    const char *why =
        bk_args_get(&args, "max-length") ? "--max-length" : "16 x the training length; --max-length N raises it";
    if (!rc && len > (size_t)max_length)
        rc = bk_fail(&err, BK_ERR_INVALID, "the prompt has %zu tokens, beyond the limit of %ld tokens (%s)", len,
                     max_length, why);
    else if (!rc && (long)len + n_new - 1 > max_length)
        rc = bk_fail(&err, BK_ERR_INVALID,
                     "the prompt (%zu tokens) and --tokens %ld need a forward of %ld tokens, beyond the limit of %ld "
                     "tokens (%s)",
                     len, n_new, (long)len + n_new - 1, max_length, why);
    if (!rc)
        rc = bk_generate(&lm, tokens, (int32_t)len, (int32_t)n_new, (int32_t)max_length, &s, out, &err);
    if (!rc && lm.tokenizer) {
        char *bytes = NULL;
        size_t n = 0;
        if (!(rc = bk_bpe_decode(lm.tokenizer, out, (size_t)n_new, &bytes, &n, &err))) {
            fwrite(bytes, 1, n, stdout);
            putchar('\n');
        }
        free(bytes);
    } else if (!rc) {
        for (long t = 0; t < n_new; t++)
            putchar(out[t]);
        putchar('\n');
    }
    if (!rc)
        rc = bk_output_stdout_check(&err);
    free(tokens), free(out), free(text);
    bk_lm_close(&lm);
    return rc ? bk_report(&err) : 0;
}
