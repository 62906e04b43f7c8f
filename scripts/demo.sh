#!/usr/bin/env bash
# The main job, on a fresh machine: install what is missing, build, list the plugins found, and print
# ALiBi's per-head distance tables for the example experiment.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/biaskit --version
./build/biaskit plugins
./build/biaskit bias examples/alibi.toml --length 64
