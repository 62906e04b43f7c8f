#!/usr/bin/env bash
# Fused biased attention on a GPU: biaskit (build-gpu/bench_flash_gpu) against PyTorch's SDPA without a
# bias, SDPA with the bias as a float mask, and FlexAttention with the equivalent score_mod
# (bench/gpu/attention_torch.py), forward and forward + backward, ALiBi / KERPLE / T5 tables, and biaskit
# without a table (what each table costs it). Prints markdown tables of TFLOP/s and the ratios
# docs/performance.md reads, then a table of the fused-attention issue's targets: the worst case of
# each over the grid and whether it is met (a ratio missing because a run failed never counts as met).
#
#   bash bench/gpu/attention.sh            # the full grid (after scripts/gpu-test.sh built ./build-gpu)
#   QUICK=1 bash bench/gpu/attention.sh    # T = 1024 and 4096 only, 5 timed calls
#
# Environment:
#   BUILD_DIR    ./build-gpu
#   PYTHON       python3: a PyTorch with CUDA and FlexAttention
#   OUT          also write the tables to $OUT/attention-d<head dims>.md, e.g. attention-d64-128.md
#   TOKENS       tokens per batch, 16384
#   HEAD_DIMS    "64 128" (16 and 8 heads, model width 1024)
#   LENGTHS      "1024 2048 4096 8192 16384"
#   TABLES       "alibi kerple t5"
#   DTYPE        bf16 (PyTorch's and biaskit's --dtype)
#   STORAGE      $DTYPE: biaskit's --storage (bf16: q, k, v, dO and the output in bf16 in memory, as
#                PyTorch's bf16 tensors; fp32 with DTYPE=bf16: fp32 in memory, rounded as tiles load)
#   REPS, WARMUP 20 timed calls after 5
#   CHECK        1: check biaskit's results at the longest length against PyTorch in float64
#                (bench/gpu/check_dump.py); 0: skip
#   LOG_DIR      $BUILD_DIR/bench-logs/attention: one log per biaskit run, one per head size for PyTorch
#   RESULTS      $LOG_DIR/results.txt: every result line is appended there
#   REPORT_ONLY  1: run nothing, print the tables of HEAD_DIMS x LENGTHS from $RESULTS, so that runs
#                split by HEAD_DIMS (e.g. HEAD_DIMS=64, then HEAD_DIMS=128) or LENGTHS add up where one
#                command's time is limited
#   DEVICE       cuda; cpu tries the script itself on a machine without a GPU: PyTorch on the CPU,
#                biaskit's emulated backend, and FlexAttention's backward, which PyTorch does not run
#                on a CPU, shows "-"
# A run that fails (its binary missing, out of memory, unsupported) shows "-" and the script goes on.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
. "$ROOT/bench/gpu/prefix_env.sh"
PY=${PYTHON:-python3}
TOKENS=${TOKENS:-16384}
HEAD_DIMS=${HEAD_DIMS:-"64 128"}
LENGTHS=${LENGTHS:-"1024 2048 4096 8192 16384"}
TABLES=${TABLES:-"alibi kerple t5"}
DTYPE=${DTYPE:-bf16}
STORAGE=${STORAGE:-$DTYPE}
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

# Every RESULT line (and every check's verdict, as "CHECK ...") is also appended to $RESULTS, so that runs
# split by HEAD_DIMS or LENGTHS add up: REPORT_ONLY=1 runs nothing and prints the tables and the targets
# from all the lines there (of this DTYPE, and biaskit's of this STORAGE; a later line for the same cell
# wins).
RESULTS=${RESULTS:-$LOGS/results.txt}
REPORT_ONLY=${REPORT_ONLY:-0}
declare -A R=() M=() # key "who|table|D|T|mode" -> TFLOP/s (shown), ms (the ratios: more digits)
field() { # field NAME LINE: the value of NAME=... in a RESULT line
    sed -E "s/.* $1=([^ ]+).*/\1/" <<<"$2"
}
key_of() { # key_of LINE: the cell of a RESULT line, "who|table|D|T|mode" (who: biaskit or the PyTorch peer)
    local who
    who=$(field engine "$1")
    [ "$who" = biaskit ] || who=$(field peer "$1")
    echo "$who|$(field table "$1")|$(field D "$1")|$(field T "$1")|$(field mode "$1")"
}
record() { # record KEY LINE: a RESULT line's tflops and ms into R[KEY] and M[KEY], "-" when it has none
    [ -n "$2" ] && [ "$REPORT_ONLY" != 1 ] && echo "$2" >>"$RESULTS"
    case "$2" in
        *tflops=*) R[$1]=$(field tflops "$2"); M[$1]=$(field ms "$2") ;;
        *) R[$1]=-; M[$1]=-; return 1 ;;
    esac
}
run() { # run KEY LOG COMMAND...: the RESULT line into R[KEY] and M[KEY], "-" on failure
    local key=$1 log=$2 line
    shift 2
    "$@" >"$log" 2>&1 || true
    line=$(grep '^RESULT ' "$log" | tail -1 || true)
    record "$key" "$line" || echo "attention.sh: $key failed (see $log): $(tail -1 "$log")" >&2
}
ratio() { # ratio KEY_A KEY_B: A's speed over B's (B's ms / A's ms) to 2 decimals, or -
    local a=${M[$1]:--} b=${M[$2]:--}
    if [ "$a" = - ] || [ "$b" = - ]; then echo -; else awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "-" }'; fi
}
cost() { # cost KEY_WITH KEY_WITHOUT: the time the table adds, in % of the no-bias time, or -
    local a=${M[$1]:--} b=${M[$2]:--}
    if [ "$a" = - ] || [ "$b" = - ]; then echo -; else awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%+.0f%%", (a / b - 1) * 100; else print "-" }'; fi
}

# PyTorch: one process per head size runs all its peers, tables, modes and lengths (attention_torch.py's
# grid: one start, and a fresh compilation per FlexAttention shape); its RESULT lines fill R.
torch_grid() { # torch_grid D H LOG
    local D=$1 H=$2 log=$3 line lengths tables
    lengths=$(tr ' ' ',' <<<"$LENGTHS")
    tables="none,$(tr ' ' ',' <<<"$TABLES")"
    echo "attention.sh: PyTorch, D=$D H=$H, T in $LENGTHS" >&2
    "$PY" "$ROOT/bench/gpu/attention_torch.py" --peer sdpa_nobias,flex,sdpa_bias --table "$tables" \
        --mode fwd,fwdbwd --length "$lengths" --tokens "$TOKENS" --heads "$H" --head-dim "$D" --dtype "$DTYPE" \
        --device "$DEVICE" --reps "$REPS" --warmup "$WARMUP" >"$log" 2>&1 || true
    while read -r line; do
        record "$(key_of "$line")" "$line" || echo "attention.sh: $(key_of "$line") failed (see $log)" >&2
    done < <(grep '^RESULT ' "$log" || true)
}

# CHECK=1 (the default): biaskit's numbers at the longest length with the learnable KERPLE table (or the
# first table), forward + backward, written by bench_flash_gpu --dump and compared with PyTorch's
# float64 attention by check_dump.py; the verdicts go under the tables.
CHECK=${CHECK:-1}
CHECKS=()
check_numbers() { # check_numbers D H
    local D=$1 H=$2 T tab dir log
    T=$(tr ' ' '\n' <<<"$LENGTHS" | sort -n | tail -1)
    tab=$(tr ' ' '\n' <<<"$TABLES" | grep -x kerple || tr ' ' '\n' <<<"$TABLES" | head -1)
    dir=$LOGS/dump-$D
    log=$LOGS/check-$D.log
    mkdir -p "$dir"
    echo "attention.sh: checking biaskit's numbers, D=$D T=$T $tab" >&2
    if "$BIN" --batch $((TOKENS / T > 0 ? TOKENS / T : 1)) --heads "$H" --length "$T" --head-dim "$D" --table "$tab" \
        --mode fwdbwd --dtype "$DTYPE" --storage "$STORAGE" --warmup 0 --reps 1 --device "$BK_DEVICE" --dump "$dir" >"$log" 2>&1 &&
        "$PY" "$ROOT/bench/gpu/check_dump.py" "$dir" >>"$log" 2>&1; then
        CHECKS+=("$(grep '^check_dump:' "$log")")
    else
        CHECKS+=("D=$D T=$T $tab: FAILED (see $log): $(tail -1 "$log")")
    fi
    echo "CHECK ${CHECKS[-1]}" >>"$RESULTS"
    rm -rf "$dir"
}

if [ "$REPORT_ONLY" = 1 ]; then
    [ -f "$RESULTS" ] || { echo "attention.sh: REPORT_ONLY=1 but $RESULTS does not exist" >&2; exit 1; }
    while read -r line; do
        case "$line" in
            RESULT*" engine=biaskit "*) [[ "$line" == *" dtype=$DTYPE storage=$STORAGE "* ]] &&
                                           { record "$(key_of "$line")" "$line" || true; } ;;
            RESULT*" dtype=$DTYPE "*) record "$(key_of "$line")" "$line" || true ;;
            CHECK*) CHECKS+=("${line#CHECK }") ;;
        esac
    done <"$RESULTS"
else
for D in $HEAD_DIMS; do
    H=$((D == 128 ? 8 : 16))
    torch_grid "$D" "$H" "$LOGS/torch-$D.log"
    [ "$CHECK" = 1 ] && check_numbers "$D" "$H"
    for T in $LENGTHS; do
        B=$((TOKENS / T > 0 ? TOKENS / T : 1))
        for mode in fwd fwdbwd; do
            echo "attention.sh: biaskit, D=$D H=$H T=$T B=$B $mode" >&2
            shape=(--batch "$B" --heads "$H" --length "$T" --head-dim "$D" --mode "$mode" --dtype "$DTYPE" --storage "$STORAGE")
            for tab in none $TABLES; do
                run "biaskit|$tab|$D|$T|$mode" "$LOGS/biaskit-$tab-$D-$T-$mode.log" \
                    "$BIN" "${shape[@]}" --table "$tab" --reps "$REPS" --warmup "$WARMUP" --device "$BK_DEVICE"
            done
        done
    done
done
fi

{
    echo "# Fused biased attention, $(date -u +%Y-%m-%d), $DTYPE (biaskit's storage: $STORAGE), $TOKENS tokens per batch"
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
            head+=" SDPA, no bias | biaskit, no bias |"
            rule+="---:|---:|"
            for tab in $TABLES; do head+=" biaskit / flex, $tab |"; rule+="---:|"; done
            for tab in $TABLES; do head+=" biaskit / SDPA no bias, $tab |"; rule+="---:|"; done
            for tab in $TABLES; do head+=" cost of $tab over biaskit no bias |"; rule+="---:|"; done
            echo "$head"
            echo "$rule"
            for T in $LENGTHS; do
                row="| $T |"
                for who in biaskit flex sdpa_bias; do for tab in $TABLES; do row+=" ${R[$who|$tab|$D|$T|$mode]:--} |"; done; done
                row+=" ${R[sdpa_nobias|none|$D|$T|$mode]:--} | ${R[biaskit|none|$D|$T|$mode]:--} |"
                for tab in $TABLES; do row+=" $(ratio "biaskit|$tab|$D|$T|$mode" "flex|$tab|$D|$T|$mode") |"; done
                for tab in $TABLES; do row+=" $(ratio "biaskit|$tab|$D|$T|$mode" "sdpa_nobias|none|$D|$T|$mode") |"; done
                for tab in $TABLES; do row+=" $(cost "biaskit|$tab|$D|$T|$mode" "biaskit|none|$D|$T|$mode") |"; done
                echo "$row"
            done
            echo
        done
    done
    if [ "${#CHECKS[@]}" -gt 0 ]; then
        echo "## biaskit's numbers against PyTorch in float64 (check_dump.py)"
        echo
        for c in "${CHECKS[@]}"; do echo "- $c"; done
        echo
    fi
    # The issue's targets over the whole grid: the worst case of each, and whether it is met. A ratio
    # that could not be computed (a run failed) is counted as missing, never as met.
    echo "## Targets (worst case over head dims and lengths)"
    echo
    echo "| target | worst | where | met |"
    echo "|---|---:|---|---|"
    target() { # target LABEL OP LIMIT KIND TABLES MODES: KIND ratio_flex | ratio_sdpa | cost
        local label=$1 op=$2 limit=$3 kind=$4 tabs=$5 modes=$6 worst=- where=- missing=0 v tab D T mode
        for mode in $modes; do for tab in $tabs; do for D in $HEAD_DIMS; do for T in $LENGTHS; do
            local a="biaskit|$tab|$D|$T|$mode"
            case $kind in
                ratio_flex) v=$(ratio "$a" "flex|$tab|$D|$T|$mode") ;;
                ratio_sdpa) v=$(ratio "$a" "sdpa_nobias|none|$D|$T|$mode") ;;
                cost) v=$(cost "$a" "biaskit|none|$D|$T|$mode"); v=${v%\%} ;;
            esac
            if [ "$v" = - ]; then missing=$((missing + 1)); continue; fi
            # worst: the smallest ratio (op >=) or the largest cost (op <=)
            if [ "$worst" = - ] || awk -v v="$v" -v w="$worst" -v op="$op" 'BEGIN { exit !(op == ">=" ? v < w : v > w) }'; then
                worst=$v where="$tab, D $D, T $T, $mode"
            fi
        done; done; done; done
        local met=no
        if [ "$worst" != - ] && awk -v v="$worst" -v l="$limit" -v op="$op" 'BEGIN { exit !(op == ">=" ? v >= l : v <= l) }'; then
            met=yes
        fi
        if [ "$missing" -gt 0 ]; then # never "yes" with a hole in the grid
            [ "$met" = yes ] && met="not known: $missing missing, the rest meet it" || met="no ($missing missing)"
        fi
        [ "$kind" = cost ] && [ "$worst" != - ] && worst="$worst%"
        echo "| $label | $worst | $where | $met |"
    }
    learnable=$(tr ' ' '\n' <<<"$TABLES" | grep -v '^alibi$' | tr '\n' ' ')
    target "forward + backward, learnable table: biaskit / flex >= 1.3" ">=" 1.3 ratio_flex "$learnable" fwdbwd
    target "forward: biaskit / flex >= 1.0" ">=" 1.0 ratio_flex "$TABLES" fwd
    target "biaskit / SDPA without bias >= 0.70 (forward)" ">=" 0.70 ratio_sdpa "$TABLES" fwd
    target "biaskit / SDPA without bias >= 0.70 (forward + backward)" ">=" 0.70 ratio_sdpa "$TABLES" fwdbwd
    target "table's cost over biaskit without bias <= 10% (forward)" "<=" 10 cost "$TABLES" fwd
    target "table's cost over biaskit without bias <= 25% (forward + backward)" "<=" 25 cost "$TABLES" fwdbwd
} | if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && tee "$OUT/attention-d$(tr ' ' '-' <<<"$HEAD_DIMS").md"; else cat; fi
