// TIMEOUT: 240
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_p2p.c - point-to-point semantics of dist.h, for world sizes 2,3,4,5,8.

   Every check runs in its own dist_spawn (so a failing check cannot leave
   stray messages or a desynchronised rank behind for the next one) and is
   reported on one line:  "ok   n=4 ordering (0.05 s)"  or  "FAIL n=4 ...".
   Ranks report failures through a MAP_SHARED mapping made before
   dist_spawn forks; the parent prints them.  Every payload is checked
   against a reference the receiver computes itself (a seeded xorshift
   keyed by sender and purpose), never against a copy of the sent buffer.

   Usage: test_p2p [CHECK-SUBSTRING]   (runs only the matching checks) */
/* The implementation in this file, not linked from tests/impl_dist.c: make valgrind runs it, in 142 s built alone and 343 s linked (two CI runs, not side by side). */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/* How long a dist_test loop may spin before a check fails (20 s x
   DIST_TIMEOUT_SCALE; valgrind runs with 10). */
static double g_limit_s = 20;

#define MAXR 8

/* ---- shared failure reports ------------------------------------------- */
typedef struct {
    atomic_int claimed[MAXR];   /* first failure of each rank wins */
    char msg[MAXR][768];
    char note[MAXR][256];       /* informational, printed on success too */
} shared_t;
static shared_t *sh;

/* FAIL(...) and OK(call) (testutil.h): each rank's first failure */
DEFINE_FAIL_AT(MAXR, &sh->claimed[rank], sh->msg[rank])
#define EXPECT(cond, ...)                                  \
    do {                                                   \
        if (!(cond)) return FAIL(__VA_ARGS__);             \
    } while (0)

/* ---- reference data ----------------------------------------------------- */
/* Byte patterns: fill_bytes(buf, n, seed), and check_bytes(), the index of
   the first byte that differs from it or SIZE_MAX (testutil.h). */
static uint64_t seed_of(uint64_t a, uint64_t b, uint64_t c) {
    return mix64(mix64(mix64(a) ^ b) ^ c) | 1;
}
static uint64_t xs_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

#define RANK_SETUP()                                     \
    int rank = dist_rank(w), n = dist_world_size(w);     \
    int right = (rank + 1) % n, left = (rank + n - 1) % n; \
    (void)arg; (void)right; (void)left; (void)n

/* ---- ordering ------------------------------------------------------------
   Rank 0 sends 2000 sequence-numbered messages on one tag to every other
   rank: the first 1000 with blocking dist_send, the next 1000 as isends all
   in flight at once.  Receivers take the first 1000 with blocking recv and
   post the next 1000 irecvs at once; everything must arrive in order. */
#define ORD_N 2000
static int t_ordering(dist_t *w, void *arg) {
    RANK_SETUP();
    const int half = ORD_N / 2, tag = 7;
    int32_t(*buf)[2] = malloc(sizeof *buf * ORD_N);
    dist_req_t **reqs = malloc(sizeof *reqs * (size_t)ORD_N * (size_t)n);
    if (!buf || !reqs) return FAIL("out of memory");
    if (rank == 0) {
        for (int i = 0; i < ORD_N; i++) { buf[i][0] = i; buf[i][1] = i * 7 + 1; }
        for (int i = 0; i < half; i++)
            for (int d = 1; d < n; d++) OK(dist_send(w, buf[i], 2, DIST_INT32, d, tag));
        int k = 0;
        for (int i = half; i < ORD_N; i++)
            for (int d = 1; d < n; d++) OK(dist_isend(w, buf[i], 2, DIST_INT32, d, tag, &reqs[k++]));
        OK(dist_wait_all(k, reqs));
    } else {
        for (int i = 0; i < half; i++) {
            int32_t got[2] = { -1, -1 };
            OK(dist_recv(w, got, 2, DIST_INT32, 0, tag));
            EXPECT(got[0] == i && got[1] == i * 7 + 1, "blocking recv #%d got sequence number %d (%d)", i, got[0], got[1]);
        }
        for (int i = half; i < ORD_N; i++) {
            buf[i][0] = buf[i][1] = -1;
            OK(dist_irecv(w, buf[i], 2, DIST_INT32, 0, tag, &reqs[i - half]));
        }
        OK(dist_wait_all(ORD_N - half, reqs));
        for (int i = half; i < ORD_N; i++)
            EXPECT(buf[i][0] == i && buf[i][1] == i * 7 + 1, "irecv #%d got sequence number %d (%d)", i, buf[i][0], buf[i][1]);
    }
    free(buf); free(reqs);
    return 0;
}

/* ---- tags ----------------------------------------------------------------
   Each rank sends tags 1,2,3 (different sizes and contents) to its right;
   it receives from its left in the order 3,1,2. */
static int t_tags(dist_t *w, void *arg) {
    RANK_SETUP();
    int32_t out[3][40], in[40];
    for (int t = 1; t <= 3; t++)
        for (int j = 0; j < 10 * t + 5; j++) out[t - 1][j] = t * 100000 + rank * 1000 + j;
    for (int t = 1; t <= 3; t++) OK(dist_send(w, out[t - 1], (size_t)(10 * t + 5), DIST_INT32, right, t));
    static const int order[3] = { 3, 1, 2 };
    for (int k = 0; k < 3; k++) {
        int t = order[k];
        for (int j = 0; j < 40; j++) in[j] = -1;
        OK(dist_recv(w, in, (size_t)(10 * t + 5), DIST_INT32, left, t));
        for (int j = 0; j < 10 * t + 5; j++)
            EXPECT(in[j] == t * 100000 + left * 1000 + j, "tag %d element %d is %d, expected %d", t, j, in[j],
                   t * 100000 + left * 1000 + j);
        EXPECT(in[10 * t + 5] == -1, "tag %d wrote past its count", t);
    }
    /* the same with irecvs posted before the sends, in the order 2,3,1 */
    dist_req_t *rq[3];
    int32_t in3[3][40];
    static const int order2[3] = { 2, 3, 1 };
    for (int k = 0; k < 3; k++) {
        int t = order2[k];
        OK(dist_irecv(w, in3[t - 1], (size_t)(10 * t + 5), DIST_INT32, left, t + 10, &rq[k]));
    }
    for (int t = 1; t <= 3; t++) OK(dist_send(w, out[t - 1], (size_t)(10 * t + 5), DIST_INT32, right, t + 10));
    OK(dist_wait_all(3, rq));
    for (int t = 1; t <= 3; t++)
        for (int j = 0; j < 10 * t + 5; j++)
            EXPECT(in3[t - 1][j] == t * 100000 + left * 1000 + j, "pre-posted tag %d element %d is %d", t + 10, j,
                   in3[t - 1][j]);
    return 0;
}

/* ---- DIST_ANY_SOURCE ---------------------------------------------------- */
static int check_sources(int rank, int n, const int *seen_src, const int32_t (*payload)[2], int count,
                         const char *what, int line) {
    int seen[MAXR] = { 0 };
    for (int k = 0; k < count; k++) {
        int s = seen_src ? seen_src[k] : payload[k][0];
        if (s < 1 || s >= n) return fail_at(rank, line, "%s: message %d has source %d", what, k, s);
        if (payload[k][0] != s || payload[k][1] != s * 31 + 5)
            return fail_at(rank, line, "%s: dist_req_source says %d, payload says {%d,%d}", what, s, payload[k][0],
                           payload[k][1]);
        if (seen[s]++) return fail_at(rank, line, "%s: source %d seen twice", what, s);
    }
    return 0;
}

static int t_any_source(dist_t *w, void *arg) {
    RANK_SETUP();
    int32_t mine[2] = { rank, rank * 31 + 5 };
    if (rank != 0) {
        int32_t go;
        OK(dist_send(w, mine, 2, DIST_INT32, 0, 10));      /* part 1 */
        OK(dist_send(w, mine, 2, DIST_INT32, 0, 11));      /* part 2 */
        OK(dist_recv(w, &go, 1, DIST_INT32, 0, 13));       /* part 3: after rank 0 posted */
        EXPECT(go == 42, "go message is %d", go);
        OK(dist_send(w, mine, 2, DIST_INT32, 0, 12));
        return 0;
    }
    int32_t got[MAXR][2] = { { 0 } };
    int src[MAXR] = { 0 };
    /* part 1: irecv from any source, dist_test until done, then the source, then wait */
    for (int k = 0; k < n - 1; k++) {
        dist_req_t *r;
        int done = 0;
        double t0 = now_s();
        got[k][0] = got[k][1] = -1;
        OK(dist_irecv(w, got[k], 2, DIST_INT32, DIST_ANY_SOURCE, 10, &r));
        while (!done) {
            OK(dist_test(r, &done));
            EXPECT(now_s() - t0 < g_limit_s, "irecv(ANY_SOURCE) #%d not done after %.0f s", k, g_limit_s);
        }
        src[k] = dist_req_source(r);
        OK(dist_wait(r));
    }
    if (check_sources(rank, n, src, (const int32_t(*)[2])got, n - 1, "irecv ANY_SOURCE", __LINE__)) return 1;
    /* part 2: blocking recv from any source */
    for (int k = 0; k < n - 1; k++) {
        got[k][0] = got[k][1] = -1;
        OK(dist_recv(w, got[k], 2, DIST_INT32, DIST_ANY_SOURCE, 11));
    }
    if (check_sources(rank, n, NULL, (const int32_t(*)[2])got, n - 1, "recv ANY_SOURCE", __LINE__)) return 1;
    /* part 3: all ANY_SOURCE irecvs posted before anything was sent */
    dist_req_t *rq[MAXR];
    for (int k = 0; k < n - 1; k++) {
        got[k][0] = got[k][1] = -1;
        OK(dist_irecv(w, got[k], 2, DIST_INT32, DIST_ANY_SOURCE, 12, &rq[k]));
    }
    int32_t go = 42;
    for (int d = 1; d < n; d++) OK(dist_send(w, &go, 1, DIST_INT32, d, 13));
    double t0 = now_s();
    for (int k = 0; k < n - 1; k++) {
        int done = 0;
        while (!done) {
            OK(dist_test(rq[k], &done));
            EXPECT(now_s() - t0 < g_limit_s, "pre-posted irecv(ANY_SOURCE) #%d not done after %.0f s", k, g_limit_s);
        }
        src[k] = dist_req_source(rq[k]);
    }
    OK(dist_wait_all(n - 1, rq));
    if (check_sources(rank, n, src, (const int32_t(*)[2])got, n - 1, "pre-posted irecv ANY_SOURCE", __LINE__)) return 1;
    return 0;
}

/* ---- 0-byte messages -------------------------------------------------- */
static int t_zero_bytes(dist_t *w, void *arg) {
    RANK_SETUP();
    int32_t x = 5, y = 12345, big[4] = { 0 }, z = 777;
    /* blocking, NULL and non-NULL buffers */
    OK(dist_send(w, NULL, 0, DIST_INT32, right, 20));
    OK(dist_send(w, &x, 0, DIST_FLOAT64, right, 21));
    OK(dist_recv(w, NULL, 0, DIST_INT32, left, 20));
    OK(dist_recv(w, &y, 0, DIST_FLOAT64, left, 21));
    EXPECT(y == 12345, "a 0-byte recv wrote into its buffer (%d)", y);
    /* non-blocking: irecv posted first for one, isend first for the other */
    dist_req_t *rq[4];
    OK(dist_irecv(w, NULL, 0, DIST_UINT8, left, 22, &rq[0]));
    OK(dist_isend(w, NULL, 0, DIST_UINT8, right, 22, &rq[1]));
    OK(dist_isend(w, &x, 0, DIST_BFLOAT16, right, 23, &rq[2]));
    OK(dist_irecv(w, &z, 0, DIST_BFLOAT16, left, 23, &rq[3]));
    OK(dist_wait_all(4, rq));
    EXPECT(z == 777, "a 0-byte irecv wrote into its buffer (%d)", z);
    /* a 0-byte message and a 4-element one on the same tag keep their order */
    int32_t four[4] = { rank, 1, 2, 3 };
    OK(dist_send(w, NULL, 0, DIST_INT32, right, 24));
    OK(dist_send(w, four, 4, DIST_INT32, right, 24));
    OK(dist_recv(w, NULL, 0, DIST_INT32, left, 24));
    OK(dist_recv(w, big, 4, DIST_INT32, left, 24));
    EXPECT(big[0] == left && big[1] == 1 && big[2] == 2 && big[3] == 3, "message after a 0-byte one: {%d,%d,%d,%d}",
           big[0], big[1], big[2], big[3]);
    /* a 0-byte message to itself */
    OK(dist_send(w, NULL, 0, DIST_INT64, rank, 25));
    OK(dist_recv(w, NULL, 0, DIST_INT64, rank, 25));
    return 0;
}

/* ---- every dtype ---------------------------------------------------------- */
#define DT_COUNT 1001
static int t_dtypes(dist_t *w, void *arg) {
    RANK_SETUP();
    static const size_t want_size[DIST_DTYPE_COUNT] = { 1, 1, 4, 8, 2, 2, 4, 8 };
    uint8_t *out[DIST_DTYPE_COUNT], *in[DIST_DTYPE_COUNT];
    for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++) {
        size_t es = dist_dtype_size((dist_dtype)dt);
        EXPECT(es == want_size[dt], "dist_dtype_size(%s) = %zu", dist_dtype_name((dist_dtype)dt), es);
        out[dt] = malloc(es * DT_COUNT);
        in[dt] = malloc(es * DT_COUNT + 16);
        if (!out[dt] || !in[dt]) return FAIL("out of memory");
    }
    for (int pass = 0; pass < 2; pass++) {
        dist_req_t *rq[2 * DIST_DTYPE_COUNT];
        int k = 0;
        for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++) {
            size_t nb = dist_dtype_size((dist_dtype)dt) * DT_COUNT;
            fill_bytes(out[dt], nb, seed_of((uint64_t)rank, (uint64_t)dt, (uint64_t)pass));
            memset(in[dt], 0xEE, nb + 16);
        }
        if (pass == 0) {   /* blocking: send in dtype order, receive in reverse */
            for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++)
                OK(dist_send(w, out[dt], DT_COUNT, (dist_dtype)dt, right, 30 + dt));
            for (int dt = DIST_DTYPE_COUNT - 1; dt >= 0; dt--)
                OK(dist_recv(w, in[dt], DT_COUNT, (dist_dtype)dt, left, 30 + dt));
        } else {           /* non-blocking, all on one tag: order distinguishes them */
            for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++)
                OK(dist_irecv(w, in[dt], DT_COUNT, (dist_dtype)dt, left, 40, &rq[k++]));
            for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++)
                OK(dist_isend(w, out[dt], DT_COUNT, (dist_dtype)dt, right, 40, &rq[k++]));
            OK(dist_wait_all(k, rq));
        }
        for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++) {
            size_t nb = dist_dtype_size((dist_dtype)dt) * DT_COUNT;
            size_t at = check_bytes(in[dt], nb, seed_of((uint64_t)left, (uint64_t)dt, (uint64_t)pass));
            EXPECT(at == SIZE_MAX, "%s %s: byte %zu of %zu differs from rank %d's pattern",
                   pass ? "isend/irecv" : "send/recv", dist_dtype_name((dist_dtype)dt), at, nb, left);
            for (int j = 0; j < 16; j++)
                EXPECT(in[dt][nb + j] == 0xEE, "%s: recv wrote past the end of its buffer", dist_dtype_name((dist_dtype)dt));
        }
    }
    for (int dt = 0; dt < DIST_DTYPE_COUNT; dt++) { free(out[dt]); free(in[dt]); }
    return 0;
}

/* ---- every pair exchanges 4 MiB at once with isend + irecv -------------- */
#define BIG4 ((size_t)4 << 20)
static int t_overlap(dist_t *w, void *arg) {
    RANK_SETUP();
    uint8_t *sb[MAXR] = { 0 }, *rb[MAXR] = { 0 };
    dist_req_t *rq[2 * MAXR];
    int k = 0;
    for (int p = 0; p < n; p++) {
        if (p == rank) continue;
        sb[p] = malloc(BIG4);
        rb[p] = malloc(BIG4);
        if (!sb[p] || !rb[p]) return FAIL("out of memory");
        fill_bytes(sb[p], BIG4, seed_of(100 + (uint64_t)rank, (uint64_t)p, 4));
        memset(rb[p], 0, BIG4);
    }
    for (int i = 1; i < n; i++) {   /* peers in a different order on each rank */
        int p = (rank + i) % n;
        if (rank % 2 == 0) {
            OK(dist_irecv(w, rb[p], BIG4 / 8, DIST_INT64, p, 50, &rq[k++]));
            OK(dist_isend(w, sb[p], BIG4 / 8, DIST_INT64, p, 50, &rq[k++]));
        } else {
            OK(dist_isend(w, sb[p], BIG4 / 8, DIST_INT64, p, 50, &rq[k++]));
            OK(dist_irecv(w, rb[p], BIG4 / 8, DIST_INT64, p, 50, &rq[k++]));
        }
    }
    OK(dist_wait_all(k, rq));
    for (int p = 0; p < n; p++) {
        if (p == rank) continue;
        size_t at = check_bytes(rb[p], BIG4, seed_of(100 + (uint64_t)p, (uint64_t)rank, 4));
        EXPECT(at == SIZE_MAX, "4 MiB from rank %d differs at byte %zu", p, at);
        free(sb[p]); free(rb[p]);
    }
    return 0;
}

/* ---- 1000 receives in flight, sends in shuffled tag order --------------- */
#define MANY 1000
static int t_many(dist_t *w, void *arg) {
    RANK_SETUP();
    int32_t(*in)[4] = malloc(sizeof *in * MANY), (*out)[4] = malloc(sizeof *out * MANY);
    dist_req_t **rq = malloc(sizeof *rq * 2 * MANY);
    int *perm = malloc(sizeof *perm * MANY);
    if (!in || !out || !rq || !perm) return FAIL("out of memory");
    for (int i = 0; i < MANY; i++) {
        in[i][0] = in[i][1] = in[i][2] = in[i][3] = -1;
        OK(dist_irecv(w, in[i], 4, DIST_INT32, right, 1000 + i, &rq[i]));
    }
    uint64_t s = seed_of((uint64_t)rank, 77, 0);
    for (int i = 0; i < MANY; i++) perm[i] = i;
    for (int i = MANY - 1; i > 0; i--) {
        int j = (int)(xs_next(&s) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j]; perm[j] = t;
    }
    for (int i = 0; i < MANY; i++) {
        int tag = 1000 + perm[i];
        out[i][0] = tag; out[i][1] = rank; out[i][2] = tag * 3; out[i][3] = ~tag;
        OK(dist_isend(w, out[i], 4, DIST_INT32, left, tag, &rq[MANY + i]));
    }
    OK(dist_wait_all(2 * MANY, rq));
    for (int i = 0; i < MANY; i++) {
        int tag = 1000 + i;
        EXPECT(in[i][0] == tag && in[i][1] == right && in[i][2] == tag * 3 && in[i][3] == ~tag,
               "irecv for tag %d holds {%d,%d,%d,%d}", tag, in[i][0], in[i][1], in[i][2], in[i][3]);
    }
    free(in); free(out); free(rq); free(perm);
    return 0;
}

/* ---- dist_test polling --------------------------------------------------
   Rank 0 posts an irecv from rank p, tells p it is posted, and polls with
   dist_test (computing in between); p waits 50 ms before it sends.  By
   causality the completion cannot be seen earlier than 50 ms after the
   post. */
#define POLL_N 256
static int t_test_polling(dist_t *w, void *arg) {
    RANK_SETUP();
    int32_t ready = 1;
    double data[POLL_N];
    if (rank != 0) {
        /* Rank 0 serves the ranks in turn: the last waits for all the
           others' turns, longer than the communicator's timeout under
           valgrind, so this wait polls (the watchdog bounds it). */
        dist_req_t *rr;
        int got = 0;
        OK(dist_irecv(w, &ready, 1, DIST_INT32, 0, 61, &rr));
        while (!got) {
            OK(dist_test(rr, &got));
            if (!got) sleep_ms(1);
        }
        OK(dist_wait(rr));
        sleep_ms(50);
        fill_bytes(data, sizeof data, seed_of((uint64_t)rank, 60, 0));
        dist_req_t *r;
        int done = 0;
        OK(dist_isend(w, data, POLL_N, DIST_FLOAT64, 0, 60, &r));
        double t0 = now_s();
        while (!done) {
            OK(dist_test(r, &done));
            EXPECT(now_s() - t0 < g_limit_s, "isend not done after %.0f s of dist_test", g_limit_s);
        }
        OK(dist_wait(r));
        return 0;
    }
    long total_polls = 0, min_polls = LONG_MAX;
    volatile double acc = 0;
    for (int p = 1; p < n; p++) {
        dist_req_t *r;
        int done = 0;
        long polls = 0;
        memset(data, 0, sizeof data);
        double t0 = now_s();
        OK(dist_irecv(w, data, POLL_N, DIST_FLOAT64, p, 60, &r));
        OK(dist_send(w, &ready, 1, DIST_INT32, p, 61));
        while (!done) {
            OK(dist_test(r, &done));
            polls++;
            for (int i = 0; i < 2000; i++) acc = acc * 0.999 + i;   /* "computation" */
            EXPECT(now_s() - t0 < g_limit_s, "irecv from rank %d not done after %.0f s of dist_test", p, g_limit_s);
        }
        double el = now_s() - t0;
        /* 5 ms of slack: a sleep may end early by a timer tick's fraction
           (Windows) and the two ranks read their clocks apart. */
        EXPECT(el >= 0.045, "dist_test said done %.1f ms after the post; the sender waited 50 ms before sending", el * 1e3);
        done = 0;
        OK(dist_test(r, &done));
        EXPECT(done == 1, "dist_test on a completed request says done=%d", done);
        EXPECT(dist_req_source(r) == p, "dist_req_source = %d, expected %d", dist_req_source(r), p);
        OK(dist_wait(r));
        size_t at = check_bytes(data, sizeof data, seed_of((uint64_t)p, 60, 0));
        EXPECT(at == SIZE_MAX, "data from rank %d differs at byte %zu", p, at);
        total_polls += polls;
        if (polls < min_polls) min_polls = polls;
    }
    snprintf(sh->note[0], sizeof sh->note[0], "dist_test polls per message: min %ld, mean %ld", min_polls,
             total_polls / (n - 1));
    return 0;
}

/* ---- send to self ------------------------------------------------------- */
#define SELF_N 100003
static int t_self(dist_t *w, void *arg) {
    RANK_SETUP();
    uint8_t *out = malloc(SELF_N), *in = malloc(SELF_N);
    if (!out || !in) return FAIL("out of memory");
    dist_req_t *r;
    /* isend then recv */
    fill_bytes(out, SELF_N, seed_of((uint64_t)rank, 70, 0));
    memset(in, 0, SELF_N);
    OK(dist_isend(w, out, SELF_N, DIST_UINT8, rank, 70, &r));
    OK(dist_recv(w, in, SELF_N, DIST_UINT8, rank, 70));
    OK(dist_wait(r));
    EXPECT(check_bytes(in, SELF_N, seed_of((uint64_t)rank, 70, 0)) == SIZE_MAX, "isend-to-self then recv: wrong bytes");
    /* irecv then send */
    fill_bytes(out, SELF_N, seed_of((uint64_t)rank, 71, 0));
    memset(in, 0, SELF_N);
    OK(dist_irecv(w, in, SELF_N, DIST_UINT8, rank, 71, &r));
    OK(dist_send(w, out, SELF_N, DIST_UINT8, rank, 71));
    OK(dist_wait(r));
    EXPECT(check_bytes(in, SELF_N, seed_of((uint64_t)rank, 71, 0)) == SIZE_MAX, "irecv-from-self then send: wrong bytes");
    /* blocking send then blocking recv: the send must not wait for the recv */
    fill_bytes(out, SELF_N, seed_of((uint64_t)rank, 72, 0));
    memset(in, 0, SELF_N);
    OK(dist_send(w, out, SELF_N, DIST_UINT8, rank, 72));
    memset(out, 0, SELF_N);   /* the send returned: the buffer may be reused */
    OK(dist_recv(w, in, SELF_N, DIST_UINT8, rank, 72));
    EXPECT(check_bytes(in, SELF_N, seed_of((uint64_t)rank, 72, 0)) == SIZE_MAX,
           "send-to-self then recv: wrong bytes (was the buffer kept by reference?)");
    /* ANY_SOURCE picks up a message from itself */
    int32_t v = rank * 5 + 3, got = -1;
    int done = 0;
    OK(dist_send(w, &v, 1, DIST_INT32, rank, 73));
    OK(dist_irecv(w, &got, 1, DIST_INT32, DIST_ANY_SOURCE, 73, &r));
    double t0 = now_s();
    while (!done) {
        OK(dist_test(r, &done));
        EXPECT(now_s() - t0 < g_limit_s, "irecv(ANY_SOURCE) of a message to self not done");
    }
    EXPECT(dist_req_source(r) == rank, "source of a message to self = %d", dist_req_source(r));
    OK(dist_wait(r));
    EXPECT(got == rank * 5 + 3, "message to self via ANY_SOURCE: %d", got);
    free(out); free(in);
    return 0;
}

/* ---- size mismatch ------------------------------------------------------
   Rank 0 against every other rank s.  The receive expects 999 x float32
   (or the wrong dtype); s sends 1000 x float32.  The receive fails with
   DIST_ERR_MISMATCH naming both counts and s; later messages still arrive. */
static int expect_mismatch(dist_t *w, int rank, dist_result got, int s, const char *want1, const char *want2,
                           const char *what, int line) {
    const char *m = dist_error_message(w);
    char rs[32];
    snprintf(rs, sizeof rs, "rank %d", s);
    if (got != DIST_ERR_MISMATCH)
        return fail_at(rank, line, "%s: returned %s (%s), expected DIST_ERR_MISMATCH", what, dist_result_name(got), m);
    if (!strstr(m, want1) || !strstr(m, want2) || !strstr(m, rs))
        return fail_at(rank, line, "%s: message \"%s\" should mention \"%s\", \"%s\" and \"%s\"", what, m, want1, want2, rs);
    return 0;
}

/* The send side of a mismatched pair: sends are eager, so the sender
   normally cannot know (DIST_OK); the header says a mismatch "fails both",
   so DIST_ERR_MISMATCH is accepted too.  What it got is noted. */
#define SENDER(call)                                                                   \
    do {                                                                               \
        dist_result r_ = (call);                                                       \
        if (r_ != DIST_OK && r_ != DIST_ERR_MISMATCH)                                  \
            return FAIL("%s -> %s: %s", #call, dist_result_name(r_), dist_error_message(w)); \
        if (rank == 1) snprintf(sh->note[0], sizeof sh->note[0], "the mismatched sends returned %s", dist_result_name(r_)); \
    } while (0)

static int t_mismatch(dist_t *w, void *arg) {
    RANK_SETUP();
    float *f = malloc(sizeof(float) * 1000);
    int32_t follow[10], one = 1;
    if (!f) return FAIL("out of memory");
    if (rank != 0) {
        uint64_t sd = seed_of((uint64_t)rank, 80, 0);
        fill_bytes(f, 4000, sd);
        /* A: the receive is posted before the message comes */
        OK(dist_recv(w, &one, 1, DIST_INT32, 0, 81));
        SENDER(dist_send(w, f, 1000, DIST_FLOAT32, 0, 80));
        for (int j = 0; j < 10; j++) follow[j] = rank * 100 + j;
        OK(dist_send(w, follow, 10, DIST_INT32, 0, 82));
        /* B: the message is already there (unexpected) when the receive comes;
           then a correct message on the same tag must be the one received next */
        SENDER(dist_send(w, f, 1000, DIST_FLOAT32, 0, 83));
        OK(dist_send(w, &one, 1, DIST_INT32, 0, 84));
        fill_bytes(f, 4000, seed_of((uint64_t)rank, 83, 1));
        OK(dist_send(w, f, 1000, DIST_FLOAT32, 0, 83));
        /* C: wrong dtype, same count; then a follow-up */
        SENDER(dist_send(w, f, 1000, DIST_FLOAT32, 0, 86));
        OK(dist_send(w, follow, 10, DIST_INT32, 0, 87));
        free(f);
        return 0;
    }
    float *g = malloc(sizeof(float) * 1000);
    if (!g) return FAIL("out of memory");
    for (int s = 1; s < n; s++) {
        dist_req_t *r;
        char what[96];
        /* A */
        OK(dist_irecv(w, f, 999, DIST_FLOAT32, s, 80, &r));
        OK(dist_send(w, &one, 1, DIST_INT32, s, 81));
        snprintf(what, sizeof what, "posted irecv(999) vs send(1000) from rank %d", s);
        if (expect_mismatch(w, rank, dist_wait(r), s, "999", "1000", what, __LINE__)) return 1;
        memset(follow, 0, sizeof follow);
        OK(dist_recv(w, follow, 10, DIST_INT32, s, 82));
        for (int j = 0; j < 10; j++) EXPECT(follow[j] == s * 100 + j, "follow-up after mismatch A: [%d]=%d", j, follow[j]);
        /* B */
        int32_t marker = 0;
        OK(dist_recv(w, &marker, 1, DIST_INT32, s, 84));
        snprintf(what, sizeof what, "recv(999) of a buffered send(1000) from rank %d", s);
        if (expect_mismatch(w, rank, dist_recv(w, f, 999, DIST_FLOAT32, s, 83), s, "999", "1000", what, __LINE__)) return 1;
        memset(g, 0, 4000);
        OK(dist_recv(w, g, 1000, DIST_FLOAT32, s, 83));
        size_t at = check_bytes(g, 4000, seed_of((uint64_t)s, 83, 1));
        EXPECT(at == SIZE_MAX, "the correct message after mismatch B differs at byte %zu (%s)", at,
               check_bytes(g, 4000, seed_of((uint64_t)s, 80, 0)) == SIZE_MAX ? "it is the refused message"
                                                                           : "unknown content");
        /* C */
        snprintf(what, sizeof what, "recv(1000 x int32) of send(1000 x float32) from rank %d", s);
        if (expect_mismatch(w, rank, dist_recv(w, f, 1000, DIST_INT32, s, 86), s, "int32", "float32", what, __LINE__))
            return 1;
        memset(follow, 0, sizeof follow);
        OK(dist_recv(w, follow, 10, DIST_INT32, s, 87));
        for (int j = 0; j < 10; j++) EXPECT(follow[j] == s * 100 + j, "follow-up after mismatch C: [%d]=%d", j, follow[j]);
    }
    free(f); free(g);
    return 0;
}

/* ---- invalid arguments --------------------------------------------------- */
static int expect_invalid(dist_t *w, int rank, dist_result got, const char *what, const char *frag, int line) {
    const char *m = w ? dist_error_message(w) : dist_error_message(NULL);
    if (got != DIST_ERR_INVALID)
        return fail_at(rank, line, "%s returned %s, expected DIST_ERR_INVALID", what, dist_result_name(got));
    if (!m[0]) return fail_at(rank, line, "%s: no error message", what);
    if (frag && !strstr(m, frag)) return fail_at(rank, line, "%s: message \"%s\" does not mention \"%s\"", what, m, frag);
    return 0;
}
#define INVALID(call, frag) \
    do { if (expect_invalid(w, rank, (call), #call, (frag), __LINE__)) return 1; } while (0)
#define INVALID_NOCOMM(call, frag) \
    do { if (expect_invalid(NULL, rank, (call), #call, (frag), __LINE__)) return 1; } while (0)

static int t_invalid(dist_t *w, void *arg) {
    RANK_SETUP();
    int32_t b[4] = { 0 };
    dist_req_t *r = NULL;
    char num[16], num2[16];
    snprintf(num, sizeof num, "%d", n);
    snprintf(num2, sizeof num2, "%d", n + 5);
    /* rank out of range (every call uses tag 90 to `right`, so anything
       wrongly sent would show up in the receive at the end) */
    INVALID(dist_send(w, b, 1, DIST_INT32, n, 90), num);
    INVALID(dist_send(w, b, 1, DIST_INT32, -1, 90), "-1");
    INVALID(dist_send(w, b, 1, DIST_INT32, DIST_ANY_SOURCE, 90), NULL);
    INVALID(dist_isend(w, b, 1, DIST_INT32, n + 5, 90, &r), num2);
    INVALID(dist_recv(w, b, 1, DIST_INT32, n, 90), num);
    INVALID(dist_recv(w, b, 1, DIST_INT32, -2, 90), "-2");
    INVALID(dist_irecv(w, b, 1, DIST_INT32, INT_MAX, 90, &r), NULL);
    INVALID(dist_irecv(w, b, 1, DIST_INT32, -7, 90, &r), "-7");
    /* negative tag */
    INVALID(dist_send(w, b, 1, DIST_INT32, right, -1), "-1");
    INVALID(dist_recv(w, b, 1, DIST_INT32, left, -5), "-5");
    INVALID(dist_isend(w, b, 1, DIST_INT32, right, INT_MIN, &r), "tag");
    INVALID(dist_irecv(w, b, 1, DIST_INT32, left, -3, &r), "-3");
    /* NULL buffer with count > 0 */
    INVALID(dist_send(w, NULL, 4, DIST_INT32, right, 90), "NULL");
    INVALID(dist_recv(w, NULL, 4, DIST_INT32, left, 90), "NULL");
    INVALID(dist_isend(w, NULL, 1, DIST_UINT8, right, 90, &r), "NULL");
    INVALID(dist_irecv(w, NULL, 1, DIST_UINT8, left, 90, &r), "NULL");
    /* bad dtype */
    INVALID(dist_send(w, b, 1, (dist_dtype)DIST_DTYPE_COUNT, right, 90), NULL);
    INVALID(dist_send(w, b, 1, (dist_dtype)99, right, 90), "99");
    INVALID(dist_recv(w, b, 1, (dist_dtype)-1, left, 90), NULL);
    INVALID(dist_isend(w, b, 1, (dist_dtype)1000, right, 90, &r), "1000");
    INVALID(dist_irecv(w, b, 1, (dist_dtype)DIST_DTYPE_COUNT, left, 90, &r), NULL);
    /* NULL request pointer */
    INVALID(dist_isend(w, b, 1, DIST_INT32, right, 90, NULL), "NULL");
    INVALID(dist_irecv(w, b, 1, DIST_INT32, left, 90, NULL), "NULL");
    /* NULL request / communicator / done pointer */
    int done = 7;
    INVALID_NOCOMM(dist_wait(NULL), NULL);
    INVALID_NOCOMM(dist_test(NULL, &done), NULL);
    INVALID_NOCOMM(dist_send(NULL, b, 1, DIST_INT32, 0, 90), NULL);
    INVALID_NOCOMM(dist_recv(NULL, b, 1, DIST_INT32, 0, 90), NULL);
    EXPECT(r == NULL, "a failed isend/irecv returned a request");
    /* dist_test with a NULL `done` on a live request */
    int32_t rv[4] = { -1, -1, -1, -1 }, sv[4] = { rank, 11, 22, 33 };
    OK(dist_irecv(w, rv, 4, DIST_INT32, left, 90, &r));
    INVALID(dist_test(r, NULL), NULL);
    /* after all that the communicator works and nothing extra was sent */
    OK(dist_send(w, sv, 4, DIST_INT32, right, 90));
    OK(dist_wait(r));
    EXPECT(rv[0] == left && rv[1] == 11 && rv[2] == 22 && rv[3] == 33, "message after invalid calls: {%d,%d,%d,%d}", rv[0],
           rv[1], rv[2], rv[3]);
    /* and a second one on the same tag proves no stray message sat in front */
    sv[1] = 44;
    OK(dist_send(w, sv, 4, DIST_INT32, right, 90));
    OK(dist_recv(w, rv, 4, DIST_INT32, left, 90));
    EXPECT(rv[0] == left && rv[1] == 44, "second message after invalid calls: {%d,%d}", rv[0], rv[1]);
    return 0;
}

/* ---- two threads per rank share the communicator ------------------------
   Thread "ping" sends to the right neighbour (tag 100) and waits for the
   answer (tag 101) with blocking calls; thread "pong" answers its left
   neighbour with irecv/isend + dist_wait.  500 round trips each. */
#define RT 500
#define RT_LEN 16
typedef struct { dist_t *w; int rank, n, err; } thr_arg;

static void *ping_thread(void *p) {
    thr_arg *a = (thr_arg *)p;
    dist_t *w = a->w;
    int rank = a->rank, right = (rank + 1) % a->n;
    int32_t out[RT_LEN], in[RT_LEN];
    for (int i = 0; i < RT; i++) {
        for (int j = 0; j < RT_LEN; j++) out[j] = rank * 1000000 + i * 100 + j;
        dist_result r = dist_send(w, out, RT_LEN, DIST_INT32, right, 100);
        if (r == DIST_OK) r = dist_recv(w, in, RT_LEN, DIST_INT32, right, 101);
        if (r != DIST_OK) { a->err = FAIL("ping round %d: %s: %s", i, dist_result_name(r), dist_error_message(w)); return NULL; }
        for (int j = 0; j < RT_LEN; j++)
            if (in[j] != out[j] * 3 + right) { a->err = FAIL("ping round %d: answer[%d] = %d", i, j, in[j]); return NULL; }
    }
    return NULL;
}

static void *pong_thread(void *p) {
    thr_arg *a = (thr_arg *)p;
    dist_t *w = a->w;
    int rank = a->rank, left = (rank + a->n - 1) % a->n;
    int32_t in[RT_LEN], out[RT_LEN];
    for (int i = 0; i < RT; i++) {
        dist_req_t *r;
        dist_result res = dist_irecv(w, in, RT_LEN, DIST_INT32, left, 100, &r);
        if (res == DIST_OK) res = dist_wait(r);
        if (res != DIST_OK) { a->err = FAIL("pong round %d: %s: %s", i, dist_result_name(res), dist_error_message(w)); return NULL; }
        for (int j = 0; j < RT_LEN; j++) {
            if (in[j] != left * 1000000 + i * 100 + j) { a->err = FAIL("pong round %d: ping[%d] = %d", i, j, in[j]); return NULL; }
            out[j] = in[j] * 3 + rank;
        }
        res = dist_isend(w, out, RT_LEN, DIST_INT32, left, 101, &r);
        if (res == DIST_OK) res = dist_wait(r);
        if (res != DIST_OK) { a->err = FAIL("pong answer %d: %s: %s", i, dist_result_name(res), dist_error_message(w)); return NULL; }
    }
    return NULL;
}

static int t_threads(dist_t *w, void *arg) {
    RANK_SETUP();
    thr_arg a[2] = { { w, rank, n, 0 }, { w, rank, n, 0 } };
    pthread_t th[2];
    if (pthread_create(&th[0], NULL, ping_thread, &a[0]) != 0) return FAIL("pthread_create");
    if (pthread_create(&th[1], NULL, pong_thread, &a[1]) != 0) { pthread_join(th[0], NULL); return FAIL("pthread_create"); }
    pthread_join(th[0], NULL);
    pthread_join(th[1], NULL);
    return a[0].err || a[1].err;
}

/* ---- driver --------------------------------------------------------------- */
typedef struct { const char *name; int (*fn)(dist_t *, void *); } check_t;
static const check_t checks[] = {
    { "ordering", t_ordering },       { "tags", t_tags },
    { "any_source", t_any_source },   { "zero_bytes", t_zero_bytes },
    { "dtypes", t_dtypes },           { "overlap_4MiB_all_pairs", t_overlap },
    { "many_requests", t_many },      { "test_polling", t_test_polling },
    { "self_send", t_self },          { "size_mismatch", t_mismatch },
    { "invalid_args", t_invalid },    { "threads", t_threads },
};

/* A watchdog in every rank: a check that is still running after
   WATCHDOG_S seconds (more than the communicator's 20 s timeout, so the
   library's own timeout reports first; both x DIST_TIMEOUT_SCALE) is failed and its rank ends, which
   makes dist_spawn stop the others.  Without it a stuck dist_wait_all of
   many requests could wait 20 s per request. */
#define WATCHDOG_S 45
static int g_watchdog_s = WATCHDOG_S;    /* scaled in main */
typedef struct { pthread_mutex_t mu; pthread_cond_t cv; int finished, rank; const char *name; } watchdog_t;

static void *watchdog_main(void *p) {
    watchdog_t *wd = (watchdog_t *)p;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += g_watchdog_s;
    pthread_mutex_lock(&wd->mu);
    while (!wd->finished)
        if (pthread_cond_timedwait(&wd->cv, &wd->mu, &dl) != 0) break;
    int finished = wd->finished;
    pthread_mutex_unlock(&wd->mu);
    if (!finished) {
        fail_at(wd->rank, __LINE__, "watchdog: %s still running after %d s", wd->name, g_watchdog_s);
        _exit(3);
    }
    return NULL;
}

static int run_check(dist_t *w, void *arg) {
    const check_t *c = (const check_t *)arg;
    watchdog_t wd;
    pthread_t th;
    pthread_mutex_init(&wd.mu, NULL);
    pthread_cond_init(&wd.cv, NULL);
    wd.finished = 0; wd.rank = dist_rank(w); wd.name = c->name;
    if (pthread_create(&th, NULL, watchdog_main, &wd) != 0) return fail_at(wd.rank, __LINE__, "pthread_create");
    int rc = c->fn(w, NULL);
    pthread_mutex_lock(&wd.mu);
    wd.finished = 1;
    pthread_cond_signal(&wd.cv);
    pthread_mutex_unlock(&wd.mu);
    pthread_join(th, NULL);
    pthread_cond_destroy(&wd.cv);
    pthread_mutex_destroy(&wd.mu);
    return rc;
}

int main(int argc, char **argv) {
    static const int sizes[] = { 2, 3, 4, 5, 8 };
    const char *filter = argc > 1 ? argv[1] : NULL;
    double scale = timeout_scale();
    g_watchdog_s = (int)(WATCHDOG_S * scale);
    g_limit_s = 20 * scale;
    /* Leave room under the runner's limit (240 s x scale) to report. */
    double budget = 240 * scale - 60;
    int failed = 0, ran = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    double t_all = now_s();
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
            if (filter && !strstr(checks[c].name, filter)) continue;
            ran++;
            if (now_s() - t_all > budget - g_watchdog_s) {
                failed++;
                printf("FAIL n=%d %s: not run, the test's time budget (%.0f s) is spent\n", n, checks[c].name, budget);
                continue;
            }
            dist_config cfg = { 0 };
            cfg.timeout_ms = (int)(20000 * scale);
            memset(sh, 0, sizeof *sh);
            double t0 = now_s();
            int rc = spawn_job(n, run_check, (void *)&checks[c], &cfg);
            double el = now_s() - t0;
            int bad = rc != 0;
            for (int r = 0; r < n; r++) bad |= atomic_load(&sh->claimed[r]) != 0;
            if (!bad) {
                printf("ok   n=%d %s (%.2f s)%s%s\n", n, checks[c].name, el, sh->note[0][0] ? "  " : "", sh->note[0]);
                continue;
            }
            failed++;
            printf("FAIL n=%d %s (%.2f s): dist_spawn returned %d%s%s\n", n, checks[c].name, el, rc,
                   rc ? ": " : "", rc ? dist_error_message(NULL) : "");
            for (int r = 0; r < n; r++)
                if (sh->msg[r][0]) printf("     rank %d: %s\n", r, sh->msg[r]);
        }
    }
    munmap(sh, sizeof *sh);
    if (!ran) { printf("no check matches \"%s\"\n", filter ? filter : ""); return 1; }
    printf("%d checks, %d failed, %.1f s\n", ran, failed, now_s() - t_all);
    return failed ? 1 : 0;
}
