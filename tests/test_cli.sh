#!/usr/bin/env bash
# The biaskit command end to end: exit codes, messages and table values.
# usage: test_cli.sh <biaskit binary> <source dir> <test plugin dir>
set -u
bk=$1 src=$2 testplugins=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"


check "version" 0 "biaskit [0-9.]+ \(plugin ABI 2\)" "$bk" --version
check "version names the device" 0 "^device: (cpu|cuda)" "$bk" --version
check "version says whether MPI is built in" 0 "^processes: (MPI|one \(built without MPI\))" "$bk" --version
if "$bk" --version | grep -q "built without MPI"; then # started as one of 2 by a launcher: refused, not 2 lone runs
    check "train: one of N processes without MPI" 1 "started as one of 2 processes \(an MPI launcher\), but this biaskit was built without MPI" \
        env OMPI_COMM_WORLD_SIZE=2 "$bk" train "$src/examples/alibi.toml"
fi
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
check "plugins: no parameters is 'none'" 0 "^  parameters:   none with the default options$" "$bk" plugins alibi
check "plugins: table parameters and their layers" 0 "^  parameters:   16 learnable for 8 heads, shared across layers by default: r1\[8x1\], r2\[8x1\]$" "$bk" plugins kerple
check "plugins: an embedding's parameters are one copy" 0 "^  parameters:   65536 learnable for 8 heads, one copy \(the term acts once, not per layer\): intra\[256x256\]$" "$bk" plugins bipe

# A plugin of a name found again later in the search path: both files named. The same file reached
# twice (a symlink, a hard link, a directory listed twice) is one plugin, not a shadow.
mkdir -p "$work/p1" "$work/p2" "$work/p3" "$work/p4"
cp "$testplugins/biaskit_testlin.so" "$work/p1/" && cp "$testplugins/biaskit_testlin.so" "$work/p2/"
ln -s "$work/p1/biaskit_testlin.so" "$work/p3/biaskit_testlin.so"
ln "$work/p1/biaskit_testlin.so" "$work/p4/biaskit_testlin.so"
check "plugins: a shadowed file is named with the file that wins" 0 \
    "^biaskit: note: '$work/p2/biaskit_testlin.so' \(plugin 'testlin'\) is shadowed by '$work/p1/biaskit_testlin.so', earlier in the search path$" \
    env BIASKIT_PLUGIN_PATH="$work/p1:$work/p2" "$bk" plugins
check "plugins: shadows are counted" 0 "^[0-9]+ plugins, 1 shadowed \(see above\)$" env BIASKIT_PLUGIN_PATH="$work/p1:$work/p2" "$bk" plugins
check "plugins: the same file twice is no shadow" 0 "^[0-9]+ plugins$" \
    env BIASKIT_PLUGIN_PATH="$work/p1:$work/p3:$work/p4:$work/p1" "$bk" plugins

# Descriptors: a capability bit this engine does not know is refused (naming the file and the bits),
# by the loader and by biaskit check alike; create() returning no instance is refused at creation.
check "plugins: unknown capability bits are refused" 1 "plugin '.*biaskit_futurecap.so' \(futurecap\): declares capability bits 0x100000 that this biaskit does not know" \
    "$bk" plugins "$testplugins/biaskit_futurecap.so"
check "check: unknown capability bits fail the load" 1 "^FAIL  plugin '.*biaskit_futurecap.so' \(futurecap\): declares capability bits 0x100000 that this biaskit does not know" \
    "$bk" check "$testplugins/biaskit_futurecap.so"
printf '[model]\nheads = 2\ndim = 16\n[[term]]\nplugin = "%s"\n' "$testplugins/biaskit_nullinst.so" >"$work/nullinst.toml"
check "bias: create() without an instance is refused" 1 \
    "term 'nullinst': plugin 'nullinst' \('.*biaskit_nullinst.so'\): create\(\) returned BIASKIT_OK but no instance" \
    "$bk" bias "$work/nullinst.toml" --length 4
check "plugins: create() without an instance is reported" 0 "^  parameters:   \(create\(\) with the default options: plugin 'nullinst' .*no instance" \
    "$bk" plugins "$testplugins/biaskit_nullinst.so"
check "check: create() without an instance fails create" 1 "^FAIL  create\(\) with the default configuration .*returned BIASKIT_OK but no instance" \
    "$bk" check "$testplugins/biaskit_nullinst.so" --timeout 10

# ALiBi, 8 heads: slopes 1/2 .. 1/256; T[h][d] = -m_h d
check "bias prints the first head" 0 "^ +3 +-1\.5 +-0\.75 +-0\.375 " "$bk" bias "$src/examples/alibi.toml" --length 8
check "bias prints the last head" 0 " -0\.0273438$" "$bk" bias "$src/examples/alibi.toml" --length 8
# -m*d at d = 0 is -0 in IEEE arithmetic: both zeros print as 0, in the term's own table (--terms; the sum
# of the mix turns -0 into 0 anyway) and in the CSV
check "bias --terms prints 0 at d = 0, not -0" 0 "term alibi \(plugin alibi\), layer 0, stream token +d( +h[0-9])+ +0( +0){8} " \
    bash -c "'$bk' bias '$src/examples/alibi.toml' --length 4 --terms | tr '\n' ' '"
check "bias --terms: no -0 anywhere" 1 "" bash -c "'$bk' bias '$src/examples/alibi.toml' --length 4 --terms | grep -E '(^| )-0( |$)'"
check "bias --csv: 0 at d = 0, not -0" 0 "^0,token,alibi,7,0,0$" "$bk" bias "$src/examples/alibi.toml" --length 4 --csv -
check "bias --csv: no -0" 1 "" bash -c "'$bk' bias '$src/examples/alibi.toml' --length 4 --csv - | grep -E ',-0$'"
# a number option beyond +-1e15 is refused by the host, at the value, before the plugin's create()
check "bias: an option number beyond 1e15 is refused" 1 \
    "^biaskit: error: --set term.0.slope_scale=1e30:1:20: \[\[term\]\] #1 \(alibi\) option 'slope_scale': expected a finite number of magnitude at most 1e\+15, got 1e\+30$" \
    "$bk" bias "$src/examples/alibi.toml" --length 4 --set term.0.slope_scale=1e30
# the scaffold's comments give ALiBi's slopes as the SDK computes them: 2^(-8(h+1)/H), h from 0
check "new-plugin: the template states ALiBi's slopes as computed" 0 "^1 1$" \
    bash -c "'$bk' new-plugin slopes_doc --dir '$work' >/dev/null && grep -cF '2^(-8(h+1)/H)' '$work/slopes_doc/slopes_doc.c' | tr '\n' ' ' && grep -cF '2^(−8(h+1)/H)' '$work/slopes_doc/README.md'"
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
check "check: a warning (a head that prefers distant tokens) does not fail" 0 "^[0-9]+ passed, 0 failed, [0-9]+ skipped, 1 warning$" "$bk" check "$testplugins/biaskit_checkbad3_rising.so"
check "check: --allow-increasing silences it" 0 "^[0-9]+ passed, 0 failed, [0-9]+ skipped$" "$bk" check "$testplugins/biaskit_checkbad3_rising.so" --allow-increasing
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
check "train: the banner gives the model's memory" 0 \
    "^memory: [0-9]+\.[0-9] MiB of activations and their gradients \([0-9]+ x [0-9]+ tokens per forward\), [0-9]+\.[0-9] MiB of parameters, gradients and AdamW moments$" \
    "$bk" train "$work/tiny.toml" --set term.1.plugin=alibi --set train.steps=1 --out "$work/run-memory" --plain
if "$bk" --version | grep -q "^device: cpu"; then # auto on a machine without a GPU: the banners say why the CPU
    check "train: auto on the CPU says why" 0 '^device: cpu \(.*\); \[run\] device = "auto", and no GPU answers: cpu \(' \
        "$bk" train "$work/tiny.toml" --set term.1.plugin=alibi --set train.steps=1 --out "$work/run-auto" --plain
    check "eval: auto on the CPU says why" 0 '^device: cpu \(.*\); \[run\] device = "auto", and no GPU answers: ' \
        "$bk" eval "$work/run-auto/checkpoint.safetensors" --lengths 16 --tokens 1000
    check "train: device = cpu gives no reason" 0 '^device: cpu \([^;]*\)$' \
        "$bk" train "$work/tiny.toml" --set term.1.plugin=alibi --set train.steps=1 --set run.device=cpu \
        --out "$work/run-cpu" --plain
fi
check "train: bf16 storage in the banner, resumed on the CPU" 0 \
    "device: emulated.*bf16 matmuls, bf16 storage memory: .* MiB of parameters, gradients and AdamW moments and the weights' bf16 copies .*done: 2 steps.*device: cpu.*done: 3 steps" \
    bash -c "'$bk' train '$work/tiny.toml' --set term.1.plugin=alibi --set train.steps=2 --set run.device=emulated --set run.precision=bf16 --out '$work/run-bf16' --plain 2>&1 | tr '\n' ' ';
             '$bk' train --resume '$work/run-bf16/checkpoint.safetensors' --set run.device=cpu --set train.steps=3 --plain 2>&1 | tr '\n' ' '"
check "train: bf16 storage with tf32 matmuls is refused at the key" 1 "--set run.matmul=tf32:1:12: \[run\] matmul = \"tf32\" with precision = \"bf16\"" \
    "$bk" train "$work/tiny.toml" --set run.precision=bf16 --set run.matmul=tf32
check "eval: the extrapolation table" 0 "^ +64 +4\.00 " "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16,32,64 --tokens 4000
check "eval: csv" 0 "^32,16,[0-9]+,[0-9]+," "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --tokens 4000 --csv -
"$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --tokens 4000 --csv - >"$work/ov.csv" 2>&1
check "eval --csv: an overrides column last" 0 "^length,train_length,chunks,tokens,loss,ppl,overrides$" cat "$work/ov.csv"
check "eval --csv: ... empty without --set" 0 "^32,16,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+,$" cat "$work/ov.csv"
check "eval --csv: the --set strings joined by ';', quoted per CSV" 0 '^32,16,[0-9]+,[0-9]+,[0-9.]+,[0-9.]+,"run.device=cpu;run.device=""cpu"""$' \
    "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --tokens 4000 --csv - --set run.device=cpu --set 'run.device="cpu"'
check "eval: the banner names the overrides" 0 '^overrides: run.device=cpu, run.device="cpu"$' \
    "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --tokens 4000 --set run.device=cpu --set 'run.device="cpu"'
check "eval: no overrides line without --set" 1 "" bash -c "'$bk' eval '$work/run/checkpoint.safetensors' --lengths 32 --tokens 4000 | grep '^overrides:'"
check "eval: the memory of its largest forward" 0 "^memory: [0-9]+\.[0-9] MiB of activations at most \(length (16|32|64), [0-9]+ chunks? per forward\), on cpu$" \
    "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16,32,64 --tokens 4000 --set run.device=cpu
check "eval: json gives each length's batch and memory" 0 "\"length\": 32, .*\"batch\": [0-9]+, \"activation_bytes\": [0-9]+" \
    "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --tokens 4000 --json -
check "eval: sliding window" 0 "sliding window" "$bk" eval "$work/run/checkpoint.safetensors" --lengths 32 --sliding 8 --tokens 2000
# --data: another corpus, a file or a directory (every token evaluation data; the same files on both sides
# of the data reader must not be refused as "validation text in training")
check "eval --data: a file" 0 "^ +32 +2\.00 " "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16,32 --tokens 4000 \
    --data "$src/README.md"
check "eval --data: a directory" 0 "^ +32 +2\.00 " "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16,32 --tokens 4000 \
    --data "$src/docs"
check "eval --data: one file twice" 1 "both hold the file|are the same file; its text would be read twice" \
    "$bk" eval "$work/run/checkpoint.safetensors" --lengths 16 --data "$src/README.md" --data "$src/README.md"
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
check "Ctrl-C writes a checkpoint" 0 "stopped at step [0-9]+ by SIGINT, interrupted; checkpoint $work/int/checkpoint.safetensors" cat "$work/int.log"
check "resume after Ctrl-C" 0 "resuming from .* at step [0-9]+" "$bk" train --resume "$work/int/checkpoint.safetensors" --stop-after 1 --plain
# SIGTERM (kill, schedulers, Slurm's time limit) and SIGHUP (a closed terminal) stop it the same way:
# a checkpoint, the lock released, exit 128 + the signal
for sig in TERM:143:terminated HUP:129:hangup; do
    name=${sig%%:*} code=${sig#*:} code=${code%%:*} word=${sig##*:}
    rm -rf "$work/sig"
    "$bk" train "$work/tiny.toml" --set term.1.plugin=alibi --set train.steps=1000000 --out "$work/sig" --plain \
        >"$work/sig.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q "^step 1/" "$work/sig.log" 2>/dev/null && break; sleep 0.1; done
    kill -"$name" "$pid"
    wait "$pid"
    check "SIG$name exits $code" 0 "^$code$" echo $?
    check "SIG$name writes a checkpoint" 0 "stopped at step [0-9]+ by SIG$name, $word; checkpoint $work/sig/checkpoint.safetensors" cat "$work/sig.log"
    check "SIG$name releases the lock" 0 "^gone$" bash -c "[ -e '$work/sig/.train.lock' ] && echo held || echo gone"
    check "resume after SIG$name" 0 "resuming from .* at step [0-9]+" "$bk" train --resume "$work/sig/checkpoint.safetensors" --stop-after 1 --plain
done

# ---- run directories: paths, device, lock, metrics on resume, full disk ------------------------
# Paths (README.md "Paths"): relative paths in an experiment file are read from the file's
# directory (stored absolute in checkpoints), those on the command line from the working directory;
# the default run directory is runs/<name> in the working directory. Train in A from B, then eval
# and resume from C/sub (another depth: a relative directory stored in the checkpoint would break).
bk_abs=$(cd "$(dirname "$bk")" && pwd)/$(basename "$bk")
real=$(cd "$work" && pwd -P)
mkdir -p "$work/A/plugins" "$work/B" "$work/C/sub"
cp "$testplugins/biaskit_testlin.so" "$work/A/plugins/"
cp -r "$work/corpus" "$work/A/corpus"
rm -f "$work/A/corpus/empty.txt"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 3\nwarmup = 1\nlog_every = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "./plugins/biaskit_testlin.so"\n' >"$work/A/exp.toml"
sed 's|^plugin = .*|plugin = "alibi"|' "$work/A/exp.toml" >"$work/A/named.toml" # for the blocks below the paths
(cd "$work/B" && "$bk_abs" train ../A/exp.toml --plain) >"$work/paths.log" 2>&1
check "paths: train A/exp.toml from B (data and plugin path read from A)" 0 "done: 3 steps" cat "$work/paths.log"
check "paths: default run directory runs/<name> in the working directory, printed absolute" 0 \
    "^writing $real/B/runs/exp$" cat "$work/paths.log"
check "paths: eval from C/sub" 0 "^ +32 +2\.00 " \
    bash -c "cd '$work/C/sub' && '$bk_abs' eval ../../B/runs/exp/checkpoint.safetensors --lengths 16,32 --tokens 2000"
check "paths: resume from C/sub" 0 "done: 4 steps" \
    bash -c "cd '$work/C/sub' && '$bk_abs' train --resume ../../B/runs/exp/checkpoint.safetensors --set train.steps=4 --plain"
check "paths: bias reads the plugin path from the file's directory too" 0 "^model: 1 layers, 2 heads" \
    bash -c "cd '$work/C/sub' && '$bk_abs' bias ../../A/exp.toml --length 2"
{ cat "$work/A/exp.toml"; printf '[run]\nout_dir = "out/../out2"\n'; } >"$work/A/exp2.toml"
check "paths: [run] out_dir is read from the experiment's directory, printed normalised" 0 "^writing $real/A/out2$" \
    bash -c "cd '$work/C/sub' && '$bk_abs' train ../../A/exp2.toml --set train.steps=1 --plain"
cp "$work/A/named.toml" "$work/A/my exp.toml"
(cd "$work/B" && "$bk_abs" train "../A/my exp.toml" --set train.steps=1 --plain) >/dev/null 2>&1
check "paths: a space in the experiment's name stays in the run directory" 0 "" test -f "$work/B/runs/my exp/checkpoint.safetensors"

# ---- [run] device (README.md "Devices"): checked on the resolved experiment (file, --set, checkpoint) ----
"$bk" train "$work/A/named.toml" --out "$work/m0" --set train.steps=1 >/dev/null 2>&1
cp "$work/A/named.toml" "$work/A/dev.toml" && printf '[run]\ndevice = "cuda"\n' >>"$work/A/dev.toml"
check "device: a bad value names file:line:col and the choices" 1 \
    "$work/A/bad_dev.toml:16:10: \[run\] device: expected one of auto, cpu, cuda, emulated, got 'gpu'" \
    bash -c "sed 's/\"cuda\"/\"gpu\"/' '$work/A/dev.toml' >'$work/A/bad_dev.toml' && '$bk' train '$work/A/bad_dev.toml'"
check "device: a bad --set value names it" 1 "--set run.device=gpu.*expected one of auto, cpu, cuda, emulated, got 'gpu'" \
    "$bk" train "$work/A/named.toml" --set run.device=gpu
check "device: a bad matmul names the choices" 1 "--set run.matmul=fp16.*expected one of fp32, tf32, bf16, got 'fp16'" \
    "$bk" config "$work/A/named.toml" --set run.matmul=fp16
check "device: a bad attention names the choices" 1 \
    "--set run.attention=flash.*expected one of fused, materialized, auto, got 'flash'" \
    "$bk" config "$work/A/named.toml" --set run.attention=flash
check "device: --version says which backends are built" 0 "^backends: cpu, (cuda \(built with CUDA\), emulated|emulated \(built without CUDA)" \
    "$bk" --version
check "device: config --keys documents run.device" 0 "device += \"auto\" .*cuda = the GPU.*emulated = the CUDA engine's code run on the CPU" \
    "$bk" config --keys
check "device: config --keys documents run.matmul" 0 "matmul += \"fp32\" .*tf32 = TF32 tensor cores.*bf16 = bf16 tensor cores" \
    "$bk" config --keys
check "device: config --keys documents run.attention" 0 "attention += \"auto\" .*fused = flash-style kernels.*on the CPU and on a GPU.*materialized = the probabilities saved" \
    "$bk" config --keys
check "device: the emulated banner names bf16 matmuls" 0 "^device: emulated.*bf16 matmuls" \
    "$bk" train "$work/A/named.toml" --out "$work/dbf16" --set train.steps=1 --set run.device=emulated \
    --set run.matmul=bf16 --plain
check "device: the training banner names the device" 0 "^device: cpu" \
    "$bk" train "$work/A/named.toml" --out "$work/dcpu" --set train.steps=1 --set run.device=cpu --plain
check "device: eval names it too" 0 "^device: (cpu|cuda)" "$bk" eval "$work/m0/checkpoint.safetensors" --lengths 16 --tokens 1000
# a GPU-trained checkpoint (device = "cuda" in its experiment, no override) on a machine without one:
# made by training dev.toml with --set run.device=cpu and dropping that override from the metadata
# (tests/ckpt_meta.py: the metadata's checksum recomputed, as no biaskit here can write this checkpoint)
"$bk" train "$work/A/dev.toml" --out "$work/gpuck" --set run.device=cpu --set train.steps=2 --plain >/dev/null 2>&1
gpuck="$work/gpuck/checkpoint.safetensors"
have_py=0
command -v python3 >/dev/null && have_py=1
if [ "$have_py" = 1 ]; then
    python3 "$src/tests/ckpt_meta.py" "$gpuck" "$gpuck" \
        'meta["overrides"] = [o for o in meta["overrides"] if not o.startswith("run.device=")]' reseal
fi
if "$bk" --version | grep -q "^device: cpu"; then # no GPU answers: cuda is an error naming where it was set
    no_gpu='but no GPU answers: cpu \(.*\); use "auto" or "cpu"'
    check "device: cuda in the file without a GPU names file:line:col" 1 \
        "\[run\] device = \"cuda\" \($work/A/dev.toml:16:10\) $no_gpu" "$bk" train "$work/A/dev.toml"
    check "device: --set run.device=cuda without a GPU" 1 "\[run\] device = \"cuda\" \(--set run.device=cuda[:0-9]*\) $no_gpu" \
        "$bk" train "$work/A/named.toml" --set run.device=cuda
    check "device: eval with cuda and no GPU" 1 "device = \"cuda\" .* but no GPU answers" \
        "$bk" eval "$work/m0/checkpoint.safetensors" --set run.device=cuda
    check "device: resume with cuda and no GPU" 1 "device = \"cuda\" .* but no GPU answers" \
        "$bk" train --resume "$work/m0/checkpoint.safetensors" --set run.device=cuda
    if [ "$have_py" = 1 ]; then
        check "device: a GPU checkpoint (device = \"cuda\") is refused here as it is" 1 "device = \"cuda\" .* but no GPU answers" \
            "$bk" eval "$gpuck" --lengths 16 --tokens 1000
        check "device: ... and evaluates with --set run.device=cpu" 0 "^device: cpu" \
            "$bk" eval "$gpuck" --lengths 16 --tokens 1000 --set run.device=cpu
        check "device: ... and resumes with --set run.device=cpu" 0 "done: 3 steps" \
            "$bk" train --resume "$gpuck" --set run.device=cpu --set train.steps=3 --plain
        check "device: ... and with device = \"auto\"" 0 "done: 3 steps" \
            "$bk" train --resume "$gpuck" --set run.device=auto --set train.steps=3 --plain
        check "device: ... and its tables print with bias (the model is rebuilt on the CPU)" 0 "^checkpoint: $gpuck " \
            "$bk" bias "$gpuck" --length 4
    fi
fi
# emulated: the CUDA engine's code on the CPU trains the same model as the CPU, to within rounding
# (reductions in another order: |loss difference| <= 1e-3 at each of 2 steps and the validation)
"$bk" train "$work/A/named.toml" --out "$work/ecpu" --set train.steps=2 --set run.device=cpu --plain >"$work/ecpu.log" 2>&1
"$bk" train "$work/A/named.toml" --out "$work/eemu" --set train.steps=2 --set run.device=emulated --plain \
    >"$work/eemu.log" 2>&1
check "emulated: trains, and says so" 0 "device: emulated.*done: 2 steps" bash -c "tr '\n' ' ' <'$work/eemu.log'; echo"
losses() { grep -Eo '"(loss|val_loss)": [0-9.]+' "$1" | awk '{print $2}' | tr '\n' ' '; }
echo "    cpu losses:      $(losses "$work/ecpu/metrics.jsonl")"
echo "    emulated losses: $(losses "$work/eemu/metrics.jsonl")"
check "emulated: losses match the CPU's (|diff| <= 1e-3)" 0 "^same 3$" \
    awk -v a="$(losses "$work/ecpu/metrics.jsonl")" -v b="$(losses "$work/eemu/metrics.jsonl")" 'BEGIN {
        n = split(a, x, " "); m = split(b, y, " "); ok = n == m && n == 3
        for (i = 1; i <= n && ok; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-3) ok = 0 }
        print (ok ? "same " n : "differ: " a " vs " b) }'
check "emulated: its checkpoint evaluates on the CPU" 0 "device: cpu.* 16 +1\.00 " \
    bash -c "'$bk' eval '$work/eemu/checkpoint.safetensors' --lengths 16 --tokens 1000 --set run.device=cpu | tr '\n' ' '"
check "emulated: ... and resumes on the CPU" 0 "done: 3 steps" \
    "$bk" train --resume "$work/eemu/checkpoint.safetensors" --out "$work/eemu2" --set run.device=cpu --set train.steps=3 --plain
check "emulated: a CPU checkpoint resumes emulated" 0 "device: emulated.*done: 3 steps" \
    bash -c "'$bk' train --resume '$work/ecpu/checkpoint.safetensors' --out '$work/ecpu2' --set run.device=emulated --set train.steps=3 --plain 2>&1 | tr '\n' ' '"
# the checkpoint format does not depend on the device: the same tensors (names, shapes, dtypes) from
# the CPU and the emulated run, with values within 1e-3 (rounding of two training steps); and a CPU
# checkpoint resumed emulated continues as it does on the CPU (parameters and AdamW moments uploaded)
if [ "$have_py" = 1 ]; then
    cat >"$work/same_tensors.py" <<'PY'
import json, struct, sys
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], struct.unpack("<%df" % ((e - b) // 4), raw[8 + n + b:8 + n + e]))
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("names differ: %s" % sorted(set(a) ^ set(b)))
worst, where = 0.0, ""
for name in a:
    if a[name][:2] != b[name][:2]:
        sys.exit("%s: %s vs %s" % (name, a[name][:2], b[name][:2]))
    for x, y in zip(a[name][2], b[name][2]):
        if abs(x - y) > worst:
            worst, where = abs(x - y), name
print("same %d tensors; largest difference %.3g (%s)" % (len(a), worst, where))
sys.exit(0 if worst <= 1e-3 else 1)
PY
    check "emulated: the checkpoint's tensors are the CPU's" 0 "^same [0-9]+ tensors" \
        python3 "$work/same_tensors.py" "$work/ecpu/checkpoint.safetensors" "$work/eemu/checkpoint.safetensors"
    "$bk" train --resume "$work/ecpu/checkpoint.safetensors" --out "$work/ecpu3" --set run.device=cpu \
        --set train.steps=3 --plain >/dev/null 2>&1
    check "emulated: a CPU checkpoint resumed emulated continues as on the CPU" 0 "^same [0-9]+ tensors" \
        python3 "$work/same_tensors.py" "$work/ecpu3/checkpoint.safetensors" "$work/ecpu2/checkpoint.safetensors"
fi

# one trainer per run directory: a second one fails at once, naming the directory and the holder
"$bk" train "$work/A/named.toml" --set train.steps=1000000 --out "$work/lock" --plain >"$work/lock.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "^step 1/" "$work/lock.log" 2>/dev/null && break; sleep 0.1; done
check "lock: a second training of the same directory fails" 1 \
    "run directory '$real/lock' is in use by another training \(pid $pid, lock $real/lock/\.train\.lock\)" \
    "$bk" train "$work/A/named.toml" --out "$work/lock" --plain
kill -INT "$pid"
wait "$pid"
check "lock: released when the first one ends" 0 "stopped at step" "$bk" train --resume "$work/lock/checkpoint.safetensors" --stop-after 1 --plain

# a resumed run cuts metrics.jsonl back to its checkpoint: records logged after it (before a crash) go
"$bk" train "$work/A/named.toml" --out "$work/m" --stop-after 2 --plain >/dev/null 2>&1
printf '{"step": 3, "loss": 9.999999, "lr": 0, "grad_norm": 0, "tokens": 0, "tokens_per_s": 0}\n{"step": 4, "lo' \
    >>"$work/m/metrics.jsonl"
check "metrics: resume" 0 "done: 3 steps" "$bk" train --resume "$work/m/checkpoint.safetensors" --plain
check "metrics: each step once" 0 "^1 1 1 1$" bash -c "for s in 1 2 3; do grep -c '\"step\": '\$s', \"loss\"' '$work/m/metrics.jsonl'; done \
    | tr '\n' ' '; grep -c val_loss '$work/m/metrics.jsonl'"
check "metrics: every line is one whole record" 0 "^0$" \
    bash -c "grep -Evc '^\{\"step\": [0-9]+, \"(loss|val_loss)\": [0-9.]+, .*\}$' '$work/m/metrics.jsonl' || true"
check "metrics: the stale record is gone" 1 "" grep -q "9\.999999" "$work/m/metrics.jsonl"

# a full disk (RLIMIT_FSIZE: writes past the limit fail with EFBIG) or an unwritable run directory:
# a clear error naming the file, and the previous checkpoint intact and loadable
cp "$work/m/checkpoint.safetensors" "$work/m.before"
(trap '' XFSZ; ulimit -f 16; exec "$bk" train --resume "$work/m/checkpoint.safetensors" --set train.steps=5 --plain) \
    >"$work/full.log" 2>&1
check "full disk: exit 1" 0 "^1$" echo $?
check "full disk: the error names the checkpoint" 0 "error: cannot write '$real/m/checkpoint\.safetensors.*File too large" cat "$work/full.log"
check "full disk: the previous checkpoint is unchanged" 0 "" cmp "$work/m.before" "$work/m/checkpoint.safetensors"
check "full disk: no temporary file is left" 0 "^0$" bash -c "ls -A '$work/m' | grep tmp | wc -l"
check "full disk: the previous checkpoint loads" 0 "step 3, trained at length 16" "$bk" eval "$work/m/checkpoint.safetensors" --lengths 16 --tokens 1000
check "full disk: a metrics write that fails is an error naming the log" 1 "error: cannot write '$real/m/metrics\.jsonl': File too large" \
    bash -c "trap '' XFSZ; ulimit -f 1; exec '$bk' train --resume '$work/m/checkpoint.safetensors' --set train.steps=200 \
    --set train.checkpoint_every=0 --plain"
check "full disk: ... and leaves the checkpoint unchanged" 0 "" cmp "$work/m.before" "$work/m/checkpoint.safetensors"
: >"$work/plainfile"
check "unwritable run directory: named" 1 "cannot create the run directory '$work/plainfile/run': '$work/plainfile' is not a directory" \
    "$bk" train "$work/A/named.toml" --out "$work/plainfile/run"

# ---- checkpoints: the learned tables, plugin records (train/checkpoint.h) -----------------------
# biaskit bias reads a checkpoint: a learnable plugin's table is the trained one, not the initial
# one, and it is what eval rebuilds: testlin's T_h(1) = -slope_h, slope_h stored as term.testlin.slope
mkdir -p "$work/ck/plugins" "$work/ck/changed"
cp "$testplugins/biaskit_testlin.so" "$work/ck/plugins/"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 4\nwarmup = 1\nlr = 0.05\n[data]\npaths = ["%s"]\n[[term]]\nplugin = "testlin"\n' \
    "$work/corpus" >"$work/ck/exp.toml"
ck="$work/ck/run/checkpoint.safetensors"
ckp=(env BIASKIT_PLUGIN_PATH="$work/ck/plugins")
"${ckp[@]}" "$bk" train "$work/ck/exp.toml" --out "$work/ck/run" --plain >/dev/null 2>&1
"${ckp[@]}" "$bk" bias "$work/ck/exp.toml" --length 4 --csv - >"$work/ck/init.csv" 2>&1
"${ckp[@]}" "$bk" bias "$ck" --length 4 --csv - >"$work/ck/trained.csv" 2>&1
check "bias: reads a checkpoint" 0 "^checkpoint: $ck \(step 4: learned parameters\)$" "${ckp[@]}" "$bk" bias "$ck" --length 4
check "bias: a checkpoint without .safetensors is recognised by its content" 0 "^checkpoint: $work/ck/copy\.bin " \
    bash -c "cp '$ck' '$work/ck/copy.bin' && BIASKIT_PLUGIN_PATH='$work/ck/plugins' '$bk' bias '$work/ck/copy.bin' --length 4"
check "bias: the trained table differs from the initial one" 1 "" cmp -s "$work/ck/init.csv" "$work/ck/trained.csv"
check "bias: both tables are complete" 0 "^0,token,testlin,1,3,-?[0-9.e-]+$" cat "$work/ck/trained.csv"
if command -v python3 >/dev/null; then
    check "bias: the checkpoint's table is its stored slope (T_h(1) = -slope_h)" 0 "^ok 2$" python3 -c '
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])["term.testlin.slope"]
b, e = t["data_offsets"]
slope = struct.unpack("<%df" % ((e - b) // 4), raw[8 + n + b:8 + n + e])
rows = [l.split(",") for l in open(sys.argv[2]) if l.startswith("0,token,testlin,")]
got = {int(r[3]): float(r[5]) for r in rows if r[4] == "1"}
ok = all(struct.pack("<f", -slope[h]) == struct.pack("<f", got[h]) for h in range(len(slope)))
print("ok" if ok else "differ: %s vs %s" % (slope, got), len(slope))' "$ck" "$work/ck/trained.csv"
fi
# a plugin whose file changed since training (one byte appended: it still loads): a warning naming
# the term, the plugin and both checksums; --strict refuses it in eval, train --resume and bias
cp "$work/ck/plugins/biaskit_testlin.so" "$work/ck/changed/" && printf 'x' >>"$work/ck/changed/biaskit_testlin.so"
ckc=(env BIASKIT_PLUGIN_PATH="$work/ck/changed")
ckreal=$(cd "$work/ck/changed" && pwd -P)
changed="term 'testlin' \(plugin testlin, $ckreal/biaskit_testlin\.so\): the plugin file's bytes changed: xxh64 [0-9a-f]{16} of .*/plugins/biaskit_testlin\.so at save, [0-9a-f]{16} of $ckreal/biaskit_testlin\.so now"
check "eval: a changed plugin is a warning" 0 "^biaskit: warning: checkpoint '$ck': $changed; the model may compute differently" \
    "${ckc[@]}" "$bk" eval "$ck" --lengths 16 --tokens 1000
check "eval: unchanged plugins give no warning" 0 "^0$" \
    bash -c "BIASKIT_PLUGIN_PATH='$work/ck/plugins' '$bk' eval '$ck' --lengths 16 --tokens 1000 2>&1 | grep -c warning || true"
check "eval --strict refuses a changed plugin" 1 "^biaskit: error: checkpoint '$ck': $changed; refused \(--strict\)" \
    "${ckc[@]}" "$bk" eval "$ck" --lengths 16 --tokens 1000 --strict
check "train --resume --strict refuses it" 1 "error: checkpoint '$ck': $changed; refused" \
    "${ckc[@]}" "$bk" train --resume "$ck" --set train.steps=5 --strict --plain
check "bias --strict refuses it" 1 "error: checkpoint '$ck': $changed; refused" "${ckc[@]}" "$bk" bias "$ck" --strict
check "train --strict without --resume: plugins are checked for write permissions only" 0 "done:" \
    env BIASKIT_PLUGIN_PATH="$work/ck/plugins" "$bk" train "$work/ck/exp.toml" --strict --out "$work/strict-fresh" --plain
cp -r "$work/ck/run" "$work/ck/run2"
check "train --resume: a changed plugin is a warning, and training goes on" 0 \
    "warning: checkpoint '$work/ck/run2/checkpoint\.safetensors': $changed.*done: 5 steps" \
    bash -c "BIASKIT_PLUGIN_PATH='$work/ck/changed' '$bk' train --resume '$work/ck/run2/checkpoint.safetensors' --set train.steps=5 --plain 2>&1 | tr '\n' ' '"
check "train --resume --strict with the same plugin trains" 0 "done: 5 steps" \
    "${ckp[@]}" "$bk" train --resume "$ck" --set train.steps=5 --strict --plain

# import: usage, the output rule, and a file that is not a model refused with nothing written
check "import help" 0 "usage: biaskit import <model.gguf> --out" "$bk" import --help
check "import without a file" 2 "expected one model file" "$bk" import
check "import without --out" 2 "expected --out" "$bk" import "$src/fuzz/corpus/gguf/seed_types"
check "import onto its input" 2 "--out '.*seed_types' is the model file" \
    "$bk" import "$src/fuzz/corpus/gguf/seed_types" --out "$src/fuzz/corpus/gguf/seed_types"
check "import of a GGUF without the model's metadata" 1 "seed_types: no metadata 'llama.embedding_length'" \
    "$bk" import "$src/fuzz/corpus/gguf/seed_types" --out "$work/imported.safetensors"
check "import wrote nothing" 1 "" test -e "$work/imported.safetensors"
# ... an HF transformers directory: its help, a directory without config.json, an output inside it
check "import help: HF directories" 0 "biaskit import <hf_dir> --out" "$bk" import --help
mkdir -p "$work/hf_empty"
check "import of a directory without config.json" 1 "hf_empty: no config.json" \
    "$bk" import "$work/hf_empty" --out "$work/imported.safetensors"
check "import of a directory wrote nothing" 1 "" test -e "$work/imported.safetensors"
check "import into its own directory" 2 "--out '.*hf_empty/model.safetensors'" \
    "$bk" import "$work/hf_empty" --out "$work/hf_empty/model.safetensors"

# docs/design.md's "Where things live": every file it names exists (NAME stands for a new thing's name)
missing=$(awk '/^### Where things live/{on=1; next} on && /^## /{exit} on' "$src/docs/design.md" |
    grep -o '`[^`]*`' | tr -d '`' | grep -E '^(core|sdk|tests|docs|plugins|fuzz|scripts|examples)/|^[A-Za-z_]+\.(md|txt)$' |
    grep -v NAME | sort -u | while read -r f; do [ -e "$src/$f" ] || echo "$f"; done)
named=$(awk '/^### Where things live/{on=1; next} on && /^## /{exit} on' "$src/docs/design.md" | grep -o '`[^`]*/[^`]*`' | wc -l)
if [ -z "$missing" ] && [ "$named" -ge 30 ]; then
    ok "docs/design.md's map names $named paths, each of which exists"
else
    bad "docs/design.md's map: files named that do not exist (or fewer than 30 paths: $named)" "$missing"
fi

echo "test_cli: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
