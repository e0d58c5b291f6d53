// TIMEOUT: 600
/* test_cuda_gpu.c - dist_cuda.h on a CUDA device: on 1-8 ranks sharing it
   (DIST_CUDA_TEST_RANKS, default 2), every collective and send/recv on
   device buffers (the staged path, with chunks small enough that the
   pipeline turns over) against values computed here, every dtype x op
   for all_reduce and for the local reduction kernel, counts 0 to 300001.
   Without a device it says so on one line and exits 77 (skipped).
   The no-device checks are in tests/test_cuda.c. */
#define DIST_IMPLEMENTATION
#define DIST_CUDA_IMPLEMENTATION
#include "dist_cuda.h"

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

static int gpu_rank(dist_t *world, void *arg) {
    (void)arg;
    const int n = dist_world_size(world), me = dist_rank(world);
    const size_t counts[] = { 0, 1, 7, 1000, 300001 };   /* 300001: several staging chunks */
    dist_cuda_t *c = NULL;
    dist_cuda_config cc = { 0 };
    int wrong = 0;
    cc.backend = DIST_CUDA_STAGED;
    cc.chunk_bytes = 64 << 10;                            /* small chunks: the pipeline turns over */
    if (dist_cuda_init(world, &cc, &c) != DIST_OK) { printf("FAIL rank %d: dist_cuda_init: %s\n", me, dist_cuda_error_message()); return 1; }
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
    if (dist_cuda_barrier(c, NULL) != DIST_OK) { printf("FAIL rank %d: barrier: %s\n", me, dist_cuda_error_message()); wrong++; }
    dist_cuda_destroy(c);
    return wrong ? 1 : 0;
}


int main(void) {
    const char *rk = getenv("DIST_CUDA_TEST_RANKS");
    int ranks = rk ? atoi(rk) : 2;
    if (!cuda_have_device()) {
        printf("skip: no CUDA device here (or no driver): the GPU checks need one\n");
        return 77;
    }
    ranks = ranks < 1 ? 1 : ranks > 8 ? 8 : ranks;
    int rc = dist_spawn(ranks, gpu_rank, NULL, NULL);
    if (rc != 0) { printf("FAIL GPU checks on %d ranks: dist_spawn returned %d\n", ranks, rc); return 1; }
    printf("ok   %d ranks on one device: every collective and send/recv on device buffers (staged path, 64 KiB chunks), every dtype x op for all_reduce and reduce_local, counts 0-300001\n", ranks);
    return 0;
}
