/* bench/mpi_ref.c - the reference for bench/coll_bench: the same sizes, the
   same timing method and the same columns, with MPI's collectives.  Not
   part of the build; bench/compare_mpi.sh compiles it with mpicc when MPI
   is there.

   mpirun -n 2 mpi_ref -b 8 -e 64M -f 4 -o all_reduce [-l LIST] [-n ITERS] [-w ITERS] [-u 0|1]

   Options as coll_bench's: -b, -e, -f, -l (sizes), -o (broadcast reduce
   all_reduce gather all_gather scatter reduce_scatter all_to_all barrier),
   -n (timed iterations; default bench_iters(): 5000 up to 4 KiB ... 20
   above 4 MiB), -w (warm-up; default n/10, >= 2), -u 1 (CPU column).
   Always float32 sum, root 0; sizes count as coll_bench counts them.

   Timing (bench/benchutil.h): per size, the warm-up calls, MPI_Barrier,
   then ITERS calls back to back with no barrier between them, the clock
   (now_us(), the one coll_bench reads) read before the first call and
   after every call.  Per rank: mean = (end - start) / ITERS and the median
   of the per-call durations; reported: the largest mean over the ranks
   (OSU's osu_allreduce reports the average over the ranks; the largest is
   what coll_bench reports) and the largest median over the ranks.

   Columns, the same as coll_bench's and in the same order (bench_header()):
   bytes, count, type, redop, mean(us), median(us), algbw, busbw (both from
   the mean), #wrong (always -1: MPI's results are not checked), and with
   -u 1 cpu(us), the CPU time of one call on all ranks together.  The data
   is all zeros. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The declarations of dist.h (its dtypes, for the shared helpers): the
   clock, CPU time, medians, sizes and row format are the ones coll_bench
   uses. */
#include "../dist.h"
#include "benchutil.h"

static const char *const names[] = { "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
                                     "reduce_scatter", "all_to_all", "barrier" };
enum { BROADCAST, REDUCE, ALL_REDUCE, GATHER, ALL_GATHER, SCATTER, REDUCE_SCATTER, ALL_TO_ALL, BARRIER, COUNT };

static void run_once(int coll, int r, float *s, float *d, int count) {
    switch (coll) {
    case BROADCAST: MPI_Bcast(d, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case REDUCE: MPI_Reduce(r == 0 ? MPI_IN_PLACE : d, d, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
    case ALL_REDUCE: MPI_Allreduce(MPI_IN_PLACE, d, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case GATHER: MPI_Gather(s, count, MPI_FLOAT, d, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case ALL_GATHER: MPI_Allgather(s, count, MPI_FLOAT, d, count, MPI_FLOAT, MPI_COMM_WORLD); break;
    case SCATTER: MPI_Scatter(s, count, MPI_FLOAT, d, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(s, d, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case ALL_TO_ALL: MPI_Alltoall(s, count, MPI_FLOAT, d, count, MPI_FLOAT, MPI_COMM_WORLD); break;
    default: MPI_Barrier(MPI_COMM_WORLD); break;
    }
}

int main(int argc, char **argv) {
    size_t minb = 8, maxb = 64u << 20, sizes[64], maxsize = 0;
    int factor = 4, n, r, fixed_iters = 0, fixed_warm = -1, with_cpu = 0, coll = ALL_REDUCE, nsizes, max_iters = 0, rows = 0;
    const char *list = NULL;
    double sum_busbw = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-l")) list = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) fixed_iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) fixed_warm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-u")) with_cpu = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-o")) {
            for (coll = 0; coll < COUNT && strcmp(argv[i + 1], names[coll]); coll++) {}
            if (coll == COUNT) {
                if (r == 0) fprintf(stderr, "mpi_ref: unknown collective %s\n", argv[i + 1]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
    }
    if (factor < 2) factor = 2;
    if (minb == 0) minb = 1;
    nsizes = bench_sizes(list, minb, maxb, factor, sizes, 64);
    for (int k = 0; k < nsizes; k++) {
        int it = fixed_iters > 0 ? fixed_iters : bench_iters(sizes[k]);
        if (sizes[k] > maxsize) maxsize = sizes[k];
        if (it > max_iters) max_iters = it;
    }
    int blockwise = coll == GATHER || coll == ALL_GATHER || coll == SCATTER || coll == REDUCE_SCATTER || coll == ALL_TO_ALL;
    double fac = coll == ALL_REDUCE ? 2.0 * (n - 1) / n
               : (coll == ALL_GATHER || coll == REDUCE_SCATTER || coll == ALL_TO_ALL) ? (double)(n - 1) / n : 1.0;
    float *s = malloc(maxsize + 64), *d = malloc(maxsize + 64);
    double *stamps = malloc(sizeof(double) * ((size_t)max_iters + 1));   /* iters + 1 timestamps */
    if (!s || !d || !stamps) { fprintf(stderr, "mpi_ref: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    memset(s, 0, maxsize + 64); memset(d, 0, maxsize + 64);   /* touched once: no page faults in the timings */
    if (r == 0) {
        printf("# MPI reference: %s, %d ranks, float32, op sum; back-to-back calls, mean and median per call\n", names[coll], n);
        bench_header(with_cpu);
    }
    for (double t0 = now_us(), more = 1; more > 0;) {   /* settle (BENCH_SETTLE_US) */
        more = now_us() - t0 < BENCH_SETTLE_US;
        MPI_Allreduce(MPI_IN_PLACE, &more, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    for (int k = 0; k < nsizes; k++) {
        size_t bytes = sizes[k];
        int count = (int)(bytes / 4 / (blockwise ? (size_t)n : 1));
        size_t shown = (size_t)count * 4 * (blockwise ? (size_t)n : 1);
        int iters = fixed_iters > 0 ? fixed_iters : bench_iters(bytes);
        int warm = fixed_warm >= 0 ? fixed_warm : bench_warm(iters);
        double cpu, all_cpu = 0, t[2], worst[2];   /* this rank's mean and median; the largest over the ranks */
        if (coll == BARRIER) { count = 0; shown = 0; }
        else if (count == 0) continue;              /* below one element per rank, as coll_bench */
        for (int i = 0; i < warm; i++) run_once(coll, r, s, d, count);
        MPI_Barrier(MPI_COMM_WORLD);
        /* The timed loop: back to back, a clock read after each call. */
        cpu = cpu_us();
        stamps[0] = now_us();
        for (int i = 0; i < iters; i++) {
            run_once(coll, r, s, d, count);
            stamps[i + 1] = now_us();
        }
        cpu = (cpu_us() - cpu) / iters;
        t[0] = (stamps[iters] - stamps[0]) / iters;
        t[1] = bench_median_gap(stamps, iters);
        MPI_Allreduce(t, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Reduce(&cpu, &all_cpu, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (r == 0) sum_busbw += bench_row(shown, (size_t)count, "float32", "sum", worst[0], worst[1], fac, -1L, with_cpu, all_cpu);
        rows++;
        if (coll == BARRIER) break;
    }
    if (r == 0) printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? sum_busbw / rows : 0);
    free(s); free(d); free(stamps);
    MPI_Finalize();
    return 0;
}
