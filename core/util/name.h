/* The names a user gives that end up in files, tables and command lines (a sweep's variant and corpus
 * names, a [[term]]'s name): 1 to `max` characters of BK_NAME_CHARS, not starting with '.', '-' or '+'
 * (BK_NAME_FIRST), so that a name is a file name, an argument, a CSV cell (never read as a formula), a
 * markdown cell and a checkpoint key as it is. */
#ifndef BK_NAME_H
#define BK_NAME_H

#include <string.h>

#define BK_NAME_CHARS "A-Z a-z 0-9 _ - . +"
#define BK_NAME_FIRST "not starting with '.', '-' or '+'"

static inline int bk_name_valid(const char *s, size_t max)
{
    if (!s || !*s || *s == '.' || *s == '-' || *s == '+' || strlen(s) > max)
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '-' || *c == '.' || *c == '+'))
            return 0;
    return 1;
}

#endif
