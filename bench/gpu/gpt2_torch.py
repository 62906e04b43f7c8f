#!/usr/bin/env python3
"""GPT-2 small with ALiBi in PyTorch on a GPU: the peer of `biaskit train examples/gpt2_small_alibi.toml`
(bench/gpu/run.sh runs both). Same model as biaskit's (docs/design.md section 6): pre-LayerNorm blocks,
GELU-tanh MLP, tied output head, no positional embedding, ALiBi slopes 2^(-8h/H) added to the scaled
scores; AdamW (decay on matrices and the embedding only), gradient clipping at 1.0.

Attention modes:
  eager   q k^T / sqrt(d) + bias, causal mask, softmax, @ v  (the textbook PyTorch eager model)
  sdpa    torch.nn.functional.scaled_dot_product_attention with the bias + causal mask as a float mask
  flex    flex_attention with the ALiBi score_mod (score - m_h (i - j)) and a causal block mask built
          once, the whole model under torch.compile (FlexAttention's intended use; the first --warmup
          steps absorb the compilation)
Precision:
  fp32    fp32 matmuls (torch.backends.cuda.matmul.allow_tf32 = False)
  tf32    TF32 tensor-core matmuls, fp32 storage
  bf16    torch.autocast(bfloat16) over forward and loss: bf16 matmuls and activations, fp32 master
          weights and optimizer (the usual mixed precision; biaskit's peer is [run] matmul = "bf16")

Prints one line: mode, precision, tokens/s (median of the timed steps), the last loss, peak memory.
--check first compares the mode's loss with the eager fp32 loss of the same weights and data.
--device cpu runs the same code on the CPU: a test of the script at a tiny shape (its speed means
nothing; FlexAttention has no backward on the CPU, so flex runs there with --check --steps 0 only)."""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # PyTorch older than 2.5: no FlexAttention (--mode flex says so)
    flex_attention = create_block_mask = None


def alibi_slopes(heads, device):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], device=device)


def alibi_bias(heads, T, device):
    slopes = alibi_slopes(heads, device)
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
        if self.mode == "flex":
            slopes, block_mask = bias

            def alibi(score, b, h, q_idx, kv_idx):
                return score - slopes[h] * (q_idx - kv_idx)

            y = flex_attention(q, k, v, score_mod=alibi, block_mask=block_mask)
        elif self.mode == "sdpa":
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
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def set_mode(model, mode):
    for b in model.blocks:
        b.mode = mode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["eager", "sdpa", "flex"], default="eager")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps (0: none; with --check, only the check)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--check", action="store_true",
                    help="first compare the mode's loss (no gradient) with the eager fp32 loss of the same weights; "
                         "exit 1 when they differ by more than the precision's tolerance")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("gpt2_torch.py: no GPU answers (torch.cuda.is_available() is False)")
    if a.mode == "flex" and flex_attention is None:
        raise SystemExit(f"gpt2_torch.py: --mode flex needs FlexAttention (PyTorch >= 2.5); this is {torch.__version__}")
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(1)
    model = GPT(a.layers, a.dim, a.heads, a.vocab, a.mode).to(dev)
    data = torch.randint(0, 256, (a.batch, a.length + 1), device=dev)
    x, y = data[:, :-1], data[:, 1:]
    autocast = lambda: torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    if a.check:  # the eager fp32 reference, before anything is compiled
        set_mode(model, "eager")
        with torch.no_grad():
            torch.backends.cuda.matmul.allow_tf32 = False
            ref = model(x, y, alibi_bias(a.heads, a.length, dev)).item()
            torch.backends.cuda.matmul.allow_tf32 = tf32
        set_mode(model, a.mode)
    step_model = model
    if a.mode == "flex":
        step_model = torch.compile(model)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    if a.mode == "flex":
        causal = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, a.length, a.length,
                                   device=a.device)
        bias = (alibi_slopes(a.heads, dev), causal)
    else:
        bias = alibi_bias(a.heads, a.length, dev)
    if a.check:
        with torch.no_grad(), autocast():
            got = step_model(x, y, bias).item()
        tol = {"fp32": 1e-5, "tf32": 1e-3, "bf16": 2e-2}[a.precision]
        rel = abs(got - ref) / abs(ref)
        print(f"check: {a.mode} {a.precision} loss {got:.6f}, eager fp32 {ref:.6f}: relative difference {rel:.2e} "
              f"(tolerance {tol:.0e})")
        if not rel <= tol:
            raise SystemExit(f"gpt2_torch.py: --check failed: {a.mode} {a.precision} differs from eager fp32 by {rel:.2e}")
    if a.steps == 0:
        return
    times = []
    for step in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = step_model(x, y, bias)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()  # the loss comes down, as in biaskit's step
        sync()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    tok = a.batch * a.length / statistics.median(times)
    where = (f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB; {torch.cuda.get_device_name()}"
             if cuda else "cpu")
    print(f"pytorch {torch.__version__} {a.mode} {a.precision}: {tok:.0f} tokens/s "
          f"(median of {a.steps} steps, {statistics.median(times) * 1e3:.1f} ms/step; loss {loss.item():.4f}; "
          f"{where})")


if __name__ == "__main__":
    main()
