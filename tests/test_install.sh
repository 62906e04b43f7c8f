#!/usr/bin/env bash
# The installed SDK: `cmake --install` lays out headers, binary, plugins, CMake package and pkg-config
# file; the out-of-tree example plugin builds against the installed SDK only (a copy of its folder,
# away from the source tree), both with CMake (find_package(biaskit)) and with pkg-config, the
# installed biaskit loads it through BIASKIT_PLUGIN_PATH and by path, and `biaskit check` passes it.
# usage: test_install.sh <build dir> <source dir>
set -u
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
failures=0 passed=0

check() { # check NAME COMMAND...: the command must succeed
    local name=$1
    shift
    local out
    if out=$("$@" 2>&1); then
        echo "ok: $name"
        passed=$((passed + 1))
    else
        echo "FAIL: $name"
        echo "$out" | tail -30 | sed 's/^/    /'
        failures=$((failures + 1))
    fi
}

check "cmake --install" cmake --install "$build" --prefix "$prefix"
for f in include/biaskit/plugin.h bin/biaskit lib/biaskit/plugins/biaskit_alibi.so \
         lib/cmake/biaskit/biaskitConfig.cmake lib/cmake/biaskit/BiaskitPlugin.cmake lib/pkgconfig/biaskit.pc; do
    check "installed $f" test -e "$prefix/$f"
done
check "installed biaskit finds its installed plugins" \
    bash -c "'$prefix/bin/biaskit' plugins alibi | grep -q 'file: *$prefix/lib/biaskit/plugins/biaskit_alibi.so'"

cp -r "$src/examples/plugin_gaussian" "$work/gaussian"
rm -rf "$work/gaussian/build"
check "example configures against the installed SDK" \
    cmake -S "$work/gaussian" -B "$work/gaussian/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror"
check "example builds" cmake --build "$work/gaussian/build"
check "example exports only the entry symbol" \
    bash -c "nm -D --defined-only '$work/gaussian/build/biaskit_gaussian.so' | awk '{print \$3}' | grep -v '^_' | grep -qx biaskit_plugin_entry && \
             [ \"\$(nm -D --defined-only '$work/gaussian/build/biaskit_gaussian.so' | awk '{print \$3}' | grep -v '^_' | wc -l)\" = 1 ]"
check "example is listed through BIASKIT_PLUGIN_PATH" \
    bash -c "BIASKIT_PLUGIN_PATH='$work/gaussian/build' '$prefix/bin/biaskit' plugins | grep -q '^gaussian '"
check "example's table through the installed biaskit" \
    bash -c "cd '$work/gaussian' && BIASKIT_PLUGIN_PATH='$work/gaussian/build' '$prefix/bin/biaskit' bias gaussian.toml --length 4 --csv - | grep -q '^0,token,mixed,0,3,-2.25$'"
check "example builds with pkg-config alone" \
    bash -c "PKG_CONFIG_PATH='$prefix/lib/pkgconfig' cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden \
             \$(PKG_CONFIG_PATH='$prefix/lib/pkgconfig' pkg-config --cflags biaskit) '$work/gaussian/gaussian.c' -o '$work/biaskit_gaussian.so' -lm"
check "pkg-config build loads by path" \
    bash -c "'$prefix/bin/biaskit' plugins '$work/biaskit_gaussian.so' | grep -q '^gaussian '"
check "example passes biaskit check (by path)" \
    "$prefix/bin/biaskit" check "$work/gaussian/build/biaskit_gaussian.so"

echo "test_install: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
