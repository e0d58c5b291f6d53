#!/usr/bin/env bash
# shellcheck disable=SC2317   # (the check_NAME functions are called by name)
# tests/windows/examples_wine.sh [BUILD_DIR] - the examples on Windows, under Wine.
#
# Checks that examples/*.c use only the C standard library and the dist
# headers (no POSIX headers or calls: pthread, clock_gettime, M_PI...),
# cross-compiles every one and the launcher (tools/distrun.c) with
# x86_64-w64-mingw32-gcc, C11, warnings as errors, into BUILD_DIR (default
# build/windows), two at a time, unpacks the built-in data into
# BUILD_DIR/data, and runs under Wine:
#   - demo.exe (dist_spawn: on Windows each rank is the program started
#     again): its lines checked one by one, the banner exactly once;
#   - every example in the smoke runs its source names (the `SMOKE:` lines
#     tests/test_examples.sh runs on Linux; `SMOKE-LINUX:` ones are left
#     out, said in a note), through distrun.exe, with the
#     example's own result checked here too: exact values where they are
#     exact (rpc_autograd's sums and SGD step, the collectives' verdicts),
#     accuracy and learning thresholds where they are not;
#   - dist_sgd's default data directory, build/data seen from the current
#     directory (the repository root), on Windows paths;
#   - for the runs whose float32 results come out the same bit for bit
#     with MinGW-w64 and glibc (dist_sgd's parameters, rpc_autograd's
#     tensors): the same numbers as the Linux build in LINUX_BUILD (default
#     build), when that build is there and newer than its sources.  (Not
#     rl_cartpole: deterministic on each platform, but its physics and
#     policy take cos, sin and exp in double precision, where MinGW-w64's
#     libm and glibc's differ in the last bit, and the episodes amplify
#     that: the smoke run's 40 rounds agree, round 100 of a full run not.)
# Each Wine run has a time limit (timeout -k 5 WINE_LIMIT, default 120 s).
#
# Wine's prefix: $WINEPREFIX, default /tmp/wineprefix-examples (made on the
# first run, which takes longer).  Exit 0 pass, 77 skip (no MinGW-w64 or no
# Wine), 1 fail.
# TIMEOUT: 600
set -u

cd "$(dirname "$0")/../.." || exit 1
out=${1:-build/windows}
CC=${MINGW_CC:-x86_64-w64-mingw32-gcc}
LINUX_BUILD=${LINUX_BUILD:-build}
LIMIT=${WINE_LIMIT:-120}
command -v "$CC" >/dev/null 2>&1 || { echo "skip: no MinGW-w64 compiler ($CC; apt install gcc-mingw-w64-x86-64)"; exit 77; }
WINE=$(command -v wine || command -v wine64) || { echo "skip: Wine is not installed (apt install wine64)"; exit 77; }
export WINEPREFIX=${WINEPREFIX:-/tmp/wineprefix-examples} WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
T=$(mktemp -d "$out/run.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

FAILS=0 CHECKS=0
START=$(date +%s.%N)
pass() { CHECKS=$((CHECKS + 1)); echo "ok   $1"; }
fail() {
    local l
    CHECKS=$((CHECKS + 1)) FAILS=$((FAILS + 1))
    echo "FAIL $1"
    shift
    for l in "$@"; do printf '%s\n' "$l" | tail -n 25 | sed 's/^/     | /'; done
}
winpath() { local p=$1; printf 'Z:%s' "${p//\//\\}"; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
HEADERS="dist.h dist_rpc.h"

# ---- portable sources -----------------------------------------------------------
# The examples use the C standard library and the dist headers only: no
# POSIX headers or calls (and no C11 threads, which MinGW and MSVC lack).
std_headers=" assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h setjmp.h "
std_headers+=" signal.h stdalign.h stdarg.h stdatomic.h stdbool.h stddef.h stdint.h stdio.h stdlib.h stdnoreturn.h string.h "
std_headers+=" tgmath.h time.h uchar.h wchar.h wctype.h dist.h dist_rpc.h dist_cuda.h "
bad=()
for src in examples/*.c; do
    while IFS= read -r h; do
        case $std_headers in *" $h "*) ;; *) bad+=("$src includes <$h>") ;; esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\)[>"].*/\1/p' "$src")
    # outside comments (blanked, lines kept): POSIX calls and names, C11 threads
    while IFS= read -r l; do bad+=("$src: $l"); done < <(perl -0pe 's{/\*.*?\*/}{ (my $c = $&) =~ tr/\n//cd; $c }gse; s{//[^\n]*}{}g' "$src" |
        grep -nwE 'pthread_[a-z_]+|clock_gettime|CLOCK_[A-Z_]+|M_PI|popen|pclose|isatty|access|usleep|nanosleep|sleep|getpid|fork|fileno|strdup|thrd_[a-z]+|mtx_[a-z]+|cnd_[a-z]+')
done
if [ ${#bad[@]} = 0 ]; then
    pass "examples/*.c use only the C standard library and the dist headers"
else
    fail "examples/*.c use more than the C standard library and the dist headers" "$(printf '%s\n' "${bad[@]}")"
fi

# ---- build --------------------------------------------------------------------
# Two compilers at a time (the examples with dist_rpc.h take ~10 s each).
FLAGS=(-std=c11 -O2 -Wall -Wextra -Werror)
build() {   # name compiler-arguments...
    local name=$1
    shift
    "$CC" "${FLAGS[@]}" "$@" > "$T/cc-$name.log" 2>&1
    echo $? > "$T/cc-$name.rc"
}
t0=$(date +%s.%N)
names=()
build distrun -I. tools/distrun.c -o "$out/distrun.exe" -lws2_32 &
for src in examples/*.c; do
    name=$(basename "$src" .c)
    names+=("$name")
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
    build "$name" -I. "$src" -o "$out/$name.exe" -lws2_32 &
done
wait
built=()
for name in distrun "${names[@]}"; do
    if [ "$(cat "$T/cc-$name.rc" 2>/dev/null)" = 0 ] && [ ! -s "$T/cc-$name.log" ]; then
        built+=("$name")
    else
        fail "$name.exe builds with $CC ${FLAGS[*]} (-lws2_32)" "$(head -20 "$T/cc-$name.log")"
    fi
done
[ "${#built[@]}" = $((${#names[@]} + 1)) ] &&
    pass "distrun.exe and ${#names[@]} examples build with $CC ${FLAGS[*]}, no warnings ($(since "$t0") s, 2 at a time)"
is_built() { case " ${built[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
is_built distrun || { echo "examples_wine: distrun.exe did not build: nothing to run"; exit 1; }

# The built-in data, unpacked (the examples read IDX files, not .gz).
mkdir -p "$out/data"
for gz in examples/data/*.gz; do
    [ -f "$gz" ] || continue
    f=$out/data/$(basename "$gz" .gz)
    if [ ! -s "$f" ] || [ "$gz" -nt "$f" ]; then gzip -dc "$gz" > "$f.tmp" && mv "$f.tmp" "$f"; fi
done

# The first start makes the prefix.
if ! timeout -k 5 "$LIMIT" "$WINE" "$out/distrun.exe" --help > "$T/warm" 2>&1 < /dev/null; then
    echo "skip: Wine cannot run a Windows program here: $(tr -d '\r' < "$T/warm" | tail -1)"
    exit 77
fi

# wine_run PROGRAM ARGS...: under Wine, with the time limit; RC, OUT (stdout
# and stderr, no \r), SECS.
wine_run() {
    local t
    t=$(date +%s.%N)
    timeout -k 5 "$LIMIT" "$WINE" "$@" > "$T/out" 2>&1 < /dev/null
    RC=$?
    SECS=$(since "$t")
    OUT=$(tr -d '\r' < "$T/out")
}
rc_text() { [ "$RC" = 124 ] || [ "$RC" = 137 ] && echo "exit $RC: over the ${LIMIT} s limit" || echo "exit $RC"; }

# ---- demo: dist_spawn, each rank the program started again ------------------------
# 4 ranks: the token comes back as 0+1+2+3; rank r gets {10(r-1)+0..3} from
# its left neighbour; each arrives once (1..4) and reads its right
# neighbour's greeting; the banner once (rank 0), "all 4 ranks finished"
# once (the parent), and nothing else.
check_demo() {
    local want got
    want=$(cat <<EOF
[rank 0] got {30, 31, 32, 33} from rank 3
[rank 0] the token came back around the ring as 6 (0+1+...+3)
[rank 1] got {0, 1, 2, 3} from rank 0
[rank 2] got {10, 11, 12, 13} from rank 1
[rank 3] got {20, 21, 22, 23} from rank 2
all 4 ranks finished
EOF
)
    got=$(printf '%s\n' "$OUT" | grep -v -e '^dist .* demo: 4 ranks on this machine$' -e 'was number' | LC_ALL=C sort)
    [ "$got" = "$want" ] || { WHY="the lines (but banner and arrivals), sorted, are not as expected"; return 1; }
    if [ "$(printf '%s\n' "$OUT" | head -1 | grep -c '^dist .* demo: 4 ranks on this machine$')" != 1 ] ||
       [ "$(printf '%s\n' "$OUT" | grep -c 'demo: 4 ranks on this machine')" != 1 ]; then
        WHY="the banner is not printed exactly once, first"; return 1
    fi
    [ "$(printf '%s\n' "$OUT" | tail -1)" = "all 4 ranks finished" ] || { WHY="'all 4 ranks finished' is not the last line"; return 1; }
    got=$(printf '%s\n' "$OUT" | sed -n 's/^\[rank \([0-3]\)\] was number \([1-4]\) to arrive; rank \([0-3]\) says "hello from rank \([0-3]\)"$/\1 \2 \3 \4/p' |
          awk '{ if ($3 != ($1 + 1) % 4 || $4 != $3) bad = 1; seen[$2]++; n++ }
               END { for (k = 1; k <= 4; k++) if (seen[k] != 1) bad = 1; print (n == 4 && !bad) ? "good" : "bad" }')
    [ "$got" = good ] || { WHY="the store part: not 4 arrivals numbered 1-4 once each, each reading its right neighbour's greeting"; return 1; }
    [ "$(printf '%s\n' "$OUT" | wc -l)" = 11 ] || { WHY="$(printf '%s\n' "$OUT" | wc -l) lines, want 11"; return 1; }
    return 0
}
if is_built demo; then
    wine_run "$out/demo.exe"
    WHY=""
    if [ "$RC" = 0 ] && check_demo; then
        pass "demo (${SECS} s): 4 re-executed ranks, token 6, the arrays, the store, banner once"
    else
        fail "demo ($(rc_text), ${SECS} s): ${WHY:-}" "$OUT"
    fi
fi

# ---- the smoke runs --------------------------------------------------------------
# Per example, what its output must show beyond exit status 0.  WHY says
# what is wrong.  (Called by name: check_NAME.)
num() { printf '%s\n' "$OUT" | sed -n "$1" | head -1; }
check_collectives() { [ "$(printf '%s\n' "$OUT" | tail -1)" = "[0] collectives smoke: all checks passed on 4 ranks" ] || WHY="no 'all checks passed on 4 ranks'"; }
check_p2p() { [ "$(printf '%s\n' "$OUT" | tail -1)" = "[0] p2p smoke: all checks passed on 4 ranks" ] || WHY="no 'all checks passed on 4 ranks'"; }
check_ring_allreduce() { [ "$(printf '%s\n' "$OUT" | tail -1)" = "[0] ring_allreduce smoke: all checks passed on 4 ranks" ] || WHY="no 'all checks passed on 4 ranks'"; }
check_rpc_autograd() {
    # loss = sum(a + b) over the printed a and b; every gradient exactly 1;
    # after = before - 0.05 for each of the 18 elements (5 decimals shown)
    WHY=$(printf '%s\n' "$OUT" | awk '
        /^\[0\] [ab] \(owned by worker1\), before the step:/ { sec = "before" substr($2, 1, 1); row = 0; next }
        /^\[0\] d\(loss\)\/d\([ab]\)/                    { sec = "grad"; next }
        /^\[0\] [ab] after one SGD step/                 { sec = "after" substr($2, 1, 1); row = 0; next }
        /^\[0\] loss = sum\(a \+ b\) = /                 { loss = $NF; sec = ""; next }
        /^\[0\] +-?[0-9]+\.[0-9]+ +-?[0-9]+\.[0-9]+ +-?[0-9]+\.[0-9]+$/ {
            for (i = 2; i <= 4; i++) {
                if (sec == "grad") { g++; if ($i != "1.00000") bad = bad " gradient " $i " is not 1" }
                else if (sec != "") { v[sec, row * 3 + i - 2] = $i; n[sec]++ }
            }
            row++; next
        }
        END {
            for (k = 0; k < 9; k++) { s += v["beforea", k] + v["beforeb", k]
                for (t = 1; t <= 2; t++) { x = substr("ab", t, 1); d = v["before" x, k] - 0.05 - v["after" x, k]
                                           if (d > 2e-5 || d < -2e-5) bad = bad " " x "[" k "] moved by " (v["before" x, k] - v["after" x, k]) } }
            if (n["beforea"] != 9 || n["beforeb"] != 9 || n["aftera"] != 9 || n["afterb"] != 9 || g != 18) bad = bad " not 2 x 9 values before, after and as gradients"
            else if (loss == "" || s - loss > 1e-3 || loss - s > 1e-3) bad = bad " loss " loss " but the elements sum to " s
            printf "%s", bad
        }')
    [ -n "$WHY" ] && return
    printf '%s\n' "$OUT" | grep -q '^\[0\] done; smoke check passed' || WHY="no 'smoke check passed'"
}
check_dist_sgd() {
    local acc first last
    if ! printf '%s\n' "$OUT" | grep -Eq '^\[0\] start: parameters bitwise identical on all 4 ranks' ||
       ! printf '%s\n' "$OUT" | grep -Eq '^\[0\] end: parameters bitwise identical on all 4 ranks'; then
        WHY="the parameters are not identical on the 4 ranks at start and end"; return
    fi
    acc=$(num 's/^\[0\] epoch 1\/1 .* test accuracy \([0-9.]*\)% .*/\1/p')
    first=$(num 's/^\[0\] smoke ok: loss \([0-9.]*\) -> \([0-9.]*\) .*/\1/p')
    last=$(num 's/^\[0\] smoke ok: loss \([0-9.]*\) -> \([0-9.]*\) .*/\2/p')
    awk -v a="$acc" -v f="$first" -v l="$last" 'BEGIN { exit !(a != "" && a + 0 > 40 && f != "" && l + 0 < f + 0) }' ||
        WHY="test accuracy '$acc'% (want > 40), loss '$first' -> '$last' (want it to fall)"
}
check_parameter_server() {
    local a0 a1 t
    a0=$(num 's/^\[0\] ps: smoke check passed: accuracy rose from \([0-9.]*\)% to \([0-9.]*\)%$/\1/p')
    a1=$(num 's/^\[0\] ps: smoke check passed: accuracy rose from \([0-9.]*\)% to \([0-9.]*\)%$/\2/p')
    awk -v a="$a0" -v b="$a1" 'BEGIN { exit !(a != "" && b + 0 >= a + 20) }' || { WHY="accuracy '$a0'% -> '$a1'%: want 20 points more"; return; }
    for t in 1 2; do
        printf '%s\n' "$OUT" | grep -q "^\[$t\] trainer$t: smoke check passed: gradients reached ps on every step" ||
            { WHY="trainer$t did not pass its checks"; return; }
    done
}
check_rl_cartpole() {
    local a b
    a=$(num 's/^\[0\] agent: smoke check passed: the shortest episode grew from \([0-9.]*\) steps .* to \([0-9.]*\) (rounds .*/\1/p')
    b=$(num 's/^\[0\] agent: smoke check passed: the shortest episode grew from \([0-9.]*\) steps .* to \([0-9.]*\) (rounds .*/\2/p')
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b + 0 >= 2 * a) }' || { WHY="shortest episode '$a' -> '$b' steps: want twice as long"; return; }
    [ "$(printf '%s\n' "$OUT" | grep -c '^\[0\] agent: round  *[0-9]*  shortest episode')" = 4 ] || WHY="not 4 progress lines (rounds 10-40)"
}
check_default() { printf '%s\n' "$OUT" | grep -v '^[[:space:]]*$' | tail -1 | grep -q 'FAIL' && WHY="its last line says FAIL"; }

# The part of a run's output that does not depend on timing or platform
# (compared with Linux below).
same_part() {
    case $1 in
        dist_sgd)     grep -E '^\[0\] (start|end|epoch|smoke ok)' | sed -E 's/  [0-9.]+ s$//' ;;
        rpc_autograd) LC_ALL=C sort ;;
        *)            return 1 ;;
    esac
}

declare -A SMOKE_CMD WIN_OUT
for name in "${names[@]}"; do
    [ "$name" = demo ] && continue
    src=examples/$name.c
    lines=$(grep -E '^[[:space:]]*(/\*|//|\*)?[[:space:]]*SMOKE:' "$src" | sed -E 's/.*SMOKE:[[:space:]]*//; s/[[:space:]]*\*\/[[:space:]]*$//')
    if [ -z "$lines" ]; then fail "$name: no SMOKE: line in $src"; continue; fi
    is_built "$name" || continue
    grep -qE '^[[:space:]]*(/\*|//|\*)?[[:space:]]*SMOKE-LINUX:' "$src" &&
        echo "note: $name's SMOKE-LINUX: runs are left out here (its source says why)"
    nth=0
    while IFS= read -r line <&3; do    # every SMOKE: line; the first is checked by check_NAME, the others by their exit status
        nth=$((nth + 1))
        [ $nth = 1 ] && SMOKE_CMD[$name]=$line
        # distrun -> distrun.exe under Wine; {} -> the .exe; {data} -> BUILD_DIR/data (as Windows paths)
        read -r -a words <<< "$line"
        args=()
        for w in "${words[@]}"; do
            case $w in
                distrun) args+=("$out/distrun.exe") ;;
                '{}') args+=("$(winpath "$out/$name.exe")") ;;
                '{data}') args+=("$(winpath "$out/data")") ;;
                *) args+=("$w") ;;
            esac
        done
        [ "${words[0]}" = distrun ] || args=("$out/${args[0]}" "${args[@]:1}")
        wine_run "${args[@]}"
        WHY=""
        if [ "$RC" = 0 ]; then
            if [ $nth = 1 ] && declare -F "check_$name" >/dev/null; then "check_$name"; else check_default; fi
        fi
        if [ "$RC" = 0 ] && [ -z "$WHY" ]; then
            [ $nth = 1 ] && WIN_OUT[$name]=$OUT
            pass "$name (${SECS} s): $line -> $(printf '%s\n' "$OUT" | grep -v '^[[:space:]]*$' | tail -n 1)"
        else
            fail "$name ($(rc_text), ${SECS} s): $line${WHY:+: $WHY}" "$OUT"
        fi
    done 3<<< "$lines"
done

# ---- the default data directory ----------------------------------------------------
# dist_sgd without --data, started from a directory that holds build/data
# (as the repository root does after make): it finds it, on Windows paths.
if is_built dist_sgd; then
    mkdir -p "$T/root/build"
    ln -s "$out/data" "$T/root/build/data"
    cd "$T/root" && wine_run "$out/distrun.exe" -n 2 "$(winpath "$out/dist_sgd.exe")" --smoke
    cd - > /dev/null || exit 1
    WHY=""
    [ "$RC" = 0 ] && { printf '%s\n' "$OUT" | grep -q '^\[0\] data build/data: ' || WHY="it did not say 'data build/data'"; } &&
        [ -z "$WHY" ] && { printf '%s\n' "$OUT" | grep -q '^\[0\] smoke ok: ' || WHY="no 'smoke ok'"; }
    if [ "$RC" = 0 ] && [ -z "$WHY" ]; then
        pass "dist_sgd finds build/data from the current directory without --data (${SECS} s)"
    else
        fail "dist_sgd's default data directory ($(rc_text))${WHY:+: $WHY}" "$OUT"
    fi
fi

# ---- the same numbers as on Linux ------------------------------------------------
# The deterministic runs depend on their seeds alone; run the Linux build's
# smoke when it is there and up to date with its sources.
for name in dist_sgd rpc_autograd; do
    [ -n "${WIN_OUT[$name]:-}" ] || continue
    prog=$LINUX_BUILD/examples/$name
    stale=""
    if [ ! -x "$prog" ] || [ ! -x "$LINUX_BUILD/distrun" ]; then
        stale="no Linux build in $LINUX_BUILD"
    else
        for f in "examples/$name.c" $HEADERS; do [ "$f" -nt "$prog" ] && stale="$prog is older than $f"; done
    fi
    if [ -n "$stale" ]; then
        echo "note: not compared with Linux: $name ($stale; make build-tests)"
        continue
    fi
    cmd=${SMOKE_CMD[$name]//\{\}/$prog}
    cmd=${cmd//\{data\}/$LINUX_BUILD/data}
    cmd=${cmd/#distrun /$LINUX_BUILD/distrun }
    # shellcheck disable=SC2086
    lin=$(timeout -k 5 "$LIMIT" $cmd 2>&1 < /dev/null)
    a=$(printf '%s\n' "$lin" | same_part "$name")
    b=$(printf '%s\n' "${WIN_OUT[$name]}" | same_part "$name")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        pass "$name: the same numbers under Wine as on Linux ($(printf '%s\n' "$a" | wc -l) lines)"
    else
        fail "$name: the Windows run's numbers differ from Linux's" "$(diff <(printf '%s\n' "$a") <(printf '%s\n' "$b"))"
    fi
done

echo "examples_wine: $((CHECKS - FAILS)) of $CHECKS checks passed in $(since "$START") s"
[ "$FAILS" = 0 ] && exit 0
exit 1
