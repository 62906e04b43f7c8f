# The helpers of the shell tests (test_cli.sh, test_sweep.sh, test_report.sh, test_corpus.sh), sourced
# by each: counters, ok/bad, and check, which runs a command and checks its exit code and output.
failures=0 passed=0

ok() { echo "ok: $1"; passed=$((passed + 1)); }

# bad NAME [OUTPUT]: a failure, with the first 30 lines of OUTPUT indented below it
bad() {
    echo "FAIL: $1"
    [ -n "${2:-}" ] && echo "$2" | head -30 | sed 's/^/    /'
    failures=$((failures + 1))
}

# check NAME EXPECTED_EXIT PATTERN COMMAND...: runs the command, checks its exit code and that its
# output (stdout and stderr) matches the extended regular expression PATTERN.
check() {
    local name=$1 want=$2 pattern=$3
    shift 3
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pattern" <<<"$out"; then
        bad "$name (exit $rc, expected $want; pattern: $pattern)" "$out"
    else
        ok "$name"
    fi
}
