/* bench/mpi_ref.c - the reference for bench/coll_bench: the same sizes, the
   same timing method and the same columns, with MPI's collectives.  Not
   part of `make bench`; bench/compare_mpi.sh compiles it with mpicc.

   mpirun -n 2 mpi_ref --coll all_reduce -b 8 -e 64M -f 4 [-l LIST] [-n ITERS] [-w ITERS] [-a 0..3] [-r ROOT] [-u 0|1]

   Options as coll_bench's (nccl-tests' letters): -b, -e, -f, -i, -l
   (sizes), --coll NAME (broadcast reduce all_reduce gather all_gather
   scatter reduce_scatter all_to_all sendrecv barrier, or nccl-tests'
   names), -n (timed iterations; default bench_iters(): 5000 up to 4 KiB
   ... 20 above 4 MiB), -w (warm-up; default n/10, >= 2), -a (a time over
   the ranks: 0 rank 0's, 1 the mean, 2 the least, 3 the largest; default
   1), -r (root), -u 1 (CPU columns).  Always float sum; results are not
   checked (#wrong N/A); sizes count as coll_bench counts them.

   Placements, as coll_bench's: out-of-place with two buffers (broadcast:
   the root copies its input into the output, then MPI_Bcast, as
   coll_bench does for dist.h), in-place with one, MPI_IN_PLACE where MPI
   has it (reduce's and gather's root, all_reduce, all_gather, scatter's
   root, reduce_scatter, all_to_all); sendrecv has no in-place column.

   Timing (bench/benchutil.h): per size and placement, the warm-up calls,
   MPI_Barrier, then ITERS calls back to back with no barrier between
   them, the clock (now_us(), the one coll_bench reads) read before the
   first call and after every call.  Per rank: mean = (end - start) /
   ITERS and the median of the per-call durations, each made one over the
   ranks as -a says.  The data is all zeros. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The declarations of dist.h (its dtypes, for the shared helpers): the
   clock, CPU time, medians, sizes, collectives and row format are the
   ones coll_bench uses. */
#include "../dist.h"
#include "benchutil.h"

/* One call; one = the single buffer in place (s and d unused then). */
static void run_once(int coll, int in_place, int r, int n, int root, float *s, float *d, float *one, int count) {
    MPI_Comm w = MPI_COMM_WORLD;
    size_t c = (size_t)count;
    if (!in_place) {
        switch (coll) {
        case BENCH_BROADCAST:
            if (r == root) memcpy(d, s, c * sizeof *d);
            MPI_Bcast(d, count, MPI_FLOAT, root, w); break;
        case BENCH_REDUCE: MPI_Reduce(s, d, count, MPI_FLOAT, MPI_SUM, root, w); break;
        case BENCH_ALL_REDUCE: MPI_Allreduce(s, d, count, MPI_FLOAT, MPI_SUM, w); break;
        case BENCH_GATHER: MPI_Gather(s, count, MPI_FLOAT, d, count, MPI_FLOAT, root, w); break;
        case BENCH_ALL_GATHER: MPI_Allgather(s, count, MPI_FLOAT, d, count, MPI_FLOAT, w); break;
        case BENCH_SCATTER: MPI_Scatter(s, count, MPI_FLOAT, d, count, MPI_FLOAT, root, w); break;
        case BENCH_REDUCE_SCATTER: MPI_Reduce_scatter_block(s, d, count, MPI_FLOAT, MPI_SUM, w); break;
        case BENCH_ALL_TO_ALL: MPI_Alltoall(s, count, MPI_FLOAT, d, count, MPI_FLOAT, w); break;
        case BENCH_SENDRECV:
            MPI_Sendrecv(s, count, MPI_FLOAT, (r + 1) % n, 7, d, count, MPI_FLOAT, (r + n - 1) % n, 7, w, MPI_STATUS_IGNORE);
            break;
        default: MPI_Barrier(w); break;
        }
        return;
    }
    switch (coll) {
    case BENCH_BROADCAST: MPI_Bcast(one, count, MPI_FLOAT, root, w); break;
    case BENCH_REDUCE: MPI_Reduce(r == root ? MPI_IN_PLACE : one, one, count, MPI_FLOAT, MPI_SUM, root, w); break;
    case BENCH_ALL_REDUCE: MPI_Allreduce(MPI_IN_PLACE, one, count, MPI_FLOAT, MPI_SUM, w); break;
    case BENCH_GATHER:
        MPI_Gather(r == root ? MPI_IN_PLACE : one + (size_t)r * c, count, MPI_FLOAT, one, count, MPI_FLOAT, root, w);
        break;
    case BENCH_ALL_GATHER: MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, one, count, MPI_FLOAT, w); break;
    case BENCH_SCATTER:
        MPI_Scatter(one, count, MPI_FLOAT, r == root ? MPI_IN_PLACE : one + (size_t)r * c, count, MPI_FLOAT, root, w);
        break;
    case BENCH_REDUCE_SCATTER: MPI_Reduce_scatter_block(MPI_IN_PLACE, one, count, MPI_FLOAT, MPI_SUM, w); break;
    case BENCH_ALL_TO_ALL: MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, one, count, MPI_FLOAT, w); break;
    default: MPI_Barrier(w); break;
    }
}

/* -a: v[0..len) made one over the ranks, on every rank. */
static void over_ranks(double *v, int len, int average, int n) {
    if (average == BENCH_AVG_RANK0) { MPI_Bcast(v, len, MPI_DOUBLE, 0, MPI_COMM_WORLD); return; }
    MPI_Allreduce(MPI_IN_PLACE, v, len, MPI_DOUBLE,
                  average == BENCH_AVG_MIN ? MPI_MIN : average == BENCH_AVG_MAX ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
    if (average == BENCH_AVG_MEAN) for (int i = 0; i < len; i++) v[i] /= n;
}

static void die(int r, const char *why, const char *what) {
    if (r == 0) fprintf(stderr, "mpi_ref: %s%s\n", why, what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv) {
    size_t minb = 8, maxb = 64u << 20, step = 0, sizes[1024], maxsize = 0;
    int factor = 4, n, r, fixed_iters = 0, fixed_warm = -1, with_cpu = 0, coll = BENCH_ALL_REDUCE, nsizes, max_iters = 0;
    int average = BENCH_AVG_MEAN, root = 0, rows = 0;
    const char *list = NULL;
    double sum_busbw = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-b")) minb = parse_size(v);
        else if (!strcmp(a, "-e")) maxb = parse_size(v);
        else if (!strcmp(a, "-f")) factor = atoi(v);
        else if (!strcmp(a, "-i")) step = parse_size(v);
        else if (!strcmp(a, "-l")) list = v;
        else if (!strcmp(a, "-n")) fixed_iters = atoi(v);
        else if (!strcmp(a, "-w")) fixed_warm = atoi(v);
        else if (!strcmp(a, "-u")) with_cpu = atoi(v);
        else if (!strcmp(a, "-a")) average = atoi(v);
        else if (!strcmp(a, "-r")) root = atoi(v);
        else if (!strcmp(a, "-c")) {}                       /* nothing is checked */
        else if (!strcmp(a, "-d") && bench_type_by_name(v) != DIST_FLOAT32) die(r, "float only, not ", v);
        else if (!strcmp(a, "-o") && bench_op_by_name(v) != DIST_SUM) die(r, "sum only, not ", v);
        else if (!strcmp(a, "--coll") && (coll = bench_coll_by_name(v)) < 0) die(r, "unknown collective ", v);
    }
    if (factor < 2 && step == 0) factor = 2;
    if (minb == 0) minb = 1;
    if (root < 0 || root >= n) die(r, "root out of range: ", "-r");
    const bench_coll *k = bench_coll_info(coll);
    nsizes = bench_sizes(list, minb, maxb, factor, step, sizes, 1024);
    for (int s = 0; s < nsizes; s++) {
        int it = fixed_iters > 0 ? fixed_iters : bench_iters(sizes[s]);
        if (sizes[s] > maxsize) maxsize = sizes[s];
        if (it > max_iters) max_iters = it;
    }
    size_t sb = bench_blocks(k->send_blocks, n), rb = bench_blocks(k->recv_blocks, n), most = sb > rb ? sb : rb;
    double fac = bench_bus_factor(k, n);
    float *s = malloc(maxsize + 64), *d = malloc(maxsize + 64), *one = malloc(maxsize + 64);
    double *stamps = malloc(sizeof(double) * ((size_t)max_iters + 1));   /* iters + 1 timestamps */
    if (!s || !d || !one || !stamps) { fprintf(stderr, "mpi_ref: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    memset(s, 0, maxsize + 64); memset(d, 0, maxsize + 64); memset(one, 0, maxsize + 64);   /* no page faults timed */
    if (r == 0) {
        printf("# MPI reference (bench/mpi_ref) %s: nRanks %d, float sum, root %d; average: %d; time: mean per call of a "
               "back-to-back loop, %s; median beside it\n", k->name, n, root, average, bench_average_name(average));
        bench_header(with_cpu);
    }
    for (double t0 = now_us(), more = 1; more > 0;) {   /* settle (BENCH_SETTLE_US) */
        more = now_us() - t0 < BENCH_SETTLE_US;
        MPI_Allreduce(MPI_IN_PLACE, &more, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    for (int z = 0; z < nsizes; z++) {
        size_t bytes = sizes[z];
        int count = most ? (int)(bytes / 4 / most) : 0;
        int iters = fixed_iters > 0 ? fixed_iters : bench_iters(bytes);
        int warm = fixed_warm >= 0 ? fixed_warm : bench_warm(iters);
        double t[2][3] = { { 0 } }, times[4], cpu[2];   /* per placement: mean, median, cpu */
        if (coll != BENCH_BARRIER && count == 0) continue;     /* below one element a rank, as coll_bench */
        for (int ip = 0; ip < 2; ip++) {
            if (ip && coll == BENCH_SENDRECV) break;
            for (int i = 0; i < warm; i++) run_once(coll, ip, r, n, root, s, d, one, count);
            MPI_Barrier(MPI_COMM_WORLD);
            /* The timed loop: back to back, a clock read after each call. */
            t[ip][2] = cpu_us();
            stamps[0] = now_us();
            for (int i = 0; i < iters; i++) {
                run_once(coll, ip, r, n, root, s, d, one, count);
                stamps[i + 1] = now_us();
            }
            t[ip][2] = (cpu_us() - t[ip][2]) / iters;
            t[ip][0] = (stamps[iters] - stamps[0]) / iters;
            t[ip][1] = bench_median_gap(stamps, iters);
        }
        times[0] = t[0][0]; times[1] = t[0][1]; times[2] = t[1][0]; times[3] = t[1][1];
        cpu[0] = t[0][2]; cpu[1] = t[1][2];
        over_ranks(times, 4, average, n);
        MPI_Allreduce(MPI_IN_PLACE, cpu, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (r == 0) {
            size_t shown = (size_t)count * 4 * most;
            bench_row_start(shown, (size_t)count, "float", k->reduces ? "sum" : "none", k->rooted ? root : -1);
            for (int ip = 0; ip < 2; ip++) {
                if (ip && coll == BENCH_SENDRECV) { bench_row_na(with_cpu); continue; }
                sum_busbw += bench_row_half(shown, times[2 * ip], times[2 * ip + 1], fac, -1L, with_cpu, cpu[ip]);
                rows++;
            }
            bench_row_end();
        }
        if (coll == BENCH_BARRIER) break;
    }
    if (r == 0) bench_footer(0, sum_busbw, rows);
    free(s); free(d); free(one); free(stamps);
    MPI_Finalize();
    return 0;
}
