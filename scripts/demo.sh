#!/usr/bin/env bash
# The main job, on a fresh machine: install what is missing, build, list the plugins (alibi and the
# out-of-tree example, built against the installed SDK), train a small ALiBi language model on the
# C headers under /usr/include (present wherever a C compiler is), and evaluate it at 1x-8x its
# training length. A few minutes on 2 cores.
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
./build/biaskit bias examples/demo_alibi.toml --length 8
./build/biaskit train examples/demo_alibi.toml --plain
./build/biaskit eval runs/demo_alibi/checkpoint.safetensors --lengths 128,256,512,1024
