#!/usr/bin/env python3
"""The linear layers' products of one training step, timed in two BLAS libraries: Debian's OpenBLAS
(called through ctypes, as bench_train calls it) and the MKL inside PyPI's PyTorch 2.x (torch.mm). It
answers one question of docs/performance.md: is PyTorch's step slower than biaskit's because its BLAS
is slower on these shapes?

  /usr/bin/python3 bench/blas_products.py openblas   # Debian's python3 and numpy, Debian's OpenBLAS
  .venv-bench/bin/python bench/blas_products.py mkl  # PyTorch 2.x from PyPI (MKL linked into libtorch_cpu)

With OMP_NUM_THREADS=2 (and OPENBLAS_CORETYPE as the row should have it). For each size of bench/run.sh
(rows B*T = 2048, width C) it times the 12 products of one block (qkv, attention projection, fc, fc
projection; each forward Y = X W^T, input gradient dX = dY W, weight gradient dW = dY^T X) and the tied
head's 3 (vocabulary 256), each the minimum over ROUNDS calls after 3 warm-up calls, and prints one
line per size: milliseconds for one block plus the head, and GFLOP/s."""
import ctypes
import os
import sys
import time

ROUNDS = int(os.environ.get("ROUNDS", "15"))
THREADS = int(os.environ.get("OMP_NUM_THREADS", "2"))
OPENBLAS = os.environ.get("OPENBLAS_LIB", "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0")
SIZES = {"a": 256, "b": 512, "c": 128}  # width C; rows B*T = 2048 at every size (bench/run.sh)
ROWS, VOCAB = 2048, 256


def products(C):
    """(kind, M, N, K) of C = op(A) op(B) with C M x N: kind fwd = NT, dx = NN, dw = TN."""
    out = []
    for n_out, n_in in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C), (VOCAB, C)):
        out += [("fwd", ROWS, n_out, n_in), ("dx", ROWS, n_in, n_out), ("dw", n_out, n_in, ROWS)]
    return out


def best_of(f):
    for _ in range(3):
        f()
    best = float("inf")
    for _ in range(ROUNDS):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def time_mkl(shapes):
    import torch

    torch.set_num_threads(THREADS)
    total = 0.0
    for kind, M, N, K in shapes:
        if kind == "fwd":
            a, b = torch.randn(M, K), torch.randn(N, K)
            total += best_of(lambda: torch.mm(a, b.t()))
        elif kind == "dx":
            a, b = torch.randn(M, K), torch.randn(K, N)
            total += best_of(lambda: torch.mm(a, b))
        else:
            a, b = torch.randn(K, M), torch.randn(K, N)
            total += best_of(lambda: torch.mm(a.t(), b))
    return total


def time_openblas(shapes):
    import numpy as np

    lib = ctypes.CDLL(OPENBLAS)
    lib.openblas_set_num_threads(THREADS)
    ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
    total = 0.0
    for kind, M, N, K in shapes:
        a = np.random.randn(M * K).astype(np.float32)
        b = np.random.randn(N * K).astype(np.float32)
        c = np.zeros(M * N, np.float32)
        ta, tb = {"fwd": (NO_TRANS, TRANS), "dx": (NO_TRANS, NO_TRANS), "dw": (TRANS, NO_TRANS)}[kind]
        lda = K if ta == NO_TRANS else M
        ldb = K if tb == TRANS else N
        pa, pb, pc = (ctypes.c_void_p(x.ctypes.data) for x in (a, b, c))
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        total += best_of(lambda: lib.cblas_sgemm(ROW_MAJOR, ta, tb, M, N, K, one, pa, lda, pb, ldb, zero, pc, N))
    return total


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("mkl", "openblas"):
        sys.exit("usage: blas_products.py mkl|openblas (see the header)")
    which = sys.argv[1]
    env = "OPENBLAS_CORETYPE=" + os.environ.get("OPENBLAS_CORETYPE", "(unset)") if which == "openblas" else ""
    for name, C in SIZES.items():
        shapes = products(C)
        seconds = (time_mkl if which == "mkl" else time_openblas)(shapes)
        flops = sum(2 * M * N * K for _, M, N, K in shapes)
        print(f"RESULT blas={which} size={name} C={C} ms={seconds * 1e3:.2f} gflops={flops / seconds / 1e9:.1f} {env}")


if __name__ == "__main__":
    main()
