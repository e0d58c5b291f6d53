/* collectives.c - every collective once: communication among all ranks.

   SMOKE: distrun -n 4 {} --smoke

   Run it (any number of ranks; 4 shows the most):
      make build/distrun build/examples/collectives && build/distrun -n 4 build/examples/collectives

   This is the "Collective Communication" section of PyTorch's tutorial
   "Writing Distributed Applications with PyTorch", in C.  Point-to-point
   (examples/p2p.c) moves data between two ranks; a collective is one call
   that EVERY rank of a communicator makes, in the same order and with the
   same count, dtype, op and root, and that moves data among all of them.
   dist.h picks an algorithm (trees for small messages, rings for large
   ones, shared memory between ranks on one host) so you do not have to.

   The rule that makes them safe: every rank calls the same collectives in
   the same order.  A rank that calls with another count, dtype, op or root
   fails (DIST_ERR_MISMATCH) with a sentence naming both sides, on every
   rank, instead of hanging.

   Sections, in the tutorial's order:
     1. broadcast       root's array -> every rank
     2. reduce          every rank's array, combined -> the root only
     3. all_reduce      every rank's array, combined -> every rank
     4. scatter         root's array cut into N blocks, block j -> rank j
     5. gather          every rank's block -> the root, side by side
     6. all_gather      every rank's block -> every rank, side by side
     7. reduce_scatter  combine, then block j of the result -> rank j
     8. all_to_all      block j of rank i -> block i of rank j (a transpose)
     9. barrier         nobody leaves until everybody has arrived
    10. groups          a collective among a subset of ranks (dist_new_group)
    11. the ops         SUM, PRODUCT, MAX, MIN and AVG

   Each result is checked, on every rank, against a reference computed here
   serially: each rank knows the formula that generated every rank's input,
   so it can work out without communication what it must hold.  The data
   are int32 (and small integer-valued floats), so results are exact and
   compared with ==.  With --smoke it prints only problems and a summary
   line, and runs every section twice (with 2 and with 20001 elements per
   block: messages up to 64 KiB take latency-optimal trees, larger
   ones pipelined rings and shared memory); the exit
   status is 1 if any check failed on this rank. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stop at a failed call: print the library's sentence about it. */
#define CHECK(call)                                                          \
    do {                                                                     \
        dist_result r_ = (call);                                             \
        if (r_ != DIST_OK) {                                                 \
            fprintf(stderr, "%s failed: %s: %s\n", #call,                    \
                    dist_result_name(r_), dist_error_message(world));        \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

static dist_t *world;
static int rank, n;       /* this rank, and the number of ranks */
static int verbose;       /* print what a student should see (not --smoke) */
static int errors;        /* this rank's failed checks */

/* ---- helpers: printing and checking ------------------------------------ */

/* "{1, 2 | 3, 4}": `count` ints, with a bar between blocks of `block`. */
static const char *show(const int32_t *v, size_t count, size_t block) {
    static char text[4][512];
    static int which;
    char *s = text[which++ % 4];
    size_t used = 0, i;
    s[used++] = '{';
    for (i = 0; i < count && used < 480; i++) {   /* 480: room for one more */
        const char *sep = i == 0 ? "" : (block && i % block == 0 ? " | " : ", ");
        used += (size_t)snprintf(s + used, 512 - used, "%s%ld", sep, (long)v[i]);
    }
    snprintf(s + used, 512 - used, "%s}", i < count ? ", ..." : "");
    return s;
}

/* Compares what this rank holds with what it must hold. */
static void expect(const char *what, const int32_t *got, const int32_t *want, size_t count) {
    for (size_t i = 0; i < count; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "WRONG: %s: element %zu is %ld, expected %ld\n",
                    what, i, (long)got[i], (long)want[i]);
            errors++;
            return;
        }
    }
}

static int32_t *ints(size_t count) {
    int32_t *p = calloc(count ? count : 1, sizeof *p);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

/* The input every rank contributes: element i of rank r is 10*r + i, so
   anyone can tell from a value where it came from. */
static int32_t input(int r, size_t i) { return (int32_t)(10 * r + (int)(i % 10)); }

/* ---- 1-3: broadcast, reduce, all_reduce -------------------------------- */
static void one_to_all_and_back(size_t k) {
    int32_t *buf = ints(k), *want = ints(k);

    /* 1. broadcast(buf, root): the root's buf is copied into every rank's
          buf.  Before the call only the root's buf matters; the others are
          overwritten.  (Model weights at the start of training go out this
          way, so every replica starts from the same point.) */
    int root = 0;
    for (size_t i = 0; i < k; i++) buf[i] = rank == root ? input(root, i) : -1;
    CHECK(dist_broadcast(world, buf, k, DIST_INT32, root));
    for (size_t i = 0; i < k; i++) want[i] = input(root, i);
    expect("broadcast", buf, want, k);
    if (verbose) printf(" 1. broadcast from rank %d: hold %s\n", root, show(buf, k, 0));

    /* 2. reduce(buf, op, root): element by element, the root ends up with
          buf[0] op buf[1] op ... over all ranks; the other ranks' buffers
          are left as they were.  The root need not be rank 0. */
    root = n - 1;
    for (size_t i = 0; i < k; i++) buf[i] = input(rank, i);
    CHECK(dist_reduce(world, buf, k, DIST_INT32, DIST_SUM, root));
    for (size_t i = 0; i < k; i++) {
        int32_t sum = 0;
        for (int r = 0; r < n; r++) sum += input(r, i);   /* the serial reference */
        want[i] = rank == root ? sum : input(rank, i);
    }
    expect("reduce", buf, want, k);
    if (verbose) printf(" 2. reduce SUM to rank %d: hold %s%s\n", root, show(buf, k, 0),
                        rank == root ? " (the sum)" : " (unchanged: not the root)");

    /* 3. all_reduce(buf, op): like reduce, but every rank gets the result
          (bit for bit the same everywhere).  This is the collective of
          data-parallel training: after the backward pass, all_reduce SUM
          of the gradients, divided by N, is the average gradient. */
    for (size_t i = 0; i < k; i++) buf[i] = input(rank, i);
    CHECK(dist_all_reduce(world, buf, k, DIST_INT32, DIST_SUM));
    for (size_t i = 0; i < k; i++) {
        int32_t sum = 0;
        for (int r = 0; r < n; r++) sum += input(r, i);
        want[i] = sum;
    }
    expect("all_reduce", buf, want, k);
    if (verbose) printf(" 3. all_reduce SUM: hold %s\n", show(buf, k, 0));
    free(buf); free(want);
}

/* ---- 4-8: the collectives whose buffers hold one block per rank --------
   `k` is always ONE rank's block.  A buffer that holds every rank's block
   (scatter's send at the root, gather's recv at the root, all_gather's
   recv, reduce_scatter's send, both all_to_all buffers) has k x N
   elements, block j (elements j*k .. j*k+k-1) belonging to rank j. */
static void blocks(size_t k) {
    size_t nk = k * (size_t)n;
    int32_t *mine = ints(k), *all = ints(nk), *want = ints(nk), *want_k = ints(k);

    /* 4. scatter(send, recv, root): the root cuts `send` into N blocks and
          rank j receives block j.  (How rank 0 could hand out the shards of
          a data set.)  Only the root's send buffer is read; the others may
          pass NULL. */
    int root = 0;
    if (rank == root)
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < k; i++) all[(size_t)j * k + i] = 100 * j + (int32_t)(i % 10);
    CHECK(dist_scatter(world, rank == root ? all : NULL, mine, k, DIST_INT32, root));
    for (size_t i = 0; i < k; i++) want_k[i] = 100 * rank + (int32_t)(i % 10);
    expect("scatter", mine, want_k, k);
    if (verbose) printf(" 4. scatter from rank %d: got block %d = %s\n", root, rank, show(mine, k, 0));

    /* 5. gather(send, recv, root): the reverse; the root receives every
          rank's block, rank j's at block j.  Off the root recv may be NULL. */
    for (size_t i = 0; i < k; i++) mine[i] = input(rank, i);
    memset(all, 0, nk * sizeof *all);
    CHECK(dist_gather(world, mine, rank == root ? all : NULL, k, DIST_INT32, root));
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < k; i++) want[(size_t)j * k + i] = input(j, i);
    if (rank == root) expect("gather", all, want, nk);
    if (verbose) {
        if (rank == root) printf(" 5. gather to rank %d: hold %s\n", root, show(all, nk, k));
        else printf(" 5. gather to rank %d: sent %s\n", root, show(mine, k, 0));
    }

    /* 6. all_gather(send, recv): gather, with every rank receiving. */
    memset(all, 0, nk * sizeof *all);
    CHECK(dist_all_gather(world, mine, all, k, DIST_INT32));
    expect("all_gather", all, want, nk);      /* the same reference as gather */
    if (verbose) printf(" 6. all_gather: hold %s\n", show(all, nk, k));

    /* 7. reduce_scatter(send, recv, op): every rank offers N blocks; block j
          of the element-wise combination over ranks goes to rank j.  It is
          an all_reduce in which each rank keeps only its own block (half of
          the bandwidth-optimal all_reduce; see examples/ring_allreduce.c).
          Rank r offers 1000*r + (block j's input); rank j receives the sum
          over r. */
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < k; i++) all[(size_t)j * k + i] = 1000 * rank + input(j, i);
    CHECK(dist_reduce_scatter(world, all, mine, k, DIST_INT32, DIST_SUM));
    for (size_t i = 0; i < k; i++) {
        int32_t sum = 0;
        for (int r = 0; r < n; r++) sum += 1000 * r + input(rank, i);
        want_k[i] = sum;
    }
    expect("reduce_scatter", mine, want_k, k);
    if (verbose) printf(" 7. reduce_scatter SUM: offered %s, got block %d = %s\n",
                        show(all, nk, k), rank, show(mine, k, 0));

    /* 8. all_to_all(send, recv): rank i's block j goes to rank j, where it
          lands as block i: each rank sends a different block to each rank
          (the exchange of expert-parallel layers and of distributed
          transposes).  Rank i sends 100*i + 10*j (+ element) to rank j. */
    int32_t *got = ints(nk);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < k; i++) all[(size_t)j * k + i] = 100 * rank + 10 * j + (int32_t)(i % 10);
    CHECK(dist_all_to_all(world, all, got, k, DIST_INT32));
    for (int j = 0; j < n; j++)   /* block j came from rank j, its block `rank` */
        for (size_t i = 0; i < k; i++) want[(size_t)j * k + i] = 100 * j + 10 * rank + (int32_t)(i % 10);
    expect("all_to_all", got, want, nk);
    if (verbose) printf(" 8. all_to_all: sent %s, got %s\n", show(all, nk, k), show(got, nk, k));
    free(got); free(mine); free(all); free(want); free(want_k);
}

/* ---- 9. barrier ---------------------------------------------------------
   barrier() returns on a rank only once every rank has called it.  To see
   that, rank r dawdles r x 20 ms before arriving; all leave together, when
   the last one arrives.  The check is independent of the barrier: each rank
   counts itself in the job's key-value store (dist_store_add) before the
   barrier, so after it the count must be N. */
static void barrier(int round) {
    char key[64];
    int64_t count = 0;
    snprintf(key, sizeof key, "collectives/barrier/%d", round);
    int64_t t0 = dist_time_ns();
    while (dist_time_ns() - t0 < (int64_t)rank * 20 * 1000000) { }   /* "work" */
    int64_t arrived = dist_time_ns();
    CHECK(dist_store_add(world, key, 1, NULL));
    CHECK(dist_barrier(world));
    int64_t left = dist_time_ns();
    CHECK(dist_store_add(world, key, 0, &count));   /* adding 0 reads it */
    if (count != n) {
        fprintf(stderr, "WRONG: barrier: left it when %lld of %d ranks had arrived\n", (long long)count, n);
        errors++;
    }
    if (verbose) printf(" 9. barrier: arrived at %3.0f ms, left at %3.0f ms (%lld of %d had arrived)\n",
                        (double)(arrived - t0) / 1e6, (double)(left - t0) / 1e6, (long long)count, n);
}

/* ---- 10. groups ---------------------------------------------------------
   dist_new_group(world, m, ranks, &group) makes a communicator of the
   listed ranks; collectives on it involve only them.  Every rank of the
   world calls dist_new_group for every group, in the same order, even for
   groups it is not in: it gets NULL there.  In a group a rank has a new
   rank (members are numbered by their world rank: even world rank 2r is
   rank r of the even group).  Here the even ranks and the odd ranks each
   all_reduce their world ranks, at the same time, independently. */
static void groups(void) {
    int *evens = calloc((size_t)n, sizeof *evens), *odds = calloc((size_t)n, sizeof *odds);
    int ne = 0, no = 0;
    if (!evens || !odds) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int r = 0; r < n; r++) {
        if (r % 2 == 0) evens[ne++] = r;
        else odds[no++] = r;
    }
    dist_t *even = NULL, *odd = NULL;
    CHECK(dist_new_group(world, ne, evens, &even));
    if (no > 0) CHECK(dist_new_group(world, no, odds, &odd));
    dist_t *mine = rank % 2 == 0 ? even : odd;
    int32_t x = rank, want = 0;
    for (int r = rank % 2; r < n; r += 2) want += r;   /* the members' sum */
    if (mine == NULL) {
        fprintf(stderr, "WRONG: rank %d is in no group\n", rank);
        errors++;
    } else {
        CHECK(dist_all_reduce(mine, &x, 1, DIST_INT32, DIST_SUM));
        if (x != want || dist_rank(mine) != rank / 2 || dist_world_size(mine) != (rank % 2 ? no : ne)) {
            fprintf(stderr, "WRONG: group all_reduce gave %ld (expected %ld), group rank %d of %d\n",
                    (long)x, (long)want, dist_rank(mine), dist_world_size(mine));
            errors++;
        }
        if (verbose) printf("10. group: rank %d of the %s ranks (%d of them): their all_reduce SUM of world ranks = %ld\n",
                            dist_rank(mine), rank % 2 ? "odd" : "even", dist_world_size(mine), (long)x);
    }
    /* A group is destroyed before its world; NULL (not a member) is skipped. */
    if (odd) CHECK(dist_destroy(odd));
    if (even) CHECK(dist_destroy(even));
    free(evens); free(odds);
}

/* ---- 11. the reduction ops ---------------------------------------------
   reduce, all_reduce and reduce_scatter combine with an op: DIST_SUM,
   DIST_PRODUCT, DIST_MAX, DIST_MIN, or DIST_AVG (the sum divided by N; for
   integers the quotient rounded towards zero, as C's `/`).  Inputs here
   are 1..5, so products fit in int32 up to 13 ranks. */
static int32_t small(int r, size_t i) { return 1 + (int32_t)((r + i) % 3 + i % 3); }

static void ops(size_t k) {
    static const dist_op op[] = { DIST_SUM, DIST_PRODUCT, DIST_MAX, DIST_MIN, DIST_AVG };
    static const char *const name[] = { "SUM", "PRODUCT", "MAX", "MIN", "AVG" };
    int32_t *x = ints(k), *want = ints(k);
    for (size_t i = 0; i < k; i++) x[i] = small(rank, i);
    if (verbose) printf("11. ops: my input %s\n", show(x, k, 0));
    for (int o = 0; o < 5; o++) {
        for (size_t i = 0; i < k; i++) {          /* the serial reference */
            int32_t acc = small(0, i);
            for (int r = 1; r < n; r++) {
                int32_t v = small(r, i);
                if (op[o] == DIST_PRODUCT) acc *= v;
                else if (op[o] == DIST_MAX) acc = v > acc ? v : acc;
                else if (op[o] == DIST_MIN) acc = v < acc ? v : acc;
                else acc += v;                     /* SUM, and AVG's sum */
            }
            want[i] = op[o] == DIST_AVG ? acc / n : acc;
        }
        for (size_t i = 0; i < k; i++) x[i] = small(rank, i);
        CHECK(dist_all_reduce(world, x, k, DIST_INT32, op[o]));
        expect(name[o], x, want, k);
        if (verbose && rank == 0) printf("11. ops: all_reduce %-7s -> %s\n", name[o], show(x, k, 0));
    }

    /* AVG on floats is the true mean.  Small integers are exact in float and
       the library divides the exact sum by N as we do, so == holds. */
    float f = (float)rank, fsum = 0;
    for (int r = 0; r < n; r++) fsum += (float)r;
    CHECK(dist_all_reduce(world, &f, 1, DIST_FLOAT32, DIST_AVG));
    if (f != fsum / (float)n) {
        fprintf(stderr, "WRONG: float AVG of the ranks is %g, expected %g\n", f, fsum / (float)n);
        errors++;
    }
    if (verbose && rank == 0) printf("11. ops: all_reduce AVG of the ranks as float32 -> %g\n", f);
    free(x); free(want);
}

int main(int argc, char **argv) {
    int smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    verbose = !smoke;

    /* Setup: join the job started by distrun (see examples/p2p.c). */
    if (dist_init(&world, NULL) != DIST_OK) {
        fprintf(stderr, "dist_init failed: %s\n", dist_error_message(NULL));
        return 1;
    }
    rank = dist_rank(world);
    n = dist_world_size(world);

    /* The smoke test runs every section with a small block (2) and with a
       large odd one (20001 x 4 bytes, over the 64 KiB where dist.h
       switches from tree algorithms to rings). */
    size_t sizes[] = { 2, 20001 };
    int nsizes = smoke ? 2 : 1;
    for (int s = 0; s < nsizes; s++) {
        /* The barriers between sections only keep the printed lines of one
           section together; the collectives do not need them.  Each rank
           flushes its lines before the barrier, so they reach the launcher
           then, not at exit (stdout is a pipe under distrun; setvbuf's
           line buffering would do on POSIX systems, but Windows buffers
           fully when asked for it). */
        if (verbose && rank == 0) printf("%d rank%s, %zu elements per rank (block)\n", n, n == 1 ? "" : "s", sizes[s]);
        fflush(stdout);
        one_to_all_and_back(sizes[s] * 2);
        fflush(stdout);
        CHECK(dist_barrier(world));
        blocks(sizes[s]);
        fflush(stdout);
        CHECK(dist_barrier(world));
        barrier(s);
        groups();
        fflush(stdout);
        CHECK(dist_barrier(world));
        ops(sizes[s] * 2);
        fflush(stdout);
    }

    /* Everyone's verdict: the sum of the ranks' failed checks. */
    int32_t total = errors;
    CHECK(dist_all_reduce(world, &total, 1, DIST_INT32, DIST_SUM));
    if (rank == 0)
        printf("collectives%s: %s on %d rank%s\n", smoke ? " smoke" : "",
               total == 0 ? "all checks passed" : "some checks FAILED", n, n == 1 ? "" : "s");
    CHECK(dist_destroy(world));
    return errors == 0 ? 0 : 1;
}
