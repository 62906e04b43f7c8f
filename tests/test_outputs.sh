#!/usr/bin/env bash
# The files the commands write (util/output.h): an output that names an input is refused and the input
# stays byte for byte; outputs are written atomically (temporary file + rename), every write checked
# (a full device, a file-size limit, standard output on a full device: exit 1, no truncated file, no
# temporary file left); train --out through a symbolic link to another run, '' or a regular file.
# usage: test_outputs.sh <biaskit binary> <source dir>
set -u
bk=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
real=$(cd "$work" && pwd -P)

# unchanged NAME FILE COPY: FILE is byte-identical to COPY (restored from it when not, so that one
# failure does not spread to the checks after it)
unchanged() {
    check "$1: the input is unchanged" 0 "" cmp "$2" "$3"
    cmp -s "$2" "$3" || { rm -f "$2" && cp "$3" "$2"; }
}
# no_temporaries NAME DIR: no temporary file of an output is left in DIR
no_temporaries() { check "$1: no temporary file left" 0 "^0$" bash -c "ls -A '$2' | grep -c '\.tmp' || true"; }

# a tiny model, trained as test_cli.sh does (alibi is a built-in plugin)
mkdir -p "$work/corpus"
head -c 20000 "$src/README.md" >"$work/corpus/text.txt"
while [ "$(wc -c <"$work/corpus/text.txt")" -lt 20000 ]; do cat "$src/README.md" >>"$work/corpus/text.txt"; done
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 2\nwarmup = 1\nlog_every = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' \
    >"$work/exp.toml"
if ! out=$("$bk" train "$work/exp.toml" --out "$work/run" --plain 2>&1); then
    bad "fixture: train a tiny model" "$out"
    echo "test_outputs: $passed passed, $failures failed"
    exit 1
fi
ck=$work/run/checkpoint.safetensors
cp "$ck" "$work/ck.orig"
cp "$work/exp.toml" "$work/exp.orig"
cp "$work/corpus/text.txt" "$work/text.orig"
ev=("$bk" eval "$ck" --lengths 16 --tokens 2000)

# ---- an output that is an input: refused (exit 2) naming the flag and both files; the input unchanged ----
for flag in csv json positions; do
    check "eval --$flag onto the checkpoint is refused" 2 \
        "error: --$flag '$ck' is the checkpoint '$ck' \(an input of this command\)" "${ev[@]}" --$flag "$ck"
    unchanged "eval --$flag onto the checkpoint" "$ck" "$work/ck.orig"
done
ln -s "$ck" "$work/link.csv"
check "eval --csv onto a symbolic link to the checkpoint is refused" 2 \
    "error: --csv '$work/link.csv' is the checkpoint '$ck' \(an input of this command\)" "${ev[@]}" --csv "$work/link.csv"
unchanged "eval --csv onto a symbolic link to the checkpoint" "$ck" "$work/ck.orig"
check "... and the link stays a link" 0 "" test -L "$work/link.csv"
ln "$ck" "$work/hard.json"
check "eval --json onto a hard link of the checkpoint is refused" 2 \
    "error: --json '$work/hard.json' is the checkpoint '$ck' \(an input of this command\)" "${ev[@]}" --json "$work/hard.json"
unchanged "eval --json onto a hard link of the checkpoint" "$ck" "$work/ck.orig"
check "eval --positions onto the data file given with --data is refused" 2 \
    "error: --positions '$work/corpus/text.txt' is the data path '$work/corpus/text.txt'" \
    "${ev[@]}" --data "$work/corpus/text.txt" --positions "$work/corpus/text.txt"
unchanged "eval --positions onto a data file" "$work/corpus/text.txt" "$work/text.orig"
check "eval --csv into the experiment's data directory is refused (it would be read as data)" 2 \
    "error: --csv '$work/corpus/ppl.csv' lies in the data path '$real/corpus', whose files .* are this command's data" \
    "${ev[@]}" --csv "$work/corpus/ppl.csv"
check "... and nothing is written there" 1 "" test -e "$work/corpus/ppl.csv"
check "eval: two outputs naming one file are refused" 2 "error: --json '$work/same' is the same file as --csv '$work/same'" \
    "${ev[@]}" --csv "$work/same" --json "$work/same"
check "bias --csv onto the experiment file is refused" 2 \
    "error: --csv '$work/exp.toml' is the experiment file '$work/exp.toml' \(an input of this command\)" \
    "$bk" bias "$work/exp.toml" --length 4 --csv "$work/exp.toml"
unchanged "bias --csv onto the experiment file" "$work/exp.toml" "$work/exp.orig"
check "bias --csv onto the checkpoint is refused" 2 "error: --csv '$ck' is the checkpoint '$ck'" \
    "$bk" bias "$ck" --length 4 --csv "$ck"
unchanged "bias --csv onto the checkpoint" "$ck" "$work/ck.orig"
check "trf --csv onto the experiment file is refused" 2 "error: --csv '$work/exp.toml' is the experiment file" \
    "$bk" trf "$work/exp.toml" --windows 8,16 --csv "$work/exp.toml"
unchanged "trf --csv onto the experiment file" "$work/exp.toml" "$work/exp.orig"
ln -s "$work/exp.toml" "$work/exp.dat"
check "trf --plot whose .dat is the experiment file is refused" 2 \
    "error: --plot '$work/exp.png' writes '$work/exp.dat', which is the experiment file '$work/exp.toml'" \
    "$bk" trf "$work/exp.toml" --windows 8,16 --plot "$work/exp.png"
unchanged "trf --plot onto the experiment file" "$work/exp.toml" "$work/exp.orig"
check "erf --csv onto the checkpoint is refused" 2 "error: --csv '$ck' is the checkpoint '$ck'" \
    "$bk" erf "$ck" --sequences 2 --csv "$ck"
unchanged "erf --csv onto the checkpoint" "$ck" "$work/ck.orig"
check "an empty output path is a usage error" 2 "error: --csv: expected a file name \('-' for standard output\), got an empty string" \
    "${ev[@]}" --csv ""
check "a directory as output is refused" 2 "error: --json '$work/corpus' is a directory; expected a file" \
    "${ev[@]}" --json "$work/corpus"

# ---- written atomically: a new file, a replaced file (its mode kept), through a symbolic link ----
mkdir -p "$work/out"
check "eval --csv writes the file" 0 "^16,16,[0-9]+,[0-9]+," \
    bash -c "'$bk' eval '$ck' --lengths 16 --tokens 2000 --csv '$work/out/ppl.csv' >/dev/null && cat '$work/out/ppl.csv'"
no_temporaries "eval --csv" "$work/out"
printf 'old\n' >"$work/out/ppl.csv" && chmod 600 "$work/out/ppl.csv"
check "eval --csv replaces an existing file" 0 "^length,train_length" bash -c "'$bk' eval '$ck' --lengths 16 --tokens 2000 --csv '$work/out/ppl.csv' >/dev/null && cat '$work/out/ppl.csv'"
check "... keeping its mode" 0 "^600$" stat -c %a "$work/out/ppl.csv"
: >"$work/out/target.json" && ln -s target.json "$work/out/link.json"
check "eval --json through a symbolic link writes its target" 0 "^\{\"checkpoint\": " \
    bash -c "'$bk' eval '$ck' --lengths 16 --tokens 2000 --json '$work/out/link.json' >/dev/null && cat '$work/out/target.json'"
check "... and the link stays a link" 0 "" test -L "$work/out/link.json"
no_temporaries "eval --json through a link" "$work/out"
check "eval --json names a path with a quote as valid JSON" 0 "^ok$" bash -c \
    "mkdir -p '$work/q\"d' && cp '$ck' '$work/q\"d/c.safetensors' && '$bk' eval '$work/q\"d/c.safetensors' --lengths 16 --tokens 2000 --json - \
     | python3 -c 'import json,sys; d=json.load(sys.stdin); print(\"ok\" if d[\"checkpoint\"].endswith(\"q\\\"d/c.safetensors\") else d)'"

# ---- every write checked: a full device, standard output on a full device, a file-size limit ----
for flag in csv json positions; do
    check "eval --$flag /dev/full fails" 1 "error: cannot write --$flag '/dev/full': No space left on device" \
        "${ev[@]}" --$flag /dev/full
    check "eval --$flag - on a full standard output fails" 1 "error: cannot write --$flag to standard output: No space left on device" \
        bash -c "'$bk' eval '$ck' --lengths 16 --tokens 2000 --$flag - >/dev/full"
done
check "bias --csv /dev/full fails" 1 "error: cannot write --csv '/dev/full': No space left on device" \
    "$bk" bias "$work/exp.toml" --length 4 --csv /dev/full
check "bias --csv - on a full standard output fails" 1 "error: cannot write --csv to standard output: No space left on device" \
    bash -c "'$bk' bias '$work/exp.toml' --length 4 --csv - >/dev/full"
check "trf --csv /dev/full fails" 1 "error: cannot write --csv '/dev/full': No space left on device" \
    "$bk" trf "$work/exp.toml" --windows 8,16 --csv /dev/full
check "erf --csv /dev/full fails" 1 "error: cannot write --csv '/dev/full': No space left on device" \
    "$bk" erf "$ck" --sequences 2 --csv /dev/full
check "a device is written directly: /dev/null" 0 "^ +length +x train" "${ev[@]}" --csv /dev/null
mkfifo "$work/fifo"
check "a FIFO no process reads is refused, not waited on" 1 "error: cannot write --csv '$work/fifo': no process reads this FIFO" \
    timeout 60 "${ev[@]}" --csv "$work/fifo"
check "a pipe that a process reads is written (process substitution)" 0 "^length,train_length" \
    bash -c "'$bk' eval '$ck' --lengths 16 --tokens 2000 --csv >(cat >'$work/piped.csv') >/dev/null; sleep 0.5; cat '$work/piped.csv'"

# a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail with EFBIG): exit 1, and no
# truncated JSON: a new file is not created, an existing one keeps its old bytes
big=("$bk" eval "$ck" --lengths 16,32,64,128,256 --tokens 4000)
mkdir -p "$work/lim"
(trap '' XFSZ; ulimit -f 2; exec "${big[@]}" --json "$work/lim/new.json") >"$work/lim.log" 2>&1
check "ulimit -f: eval --json fails" 0 "^1$" echo $?
check "ulimit -f: the error names the file and the cause" 0 "error: cannot write --json '$work/lim/new.json'.*File too large" \
    cat "$work/lim.log"
check "ulimit -f: no truncated JSON is left" 1 "" test -e "$work/lim/new.json"
printf '{"old": true}\n' >"$work/lim/old.json" && cp "$work/lim/old.json" "$work/lim/old.orig"
check "ulimit -f: replacing a file fails" 1 "cannot write --json '$work/lim/old.json'.*File too large" \
    bash -c "trap '' XFSZ; ulimit -f 2; exec ${big[*]} --json '$work/lim/old.json'"
check "ulimit -f: the old file is intact" 0 "" cmp "$work/lim/old.json" "$work/lim/old.orig"
no_temporaries "ulimit -f" "$work/lim"
check "ulimit -f: bias --csv fails too" 1 "cannot write --csv '$work/lim/t.csv'.*File too large" \
    bash -c "trap '' XFSZ; ulimit -f 1; exec '$bk' bias '$work/exp.toml' --length 256 --csv '$work/lim/t.csv'"
check "ulimit -f: ... leaving nothing" 1 "" test -e "$work/lim/t.csv"
no_temporaries "ulimit -f (bias)" "$work/lim"

# ---- train --out: a symbolic link to another run, '', a regular file ----
mkdir -p "$work/runs"
"$bk" train "$work/exp.toml" --out "$work/runs/A" --set train.steps=3 --plain >/dev/null 2>&1 # not what a 2-step run writes
cp "$work/runs/A/checkpoint.safetensors" "$work/A.ckpt" && cp "$work/runs/A/metrics.jsonl" "$work/A.metrics"
ln -s A "$work/runs/B"
check "train --out: a symbolic link to another run is refused" 1 \
    "error: --out '$work/runs/B' is a symbolic link to '$real/runs/A', which holds another run \(checkpoint\.safetensors\)" \
    "$bk" train "$work/exp.toml" --out "$work/runs/B" --plain
check "train --out link: the other run's checkpoint is unchanged" 0 "" cmp "$work/runs/A/checkpoint.safetensors" "$work/A.ckpt"
check "train --out link: ... and its metrics" 0 "" cmp "$work/runs/A/metrics.jsonl" "$work/A.metrics"
"$bk" train "$work/exp.toml" --out "$work/runs/C" --plain >/dev/null 2>&1
check "train --resume C --out link to A: refused" 1 "error: --out '$work/runs/B' is a symbolic link to '$real/runs/A', which holds another run" \
    "$bk" train --resume "$work/runs/C/checkpoint.safetensors" --out "$work/runs/B" --set train.steps=3 --plain
check "train --resume C --out link to A: A unchanged" 0 "" cmp "$work/runs/A/checkpoint.safetensors" "$work/A.ckpt"
check "train --resume through a link to its own directory continues it" 0 "done: 4 steps" \
    "$bk" train --resume "$work/runs/B/checkpoint.safetensors" --set train.steps=4 --plain
mkdir -p "$work/runs/empty" && ln -s empty "$work/runs/E"
check "train --out: a symbolic link to an empty directory writes there, named by its real path" 0 "^writing $real/runs/empty$" \
    "$bk" train "$work/exp.toml" --out "$work/runs/E" --plain
mkdir -p "$work/cwd"
check "train --out '' is a usage error" 2 "error: --out: expected a directory, got an empty string" \
    bash -c "cd '$work/cwd' && exec '$bk' train '$work/exp.toml' --out '' --plain"
check "train --out '': nothing is written in the working directory" 0 "^0$" bash -c "ls -A '$work/cwd' | wc -l"
printf 'notes\n' >"$work/notes.txt" && cp "$work/notes.txt" "$work/notes.orig"
check "train --out a regular file is refused" 1 \
    "error: cannot create the run directory '$work/notes.txt': '$work/notes.txt' is not a directory \(it is a regular file\)" \
    "$bk" train "$work/exp.toml" --out "$work/notes.txt" --plain
unchanged "train --out a regular file" "$work/notes.txt" "$work/notes.orig"
check "train --out the checkpoint file is refused" 1 "'$ck' is not a directory \(it is a regular file\)" \
    "$bk" train "$work/exp.toml" --out "$ck" --plain
unchanged "train --out the checkpoint file" "$ck" "$work/ck.orig"

# ---- every command's outputs against all of its inputs (not only eval's) ----
cp -r "$work/corpus" "$work/corpus.orig"
check "params --csv onto a training file is refused" 2 \
    "error: --csv '$work/corpus/text.txt' lies in the data path '$real/corpus'" \
    "$bk" params "$ck" --csv "$work/corpus/text.txt"
unchanged "params --csv onto a training file" "$work/corpus/text.txt" "$work/text.orig"
check "params --json into the data directory is refused" 2 "error: --json '$work/corpus/p.txt' lies in the data path" \
    "$bk" params "$ck" --json "$work/corpus/p.txt"
check "params --csv onto the checkpoint's experiment file is refused" 2 \
    "error: --csv '$work/exp.toml' is the experiment file" "$bk" params "$ck" --csv "$work/exp.toml"
unchanged "params --csv onto the experiment file" "$work/exp.toml" "$work/exp.orig"
check "bias --csv into the data directory is refused" 2 "error: --csv '$work/corpus/b.txt' lies in the data path" \
    "$bk" bias "$work/exp.toml" --csv "$work/corpus/b.txt"
check "bias --csv (a checkpoint) onto a training file is refused" 2 "error: --csv '$work/corpus/text.txt' lies in the data path" \
    "$bk" bias "$ck" --csv "$work/corpus/text.txt"
unchanged "bias --csv onto a training file" "$work/corpus/text.txt" "$work/text.orig"
check "trf --csv onto a training file is refused" 2 "error: --csv '$work/corpus/text.txt' lies in the data path" \
    "$bk" trf "$work/exp.toml" --csv "$work/corpus/text.txt"
check "erf --csv onto the experiment file is refused" 2 "error: --csv '$work/exp.toml' is the experiment file" \
    "$bk" erf "$ck" --csv "$work/exp.toml"
check "passkey --json onto a training file is refused" 2 "error: --json '$work/corpus/text.txt' lies in the data path" \
    "$bk" passkey "$ck" --lengths 128 --trials 1 --json "$work/corpus/text.txt"
unchanged "passkey --json onto a training file" "$work/corpus/text.txt" "$work/text.orig"
check "the data directory holds only its file" 0 "" diff -r "$work/corpus" "$work/corpus.orig"

# passkey --write-samples: samples carry no mark, so an existing file is never replaced without --force,
# and a checkpoint or a shared object not even with it
plug=$(dirname "$bk")/plugins
so=$(ls "$plug"/*.so 2>/dev/null | head -1)
for target in "$ck" "$work/exp.toml" "$work/corpus/text.txt" "$work/link.csv"; do
    cp "$target" "$work/target.orig"
    check "passkey --write-samples onto '$(basename "$target")' is refused" 2 \
        "error: --write-samples '$target': the file exists; .*give --force to replace it" \
        "$bk" passkey --write-samples "$target" --length 128 --samples 2
    unchanged "passkey --write-samples onto '$(basename "$target")'" "$target" "$work/target.orig"
done
check "passkey --write-samples --force onto the checkpoint is refused" 2 "is a checkpoint; not replaced, even under --force" \
    "$bk" passkey --write-samples "$ck" --length 128 --samples 2 --force
check "passkey --write-samples --force through a link to the checkpoint is refused" 2 "is a checkpoint; not replaced" \
    "$bk" passkey --write-samples "$work/link.csv" --length 128 --samples 2 --force
unchanged "passkey --write-samples --force onto the checkpoint" "$ck" "$work/ck.orig"
if [ -n "$so" ]; then
    cp "$so" "$work/plugin.so" && cp "$so" "$work/plugin.orig"
    check "passkey --write-samples --force onto a plugin is refused" 2 "is a shared object .*; not replaced" \
        "$bk" passkey --write-samples "$work/plugin.so" --length 128 --samples 2 --force
    unchanged "passkey --write-samples --force onto a plugin" "$work/plugin.so" "$work/plugin.orig"
fi
"$bk" passkey --write-samples "$work/samples.txt" --length 128 --samples 2 >/dev/null
check "passkey --write-samples --force replaces its own samples" 0 "^wrote 3 passkey samples" \
    "$bk" passkey --write-samples "$work/samples.txt" --length 128 --samples 3 --force
check "... which now hold 3 samples" 0 "^384$" bash -c "wc -c <'$work/samples.txt'"

# a run directory inside a data directory of its experiment: the next training would read it as data
check "train --out inside the data directory is refused" 2 \
    "error: --out '$work/corpus/run' lies inside the data directory '$real/corpus' \(\[data\] paths\)" \
    "$bk" train "$work/exp.toml" --out "$work/corpus/run" --plain
check "... and nothing is made there" 0 "" diff -r "$work/corpus" "$work/corpus.orig"
ln -s "$work/corpus" "$work/corpus-link"
check "train --out through a link into the data directory is refused" 2 "lies inside the data directory" \
    "$bk" train "$work/exp.toml" --out "$work/corpus-link/run" --plain
printf '[run]\nout_dir = "corpus/r"\n' | cat "$work/exp.toml" - >"$work/exp-od.toml"
check "[run] out_dir inside the data directory is refused" 2 "error: \[run\] out_dir '.*corpus/r' lies inside the data directory" \
    "$bk" train "$work/exp-od.toml" --plain

# ---- the help texts say so ----
check "eval --help: outputs are atomic and never an input" 0 "written atomically" "$bk" eval --help
check "bias --help: likewise" 0 "written atomically" "$bk" bias --help
check "train --help: a symbolic link to another run" 0 "symbolic link" "$bk" train --help

echo "test_outputs: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
