#!/usr/bin/env bash
# Crash safety of training: kills a tiny training with SIGKILL at random moments (seeded), resumes it
# from its latest checkpoint each time until it finishes, and checks that
#   - after every kill the latest checkpoint loads (biaskit eval), or none was written yet;
#   - the final tensors are bit-identical to those of an uninterrupted run (the data section of the
#     safetensors file: metadata may differ);
#   - metrics.jsonl holds every step exactly once, with the uninterrupted run's losses.
# Kill times are uniform over half the length of an uninterrupted run, so a round (a run resumed until
# it finishes) takes a few kills; rounds go on until all kills are spent, and every round is compared.
# Exit 0 when every check passed.
#
# usage: scripts/crash-test.sh [--kills N] [--seed S] [--steps N] [--bin BIASKIT] [--keep]
#   --kills N   SIGKILLs in all (default 20)
#   --seed S    seed of the kill times (default 1)
#   --steps N   optimizer steps of the run (default 40); a checkpoint after every step
#   --bin PATH  the biaskit binary (default build/biaskit)
#   --keep      keep the work directory (printed)
set -euo pipefail
export LC_ALL=C # EPOCHREALTIME with a '.'
src=$(cd "$(dirname "$0")/.." && pwd)
kills=20 seed=1 steps=40 bin=$src/build/biaskit keep=0
while [ $# -gt 0 ]; do
    case $1 in
    --kills) kills=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "crash-test: unknown argument '$1'; see the head of $0" >&2; exit 2 ;;
    esac
done
[ -x "$bin" ] || { echo "crash-test: no biaskit binary at '$bin' (build first, or give --bin)" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d)
if [ "$keep" = 1 ]; then echo "crash-test: work directory $work"; else trap 'rm -rf "$work"' EXIT; fi
cd "$work"

# a deterministic corpus from the repository's own text, and a tiny model checkpointed every step
mkdir corpus
cat "$src/README.md" "$src/docs/"*.md >corpus/all.txt # not piped into head: pipefail would see cat's SIGPIPE
head -c 60000 corpus/all.txt >corpus/text.txt
rm corpus/all.txt
cat >exp.toml <<EOF
[model]
layers = 2
heads = 2
dim = 32
[train]
length = 32
batch = 4
steps = $steps
warmup = 2
log_every = 1
eval_every = 10
eval_batches = 2
checkpoint_every = 1
[data]
paths = ["corpus"]
[run]
threads = 1
[[term]]
plugin = "alibi"
EOF

# the data section of a safetensors file: after the 8-byte header length and the header
data_of() {
    local n
    n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
    tail -c +$((8 + n + 1)) "$1"
}
# "step loss" of every training record of a metrics log
losses() { grep -o '"step": [0-9]*, "loss": [-0-9.e]*' "$1"; }

start=$EPOCHREALTIME
"$bin" train exp.toml --out ref --plain >ref.log 2>&1 || { cat ref.log; echo "crash-test: the reference run failed"; exit 1; }
ref_us=$(( (${EPOCHREALTIME/./} - ${start/./}) ))
# kill delays uniform in [0, half the reference run's time]: kills land anywhere from start-up to the
# last checkpoint write, a few per round
max_us=$(( ref_us / 2 + 1 ))
echo "crash-test: reference run of $steps steps took $((ref_us / 1000)) ms; killing after 0-$((max_us / 1000)) ms, seed $seed"

RANDOM=$seed
done_kills=0 rounds=0 failures=0 attempts=0 in_write=0
while [ "$done_kills" -lt "$kills" ]; do
    rounds=$((rounds + 1))
    rm -rf run
    while :; do
        attempts=$((attempts + 1))
        if [ -f run/checkpoint.safetensors ]; then
            "$bin" train --resume run/checkpoint.safetensors --plain >>run.log 2>&1 &
        else
            "$bin" train exp.toml --out run --plain >>run.log 2>&1 &
        fi
        pid=$!
        if [ "$done_kills" -lt "$kills" ]; then
            delay=$(( (RANDOM * 32768 + RANDOM) % max_us ))
            sleep "$(printf '%d.%06d' $((delay / 1000000)) $((delay % 1000000)))"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rc=0
        { wait "$pid"; } 2>/dev/null || rc=$?
        if [ "$rc" -eq 0 ]; then
            break # finished before the kill
        elif [ "$rc" -ne 137 ]; then
            tail -5 run.log
            echo "crash-test: FAIL: attempt $attempts exited with status $rc (expected 0 or 137)"
            exit 1
        fi
        done_kills=$((done_kills + 1))
        if [ -n "$(find run -name 'checkpoint.safetensors.tmp*' 2>/dev/null)" ]; then
            in_write=$((in_write + 1)) # the kill cut a checkpoint write short
        fi
        at="no checkpoint yet"
        if [ -f run/checkpoint.safetensors ]; then
            if ! out=$("$bin" eval run/checkpoint.safetensors --lengths 32 --tokens 256 2>&1); then
                echo "$out" | tail -3
                echo "crash-test: FAIL: after kill $done_kills the checkpoint does not load"
                failures=$((failures + 1))
                break
            fi
            at=$(sed -n 's/^checkpoint: .* (step \([0-9]*\),.*/checkpoint at step \1/p' <<<"$out")
        fi
        echo "kill $done_kills (round $rounds) after $((delay / 1000)) ms: $at"
    done
    [ "$failures" -eq 0 ] || break
    if cmp -s <(data_of ref/checkpoint.safetensors) <(data_of run/checkpoint.safetensors); then
        same_file=$(cmp -s ref/checkpoint.safetensors run/checkpoint.safetensors && echo "whole file identical" ||
            echo "metadata differs")
        echo "round $rounds: final tensors bit-identical to the uninterrupted run ($same_file)"
    else
        echo "crash-test: FAIL: round $rounds: final tensors differ from the uninterrupted run"
        failures=$((failures + 1))
    fi
    if ! diff <(losses ref/metrics.jsonl) <(losses run/metrics.jsonl) >metrics.diff; then
        echo "crash-test: FAIL: round $rounds: metrics.jsonl differs from the uninterrupted run's:"
        head -10 metrics.diff
        failures=$((failures + 1))
    fi
    [ "$failures" -eq 0 ] || break
done
echo "crash-test: $done_kills kills ($in_write during a checkpoint write) in $rounds round(s), $attempts starts," \
    "$failures failure(s)"
[ "$failures" -eq 0 ]
