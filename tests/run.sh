#!/usr/bin/env bash
# tests/run.sh - run the test suite, one test at a time.
#
#   tests/run.sh [-b BUILD_DIR] [FILTER]
#
# Tests, in this order:
#   compile checks   every header that exists (dist.h, dist_rpc.h,
#                    dist_cuda.h) built alone with gcc, clang, g++, with
#                    DIST_STATIC and across several translation units
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
# The compile checks run first, as many at a time as there are CPUs.
# Each test runs under `timeout -k 5 LIMIT` (120 s unless its source has a
# line `// TIMEOUT: 300` or `# TIMEOUT: 300`), from the repository root,
# with stdin from /dev/null and its output in BUILD_DIR/logs/NAME.log.
# Exit status 0 is a pass, 77 a skip (its last output line says why),
# anything else a failure.
#
# Environment:
#   BUILD_DIR             as -b (default: build)
#   DIST_COMPILE_CHECKS   0 leaves the compile checks out
#   DIST_WINDOWS_TESTS    0 leaves the Windows programs out (they do not
#                         depend on this pass's build: sanitizers, portable)
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
add() { tests+=("$1$sep$2$sep$3"); }

if [ "$compile_checks" != 0 ]; then
    # Keep this list in step with tests/compile/check.sh.  (c11-gcc and
    # c11-clang are left out: multi-tu-gcc and multi-tu-clang compile the
    # same implementation file with the same flags, and more besides.)
    variants="c++11-g++ static-gcc static-clang multi-tu-gcc multi-tu-clang multi-tu-c++"
    for h in dist.h dist_rpc.h dist_cuda.h; do
        [ -f "$h" ] || continue
        more=""
        [ "$h" = dist.h ] || more="own-file-gcc own-file-clang"
        for v in $variants $more; do
            add "compile/$h/$v" "" "bash tests/compile/check.sh $h $v $build_dir/compile/$h/$v"
        done
    done
    add "compile/cmake-package" "" "bash tests/compile/cmake.sh $build_dir/compile/cmake"
    for t in aarch64-macos x86_64-macos; do
        add "compile/$t" "tests/compile/macos.sh" "bash tests/compile/macos.sh $t $build_dir/compile/$t"
    done
    add "compile/windows" "tests/compile/windows.sh" "bash tests/compile/windows.sh $build_dir/compile/windows"
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
                     add "$name[$t]" "$src" "env DIST_TRANSPORT=$t $build_dir/tests/$name"
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
for src in tests/windows/*.sh; do
    [ -f "$src" ] && [ "$windows_tests" != 0 ] || continue
    case $src in */wine_test.sh) continue ;; esac
    name=windows/$(basename "$src" .sh)
    add "$name" "$src" "bash $src $build_dir/windows"
done
for src in tests/test_*.c; do
    [ -f "$src" ] && [ "$windows_tests" != 0 ] || continue
    name=$(basename "$src" .c)
    add "windows/$name" "$src" "bash tests/windows/wine_test.sh $name $build_dir/windows/tests"
done
export WINEPREFIX=${WINEPREFIX:-$build_dir/wine} WINEDEBUG=${WINEDEBUG:--all}

# ---- run ------------------------------------------------------------------
passed=0 failed=0 skipped=0
current="" interrupted=0
trap 'interrupted=1; [ -n "$current" ] && kill -TERM "$current" 2>/dev/null' INT TERM

show_tail() { tail -n "${2:-15}" "$1" | sed 's/^/    | /'; }

# The compile checks are independent compilations: they run up front, as
# many at a time as there are CPUs, each under its limit; the loop below
# reports their results in order with the rest.
done_dir=$build_dir/logs/.done
rm -rf "$done_dir"; mkdir -p "$done_dir" || exit 2
ncpu=$(nproc 2>/dev/null || echo 2)
for entry in "${tests[@]+"${tests[@]}"}"; do
    IFS=$sep read -r name src cmd <<<"$entry"
    case $name in compile/*) ;; *) continue ;; esac
    case $name in *"$filter"*) ;; *) continue ;; esac
    while [ "$(jobs -rp | wc -l)" -ge "$ncpu" ]; do wait -n 2>/dev/null || break; done
    [ "$interrupted" = 0 ] || break
    log=$log_dir/$name.log
    mkdir -p "$(dirname "$log")"
    limit=$(limit_of "$src")
    (
        start=$(now)
        # shellcheck disable=SC2086
        timeout -k 5 "$limit" $wrapper $cmd </dev/null >"$log" 2>&1
        rc=$?
        echo "$rc $(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') $limit" >"$done_dir/${name//\//_}"
    ) &
done
wait

for entry in "${tests[@]+"${tests[@]}"}"; do
    IFS=$sep read -r name src cmd <<<"$entry"
    case $name in *"$filter"*) ;; *) continue ;; esac
    base=${name%%\[*}
    case " ${DIST_TEST_SKIP:-} " in *" $base "*)
        echo "SKIP $name: left out of this pass (DIST_TEST_SKIP)"
        skipped=$((skipped + 1))
        continue ;;
    esac

    log=$log_dir/$name.log
    mkdir -p "$(dirname "$log")"
    limit=$(limit_of "$src")

    if [[ $src == *.c && ! -x $build_dir/tests/$(basename "$src" .c) ]]; then
        echo "$cmd was not built: the compiler's message is in the output of make" >"$log"
        echo "FAIL $name (not built)"
        failed=$((failed + 1))
        continue
    fi

    if [ -f "$done_dir/${name//\//_}" ]; then         # a compile check, run above
        read -r rc secs limit <"$done_dir/${name//\//_}"
    else
    start=$(now)
    # timeout puts the test in its own process group and, at the limit,
    # signals the whole group (ranks a test forked included).
    # shellcheck disable=SC2086
    DIST_TEST_NAME=$name timeout -k 5 "$limit" $wrapper $cmd </dev/null >"$log" 2>&1 &
    current=$!
    wait "$current"; rc=$?
    if [ "$interrupted" = 1 ]; then
        wait "$current" 2>/dev/null
        echo "INTERRUPTED $name"
        failed=$((failed + 1))
        break
    fi
    # Whatever the test left running in its group goes now.
    if kill -0 -- "-$current" 2>/dev/null; then
        kill -KILL -- "-$current" 2>/dev/null
        echo "[run.sh] killed processes the test left behind" >>"$log"
    fi
    current=""
    secs=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    fi

    if [ "$rc" = 0 ]; then
        echo "PASS $name ($secs s)"
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
done

[ -z "$filter" ] || [ $((passed + failed + skipped)) -gt 0 ] ||
    echo "no test matches \"$filter\""
[ "$skipped" = 0 ] || echo "$skipped skipped (not counted as passed)"
echo "$passed passed, $failed failed"
[ "$interrupted" = 0 ] || exit 130
[ "$failed" = 0 ]
