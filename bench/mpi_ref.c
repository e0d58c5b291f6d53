/* bench/mpi_ref.c - the reference for bench/coll_bench: the same sizes and
   the same timing method (each iteration timed on every rank, median per
   rank, largest over the ranks), with MPI's collectives.  Not part of the
   build; bench/compare_mpi.sh compiles it with mpicc when MPI is there.

   mpirun -n 2 mpi_ref -b 8 -e 64M -f 4 -o all_reduce [-n ITERS]

   Per size: bytes, time (us), algbw, busbw, and the CPU time of one
   operation on all ranks together (us). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The declarations of dist.h (its dtypes, for the shared helpers): the
   clock, CPU time, medians and sizes are the ones coll_bench uses. */
#include "../dist.h"
#include "benchutil.h"

int main(int argc, char **argv) {
    size_t minb = 8, maxb = 64u << 20;
    int factor = 4, n, r, fixed_iters = 0;
    const char *op = "all_reduce";
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-o")) op = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) fixed_iters = atoi(argv[i + 1]);
    }
    int blockwise = !strcmp(op, "all_gather") || !strcmp(op, "reduce_scatter") || !strcmp(op, "all_to_all");
    double fac = !strcmp(op, "all_reduce") ? 2.0 * (n - 1) / n : blockwise ? (double)(n - 1) / n : 1.0;
    float *s = malloc(maxb + 64), *d = malloc(maxb + 64);
    double *t = malloc(sizeof(double) * (fixed_iters > 1000 ? (size_t)fixed_iters : 1000));
    memset(s, 0, maxb + 64); memset(d, 0, maxb + 64);
    if (r == 0) printf("# MPI reference: %s, %d ranks, float32 sum\n#%11s %11s %9s %9s %11s\n", op, n, "bytes", "time(us)", "algbw", "busbw", "cpu(us)");
    for (double t0 = now_us(), more = 1; more > 0;) {   /* settle (BENCH_SETTLE_US) */
        more = now_us() - t0 < BENCH_SETTLE_US;
        MPI_Allreduce(MPI_IN_PLACE, &more, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
        int count = (int)(bytes / 4 / (blockwise ? (size_t)n : 1));
        size_t shown = (size_t)count * 4 * (blockwise ? (size_t)n : 1);
        int iters = fixed_iters > 0 ? fixed_iters : bytes <= 65536 ? 1000 : bytes <= (4 << 20) ? 100 : 20, warm = iters / 10 > 2 ? iters / 10 : 2;
        double cpu = 0, all_cpu;
        for (int i = 0; i < warm + iters; i++) {
            double t0 = MPI_Wtime();
            if (i == warm) cpu = cpu_us();
            if (!strcmp(op, "all_reduce")) MPI_Allreduce(MPI_IN_PLACE, d, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(op, "broadcast")) MPI_Bcast(d, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
            else if (!strcmp(op, "reduce")) MPI_Reduce(r == 0 ? MPI_IN_PLACE : d, d, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
            else if (!strcmp(op, "all_gather")) MPI_Allgather(s, count, MPI_FLOAT, d, count, MPI_FLOAT, MPI_COMM_WORLD);
            else if (!strcmp(op, "reduce_scatter")) MPI_Reduce_scatter_block(s, d, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(op, "all_to_all")) MPI_Alltoall(s, count, MPI_FLOAT, d, count, MPI_FLOAT, MPI_COMM_WORLD);
            else MPI_Barrier(MPI_COMM_WORLD);
            if (i >= warm) t[i - warm] = (MPI_Wtime() - t0) * 1e6;
        }
        cpu = (cpu_us() - cpu) / iters;
        MPI_Reduce(&cpu, &all_cpu, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        qsort(t, (size_t)iters, sizeof *t, cmp_d);
        double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]), worst;
        MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r == 0) printf("%12zu %11.2f %9.3f %9.3f %11.2f\n", shown, worst, shown / worst / 1e3, shown / worst / 1e3 * fac, all_cpu);
        fflush(stdout);
    }
    free(s); free(d); free(t);
    MPI_Finalize();
    return 0;
}
