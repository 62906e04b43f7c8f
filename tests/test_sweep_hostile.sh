#!/usr/bin/env bash
# biaskit sweep and report against hostile input (the outside probe's repros, each with its exit code,
# message and the state left on disk): plugins that crash, exit or hang when the sweep checks their
# terms; FIFOs and devices where the sweep and the report read files; two sweeps on one directory;
# an evaluation of another step than the checkpoint; MPI launchers; repeated --only; a sweep
# directory that is a file; [run] out_dir in the sweep file; metrics logged twice; one data file
# listed twice; a variant/corpus name clash. Tiny runs of 2-3 steps: seconds in all.
# usage: test_sweep_hostile.sh <biaskit binary> <source dir> <test plugin dir>
set -u
real_bk=$1 src=$2 testplugins=$3
work=$(cd "$(mktemp -d)" && pwd -P)
# every command under a time limit: a hang (a FIFO read, a plugin) fails its check instead of the test
printf '#!/bin/sh\nexec timeout 60 "%s" "$@"\n' "$real_bk" >"$work/bk" && chmod +x "$work/bk"
bk=$work/bk
bgpid=
trap '[ -n "$bgpid" ] && kill -INT "$bgpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH OMPI_COMM_WORLD_SIZE PMI_SIZE PMIX_SIZE
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

# expect NAME COMMAND...: the command succeeds
expect() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}
# has FILE PATTERN: FILE is a regular file (never a FIFO left there) that matches PATTERN
has() { [ -f "$1" ] && grep -q -- "$2" "$1"; }

head -c 60000 "$src/core/train/train.c" >"$work/corpus.txt"
tiny='"model.layers=1", "model.heads=2", "model.dim=16", "train.length=16", "train.batch=2", "train.steps=2",
       "train.warmup=1", "train.eval_every=0", "train.eval_batches=1", "train.log_every=1", "run.threads=1"'
data="\"data.paths=[\\\"$work/corpus.txt\\\"]\""
# sweep NAME [EXTRA TOML...]: a sweep file $work/NAME.toml (out_dir out-NAME) with one alibi variant,
# then the extra lines (more keys of that variant, more tables); $data is the corpus setting
sweep() {
    local name=$1
    shift
    cat >"$work/$name.toml" <<EOF
base = "$src/examples/demo_alibi.toml"
[sweep]
out_dir = "out-$name"
set = [$tiny, $data]
[eval]
lengths = [16]
tokens = 256
[[variant]]
name = "alibi"
term = [{plugin = "alibi"}]
EOF
    printf '%s\n' "$@" >>"$work/$name.toml"
}

# --- 1. plugins that crash, exit or hang in create() when the sweep checks their terms ----------------
sweep bad '[[variant]]' 'name = "crash"' 'term = [{plugin = "checkbad_crash", init = -1.0}]' \
    '[[variant]]' 'name = "exit"' 'term = [{plugin = "checkbad_exit", init = -1.0}]' \
    '[[variant]]' 'name = "hang"' 'term = [{plugin = "checkbad_hang", init = -1.0}]'
sed -i 's/^out_dir = "out-bad"/&\nseeds = [1, 2]/' "$work/bad.toml" # line 4: the crash variant's term is on line 15
export BIASKIT_PLUGIN_PATH=$testplugins
start=$(date +%s)
check "plugin crash: --dry-run lists the runs that cannot train (exit 1)" 1 \
    "^    cannot train: .*bad.toml:15:1: .*\[\[term\]\] #1 \(checkbad_crash\): plugin 'checkbad_crash' .* in create\(\): the plugin code crashed with signal 11 \(SIGSEGV" \
    "$bk" sweep "$work/bad.toml" --dry-run --plugin-timeout 3
secs=$(($(date +%s) - start))
# the seeds of a variant give the plugins the same model and terms: checked once (one time limit, not 2)
if [ "$secs" -lt 6 ]; then ok "a hanging variant costs one time limit for all its seeds (${secs} s)"; else bad "the check took ${secs} s"; fi
out=$("$bk" sweep "$work/bad.toml" --plugin-timeout 2 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "^sweep: 8 runs: 2 done (0 before this sweep), 6 failed$" <<<"$out"; then
    ok "plugins that crash, exit, hang: the sweep goes on; 2 done, 6 failed, exit 1"
else
    bad "plugins that crash, exit, hang (exit $rc)" "$out"
fi
expect "crash: the run's failure names the sweep file's line, the plugin and the signal" \
    grep -q "^  FAILED crash-corpus-s2: $work/bad.toml:15:1: run 'crash-corpus-s2', variant 'crash', .*plugin 'checkbad_crash' ('$testplugins/biaskit_checkbad_crash.so'), term 'checkbad_crash', in create(): the plugin code crashed with signal 11 (SIGSEGV" <<<"$out"
expect "exit: names the plugin and the exit status" \
    grep -q "^  FAILED exit-corpus-s1: .*plugin 'checkbad_exit' .*in create(): the plugin code ended the process (exit status 3)" <<<"$out"
expect "hang: names the plugin and the time limit (--plugin-timeout 2)" \
    grep -q "^  FAILED hang-corpus-s1: .*plugin 'checkbad_hang' .*in create(): the plugin code did not finish within 2 s (killed)" <<<"$out"
d=$work/out-bad
expect "status.json of a crashed run: failed, naming the plugin" grep -q '"state":"failed","error":".*plugin .checkbad_crash.*crashed with signal 11' "$d/crash-corpus-s1/status.json"
expect "status.json of a hung run: failed, naming the plugin" grep -q '"state":"failed","error":".*plugin .checkbad_hang.*did not finish' "$d/hang-corpus-s2/status.json"
expect "the other runs are done" bash -c "grep -q '\"state\":\"done\"' '$d/alibi-corpus-s1/status.json' && grep -q '\"state\":\"done\"' '$d/alibi-corpus-s2/status.json' && test -s '$d/alibi-corpus-s2/eval.json'"
expect "sweep.json lists every run" test "$(grep -c '"name":' "$d/sweep.json")" -eq 8
check "a normal refusal is still the sweep file's line and the option" 1 \
    "^  FAILED bad-corpus-s1: .*opt.toml:12:1: run 'bad-corpus-s1', variant 'bad', .*\[\[term\]\] #1 \(checkbad_grad\) option 'init': expected a slope >= 0, got -1" \
    bash -c "sed -e 's/out-bad/out-opt/' -e '/^\[\[variant\]\]/,\$d' '$work/bad.toml' >'$work/opt.toml'; printf '[[variant]]\nname = \"bad\"\nterm = [{plugin = \"checkbad_grad\", init = -1.0}]\n' >>'$work/opt.toml'; '$bk' sweep '$work/opt.toml' --only 'bad-*'"
check "--plugin-timeout: a positive number of seconds" 2 "plugin-timeout: expected an integer in \\[1, 86400\\], got .0." "$bk" sweep "$work/bad.toml" --plugin-timeout 0
unset BIASKIT_PLUGIN_PATH

# --- 5. files that are not regular files: refused by name, never read or blocked on ------------------
mkfifo "$work/pipe.toml"
check "a sweep file that is a FIFO is refused" 1 "'$work/pipe.toml' is a FIFO" timeout 20 "$bk" sweep "$work/pipe.toml"
check "a sweep file that is /dev/zero is refused" 1 "'/dev/zero' is a character device" timeout 20 "$bk" sweep /dev/zero
printf 'base = "pipe.toml"\n' >"$work/fifobase.toml"
check "a base file that is a FIFO is refused, naming the sweep file's line" 1 "fifobase.toml:1:8: base: .*pipe.toml' is a FIFO" \
    timeout 20 "$bk" sweep "$work/fifobase.toml"
sweep fifo
"$bk" sweep "$work/fifo.toml" >/dev/null 2>&1 # (the sweep file, now regular) done once
f=$work/out-fifo/alibi-corpus-s1
rm -f "$f/status.json" "$f/train.log" && mkfifo "$f/status.json" "$f/train.log"
out=$(timeout 30 "$bk" sweep "$work/fifo.toml" 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "FAILED alibi-corpus-s1: run 'alibi-corpus-s1': its log '$f/train.log' is a FIFO (named pipe); expected a regular file" <<<"$out"; then
    ok "status.json and train.log FIFOs: the run fails naming its log (no hang, exit 1)"
else
    bad "status.json and train.log FIFOs (exit $rc)" "$out"
fi
expect "... the FIFO status.json is named in a warning" grep -q "warning: status file '$f/status.json' is a FIFO" <<<"$out"
expect "... and the failure is written to status.json (which replaced the FIFO)" has "$f/status.json" '"state":"failed","error":"run .alibi-corpus-s1.: its log'
rm -f "$f/train.log" "$f/status.json" "$f/experiment.toml" && mkfifo "$f/experiment.toml"
check "experiment.toml a FIFO: the run fails naming it (no hang)" 1 \
    "FAILED alibi-corpus-s1: run 'alibi-corpus-s1': run experiment file '$f/experiment.toml' is a FIFO" \
    timeout 30 "$bk" sweep "$work/fifo.toml"
rm -f "$f/experiment.toml"
check "... then the sweep mends the run" 0 "1 done" "$bk" sweep "$work/fifo.toml"
# the report
r=$work/out-fifo
mv "$r/sweep.json" "$r/sweep.json.real" && mkfifo "$r/sweep.json"
check "report: sweep.json a FIFO is refused by name" 1 "sweep index '$r/sweep.json' is a FIFO" timeout 20 "$bk" report "$r"
rm "$r/sweep.json" && mv "$r/sweep.json.real" "$r/sweep.json"
mv "$f/eval.json" "$f/eval.json.real" && mkfifo "$f/eval.json"
check "report: eval.json a FIFO: the run is listed with why (no hang)" 0 "runs: 1, 0 finished" timeout 20 "$bk" report "$r"
expect "... report.md names it" grep -q "evaluation file '$f/eval.json' is a FIFO" "$r/report/report.md"
rm "$f/eval.json" && mv "$f/eval.json.real" "$f/eval.json"

# metrics.jsonl of a variant that learns its mixing weights, pointed at /dev/zero
sweep mix '[[variant]]' 'name = "kmix"' 'term = [{plugin = "alibi"}, {plugin = "kerple"}]' \
    'attention.mixing = "kernel"' 'attention.learn_weights = true'
sed -i 's/"train.steps=2"/"train.steps=3"/' "$work/mix.toml"
check "a sweep with learned mixing weights" 0 "2 done" "$bk" sweep "$work/mix.toml" --only 'kmix-*' --only 'alibi-*'
m=$work/out-mix/kmix-corpus-s1
cp "$m/metrics.jsonl" "$work/metrics.saved"
rm "$m/metrics.jsonl" && ln -s /dev/zero "$m/metrics.jsonl"
check "report: metrics.jsonl -> /dev/zero is refused by name (no growth)" 0 "metrics file '$m/metrics.jsonl' is a character device" \
    timeout 20 "$bk" report "$work/out-mix"

# --- 15. duplicated steps in metrics.jsonl: each step once, from the last training ---------------------
rm "$m/metrics.jsonl"
# a training resumed from step 1 logged steps 2 and 3 again, with other weights
{ cat "$work/metrics.saved"; grep -E '"step": ?[23],' "$work/metrics.saved" | sed 's/"mix": {"token": \[[^]]*\]/"mix": {"token": [0.125, 0.875]/'; } >"$m/metrics.jsonl"
check "report: metrics logged again from an earlier step" 0 "figures: [0-9]+ drawn" "$bk" report "$work/out-mix"
dat=$(ls "$work"/out-mix/report/mix-*kmix*.dat 2>/dev/null | head -1)
steps=$(grep -vE '^(#|$)' "$dat" 2>/dev/null | awk '{print $1}' | head -3 | tr '\n' ' ')
if [ "$steps" = "1 2 3 " ]; then ok "the mixing curve has each step once, increasing ($steps)"; else bad "mixing curve steps: '$steps'" "$(cat "$dat" 2>&1)"; fi
expect "... with the last training's values" grep -qE '^3 0\.125$' "$dat"
expect "... and a note in the report" grep -q "steps logged again from step 2 .*the records of the last training are drawn" "$work/out-mix/report/report.md"

# --- 9. the report: an evaluation of another step than the checkpoint --------------------------------
k=$work/out-mix/alibi-corpus-s1
"$bk" train --resume "$k/checkpoint.safetensors" --set train.steps=5 --plain >/dev/null 2>&1
check "report: an eval.json of step 3 beside a checkpoint of step 5 (exit 0, listed)" 0 "runs: 2, 1 finished, 1 failed" \
    "$bk" report "$work/out-mix"
expect "... report.md says which step each is" grep -q "| alibi-corpus-s1 | alibi | .*eval.json is of step 3 but the checkpoint is at step 5" "$work/out-mix/report/report.md"
expect "... and its loss is not in the table" grep -q '^corpus,,alibi,non-overlapping,16,1,0,' "$work/out-mix/report/results.csv"

# --- 9. two sweeps on one directory: the second is refused naming the holder ------------------------------
sweep lock
sed -i 's/"train.steps=2"/"train.steps=100000"/' "$work/lock.toml"
"$real_bk" sweep "$work/lock.toml" >"$work/lock.log" 2>&1 &
bgpid=$!
for _ in $(seq 1500); do # until the first sweep holds the lock and its run trains (30 s at most)
    grep -q '^step ' "$work/out-lock/alibi-corpus-s1/train.log" 2>/dev/null && break
    sleep 0.02
done
check "a second sweep of the same directory is refused, naming the first's pid" 1 \
    "the sweep directory '$work/out-lock' is in use by another sweep \(pid $bgpid, lock $work/out-lock/.sweep.lock\)" \
    "$bk" sweep "$work/lock.toml"
expect "... and the run it would have trained is left to the first" has "$work/out-lock/alibi-corpus-s1/status.json" '"state":"training"'
check "--dry-run still works beside a running sweep" 0 "^alibi-corpus-s1  \[training\]" "$bk" sweep "$work/lock.toml" --dry-run
kill -INT $bgpid
wait $bgpid
bgpid=
expect "after the first ends, the lock is free" flock -n "$work/out-lock/.sweep.lock" true

# --- 9. MPI launchers: refused with advice, nothing written -------------------------------------------
sweep mpi
check "mpirun -np 2 biaskit sweep (OMPI_COMM_WORLD_SIZE) is refused with advice" 2 \
    "started by an MPI launcher \(OMPI_COMM_WORLD_SIZE=2\): each of its processes would run the whole sweep.*without mpirun" \
    env OMPI_COMM_WORLD_SIZE=2 "$bk" sweep "$work/mpi.toml"
check "srun / MPICH (PMI_SIZE) is refused" 2 "started by an MPI launcher \(PMI_SIZE=2\)" env PMI_SIZE=2 "$bk" sweep "$work/mpi.toml"
expect "... nothing written" test ! -e "$work/out-mpi"

# --- 15. --only accumulates; the sweep directory; [run] out_dir; name clashes ----------------------------
sweep only '[[variant]]' 'name = "nope"' 'term = []' '[[variant]]' 'name = "k"' 'term = [{plugin = "kerple"}]'
check "two --only select the runs of both" 0 "^2 runs \(dry run" "$bk" sweep "$work/only.toml" --dry-run --only 'alibi-*' --only 'nope-*'
expect "... and only them" bash -c "! '$bk' sweep '$work/only.toml' --dry-run --only 'alibi-*' --only 'nope-*' | grep -q '^k-base'"
check "--only matching nothing names every pattern" 2 "matches --only 'x\*', 'y\*'" "$bk" sweep "$work/only.toml" --only 'x*' --only 'y*'

sweep file
touch "$work/out-file"
check "--dry-run: out_dir a regular file is refused, naming the line" 1 \
    "file.toml:3:11: \[sweep\] out_dir: the sweep directory '$work/out-file' is a regular file; expected a directory" \
    "$bk" sweep "$work/file.toml" --dry-run
sed -i 's|^out_dir = "out-file"|out_dir = "out-file/sub"|' "$work/file.toml"
check "--dry-run: out_dir under a regular file cannot be created" 1 \
    "\[sweep\] out_dir: the sweep directory '$work/out-file/sub' cannot be created: '$work/out-file' is a regular file" \
    "$bk" sweep "$work/file.toml" --dry-run

sweep od
sed -i 's|"run.threads=1"|"run.threads=1", "run.out_dir=elsewhere"|' "$work/od.toml"
check "[sweep] set run.out_dir is refused, naming where" 1 \
    "od.toml:5:[0-9]+: runs 'alibi-\*', \[sweep\], 'run.out_dir=elsewhere': \[run\] out_dir: each run writes its own directory" \
    "$bk" sweep "$work/od.toml" --dry-run
sweep od2 '[grid]' '"run.out_dir" = ["a", "b"]'
check "[grid] run.out_dir is refused, naming where" 1 "od2.toml:13:18: runs 'alibi-\*', \[grid\], 'run.out_dir=\"a\"': \[run\] out_dir" \
    "$bk" sweep "$work/od2.toml" --dry-run
sweep od3 'run.out_dir = "x"'
check "a variant's run.out_dir is refused" 1 "od3.toml:12:5: runs 'alibi-\*', variant 'alibi', 'run.out_dir=\"x\"': \[run\] out_dir" \
    "$bk" sweep "$work/od3.toml" --dry-run
expect "... nothing written" bash -c "! test -e '$work/out-od' && ! test -e '$work/out-od2' && ! test -e '$work/out-od3'"

sweep clash '[[variant]]' 'name = "a-b"' '[[variant]]' 'name = "a"' '[[corpus]]' 'name = "c"' '[[corpus]]' 'name = "b-c"'
check "a variant/corpus name clash names both pairs, not grid keys" 1 \
    "clash.toml:[0-9]+:8: variant 'a-b' with corpus 'c' and variant 'a' with corpus 'b-c' make the same run name 'a-b-c-s[0-9]+'" \
    "$bk" sweep "$work/clash.toml" --dry-run
sweep gclash '[grid]' '"train.lr" = [0.001, 1e-3]'
check "a grid clash names the grid points" 1 "\[grid\]: the grid points \(train.lr=0.001\) and \(train.lr=0.001\) both name the run" \
    "$bk" sweep "$work/gclash.toml" --dry-run

# --- 15. one data file twice in data.paths (its text would be in training and validation) --------------
data="\"data.paths=[\\\"$work/corpus.txt\\\", \\\"$work/./corpus.txt\\\"]\"" sweep dup
expect "(the sweep file lists the data file twice)" grep -q "corpus.txt.*corpus.txt" "$work/dup.toml"
check "the same data file twice in data.paths: the run fails naming both entries" 1 \
    "FAILED alibi-corpus\+corpus-s1: train: data: paths entry 1 \('$work/corpus.txt'\) and paths entry 2 \('$work/corpus.txt'\) are the same file" \
    "$bk" sweep "$work/dup.toml"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
