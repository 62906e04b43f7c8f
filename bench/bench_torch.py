#!/usr/bin/python3
"""The model of bench_train.c written the way a PyTorch user would: PyTorch eager, fp32, CPU.

    /usr/bin/python3 bench/bench_torch.py --layers 4 --dim 256 --heads 8 --length 256 --batch 8 \
        --steps 10 --warmup 3 [--threads 2] [--vocab 256] [--alibi | --nope] [--name NAME]

Token embedding, pre-LN blocks (causal multi-head attention whose scores get the ALiBi bias as a
materialised (H, T, T) tensor added after the 1/sqrt(hd) scale, then a masked softmax; a GELU-tanh MLP
of width 4C), final LayerNorm, output head tied to the embedding, cross-entropy, AdamW with the
engine's defaults (lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and the embedding).
torch 1.13 has no F.scaled_dot_product_attention, so attention is the explicit nanoGPT-style code.

Timing protocol as bench_train: `warmup` untimed steps, then `steps` timed steps of
    zero_grad, forward, backward, optimizer step
reported as mean ms/step (plus median and fastest) and tokens/s. The breakdown times, in isolation on
tensors of the step's shapes, the attention (from qkv to the merged head outputs, forward + backward,
L times) and the linear layers (the four per block, L times, and the tied head; forward + backward),
plus GELU and LayerNorm for comparison with the engine, as fractions of the median step.

Last line: RESULT name=... tokens_per_s=... ms_per_step=... attention_frac=... matmul_frac=... ...
"""
import argparse
import math
import os
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


def alibi_slopes(n):
    """The reference get_slopes(n) of Press et al. (the engine's plugins/alibi/alibi_math.h)."""
    def power_of_two(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    c = 2 ** int(math.floor(math.log2(n)))
    return power_of_two(c) + power_of_two(2 * c)[0::2][: n - c]


class Attention(nn.Module):
    def __init__(self, C, H, T, alibi):
        super().__init__()
        self.C, self.H = C, H
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        i = torch.arange(T)
        dist = (i[:, None] - i[None, :]).float()            # (T, T): i - j
        slopes = torch.tensor(alibi_slopes(H), dtype=torch.float32)
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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att + self.bias[:, :T, :T]
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                           # (B, H, T, hd)
        return y.transpose(1, 2).contiguous().view(B, T, C)

    def forward(self, x):
        return self.proj(self.attend(self.qkv(x)))


class Block(nn.Module):
    def __init__(self, C, H, T, alibi):
        super().__init__()
        self.ln1 = nn.LayerNorm(C)
        self.attn = Attention(C, H, T, alibi)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, H, V, T, alibi):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList([Block(C, H, T, alibi) for _ in range(L)])
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


def main():
    a = args
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    name = a.name or f"L{a.layers}_C{a.dim}_H{a.heads}_T{a.length}_B{a.batch}_{'alibi' if a.alibi else 'nope'}"
    torch.manual_seed(1)
    B, T, C, H, V, L = a.batch, a.length, a.dim, a.heads, a.vocab, a.layers
    model = GPT(L, C, H, V, T, a.alibi)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    tgt = torch.roll(idx.view(-1), -1).view(B, T)
    print(f"bench_torch: {name} | {L} layers, dim {C}, {H} heads (hd {C // H}), vocab {V}, T {T}, batch {B} | "
          f"{'ALiBi' if a.alibi else 'NoPE'} | {n_params} params | {threads} threads | torch {torch.__version__}")

    phases = {"zero": 0.0, "fwd": 0.0, "bwd": 0.0, "opt": 0.0}

    def step(record):
        t0 = now()
        opt.zero_grad(set_to_none=False)
        t1 = now()
        loss = model(idx, tgt)
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

    for _ in range(a.warmup):
        step(False)
    times = []
    start = now()
    for _ in range(a.steps):
        t = now()
        loss = step(True)
        times.append(now() - t)
    total = now() - start
    step_s = total / a.steps
    med = statistics.median(times)
    tok_s = B * T / step_s
    n = a.steps
    print(f"step:  {1e3 * step_s:.2f} ms/step (median {1e3 * med:.2f}, fastest {1e3 * min(times):.2f}) = "
          f"{tok_s:.0f} tokens/s over {a.steps} steps after {a.warmup} warm-up; loss {loss.item():.4f}")
    print(f"phases: zero_grad {1e3 * phases['zero'] / n:.2f} | forward {1e3 * phases['fwd'] / n:.2f} | "
          f"backward {1e3 * phases['bwd'] / n:.2f} | adamw {1e3 * phases['opt'] / n:.2f} ms")

    frac = {}
    if a.breakdown:
        bd = breakdown(model, B, T, C, H, V, L)
        print(f"breakdown: kernels timed in isolation at the step's shapes (median of 5 passes), as fractions of "
              f"the median step of {1e3 * med:.2f} ms:")
        for k, v in bd.items():
            frac[k] = v / med
            print(f"  {k:<14} {1e3 * v:9.2f} ms {100 * frac[k]:6.1f}%")
        rest = med - sum(bd.values())
        print(f"  {'rest':<14} {1e3 * rest:9.2f} ms {100 * rest / med:6.1f}%  (residuals, cross-entropy, "
              f"embedding, optimizer, autograd overhead)")
    print(f"RESULT name={name} tokens_per_s={tok_s:.1f} ms_per_step={1e3 * step_s:.3f} "
          f"attention_frac={frac.get('attention', 0):.4f} "
          f"matmul_frac={frac.get('matmul', 0) + frac.get('lm head', 0):.4f} "
          f"gelu_frac={frac.get('gelu', 0):.4f} layernorm_frac={frac.get('layernorm', 0):.4f} "
          f"median_ms={1e3 * med:.3f} fwd_ms={1e3 * phases['fwd'] / n:.3f} bwd_ms={1e3 * phases['bwd'] / n:.3f} "
          f"opt_ms={1e3 * (phases['opt'] + phases['zero']) / n:.3f} threads={threads} engine=torch-{torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
