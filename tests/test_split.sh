#!/usr/bin/env bash
# The train/validation split (issue 27, README "Validation data"): on a directory of 30 documents whose
# alphabetical last file is unlike the rest (a generated table, zz_table.txt), the default split takes
# whole documents by split_seed: train prints what validation holds and writes split.json, whose
# documents are whole files and the same for every [train] seed; another split_seed takes others;
# split = "tail" takes the alphabetical tail (zz_table.txt) and says so; a single-file corpus is split by
# its tail with the reason printed; a bad split value is refused naming the key and the choices;
# `sweep --dry-run` lists the split of each corpus, as train makes it.
# usage: test_split.sh <biaskit binary>
set -u
bk=$1
work=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH
export OMP_WAIT_POLICY=passive
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

mkdir -p "$work/corpus"
for i in $(seq -w 0 29); do
    # prose-like documents of 2-4 KB, each its own length
    n=$((2000 + 10#$i * 70))
    yes "document $i: the quick brown fox jumps over the lazy dog, again and again." | head -c "$n" \
        >"$work/corpus/a$i.txt"
done
yes "0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07," | head -c 6000 >"$work/corpus/zz_table.txt"
cat >"$work/exp.toml" <<EOF
[model]
layers = 1
heads = 2
dim = 16
vocab = 256
[train]
length = 32
batch = 2
steps = 2
warmup = 1
eval_every = 0
eval_batches = 1
log_every = 1
[data]
paths = ["corpus"]
[run]
threads = 1
[[term]]
plugin = "alibi"
EOF

check "the default split is by document, and train says what validation holds" 0 \
    "^validation: [0-9]+ of 31 documents by split_seed 0, [0-9,]+ bytes \([0-9.]+%\): " \
    "$bk" train "$work/exp.toml" --plain --out "$work/r1"
s1=$work/r1/split.json
if [ -f "$s1" ] && grep -q '"split": "documents", "seed": 0, "fraction": 0.05' "$s1"; then
    ok "... split.json in the run directory names the split"
else
    bad "split.json in the run directory" "$(cat "$s1" 2>&1)"
fi
# every validation document is a whole file of the corpus: its listed bytes are the file's size
whole=1
n_val=0
while IFS=$'\t' read -r f u; do
    n_val=$((n_val + 1))
    [ "$(stat -c %s "$f")" = "$u" ] || whole=0
done < <(python3 -c '
import json, sys
for e in json.load(open(sys.argv[1]))["validation"]["list"]:
    print(e["file"] + "\t" + str(e["units"]))' "$s1")
if [ "$whole" = 1 ] && [ "$n_val" -ge 1 ] && [ "$n_val" -lt 31 ]; then
    ok "... its $n_val validation documents are whole files"
else
    bad "validation documents whole ($n_val listed)" "$(cat "$s1")"
fi

check "another [train] seed" 0 "^validation: " "$bk" train "$work/exp.toml" --plain --out "$work/r2" --set train.seed=9
if cmp -s "$s1" "$work/r2/split.json"; then
    ok "... validates on the same documents (split.json identical)"
else
    bad "the same documents for another seed" "$(diff "$s1" "$work/r2/split.json")"
fi

check "another split_seed" 0 "documents by split_seed 5" \
    "$bk" train "$work/exp.toml" --plain --out "$work/r3" --set data.split_seed=5
if ! cmp -s <(grep '"file"' "$s1") <(grep '"file"' "$work/r3/split.json"); then
    ok "... takes other documents"
else
    bad "another split_seed takes other documents" "$(cat "$work/r3/split.json")"
fi

check "split = \"tail\" takes the alphabetical tail, named" 0 \
    "^validation: the last 5% of the stream, [0-9,]+ bytes, in 1 file: zz_table.txt \(part\)$" \
    "$bk" train "$work/exp.toml" --plain --out "$work/r4" --set data.split=tail

cat >"$work/sweep.toml" <<EOF
base = "exp.toml"
[sweep]
out_dir = "sw"
seeds = [1, 2]
[[variant]]
name = "a"
EOF
check "sweep --dry-run lists what validation holds, per corpus, once" 0 \
    "data 'corpus': validation: [0-9]+ of 31 documents by split_seed 0, [0-9,]+ bytes" \
    "$bk" sweep "$work/sweep.toml" --dry-run
if [ "$("$bk" sweep "$work/sweep.toml" --dry-run 2>&1 | grep -c "^data 'corpus': validation: ")" = 1 ] &&
    "$bk" sweep "$work/sweep.toml" --dry-run 2>&1 | grep -Fq "$(sed -n 's/^validation: //p' <<<"$("$bk" train "$work/exp.toml" --plain --out "$work/r7" 2>&1)")"; then
    ok "... once for two seeds, and the same as train's"
else
    bad "the dry run's validation line once, as train's" "$("$bk" sweep "$work/sweep.toml" --dry-run 2>&1)"
fi

printf 'one file only, long enough for a few windows of thirty-two bytes each. %.0s' $(seq 1 40) >"$work/one.txt"
check "a single file: its tail, with the reason" 0 \
    "^validation: the last 5% of the stream, .*\(one document cannot be split by document: its tail is validation; give two or more files, or val_paths\)$" \
    "$bk" train "$work/exp.toml" --plain --out "$work/r5" --set 'data.paths=["one.txt"]'

check "a bad split is refused, naming the key and the choices" 1 "\[data\] split: expected one of documents, tail, got .bytes." \
    "$bk" train "$work/exp.toml" --plain --out "$work/r6" --set data.split=bytes

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
