/* bench/p2p.c - point-to-point performance of dist.h against raw TCP.

   Usage: p2p [--quick] [--csv] [--rounds N] [--sockbuf BYTES] [--strict]
              [--transport tcp|auto]

   What is measured
   ----------------
   Two processes on this host talk over 127.0.0.1, once through a plain TCP
   socket (the reference) and once through dist.h (two ranks, tcp:// init).
   Both sides of both transports run the same test sequence:

   1. Ping-pong latency, 1 B and 8 B: rank 0 sends n bytes, rank 1 answers
      with n bytes.  1,000 warm-up round trips, then 20,000 timed ones; every
      round trip is timed separately with clock_gettime(CLOCK_MONOTONIC) on
      rank 0, and the run reports the p10 / median / p90 of those times.
   2. One-way bandwidth, 64 MiB: rank 1 gets ready to receive and sends a
      1-byte "go"; rank 0 takes the time, sends 64 MiB, and stops the clock
      when rank 1's 1-byte ack arrives.  GB/s = 64 MiB / that time (1 GB =
      1e9 bytes).  1 warm-up transfer, then 10 timed; the run reports the
      median.
        raw TCP: the sender write()s 1 MiB at a time, the receiver read()s
                 as much as the socket has (up to what is still missing);
        dist.h:  one dist_send of 64 MiB; rank 1 posts dist_irecv of the
                 whole message before sending "go" and then dist_waits, so
                 the data always meets a posted receive (the case the
                 library reads straight into the user's buffer).
      Every buffer is allocated and written once before any timing, so page
      faults are not measured.
   3. Sweep: ping-pong of the full message in each direction for sizes
      8 B, 16 B, 64 B, ... 64 MiB (powers of 4).  Iterations per size:
      512 MiB / size, clamped to [10, 2000], after a tenth of that as warm-up.
      Reported per size: the median round trip, and the payload rate
      2 * size / median round trip.

   Placement
   ---------
   On a small VM the round trip depends mostly on where the two processes
   run: on two CPUs every message pays a cross-CPU wake-up (tens of us
   here), on one CPU it is a plain context switch.  Left to the scheduler
   ("unpinned"), a run lands in either case.  So besides the unpinned runs
   (all tests above; the targets are judged on these), every round repeats
   the 8 B ping-pong and the 64 MiB transfer with both processes pinned to
   one CPU ("one CPU", which shows the library's own software overhead) and
   with one process on each of two CPUs ("two CPUs").  Pinning is
   sched_setaffinity in each process before it connects, so the library's
   progress thread inherits it.

   Noise control
   -------------
   The machine is small and shared, so the comparison is repeated for
   several rounds (5; --rounds) and the two transports are interleaved:
   in round 1 each placement runs raw TCP then dist.h, in round 2 dist.h
   then raw TCP, and so on.  Each run happens in two fresh processes forked
   by this program (the parent only waits, blocked in waitpid), which
   report their numbers through a MAP_SHARED|MAP_ANONYMOUS mapping made
   before the fork.  Every reported figure is the median, over the rounds,
   of the per-round figure described above (itself a median, or p10/p90).

   Socket settings
   ---------------
   Both ends of the reference socket get TCP_NODELAY.  dist.h sets
   TCP_NODELAY (and SO_KEEPALIVE) and leaves SO_SNDBUF/SO_RCVBUF to the
   kernel (auto-tuning), so by default the reference does the same;
   --sockbuf BYTES sets both buffers on the reference socket instead (which
   on Linux turns auto-tuning off).  One informational row also measures
   the reference's 64 MiB one-way rate with fixed 4 MiB buffers.

   Targets
   -------
   8 B ping-pong median round trip of dist.h <= 1.3 x raw TCP's, and the
   64 MiB one-way rate of dist.h >= 80 % of raw TCP's single stream, judged
   unpinned; the pinned rows show the same ratios for information.  The
   exit status is 0 unless a run failed (or, with --strict, an unpinned
   target failed: exit status 2).

   --transport auto: dist.h talks over shared memory (its default for ranks
   on one host) instead of TCP (--transport tcp, the default here).  The
   targets are then the shared-memory ones: 8 B ping-pong median <= 2 us,
   and 64 MiB one-way >= 40 % of the single-core memcpy rate, which the
   parent measures in every round (memcpy of 64 MiB between two buffers
   touched beforehand, median of 5).

   --quick: 1 round, 2,000 ping-pongs, 3 bandwidth transfers, 32 MiB per
   sweep size clamped to [3, 200] iterations: a smoke test, not a result.
   --csv:   one CSV table instead of the text tables. */

#define DIST_IMPLEMENTATION
#include "dist.h"

#include <errno.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 15
#define NSIZES     13
#define BIG        ((size_t)64 << 20)
#define BW_CHUNK   ((size_t)1 << 20)
#define INFO_BUF   (4 << 20)

enum { TAG_PP = 1, TAG_GO = 2, TAG_DATA = 3, TAG_ACK = 4 };

typedef struct opts {
    int quick, csv, rounds, sockbuf, strict, shm;
    int lat_iters, lat_warm, bw_reps;
    size_t sweep_budget;
    int sweep_min, sweep_max;
    int cpu[2], ncpu;         /* the first two CPUs this process may use */
} opts;

/* Where the two processes of a run may execute. */
enum { PL_FREE, PL_SAME, PL_SPLIT, NPLACE };

typedef struct lat { double p10, p50, p90; } lat;  /* microseconds */

typedef struct run_result {
    int ok;
    lat lat1, lat8;
    double bw;                /* GB/s, median */
    double bw_fixedbuf;       /* raw TCP only: 4 MiB SO_SNDBUF/SO_RCVBUF */
    double sweep_rtt[NSIZES]; /* us, median */
    char err[512];
} run_result;

typedef struct shared {
    run_result ref[NPLACE][MAX_ROUNDS], lib[NPLACE][MAX_ROUNDS];
    run_result scratch;       /* rank 1's error message */
    double memcpy_gbps[MAX_ROUNDS];
} shared;

static size_t sweep_size(int i) { return i == 0 ? 8 : (size_t)1 << (2 * (i + 1)); }

/* ---- small helpers ---- */

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

static int64_t median_i64(int64_t *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_i64);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void fail(run_result *res, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->err, sizeof res->err, fmt, ap);
    va_end(ap);
}

static void *alloc_touched(size_t n) {
    unsigned char *p = (unsigned char *)malloc(n);
    if (p) memset(p, 0x5a, n);
    return p;
}

static int sweep_iters(const opts *o, size_t size) {
    size_t it = o->sweep_budget / size;
    if (it < (size_t)o->sweep_min) it = (size_t)o->sweep_min;
    if (it > (size_t)o->sweep_max) it = (size_t)o->sweep_max;
    return (int)it;
}

/* ---- transports ---- */

typedef struct xport {
    int fd;                 /* raw TCP */
    dist_t *w;              /* dist.h */
    dist_req_t *req;
    int peer;
} xport;

typedef struct ops {
    int (*send)(xport *x, const void *buf, size_t n, int tag);
    int (*recv)(xport *x, void *buf, size_t n, int tag);
    int (*bulk_send)(xport *x, const void *buf, size_t n);
    int (*bulk_post)(xport *x, void *buf, size_t n);
    int (*bulk_wait)(xport *x, void *buf, size_t n);
    const char *(*why)(xport *x);
} ops;

static int raw_write_all(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w; n -= (size_t)w;
    }
    return 0;
}

static int raw_read_all(int fd, void *buf, size_t n) {
    char *p = (char *)buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0) { if (errno == EINTR) continue; return -1; }
        if (r == 0) { errno = ECONNRESET; return -1; }
        p += r; n -= (size_t)r;
    }
    return 0;
}

static int raw_send(xport *x, const void *buf, size_t n, int tag) { (void)tag; return raw_write_all(x->fd, buf, n); }
static int raw_recv(xport *x, void *buf, size_t n, int tag) { (void)tag; return raw_read_all(x->fd, buf, n); }
static int raw_bulk_send(xport *x, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    for (size_t off = 0; off < n; off += BW_CHUNK)
        if (raw_write_all(x->fd, p + off, n - off < BW_CHUNK ? n - off : BW_CHUNK) != 0) return -1;
    return 0;
}
static int raw_bulk_post(xport *x, void *buf, size_t n) { (void)x; (void)buf; (void)n; return 0; }
static int raw_bulk_wait(xport *x, void *buf, size_t n) { return raw_read_all(x->fd, buf, n); }
static const char *raw_why(xport *x) { (void)x; return strerror(errno); }

static const ops raw_ops = { raw_send, raw_recv, raw_bulk_send, raw_bulk_post, raw_bulk_wait, raw_why };

static int lib_send(xport *x, const void *buf, size_t n, int tag) { return dist_send(x->w, buf, n, DIST_UINT8, x->peer, tag) == DIST_OK ? 0 : -1; }
static int lib_recv(xport *x, void *buf, size_t n, int tag) { return dist_recv(x->w, buf, n, DIST_UINT8, x->peer, tag) == DIST_OK ? 0 : -1; }
static int lib_bulk_send(xport *x, const void *buf, size_t n) { return lib_send(x, buf, n, TAG_DATA); }
static int lib_bulk_post(xport *x, void *buf, size_t n) {
    return dist_irecv(x->w, buf, n, DIST_UINT8, x->peer, TAG_DATA, &x->req) == DIST_OK ? 0 : -1;
}
static int lib_bulk_wait(xport *x, void *buf, size_t n) {
    dist_req_t *r = x->req;
    (void)buf; (void)n;
    x->req = NULL;
    return dist_wait(r) == DIST_OK ? 0 : -1;
}
static const char *lib_why(xport *x) { return dist_error_message(x->w); }

static const ops lib_ops = { lib_send, lib_recv, lib_bulk_send, lib_bulk_post, lib_bulk_wait, lib_why };

/* ---- the test sequence, run by both ranks of both transports ---- */

/* Ping-pong of n bytes; on rank 0 fills times[0..iters) with round trips in ns. */
static int pingpong(const ops *op, xport *x, int rank, unsigned char *buf, size_t n, int warm, int iters, int64_t *times) {
    for (int i = 0; i < warm + iters; i++) {
        if (rank == 0) {
            int64_t t0 = now_ns();
            if (op->send(x, buf, n, TAG_PP) != 0 || op->recv(x, buf, n, TAG_PP) != 0) return -1;
            if (i >= warm) times[i - warm] = now_ns() - t0;
        } else {
            if (op->recv(x, buf, n, TAG_PP) != 0 || op->send(x, buf, n, TAG_PP) != 0) return -1;
        }
    }
    return 0;
}

static int latency(const ops *op, xport *x, int rank, unsigned char *buf, size_t n, const opts *o, int64_t *times, lat *out) {
    if (pingpong(op, x, rank, buf, n, o->lat_warm, o->lat_iters, times) != 0) return -1;
    if (rank == 0) {
        qsort(times, (size_t)o->lat_iters, sizeof *times, cmp_i64);
        out->p10 = pct(times, o->lat_iters, 0.10) / 1e3;
        out->p50 = pct(times, o->lat_iters, 0.50) / 1e3;
        out->p90 = pct(times, o->lat_iters, 0.90) / 1e3;
    }
    return 0;
}

/* One-way transfers of `n` bytes; returns the median GB/s on rank 0. */
static int bandwidth(const ops *op, xport *x, int rank, unsigned char *buf, size_t n, const opts *o, double *gbps) {
    int64_t t[64];
    unsigned char one = 1;
    int reps = o->bw_reps;
    for (int i = 0; i < reps + 1; i++) {
        if (rank == 0) {
            int64_t t0;
            if (op->recv(x, &one, 1, TAG_GO) != 0) return -1;
            t0 = now_ns();
            if (op->bulk_send(x, buf, n) != 0 || op->recv(x, &one, 1, TAG_ACK) != 0) return -1;
            if (i > 0) t[i - 1] = now_ns() - t0;
        } else {
            if (op->bulk_post(x, buf, n) != 0 || op->send(x, &one, 1, TAG_GO) != 0) return -1;
            if (op->bulk_wait(x, buf, n) != 0 || op->send(x, &one, 1, TAG_ACK) != 0) return -1;
        }
    }
    if (rank == 0) *gbps = (double)n / (double)median_i64(t, reps);
    return 0;
}

/* Everything one rank does on a connected transport.  Rank 0 fills `res`.
   Without `full`, only the two targets' tests (8 B ping-pong, 64 MiB). */
static int run_tests(const ops *op, xport *x, int rank, int full, const opts *o, run_result *res) {
    unsigned char *buf = (unsigned char *)alloc_touched(BIG);
    int maxit = o->lat_iters > o->sweep_max ? o->lat_iters : o->sweep_max;
    int64_t *times = (int64_t *)malloc(sizeof *times * (size_t)maxit);
    int rc = -1;
    const char *what = "";
    if (!buf || !times) { fail(res, "rank %d: out of memory", rank); goto out; }
    memset(times, 0, sizeof *times * (size_t)maxit);
    what = "1 B ping-pong";
    if (full && latency(op, x, rank, buf, 1, o, times, &res->lat1) != 0) goto err;
    what = "8 B ping-pong";
    if (latency(op, x, rank, buf, 8, o, times, &res->lat8) != 0) goto err;
    what = "64 MiB one-way";
    if (bandwidth(op, x, rank, buf, BIG, o, &res->bw) != 0) goto err;
    what = "sweep";
    for (int s = 0; full && s < NSIZES; s++) {
        size_t n = sweep_size(s);
        int it = sweep_iters(o, n), warm = it / 10 > 0 ? it / 10 : 1;
        if (pingpong(op, x, rank, buf, n, warm, it, times) != 0) goto err;
        if (rank == 0) res->sweep_rtt[s] = (double)median_i64(times, it) / 1e3;
    }
    rc = 0;
    goto out;
err:
    fail(res, "rank %d: %s: %s", rank, what, op->why(x));
out:
    free(buf);
    free(times);
    return rc;
}

/* ---- processes ---- */

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

static void tune(int fd, int sockbuf) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sockbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf);
    }
}

/* Rank 0 accepts, rank 1 connects.  Buffer sizes are set before the
   connection exists (on the listener for rank 0, whose accepted socket
   inherits them), so the window scale follows them. */
static int raw_connect(int ls, int port, int rank, int sockbuf) {
    if (rank == 0) {
        int fd;
        if (sockbuf > 0) tune(ls, sockbuf);
        fd = accept(ls, NULL, NULL);
        if (fd >= 0) tune(fd, sockbuf);
        return fd;
    } else {
        struct sockaddr_in a;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        tune(fd, sockbuf);
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
        return fd;
    }
}

static int child_raw(int rank, int full, int ls, int port, const opts *o, run_result *res) {
    xport x;
    unsigned char *buf;
    int rc;
    memset(&x, 0, sizeof x);
    if (rank == 1) close(ls);
    x.fd = raw_connect(ls, port, rank, o->sockbuf);
    if (x.fd < 0) { fail(res, "rank %d: connect: %s", rank, strerror(errno)); return 1; }
    if (run_tests(&raw_ops, &x, rank, full, o, res) != 0) return 1;
    close(x.fd);
    if (!full) return 0;
    /* informational: the one-way rate with fixed 4 MiB buffers, on a second connection */
    x.fd = raw_connect(ls, port, rank, INFO_BUF);
    if (rank == 0) close(ls);
    if (x.fd < 0) { fail(res, "rank %d: connect: %s", rank, strerror(errno)); return 1; }
    if ((buf = (unsigned char *)alloc_touched(BIG)) == NULL) { fail(res, "rank %d: out of memory", rank); return 1; }
    rc = bandwidth(&raw_ops, &x, rank, buf, BIG, o, &res->bw_fixedbuf);
    if (rc != 0) fail(res, "rank %d: 64 MiB one-way, fixed buffers: %s", rank, strerror(errno));
    free(buf);
    close(x.fd);
    return rc == 0 ? 0 : 1;
}

/* Single-core memcpy of 64 MiB between two touched buffers: GB/s, median of 5. */
static double memcpy_rate(void) {
    unsigned char *a = (unsigned char *)alloc_touched(BIG), *b = (unsigned char *)alloc_touched(BIG);
    double v[5];
    if (!a || !b) { free(a); free(b); return 0; }
    memcpy(b, a, BIG);
    for (int i = 0; i < 5; i++) {
        int64_t t0 = now_ns();
        memcpy(b, a, BIG);
        v[i] = (double)BIG / (double)(now_ns() - t0);
        a[i] = b[BIG - 1 - (size_t)i];           /* keep the copies observable */
    }
    free(a); free(b);
    return median_d(v, 5);
}

static int child_lib(int rank, int full, int ls, int port, const opts *o, run_result *res) {
    dist_config cfg;
    dist_t *w = NULL;
    xport x;
    char url[64];
    int rc;
    memset(&cfg, 0, sizeof cfg);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    cfg.init_method = url;
    cfg.world_size = 2;
    cfg.rank = rank;
    cfg.timeout_ms = 120000;
    cfg.transport = o->shm ? "auto" : "tcp";
    if (rank == 0) cfg.store_listen_fd = ls + 1; else close(ls);   /* rank 0 hosts the store on it */
    if (dist_init(&w, &cfg) != DIST_OK) {
        fail(res, "rank %d: dist_init: %s", rank, dist_error_message(NULL));
        return 1;
    }
    memset(&x, 0, sizeof x);
    x.w = w;
    x.peer = 1 - rank;
    rc = run_tests(&lib_ops, &x, rank, full, o, res);
    if (dist_destroy(w) != DIST_OK && rc == 0) {
        fail(res, "rank %d: dist_destroy: %s", rank, dist_error_message(NULL));
        rc = -1;
    }
    return rc == 0 ? 0 : 1;
}

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

/* Runs one transport in two fresh processes; rank 0's numbers land in *res,
   rank 1's error (if any) in *scratch. */
static int run_pair(int lib, int place, const opts *o, run_result *res, run_result *scratch) {
    pid_t pid[2];
    int port = 0, ls, bad = 0;
    memset(res, 0, sizeof *res);
    memset(scratch, 0, sizeof *scratch);
    if ((ls = listen_loopback(&port)) < 0) { fail(res, "listen on 127.0.0.1: %s", strerror(errno)); return -1; }
    fflush(NULL);
    for (int rank = 0; rank < 2; rank++) {
        pid[rank] = fork();
        if (pid[rank] < 0) {
            fail(res, "fork: %s", strerror(errno));
            if (rank == 1) { kill(pid[0], SIGKILL); waitpid(pid[0], NULL, 0); }
            close(ls);
            return -1;
        }
        if (pid[rank] == 0) {
            run_result *mine = rank == 0 ? res : scratch;
            int code = 1;
            alarm(o->quick ? 120 : 600);   /* a hung run must not hang the benchmark */
            if (place != PL_FREE && pin(place == PL_SAME ? o->cpu[0] : o->cpu[rank]) != 0)
                fail(mine, "rank %d: sched_setaffinity: %s", rank, strerror(errno));
            else
                code = lib ? child_lib(rank, place == PL_FREE, ls, port, o, mine)
                           : child_raw(rank, place == PL_FREE, ls, port, o, mine);
            if (code == 0 && rank == 0) res->ok = 1;
            fflush(NULL);
            _exit(code);
        }
    }
    close(ls);
    for (int rank = 0; rank < 2; rank++) {
        int st = 0;
        while (waitpid(pid[rank], &st, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad = 1;
            if (!res->err[0] && scratch->err[0]) memcpy(res->err, scratch->err, sizeof res->err);
            if (!res->err[0]) {
                if (WIFSIGNALED(st)) fail(res, "rank %d killed by signal %d%s", rank, WTERMSIG(st),
                                          WTERMSIG(st) == SIGALRM ? " (time limit)" : "");
                else fail(res, "rank %d exited with %d", rank, WEXITSTATUS(st));
            }
        }
    }
    return bad || !res->ok ? -1 : 0;
}

/* ---- report ---- */

typedef struct summary {
    lat lat1, lat8;
    double bw, bw_fixedbuf, sweep_rtt[NSIZES];
} summary;

/* the median over rounds of one double found at `off` in each run_result */
static double over_rounds(const run_result *r, int n, size_t off) {
    double v[MAX_ROUNDS];
    for (int i = 0; i < n; i++) v[i] = *(const double *)(const void *)((const char *)&r[i] + off);
    return median_d(v, n);
}

static void summarize(const run_result *r, int n, summary *s) {
#define M(field) s->field = over_rounds(r, n, offsetof(run_result, field))
    M(lat1.p10); M(lat1.p50); M(lat1.p90);
    M(lat8.p10); M(lat8.p50); M(lat8.p90);
    M(bw); M(bw_fixedbuf);
    for (int i = 0; i < NSIZES; i++) M(sweep_rtt[i]);
#undef M
}

static const char *size_name(size_t n, char *buf, size_t cap) {
    if (n >= ((size_t)1 << 20)) snprintf(buf, cap, "%zu MiB", n >> 20);
    else if (n >= 1024) snprintf(buf, cap, "%zu KiB", n >> 10);
    else snprintf(buf, cap, "%zu B", n);
    return buf;
}

static const char *const place_key[NPLACE] = { "unpinned", "one_cpu", "two_cpus" };

/* a row of the text table: ratio = dist / raw; target "<= x" or ">= x" */
static void row(const char *metric, double raw, double dist, const char *target, int pass) {
    printf("%-38s %10.2f %10.2f %7.2fx", metric, raw, dist, dist / raw);
    if (target) printf(" %9s %6s", target, pass ? "PASS" : "FAIL");
    printf("\n");
}

static void csv(const char *metric, const char *place, size_t size, const char *unit, double raw, double dist,
                const char *target, int pass) {
    printf("%s,%s,%zu,%s,%.4f,%.4f,%.4f,%s,%s\n", metric, place, size, unit, raw, dist, dist / raw,
           target ? target : "", target ? (pass ? "PASS" : "FAIL") : "");
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--quick] [--csv] [--rounds N (1..%d)] [--sockbuf BYTES] [--strict] [--transport tcp|auto]\n",
            argv0, MAX_ROUNDS);
}

int main(int argc, char **argv) {
    opts o;
    shared *sh;
    summary ref[NPLACE], lib[NPLACE];
    int lat_pass[NPLACE], bw_pass[NPLACE], nplace;
    cpu_set_t allowed;
    char sz[32], label[96];
    double memcpy_med;
    memset(&o, 0, sizeof o);
    o.rounds = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(argv[i], "--csv")) o.csv = 1;
        else if (!strcmp(argv[i], "--strict")) o.strict = 1;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) o.rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sockbuf") && i + 1 < argc) o.sockbuf = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc && (!strcmp(argv[i + 1], "tcp") || !strcmp(argv[i + 1], "auto")))
            o.shm = !strcmp(argv[++i], "auto");
        else { usage(argv[0]); return 1; }
    }
    if (o.quick) {
        o.lat_iters = 2000; o.lat_warm = 200; o.bw_reps = 3;
        o.sweep_budget = (size_t)32 << 20; o.sweep_min = 3; o.sweep_max = 200;
        if (o.rounds < 0) o.rounds = 1;
    } else {
        o.lat_iters = 20000; o.lat_warm = 1000; o.bw_reps = 10;
        o.sweep_budget = (size_t)512 << 20; o.sweep_min = 10; o.sweep_max = 2000;
        if (o.rounds < 0) o.rounds = 5;
    }
    if (o.rounds < 1 || o.rounds > MAX_ROUNDS || o.sockbuf < 0) { usage(argv[0]); return 1; }
    signal(SIGPIPE, SIG_IGN);

    /* the CPUs for the pinned runs: the first two this process may use */
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int c = 0; c < CPU_SETSIZE && o.ncpu < 2; c++)
            if (CPU_ISSET(c, &allowed)) o.cpu[o.ncpu++] = c;
    nplace = o.ncpu >= 2 ? NPLACE : o.ncpu == 1 ? PL_SPLIT : PL_SAME;

    sh = (shared *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }

    if (!o.csv) {
        printf("p2p: dist.h %s over %s vs raw TCP over 127.0.0.1, %d round(s)%s; %d+%d ping-pongs, %d+1 x 64 MiB one-way\n",
               dist_version(), o.shm ? "shared memory" : "TCP", o.rounds, o.quick ? " (--quick)" : "", o.lat_warm, o.lat_iters, o.bw_reps);
        if (o.sockbuf) printf("raw TCP socket buffers: SO_SNDBUF/SO_RCVBUF %d (--sockbuf)\n", o.sockbuf);
        else printf("raw TCP socket buffers: kernel auto-tuning (as dist.h)\n");
        fflush(stdout);
    }
    for (int r = 0; r < o.rounds; r++) {
        for (int pl = 0; pl < nplace; pl++) {
            for (int k = 0; k < 2; k++) {
                int is_lib = (r % 2 == 0) ? k : 1 - k;   /* raw,dist / dist,raw / ... */
                run_result *res = is_lib ? &sh->lib[pl][r] : &sh->ref[pl][r];
                if (run_pair(is_lib, pl, &o, res, &sh->scratch) != 0) {
                    fprintf(stderr, "p2p: round %d, %s, %s: %s\n", r + 1, place_key[pl], is_lib ? "dist.h" : "raw TCP", res->err);
                    return 1;
                }
            }
        }
        if (o.shm) sh->memcpy_gbps[r] = memcpy_rate();
        if (!o.csv) { fprintf(stderr, "p2p: round %d of %d done\n", r + 1, o.rounds); }
    }
    memcpy_med = o.shm ? median_d(sh->memcpy_gbps, o.rounds) : 0;
    for (int pl = 0; pl < nplace; pl++) {
        summarize(sh->ref[pl], o.rounds, &ref[pl]);
        summarize(sh->lib[pl], o.rounds, &lib[pl]);
        lat_pass[pl] = o.shm ? lib[pl].lat8.p50 <= 2.0 : lib[pl].lat8.p50 <= 1.3 * ref[pl].lat8.p50;
        bw_pass[pl] = o.shm ? lib[pl].bw >= 0.4 * memcpy_med : lib[pl].bw >= 0.8 * ref[pl].bw;
    }

    if (o.csv) {
        const summary *R = &ref[PL_FREE], *L = &lib[PL_FREE];
        printf("metric,placement,size_bytes,unit,raw_tcp,dist,ratio,target,result\n");
        csv("pingpong_rtt_p10", "unpinned", 1, "us", R->lat1.p10, L->lat1.p10, NULL, 0);
        csv("pingpong_rtt_median", "unpinned", 1, "us", R->lat1.p50, L->lat1.p50, NULL, 0);
        csv("pingpong_rtt_p90", "unpinned", 1, "us", R->lat1.p90, L->lat1.p90, NULL, 0);
        csv("pingpong_rtt_p10", "unpinned", 8, "us", R->lat8.p10, L->lat8.p10, NULL, 0);
        csv("pingpong_rtt_median", "unpinned", 8, "us", R->lat8.p50, L->lat8.p50, o.shm ? "<=2us" : "<=1.30", lat_pass[PL_FREE]);
        csv("pingpong_rtt_p90", "unpinned", 8, "us", R->lat8.p90, L->lat8.p90, NULL, 0);
        csv("oneway_bw", "unpinned", BIG, "GB/s", R->bw, L->bw, o.shm ? NULL : ">=0.80", o.shm ? 0 : bw_pass[PL_FREE]);
        if (o.shm) printf("oneway_bw_vs_memcpy,unpinned,%zu,GB/s,%.4f,%.4f,%.4f,>=0.40,%s\n", BIG, memcpy_med, L->bw, L->bw / memcpy_med,
                          bw_pass[PL_FREE] ? "PASS" : "FAIL");
        printf("oneway_bw_raw_fixed_4MiB_buffers,unpinned,%zu,GB/s,%.4f,,,,\n", BIG, R->bw_fixedbuf);
        for (int pl = PL_SAME; pl < nplace; pl++) {
            csv("pingpong_rtt_p10", place_key[pl], 8, "us", ref[pl].lat8.p10, lib[pl].lat8.p10, NULL, 0);
            csv("pingpong_rtt_median", place_key[pl], 8, "us", ref[pl].lat8.p50, lib[pl].lat8.p50, "<=1.30(info)", lat_pass[pl]);
            csv("pingpong_rtt_p90", place_key[pl], 8, "us", ref[pl].lat8.p90, lib[pl].lat8.p90, NULL, 0);
            csv("oneway_bw", place_key[pl], BIG, "GB/s", ref[pl].bw, lib[pl].bw, ">=0.80(info)", bw_pass[pl]);
        }
        for (int i = 0; i < NSIZES; i++)
            csv("sweep_rtt_median", "unpinned", sweep_size(i), "us", R->sweep_rtt[i], L->sweep_rtt[i], NULL, 0);
        for (int i = 0; i < NSIZES; i++) {
            double n2 = 2.0 * (double)sweep_size(i);
            csv("sweep_rate", "unpinned", sweep_size(i), "GB/s", n2 / (R->sweep_rtt[i] * 1e3), n2 / (L->sweep_rtt[i] * 1e3), NULL, 0);
        }
    } else {
        const summary *R = &ref[PL_FREE], *L = &lib[PL_FREE];
        printf("\n%-38s %10s %10s %8s %9s %6s\n", "metric (median of rounds)", "raw TCP", "dist", "ratio", "target", "result");
        printf("unpinned (the targets):\n");
        row("  1 B ping-pong RTT p10 (us)", R->lat1.p10, L->lat1.p10, NULL, 0);
        row("  1 B ping-pong RTT median (us)", R->lat1.p50, L->lat1.p50, NULL, 0);
        row("  1 B ping-pong RTT p90 (us)", R->lat1.p90, L->lat1.p90, NULL, 0);
        row("  8 B ping-pong RTT p10 (us)", R->lat8.p10, L->lat8.p10, NULL, 0);
        row("  8 B ping-pong RTT median (us)", R->lat8.p50, L->lat8.p50, o.shm ? "<= 2 us" : "<= 1.30x", lat_pass[PL_FREE]);
        row("  8 B ping-pong RTT p90 (us)", R->lat8.p90, L->lat8.p90, NULL, 0);
        if (o.shm) {
            row("  64 MiB one-way (GB/s)", R->bw, L->bw, NULL, 0);
            printf("%-38s %10.2f %10.2f %7.2fx %9s %6s\n", "  64 MiB one-way vs memcpy (GB/s)", memcpy_med, L->bw, L->bw / memcpy_med,
                   ">= 0.40x", bw_pass[PL_FREE] ? "PASS" : "FAIL");
        } else {
            row("  64 MiB one-way (GB/s)", R->bw, L->bw, ">= 0.80x", bw_pass[PL_FREE]);
        }
        printf("%-38s %10.2f\n", "  raw, fixed 4 MiB SNDBUF/RCVBUF (GB/s)", R->bw_fixedbuf);
        for (int pl = PL_SAME; pl < nplace; pl++) {
            if (pl == PL_SAME) printf("pinned, both processes on CPU %d (information):\n", o.cpu[0]);
            else printf("pinned, one process on each of CPUs %d and %d (information):\n", o.cpu[0], o.cpu[1]);
            row("  8 B ping-pong RTT p10 (us)", ref[pl].lat8.p10, lib[pl].lat8.p10, NULL, 0);
            row("  8 B ping-pong RTT median (us)", ref[pl].lat8.p50, lib[pl].lat8.p50, o.shm ? "<= 2 us" : "<= 1.30x", lat_pass[pl]);
            row("  8 B ping-pong RTT p90 (us)", ref[pl].lat8.p90, lib[pl].lat8.p90, NULL, 0);
            row("  64 MiB one-way (GB/s)", ref[pl].bw, lib[pl].bw, o.shm ? NULL : ">= 0.80x", bw_pass[pl]);
        }
        printf("\nper round, 8 B median RTT (us) / 64 MiB one-way (GB/s), raw TCP -> dist:\n");
        for (int r = 0; r < o.rounds; r++) {
            printf("  round %d (%s first):", r + 1, r % 2 ? "dist" : "raw");
            for (int pl = 0; pl < nplace; pl++)
                printf("  %s %.1f/%.2f -> %.1f/%.2f", place_key[pl], sh->ref[pl][r].lat8.p50, sh->ref[pl][r].bw,
                       sh->lib[pl][r].lat8.p50, sh->lib[pl][r].bw);
            printf("\n");
        }
        printf("\nping-pong sweep, unpinned (median round trip; rate = 2 x size / RTT; ratio = dist RTT / raw RTT):\n");
        printf("%10s %12s %10s %12s %10s %8s\n", "size", "raw RTT us", "raw GB/s", "dist RTT us", "dist GB/s", "ratio");
        for (int i = 0; i < NSIZES; i++) {
            size_t n = sweep_size(i);
            double rb = 2.0 * (double)n / (R->sweep_rtt[i] * 1e3), lb = 2.0 * (double)n / (L->sweep_rtt[i] * 1e3);
            printf("%10s %12.2f %10.4f %12.2f %10.4f %7.2fx\n", size_name(n, sz, sizeof sz), R->sweep_rtt[i], rb,
                   L->sweep_rtt[i], lb, L->sweep_rtt[i] / R->sweep_rtt[i]);
        }
        snprintf(label, sizeof label, "%s", lat_pass[PL_FREE] && bw_pass[PL_FREE] ? "both targets met" : "target(s) missed");
        printf("\nverdict (unpinned): %s\n", label);
    }
    munmap(sh, sizeof *sh);
    return (o.strict && !(lat_pass[PL_FREE] && bw_pass[PL_FREE])) ? 2 : 0;
}
