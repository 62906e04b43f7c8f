#!/usr/bin/env bash
# Passkey retrieval in a sweep (issue 27, docs/sweeps.md "[eval]"): [eval] passkey / passkey_depths /
# passkey_trials run `biaskit passkey` on every run after its evaluation into passkey.json; the report
# gains a passkey table (exact match over depths and seeds, the digit accuracy, n) and a heat map per
# variant; a sweep that was done before passkey was asked evaluates again without training again; bad
# values are refused naming the sweep file's line.
# usage: test_sweep_passkey.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$(cd "$2" && pwd -P)
work=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH
export OMP_WAIT_POLICY=passive
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

tiny='"model.layers=1", "model.heads=2", "model.dim=16", "train.length=32", "train.batch=2", "train.steps=3",
       "train.warmup=1", "train.eval_every=0", "train.eval_batches=1", "train.log_every=4", "data.max_bytes=60000",
       "run.threads=1"'
write_sweep() { # $1: extra [eval] lines
    cat >"$work/s.toml" <<EOF
base = "$src/examples/demo_alibi.toml"
[sweep]
out_dir = "out"
seeds = [1, 2]
set = [$tiny]
[eval]
lengths = [32, 64]
tokens = 512
$1
[[variant]]
name = "alibi"
[[corpus]]
name = "h"
EOF
}
d=$work/out

# a sweep done without passkey, then asked for it: evaluated again, not trained again
write_sweep ""
check "a sweep without passkey" 0 "sweep: 2 runs: 2 done" "$bk" sweep "$work/s.toml"
cp "$d/alibi-h-s1/train.log" "$work/train.log.before"
write_sweep 'passkey = [128, 256]
passkey_depths = [0, 1]
passkey_trials = 2'
check "--dry-run names the passkey grid" 0 "^passkey retrieval at 128,256; depths 0,1; 2 trials per cell$" \
    "$bk" sweep "$work/s.toml" --dry-run
check "passkey asked afterwards: the done runs are evaluated again" 0 \
    "alibi-h-s1: trained before; evaluating again \(no passkey grid yet\)" "$bk" sweep "$work/s.toml"
cmp -s "$d/alibi-h-s1/train.log" "$work/train.log.before" && ok "... not trained again (train.log unchanged)" ||
    bad "... not trained again"
for s in 1 2; do
    f=$d/alibi-h-s$s/passkey.json
    if python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["lengths"] == [128, 256] and j["depths"] == [0, 1] and j["trials"] == 2, j
assert len(j["results"]) == 4 and all(r["trials"] == 2 for r in j["results"])' "$f" 2>/dev/null; then
        ok "run s$s: passkey.json holds the grid asked (2 lengths x 2 depths x 2 trials)"
    else
        bad "run s$s: passkey.json" "$(cat "$f" 2>&1)"
    fi
done
check "a sweep run again: nothing to do" 0 "2 already done, skipped" "$bk" sweep "$work/s.toml"

# the report: the table over depths and seeds, and a heat map
check "report" 0 "report: " "$bk" report "$d" --out "$work/rep"
md=$work/rep/report.md
# the exact-match accuracy at 128 by hand: correct over trials of both seeds and both depths
want=$(python3 -c '
import json, sys
c = t = 0
for s in (1, 2):
    for r in json.load(open(sys.argv[1] + "/alibi-h-s%d/passkey.json" % s))["results"]:
        if r["length"] == 128:
            c += r["correct"]; t += r["trials"]
print("%.2f" % (c / t))' "$d")
if grep -q "^## Passkey retrieval" "$md" && grep -Eq "^\| alibi \| $want \(digits [0-9.]+, n=2\) \|" "$md"; then
    ok "report: the passkey table, exact match $want at 128 over depths and seeds (n=2)"
else
    bad "report: the passkey table (want $want)" "$(sed -n '/Passkey/,/^$/p' "$md")"
fi
if [ -s "$work/rep/passkey-h-alibi.gp" ] && [ -s "$work/rep/passkey-h-alibi.dat" ] && grep -Fq "(passkey-h-alibi.png)" "$md"; then
    ok "report: a heat map per variant (script, data, in the report)"
else
    bad "report: the passkey heat map" "$(ls "$work/rep")"
fi

# bad values: named with the sweep file's line
write_sweep 'passkey = [50]'
check "a passkey length below the key's size is refused" 1 "s.toml:[0-9]+:[0-9]+: .*\[eval\] passkey \(lengths\).*101" \
    "$bk" sweep "$work/s.toml" --dry-run
write_sweep 'passkey = [128]
passkey_depths = [0.5, 1.5]'
check "a depth outside [0, 1] is refused" 1 "s.toml:[0-9]+:[0-9]+: .*\[eval\] passkey_depths.*\[0, 1\]" \
    "$bk" sweep "$work/s.toml" --dry-run
write_sweep 'passkey = [128]
passkey_trials = 0'
check "passkey_trials < 1 is refused" 1 "s.toml:[0-9]+:[0-9]+: .*\[eval\] passkey_trials" "$bk" sweep "$work/s.toml" --dry-run
# depths and trials without the lengths mean nothing: refused, not ignored (they used to pass silently)
write_sweep 'passkey_trials = 3'
check "passkey_trials without passkey is refused" 1 \
    "s.toml:[0-9]+:[0-9]+: \[eval\] passkey_trials applies with \[eval\] passkey \(the lengths to test\) only" \
    "$bk" sweep "$work/s.toml" --dry-run
write_sweep 'passkey_depths = [0, 1]'
check "passkey_depths without passkey is refused" 1 "s.toml:[0-9]+:[0-9]+: \[eval\] passkey_depths applies with" \
    "$bk" sweep "$work/s.toml" --dry-run

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
