#!/usr/bin/env bash
# Host distance-table benchmark: the same table plugins from two plugin directories (OLD, e.g. the
# hand-written plugins, and NEW, e.g. the same plugins rewritten with <biaskit/table_plugin.h>), timed
# with bench_tables (bench/bench_tables.c) on a fixed list of terms at D = 65536 distances, 12 heads.
# Prints a markdown table: per case the median over rounds of the per-run median times of table() and
# table_backward() from each directory, and NEW / OLD (1.05 = NEW is 5% slower). Terms without
# parameters (alibi, qin) have no backward: "-".
#
#   cmake --build build --target bench_tables -j2
#   bash bench/tables.sh OLD_DIR NEW_DIR
#   OLD=/tmp/old-plugins NEW=build/plugins ROUNDS=3 BUILD=build-bench bash bench/tables.sh
#
# Runs are interleaved to cancel drift (clock, thermal, other load): each round runs every case once
# from OLD then once from NEW, and the rounds repeat that. It builds nothing: bench_tables must be at
# $BUILD/bench_tables. Each directory is searched alone (--plugin-dir; BIASKIT_PLUGIN_PATH is not
# used), and the script checks that each run loaded its plugin from that directory. The checksums that
# bench_tables prints (sum of the table, of the gradient) are compared between OLD and NEW in the
# first round; a difference is reported on stderr (a rewrite may round differently) but is not fatal.
#
# Arguments / environment: OLD_DIR NEW_DIR (or OLD, NEW), ROUNDS (5), BUILD (or BUILD_DIR; default
# ./build of the repository), REPS (15, timed calls per run), DISTANCES (65536), HEADS (12),
# CASES (space-separated case names to run a subset, default all), LOG_DIR (keeps every run's output;
# default a temporary directory, removed at the end), STAT (median: the table above, the default;
# min: the minimum over rounds of the per-run minima instead, steadier when other processes share the
# machine, since contention only ever adds time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

[[ ${1:-} == -h || ${1:-} == --help ]] && usage
OLD=${1:-${OLD:-}}
NEW=${2:-${NEW:-}}
[[ $# -le 2 && -n $OLD && -n $NEW ]] || usage
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-15}
DISTANCES=${DISTANCES:-65536}
HEADS=${HEADS:-12}
BUILD=${BUILD:-${BUILD_DIR:-$ROOT/build}}
STAT=${STAT:-median}
[[ $STAT == median || $STAT == min ]] || { echo "tables.sh: STAT must be median or min, got '$STAT'" >&2; exit 2; }
BIN=$BUILD/bench_tables

for n in ROUNDS REPS DISTANCES HEADS; do
    [[ ${!n} =~ ^[1-9][0-9]*$ ]] || { echo "tables.sh: $n must be a positive integer, got '${!n}'" >&2; exit 2; }
done
[[ -x $BIN ]] || {
    echo "tables.sh: no bench_tables at $BIN: build it (cmake --build $BUILD --target bench_tables) or set BUILD" >&2
    exit 1
}
for d in "$OLD" "$NEW"; do
    [[ -d $d ]] || { echo "tables.sh: plugin directory '$d' does not exist" >&2; exit 1; }
done
OLD=$(cd "$OLD" && pwd -P)
NEW=$(cd "$NEW" && pwd -P)

# --- cases: name|[[term]] lines (a literal \n separates lines) ---------------------------------------
ALL_CASES=(
    'alibi|plugin = "alibi"'
    'alibi-scale96|plugin = "alibi"\nslope_scale = 96.0'
    'qin-type1|plugin = "qin"\nform = "type1"'
    'qin-nlogn|plugin = "qin"\nform = "nlogn"'
    'kerple-log|plugin = "kerple"\nvariant = "log"'
    'kerple-power|plugin = "kerple"\nvariant = "power"'
    'kerple-3para-log|plugin = "kerple"\nvariant = "3para-log"'
)
CASE_NAMES=()
CASE_LINES=()
for c in "${ALL_CASES[@]}"; do
    name=${c%%|*}
    if [[ -n ${CASES:-} && " $CASES " != *" $name "* ]]; then
        continue
    fi
    CASE_NAMES+=("$name")
    CASE_LINES+=("${c#*|}")
done
[[ ${#CASE_NAMES[@]} -gt 0 ]] || { echo "tables.sh: CASES='${CASES:-}' selects none of the cases" >&2; exit 2; }

if [[ -n ${LOG_DIR:-} ]]; then
    LOGS=$LOG_DIR
    mkdir -p "$LOGS"
else
    LOGS=$(mktemp -d "${TMPDIR:-/tmp}/bench-tables.XXXXXX")
    trap 'rm -rf "$LOGS"' EXIT
fi
RESULTS=$LOGS/results.tsv # case side round table_median backward_median table_min backward_min
: >"$RESULTS"

# The plugin host loops are single-threaded; keep any thread pool of the engine's libraries idle.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# run SIDE DIR ROUND INDEX: one bench_tables run; appends its RESULT to results.tsv
run() {
    local side=$1 dir=$2 round=$3 i=$4
    local name=${CASE_NAMES[$i]} log=$LOGS/${CASE_NAMES[$i]}.$side.$round.txt
    if ! "$BIN" --plugin-dir "$dir" --distances "$DISTANCES" --heads "$HEADS" --reps "$REPS" \
        --name "$name" "${CASE_LINES[$i]}" >"$log" 2>&1; then
        echo "tables.sh: case $name ($side, $dir) failed:" >&2
        cat "$log" >&2
        exit 1
    fi
    local from
    from=$(sed -n 's/^  plugin .* from \(.*\)$/\1/p' "$log")
    if [[ $(dirname "$from") != "$dir" ]]; then
        echo "tables.sh: case $name ($side): the plugin was loaded from '$from', not from $dir" >&2
        exit 1
    fi
    awk -v c="$name" -v s="$side" -v r="$round" '/^RESULT /{
            for (k = 2; k <= NF; k++) { split($k, kv, "="); v[kv[1]] = kv[2] }
            print c "\t" s "\t" r "\t" v["table_ms_median"] "\t" v["backward_ms_median"] "\t" \
                  v["table_ms_min"] "\t" v["backward_ms_min"] }' "$log" >>"$RESULTS"
}

checksums() { grep -o 'checksum [^)]*' "$1" | tr '\n' ' '; }

echo "tables.sh: OLD=$OLD NEW=$NEW; $ROUNDS rounds x ${#CASE_NAMES[@]} cases x 2, D=$DISTANCES heads=$HEADS reps=$REPS" >&2
# Other work on the machine (a build, tests) makes single runs differ by far more than 5%: say so.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
if awk -v l="${LOAD_START%% *}" 'BEGIN { exit !(l + 0 > 0.7) }'; then
    echo "tables.sh: load average $LOAD_START before starting: other processes are running; expect noise" >&2
    echo "           beyond a few percent (raise ROUNDS, or run on an idle machine)" >&2
fi
for ((round = 1; round <= ROUNDS; round++)); do
    for i in "${!CASE_NAMES[@]}"; do
        run old "$OLD" "$round" "$i"
        run new "$NEW" "$round" "$i"
        if ((round == 1)); then
            a=$(checksums "$LOGS/${CASE_NAMES[$i]}.old.1.txt")
            b=$(checksums "$LOGS/${CASE_NAMES[$i]}.new.1.txt")
            [[ $a == "$b" ]] || echo "tables.sh: ${CASE_NAMES[$i]}: checksums differ: OLD ${a}/ NEW $b" >&2
        fi
    done
    echo "tables.sh: round $round/$ROUNDS done" >&2
done

# --- the table: per case, the STAT over rounds of the per-run STAT, and NEW / OLD -------------------
echo
if [[ $STAT == median ]]; then
    echo "D = $DISTANCES distances, $HEADS heads; median over $ROUNDS interleaved rounds of the per-run median of $REPS calls"
else
    echo "D = $DISTANCES distances, $HEADS heads; minimum over $ROUNDS interleaved rounds of the per-run minimum of $REPS calls"
fi
echo "load average (1, 5, 15 min) before: $LOAD_START; after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
echo "OLD = $OLD"
echo "NEW = $NEW"
echo
echo "| case | old table ms | new table ms | ratio | old backward ms | new backward ms | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for name in "${CASE_NAMES[@]}"; do
    awk -F'\t' -v c="$name" -v stat="$STAT" '
        function median(a, n,    i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : 0.5 * (a[n / 2] + a[n / 2 + 1])
        }
        function smallest(a, n,    i, m) {
            m = a[1]
            for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]
            return m
        }
        function agg(a, n) { return stat == "min" ? smallest(a, n) : median(a, n) }
        BEGIN { tc = stat == "min" ? 6 : 4; bc = tc + 1 }
        $1 == c && $2 == "old" { ot[++no] = $tc; if ($bc != "na") ob[++nob] = $bc }
        $1 == c && $2 == "new" { nt[++nn] = $tc; if ($bc != "na") nb[++nnb] = $bc }
        END {
            mot = agg(ot, no); mnt = agg(nt, nn)
            line = sprintf("| %s | %.3f | %.3f | %.3f |", c, mot, mnt, mnt / mot)
            if (nob && nnb) {
                mob = agg(ob, nob); mnb = agg(nb, nnb)
                line = line sprintf(" %.3f | %.3f | %.3f |", mob, mnb, mnb / mob)
            } else
                line = line " - | - | - |"
            print line
        }' "$RESULTS"
done
