#!/usr/bin/env bash
# Verifies all CUDA code of biaskit on a machine with a GPU, in a few minutes, without network and
# without the Debian -dev packages installed there.
#
#   scripts/gpu-test.sh --fetch         HERE, on a Debian 12 (bookworm, amd64) machine with network:
#                                       `apt-get download` the build dependencies (toml++, cmocka,
#                                       OpenBLAS for OpenMP, cJSON, pkgconf, and the libraries they
#                                       need at run time) into .debs/ (ignored by git; about 13 MB).
#                                       Carry .debs/ to the GPU machine with the working tree.
#   scripts/gpu-test.sh                 THERE: when the system lacks the packages, unpacks every .deb
#                                       of .debs/ into build-gpu/prefix (never into /) and points the
#                                       build at it (a pkg-config restricted to the prefix, PATH,
#                                       CMAKE_PREFIX_PATH, LD_LIBRARY_PATH); prints nvidia-smi and nvcc;
#                                       configures with CUDA for the GPU's architecture (nvidia-smi
#                                       compute_cap, else 90; BIASKIT_CUDA_ARCH=NN overrides), builds
#                                       with warnings as errors, runs the CUDA tests first
#                                       (test_cuda_tables, every check_<plugin>, the term fixture
#                                       tests test_kerple, test_mep, test_t5, test_qin, the backend
#                                       tests test_backend_layers, test_backend_attention,
#                                       test_backend_attention_v2 (the ABI 2 terms: coordinate
#                                       tables, masks with tile skipping, logit scales) and
#                                       test_device_step_cuda), then the whole suite; with
#                                       BIASKIT_GPU_BENCH=1, then bench/gpu/run.sh (GPT-2 small
#                                       tokens/s against PyTorch) and bench/gpu/attention.sh (the
#                                       fused attention against SDPA and FlexAttention; QUICK=1 for
#                                       its short grid); their tables land in $OUT too. Where one
#                                       command's time is limited, run them as commands of their own
#                                       after this one: PRECISIONS=... bash bench/gpu/run.sh, then
#                                       HEAD_DIMS=64 and HEAD_DIMS=128 bash bench/gpu/attention.sh, then
#                                       REPORT_ONLY=1 bash bench/gpu/attention.sh for the whole table.
#                                       A GPU test that is skipped, or whose output says its GPU
#                                       part was skipped, counts as a failure here: the point is the GPU.
#   scripts/gpu-test.sh --check-prefix  HERE (no GPU needed): the same unpack + configure (CUDA on when
#                                       nvcc is found) + build + ctest, against ONLY the unpacked
#                                       prefix (system .pc files hidden; the libraries, headers and
#                                       link paths used are checked to come from the prefix), into
#                                       build-gpu-check. Proves .debs/ is complete. GPU skips are
#                                       expected and reported, not failures. Same as
#                                       BIASKIT_GPU_TEST_CHECK_PREFIX=1 scripts/gpu-test.sh.
#
# The log (everything printed, ending with a summary of passed / failed / skipped tests) goes to
# stdout and to $OUT/gpu-test.log when $OUT is set, else to <build dir>/gpu-test.log.
# Exit status 0 only when everything passed (and, on the GPU machine, nothing GPU was skipped).
set -euo pipefail
export LC_ALL=C

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
debs_dir=$src/.debs
multiarch=x86_64-linux-gnu
# Debian 12 names. The -dev packages, their run-time libraries, pkgconf (pkg-config) with its library,
# and libgfortran5 + libquadmath0 (needed by OpenBLAS; used only when the system lacks them).
# libopenblas-dev, libopenblas0 and pkg-config hold no files of their own in bookworm; kept so that
# the set is the one scripts/setup.sh installs.
packages=(libtomlplusplus-dev libtomlplusplus3 libcmocka-dev libcmocka0 libcjson-dev libcjson1
          libopenblas-dev libopenblas0 libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libquadmath0
          pkg-config pkgconf pkgconf-bin libpkgconf3)
# The CUDA tests: the CUDA tables, `biaskit check` of every plugin (its CUDA table vs host check), the
# term fixture tests (their CUDA comparisons), the backend layer and attention tests (CUDA backend vs
# CPU) and test_device_step_cuda (whole training steps, determinism, CPU -> GPU -> CPU resume).
gpu_tests_re='cuda|check_|backend|^test_(kerple|mep|t5|qin)$'

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}
die() {
    echo "gpu-test: error: $*" >&2
    exit 1
}

mode=gpu
case "${1:-}" in
    --fetch) mode=fetch ;;
    --check-prefix) mode=check ;;
    "") ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac
if [ $# -gt 1 ]; then
    usage >&2
    exit 2
fi
if [ "${BIASKIT_GPU_TEST_CHECK_PREFIX:-0}" = 1 ] && [ "$mode" = gpu ]; then
    mode=check
fi

# --- --fetch: download the .deb files (here, with network)
fetch() {
    command -v apt-get >/dev/null || die "apt-get not found: --fetch runs on a Debian 12 (bookworm) machine with network"
    command -v dpkg-deb >/dev/null || die "dpkg-deb not found: --fetch runs on a Debian machine"
    arch=$(dpkg --print-architecture)
    [ "$arch" = amd64 ] || die "this machine is $arch; the GPU machine is x86-64, so fetch on an amd64 machine"
    mkdir -p "$debs_dir"
    rm -f "$debs_dir"/*.deb
    echo "gpu-test: downloading ${#packages[@]} packages into $debs_dir"
    # apt-get download runs as root here; its sandbox user _apt cannot write to the folder: harmless
    if ! (cd "$debs_dir" && apt-get download -q "${packages[@]}"); then
        die "apt-get download failed (no network? stale lists? try: apt-get update)"
    fi
    for p in "${packages[@]}"; do
        found=("$debs_dir/${p}_"*.deb)
        [ -e "${found[0]}" ] || die "package $p was not downloaded"
    done
    ls -l "$debs_dir"
    echo "gpu-test: .debs/ holds $(du -sh "$debs_dir" | cut -f1) (carry it: the device tool's carry takes 64 MiB in all)"
}

if [ "$mode" = fetch ]; then
    fetch
    exit 0
fi

if [ "$mode" = check ]; then
    build=${BUILD_DIR:-$src/build-gpu-check}
else
    build=${BUILD_DIR:-$src/build-gpu}
fi
case "$build" in /*) ;; *) build=$src/$build ;; esac
prefix=$build/prefix
mkdir -p "$build"
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    log=$OUT/gpu-test.log
else
    log=$build/gpu-test.log
fi
jobs=$(nproc 2>/dev/null || echo 2)

section() {
    printf '\n=== %s  (%s)\n' "$*" "$(date -u +%H:%M:%S)"
}

first_line() { # the first line of a string, without a pipe into head (SIGPIPE under pipefail)
    printf '%s\n' "${1%%$'\n'*}"
}

# --- unpacking .deb files without dpkg when it is missing: ar + tar (xz, zstd or gzip)
unpack_deb() { # unpack_deb FILE.deb DEST
    local deb=$1 dest=$2
    if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$dest"
        return
    fi
    command -v ar >/dev/null || die "neither dpkg-deb nor ar (binutils) found: cannot unpack $deb"
    local tmp member
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$deb") || die "ar could not read $deb"
    member=$(cd "$tmp" && { ls data.tar* 2>/dev/null || true; })
    member=$(first_line "$member")
    case "$member" in
        data.tar.xz)
            command -v xz >/dev/null || die "xz not found: needed to unpack $deb (data.tar.xz)"
            xz -dc "$tmp/$member" | tar -x -C "$dest" ;;
        data.tar.zst)
            command -v zstd >/dev/null || die "zstd not found: needed to unpack $deb (data.tar.zst)"
            zstd -dc "$tmp/$member" | tar -x -C "$dest" ;;
        data.tar.gz) tar -xzf "$tmp/$member" -C "$dest" ;;
        data.tar) tar -xf "$tmp/$member" -C "$dest" ;;
        *) die "no data.tar.{xz,zst,gz} in $deb" ;;
    esac
    rm -rf "$tmp"
}

system_has_lib() { # system_has_lib libfoo.so.N: the dynamic loader knows it
    local cache
    cache=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
    case "$cache" in *"$1 "*) return 0 ;; esac
    return 1
}

# Unpacks .debs/ into $prefix (once per set of .deb files), rewrites the .pc files' /usr to the
# prefix, and writes $prefix/bin/pkg-config: pkgconf of the prefix that sees only the prefix's .pc
# files (plus PKG_CONFIG_PATH entries outside the system folders, e.g. the SDK that test_install
# installs into a temporary folder).
setup_prefix() {
    local debs_list stamp sum p
    [ "$(uname -m)" = x86_64 ] || die "the .deb files of .debs/ are amd64; this machine is $(uname -m)"
    # Debian 12's libraries and pkgconf need glibc 2.34 or later (Ubuntu 22.04 and later have it)
    local glibc
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || true)
    glibc=${glibc#glibc }
    case "$glibc" in
        2.[0-9] | 2.[0-9].* | 2.[12][0-9] | 2.[12][0-9].* | 2.3[0-3] | 2.3[0-3].*)
            die "glibc $glibc here; the Debian 12 packages of .debs/ need 2.34 or later: install the -dev packages of scripts/setup.sh instead" ;;
    esac
    debs_list=$(ls "$debs_dir"/*.deb 2>/dev/null || true)
    [ -n "$debs_list" ] || die "the build dependencies are not installed here (pkg-config, toml++, cJSON, cmocka, OpenBLAS-OpenMP) and $debs_dir holds no .deb files: run 'scripts/gpu-test.sh --fetch' on a Debian 12 machine with network and carry .debs/ here"
    for p in "${packages[@]}"; do
        case "$debs_list" in *"/${p}_"*) ;; *) die "$debs_dir lacks the package $p: run 'scripts/gpu-test.sh --fetch' again" ;; esac
    done
    case "$prefix" in *'#'* | *$'\n'*) die "the build folder's path must not hold '#' or a newline: $prefix" ;; esac
    sum=$(ls -l "$debs_dir"/*.deb; echo "mode $mode")
    stamp=$prefix/.unpacked
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ]; then
        echo "gpu-test: $prefix already holds the unpacked .debs"
    else
        rm -rf "$prefix"
        mkdir -p "$prefix"
        local deb name
        for deb in "$debs_dir"/*.deb; do
            name=$(basename "$deb")
            name=${name%%_*}
            # the GCC run-time libraries of OpenBLAS: the system's own copy wins on the GPU machine
            # (ours would shadow a newer one through LD_LIBRARY_PATH); --check-prefix uses ours
            if [ "$mode" = gpu ]; then
                case "$name" in
                    libgfortran5) if system_has_lib libgfortran.so.5; then echo "gpu-test: using the system's libgfortran.so.5"; continue; fi ;;
                    libquadmath0) if system_has_lib libquadmath.so.0; then echo "gpu-test: using the system's libquadmath.so.0"; continue; fi ;;
                esac
            fi
            echo "gpu-test: unpacking $(basename "$deb")"
            unpack_deb "$deb" "$prefix"
        done
        # the .pc files say /usr (prefix=/usr, libdir=/usr/lib/..., -I/usr/include): point them here
        local pc
        while IFS= read -r pc; do
            sed -i -E "s#(^|[=[:space:]]|-I|-L)/usr(/|[[:space:]]|\$)#\\1$prefix/usr\\2#g" "$pc"
        done < <(find "$prefix/usr" -name '*.pc' -type f)
        printf '%s\n' "$sum" >"$stamp"
    fi
    [ -x "$prefix/usr/bin/pkgconf" ] || die "pkgconf is missing from $prefix (package pkgconf-bin)"
    local lib=$prefix/usr/lib/$multiarch
    pc_libdir=$lib/openblas-openmp/pkgconfig:$lib/pkgconfig:$prefix/usr/share/pkgconfig
    mkdir -p "$prefix/bin"
    cat >"$prefix/bin/pkg-config" <<EOF
#!/bin/sh
# pkgconf of $prefix, seeing only its .pc files (written by scripts/gpu-test.sh): the system's
# folders are dropped from PKG_CONFIG_PATH (core/CMakeLists.txt adds the system's OpenBLAS-OpenMP one).
PKG_CONFIG_LIBDIR='$pc_libdir'
keep=
old_ifs=\$IFS
IFS=:
for d in \${PKG_CONFIG_PATH:-}; do
    case "\$d" in
        '$prefix'/*) ;;
        /usr/* | /lib/* | /lib64/* | /usr | /lib | "") continue ;;
    esac
    keep=\${keep:+\$keep:}\$d
done
IFS=\$old_ifs
PKG_CONFIG_PATH=\$keep
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH
unset PKG_CONFIG_SYSROOT_DIR
LD_LIBRARY_PATH='$lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec '$prefix/usr/bin/pkgconf' "\$@"
EOF
    chmod +x "$prefix/bin/pkg-config"
    ln -sf pkg-config "$prefix/bin/pkgconf"
    export PATH="$prefix/bin:$PATH"
    export PKG_CONFIG_LIBDIR="$pc_libdir"
    export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
    # the tests and the plugins they load find libopenblas, libcjson, libtomlplusplus, libcmocka here
    export LD_LIBRARY_PATH="$lib/openblas-openmp:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    pkg_config=$prefix/bin/pkg-config
    local m
    for m in tomlplusplus libcjson cmocka openblas; do
        "$pkg_config" --exists "$m" || die "pkg-config of the prefix does not find $m"
        echo "gpu-test: $m $("$pkg_config" --modversion "$m"): $("$pkg_config" --cflags --libs "$m")"
    done
}

# Every library, header and link path the build used comes from the prefix (--check-prefix, and on
# the GPU machine when the prefix is used).
check_build_uses_prefix() {
    local bad=0 line
    while IFS= read -r line; do
        case "$line" in
            pkgcfg_lib_*:FILEPATH="$prefix/"*) ;;
            pkgcfg_lib_*:FILEPATH=*) echo "gpu-test: FAIL: a library outside the prefix: $line"; bad=1 ;;
        esac
    done < <(grep '^pkgcfg_lib_' "$build/CMakeCache.txt" || true)
    grep -q "^pkgcfg_lib_OPENBLAS_openblas:FILEPATH=$prefix/usr/lib/$multiarch/openblas-openmp/" "$build/CMakeCache.txt" ||
        { echo "gpu-test: FAIL: OpenBLAS is not the prefix's OpenMP build"; bad=1; }
    local ldd_out
    ldd_out=$(ldd "$build/biaskit") || { echo "gpu-test: FAIL: ldd $build/biaskit"; bad=1; }
    for lib in libopenblas.so.0 libcjson.so.1 libtomlplusplus.so.3; do
        line=$(printf '%s\n' "$ldd_out" | grep -F "$lib" || true)
        case "$line" in
            *"=> $prefix/"*) echo "gpu-test: biaskit loads $lib from the prefix" ;;
            *) echo "gpu-test: FAIL: biaskit does not load $lib from the prefix: ${line:-not linked}"; bad=1 ;;
        esac
    done
    if [ -f "$build/build.ninja" ]; then
        local deps
        deps=$(cd "$build" && ninja -t deps) || { echo "gpu-test: FAIL: ninja -t deps"; bad=1; }
        line=$(printf '%s\n' "$deps" | grep -E '^[[:space:]]+/usr/include/(toml\+\+|cjson|cmocka|x86_64-linux-gnu/openblas)' || true)
        if [ -n "$line" ]; then
            echo "gpu-test: FAIL: headers read from the system instead of the prefix:"
            printf '%s\n' "$line" | sort -u
            bad=1
        else
            echo "gpu-test: every toml++, cJSON, cmocka and OpenBLAS header compiled was the prefix's"
        fi
    fi
    return "$bad"
}

# Summary of one ctest JUnit file: every test with its status; GPU tests skipped, or whose output
# says the GPU part was skipped, are listed apart. Prints the lines and returns 1 when something failed.
summarize() { # summarize JUNIT TITLE STRICT(1: GPU skips are failures)
    python3 - "$1" "$2" "$3" "$gpu_tests_re" <<'EOF'
import re, sys
import xml.etree.ElementTree as ET
path, title, strict, gpu_re = sys.argv[1], sys.argv[2], sys.argv[3] == "1", re.compile(sys.argv[4])
gpu_skip_text = re.compile(r"no GPU answers|^SKIP  CUDA|no usable GPU", re.M)
passed, failed, skipped, gpu_skipped = [], [], [], []
for tc in ET.parse(path).getroot().iter("testcase"):
    name, status = tc.get("name"), tc.get("status")
    out = "".join(tc.find("system-out").itertext()) if tc.find("system-out") is not None else ""
    if status == "fail" or tc.find("failure") is not None:
        failed.append(name)
    elif status in ("notrun", "disabled") or tc.find("skipped") is not None:
        skipped.append(name)
        if gpu_re.search(name):
            gpu_skipped.append(f"{name} (skipped)")
    else:
        passed.append(name)
        if gpu_skip_text.search(out):
            m = gpu_skip_text.search(out)
            line = out[m.start():].split("\n", 1)[0]
            gpu_skipped.append(f"{name} (passed, but its GPU part was skipped: {line.strip()[:160]})")
print(f"--- {title}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
for label, names in (("passed", passed), ("FAILED", failed), ("skipped", skipped)):
    if names:
        print(f"  {label}: {' '.join(names)}")
if gpu_skipped:
    word = "FAILURE (this script exists to run them on a GPU)" if strict else "expected without a GPU"
    print(f"  GPU work skipped, {word}:")
    for g in gpu_skipped:
        print(f"    {g}")
sys.exit(1 if failed or (strict and gpu_skipped) else 0)
EOF
}

main() {
    local start=$SECONDS failures=()
    echo "gpu-test: mode $mode, source $src, build $build, log $log, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"

    section "tools"
    command -v cmake >/dev/null || die "cmake not found"
    command -v python3 >/dev/null || die "python3 not found (the summary and test_reference need it)"
    local cc cxx nvcc=
    cc=$(command -v cc || command -v gcc || true)
    cxx=$(command -v c++ || command -v g++ || true)
    [ -n "$cc" ] || die "no C compiler (cc or gcc) found"
    [ -n "$cxx" ] || die "no C++ compiler (c++ or g++) found: core/config/toml.cpp needs one"
    if [ -n "${CUDACXX:-}" ]; then nvcc=$CUDACXX
    elif command -v nvcc >/dev/null; then nvcc=$(command -v nvcc)
    elif [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc
    fi
    [ -n "$nvcc" ] || die "nvcc not found (on PATH, \$CUDACXX or /usr/local/cuda/bin/nvcc)"
    echo "cmake:   $(first_line "$(cmake --version)")"
    echo "cc:      $cc: $(first_line "$("$cc" --version)")"
    echo "c++:     $cxx: $(first_line "$("$cxx" --version)")"
    echo "nvcc:    $nvcc"
    "$nvcc" --version
    echo "python3: $(python3 -c 'import sys; print(sys.version.split()[0])')"
    # test_reference runs $BIASKIT_PYTHON (tests/test_reference.c): unless the caller chose one, the
    # first of the python3 on PATH (which holds torch on a GPU machine) and Debian's that imports torch
    if [ -z "${BIASKIT_PYTHON:-}" ]; then
        local candidate
        for candidate in "$(command -v python3)" /usr/bin/python3; do
            if [ -x "$candidate" ] && "$candidate" -c 'import torch' >/dev/null 2>&1; then
                BIASKIT_PYTHON=$candidate
                break
            fi
        done
    fi
    export BIASKIT_PYTHON=${BIASKIT_PYTHON:-python3}
    if "$BIASKIT_PYTHON" -c 'import torch, numpy; print(f"test_reference python: torch {torch.__version__} (CUDA available: {torch.cuda.is_available()}), numpy {numpy.__version__}")'; then
        :
    else
        echo "gpu-test: warning: $BIASKIT_PYTHON cannot import torch and numpy: test_reference will report skipped"
    fi

    section "GPU"
    local arch=${BIASKIT_CUDA_ARCH:-} smi_ok=0 caps
    if command -v nvidia-smi >/dev/null && nvidia-smi; then
        smi_ok=1
        caps=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader || true)
        printf '%s\n' "$caps"
        if [ -z "$arch" ]; then
            caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true)
            arch=$(first_line "$caps")
            arch=${arch//[^0-9]/}
        fi
    else
        if [ "$mode" = gpu ]; then
            die "nvidia-smi does not answer: no GPU here (for a machine without one: --check-prefix)"
        fi
        echo "gpu-test: no GPU answers here (expected with --check-prefix)"
    fi
    [ -n "$arch" ] || arch=90
    [[ "$arch" =~ ^[0-9]+$ ]] || die "bad CUDA architecture '$arch' (BIASKIT_CUDA_ARCH=NN, e.g. 90)"
    echo "gpu-test: CUDA architecture sm_$arch"

    section "dependencies"
    pkg_config=
    local use_prefix=0
    if [ "$mode" = check ]; then
        use_prefix=1
    elif command -v pkg-config >/dev/null && pkg-config --exists tomlplusplus libcjson cmocka openblas 2>/dev/null; then
        echo "gpu-test: the system has the build dependencies; .debs/ is not used"
    else
        echo "gpu-test: the system lacks the build dependencies: using .debs/"
        use_prefix=1
    fi
    if [ "$use_prefix" = 1 ]; then
        setup_prefix
    fi

    section "configure"
    local gen=() cfg=(-DBIASKIT_WERROR=ON -DBIASKIT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" "-DCMAKE_CUDA_ARCHITECTURES=$arch")
    if command -v ninja >/dev/null && { [ ! -f "$build/CMakeCache.txt" ] || [ -f "$build/build.ninja" ]; }; then
        gen=(-G Ninja)
    fi
    if [ -n "$pkg_config" ]; then
        cfg+=("-DPKG_CONFIG_EXECUTABLE=$pkg_config")
    fi
    cmake -S "$src" -B "$build" "${gen[@]}" "${cfg[@]}" 2>&1 | tee "$build/configure.log"
    grep -q '^-- biaskit: CUDA ON' "$build/configure.log" || die "CUDA is not enabled in the build (see the configure output above)"

    section "build (warnings are errors)"
    nice -n 10 cmake --build "$build" -j"$jobs"
    if [ "$use_prefix" = 1 ]; then
        section "the build uses the prefix only"
        check_build_uses_prefix || failures+=("the build used something outside the prefix")
    fi
    local version
    version=$("$build/biaskit" --version) || die "$build/biaskit --version failed"
    printf '%s\n' "$version"
    if [ "$mode" = gpu ]; then
        case "$version" in
            *"device: cpu"*) failures+=("biaskit sees no GPU: $(printf '%s\n' "$version" | grep 'device:')") ;;
        esac
    fi

    local strict=0
    [ "$mode" = gpu ] && strict=1
    section "the CUDA tests: ctest -R '$gpu_tests_re'"
    local gpu_rc=0 all_rc=0
    # whole outputs in the JUnit files (ctest keeps 1 KiB of a passed test's by default): the summary
    # reads them for "SKIP  CUDA ..." and "no GPU answers" lines
    local ctest_out=(--test-output-size-passed 4000000 --test-output-size-failed 4000000)
    nice -n 10 ctest --test-dir "$build" -R "$gpu_tests_re" -j"$jobs" --output-on-failure \
        "${ctest_out[@]}" --output-junit "$build/gpu-tests.xml" || gpu_rc=$?
    section "the whole suite"
    nice -n 10 ctest --test-dir "$build" -j"$jobs" --output-on-failure \
        "${ctest_out[@]}" --output-junit "$build/all-tests.xml" || all_rc=$?

    if [ "$mode" = gpu ] && [ "${BIASKIT_GPU_BENCH:-0}" = 1 ]; then
        section "benchmark: bench/gpu/run.sh (GPT-2 small, ALiBi)"
        BUILD_DIR=$build OUT=$(dirname "$log") bash "$src/bench/gpu/run.sh" || failures+=("bench/gpu/run.sh failed")
        section "benchmark: bench/gpu/attention.sh (fused attention against SDPA and FlexAttention)"
        BUILD_DIR=$build OUT=$(dirname "$log") bash "$src/bench/gpu/attention.sh" ||
            failures+=("bench/gpu/attention.sh failed")
    fi

    section "summary ($mode mode, sm_$arch, $((SECONDS - start)) s)"
    if [ "$use_prefix" = 1 ]; then
        echo "dependencies: unpacked from .debs/ into $prefix"
    else
        echo "dependencies: the system's"
    fi
    printf '%s\n' "$version"
    [ "$smi_ok" = 1 ] && echo "GPU: $(first_line "$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null || echo '?')")"
    if [ -f "$build/gpu-tests.xml" ]; then
        summarize "$build/gpu-tests.xml" "CUDA tests" "$strict" || failures+=("CUDA tests: a failure, or GPU work skipped on the GPU machine (see above)")
    else
        failures+=("CUDA tests: ctest wrote no results (exit $gpu_rc)")
    fi
    if [ -f "$build/all-tests.xml" ]; then
        summarize "$build/all-tests.xml" "whole suite" "$strict" || failures+=("whole suite: a failure, or GPU work skipped on the GPU machine (see above)")
    else
        failures+=("whole suite: ctest wrote no results (exit $all_rc)")
    fi
    [ "$gpu_rc" = 0 ] || failures+=("ctest of the CUDA tests exited $gpu_rc")
    [ "$all_rc" = 0 ] || failures+=("ctest of the whole suite exited $all_rc")
    if [ ${#failures[@]} -gt 0 ]; then
        echo "gpu-test: FAILED:"
        printf '  %s\n' "${failures[@]}"
        exit 1
    fi
    if [ "$mode" = check ]; then
        echo "gpu-test: OK: the prefix from .debs/ builds biaskit with CUDA and passes the suite (GPU tests skip here)"
    else
        echo "gpu-test: OK: every CUDA test ran on the GPU and passed, and so did the whole suite"
    fi
}

set +e
main 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "gpu-test: log written to $log (exit $status)"
exit "$status"
