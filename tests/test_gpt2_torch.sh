#!/usr/bin/env bash
# bench/gpu/gpt2_torch.py (bench/gpu/run.sh's PyTorch peer) on the CPU at a tiny shape: every attention mode
# the installed PyTorch has computes the eager fp32 loss of the same weights (--check, fp32 and bf16), eager
# and sdpa also take two training steps, and bad arguments are refused. Python: torch_python.sh (skipped,
# 77, without torch). sdpa needs PyTorch >= 2.0 and flex >= 2.5 (flex runs --check only: FlexAttention has
# no backward on the CPU); a mode this PyTorch lacks is reported, not run.
set -uo pipefail
root=$1
script=$root/bench/gpu/gpt2_torch.py
. "$(dirname "${BASH_SOURCE[0]}")/torch_python.sh"
torch_python torch
version=$("$py" -c "import torch; print(torch.__version__)")
fail=0
tiny=(--device cpu --layers 2 --dim 32 --heads 2 --vocab 256 --batch 2 --length 64 --warmup 0 --check)
for mode in eager sdpa flex; do
    case $mode in
    sdpa) have="import torch.nn.functional as F; F.scaled_dot_product_attention" steps=2 ;;
    flex) have="from torch.nn.attention.flex_attention import flex_attention" steps=0 ;;
    *) have="import torch" steps=2 ;;
    esac
    if ! "$py" -c "$have" 2>/dev/null; then
        echo "not run: --mode $mode (PyTorch $version lacks it)"
        continue
    fi
    for prec in fp32 bf16; do
        if out=$("$py" "$script" "${tiny[@]}" --mode $mode --precision $prec --steps $steps 2>&1); then
            grep -q "^check: $mode $prec loss" <<<"$out" || { echo "FAIL: $mode $prec printed no check line: $out"; fail=1; }
            if [ "$steps" -gt 0 ] && ! grep -Eq "^pytorch .* $mode $prec: [0-9]+ tokens/s" <<<"$out"; then
                echo "FAIL: $mode $prec printed no tokens/s: $out"
                fail=1
            fi
            grep -E '^(check|pytorch)' <<<"$out"
        else
            echo "FAIL: $mode $prec: $out"
            fail=1
        fi
    done
done
# refused: an unknown mode; flex where FlexAttention is missing names the version it needs
if "$py" "$script" --device cpu --mode bogus >/dev/null 2>&1; then
    echo "FAIL: --mode bogus accepted"
    fail=1
fi
if ! "$py" -c "from torch.nn.attention.flex_attention import flex_attention" 2>/dev/null; then
    out=$("$py" "$script" "${tiny[@]}" --mode flex --steps 0 2>&1) && { echo "FAIL: flex ran on PyTorch $version"; fail=1; }
    grep -q "PyTorch >= 2.5" <<<"$out" || { echo "FAIL: flex on $version said: $out"; fail=1; }
fi
exit $fail
