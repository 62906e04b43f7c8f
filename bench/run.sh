#!/usr/bin/env bash
# Training-step benchmark: biaskit (bench_train) against the same model in PyTorch eager
# (bench_torch.py), at three sizes, each measurement REPEATS times keeping the best; prints a markdown
# table. See docs/performance.md.
#
#   bash bench/run.sh                  # everything (about 15 minutes on 2 cores)
#   SIZES="a c" REPEATS=1 bash bench/run.sh
#
# Environment: BUILD_DIR (default ./build), THREADS (2), REPEATS (3), STEPS (10), WARMUP (3),
# SIZES ("a b c"), PYTHON (/usr/bin/python3), LOG_DIR (default $BUILD_DIR/bench-logs).
#
# PyTorch is measured twice: as it comes (OMP_NUM_THREADS=THREADS, torch.set_num_threads(THREADS))
# and with OMP_WAIT_POLICY=PASSIVE. torch 1.13 here runs its elementwise kernels on libgomp and its
# matmuls on OpenBLAS's pthread build, two thread pools that both spin; on a 2-core machine they take
# the cores from each other, and the passive policy is what a user would set after noticing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
SIZES=${SIZES:-"a b c"}
PY=${PYTHON:-/usr/bin/python3}
LOGS=${LOG_DIR:-$BUILD/bench-logs}
mkdir -p "$LOGS"

# --- build ------------------------------------------------------------------------------------------
BIN=$BUILD/bench_train
if cmake --build "$BUILD" --target bench_train -j2 >"$LOGS/build.log" 2>&1; then
    echo "built $BIN (CMake target bench_train)" >&2
else
    MANUAL=$BUILD/bench_train_manual
    echo "run.sh: the CMake target bench_train is not in $BUILD yet (see $LOGS/build.log); re-running" >&2
    echo "        'cmake $BUILD' once picks up bench/CMakeLists.txt. Compiling by hand into $MANUAL" >&2
    echo "        against $BUILD/core/libbiaskit_core.a instead." >&2
    cmake --build "$BUILD" --target biaskit_core biaskit_plugin_alibi -j2 >>"$LOGS/build.log" 2>&1 || {
        echo "run.sh: building biaskit_core / the alibi plugin failed; see $LOGS/build.log" >&2
        exit 1
    }
    OB=/usr/lib/x86_64-linux-gnu/openblas-openmp
    CUDA_LIBS=()
    if nm -A "$BUILD/core/libbiaskit_core.a" 2>/dev/null | grep -q ' U cudaMalloc'; then
        CUDADIR=$(sed -n 's/^CUDAToolkit_LIBRARY_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt" | head -1)
        CUDADIR=${CUDADIR:-/usr/local/cuda/lib64}
        # shellcheck disable=SC2054 # the commas belong to -Wl,-rpath,DIR
        CUDA_LIBS=(-L"$CUDADIR" -Wl,-rpath,"$CUDADIR" -lcudart)
    fi
    gcc -std=c11 -Wall -Wextra -O2 -fopenmp -I"$ROOT/core" -I"$ROOT/sdk/include" \
        -I/usr/include/x86_64-linux-gnu/openblas-openmp "$ROOT/bench/bench_train.c" \
        "$BUILD/core/libbiaskit_core.a" -L$OB -Wl,-rpath,$OB -lopenblas -ltomlplusplus -lcjson -ldl -lm -lstdc++ \
        "${CUDA_LIBS[@]}" -o "$MANUAL"
    BIN=$MANUAL
fi

# --- sizes: label layers dim heads length batch ------------------------------------------------------
declare -A SPEC=(
    [a]="4 256 8 256 8"
    [b]="6 512 8 512 4"
    [c]="2 128 4 128 16"
)

# value of key=... in a RESULT line
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# best (highest tokens_per_s) RESULT line of a log file list
best_result() {
    local best="" bt=-1 line t
    for f in "$@"; do
        line=$(grep '^RESULT ' "$f" | tail -1) || continue
        t=$(field "$line" tokens_per_s)
        if awk -v a="$t" -v b="$bt" 'BEGIN { exit !(a > b) }'; then best=$line bt=$t; fi
    done
    echo "$best"
}

run_one() { # log_file command...
    local log=$1
    shift
    echo "# $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg): $*" >"$log"
    if ! "$@" >>"$log" 2>&1; then
        echo "run.sh: failed: $* (see $log)" >&2
        tail -5 "$log" >&2
        exit 1
    fi
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; threads $THREADS; best of $REPEATS;" \
     "$STEPS steps after $WARMUP warm-up" >&2
for s in $SIZES; do
    [[ -n ${SPEC[$s]:-} ]] || { echo "run.sh: unknown size '$s' (a, b, c)" >&2; exit 2; }
    read -r L C H T B <<<"${SPEC[$s]}"
    args=(--layers "$L" --dim "$C" --heads "$H" --length "$T" --batch "$B" --steps "$STEPS" --warmup "$WARMUP"
          --threads "$THREADS" --alibi --name "$s")
    # interleaved, so that a noisy minute hurts every engine alike
    for r in $(seq 1 "$REPEATS"); do
        echo "size $s ($L x $C x $H heads, T=$T, batch $B): run $r/$REPEATS" >&2
        run_one "$LOGS/$s.biaskit.$r.log" env OMP_NUM_THREADS="$THREADS" "$BIN" "${args[@]}"
        run_one "$LOGS/$s.torch.$r.log" env OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
            "$PY" "$ROOT/bench/bench_torch.py" "${args[@]}"
        run_one "$LOGS/$s.torchpassive.$r.log" env OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
            OMP_WAIT_POLICY=PASSIVE "$PY" "$ROOT/bench/bench_torch.py" "${args[@]}"
    done
done

# --- tables ------------------------------------------------------------------------------------------
pct() { awk -v x="$1" 'BEGIN { printf "%.1f", 100 * x }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
num() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }

echo
echo "Tokens per second, best of $REPEATS runs ($THREADS threads; ratio = biaskit / PyTorch):"
echo
echo "| size | biaskit tok/s | PyTorch tok/s | ratio | PyTorch tok/s, OMP_WAIT_POLICY=PASSIVE | ratio | attention % | matmul % | GELU % |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for s in $SIZES; do
    read -r L C H T B <<<"${SPEC[$s]}"
    bk=$(best_result "$LOGS/$s".biaskit.*.log)
    pt=$(best_result "$LOGS/$s".torch.*.log)
    pp=$(best_result "$LOGS/$s".torchpassive.*.log)
    bt=$(field "$bk" tokens_per_s) tt=$(field "$pt" tokens_per_s) tp=$(field "$pp" tokens_per_s)
    echo "| ($s) $L x $C x $H heads, T=$T, batch $B | $(num "$bt") | $(num "$tt") | $(ratio "$bt" "$tt") |" \
         "$(num "$tp") | $(ratio "$bt" "$tp") | $(pct "$(field "$bk" attention_frac)") |" \
         "$(pct "$(field "$bk" matmul_frac)") | $(pct "$(field "$bk" gelu_frac)") |"
done
echo
echo "attention / matmul / GELU %: biaskit's kernels (instrumented pass) as a share of its median step."
echo
echo "Where the step goes, % of the median step (biaskit: instrumented pass; PyTorch, passive: kernels timed"
echo "in isolation at the same shapes):"
echo
echo "| size | engine | ms/step | attention | matmul | GELU | LayerNorm | rest |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for s in $SIZES; do
    bk=$(best_result "$LOGS/$s".biaskit.*.log)
    pp=$(best_result "$LOGS/$s".torchpassive.*.log)
    for e in biaskit torch; do
        line=$bk
        [[ $e == torch ]] && line=$pp
        a=$(field "$line" attention_frac) m=$(field "$line" matmul_frac) g=$(field "$line" gelu_frac)
        n=$(field "$line" layernorm_frac)
        rest=$(awk -v a="$a" -v m="$m" -v g="$g" -v n="$n" 'BEGIN { printf "%.4f", 1 - a - m - g - n }')
        echo "| ($s) | $([[ $e == torch ]] && echo "PyTorch (passive)" || echo biaskit) |" \
             "$(awk -v x="$(field "$line" ms_per_step)" 'BEGIN { printf "%.1f", x }') | $(pct "$a") | $(pct "$m") |" \
             "$(pct "$g") | $(pct "$n") | $(pct "$rest") |"
    done
done
echo
echo "logs: $LOGS"
