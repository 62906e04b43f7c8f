#!/usr/bin/env python3
"""PyTorch reference for biaskit's training step (used by tests/test_reference.c).

Usage: /usr/bin/python3 reference.py FILE.safetensors

FILE is written by the engine (see tests/test_reference.c): the parameters of every optimizer group
under its checkpoint name (model.<tensor>, term.<label>.theta (copies, n_params), mix.<stream>), their
gradients (grad.<name>), the batch (inputs, targets as float32), logits (B, T, V), loss, every term's
table (table.<label>, (L, H, T)), the mixed token table (mixed.token), the mixing weights (weights);
for three AdamW steps on the same batch the loss of each (loss_step<k>) and the parameters and
gradients each started from (step<k>.<name>, step<k>.grad.<name>, k >= 1); the final parameters,
tables and weights (final.<...>) and their loss (loss_final; loss_final_eval from the evaluation
forward). Its metadata "case" is a JSON description of the model, the terms (plugin, stream, weight,
per_layer, copies), the options the reference needs, and the optimizer (hyper-parameters, groups and
their decay flags).

An independent implementation from the formulas, in float64 with autograd; the file is read by hand
(no safetensors package):

  x = wte[token];  per layer: x += proj(attn(LN1 x)),  x += fcproj(gelu_tanh(fc(LN2 x)))
  logits = LN_f(x) . wte^T;  loss = mean cross-entropy;  LayerNorm eps 1e-5; weights are (out, in)
  score(h, i, j) = q_i . k_j / sqrt(hd) + M_l[h, i - j]  for j <= i (causal); qkv rows [q | k | v]
  term tables: alibi   T_h(d) = -m_h d, m from the reference get_slopes (Press et al.) and options
               testlin T_h(d) = -a_h d, a learnable, one copy or one per layer
  mixing:  sum  M = sum_t w_t T_t;  kernel  M = log sum_t w_t exp(T_t)
  weights: the configured ones, else 1 (sum) or 1/n (kernel); kernel weights normalised to sum 1;
           learnable: sum trains w itself, kernel trains a with w = softmax(a)
  AdamW:   torch.optim.AdamW, weight decay only on wte and the block matrices (qkvw, attprojw, fcw,
           fcprojw); after each step the projection (testlin: a >= 0)

Checks, in order: the optimizer's groups (names, shapes, decay flags); the weights; the tables; logits,
loss and every gradient; then the steps, following the engine: step k starts from the engine's
parameters, its loss and gradients are recomputed there, AdamW (float64 moments) is applied to the
engine's gradients and compared with the engine's next parameters and with its update; the final
loss; and last the same three steps run freely in float64 from the start, whose losses must agree.

Tolerances: every tensor  max|c - r| <= 1e-4 * max(1, max|r|); gradients in addition
max|c - r| <= 1e-3 * max|r| + 1e-9 (a wrong gradient that happens to be small is still caught);
updates  max|c - r| <= 1e-4 * max|r| + 1e-9 (weight decay is only lr * wd * |p| of a value).
Prints one line per tensor (one per group for the steps), the worst error of each; exits 1 naming
every tensor that disagrees (with the worst element), 2 on a malformed file.
"""

import json
import math
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)

ATOL_REL = 1e-4  # the brief's tolerance: max|c - r| <= ATOL_REL * max(1, max|r|)
GRAD_REL = 1e-3  # gradients, relative to their own largest entry
GRAD_FLOOR = 1e-9
UPDATE_REL = 1e-4  # an optimizer step, relative to its own largest entry
LN_EPS = 1e-5

MODEL_TENSORS = ["wte", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
                 "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "qkvw", "attprojw", "fcw", "fcprojw"}


class Malformed(Exception):
    pass


# ---------------------------------------------------------------- the file

def read_safetensors(path):
    """Tensors (as float64 torch tensors) and the string metadata of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise Malformed(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise Malformed(f"{path}: header of {n} bytes does not fit in {len(raw)} bytes")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if info.get("dtype") != "F32":
            raise Malformed(f"{path}: tensor {name}: dtype {info.get('dtype')}, expected F32")
        begin, end = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        count = int(np.prod(shape)) if shape else 1
        if end - begin != 4 * count or end > len(data):
            raise Malformed(f"{path}: tensor {name}: offsets {begin}..{end} do not hold shape {shape}")
        arr = np.frombuffer(data[begin:end], dtype="<f4").astype(np.float64).reshape(shape)
        tensors[name] = torch.from_numpy(arr.copy())
    return tensors, meta


# ---------------------------------------------------------------- the model

def get_slopes(n):
    """ALiBi's reference slopes (Press et al., the authors' get_slopes)."""
    def power_of_2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + get_slopes(2 * c)[0::2][:n - c]


def alibi_slopes(opts, heads):
    if "slopes" in opts:
        s = [float(v) for v in opts["slopes"]]
    elif "uniform_slope" in opts:
        s = [float(opts["uniform_slope"])] * heads
    else:
        s = get_slopes(heads)
    return torch.tensor(s) * float(opts.get("slope_scale", 1.0))


class Reference:
    def __init__(self, case, params):
        self.case = case
        self.L, self.H, self.C, self.V = case["layers"], case["heads"], case["dim"], case["vocab"]
        self.B, self.T = case["B"], case["T"]
        self.mixing = case["mixing"]
        self.learn = bool(case["learn_weights"])
        self.terms = case["terms"]
        self.options = case.get("options", [])
        if len(self.options) != len(self.terms):
            raise Malformed(f"{len(self.terms)} terms but {len(self.options)} option objects")
        for t in self.terms:
            if t["stream"] != "token":
                raise Malformed(f"term {t['label']}: stream {t['stream']}: the reference has token positions only")
            if t["plugin"] not in ("alibi", "testlin"):
                raise Malformed(f"term {t['label']}: the reference does not know plugin {t['plugin']}")
        # leaves: one tensor per optimizer group
        self.p = {name: value.clone().requires_grad_(True) for name, value in params.items()}

    def expected_groups(self):
        """Names, shapes and decay flags the optimizer must have, from the description alone."""
        L, C, V = self.L, self.C, self.V
        shapes = {"wte": [V, C], "ln1w": [L, C], "ln1b": [L, C], "qkvw": [L, 3 * C, C], "qkvb": [L, 3 * C],
                  "attprojw": [L, C, C], "attprojb": [L, C], "ln2w": [L, C], "ln2b": [L, C],
                  "fcw": [L, 4 * C, C], "fcb": [L, 4 * C], "fcprojw": [L, C, 4 * C], "fcprojb": [L, C],
                  "lnfw": [C], "lnfb": [C]}
        groups = {f"model.{n}": (shapes[n], n in DECAYED) for n in MODEL_TENSORS}
        for t in self.terms:
            if t["plugin"] == "testlin":
                copies = self.L if t["per_layer"] else 1
                groups[f"term.{t['label']}.theta"] = ([copies, self.H], False)
        if self.learn and self.terms:
            groups["mix.token"] = ([len(self.terms)], False)
        return groups

    # -- positional bias

    def term_table(self, k, layer):
        """(H, T) table of term k for one layer."""
        t, opts = self.terms[k], self.options[k]
        d = torch.arange(self.T, dtype=torch.float64)
        if t["plugin"] == "alibi":
            return -alibi_slopes(opts, self.H)[:, None] * d[None, :]
        theta = self.p[f"term.{t['label']}.theta"]
        a = theta[layer if theta.shape[0] > 1 else 0]
        return -a[:, None] * d[None, :]

    def initial_weights(self):
        """The weights the configuration asks for: `weight` where given, else 1 (sum) or 1/n (kernel);
        kernel weights are then normalised to sum to 1."""
        n = len(self.terms)
        given = [self.options[k].get("weight") for k in range(n)]
        if self.mixing == "sum":
            return torch.tensor([1.0 if g is None else float(g) for g in given])
        w = torch.tensor([1.0 / n if g is None else float(g) for g in given])
        return w / w.sum()

    def weights(self):
        if self.learn:
            a = self.p["mix.token"]
            return a if self.mixing == "sum" else torch.softmax(a, dim=0)
        return torch.tensor([float(t["weight"]) for t in self.terms])

    def mixed(self, layer):
        """(H, T) mixed token-stream table of one layer."""
        tables = torch.stack([self.term_table(k, layer) for k in range(len(self.terms))])  # (n, H, T)
        w = self.weights()
        if self.mixing == "sum":
            return (w[:, None, None] * tables).sum(0)
        return torch.logsumexp(tables + torch.log(w)[:, None, None], dim=0)

    def bias(self, layer):
        """(H, T, T) bias of query i and key j: M[h, i - j] (the upper triangle is masked later)."""
        if not self.terms:
            return None
        i = torch.arange(self.T)[:, None]
        j = torch.arange(self.T)[None, :]
        return self.mixed(layer)[:, (i - j).clamp(min=0)]

    # -- transformer

    @staticmethod
    def layer_norm(x, w, b):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + LN_EPS) * w + b

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def forward(self, inputs, targets):
        p, B, T, C, H, V = self.p, self.B, self.T, self.C, self.H, self.V
        hd = C // H
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        x = p["model.wte"][inputs]
        for l in range(self.L):
            h = self.layer_norm(x, p["model.ln1w"][l], p["model.ln1b"][l])
            qkv = h @ p["model.qkvw"][l].T + p["model.qkvb"][l]
            q, k, v = (z.reshape(B, T, H, hd).transpose(1, 2) for z in qkv.split(C, dim=-1))
            s = q @ k.transpose(-1, -2) / math.sqrt(hd)
            bias = self.bias(l)
            if bias is not None:
                s = s + bias[None]
            s = s.masked_fill(~causal, float("-inf"))
            y = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ p["model.attprojw"][l].T + p["model.attprojb"][l]
            h = self.layer_norm(x, p["model.ln2w"][l], p["model.ln2b"][l])
            f = self.gelu(h @ p["model.fcw"][l].T + p["model.fcb"][l])
            x = x + f @ p["model.fcprojw"][l].T + p["model.fcprojb"][l]
        x = self.layer_norm(x, p["model.lnfw"], p["model.lnfb"])
        logits = x @ p["model.wte"].T
        logp = torch.log_softmax(logits.reshape(-1, V), dim=-1)
        loss = -logp.gather(1, targets.reshape(-1, 1)).mean()
        return logits, loss

    def project(self):
        """The plugins' param_project after an optimizer step; returns how many values it changed."""
        changed = 0
        with torch.no_grad():
            for t in self.terms:
                if t["plugin"] == "testlin":
                    theta = self.p[f"term.{t['label']}.theta"]
                    changed += int((theta < 0).sum())
                    theta.clamp_(min=0.0)
        return changed


# ---------------------------------------------------------------- comparisons

class Report:
    """Comparisons, printed one line per tensor, or one line per group of tensors (the steps)."""

    def __init__(self, name):
        self.name = name
        self.failures = []
        self.pending = None  # [label, count, worst (rel, name, diff, scale), failed]

    def header(self):
        print(f"  {'tensor':<30} {'shape':<13} {'max|ref|':>9} {'max|diff|':>9} {'rel':>9}  ok")

    def compare(self, name, engine, ref, grad=False, group=None, relative=None):
        """engine: the engine's tensor (or None when missing); ref: the reference's. `grad` adds the
        gradient check; `relative` replaces the tolerance by relative * max|ref| + 1e-9. With
        `group`, the result is folded into one summary line for every tensor of the group."""
        ref = ref.detach().to(torch.float64)
        problem = None
        if engine is None:
            problem = "missing from the engine's file"
        elif list(engine.shape) != list(ref.shape):
            problem = f"shape {list(engine.shape)} in the engine, {list(ref.shape)} here"
        elif not torch.isfinite(engine).all():
            problem = "the engine's values are not all finite"
        elif not torch.isfinite(ref).all():
            problem = "the reference's values are not all finite"
        if problem:
            self.failures.append(f"{name}: {problem}")
            self.flush()
            print(f"  {name:<30} {problem}")
            return
        diff = (engine - ref).abs().max().item() if ref.numel() else 0.0
        scale = ref.abs().max().item() if ref.numel() else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
        if relative is None:
            ok = diff <= ATOL_REL * max(1.0, scale)
            why = f"max|diff| {diff:.3g} > {ATOL_REL:g} * max(1, {scale:.3g})"
        else:
            ok = diff <= relative * scale + 1e-9
            why = f"max|diff| {diff:.3g} > {relative:g} * {scale:.3g}"
        if ok and grad and diff > GRAD_REL * scale + GRAD_FLOOR:
            ok = False
            why = f"gradient off by {rel:.3g} of its size (limit {GRAD_REL:g})"
        if not ok:
            idx = np.unravel_index(int((engine - ref).abs().argmax()), tuple(ref.shape)) if ref.dim() else ()
            at = "[" + ",".join(str(int(i)) for i in idx) + "]"
            self.failures.append(f"{name}{at}: engine {engine[idx].item():.9g}, reference {ref[idx].item():.9g}: {why}")
        if group is None:
            self.flush()
            shape = "x".join(str(s) for s in ref.shape) or "scalar"
            print(f"  {name:<30} {shape:<13} {scale:9.3g} {diff:9.2e} {rel:9.2e}  {'ok' if ok else 'FAIL'}")
            return
        if self.pending and self.pending[0] != group:
            self.flush()
        if not self.pending:
            self.pending = [group, 0, (-1.0, "", 0.0, 0.0), False]
        self.pending[1] += 1
        if rel > self.pending[2][0]:
            self.pending[2] = (rel, name, diff, scale)
        self.pending[3] |= not ok

    def flush(self):
        if self.pending:
            group, count, (rel, name, diff, scale), failed = self.pending
            label = f"{group} ({count} tensors)"
            print(f"  {label:<30} {'':<13} {scale:9.3g} {diff:9.2e} {rel:9.2e}  {'ok' if not failed else 'FAIL'}"
                  f"  (worst: {name})")
            self.pending = None


def make_adamw(opt, decayed, plain):
    return torch.optim.AdamW([{"params": decayed, "weight_decay": opt["weight_decay"]},
                              {"params": plain, "weight_decay": 0.0}],
                             lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])


def scalar(tensors, name):
    t = tensors.get(name)
    return t if t is None else t.reshape(())


def main(argv):
    if len(argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    tensors, meta = read_safetensors(argv[1])
    if "case" not in meta:
        raise Malformed(f"{argv[1]}: no 'case' metadata")
    case = json.loads(meta["case"])
    opt = case["adamw"]
    groups = list(opt["decay"].keys())  # the engine's optimizer groups, in its order
    print(f"reference: case {case['name']}: layers {case['layers']}, heads {case['heads']}, dim {case['dim']}, "
          f"vocab {case['vocab']}, batch {case['B']} x {case['T']}, mixing {case['mixing']}, "
          f"learn_weights {case['learn_weights']}, terms "
          + (", ".join(f"{t['label']}({t['plugin']}{', per layer' if t['per_layer'] else ''}, w {t['weight']:.4g})"
                       for t in case["terms"]) or "none (NoPE)"))
    for name in groups:
        if name not in tensors:
            raise Malformed(f"optimizer group {name} has no tensor in the file")
    ref = Reference(case, {name: tensors[name] for name in groups})
    rep = Report(case["name"])

    # the optimizer's groups, shapes and decay flags
    expected = ref.expected_groups()
    for name in sorted(set(expected) | set(groups)):
        if name not in groups:
            rep.failures.append(f"{name}: the engine registers no such optimizer group")
        elif name not in expected:
            rep.failures.append(f"{name}: the engine registers a group the reference does not expect")
        else:
            shape, decay = expected[name]
            if list(tensors[name].shape) != shape:
                rep.failures.append(f"{name}: shape {list(tensors[name].shape)}, expected {shape}")
            if bool(opt["decay"][name]) != decay:
                rep.failures.append(f"{name}: weight decay {'on' if opt['decay'][name] else 'off'}, "
                                    f"expected {'on' if decay else 'off'}")
    print(f"  optimizer groups: {len(groups)} ({'match' if not rep.failures else 'MISMATCH'})")

    inputs = tensors["inputs"].round().long()
    targets = tensors["targets"].round().long()
    rep.header()

    def compare_tables(prefix):
        with torch.no_grad():
            for k, t in enumerate(ref.terms):
                mine = torch.stack([ref.term_table(k, l) for l in range(ref.L)])
                rep.compare(f"{prefix}table.{t['label']}", tensors.get(f"{prefix}table.{t['label']}"), mine)
            if ref.terms:
                rep.compare(f"{prefix}mixed.token", tensors.get(f"{prefix}mixed.token"),
                            torch.stack([ref.mixed(l) for l in range(ref.L)]))
                rep.compare(f"{prefix}weights", tensors.get(f"{prefix}weights"), ref.weights())

    # tables, forward, backward
    if ref.terms:
        rep.compare("config weights", torch.tensor([float(t["weight"]) for t in ref.terms]), ref.initial_weights())
    compare_tables("")
    logits, loss = ref.forward(inputs, targets)
    loss.backward()
    rep.compare("logits", tensors.get("logits"), logits)
    rep.compare("loss", scalar(tensors, "loss"), loss)
    for name in groups:
        rep.compare(f"grad.{name}", tensors.get(f"grad.{name}"), ref.p[name].grad, grad=True)

    # AdamW steps on the same batch, following the engine's trajectory: step k starts from the
    # engine's parameters (step<k>.<name>); the reference checks the loss and gradients there, then
    # applies torch.optim.AdamW to the engine's gradients (its own moments, float64) and the plugin
    # projection, and compares with where the engine went. Following the engine keeps the check
    # exact: Adam divides by sqrt(v), so a gradient that is 0 up to float noise (the key bias, whose
    # gradient vanishes identically) moves a float32 run by up to lr per step in a random direction,
    # and the two runs would drift apart for reasons that are not errors.
    decayed = [ref.p[n] for n in groups if expected.get(n, ([], False))[1]]
    plain = [ref.p[n] for n in groups if not expected.get(n, ([], False))[1]]
    adamw = make_adamw(opt, decayed, plain)
    for k in range(opt["steps"]):
        here = "" if k == 0 else f"step{k}."
        with torch.no_grad():
            for name in groups:
                ref.p[name].copy_(tensors[here + name])
                ref.p[name].grad = None
        _, loss = ref.forward(inputs, targets)
        rep.compare(f"loss_step{k}", scalar(tensors, f"loss_step{k}"), loss)
        loss.backward()
        if k > 0:
            for name in groups:
                rep.compare(f"{here}grad.{name}", tensors.get(f"{here}grad.{name}"), ref.p[name].grad, grad=True,
                            group=f"{here}grad.*")
        for name in groups:
            ref.p[name].grad = tensors[f"{here}grad.{name}"].clone()
        adamw.step()
        clamped = ref.project()
        there = f"step{k + 1}." if k + 1 < opt["steps"] else "final."
        for name in groups:
            rep.compare(f"{there}{name}", tensors.get(f"{there}{name}"), ref.p[name],
                        group=None if there == "final." else f"{there}*")
        rep.flush()
        # the step itself (about lr per value), relative to its size: weight decay moves a value
        # by only lr * wd * |p| per step, far below the tolerance on the values
        for name in groups:
            start, end = tensors[here + name], tensors.get(there + name)
            rep.compare(f"update {k}: {name}", None if end is None else end - start, ref.p[name] - start,
                        group=f"update of step {k}", relative=UPDATE_REL)
        rep.flush()
        if clamped:
            print(f"  (step {k}: the projection clamped {clamped} slope(s) to 0)")
    with torch.no_grad():
        for name in groups:
            ref.p[name].copy_(tensors[f"final.{name}"])
        _, loss = ref.forward(inputs, targets)
    rep.compare("loss_final", scalar(tensors, "loss_final"), loss)
    rep.compare("loss_final_eval", scalar(tensors, "loss_final_eval"), loss)
    compare_tables("final.")

    # The same steps run freely in float64 from the initial parameters: the losses must still agree.
    free = Reference(case, {name: tensors[name] for name in groups})
    adamw = make_adamw(opt, [free.p[n] for n in groups if expected.get(n, ([], False))[1]],
                       [free.p[n] for n in groups if not expected.get(n, ([], False))[1]])
    for k in range(opt["steps"] + 1):
        adamw.zero_grad(set_to_none=True)
        _, loss = free.forward(inputs, targets)
        name = f"loss_step{k}" if k < opt["steps"] else "loss_final"
        rep.compare(f"free run {name}", scalar(tensors, name), loss, group="free-run losses")
        if k < opt["steps"]:
            loss.backward()
            adamw.step()
            free.project()
    rep.flush()

    if rep.failures:
        print(f"reference: case {case['name']}: {len(rep.failures)} MISMATCH(ES):")
        for f in rep.failures:
            print(f"  - {f}")
        return 1
    print(f"reference: case {case['name']}: all tensors agree")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (Malformed, KeyError, ValueError, OSError) as e:
        print(f"reference: malformed input: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
