#include "error.h"

#include <stdio.h>
#include <string.h>

int bk_vfail(bk_error *err, int code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
    }
    return code;
}

int bk_fail(bk_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bk_vfail(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int bk_error_prefix(bk_error *err, const char *fmt, ...)
{
    if (!err)
        return BK_ERR_INTERNAL;
    char prefix[BK_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n < 0)
        return err->code;
    char joined[BK_ERROR_MESSAGE_MAX];
    snprintf(joined, sizeof joined, "%s%s", prefix, err->message);
    memcpy(err->message, joined, sizeof joined);
    return err->code;
}

void bk_error_clear(bk_error *err)
{
    if (err) {
        err->code = BK_OK;
        err->message[0] = '\0';
    }
}
