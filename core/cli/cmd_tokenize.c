/* biaskit tokenize: a text through a byte-level BPE tokenizer (data/bpe.h), and back. */
#include "cli/args.h"
#include "cli/commands.h"
#include "data/bpe.h"
#include "train/checkpoint.h"
#include "util/file.h"
#include "util/output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit tokenize <tokenizer> <file> [--ids] [--out OUT]\n"
    "       biaskit tokenize <tokenizer> <ids-file> --decode [--out OUT]\n"
    "       biaskit tokenize <tokenizer> --dump-json [--out OUT]\n\n"
    "Encodes a text file with a byte-level BPE tokenizer exactly as HF tokenizers does (with\n"
    "add_special_tokens=False: no BOS or EOS is added; special and added tokens written in the text\n"
    "are matched). <tokenizer> is a checkpoint that carries one (an imported model's: biaskit import\n"
    "stores it, and fine-tunings keep it; its checksum is verified), an HF tokenizer.json, a GGUF file\n"
    "(its tokenizer.ggml.* metadata, tokenizer.ggml.model \"gpt2\"), or a directory holding a\n"
    "tokenizer.json. <file> \"-\" is standard input. The text must be valid UTF-8; the first invalid\n"
    "byte is reported by its offset.\n\n"
    "Without --ids: one line per token, its id, a tab and its text (\\n, \\t, \\r, \\\\ and other\n"
    "control or invalid bytes escaped as \\xNN; a token that is part of a character shows its bytes\n"
    "as \\xNN). Standard error gets one summary line: bytes, tokens, bytes per token.\n\n"
    "  --ids        the ids on one line, separated by spaces\n"
    "  --decode     <file> holds ids (separated by spaces or line breaks); writes the decoded bytes.\n"
    "               An id outside the vocabulary is an error naming it\n"
    "  --dump-json  writes the tokenizer as a tokenizer.json that HF tokenizers (Tokenizer.from_file)\n"
    "               and biaskit both read back to the same tokenizer (no <file>)\n"
    "  --out FILE   write there instead of standard output (atomically; never onto an input)\n";

#define TEXT_MAX ((uint64_t)1 << 30)

/* The whole of `path` ("-": standard input) into *text. */
static int read_input(const char *path, char **text, size_t *len, bk_error *err)
{
    if (strcmp(path, "-") != 0)
        return bk_file_read_all(path, "input file", TEXT_MAX, text, len, err);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory reading standard input");
        size_t got = fread(buf + n, 1, cap - n - 1, stdin);
        n += got;
        if (got == 0)
            break;
        if (n + 1 == cap) {
            if (cap >= TEXT_MAX) {
                free(buf);
                return bk_fail(err, BK_ERR_IO, "standard input: more than %llu bytes",
                               (unsigned long long)TEXT_MAX);
            }
            char *grown = realloc(buf, cap * 2);
            if (!grown)
                free(buf);
            buf = grown;
            cap *= 2;
        }
    }
    if (ferror(stdin)) {
        free(buf);
        return bk_fail(err, BK_ERR_IO, "cannot read standard input: %s", strerror(errno));
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return BK_OK;
}

/* The ids of an ids file: integers separated by white space. */
static int parse_ids(const char *path, const char *text, size_t len, int32_t **ids, size_t *n, bk_error *err)
{
    size_t cap = 1024, k = 0, line = 1;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    const char *p = text, *end = text + len;
    while (p < end) {
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            line += *p == '\n';
            p++;
            continue;
        }
        char *stop;
        errno = 0;
        long x = strtol(p, &stop, 10);
        if (stop == p || errno || x < -2147483647L || x > 2147483647L ||
            (stop < end && *stop != ' ' && *stop != '\t' && *stop != '\r' && *stop != '\n')) {
            free(v);
            return bk_fail(err, BK_ERR_PARSE, "%s: line %zu: expected token ids (integers separated by spaces), got "
                           "'%.20s'",
                           path, line, p);
        }
        if (k == cap) {
            int32_t *grown = realloc(v, 2 * cap * sizeof *v);
            if (!grown) {
                free(v);
                return bk_fail(err, BK_ERR_NOMEM, "out of memory");
            }
            v = grown;
            cap *= 2;
        }
        v[k++] = (int32_t)x;
        p = stop;
    }
    *ids = v;
    *n = k;
    return BK_OK;
}

/* A token's text on one line: printable bytes as they are, the rest escaped. */
static void print_piece(bk_output *o, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n && !o->error; i++) {
        unsigned c = s[i];
        if (c == '\\')
            bk_output_printf(o, "\\\\");
        else if (c == '\n')
            bk_output_printf(o, "\\n");
        else if (c == '\t')
            bk_output_printf(o, "\\t");
        else if (c == '\r')
            bk_output_printf(o, "\\r");
        else if (c < 0x20 || c == 0x7f)
            bk_output_printf(o, "\\x%02x", c);
        else if (c < 0x80)
            bk_output_printf(o, "%c", (int)c);
        else {
            /* a whole UTF-8 character as it is, a partial one as \xNN */
            size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            int whole = k && i + k <= n;
            for (size_t j = 1; whole && j < k; j++)
                whole = (s[i + j] & 0xC0) == 0x80;
            if (whole) {
                bk_output_printf(o, "%.*s", (int)k, (const char *)s + i);
                i += k - 1;
            } else {
                bk_output_printf(o, "\\x%02x", c);
            }
        }
    }
}

int bk_cmd_tokenize(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {
        {"help", 0, 0}, {"ids", 0, 0}, {"decode", 0, 0}, {"dump-json", 0, 0}, {"out", 1, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit tokenize", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    const int dump = bk_args_get(&args, "dump-json") != NULL, decode = bk_args_get(&args, "decode") != NULL,
              ids_only = bk_args_get(&args, "ids") != NULL;
    if (dump + decode + ids_only > 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit tokenize: --ids, --decode and --dump-json exclude each other");
        return bk_report(&err);
    }
    if (args.n_positional != (dump ? 1u : 2u)) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit tokenize: expected %s; see 'biaskit tokenize --help'",
                dump ? "a tokenizer and no file with --dump-json" : "a tokenizer and a file");
        return bk_report(&err);
    }
    const char *tok_path = args.positional[0], *in_path = dump ? NULL : args.positional[1];
    const char *out_path = bk_args_get(&args, "out");
    bk_output_input inputs[2] = {{"tokenizer", tok_path, NULL, 0}, {"input file", in_path, NULL, 0}};
    const int n_inputs = in_path && strcmp(in_path, "-") != 0 ? 2 : 1;
    if (out_path && bk_output_check("--out", out_path, inputs, n_inputs, &err))
        return bk_report(&err);

    bk_bpe *t = NULL;
    char *text = NULL, *result = NULL;
    size_t len = 0, rlen = 0, n = 0;
    int32_t *ids = NULL;
    int rc = bk_checkpoint_is_file(tok_path) ? bk_checkpoint_read_tokenizer(tok_path, &t, &err)
                                             : bk_bpe_open(tok_path, &t, &err);
    if (rc == BK_OK && dump)
        rc = bk_bpe_to_hf_json(t, &result, &rlen, &err);
    if (rc == BK_OK && !dump)
        rc = read_input(in_path, &text, &len, &err);
    if (rc == BK_OK && decode) {
        rc = parse_ids(in_path, text, len, &ids, &n, &err);
        if (rc == BK_OK && (rc = bk_bpe_decode(t, ids, n, &result, &rlen, &err)) != BK_OK)
            bk_error_prefix(&err, "%s: ", in_path);
    } else if (rc == BK_OK && !dump) {
        if ((rc = bk_bpe_encode(t, text, len, &ids, &n, &err)) != BK_OK)
            bk_error_prefix(&err, "%s: ", strcmp(in_path, "-") ? in_path : "standard input");
    }
    bk_output o;
    if (rc == BK_OK)
        rc = bk_output_open(&o, "--out", out_path ? out_path : "-", inputs, n_inputs, &err);
    if (rc == BK_OK) {
        if (result) {
            if (rlen)
                (void)fwrite(result, 1, rlen, o.f); /* checked by bk_output_close */
        } else if (ids_only) {
            for (size_t i = 0; i < n && !o.error; i++)
                bk_output_printf(&o, i ? " %d" : "%d", (int)ids[i]);
            bk_output_printf(&o, "\n");
        } else {
            char *piece = NULL;
            size_t plen = 0;
            for (size_t i = 0; i < n && rc == BK_OK && !o.error; i++) {
                rc = bk_bpe_decode(t, ids + i, 1, &piece, &plen, &err);
                if (rc == BK_OK) {
                    bk_output_printf(&o, "%d\t", (int)ids[i]);
                    print_piece(&o, (const unsigned char *)piece, plen);
                    bk_output_printf(&o, "\n");
                }
                free(piece);
                piece = NULL;
            }
        }
        if (rc == BK_OK)
            rc = bk_output_close(&o, &err);
        else
            bk_output_discard(&o);
    }
    if (rc == BK_OK && !dump && !decode && !ids_only)
        fprintf(stderr, "tokenize: %zu bytes, %zu tokens, %.3f bytes/token (%s)\n", len, n,
                n ? (double)len / (double)n : 0.0, bk_bpe_describe(t));
    free(text);
    free(result);
    free(ids);
    bk_bpe_free(t);
    return rc == BK_OK ? 0 : bk_report(&err);
}
