#!/usr/bin/env bash
# bench_flash_gpu --dump (emulated) and bench/gpu/check_dump.py: biaskit's device attention at a few
# shapes agrees with PyTorch's float64 attention (fused fp32, fused bf16 with bf16 and with fp32 storage,
# materialized, learnable and fixed tables, forward only), and the check fails on a corrupted result (exit 1) and a dump without meta.json
# (exit 2); --dump into a folder that does not exist fails naming the file. Python: torch_python.sh (torch
# and numpy; skipped, 77, without them).
set -uo pipefail
bin=$1
root=$2
. "$(dirname "${BASH_SOURCE[0]}")/torch_python.sh"
torch_python "torch, numpy"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
n=0
for cfg in "kerple fwdbwd fp32 fused 70 fp32" "t5 fwdbwd bf16 fused 150 bf16" "alibi fwdbwd fp32 materialized 130 fp32" \
           "kerple fwd bf16 fused 150 bf16" "none fwdbwd fp32 fused 33 fp32" "kerple fwdbwd bf16 fused 70 fp32"; do
    set -- $cfg
    n=$((n + 1))
    dir=$work/d$n
    mkdir -p "$dir"
    if ! "$bin" --batch 2 --heads 3 --length "$5" --head-dim 24 --table "$1" --mode "$2" --dtype "$3" \
         --storage "$6" --attention "$4" --device emulated --warmup 0 --reps 1 --dump "$dir" >"$dir.log" 2>&1; then
        echo "FAIL: bench_flash_gpu $cfg: $(cat "$dir.log")"
        fail=1
        continue
    fi
    if ! grep -q "^RESULT .* dtype=$3 storage=$6 .*ms=" "$dir.log" || ! grep -q "\"storage\": \"$6\"" "$dir/meta.json"; then
        echo "FAIL: bench_flash_gpu $cfg: the RESULT line or meta.json does not say storage=$6: $(cat "$dir.log")"
        fail=1
    fi
    if out=$("$py" "$root/bench/gpu/check_dump.py" "$dir" --device cpu --block 64 2>&1); then
        echo "$out"
    else
        echo "FAIL: check_dump.py $cfg: $out"
        fail=1
    fi
done
# a wrong value in out is caught (the first dump: fp32, tolerance 1e-4), and a dump needs its meta.json
"$py" -c "
import numpy as np, sys
x = np.fromfile(sys.argv[1], '<f4'); x[7] += 0.01 * np.abs(x).max(); x.tofile(sys.argv[1])" "$work/d1/out.f32"
"$py" "$root/bench/gpu/check_dump.py" "$work/d1" --device cpu >"$work/bad.log" 2>&1
rc=$?
if [ "$rc" != 1 ] || ! grep -q "FAILED" "$work/bad.log"; then
    echo "FAIL: a corrupted out.f32 gave exit $rc: $(cat "$work/bad.log")"
    fail=1
fi
rm "$work/d2/meta.json"
"$py" "$root/bench/gpu/check_dump.py" "$work/d2" --device cpu >"$work/nometa.log" 2>&1
rc=$?
if [ "$rc" != 2 ] || ! grep -q "meta.json" "$work/nometa.log"; then
    echo "FAIL: a dump without meta.json gave exit $rc: $(cat "$work/nometa.log")"
    fail=1
fi
# a dump into a folder that does not exist: exit 1, the file named, a RESULT line saying so
out=$("$bin" --batch 1 --heads 1 --length 8 --head-dim 8 --device emulated --warmup 0 --reps 1 \
      --dump "$work/missing/dir" 2>&1)
rc=$?
if [ "$rc" != 1 ] || ! grep -q "cannot create '$work/missing/dir/qkv.f32'" <<<"$out" ||
   ! grep -q "^RESULT .*error=--dump" <<<"$out"; then
    echo "FAIL: --dump into a missing folder gave exit $rc: $out"
    fail=1
fi
# bf16 storage without bf16 products, or with the materialized attention: a usage error (exit 2)
for bad in "--dtype fp32 --storage bf16" "--dtype bf16 --attention materialized --storage bf16" "--storage fp16"; do
    out=$("$bin" --batch 1 --heads 1 --length 8 --head-dim 8 --device emulated --warmup 0 --reps 1 $bad 2>&1)
    rc=$?
    if [ "$rc" != 2 ] || ! grep -q -- "--storage" <<<"$out"; then
        echo "FAIL: bench_flash_gpu $bad gave exit $rc: $out"
        fail=1
    fi
done
exit $fail
