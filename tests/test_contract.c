/* The capability contract (core/plugin/contract.h): one row per capability bit of plugin.h, the
 * validators' rules at their edges (what passes, the first value that fails and the phrase naming it),
 * and the SDK guide's capability table, which must be what `biaskit plugins --capabilities` prints. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "plugin/contract.h"
#include "model/bias_math.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" lacks \"%s\"", text, needle);
}

/* Every bit of plugin.h has exactly one row; the known bits are the rows that are not reserved. */
static void one_row_per_bit(void **state)
{
    (void)state;
    static const uint32_t bits[] = {BIASKIT_CAP_TABLE,      BIASKIT_CAP_SEGMENT, BIASKIT_CAP_EMBED,
                                    BIASKIT_CAP_ROTARY,     BIASKIT_CAP_WEIGHT,  BIASKIT_CAP_COORDINATE,
                                    BIASKIT_CAP_MASK,       BIASKIT_CAP_SCALE,   BIASKIT_CAP_CONTENT,
                                    BIASKIT_CAP_COUNT};
    size_t n;
    const bk_capability *rows = bk_capabilities(&n);
    assert_int_equal(n, sizeof bits / sizeof bits[0]);
    uint32_t seen = 0;
    for (size_t r = 0; r < n; r++) {
        assert_int_equal(rows[r].bit & seen, 0);
        seen |= rows[r].bit;
        assert_non_null(rows[r].name);
        assert_non_null(rows[r].summary);
        assert_int_equal(rows[r].reserved, rows[r].bit == BIASKIT_CAP_WEIGHT);
        if (!rows[r].reserved) {
            assert_non_null(rows[r].required[0].name);
            assert_non_null(rows[r].reads[0]);
        }
        for (int k = 0; k < BK_CAP_HOOKS && rows[r].required[k].name; k++)
            assert_non_null(rows[r].required_text[k]);
    }
    for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++)
        assert_true(seen & bits[b]);
    assert_int_equal(bk_capabilities_known(), seen & ~(uint32_t)BIASKIT_CAP_WEIGHT);
}

/* A hook counts only inside the descriptor's struct_size and when it is not NULL. */
static int fake_mask(const void *inst, const biaskit_context *ctx, biaskit_mask *out, biaskit_error *err)
{
    (void)inst, (void)ctx, (void)out, (void)err;
    return BIASKIT_OK;
}

static void hooks_inside_struct_size(void **state)
{
    (void)state;
    biaskit_plugin d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.mask = fake_mask;
    const bk_hook mask = {"mask", offsetof(biaskit_plugin, mask)}, scale = {"scale", offsetof(biaskit_plugin, scale)};
    assert_true(bk_hook_present(&d, &mask));
    assert_false(bk_hook_present(&d, &scale));
    d.struct_size = (uint32_t)offsetof(biaskit_plugin, mask); /* an older header: the field is not there */
    assert_false(bk_hook_present(&d, &mask));
}

static void points_and_count(void **state)
{
    (void)state;
    char why[320];
    assert_int_equal(bk_contract_points(2, why, sizeof why), BK_CONTRACT_OK);
    assert_int_equal(bk_contract_points(BK_CONTRACT_POINTS_MAX, why, sizeof why), BK_CONTRACT_OK);
    assert_int_equal(bk_contract_points(1, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "coordinate_points() returned 1, expected 2 .. 1048576 grid points of u in [0, 1]");
    assert_int_equal(bk_contract_points(BK_CONTRACT_POINTS_MAX + 1, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    biaskit_count c = {sizeof c, 129, 0.25f};
    assert_int_equal(bk_contract_count(&c, why, sizeof why), BK_CONTRACT_OK);
    c.pos_scale = NAN;
    assert_int_equal(bk_contract_count(&c, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "129 position vectors and pos_scale nan: expected 2 .. 1048576 vectors and a finite scale");
    c.pos_scale = 0.25f, c.points = 1;
    assert_int_equal(bk_contract_count(&c, why, sizeof why), BK_CONTRACT_BAD_VALUE);
}

static void coordinates(void **state)
{
    (void)state;
    char why[320];
    float phi[4] = {0.0f, 0.5f, 0.5f, 0.75f}, rscale[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    double top = -1;
    int32_t at = -1;
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 4, &top, &at, why, sizeof why), BK_CONTRACT_OK);
    assert_true(top == 0.75 && at == 3);
    phi[2] = 0.25f; /* decreases */
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 4, NULL, NULL, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "phi decreases: phi[2] = 0.25 < phi[1] = 0.5");
    phi[2] = NAN;
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 4, NULL, NULL, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "phi[2] = nan (expected finite and >= 0)");
    phi[2] = 0.5f, rscale[1] = -1.0f;
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 4, NULL, NULL, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "rscale[1] = -1 (expected finite and >= 0)");
    rscale[1] = 1.0f, rscale[3] = 2.0f; /* u(3, 3) = 1.5 */
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 4, NULL, NULL, why, sizeof why), BK_CONTRACT_OUT_OF_RANGE);
    has(why, "u(i = 3, d = 3) = phi[3] * rscale[3] = 1.5 (0.75 * 2) > 1 + 1e-05");
    /* a few ulps above 1 are the engine's slack */
    rscale[3] = (1.0f + BK_COORD_SLACK / 2) / 0.75f;
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 4, NULL, NULL, why, sizeof why), BK_CONTRACT_OK);
    /* only the rows given are read: R < D */
    rscale[3] = 2.0f;
    assert_int_equal(bk_contract_coordinate(phi, 4, rscale, 3, NULL, NULL, why, sizeof why), BK_CONTRACT_OK);
}

static void masks_steps_rotary(void **state)
{
    (void)state;
    char why[320];
    biaskit_mask m = {sizeof m, 1, 0, 0};
    assert_int_equal(bk_contract_mask(&m, why, sizeof why), BK_CONTRACT_OK);
    m.window = 0;
    assert_int_equal(bk_contract_mask(&m, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "window 0, sinks 0, distance_cap 0: expected window >= 1 (a query always sees itself");
    m.window = 4, m.sinks = -1;
    assert_int_equal(bk_contract_mask(&m, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    m.sinks = 0, m.distance_cap = -2;
    assert_int_equal(bk_contract_mask(&m, why, sizeof why), BK_CONTRACT_BAD_VALUE);

    assert_true(bk_contract_step_ok(0.0f) && bk_contract_step_ok(3.5f));
    assert_false(bk_contract_step_ok(-1e-30f) || bk_contract_step_ok(NAN) || bk_contract_step_ok(INFINITY));

    float f[3] = {1.0f, 0.5f, 0.25f};
    assert_int_equal(bk_contract_rotary(f, 3, 1.0f, why, sizeof why), BK_CONTRACT_OK);
    assert_int_equal(bk_contract_rotary(f, 3, 0.0f, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "the amplitude 0, expected a finite number > 0");
    assert_int_equal(bk_contract_rotary(f, 3, -1.0f, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    f[1] = INFINITY;
    assert_int_equal(bk_contract_rotary(f, 3, 1.0f, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "inverse frequency 1 = inf, expected a finite number");
    assert_int_equal(bk_contract_rotary(f, 1, 1.0f, why, sizeof why), BK_CONTRACT_OK); /* only `half` read */

    const float x[4] = {1.0f, 2.0f, NAN, 3.0f};
    assert_int_equal(bk_contract_first_nonfinite(x, 4), 2);
    assert_int_equal(bk_contract_first_nonfinite(x, 2), -1);
}

/* rotary_views(): the views tile [0, inf) in order, every position finite. */
static void rotary_views_tile(void **state)
{
    (void)state;
    char why[320];
    double q0[3] = {0, 1, 2}, k0[3] = {0, 1, 2}, q1[3] = {4, 4, 4}, k1[3] = {0, 0, 0};
    biaskit_rotary_view v[3] = {{0, 2, q0, k0}, {2, 0, q1, k1}, {0, 0, q0, k0}};
    assert_int_equal(bk_contract_rotary_views(v, 2, 3, why, sizeof why), BK_CONTRACT_OK);
    assert_int_equal(bk_contract_rotary_views(v, 0, 3, why, sizeof why), BK_CONTRACT_OK);
    assert_int_equal(bk_contract_rotary_views(v, 5, 3, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "5 views, expected 0 .. 4");
    v[1].min_distance = 3; /* a gap: distance 2 owned by no view */
    assert_int_equal(bk_contract_rotary_views(v, 2, 3, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "view 1 owns distances [3, 0) (0: unbounded), expected [2, ...)");
    v[1].min_distance = 2, v[0].max_distance = 0; /* the first unbounded, yet another follows */
    assert_int_equal(bk_contract_rotary_views(v, 2, 3, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "view 0 owns distances [0, 0)");
    v[0].max_distance = 2, v[1].max_distance = 5; /* the last bounded */
    assert_int_equal(bk_contract_rotary_views(v, 2, 3, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "view 1 owns distances [2, 5)");
    v[1].max_distance = 0, k1[2] = NAN;
    assert_int_equal(bk_contract_rotary_views(v, 2, 3, why, sizeof why), BK_CONTRACT_BAD_VALUE);
    has(why, "view 1: the key position of token 2 is nan, expected a finite number");
    assert_int_equal(bk_contract_rotary_views(v, 2, 2, why, sizeof why), BK_CONTRACT_OK); /* only `length` read */
}

/* The guide's table between its markers is what `biaskit plugins --capabilities` prints. */
static char *slurp(FILE *f)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[n] = '\0';
    return buf;
}

static void guide_table_is_the_contract(void **state)
{
    (void)state;
    FILE *f = popen(BK_TEST_BINARY_DIR "/biaskit plugins --capabilities", "r");
    assert_non_null(f);
    char *printed = slurp(f);
    assert_int_equal(pclose(f), 0);
    f = fopen(BK_TEST_SOURCE_DIR "/sdk/README.md", "r");
    assert_non_null(f);
    char *guide = slurp(f);
    fclose(f);
    const char *begin = strstr(guide, "<!-- capabilities: begin (biaskit plugins --capabilities) -->\n");
    const char *end = begin ? strstr(begin, "<!-- capabilities: end -->") : NULL;
    assert_non_null(begin);
    assert_non_null(end);
    begin = strchr(begin, '\n') + 1;
    const size_t n = (size_t)(end - begin);
    if (strlen(printed) != n || strncmp(printed, begin, n) != 0)
        fail_msg("sdk/README.md's capability table differs from `biaskit plugins --capabilities`; paste its output "
                 "between the markers:\n%s", printed);
    /* one line per row, plus the header and its rule */
    size_t rows_n, lines = 0;
    bk_capabilities(&rows_n);
    for (const char *p = printed; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, rows_n + 2);
    free(printed);
    free(guide);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_row_per_bit),         cmocka_unit_test(hooks_inside_struct_size),
        cmocka_unit_test(points_and_count),        cmocka_unit_test(coordinates),
        cmocka_unit_test(masks_steps_rotary),      cmocka_unit_test(guide_table_is_the_contract),
        cmocka_unit_test(rotary_views_tile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
