/* The fuzz targets' common part: libFuzzer's entry point, and a memfd holding the input for the
 * readers that take a path (bk_safetensors_open, bk_data_load). Each target is built two ways
 * (fuzz/CMakeLists.txt): with clang's -fsanitize=fuzzer (BIASKIT_FUZZ=ON), and with replay.c as
 * main in every build, so the seed and crash corpora under fuzz/corpus/ run as ordinary tests. */
#ifndef BK_FUZZ_H
#define BK_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Replaces the contents of this process's scratch memfd with data[size] and returns its path,
 * "/proc/self/fd/N" (a regular file for stat and fopen); aborts when the kernel refuses, since a
 * fuzzer that cannot feed its target would report nothing. */
const char *bk_fuzz_file(const uint8_t *data, size_t size);

#endif
