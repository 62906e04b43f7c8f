#!/usr/bin/env bash
# The GGUF reader against gguf-py (tests/gguf_peer.py), with the python of the peers' virtual environment
# that scripts/setup.sh --tests makes (.venv-peers/ at the repository root), else BIASKIT_PEER_PYTHON,
# else /usr/bin/python3; skipped (exit 77) when that python cannot import gguf.
# usage: test_gguf_peer.sh <gguf_dump binary> <source dir>
py=${BIASKIT_PEER_PYTHON:-/usr/bin/python3}
[ -z "${BIASKIT_PEER_PYTHON:-}" ] && [ -x "$2/.venv-peers/bin/python" ] && py=$2/.venv-peers/bin/python
exec "$py" "$2/tests/gguf_peer.py" "$1"
