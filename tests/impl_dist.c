/* tests/impl_dist.c - dist.h's implementation, built once per build
   directory into BUILD/lib/libdist_test.a (Makefile).  The tests that use
   only the public API (their source guards DIST_IMPLEMENTATION with
   `#ifndef DIST_TEST_LINKED`) are compiled with -DDIST_TEST_LINKED and
   linked with it, as a program of several files would be; each still builds
   alone with `cc tests/test_NAME.c`.  The tests of the internals compile the
   implementation themselves. */
#define DIST_IMPLEMENTATION
#include "dist.h"
