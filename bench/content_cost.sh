#!/usr/bin/env bash
# What content-dependent positions cost on the CPU (docs/abi2.md): training tokens/s and evaluation
# tokens/s at EVAL_LENGTH of the same model with no positional term (NoPE), ALiBi, the Forgetting
# Transformer's gate (fox: a d_model x heads product per layer and token, and B x H x T floats beside the
# attention) and CoPE (cope: a sigmoid per visible pair and a scan per query row in the attention, again
# with a second q.k product in the backward). The model is the demo's (4 layers, 128 channels, 4 heads,
# bytes, 16 x 128 tokens per step); each is trained STEPS steps (the speed does not depend on how well) and
# its checkpoint evaluated (timed with its start-up), the models interleaved, best of REPEATS each.
#
#   bash bench/content_cost.sh              # about 5 minutes on 2 cores
#
# Environment: BUILD_DIR (./build), DATA (/usr/include), STEPS (30), REPEATS (2), EVAL_LENGTH (1024),
# TOKENS (16384).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DATA=${DATA:-/usr/include}
STEPS=${STEPS:-30}
REPEATS=${REPEATS:-2}
EVAL_LENGTH=${EVAL_LENGTH:-1024}
TOKENS=${TOKENS:-16384}
bk=$(realpath "$BUILD_DIR/biaskit")
data=$(realpath "$DATA")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

experiment() { # experiment NAME TERM_TEXT
    cat > "$work/$1.toml" <<TOML
[model]
layers = 4
heads = 4
dim = 128
vocab = 256
[train]
length = 128
batch = 16
steps = $STEPS
lr = 2e-3
warmup = 10
eval_every = 0
log_every = 1000
[data]
format = "text"
paths = ["$data"]
extensions = [".h", ".txt"]
max_bytes = 4000000
$2
TOML
}
experiment nope ""
experiment alibi $'[[term]]\nplugin = "alibi"'
experiment fox $'[[term]]\nplugin = "fox"'
experiment cope $'[[term]]\nplugin = "cope"'

# interleaved: every repeat trains and evaluates each model once, so that a slow spell of a shared machine
# falls on all of them alike; the best of the repeats is kept
declare -A train_rate eval_rate
models="nope alibi fox cope"
for model in $models; do train_rate[$model]=0 eval_rate[$model]=0; done
for r in $(seq "$REPEATS"); do
    for model in $models; do
        out=$("$bk" train "$work/$model.toml" --out "$work/$model-$r" 2>&1)
        rate=$(sed -n 's/^done: .*(\([0-9]*\) tokens\/s).*/\1/p' <<<"$out")
        [ "$rate" -gt "${train_rate[$model]}" ] && train_rate[$model]=$rate
        start=$(date +%s.%N)
        "$bk" eval "$work/$model-$r/checkpoint.safetensors" --lengths "$EVAL_LENGTH" --tokens "$TOKENS" \
            --json "$work/eval.json" > /dev/null
        end=$(date +%s.%N)
        scored=$(python3 -c "import json; print(json.load(open('$work/eval.json'))['results'][0]['tokens'])")
        rate=$(python3 -c "print(int($scored / ($end - $start)))")
        [ "$rate" -gt "${eval_rate[$model]}" ] && eval_rate[$model]=$rate
    done
done
echo "| model | training tokens/s | vs NoPE | evaluation tokens/s at $EVAL_LENGTH | vs NoPE |"
echo "|:--|--:|--:|--:|--:|"
for model in $models; do
    echo "| $model | ${train_rate[$model]} | $(python3 -c "print(f'{${train_rate[$model]} / ${train_rate[nope]}:.2f}')") |" \
         "${eval_rate[$model]} | $(python3 -c "print(f'{${eval_rate[$model]} / ${eval_rate[nope]}:.2f}')") |"
done
