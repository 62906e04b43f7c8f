#!/usr/bin/env bash
# Data-parallel training and evaluation with MPI (docs/scaling.md), with `mpirun -np 2 --oversubscribe`
# on a tiny model: N = 2 against N = 1 for the same global batch (ALiBi, and a learnable KERPLE mixed by
# kernel with an ALiBi term, learnable weights), N = 2 twice to the bit, resuming across N, the same
# evaluation numbers to the bit, refused set-ups, and a rank killed mid-run.
# usage: test_dist.sh <biaskit binary> <mpirun>
set -u
bk=$1 mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
# CI runs as root; Open MPI refuses root without these
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
mpi() { "$mpirun" -np "$1" --oversubscribe "${@:2}"; }

# Per-step losses of two runs agree within this bound (absolute, nats). N = 2 averages two half-batch
# gradients where N = 1 takes one mean over the batch: the same mathematics, summed in another order
# (fp32), so the losses drift apart by rounding only: on these models the printed losses (6 decimals)
# differ by at most 1e-6 over 20 steps.
bound=1e-4

mkdir -p "$work/corpus" && : >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 60000 ]; do
    cat "$(dirname "${BASH_SOURCE[0]}")/../README.md" >>"$work/corpus/text.txt"
done
base='[model]\nlayers = 2\nheads = 4\ndim = 32\n[train]\nlength = 32\nbatch = 4\nsteps = 20\nwarmup = 2\nlog_every = 5\neval_every = 10\ncheckpoint_every = 5\n[data]\npaths = ["corpus"]\n'
printf "$base"'[[term]]\nplugin = "alibi"\n' >"$work/alibi.toml"
printf "$base"'[attention]\nmixing = "kernel"\nlearn_weights = true\n[[term]]\nplugin = "kerple"\n[[term]]\nplugin = "alibi"\n' >"$work/mix.toml"

# losses A B: the per-step training losses of two metrics logs agree within $bound, step for step
losses() {
    python3 - "$1" "$2" "$bound" <<'EOF'
import json, sys
def steps(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
a, b, bound = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys() and len(a) == 20, f"steps differ: {sorted(a)} vs {sorted(b)}"
worst = max(abs(a[s] - b[s]) for s in a)
print(f"max |loss difference| over {len(a)} steps: {worst:.3g} (bound {bound:g})")
sys.exit(0 if worst <= bound else 1)
EOF
}

for exp in alibi mix; do
    check "$exp: one process" 0 "done: 20 steps" "$bk" train "$work/$exp.toml" --out "$work/$exp-1" --plain
    check "$exp: two processes" 0 "processes: 2 \(MPI\), each 2 of the 4 rows of every batch" \
        mpi 2 "$bk" train "$work/$exp.toml" --out "$work/$exp-2" --plain
    check "$exp: N = 2 and N = 1 give the same losses within $bound" 0 "max \|loss difference\|" \
        losses "$work/$exp-1/metrics.jsonl" "$work/$exp-2/metrics.jsonl"
    check "$exp: N = 2 again" 0 "done: 20 steps" mpi 2 "$bk" train "$work/$exp.toml" --out "$work/$exp-2b" --plain
    check "$exp: N = 2 twice is bit-identical (checkpoints)" 0 "" \
        cmp "$work/$exp-2/checkpoint.safetensors" "$work/$exp-2b/checkpoint.safetensors"
    check "$exp: N = 2 twice, the same metrics" 0 "" bash -c "diff <(grep -v tokens_per_s '$work/$exp-2/metrics.jsonl') <(grep -v tokens_per_s '$work/$exp-2b/metrics.jsonl') && diff <(grep -o '\"loss\": [^,]*' '$work/$exp-2/metrics.jsonl') <(grep -o '\"loss\": [^,]*' '$work/$exp-2b/metrics.jsonl')"
done
check "rank 0 alone writes the log: one banner for two processes" 0 "^1$" \
    grep -c "^train: " <<<"$(mpi 2 "$bk" train "$work/alibi.toml" --out "$work/once" --plain --stop-after 1 2>&1)"

# resume across N: 10 steps with one N, the rest with the other, against the straight run
check "stop after 10 steps with N = 2" 0 "stopped at step 10" \
    mpi 2 "$bk" train "$work/alibi.toml" --out "$work/r21" --plain --stop-after 10
check "resume the N = 2 checkpoint with N = 1" 0 "done: 20 steps" \
    "$bk" train --resume "$work/r21/checkpoint.safetensors" --plain
check "2 -> 1 matches the straight N = 2 run within $bound" 0 "max" \
    losses "$work/alibi-2/metrics.jsonl" "$work/r21/metrics.jsonl"
check "stop after 10 steps with N = 1" 0 "stopped at step 10" \
    "$bk" train "$work/alibi.toml" --out "$work/r12" --plain --stop-after 10
check "resume the N = 1 checkpoint with N = 2" 0 "done: 20 steps" \
    mpi 2 "$bk" train --resume "$work/r12/checkpoint.safetensors" --plain
check "1 -> 2 matches the straight N = 1 run within $bound" 0 "max" \
    losses "$work/alibi-1/metrics.jsonl" "$work/r12/metrics.jsonl"

# evaluation: the batches of chunks shared out, the sums added in order -- the same bits as one process
# with the same threads per process (all but the wall times and the memory high-water mark: timed())
ck=$work/mix-2/checkpoint.safetensors
timed() { sed -E -e '/^(speed|peak memory): /d' -e 's/"(seconds|tokens_per_second|peak_rss_bytes)": [0-9.e+-]+/"\1": T/g' "$1"; }
export -f timed
check "eval, one process" 0 "" "$bk" eval "$ck" --lengths 32,64,128 --sliding 16 --set run.threads=1 --json "$work/e1s.json"
check "eval, two processes" 0 "" mpi 2 "$bk" eval "$ck" --lengths 32,64,128 --sliding 16 --set run.threads=1 --json "$work/e2s.json"
check "eval: sliding windows, N = 2 equals N = 1 to the bit" 0 "" diff <(timed "$work/e1s.json") <(timed "$work/e2s.json")
"$bk" eval "$ck" --lengths 32,64,128 --set run.threads=1 --json "$work/e1.json" --positions "$work/p1.csv" >"$work/e1.txt" 2>&1
mpi 2 "$bk" eval "$ck" --lengths 32,64,128 --set run.threads=1 --json "$work/e2.json" --positions "$work/p2.csv" >"$work/e2.txt" 2>&1
check "eval: chunks and position losses, N = 2 equals N = 1 to the bit" 0 "" \
    bash -c "diff <(timed '$work/e1.json') <(timed '$work/e2.json') && cmp '$work/p1.csv' '$work/p2.csv' && diff <(timed '$work/e1.txt') <(timed '$work/e2.txt')"
check "eval: rank 0 alone prints the table" 0 "^1$" grep -c "^  length" "$work/e2.txt"

# refused set-ups, named
check "a batch that N does not divide" 1 "alibi.toml: \[train\] batch = 4 is not a multiple of the 3 processes" \
    mpi 3 "$bk" train "$work/alibi.toml" --out "$work/bad3" --plain
check "the error is printed once" 0 "^1$" bash -c "'$mpirun' -np 3 --oversubscribe '$bk' train '$work/alibi.toml' --out '$work/bad3b' --plain 2>&1 | grep -c 'biaskit: error:'"
check "a device backend" 1 "2 processes: data-parallel training runs on the CPU backend; set \[run\] device = \"cpu\"" \
    mpi 2 "$bk" train "$work/alibi.toml" --set run.device=emulated --out "$work/bad-dev" --plain

# ranks that disagree stop within seconds, naming the rank and the first line that differs (before: a
# different model.dim corrupted the heap, a different train.steps or plugin hung for ever, a different lr
# trained silently). MPMD: rank 0 runs one command line, rank 1 another.
mpmd() { timeout 60 "$mpirun" --oversubscribe -np 1 "${@:2:$1}" : -np 1 "${@:$(($1 + 2))}"; }
ta=("$bk" train "$work/alibi.toml" --plain)
for d in "model.dim=16:dim = 32" "train.steps=7:steps = 20" "train.lr=0.01:\[--set\] train.lr=0.01" "train.seed=5:\[--set\] train.seed=5"; do
    set_=${d%%:*} line=${d#*:}
    check "train: rank 1 with --set $set_ is stopped" 1 "rank 1: the experiment differs from rank 0's: .*'.*' \(rank 0: " \
        mpmd 6 "${ta[@]}" --out "$work/dis" "${ta[@]}" --out "$work/dis" --set "$set_"
done
# another build of the plugin: the same name, other bytes (a byte appended to the ELF file)
mkdir -p "$work/other-plugins" && cp "$(dirname "$bk")/plugins/biaskit_alibi.so" "$work/other-plugins/" &&
    printf 'x' >>"$work/other-plugins/biaskit_alibi.so"
check "train: rank 1 finds another plugin file on its own BIASKIT_PLUGIN_PATH" 1 \
    "rank 1: the experiment differs from rank 0's: '\[plugin of term 'alibi'\] alibi" \
    mpmd 6 "${ta[@]}" --out "$work/dis2" env BIASKIT_PLUGIN_PATH="$work/other-plugins" "${ta[@]}" --out "$work/dis2"
cp -r "$work/corpus" "$work/corpus2" && printf 'more text\n' >>"$work/corpus2/text.txt"
sed 's|"corpus"|"corpus2"|' "$work/alibi.toml" >"$work/alibi2.toml"
check "train: rank 1 with other data is stopped" 1 "rank 1: the (experiment|data) differs from rank 0's" \
    mpmd 6 "${ta[@]}" --out "$work/dis3" "$bk" train "$work/alibi2.toml" --plain --out "$work/dis3"
check "eval: rank 1 with other lengths is stopped" 1 "rank 1: the experiment or command line differs from rank 0's: '\[command line\] .*--lengths 64' \(rank 0: '\[command line\] .*--lengths 32'" \
    mpmd 5 "$bk" eval "$ck" --lengths 32 "$bk" eval "$ck" --lengths 64
check "eval: rank 1 without the checkpoint is stopped" 1 "error" \
    mpmd 5 "$bk" eval "$ck" --lengths 32 "$bk" eval "$work/none.safetensors" --lengths 32

# a rank killed mid-run: the job stops with Open MPI's message naming it, the last checkpoint is whole
mpi 2 "$bk" train "$work/alibi.toml" --set train.steps=100000 --out "$work/die" --plain >"$work/die.log" 2>&1 &
job=$!
for _ in $(seq 600); do
    [ -f "$work/die/checkpoint.safetensors" ] && grep -q '"step": 7,' "$work/die/metrics.jsonl" 2>/dev/null && break
    sleep 0.1
done
victim=
for p in $(pgrep -f "$bk train $work/alibi.toml --set train.steps=100000"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
done
if [ -n "$victim" ]; then
    kill -9 "$victim"
    wait "$job"
    rc=$?
    check "a killed rank stops the job (exit $rc)" 0 "^[1-9]" echo "$rc"
    check "the job's message names the rank and the signal" 0 "rank 1 .*(signal 9|Killed)" cat "$work/die.log"
    check "the last checkpoint is whole (it evaluates)" 0 "^ +32 +1\.00 " \
        "$bk" eval "$work/die/checkpoint.safetensors" --lengths 32 --tokens 2000
    check "and resumes" 0 "resuming from .* at step [0-9]+" \
        "$bk" train --resume "$work/die/checkpoint.safetensors" --stop-after 1 --plain
else
    kill "$job" 2>/dev/null
    bad "a killed rank: found no rank-1 process to kill" "$(cat "$work/die.log")"
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
