// TIMEOUT: 300
// ALONE: async waits are bounded against the blocking calls' time (2x + 0.25 s)
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_groups_async.c - dist_new_group and the _async collectives.

   Groups (a 4-rank job): disjoint groups {0,1} and {2,3}; overlapping
   groups {0,1,2} and {1,2,3}; a single-rank group {2}; a group listed out
   of order {3,0,2}; a group of a group ({1,3} of {1,2,3}).  In each, the
   rank and size are group-relative, non-members get NULL, and collectives
   and point-to-point (group ranks) give the right answers.  Then two
   threads per rank drive two groups at once (two groups of all four ranks;
   and the overlapping pair, where ranks 1 and 2 run two threads), member
   lists that disagree fail with DIST_ERR_MISMATCH, and groups are destroyed
   before the world (one is left for dist_destroy(world) to reclaim, which
   the sanitizer passes check).  A third job (3 s timeout) gives the
   lowest member of the list a different list: the others must fail (with
   DIST_ERR_MISMATCH) instead of waiting.

   Async (a 4-rank job): every _async twin completes via dist_wait and via
   dist_test polling, with correct results; 10 all_reduce_async in flight
   at once, waited for in reverse order, complete in issue order; async
   collectives interleaved with isend/irecv on the same communicator; a
   blocking collective issued behind pending async ones runs after them
   (the data depend on the order); async collectives on a group and on the
   world at the same time; an async collective never waited on is finished
   by dist_destroy of its group.

   Each rank records its checks in a MAP_SHARED table; the parent prints
   one line per check.  Exit 0 only if every check passed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define NR 4

/* ---- the shared check table ------------------------------------------------ */

#define CHECKS(X)                                                                                 \
    X(G_DISJOINT,   "disjoint groups {0,1} and {2,3}: NULL for non-members, group rank/size, all_reduce, broadcast, all_gather, reduce_scatter, send/recv in group ranks") \
    X(G_OVERLAP,    "overlapping groups {0,1,2} and {1,2,3}: rank/size, collectives and send/recv on each") \
    X(G_SINGLE,     "a single-rank group {2}: rank 0 of 1; collectives are copies; send/recv to itself") \
    X(G_UNSORTED,   "a group listed as {3,0,2}: members ordered by parent rank (0,2,3), collectives and send/recv") \
    X(G_NESTED,     "a group of a group: {0,2} of {1,2,3} = world ranks {1,3}; rank/size, collectives, send/recv") \
    X(G_SAMEWORLD,  "collectives on the world after groups were made still give the right answers")        \
    X(G_THREADS,    "two groups of all 4 ranks, one thread each per rank, 60 collectives each at once")  \
    X(G_THREADS_OV, "overlapping groups {0,1,2}/{1,2,3} from two threads of ranks 1 and 2 at once")    \
    X(G_THREADS_W,  "the world and a group from two threads of each rank at once")                      \
    X(G_MISMATCH,   "member lists differ (rank 3 lists {0,1,2,3}, the others {0,1,2}): rank 3 gets DIST_ERR_MISMATCH naming both lists, quickly") \
    X(G_AFTER_MM,   "after the mismatch: the group of the others works, and a further dist_new_group works on every rank") \
    X(G_DESTROY,    "dist_destroy of every group returns DIST_OK; the world still works after")        \
    X(G_LOWEST,     "member lists differ in their lowest member (rank 0 lists {1,2,3}, the others {0,1,2,3}): ranks 1-3 fail with DIST_ERR_MISMATCH (3 s timeout), not by waiting for it") \
    X(A_WAIT,       "every _async collective (9) completes via dist_wait with correct results (counts 1000 and 40000)") \
    X(A_TEST,       "every _async collective (9) completes via dist_test polling with correct results")  \
    X(A_ORDER,      "10 all_reduce_async in flight, waited in reverse order: when the last is done the others are too; results correct") \
    X(A_P2P,        "async collectives interleaved with isend/irecv on the same communicator, dist_wait_all: all correct") \
    X(A_BLOCKING,   "a blocking broadcast issued behind a pending all_reduce_async on the same buffer runs after it") \
    X(A_BLOCKING2,  "a blocking all_reduce behind 5 pending async collectives: results prove it ran last; all requests done when it returns") \
    X(A_GROUP,      "async collectives on a group and on the world in flight at once")                 \
    X(A_BARRIER,    "barrier_async: no rank gets past it before every rank arrived")                    \
    X(A_UNWAITED,   "all_reduce_async on a group never waited on: dist_destroy(group) runs it first (right sum), returns DIST_OK") \
    X(A_PROMPT,     "dist_wait returns as soon as an async collective ends: 30 x all_reduce_async(1 MiB) + wait take at most 2x the blocking calls + 0.25 s") \
    X(RANKS_DONE,   "every rank of both 4-rank jobs ran every step")

DEFINE_CHECKS(CHECKS);

typedef struct check { int pass, fail, claimed; char why[600]; } check_t;

typedef struct shared {
    check_t checks[NCHECKS];
    int done[2][NR];
    int arrive[NR][8];
    int lowest_back;
} shared_t;

static shared_t *g;

/* pass_(id), fail_(id, rank, fmt, ...) and CHECK(id, cond, ...) (testutil.h) */
DEFINE_CHECK_FNS(g->checks)

#define RN(r) dist_result_name(r)
#define EM(d) dist_error_message(d)

/* ---- collectives on a group, judged against its member list ------------------- */

/* Runs a set of collectives and point-to-point on `gc`, whose members are
   the world ranks mem[0..m) (in group-rank order), and checks the answers.
   Returns 1 if all good, else 0 with `why`. */
static int exercise(dist_t *gc, const int *mem, int m, int wrank, int salt, char *why, size_t cap) {
    int me = -1, n = dist_world_size(gc), gr = dist_rank(gc);
    dist_result r;
    for (int i = 0; i < m; i++) if (mem[i] == wrank) me = i;
    if (n != m || gr != me) { snprintf(why, cap, "group rank %d of %d, expected %d of %d", gr, n, me, m); return 0; }
    {   /* all_reduce sum of world rank * 10 + salt, on 3 elements */
        int32_t v[3], want = 0;
        for (int i = 0; i < m; i++) want += mem[i] * 10 + salt;
        for (int i = 0; i < 3; i++) v[i] = wrank * 10 + salt + i;
        r = dist_all_reduce(gc, v, 3, DIST_INT32, DIST_SUM);
        if (r != DIST_OK) { snprintf(why, cap, "all_reduce: %s: %s", RN(r), EM(gc)); return 0; }
        for (int i = 0; i < 3; i++)
            if (v[i] != want + i * m) { snprintf(why, cap, "all_reduce element %d = %d, expected %d", i, v[i], want + i * m); return 0; }
    }
    {   /* max */
        int64_t v = wrank + salt, want = 0;
        for (int i = 0; i < m; i++) if (mem[i] + salt > want) want = mem[i] + salt;
        r = dist_all_reduce(gc, &v, 1, DIST_INT64, DIST_MAX);
        if (r != DIST_OK || v != want) { snprintf(why, cap, "all_reduce max: %s, %lld, expected %lld", RN(r), (long long)v, (long long)want); return 0; }
    }
    {   /* broadcast from the last group rank */
        double v = wrank == mem[m - 1] ? 1000.5 + salt : -1;
        r = dist_broadcast(gc, &v, 1, DIST_FLOAT64, m - 1);
        if (r != DIST_OK || v != 1000.5 + salt) { snprintf(why, cap, "broadcast root %d: %s, %g", m - 1, RN(r), v); return 0; }
    }
    {   /* all_gather of world ranks: the members in group-rank order */
        int32_t mine = wrank, all[16];
        for (int i = 0; i < 16; i++) all[i] = -7;
        r = dist_all_gather(gc, &mine, all, 1, DIST_INT32);
        if (r != DIST_OK) { snprintf(why, cap, "all_gather: %s: %s", RN(r), EM(gc)); return 0; }
        for (int i = 0; i < m; i++)
            if (all[i] != mem[i]) { snprintf(why, cap, "all_gather block %d = %d, expected world rank %d", i, all[i], mem[i]); return 0; }
    }
    {   /* reduce_scatter: block j of every member is j + 100 * world rank */
        int32_t send[16], got = -1, want = 0;
        for (int j = 0; j < m; j++) send[j] = j + 100 * wrank;
        for (int i = 0; i < m; i++) want += me + 100 * mem[i];
        r = dist_reduce_scatter(gc, send, &got, 1, DIST_INT32, DIST_SUM);
        if (r != DIST_OK || got != want) { snprintf(why, cap, "reduce_scatter: %s, %d, expected %d", RN(r), got, want); return 0; }
    }
    {   /* gather at group rank 0 */
        int32_t mine = wrank * 3, all[16];
        r = dist_gather(gc, &mine, me == 0 ? all : NULL, 1, DIST_INT32, 0);
        if (r != DIST_OK) { snprintf(why, cap, "gather: %s: %s", RN(r), EM(gc)); return 0; }
        if (me == 0)
            for (int i = 0; i < m; i++)
                if (all[i] != mem[i] * 3) { snprintf(why, cap, "gather block %d = %d, expected %d", i, all[i], mem[i] * 3); return 0; }
    }
    {   /* point-to-point in group ranks: to the next, from the previous */
        int32_t out = wrank * 1000 + salt, in = -1;
        int to = (me + 1) % m, from = (me + m - 1) % m;
        dist_req_t *rq = NULL;
        r = dist_irecv(gc, &in, 1, DIST_INT32, from, 5 + salt, &rq);
        if (r == DIST_OK) r = dist_send(gc, &out, 1, DIST_INT32, to, 5 + salt);
        if (r == DIST_OK) r = dist_wait(rq);
        else if (rq) dist_wait(rq);
        if (r != DIST_OK || in != mem[from] * 1000 + salt) {
            snprintf(why, cap, "send/recv: %s, got %d from group rank %d, expected %d (%s)", RN(r), in, from, mem[from] * 1000 + salt, EM(gc));
            return 0;
        }
        if (m > 1) {   /* an out-of-range group rank is refused */
            r = dist_send(gc, &out, 1, DIST_INT32, m, 1);
            if (r != DIST_ERR_INVALID) { snprintf(why, cap, "send to group rank %d (out of range): %s", m, RN(r)); return 0; }
        }
    }
    return 1;
}

static int sorted_members(const int *ranks, int n, int *out) {
    for (int i = 0; i < n; i++) out[i] = ranks[i];
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && out[k - 1] > out[k]; k--) { int t = out[k]; out[k] = out[k - 1]; out[k - 1] = t; }
    return n;
}

static int contains(const int *a, int n, int x) { for (int i = 0; i < n; i++) if (a[i] == x) return 1; return 0; }

/* Makes a group of the world with `ranks`, checks NULL-ness, runs the
   exercise on members.  Returns the group (NULL for non-members). */
static dist_t *make_and_check(dist_t *parent, const int *ranks, int n, const int *world_of_parent, int id, int salt, int check_now) {
    int rank = dist_rank(parent), wrank = world_of_parent ? world_of_parent[rank] : rank;
    dist_t *gc = (dist_t *)0x1;
    int mem[16], wmem[16];
    char why[400];
    dist_result r = dist_new_group(parent, n, ranks, &gc);
    int member = contains(ranks, n, rank);
    rank = wrank;   /* CHECK reports world ranks */
    if (r != DIST_OK) { fail_(id, rank, "dist_new_group: %s: %s", RN(r), EM(parent)); return NULL; }
    if (!member) { CHECK(id, gc == NULL, "a non-member got a communicator"); return NULL; }
    if (!gc) { fail_(id, rank, "a member got NULL"); return NULL; }
    sorted_members(ranks, n, mem);
    for (int i = 0; i < n; i++) wmem[i] = world_of_parent ? world_of_parent[mem[i]] : mem[i];
    if (check_now) {
        int good = exercise(gc, wmem, n, wrank, salt, why, sizeof why);
        CHECK(id, good, "%s", why);
    }
    return gc;
}

/* ---- threads driving one group each ---------------------------------------------- */

typedef struct targ {
    dist_t *gc;
    const int *mem;
    int m, wrank, iters, salt;
    int good;
    char why[400];
} targ_t;

static void *thread_main(void *p) {
    targ_t *t = (targ_t *)p;
    t->good = 1;
    for (int it = 0; it < t->iters && t->good; it++) {
        size_t count = it % 4 == 3 ? 20000 : 16;    /* 80 KB: the ring algorithm */
        int32_t *buf = (int32_t *)malloc(count * sizeof *buf);
        dist_result r;
        int rootg = it % t->m;
        if (!buf) { t->good = 0; snprintf(t->why, sizeof t->why, "malloc"); break; }
        for (size_t i = 0; i < count; i++) buf[i] = (int32_t)(t->wrank * 100 + t->salt * 7 + it + (int)(i % 13));
        r = dist_all_reduce(t->gc, buf, count, DIST_INT32, DIST_SUM);
        if (r != DIST_OK) { t->good = 0; snprintf(t->why, sizeof t->why, "iteration %d all_reduce: %s: %s", it, RN(r), EM(t->gc)); }
        for (size_t i = 0; i < count && t->good; i++) {
            int32_t want = 0;
            for (int k = 0; k < t->m; k++) want += t->mem[k] * 100 + t->salt * 7 + it + (int)(i % 13);
            if (buf[i] != want) { t->good = 0; snprintf(t->why, sizeof t->why, "iteration %d all_reduce element %zu = %d, expected %d", it, i, buf[i], want); }
        }
        if (t->good) {   /* then a broadcast from a rotating root */
            for (size_t i = 0; i < count; i++) buf[i] = t->mem[rootg] == t->wrank ? (int32_t)(i * 3 + (size_t)it + (size_t)t->salt) : -1;
            r = dist_broadcast(t->gc, buf, count, DIST_INT32, rootg);
            if (r != DIST_OK) { t->good = 0; snprintf(t->why, sizeof t->why, "iteration %d broadcast: %s: %s", it, RN(r), EM(t->gc)); }
            for (size_t i = 0; i < count && t->good; i++)
                if (buf[i] != (int32_t)(i * 3 + (size_t)it + (size_t)t->salt)) {
                    t->good = 0;
                    snprintf(t->why, sizeof t->why, "iteration %d broadcast element %zu = %d", it, i, buf[i]);
                }
        }
        free(buf);
    }
    return NULL;
}

/* Runs one thread per (group, member list) given; non-NULL groups only. */
static void run_threads(int id, int wrank, dist_t **gcs, const int *const *mems, const int *ms, int k, int iters) {
    pthread_t th[4];
    targ_t ta[4];
    int started[4] = { 0 }, rank = wrank;
    for (int i = 0; i < k; i++) {
        if (!gcs[i]) continue;
        memset(&ta[i], 0, sizeof ta[i]);
        ta[i].gc = gcs[i]; ta[i].mem = mems[i]; ta[i].m = ms[i]; ta[i].wrank = wrank; ta[i].iters = iters; ta[i].salt = i + 1;
        if (pthread_create(&th[i], NULL, thread_main, &ta[i]) != 0) { fail_(id, rank, "pthread_create"); continue; }
        started[i] = 1;
    }
    for (int i = 0; i < k; i++)
        if (started[i]) {
            pthread_join(th[i], NULL);
            CHECK(id, ta[i].good, "thread %d: %s", i, ta[i].why);
        }
}

static void world_check(dist_t *w, int id, int salt) {
    int rank = dist_rank(w), all[NR] = { 0, 1, 2, 3 };
    char why[400];
    int good = exercise(w, all, NR, rank, salt, why, sizeof why);
    CHECK(id, good, "%s", why);
}

static int groups_main(dist_t *w, void *arg) {
    int rank = dist_rank(w);
    dist_result r;
    (void)arg;
    if (dist_world_size(w) != NR) return 3;
    {   /* disjoint: both made by every rank, then used at the same time */
        static const int a[2] = { 0, 1 }, b[2] = { 2, 3 };
        dist_t *ga = make_and_check(w, a, 2, NULL, G_DISJOINT, 1, 0);
        dist_t *gb = make_and_check(w, b, 2, NULL, G_DISJOINT, 2, 0);
        char why[400];
        dist_t *mine = ga ? ga : gb;
        const int *mem = ga ? a : b;
        int good;
        if (mine) {
            good = exercise(mine, mem, 2, rank, ga ? 1 : 2, why, sizeof why);
            CHECK(G_DISJOINT, good, "%s", why);
        }
        CHECK(G_DISJOINT, (ga != NULL) == (rank < 2) && (gb != NULL) == (rank >= 2), "membership: %p %p", (void *)ga, (void *)gb);
        if (ga) { r = dist_destroy(ga); CHECK(G_DESTROY, r == DIST_OK, "destroy {0,1}: %s", RN(r)); }
        if (gb) { r = dist_destroy(gb); CHECK(G_DESTROY, r == DIST_OK, "destroy {2,3}: %s", RN(r)); }
    }
    {   /* overlapping: every rank runs A's checks, then B's */
        static const int a[3] = { 0, 1, 2 }, b[3] = { 1, 2, 3 };
        dist_t *ga = make_and_check(w, a, 3, NULL, G_OVERLAP, 3, 1);
        dist_t *gb = make_and_check(w, b, 3, NULL, G_OVERLAP, 4, 1);
        const int *mems[2] = { a, b };
        int ms[2] = { 3, 3 };
        dist_t *gcs[2];
        gcs[0] = ga; gcs[1] = gb;
        /* then both at once, from two threads on ranks 1 and 2 */
        run_threads(G_THREADS_OV, rank, gcs, mems, ms, 2, 40);
        if (ga) { r = dist_destroy(ga); CHECK(G_DESTROY, r == DIST_OK, "destroy {0,1,2}: %s", RN(r)); }
        if (gb) { r = dist_destroy(gb); CHECK(G_DESTROY, r == DIST_OK, "destroy {1,2,3}: %s", RN(r)); }
    }
    {   /* a single rank */
        static const int a[1] = { 2 };
        dist_t *ga = make_and_check(w, a, 1, NULL, G_SINGLE, 5, 1);
        if (ga) {
            float v[4] = { 1.5f, 2.5f, 3.5f, 4.5f }, out[4] = { 0 };
            r = dist_all_reduce(ga, v, 4, DIST_FLOAT32, DIST_AVG);
            CHECK(G_SINGLE, r == DIST_OK && v[0] == 1.5f && v[3] == 4.5f, "avg over one rank: %s, %g %g", RN(r), v[0], v[3]);
            r = dist_all_to_all(ga, v, out, 4, DIST_FLOAT32);
            CHECK(G_SINGLE, r == DIST_OK && memcmp(v, out, sizeof v) == 0, "all_to_all over one rank: %s", RN(r));
            r = dist_barrier(ga);
            CHECK(G_SINGLE, r == DIST_OK, "barrier: %s", RN(r));
            r = dist_destroy(ga);
            CHECK(G_DESTROY, r == DIST_OK, "destroy {2}: %s", RN(r));
        }
    }
    {   /* out of order */
        static const int a[3] = { 3, 0, 2 };
        dist_t *ga = make_and_check(w, a, 3, NULL, G_UNSORTED, 6, 1);
        if (ga) {
            static const int want[4] = { 0, -1, 1, 2 };
            CHECK(G_UNSORTED, dist_rank(ga) == want[rank], "world rank %d is group rank %d, expected %d", rank, dist_rank(ga), want[rank]);
            r = dist_destroy(ga);
            CHECK(G_DESTROY, r == DIST_OK, "destroy {3,0,2}: %s", RN(r));
        } else {
            CHECK(G_UNSORTED, rank == 1, "world rank %d got NULL", rank);
        }
    }
    {   /* a group of a group: {1,2,3}, then its group ranks {0,2} = world {1,3} */
        static const int a[3] = { 1, 2, 3 }, inner[2] = { 2, 0 };
        dist_t *ga = make_and_check(w, a, 3, NULL, G_NESTED, 7, 0);
        if (ga) {
            static const int world_of_a[3] = { 1, 2, 3 };
            dist_t *gi = make_and_check(ga, inner, 2, world_of_a, G_NESTED, 8, 1);
            CHECK(G_NESTED, (gi != NULL) == (rank == 1 || rank == 3), "world rank %d: inner group %p", rank, (void *)gi);
            if (gi) {
                CHECK(G_NESTED, dist_rank(gi) == (rank == 1 ? 0 : 1) && dist_world_size(gi) == 2, "inner rank %d of %d", dist_rank(gi), dist_world_size(gi));
                r = dist_destroy(gi);
                CHECK(G_DESTROY, r == DIST_OK, "destroy the inner group: %s", RN(r));
            }
            /* the outer group still works */
            {
                char why[400];
                int good = exercise(ga, world_of_a, 3, rank, 9, why, sizeof why);
                CHECK(G_NESTED, good, "outer group after the inner one: %s", why);
            }
            r = dist_destroy(ga);
            CHECK(G_DESTROY, r == DIST_OK, "destroy {1,2,3}: %s", RN(r));
        }
    }
    world_check(w, G_SAMEWORLD, 10);
    {   /* two groups of everyone, one thread each */
        static const int a[4] = { 0, 1, 2, 3 }, b[4] = { 3, 2, 1, 0 }, sorted[4] = { 0, 1, 2, 3 };
        dist_t *ga = make_and_check(w, a, 4, NULL, G_THREADS, 11, 0);
        dist_t *gb = make_and_check(w, b, 4, NULL, G_THREADS, 12, 0);
        const int *mems[2] = { sorted, sorted };
        int ms[2] = { 4, 4 };
        dist_t *gcs[2];
        gcs[0] = ga; gcs[1] = gb;
        run_threads(G_THREADS, rank, gcs, mems, ms, 2, 60);
        /* the world and a group at once */
        gcs[0] = w; gcs[1] = gb;
        run_threads(G_THREADS_W, rank, gcs, mems, ms, 2, 40);
        if (ga) { r = dist_destroy(ga); CHECK(G_DESTROY, r == DIST_OK, "destroy: %s", RN(r)); }
        /* gb is left to dist_destroy(world) */
    }
    {   /* mismatched member lists */
        static const int three[3] = { 0, 1, 2 }, four[4] = { 0, 1, 2, 3 };
        dist_t *gc = (dist_t *)0x1;
        long t0 = now_ms(), dt;
        r = rank == 3 ? dist_new_group(w, 4, four, &gc) : dist_new_group(w, 3, three, &gc);
        dt = now_ms() - t0;
        if (rank == 3) {
            const char *m = EM(w);
            CHECK(G_MISMATCH, r == DIST_ERR_MISMATCH && gc == NULL, "rank 3 (lists 4 ranks): %s, group %p: %s", RN(r), (void *)gc, m);
            CHECK(G_MISMATCH, strstr(m, "0 1 2 3") && strstr(m, "0 1 2"), "the message does not show both lists: \"%s\"", m);
            CHECK(G_MISMATCH, dt < scaled(3000), "took %ld ms", dt);
        } else {
            char why[400];
            static const int mem[3] = { 0, 1, 2 };
            CHECK(G_AFTER_MM, r == DIST_OK && gc != NULL, "ranks 0-2: %s, group %p: %s", RN(r), (void *)gc, EM(w));
            if (r == DIST_OK && gc) {
                int good = exercise(gc, mem, 3, rank, 13, why, sizeof why);
                CHECK(G_AFTER_MM, good, "the group {0,1,2}: %s", why);
                dist_destroy(gc);
            }
        }
        {   /* a further group: every rank still agrees on the sequence */
            static const int pair[2] = { 0, 3 };
            dist_t *gp = make_and_check(w, pair, 2, NULL, G_AFTER_MM, 14, 1);
            if (gp) dist_destroy(gp);
        }
    }
    world_check(w, G_DESTROY, 15);
    /* Every rank is done with the world before any leaves (an early
       leaver is test_coll_errors' business, not this test's). */
    r = dist_barrier(w);
    CHECK(G_DESTROY, r == DIST_OK, "final barrier: %s: %s", RN(r), EM(w));
    g->done[0][rank] = 1;
    return 0;
}

/* The lowest member's list differs: rank 0 lists {1,2,3} (so it is not a
   member and returns at once); ranks 1-3 list {0,1,2,3} and wait for rank
   0's record, which never comes. */
static int lowest_main(dist_t *w, void *arg) {
    int rank = dist_rank(w);
    static const int all[4] = { 0, 1, 2, 3 }, notme[3] = { 1, 2, 3 };
    dist_t *gc = (dist_t *)0x1;
    long t0 = now_ms(), dt;
    dist_result r;
    (void)arg;
    r = rank == 0 ? dist_new_group(w, 3, notme, &gc) : dist_new_group(w, 4, all, &gc);
    dt = now_ms() - t0;
    if (rank == 0) CHECK(G_LOWEST, r == DIST_OK && gc == NULL, "rank 0 (not a member by its list): %s, %p", RN(r), (void *)gc);
    else {
        int tmo = dist_timeout_ms(w);
        CHECK(G_LOWEST, r != DIST_OK && gc == NULL, "returned %s with group %p", RN(r), (void *)gc);
        CHECK(G_LOWEST, dt < tmo + scaled(3000), "took %ld ms (the timeout is %d ms)", dt, tmo);
        CHECK(G_LOWEST, r == DIST_ERR_MISMATCH, "returned %s after %ld ms (the timeout is %d ms), not DIST_ERR_MISMATCH: \"%s\"", RN(r), dt, tmo, EM(w));
        if (gc && gc != (dist_t *)0x1) dist_destroy(gc);
        __atomic_add_fetch(&g->lowest_back, 1, __ATOMIC_SEQ_CST);
    }
    if (rank == 0) {   /* wait (bounded) until the others are back, so the all_reduce below does not time out */
        long until = now_ms() + scaled(20000);
        while (__atomic_load_n(&g->lowest_back, __ATOMIC_SEQ_CST) < NR - 1 && now_ms() < until) sleep_ms(5);
    }
    /* every rank meets again */
    {
        int32_t v = 1;
        r = dist_all_reduce(w, &v, 1, DIST_INT32, DIST_SUM);
        CHECK(G_LOWEST, r == DIST_OK && v == 4, "the world afterwards: %s, %d", RN(r), v);
    }
    return 0;
}

/* ---- async ----------------------------------------------------------------------- */

enum { K_BCAST, K_REDUCE, K_ALLRED, K_GATHER, K_ALLGATHER, K_SCATTER, K_REDSCAT, K_ALLTOALL, K_BARRIER, K_N };
static const char *knames[K_N] = { "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter", "reduce_scatter", "all_to_all", "barrier" };

/* One async collective: inputs, the call, and the judge.  Values are
   int32: rank r's element i of block b is v(r, b, i). */
typedef struct aop {
    int kind;
    size_t count;
    int root;
    int32_t *send, *recv;
    dist_req_t *req;
} aop_t;

static int32_t v(int salt, int r, int b, size_t i) { return (int32_t)(salt * 1000003 + r * 10007 + b * 101 + (int)(i % 1000)); }

static void aop_setup(aop_t *o, int kind, size_t count, int root, int me, int n, int salt) {
    memset(o, 0, sizeof *o);
    o->kind = kind; o->count = count; o->root = root;
    o->send = (int32_t *)malloc(count * (size_t)n * sizeof(int32_t) + 4);
    o->recv = (int32_t *)malloc(count * (size_t)n * sizeof(int32_t) + 4);
    for (int b = 0; b < n; b++)
        for (size_t i = 0; i < count; i++) {
            o->send[(size_t)b * count + i] = v(salt, me, b, i);
            o->recv[(size_t)b * count + i] = -5;
        }
}

static dist_result aop_start(aop_t *o, dist_t *w) {
    int32_t *s = o->send, *rv = o->recv;
    switch (o->kind) {
    case K_BCAST: return dist_broadcast_async(w, s, o->count, DIST_INT32, o->root, &o->req);
    case K_REDUCE: return dist_reduce_async(w, s, o->count, DIST_INT32, DIST_SUM, o->root, &o->req);
    case K_ALLRED: return dist_all_reduce_async(w, s, o->count, DIST_INT32, DIST_SUM, &o->req);
    case K_GATHER: return dist_gather_async(w, s, rv, o->count, DIST_INT32, o->root, &o->req);
    case K_ALLGATHER: return dist_all_gather_async(w, s, rv, o->count, DIST_INT32, &o->req);
    case K_SCATTER: return dist_scatter_async(w, s, rv, o->count, DIST_INT32, o->root, &o->req);
    case K_REDSCAT: return dist_reduce_scatter_async(w, s, rv, o->count, DIST_INT32, DIST_SUM, &o->req);
    case K_ALLTOALL: return dist_all_to_all_async(w, s, rv, o->count, DIST_INT32, &o->req);
    default: return dist_barrier_async(w, &o->req);
    }
}

/* Checks this rank's result; returns 1 if right. */
static int aop_judge(const aop_t *o, int me, int n, int salt, char *why, size_t cap) {
    size_t c = o->count;
    for (size_t i = 0; i < c; i++) {
        int32_t want = 0, got = 0;
        const char *what = "";
        switch (o->kind) {
        case K_BCAST: got = o->send[i]; want = v(salt, o->root, 0, i); what = "buf"; break;
        case K_REDUCE:
            got = o->send[i]; what = "buf";
            if (me == o->root) for (int r = 0; r < n; r++) want += v(salt, r, 0, i);
            else want = v(salt, me, 0, i);
            break;
        case K_ALLRED: got = o->send[i]; what = "buf"; for (int r = 0; r < n; r++) want += v(salt, r, 0, i); break;
        case K_GATHER:
            if (me != o->root) return 1;
            for (int b = 0; b < n; b++)
                if (o->recv[(size_t)b * c + i] != v(salt, b, 0, i)) {
                    snprintf(why, cap, "%s: recv block %d element %zu = %d, expected %d", knames[o->kind], b, i, o->recv[(size_t)b * c + i], v(salt, b, 0, i));
                    return 0;
                }
            continue;
        case K_ALLGATHER:
            for (int b = 0; b < n; b++)
                if (o->recv[(size_t)b * c + i] != v(salt, b, 0, i)) {
                    snprintf(why, cap, "%s: recv block %d element %zu = %d, expected %d", knames[o->kind], b, i, o->recv[(size_t)b * c + i], v(salt, b, 0, i));
                    return 0;
                }
            continue;
        case K_SCATTER: got = o->recv[i]; want = v(salt, o->root, me, i); what = "recv"; break;
        case K_REDSCAT: got = o->recv[i]; what = "recv"; for (int r = 0; r < n; r++) want += v(salt, r, me, i); break;
        case K_ALLTOALL:
            for (int b = 0; b < n; b++)
                if (o->recv[(size_t)b * c + i] != v(salt, b, me, i)) {
                    snprintf(why, cap, "%s: recv block %d element %zu = %d, expected %d", knames[o->kind], b, i, o->recv[(size_t)b * c + i], v(salt, b, me, i));
                    return 0;
                }
            continue;
        default: return 1;
        }
        if (got != want) { snprintf(why, cap, "%s count %zu: %s element %zu = %d, expected %d", knames[o->kind], c, what, i, got, want); return 0; }
    }
    return 1;
}

static void aop_free(aop_t *o) { free(o->send); free(o->recv); }

static int async_main(dist_t *w, void *arg) {
    int rank = dist_rank(w), n = dist_world_size(w), salt = 1;
    dist_result r;
    char why[400];
    (void)arg;
    if (n != NR) return 3;
    /* each twin via dist_wait, then via dist_test polling */
    for (int mode = 0; mode < 2; mode++)
        for (int k = 0; k < K_N; k++)
            for (int ci = 0; ci < 2; ci++) {
                aop_t o;
                size_t count = ci ? 40000 : 1000;
                int id = mode ? A_TEST : A_WAIT, root = (k + ci) % n;
                salt++;
                aop_setup(&o, k, count, root, rank, n, salt);
                r = aop_start(&o, w);
                if (r != DIST_OK || !o.req) { fail_(id, rank, "%s_async: %s, req %p: %s", knames[k], RN(r), (void *)o.req, EM(w)); aop_free(&o); continue; }
                if (mode == 0) {
                    r = dist_wait(o.req);
                } else {
                    int done = 0, polls = 0;
                    long deadline = now_ms() + scaled(30000);
                    while (!done && (r = dist_test(o.req, &done)) == DIST_OK && now_ms() < deadline) { polls++; if (!done) sleep_ms(polls % 10 == 0); }
                    if (r == DIST_OK && !done) r = DIST_ERR_TIMEOUT;
                    if (done || r != DIST_ERR_TIMEOUT) {
                        dist_result r2 = dist_wait(o.req);   /* frees it */
                        if (r == DIST_OK) r = r2;
                    }
                }
                if (r != DIST_OK) fail_(id, rank, "%s_async count %zu: %s: %s", knames[k], count, RN(r), EM(w));
                else {
                    int good = aop_judge(&o, rank, n, salt, why, sizeof why);
                    CHECK(id, good, "%s", why);
                }
                aop_free(&o);
            }
    {   /* 10 in flight, waited in reverse order */
        aop_t o[10];
        int started = 1;
        for (int i = 0; i < 10; i++) {
            aop_setup(&o[i], K_ALLRED, i % 3 == 2 ? 30000 : (size_t)(i + 1) * 7, 0, rank, n, 100 + i);
            if ((r = aop_start(&o[i], w)) != DIST_OK) { fail_(A_ORDER, rank, "all_reduce_async %d: %s", i, RN(r)); started = 0; }
        }
        if (started) {
            r = dist_wait(o[9].req);
            CHECK(A_ORDER, r == DIST_OK, "wait for the 10th: %s: %s", RN(r), EM(w));
            for (int i = 8; i >= 0; i--) {
                int done = 0;
                r = dist_test(o[i].req, &done);
                CHECK(A_ORDER, r == DIST_OK && done, "after the 10th completed, request %d: %s, done %d", i, RN(r), done);
                r = dist_wait(o[i].req);
                CHECK(A_ORDER, r == DIST_OK, "wait %d: %s", i, RN(r));
            }
            for (int i = 0; i < 10; i++) {
                int good = aop_judge(&o[i], rank, n, 100 + i, why, sizeof why);
                CHECK(A_ORDER, good, "request %d: %s", i, why);
            }
        }
        for (int i = 0; i < 10; i++) aop_free(&o[i]);
    }
    {   /* interleaved with point-to-point on the same communicator */
        aop_t o[3];
        int32_t out[2][64], in[2][64];
        dist_req_t *reqs[7] = { 0 };
        int right = (rank + 1) % n, left = (rank + n - 1) % n, good = 1;
        for (int m = 0; m < 2; m++) for (int i = 0; i < 64; i++) { out[m][i] = rank * 1000 + m * 100 + i; in[m][i] = -1; }
        aop_setup(&o[0], K_ALLRED, 5000, 0, rank, n, 200);
        aop_setup(&o[1], K_BCAST, 3000, 2, rank, n, 201);
        aop_setup(&o[2], K_ALLTOALL, 700, 0, rank, n, 202);
        r = aop_start(&o[0], w);
        if (r == DIST_OK) r = dist_irecv(w, in[0], 64, DIST_INT32, left, 31, &reqs[3]);
        if (r == DIST_OK) r = dist_isend(w, out[0], 64, DIST_INT32, right, 31, &reqs[4]);
        if (r == DIST_OK) r = aop_start(&o[1], w);
        if (r == DIST_OK) r = dist_isend(w, out[1], 64, DIST_INT32, left, 32, &reqs[5]);
        if (r == DIST_OK) r = dist_irecv(w, in[1], 64, DIST_INT32, right, 32, &reqs[6]);
        if (r == DIST_OK) r = aop_start(&o[2], w);
        reqs[0] = o[0].req; reqs[1] = o[1].req; reqs[2] = o[2].req;
        if (r != DIST_OK) { fail_(A_P2P, rank, "posting: %s: %s", RN(r), EM(w)); }
        r = dist_wait_all(7, reqs);
        CHECK(A_P2P, r == DIST_OK, "wait_all: %s: %s", RN(r), EM(w));
        for (int i = 0; i < 64 && good; i++)
            if (in[0][i] != left * 1000 + i || in[1][i] != right * 1000 + 100 + i) {
                good = 0;
                fail_(A_P2P, rank, "point-to-point element %d: %d and %d", i, in[0][i], in[1][i]);
            }
        for (int i = 0; i < 3; i++) {
            int ok1 = aop_judge(&o[i], rank, n, 200 + i, why, sizeof why);
            CHECK(A_P2P, ok1, "%s", why);
            aop_free(&o[i]);
        }
    }
    {   /* a blocking call behind a pending async one on the same buffer:
           all_reduce_async(x) then broadcast(x, root 0) must give the sum
           everywhere; the other order would give n * rank 0's value */
        int32_t x[1000];
        dist_req_t *q = NULL;
        int good = 1, done = 0;
        for (int i = 0; i < 1000; i++) x[i] = rank * 3 + 1 + i;
        r = dist_all_reduce_async(w, x, 1000, DIST_INT32, DIST_SUM, &q);
        if (r == DIST_OK) r = dist_broadcast(w, x, 1000, DIST_INT32, 0);
        CHECK(A_BLOCKING, r == DIST_OK, "%s: %s", RN(r), EM(w));
        for (int i = 0; i < 1000 && good; i++) {
            int32_t sum = 0;
            for (int k = 0; k < n; k++) sum += k * 3 + 1 + i;
            if (x[i] != sum) { good = 0; fail_(A_BLOCKING, rank, "element %d = %d: expected the sum %d (n x rank 0's value would be %d)", i, x[i], sum, n * (1 + i)); }
        }
        if (q) {
            r = dist_test(q, &done);
            CHECK(A_BLOCKING, r == DIST_OK && done, "the async request is not done after the blocking call returned: %s %d", RN(r), done);
            dist_wait(q);
        }
        if (good) pass_(A_BLOCKING);
    }
    {   /* 5 pending, then a blocking all_reduce that depends on the last of them */
        int64_t a[5][300];
        dist_req_t *q[5] = { 0 };
        int good = 1;
        for (int k = 0; k < 5; k++) for (int i = 0; i < 300; i++) a[k][i] = rank + k + i;
        /* each async all_reduce sums a[k]; then a blocking all_reduce MAX on
           a[4]: after the sum it leaves the sum; had it run first, a[4]
           would end as n x the maximum instead */
        for (int k = 0; k < 5 && good; k++) {
            r = dist_all_reduce_async(w, a[k], 300, DIST_INT64, DIST_SUM, &q[k]);
            if (r != DIST_OK) { good = 0; fail_(A_BLOCKING2, rank, "async %d: %s", k, RN(r)); }
        }
        if (good) {
            r = dist_all_reduce(w, a[4], 300, DIST_INT64, DIST_MAX);
            CHECK(A_BLOCKING2, r == DIST_OK, "blocking all_reduce: %s: %s", RN(r), EM(w));
            for (int k = 0; k < 5; k++) {
                int done = 0;
                dist_result rt = dist_test(q[k], &done);
                CHECK(A_BLOCKING2, rt == DIST_OK && done, "async %d not done when the blocking call returned: %s %d", k, RN(rt), done);
            }
        }
        for (int k = 0; k < 5; k++) if (q[k]) { r = dist_wait(q[k]); CHECK(A_BLOCKING2, r == DIST_OK, "wait %d: %s", k, RN(r)); }
        for (int k = 0; k < 5 && good; k++)
            for (int i = 0; i < 300; i++) {
                int64_t want = 0;
                for (int rr = 0; rr < n; rr++) want += rr + k + i;
                if (a[k][i] != want) { good = 0; fail_(A_BLOCKING2, rank, "a[%d][%d] = %lld, expected %lld", k, i, (long long)a[k][i], (long long)want); break; }
            }
        if (good) pass_(A_BLOCKING2);
    }
    {   /* a group and the world at once */
        static const int all[4] = { 0, 1, 2, 3 };
        dist_t *gc = NULL;
        r = dist_new_group(w, 4, all, &gc);
        if (r != DIST_OK || !gc) fail_(A_GROUP, rank, "new_group: %s", RN(r));
        else {
            aop_t o[4];
            aop_setup(&o[0], K_ALLRED, 20000, 0, rank, n, 300);
            aop_setup(&o[1], K_ALLGATHER, 500, 0, rank, n, 301);
            aop_setup(&o[2], K_REDSCAT, 20000, 0, rank, n, 302);
            aop_setup(&o[3], K_BCAST, 500, 3, rank, n, 303);
            r = aop_start(&o[0], gc);
            if (r == DIST_OK) r = aop_start(&o[1], w);
            if (r == DIST_OK) r = aop_start(&o[2], gc);
            if (r == DIST_OK) r = aop_start(&o[3], w);
            CHECK(A_GROUP, r == DIST_OK, "start: %s", RN(r));
            for (int i = 3; i >= 0; i--) if (o[i].req) { r = dist_wait(o[i].req); CHECK(A_GROUP, r == DIST_OK, "wait %d: %s", i, RN(r)); }
            for (int i = 0; i < 4; i++) {
                int good = aop_judge(&o[i], rank, n, 300 + i, why, sizeof why);
                CHECK(A_GROUP, good, "%s", why);
                aop_free(&o[i]);
            }
            r = dist_destroy(gc);
            CHECK(A_GROUP, r == DIST_OK, "destroy: %s", RN(r));
        }
    }
    {   /* never waited on: the group's dist_destroy finishes it */
        static const int all[4] = { 0, 1, 2, 3 };
        dist_t *gc = NULL;
        int32_t x[2000];
        dist_req_t *q = NULL;
        for (int i = 0; i < 2000; i++) x[i] = rank * 2 + i;
        r = dist_new_group(w, 4, all, &gc);
        if (r == DIST_OK && gc) r = dist_all_reduce_async(gc, x, 2000, DIST_INT32, DIST_SUM, &q);
        if (r == DIST_OK && gc) r = dist_destroy(gc);   /* q is reclaimed, never waited on */
        CHECK(A_UNWAITED, r == DIST_OK && gc, "%s (group %p)", RN(r), (void *)gc);
        if (r == DIST_OK) {
            int good = 1;
            for (int i = 0; i < 2000 && good; i++)
                if (x[i] != 2 * (0 + 1 + 2 + 3) + 4 * i) { good = 0; fail_(A_UNWAITED, rank, "element %d = %d after the destroy", i, x[i]); }
            if (good) pass_(A_UNWAITED);
        }
    }
    {   /* promptness: the caller waiting in dist_wait may be the one
           driving (asleep in poll() for up to 100 ms) when the
           communicator's worker thread finishes the collective; it must
           be woken then, not when its poll times out */
        enum { ROUNDS = 30, CNT = 262144 };
        float *x = (float *)calloc(CNT, sizeof(float));
        int64_t t_block = 0, t_async = 0, t;
        for (int mode = 0; mode < 2 && x; mode++)
            for (int i = 0; i < ROUNDS; i++) {
                dist_req_t *q = NULL;
                if ((r = dist_barrier(w)) != DIST_OK) break;
                t = now_ns() / 1000;
                if (mode == 0) r = dist_all_reduce(w, x, CNT, DIST_FLOAT32, DIST_SUM);
                else if ((r = dist_all_reduce_async(w, x, CNT, DIST_FLOAT32, DIST_SUM, &q)) == DIST_OK) r = dist_wait(q);
                t = now_ns() / 1000 - t;
                if (r != DIST_OK) break;
                if (mode == 0) t_block += t; else t_async += t;
            }
        CHECK(A_PROMPT, x && r == DIST_OK && t_async <= 2 * t_block + scaled(250) * (int64_t)1000,
              "%s: %d rounds took %.1f ms blocking, %.1f ms async + wait: %s", x ? RN(r) : "out of memory", ROUNDS, t_block / 1e3,
              t_async / 1e3, r == DIST_OK ? "async waits overslept" : EM(w));
        free(x);
    }
    {   /* barrier_async */
        for (int k = 0; k < 6; k++) {
            dist_req_t *q = NULL;
            int missing = -1;
            sleep_ms(((rank * 5 + k * 3) % 4) * 5);
            __atomic_store_n(&g->arrive[rank][k], 1, __ATOMIC_SEQ_CST);
            r = dist_barrier_async(w, &q);
            if (r == DIST_OK) r = dist_wait(q);
            for (int p = 0; p < n && missing < 0; p++) if (!__atomic_load_n(&g->arrive[p][k], __ATOMIC_SEQ_CST)) missing = p;
            CHECK(A_BARRIER, r == DIST_OK && missing < 0, "round %d: %s, rank %d had not arrived", k, RN(r), missing);
        }
    }
    g->done[1][rank] = 1;
    return 0;
}

int main(void) {
    dist_config cfg;
    int failures = 0, rc1, rc2, rc3;
    long t0;
    test_start();
    UNSET_ENV(LAUNCHER_ENV, "DIST_ALGO");
    g = (shared_t *)mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED) { perror("mmap"); return 1; }
    if (first_process()) memset(g, 0, sizeof *g);      /* (Windows: not again in each job's processes) */

    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 30000;
    t0 = now_ms();
    rc1 = spawn_job(NR, groups_main, NULL, &cfg);
    printf("       (groups job: dist_spawn returned %d after %.1f s%s%s)\n", rc1, (now_ms() - t0) / 1000.0, rc1 ? ": " : "", rc1 ? dist_error_message(NULL) : "");
    t0 = now_ms();
    rc2 = spawn_job(NR, async_main, NULL, &cfg);
    printf("       (async job: dist_spawn returned %d after %.1f s%s%s)\n", rc2, (now_ms() - t0) / 1000.0, rc2 ? ": " : "", rc2 ? dist_error_message(NULL) : "");
    cfg.timeout_ms = scaled(3000);
    t0 = now_ms();
    rc3 = spawn_job(NR, lowest_main, NULL, &cfg);
    printf("       (lowest-member job, 3 s timeout: dist_spawn returned %d after %.1f s%s%s)\n", rc3, (now_ms() - t0) / 1000.0,
           rc3 ? ": " : "", rc3 ? dist_error_message(NULL) : "");

    for (int j = 0; j < 2; j++)
        for (int r = 0; r < NR; r++) {
            if (g->done[j][r]) pass_(RANKS_DONE);
            else fail_(RANKS_DONE, r, "did not reach the end of the %s job (dist_spawn returned %d)", j ? "async" : "groups", j ? rc2 : rc1);
        }
    for (int i = 0; i < NCHECKS; i++) {
        const check_t *c = &g->checks[i];
        if (c->fail) { printf("FAIL %s: %s (%d of %d failed)\n", check_names[i], c->why, c->fail, c->fail + c->pass); failures++; }
        else if (c->pass == 0) { printf("FAIL %s: never checked\n", check_names[i]); failures++; }
        else printf("ok   %s  [%d]\n", check_names[i], c->pass);
    }
    if (rc1 != 0) { printf("FAIL the groups job: dist_spawn returned %d\n", rc1); failures++; }
    if (rc2 != 0) { printf("FAIL the async job: dist_spawn returned %d\n", rc2); failures++; }
    if (rc3 != 0) { printf("FAIL the lowest-member job: dist_spawn returned %d\n", rc3); failures++; }
    munmap(g, sizeof *g);
    if (failures) { printf("%d check(s) failed\n", failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
