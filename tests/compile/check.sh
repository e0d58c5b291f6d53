#!/usr/bin/env bash
# tests/compile/check.sh HEADER VARIANT OUTDIR - one compile check.
#
# Builds a small program around HEADER (dist.h, dist_rpc.h, dist_cuda.h) in
# one of these ways, with warnings as errors, and runs it:
#   c11-gcc, c11-clang   the implementation in one C11 TU (impl.c)
#   c++11-g++            the same as C++11 (cpp.cpp)
#   static-gcc, static-clang
#                        impl.c with DIST_STATIC: every function static and
#                        only a few of them used (no unused warnings allowed)
#   multi-tu-gcc, multi-tu-clang
#                        declarations in two TUs (tu_a.c includes the header
#                        twice), the implementation in a third, linked
#   multi-tu-c++         tu_a.c compiled as C++ against a C implementation
#   own-file-gcc, own-file-clang
#                        dist_rpc.h or dist_cuda.h implemented in a file of
#                        its own after <stdio.h> and dist.h, no feature
#                        macros (own_file.c), dist.h's in impl.c, linked
#   sys-first-gcc, sys-first-clang
#                        the implementation after <stdio.h> (sys_first.c):
#                        on glibc, under -std=c11 and -std=gnu11, exactly
#                        one diagnostic, dist.h's #error naming the fix;
#                        with -D_GNU_SOURCE (the fix), no diagnostic at all
#                        (-fsyntax-only); with another libc, it compiles
# Exit 0 pass, 77 skip (a compiler is not installed), else fail.
# tests/run.sh runs every variant for every header that exists.
set -euo pipefail

[ $# -eq 3 ] || { echo "usage: $0 HEADER VARIANT OUTDIR" >&2; exit 2; }
header=$1 variant=$2 out=$3
here=tests/compile
cd "$(dirname "$0")/../.."
mkdir -p "$out"

GCC=${DIST_CHECK_GCC:-gcc}
CLANG=${DIST_CHECK_CLANG:-clang}
GXX=${DIST_CHECK_GXX:-g++}
C_FLAGS="-std=c11 -O2 -Wall -Wextra -Wpedantic -Werror"
CXX_FLAGS="-std=c++11 -O2 -Wall -Wextra -Werror"
# Each header's programs link with what its opening comment says, no more.
LIBS="-pthread"

# ---- per-header settings ---------------------------------------------------
# impl.c and cpp.cpp always define DIST_IMPLEMENTATION; a later header adds
# its own implementation macro (impl, given to those two only; defs go to
# every TU).  The other TUs call dist_version(), so every header is expected
# to include dist.h.
defs="" impl=""
case $header in
    dist.h)      ;;
    dist_rpc.h)  impl="-DDIST_RPC_IMPLEMENTATION"; LIBS="$LIBS -lm" ;;
    dist_cuda.h)
        impl="-DDIST_CUDA_IMPLEMENTATION"
        # dist_cuda.h needs no CUDA header; CUDA's include directory, where
        # there is one, is on the path as the Makefile puts it there.
        # (-isystem: warnings in CUDA's own headers are not ours to fix.)
        cuda_home=${CUDA_HOME:-/usr/local/cuda}
        if [ -d "$cuda_home/include" ]; then
            defs="$defs -isystem $cuda_home/include"
        fi
        LIBS="$LIBS -ldl"         # dlopen: in libdl before glibc 2.34
        ;;
    *) echo "unknown header $header" >&2; exit 2 ;;
esac
[ -f "$header" ] || { echo "$header does not exist"; exit 77; }
# ---------------------------------------------------------------------------

hdr="-I. -DDIST_CHECK_HEADER=\"$header\" $defs"

need() { command -v "$1" >/dev/null 2>&1 || { echo "$1 is not installed"; exit 77; }; }
run() { echo "+ $*"; "$@"; }

# shellcheck disable=SC2086  # the flag strings are meant to split
case $variant in
    c11-gcc|c11-clang|static-gcc|static-clang)
        case $variant in *gcc) cc=$GCC ;; *) cc=$CLANG ;; esac
        case $variant in static-*) static=-DDIST_STATIC ;; *) static="" ;; esac
        need "$cc"
        run "$cc" $C_FLAGS $hdr $impl $static "$here/impl.c" -o "$out/prog" $LIBS
        ;;
    c++11-g++)
        need "$GXX"
        run "$GXX" $CXX_FLAGS $hdr $impl -x c++ "$here/cpp.cpp" -o "$out/prog" $LIBS
        ;;
    multi-tu-gcc|multi-tu-clang)
        case $variant in *gcc) cc=$GCC ;; *) cc=$CLANG ;; esac
        need "$cc"
        run "$cc" $C_FLAGS $hdr -c "$here/tu_a.c" -o "$out/tu_a.o"
        run "$cc" $C_FLAGS $hdr -c "$here/tu_b.c" -o "$out/tu_b.o"
        run "$cc" $C_FLAGS $hdr $impl -DDIST_CHECK_MULTI -c "$here/impl.c" -o "$out/impl.o"
        run "$cc" "$out/tu_a.o" "$out/tu_b.o" "$out/impl.o" -o "$out/prog" $LIBS
        ;;
    multi-tu-c++)
        need "$GCC"; need "$GXX"
        run "$GXX" $CXX_FLAGS $hdr -x c++ -c "$here/tu_a.c" -o "$out/tu_a.o"
        run "$GCC" $C_FLAGS $hdr -c "$here/tu_b.c" -o "$out/tu_b.o"
        run "$GCC" $C_FLAGS $hdr $impl -DDIST_CHECK_MULTI -c "$here/impl.c" -o "$out/impl.o"
        run "$GXX" "$out/tu_a.o" "$out/tu_b.o" "$out/impl.o" -o "$out/prog" $LIBS
        ;;
    own-file-gcc|own-file-clang)
        [ -n "$impl" ] || { echo "$variant is for the headers that build on dist.h" >&2; exit 2; }
        case $variant in *gcc) cc=$GCC ;; *) cc=$CLANG ;; esac
        need "$cc"
        run "$cc" $C_FLAGS $hdr $impl -c "$here/own_file.c" -o "$out/own.o"
        run "$cc" $C_FLAGS $hdr -c "$here/impl.c" -o "$out/impl.o"
        run "$cc" "$out/own.o" "$out/impl.o" -o "$out/prog" $LIBS
        ;;
    sys-first-gcc|sys-first-clang)
        case $variant in *gcc) cc=$GCC ;; *) cc=$CLANG ;; esac
        need "$cc"
        if ! printf '#include <stdio.h>\n#ifndef __GLIBC__\n#error not glibc\n#endif\n' \
                | "$cc" -x c -fsyntax-only - >/dev/null 2>&1; then
            run "$cc" $C_FLAGS $hdr $impl "$here/sys_first.c" -o "$out/prog" $LIBS
            run "$out/prog"
            exit 0
        fi
        for std in -std=c11 -std=gnu11; do
            echo "+ $cc $std ... $here/sys_first.c (must fail with dist.h's #error alone)"
            if "$cc" $std ${C_FLAGS#-std=c11} $hdr $impl -fsyntax-only "$here/sys_first.c" >"$out/diag.txt" 2>&1; then
                echo "FAIL: $header's implementation compiled after <stdio.h> ($std): expected dist.h's #error"
                exit 1
            fi
            cat "$out/diag.txt"
            n=$(grep -cE '(error|warning):' "$out/diag.txt" || true)
            if [ "$n" != 1 ] || ! grep -q 'define it and include dist.h before any system header, or compile that file with -D_GNU_SOURCE' "$out/diag.txt"; then
                echo "FAIL: $header after <stdio.h> ($std): $n diagnostics; expected exactly one, dist.h's #error naming the fix"
                exit 1
            fi
        done
        # the fix the message names
        run "$cc" $C_FLAGS -D_GNU_SOURCE $hdr $impl -fsyntax-only "$here/sys_first.c"
        echo "ok: one #error under -std=c11 and -std=gnu11, none with -D_GNU_SOURCE"
        exit 0
        ;;
    *) echo "unknown variant $variant" >&2; exit 2 ;;
esac
run "$out/prog"
