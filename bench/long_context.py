#!/usr/bin/env python3
"""Long-context causal attention with a distance bias in PyTorch on the CPU: the peer of bench_attention.

    .venv-bench/bin/python bench/long_context.py --impl flex --table alibi --mode fwd --length 4096 \
        [--batch 1] [--heads 4] [--head-dim 32] [--threads 2] [--reps 3] [--warmup 1] \
        [--mem-limit-gib 8] [--name NAME]
    .venv-bench/bin/python bench/long_context.py --probe        # does FlexAttention's backward run here?
    .venv-bench/bin/python bench/long_context.py --check --length 512   # each impl against float64

One attention layer, q, k, v of shape (B, H, T, hd) (default B 1, H 4, hd 32: bench_attention's
--batch 1 --dim 128 --heads 4), fp32, causal, scores scaled by 1/sqrt(hd), plus the bias of --table:
  alibi    -slope_h * (i - j), slope_h = 2^(-8 (h+1) / H) (ALiBi's for a power-of-two H), fixed
  kerple   -r1_h * log(1 + r2_h * (i - j)) (KERPLE-log), r1_h = 1 + h/2 and r2_h = 2^-(h+1) learnable:
           tensors with requires_grad under --mode fwdbwd, whose gradients the backward computes
  none     no bias
--impl picks PyTorch's kernel:
  flex         torch.compile(flex_attention) with a score_mod adding the bias and a causal BlockMask
               (built once outside the timed calls: create_block_mask up to 16384 tokens, above that
               from its block lists, since create_block_mask evaluates the mask densely and needs
               32 GiB at 65536; the same BlockMask). The compilation happens in the
               warm-up (at least one warm-up call; its time is printed as warmup_s).
  sdpa         F.scaled_dot_product_attention with the bias as a float (H, T, T) attn_mask (-inf above
               the diagonal). The mask is built outside the timed calls, except kerple under fwdbwd,
               where it is a function of r1, r2 and is rebuilt in every timed call (its gradient is part
               of the backward). On the CPU SDPA with a float mask materialises the scores and the
               probabilities beside the mask: its peak is about 3.3 B H T^2 floats forward, 4.2 with
               backward (5.7 kerple, whose mask has a gradient). Refused (exit status 3, "too much
               memory") when that estimate (sdpa_tensors) exceeds --mem-limit-gib (14): at T 16384 the
               forward (13.6 GiB measured) runs and forward + backward is refused; at 65536 all are.
  sdpa_nobias  F.scaled_dot_product_attention(is_causal=True) without any bias: PyTorch's own CPU
               flash kernel, a floor for what a bias can cost (reference row; --table is ignored).
--mode fwd: forward only, under torch.no_grad() with inputs that do not require grad (evaluation);
--mode fwdbwd: forward, then out.backward(dout) with dout fixed, timed together (q, k, v and r1, r2
get gradients; ALiBi's fixed slopes do not).

FlexAttention's backward is refused on the CPU by torch 2.x (NotImplementedError "FlexAttention does
not support backward on CPU", in flex_attention's _validate_device, compiled or not): --impl flex
--mode fwdbwd then exits with status 5 and that message. --probe tries it and prints what happens.

Timing: `warmup` untimed calls, then `reps` timed calls (time.perf_counter); the minimum and median.
Exit status: 0; 1 failure; 2 bad arguments; 3 too much memory; 4 torch.compile failed; 5 not
supported by this torch on the CPU. Last line, machine-readable:
  RESULT name=... engine=torch-VERSION impl=... table=... mode=... B=... T=... C=... H=... threads=...
         ms_min=... ms_median=... fwd_ms_min=... bwd_ms_min=... warmup_s=... peak_rss_gib=... checksum=...
         blas=... kernel=...
"""
import argparse
import math
import os
import re
import resource
import statistics
import sys
import time

IMPLS = ("flex", "sdpa", "sdpa_nobias")
TABLES = ("alibi", "kerple", "none")
MODES = ("fwd", "fwdbwd")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=IMPLS, default="flex")
    p.add_argument("--table", choices=TABLES, default="alibi")
    p.add_argument("--mode", choices=MODES, default="fwd")
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads; 0: torch's default")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--mem-limit-gib", type=float, default=14.0,
                   help="sdpa: refuse when the estimated peak of its (H, T, T) float tensors exceeds this many GiB "
                        "(default 14)")
    p.add_argument("--name", default=None)
    p.add_argument("--probe", action="store_true", help="try FlexAttention forward + backward at T 256 and report")
    p.add_argument("--check", action="store_true",
                   help="compare every impl x table (forward, and backward where it runs) with a float64 "
                        "reference at --length (keep it small: the reference is T x T)")
    a = p.parse_args()
    for k in ("length", "batch", "heads", "head_dim", "reps"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be >= 1, got {getattr(a, k)}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    return a


args = parse_args()
if args.threads > 0:
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def blas_short():
    """A token without spaces: the BLAS torch's matmuls run on (MKL for the PyPI wheels)."""
    cfg = torch.__config__.show()
    m = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    blas = m.group(1) if m else "unknown"
    m = re.search(r"Math Kernel Library Version (\d[\d.]*)", cfg)
    if m:
        blas += "-" + m.group(1)
    return blas


def rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def alibi_slopes(H):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32)


def kerple_params(H, grad):
    r1 = torch.tensor([1.0 + 0.5 * h for h in range(H)], dtype=torch.float32, requires_grad=grad)
    r2 = torch.tensor([2.0 ** -(h + 1) for h in range(H)], dtype=torch.float32, requires_grad=grad)
    return r1, r2


def score_mod_of(table, slopes, r1, r2):
    if table == "alibi":
        def alibi(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx)
        return alibi
    if table == "kerple":
        def kerple(score, b, h, q_idx, kv_idx):
            # clamp: the causal mask hides j > i anyway; it keeps log1p's argument >= 1 there
            return score - r1[h] * torch.log1p(r2[h] * (q_idx - kv_idx).clamp(min=0))
        return kerple
    return None


def dense_bias(table, H, T, slopes, r1, r2, out=None):
    """(H, T, T) float: the bias below the diagonal, -inf above (SDPA's attn_mask). Built one head at a
    time into `out` when given (alibi, or kerple without grad), else as an autograd expression."""
    i = torch.arange(T)
    if out is not None:
        with torch.no_grad():
            for h in range(H):
                d = (i[:, None] - i[None, :]).float()
                if table == "alibi":
                    d.mul_(-float(slopes[h]))
                elif table == "kerple":
                    d.clamp_(min=0).mul_(float(r2[h])).log1p_().mul_(-float(r1[h]))
                else:
                    d.zero_()
                d.masked_fill_(i[:, None] < i[None, :], float("-inf"))
                out[h].copy_(d)
                del d
        return out
    d = (i[:, None] - i[None, :]).clamp(min=0).float()          # (T, T)
    bias = -r1[:, None, None] * torch.log1p(r2[:, None, None] * d)  # (H, T, T), learnable
    return bias.masked_fill(i[:, None] < i[None, :], float("-inf"))


def sdpa_tensors(table, mode):
    """About how many B x (H, T, T) float tensors --impl sdpa holds at its peak: measured (peak RSS less
    the sdpa_nobias run's) 3.3 forward (T 4096 and 16384: the mask, SDPA's scores and probabilities),
    4.2 alibi fwdbwd and 5.7 kerple fwdbwd (T 4096), rounded up."""
    if mode == "fwd":
        return 3.5
    return 6.0 if table == "kerple" else 4.5


_compiled = {}


def flex_fn():
    from torch.nn.attention.flex_attention import flex_attention
    if "flex" not in _compiled:
        _compiled["flex"] = torch.compile(flex_attention)
    return _compiled["flex"]


def causal_block_mask(T, block=128):
    """The causal BlockMask. create_block_mask evaluates the mask_mod densely (a T x T bool tensor, then an
    int64 sum over it: 32 GiB at T 65536), so above 16384 tokens the same BlockMask is built from its
    block lists instead: query block i sees key blocks 0 .. i-1 fully and block i partially (the diagonal,
    where the mask_mod applies)."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    if T <= 16384 or T % block:
        return create_block_mask(causal, None, None, T, T, device="cpu")
    n = T // block
    i = torch.arange(n, dtype=torch.int32)
    kv_num = torch.ones(1, 1, n, dtype=torch.int32)                       # the diagonal block
    kv_idx = torch.zeros(1, 1, n, n, dtype=torch.int32)
    kv_idx[0, 0, :, 0] = i
    full_num = i.clone().view(1, 1, n)                                     # blocks 0 .. i-1
    full_idx = torch.arange(n, dtype=torch.int32).expand(n, n).contiguous().view(1, 1, n, n)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block, mask_mod=causal,
                                    seq_lengths=(T, T))


class Runner:
    """One configuration: build once, then call() runs one timed unit (forward, or forward + backward)."""

    def __init__(self, impl, table, mode, B, H, T, D):
        self.impl, self.table, self.mode, self.B, self.H, self.T, self.D = impl, table, mode, B, H, T, D
        grad = mode == "fwdbwd"
        g = torch.Generator().manual_seed(1)
        self.q, self.k, self.v = [(torch.rand(B, H, T, D, generator=g) * 2 - 1).requires_grad_(grad) for _ in range(3)]
        self.dout = torch.rand(B, H, T, D, generator=g) * 2 - 1
        self.slopes = alibi_slopes(H)
        self.r1, self.r2 = kerple_params(H, grad and table == "kerple")
        self.mask = None
        if impl == "flex":
            self.block_mask = causal_block_mask(T)
            self.fn = flex_fn()
            self.score_mod = score_mod_of(table, self.slopes, self.r1, self.r2)
        elif impl == "sdpa" and not (table == "kerple" and grad):
            self.mask = dense_bias(table, H, T, self.slopes, self.r1, self.r2, out=torch.empty(H, T, T))

    def forward(self):
        q, k, v = self.q, self.k, self.v
        if self.impl == "flex":
            return self.fn(q, k, v, score_mod=self.score_mod, block_mask=self.block_mask)
        if self.impl == "sdpa_nobias":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = self.mask if self.mask is not None else dense_bias(self.table, self.H, self.T, self.slopes, self.r1,
                                                                  self.r2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def call(self):
        """(forward seconds, backward seconds, output)"""
        if self.mode == "fwd":
            with torch.no_grad():
                t0 = time.perf_counter()
                out = self.forward()
                return time.perf_counter() - t0, 0.0, out
        for x in (self.q, self.k, self.v, self.r1, self.r2):
            x.grad = None
        t0 = time.perf_counter()
        out = self.forward()
        t1 = time.perf_counter()
        out.backward(self.dout)
        return t1 - t0, time.perf_counter() - t1, out

    def checksum(self, out):
        def cs(x):
            x = x.detach().double().flatten()
            return float((x * (torch.arange(x.numel(), dtype=torch.float64) % 7 + 1)).sum())
        s = cs(out)
        if self.mode == "fwdbwd":
            s += sum(cs(x.grad) for x in (self.q, self.k, self.v) if x.grad is not None)
            s += sum(cs(x.grad) for x in (self.r1, self.r2) if x.grad is not None)
        return s


def kernel_name(impl, table):
    if impl == "flex":
        return f"torch.compile(flex_attention)+score_mod:{table}+causal_block_mask"
    if impl == "sdpa":
        return f"scaled_dot_product_attention+float_mask:{table}"
    return "scaled_dot_product_attention(is_causal=True)"


def probe():
    """Does FlexAttention's backward run on the CPU in this torch? Prints one line per variant."""
    from torch.nn.attention.flex_attention import flex_attention
    T, ok = 256, True
    bm = causal_block_mask(T)
    for compiled in (True, False):
        q, k, v = [torch.randn(1, 4, T, 32, requires_grad=True) for _ in range(3)]
        r1, r2 = kerple_params(4, True)
        fn = flex_fn() if compiled else flex_attention
        label = "torch.compile(flex_attention)" if compiled else "flex_attention (eager)"
        try:
            fn(q, k, v, score_mod=score_mod_of("kerple", None, r1, r2), block_mask=bm).sum().backward()
            print(f"probe: torch {torch.__version__}: {label} forward + backward on the CPU: runs "
                  f"(dr1 {r1.grad.tolist()})")
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"probe: torch {torch.__version__}: {label} forward + backward on the CPU: "
                  f"{type(e).__name__}: {str(e).strip().splitlines()[0]}")
    q, k, v = [torch.randn(1, 4, T, 32) for _ in range(3)]
    with torch.no_grad():
        flex_fn()(q, k, v, score_mod=score_mod_of("alibi", alibi_slopes(4), None, None), block_mask=bm)
    print(f"probe: torch {torch.__version__}: torch.compile(flex_attention) forward only (no grad) on the CPU: runs")
    return 0 if ok else 5


def check(a):
    """Each impl x table against float64 math at --length: max abs difference of the output (and of the
    gradients under fwdbwd, where the impl runs it)."""
    B, H, T, D = a.batch, a.heads, a.length, a.head_dim
    worst = 0.0
    for mode in MODES:
        for table in TABLES:
            for impl in IMPLS:
                if impl == "sdpa_nobias" and table != "none":
                    continue
                if impl == "flex" and mode == "fwdbwd":
                    continue
                r = Runner(impl, table, mode, B, H, T, D)
                _, _, out = r.call()
                # reference in float64
                q, k, v = [x.detach().double().requires_grad_(mode == "fwdbwd") for x in (r.q, r.k, r.v)]
                r1, r2 = [x.detach().double().requires_grad_(mode == "fwdbwd") for x in (r.r1, r.r2)]
                i = torch.arange(T)
                d = (i[:, None] - i[None, :]).clamp(min=0).double()
                if table == "alibi":
                    bias = -r.slopes.double()[:, None, None] * d
                elif table == "kerple":
                    bias = -r1[:, None, None] * torch.log1p(r2[:, None, None] * d)
                else:
                    bias = torch.zeros(H, T, T, dtype=torch.float64)
                s = q @ k.transpose(-2, -1) / math.sqrt(D) + bias
                s = s.masked_fill(i[:, None] < i[None, :], float("-inf"))
                ref = torch.softmax(s, -1) @ v
                err = float((out.detach().double() - ref.detach()).abs().max())
                msg = f"check: T {T} {impl:<12} {table:<7} {mode:<7} out max|diff| {err:.2e}"
                if mode == "fwdbwd":
                    ref.backward(r.dout.double())
                    pairs = [(r.q, q), (r.k, k), (r.v, v)] + ([(r.r1, r1), (r.r2, r2)] if table == "kerple" else [])
                    gerr = max(float((x.grad.double() - y.grad).abs().max() / (1 + y.grad.abs().max()))
                               for x, y in pairs)
                    msg += f", gradients max relative |diff| {gerr:.2e}"
                    err = max(err, gerr)
                worst = max(worst, err)
                print(msg)
    print(f"check: worst {worst:.2e} ({'ok' if worst < 1e-3 else 'TOO LARGE'})")
    return 0 if worst < 1e-3 else 1


def main():
    a = args
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.probe:
        return probe()
    if a.check:
        return check(a)
    B, H, T, D = a.batch, a.heads, a.length, a.head_dim
    threads = torch.get_num_threads()
    table = "none" if a.impl == "sdpa_nobias" else a.table
    name = a.name or f"{a.impl}_{table}_{a.mode}_T{T}"
    head = (f"long_context: {name} | torch {torch.__version__} | {a.impl} ({kernel_name(a.impl, table)}), table "
            f"{table}, {a.mode} | B {B} H {H} T {T} hd {D} | {threads} threads | BLAS {blas_short()}")
    print(head, flush=True)
    if a.impl == "flex" and a.mode == "fwdbwd":
        # torch 2.x refuses it before computing anything (flex_attention's _validate_device); try it at a
        # tiny length so that a torch which does support it is measured
        try:
            Runner("flex", table, "fwdbwd", 1, H, 128, D).call()
        except NotImplementedError as e:
            print(f"long_context: not supported: FlexAttention backward on the CPU, torch {torch.__version__}: "
                  f"{str(e).strip().splitlines()[0]}", file=sys.stderr)
            return 5
    if a.impl == "sdpa":
        gib = sdpa_tensors(table, a.mode) * B * H * T * T * 4 / 2**30
        if gib > a.mem_limit_gib:
            print(f"long_context: too much memory: --impl sdpa --table {table} --mode {a.mode} at T {T} would hold "
                  f"about {gib:.1f} GiB of (H, T, T) float tensors (the bias as SDPA's mask, its scores and "
                  f"probabilities), more than --mem-limit-gib {a.mem_limit_gib:g}", file=sys.stderr)
            return 3
    try:
        r = Runner(a.impl, table, a.mode, B, H, T, D)
    except MemoryError as e:
        print(f"long_context: too much memory building the inputs at T {T}: {e}", file=sys.stderr)
        return 3
    warmup = max(a.warmup, 1) if a.impl == "flex" else a.warmup
    w0 = time.perf_counter()
    for i in range(warmup):
        try:
            r.call()
        except Exception as e:  # noqa: BLE001
            msg = (str(e).strip().splitlines() or [""])[0][:300]
            if a.impl == "flex" and i == 0:
                print(f"long_context: torch.compile(flex_attention) failed: {type(e).__name__}: {msg}", file=sys.stderr)
                return 4
            raise
    warm_s = time.perf_counter() - w0
    tf, tb, tt = [], [], []
    out = None
    for _ in range(a.reps):
        f, b, out = r.call()
        tf.append(1e3 * f)
        tb.append(1e3 * b)
        tt.append(1e3 * (f + b))
    cs = r.checksum(out)
    bwd = a.mode == "fwdbwd"
    print(f"forward  {min(tf):10.3f} ms min, {statistics.median(tf):10.3f} median")
    if bwd:
        print(f"backward {min(tb):10.3f} ms min, {statistics.median(tb):10.3f} median")
    print(f"warm-up: {warmup} calls in {warm_s:.2f} s" + (" (compilation included)" if a.impl == "flex" else ""))
    print(f"RESULT name={name} engine=torch-{torch.__version__} impl={a.impl} table={table} mode={a.mode} B={B} T={T} "
          f"C={H * D} H={H} threads={threads} ms_min={min(tt):.3f} ms_median={statistics.median(tt):.3f} "
          f"fwd_ms_min={min(tf):.3f} bwd_ms_min={f'{min(tb):.3f}' if bwd else 'na'} warmup_s={warm_s:.3f} "
          f"peak_rss_gib={rss_gib():.2f} checksum={cs:.9e} blas={blas_short()} kernel={kernel_name(a.impl, table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
