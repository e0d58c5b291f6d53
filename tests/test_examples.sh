#!/usr/bin/env bash
# TIMEOUT: 600
# tests/test_examples.sh - every example in its smoke mode.
#
# Each examples/NAME.c (but demo.c) names its smoke runs on lines of their
# own near the top (one or more; each runs; SMOKE-LINUX: lines are left
# out of the Wine suite, tests/windows/examples_wine.sh):
#     SMOKE: distrun -n 4 {} --smoke
# where {} is the built program ($BUILD_DIR/examples/NAME), {data} the
# built-in data make unpacked ($BUILD_DIR/data) and `distrun` the launcher
# ($DISTRUN).  The example checks its own result in that mode
# and exits non-zero when it is wrong; each run has a time limit (SMOKE_LIMIT
# seconds, default 120, times DIST_TIMEOUT_SCALE).  An example without a
# SMOKE line fails: every example is tested.
set -u
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DISTRUN=${DISTRUN:-$BUILD_DIR/distrun}
scale=${DIST_TIMEOUT_SCALE:-1}
limit=$(( ${SMOKE_LIMIT:-120} * scale ))
fails=0 runs=0
for src in examples/*.c; do
    name=$(basename "$src" .c)
    [ "$name" = demo ] && continue
    prog=$BUILD_DIR/examples/$name
    lines=$(grep -E '^[[:space:]]*(/\*|//|\*)?[[:space:]]*SMOKE(-LINUX)?:' "$src" | sed -E 's/.*SMOKE(-LINUX)?:[[:space:]]*//; s/[[:space:]]*\*\/[[:space:]]*$//')
    if [ -z "$lines" ]; then runs=$((runs + 1)); echo "FAIL $name: no SMOKE: line in $src"; fails=$((fails + 1)); continue; fi
    if [ ! -x "$prog" ]; then runs=$((runs + 1)); echo "FAIL $name: $prog was not built"; fails=$((fails + 1)); continue; fi
    while IFS= read -r line; do
        runs=$((runs + 1))
        cmd=${line//\{\}/$prog}
        cmd=${cmd//\{data\}/$BUILD_DIR/data}
        cmd=${cmd/#distrun /$DISTRUN }
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086
        out=$(timeout -k 5 "$limit" $cmd 2>&1 </dev/null); rc=$?
        secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        if [ $rc -eq 0 ]; then
            echo "ok   $name ($secs s, ${line#distrun }): $(printf '%s\n' "$out" | grep -v '^[[:space:]]*$' | tail -n 1)"
        else
            echo "FAIL $name (exit $rc$([ $rc -eq 124 ] && echo ", over its $limit s limit"), $secs s): $cmd"
            printf '%s\n' "$out" | tail -n 20 | sed 's/^/     | /'
            fails=$((fails + 1))
        fi
    done <<< "$lines"
done
echo "$((runs - fails)) of $runs examples passed"
[ $fails -eq 0 ]
