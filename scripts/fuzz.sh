#!/usr/bin/env bash
# Fuzzing with libFuzzer (Debian's clang; scripts/setup.sh --fuzz installs it): builds the targets of
# fuzz/ into ${BUILD_DIR:-build-fuzz} (-DBIASKIT_FUZZ=ON: ASan + UBSan + coverage, CPU-only), then runs
# each named target (default: all eleven) for SECONDS (default 30), one after the other, starting from
# its seed corpus fuzz/corpus/<name>/ plus what earlier runs found (<build>/corpus/<name>/, not in
# the repository). A crash stops that target, leaves the input in <build>/artifacts/<name>/ and fails
# the script; copy it into fuzz/corpus/<name>/ once fixed, where ctest replays it in every build.
#
#   scripts/fuzz.sh                 # CI: every target for 30 s
#   scripts/fuzz.sh 600 toml bipe   # ten minutes each for two of them
#   JOBS=2 scripts/fuzz.sh 600      # two targets at a time
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(toml safetensors shard text bipe descriptor ckpt_experiment sweep report gguf bpe)
build=${BUILD_DIR:-build-fuzz}
jobs=${JOBS:-1}

scripts/setup.sh --fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -DBIASKIT_FUZZ=ON -DBIASKIT_CUDA=OFF -DBIASKIT_MPI=OFF -DBIASKIT_TESTS=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}"

# The largest input each target is given (bytes): room for a real file of its kind.
declare -A max_len=([toml]=8192 [safetensors]=4096 [shard]=8192 [text]=4096 [bipe]=2048 [descriptor]=4096 [ckpt_experiment]=8192 [sweep]=8192 [report]=8192 [gguf]=4096 [bpe]=8192)

run_one() {
    local name=$1 log="$build/fuzz-$1.log"
    mkdir -p "$build/corpus/$name" "$build/artifacts/$name"
    if "$build/fuzz/fuzz_$name" "$build/corpus/$name" "fuzz/corpus/$name" \
        -max_total_time="$seconds" -max_len="${max_len[$name]}" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$name/" >"$log" 2>&1; then
        # one line per target (targets may run two at a time): executions, then libFuzzer's last status
        echo "== fuzz_$name ${seconds}s: $(sed -n 's/^stat::number_of_executed_units: *//p' "$log") executions;" \
             "$(grep -E '^#[0-9]+.*(DONE|cov:)' "$log" | tail -1 | sed 's/^#[0-9]*[[:space:]]*//')"
        return 0
    fi
    echo "fuzz_$name FAILED: the crash and its input are in $log and $build/artifacts/$name/" >&2
    tail -40 "$log" >&2
    return 1
}

status=0
pids=()
for name in "${targets[@]}"; do
    if [ "$jobs" -le 1 ]; then
        run_one "$name" || status=1
    else
        run_one "$name" & pids+=($!)
        if [ ${#pids[@]} -ge "$jobs" ]; then
            wait "${pids[0]}" || status=1
            pids=("${pids[@]:1}")
        fi
    fi
done
for pid in "${pids[@]}"; do
    wait "$pid" || status=1
done
exit $status
