#!/usr/bin/env bash
# bench/run.sh - the headline benchmarks, a minute or two (`make bench` runs
# this from the repository root with BENCH_DIR set to where the programs
# were built).  The collectives run as nccl-tests' programs do (coll_bench
# under their names: all_reduce_perf, ...; see bench/coll_bench.c).
# bench/compare_mpi.sh puts OpenMPI's figures beside these, bench/plot
# draws them.
set -euo pipefail
bench=${BENCH_DIR:-build/bench}
echo "== point-to-point over TCP: dist.h against raw TCP (bench/p2p --quick) =="
"$bench/p2p" --quick
echo
echo "== point-to-point over shared memory: dist.h against memcpy (bench/p2p --quick --transport auto) =="
"$bench/p2p" --quick --transport auto
for run in "auto 2 all_reduce_perf -b 8 -e 32M -f 4" "auto 4 all_reduce_perf -b 8 -e 32M -f 4" \
           "tcp 4 all_reduce_perf -b 8 -e 32M -f 4" "auto 4 broadcast_perf -b 8 -e 16M -f 8" \
           "auto 4 all_gather_perf -b 8 -e 16M -f 8"; do
    read -r t n prog args <<<"$run"
    echo
    echo "== DIST_TRANSPORT=$t $prog --np $n $args =="
    # shellcheck disable=SC2086
    DIST_TRANSPORT=$t "$bench/$prog" --np "$n" $args
done
