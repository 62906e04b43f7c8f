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
    if (n <= 0)
        return err->code;
    /* shift the message right and put the prefix in front, truncating the end if it must */
    size_t plen = strlen(prefix), mlen = strlen(err->message), cap = sizeof err->message - 1;
    if (plen > cap)
        plen = cap;
    if (plen + mlen > cap)
        mlen = cap - plen;
    memmove(err->message + plen, err->message, mlen);
    memcpy(err->message, prefix, plen);
    err->message[plen + mlen] = '\0';
    return err->code;
}

void bk_copy_text(char *dst, size_t size, const char *src)
{
    if (!size)
        return;
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void bk_error_clear(bk_error *err)
{
    if (err) {
        err->code = BK_OK;
        err->message[0] = '\0';
    }
}

int bk_append(char *text, size_t size, size_t *at, bk_error *err, const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(text + *at, *at < size ? size - *at : 0, fmt, ap);
    va_end(ap);
    if (n < 0 || *at + (size_t)n >= size)
        return bk_fail(err, BK_ERR_INVALID, "%s is longer than %zu bytes", what, size);
    *at += (size_t)n;
    return BK_OK;
}
