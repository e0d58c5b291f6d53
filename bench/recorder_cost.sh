#!/usr/bin/env bash
# What the flight recorder costs: bench/recorder_cost.sh [ROUNDS]
# Builds bench/recorder_cost.c with the recorder and without it
# (-DDIST_RECORDER_OPS=0), then runs an 8-byte all_reduce and broadcast loop
# on 2 and 4 ranks, over shared memory and over TCP, the two builds taking
# turns ROUNDS times (default 5) so that the machine's noise falls on both.
# Prints, per case, the mean us per call (the median of batch means beside)
# of each build, and the difference.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BUILD_DIR:-$ROOT/build}/bench
ROUNDS=${1:-5}
mkdir -p "$OUT"
for v in on off; do
    def=""; [ $v = off ] && def="-DDIST_RECORDER_OPS=0"
    ${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE $def -I"$ROOT" "$ROOT/bench/recorder_cost.c" -o "$OUT/recorder_cost_$v" -pthread -lm
done
printf '| collective | ranks | transport | off: mean (median) us | on: mean (median) us | cost |\n'
printf '|---|---:|---|---:|---:|---:|\n'
for coll in all_reduce broadcast; do
  for n in 2 4; do
    for tr in auto tcp; do
      iters=20000; [ $tr = tcp ] && iters=2000
      on_m=(); on_d=(); off_m=(); off_d=()
      for r in $(seq "$ROUNDS"); do
        for v in off on; do
          read -r m d < <(DIST_TRANSPORT=$tr "$OUT/recorder_cost_$v" -n $n -c $coll -b 11 -i $iters)
          if [ $v = on ]; then on_m+=("$m"); on_d+=("$d"); else off_m+=("$m"); off_d+=("$d"); fi
        done
      done
      # the median over rounds of each build's mean and median
      med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
      a=$(med "${off_m[@]}"); ad=$(med "${off_d[@]}"); b=$(med "${on_m[@]}"); bd=$(med "${on_d[@]}")
      pct=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%+.1f%%", (b - a) / a * 100 }')
      printf '| %s | %d | %s | %s (%s) | %s (%s) | %s |\n' "$coll" "$n" "$([ $tr = auto ] && echo shm || echo tcp)" "$a" "$ad" "$b" "$bd" "$pct"
    done
  done
done
