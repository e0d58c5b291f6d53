/* bench/coll_bench.c - collective performance, in the style of nccl-tests.

   distrun -n 4 build/bench/coll_bench -b 8 -e 64M -f 4 -o all_reduce -d float32
   build/bench/coll_bench -N 4 ...         (forks the ranks itself: dist_spawn)

   Options
     -b BYTES   smallest size (K, M, G suffixes)            default 8
     -e BYTES   largest size                                default 64M
     -f N       multiply the size by N each step            default 4
     -o NAME    broadcast reduce all_reduce gather all_gather scatter
                reduce_scatter all_to_all barrier           default all_reduce
     -d DTYPE   int8 uint8 int32 int64 float16 bfloat16 float32 float64
     -r OP      sum product max min avg                     default sum
     -n ITERS   timed iterations per size (default: 20..1000, by size)
     -w ITERS   warm-up iterations per size                 default n/10, >= 2
     -c 0|1     check results                               default 1
     -N RANKS   no launcher: fork this many local ranks
     -R ROOT    root of rooted collectives                  default 0
     -u 0|1     add a column: CPU time per operation, all ranks default 0
                together (us; against the time, it shows how busy the
                cores were: 4 ranks on 2 cores at most 2 x time)

   Sizes are in bytes of the largest buffer, as nccl-tests count them: the
   whole output of all_gather, the whole input of reduce_scatter, one
   all_to_all buffer, the buffer of the others; count is that over the
   dtype size (and over the ranks for the block-wise collectives).

   Per size it prints bytes, count, dtype, op, the time of one operation in
   microseconds (each iteration is timed on every rank; the median over the
   iterations on each rank, then the largest of those over the ranks), algbw
   = bytes / time and busbw = algbw x the nccl-tests factor (all_reduce
   2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; the others 1),
   and #wrong: elements that differ from a reference each rank computes on
   its own (inputs are small integers, so every reduction order is exact).
   The last line is the average busbw.  DIST_ALGO=ring|tree|halving|shm picks the
   algorithm where there is a choice. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"

typedef struct opts {
    size_t minb, maxb;
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
    int n = dist_world_size(w), r = dist_rank(w), rows = 0;
    size_t es = dist_dtype_size(o->dtype);
    int blockwise = o->coll == C_GATHER || o->coll == C_ALL_GATHER || o->coll == C_SCATTER ||
                    o->coll == C_REDUCE_SCATTER || o->coll == C_ALL_TO_ALL;
    double factor = o->coll == C_ALL_REDUCE ? 2.0 * (n - 1) / n
                  : (o->coll == C_ALL_GATHER || o->coll == C_REDUCE_SCATTER || o->coll == C_ALL_TO_ALL) ? (double)(n - 1) / n : 1.0;
    double sum_busbw = 0;
    bufs b;
    double *times = (double *)malloc(sizeof(double) * 100000);
    b.cap = o->maxb + 64;
    b.send = (uint8_t *)malloc(b.cap);
    b.recv = (uint8_t *)malloc(b.cap);
    if (!b.send || !b.recv || !times) { fprintf(stderr, "out of memory\n"); return 1; }
    memset(b.send, 0, b.cap);      /* touched once: no page faults in the timings */
    memset(b.recv, 0, b.cap);
    if (r == 0) {
        printf("# dist %s coll_bench: %s, %d ranks, %s, op %s, DIST_ALGO=%s\n", dist_version(), coll_names[o->coll], n,
               dist_dtype_name(o->dtype), op_names[o->op], getenv("DIST_ALGO") ? getenv("DIST_ALGO") : "auto");
        printf("#%11s %12s %9s %7s %11s %9s %9s %7s%s\n", "bytes", "count", "type", "redop", "time(us)", "algbw", "busbw", "#wrong",
               o->cpu ? "     cpu(us)" : "");
        printf("#%11s %12s %9s %7s %11s %9s %9s %7s%s\n", "", "(per rank)", "", "", "median", "GB/s", "GB/s", "",
               o->cpu ? "   all ranks" : "");
    }
    for (double t0 = now_us(), more = 1; more > 0;) {   /* settle (BENCH_SETTLE_US) */
        more = now_us() - t0 < BENCH_SETTLE_US;
        if (dist_all_reduce(w, &more, 1, DIST_FLOAT64, DIST_MAX) != DIST_OK) { fprintf(stderr, "settling: %s\n", dist_error_message(w)); return 1; }
    }
    for (size_t bytes = o->minb; bytes <= o->maxb; bytes = bytes * (size_t)o->factor) {
        size_t count = bytes / es / (blockwise ? (size_t)n : 1);
        size_t shown = count * es * (blockwise ? (size_t)n : 1);
        int iters = o->iters > 0 ? o->iters : (int)(bytes <= 65536 ? 1000 : bytes <= (4 << 20) ? 100 : 20);
        int warm = o->warm >= 0 ? o->warm : (iters / 10 > 2 ? iters / 10 : 2);
        long wrong = 0, all_wrong = 0;
        double med, worst, cpu;
        dist_result res = DIST_OK;
        if (iters > 100000) iters = 100000;
        if (o->coll == C_BARRIER) { count = 0; shown = 0; }
        for (int i = 0; i < warm && res == DIST_OK; i++) res = run_once(w, o, &b, count);
        if (res == DIST_OK) res = dist_barrier(w);
        cpu = cpu_us();
        for (int i = 0; i < iters && res == DIST_OK; i++) {
            double t0 = now_us();
            res = run_once(w, o, &b, count);
            times[i] = now_us() - t0;
        }
        cpu = (cpu_us() - cpu) / iters;
        if (res != DIST_OK) { fprintf(stderr, "rank %d: %s\n", r, dist_error_message(w)); return 1; }
        qsort(times, (size_t)iters, sizeof *times, cmp_d);
        med = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
        worst = med;
        if (o->check) {
            wrong = check_once(w, o, &b, count, &res);
            if (wrong < 0) { fprintf(stderr, "rank %d: %s\n", r, dist_error_message(w)); return 1; }
        }
        if (dist_all_reduce(w, &worst, 1, DIST_FLOAT64, DIST_MAX) != DIST_OK ||
            dist_all_reduce(w, &wrong, 1, DIST_INT64, DIST_SUM) != DIST_OK ||
            dist_all_reduce(w, &cpu, 1, DIST_FLOAT64, DIST_SUM) != DIST_OK) {
            fprintf(stderr, "rank %d: %s\n", r, dist_error_message(w));
            return 1;
        }
        all_wrong = wrong;
        if (r == 0) {
            double algbw = shown / worst / 1e3, busbw = algbw * factor;
            printf("%12zu %12zu %9s %7s %11.2f %9.3f %9.3f %7ld", shown, count, dist_dtype_name(o->dtype),
                   op_names[o->op], worst, algbw, busbw, o->check ? all_wrong : -1L);
            if (o->cpu) printf(" %11.2f", cpu);
            printf("\n");
            fflush(stdout);
            sum_busbw += busbw;
        }
        rows++;
        if (all_wrong > 0 && r == 0) fprintf(stderr, "coll_bench: %ld wrong elements at %zu bytes\n", all_wrong, shown);
        if (o->coll == C_BARRIER || bytes == 0) break;
    }
    if (r == 0) printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? sum_busbw / rows : 0);
    free(times); free(b.send); free(b.recv);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: coll_bench [-b min] [-e max] [-f factor] [-o collective] [-d dtype] [-r op] [-n iters] "
                    "[-w warmup] [-c 0|1] [-N ranks] [-R root] [-u 0|1]\n");
    exit(2);
}

int main(int argc, char **argv) {
    opts o = { 8, 64u << 20, 4, 0, -1, 1, 0, 0, 0, C_ALL_REDUCE, DIST_FLOAT32, DIST_SUM };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || !a[1] || a[2] || !v) usage();
        i++;
        switch (a[1]) {
        case 'b': o.minb = parse_size(v); break;
        case 'e': o.maxb = parse_size(v); break;
        case 'f': o.factor = atoi(v); break;
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
