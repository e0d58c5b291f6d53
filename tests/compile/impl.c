/* The implementation of the header under test, in a TU of its own, plus a
   main that checks the library answers.  Built by tests/compile/check.sh:
      -DDIST_CHECK_HEADER='"dist.h"'   the header (default dist.h)
      -DDIST_RPC_IMPLEMENTATION etc.   a later header's own implementation
                                      macro (check.sh knows which)
      -DDIST_CHECK_MULTI              also call into tu_a.c and tu_b.c
   With -DDIST_STATIC it is the whole program in one TU. */
#ifndef DIST_CHECK_HEADER
#  define DIST_CHECK_HEADER "dist.h"
#endif
#define DIST_IMPLEMENTATION
#include DIST_CHECK_HEADER

#include <stdio.h>
#include <string.h>

#ifdef DIST_CHECK_MULTI
const char *dist_check_a(void);
const char *dist_check_b(void);
#endif

int main(void) {
    const char *v = dist_version();
    if (strcmp(v, DIST_VERSION_STRING) != 0) {
        printf("dist_version() is %s, DIST_VERSION_STRING %s\n", v, DIST_VERSION_STRING);
        return 1;
    }
    if (strcmp(dist_result_name(DIST_ERR_TIMEOUT), "DIST_ERR_TIMEOUT") != 0 ||
        dist_dtype_size(DIST_FLOAT32) != 4) {
        printf("dist_result_name or dist_dtype_size answers wrongly\n");
        return 1;
    }
#ifdef DIST_CHECK_MULTI
    if (dist_check_a() != v || dist_check_b() != v) {
        printf("other translation units see another dist_version()\n");
        return 1;
    }
#endif
    printf("%s %s: ok\n", DIST_CHECK_HEADER, v);
    return 0;
}
