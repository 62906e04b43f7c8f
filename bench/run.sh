#!/usr/bin/env bash
# CPU benchmarks of biaskit against PyTorch, in one interleaved run (each measurement REPEATS times,
# interleaved across rows, keeping the best); prints markdown tables. See docs/performance.md.
#   1. training steps: biaskit (bench_train) against the same model in PyTorch (bench_torch.py), at
#      three sizes;
#   2. long-context attention: one causal attention layer with a distance bias, B 1, 4 heads of 32 (C
#      128), at LONG_LENGTHS: biaskit (bench_attention, --attention fused and materialized) against
#      PyTorch 2.x FlexAttention (torch.compile(flex_attention), the bias as a score_mod, a causal block
#      mask) and SDPA (the bias as a float mask; and without a bias, as a floor), ALiBi and KERPLE-log
#      (learnable r1, r2) tables, forward only and forward + backward (bench/long_context.py);
#   3. evaluation: forward passes (no backward) of the size (a) model (4 x 256 x 8 heads) at batch 1 and
#      EVAL_LENGTHS tokens: bench_train --eval against bench_torch.py --mode eval-flex / eval-sdpa;
#   4. a pretrained model (only when PRETRAINED_GGUF and PRETRAINED_CKPT name SmolLM2's GGUF file and its
#      imported checkpoint, scripts/models.py smollm2): evaluation at PRETRAINED_LENGTHS tokens and a training
#      step at PRETRAINED_TRAIN_LENGTH, biaskit against HF transformers (SDPA, float32) under $VENV, interleaved
#      (bench/pretrained_speed.py; transformers, gguf, tokenizers and accelerate are installed into $VENV when
#      missing), on PRETRAINED_TEXT (default docs/design.md).
#
#   bash bench/run.sh                          # everything (hours on 2 cores with 65536 tokens, see below)
#   SIZES="a c" REPEATS=1 bash bench/run.sh    # quicker
#   SKIP_TORCH2=1 bash bench/run.sh            # no PyTorch 2.x rows (no virtual environment needed)
#   SKIP_LONG=1 SKIP_EVAL=1 bash bench/run.sh  # the training-step tables only (the run before issue 29)
#   SKIP_TRAIN=1 LONG_LENGTHS="4096 16384" EVAL_LENGTHS=4096 bash bench/run.sh   # long context, shorter
#
# Environment: BUILD_DIR (default ./build), THREADS (2), REPEATS (3), STEPS (10), WARMUP (3),
# SIZES ("a b c"), PYTHON (the interpreter with Debian's torch 1.13, /usr/bin/python3),
# VENV (the virtual environment with PyTorch 2.x, ./.venv-bench), SKIP_TORCH2 (0), SKIP_TORCH1 (0; 1 leaves
# out the two PyTorch 1.13 rows, the slowest),
# TORCH2_PASSIVE (0: run the PyTorch 2.x rows with OMP_WAIT_POLICY=PASSIVE when 1),
# LOG_DIR (default $BUILD_DIR/bench-logs), EXTRA_BUILDS (build directories of other BLAS builds, e.g.
# "build-blas-mkl build-blas-scipy-openblas" as bench/blas.sh configures them: one more biaskit row each
# in the training-step table, run with OPENBLAS_CORETYPE=Haswell like the second row; empty by default).
# Parts: SKIP_TRAIN (0; 1 leaves out the training-step tables), SKIP_LONG (0; the long-context attention
# table), SKIP_EVAL (0; the evaluation table).
# Long-context attention: LONG_LENGTHS ("4096 16384 65536"), LONG_TABLES ("alibi kerple"), LONG_MODES
# ("fwd fwdbwd"), LONG_ATTENTION (biaskit's kernels, "fused materialized"), LONG_IMPLS (PyTorch's, "flex
# sdpa sdpa_nobias"), LONG_CORES (OPENBLAS_CORETYPE of the biaskit rows, "Haswell"; "auto" leaves it
# unset so that OpenBLAS chooses: one row per entry), LONG_REPS (timed calls per run, 1), LONG_WARMUP
# (untimed calls first, 1; FlexAttention always gets at least one, its compilation), LONG_MEM_GIB (14:
# PyTorch SDPA runs whose estimated peak exceeds it are refused; biaskit refuses runs over three
# quarters of the physical memory: materialized fwdbwd at 65536 saves 64 GiB of probabilities).
# Evaluation: EVAL_LENGTHS ("4096 16384 65536"), EVAL_ATTENTION (bench_train --attention, one row each:
# "fused materialized"; "auto", the engine's default choice, also works), EVAL_IMPLS ("eval-flex
# eval-sdpa"), EVAL_STEPS (timed forward passes per run, 1), EVAL_WARMUP (1), EVAL_CORES ("Haswell", as
# LONG_CORES).
#
# VENV is created on first use: `/usr/bin/python3 -m venv $VENV` and `pip install torch numpy` from
# PyPI (a CUDA build of torch: several GB to download, about 5 GB on disk, a few minutes). One already
# there (with torch and numpy importable) is reused as it is; delete it to get a newer torch.
#
# Rows, all with OMP_NUM_THREADS=THREADS (and torch.set_num_threads(THREADS) in PyTorch):
#   biaskit, OpenBLAS chooses  bench_train with OPENBLAS_CORETYPE unset: OpenBLAS's DYNAMIC_ARCH picks the
#                              kernels for this CPU (the core it picks is printed at the start); where it
#                              takes the CPU for an old one, bench_train starts again with the variable set
#                              (core/util/blas.h), and the label says "set by biaskit"
#   biaskit, Haswell           bench_train with OPENBLAS_CORETYPE=Haswell (the AVX2 kernels forced)
#   PyTorch 2.x eager          bench_torch.py --mode eager under $VENV: the nanoGPT-style attention
#   PyTorch 2.x sdpa           --mode sdpa: F.scaled_dot_product_attention with the ALiBi bias as its mask
#   PyTorch 2.x compile        --mode compile: torch.compile(model), inductor; the warm-up absorbs the
#                              compilation (at least 2 warm-up steps; about a minute per size the first
#                              time, less once inductor's cache in /tmp has the kernels)
#   PyTorch 1.13               Debian's python3-torch (PYTHON) eager, as it comes
#   PyTorch 1.13, passive      the same with OMP_WAIT_POLICY=PASSIVE. torch 1.13 runs its elementwise
#                              kernels on libgomp and its matmuls on OpenBLAS's pthread build, two thread
#                              pools that both spin; on a 2-core machine they take the cores from each
#                              other, and the passive policy is what a user would set after noticing.
# PyTorch 2.x's BLAS is MKL (linked into libtorch_cpu), elementwise kernels on its own libgomp; the
# script prints which BLAS each engine uses first. The breakdown ("where the step goes") is measured for
# biaskit (both kernel choices) and PyTorch 2.x eager; the other PyTorch rows run with --no-breakdown,
# which saves time (torch.compile has no breakdown at all).
#
# PyTorch 2.x runs without OMP_WAIT_POLICY by default: at size c on a quiet 2-core machine PASSIVE
# made torch 2.15 eager, sdpa and compile 15-25% slower (best of 3); it only won while other processes
# held the cores. TORCH2_PASSIVE=1 measures it anyway.
#
# Time: per size and repeat, 7 rows of WARMUP + STEPS steps, plus the breakdowns of 3 of them; size b
# and the 1.13 rows are the slowest. With the defaults the two recorded runs took about 28 and 44
# minutes on 2 cores (docs/performance.md; different machines), including the first torch.compile of
# each size (up to a minute or two). The 1.13 "as it comes" row costs about 5 of those minutes; the 1.13 and
# 2.x sdpa rows skip the breakdown to save time. A PyTorch 2.x row that fails (exit status in its log)
# is left out of the later repeats of that size and shows "-". The logs of a size are deleted when its
# first run starts, so that the tables never mix in an older run's.
#
# Long-context and evaluation rows: a row's cell is "-" when it gave no time, with the reason: "(mem)"
# too much memory (refused before allocating: biaskit's materialized forward + backward at 65536, SDPA's
# (H, T, T) masks at 16384 and up), "(n/a)" not supported (FlexAttention's backward: torch 2.x raises
# NotImplementedError "FlexAttention does not support backward on CPU"), "(fail)" anything else, with its
# log's last line printed under the table. Such a row is left out of the later repeats. Times: the best
# (lowest) of the REPEATS runs, each the minimum of LONG_REPS calls; ratios are PyTorch's time over
# biaskit's fused time (> 1: biaskit faster). Time: at 65536 one biaskit forward + backward takes minutes
# on 2 cores and FlexAttention's forward about as long; with the defaults the long-context and
# evaluation parts take longer than the training-step part; LONG_LENGTHS / EVAL_LENGTHS shorten them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
SIZES=${SIZES:-"a b c"}
PY=${PYTHON:-/usr/bin/python3}
VENV=${VENV:-$ROOT/.venv-bench}
SKIP_TORCH2=${SKIP_TORCH2:-0}
SKIP_TORCH1=${SKIP_TORCH1:-0}
TORCH2_PASSIVE=${TORCH2_PASSIVE:-0}
LOGS=${LOG_DIR:-$BUILD/bench-logs}
SKIP_TRAIN=${SKIP_TRAIN:-0}
SKIP_LONG=${SKIP_LONG:-0}
SKIP_EVAL=${SKIP_EVAL:-0}
LONG_LENGTHS=${LONG_LENGTHS:-"4096 16384 65536"}
LONG_TABLES=${LONG_TABLES:-"alibi kerple"}
LONG_MODES=${LONG_MODES:-"fwd fwdbwd"}
LONG_ATTENTION=${LONG_ATTENTION:-"fused materialized"}
LONG_IMPLS=${LONG_IMPLS:-"flex sdpa sdpa_nobias"}
LONG_CORES=${LONG_CORES:-Haswell}
LONG_REPS=${LONG_REPS:-1}
LONG_WARMUP=${LONG_WARMUP:-1}
LONG_MEM_GIB=${LONG_MEM_GIB:-14}
EVAL_LENGTHS=${EVAL_LENGTHS:-"4096 16384 65536"}
EVAL_ATTENTION=${EVAL_ATTENTION:-"fused materialized"}
EVAL_IMPLS=${EVAL_IMPLS:-"eval-flex eval-sdpa"}
EVAL_STEPS=${EVAL_STEPS:-1}
EVAL_WARMUP=${EVAL_WARMUP:-1}
EVAL_CORES=${EVAL_CORES:-Haswell}
EXTRA_BUILDS=${EXTRA_BUILDS:-}
PRETRAINED_GGUF=${PRETRAINED_GGUF:-}
PRETRAINED_CKPT=${PRETRAINED_CKPT:-}
PRETRAINED_TEXT=${PRETRAINED_TEXT:-$ROOT/docs/design.md}
PRETRAINED_LENGTHS=${PRETRAINED_LENGTHS:-1024,8192}
PRETRAINED_TRAIN_LENGTH=${PRETRAINED_TRAIN_LENGTH:-1024}
[[ $SKIP_TRAIN != 1 ]] || SIZES=""
mkdir -p "$LOGS"
PY2=$VENV/bin/python

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

# the extra rows' programs: extra1, extra2, ... in EXTRA_BUILDS' order
declare -A EXTRA_BIN=()
n_extra=0
for dir in $EXTRA_BUILDS; do
    [[ $SKIP_TRAIN != 1 ]] || break
    n_extra=$((n_extra + 1))
    if ! cmake --build "$dir" --target bench_train -j2 >"$LOGS/build-extra$n_extra.log" 2>&1; then
        echo "run.sh: EXTRA_BUILDS: building bench_train in $dir failed; see $LOGS/build-extra$n_extra.log" >&2
        exit 1
    fi
    EXTRA_BIN[extra$n_extra]=$dir/bench_train
    echo "built $dir/bench_train (extra row extra$n_extra)" >&2
done

ATT_BIN=$BUILD/bench_attention
if [[ $SKIP_LONG != 1 ]]; then
    if cmake --build "$BUILD" --target bench_attention -j2 >>"$LOGS/build.log" 2>&1; then
        echo "built $ATT_BIN (CMake target bench_attention)" >&2
    else
        ATT_BIN=$BUILD/bench_attention_manual
        echo "run.sh: no CMake target bench_attention in $BUILD (see $LOGS/build.log); compiling by hand into" \
             "$ATT_BIN" >&2
        OB=/usr/lib/x86_64-linux-gnu/openblas-openmp
        gcc -std=c11 -Wall -Wextra -O2 -fopenmp -I"$ROOT/core" -I"$ROOT/sdk/include" \
            -I/usr/include/x86_64-linux-gnu/openblas-openmp "$ROOT/bench/bench_attention.c" \
            "$BUILD/core/libbiaskit_core.a" -L$OB -Wl,-rpath,$OB -lopenblas -ltomlplusplus -lcjson -ldl -lm -lstdc++ \
            -o "$ATT_BIN" >>"$LOGS/build.log" 2>&1 ||
            echo "run.sh: compiling bench_attention failed (its rows will show -); see $LOGS/build.log" >&2
    fi
fi

# --- PyTorch 2.x: the virtual environment -----------------------------------------------------------
if [[ $SKIP_TORCH2 != 1 ]]; then
    if [[ -x $PY2 ]] && "$PY2" -c 'import torch, numpy' 2>/dev/null; then
        echo "PyTorch 2.x: reusing $VENV" >&2
    else
        echo "run.sh: creating $VENV with torch and numpy from PyPI (several GB, a few minutes; log in" \
             "$LOGS/venv.log)" >&2
        : >"$LOGS/venv.log"
        if ! { [[ -x $PY2 ]] || /usr/bin/python3 -m venv "$VENV" >>"$LOGS/venv.log" 2>&1; } ||
           ! "$PY2" -m pip install torch numpy >>"$LOGS/venv.log" 2>&1; then
            echo "run.sh: setting up $VENV failed; see $LOGS/venv.log (SKIP_TORCH2=1 skips the PyTorch 2.x rows)" >&2
            tail -5 "$LOGS/venv.log" >&2
            exit 1
        fi
    fi
fi

# --- rows: key | label | kind ------------------------------------------------------------------------
ROWS=(biaskit biaskit_haswell)
for ((i = 1; i <= n_extra; i++)); do ROWS+=("extra$i"); done
[[ $SKIP_TORCH2 == 1 ]] || ROWS+=(t2eager t2sdpa t2compile)
[[ $SKIP_TORCH1 == 1 ]] || ROWS+=(torch torchpassive)
T2_ENV=(OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS")
if [[ $TORCH2_PASSIVE == 1 ]]; then T2_ENV+=(OMP_WAIT_POLICY=PASSIVE); else T2_ENV=(-u OMP_WAIT_POLICY "${T2_ENV[@]}"); fi

# --- which BLAS each engine runs ---------------------------------------------------------------------
ob_lib=$(ldd "$BIN" 2>/dev/null | sed -n 's/.*libopenblas[^ ]* => \([^ ]*\).*/\1/p' | head -1)
if [[ -n $ob_lib ]]; then
    # with OPENBLAS_CORETYPE unset: the kernels OpenBLAS picks, and those bench_train runs (it starts again
    # with OPENBLAS_CORETYPE set when OpenBLAS took the CPU for an old one: core/util/blas.h)
    ob_cores=$(env -u OPENBLAS_CORETYPE -u BIASKIT_OPENBLAS_CORETYPE_SET OPENBLAS_VERBOSE=2 "$BIN" --help 2>&1 |
        sed -n 's/^Core: //p')
    ob_first=$(head -1 <<<"$ob_cores") ob_core=$(tail -1 <<<"$ob_cores")
    ob_has=$(env OPENBLAS_CORETYPE=Haswell OPENBLAS_VERBOSE=2 "$BIN" --help 2>&1 | sed -n 's/^Core: //p' | head -1)
    if [[ -n $ob_first && $ob_first != "$ob_core" ]]; then
        ob_why="'$ob_first' chosen by OpenBLAS, '$ob_core' set by bench_train, which restarts with OPENBLAS_CORETYPE"
        ob_core="$ob_core, set by biaskit"
    else
        ob_why="'${ob_core:-?}' chosen by OpenBLAS"
    fi
    BLAS_BK="OpenBLAS $(readlink -f "$ob_lib") (kernels: $ob_why; '${ob_has:-?}' with OPENBLAS_CORETYPE=Haswell)"
else
    ob_core="" BLAS_BK="no OpenBLAS linked ($(ldd "$BIN" 2>/dev/null | grep -io '[^ ]*blas[^ ]*' | head -1))"
fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; threads $THREADS; best of $REPEATS;" \
     "$STEPS steps after $WARMUP warm-up" >&2
echo "blas: biaskit ($BIN): $BLAS_BK" >&2
T2_VER="" info2=""
if [[ $SKIP_TORCH2 != 1 ]]; then
    info2=$(OMP_NUM_THREADS="$THREADS" "$PY2" "$ROOT/bench/bench_torch.py" --blas-info 2>/dev/null) ||
        info2="(failed: $PY2 bench/bench_torch.py --blas-info)"
    echo "blas: PyTorch 2.x: $info2" >&2
    T2_VER=$(sed -n 's/^torch \([^ ]*\) .*/\1/p' <<<"$info2")
fi
info=$(OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" "$PY" "$ROOT/bench/bench_torch.py" --blas-info \
       2>/dev/null) || info="(failed: $PY bench/bench_torch.py --blas-info)"
echo "blas: PyTorch (PYTHON): $info" >&2
T1_VER=$(sed -n 's/^torch \([^ ]*\) .*/\1/p' <<<"$info")

# the kernels a biaskit row's linear layers ran (bench_train's gemm=: blas, or the engine's avx512 / avx2,
# core/cpu/gemm.h) and its attention's per-head products (att_gemm=), from its logs so far; empty before any
gemm_of() { grep -ho "\<${2:-gemm}=[a-z0-9]*" "$LOGS"/*."$1".*.log 2>/dev/null | cut -d= -f2 | sort -u | paste -sd/; }
label() {
    local g a
    case $1 in
        biaskit) g=$(gemm_of biaskit) a=$(gemm_of biaskit att_gemm)
            echo "biaskit, OpenBLAS chooses${ob_core:+ ($ob_core)}${g:+; linear layers: $g}${a:+; attention products: $a}" ;;
        biaskit_haswell) g=$(gemm_of biaskit_haswell) a=$(gemm_of biaskit_haswell att_gemm)
            echo "biaskit, Haswell kernels${g:+; linear layers: $g}${a:+; attention products: $a}" ;;
        extra*) g=$(gemm_of "$1") a=$(gemm_of "$1" blas)
            echo "biaskit, ${a:-?} build ($(basename "$(dirname "${EXTRA_BIN[$1]}")")), OPENBLAS_CORETYPE=Haswell${g:+; linear layers: $g}" ;;
        t2eager) echo "PyTorch ${T2_VER:-2.x} eager" ;;
        t2sdpa) echo "PyTorch ${T2_VER:-2.x} sdpa" ;;
        t2compile) echo "PyTorch ${T2_VER:-2.x} compile" ;;
        torch) echo "PyTorch ${T1_VER:-1.13} eager" ;;
        torchpassive) echo "PyTorch ${T1_VER:-1.13} eager, OMP_WAIT_POLICY=PASSIVE" ;;
    esac
}

# --- sizes: label layers dim heads length batch ------------------------------------------------------
declare -A SPEC=(
    [a]="4 256 8 256 8"
    [b]="6 512 8 512 4"
    [c]="2 128 4 128 16"
)

# value of key=... in a RESULT line
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# best (highest tokens_per_s) RESULT line of a log file list; empty when none has one
best_result() {
    local best="" bt=-1 line t
    for f in "$@"; do
        [[ -f $f ]] || continue
        line=$(grep '^RESULT ' "$f" | tail -1) || continue
        t=$(field "$line" tokens_per_s)
        if awk -v a="$t" -v b="$bt" 'BEGIN { exit !(a > b) }'; then best=$line bt=$t; fi
    done
    echo "$best"
}

run_one() { # log_file command...: a failure stops the script
    local log=$1
    shift
    echo "# $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg): $*" >"$log"
    if ! "$@" >>"$log" 2>&1; then
        echo "run.sh: failed: $* (see $log)" >&2
        tail -5 "$log" >&2
        exit 1
    fi
}

declare -A FAILED=()
run_soft() { # key log_file command...: a failure is reported, the row is skipped from then on at this size
    local key=$1 log=$2 rc=0
    shift 2
    echo "# $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg): $*" >"$log"
    "$@" >>"$log" 2>&1 || rc=$?
    if ((rc)); then
        FAILED[$key]=$rc
        echo "run.sh: failed (exit $rc, row left out of the later repeats): $* (see $log)" >&2
        grep -v '^#' "$log" | tail -3 >&2
    fi
}

for s in $SIZES; do
    [[ -n ${SPEC[$s]:-} ]] || { echo "run.sh: unknown size '$s' (a, b, c)" >&2; exit 2; }
    read -r L C H T B <<<"${SPEC[$s]}"
    args=(--layers "$L" --dim "$C" --heads "$H" --length "$T" --batch "$B" --steps "$STEPS" --warmup "$WARMUP"
          --threads "$THREADS" --alibi --name "$s")
    rm -f "$LOGS/$s".*.log
    # interleaved, so that a noisy minute hurts every row alike
    for r in $(seq 1 "$REPEATS"); do
        echo "size $s ($L x $C x $H heads, T=$T, batch $B): run $r/$REPEATS" >&2
        for k in "${ROWS[@]}"; do
            [[ -z ${FAILED[$s.$k]:-} ]] || continue
            log=$LOGS/$s.$k.$r.log
            case $k in
                biaskit) run_one "$log" env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" "$BIN" "${args[@]}" ;;
                biaskit_haswell)
                    run_one "$log" env OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$THREADS" "$BIN" "${args[@]}" ;;
                extra*)
                    run_one "$log" env OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS="$THREADS" "${EXTRA_BIN[$k]}" \
                        "${args[@]}" ;;
                t2eager) run_soft "$s.$k" "$log" env "${T2_ENV[@]}" "$PY2" "$ROOT/bench/bench_torch.py" "${args[@]}" \
                    --mode eager ;;
                t2sdpa) run_soft "$s.$k" "$log" env "${T2_ENV[@]}" "$PY2" "$ROOT/bench/bench_torch.py" "${args[@]}" \
                    --mode sdpa --no-breakdown ;;
                t2compile) run_soft "$s.$k" "$log" env "${T2_ENV[@]}" "$PY2" "$ROOT/bench/bench_torch.py" \
                    "${args[@]}" --mode compile ;;
                torch) run_one "$log" env -u OMP_WAIT_POLICY OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
                    "$PY" "$ROOT/bench/bench_torch.py" "${args[@]}" --no-breakdown ;;
                torchpassive) run_one "$log" env OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
                    OMP_WAIT_POLICY=PASSIVE "$PY" "$ROOT/bench/bench_torch.py" "${args[@]}" --no-breakdown ;;
            esac
        done
    done
done

# --- long-context attention and evaluation ------------------------------------------------------------
# core label: "auto" -> OpenBLAS chooses; else OPENBLAS_CORETYPE=<core>
core_env() { if [[ $1 == auto ]]; then echo "-u OPENBLAS_CORETYPE"; else echo "OPENBLAS_CORETYPE=$1"; fi; }
core_label() { if [[ $1 == auto ]]; then echo "OpenBLAS chooses${ob_core:+ ($ob_core)}"; else echo "$1 kernels"; fi; }

# long-context rows: bk.<attention>.<core> and t2.<impl>; logs long.<T>.<table>.<mode>.<row>.<repeat>.log
LONG_ROWS=()
for at in $LONG_ATTENTION; do for c in $LONG_CORES; do LONG_ROWS+=("bk.$at.$c"); done; done
[[ $SKIP_TORCH2 == 1 ]] || for i in $LONG_IMPLS; do LONG_ROWS+=("t2.$i"); done
if [[ $SKIP_LONG != 1 ]]; then
    rm -f "$LOGS"/long.*.log
    for r in $(seq 1 "$REPEATS"); do
        for T in $LONG_LENGTHS; do
            for tab in $LONG_TABLES; do
                for mode in $LONG_MODES; do
                    echo "long-context attention: T=$T, $tab, $mode: run $r/$REPEATS" >&2
                    for k in "${LONG_ROWS[@]}"; do
                        key=long.$T.$tab.$mode.$k
                        # the bias-free SDPA row does not depend on the table: run it with the first only
                        [[ $k != t2.sdpa_nobias || $tab == "${LONG_TABLES%% *}" ]] || continue
                        [[ -z ${FAILED[$key]:-} ]] || continue
                        log=$LOGS/$key.$r.log
                        case $k in
                            bk.*)
                                IFS=. read -r _ at c <<<"$k"
                                # shellcheck disable=SC2046 # core_env gives one or two words
                                run_soft "$key" "$log" env $(core_env "$c") OMP_NUM_THREADS="$THREADS" "$ATT_BIN" \
                                    --batch 1 --dim 128 --heads 4 --length "$T" --attention "$at" --table "$tab" \
                                    --mode "$mode" --reps "$LONG_REPS" --warmup "$LONG_WARMUP" --threads "$THREADS" \
                                    --name "$key" ;;
                            t2.*)
                                run_soft "$key" "$log" env "${T2_ENV[@]}" "$PY2" "$ROOT/bench/long_context.py" \
                                    --impl "${k#t2.}" --table "$tab" --mode "$mode" --length "$T" --batch 1 --heads 4 \
                                    --head-dim 32 --threads "$THREADS" --reps "$LONG_REPS" --warmup "$LONG_WARMUP" \
                                    --mem-limit-gib "$LONG_MEM_GIB" --name "$key" ;;
                        esac
                    done
                done
            done
        done
    done
fi

# evaluation rows: bk.<attention>.<core> and t2.<mode>; logs eval.<T>.<row>.<repeat>.log
EVAL_ROWS=()
for at in $EVAL_ATTENTION; do for c in $EVAL_CORES; do EVAL_ROWS+=("bk.$at.$c"); done; done
[[ $SKIP_TORCH2 == 1 ]] || for m in $EVAL_IMPLS; do EVAL_ROWS+=("t2.$m"); done
if [[ $SKIP_EVAL != 1 ]]; then
    rm -f "$LOGS"/eval.*.log
    read -r EL EC EH _ _ <<<"${SPEC[a]}"
    for r in $(seq 1 "$REPEATS"); do
        for T in $EVAL_LENGTHS; do
            echo "evaluation, size (a) at T=$T, batch 1: run $r/$REPEATS" >&2
            eargs=(--layers "$EL" --dim "$EC" --heads "$EH" --length "$T" --batch 1 --steps "$EVAL_STEPS"
                   --warmup "$EVAL_WARMUP" --threads "$THREADS" --alibi)
            for k in "${EVAL_ROWS[@]}"; do
                key=eval.$T.$k
                [[ -z ${FAILED[$key]:-} ]] || continue
                log=$LOGS/$key.$r.log
                case $k in
                    bk.*)
                        IFS=. read -r _ at c <<<"$k"
                        # shellcheck disable=SC2046
                        run_soft "$key" "$log" env $(core_env "$c") OMP_NUM_THREADS="$THREADS" "$BIN" "${eargs[@]}" \
                            --eval --attention "$at" --name "$key" ;;
                    t2.*)
                        run_soft "$key" "$log" env "${T2_ENV[@]}" "$PY2" "$ROOT/bench/bench_torch.py" "${eargs[@]}" \
                            --mode "${k#t2.}" --mem-limit-gib "$LONG_MEM_GIB" --name "$key" ;;
                esac
            done
        done
    done
fi

# --- tables ------------------------------------------------------------------------------------------
isnum() { [[ $1 =~ ^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]]; }
pct() { if isnum "$1"; then awk -v x="$1" 'BEGIN { printf "%.1f", 100 * x }'; else echo "${1:--}"; fi; }
ratio() { if isnum "$1" && isnum "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / (b > 0 ? b : 1) }'; else echo -; fi; }
pctof() { if isnum "$1" && isnum "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.1f" : "-"), 100 * a / (b > 0 ? b : 1) }'; else echo -; fi; }
num() { if isnum "$1"; then awk -v x="$1" 'BEGIN { printf "%.0f", x }'; else echo -; fi; }
dec1() { if isnum "$1"; then awk -v x="$1" 'BEGIN { printf "%.1f", x }'; else echo -; fi; }
best() { best_result "$LOGS/$1.$2".*.log; } # size key
tok() { local v; v=$(field "$(best "$1" "$2")" tokens_per_s); [[ -n $v ]] && echo "$v" || echo -; }
sizelabel() { local L C H T B; read -r L C H T B <<<"${SPEC[$1]}"; echo "($1) $L x $C x $H heads, T=$T, batch $B"; }

# whether $1 is a number above $2 (or $2 is empty)
above() { isnum "$1" && { [[ -z $2 ]] || awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }; }
# the best PyTorch 2.x mode at a size: "mode tokens_per_s", or nothing
best2x() {
    local m t bm="" bt=""
    for m in eager sdpa compile; do
        t=$(tok "$1" "t2$m")
        if above "$t" "$bt"; then bm=$m bt=$t; fi
    done
    [[ -z $bm ]] || echo "$bm $bt"
}

if [[ -n $SIZES ]]; then
echo
echo "Tokens per second, best of $REPEATS runs ($THREADS threads). \"-\": no result (failed or skipped)."
echo
head="| size |"
sep="|---|"
for k in "${ROWS[@]}"; do head+=" $(label "$k") |"; sep+="---:|"; done
if [[ $SKIP_TORCH2 != 1 ]]; then
    head+=" best 2.x mode | biaskit / best 2.x | biaskit (Haswell) / best 2.x |" sep+="---|---:|---:|"
    for ((i = 1; i <= n_extra; i++)); do head+=" extra$i / best 2.x |" sep+="---:|"; done
fi
echo "$head"
echo "$sep"
for s in $SIZES; do
    line="| $(sizelabel "$s") |"
    for k in "${ROWS[@]}"; do line+=" $(num "$(tok "$s" "$k")") |"; done
    if [[ $SKIP_TORCH2 != 1 ]]; then
        read -r bm bt <<<"$(best2x "$s")"
        line+=" ${bm:--} | $(ratio "$(tok "$s" biaskit)" "$bt") | $(ratio "$(tok "$s" biaskit_haswell)" "$bt") |"
        for ((i = 1; i <= n_extra; i++)); do line+=" $(ratio "$(tok "$s" "extra$i")" "$bt") |"; done
    fi
    echo "$line"
done
echo
echo "BLAS: biaskit: $BLAS_BK."
[[ $SKIP_TORCH2 == 1 ]] || echo "      PyTorch 2.x: $info2."
echo "      PyTorch (PYTHON): $info."
if [[ $SKIP_TORCH2 != 1 ]]; then
    echo "PyTorch 2.x rows: OMP_WAIT_POLICY $([[ $TORCH2_PASSIVE == 1 ]] && echo PASSIVE || echo "unset (libgomp's default)")."
    for s in $SIZES; do
        w=$(for f in "$LOGS/$s".t2compile.*.log; do [[ -f $f ]] && field "$(grep '^RESULT ' "$f" | tail -1)" warmup_s; done |
            sort -g | tail -1)
        if isnum "$w"; then w="$(dec1 "$w") s"; else w="- (no compiled run)"; fi
        echo "torch.compile warm-up at ($s), longest of the runs: $w (compilation; not in the timed steps)."
    done
fi
echo
echo "biaskit's FLOP rate (bench_train: model FLOPs per step, matmuls and attention products, 3 x forward, over"
echo "the measured step; SGEMM: cblas_sgemm 2048^3 with the same threads and kernels), best run:"
echo
echo "| size | kernels | model GFLOP/s | SGEMM GFLOP/s | model / SGEMM % |"
echo "|---|---|---:|---:|---:|"
for s in $SIZES; do
    for k in biaskit biaskit_haswell; do
        line=$(best "$s" "$k")
        mg=$(field "$line" model_gflops) sg=$(field "$line" sgemm_gflops)
        mf=$(if isnum "$mg" && isnum "$sg"; then awk -v a="$mg" -v b="$sg" 'BEGIN { printf "%.1f", 100 * a / b }'; else echo -; fi)
        echo "| ($s) | $([[ $k == biaskit ]] && echo "OpenBLAS chooses${ob_core:+ ($ob_core)}" || echo Haswell) |" \
             "$(dec1 "$mg") | $(dec1 "$sg") | $mf |"
    done
done
if [[ $SKIP_TORCH2 != 1 ]]; then
    echo
    echo "What 1.5x the best PyTorch 2.x mode asks of this machine: the model's FLOPs per step (bench_train) at"
    echo "1.5x that mode's tokens/s, against the best SGEMM rate of the biaskit rows (2048^3) and the FMA peak"
    echo "(fma_peak.h: FMA chains in registers, same threads); above 100% of the peak no code reaches it:"
    echo
    echo "| size | best 2.x mode, tokens/s | 1.5x, tokens/s | GFLOP per step | GFLOP/s needed | biaskit's best, GFLOP/s | needed / SGEMM % | needed / FMA peak % |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for s in $SIZES; do
        read -r bm bt <<<"$(best2x "$s")"
        read -r _ _ _ T B <<<"${SPEC[$s]}"
        gf="" sg="" fp="" mg=""
        for k in biaskit biaskit_haswell; do
            line=$(best "$s" "$k")
            [[ -n $gf ]] || gf=$(field "$line" step_gflop)
            [[ -n $fp ]] || fp=$(field "$line" fma_peak_gflops)
            v=$(field "$line" sgemm_gflops)
            if above "$v" "$sg"; then sg=$v; fi
            v=$(field "$line" model_gflops)
            if above "$v" "$mg"; then mg=$v; fi
        done
        if isnum "$bt" && isnum "$gf"; then
            need=$(awk -v g="$gf" -v t="$bt" -v n="$((B * T))" 'BEGIN { printf "%.1f", g * 1.5 * t / n }')
            echo "| ($s) | ${bm} $(num "$bt") | $(num "$(awk -v t="$bt" 'BEGIN { print 1.5 * t }')") | $(awk -v x="$gf" 'BEGIN { printf "%.2f", x }') |" \
                 "$need | $(dec1 "$mg") | $(pctof "$need" "$sg") | $(pctof "$need" "$fp") |"
        else
            echo "| ($s) | - | - | - | - | - | - | - |"
        fi
    done
fi
echo
echo "Where the step goes, % of the median step (biaskit: instrumented pass; PyTorch 2.x eager: kernels"
echo "timed in isolation at the same shapes):"
echo
echo "| size | engine | ms/step | attention | matmul | GELU | LayerNorm | rest |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
BD_ROWS=(biaskit biaskit_haswell)
[[ $SKIP_TORCH2 == 1 ]] || BD_ROWS+=(t2eager)
for s in $SIZES; do
    for k in "${BD_ROWS[@]}"; do
        line=$(best "$s" "$k")
        a=$(field "$line" attention_frac) m=$(field "$line" matmul_frac) g=$(field "$line" gelu_frac)
        n=$(field "$line" layernorm_frac)
        if isnum "$a" && isnum "$m" && isnum "$g" && isnum "$n"; then
            rest=$(awk -v a="$a" -v m="$m" -v g="$g" -v n="$n" 'BEGIN { printf "%.4f", 1 - a - m - g - n }')
        else
            rest=${a:-}
        fi
        echo "| ($s) | $(label "$k") | $(dec1 "$(field "$line" ms_per_step)") | $(pct "$a") | $(pct "$m") |" \
             "$(pct "$g") | $(pct "$n") | $(pct "$rest") |"
    done
done
fi # SIZES

# --- long-context and evaluation tables -----------------------------------------------------------------
# best_val PREFIX FIELD min|max: the lowest / highest numeric FIELD of the RESULT lines of PREFIX.*.log
best_val() {
    local best="" f v line
    for f in "$1".*.log; do
        [[ -f $f ]] || continue
        line=$(grep '^RESULT ' "$f" | tail -1) || continue
        v=$(field "$line" "$2")
        isnum "$v" || continue
        if [[ -z $best ]] || awk -v a="$v" -v b="$best" -v d="$3" 'BEGIN { exit !(d == "min" ? a < b : a > b) }'; then
            best=$v
        fi
    done
    echo "$best"
}
NOTES=()
# why PREFIX has no result: "(mem)", "(n/a)", "(fail)", "" when never run (skipped)
why() {
    local f any=""
    for f in "$1".*.log; do
        [[ -f $f ]] || continue
        grep -q 'too much memory' "$f" && { echo "(mem)"; return; }
        grep -q 'not supported' "$f" && { echo "(n/a)"; return; }
        any=1
    done
    [[ -z $any ]] || echo "(fail)"
}
# nocell KEY PREFIX: the cell of a row without a result; a failure's last log line goes to NOTES
nocell() {
    local w
    w=$(why "$2")
    [[ $w != "(fail)" ]] || NOTES+=("$1: $(grep -hv '^#' "$2".*.log 2>/dev/null | grep -v '^[[:space:]]*$' | tail -1)")
    CELL="- $w"
}
long_label() {
    case $1 in
        bk.*) local _ at c; IFS=. read -r _ at c <<<"$1"; echo "biaskit $at ($(core_label "$c"))" ;;
        t2.flex) echo "PyTorch ${T2_VER:-2.x} FlexAttention" ;;
        t2.sdpa) echo "PyTorch ${T2_VER:-2.x} SDPA, bias mask" ;;
        t2.sdpa_nobias) echo "PyTorch ${T2_VER:-2.x} SDPA, no bias" ;;
        t2.eval-flex) echo "PyTorch ${T2_VER:-2.x} FlexAttention (compiled)" ;;
        t2.eval-sdpa) echo "PyTorch ${T2_VER:-2.x} SDPA" ;;
    esac
}
ratio_of() { if isnum "$1" && isnum "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / (b > 0 ? b : 1) }'; else echo -; fi; }

if [[ $SKIP_LONG != 1 ]]; then
    REF=""
    for k in "${LONG_ROWS[@]}"; do [[ $k == bk.fused.* ]] && { REF=$k; break; }; done
    [[ -n $REF ]] || for k in "${LONG_ROWS[@]}"; do [[ $k == bk.* ]] && { REF=$k; break; }; done
    echo
    echo "Long-context attention, one layer: B 1, 4 heads of 32 (C 128), causal, fp32; ms per call (forward, or"
    echo "forward + backward), best of $REPEATS runs of the minimum of $LONG_REPS call(s) after $LONG_WARMUP warm-up;"
    echo "$THREADS threads. Ratios: PyTorch's time / $(long_label "${REF:-none}") (> 1: biaskit faster). \"-\": (mem) too"
    echo "much memory, (n/a) not supported on the CPU, (fail) failed (its log's last line below)."
    echo
    head="| T | table | mode |" sep="|---:|---|---|"
    for k in "${LONG_ROWS[@]}"; do head+=" $(long_label "$k") |"; sep+="---:|"; done
    [[ $SKIP_TORCH2 == 1 ]] || {
        head+=" Flex / biaskit | SDPA mask / biaskit | SDPA no bias / biaskit |"
        sep+="---:|---:|---:|"
    }
    echo "$head"
    echo "$sep"
    first_tab=${LONG_TABLES%% *}
    for T in $LONG_LENGTHS; do
        for tab in $LONG_TABLES; do
            for mode in $LONG_MODES; do
                line="| $T | $tab | $mode |"
                declare -A V=()
                for k in "${LONG_ROWS[@]}"; do
                    t=$tab
                    [[ $k != t2.sdpa_nobias ]] || t=$first_tab
                    pre=$LOGS/long.$T.$t.$mode.$k
                    V[$k]=$(best_val "$pre" ms_min min)
                    if [[ -n ${V[$k]} ]]; then
                        line+=" $(dec1 "${V[$k]}") |"
                    else
                        nocell "long.$T.$t.$mode.$k" "$pre"
                        line+=" $CELL |"
                    fi
                done
                if [[ $SKIP_TORCH2 != 1 ]]; then
                    b=${V[$REF]:-}
                    line+=" $(ratio_of "${V[t2.flex]:-}" "$b") | $(ratio_of "${V[t2.sdpa]:-}" "$b") |"
                    line+=" $(ratio_of "${V[t2.sdpa_nobias]:-}" "$b") |"
                fi
                unset V
                echo "$line"
            done
        done
    done
    echo
    echo "Kernels: biaskit bench_attention: --attention fused = bk_attention_flash_forward / _backward (B H T floats"
    echo "saved), materialized = bk_attention_forward / bk_attention_backward (B H T^2 probabilities saved for"
    echo "backward; forward only saves nothing); the tables computed on the host (KERPLE from r1, r2 in every"
    echo "call, dr1 and dr2 from the table gradient in backward). PyTorch: FlexAttention = torch.compile(flex_attention)"
    echo "with the bias as a score_mod and a causal BlockMask; SDPA = F.scaled_dot_product_attention with the bias"
    echo "as an (H, T, T) float mask (KERPLE fwdbwd: rebuilt from r1, r2 in every call); SDPA no bias = is_causal,"
    echo "no bias (PyTorch's CPU flash kernel; the same for every table)."
    for c in $LONG_CORES; do
        f=""
        for g in "$LOGS"/long.*.bk.*."$c".*.log; do [[ -f $g ]] && grep -q '^RESULT ' "$g" && { f=$g; break; }; done
        [[ -z $f ]] || echo "BLAS: biaskit ($(core_label "$c")): $(field "$(grep '^RESULT ' "$f" | tail -1)" blas)" \
            "core $(field "$(grep '^RESULT ' "$f" | tail -1)" core); $BLAS_BK."
    done
    [[ $SKIP_TORCH2 == 1 ]] || echo "      PyTorch 2.x: $info2."
fi

if [[ $SKIP_EVAL != 1 ]]; then
    EREF=""
    for k in "${EVAL_ROWS[@]}"; do [[ $k == bk.* ]] && { EREF=$k; break; }; done
    read -r EL EC EH _ _ <<<"${SPEC[a]}"
    echo
    echo "Evaluation: forward passes (loss included, no backward) of the size (a) model ($EL x $EC x $EH heads, ALiBi)"
    echo "at batch 1; tokens per second, best of $REPEATS runs of $EVAL_STEPS pass(es) after $EVAL_WARMUP warm-up;"
    echo "$THREADS threads. Ratios: $(long_label "${EREF:-none}") / PyTorch (> 1: biaskit faster)."
    echo
    head="| T |" sep="|---:|"
    for k in "${EVAL_ROWS[@]}"; do head+=" $(long_label "$k") |"; sep+="---:|"; done
    for m in $EVAL_IMPLS; do [[ $SKIP_TORCH2 == 1 ]] || { head+=" biaskit / $(long_label "t2.$m") |"; sep+="---:|"; }; done
    echo "$head"
    echo "$sep"
    for T in $EVAL_LENGTHS; do
        line="| $T |"
        declare -A V=()
        for k in "${EVAL_ROWS[@]}"; do
            pre=$LOGS/eval.$T.$k
            V[$k]=$(best_val "$pre" tokens_per_s max)
            if [[ -n ${V[$k]} ]]; then
                line+=" $(num "${V[$k]}") |"
            else
                nocell "eval.$T.$k" "$pre"
                line+=" $CELL |"
            fi
        done
        for m in $EVAL_IMPLS; do [[ $SKIP_TORCH2 == 1 ]] || line+=" $(ratio_of "${V[$EREF]:-}" "${V[t2.$m]:-}") |"; done
        unset V
        echo "$line"
    done
    echo
    echo "Kernels: biaskit bench_train --eval (bk_gpt_forward, train = 0) with [run] attention as in the row;"
    echo "PyTorch bench_torch.py --mode eval-flex (torch.compile of the model, flex_attention with an ALiBi score_mod"
    echo "and a causal BlockMask) and --mode eval-sdpa (eager, SDPA with one (H, T, T) float mask shared by the layers)."
    for c in $EVAL_CORES; do
        f=""
        for g in "$LOGS"/eval.*.bk.*."$c".*.log; do [[ -f $g ]] && grep -q '^RESULT ' "$g" && { f=$g; break; }; done
        [[ -z $f ]] || echo "BLAS: biaskit ($(core_label "$c")): $(field "$(grep '^RESULT ' "$f" | tail -1)" blas)" \
            "core $(field "$(grep '^RESULT ' "$f" | tail -1)" core)."
    done
fi
if [[ -n $PRETRAINED_GGUF && -n $PRETRAINED_CKPT ]]; then
    echo
    echo "### A pretrained model: $(basename "$PRETRAINED_GGUF"), biaskit against HF transformers"
    echo
    if ! "$PY2" -c 'import transformers, gguf, tokenizers, accelerate' 2>/dev/null; then
        echo "run.sh: installing transformers, gguf, tokenizers, accelerate into $VENV (log: $LOGS/venv.log)" >&2
        "$PY2" -m pip install transformers gguf tokenizers accelerate >>"$LOGS/venv.log" 2>&1 ||
            NOTES+=("pretrained: pip install into $VENV failed ($LOGS/venv.log)")
    fi
    if ! "$PY2" "$ROOT/bench/pretrained_speed.py" --gguf "$PRETRAINED_GGUF" --checkpoint "$PRETRAINED_CKPT" \
        --text "$PRETRAINED_TEXT" --lengths "$PRETRAINED_LENGTHS" --train-length "$PRETRAINED_TRAIN_LENGTH" \
        --threads "$THREADS" --repeats "$REPEATS" --hf-python "$PY2" --biaskit "$BUILD/biaskit" \
        --workdir "$LOGS" 2>"$LOGS/pretrained.log"; then
        NOTES+=("pretrained: $(tail -1 "$LOGS/pretrained.log")")
    fi
fi
if ((${#NOTES[@]})); then
    echo
    echo "Failed rows (the last line of their log):"
    for n in "${NOTES[@]}"; do echo "- $n"; done
fi
echo
echo "logs: $LOGS"
