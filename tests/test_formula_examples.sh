#!/usr/bin/env bash
# The worked examples in the comment of <biaskit/formula_plugin.h> (a window mask, Scalable-Softmax,
# PI-RoPE, FIRE) are whole plugins: each is cut out of the header as written, compiled with cc -Wall
# -Wextra -Werror against the SDK's headers, and must pass `biaskit check`. Four examples are expected,
# so a comment that loses one fails too.
# usage: test_formula_examples.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
header=$src/sdk/include/biaskit/formula_plugin.h
failures=0 passed=0

# Each run of comment lines indented by " *     " between "Worked examples" and the new-plugin paragraph
# is one example: ex1.c, ex2.c, ...
awk -v dir="$work" '
    /---- Worked examples/ { on = 1; next }
    /biaskit new-plugin NAME --kind/ { on = 0 }
    on && /^ \*     / { if (!inblock) { n++; inblock = 1 } sub(/^ \*     /, ""); print > (dir "/ex" n ".c"); next }
    { inblock = 0 }
' "$header"

count=$(ls "$work"/ex*.c 2>/dev/null | wc -l)
if [ "$count" -eq 4 ]; then
    echo "ok: 4 examples in the header's comment"
    passed=$((passed + 1))
else
    echo "FAIL: expected 4 examples in the header's comment, found $count"
    failures=$((failures + 1))
fi
for f in "$work"/ex*.c; do
    [ -e "$f" ] || continue
    name=$(grep -o '\.name = "[a-z0-9_]*"' "$f" | head -1 | cut -d'"' -f2)
    so=$work/biaskit_$name.so
    if out=$(cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -I "$src/sdk/include" "$f" -o "$so" -lm 2>&1) &&
       out=$(env -u BIASKIT_PLUGIN_PATH "$bk" check "$so" 2>&1); then
        echo "ok: example '$name' compiles and passes biaskit check ($(echo "$out" | tail -1))"
        passed=$((passed + 1))
    else
        echo "FAIL: example '$name' ($(basename "$f"))"
        echo "$out" | grep -v '^PASS' | tail -20 | sed 's/^/    /'
        failures=$((failures + 1))
    fi
done
echo "test_formula_examples: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
