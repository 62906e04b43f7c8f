#include "cli/commands.h"

#include "util/path.h"

#include <string.h>

int bk_session_open(bk_session *s, const char *path, const char *const *overrides, size_t n_overrides,
                    bk_error *err)
{
    memset(s, 0, sizeof *s);
    int rc = bk_path_dir_of(path, s->dir, sizeof s->dir, err);
    if (rc || (rc = bk_experiment_load(path, overrides, n_overrides, &s->exp, err)))
        return rc;
    if ((rc = bk_registry_init(&s->reg, err))) {
        bk_experiment_free(&s->exp);
        return rc;
    }
    s->reg.relative_to = s->dir;
    if ((rc = bk_terms_create(&s->terms, &s->exp, &s->reg, err)))
        bk_session_close(s);
    return rc;
}

void bk_cli_plugin_strictness(int strict)
{
    bk_plugin_set_writable_policy(strict ? BK_WRITABLE_REFUSE : BK_WRITABLE_WARN);
}

void bk_session_close(bk_session *s)
{
    bk_terms_free(&s->terms); /* instances go before the plugins' code is unloaded */
    bk_registry_free(&s->reg);
    bk_experiment_free(&s->exp);
}
