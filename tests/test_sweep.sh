#!/usr/bin/env bash
# biaskit sweep end to end: expansion and names, --dry-run, a whole tiny sweep (train + eval, the
# files of the sweep directory), a rerun that skips what is done, a resumed run (a checkpoint left
# mid-training, and Ctrl-C), failing runs reported while the others complete, and bad sweep files.
# usage: test_sweep.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH
export OMP_WAIT_POLICY=passive
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

# expect NAME COMMAND...: the command succeeds
expect() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}

# A small model on a slice of the C headers: each run trains in well under a second.
tiny='"model.layers=1", "model.heads=2", "model.dim=16", "train.length=32", "train.batch=2", "train.steps=8",
       "train.warmup=1", "train.eval_every=0", "train.eval_batches=1", "train.log_every=4", "data.max_bytes=120000"'
cat >"$work/tiny.toml" <<EOF
base = "$src/examples/demo_alibi.toml"

[sweep]
out_dir = "out"
seeds = [1, 2]
set = [$tiny]

[eval]
multiples = [1, 2]
sliding = 16
tokens = 1024

[[variant]]
name = "alibi"
term = [{plugin = "alibi"}]

[[variant]]
name = "nope"
term = []
EOF

# --- help, expansion, names, --dry-run -------------------------------------------------------------
check "help describes the file" 0 "\[\[variant\]\]" "$bk" sweep --help
check "the sweep command is listed" 0 "sweep " "$bk" --help
check "no file is a usage error" 2 "expected one sweep file" "$bk" sweep
check "the README's tiny sweep resolves" 0 "^nope-headers-s2  \[" "$bk" sweep "$src/examples/sweeps/tiny.toml" --dry-run
check "tiny sweep: 4 runs" 0 "^4 runs \(dry run" "$bk" sweep "$src/examples/sweeps/tiny.toml" --dry-run

cat >"$work/grid.toml" <<EOF
base = "$src/examples/demo_alibi.toml"
[sweep]
seeds = [1, 2]
set = [$tiny]
[eval]
lengths = [32, 96]
[grid]
"train.lr" = [1e-3, 3e-3]
[[variant]]
name = "alibi"
[[variant]]
name = "kmix"
attention.mixing = "kernel"
[[variant.term]]
plugin = "alibi"
[[variant.term]]
plugin = "kerple"
[[corpus]]
name = "small"
data.max_bytes = 60000
[[corpus]]
name = "big"
set = ["data.max_bytes=120000"]
EOF
out=$(cd "$work" && "$bk" sweep grid.toml --dry-run 2>&1)
rc=$?
n=$(grep -cE '^[a-z]+-[a-z]+-s[12]-lr0\.00[13]  \[pending\]$' <<<"$out")
if [ $rc -eq 0 ] && [ "$n" -eq 16 ] && grep -q "^16 runs (dry run" <<<"$out"; then ok "grid: 2 variants x 2 corpora x 2 lr x 2 seeds = 16 named runs"; else bad "grid expansion ($n names, exit $rc)" "$out"; fi
expect "grid: names in order (variant, corpus, grid point, seed)" \
    grep -q "alibi-small-s1-lr0.001 .*alibi-small-s2-lr0.001 .*alibi-small-s1-lr0.003 .*kmix-big-s2-lr0.003" <<<"$(tr '\n' ' ' <<<"$out")"
expect "grid: a variant's settings and terms are listed" grep -q "^    attention.mixing=\"kernel\"$" <<<"$out"
expect "grid: seed and grid point are listed" grep -q "^    train.lr=0.003$" <<<"$out"
check "--only selects by glob" 0 "^8 runs \(dry run" bash -c "cd '$work' && '$bk' sweep grid.toml --dry-run --only 'kmix-*'"
check "--only matching nothing" 2 "no run of .* matches --only 'zzz\*'" bash -c "cd '$work' && '$bk' sweep grid.toml --only 'zzz*'"
expect "--dry-run writes nothing" test ! -e "$work/runs"
check "eval lengths default to multiples, stated" 0 "evaluation at 32,64 \(non-overlapping; sliding, stride 16\), 1024 tokens" \
    "$bk" sweep "$work/tiny.toml" --dry-run

# --- a whole sweep ---------------------------------------------------------------------------------
start=$(date +%s)
out=$("$bk" sweep "$work/tiny.toml" --jobs 2 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "^sweep: 4 runs: 4 done (0 before this sweep), 0 failed$" <<<"$out"; then ok "tiny sweep runs 4 runs ($(($(date +%s) - start)) s)"; else bad "tiny sweep (exit $rc)" "$out"; fi
expect "one line per run start and end" test "$(grep -cE '^\[[1-4]/4\] .*: (training|done \(train [0-9.]+ s, eval [0-9.]+ s\))' <<<"$out")" -eq 8
d=$work/out
for r in alibi-include-s1 alibi-include-s2 nope-include-s1 nope-include-s2; do
    missing=
    for f in experiment.toml checkpoint.safetensors metrics.jsonl eval.json eval-sliding.json status.json train.log eval.log; do
        [ -s "$d/$r/$f" ] || missing="$missing $f"
    done
    if [ -z "$missing" ]; then ok "$r: every file"; else bad "$r: missing$missing"; fi
done
expect "status.json: done, with timings" grep -Eq '^\{"state":"done","error":"","train_seconds":[0-9.]+,"eval_seconds":[0-9.]+\}$' "$d/alibi-include-s1/status.json"
expect "eval.json: non-overlapping, with position_loss" grep -q '"protocol": "non-overlapping".*' "$d/nope-include-s2/eval.json"
expect "eval.json: lengths 32 and 64" grep -Eq '"length": 64, .*"position_loss": \[' "$d/nope-include-s2/eval.json"
expect "eval-sliding.json: the sliding protocol" grep -q '"protocol": "sliding"' "$d/alibi-include-s2/eval-sliding.json"
expect "experiment.toml: the seed of the run" grep -q '^seed = 2$' "$d/nope-include-s2/experiment.toml"
expect "experiment.toml: NoPE has no term" bash -c "grep -q '^term = \[\]$' '$d/nope-include-s1/experiment.toml' && ! grep -q '^\[\[term\]\]' '$d/nope-include-s1/experiment.toml'"
expect "experiment.toml: the variant's term" grep -q '^plugin = "alibi"$' "$d/alibi-include-s1/experiment.toml"
expect "experiment.toml: data paths absolute" grep -q '^paths = \["/usr/include"\]$' "$d/alibi-include-s1/experiment.toml"
check "experiment.toml is a valid experiment" 0 "^layers = 1$" "$bk" config "$d/alibi-include-s1/experiment.toml"
sj=$(tr -d ' \t\n' <"$d/sweep.json")
expect "sweep.json: header" grep -q "^{\"sweep\":\"$work/tiny.toml\",\"lengths\":\[32,64\],\"sliding\":16,\"train_length\":32,\"runs\":\[" <<<"$sj"
expect "sweep.json: a run" grep -q '{"name":"nope-include-s2","dir":"nope-include-s2","variant":"nope","corpus":"include","seed":2,"grid":{},"sets":\["model.layers=1",' <<<"$sj"
if command -v python3 >/dev/null; then
    expect "sweep.json is JSON with 4 runs" python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert len(j['runs']) == 4" "$d/sweep.json"
    expect "eval.json is JSON" python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['results'][1]['length'] == 64" "$d/alibi-include-s1/eval.json"
fi

# --- a rerun skips what is done ---------------------------------------------------------------------
t0=$(date +%s%N)
check "rerun skips done runs" 0 "4 already done, skipped; 0 to run" "$bk" sweep "$work/tiny.toml"
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $ms -lt 3000 ]; then ok "rerun is fast (${ms} ms)"; else bad "rerun took ${ms} ms"; fi
check "--report writes the sweep's report after it" 0 "^report: .*/report/report.md" "$bk" sweep "$work/tiny.toml" --report
if [ -f "$d/report/report.md" ] && grep -q "^| alibi |" "$d/report/report.md"; then
    ok "--report: report.md has the table"
else
    bad "--report: no table in $d/report/report.md"
fi

# --- an interrupted run resumes from its checkpoint ---------------------------------------------------
# A run stopped at step 3 of 8 (as Ctrl-C leaves it): its checkpoint, state "training", no evaluation.
r=$d/alibi-include-s1
"$bk" train "$r/experiment.toml" --out "$work/partial" --stop-after 3 --plain >/dev/null 2>&1
cp "$work/partial/checkpoint.safetensors" "$r/checkpoint.safetensors"
rm -f "$r/eval.json" "$r/eval-sliding.json"
echo '{"state":"training","error":"","train_seconds":1,"eval_seconds":0}' >"$r/status.json"
check "an interrupted run resumes" 0 "alibi-include-s1: resuming from its checkpoint" "$bk" sweep "$work/tiny.toml"
expect "... from the step of its checkpoint" grep -q "resuming from .* at step 3$" "$r/train.log"
expect "... to the end, evaluated and done" bash -c "grep -q '\"state\":\"done\"' '$r/status.json' && test -s '$r/eval-sliding.json'"
# A run trained but not evaluated ("evaluating") only evaluates again.
rm -f "$d/nope-include-s1/eval.json"
echo '{"state":"evaluating","error":"","train_seconds":1,"eval_seconds":0}' >"$d/nope-include-s1/status.json"
check "a trained run only evaluates again" 0 "nope-include-s1: trained before; evaluating" "$bk" sweep "$work/tiny.toml"
expect "... and is done" test -s "$d/nope-include-s1/eval.json"

# Ctrl-C (SIGINT to the sweep): the children stop at a checkpoint, exit 130, then the next sweep resumes.
sed -e 's/"train.steps=8"/"train.steps=2000"/' -e 's/^out_dir = "out"/out_dir = "out-int"/' -e 's/^seeds = \[1, 2\]/seeds = [1]/' \
    "$work/tiny.toml" >"$work/int.toml"
"$bk" sweep "$work/int.toml" --jobs 2 >"$work/int.log" 2>&1 &
pid=$!
# 2000 steps of ~1 ms: both runs are still training when their first step is logged (polled every 20 ms)
for _ in $(seq 1500); do # until both runs logged a step (each has a checkpoint to resume from), 30 s at most
    n=0
    for f in "$work"/out-int/*/train.log; do
        grep -q '^step ' "$f" 2>/dev/null && n=$((n + 1))
    done
    [ $n -ge 2 ] && break
    sleep 0.02
done
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && grep -q "2 interrupted" "$work/int.log" && [ -s "$work/out-int/alibi-include-s1/checkpoint.safetensors" ] &&
    grep -q '"state":"training","error":"interrupted while training' "$work/out-int/nope-include-s1/status.json"; then
    ok "Ctrl-C stops every run at a checkpoint (exit 130)"
else
    bad "Ctrl-C (exit $rc)" "$(cat "$work/int.log" "$work"/out-int/*/status.json)"
fi
check "after Ctrl-C the sweep resumes both runs" 0 "sweep: 2 runs: 2 done" "$bk" sweep "$work/int.toml" --jobs 2
expect "... from their checkpoints" grep -q "resuming from .* at step [1-9]" "$work/out-int/nope-include-s1/train.log"

# A changed sweep file does not resume a checkpoint of another experiment: the run is stale, the sweep
# refuses to start (tests/test_sweep_stale.sh has the rest)
echo '{"state":"training","error":"","train_seconds":1,"eval_seconds":0}' >"$work/out-int/nope-include-s1/status.json"
sed -i 's/"train.steps=2000"/"train.steps=2500"/' "$work/int.toml"
check "a checkpoint of another experiment is not resumed" 1 "stale run 'nope-include-s1' \[training\]: train.steps: run has 2000, sweep asks 2500" \
    "$bk" sweep "$work/int.toml" --only 'nope-*'

# --- failures are reported; the other runs complete ---------------------------------------------------
cat >"$work/fail.toml" <<EOF
base = "$src/examples/demo_alibi.toml"
[sweep]
out_dir = "out-fail"
set = [$tiny]
[eval]
lengths = [32]
tokens = 512
[[variant]]
name = "alibi"
[[variant]]
name = "bad"
term = [{plugin = "alibi", slope_scale = "big"}]
[[corpus]]
name = "h"
[[corpus]]
name = "gone"
data.paths = ["no/such/dir"]
EOF
out=$("$bk" sweep "$work/fail.toml" --jobs 2 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "^sweep: 4 runs: 1 done (0 before this sweep), 3 failed$" <<<"$out"; then ok "failing runs: exit 1, the good run done"; else bad "failing runs (exit $rc)" "$out"; fi
expect "a bad plugin option names the sweep file's line" \
    grep -q "^  FAILED bad-h-s1: fail.toml:13:1: run 'bad-h-s1', variant 'bad', .*option 'slope_scale': expected a number, got string$" <<<"$(sed "s|$work/||" <<<"$out")"
expect "a training error is reported from the child" \
    grep -q "^  FAILED alibi-gone-s1: train: data path '$work/no/such/dir' does not exist$" <<<"$out"
expect "status.json holds the error" grep -q '"state":"failed","error":"train: data path' "$work/out-fail/alibi-gone-s1/status.json"
expect "the good run is done" grep -q '"state":"done"' "$work/out-fail/alibi-h-s1/status.json"
check "a bad run is listed by --dry-run (exit 1)" 1 "^    cannot train: .*fail.toml:13:1: .*slope_scale" "$bk" sweep "$work/fail.toml" --dry-run
check "failed runs are retried, done ones skipped" 1 "1 already done, skipped; 3 to run" "$bk" sweep "$work/fail.toml"

# --- bad sweep files: FILE:LINE:COLUMN and what was expected; nothing written -----------------------
b=$work/bad.toml
badfile() { # NAME PATTERN: the sweep file $b is refused with PATTERN
    check "$1" 1 "$2" bash -c "cd '$work' && '$bk' sweep bad.toml"
}
printf 'base = "%s"\n[sweep]\nseed = [1]\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "unknown key" "^biaskit: error: bad.toml:3:1: unknown key 'seed' in \[sweep\] \(did you mean 'seeds'\?\)"
printf 'base = "%s"\n[sweep]\nseeds = "1"\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "wrong type" "^biaskit: error: bad.toml:3:9: \[sweep\] seeds: expected an array of integers, got string$"
printf 'base = "nosuch.toml"\n' >"$b"
badfile "missing base file" "^biaskit: error: bad.toml:1:8: base: cannot read '$work/nosuch.toml'"
printf '[sweep]\nseeds = [1]\n' >"$b"
badfile "no base" "^biaskit: error: .*bad.toml: no base experiment"
printf 'base = "%s"\n[[variant]]\nname = "x"\ntrain.lr = "fast"\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "a variant's engine key: wrong type" "^biaskit: error: bad.toml:4:7: runs 'x-\*', variant 'x', 'train.lr=\"fast\"': \[train\] lr: expected a number, got string$"
printf 'base = "%s"\n[[variant]]\nname = "x"\nset = ["trian.lr=1"]\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "a set string: unknown section" "^biaskit: error: bad.toml:4:8: .*unknown section 'trian' \(did you mean 'train'\?\)"
printf 'base = "%s"\n[grid]\n"train.lrr" = [1, 2]\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "a grid key unknown to the engine" "^biaskit: error: bad.toml:3:16: .*\[grid\], 'train.lrr=1': unknown key 'lrr' in \[train\]"
printf '[base.model]\nlayers = 2\nheds = 2\n' >"$b"
badfile "inline base: unknown key" "^biaskit: error: bad.toml:3:1: .*\[base\], 'model.heds=2': unknown key 'heds' in \[model\]"
printf 'base = "%s"\n[[variant]]\nname = "a b"\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "a name that cannot be a directory" "^biaskit: error: bad.toml:3:8: \[\[variant\]\] #1 name 'a b': expected"
printf 'base = "%s"\n[eval]\nlengths = [64]\nmultiples = [1]\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "lengths and multiples" "^biaskit: error: bad.toml:4:1: \[eval\]: give 'lengths'"
printf 'base = "%s"\n[grid]\n"train.length" = [64, 128]\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "runs of different training lengths" "share one \[train\] length"
printf 'base = "%s"\n[sweep]\nseeds = [1\n' "$src/examples/demo_alibi.toml" >"$b"
badfile "invalid TOML" "^biaskit: error: bad.toml:[0-9]+:[0-9]+: invalid TOML"
expect "bad files write nothing" test ! -e "$work/runs"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
