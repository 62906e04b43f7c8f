/* The per-score term interface (core/model/score_terms.h) that every attention program calls:
 *  - bk_score_run over a run of keys gives, bit for bit, bk_score_one of each key (the CPU's vectorised
 *    rows and the device's per-element threads compute the same scores), for every combination of the
 *    terms (tables on the token index and on positions, logit scale, coordinate table, content position);
 *  - each term adds what its formula says, in the documented order (checked against the sum written out
 *    here in the same order);
 *  - a distance outside the tables turns that score, and only that one, into NaN (token index and positions);
 *  - bk_score_head_of offsets the rows of (b, h) and lists the streams with a table in stream order;
 *  - bk_score_tile's classes agree with bk_score_keeps on every pair of every tile (skip: none kept; full:
 *    all kept; partial: the per-pair test, exact without a window), and a window lets tiles be skipped;
 *  - bk_attention_score_terms normalises a mask that hides no causal pair and copies the rest;
 *  - bk_score_table_grad and bk_score_grid_grad put each dS where the score read its term. */
#include "test_util.h"

#include "cpu/attention.h"
#include "model/score_terms.h"

#include <math.h>
#include <stdlib.h>

enum { B = 2, H = 3, T = 40, P = 9 };

static float tab0[H * T], tab1[H * T], lscale[H * T], grid[H * P], phi[T], rscale[T], cpos[B * H * T];
static int32_t pos1[B * T];

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) / 16777216.0) * 2.0f - 1.0f;
}

static void fill(void)
{
    uint32_t s = 7;
    for (int k = 0; k < H * T; k++)
        tab0[k] = rnd(&s), tab1[k] = rnd(&s), lscale[k] = 1.5f * rnd(&s);
    for (int k = 0; k < H * P; k++)
        grid[k] = rnd(&s);
    for (int d = 0; d < T; d++)
        phi[d] = logf(1.0f + (float)d) / logf(1.0f + (float)T);
    for (int i = 0; i < T; i++)
        rscale[i] = 0.5f + 0.5f * (float)i / (float)T;
    for (int bh = 0; bh < B * H; bh++) {
        float p = 0.0f;
        for (int t = 0; t < T; t++)
            cpos[bh * T + t] = (p += 0.3f * fabsf(rnd(&s)));
    }
    for (int b = 0; b < B; b++) {
        int p = 0;
        for (int t = 0; t < T; t++) {
            pos1[b * T + t] = p;
            p += (t + b) % 3 == 0;
        }
    }
}

/* The terms with the members of `mask` present: 1 token table, 2 positioned table, 4 logit scale, 8 grid,
 * 16 content position. */
static bk_score_terms terms_with(int mask)
{
    bk_score_terms t;
    memset(&t, 0, sizeof t);
    t.distances = T;
    if (mask & 1)
        t.table[0] = tab0;
    if (mask & 2)
        t.table[1] = tab1, t.positions[1] = pos1;
    if (mask & 4)
        t.lscale = lscale;
    if (mask & 8)
        t.grid = grid, t.phi = phi, t.rscale = rscale, t.points = P;
    if (mask & 16)
        t.cpos = cpos;
    return t;
}

/* The score written out term by term, in the interface's order. */
static float score_by_hand(int mask, int b, int h, int i, int j, float a)
{
    float s = a;
    if (mask & 4)
        s *= lscale[h * T + i];
    if (mask & 1)
        s += tab0[h * T + (i - j)];
    if (mask & 2)
        s += tab1[h * T + (pos1[b * T + i] - pos1[b * T + j])];
    if (mask & 8) {
        float x = phi[i - j] * rscale[i] * (float)(P - 1);
        x = x < 0.0f ? 0.0f : x > (float)(P - 1) ? (float)(P - 1) : x;
        int g = (int)x;
        g = g < P - 2 ? g : P - 2;
        const float w = x - (float)g, *F = grid + h * P;
        s += F[g] + w * (F[g + 1] - F[g]);
    }
    if (mask & 16)
        s += cpos[(b * H + h) * T + j] - cpos[(b * H + h) * T + i];
    return s;
}

static void run_matches_one_and_formula(void **state)
{
    (void)state;
    fill();
    uint32_t seed = 99;
    for (int mask = 0; mask < 32; mask++) {
        const bk_score_terms t = terms_with(mask);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const bk_score_head hv = bk_score_head_of(&t, b, h, H, T);
                for (int i = 0; i < T; i++) {
                    float a[T], run[T];
                    for (int j = 0; j <= i; j++)
                        a[j] = rnd(&seed), run[j] = a[j];
                    /* the row in two runs, as the CPU's masked rows are */
                    const int split = i / 3;
                    bk_score_run(&hv, i, 0, split, run);
                    bk_score_run(&hv, i, split, i + 1 - split, run + split);
                    for (int j = 0; j <= i; j++) {
                        const float one = bk_score_one(&hv, i, j, a[j]);
                        if (memcmp(&one, &run[j], sizeof one) != 0)
                            fail_msg("terms %d, (b %d, h %d, i %d, j %d): run %.9g, one %.9g", mask, b, h, i, j,
                                     (double)run[j], (double)one);
                        const float want = score_by_hand(mask, b, h, i, j, a[j]);
                        if (memcmp(&one, &want, sizeof one) != 0)
                            fail_msg("terms %d, (b %d, h %d, i %d, j %d): %.9g, by hand %.9g", mask, b, h, i, j,
                                     (double)one, (double)want);
                    }
                }
            }
    }
}

static void head_lists_streams_in_order(void **state)
{
    (void)state;
    fill();
    bk_score_terms t = terms_with(2 | 4 | 8 | 16);
    bk_score_head hv = bk_score_head_of(&t, 1, 2, H, T);
    assert_int_equal(hv.n, 1);
    assert_int_equal(hv.stream[0], 1);
    assert_ptr_equal(hv.tab[0], tab1 + 2 * T);
    assert_ptr_equal(hv.pos[0], pos1 + T);
    assert_ptr_equal(hv.lam, lscale + 2 * T);
    assert_ptr_equal(hv.F, grid + 2 * P);
    assert_ptr_equal(hv.cp, cpos + (1 * H + 2) * T);
    t = terms_with(1 | 2);
    hv = bk_score_head_of(&t, 0, 1, H, T);
    assert_int_equal(hv.n, 2);
    assert_int_equal(hv.stream[0], 0);
    assert_int_equal(hv.stream[1], 1);
    assert_null(hv.pos[0]);
    assert_null(hv.lam);
    assert_null(hv.F);
    assert_null(hv.cp);
    t = terms_with(0);
    hv = bk_score_head_of(&t, 0, 0, H, T);
    assert_int_equal(hv.n, 0);
    const float x = 0.375f;
    assert_true(bk_score_one(&hv, 5, 2, x) == x); /* no term: the score is a */
}

static void distance_outside_is_nan(void **state)
{
    (void)state;
    fill();
    bk_score_terms t = terms_with(1);
    t.distances = 10; /* the token table holds distances 0 .. 9 */
    const bk_score_head hv = bk_score_head_of(&t, 0, 0, H, T);
    float row[20];
    for (int j = 0; j < 20; j++)
        row[j] = 0.0f;
    bk_score_run(&hv, 19, 0, 20, row); /* keys 0 .. 19 of query 19: distances 19 .. 0 */
    for (int j = 0; j < 20; j++) {
        if (19 - j >= 10)
            assert_true(isnan(row[j]));
        else
            assert_true(row[j] == tab0[19 - j]);
    }
    /* positions (non-decreasing, as the engine promises): distances past the table are NaN, the rest read */
    static int32_t twice[T];
    for (int k = 0; k < T; k++)
        twice[k] = 2 * k;
    t = terms_with(0);
    t.table[1] = tab1, t.positions[1] = twice, t.distances = 10;
    const bk_score_head hp = bk_score_head_of(&t, 0, 0, H, T);
    float r2[9];
    for (int j = 0; j < 9; j++)
        r2[j] = 0.0f;
    bk_score_run(&hp, 8, 0, 9, r2); /* distances 16, 14, ..., 0 */
    for (int j = 0; j < 9; j++) {
        if (16 - 2 * j >= 10)
            assert_true(isnan(r2[j]));
        else
            assert_true(r2[j] == tab1[16 - 2 * j]);
    }
}

static void tiles_agree_with_pairs(void **state)
{
    (void)state;
    const int masks[][2] = {{0, 0}, {1, 0}, {5, 0}, {5, 3}, {12, 2}, {3, 20}, {64, 0}};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        bk_score_terms t;
        memset(&t, 0, sizeof t);
        t.window = masks[m][0], t.sinks = masks[m][1];
        int skipped = 0;
        for (int tile = 1; tile <= 8; tile *= 2)
            for (int i0 = 0; i0 < T; i0 += tile)
                for (int j0 = 0; j0 < T; j0 += tile) {
                    const int i1 = i0 + tile < T ? i0 + tile : T, j1 = j0 + tile < T ? j0 + tile : T;
                    const int cls = bk_score_tile(&t, i0, i1, j0, j1);
                    int kept = 0, all = 0;
                    for (int i = i0; i < i1; i++)
                        for (int j = j0; j < j1; j++) {
                            const int k = bk_score_keeps(&t, i, j);
                            kept += k, all++;
                            assert_int_equal(bk_score_tile_keeps(&t, cls, i, j), cls == BK_TILE_SKIP ? 0 : k);
                        }
                    if (cls == BK_TILE_SKIP && kept)
                        fail_msg("window %d sinks %d: tile (%d, %d) skipped with %d pairs kept", t.window, t.sinks,
                                 i0, j0, kept);
                    if (cls == BK_TILE_FULL && kept != all)
                        fail_msg("window %d sinks %d: tile (%d, %d) full with %d of %d kept", t.window, t.sinks, i0,
                                 j0, kept, all);
                    skipped += cls == BK_TILE_SKIP;
                    if (!t.window && cls == BK_TILE_PARTIAL && (kept == 0 || kept == all))
                        fail_msg("no window: tile (%d, %d) partial with %d of %d kept", i0, j0, kept, all);
                }
        /* a partial tile is tested per pair, and may be conservative with a window (the sinks and the window
         * together can keep every pair of it); but a window does let tiles be skipped */
        if (t.window > 0 && t.window < T / 2 && t.sinks < T / 2 && skipped == 0)
            fail_msg("window %d sinks %d: no tile skipped", t.window, t.sinks);
    }
}

static void call_terms_normalise_mask(void **state)
{
    (void)state;
    fill();
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.table[0] = tab0, bias.table[1] = tab1, bias.positions[1] = pos1, bias.positions[0] = pos1;
    bias.distances = T, bias.grid = grid, bias.points = P, bias.phi = phi, bias.rscale = rscale;
    bias.scale = lscale, bias.cpos = cpos, bias.window = 8, bias.sinks = 4;
    bk_score_terms t = bk_attention_score_terms(&bias, T);
    assert_int_equal(t.window, 8);
    assert_int_equal(t.sinks, 4);
    assert_ptr_equal(t.table[0], tab0);
    assert_ptr_equal(t.positions[0], pos1);
    assert_ptr_equal(t.positions[1], pos1);
    assert_ptr_equal(t.grid, grid);
    assert_int_equal(t.points, P);
    assert_ptr_equal(t.lscale, lscale);
    assert_ptr_equal(t.cpos, cpos);
    bias.sinks = T - 8; /* every key the window hides is a sink: no mask */
    t = bk_attention_score_terms(&bias, T);
    assert_int_equal(t.window, 0);
    assert_int_equal(t.sinks, 0);
    bias.sinks = T - 9;
    t = bk_attention_score_terms(&bias, T);
    assert_int_equal(t.window, 8);
    bias.table[0] = NULL; /* positions of a stream without a table are not carried */
    t = bk_attention_score_terms(&bias, T);
    assert_null(t.positions[0]);
    t = bk_attention_score_terms(NULL, T);
    assert_null(t.table[1]);
    assert_null(t.grid);
    assert_int_equal(t.window, 0);
}

static void gradients_go_where_terms_were_read(void **state)
{
    (void)state;
    fill();
    const bk_score_terms t = terms_with(2 | 8);
    const int b = 1, h = 2, i = 30, j0 = 4, n = 20;
    const bk_score_head hv = bk_score_head_of(&t, b, h, H, T);
    float ds[20];
    uint32_t s = 3;
    for (int c = 0; c < n; c++)
        ds[c] = rnd(&s);
    /* the table: G[p(i) - p(j)] += dS, against a sum by hand */
    double G[T], want[T];
    memset(G, 0, sizeof G), memset(want, 0, sizeof want);
    bk_score_table_grad(G, hv.pos[0], ds, i, j0, n);
    for (int c = 0; c < n; c++)
        want[pos1[b * T + i] - pos1[b * T + j0 + c]] += ds[c];
    for (int d = 0; d < T; d++)
        assert_true(G[d] == want[d]);
    memset(G, 0, sizeof G);
    bk_score_table_grad(G, NULL, ds, i, j0, n); /* token index: G[i - j] */
    for (int d = 0; d < T; d++)
        assert_true(G[d] == (d >= i - j0 - n + 1 && d <= i - j0 ? (double)ds[i - j0 - d] : 0.0));
    /* the grid: dF sums dS (1 - w) at g and dS w at g + 1 over the pairs; a finite difference of the score
     * along F[g] gives the same weights */
    double dF[P], dphi[T], drs = 0.0;
    memset(dF, 0, sizeof dF), memset(dphi, 0, sizeof dphi);
    bk_score_grid_grad(dF, dphi, &drs, &hv, ds, i, j0, n);
    double wantF[P] = {0};
    for (int c = 0; c < n; c++) {
        float w;
        const int32_t g = bk_score_cell(&t, i, j0 + c, &w);
        assert_true(g >= 0 && g <= P - 2);
        assert_true(w >= 0.0f && w <= 1.0f);
        wantF[g] += (double)ds[c] * (1.0 - (double)w);
        wantF[g + 1] += (double)ds[c] * (double)w;
    }
    double total = 0.0, total_ds = 0.0;
    for (int g = 0; g < P; g++) {
        assert_true(fabs(dF[g] - wantF[g]) <= 1e-12);
        total += dF[g];
    }
    for (int c = 0; c < n; c++)
        total_ds += ds[c];
    assert_true(fabs(total - total_ds) <= 1e-9); /* the weights of each pair sum to 1 */
    for (int d = 0; d < T; d++)
        if (d < i - j0 - n + 1 || d > i - j0)
            assert_true(dphi[d] == 0.0); /* only the distances the run read */
    assert_true(isfinite(drs));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_matches_one_and_formula),
        cmocka_unit_test(head_lists_streams_in_order),
        cmocka_unit_test(distance_outside_is_nan),
        cmocka_unit_test(tiles_agree_with_pairs),
        cmocka_unit_test(call_terms_normalise_mask),
        cmocka_unit_test(gradients_go_where_terms_were_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
