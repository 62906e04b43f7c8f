#!/usr/bin/env bash
# Fused biased attention on a GPU: biaskit (build-gpu/bench_flash_gpu) against PyTorch's SDPA without a
# bias, SDPA with the bias as a float mask, and FlexAttention with the equivalent score_mod
# (bench/gpu/attention_torch.py), forward and forward + backward, ALiBi / KERPLE / T5 tables. Prints
# markdown tables of TFLOP/s and the ratios docs/performance.md reads.
#
#   bash bench/gpu/attention.sh            # the full grid (after scripts/gpu-test.sh built ./build-gpu)
#   QUICK=1 bash bench/gpu/attention.sh    # T = 1024 and 4096 only, 5 timed calls
#
# Environment: BUILD_DIR (./build-gpu), PYTHON (python3: a PyTorch with CUDA and FlexAttention), OUT
# (also write the tables to $OUT/attention.md), TOKENS (tokens per batch, 16384), HEAD_DIMS ("64 128":
# 16 and 8 heads, model width 1024), LENGTHS ("1024 2048 4096 8192 16384"), TABLES ("alibi kerple t5"),
# DTYPE (bf16: PyTorch's and biaskit's --dtype), REPS (20), WARMUP (5), DEVICE (cuda; cpu to try the
# script itself on a machine without a GPU: PyTorch on the CPU, biaskit's emulated backend, and
# FlexAttention's backward, which PyTorch does not run on a CPU, shows "-"), LOG_DIR
# ($BUILD_DIR/bench-logs/attention: one log per run).
# A run that fails (its binary missing, out of memory, unsupported) shows "-" and the script goes on.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
TOKENS=${TOKENS:-16384}
HEAD_DIMS=${HEAD_DIMS:-"64 128"}
LENGTHS=${LENGTHS:-"1024 2048 4096 8192 16384"}
TABLES=${TABLES:-"alibi kerple t5"}
DTYPE=${DTYPE:-bf16}
REPS=${REPS:-20}
WARMUP=${WARMUP:-5}
DEVICE=${DEVICE:-cuda}
BK_DEVICE=$([ "$DEVICE" = cuda ] && echo cuda || echo emulated)
if [ "${QUICK:-0}" = 1 ]; then
    LENGTHS="1024 4096"
    REPS=5
fi
LOGS=${LOG_DIR:-$BUILD/bench-logs/attention}
mkdir -p "$LOGS"
BIN=$BUILD/bench_flash_gpu
[ -x "$BIN" ] || echo "attention.sh: warning: $BIN not found (build first: scripts/gpu-test.sh); biaskit's rows show -" >&2

declare -A R=() # key "who|table|D|T|mode" -> TFLOP/s
run() { # run KEY LOG COMMAND...: the RESULT line's tflops into R[KEY], "-" on failure
    local key=$1 log=$2 line
    shift 2
    "$@" >"$log" 2>&1 || true
    line=$(grep '^RESULT ' "$log" | tail -1 || true)
    case "$line" in
        *tflops=*) R[$key]=$(sed -E 's/.*tflops=([0-9.]+).*/\1/' <<<"$line") ;;
        *) R[$key]=-; echo "attention.sh: $key failed (see $log): $(tail -1 "$log")" >&2 ;;
    esac
}
ratio() { # ratio A B: A / B to 2 decimals, or -
    if [ "$1" = - ] || [ "$2" = - ] || [ -z "$1" ] || [ -z "$2" ]; then echo -; else awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; fi
}

for D in $HEAD_DIMS; do
    H=$((D == 128 ? 8 : 16))
    for T in $LENGTHS; do
        B=$((TOKENS / T > 0 ? TOKENS / T : 1))
        for mode in fwd fwdbwd; do
            echo "attention.sh: D=$D H=$H T=$T B=$B $mode" >&2
            shape=(--batch "$B" --heads "$H" --length "$T" --head-dim "$D" --mode "$mode" --dtype "$DTYPE")
            torch=("$PY" "$ROOT/bench/gpu/attention_torch.py" "${shape[@]}" --device "$DEVICE" --reps "$REPS" --warmup "$WARMUP")
            run "sdpa_nobias|none|$D|$T|$mode" "$LOGS/sdpa_nobias-$D-$T-$mode.log" "${torch[@]}" --peer sdpa_nobias --table none
            for tab in $TABLES; do
                run "biaskit|$tab|$D|$T|$mode" "$LOGS/biaskit-$tab-$D-$T-$mode.log" \
                    "$BIN" "${shape[@]}" --table "$tab" --reps "$REPS" --warmup "$WARMUP" --device "$BK_DEVICE"
                run "flex|$tab|$D|$T|$mode" "$LOGS/flex-$tab-$D-$T-$mode.log" "${torch[@]}" --peer flex --table "$tab"
                run "sdpa_bias|$tab|$D|$T|$mode" "$LOGS/sdpa_bias-$tab-$D-$T-$mode.log" "${torch[@]}" --peer sdpa_bias --table "$tab"
            done
        done
    done
done

{
    echo "# Fused biased attention, $(date -u +%Y-%m-%d), $DTYPE, $TOKENS tokens per batch"
    if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true; fi
    echo "torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
    echo
    for D in $HEAD_DIMS; do
        for mode in fwd fwdbwd; do
            echo "## head dim $D, $mode (TFLOP/s)"
            echo
            head="| T |"
            rule="|---|"
            for who in biaskit flex sdpa_bias; do for tab in $TABLES; do head+=" $who $tab |"; rule+="---:|"; done; done
            head+=" SDPA, no bias |"
            rule+="---:|"
            for tab in $TABLES; do head+=" biaskit / flex, $tab |"; rule+="---:|"; done
            for tab in $TABLES; do head+=" biaskit / SDPA no bias, $tab |"; rule+="---:|"; done
            echo "$head"
            echo "$rule"
            for T in $LENGTHS; do
                row="| $T |"
                for who in biaskit flex sdpa_bias; do for tab in $TABLES; do row+=" ${R[$who|$tab|$D|$T|$mode]:--} |"; done; done
                base=${R[sdpa_nobias|none|$D|$T|$mode]:--}
                row+=" $base |"
                for tab in $TABLES; do row+=" $(ratio "${R[biaskit|$tab|$D|$T|$mode]:--}" "${R[flex|$tab|$D|$T|$mode]:--}") |"; done
                for tab in $TABLES; do row+=" $(ratio "${R[biaskit|$tab|$D|$T|$mode]:--}" "$base") |"; done
                echo "$row"
            done
            echo
        done
    done
} | if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && tee "$OUT/attention.md"; else cat; fi
