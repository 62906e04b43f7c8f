/* Shared by the cmocka tests: assert that an error happened and that its message says what it must; read a
 * file whole. */
#ifndef BK_TEST_UTIL_H
#define BK_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Fails the test, printing the message, unless `message` contains `needle`. */
#define assert_message_has(message, needle)                                                          \
    do {                                                                                             \
        if (!strstr((message), (needle)))                                                            \
            fail_msg("message does not contain \"%s\":\n    %s", (needle), (message));               \
    } while (0)

/* The whole file at path, NUL-terminated (the caller frees it); fails the test when it cannot be read. */
static inline char *bk_test_read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

#endif
