// The header under test compiled as C++ (g++ -std=c++11 -x c++), with its
// implementation, as one program.  Built by tests/compile/check.sh with
// -DDIST_CHECK_HEADER='"dist.h"' (the default).
#ifndef DIST_CHECK_HEADER
#  define DIST_CHECK_HEADER "dist.h"
#endif
#define DIST_IMPLEMENTATION
#include DIST_CHECK_HEADER

#include <cstdio>
#include <cstring>

namespace {

// The API used from C++: types, enums, function pointers, value-init.
int run_rank(dist_t *world, void *arg) {
    (void)arg;
    return dist_rank(world) >= 0 ? 0 : 1;
}

}  // namespace

int main() {
    dist_config cfg = dist_config();
    if (cfg.init_method != NULL || cfg.world_size != 0) return 1;
    int (*spawn)(int, int (*)(dist_t *, void *), void *, const dist_config *) = dist_spawn;
    int (*fn)(dist_t *, void *) = run_rank;
    if (spawn == NULL || fn == NULL) return 1;

    dist_result r = DIST_ERR_TIMEOUT;
    if (std::strcmp(dist_result_name(r), "DIST_ERR_TIMEOUT") != 0) return 1;
    if (dist_dtype_size(DIST_FLOAT64) != 8) return 1;
    if (std::strcmp(dist_version(), DIST_VERSION_STRING) != 0) return 1;
    std::printf("%s %s as C++: ok\n", DIST_CHECK_HEADER, dist_version());
    return 0;
}
