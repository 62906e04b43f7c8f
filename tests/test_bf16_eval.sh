#!/usr/bin/env bash
# A checkpoint trained with bf16 storage ([run] precision = "bf16", which implies bf16 products) on the
# emulated device evaluates on the CPU (README, "Devices"): the CPU rebuilds the fp32 model from the
# checkpoint's fp32 master weights and computes fp32. Its losses must equal, within 1e-4 relative, the
# losses of the same checkpoint evaluated on the emulated device with fp32 storage and fp32 products
# (the same fp32 model on another backend: reductions in another order), and be within 1e-3 relative
# of the checkpoint's own setting evaluated emulated (bf16 storage and products: bf16 rounding; seen:
# 1.1e-5, and the CPU's equal to the emulated fp32 ones to the 6 decimals of the CSV). The
# model is trained for 40 steps first, so that its loss is well below a uniform guess (ln 256 = 5.55)
# and a CPU evaluation that lost or mixed up weights could not pass by chance.
# usage: test_bf16_eval.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

mkdir -p "$work/corpus" && : >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 30000 ]; do
    cat "$src/README.md" >>"$work/corpus/text.txt"
done
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 4\nsteps = 40\nwarmup = 2\nlr = 1e-2\nlog_every = 10\neval_every = 0\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' >"$work/tiny.toml"

check "bf16 storage: trains on the emulated device" 0 "device: emulated.*bf16 matmuls, bf16 storage.*done: 40 steps" \
    bash -c "'$bk' train '$work/tiny.toml' --set run.device=emulated --set run.precision=bf16 --out '$work/run' --plain 2>&1 | tr '\n' ' '"
ck=$work/run/checkpoint.safetensors

# the loss at lengths 16 and 32 (the CSV's fifth column), one per line
losses() {
    "$bk" eval "$ck" --lengths 16,32 --tokens 4000 --csv - "$@" 2>/dev/null | awk -F, '$1 ~ /^[0-9]+$/ { print $5 }'
}
check "bf16 storage: the checkpoint evaluates on the CPU" 0 "device: cpu .* 16 +1\.00 +[0-9]+ +[0-9]+ +[0-9.]+ " \
    bash -c "'$bk' eval '$ck' --lengths 16 --tokens 4000 --set run.device=cpu 2>&1 | tr '\n' ' '"
cpu=$(losses --set run.device=cpu)
fp32=$(losses --set run.device=emulated --set run.precision=fp32 --set run.matmul=fp32)
own=$(losses --set run.device=emulated)
echo "    losses at 16, 32: cpu $(echo $cpu), emulated fp32 $(echo $fp32), emulated bf16 $(echo $own)"

# compare A B TOL: both hold 2 losses, each finite, below 5, and |a - b| <= TOL * |b|
compare() {
    awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN {
        n = split(a, x, " "); m = split(b, y, " "); ok = n == 2 && m == 2; worst = 0
        for (i = 1; i <= n && ok; i++) {
            if (!(x[i] + 0 > 0 && x[i] + 0 < 5 && y[i] + 0 > 0)) ok = 0
            d = x[i] - y[i]; if (d < 0) d = -d; d /= y[i]; if (d > worst) worst = d
        }
        if (ok && worst <= tol) printf "same within %g (largest relative difference %.2g)\n", tol, worst
        else printf "differ: %s vs %s (largest relative difference %.2g, allowed %g)\n", a, b, worst, tol }'
}
check "bf16 storage: CPU losses are the emulated fp32 losses (1e-4 relative)" 0 "^same within" compare "$cpu" "$fp32" 1e-4
check "bf16 storage: CPU losses are near the emulated bf16 losses (1e-3 relative)" 0 "^same within" compare "$cpu" "$own" 1e-3
check "bf16 storage: the model learned (CPU loss at 16 below 5)" 0 "^yes$" \
    awk -v a="$cpu" 'BEGIN { split(a, x, " "); print (x[1] + 0 > 0 && x[1] + 0 < 5 ? "yes" : "no: " a) }'

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
