#!/usr/bin/env bash
# Evaluation speed of a sliding-window model against the same model without the window (docs/abi2.md):
# `biaskit eval` tokens/s at 512 and 4096 tokens per chunk. With a window the attention computes only the
# keys a query sees (the window and the sinks), so its cost per token should not grow with the length;
# without one it grows linearly. Both models: examples/paper/base.toml's shape (2 layers, 64 channels,
# 4 heads, bytes), STEPS training steps at 64 tokens on DATA (speed does not depend on how well they are
# trained); the window model adds [[term]] window (WINDOW keys, SINKS sinks), the other has no term.
# Each eval reads TOKENS tokens (the chunks of one length), timed with its start-up (loading the
# checkpoint and the data), best of REPEATS.
#
#   bash bench/window_eval.sh                      # about a minute on 2 cores
#   DATA=corpora/prose/val.txt bash bench/window_eval.sh
#
# Environment: BUILD_DIR (./build), DATA (/usr/include), STEPS (60), WINDOW (32), SINKS (4),
# TOKENS (65536), REPEATS (3), LENGTHS ("512 4096").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DATA=${DATA:-/usr/include}
STEPS=${STEPS:-60}
WINDOW=${WINDOW:-32}
SINKS=${SINKS:-4}
TOKENS=${TOKENS:-65536}
REPEATS=${REPEATS:-3}
LENGTHS=${LENGTHS:-512 4096}
bk=$(realpath "$BUILD_DIR/biaskit")
data=$(realpath "$DATA")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

experiment() { # experiment NAME TERM_TEXT
    cat > "$work/$1.toml" <<TOML
[model]
layers = 2
heads = 4
dim = 64
vocab = 256
[train]
length = 64
batch = 16
steps = $STEPS
lr = 3e-3
warmup = 10
eval_every = 0
log_every = 1000
[data]
format = "text"
paths = ["$data"]
extensions = [".h", ".txt"]
max_bytes = 2000000
$2
TOML
    "$bk" train "$work/$1.toml" --out "$work/$1" > /dev/null 2>&1
}
experiment window "[[term]]
plugin = \"window\"
window = $WINDOW
sinks = $SINKS"
experiment nope ""

echo "| model | length | tokens | best tokens/s |"
echo "|:--|--:|--:|--:|"
for model in window nope; do
    for L in $LENGTHS; do
        best=0
        for _ in $(seq "$REPEATS"); do
            start=$(date +%s.%N)
            "$bk" eval "$work/$model/checkpoint.safetensors" --lengths "$L" --tokens "$TOKENS" \
                --json "$work/eval.json" > /dev/null
            end=$(date +%s.%N)
            scored=$(python3 -c "import json; print(json.load(open('$work/eval.json'))['results'][0]['tokens'])")
            rate=$(python3 -c "print(int($scored / ($end - $start)))")
            best=$((rate > best ? rate : best))
        done
        echo "| $model | $L | $scored | $best |"
    done
done
