/* bench/coll_bench.c - collective performance with nccl-tests' flags,
   columns and habits (NVIDIA/nccl-tests' all_reduce_perf and its
   siblings), on dist.h and the CPU.

   build/distrun -n 4 build/bench/all_reduce_perf -b 8 -e 64M -f 4 -d float -o sum
   build/bench/broadcast_perf --np 4 -b 1K -e 1M -r 1     (forks its 4 ranks)
   build/bench/coll_bench --coll all_gather --np 2 -c 1

   The collective comes from the program's name, as with nccl-tests:
   all_reduce_perf, broadcast_perf, reduce_perf, all_gather_perf,
   reduce_scatter_perf, alltoall_perf, gather_perf, scatter_perf and
   sendrecv_perf (`make bench` makes them links to coll_bench), or from
   --coll NAME, which wins (broadcast reduce all_reduce gather all_gather
   scatter reduce_scatter all_to_all sendrecv barrier; nccl-tests' names
   too).  coll_bench by itself is all_reduce.

   Options: nccl-tests' letters and long names, with their meanings
     -b, --minbytes B       smallest size (K, M, G suffixes)       default 8
     -e, --maxbytes B       largest size                         default 64M
     -f, --stepfactor N     multiply the size by N each step       default 4
     -i, --stepbytes B      add B each step instead (when -f is 1 or not
                            given)
     -o, --op OP            sum prod max min avg, or all (one sweep each);
                            NCCL's spellings too (ncclSum)       default sum
     -d, --datatype T       int8 uint8 int32 int64 half bfloat16 float
                            double, or all; dist.h's names (float32) and
                            NCCL's (ncclFloat) too             default float
     -r, --root R           root of broadcast, reduce, gather, scatter, or
                            all (one sweep per rank)               default 0
     -n, --iters N          timed calls per size (nccl-tests' default is 20;
                            here 5000 up to 4 KiB, 2000 up to 64 KiB, 200 up
                            to 1 MiB, 50 up to 4 MiB, 20 above: a call of a
                            few us needs thousands for a steady mean)
     -w, --warmup_iters N   untimed calls before them        default n/10, >= 2
     -c, --check N          check the results of N calls per size and
                            placement; 0: none, #wrong is N/A      default 1
     -a, --average 0|1|2|3  a time made one over the ranks: rank 0's, the
                            mean, the least, the largest           default 1
     -N, --run_cycles N     the whole sweep N times (0: until stopped)  1
     -T, --timeout S        DIST_TIMEOUT for the job: a call that waits
                            longer than S seconds fails
     -z, --blocking 0|1     accepted; dist.h's calls return when done
     -t -g -m -p -y -G -C -R  accepted and ignored (threads, GPUs,
                            aggregation, parallel init, CUDA streams and
                            graphs, GPU timing, buffer registration: nothing
                            to choose on the CPU); the header notes each
   and coll_bench's own:
     --coll NAME            the collective (above)
     --np N                 no launcher: fork N local ranks (dist_spawn)
     -l, --list SIZES       these sizes instead of -b/-e/-f: 8,64,1K,1M
     -u, --cpu 0|1          a column per placement: CPU time per call, all
                            ranks together (us; beside the time it shows how
                            busy the cores were: 4 ranks on 2 cores at most
                            2 x time)                              default 0
     -h, --help

   Sizes are nccl-tests' "size": bytes of the larger buffer (all_gather's
   and gather's whole output, scatter's and reduce_scatter's whole input,
   one all_to_all buffer, the buffer of the others); count is one rank's
   block in elements.  A size whose count comes to 0 is skipped.

   Timing, as nccl-tests and OSU do it: per size and placement, the
   warm-up calls, one barrier, then ITERS calls back to back.  Each rank
   reads the clock before the first call and after every call (a vDSO
   clock read, tens of ns): its mean is (end - start) / ITERS, its median
   the median of the per-call durations; -a makes each one over the ranks
   (bench/RESULTS.md's entries before 2026-11-27 took the largest: -a 3).
   algbw and busbw come from the mean.  The timed loops work on zeros, so
   repeated in-place reductions cannot overflow.

   Placements.  Out-of-place: separate send and receive buffers; in-place:
   one buffer, offset as nccl-tests offsets it (bench/benchutil.h).
   dist.h's broadcast, reduce and all_reduce work in place only, so their
   out-of-place column times what a caller with two buffers does: copy the
   input into the output, then the in-place call (the root's copy for
   broadcast and reduce; reduce leaves other ranks' buffers unchanged, so
   they pass their input).  sendrecv (to rank + 1, from rank - 1) has no
   in-place form here: N/A.

   The check (-c N, untimed, after the timed loop): every rank fills its
   input from a formula of a seed that changes every check, its rank and
   the element's index (small integers, exact in every dtype; products of
   1s and one 2), fills the output with a sentinel, makes one call and
   compares its output with what it computes on its own from the same
   formula for the other ranks' inputs; avg of floating types within a
   rounding, the rest exactly.  COLL_BENCH_CORRUPT=RANK (for tests) makes
   that rank change the last element of its input after filling it, so
   the check must fail.  Exit status 1 when any element was wrong.

   Output: nccl-tests' layout (bench_header() in bench/benchutil.h):
      1 size   2 count   3 type   4 redop   5 root (-1: not rooted)
      out-of-place: 6 time(us)  7 median(us)  8 algbw  9 busbw  10 #wrong
      in-place:    11 time(us) 12 median(us) 13 algbw 14 busbw  15 #wrong
   (with -u 1 a cpu(us) column after each #wrong), and a footer:
   "# Out of bounds values : N OK|FAILED", "# Avg bus bandwidth : X" (the
   mean busbw of every row's two placements, GB/s).  busbw = algbw x
   nccl-tests' factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter,
   alltoall, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1.
   DIST_ALGO=ring|tree|halving|shm picks the algorithm where dist.h has a
   choice. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"

typedef struct opts {
    size_t minb, maxb, step;
    const char *list, *prog;          /* prog: the name it was run as */
    int factor, iters, warm, check, nprocs, average, cycles, cpu, coll, root;   /* root -1: all */
    int types[DIST_DTYPE_COUNT], ntypes, ops[DIST_OP_COUNT], nops;
    char notes[256];                  /* the flags it ignored */
} opts;

/* One sweep's fixed part and one size: what a call and its check need. */
typedef struct job {
    const bench_coll *k;
    int coll, rank, n, root, corrupt;   /* corrupt: COLL_BENCH_CORRUPT, else -1 */
    dist_dtype dtype;
    dist_op op;
    size_t es, count, send_elems, recv_elems;
    uint64_t seed;                      /* of this check's inputs */
} job;

/* A placement's buffers; fill is the whole receiving side (the one buffer
   in place), which the check first sets to a sentinel. */
typedef struct place { uint8_t *send, *recv, *fill; size_t fill_elems; int in_place; } place;

/* ---- the check's values -------------------------------------------------- */

static uint64_t mix(uint64_t x) {       /* splitmix64's finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of rank q's send buffer: -2..2 (0..4 for uint8), so that sums
   over up to 63 ranks stay exact in every dtype; for products, 1 but on
   one rank per element, 2. */
static double input(const job *j, int q, size_t i) {
    if (j->op == DIST_PRODUCT) return mix(j->seed ^ mix(i)) % (uint64_t)j->n == (uint64_t)q ? 2 : 1;
    double v = (double)(mix(j->seed ^ mix(((uint64_t)q << 48) ^ i)) % 5);
    return j->dtype == DIST_UINT8 ? v : v - 2;
}

/* The reduction over the ranks of element i of their send buffers. */
static double reduced(const job *j, size_t i) {
    double acc = input(j, 0, i);
    for (int q = 1; q < j->n; q++) {
        double v = input(j, q, i);
        switch (j->op) {
        case DIST_PRODUCT: acc *= v; break;
        case DIST_MAX: acc = v > acc ? v : acc; break;
        case DIST_MIN: acc = v < acc ? v : acc; break;
        default: acc += v; break;                   /* sum, avg */
        }
    }
    if (j->op == DIST_AVG) acc = j->dtype <= DIST_INT64 ? (double)((long long)acc / j->n) : acc / j->n;
    return acc;
}

/* Element i of this rank's output, computed here. */
static double expected(const job *j, size_t i) {
    size_t c = j->count, r = (size_t)j->rank;
    switch (j->coll) {
    case BENCH_BROADCAST: return input(j, j->root, i);
    case BENCH_REDUCE: case BENCH_ALL_REDUCE: return reduced(j, i);
    case BENCH_GATHER: case BENCH_ALL_GATHER: return input(j, (int)(i / c), i % c);
    case BENCH_SCATTER: return input(j, j->root, r * c + i);
    case BENCH_REDUCE_SCATTER: return reduced(j, r * c + i);
    case BENCH_ALL_TO_ALL: return input(j, (int)(i / c), r * c + i % c);
    default: return input(j, (j->rank + j->n - 1) % j->n, i);    /* sendrecv */
    }
}

/* Exact, but for avg of floating types: one rounding of the type. */
static int differs(const job *j, double got, double want) {
    static const double rel[DIST_DTYPE_COUNT] = { 0, 0, 0, 0, 1e-3, 8e-3, 1e-6, 1e-14 };
    if (j->op != DIST_AVG || j->dtype <= DIST_INT64) return got != want;
    return !(fabs(got - want) <= rel[j->dtype] * (fabs(want) > 1 ? fabs(want) : 1));
}

/* ---- one call -------------------------------------------------------------- */

static dist_result call(dist_t *w, const job *j, const place *p) {
    size_t c = j->count, bytes = c * j->es;
    int r = j->rank, n = j->n;
    switch (j->coll) {
    case BENCH_BROADCAST:
        if (!p->in_place && r == j->root) memcpy(p->recv, p->send, bytes);
        return dist_broadcast(w, p->recv, c, j->dtype, j->root);
    case BENCH_REDUCE:
        if (!p->in_place && r != j->root) return dist_reduce(w, p->send, c, j->dtype, j->op, j->root);
        if (!p->in_place) memcpy(p->recv, p->send, bytes);
        return dist_reduce(w, p->recv, c, j->dtype, j->op, j->root);
    case BENCH_ALL_REDUCE:
        if (!p->in_place) memcpy(p->recv, p->send, bytes);
        return dist_all_reduce(w, p->recv, c, j->dtype, j->op);
    case BENCH_GATHER: return dist_gather(w, p->send, p->recv, c, j->dtype, j->root);
    case BENCH_ALL_GATHER: return dist_all_gather(w, p->send, p->recv, c, j->dtype);
    case BENCH_SCATTER: return dist_scatter(w, p->send, p->recv, c, j->dtype, j->root);
    case BENCH_REDUCE_SCATTER: return dist_reduce_scatter(w, p->send, p->recv, c, j->dtype, j->op);
    case BENCH_ALL_TO_ALL: return dist_all_to_all(w, p->send, p->recv, c, j->dtype);
    case BENCH_SENDRECV: {
        dist_req_t *req[2] = { NULL, NULL };
        dist_result res = dist_irecv(w, p->recv, c, j->dtype, (r + n - 1) % n, 7, &req[0]);
        if (res == DIST_OK) res = dist_isend(w, p->send, c, j->dtype, (r + 1) % n, 7, &req[1]);
        dist_result all = dist_wait_all(2, req);
        return res != DIST_OK ? res : all;
    }
    default: return dist_barrier(w);
    }
}

/* One checked call on fresh inputs; returns this rank's wrong elements, or
   -1 when the call failed (*res says why). */
static long check_once(dist_t *w, const job *j, const place *p, dist_result *res) {
    long wrong = 0;
    for (size_t i = 0; i < p->fill_elems; i++) put(p->fill, i, j->dtype, 99);
    if (!(j->coll == BENCH_BROADCAST && j->rank != j->root))
        for (size_t i = 0; i < j->send_elems; i++) put(p->send, i, j->dtype, input(j, j->rank, i));
    if (j->rank == j->corrupt && j->send_elems > 0) {
        size_t last = j->send_elems - 1;
        double v = get(p->send, last, j->dtype);
        put(p->send, last, j->dtype, j->op == DIST_MAX ? v + 10 : j->op == DIST_MIN ? v - 10 : v + 1);
    }
    if ((*res = call(w, j, p)) != DIST_OK) return -1;
    if ((j->coll == BENCH_REDUCE || j->coll == BENCH_GATHER) && j->rank != j->root) return 0;
    for (size_t i = 0; i < j->recv_elems; i++) wrong += differs(j, get(p->recv, i, j->dtype), expected(j, i));
    return wrong;
}

/* ---- one size ---------------------------------------------------------------- */

typedef struct bufs { uint8_t *send, *recv, *one; double *stamps; } bufs;
typedef struct totals { long wrong; double busbw; int rows; uint64_t seed; } totals;

static place placement(const job *j, const bufs *b, int in_place) {
    place p;
    p.in_place = in_place;
    if (!in_place) {
        p.send = b->send; p.recv = b->recv; p.fill = b->recv; p.fill_elems = j->recv_elems;
    } else {
        p.send = b->one + bench_inplace_send_offset(j->k, j->rank, j->count) * j->es;
        p.recv = b->one + bench_inplace_recv_offset(j->k, j->rank, j->count) * j->es;
        p.fill = b->one;
        p.fill_elems = j->send_elems > j->recv_elems ? j->send_elems : j->recv_elems;
    }
    return p;
}

/* The warm-up calls, a barrier, then iters calls back to back, a clock
   read after each: t[0] the mean, t[1] the median per call, t[2] the CPU
   time per call (us). */
static dist_result time_calls(dist_t *w, const job *j, const place *p, int warm, int iters, double *stamps, double t[3]) {
    dist_result res = DIST_OK;
    memset(p->fill, 0, p->fill_elems * j->es);        /* zeros: what a check left could overflow */
    if (!p->in_place) memset(p->send, 0, j->send_elems * j->es);
    for (int i = 0; i < warm && res == DIST_OK; i++) res = call(w, j, p);
    if (res == DIST_OK) res = dist_barrier(w);
    t[2] = cpu_us();
    stamps[0] = now_us();
    for (int i = 0; i < iters && res == DIST_OK; i++) {
        res = call(w, j, p);
        stamps[i + 1] = now_us();
    }
    if (res != DIST_OK) return res;
    t[2] = (cpu_us() - t[2]) / iters;
    t[0] = (stamps[iters] - stamps[0]) / iters;
    t[1] = bench_median_gap(stamps, iters);
    return DIST_OK;
}

/* -a: the ranks' values made one (on every rank). */
static dist_result over_ranks(dist_t *w, double *v, size_t len, int average) {
    if (average == BENCH_AVG_RANK0) return dist_broadcast(w, v, len, DIST_FLOAT64, 0);
    return dist_all_reduce(w, v, len, DIST_FLOAT64,
                           average == BENCH_AVG_MIN ? DIST_MIN : average == BENCH_AVG_MAX ? DIST_MAX : DIST_AVG);
}

/* Times and checks one size in both placements, rank 0 prints its row.
   Returns 0, or -1 when a call failed. */
static int one_size(dist_t *w, const opts *o, job *j, const bufs *b, size_t bytes, totals *tot) {
    size_t sb = bench_blocks(j->k->send_blocks, j->n), rb = bench_blocks(j->k->recv_blocks, j->n);
    size_t most = sb > rb ? sb : rb;
    double t[2][3] = { { 0 } }, times[4], sums[4];      /* per placement: mean, median, cpu */
    long wrong[2] = { 0, 0 };
    dist_result res = DIST_OK;
    j->count = most ? bytes / j->es / most : 0;
    if (j->coll != BENCH_BARRIER && j->count == 0) return 0;    /* below one element a rank: skipped */
    j->send_elems = j->count * sb;
    j->recv_elems = j->count * rb;
    int iters = o->iters > 0 ? o->iters : bench_iters(bytes);
    int warm = o->warm >= 0 ? o->warm : bench_warm(iters);
    for (int in_place = 0; in_place < 2 && res == DIST_OK; in_place++) {
        place p = placement(j, b, in_place);
        if (in_place && j->coll == BENCH_SENDRECV) break;
        res = time_calls(w, j, &p, warm, iters, b->stamps, t[in_place]);
        for (int c = 0; c < o->check && res == DIST_OK; c++) {
            j->seed = ++tot->seed;                      /* the same sequence on every rank */
            long k = check_once(w, j, &p, &res);
            if (k > 0) wrong[in_place] += k;
        }
    }
    if (res != DIST_OK) { fprintf(stderr, "rank %d: %s\n", j->rank, dist_error_message(w)); return -1; }
    times[0] = t[0][0]; times[1] = t[0][1]; times[2] = t[1][0]; times[3] = t[1][1];
    sums[0] = t[0][2]; sums[1] = t[1][2]; sums[2] = (double)wrong[0]; sums[3] = (double)wrong[1];
    if (over_ranks(w, times, 4, o->average) != DIST_OK || dist_all_reduce(w, sums, 4, DIST_FLOAT64, DIST_SUM) != DIST_OK) {
        fprintf(stderr, "rank %d: %s\n", j->rank, dist_error_message(w));
        return -1;
    }
    tot->wrong += (long)(sums[2] + sums[3]);
    if (j->rank == 0) {
        size_t shown = j->count * j->es * most;
        double factor = bench_bus_factor(j->k, j->n);
        bench_row_start(shown, j->count, bench_type_name(j->dtype), j->k->reduces ? bench_op_name(j->op) : "none",
                        j->k->rooted ? j->root : -1);
        for (int in_place = 0; in_place < 2; in_place++) {
            if (in_place && j->coll == BENCH_SENDRECV) { bench_row_na(o->cpu); continue; }
            tot->busbw += bench_row_half(shown, times[2 * in_place], times[2 * in_place + 1], factor,
                                         o->check ? (long)sums[2 + in_place] : -1L, o->cpu, sums[in_place]);
            tot->rows++;
        }
        bench_row_end();
    }
    return 0;
}

/* ---- the sweep ------------------------------------------------------------- */

/* Rank 0's header: what runs, the ranks, the columns (nccl-tests' order). */
static void header(dist_t *w, const opts *o, const size_t *sizes, int nsizes) {
    typedef struct who { int32_t pid; char host[60]; } who;
    int n = dist_world_size(w), r = dist_rank(w);
    const bench_coll *k = bench_coll_info(o->coll);
    who me, *all = (who *)calloc((size_t)n, sizeof(who));
    memset(&me, 0, sizeof me);
    me.pid = (int32_t)getpid();
    gethostname(me.host, sizeof me.host - 1);
    if (!all || dist_all_gather(w, &me, all, sizeof me, DIST_UINT8) != DIST_OK || r != 0) { free(all); return; }
    printf("# %s (dist %s coll_bench, %s): nRanks %d minBytes %zu maxBytes %zu step: ", o->prog, dist_version(),
           k->name, n, sizes[0], sizes[nsizes - 1]);
    if (o->list) printf("%s(list)", o->list);
    else if (o->factor >= 2) printf("%d(factor)", o->factor);
    else printf("%zu(bytes)", o->step);
    printf(" warmup iters: ");
    if (o->warm >= 0) printf("%d", o->warm); else printf("n/10");
    printf(" iters: ");
    if (o->iters > 0) printf("%d", o->iters); else printf("auto");
    printf(" validation: %d average: %d\n", o->check, o->average);
    printf("# DIST_TRANSPORT=%s DIST_ALGO=%s; time: mean per call of a back-to-back loop, %s; median beside it\n",
           getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto", getenv("DIST_ALGO") ? getenv("DIST_ALGO") : "auto",
           bench_average_name(o->average));
    if (o->coll == BENCH_BROADCAST || o->coll == BENCH_REDUCE || o->coll == BENCH_ALL_REDUCE)
        printf("# out-of-place: the input copied into the output, then dist.h's in-place %s\n", k->name);
    if (o->notes[0]) printf("# ignored (GPU and thread options, nothing to choose on the CPU):%s\n", o->notes);
    printf("#\n# Using ranks\n");
    for (int q = 0; q < n; q++) printf("#  Rank %2d Pid %7d on %s\n", q, (int)all[q].pid, all[q].host);
    printf("#\n");
    bench_header(o->cpu);
    fflush(stdout);
    free(all);
}

static int bench(dist_t *w, void *arg) {
    const opts *o = (const opts *)arg;
    int n = dist_world_size(w), r = dist_rank(w), nsizes, max_iters = 0, failed = 0;
    const char *corrupt = getenv("COLL_BENCH_CORRUPT");
    size_t sizes[1024], maxb = 0;
    totals tot = { 0, 0, 0, 0 };
    bufs b;
    job j;
    memset(&j, 0, sizeof j);
    j.coll = o->coll;
    j.k = bench_coll_info(o->coll);
    j.rank = r;
    j.n = n;
    j.corrupt = corrupt && *corrupt ? atoi(corrupt) : -1;
    if (j.k->rooted && o->root >= n) {
        if (r == 0) fprintf(stderr, "%s: root %d, but the job has %d ranks\n", o->prog, o->root, n);
        return 2;
    }
    nsizes = bench_sizes(o->list, o->minb, o->maxb, o->factor, o->step, sizes, 1024);
    if (nsizes == 0) { if (r == 0) fprintf(stderr, "%s: no sizes\n", o->prog); return 2; }
    for (int s = 0; s < nsizes; s++) {
        int it = o->iters > 0 ? o->iters : bench_iters(sizes[s]);
        if (sizes[s] > maxb) maxb = sizes[s];
        if (it > max_iters) max_iters = it;
    }
    b.stamps = (double *)malloc(sizeof(double) * ((size_t)max_iters + 1));   /* iters + 1 timestamps */
    b.send = (uint8_t *)malloc(maxb + 64);
    b.recv = (uint8_t *)malloc(maxb + 64);
    b.one = (uint8_t *)malloc(maxb + 64);
    if (!b.send || !b.recv || !b.one || !b.stamps) { fprintf(stderr, "%s: out of memory\n", o->prog); return 1; }
    memset(b.send, 0, maxb + 64);      /* touched once: no page faults in the timings */
    memset(b.recv, 0, maxb + 64);
    memset(b.one, 0, maxb + 64);
    header(w, o, sizes, nsizes);
    for (double t0 = now_us(), more = 1; more > 0;) {   /* settle (BENCH_SETTLE_US) */
        more = now_us() - t0 < BENCH_SETTLE_US;
        if (dist_all_reduce(w, &more, 1, DIST_FLOAT64, DIST_MAX) != DIST_OK) { fprintf(stderr, "settling: %s\n", dist_error_message(w)); return 1; }
    }
    /* nccl-tests' order: per cycle, type, op and root, a sweep of sizes */
    int first_root = j.k->rooted && o->root > 0 ? o->root : 0, last_root = !j.k->rooted ? 0 : o->root < 0 ? n - 1 : o->root;
    for (int cycle = 0; !failed && (o->cycles == 0 || cycle < o->cycles); cycle++)
        for (int ti = 0; !failed && ti < o->ntypes; ti++)
            for (int oi = 0; !failed && oi < (j.k->reduces ? o->nops : 1); oi++)
                for (int root = first_root; !failed && root <= last_root; root++) {
                    j.dtype = (dist_dtype)o->types[ti];
                    j.es = dist_dtype_size(j.dtype);
                    j.op = j.k->reduces ? (dist_op)o->ops[oi] : DIST_SUM;
                    j.root = root;
                    for (int s = 0; !failed && s < nsizes; s++) {
                        failed = one_size(w, o, &j, &b, sizes[s], &tot) != 0;
                        if (o->coll == BENCH_BARRIER) break;
                    }
                }
    if (r == 0 && !failed) bench_footer(tot.wrong, tot.busbw, tot.rows);
    free(b.stamps); free(b.send); free(b.recv); free(b.one);
    if (failed) return 1;
    /* Wrong elements fail rank 0 alone, after its footer: a launcher stops
       the job when a rank fails, and rank 0 could be stopped mid-print. */
    return dist_barrier(w) != DIST_OK || (r == 0 && tot.wrong > 0);
}

/* ---- options --------------------------------------------------------------- */

static void usage(FILE *to, int status) {
    fprintf(to,
        "usage: all_reduce_perf|broadcast_perf|reduce_perf|all_gather_perf|reduce_scatter_perf|alltoall_perf|\n"
        "       gather_perf|scatter_perf|sendrecv_perf|coll_bench [options]   (under distrun, or with --np N)\n"
        "nccl-tests' options:\n"
        "  -b,--minbytes B        smallest size, K/M/G suffixes (8)\n"
        "  -e,--maxbytes B        largest size (64M)\n"
        "  -f,--stepfactor N      size x N each step (4)\n"
        "  -i,--stepbytes B       size + B each step instead (when -f is 1 or not given)\n"
        "  -o,--op OP             sum|prod|max|min|avg|all (sum)\n"
        "  -d,--datatype T        int8|uint8|int32|int64|half|bfloat16|float|double|all (float)\n"
        "  -r,--root R            root of broadcast/reduce/gather/scatter, or all (0)\n"
        "  -n,--iters N           timed calls per size (5000 to 4 KiB ... 20 above 4 MiB)\n"
        "  -w,--warmup_iters N    untimed calls first (n/10, at least 2)\n"
        "  -c,--check N           check N calls per size and placement, 0: none (1)\n"
        "  -a,--average 0..3      time over the ranks: 0 rank 0's, 1 mean, 2 least, 3 largest (1)\n"
        "  -N,--run_cycles N      run the sweep N times, 0: until stopped (1)\n"
        "  -T,--timeout S         DIST_TIMEOUT for the job, seconds\n"
        "  -z,--blocking 0|1      accepted: dist.h's calls return when done\n"
        "  -t -g -m -p -y -G -C -R  accepted and ignored (threads, GPUs, CUDA: nothing to choose on the CPU)\n"
        "coll_bench's own:\n"
        "  --coll NAME            broadcast|reduce|all_reduce|gather|all_gather|scatter|reduce_scatter|\n"
        "                         all_to_all|sendrecv|barrier (default: from the program's name)\n"
        "  --np N                 no launcher: fork N local ranks\n"
        "  -l,--list SIZES        these sizes instead of -b/-e/-f, e.g. 8,64,1K,1M\n"
        "  -u,--cpu 0|1           a CPU time column per placement, all ranks (0)\n"
        "  -h,--help\n"
        "Columns: size count type redop root, then out-of-place and in-place: time (mean us per call),\n"
        "median (us), algbw, busbw (GB/s), #wrong.  Exit status 1 when a check found a wrong element.\n");
    exit(status);
}

/* The list of -d or -o: one name, or all of them. */
static int pick(const char *v, int *out, int all, int (*by_name)(const char *)) {
    if (strcmp(v, "all") == 0) {
        for (int k = 0; k < all; k++) out[k] = k;
        return all;
    }
    return (out[0] = by_name(v)) < 0 ? 0 : 1;
}

enum { OPT_COLL = 256, OPT_NP };

int main(int argc, char **argv) {
    static const struct option longopts[] = {
        { "minbytes", required_argument, 0, 'b' }, { "maxbytes", required_argument, 0, 'e' },
        { "stepbytes", required_argument, 0, 'i' }, { "stepfactor", required_argument, 0, 'f' },
        { "op", required_argument, 0, 'o' }, { "datatype", required_argument, 0, 'd' },
        { "root", required_argument, 0, 'r' }, { "iters", required_argument, 0, 'n' },
        { "warmup_iters", required_argument, 0, 'w' }, { "check", required_argument, 0, 'c' },
        { "average", required_argument, 0, 'a' }, { "run_cycles", required_argument, 0, 'N' },
        { "timeout", required_argument, 0, 'T' }, { "blocking", required_argument, 0, 'z' },
        { "nthreads", required_argument, 0, 't' }, { "ngpus", required_argument, 0, 'g' },
        { "agg_iters", required_argument, 0, 'm' }, { "parallel_init", required_argument, 0, 'p' },
        { "stream_null", required_argument, 0, 'y' }, { "cudagraph", required_argument, 0, 'G' },
        { "report_cputime", required_argument, 0, 'C' }, { "local_register", required_argument, 0, 'R' },
        { "coll", required_argument, 0, OPT_COLL }, { "np", required_argument, 0, OPT_NP },
        { "list", required_argument, 0, 'l' }, { "cpu", required_argument, 0, 'u' },
        { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
    };
    opts o;
    const char *base = strrchr(argv[0], '/');
    int c, factor_given = 0;
    memset(&o, 0, sizeof o);
    o.minb = 8; o.maxb = 64u << 20; o.step = 1u << 20; o.factor = 4; o.warm = -1; o.check = 1;
    o.average = BENCH_AVG_MEAN; o.cycles = 1;
    o.types[0] = DIST_FLOAT32; o.ntypes = 1;
    o.ops[0] = DIST_SUM; o.nops = 1;
    o.prog = base ? base + 1 : argv[0];
    o.coll = bench_coll_by_name(o.prog);
    if (o.coll < 0) o.coll = BENCH_ALL_REDUCE;
    while ((c = getopt_long(argc, argv, "b:e:i:f:o:d:r:n:w:c:a:N:T:z:t:g:m:p:y:G:C:R:l:u:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o.minb = parse_size(optarg); break;
        case 'e': o.maxb = parse_size(optarg); break;
        case 'i': o.step = parse_size(optarg); break;
        case 'f': o.factor = atoi(optarg); factor_given = 1; break;
        case 'o': if (!(o.nops = pick(optarg, o.ops, DIST_OP_COUNT, bench_op_by_name))) usage(stderr, 2); break;
        case 'd': if (!(o.ntypes = pick(optarg, o.types, DIST_DTYPE_COUNT, bench_type_by_name))) usage(stderr, 2); break;
        case 'r': o.root = strcmp(optarg, "all") == 0 ? -1 : atoi(optarg); break;
        case 'n': o.iters = atoi(optarg); break;
        case 'w': o.warm = atoi(optarg); break;
        case 'c': o.check = atoi(optarg); break;
        case 'a': o.average = atoi(optarg); break;
        case 'N': o.cycles = atoi(optarg); break;
        case 'T': setenv("DIST_TIMEOUT", optarg, 1); break;
        case 'z': break;                     /* dist.h's calls are blocking */
        case 't': case 'g': case 'm': case 'p': case 'y': case 'G': case 'C': case 'R': {
            size_t len = strlen(o.notes);
            snprintf(o.notes + len, sizeof o.notes - len, " -%c %s", c, optarg);
            break;
        }
        case OPT_COLL: if ((o.coll = bench_coll_by_name(optarg)) < 0) usage(stderr, 2); break;
        case OPT_NP: o.nprocs = atoi(optarg); break;
        case 'l': o.list = optarg; break;
        case 'u': o.cpu = atoi(optarg); break;
        case 'h': usage(stdout, 0); break;
        default: usage(stderr, 2);
        }
    }
    if (optind < argc) usage(stderr, 2);
    if (!factor_given && o.step && o.step != 1u << 20) o.factor = 1;    /* -i alone: nccl-tests' additive steps */
    if (o.minb == 0) o.minb = 1;
    if (o.minb > o.maxb || (o.factor < 2 && o.step == 0) || o.average < 0 || o.average > 3 || o.check < 0 || o.cycles < 0)
        usage(stderr, 2);
    return bench_launch(o.prog, o.nprocs, bench, &o);
}
