#!/usr/bin/env bash
# BLAS choice by measurement (docs/performance.md, "BLAS choice"): one build per BLAS (BIASKIT_BLAS),
# bench_gemm (bench/bench_gemm.c) run by each at the model's exact products, interleaved, best of
# ROUNDS, then markdown tables.
#
#     bash bench/blas.sh                   # builds what is missing, runs, prints the tables
#
# Environment:
#   LIBS       the BIASKIT_BLAS values to compare (default: openblas blis scipy-openblas mkl); a build
#              that cannot be configured (library not installed) is reported and left out
#   CORETYPES  OPENBLAS_CORETYPE values for the OpenBLAS-family builds (openblas, scipy-openblas);
#              "unset" runs with the variable removed: the library picks (default: unset Haswell)
#   ROUNDS     interleaved rounds (default 3); each number is the best over them
#   FIRST_ROUND  the first round's number (default 1): with the same RESULTS, FIRST_ROUND=4 ROUNDS=2
#              adds rounds 4 and 5 to an earlier run's, and the tables take all of them
#   TABLES_ONLY=1  run nothing, print the tables of what RESULTS holds (with NO_BUILD=1)
#   THREADS    OMP_NUM_THREADS (default 2)
#   GEMM_ARGS  extra bench_gemm arguments (e.g. "--size c --min-time 0.1")
#   RESULTS    folder for the raw output (default: a new folder under /tmp)
#   NO_BUILD=1 take the build-blas-<name> folders as they are
# Builds: build-blas-<name> at the repository root, Release, -DBIASKIT_CUDA=OFF.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIBS=${LIBS:-openblas blis scipy-openblas mkl}
CORETYPES=${CORETYPES:-unset Haswell}
ROUNDS=${ROUNDS:-3}
FIRST_ROUND=${FIRST_ROUND:-1}
THREADS=${THREADS:-2}
GEMM_ARGS=${GEMM_ARGS:-}
RESULTS=${RESULTS:-$(mktemp -d /tmp/bk-blas.XXXXXX)}
mkdir -p "$RESULTS"

configs=() # "lib coretype"
for lib in $LIBS; do
    dir=$ROOT/build-blas-$lib
    if [ "${NO_BUILD:-0}" != 1 ]; then
        echo "blas.sh: building $dir (BIASKIT_BLAS=$lib)" >&2
        if ! cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBIASKIT_CUDA=OFF -DBIASKIT_BLAS="$lib" \
            >"$RESULTS/configure-$lib.log" 2>&1; then
            echo "blas.sh: BIASKIT_BLAS=$lib does not configure; left out ($(grep -m1 -A3 'CMake Error' "$RESULTS/configure-$lib.log" | tr -s ' \n' ' '))" >&2
            continue
        fi
        if ! cmake --build "$dir" -j"$(nproc)" --target bench_gemm >"$RESULTS/build-$lib.log" 2>&1; then
            echo "blas.sh: BIASKIT_BLAS=$lib: bench_gemm does not build; left out (see $RESULTS/build-$lib.log)" >&2
            continue
        fi
    fi
    if [ ! -x "$dir/bench_gemm" ]; then
        echo "blas.sh: $dir/bench_gemm is missing; left out" >&2
        continue
    fi
    case $lib in
    openblas | scipy-openblas) for ct in $CORETYPES; do configs+=("$lib $ct"); done ;;
    *) configs+=("$lib -") ;;
    esac
done
[ ${#configs[@]} -gt 0 ] || { echo "blas.sh: no BLAS build to run (LIBS=$LIBS)" >&2; exit 1; }

echo "blas.sh: ${#configs[@]} configurations, $ROUNDS rounds, $THREADS threads; raw output in $RESULTS" >&2
[ "${TABLES_ONLY:-0}" = 1 ] && ROUNDS=0
for round in $(seq "$FIRST_ROUND" $((FIRST_ROUND + ROUNDS - 1))); do
    for cfg in "${configs[@]}"; do
        read -r lib ct <<<"$cfg"
        tag=$lib${ct:+-$ct}
        tag=${tag%--}
        out=$RESULTS/$tag.round$round.txt
        echo "blas.sh: round $round: $tag" >&2
        if [ "$ct" = "-" ] || [ "$ct" = "unset" ]; then
            env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$THREADS" "$ROOT/build-blas-$lib/bench_gemm" $GEMM_ARGS >"$out"
        else
            OPENBLAS_CORETYPE=$ct OMP_NUM_THREADS="$THREADS" "$ROOT/build-blas-$lib/bench_gemm" $GEMM_ARGS >"$out"
        fi
    done
done

python3 - "$RESULTS" "${configs[@]}" <<'EOF'
import glob, os, re, sys
results, configs = sys.argv[1], sys.argv[2:]

def kv(line):
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))

tags, data = [], {}
for cfg in configs:
    lib, ct = cfg.split()
    tag = lib if ct == '-' else f'{lib}-{ct}'
    tags.append(tag)
    d = data[tag] = {'shape': {}, 'step': {}, 'big': None, 'describe': '', 'label': lib if ct == '-' else f'{lib}, CORETYPE {ct}'}
    for path in sorted(glob.glob(os.path.join(results, f'{tag}.round*.txt'))):
        for line in open(path):
            k = kv(line)
            if line.startswith('blas '):
                d['describe'] = k.get('describe', '').strip('"')
            elif line.startswith('gemm '):
                key = (k['size'], k['op'], k['pass'])
                ms = float(k['ms'])
                old = d['shape'].get(key)
                if old is None or ms < old[0]:
                    d['shape'][key] = (ms, float(k['gflops']), k)
            elif line.startswith('step '):
                tot = float(k['total_ms'])
                old = d['step'].get(k['size'])
                if old is None or tot < old['total']:
                    d['step'][k['size']] = {'total': tot, 'linear': float(k['linear_ms']), 'attn': float(k['attn_ms']),
                                            'gflops': float(k['gflops'])}
            elif line.startswith('big '):
                g = float(k['gflops'])
                d['big'] = g if d['big'] is None else max(d['big'], g)

sizes = sorted({s for t in tags for s in data[t]['step']})
print('### Kernels each library picked\n')
for t in tags:
    print(f"- {data[t]['label']}: {data[t]['describe']}")
print('\n### One step\'s products (ms, best run; linear + attention) and the 2048³ SGEMM rate\n')
head = '| BLAS | ' + ' | '.join(f'({s}) total' for s in sizes) + ' | ' + ' | '.join(f'({s}) linear + attn' for s in sizes) + ' | 2048³ GFLOP/s |'
print(head)
print('|---|' + '---:|' * (2 * len(sizes) + 1))
for t in tags:
    st = data[t]['step']
    cells = [f"{st[s]['total']:.1f}" if s in st else '-' for s in sizes]
    cells += [f"{st[s]['linear']:.1f} + {st[s]['attn']:.1f}" if s in st else '-' for s in sizes]
    big = f"{data[t]['big']:.0f}" if data[t]['big'] else '-'
    print(f"| {data[t]['label']} | " + ' | '.join(cells) + f' | {big} |')
# the sum of each shape's best time (count per step), a steadier figure on a shared machine
print('\n### Sum of each product\'s best time over the rounds, per step (ms)\n')
print('| BLAS | ' + ' | '.join(f'({s})' for s in sizes) + ' |')
print('|---|' + '---:|' * len(sizes))
for t in tags:
    cells = []
    for s in sizes:
        tot = sum(v[0] * int(v[2]['per_step']) for key, v in data[t]['shape'].items() if key[0] == s)
        cells.append(f'{tot:.1f}' if tot else '-')
    print(f"| {data[t]['label']} | " + ' | '.join(cells) + ' |')
for s in sizes:
    keys = []
    for t in tags:
        for key in data[t]['shape']:
            if key[0] == s and key not in keys:
                keys.append(key)
    print(f'\n### Size ({s}): GFLOP/s per product (best call over the rounds)\n')
    print('| product | shape | per step | ' + ' | '.join(data[t]['label'] for t in tags) + ' |')
    print('|---|---|---:|' + '---:|' * len(tags))
    for key in keys:
        k0 = next(data[t]['shape'][key][2] for t in tags if key in data[t]['shape'])
        if k0['op'].startswith('attn_'):
            shape = f"{k0['trans']} {k0['M']}x{k0['N']}x{k0['K']}, hd {k0['hd']}, inside omp"
        else:
            shape = f"{k0['trans']} {k0['M']}x{k0['N']}x{k0['K']}"
        cells = []
        for t in tags:
            v = data[t]['shape'].get(key)
            cells.append(f'{v[1]:.0f}' if v else '-')
        print(f"| {key[1]} {key[2]} | {shape} | {k0['per_step']} | " + ' | '.join(cells) + ' |')
EOF
