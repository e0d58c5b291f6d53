#!/usr/bin/env bash
# bench/run.sh - the headline benchmarks (`make bench` runs this from the
# repository root with BENCH_DIR set to where the programs were built).
set -euo pipefail
bench=${BENCH_DIR:-build/bench}
echo "== point-to-point: dist.h against raw TCP (bench/p2p) =="
"$bench/p2p" "$@"
