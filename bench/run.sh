#!/usr/bin/env bash
# bench/run.sh - the headline benchmarks (`make bench` runs this from the
# repository root with BENCH_DIR set to where the programs were built).
# bench/compare_mpi.sh puts OpenMPI's figures beside these.
set -euo pipefail
bench=${BENCH_DIR:-build/bench}
echo "== point-to-point over TCP: dist.h against raw TCP (bench/p2p) =="
"$bench/p2p"
echo
echo "== point-to-point over shared memory: dist.h against memcpy (bench/p2p --transport auto) =="
"$bench/p2p" --transport auto
for t in tcp auto; do
    for n in 2 4; do
        echo
        echo "== all_reduce, $n ranks, float32 sum, DIST_TRANSPORT=$t (bench/coll_bench) =="
        DIST_TRANSPORT=$t "$bench/coll_bench" -N "$n" -o all_reduce -b 8 -e 64M -f 4
    done
done
