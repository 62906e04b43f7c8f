#!/usr/bin/env bash
# Numerical faults (issue of the fourth reliability round): a state with NaN or inf is never checkpointed
# and the message names the last finite checkpoint; eval, generate and passkey refuse a model whose loss or
# logits are not finite (exit != 0, no number made up); a loss that rises far above its running median is a
# warning naming the step; a diverged perplexity prints readably. And what loads plugins: a world-writable
# plugin file or directory is warned about by every command and refused under --strict; biaskit check's
# limits count CPU time, so that a loaded machine does not fail a correct plugin.
# usage: test_reliability.sh <biaskit binary> <source dir>
set -u
bk=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
work=$(mktemp -d)
loops=() # the busy loops of "check under load" below: killed on any exit, so that none outlives the test
trap 'kill "${loops[@]}" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
export OMP_NUM_THREADS=1

mkdir -p "$work/corpus"
head -c 20000 "$src/README.md" >"$work/corpus/text.txt"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 4\nwarmup = 1\nlog_every = 1\n[run]\nthreads = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "t5"\n' \
    >"$work/exp.toml"

# ---- eps = 0 with beta2 = 0: 0/0 in the update (a tensor whose gradient is 0) makes NaN weights a step
# before any forward reads them; that state is refused before the checkpoint, which keeps the last good one
check "a non-finite update is not checkpointed" 1 \
    "step 1: [0-9]+ parameters or AdamW moments are not finite after the update \(the first: term\.t5\.[a-z_]+\[[0-9]+\] = -?nan\), so it is not checkpointed; stopped .*; no checkpoint was written in this run" \
    "$bk" train "$work/exp.toml" --out "$work/nan" --set train.eps=0 --set train.beta2=0 --set train.checkpoint_every=1 --plain
check "... and no checkpoint file is there" 0 "^none$" bash -c "[ -e '$work/nan/checkpoint.safetensors' ] && echo there || echo none"
"$bk" train "$work/exp.toml" --out "$work/good" --set train.checkpoint_every=1 --set train.steps=2 --plain >/dev/null 2>&1 ||
    bad "fixture: a finite run"
cp "$work/good/checkpoint.safetensors" "$work/good.orig"
check "resumed into a non-finite update: the last checkpoint named holds finite step 2" 1 \
    "step 3: .* not checkpointed; stopped .*; the last checkpoint, $work/good/checkpoint.safetensors, holds step 2" \
    "$bk" train --resume "$work/good/checkpoint.safetensors" --set train.steps=4 --set train.eps=0 --set train.beta2=0 --plain
check "... which is unchanged" 0 "" cmp "$work/good/checkpoint.safetensors" "$work/good.orig"

# ---- a checkpoint whose weights hold a NaN (its checksums skipped with --no-verify): no result is made up
python3 - "$work/good/checkpoint.safetensors" "$work/nan.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
head = json.loads(data[8:8 + n])
start = 8 + n + head["model.wte"]["data_offsets"][0]
data[start:start + 4 * 256] = struct.pack("<f", float("nan")) * 256  # the first rows of the embedding
open(sys.argv[2], "wb").write(data)
PY
check "eval refuses a non-finite loss" 1 "evaluation at length 16: the loss is -?nan: the model is not finite" \
    "$bk" eval "$work/nan.safetensors" --no-verify --lengths 16 --tokens 400
check "generate refuses non-finite logits" 1 "the model's logit of token 0 at position [0-9]+ \(sequence 0\) is -?nan" \
    "$bk" generate "$work/nan.safetensors" --no-verify --prompt "The " --tokens 4 --greedy
check "passkey refuses non-finite logits" 1 "the model's logit of token 0 .* is -?nan: the model is not finite" \
    "$bk" passkey "$work/nan.safetensors" --no-verify --lengths 128 --trials 1

# ---- a finite divergence: lr = 10 (inside [train]'s range) takes the loss from 5.5 to thousands
check "a loss 10x its running median is a warning naming the step" 0 \
    "step [0-9]+: warning: the loss [0-9.e+]+ is [0-9.e+]+ times its running median [0-9.]+ .*diverging" \
    "$bk" train "$work/exp.toml" --out "$work/div" --set term.0.plugin=alibi --set train.lr=10 --set train.steps=20 \
    --set model.dim=64 --set train.batch=4 --set train.length=64 --plain
check "... repeated above the done line" 0 "^warning: the loss rose above 10 times its running median" \
    "$bk" train "$work/exp.toml" --out "$work/div" --set term.0.plugin=alibi --set train.lr=10 --set train.steps=20 \
    --set model.dim=64 --set train.batch=4 --set train.length=64 --plain
check "a huge perplexity prints in exponent form" 0 "validation loss [0-9.]+ \(perplexity [0-9.]+e\+[0-9]+\)" \
    "$bk" train "$work/exp.toml" --out "$work/div" --set term.0.plugin=alibi --set train.lr=10 --set train.steps=20 \
    --set model.dim=64 --set train.batch=4 --set train.length=64 --plain
check "a healthy run gives no such warning" 0 "^0$" bash -c \
    "'$bk' train '$work/exp.toml' --out '$work/ok' --set term.0.plugin=alibi --plain 2>&1 | grep -c 'warning: the loss' || true"

# ---- a plugin file or directory that other users may write: every command that loads it warns, and
# --strict refuses it (before, only biaskit plugins said so)
so=$(dirname "$bk")/plugins/biaskit_alibi.so
if [ -f "$so" ]; then
    mkdir -p "$work/ww" && cp "$so" "$work/ww/" && chmod 0777 "$work/ww"
    sed 's|plugin = "t5"|plugin = "'"$work"'/ww/biaskit_alibi.so"|' "$work/exp.toml" >"$work/ww.toml"
    warn="warning: plugin file '$work/ww/biaskit_alibi.so': the directory '$work/ww' is writable by users other than its owner and group \(mode 0777\)"
    check "config warns of a world-writable plugin directory" 0 "$warn" "$bk" config "$work/ww.toml"
    check "train warns" 0 "$warn" "$bk" train "$work/ww.toml" --out "$work/wwrun" --set train.steps=1 --plain
    check "eval warns" 0 "$warn" "$bk" eval "$work/wwrun/checkpoint.safetensors" --lengths 16 --tokens 400
    check "bias warns" 0 "$warn" "$bk" bias "$work/ww.toml"
    check "... once per file" 0 "^1$" bash -c "'$bk' bias '$work/ww.toml' 2>&1 | grep -c 'is writable by users other'"
    refused="plugin file '$work/ww/biaskit_alibi.so': the directory '$work/ww' is writable by users other than its owner and group \(mode 0777\).*refused under --strict"
    check "config --strict refuses it" 1 "$refused" "$bk" config "$work/ww.toml" --strict
    check "train --strict refuses it" 1 "$refused" "$bk" train "$work/ww.toml" --out "$work/wwrun2" --strict --plain
    check "eval --strict refuses it" 1 "$refused" "$bk" eval "$work/wwrun/checkpoint.safetensors" --lengths 16 --strict
    check "passkey --strict refuses it" 1 "$refused" "$bk" passkey "$work/wwrun/checkpoint.safetensors" --lengths 128 --strict
    chmod 0755 "$work/ww" && chmod 0666 "$work/ww/biaskit_alibi.so"
    check "a world-writable plugin file is named too" 0 "the file '$work/ww/biaskit_alibi.so' is writable by users other" \
        "$bk" config "$work/ww.toml"
    chmod 0644 "$work/ww/biaskit_alibi.so"
    check "no warning once the permission is gone" 0 "^0$" bash -c "'$bk' config '$work/ww.toml' 2>&1 | grep -c 'writable by users' || true"
else
    bad "the built-in plugin $so is missing"
fi

# ---- biaskit check on a loaded machine: six busy loops share its one core, so each child gets a sixth or
# less of it on the clock; the limit counts CPU time, so a correct plugin still passes with --timeout 5
# (its long-range child computes 1-3 s, which takes 8-20 s on the clock so)
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
    loops=()
    for _ in 1 2 3 4 5 6; do taskset -c 0 sh -c 'while :; do :; done' & loops+=($!); done
    check "check under load: a correct plugin passes with --timeout 5" 0 "^[0-9]+ passed, 0 failed" \
        taskset -c 0 "$bk" check kerple --timeout 5
    kill "${loops[@]}" 2>/dev/null
    wait "${loops[@]}" 2>/dev/null
    loops=()
fi

# ---- options that mean nothing as set are refused with the file's line (they were ignored)
term_exp() { # term_exp FILE TERM-LINES: a tiny experiment with the given [[term]] tables
    printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 2\n[data]\npaths = ["corpus"]\n%b\n' \
        "$2" >"$work/$1"
}
term_exp fox1.toml '[[term]]\nplugin = "fox"\ngate = "bias_only"\nw_std = 0.1'
check "fox w_std with gate = bias_only is refused" 1 \
    "fox1.toml:14:9: .*option 'w_std': 'w_std' applies with gate = \"full\" only; gate is \"bias_only\"" \
    "$bk" config "$work/fox1.toml"
term_exp fox2.toml '[[term]]\nplugin = "fox"\nt_min = 2'
check "fox t_min without bias_init = timescales is refused" 1 \
    "fox2.toml:13:9: .*'t_min' applies with bias_init = \"timescales\" only; bias_init is \"zero\"" \
    "$bk" config "$work/fox2.toml"
term_exp fox3.toml '[[term]]\nplugin = "fox"\nt_max = 20'
check "fox t_max without bias_init = timescales is refused" 1 "fox3.toml:13:9: .*'t_max' applies with bias_init" \
    "$bk" config "$work/fox3.toml"
term_exp fox4.toml '[[term]]\nplugin = "fox"\nbias_init = "timescales"\nt_min = 2\nt_max = 20'
check "... and taken with it" 0 "t_min = 2" "$bk" config "$work/fox4.toml"
term_exp fire0.toml '[[term]]\nplugin = "fire"\nc_init = 0.0'
check "FIRE c_init = 0 is refused (c would never leave 0)" 1 \
    "fire0.toml:13:10: .*option 'c_init': expected a finite number other than 0" "$bk" config "$work/fire0.toml"
term_exp cap.toml '[[term]]\nplugin = "rope"\n[[term]]\nplugin = "window"\nwindow = 8\ndistance_cap = 4'
check "a window's distance_cap with no table to cap is refused" 1 \
    "cap.toml:16:16: term 'window' \(plugin window\): mask\(\) gives distance_cap 4, but no term of the experiment has a distance table" \
    "$bk" config "$work/cap.toml"
term_exp cap2.toml '[[term]]\nplugin = "alibi"\n[[term]]\nplugin = "window"\nwindow = 8\ndistance_cap = 4'
check "... and taken beside a table" 0 "distance_cap = 4$" "$bk" config "$work/cap2.toml"

# ---- config prints what the plugins and the optimizer will use: every option, lr_scale, weight_decay
term_exp opts.toml '[[term]]\nplugin = "kerple"\nlr_scale = 3\nweight_decay = 0.5\n[[term]]\nplugin = "fire"\nlr_scale.c = 2'
out=$("$bk" config "$work/opts.toml" 2>&1)
for line in 'lr_scale = 3.0' 'weight_decay = 0.5' 'variant = "log"  # default' 'learnable = true  # default' \
    'lr_scale = \{W1 = 1.0, b1 = 1.0, W2 = 1.0, b2 = 1.0, c = 2.0, L_multiplier = 1.0\}' \
    'weight_decay = 0.0  # no decay: plugin parameters decay with decay_all = true only' 'c_init = 0.1  # default' \
    'grid = 1025  # default'; do
    check "config prints '$line'" 0 "^$line$" printf '%s\n' "$out"
done
check "config: decay_all resolves the engine's rule" 0 "^weight_decay = 0.1  # \[train\] weight_decay \(decay_all = true\)$" \
    "$bk" config "$work/opts.toml" --set train.decay_all=true

# ---- standard output checked: a listing on a full device fails
check "plugins > /dev/full fails" 1 "error: cannot write standard output: No space left on device" \
    bash -c "'$bk' plugins >/dev/full"
check "config > /dev/full fails" 1 "error: cannot write standard output: No space left on device" \
    bash -c "'$bk' config '$work/exp.toml' >/dev/full"
check "--help > /dev/full fails" 1 "error: cannot write standard output" bash -c "'$bk' --help >/dev/full"

# ---- a damaged checkpoint not named .safetensors: the reader's reason, not a TOML error
ck=$work/good/checkpoint.safetensors
head -c 100 "$ck" >"$work/cut"
check "bias on a cut checkpoint without the extension names the truncation" 1 \
    "error: $work/cut: truncated: the header claims [0-9]+ bytes, the file has only 92" "$bk" bias "$work/cut"
check "params likewise" 1 "error: $work/cut: truncated: the header claims" "$bk" params "$work/cut"
cp "$ck" "$work/hdr" && printf 'X' | dd of="$work/hdr" bs=1 seek=8 conv=notrunc 2>/dev/null
check "a header overwritten: bad safetensors header" 1 "error: $work/hdr: bad safetensors header: invalid JSON" \
    "$bk" params "$work/hdr"
cp "$ck" "$work/tail.safetensors" && echo junk >>"$work/tail.safetensors"
check "bytes appended after the data are refused" 1 \
    "error: $work/tail.safetensors: 5 bytes after the last tensor's data .*expected none" "$bk" params "$work/tail.safetensors"

# ---- data directories: a symlink out of the tree and a dangling one are named (they were skipped silently)
mkdir -p "$work/lcorp" "$work/elsewhere"
cp "$work/corpus/text.txt" "$work/lcorp/a.txt"
cp "$work/corpus/text.txt" "$work/elsewhere/b.txt"
ln -s "$work/elsewhere" "$work/lcorp/more"
ln -s "$work/nowhere.txt" "$work/lcorp/gone.txt"
check "a symlinked directory out of the data path is named" 0 \
    "warning: data path '.*lcorp': 1 symlink to a directory outside it \(not followed, their files are not read\): '.*lcorp/more' -> '.*elsewhere'; name a target in \[data\] paths" \
    "$bk" train "$work/exp.toml" --set 'data.paths=["lcorp"]' --out "$work/lrun" --set train.steps=1 --plain
check "a dangling symlink is named" 0 "warning: data path '.*lcorp': 1 dangling symlink \(skipped\): '.*lcorp/gone.txt' -> '.*nowhere.txt'" \
    "$bk" train "$work/exp.toml" --set 'data.paths=["lcorp"]' --out "$work/lrun2" --set train.steps=1 --plain

# ---- bias shows what the attention adds where it is not a function of d alone: masked keys, FIRE's F(u(i, d))
term_exp win.toml '[[term]]\nplugin = "alibi"\n[[term]]\nplugin = "window"\nwindow = 3\nsinks = 1\ndistance_cap = 2'
out=$("$bk" bias "$work/win.toml" --length 6 2>&1)
check "bias: the attention view of a window" 0 "^attention view, layer 0: what the scores of query i get at distance d = i - j" \
    printf '%s\n' "$out"
check "... masked keys as masked, the sink at its capped distance" 0 \
    "^       5           0     -0.0625      -0.125      masked      masked      -0.125$" printf '%s\n' "$out"
csv=$("$bk" bias "$work/win.toml" --length 6 --csv - 2>&1)
check "... its CSV has the query column" 0 "^layer,stream,table,head,distance,value,query$" printf '%s\n' "$csv"
check "... masked is -inf there" 0 "^0,token,attention,0,3,-inf,5$" printf '%s\n' "$csv"
check "... the capped sink" 0 "^0,token,attention,0,5,-0.125,5$" printf '%s\n' "$csv"
check "... the distance rows have an empty query" 0 "^0,token,mixed,0,2,-0.125,$" printf '%s\n' "$csv"
check "a distance-only experiment keeps six columns" 0 "^layer,stream,table,head,distance,value$" \
    "$bk" bias "$work/exp.toml" --length 4 --csv -
term_exp fire.toml '[[term]]\nplugin = "fire"\nthreshold = 4'
fcsv=$("$bk" bias "$work/fire.toml" --length 12 --all --csv - 2>&1)
# FIRE normalises by psi(max(i, L)): below L = 4 rows agree at each d, beyond it they differ
if python3 - "$fcsv" <<'PY'
import sys
rows = [l.split(",") for l in sys.argv[1].splitlines()[1:] if ",attention," in l]
v = {(int(r[3]), int(r[6]), int(r[4])): float(r[5]) for r in rows}
assert len(v) == 2 * 12 * 13 // 2, len(v)
assert v[(0, 2, 1)] == v[(0, 3, 1)] and v[(0, 3, 2)] == v[(0, 4, 2)], "rows i <= L differ"
assert v[(0, 8, 2)] != v[(0, 11, 2)], "rows beyond L agree: the view does not depend on i"
assert all(v[(h, i, 0)] == v[(h, 0, 0)] for h in (0, 1) for i in range(12)), "u = 0 at d = 0 on every row"
PY
then ok "bias: FIRE's attention view depends on the query index beyond L, as F(psi(d) / psi(max(i, L))) does"
else bad "bias: FIRE's attention view" "$fcsv"; fi

# ---- under an MPI launcher only train and eval run (data parallel); another command would run whole in
# every process, each writing the same outputs (passkey and generate did)
check "passkey under a 2-process launcher is refused" 2 \
    "biaskit passkey: started by an MPI launcher \(OMPI_COMM_WORLD_SIZE=2\): each of its processes would run the whole command.*only train and eval are data parallel" \
    env OMPI_COMM_WORLD_SIZE=2 "$bk" passkey "$work/good/checkpoint.safetensors" --lengths 128
check "generate likewise (srun, MPICH)" 2 "biaskit generate: started by an MPI launcher \(PMI_SIZE=3\)" \
    env PMI_SIZE=3 "$bk" generate "$work/good/checkpoint.safetensors" --prompt a --tokens 2
check "one process under a launcher runs" 0 "ok" env OMPI_COMM_WORLD_SIZE=1 "$bk" config "$work/exp.toml"

# ---- limits named in the messages that hit them
check "too many arguments names the limit" 2 "too many arguments \(at most 64\)" "$bk" bias $(seq 1 70)

echo "test_reliability: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
