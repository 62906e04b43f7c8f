#!/usr/bin/env python3
"""PyTorch reference for length-aware RoPE (used by tests/test_rope_scaling.c, torch_reference).

Usage: /usr/bin/python3 yarn_reference.py FILE.json

FILE is written by the C test: {"cases": [case, ...]}, each case with the rope term's options (d_head,
train_length, base, scaling, factor (0 = dynamic), original_length (0 = the training length),
beta_fast, beta_slow, attn_factor), the length evaluated, what the plugin returned (inv_freq, d_head/2
values; amplitude), a random q and k (d_head values each) and "pairs": [i, j, logit], the engine's
q'_i . k'_j after it rotated the same q and k at every position (rotate-half layout: pair m is
(x[m], x[m + d/2])) with its tables.

Written from the formulas of the papers, in float64 (not translated from the C):

  plain RoPE (Su et al. 2021)   theta_m = base^(-2m/d),  m = 0 .. d/2 - 1
  s                             the factor, or for factor = 0 max(1, length / L) (dynamic scaling, YaRN Sec. 3.3)
  pi   (Chen et al. 2023)       positions divided by s: theta_m / s
  ntk  (YaRN Sec. 3.1)          base' = base * s^(d / (d - 2))
  yarn (YaRN Sec. 3.2, 3.4 and its code): the pair m0 whose wavelength 2 pi / theta fits r times into L is
       m0(r) = (d/2) log(L / (2 pi r)) / log(base); lo = max(floor(m0(beta_fast)), 0), hi = min(ceil(m0(beta_slow)),
       d - 1), hi + 0.001 when they are equal; gamma_m = min(max((m - lo) / (hi - lo), 0), 1) is the share of
       interpolation: theta'_m = gamma_m theta_m / s + (1 - gamma_m) theta_m; q and k each times
       (1 + 0.1 ln s if s > 1 else 1) * attn_factor, the logits by its square.

The rotation is the complex product (x[m] + i x[m + d/2]) * amplitude * exp(i p theta'_m); the logit is
the real part of sum_m q'_m conj(k'_m).

Tolerances: inv_freq and amplitude within 2^-23 relative (the plugin rounds to float once); a logit
within amplitude^2 * sum_m |q_m| |k_m| * (i + j + 16) * 2^-23 (the float frequency's rounding, up to
2^-24 relative, turns into a phase error growing with the position; the float tables and products add a
few roundings). Prints one line per case; on the first disagreement prints it and exits 1.
"""
import json
import math
import sys

import torch

DT = torch.float64


def frequencies(c):
    d, base = c["d_head"], c["base"]
    L = c["original_length"] or c["train_length"]
    m = torch.arange(d // 2, dtype=DT)
    theta = base ** (-2.0 * m / d)
    if c["scaling"] == "none":
        return theta, 1.0, 1.0
    s = c["factor"] if c["factor"] > 0 else max(1.0, c["length"] / L)
    if c["scaling"] == "pi":
        return theta / s, 1.0, s
    if c["scaling"] == "ntk":
        base2 = base * s ** (d / (d - 2.0))
        return base2 ** (-2.0 * m / d), 1.0, s
    assert c["scaling"] == "yarn", c["scaling"]

    def pair_of(rotations):
        return (d / 2.0) * math.log(L / (2.0 * math.pi * rotations)) / math.log(base)

    lo = max(math.floor(pair_of(c["beta_fast"])), 0)
    hi = min(math.ceil(pair_of(c["beta_slow"])), d - 1)
    if lo == hi:
        hi += 0.001
    gamma = ((m - lo) / (hi - lo)).clamp(0.0, 1.0)
    scaled = gamma * (theta / s) + (1.0 - gamma) * theta
    temperature = (1.0 + 0.1 * math.log(s)) if s > 1.0 else 1.0
    return scaled, temperature * c["attn_factor"], s


def rotate(x, p, theta, amplitude):
    half = x.shape[0] // 2
    z = torch.complex(x[:half], x[half:])
    return z * amplitude * torch.polar(torch.ones_like(theta), p * theta)


def main(path):
    with open(path) as f:
        cases = json.load(f)["cases"]
    ulp = 2.0 ** -23
    for c in cases:
        name = c["name"]
        theta, amplitude, s = frequencies(c)
        got = torch.tensor(c["inv_freq"], dtype=DT)
        if got.shape != theta.shape:
            print(f"case '{name}': {got.shape[0]} frequencies, expected d_head/2 = {theta.shape[0]}")
            return 1
        rel = ((got - theta).abs() / theta.abs()).tolist()
        for m, r in enumerate(rel):
            if r > ulp:
                print(f"case '{name}': inv_freq[{m}] = {got[m].item():.9g}, reference {theta[m].item():.9g} "
                      f"(relative {r:.3g} > 2^-23)")
                return 1
        if abs(c["amplitude"] - amplitude) > ulp * amplitude:
            print(f"case '{name}': amplitude {c['amplitude']:.9g}, reference {amplitude:.9g} (s = {s:g})")
            return 1
        q = torch.tensor(c["q"], dtype=DT)
        k = torch.tensor(c["k"], dtype=DT)
        half = q.shape[0] // 2
        weight = (torch.complex(q[:half], q[half:]).abs() * torch.complex(k[:half], k[half:]).abs()).sum().item()
        worst = 0.0
        for i, j, logit in c["pairs"]:
            ref = (rotate(q, i, theta, amplitude) * rotate(k, j, theta, amplitude).conj()).sum().real.item()
            tol = amplitude ** 2 * weight * (i + j + 16) * ulp
            err = abs(logit - ref)
            if err > tol:
                print(f"case '{name}': logit q'_{i} . k'_{j} = {logit:.9g}, reference {ref:.9g} "
                      f"(difference {err:.3g} > tolerance {tol:.3g})")
                return 1
            worst = max(worst, err / tol)
        print(f"case '{name}': s = {s:g}, amplitude {amplitude:.7g}, {len(c['pairs'])} logits up to position "
              f"{max(p[0] for p in c['pairs'])}, worst error {worst:.3f} of the tolerance")
    print(f"yarn_reference: {len(cases)} cases agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
