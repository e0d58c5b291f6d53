/* bench/cuda_bench.c - dist_cuda.h's speed targets: the reduction kernel
   against a device-to-device copy, and the collectives on device memory
   through each backend beside dist.h's own on host memory, in the style of
   nccl-tests and bench/coll_bench.c.

   COMMANDS FOR A GPU SESSION
     make build/distrun build/bench/cuda_bench

     build/distrun -n 1 build/bench/cuda_bench --kernel
        The reduction kernel: dist_cuda_reduce_local(a += b, SUM) on 1 GiB
        buffers in float32 and bfloat16, against cuMemcpyDtoDAsync of 1 GiB
        timed in the same loop (they alternate).  GB/s counts 3 bytes per
        output byte for the kernel (read a, read b, write a) and 2 per byte
        copied for the copy (read, write).  Target: kernel GB/s >= 0.85 x
        copy GB/s, in both dtypes.

     build/distrun -n 4 build/bench/cuda_bench -b 1M -e 256M -f 4 --backend all
        4 ranks sharing one GPU: all_reduce on device buffers through the
        staged, ipc and nccl backends (one whose dist_cuda_init fails says
        why on one line and is skipped: NCCL refuses two ranks on one GPU),
        and dist.h's all_reduce on host memory ("host") as the reference.
        Targets: staged busbw at 64 MiB >= 0.80 x host busbw at 64 MiB; ipc:
        its busbw at 256 MiB as a fraction of the D2D copy bandwidth (a 256
        MiB cuMemcpyDtoDAsync on rank 0 in the same run, 2 bytes counted per
        byte copied as in --kernel; the copy's own rate is half that).

     build/distrun -n 4 build/bench/cuda_bench -b 1M -e 256M -f 4 -o all_gather,reduce_scatter,broadcast
        The other collectives (-o all: all eight).  With one GPU per rank on
        a multi-GPU host, -n <GPUs> puts NCCL beside the others.

   Options
     --kernel        the kernel-vs-copy measurement (rank 0 only; the
                     other ranks wait), instead of the collectives
     --kernel-bytes BYTES   its buffer size                       default 1G
     -b BYTES        smallest size (K, M, G suffixes)             default 1K
     -e BYTES        largest size                                 default 256M
     -f N            multiply the size by N each step             default 4
                     (64M and 256M must be b x f^k for the summary lines)
     -o LIST         collectives, comma-separated: broadcast reduce
                     all_reduce gather all_gather scatter reduce_scatter
                     all_to_all, or all                           default all_reduce
     -d DTYPE        int8 uint8 int32 int64 float16 bfloat16 float32
                     float64 (--kernel: only this dtype)          default float32
     -r OP           sum product max min avg                      default sum
     -n ITERS        timed iterations per size (default 100 up to 1 MiB,
                     50 up to 16 MiB, then 20; --kernel: 20)
     -w ITERS        warm-up iterations (default n/10, >= 2; --kernel: 3)
     -c 0|1          check the first iteration of every size      default 1
     -R ROOT         root of the rooted collectives               default 0
     -N RANKS        no launcher: fork this many local ranks (dist_spawn);
                     without a launcher and without -N: one rank
     --backend LIST  staged, ipc, nccl, comma-separated, or all   default all
     --host / --no-host   time dist.h's collective on host memory too
                     (the staged target's reference)              default on
     --chunk BYTES   the staged path's chunk (dist_cuda_config.chunk_bytes;
                     0: the library's default)                    default 0
     --device N      CUDA device ordinal for every rank (default: the local
                     rank modulo the number of devices)

   What is measured.  Sizes are in bytes of the largest buffer, as
   nccl-tests and coll_bench count them.  Every timed iteration starts with
   a dist_barrier on the host, so all ranks start together; the clock
   (CLOCK_MONOTONIC) runs from just after the barrier until the call has
   returned and cuStreamSynchronize on its stream has (the host path: until
   the call has returned).  time = the median over the iterations on each
   rank, then the largest over the ranks; algbw = bytes / time; busbw =
   algbw x the nccl-tests factor (all_reduce 2(n-1)/n; all_gather,
   reduce_scatter, all_to_all (n-1)/n; the others 1); #wrong = elements of
   the first iteration's result that differ from a reference computed on
   the host, summed over the ranks (inputs are small integers, so every
   sum is exact).  The last lines are the summary: busbw at 64 MiB and at
   256 MiB per collective and backend, with the ratios the targets name.
   --kernel times each operation with CUDA events (median of -n).

   Memory: --kernel, three buffers of --kernel-bytes on rank 0's device;
   the collectives, two device and two host buffers of -e bytes per rank,
   and two of 256 MiB on rank 0's device while it times the D2D copy.

   Without a CUDA driver or device it prints one line that says so and
   exits 0, so sweeps over bench/ pass on machines without a GPU.  Exit
   status 1: a call failed after its backend had started, a result was
   wrong, or the host communication failed. */
#define DIST_IMPLEMENTATION
#define DIST_CUDA_IMPLEMENTATION
#include "dist_cuda.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"

enum { C_BROADCAST, C_REDUCE, C_ALL_REDUCE, C_GATHER, C_ALL_GATHER, C_SCATTER, C_REDUCE_SCATTER, C_ALL_TO_ALL, C_COUNT };
static const char *const coll_names[C_COUNT] = { "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
                                                 "reduce_scatter", "all_to_all" };

/* "host" is dist.h on malloc'ed memory: the reference, not a dist_cuda backend. */
enum { B_HOST, B_STAGED, B_IPC, B_NCCL, B_COUNT };
static const char *const backend_names[B_COUNT] = { "host", "staged", "ipc", "nccl" };
static const dist_cuda_backend backend_values[B_COUNT] = { DIST_CUDA_AUTO, DIST_CUDA_STAGED, DIST_CUDA_IPC, DIST_CUDA_NCCL };

#define MIB ((size_t)1 << 20)
#define MSG 640                       /* an error sentence, ours or the library's */

typedef struct opts {
    size_t minb, maxb, chunk, kernel_bytes;
    int factor, iters, warm, check, nprocs, root, device, host, kernel;
    int colls[C_COUNT], ncolls;
    int backend[B_COUNT];             /* asked for (B_HOST: --host) */
    int dtype_given;
    dist_dtype dtype;
    dist_op op;
} opts;

/* One rank's state. */
typedef struct bench {
    const opts *o;
    dist_t *w;
    int n, r;
    dist_cuda_t *staged;              /* made first and kept to the end: it finds out whether there is a device */
    dist_cuda__CUdevice dev;
    dist_cuda__CUcontext ctx;         /* the device's primary context, retained here too */
    int have_ctx;
    dist_cuda__CUstream stream;       /* every call of ours is ordered on it */
    dist_cuda__CUdeviceptr dsend, drecv;
    uint8_t *hsend, *hrecv;           /* host path buffers; the checks' staging */
    size_t cap;
    double *times;
    char err[MSG];                    /* this rank's last failure */
    /* results for the summary (rank 0): busbw at 64 MiB and 256 MiB, -1 when not measured */
    double bus[C_COUNT][B_COUNT][2];
    int state[B_COUNT];               /* 0 not asked, 1 ran, 2 skipped at init, 3 failed while running */
    char why[B_COUNT][MSG];
    double d2d_gbs;                   /* 256 MiB DtoD copy on rank 0, 2 bytes per byte copied; 0: not measured */
} bench;

static double median(double *t, int k) {
    qsort(t, (size_t)k, sizeof *t, cmp_d);
    return k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
}

/* ---- the driver ----------------------------------------------------------
   dist_cuda__cu is dist_cuda.h's table of driver functions (this file
   compiles the implementation, as tests/test_cuda_gpu.c does).  Two calls
   the library itself does not need come from the same libcuda by dlsym:
   the 1-D device-to-device copy and the event timer. */
typedef dist_cuda__CUresult (*memcpy_dtod_async_fn)(dist_cuda__CUdeviceptr dst, dist_cuda__CUdeviceptr src, size_t n, dist_cuda__CUstream s);
typedef dist_cuda__CUresult (*event_elapsed_fn)(float *ms, dist_cuda__CUevent start, dist_cuda__CUevent end);
static memcpy_dtod_async_fn cu_memcpy_dtod_async;
static event_elapsed_fn cu_event_elapsed;

static int fail(bench *B, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(B->err, sizeof B->err, fmt, ap);
    va_end(ap);
    return 0;
}

/* The driver's words for r, into B->err after `what`; returns 0. */
static int cu_fail(bench *B, dist_cuda__CUresult r, const char *what) {
    const char *name = NULL, *text = NULL;
    dist_cuda__cu.GetErrorName(r, &name);
    dist_cuda__cu.GetErrorString(r, &text);
    return fail(B, "%s on rank %d: %s (%s)", what, B->r, name ? name : "CUDA error", text ? text : "no description");
}
#define CU(call, what)                                   \
    do {                                                 \
        dist_cuda__CUresult r_ = (call);                 \
        if (r_ != 0) return cu_fail(B, r_, (what));      \
    } while (0)

/* Called once dist_cuda_init has loaded the driver. */
static int load_extra(bench *B) {
    const char *own = getenv("DIST_CUDA_LIBCUDA");
    void *lib = dlopen(own && *own ? own : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *p;
    if (!lib) return fail(B, "rank %d: dlopen of the CUDA driver: %s", B->r, dlerror());
    p = dlsym(lib, "cuMemcpyDtoDAsync_v2");
    memcpy(&cu_memcpy_dtod_async, &p, sizeof p);        /* a function pointer from void * (ISO C: by copy) */
    if (!(p = dlsym(lib, "cuEventElapsedTime_v2"))) p = dlsym(lib, "cuEventElapsedTime");
    memcpy(&cu_event_elapsed, &p, sizeof p);
    if (!cu_memcpy_dtod_async || !cu_event_elapsed)
        return fail(B, "rank %d: the CUDA driver lacks cuMemcpyDtoDAsync_v2 or cuEventElapsedTime", B->r);
    return 1;
}

static int set_ctx(bench *B) {
    CU(dist_cuda__cu.CtxSetCurrent(B->ctx), "cuCtxSetCurrent");
    return 1;
}

/* ---- the ranks agree -----------------------------------------------------
   ok: whether this rank succeeded; on failure B->err says why, and `weak`
   marks a sentence that only points at another rank.  Every rank learns
   the sentence (and *code) of the lowest-ranked failure, preferring one
   that is not weak.  1: all succeeded; 0: some failed (msg, *code); -1:
   dist.h's own communication failed (msg: its sentence). */
static int agree(bench *B, int ok, int weak, int64_t *code, char *msg) {
    int64_t key = ok ? 2 * (int64_t)B->n : weak ? B->n + B->r : B->r;
    int from;
    if (dist_all_reduce(B->w, &key, 1, DIST_INT64, DIST_MIN) != DIST_OK) goto broken;
    if (key >= 2 * (int64_t)B->n) return 1;
    from = (int)(key % B->n);
    snprintf(msg, MSG, "%s", ok ? "" : B->err);
    if (dist_broadcast(B->w, msg, MSG, DIST_UINT8, from) != DIST_OK || dist_broadcast(B->w, code, 1, DIST_INT64, from) != DIST_OK) goto broken;
    msg[MSG - 1] = 0;
    return 0;
broken:
    /* this rank's own failure first: it is usually what made the others disagree */
    if (ok) snprintf(msg, MSG, "rank %d: dist.h: %s", B->r, dist_error_message(B->w));
    else snprintf(msg, MSG, "%.380s; then, agreeing with the other ranks, dist.h: %.180s", B->err, dist_error_message(B->w));
    return -1;
}

/* dist_cuda_init of backend `be` on every rank; 1: made everywhere, 0:
   not (msg and *code from the rank that says why; nothing is left made),
   -1: dist.h failed. */
static int init_all(bench *B, dist_cuda_backend be, dist_cuda_t **out, int64_t *code, char *msg) {
    dist_cuda_config cc;
    dist_result res;
    int k;
    memset(&cc, 0, sizeof cc);
    cc.device = B->o->device;
    cc.backend = be;
    cc.chunk_bytes = B->o->chunk;
    *out = NULL;
    res = dist_cuda_init(B->w, &cc, out);
    *code = res;
    if (res != DIST_OK) { *out = NULL; snprintf(B->err, sizeof B->err, "%s", dist_cuda_error_message()); }
    k = agree(B, res == DIST_OK, res != DIST_OK && strstr(B->err, "another rank") != NULL, code, msg);
    if (k != 1 && *out) { dist_cuda_destroy(*out); *out = NULL; }
    return k;
}

/* ---- values: small integers, stored in any dtype exactly ----------------
   (as bench/coll_bench.c: the same inputs, the same references) */

/* Rank r's input element i: 1..2 for products, else -2..2 (0..4 in uint8). */
static double input(const opts *o, int r, size_t i) {
    if (o->op == DIST_PRODUCT) return (double)(1 + (r + i) % 2);
    return (double)((int)((r * 7 + i * 13) % 5) - (o->dtype == DIST_UINT8 ? 0 : 2));
}
static double combine(dist_op op, double acc, double v) {
    switch (op) {
    case DIST_SUM: case DIST_AVG: return acc + v;
    case DIST_PRODUCT: return acc * v;
    case DIST_MAX: return v > acc ? v : acc;
    case DIST_MIN: return v < acc ? v : acc;
    default: return acc;
    }
}
static double finish_avg(const opts *o, int n, double acc) {
    if (o->op != DIST_AVG) return acc;
    if (o->dtype <= DIST_INT64) return (double)((long long)acc / n);
    acc /= n;
    if (o->dtype == DIST_FLOAT16) acc = from_half(to_half((float)acc));
    if (o->dtype == DIST_BFLOAT16) { float f = (float)acc; uint32_t b; memcpy(&b, &f, 4); b = (b + 0x7fff + ((b >> 16) & 1)) & 0xffff0000u; memcpy(&f, &b, 4); acc = f; }
    if (o->dtype == DIST_FLOAT32) acc = (float)acc;
    return acc;
}

/* Rows of `count` elements in each buffer of a collective. */
static int send_rows(int coll, int n) {
    return coll == C_GATHER || coll == C_ALL_GATHER ? 1 : coll == C_SCATTER || coll == C_REDUCE_SCATTER || coll == C_ALL_TO_ALL ? n : 0;
}
static int recv_rows(int coll, int n) { return coll == C_GATHER || coll == C_ALL_GATHER || coll == C_ALL_TO_ALL ? n : 1; }
static int blockwise(int coll) { return send_rows(coll, 2) == 2 || recv_rows(coll, 2) == 2; }

/* The inputs of one call in hsend / hrecv; the outputs' places get 99,
   which no result has. */
static void fill_inputs(const opts *o, int coll, int n, int r, size_t count, uint8_t *hsend, uint8_t *hrecv) {
    size_t rows = (size_t)recv_rows(coll, n);
    switch (coll) {
    case C_BROADCAST:
        for (size_t i = 0; i < count; i++) put(hrecv, i, o->dtype, r == o->root ? input(o, r, i) : 0);
        return;
    case C_REDUCE: case C_ALL_REDUCE:
        for (size_t i = 0; i < count; i++) put(hrecv, i, o->dtype, input(o, r, i));
        return;
    case C_GATHER: case C_ALL_GATHER:
        for (size_t i = 0; i < count; i++) put(hsend, i, o->dtype, input(o, r, i));
        break;
    default:   /* scatter, reduce_scatter, all_to_all: block j goes to rank j */
        for (size_t j = 0; j < (size_t)n; j++)
            for (size_t i = 0; i < count; i++) put(hsend, j * count + i, o->dtype, input(o, r, j * count + i + (size_t)r));
        break;
    }
    for (size_t i = 0; i < rows * count; i++) put(hrecv, i, o->dtype, 99);
}

/* Elements of the output in hrecv that differ from the reference. */
static long count_wrong(const opts *o, int coll, int n, int r, size_t count, const uint8_t *hrecv) {
    long wrong = 0;
    switch (coll) {
    case C_BROADCAST:
        for (size_t i = 0; i < count; i++) wrong += get(hrecv, i, o->dtype) != input(o, o->root, i);
        break;
    case C_REDUCE: case C_ALL_REDUCE:
        if (coll == C_REDUCE && r != o->root) break;
        for (size_t i = 0; i < count; i++) {
            double acc = input(o, 0, i);
            for (int q = 1; q < n; q++) acc = combine(o->op, acc, input(o, q, i));
            wrong += get(hrecv, i, o->dtype) != finish_avg(o, n, acc);
        }
        break;
    case C_GATHER: case C_ALL_GATHER:
        if (coll == C_GATHER && r != o->root) break;
        for (size_t j = 0; j < (size_t)n; j++)
            for (size_t i = 0; i < count; i++) wrong += get(hrecv, j * count + i, o->dtype) != input(o, (int)j, i);
        break;
    case C_SCATTER:
        for (size_t i = 0; i < count; i++) wrong += get(hrecv, i, o->dtype) != input(o, o->root, (size_t)r * count + i + (size_t)o->root);
        break;
    case C_REDUCE_SCATTER:   /* element i of block r from rank q is input(q, r*count + i + q) */
        for (size_t i = 0; i < count; i++) {
            double acc = input(o, 0, (size_t)r * count + i);
            for (int q = 1; q < n; q++) acc = combine(o->op, acc, input(o, q, (size_t)r * count + i + (size_t)q));
            wrong += get(hrecv, i, o->dtype) != finish_avg(o, n, acc);
        }
        break;
    case C_ALL_TO_ALL:
        for (size_t j = 0; j < (size_t)n; j++)
            for (size_t i = 0; i < count; i++) wrong += get(hrecv, j * count + i, o->dtype) != input(o, (int)j, (size_t)r * count + i + j);
        break;
    default: break;
    }
    return wrong;
}

/* ---- one call ------------------------------------------------------------ */

#define DP(p) ((void *)(uintptr_t)(p))

/* One collective through backend b (c: its communicator; NULL for the
   host path), and for a device backend the wait for its stream.  1: done;
   0: failed (B->err). */
static int run_op(bench *B, int b, dist_cuda_t *c, int coll, size_t count) {
    const opts *o = B->o;
    dist_t *w = B->w;
    dist_result res;
    if (b == B_HOST) {
        switch (coll) {
        case C_BROADCAST: res = dist_broadcast(w, B->hrecv, count, o->dtype, o->root); break;
        case C_REDUCE: res = dist_reduce(w, B->hrecv, count, o->dtype, o->op, o->root); break;
        case C_ALL_REDUCE: res = dist_all_reduce(w, B->hrecv, count, o->dtype, o->op); break;
        case C_GATHER: res = dist_gather(w, B->hsend, B->hrecv, count, o->dtype, o->root); break;
        case C_ALL_GATHER: res = dist_all_gather(w, B->hsend, B->hrecv, count, o->dtype); break;
        case C_SCATTER: res = dist_scatter(w, B->hsend, B->hrecv, count, o->dtype, o->root); break;
        case C_REDUCE_SCATTER: res = dist_reduce_scatter(w, B->hsend, B->hrecv, count, o->dtype, o->op); break;
        default: res = dist_all_to_all(w, B->hsend, B->hrecv, count, o->dtype); break;
        }
        if (res != DIST_OK) return fail(B, "rank %d: %s", B->r, dist_error_message(w));
        return 1;
    }
    {
        void *s = DP(B->dsend), *d = DP(B->drecv);
        dist_cuda_stream st = B->stream;
        switch (coll) {
        case C_BROADCAST: res = dist_cuda_broadcast(c, d, count, o->dtype, o->root, st); break;
        case C_REDUCE: res = dist_cuda_reduce(c, d, count, o->dtype, o->op, o->root, st); break;
        case C_ALL_REDUCE: res = dist_cuda_all_reduce(c, d, count, o->dtype, o->op, st); break;
        case C_GATHER: res = dist_cuda_gather(c, s, d, count, o->dtype, o->root, st); break;
        case C_ALL_GATHER: res = dist_cuda_all_gather(c, s, d, count, o->dtype, st); break;
        case C_SCATTER: res = dist_cuda_scatter(c, s, d, count, o->dtype, o->root, st); break;
        case C_REDUCE_SCATTER: res = dist_cuda_reduce_scatter(c, s, d, count, o->dtype, o->op, st); break;
        default: res = dist_cuda_all_to_all(c, s, d, count, o->dtype, st); break;
        }
        if (res != DIST_OK) return fail(B, "%s", dist_cuda_error_message());
        CU(dist_cuda__cu.StreamSynchronize(B->stream), "cuStreamSynchronize after the collective");
        return 1;
    }
}

/* The first call of a size: fresh inputs, the call, the output against
   the reference (*wrong).  1: ran; 0: failed (B->err). */
static int check_once(bench *B, int b, dist_cuda_t *c, int coll, size_t count, long *wrong) {
    const opts *o = B->o;
    size_t row = count * dist_dtype_size(o->dtype);
    size_t in = row * (size_t)send_rows(coll, B->n), out = row * (size_t)recv_rows(coll, B->n);
    fill_inputs(o, coll, B->n, B->r, count, B->hsend, B->hrecv);
    if (b != B_HOST) {
        if (!set_ctx(B)) return 0;
        if (in) CU(dist_cuda__cu.MemcpyHtoD(B->dsend, B->hsend, in), "cuMemcpyHtoD (the check's input)");
        if (out) CU(dist_cuda__cu.MemcpyHtoD(B->drecv, B->hrecv, out), "cuMemcpyHtoD (the check's input)");
        /* a copy from pageable memory may still be in flight on the legacy
           stream, which our non-blocking stream does not wait for */
        CU(dist_cuda__cu.StreamSynchronize(NULL), "cuStreamSynchronize (legacy stream)");
    }
    if (!run_op(B, b, c, coll, count)) return 0;
    if (b != B_HOST && out) {
        if (!set_ctx(B)) return 0;
        CU(dist_cuda__cu.MemcpyDtoH(B->hrecv, B->drecv, out), "cuMemcpyDtoH (the check's output)");
    }
    *wrong = count_wrong(o, coll, B->n, B->r, count, B->hrecv);
    return 1;
}

/* ---- the collectives ----------------------------------------------------- */

/* `warm` calls, then `iters` timed ones, each after a dist_barrier;
   *median: their median time in microseconds.  1: ok; 0: failed (B->err). */
static int time_size(bench *B, int b, dist_cuda_t *c, int coll, size_t count, int warm, int iters, double *median_us) {
    for (int i = -warm; i < iters; i++) {
        double t0;
        if (dist_barrier(B->w) != DIST_OK) return fail(B, "rank %d: dist_barrier: %s", B->r, dist_error_message(B->w));
        t0 = now_us();
        if (!run_op(B, b, c, coll, count)) return 0;
        if (i >= 0) B->times[i] = now_us() - t0;
    }
    *median_us = median(B->times, iters);
    return 1;
}

/* One collective over the sizes through backend b.  1: done; 0: a call
   failed on some rank (B->why[b] says which; the backend is done for);
   -1: dist.h failed. */
static int sweep(bench *B, int b, dist_cuda_t *c, int coll, long *all_wrong) {
    const opts *o = B->o;
    const int n = B->n;
    const size_t es = dist_dtype_size(o->dtype);
    const double factor = coll == C_ALL_REDUCE ? 2.0 * (n - 1) / n
                        : coll == C_ALL_GATHER || coll == C_REDUCE_SCATTER || coll == C_ALL_TO_ALL ? (double)(n - 1) / n : 1.0;
    for (size_t bytes = o->minb; bytes <= o->maxb; bytes *= (size_t)o->factor) {
        size_t count = bytes / es / (blockwise(coll) ? (size_t)n : 1);
        size_t shown = count * es * (blockwise(coll) ? (size_t)n : 1);
        int iters = o->iters > 0 ? o->iters : bytes <= MIB ? 100 : bytes <= 16 * MIB ? 50 : 20;
        int warm = o->warm >= 0 ? o->warm : iters / 10 > 2 ? iters / 10 : 2;
        int ok = 1, k;
        long wrong = 0;
        double worst = 0;
        int64_t code = 0, all = 0;
        char msg[MSG];
        if (o->check) ok = check_once(B, b, c, coll, count, &wrong);
        /* agreed before the timing too, so that a rank whose first call
           failed does not leave the others waiting in a barrier */
        k = agree(B, ok, 0, &code, msg);
        if (k == 1) k = agree(B, time_size(B, b, c, coll, count, warm, iters, &worst), 0, &code, msg);
        if (k < 0) { fprintf(stderr, "cuda_bench: %s\n", msg); return -1; }
        if (k == 0) {
            snprintf(B->why[b], MSG, "%s at %zu bytes: %.560s", coll_names[coll], bytes, msg);
            if (B->r == 0) printf("# %s: %s failed at %zu bytes, the rest of this backend is skipped: %s\n", backend_names[b], coll_names[coll], bytes, msg);
            return 0;
        }
        all = wrong;
        if (dist_all_reduce(B->w, &worst, 1, DIST_FLOAT64, DIST_MAX) != DIST_OK || dist_all_reduce(B->w, &all, 1, DIST_INT64, DIST_SUM) != DIST_OK) {
            fprintf(stderr, "cuda_bench: rank %d: dist.h: %s\n", B->r, dist_error_message(B->w));
            return -1;
        }
        *all_wrong += (long)all;
        if (B->r == 0) {
            double algbw = worst > 0 ? shown / worst / 1e3 : 0, busbw = algbw * factor;
            printf("%12zu %12zu %9s %14s %7s %7s %11.2f %9.3f %9.3f %7ld\n", shown, count, dist_dtype_name(o->dtype), coll_names[coll],
                   op_names[o->op], backend_names[b], worst, algbw, busbw, o->check ? (long)all : -1L);
            fflush(stdout);
            if (bytes == 64 * MIB) B->bus[coll][b][0] = busbw;
            if (bytes == 256 * MIB) B->bus[coll][b][1] = busbw;
            if (all > 0) fprintf(stderr, "cuda_bench: %s %s: %lld wrong elements at %zu bytes\n", backend_names[b], coll_names[coll], (long long)all, bytes);
        }
        if (bytes > o->maxb / (size_t)o->factor) break;   /* the next step would pass the largest size (or overflow) */
    }
    return 1;
}

/* cuMemcpyDtoDAsync of `bytes` from src to dst on B->stream: the median
   time of `reps` (after `warm`) with CUDA events, in microseconds.  1: ok. */
static int time_copy(bench *B, dist_cuda__CUdeviceptr dst, dist_cuda__CUdeviceptr src, size_t bytes, int warm, int reps, double *us) {
    dist_cuda__CUevent e0 = NULL, e1 = NULL;
    int ok = 1;
    CU(dist_cuda__cu.EventCreate(&e0, 0), "cuEventCreate");
    if (dist_cuda__cu.EventCreate(&e1, 0) != 0) { dist_cuda__cu.EventDestroy(e0); return fail(B, "rank %d: cuEventCreate failed", B->r); }
    for (int i = -warm; i < reps && ok; i++) {
        float ms = 0;
        dist_cuda__CUresult r;
        if ((r = dist_cuda__cu.EventRecord(e0, B->stream)) != 0 || (r = cu_memcpy_dtod_async(dst, src, bytes, B->stream)) != 0 ||
            (r = dist_cuda__cu.EventRecord(e1, B->stream)) != 0 || (r = dist_cuda__cu.EventSynchronize(e1)) != 0 ||
            (r = cu_event_elapsed(&ms, e0, e1)) != 0)
            ok = cu_fail(B, r, "timing cuMemcpyDtoDAsync");
        else if (i >= 0) B->times[i] = ms * 1e3;
    }
    dist_cuda__cu.EventDestroy(e0);
    dist_cuda__cu.EventDestroy(e1);
    if (ok) *us = median(B->times, reps);
    return ok;
}

/* The 256 MiB device-to-device copy on rank 0 (the others wait): the ipc
   target's reference.  1 on every rank unless dist.h failed. */
static int measure_d2d(bench *B) {
    const size_t bytes = 256 * MIB;
    int ok = 1;
    if (B->r == 0) {
        dist_cuda__CUdeviceptr a = 0, b = 0;
        double us = 0;
        dist_cuda__CUresult r = 0;
        ok = set_ctx(B);
        if (ok && (r = dist_cuda__cu.MemAlloc(&a, bytes)) != 0) { a = 0; ok = cu_fail(B, r, "cuMemAlloc (256 MiB)"); }
        if (ok && (r = dist_cuda__cu.MemAlloc(&b, bytes)) != 0) { b = 0; ok = cu_fail(B, r, "cuMemAlloc (256 MiB)"); }
        if (ok) ok = time_copy(B, b, a, bytes, 3, 20, &us);
        if (a) dist_cuda__cu.MemFree(a);
        if (b) dist_cuda__cu.MemFree(b);
        if (ok) {
            B->d2d_gbs = 2.0 * bytes / us / 1e3;
            printf("# D2D copy, 256 MiB on rank 0 (cuMemcpyDtoDAsync, CUDA events, median of 20): %.2f us, %.3f GB/s counting "
                   "read + write (the copy itself: %.3f GB/s)\n", us, B->d2d_gbs, B->d2d_gbs / 2);
        } else {
            printf("# D2D copy not measured: %s\n", B->err);
        }
        fflush(stdout);
    }
    if (dist_barrier(B->w) != DIST_OK) { fprintf(stderr, "cuda_bench: rank %d: dist.h: %s\n", B->r, dist_error_message(B->w)); return 0; }
    return 1;
}

/* "12.345", or "-" when not measured. */
static const char *bw_text(double v, char *buf) {
    if (v < 0) return "-";
    snprintf(buf, 32, "%.3f", v);
    return buf;
}

static void print_summary(bench *B) {
    const opts *o = B->o;
    if (B->r != 0) return;
    printf("# summary: busbw in GB/s (1 GB = 1e9 bytes); targets: staged >= 0.80 x host at 64 MiB; ipc against the D2D copy at 256 MiB\n");
    for (int k = 0; k < o->ncolls; k++) {
        int coll = o->colls[k];
        for (int b = 0; b < B_COUNT; b++) {
            char line[MSG + 200], t64[32], t256[32];
            int len;
            const double *v = B->bus[coll][b];
            if (!B->state[b]) continue;
            if (B->state[b] == 2) {
                printf("# %-14s %-6s: skipped: %s\n", coll_names[coll], backend_names[b], B->why[b]);
                continue;
            }
            len = snprintf(line, sizeof line, "# %-14s %-6s: 64 MiB %s, 256 MiB %s", coll_names[coll], backend_names[b], bw_text(v[0], t64),
                           bw_text(v[1], t256));
            if (b == B_STAGED) {
                double h = B->bus[coll][B_HOST][0];
                if (v[0] > 0 && h > 0)
                    len += snprintf(line + len, sizeof line - (size_t)len, "; at 64 MiB %.2f x host (%.3f): %s", v[0] / h, h,
                                    v[0] >= 0.80 * h ? "met" : "NOT met");
                else
                    len += snprintf(line + len, sizeof line - (size_t)len, "; vs host: not measured (needs --host and 64 MiB in the sweep)");
            }
            if (b == B_IPC) {
                if (v[1] > 0 && B->d2d_gbs > 0)
                    len += snprintf(line + len, sizeof line - (size_t)len, "; at 256 MiB %.3f x the D2D copy bandwidth (%.3f, read + write)",
                                    v[1] / B->d2d_gbs, B->d2d_gbs);
                else
                    len += snprintf(line + len, sizeof line - (size_t)len, "; vs D2D copy: not measured (needs 256 MiB in the sweep)");
            }
            if (B->state[b] == 3) snprintf(line + len, sizeof line - (size_t)len, "; FAILED: %s", B->why[b]);
            printf("%s\n", line);
        }
    }
    if (o->minb > 64 * MIB || o->maxb < 256 * MIB) printf("# (64 MiB and 256 MiB are measured only when they are -b x -f^k within -e)\n");
    fflush(stdout);
}

static int coll_mode(bench *B) {
    const opts *o = B->o;
    long wrong = 0;
    int failed = 0;
    B->cap = (o->maxb + 255) / 256 * 256;
    B->hsend = (uint8_t *)malloc(B->cap);
    B->hrecv = (uint8_t *)malloc(B->cap);
    {
        int ok = B->hsend && B->hrecv ? 1 : fail(B, "rank %d: out of host memory for 2 x %zu bytes", B->r, B->cap);
        int64_t code = 0;
        char msg[MSG];
        if (ok) {
            memset(B->hsend, 0, B->cap);      /* touched once: no page faults in the timings */
            memset(B->hrecv, 0, B->cap);
            ok = set_ctx(B);
        }
        if (ok && dist_cuda__cu.MemAlloc(&B->dsend, B->cap) != 0) { B->dsend = 0; ok = fail(B, "rank %d: cuMemAlloc of %zu bytes failed", B->r, B->cap); }
        if (ok && dist_cuda__cu.MemAlloc(&B->drecv, B->cap) != 0) { B->drecv = 0; ok = fail(B, "rank %d: cuMemAlloc of %zu bytes failed", B->r, B->cap); }
        /* zeros, not whatever the memory held (with -c 0 nothing else is
           written, and stray denormals would slow the host's reductions) */
        if (ok && (dist_cuda__cu.MemcpyHtoD(B->dsend, B->hsend, B->cap) != 0 || dist_cuda__cu.MemcpyHtoD(B->drecv, B->hrecv, B->cap) != 0 ||
                   dist_cuda__cu.StreamSynchronize(NULL) != 0))
            ok = fail(B, "rank %d: clearing the device buffers (cuMemcpyHtoD) failed", B->r);
        if (agree(B, ok, 0, &code, msg) != 1) {
            if (B->r == 0) printf("cuda_bench: %s\n", msg);
            return 1;
        }
    }
    if (!measure_d2d(B)) return 1;
    if (B->r == 0) {
        printf("#%11s %12s %9s %14s %7s %7s %11s %9s %9s %7s\n", "bytes", "count", "type", "collective", "redop", "backend", "time(us)", "algbw",
               "busbw", "#wrong");
        printf("#%11s %12s %9s %14s %7s %7s %11s %9s %9s %7s\n", "", "(per rank)", "", "", "", "", "median", "GB/s", "GB/s", "");
        fflush(stdout);
    }
    for (int b = 0; b < B_COUNT; b++) {
        dist_cuda_t *c = NULL;
        if (!o->backend[b]) continue;
        if (b == B_STAGED) {
            c = B->staged;                     /* made with this configuration at the start */
        } else if (b != B_HOST) {
            int64_t code = 0;
            int k = init_all(B, backend_values[b], &c, &code, B->why[b]);
            if (k < 0) { fprintf(stderr, "cuda_bench: %s\n", B->why[b]); return 1; }
            if (k == 0) {
                B->state[b] = 2;
                if (B->r == 0) printf("# %s: skipped, dist_cuda_init failed: %s\n", backend_names[b], B->why[b]);
                fflush(stdout);
                continue;
            }
        }
        B->state[b] = 1;
        for (int k = 0; k < o->ncolls; k++) {
            int s = sweep(B, b, c, o->colls[k], &wrong);
            if (s < 0) { if (c && c != B->staged) dist_cuda_destroy(c); return 1; }
            if (s == 0) { B->state[b] = 3; failed = 1; break; }
        }
        if (c && c != B->staged) dist_cuda_destroy(c);
    }
    print_summary(B);
    return failed || wrong ? 1 : 0;
}

/* ---- the kernel against a copy ------------------------------------------- */

/* Fills device buffer d (bytes) with f(i) in dtype t, 64 MiB at a time
   through host buffer h. */
static int fill_device(bench *B, dist_cuda__CUdeviceptr d, size_t bytes, dist_dtype t, int which, uint8_t *h, size_t hcap) {
    const size_t es = dist_dtype_size(t);
    for (size_t off = 0; off < bytes; off += hcap) {
        size_t len = bytes - off < hcap ? bytes - off : hcap, first = off / es;
        for (size_t i = 0; i < len / es; i++) {
            size_t g = first + i;
            put(h, i, t, which == 0 ? (double)(g % 7) : (double)(1 + g % 3));
        }
        CU(dist_cuda__cu.MemcpyHtoD(d + off, h, len), "cuMemcpyHtoD (filling a buffer)");
    }
    CU(dist_cuda__cu.StreamSynchronize(NULL), "cuStreamSynchronize (legacy stream)");
    return 1;
}

/* Counts elements of a (after one a += b) that are not g%7 + 1 + g%3. */
static int check_sum(bench *B, dist_cuda__CUdeviceptr a, size_t bytes, dist_dtype t, uint8_t *h, size_t hcap, long *wrong) {
    const size_t es = dist_dtype_size(t);
    for (size_t off = 0; off < bytes; off += hcap) {
        size_t len = bytes - off < hcap ? bytes - off : hcap, first = off / es;
        CU(dist_cuda__cu.MemcpyDtoH(h, a + off, len), "cuMemcpyDtoH (the check)");
        for (size_t i = 0; i < len / es; i++) {
            size_t g = first + i;
            *wrong += get(h, i, t) != (double)(g % 7 + 1 + g % 3);
        }
    }
    return 1;
}

/* Bytes of dst that differ from src. */
static int check_copy(bench *B, dist_cuda__CUdeviceptr dst, dist_cuda__CUdeviceptr src, size_t bytes, uint8_t *h, size_t hcap, long *wrong) {
    uint8_t *h2 = h + hcap / 2;
    hcap /= 2;
    for (size_t off = 0; off < bytes; off += hcap) {
        size_t len = bytes - off < hcap ? bytes - off : hcap;
        CU(dist_cuda__cu.MemcpyDtoH(h, dst + off, len), "cuMemcpyDtoH (the copy's check)");
        CU(dist_cuda__cu.MemcpyDtoH(h2, src + off, len), "cuMemcpyDtoH (the copy's check)");
        if (memcmp(h, h2, len) != 0)
            for (size_t i = 0; i < len; i++) *wrong += h[i] != h2[i];
    }
    return 1;
}

typedef struct kbufs { dist_cuda__CUdeviceptr a, b, c; uint8_t *h; size_t hcap; dist_cuda__CUevent e0, e1; } kbufs;

/* One event-timed operation on the stream: k 0 the copy c = b, k 1 the
   kernel a += b.  *us: its time. */
static int kernel_step(bench *B, kbufs *K, int k, size_t bytes, dist_dtype t, double *us) {
    float ms = 0;
    CU(dist_cuda__cu.EventRecord(K->e0, B->stream), "cuEventRecord");
    if (k == 0) {
        CU(cu_memcpy_dtod_async(K->c, K->b, bytes, B->stream), "cuMemcpyDtoDAsync");
    } else if (dist_cuda_reduce_local(B->staged, DP(K->a), DP(K->b), bytes / dist_dtype_size(t), t, DIST_SUM, B->stream) != DIST_OK) {
        return fail(B, "%s", dist_cuda_error_message());
    }
    if (!set_ctx(B)) return 0;
    CU(dist_cuda__cu.EventRecord(K->e1, B->stream), "cuEventRecord");
    CU(dist_cuda__cu.EventSynchronize(K->e1), "cuEventSynchronize (the timed operation)");
    CU(cu_event_elapsed(&ms, K->e0, K->e1), "cuEventElapsedTime");
    *us = ms * 1e3;
    return 1;
}

/* One dtype: fill, check one a += b, then warm-up and timed repetitions,
   the copy and the kernel alternating.  *ratio: kernel GB/s / copy GB/s. */
static int kernel_dtype(bench *B, kbufs *K, size_t bytes, dist_dtype t, int warm, int reps, double *ratio, long *all_wrong) {
    long wrong = 0, cwrong = 0;
    double *tk = (double *)malloc(sizeof(double) * (size_t)reps), tc, tm, gk, gc, dummy;
    if (!tk) return fail(B, "out of memory");
    if (!fill_device(B, K->a, bytes, t, 0, K->h, K->hcap) || !fill_device(B, K->b, bytes, t, 1, K->h, K->hcap) ||
        !kernel_step(B, K, 1, bytes, t, &dummy) || !check_sum(B, K->a, bytes, t, K->h, K->hcap, &wrong)) {
        free(tk);
        return 0;
    }
    for (int i = -warm; i < reps; i++) {
        double uc, uk;
        if (!kernel_step(B, K, 0, bytes, t, &uc) || !kernel_step(B, K, 1, bytes, t, &uk)) { free(tk); return 0; }
        if (i >= 0) { B->times[i] = uc; tk[i] = uk; }
    }
    if (!check_copy(B, K->c, K->b, bytes, K->h, K->hcap, &cwrong)) { free(tk); return 0; }
    tc = median(B->times, reps);
    tm = median(tk, reps);
    free(tk);
    gc = 2.0 * bytes / tc / 1e3;
    gk = 3.0 * bytes / tm / 1e3;
    *ratio = gk / gc;
    printf("%-34s %12zu %11.2f %9.3f %-22s %7ld\n", "copy (cuMemcpyDtoDAsync)", bytes, tc, gc, "2 x bytes / time", cwrong);
    {
        char what[64];
        snprintf(what, sizeof what, "reduce_local %s sum (a += b)", dist_dtype_name(t));
        printf("%-34s %12zu %11.2f %9.3f %-22s %7ld\n", what, bytes, tm, gk, "3 x bytes / time", wrong);
    }
    printf("# %s: kernel / copy = %.3f (target >= 0.85: %s)\n", dist_dtype_name(t), *ratio, *ratio >= 0.85 ? "met" : "NOT met");
    fflush(stdout);
    *all_wrong += wrong + cwrong;
    return 1;
}

static int kernel_run(bench *B, kbufs *K) {
    const opts *o = B->o;
    const size_t bytes = o->kernel_bytes / 16 * 16;
    const int reps = o->iters > 0 ? o->iters : 20, warm = o->warm >= 0 ? o->warm : 3;
    dist_dtype types[2] = { DIST_FLOAT32, DIST_BFLOAT16 };
    int ntypes = 2;
    long wrong = 0;
    double ratio[2] = { 0, 0 };
    if (o->dtype_given) { types[0] = o->dtype; ntypes = 1; }
    if (bytes == 0) return fail(B, "--kernel-bytes: want at least 16");
    if (!(B->times = (double *)realloc(B->times, sizeof(double) * (size_t)reps))) return fail(B, "out of memory");
    K->hcap = 64 * MIB;
    if (!(K->h = (uint8_t *)malloc(K->hcap))) return fail(B, "out of host memory");
    if (!set_ctx(B)) return 0;
    CU(dist_cuda__cu.MemAlloc(&K->a, bytes), "cuMemAlloc (a)");
    CU(dist_cuda__cu.MemAlloc(&K->b, bytes), "cuMemAlloc (b)");
    CU(dist_cuda__cu.MemAlloc(&K->c, bytes), "cuMemAlloc (the copy's destination)");
    CU(dist_cuda__cu.EventCreate(&K->e0, 0), "cuEventCreate");
    CU(dist_cuda__cu.EventCreate(&K->e1, 0), "cuEventCreate");
    printf("# median of %d after %d warm-up, each operation timed with CUDA events; 1 GB = 1e9 bytes\n", reps, warm);
    printf("#%-33s %12s %11s %9s %-22s %7s\n", "operation", "bytes", "time(us)", "GB/s", "counted", "#wrong");
    for (int k = 0; k < ntypes; k++)
        if (!kernel_dtype(B, K, bytes, types[k], warm, reps, &ratio[k], &wrong)) return 0;
    printf("# summary: kernel / copy:");
    for (int k = 0; k < ntypes; k++) printf(" %s %.3f", dist_dtype_name(types[k]), ratio[k]);
    printf(" (target >= 0.85)%s\n", wrong ? "; WRONG RESULTS" : "");
    fflush(stdout);
    return wrong ? fail(B, "%ld wrong elements or bytes", wrong) : 1;
}

static int kernel_mode(bench *B) {
    int ok = 1;
    int64_t code = 0;
    char msg[MSG];
    if (B->r == 0) {
        kbufs K;
        memset(&K, 0, sizeof K);
        if (B->n > 1) printf("# --kernel runs on rank 0 alone; the other %d rank(s) wait\n", B->n - 1);
        ok = kernel_run(B, &K);
        if (!ok) printf("cuda_bench --kernel: %s\n", B->err);
        set_ctx(B);
        if (K.a) dist_cuda__cu.MemFree(K.a);
        if (K.b) dist_cuda__cu.MemFree(K.b);
        if (K.c) dist_cuda__cu.MemFree(K.c);
        if (K.e0) dist_cuda__cu.EventDestroy(K.e0);
        if (K.e1) dist_cuda__cu.EventDestroy(K.e1);
        free(K.h);
    }
    return agree(B, ok, 0, &code, msg) == 1 ? 0 : 1;
}

/* ---- a rank ---------------------------------------------------------------- */

static void print_header(bench *B) {
    int32_t mine = dist_cuda_device(B->staged), *all = (int32_t *)malloc(sizeof(int32_t) * (size_t)B->n);
    char name[128] = "?";
    int drv = 0;
    dist_cuda__cu.DeviceGetName(name, (int)sizeof name, B->dev);
    dist_cuda__cu.DriverGetVersion(&drv);
    if (!all || dist_all_gather(B->w, &mine, all, 1, DIST_INT32) != DIST_OK) { free(all); all = NULL; }
    if (B->r == 0) {
        const opts *o = B->o;
        printf("# dist %s cuda_bench%s: %d rank(s); rank 0 on device %d (%s), CUDA driver %d.%d\n", dist_version(), o->kernel ? " --kernel" : "", B->n,
               (int)mine, name, drv / 1000, drv % 1000 / 10);
        if (all) {
            printf("# devices of the ranks:");
            for (int i = 0; i < B->n; i++) printf(" %d", (int)all[i]);
            printf("\n");
        }
        if (!o->kernel) {
            char chunk[40] = "the default";
            if (o->chunk) snprintf(chunk, sizeof chunk, "%zu bytes", o->chunk);
            printf("# %s, op %s, staged chunk %s; every timed iteration starts after a dist_barrier and ends once its stream is synchronised\n",
                   dist_dtype_name(o->dtype), op_names[o->op], chunk);
        }
        fflush(stdout);
    }
    free(all);
}

static int rank_main(dist_t *w, void *arg) {
    const opts *o = (const opts *)arg;
    bench *B = (bench *)calloc(1, sizeof(bench));
    int64_t code = 0;
    char msg[MSG];
    int rc = 1, k;
    if (!B) { fprintf(stderr, "cuda_bench: out of memory\n"); return 1; }
    B->o = o;
    B->w = w;
    B->n = dist_world_size(w);
    B->r = dist_rank(w);
    for (int c = 0; c < C_COUNT; c++)
        for (int b = 0; b < B_COUNT; b++) B->bus[c][b][0] = B->bus[c][b][1] = -1;
    /* The staged path first: every device has it, so its failure means no
       device (or no driver) here or on another rank. */
    k = init_all(B, DIST_CUDA_STAGED, &B->staged, &code, msg);
    if (k <= 0) {
        if (B->r == 0) {
            if (k == 0 && code == DIST_ERR_NO_DEVICE) printf("cuda_bench: skipped, no usable CUDA device: %s\n", msg);
            else printf("cuda_bench: dist_cuda_init failed: %s\n", msg);
        }
        free(B);
        return k == 0 && code == DIST_ERR_NO_DEVICE ? 0 : 1;
    }
    {
        int ok = load_extra(B);
        if (ok && dist_cuda__cu.DeviceGet(&B->dev, dist_cuda_device(B->staged)) != 0) ok = fail(B, "rank %d: cuDeviceGet failed", B->r);
        if (ok && dist_cuda__cu.DevicePrimaryCtxRetain(&B->ctx, B->dev) != 0) ok = fail(B, "rank %d: cuDevicePrimaryCtxRetain failed", B->r);
        else if (ok) B->have_ctx = 1;
        if (ok) ok = set_ctx(B);
        if (ok && dist_cuda__cu.StreamCreate(&B->stream, DIST_CUDA__STREAM_NON_BLOCKING) != 0) {
            B->stream = NULL;
            ok = fail(B, "rank %d: cuStreamCreate failed", B->r);
        }
        if (ok && !(B->times = (double *)malloc(sizeof(double) * (size_t)(o->iters > 100 ? o->iters : 100)))) ok = fail(B, "out of memory");
        k = agree(B, ok, 0, &code, msg);
    }
    if (k == 1) {
        print_header(B);
        rc = o->kernel ? kernel_mode(B) : coll_mode(B);
    } else if (B->r == 0) {
        printf("cuda_bench: %s\n", msg);
    }
    if (B->have_ctx) {
        set_ctx(B);
        if (B->dsend) dist_cuda__cu.MemFree(B->dsend);
        if (B->drecv) dist_cuda__cu.MemFree(B->drecv);
        if (B->stream) dist_cuda__cu.StreamDestroy(B->stream);
    }
    if (B->staged) dist_cuda_destroy(B->staged);
    if (B->have_ctx) dist_cuda__cu.DevicePrimaryCtxRelease(B->dev);
    free(B->hsend);
    free(B->hrecv);
    free(B->times);
    free(B);
    return rc;
}

/* ---- options ----------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr, "usage: cuda_bench [--kernel [--kernel-bytes BYTES]] [-b min] [-e max] [-f factor] [-o colls|all] [-d dtype] [-r op]\n"
                    "                  [-n iters] [-w warmup] [-c 0|1] [-R root] [-N ranks] [--backend staged,ipc,nccl|all]\n"
                    "                  [--host | --no-host] [--chunk BYTES] [--device N]\n"
                    "(the comment at the top of bench/cuda_bench.c says what each measures)\n");
    exit(2);
}

/* A comma-separated list of names from `names` (or "all") into flags. */
static void parse_list(const char *v, const char *const *names, int count, int first, int *flags) {
    while (*v) {
        size_t len = strcspn(v, ",");
        int k = first;
        if (len == 3 && !strncmp(v, "all", 3)) {
            for (k = first; k < count; k++) flags[k] = 1;
        } else {
            while (k < count && (strlen(names[k]) != len || strncmp(v, names[k], len))) k++;
            if (k == count) usage();
            flags[k] = 1;
        }
        v += len;
        if (*v == ',') v++;
    }
}

int main(int argc, char **argv) {
    opts o;
    int colls[C_COUNT] = { 0 }, backends[B_COUNT] = { 0 }, have_backends = 0, have_colls = 0;
    memset(&o, 0, sizeof o);
    o.minb = 1024;
    o.maxb = 256 * MIB;
    o.factor = 4;
    o.warm = -1;
    o.check = 1;
    o.host = 1;
    o.kernel_bytes = (size_t)1 << 30;
    o.dtype = DIST_FLOAT32;
    o.op = DIST_SUM;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--kernel")) { o.kernel = 1; continue; }
        if (!strcmp(a, "--host")) { o.host = 1; continue; }
        if (!strcmp(a, "--no-host")) { o.host = 0; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || !v) usage();
        i++;
        if (!strcmp(a, "--kernel-bytes")) o.kernel_bytes = parse_size(v);
        else if (!strcmp(a, "--backend")) { parse_list(v, backend_names, B_COUNT, B_STAGED, backends); have_backends = 1; }
        else if (!strcmp(a, "--chunk")) o.chunk = parse_size(v);
        else if (!strcmp(a, "--device")) o.device = atoi(v) + 1;
        else if (a[0] != '-' || !a[1] || a[2]) usage();
        else switch (a[1]) {
        case 'b': o.minb = parse_size(v); break;
        case 'e': o.maxb = parse_size(v); break;
        case 'f': o.factor = atoi(v); break;
        case 'n': o.iters = atoi(v); break;
        case 'w': o.warm = atoi(v); break;
        case 'c': o.check = atoi(v); break;
        case 'N': o.nprocs = atoi(v); break;
        case 'R': o.root = atoi(v); break;
        case 'o': parse_list(v, coll_names, C_COUNT, 0, colls); have_colls = 1; break;
        case 'd': {
            int k = dtype_by_name(v);
            if (k < 0) usage();
            o.dtype = (dist_dtype)k;
            o.dtype_given = 1;
            break;
        }
        case 'r': {
            int k = op_by_name(v);
            if (k < 0) usage();
            o.op = (dist_op)k;
            break;
        }
        default: usage();
        }
    }
    if (o.factor < 2 || o.minb > o.maxb || o.iters < 0 || o.iters > 100000 || o.root < 0 || o.device < 0) usage();
    if (o.minb == 0) o.minb = 1;
    if (!have_colls) colls[C_ALL_REDUCE] = 1;
    if (!have_backends) backends[B_STAGED] = backends[B_IPC] = backends[B_NCCL] = 1;
    for (int k = 0; k < C_COUNT; k++)
        if (colls[k]) o.colls[o.ncolls++] = k;
    for (int b = B_STAGED; b < B_COUNT; b++) o.backend[b] = backends[b];
    o.backend[B_HOST] = o.host;
    if (o.nprocs <= 0) {
        int r, n;
        if (dist_env_rank(&r, &n) != DIST_OK) o.nprocs = 1;   /* no launcher: one rank of our own */
        else if (o.root >= n) usage();
    }
    if (o.nprocs > 0 && o.root >= o.nprocs) usage();
    return bench_launch("cuda_bench", o.nprocs, rank_main, &o);
}
