/* The wall clock the engine times itself by: seconds on CLOCK_MONOTONIC (never set back). */
#ifndef BK_UTIL_CLOCK_H
#define BK_UTIL_CLOCK_H

#include <time.h>

static inline double bk_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
