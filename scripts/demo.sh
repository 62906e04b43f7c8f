#!/usr/bin/env bash
# The main job, on a fresh machine: install what is missing, build, install the SDK into build/sdk-prefix,
# build the out-of-tree example plugin against that installed SDK, list every plugin found (alibi and
# the example) and print ALiBi's per-head distance tables for the example experiment.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
prefix=$PWD/build/sdk-prefix
cmake --install build --prefix "$prefix" >/dev/null
cmake -S examples/plugin_gaussian -B build/plugin_gaussian -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/plugin_gaussian >/dev/null
export BIASKIT_PLUGIN_PATH=$PWD/build/plugin_gaussian
./build/biaskit --version
./build/biaskit plugins
./build/biaskit bias examples/plugin_gaussian/gaussian.toml --length 6
./build/biaskit bias examples/alibi.toml --length 64
