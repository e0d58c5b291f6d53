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
#     so runs its four ranks over shared memory.  The same as C++17
#     (tests/compile/cpp.cpp, g++ -Wpedantic -Wvla: C++ has no _Generic,
#     and -Wpedantic refuses what MSVC's C++ refuses before C++20:
#     designated initialisers, compound literals, statement expressions,
#     zero-length arrays), every header built and run.
#   - MSVC's view of the headers: each header's implementation, in C and
#     in C++, preprocessed as MSVC would (no __GNUC__ nor __clang__;
#     _MSC_VER, _WIN32, _WIN64, _M_X64; system headers empty), holds none
#     of gcc's extensions (__attribute__, __typeof__, __builtin_*,
#     __atomic_*, __sync_*, statement expressions, __extension__, asm,
#     __thread).  MSVC itself cannot run here: this and the C++ build
#     stand in for it.
# PART (second argument, default all): quick builds what the quick set
# needs, rest the others, all both: quick links dist_rpc.h's and
# dist_cuda.h's implementations (each holds dist.h's) with mingw-w64, builds
# and runs the MSVC atomics with gcc's stand-ins (dist_rpc.h, and the demo's
# four ranks), in C++17 dist_rpc.h and dist_cuda.h, and MSVC's view of
# every header; rest the rest: dist.h alone and with DIST_STATIC under
# mingw-w64, the stand-ins with clang and for dist_cuda.h with gcc, dist.h
# alone in C++17.
# Exit 0 pass, 77 skip (no mingw-w64: `make deps` installs it), else fail.
# TIMEOUT: 600
set -euo pipefail

[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: $0 OUTDIR [quick|rest|all]" >&2; exit 2; }
part=${2:-all}
case $part in quick|rest|all) ;; *) echo "unknown part $part" >&2; exit 2 ;; esac
in_part() { [ "$part" = all ] || [ "$part" = "$1" ]; }
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

! in_part rest || win impl-dist tests/compile/impl.c
! in_part rest || win impl-dist-static -DDIST_STATIC tests/compile/impl.c
! in_part quick || win impl-dist_rpc -DDIST_CHECK_HEADER='"dist_rpc.h"' -DDIST_RPC_IMPLEMENTATION tests/compile/impl.c
[ ! -f dist_cuda.h ] || ! in_part quick || win impl-dist_cuda -DDIST_CHECK_HEADER='"dist_cuda.h"' -DDIST_CUDA_IMPLEMENTATION tests/compile/impl.c

msc=(-include tests/compile/msc_atomics.h -DDIST__MSC_ATOMICS -std=c11 -O1 -Wall -Wextra -Werror -I. -isystem /usr/local/cuda/include)
for cc in gcc clang; do
    command -v $cc >/dev/null 2>&1 || continue
    for h in dist_rpc dist_cuda; do
        [ -f $h.h ] || continue
        if [ $cc = gcc ] && [ $h = dist_rpc ]; then in_part quick || continue; else in_part rest || continue; fi
        st=0
        $cc "${msc[@]}" -DDIST_CHECK_HEADER="\"$h.h\"" -D"$(echo $h | tr a-z A-Z)"_IMPLEMENTATION tests/compile/impl.c \
            -o "$out/msc-$h-$cc" -pthread -ldl -lm >"$out/msc-$h-$cc.log" 2>&1 || st=$?
        [ $st != 0 ] || "$out/msc-$h-$cc" >>"$out/msc-$h-$cc.log" 2>&1 || st=$?
        report "MSVC atomics with $cc's stand-ins: $h.h builds and answers" $st "$out/msc-$h-$cc.log"
    done
done
if in_part quick; then
    st=0
    gcc "${msc[@]}" examples/demo.c -o "$out/msc-demo" -pthread >"$out/msc-demo.log" 2>&1 || st=$?
    if [ $st = 0 ]; then
        timeout -k 5 60 "$out/msc-demo" >>"$out/msc-demo.log" 2>&1 || st=$?
        [ $st != 0 ] || grep -q "^all 4 ranks finished" "$out/msc-demo.log" || st=1
    fi
    report "MSVC atomics with gcc's stand-ins: examples/demo.c runs its 4 ranks" $st "$out/msc-demo.log"
fi

for h in dist dist_rpc dist_cuda; do
    [ -f $h.h ] || continue
    if [ $h = dist ]; then in_part rest || continue; else in_part quick || continue; fi
    st=0
    g++ -include tests/compile/msc_atomics.h -DDIST__MSC_ATOMICS -std=c++17 -O1 -Wall -Wextra -Wpedantic -Wvla -Werror -I. \
        -isystem /usr/local/cuda/include -DDIST_CHECK_HEADER="\"$h.h\"" \
        $( [ $h = dist ] || echo -D"$(echo $h | tr a-z A-Z)"_IMPLEMENTATION ) -x c++ tests/compile/cpp.cpp \
        -o "$out/msc-cxx-$h" -pthread -ldl -lm >"$out/msc-cxx-$h.log" 2>&1 || st=$?
    [ $st != 0 ] || "$out/msc-cxx-$h" >>"$out/msc-cxx-$h.log" 2>&1 || st=$?
    report "MSVC atomics in C++17 (g++ -Wpedantic -Wvla, stand-ins): $h.h builds and answers" $st "$out/msc-cxx-$h.log"
done

# MSVC's view: empty stand-ins for every system header the headers name,
# nothing predefined but what MSVC on x64 defines.
view=$out/msvc-view
rm -rf "$view"; mkdir -p "$view/inc"
grep -ohE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<[^>]+>' dist.h dist_rpc.h dist_cuda.h 2>/dev/null \
    | sed -E 's/.*<([^>]+)>.*/\1/' | sort -u | while read -r f; do mkdir -p "$view/inc/$(dirname "$f")"; : >"$view/inc/$f"; done
gnu='__attribute__|__typeof__|(^|[^A-Za-z0-9_])typeof[[:space:]]*\(|__builtin_|__atomic_|__sync_|\([[:space:]]*\{|__extension__|(^|[^A-Za-z0-9_])(__)?asm(__)?([^A-Za-z0-9_]|$)|(^|[^A-Za-z0-9_])__thread([^A-Za-z0-9_]|$)'
for h in dist dist_rpc dist_cuda; do
    [ -f $h.h ] && in_part quick || continue
    for lang in c c++; do
        st=0 name=msvc-view-$h-$lang
        printf '#define DIST_IMPLEMENTATION\n#define %s_IMPLEMENTATION\n#include "%s.h"\n' \
            "$(echo $h | tr a-z A-Z)" $h >"$view/$h.c"
        gcc -E -P -undef -nostdinc -I"$view/inc" -I. -x $lang -D_MSC_VER=1930 -D_WIN32=1 -D_WIN64=1 -D_M_X64=100 -D_M_AMD64=100 \
            -D__STDC__=1 $( [ $lang = c++ ] && echo -D__cplusplus=201703L || echo -D__STDC_VERSION__=201112L ) \
            "$view/$h.c" -o "$view/$name.i" >"$out/$name.log" 2>&1 || st=$?
        if [ $st = 0 ] && grep -nE "$gnu" "$view/$name.i" >>"$out/$name.log"; then
            echo "gcc's extensions where MSVC compiles (lines of $view/$name.i above)" >>"$out/$name.log"; st=1
        fi
        report "MSVC's view of $h.h ($lang): no gcc extension" $st "$out/$name.log"
    done
done

[ "$fails" = 0 ] || { echo "$fails of the Windows checks failed"; exit 1; }
echo "every Windows build links, and the MSVC atomics build and run ($part)"
