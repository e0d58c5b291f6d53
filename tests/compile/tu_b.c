/* Declarations only, in a second translation unit. */
#ifndef DIST_CHECK_HEADER
#  define DIST_CHECK_HEADER "dist.h"
#endif
#include DIST_CHECK_HEADER

const char *dist_check_b(void);

const char *dist_check_b(void) {
    if (dist_dtype_size(DIST_DTYPE_COUNT) != 0) return NULL;
    return dist_version();
}
