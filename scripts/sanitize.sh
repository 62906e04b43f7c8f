#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included):
# builds the engine, every plugin and every test with -DBIASKIT_SANITIZE=ON -DBIASKIT_CUDA=OFF into
# ${BUILD_DIR:-build-asan}, then runs every ctest test -- the shell-script tests (test_cli,
# test_examples, test_install) and `biaskit check`, which forks, included. Any report fails the test
# that made it: -fno-sanitize-recover=all makes UBSan fatal and ASan exits non-zero by default.
# Extra arguments go to ctest (e.g. -R test_data). Built without MPI (Open MPI's own allocations would
# be reported as leaks): the multi-process test runs in the other stages; here test_cli checks that a
# build without MPI refuses to be one of N processes.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-asan}
scripts/setup.sh --tests
BUILD_DIR=$build scripts/build.sh -DBIASKIT_SANITIZE=ON -DBIASKIT_CUDA=OFF -DBIASKIT_WERROR=ON -DBIASKIT_MPI=OFF
# detect_leaks: LSan at exit; abort_on_error=0 so that a report is an exit code ctest sees, not a core.
# Only third-party leaks are suppressed, each with its reason (scripts/lsan.supp).
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
