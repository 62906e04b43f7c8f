#!/usr/bin/env bash
# The biaskit command end to end: exit codes, messages and table values.
# usage: test_cli.sh <biaskit binary> <source dir> <test plugin dir>
set -u
bk=$1 src=$2 testplugins=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0 passed=0

# check NAME EXPECTED_EXIT PATTERN COMMAND...: runs the command, checks its exit code and that its
# output (stdout and stderr) matches the extended regular expression PATTERN.
check() {
    local name=$1 want=$2 pattern=$3
    shift 3
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pattern" <<<"$out"; then
        echo "FAIL: $name (exit $rc, expected $want; pattern: $pattern)"
        echo "$out" | head -30 | sed 's/^/    /'
        failures=$((failures + 1))
    else
        echo "ok: $name"
        passed=$((passed + 1))
    fi
}

check "version" 0 "biaskit [0-9.]+ \(plugin ABI 1\)" "$bk" --version
check "version names the device" 0 "^device: (cpu|cuda)" "$bk" --version
check "help lists commands" 0 "plugins .*bias .*config" bash -c "'$bk' --help | tr '\n' ' '"
check "no command is a usage error" 2 "usage: biaskit" "$bk"
check "unknown command" 2 "unknown command 'bais'" "$bk" bais
check "plugins lists alibi" 0 "^alibi 1\.[0-9.]+ - " "$bk" plugins
check "plugins shows options with defaults" 0 "slope_scale +float += 1 " "$bk" plugins alibi
check "plugins help" 0 "usage: biaskit plugins" "$bk" plugins --help
check "plugins by path" 0 "^testlin 0\.0\.1" "$bk" plugins "$testplugins/biaskit_testlin.so"
check "plugins from BIASKIT_PLUGIN_PATH" 0 "^testlin " env BIASKIT_PLUGIN_PATH="$testplugins" "$bk" plugins
check "broken plugins are reported, not fatal" 0 "warning: skipped: plugin '.*biaskit_futureabi.so': ABI version mismatch" \
    env BIASKIT_PLUGIN_PATH="$testplugins" "$bk" plugins
check "unknown plugin name" 1 "plugin 'nosuch' not found; searched: " "$bk" plugins nosuch

# ALiBi, 8 heads: slopes 1/2 .. 1/256; T[h][d] = -m_h d
check "bias prints the first head" 0 "^ +3 +-1\.5 +-0\.75 +-0\.375 " "$bk" bias "$src/examples/alibi.toml" --length 8
check "bias prints the last head" 0 " -0\.0273438$" "$bk" bias "$src/examples/alibi.toml" --length 8
check "bias shows the device" 0 "^device: cpu" "$bk" bias "$src/examples/alibi.toml" --length 4 --device cpu
check "bias --set changes heads" 0 "^ +d +h0 +h1 +h2 +h3$" "$bk" bias "$src/examples/alibi.toml" --length 4 --set model.heads=4
check "bias --layer out of range" 2 "--layer: expected an integer in \[0, 3\], got '9'" "$bk" bias "$src/examples/alibi.toml" --layer 9
check "bias unknown option suggests" 2 "unknown option '--lenght' \(did you mean '--length'\?\)" "$bk" bias "$src/examples/alibi.toml" --lenght 8
check "bias without file" 2 "expected one experiment file" "$bk" bias
check "bias missing file" 1 "cannot read '$work/nope.toml'" "$bk" bias "$work/nope.toml"
check "bias kernel mixing" 0 "kernel mixing of 0\.5 x alibi \+ 0\.5 x alibi_half" "$bk" bias "$src/examples/alibi_kernel_mix.toml" --length 4 --terms

"$bk" bias "$src/examples/alibi.toml" --length 8 --csv "$work/t.csv" >/dev/null 2>&1
check "csv has a header and every value" 0 "^129 " wc -l "$work/t.csv"
check "csv values" 0 "^0,token,mixed,0,3,-1\.5$" cat "$work/t.csv"
check "csv on stdout is pure" 0 "^layer,stream,table,head,distance,value$" bash -c "'$bk' bias '$src/examples/alibi.toml' --length 2 --csv - | head -1"

printf '[model]\nheads = 8\nhaeds = 4\n' >"$work/typo.toml"
check "unknown key names file:line:col" 1 "$work/typo.toml:3:1: unknown key 'haeds' in \[model\] \(did you mean 'heads'\?\)" "$bk" bias "$work/typo.toml"
printf '[model]\nheads = "8"\n' >"$work/type.toml"
check "wrong type names file:line:col" 1 "$work/type.toml:2:9: \[model\] heads: expected an integer, got string" "$bk" config "$work/type.toml"
printf '[[term]]\nplugin = "alibi"\nslope = 2\n' >"$work/opt.toml"
check "unknown plugin option" 1 "$work/opt.toml:3:1: \[\[term\]\] #1 \(alibi\): unknown key 'slope'" "$bk" bias "$work/opt.toml"
printf '[[term]]\nplugin = "nosuch"\n' >"$work/plugin.toml"
check "unknown plugin in config" 1 "$work/plugin.toml:1:1: \[\[term\]\] #1: plugin 'nosuch' not found" "$bk" bias "$work/plugin.toml"
printf '[model\nheads = 8\n' >"$work/bad.toml"
check "bad TOML" 1 "$work/bad.toml:1:[0-9]+: invalid TOML" "$bk" bias "$work/bad.toml"

check "config --keys documents every key" 0 "heads += 8 +integer in \[1, 1024\]; attention heads per block" "$bk" config --keys
check "config resolves defaults" 0 "^vocab = 256$" "$bk" config "$src/examples/alibi.toml"
check "config --set bad value" 1 "--set model.heads=x.*expected an integer, got string" "$bk" config "$src/examples/alibi.toml" --set model.heads=x

# biaskit check: one line per check, a closing count, exit 1 on any FAIL, 2 on bad usage
check "help lists check" 0 "^  check +conformance checks of a plugin" "$bk" --help
check "check help" 0 "usage: biaskit check <NAME\|PATH>" "$bk" check --help
check "check alibi passes" 0 "^[0-9]+ passed, 0 failed, [0-9]+ skipped$" "$bk" check alibi
check "check alibi: finite tables" 0 "^PASS  table finite up to 65536 distances \(default parameters\)$" "$bk" check alibi
check "check alibi: option probes" 0 "^PASS  option slopes \(float array\): 10 probes handled" "$bk" check alibi
check "check by path" 1 "^PASS  loads: testlin 0\.0\.1 from " "$bk" check "$testplugins/biaskit_testlin.so"
check "check: testlin's NaN switch is caught" 1 "^FAIL  option nan_at \(int\): 2 of 6 probes fail: 0: table\(\) with 128 distances gives nan" \
    "$bk" check "$testplugins/biaskit_testlin.so"
check "check: a wrong gradient fails" 1 "^FAIL  table_backward gradient slope\[[0-9]+\]: analytic .* vs central difference" \
    "$bk" check "$testplugins/biaskit_checkbad_grad.so"
check "check: a crash is reported and the checks go on" 1 "crashed with signal 11 \(Segmentation fault\) in create\(\).* PASS  table finite" \
    bash -c "set -o pipefail; '$bk' check '$testplugins/biaskit_checkbad_crash.so' 2>&1 | tr '\n' ' '"
check "check: failures are counted" 1 "^[0-9]+ passed, 1 failed, [0-9]+ skipped$" "$bk" check "$testplugins/biaskit_checkbad_nan.so"
check "check: smaller geometry" 0 "^PASS  create\(\) with the default configuration \(2 layers, 4 heads, d_model 32, d_head 8" \
    "$bk" check alibi --heads 4 --dim 32 --distances 4096
check "check: unknown plugin fails to load" 1 "^FAIL  plugin 'nosuch' not found" "$bk" check nosuch
check "check: unknown option is a usage error" 2 "unknown key 'slope' \(did you mean 'slopes'\?\)" "$bk" check alibi --set slope=2
check "check: geometry must divide" 2 "--dim: 100 is not a multiple of the number of heads \(12\)" "$bk" check alibi --dim 100
check "check without a plugin" 2 "expected one plugin name or path" "$bk" check
if "$bk" --version | grep -q "^device: cpu"; then
    check "check: CUDA is skipped without a GPU" 0 "^SKIP  CUDA table vs host: " "$bk" check alibi
fi

if "$bk" --version | grep -q "^device: cpu"; then
    check "cuda asked for without a GPU" 1 "device cuda was asked for, but no GPU answers" \
        "$bk" bias "$src/examples/alibi.toml" --device cuda
fi

# train and eval: bad inputs give one line naming the file or key; a tiny run trains and evaluates
one_line() { # the command fails with exactly one line of output
    [ "$("$@" 2>&1 | grep -vc '^device: ')" -eq 1 ]
}
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 3\nwarmup = 1\nlog_every = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' >"$work/tiny.toml"
check "train: missing data path" 1 "data path '$work/corpus' does not exist" "$bk" train "$work/tiny.toml"
check "train: missing data path is one line" 0 "" one_line "$bk" train "$work/tiny.toml"
mkdir -p "$work/corpus" && : >"$work/corpus/empty.txt"
check "train: empty corpus" 1 "corpus is empty" "$bk" train "$work/tiny.toml"
printf '[[term]]\nplugin = "nosuch"\n' >>"$work/tiny.toml"
check "train: unknown plugin names the file and term" 1 "$work/tiny.toml:[0-9]+:1: \[\[term\]\] #2: plugin 'nosuch' not found" "$bk" train "$work/tiny.toml"
check "train: no data key" 1 "\[data\] paths: no training data" "$bk" train "$src/examples/alibi.toml" --set train.steps=1
head -c 20000 "$src/README.md" >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 20000 ]; do cat "$src/README.md" >>"$work/corpus/text.txt"; done
check "train: a tiny run" 0 "done: 3 steps" "$bk" train "$work/tiny.toml" --set term.1.plugin=alibi --set term.1.slope_scale=0.5 --out "$work/run" --plain
check "train: metrics log" 0 "^\{\"step\": 3, \"val_loss\": " cat "$work/run/metrics.jsonl"
check "eval: the extrapolation table" 0 "^ +64 +4\.00 " "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16,32,64 --tokens 4000
check "eval: csv" 0 "^32,16,[0-9]+,[0-9]+," "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --tokens 4000 --csv -
check "eval: sliding window" 0 "sliding window" "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --sliding 8 --tokens 2000
check "eval: bad lengths" 2 "--lengths: expected positive integers separated by commas, got '16,x'" "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16,x
head -c 3000 "$work/run/checkpoint.safetensors" >"$work/cut.safetensors"
check "eval: truncated checkpoint" 1 "$work/cut.safetensors: truncated" "$bk" eval "$work/cut.safetensors"
check "eval: missing checkpoint" 1 "cannot read '$work/none.safetensors'" "$bk" eval "$work/none.safetensors"

# Ctrl-C: the run stops after the current step with a checkpoint, exit 130, and resumes from it
"$bk" train "$work/tiny.toml" --set term.1.plugin=alibi --set train.steps=1000000 --out "$work/int" --plain \
    >"$work/int.log" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q "^step 1/" "$work/int.log" 2>/dev/null && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
check "Ctrl-C exits 130" 0 "^130$" echo $?
check "Ctrl-C writes a checkpoint" 0 "stopped at step [0-9]+; checkpoint $work/int/checkpoint.safetensors" cat "$work/int.log"
check "resume after Ctrl-C" 0 "resuming from .* at step [0-9]+" "$bk" train --resume "$work/int/checkpoint.safetensors" --stop-after 1 --plain

echo "test_cli: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
