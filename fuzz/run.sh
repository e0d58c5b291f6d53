#!/usr/bin/env bash
# fuzz/run.sh - runs the fuzz targets built by `make fuzz` (which calls this).
#
#   fuzz/run.sh -b BUILD/fuzz -t SECONDS [-j JOBS] TARGET...
#
# Each target runs for SECONDS (libFuzzer's -max_total_time), JOBS of them
# at once, on three corpus directories: BUILD/fuzz/corpus/TARGET (scratch:
# where libFuzzer adds what it finds, kept between runs), fuzz/corpus/TARGET
# (committed inputs: earlier crashes, read only) and BUILD/fuzz/seeds/TARGET
# (made by gen_seeds).  SECONDS=0 only replays the corpora.  A crash, leak,
# hang (-timeout) or out-of-memory fails the run; its input is written to
# BUILD/fuzz/artifacts/, and the log's tail is printed.  Extra libFuzzer
# flags: FUZZ_FLAGS in the environment.
set -uo pipefail
cd "$(dirname "$0")/.."

dir= secs=60 jobs=2
while getopts "b:t:j:" o; do
    case $o in
        b) dir=$OPTARG ;;
        t) secs=$OPTARG ;;
        j) jobs=$OPTARG ;;
        *) echo "usage: $0 -b BUILD/fuzz -t SECONDS [-j JOBS] TARGET..." >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ -n "$dir" ] && [ $# -gt 0 ] || { echo "usage: $0 -b BUILD/fuzz -t SECONDS [-j JOBS] TARGET..." >&2; exit 2; }
mkdir -p "$dir/artifacts" "$dir/logs"

run_one() {
    local t=$1 log="$dir/logs/$1.log" corpora=()
    mkdir -p "$dir/corpus/$t"
    corpora+=("$dir/corpus/$t")
    [ -d "fuzz/corpus/$t" ] && corpora+=("fuzz/corpus/$t")
    [ -d "$dir/seeds/$t" ] && corpora+=("$dir/seeds/$t")
    rm -f "$dir/logs/$t.rc"
    if [ "$secs" = 0 ]; then
        # replay only: every input of every corpus once
        "$dir/$t" -runs=0 -timeout=10 -artifact_prefix="$dir/artifacts/$t-" ${FUZZ_FLAGS:-} "${corpora[@]}" >"$log" 2>&1
    else
        "$dir/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix="$dir/artifacts/$t-" ${FUZZ_FLAGS:-} "${corpora[@]}" >"$log" 2>&1
    fi
    echo $? >"$dir/logs/$t.rc"
}

# the last coverage line of a log and its executions per second
summary() {
    local log="$dir/logs/$1.log" last
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    printf '%-11s %s, %s exec/s, %s new inputs\n' "$1" \
        "$(sed -nE 's/.*(cov: [0-9]+ ft: [0-9]+ corp: [0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")" \
        "$(sed -nE 's/^stat::average_exec_per_sec: *//p' "$log")" \
        "$(sed -nE 's/^stat::new_units_added: *//p' "$log")"
}

failed=()
running=0
for t in "$@"; do rm -f "$dir/logs/$t.log" "$dir/logs/$t.rc"; done
for t in "$@"; do
    [ -x "$dir/$t" ] || { echo "fuzz: $dir/$t is not built" >&2; failed+=("$t"); continue; }
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
    if [ "$secs" = 0 ]; then echo "fuzz: $t (replaying its corpora)"; else echo "fuzz: $t for ${secs}s"; fi
    run_one "$t" &
    running=$((running + 1))
done
wait

for t in "$@"; do
    [ -f "$dir/logs/$t.log" ] || continue
    if [ "$(cat "$dir/logs/$t.rc" 2>/dev/null)" != 0 ]; then
        failed+=("$t")
        echo "==== $t FAILED (log: $dir/logs/$t.log) ===="
        grep -vE '^#[0-9]+|^INFO:|^\s+NEW_FUNC' "$dir/logs/$t.log" | tail -n 40
    elif [ "$secs" != 0 ]; then
        summary "$t"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (inputs in $dir/artifacts/)"
    exit 1
fi
echo "fuzz: passed ($# targets)"
