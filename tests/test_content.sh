#!/usr/bin/env bash
# Content-dependent positions end to end. The content position (plugin.h, BIASKIT_CAP_CONTENT;
# core/bias/content.c): fox trains, evaluates past its training length and is deterministic; the
# misbehaving test plugin (tests/plugins/badcontent.c) fails with messages naming the plugin, the hook, the
# layer, the step and the batch row, token and head; bad options and bad term combinations are refused
# with their position. Counted positions (BIASKIT_CAP_COUNT): cope trains and evaluates, its bad options,
# trains on the emulated device's materialized attention; a second counting term, the fused device
# attention and a misbehaving counting plugin (tests/plugins/badcount.c) are refused with what and where.
# usage: test_content.sh <biaskit binary> <test plugin dir>
set -u
bk=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") testplugins=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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
# expect_fail NAME OUTPUT STATUS PATTERN...: a non-zero status and every pattern in the output
expect_fail() {
    local name=$1 out=$2 status=$3
    shift 3
    if [ "$status" -eq 0 ]; then
        fail "$name: exited 0" "$out"
        return
    fi
    for p in "$@"; do
        if ! grep -q -- "$p" <<<"$out"; then
            fail "$name: the message lacks '$p'" "$out"
            return
        fi
    done
    ok "$name"
}

mkdir -p "$work/corpus"
for i in $(seq 1 400); do
    echo "static int value_$i = $i; /* line $i of a small corpus for the content-position test */"
done >"$work/corpus/a.h"

# exp NAME TERMS: an experiment file with the given [[term]] text
exp() {
    cat >"$work/$1.toml" <<EOF
[model]
layers = 2
heads = 2
dim = 16
[train]
length = 16
batch = 2
steps = 4
warmup = 1
log_every = 1
eval_every = 0
eval_batches = 1
seed = 3
[data]
paths = ["corpus"]
[run]
threads = 1
out_dir = "runs/$1"
$2
EOF
}

# --- fox: trains, evaluates at 8x, the same bits twice ---
exp fox $'[[term]]\nplugin = "fox"'
out=$("$bk" train "$work/fox.toml" 2>&1)
if [ $? -ne 0 ]; then fail "fox trains" "$out"; else ok "fox trains"; fi
out=$("$bk" eval "$work/runs/fox/checkpoint.safetensors" --lengths 16,128 --tokens 512 2>&1)
if [ $? -eq 0 ] && grep -Eq '^ +128 ' <<<"$out"; then ok "fox evaluates at 8x its training length"; else
    fail "fox evaluates at 8x its training length" "$out"; fi
cp "$work/runs/fox/checkpoint.safetensors" "$work/first.safetensors"
out=$("$bk" train "$work/fox.toml" --set 'run.out_dir="runs/fox2"' 2>&1)
# the tensors' bytes (the header's metadata names the run directory)
tensors() { python3 -c 'import sys, struct; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; f.seek(8 + n); sys.stdout.buffer.write(f.read())' "$1"; }
if cmp -s <(tensors "$work/first.safetensors") <(tensors "$work/runs/fox2/checkpoint.safetensors") &&
    [ -n "$(tensors "$work/first.safetensors" | head -c 16)" ]; then
    ok "fox trains to the same bits twice"
else
    fail "fox trains to the same bits twice" "$out"
fi
out=$("$bk" params "$work/runs/fox/checkpoint.safetensors" 2>&1)
if grep -q "term.fox.w" <<<"$out" && grep -q "term.fox.b" <<<"$out"; then ok "the gate's w and b are in the checkpoint"; else
    fail "the gate's w and b are in the checkpoint" "$out"; fi

# --- the misbehaving plugin: token 21 of the call is batch row 1, token 5 ---
bad=$testplugins/biaskit_badcontent.so
for case in "nan:the step nan:" "negative:the step -0.5:may not go back" \
    "error:content() failed:fails on purpose" "backward_error:content_backward() failed:fails on purpose"; do
    IFS=: read -r failure what extra <<<"$case"
    exp "bad_$failure" "[[term]]
plugin = \"$bad\"
failure = \"$failure\"
token = 21
layer = 1"
    out=$("$bk" train "$work/bad_$failure.toml" 2>&1)
    status=$?
    pats=("badcontent" "$what" "layer 1" "step 1")
    [ -n "$extra" ] && pats+=("$extra")
    case $failure in nan | negative) pats+=("batch row 1, token 5, head 1") ;; esac
    expect_fail "badcontent $failure" "$out" $status "${pats[@]}"
done

# --- options out of range and term rules, each with its file:line ---
exp opt1 $'[[term]]\nplugin = "fox"\nbias_init = "timescales"\nt_min = 50.0\nt_max = 10.0'
out=$("$bk" train "$work/opt1.toml" 2>&1)
expect_fail "fox t_max < t_min" "$out" $? "opt1.toml:23" "t_max" "t_min = 50"
exp opt2 $'[[term]]\nplugin = "fox"\nw_std = -1.0'
out=$("$bk" train "$work/opt2.toml" 2>&1)
expect_fail "fox w_std < 0" "$out" $? "opt2.toml:21" "w_std" ">= 0"
exp opt3 $'[[term]]\nplugin = "fox"\ngate = "sometimes"'
out=$("$bk" train "$work/opt3.toml" 2>&1)
expect_fail "fox gate not a choice" "$out" $? "opt3.toml:21" "full" "bias_only"
exp two $'[[term]]\nplugin = "fox"\n[[term]]\nplugin = "fox"'
out=$("$bk" train "$work/two.toml" 2>&1)
expect_fail "two content terms" "$out" $? "two.toml:21" "a second content-position term"
exp seg $'[[term]]\nplugin = "bipe"\n[[term]]\nplugin = "fox"\nstream = "segment"'
out=$("$bk" train "$work/seg.toml" 2>&1)
expect_fail "fox on the segment stream" "$out" $? "seg.toml:21" "token index"

# --- CoPE: trains and evaluates past its vectors, trains on the emulated materialized attention; its bad
# options, a misbehaving counting plugin and the fused device attention are refused with what and where ---
exp cope $'[[term]]\nplugin = "cope"\ninit_std = 0.2'
out=$("$bk" train "$work/cope.toml" 2>&1)
if [ $? -ne 0 ]; then fail "cope trains" "$out"; else ok "cope trains"; fi
out=$("$bk" eval "$work/runs/cope/checkpoint.safetensors" --lengths 16,128 --tokens 512 2>&1)
if [ $? -eq 0 ] && grep -Eq '^ +128 ' <<<"$out"; then ok "cope evaluates at 8x (counts clamped to its 17 vectors)"; else
    fail "cope evaluates at 8x (counts clamped to its 17 vectors)" "$out"; fi
exp cope1 $'[[term]]\nplugin = "cope"\npoints = 1'
out=$("$bk" train "$work/cope1.toml" 2>&1)
expect_fail "cope points = 1" "$out" $? "cope1.toml:21" "points" "2 .. 65536"
exp cope2 $'[[term]]\nplugin = "cope"\ninit_std = -0.5'
out=$("$bk" train "$work/cope2.toml" 2>&1)
expect_fail "cope init_std < 0" "$out" $? "cope2.toml:21" "init_std" ">= 0"
exp cope3 $'[[term]]\nplugin = "cope"\n[[term]]\nplugin = "cope"'
out=$("$bk" train "$work/cope3.toml" 2>&1)
expect_fail "two counting terms" "$out" $? "cope3.toml:21" "a second counting term"
exp cope4 $'[[term]]\nplugin = "cope"'
out=$("$bk" train "$work/cope4.toml" --set 'run.device="emulated"' --set 'run.attention="fused"' 2>&1)
expect_fail "cope on the fused device attention" "$out" $? "cope" "BIASKIT_CAP_COUNT" "fused attention" \
    "attention = \"materialized\""
out=$("$bk" train "$work/cope4.toml" --set 'run.device="emulated"' --set 'run.attention="materialized"' \
    --set 'run.out_dir="runs/cope4m"' 2>&1)
if [ $? -eq 0 ] && [ -f "$work/runs/cope4m/checkpoint.safetensors" ]; then
    ok "cope trains on the emulated device's materialized attention"
else fail "cope trains on the emulated device's materialized attention" "$out"; fi
badc=$testplugins/biaskit_badcount.so
for case in "nan:not finite: nan at vector 1, component 2" "points:gave 1 position vectors" \
    "error:count_vectors() failed:fails on purpose"; do
    IFS=: read -r failure what extra <<<"$case"
    exp "badcount_$failure" "[[term]]
plugin = \"$badc\"
failure = \"$failure\""
    out=$("$bk" train "$work/badcount_$failure.toml" 2>&1)
    status=$?
    pats=("badcount" "$what")
    [ -n "$extra" ] && pats+=("$extra")
    expect_fail "badcount $failure" "$out" $status "${pats[@]}"
done

echo "test_content: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
