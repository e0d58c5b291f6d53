#!/usr/bin/env bash
# bench/rpc_bench.sh - dist_rpc.h's benchmark, and where one small call's
# instructions and system calls go.
#
#   bench/rpc_bench.sh [ARGS...]               build/bench/rpc_bench ARGS (both
#                                              transports unless DIST_TRANSPORT is set)
#   bench/rpc_bench.sh profile [tcp|auto] [N]  per small rpc_sync (default tcp, N=2000):
#       1. CPU time and context switches of each worker (getrusage, no tool),
#       2. system calls by name (strace -f -c),
#       3. instructions by function, each worker (valgrind --tool=callgrind),
#     each from two runs of `rpc_bench --profile` (N and 3N calls) subtracted
#     and divided by 2N, so start-up and shutdown cancel out.  strace and
#     valgrind slow everything down, which changes how often the waiting
#     loops spin: read their spin and futex counts as upper bounds.
#     RPC_BENCH_THREADS=K: K handler threads instead of the default 4;
#     RPC_BENCH_DEPTH=D: rpc_async with D calls in flight instead of rpc_sync.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
make -s "$build/bench/rpc_bench" >/dev/null
prog=$(pwd)/$build/bench/rpc_bench
if [ "${1:-}" != profile ]; then exec "$prog" "$@"; fi
shift
transport=${1:-tcp}
n1=${2:-2000}
n2=$((3 * n1))
threads=${RPC_BENCH_THREADS:-0}
depth=${RPC_BENCH_DEPTH:-0}
what=$([ "$depth" = 0 ] && echo "rpc_sync" || echo "call ($depth in flight)")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DIST_TRANSPORT=$transport

echo "== per small $what over $transport, handler threads ${threads/#0/4 (default)}: run alone, 3 runs of $((2 * n2)) calls"
for i in 1 2 3; do "$prog" --profile $((2 * n2)) --threads "$threads" --depth "$depth"; done

echo
echo "== system calls per $what, both workers and all their threads (strace -f -c; ($n2 - $n1 calls) / $((n2 - n1)))"
for n in $n1 $n2; do
    strace -f -c -o "$tmp/strace.$n" -- "$prog" --profile "$n" --threads "$threads" --depth "$depth" >/dev/null 2>&1
done
awk -v d=$((n2 - n1)) '
    function parse(line,   f, k) { k = split(line, f); if (k >= 5 && f[4] ~ /^[0-9]+$/ && f[k] != "total") return f[k] " " f[4]; return "" }
    FNR == 1 { file++ }
    { p = parse($0); if (p == "") next; split(p, a, " "); c[file, a[1]] = a[2]; names[a[1]] = 1 }
    END {
        for (s in names) { v = (c[2, s] - c[1, s]) / d; if (v >= 0.05) printf "%8.2f  %s\n", v, s }
    }' "$tmp/strace.$n1" "$tmp/strace.$n2" | sort -rn

if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_annotate >/dev/null 2>&1; then
    echo "valgrind is not installed: no instruction profile" >&2
    exit 0
fi
for n in $n1 $n2; do
    mkdir -p "$tmp/cg.$n"
    (cd "$tmp/cg.$n" && valgrind --tool=callgrind --callgrind-out-file=cg.%p "$prog" --profile "$n" --threads "$threads" --depth "$depth" >out 2>err) ||
        { cat "$tmp/cg.$n/err" >&2; exit 1; }
done
# "Ir function" per line, inclusive or self, summed over the entries of one name
table() {
    callgrind_annotate --threshold=100 --inclusive="$2" "$1" | awk '
        /=>/ || /PROGRAM TOTALS/ || /events annotated/ { next }
        /^ *[0-9,]+ +\(/ {
            n = $1; gsub(",", "", n)
            name = $0; sub(/^ *[0-9,]+ +\([^)]*\) +/, "", name); sub(/ \[[^]]*\]$/, "", name)
            s[name] += n
        }
        END { for (k in s) print s[k] "\t" k }'
}
total() { callgrind_annotate "$1" | awk '/PROGRAM TOTALS/ { n = $1; gsub(",", "", n); print n }'; }
for w in 0 1; do
    f1=$(ls "$tmp/cg.$n1"/cg.* | grep "cg\.$(sed -n "s/.*w$w is pid \([0-9]*\).*/\1/p" "$tmp/cg.$n1/err")\$")
    f2=$(ls "$tmp/cg.$n2"/cg.* | grep "cg\.$(sed -n "s/.*w$w is pid \([0-9]*\).*/\1/p" "$tmp/cg.$n2/err")\$")
    t1=$(total "$f1"); t2=$(total "$f2")
    echo
    echo "== w$w ($([ $w = 0 ] && echo caller || echo callee)): $(( (t2 - t1) / (n2 - n1) )) instructions per $what (callgrind; includes the benchmark's own timing and sorting on w0)"
    for mode in yes no; do
        echo "-- $([ $mode = yes ] && echo inclusive || echo self) instructions per call, top 25 (names of inlined code are source lines)"
        table "$f1" $mode >"$tmp/a"; table "$f2" $mode >"$tmp/b"
        awk -F'\t' -v d=$((n2 - n1)) 'FNR == 1 { file++ } { c[file, $2] = $1; names[$2] = 1 }
            END { for (k in names) { v = (c[2, k] - c[1, k]) / d; if (v >= 50) printf "%8.0f  %s\n", v, k } }' "$tmp/a" "$tmp/b" |
            grep -v -e '(below main)' -e 'libc_start' -e '0x0000' | sort -rn | head -25
    done
done
