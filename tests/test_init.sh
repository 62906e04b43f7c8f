#!/usr/bin/env bash
# train --init and [train] trainable (core/train/init.h): a run started from another checkpoint's
# weights at a new length, with a term added, swapped or dropped, the parent's seal recorded, frozen
# tensors left bit for bit, and every refusal named.
# usage: test_init.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

# tensors.py CKPT NAME...: each tensor's bytes' SHA-256, one line per name ("missing" when absent);
# META CKPT KEY: a value of the biaskit metadata, as JSON
tensors() {
    python3 - "$@" <<'EOF'
import hashlib, json, struct, sys
path, names = sys.argv[1], sys.argv[2:]
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    base = 8 + n
    for name in names:
        if name not in head:
            print(name, "missing")
            continue
        a, b = head[name]["data_offsets"]
        f.seek(base + a)
        print(name, hashlib.sha256(f.read(b - a)).hexdigest())
EOF
}
meta() {
    python3 - "$@" <<'EOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))["__metadata__"]
print(json.dumps(json.loads(head["biaskit"]).get(sys.argv[2])) if sys.argv[2] != "biaskit_xxh64" else head[sys.argv[2]])
EOF
}

mkdir -p "$work/corpus"
cat "$src"/docs/*.md >"$work/corpus/text.txt"
body='[train]\nlength = 16\nbatch = 2\nsteps = 3\nwarmup = 1\nlog_every = 1\nlr = 0.01\n[data]\npaths = ["corpus"]\n'
base='[model]\nlayers = 1\nheads = 2\ndim = 16\n'"$body"
printf "$base"'[[term]]\nplugin = "kerple"\n' >"$work/parent.toml"
check "the parent trains" 0 "done: 3 steps" "$bk" train "$work/parent.toml" --out "$work/parent" --plain
parent="$work/parent/checkpoint.safetensors"
seal=$(meta "$parent" biaskit_xxh64)

# the same model at twice the length, 2 steps: every tensor carried, the seal recorded
check "init: a new length" 0 "init: $parent \(step 3, seal $seal\): [0-9]+ tensors carried over; 0 initialised afresh; 0 of the checkpoint left out" \
    "$bk" train "$work/parent.toml" --init "$parent" --set train.length=32 --set train.steps=2 --out "$work/longer" --plain
check "init: the seal is recorded" 0 "\"seal\": \"$seal\"" meta "$work/longer/checkpoint.safetensors" init
check "init: the parent's step is recorded" 0 "\"step\": 3" meta "$work/longer/checkpoint.safetensors" init
check "init: the run counts its own steps" 0 "^2$" meta "$work/longer/checkpoint.safetensors" step
# the weights start from the parent's: one step at lr 0 leaves them as they were
check "init: lr 0 keeps the parent's weights" 0 "done: 1 steps" "$bk" train "$work/parent.toml" --init "$parent" \
    --set train.steps=1 --set train.lr=0 --set train.weight_decay=0 --out "$work/same" --plain
names="model.wte model.qkvw term.kerple.r1 term.kerple.r2"
if [ "$(tensors "$parent" $names)" = "$(tensors "$work/same/checkpoint.safetensors" $names)" ]; then
    ok "init: every tensor is the parent's, bit for bit"
else
    bad "init: every tensor is the parent's, bit for bit" "$(tensors "$parent" $names; tensors "$work/same/checkpoint.safetensors" $names)"
fi
# [train] init in the file, relative to it
printf "$base"'[[term]]\nplugin = "kerple"\n' >"$work/child.toml"
sed -i "s|^\[train\]|[train]\ninit = \"parent/checkpoint.safetensors\"|" "$work/child.toml"
check "init: [train] init, relative to the experiment" 0 "init: $work/parent/checkpoint.safetensors \(step 3" \
    "$bk" train "$work/child.toml" --set train.steps=1 --out "$work/child" --plain

# a positional-only fine-tune: the model frozen bit for bit, the term trained
check "trainable: only the term trains" 0 "trainable: 4 of [0-9]+ parameters \\(\\[train\\] trainable\\); the others are frozen" "$bk" train "$work/parent.toml" --init "$parent" \
    --set 'train.trainable=["term.*"]' --set train.steps=2 --out "$work/positional" --plain
model="model.wte model.qkvw model.fcw model.lnfw"
if [ "$(tensors "$parent" $model)" = "$(tensors "$work/positional/checkpoint.safetensors" $model)" ]; then
    ok "trainable: the frozen model tensors are the parent's, bit for bit"
else
    bad "trainable: the frozen model tensors are the parent's, bit for bit"
fi
if [ "$(tensors "$parent" term.kerple.r1)" != "$(tensors "$work/positional/checkpoint.safetensors" term.kerple.r1)" ]; then
    ok "trainable: the term moved"
else
    bad "trainable: the term moved"
fi
# a resumed fine-tune keeps the record and its frozen tensors
check "trainable: resume" 0 "done: 3 steps" "$bk" train --resume "$work/positional/checkpoint.safetensors" --set train.steps=3 --plain
if [ "$(tensors "$parent" $model)" = "$(tensors "$work/positional/checkpoint.safetensors" $model)" ]; then
    ok "trainable: frozen after a resume"
else
    bad "trainable: frozen after a resume"
fi
check "init: the record survives a resume" 0 "\"seal\": \"$seal\"" meta "$work/positional/checkpoint.safetensors" init

# terms: kerple swapped for alibi + a new fire term; kerple's tensors are left out, fire's start afresh
printf "$base"'[[term]]\nplugin = "alibi"\n[[term]]\nplugin = "fire"\n' >"$work/swap.toml"
check "init: a term swapped and one added" 0 \
    "[0-9]+ tensors carried over; [0-9]+ initialised afresh: term\.fire\.[^;]*; 2 of the checkpoint left out: term\.kerple\.r1, term\.kerple\.r2" \
    "$bk" train "$work/swap.toml" --init "$parent" --set train.steps=1 --out "$work/swap" --plain
# the same label made by another plugin starts afresh too
printf "$base"'[[term]]\nplugin = "alibi"\nname = "kerple"\n' >"$work/relabel.toml"
check "init: a label another plugin makes now" 0 "0 initialised afresh; 2 of the checkpoint left out: term\.kerple\.r1, term\.kerple\.r2" \
    "$bk" train "$work/relabel.toml" --init "$parent" --set train.steps=1 --out "$work/relabel" --plain

# the llama family: rope at 16 tokens, fine-tuned at 32 with YaRN (original_length: the parent's context)
# and a window added, only the norms training
llama='[model]\nfamily = "llama"\nlayers = 1\nheads = 2\nkv_heads = 1\ndim = 16\nffn_dim = 24\n[run]\ndevice = "cpu"\n'
printf "$llama$body"'[[term]]\nplugin = "rope"\n' >"$work/llama.toml"
check "llama: the parent trains" 0 "done: 3 steps" "$bk" train "$work/llama.toml" --out "$work/llama" --plain
printf "$llama$body"'[[term]]\nplugin = "rope"\nscaling = "yarn"\nfactor = 2\noriginal_length = 16\n[[term]]\nplugin = "window"\nwindow = 24\n' \
    >"$work/llama-yarn.toml"
check "llama: init with yarn and a window at twice the length" 0 "trainable: 48 of [0-9]+ parameters" \
    "$bk" train "$work/llama-yarn.toml" --init "$work/llama/checkpoint.safetensors" --set train.length=32 --set train.steps=2 \
    --set 'train.trainable=["model.rms*"]' --out "$work/llama-yarn" --plain
norms="model.rms1w model.rms2w model.rmsfw"
if [ "$(tensors "$work/llama/checkpoint.safetensors" model.qkvw model.fcw)" = "$(tensors "$work/llama-yarn/checkpoint.safetensors" model.qkvw model.fcw)" ] &&
   [ "$(tensors "$work/llama/checkpoint.safetensors" $norms)" != "$(tensors "$work/llama-yarn/checkpoint.safetensors" $norms)" ]; then
    ok "llama: the norms trained, the rest stayed"
else
    bad "llama: the norms trained, the rest stayed"
fi

# refusals: each names what, and writes nothing
check "init: another width" 1 "--init $parent: tensor 'model\.wte' has shape \[256, 16\] there, the new model's is \[256, 32\] \(a model of another shape cannot start from it\)" \
    "$bk" train "$work/parent.toml" --init "$parent" --set model.dim=32 --out "$work/wide" --plain
[ ! -e "$work/wide/checkpoint.safetensors" ] && ok "init: a refused run writes no checkpoint" || bad "init: a refused run writes no checkpoint"
check "init: another family" 1 "--init $parent: the checkpoint has no tensor 'model\.[a-z0-9]+', which the new model needs" \
    "$bk" train "$work/parent.toml" --init "$parent" --set model.family=\"llama\" --set model.ffn_dim=32 --set run.device=\"cpu\" --out "$work/llama" --plain
check "init: a missing file" 1 "--init: .*$work/nosuch.safetensors" "$bk" train "$work/parent.toml" --init "$work/nosuch.safetensors" --out "$work/x" --plain
check "init: not with --resume" 2 "--init starts a new run from a checkpoint's weights and --resume continues one" \
    "$bk" train --resume "$parent" --init "$parent"
cp "$parent" "$work/damaged.safetensors"
printf 'XXXX' | dd of="$work/damaged.safetensors" bs=1 seek=$(($(stat -c %s "$parent") - 8)) conv=notrunc 2>/dev/null
check "init: a damaged checkpoint" 1 "--init: .*damaged.safetensors: tensor '.*' is corrupt" \
    "$bk" train "$work/parent.toml" --init "$work/damaged.safetensors" --out "$work/x" --plain
check "trainable: a pattern that matches nothing" 1 "\[train\] trainable pattern 'term\.kerpel\.\*' matches no tensor of the model \(model\.wte, " \
    "$bk" train "$work/parent.toml" --set 'train.trainable=["term.kerpel.*"]' --out "$work/x" --plain
check "trainable: part of a term" 1 "\[train\] trainable selects 'term\.kerple\.r1' but not 'term\.kerple\.r2': the tensors of one term train together" \
    "$bk" train "$work/parent.toml" --set 'train.trainable=["term.kerple.r1"]' --out "$work/x" --plain
check "init: --set train.init on a resume is refused" 1 "train.init" \
    "$bk" train --resume "$work/positional/checkpoint.safetensors" --set train.init=\"x\" --plain
check "config --keys documents init and trainable" 0 "trainable" bash -c "'$bk' config --keys | grep -A1 -E '^ *(init|trainable)'"

echo "test_init: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
