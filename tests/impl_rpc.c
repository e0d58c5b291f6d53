/* tests/impl_rpc.c - dist_rpc.h's implementation in a file of its own (after
   dist.h's declarations), beside tests/impl_dist.c in BUILD/lib/libdist_test.a. */
#include "dist.h"
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"
