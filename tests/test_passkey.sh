#!/usr/bin/env bash
# biaskit generate and biaskit passkey end to end on a tiny model trained here: determinism for a seed,
# the grid's shape and fields in the table, CSV and JSON, the figure, and bad input refused with its message.
# usage: test_passkey.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

# a tiny model, trained as test_cli.sh does (alibi is a built-in plugin)
mkdir -p "$work/corpus"
head -c 20000 "$src/README.md" >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 20000 ]; do cat "$src/README.md" >>"$work/corpus/text.txt"; done
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 3\nwarmup = 1\nlog_every = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' \
    >"$work/exp.toml"
if ! out=$("$bk" train "$work/exp.toml" --out "$work/run" --plain 2>&1); then
    bad "fixture: train a tiny model" "$out"
    # --write-samples: training text of N samples of exactly T bytes, each ending with the key its needle holds
check "passkey --write-samples" 0 "^wrote 40 passkey samples of 128 bytes to .*samples.txt: train on them with \[train\] length = 128$" \
    "$bk" passkey --write-samples "$work/samples.txt" --length 128 --samples 40 --seed 3
if python3 -c '
import re, sys
b = open(sys.argv[1], "rb").read()
assert len(b) == 40 * 128, len(b)
keys = set()
for k in range(40):
    s = b[k * 128:(k + 1) * 128].decode()
    m = re.search(r"The pass key is (\d{5})\. Remember it\. (\d{5}) is the pass key\. ", s)
    assert m and m.group(1) == m.group(2), s
    assert s.endswith("What is the pass key? The pass key is " + m.group(1)), s
    keys.add(m.group(1))
assert len(keys) > 30, keys' "$work/samples.txt"; then
    ok "... 40 x 128 bytes, each sample asking for the key of its own needle, keys varied"
else
    bad "... the samples' layout" "$(head -c 300 "$work/samples.txt")"
fi
"$bk" passkey --write-samples "$work/samples2.txt" --length 128 --samples 40 --seed 3 >/dev/null
cmp -s "$work/samples.txt" "$work/samples2.txt" && ok "... the same for the same seed" || bad "... deterministic"
check "--write-samples: a length below 102 is refused" 2 "--length" "$bk" passkey --write-samples "$work/s.txt" --length 101 --samples 2
check "--write-samples: --samples 0 is refused" 2 "--samples" "$bk" passkey --write-samples "$work/s.txt" --length 128 --samples 0
check "--write-samples: without --samples" 2 "give --length T .* and --samples N" "$bk" passkey --write-samples "$work/s.txt" --length 128
check "--write-samples takes no checkpoint" 2 "takes no checkpoint" "$bk" passkey "$ck" --write-samples "$work/s.txt" --length 128 --samples 2
check "--samples without --write-samples" 2 "--samples, --length and --force go with --write-samples" "$bk" passkey "$ck" --samples 2

echo "test_passkey: $passed passed, $failures failed"
    exit 1
fi
ck=$work/run/checkpoint.safetensors

# ---- generate ----
check "generate --help" 0 "usage: biaskit generate" "$bk" generate --help
check "help lists generate and passkey" 0 "generate .*passkey " bash -c "'$bk' --help | tr '\n' ' '"
g() { "$bk" generate "$ck" "$@" 2>&1 | od -An -tx1; }
a=$(g --prompt "The sky is" --tokens 30) && b=$(g --prompt "The sky is" --tokens 30)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "generate: greedy twice is the same text" || bad "generate: greedy twice" "$a
$b"
[ "$a" = "$(g --prompt "The sky is" --tokens 30 --greedy)" ] && ok "generate: greedy is the default" || bad "generate: --greedy"
a=$(g --prompt "The sky is" --tokens 40 --top-k 20 --temperature 1.5 --seed 5)
b=$(g --prompt "The sky is" --tokens 40 --top-k 20 --temperature 1.5 --seed 5)
c=$(g --prompt "The sky is" --tokens 40 --top-k 20 --temperature 1.5 --seed 6)
[ "$a" = "$b" ] && ok "generate: sampling is deterministic for a seed" || bad "generate: sampling with seed 5 twice" "$a
$b"
[ "$a" != "$c" ] && ok "generate: another seed, another text" || bad "generate: seeds 5 and 6 gave the same text" "$a"
# 40 tokens and the newline
check "generate --tokens 40 writes 40 bytes and a newline" 0 "^41$" \
    bash -c "'$bk' generate '$ck' --prompt 'The sky is' --tokens 40 --top-k 20 --seed 1 | wc -c"
# --top-k 1 is greedy, whatever the temperature
[ "$(g --prompt "The sky is" --tokens 30)" = "$(g --prompt "The sky is" --tokens 30 --top-k 1 --temperature 3)" ] &&
    ok "generate: --top-k 1 is greedy" || bad "generate: --top-k 1 differs from greedy"
printf 'The sky is' >"$work/prompt.txt"
[ "$(g --prompt "The sky is" --tokens 30)" = "$(g --prompt-file "$work/prompt.txt" --tokens 30)" ] &&
    ok "generate: --prompt-file reads the same prompt" || bad "generate: --prompt-file"
: >"$work/empty.txt"
check "generate: empty prompt" 2 "error: --prompt is empty: give at least one byte of text" "$bk" generate "$ck" --prompt ""
check "generate: empty prompt file" 2 "error: --prompt-file is empty" "$bk" generate "$ck" --prompt-file "$work/empty.txt"
check "generate: no prompt" 2 "give the prompt with either --prompt TEXT or --prompt-file FILE \(none given\)" \
    "$bk" generate "$ck"
check "generate: a missing prompt file" 1 "error: --prompt-file: cannot read '.*nosuch'" "$bk" generate "$ck" --prompt-file "$work/nosuch"
check "generate: prompt beyond the limit" 1 \
    "error: the prompt has 300 tokens, beyond the limit of 256 tokens \(16 x the training length; --max-length N raises it\)" \
    "$bk" generate "$ck" --prompt "$(head -c 300 /dev/zero | tr '\0' 'a')"
check "generate: prompt and tokens beyond the limit" 1 \
    "the prompt \(250 tokens\) and --tokens 10 need a forward of 259 tokens, beyond the limit of 256 tokens" \
    "$bk" generate "$ck" --prompt "$(head -c 250 /dev/zero | tr '\0' 'a')" --tokens 10
check "generate: --max-length raises the limit" 0 "" \
    "$bk" generate "$ck" --prompt "$(head -c 300 /dev/zero | tr '\0' 'a')" --tokens 2 --max-length 400
check "generate: --top-k 0" 2 "error: --top-k: expected an integer >= 1 \(at most the vocabulary\), got '0'" \
    "$bk" generate "$ck" --prompt x --top-k 0
check "generate: --top-k beyond the vocabulary" 2 "error: --top-k: expected an integer in \[1, 256\] \(the vocabulary\), got 300" \
    "$bk" generate "$ck" --prompt x --top-k 300
check "generate: --temperature 0" 2 "error: --temperature: expected a finite number > 0, got '0'" \
    "$bk" generate "$ck" --prompt x --temperature 0
check "generate: --temperature nan" 2 "error: --temperature: expected a finite number > 0, got 'nan'" \
    "$bk" generate "$ck" --prompt x --temperature nan
check "generate: --greedy with --top-k" 2 "error: --greedy takes the most likely token: it cannot go with --top-k" \
    "$bk" generate "$ck" --prompt x --greedy --top-k 3

# ---- passkey ----
check "passkey --help states the scoring" 0 "teacher-forced exact match" "$bk" passkey --help
pk=("$bk" passkey "$ck" --lengths 101,128,200 --depths 0,0.5,1 --trials 4 --seed 3)
# one run writes every output; a second writes the CSV again
"${pk[@]}" --csv "$work/a.csv" --json "$work/a.json" $(command -v gnuplot >/dev/null && echo --plot "$work/pk.png") \
    >"$work/table.txt" 2>&1 || bad "passkey: the grid with every output" "$(cat "$work/table.txt")"
check "passkey: the grid's header" 0 "^depth \\\\ length +101 +128 +200$" cat "$work/table.txt"
check "passkey: a row per depth" 0 "^0.5( +[01]\.[0-9]{3}){3}$" cat "$work/table.txt"
check "passkey: the scoring in the banner" 0 "^passkey: 4 trials per cell, seed 3; scoring: teacher-forced exact match" \
    cat "$work/table.txt"
check "passkey --csv: header" 0 "^length,depth,trials,correct,accuracy,digit_accuracy,train_length$" cat "$work/a.csv"
check "passkey --csv: 9 cells" 0 "^9$" bash -c "tail -n +2 '$work/a.csv' | wc -l"
check "passkey --csv: accuracies in [0, 1], 4 trials, train length 16" 0 "^ok$" bash -c \
    "tail -n +2 '$work/a.csv' | awk -F, '\$3 != 4 || \$4 < 0 || \$4 > 4 || \$5 < 0 || \$5 > 1 || \$6 < 0 || \$6 > 1 || \$5 != \$4 / 4 || \$7 != 16 { bad = 1 } END { print bad ? \"bad\" : \"ok\" }'"
"${pk[@]}" --csv - >"$work/b.csv" 2>/dev/null
check "passkey: the same grid twice is the same CSV (--csv - too)" 0 "" cmp "$work/a.csv" "$work/b.csv"
check "passkey --json: the fields" 0 "^ok$" python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['lengths'] == [101, 128, 200] and d['depths'] == [0, 0.5, 1] and d['trials'] == 4 and d['seed'] == 3
assert d['train_length'] == 16 and d['step'] == 3 and 'teacher-forced' in d['scoring'] and d['overrides'] == []
assert len(d['results']) == 9
for r in d['results']:
    assert set(r) == {'length', 'depth', 'trials', 'correct', 'accuracy', 'digit_accuracy', 'needle_at'}, r
    assert 0 <= r['accuracy'] <= 1 and 0 <= r['digit_accuracy'] <= 1 and r['accuracy'] == r['correct'] / 4
    assert r['needle_at'] == 0 if r['depth'] == 0 else True
print('ok')" "$work/a.json"
if command -v gnuplot >/dev/null; then
    check "passkey --plot: a PNG" 0 "PNG image" file "$work/pk.png"
    check "passkey --plot: a heat map, lengths as columns" 0 "set xtics \(\"101\" 0, \"128\" 1, \"200\" 2\)" cat "$work/pk.gp"
    check "passkey --plot: depths as rows" 0 "set ytics \(\"0\" 0, \"0.5\" 1, \"1\" 2\)" cat "$work/pk.gp"
    check "passkey --plot: a cell per (length, depth)" 0 "^9$" bash -c "grep -c '^[0-9]' '$work/pk.dat'"
fi
check "passkey: a length below the minimum" 2 \
    "error: --lengths: 100 is below the shortest passkey length, 101 tokens \(the needle with its key, the question and the key: 102 bytes with no filler\)" \
    "$bk" passkey "$ck" --lengths 100,200
check "passkey: a depth above 1" 2 "error: --depths: 1.5 is outside \[0, 1\]" "$bk" passkey "$ck" --depths 0,1.5
check "passkey: a negative depth" 2 "error: --depths: -0.1 is outside \[0, 1\]" "$bk" passkey "$ck" --depths=-0.1
check "passkey: a depth that is no number" 2 "error: --depths: expected numbers separated by commas, got '0,x'" \
    "$bk" passkey "$ck" --depths 0,x
check "passkey: --trials 0" 2 "error: --trials: expected at least 1 trial, got 0" "$bk" passkey "$ck" --trials 0
check "passkey: --plot not a .png" 2 "error: --plot: expected a file name ending in .png, got '$work/x.svg'" \
    "$bk" passkey "$ck" --plot "$work/x.svg"
check "passkey: --csv the checkpoint is refused" 2 "error: --csv .* is the checkpoint" "$bk" passkey "$ck" --csv "$ck" --trials 1
check "passkey: default lengths: 8x and 16x the training length (at least 101 tokens)" 0 "^depth \\\\ length +128 +256$" \
    "$bk" passkey "$ck" --trials 1

echo "test_passkey: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
