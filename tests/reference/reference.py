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
      + M_l,segment[h, seg(i) - seg(j)] for terms on the segment stream
  term tables: alibi   T_h(d) = -m_h d, m from the reference get_slopes (Press et al.) and options
               testlin T_h(d) = -a_h d, a learnable, one copy or one per layer
               kerple  log -r1 ln(1 + r2 d); power -r1 d^r2; 3para-log -r1 ln(1 + r2 d^r3) (Chi et al.)
               t5      scale * w[h, bucket(d)], HF's bucket arithmetic in float32 (Raffel et al.)
               mep     logsumexp_k(B_k + ln alpha_k): exp -s d, Gaussian -s d^2, KERPLE-log (Gao)
               qin     type1 -2 ln(d+1); type2 -ln(d+1)^2; harmonic -ln(d+1); nlogn -ln(n ln n), n = d +
                       offset (Qin et al.), the same in every head
  positions: bipe  segments close at a delimiter (its own segment); paper or code semantics
             embeddings (bipe intra-segment, ape learned: A[min(p, rows-1)]; ape sinusoidal
             [sin p w, cos p w]) added to wte[token]; rope rotates q, k (rotate-half) by p base^(-2k/hd)
  ABI 2 terms (on the token index i, j, d = i - j):
             fire    + b_h(i, j) = (W2 relu(W1 u + b1) + b2)[h], u = psi(d) / (psi(N(i)) + 1e-6),
                     psi(x) = ln(|c x| + 1), N(i) = |m L0| when |m L0| > i else i (Li et al., FIRE), the MLP
                     tabulated on the grid of u and interpolated linearly, as the engine does
             window  score = -inf unless i - j < window or j < sinks; the tables read at min(d, distance_cap)
             logn    q.k / sqrt(hd) multiplied by ln(i + 1) (Chiang & Cholak; n = i + 1 keys visible)
             ssmax   q.k / sqrt(hd) multiplied by s_h ln(i + 1), s learnable per head (Nakanishi)
             fox     sum_{l=j+1..i} log sigmoid(w_h . x_l + b_h) on the layer's attention input x, w and b
                     learnable (or b alone: gate = "bias_only"), per layer (Lin et al., Forgetting Transformer)
             cope    q_i . e interpolated at p_ij = min(sum_{t=j..i} sigmoid(q_i.k_t / sqrt(hd)), npos - 1) over
                     the visible keys, divided by sqrt(hd) (pos_scale "sqrt_d"), e learnable (Golovneva et al.)
             rope    scaling pi: theta_k / s; ntk: base s^(hd/(hd-2)); yarn: the ramp in the pair index between
                     floor/ceil of k(beta_fast), k(beta_slow), and q, k times 0.1 ln s + 1 (Peng et al.);
                     factor 0: s = max(1, T / L)
  mixing:  sum  M = sum_t w_t T_t;  kernel  M = log sum_t w_t exp(T_t), per stream; streams add
  weights: the configured ones, else 1 (sum) or 1/n (kernel); kernel weights normalised to sum 1;
           learnable: sum trains w itself, kernel trains a with w = softmax(a); a term's learn_weight says
           whether its weight trains, weight_per_head whether it has one per head: then every term of
           its stream has a weight per head, w[t, h], and head h's table row is mixed with w[:, h]
           (sum: w[t, h] = a[t, h]; kernel: w[:, h] = softmax over the terms of a[:, h]); mix.<stream>
           packs the learned terms' a (1 or H values each; (terms, H) when every one has H); a fixed
           term's a is its configured weight (sum) or its log (kernel)
  AdamW:   torch.optim.AdamW, weight decay only on wte and the block matrices (qkvw, attprojw, fcw,
           fcprojw); after each step the projection (testlin: a >= 0; kerple, mep: >= 0.01,
           exponents <= 2)

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
# [model] family = "llama": RMSNorm, no biases, grouped-query q/k/v, SwiGLU (fcw = [gate; up]), untied lmhead,
# QK-norm (qnormw, knormw: one RMSNorm weight of head_dim per layer for the query heads, one for the keys)
LLAMA_TENSORS = ["wte", "rms1w", "qkvw", "attprojw", "rms2w", "fcw", "fcprojw", "rmsfw"]
LLAMA_DECAYED = {"wte", "qkvw", "attprojw", "fcw", "fcprojw", "lmhead"}


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


def t5_buckets(T, opts):
    """Bucket of each causal distance 0..T-1, HF T5 _relative_position_bucket in float32 with
    relative_position = -d (key before the query)."""
    nb, max_distance = int(opts.get("buckets", 32)), int(opts.get("max_distance", 128))
    if opts.get("bidirectional", False):
        nb //= 2  # keys before the query use the lower half
    n = torch.arange(T)
    max_exact = nb // 2
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (nb - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, nb - 1))
    return torch.where(n < max_exact, n, large)


def power(d, p):
    """d ** p with 0 ** p = 0 and no NaN in the gradient with respect to p at d = 0."""
    safe = torch.where(d > 0, d, torch.ones_like(d))
    return torch.where(d > 0, safe ** p, torch.zeros_like(d))


def bilevel_ids(tokens, opts):
    """BiPE's (segment index, position in segment) of one row: a delimiter closes its segment."""
    delims = [ord(c) for c in opts.get("delimiters", [".", "\n"])]
    code = opts.get("semantics", "paper") == "code"
    seg, pos, s, p = [], [], 0, 0
    for n, tok in enumerate(tokens):
        seg.append(s)
        pos.append(p)
        closes = tok in delims
        if closes and code and tok != 10:
            closes = n > 0 and tokens[n - 1] == 32
        if closes:
            s, p = s + 1, 0
        else:
            p += 1
    return seg, pos


TABLE_PLUGINS = ("alibi", "testlin", "kerple", "t5", "mep", "qin")
KNOWN_PLUGINS = TABLE_PLUGINS + ("bipe", "rope", "xpos", "ape", "fire", "window", "logn", "ssmax", "fox", "cope")
FIRE_EPS = 1e-6
FIRE_GRID = 1025  # the fire plugin's default grid (plugins/fire/fire_math.h, BK_FIRE_DEFAULT_GRID)
STREAMS = ("token", "segment")


class Reference:
    def __init__(self, case, params):
        self.case = case
        self.L, self.H, self.C, self.V = case["layers"], case["heads"], case["dim"], case["vocab"]
        self.family = case.get("family", "gpt2")
        self.KV = case.get("kv_heads", self.H)
        self.hd = case.get("head_dim", self.C // self.H)
        self.F = case.get("ffn_dim", 4 * self.C)
        self.eps = case.get("norm_eps", LN_EPS)
        self.tied = case.get("tied", True)
        self.qk_norm = case.get("qk_norm", False)
        self.B, self.T = case["B"], case["T"]
        self.mixing = case["mixing"]
        self.learn = bool(case["learn_weights"])
        self.terms = case["terms"]
        for t in self.terms:  # cases written before learn_weight / weight_per_head: the [attention] switch
            t.setdefault("learn_weight", self.learn and t["plugin"] in TABLE_PLUGINS)
            t.setdefault("weight_per_head", False)
        self.options = case.get("options", [])
        if len(self.options) != len(self.terms):
            raise Malformed(f"{len(self.terms)} terms but {len(self.options)} option objects")
        for t in self.terms:
            if t["plugin"] not in KNOWN_PLUGINS:
                raise Malformed(f"term {t['label']}: the reference does not know plugin {t['plugin']}")
        self.tables = [k for k, t in enumerate(self.terms) if t["plugin"] in TABLE_PLUGINS]
        self.on = {s: [k for k in self.tables if self.terms[k]["stream"] == s] for s in STREAMS}
        # leaves: one tensor per optimizer group
        self.p = {name: value.clone().requires_grad_(True) for name, value in params.items()}

    def n_params(self, k):
        """Parameters of one copy of term k, from the description of the scheme alone."""
        t, o, H, C = self.terms[k], self.options[k], self.H, self.C
        rows = lambda key: int(o.get(key, 0)) or self.case["train_length"]  # noqa: E731
        if t["plugin"] == "testlin":
            return H
        if t["plugin"] == "kerple":
            return 0 if o.get("learnable", True) is False else (3 if o.get("variant") == "3para-log" else 2) * H
        if t["plugin"] == "t5":
            return H * int(o.get("buckets", 32))
        if t["plugin"] == "mep":
            return 2 * H if "kerple-log" in self.mep_kernels(o) else 0
        if t["plugin"] == "bipe":
            return rows("max_position") * C if o.get("intra_embedding", True) else 0
        if t["plugin"] == "ape":
            return rows("max_positions") * C if o.get("variant") == "learned" else 0
        if t["plugin"] == "fire":
            w = int(o.get("width", 32))
            return 2 * w + H * w + H + 2
        if t["plugin"] == "ssmax":
            return H
        if t["plugin"] == "fox":
            return H if o.get("gate") == "bias_only" else H * C + H
        if t["plugin"] == "cope":
            return self.cope_points(o) * self.hd
        return 0

    def cope_points(self, o):
        return int(o.get("points", 0)) or self.case["train_length"] + 1

    def expected_groups(self):
        """Names, shapes and decay flags the optimizer must have, from the description alone."""
        L, C, V = self.L, self.C, self.V
        shapes = {"wte": [V, C], "ln1w": [L, C], "ln1b": [L, C], "qkvw": [L, 3 * C, C], "qkvb": [L, 3 * C],
                  "attprojw": [L, C, C], "attprojb": [L, C], "ln2w": [L, C], "ln2b": [L, C],
                  "fcw": [L, 4 * C, C], "fcb": [L, 4 * C], "fcprojw": [L, C, 4 * C], "fcprojb": [L, C],
                  "lnfw": [C], "lnfb": [C]}
        groups = {f"model.{n}": (shapes[n], n in DECAYED) for n in MODEL_TENSORS}
        if self.family == "llama":
            A, R, F = self.H * self.hd, (self.H + 2 * self.KV) * self.hd, self.F
            shapes = {"wte": [V, C], "rms1w": [L, C], "qkvw": [L, R, C], "attprojw": [L, C, A], "rms2w": [L, C],
                      "fcw": [L, 2 * F, C], "fcprojw": [L, C, F], "rmsfw": [C], "lmhead": [V, C],
                      "qnormw": [L, self.hd], "knormw": [L, self.hd]}
            names = LLAMA_TENSORS + ([] if self.tied else ["lmhead"]) + (["qnormw", "knormw"] if self.qk_norm else [])
            groups = {f"model.{n}": (shapes[n], n in LLAMA_DECAYED) for n in names}
        for k, t in enumerate(self.terms):
            if self.n_params(k):
                copies = self.L if t["per_layer"] else 1
                groups[f"term.{t['label']}.theta"] = ([copies, self.n_params(k)], False)
        for s in STREAMS:
            learned = [k for k in self.on[s] if self.terms[k]["learn_weight"]]
            if not learned:
                continue
            per_head = [k for k in learned if self.terms[k]["weight_per_head"]]
            if len(per_head) == len(learned):
                groups[f"mix.{s}"] = ([len(learned), self.H], False)
            else:
                groups[f"mix.{s}"] = ([sum(self.H if k in per_head else 1 for k in learned)], False)
        return groups

    # -- positional bias

    @staticmethod
    def mep_kernels(o):
        return o.get("kernels", ["kerple-log", "gauss"] if o.get("variant") == "param" else ["exp", "exp", "gauss"])

    def theta(self, k, layer):
        theta = self.p[f"term.{self.terms[k]['label']}.theta"]
        return theta[layer if theta.shape[0] > 1 else 0]

    def term_table(self, k, layer):
        """(H, T) table of term k for one layer."""
        t, o, H = self.terms[k], self.options[k], self.H
        d = torch.arange(self.T, dtype=torch.float64)[None, :]
        if t["plugin"] == "alibi":
            return -alibi_slopes(o, H)[:, None] * d
        if t["plugin"] == "testlin":
            return -self.theta(k, layer)[:, None] * d
        if t["plugin"] == "kerple":
            if o.get("learnable", True) is False:
                r = [torch.tensor([float(v) for v in o[key]]) * torch.ones(H) for key in ("r1", "r2", "r3") if key in o]
            else:
                r = self.theta(k, layer).reshape(-1, H)
            r = [x[:, None] for x in r]
            variant = o.get("variant", "log")
            if variant == "log":
                return -r[0] * torch.log1p(r[1] * d)
            if variant == "power":
                return -r[0] * power(d, r[1])
            return -r[0] * torch.log1p(r[1] * power(d, r[2]))
        if t["plugin"] == "t5":
            nb = int(o.get("buckets", 32))
            w = self.theta(k, layer).reshape(H, nb)
            return float(o.get("scale", 1.0)) * w[:, t5_buckets(self.T, o)]
        if t["plugin"] == "mep":
            kernels = self.mep_kernels(o)
            n = len(kernels)
            scales = o.get("slope_scales", [1.0, 1.0] if o.get("variant") == "param" else [1.0, 0.5, 1.0])
            alpha = torch.tensor([float(v) for v in o.get("weights", [1.0] * n)])
            alpha = alpha / alpha.sum()
            slopes = torch.tensor(get_slopes(H))[:, None]
            parts = []
            for kern, sc in zip(kernels, scales):
                if kern == "exp":
                    parts.append(-float(sc) * slopes * d)
                elif kern == "gauss":
                    parts.append(-float(sc) * slopes * d * d)
                else:
                    r = self.theta(k, layer).reshape(2, H)
                    parts.append(-r[0][:, None] * torch.log1p(r[1][:, None] * d))
            return torch.logsumexp(torch.stack(parts) + torch.log(alpha)[:, None, None], dim=0)
        if t["plugin"] == "qin":
            form = o.get("form", "type1")
            if form == "nlogn":
                n = d + float(o.get("offset", 2))
                row = -torch.log(n * torch.log(n))
            else:
                row = {"type1": -2.0 * torch.log(d + 1), "type2": -torch.log(d + 1) ** 2,
                       "harmonic": -torch.log(d + 1)}[form]
            return row.expand(H, self.T)
        raise Malformed(f"term {t['label']}: plugin {t['plugin']} has no table")

    def per_head(self, s):
        """Whether the weights of stream s are per head (a term on it learns one per head)."""
        return any(self.terms[k]["learn_weight"] and self.terms[k]["weight_per_head"] for k in self.on[s])

    def table_weights(self):
        """The weights of every table term, in term order: (terms,), or (terms, H) when a stream's are per
        head (the others' repeated over the heads)."""
        per = {s: self.weights(s) for s in STREAMS if self.on[s]}
        heads = any(self.per_head(s) for s in STREAMS if self.on[s])
        rows = [per[self.terms[k]["stream"]][self.on[self.terms[k]["stream"]].index(k)] for k in self.tables]
        if heads:
            rows = [r.expand(self.H) if r.dim() == 0 else r for r in rows]
        return torch.stack(rows)

    def initial_weights(self):
        """The weights the configuration asks for: `weight` where given, else 1 (sum) or 1/n (kernel);
        kernel weights are then normalised to sum to 1 per stream."""
        out = {}
        for s in STREAMS:
            n = len(self.on[s])
            given = [self.options[k].get("weight") for k in self.on[s]]
            if self.mixing == "sum":
                out[s] = [1.0 if g is None else float(g) for g in given]
            else:
                w = [1.0 / n if g is None else float(g) for g in given]
                out[s] = [v / sum(w) for v in w]
        return torch.tensor([out[self.terms[k]["stream"]][self.on[self.terms[k]["stream"]].index(k)]
                             for k in self.tables])

    def weights(self, s):
        """(n,) weights of the stream's terms, or (n, H) when they are per head."""
        learned = [k for k in self.on[s] if self.terms[k]["learn_weight"]]
        if not learned:
            return torch.tensor([float(self.terms[k]["weight"]) for k in self.on[s]])
        a = self.p[f"mix.{s}"].reshape(-1)
        given = self.initial_weights()
        heads = self.H if self.per_head(s) else 1
        rows, at = [], 0
        for k in self.on[s]:
            t = self.terms[k]
            if not t["learn_weight"]:
                w = float(given[self.tables.index(k)])
                fixed = w if self.mixing == "sum" else (math.log(w) if w > 0 else -math.inf)
                rows.append(torch.full((heads,), fixed, dtype=torch.float64))
            elif t["weight_per_head"]:
                rows.append(a[at:at + heads])
                at += heads
            else:
                rows.append(a[at].expand(heads))
                at += 1
        logits = torch.stack(rows)  # (n, heads)
        w = logits if self.mixing == "sum" else torch.softmax(logits, dim=0)
        return w if heads > 1 else w[:, 0]

    def on_layer(self, k, layer):
        """Whether term k acts in `layer`: the options' explicit "layers" list (the test's own statement of
        what the [[term]] layers key selects), else every layer."""
        chosen = self.options[k].get("layers")
        return chosen is None or layer in chosen

    def mixed(self, layer, s):
        """(H, T) mixed table of one stream and layer, of the stream's terms that act in the layer; None when
        none does."""
        idx = [n for n, k in enumerate(self.on[s]) if self.on_layer(k, layer)]
        if not idx:
            return None
        tables = torch.stack([self.term_table(self.on[s][n], layer) for n in idx])  # (n, H, T)
        w = self.weights(s)[idx]
        w = w[:, :, None] if w.dim() == 2 else w[:, None, None]  # per head: head h's row mixed with w[:, h]
        if self.mixing == "sum":
            return (w * tables).sum(0)
        return torch.logsumexp(tables + torch.log(w), dim=0)

    def positions(self, inputs):
        """(B, T) positions of each stream (token; segment index) and in-segment positions."""
        tok = torch.arange(self.T)[None, :].expand(self.B, self.T)
        seg, intra = tok, tok
        for k, t in enumerate(self.terms):
            if "segment" in t["caps"].split(", "):
                rows = [bilevel_ids(row.tolist(), self.options[k]) for row in inputs]
                seg = torch.tensor([r[0] for r in rows])
                intra = torch.tensor([r[1] for r in rows])
        return {"token": tok, "segment": seg, "intra": intra}

    def term_of(self, plugin, layer=None):
        """(index, options) of the first term of `plugin` (that acts in `layer` when one is given), or
        (None, None)."""
        for k, t in enumerate(self.terms):
            if t["plugin"] == plugin:
                return (k, self.options[k]) if layer is None or self.on_layer(k, layer) else (None, None)
        return None, None

    def fire_bias(self, layer):
        """(H, T, T) FIRE bias of every (i, j) as the engine computes it: the MLP tabulated at the grid
        u_g = g / (P - 1) and interpolated linearly at u(i, j) (cell g = floor(u (P - 1)), at most P - 2);
        or None. The grid's distance from the exact MLP is measured by tests/test_fire.c against
        tests/reference/fire_reference.py (exact FIRE, values and gradients, with proven bounds)."""
        k, o = self.term_of("fire", layer)
        if k is None:
            return None
        H, T, W = self.H, self.T, int(o.get("width", 32))
        P = int(o.get("grid", FIRE_GRID))
        th = self.theta(k, layer)
        w1, b1 = th[0:W], th[W:2 * W]
        w2, b2 = th[2 * W:2 * W + H * W].reshape(H, W), th[2 * W + H * W:2 * W + H * W + H]
        c, m = th[-2], th[-1]
        l0 = float(o.get("threshold", 0)) or float(self.case["train_length"] // 2)
        i = torch.arange(T, dtype=torch.float64)[:, None]
        d = (i - torch.arange(T, dtype=torch.float64)[None, :]).clamp(min=0)
        psi = lambda x: torch.log(torch.abs(c * x) + 1.0)  # noqa: E731
        lm = torch.abs(m * l0)
        n = torch.where(lm > i, lm.expand_as(i), i)  # max(i, L), L's side only when it is strictly larger
        u = psi(d) / (psi(n) + FIRE_EPS)  # (T, T), in [0, 1]
        ug = torch.arange(P, dtype=torch.float64) / (P - 1)
        grid = torch.relu(ug[:, None] * w1 + b1) @ w2.T + b2  # (P, H): b_h(u_g)
        x = (u * (P - 1)).clamp(0.0, P - 1.0)
        cell = x.detach().floor().clamp(max=P - 2).long()
        t = x - cell
        return (grid[cell] + t[..., None] * (grid[cell + 1] - grid[cell])).permute(2, 0, 1)

    def keep(self, layer):
        """(T, T) keys each query of `layer` sees: causal, and the window term's window and sinks."""
        T = self.T
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        keep = j <= i
        _, o = self.term_of("window", layer)
        if o is not None:
            keep = keep & ((i - j < int(o["window"])) | (j < int(o.get("sinks", 0))))
        return keep

    def logit_scale(self, layer):
        """(H, T) factor of q.k / sqrt(hd) per query, or None."""
        n = torch.arange(self.T, dtype=torch.float64) + 1.0
        k, o = self.term_of("logn", layer)
        if k is not None:
            return torch.log(n)[None, :].expand(self.H, self.T)
        k, o = self.term_of("ssmax", layer)
        if k is not None:
            return self.theta(k, layer)[:, None] * torch.log(n)[None, :]
        return None

    def forget_bias(self, layer, h):
        """(B, H, T, T) Forgetting Transformer bias sum_{l=j+1..i} log sigmoid(w_h . h_l + b_h) of the layer's
        attention input h (B, T, C), as the difference of the cumulative sums, or None."""
        k, o = self.term_of("fox", layer)
        if k is None:
            return None
        th, H = self.theta(k, layer), self.H
        if o.get("gate") == "bias_only":
            z = th[None, None, :].expand(self.B, self.T, H)
        else:
            z = h @ th[:H * self.C].reshape(H, self.C).T + th[H * self.C:]
        c = torch.cumsum(torch.nn.functional.logsigmoid(z), dim=1).transpose(1, 2)  # (B, H, T)
        return c[:, :, :, None] - c[:, :, None, :]

    def counted_bias(self, layer, a, q, keep):
        """(B, H, T, T) CoPE term from the scores a = q.k / sqrt(hd) (before any logit scale), as the reference
        code computes it: gates sigmoid(a) on the visible keys, counts by a reverse cumulative sum, clamped to
        npos - 1, and q . e interpolated between the floor and the ceiling of the count; or None."""
        k, o = self.term_of("cope", layer)
        if k is None:
            return None
        npos, hd = self.cope_points(o), self.hd
        E = self.theta(k, layer).reshape(npos, hd)
        gates = torch.sigmoid(a) * keep
        p = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos - 1)
        logits = q @ E.T  # (B, H, T, npos)
        lo, hi = p.detach().floor().long(), p.detach().ceil().long()
        w = p - lo
        pos = logits.gather(-1, hi) * w + logits.gather(-1, lo) * (1 - w)
        return pos / math.sqrt(hd) if o.get("pos_scale", "sqrt_d") == "sqrt_d" else pos

    def bias(self, layer, pos):
        """(B, H, T, T) bias of query i and key j: sum over streams of M_s[h, p_s(i) - p_s(j)]."""
        total = None
        _, wo = self.term_of("window", layer)
        cap = int(wo.get("distance_cap", 0)) if wo is not None else 0
        for s in STREAMS:
            if not self.on[s]:
                continue
            p = pos[s]
            delta = (p[:, :, None] - p[:, None, :]).clamp(min=0)  # (B, T, T); masked above the diagonal
            if cap:
                delta = delta.clamp(max=cap)
            m = self.mixed(layer, s)  # (H, T)
            if m is None:
                continue
            b = m[:, delta].permute(1, 0, 2, 3)  # (B, H, T, T)
            total = b if total is None else total + b
        return total

    def embeddings(self, pos):
        """(B, T, C) sum of the embedding terms' A[p]."""
        out = torch.zeros(self.B, self.T, self.C)
        for k, t in enumerate(self.terms):
            o = self.options[k]
            p = pos["intra"] if t["stream"] == "segment" else pos["token"]
            if t["plugin"] == "bipe" and o.get("intra_embedding", True) or \
                    t["plugin"] == "ape" and o.get("variant") == "learned":
                table = self.theta(k, 0).reshape(-1, self.C)
                out = out + table[p.clamp(max=table.shape[0] - 1)]
            elif t["plugin"] == "ape":
                half = self.C // 2
                w = float(o.get("base", 10000.0)) ** (-2.0 * torch.arange(half) / self.C)
                ang = p[..., None].double() * w
                scale = float(o.get("scale", 0.0)) or self.C ** -0.5  # 0: 1/sqrt(C)
                out = out + scale * torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)
        return out

    def extension(self, layer):
        """RoPE's training-free extension in `layer` (option `extend`): (lo, q_far, k_far), the far pairs
        d = i - j >= lo attending with the query at q_far[i] and the key at k_far[j] (float64, T), the near ones
        at i and j; None without one. Self-Extend (LongLM): q at i // G + W - W // G, k at j // G; ReRoPE:
        q at W, k at 0 (leaky k: q at i / k + W (1 - 1 / k), k at j / k); STRING: d >= S at d - S + W."""
        for k, t in enumerate(self.terms):
            if t["plugin"] != "rope" or not self.on_layer(k, layer):
                continue
            o = self.options[k]
            ext = o.get("extend", "none")
            if ext == "none":
                return None
            i = torch.arange(self.T, dtype=torch.float64)
            W = int(o["window"])
            if ext == "self-extend":
                G = int(o["group"])
                g = torch.div(i, G, rounding_mode="floor")
                return W, g + W - W // G, g
            if ext == "rerope":
                lk = float(o.get("leaky", 0.0))
                if lk > 0:
                    return W, i / lk + W * (1.0 - 1.0 / lk), i / lk
                return W, torch.full_like(i, float(W)), torch.zeros_like(i)
            S = int(o["shift"])
            return S, i - S + W, i
        return None

    def rotate(self, x, pos, layer, key=False, at=None):
        """RoPE (rotate-half) of x (B, H, T, hd) by the rotary term's stream, if there is one in `layer`
        (at: other positions, (T,), for every row); xPos (Sun et al. 2022) also scales pair k of a query at
        position p by zeta_k^(p / scale_base), of a key (key=True) by zeta_k^(-p / scale_base),
        zeta_k = (2k/hd + gamma) / (1 + gamma)."""
        for k, t in enumerate(self.terms):
            if t["plugin"] not in ("rope", "xpos") or not self.on_layer(k, layer):
                continue
            hd = x.shape[-1]
            half = hd // 2
            o = self.options[k]
            if t["plugin"] == "xpos":
                pairs = torch.arange(half, dtype=torch.float64)
                inv = float(o.get("base", 10000.0)) ** (-2.0 * pairs / hd)
                g = float(o.get("gamma", 0.4))
                zeta = (2.0 * pairs / hd + g) / (1.0 + g)
                p = pos[t["stream"]][:, None, :, None].double() / float(o.get("scale_base", 512.0))
                amp = zeta ** (-p if key else p)  # (B, 1, T, half)
            else:
                inv, amp = self.rope_frequencies(o, hd)
            p = pos[t["stream"]] if at is None else at[None, :].expand(x.shape[0], -1)
            ang = p[:, None, :, None].double() * inv  # (B, 1, T, half)
            c, s = amp * torch.cos(ang), amp * torch.sin(ang)
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
        return x

    def rope_frequencies(self, o, hd):
        """RoPE's inverse frequencies and amplitude: scaled (rope_scaled), then Resonance RoPE's wavelengths
        rounded to the nearest integer (at least 1), then p-RoPE's partial rotation (the pairs from
        round(p hd/2) on do not turn)."""
        theta, amp = self.rope_scaled(o, hd)
        if o.get("resonance", False):
            wave = torch.floor(2 * math.pi / theta + 0.5).clamp(min=1.0)
            theta = 2 * math.pi / wave
        turning = math.floor(float(o.get("partial", 1.0)) * (hd // 2) + 0.5)
        theta = torch.where(torch.arange(hd // 2) < turning, theta, torch.zeros_like(theta))
        return theta, amp

    def rope_scaled(self, o, hd):
        """RoPE's inverse frequencies and amplitude with the options' length scaling (PI, NTK-aware,
        YaRN as in the YaRN paper's code: the ramp is linear in the pair index; LongRoPE as HF transformers'
        rope_type "longrope": one factor per pair, the long set beyond the original length, the attention
        factor sqrt(1 + ln s / ln L))."""
        base = float(o.get("base", 10000.0))
        k = torch.arange(hd // 2, dtype=torch.float64)
        theta = base ** (-2.0 * k / hd)
        scaling = o.get("scaling", "none")
        if scaling == "none":
            return theta, 1.0
        L = float(o.get("original_length", 0)) or float(self.case["train_length"])
        factor = float(o.get("factor", 1.0))
        s = max(1.0, self.T / L) if factor == 0 else factor
        if scaling == "pi":
            return theta / s, 1.0
        if scaling == "ntk":
            return (base * s ** (hd / (hd - 2))) ** (-2.0 * k / hd), 1.0
        if scaling == "longrope":
            lam = torch.tensor(o["long_factor"] if self.T > L else o["short_factor"], dtype=torch.float64)
            amp = math.sqrt(1.0 + math.log(s) / math.log(L)) if s > 1 else 1.0
            return theta / lam, amp * float(o.get("attn_factor", 1.0))
        def pair(n_rot):  # the (fractional) pair index whose wavelength fits n_rot times into L
            return hd * math.log(L / (n_rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(pair(float(o.get("beta_fast", 32)))), 0)
        high = min(math.ceil(pair(float(o.get("beta_slow", 1)))), hd - 1)
        if low == high:
            high += 0.001
        ramp = ((k - low) / (high - low)).clamp(0.0, 1.0)
        keep = 1.0 - ramp  # 1: the pair keeps its frequency (extrapolates); 0: interpolated by s
        theta = theta / s * (1.0 - keep) + theta * keep
        amp = (0.1 * math.log(s) + 1.0 if s > 1 else 1.0) * float(o.get("attn_factor", 1.0))
        return theta, amp

    # -- transformer

    @staticmethod
    def layer_norm(x, w, b):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + LN_EPS) * w + b

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    @staticmethod
    def rms_norm(x, w, eps):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def attend(self, l, q, k, v, h, pos, causal):
        """Attention of layer l over q, k, v (B, H, T, hd), with every term's part of the scores; h is the
        block's normed input (what a content term reads). Returns (B, T, H hd)."""
        B, T = self.B, self.T
        ext = self.extension(l)
        q0, k0 = q, k
        q, k = self.rotate(q, pos, l), self.rotate(k, pos, l, key=True)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if ext is not None:  # the far pairs' scores from their own positions; one softmax over both
            lo, qf, kf = ext
            far = self.rotate(q0, pos, l, at=qf) @ self.rotate(k0, pos, l, key=True, at=kf).transpose(-1, -2)
            d = torch.arange(T)[:, None] - torch.arange(T)[None, :]
            s = torch.where(d >= lo, far / math.sqrt(q.shape[-1]), s)
        counted = self.counted_bias(l, s, q, causal)
        lam = self.logit_scale(l)
        if lam is not None:
            s = s * lam[None, :, :, None]
        bias = self.bias(l, pos)
        if bias is not None:
            s = s + bias
        fire = self.fire_bias(l)
        if fire is not None:
            s = s + fire
        forget = self.forget_bias(l, h)
        if forget is not None:
            s = s + forget
        if counted is not None:
            s = s + counted
        s = s.masked_fill(~causal, float("-inf"))
        return (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)

    def logits_loss(self, logits, targets):
        logp = torch.log_softmax(logits.reshape(-1, self.V), dim=-1)
        return logits, -logp.gather(1, targets.reshape(-1, 1)).mean()

    def forward(self, inputs, targets):
        if self.family == "llama":
            return self.forward_llama(inputs, targets)
        p, B, T, C, H = self.p, self.B, self.T, self.C, self.H
        hd = C // H
        pos = self.positions(inputs)
        x = p["model.wte"][inputs] + self.embeddings(pos)
        for l in range(self.L):
            h = self.layer_norm(x, p["model.ln1w"][l], p["model.ln1b"][l])
            qkv = h @ p["model.qkvw"][l].T + p["model.qkvb"][l]
            q, k, v = (z.reshape(B, T, H, hd).transpose(1, 2) for z in qkv.split(C, dim=-1))
            y = self.attend(l, q, k, v, h, pos, self.keep(l))
            x = x + y @ p["model.attprojw"][l].T + p["model.attprojb"][l]
            h = self.layer_norm(x, p["model.ln2w"][l], p["model.ln2b"][l])
            f = self.gelu(h @ p["model.fcw"][l].T + p["model.fcb"][l])
            x = x + f @ p["model.fcprojw"][l].T + p["model.fcprojb"][l]
        x = self.layer_norm(x, p["model.lnfw"], p["model.lnfb"])
        return self.logits_loss(x @ p["model.wte"].T, targets)

    def forward_llama(self, inputs, targets):
        """The LLaMA block as HF transformers' LlamaForCausalLM computes it: RMSNorm, q of H heads and k, v of
        KV heads repeated to H (repeat_kv), SwiGLU down(silu(gate) * up), no biases; with QK-norm each query
        and key head RMS-normalised over its head_dim before the rotation (Qwen3's q_norm, k_norm)."""
        p, B, T, H, KV, hd, F, eps = self.p, self.B, self.T, self.H, self.KV, self.hd, self.F, self.eps
        pos = self.positions(inputs)
        x = p["model.wte"][inputs] + self.embeddings(pos)
        for l in range(self.L):
            h = self.rms_norm(x, p["model.rms1w"][l], eps)
            q, k, v = (h @ p["model.qkvw"][l].T).split([H * hd, KV * hd, KV * hd], dim=-1)
            q = q.reshape(B, T, H, hd).transpose(1, 2)
            if self.qk_norm:
                q = self.rms_norm(q, p["model.qnormw"][l], eps)
                k = self.rms_norm(k.reshape(B, T, KV, hd), p["model.knormw"][l], eps).reshape(B, T, KV * hd)
            k, v = (z.reshape(B, T, KV, hd).transpose(1, 2).repeat_interleave(H // KV, dim=1) for z in (k, v))
            y = self.attend(l, q, k, v, h, pos, self.keep(l))
            x = x + y @ p["model.attprojw"][l].T
            h = self.rms_norm(x, p["model.rms2w"][l], eps)
            g, u = (h @ p["model.fcw"][l].T).split(F, dim=-1)
            x = x + (torch.nn.functional.silu(g) * u) @ p["model.fcprojw"][l].T
        x = self.rms_norm(x, p["model.rmsfw"], eps)
        head = p["model.wte"] if self.tied else p["model.lmhead"]
        return self.logits_loss(x @ head.T, targets)

    def project(self):
        """The plugins' param_project after an optimizer step; returns how many values it changed."""
        changed = 0
        with torch.no_grad():
            for k, t in enumerate(self.terms):
                name = f"term.{t['label']}.theta"
                if name not in self.p:
                    continue
                theta = self.p[name]
                if t["plugin"] == "testlin":
                    lo, hi = torch.zeros_like(theta), None
                elif t["plugin"] in ("kerple", "mep"):
                    lo = torch.full_like(theta, 0.01)
                    hi = None
                    variant = self.options[k].get("variant", "log")
                    if t["plugin"] == "kerple" and variant in ("power", "3para-log"):
                        hi = torch.full_like(theta, float("inf"))
                        hi.view(theta.shape[0], -1, self.H)[:, 1 if variant == "power" else 2] = 2.0
                else:
                    continue
                new = theta.clamp(min=lo) if hi is None else torch.max(torch.min(theta, hi), lo)
                changed += int((new != theta).sum())
                theta.copy_(new)
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
          + (", ".join(f"{t['label']}({t['plugin']} on {t['stream']}{', per layer' if t['per_layer'] else ''}"
                       + (f", w {t['weight']:.4g})" if t["weight"] is not None else ")")
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
            for k in ref.tables:
                t = ref.terms[k]
                mine = torch.stack([ref.term_table(k, l) for l in range(ref.L)])
                rep.compare(f"{prefix}table.{t['label']}", tensors.get(f"{prefix}table.{t['label']}"), mine)
            def layer_table(l, s):  # what the attention reads: min(d, distance_cap) under LM-Infinite's cap,
                _, wo = ref.term_of("window", l)  # 0 in a layer without the stream's terms
                cap = int(wo.get("distance_cap", 0)) if wo is not None else 0
                capped = torch.arange(ref.T).clamp(max=cap) if cap else torch.arange(ref.T)
                m = ref.mixed(l, s)
                return torch.zeros(ref.H, ref.T, dtype=torch.float64) if m is None else m[:, capped]
            for s in STREAMS:
                if ref.on[s]:
                    rep.compare(f"{prefix}mixed.{s}", tensors.get(f"{prefix}mixed.{s}"),
                                torch.stack([layer_table(l, s) for l in range(ref.L)]))
            if ref.tables:
                rep.compare(f"{prefix}weights", tensors.get(f"{prefix}weights"), ref.table_weights())

    # tables, forward, backward
    if ref.tables:
        rep.compare("config weights", torch.tensor([float(ref.terms[k]["weight"]) for k in ref.tables]),
                    ref.initial_weights())
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
            print(f"  (step {k}: the projection clamped {clamped} parameter value(s))")
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
