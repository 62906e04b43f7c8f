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

bk_reopen_request bk_cli_reopen_request(const bk_args *args, bk_reopen_purpose purpose, const char **sets_buf,
                                        size_t cap)
{
    _Static_assert(BK_ARGS_MAX <= BK_REOPEN_MAX_SETS, "every --set of a command line fits a reopening request");
    bk_reopen_request r = {purpose, sets_buf, (int)bk_args_all(args, "set", sets_buf, cap),
                           bk_args_get(args, "strict") != NULL, bk_args_get(args, "no-verify") != NULL};
    bk_cli_plugin_strictness(r.strict);
    return r;
}

void bk_session_close(bk_session *s)
{
    bk_terms_free(&s->terms); /* instances go before the plugins' code is unloaded */
    bk_registry_free(&s->reg);
    bk_experiment_free(&s->exp);
}
