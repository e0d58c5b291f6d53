/* recorder_cost.c - what the flight recorder costs an 8-byte all_reduce
   (or broadcast): built twice by bench/recorder_cost.sh, with the recorder
   (DIST_RECORDER_OPS default) and without it (DIST_RECORDER_OPS=0).

   usage: recorder_cost [-n RANKS] [-c all_reduce|broadcast] [-b BATCHES] [-i ITERS]
   Each rank makes ITERS calls back to back, BATCHES times after a warm-up;
   rank 0 prints one line: the mean time per call over every batch and the
   median of the batches' means, in microseconds (as OSU and nccl-tests
   report: the mean over a back-to-back loop). */
#define DIST_IMPLEMENTATION
#include "dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_batches = 11, g_iters = 20000, g_bcast = 0;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int one(dist_t *w, double *x) {
    return g_bcast ? dist_broadcast(w, x, 1, DIST_FLOAT64, 0) : dist_all_reduce(w, x, 1, DIST_FLOAT64, DIST_SUM);
}

static int rank_main(dist_t *w, void *arg) {
    double x = 1, means[101], total = 0;
    (void)arg;
    for (int i = 0; i < g_iters; i++) if (one(w, &x) != DIST_OK) return 1;
    for (int b = 0; b < g_batches; b++) {
        int64_t t0;
        if (dist_barrier(w) != DIST_OK) return 1;
        t0 = dist_time_ns();
        for (int i = 0; i < g_iters; i++) { x = 1; if (one(w, &x) != DIST_OK) return 1; }
        means[b] = (double)(dist_time_ns() - t0) / 1e3 / g_iters;
        total += means[b];
    }
    if (!g_bcast && x != (double)dist_world_size(w)) { fprintf(stderr, "wrong sum %g\n", x); return 1; }
    if (dist_rank(w) == 0) {
        qsort(means, (size_t)g_batches, sizeof means[0], cmp_double);
        printf("%.4f %.4f\n", total / g_batches, means[g_batches / 2]);
    }
    return 0;
}

int main(int argc, char **argv) {
    int n = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-b")) g_batches = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-i")) g_iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) g_bcast = !strcmp(argv[i + 1], "broadcast");
        else { fprintf(stderr, "usage: %s [-n RANKS] [-c all_reduce|broadcast] [-b BATCHES] [-i ITERS]\n", argv[0]); return 2; }
    }
    if (n < 1 || g_batches < 1 || g_batches > 101 || g_iters < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    if (dist_spawn(n, rank_main, NULL, NULL) != 0) { fprintf(stderr, "%s\n", dist_error_message(NULL)); return 1; }
    return 0;
}
