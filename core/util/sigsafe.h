/* Text building that is safe inside a signal handler (no stdio, no allocation, no locale): the crash
 * report of a training (core/train/train.c) and the plugin-call record it reads (core/bias/terms.c). */
#ifndef BK_SIGSAFE_H
#define BK_SIGSAFE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* Appends `text` to buf at `at`, stopping at size - 1; keeps buf terminated; returns the new end. */
static inline size_t bk_sigsafe_put(char *buf, size_t size, size_t at, const char *text)
{
    if (!size)
        return 0;
    for (; text && *text && at + 1 < size; text++)
        buf[at++] = *text;
    buf[at < size ? at : size - 1] = '\0';
    return at;
}

/* Appends v in decimal. */
static inline size_t bk_sigsafe_put_int(char *buf, size_t size, size_t at, int64_t v)
{
    char digits[24], text[24];
    int n = 0, k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do
        digits[n++] = (char)('0' + u % 10);
    while ((u /= 10) && n < 22);
    if (v < 0)
        text[k++] = '-';
    while (n)
        text[k++] = digits[--n];
    text[k] = '\0';
    return bk_sigsafe_put(buf, size, at, text);
}

/* A signal's name and meaning, "SIGSEGV, segmentation fault", for the signals a crash or a killed
 * child ends with; NULL for others. A static string: safe in a signal handler. */
static inline const char *bk_sigsafe_signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV, segmentation fault";
    case SIGBUS: return "SIGBUS, bus error";
    case SIGFPE: return "SIGFPE, arithmetic exception";
    case SIGILL: return "SIGILL, illegal instruction";
    case SIGABRT: return "SIGABRT, aborted";
    case SIGKILL: return "SIGKILL, killed";
    case SIGTERM: return "SIGTERM, terminated";
    case SIGINT: return "SIGINT, interrupted";
    case SIGHUP: return "SIGHUP, hangup";
    case SIGALRM: return "SIGALRM, alarm clock";
    case SIGPIPE: return "SIGPIPE, broken pipe";
    case SIGTRAP: return "SIGTRAP, trace trap";
    case SIGSYS: return "SIGSYS, bad system call";
    }
    return NULL;
}

#endif
