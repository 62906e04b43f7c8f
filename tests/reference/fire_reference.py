#!/usr/bin/env python3
"""FIRE in PyTorch (float64, autograd), for tests/test_fire.c and for the grid measurement of
plugins/fire/README.md.

Usage:
  /usr/bin/python3 fire_reference.py check FILE.safetensors
  /usr/bin/python3 fire_reference.py grid-error [--inits N] [--dense N] [--heads H] [--width W]

The model is the module of Li et al. (ICLR 2024, appendix), written from its formulas:

  psi(x) = log(|c x| + 1);  N(i) = max(i, |L_multiplier L_init|);  u(i, j) = psi(i - j) / (psi(N(i)) + eps)
  b_h(i, j) = (W2 ReLU(W1 u + b1) + b2)[h],  eps = 1e-6, i and j 0-based token indices

check: FILE is written by test_fire.c: the parameters (W1 (w), b1 (w), W2 (H, w), b2 (H), c (1),
L_multiplier (1)), an upstream gradient G (H, T, T) (zero where j > i), and what the C side computed
from the plugin's hooks: "bias" (H, T, T), the attention's linear interpolation of the plugin's grid at
u = phi[d] rscale[i], and "grad.<name>" of sum G * bias by the engine's chain rule (grid gradient with
the interpolation weights, du -> dphi, drscale, then table_backward and coordinate_backward). Its
metadata: T, L_init, points. Two references, both float64 autograd:

  interpolated  the same grid, the same linear interpolation (cell floor(u (P - 1)), clamped to the last
                cell), differentiated by autograd: must agree with the C side to float32 rounding
                (values 1e-5 (1 + |b|); gradients 1e-4 max|ref| + 1e-6 per tensor): this checks the plugin's
                hooks and the chain rule, not the grid;
  exact         the module itself: values within the lerp bound of each head,
                sum_k |W2[h,k] W1_k| / (4 (P - 1)) (b_h is piecewise linear in u with a kink per hidden unit;
                lerp is exact in a cell without a kink and off by at most |slope change| h / 4 in a cell
                with one) plus float32 rounding; gradients, element by element, within the bound of
                exact_grad_bounds (they differ only through the pairs whose u falls in a cell that holds a
                kink: there the grid's indicator and slope are the chord's, not the module's) plus the
                interpolated tolerance.

Prints one line per comparison; exits 1 naming what disagrees, 2 on a malformed file.

grid-error: the interpolation error of the grid for random initialisations (the module's nn.Linear
init) and scaled "trained-like" weights, at several grid sizes, against bf16's rounding of the value
(half an ulp of bf16 at |b|: 2^-9 |b|). Prints the table of plugins/fire/README.md ("Grid").
"""

import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import Malformed, read_safetensors  # noqa: E402  (the hand-written safetensors reader)

torch.set_default_dtype(torch.float64)

EPS = 1e-6
NAMES = ["W1", "b1", "W2", "b2", "c", "L_multiplier"]
INTERP_VALUE_REL = 1e-5
INTERP_GRAD_REL = 1e-4
INTERP_GRAD_ABS = 1e-6


def mlp(p, u):
    """b(u) for u of any shape: (..., H)."""
    hidden = torch.relu(u[..., None] * p["W1"] + p["b1"])
    return hidden @ p["W2"].T + p["b2"]


def coordinate(p, T, L_init):
    """u (T, T) of the module: rows i, columns j (j > i too; masked later)."""
    pos = torch.arange(T, dtype=torch.float64)
    rel = pos[:, None] - pos[None, :]
    threshold = torch.abs(p["L_multiplier"] * L_init)
    normaliser = torch.maximum(pos, threshold)
    psi_d = torch.log(torch.abs(p["c"] * rel) + 1)
    psi_n = torch.log(torch.abs(p["c"] * normaliser) + 1) + EPS
    return psi_d / psi_n[:, None]


def exact_bias(p, T, L_init):
    return mlp(p, coordinate(p, T, L_init)).permute(2, 0, 1)  # (H, T, T)


def lerp(grid, u):
    """grid (H, P) read at u (any shape) as the engine does: x = u (P - 1) clamped to [0, P - 1], cell
    g = floor(x) kept <= P - 2, t = x - g. Differentiable in grid and u."""
    P = grid.shape[1]
    x = torch.clamp(u * (P - 1), 0.0, float(P - 1))
    g = torch.clamp(torch.floor(x.detach()), max=P - 2).long()
    t = x - g
    lo, hi = grid[:, g], grid[:, g + 1]
    return lo + t * (hi - lo)  # (H, *u.shape)


def interpolated_bias(p, T, L_init, P):
    ug = torch.arange(P, dtype=torch.float64) / (P - 1)
    grid = mlp(p, ug).T  # (H, P)
    return lerp(grid, coordinate(p, T, L_init))


def lerp_bound(p, P):
    """Per head: sum_k |W2[h,k] W1_k| / (4 (P - 1))."""
    return (torch.abs(p["W2"] * p["W1"][None, :]).sum(dim=1)) / (4.0 * (P - 1))


def exact_grad_bounds(p, G, T, L_init, P):
    """Per element of each gradient: the most the interpolated model's gradient can differ from the exact
    module's. Both agree except for pairs (i, j) whose u lies in a grid cell that holds the kink
    u = -b1_k / W1_k of a hidden unit k, where, per pair and head h (G the upstream gradient):
      W1_k, b1_k   |G| |W2[h,k]| (the interpolated indicator 1[unit k active] times u or 1, against the
                   exact one: both in [0, 1]);
      W2[h,k]      |G| |W1_k| / (4 (P - 1)) (the lerp error of ReLU(W1_k u + b1_k));
      c, L_mult.   |G| |du/dc| (|du/dm|) sum over the kinks k in the cell of |W2[h,k] W1_k| (the cell's
                   chord slope against the one-sided derivative db/du);
      b2           0."""
    with torch.no_grad():
        u = coordinate(p, T, L_init)

        def du(name):
            h = 1e-6 * max(1.0, abs(p[name].item()))
            hi = coordinate({**p, name: p[name] + h}, T, L_init)
            lo = coordinate({**p, name: p[name] - h}, T, L_init)
            return torch.abs(hi - lo) / (2 * h)

        cell = torch.clamp(torch.floor(torch.clamp(u * (P - 1), 0.0, float(P - 1))), max=P - 2)
        W1, b1, W2 = p["W1"], p["b1"], p["W2"]
        safe = torch.where(W1 != 0, W1, torch.ones_like(W1))
        kink = -b1 / safe
        valid = (W1 != 0) & (kink > 0) & (kink < 1)
        kcell = torch.clamp(torch.floor(kink * (P - 1)), 0, P - 2)
        in_k = ((cell[..., None] == kcell) & valid).double()  # (T, T, width)
        aG = torch.abs(G)
        w2 = torch.abs(W2)
        jump = torch.abs(W2 * W1[None, :])  # (H, width)
        slope_err = torch.einsum("hk,ijk->hij", jump, in_k)
        out = {
            "W1": torch.einsum("hij,hk,ijk->k", aG, w2, in_k),
            "b1": torch.einsum("hij,hk,ijk->k", aG, w2, in_k),
            "W2": torch.einsum("hij,ijk->hk", aG, in_k) * torch.abs(W1)[None, :] / (4.0 * (P - 1)),
            "b2": torch.zeros(W2.shape[0]),
            "c": (aG * slope_err * du("c")[None]).sum(),
            "L_multiplier": (aG * slope_err * du("L_multiplier")[None]).sum(),
        }
        return out


def check(path):
    tensors, meta = read_safetensors(path)
    T, L_init, P = int(meta["T"]), float(meta["L_init"]), int(meta["points"])
    G = tensors["G"]
    H = G.shape[0]
    causal = torch.tril(torch.ones(T, T))
    failures = []

    def leaf():
        out = {}
        for n in NAMES:
            v = tensors[n].clone()
            out[n] = (v.reshape(()) if n in ("c", "L_multiplier") else v).requires_grad_(True)
        return out

    results = {}
    for kind in ("interpolated", "exact"):
        p = leaf()
        b = interpolated_bias(p, T, L_init, P) if kind == "interpolated" else exact_bias(p, T, L_init)
        b = b * causal
        (G * b).sum().backward()
        results[kind] = (b.detach(), {n: p[n].grad.reshape(tensors[n].shape) for n in NAMES})

    c_bias = tensors["bias"]
    # interpolated: the hooks and the chain rule
    b_ref, grads = results["interpolated"]
    err = (torch.abs(c_bias - b_ref) / (1 + torch.abs(b_ref))).max().item()
    print(f"fire: interpolated  bias           max |c - r| / (1 + |r|) = {err:.3e} (tolerance {INTERP_VALUE_REL:g})")
    if not err <= INTERP_VALUE_REL:
        failures.append(f"bias vs the interpolated reference: {err:.3e}")
    for n in NAMES:
        got, ref = tensors["grad." + n], grads[n]
        scale = torch.abs(ref).max().item()
        e = torch.abs(got - ref).max().item()
        tol = INTERP_GRAD_REL * scale + INTERP_GRAD_ABS
        print(f"fire: interpolated  grad.{n:<13s} max |c - r| = {e:.3e} (max |r| {scale:.3e}, tolerance {tol:.3e})")
        if not e <= tol:
            failures.append(f"grad.{n} vs the interpolated reference: {e:.3e} > {tol:.3e}")
    # exact: the module itself
    b_ref, grads = results["exact"]
    p = {n: tensors[n].reshape(()) if n in ("c", "L_multiplier") else tensors[n] for n in NAMES}
    bound = lerp_bound(p, P)
    worst = 0.0
    for h in range(H):
        e = torch.abs(c_bias[h] - b_ref[h]).max().item()
        tol = bound[h].item() + 1e-6 * (1 + torch.abs(b_ref[h]).max().item())
        worst = max(worst, e / tol)
        print(f"fire: exact         bias head {h:<3d}  max |c - r| = {e:.3e} (lerp bound {bound[h].item():.3e})")
        if not e <= tol:
            failures.append(f"bias head {h} vs the exact module: {e:.3e} > bound {tol:.3e}")
    bounds = exact_grad_bounds(p, G * causal, T, L_init, P)
    for n in NAMES:
        got, ref = tensors["grad." + n], grads[n]
        scale = torch.abs(ref).max().item()
        tol = bounds[n].reshape(ref.shape) + INTERP_GRAD_REL * scale + INTERP_GRAD_ABS
        err = torch.abs(got - ref)
        worst = (err / tol).max().item()
        print(f"fire: exact         grad.{n:<13s} max |c - r| = {err.max().item():.3e}, max |c - r| / max |r| = "
              f"{err.max().item() / scale:.3e}, max |c - r| / bound = {worst:.3f}")
        if not worst <= 1.0:
            failures.append(f"grad.{n} vs the exact module: exceeds its kink-cell bound ({worst:.3f} times)")
    if failures:
        print("fire: MISMATCH:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("fire: all agree")
    return 0


# ---------------------------------------------------------------- the grid measurement

def init_params(gen, heads, width):
    """nn.Linear's default init: W1, b1 ~ U(-1, 1); W2, b2 ~ U(-1/sqrt(width), 1/sqrt(width))."""
    def u(shape, a):
        return (torch.rand(shape, generator=gen) * 2 - 1) * a
    a2 = 1 / math.sqrt(width)
    return {"W1": u((width,), 1.0), "b1": u((width,), 1.0), "W2": u((heads, width), a2), "b2": u((heads,), a2)}


SCENARIOS = [
    ("init", lambda p: p),
    ("W2, b2 x 10", lambda p: {**p, "W2": 10 * p["W2"], "b2": 10 * p["b2"]}),
    ("W1, b1 x 10", lambda p: {**p, "W1": 10 * p["W1"], "b1": 10 * p["b1"]}),
    ("W1 x 10", lambda p: {**p, "W1": 10 * p["W1"]}),
]


def grid_error(argv):
    opts = {"--inits": 100, "--dense": 65536, "--heads": 12, "--width": 32}
    for k in range(0, len(argv), 2):
        if argv[k] not in opts or k + 1 >= len(argv):
            raise ValueError(f"grid-error: unknown option or missing value: {argv[k]}")
        opts[argv[k]] = int(argv[k + 1])
    n_init, n_dense, H, W = opts["--inits"], opts["--dense"], opts["--heads"], opts["--width"]
    grids = [65, 129, 257, 513, 1025, 2049, 4097]
    gen = torch.Generator().manual_seed(20260101)
    half_ulp = 2.0 ** -9  # half an ulp of bf16 (8 significant bits), relative
    print(f"FIRE grid error: {n_init} initialisations x {H} heads, width {W}; u = {n_dense} uniform points + "
          f"the kinks; half an ulp of bf16 = 2^-9 |b|")
    print("| weights | grid | max error, median head | max error, worst head | max error / (2^-9 median |b|), "
          "median head | worst head | heads above 1 | u with error > 2^-9 |b(u)| |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    params = [init_params(gen, H, W) for _ in range(n_init)]
    for name, scale in SCENARIOS:
        rows = {P: ([], [], 0.0, 0) for P in grids}
        for p0 in params:
            p = scale(p0)
            kinks = -p["b1"] / p["W1"]
            kinks = kinks[(kinks > 0) & (kinks < 1)]
            u = torch.cat([torch.rand(n_dense, generator=gen), kinks, torch.tensor([0.0, 1.0])])
            exact = mlp(p, u).T  # (H, n)
            typical = torch.median(torch.abs(exact), dim=1).values  # (H,)
            for P in grids:
                grid = mlp(p, torch.arange(P, dtype=torch.float64) / (P - 1)).T
                err = torch.abs(lerp(grid, u) - exact)
                maxerr = err.max(dim=1).values
                errs, ratios, above, count = rows[P]
                errs.extend(maxerr.tolist())
                ratios.extend((maxerr / (half_ulp * typical)).tolist())
                above += (err > half_ulp * torch.abs(exact)).double().mean().item()
                rows[P] = (errs, ratios, above, count + 1)
        for P in grids:
            errs, ratios, above, count = rows[P]
            e, r = torch.tensor(errs), torch.tensor(ratios)
            print(f"| {name} | {P} | {e.median().item():.2e} | {e.max().item():.2e} | {r.median().item():.3f} | "
                  f"{r.max().item():.2f} | {(r > 1).double().mean().item() * 100:.1f}% | "
                  f"{above / count * 100:.3f}% |")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "check":
        return check(argv[2])
    if len(argv) >= 2 and argv[1] == "grid-error":
        return grid_error(argv[2:])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (Malformed, KeyError, ValueError, OSError) as e:
        print(f"fire_reference: malformed input: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
