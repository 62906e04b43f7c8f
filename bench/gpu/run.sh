#!/usr/bin/env bash
# GPT-2 small ALiBi training speed on a GPU: biaskit (examples/gpt2_small_alibi.toml, with its fused and its
# materialized attention) against the same model in PyTorch (bench/gpu/gpt2_torch.py: eager attention,
# SDPA with the bias as a float mask, and torch.compile + FlexAttention with the ALiBi score_mod), with
# fp32, TF32 and bf16 matmuls (biaskit [run] matmul; PyTorch's bf16 is autocast), and with bf16 biaskit's
# fused attention also with bf16 storage ([run] precision = "bf16"). Each PyTorch run first
# checks its loss against eager fp32 on the same weights (gpt2_torch.py --check). Prints a markdown
# table; docs/performance.md says how to read it.
#
#   bash bench/gpu/run.sh                 # after scripts/gpu-test.sh built ./build-gpu
#
# Environment: BUILD_DIR (default ./build-gpu), STEPS (20 timed steps), WARMUP (3), PYTHON (python3),
# OUT (where the log goes; default the build dir), PRECISIONS ("fp32 tf32 bf16"), TORCH_MODES ("eager
# sdpa flex"; "" for biaskit alone). Batch 8 x 1,024 tokens for both. Where one command's time is
# limited, split the run by PRECISIONS (each writes its own log, bench-gpt2-<precisions>.log).
# biaskit's rate per step is the metrics.jsonl "tokens_per_s" of each step (log_every = 1), median
# over the timed steps; PyTorch's is the median step time, synchronised, loss copied to the host.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
. "$ROOT/bench/gpu/prefix_env.sh"
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
PY=${PYTHON:-python3}
PRECISIONS=${PRECISIONS:-"fp32 tf32 bf16"}
TORCH_MODES=${TORCH_MODES-"eager sdpa flex"}
LOG=${OUT:-$BUILD}/bench-gpt2-$(tr ' ' '-' <<<"$PRECISIONS").log
BIN=$BUILD/biaskit
[ -x "$BIN" ] || { echo "bench/gpu/run.sh: $BIN not found: build first (scripts/gpu-test.sh)" >&2; exit 1; }
mkdir -p "$(dirname "$LOG")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 16 MB of text-like bytes: the speed does not depend on the text
"$PY" -c "import random; random.seed(1); open('$work/corpus.txt','w').write(''.join(random.choice('abcdefghij klmnop\n') for _ in range(16_000_000)))"
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
{
    echo "# GPT-2 small (124M), ALiBi, batch 8 x 1024, $(date -u +%Y-%m-%d)"
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
    echo
    echo "| engine | attention | matmul | storage | tokens/s |"
    echo "|---|---|---|---|---|"
    for prec in $PRECISIONS; do
        variants="fused:fp32 materialized:fp32" # attention:storage
        [ "$prec" = bf16 ] && variants+=" fused:bf16"
        for v in $variants; do
            att=${v%%:*} storage=${v##*:}
            out=$work/run-$prec-$att-$storage
            log=$work/train-$prec-$att-$storage.log
            # a run that fails gets a row saying why (its log is kept next to the table's), the table goes on
            if "$BIN" train "$ROOT/examples/gpt2_small_alibi.toml" --out "$out" --set run.device=cuda \
                --set run.matmul=$prec --set run.attention=$att --set run.precision=$storage \
                --set train.steps=$((STEPS + WARMUP)) --set train.log_every=1 --set train.eval_every=0 \
                --set train.eval_batches=1 --set data.paths="$work/corpus.txt" >"$log" 2>&1; then
                rate=$(grep -o '"tokens_per_s": [0-9.]*' "$out/metrics.jsonl" |
                       awk -v w="$WARMUP" 'NR > w {print $2}' | median)
                echo "| biaskit | $att | $prec | $storage | $rate |"
            else
                cp "$log" "$LOG.train-$prec-$att-$storage.log"
                echo "| biaskit | $att | $prec | $storage | failed: $(tail -n 1 "$log") |"
            fi
        done
        for mode in $TORCH_MODES; do
            # a peer that fails (its check, memory, an old PyTorch) gets a row saying so; the table goes on
            if said=$("$PY" "$ROOT/bench/gpu/gpt2_torch.py" --mode $mode --precision $prec --steps "$STEPS" \
                      --warmup "$WARMUP" --check 2>"$work/torch-$prec-$mode.err"); then
                line=$(tail -n 1 <<<"$said")
                storage=$([ "$prec" = bf16 ] && echo "bf16 (autocast)" || echo fp32)
                echo "| ${line%%:*} | $mode | $prec | $storage | $(sed -E 's/.*: ([0-9]+) tokens\/s.*/\1/' <<<"$line") |"
                echo "<!-- $(grep '^check:' <<<"$said") -->"
                echo "<!-- $line -->"
            else
                echo "| pytorch | $mode | $prec | - | failed: $(tail -n 1 "$work/torch-$prec-$mode.err") |"
            fi
        done
    done
} | tee "$LOG"
