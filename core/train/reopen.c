/* Reopening a stored run (train/reopen.h). */
#include "train/reopen.h"


int bk_reopen_overrides(const bk_reopen_request *r, const char **out, int cap)
{
    int n = 0;
    if (r->purpose == BK_REOPEN_INSPECT && n < cap)
        out[n++] = "run.device=cpu";
    for (int i = 0; i < r->n_sets && n < cap; i++)
        out[n++] = r->sets[i];
    return n;
}

int bk_reopen(const char *path, const bk_reopen_request *r, bk_lm *lm, bk_adamw *opt, bk_train_state *st,
              bk_error *err)
{
    if (r->purpose == BK_REOPEN_RESUME && (!opt || r->no_verify))
        return bk_fail(err, BK_ERR_INTERNAL,
                       "resuming '%s': a resumed run needs its optimizer state and verifies every tensor (it would "
                       "write fresh checksums over what it read)",
                       path);
    if (r->purpose != BK_REOPEN_RESUME && opt)
        return bk_fail(err, BK_ERR_INTERNAL, "opening '%s' to read: the optimizer state is only for resuming", path);
    if (r->n_sets < 0 || r->n_sets > BK_REOPEN_MAX_SETS)
        return bk_fail(err, BK_ERR_USAGE, "opening '%s': %d overrides, at most %d", path, r->n_sets, BK_REOPEN_MAX_SETS);
    const char *sets[BK_REOPEN_MAX_SETS + 1];
    const int n = bk_reopen_overrides(r, sets, BK_REOPEN_MAX_SETS + 1);
    bk_checkpoint_options o = {sets, n, r->strict, NULL, NULL, r->purpose == BK_REOPEN_RESUME ? 0 : r->no_verify};
    bk_train_state ignored;
    return bk_checkpoint_load_ex(path, &o, lm, opt, st ? st : &ignored, err);
}
