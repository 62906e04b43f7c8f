#!/usr/bin/env bash
# The test suite, on a fresh machine: install what is missing, build with warnings as errors (CUDA
# code included when nvcc is present), run every test with ctest. GPU tests report "skipped" when
# no GPU answers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
scripts/build.sh -DBIASKIT_WERROR=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)"
