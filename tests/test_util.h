/* Shared by the cmocka tests: assert that an error happened and that its message says what it must. */
#ifndef BK_TEST_UTIL_H
#define BK_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* Fails the test, printing the message, unless `message` contains `needle`. */
#define assert_message_has(message, needle)                                                          \
    do {                                                                                             \
        if (!strstr((message), (needle)))                                                            \
            fail_msg("message does not contain \"%s\":\n    %s", (needle), (message));               \
    } while (0)

#endif
