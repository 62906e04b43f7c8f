#!/usr/bin/env bash
# Installs the Debian packages biaskit needs to build and test, if any is missing. The CUDA toolkit
# (nvcc at /usr/local/cuda) is used when present and is not installed here.
set -euo pipefail

packages=(cmake make gcc g++ pkg-config libtomlplusplus-dev libcmocka-dev libopenblas-dev libopenblas-openmp-dev
          libcjson-dev gnuplot-nox libopenmpi-dev openmpi-bin)
# the PyTorch reference tests: scripts/setup.sh --tests
if [ "${1:-}" = "--tests" ]; then
    packages+=(python3-torch python3-numpy python3-venv)
fi
# the fuzzers (scripts/fuzz.sh): clang with libFuzzer and the sanitizer runtimes
if [ "${1:-}" = "--fuzz" ]; then
    packages+=(clang libclang-rt-dev)
fi
missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# the peer tests' PyPI packages (test_gguf_peer: gguf-py, the GGUF format's own Python package), in a
# virtual environment at the repository root, made once; pinned so that every machine tests against the
# same peer
if [ "${1:-}" = "--tests" ]; then
    venv=$(cd "$(dirname "$0")/.." && pwd)/.venv-peers
    peers=(gguf==0.19.0)
    if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
        echo "setup: installing ${peers[*]} from PyPI into $venv"
        /usr/bin/python3 -m venv "$venv"
        "$venv/bin/pip" install -q "${peers[@]}"
    fi
fi
