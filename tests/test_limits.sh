#!/usr/bin/env bash
# biaskit under an address-space limit (`ulimit -v`), and where its cuBLAS code lives.
#
# cuBLAS (close to 600 MB of address space with cuBLASLt) used to be linked into the binary, so under
# `ulimit -v 700000` even `biaskit --version` failed at start-up. The cuda backend and cuBLAS are now a
# module loaded when a GPU path is asked for (core/cuda/module.h): here --version, config, plugins and
# a tiny CPU training must work under that limit, in a CPU-only build and in a CUDA build alike; in a
# CUDA build the binary must not need cuBLAS (so this fails on the old linkage whatever the limit),
# the module must be complete, found from the build tree and from an install, and a module that
# cannot be loaded is named with the loader's reason.
# usage: test_limits.sh <biaskit binary> <source dir> <build dir> <ON|OFF: built with CUDA>
#                       <ON|OFF: built with the sanitizers>
set -u
bk=$1 src=$2 build=$3 cuda=$4 sanitized=${5:-OFF}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"

limit=700000 # KiB
# limited CMD...: CMD under `ulimit -v $limit`, killed after 120 s. Measured on a 2-core machine:
# --version, config and plugins need about 310 MB, the tiny training about 600 MB. Below that the
# libraries hang or exit, not biaskit: OpenBLAS (Debian's 0.3.21) gives every thread that multiplies a
# 128 MiB buffer and retries for ever when it cannot get one (OpenMathLib/OpenBLAS#5289, fixed in
# 0.3.30), libgomp exits when it cannot start a thread. So the training's threads are fixed at 2.
# Under AddressSanitizer (scripts/sanitize.sh) the limit is left off: its shadow memory alone reserves
# terabytes of address space.
lim="ulimit -v $limit"
[ "$sanitized" = ON ] && lim="AddressSanitizer, no limit"
limited() {
    if [ "$sanitized" = ON ]; then
        timeout -s KILL 120 "$@"
    else
        (ulimit -v "$limit" && exec timeout -s KILL 120 "$@")
    fi
}

mkdir -p "$work/corpus"
head -c 20000 "$src/core/data/data.c" >"$work/corpus/a.txt"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 2\nwarmup = 1\nlog_every = 1\n[run]\nthreads = 2\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' \
    >"$work/tiny.toml"

check "$lim: --version" 0 "^device: " limited "$bk" --version
check "$lim: config" 0 "alibi" limited "$bk" config "$src/examples/alibi.toml"
check "$lim: plugins" 0 "^alibi 1\.[0-9.]+ - " limited "$bk" plugins
check "$lim: a tiny training (device auto)" 0 "done: 2 steps" \
    limited "$bk" train "$work/tiny.toml" --out "$work/run-auto" --plain
check "$lim: a tiny training (device cpu)" 0 "done: 2 steps" \
    limited "$bk" train "$work/tiny.toml" --out "$work/run-cpu" --set run.device=cpu --plain

# An allocation that fails names its buffer and the backend's memory (activations of 16384 x 256
# tokens are gigabytes; the limit refuses them; AddressSanitizer would abort instead of failing it)
[ "$sanitized" = ON ] && echo "skip: activations too large (no limit under AddressSanitizer)" ||
check "$lim: activations too large name the buffer and the backend" 1 \
    "error: activations of 16384 x 256 tokens \([0-9.]+ GiB on cpu\): cpu backend: out of memory for [0-9]+ bytes \([0-9.]+ MiB\) of host memory" \
    limited "$bk" train "$work/tiny.toml" --out "$work/run-big" --set train.batch=16384 --set train.length=256 --plain

if [ "$cuda" = ON ]; then
    needed=$(ldd "$bk" 2>&1)
    if grep -Eq 'libcublas' <<<"$needed"; then
        bad "the binary does not load cuBLAS at start-up" "$(grep -E 'libcu' <<<"$needed")"
    else
        ok "the binary does not load cuBLAS at start-up"
    fi
    so=$build/cuda/biaskit_cuda_backend.so
    check "the backend module is built" 0 "" test -f "$so"
    check "the backend module needs cuBLAS" 0 "NEEDED.*libcublas" readelf -d "$so"
    check "the backend module resolves every symbol" 0 "^$" bash -c "ldd -r '$so' 2>&1 | grep -i 'undefined symbol'; true"
    check "the backend module exports only its entry" 0 "^bk_cuda_backend_module$" \
        bash -c "nm -D --defined-only '$so' | awk '{print \$3}' | grep -v '^_'"
    # cuda_module_load creates a cuda backend through the loader: the module loads (then no GPU answers,
    # or one does); under the limit cuBLAS does not fit, and the module is named with the loader's reason
    helper=$build/tests/cuda_module_load
    check "the build tree's module loads" 0 "^(error: CUDA backend: no GPU answers|created: cuda:0 )" \
        bash -c "'$helper'; true"
    check "ulimit -v 450000: cuBLAS does not fit, the module is named with the loader's reason" 1 \
        "^error: CUDA backend: the CUDA backend module '$so' cannot be loaded: lib[a-zA-Z]+\.so[.0-9]*: failed to map segment" \
        bash -c "ulimit -v 450000 && exec '$helper'"

    # installed: the module in <prefix>/lib/biaskit, found there
    prefix=$work/prefix
    if cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
        ok "cmake --install"
    else
        bad "cmake --install" "$(cat "$work/install.log")"
    fi
    mod=$prefix/lib/biaskit/biaskit_cuda_backend.so
    check "installed lib/biaskit/biaskit_cuda_backend.so" 0 "" test -f "$mod"
    check "installed: --version ($lim)" 0 "^device: " limited "$prefix/bin/biaskit" --version
    cp "$helper" "$prefix/bin/"
    check "installed: the module loads from the prefix" 0 "^(error: CUDA backend: no GPU answers|created: cuda:0 )" \
        bash -c "'$prefix/bin/cuda_module_load'; true"
    mv "$mod" "$work/saved.so"
    check "installed: a missing module is named, with the loader's reason" 1 \
        "^error: CUDA backend: the CUDA backend module '$mod' cannot be loaded: cannot open shared object file: No such file or directory$" \
        "$prefix/bin/cuda_module_load"
    check "... and training with device auto is on the CPU" 0 "done: 2 steps" \
        "$prefix/bin/biaskit" train "$work/tiny.toml" --out "$work/run-nomod" --plain
    cp "$build/plugins/biaskit_alibi.so" "$mod"
    check "installed: a file that is not the module is named" 1 \
        "^error: CUDA backend: the CUDA backend module '$mod' has no bk_cuda_backend_module\(\)" \
        "$prefix/bin/cuda_module_load"
    mv "$work/saved.so" "$mod"
else
    check "CPU-only build: --version says so" 0 "^device: cpu \(built without CUDA\)$" "$bk" --version
fi

echo "test_limits: $passed passed, $failures failed"
[ "$failures" -eq 0 ]
