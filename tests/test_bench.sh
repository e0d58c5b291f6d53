#!/usr/bin/env bash
# TIMEOUT: 300
# tests/test_bench.sh - bench/coll_bench in nccl-tests' habits: its flags,
# its columns, a check that can fail.
#
# Builds coll_bench and its nccl-tests names (all_reduce_perf, ...: the
# links `make bench` makes) in BUILD_DIR/bench when they are missing or old
# (the limit leaves room for that compile), then runs small sweeps under
# $DISTRUN (--no-prefix) and asserts: exit status 0; nccl-tests' header
# (size count type redop root, then time median algbw busbw #wrong for
# out-of-place and in-place); #wrong 0 in every row on 2 and 4 ranks; a
# rank whose input is changed (COLL_BENCH_CORRUPT) fails the check and the
# exit status; the root column shows -r; the sizes are exactly what
# -b/-e/-f and -b/-e/-i ask; -d, -o, --coll, -c 0, -a and nccl-tests'
# GPU flags do what the usage says.
set -u
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DISTRUN=${DISTRUN:-$BUILD_DIR/distrun}
bench=$BUILD_DIR/bench
scale=${DIST_TIMEOUT_SCALE:-1}
limit=$((60 * scale))
fails=0 checks=0
T=$(mktemp -d "${TMPDIR:-/tmp}/test_bench.XXXXXX")
trap 'rm -rf "$T"' EXIT

pass() { checks=$((checks + 1)); echo "ok   $1"; }
fail() {
    checks=$((checks + 1)) fails=$((fails + 1))
    echo "FAIL $1"
    [ -s "$T/out" ] && sed 's/^/     | /' "$T/out" | tail -n 25
    [ -s "$T/err" ] && sed 's/^/     ! /' "$T/err" | tail -n 10
}
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

progs="coll_bench all_reduce_perf broadcast_perf reduce_scatter_perf all_gather_perf"
# shellcheck disable=SC2046
if ! make -s BUILD="$BUILD_DIR" $(for p in $progs; do echo "$bench/$p"; done) >"$T/make" 2>&1; then
    cat "$T/make"; echo "FAIL the bench programs did not build"; exit 1
fi
[ -x "$DISTRUN" ] || { echo "FAIL no launcher at $DISTRUN"; exit 1; }

# run ENV... -- RANKS PROG ARGS...: one job; stdout in $T/out, stderr in $T/err, status in $rc
run() {
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local n=$1 prog=$2; shift 2
    env "${envs[@]}" timeout -k 5 "$limit" "$DISTRUN" --no-prefix -n "$n" "$bench/$prog" "$@" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
}
rows() { grep -v '^#' "$T/out" | grep -v '^[[:space:]]*$'; }
# every row's #wrong, out-of-place ($10) and in-place ($15), is $1
wrong_all() { [ "$(rows | wc -l)" -gt 0 ] && rows | awk -v w="$1" '$10 != w || $15 != w { bad = 1 } END { exit bad }'; }
header_ok() {
    grep -q '^#.*out-of-place.*in-place' "$T/out" &&
    grep -Eq '^# +size +count +type +redop +root +time +median +algbw +busbw +#wrong +time +median +algbw +busbw +#wrong *$' "$T/out" &&
    grep -q '^# Out of bounds values : 0 OK$' "$T/out" && grep -q '^# Avg bus bandwidth *: [0-9.e+-]* *$' "$T/out"
}
sizes() { rows | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $1 }'; }

for n in 2 4; do
    run -- "$n" all_reduce_perf -b 8 -e 1M -f 4 -c 1 -n 20 -w 5
    check "all_reduce_perf -b 8 -e 1M -f 4 -c 1 -n 20 -w 5 on $n ranks: exit 0" [ "$rc" = 0 ]
    check "$n ranks: nccl-tests' header and footer" header_ok
    check "$n ranks: #wrong 0 in every row, both placements" wrong_all 0
    check "$n ranks: the sizes of -b 8 -e 1M -f 4 (9 rows)" [ "$(sizes)" = "8 32 128 512 2048 8192 32768 131072 524288" ]
    check "$n ranks: type float, redop sum, root -1, count = size / 4" \
        sh -c "grep -v '^#' '$T/out' | awk '\$3 != \"float\" || \$4 != \"sum\" || \$5 != -1 || \$2 * 4 != \$1 { bad = 1 } END { exit bad }'"
done

run COLL_BENCH_CORRUPT=1 -- 4 all_reduce_perf -b 8 -e 64K -f 4 -c 1 -n 5 -w 1
check "rank 1's input changed: the exit status is not 0" [ "$rc" != 0 ]
check "rank 1's input changed: #wrong above 0 in every row, both placements" \
    sh -c "grep -v '^#' '$T/out' | awk 'NF < 15 || \$10 <= 0 || \$15 <= 0 { bad = 1 } END { exit bad || NR == 0 }'"
check "rank 1's input changed: the footer says FAILED" grep -q '^# Out of bounds values : [1-9][0-9]* FAILED$' "$T/out"

run -- 4 broadcast_perf -b 64 -e 64K -f 4 -r 2 -c 1 -n 10 -w 2
check "broadcast_perf -r 2: exit 0, #wrong 0" sh -c "[ $rc = 0 ] && grep -v '^#' '$T/out' | awk '\$10 != 0 || \$15 != 0 { bad = 1 } END { exit bad || NR != 6 }'"
check "broadcast_perf -r 2: the root column is 2, redop none" \
    sh -c "grep -v '^#' '$T/out' | awk '\$5 != 2 || \$4 != \"none\" { bad = 1 } END { exit bad || NR == 0 }'"
run COLL_BENCH_CORRUPT=2 -- 4 broadcast_perf -b 64 -e 1K -f 4 -r 2 -c 1 -n 2 -w 1
check "broadcast_perf -r 2, the root's input changed: the check fails" \
    sh -c "[ $rc != 0 ] && grep -q 'FAILED' '$T/out'"

run -- 4 all_gather_perf -b 1K -e 4K -i 1K -c 1 -n 5 -w 1
check "all_gather_perf -b 1K -e 4K -i 1K: additive steps, count per rank" \
    sh -c "[ $rc = 0 ] && [ \"\$(grep -v '^#' '$T/out' | awk '{ printf \"%s/%s \", \$1, \$2 }')\" = '1024/64 2048/128 3072/192 4096/256 ' ]"

run -- 3 reduce_scatter_perf -b 96 -e 6K -f 8 -d half -o max -c 2 -n 5 -w 1 -a 3
check "reduce_scatter_perf -d half -o max -a 3 on 3 ranks: type half, redop max, #wrong 0" \
    sh -c "[ $rc = 0 ] && grep -q 'average: 3' '$T/out' && grep -v '^#' '$T/out' | awk '\$3 != \"half\" || \$4 != \"max\" || \$10 != 0 || \$15 != 0 { bad = 1 } END { exit bad || NR != 3 }'"

run -- 2 coll_bench --coll alltoall -d ncclBfloat16 -o ncclProd -b 8 -e 512 -f 8 -c 1 -n 5 -w 1 -g 1 -t 1
check "coll_bench --coll alltoall -d ncclBfloat16 -g 1 -t 1: bfloat16 rows, #wrong 0, -g -t noted as ignored" \
    sh -c "[ $rc = 0 ] && grep -q '^# ignored.* -g 1 -t 1' '$T/out' && grep -v '^#' '$T/out' | awk '\$3 != \"bfloat16\" || \$4 != \"none\" || \$10 != 0 { bad = 1 } END { exit bad || NR != 3 }'"

run -- 2 all_reduce_perf -b 8 -e 64 -f 2 -c 0 -n 5 -w 1
check "-c 0: #wrong is N/A" sh -c "[ $rc = 0 ] && grep -v '^#' '$T/out' | awk '\$10 != \"N/A\" || \$15 != \"N/A\" { bad = 1 } END { exit bad || NR != 4 }'"

"$bench/all_reduce_perf" -h >"$T/out" 2>"$T/err"; rc=$?
check "-h: exit 0, the flags named" sh -c "[ $rc = 0 ] && grep -q -- '-o,--op' '$T/out' && grep -q -- '-d,--datatype' '$T/out' && grep -q -- '-r,--root' '$T/out' && grep -q -- '--np' '$T/out'"
"$bench/all_reduce_perf" --np 2 -o mulsum >"$T/out" 2>"$T/err"; rc=$?
check "-o mulsum (not in dist.h): exit 2" [ "$rc" = 2 ]

echo "$((checks - fails)) of $checks checks passed"
[ "$fails" = 0 ]
