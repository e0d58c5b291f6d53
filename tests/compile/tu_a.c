/* Declarations only, included twice (the include guard must hold).  Valid
   as C and as C++: check.sh also builds it with g++ against a C
   implementation, which proves the extern "C" linkage. */
#ifndef DIST_CHECK_HEADER
#  define DIST_CHECK_HEADER "dist.h"
#endif
#include DIST_CHECK_HEADER
#include DIST_CHECK_HEADER

#include <string.h>

#ifdef __cplusplus
extern "C"
#endif
const char *dist_check_a(void);

const char *dist_check_a(void) {
    if (strcmp(dist_dtype_name(DIST_FLOAT32), "float32") != 0) return NULL;
    return dist_version();
}
