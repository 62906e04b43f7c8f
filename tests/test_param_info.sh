#!/usr/bin/env bash
# A plugin's param_info() (plugin.h): `biaskit plugins NAME` prints one line per tensor with its shape, its
# bounds and its initialisation in words, "not declared" for a plugin without the hook, the plugin's
# message when the hook fails and a text cut at its end when the plugin left no NUL in it; `biaskit check`
# passes a truthful declaration and fails an inverted or non-finite bound, a text without its NUL, a
# failing hook and bounds that param_init/param_project do not keep; `biaskit params` prints the bounds
# under its table. The plugin is tests/plugins/paraminfo.c (its option `mode` picks the declaration).
# usage: test_param_info.sh <biaskit binary> <source dir> <test plugin dir>
set -u
bk=$1 src=$2 testplugins=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
pi=$testplugins/biaskit_paraminfo.so

# ---- biaskit plugins --------------------------------------------------------------------------------
check "plugins: a tensor's shape, bounds and init" 0 '^    a\[8x1\] +bounds \[0, 10\] +init 0\.1 \(h \+ 1\)$' "$bk" plugins "$pi"
check "plugins: param_info() failing prints its message" 0 \
    '^    b\[8x1\] +\(param_info\(\) failed: param_info of b fails, as a test\)$' "$bk" plugins "$pi"
# the text fills all 160 bytes without a NUL: 159 characters shown, then the note
check "plugins: a text without its NUL is cut, and said so" 0 \
    '^    c\[1x1\] +bounds \[-1, 1\] +init x{159} \(param_info\(\) left the text without its NUL: cut\)$' "$bk" plugins "$pi"
check "plugins: without param_info(), 'not declared'" 0 '^    slope\[8x1\] +bounds not declared +init not declared$' \
    "$bk" plugins "$testplugins/biaskit_testlin.so"
check "plugins: the summary line is unchanged" 0 \
    '^  parameters:   17 learnable for 8 heads, shared across layers by default: a\[8x1\], b\[8x1\], c\[1x1\]$' \
    "$bk" plugins "$pi"

# ---- biaskit check ----------------------------------------------------------------------------------
check "check: a truthful declaration passes" 0 \
    '^PASS  param_info\(\) for 3 tensors: a \[0, 10\], init 0\.1 \(h \+ 1\); b no bounds, init 0; c \[-1, 1\], init 0; initial, random and wild projected parameters inside the bounds' \
    "$bk" check "$pi" --set 'mode="good"'
check "check: the truthful plugin passes everything" 0 '^[0-9]+ passed, 0 failed, [0-9]+ skipped$' \
    "$bk" check "$pi" --set 'mode="good"'
check "check: inverted bounds fail" 1 "^FAIL  param_info\(\): tensor 'a': bounds \[10, 0\] \(expected lower -inf or finite" \
    "$bk" check "$pi" --set 'mode="inverted"'
check "check: a NaN bound fails" 1 "^FAIL  param_info\(\): tensor 'a': bounds \[0, nan\]" \
    "$bk" check "$pi" --set 'mode="nonfinite"'
check "check: initial values outside the bounds fail, naming the element" 1 \
    "^FAIL  param_info\(\): a\[0\] = 0\.100000001 with the initial parameters \(param_init, param_project\), outside the declared \[0, 0\.05\] of 'a'" \
    "$bk" check "$pi" --set 'mode="outside"'
check "check: a text without its NUL fails" 1 "^FAIL  param_info\(\): tensor 'c': the init text has no NUL within its 160 bytes" \
    "$bk" check "$pi" --set 'mode="unterminated"'
check "check: a failing param_info() fails with its message" 1 \
    "^FAIL  param_info\(\): tensor 'b': param_info\(\) failed: param_info of b fails, as a test" \
    "$bk" check "$pi" --set 'mode="fail"'
check "check: only the param-info item fails" 1 '^[0-9]+ passed, 1 failed, [0-9]+ skipped$' \
    "$bk" check "$pi" --set 'mode="fail"'
check "check: without param_info(), a SKIP" 1 '^SKIP  param_info\(\): not declared' \
    "$bk" check "$testplugins/biaskit_testlin.so"

# ---- biaskit params ---------------------------------------------------------------------------------
mkdir -p "$work/corpus" && : >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 20000 ]; do
    cat "$src/README.md" >>"$work/corpus/text.txt"
done
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 2\nwarmup = 1\nlog_every = 2\n'\
'eval_every = 0\neval_batches = 1\n[data]\npaths = ["corpus"]\n[run]\ndevice = "cpu"\n[[term]]\nplugin = "paraminfo"\nmode = "good"\n' >"$work/pi.toml"
export BIASKIT_PLUGIN_PATH=$testplugins
check "params: a paraminfo model trains" 0 "done: 2 steps" "$bk" train "$work/pi.toml" --out "$work/run" --plain
ckpt=$(ls "$work"/run/*.safetensors 2>/dev/null | head -1)
check "params: the bounds and initialisation under the table" 0 \
    '^  term\.paraminfo\.a +bounds \[0, 10\] +init 0\.1 \(h \+ 1\)$' "$bk" params "$ckpt"
check "params: an unbounded tensor" 0 '^  term\.paraminfo\.b +bounds no bounds +init 0$' "$bk" params "$ckpt"
check "params: the CSV is unchanged (no bounds in it)" 0 '^name,term,tensor,layer,row,col,value,initial$' \
    "$bk" params "$ckpt" --csv -

# ---- per-layer initialisation (the SDK guide, "Per-layer parameters"): copy l of term t starts from the seed
# m(m(m(s) ^ t) ^ l), m = biaskit_splitmix64, s = [train] seed, t the term's 1-based position; paraminfo's
# seed_probe writes that seed into b_0..b_2 (22 bits each), read back from `biaskit params` as initial values
printf '[model]\nlayers = 3\nheads = 3\ndim = 24\n[train]\nlength = 16\nbatch = 2\nsteps = 1\nwarmup = 1\nlog_every = 1\n'\
'eval_every = 0\neval_batches = 1\nseed = 4242\n[data]\npaths = ["corpus"]\n[run]\ndevice = "cpu"\n[[term]]\nplugin = "alibi"\n'\
'[[term]]\nplugin = "paraminfo"\nmode = "good"\nseed_probe = true\nper_layer = true\n' >"$work/seed.toml"
check "per-layer seeds: a per-layer paraminfo model trains" 0 "done: 1 steps" \
    "$bk" train "$work/seed.toml" --out "$work/seedrun" --plain
ckpt=$(ls "$work"/seedrun/*.safetensors 2>/dev/null | head -1)
"$bk" params "$ckpt" --csv - >"$work/seed.csv" 2>&1
check "per-layer seeds: each layer's copy starts from m(m(m(s) ^ t) ^ l) (t = 2, the second [[term]])" 0 \
    "^seeds as documented: 3 layers$" python3 - "$work/seed.csv" <<'PY'
import csv, sys
M = (1 << 64) - 1
def m(x):  # biaskit_splitmix64 (sdk/include/biaskit/random.h)
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["name"] == "term.paraminfo.b"]
got = {}
for r in rows:
    if int(r["row"]) < 3:
        got.setdefault(int(r["layer"]), {})[int(r["row"])] = int(float(r["initial"]))
for layer in range(3):
    want = m(m(m(4242) ^ 2) ^ layer)
    seed = sum(got[layer][k] << (22 * k) for k in range(3))
    if seed != want:
        sys.exit(f"layer {layer}: seed {seed:#x}, documented {want:#x}")
print(f"seeds as documented: {len(got)} layers")
PY

echo "test_param_info: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
