#!/usr/bin/env bash
# tests/compile/cmake.sh OUTDIR - the CMake package works.
#
# Installs dist into a temporary prefix, then builds and runs a small
# consumer three ways: find_package(dist), add_subdirectory and
# FetchContent.  Skips (77) when cmake is not installed.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/../.."
src=$(pwd)
out=$1
command -v cmake >/dev/null 2>&1 || { echo "cmake is not installed"; exit 77; }
rm -rf "$out"
mkdir -p "$out/consumer"

run() { echo "+ $*"; "$@"; }
gen=()
if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi

cat >"$out/consumer/main.c" <<'EOF'
#define DIST_IMPLEMENTATION
#include "dist.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    volatile double x = argc + 1.0;     /* sqrt of a value known only at run time: libm */
    (void)argv;
    printf("consumer sees dist %s (sqrt %.3f)\n", dist_version(), sqrt(x));
    return strcmp(dist_version(), DIST_VERSION_STRING) != 0;
}
EOF

consumer() {  # NAME CMAKE-LINES...
    local name=$1; shift
    mkdir -p "$out/$name"
    {
        echo "cmake_minimum_required(VERSION 3.14)"
        echo "project(consumer_$name C)"
        printf '%s\n' "$@"
        echo "add_executable(app \"$out/consumer/main.c\")"
        echo "target_link_libraries(app PRIVATE dist::dist)"
    } >"$out/$name/CMakeLists.txt"
    run cmake -S "$out/$name" -B "$out/$name/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$out/prefix"
    run cmake --build "$out/$name/build"
    run "$out/$name/build/app"
}

version=$(sed -n 's/^#define DIST_VERSION_STRING "\(.*\)"/\1/p' dist.h)

run cmake -S "$src" -B "$out/dist-build" "${gen[@]}" -DCMAKE_INSTALL_PREFIX="$out/prefix"
run cmake --build "$out/dist-build"
run cmake --install "$out/dist-build"
test -f "$out/prefix/include/dist.h"
"$out/prefix/bin/distrun" --version | grep -qx "distrun (dist) $version"
test -x "$out/prefix/bin/dist_timeline"

consumer find_package "find_package(dist $version CONFIG REQUIRED)"
consumer add_subdirectory "add_subdirectory(\"$src\" dist)"
consumer fetchcontent \
    "include(FetchContent)" \
    "FetchContent_Declare(dist SOURCE_DIR \"$src\")" \
    "FetchContent_MakeAvailable(dist)"
echo "cmake package: ok"
