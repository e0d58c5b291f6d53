// TIMEOUT: 600
// WINDOWS: no, it needs a CUDA device
/* test_cuda_gpu.c - dist_cuda.h on a CUDA device: on 1-8 ranks sharing it
   (DIST_CUDA_TEST_RANKS, default 2; products stay exact up to 4), every
   collective and send/recv on device buffers against values computed
   here, every dtype x op for all_reduce and for the local reduction
   kernel, counts 0 to 300001, and the in-place forms dist.h documents:
   - the staged path (chunks small enough that the pipeline turns over)
     on DIST_CUDA_TEST_RANKS ranks;
   - the IPC backend on 1, 2, ... DIST_CUDA_TEST_RANKS ranks, and on the
     most ranks also: buffers CUDA IPC cannot share (managed memory,
     pinned host memory) going through the staged path; the same buffers
     100 times mapping nothing new; a buffer freed and another allocated
     (perhaps at the same address) giving right results, its old mapping
     closed; reductions in launches of 2 inputs (the chain that more than
     8 ranks need); ranks passing different counts or ops failing with
     DIST_ERR_MISMATCH on every rank; a buffer that runs past its
     allocation failing on its rank and named on the others; and
     DIST_CUDA_BACKEND=ipc choosing IPC.
   Without a device it says so on one line and exits 77 (skipped).
   The no-device checks are in tests/test_cuda.c. */
#define DIST_IMPLEMENTATION
#define DIST_CUDA_IMPLEMENTATION
#include "dist_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* ---- with a device ------------------------------------------------------------ */
/* Element i of rank r's block b, as a small integer (exact in every dtype,
   sums and products of up to 4 ranks too). */
static int val(int r, int b, size_t i) { return 1 + (int)((r * 7 + b * 3 + (int)(i % 13)) % 3); }

static void put(dist_dtype t, void *p, size_t i, double v) {
    switch (t) {
    case DIST_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case DIST_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case DIST_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case DIST_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case DIST_FLOAT16: ((uint16_t *)p)[i] = dist__f32_to_f16((float)v); break;
    case DIST_BFLOAT16: ((uint16_t *)p)[i] = dist__f32_to_bf16((float)v); break;
    case DIST_FLOAT32: ((float *)p)[i] = (float)v; break;
    case DIST_FLOAT64: ((double *)p)[i] = v; break;
    default: break;
    }
}
static double get(dist_dtype t, const void *p, size_t i) {
    switch (t) {
    case DIST_INT8: return ((const int8_t *)p)[i];
    case DIST_UINT8: return ((const uint8_t *)p)[i];
    case DIST_INT32: return ((const int32_t *)p)[i];
    case DIST_INT64: return (double)((const int64_t *)p)[i];
    case DIST_FLOAT16: return dist__f16_to_f32(((const uint16_t *)p)[i]);
    case DIST_BFLOAT16: return dist__bf16_to_f32(((const uint16_t *)p)[i]);
    case DIST_FLOAT32: return ((const float *)p)[i];
    case DIST_FLOAT64: return ((const double *)p)[i];
    default: return 0;
    }
}
static double combine(dist_op op, double a, double b) {
    switch (op) {
    case DIST_SUM: case DIST_AVG: return a + b;
    case DIST_PRODUCT: return a * b;
    case DIST_MAX: return a > b ? a : b;
    case DIST_MIN: return a < b ? a : b;
    default: return 0;
    }
}
static double expect_reduced(dist_op op, int n, int b, size_t i, int is_int) {
    double acc = val(0, b, i);
    for (int r = 1; r < n; r++) acc = combine(op, acc, val(r, b, i));
    if (op == DIST_AVG) acc = is_int ? (double)((long long)acc / n) : acc / n;
    return acc;
}

typedef struct { dist_cuda__CUdeviceptr p; size_t bytes; } dbuf;
static int dalloc(dbuf *b, size_t bytes) { b->bytes = bytes; b->p = 0; return dist_cuda__cu.MemAlloc(&b->p, bytes ? bytes : 1) == 0 ? 0 : -1; }
static void dfree(dbuf *b) { if (b->p) dist_cuda__cu.MemFree(b->p); b->p = 0; }
static int up(dbuf *b, const void *h) { return b->bytes ? (dist_cuda__cu.MemcpyHtoD(b->p, h, b->bytes) == 0 ? 0 : -1) : 0; }
static int down(void *h, const dbuf *b) { return b->bytes ? (dist_cuda__cu.MemcpyDtoH(h, b->p, b->bytes) == 0 ? 0 : -1) : 0; }
#define DP(b) ((void *)(uintptr_t)(b).p)

/* Compares host buffer got (rows x count) with the expected function;
   returns the number of wrong elements (the first is printed). */
typedef double (*expect_fn)(int row, size_t i, void *ctx);
static int compare(const char *what, int rank, dist_dtype t, const void *got, int rows, size_t count, expect_fn f, void *ctx) {
    int wrong = 0;
    for (int r = 0; r < rows; r++)
        for (size_t i = 0; i < count; i++) {
            double e = f(r, i, ctx), g = get(t, got, (size_t)r * count + i);
            if (g != e && wrong++ == 0)
                printf("FAIL rank %d: %s %s: element [%d][%zu] is %g, want %g\n", rank, what, dist_dtype_name(t), r, i, g, e);
        }
    return wrong;
}

typedef struct { int n, me, root; dist_op op; int is_int; } ectx;
static double e_reduced(int row, size_t i, void *x) { ectx *e = (ectx *)x; (void)row; return expect_reduced(e->op, e->n, 0, i, e->is_int); }
static double e_rs(int row, size_t i, void *x) { ectx *e = (ectx *)x; (void)row; return expect_reduced(e->op, e->n, e->me, i, e->is_int); }
static double e_root_block(int row, size_t i, void *x) { ectx *e = (ectx *)x; (void)row; return val(e->root, 0, i); }
static double e_row_rank(int row, size_t i, void *x) { (void)x; return val(row, 0, i); }
static double e_scatter(int row, size_t i, void *x) { ectx *e = (ectx *)x; (void)row; return val(e->root, e->me, i); }
static double e_a2a(int row, size_t i, void *x) { ectx *e = (ectx *)x; return val(row, e->me, i); }

/* Every collective on communicator c, every dtype and count (see the top). */
static int sweep(dist_cuda_t *c, int me, int n) {
    const size_t counts[] = { 0, 1, 7, 1000, 300001 };   /* 300001: several staging chunks */
    int wrong = 0;
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        size_t count = counts[ci];
        for (int t = 0; t < DIST_DTYPE_COUNT; t++) {
            dist_dtype dt = (dist_dtype)t;
            size_t es = dist_dtype_size(dt), blk = count * es;
            int is_int = dt <= DIST_INT64;
            unsigned char *h = (unsigned char *)malloc(blk * (size_t)n + 16), *g = (unsigned char *)malloc(blk * (size_t)n + 16);
            dbuf a, b;
            if (!h || !g || dalloc(&a, blk * (size_t)n) || dalloc(&b, blk * (size_t)n)) { printf("FAIL rank %d: out of memory\n", me); return 1; }
            /* all_reduce: every op (every dtype, every count) */
            for (int op = 0; op < DIST_OP_COUNT; op++) {
                ectx e = { n, me, 0, (dist_op)op, is_int };
                char what[96];
                for (size_t i = 0; i < count; i++) put(dt, h, i, val(me, 0, i));
                a.bytes = blk;
                if (up(&a, h) || dist_cuda_all_reduce(c, DP(a), count, dt, (dist_op)op, NULL) != DIST_OK || down(g, &a)) {
                    printf("FAIL rank %d: all_reduce %zu x %s: %s\n", me, count, dist_dtype_name(dt), dist_cuda_error_message());
                    return 1;
                }
                snprintf(what, sizeof what, "all_reduce %zu x op %d of", count, op);
                wrong += compare(what, me, dt, g, 1, count, e_reduced, &e);
                /* the local kernel: a = a op b with b = rank 1's values */
                if (n >= 1) {
                    ectx two = { 2, me, 0, (dist_op)op, is_int };
                    dbuf x = { a.p, blk }, y = { b.p, blk };
                    for (size_t i = 0; i < count; i++) put(dt, h, i, val(0, 0, i));
                    for (size_t i = 0; i < count; i++) put(dt, g, i, val(1, 0, i));
                    if (up(&x, h) || up(&y, g) || dist_cuda_reduce_local(c, DP(x), DP(y), count, dt, (dist_op)op, NULL) != DIST_OK || down(g, &x)) {
                        printf("FAIL rank %d: reduce_local %zu x %s: %s\n", me, count, dist_dtype_name(dt), dist_cuda_error_message());
                        return 1;
                    }
                    two.op = op == DIST_AVG ? DIST_SUM : (dist_op)op;          /* the kernel sums for AVG */
                    snprintf(what, sizeof what, "reduce_local %zu x op %d of", count, op);
                    wrong += compare(what, me, dt, g, 1, count, e_reduced, &two);
                }
            }
            /* the others with SUM, every dtype */
            for (int root = 0; root < n; root++) {
                ectx e = { n, me, root, DIST_SUM, is_int };
                a.bytes = blk;
                for (size_t i = 0; i < count; i++) put(dt, h, i, val(me, 0, i));
                if (up(&a, h) || dist_cuda_broadcast(c, DP(a), count, dt, root, NULL) != DIST_OK || down(g, &a)) goto fail;
                wrong += compare("broadcast", me, dt, g, 1, count, e_root_block, &e);
                if (up(&a, h) || dist_cuda_reduce(c, DP(a), count, dt, DIST_SUM, root, NULL) != DIST_OK || down(g, &a)) goto fail;
                if (me == root) wrong += compare("reduce", me, dt, g, 1, count, e_reduced, &e);
                else wrong += compare("reduce (off the root: unchanged)", me, dt, g, 1, count, e_root_block, &(ectx){ n, me, me, DIST_SUM, is_int });
                b.bytes = blk * (size_t)n;
                if (up(&a, h) || dist_cuda_gather(c, DP(a), DP(b), count, dt, root, NULL) != DIST_OK || down(g, &b)) goto fail;
                if (me == root) wrong += compare("gather", me, dt, g, n, count, e_row_rank, &e);
                for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) put(dt, h, (size_t)r * count + i, val(me, r, i));
                if (up(&b, h) || dist_cuda_scatter(c, DP(b), DP(a), count, dt, root, NULL) != DIST_OK || down(g, &a)) goto fail;
                wrong += compare("scatter", me, dt, g, 1, count, e_scatter, &e);
            }
            {
                ectx e = { n, me, 0, DIST_SUM, is_int };
                a.bytes = blk; b.bytes = blk * (size_t)n;
                for (size_t i = 0; i < count; i++) put(dt, h, i, val(me, 0, i));
                if (up(&a, h) || dist_cuda_all_gather(c, DP(a), DP(b), count, dt, NULL) != DIST_OK || down(g, &b)) goto fail;
                wrong += compare("all_gather", me, dt, g, n, count, e_row_rank, &e);
                for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) put(dt, h, (size_t)r * count + i, val(me, r, i));
                if (up(&b, h) || dist_cuda_reduce_scatter(c, DP(b), DP(a), count, dt, DIST_SUM, NULL) != DIST_OK || down(g, &a)) goto fail;
                wrong += compare("reduce_scatter", me, dt, g, 1, count, e_rs, &e);
                dbuf o;
                if (dalloc(&o, blk * (size_t)n)) goto fail;
                if (up(&b, h) || dist_cuda_all_to_all(c, DP(b), DP(o), count, dt, NULL) != DIST_OK || down(g, &o)) { dfree(&o); goto fail; }
                dfree(&o);
                wrong += compare("all_to_all", me, dt, g, n, count, e_a2a, &e);
                if (n >= 2 && me < 2) {                         /* send/recv between ranks 0 and 1 */
                    ectx from = { n, me, 1 - me, DIST_SUM, is_int };
                    for (size_t i = 0; i < count; i++) put(dt, h, i, val(me, 0, i));
                    if (up(&a, h)) goto fail;
                    dist_result r1 = me == 0 ? dist_cuda_send(c, DP(a), count, dt, 1, 5, NULL) : dist_cuda_recv(c, DP(b), count, dt, 0, 5, NULL);
                    dist_result r2 = me == 0 ? dist_cuda_recv(c, DP(b), count, dt, 1, 6, NULL) : dist_cuda_send(c, DP(a), count, dt, 0, 6, NULL);
                    b.bytes = blk;
                    if (r1 != DIST_OK || r2 != DIST_OK || down(g, &b)) goto fail;
                    wrong += compare("send/recv", me, dt, g, 1, count, e_root_block, &from);
                }
            }
            dfree(&a); dfree(&b); free(h); free(g);
            continue;
        fail:
            printf("FAIL rank %d: %zu x %s: %s\n", me, count, dist_dtype_name(dt), dist_cuda_error_message());
            return 1;
        }
    }
    return wrong;
}

/* The in-place forms dist.h documents (float32).  The IPC backend runs
   some itself and sends the others through the staged path. */
static double e_rs_sum(int row, size_t i, void *x) { ectx *e = (ectx *)x; (void)row; return expect_reduced(DIST_SUM, e->n, e->me, i, 0); }
static double e_a2a_row(int row, size_t i, void *x) { ectx *e = (ectx *)x; return val(row, e->me, i); }
static int in_place(dist_cuda_t *c, int me, int n) {
    const dist_dtype dt = DIST_FLOAT32;
    const size_t counts[] = { 7, 1000 };
    int wrong = 0;
    for (size_t ci = 0; ci < 2; ci++) {
        const size_t count = counts[ci], blk = count * 4;
        float *h = (float *)malloc(blk * (size_t)n), *g = (float *)malloc(blk * (size_t)n);
        dbuf R, s;
        ectx e = { n, me, 0, DIST_SUM, 0 };
        const char *what = "";
        if (!h || !g || dalloc(&R, blk * (size_t)n) || dalloc(&s, blk)) { printf("FAIL rank %d: out of memory\n", me); return 1; }
#define FILL_ROWS(fn) for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) h[(size_t)r * count + i] = (float)(fn)
#define AT(buf, rows) ((void *)(uintptr_t)((buf).p + (size_t)(rows) * blk))
#define RUN(name, call) do { what = name; if (up(&R, h) || (call) != DIST_OK || down(g, &R)) goto fail; } while (0)
        /* all_gather, send == recv + rank x count, and send == recv */
        FILL_ROWS(r == me ? val(me, 0, i) : -1);
        RUN("all_gather (send = recv + rank x count)", dist_cuda_all_gather(c, AT(R, me), DP(R), count, dt, NULL));
        wrong += compare(what, me, dt, g, n, count, e_row_rank, &e);
        FILL_ROWS(r == 0 ? val(me, 0, i) : -1);
        RUN("all_gather (send = recv)", dist_cuda_all_gather(c, DP(R), DP(R), count, dt, NULL));
        wrong += compare(what, me, dt, g, n, count, e_row_rank, &e);
        for (int root = 0; root < n; root++) {
            /* gather at the root, send = recv + root x count, and send = recv;
               the others' recv NULL */
            for (size_t i = 0; i < count; i++) h[i] = (float)val(me, 0, i);
            if (up(&s, h)) goto fail;
            FILL_ROWS(r == root ? val(me, 0, i) : -1);
            RUN("gather (send = recv + root x count)", me == root ? dist_cuda_gather(c, AT(R, root), DP(R), count, dt, root, NULL)
                                                                   : dist_cuda_gather(c, DP(s), NULL, count, dt, root, NULL));
            if (me == root) wrong += compare(what, me, dt, g, n, count, e_row_rank, &e);
            FILL_ROWS(r == 0 ? val(me, 0, i) : -1);
            RUN("gather (send = recv)", me == root ? dist_cuda_gather(c, DP(R), DP(R), count, dt, root, NULL)
                                                   : dist_cuda_gather(c, DP(s), NULL, count, dt, root, NULL));
            if (me == root) wrong += compare(what, me, dt, g, n, count, e_row_rank, &e);
            /* scatter, recv = send + root x count at the root; the others' send NULL */
            ectx se = { n, me, root, DIST_SUM, 0 };
            FILL_ROWS(val(me, r, i));
            RUN("scatter (recv = send + root x count)", me == root ? dist_cuda_scatter(c, DP(R), AT(R, root), count, dt, root, NULL)
                                                                   : dist_cuda_scatter(c, NULL, DP(R), count, dt, root, NULL));
            wrong += compare(what, me, dt, (const char *)g + (me == root ? (size_t)root * blk : 0), 1, count, e_scatter, &se);
        }
        /* reduce_scatter, recv = send + rank x count, and recv = send */
        FILL_ROWS(val(me, r, i));
        RUN("reduce_scatter (recv = send + rank x count)", dist_cuda_reduce_scatter(c, DP(R), AT(R, me), count, dt, DIST_SUM, NULL));
        wrong += compare(what, me, dt, (const char *)g + (size_t)me * blk, 1, count, e_rs_sum, &e);
        RUN("reduce_scatter (recv = send)", dist_cuda_reduce_scatter(c, DP(R), DP(R), count, dt, DIST_SUM, NULL));
        wrong += compare(what, me, dt, g, 1, count, e_rs_sum, &e);
        /* all_to_all, send = recv */
        RUN("all_to_all (send = recv)", dist_cuda_all_to_all(c, DP(R), DP(R), count, dt, NULL));
        wrong += compare(what, me, dt, g, n, count, e_a2a_row, &e);
#undef FILL_ROWS
#undef AT
#undef RUN
        dfree(&R); dfree(&s); free(h); free(g);
        continue;
    fail:
        printf("FAIL rank %d: in place, %s, %zu x float32: %s\n", me, what, count, dist_cuda_error_message());
        return 1;
    }
    return wrong;
}

/* ---- the IPC backend's own checks ---------------------------------------------- */
static dist_result ipc_init(dist_t *world, dist_cuda_t **c) {
    dist_cuda_config cc = { 0 };
    cc.backend = DIST_CUDA_IPC;
    cc.chunk_bytes = 64 << 10;
    return dist_cuda_init(world, &cc, c);
}

/* all_reduce (SUM) of count int32 in a, checked; 0 when right. */
static int ipc_all_reduce_ok(dist_cuda_t *c, dbuf *a, size_t count, int me, int n, const char *what) {
    int32_t *h = (int32_t *)malloc(count * 4 + 4), *g = (int32_t *)malloc(count * 4 + 4);
    ectx e = { n, me, 0, DIST_SUM, 1 };
    int wrong = 1;
    for (size_t i = 0; i < count; i++) h[i] = val(me, 0, i);
    a->bytes = count * 4;
    if (!h || !g) printf("FAIL rank %d: out of memory\n", me);
    else if (up(a, h) || dist_cuda_all_reduce(c, DP(*a), count, DIST_INT32, DIST_SUM, NULL) != DIST_OK || down(g, a))
        printf("FAIL rank %d: %s: %s\n", me, what, dist_cuda_error_message());
    else
        wrong = compare(what, me, DIST_INT32, g, 1, count, e_reduced, &e);
    free(h); free(g);
    return wrong;
}

/* Memory CUDA IPC cannot share, from an allocator given by name: the
   calls take the staged path (no mapping opened) and are right. */
typedef int (*alloc_fn)(dist_cuda__CUdeviceptr *p, size_t bytes);
static int (*mem_alloc_managed)(dist_cuda__CUdeviceptr *, size_t, unsigned);
static int alloc_managed(dist_cuda__CUdeviceptr *p, size_t bytes) { return mem_alloc_managed(p, bytes, 1 /* CU_MEM_ATTACH_GLOBAL */); }
static int alloc_pinned(dist_cuda__CUdeviceptr *p, size_t bytes) {
    void *h = NULL;
    int r = dist_cuda__cu.MemHostAlloc(&h, bytes, DIST_CUDA__HOSTALLOC_PORTABLE);
    *p = (dist_cuda__CUdeviceptr)(uintptr_t)h;
    return r;
}
static int ipc_fallback(dist_t *world, int me, int n, const char *kind, alloc_fn fn, int may_refuse) {
    const size_t count = 1000;
    dist_cuda_t *c = NULL;
    dbuf a = { 0, 0 };
    int wrong = 0, r = 0;
    unsigned long long opens;
    if (ipc_init(world, &c) != DIST_OK) { printf("FAIL rank %d: dist_cuda_init (IPC): %s\n", me, dist_cuda_error_message()); return 1; }
    if ((r = fn(&a.p, count * 4)) != 0) {
        printf("FAIL rank %d: allocating %s memory: CUDA error %d\n", me, kind, r);
        dist_cuda_destroy(c);
        return 1;
    }
    opens = c->ipc_opens;
    a.bytes = count * 4;
    {
        int32_t h[1000], g[1000];
        ectx e = { n, me, 0, DIST_SUM, 1 };
        for (size_t i = 0; i < count; i++) h[i] = val(me, 0, i);
        memcpy((void *)(uintptr_t)a.p, h, sizeof h);               /* host-visible memory, both kinds */
        dist_result res = dist_cuda_all_reduce(c, DP(a), count, DIST_INT32, DIST_SUM, NULL);
        if (res != DIST_OK && may_refuse && me == 0)
            printf("note: %s memory passed as a device buffer is refused (%s): that check left out\n", kind, dist_cuda_error_message());
        else if (res != DIST_OK && !may_refuse)
            { printf("FAIL rank %d: all_reduce on %s memory: %s\n", me, kind, dist_cuda_error_message()); wrong++; }
        if (res == DIST_OK) {
            dist_cuda__cu.StreamSynchronize(NULL);
            memcpy(g, (void *)(uintptr_t)a.p, sizeof g);
            char what[64];
            snprintf(what, sizeof what, "all_reduce on %s memory (staged)", kind);
            wrong += compare(what, me, DIST_INT32, g, 1, count, e_reduced, &e);
            if (c->ipc_opens != opens) { printf("FAIL rank %d: all_reduce on %s memory opened %llu mappings\n", me, kind, c->ipc_opens - opens); wrong++; }
            else if (me == 0 && !wrong) printf("ok   IPC, %d ranks: %s memory goes through the staged path, right, no mapping opened\n", n, kind);
        }
    }
    if (fn == alloc_pinned) dist_cuda__cu.MemFreeHost((void *)(uintptr_t)a.p); else dist_cuda__cu.MemFree(a.p);
    dist_cuda_destroy(c);
    return wrong;
}

static int ipc_extras(dist_t *world, int me, int n) {
    const size_t count = 1000;
    dist_cuda_t *c = NULL;
    dbuf a = { 0, 0 }, x = { 0, 0 };
    int wrong = 0;
    unsigned long long opens, closes;
    if (ipc_init(world, &c) != DIST_OK) { printf("FAIL rank %d: dist_cuda_init (IPC): %s\n", me, dist_cuda_error_message()); return 1; }
    if (dalloc(&a, count * 4)) { printf("FAIL rank %d: out of memory\n", me); return 1; }
    /* the cache: 100 calls on the same buffer open nothing after the first */
    wrong += ipc_all_reduce_ok(c, &a, count, me, n, "all_reduce (first)");
    opens = c->ipc_opens; closes = c->ipc_closes;
    if (opens != (unsigned long long)(n - 1)) { printf("FAIL rank %d: the first all_reduce opened %llu mappings, want %d\n", me, opens, n - 1); wrong++; }
    for (int it = 0; it < 100 && !wrong; it++) wrong += ipc_all_reduce_ok(c, &a, count, me, n, "all_reduce (repeated)");
    if (c->ipc_opens != opens || c->ipc_closes != closes) {
        printf("FAIL rank %d: 100 calls on the same buffer opened %llu and closed %llu mappings\n", me, c->ipc_opens - opens, c->ipc_closes - closes);
        wrong++;
    } else if (me == 0 && !wrong) printf("ok   IPC, %d ranks: 100 all_reduces on one buffer open no mapping after the first\n", n);
    /* freed and allocated again: right results; the old mapping closed
       (at the call after the one that announced it) */
    {
        dist_cuda__CUdeviceptr old = a.p;
        dfree(&a);
        if (dalloc(&a, count * 4)) { printf("FAIL rank %d: out of memory\n", me); return 1; }
        wrong += ipc_all_reduce_ok(c, &a, count, me, n, "all_reduce (new buffer)");
        wrong += ipc_all_reduce_ok(c, &a, count, me, n, "all_reduce (new buffer, again)");
        if (c->ipc_opens != opens + (unsigned long long)(n - 1) || c->ipc_closes != closes + (unsigned long long)(n - 1)) {
            printf("FAIL rank %d: after a new buffer: %llu mappings opened, %llu closed; want %d and %d\n", me, c->ipc_opens - opens,
                   c->ipc_closes - closes, n - 1, n - 1);
            wrong++;
        } else if (me == 0 && !wrong)
            printf("ok   IPC, %d ranks: a buffer freed and allocated again (%s address) gives right results, its old mapping closed\n", n,
                   old == a.p ? "the same" : "another");
    }
    /* reductions in launches of 2 inputs: the chain of more than 8 ranks */
    if (!wrong) {
        int before = wrong;
        c->ipc_fan_in = 2;
        for (int op = 0; op < DIST_OP_COUNT; op++)
            for (int t = 0; t < DIST_DTYPE_COUNT; t++) {
                dist_dtype dt = (dist_dtype)t;
                size_t es = dist_dtype_size(dt);
                static unsigned char h[8 * 1000 * 8], g[8 * 1000 * 8];     /* n x count x the largest dtype */
                ectx e = { n, me, 0, (dist_op)op, dt <= DIST_INT64 };
                dbuf b;
                if (dalloc(&b, count * es * (size_t)n)) { printf("FAIL rank %d: out of memory\n", me); return 1; }
                for (size_t i = 0; i < count; i++) put(dt, h, i, val(me, 0, i));
                b.bytes = count * es;
                if (up(&b, h) || dist_cuda_all_reduce(c, DP(b), count, dt, (dist_op)op, NULL) != DIST_OK || down(g, &b)) {
                    printf("FAIL rank %d: all_reduce in launches of 2: %s\n", me, dist_cuda_error_message());
                    return 1;
                }
                wrong += compare("all_reduce in launches of 2", me, dt, g, 1, count, e_reduced, &e);
                for (int root = 0; root < n; root++) {
                    ectx er = { n, me, root, (dist_op)op, dt <= DIST_INT64 };
                    if (up(&b, h) || dist_cuda_reduce(c, DP(b), count, dt, (dist_op)op, root, NULL) != DIST_OK || down(g, &b)) {
                        printf("FAIL rank %d: reduce in launches of 2: %s\n", me, dist_cuda_error_message());
                        return 1;
                    }
                    if (me == root) wrong += compare("reduce in launches of 2", me, dt, g, 1, count, e_reduced, &er);
                }
                for (int r = 0; r < n; r++) for (size_t i = 0; i < count; i++) put(dt, h, (size_t)r * count + i, val(me, r, i));
                b.bytes = count * es * (size_t)n;
                if (up(&b, h) || dist_cuda_reduce_scatter(c, DP(b), (char *)DP(b) + (size_t)me * count * es, count, dt, (dist_op)op, NULL) != DIST_OK ||
                    down(g, &b)) {
                    printf("FAIL rank %d: reduce_scatter in launches of 2: %s\n", me, dist_cuda_error_message());
                    return 1;
                }
                wrong += compare("reduce_scatter (in place) in launches of 2", me, dt, g + (size_t)me * count * es, 1, count, e_rs, &e);
                dfree(&b);
            }
        c->ipc_fan_in = 0;
        if (me == 0 && wrong == before) printf("ok   IPC, %d ranks: all_reduce, reduce and reduce_scatter in launches of 2 inputs, every dtype x op\n", n);
    }
    /* disagreeing ranks: DIST_ERR_MISMATCH on every rank, then the
       communicator goes on */
    if (n > 1 && !wrong) {
        dist_result r1 = dist_cuda_all_reduce(c, DP(a), me == n - 1 ? count - 1 : count, DIST_INT32, DIST_SUM, NULL);
        char m1[DIST_CUDA__ERRLEN];
        snprintf(m1, sizeof m1, "%s", dist_cuda_error_message());
        dist_result r2 = dist_cuda_all_reduce(c, DP(a), count, DIST_INT32, me == 0 ? DIST_MAX : DIST_SUM, NULL);
        if (r1 != DIST_ERR_MISMATCH || !strstr(m1, "passed") || r2 != DIST_ERR_MISMATCH || !strstr(dist_cuda_error_message(), "op")) {
            printf("FAIL rank %d: mismatched counts gave %s (\"%s\"), ops %s (\"%s\"); want DIST_ERR_MISMATCH twice\n", me, dist_result_name(r1), m1,
                   dist_result_name(r2), dist_cuda_error_message());
            wrong++;
        } else {
            if (me == 0) printf("     rank 0: \"%s\"\n", m1);
            wrong += ipc_all_reduce_ok(c, &a, count, me, n, "all_reduce after the mismatches");
            if (me == 0 && !wrong) printf("ok   IPC, %d ranks: different counts, then ops: DIST_ERR_MISMATCH on every rank; the next call works\n", n);
        }
    }
    /* a buffer running past its allocation on rank n-1: refused there,
       named on the others (DIST_ERR_FAILED), the communicator goes on */
    if (!wrong && dalloc(&x, 4096) == 0) {
        void *p = me == n - 1 ? (void *)(uintptr_t)(x.p + 3072) : DP(a);
        dist_result r = dist_cuda_all_reduce(c, p, count, DIST_INT32, DIST_SUM, NULL);
        int64_t all_ok = r == DIST_OK;
        dist_all_reduce(world, &all_ok, 1, DIST_INT64, DIST_MIN);
        if (all_ok) {
            if (me == 0) printf("note: a buffer 3072 bytes into a 4096-byte allocation was taken for 4000 bytes (the driver reports a larger allocation?)\n");
        } else if (me == n - 1 ? r != DIST_ERR_INVALID || !strstr(dist_cuda_error_message(), "allocation")
                               : r != DIST_ERR_FAILED || !strstr(dist_cuda_error_message(), "failed in this call")) {
            printf("FAIL rank %d: a buffer past its allocation on rank %d gave %s: \"%s\"\n", me, n - 1, dist_result_name(r), dist_cuda_error_message());
            wrong++;
        } else {
            if (me == 0) printf("     rank 0: \"%s\"\n", dist_cuda_error_message());
            wrong += ipc_all_reduce_ok(c, &a, count, me, n, "all_reduce after a refused buffer");
            if (me == 0 && !wrong) printf("ok   IPC, %d ranks: a buffer past its allocation is refused on its rank and named on the others\n", n);
        }
        dfree(&x);
    }
    dfree(&a);
    dist_cuda_destroy(c);
    /* memory CUDA IPC cannot share */
    {
        const char *lib = getenv("DIST_CUDA_LIBCUDA");
        void *cu = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        void *sym = cu ? dlsym(cu, "cuMemAllocManaged") : NULL;
        memcpy(&mem_alloc_managed, &sym, sizeof sym);
        if (mem_alloc_managed) wrong += ipc_fallback(world, me, n, "managed", alloc_managed, 0);
        else if (me == 0) printf("note: no cuMemAllocManaged in the driver: the managed-memory check left out\n");
        wrong += ipc_fallback(world, me, n, "pinned host", alloc_pinned, 1);
    }
    /* DIST_CUDA_BACKEND=ipc chooses it */
    setenv("DIST_CUDA_BACKEND", "ipc", 1);
    if (dist_cuda_init(world, NULL, &c) != DIST_OK || dist_cuda_backend_of(c) != DIST_CUDA_IPC) {
        printf("FAIL rank %d: DIST_CUDA_BACKEND=ipc: %s\n", me, c ? "another backend" : dist_cuda_error_message());
        wrong++;
    } else if (me == 0) printf("ok   IPC, %d ranks: DIST_CUDA_BACKEND=ipc chooses it\n", n);
    unsetenv("DIST_CUDA_BACKEND");
    dist_cuda_destroy(c);
    {
        static const char *const names[] = { "auto", "staged", "nccl", "ipc" };
        dist_result r = dist_cuda_init(world, NULL, &c);
        if (me == 0) printf("note: %d ranks, backend auto: %s\n", n, r == DIST_OK ? names[dist_cuda_backend_of(c)] : dist_cuda_error_message());
    }
    dist_cuda_destroy(c);
    return wrong;
}

typedef struct { dist_cuda_backend backend; int extras; } run_arg;

static int gpu_rank(dist_t *world, void *arg) {
    const run_arg *ra = (const run_arg *)arg;
    const int n = dist_world_size(world), me = dist_rank(world);
    dist_cuda_t *c = NULL;
    dist_cuda_config cc = { 0 };
    int wrong = 0;
    cc.backend = ra->backend;
    cc.chunk_bytes = 64 << 10;                            /* small chunks: the pipeline turns over */
    if (dist_cuda_init(world, &cc, &c) != DIST_OK) { printf("FAIL rank %d: dist_cuda_init: %s\n", me, dist_cuda_error_message()); return 1; }
    if (dist_cuda_backend_of(c) != ra->backend) { printf("FAIL rank %d: backend %d, asked for %d\n", me, (int)dist_cuda_backend_of(c), (int)ra->backend); return 1; }
    wrong += sweep(c, me, n);
    if (ra->backend == DIST_CUDA_IPC && c->ipc_staged) {
        printf("FAIL rank %d: IPC: %llu calls of the sweep went through the staged path\n", me, c->ipc_staged);
        wrong++;
    }
    if (!wrong) wrong += in_place(c, me, n);
    /* in place, on IPC: 2 counts x (all_gather with send == recv, reduce_scatter
       with recv == send off rank 0, all_to_all) go staged when n > 1 */
    if (ra->backend == DIST_CUDA_IPC && !wrong && c->ipc_staged != (n > 1 ? 6u : 0u)) {
        printf("FAIL rank %d: IPC: %llu in-place calls went through the staged path, want %d\n", me, c->ipc_staged, n > 1 ? 6 : 0);
        wrong++;
    }
    if (dist_cuda_barrier(c, NULL) != DIST_OK) { printf("FAIL rank %d: barrier: %s\n", me, dist_cuda_error_message()); wrong++; }
    dist_cuda_destroy(c);
    if (!wrong && ra->extras) wrong += ipc_extras(world, me, n);
    return wrong ? 1 : 0;
}


int main(void) {
    const char *rk = getenv("DIST_CUDA_TEST_RANKS");
    int ranks = rk ? atoi(rk) : 2, failed = 0;
    if (!cuda_have_device()) {
        printf("skip: no CUDA device here (or no driver): the GPU checks need one\n");
        return 77;
    }
    ranks = ranks < 1 ? 1 : ranks > 8 ? 8 : ranks;
    run_arg staged = { DIST_CUDA_STAGED, 0 };
    int rc = dist_spawn(ranks, gpu_rank, &staged, NULL);
    if (rc != 0) { printf("FAIL GPU checks on %d ranks (staged): dist_spawn returned %d\n", ranks, rc); failed++; }
    else printf("ok   %d ranks on one device: every collective and send/recv on device buffers (staged path, 64 KiB chunks), every dtype x op for all_reduce and reduce_local, counts 0-300001, in-place forms\n", ranks);
    for (int n = 1; n <= ranks; n++) {
        run_arg ipc = { DIST_CUDA_IPC, n == ranks };
        rc = dist_spawn(n, gpu_rank, &ipc, NULL);
        if (rc != 0) { printf("FAIL GPU checks on %d ranks (IPC): dist_spawn returned %d\n", n, rc); failed++; }
        else printf("ok   %d ranks on one device: the same on the IPC backend%s\n", n, n == ranks ? ", and its own checks" : "");
    }
    return failed ? 1 : 0;
}
