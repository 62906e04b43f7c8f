#!/usr/bin/env bash
# Verifies all CUDA code of biaskit on a machine with a GPU and measures it, without network and
# without the Debian -dev packages installed there: the first-draw protocol of docs/performance.md.
#
#   scripts/gpu-test.sh --fetch         HERE, on a Debian 12 (bookworm, amd64) machine with network:
#                                       `apt-get download` the build dependencies (toml++, cmocka,
#                                       OpenBLAS for OpenMP, cJSON, pkgconf, and the libraries they
#                                       need at run time) into .debs/ (ignored by git; about 13 MB).
#                                       Carry .debs/ to the GPU machine with the working tree.
#   scripts/gpu-test.sh [--steps LIST] [--deadline S]
#                                       THERE: the protocol, its steps in this order, each killed
#                                       when it overruns its budget (seconds; the rest still run):
#       build        330  unpacks .debs/ into build-gpu/prefix when the system lacks the packages
#                         (never into /), prints nvidia-smi and nvcc, configures with CUDA for the
#                         GPU's architecture (nvidia-smi compute_cap, else 90; BIASKIT_CUDA_ARCH=NN
#                         overrides) and builds with warnings as errors; a failed configure or build
#                         fails the run, and every step after it is reported "not run"
#       cuda-tests   240  every CUDA test: ctest -R 'cuda|check_|backend|^test_(kerple|mep|t5|qin)$'
#                         (test_cuda_tables, every check_<plugin>, the term fixture tests, the
#                         backend layers / attention / attention_v2 tests against the CPU,
#                         test_device_step_cuda)
#       suite        150  the rest of the suite (ctest -E the same)
#       parity        90  each fused attention program against PyTorch in float64:
#                         bench_flash_gpu --dump, B=4 H=8 T=1024 D=64, KERPLE, forward + backward,
#                         fp32 and bf16 (n/a where a program has no bf16 version: fused2),
#                         checked by bench/gpu/check_dump.py
#       attention    300  QUICK=1 bench/gpu/attention.sh (T = 1024, 4096; D = 64, 128) against SDPA and
#                         FlexAttention, then each further fused program bench_flash_gpu lists
#                         (--attention ...) beside "fused" at the same shapes, fp32 and bf16: today
#                         "fused2", the second generation (fp32/tf32 only: the register-tiled
#                         forward and the one-pass, 5-product backward)
#       gpt2         300  bench/gpu/run.sh: GPT-2 small training tokens/s against PyTorch eager, SDPA
#                         and torch.compile + FlexAttention (PRECISIONS="bf16 tf32 fp32": the most
#                         wanted rows first, so that an overrun keeps them)
#       nccl          60  the NCCL half of data parallelism, two processes on one GPU, when the build
#                         has NCCL and mpirun is there; else "skipped" with the reason (today the
#                         engine has no NCCL path: docs/scaling.md)
#                         total 1470 s, within 25 minutes of device time.
#       --steps a,b,...   only these steps (the order stays the protocol's); a step needing the build
#                         runs `build` first when the build directory has no biaskit yet
#       --deadline S      the whole run's seconds (default 1500): a step gets min(budget, what is
#                         left); a step with under 20 s left is "not run: out of time". Where one
#                         command's time is limited (the device tool: 600 s), split the protocol:
#                           scripts/gpu-test.sh --deadline 570 --steps build,cuda-tests
#                           scripts/gpu-test.sh --deadline 570 --steps suite,parity,attention
#                           scripts/gpu-test.sh --deadline 570 --steps gpt2,nccl
#                         (build-gpu must survive between the calls, else `build` reruns first).
#       BIASKIT_GPU_BUDGET_<STEP>=S (e.g. BIASKIT_GPU_BUDGET_GPT2=400) overrides one step's budget.
#   scripts/gpu-test.sh --check-prefix  HERE (no GPU needed): the same unpack + configure (CUDA on when
#                                       nvcc is found) + build + ctest, against ONLY the unpacked
#                                       prefix (system .pc files hidden; the libraries, headers and
#                                       link paths used are checked to come from the prefix), into
#                                       build-gpu-check; steps build, cuda-tests, suite. Proves .debs/
#                                       is complete. GPU skips are expected and reported, not
#                                       failures. Same as BIASKIT_GPU_TEST_CHECK_PREFIX=1.
#   scripts/gpu-test.sh --self-test     ANYWHERE (no GPU, CUDA or build): the summary's logic on the
#                                       recorded runs of tests/gpu_fixtures/ (each says the exit
#                                       status and lines it must give), and the step runner on fake
#                                       steps (a failing one, one killed at its budget); exit 0 only
#                                       when each is classified right. ctest runs it (gpu_test_self_test).
#   scripts/gpu-test.sh --plan          prints the steps, budgets and commands; runs nothing.
#
# The summary classifies the tests by what they say. A GPU test skipped (ctest "not run"), or a test
# whose output says that a GPU was missing ("no GPU answers", "no usable GPU", `biaskit check`'s
# "SKIP  ... no GPU (...)", "... hand-written CUDA path is unverified", "WARN  ... the device side runs
# only on a GPU"), is "GPU work skipped": a failure on the GPU machine, expected with --check-prefix.
# A check item skipped because there is nothing to compare ("no parameters with the default
# configuration", "the plugin has no table_cuda()", "no host table_backward() to compare with", ...)
# is fine anywhere. A "SKIP  CUDA ..." item that says neither is "unrecognised": a failure on the GPU
# machine (read it, then teach the summary), a note elsewhere.
#
# Outputs: the log (everything printed) goes to stdout and to $OUT/gpu-test.log when $OUT is set, else
# to <build dir>/gpu-test.log; ONE results file, gpu-results.md beside it (the steps with their status
# and time, the GPU, the test summaries, parity verdicts, the attention and GPT-2 tables), from which
# docs/performance.md's tables are filled; it gathers every step run into the same build directory, so
# the last of a split run's calls has them all. Each step's whole output: <build dir>/gpu-run/.
# Exit status: 0 every step asked for passed (on the GPU machine: no GPU work skipped); 1 a step failed,
# was killed at its budget or was not run; 2 bad arguments; 3 no GPU answered (nvidia-smi): nothing
# was built or measured, and the log and results file say so.
set -euo pipefail
export LC_ALL=C

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
self=$src/scripts/gpu-test.sh
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
# The protocol: steps in order, with their budgets in seconds (docs/performance.md, "First GPU run").
all_steps=(build cuda-tests suite parity attention gpt2 nccl)
declare -A budget=([build]=330 [cuda-tests]=240 [suite]=150 [parity]=90 [attention]=300 [gpt2]=300 [nccl]=60)

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}
die() {
    echo "gpu-test: error: $*" >&2
    exit 1
}

mode=gpu
steps_arg=
deadline=1500
while [ $# -gt 0 ]; do
    case "$1" in
        --fetch) mode=fetch ;;
        --check-prefix) mode=check ;;
        --self-test) mode=selftest ;;
        --plan) mode=plan ;;
        --internal-step) mode=internal; shift; [ $# -gt 0 ] || { usage >&2; exit 2; }; internal_step=$1 ;;
        --steps) shift; [ $# -gt 0 ] || { usage >&2; exit 2; }; steps_arg=$1 ;;
        --steps=*) steps_arg=${1#--steps=} ;;
        --deadline) shift; [ $# -gt 0 ] || { usage >&2; exit 2; }; deadline=$1 ;;
        --deadline=*) deadline=${1#--deadline=} ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu-test: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "gpu-test: --deadline takes seconds, not '$deadline'" >&2; exit 2; }
if [ "${BIASKIT_GPU_TEST_CHECK_PREFIX:-0}" = 1 ] && [ "$mode" = gpu ]; then
    mode=check
fi
for s in "${all_steps[@]}"; do # BIASKIT_GPU_BUDGET_CUDA_TESTS=...: one step's budget
    var=BIASKIT_GPU_BUDGET_$(tr 'a-z-' 'A-Z_' <<<"$s")
    if [ -n "${!var:-}" ]; then
        [[ "${!var}" =~ ^[0-9]+$ ]] || { echo "gpu-test: $var takes seconds, not '${!var}'" >&2; exit 2; }
        budget[$s]=${!var}
    fi
done
# the steps asked for, in the protocol's order
selected=()
if [ -n "$steps_arg" ]; then
    IFS=, read -r -a asked <<<"$steps_arg"
    for a in "${asked[@]}"; do
        [ -n "${budget[$a]:-}" ] || { echo "gpu-test: unknown step '$a' (steps: ${all_steps[*]})" >&2; exit 2; }
    done
    for s in "${all_steps[@]}"; do
        for a in "${asked[@]}"; do [ "$a" = "$s" ] && { selected+=("$s"); break; }; done
    done
elif [ "$mode" = check ]; then
    selected=(build cuda-tests suite)
else
    selected=("${all_steps[@]}")
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


# --- the summary: what the steps and the tests said, classified; the exit status of the run.
# summarize STATE_DIR STRICT RUN_ID: reads STATE_DIR/steps.tsv (one line a step: run id, step, status,
# exit code, seconds, budget, note; a later line of a step wins) and the ctest JUnit files of the test
# steps (cuda-tests.xml, suite.xml), prints a markdown summary, returns 1 when a step of this run
# (RUN_ID) failed, was killed or was not run, or a test of this run failed, or (STRICT=1, the GPU
# machine) GPU work was skipped or a CUDA skip was not recognised. Steps of earlier calls into the same
# build directory are shown, marked, and do not count. BIASKIT_GPU_TEST_BROKEN=prefix: the summary
# before issue 26 (any "SKIP  CUDA" line is a GPU skip), only for --self-test to show it would fail.
summarize() {
    python3 - "$1" "$2" "$3" "$gpu_tests_re" "${BIASKIT_GPU_TEST_BROKEN:-}" <<'PYEOF'
import os, re, sys
import xml.etree.ElementTree as ET
state, strict, run_id, gpu_re, broken = sys.argv[1], sys.argv[2] == "1", sys.argv[3], re.compile(sys.argv[4]), sys.argv[5]

# A GPU was missing: the tests' own words (tests/test_*.c "no GPU answers", core/cuda/device.cu "no
# usable GPU", `biaskit check` (core/check/cuda.c): "CUDA table vs host: no GPU (<device>)...",
# "...this plugin's hand-written CUDA path is unverified", the WARN "the device side runs only on a GPU").
GPU_ABSENT = re.compile(r"no GPU answers|no usable GPU|\bno GPU \(|hand-written CUDA path is unverified|"
                        r"device side runs only on a GPU|skipping the CUDA backend")
# Nothing to compare (core/check/cuda.c): no parameters in the default configuration (alibi, qin, mep,
# ape, ...), no CUDA hook (the engine computes on the host and copies), no host function to compare
# with, no source to search for __CUDA_ARCH__.
NOTHING = re.compile(r"no parameters with the default configuration|the plugin has no (table|embed)_cuda\(\)|"
                     r"no host (table|embed)_backward\(\) to compare with|not looked for")
OLD = re.compile(r"no GPU answers|^SKIP  CUDA|no usable GPU", re.M)  # the summary before issue 26

def classify(path):
    """Per test: passed / failed / skipped, and the lines that say GPU work was skipped."""
    r = {"passed": [], "failed": [], "skipped": [], "gpu": [], "unknown": [], "nothing": 0}
    for tc in ET.parse(path).getroot().iter("testcase"):
        name, status = tc.get("name"), tc.get("status")
        so = tc.find("system-out")
        out = "".join(so.itertext()) if so is not None else ""
        lines = [l.strip() for l in out.splitlines() if l.strip()]
        first = lines[0] if lines else ""
        if status == "fail" or tc.find("failure") is not None:
            r["failed"].append(f"{name}: {first[:160]}" if first else name)
            continue
        if status in ("notrun", "disabled") or tc.find("skipped") is not None:
            r["skipped"].append(name)
            why = next((l for l in lines if re.match(r"skip", l, re.I)), first)
            if gpu_re.search(name):
                r["gpu"].append(f"{name} (skipped: {why[:160]})")
            continue
        r["passed"].append(name)
        if broken == "prefix":
            m = OLD.search(out)
            if m:
                r["gpu"].append(f"{name} (passed, but: {out[m.start():].splitlines()[0][:160]})")
            continue
        for line in out.splitlines():
            item = line.startswith(("SKIP  ", "WARN  "))
            if GPU_ABSENT.search(line):
                r["gpu"].append(f"{name} (passed, but its GPU part was skipped: {line.strip()[:160]})")
            elif item and NOTHING.search(line):
                r["nothing"] += 1
            elif line.startswith("SKIP  ") and "CUDA" in line:
                r["unknown"].append(f"{name}: {line.strip()[:160]}")
    return r

steps, order = {}, []
path = os.path.join(state, "steps.tsv")
if os.path.exists(path):
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 7:
            continue
        if f[1] not in steps:
            order.append(f[1])
        steps[f[1]] = f
failures = []
print("| step | status | seconds | budget | note |")
print("|---|---|---:|---:|---|")
for s in order:
    rid, name, status, rc, secs, bud, note = steps[s][:7]
    mine = rid == run_id
    shown = status if mine else f"{status} (an earlier call)"
    print(f"| {name} | {shown} | {secs} | {bud} | {note.replace('|', '/')} |")
    if mine and status not in ("ok", "skipped"):
        failures.append(f"step {name}: {status}: {note}")
if not order:
    print("| (none) | no step ran | | | |")
    failures.append("no step ran")

for step, title in (("cuda-tests", "CUDA tests"), ("suite", "the rest of the suite")):
    x = os.path.join(state, f"{step}.xml")
    if step not in steps or not os.path.exists(x):
        continue
    mine = steps[step][0] == run_id
    try:
        r = classify(x)
    except ET.ParseError as e:
        print(f"\n{title}: {x} is not a JUnit file: {e}")
        if mine:
            failures.append(f"{title}: unreadable results")
        continue
    print(f"\n--- {title}{'' if mine else ' (an earlier call)'}: {len(r['passed'])} passed, {len(r['failed'])} failed, "
          f"{len(r['skipped'])} skipped; {r['nothing']} check items with nothing to compare (fine)")
    for label in ("failed", "skipped"):
        if r[label]:
            print(f"  {label}:")
            for n in r[label]:
                print(f"    {n}")
    if r["gpu"]:
        word = "FAILURE: this run exists to run them on a GPU" if strict else "expected without a GPU"
        print(f"  GPU work skipped ({word}):")
        for g in r["gpu"]:
            print(f"    {g}")
    if r["unknown"]:
        word = "FAILURE until the summary knows them" if strict else "a note"
        print(f"  CUDA skips not recognised ({word}; scripts/gpu-test.sh, summarize):")
        for g in r["unknown"]:
            print(f"    {g}")
    if mine:
        if r["failed"]:
            failures.append(f"{title}: {len(r['failed'])} failed")
        if strict and r["gpu"]:
            failures.append(f"{title}: GPU work skipped on the GPU machine ({len(r['gpu'])})")
        if strict and r["unknown"]:
            failures.append(f"{title}: CUDA skips not recognised ({len(r['unknown'])})")
print()
if failures:
    print("gpu-test: FAILED:")
    for f in failures:
        print(f"  {f}")
    sys.exit(1)
print("gpu-test: OK: every step asked for passed" + (" and no GPU work was skipped" if strict else ""))
PYEOF
}

# --- the step runner: each step is this script again (--internal-step NAME) under `timeout`, which
# kills the step's whole process group at its budget; its exit status, time and note go to steps.tsv.
record_step() { # record_step STEP STATUS RC SECONDS BUDGET NOTE
    local note=${6//$'\t'/ }
    note=${note//$'\n'/ }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$run_id" "$1" "$2" "$3" "$4" "$5" "${note:0:300}" >>"$state/steps.tsv"
}
last_line_of() { # the last non-empty line of a file, or ""
    [ -f "$1" ] || return 0
    awk 'NF { l = $0 } END { print l }' "$1"
}
run_step() { # run_step STEP BUDGET COMMAND...: runs it (killed at min(BUDGET, what the deadline leaves))
    local name=$1 want=$2 left b start rc tee_rc secs note status
    shift 2
    left=$((deadline - (SECONDS - run_start)))
    b=$((want < left ? want : left))
    if [ "$left" -lt 20 ]; then
        echo "gpu-test: step $name not run: out of time ($left s of the ${deadline} s deadline left)"
        record_step "$name" not-run - 0 "$want" "out of time: $left s of the $deadline s deadline left"
        return
    fi
    section "step $name (budget $b s)"
    rm -f "$state/$name.skip"
    start=$SECONDS
    set +e # each status is read here, from PIPESTATUS
    timeout -k 10 "$b" "$@" 2>&1 | tee "$state/$name.log"
    local ps=("${PIPESTATUS[@]}")
    set -e
    rc=${ps[0]} tee_rc=${ps[1]}
    secs=$((SECONDS - start))
    if [ "${BIASKIT_GPU_TEST_BROKEN:-}" = status ]; then
        rc=0 # test-only: the script before issue 26, where a failed step did not reach the exit status
    fi
    case "$rc" in
        0) status=ok note="" ;;
        77) status=skipped note=$(cat "$state/$name.skip" 2>/dev/null || echo "the step skipped itself") ;;
        124 | 137) status=timeout note="killed at its budget of $b s: $(last_line_of "$state/$name.log")" ;;
        *) status=failed note="exit $rc: $(last_line_of "$state/$name.log")" ;;
    esac
    [ "$tee_rc" = 0 ] || note="$note (tee exited $tee_rc: the log may be incomplete)"
    echo "gpu-test: step $name: $status in $secs s${note:+: $note}"
    record_step "$name" "$status" "$rc" "$secs" "$b" "$note"
}

# --- self-test: the summary on tests/gpu_fixtures/*/ and the runner on fake steps (no GPU, no build)
indent() { sed 's/^/    /'; }
self_test() {
    local fixtures=$src/tests/gpu_fixtures d bad=0 n=0 out rc want strict runid line
    command -v python3 >/dev/null || die "python3 not found (the summary needs it)"
    command -v timeout >/dev/null || die "timeout (coreutils) not found"
    for d in "$fixtures"/*/; do
        d=${d%/}
        [ -f "$d/expect" ] || continue
        n=$((n + 1))
        want=$(sed -n 's/^exit //p' "$d/expect")
        strict=$(sed -n 's/^strict //p' "$d/expect")
        runid=$(sed -n 's/^run //p' "$d/expect")
        rc=0
        out=$(summarize "$d" "${strict:-1}" "${runid:-r1}") || rc=$?
        local why=()
        [ "$rc" = "$want" ] || why+=("exit $rc, expected $want")
        while IFS= read -r line; do
            case "$line" in
                "line: "*) grep -qF -- "${line#line: }" <<<"$out" || why+=("no line containing: ${line#line: }") ;;
                "no-line: "*) ! grep -qF -- "${line#no-line: }" <<<"$out" || why+=("a line containing: ${line#no-line: }") ;;
            esac
        done <"$d/expect"
        if [ ${#why[@]} -eq 0 ]; then
            echo "ok: $(basename "$d"): exit $rc ($(sed -n 's/^about //p' "$d/expect"))"
        else
            echo "FAIL: $(basename "$d"): $(printf '%s; ' "${why[@]}")"
            indent <<<"$out"
            bad=1
        fi
    done
    [ "$n" -ge 5 ] || { echo "FAIL: only $n fixtures found in $fixtures"; bad=1; }

    # the runner: a failing step, a step killed at its budget, a step that skips itself, one out of
    # time: each status reaches steps.tsv and the exit status
    local tmp
    tmp=$(mktemp -d)
    state=$tmp run_id=self deadline=100 run_start=$SECONDS
    export BK_GT_STATE=$tmp
    run_step fake-ok 30 bash -c 'echo fine' >/dev/null
    # shellcheck disable=SC2016 # expanded by the step's bash
    run_step fake-skip 30 bash -c 'echo "no NCCL here" >"$BK_GT_STATE/fake-skip.skip"; exit 77' >/dev/null
    run_step fake-fail 30 bash -c 'echo "ninja: build stopped: subcommand failed."; exit 1' >/dev/null
    run_step fake-slow 2 bash -c 'echo started; sleep 60; echo never' >/dev/null
    deadline=$((SECONDS - run_start + 5))
    run_step fake-late 30 bash -c 'echo never' >/dev/null
    rc=0
    out=$(summarize "$tmp" 1 self) || rc=$?
    local w
    for w in "| fake-ok | ok |" "| fake-skip | skipped |" "no NCCL here" "| fake-fail | failed |" \
             "exit 1: ninja: build stopped: subcommand failed." "| fake-slow | timeout |" "killed at its budget of 2 s: started" \
             "| fake-late | not-run |" "out of time"; do
        grep -qF -- "$w" <<<"$out" || { echo "FAIL: runner: no line containing: $w"; bad=1; }
    done
    if [ "$rc" = 1 ] && ! grep -q never "$tmp/fake-slow.log"; then
        echo "ok: runner: failed, killed and not-run steps reach the exit status (1); skipped and ok do not"
    else
        echo "FAIL: runner: exit $rc (expected 1), or the slow step was not killed"
        indent <<<"$out"
        bad=1
    fi
    # ... and a run of only ok and skipped steps exits 0
    : >"$tmp/steps.tsv"
    run_id=self2
    deadline=100 run_start=$SECONDS
    run_step fake-ok 30 true >/dev/null
    # shellcheck disable=SC2016 # expanded by the step's bash
    run_step fake-skip 30 bash -c 'echo "not here" >"$BK_GT_STATE/fake-skip.skip"; exit 77' >/dev/null
    rc=0
    out=$(summarize "$tmp" 1 self2) || rc=$?
    if [ "$rc" = 0 ]; then
        echo "ok: runner: ok and skipped steps exit 0"
    else
        echo "FAIL: runner: ok and skipped steps exit $rc"
        indent <<<"$out"
        bad=1
    fi
    rm -rf "$tmp"
    if [ "$bad" = 0 ]; then
        echo "gpu-test: self-test passed: $n fixtures and the step runner classified right"
        return 0
    fi
    echo "gpu-test: self-test FAILED"
    return 1
}

# --- the steps (each runs as `gpu-test.sh --internal-step NAME`, with the BK_GT_* variables main set)
step_build() {
    local gen=() cfg=(-DBIASKIT_WERROR=ON -DBIASKIT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$BK_GT_NVCC"
                      "-DCMAKE_CUDA_ARCHITECTURES=$BK_GT_ARCH")
    if command -v ninja >/dev/null && { [ ! -f "$build/CMakeCache.txt" ] || [ -f "$build/build.ninja" ]; }; then
        gen=(-G Ninja)
    fi
    [ -z "$BK_GT_PKG_CONFIG" ] || cfg+=("-DPKG_CONFIG_EXECUTABLE=$BK_GT_PKG_CONFIG")
    echo "gpu-test: configure: cmake -S $src -B $build ${gen[*]} ${cfg[*]}"
    local rc=0
    cmake -S "$src" -B "$build" "${gen[@]}" "${cfg[@]}" >"$build/configure.log" 2>&1 || rc=$?
    cat "$build/configure.log"
    [ "$rc" = 0 ] || die "CMake configure failed (exit $rc; see above)"
    grep -q '^-- biaskit: CUDA ON' "$build/configure.log" || die "CUDA is not enabled in the build (see the configure output above)"
    echo "gpu-test: build (warnings are errors), $jobs jobs"
    nice -n 10 cmake --build "$build" -j"$jobs" || die "the build failed (exit $?; see above)"
    if [ "$BK_GT_USE_PREFIX" = 1 ]; then
        check_build_uses_prefix || die "the build used something outside the prefix"
    fi
    local version
    version=$("$build/biaskit" --version) || die "$build/biaskit --version failed"
    printf '%s\n' "$version"
    {
        echo '```'
        printf '%s\n' "$version"
        echo '```'
    } >"$state/results/build.md"
    if [ "$BK_GT_MODE" = gpu ]; then
        case "$version" in
            *"device: cpu"*) die "biaskit sees no GPU: $(grep 'device:' <<<"$version")" ;;
        esac
    fi
}

# ctest with the whole output of each test in the JUnit file (ctest keeps 1 KiB of a passed test's by
# default): the summary reads it for the lines that say a GPU was missing.
run_ctest() { # run_ctest STEP ARGS...: exit status of ctest
    local name=$1
    shift
    rm -f "$state/$name.xml"
    nice -n 10 ctest --test-dir "$build" -j"$jobs" --output-on-failure --test-output-size-passed 4000000 \
        --test-output-size-failed 4000000 --output-junit "$state/$name.xml" "$@"
}
step_cuda_tests() { run_ctest cuda-tests -R "$gpu_tests_re"; }
step_suite() { run_ctest suite -E "$gpu_tests_re"; }

# The fused attention programs bench_flash_gpu offers (its usage line: --attention a|b|...), without
# "materialized" (the unfused reference). Today: "fused" and "fused2" (the second generation, forward and backward);
# a program listed there is run by every step below.
fused_programs() {
    local usage_text
    usage_text=$("$build/bench_flash_gpu" --help 2>&1 || true)
    grep -o -- '--attention [a-z0-9_|]*' <<<"$usage_text" | head -n 1 | sed 's/--attention //' | tr '|' '\n' |
        grep -vx materialized || true
}

step_parity() {
    local out=$state/results/parity.md progs p dt dir log fail=0
    [ -x "$build/bench_flash_gpu" ] || die "$build/bench_flash_gpu not built"
    progs=$(fused_programs)
    [ -n "$progs" ] || die "bench_flash_gpu lists no fused attention program (--attention)"
    {
        echo "Each fused program against PyTorch in float64 (bench/gpu/check_dump.py; fp32 within 1e-4, bf16 within"
        echo "5e-2 of each result's largest magnitude): B=4 H=8 T=1024 D=64, KERPLE, forward + backward. Programs: $(tr '\n' ' ' <<<"$progs")"
        echo
    } | tee "$out"
    for p in $progs; do
        for dt in fp32 bf16; do
            dir=$state/parity-$p-$dt
            log=$dir.log
            rm -rf "$dir"
            mkdir -p "$dir"
            if "$build/bench_flash_gpu" --batch 4 --heads 8 --length 1024 --head-dim 64 --table kerple --mode fwdbwd \
                --dtype "$dt" --attention "$p" --device cuda --warmup 0 --reps 1 --dump "$dir" >"$log" 2>&1 &&
                "$BIASKIT_PYTHON" "$src/bench/gpu/check_dump.py" "$dir" >>"$log" 2>&1; then
                echo "- $p $dt: PASS: $(grep '^check_dump:' "$log" | tail -n 1)" | tee -a "$out"
            elif grep -q "has fp32 programs only" "$log"; then # fused2 (issue 26 §2): no bf16 program yet
                echo "- $p $dt: n/a ($(last_line_of "$log"))" | tee -a "$out"
            else
                echo "- $p $dt: FAIL: $(last_line_of "$log") (log: $log)" | tee -a "$out"
                fail=1
            fi
            rm -rf "$dir"
        done
    done
    [ "$fail" = 0 ] || die "a fused program failed to run or disagrees with PyTorch (above)"
}

step_attention() {
    local out=$state/results/attention.md logs=$state/attention-logs progs p rc=0 fail=0
    rm -rf "$logs"
    mkdir -p "$logs"
    progs=$(fused_programs)
    echo "gpu-test: fused attention programs: $(tr '\n' ' ' <<<"$progs")"
    {
        echo "QUICK=1 bash bench/gpu/attention.sh (T = 1024, 4096; D = 64, 128; bf16), program \"fused\" (the first"
        echo "generation). Fused programs bench_flash_gpu lists: $(tr '\n' ' ' <<<"$progs")$([ "$(wc -w <<<"$progs")" -le 1 ] && echo "— one generation only.")"
        echo
    } >"$out"
    QUICK=1 BUILD_DIR=$build LOG_DIR=$logs OUT=$logs PYTHON=$BIASKIT_PYTHON bash "$src/bench/gpu/attention.sh" \
        > >(tee -a "$out") 2> >(tee "$logs/stderr.txt" >&2) || rc=$?
    wait # the tees
    [ "$rc" = 0 ] || { echo "gpu-test: bench/gpu/attention.sh exited $rc"; fail=1; }
    if grep -q '^attention.sh: biaskit|' "$logs/stderr.txt" 2>/dev/null; then
        echo "gpu-test: biaskit runs failed:"
        grep '^attention.sh: biaskit|' "$logs/stderr.txt"
        fail=1
    fi
    # every further generation, at the same shapes, with the first beside it (bench_flash_gpu directly)
    local others D H T mode line
    others=$(grep -vx fused <<<"$progs" || true)
    if [ -n "$others" ]; then
        {
            echo
            echo "| program | dtype | D | T | mode | TFLOP/s | ms |"
            echo "|---|---|---:|---:|---|---:|---:|"
        } | tee -a "$out"
        local dt text
        for dt in fp32 bf16; do
            for p in fused $others; do
                for D in 64 128; do
                    H=$((1024 / D))
                    for T in 1024 4096; do
                        for md in fwd fwdbwd; do
                            text=$("$build/bench_flash_gpu" --batch $((16384 / T)) --heads "$H" --length "$T" --head-dim "$D" \
                                --table kerple --mode "$md" --dtype "$dt" --attention "$p" --device cuda --warmup 3 --reps 5 \
                                2>&1 || true)
                            line=$(grep '^RESULT ' <<<"$text" | tail -n 1 || true)
                            if [ -n "$line" ]; then
                                echo "| $p | $dt | $D | $T | $md | $(sed -E 's/.* tflops=([^ ]+).*/\1/' <<<"$line") | $(sed -E 's/.* ms=([^ ]+).*/\1/' <<<"$line") |"
                            elif grep -q "has fp32 programs only" <<<"$text"; then # fused2: no bf16 program yet
                                echo "| $p | $dt | $D | $T | $md | n/a (fp32 only) | - |"
                            else
                                echo "| $p | $dt | $D | $T | $md | failed | - |"
                                fail=1
                            fi
                        done
                    done
                done
            done
        done > >(tee -a "$out")
        wait
    else
        echo "gpu-test: one fused generation only (\"fused\"); nothing further to time" | tee -a "$out"
    fi
    [ "$fail" = 0 ] || die "the attention benchmark had failures (above)"
}

step_gpt2() {
    local out=$state/results/gpt2.md rc=0
    mkdir -p "$state/gpt2"
    echo "bash bench/gpu/run.sh, PRECISIONS=\"${PRECISIONS:-bf16 tf32 fp32}\"" >"$out"
    echo >>"$out"
    PRECISIONS=${PRECISIONS:-bf16 tf32 fp32} BUILD_DIR=$build OUT=$state/gpt2 PYTHON=$BIASKIT_PYTHON \
        bash "$src/bench/gpu/run.sh" > >(tee -a "$out") || rc=$?
    wait
    [ "$rc" = 0 ] || die "bench/gpu/run.sh exited $rc"
    if grep -q '| failed: ' "$out"; then
        die "a GPT-2 run failed (its row says why; logs in $state/gpt2)"
    fi
}

# The NCCL half of data parallelism: two processes on one GPU, N = 2 against N = 1 on the same global
# batch (tests/test_dist.sh's model and bound, on the GPU). Skipped, with the reason, when the build has
# no NCCL path (today: docs/scaling.md, "GPUs and many nodes") or mpirun is missing.
step_nccl() {
    local version lib mpirun
    version=$("$build/biaskit" --version 2>&1 || true)
    lib=$( (ldconfig -p 2>/dev/null || true) | grep -o '/[^ ]*libnccl\.so[.0-9]*' | head -n 1 || true)
    [ -n "$lib" ] || lib=$("$BIASKIT_PYTHON" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
    echo "gpu-test: NCCL library: ${lib:-not found}"
    if ! grep -qi 'nccl' <<<"$version"; then
        echo "this build of biaskit has no NCCL path (\`biaskit --version\` names none; docs/scaling.md: the GPU half of data parallelism is not built yet); NCCL library here: ${lib:-not found}" |
            tee "$state/nccl.skip" "$state/results/nccl.md"
        exit 77
    fi
    mpirun=$(command -v mpirun || command -v mpiexec || true)
    if [ -z "$mpirun" ]; then
        echo "the build has NCCL but no mpirun is here to start two processes" | tee "$state/nccl.skip" "$state/results/nccl.md"
        exit 77
    fi
    local work=$state/nccl
    rm -rf "$work"
    mkdir -p "$work/corpus"
    : >"$work/corpus/text.txt"
    while [ "$(wc -c <"$work/corpus/text.txt")" -lt 60000 ]; do cat "$src/README.md" >>"$work/corpus/text.txt"; done
    printf '[model]\nlayers = 2\nheads = 4\ndim = 32\n[train]\nlength = 32\nbatch = 4\nsteps = 20\nwarmup = 2\nlog_every = 5\neval_every = 0\n[data]\npaths = ["corpus"]\n[[term]]\nplugin = "alibi"\n' >"$work/alibi.toml"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    (cd "$work" && "$build/biaskit" train alibi.toml --out n1 --set run.device=cuda) || die "N = 1 on the GPU failed"
    (cd "$work" && "$mpirun" -np 2 --oversubscribe "$build/biaskit" train alibi.toml --out n2 --set run.device=cuda) ||
        die "N = 2 (two processes on one GPU, NCCL) failed"
    python3 - "$work/n1/metrics.jsonl" "$work/n2/metrics.jsonl" <<'PYEOF' | tee "$state/results/nccl.md"
import json, sys
def steps(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert a.keys() == b.keys() and a, f"steps differ: {sorted(a)} vs {sorted(b)}"
worst = max(abs(a[s] - b[s]) for s in a)
print(f"NCCL, two processes on one GPU: max |loss(N=2) - loss(N=1)| over {len(a)} steps = {worst:.3g} (bound 1e-4)")
sys.exit(0 if worst <= 1e-4 else 1)
PYEOF
}

# ------------------------------------------------------------------------------------------------
if [ "$mode" = fetch ]; then
    fetch
    exit 0
fi
if [ "$mode" = selftest ]; then
    self_test
    exit $?
fi
if [ "$mode" = plan ]; then
    total=0
    echo "gpu-test: the protocol (docs/performance.md, \"First GPU run: the protocol\"); deadline $deadline s"
    for s in "${selected[@]}"; do
        printf '  %-11s %4s s\n' "$s" "${budget[$s]}"
        total=$((total + budget[$s]))
    done
    echo "  total       $total s of budgets; results: \$OUT/gpu-results.md (else <build dir>/gpu-results.md)"
    exit 0
fi
if [ "$mode" = internal ]; then
    build=$BK_GT_BUILD state=$BK_GT_STATE jobs=$BK_GT_JOBS prefix=$BK_GT_BUILD/prefix
    case "$internal_step" in
        build) step_build ;;
        cuda-tests) step_cuda_tests ;;
        suite) step_suite ;;
        parity) step_parity ;;
        attention) step_attention ;;
        gpt2) step_gpt2 ;;
        nccl) step_nccl ;;
        *) die "unknown step $internal_step" ;;
    esac
    exit 0
fi

if [ "$mode" = check ]; then
    build=${BUILD_DIR:-$src/build-gpu-check}
else
    build=${BUILD_DIR:-$src/build-gpu}
fi
case "$build" in /*) ;; *) build=$src/$build ;; esac
prefix=$build/prefix
state=$build/gpu-run
mkdir -p "$build" "$state/results"
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    log=$OUT/gpu-test.log
else
    log=$build/gpu-test.log
fi
results=$(dirname "$log")/gpu-results.md
jobs=$(nproc 2>/dev/null || echo 2)
run_id=$(date -u +%Y%m%dT%H%M%S)-$$
run_start=$SECONDS

# The results file: the run's facts, the summary, and each step's section (this call's and those of
# earlier calls into the same build directory).
write_results() { # write_results SUMMARY_TEXT
    {
        echo "# biaskit on a GPU: results of scripts/gpu-test.sh"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); mode: $mode; steps asked for: ${selected[*]}"
        echo "- commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$src" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
        cat "$state/facts.md" 2>/dev/null || true
        echo
        echo "## Summary"
        echo
        printf '%s\n' "$1"
        local s
        for s in "${all_steps[@]}"; do
            if [ -s "$state/results/$s.md" ]; then
                echo
                echo "## $s"
                echo
                sed -E 's/^(#+) /\1## /' "$state/results/$s.md" # its headings under the step's
            fi
        done
    } >"$results"
    [ "$results" = "$build/gpu-results.md" ] || cp "$results" "$build/gpu-results.md"
}

main() {
    echo "gpu-test: mode $mode, source $src, build $build, log $log, results $results, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "gpu-test: steps ${selected[*]}, deadline $deadline s"

    section "tools"
    command -v cmake >/dev/null || die "cmake not found"
    command -v python3 >/dev/null || die "python3 not found (the summary and test_reference need it)"
    command -v timeout >/dev/null || die "timeout (coreutils) not found: the steps' budgets need it"
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
    "$nvcc" --version || die "$nvcc --version failed (exit $?)"
    echo "python3: $(python3 -c 'import sys; print(sys.version.split()[0])')"
    # test_reference and the benchmarks run $BIASKIT_PYTHON: unless the caller chose one, the first of
    # the python3 on PATH (which holds torch on a GPU machine) and Debian's that imports torch
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
    local torch_line
    if torch_line=$("$BIASKIT_PYTHON" -c 'import torch, numpy; print(f"torch {torch.__version__} (CUDA available: {torch.cuda.is_available()}), numpy {numpy.__version__}")' 2>/dev/null); then
        echo "test_reference and benchmark python: $BIASKIT_PYTHON: $torch_line"
    else
        torch_line="$BIASKIT_PYTHON cannot import torch and numpy"
        echo "gpu-test: warning: $torch_line: test_reference reports skipped, parity and the benchmarks fail"
    fi

    section "GPU"
    local arch=${BIASKIT_CUDA_ARCH:-} gpu_line=
    if command -v nvidia-smi >/dev/null && nvidia-smi; then
        gpu_line=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null || true)
        gpu_line=$(first_line "$gpu_line")
        echo "$gpu_line"
        if [ -z "$arch" ]; then
            arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true)
            arch=$(first_line "$arch")
            arch=${arch//[^0-9]/}
        fi
    elif [ "$mode" = gpu ]; then
        echo "gpu-test: NO GPU ANSWERED: nvidia-smi $(command -v nvidia-smi >/dev/null && echo 'is there but failed' || echo 'not found'); nothing was built, tested or measured (exit 3; on a machine without a GPU: --check-prefix, --self-test)"
        printf -- '- GPU: none answered (nvidia-smi %s); nothing was built, tested or measured\n' \
            "$(command -v nvidia-smi >/dev/null && echo failed || echo 'not found')" >"$state/facts.md"
        write_results "No GPU answered: no step ran (exit 3)."
        return 3
    else
        echo "gpu-test: no GPU answers here (expected with --check-prefix)"
    fi
    [ -n "$arch" ] || arch=90
    [[ "$arch" =~ ^[0-9]+$ ]] || die "bad CUDA architecture '$arch' (BIASKIT_CUDA_ARCH=NN, e.g. 90)"
    echo "gpu-test: CUDA architecture sm_$arch"
    {
        echo "- GPU: ${gpu_line:-none (--check-prefix)}; CUDA architecture sm_$arch"
        echo "- nvcc: $("$nvcc" --version | grep -o 'release [^,]*' || echo '?'); python: $torch_line"
        echo "- host: $(uname -n), $(nproc) cores"
    } >"$state/facts.md"

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
        echo "- dependencies: unpacked from .debs/ into $prefix" >>"$state/facts.md"
    else
        echo "- dependencies: the system's" >>"$state/facts.md"
    fi
    export BK_GT_BUILD=$build BK_GT_STATE=$state BK_GT_JOBS=$jobs BK_GT_MODE=$mode BK_GT_NVCC=$nvcc \
        BK_GT_ARCH=$arch BK_GT_PKG_CONFIG=$pkg_config BK_GT_USE_PREFIX=$use_prefix

    # the steps, in order; a step after a failed build is not run; a later call whose build directory
    # has no biaskit builds first
    local s build_failed=0 want_build=0
    for s in "${selected[@]}"; do [ "$s" = build ] && want_build=1; done
    if [ "$want_build" = 0 ] && [ ! -x "$build/biaskit" ]; then
        echo "gpu-test: $build has no biaskit: building first"
        selected=(build "${selected[@]}")
    fi
    for s in "${selected[@]}"; do
        if [ "$s" != build ] && [ "$build_failed" = 1 ]; then
            echo "gpu-test: step $s not run: the build failed"
            record_step "$s" not-run - 0 "${budget[$s]}" "the build failed"
            continue
        fi
        run_step "$s" "${budget[$s]}" bash "$self" --internal-step "$s"
        if [ "$s" = attention ] && [ "$(tail -n 1 "$state/steps.tsv" | cut -f3)" = timeout ] &&
            [ -s "$state/attention-logs/results.txt" ]; then
            # attention.sh prints its tables at the end: those of the lines measured before the kill
            {
                echo
                echo "(killed at its budget: the tables of what was measured before, REPORT_ONLY=1)"
                REPORT_ONLY=1 QUICK=1 BUILD_DIR=$build LOG_DIR=$state/attention-logs OUT=$state/attention-logs \
                    bash "$src/bench/gpu/attention.sh" 2>&1 || true
            } | tee -a "$state/results/attention.md"
        fi
        if [ "$s" = build ] && [ "$(tail -n 1 "$state/steps.tsv" | cut -f3)" != ok ]; then
            build_failed=1
        fi
    done

    section "summary ($mode mode, sm_$arch, $((SECONDS - run_start)) s)"
    local strict=0 summary rc=0
    [ "$mode" = gpu ] && strict=1
    summary=$(summarize "$state" "$strict" "$run_id") || rc=$?
    printf '%s\n' "$summary"
    write_results "$summary"
    echo "gpu-test: results written to $results"
    if [ "$rc" = 0 ] && [ "$mode" = check ]; then
        echo "gpu-test: OK: the prefix from .debs/ builds biaskit with CUDA and passes the suite (GPU tests skip here)"
    fi
    return "$rc"
}

# main's status reaches the exit status: errexit on inside it (a `main | tee` under `set +e` ran it
# with errexit off, so that a failed configure or build went on unnoticed), and PIPESTATUS read.
set +e
(
    set -e
    main
) 2>&1 | tee "$log"
ps=("${PIPESTATUS[@]}")
set -e
status=${ps[0]}
[ "${ps[1]}" = 0 ] || echo "gpu-test: warning: tee into $log exited ${ps[1]}: the log may be incomplete"
echo "gpu-test: log written to $log (exit $status)"
exit "$status"
