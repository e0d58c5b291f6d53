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
#include <strings.h>
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
   ("8,64,1K,16K"); else minb, then x factor a step while <= maxb, or
   + step a step when factor is below 2 (nccl-tests' -f and -i). */
static inline int bench_sizes(const char *list, size_t minb, size_t maxb, int factor, size_t step, size_t *out, int cap) {
    int k = 0;
    if (list) {
        char buf[1024], *tok;
        snprintf(buf, sizeof buf, "%s", list);
        for (tok = strtok(buf, ","); tok && k < cap; tok = strtok(NULL, ",")) out[k++] = parse_size(tok);
        return k;
    }
    for (size_t b = minb; b <= maxb && k < cap;) {
        out[k++] = b;
        if (factor >= 2 ? b == 0 : step == 0) break;
        b = factor >= 2 ? b * (size_t)factor : b + step;
    }
    return k;
}

/* ---- the collectives as nccl-tests names and measures them --------------

   coll_bench and mpi_ref run the same ones with the same sizes and print
   the same rows.  A collective's buffers hold count elements (1 block) or
   count x world size (BENCH_N blocks); "size" is the larger of the two in
   bytes, as nccl-tests prints it.  In place, the send and receive buffers
   are one, offset as nccl-tests offsets them: the gathers send from their
   own block of the output (send offset rank x count), the scatters
   receive into their own block of the input (receive offset rank x
   count).  busbw = algbw x bus factor: 1, (n-1)/n or 2(n-1)/n (the field
   is that multiple of (n-1)/n, 0 for 1), nccl-tests' factors. */
enum { BENCH_BROADCAST, BENCH_REDUCE, BENCH_ALL_REDUCE, BENCH_GATHER, BENCH_ALL_GATHER, BENCH_SCATTER,
       BENCH_REDUCE_SCATTER, BENCH_ALL_TO_ALL, BENCH_SENDRECV, BENCH_BARRIER, BENCH_COLL_COUNT };
#define BENCH_N (-1)          /* blocks: one per rank */

typedef struct bench_coll {
    const char *name;         /* --coll NAME */
    const char *nccl;         /* nccl-tests' program without "_perf"; NULL: none */
    int rooted, reduces;      /* uses -r, uses -o */
    int send_blocks, recv_blocks;
    int bus;                  /* busbw factor: bus x (n-1)/n, 1 when 0 */
} bench_coll;

static inline const bench_coll *bench_coll_info(int c) {
    static const bench_coll table[BENCH_COLL_COUNT] = {
        { "broadcast",      "broadcast",      1, 0, 1,       1,       0 },
        { "reduce",         "reduce",         1, 1, 1,       1,       0 },
        { "all_reduce",     "all_reduce",     0, 1, 1,       1,       2 },
        { "gather",         "gather",         1, 0, 1,       BENCH_N, 1 },
        { "all_gather",     "all_gather",     0, 0, 1,       BENCH_N, 1 },
        { "scatter",        "scatter",        1, 0, BENCH_N, 1,       1 },
        { "reduce_scatter", "reduce_scatter", 0, 1, BENCH_N, 1,       1 },
        { "all_to_all",     "alltoall",       0, 0, BENCH_N, BENCH_N, 1 },
        { "sendrecv",       "sendrecv",       0, 0, 1,       1,       0 },
        { "barrier",        NULL,             0, 0, 0,       0,       0 },
    };
    return &table[c];
}

/* The collective called NAME (its --coll name, or nccl-tests' program name
   with or without "_perf": "alltoall_perf"); -1 when none. */
static inline int bench_coll_by_name(const char *name) {
    size_t len = strlen(name);
    if (len > 5 && strcmp(name + len - 5, "_perf") == 0) len -= 5;
    for (int c = 0; c < BENCH_COLL_COUNT; c++) {
        const bench_coll *k = bench_coll_info(c);
        if ((strlen(k->name) == len && strncmp(name, k->name, len) == 0) ||
            (k->nccl && strlen(k->nccl) == len && strncmp(name, k->nccl, len) == 0)) return c;
    }
    return -1;
}

static inline size_t bench_blocks(int blocks, int n) { return blocks == BENCH_N ? (size_t)n : (size_t)blocks; }

static inline double bench_bus_factor(const bench_coll *k, int n) {
    return k->bus ? k->bus * (double)(n - 1) / n : 1.0;
}

/* In-place offsets into the one buffer, in elements (see above). */
static inline size_t bench_inplace_send_offset(const bench_coll *k, int rank, size_t count) {
    return k->send_blocks == 1 && k->recv_blocks == BENCH_N ? (size_t)rank * count : 0;
}
static inline size_t bench_inplace_recv_offset(const bench_coll *k, int rank, size_t count) {
    return k->send_blocks == BENCH_N && k->recv_blocks == 1 ? (size_t)rank * count : 0;
}

/* -a: how a time is made one from every rank's, as nccl-tests' -a. */
enum { BENCH_AVG_RANK0, BENCH_AVG_MEAN, BENCH_AVG_MIN, BENCH_AVG_MAX };
static inline const char *bench_average_name(int a) {
    static const char *const names[] = { "rank 0's", "the mean over the ranks", "the least over the ranks",
                                         "the largest over the ranks" };
    return a >= 0 && a <= 3 ? names[a] : "?";
}

/* The '#' lines that name the columns (nccl-tests' layout, a median
   beside each mean), and a row in three calls: bench_row_start, then
   bench_row_half for out-of-place and for in-place (or bench_row_na),
   then bench_row_end.  Per placement:
     time      mean time per call: (end - start) / iters of the back-to-back
               loop on each rank, made one over the ranks as -a says (us)
     median    the median per-call duration, over the ranks the same way
     algbw     size / time (GB/s, 1 GB = 1e9 bytes)
     busbw     algbw x the bus factor (GB/s)
     #wrong    elements unlike the reference, all ranks; N/A unchecked
     cpu       (-u 1) CPU time per call, all ranks together (us) */
static inline void bench_header(int cpu) {
    const char *c2 = cpu ? "       cpu" : "", *c3 = cpu ? "      (us)" : "";
    printf("#%*s%*s\n", 73 + (cpu ? 5 : 0), "out-of-place", 43 + (cpu ? 10 : 0), "in-place");
    printf("#%11s %13s %8s %6s %5s %9s %9s %7s %7s %6s%s %9s %9s %7s %7s %6s%s\n", "size", "count", "type", "redop", "root",
           "time", "median", "algbw", "busbw", "#wrong", c2, "time", "median", "algbw", "busbw", "#wrong", c2);
    printf("#%11s %13s %8s %6s %5s %9s %9s %7s %7s %6s%s %9s %9s %7s %7s %6s%s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(us)", "(GB/s)", "(GB/s)", "", c3, "(us)", "(us)", "(GB/s)", "(GB/s)", "", c3);
}

static inline void bench_row_start(size_t bytes, size_t count, const char *type, const char *op, int root) {
    printf("%12zu %13zu %8s %6s %5d", bytes, count, type, op, root);
}

/* One placement's columns; returns its busbw (GB/s).  wrong < 0: N/A. */
static inline double bench_row_half(size_t bytes, double mean, double median, double factor, long wrong, int cpu,
                                    double cpu_per_call) {
    double algbw = mean > 0 ? bytes / mean / 1e3 : 0, busbw = algbw * factor;
    printf(mean < 1e5 ? " %9.2f" : " %9.0f", mean);       /* nccl-tests too drops the decimals of long times */
    printf(median < 1e5 ? " %9.2f" : " %9.0f", median);
    printf(" %7.2f %7.2f", algbw, busbw);
    if (wrong < 0) printf(" %6s", "N/A");
    else printf(" %6ld", wrong);
    if (cpu) printf(" %9.2f", cpu_per_call);
    return busbw;
}

/* A placement the collective has not got (sendrecv in place). */
static inline void bench_row_na(int cpu) {
    printf(" %9s %9s %7s %7s %6s%s", "N/A", "N/A", "N/A", "N/A", "N/A", cpu ? "       N/A" : "");
}

static inline void bench_row_end(void) {
    printf("\n");
    fflush(stdout);
}

/* nccl-tests' footer: every wrong element of the run, the mean busbw of
   every row's two placements. */
static inline void bench_footer(long wrong, double busbw_sum, int busbw_count) {
    printf("# %-20s : %ld %s\n", "Out of bounds values", wrong, wrong ? "FAILED" : "OK");
    printf("# %-20s : %g \n", "Avg bus bandwidth", busbw_count ? busbw_sum / busbw_count : 0);
    printf("#\n");
    fflush(stdout);
}

/* The dtypes as nccl-tests prints them (the type column), in dist_dtype
   order; -d takes these, dist.h's names and NCCL's (ncclFloat, ...). */
static inline const char *bench_type_name(dist_dtype t) {
    static const char *const names[] = { "int8", "uint8", "int32", "int64", "half", "bfloat16", "float", "double" };
    return (int)t >= 0 && (int)t < 8 ? names[t] : "?";
}

static inline int bench_type_by_name(const char *v) {
    static const struct { const char *name; dist_dtype t; } alias[] = {
        { "char", DIST_INT8 }, { "int", DIST_INT32 }, { "float16", DIST_FLOAT16 }, { "fp16", DIST_FLOAT16 },
        { "bf16", DIST_BFLOAT16 }, { "float32", DIST_FLOAT32 }, { "fp32", DIST_FLOAT32 }, { "float64", DIST_FLOAT64 },
        { "fp64", DIST_FLOAT64 },
    };
    if (strncasecmp(v, "nccl", 4) == 0) v += 4;
    for (int k = 0; k < DIST_DTYPE_COUNT; k++)
        if (strcasecmp(v, bench_type_name((dist_dtype)k)) == 0) return k;
    for (size_t k = 0; k < sizeof alias / sizeof alias[0]; k++)
        if (strcasecmp(v, alias[k].name) == 0) return (int)alias[k].t;
    return -1;
}

/* The ops as nccl-tests prints them (the redop column), in dist_op order;
   -o takes these, "product" and NCCL's (ncclSum, ...). */
static inline const char *bench_op_name(dist_op op) {
    static const char *const names[] = { "sum", "prod", "max", "min", "avg" };
    return (int)op >= 0 && (int)op < 5 ? names[op] : "?";
}

static inline int bench_op_by_name(const char *v) {
    if (strncasecmp(v, "nccl", 4) == 0) v += 4;
    if (strcasecmp(v, "product") == 0) return DIST_PRODUCT;
    for (int k = 0; k < DIST_OP_COUNT; k++)
        if (strcasecmp(v, bench_op_name((dist_op)k)) == 0) return k;
    return -1;
}

/* The ops as cuda_bench spells them (its -r), in dist_op order. */
static const char *const op_names[DIST_OP_COUNT] = { "sum", "product", "max", "min", "avg" };

/* A dtype or op by dist.h's name (cuda_bench's -d, -r); -1 when none. */
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
