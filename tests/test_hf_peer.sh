#!/usr/bin/env bash
# biaskit import of HF transformers directories against transformers (tests/hf_peer.py), with the python of the
# peers' virtual environment that scripts/setup.sh --tests makes (.venv-peers/ at the repository root), else
# BIASKIT_PEER_PYTHON, else /usr/bin/python3; skipped (exit 77) when that python cannot import transformers.
# usage: test_hf_peer.sh <ckpt_dump binary> <biaskit binary> <source dir>
py=${BIASKIT_PEER_PYTHON:-/usr/bin/python3}
[ -z "${BIASKIT_PEER_PYTHON:-}" ] && [ -x "$3/.venv-peers/bin/python" ] && py=$3/.venv-peers/bin/python
if ! "$py" -c 'import transformers, torch, safetensors' 2>/dev/null; then
    echo "test_hf_peer: skipped: $py cannot import transformers, torch and safetensors"
    exit 77
fi
exec "$py" "$3/tests/hf_peer.py" "$1" "$2"
