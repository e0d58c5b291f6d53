/* tests/collcheck.h - every collective x dtype x op, checked against an
   independent reference computed by every rank.

   Shared by tests/valgrind_coll.c (ranks from dist_spawn, under memcheck)
   and tests/mixed_rank.c (one rank of a job of Linux and Windows
   processes).  Depends on the C standard library and dist.h alone (no
   testutil.h, no POSIX): it builds with MinGW-w64 too.  Include it after
   dist.h (with DIST_IMPLEMENTATION defined in that file, on MinGW, so that
   %zu formats through C99's printf).

   What collcheck_run checks, on the communicator c->w:
   every collective (broadcast, reduce, all_reduce, gather, all_gather,
   scatter, reduce_scatter, all_to_all) x every dtype (int8, uint8, int32,
   int64, float16, bfloat16, float32, float64) x every op where the
   collective takes one (sum, product, max, min, avg) x counts 1, 7 and
   1000, roots 0 and n-1 alternating.  With full = 0 only all_reduce, reduce
   and broadcast.  With full = 1 besides: count 0 with NULL buffers; large
   counts once (all_reduce float32 sum of 65537, broadcast of 1 MiB,
   all_gather of 100000 int32); in-place all_reduce, all_gather (send ==
   recv + rank x count) and reduce_scatter; two all_reduce_async in flight
   at once; three barriers.  Every rank computes every result itself (a
   serial reference over every rank's input, generated from (seed, rank,
   index)); inputs are small integers (products: +-1, +-2), so every
   reduction order gives the same bits.  Receive buffers are pre-filled and
   checked whole; reduce must leave the non-roots' buffers alone.

   Use:
       collcheck_t c;
       collcheck_init(&c, world, seed, "n=4 auto:");   // seed: the same on every rank
       c.on_fail = my_callback;                         // optional
       if (collcheck_run(&c, 1)) ... c.msg says what failed first ...
       ... c.checks results compared ...

   A failure stops the run: collcheck_run returns 1 after recording
   "line L: <what>" in c.msg (the first failure only) and calling
   c.on_fail(c.user, rank, line, message) if set.  collcheck_fail is there
   for the includer's own checks, to report the same way. */
#ifndef COLLCHECK_H
#define COLLCHECK_H

#include "dist.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#  define COLLCHECK_UNUSED __attribute__((unused))
#  if defined(__MINGW32__) && !defined(__clang__)
#    define COLLCHECK_PRINTF(f, a) __attribute__((format(gnu_printf, f, a)))
#  else
#    define COLLCHECK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#  endif
#else
#  define COLLCHECK_UNUSED
#  define COLLCHECK_PRINTF(f, a)
#endif

#define COLLCHECK_MSG 768

typedef struct collcheck {
    dist_t *w;
    int rank, n;
    uint64_t seed;           /* advanced by every check: the same on every rank */
    const char *where;       /* prefix of every message, e.g. "n=4 ring:" */
    long checks;             /* results compared so far */
    int failed;              /* set with the first failure */
    char msg[COLLCHECK_MSG]; /* "line L: ..." of the first failure */
    /* Called on each failure (NULL: none), with the message without its line. */
    void (*on_fail)(void *user, int rank, int line, const char *msg);
    void *user;
} collcheck_t;

static const dist_dtype COLLCHECK_DTS[] = { DIST_INT8, DIST_UINT8, DIST_INT32, DIST_INT64,
                                            DIST_FLOAT16, DIST_BFLOAT16, DIST_FLOAT32, DIST_FLOAT64 };
#define COLLCHECK_NDT ((int)(sizeof COLLCHECK_DTS / sizeof COLLCHECK_DTS[0]))
static const dist_op COLLCHECK_OPS[] = { DIST_SUM, DIST_PRODUCT, DIST_MAX, DIST_MIN, DIST_AVG };
#define COLLCHECK_NOPS ((int)(sizeof COLLCHECK_OPS / sizeof COLLCHECK_OPS[0]))
static const char *const COLLCHECK_OPN[] = { "sum", "product", "max", "min", "avg" };

static COLLCHECK_UNUSED void collcheck_init(collcheck_t *c, dist_t *w, uint64_t seed, const char *where) {
    memset(c, 0, sizeof *c);
    c->w = w;
    c->rank = dist_rank(w);
    c->n = dist_world_size(w);
    c->seed = seed;
    c->where = where ? where : "";
}

/* Records a failure (see above); returns 1. */
static COLLCHECK_UNUSED COLLCHECK_PRINTF(3, 4) int collcheck_fail(collcheck_t *c, int line, const char *fmt, ...) {
    char m[COLLCHECK_MSG - 24];     /* room for "line L: " before it in c->msg */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (!c->failed) {
        c->failed = 1;
        snprintf(c->msg, sizeof c->msg, "line %d: %s", line, m);
    }
    if (c->on_fail) c->on_fail(c->user, c->rank, line, m);
    return 1;
}

/* The splitmix64 finalizer (testutil.h's mix64, which this file may not use). */
static inline COLLCHECK_UNUSED uint64_t collcheck_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ---- 16-bit floats, written here (round to nearest even) ---------------- */
static COLLCHECK_UNUSED uint16_t collcheck_enc16(double a0, int mant, int ebits) {
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
static COLLCHECK_UNUSED void collcheck_put(dist_dtype t, double v, uint8_t *p) {
    switch (t) {
    case DIST_INT8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case DIST_UINT8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case DIST_INT32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case DIST_INT64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case DIST_FLOAT16: { uint16_t x = collcheck_enc16(v, 10, 5); memcpy(p, &x, 2); break; }
    case DIST_BFLOAT16: { uint16_t x = collcheck_enc16(v, 7, 8); memcpy(p, &x, 2); break; }
    case DIST_FLOAT32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case DIST_FLOAT64: memcpy(p, &v, 8); break;
    default: break;
    }
}

/* Rank r's input element i for a check with seed s and op (-1: no op). */
static COLLCHECK_UNUSED double collcheck_input(uint64_t s, int r, size_t i, int op, dist_dtype t) {
    uint64_t h = collcheck_mix64(s ^ ((uint64_t)r << 48) ^ (uint64_t)i);
    int uns = t == DIST_UINT8;
    if (op == DIST_PRODUCT) {
        static const double pv[4] = { -2, -1, 1, 2 };
        return uns ? (double)(1 + (h & 1)) : pv[h & 3];
    }
    if (op == DIST_MAX || op == DIST_MIN) return uns ? (double)(h % 201) : (double)((int)(h % 201) - 100);
    return uns ? (double)(h % 17) : (double)((int)(h % 17) - 8);
}

/* The reduction of element i over n ranks, as the dtype's bytes. */
static COLLCHECK_UNUSED void collcheck_reduced(uint64_t s, int n, size_t i, int op, dist_dtype t, uint8_t *p) {
    double acc = collcheck_input(s, 0, i, op, t);
    for (int r = 1; r < n; r++) {
        double v = collcheck_input(s, r, i, op, t);
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
    collcheck_put(t, acc, p);
}

static COLLCHECK_UNUSED uint8_t *collcheck_alloc(size_t n) {
    uint8_t *p = (uint8_t *)malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}

#define COLLCHECK_FILLB 0xCD

/* Fills buf with rank r's `count` elements from index `from` on (for
   collectives whose buffer holds n blocks, element index blk*count+i). */
static COLLCHECK_UNUSED void collcheck_fill_input(const collcheck_t *c, uint8_t *buf, int r, size_t from, size_t count, int op, dist_dtype t) {
    size_t es = dist_dtype_size(t);
    for (size_t i = 0; i < count; i++) collcheck_put(t, collcheck_input(c->seed, r, from + i, op, t), buf + i * es);
}

/* The first element (of `count`) where got differs from want, or -1. */
static COLLCHECK_UNUSED long collcheck_differs(const uint8_t *got, const uint8_t *want, size_t count, size_t es) {
    for (size_t i = 0; i < count; i++)
        if (memcmp(got + i * es, want + i * es, es) != 0) return (long)i;
    return -1;
}

/* In the checks below: c, t and count in scope (and op, root, es for
   COLLCHECK_SAME). */
#define COLLCHECK_CALL(name, call)                                                                             \
    do {                                                                                                       \
        dist_result r_ = (call);                                                                               \
        if (r_ != DIST_OK)                                                                                     \
            return collcheck_fail(c, __LINE__, "%s %s %s count %zu: %s: %s", c->where, name, dist_dtype_name(t), \
                                  count, dist_result_name(r_), dist_error_message(c->w));                      \
    } while (0)
#define COLLCHECK_SAME(name, got, want, cnt)                                                                   \
    do {                                                                                                       \
        long at_ = collcheck_differs((got), (want), (cnt), es);                                                \
        c->checks++;                                                                                           \
        if (at_ >= 0)                                                                                          \
            return collcheck_fail(c, __LINE__, "%s %s %s %s count %zu root %d: element %ld differs", c->where, name, \
                                  dist_dtype_name(t), op >= 0 ? COLLCHECK_OPN[op] : "", count, root, at_);     \
    } while (0)

/* One reducing collective (coll 0 all_reduce, 1 reduce, 2 reduce_scatter). */
static COLLCHECK_UNUSED int collcheck_one_reduce(collcheck_t *c, int coll, dist_dtype t, int op, size_t count, int root, int in_place) {
    int rank = c->rank, n = c->n;
    size_t es = dist_dtype_size(t), nb = coll == 2 ? count * (size_t)n : count;
    uint8_t *buf = collcheck_alloc(nb * es), *want = collcheck_alloc(nb * es), *out = collcheck_alloc(count * es);
    c->seed = collcheck_mix64(c->seed + 1);
    collcheck_fill_input(c, buf, rank, 0, nb, op, t);
    if (coll == 0) {
        COLLCHECK_CALL("all_reduce", dist_all_reduce(c->w, buf, count, t, COLLCHECK_OPS[op]));
        for (size_t i = 0; i < count; i++) collcheck_reduced(c->seed, n, i, op, t, want + i * es);
        COLLCHECK_SAME("all_reduce", buf, want, count);
    } else if (coll == 1) {
        COLLCHECK_CALL("reduce", dist_reduce(c->w, buf, count, t, COLLCHECK_OPS[op], root));
        if (rank == root) for (size_t i = 0; i < count; i++) collcheck_reduced(c->seed, n, i, op, t, want + i * es);
        else collcheck_fill_input(c, want, rank, 0, count, op, t);   /* unchanged */
        COLLCHECK_SAME("reduce", buf, want, count);
    } else {
        uint8_t *recv = in_place ? buf + (size_t)rank * count * es : out;
        if (!in_place) memset(out, COLLCHECK_FILLB, count * es);
        COLLCHECK_CALL("reduce_scatter", dist_reduce_scatter(c->w, buf, recv, count, t, COLLCHECK_OPS[op]));
        for (size_t i = 0; i < count; i++) collcheck_reduced(c->seed, n, (size_t)rank * count + i, op, t, want + i * es);
        COLLCHECK_SAME(in_place ? "reduce_scatter in place" : "reduce_scatter", recv, want, count);
    }
    free(buf); free(want); free(out);
    return 0;
}

/* One data-moving collective: 0 broadcast, 1 gather, 2 all_gather,
   3 scatter, 4 all_to_all. */
static COLLCHECK_UNUSED int collcheck_one_move(collcheck_t *c, int coll, dist_dtype t, size_t count, int root, int in_place) {
    int rank = c->rank, n = c->n, op = -1;
    size_t es = dist_dtype_size(t), all = count * (size_t)n;
    uint8_t *send = collcheck_alloc(all * es), *recv = collcheck_alloc(all * es), *want = collcheck_alloc(all * es);
    c->seed = collcheck_mix64(c->seed + 2);
    memset(recv, COLLCHECK_FILLB, all * es);
    switch (coll) {
    case 0:
        if (rank == root) collcheck_fill_input(c, recv, root, 0, count, -1, t);
        COLLCHECK_CALL("broadcast", dist_broadcast(c->w, recv, count, t, root));
        collcheck_fill_input(c, want, root, 0, count, -1, t);
        COLLCHECK_SAME("broadcast", recv, want, count);
        break;
    case 1:
        collcheck_fill_input(c, send, rank, 0, count, -1, t);
        COLLCHECK_CALL("gather", dist_gather(c->w, send, rank == root ? recv : NULL, count, t, root));
        if (rank == root) {
            for (int q = 0; q < n; q++) collcheck_fill_input(c, want + (size_t)q * count * es, q, 0, count, -1, t);
            COLLCHECK_SAME("gather", recv, want, all);
        }
        break;
    case 2: {
        uint8_t *s = in_place ? recv + (size_t)rank * count * es : send;
        collcheck_fill_input(c, s, rank, 0, count, -1, t);
        COLLCHECK_CALL("all_gather", dist_all_gather(c->w, s, recv, count, t));
        for (int q = 0; q < n; q++) collcheck_fill_input(c, want + (size_t)q * count * es, q, 0, count, -1, t);
        COLLCHECK_SAME(in_place ? "all_gather in place" : "all_gather", recv, want, all);
        break;
    }
    case 3:
        if (rank == root) collcheck_fill_input(c, send, root, 0, all, -1, t);
        COLLCHECK_CALL("scatter", dist_scatter(c->w, rank == root ? send : NULL, recv, count, t, root));
        collcheck_fill_input(c, want, root, (size_t)rank * count, count, -1, t);
        COLLCHECK_SAME("scatter", recv, want, count);
        break;
    case 4:
        /* rank q's send block j is elements q*all + j*count .. : input(q, ...) at index j*count+i */
        collcheck_fill_input(c, send, rank, 0, all, -1, t);
        COLLCHECK_CALL("all_to_all", dist_all_to_all(c->w, send, recv, count, t));
        for (int q = 0; q < n; q++) collcheck_fill_input(c, want + (size_t)q * count * es, q, (size_t)rank * count, count, -1, t);
        COLLCHECK_SAME("all_to_all", recv, want, all);
        break;
    default: break;
    }
    free(send); free(recv); free(want);
    return 0;
}

/* The whole sequence (see the top); 0 when every check passed, else 1 with
   c->msg set. */
static COLLCHECK_UNUSED int collcheck_run(collcheck_t *c, int full) {
    dist_t *w = c->w;
    int n = c->n, k = 0;
    static const size_t counts[3] = { 1, 7, 1000 };

    for (int di = 0; di < COLLCHECK_NDT; di++)
        for (int ci = 0; ci < 3; ci++) {
            dist_dtype t = COLLCHECK_DTS[di];
            size_t count = counts[ci];
            for (int op = 0; op < COLLCHECK_NOPS; op++) {
                int root = (k++ % 2) ? n - 1 : 0;
                if (collcheck_one_reduce(c, 0, t, op, count, root, 0)) return 1;
                if (collcheck_one_reduce(c, 1, t, op, count, root, 0)) return 1;
                if (full && collcheck_one_reduce(c, 2, t, op, count, root, ci == 1)) return 1;
            }
            for (int coll = 0; coll < 5; coll++) {
                int root = (k++ % 2) ? n - 1 : 0;
                if (!full && coll != 0) continue;
                if (collcheck_one_move(c, coll, t, count, root, coll == 2 && ci == 1)) return 1;
            }
        }
    if (!full) return 0;

    /* count 0, NULL buffers */
    {
        dist_dtype t = DIST_FLOAT32;
        size_t count = 0;
        COLLCHECK_CALL("all_reduce", dist_all_reduce(w, NULL, 0, t, DIST_SUM));
        COLLCHECK_CALL("reduce", dist_reduce(w, NULL, 0, t, DIST_SUM, 0));
        COLLCHECK_CALL("broadcast", dist_broadcast(w, NULL, 0, t, 0));
        COLLCHECK_CALL("gather", dist_gather(w, NULL, NULL, 0, t, 0));
        COLLCHECK_CALL("all_gather", dist_all_gather(w, NULL, NULL, 0, t));
        COLLCHECK_CALL("scatter", dist_scatter(w, NULL, NULL, 0, t, 0));
        COLLCHECK_CALL("reduce_scatter", dist_reduce_scatter(w, NULL, NULL, 0, t, DIST_SUM));
        COLLCHECK_CALL("all_to_all", dist_all_to_all(w, NULL, NULL, 0, t));
        c->checks++;
    }
    /* large counts, once each */
    if (collcheck_one_reduce(c, 0, DIST_FLOAT32, 0, 65537, 0, 0)) return 1;
    if (collcheck_one_move(c, 0, DIST_UINT8, (size_t)1 << 20, n - 1, 0)) return 1;
    if (collcheck_one_move(c, 2, DIST_INT32, 100000, 0, 0)) return 1;
    /* two all_reduce_async in flight, then a barrier */
    {
        dist_dtype t = DIST_INT64;
        size_t count = 4099, es = 8;
        int op = 0, root = 0, rank = c->rank;
        uint8_t *a = collcheck_alloc(count * es), *b = collcheck_alloc(count * es);
        uint8_t *wa = collcheck_alloc(count * es), *wb = collcheck_alloc(count * es);
        dist_req_t *ra = NULL, *rb = NULL;
        uint64_t sa = collcheck_mix64(c->seed + 11), sb = collcheck_mix64(c->seed + 12);
        c->seed = sa; collcheck_fill_input(c, a, rank, 0, count, 0, t);
        for (size_t i = 0; i < count; i++) collcheck_reduced(sa, n, i, 0, t, wa + i * es);
        c->seed = sb; collcheck_fill_input(c, b, rank, 0, count, 0, t);
        for (size_t i = 0; i < count; i++) collcheck_reduced(sb, n, i, 0, t, wb + i * es);
        COLLCHECK_CALL("all_reduce_async", dist_all_reduce_async(w, a, count, t, DIST_SUM, &ra));
        COLLCHECK_CALL("all_reduce_async", dist_all_reduce_async(w, b, count, t, DIST_SUM, &rb));
        COLLCHECK_CALL("wait", dist_wait(rb));
        COLLCHECK_CALL("wait", dist_wait(ra));
        COLLCHECK_SAME("all_reduce_async (1st)", a, wa, count);
        COLLCHECK_SAME("all_reduce_async (2nd)", b, wb, count);
        free(a); free(b); free(wa); free(wb);
    }
    for (int i = 0; i < 3; i++) {
        dist_result r = dist_barrier(w);
        if (r != DIST_OK) return collcheck_fail(c, __LINE__, "barrier: %s: %s", dist_result_name(r), dist_error_message(w));
    }
    return 0;
}

#endif /* COLLCHECK_H */
