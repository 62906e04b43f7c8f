/* How a number is shown to a person (perplexities in tables and logs): fixed-point with `decimals`
 * places below BK_NUMBER_FIXED_MAX, else in exponent form ("1.23e+118"), so that a diverged run's
 * perplexity is not a 118-digit number. Files for programs (CSV, JSON) keep their own formats. */
#ifndef BK_NUMBER_H
#define BK_NUMBER_H

#include <math.h>
#include <stdio.h>

#define BK_NUMBER_FIXED_MAX 1e6

static inline const char *bk_number_text(double v, int decimals, char *buf, size_t size)
{
    if (isfinite(v) && fabs(v) >= BK_NUMBER_FIXED_MAX)
        snprintf(buf, size, "%.3g", v);
    else
        snprintf(buf, size, "%.*f", decimals, v);
    return buf;
}

#endif
