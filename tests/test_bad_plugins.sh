#!/usr/bin/env bash
# Shared objects that misbehave before or while the engine talks to them (tests/plugins/hostile.c: a
# constructor that aborts, exits or hangs; an entry symbol that is data; an entry point that returns
# garbage, aborts or hangs; an unreadable descriptor), a truncated copy of a real plugin, a FIFO named
# like a plugin, and create() that crashes, exits or hangs (tests/plugins/checkbad.c): `check`,
# `plugins`, `config`, `bias`, `train` and `eval` must each fail with exit status 1 and a message
# naming the file, the stage and what happened, within the time limit, never die with the plugin or
# block for ever.
# usage: test_bad_plugins.sh <biaskit binary> <test plugin dir> <hostile plugin dir> <built-in plugin dir>
set -u
bk=$(realpath "$1") testplugins=$(realpath "$2") hostile=$(realpath "$3") builtin=$(realpath "$4")
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
unset BIASKIT_PLUGIN_PATH

# within SECONDS NAME EXPECTED_EXIT PATTERN COMMAND...: check, and the command took less than SECONDS
# (wall time; the command runs under `timeout 60` so that a hang fails instead of stopping the test).
within() {
    local limit=$1 name=$2
    shift 2
    local start=$SECONDS
    check "$name" "$@"
    local took=$((SECONDS - start))
    if [ "$took" -ge "$limit" ]; then
        bad "$name: took $took s, expected less than $limit s"
    else
        ok "$name: $took s (< $limit s)"
    fi
}

# The bad files, where no other test looks; a truncated copy of alibi (dlopen maps past its end: SIGBUS
# here), a FIFO named like a plugin (a dlopen of it would block until someone writes it).
mkdir -p "$work/bad"
cp "$hostile"/biaskit_*.so "$work/bad/"
head -c 8192 "$builtin/biaskit_alibi.so" >"$work/bad/biaskit_trunc.so"
mkfifo "$work/bad/biaskit_x.so"
T="timeout 60"

# ---- biaskit check: one FAIL line naming the stage, exit 1, nothing run in the checking process ----
check "check: abort() in a constructor" 1 \
    "^FAIL  plugin file '.*/biaskit_ctor_abort\.so', in dlopen\(\) \(mapping the library and running its constructors\): the plugin code crashed with signal 6 \(SIGABRT" \
    $T "$bk" check "$work/bad/biaskit_ctor_abort.so"
check "check: exit(0) in a constructor is a failure, not 'no check failed'" 1 \
    "^FAIL  plugin file '.*/biaskit_ctor_exit\.so', in dlopen\(\) .*constructors\): the plugin code ended the process \(exit status 0\)" \
    $T "$bk" check "$work/bad/biaskit_ctor_exit.so"
check "check: exit(0) in a constructor is counted" 1 "^0 passed, 1 failed, 0 skipped$" \
    $T "$bk" check "$work/bad/biaskit_ctor_exit.so"
within 10 "check: a constructor that never returns, --timeout 2" 1 \
    "^FAIL  plugin file '.*/biaskit_ctor_hang\.so', in dlopen\(\) .*constructors\): the plugin code did not finish within 2 s \(killed\)" \
    $T "$bk" check "$work/bad/biaskit_ctor_hang.so" --timeout 2
check "check: an entry symbol that is data" 1 \
    "^FAIL  plugin file '.*/biaskit_entry_data\.so', in its entry point biaskit_plugin_entry\(\): the plugin code crashed with signal 11 \(SIGSEGV" \
    $T "$bk" check "$work/bad/biaskit_entry_data.so"
check "check: an entry point returning a garbage pointer" 1 \
    "^FAIL  plugin file '.*/biaskit_entry_garbage\.so', reading the descriptor its entry point returned: the plugin code crashed with signal 11 \(SIGSEGV" \
    $T "$bk" check "$work/bad/biaskit_entry_garbage.so"
check "check: a descriptor whose name is unreadable" 1 \
    "^FAIL  plugin file '.*/biaskit_desc_garbage\.so', reading the descriptor .*: the plugin code crashed with signal 11 \(SIGSEGV" \
    $T "$bk" check "$work/bad/biaskit_desc_garbage.so"
check "check: abort() in the entry point" 1 \
    "^FAIL  plugin file '.*/biaskit_entry_abort\.so', in its entry point biaskit_plugin_entry\(\): the plugin code crashed with signal 6 \(SIGABRT" \
    $T "$bk" check "$work/bad/biaskit_entry_abort.so"
within 10 "check: an entry point that never returns, --timeout 2" 1 \
    "^FAIL  plugin file '.*/biaskit_entry_hang\.so', in its entry point biaskit_plugin_entry\(\): the plugin code did not finish within 2 s \(killed\)" \
    $T "$bk" check "$work/bad/biaskit_entry_hang.so" --timeout 2
# where the loader maps past the end of the file it crashes (SIGBUS here); a loader that notices is fine too
check "check: a truncated copy of alibi" 1 \
    "^FAIL  (plugin file '.*/biaskit_trunc\.so', in dlopen\(\) .*: the plugin code crashed with signal|cannot load plugin '.*/biaskit_trunc\.so')" \
    $T "$bk" check "$work/bad/biaskit_trunc.so"
within 10 "check: a FIFO named like a plugin is refused, not opened" 1 \
    "^FAIL  plugin file '.*/biaskit_x\.so' is a FIFO \(named pipe\); expected a regular file" \
    $T "$bk" check "$work/bad/biaskit_x.so"
check "check --help: loading runs in a child" 0 "Loading too: a child loads the plugin" "$bk" check --help
# a good plugin still loads and passes its load item
check "check: a good plugin still loads" 1 "^PASS  loads: testlin 0\.0\.1 from " \
    $T "$bk" check "$testplugins/biaskit_testlin.so"

# ---- biaskit plugins: the good ones listed, each bad one named with why, the listing goes on ----
mkdir -p "$work/mixed"
cp "$hostile"/biaskit_*.so "$work/bad/biaskit_trunc.so" "$work/mixed/" # not the FIFO: cp would block on it
mkfifo "$work/mixed/biaskit_x.so"
cp "$testplugins/biaskit_testlin.so" "$testplugins/biaskit_checkbad_grad.so" "$work/mixed/"
chmod 755 "$work/mixed"
mixed=(env BIASKIT_PLUGIN_PATH="$work/mixed")
out=$(cd "$work" && SECONDS=0 && "${mixed[@]}" $T "$bk" plugins --timeout 2 2>"$work/plugins.err"; echo "rc=$? took=$SECONDS")
err=$(cat "$work/plugins.err")
grep -q "^rc=0 " <<<"$out" && ok "plugins: bad files on the path are warnings (exit 0)" || bad "plugins: exit status" "$out$err"
took=$(sed -n 's/.*took=\([0-9]*\)$/\1/p' <<<"$out")
[ "${took:-99}" -lt 20 ] && ok "plugins: two hanging files cost their time limits only ($took s)" ||
    bad "plugins: took ${took:-?} s"
for good in testlin checkbad_grad alibi; do
    grep -Eq "^$good [0-9.]+ - " <<<"$out" && ok "plugins: $good is listed beside the bad files" ||
        bad "plugins: $good not listed" "$out"
done
grep -Eq "^[0-9]+ plugins, 10 files skipped \(see above\)$" <<<"$out" && ok "plugins: 10 files skipped, counted" ||
    bad "plugins: count line" "$out"
expect_warning() { # expect_warning NAME PATTERN: the stderr of the listing has it
    grep -Eq -- "$2" <<<"$err" && ok "plugins: $1" || bad "plugins: $1 (pattern: $2)" "$err"
}
expect_warning "abort() in a constructor" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_ctor_abort\.so', in dlopen\(\) .*: the plugin code crashed with signal 6"
expect_warning "exit(0) in a constructor" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_ctor_exit\.so', in dlopen\(\) .*exit status 0"
expect_warning "a constructor that hangs" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_ctor_hang\.so', in dlopen\(\) .*did not finish within 2 s"
expect_warning "an entry symbol that is data" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_entry_data\.so', in its entry point .*signal 11"
expect_warning "an entry point returning garbage" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_entry_garbage\.so', reading the descriptor .*signal 11"
expect_warning "abort() in the entry point" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_entry_abort\.so', in its entry point .*signal 6"
expect_warning "an entry point that hangs" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_entry_hang\.so', in its entry point .*did not finish within 2 s"
expect_warning "an unreadable descriptor" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_desc_garbage\.so', reading the descriptor .*signal 11"
expect_warning "a truncated library" "^biaskit: warning: skipped: (plugin file|cannot load plugin) '.*/mixed/biaskit_trunc\.so'"
expect_warning "a FIFO" "^biaskit: warning: skipped: plugin file '.*/mixed/biaskit_x\.so' is a FIFO \(named pipe\)"
grep -q "writable by users other" <<<"$err" && bad "plugins: a directory of mode 755 is not writable by others" "$err" ||
    ok "plugins: no warning for a directory of mode 755"
check "plugins --strict: a skipped file makes the exit status 1" 1 "^[0-9]+ plugins, 10 files skipped" \
    "${mixed[@]}" $T "$bk" plugins --timeout 2 --strict
check "plugins: a bad file named on the command line is an error" 1 \
    "error: plugin file '.*/biaskit_ctor_abort\.so', in dlopen\(\) .*signal 6" $T "$bk" plugins "$work/mixed/biaskit_ctor_abort.so"
check "plugins: a FIFO named on the command line is refused" 1 "error: plugin file '.*/biaskit_x\.so' is a FIFO" \
    $T "$bk" plugins "$work/mixed/biaskit_x.so"
check "plugins --help: the search path as the code has it" 0 \
    "when this.*executable is installed.*that directory; an.*executable that is not installed.*searches the build directory it was.*compiled in instead" \
    bash -c "'$bk' plugins --help | tr '\n' ' '"
check "biaskit --help: the build directory only when not installed" 0 \
    "then in ../lib/biaskit/plugins beside the +biaskit binary when that directory exists \(an installed biaskit\), else in the build +directory" \
    bash -c "'$bk' --help | tr '\n' ' '"

# plugin directories and files that others may write
mkdir -p "$work/open"
cp "$testplugins/biaskit_testlin.so" "$work/open/"
chmod 777 "$work/open"
check "plugins: a directory writable by others is named in a warning" 0 \
    "warning: plugin directory '$work/open' is writable by users other than its owner and group \(mode 0777\)" \
    env BIASKIT_PLUGIN_PATH="$work/open" $T "$bk" plugins
check "plugins: ... and counted" 0 "^[0-9]+ plugins, 1 writable by others \(see above\)$" \
    env BIASKIT_PLUGIN_PATH="$work/open" $T "$bk" plugins
check "plugins --strict: a directory writable by others makes the exit status 1" 1 "writable by others" \
    env BIASKIT_PLUGIN_PATH="$work/open" $T "$bk" plugins --strict
check "plugins: a named plugin in such a directory is warned about too" 0 \
    "warning: plugin directory '$work/open' is writable by users other" $T "$bk" plugins "$work/open/biaskit_testlin.so"
chmod 755 "$work/open" && chmod 666 "$work/open/biaskit_testlin.so"
check "plugins: a plugin file writable by others is named in a warning" 0 \
    "warning: plugin file '$work/open/biaskit_testlin.so' is writable by users other than its owner and group \(mode 0666\)" \
    env BIASKIT_PLUGIN_PATH="$work/open" $T "$bk" plugins
chmod 644 "$work/open/biaskit_testlin.so"

# ---- biaskit config: create() that crashes, exits or hangs is an error naming plugin, file and call ----
term() { # term FILE PLUGIN [KEY = VALUE lines]: a small experiment with one [[term]]
    local file=$1 plugin=$2
    shift 2
    printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 2\nwarmup = 1\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "%s"\n' "$plugin" >"$file"
    for line in "$@"; do echo "$line" >>"$file"; done
}
mkdir -p "$work/exp/corpus"
head -c 4000 /dev/urandom | base64 >"$work/exp/corpus/a.txt"
for kind in crash exit hang; do
    term "$work/exp/$kind.toml" "$testplugins/biaskit_checkbad_$kind.so" "init = -1.0"
done
check "config: create() crashing" 1 \
    "error: plugin 'checkbad_crash' \('.*/biaskit_checkbad_crash\.so'\), term 'checkbad_crash', in create\(\): the plugin code crashed with signal 11 \(SIGSEGV" \
    $T "$bk" config "$work/exp/crash.toml"
check "config: create() calling exit(3)" 1 \
    "error: plugin 'checkbad_exit' \('.*/biaskit_checkbad_exit\.so'\), term 'checkbad_exit', in create\(\): the plugin code ended the process \(exit status 3\)" \
    $T "$bk" config "$work/exp/exit.toml"
within 10 "config: create() that never returns, --timeout 2" 1 \
    "error: plugin 'checkbad_hang' \('.*/biaskit_checkbad_hang\.so'\), term 'checkbad_hang', in create\(\): the plugin code did not finish within 2 s \(killed\)" \
    $T "$bk" config "$work/exp/hang.toml" --timeout 2
term "$work/exp/good.toml" "$testplugins/biaskit_checkbad_hang.so" "init = 0.5"
check "config: the same plugin with a good value is fine" 0 "^# 2 learnable parameters x 1 copy$" \
    $T "$bk" config "$work/exp/good.toml" --timeout 2
check "config: its values are printed" 0 "^init = 0\.5|^plugin = \"checkbad_hang\"" $T "$bk" config "$work/exp/good.toml"
term "$work/exp/ctor.toml" "$work/bad/biaskit_ctor_abort.so"
check "config: a constructor that aborts" 1 \
    "error: plugin file '.*/biaskit_ctor_abort\.so', in dlopen\(\) .*constructors\): the plugin code crashed with signal 6" \
    $T "$bk" config "$work/exp/ctor.toml"
check "config --timeout must be a positive number" 2 "--timeout" "$bk" config "$work/exp/good.toml" --timeout 0
check "config --help names the time limit" 0 "--timeout S" "$bk" config --help

# ---- a FIFO as the plugin of an experiment: refused by name, nothing blocks ----
mkdir -p "$work/fifo/plugins" "$work/fifo/corpus"
cp "$work/exp/corpus/a.txt" "$work/fifo/corpus/"
mkfifo "$work/fifo/plugins/biaskit_x.so"
term "$work/fifo/exp.toml" "./plugins/biaskit_x.so"
fifo_msg="plugin file '.*/fifo/plugins/biaskit_x\.so' is a FIFO \(named pipe\); expected a regular file"
within 15 "config: a FIFO plugin path" 1 "$fifo_msg" timeout 20 "$bk" config "$work/fifo/exp.toml"
within 15 "bias: a FIFO plugin path" 1 "$fifo_msg" timeout 20 "$bk" bias "$work/fifo/exp.toml"
within 15 "train: a FIFO plugin path" 1 "$fifo_msg" timeout 20 "$bk" train "$work/fifo/exp.toml" --out "$work/fifo/run"
term "$work/fifo/byname.toml" "x"
within 15 "bias: a FIFO found by name on the search path" 1 "$fifo_msg" \
    env BIASKIT_PLUGIN_PATH="$work/fifo/plugins" timeout 20 "$bk" bias "$work/fifo/byname.toml"
# eval reads the plugin a checkpoint names: train with a real one, then put a FIFO in its place
mkdir -p "$work/ev/plugins" "$work/ev/corpus"
cp "$work/exp/corpus/a.txt" "$work/ev/corpus/"
cp "$testplugins/biaskit_testlin.so" "$work/ev/plugins/"
term "$work/ev/exp.toml" "./plugins/biaskit_testlin.so"
if $T "$bk" train "$work/ev/exp.toml" --out "$work/ev/run" --plain >"$work/ev/train.log" 2>&1; then
    ok "eval setup: a tiny training"
    rm "$work/ev/plugins/biaskit_testlin.so" && mkfifo "$work/ev/plugins/biaskit_testlin.so"
    ev_msg="plugin file '.*/ev/plugins/biaskit_testlin\.so' is a FIFO \(named pipe\)"
    within 15 "eval: a checkpoint whose plugin path is now a FIFO" 1 "$ev_msg" \
        timeout 20 "$bk" eval "$work/ev/run/checkpoint.safetensors" --lengths 16 --tokens 200
    within 15 "bias: the same checkpoint" 1 "$ev_msg" timeout 20 "$bk" bias "$work/ev/run/checkpoint.safetensors" --length 4
else
    bad "eval setup: a tiny training" "$(cat "$work/ev/train.log")"
fi

echo "test_bad_plugins: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
