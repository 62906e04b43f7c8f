#!/usr/bin/python3
"""The model of bench_train.c written the way a PyTorch user would: PyTorch, fp32, CPU.

    python3 bench/bench_torch.py --layers 4 --dim 256 --heads 8 --length 256 --batch 8 \
        --steps 10 --warmup 3 [--threads 2] [--vocab 256] [--alibi | --nope] [--name NAME] \
        [--mode eager|sdpa|compile|eval-flex|eval-sdpa] [--mem-limit-gib 14] [--no-breakdown]
    python3 bench/bench_torch.py --blas-info     # one line: torch version and the BLAS it runs

Token embedding, pre-LN blocks (causal multi-head attention with the ALiBi bias, a GELU-tanh MLP of
width 4C), final LayerNorm, output head tied to the embedding, cross-entropy, AdamW with the engine's
defaults (lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and the embedding).

--mode picks how the attention and the model run:
  eager    (default; any torch) the explicit nanoGPT-style attention: scores scaled by 1/sqrt(hd), the
           ALiBi bias added as a materialised (H, T, T) tensor, masked_fill(-inf) above the diagonal,
           softmax, times v. torch 1.13 has no F.scaled_dot_product_attention, so this is what it runs.
  sdpa     (torch >= 2.0) F.scaled_dot_product_attention(q, k, v, attn_mask=M, is_causal=False) with M
           a precomputed float (H, T, T) buffer: the ALiBi bias with -inf above the diagonal (--nope: the
           causal -inf mask alone). SDPA applies the 1/sqrt(hd) scale itself. Same loss as eager up to
           rounding.
  compile  (torch >= 2.0) the eager model wrapped in torch.compile (inductor). The warm-up steps (at
           least 2) absorb the compilation; their time is printed. No breakdown (the fractions are "na").
  eval-flex  (torch >= 2.0) evaluation: forward passes only (loss included) under torch.no_grad(), no
           backward or optimizer; the attention is FlexAttention (flex_attention with an ALiBi score_mod
           and a causal BlockMask, nothing T x T) and the whole model runs through torch.compile (the
           warm-up, at least one pass, compiles). FlexAttention has no backward on the CPU, hence eval only.
  eval-sdpa  (torch >= 2.0) the same evaluation with the sdpa attention (one (H, T, T) mask shared by
           the layers); refused with exit status 5 ("too much memory") when its estimated peak, 3.5 x
           B H T^2 floats (the mask, SDPA's scores and probabilities), exceeds --mem-limit-gib (14).
The eval modes time `steps` forward passes after `warmup`; tokens/s = B T / the mean pass.
sdpa, compile and the eval modes exit with status 3 under torch < 2.0; a failing torch.compile (no C++
compiler, ...) exits with status 4.

Timing protocol as bench_train: `warmup` untimed steps, then `steps` timed steps of
    zero_grad, forward, backward, optimizer step
reported as mean ms/step (plus median and fastest) and tokens/s. The breakdown times, in isolation on
tensors of the step's shapes, the attention (from qkv to the merged head outputs, forward + backward,
L times) and the linear layers (the four per block, L times, and the tied head; forward + backward),
plus GELU and LayerNorm for comparison with the engine, as fractions of the median step; the attention
is timed the way the mode computes it (eager or sdpa).

Last line: RESULT name=... tokens_per_s=... ms_per_step=... attention_frac=... matmul_frac=... ...
           mode=... torch=...
"""
import argparse
import math
import os
import re
import resource
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="0: torch's default")
    p.add_argument("--vocab", type=int, default=256)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--alibi", dest="alibi", action="store_true", default=True)
    g.add_argument("--nope", dest="alibi", action="store_false")
    p.add_argument("--name", default=None)
    p.add_argument("--no-breakdown", dest="breakdown", action="store_false", default=True)
    p.add_argument("--mode", choices=("eager", "sdpa", "compile", "eval-flex", "eval-sdpa"), default="eager",
                   help="eager: explicit attention (default); sdpa: F.scaled_dot_product_attention; "
                        "compile: torch.compile(model); eval-flex, eval-sdpa: forward only (no grad) with "
                        "FlexAttention (compiled model) or SDPA. All but eager need torch >= 2.0")
    p.add_argument("--mem-limit-gib", type=float, default=14.0,
                   help="eval-sdpa: refuse (exit status 5) when its estimated peak (3.5 x B H T^2 floats: the mask "
                        "and SDPA's scores and probabilities) exceeds this many GiB (default 14)")
    p.add_argument("--blas-info", action="store_true", help="print the torch version and its BLAS, then exit")
    a = p.parse_args()
    if a.dim % a.heads:
        p.error(f"--dim {a.dim} is not divisible by --heads {a.heads}")
    return a


args = parse_args()
if args.threads > 0:
    # torch.set_num_threads does not reach OpenBLAS (torch's BLAS here, the pthread build): set it
    # before the library loads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def torch_major():
    m = re.match(r"(\d+)", torch.__version__)
    return int(m.group(1)) if m else 0


def blas_info():
    """One line: which BLAS this torch runs its matmuls on (torch.__config__.show(), plus the BLAS
    libraries actually mapped into the process after a matmul, with OpenBLAS's kernel choice)."""
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    parts = [f"BLAS_INFO={m.group(1) if m else '?'}"]
    m = re.search(r"Math Kernel Library Version (\S+)", cfg)
    if m:
        parts.append(f"MKL {m.group(1)}")
    m = re.search(r"MKL-DNN (v[^\s]+)", cfg)
    if m:
        parts.append(f"oneDNN {m.group(1)}")
    torch.ones(64, 64) @ torch.ones(64, 64)  # make sure the BLAS is loaded
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                # numpy's own OpenBLAS and the CUDA libraries of a CUDA wheel are loaded, not used here
                if (re.search(r"(blas|mkl)[^/]*\.so", os.path.basename(path)) and "cublas" not in path
                        and "/numpy" not in path and "/nvidia/" not in path):
                    real = os.path.realpath(path)
                    if real not in libs:
                        libs.append(real)
    except OSError:
        pass
    for lib in libs:
        desc = lib
        if "openblas" in lib:
            try:
                import ctypes
                h = ctypes.CDLL(lib)
                h.openblas_get_corename.restype = ctypes.c_char_p
                desc += f" (OpenBLAS, core {h.openblas_get_corename().decode()})"
            except (OSError, AttributeError):
                pass
        parts.append(f"loaded {desc}")
    if not libs and "MKL" in " ".join(parts):
        parts.append("MKL linked into libtorch_cpu")
    return f"torch {torch.__version__} ({sys.executable}): " + ", ".join(parts)


def alibi_slopes(n):
    """The reference get_slopes(n) of Press et al. (the engine's plugins/alibi/alibi_math.h)."""
    def power_of_two(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    c = 2 ** int(math.floor(math.log2(n)))
    return power_of_two(c) + power_of_two(2 * c)[0::2][: n - c]


_SDPA_MASKS = {}  # (H, T, alibi) -> the (H, T, T) mask of sdpa modes, one for all layers
_BLOCK_MASKS = {}  # T -> the causal BlockMask of eval-flex, one for all layers


def causal_block_mask(T, block=128):
    """FlexAttention's causal BlockMask. create_block_mask evaluates the mask densely (a T x T bool tensor
    and an int64 sum over it: 32 GiB at T 65536), so above 16384 tokens the same BlockMask is built from
    its block lists (as bench/long_context.py): query block i sees key blocks 0 .. i-1 fully and block i
    partially (the diagonal, where the mask_mod applies)."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    if T <= 16384 or T % block:
        return create_block_mask(causal, None, None, T, T, device="cpu")
    n = T // block
    i = torch.arange(n, dtype=torch.int32)
    kv_idx = torch.zeros(1, 1, n, n, dtype=torch.int32)
    kv_idx[0, 0, :, 0] = i
    full_idx = torch.arange(n, dtype=torch.int32).expand(n, n).contiguous().view(1, 1, n, n)
    return BlockMask.from_kv_blocks(torch.ones(1, 1, n, dtype=torch.int32), kv_idx, i.clone().view(1, 1, n), full_idx,
                                    BLOCK_SIZE=block, mask_mod=causal, seq_lengths=(T, T))


class Attention(nn.Module):
    def __init__(self, C, H, T, alibi, mode="eager"):
        super().__init__()
        self.C, self.H = C, H
        self.sdpa = mode in ("sdpa", "eval-sdpa")
        self.flex = mode == "eval-flex"
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        slopes = torch.tensor(alibi_slopes(H), dtype=torch.float32)
        if self.flex:
            # FlexAttention: the bias as a score_mod reading the (H,) slopes, the causal mask as a BlockMask;
            # nothing of size T x T
            from torch.nn.attention.flex_attention import flex_attention
            self.flex_attention = flex_attention
            self.register_buffer("slopes", slopes if alibi else torch.zeros(H), persistent=False)
            if T not in _BLOCK_MASKS:  # one for all layers
                _BLOCK_MASKS[T] = causal_block_mask(T)
            self.block_mask = _BLOCK_MASKS[T]
            return
        i = torch.arange(T)
        if self.sdpa:
            # the float mask SDPA adds to its (already scaled) scores: bias below, -inf above the diagonal,
            # built one head at a time (no (H, T, T) temporaries: eval-sdpa runs at long T) and shared by
            # the layers (the same tensor in each)
            key = (H, T, alibi)
            if key not in _SDPA_MASKS:
                m = torch.empty(H, T, T)
                for h in range(H):
                    d = (i[:, None] - i[None, :]).float()
                    d = -slopes[h] * d if alibi else d.zero_()
                    m[h] = d.masked_fill_(i[:, None] < i[None, :], float("-inf"))
                _SDPA_MASKS[key] = m
            self.register_buffer("sdpa_mask", _SDPA_MASKS[key], persistent=False)
            return
        dist = (i[:, None] - i[None, :]).float()            # (T, T): i - j
        bias = -slopes[:, None, None] * dist if alibi else torch.zeros(H, T, T)
        self.register_buffer("bias", bias, persistent=False)  # (H, T, T)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def attend(self, qkv):
        """(B, T, 3C) -> (B, T, C): the part the engine's bk_attention_forward covers."""
        B, T, _ = qkv.shape
        C, H = self.C, self.H
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, C // H).transpose(1, 2)           # (B, H, T, hd)
        k = k.view(B, T, H, C // H).transpose(1, 2)
        v = v.view(B, T, H, C // H).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.sdpa_mask[:, :T, :T], is_causal=False)
            return y.transpose(1, 2).contiguous().view(B, T, C)
        if self.flex:
            slopes = self.slopes

            def alibi(score, b, h, q_idx, kv_idx):
                return score - slopes[h] * (q_idx - kv_idx)
            y = self.flex_attention(q, k, v, score_mod=alibi, block_mask=self.block_mask)
            return y.transpose(1, 2).contiguous().view(B, T, C)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att + self.bias[:, :T, :T]
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                           # (B, H, T, hd)
        return y.transpose(1, 2).contiguous().view(B, T, C)

    def forward(self, x):
        return self.proj(self.attend(self.qkv(x)))


class Block(nn.Module):
    def __init__(self, C, H, T, alibi, mode):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.attn = Attention(C, H, T, alibi, mode)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, H, V, T, alibi, mode="eager"):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList([Block(C, H, T, alibi, mode) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        self.head.weight = self.wte.weight                    # tied
        # GPT-2 initialisation, as bk_gpt_init
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("attn.proj.weight", "fcproj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def now():
    return time.perf_counter()


def breakdown(model, B, T, C, H, V, L, reps=5):
    """Median over `reps` passes of the time of each kernel group, timed in isolation (forward + backward)
    on tensors of the shapes one training step uses."""
    g = torch.Generator().manual_seed(0)
    BT = B * T
    attn = model.blocks[0].attn

    def fwd_bwd(fn, *inputs):
        xs = [x.detach().requires_grad_(True) for x in inputs]
        t0 = now()
        y = fn(*xs)
        t1 = now()
        dy = torch.full_like(y, 1e-3)  # the incoming gradient, not timed
        t2 = now()
        y.backward(dy)
        return (t1 - t0) + (now() - t2)

    qkv = torch.randn(B, T, 3 * C, generator=g)
    ln_in = torch.randn(BT, C, generator=g)
    fch = torch.randn(BT, 4 * C, generator=g)
    blk = model.blocks[0]
    linears = [(blk.attn.qkv, C), (blk.attn.proj, C), (blk.fc, C), (blk.fcproj, 4 * C)]
    inputs = {C: torch.randn(BT, C, generator=g), 4 * C: fch}
    samples = {"attention": [], "matmul": [], "lm head": [], "gelu": [], "layernorm": []}

    def one_pass():
        r = {k: 0.0 for k in samples}
        for _ in range(L):
            r["attention"] += fwd_bwd(attn.attend, qkv)
            for lin, cin in linears:
                r["matmul"] += fwd_bwd(lambda x, lin=lin: lin(x), inputs[cin])
            r["gelu"] += fwd_bwd(lambda x: F.gelu(x, approximate="tanh"), fch)
            r["layernorm"] += 2 * fwd_bwd(blk.ln1, ln_in)
        r["layernorm"] += fwd_bwd(model.lnf, ln_in)
        r["lm head"] += fwd_bwd(lambda x: model.head(x), inputs[C])
        return r

    one_pass()  # warm-up
    for _ in range(reps):
        for k, v in one_pass().items():
            samples[k].append(v)
    model.zero_grad(set_to_none=False)
    return {k: statistics.median(v) for k, v in samples.items()}


def evaluate(a, model, idx, tgt, name, threads):
    """--mode eval-*: forward only (loss included, no grad), `warmup` untimed then `steps` timed passes."""
    B, T = idx.shape
    run = model
    warmup = a.warmup
    if a.mode == "eval-flex":
        # FlexAttention runs compiled: the whole model goes through torch.compile (its first call compiles)
        run = torch.compile(model)
        warmup = max(warmup, 1)
    first_loss = None
    w0 = now()
    with torch.no_grad():
        for i in range(warmup):
            try:
                loss = run(idx, tgt)
            except Exception as e:  # noqa: BLE001
                if a.mode != "eval-flex" or i:
                    raise
                msg = (str(e).strip().splitlines() or [""])[0][:300]
                print(f"bench_torch: torch.compile (FlexAttention) failed: {type(e).__name__}: {msg}", file=sys.stderr)
                return 4
            first_loss = loss.item() if first_loss is None else first_loss
        warm_s = now() - w0
        times = []
        start = now()
        for _ in range(a.steps):
            t = now()
            loss = run(idx, tgt)
            times.append(now() - t)
            first_loss = loss.item() if first_loss is None else first_loss
        total = now() - start
    step_s = total / a.steps
    tok_s = B * T / step_s
    med = statistics.median(times)
    print(f"warm-up: {warmup} forward passes in {warm_s:.2f} s"
          + (" (torch.compile's compilation included)" if a.mode == "eval-flex" else ""))
    print(f"eval:  {1e3 * step_s:.2f} ms/forward (median {1e3 * med:.2f}, fastest {1e3 * min(times):.2f}) = "
          f"{tok_s:.0f} tokens/s over {a.steps} forward passes (no grad); loss {loss.item():.4f}")
    kernel = ("torch.compile(model)+flex_attention(score_mod:alibi,causal_block_mask)" if a.mode == "eval-flex"
              else "scaled_dot_product_attention(float_mask:alibi)")
    print(f"RESULT name={name} tokens_per_s={tok_s:.1f} ms_per_step={1e3 * step_s:.3f} attention_frac=na "
          f"matmul_frac=na gelu_frac=na layernorm_frac=na median_ms={1e3 * med:.3f} fwd_ms={1e3 * step_s:.3f} "
          f"bwd_ms=na opt_ms=na threads={threads} first_loss={first_loss:.7f} warmup_s={warm_s:.3f} "
          f"engine=torch-{torch.__version__} mode={a.mode} torch={torch.__version__} "
          f"peak_rss_gib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} kernel={kernel}")
    return 0


def main():
    a = args
    if a.blas_info:
        print(blas_info())
        return 0
    if a.mode != "eager" and torch_major() < 2:
        print(f"bench_torch: --mode {a.mode} needs torch >= 2.0, this is {torch.__version__} ({sys.executable})",
              file=sys.stderr)
        return 3
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    name = a.name or f"L{a.layers}_C{a.dim}_H{a.heads}_T{a.length}_B{a.batch}_{'alibi' if a.alibi else 'nope'}"
    torch.manual_seed(1)
    B, T, C, H, V, L = a.batch, a.length, a.dim, a.heads, a.vocab, a.layers
    # eval-sdpa's peak: the shared (H, T, T) mask and about 2.5 more of that size inside SDPA with a float mask
    # (its scores and probabilities; measured with bench/long_context.py: 3.3 x H T^2 floats at T 4096 and 16384)
    sdpa_gib = 3.5 * B * H * T * T * 4 / 2**30
    if a.mode == "eval-sdpa" and sdpa_gib > a.mem_limit_gib:
        print(f"bench_torch: too much memory: --mode eval-sdpa at T {T} holds the ALiBi bias as an (H, T, T) float "
              f"mask ({H * T * T * 4 / 2**30:.1f} GiB) and SDPA's scores and probabilities beside it, about "
              f"{sdpa_gib:.1f} GiB at its peak, more than --mem-limit-gib {a.mem_limit_gib:g}", file=sys.stderr)
        return 5
    model = GPT(L, C, H, V, T, a.alibi, a.mode if a.mode in ("sdpa", "eval-sdpa", "eval-flex") else "eager")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    tgt = torch.roll(idx.view(-1), -1).view(B, T)
    print(f"bench_torch: {name} | {L} layers, dim {C}, {H} heads (hd {C // H}), vocab {V}, T {T}, batch {B} | "
          f"{'ALiBi' if a.alibi else 'NoPE'} | {n_params} params | {threads} threads | torch {torch.__version__} | "
          f"mode {a.mode}")
    print(f"blas: {blas_info()}")

    if a.mode.startswith("eval"):
        return evaluate(a, model, idx, tgt, name, threads)

    run = model
    warmup = a.warmup
    if a.mode == "compile":
        try:
            run = torch.compile(model)
        except Exception as e:  # noqa: BLE001 - any failure means no compiled row
            msg = (str(e).strip().splitlines() or [""])[0][:300]
            print(f"bench_torch: torch.compile failed: {type(e).__name__}: {msg}", file=sys.stderr)
            return 4
        if warmup < 2:
            print(f"bench_torch: --mode compile: warm-up raised from {warmup} to 2 steps (compilation)")
            warmup = 2

    phases = {"zero": 0.0, "fwd": 0.0, "bwd": 0.0, "opt": 0.0}

    def step(record):
        t0 = now()
        opt.zero_grad(set_to_none=False)
        t1 = now()
        loss = run(idx, tgt)
        t2 = now()
        loss.backward()
        t3 = now()
        opt.step()
        t4 = now()
        if record:
            phases["zero"] += t1 - t0
            phases["fwd"] += t2 - t1
            phases["bwd"] += t3 - t2
            phases["opt"] += t4 - t3
        return loss

    first_loss = None
    w0 = now()
    for i in range(warmup):
        try:
            loss = step(False)
        except Exception as e:  # noqa: BLE001
            if a.mode != "compile":
                raise
            msg = (str(e).strip().splitlines() or [""])[0][:300]
            print(f"bench_torch: torch.compile failed in warm-up step {i + 1}: {type(e).__name__}: {msg}\n"
                  f"             (inductor needs a working C++ compiler and Python headers; see the log above)",
                  file=sys.stderr)
            return 4
        if first_loss is None:
            first_loss = loss.item()
    warm_s = now() - w0
    print(f"warm-up: {warmup} steps in {warm_s:.2f} s"
          + (" (torch.compile's compilation included)" if a.mode == "compile" else ""))
    times = []
    start = now()
    for _ in range(a.steps):
        t = now()
        loss = step(True)
        times.append(now() - t)
        if first_loss is None:
            first_loss = loss.item()
    total = now() - start
    step_s = total / a.steps
    med = statistics.median(times)
    tok_s = B * T / step_s
    n = a.steps
    print(f"first-step loss {first_loss:.7f}")
    print(f"step:  {1e3 * step_s:.2f} ms/step (median {1e3 * med:.2f}, fastest {1e3 * min(times):.2f}) = "
          f"{tok_s:.0f} tokens/s over {a.steps} steps after {warmup} warm-up; loss {loss.item():.4f}")
    print(f"phases: zero_grad {1e3 * phases['zero'] / n:.2f} | forward {1e3 * phases['fwd'] / n:.2f} | "
          f"backward {1e3 * phases['bwd'] / n:.2f} | adamw {1e3 * phases['opt'] / n:.2f} ms")

    frac = {}
    if a.breakdown and a.mode == "compile":
        print("breakdown: skipped for --mode compile (inductor fuses across the kernel groups; timing them in "
              "isolation would time other code); fractions reported as na")
    elif a.breakdown:
        bd = breakdown(model, B, T, C, H, V, L)
        print(f"breakdown: kernels timed in isolation at the step's shapes (median of 5 passes; attention as "
              f"--mode {a.mode} computes it), as fractions of the median step of {1e3 * med:.2f} ms:")
        for k, v in bd.items():
            frac[k] = v / med
            print(f"  {k:<14} {1e3 * v:9.2f} ms {100 * frac[k]:6.1f}%")
        rest = med - sum(bd.values())
        print(f"  {'rest':<14} {1e3 * rest:9.2f} ms {100 * rest / med:6.1f}%  (residuals, cross-entropy, "
              f"embedding, optimizer, autograd overhead)")

    def fr(x):
        return "na" if a.mode == "compile" else f"{x:.4f}"

    print(f"RESULT name={name} tokens_per_s={tok_s:.1f} ms_per_step={1e3 * step_s:.3f} "
          f"attention_frac={fr(frac.get('attention', 0))} "
          f"matmul_frac={fr(frac.get('matmul', 0) + frac.get('lm head', 0))} "
          f"gelu_frac={fr(frac.get('gelu', 0))} layernorm_frac={fr(frac.get('layernorm', 0))} "
          f"median_ms={1e3 * med:.3f} fwd_ms={1e3 * phases['fwd'] / n:.3f} bwd_ms={1e3 * phases['bwd'] / n:.3f} "
          f"opt_ms={1e3 * (phases['opt'] + phases['zero']) / n:.3f} threads={threads} first_loss={first_loss:.7f} "
          f"warmup_s={warm_s:.3f} engine=torch-{torch.__version__} mode={a.mode} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
