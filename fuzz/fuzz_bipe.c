/* Fuzz target: the BiPE segmenter (plugins/bipe/bipe.c, compiled into this target) with the options
 * it reads through the engine's services (core/plugin/services.c). Input: byte 0 = flags (bit 0
 * semantics "code", bit 1 delimiter_ids instead of delimiters, bit 2 a 50257-token vocabulary, bit 3
 * no intra embedding), byte 1 = number of delimiters (0-8), byte 2 = max_position (0-15), then one
 * byte per delimiter (two with delimiter_ids), then the tokens (one byte each with the byte
 * vocabulary, two with the large one). The segments must keep the SDK's contract
 * (bk_segments_first_violation) and close exactly after the delimiters the semantics name. */
#include "fuzz.h"

#include "model/positions.h"
#include "plugin/services.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const biaskit_plugin *biaskit_plugin_entry(uint32_t host_abi_version);

#define MAX_TOKENS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    const int code = data[0] & 1, ids = (data[0] >> 1) & 1, big = (data[0] >> 2) & 1, no_intra = (data[0] >> 3) & 1;
    const int n_delims = data[1] % 9, max_position = data[2] % 16;
    const int32_t vocab = big ? 50257 : 256;
    size_t at = 3;
    int32_t delims[8];
    char text[1024];
    size_t used = (size_t)snprintf(text, sizeof text, "semantics = \"%s\"\nintra_embedding = %s\nmax_position = %d\n%s = [",
                                   code ? "code" : "paper", no_intra ? "false" : "true", max_position,
                                   ids ? "delimiter_ids" : "delimiters");
    for (int i = 0; i < n_delims; i++) {
        size_t width = ids ? 2 : 1;
        if (at + width > size)
            return 0;
        delims[i] = ids ? (int32_t)(data[at] | data[at + 1] << 8) : data[at];
        at += width;
        used += (size_t)(ids ? snprintf(text + used, sizeof text - used, "%s%d", i ? ", " : "", (int)delims[i])
                             : snprintf(text + used, sizeof text - used, "%s\"\\u%04x\"", i ? ", " : "",
                                        (unsigned)delims[i]));
    }
    snprintf(text + used, sizeof text - used, "]\n");

    const biaskit_plugin *desc = biaskit_plugin_entry(BIASKIT_ABI_VERSION);
    bk_error err;
    bk_toml *doc = NULL;
    if (bk_toml_parse_string(text, "fuzz_bipe.toml", &doc, &err) != BK_OK) {
        fprintf(stderr, "fuzz_bipe: the options do not parse: %s\n%s", err.message, text);
        abort();
    }
    biaskit_config view;
    const bk_toml_node *root = bk_toml_root(doc);
    if (bk_config_view_init(&view, desc, root, bk_toml_position(root), "[[term]] #1 (bipe)", &err) != BK_OK) {
        fprintf(stderr, "fuzz_bipe: options refused: %s\n%s", err.message, text);
        abort();
    }
    biaskit_geometry geo = {sizeof(biaskit_geometry), 1, 2, 4, 2, vocab, 16};
    biaskit_error perr = {0};
    void *inst = NULL;
    if (desc->create(bk_services(), &view, &geo, &inst, &perr) != BIASKIT_OK) {
        if (perr.message[0] == '\0' || inst)
            abort(); /* a refusal explains itself */
        bk_toml_free(doc);
        return 0;
    }

    /* which delimiters were accepted: bytes must be < vocab (and one byte long, which \u00XX < 0x80 is) */
    const int width = big ? 2 : 1;
    int64_t count = (int64_t)((size - at) / (size_t)width);
    if (count > MAX_TOKENS)
        count = MAX_TOKENS;
    int32_t *tokens = malloc((size_t)(count ? count : 1) * sizeof *tokens);
    int32_t *index = malloc((size_t)(count ? count : 1) * sizeof *index);
    int32_t *position = malloc((size_t)(count ? count : 1) * sizeof *position);
    if (!tokens || !index || !position)
        abort();
    for (int64_t n = 0; n < count; n++)
        tokens[n] = big ? (int32_t)((data[at + 2 * n] | data[at + 2 * n + 1] << 8) % vocab) : data[at + n];
    if (desc->segment(inst, tokens, count, index, position, &perr) != BIASKIT_OK)
        abort();
    if (bk_segments_first_violation(index, position, count) != -1)
        abort();
    for (int64_t n = 1; n < count; n++) {
        int prev = tokens[n - 1], closes = 0;
        for (int i = 0; i < n_delims; i++)
            closes |= delims[i] == prev;
        if (closes && code && !ids && prev != 10)
            closes = n >= 2 && tokens[n - 2] == 32;
        if (index[n] != index[n - 1] + closes)
            abort(); /* a segment closed where no delimiter is, or stayed open after one */
    }

    /* the intra-segment embedding over those positions (rows clamp at max_position) */
    int64_t n_params = desc->param_count(inst);
    if (n_params < 0)
        abort();
    float *theta = calloc((size_t)(n_params ? n_params : 1), sizeof *theta);
    float *dtheta = calloc((size_t)(n_params ? n_params : 1), sizeof *dtheta);
    float *out = calloc((size_t)(count ? count : 1) * 4, sizeof *out);
    if (!theta || !dtheta || !out)
        abort();
    if (desc->param_init(inst, theta, 7, &perr) != BIASKIT_OK ||
        desc->embed(inst, theta, position, count, out, &perr) != BIASKIT_OK ||
        desc->embed_backward(inst, theta, position, count, out, dtheta, &perr) != BIASKIT_OK)
        abort();
    free(theta);
    free(dtheta);
    free(out);
    free(tokens);
    free(index);
    free(position);
    desc->destroy(inst);
    bk_toml_free(doc);
    return 0;
}
