/* bench/coll_bench.c - collective performance, in the style of nccl-tests
   and OSU's micro-benchmarks.

   distrun -n 4 build/bench/coll_bench -b 8 -e 64M -f 4 -o all_reduce -d float32
   build/bench/coll_bench -N 4 ...         (forks the ranks itself: dist_spawn)

   Options
     -b BYTES   smallest size (K, M, G suffixes)            default 8
     -e BYTES   largest size                                default 64M
     -f N       multiply the size by N each step            default 4
     -l LIST    these sizes instead of -b/-e/-f, comma-separated
                (e.g. 8,64,1K,16K,256K,1M,4M,16M,64M)
     -o NAME    broadcast reduce all_reduce gather all_gather scatter
                reduce_scatter all_to_all barrier           default all_reduce
     -d DTYPE   int8 uint8 int32 int64 float16 bfloat16 float32 float64
     -r OP      sum product max min avg                     default sum
     -n ITERS   timed iterations per size (default: 5000 up to 4 KiB,
                2000 up to 64 KiB, 200 up to 1 MiB, 50 up to 4 MiB, 20 above)
     -w ITERS   warm-up iterations per size                 default n/10, >= 2
     -c 0|1     check results (one untimed call after the timed loop)
                                                            default 1
     -N RANKS   no launcher: fork this many local ranks
     -R ROOT    root of rooted collectives                  default 0
     -u 0|1     add a column: CPU time per operation, all ranks default 0
                together (us; against the time, it shows how busy the
                cores were: 4 ranks on 2 cores at most 2 x time)

   Sizes are in bytes of the largest buffer, as nccl-tests count them: the
   whole output of all_gather and gather, the whole input of scatter and
   reduce_scatter, one all_to_all buffer, the buffer of the others; count
   is that over the dtype size (and over the ranks for the block-wise
   collectives).  A size whose count comes to 0 is skipped.

   Timing, as OSU and nccl-tests do it: per size, the warm-up calls, one
   barrier, then ITERS calls back to back with no barrier between them.
   Each rank reads the clock before the first call and after every call
   (no barrier, a vDSO clock read); its mean is (end - start) / ITERS and
   its median the median of the ITERS per-call durations.  Reported: the
   largest mean over the ranks (OSU reports the average over the ranks;
   the largest is the time the slowest rank saw, and what a job waits for)
   and, beside it, the largest of the ranks' medians.  algbw and busbw come
   from the mean.  The data the timed loop works on is all zeros (as in
   bench/mpi_ref.c), so repeated in-place reductions cannot overflow.

   Columns (after a '#' title line and two '#' lines naming them; the same
   as bench/mpi_ref.c's, in the same order, see bench_header()):
      1 bytes       2 count       3 type        4 redop
      5 mean(us)    time per call, the largest of the ranks' means
      6 median(us)  the largest of the ranks' median per-call durations
      7 algbw       bytes / mean (GB/s)
      8 busbw       algbw x the nccl-tests factor (all_reduce 2(n-1)/n;
                    all_gather, reduce_scatter, all_to_all (n-1)/n; the
                    others 1) (GB/s)
      9 #wrong      elements that differ from a reference each rank
                    computes on its own (inputs are small integers, so
                    every reduction order is exact); -1 with -c 0
     10 cpu(us)     with -u 1 only
   The last line is the average busbw.  DIST_ALGO=ring|tree|halving|shm
   picks the algorithm where there is a choice. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"

typedef struct opts {
    size_t minb, maxb;
    const char *list;
    int factor, iters, warm, check, nprocs, root, cpu;
    int coll;
    dist_dtype dtype;
    dist_op op;
} opts;

enum { C_BROADCAST, C_REDUCE, C_ALL_REDUCE, C_GATHER, C_ALL_GATHER, C_SCATTER, C_REDUCE_SCATTER, C_ALL_TO_ALL, C_BARRIER, C_COUNT };
static const char *coll_names[C_COUNT] = { "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
                                           "reduce_scatter", "all_to_all", "barrier" };

/* ---- values: small integers, stored in any dtype exactly ---------------- */

/* Rank r's input element i: 1..3 (products of a few stay exact), or for
   sums a value from -2..2 whose totals stay small. */
static double input(const opts *o, int r, size_t i) {
    if (o->op == DIST_PRODUCT) return (double)(1 + (r + i) % 2);
    return (double)((int)((r * 7 + i * 13) % 5) - (o->dtype == DIST_UINT8 ? 0 : 2));
}
static double reduce_ref(const opts *o, int n, size_t i) {
    double acc = input(o, 0, i);
    for (int r = 1; r < n; r++) {
        double v = input(o, r, i);
        switch (o->op) {
        case DIST_SUM: case DIST_AVG: acc += v; break;
        case DIST_PRODUCT: acc *= v; break;
        case DIST_MAX: acc = v > acc ? v : acc; break;
        case DIST_MIN: acc = v < acc ? v : acc; break;
        default: break;
        }
    }
    if (o->op == DIST_AVG) {
        if (o->dtype <= DIST_INT64) { long long s = (long long)acc; acc = (double)(s / n); }
        else acc /= n;
        if (o->dtype == DIST_FLOAT16) acc = from_half(to_half((float)acc));   /* only exact cases are checked */
    }
    return acc;
}

/* ---- one size ---------------------------------------------------------- */

typedef struct bufs { uint8_t *send, *recv; size_t cap; } bufs;

static dist_result run_once(dist_t *w, const opts *o, bufs *b, size_t count) {
    switch (o->coll) {
    case C_BROADCAST: return dist_broadcast(w, b->recv, count, o->dtype, o->root);
    case C_REDUCE: return dist_reduce(w, b->recv, count, o->dtype, o->op, o->root);
    case C_ALL_REDUCE: return dist_all_reduce(w, b->recv, count, o->dtype, o->op);
    case C_GATHER: return dist_gather(w, b->send, b->recv, count, o->dtype, o->root);
    case C_ALL_GATHER: return dist_all_gather(w, b->send, b->recv, count, o->dtype);
    case C_SCATTER: return dist_scatter(w, b->send, b->recv, count, o->dtype, o->root);
    case C_REDUCE_SCATTER: return dist_reduce_scatter(w, b->send, b->recv, count, o->dtype, o->op);
    case C_ALL_TO_ALL: return dist_all_to_all(w, b->send, b->recv, count, o->dtype);
    default: return dist_barrier(w);
    }
}

/* Fills the inputs, runs once, counts wrong elements on this rank. */
static long check_once(dist_t *w, const opts *o, bufs *b, size_t count, dist_result *res) {
    int n = dist_world_size(w), r = dist_rank(w);
    long wrong = 0;
    size_t blocks = (size_t)n;
    switch (o->coll) {
    case C_BROADCAST:
        for (size_t i = 0; i < count; i++) put(b->recv, i, o->dtype, r == o->root ? input(o, r, i) : 0);
        break;
    case C_REDUCE: case C_ALL_REDUCE:
        for (size_t i = 0; i < count; i++) put(b->recv, i, o->dtype, input(o, r, i));
        break;
    case C_GATHER: case C_ALL_GATHER:
        for (size_t i = 0; i < count; i++) put(b->send, i, o->dtype, input(o, r, i));
        break;
    default:   /* scatter, reduce_scatter, all_to_all: block j goes to rank j */
        for (size_t j = 0; j < blocks; j++)
            for (size_t i = 0; i < count; i++) put(b->send, j * count + i, o->dtype, input(o, r, j * count + i + (size_t)r));
        break;
    }
    if ((*res = run_once(w, o, b, count)) != DIST_OK) return -1;
    switch (o->coll) {
    case C_BROADCAST:
        for (size_t i = 0; i < count; i++) wrong += get(b->recv, i, o->dtype) != input(o, o->root, i);
        break;
    case C_REDUCE: case C_ALL_REDUCE:
        if (o->coll == C_REDUCE && r != o->root) break;
        for (size_t i = 0; i < count; i++) wrong += get(b->recv, i, o->dtype) != reduce_ref(o, n, i);
        break;
    case C_GATHER: case C_ALL_GATHER:
        if (o->coll == C_GATHER && r != o->root) break;
        for (size_t j = 0; j < blocks; j++)
            for (size_t i = 0; i < count; i++) wrong += get(b->recv, j * count + i, o->dtype) != input(o, (int)j, i);
        break;
    case C_SCATTER:
        for (size_t i = 0; i < count; i++)
            wrong += get(b->recv, i, o->dtype) != input(o, o->root, (size_t)r * count + i + (size_t)o->root);
        break;
    case C_REDUCE_SCATTER: {
        /* element i of block r from rank q is input(q, r*count + i + q) */
        for (size_t i = 0; i < count; i++) {
            double acc = 0;
            for (int q = 0; q < n; q++) {
                double v = input(o, q, (size_t)r * count + i + (size_t)q);
                if (q == 0) acc = v;
                else if (o->op == DIST_SUM || o->op == DIST_AVG) acc += v;
                else if (o->op == DIST_PRODUCT) acc *= v;
                else if (o->op == DIST_MAX) acc = v > acc ? v : acc;
                else acc = v < acc ? v : acc;
            }
            if (o->op == DIST_AVG) acc = o->dtype <= DIST_INT64 ? (double)((long long)acc / n) : acc / n;
            wrong += get(b->recv, i, o->dtype) != acc;
        }
        break;
    }
    case C_ALL_TO_ALL:
        for (size_t j = 0; j < blocks; j++)
            for (size_t i = 0; i < count; i++)
                wrong += get(b->recv, j * count + i, o->dtype) != input(o, (int)j, (size_t)r * count + i + j);
        break;
    default: break;
    }
    return wrong;
}

static int bench(dist_t *w, void *arg) {
    const opts *o = (const opts *)arg;
    int n = dist_world_size(w), r = dist_rank(w), rows = 0, nsizes, max_iters = 0;
    size_t es = dist_dtype_size(o->dtype), sizes[64], maxb = 0;
    int blockwise = o->coll == C_GATHER || o->coll == C_ALL_GATHER || o->coll == C_SCATTER ||
                    o->coll == C_REDUCE_SCATTER || o->coll == C_ALL_TO_ALL;
    double factor = o->coll == C_ALL_REDUCE ? 2.0 * (n - 1) / n
                  : (o->coll == C_ALL_GATHER || o->coll == C_REDUCE_SCATTER || o->coll == C_ALL_TO_ALL) ? (double)(n - 1) / n : 1.0;
    double sum_busbw = 0, *stamps;
    bufs b;
    nsizes = bench_sizes(o->list, o->minb, o->maxb, o->factor, sizes, 64);
    for (int k = 0; k < nsizes; k++) {
        int it = o->iters > 0 ? o->iters : bench_iters(sizes[k]);
        if (sizes[k] > maxb) maxb = sizes[k];
        if (it > max_iters) max_iters = it;
    }
    stamps = (double *)malloc(sizeof(double) * ((size_t)max_iters + 1));   /* iters + 1 timestamps */
    b.cap = maxb + 64;
    b.send = (uint8_t *)malloc(b.cap);
    b.recv = (uint8_t *)malloc(b.cap);
    if (!b.send || !b.recv || !stamps) { fprintf(stderr, "out of memory\n"); return 1; }
    memset(b.send, 0, b.cap);      /* touched once: no page faults in the timings */
    memset(b.recv, 0, b.cap);
    if (r == 0) {
        printf("# dist %s coll_bench: %s, %d ranks, %s, op %s, DIST_ALGO=%s; back-to-back calls, mean and median per call\n",
               dist_version(), coll_names[o->coll], n, dist_dtype_name(o->dtype), op_names[o->op],
               getenv("DIST_ALGO") ? getenv("DIST_ALGO") : "auto");
        bench_header(o->cpu);
    }
    for (double t0 = now_us(), more = 1; more > 0;) {   /* settle (BENCH_SETTLE_US) */
        more = now_us() - t0 < BENCH_SETTLE_US;
        if (dist_all_reduce(w, &more, 1, DIST_FLOAT64, DIST_MAX) != DIST_OK) { fprintf(stderr, "settling: %s\n", dist_error_message(w)); return 1; }
    }
    for (int k = 0; k < nsizes; k++) {
        size_t bytes = sizes[k];
        size_t count = bytes / es / (blockwise ? (size_t)n : 1);
        size_t shown = count * es * (blockwise ? (size_t)n : 1);
        int iters = o->iters > 0 ? o->iters : bench_iters(bytes);
        int warm = o->warm >= 0 ? o->warm : bench_warm(iters);
        long wrong = 0;
        double t[2], cpu;    /* this rank's mean and median, then the largest over the ranks */
        dist_result res = DIST_OK;
        if (o->coll == C_BARRIER) { count = 0; shown = 0; }
        else if (count == 0) continue;          /* below one element per rank (the same on every rank) */
        memset(b.recv, 0, shown);               /* zeros: what the check left there could overflow */
        for (int i = 0; i < warm && res == DIST_OK; i++) res = run_once(w, o, &b, count);
        if (res == DIST_OK) res = dist_barrier(w);
        /* The timed loop: back to back, a clock read after each call. */
        cpu = cpu_us();
        stamps[0] = now_us();
        for (int i = 0; i < iters && res == DIST_OK; i++) {
            res = run_once(w, o, &b, count);
            stamps[i + 1] = now_us();
        }
        cpu = (cpu_us() - cpu) / iters;
        if (res != DIST_OK) { fprintf(stderr, "rank %d: %s\n", r, dist_error_message(w)); return 1; }
        t[0] = (stamps[iters] - stamps[0]) / iters;
        t[1] = bench_median_gap(stamps, iters);
        if (o->check) {      /* untimed: its own inputs, one call */
            wrong = check_once(w, o, &b, count, &res);
            if (wrong < 0) { fprintf(stderr, "rank %d: %s\n", r, dist_error_message(w)); return 1; }
        }
        if (dist_all_reduce(w, t, 2, DIST_FLOAT64, DIST_MAX) != DIST_OK ||
            dist_all_reduce(w, &wrong, 1, DIST_INT64, DIST_SUM) != DIST_OK ||
            dist_all_reduce(w, &cpu, 1, DIST_FLOAT64, DIST_SUM) != DIST_OK) {
            fprintf(stderr, "rank %d: %s\n", r, dist_error_message(w));
            return 1;
        }
        if (r == 0) {
            sum_busbw += bench_row(shown, count, dist_dtype_name(o->dtype), op_names[o->op], t[0], t[1], factor,
                                   o->check ? wrong : -1L, o->cpu, cpu);
            if (wrong > 0) fprintf(stderr, "coll_bench: %ld wrong elements at %zu bytes\n", wrong, shown);
        }
        rows++;
        if (o->coll == C_BARRIER) break;
    }
    if (r == 0) printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? sum_busbw / rows : 0);
    free(stamps); free(b.send); free(b.recv);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: coll_bench [-b min] [-e max] [-f factor] [-l sizes] [-o collective] [-d dtype] [-r op] [-n iters] "
                    "[-w warmup] [-c 0|1] [-N ranks] [-R root] [-u 0|1]\n");
    exit(2);
}

int main(int argc, char **argv) {
    opts o = { 8, 64u << 20, NULL, 4, 0, -1, 1, 0, 0, 0, C_ALL_REDUCE, DIST_FLOAT32, DIST_SUM };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || !a[1] || a[2] || !v) usage();
        i++;
        switch (a[1]) {
        case 'b': o.minb = parse_size(v); break;
        case 'e': o.maxb = parse_size(v); break;
        case 'f': o.factor = atoi(v); break;
        case 'l': o.list = v; break;
        case 'n': o.iters = atoi(v); break;
        case 'w': o.warm = atoi(v); break;
        case 'c': o.check = atoi(v); break;
        case 'N': o.nprocs = atoi(v); break;
        case 'R': o.root = atoi(v); break;
        case 'u': o.cpu = atoi(v); break;
        case 'o': {
            int k = 0;
            while (k < C_COUNT && strcmp(v, coll_names[k])) k++;
            if (k == C_COUNT) usage();
            o.coll = k;
            break;
        }
        case 'd': {
            int k = dtype_by_name(v);
            if (k < 0) usage();
            o.dtype = (dist_dtype)k;
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
    if (o.factor < 2 || o.minb > o.maxb) usage();
    if (o.minb == 0) o.minb = 1;
    return bench_launch("coll_bench", o.nprocs, bench, &o);
}
