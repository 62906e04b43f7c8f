#!/usr/bin/env bash
# Every runnable example (an examples/*.toml with a [data] section) trains and evaluates: two steps on
# a small slice of its corpus, a checkpoint, then evaluation at 1x and 2x the training length (20,000
# validation tokens at most, whatever the documents of the split hold). This
# is what a user runs first; a plugin, a key or a path that breaks one of them fails here. An example
# too big for two CPU steps in a test (GPT-2 small) names a smaller shape in a line
#   # test_examples: --set model.layers=2 --set train.length=128
# whose settings are added here (the keys, paths and plugins of the file are still the ones tested).
# usage: test_examples.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH
failures=0 passed=0
for ex in "$src"/examples/*.toml; do
    name=$(basename "$ex" .toml)
    grep -q '^\[data\]' "$ex" || continue
    length=$(sed -n 's/^length *= *\([0-9]*\).*/\1/p' "$ex" | head -1)
    read -r -a extra <<<"$(sed -n 's/^# test_examples: *//p' "$ex")"
    for x in "${extra[@]}"; do
        case "$x" in train.length=*) length=${x#train.length=} ;; esac
    done
    out=$("$bk" train "$ex" --plain "${extra[@]}" --set train.steps=2 --set train.batch=2 --set train.warmup=1 \
        --set train.eval_every=0 --set train.eval_batches=1 --set data.max_bytes=400000 \
        --set run.out_dir="$work/$name" 2>&1) &&
        out=$("$bk" eval "$work/$name/checkpoint.safetensors" --lengths "$length,$((2 * length))" --tokens 20000 2>&1) &&
        grep -Eq "^ +$((2 * length)) +2\.00 " <<<"$out"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL: $name"
        echo "$out" | tail -15 | sed 's/^/    /'
        failures=$((failures + 1))
    else
        echo "ok: $name trains and evaluates ($(grep -E "^ +$((2 * length)) " <<<"$out" | awk '{print "ppl", $6, "at", $1}'))"
        passed=$((passed + 1))
    fi
done
echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ] && [ "$passed" -gt 0 ]
