#!/usr/bin/env bash
# tests/windows/distrun_wine.sh [BUILD_DIR] - the launcher on Windows, under Wine.
#
# Cross-compiles tools/distrun.c (x86_64-w64-mingw32-gcc, C11, warnings as
# errors) and a test rank, tests/windows/distrun_child.c, into BUILD_DIR
# (default build/windows), and runs them under Wine.  Each check compares
# with values worked out here: every rank's environment (a new block:
# distrun's own, the rank's variables replacing any spelling of theirs),
# the store socket handed to rank 0, "[RANK] " prefixes on whole lines,
# exit codes and summaries as on POSIX (failed rank, Ctrl-C, --timeout,
# program missing), the ranks stopped, the ranks dying with a killed
# launcher and what ranks leave behind dying with distrun (job object),
# arguments reaching the rank unchanged, stdin passed on, and --trace:
# two ranks of dist.h (built here for Windows) traced and merged.
#
# Wine cannot aim a console event at one process group
# (GenerateConsoleCtrlEvent fails there), so the ranks are never sent
# Ctrl-Break: distrun's fallback, terminating them at once, is what runs.
#
# Wine's prefix: $WINEPREFIX, default /tmp/wineprefix-distrun (made on the
# first run, which takes longer).  Exit 0 pass, 77 skip (no MinGW-w64 or no
# Wine), 1 fail.
# TIMEOUT: 180
set -u

cd "$(dirname "$0")/../.."
out=${1:-build/windows}
CC=${MINGW_CC:-x86_64-w64-mingw32-gcc}
command -v "$CC" >/dev/null 2>&1 || { echo "skip: no MinGW-w64 compiler ($CC; apt install gcc-mingw-w64-x86-64)"; exit 77; }
WINE=$(command -v wine || command -v wine64) || { echo "skip: Wine is not installed (apt install wine64)"; exit 77; }
export WINEPREFIX=${WINEPREFIX:-/tmp/wineprefix-distrun} WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
# (set, so distrun does not set it for the ranks and say so on every run:
# tests/test_distrun.sh checks that)
export OMP_NUM_THREADS=1
mkdir -p "$out"
out=$(cd "$out" && pwd)
T=$(mktemp -d "$out/run.XXXXXX")
TAG=$(basename "$T")           # in every rank's arguments, to find stray processes

FAILS=0
pass() { echo "ok   $1"; }
fail() {
    echo "FAIL $1"; shift
    for l in "$@"; do echo "     $l"; done
    # what distrun said on the last run, whatever the check looked at
    [ -n "${ERR-}" ] && printf '%s\n' "$ERR" | head -20 | sed 's/^/     stderr| /'
    FAILS=$((FAILS + 1))
}
winpath() { local p=$1; printf 'Z:%s' "${p//\//\\}"; }
now_ms() { date +%s%3N; }
# live (not zombie) processes of this run: distrun.exe, or a rank given $TAG
alive() { ps -eo pid=,stat=,args= | awk -v t="$TAG" '$2 !~ /^Z/ && index($0, t) && !/awk/ { print $1 }'; }
cleanup() {
    local p
    for p in $(alive); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

# ---- build ----------------------------------------------------------------
if ! "$CC" -std=c11 -O2 -Wall -Wextra -Werror -I. -o "$out/distrun.exe" tools/distrun.c -lws2_32 > "$T/cc.log" 2>&1; then
    fail "distrun.exe builds with $CC -std=c11 -O2 -Wall -Wextra -Werror" "$(head -20 "$T/cc.log")"
    exit 1
fi
pass "distrun.exe builds with $CC -std=c11 -O2 -Wall -Wextra -Werror"
if ! "$CC" -std=c11 -O2 -Wall -Wextra -Werror -o "$out/distrun_child.exe" tests/windows/distrun_child.c -lws2_32 \
        > "$T/cc.log" 2>&1; then
    fail "the test rank builds" "$(head -20 "$T/cc.log")"
    exit 1
fi
mkdir -p "$T/sub dir" "$T/hb"
cp "$out/distrun_child.exe" "$T/sub dir/rank child.exe"
CHILD=$(winpath "$out/distrun_child.exe")
H=$(winpath "$T/hb")            # where ranks leave pid and heartbeat files

# the first start makes the prefix
if ! timeout 120 "$WINE" "$out/distrun_child.exe" > "$T/warm" 2>&1; then
    echo "skip: Wine cannot run a Windows program here: $(tr -d '\r' < "$T/warm" | tail -1)"
    exit 77
fi

# run LIMIT ARGS...: distrun.exe under Wine; RC, OUT, ERR (no \r), MS
run() {
    local limit=$1 t0
    shift
    t0=$(now_ms)
    timeout -s KILL "$limit" "$WINE" "$out/distrun.exe" "$@" > "$T/out" 2> "$T/err" < /dev/null
    RC=$?
    MS=$(( $(now_ms) - t0 ))
    OUT=$(tr -d '\r' < "$T/out")
    ERR=$(tr -d '\r' < "$T/err")
}

# ---- environment ------------------------------------------------------------
# One node, port chosen by distrun: distrun hosts the store there
# (DIST_STORE_HOSTED=1; an inherited DIST_STORE_LISTEN_FD is removed).
DISTRUN_TEST_MARK=m1 RANK=99 rank=98 DIST_STORE_LISTEN_FD=77 run 30 -n 3 "$CHILD" env
port=$(printf '%s\n' "$OUT" | sed -n 's/^\[0\] .* MASTER_PORT=\([0-9]*\) .*/\1/p')
rid=$(printf '%s\n' "$OUT" | sed -n 's/^\[0\] .* DIST_RUN_ID=\(distrun-[0-9a-f]\{16\}\) .*/\1/p')
want=""
for r in 0 1 2; do
    store=ok
    want+="[$r] RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127.0.0.1"
    want+=" MASTER_PORT=$port DIST_RUN_ID=$rid MARK=m1 nrank=1 hosted=1 store=$store"$'\n'
done
if [ "$RC" = 0 ] && [ -n "$port" ] && [ "$port" -gt 0 ] && [ -n "$rid" ] &&
   [ "$(printf '%s\n' "$OUT" | sort)" = "${want%$'\n'}" ] && [ -z "$ERR" ]; then
    pass "env per rank (one node, port $port): new block, RANK set once, the store distrun's, no DIST_STORE_LISTEN_FD"
else
    fail "env per rank (one node)" "rc=$RC" "got:" "$OUT" "want:" "$want" "stderr: $ERR"
fi

DISTRUN_TEST_MARK=m2 DIST_STORE_LISTEN_FD=77 run 30 --nnodes 2 --node_rank 1 --master-port 29555 \
    --master-addr localhost --run-id exp-7 -n 3 "$CHILD" env
want=""
for l in 0 1 2; do
    r=$((3 + l))
    want+="[$r] RANK=$r WORLD_SIZE=6 LOCAL_RANK=$l LOCAL_WORLD_SIZE=3 GROUP_RANK=1 MASTER_ADDR=localhost"
    want+=" MASTER_PORT=29555 DIST_RUN_ID=exp-7 MARK=m2 nrank=1 hosted=1 store=remote"$'\n'
done
if [ "$RC" = 0 ] && [ "$(printf '%s\n' "$OUT" | sort)" = "${want%$'\n'}" ]; then
    pass "env per rank (--nnodes 2 --node-rank 1, given port and run id; an inherited DIST_STORE_LISTEN_FD is removed)"
else
    fail "env per rank (two nodes)" "rc=$RC" "got:" "$OUT" "want:" "$want" "stderr: $ERR"
fi

run 30 --no-prefix -n 2 --master-port 29556 "$CHILD" env
if [ "$RC" = 0 ] && [ "$(printf '%s\n' "$OUT" | grep -c '^RANK=[01] WORLD_SIZE=2 .* MASTER_PORT=29556 ')" = 2 ]; then
    pass "--no-prefix: ranks write straight to stdout"
else
    fail "--no-prefix" "rc=$RC" "$OUT"
fi

# ---- output -------------------------------------------------------------------
# 4 ranks x 2000 lines of 230 bytes on stdout and on stderr, as fast as they
# can, then a last line without a newline: every line whole, in order, with
# its rank's prefix (the payload letter is the rank's too).
N=2000
run 60 -n 4 "$CHILD" lines $N partial
check_stream() {   # stream-name text
    printf '%s\n' "$2" | awk -v s="$1" -v n=$N '
        BEGIN {
            for (r = 0; r < 4; r++) { c = substr("abcd", r + 1, 1); p = ""; for (k = 0; k < 200; k++) p = p c; pad[r] = p }
        }
        {
            if (match($0, /^\[[0-3]\] no newline$/)) { r = substr($0, 2, 1); tail[r]++; next }
            if (!match($0, /^\[[0-3]\] (out|err) rank [0-3] line [0-9]+ [a-d]+$/)) { print "bad line: " substr($0, 1, 80); bad++; next }
            split($0, f, " ")
            r = substr(f[1], 2, 1)
            if (f[2] != s || f[4] != r || f[6] != next_[r] + 0 || f[7] != pad[r]) {
                print "wrong line for rank " r ": " substr($0, 1, 80); bad++
            }
            next_[r]++
        }
        END {
            for (r = 0; r < 4; r++) {
                if (next_[r] != n) { print "rank " r ": " next_[r] + 0 " lines, want " n; bad++ }
                if (s == "out" && tail[r] != 1) { print "rank " r ": partial last line seen " tail[r] + 0 " times"; bad++ }
            }
            exit (bad > 0)
        }'
}
if [ "$RC" = 0 ] && o=$(check_stream out "$OUT") && e=$(check_stream err "$ERR"); then
    pass "prefixes: $((4 * N)) lines each on stdout and stderr, whole, in order, partial last line flushed (${MS} ms)"
else
    fail "prefixes and whole lines" "rc=$RC" "${o:-}" "${e:-}"
fi

# ---- exit status and stopping -----------------------------------------------
hb_values() { local f; for f in "$T"/hb/hb-*; do [ -f "$f" ] || continue; tr -d '\r\n' < "$f" 2>/dev/null; echo -n " "; done; }
hb_stopped() {   # the heartbeats do not move any more
    local a b
    sleep 0.3; a=$(hb_values); sleep 0.5; b=$(hb_values)
    [ "$a" = "$b" ]
}
wait_hb() {      # N ranks beating, each at least 3 times
    local n=$1 i f ok
    for i in $(seq 200); do
        ok=0
        for f in "$T"/hb/hb-*; do [ -f "$f" ] && [ "$(tr -d '\r\n' < "$f")" -ge 3 ] 2>/dev/null && ok=$((ok + 1)); done
        [ "$ok" -ge "$n" ] && return 0
        sleep 0.05
    done
    return 1
}

run 30 -n 2 "$CHILD" env
if [ "$RC" = 0 ] && ! printf '%s\n' "$ERR" | grep -q '^distrun:'; then
    pass "all ranks exit 0: exit 0, no summary"
else
    fail "all ranks exit 0" "rc=$RC" "$ERR"
fi

rm -f "$T"/hb/*
run 30 -n 3 "$CHILD" pid "$H" await "$H" 3 fail 1 7 hb "$H" "$TAG"
pid1=$(tr -d '\r\n' < "$T/hb/pid-1" 2>/dev/null)
if [ "$RC" = 7 ] && [ "$(printf '%s\n' "$ERR" | grep -c '^distrun:')" = 1 ] &&
   printf '%s\n' "$ERR" | grep -Eqx "distrun: rank 1 \\(pid $pid1\\) exited with code 7 on .* \\([0-9.]+ s after the start\\), the first to fail; distrun stopped ranks 0, 2" &&
   printf '%s\n' "$OUT" | grep -qx '\[1\] rank 1 fails with 7' && hb_stopped && [ -z "$(alive)" ]; then
    pass "rank 1 exits 7: exit 7, one summary naming its pid, the other ranks stopped (${MS} ms)"
else
    fail "failing rank" "rc=$RC (want 7)" "stderr: $ERR" "stdout: $OUT" "alive: $(alive | tr '\n' ' ')"
fi

run 30 -n 2 "$CHILD" fail 0 3221225477 sleep "$TAG"     # 0xC0000005, as a crash exits
if [ "$RC" = 5 ] && printf '%s\n' "$ERR" | grep -Eqx 'distrun: rank 0 \(pid [0-9]+\) exited with code 0xC0000005 on .* \([0-9.]+ s after the start\), the first to fail; distrun stopped rank 1' &&
   [ -z "$(alive)" ]; then
    pass "a 32-bit exit code (0xC0000005) is passed on whole and shown in hex"
else
    fail "32-bit exit code" "rc=$RC (want 0xC0000005, seen as 5)" "$ERR"
fi

run 30 -n 2 --timeout 1 "$CHILD" sleep "$TAG"
if [ "$RC" = 124 ] && [ "$MS" -lt 6000 ] &&
   printf '%s\n' "$ERR" | grep -qx 'distrun: timed out after 1 s (--timeout); stopped 2 ranks' && [ -z "$(alive)" ]; then
    pass "--timeout 1: exit 124 in $MS ms, ranks stopped"
else
    fail "--timeout" "rc=$RC ms=$MS" "$ERR"
fi

# Each rank leaves a process behind that holds its pipes open: distrun does
# not wait for those pipes to end, and the job object takes the leftovers.
run 30 -n 2 "$CHILD" spawn "$TAG"
sleep 0.3
if [ "$RC" = 0 ] && [ "$MS" -lt 3000 ] && [ "$(printf '%s\n' "$OUT" | grep -Ec '^\[[01]\] spawned [0-9]+$')" = 2 ] &&
   [ -z "$(alive)" ]; then
    pass "ranks whose leftover processes hold their pipes: done in $MS ms, leftovers gone with distrun"
else
    fail "leftover processes" "rc=$RC ms=$MS" "$OUT" "$ERR" "alive: $(alive | tr '\n' ' ')"
fi

run 30 -n 2 no-such-program.exe
if [ "$RC" = 127 ] && printf '%s\n' "$ERR" | grep -q "^distrun: cannot execute 'no-such-program.exe': "; then
    pass "program that cannot be started: exit 127"
else
    fail "missing program" "rc=$RC" "$ERR"
fi

# start_bg ARGS...: distrun.exe in the background; BG is what to wait for.
# dr_pid: the Unix process that is distrun.exe (the wine script execs it,
# so it is $BG, but look it up rather than trust that).
start_bg() {
    rm -f "$T"/hb/*
    "$WINE" "$out/distrun.exe" "$@" > "$T/out" 2> "$T/err" < /dev/null &
    BG=$!
}
dr_pid() {
    local p
    p=$(ps -eo pid=,args= | awk -v t="$TAG" 'index($0, t) && /distrun\.exe/ && !/awk/ { print $1; exit }')
    echo "${p:-$BG}"
}

start_bg -n 2 "$CHILD" pid "$H" hb "$H" "$TAG"
if wait_hb 2; then
    DPID=$(dr_pid)
    kill -INT "$DPID"          # Wine turns SIGINT into the console's Ctrl-C
    for i in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$DPID" 2>/dev/null; then kill -9 "$DPID"; fi
    wait "$BG"; RC=$?
    ERR=$(tr -d '\r' < "$T/err")
    if [ "$RC" = 130 ] && printf '%s\n' "$ERR" | grep -qx 'distrun: got signal 2 (Ctrl-C); forwarded it to 2 ranks' &&
       hb_stopped && [ -z "$(alive)" ]; then
        pass "Ctrl-C: forwarded (under Wine: the ranks terminated, as no console event can reach them), exit 130"
    else
        fail "Ctrl-C" "rc=$RC (want 130)" "$ERR" "alive: $(alive | tr '\n' ' ')"
    fi
else
    kill -9 "$(dr_pid)" 2>/dev/null; wait "$BG"
    fail "Ctrl-C: the ranks did not start" "$(tr -d '\r' < "$T/err")"
fi

start_bg -n 3 "$CHILD" pid "$H" hb "$H" "$TAG"
if wait_hb 3; then
    kill -9 "$(dr_pid)"        # no handler runs: only the job object can act
    wait "$BG" 2>/dev/null
    if hb_stopped && [ -z "$(alive)" ]; then
        pass "launcher killed (SIGKILL): every rank dies with it (job object, KILL_ON_JOB_CLOSE)"
    else
        fail "launcher killed: ranks survive" "alive: $(alive | tr '\n' ' ')" "heartbeats: $(hb_values)"
    fi
else
    kill -9 "$(dr_pid)" 2>/dev/null; wait "$BG"
    fail "launcher killed: the ranks did not start" "$(tr -d '\r' < "$T/err")"
fi

# ---- arguments ---------------------------------------------------------------
# Through Wine's command line, distrun's parsing and its quoting for
# CreateProcessW, to the rank's CommandLineToArgvW; the rank's path has a space.
args=('a b' 'say "hi"' 'trail\' 'two\\' '' 'x\"y' $'tab\tx' '\\srv\share dir\' '"' '\' ' ' 'a\\\"b c' 'plain' '--')
want=""
for a in "${args[@]}"; do want+="[0] arg:$(printf '%s' "$a" | od -An -tx1 | tr -d ' \n')"$'\n'; done
run 30 "$(winpath "$T/sub dir/rank child.exe")" args "${args[@]}"
if [ "$RC" = 0 ] && [ "$OUT" = "${want%$'\n'}" ]; then
    pass "arguments with spaces, quotes, trailing backslashes, empty ones reach the rank unchanged (its path has a space)"
else
    fail "argument quoting" "rc=$RC" "got:" "$OUT" "want:" "$want" "$ERR"
fi

printf 'from stdin\n' > "$T/in"
timeout -s KILL 30 "$WINE" "$out/distrun.exe" -n 1 "$CHILD" stdin < "$T/in" > "$T/out" 2>&1
RC=$?
if [ "$RC" = 0 ] && [ "$(tr -d '\r' < "$T/out")" = "[0] stdin=from stdin" ]; then
    pass "a file on stdin is passed on to the rank"
else
    fail "stdin" "rc=$RC" "$(tr -d '\r' < "$T/out")"
fi

# ---- traces ---------------------------------------------------------------------
# distrun.exe --trace DIR with 2 ranks of dist.h built for Windows: each
# writes DIR\rank<R>.trace.json (DIST_TRACE, set by distrun), distrun
# merges them into DIR\trace.json: both ranks' 10 all_reduces and 5 sends
# or receives, metadata first, then by time; on the job clock no
# all_reduce ends before both ranks began it.
cat > "$T/trace_rank.c" <<'C'
#define DIST_IMPLEMENTATION
#include "dist.h"
#include <stdio.h>
int main(void) {
    dist_t *w = NULL;
    int v = 1;
    if (dist_init(&w, NULL) != DIST_OK) { fprintf(stderr, "%s\n", dist_error_message(NULL)); return 1; }
    for (int i = 0; i < 10; i++)
        if (dist_all_reduce(w, &v, 1, DIST_INT32, DIST_SUM) != DIST_OK) { fprintf(stderr, "%s\n", dist_error_message(w)); return 1; }
    for (int i = 0; i < 5; i++) {
        dist_result r = dist_rank(w) == 0 ? dist_send(w, &v, 1, DIST_INT32, 1, 3) : dist_recv(w, &v, 1, DIST_INT32, 0, 3);
        if (r != DIST_OK) { fprintf(stderr, "%s\n", dist_error_message(w)); return 1; }
    }
    printf("sum %d\n", v);
    return dist_destroy(w) == DIST_OK ? 0 : 1;
}
C
if ! "$CC" -std=c11 -O2 -Wall -Wextra -Werror -I. -o "$T/trace_rank.exe" "$T/trace_rank.c" -static -lws2_32 > "$T/cc.log" 2>&1; then
    fail "a rank of dist.h builds for Windows" "$(head -20 "$T/cc.log")"
else
    mkdir -p "$T/tr"
    run 120 -n 2 --trace "$(winpath "$T/tr")" "$(winpath "$T/trace_rank.exe")"
    if [ "$RC" = 0 ] && [ "$ERR" = "distrun: trace of 2 ranks merged into $(winpath "$T/tr")/trace.json" ] && [ -s "$T/tr/trace.json" ] &&
       python3 - "$T/tr/trace.json" > "$T/tr.check" 2>&1 <<'PY'
import json, sys, collections
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
meta = [i for i, e in enumerate(ev) if e["ph"] == "M"]
assert meta == list(range(len(meta))), "metadata not first"
xs = [e for e in ev if e["ph"] == "X"]
assert [e["ts"] for e in xs] == sorted(e["ts"] for e in xs), "events not by time"
ar = collections.defaultdict(dict)
for e in xs:
    if e["name"] == "all_reduce": ar[e["args"]["seq"]][e["pid"]] = e
assert len(ar) == 10 and all(len(v) == 2 for v in ar.values()), "all_reduces: %s" % {k: sorted(v) for k, v in ar.items()}
p2p = sorted((e["pid"], e["name"]) for e in xs if e["name"] in ("send", "recv"))
assert p2p == [(0, "send")] * 5 + [(1, "recv")] * 5, p2p
worst = max(max(e["ts"] for e in v.values()) - min(e["ts"] + e["dur"] for e in v.values()) for v in ar.values())
# Each rank's clock is the job's within its clock_error_us (half its best
# round trip to the store at init): under Wine on a loaded machine that can
# be milliseconds, and then so can an apparent overlap.
assert t["otherData"]["world"] == 2 and t["otherData"]["missing"] == [], t["otherData"]
errs = t["otherData"]["clock_error_us"]
assert len(errs) == 2 and all(0 <= e < 1e6 for e in errs), "clock errors %s" % errs
allowed = 2000 + sum(errs)
assert worst < allowed, "an all_reduce ended %.0f us before the other rank began it, more than the ranks' clock errors allow (%s us): clocks not aligned" % (worst, errs)
print("ok: 20 all_reduce events, 10 point-to-point; the last rank in came %.1f us %s the first one out, at worst; clock errors %s us"
      % (abs(worst), "before" if worst < 0 else "after", errs))
PY
    then
        pass "--trace DIR: 2 Windows ranks' traces merged into DIR/trace.json, in order, clocks aligned ($(cat "$T/tr.check"))"
    else
        fail "--trace DIR on Windows" "rc=$RC" "stdout: $OUT" "stderr: $ERR" "$(cat "$T/tr.check" 2>/dev/null)" "$(ls "$T/tr" 2>&1)"
    fi
fi

echo "note: not testable under Wine: Ctrl-Break reaching a rank (GenerateConsoleCtrlEvent to a process group),"
echo "      hence neither --kill-grace nor a second Ctrl-C: Wine's ranks are terminated at the first stop."
if [ "$FAILS" = 0 ]; then
    echo "distrun_wine: all checks passed"
    exit 0
fi
echo "distrun_wine: $FAILS check(s) failed"
exit 1
