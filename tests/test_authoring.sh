#!/usr/bin/env bash
# The authoring benchmark: three plugins written as an outside author would (tests/authoring/: a rational
# bias, a Cauchy bias with a per-head initialisation rule, a sliding window with sinks) build against the
# INSTALLED SDK with the guide's pkg-config line and pass `biaskit check`; copies of them with one planted
# bug each (made here with sed, so each copy differs from its good original by exactly the bug) must fail it:
#   rational_pole    the projection admits b_h < 0: a pole at d = 1/|b_h| >= 5882, far beyond the training length
#   rational_nanfar  NaN only for d > 4000
#   rational_nondet  the table moves by 1e-6 between two calls (rand())
#   rational_fargrad dT/da_h is 0 beyond distance 1000
#   cauchy_grad      the gradient is 2% off
# so that every future change to `check` keeps catching them.
# usage: test_authoring.sh <build dir> <source dir>
set -u
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
failures=0 passed=0

ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -25 | sed 's/^/    /'; failures=$((failures + 1)); }

if ! out=$(cmake --install "$build" --prefix "$prefix" 2>&1); then
    bad "cmake --install" "$out"
    echo "test_authoring: $passed passed, $failures failed"
    exit 1
fi
biaskit=$prefix/bin/biaskit
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
unset BIASKIT_PLUGIN_PATH

# The guide's build line (sdk/README.md, "Build it"), as installed: cc ... $(pkg-config --cflags biaskit) mine.c ...
line=$(grep -E '^    cc -std=c11 ' "$src/sdk/README.md" | head -1 | sed -e 's/^    //')
[ -n "$line" ] && ok "the guide gives the cc line" || bad "the guide gives the cc line (sdk/README.md: '    cc -std=c11 ...')"

build_plugin() { # build_plugin NAME: $work/NAME/NAME.c -> $work/NAME/biaskit_NAME.so with the guide's line
    local name=$1 out
    if out=$(cd "$work/$name" && eval "${line//mine/$name} -Wall -Wextra -Werror" 2>&1); then
        ok "$name builds against the installed SDK"
    else
        bad "$name builds against the installed SDK" "$out"
    fi
}

plant() { # plant NAME ORIGINAL SED-EXPRESSION: a copy of ORIGINAL with one change, which must take
    local name=$1 orig=$2 expr=$3
    mkdir -p "$work/$name"
    sed -e "$expr" "$src/tests/authoring/$orig.c" >"$work/$name/$name.c"
    if cmp -s "$src/tests/authoring/$orig.c" "$work/$name/$name.c"; then
        bad "$name: the planted change took" "sed -e '$expr' changed nothing in $orig.c"
    else
        ok "$name: the planted change took"
    fi
    build_plugin "$name"
}

# check_passes NAME [ARGS]: `biaskit check` exits 0 with no FAIL
check_passes() {
    local name=$1 out rc
    shift
    out=$("$biaskit" check "$work/$name/biaskit_$name.so" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q '^FAIL' <<<"$out" && grep -q ' 0 failed' <<<"$out"; then
        ok "$name passes biaskit check${*:+ $*}"
    else
        bad "$name passes biaskit check${*:+ $*} (exit $rc)" "$(grep -v '^PASS' <<<"$out")"
    fi
}

# check_fails NAME REGEX [ARGS]: `biaskit check` exits 1 and a FAIL line matches REGEX
check_fails() {
    local name=$1 regex=$2 out rc
    shift 2
    out=$("$biaskit" check "$work/$name/biaskit_$name.so" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && grep -E '^FAIL' <<<"$out" | grep -qE "$regex"; then
        ok "$name fails biaskit check ($regex)"
    else
        bad "$name fails biaskit check: exit 1 and a FAIL line matching '$regex' (exit $rc)" "$(grep -v '^PASS' <<<"$out")"
    fi
}

for name in rational cauchy windowed; do
    mkdir -p "$work/$name"
    cp "$src/tests/authoring/$name.c" "$work/$name/"
    build_plugin "$name"
    check_passes "$name"
done

# the Cauchy initialisation: s_h = 2^(h+1) (a rule of h and H, no setup hook)
out=$(cd "$work" && printf '[model]\nlayers = 1\nheads = 4\ndim = 16\n[[term]]\nplugin = "%s"\n' \
      "$work/cauchy/biaskit_cauchy.so" >cauchy.toml && "$biaskit" bias cauchy.toml --length 4 --csv - 2>&1)
# T_h(3) = -log(1 + (3 / 2^(h+1))^2): head 0 -log(3.25), head 3 -log(1 + 9/256)
if grep -q '^0,token,mixed,0,3,-1.17865' <<<"$out" && grep -q '^0,token,mixed,3,3,-0.0345' <<<"$out"; then
    ok "cauchy's per-head initialisation 2^(h+1) reaches the table"
else
    bad "cauchy's per-head initialisation 2^(h+1) reaches the table" "$out"
fi

plant rational_pole rational 's/X(b, PER_HEAD, BIASKIT_TP_CONST(1e-3), 0.0,/X(b, PER_HEAD, BIASKIT_TP_CONST(1e-3), -1.7e-4,/'
check_fails rational_pole 'has a pole between distances 5882 and 5883'

plant rational_nanfar rational 's/{ return -p.a \* (float)d/{ return d > 4000 ? NAN : -p.a * (float)d/'
check_fails rational_nanfar 'nan'
# beyond the distances the ordinary table checks look at, the long-range probe finds it
check_fails rational_nanfar 'head 0 is nan at distance 4001' --distances 4000

plant rational_nondet rational 's/{ return -p.a \* (float)d \/ (1.0f + p.b \* (float)d); }/{ return -p.a * (float)d \/ (1.0f + p.b * (float)d) + 1e-6f * (float)(rand() % 2); }/'
check_fails rational_nondet 'not deterministic'

# a derivative that goes wrong only far away (d > 1000): the gradient check's third case (4097 distances)
# finds it; with --distances 300 that case is not run, and nothing else looks there
plant rational_fargrad rational 's|g->a = -(float)d / q;|g->a = d > 1000 ? 0.0f : -(float)d / q;|'
check_fails rational_fargrad 'table_backward gradient a\[[0-9]+\]'
check_passes rational_fargrad --distances 300

plant cauchy_grad cauchy 's/g->s = 2.0f \* d2/g->s = 2.04f * d2/'
check_fails cauchy_grad 'gradient|s\[[0-9]+\]'

# The parameter limit holds in a host-only build too (it used to be nvcc's static assertion only, so a
# 25-parameter plugin built here and then failed on the GPU machine): 24 SCALAR parameters build, 25 do not.
many_params() { # many_params NAME N: a table plugin with N scalar parameters, T(d) = -(p0 + ... ) d
    local name=$1 n=$2 k params="" table="0.0f" grad=""
    for ((k = 0; k < n; k++)); do
        params+="    X(p$k, SCALAR, BIASKIT_TP_CONST(0.01), 0.0, INFINITY, \"slope part $k\") \\"$'\n'
        table+=" + p.p$k"
        grad+="g->p$k = -(float)d; "
    done
    mkdir -p "$work/$name"
    printf '#include <biaskit/table_plugin.h>\n#define MANY_PARAMS(X) \\\n%s\n' "$params" >"$work/$name/$name.c"
    printf 'BIASKIT_TP_TYPES(many, MANY_PARAMS, BIASKIT_TP_NO_CONSTANTS)\nBIASKIT_TP_TABLE(many) { return -(%s) * (float)d; }\n' \
        "$table" >>"$work/$name/$name.c"
    printf 'BIASKIT_TP_GRADIENT(many) { %s}\nBIASKIT_TABLE_PLUGIN(many, MANY_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "%s", .version = "1.0.0", .summary = "many slopes")\n' \
        "$grad" "$name" >>"$work/$name/$name.c"
}
many_params many24 24
build_plugin many24
many_params many25 25
if out=$(cd "$work/many25" && eval "${line//mine/many25}" 2>&1); then
    bad "25 parameters are refused at compile time in a host-only build" "it built"
elif printf '%s' "$out" | grep -q "at most 24 parameters (BIASKIT_TP_MAX_PARAMS"; then
    ok "25 parameters are refused at compile time in a host-only build"
else
    bad "25 parameters are refused at compile time in a host-only build (the message names the limit)" "$out"
fi

echo "test_authoring: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
