/* Terms that are not distance tables: the segmenter (bipe), embeddings (bipe, ape) and RoPE. Their
 * roles in an experiment (defaults, refusals with positions), BiPE's segmentation under both
 * semantics, the positions the engine hands to the attention and the embeddings, and the rotation
 * (an orthogonal map whose inverse is the backward). The whole model with these terms is checked
 * against PyTorch in test_reference. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "term_fixture.h"

#include "bias/terms.h"
#include "model/positions.h"
#include "train/lm.h"
#include "model/rotary_math.h"

#include <math.h>
#include <stdlib.h>

#define MODEL "[model]\nlayers = 2\nheads = 4\ndim = 32\nvocab = 256\n[train]\nlength = 16\n"

static void roles_and_defaults(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f,
                                MODEL "[[term]]\nplugin = \"bipe\"\n[[term]]\nplugin = \"alibi\"\nstream = \"segment\"\n"
                                      "[[term]]\nplugin = \"rope\"\n[[term]]\nplugin = \"ape\"\n",
                                &err),
                     BK_OK);
    assert_int_equal(f.set.segmenter, 0);
    assert_int_equal(f.set.rotary, 2);
    assert_int_equal(f.set.terms[0].stream, BK_STREAM_SEGMENT); /* the segmenter's default */
    assert_int_equal(f.set.terms[2].stream, BK_STREAM_TOKEN);
    assert_int_equal(f.set.terms[3].stream, BK_STREAM_TOKEN);
    assert_true(bk_term_has_table(&f.set.terms[1]));
    assert_false(bk_term_has_table(&f.set.terms[0]));
    assert_int_equal(f.set.terms[0].n_params, 16 * 32); /* intra-segment table: train length x dim */
    assert_int_equal(f.set.terms[3].n_params, 0);       /* sinusoidal */
    assert_true(f.set.terms[1].weight == 1.0);
    int n;
    float table[4 * 8];
    assert_int_equal(bk_terms_mixed_table(&f.set, 0, BK_STREAM_TOKEN, 8, table, &n, &err), BK_OK);
    assert_int_equal(n, 0); /* rope and ape are not tables */
    assert_int_equal(bk_terms_mixed_table(&f.set, 0, BK_STREAM_SEGMENT, 8, table, &n, &err), BK_OK);
    assert_int_equal(n, 1);
    close_terms(&f);
}

static void refusals_name_the_term(void **state)
{
    (void)state;
    expect_term_error(MODEL "[[term]]\nplugin = \"alibi\"\nstream = \"segment\"\n", "exp.toml:8:1",
                 "needs a segmenting term");
    expect_term_error(MODEL "[[term]]\nplugin = \"rope\"\nstream = \"segment\"\n", "[[term]] #1 (rope)",
                 "needs a segmenting term");
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\n[[term]]\nplugin = \"bipe\"\nname = \"b2\"\n",
                 "a second segmenting term", "'bipe' already");
    expect_term_error(MODEL "[[term]]\nplugin = \"rope\"\n[[term]]\nplugin = \"rope\"\nname = \"r2\"\n",
                 "a second rotary term", "#2");
    expect_term_error(MODEL "[[term]]\nplugin = \"ape\"\nper_layer = true\n", "per_layer = true needs a term that acts inside each layer's attention",
                 "'ape'");
    expect_term_error(MODEL "[[term]]\nplugin = \"rope\"\nweight = 0.5\n", "'weight' mixes distance tables", "rope");
    expect_term_error("[model]\nheads = 4\ndim = 36\n[[term]]\nplugin = \"rope\"\n", "head width must be even", "got 9");
}

static void bad_plugin_options(void **state)
{
    (void)state;
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\ndelimiters = [\"..\"]\n", "delimiters", "one-byte string");
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\ndelimiters = []\n", "delimiters", "at least one");
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\ndelimiters = [\".\"]\ndelimiter_ids = [46]\n", "exclude each other",
                 NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\ndelimiter_ids = [300]\n", "delimiter_ids", "0 .. 255");
    expect_term_error("[model]\nheads = 4\ndim = 32\nvocab = 50257\n[[term]]\nplugin = \"bipe\"\n", "delimiter_ids",
                 "50257 tokens");
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\nsemantics = \"both\"\n", "semantics", "paper, code");
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\nmax_position = -1\n", "max_position", "expected");
    expect_term_error(MODEL "[[term]]\nplugin = \"rope\"\nbase = 1.0\n", "base", "> 1");
    expect_term_error(MODEL "[[term]]\nplugin = \"ape\"\nvariant = \"rotary\"\n", "variant", "sinusoidal, learned");
    expect_term_error(MODEL "[[term]]\nplugin = \"ape\"\ninit_std = -1.0\n", "init_std", ">= 0");
    expect_term_error(MODEL "[[term]]\nplugin = \"ape\"\nscale = -0.5\n", "scale", ">= 0");
    expect_term_error(MODEL "[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\nscale = 0.5\n", "scale",
                      "sinusoidal");
}

/* The segments of one row through the engine: bk_positions_prepare with the bipe term. */
static void segments_of(const char *extra, const char *text, int32_t *index, int32_t *position)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, MODEL "[[term]]\nplugin = \"bipe\"\n%s", extra);
    fixture f;
    bk_error err;
    if (open_terms(&f, cfg, &err))
        fail_msg("%s", err.message);
    int T = (int)strlen(text);
    int32_t tokens[64];
    for (int i = 0; i < T; i++)
        tokens[i] = (unsigned char)text[i];
    bk_positions ps;
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    if (bk_positions_prepare(&ps, tokens, 1, T, &err))
        fail_msg("%s", err.message);
    memcpy(index, bk_positions_stream(&ps, BK_STREAM_SEGMENT), (size_t)T * sizeof(int32_t));
    memcpy(position, ps.segment_position, (size_t)T * sizeof(int32_t));
    assert_null(bk_positions_stream(&ps, BK_STREAM_TOKEN));
    for (int i = 0; i < T; i++)
        assert_int_equal(ps.token_index[i], i);
    /* spans: every distance on the token stream, 1 + the last segment index on the segment stream */
    assert_int_equal(bk_positions_span(&ps, BK_STREAM_TOKEN), T);
    assert_int_equal(bk_positions_span(&ps, BK_STREAM_SEGMENT), index[T - 1] + 1);
    bk_positions_free(&ps);
    close_terms(&f);
}

static void expect_ints(const int32_t *got, const int32_t *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s[%d] = %d, expected %d", what, i, (int)got[i], (int)want[i]);
}

static void bipe_segmentation(void **state)
{
    (void)state;
    int32_t idx[64], pos[64];
    /* plugins/bipe/README.md: [A, B, '.', C, D, '\n', E] -> intra [0,1,2,0,1,2,0], seg [0,0,0,1,1,1,2] */
    segments_of("", "AB.CD\nE", idx, pos);
    expect_ints(idx, (const int32_t[]){0, 0, 0, 1, 1, 1, 2}, 7, "segment");
    expect_ints(pos, (const int32_t[]){0, 1, 2, 0, 1, 2, 0}, 7, "position");
    /* code semantics: '.' closes only after a space (Llama's '▁.'), a newline always */
    segments_of("semantics = \"code\"\n", "a.b .c\nd", idx, pos);
    expect_ints(idx, (const int32_t[]){0, 0, 0, 0, 0, 1, 1, 2}, 8, "segment (code)");
    expect_ints(pos, (const int32_t[]){0, 1, 2, 3, 4, 0, 1, 0}, 8, "position (code)");
    /* arithmetic: '=' closes */
    segments_of("delimiters = [\"=\"]\n", "1+2=3=", idx, pos);
    expect_ints(idx, (const int32_t[]){0, 0, 0, 0, 1, 1}, 6, "segment (=)");
    /* token ids instead of bytes */
    segments_of("delimiter_ids = [120]\n", "axbx", idx, pos);
    expect_ints(idx, (const int32_t[]){0, 0, 1, 1}, 4, "segment (ids)");
    /* no delimiter: one segment */
    segments_of("", "abcdef", idx, pos);
    expect_ints(idx, (const int32_t[]){0, 0, 0, 0, 0, 0}, 6, "segment (none)");
    expect_ints(pos, (const int32_t[]){0, 1, 2, 3, 4, 5}, 6, "position (none)");
}

/* Learned intra-segment rows are clamped at the table size; embeddings add into what is there. */
static void embeddings_add_and_clamp(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f, MODEL "[[term]]\nplugin = \"bipe\"\nmax_position = 3\n", &err), BK_OK);
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 3 * 32);
    const char *text = "abcde.f";
    int32_t tokens[7];
    for (int i = 0; i < 7; i++)
        tokens[i] = (unsigned char)text[i];
    bk_positions ps;
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 7, &err), BK_OK);
    bk_rotary_view view;
    assert_int_equal(bk_positions_rotary(&ps, &view), 0); /* no rotary term */
    float out[7 * 32], dout[7 * 32], dtheta[3 * 32] = {0};
    for (int i = 0; i < 7 * 32; i++)
        out[i] = 1.0f, dout[i] = (float)(i / 32 + 1);
    assert_int_equal(bk_embed_forward(&ps, out, &err), BK_OK);
    const int32_t row[7] = {0, 1, 2, 2, 2, 2, 0}; /* positions 0..5 then 0; rows clamp at 2 */
    for (int n = 0; n < 7; n++)
        for (int c = 0; c < 32; c++)
            assert_float_equal(out[n * 32 + c], 1.0f + t->theta[row[n] * 32 + c], 1e-7);
    float *dth[1] = {dtheta};
    assert_int_equal(bk_embed_backward(&ps, dout, dth, &err), BK_OK);
    for (int c = 0; c < 32; c++) {
        assert_float_equal(dtheta[0 * 32 + c], 1 + 7, 1e-6);         /* tokens 0 and 6 */
        assert_float_equal(dtheta[1 * 32 + c], 2, 1e-6);             /* token 1 */
        assert_float_equal(dtheta[2 * 32 + c], 3 + 4 + 5 + 6, 1e-6); /* tokens 2..5 */
    }
    bk_positions_free(&ps);
    close_terms(&f);
}

/* RoPE through the engine: q.k after rotation depends on the position difference only, v is not
 * touched, and backward (the inverse rotation) undoes forward. */
static void rotary_is_relative_and_invertible(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f, MODEL "[[term]]\nplugin = \"rope\"\n", &err), BK_OK);
    enum { T = 12, C = 32, H = 4, HD = 8 };
    bk_positions ps;
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_int_equal(ps.pairs, HD / 2);
    assert_float_equal(ps.inv_freq[1], pow(10000.0, -2.0 / HD), 1e-7);
    int32_t tokens[T] = {0};
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, T, &err), BK_OK);
    static float qkv[T * 3 * C], orig[T * 3 * C];
    for (int t = 0; t < T; t++) /* the same q and the same k at every position */
        for (int c = 0; c < 3 * C; c++)
            qkv[t * 3 * C + c] = orig[t * 3 * C + c] = (float)sin(0.7 * c + 0.3);
    /* the model's path: the view of the positions, rotated by the backend (the CPU's here) */
    bk_rotary_view view;
    assert_int_equal(bk_positions_rotary(&ps, &view), 1);
    assert_int_equal(view.pairs, HD / 2);
    assert_true(view.rows >= T);
    assert_null(view.positions); /* the token stream: the token index itself */
    bk_backend *cpu = bk_backend_cpu();
    if (cpu->rotary(cpu, qkv, &view, 1, T, C, H, 1.0f, &err))
        fail_msg("%s", err.message);
    for (int h = 0; h < H; h++) {
        double dot_a = 0, dot_b = 0; /* (i, j) = (5, 2) and (11, 8): both 3 apart */
        for (int k = 0; k < HD; k++) {
            dot_a += qkv[5 * 3 * C + h * HD + k] * qkv[2 * 3 * C + C + h * HD + k];
            dot_b += qkv[11 * 3 * C + h * HD + k] * qkv[8 * 3 * C + C + h * HD + k];
        }
        assert_float_equal(dot_a, dot_b, 1e-5);
    }
    for (int t = 0; t < T; t++)
        for (int c = 2 * C; c < 3 * C; c++)
            assert_true(qkv[t * 3 * C + c] == orig[t * 3 * C + c]);
    if (cpu->rotary(cpu, qkv, &view, 1, T, C, H, -1.0f, &err))
        fail_msg("%s", err.message);
    for (int i = 0; i < T * 3 * C; i++)
        assert_float_equal(qkv[i], orig[i], 1e-5);
    /* position 0 is not rotated; one pair by hand at position 1 */
    float x1 = 1.0f, x2 = 2.0f;
    bk_rotate_pair(&x1, &x2, cosf(0.5f), sinf(0.5f));
    assert_float_equal(x1, cos(0.5) - 2 * sin(0.5), 1e-6);
    assert_float_equal(x2, 2 * cos(0.5) + sin(0.5), 1e-6);
    bk_positions_free(&ps);
    close_terms(&f);
}

/* The rope term's extension views through the engine: Self-Extend (window 4, group 3) at T = 12 gives the
 * near view [0, 4) at the token indices and the far view [4, inf) over the 8 rows of its shifted copy,
 * q at floor((t + 4) / 3) + 3 and k at floor(t / 3); a sequence no longer than the window leaves the far
 * view no rows; no extension, no views; the segment stream is refused by name. */
static void rope_extension_views(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(
        open_terms(&f, MODEL "[[term]]\nplugin = \"rope\"\nextend = \"self-extend\"\nwindow = 4\ngroup = 3\n", &err),
        BK_OK);
    bk_positions ps;
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    enum { T = 12, PAIRS = 4 };
    int32_t tokens[T] = {0};
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, T, &err), BK_OK);
    bk_rotary_view v[BIASKIT_MAX_ROTARY_VIEWS];
    int32_t lo[BIASKIT_MAX_ROTARY_VIEWS], hi[BIASKIT_MAX_ROTARY_VIEWS];
    assert_int_equal(bk_positions_views(&ps, v, lo, hi), 2);
    assert_int_equal(lo[0], 0), assert_int_equal(hi[0], 4), assert_int_equal(lo[1], 4), assert_int_equal(hi[1], 0);
    assert_int_equal(v[0].rows, T), assert_int_equal(v[1].rows, T - 4), assert_int_equal(v[1].pairs, PAIRS);
    for (int t = 0; t < T - 4; t++)
        for (int k = 0; k < PAIRS; k++) {
            const double f_k = (double)ps.inv_freq[k], qp = (t + 4) / 3 + 3, kp = t / 3;
            assert_float_equal(v[1].cos[t * PAIRS + k], cos(qp * f_k), 1e-6);
            assert_float_equal(v[1].sin[t * PAIRS + k], sin(qp * f_k), 1e-6);
            assert_float_equal(v[1].kcos[t * PAIRS + k], cos(kp * f_k), 1e-6);
            assert_float_equal(v[1].ksin[t * PAIRS + k], sin(kp * f_k), 1e-6);
            assert_float_equal(v[0].cos[(t + 4) * PAIRS + k], cos((t + 4) * f_k), 1e-6);
            assert_float_equal(v[0].kcos[t * PAIRS + k], cos(t * f_k), 1e-6);
        }
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 3, &err), BK_OK);
    assert_int_equal(bk_positions_views(&ps, v, lo, hi), 2);
    assert_int_equal(v[1].rows, 0);
    bk_positions_free(&ps);
    close_terms(&f);

    assert_int_equal(open_terms(&f, MODEL "[[term]]\nplugin = \"rope\"\n", &err), BK_OK);
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, T, &err), BK_OK);
    assert_int_equal(bk_positions_views(&ps, v, lo, hi), 0);
    bk_positions_free(&ps);
    close_terms(&f);

    assert_int_equal(open_terms(&f, MODEL "[[term]]\nplugin = \"bipe\"\n[[term]]\nplugin = \"rope\"\nstream = "
                                          "\"segment\"\nextend = \"rerope\"\nwindow = 4\n",
                                &err),
                     BK_OK);
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, T, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "term 'rope' (plugin rope): position views (rotary_views) on the segment stream "
                                    "are not supported");
    bk_positions_free(&ps);
    close_terms(&f);
}

/* xPos's decay through the engine: q . k of two pairs the same distance apart agree, and equal the plain
 * rotation's times zeta_k^(distance / scale) pair by pair; a decay that leaves float's range is an error
 * naming the pair and the position. */
static void xpos_decays_with_the_distance(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f, MODEL "[[term]]\nplugin = \"xpos\"\nscale_base = 4.0\n", &err), BK_OK);
    enum { T = 12, C = 32, H = 4, HD = 8 };
    bk_positions ps;
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_non_null(ps.decay);
    assert_float_equal(ps.decay[1], (2.0 / HD + 0.4) / 1.4, 1e-7);
    int32_t tokens[T] = {0};
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, T, &err), BK_OK);
    bk_rotary_view view;
    assert_int_equal(bk_positions_rotary(&ps, &view), 1);
    assert_non_null(view.kcos);
    static float qkv[T * 3 * C];
    for (int t = 0; t < T; t++)
        for (int c = 0; c < 3 * C; c++)
            qkv[t * 3 * C + c] = (float)sin(0.7 * c + 0.3);
    bk_backend *cpu = bk_backend_cpu();
    if (cpu->rotary(cpu, qkv, &view, 1, T, C, H, 1.0f, &err))
        fail_msg("%s", err.message);
    /* pair k of head 0: (i, j) = (5, 2) and (11, 8) agree; (9, 1) is the rotation by the distance 8 of the
     * unrotated values, times zeta_k^(8/4) */
    for (int k = 0; k < HD / 2; k++) {
        const int a = k, b = k + HD / 2;
        double d52 = qkv[5 * 3 * C + a] * qkv[2 * 3 * C + C + a] + qkv[5 * 3 * C + b] * qkv[2 * 3 * C + C + b];
        double d118 = qkv[11 * 3 * C + a] * qkv[8 * 3 * C + C + a] + qkv[11 * 3 * C + b] * qkv[8 * 3 * C + C + b];
        assert_float_equal(d52, d118, 1e-5);
        /* R(9 th) q . R(th) k = q . R(-8 th) k = cos(8 th) q.k + sin(8 th) (q1 k2 - q2 k1) */
        const double q1 = sin(0.7 * a + 0.3), q2 = sin(0.7 * b + 0.3);
        const double k1 = sin(0.7 * (C + a) + 0.3), k2 = sin(0.7 * (C + b) + 0.3), th = 8.0 * ps.inv_freq[k];
        double d91 = qkv[9 * 3 * C + a] * qkv[1 * 3 * C + C + a] + qkv[9 * 3 * C + b] * qkv[1 * 3 * C + C + b];
        double want = pow(ps.decay[k], 8.0 / 4.0) * (cos(th) * (q1 * k1 + q2 * k2) + sin(th) * (q1 * k2 - q2 * k1));
        assert_float_equal(d91, want, 1e-5);
    }
    bk_positions_free(&ps);
    close_terms(&f);
    /* scale 0.5: zeta_0^(-p/0.5) passes float's range before position 40 */
    assert_int_equal(open_terms(&f, MODEL "[[term]]\nplugin = \"xpos\"\nscale_base = 0.5\n", &err), BK_OK);
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    int32_t many[64] = {0};
    assert_int_equal(bk_positions_prepare(&ps, many, 1, 64, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "term 'xpos' (plugin xpos): the decay of pair 0 at position ");
    assert_message_has(err.message, "is out of float's range");
    bk_positions_free(&ps);
    close_terms(&f);
}

/* BiPE with learnable tables on the segment stream (KERPLE-log and MEP-param mixed in kernel space),
 * through the whole model: a training forward and backward on text with delimiters give a finite
 * loss and non-zero gradients for both plugins' parameters and the intra-segment embedding. */
static void bipe_with_kerple_and_mep(void **state)
{
    (void)state;
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR, 1);
    bk_lm lm;
    bk_error err;
    const char *text = MODEL "[attention]\nmixing = \"kernel\"\n[[term]]\nplugin = \"bipe\"\n"
                             "[[term]]\nplugin = \"kerple\"\nstream = \"segment\"\n"
                             "[[term]]\nplugin = \"mep\"\nvariant = \"param\"\nstream = \"segment\"\n";
    if (bk_lm_open_text(&lm, text, "exp.toml", ".", NULL, 0, &err) || bk_gpt_alloc_grads(&lm.gpt, &err) ||
        bk_bias_forward(&lm.bias, 16, &err))
        fail_msg("%s", err.message);
    const char *sample = "ab. cd\nef. gh.ij\nk. lm.nop\nqr.";
    enum { B = 2, T = 16 };
    int32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++)
        in[i] = (unsigned char)sample[i % 31], tg[i] = (unsigned char)sample[(i + 1) % 31];
    if (bk_lm_zero_grad(&lm, &err) || bk_gpt_forward(&lm.gpt, in, tg, B, T, 1, &err) ||
        bk_gpt_backward(&lm.gpt, in, tg, 1.0f, &err))
        fail_msg("%s", err.message);
    assert_true(isfinite(lm.gpt.loss));
    for (int t = 0; t < 3; t++) {
        const bk_term *term = &lm.terms.terms[t];
        double norm = 0;
        for (int64_t i = 0; i < term->n_params; i++) {
            assert_true(isfinite(lm.bias.dtheta[t][i]));
            norm += fabs(lm.bias.dtheta[t][i]);
        }
        if (!(norm > 0))
            fail_msg("term '%s' got no gradient", term->label);
    }
    bk_lm_close(&lm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(roles_and_defaults),
        cmocka_unit_test(refusals_name_the_term),
        cmocka_unit_test(bad_plugin_options),
        cmocka_unit_test(bipe_segmentation),
        cmocka_unit_test(embeddings_add_and_clamp),
        cmocka_unit_test(rotary_is_relative_and_invertible),
        cmocka_unit_test(xpos_decays_with_the_distance),
        cmocka_unit_test(rope_extension_views),
        cmocka_unit_test(bipe_with_kerple_and_mep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
