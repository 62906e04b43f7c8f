#include "model/views.h"

#include <string.h>

size_t bk_views_scratch_floats(int B, int T, int C, int H, int backward)
{
    const size_t BT = (size_t)B * (size_t)T;
    /* the packed q, k, v and a pass's output and lse; backward: the pass's dO and its gradients too */
    return BT * (size_t)(backward ? 8 * C : 4 * C) + BT * (size_t)H;
}

/* X (B, T - lo, 3C): row t = q of token t + lo, k and v of token t; then rotated by view v. */
static int pack(bk_backend *be, const bk_views *vw, int v, float *X, const float *qkv, int B, int T, int C, int H,
                bk_error *err)
{
    const int lo = vw->lo[v], rows = T - lo;
    const size_t C3 = 3 * (size_t)C;
    int rc = BK_OK;
    for (int b = 0; b < B && !rc; b++) {
        float *x = X + (size_t)b * rows * C3;
        const float *src = qkv + (size_t)b * T * C3;
        if (!(rc = be->copy_rows(be, x, C3, src + (size_t)lo * C3, C3, (size_t)rows, (size_t)C, 0, err)))
            rc = be->copy_rows(be, x + C, C3, src + C, C3, (size_t)rows, 2 * (size_t)C, 0, err);
    }
    return rc ? rc : be->rotary(be, X, &vw->rot[v], B, rows, C, H, 1.0f, err);
}

/* The pass of view v sees a window of hi - lo keys of its shifted rows (none when unbounded). */
static bk_attention_bias pass_bias(const bk_views *vw, int v)
{
    bk_attention_bias ab;
    memset(&ab, 0, sizeof ab);
    ab.window = vw->hi[v] ? vw->hi[v] - vw->lo[v] : 0;
    return ab;
}

int bk_views_forward(bk_backend *be, const bk_views *vw, float *out, float *lse, const float *qkv, float *scratch,
                     int B, int T, int C, int H, bk_error *err)
{
    if (vw->n < 1 || vw->lo[0] != 0)
        return bk_fail(err, BK_ERR_INVALID, "position views: %d views, the first from distance %d; expected views "
                                            "from distance 0",
                       vw->n, vw->n > 0 ? (int)vw->lo[0] : -1);
    const size_t BT = (size_t)B * T;
    float *X = scratch, *O = X + 3 * BT * C, *L = O + BT * C;
    int rc = BK_OK;
    for (int v = 0; v < vw->n && !rc; v++) {
        const int rows = T - vw->lo[v];
        if (rows <= 0)
            break; /* this view and those after it own no pair of so short a sequence */
        const bk_attention_bias ab = pass_bias(vw, v);
        if ((rc = pack(be, vw, v, X, qkv, B, T, C, H, err)))
            break;
        if (v == 0)
            rc = be->attention_lse_forward(be, out, lse, X, &ab, B, T, C, H, err);
        else if (!(rc = be->attention_lse_forward(be, O, L, X, &ab, B, rows, C, H, err)))
            rc = be->attention_merge(be, out, lse, O, L, B, T, vw->lo[v], C, H, err);
    }
    return rc ? bk_error_prefix(err, "position views: ") : BK_OK;
}

int bk_views_backward(bk_backend *be, const bk_views *vw, float *dqkv, const float *dout, const float *qkv,
                      const float *out, const float *lse, float *scratch, int B, int T, int C, int H, bk_error *err)
{
    const size_t BT = (size_t)B * T, C3 = 3 * (size_t)C;
    float *X = scratch, *O = X + 3 * BT * C, *L = O + BT * C, *dO = L + BT * H, *dX = dO + BT * C;
    int rc = BK_OK;
    for (int v = 0; v < vw->n && !rc; v++) {
        const int lo = vw->lo[v], rows = T - lo;
        if (rows <= 0)
            break;
        const bk_attention_bias ab = pass_bias(vw, v);
        if ((rc = pack(be, vw, v, X, qkv, B, T, C, H, err)))
            break;
        const float *o = out, *l = lse, *g = dout;
        if (lo > 0) { /* the rows lo .. T - 1 of the merged output, its lse and dO, packed */
            if ((rc = be->copy_rows(be, O, (size_t)rows * C, out + (size_t)lo * C, (size_t)T * C, (size_t)B,
                                    (size_t)rows * C, 0, err)) ||
                (rc = be->copy_rows(be, dO, (size_t)rows * C, dout + (size_t)lo * C, (size_t)T * C, (size_t)B,
                                    (size_t)rows * C, 0, err)) ||
                (rc = be->copy_rows(be, L, (size_t)rows, lse + lo, (size_t)T, (size_t)B * H, (size_t)rows, 0, err)))
                break;
            o = O, l = L, g = dO;
        }
        if ((rc = be->zero(be, dX, (size_t)B * rows * C3 * sizeof(float), err)) ||
            (rc = be->attention_lse_backward(be, dX, g, X, o, l, &ab, B, rows, C, H, err)) ||
            (rc = be->rotary(be, dX, &vw->rot[v], B, rows, C, H, -1.0f, err)))
            break;
        for (int b = 0; b < B && !rc; b++) { /* q's rows back to tokens t + lo, k's and v's to tokens t */
            const float *x = dX + (size_t)b * rows * C3;
            float *dst = dqkv + (size_t)b * T * C3;
            if (!(rc = be->copy_rows(be, dst + (size_t)lo * C3, C3, x, C3, (size_t)rows, (size_t)C, 1, err)))
                rc = be->copy_rows(be, dst + C, C3, x + C, C3, (size_t)rows, 2 * (size_t)C, 1, err);
        }
    }
    return rc ? bk_error_prefix(err, "position views (backward): ") : BK_OK;
}
