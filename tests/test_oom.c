/* An allocation that fails says what it was for: the backends' own messages name the backend, the
 * kind of memory and the size, and their callers put the buffer's name in front (bk_error_prefix).
 * "out of memory for 65536 bytes" alone, as an outside probe saw under `ulimit -v`, named nothing.
 *
 * Sizes of 2^48 bytes fail everywhere, whatever the overcommit policy: they exceed x86-64's 47-bit
 * user address space. Under AddressSanitizer (scripts/sanitize.sh) the allocator must return NULL for
 * them instead of aborting: __asan_default_options below says so. */
#include "test_util.h"

#include "model/backend.h"
#include "train/adamw.h"

#include <stdlib.h>

/* Read by AddressSanitizer at start-up (when the test is built with it); ASAN_OPTIONS adds to it. */
const char *__asan_default_options(void) __attribute__((used));
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

#define HUGE_BYTES ((size_t)1 << 48)

static void backend_alloc_says_what_and_where(bk_backend *be, const char *needle)
{
    void *p = (void *)&p;
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(be->alloc(be, &p, HUGE_BYTES, &err), BK_ERR_NOMEM);
    assert_null(p);
    assert_message_has(err.message, needle);
    assert_message_has(err.message, "out of memory for 281474976710656 bytes (268435456.0 MiB)");
}

static void cpu_alloc_names_the_backend(void **state)
{
    (void)state;
    backend_alloc_says_what_and_where(bk_backend_cpu(), "cpu backend: out of memory");
}

static void emulated_alloc_names_the_device(void **state)
{
    (void)state;
    bk_backend *be = NULL;
    bk_error err;
    assert_int_equal(bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    backend_alloc_says_what_and_where(be, "emulated device: out of memory");
    bk_backend_destroy(be);
}

/* The AdamW moments of a tensor (train/adamw.c) on a backend: their failure passed the backend's
 * message on alone ("out of memory for 65536 bytes" is a tensor of 16,384 values). */
static void adamw_moments_name_the_tensor(void **state)
{
    (void)state;
    bk_backend *emulated = NULL;
    bk_error err;
    assert_int_equal(bk_backend_emulated_create(&emulated, BK_MATMUL_FP32, &err), BK_OK);
    bk_backend *backends[2] = {bk_backend_cpu(), emulated};
    const char *needles[2] = {"cpu backend: out of memory for", "emulated device: out of memory for"};
    for (int i = 0; i < 2; i++) {
        bk_adamw opt = {0};
        float param = 0.0f, grad = 0.0f;
        bk_error_clear(&err);
        assert_int_equal(bk_adamw_add_on(&opt, backends[i], "model.h.0.mlp.fc.weight", &param, &grad, NULL,
                                         HUGE_BYTES / sizeof(float), 1, &err),
                         BK_ERR_NOMEM);
        assert_message_has(err.message,
                           "the AdamW moments of 'model.h.0.mlp.fc.weight' (70368744177664 values) on the ");
        assert_message_has(err.message, needles[i]);
        assert_int_equal(opt.n_groups, 0);
        bk_adamw_free(&opt);
    }
    bk_backend_destroy(emulated);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_alloc_names_the_backend),
        cmocka_unit_test(emulated_alloc_names_the_device),
        cmocka_unit_test(adamw_moments_name_the_tensor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
