#!/usr/bin/env python3
"""GPT-2 small with ALiBi in PyTorch on a GPU: the peer of `biaskit train examples/gpt2_small_alibi.toml`
(bench/gpu/run.sh runs both). Same model as biaskit's (docs/design.md section 6): pre-LayerNorm blocks,
GELU-tanh MLP, tied output head, no positional embedding, ALiBi slopes 2^(-8h/H) added to the scaled
scores; AdamW (decay on matrices and the embedding only), gradient clipping at 1.0.

Attention modes:
  eager   q k^T / sqrt(d) + bias, causal mask, softmax, @ v  (the textbook PyTorch eager model)
  sdpa    torch.nn.functional.scaled_dot_product_attention with the bias + causal mask as a float mask
Matmul precision: fp32 (torch.backends.cuda.matmul.allow_tf32 = False) or tf32.

Prints one line: mode, precision, tokens/s (median of the timed steps), peak memory."""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


def alibi_bias(heads, T, device):
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], device=device)
    pos = torch.arange(T, device=device)
    dist = (pos[:, None] - pos[None, :]).clamp(min=0).float()  # i - j for j <= i
    bias = -slopes[:, None, None] * dist[None]
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return bias.masked_fill(~causal[None], float("-inf"))  # (H, T, T)


class Block(torch.nn.Module):
    def __init__(self, C, H, mode):
        super().__init__()
        self.H, self.mode = H, mode
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.fcproj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def attention(self, x, bias):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.mode == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
        else:
            s = q @ k.transpose(-2, -1) / math.sqrt(C // self.H) + bias[None]
            y = torch.softmax(s, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, bias):
        x = x + self.attention(self.ln1(x), bias)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, L, C, H, V, mode):
        super().__init__()
        self.wte = torch.nn.Embedding(V, C)
        self.blocks = torch.nn.ModuleList(Block(C, H, mode) for _ in range(L))
        self.lnf = torch.nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fcproj.weight")) else 0.02
                torch.nn.init.normal_(p, std=std)
            elif "ln" in name and name.endswith("weight"):
                torch.nn.init.ones_(p)
            else:
                torch.nn.init.zeros_(p)

    def forward(self, idx, targets, bias):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x, bias)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["eager", "sdpa"], default="eager")
    ap.add_argument("--precision", choices=["fp32", "tf32"], default="fp32")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpt2_torch.py: no GPU answers (torch.cuda.is_available() is False)")
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device("cuda")
    torch.manual_seed(1)
    model = GPT(a.layers, a.dim, a.heads, a.vocab, a.mode).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    bias = alibi_bias(a.heads, a.length, dev)
    data = torch.randint(0, 256, (a.batch, a.length + 1), device=dev)
    x, y = data[:, :-1], data[:, 1:]
    times = []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y, bias)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()  # the loss comes down, as in biaskit's step
        torch.cuda.synchronize()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    tok = a.batch * a.length / statistics.median(times)
    print(f"pytorch {torch.__version__} {a.mode} {a.precision}: {tok:.0f} tokens/s "
          f"(median of {a.steps} steps, {statistics.median(times) * 1e3:.1f} ms/step; "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB; {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
