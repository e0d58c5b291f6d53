/* tests/valgrind_coll.c - every collective, small, for `make valgrind`.

   tests/test_collectives.c checks far more (world sizes up to 8, counts of
   1M+3, every DIST_ALGO) and takes ~40 s natively: hours under valgrind.
   This program is its reduced twin for memcheck, not a replacement: it is
   not named test_*.c, so the suite does not run it.

   What: world sizes 2, 3 and 4 (dist_spawn) with the algorithm the library
   picks, then all_reduce, reduce and broadcast with DIST_ALGO=ring (n=3),
   tree (n=4) and halving (n=4).  For each: every collective (broadcast,
   reduce, all_reduce, gather, all_gather, scatter, reduce_scatter,
   all_to_all, barrier) x every dtype (int8, uint8, int32, int64, float16,
   bfloat16, float32, float64) x every op where the collective takes one
   (sum, product, max, min, avg) x counts 1, 7 and 1000, roots 0 and n-1
   alternating; count 0 with NULL buffers; large counts once (all_reduce
   float32 sum of 65537, broadcast of 1 MiB, all_gather of 100000 int32);
   in-place all_reduce, all_gather (send == recv + rank x count) and
   reduce_scatter; two all_reduce_async in flight at once.  Every rank
   computes every result itself (a serial reference over every rank's
   input, generated from (seed, rank, index)); inputs are small integers
   (products: +-1, +-2), so every reduction order gives the same bits.
   Receive buffers are pre-filled and checked whole; reduce must leave the
   non-roots' buffers alone.

   Output: one line per job; exit 0 only if every check passed.
   Environment: DIST_TRANSPORT (auto, tcp, mixed) as for any job;
   DIST_TIMEOUT_SCALE stretches the communicator's timeout. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"

#define MAXR 4

typedef struct {
    atomic_int claimed[MAXR];
    char msg[MAXR][768];
    long checks[MAXR];
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(MAXR, &sh->claimed[rank], sh->msg[rank])

static const dist_dtype DTS[] = { DIST_INT8, DIST_UINT8, DIST_INT32, DIST_INT64, DIST_FLOAT16, DIST_BFLOAT16, DIST_FLOAT32, DIST_FLOAT64 };
#define NDT ((int)(sizeof DTS / sizeof DTS[0]))
static const dist_op OPS[] = { DIST_SUM, DIST_PRODUCT, DIST_MAX, DIST_MIN, DIST_AVG };
#define NOPS ((int)(sizeof OPS / sizeof OPS[0]))
static const char *const OPN[] = { "sum", "product", "max", "min", "avg" };

/* ---- 16-bit floats, written here (round to nearest even) ---------------- */
static uint16_t enc16(double a0, int mant, int ebits) {
    int bias = (1 << (ebits - 1)) - 1, e, E;
    uint16_t sign = a0 < 0 ? 0x8000 : 0;
    double a = fabs(a0), q;
    uint32_t m;
    if (a == 0) return sign;
    frexp(a, &e);
    E = e - 1;
    if (E < 1 - bias) E = 1 - bias;
    q = ldexp(a, mant - E);
    m = (uint32_t)nearbyint(q);
    if (m >= (2u << mant)) { m >>= 1; E++; }
    if (m < (1u << mant)) return (uint16_t)(sign | m);
    return (uint16_t)(sign | (uint32_t)(E + bias) << mant | (m - (1u << mant)));
}

/* value v (exactly representable) -> the dtype's bytes at p */
static void put(dist_dtype t, double v, uint8_t *p) {
    switch (t) {
    case DIST_INT8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case DIST_UINT8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case DIST_INT32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case DIST_INT64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case DIST_FLOAT16: { uint16_t x = enc16(v, 10, 5); memcpy(p, &x, 2); break; }
    case DIST_BFLOAT16: { uint16_t x = enc16(v, 7, 8); memcpy(p, &x, 2); break; }
    case DIST_FLOAT32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case DIST_FLOAT64: memcpy(p, &v, 8); break;
    default: break;
    }
}

/* Rank r's input element i for a check with seed s and op (-1: no op). */
static double input(uint64_t s, int r, size_t i, int op, dist_dtype t) {
    uint64_t h = mix64(s ^ ((uint64_t)r << 48) ^ (uint64_t)i);
    int uns = t == DIST_UINT8;
    if (op == DIST_PRODUCT) {
        static const double pv[4] = { -2, -1, 1, 2 };
        return uns ? (double)(1 + (h & 1)) : pv[h & 3];
    }
    if (op == DIST_MAX || op == DIST_MIN) return uns ? (double)(h % 201) : (double)((int)(h % 201) - 100);
    return uns ? (double)(h % 17) : (double)((int)(h % 17) - 8);
}

/* The reduction of element i over n ranks, as the dtype's bytes. */
static void reduced(uint64_t s, int n, size_t i, int op, dist_dtype t, uint8_t *p) {
    double acc = input(s, 0, i, op, t);
    for (int r = 1; r < n; r++) {
        double v = input(s, r, i, op, t);
        if (op == DIST_SUM || op == DIST_AVG) acc += v;
        else if (op == DIST_PRODUCT) acc *= v;
        else if (op == DIST_MAX) acc = v > acc ? v : acc;
        else acc = v < acc ? v : acc;
    }
    if (op == DIST_AVG) {
        if (t == DIST_FLOAT64) acc = acc / n;
        else if (t == DIST_FLOAT32 || t == DIST_FLOAT16 || t == DIST_BFLOAT16) acc = (double)((float)acc / (float)n);
        else acc = (double)((long long)acc / n);   /* integers: towards zero */
    }
    put(t, acc, p);
}

typedef struct { int n; const char *algo; int full; } job_t;

typedef struct {
    dist_t *w;
    int rank, n;
    uint64_t seed;
    const char *where;
} ctx_t;

static uint8_t *galloc(size_t n) {
    uint8_t *p = (uint8_t *)malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

#define FILLB 0xCD

/* Fills buf with rank r's `count` elements of block-set `blk` (for
   collectives whose buffer holds n blocks, element index blk*count+i). */
static void fill_input(const ctx_t *c, uint8_t *buf, int r, size_t from, size_t count, int op, dist_dtype t) {
    size_t es = dist_dtype_size(t);
    for (size_t i = 0; i < count; i++) put(t, input(c->seed, r, from + i, op, t), buf + i * es);
}

/* The first element (of `count`) where got differs from want, or -1. */
static long differs(const uint8_t *got, const uint8_t *want, size_t count, size_t es) {
    for (size_t i = 0; i < count; i++)
        if (memcmp(got + i * es, want + i * es, es) != 0) return (long)i;
    return -1;
}

#define CHECK_CALL(name, call)                                                                                 \
    do {                                                                                                       \
        dist_result r_ = (call);                                                                               \
        if (r_ != DIST_OK)                                                                                     \
            return fail_at(rank, __LINE__, "%s %s %s count %zu: %s: %s", c->where, name, dist_dtype_name(t), count, \
                           dist_result_name(r_), dist_error_message(c->w));                                    \
    } while (0)
#define EXPECT_SAME(name, got, want, cnt)                                                                      \
    do {                                                                                                       \
        long at_ = differs((got), (want), (cnt), es);                                                          \
        sh->checks[rank]++;                                                                                    \
        if (at_ >= 0)                                                                                          \
            return fail_at(rank, __LINE__, "%s %s %s %s count %zu root %d: element %ld differs", c->where, name, \
                           dist_dtype_name(t), op >= 0 ? OPN[op] : "", count, root, at_);                      \
    } while (0)

/* One reducing collective (coll 0 all_reduce, 1 reduce, 2 reduce_scatter). */
static int one_reduce(ctx_t *c, int coll, dist_dtype t, int op, size_t count, int root, int in_place) {
    int rank = c->rank, n = c->n;
    size_t es = dist_dtype_size(t), nb = coll == 2 ? count * (size_t)n : count;
    uint8_t *buf = galloc(nb * es), *want = galloc(nb * es), *out = galloc(count * es);
    c->seed = mix64(c->seed + 1);
    fill_input(c, buf, rank, 0, nb, op, t);
    if (coll == 0) {
        CHECK_CALL("all_reduce", dist_all_reduce(c->w, buf, count, t, OPS[op]));
        for (size_t i = 0; i < count; i++) reduced(c->seed, n, i, op, t, want + i * es);
        EXPECT_SAME("all_reduce", buf, want, count);
    } else if (coll == 1) {
        CHECK_CALL("reduce", dist_reduce(c->w, buf, count, t, OPS[op], root));
        if (rank == root) for (size_t i = 0; i < count; i++) reduced(c->seed, n, i, op, t, want + i * es);
        else fill_input(c, want, rank, 0, count, op, t);   /* unchanged */
        EXPECT_SAME("reduce", buf, want, count);
    } else {
        uint8_t *recv = in_place ? buf + (size_t)rank * count * es : out;
        if (!in_place) memset(out, FILLB, count * es);
        CHECK_CALL("reduce_scatter", dist_reduce_scatter(c->w, buf, recv, count, t, OPS[op]));
        for (size_t i = 0; i < count; i++) reduced(c->seed, n, (size_t)rank * count + i, op, t, want + i * es);
        EXPECT_SAME(in_place ? "reduce_scatter in place" : "reduce_scatter", recv, want, count);
    }
    free(buf); free(want); free(out);
    return 0;
}

/* One data-moving collective: 0 broadcast, 1 gather, 2 all_gather,
   3 scatter, 4 all_to_all. */
static int one_move(ctx_t *c, int coll, dist_dtype t, size_t count, int root, int in_place) {
    int rank = c->rank, n = c->n, op = -1;
    size_t es = dist_dtype_size(t), all = count * (size_t)n;
    uint8_t *send = galloc(all * es), *recv = galloc(all * es), *want = galloc(all * es);
    c->seed = mix64(c->seed + 2);
    memset(recv, FILLB, all * es);
    switch (coll) {
    case 0:
        if (rank == root) fill_input(c, recv, root, 0, count, -1, t);
        CHECK_CALL("broadcast", dist_broadcast(c->w, recv, count, t, root));
        fill_input(c, want, root, 0, count, -1, t);
        EXPECT_SAME("broadcast", recv, want, count);
        break;
    case 1:
        fill_input(c, send, rank, 0, count, -1, t);
        CHECK_CALL("gather", dist_gather(c->w, send, rank == root ? recv : NULL, count, t, root));
        if (rank == root) {
            for (int q = 0; q < n; q++) fill_input(c, want + (size_t)q * count * es, q, 0, count, -1, t);
            EXPECT_SAME("gather", recv, want, all);
        }
        break;
    case 2: {
        uint8_t *s = in_place ? recv + (size_t)rank * count * es : send;
        fill_input(c, s, rank, 0, count, -1, t);
        CHECK_CALL("all_gather", dist_all_gather(c->w, s, recv, count, t));
        for (int q = 0; q < n; q++) fill_input(c, want + (size_t)q * count * es, q, 0, count, -1, t);
        EXPECT_SAME(in_place ? "all_gather in place" : "all_gather", recv, want, all);
        break;
    }
    case 3:
        if (rank == root) fill_input(c, send, root, 0, all, -1, t);
        CHECK_CALL("scatter", dist_scatter(c->w, rank == root ? send : NULL, recv, count, t, root));
        fill_input(c, want, root, (size_t)rank * count, count, -1, t);
        EXPECT_SAME("scatter", recv, want, count);
        break;
    case 4:
        /* rank q's send block j is elements q*all + j*count .. : input(q, ...) at index j*count+i */
        fill_input(c, send, rank, 0, all, -1, t);
        CHECK_CALL("all_to_all", dist_all_to_all(c->w, send, recv, count, t));
        for (int q = 0; q < n; q++) fill_input(c, want + (size_t)q * count * es, q, (size_t)rank * count, count, -1, t);
        EXPECT_SAME("all_to_all", recv, want, all);
        break;
    default: break;
    }
    free(send); free(recv); free(want);
    return 0;
}

static int rank_main(dist_t *w, void *arg) {
    const job_t *j = (const job_t *)arg;
    ctx_t cx, *c = &cx;
    int rank = dist_rank(w), n = dist_world_size(w), k = 0;
    static const size_t counts[3] = { 1, 7, 1000 };
    char where[64];
    memset(c, 0, sizeof *c);
    c->w = w; c->rank = rank; c->n = n; c->seed = 0x5eed0000ull + (uint64_t)j->n * 131 + (j->full ? 0 : 7);
    snprintf(where, sizeof where, "n=%d %s:", n, j->algo);
    c->where = where;
    if (n != j->n || rank >= MAXR) return fail_at(rank, __LINE__, "world size %d, expected %d", n, j->n);

    for (int di = 0; di < NDT; di++)
        for (int ci = 0; ci < 3; ci++) {
            dist_dtype t = DTS[di];
            size_t count = counts[ci];
            for (int op = 0; op < NOPS; op++) {
                int root = (k++ % 2) ? n - 1 : 0;
                if (one_reduce(c, 0, t, op, count, root, 0)) return 1;
                if (one_reduce(c, 1, t, op, count, root, 0)) return 1;
                if (j->full && one_reduce(c, 2, t, op, count, root, ci == 1)) return 1;
            }
            for (int coll = 0; coll < 5; coll++) {
                int root = (k++ % 2) ? n - 1 : 0;
                if (!j->full && coll != 0) continue;
                if (one_move(c, coll, t, count, root, coll == 2 && ci == 1)) return 1;
            }
        }
    if (!j->full) return 0;

    /* count 0, NULL buffers */
    {
        dist_dtype t = DIST_FLOAT32;
        size_t count = 0;
        CHECK_CALL("all_reduce", dist_all_reduce(w, NULL, 0, t, DIST_SUM));
        CHECK_CALL("reduce", dist_reduce(w, NULL, 0, t, DIST_SUM, 0));
        CHECK_CALL("broadcast", dist_broadcast(w, NULL, 0, t, 0));
        CHECK_CALL("gather", dist_gather(w, NULL, NULL, 0, t, 0));
        CHECK_CALL("all_gather", dist_all_gather(w, NULL, NULL, 0, t));
        CHECK_CALL("scatter", dist_scatter(w, NULL, NULL, 0, t, 0));
        CHECK_CALL("reduce_scatter", dist_reduce_scatter(w, NULL, NULL, 0, t, DIST_SUM));
        CHECK_CALL("all_to_all", dist_all_to_all(w, NULL, NULL, 0, t));
        sh->checks[rank]++;
    }
    /* large counts, once each */
    if (one_reduce(c, 0, DIST_FLOAT32, 0, 65537, 0, 0)) return 1;
    if (one_move(c, 0, DIST_UINT8, (size_t)1 << 20, n - 1, 0)) return 1;
    if (one_move(c, 2, DIST_INT32, 100000, 0, 0)) return 1;
    /* two all_reduce_async in flight, then a barrier */
    {
        dist_dtype t = DIST_INT64;
        size_t count = 4099, es = 8;
        int op = 0, root = 0;
        uint8_t *a = galloc(count * es), *b = galloc(count * es), *wa = galloc(count * es), *wb = galloc(count * es);
        dist_req_t *ra = NULL, *rb = NULL;
        uint64_t sa = mix64(c->seed + 11), sb = mix64(c->seed + 12);
        c->seed = sa; fill_input(c, a, rank, 0, count, 0, t);
        for (size_t i = 0; i < count; i++) reduced(sa, n, i, 0, t, wa + i * es);
        c->seed = sb; fill_input(c, b, rank, 0, count, 0, t);
        for (size_t i = 0; i < count; i++) reduced(sb, n, i, 0, t, wb + i * es);
        CHECK_CALL("all_reduce_async", dist_all_reduce_async(w, a, count, t, DIST_SUM, &ra));
        CHECK_CALL("all_reduce_async", dist_all_reduce_async(w, b, count, t, DIST_SUM, &rb));
        CHECK_CALL("wait", dist_wait(rb));
        CHECK_CALL("wait", dist_wait(ra));
        EXPECT_SAME("all_reduce_async (1st)", a, wa, count);
        EXPECT_SAME("all_reduce_async (2nd)", b, wb, count);
        free(a); free(b); free(wa); free(wb);
    }
    for (int i = 0; i < 3; i++) {
        dist_result r = dist_barrier(w);
        if (r != DIST_OK) return fail_at(rank, __LINE__, "barrier: %s: %s", dist_result_name(r), dist_error_message(w));
    }
    return 0;
}

int main(void) {
    static const job_t jobs[] = {
        { 2, "auto", 1 }, { 3, "auto", 1 }, { 4, "auto", 1 },
        { 3, "ring", 0 }, { 4, "tree", 0 }, { 4, "halving", 0 },
    };
    int failed = 0;
    double t_all;
    test_start();
    UNSET_ENV(LAUNCHER_ENV, "DIST_ALGO");
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    t_all = now_s();
    for (size_t k = 0; k < sizeof jobs / sizeof jobs[0]; k++) {
        const job_t *j = &jobs[k];
        dist_config cfg;
        double t0 = now_s();
        int rc, bad;
        long checks = 0;
        memset(sh, 0, sizeof *sh);
        memset(&cfg, 0, sizeof cfg);
        cfg.timeout_ms = scaled(30000);
        if (strcmp(j->algo, "auto") == 0) unsetenv("DIST_ALGO");
        else setenv("DIST_ALGO", j->algo, 1);
        rc = dist_spawn(j->n, rank_main, (void *)j, &cfg);
        unsetenv("DIST_ALGO");
        bad = rc != 0;
        for (int r = 0; r < j->n; r++) { bad |= atomic_load(&sh->claimed[r]) != 0; checks += sh->checks[r]; }
        if (!bad) {
            printf("ok   n=%d %s: %ld checks (%.2f s)\n", j->n, j->algo, checks, now_s() - t0);
            continue;
        }
        failed++;
        printf("FAIL n=%d %s (%.2f s): dist_spawn returned %d%s%s\n", j->n, j->algo, now_s() - t0, rc, rc ? ": " : "",
               rc ? dist_error_message(NULL) : "");
        for (int r = 0; r < j->n; r++)
            if (sh->msg[r][0]) printf("     rank %d: %s\n", r, sh->msg[r]);
    }
    munmap(sh, sizeof *sh);
    printf("%s: %d of %zu jobs failed (%.1f s)\n", failed ? "FAIL" : "PASS", failed, sizeof jobs / sizeof jobs[0], now_s() - t_all);
    return failed ? 1 : 0;
}
