/* Absolute position embeddings, written once for the host code of the `ape` and `bipe` plugins and
 * for device code.
 *
 * Sinusoidal (Vaswani et al., "Attention Is All You Need", 2017, §3.5), in GPT-NeoX's layout: the
 * first half of the C channels holds scale sin(p w_i), the second half scale cos(p w_i),
 * w_i = base^(-2i/C), i = 0 .. C/2 - 1. The paper adds amplitude-1 vectors to token embeddings it has
 * multiplied by sqrt(C) (§3.4); biaskit leaves its token embeddings (std 0.02) unscaled, so the same
 * ratio is scale = 1/sqrt(C), the plugin's default (bk_ape_default_scale).
 * Learned: a table A[rows][C]; positions past the last row read the last row (an embedding trained
 * at length L has nothing better to offer for p >= L; BiPE clamps its intra-segment positions the
 * same way). */
#ifndef BIASKIT_APE_MATH_H
#define BIASKIT_APE_MATH_H

#include <biaskit/plugin.h>
#include <biaskit/random.h>

#include <math.h>
#include <stdint.h>

/* The sinusoidal amplitude of the Transformer paper's ratio for C channels: 1/sqrt(C). */
static inline double bk_ape_default_scale(int32_t C)
{
    return 1.0 / sqrt((double)C);
}

/* Channel c of the sinusoidal embedding of position p, C channels (even), amplitude `scale`. */
static inline BIASKIT_HD float bk_ape_sinusoidal(double base, double scale, int32_t p, int32_t c, int32_t C)
{
    int32_t half = C / 2, i = c < half ? c : c - half;
    double angle = (double)p * pow(base, -2.0 * (double)i / (double)C);
    return (float)(scale * (c < half ? sin(angle) : cos(angle)));
}

/* The row of a learned table of `rows` rows that position p reads. */
static inline BIASKIT_HD int32_t bk_ape_row(int32_t p, int32_t rows)
{
    return p < 0 ? 0 : p >= rows ? rows - 1 : p;
}

/* Channel c of A[p] of a learned table of `rows` rows, C channels. */
static inline BIASKIT_HD float bk_ape_learned(const float *table, int32_t rows, int32_t C, int32_t p, int32_t c)
{
    return table[(size_t)bk_ape_row(p, rows) * (size_t)C + (size_t)c];
}

/* out[n C + c] += A[row(p_n)][c] for n < count. */
static inline void bk_ape_learned_embed(const float *table, int32_t rows, int32_t C, const int32_t *positions,
                                        int64_t count, float *out)
{
    for (int64_t n = 0; n < count; n++) {
        float *o = out + (size_t)n * (size_t)C;
        for (int32_t c = 0; c < C; c++)
            o[c] += bk_ape_learned(table, rows, C, positions[n], c);
    }
}

/* dtable[row(p_n)][c] += dout[n C + c], n in order (deterministic). */
static inline void bk_ape_learned_backward(int32_t rows, int32_t C, const int32_t *positions, int64_t count,
                                           const float *dout, float *dtable)
{
    for (int64_t n = 0; n < count; n++) {
        float *g = dtable + (size_t)bk_ape_row(positions[n], rows) * (size_t)C;
        const float *d = dout + (size_t)n * (size_t)C;
        for (int32_t c = 0; c < C; c++)
            g[c] += d[c];
    }
}

/* N(0, std^2) initialisation of a learned table. */
static inline void bk_ape_learned_init(float *table, int64_t count, double std, uint64_t seed)
{
    biaskit_rng r = biaskit_rng_seeded(seed);
    for (int64_t i = 0; i < count; i++)
        table[i] = (float)(std * biaskit_rng_normal(&r));
}

#endif
