#!/usr/bin/env python3
"""PyTorch's peers of biaskit's fused biased attention (bench/gpu/bench_flash_gpu.c), timed on a GPU;
bench/gpu/attention.sh runs both over a grid.

  attention_torch.py --peer P[,P...] --table T[,T...] --mode M[,M...] --length T[,T...]
                     (--batch B | --tokens N) --heads H --head-dim D [--dtype bf16|fp32] [--warmup 5]
                     [--reps 20] [--device cuda|cpu] [--check]

Every combination of the listed peers, tables, modes and lengths runs in this one process (one
PyTorch start for a whole grid), longest lengths last; sdpa_nobias runs with table none only and the
biased peers with the other tables (a combination that pairs them otherwise is left out; if nothing is
left, it is an error). --tokens N gives each length T the batch max(1, N // T).

Causal attention over q, k, v of shape (B, H, T, D), random normal: s[i][j] = q_i . k_j / sqrt(D) +
bias[h][i - j] for j <= i (the bias added after the scaling, as biaskit does), softmax over j <= i,
then P V. The tables, functions of the distance d = i - j >= 0 (the same as bench_flash_gpu's):
  alibi   -m_h d, m_h = 2^(-8(h+1)/H); fixed, no gradient
  kerple  -r1_h log(1 + r2_h d) (KERPLE's log variant); r1, r2 learnable
  t5      w[h][bucket(d)], T5's causal buckets (32, max distance 128: exact below 16, then
          logarithmic, at most 31); w learnable
  none    no bias (sdpa_nobias only)
Peers:
  sdpa_nobias  F.scaled_dot_product_attention(is_causal=True), the flash backend when it takes the
               dtype (the ceiling a biased kernel is measured against)
  sdpa_bias    SDPA with the bias built from the table's parameters inside the timed region (as a
               training step must, so that gradients reach them) and passed as a float mask (H, T, T)
               with -inf above the diagonal
  flex         flex_attention compiled for the shape (torch.compile, dynamic=False, after
               torch._dynamo.reset(): each combination compiles afresh, as in a process of its own) with
               a causal block mask (built once, outside the timed region) and a score_mod reading the
               captured parameters (with gradients in fwdbwd)
fwdbwd times the forward and the backward of (out * g).sum() for a fixed random g, parameter gradients
included (grads are set to None before each call, outside the timed region). Each call is timed with
CUDA events (perf_counter with a synchronisation on the CPU); the median of --reps calls after --warmup
calls (which absorb torch.compile) is reported. FLOPs count the causal half: forward 4 B H D T(T+1)/2,
forward + backward 3.5 times that (FlashAttention's convention, as bench_flash_gpu).

Each combination prints one machine-readable line:
  RESULT engine=torch peer=... table=... mode=... B=.. H=.. T=.. D=.. dtype=.. ms=... tflops=... torch=...
or, when it cannot run (out of memory, unsupported), the same with error=<reason> (and the message on
stderr); the others still run, and the exit status is then 3.
--check first compares each peer's output (and the parameter gradients in fwdbwd) with a plain fp32
reference and prints the largest differences."""
import argparse
import math
import statistics
import sys
import time

import torch
import torch._dynamo
import torch.nn.functional as F


def t5_buckets(T, device):
    d = torch.arange(T, device=device)
    exact, buckets, max_distance = 16, 32, 128
    big = exact + (torch.log(d.clamp(min=1).float() / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    return torch.where(d < exact, d, big.clamp(max=buckets - 1))


class Table:
    """The table's parameters and its value at a tensor of distances d (>= 0), for head tensor h."""

    def __init__(self, name, H, T, device, grad):
        self.name, self.params = name, []
        if name == "alibi":
            self.slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=device)
        elif name == "kerple":
            self.r1 = torch.tensor([1.0 + 0.1 * h for h in range(H)], device=device, requires_grad=grad)
            self.r2 = torch.tensor([1.0 + 0.05 * h for h in range(H)], device=device, requires_grad=grad)
            self.params = [self.r1, self.r2]
        elif name == "t5":
            self.bucket_of = t5_buckets(T, device)
            hh = torch.arange(H, device=device, dtype=torch.float32)[:, None]
            self.w = (0.1 * torch.sin(0.7 * (hh + 1) + torch.arange(32, device=device))).requires_grad_(grad)
            self.params = [self.w]

    def value(self, h, d):
        if self.name == "alibi":
            return -self.slopes[h] * d
        if self.name == "kerple":
            return -self.r1[h] * torch.log1p(self.r2[h] * d)
        return self.w[h, self.bucket_of[d]]

    def dense(self, H, T, device):
        """(H, T, T) float bias with -inf above the diagonal."""
        i = torch.arange(T, device=device)
        d = (i[:, None] - i[None, :]).clamp(min=0)
        h = torch.arange(H, device=device)[:, None, None]
        bias = self.value(h, d[None].float() if self.name != "t5" else d[None])
        return bias.masked_fill((i[None, :] > i[:, None])[None], float("-inf"))


def make_peer(peer, table, H, T, device):
    if peer == "sdpa_nobias":
        def run(q, k, v):
            try:
                from torch.nn.attention import SDPBackend, sdpa_kernel
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            except RuntimeError:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return run
    if peer == "sdpa_bias":
        def run(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=table.dense(H, T, device)[None].to(q.dtype))
        return run
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    mask = create_block_mask(causal, None, None, T, T, device=device)

    def score_mod(score, b, h, q_idx, kv_idx):
        d = (q_idx - kv_idx).clamp(min=0)
        return score + table.value(h, d if table.name == "t5" else d.float())

    flex = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=mask)


def reference(q, k, v, table, H, T):
    s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1]) + table.dense(H, T, q.device)[None]
    return torch.softmax(s, dim=-1) @ v.float()


def run_one(args, peer_name, table_name, mode, B, H, T, D, device, dtype):
    """One combination: prints its RESULT line; returns False when it could not run."""
    keys = f"engine=torch peer={peer_name} table={table_name} mode={mode} B={B} H={H} T={T} D={D} dtype={args.dtype}"
    backward = mode == "fwdbwd"
    times = []
    try:
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=backward) for _ in range(3))
        g = torch.randn(B, H, T, D, device=device, dtype=dtype)
        table = Table(table_name, H, T, device, backward) if table_name != "none" else None
        if peer_name == "flex":
            torch._dynamo.reset()  # a fresh compilation, as in a process of its own
        peer = make_peer(peer_name, table, H, T, device)
        if args.check and table is not None:
            out = peer(q, k, v)
            want = reference(q, k, v, table, H, T)
            print(f"check: {keys}: max |out - fp32 reference| = {(out.float() - want).abs().max().item():.3g}")
            if backward and table.params:
                (out.float() * g.float()).sum().backward()
                got = [t.grad.clone() for t in table.params]
                for t in table.params:
                    t.grad = None
                (want * g.float()).sum().backward()
                for a, b_ in zip(got, table.params):
                    print(f"check: {keys}: max |param grad - reference| = {(a - b_.grad).abs().max().item():.3g}")
            del out, want

        def call():
            for t in [q, k, v] + (table.params if table else []):
                t.grad = None
            out = peer(q, k, v)
            if backward:
                (out * g).sum().backward()

        cuda = device.type == "cuda"
        for n in range(args.warmup + args.reps):
            if cuda:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                stop.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(stop)
            else:
                t0 = time.perf_counter()
                call()
                ms = (time.perf_counter() - t0) * 1e3
            if n >= args.warmup:
                times.append(ms)
    except Exception as e:  # out of memory, an unsupported combination: a row the driver shows as "-"
        print(f"attention_torch.py: {keys}: {e}", file=sys.stderr)
        print(f"RESULT {keys} error={type(e).__name__} torch={torch.__version__}", flush=True)
        return False
    finally:
        q = k = v = g = table = peer = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ms = statistics.median(times)
    flops = 4.0 * B * H * D * T * (T + 1) / 2 * (3.5 if backward else 1.0)
    print(f"RESULT {keys} ms={ms:.4f} tflops={flops / ms / 1e9:.3f} torch={torch.__version__}", flush=True)
    return True


def listed(p, text, choices, name):
    items = [x for x in text.split(",") if x]
    for x in items:
        if x not in choices:
            p.error(f"--{name} {x}: expected one of {', '.join(choices)}")
    if not items:
        p.error(f"--{name}: empty")
    return items


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer", required=True, help="sdpa_nobias, sdpa_bias, flex (a comma list)")
    p.add_argument("--table", required=True, help="alibi, kerple, t5, none (a comma list)")
    p.add_argument("--mode", required=True, help="fwd, fwdbwd (a comma list)")
    p.add_argument("--length", required=True, help="T (a comma list)")
    p.add_argument("--batch", type=int)
    p.add_argument("--tokens", type=int, help="batch max(1, tokens // T) for each length T")
    for name in ("heads", "head-dim"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--device", default="cuda")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    peers = listed(p, args.peer, ["sdpa_nobias", "sdpa_bias", "flex"], "peer")
    tables = listed(p, args.table, ["alibi", "kerple", "t5", "none"], "table")
    modes = listed(p, args.mode, ["fwd", "fwdbwd"], "mode")
    try:
        lengths = sorted(int(x) for x in args.length.split(",") if x)
    except ValueError:
        p.error(f"--length {args.length}: expected positive integers separated by commas")
    if not lengths or min(lengths) < 1:
        p.error(f"--length {args.length}: expected positive integers separated by commas")
    if (args.batch is None) == (args.tokens is None):
        p.error("give one of --batch and --tokens")
    combos = [(peer, table, mode, T) for T in lengths for mode in modes for peer in peers for table in tables
              if (table == "none") == (peer == "sdpa_nobias")]
    if not combos:
        p.error("--table none goes with --peer sdpa_nobias, and only there: nothing to run")
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    H, D = args.heads, args.head_dim
    ok = True
    for peer, table, mode, T in combos:
        B = args.batch if args.batch is not None else max(1, args.tokens // T)
        ok &= run_one(args, peer, table, mode, B, H, T, D, device, dtype)
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
