#!/usr/bin/env bash
# `biaskit params`: the plugin parameters and mixing weights of a checkpoint, element by element. Tiny
# models train a few steps (kerple, ssmax per layer and learned mixing weights; FIRE's matrices and a
# plugin that names no tensors, stored whole as term.<label>.theta); then: the table names the stored
# tensors; the CSV's values equal the checkpoint's float32 data, read here with the standard library
# (struct + json), bit for bit at %.9g, every element of every term./mix. tensor listed in storage
# order; the initial values equal those of a model trained with lr = 0 (no step moves anything), and
# training moved some; the JSON parses and agrees with the CSV; errors name the file.
# usage: test_params.sh <biaskit binary> <source dir> <test plugin dir>
set -u
bk=$1 src=$2 testplugins=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

mkdir -p "$work/corpus" && : >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 40000 ]; do
    cat "$src/README.md" >>"$work/corpus/text.txt"
done
# experiment NAME TEXT: a 2-layer model trained 4 steps at length 16 with the given [attention]/[[term]] text
experiment() {
    printf '[model]\nlayers = 2\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 4\nwarmup = 1\n'\
'log_every = 4\neval_every = 0\neval_batches = 1\n[data]\npaths = ["corpus"]\n[run]\ndevice = "cpu"\n%b' "$2" >"$work/$1.toml"
}
mkdir -p "$work/plug" && cp "$testplugins/biaskit_oldembed.so" "$work/plug/"
experiment mixed '[attention]\nlearn_weights = true\n[[term]]\nplugin = "alibi"\n[[term]]\nplugin = "kerple"\n[[term]]\nplugin = "ssmax"\n'
experiment fire "[[term]]\nplugin = \"fire\"\nwidth = 4\n[[term]]\nplugin = \"$work/plug/biaskit_oldembed.so\"\n"
for name in mixed fire; do
    check "$name: trains" 0 "done: 4 steps" "$bk" train "$work/$name.toml" --out "$work/$name" --plain
    # the same experiment with lr = 0: its checkpoint holds the initial values
    check "$name: trains with lr = 0" 0 "done: 1 steps" "$bk" train "$work/$name.toml" --out "$work/${name}0" --plain \
        --set train.lr=0 --set train.steps=1
done

check "the table names the stored tensors and the mixing weights" 0 \
    "term\.kerple\.r1 +kerple +r1 +- +h0 .*term\.ssmax\.s +ssmax +s +1 +h1 .*mix\.token +kerple +weight" \
    bash -c "'$bk' params '$work/mixed/checkpoint.safetensors' | tr '\n' ' '"
check "FIRE's matrices per element, a tensorless plugin's whole theta" 0 \
    "term\.fire\.W1 +fire +W1 .*term\.oldembed\.theta +oldembed +theta +- +255 " \
    bash -c "'$bk' params '$work/fire/checkpoint.safetensors' | tr '\n' ' '"
for run in mixed mixed0 fire fire0; do
    check "$run: writes CSV and JSON" 0 "wrote .*$run.csv" "$bk" params "$work/$run/checkpoint.safetensors" \
        --csv "$work/$run.csv" --json "$work/$run.json"
done

# compare.py CKPT CSV JSON [CSV0]: the CSV against the checkpoint's data (and the JSON against the CSV);
# with CSV0 (the lr = 0 run's), the initial column against CSV0's values, and some value moved.
cat >"$work/compare.py" <<'EOF'
import json, struct, sys
ckpt, csvp, jsonp = sys.argv[1:4]
with open(ckpt, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
want = {}
for name, t in head.items():
    if name == "__metadata__" or not (name.startswith("term.") or name.startswith("mix.")):
        continue
    assert t["dtype"] == "F32", name
    a, b = t["data_offsets"]
    want[name] = ["%.9g" % v for v in struct.unpack("<%df" % ((b - a) // 4), data[a:b])]
lines = open(csvp).read().splitlines()
assert lines[0] == "name,term,tensor,layer,row,col,value,initial", lines[0]
rows = [l.split(",") for l in lines[1:]]
got = {}
for r in rows:
    got.setdefault(r[0], []).append(r[6])
assert sorted(got) == sorted(want), "names: csv %s, checkpoint %s" % (sorted(got), sorted(want))
for name in want:
    assert got[name] == want[name], "%s: csv %s, checkpoint %s" % (name, got[name][:4], want[name][:4])
js = json.load(open(jsonp))["params"]
assert len(js) == len(rows), (len(js), len(rows))
for j, r in zip(js, rows):
    assert j["name"] == r[0] and "%.9g" % j["value"] == r[6] and "%.9g" % j["initial"] == r[7], (j, r)
    assert (j["layer"] is None) == (r[3] == ""), (j, r)
if len(sys.argv) > 4:
    rows0 = [l.split(",") for l in open(sys.argv[4]).read().splitlines()[1:]]
    assert [r[:6] for r in rows0] == [r[:6] for r in rows], "other elements"
    assert [r[7] for r in rows] == [r[6] for r in rows0], "initial values differ from the lr = 0 run's"
    assert [r[7] for r in rows0] == [r[6] for r in rows0], "lr = 0 moved a value"
    assert any(r[6] != r[7] for r in rows), "training moved nothing"
print("%d elements of %d tensors match" % (len(rows), len(want)))
EOF
for name in mixed fire; do
    check "$name: the CSV equals the checkpoint bit for bit; initial = the lr = 0 run's values" 0 "elements of [0-9]+ tensors match" \
        python3 "$work/compare.py" "$work/$name/checkpoint.safetensors" "$work/$name.csv" "$work/$name.json" "$work/${name}0.csv"
    check "${name}0: the CSV equals its checkpoint" 0 "elements of [0-9]+ tensors match" \
        python3 "$work/compare.py" "$work/${name}0/checkpoint.safetensors" "$work/${name}0.csv" "$work/${name}0.json"
done
check "the mixing weights are listed with learn_weights = true" 0 "^mix\.token,alibi,weight,,,," cat "$work/mixed.csv"
check "the compare can fail (a changed value is seen)" 1 "checkpoint" \
    bash -c "sed '2s/,\([-0-9.e]*\),\([-0-9.e]*\)\$/,1\1,\2/' '$work/mixed.csv' >'$work/bad.csv' && python3 '$work/compare.py' '$work/mixed/checkpoint.safetensors' '$work/bad.csv' '$work/mixed.json'"

# errors name the file
check "a missing checkpoint is named" 1 "nosuch\.safetensors" "$bk" params "$work/nosuch.safetensors"
check "a file that is not a checkpoint is named" 1 "'$work/mixed\.toml' is not a checkpoint" "$bk" params "$work/mixed.toml"
check "an output that is the checkpoint is refused" 2 "--csv .* is the checkpoint" \
    "$bk" params "$work/mixed/checkpoint.safetensors" --csv "$work/mixed/checkpoint.safetensors"
rm "$work/plug/biaskit_oldembed.so"
check "a plugin that cannot be loaded is named with the checkpoint" 1 "experiment saved in .*fire/checkpoint\.safetensors.*plugin file .*biaskit_oldembed\.so. not found" \
    "$bk" params "$work/fire/checkpoint.safetensors"
echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
