#!/usr/bin/env bash
# The ABI 2 terms end to end through `biaskit train` and `biaskit eval` on a tiny model: each of fire,
# window (with sinks and a distance cap), logn and ssmax, and all of them together with ALiBi and RoPE,
# trains, checkpoints, and evaluates beyond its training length (a masked, scaled FIRE model at 8x); a
# model with per-head learned mixing weights, as `biaskit bias` shows it from its checkpoint; and
# what a plugin gives that the engine must refuse, each named with its term, plugin and the first bad index:
# a mask with window 0 (a row with no key), a coordinate outside [0, 1] beyond row 4096 only, a logit scale
# that turns NaN from query 5000 on, a rotary amplitude of 0 beyond 4x the training length (the
# tests/plugins/checkbad2.c plugins); and the experiment rules (one masking term, the token stream only).
# usage: test_abi2_engine.sh <biaskit binary> <source dir> <test plugin dir>
set -u
bk=$1 src=$2 testplugins=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

mkdir -p "$work/corpus" && : >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 40000 ]; do
    cat "$src/README.md" >>"$work/corpus/text.txt"
done
# experiment NAME TERMS: a 2-layer model trained 6 steps at length 16 with the given [[term]] text
experiment() {
    printf '[model]\nlayers = 2\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 6\nwarmup = 1\n'\
'log_every = 6\neval_every = 0\neval_batches = 1\n[data]\npaths = ["corpus"]\n[run]\ndevice = "cpu"\n%b' "$2" >"$work/$1.toml"
}

experiment fire '[[term]]\nplugin = "fire"\nwidth = 4\n'
experiment window '[[term]]\nplugin = "window"\nwindow = 4\nsinks = 2\ndistance_cap = 8\n[[term]]\nplugin = "alibi"\n'
experiment logn '[[term]]\nplugin = "logn"\n'
experiment ssmax '[[term]]\nplugin = "ssmax"\n'
experiment all '[[term]]\nplugin = "alibi"\n[[term]]\nplugin = "rope"\n[[term]]\nplugin = "fire"\nwidth = 4\n[[term]]\nplugin = "window"\nwindow = 8\nsinks = 1\n[[term]]\nplugin = "ssmax"\n'
for name in fire window logn ssmax all; do
    check "$name: trains" 0 "done: 6 steps" "$bk" train "$work/$name.toml" --out "$work/$name" --plain
    check "$name: evaluates at 8x its training length" 0 "^ +128 +8\.00 " \
        "$bk" eval "$work/$name/checkpoint.safetensors" --lengths 16,128 --tokens 2000
done
check "all: the checkpoint names the FIRE and SSMax tensors, per layer" 0 "term\.fire\.W1.*term\.ssmax\.s|term\.ssmax\.s.*term\.fire\.W1" \
    bash -c "head -c 20000 '$work/all/checkpoint.safetensors' | tr -c '[:print:]' ' '"

# per-head learned mixing weights: bias mixes each head with its own weights
experiment heads '[attention]\nlearn_weights = "per_head"\n[[term]]\nplugin = "alibi"\n[[term]]\nplugin = "kerple"\n'
check "heads: trains with per-head weights" 0 "done: 6 steps" "$bk" train "$work/heads.toml" --out "$work/heads" --plain \
    --set "run.device=cpu"
check "heads: bias shows the per-head weights of the checkpoint" 0 "sum mixing of \(per-head weights, mean [-0-9.e]+\) x alibi \+ \(per-head weights, mean [-0-9.e]+\) x kerple" \
    "$bk" bias "$work/heads/checkpoint.safetensors" --length 8

# plugins that give what the engine refuses
misbehaving() { # misbehaving NAME KIND: an experiment with the checkbad2 plugin of that kind
    experiment "$1" "[[term]]\nplugin = \"$testplugins/biaskit_checkbad2_$2.so\"\n"
}
misbehaving mask0 mask0
check "a mask with window 0 is refused (no row may be left without a key)" 1 \
    "term 'checkbad2_mask0' \(plugin checkbad2_mask0, .*\) at step 1: mask\(\) gave window 0, sinks [0-9]+, distance_cap 0: expected window >= 1 \(a query always sees itself, so no row is left without a key\)" \
    "$bk" train "$work/mask0.toml" --out "$work/mask0" --plain
misbehaving coordfar coordfar
check "coordfar: trains at 16 (u stays in [0, 1] there)" 0 "done: 6 steps" "$bk" train "$work/coordfar.toml" --out "$work/coordfar" --plain
check "a coordinate outside [0, 1] is refused, naming the row" 1 \
    "term 'checkbad2_coordfar' .* at layer 0: coordinate\(\) puts the coordinate outside \[0, 1\]: u\(i = 4096, d = 4096\) = phi\[4096\] \* rscale\[4096\] = 1\.2" \
    "$bk" eval "$work/coordfar/checkpoint.safetensors" --lengths 4200 --tokens 4200 --data "$work/corpus"
misbehaving scalenan scalenan
check "scalenan: trains at 16" 0 "done: 6 steps" "$bk" train "$work/scalenan.toml" --out "$work/scalenan" --plain
check "a logit scale that is not finite is refused, naming head and query" 1 \
    "term 'checkbad2_scalenan' .*: scale\(\) gave a logit scale that is not finite: nan at head 0, query 5000" \
    "$bk" eval "$work/scalenan/checkpoint.safetensors" --lengths 5008 --tokens 5008 --data "$work/corpus"
misbehaving rotamp0 rotamp0
check "rotamp0: trains at 16" 0 "done: 6 steps" "$bk" train "$work/rotamp0.toml" --out "$work/rotamp0" --plain
check "a rotary amplitude of 0 is refused" 1 "checkbad2_rotamp0.*amplitude" \
    "$bk" eval "$work/rotamp0/checkpoint.safetensors" --lengths 128 --tokens 2000

# the experiment's rules
experiment twomasks '[[term]]\nplugin = "window"\nwindow = 4\n[[term]]\nplugin = "window"\nwindow = 8\n'
check "a second masking term is refused" 1 "twomasks\.toml:[0-9]+:[0-9]+: \[\[term\]\] #2 \(window\): a second masking term; term 'window' already is one \(one per model\)" \
    "$bk" train "$work/twomasks.toml" --out "$work/twomasks" --plain
experiment segfire '[[term]]\nplugin = "bipe"\n[[term]]\nplugin = "fire"\nstream = "segment"\n'
check "a coordinate term on the segment stream is refused" 1 "segfire\.toml:[0-9]+:[0-9]+: \[\[term\]\] #2 \(fire\): plugin 'fire' works on the token index" \
    "$bk" train "$work/segfire.toml" --out "$work/segfire" --plain
experiment firew '[[term]]\nplugin = "fire"\nweight = 2.0\n'
check "weight on a coordinate term is refused" 1 "firew\.toml:[0-9]+:[0-9]+: \[\[term\]\] #1 \(fire\): 'weight' mixes distance tables" \
    "$bk" train "$work/firew.toml" --out "$work/firew" --plain
echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
