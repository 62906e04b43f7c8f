#!/usr/bin/env python3
"""Checks the numbers behind a timing: compares what `bench_flash_gpu --dump DIR` wrote (one call of
biaskit's device attention at the benchmark's own shape) with the same attention computed by PyTorch in
float64, and prints the largest error of each result relative to the result's largest magnitude.

  check_dump.py DIR [--device cuda|cpu] [--block 1024]

The reference: causal attention over q, k, v taken from qkv (B, T, 3C) head by head,
s[i][j] = q_i . k_j / sqrt(D) + table[h][i - j] (j <= i), P = softmax_j(s), out_i = sum_j P[i][j] v_j;
with fwdbwd, for the loss sum(out * dout): dq, dk, dv (into dqkv's layout) and, for a learnable table,
dtable[h][d] = the sum of the score gradient over (b, i, j) with i - j = d. It runs in blocks of query
rows (--block), so no B x H x T x T tensor is held: T = 16,384 fits in a few GiB.

Passes (exit 0) when every relative error is within the tolerance of the dump's dtype: fp32 1e-4, bf16
5e-2 (bf16 rounds q, k, v, P and dS to 8 significant bits; measured on the emulated backend at
test_flash_dump's shapes, T = 33 to 150: fp32 at most 4.6e-7, bf16 at most 3.5e-3, with bf16 or fp32
storage of q, k, v, dO and the output); exit 1 otherwise,
2 for a bad dump."""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch


def load(dump, name, shape):
    path = os.path.join(dump, name + ".f32")
    if not os.path.exists(path):
        return None
    x = np.fromfile(path, dtype="<f4")
    if x.size != math.prod(shape):
        raise SystemExit(f"check_dump.py: {path}: {x.size} floats, expected {math.prod(shape)} for shape {shape}")
    return torch.from_numpy(x.astype(np.float64)).view(*shape)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dump")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--block", type=int, default=1024)
    a = p.parse_args()
    try:
        with open(os.path.join(a.dump, "meta.json")) as f:
            meta = json.load(f)
        B, H, T, D = (int(meta[k]) for k in ("B", "H", "T", "D"))
    except (OSError, ValueError, KeyError) as e:
        print(f"check_dump.py: {a.dump}/meta.json: {e}", file=sys.stderr)
        sys.exit(2)
    C = H * D
    dev = torch.device(a.device)
    qkv = load(a.dump, "qkv", (B, T, 3, H, D))
    got_out = load(a.dump, "out", (B, T, H, D))
    table = load(a.dump, "table", (H, T))
    dout = load(a.dump, "dout", (B, T, H, D))
    got_dqkv = load(a.dump, "dqkv", (B, T, 3, H, D))
    got_dtable = load(a.dump, "dtable", (H, T))
    if qkv is None or got_out is None:
        print(f"check_dump.py: {a.dump}: qkv.f32 and out.f32 are needed", file=sys.stderr)
        sys.exit(2)
    backward = dout is not None and got_dqkv is not None

    q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3).to(dev) for i in range(3))  # (B, H, T, D)
    tab = table.to(dev) if table is not None else torch.zeros(H, T, dtype=torch.float64, device=dev)
    do = dout.permute(0, 2, 1, 3).to(dev) if backward else None
    scale = 1.0 / math.sqrt(D)
    out = torch.zeros(B, H, T, D, dtype=torch.float64, device=dev)
    dq, dk, dv = (torch.zeros_like(out) for _ in range(3)) if backward else (None, None, None)
    dtab = torch.zeros(H, T, dtype=torch.float64, device=dev)
    keys = torch.arange(T, device=dev)
    for i0 in range(0, T, a.block):
        i1 = min(T, i0 + a.block)
        rows = torch.arange(i0, i1, device=dev)
        dist = rows[:, None] - keys[None, :i1]  # (rows, i1): keys past i1 are all masked
        causal = dist >= 0
        bias = tab[:, dist.clamp(min=0)]  # (H, rows, i1)
        s = torch.einsum("bhid,bhjd->bhij", q[:, :, i0:i1], k[:, :, :i1]) * scale + bias[None]
        s = s.masked_fill(~causal[None, None], float("-inf"))
        P = torch.softmax(s, dim=-1)
        out[:, :, i0:i1] = P @ v[:, :, :i1]
        if backward:
            dP = do[:, :, i0:i1] @ v[:, :, :i1].transpose(-2, -1)
            Dsum = (dP * P).sum(-1, keepdim=True)
            dS = P * (dP - Dsum)
            dq[:, :, i0:i1] = dS @ k[:, :, :i1] * scale
            dk[:, :, :i1] += dS.transpose(-2, -1) @ q[:, :, i0:i1] * scale
            dv[:, :, :i1] += P.transpose(-2, -1) @ do[:, :, i0:i1]
            idx = dist.clamp(min=0).expand(H, -1, -1).reshape(H, -1)
            dtab.scatter_add_(1, idx, (dS.sum(0) * causal[None]).reshape(H, -1))

    def rel(got, want):
        want = want.cpu()
        return ((got - want).abs().max() / want.abs().max().clamp(min=1e-30)).item()

    tol = 5e-2 if meta.get("dtype") == "bf16" else 1e-4
    errors = {"out": rel(got_out, out.permute(0, 2, 1, 3))}
    if backward:
        errors["dqkv"] = rel(got_dqkv, torch.stack([dq, dk, dv], 2).permute(0, 3, 2, 1, 4))
        if got_dtable is not None:
            errors["dtable"] = rel(got_dtable, dtab)
    what = ", ".join(f"{k} {v:.2e}" for k, v in errors.items())
    ok = all(e <= tol for e in errors.values())
    storage = meta.get("storage", meta.get("dtype"))
    print(f"check_dump: {meta.get('attention')} {meta.get('dtype')} ({storage} storage) {meta.get('table')} "
          f"{meta.get('mode')} "
          f"B={B} H={H} T={T} D={D} ({meta.get('device')}) against float64 on {a.device}: "
          f"max |error| / max |value|: {what} (tolerance {tol:.0e}): {'ok' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
