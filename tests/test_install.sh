#!/usr/bin/env bash
# The installed SDK: `cmake --install` lays out headers, binary, plugins, CMake package and pkg-config
# file; the out-of-tree example plugin builds against the installed SDK only (a copy of its folder,
# away from the source tree), both with CMake (find_package(biaskit)) and with pkg-config, the
# installed biaskit loads it through BIASKIT_PLUGIN_PATH and by path, and `biaskit check` passes it.
# The pkg-config build runs the very command lines of the installed SDK guide (section "Build it"). With
# nvcc, the CUDA kernels are built for sm_80 and sm_90 by default and for the project's choice otherwise.
# The installed guide (share/doc/biaskit/SDK.md) and headers cite only installed files: every path they
# name exists under the prefix, and the installed example sources build against the installed SDK.
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
# ---- the guide and the files it cites --------------------------------------------------------------------
# A citation is `<prefix>/PATH` (a file or folder under the install prefix; a trailing "." or "," ends it) or
# <biaskit/NAME.h> (include/biaskit/NAME.h). What is not allowed: a path into the biaskit sources (docs/,
# tests/, plugins/, examples/, bench/, core/, sdk/ not inside a <prefix>/ path), a relative Markdown link.
guide_md=$prefix/share/doc/biaskit/SDK.md
check "installed the SDK guide (share/doc/biaskit/SDK.md)" test -s "$guide_md"
# the headers whose comments are checked too (installed, read by authors)
guide_headers="plugin.h plugin_cuda.h random.h table_plugin.h formula_plugin.h"
cited() { # cited FILE: every <prefix>/ path and <biaskit/...h> header FILE names, one a line
    grep -oE '<prefix>/[A-Za-z0-9_./-]+' "$1" | sed -e 's|^<prefix>/||' -e 's|[.,]*$||'
    grep -oE '<biaskit/[a-z_]+\.h>' "$1" | sed -e 's|^<biaskit/|include/biaskit/|' -e 's|>$||'
}
# a path into the sources, or a relative Markdown link
source_path='(^|[^/A-Za-z0-9_.<-])(docs|tests|plugins|examples|bench|core|sdk)/[A-Za-z0-9_]|\]\((\.|[a-z_]+/)'
for f in "$guide_md" $(for h in $guide_headers; do echo "$prefix/include/biaskit/$h"; done); do
    name=${f#"$prefix"/}
    paths=$(cited "$f" | sort -u)
    missing=$(for c in $paths; do [ -e "$prefix/$c" ] || echo "$c"; done)
    check "$name: every path it cites is installed ($(echo "$paths" | grep -c .) paths)" \
        bash -c "[ -z \"\$1\" ] || { echo \"not under the prefix:\"; echo \"\$1\"; false; }" _ "$missing"
    check "$name: cites no file of the biaskit sources" bash -c "! grep -nE '$source_path' '$f'"
done
check "the guide cites the installed examples (at least 20 paths under share/)" \
    test "$(cited "$guide_md" | grep -c '^share/')" -ge 20

check "installed biaskit finds its installed plugins" \
    bash -c "'$prefix/bin/biaskit' plugins alibi | grep -q 'file: *$prefix/lib/biaskit/plugins/biaskit_alibi.so'"
check "installed biaskit does not search the build tree (nothing shadowed)" \
    bash -c "! env -u BIASKIT_PLUGIN_PATH '$prefix/bin/biaskit' plugins 2>&1 | grep -i shadow"

cp -r "$prefix/share/biaskit/examples/plugin_gaussian" "$work/gaussian" # as installed: the guide's copy
rm -rf "$work/gaussian/build"
check "example configures against the installed SDK" \
    cmake -S "$work/gaussian" -B "$work/gaussian/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror"
check "example builds" cmake --build "$work/gaussian/build"

# CUDA architectures (when the example found nvcc): biaskit_add_plugin's default 80;90 replaces the
# compiler's own default; an explicit CMAKE_CUDA_ARCHITECTURES or BIASKIT_CUDA_ARCHITECTURES wins.
cuda_archs() { # the architectures a configured example build compiles its CUDA for, e.g. "sm_80 sm_90"
    grep -ho 'sm_[0-9]*' "$1/CMakeFiles/biaskit_plugin_gaussian.dir/flags.make" 2>/dev/null | sort -u | paste -sd' '
}
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    check "example builds its CUDA kernels (nvcc is present)" \
        grep -q '^CUDA_FLAGS' "$work/gaussian/build/CMakeFiles/biaskit_plugin_gaussian.dir/flags.make"
    archs=$(cuda_archs "$work/gaussian/build")
    check "example's CUDA kernels default to sm_80 and sm_90 (got: $archs)" test "$archs" = "sm_80 sm_90"
    cmake -S "$work/gaussian" -B "$work/arch" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CUDA_ARCHITECTURES=86 >/dev/null 2>&1
    archs=$(cuda_archs "$work/arch")
    check "an explicit CMAKE_CUDA_ARCHITECTURES=86 is respected (got: $archs)" test "$archs" = "sm_86"
    cmake -S "$work/gaussian" -B "$work/arch" -DBIASKIT_CUDA_ARCHITECTURES=89 >/dev/null 2>&1
    archs=$(cuda_archs "$work/arch")
    check "BIASKIT_CUDA_ARCHITECTURES=89 wins (got: $archs)" test "$archs" = "sm_89"
else
    echo "skip: CUDA architectures (no nvcc)"
fi
check "example exports only the entry symbol and biaskit_tp_emulation (table_plugin.h's CUDA kernels on the host)" \
    bash -c "[ \"\$(nm -D --defined-only '$work/gaussian/build/biaskit_gaussian.so' | awk '{print \$3}' | grep -v '^_' | sort | tr '\n' ' ')\" = 'biaskit_plugin_entry biaskit_tp_emulation ' ]"
check "example is listed through BIASKIT_PLUGIN_PATH" \
    bash -c "BIASKIT_PLUGIN_PATH='$work/gaussian/build' '$prefix/bin/biaskit' plugins | grep -q '^gaussian '"
check "example's table through the installed biaskit" \
    bash -c "cd '$work/gaussian' && BIASKIT_PLUGIN_PATH='$work/gaussian/build' '$prefix/bin/biaskit' bias gaussian.toml --length 4 --csv - | grep -q '^0,token,mixed,0,3,-2.25$'"
# The installed guide's pkg-config lines, verbatim but for <prefix> and the plugin's name (mine -> gaussian),
# run in a clean environment (no PKG_CONFIG_PATH of the caller's).
guide_lines=$(grep -E '^    (export PKG_CONFIG_PATH=|cc -std=c11 )' "$guide_md" | sed -e 's/^    //' -e "s|<prefix>|$prefix|g")
guide=$(printf '%s\n' "$guide_lines" | sed -e 's/mine/gaussian/g')
check "the installed guide gives the pkg-config build (export PKG_CONFIG_PATH, cc ... -lm)" \
    bash -c "printf '%s\n' \"\$1\" | grep -q '^export PKG_CONFIG_PATH=' && printf '%s\n' \"\$1\" | grep -q '^cc .* -lm\$'" _ "$guide"
mkdir -p "$work/pc" && cp "$work/gaussian/gaussian.c" "$work/pc/"
check "example builds with pkg-config alone, as sdk/README.md says" \
    env -u PKG_CONFIG_PATH bash -c "cd '$work/pc' && set -e && $guide"
check "pkg-config build loads by path" \
    bash -c "'$prefix/bin/biaskit' plugins '$work/pc/biaskit_gaussian.so' | grep -q '^gaussian '"
# The sources the guide quotes, as installed, built with its pkg-config lines (mine -> the source's name) and
# loaded by the installed biaskit: the formula-first plugins of <biaskit/table_plugin.h> (kerple_tp,
# tp_scalar) and <biaskit/formula_plugin.h> (fire_fp, window_fp, ssmax_fp, rope_pi_fp), and every built-in
# plugin's host source in a copy of the installed folders (bipe includes ../ape/ape_math.h).
cp -r "$prefix/share/biaskit/examples" "$work/quoted"
for c in "$work"/quoted/formula/*.c "$work"/quoted/plugins/*/*.c; do
    name=$(basename "$c" .c)
    lines=$(printf '%s\n' "$guide_lines" | sed -e "s/mine/$name/g")
    check "quoted source ${c#"$work/quoted/"} builds with the guide's pkg-config lines and loads" \
        env -u PKG_CONFIG_PATH bash -c "cd '$(dirname "$c")' && set -e && $lines && '$prefix/bin/biaskit' plugins './biaskit_$name.so' | grep -q '^$name '"
done
check "the table_plugin.h example kerple_tp, built from its installed source, passes biaskit check" \
    "$prefix/bin/biaskit" check "$work/quoted/formula/biaskit_kerple_tp.so"
check "the formula_plugin.h example window_fp, built from its installed source, passes biaskit check" \
    "$prefix/bin/biaskit" check "$work/quoted/formula/biaskit_window_fp.so"
check "example passes biaskit check (by path)" \
    "$prefix/bin/biaskit" check "$work/gaussian/build/biaskit_gaussian.so"

# biaskit new-plugin: the scaffold builds against the installed SDK as written, loads by name and
# passes check; a second scaffold of the same name is refused
check "new-plugin writes a folder" "$prefix/bin/biaskit" new-plugin mybias --dir "$work"
check "new-plugin refuses an existing folder" bash -c "! '$prefix/bin/biaskit' new-plugin mybias --dir '$work' 2>/dev/null"
check "new-plugin scaffold configures against the installed SDK" \
    cmake -S "$work/mybias" -B "$work/mybias/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror"
check "new-plugin scaffold builds" cmake --build "$work/mybias/build"
check "new-plugin scaffold loads by name" \
    bash -c "BIASKIT_PLUGIN_PATH='$work/mybias/build' '$prefix/bin/biaskit' plugins | grep -q '^mybias '"
check "new-plugin scaffold passes biaskit check (by name)" \
    env BIASKIT_PLUGIN_PATH="$work/mybias/build" "$prefix/bin/biaskit" check mybias
check "new-plugin scaffold's experiment reads its table (ALiBi slopes: T_0(3) = -3 * 2^-2)" \
    bash -c "cd '$work/mybias' && BIASKIT_PLUGIN_PATH='$work/mybias/build' '$prefix/bin/biaskit' bias mybias.toml --length 4 --csv - | grep -q '^0,token,mixed,0,3,-0.75$'"

# new-plugin --kind: each ABI 2 shape (<biaskit/formula_plugin.h>: host code, no .cu file) builds against the
# installed SDK as written, passes check by name and trains 2 steps; an unknown kind is refused
check "installed include/biaskit/formula_plugin.h" test -e "$prefix/include/biaskit/formula_plugin.h"
for kind in coordinate mask scale rotary views; do
    name=my$kind
    check "new-plugin --kind $kind writes a folder (no .cu file)" \
        bash -c "'$prefix/bin/biaskit' new-plugin $name --kind $kind --dir '$work' >/dev/null && [ -e '$work/$name/$name.c' ] && [ ! -e '$work/$name/$name.cu' ]"
    check "new-plugin --kind $kind scaffold configures and builds against the installed SDK" \
        bash -c "cmake -S '$work/$name' -B '$work/$name/build' -DCMAKE_PREFIX_PATH='$prefix' -DCMAKE_C_FLAGS='-Wall -Wextra -Werror' >/dev/null && cmake --build '$work/$name/build'"
    check "new-plugin --kind $kind scaffold passes biaskit check (by name)" \
        env BIASKIT_PLUGIN_PATH="$work/$name/build" "$prefix/bin/biaskit" check $name
    check "new-plugin --kind $kind scaffold's experiment trains 2 steps" \
        bash -c "cd '$work/$name' && BIASKIT_PLUGIN_PATH='$work/$name/build' '$prefix/bin/biaskit' train $name.toml --set train.steps=2 --out '$work/$name/run' --plain"
done
check "new-plugin refuses an unknown kind, naming the kinds" \
    bash -c "! '$prefix/bin/biaskit' new-plugin other --kind fire --dir '$work' 2>'$work/kind.err' && grep -q 'expected table, coordinate, mask, scale, rotary or views' '$work/kind.err' && [ ! -e '$work/other' ]"

echo "test_install: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
