#!/usr/bin/env bash
# biaskit tokenize against HF tokenizers (tests/bpe_peer.py), with the python of the peers' virtual environment
# that scripts/setup.sh --tests makes (.venv-peers/ at the repository root), else BIASKIT_PEER_PYTHON, else
# /usr/bin/python3; skipped (exit 77) when that python cannot import tokenizers.
# usage: test_bpe_peer.sh <biaskit binary> <source dir>
py=${BIASKIT_PEER_PYTHON:-/usr/bin/python3}
[ -z "${BIASKIT_PEER_PYTHON:-}" ] && [ -x "$2/.venv-peers/bin/python" ] && py=$2/.venv-peers/bin/python
if ! "$py" -c 'import tokenizers' 2>/dev/null; then
    echo "skipped: $py cannot import tokenizers (scripts/setup.sh --tests installs it into .venv-peers/)"
    exit 77
fi
exec "$py" "$2/tests/bpe_peer.py" "$1" "$2"
