/* A later header's implementation (dist_rpc.h, dist_cuda.h) in a file of
   its own that included a system header and dist.h's declarations first,
   with no feature macros, as a user may write it: what it needs of dist.h's
   platform layer must build there (dist.h's own implementation, which asks
   for POSIX before its first system header, is in impl.c).  Built by
   tests/compile/check.sh (own-file-gcc, own-file-clang) with the header's
   implementation macro on the command line. */
#include <stdio.h>
#include "dist.h"
#include DIST_CHECK_HEADER
