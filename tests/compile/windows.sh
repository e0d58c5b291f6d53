#!/usr/bin/env bash
# tests/compile/windows.sh OUTDIR - build for 64-bit Windows, and check the
# MSVC branch of the atomics.
#
#   - tests/compile/impl.c for each header (dist.h, dist_rpc.h, dist_cuda.h),
#     alone and with DIST_STATIC, linked into a program with mingw-w64
#     (x86_64-w64-mingw32-gcc, C11, warnings as errors, -Wpedantic, -Wvla:
#     MSVC has no VLAs); each
#     output is checked to be a PE32+ x86-64 executable.  (The programs
#     run under Wine in tests/windows/*.sh.)
#   - MSVC's atomics (plain loads and stores, _ReadWriteBarrier,
#     Interlocked*, picked by _Generic), which no compiler here takes: gcc
#     and clang build them with stand-ins for the intrinsics
#     (tests/compile/msc_atomics.h, -DDIST__MSC_ATOMICS), so every atomic
#     the headers use must have a _Generic case, and examples/demo.c built
#     so runs its four ranks over shared memory.
# Exit 0 pass, 77 skip (no mingw-w64: `make deps` installs it), else fail.
# TIMEOUT: 300
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/../.."
mkdir -p "$1"
out=$(cd "$1" && pwd)

mingw=${DIST_CHECK_MINGW:-x86_64-w64-mingw32-gcc}
if ! command -v "$mingw" >/dev/null 2>&1; then
    echo "mingw-w64 is not installed (make deps installs gcc-mingw-w64-x86-64)"
    exit 77
fi

fails=0
report() {   # name, status, log
    if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1:"; sed 's/^/    /' "$3" | head -30; fails=$((fails + 1)); fi
}
win() {      # name, then the compiler's arguments
    local name=$1 st=0
    shift
    "$mingw" -std=c11 -O1 -Wall -Wextra -Wpedantic -Wvla -Werror -I. -isystem /usr/local/cuda/include "$@" \
        -o "$out/$name.exe" -lws2_32 >"$out/$name.log" 2>&1 || st=$?
    if [ $st = 0 ] && ! file "$out/$name.exe" | grep -q "PE32+ executable.*x86-64"; then
        echo "not a PE32+ x86-64 executable: $(file -b "$out/$name.exe")" >>"$out/$name.log"; st=1
    fi
    report "windows: $name" $st "$out/$name.log"
}

win impl-dist tests/compile/impl.c
win impl-dist-static -DDIST_STATIC tests/compile/impl.c
win impl-dist_rpc -DDIST_CHECK_HEADER='"dist_rpc.h"' -DDIST_RPC_IMPLEMENTATION tests/compile/impl.c
[ ! -f dist_cuda.h ] || win impl-dist_cuda -DDIST_CHECK_HEADER='"dist_cuda.h"' -DDIST_CUDA_IMPLEMENTATION tests/compile/impl.c

msc=(-include tests/compile/msc_atomics.h -DDIST__MSC_ATOMICS -std=c11 -O1 -Wall -Wextra -Werror -I. -isystem /usr/local/cuda/include)
for cc in gcc clang; do
    command -v $cc >/dev/null 2>&1 || continue
    for h in dist_rpc dist_cuda; do
        [ -f $h.h ] || continue
        st=0
        $cc "${msc[@]}" -DDIST_CHECK_HEADER="\"$h.h\"" -D"$(echo $h | tr a-z A-Z)"_IMPLEMENTATION tests/compile/impl.c \
            -o "$out/msc-$h-$cc" -pthread -ldl -lm >"$out/msc-$h-$cc.log" 2>&1 || st=$?
        [ $st != 0 ] || "$out/msc-$h-$cc" >>"$out/msc-$h-$cc.log" 2>&1 || st=$?
        report "MSVC atomics with $cc's stand-ins: $h.h builds and answers" $st "$out/msc-$h-$cc.log"
    done
done
st=0
gcc "${msc[@]}" examples/demo.c -o "$out/msc-demo" -pthread >"$out/msc-demo.log" 2>&1 || st=$?
if [ $st = 0 ]; then
    timeout -k 5 60 "$out/msc-demo" >>"$out/msc-demo.log" 2>&1 || st=$?
    [ $st != 0 ] || grep -q "^all 4 ranks finished" "$out/msc-demo.log" || st=1
fi
report "MSVC atomics with gcc's stand-ins: examples/demo.c runs its 4 ranks" $st "$out/msc-demo.log"

[ "$fails" = 0 ] || { echo "$fails of the Windows checks failed"; exit 1; }
echo "every Windows build links, and the MSVC atomics build and run"
