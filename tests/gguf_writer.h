/* A little GGUF writer for the tests that build files byte by byte (test_gguf.c, test_import.c):
 * little-endian numbers, GGUF strings (u64 length + bytes), padding to the alignment. */
#ifndef BK_TEST_GGUF_WRITER_H
#define BK_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static inline void put(buf *b, const void *x, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}

static inline void u32(buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static inline void u64(buf *b, uint64_t v)
{
    u32(b, (uint32_t)v);
    u32(b, (uint32_t)(v >> 32));
}

static inline void str(buf *b, const char *s)
{
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

static inline void pad_to(buf *b, size_t align)
{
    static const uint8_t zero[64] = {0};
    while (b->n % align)
        put(b, zero, 1);
}

#endif
