#!/usr/bin/env bash
# bench/run.sh - the headline benchmarks (`make bench` runs this from the
# repository root with BENCH_DIR set to where the programs were built).
set -euo pipefail
bench=${BENCH_DIR:-build/bench}
echo "== point-to-point: dist.h against raw TCP (bench/p2p) =="
"$bench/p2p"
for n in 2 4; do
    echo
    echo "== all_reduce, $n ranks, float32 sum (bench/coll_bench) =="
    "$bench/coll_bench" -N "$n" -o all_reduce -b 8 -e 64M -f 4
done
