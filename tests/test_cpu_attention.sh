#!/usr/bin/env bash
# The CPU's attention modes end to end ([run] attention, model/backend.h): "fused" (the flash-style kernel,
# cpu/attention_flash.c) trains to the weights of "materialized" (the blocked kernel) within float
# rounding, and its checkpoint evaluates; the three modes evaluate to the same perplexity within 1e-5 below
# and above 1024 tokens (where "auto" changes kernels); counted positions with "fused" and the
# receptive-field analysis of a "fused" model are refused with what to set instead.
# usage: test_cpu_attention.sh <biaskit binary>
set -u
bk=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
work=$(mktemp -d)
trap "rm -rf $work" EXIT
failures=0 passed=0

fail() {
    echo "FAIL: $1"
    [ -n "${2:-}" ] && echo "$2" | head -30 | sed 's/^/    /'
    failures=$((failures + 1))
}
ok() {
    echo "ok: $1"
    passed=$((passed + 1))
}

mkdir -p "$work/corpus"
for i in $(seq 1 3000); do
    echo "static int value_$i = $i; /* line $i of a small corpus for the attention-mode test */"
done >"$work/corpus/a.h"

# exp NAME ATTENTION [TERMS]: a tiny experiment
exp() {
    cat >"$work/$1.toml" <<EOF
[model]
layers = 2
heads = 2
dim = 16
[train]
length = 64
batch = 2
steps = 12
lr = 3e-3
warmup = 1
log_every = 1
eval_every = 0
eval_batches = 1
seed = 5
[data]
paths = ["corpus"]
[run]
threads = 2
attention = "$2"
out_dir = "runs/$1"
${3:-[[term]]
plugin = \"alibi\"}
EOF
}

# relative L2 distance of two checkpoints' fp32 tensors (plain Python: no numpy needed)
distance() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name != "__metadata__" and t["dtype"] == "F32":
            a, b = t["data_offsets"]
            out[name] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return out
x, y = tensors(sys.argv[1]), tensors(sys.argv[2])
assert x and x.keys() == y.keys()
num = sum((p - q) ** 2 for k in x for p, q in zip(x[k], y[k]))
den = sum(q * q for k in y for q in y[k])
print("%.3e" % ((num / den) ** 0.5))
PY
}

exp fused fused
exp materialized materialized
out_f=$("$bk" train "$work/fused.toml" 2>&1)
st_f=$?
out_m=$("$bk" train "$work/materialized.toml" 2>&1)
st_m=$?
if [ $st_f -ne 0 ] || [ $st_m -ne 0 ]; then
    fail "both modes train" "$out_f
$out_m"
else
    # float rounding alone: 1.4e-6 (2026-11-28); a backward with D = 0.9 dO.O (a wrong gradient): 1.1e-2
    d=$(distance "$work/runs/fused/checkpoint.safetensors" "$work/runs/materialized/checkpoint.safetensors")
    if awk -v d="$d" 'BEGIN {exit !(d != "" && d <= 1e-4)}'; then
        ok "fused trains to the materialized weights within 1e-4 relative (12 AdamW steps: $d)"
    else
        fail "fused trains to the materialized weights within 1e-4 relative" "distance '$d'"
    fi
fi

# evaluation: the loss column of one length
ckpt=$work/runs/materialized/checkpoint.safetensors
ev() { "$bk" eval "$ckpt" --lengths 512,1100 --tokens 4400 --csv - --set "run.attention=$1" 2>/dev/null | awk -F, -v L="$2" '$1 == L {print $5}'; }
a512=$(ev auto 512) m512=$(ev materialized 512) f512=$(ev fused 512)
a1100=$(ev auto 1100) m1100=$(ev materialized 1100) f1100=$(ev fused 1100)
# (which kernel "auto" runs at each length is checked bit for bit by test_attention_flash; the CSV's six
# digits do not tell the two kernels apart)
close() { awk -v a="$1" -v b="$2" 'BEGIN {x = a - b; if (x < 0) x = -x; exit !(a != "" && b != "" && x <= 1e-5 * b)}'; }
if close "$f512" "$m512" && close "$a512" "$m512" && close "$f1100" "$m1100" && close "$a1100" "$m1100"; then
    ok "auto, fused and materialized evaluations agree within 1e-5 (512: $a512 $f512 $m512; 1100: $a1100 $f1100 $m1100)"
else
    fail "auto, fused and materialized evaluations agree within 1e-5" "512: $a512 $f512 $m512; 1100: $a1100 $f1100 $m1100"
fi
out=$("$bk" eval "$work/runs/fused/checkpoint.safetensors" --lengths 64,256 --tokens 1024 2>&1)
if [ $? -eq 0 ] && grep -Eq '^ +256 ' <<<"$out"; then ok "the fused model evaluates"; else
    fail "the fused model evaluates" "$out"; fi

# refusals
exp cope fused $'[[term]]\nplugin = "cope"'
out=$("$bk" train "$work/cope.toml" 2>&1)
if [ $? -ne 0 ] && grep -q "counted positions" <<<"$out" && grep -q 'attention = "materialized"' <<<"$out"; then
    ok "counted positions with the fused CPU attention are refused"
else
    fail "counted positions with the fused CPU attention are refused" "$out"
fi
out=$("$bk" erf "$ckpt" --length 64 --sequences 2 --queries 8 --set run.attention=fused 2>&1)
if [ $? -ne 0 ] && grep -q "run.attention=materialized" <<<"$out"; then
    ok "the receptive field of a fused CPU attention is refused"
else
    fail "the receptive field of a fused CPU attention is refused" "$out"
fi
out=$("$bk" erf "$ckpt" --length 64 --sequences 2 --queries 8 2>&1)
if [ $? -eq 0 ]; then ok "the receptive field under auto runs"; else fail "the receptive field under auto runs" "$out"; fi

echo "$passed passed, $failures failed"
[ $failures -eq 0 ]
