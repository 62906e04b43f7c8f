#!/usr/bin/env bash
# biaskit sweep: a [[variant]] eval_set (keys given to the evaluation only, as `biaskit eval --set`
# reads them). A tiny RoPE model, two variants: "rope", and "rope-yarn4" (the same terms, evaluated with
# scaling = "yarn", factor = 4). Checks: both runs have the same checkpoint bits (rope-yarn4 shares
# rope's training, and trained alone it gives the same bits); their evaluations differ at 4x the training
# length; sweep.json, status.json, eval.log and the report show the eval_set; a changed eval_set
# evaluates the run again (and a stale one is flagged by the report); the refusals (file:line:column and
# what was expected) of an eval_set that is not an array of strings, a string without '=', and keys
# eval refuses; a refusal that comes only when eval runs fails the run with eval's message.
# usage: test_sweep_eval_set.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$work"' EXIT
unset BIASKIT_PLUGIN_PATH
export OMP_WAIT_POLICY=passive
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

expect() { # NAME COMMAND...: the command succeeds
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}

# A small RoPE model trained enough (40 steps at lr 1e-2) for the scaling to matter at 4x; one thread,
# so that two trainings of one experiment give the same bits.
tiny='"model.layers=1", "model.heads=2", "model.dim=16", "train.length=16", "train.batch=4", "train.steps=40",
       "train.warmup=2", "train.lr=1e-2", "train.eval_every=0", "train.eval_batches=1", "train.log_every=10",
       "data.max_bytes=120000", "run.threads=1", "run.device=\"cpu\""'
cat >"$work/es.toml" <<EOF
base = "$src/examples/demo_alibi.toml"

[sweep]
out_dir = "out"
seeds = [1]
set = [$tiny]

[eval]
multiples = [1, 4]
sliding = 8
tokens = 2048

[[variant]]
name = "rope"
term = [{plugin = "rope"}]

[[variant]]
name = "rope-yarn4"
term = [{plugin = "rope"}]
eval_set = ["term.0.scaling=\"yarn\"", "term.0.factor=4"]
EOF
d=$work/out
a=$d/rope-include-s1 b=$d/rope-yarn4-include-s1

# loss RUN_DIR LENGTH: the loss eval.json gives at that length
loss() { grep -E "\"length\": $2," "$1/eval.json" | sed -E 's/.*"loss": ([0-9.]+),.*/\1/'; }
# tensors FILE: the tensor bytes of a safetensors file (after its 8-byte length and its JSON header,
# which holds the run's own paths), as a checksum
tensors() {
    local h
    h=$(od -An -t u8 -N8 "$1" | tr -d ' ')
    tail -c +$((9 + h)) "$1" | cksum
}

# --- help, --dry-run --------------------------------------------------------------------------------
check "help: eval_set is a variant key" 0 "eval_set = \[.*keys given to the evaluation" "$bk" sweep --help
out=$(cd "$work" && "$bk" sweep es.toml --dry-run 2>&1)
expect "dry run: the eval_set is listed" grep -q '^    eval: term.0.scaling="yarn"$' <<<"$out"
expect "dry run: ... in order" grep -q 'eval: term.0.scaling="yarn" *    eval: term.0.factor=4 ' <<<"$(tr '\n' ' ' <<<"$out")"
expect "dry run: rope-yarn4 shares rope's training" grep -q "^    training: rope-include-s1's (the same experiment" <<<"$out"
expect "dry run: 2 runs, 1 training" grep -q "^2 runs, 1 distinct trainings (1 run shares" <<<"$out"
expect "dry run: the same experiment text" test "$(grep -c '^    term=\[{plugin = "rope"}\]$' <<<"$out")" -eq 2

# --- the sweep -----------------------------------------------------------------------------------------
out=$("$bk" sweep "$work/es.toml" --jobs 2 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "^sweep: 2 runs: 2 done (0 before this sweep), 0 failed$" <<<"$out"; then ok "sweep: 2 runs done"; else
    bad "sweep (exit $rc)" "$out"; fi
expect "rope-yarn4 does not train: it shares rope's training" \
    grep -q "rope-yarn4-include-s1: the same experiment as rope-include-s1: its training is shared; evaluating" <<<"$out"
expect "... its train.log says so" grep -q "the same experiment as run 'rope-include-s1'" "$b/train.log"
expect "... the same experiment.toml" cmp -s "$a/experiment.toml" "$b/experiment.toml"
expect "... the same checkpoint bits" cmp -s "$a/checkpoint.safetensors" "$b/checkpoint.safetensors"
expect "... a copy of its metrics.jsonl" cmp -s "$a/metrics.jsonl" "$b/metrics.jsonl"
expect "eval.log: the eval_set is given to eval" grep -q -- '--set term.0.scaling="yarn" --set term.0.factor=4 --set run.threads=1$' "$b/eval.log"
expect "eval.log: eval applied it" grep -q "plugin rope: scaling yarn (s = 4), original_length 16" "$b/eval.log"
expect "eval.log: the sliding evaluation too" grep -q -- '--sliding 8 --set term.0.scaling="yarn" --set term.0.factor=4 ' "$b/eval.log"
expect "eval-sliding.json is written" test -s "$b/eval-sliding.json"
if grep -q "info: plugin" <<<"$out"; then bad "the sweep's own output: no plugin info lines" "$out"; else
    ok "the sweep's own output: no plugin info lines (they are the run's, in its eval.log)"; fi
if grep -q "scaling" "$a/eval.log"; then bad "rope's eval.log names no scaling" "$(cat "$a/eval.log")"; else ok "rope's eval.log names no scaling"; fi
l1=$(loss "$a" 64) l2=$(loss "$b" 64)
if [ -n "$l1" ] && [ -n "$l2" ] && [ "$l1" != "$l2" ]; then ok "the evaluations differ at 4x ($l1 plain, $l2 yarn)"; else
    bad "the evaluations differ at 4x (rope '$l1', rope-yarn4 '$l2')"; fi
sj=$(tr -d ' \t\n' <"$d/sweep.json" | sed 's/{"name"/\n{"name"/g') # a line per run
expect "sweep.json: the run's eval_set" \
    grep -q '^{"name":"rope-yarn4-include-s1",.*,"eval_set":\["term.0.scaling=\\"yarn\\"","term.0.factor=4"\]}' <<<"$sj"
expect "sweep.json: none for rope" bash -c "grep '^{\"name\":\"rope-include-s1\"' | grep -vq eval_set" <<<"$sj"
expect "status.json: the eval_set its evaluation used" \
    grep -q '^{"state":"done",.*"eval_set":\["term.0.scaling=\\"yarn\\"","term.0.factor=4"\]}$' "$b/status.json"
expect "status.json: none for rope" bash -c "! grep -q eval_set '$a/status.json'"

# Trained alone (its twin not trained: not selected, in a new sweep directory), rope-yarn4 trains, and
# gives the same bits as rope.
sed -e 's/^out_dir = "out"/out_dir = "alone"/' "$work/es.toml" >"$work/alone.toml"
check "trained alone: rope-yarn4 trains" 0 "rope-yarn4-include-s1: training" "$bk" sweep "$work/alone.toml" --only 'rope-yarn4-*'
expect "... itself" bash -c "! grep -q 'the same experiment' '$work/alone/rope-yarn4-include-s1/train.log'"
s1=$(tensors "$a/checkpoint.safetensors") s2=$(tensors "$work/alone/rope-yarn4-include-s1/checkpoint.safetensors")
if [ "$s1" = "$s2" ]; then ok "trained alone: the same tensor bits as rope"; else bad "trained alone: the same tensor bits as rope ($s1 vs $s2)"; fi
expect "trained alone: the same evaluation" test "$(loss "$b" 64)" = "$(loss "$work/alone/rope-yarn4-include-s1" 64)"

# --- the report ----------------------------------------------------------------------------------------
check "report" 0 "^report: " "$bk" report "$d"
expect "report: the variant is labelled with its eval_set" \
    grep -q '^- variants: rope, rope-yarn4 (evaluated with `term.0.scaling="yarn"`, `term.0.factor=4`)$' "$d/report/report.md"
expect "report: its own row in the table" grep -q "^| rope-yarn4 | " "$d/report/report.md"
expect "report: no note on the options eval_set changed" bash -c "! grep -q 'checkpoint: .*term.0.scaling' '$d/report/report.md'"

# --- a changed eval_set evaluates the run again; the report flags a stale one ----------------------------
sed -i 's/"term.0.factor=4"/"term.0.factor=8"/' "$work/es.toml"
check "dry run: a changed eval_set is shown" 0 "^rope-yarn4-include-s1  \[done\]  \(evaluated with another eval_set" \
    "$bk" sweep "$work/es.toml" --dry-run
check "report: a run evaluated with another eval_set is stale" 0 "runs: 2, 1 finished" bash -c \
    "cd '$work' && '$bk' sweep es.toml --dry-run >/dev/null && sed -i 's/\"term.0.factor=4\"/\"term.0.factor=2\"/' out/sweep.json && '$bk' report out"
expect "... with why" grep -q "evaluated with eval_set .*term.0.factor=4.*, but its variant now gives .*term.0.factor=2" "$d/report/report.md"
out=$("$bk" sweep "$work/es.toml" 2>&1)
expect "a changed eval_set: only that run, evaluated again" grep -q "1 already done, skipped; 1 to run" <<<"$out"
expect "... not trained again" grep -q "rope-yarn4-include-s1: trained before; evaluating again (its variant's eval_set changed)" <<<"$out"
expect "... its status records the new one" grep -q '"eval_set":\["term.0.scaling=\\"yarn\\"","term.0.factor=8"\]' "$b/status.json"
expect "... and eval used it" grep -q "scaling yarn (s = 8)" "$b/eval.log"
l3=$(loss "$b" 64)
if [ -n "$l3" ] && [ "$l3" != "$l2" ]; then ok "... another loss at 4x ($l2 -> $l3)"; else bad "... another loss at 4x ($l2 -> '$l3')"; fi
check "then nothing to do" 0 "2 already done, skipped; 0 to run" "$bk" sweep "$work/es.toml"

# --only the eval_set run, its twin done before: it shares the twin's checkpoint
rm -rf "$b"
check "--only: a twin done before is shared" 0 "rope-yarn4-include-s1: the same experiment as rope-include-s1: its training is shared" \
    "$bk" sweep "$work/es.toml" --only 'rope-yarn4-*'
expect "... the same checkpoint" cmp -s "$a/checkpoint.safetensors" "$b/checkpoint.safetensors"

# --- refusals: FILE:LINE:COLUMN and what was expected; nothing written -------------------------------
# badset NAME EVAL_SET PATTERN: a variant with this eval_set is refused (exit 1) with PATTERN
badset() {
    printf 'base = "%s"\n[sweep]\nout_dir = "bad-out"\nset = [%s]\n[[variant]]\nname = "r"\nterm = [{plugin = "rope"}]\neval_set = %s\n' \
        "$src/examples/demo_alibi.toml" "$tiny" "$2" >"$work/bad.toml"
    check "$1" 1 "$3" bash -c "cd '$work' && '$bk' sweep bad.toml --dry-run"
}
badset "not an array" '"term.0.factor=4"' \
    "^biaskit: error: bad.toml:10:12: variant 'r' eval_set: expected an array of \"key=value\" strings, as \`biaskit eval --set\` reads them .*, got string$"
badset "not strings" '[4]' "^biaskit: error: bad.toml:10:13: variant 'r' eval_set: expected an array of \"key=value\" strings.*, got integer$"
badset "a string without '='" '["term.0.scaling=\"pi\"", "term.0.factor"]' \
    "^biaskit: error: bad.toml:10:38: variant 'r' eval_set 'term.0.factor': expected \"key=value\", as \`biaskit eval --set\` reads it"
badset "a key of the model" '["model.heads=4"]' \
    "^biaskit: error: bad.toml:10:13: run 'r-include-s1', variant 'r' eval_set, 'model.heads=4': it changes \[model\] heads \(2 when trained, 4 when evaluated\), which \`biaskit eval --set\` refuses: it would change the model's shape"
badset "the term's plugin" '["term.0.plugin=\"alibi\""]' "bad.toml:10:13: .*it changes \[\[term\]\] #1 plugin .*\`biaskit eval --set\` refuses"
badset "the term list" '["term=[]"]' "bad.toml:10:13: .*it changes the \[\[term\]\] list .*refuses"
badset "a [train] key (eval does not train)" '["train.lr=0.5"]' "bad.toml:10:13: .*it changes \[train\] lr .*refuses: eval, bias and erf do not train"
badset "the training length (a fact)" '["train.length=64"]' "bad.toml:10:13: .*\[train\] length .*a fact of how its model was trained .*; eval --lengths evaluates at other lengths"
badset "an unknown section" '["trian.lr=1"]' "^biaskit: error: bad.toml:10:13: run 'r-include-s1', variant 'r' eval_set, 'trian.lr=1': unknown section 'trian' \(did you mean 'train'\?\)"
badset "a term that is not there" '["term.1.factor=4"]' "bad.toml:10:13: .*'term.1.factor=4': index 1 is out of range"
# the plugin refuses its option: the run cannot run (listed by --dry-run, exit 1), naming the string
badset "the plugin refuses the value" '["term.0.scaling=\"pi\"", "term.0.factor=0.5"]' \
    "^    cannot train: bad.toml:10:38: run 'r-include-s1', variant 'r' eval_set, 'term.0.factor=0.5': .*option 'factor': expected a scale factor s >= 1"
badset "the plugin refuses a typo" '["term.0.scalin=\"pi\""]' "^    cannot train: bad.toml:10:13: .*unknown key 'scalin' \(did you mean 'scaling'\?\)"
printf 'base = "%s"\n[[corpus]]\nname = "c"\neval_set = ["run.threads=1"]\n' "$src/examples/demo_alibi.toml" >"$work/bad.toml"
check "eval_set in a corpus" 1 "^biaskit: error: bad.toml:4:1: corpus 'c': a corpus gives data settings; eval_set .* belongs in \[\[variant\]\]" \
    bash -c "cd '$work' && '$bk' sweep bad.toml --dry-run"
# when run, a run whose eval_set the plugin refuses fails alone, before training; the others run
printf 'base = "%s"\n[sweep]\nout_dir = "bad-out"\nset = [%s]\n[eval]\nlengths = [16]\ntokens = 512\n[[variant]]\nname = "r"\nterm = [{plugin = "rope"}]\neval_set = ["term.0.scaling=\\"pi\\"", "term.0.factor=0.5"]\n[[variant]]\nname = "ok"\nterm = [{plugin = "rope"}]\n' \
    "$src/examples/demo_alibi.toml" "$tiny" >"$work/bad.toml"
out=$(cd "$work" && "$bk" sweep bad.toml 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "^sweep: 2 runs: 1 done (0 before this sweep), 1 failed$" <<<"$out" &&
    grep -q "^  FAILED r-include-s1: bad.toml:13:38: run 'r-include-s1', variant 'r' eval_set, 'term.0.factor=0.5': .*expected a scale factor" <<<"$out"; then
    ok "a refused eval_set fails its run alone, naming the string"
else
    bad "a refused eval_set fails its run alone (exit $rc)" "$out"
fi
expect "... before training" test ! -e "$work/bad-out/r-include-s1/checkpoint.safetensors"

# A refusal that comes only when eval runs: the run trains, then fails with eval's message (the
# relative data path read from the sweep file's directory, as in the variant's other settings).
printf 'base = "%s"\n[sweep]\nout_dir = "late"\nset = [%s]\n[eval]\nlengths = [16]\ntokens = 512\n[[variant]]\nname = "r"\nterm = [{plugin = "rope"}]\neval_set = ["data.paths=[\\"no/such\\"]"]\n' \
    "$src/examples/demo_alibi.toml" "$tiny" >"$work/late.toml"
check "eval's refusal at run time fails the run with eval's message" 1 \
    "FAILED r-include-s1: eval: data path '$work/no/such' does not exist" "$bk" sweep "$work/late.toml"
expect "... after training" test -s "$work/late/r-include-s1/checkpoint.safetensors"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
