#!/usr/bin/env bash
# tests/windows/wine_test.sh NAME OUTDIR - one test of the suite on Windows:
# tests/NAME.c built with mingw-w64 (static, so Wine needs no DLL of ours)
# into OUTDIR/NAME.exe and run under Wine, its output and exit status
# passed on.  A test of the public API alone links the library's one
# Windows build, OUTDIR/lib (see below), as on Linux.
#
# A test that builds and passes there says so in its source with a line
#     // WINDOWS: yes
# and one that does not, why:
#     // WINDOWS: no, it takes network namespaces (Linux's)
# (a test with neither has not been ported: it forks its ranks, and Windows
# cannot fork).  Those exit 77 with the reason, which tests/run.sh reports
# as a skip.  tests/run.sh runs this as windows/NAME for every tests/test_*.c.
# Exit 77 also when mingw-w64 or Wine is missing.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 NAME OUTDIR" >&2; exit 2; }
name=$1 out=$2
cd "$(dirname "$0")/../.."
src=tests/$name.c
[ -f "$src" ] || { echo "no $src"; exit 2; }

mark=$(grep -m1 -E '^[[:space:]]*//[[:space:]]*WINDOWS:' "$src" | sed -E 's/.*WINDOWS:[[:space:]]*//')
case $mark in
    yes*) ;;
    no*) echo "left out on Windows: ${mark#no}" | sed 's/: ,[[:space:]]*/: /'; exit 77 ;;
    *) echo "left out on Windows: not ported yet (no \"// WINDOWS:\" line in its source)"; exit 77 ;;
esac
mingw=x86_64-w64-mingw32-gcc
command -v $mingw >/dev/null 2>&1 || { echo "mingw-w64 is not installed (make deps installs it)"; exit 77; }
wine=$(command -v wine || command -v wine64) || { echo "Wine is not installed (make deps installs it)"; exit 77; }
export WINEPREFIX=${WINEPREFIX:-$out/../wine} WINEDEBUG=${WINEDEBUG:--all}

mkdir -p "$out"
exe=$out/$name.exe
cflags="-std=c11 -O2 -Wall -Wextra -Werror -I. -Itests/compat/windows -isystem /usr/local/cuda/include"
# The tests of the public API alone (their source guards DIST_IMPLEMENTATION
# with DIST_TEST_LINKED) link one Windows build of the library,
# OUTDIR/lib/libdist_test.a, as on Linux (Makefile): the first such test
# builds it, under a lock, the others wait for it (10 s once instead of 7 s
# a test, 23 tests).
defs=() libs=() lib=$out/lib/libdist_test.a
if grep -q '^#ifndef DIST_TEST_LINKED' "$src"; then
    mkdir -p "$out/lib"
    exec 9>"$out/lib/.lock"
    flock 9
    if [ ! -f "$lib" ] || [ -n "$(find dist.h dist_rpc.h tests/impl_dist.c tests/impl_rpc.c tests/compat/windows -newer "$lib" 2>/dev/null | head -1)" ]; then
        tmp=$out/lib/tmp.$$
        mkdir -p "$tmp"
        if ! { $mingw $cflags -c tests/impl_dist.c -o "$tmp/impl_dist.o" && $mingw $cflags -c tests/impl_rpc.c -o "$tmp/impl_rpc.o" &&
               x86_64-w64-mingw32-ar rcs "$tmp/lib.a" "$tmp/impl_dist.o" "$tmp/impl_rpc.o"; } > "$out/lib/build.log" 2>&1; then
            echo "FAIL the library does not build for Windows:"
            sed 's/^/    /' "$out/lib/build.log" | head -40
            rm -rf "$tmp"
            exit 1
        fi
        mv "$tmp/lib.a" "$lib" && rm -rf "$tmp"
    fi
    exec 9>&-
    defs=(-DDIST_TEST_LINKED) libs=("$lib")
fi
if [ ! -f "$exe" ] || [ -n "$(find "$src" dist.h dist_rpc.h tests/testutil.h tests/compat/windows "${libs[@]}" -newer "$exe" 2>/dev/null | head -1)" ]; then
    if ! $mingw $cflags "${defs[@]}" "$src" "${libs[@]}" -o "$exe" -static -lws2_32 -lpthread -lm > "$out/$name.build.log" 2>&1; then
        echo "FAIL $name does not build for Windows:"
        sed 's/^/    /' "$out/$name.build.log" | head -40
        exit 1
    fi
fi
# (the runner's time limit covers this; ranks and all go with its group)
"$wine" "$exe" < /dev/null 2>&1 | tr -d '\r'
exit "${PIPESTATUS[0]}"
