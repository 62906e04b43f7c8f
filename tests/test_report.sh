#!/usr/bin/env bash
# biaskit report end to end on a fixture sweep made here: 2 variants (ALiBi; KERPLE + ALiBi with
# learned kernel mixing weights) x 2 seeds of a tiny model trained a few steps and evaluated with
# both protocols, plus one failed run; sweep.json written by hand as `biaskit sweep` writes it.
# Checks the table (one mean ± std recomputed here from the eval.json values), the CSV columns, the
# failed run listed with its error, every figure with its script and data, the mixing weights in
# metrics.jsonl, gnuplot missing, and clear errors for bad input.
# usage: test_report.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
export OMP_NUM_THREADS=1

# has NAME FILE FIXED_STRING: the file contains the string
has() {
    if grep -Fq -- "$3" "$2"; then ok "$1"; else bad "$1 ('$3' not in $2)" "$(head -40 "$2" 2>&1)"; fi
}
is_png() { [ -s "$1" ] && [ "$(head -c 4 "$1" | tail -c 3)" = "PNG" ]; }

# --- the fixture sweep ---------------------------------------------------------------------------
sw="$work/my sweep" # a space in the path
mkdir -p "$sw"
cat "$src"/core/train/train.c "$src"/core/eval/eval.c | head -c 40000 >"$work/corpus.txt"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 3\nwarmup = 1\nlog_every = 1\nlr = 0.03\n[run]\nthreads = 1\n[data]\npaths = ["%s"]\n' \
    "$work/corpus.txt" >"$work/base.toml"
{ cat "$work/base.toml"; printf '[[term]]\nplugin = "alibi"\n'; } >"$work/alibi.toml"
{ cat "$work/base.toml"; printf '[attention]\nmixing = "kernel"\nlearn_weights = true\n[[term]]\nplugin = "kerple"\nvariant = "log"\n[[term]]\nplugin = "alibi"\n'; } >"$work/kmix.toml"
for v in alibi kmix; do
    for s in 1 2; do
        d="$sw/$v-s$s"
        if ! out=$("$bk" train "$work/$v.toml" --out "$d" --set train.seed=$s --plain 2>&1); then
            bad "fixture: train $v seed $s" "$out"
            continue
        fi
        cp "$work/$v.toml" "$d/experiment.toml"
        "$bk" eval "$d/checkpoint.safetensors" --lengths 16,32,64 --tokens 1024 --json "$d/eval.json" >/dev/null 2>&1 ||
            bad "fixture: eval $v seed $s"
        "$bk" eval "$d/checkpoint.safetensors" --lengths 16,32,64 --tokens 1024 --sliding 8 \
            --json "$d/eval-sliding.json" >/dev/null 2>&1 || bad "fixture: sliding eval $v seed $s"
        echo '{"state": "done", "error": "", "train_seconds": 0.5, "eval_seconds": 0.2}' >"$d/status.json"
    done
done
mkdir -p "$sw/kmix-s3"
echo '{"state": "failed", "error": "step 3: loss is nan; stopped (set [train] nonfinite)"}' >"$sw/kmix-s3/status.json"
cat >"$sw/sweep.json" <<EOF
{"sweep": "$work/sweep.toml", "lengths": [16, 32, 64], "sliding": 8, "train_length": 16,
 "runs": [
  {"name": "alibi-s1", "dir": "alibi-s1", "variant": "alibi", "corpus": "src", "seed": 1, "grid": {}, "sets": ["train.seed=1"]},
  {"name": "alibi-s2", "dir": "alibi-s2", "variant": "alibi", "corpus": "src", "seed": 2, "grid": {}, "sets": ["train.seed=2"]},
  {"name": "kmix-s1", "dir": "kmix-s1", "variant": "kmix", "corpus": "src", "seed": 1, "grid": {}, "sets": ["train.seed=1"]},
  {"name": "kmix-s2", "dir": "kmix-s2", "variant": "kmix", "corpus": "src", "seed": 2, "grid": {}, "sets": ["train.seed=2"]},
  {"name": "kmix-s3", "dir": "kmix-s3", "variant": "kmix", "corpus": "src", "seed": 3, "grid": {}, "sets": ["train.seed=3"]},
  {"name": "kmix-s4", "dir": "kmix-s4", "variant": "kmix", "corpus": "src", "seed": 4, "grid": {}, "sets": ["train.seed=4"]}
 ]}
EOF

# the training loop logs the learned mixing weights (and only when they are learned)
has "metrics.jsonl: mixing weights when learned" "$sw/kmix-s1/metrics.jsonl" '"mix": {"token": ['
if grep -q '"mix"' "$sw/alibi-s1/metrics.jsonl"; then bad "metrics.jsonl: no mixing weights when fixed"; else ok "metrics.jsonl: no mixing weights when fixed"; fi

# --- the report ----------------------------------------------------------------------------------
out="$work/out"
check "report runs" 0 "runs: 6, 4 finished, 2 failed, missing or incomplete" "$bk" report "$sw" --out "$out"
md="$out/report.md"
has "report: table header" "$md" "| variant | 16 (1x) | 32 (2x) | 64 (4x) |"
has "report: both protocols" "$md" "Sliding window, stride 8:"
has "report: a configuration section" "$md" "## Configuration"
has "... the model" "$md" "| model | 1 layers, 2 heads, dim 16, vocabulary 256 (bytes) |"
has "... the training and the tokens it saw" "$md" "| training | 3 steps of 2 x 16 tokens = 96 tokens; seeds 1, 2, 3, 4 |"
has "... what validation holds, as train printed it (split.json)" "$md" "| data \`src\` | validation: the last 5% of the stream, 2,000 bytes, in 1 file: corpus.txt"
has "... each variant's terms" "$md" '| `kmix` | `plugin = "kerple"; variant = "log" + plugin = "alibi"` |'

# one number by hand: ALiBi at length 32, non-overlapping: mean ± sample std of the two seeds
ppl_at() { sed -n "s/^ *{\"length\": $2, .*\"ppl\": \([0-9.]*\).*/\1/p" "$1"; }
a=$(ppl_at "$sw/alibi-s1/eval.json" 32) b=$(ppl_at "$sw/alibi-s2/eval.json" 32)
want=$(awk -v a="$a" -v b="$b" 'BEGIN { m = (a + b) / 2; s = sqrt(((a - m) ^ 2 + (b - m) ^ 2) / 1); printf "%.2f ± %.2f (n=2)", m, s }')
got=$(grep -m1 '^| alibi |' "$md" | awk -F'|' '{ gsub(/^ +| +$/, "", $4); print $4 }') # the first table: non-overlapping
if [ -n "$a" ] && [ -n "$b" ] && [ "$got" = "$want" ]; then
    ok "report: alibi at 32 is $want (from $a and $b)"
else
    bad "report: alibi at 32 should be '$want' (from '$a' and '$b'), is '$got'" "$(grep '^| alibi' "$md")"
fi
# the variant with a failed seed still averages the two that finished
has "report: n counts the seeds that finished" "$md" "| kmix | "
grep -E "^\| kmix \|" "$md" | head -1 | grep -q "(n=2)" && ok "report: kmix n=2" || bad "report: kmix n=2" "$(grep '^| kmix' "$md")"

# failed and missing runs, each with its error
has "report: failed run listed" "$md" "| kmix-s3 | kmix | src | 3 | failed | step 3: loss is nan; stopped (set [train] nonfinite) |"
has "report: missing run listed" "$md" "| kmix-s4 | kmix | src | 4 | missing | run directory '$sw/kmix-s4' does not exist |"

# the CSVs
check "results.csv columns" 0 "^corpus,grid,variant,protocol,length,x_train,n,ppl_mean,ppl_std,loss_mean,loss_std,seeds$" head -1 "$out/results.csv"
check "results.csv rows: 2 variants x 2 protocols x 3 lengths" 0 "^13$" bash -c "wc -l <'$out/results.csv'"
check "results.csv: a row" 0 "^src,,alibi,non-overlapping,32,2,2,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,1;2$" cat "$out/results.csv"
check "results.csv: sliding rows" 0 "^src,,kmix,sliding,64,4,2," cat "$out/results.csv"
check "runs.csv: the failed run with its error" 0 "^kmix-s3,kmix,src,,3,failed,,,,,step 3: loss is nan" cat "$out/runs.csv"

# every figure: PNG (when gnuplot is here), with its script and data
figures="ppl-src ppl-src-sliding position-loss-src bias-src-alibi bias-src-kmix mix-src-kmix
         params-src-kmix-term_kerple_r1 params-src-kmix-term_kerple_r2"
for f in $figures; do
    if [ -s "$out/$f.gp" ] && [ -s "$out/$f.dat" ] && grep -Fq "](${f}.png)" "$md"; then
        ok "figure $f: script, data, in the report"
    else
        bad "figure $f: script, data, in the report" "$(ls "$out")"
    fi
    if command -v gnuplot >/dev/null; then
        is_png "$out/$f.png" && ok "figure $f: PNG" || bad "figure $f: PNG"
    fi
done
has "ppl figure: log axes" "$out/ppl-src.gp" "set logscale x 2"
has "ppl figure: a line per variant" "$out/ppl-src.gp" "title 'kmix (n=2"
has "bias figure: a curve per head, each divided by its largest |value|" "$out/bias-src-kmix.gp" "title 'head 1 (/ "
has "bias figure: titled learned for a term with parameters" "$out/bias-src-kmix.gp" "learned bias T_h(d) of kmix"
has "bias figure: titled fixed for ALiBi" "$out/bias-src-alibi.gp" "fixed bias T_h(d) of alibi"
has "ppl figure: a band of -/+ 1 std for n = 2 seeds" "$out/ppl-src.gp" "using 1:3:4 with filledcurves"
has "ppl figure: the training length a dashed line with a label, not a curve" "$out/ppl-src.gp" "set label 'training length"
if grep -q "title 'training length" "$out/ppl-src.gp"; then
    bad "ppl figure: the training length is not in the legend"
else
    ok "ppl figure: the training length is not in the legend"
fi
has "ppl figure: titled with the sweep's name" "$out/ppl-src.gp" "perplexity vs evaluation length (non-overlapping)"
has "position-loss figure: log-x, log-spaced bins" "$out/position-loss-src.gp" "set logscale x"
if command -v gnuplot >/dev/null && gnuplot -e 'print GPVAL_TERMINALS' 2>&1 | grep -q pdfcairo; then
    head -c 4 "$out/ppl-src.pdf" | grep -q '%PDF' && grep -Fq "[PDF](ppl-src.pdf)" "$md" &&
        ok "ppl figure: a PDF beside the PNG, linked from the report" || bad "ppl figure: PDF beside the PNG"
fi
has "mix figure: a line per term" "$out/mix-src-kmix.gp" "title 'kerple'"
has "params figure: KERPLE's r1 over training, a curve per head" "$out/params-src-kmix-term_kerple_r1.gp" "title '[1]'"
has "params figure: the data are metrics.jsonl's values" "$out/params-src-kmix-term_kerple_r1.dat" "$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "params" in r:
        print("%d %.10g" % (r["step"], r["params"]["term.kerple.r1"][0])); break' "$sw/kmix-s1/metrics.jsonl")"
if grep -q "params-src-alibi" "$md"; then bad "params: none for ALiBi (no parameters)"; else ok "params: none for ALiBi (no parameters)"; fi
check "the default output directory" 0 "report: $sw/report/report.md" "$bk" report "$sw"
# --clip: a variant above F x the median at the longest length goes to a panel of its own. F is taken
# from the fixture's own numbers (they follow the corpus, this repository's source text): halfway between
# 1 and the largest non-overlapping perplexity over that median, so at least one variant is above it
check "--clip: a report" 0 "figures: " "$bk" report "$sw" --out "$work/clip"
clip=$(python3 - "$work/clip/results.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["protocol"] == "non-overlapping"]
longest = max(int(r["length"]) for r in rows)
median = statistics.median(float(r["ppl_mean"]) for r in rows if int(r["length"]) == longest)
print("%g" % (1 + 0.5 * (max(float(r["ppl_mean"]) for r in rows) / median - 1)))
PY
)
check "--clip $clip" 0 "figures: " "$bk" report "$sw" --out "$work/clip" --clip "$clip"
has "--clip: the outliers' panel" "$work/clip/ppl-src.gp" "set title 'outliers: above $clip x the median at the longest length'"
has "--clip: small multiples" "$work/clip/ppl-src.gp" "set multiplot layout"
if command -v gnuplot >/dev/null; then is_png "$work/clip/ppl-src.png" && ok "--clip: drawn" || bad "--clip: drawn"; fi
check "--clip must be > 1" 2 "--clip '0.5': expected a number > 1" "$bk" report "$sw" --out "$work/clip" --clip 0.5
check "--clip must be a number" 2 "--clip 'x': expected a number > 1" "$bk" report "$sw" --out "$work/clip" --clip x

# gnuplot missing: the report, the scripts and the data are still written
rm -rf "$work/nognuplot"
check "no gnuplot: still a report" 0 "8 not drawn \(no gnuplot" env PATH=/nonexistent "$bk" report "$sw" --out "$work/nognuplot"
[ -s "$work/nognuplot/ppl-src.gp" ] && [ ! -e "$work/nognuplot/ppl-src.png" ] && ok "no gnuplot: scripts written" ||
    bad "no gnuplot: scripts written" "$(ls "$work/nognuplot")"
has "no gnuplot: the report says how to draw" "$work/nognuplot/report.md" "run \`gnuplot ppl-src.gp\`"

# --- bad input -----------------------------------------------------------------------------------
check "usage: no directory" 2 "expected one sweep directory" "$bk" report
check "help" 0 "usage: biaskit report <sweep dir>" "$bk" report --help
check "help lists report" 0 "^  report +the report of a sweep" "$bk" --help
check "not a directory" 1 "cannot open the sweep directory '$work/none': No such file" "$bk" report "$work/none"
check "a file, not a directory" 1 "'$work/corpus.txt' is not a directory: expected a sweep directory" "$bk" report "$work/corpus.txt"
mkdir -p "$work/empty"
check "no sweep.json" 1 "'$work/empty' is not a sweep directory: it has no sweep.json" "$bk" report "$work/empty"
mkdir -p "$work/bad" && printf '{"runs": [\n  {"name": "a",,}\n]}\n' >"$work/bad/sweep.json"
check "malformed sweep.json names line and column" 1 "$work/bad/sweep.json:2:[0-9]+: malformed JSON" "$bk" report "$work/bad"
printf '{"runs": {}}\n' >"$work/bad/sweep.json"
check "runs not an array" 1 "$work/bad/sweep.json: expected a \"runs\" array" "$bk" report "$work/bad"
printf '{"runs": [{"name": "a", "variant": "v", "corpus": "c", "seed": 1}]}\n' >"$work/bad/sweep.json"
check "a run without dir" 1 "$work/bad/sweep.json: run 1: expected a non-empty string \"dir\"" "$bk" report "$work/bad"
printf '{"lengths": [16, -2], "runs": [{"name": "a", "dir": "a", "variant": "v", "corpus": "c", "seed": 1}]}\n' >"$work/bad/sweep.json"
check "a bad length" 1 "\"lengths\" item 2: expected a positive integer" "$bk" report "$work/bad"
# a malformed eval.json is a run problem, not an error
cp -r "$sw" "$work/sw2" && echo '{"results": [' >"$work/sw2/alibi-s2/eval.json"
check "malformed eval.json: listed" 0 "3 finished, 3 failed" "$bk" report "$work/sw2" --out "$work/out2"
has "malformed eval.json: names the file" "$work/out2/report.md" "| alibi-s2 | alibi | src | 2 | done | $work/sw2/alibi-s2/eval.json:"

# --- the report directory is replaced whole, or not at all --------------------------------------------
# a gnuplot that writes a PNG cut short (as a full disk does) and exits 0: each figure fails, naming it
mkdir -p "$work/fakebin"
printf '#!/bin/sh\nfor a; do s=$a; done\nout=$(sed -n "s/^set output here\\.'"'"'\\(.*\\)'"'"'$/\\1/p" "$s" | head -1)\nd=$(dirname "$s")\nprintf "\\211PNG\\r\\n\\032\\n" >"$d/$out"\nexit 0\n' >"$work/fakebin/gnuplot"
chmod +x "$work/fakebin/gnuplot"
cp "$out/report.md" "$work/report.before"
check "a PNG cut short is a failed figure, not a drawn one" 1 "figures: 0 drawn, 8 failed" \
    env PATH="$work/fakebin:$PATH" "$bk" report "$sw" --out "$out"
has "... the report names it" "$out/report.md" "cut short"
msg=$(env PATH="$work/fakebin:$PATH" "$bk" report "$sw" --out "$out" 2>&1 | grep 'cut short' | head -1)
if [ -n "$msg" ] && ! grep -q '\.tmp-' <<<"$msg" && grep -qF "$(basename "$out")/" <<<"$msg"; then
    ok "... at the path the report lands at, not in its staging directory"
else
    bad "... at the path the report lands at, not in its staging directory" "$msg"
fi
check "no staging directory is left" 0 "^0$" bash -c "ls -A '$(dirname "$out")' | grep -c '^\.$(basename "$out")\.' || true"
# a report killed while it works (a gnuplot that hangs) leaves the old report whole
"$bk" report "$sw" --out "$out" >/dev/null 2>&1
cp "$out/report.md" "$work/report.before" && cp "$out/results.csv" "$work/results.before"
printf '#!/bin/sh\nsleep 30\n' >"$work/fakebin/gnuplot"
env PATH="$work/fakebin:$PATH" "$bk" report "$sw" --out "$out" >/dev/null 2>&1 &
pid=$!
sleep 1
kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null # (a background job ignores SIGINT)
pkill -f "$work/fakebin/gnuplot" 2>/dev/null || true
check "killed: report.md as it was" 0 "" cmp "$out/report.md" "$work/report.before"
check "killed: results.csv as it was" 0 "" cmp "$out/results.csv" "$work/results.before"
check "the next report removes the killed one's staging directory" 0 "^0$" bash -c \
    "'$bk' report '$sw' --out '$out' >/dev/null && ls -A '$(dirname "$out")' | grep -c '^\.$(basename "$out")\.' || true"
# what a report may replace: not the sweep, not a run, not a directory of other files
check "--out the sweep directory is refused" 2 "holds the sweep directory" "$bk" report "$sw" --out "$sw"
check "--out above the sweep directory is refused" 2 "holds the sweep directory" "$bk" report "$sw" --out "$work"
check "--out inside a run is refused" 2 "lies inside the directory of run 'alibi-s1'" "$bk" report "$sw" --out "$sw/alibi-s1/rep"
mkdir -p "$work/mine" && echo keep >"$work/mine/notes.txt"
check "--out a directory of other files is refused" 2 "holds files and no report.md" "$bk" report "$sw" --out "$work/mine"
check "... which stays" 0 "^keep$" cat "$work/mine/notes.txt"
# sweep.json's run directories lie inside the sweep
mkdir -p "$work/sw3" && cp "$sw/sweep.json" "$work/sw3/"
for d in /etc ../other "a/../../b"; do
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["runs"][0]["dir"]=sys.argv[2]; json.dump(j,open(sys.argv[1],"w"))' \
        "$work/sw3/sweep.json" "$d"
    check "a run \"dir\" of '$d' is refused" 1 "\"dir\" '$d': expected a directory inside the sweep directory" \
        "$bk" report "$work/sw3" --out "$work/out3"
done
cp -r "$sw" "$work/sw4" && rm -rf "$work/sw4/alibi-s1" && ln -s "$sw/alibi-s1" "$work/sw4/alibi-s1"
check "a run directory linked outside the sweep is not read" 0 "3 finished, 3 failed" "$bk" report "$work/sw4" --out "$work/out4"
has "... the report says why" "$work/out4/report.md" "leads outside the sweep directory"

# eval.json values biaskit eval cannot write are a run problem naming the file, not averaged
edit_eval() { # DIR PYTHON-EXPRESSION-ON-r (the first result)
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j["results"][0]; exec(sys.argv[2]); json.dump(j,open(sys.argv[1],"w"))' "$1/eval.json" "$2"
}
for case in 'r["loss"]=-0.5;r["ppl"]=0.6065:expected a finite "loss" >= 0 and "ppl" >= 1' \
            'r["ppl"]=r["ppl"]*1.5:"ppl" is not exp("loss")' \
            'j["results"].append(dict(r)):a second result at this length' \
            'j["train_length"]=999:"train_length" is not the sweep'"'"'s training length'; do
    rm -rf "$work/sw5" && cp -r "$sw" "$work/sw5"
    edit_eval "$work/sw5/alibi-s1" "${case%%:*}"
    check "eval.json: ${case#*:}" 0 "3 finished, 3 failed" "$bk" report "$work/sw5" --out "$work/out5"
    has "... the report names the file" "$work/out5/report.md" "$work/sw5/alibi-s1/eval.json: "
done
# names and text that reach report.md and the CSV files: HTML escaped, formulas defused, names refused
rm -rf "$work/sw6" && cp -r "$sw" "$work/sw6"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["runs"][0]["grid"]={"=HYPERLINK(1)": "<script>"}; j["sweep"]="<script>x</script>.toml"; json.dump(j,open(sys.argv[1],"w"))' "$work/sw6/sweep.json"
check "a report with odd text" 0 "report: " "$bk" report "$work/sw6" --out "$work/out6"
check "report.md: HTML in text is escaped" 0 "^### Corpus src, =HYPERLINK\(1\)=&lt;script&gt;$" cat "$work/out6/report.md"
check "report.md: ... and inert in a code span" 0 "^- sweep: \`<script>x</script>\.toml\`, directory" cat "$work/out6/report.md"
check "report.md: no raw HTML outside code spans" 0 "^0$" bash -c "sed 's/\`[^\`]*\`//g' '$work/out6/report.md' | grep -c '<script>' || true"
check "results.csv: a cell that begins with = is defused" 0 "^src,'=HYPERLINK\(1\)=<script>,alibi," cat "$work/out6/results.csv"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["runs"][0]["variant"]="a,<b>"; json.dump(j,open(sys.argv[1],"w"))' "$work/sw6/sweep.json"
check "sweep.json: a variant name a sweep cannot write is refused" 1 "\"variant\" 'a,<b>': expected 1-1000 characters of A-Z a-z 0-9 _ - . \+" \
    "$bk" report "$work/sw6" --out "$work/out6"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
