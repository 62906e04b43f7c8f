#!/usr/bin/env python3
"""Edits a biaskit checkpoint's metadata for the tests, as a hand or a forger would (train/checkpoint.h).

    ckpt_meta.py IN OUT STATEMENT [reseal]

rewrites the "biaskit" metadata of checkpoint IN (a dict `meta`) with the Python STATEMENT into OUT
(OUT may be IN). Without "reseal" the metadata's checksum (biaskit_xxh64) is left as it was, so the
edit shows, as an edit by hand does; with "reseal" it is recomputed (XXH64, seed 0, of the metadata
text), as a deliberate forger would, or a test that makes a checkpoint no biaskit can write (a GPU
run's on a machine without a GPU). STATEMENT "format2" makes a format 2 checkpoint (no checksum).
The tensors are copied byte for byte."""
import json
import struct
import sys

M = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, v):
    return (_rotl((acc + v * P2) & M, 31) * P1) & M


def _u64(b, p):
    return int.from_bytes(b[p:p + 8], "little")


def xxh64(b, seed=0):
    """XXH64 as its specification (xxHash's doc/xxhash_spec.md) and bk_xxh64 compute it."""
    n, p = len(b), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while n - p >= 32:
            v = [_round(v[i], _u64(b, p + 8 * i)) for i in range(4)]
            p += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M
        for x in v:
            h = ((h ^ _round(0, x)) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while n - p >= 8:
        h = (_rotl(h ^ _round(0, _u64(b, p)), 27) * P1 + P4) & M
        p += 8
    if n - p >= 4:
        h = (_rotl(h ^ ((int.from_bytes(b[p:p + 4], "little") * P1) & M), 23) * P2 + P3) & M
        p += 4
    while p < n:
        h = (_rotl(h ^ ((b[p] * P5) & M), 11) * P1) & M
        p += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    return h ^ (h >> 32)


def seal(text):
    """The checksum a checkpoint keeps of its metadata text (bk_checkpoint_seal)."""
    return "%016x" % xxh64(text.encode("utf-8"))


def main(argv):
    if len(argv) not in (4, 5) or (len(argv) == 5 and argv[4] != "reseal"):
        sys.exit(__doc__)
    src, dst, stmt = argv[1:4]
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    md = head["__metadata__"]
    meta = json.loads(md["biaskit"])
    if stmt == "format2":
        meta["format"] = 2
        md.pop("biaskit_xxh64", None)
    else:
        exec(stmt, {"meta": meta})
    text = json.dumps(meta, separators=(",", ":"))
    md["biaskit"] = text
    if len(argv) == 5 and stmt != "format2":
        md["biaskit_xxh64"] = seal(text)
    out = json.dumps(head, separators=(",", ":")).encode()
    out += b" " * (-len(out) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(out)) + out + raw[8 + n:])


if __name__ == "__main__":
    main(sys.argv)
