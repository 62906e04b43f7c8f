#!/usr/bin/env bash
# Numerical faults (issue of the fourth reliability round): a state with NaN or inf is never checkpointed
# and the message names the last finite checkpoint; eval, generate and passkey refuse a model whose loss or
# logits are not finite (exit != 0, no number made up); a loss that rises far above its running median is a
# warning naming the step; a diverged perplexity prints readably. And what loads plugins: a world-writable
# plugin file or directory is warned about by every command and refused under --strict; biaskit check's
# limits count CPU time, so that a loaded machine does not fail a correct plugin.
# usage: test_reliability.sh <biaskit binary> <source dir>
set -u
bk=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
export OMP_NUM_THREADS=1

mkdir -p "$work/corpus"
head -c 20000 "$src/README.md" >"$work/corpus/text.txt"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 4\nwarmup = 1\nlog_every = 1\n[run]\nthreads = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "t5"\n' \
    >"$work/exp.toml"

# ---- eps = 0 with beta2 = 0: 0/0 in the update (a tensor whose gradient is 0) makes NaN weights a step
# before any forward reads them; that state is refused before the checkpoint, which keeps the last good one
check "a non-finite update is not checkpointed" 1 \
    "step 1: [0-9]+ parameters or AdamW moments are not finite after the update \(the first: term\.t5\.[a-z_]+\[[0-9]+\] = -?nan\), so it is not checkpointed; stopped .*; no checkpoint was written in this run" \
    "$bk" train "$work/exp.toml" --out "$work/nan" --set train.eps=0 --set train.beta2=0 --set train.checkpoint_every=1 --plain
check "... and no checkpoint file is there" 0 "^none$" bash -c "[ -e '$work/nan/checkpoint.safetensors' ] && echo there || echo none"
"$bk" train "$work/exp.toml" --out "$work/good" --set train.checkpoint_every=1 --set train.steps=2 --plain >/dev/null 2>&1 ||
    bad "fixture: a finite run"
cp "$work/good/checkpoint.safetensors" "$work/good.orig"
check "resumed into a non-finite update: the last checkpoint named holds finite step 2" 1 \
    "step 3: .* not checkpointed; stopped .*; the last checkpoint, $work/good/checkpoint.safetensors, holds step 2" \
    "$bk" train --resume "$work/good/checkpoint.safetensors" --set train.steps=4 --set train.eps=0 --set train.beta2=0 --plain
check "... which is unchanged" 0 "" cmp "$work/good/checkpoint.safetensors" "$work/good.orig"

# ---- a checkpoint whose weights hold a NaN (its checksums skipped with --no-verify): no result is made up
python3 - "$work/good/checkpoint.safetensors" "$work/nan.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
start = 8 + n + head["model.wte"]["data_offsets"][0]
data[start:start + 4 * 256] = struct.pack("<f", float("nan")) * 256  # the first rows of the embedding
open(sys.argv[2], "wb").write(data)
PY
check "eval refuses a non-finite loss" 1 "evaluation at length 16: the loss is -?nan: the model is not finite" \
    "$bk" eval "$work/nan.safetensors" --no-verify --lengths 16 --tokens 400
check "generate refuses non-finite logits" 1 "the model's logit of token 0 at position [0-9]+ \(sequence 0\) is -?nan" \
    "$bk" generate "$work/nan.safetensors" --no-verify --prompt "The " --tokens 4 --greedy
check "passkey refuses non-finite logits" 1 "the model's logit of token 0 .* is -?nan: the model is not finite" \
    "$bk" passkey "$work/nan.safetensors" --no-verify --lengths 128 --trials 1

# ---- a finite divergence: lr = 10 (inside [train]'s range) takes the loss from 5.5 to thousands
check "a loss 10x its running median is a warning naming the step" 0 \
    "step [0-9]+: warning: the loss [0-9.e+]+ is [0-9.e+]+ times its running median [0-9.]+ .*diverging" \
    "$bk" train "$work/exp.toml" --out "$work/div" --set term.0.plugin=alibi --set train.lr=10 --set train.steps=20 \
    --set model.dim=64 --set train.batch=4 --set train.length=64 --plain
check "... repeated above the done line" 0 "^warning: the loss rose above 10 times its running median" \
    "$bk" train "$work/exp.toml" --out "$work/div" --set term.0.plugin=alibi --set train.lr=10 --set train.steps=20 \
    --set model.dim=64 --set train.batch=4 --set train.length=64 --plain
check "a huge perplexity prints in exponent form" 0 "validation loss [0-9.]+ \(perplexity [0-9.]+e\+[0-9]+\)" \
    "$bk" train "$work/exp.toml" --out "$work/div" --set term.0.plugin=alibi --set train.lr=10 --set train.steps=20 \
    --set model.dim=64 --set train.batch=4 --set train.length=64 --plain
check "a healthy run gives no such warning" 0 "^0$" bash -c \
    "'$bk' train '$work/exp.toml' --out '$work/ok' --set term.0.plugin=alibi --plain 2>&1 | grep -c 'warning: the loss' || true"

# ---- a plugin file or directory that other users may write: every command that loads it warns, and
# --strict refuses it (before, only biaskit plugins said so)
so=$(dirname "$bk")/plugins/biaskit_alibi.so
if [ -f "$so" ]; then
    mkdir -p "$work/ww" && cp "$so" "$work/ww/" && chmod 0777 "$work/ww"
    sed 's|plugin = "t5"|plugin = "'"$work"'/ww/biaskit_alibi.so"|' "$work/exp.toml" >"$work/ww.toml"
    warn="warning: plugin file '$work/ww/biaskit_alibi.so': the directory '$work/ww' is writable by users other than its owner and group \(mode 0777\)"
    check "config warns of a world-writable plugin directory" 0 "$warn" "$bk" config "$work/ww.toml"
    check "train warns" 0 "$warn" "$bk" train "$work/ww.toml" --out "$work/wwrun" --set train.steps=1 --plain
    check "eval warns" 0 "$warn" "$bk" eval "$work/wwrun/checkpoint.safetensors" --lengths 16 --tokens 400
    check "bias warns" 0 "$warn" "$bk" bias "$work/ww.toml"
    check "... once per file" 0 "^1$" bash -c "'$bk' bias '$work/ww.toml' 2>&1 | grep -c 'is writable by users other'"
    refused="plugin file '$work/ww/biaskit_alibi.so': the directory '$work/ww' is writable by users other than its owner and group \(mode 0777\).*refused under --strict"
    check "config --strict refuses it" 1 "$refused" "$bk" config "$work/ww.toml" --strict
    check "train --strict refuses it" 1 "$refused" "$bk" train "$work/ww.toml" --out "$work/wwrun2" --strict --plain
    check "eval --strict refuses it" 1 "$refused" "$bk" eval "$work/wwrun/checkpoint.safetensors" --lengths 16 --strict
    check "passkey --strict refuses it" 1 "$refused" "$bk" passkey "$work/wwrun/checkpoint.safetensors" --lengths 128 --strict
    chmod 0755 "$work/ww" && chmod 0666 "$work/ww/biaskit_alibi.so"
    check "a world-writable plugin file is named too" 0 "the file '$work/ww/biaskit_alibi.so' is writable by users other" \
        "$bk" config "$work/ww.toml"
    chmod 0644 "$work/ww/biaskit_alibi.so"
    check "no warning once the permission is gone" 0 "^0$" bash -c "'$bk' config '$work/ww.toml' 2>&1 | grep -c 'writable by users' || true"
else
    bad "the built-in plugin $so is missing"
fi

# ---- biaskit check on a loaded machine: six busy loops share its one core, so each child gets a sixth or
# less of it on the clock; the limit counts CPU time, so a correct plugin still passes with --timeout 5
# (its long-range child computes 1-3 s, which takes 8-20 s on the clock so)
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
    loops=()
    for _ in 1 2 3 4 5 6; do taskset -c 0 sh -c 'while :; do :; done' & loops+=($!); done
    check "check under load: a correct plugin passes with --timeout 5" 0 "^[0-9]+ passed, 0 failed" \
        taskset -c 0 "$bk" check kerple --timeout 5
    kill "${loops[@]}" 2>/dev/null
    wait "${loops[@]}" 2>/dev/null
fi

echo "test_reliability: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
