#!/usr/bin/env bash
# Misbehaving plugins during training, end to end: a tiny model trains with the
# misbehave test plugin (tests/plugins/misbehave.c), a checkpoint every step, and the plugin fails at
# step 3. Each case checks the exit status, that the message names the plugin, the layer and the
# step, and that the step-2 checkpoint is still on disk and loads (eval, and resume).
# usage: test_misbehave.sh <biaskit binary> <test plugin dir>
set -u
bk=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") testplugins=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0 passed=0
ulimit -c 0 # the crash cases dump no core

fail() {
    echo "FAIL: $1"
    [ -n "${2:-}" ] && echo "$2" | head -30 | sed 's/^/    /'
    failures=$((failures + 1))
}
ok() {
    echo "ok: $1"
    passed=$((passed + 1))
}

# A corpus of some 20 kB of text.
mkdir -p "$work/corpus"
for i in $(seq 1 400); do
    echo "static int value_$i = $i; /* line $i of a small corpus for the misbehave test */"
done >"$work/corpus/a.h"

cat >"$work/exp.toml" <<EOF
[model]
layers = 4
heads = 2
dim = 16
[train]
length = 16
batch = 2
steps = 5
warmup = 1
log_every = 1
eval_every = 0
eval_batches = 1
checkpoint_every = 1
[data]
paths = ["corpus"]
[run]
threads = 1
[[term]]
plugin = "$testplugins/biaskit_misbehave.so"
EOF

# case NAME EXPECTED_EXIT PATTERN [--set ...]: trains into $work/NAME, checks the exit status and that
# the output matches the extended regular expression PATTERN.
case_() {
    local name=$1 want=$2 pattern=$3
    shift 3
    local out rc
    out=$("$bk" train "$work/exp.toml" --out "$work/$name" --plain "$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pattern" <<<"$out"; then
        fail "$name (exit $rc, expected $want; pattern: $pattern)" "$out"
        return 1
    fi
    ok "$name"
}

# The step-2 checkpoint of run NAME loads: eval reads it, and a resumed run starts at step 2.
checkpoint_kept() {
    local name=$1 ckpt=$work/$1/checkpoint.safetensors out
    if ! out=$("$bk" eval "$ckpt" --lengths 16 --tokens 2000 2>&1); then
        fail "$name: eval of the last checkpoint" "$out"
        return
    fi
    if ! out=$("$bk" train --resume "$ckpt" --set term.0.failure=none --stop-after 1 --plain 2>&1) ||
        ! grep -q "resuming from .* at step 2$" <<<"$out"; then
        fail "$name: the checkpoint holds step 2 and resumes" "$out"
        return
    fi
    ok "$name: the step-2 checkpoint loads"
}

term="term 'misbehave' \(plugin misbehave, [^)]*biaskit_misbehave\.so\)"
kept="; the last checkpoint, [^ ]*/checkpoint\.safetensors, holds step 2$"

case_ nan_table 1 "$term at step 3: host table has a non-finite value nan at head 0, distance 1$kept" \
    --set 'term.0.failure="nan_table"' && checkpoint_kept nan_table

case_ inf_table 1 "$term at layer 2, step 3: host table has a non-finite value -inf at head 1, distance 15$kept" \
    --set 'term.0.failure="inf_table"' --set term.0.per_layer=true --set term.0.layer=2 && checkpoint_kept inf_table

case_ table_error 1 "$term at step 3: table\(\) failed: misbehaving on purpose: table\(\) fails at step 3$kept" \
    --set 'term.0.failure="table_error"' && checkpoint_kept table_error

case_ backward_error 1 "$term at layer 1, step 3: table_backward\(\) failed: misbehaving on purpose: table_backward\(\) fails at step 3, layer 1$kept" \
    --set 'term.0.failure="backward_error"' --set term.0.layer=1 && checkpoint_kept backward_error

case_ nan_grad 1 "step 3: the loss is [0-9.]+ and the gradient norm is nan; $term at layer 2, step 3: table_backward\(\) gave a non-finite gradient nan for parameter 0 of 2 from a finite dL/dT; stopped .*$kept" \
    --set 'term.0.failure="nan_grad"' --set term.0.layer=2 && checkpoint_kept nan_grad

# a finite but exploding gradient is clipped by [train] grad_clip; the jump is named, the run goes on
case_ huge_grad 0 "step 3: warning: gradient norm 4e\+30 is [0-9.e+]+ times its running mean [0-9.]+ \(largest: term\.misbehave\.theta, 4e\+30\); clipped to \[train\] grad_clip" \
    --set 'term.0.failure="huge_grad"' --set term.0.steps=1
if grep -q '"step": 5, "loss": [0-9]' "$work/huge_grad/metrics.jsonl" 2>/dev/null; then
    ok "huge_grad: training went on with finite losses"
else
    fail "huge_grad: training went on with finite losses" "$(cat "$work/huge_grad/metrics.jsonl" 2>&1)"
fi

# [train] nonfinite = "skip": the step's update is dropped and logged; the run goes on
case_ skip_once 0 "step 3: skipped, not finite: the loss is [0-9.]+ and the gradient norm is nan; $term at layer 3, step 3: .*1 in a row" \
    --set 'term.0.failure="nan_grad"' --set term.0.steps=1 --set 'train.nonfinite="skip"'
if grep -q '^{"step": 3, "skipped": "nonfinite", "loss": [0-9.]*, "lr": [0-9.e-]*, "grad_norm": null' "$work/skip_once/metrics.jsonl" &&
    grep -q '^{"step": 5, "loss": [0-9]' "$work/skip_once/metrics.jsonl"; then
    ok "skip_once: metrics.jsonl records the skipped step, training went on"
else
    fail "skip_once: metrics.jsonl records the skipped step, training went on" "$(cat "$work/skip_once/metrics.jsonl" 2>&1)"
fi
# ... and stops after 10 skipped steps in a row, keeping the checkpoint of the last step before them
case_ skip_forever 1 "step 12: the loss .*; stopped after 10 steps in a row skipped \(\[train\] nonfinite = \"skip\"\); the last checkpoint, [^ ]*, holds step 11$" \
    --set 'term.0.failure="nan_grad"' --set 'train.nonfinite="skip"' --set train.steps=20

# A crash inside a plugin: one line naming the plugin call, then the process dies of the signal.
case_ segfault_table 139 "crashed with signal 11 \(SIGSEGV, segmentation fault\) inside plugin misbehave \(term 'misbehave', table\(\), step 3\)$kept" \
    --set 'term.0.failure="segfault_table"' && checkpoint_kept segfault_table
case_ segfault_backward 139 "crashed with signal 11 \(SIGSEGV, segmentation fault\) inside plugin misbehave \(term 'misbehave', table_backward\(\), layer 1, step 3\)$kept" \
    --set 'term.0.failure="segfault_backward"' --set term.0.layer=1 && checkpoint_kept segfault_backward
case_ segfault_per_layer 139 "inside plugin misbehave \(term 'misbehave', table\(\), layer 3, step 3\)$kept" \
    --set 'term.0.failure="segfault_table"' --set term.0.per_layer=true --set term.0.layer=3

# A failure at the very first step: no checkpoint was written, and the message says so.
case_ first_step 1 "$term at step 1: host table has a non-finite value nan .*; no checkpoint was written in this run$" \
    --set 'term.0.failure="nan_table"' --set term.0.at_step=1
case_ first_step_crash 139 "inside plugin misbehave \(term 'misbehave', table\(\), step 1\); no checkpoint was written in this run$" \
    --set 'term.0.failure="segfault_table"' --set term.0.at_step=1

# Without a failure the plugin trains like any other.
case_ none 0 "done: 5 steps" --set 'term.0.failure="none"'

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
