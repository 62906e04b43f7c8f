#!/usr/bin/env bash
# Checkpoints facing a hostile or careless hand, end to end (train/checkpoint.h): the metadata is
# sealed by a checksum, so an edited experiment, step, override or plugin record is refused even
# without --strict; step and data cursor are checked against the experiment when the checksum is
# recomputed by the editor too; --set on a checkpoint cannot change the model's shape or the facts of
# its training; a plugin path that now holds another plugin names both; a FIFO is refused without
# blocking; a format 2 checkpoint still loads with a warning; --no-verify skips the tensor checksums
# only. And `biaskit new-plugin` refuses the names whose generated code would not compile.
# usage: test_ckpt_hostile.sh <biaskit binary> <source dir> <test plugin dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

if ! command -v python3 >/dev/null; then
    echo "test_ckpt_hostile: python3 is needed to edit checkpoints; skipped"
    exit 77
fi

# edit IN OUT STATEMENT [reseal]: rewrites the checkpoint's "biaskit" metadata (a dict `meta`) with a
# Python statement, as a hand with a text editor would; with "reseal" it also recomputes the metadata
# checksum, as a deliberate forger would; "format2" makes a format 2 checkpoint (tests/ckpt_meta.py).
edit() { python3 "$src/tests/ckpt_meta.py" "$@"; }

# A tiny model: 2 heads, ALiBi, 4 steps of 2 x 32 tokens.
mkdir -p "$work/corpus" "$work/pl"
: >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 20000 ]; do cat "$src/README.md" >>"$work/corpus/text.txt"; done
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 32\nbatch = 2\nsteps = 4\nwarmup = 1\nlog_every = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' \
    >"$work/tiny.toml"
"$bk" train "$work/tiny.toml" --out "$work/run" --plain >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
ck=$work/run/checkpoint.safetensors
ev=(--lengths 32 --tokens 2000)
check "a checkpoint as written loads without a warning" 0 "^0$" \
    bash -c "'$bk' eval '$ck' ${ev[*]} --strict 2>&1 | grep -c warning || true"
check "the checkpoint is format 3 with a metadata checksum" 0 "^3 [0-9a-f]{16}$" python3 -c '
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
md = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
print(json.loads(md["biaskit"])["format"], md["biaskit_xxh64"])' "$ck"

# ---- the metadata checksum: an edited checkpoint is refused, --strict or not -------------------------
sealed="the checkpoint's metadata does not match its checksum"
edit "$ck" "$work/heads4.safetensors" 'meta["config"] = meta["config"].replace("heads = 2", "heads = 4")'
check "edited: heads 2 -> 4 is refused without --strict" 1 "error: $work/heads4\.safetensors: $sealed" \
    "$bk" eval "$work/heads4.safetensors" "${ev[@]}"
check "edited: heads 2 -> 4 is refused with --strict" 1 "error: $work/heads4\.safetensors: $sealed" \
    "$bk" eval "$work/heads4.safetensors" "${ev[@]}" --strict
check "edited: the message says what the checksum covers" 1 "experiment text, overrides, step, data cursor, plugin records and tensor checksums" \
    "$bk" eval "$work/heads4.safetensors" "${ev[@]}"
edit "$ck" "$work/lr.safetensors" 'meta["config"] = meta["config"].replace("warmup = 1", "warmup = 1\nlr = 5")'
check "edited: lr on resume is refused" 1 "error: $work/lr\.safetensors: $sealed" \
    "$bk" train --resume "$work/lr.safetensors" --set train.steps=5 --out "$work/lr-run" --plain
edit "$ck" "$work/step.safetensors" 'meta["step"] = meta["adam_t"] = 2**53 - 1'
check "edited: step 2^53-1 is refused" 1 "error: $work/step\.safetensors: $sealed" \
    "$bk" train --resume "$work/step.safetensors" --out "$work/step-run" --plain
edit "$ck" "$work/epoch.safetensors" 'meta["data_epoch"] = 7'
check "edited: the data epoch is refused" 1 "$sealed" "$bk" train --resume "$work/epoch.safetensors" --out "$work/ep-run" --plain
edit "$ck" "$work/ovr.safetensors" 'meta["overrides"].append("model.heads=4")'
check "edited: an override that changes the architecture is refused" 1 "error: $work/ovr\.safetensors: $sealed" \
    "$bk" eval "$work/ovr.safetensors" "${ev[@]}"
edit "$ck" "$work/rec.safetensors" 'meta["plugins"][0]["version"] = "9.9.9"'
check "edited: a plugin record is refused" 1 "$sealed" "$bk" bias "$work/rec.safetensors" --length 4
edit "$ck" "$work/sum.safetensors" 'meta["tensors"]["model.wte"] = "0" * 16'
check "edited: a tensor checksum is refused" 1 "$sealed" "$bk" eval "$work/sum.safetensors" "${ev[@]}"
check "edited: --no-verify still checks the metadata" 1 "$sealed" "$bk" eval "$work/heads4.safetensors" "${ev[@]}" --no-verify

# ... and when the editor recomputes the checksum, the values are still checked against the experiment
edit "$ck" "$work/step2.safetensors" 'meta["step"] = meta["adam_t"] = 2**53 - 1' reseal
check "resealed: step 2^53-1 is beyond [train] steps" 1 \
    "$work/step2\.safetensors: checkpoint metadata 'step' is 9007199254740991, but its experiment trains \[train\] steps = 4" \
    "$bk" train --resume "$work/step2.safetensors" --out "$work/step2-run" --plain
edit "$ck" "$work/cursor.safetensors" 'meta["data_epoch"] = 7' reseal
check "resealed: a data cursor the steps cannot reach" 1 "$work/cursor\.safetensors: checkpoint metadata 'data_epoch' 7, 'data_index' 8: not where 4 steps of 2 x 1 windows leave the data" \
    "$bk" train --resume "$work/cursor.safetensors" --out "$work/cursor-run" --plain
edit "$ck" "$work/tokens.safetensors" 'meta["tokens"] = 999' reseal
check "resealed: tokens that the steps do not add up to" 1 "'tokens' is 999; 4 steps of 2 x 32 tokens x 1 accumulated make 256" \
    "$bk" eval "$work/tokens.safetensors" "${ev[@]}"
edit "$ck" "$work/good.safetensors" 'pass' reseal
check "resealed unchanged: loads" 0 "step 4, trained at length 32" "$bk" eval "$work/good.safetensors" "${ev[@]}" --strict

# ---- --set on a checkpoint: shape keys and training facts are refused --------------------------------
check "--set model.heads=8 is refused" 1 \
    "error: --set model.heads=8: \[model\] heads is 2 in checkpoint '$ck'.*shape" \
    "$bk" eval "$ck" "${ev[@]}" --set model.heads=8
check "--set model.heads=8 is refused by bias too" 1 "--set model.heads=8: \[model\] heads is 2" \
    "$bk" bias "$ck" --length 4 --set model.heads=8
check "--set model.dim on resume is refused" 1 "--set model.dim=32: \[model\] dim is 16" \
    "$bk" train --resume "$ck" --set model.dim=32 --set train.steps=6 --out "$work/dim-run" --plain
check "--set attention.mixing is refused" 1 "--set attention.mixing=kernel: \[attention\] mixing is \"sum\"" \
    "$bk" eval "$ck" "${ev[@]}" --set attention.mixing=kernel
check "--set term.0.plugin is refused" 1 "--set term.0.plugin=rope: \[\[term\]\] #1 plugin is \"alibi\"" \
    "$bk" eval "$ck" "${ev[@]}" --set term.0.plugin=rope
check "eval --set train.length=64 is refused" 1 \
    "error: --set train.length=64: \[train\] length is 32 in checkpoint '$ck'.*fact of how its model was trained.*--lengths" \
    "$bk" eval "$ck" --tokens 2000 --set train.length=64
check "eval --set train.steps is refused (eval does not train)" 1 "--set train.steps=9: \[train\] steps is 4 in checkpoint .*changes only with train --resume" \
    "$bk" eval "$ck" "${ev[@]}" --set train.steps=9
check "resume --set train.length=64 is refused" 1 "--set train.length=64: \[train\] length is 32" \
    "$bk" train --resume "$ck" --set train.length=64 --set train.steps=6 --out "$work/len-run" --plain
check "resume --set train.batch is refused" 1 "--set train.batch=4: \[train\] batch is 2" \
    "$bk" train --resume "$ck" --set train.batch=4 --set train.steps=6 --out "$work/batch-run" --plain
check "resume --set train.steps below the step is refused" 1 "--set train.steps=3: checkpoint '$ck' is at step 4" \
    "$bk" train --resume "$ck" --set train.steps=3 --out "$work/back-run" --plain
check "--set model.heads=2 (its own value) is no change" 0 "step 4, trained at length 32" \
    "$bk" eval "$ck" "${ev[@]}" --set model.heads=2
check "eval --set run.device=cpu still works" 0 "^device: cpu" "$bk" eval "$ck" "${ev[@]}" --set run.device=cpu
check "eval --set data.val_fraction still works" 0 "step 4" "$bk" eval "$ck" "${ev[@]}" --set data.val_fraction=0.1
cp -r "$work/run" "$work/run2"
check "resume --set train.steps and lr still work" 0 "resuming from .* at step 4.*done: 6 steps" \
    bash -c "'$bk' train --resume '$work/run2/checkpoint.safetensors' --set train.steps=6 --set train.lr=2e-3 --set run.device=cpu --plain 2>&1 | tr '\n' ' '"
check "... and the resumed checkpoint loads clean" 0 "step 6, trained at length 32" \
    "$bk" eval "$work/run2/checkpoint.safetensors" "${ev[@]}" --strict
check "a plugin option by --set is a warning naming it" 0 \
    "warning: checkpoint '$ck': --set term.0.slope_scale=0.5 changes \[\[term\]\] #1 \(alibi\) option 'slope_scale' \(not set in the checkpoint, now 0.5\).*--strict refuses" \
    "$bk" eval "$ck" "${ev[@]}" --set term.0.slope_scale=0.5
check "... and --strict refuses it" 1 "error: checkpoint '$ck': --set term.0.slope_scale=0.5 changes .*refused \(--strict\)" \
    "$bk" eval "$ck" "${ev[@]}" --set term.0.slope_scale=0.5 --strict

# ---- a recorded plugin path that now holds another plugin --------------------------------------------
plugins=$(dirname "$bk")/plugins
cp "$plugins/biaskit_alibi.so" "$work/pl/x.so"
sed 's|plugin = "alibi"|plugin = "./pl/x.so"|' "$work/tiny.toml" >"$work/px.toml"
"$bk" train "$work/px.toml" --out "$work/prun" --plain >/dev/null 2>&1
cp "$plugins/biaskit_rope.so" "$work/pl/x.so"
pl_real=$(cd "$work/pl" && pwd -P)
other="term 'rope' \(plugin rope, $pl_real/x\.so\): \[\[term\]\] #1 was trained with plugin 'alibi' \(term 'alibi'\), now plugin 'rope'"
check "another plugin at the recorded path: the warning names both" 0 "warning: checkpoint '$work/prun/checkpoint\.safetensors': $other" \
    "$bk" eval "$work/prun/checkpoint.safetensors" "${ev[@]}"
check "another plugin at the recorded path: no 'no record'" 0 "^0$" \
    bash -c "'$bk' eval '$work/prun/checkpoint.safetensors' ${ev[*]} 2>&1 | grep -c 'no record' || true"
check "another plugin at the recorded path: --strict refuses, naming both" 1 "error: checkpoint '.*': $other.*refused \(--strict\)" \
    "$bk" eval "$work/prun/checkpoint.safetensors" "${ev[@]}" --strict

# ---- files that are not regular: refused at once, never read ------------------------------------------
mkfifo "$work/fifo.safetensors"
check "eval of a FIFO is refused without blocking" 1 "'$work/fifo\.safetensors' is a FIFO" \
    timeout 20 "$bk" eval "$work/fifo.safetensors"
check "resume from a FIFO is refused without blocking" 1 "'$work/fifo\.safetensors' is a FIFO" \
    timeout 20 "$bk" train --resume "$work/fifo.safetensors" --plain
check "bias of a FIFO is refused without blocking" 1 "'$work/fifo\.safetensors' is a FIFO" \
    timeout 20 "$bk" bias "$work/fifo.safetensors"
mkfifo "$work/fifo2"
check "bias of a FIFO without the extension is refused without blocking" 1 "'$work/fifo2' is a FIFO" \
    timeout 20 "$bk" bias "$work/fifo2"
check "eval of a directory is refused" 1 "'$work/run' is a directory" "$bk" eval "$work/run"

# ---- format 2 (written before the metadata checksum): loads with a warning, --strict refuses -----------
edit "$ck" "$work/f2.safetensors" format2
check "format 2 loads with a warning" 0 "warning: checkpoint '$work/f2\.safetensors' is format 2, written before checkpoints carried a checksum of their metadata" \
    "$bk" eval "$work/f2.safetensors" "${ev[@]}"
check "format 2: --strict refuses it, naming both formats" 1 "error: checkpoint '$work/f2\.safetensors' is format 2.*this biaskit writes format 3.*refused \(--strict\)" \
    "$bk" eval "$work/f2.safetensors" "${ev[@]}" --strict
mkdir -p "$work/f2run" && cp "$work/f2.safetensors" "$work/f2run/checkpoint.safetensors"
check "format 2 resumes, and its next checkpoint is format 3" 0 "done: 5 steps" \
    "$bk" train --resume "$work/f2run/checkpoint.safetensors" --set train.steps=5 --plain
check "... which loads without a warning" 0 "^0$" \
    bash -c "'$bk' eval '$work/f2run/checkpoint.safetensors' ${ev[*]} --strict 2>&1 | grep -c warning || true"
check "... and is format 3" 0 "^3$" python3 -c '
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
print(json.loads(json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]["biaskit"])["format"])' \
    "$work/f2run/checkpoint.safetensors"
edit "$ck" "$work/f1.safetensors" 'meta["format"] = 1'
check "format 1 is refused naming the formats read" 1 "checkpoint format 1; this biaskit reads formats 2 and 3" \
    "$bk" eval "$work/f1.safetensors" "${ev[@]}"

# ---- --no-verify: the tensors' checksums skipped, nothing else ----------------------------------------
python3 - "$ck" "$work/flip.safetensors" <<'PY'
import struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
raw[8 + n] ^= 0x10  # a bit of the first tensor's first value
open(sys.argv[2], "wb").write(raw)
PY
check "a flipped data bit is refused" 1 "is corrupt: its data's xxh64 is" "$bk" eval "$work/flip.safetensors" "${ev[@]}"
check "--no-verify skips the tensor checksums" 0 "step 4, trained at length 32" \
    "$bk" eval "$work/flip.safetensors" "${ev[@]}" --no-verify
check "bias --no-verify too" 0 "^checkpoint: $work/flip\.safetensors" "$bk" bias "$work/flip.safetensors" --length 4 --no-verify
check "eval --help documents --no-verify" 0 "--no-verify" "$bk" eval --help

# ---- biaskit new-plugin: names whose generated code would not compile are refused ----------------------
for name in biaskit biaskit_x biaskit_tp linux unix math_errhandling; do
    check "new-plugin refuses '$name'" 2 "new-plugin: '$name' " "$bk" new-plugin "$name" --dir "$work"
done
check "new-plugin names why: the SDK's prefix" 2 "'biaskit_x' cannot be a plugin name: names 'biaskit' and 'biaskit_...' are the SDK's own prefix" \
    "$bk" new-plugin biaskit_x --dir "$work"
check "new-plugin names why: a macro" 2 "'linux' cannot be a plugin name: it is a macro of the C compiler" "$bk" new-plugin linux --dir "$work"
if cc --version >/dev/null 2>&1; then
    # every lowercase object-like macro the compiler and the SDK's headers define is refused, and each name
    # accepted compiles (C keywords included: the code only pastes the name onto suffixes)
    "$bk" new-plugin probe --dir "$work" >/dev/null
    macros=$(cc -std=gnu11 -dM -E -I "$src/sdk/include" "$work/probe/probe.c" | sed -n 's/^#define \([a-z][a-z0-9_]*\) .*/\1/p')
    for m in $macros; do
        [ "${#m}" -le 40 ] || continue
        check "new-plugin refuses the macro '$m'" 2 "new-plugin: '$m' " "$bk" new-plugin "$m" --dir "$work"
    done
    for name in int for while return mybias biaskitx bktp errno stdio bool p theta; do
        check "new-plugin '$name' is accepted and compiles" 0 "" \
            bash -c "'$bk' new-plugin '$name' --dir '$work' >/dev/null && cc -std=gnu11 -Wall -Werror -fsyntax-only -I '$src/sdk/include' '$work/$name/$name.c'"
    done
    check "the refused names would not have compiled (biaskit)" 1 "" \
        bash -c "mkdir -p '$work/raw' && sed 's/probe/biaskit/g' '$work/probe/probe.c' >'$work/raw/biaskit.c' && cc -std=gnu11 -fsyntax-only -I '$src/sdk/include' '$work/raw/biaskit.c'"
    check "the refused names would not have compiled (linux)" 1 "" \
        bash -c "sed 's/probe/linux/g' '$work/probe/probe.c' >'$work/raw/linux.c' && cc -std=gnu11 -fsyntax-only -I '$src/sdk/include' '$work/raw/linux.c'"
else
    check "new-plugin accepts a C keyword" 0 "writing" "$bk" new-plugin int --dir "$work"
fi

echo "test_ckpt_hostile: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
