/* The implementation file of a user who included a system header first:
   on glibc that fixes the feature macros before dist.h can ask for POSIX,
   and dist.h must stop with its one #error saying what to do (not dozens
   of errors), or, built with -D_GNU_SOURCE, compile.  Elsewhere (musl,
   macOS) it compiles.  Built by tests/compile/check.sh (sys-first-gcc,
   sys-first-clang) with the header's own implementation macro, if any, on
   the command line. */
#include <stdio.h>
#define DIST_IMPLEMENTATION
#include DIST_CHECK_HEADER

int main(void) {
    printf("%s: ok\n", dist_version());
    return 0;
}
