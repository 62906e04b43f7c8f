#!/usr/bin/env bash
# Installs the Debian packages biaskit needs to build and test, if any is missing. The CUDA toolkit
# (nvcc at /usr/local/cuda) is used when present and is not installed here.
set -euo pipefail

packages=(cmake make gcc g++ pkg-config libtomlplusplus-dev libcmocka-dev libopenblas-dev libopenblas-openmp-dev
          libcjson-dev libpcre2-dev gnuplot-nox libopenmpi-dev openmpi-bin)
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
# the peer tests' PyPI packages, in a virtual environment at the repository root, made once and seeing
# Debian's python3-torch (PyPI's torch wheels bring gigabytes of CUDA libraries): gguf-py (test_gguf_peer:
# the GGUF format's own Python package), HF transformers with accelerate (test_hf_peer: the reference
# LLaMA and GPT-2 models) and HF tokenizers (test_bpe_peer). Pinned, so that every machine tests against
# the same peers; transformers 4.46 is the newest that runs on Debian's torch 1.13.
if [ "${1:-}" = "--tests" ]; then
    venv=$(cd "$(dirname "$0")/.." && pwd)/.venv-peers
    peers=(gguf==0.19.0 transformers==4.46.3 tokenizers==0.20.3 accelerate==1.1.1 safetensors==0.4.5)
    if ! "$venv/bin/python" -c 'import gguf, transformers, tokenizers, accelerate, safetensors, torch' 2>/dev/null; then
        echo "setup: installing ${peers[*]} from PyPI into $venv"
        rm -rf "$venv"
        /usr/bin/python3 -m venv --system-site-packages "$venv"
        "$venv/bin/pip" install -q "${peers[@]}"
    fi
fi
