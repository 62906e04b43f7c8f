# Sourced by bench/gpu/run.sh and attention.sh with BUILD set: on a machine without the Debian -dev
# packages, scripts/gpu-test.sh unpacked the build's libraries (OpenBLAS, toml++, cJSON, ...) into
# $BUILD/prefix and ran the tests with them on LD_LIBRARY_PATH; a benchmark run as a command of its own
# needs the same, so that biaskit and bench_flash_gpu load.
if [ -d "$BUILD/prefix/usr/lib/x86_64-linux-gnu" ]; then
    bk_prefix_lib=$BUILD/prefix/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH="$bk_prefix_lib/openblas-openmp:$bk_prefix_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
