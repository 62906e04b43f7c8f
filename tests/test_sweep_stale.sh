#!/usr/bin/env bash
# Stale runs (issue 27, docs/sweeps.md "Stale runs"): a sweep is run, its file edited (train.steps
# 8 -> 6), and run again. The done runs are stale: the sweep names each with the first key that
# differs ("train.steps: run has 8, sweep asks 6"), refuses to start and writes nothing (sweep.json
# and the runs keep the old experiment: nothing claims 6 for a run trained 8 steps); --dry-run lists
# them; --rerun-stale with an --only that leaves one out is refused; --rerun-stale trains them again,
# and their evaluations are then exactly those of a fresh sweep of the edited file.
# usage: test_sweep_stale.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH
export OMP_WAIT_POLICY=passive
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

expect() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}

tiny='"model.layers=1", "model.heads=2", "model.dim=16", "train.length=32", "train.batch=2", "train.steps=8",
       "train.warmup=1", "train.eval_every=0", "train.eval_batches=1", "train.log_every=4", "data.max_bytes=60000",
       "run.threads=1"'
cat >"$work/s.toml" <<EOF
base = "$src/examples/demo_alibi.toml"
[sweep]
out_dir = "out"
seeds = [1, 2]
set = [$tiny]
[eval]
lengths = [32, 64]
tokens = 512
[[variant]]
name = "alibi"
[[corpus]]
name = "h"
EOF
d=$work/out
check "the sweep runs" 0 "sweep: 2 runs: 2 done" "$bk" sweep "$work/s.toml"
cp "$d/sweep.json" "$work/sweep.json.before"
cp "$d/alibi-h-s1/eval.json" "$work/eval.before"

# the edit: 8 steps -> 6
sed -i 's/"train.steps=8"/"train.steps=6"/' "$work/s.toml"
out=$("$bk" sweep "$work/s.toml" 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "^biaskit: stale run 'alibi-h-s1' \[done\]: train.steps: run has 8, sweep asks 6$" <<<"$out" &&
    grep -q "^biaskit: stale run 'alibi-h-s2' \[done\]: train.steps: run has 8, sweep asks 6$" <<<"$out" &&
    grep -q "2 runs of '.*s.toml' are stale .*Nothing was run or written. Train them again with --rerun-stale" <<<"$out"; then
    ok "stale runs are named with the first differing key, and the sweep refuses (exit 1)"
else
    bad "stale runs refused (exit $rc)" "$out"
fi
expect "... sweep.json is not rewritten (it does not claim 6 steps)" cmp -s "$d/sweep.json" "$work/sweep.json.before"
expect "... the runs keep their experiment (8 steps), state and evaluation" bash -c \
    "grep -q '^steps = 8$' '$d/alibi-h-s1/experiment.toml' && grep -q '\"state\":\"done\"' '$d/alibi-h-s1/status.json' && cmp -s '$d/alibi-h-s1/eval.json' '$work/eval.before'"
check "--dry-run lists a stale run and exits 1" 1 "^    STALE: train.steps: run has 8, sweep asks 6 \(the sweep refuses to start; --rerun-stale trains it again\)" \
    "$bk" sweep "$work/s.toml" --dry-run
check "--dry-run counts them" 1 "^2 runs, 2 stale" "$bk" sweep "$work/s.toml" --dry-run
check "--dry-run --rerun-stale: exit 0" 0 "STALE: train.steps: run has 8, sweep asks 6 \(--rerun-stale: trained again\)" \
    "$bk" sweep "$work/s.toml" --dry-run --rerun-stale
check "--rerun-stale with --only leaving a stale run out is refused" 2 \
    "stale run 'alibi-h-s2' \[done\]: train.steps: run has 8, sweep asks 6 \(not selected by --only\)" \
    "$bk" sweep "$work/s.toml" --rerun-stale --only '*-s1'
expect "... and writes nothing" cmp -s "$d/sweep.json" "$work/sweep.json.before"

# another key: a difference in a [[term]] table is named as --set names it
sed -i 's/^name = "alibi"$/name = "alibi"\nterm = [{plugin = "alibi", slope_scale = 2.0}]/' "$work/s.toml"
check "with two differences, the first in the experiment's order is named" 1 "stale run 'alibi-h-s1' \[done\]: train.steps: run has 8, sweep asks 6" \
    "$bk" sweep "$work/s.toml"
sed -i 's/"train.steps=6"/"train.steps=8"/' "$work/s.toml"
check "... the first key that differs, with the default on the run's side" 1 \
    "stale run 'alibi-h-s1' \[done\]: term.0.slope_scale: run has none \(the default\), sweep asks 2.0" "$bk" sweep "$work/s.toml"
sed -i '/^term = \[{plugin = "alibi", slope_scale = 2.0}\]$/d; s/"train.steps=8"/"train.steps=6"/' "$work/s.toml"

# --rerun-stale trains them again
out=$("$bk" sweep "$work/s.toml" --rerun-stale 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "^sweep: stale run alibi-h-s1: train.steps: run has 8, sweep asks 6; training it again$" <<<"$out" &&
    grep -q "sweep: 2 runs: 2 done (0 before this sweep)" <<<"$out"; then
    ok "--rerun-stale trains the stale runs again"
else
    bad "--rerun-stale (exit $rc)" "$out"
fi
expect "... their experiment.toml, sweep.json and metrics are of 6 steps" bash -c \
    "grep -q '^steps = 6$' '$d/alibi-h-s2/experiment.toml' && grep -q 'train.steps=6' '$d/sweep.json' && ! grep -q 'train.steps=8' '$d/sweep.json' && grep -q '\"step\": *6' '$d/alibi-h-s1/metrics.jsonl' && ! grep -q '\"step\": *8' '$d/alibi-h-s1/metrics.jsonl'"
check "... and a rerun skips them" 0 "2 already done, skipped; 0 to run" "$bk" sweep "$work/s.toml"

# the same as a fresh sweep of the edited file
sed 's/^out_dir = "out"$/out_dir = "fresh"/' "$work/s.toml" >"$work/fresh.toml"
check "a fresh sweep of the edited file" 0 "sweep: 2 runs: 2 done" "$bk" sweep "$work/fresh.toml"
for r in alibi-h-s1 alibi-h-s2; do
    a=$(grep -o '"loss": [0-9.e+-]*' "$d/$r/eval.json")
    b=$(grep -o '"loss": [0-9.e+-]*' "$work/fresh/$r/eval.json")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$r: the rerun's losses are the fresh sweep's"; else bad "$r: losses differ" "$a
--
$b"; fi
    a=$(grep -o '"loss": [0-9.e+-]*' "$d/$r/metrics.jsonl")
    b=$(grep -o '"loss": [0-9.e+-]*' "$work/fresh/$r/metrics.jsonl")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$r: ... and so are its training losses"; else bad "$r: training losses differ"; fi
done

# a checkpointed run that is not done (training) is stale too
echo '{"state":"training","error":"","train_seconds":1,"eval_seconds":0}' >"$d/alibi-h-s1/status.json"
sed -i 's/"train.steps=6"/"train.steps=7"/' "$work/s.toml"
check "a run with a checkpoint of another experiment is stale (not resumed)" 1 \
    "stale run 'alibi-h-s1' \[training\]: train.steps: run has 6, sweep asks 7" "$bk" sweep "$work/s.toml" --only '*-s1'
# a pending run without a checkpoint is not stale: its experiment.toml is just rewritten
rm -rf "$d/alibi-h-s2"/{checkpoint.safetensors,status.json} "$d/alibi-h-s1"
check "... a run with nothing trained is not stale" 0 "sweep: 2 runs: 2 done \(0 before this sweep\)" "$bk" sweep "$work/s.toml"

# issue 27: without [[corpus]] a run is named from its data, not "base"
printf 'base = "%s"\n[sweep]\nset = [%s]\n[[variant]]\nname = "a"\n' "$src/examples/demo_alibi.toml" "$tiny" >"$work/n.toml"
check "no [[corpus]]: the corpus part of the name is the data directory's name" 0 "^a-include-s1  \[pending\]" \
    "$bk" sweep "$work/n.toml" --dry-run
printf 'x\n' >"$work/wiki.train.txt"
printf 'base = "%s"\n[sweep]\nset = [%s, "data.paths=[\\"%s\\", \\"/usr/include/\\"]"]\n' \
    "$src/examples/demo_alibi.toml" "$tiny" "$work/wiki.train.txt" >"$work/n2.toml"
check "... a file's name without its extension, several joined by +" 0 "^base-wiki.train\+include-s1  \[pending\]" \
    "$bk" sweep "$work/n2.toml" --dry-run

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
