# Sourced by the tests that run PyTorch scripts: `torch_python IMPORTS` sets py to $BIASKIT_PYTHON, else
# to the first of python3 on PATH and /usr/bin/python3 that can `import IMPORTS`, or exits 77 (ctest's
# "skipped") saying none can.
torch_python() {
    local p
    py=
    for p in ${BIASKIT_PYTHON:-python3 /usr/bin/python3}; do
        if "$p" -c "import $1" 2>/dev/null; then
            py=$p
            return 0
        fi
    done
    echo "SKIP: no python3 that imports $1 (${BIASKIT_PYTHON:-python3, /usr/bin/python3})"
    exit 77
}
