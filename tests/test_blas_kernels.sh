#!/usr/bin/env bash
# Debian's OpenBLAS 0.3.21 takes some newer CPUs for old ones (its SSE3 "Prescott" kernels): biaskit then
# starts again with OPENBLAS_CORETYPE naming kernels the CPU runs (util/blas.h). Checked through
# `biaskit --version`'s blas line: a user's OPENBLAS_CORETYPE is kept as it is; unset, the kernels are
# never the fallback ones on a CPU with AVX2, and a restart says so; the guard variable alone stops a
# second restart (no loop). The linear layers' products (cpu/gemm.h): with OPENBLAS_CORETYPE=Haswell on
# a CPU with AVX-512F the engine's wider kernels run them, BIASKIT_GEMM=blas keeps the BLAS, a bad value
# stops biaskit with a message naming it. The attention's per-head products: the engine's kernels on a CPU
# with AVX2 or AVX-512 whatever OPENBLAS_CORETYPE says, the BLAS with BIASKIT_GEMM=blas.
# usage: test_blas_kernels.sh <biaskit binary>
set -u
bk=$1
failures=0
fail() { echo "FAIL: $1"; [ -n "${2:-}" ] && echo "    $2"; failures=$((failures + 1)); }
ok() { echo "ok: $1"; }

line=$(OPENBLAS_CORETYPE=Haswell "$bk" --version | grep '^blas:')
case $line in
*"blas: openblas:"*) ;;
*) echo "not the default OpenBLAS build ($line): nothing to check"; exit 0 ;;
esac
if grep -q "kernels Haswell" <<<"$line" && ! grep -q "set by biaskit" <<<"$line"; then
    ok "OPENBLAS_CORETYPE=Haswell is kept"
else
    fail "OPENBLAS_CORETYPE=Haswell is kept" "$line"
fi

line=$(env -u OPENBLAS_CORETYPE -u BIASKIT_OPENBLAS_CORETYPE_SET timeout 60 "$bk" --version | grep '^blas:')
core=$(grep -o 'kernels [A-Za-z0-9]*' <<<"$line" | cut -d' ' -f2)
has_avx2=$(grep -c -w avx2 /proc/cpuinfo || true)
if [ -z "$core" ]; then
    fail "unset: the blas line names the kernels" "$line"
elif [ "$has_avx2" -gt 0 ] && grep -Eq '^(Prescott|Core2|Penryn|Dunnington|Nehalem|Katmai|Northwood|Banias|Atom|Barcelona|Opteron|Bobcat)$' <<<"$core"; then
    fail "unset, on a CPU with AVX2: not the fallback kernels" "$line"
else
    ok "unset: kernels $core${line:+ ($(grep -o 'set by biaskit' <<<"$line" || echo 'chosen by OpenBLAS'))}"
fi

# the guard alone: no restart, whatever OpenBLAS picks
line=$(env -u OPENBLAS_CORETYPE BIASKIT_OPENBLAS_CORETYPE_SET=SkylakeX timeout 60 "$bk" --version | grep '^blas:')
if [ -n "$line" ]; then ok "the guard variable stops a restart (the program ran to its end)"; else
    fail "the guard variable stops a restart" "no blas line"; fi

line=$(OPENBLAS_CORETYPE=Haswell "$bk" --version | grep '^linear layers:')
if grep -q -w avx512f /proc/cpuinfo && grep -q -w fma /proc/cpuinfo; then
    if grep -q "the engine's avx512 kernels (BIASKIT_GEMM=auto)" <<<"$line"; then
        ok "Haswell kernels on an AVX-512 CPU: the engine's avx512 kernels run the linear layers"
    else
        fail "Haswell kernels on an AVX-512 CPU: the engine's avx512 kernels run the linear layers" "$line"
    fi
fi
line=$(BIASKIT_GEMM=blas OPENBLAS_CORETYPE=Haswell "$bk" --version | grep '^linear layers:')
if grep -q "the BLAS (BIASKIT_GEMM=blas)" <<<"$line"; then ok "BIASKIT_GEMM=blas keeps the BLAS"; else
    fail "BIASKIT_GEMM=blas keeps the BLAS" "$line"; fi
# the attention's per-head products: the engine's kernels wherever the CPU has AVX2 or AVX-512, whatever the
# BLAS's kernels; the BLAS with BIASKIT_GEMM=blas
line=$(env -u OPENBLAS_CORETYPE "$bk" --version | grep '^attention products:')
if grep -q -w avx512f /proc/cpuinfo && grep -q -w fma /proc/cpuinfo; then want="the engine's avx512 kernels (BIASKIT_GEMM=auto)"
elif grep -q -w avx2 /proc/cpuinfo && grep -q -w fma /proc/cpuinfo; then want="the engine's avx2 kernels (BIASKIT_GEMM=auto)"
else want="the BLAS (BIASKIT_GEMM=auto: this CPU has neither AVX2 nor AVX-512)"; fi
if grep -qF "$want" <<<"$line"; then ok "attention products: $want"; else fail "attention products: $want" "$line"; fi
line=$(BIASKIT_GEMM=blas "$bk" --version | grep '^attention products:')
if grep -q "the BLAS (BIASKIT_GEMM=blas)" <<<"$line"; then ok "BIASKIT_GEMM=blas puts the attention products on the BLAS"; else
    fail "BIASKIT_GEMM=blas puts the attention products on the BLAS" "$line"; fi
msg=$(BIASKIT_GEMM=avx9 "$bk" --version 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "BIASKIT_GEMM='avx9': expected auto, avx512, avx2, plain or blas" <<<"$msg"; then
    ok "a bad BIASKIT_GEMM stops biaskit (exit 2) naming it"
else
    fail "a bad BIASKIT_GEMM stops biaskit (exit 2) naming it" "rc $rc: $msg"
fi

[ $failures -eq 0 ]
