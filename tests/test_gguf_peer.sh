#!/usr/bin/env bash
# The GGUF reader against gguf-py (tests/gguf_peer.py), with the python BIASKIT_PYTHON names, else
# /usr/bin/python3; skipped (exit 77) when that python cannot import gguf.
# usage: test_gguf_peer.sh <gguf_dump binary> <source dir>
py=${BIASKIT_PYTHON:-/usr/bin/python3}
exec "$py" "$2/tests/gguf_peer.py" "$1"
