/* bench/benchutil.h - small helpers the benchmarks share: a clock, a
   comparison for medians, sizes with K/M/G suffixes, the timing method,
   iteration counts and row format of the collective sweeps (coll_bench
   and mpi_ref), and elements of every dtype read and written as doubles
   (float16 exact for the small integers the benchmarks use as inputs).
   Include after dist.h (its declarations are enough: mpi_ref uses these
   without the library).  All static inline: a program that uses a few
   gets no warnings. */
#ifndef DIST_BENCHUTIL_H
#define DIST_BENCHUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* CPU time this process has used, all threads, user and system (us). */
static inline double cpu_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Ranks a launcher starts begin on its CPU, and the scheduler spreads
   them over the others within milliseconds: a first size timed then would
   time that (2 ranks' 8-byte all_reduce over shared memory measured 6.4
   us in such runs, 0.96 in the rest).  Each benchmark runs small
   all_reduces for this long before its sweep; the ranks agree when to stop
   through the all_reduce itself. */
#define BENCH_SETTLE_US 50000.0

static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return v > 0 ? (size_t)v : 0;
}

/* ---- collective sweeps: what coll_bench and mpi_ref share ---------------

   Both time a size the way OSU's micro-benchmarks and nccl-tests do:
   warm-up calls, one barrier, then `iters` calls back to back with no
   barrier between them.  A timestamp is taken before the first call and
   after every call (now_us(): a vDSO clock read, tens of ns), so stamps
   holds iters + 1 values; the mean is (last - first) / iters and the
   per-call durations, stamps[i + 1] - stamps[i], give the median.  The two
   programs use the same iteration counts, sizes and row format so that
   bench/compare_mpi.sh can set their columns side by side. */

/* Timed calls per size: many for small sizes, whose calls take a few us
   and whose mean needs thousands of them to settle; few for large ones
   (a 64 MiB all_reduce over TCP on 4 ranks takes tens of ms).  A full
   8 B..64 MiB sweep at 4 ranks stays well under a minute. */
static inline int bench_iters(size_t bytes) {
    return bytes <= 4096 ? 5000 : bytes <= 65536 ? 2000 : bytes <= (1u << 20) ? 200 : bytes <= (4u << 20) ? 50 : 20;
}

/* Warm-up calls before the timed ones: a tenth, at least 2. */
static inline int bench_warm(int iters) { return iters / 10 > 2 ? iters / 10 : 2; }

/* Median of the iters per-call durations in stamps[0..iters] (see above).
   Overwrites stamps: stamps[i] becomes the duration of call i, sorted. */
static inline double bench_median_gap(double *stamps, int iters) {
    for (int i = 0; i < iters; i++) stamps[i] = stamps[i + 1] - stamps[i];
    qsort(stamps, (size_t)iters, sizeof *stamps, cmp_d);
    return iters % 2 ? stamps[iters / 2] : 0.5 * (stamps[iters / 2 - 1] + stamps[iters / 2]);
}

/* The sizes of a sweep into out[] (at most cap); returns how many.  LIST,
   when not NULL, is comma-separated sizes with K/M/G suffixes
   ("8,64,1K,16K"); else minb, minb x factor, ... while <= maxb. */
static inline int bench_sizes(const char *list, size_t minb, size_t maxb, int factor, size_t *out, int cap) {
    int k = 0;
    if (list) {
        char buf[1024], *tok;
        snprintf(buf, sizeof buf, "%s", list);
        for (tok = strtok(buf, ","); tok && k < cap; tok = strtok(NULL, ",")) out[k++] = parse_size(tok);
        return k;
    }
    for (size_t b = minb; b <= maxb && k < cap; b *= (size_t)factor) {
        out[k++] = b;
        if (b == 0 || factor < 2) break;
    }
    return k;
}

/* The two '#' lines that name and explain the columns of a sweep (the
   same for coll_bench and mpi_ref), and one row:

     1 bytes       size as nccl-tests counts it (see coll_bench.c)
     2 count       elements per rank (per block for the block-wise ones)
     3 type        dtype
     4 redop       reduction op (printed for every collective)
     5 mean(us)    time per call: (end - start) / iters of the back-to-back
                   loop on each rank, the largest over the ranks
     6 median(us)  median per-call duration on each rank, the largest
                   over the ranks
     7 algbw       bytes / mean (GB/s, 1 GB = 1e9 bytes)
     8 busbw       algbw x the nccl-tests factor (GB/s)
     9 #wrong      elements that differ from the reference (-1: unchecked)
    10 cpu(us)     (with -u 1 only) CPU time per call, all ranks summed */
static inline void bench_header(int cpu) {
    printf("#%11s %12s %9s %7s %11s %11s %9s %9s %7s%s\n", "bytes", "count", "type", "redop", "mean(us)", "median(us)",
           "algbw", "busbw", "#wrong", cpu ? "     cpu(us)" : "");
    printf("#%11s %12s %9s %7s %11s %11s %9s %9s %7s%s\n", "", "(per rank)", "", "", "max/ranks", "max/ranks", "GB/s",
           "GB/s", "", cpu ? "   all ranks" : "");
}

/* Prints one row; returns its busbw (GB/s). */
static inline double bench_row(size_t bytes, size_t count, const char *type, const char *op, double mean, double median,
                               double factor, long wrong, int cpu, double cpu_per_call) {
    double algbw = mean > 0 ? bytes / mean / 1e3 : 0, busbw = algbw * factor;
    printf("%12zu %12zu %9s %7s %11.2f %11.2f %9.3f %9.3f %7ld", bytes, count, type, op, mean, median, algbw, busbw, wrong);
    if (cpu) printf(" %11.2f", cpu_per_call);
    printf("\n");
    fflush(stdout);
    return busbw;
}

/* The ops as the benchmarks spell them (-r), in dist_op order. */
static const char *const op_names[DIST_OP_COUNT] = { "sum", "product", "max", "min", "avg" };

/* A dtype (-d) or op (-r) by name; -1 when there is none. */
static inline int dtype_by_name(const char *v) {
    for (int k = 0; k < DIST_DTYPE_COUNT; k++)
        if (strcmp(v, dist_dtype_name((dist_dtype)k)) == 0) return k;
    return -1;
}
static inline int op_by_name(const char *v) {
    for (int k = 0; k < DIST_OP_COUNT; k++)
        if (strcmp(v, op_names[k]) == 0) return k;
    return -1;
}

static inline uint16_t to_half(float f) {     /* exact for the small integers used here */
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) == 0) return (uint16_t)(x >> 16);
    return (uint16_t)(((x >> 16) & 0x8000) | ((((x >> 23) & 0xff) - 112) << 10) | ((x >> 13) & 0x3ff));
}

static inline float from_half(uint16_t h) {
    uint32_t x = (uint32_t)(h & 0x8000) << 16;
    float f;
    if (h & 0x7fff) x |= ((uint32_t)(((h >> 10) & 0x1f) + 112) << 23) | ((uint32_t)(h & 0x3ff) << 13);
    memcpy(&f, &x, 4);
    return f;
}

static inline void put(void *buf, size_t i, dist_dtype t, double v) {
    float f = (float)v;
    uint32_t b;
    switch (t) {
    case DIST_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case DIST_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case DIST_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DIST_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case DIST_FLOAT16: ((uint16_t *)buf)[i] = to_half(f); break;
    case DIST_BFLOAT16: memcpy(&b, &f, 4); ((uint16_t *)buf)[i] = (uint16_t)(b >> 16); break;
    case DIST_FLOAT32: ((float *)buf)[i] = f; break;
    case DIST_FLOAT64: ((double *)buf)[i] = v; break;
    default: break;
    }
}

static inline double get(const void *buf, size_t i, dist_dtype t) {
    uint32_t b;
    float f;
    switch (t) {
    case DIST_INT8: return ((const int8_t *)buf)[i];
    case DIST_UINT8: return ((const uint8_t *)buf)[i];
    case DIST_INT32: return ((const int32_t *)buf)[i];
    case DIST_INT64: return (double)((const int64_t *)buf)[i];
    case DIST_FLOAT16: return from_half(((const uint16_t *)buf)[i]);
    case DIST_BFLOAT16: b = (uint32_t)((const uint16_t *)buf)[i] << 16; memcpy(&f, &b, 4); return f;
    case DIST_FLOAT32: return ((const float *)buf)[i];
    case DIST_FLOAT64: return ((const double *)buf)[i];
    default: return 0;
    }
}

/* Runs fn as every rank: forked here (nprocs > 0, dist_spawn), else as
   the one rank this process is under a launcher (dist_init).  The exit
   status: 0 when every rank returned 0. */
static inline int bench_launch(const char *prog, int nprocs, int (*fn)(dist_t *, void *), void *arg) {
    dist_t *w;
    int rc;
    if (nprocs > 0) {
        rc = dist_spawn(nprocs, fn, arg, NULL);
        if (rc != 0 && dist_error_message(NULL)[0]) fprintf(stderr, "%s: %s\n", prog, dist_error_message(NULL));
        return rc != 0;
    }
    if (dist_init(&w, NULL) != DIST_OK) {
        fprintf(stderr, "%s: %s\n(run it under distrun, or with -N RANKS)\n", prog, dist_error_message(NULL));
        return 1;
    }
    rc = fn(w, arg);
    dist_destroy(w);
    return rc;
}

#endif
