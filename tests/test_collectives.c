// TIMEOUT: 600
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_collectives.c - every collective x every dtype x every op x world
   sizes {1,2,3,4,5,8} x counts {0, 1, n-1, n+1} (+ 1M+3 for a subset),
   against a serial reference each rank computes on its own.

   How: one dist_spawn per world size (and per DIST_ALGO setting); inside,
   every rank runs the same sequence of checks.  Every check draws a fresh
   seed; every rank can generate every rank's input from (seed, rank, index)
   with a hash, so each rank computes the expected result of every
   collective itself, without the library.  Inputs are chosen so that every
   reduction order gives the same bits:
     sum      integers: full-range random (wrapping arithmetic is exact in
              any order); floats: integers in -8..8
     product  integers: full-range random, mostly odd; floats: one of
              {-2, -1, -0.5, 0.5, 1, 2} (powers of two: exact)
     max/min  full-range random values (floats: any finite value but -0)
     avg      integers in -8..8 (uint8: 0..16): the sum / n, truncated
              towards zero; floats likewise, sum / n rounded in the dtype
              (16-bit floats: sum in float, / n in float, rounded to 16 bits)
   float16/bfloat16 are encoded and decoded by converters written here
   (frexp/ldexp/nearbyint, not the library's bit tricks), checked first
   against each other over all 65536 encodings.

   The 1M+3 count (1048579 elements) runs for a representative subset only,
   to keep the time bounded (TEST_COLL_QUICK=1, set by the sanitizer
   passes, keeps only float32 sum of it: they look for races and memory
   errors, which the small counts and one large count per collective
   exercise; TEST_COLL_QUICK=2, make tsan's, also leaves out the jobs of
   more than 5 ranks, which take a third of its time there; make test's
   quick set, DIST_TEST_SET=quick, is TEST_COLL_QUICK=1 too, and the rest
   of the matrix runs the whole subset on TCP):
     float32 and int32, ops sum and max, for every collective (ops only
     where the collective takes one; root n-1; out-of-place, plus in-place
     for all_to_all), and float16/bfloat16 sum for all_reduce.
   With DIST_ALGO=ring, tree, halving and shm (world sizes 2, 3, 5; 3, 4, 5;
   3, 4, 6; 2, 3, 5)
   only broadcast, reduce and all_reduce run (with shm all_gather too: every
   dtype, op, small count, root, and the 1M+3 subset), so both algorithms see small and large
   counts; "auto" picks tree/recursive doubling for small and ring/chain
   for large counts, at every world size.

   Layouts: broadcast/reduce/all_reduce in place (reduce must leave the
   non-roots' buffers unchanged); gather out-of-place with recv NULL off
   the root, and in place at the root (send == recv + root*count); scatter
   out-of-place with send NULL off the root, and in place at the root
   (recv == send + root*count); all_gather out-of-place, send == recv +
   rank*count, and send == recv; reduce_scatter out-of-place, recv == send
   + rank*count, and recv == send; all_to_all out-of-place and send ==
   recv.  Out-of-place send buffers must stay unchanged (small counts).
   Roots: 0, n-1 and n/2 (n >= 3).  Count 0 passes NULL buffers in the
   out-of-place layout.  Receive buffers are pre-filled with a pattern and
   have 64 guard bytes on both sides that must survive.

   Also: a barrier (ranks arrive at staggered times, marking their arrival
   in shared memory; nobody may leave before all arrived), and all_reduce
   sum of random non-integer float32/float64/float16/bfloat16 data (counts
   7 and 100000): every rank sends its result to rank 0, which compares the
   bytes; each rank runs it twice and compares (determinism); the result
   is within rounding of the exact sum.

   Each rank records every check in a MAP_SHARED table; the parent prints
   one line per (world size, algorithm, collective, dtype) after each job,
   with the number of checks it aggregates, and the first failure in
   detail.  Every job runs in a forked guard process with a deadline, so a
   hang is reported rather than stalling the suite.  Exit 0 only if every
   check passed.  (Debugging: TEST_COLL_ONLY="n=8 auto" runs that one job;
   the others then count as failures, so the exit status stays honest.) */
/* The implementation in this file, not linked from tests/impl_dist.c: under ThreadSanitizer it ran 45% slower linked (18 s against 26 s for n=4). */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef _WIN32
#  include <sys/prctl.h>
#  include <sys/wait.h>
#endif
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MAXR 8
#define BIG ((size_t)1048579)       /* 1M + 3 */
#define GUARD 64
#define FILLB 0xCD                  /* receive buffers start as this */

/* ---- the shared check table ---------------------------------------------- */

#define MAXROWS 1400
typedef struct row {
    char name[128];
    int pass, fail, claimed;
    long ms;                        /* rank 0's time in these checks */
    char why[600];
} row_t;

typedef struct shared {
    int lock;
    int nrows;
    row_t rows[MAXROWS];
    int done[MAXR];                 /* rank finished all its checks */
    int arrive[MAXR][16];           /* barrier checks */
} shared_t;

static shared_t *g;

static void tlock(void) { while (__atomic_exchange_n(&g->lock, 1, __ATOMIC_ACQUIRE)) sched_yield(); }
static void tunlock(void) { __atomic_store_n(&g->lock, 0, __ATOMIC_RELEASE); }

static int row_id(const char *name) {
    int id = -1;
    tlock();
    for (int i = 0; i < g->nrows; i++)
        if (strcmp(g->rows[i].name, name) == 0) { id = i; break; }
    if (id < 0 && g->nrows < MAXROWS) {
        id = g->nrows++;
        memset(&g->rows[id], 0, sizeof g->rows[id]);
        snprintf(g->rows[id].name, sizeof g->rows[id].name, "%s", name);
    }
    tunlock();
    return id;
}

static void rec(int id, int rank, int good, const char *fmt, ...) {
    row_t *r;
    va_list ap;
    if (id < 0) return;
    r = &g->rows[id];
    if (good) { __atomic_add_fetch(&r->pass, 1, __ATOMIC_SEQ_CST); return; }
    va_start(ap, fmt);
    check_failed_v(&r->fail, &r->claimed, r->why, sizeof r->why, rank, fmt, ap);
    va_end(ap);
}

/* ---- 16-bit floats, written independently of the library ----------------- */

static uint16_t enc16(float x, int mant, int ebits) {
    int bias = (1 << (ebits - 1)) - 1, e;
    uint16_t sign = signbit(x) ? 0x8000 : 0, inf = (uint16_t)(((1u << ebits) - 1) << mant);
    double a = fabs((double)x), q;
    uint32_t m;
    int E;
    if (isnan(x)) return (uint16_t)(sign | inf | (1u << (mant - 1)));
    if (isinf(x)) return (uint16_t)(sign | inf);
    if (a == 0) return sign;
    frexp(a, &e);
    E = e - 1;                           /* a = 1.f x 2^E */
    if (E < 1 - bias) E = 1 - bias;      /* subnormal: fixed quantum */
    q = ldexp(a, mant - E);
    m = (uint32_t)nearbyint(q);          /* round to nearest, ties to even */
    if (m >= (2u << mant)) { m >>= 1; E++; }
    if (E > bias) return (uint16_t)(sign | inf);
    if (m < (1u << mant)) return (uint16_t)(sign | m);
    return (uint16_t)(sign | (uint32_t)(E + bias) << mant | (m - (1u << mant)));
}

static float dec16(uint16_t h, int mant, int ebits) {
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t e = (h >> mant) & ((1u << ebits) - 1), m = h & ((1u << mant) - 1);
    double v;
    if (e == (1u << ebits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mant);
    else v = ldexp((double)(m + (1u << mant)), (int)e - bias - mant);
    return (float)((h & 0x8000) ? -v : v);
}

static uint16_t f2h(float x) { return enc16(x, 10, 5); }
static float h2f(uint16_t h) { return dec16(h, 10, 5); }
static uint16_t f2b(float x) { return enc16(x, 7, 8); }
static float b2f(uint16_t h) { return dec16(h, 7, 8); }

/* Lookup tables, filled once from the functions above (speed only). */
static float tab_h2f[65536], tab_b2f[65536];
static uint8_t tab_small[8][17][8];   /* [dtype][v + 8]: the integer v encoded */
static uint8_t tab_prod[8][6][8];     /* [dtype][k]: prods[k] encoded */
static void put_int(dist_dtype t, uint64_t v, uint8_t *p);
static void put_flt(dist_dtype t, double v, uint8_t *p);
static const double prods[6] = { -2, -1, -0.5, 0.5, 1, 2 };
static int is_int(dist_dtype t);

static void init_tables(void) {
    for (uint32_t h = 0; h < 65536; h++) { tab_h2f[h] = h2f((uint16_t)h); tab_b2f[h] = b2f((uint16_t)h); }
    for (int t = 0; t < 8; t++) {
        for (int v = -8; v <= 8; v++) {
            if (is_int((dist_dtype)t)) put_int((dist_dtype)t, (uint64_t)(int64_t)v, tab_small[t][v + 8]);
            else put_flt((dist_dtype)t, v, tab_small[t][v + 8]);
        }
        for (int k = 0; k < 6; k++) if (!is_int((dist_dtype)t)) put_flt((dist_dtype)t, prods[k], tab_prod[t][k]);
    }
}

/* ---- inputs: a hash of (seed, rank, index) -------------------------------- */

/* (mix64: testutil.h) */
static uint64_t rbase(uint64_t seed, int rank) { return mix64(seed * 0x100000001b3ULL + (uint64_t)(rank + 1) * 0x9E3779B97F4A7C15ULL); }
static uint64_t rval(uint64_t base, size_t i) { return mix64(base ^ ((uint64_t)i * 0xD1B54A32D192ED03ULL)); }

enum { K_DATA, K_SUM, K_PROD, K_MAXMIN, K_AVG };

static int kind_of(dist_op op) {
    switch (op) {
    case DIST_SUM: return K_SUM;
    case DIST_PRODUCT: return K_PROD;
    case DIST_MAX: case DIST_MIN: return K_MAXMIN;
    default: return K_AVG;
    }
}

static int is_int(dist_dtype t) { return t == DIST_INT8 || t == DIST_UINT8 || t == DIST_INT32 || t == DIST_INT64; }

static void put_int(dist_dtype t, uint64_t v, uint8_t *p) {
    size_t es = dist_dtype_size(t);
    for (size_t b = 0; b < es; b++) p[b] = (uint8_t)(v >> (8 * b));   /* little-endian host assumed (x86/arm) */
}

static int64_t get_int(dist_dtype t, const uint8_t *p) {
    switch (t) {
    case DIST_INT8: { int8_t v; memcpy(&v, p, 1); return v; }
    case DIST_UINT8: return p[0];
    case DIST_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void put_flt(dist_dtype t, double v, uint8_t *p) {
    switch (t) {
    case DIST_FLOAT16: { uint16_t h = f2h((float)v); memcpy(p, &h, 2); break; }
    case DIST_BFLOAT16: { uint16_t h = f2b((float)v); memcpy(p, &h, 2); break; }
    case DIST_FLOAT32: { float f = (float)v; memcpy(p, &f, 4); break; }
    default: memcpy(p, &v, 8); break;
    }
}

static double get_flt(dist_dtype t, const uint8_t *p) {
    uint16_t h;
    switch (t) {
    case DIST_FLOAT16: memcpy(&h, p, 2); return tab_h2f[h];
    case DIST_BFLOAT16: memcpy(&h, p, 2); return tab_b2f[h];
    case DIST_FLOAT32: { float f; memcpy(&f, p, 4); return f; }
    default: { double d; memcpy(&d, p, 8); return d; }
    }
}

/* Random finite bits of a float type, never -0. */
static void put_random_finite(dist_dtype t, uint64_t h, uint8_t *p) {
    switch (t) {
    case DIST_FLOAT16: case DIST_BFLOAT16: {
        uint16_t v = (uint16_t)h, expmask = t == DIST_FLOAT16 ? 0x7c00 : 0x7f80;
        if ((v & expmask) == expmask) v = (uint16_t)(v & ~0x4000);   /* Inf/NaN: clear the top exponent bit */
        if (v == 0x8000) v = 0;
        memcpy(p, &v, 2);
        break;
    }
    case DIST_FLOAT32: {
        uint32_t v = (uint32_t)h;
        if ((v & 0x7f800000u) == 0x7f800000u) v &= ~0x40000000u;
        if (v == 0x80000000u) v = 0;
        memcpy(p, &v, 4);
        break;
    }
    default: {
        uint64_t v = h;
        if ((v & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL) v &= ~0x4000000000000000ULL;
        if (v == 0x8000000000000000ULL) v = 0;
        memcpy(p, &v, 8);
        break;
    }
    }
}

static void put_elem(dist_dtype t, int kind, uint64_t h, uint8_t *p) {
    if (kind == K_DATA) {
        switch (t) {
        case DIST_INT8: case DIST_UINT8: p[0] = (uint8_t)h; break;
        case DIST_FLOAT16: case DIST_BFLOAT16: { uint16_t v = (uint16_t)h; memcpy(p, &v, 2); break; }
        case DIST_INT32: case DIST_FLOAT32: { uint32_t v = (uint32_t)h; memcpy(p, &v, 4); break; }
        default: memcpy(p, &h, 8); break;
        }
        return;
    }
    if (is_int(t)) {
        switch (kind) {
        case K_SUM: case K_MAXMIN: put_int(t, h, p); break;
        case K_PROD: put_int(t, h | ((h >> 62) ? 1 : 0), p); break;
        default: put_int(t, t == DIST_UINT8 ? h % 17 : (uint64_t)((int64_t)(h % 17) - 8), p); break;
        }
        return;
    }
    switch (kind) {
    case K_SUM: case K_AVG: memcpy(p, tab_small[t][h % 17], dist_dtype_size(t)); break;
    case K_PROD: memcpy(p, tab_prod[t][h % 6], dist_dtype_size(t)); break;
    default: put_random_finite(t, h, p); break;
    }
}

static void fill(uint8_t *buf, size_t count, dist_dtype t, int kind, uint64_t base, size_t off) {
    size_t es = dist_dtype_size(t);
    for (size_t i = 0; i < count; i++) put_elem(t, kind, rval(base, off + i), buf + i * es);
}

/* The expected reduction of element `idx` over the inputs of ranks 0..n-1. */
static void ref_reduce(dist_dtype t, dist_op op, int n, const uint64_t *bases, size_t idx, uint8_t *out) {
    int kind = kind_of(op);
    uint8_t v[8];
    if (is_int(t)) {
        uint64_t acc = 0;
        int64_t best = 0, sum = 0;
        for (int r = 0; r < n; r++) {
            int64_t x;
            put_elem(t, kind, rval(bases[r], idx), v);
            x = get_int(t, v);
            switch (op) {
            case DIST_SUM: acc += (uint64_t)x; break;
            case DIST_PRODUCT: acc = r ? acc * (uint64_t)x : (uint64_t)x; break;
            case DIST_MAX: best = (r == 0 || x > best) ? x : best; break;
            case DIST_MIN: best = (r == 0 || x < best) ? x : best; break;
            default: sum += x; break;
            }
        }
        if (op == DIST_SUM || op == DIST_PRODUCT) put_int(t, acc, out);
        else if (op == DIST_AVG) put_int(t, (uint64_t)(sum / n), out);
        else put_int(t, (uint64_t)best, out);
    } else {
        double acc = 0, best = 0;
        size_t es = dist_dtype_size(t);
        for (int r = 0; r < n; r++) {
            double x;
            put_elem(t, kind, rval(bases[r], idx), v);
            x = get_flt(t, v);
            switch (op) {
            case DIST_SUM: case DIST_AVG: acc += x; break;
            case DIST_PRODUCT: acc = r ? acc * x : x; break;
            case DIST_MAX: if (r == 0 || x > best) { best = x; memcpy(out, v, es); } break;
            default: if (r == 0 || x < best) { best = x; memcpy(out, v, es); } break;
            }
        }
        if (op == DIST_SUM || op == DIST_PRODUCT) put_flt(t, acc, out);
        else if (op == DIST_AVG) {
            if (t == DIST_FLOAT64) put_flt(t, acc / (double)n, out);
            else { float q = (float)acc / (float)n; put_flt(t, (double)q, out); }
        }
    }
}

static void hex(const uint8_t *p, size_t es, char *out) {
    for (size_t b = 0; b < es; b++) sprintf(out + 2 * b, "%02x", p[es - 1 - b]);
}

#define CHUNK 2048

static int first_diff(const uint8_t *got, const uint8_t *exp, size_t k, size_t es, size_t c0, char *why, size_t cap, const char *what) {
    for (size_t i = 0; i < k; i++)
        if (memcmp(got + i * es, exp + i * es, es) != 0) {
            char a[20], b[20];
            hex(got + i * es, es, a); hex(exp + i * es, es, b);
            snprintf(why, cap, "%s element %zu: got 0x%s, expected 0x%s", what, c0 + i, a, b);
            return 0;
        }
    return 1;
}

/* Compare got[0..count) with generated data (kind, base, from index off). */
static int cmp_gen(const uint8_t *got, size_t count, dist_dtype t, int kind, uint64_t base, size_t off, char *why, size_t cap, const char *what) {
    size_t es = dist_dtype_size(t);
    uint8_t e[CHUNK * 8];
    for (size_t c0 = 0; c0 < count; c0 += CHUNK) {
        size_t k = count - c0 < CHUNK ? count - c0 : CHUNK;
        fill(e, k, t, kind, base, off + c0);
        if (memcmp(got + c0 * es, e, k * es) != 0) return first_diff(got + c0 * es, e, k, es, c0, why, cap, what);
    }
    return 1;
}

/* Compare got[0..count) with the reduction of elements off.. over n ranks. */
static int cmp_red(const uint8_t *got, size_t count, dist_dtype t, dist_op op, int n, const uint64_t *bases, size_t off,
                   char *why, size_t cap, const char *what) {
    size_t es = dist_dtype_size(t);
    uint8_t e[CHUNK * 8];
    for (size_t c0 = 0; c0 < count; c0 += CHUNK) {
        size_t k = count - c0 < CHUNK ? count - c0 : CHUNK;
        for (size_t i = 0; i < k; i++) ref_reduce(t, op, n, bases, off + c0 + i, e + i * es);
        if (memcmp(got + c0 * es, e, k * es) != 0) return first_diff(got + c0 * es, e, k, es, c0, why, cap, what);
    }
    return 1;
}

/* ---- buffers with guard bytes ----------------------------------------------- */

static uint8_t *galloc(size_t bytes) {
    uint8_t *p = (uint8_t *)malloc(bytes + 2 * GUARD);
    if (!p) { fprintf(stderr, "out of memory (%zu bytes)\n", bytes); exit(70); }
    memset(p, 0xA5, GUARD);
    memset(p + GUARD, FILLB, bytes);
    memset(p + GUARD + bytes, 0xA5, GUARD);
    return p + GUARD;
}
static int gok(const uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < GUARD; i++) if (p[-1 - (ptrdiff_t)i] != 0xA5 || p[bytes + i] != 0xA5) return 0;
    return 1;
}
static void gfree(uint8_t *p) { if (p) free(p - GUARD); }

/* ---- one rank's job ----------------------------------------------------------- */

static const dist_dtype dtypes[8] = { DIST_INT8, DIST_UINT8, DIST_INT32, DIST_INT64, DIST_FLOAT16, DIST_BFLOAT16, DIST_FLOAT32, DIST_FLOAT64 };
static const char *op_names[5] = { "sum", "product", "max", "min", "avg" };

enum { C_BCAST, C_REDUCE, C_ALLRED, C_GATHER, C_ALLGATHER, C_SCATTER, C_REDSCAT, C_ALLTOALL, C_NCOLL };
static const char *coll_names[C_NCOLL] = { "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter", "reduce_scatter", "all_to_all" };
static const int coll_has_op[C_NCOLL] = { 0, 1, 1, 0, 0, 0, 1, 0 };
static const int coll_has_root[C_NCOLL] = { 1, 1, 0, 1, 0, 1, 0, 0 };
static const int coll_nvariants[C_NCOLL] = { 1, 1, 1, 2, 3, 2, 3, 2 };

typedef struct cfgarg {
    int n;
    const char *algo;      /* "auto", "DIST_ALGO=ring", "DIST_ALGO=tree" */
    int full;              /* 1 every collective, else broadcast/reduce/all_reduce (2: and all_gather) */
    int spawn_id;
} cfgarg_t;

static int runs_coll(const cfgarg_t *c, int coll) {
    return c->full == 1 || coll == C_BCAST || coll == C_REDUCE || coll == C_ALLRED || (c->full == 2 && coll == C_ALLGATHER);
}

typedef struct J {
    dist_t *w;
    int n, me;
    const cfgarg_t *c;
    uint64_t seq;
    uint64_t bases[MAXR];
    char why[600];
} J;

static uint64_t next_seed(J *j) {
    uint64_t s = mix64(((uint64_t)j->c->spawn_id << 40) ^ ++j->seq);
    for (int r = 0; r < j->n; r++) j->bases[r] = rbase(s, r);
    return s;
}

static const char *variant_name(int coll, int v) {
    switch (coll) {
    case C_GATHER: return v ? "in-place at the root (send == recv + root*count)" : "out-of-place, recv NULL off the root";
    case C_SCATTER: return v ? "in-place at the root (recv == send + root*count)" : "out-of-place, send NULL off the root";
    case C_ALLGATHER: return v == 0 ? "out-of-place" : v == 1 ? "in-place (send == recv + rank*count)" : "in-place (send == recv)";
    case C_REDSCAT: return v == 0 ? "out-of-place" : v == 1 ? "in-place (recv == send + rank*count)" : "in-place (recv == send)";
    case C_ALLTOALL: return v ? "in-place (send == recv)" : "out-of-place";
    default: return "in place";
    }
}

/* Runs one collective with one (dtype, op, count, root, variant) and
   judges this rank's result.  Returns 1 when it passed. */
static int run_one(J *j, int row, int coll, dist_dtype t, dist_op op, size_t count, int root, int v) {
    long t_start = now_ms();
    int n = j->n, me = j->me, kind = coll_has_op[coll] ? kind_of(op) : K_DATA, good = 1;
    size_t es = dist_dtype_size(t), bytes = count * es, nb = bytes * (size_t)n;
    uint8_t *a = NULL, *b = NULL;          /* owned allocations */
    const void *send = NULL;
    void *recv = NULL;
    uint8_t *res = NULL;                   /* where this rank's result lands */
    dist_result r = DIST_OK;
    char combo[200], *why = j->why;
    int null_ok = count == 0 && v == 0;    /* count 0: NULL buffers */
    uint64_t seed = next_seed(j), junk = rbase(seed ^ 0x5a5a5a5aULL, me);
    (void)seed;
    why[0] = 0;
    combo[0] = 0;
    if (coll_has_op[coll]) snprintf(combo, sizeof combo, "op %s, ", op_names[op]);
    snprintf(combo + strlen(combo), sizeof combo - strlen(combo), "count %zu", count);
    if (coll_has_root[coll]) snprintf(combo + strlen(combo), sizeof combo - strlen(combo), ", root %d", root);
    if (coll_nvariants[coll] > 1) snprintf(combo + strlen(combo), sizeof combo - strlen(combo), ", %s", variant_name(coll, v));

    switch (coll) {
    case C_BCAST:
        a = galloc(bytes);
        fill(a, count, t, K_DATA, me == root ? j->bases[root] : junk, 0);
        r = dist_broadcast(j->w, null_ok ? NULL : a, count, t, root);
        if (r == DIST_OK) good = cmp_gen(a, count, t, K_DATA, j->bases[root], 0, why, 600, "buf");
        if (good && !gok(a, bytes)) { good = 0; snprintf(why, 600, "bytes around the buffer were overwritten"); }
        break;
    case C_REDUCE:
        a = galloc(bytes);
        fill(a, count, t, kind, j->bases[me], 0);
        r = dist_reduce(j->w, null_ok ? NULL : a, count, t, op, root);
        if (r == DIST_OK) {
            if (me == root) good = cmp_red(a, count, t, op, n, j->bases, 0, why, 600, "root's buf");
            else good = cmp_gen(a, count, t, kind, j->bases[me], 0, why, 600, "non-root buf (must stay unchanged)");
        }
        if (good && !gok(a, bytes)) { good = 0; snprintf(why, 600, "bytes around the buffer were overwritten"); }
        break;
    case C_ALLRED:
        a = galloc(bytes);
        fill(a, count, t, kind, j->bases[me], 0);
        r = dist_all_reduce(j->w, null_ok ? NULL : a, count, t, op);
        if (r == DIST_OK) good = cmp_red(a, count, t, op, n, j->bases, 0, why, 600, "buf");
        if (good && !gok(a, bytes)) { good = 0; snprintf(why, 600, "bytes around the buffer were overwritten"); }
        break;
    case C_GATHER:
        if (v == 0) {
            a = galloc(bytes);
            fill(a, count, t, K_DATA, j->bases[me], 0);
            if (me == root) b = galloc(nb);
            send = null_ok ? NULL : a;
            recv = null_ok ? NULL : b;     /* NULL off the root */
            r = dist_gather(j->w, send, recv, count, t, root);
            res = b;
        } else if (me == root) {
            b = galloc(nb);
            fill(b + (size_t)root * bytes, count, t, K_DATA, j->bases[me], 0);
            r = dist_gather(j->w, b + (size_t)root * bytes, b, count, t, root);
            res = b;
        } else {
            a = galloc(bytes);
            fill(a, count, t, K_DATA, j->bases[me], 0);
            r = dist_gather(j->w, a, NULL, count, t, root);
        }
        if (r == DIST_OK && res)
            for (int k = 0; k < n && good; k++) {
                char what[40];
                snprintf(what, sizeof what, "recv block %d", k);
                good = cmp_gen(res + (size_t)k * bytes, count, t, K_DATA, j->bases[k], 0, why, 600, what);
            }
        if (r == DIST_OK && a && v == 0) good = good && cmp_gen(a, count, t, K_DATA, j->bases[me], 0, why, 600, "send (must stay unchanged)");
        if (good && ((a && !gok(a, bytes)) || (b && !gok(b, nb)))) { good = 0; snprintf(why, 600, "bytes around a buffer were overwritten"); }
        break;
    case C_SCATTER:
        if (v == 0) {
            if (me == root) { a = galloc(nb); fill(a, count * (size_t)n, t, K_DATA, j->bases[root], 0); }
            b = galloc(bytes);
            send = null_ok ? NULL : a;     /* NULL off the root */
            recv = null_ok ? NULL : b;
            r = dist_scatter(j->w, send, recv, count, t, root);
            res = b;
        } else if (me == root) {
            a = galloc(nb);
            fill(a, count * (size_t)n, t, K_DATA, j->bases[root], 0);
            r = dist_scatter(j->w, a, a + (size_t)root * bytes, count, t, root);
            res = a + (size_t)root * bytes;
        } else {
            b = galloc(bytes);
            r = dist_scatter(j->w, NULL, b, count, t, root);
            res = b;
        }
        if (r == DIST_OK) good = cmp_gen(res, count, t, K_DATA, j->bases[root], (size_t)me * count, why, 600, "recv");
        if (r == DIST_OK && good && me == root)
            good = cmp_gen(a, count * (size_t)n, t, K_DATA, j->bases[root], 0, why, 600, "root's send (must stay unchanged)");
        if (good && ((a && !gok(a, me == root ? nb : bytes)) || (b && !gok(b, bytes)))) { good = 0; snprintf(why, 600, "bytes around a buffer were overwritten"); }
        break;
    case C_ALLGATHER:
        b = galloc(nb);
        if (v == 0) {
            a = galloc(bytes);
            fill(a, count, t, K_DATA, j->bases[me], 0);
            r = dist_all_gather(j->w, null_ok ? NULL : a, null_ok ? NULL : b, count, t);
        } else if (v == 1) {
            fill(b + (size_t)me * bytes, count, t, K_DATA, j->bases[me], 0);
            r = dist_all_gather(j->w, b + (size_t)me * bytes, b, count, t);
        } else {
            fill(b, count, t, K_DATA, j->bases[me], 0);
            r = dist_all_gather(j->w, b, b, count, t);
        }
        if (r == DIST_OK)
            for (int k = 0; k < n && good; k++) {
                char what[40];
                snprintf(what, sizeof what, "recv block %d", k);
                good = cmp_gen(b + (size_t)k * bytes, count, t, K_DATA, j->bases[k], 0, why, 600, what);
            }
        if (good && ((a && !gok(a, bytes)) || !gok(b, nb))) { good = 0; snprintf(why, 600, "bytes around a buffer were overwritten"); }
        break;
    case C_REDSCAT:
        a = galloc(nb);
        fill(a, count * (size_t)n, t, kind, j->bases[me], 0);
        if (v == 0) {
            b = galloc(bytes);
            r = dist_reduce_scatter(j->w, null_ok ? NULL : a, null_ok ? NULL : b, count, t, op);
            res = b;
        } else if (v == 1) {
            r = dist_reduce_scatter(j->w, a, a + (size_t)me * bytes, count, t, op);
            res = a + (size_t)me * bytes;
        } else {
            r = dist_reduce_scatter(j->w, a, a, count, t, op);
            res = a;
        }
        if (r == DIST_OK) good = cmp_red(res, count, t, op, n, j->bases, (size_t)me * count, why, 600, "recv");
        if (r == DIST_OK && good && v == 0 && count != BIG) good = cmp_gen(a, count * (size_t)n, t, kind, j->bases[me], 0, why, 600, "send (must stay unchanged)");
        if (good && (!gok(a, nb) || (b && !gok(b, bytes)))) { good = 0; snprintf(why, 600, "bytes around a buffer were overwritten"); }
        break;
    case C_ALLTOALL:
        a = galloc(nb);
        fill(a, count * (size_t)n, t, K_DATA, j->bases[me], 0);
        if (v == 0) {
            b = galloc(nb);
            r = dist_all_to_all(j->w, null_ok ? NULL : a, null_ok ? NULL : b, count, t);
            res = b;
        } else {
            r = dist_all_to_all(j->w, a, a, count, t);
            res = a;
        }
        if (r == DIST_OK)
            for (int k = 0; k < n && good; k++) {
                char what[40];
                snprintf(what, sizeof what, "recv block %d", k);
                good = cmp_gen(res + (size_t)k * bytes, count, t, K_DATA, j->bases[k], (size_t)me * count, why, 600, what);
            }
        if (r == DIST_OK && good && v == 0 && count != BIG) good = cmp_gen(a, count * (size_t)n, t, K_DATA, j->bases[me], 0, why, 600, "send (must stay unchanged)");
        if (good && (!gok(a, nb) || (b && !gok(b, nb)))) { good = 0; snprintf(why, 600, "bytes around a buffer were overwritten"); }
        break;
    }
    if (r != DIST_OK) { good = 0; snprintf(why, 600, "returned %s: %s", dist_result_name(r), dist_error_message(j->w)); }
    rec(row, me, good, "%s %s %s: %s", coll_names[coll], dist_dtype_name(t), combo, why);
    gfree(a); gfree(b);
    if (me == 0 && row >= 0) g->rows[row].ms += now_ms() - t_start;
    return good;
}

static int row_name(char *out, size_t cap, const cfgarg_t *c, const char *what, const char *dt, const char *extra) {
    return snprintf(out, cap, "n=%d %s: %s %s%s", c->n, c->algo, what, dt, extra);
}

static int coll_row(const cfgarg_t *c, int coll, dist_dtype t, int big) {
    char name[128];
    row_name(name, sizeof name, c, coll_names[coll], dist_dtype_name(t), big ? ", count 1048579" : "");
    return row_id(name);
}

static int nroots(int n, int *roots) {
    int k = 0;
    roots[k++] = 0;
    if (n - 1 != 0) roots[k++] = n - 1;
    if (n >= 3) roots[k++] = n / 2;
    return k;
}

static int ncounts(int n, size_t *counts) {
    size_t c[4] = { 0, 1, (size_t)n - 1, (size_t)n + 1 };
    int k = 0;
    for (int i = 0; i < 4; i++) {
        int dup = 0;
        for (int m = 0; m < k; m++) dup |= counts[m] == c[i];
        if (!dup) counts[k++] = c[i];
    }
    return k;
}

/* Small counts: every dtype x op x count x root x variant. */
static void small_counts(J *j, int coll) {
    int roots[3], nr = coll_has_root[coll] ? nroots(j->n, roots) : 1;
    size_t counts[4];
    int nc = ncounts(j->n, counts);
    if (!coll_has_root[coll]) roots[0] = 0;
    for (int ti = 0; ti < 8; ti++) {
        int row = coll_row(j->c, coll, dtypes[ti], 0);
        for (int op = 0; op < (coll_has_op[coll] ? DIST_OP_COUNT : 1); op++)
            for (int ci = 0; ci < nc; ci++)
                for (int ri = 0; ri < nr; ri++)
                    for (int v = 0; v < coll_nvariants[coll]; v++)
                        run_one(j, row, coll, dtypes[ti], (dist_op)op, counts[ci], roots[ri], v);
    }
}

/* 1M+3: float32 and int32 x {sum, max} (where an op applies), root n-1,
   (the "send stays unchanged" checks run at small counts only),
   out-of-place (all_to_all also in place); all_reduce also float16 and
   bfloat16 with sum. */
static int g_quick;   /* TEST_COLL_QUICK: the 1M+3 subset is float32 sum only */

static void big_count(J *j, int coll) {
    static const dist_dtype ts[2] = { DIST_FLOAT32, DIST_INT32 };
    static const dist_op ops[2] = { DIST_SUM, DIST_MAX };
    for (int ti = 0; ti < (g_quick ? 1 : 2); ti++) {
        int row = coll_row(j->c, coll, ts[ti], 1);
        for (int oi = 0; oi < (coll_has_op[coll] && !g_quick ? 2 : 1); oi++)
            for (int v = 0; v < (coll == C_ALLTOALL ? 2 : 1); v++)
                run_one(j, row, coll, ts[ti], ops[oi], BIG, j->n - 1, v);
    }
    if (coll == C_ALLRED && !g_quick) {
        run_one(j, coll_row(j->c, coll, DIST_FLOAT16, 1), coll, DIST_FLOAT16, DIST_SUM, BIG, 0, 0);
        run_one(j, coll_row(j->c, coll, DIST_BFLOAT16, 1), coll, DIST_BFLOAT16, DIST_SUM, BIG, 0, 0);
    }
}

/* Barrier: every rank marks its arrival (in shared memory) after a
   rank-dependent delay; after the barrier every rank must see every
   arrival. */
static void barrier_check(J *j) {
    char name[128];
    int row;
    row_name(name, sizeof name, j->c, "barrier", "", "(8 rounds, ranks arrive at staggered times)");
    row = row_id(name);
    for (int k = 0; k < 8; k++) {
        dist_result r;
        int missing = -1;
        sleep_ms(((j->me * 7 + k * 3) % 5) * 3);
        __atomic_store_n(&g->arrive[j->me][k], 1, __ATOMIC_SEQ_CST);
        r = dist_barrier(j->w);
        for (int q = 0; q < j->n && missing < 0; q++) if (!__atomic_load_n(&g->arrive[q][k], __ATOMIC_SEQ_CST)) missing = q;
        rec(row, j->me, r == DIST_OK && missing < 0, "round %d: %s%s%s; rank %d had not arrived", k, dist_result_name(r),
            r ? ": " : "", r ? dist_error_message(j->w) : "", missing);
    }
}

/* Random non-integer data, full range of exponents for the type. */
static void fill_rand_float(uint8_t *buf, size_t count, dist_dtype t, uint64_t base) {
    size_t es = dist_dtype_size(t);
    int span = t == DIST_FLOAT16 || t == DIST_BFLOAT16 ? 4 : 20;
    for (size_t i = 0; i < count; i++) {
        uint64_t h = rval(base, i);
        double u = (double)(h >> 11) / 9007199254740992.0 - 0.5;      /* [-0.5, 0.5) */
        int e = (int)((h >> 3) % (uint64_t)(2 * span + 1)) - span;
        put_flt(t, ldexp(u, e), buf + i * es);
    }
}

/* all_reduce SUM of random floats: the same bits on every rank, and the
   same bits when run again; close to the exact sum. */
static void bitwise_check(J *j) {
    static const dist_dtype ts[4] = { DIST_FLOAT32, DIST_FLOAT64, DIST_FLOAT16, DIST_BFLOAT16 };
    static const size_t cs[2] = { 7, 100000 };
    char name[128];
    int row_id_same, row_det, row_close;
    row_name(name, sizeof name, j->c, "all_reduce sum of random floats:", "every rank has the same bits (rank 0 compares)", "");
    row_id_same = row_id(name);
    row_name(name, sizeof name, j->c, "all_reduce sum of random floats:", "run twice, the same bits (determinism)", "");
    row_det = row_id(name);
    row_name(name, sizeof name, j->c, "all_reduce sum of random floats:", "within rounding of the exact sum", "");
    row_close = row_id(name);
    for (int ti = 0; ti < 4; ti++)
        for (int ci = 0; ci < 2; ci++) {
            dist_dtype t = ts[ti];
            size_t count = cs[ci], es = dist_dtype_size(t), bytes = count * es;
            uint8_t *x = galloc(bytes), *y = galloc(bytes), *other = galloc(bytes);
            dist_result r1, r2;
            int tag = 700 + ti * 2 + ci;
            next_seed(j);
            fill_rand_float(x, count, t, j->bases[j->me]);
            memcpy(y, x, bytes);
            r1 = dist_all_reduce(j->w, x, count, t, DIST_SUM);
            r2 = dist_all_reduce(j->w, y, count, t, DIST_SUM);
            if (r1 != DIST_OK || r2 != DIST_OK) {
                rec(row_det, j->me, 0, "%s count %zu: %s / %s: %s", dist_dtype_name(t), count, dist_result_name(r1), dist_result_name(r2), dist_error_message(j->w));
            } else {
                size_t bad = (size_t)-1;
                for (size_t i = 0; i < bytes && bad == (size_t)-1; i++) if (x[i] != y[i]) bad = i / es;
                rec(row_det, j->me, bad == (size_t)-1, "%s count %zu: element %zu differs between run 1 and run 2", dist_dtype_name(t), count, bad);
                /* close to the exact sum: |err| <= 2 n eps sum|x_r| (+ the smallest subnormal) */
                {
                    double eps = t == DIST_FLOAT64 ? ldexp(1, -52) : t == DIST_FLOAT32 ? ldexp(1, -23) : t == DIST_FLOAT16 ? ldexp(1, -10) : ldexp(1, -7);
                    double tiny = t == DIST_FLOAT16 ? ldexp(1, -24) : t == DIST_BFLOAT16 ? ldexp(1, -133) : 0;
                    uint8_t *tmp = galloc(es);
                    size_t badi = (size_t)-1;
                    double got = 0, want = 0;
                    for (size_t i = 0; i < count && badi == (size_t)-1; i++) {
                        double s = 0, sa = 0, rv;
                        for (int q = 0; q < j->n; q++) {
                            uint64_t h = rval(j->bases[q], i);
                            double u = (double)(h >> 11) / 9007199254740992.0 - 0.5, v;
                            int span = t == DIST_FLOAT16 || t == DIST_BFLOAT16 ? 4 : 20;
                            int e = (int)((h >> 3) % (uint64_t)(2 * span + 1)) - span;
                            put_flt(t, ldexp(u, e), tmp);
                            v = get_flt(t, tmp);
                            s += v; sa += fabs(v);
                        }
                        rv = get_flt(t, x + i * es);
                        if (!(fabs(rv - s) <= 2.0 * j->n * eps * sa + tiny)) { badi = i; got = rv; want = s; }
                    }
                    rec(row_close, j->me, badi == (size_t)-1, "%s count %zu: element %zu is %.9g, the exact sum is %.9g", dist_dtype_name(t), count, badi, got, want);
                    gfree(tmp);
                }
            }
            /* every rank sends its result to rank 0, which compares bytes */
            if (j->me == 0) {
                for (int q = 1; q < j->n; q++) {
                    dist_result r = dist_recv(j->w, other, count, t, q, tag);
                    size_t bad = (size_t)-1;
                    if (r == DIST_OK) for (size_t i = 0; i < bytes && bad == (size_t)-1; i++) if (x[i] != other[i]) bad = i / es;
                    rec(row_id_same, 0, r == DIST_OK && bad == (size_t)-1, "%s count %zu: %s%s; rank %d's element %zu differs from rank 0's",
                        dist_dtype_name(t), count, dist_result_name(r), r ? dist_error_message(j->w) : "", q, bad);
                }
            } else {
                dist_result r = dist_send(j->w, x, count, t, 0, tag);
                if (r != DIST_OK) rec(row_id_same, j->me, 0, "send to rank 0: %s: %s", dist_result_name(r), dist_error_message(j->w));
            }
            gfree(x); gfree(y); gfree(other);
        }
}

static int rank_main(dist_t *w, void *arg) {
    J j;
    const cfgarg_t *c = (const cfgarg_t *)arg;
    memset(&j, 0, sizeof j);
    j.w = w; j.n = dist_world_size(w); j.me = dist_rank(w); j.c = c;
    if (j.n != c->n || j.me < 0 || j.me >= MAXR) return 3;
    for (int coll = 0; coll < C_NCOLL; coll++) {
        if (!runs_coll(c, coll)) continue;
        small_counts(&j, coll);
        big_count(&j, coll);
    }
    if (c->full == 1) barrier_check(&j);
    if (j.n > 1) bitwise_check(&j);
    g->done[j.me] = 1;
    return 0;
}

/* ---- the parent ----------------------------------------------------------------- */

/* The rows a job will fill, registered up front so that a row nobody
   reached shows as "never checked". */
static void preregister(const cfgarg_t *c) {
    char name[128];
    for (int coll = 0; coll < C_NCOLL; coll++) {
        if (!runs_coll(c, coll)) continue;
        for (int ti = 0; ti < 8; ti++) coll_row(c, coll, dtypes[ti], 0);
        coll_row(c, coll, DIST_FLOAT32, 1);
        if (!g_quick) coll_row(c, coll, DIST_INT32, 1);
        if (coll == C_ALLRED && !g_quick) { coll_row(c, coll, DIST_FLOAT16, 1); coll_row(c, coll, DIST_BFLOAT16, 1); }
    }
    if (c->full == 1) { row_name(name, sizeof name, c, "barrier", "", "(8 rounds, ranks arrive at staggered times)"); row_id(name); }
    if (c->n > 1) {
        row_name(name, sizeof name, c, "all_reduce sum of random floats:", "every rank has the same bits (rank 0 compares)", ""); row_id(name);
        row_name(name, sizeof name, c, "all_reduce sum of random floats:", "run twice, the same bits (determinism)", ""); row_id(name);
        row_name(name, sizeof name, c, "all_reduce sum of random floats:", "within rounding of the exact sum", ""); row_id(name);
    }
}

static void print_rows(int from) {
    for (int i = from; i < g->nrows; i++) {
        const row_t *r = &g->rows[i];
        if (r->fail) { printf("FAIL %s: %s (%d of %d checks failed)\n", r->name, r->why, r->fail, r->fail + r->pass); g_failures++; }
        else if (r->pass == 0) { printf("FAIL %s: never checked\n", r->name); g_failures++; }
        else if (r->ms >= 100) printf("ok   %s  [%d checks, %.1f s]\n", r->name, r->pass, r->ms / 1000.0);
        else printf("ok   %s  [%d checks]\n", r->name, r->pass);
    }
}

/* dist_spawn in a guard process with a deadline.  Windows has no fork:
   spawn_job runs the job in a process of its own, without the deadline
   (the runner's time limit still holds); its message goes to its own
   output. */
#ifdef _WIN32
static int guarded_spawn(const cfgarg_t *c, int deadline_ms, char *msg, size_t cap) {
    dist_config cfg;
    int rc;
    (void)deadline_ms;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 60000;
    rc = spawn_job(c->n, rank_main, (void *)c, &cfg);
    snprintf(msg, cap, "%s", rc ? "(the job's message is on the line \"spawn_job: ...\")" : "");
    return rc;
}
#else
static int guarded_spawn(const cfgarg_t *c, int deadline_ms, char *msg, size_t cap) {
    static char *shared_msg = NULL;
    static int *shared_rc = NULL;
    pid_t pid;
    int st = 0;
    long deadline;
    if (!shared_msg) {
        void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) { perror("mmap"); exit(1); }
        shared_rc = (int *)m;
        shared_msg = (char *)m + 64;
    }
    *shared_rc = -1000;
    shared_msg[0] = 0;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        dist_config cfg;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        memset(&cfg, 0, sizeof cfg);
        cfg.timeout_ms = 60000;
        *shared_rc = dist_spawn(c->n, rank_main, (void *)c, &cfg);
        snprintf(shared_msg, 1000, "%s", dist_error_message(NULL));
        fflush(NULL);
        _exit(0);
    }
    if (pid < 0) { perror("fork"); exit(1); }
    deadline = now_ms() + (long)(deadline_ms * g_scale);
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        if (now_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            snprintf(msg, cap, "did not finish within %.0f s (killed)", deadline_ms * g_scale / 1000);
            return -2;
        }
        sleep_ms(10);
    }
    snprintf(msg, cap, "%s", shared_msg);
    return *shared_rc;
}
#endif

int main(void) {
    static const int auto_sizes[] = { 1, 2, 3, 4, 5, 8 };
    static const int ring_sizes[] = { 2, 3, 5 };
    static const int tree_sizes[] = { 3, 4, 5 };
    static const int shm_sizes[] = { 2, 3, 5 };
    static const int halving_sizes[] = { 3, 4, 6 };
    cfgarg_t cfgs[24];
    int ncfg = 0;
    long t_all = now_ms();
    test_start();
    UNSET_ENV(LAUNCHER_ENV, "DIST_ALGO");
    init_tables();
    g = (shared_t *)mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED) { perror("mmap"); return 1; }
    if (first_process()) memset(g, 0, sizeof *g);      /* (Windows: not again in each job's processes) */

    /* Windows (under Wine, where it took 100 s of CI's time): the quick
       1M+3 subset unless TEST_COLL_QUICK says otherwise; the dtypes and ops
       are code every system shares, checked in full on Linux */
#ifdef _WIN32
    g_quick = getenv("TEST_COLL_QUICK") ? atoi(getenv("TEST_COLL_QUICK")) : 1;
#else
    /* the quick set (make test) too: every dtype and op at 1M+3 runs on TCP
       in the rest of the matrix, and at the small counts here */
    g_quick = getenv("TEST_COLL_QUICK") ? atoi(getenv("TEST_COLL_QUICK"))
            : getenv("DIST_TEST_SET") && strcmp(getenv("DIST_TEST_SET"), "quick") == 0;
#endif
    if (g_quick < 0) g_quick = 0;
    if (g_quick)
        printf("# 1M+3 subset (TEST_COLL_QUICK: the sanitizer passes, Windows, make test): float32 sum for every collective (root n-1;\n"
               "#              all_to_all also in place); the full subset runs in the other passes\n");
    else
        printf("# 1M+3 subset: float32, int32 x {sum, max} for every collective (root n-1; all_to_all also in place),\n"
               "#              float16, bfloat16 sum for all_reduce\n");
    printf("# DIST_ALGO=ring on n=2,3,5, DIST_ALGO=tree on n=3,4,5, DIST_ALGO=halving on n=3,4,6 (all_reduce only)\n"
           "# and DIST_ALGO=shm on n=2,3,5 (all_reduce, broadcast and all_gather in the shared\n"
           "# segments at every count, when the transport is shared memory): broadcast, reduce, all_reduce, all_gather only\n");

    {   /* the test's own converters: decode(encode(x)) over every 16-bit pattern */
        int bad = -1, badb = -1;
        for (uint32_t h = 0; h < 65536 && (bad < 0 || badb < 0); h++) {
            float f = h2f((uint16_t)h), fb = b2f((uint16_t)h);
            if (bad < 0 && !isnan(f) && f2h(f) != h) bad = (int)h;
            if (badb < 0 && !isnan(fb) && f2b(fb) != h) badb = (int)h;
        }
        /* and a few roundings: 2049 -> 2048 (tie to even), 2051 -> 2052, 1/3 */
        if (bad < 0 && (f2h(2049.0f) != 0x6800 || f2h(2051.0f) != 0x6802 || f2h(65520.0f) != 0x7c00 || f2h(1.0f / 3) != 0x3555)) bad = 0x10000;
        if (badb < 0 && (f2b(257.0f) != 0x4380 || f2b(259.0f) != 0x4382 || f2b(1.0f / 3) != 0x3eab)) badb = 0x10000;
        if (bad >= 0 || badb >= 0) { printf("FAIL the test's float16/bfloat16 converters: float16 0x%x, bfloat16 0x%x\n", bad, badb); g_failures++; }
        else printf("ok   the test's float16/bfloat16 converters round-trip all 65536 encodings and round to nearest even\n");
    }

    for (size_t i = 0; i < sizeof auto_sizes / sizeof *auto_sizes; i++, ncfg++) cfgs[ncfg] = (cfgarg_t){ auto_sizes[i], "auto", 1, ncfg + 1 };
    for (size_t i = 0; i < sizeof ring_sizes / sizeof *ring_sizes; i++, ncfg++) cfgs[ncfg] = (cfgarg_t){ ring_sizes[i], "DIST_ALGO=ring", 0, ncfg + 1 };
    for (size_t i = 0; i < sizeof tree_sizes / sizeof *tree_sizes; i++, ncfg++) cfgs[ncfg] = (cfgarg_t){ tree_sizes[i], "DIST_ALGO=tree", 0, ncfg + 1 };
    for (size_t i = 0; i < sizeof halving_sizes / sizeof *halving_sizes; i++, ncfg++) cfgs[ncfg] = (cfgarg_t){ halving_sizes[i], "DIST_ALGO=halving", 0, ncfg + 1 };
    for (size_t i = 0; i < sizeof shm_sizes / sizeof *shm_sizes; i++, ncfg++) cfgs[ncfg] = (cfgarg_t){ shm_sizes[i], "DIST_ALGO=shm", 2, ncfg + 1 };

    for (int k = 0; k < ncfg; k++) {
        const cfgarg_t *c = &cfgs[k];
        int from = g->nrows, rc, alldone = 1;
        long t0 = now_ms();
        char msg[1100] = "", label[64];
        const char *only = getenv("TEST_COLL_ONLY");     /* debugging: e.g. "n=8 auto" runs that job alone */
        snprintf(label, sizeof label, "n=%d %s", c->n, c->algo);
        if (only && only[0] && strcmp(only, label) != 0) { printf("# %s left out (TEST_COLL_ONLY)\n", label); g_failures++; continue; }
        if (g_quick >= 2 && c->n > 5) {   /* not a check: said, and left to the other passes */
            printf("# %s left out (TEST_COLL_QUICK=2, the ThreadSanitizer pass: more than 5 ranks run in the others)\n", label);
            continue;
        }
        memset(g->done, 0, sizeof g->done);
        memset(g->arrive, 0, sizeof g->arrive);
        preregister(c);
        if (strcmp(c->algo, "DIST_ALGO=ring") == 0) setenv("DIST_ALGO", "ring", 1);
        else if (strcmp(c->algo, "DIST_ALGO=tree") == 0) setenv("DIST_ALGO", "tree", 1);
        else if (strcmp(c->algo, "DIST_ALGO=shm") == 0) setenv("DIST_ALGO", "shm", 1);
        else if (strcmp(c->algo, "DIST_ALGO=halving") == 0) setenv("DIST_ALGO", "halving", 1);
        else unsetenv("DIST_ALGO");
        rc = guarded_spawn(c, 300000, msg, sizeof msg);
        unsetenv("DIST_ALGO");
        print_rows(from);
        for (int r = 0; r < c->n; r++) alldone &= g->done[r];
        if (rc != 0 || !alldone) {
            printf("FAIL n=%d %s: the job: dist_spawn returned %d%s%s; ranks done:", c->n, c->algo, rc, msg[0] ? ": " : "", msg);
            for (int r = 0; r < c->n; r++) printf(" %d", g->done[r]);
            printf("\n");
            g_failures++;
        } else {
            printf("ok   n=%d %s: every rank ran every check, dist_spawn returned 0  [%.1f s]\n", c->n, c->algo, (now_ms() - t0) / 1000.0);
        }
    }
    munmap(g, sizeof *g);
    printf("# total %.1f s\n", (now_ms() - t_all) / 1000.0);
    if (g_failures) { printf("%d check(s) failed\n", g_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
