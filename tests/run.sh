#!/usr/bin/env bash
# tests/run.sh - run the test suite, as many tests at a time as there are CPUs.
#
#   tests/run.sh [-b BUILD_DIR] [FILTER]
#
# Tests, in this order:
#   compile checks   every header that exists (dist.h, dist_rpc.h,
#                    dist_cuda.h) built alone with gcc, clang, g++, with
#                    DIST_STATIC, across several translation units, and
#                    after a system header (one #error on glibc)
#                    (tests/compile/check.sh); then the CMake package
#                    (tests/compile/cmake.sh); then every header, example
#                    and the launcher cross-compiled and linked for macOS,
#                    arm64 and x86_64 (tests/compile/macos.sh, with zig cc);
#                    and built for Windows with mingw-w64, and MSVC's
#                    atomics with stand-ins (tests/compile/windows.sh).
#                    Off with DIST_COMPILE_CHECKS=0.
#   programs         tests/test_NAME.c, built by make as BUILD_DIR/tests/test_NAME
#                    (a source whose program is missing counts as a failure)
#   scripts          tests/test_NAME.sh, run with bash
#   Windows          tests/windows/NAME.sh BUILD_DIR/windows, as windows/NAME:
#                    programs built with mingw-w64 and run under Wine
#                    (WINEPREFIX: BUILD_DIR/wine unless set)
# FILTER keeps the tests whose name contains it.
#
# Tests run several at a time, the longest first, as many as their CPU
# shares allow (see "What each test cost" below: tests/times/PASS.tsv);
# a test whose source has a line `// ALONE: why` (or `# ALONE: why`)
# runs after the others, with nothing beside it (time bounds, memory peaks,
# system-wide views that another test would disturb).  A result is printed
# when its test ends, with its wall time and the CPU time of the test and
# everything it waited for.
# Each test runs under `timeout -k 5 LIMIT` (120 s unless its source has a
# line `// TIMEOUT: 300` or `# TIMEOUT: 300`), from the repository root,
# with stdin from /dev/null and its output in BUILD_DIR/logs/NAME.log.
# Exit status 0 is a pass, 77 a skip (its last output line says why),
# anything else a failure.
#
# Environment:
#   BUILD_DIR             as -b (default: build)
#   DIST_TEST_SET         full (default): every test on every transport it
#                         declares, every compile check, every Windows
#                         test; quick (`make test`): each test on its first
#                         transport, one compiler of each pair in the
#                         compile checks and one macOS target, and of the
#                         Windows tests those in DIST_TEST_WINDOWS_QUICK
#                         (default: test_collectives); rest (`make
#                         check-rest`): the full set but the quick one.
#                         `make check` is quick, then rest: nothing twice.
#                         The tests see DIST_TEST_SET: in the quick set
#                         test_collectives runs its 1M+3 subset as float32
#                         sum only (every dtype and op at 1M+3 runs on TCP
#                         in the rest) and test_flood half its calls (the
#                         long flood is the rest's, on TCP)
#   DIST_COMPILE_CHECKS   0 leaves the compile checks out
#   DIST_WINDOWS_TESTS    0 leaves the Windows programs out (they do not
#                         depend on this pass's build: sanitizers, portable)
#   DIST_TEST_JOBS        tests at a time at most (default: three per CPU;
#                         1 runs them one by one, ALONE or not)
#   DIST_TEST_CPUS        the cores the running tests' CPU shares may add up
#                         to (default: the number of CPUs)
#   DIST_TEST_TIMES       the table of expected times (default
#                         tests/times/BUILD_DIR's name.tsv, else build.tsv)
#   DIST_TEST_TIMEOUT     default limit in seconds (120)
#   DIST_TIMEOUT_SCALE    multiplies every limit (sanitizer passes)
#   DIST_TEST_WRAPPER     command put in front of each test (e.g. setarch)
#   DIST_TEST_SKIP        names of tests this pass leaves out (reported as
#                         skipped, never as passed)
#   DIST_TEST_TRANSPORTS  the transports of the tests that declare them
#                         (default: every one they declare; a test that
#                         declares none of these runs on its first)
#   DIST_TEST_TRANSPORTS_OF  the same for named tests, overriding it:
#                         "test_flood=auto,tcp test_collectives=auto"
#
# A source with a line `// TRANSPORTS: auto tcp mixed` runs once per
# transport, as NAME[TRANSPORT], with DIST_TRANSPORT set to it: auto (same-
# host ranks over shared memory), tcp, mixed (odd ranks TCP only).
# Tests see BUILD_DIR, DISTRUN (the launcher's path) and DIST_TEST_NAME,
# all absolute.
#
# The last line printed is always "N passed, N failed" (skips, which are
# neither, are counted on the line before); the exit status is 0 exactly
# when nothing failed.

set -u

usage() { echo "usage: $0 [-b BUILD_DIR] [FILTER]" >&2; exit 2; }

build_dir=${BUILD_DIR:-build}
while getopts "b:h" opt; do
    case $opt in
        b) build_dir=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -le 1 ] || usage
filter=${1:-}

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
mkdir -p "$build_dir" || exit 2
build_dir=$(cd "$build_dir" && pwd)
log_dir=$build_dir/logs
mkdir -p "$log_dir" || exit 2

default_limit=${DIST_TEST_TIMEOUT:-120}
scale=${DIST_TIMEOUT_SCALE:-1}
wrapper=${DIST_TEST_WRAPPER:-}
compile_checks=${DIST_COMPILE_CHECKS:-1}
test_set=${DIST_TEST_SET:-full}
windows_tests=${DIST_WINDOWS_TESTS:-1}

export BUILD_DIR=$build_dir
export DISTRUN=$build_dir/distrun

now() { if [ -n "${EPOCHREALTIME:-}" ]; then echo "${EPOCHREALTIME/,/.}"; else date +%s.%N; fi; }

# The limit a source file declares, or the default; then scaled.
limit_of() {
    local src=$1 n=""
    if [ -n "$src" ] && [ -f "$src" ]; then
        n=$(grep -m1 -E '^[[:space:]]*(//|#|/\*)[[:space:]]*TIMEOUT:[[:space:]]*[0-9]+' "$src" \
            | sed -E 's/.*TIMEOUT:[[:space:]]*([0-9]+).*/\1/')
    fi
    awk -v n="${n:-$default_limit}" -v s="$scale" \
        'BEGIN { v = n * s; printf "%d\n", (v == int(v)) ? v : int(v) + 1 }'
}

# ---- collect the tests: name, source (may be empty), command ------------
sep=$'\x1f'
tests=()
# add NAME SRC CMD [QUICK]: QUICK 0 when the test is not in the quick set
# (DIST_TEST_SET below picks the entries).
add() { tests+=("$1$sep$2$sep$3$sep${4:-1}"); }
in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }

if [ "$compile_checks" != 0 ]; then
    # Keep this list in step with tests/compile/check.sh.  (c11-gcc and
    # c11-clang are left out: multi-tu-gcc and multi-tu-clang compile the
    # same implementation file with the same flags, and more besides.)
    # The quick set keeps one compiler of each pair (both compilers still
    # build every header: gcc as C++, with DIST_STATIC, after a system
    # header and in its own file; clang across translation units).
    variants="c++11-g++ static-gcc static-clang multi-tu-gcc multi-tu-clang multi-tu-c++ sys-first-gcc sys-first-clang"
    # (dist.h's c++11-g++ and multi-tu-clang are the rest's: dist_rpc.h's
    # and dist_cuda.h's, in the quick set, compile dist.h's implementation
    # with the same flags.)
    quick_variants="c++11-g++ static-gcc multi-tu-clang sys-first-gcc own-file-gcc"
    for h in dist.h dist_rpc.h dist_cuda.h; do
        [ -f "$h" ] || continue
        more=""
        [ "$h" = dist.h ] || more="own-file-gcc own-file-clang"
        for v in $variants $more; do
            q=0
            in_list "$v" "$quick_variants" && q=1
            [ "$h" = dist.h ] && { [ "$v" = c++11-g++ ] || [ "$v" = multi-tu-clang ]; } && q=0
            add "compile/$h/$v" "" "bash tests/compile/check.sh $h $v $build_dir/compile/$h/$v" "$q"
        done
    done
    add "compile/cmake-package" "" "bash tests/compile/cmake.sh $build_dir/compile/cmake"
    # The quick set builds for macOS and Windows what holds every header's
    # implementation (the scripts' part quick); the rest the others.
    add "compile/aarch64-macos" "tests/compile/macos.sh" "bash tests/compile/macos.sh aarch64-macos $build_dir/compile/aarch64-macos quick"
    add "compile/aarch64-macos/rest" "tests/compile/macos.sh" "bash tests/compile/macos.sh aarch64-macos $build_dir/compile/aarch64-macos rest" 0
    add "compile/x86_64-macos" "tests/compile/macos.sh" "bash tests/compile/macos.sh x86_64-macos $build_dir/compile/x86_64-macos" 0
    add "compile/windows" "tests/compile/windows.sh" "bash tests/compile/windows.sh $build_dir/compile/windows quick"
    add "compile/windows/rest" "tests/compile/windows.sh" "bash tests/compile/windows.sh $build_dir/compile/windows rest" 0
fi
for src in tests/test_*.c tests/test_*.sh; do
    [ -f "$src" ] || continue
    case $src in
        *.c) name=$(basename "$src" .c)
             declared=$(grep -m1 -E '^[[:space:]]*//[[:space:]]*TRANSPORTS:' "$src" | sed -E 's/.*TRANSPORTS:[[:space:]]*//')
             if [ -z "$declared" ]; then
                 add "$name" "$src" "$build_dir/tests/$name"
             else
                 picked=0 wanted=${DIST_TEST_TRANSPORTS:-$declared}
                 for o in ${DIST_TEST_TRANSPORTS_OF:-}; do
                     [ "${o%%=*}" = "$name" ] && wanted=${o#*=} && wanted=${wanted//,/ }
                 done
                 for t in $declared; do
                     case " $wanted " in *" $t "*) ;; *) continue ;; esac
                     add "$name[$t]" "$src" "env DIST_TRANSPORT=$t $build_dir/tests/$name" "$([ "$t" = "${declared%% *}" ] && echo 1 || echo 0)"
                     picked=1
                 done
                 # none of its transports asked for: it still runs, on its first
                 if [ $picked = 0 ]; then
                     t=${declared%% *}
                     add "$name[$t]" "$src" "env DIST_TRANSPORT=$t $build_dir/tests/$name"
                 fi
             fi ;;
        *.sh) name=$(basename "$src"); add "$name" "$src" "bash $src" ;;
    esac
done
# Windows: programs built with mingw-w64 and run under Wine (one Wine
# prefix per build directory: its first start takes ~20 s): the scripts in
# tests/windows, then each test program (tests/windows/wine_test.sh: those
# whose source does not say "// WINDOWS: yes" are skips that say why)
# (The quick set runs those named in DIST_TEST_WINDOWS_QUICK alone.)
windows_quick=${DIST_TEST_WINDOWS_QUICK:-test_collectives}
for src in tests/windows/*.sh; do
    [ -f "$src" ] && [ "$windows_tests" != 0 ] || continue
    case $src in */wine_test.sh) continue ;; esac
    name=windows/$(basename "$src" .sh)
    add "$name" "$src" "bash $src $build_dir/windows" "$(in_list "${name#windows/}" "$windows_quick" && echo 1 || echo 0)"
done
for src in tests/test_*.c; do
    [ -f "$src" ] && [ "$windows_tests" != 0 ] || continue
    name=$(basename "$src" .c)
    add "windows/$name" "$src" "bash tests/windows/wine_test.sh $name $build_dir/windows/tests" "$(in_list "$name" "$windows_quick" && echo 1 || echo 0)"
done
export WINEPREFIX=${WINEPREFIX:-$build_dir/wine} WINEDEBUG=${WINEDEBUG:--all}

# ---- run ------------------------------------------------------------------
passed=0 failed=0 skipped=0 interrupted=0
ncpu=$(nproc 2>/dev/null || echo 2)
max_jobs=${DIST_TEST_JOBS:-$((3 * ncpu))}
[ "$max_jobs" -ge 1 ] 2>/dev/null || max_jobs=1
cpu_budget=${DIST_TEST_CPUS:-$ncpu}

# What each test cost when last measured on this kind of machine (a
# times.tsv as this runner writes it, committed as tests/times/PASS.tsv,
# PASS the build directory's name: build, asan, tsan, portable; or
# DIST_TEST_TIMES): its wall time orders the tests, longest first, so the
# long ones do not end the pass alone; its CPU share (CPU / wall) says how
# much of a core it keeps busy.  Tests start while the shares of those
# running fit in the CPUs (DIST_TEST_CPUS, default the number of cores), up
# to DIST_TEST_JOBS at a time (default three per core): tests that mostly
# wait (sleeps, timeouts, a peer's silence) run several to a core, tests
# that compute one.  A test not in the table counts as 60 s at one core.
declare -A exp_wall=() exp_share=()
times_file=${DIST_TEST_TIMES:-tests/times/$(basename "$build_dir").tsv}
[ -f "$times_file" ] || times_file=tests/times/build.tsv
if [ -f "$times_file" ]; then
    while IFS=$'\t' read -r t _ w c _; do
        [ "$t" = test ] && continue
        exp_wall[$t]=$w
        # (Wine runs a Windows program in processes that are not the
        # test's children, so their CPU is not in the table: a Windows
        # test counts as half a core at least.)
        exp_share[$t]=$(awk -v w="$w" -v c="$c" -v n="$cpu_budget" -v win="${t%%/*}" 'BEGIN { s = (w > 0) ? c / w : 1;
            if (s < 0.1) s = 0.1; if (win == "windows" && s < 0.5) s = 0.5; if (s > n) s = n; printf "%.2f", s }')
    done <"$times_file"
fi
state=$log_dir/.run
rm -rf "$state" "$log_dir/.done"; mkdir -p "$state" || exit 2

# show_tail LOG: the log's FAIL lines (a test of many cases reports a
# failed one long before its last lines), then its last lines.
show_tail() {
    local fails
    fails=$(head -n -"${2:-15}" "$1" 2>/dev/null | grep -n -A3 -E '^ *(FAIL|TIMEOUT)' | head -n 40)
    [ -n "$fails" ] && printf '%s\n...\n' "$fails" | sed 's/^/    | /'
    tail -n "${2:-15}" "$1" | sed 's/^/    | /'
}

# "1m2.500s" -> 62.5
to_secs() { awk -v t="$1" 'BEGIN { split(t, a, "m"); sub("s", "", a[2]); printf "%.1f", a[1] * 60 + a[2] }'; }

# start_test KEY NAME LIMIT CMD: the test in the background.  timeout puts
# it in a process group of its own and, at the limit, signals the whole
# group (ranks the test forked included); whatever the test leaves running
# in its group goes when it ends.  KEY.done gets "rc seconds cpu-seconds"
# (the CPU time of the test and everything it waited for).
start_test() {
    local key=$1 name=$2 limit=$3 cmd=$4 log=$log_dir/$2.log
    mkdir -p "$(dirname "$log")"
    (
        t0=$(now)
        # shellcheck disable=SC2086
        DIST_TEST_NAME=$name timeout -k 5 "$limit" $wrapper $cmd </dev/null >"$log" 2>&1 &
        pid=$!
        echo "$pid" >"$state/$key.pid"
        wait "$pid"; rc=$?
        if kill -0 -- "-$pid" 2>/dev/null; then
            kill -KILL -- "-$pid" 2>/dev/null
            echo "[run.sh] killed processes the test left behind" >>"$log"
        fi
        secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
        times >"$state/$key.times"        # (not in a pipe: a child has no children)
        # shellcheck disable=SC2046
        set -- $(tail -n 1 "$state/$key.times")
        cpu=$(awk -v u="$(to_secs "$1")" -v s="$(to_secs "$2")" 'BEGIN { printf "%.1f", u + s }')
        echo "$rc $secs $cpu" >"$state/$key.tmp" && mv "$state/$key.tmp" "$state/$key.done"
    ) &
}

# Each test's times, a line as it ends, to BUILD_DIR/logs/times.tsv: name,
# result, wall seconds, CPU seconds, and whether it mostly waited (CPU
# under half its wall time: sleeps, timeouts, peers) or mostly computed.
# tests/times.sh turns one or more of these into the table in
# tests/TIMES.md.
times_tsv=$log_dir/times.tsv
printf 'test\tresult\twall_s\tcpu_s\tkind\n' >"$times_tsv"
record_times() {   # NAME RESULT SECS CPU
    local kind
    kind=$(awk -v w="$3" -v c="$4" 'BEGIN { print (c < 0.5 * w) ? "waits" : "computes" }')
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$kind" >>"$times_tsv"
}

report() {   # NAME LIMIT RC SECS CPU
    local name=$1 limit=$2 rc=$3 secs=$4 cpu=$5 log=$log_dir/$1.log why reason
    record_times "$name" "$(case $rc in 0) echo pass ;; 77) echo skip ;; *) echo fail ;; esac)" "$secs" "$cpu"
    if [ "$rc" = 0 ]; then
        echo "PASS $name ($secs s, CPU $cpu s)"
        passed=$((passed + 1))
    elif [ "$rc" = 77 ]; then
        reason=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
        echo "SKIP $name: ${reason:-(no reason given)}"
        skipped=$((skipped + 1))
    elif { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } &&
         awk -v t="$secs" -v l="$limit" 'BEGIN { exit !(t >= l - 0.5) }'; then
        echo "TIMEOUT $name (limit $limit s) -- last lines of $log:"
        show_tail "$log"
        failed=$((failed + 1))
    else
        why="exit $rc"
        if [ "$rc" -gt 128 ] && sig=$(kill -l $((rc - 128)) 2>/dev/null); then
            why="exit $rc, SIG$sig"
        fi
        echo "FAIL $name ($why, $secs s) -- last lines of $log:"
        show_tail "$log"
        failed=$((failed + 1))
    fi
}

declare -A running=()        # key -> name<sep>limit<sep>share
collect() {                  # reports the tests that ended
    local key name limit rc secs cpu
    for key in "${!running[@]}"; do
        [ -f "$state/$key.done" ] || continue
        read -r rc secs cpu <"$state/$key.done"
        IFS=$sep read -r name limit share <<<"${running[$key]}"
        unset 'running[$key]'
        load=$(awk -v l="$load" -v s="$share" 'BEGIN { l -= s; printf "%.2f", (l < 0.005) ? 0 : l }')
        if [ "$interrupted" = 1 ]; then
            echo "INTERRUPTED $name"
            failed=$((failed + 1))
        else
            report "$name" "$limit" "$rc" "$secs" "$cpu"
        fi
    done
}
load=0                       # the CPU shares of the tests running
wait_one() {                 # until a test ends
    local before=${#running[@]}
    while [ "${#running[@]}" -ge "$before" ] && [ "$before" -gt 0 ]; do
        wait -n 2>/dev/null
        [ $? != 127 ] || sleep 0.1
        collect
    done
}
wait_below() {               # until fewer than $1 tests run
    while [ "${#running[@]}" -ge "$1" ]; do wait_one; done
}
fits() {                     # SHARE: may a test of that share start now?
    [ "${#running[@]}" -eq 0 ] && return 0
    [ "${#running[@]}" -lt "$max_jobs" ] &&
        awk -v l="$load" -v s="$1" -v n="$cpu_budget" 'BEGIN { exit !(l + s <= n + 0.05) }'
}
stop_all() {
    interrupted=1
    local f
    for f in "$state"/*.pid; do
        [ -f "$f" ] && [ ! -f "${f%.pid}.done" ] && kill -TERM "$(cat "$f")" 2>/dev/null
    done
}
trap stop_all INT TERM

shared=() alone=()
for entry in "${tests[@]+"${tests[@]}"}"; do
    IFS=$sep read -r name src cmd quick <<<"$entry"
    case $test_set:$quick in quick:0|rest:1) continue ;; esac
    entry=$name$sep$src$sep$cmd
    case $name in *"$filter"*) ;; *) continue ;; esac
    base=${name%%\[*}
    case " ${DIST_TEST_SKIP:-} " in *" $base "*)
        echo "SKIP $name: left out of this pass (DIST_TEST_SKIP)"
        skipped=$((skipped + 1))
        continue ;;
    esac
    if [[ $src == *.c && $name != windows/* && ! -x $build_dir/tests/$(basename "$src" .c) ]]; then
        log=$log_dir/$name.log
        mkdir -p "$(dirname "$log")"
        echo "$cmd was not built: the compiler's message is in the output of make" >"$log"
        echo "FAIL $name (not built)"
        failed=$((failed + 1))
        continue
    fi
    if [ -n "$src" ] && [ "$max_jobs" -gt 1 ] &&
       grep -qE '^[[:space:]]*(//|#)[[:space:]]*ALONE:' "$src" 2>/dev/null; then
        alone+=("$entry")
    else
        shared+=("$entry")
    fi
done

# Wine's server and the services it starts outlive the program that
# started them, holding on to its stdout: a test that happened to start
# them would not end (for the runner) until every Wine program of the
# prefix had.  So the prefix is made and its server started here, with no
# test's output, and kept until the end.
wine_started=0
case " ${shared[*]+"${shared[*]}"} ${alone[*]+"${alone[*]}"}" in *" windows/"*)
    if command -v wineserver >/dev/null 2>&1 && { command -v wine || command -v wine64; } >/dev/null 2>&1; then
        mkdir -p "$WINEPREFIX"
        wineserver -p </dev/null >/dev/null 2>&1 && wine_started=1
        "$(command -v wine || command -v wine64)" wineboot -u </dev/null >/dev/null 2>&1
    fi ;;
esac

# The shared tests, longest first (by the table; the unknown count as 60 s).
order_shared() {
    local entry name
    for entry in "${shared[@]+"${shared[@]}"}"; do
        IFS=$sep read -r name _ <<<"$entry"
        printf '%s\t%s\n' "${exp_wall[$name]:-60}" "$entry"
    done | sort -t$'\t' -k1,1 -rn -s | cut -f2-
}
launch() {                   # ENTRY SHARE
    local name src cmd limit key
    IFS=$sep read -r name src cmd <<<"$1"
    limit=$(limit_of "$src")
    key=${name//[\/\[\]]/_}
    running[$key]="$name$sep$limit$sep$2"
    load=$(awk -v l="$load" -v s="$2" 'BEGIN { printf "%.2f", l + s }')
    start_test "$key" "$name" "$limit" "$cmd"
}
queue=()
while IFS= read -r entry; do queue+=("$entry"); done < <(order_shared)
# Start the longest test that fits; when none does, wait for one to end.
while [ "${#queue[@]}" -gt 0 ] && [ "$interrupted" = 0 ]; do
    started=0
    for i in "${!queue[@]}"; do
        IFS=$sep read -r name _ <<<"${queue[$i]}"
        share=${exp_share[$name]:-1}
        if fits "$share"; then
            launch "${queue[$i]}" "$share"
            unset 'queue[i]'; queue=("${queue[@]+"${queue[@]}"}")
            started=1
            break
        fi
    done
    [ $started = 1 ] || wait_one
done
# Then the ALONE tests, one by one with nothing beside them.
for entry in "${alone[@]+"${alone[@]}"}"; do
    wait_below 1
    [ "$interrupted" = 0 ] || break
    launch "$entry" 1
done
wait_below 1
[ "$wine_started" = 0 ] || wineserver -k >/dev/null 2>&1

[ -z "$filter" ] || [ $((passed + failed + skipped)) -gt 0 ] ||
    echo "no test matches \"$filter\""
[ "$skipped" = 0 ] || echo "$skipped skipped (not counted as passed)"
echo "$passed passed, $failed failed"
[ "$interrupted" = 0 ] || exit 130
[ "$failed" = 0 ]
