#!/usr/bin/env bash
# Length-aware RoPE chosen at evaluation only: a tiny RoPE model (plain, scaling = "none") trained for 40
# steps, then `biaskit eval --set term.0.scaling=... --set term.0.factor=...` (a plugin option changed on
# a checkpoint: a warning naming it; --strict refuses it; keys that change the model stay refused).
# Checks: each scaling is shown (the plugin's info line and the --set warning); at 4x the training
# length the loss differs from plain RoPE's for pi, ntk, yarn and dynamic yarn; at the training length
# dynamic scaling (s = max(1, 16/16) = 1) gives plain RoPE's results, and factor = 1 for pi and yarn
# gives them at every length (the JSON's losses and position-wise losses, as printed, equal; the tables
# are bit-identical, tests/test_rope_scaling.c).
# usage: test_rope_eval.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

mkdir -p "$work/corpus" && : >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 30000 ]; do
    cat "$src/README.md" >>"$work/corpus/text.txt"
done
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 4\nsteps = 40\nwarmup = 2\nlr = 1e-2\nlog_every = 10\neval_every = 0\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "rope"\n' >"$work/tiny.toml"

check "rope: a tiny model trains" 0 "done: 40 steps" "$bk" train "$work/tiny.toml" --out "$work/run" --plain --set run.device=cpu
ck=$work/run/checkpoint.safetensors

# evaluate NAME SETS...: eval at 16 and 64 (4x) into $work/NAME.json and $work/NAME.err (stderr)
evaluate() {
    local name=$1
    shift
    "$bk" eval "$ck" --lengths 16,64 --tokens 4000 --set run.device=cpu --json "$work/$name.json" "$@" \
        >"$work/$name.out" 2>"$work/$name.err"
}
# result NAME LENGTH: the JSON's line for that length (loss, ppl, batch, position-wise losses)
result() { # a length's row without what varies from run to run (memory allotted, wall time)
    grep -E "\"length\": $2," "$work/$1.json" |
        sed -E 's/"activation_bytes": [0-9]*//; s/"seconds": [0-9.e+-]*, "tokens_per_second": [0-9.e+-]*//'
}
loss() { result "$1" "$2" | sed -E 's/.*"loss": ([0-9.]+),.*/\1/'; }

if evaluate none; then ok "eval: plain RoPE"; else bad "eval: plain RoPE" "$(cat "$work/none.err")"; fi
if grep -q scaling "$work/none.err"; then bad "eval: plain RoPE says nothing of a scaling" "$(cat "$work/none.err")"; else
    ok "eval: plain RoPE says nothing of a scaling"; fi

for scaling in pi ntk yarn; do
    if evaluate "$scaling" --set "term.0.scaling=\"$scaling\"" --set term.0.factor=4; then
        ok "eval: scaling = $scaling, factor = 4"
    else
        bad "eval: scaling = $scaling, factor = 4" "$(cat "$work/$scaling.err")"
        continue
    fi
    check "eval: $scaling is shown" 0 "plugin rope: scaling $scaling \(s = 4\), original_length 16" cat "$work/$scaling.err"
    check "eval: the --set of $scaling is a warning naming it" 0 \
        "warning: .*--set term\.0\.scaling=\"$scaling\" changes \[\[term\]\] #1 \(rope\) option 'scaling' \(not set in the checkpoint, now \"$scaling\"\)" \
        cat "$work/$scaling.err"
    check "eval: the JSON records the --set of $scaling" 0 \
        "\"overrides\": \[\"run\.device=cpu\", \"term\.0\.scaling=\\\\\"$scaling\\\\\"\", \"term\.0\.factor=4\"\]" \
        cat "$work/$scaling.json"
    a=$(loss none 64) b=$(loss "$scaling" 64)
    if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then
        ok "eval: $scaling changes the loss at 4x ($a -> $b)"
    else
        bad "eval: $scaling changes the loss at 4x (none '$a', $scaling '$b')"
    fi
done
check "eval: yarn shows its ramp and temperature" 0 "scaling yarn \(s = 4\).*ramp over pairs .*q and k x 1\.13863" cat "$work/yarn.err"

# the command of the brief: yarn at 8x
check "eval: yarn, factor = 8" 0 "^ +64 +4\.00 " "$bk" eval "$ck" --lengths 16,64 --tokens 4000 --set run.device=cpu \
    --set 'term.0.scaling="yarn"' --set term.0.factor=8

# dynamic: s = max(1, length / 16): plain RoPE at 16, scaled at 64
if evaluate dynamic --set 'term.0.scaling="yarn"' --set term.0.factor=0; then ok "eval: dynamic yarn"; else
    bad "eval: dynamic yarn" "$(cat "$work/dynamic.err")"; fi
check "eval: dynamic is shown" 0 "scaling yarn \(dynamic, s = max\(1, length / 16\)\)" cat "$work/dynamic.err"
if [ -n "$(result none 16)" ] && [ "$(result none 16)" = "$(result dynamic 16)" ]; then
    ok "eval: dynamic yarn at the training length equals plain RoPE"
else
    bad "eval: dynamic yarn at the training length equals plain RoPE" "$(result none 16; result dynamic 16)"
fi
a=$(loss none 64) b=$(loss dynamic 64)
if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then ok "eval: dynamic yarn changes the loss at 4x ($a -> $b)"; else
    bad "eval: dynamic yarn changes the loss at 4x (none '$a', dynamic '$b')"; fi
# at 64 = 4 x 16, dynamic scaling is s = 4: the static yarn with factor = 4
if [ -n "$(result yarn 64)" ] && [ "$(result yarn 64)" = "$(result dynamic 64)" ]; then
    ok "eval: dynamic yarn at 4x equals yarn with factor = 4"
else
    bad "eval: dynamic yarn at 4x equals yarn with factor = 4" "$(result yarn 64; result dynamic 64)"
fi

# factor = 1: plain RoPE, at every length
for scaling in pi yarn; do
    evaluate "$scaling-1" --set "term.0.scaling=\"$scaling\"" --set term.0.factor=1
    same=1
    for n in 16 64; do
        [ -n "$(result none $n)" ] && [ "$(result none $n)" = "$(result "$scaling-1" $n)" ] || same=0
    done
    if [ $same = 1 ]; then ok "eval: $scaling with factor = 1 equals plain RoPE"; else
        bad "eval: $scaling with factor = 1 equals plain RoPE" "$(cat "$work/none.json" "$work/$scaling-1.json" "$work/$scaling-1.err")"; fi
done

# the training-free extensions (position views, two passes merged by their log-sum-exps): each is shown,
# changes the losses at 4x, and within its window (lengths <= W: the far view owns no pair) gives plain
# RoPE's loss (the flash passes against the blocked kernel: within 1e-5 relative)
close() { awk -v a="$1" -v b="$2" 'BEGIN {x = a - b; if (x < 0) x = -x; exit !(a != "" && b != "" && x <= 1e-5 * b)}'; }
# (short windows: the tiny model uses positions little, so the far pairs must be remapped far)
for ext in "self-extend:--set term.0.window=2 --set term.0.group=8:extend self-extend" \
    "rerope:--set term.0.window=2:extend rerope: relative position min\(d, 2\)" \
    "leaky:--set term.0.window=2 --set term.0.leaky=8:extend leaky rerope" \
    "string:--set term.0.shift=3 --set term.0.window=1:extend string: d >= 3 attends at d - 3 \+ 1"; do
    name=${ext%%:*} rest=${ext#*:} sets=${rest%%:*} shown=${rest#*:}
    kind=$name
    [ "$name" = leaky ] && kind=rerope
    # shellcheck disable=SC2086
    if evaluate "$name" --set "term.0.extend=\"$kind\"" $sets; then ok "eval: extend = $name"; else
        bad "eval: extend = $name" "$(cat "$work/$name.err")"
        continue
    fi
    check "eval: $name is shown" 0 "plugin rope: $shown" cat "$work/$name.err"
    a=$(loss none 64) b=$(loss "$name" 64)
    if [ -n "$a" ] && [ -n "$b" ] && [ "$(result none 64)" != "$(result "$name" 64)" ]; then
        ok "eval: $name changes the losses at 4x ($a -> $b)"
    else
        bad "eval: $name changes the losses at 4x" "plain $a, $name $b"
    fi
done
"$bk" eval "$ck" --lengths 8 --tokens 4000 --set run.device=cpu --json "$work/none8.json" >/dev/null 2>&1
"$bk" eval "$ck" --lengths 8 --tokens 4000 --set run.device=cpu --json "$work/rerope8.json" \
    --set 'term.0.extend="rerope"' --set term.0.window=8 >/dev/null 2>&1
a=$(loss none8 8) b=$(loss rerope8 8)
if close "$a" "$b"; then ok "eval: within the window ReRoPE is plain RoPE ($a, $b)"; else
    bad "eval: within the window ReRoPE is plain RoPE" "plain $a, rerope $b"; fi
check "eval: a window of 0 names the key" 1 "\[\[term\]\] #1.*'window'.*expected the window in tokens >= 1, got 0" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set 'term.0.extend="rerope"' --set term.0.window=0
check "eval: a window as long as the training length is refused" 1 "'window'.*shorter than the training length 16" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set 'term.0.extend="self-extend"' --set term.0.window=16 \
    --set term.0.group=2
check "eval: a group of 0 is refused" 1 "'group'.*expected the group size >= 1, got 0" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set 'term.0.extend="self-extend"' --set term.0.window=4 \
    --set term.0.group=0
check "erf: position views keep no probabilities, said by name" 1 \
    "ERF: layer 0 has position views .*keep no attention probabilities" \
    "$bk" erf "$ck" --length 16 --sequences 2 --queries 4 --set 'term.0.extend="rerope"' --set term.0.window=4

# what stays refused
check "eval: a bad factor names the key" 1 "\[\[term\]\] #1.*'factor'.*expected a scale factor s >= 1, or 0 for dynamic scaling" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set 'term.0.scaling="pi"' --set term.0.factor=0.5
check "eval: factor without a scaling is refused" 1 "'factor' applies with scaling = pi, ntk, yarn or longrope only; scaling is \"none\"" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set term.0.factor=4
check "eval: --strict refuses a changed option" 1 "option 'scaling'.*refused \(--strict\)|--strict" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set 'term.0.scaling="yarn"' --strict
check "eval: the model's shape stays fixed" 1 "would change the model's shape or function" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set model.heads=4
check "eval: the term's plugin stays fixed" 1 "would change the model's shape or function" \
    "$bk" eval "$ck" --lengths 16 --tokens 1000 --set 'term.0.plugin="alibi"'

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
