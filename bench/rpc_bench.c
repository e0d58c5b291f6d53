/* bench/rpc_bench.c - dist_rpc.h's calls against the targets, with
   raw TCP measured by the same processes in the same run.

   Usage: rpc_bench [--reps N] [--iters N] [--threads N] [--quick]
                    [--transport tcp|auto]
          rpc_bench --profile N [--depth D | --tensor K | --remote]
                    [--threads N]
   Environment: DIST_TRANSPORT=tcp|auto runs that transport only (default:
   both, tcp first); RPC_BENCH_REPS and RPC_BENCH_ITERS as --reps/--iters.

   What is measured
   ----------------
   Each repetition forks two fresh workers (this program only waits, in
   waitpid); they report through a MAP_SHARED mapping made before the fork.
   Worker 0 ("w0") measures, worker 1 ("w1") answers.  In order:

   1. raw TCP, the reference: a plain socket pair between the two workers
      over 127.0.0.1, TCP_NODELAY on both ends, blocking read/write.  8 B
      ping-pong: warm-up, then N round trips each timed on w0 (median,
      p90): the reference of the latency target.  For information, N/2
      more with both workers pinned to one CPU, and N/2 with one on each
      of two CPUs (sched_setaffinity, restored afterwards): on a small VM
      an unpinned round trip lands in either case (a context switch, or a
      cross-CPU wake-up of tens of us).  Then 16 MiB one-way (w0 writes
      16 MiB, w1 answers 1 byte), GB/s = 16 MiB / median time: what one
      loopback stream moves now.
   2. dist_rpc_init on both (tcp://127.0.0.1, rank 0's listening socket
      made before the fork; handler threads: the library's default, 4;
      --threads N), with the transport asked for.
   3. (information) dist_send/dist_recv 8 B ping-pong between the two main
      threads on the agent's own world (another tag), while the agent is
      idle: the transport's round trip with the agent's threads present.
   4. rpc_sync("w1", "inc", int i): the handler returns args + 1 (checked).
      Warm-up, then N calls, each timed: median, p10, p90 (us); sequential
      calls/s = N / time of the whole loop.  Around the loop each worker's
      getrusage (w1's through one extra call) gives CPU time, context
      switches and minor page faults per call.
   5. rpc_async with D calls in flight (D = 1, 8, 16, 64): D futures are
      kept outstanding; the oldest is waited for (and checked), freed, and
      a new call issued in its place.  calls/s = N / time (getrusage per
      call as in 4, for D = 64).
   6. Tensor argument: rpc_sync("w1", "tlen", float32 tensor of 1 MiB or
      16 MiB); the handler returns its element count as an int (checked).
      Once with dist_value_tensor (the data copied into the value; the copy
      is part of the timed call) and once with dist_value_tensor_borrow.
      GB/s = tensor bytes / median time of one call.
   7. Remote reference: dist_remote("w1", "inc", int i, &r) (w1 runs the
      handler and keeps i + 1), then dist_rref_to_here(r, 0, &v) (checked:
      v == i + 1), then v and r freed; all of it on w0's clock, as the
      free of 4's result is (r's release is a message to w1 that w0 does
      not wait for).  Warm-up, then N pairs, each timed: median, p10, p90
      (us); pairs/s = N / time of the whole loop; getrusage per pair as
      in 4.
   Every figure reported is the median over the repetitions of the
   per-repetition figure, with the lowest and highest beside it.  The
   ratios rpc_sync / raw TCP and remote()+to_here() / raw TCP are taken
   per repetition (both from the same pair of processes, minutes apart at
   most) and their medians reported.  1 GB = 1e9 bytes.

   Targets (the issue; torch 1.13 TensorPipe measured here: 547 us,
   1,650 calls/s sequential, 2,800 calls/s with 64 in flight, 1 MiB at
   1.5 GB/s, remote()+to_here() 900 us): small rpc_sync median <= 2 x raw
   TCP's 8 B round trip; >= 50,000 calls/s with 64 in flight; 16 MiB
   tensor argument >= 2 GB/s over TCP; remote()+to_here() median <= 3 x
   raw TCP's 8 B round trip.  The exit status is 0 unless a run failed.

   --quick: 1 repetition, N = 2,000, fewer tensor calls: a smoke test.
   --profile N: one pair of workers, the chosen transport (default auto),
   only the small rpc_sync: 200 warm-up calls, then N timed (--depth D:
   rpc_async with D in flight instead; --tensor K: rpc_sync with tensor
   row K = 1..4 of item 6 instead; --remote: the remote()+to_here()
   pairs of item 7 instead), and each worker's CPU time, context switches
   and minor page faults per call (getrusage); each worker's pid on
   stderr.  For strace -c and valgrind --tool=callgrind, run twice with
   different N and subtract (bench/rpc_bench.sh profile does), so init
   and shutdown cancel out. */

#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS   15
#define NDEPTH     4
#define SMALL_T    ((size_t)1 << 20)
#define BIG_T      ((size_t)16 << 20)

static const int depths[NDEPTH] = { 1, 8, 16, 64 };
enum { TS_1M_COPY, TS_1M_BORROW, TS_16M_COPY, TS_16M_BORROW, NTENS };
static const char *const tens_name[NTENS] = { "1 MiB, dist_value_tensor (copy)", "1 MiB, dist_value_tensor_borrow",
                                              "16 MiB, dist_value_tensor (copy)", "16 MiB, dist_value_tensor_borrow" };
static const size_t tens_bytes[NTENS] = { SMALL_T, SMALL_T, BIG_T, BIG_T };

#define NRU 5
enum { PH_SYNC, PH_ASYNC64, PH_REMOTE, NPHASE };     /* getrusage phases */
static const char *const phase_name[NPHASE] = { "sequential rpc_sync, per call", "rpc_async, 64 in flight, per call",
                                                "remote()+to_here(), per pair" };
typedef struct opts {
    int reps, iters, threads, quick, profile, depth, tensor, remote;
    int warm, async_iters, t1_iters, t16_iters, raw_bw_reps;
    int ntransports;
    const char *transports[2];
} opts;

typedef struct rep_result {
    int ok;
    double raw_p50, raw_p90;          /* us, 8 B round trip */
    double raw_same_p50, raw_split_p50; /* us, pinned: both on one CPU / one on each of two */
    double raw_bw16;                  /* GB/s, 16 MiB one-way + 1 B answer */
    double p2p_p50, p2p_p90;          /* us, dist_send/recv 8 B on the agent's world */
    double rpc_p10, rpc_p50, rpc_p90; /* us, small rpc_sync */
    double ratio;                     /* rpc_p50 / raw_p50 */
    double seq_cps;                   /* calls/s */
    double rem_p10, rem_p50, rem_p90; /* us, remote()+to_here() pair */
    double rem_ratio;                 /* rem_p50 / raw_p50 */
    double rem_pps;                   /* pairs/s */
    double async_cps[NDEPTH];
    double tens_us[NTENS];            /* us, median call */
    double tens_gbps[NTENS];
    /* per call, over the timed loop: [phase: PH_*][worker][user us, sys
       us, voluntary, involuntary context switches, minor page faults] */
    double ru[NPHASE][2][NRU];
    char err[512];
} rep_result;

typedef struct shared {
    rep_result r[2][MAX_REPS];
    rep_result scratch;               /* w1's error */
} shared;

/* ---- helpers ---- */
static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* nearest-rank percentile of a sorted array */
static int64_t pct(const int64_t *s, int n, double p) {
    int i = (int)(p * (n - 1) + 0.5);
    return s[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static double median_d(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fail(rep_result *res, const char *fmt, ...) {
    va_list ap;
    if (res->err[0]) return;
    va_start(ap, fmt);
    vsnprintf(res->err, sizeof res->err, fmt, ap);
    va_end(ap);
}

static int full_write(int fd, const void *p, size_t n) {
    const char *b = (const char *)p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k; n -= (size_t)k;
    }
    return 0;
}

static int full_read(int fd, void *p, size_t n) {
    char *b = (char *)p;
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k; n -= (size_t)k;
    }
    return 0;
}

static int listen_loopback(int *port) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0) { close(s); return -1; }
    *port = ntohs(a.sin_port);
    return s;
}

static void *alloc_touched(size_t n) {
    unsigned char *p = (unsigned char *)malloc(n);
    if (p) for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + 7u);
    return p;
}

/* ---- handlers (registered on both workers) ---- */
static dist_value_t *h_inc(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t x = 0;
    if (dist_value_get_int(args, &x) != DIST_OK) { dist_rpc_call_fail(call, "inc: %s", dist_rpc_error_message()); return NULL; }
    return dist_value_int(x + 1);
}

static dist_value_t *h_tlen(dist_rpc_call_t *call, const dist_value_t *args) {
    if (dist_value_kind(args) != DIST_VALUE_TENSOR) { dist_rpc_call_fail(call, "tlen: not a tensor"); return NULL; }
    return dist_value_int((int64_t)dist_value_len(args));
}

/* This process's CPU time (us), context switches and minor page faults,
   all threads. */
static void ru_self(double out[NRU]) {
    struct rusage u;
    memset(&u, 0, sizeof u);
    getrusage(RUSAGE_SELF, &u);
    out[0] = (double)u.ru_utime.tv_sec * 1e6 + (double)u.ru_utime.tv_usec;
    out[1] = (double)u.ru_stime.tv_sec * 1e6 + (double)u.ru_stime.tv_usec;
    out[2] = (double)u.ru_nvcsw;
    out[3] = (double)u.ru_nivcsw;
    out[4] = (double)u.ru_minflt;
}

static dist_value_t *h_ru(dist_rpc_call_t *call, const dist_value_t *args) {
    double u[NRU];
    (void)call; (void)args;
    ru_self(u);
    return dist_value_pack("[fffff]", u[0], u[1], u[2], u[3], u[4]);
}

/* Both workers' rusage: [0] this one (w0), [1] w1's (one extra call). */
static int ru_both(double out[2][NRU], rep_result *res) {
    dist_value_t *ret = NULL;
    ru_self(out[0]);
    if (dist_rpc_sync("w1", "ru", NULL, &ret) != DIST_OK ||
        dist_value_unpack(ret, "[fffff]", &out[1][0], &out[1][1], &out[1][2], &out[1][3], &out[1][4]) != DIST_OK) {
        fail(res, "rpc_sync ru: %s", dist_rpc_error_message());
        dist_value_free(ret);
        return -1;
    }
    dist_value_free(ret);
    return 0;
}

/* (after - before) / n into res->ru[phase] */
static void ru_per_call(double before[2][NRU], double after[2][NRU], int n, rep_result *res, int phase) {
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < NRU; k++) res->ru[phase][w][k] = (after[w][k] - before[w][k]) / n;
}

/* ---- worker 0: the measurements ---- */
/* 8 B ping-pongs on the raw socket: w0 writes then reads, w1 echoes;
   w0 times each round trip into t[0..n-1]. */
static int raw_pp(int fd, int rank, int n, int warm, int64_t *t) {
    char b8[8] = "pingpong";
    for (int i = 0; i < warm + n; i++) {
        int64_t t0 = now_ns();
        if (rank == 0 ? (full_write(fd, b8, 8) || full_read(fd, b8, 8)) : (full_read(fd, b8, 8) || full_write(fd, b8, 8))) return -1;
        if (rank == 0 && i >= warm) t[i - warm] = now_ns() - t0;
    }
    return 0;
}

/* The first two CPUs this process may use (-1 when there are fewer). */
static void two_cpus(const cpu_set_t *allowed, int cpu[2]) {
    int k = 0;
    cpu[0] = cpu[1] = -1;
    for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, allowed)) cpu[k++] = c;
}

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

/* Both sides: unpinned ping-pongs, then (information) both processes on
   one CPU and one on each of two CPUs, then 16 MiB one-way transfers
   unpinned.  The CPU mask is restored before the RPC part. */
static int raw_side(int fd, int rank, const opts *o, rep_result *res) {
    int n = o->iters, half = o->iters / 2 > 100 ? o->iters / 2 : 100, cpu[2], rc = 0;
    int64_t *t = (int64_t *)malloc(sizeof *t * (size_t)n);
    double bw[32];
    unsigned char ack = 0, *big = (unsigned char *)alloc_touched(BIG_T);
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (!t || !big) { free(t); free(big); fail(res, "w%d: out of memory", rank); return -1; }
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_ZERO(&allowed);
    two_cpus(&allowed, cpu);
    if (raw_pp(fd, rank, n, o->warm, t)) goto broken;
    if (rank == 0) {
        qsort(t, (size_t)n, sizeof *t, cmp_i64);
        res->raw_p50 = (double)pct(t, n, 0.5) / 1e3;
        res->raw_p90 = (double)pct(t, n, 0.9) / 1e3;
    }
    for (int pl = 0; pl < 2; pl++) {          /* 0: one CPU, 1: two CPUs */
        double *p50 = pl ? &res->raw_split_p50 : &res->raw_same_p50;
        if (cpu[1] < 0) { *p50 = 0; continue; }
        pin(pl == 0 ? cpu[0] : cpu[rank]);
        rc = raw_pp(fd, rank, half, o->warm / 2, t);
        sched_setaffinity(0, sizeof allowed, &allowed);
        if (rc) goto broken;
        if (rank == 0) {
            qsort(t, (size_t)half, sizeof *t, cmp_i64);
            *p50 = (double)pct(t, half, 0.5) / 1e3;
        }
    }
    for (int i = 0; i < o->raw_bw_reps + 1; i++) {
        int64_t t0 = now_ns();
        if (rank == 0 ? (full_write(fd, big, BIG_T) || full_read(fd, &ack, 1)) : (full_read(fd, big, BIG_T) || full_write(fd, &ack, 1)))
            goto broken;
        if (i > 0) bw[i - 1] = (double)BIG_T / (double)(now_ns() - t0);
    }
    if (rank == 0) res->raw_bw16 = median_d(bw, o->raw_bw_reps);
    free(t); free(big);
    return 0;
broken:
    fail(res, "w%d: raw TCP: %s", rank, strerror(errno));
    free(t); free(big);
    return -1;
}

/* dist_send/recv ping-pong on the agent's world (its internal state: this
   file includes the implementation). */
#define P2P_TAG 77
static int p2p_pingpong(int rank, const opts *o, rep_result *res) {
    dist_t *w = dist_rpc__g.world;
    int n = o->iters / 2 > 100 ? o->iters / 2 : 100, warm = o->warm;
    int64_t *t = (int64_t *)malloc(sizeof *t * (size_t)n);
    uint64_t x = 0;
    if (!t) { fail(res, "out of memory"); return -1; }
    for (int i = 0; i < warm + n; i++) {
        int64_t t0 = now_ns();
        dist_result r = rank == 0 ? dist_send(w, &x, 8, DIST_UINT8, 1, P2P_TAG) : dist_recv(w, &x, 8, DIST_UINT8, 0, P2P_TAG);
        if (r == DIST_OK) r = rank == 0 ? dist_recv(w, &x, 8, DIST_UINT8, 1, P2P_TAG) : dist_send(w, &x, 8, DIST_UINT8, 0, P2P_TAG);
        if (r != DIST_OK) { fail(res, "w%d: dist.h ping-pong: %s", rank, dist_error_message(w)); free(t); return -1; }
        if (i >= warm) t[i - warm] = now_ns() - t0;
    }
    if (rank == 0) {
        qsort(t, (size_t)n, sizeof *t, cmp_i64);
        res->p2p_p50 = (double)pct(t, n, 0.5) / 1e3;
        res->p2p_p90 = (double)pct(t, n, 0.9) / 1e3;
    }
    free(t);
    return 0;
}

static int call_inc(int64_t i, rep_result *res) {
    dist_value_t *ret = NULL;
    int64_t y = -1;
    dist_result r = dist_rpc_sync("w1", "inc", dist_value_int(i), &ret);
    if (r != DIST_OK || dist_value_get_int(ret, &y) != DIST_OK || y != i + 1) {
        fail(res, "rpc_sync inc(%lld): %s: %s (got %lld)", (long long)i, dist_result_name(r), dist_rpc_error_message(), (long long)y);
        dist_value_free(ret);
        return -1;
    }
    dist_value_free(ret);
    return 0;
}

/* One remote()+to_here() pair: w1 keeps inc(i), w0 fetches a copy; both
   let go. */
static int remote_inc(int64_t i, rep_result *res) {
    dist_rref_t *rr = NULL;
    dist_value_t *v = NULL;
    int64_t y = -1;
    const char *step = "remote";
    dist_result r = dist_remote("w1", "inc", dist_value_int(i), &rr);
    if (r == DIST_OK) { step = "to_here"; r = dist_rref_to_here(rr, 0, &v); }
    if (r != DIST_OK || dist_value_get_int(v, &y) != DIST_OK || y != i + 1) {
        fail(res, "remote inc(%lld) + to_here: %s: %s: %s (got %lld)", (long long)i, step, dist_result_name(r), dist_rpc_error_message(),
             (long long)y);
        dist_value_free(v);
        dist_rref_free(rr);
        return -1;
    }
    dist_value_free(v);
    dist_rref_free(rr);
    return 0;
}

/* Warm-up, then n calls of `one`, each timed: p10, p50, p90 (us) and
   calls/s into q[0..3]; getrusage per call into res->ru[phase]. */
static int timed_calls(int (*one)(int64_t, rep_result *), int n, int warm, int phase, rep_result *res, double q[4]) {
    int64_t *t = (int64_t *)malloc(sizeof *t * (size_t)n), t_all;
    double ru0[2][NRU], ru1[2][NRU];
    if (!t) { fail(res, "out of memory"); return -1; }
    for (int i = 0; i < warm; i++) if (one(i, res)) { free(t); return -1; }
    if (ru_both(ru0, res)) { free(t); return -1; }
    t_all = now_ns();
    for (int i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        if (one(i, res)) { free(t); return -1; }
        t[i] = now_ns() - t0;
    }
    t_all = now_ns() - t_all;
    if (ru_both(ru1, res)) { free(t); return -1; }
    ru_per_call(ru0, ru1, n, res, phase);
    qsort(t, (size_t)n, sizeof *t, cmp_i64);
    q[0] = (double)pct(t, n, 0.1) / 1e3;
    q[1] = (double)pct(t, n, 0.5) / 1e3;
    q[2] = (double)pct(t, n, 0.9) / 1e3;
    q[3] = (double)n / ((double)t_all / 1e9);
    free(t);
    return 0;
}

static int bench_sync(int n, int warm, rep_result *res) {
    double q[4];
    if (timed_calls(call_inc, n, warm, PH_SYNC, res, q)) return -1;
    res->rpc_p10 = q[0]; res->rpc_p50 = q[1]; res->rpc_p90 = q[2]; res->seq_cps = q[3];
    return 0;
}

static int bench_remote(int n, int warm, int phase, rep_result *res) {
    double q[4];
    if (timed_calls(remote_inc, n, warm, phase, res, q)) return -1;
    res->rem_p10 = q[0]; res->rem_p50 = q[1]; res->rem_p90 = q[2]; res->rem_pps = q[3];
    return 0;
}

/* n calls with `depth` in flight (the oldest waited for first); calls/s. */
static int bench_async(int depth, int n, rep_result *res, double *cps) {
    dist_future_t *ring[64];
    int issued = 0, done = 0;
    int64_t t0 = now_ns();
    while (done < n) {
        while (issued < n && issued - done < depth) {
            if (dist_rpc_async("w1", "inc", dist_value_int(issued), &ring[issued % depth]) != DIST_OK) {
                fail(res, "rpc_async: %s", dist_rpc_error_message());
                return -1;
            }
            issued++;
        }
        {
            dist_future_t *f = ring[done % depth];
            int64_t y = -1;
            if (dist_future_wait(f, 0) != DIST_OK || dist_value_get_int(dist_future_value(f), &y) != DIST_OK || y != done + 1) {
                fail(res, "rpc_async inc(%d), %d in flight: %s (got %lld)", done, depth, dist_rpc_error_message(), (long long)y);
                return -1;
            }
            dist_future_free(f);
            done++;
        }
    }
    *cps = (double)n / ((double)(now_ns() - t0) / 1e9);
    return 0;
}

static int bench_tensor(int which, int iters, float *data, rep_result *res) {
    size_t bytes = tens_bytes[which];
    int64_t shape[1] = { (int64_t)(bytes / sizeof(float)) };
    int borrow = which == TS_1M_BORROW || which == TS_16M_BORROW, warm = 2;
    double t[512];
    if (iters > 512) iters = 512;
    for (int i = 0; i < warm + iters; i++) {
        dist_value_t *ret = NULL, *arg;
        int64_t y = -1;
        int64_t t0 = now_ns();
        dist_result r;
        arg = borrow ? dist_value_tensor_borrow(DIST_FLOAT32, 1, shape, data) : dist_value_tensor(DIST_FLOAT32, 1, shape, data);
        r = dist_rpc_sync("w1", "tlen", arg, &ret);
        if (r != DIST_OK || dist_value_get_int(ret, &y) != DIST_OK || y != shape[0]) {
            fail(res, "rpc_sync tlen(%s): %s: %s (got %lld)", tens_name[which], dist_result_name(r), dist_rpc_error_message(), (long long)y);
            dist_value_free(ret);
            return -1;
        }
        dist_value_free(ret);
        if (i >= warm) t[i - warm] = (double)(now_ns() - t0);
    }
    res->tens_us[which] = median_d(t, iters) / 1e3;
    res->tens_gbps[which] = (double)bytes / (res->tens_us[which] * 1e3);
    return 0;
}

static int rpc_init(int rank, const char *transport, int port, int ls, int threads) {
    dist_rpc_config cfg;
    char url[64], nm[8];
    memset(&cfg, 0, sizeof cfg);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    snprintf(nm, sizeof nm, "w%d", rank);
    cfg.dist.init_method = url;
    cfg.dist.world_size = 2;
    cfg.dist.rank = rank;
    cfg.dist.timeout_ms = 120000;
    cfg.dist.transport = transport;
    cfg.dist.store_listen_fd = rank == 0 ? ls + 1 : 0;
    cfg.name = nm;
    cfg.num_threads = threads;
    cfg.timeout_ms = 300000;
    dist_rpc_register("inc", h_inc);
    dist_rpc_register("tlen", h_tlen);
    dist_rpc_register("ru", h_ru);
    return dist_rpc_init(&cfg) == DIST_OK ? 0 : -1;
}

/* One worker of one repetition.  done_pipe: w0 writes a byte when it has
   measured everything; w1 waits for it before it shuts down. */
static int worker(int rank, const char *transport, int ls_raw, int raw_port, int ls_store, int store_port, const int done_pipe[2],
                  const opts *o, rep_result *res) {
    int fd, rc = 0, one = 1;
    char byte = 1;
    if (!o->profile) {
        if (rank == 0) {
            fd = accept(ls_raw, NULL, NULL);
        } else {
            struct sockaddr_in a;
            fd = socket(AF_INET, SOCK_STREAM, 0);
            memset(&a, 0, sizeof a);
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons((uint16_t)raw_port);
            if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); fd = -1; }
        }
        if (fd < 0) { fail(res, "w%d: raw TCP connection: %s", rank, strerror(errno)); return 1; }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        rc = raw_side(fd, rank, o, res);
        close(fd);
        if (rc) return 1;
    }
    close(ls_raw);
    if (rpc_init(rank, transport, store_port, ls_store, o->threads) != 0) {
        fail(res, "w%d: dist_rpc_init: %s", rank, dist_rpc_error_message());
        return 1;
    }
    if (rank == 1) {
        close(done_pipe[1]);
        if (!o->profile && p2p_pingpong(1, o, res) != 0) rc = 1;
        if (rc == 0) while (read(done_pipe[0], &byte, 1) < 0 && errno == EINTR) {}
    } else {
        close(done_pipe[0]);
        if (o->profile && o->tensor > 0) {
            float *data = (float *)alloc_touched(BIG_T);
            double ru0[2][NRU], ru1[2][NRU];
            rc = data ? bench_tensor(o->tensor - 1, 3, data, res) : -1;
            if (!rc) rc = ru_both(ru0, res);
            if (!rc) rc = bench_tensor(o->tensor - 1, o->iters, data, res);
            if (!rc) rc = ru_both(ru1, res);
            if (!rc) ru_per_call(ru0, ru1, o->iters, res, PH_SYNC);
            free(data);
        } else if (o->profile && o->remote) {
            rc = bench_remote(o->iters, o->warm, PH_SYNC, res);
        } else if (o->profile && o->depth > 0) {
            double warm_cps, ru0[2][NRU], ru1[2][NRU];
            rc = bench_async(o->depth, o->warm, res, &warm_cps);
            if (!rc) rc = ru_both(ru0, res);
            if (!rc) rc = bench_async(o->depth, o->iters, res, &res->seq_cps);
            if (!rc) rc = ru_both(ru1, res);
            if (!rc) ru_per_call(ru0, ru1, o->iters, res, PH_SYNC);
        } else if (o->profile) {
            rc = bench_sync(o->iters, o->warm, res);
        } else {
            float *data = (float *)alloc_touched(BIG_T);
            rc = p2p_pingpong(0, o, res);
            if (!rc) rc = bench_sync(o->iters, o->warm, res);
            if (!rc) res->ratio = res->rpc_p50 / res->raw_p50;
            for (int d = 0; d < NDEPTH && !rc; d++) {
                double warm_cps, ru0[2][NRU], ru1[2][NRU];
                rc = bench_async(depths[d], o->warm, res, &warm_cps);
                if (!rc) rc = ru_both(ru0, res);
                if (!rc) rc = bench_async(depths[d], o->async_iters, res, &res->async_cps[d]);
                if (!rc) rc = ru_both(ru1, res);
                if (!rc && depths[d] == 64) ru_per_call(ru0, ru1, o->async_iters, res, PH_ASYNC64);
            }
            for (int k = 0; k < NTENS && !rc && data; k++)
                rc = bench_tensor(k, tens_bytes[k] == BIG_T ? o->t16_iters : o->t1_iters, data, res);
            if (!data) { fail(res, "w0: out of memory"); rc = -1; }
            free(data);
            if (!rc) rc = bench_remote(o->iters, o->warm, PH_REMOTE, res);
            if (!rc) res->rem_ratio = res->rem_p50 / res->raw_p50;
        }
        full_write(done_pipe[1], &byte, 1);
        close(done_pipe[1]);
    }
    if (dist_rpc_shutdown(rc == 0) != DIST_OK && rc == 0) {
        fail(res, "w%d: dist_rpc_shutdown: %s", rank, dist_rpc_error_message());
        rc = 1;
    }
    return rc ? 1 : 0;
}

static int run_rep(const char *transport, const opts *o, rep_result *res, rep_result *scratch) {
    pid_t pid[2];
    int raw_port = 0, store_port = 0, ls_raw, ls_store, done_pipe[2], bad = 0;
    memset(res, 0, sizeof *res);
    memset(scratch, 0, sizeof *scratch);
    if ((ls_raw = listen_loopback(&raw_port)) < 0 || (ls_store = listen_loopback(&store_port)) < 0) {
        fail(res, "listen on 127.0.0.1: %s", strerror(errno));
        return -1;
    }
    if (pipe(done_pipe) != 0) { fail(res, "pipe: %s", strerror(errno)); return -1; }
    fflush(NULL);
    for (int rank = 0; rank < 2; rank++) {
        pid[rank] = fork();
        if (pid[rank] < 0) {
            fail(res, "fork: %s", strerror(errno));
            if (rank == 1) { kill(pid[0], SIGKILL); waitpid(pid[0], NULL, 0); }
            return -1;
        }
        if (pid[rank] == 0) {
            rep_result *mine = rank == 0 ? res : scratch;
            int code;
            if (o->profile) fprintf(stderr, "rpc_bench: w%d is pid %d\n", rank, (int)getpid());
            alarm(o->profile ? 3600 : 900);     /* a hung run must not hang the benchmark */
            if (rank == 1) close(ls_store);
            code = worker(rank, transport, ls_raw, raw_port, ls_store, store_port, done_pipe, o, mine);
            if (code == 0 && rank == 0) res->ok = 1;
            fflush(NULL);
            _exit(code);
        }
    }
    close(ls_raw); close(ls_store); close(done_pipe[0]); close(done_pipe[1]);
    for (int rank = 0; rank < 2; rank++) {
        int st = 0;
        while (waitpid(pid[rank], &st, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad = 1;
            if (!res->err[0] && scratch->err[0]) memcpy(res->err, scratch->err, sizeof res->err);
            if (!res->err[0]) {
                if (WIFSIGNALED(st)) fail(res, "w%d killed by signal %d%s", rank, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (time limit)" : "");
                else fail(res, "w%d exited with %d", rank, WEXITSTATUS(st));
            }
        }
    }
    if (!bad && !res->ok) fail(res, "w0 reported nothing");
    return bad || !res->ok ? -1 : 0;
}

/* ---- report ---- */
typedef struct stat3 { double med, lo, hi; } stat3;

static stat3 over_reps(const rep_result *r, int n, size_t off) {
    double v[MAX_REPS];
    stat3 s;
    for (int i = 0; i < n; i++) v[i] = *(const double *)(const void *)((const char *)&r[i] + off);
    s.med = median_d(v, n);
    s.lo = v[0]; s.hi = v[n - 1];
    return s;
}
#define OVER(r, n, field) over_reps((r), (n), offsetof(rep_result, field))

static void line(const char *metric, stat3 s, const char *fmt, const char *target, int judged, int pass) {
    char v[32], lo[32], hi[32], range[72];
    snprintf(v, sizeof v, fmt, s.med);
    snprintf(lo, sizeof lo, fmt, s.lo);
    snprintf(hi, sizeof hi, fmt, s.hi);
    snprintf(range, sizeof range, "%s - %s", lo, hi);
    printf("%-46s %11s  %-23s %-13s %s\n", metric, v, range, target ? target : "", judged ? (pass ? "met" : "MISSED") : "");
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--reps N (1..%d)] [--iters N] [--threads N] [--quick] [--transport tcp|auto]\n"
                    "       [--profile N [--depth D | --tensor K | --remote]]\n", argv0, MAX_REPS);
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

int main(int argc, char **argv) {
    opts o;
    shared *sh;
    const char *tenv = getenv("DIST_TRANSPORT");
    int failed = 0;
    memset(&o, 0, sizeof o);
    o.reps = env_int("RPC_BENCH_REPS", -1);
    o.iters = env_int("RPC_BENCH_ITERS", -1);
    if (tenv && *tenv) { o.transports[0] = tenv; o.ntransports = 1; }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) o.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) o.iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) o.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) o.profile = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) o.depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tensor") && i + 1 < argc) o.tensor = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--remote")) o.remote = 1;
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc) { o.transports[0] = argv[++i]; o.ntransports = 1; }
        else { usage(argv[0]); return 1; }
    }
    for (int k = 0; k < o.ntransports; k++)
        if (strcmp(o.transports[k], "tcp") && strcmp(o.transports[k], "auto")) { usage(argv[0]); return 1; }
    if (o.ntransports == 0) {
        if (o.profile) { o.transports[0] = "auto"; o.ntransports = 1; }
        else { o.transports[0] = "tcp"; o.transports[1] = "auto"; o.ntransports = 2; }
    }
    if (o.profile) { o.reps = 1; o.iters = o.profile; }
    if (o.reps < 0) o.reps = o.quick ? 1 : 5;
    if (o.iters < 0) o.iters = o.quick ? 2000 : 20000;
    if (o.reps < 1 || o.reps > MAX_REPS || o.iters < 10 || o.profile < 0 || o.threads < 0 || o.depth < 0 || o.depth > 64 || o.tensor < 0 || o.tensor > NTENS ||
        (o.remote && (!o.profile || o.depth || o.tensor))) { usage(argv[0]); return 1; }
    o.warm = o.profile ? 200 : o.iters / 10 > 100 ? o.iters / 10 : 100;
    o.async_iters = o.iters;
    o.t1_iters = o.iters / 100 > 10 ? o.iters / 100 : 10;
    o.t16_iters = o.iters / 700 > 5 ? o.iters / 700 : 5;
    o.raw_bw_reps = o.quick ? 3 : 10;
    signal(SIGPIPE, SIG_IGN);

    sh = (shared *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }

    if (o.profile) {
        if (run_rep(o.transports[0], &o, &sh->r[0][0], &sh->scratch) != 0) { fprintf(stderr, "rpc_bench: %s\n", sh->r[0][0].err); return 1; }
        const rep_result *q = &sh->r[0][0];
        if (o.tensor)
            printf("rpc_bench --profile: %d rpc_sync with a tensor of %s over %s, median %.0f us, %.2f GB/s\n", o.iters, tens_name[o.tensor - 1],
                   o.transports[0], q->tens_us[o.tensor - 1], q->tens_gbps[o.tensor - 1]);
        else if (o.remote)
            printf("rpc_bench --profile: %d remote()+to_here() pairs over %s, median %.2f us, p90 %.2f us, %.0f pairs/s\n", o.iters, o.transports[0],
                   q->rem_p50, q->rem_p90, q->rem_pps);
        else if (o.depth)
            printf("rpc_bench --profile: %d rpc_async over %s, %d in flight, %.0f calls/s\n", o.iters, o.transports[0], o.depth, q->seq_cps);
        else
            printf("rpc_bench --profile: %d rpc_sync over %s, median %.2f us, p90 %.2f us, %.0f calls/s\n", o.iters, o.transports[0], q->rpc_p50,
                   q->rpc_p90, q->seq_cps);
        for (int w = 0; w < 2; w++)
            printf("  w%d per %s: CPU %.1f us user + %.1f us system; context switches %.2f voluntary + %.2f involuntary; %.1f minor faults\n",
                   w, o.remote ? "pair" : "call", q->ru[0][w][0], q->ru[0][w][1], q->ru[0][w][2], q->ru[0][w][3], q->ru[0][w][4]);
        return 0;
    }

    printf("rpc_bench: dist_rpc.h, dist.h %s, 2 workers over 127.0.0.1, %d repetition(s)%s in fresh processes, handler threads %d%s\n",
           dist_version(), o.reps, o.quick ? " (--quick)" : "", o.threads ? o.threads : 4, o.threads ? "" : " (default)");
    printf("per repetition: %d+%d small calls (and raw/dist.h ping-pongs), %d calls per in-flight depth, %d x 1 MiB, %d x 16 MiB per tensor row\n",
           o.warm, o.iters, o.async_iters, o.t1_iters, o.t16_iters);
    fflush(stdout);
    for (int tr = 0; tr < o.ntransports; tr++) {
        const char *t = o.transports[tr];
        rep_result *r = sh->r[tr];
        stat3 s;
        char buf[96];
        for (int i = 0; i < o.reps; i++) {
            if (run_rep(t, &o, &r[i], &sh->scratch) != 0) {
                fprintf(stderr, "rpc_bench: %s, repetition %d: %s\n", t, i + 1, r[i].err);
                failed = 1;
                break;
            }
            fprintf(stderr, "rpc_bench: %s: repetition %d of %d done\n", t, i + 1, o.reps);
        }
        if (failed) break;
        printf("\n== DIST_TRANSPORT=%s (%s) ==\n", t, strcmp(t, "tcp") ? "shared memory between the two workers" : "TCP over loopback");
        printf("%-46s %11s  %-23s %-13s %s\n", "metric (median over repetitions)", "value", "[lowest - highest]", "target", "");
        line("raw TCP 8 B round trip, median (us)", OVER(r, o.reps, raw_p50), "%.2f", NULL, 0, 0);
        line("raw TCP 8 B round trip, p90 (us)", OVER(r, o.reps, raw_p90), "%.2f", NULL, 0, 0);
        line("  (pinned, both on one CPU: median, us)", OVER(r, o.reps, raw_same_p50), "%.2f", NULL, 0, 0);
        line("  (pinned, one on each of two CPUs: median, us)", OVER(r, o.reps, raw_split_p50), "%.2f", NULL, 0, 0);
        line("raw TCP 16 MiB one-way (GB/s)", OVER(r, o.reps, raw_bw16), "%.2f", NULL, 0, 0);
        line("dist.h send/recv 8 B round trip, median (us)", OVER(r, o.reps, p2p_p50), "%.2f", NULL, 0, 0);
        line("dist.h send/recv 8 B round trip, p90 (us)", OVER(r, o.reps, p2p_p90), "%.2f", NULL, 0, 0);
        line("rpc_sync small int, p10 (us)", OVER(r, o.reps, rpc_p10), "%.2f", NULL, 0, 0);
        line("rpc_sync small int, median (us)", OVER(r, o.reps, rpc_p50), "%.2f", NULL, 0, 0);
        line("rpc_sync small int, p90 (us)", OVER(r, o.reps, rpc_p90), "%.2f", NULL, 0, 0);
        s = OVER(r, o.reps, ratio);
        line("rpc_sync median / raw TCP median", s, "%.2fx", "<= 2.00x", 1, s.med <= 2.0);
        line("sequential rpc_sync (calls/s)", OVER(r, o.reps, seq_cps), "%.0f", NULL, 0, 0);
        for (int d = 0; d < NDEPTH; d++) {
            snprintf(buf, sizeof buf, "rpc_async, %d in flight (calls/s)", depths[d]);
            s = over_reps(r, o.reps, offsetof(rep_result, async_cps) + sizeof(double) * (size_t)d);
            line(buf, s, "%.0f", depths[d] == 64 ? ">= 50000" : NULL, depths[d] == 64, s.med >= 50000);
        }
        for (int k = 0; k < NTENS; k++) {
            int big = tens_bytes[k] == BIG_T, judged = big && !strcmp(t, "tcp");
            snprintf(buf, sizeof buf, "tensor %s (GB/s)", tens_name[k]);
            s = over_reps(r, o.reps, offsetof(rep_result, tens_gbps) + sizeof(double) * (size_t)k);
            line(buf, s, "%.2f", big ? (judged ? ">= 2 GB/s" : "(>= 2, tcp)") : NULL, judged, s.med >= 2.0);
        }
        for (int k = 0; k < NTENS; k++) {
            snprintf(buf, sizeof buf, "  one call, %s (us)", tens_name[k]);
            line(buf, over_reps(r, o.reps, offsetof(rep_result, tens_us) + sizeof(double) * (size_t)k), "%.0f", NULL, 0, 0);
        }
        line("remote()+to_here() small int, p10 (us)", OVER(r, o.reps, rem_p10), "%.2f", NULL, 0, 0);
        line("remote()+to_here() small int, median (us)", OVER(r, o.reps, rem_p50), "%.2f", NULL, 0, 0);
        line("remote()+to_here() small int, p90 (us)", OVER(r, o.reps, rem_p90), "%.2f", NULL, 0, 0);
        s = OVER(r, o.reps, rem_ratio);
        line("remote()+to_here() median / raw TCP median", s, "%.2fx", "<= 3.00x", 1, s.med <= 3.0);
        line("sequential remote()+to_here() (pairs/s)", OVER(r, o.reps, rem_pps), "%.0f", NULL, 0, 0);
        for (int ph = 0; ph < NPHASE; ph++) {
            printf("%s (median over repetitions):\n", phase_name[ph]);
            for (int w = 0; w < 2; w++) {
                double v[NRU];
                for (int k = 0; k < NRU; k++)
                    v[k] = over_reps(r, o.reps, offsetof(rep_result, ru) + sizeof(double) * (size_t)((ph * 2 + w) * NRU + k)).med;
                printf("  w%d (%s): CPU %.1f us user + %.1f us system; context switches %.2f voluntary + %.2f involuntary; %.2f minor faults\n",
                       w, w ? "callee" : "caller", v[0], v[1], v[2], v[3], v[4]);
            }
        }
        printf("per repetition: raw TCP median (one CPU, two CPUs) / rpc_sync median / remote()+to_here() median (us), calls/s at 64 in flight, "
               "16 MiB borrow GB/s:\n");
        for (int i = 0; i < o.reps; i++)
            printf("  %d: %.1f (%.1f, %.1f) / %.1f / %.1f, %.0f, %.2f\n", i + 1, r[i].raw_p50, r[i].raw_same_p50, r[i].raw_split_p50, r[i].rpc_p50,
                   r[i].rem_p50, r[i].async_cps[NDEPTH - 1], r[i].tens_gbps[TS_16M_BORROW]);
        fflush(stdout);
    }
    munmap(sh, sizeof *sh);
    return failed;
}
