#!/usr/bin/env bash
# Data-parallel speed-up on this machine (docs/scaling.md): `biaskit train` on the same experiment with
# one process using every core, then with `mpirun -np N` (each process its share of the cores), for
# N = 1 2 (NPROCS), interleaved round by round; the best tokens/s of ROUNDS rounds per N, from the
# "done: ... (X tokens/s)" line (training steps, plus the final validation of eval_batches = 1 batch
# and the checkpoint, for every N alike).
#
#   cmake --build build -j2 --target biaskit
#   bash bench/scaling.sh
#   ROUNDS=5 STEPS=30 NPROCS="1 2" BUILD=build bash bench/scaling.sh
#
# The model is benchmark size (a) of docs/performance.md: 4 layers x 256 wide x 8 heads, T = 256,
# global batch 8, ALiBi; the data are this repository's Markdown files, repeated (byte-level tokens).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
NPROCS=${NPROCS:-1 2}
bk=$BUILD/biaskit
[[ -x $bk ]] || { echo "scaling.sh: $bk not found (cmake --build $BUILD --target biaskit)" >&2; exit 2; }
"$bk" --version | grep -q "^processes: MPI" || { echo "scaling.sh: $bk was built without MPI" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "scaling.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
: >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 2000000 ]; do
    cat "$ROOT"/README.md "$ROOT"/docs/*.md >>"$work/corpus/text.txt"
done
printf '[model]\nlayers = 4\nheads = 8\ndim = 256\n[train]\nlength = 256\nbatch = 8\nsteps = %d\nwarmup = 2\n' "$STEPS" >"$work/exp.toml"
printf 'log_every = 1000\neval_every = 0\neval_batches = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' >>"$work/exp.toml"

declare -A best
for round in $(seq "$ROUNDS"); do
    for n in $NPROCS; do
        if [ "$n" -eq 1 ]; then
            out=$("$bk" train "$work/exp.toml" --set run.device=cpu --out "$work/run" --plain 2>&1)
        else
            out=$(mpirun -np "$n" --oversubscribe "$bk" train "$work/exp.toml" --set run.device=cpu --out "$work/run" --plain 2>&1)
        fi
        rate=$(sed -n 's/^done: .*(\([0-9.]*\) tokens\/s).*/\1/p' <<<"$out")
        [ -n "$rate" ] || { echo "scaling.sh: N = $n failed:" >&2; echo "$out" >&2; exit 1; }
        echo "round $round, N = $n: $rate tokens/s" >&2
        if [ -z "${best[$n]:-}" ] || awk "BEGIN { exit !($rate > ${best[$n]}) }"; then
            best[$n]=$rate
        fi
        rm -rf "$work/run"
    done
done
cores=$(nproc)
echo "machine: $cores cores ($(lscpu | sed -n 's/^Model name: *//p')); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; best of $ROUNDS rounds, $STEPS steps"
echo
echo "| processes | threads each | tokens/s | speed-up |"
echo "|---:|---:|---:|---:|"
first=$(echo "$NPROCS" | awk '{print $1}')
for n in $NPROCS; do
    threads=$((cores / n > 1 ? cores / n : 1))
    awk -v n="$n" -v t="$threads" -v r="${best[$n]}" -v b="${best[$first]}" \
        'BEGIN { printf "| %d | %d | %.0f | %.2f |\n", n, t, r, r / b }'
done
