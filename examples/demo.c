/* demo.c - four ranks on this machine: point-to-point and the store.

   Run it with `make demo`, or build it and start it yourself:
      cc -std=c11 -O2 -I. examples/demo.c -o demo -pthread && ./demo
   or, for Windows (MinGW-w64; the same with MSVC's cl and ws2_32.lib):
      x86_64-w64-mingw32-gcc -std=c11 -O2 -I. examples/demo.c -o demo.exe -lws2_32

   dist_spawn() starts four copies of this program, connects them (rank 0
   hosts the job's key-value store on a free loopback port) and runs
   `demo` in each.  Everything a rank prints goes through one printf per
   line, so the lines of different ranks do not mix.

   On POSIX systems the copies are forks of this process, made inside
   dist_spawn.  Windows has no fork: each copy is this program started
   again (as Python's multiprocessing "spawn"), which runs main() from the
   top until its dist_spawn call turns it into its rank.  So whatever
   main() does before dist_spawn happens in every rank too: print nothing
   there (the banner is rank 0's job), and rebuild `arg` the same way in
   each process (here there is none). */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                         \
    do {                                                                    \
        dist_result r_ = (call);                                            \
        if (r_ != DIST_OK) {                                                \
            fprintf(stderr, "rank %d: %s: %s\n", rank, dist_result_name(r_), \
                    dist_error_message(world));                             \
            return 1;                                                       \
        }                                                                   \
    } while (0)

static int demo(dist_t *world, void *arg) {
    int rank = dist_rank(world), n = dist_world_size(world);
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    (void)arg;

    if (rank == 0) {
        /* Once, before any rank can print: the others' first lines wait
           for rank 0's first message. */
        printf("dist %s demo: %d ranks on this machine\n", dist_version(), n);
        fflush(stdout);
    }

    /* 1. Blocking send/recv: a token travels once around the ring, each
          rank adding its rank to it. */
    int token = 0;
    if (rank == 0) {
        CHECK(dist_send(world, &token, 1, DIST_INT32, right, 0));
        CHECK(dist_recv(world, &token, 1, DIST_INT32, left, 0));
        printf("[rank 0] the token came back around the ring as %d (0+1+...+%d)\n", token, n - 1);
    } else {
        CHECK(dist_recv(world, &token, 1, DIST_INT32, left, 0));
        token += rank;
        CHECK(dist_send(world, &token, 1, DIST_INT32, right, 0));
    }

    /* 2. Non-blocking isend/irecv: every rank sends an array to its right
          neighbour and receives one from its left at the same time; the
          requests complete while we could be computing. */
    float mine[4], theirs[4];
    for (int i = 0; i < 4; i++) mine[i] = (float)(rank * 10 + i);
    dist_req_t *reqs[2];
    CHECK(dist_irecv(world, theirs, 4, DIST_FLOAT32, left, 1, &reqs[0]));
    CHECK(dist_isend(world, mine, 4, DIST_FLOAT32, right, 1, &reqs[1]));
    CHECK(dist_wait_all(2, reqs));
    printf("[rank %d] got {%g, %g, %g, %g} from rank %d\n", rank, theirs[0], theirs[1], theirs[2], theirs[3], left);

    /* 3. The key-value store: every rank publishes a greeting, counts
          itself in, and reads its neighbour's greeting (get waits until
          the key exists). */
    char key[32], value[64];
    size_t len = 0;
    int64_t arrived = 0;
    snprintf(key, sizeof key, "greeting/%d", rank);
    snprintf(value, sizeof value, "hello from rank %d", rank);
    CHECK(dist_store_set(world, key, value, strlen(value)));
    CHECK(dist_store_add(world, "arrived", 1, &arrived));
    snprintf(key, sizeof key, "greeting/%d", right);
    CHECK(dist_store_get(world, key, value, sizeof value - 1, &len));
    value[len] = 0;
    printf("[rank %d] was number %lld to arrive; rank %d says \"%s\"\n", rank, (long long)arrived, right, value);
    return 0;
}

int main(void) {
    int rc = dist_spawn(4, demo, NULL, NULL);
    if (rc != 0) {
        fprintf(stderr, "demo failed: %s\n", dist_error_message(NULL));
        return 1;
    }
    printf("all 4 ranks finished\n");
    return 0;
}
