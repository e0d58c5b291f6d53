// TIMEOUT: 90
// ALONE: its link rates and round trips (tc) are measured against bounds
// WINDOWS: no, it runs ranks in Linux network namespaces (ip netns, tc)
/* test_netns.c - four "hosts" on one machine: ranks in their own network
   namespaces, joined by veth pairs to a bridge, talking over their own
   addresses.

   Needs root and iproute2 (`ip`); without them, or when the kernel will not
   make namespaces, veths or a bridge, it exits 77 (skipped) with a one-line
   notice why.  CI runs it as root.

   Network   namespaces dnetns-PID-0..3 (one per rank) and dnetns-PID-h (the
             hub: a bridge br0 with ports v0..v3); rank R's end of its veth
             is eth0 = 10.A.B.(R+1)/24 (A.B from the pid; the namespaces see
             nothing else, so no address can collide with the host's), lo up.
             Rendezvous tcp://10.A.B.1:PORT.  Namespaces left by earlier runs
             whose process is gone are removed first; ours are removed at
             exit, on SIGTERM/SIGINT/SIGHUP and at the overall deadline
             (atexit + signal handlers; ranks die with the parent through
             PR_SET_PDEATHSIG).
   Ranks     forked, one per rank, each setns() into its namespace, arms
             alarm(), and calls dist_init itself (cfg.transport "auto").
             Results come back through a MAP_SHARED table.

   Phases (one job each; every check prints "ok", "FAIL" or "SKIP"):
   control   2 ranks in ONE namespace: they do log "shared memory with 1
             rank(s)", so the logger hook works and its silence below means
             something (SKIP, not FAIL, where neither logs it: shared
             memory may be unavailable on the machine).
   clean     4 namespaces over the kernel bridge: the mesh addresses the
             ranks published are their own veth addresses (10.A.B.R+1);
             no rank logs "shared memory with" (the namespaces differ, so the
             same-host check must pick TCP); their connections keep the
             namespaces' congestion control (set to cubic, or bbr, by the
             test), while the control pair's use Reno; all_reduce float32 sum (1 ..
             4 Mi elements = 16 MiB; integer-valued, so the sum is exact),
             float32 max, int64 sum (up to 16 MiB), broadcast, all_gather,
             reduce_scatter, all_to_all, point-to-point (ring of
             isend/irecv, all pairs, DIST_ANY_SOURCE) - exact against a
             serial reference computed in the test; barrier (no rank leaves
             before rank 3, 300 ms late, entered: CLOCK_MONOTONIC stamps);
             the 16 MiB all_reduce moved at least 0.9 x 16 MiB each way
             through every rank's eth0 (/proc/net/dev, read outside two
             barriers); small-message round trip (reported).  The impaired
             phase uses cfg.socket_ifname = "eth0" for the mesh address,
             this one the default (the address that reached rank 0).
   impaired  the same checks (smaller sizes) with 5 ms delay and 1 % loss on
             every link.  First choice: `tc qdisc ... netem delay 5ms loss 1%`
             on every eth0.  Where the kernel has no sch_netem, the bridge's
             ports are detached and a user-space switch (a forked process
             with an AF_PACKET socket per hub port) forwards the frames
             instead, holding each one 5 ms and dropping 1 % at random (the
             same thing netem does on egress).  Either way GSO is turned off
             on eth0 (gso_max_segs 1), so a loss is one segment, as on a real
             wire.  Checked on top: the measured round trip is >= 2 x 5 ms,
             frames were dropped, and TCP retransmitted.  If neither way
             works, every impaired check prints SKIP with the reason and the
             summary line says so; nothing unapplied is reported as passed.
             (tbf alone, without delay or loss, would prove nothing here, so
             it is not used.)  DIST_NETNS_NO_SWITCH=1 leaves the switch out
             (to see that path where netem is missing too).
   linkdown  4 ranks (cfg.timeout_ms 3 s) loop a 16 MiB all_reduce over the
             bridge again; once each finished one, rank 2's bridge port is
             set down (`ip link set dev v2 down` in the hub), with at least
             one rank inside an all_reduce.  Every rank must return
             DIST_ERR_TIMEOUT or DIST_ERR_PEER_LOST within timeout + 2 s of
             that, with a message naming a rank, and dist_destroy must
             return within timeout + 2 s; no rank may hang (alarm(), and the
             parent's own deadline).  Each rank's result, message and times
             are printed.

   Time: about 15 s (clean 1 s, impaired 3-8 s, linkdown 7 s); 45 s under
   ThreadSanitizer with DIST_TIMEOUT_SCALE=3.

   Exit status: 1 if anything that ran failed; else 0.  If the impairment
   could not be applied at all, the impaired checks are SKIPped (listed in
   the last line) and the exit status is still 0 when everything else
   passed: the clean and link-down phases are the bulk of the test, and a
   77 would hide them.  All limits scale with DIST_TIMEOUT_SCALE. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define NR 4                 /* ranks (and rank namespaces) */
#define NS_PREFIX "dnetns-"
#define NETNS_DIR "/var/run/netns"
#define DELAY_MS 5
#define LOSS_PCT 1
#define LD_TIMEOUT_MS 3000   /* cfg.timeout_ms of the link-down job */
#define LD_RANK 2            /* whose link goes down */

/* ---- checks ------------------------------------------------------------- */
#define CHECK_LIST(X)                                                                        \
    X(C_INIT, "dist_init over the veths; the mesh addresses are the ranks' own veth addresses") \
    X(C_TRANSPORT, "transport between the namespaces is TCP (no rank logged \"shared memory with\")") \
    X(C_CC, "connections between namespaces keep the namespace's congestion control (not the same-host Reno)") \
    X(C_RTT, "round trip of an 8-byte message (20 ping-pongs, rank 0 <-> rank 1)")          \
    X(C_AR_F32, "all_reduce float32 sum, exact")                                             \
    X(C_AR_MAX, "all_reduce float32 max, exact")                                             \
    X(C_AR_I64, "all_reduce int64 sum, exact")                                               \
    X(C_WIRE, "the largest all_reduce crossed every rank's eth0")                            \
    X(C_BCAST, "broadcast from rank 2, exact")                                               \
    X(C_ALLGATHER, "all_gather int32, exact")                                                \
    X(C_RS, "reduce_scatter float32 sum, exact")                                             \
    X(C_A2A, "all_to_all int32, exact")                                                      \
    X(C_BARRIER, "barrier: no rank leaves before the last one (rank 3, 300 ms late) entered")            \
    X(C_P2P, "point-to-point: isend/irecv ring, all pairs, DIST_ANY_SOURCE, exact")        \
    X(C_DESTROY, "dist_destroy returns DIST_OK")
DEFINE_CHECKS(CHECK_LIST);

enum { PH_CONTROL, PH_CLEAN, PH_IMPAIRED, PH_LINKDOWN, NPHASE };

typedef struct {
    int pass, fail, claimed;
    char why[500];
    double secs[NR];
    char info[300];
} check_t;

typedef struct {
    char fail[600];          /* the rank's first failure outside a check */
    int done;                /* got to the end */
    /* transport */
    int log_lines, shm_lines, shm_n;
    char shm_text[300];
    /* impaired: TCP retransmissions during the phase */
    long long retrans;
    /* linkdown */
    int iters;               /* all_reduces completed */
    int64_t call_ns, err_ns; /* when the failing call started, when it returned */
    int res;
    char msg[500];
    int64_t destroy_start_ns, destroy_end_ns;
    int destroy_res;
    char destroy_msg[600];
} rank_t;

typedef struct {
    /* switch */
    volatile int ready, stop;
    char err[300];
    long long frames_in, dropped, forwarded, sent_frames, send_errors, overflow, oversize;
    long long hold_min_us, hold_max_us, hold_sum_us, held;
} switch_t;

typedef struct {
    check_t chk[NPHASE][NCHECKS];
    int64_t barrier_enter_ns[NPHASE];   /* when rank 3 entered the late barrier */
    rank_t r[NPHASE][NR];
    switch_t sw;
} shared_t;
static shared_t *sh;
static int g_phase;

DEFINE_CHECK_FNS(sh->chk[g_phase])
DEFINE_FAIL_AT(NR, NULL, sh->r[g_phase][rank].fail)

/* ---- the parent's state (for cleanup from a signal handler) ----------- */
static pid_t g_parent;
static char g_ns[NR + 1][64];          /* rank namespaces 0..NR-1, hub NR */
static int g_ns_made[NR + 1];
static volatile pid_t g_kids[NR + 2];  /* ranks and the switch */
static char g_subnet[32];              /* "10.A.B" */
static char g_cc[32];                  /* the rank namespaces' default congestion control ("" if not set) */
static char g_skip_why[400];

static void kill_kids(void) {
    for (int i = 0; i < NR + 2; i++)
        if (g_kids[i] > 0) kill(g_kids[i], SIGKILL);
}

/* What `ip netns del` does, with syscalls only (usable in a signal handler). */
static void ns_remove(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", NETNS_DIR, name);
    umount2(path, MNT_DETACH);
    unlink(path);
}

static void cleanup(void) {
    if (getpid() != g_parent) return;
    kill_kids();
    for (int i = 0; i < NR + 2; i++)
        if (g_kids[i] > 0) { waitpid(g_kids[i], NULL, 0); g_kids[i] = 0; }
    for (int i = 0; i <= NR; i++)
        if (g_ns_made[i]) { ns_remove(g_ns[i]); g_ns_made[i] = 0; }
}

static void on_signal(int sig) {
    static const char msg[] = "test_netns: stopped by a signal or the overall deadline; namespaces removed\n";
    if (getpid() != g_parent) _exit(128 + sig);
    kill_kids();
    for (int i = 0; i <= NR; i++)
        if (g_ns_made[i]) ns_remove(g_ns[i]);
    if (write(1, msg, sizeof msg - 1) < 0) { }
    _exit(sig == SIGALRM ? 124 : 128 + sig);
}

/* Removes namespaces of earlier runs whose process is gone. */
static void remove_leftovers(void) {
    DIR *dir = opendir(NETNS_DIR);
    struct dirent *de;
    if (!dir) return;
    while ((de = readdir(dir)) != NULL) {
        long pid;
        char *end;
        if (strncmp(de->d_name, NS_PREFIX, strlen(NS_PREFIX)) != 0) continue;
        pid = strtol(de->d_name + strlen(NS_PREFIX), &end, 10);
        if (pid <= 0 || *end != '-') continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        printf("note: removing namespace %s left by an earlier run (pid %ld is gone)\n", de->d_name, pid);
        ns_remove(de->d_name);
    }
    closedir(dir);
}

/* Runs a shell command line; its output (stdout and stderr, trimmed) in
   out.  Returns the exit status (-1: could not run). */
static int run_cmd(char *out, size_t cap, const char *fmt, ...) {
    char cmd[1024], line[512];
    va_list ap;
    size_t used = 0;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (out && cap) out[0] = 0;
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    while (fgets(line, sizeof line, p)) {
        size_t k = strlen(line);
        if (out && used + k < cap) { memcpy(out + used, line, k + 1); used += k; }
    }
    int st = pclose(p);
    if (out) while (used > 0 && (out[used - 1] == '\n' || out[used - 1] == ' ')) out[--used] = 0;
    if (out) for (size_t i = 0; i < used; i++) if (out[i] == '\n') out[i] = ' ';
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* A command that must work; on failure prints it and returns -1. */
static int must(const char *what, const char *fmt, ...) {
    char cmd[1024], out[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = run_cmd(out, sizeof out, "%s", cmd);
    if (rc != 0) {
        printf("%s: `%s` exited with %d: %s\n", what, cmd, rc, out[0] ? out : "(no output)");
        return -1;
    }
    return 0;
}

/* ---- rank side ---------------------------------------------------------- */
static int enter_ns(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", NETNS_DIR, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = setns(fd, CLONE_NEWNET);
    close(fd);
    return r;
}

/* A child of the parent: dies with it, default signal handling. */
static void child_start(void) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != g_parent) _exit(99);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    alarm(0);
}

/* The logger: counts every line, passes the rest to shm_log_fn. */
static atomic_int g_log_lines;
static void count_log_fn(dist_log_level level, const char *message, void *user) {
    atomic_fetch_add(&g_log_lines, 1);
    shm_log_fn(level, message, user);
}

/* eth0's byte counters, from this namespace's /proc/net/dev. */
static int eth0_bytes(unsigned long long *rx, unsigned long long *tx) {
    char line[512];
    FILE *f = fopen("/proc/net/dev", "r");
    int found = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':'), *name = line;
        unsigned long long v[9];
        if (!c) continue;
        *c = 0;
        while (*name == ' ') name++;
        if (strcmp(name, "eth0") != 0) continue;
        if (sscanf(c + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7], &v[8]) == 9) {
            *rx = v[0];
            *tx = v[8];
            found = 0;
        }
    }
    fclose(f);
    return found;
}

/* Tcp RetransSegs of this namespace (/proc/net/snmp), -1 if unreadable. */
static long long tcp_retrans(void) {
    char head[1024], vals[1024];
    long long result = -1;
    FILE *f = fopen("/proc/net/snmp", "r");
    if (!f) return -1;
    while (fgets(head, sizeof head, f) && fgets(vals, sizeof vals, f)) {
        if (strncmp(head, "Tcp:", 4) != 0) continue;
        char *sh_ = NULL, *sv = NULL, *h = strtok_r(head, " \n", &sh_), *v = strtok_r(vals, " \n", &sv);
        while (h && v) {
            if (strcmp(h, "RetransSegs") == 0) { result = atoll(v); break; }
            h = strtok_r(NULL, " \n", &sh_);
            v = strtok_r(NULL, " \n", &sv);
        }
        break;
    }
    fclose(f);
    return result;
}

/* The test data: integer-valued floats (sums of 4 are exact), int64 values
   whose sums of 4 cannot overflow. */
static inline float f32val(int r, size_t i) {
    return (float)((int)((uint32_t)(i * 2654435761u) % 2001u + (uint32_t)r * 577u) % 2001 - 1000);
}
static inline int64_t i64val(int r, size_t i) {
    return (int64_t)(mix64(((uint64_t)r << 40) ^ (uint64_t)i) >> 4) - ((int64_t)1 << 59);
}
static inline int32_t i32val(int r, size_t i) { return (int32_t)(mix64(((uint64_t)r << 40) ^ (uint64_t)i ^ 0x55) >> 33); }

typedef struct {
    size_t ar_f32[6];
    int n_ar_f32;
    size_t ar_i64[4];
    int n_ar_i64;
    size_t ar_max, bcast, ag, rs, a2a, p2p;
} sizes_t;

static const sizes_t clean_sizes = {
    { 1, 1000, 65537, 1048576, (size_t)4 << 20 }, 5,   /* float32: up to 16 MiB */
    { 7, 100003, (size_t)2 << 20 }, 3,                 /* int64: up to 16 MiB */
    65537, (size_t)4 << 20, 262147, 1048579, 262144, (size_t)8 << 20,
};
static const sizes_t impaired_sizes = {
    { 1, 65537, 1048576, (size_t)4 << 20 }, 4,         /* float32: up to 16 MiB */
    { 100003, (size_t)1 << 20 }, 2,                    /* int64: up to 8 MiB */
    65537, (size_t)1 << 20, 65537, 262147, 65536, (size_t)1 << 20,
};

static const char *human(size_t bytes, char *buf, size_t cap) {
    if (bytes >= ((size_t)1 << 20) && bytes % ((size_t)1 << 20) == 0) snprintf(buf, cap, "%zu MiB", bytes >> 20);
    else if (bytes >= ((size_t)1 << 20)) snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
    else if (bytes >= 1024) snprintf(buf, cap, "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, cap, "%zu B", bytes);
    return buf;
}

static void set_secs(int id, int rank, double s) { sh->chk[g_phase][id].secs[rank] = s; }
static void set_info(int id, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sh->chk[g_phase][id].info, sizeof sh->chk[g_phase][id].info, fmt, ap);
    va_end(ap);
}

/* A collective call in a check: on failure the check fails with the
   call's result and message, and the suite stops (the job is broken). */
#define COLL(id, call)                                                                      \
    do {                                                                                    \
        dist_result r_ = (call);                                                            \
        if (r_ != DIST_OK) {                                                                \
            fail_(id, rank, "%s -> %s: %s", #call, dist_result_name(r_), dist_error_message(w)); \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

/* The collectives and point-to-point checks of the clean and impaired
   phases.  Returns nonzero when the job is no longer usable. */
static int suite(dist_t *w, int rank, const sizes_t *sz, int with_wire) {
    const int n = NR;
    char hb[32];
    int64_t t0;
    size_t maxc = 0;
    for (int k = 0; k < sz->n_ar_f32; k++) if (sz->ar_f32[k] > maxc) maxc = sz->ar_f32[k];
    for (int k = 0; k < sz->n_ar_i64; k++) if (sz->ar_i64[k] * 2 > maxc) maxc = sz->ar_i64[k] * 2;
    if (sz->rs * n > maxc) maxc = sz->rs * n;
    if (sz->ag * n > maxc) maxc = sz->ag * n;
    if (sz->a2a * n > maxc) maxc = sz->a2a * n;
    if (sz->p2p / 4 + 1 > maxc) maxc = sz->p2p / 4 + 1;
    if (sz->bcast / 4 + 1 > maxc) maxc = sz->bcast / 4 + 1;
    float *fb = malloc(maxc * sizeof(float));
    uint8_t *aux = malloc(maxc * sizeof(float));
    if (!fb || !aux) { free(fb); free(aux); return FAIL("out of memory"); }
    /* round trip */
    {
        double rt[20];
        int64_t x = 0;
        for (int k = 0; k < 20 && rank < 2; k++) {
            t0 = now_ns();
            if (rank == 0) {
                COLL(C_RTT, dist_send(w, &x, 1, DIST_INT64, 1, 50));
                COLL(C_RTT, dist_recv(w, &x, 1, DIST_INT64, 1, 51));
            } else {
                COLL(C_RTT, dist_recv(w, &x, 1, DIST_INT64, 0, 50));
                x++;
                COLL(C_RTT, dist_send(w, &x, 1, DIST_INT64, 0, 51));
            }
            rt[k] = secs_since(t0) * 1e3;
        }
        if (rank == 0) {
            for (int a = 0; a < 20; a++)
                for (int b = a + 1; b < 20; b++) if (rt[b] < rt[a]) { double tmp = rt[a]; rt[a] = rt[b]; rt[b] = tmp; }
            set_info(C_RTT, "median %.2f ms, min %.2f ms, max %.2f ms", (rt[9] + rt[10]) / 2, rt[0], rt[19]);
            sh->chk[g_phase][C_RTT].secs[0] = (rt[9] + rt[10]) / 2 / 1e3;   /* the median, for the parent */
            if (x != 20) fail_(C_RTT, rank, "ping-pong counter %lld, expected 20", (long long)x);
        }
        pass_(C_RTT);
    }

    /* all_reduce float32 sum */
    {
        double worst = 0;
        unsigned long long rx0 = 0, tx0 = 0, rx1 = 0, tx1 = 0;
        size_t wire_count = 0;
        int ok_ = 1;
        for (int k = 0; k < sz->n_ar_f32 && ok_; k++) {
            size_t c = sz->ar_f32[k];
            for (size_t i = 0; i < c; i++) fb[i] = f32val(rank, i);
            int big = with_wire && c == sz->ar_f32[sz->n_ar_f32 - 1];
            /* the counters are read outside two barriers, so no rank's
               (eager) all_reduce data can arrive before or after them */
            if (big && eth0_bytes(&rx0, &tx0) != 0) fail_(C_WIRE, rank, "cannot read eth0 in /proc/net/dev");
            if (big) COLL(C_WIRE, dist_barrier(w));
            t0 = now_ns();
            COLL(C_AR_F32, dist_all_reduce(w, fb, c, DIST_FLOAT32, DIST_SUM));
            double s = secs_since(t0);
            if (big) {
                COLL(C_WIRE, dist_barrier(w));
                eth0_bytes(&rx1, &tx1);
                wire_count = c;
            }
            if (s > worst) worst = s;
            for (size_t i = 0; i < c; i++) {
                float want = 0;
                for (int r = 0; r < n; r++) want += f32val(r, i);
                if (fb[i] != want) {
                    fail_(C_AR_F32, rank, "count %zu: [%zu] = %.1f, expected %.1f", c, i, (double)fb[i], (double)want);
                    ok_ = 0;
                    break;
                }
            }
        }
        if (ok_) pass_(C_AR_F32);
        set_secs(C_AR_F32, rank, worst);
        set_info(C_AR_F32, "counts %zu..%zu (%s); the time is the slowest call", sz->ar_f32[0], sz->ar_f32[sz->n_ar_f32 - 1],
                 human(sz->ar_f32[sz->n_ar_f32 - 1] * 4, hb, sizeof hb));
        if (with_wire && wire_count) {
            unsigned long long need = (unsigned long long)(wire_count * 4 * 9 / 10);
            if (tx1 - tx0 < need || rx1 - rx0 < need)
                fail_(C_WIRE, rank, "eth0 moved only tx %llu / rx %llu bytes during a %zu-byte all_reduce", tx1 - tx0,
                      rx1 - rx0, wire_count * 4);
            else pass_(C_WIRE);
            if (rank == 0)
                set_info(C_WIRE, "rank 0's eth0: tx %.1f MiB, rx %.1f MiB for a %s all_reduce", (tx1 - tx0) / 1048576.0,
                         (rx1 - rx0) / 1048576.0, human(wire_count * 4, hb, sizeof hb));
        }
    }

    /* all_reduce float32 max */
    {
        size_t c = sz->ar_max;
        for (size_t i = 0; i < c; i++) fb[i] = f32val(rank, i);
        t0 = now_ns();
        COLL(C_AR_MAX, dist_all_reduce(w, fb, c, DIST_FLOAT32, DIST_MAX));
        set_secs(C_AR_MAX, rank, secs_since(t0));
        size_t i;
        for (i = 0; i < c; i++) {
            float want = f32val(0, i);
            for (int r = 1; r < n; r++) if (f32val(r, i) > want) want = f32val(r, i);
            if (fb[i] != want) { fail_(C_AR_MAX, rank, "[%zu] = %.1f, expected %.1f", i, (double)fb[i], (double)want); break; }
        }
        if (i == c) pass_(C_AR_MAX);
        set_info(C_AR_MAX, "count %zu", c);
    }

    /* all_reduce int64 sum */
    {
        int64_t *ib = (int64_t *)(void *)fb;
        double worst = 0;
        int ok_ = 1;
        for (int k = 0; k < sz->n_ar_i64 && ok_; k++) {
            size_t c = sz->ar_i64[k];
            for (size_t i = 0; i < c; i++) ib[i] = i64val(rank, i);
            t0 = now_ns();
            COLL(C_AR_I64, dist_all_reduce(w, ib, c, DIST_INT64, DIST_SUM));
            double s = secs_since(t0);
            if (s > worst) worst = s;
            for (size_t i = 0; i < c; i++) {
                int64_t want = 0;
                for (int r = 0; r < n; r++) want += i64val(r, i);
                if (ib[i] != want) {
                    fail_(C_AR_I64, rank, "count %zu: [%zu] = %lld, expected %lld", c, i, (long long)ib[i], (long long)want);
                    ok_ = 0;
                    break;
                }
            }
        }
        if (ok_) pass_(C_AR_I64);
        set_secs(C_AR_I64, rank, worst);
        set_info(C_AR_I64, "counts %zu..%zu (%s); the time is the slowest call", sz->ar_i64[0], sz->ar_i64[sz->n_ar_i64 - 1],
                 human(sz->ar_i64[sz->n_ar_i64 - 1] * 8, hb, sizeof hb));
    }

    /* broadcast from rank 2 */
    {
        size_t c = sz->bcast;
        if (rank == 2) fill_bytes(aux, c, 0xB0CA57);
        else memset(aux, 0, c);
        t0 = now_ns();
        COLL(C_BCAST, dist_broadcast(w, aux, c, DIST_UINT8, 2));
        set_secs(C_BCAST, rank, secs_since(t0));
        size_t at = check_bytes(aux, c, 0xB0CA57);
        if (at != SIZE_MAX) fail_(C_BCAST, rank, "byte %zu of %zu differs", at, c);
        else pass_(C_BCAST);
        set_info(C_BCAST, "%s", human(c, hb, sizeof hb));
    }

    /* all_gather int32 */
    {
        size_t c = sz->ag;
        int32_t *send = (int32_t *)(void *)aux, *recv = (int32_t *)(void *)fb;
        for (size_t i = 0; i < c; i++) send[i] = i32val(rank, i);
        t0 = now_ns();
        COLL(C_ALLGATHER, dist_all_gather(w, send, recv, c, DIST_INT32));
        set_secs(C_ALLGATHER, rank, secs_since(t0));
        int ok_ = 1;
        for (int b = 0; b < n && ok_; b++)
            for (size_t i = 0; i < c; i++)
                if (recv[(size_t)b * c + i] != i32val(b, i)) {
                    fail_(C_ALLGATHER, rank, "block %d [%zu] = %d, expected %d", b, i, recv[(size_t)b * c + i], i32val(b, i));
                    ok_ = 0;
                    break;
                }
        if (ok_) pass_(C_ALLGATHER);
        set_info(C_ALLGATHER, "%zu per rank (%s in all)", c, human(c * 4 * n, hb, sizeof hb));
    }

    /* reduce_scatter float32 sum */
    {
        size_t c = sz->rs;
        float *recv = (float *)(void *)aux;
        for (size_t i = 0; i < c * n; i++) fb[i] = f32val(rank + 7, i);
        t0 = now_ns();
        COLL(C_RS, dist_reduce_scatter(w, fb, recv, c, DIST_FLOAT32, DIST_SUM));
        set_secs(C_RS, rank, secs_since(t0));
        size_t i;
        for (i = 0; i < c; i++) {
            float want = 0;
            for (int r = 0; r < n; r++) want += f32val(r + 7, (size_t)rank * c + i);
            if (recv[i] != want) { fail_(C_RS, rank, "[%zu] = %.1f, expected %.1f", i, (double)recv[i], (double)want); break; }
        }
        if (i == c) pass_(C_RS);
        set_info(C_RS, "%zu per rank (%s sent by each)", c, human(c * 4 * n, hb, sizeof hb));
    }

    /* all_to_all int32 */
    {
        size_t c = sz->a2a;
        int32_t *send = (int32_t *)(void *)fb, *recv = (int32_t *)(void *)aux;
        for (int b = 0; b < n; b++)
            for (size_t i = 0; i < c; i++) send[(size_t)b * c + i] = rank * 1000003 + b * 7919 + (int32_t)i;
        t0 = now_ns();
        COLL(C_A2A, dist_all_to_all(w, send, recv, c, DIST_INT32));
        set_secs(C_A2A, rank, secs_since(t0));
        int ok_ = 1;
        for (int b = 0; b < n && ok_; b++)
            for (size_t i = 0; i < c; i++) {
                int32_t want = b * 1000003 + rank * 7919 + (int32_t)i;
                if (recv[(size_t)b * c + i] != want) {
                    fail_(C_A2A, rank, "block from rank %d [%zu] = %d, expected %d", b, i, recv[(size_t)b * c + i], want);
                    ok_ = 0;
                    break;
                }
            }
        if (ok_) pass_(C_A2A);
        set_info(C_A2A, "%zu per block (%s per rank)", c, human(c * 4 * n, hb, sizeof hb));
    }

    /* barrier: rank 3 comes 300 ms late; no rank may leave before it
       entered (CLOCK_MONOTONIC is one clock for every process here) */
    {
        COLL(C_BARRIER, dist_barrier(w));
        if (rank == 3) {
            sleep_ms(300);
            __atomic_store_n(&sh->barrier_enter_ns[g_phase], now_ns(), __ATOMIC_SEQ_CST);
        }
        t0 = now_ns();
        COLL(C_BARRIER, dist_barrier(w));
        int64_t out_ns = now_ns();
        int64_t in3 = __atomic_load_n(&sh->barrier_enter_ns[g_phase], __ATOMIC_SEQ_CST);
        set_secs(C_BARRIER, rank, (double)(out_ns - t0) / 1e9);
        if (in3 == 0 || out_ns < in3)
            fail_(C_BARRIER, rank, "left the barrier %.3f s before rank 3 entered it", in3 ? (double)(in3 - out_ns) / 1e9 : -1.0);
        else pass_(C_BARRIER);
        COLL(C_BARRIER, dist_barrier(w));
    }

    /* point-to-point */
    {
        size_t c = sz->p2p;
        int right = (rank + 1) % n, left = (rank + n - 1) % n;
        uint8_t *out = (uint8_t *)fb, *in = aux;
        dist_req_t *rq[2];
        fill_bytes(out, c, 0x1000 + (uint64_t)rank);
        memset(in, 0, c);
        t0 = now_ns();
        COLL(C_P2P, dist_irecv(w, in, c, DIST_UINT8, left, 60, &rq[0]));
        COLL(C_P2P, dist_isend(w, out, c, DIST_UINT8, right, 60, &rq[1]));
        COLL(C_P2P, dist_wait_all(2, rq));
        double s = secs_since(t0);
        size_t at = check_bytes(in, c, 0x1000 + (uint64_t)left);
        int ok_ = 1;
        if (at != SIZE_MAX) { fail_(C_P2P, rank, "ring: byte %zu of %zu from rank %d differs", at, c, left); ok_ = 0; }
        /* all pairs, small, blocking: every rank sends first (eager), then receives */
        for (int d = 0; d < n && ok_; d++) {
            if (d == rank) continue;
            int64_t v = rank * 100 + d;
            COLL(C_P2P, dist_send(w, &v, 1, DIST_INT64, d, 61));
        }
        for (int sr = 0; sr < n && ok_; sr++) {
            if (sr == rank) continue;
            int64_t v = -1;
            COLL(C_P2P, dist_recv(w, &v, 1, DIST_INT64, sr, 61));
            if (v != sr * 100 + rank) { fail_(C_P2P, rank, "all pairs: from rank %d got %lld", sr, (long long)v); ok_ = 0; }
        }
        /* DIST_ANY_SOURCE at rank 0 */
        if (rank != 0) {
            int32_t v = 7000 + rank;
            COLL(C_P2P, dist_send(w, &v, 1, DIST_INT32, 0, 62));
        } else {
            int seen = 0;
            for (int k = 0; k < n - 1 && ok_; k++) {
                int32_t v = -1;
                dist_req_t *r;
                COLL(C_P2P, dist_irecv(w, &v, 1, DIST_INT32, DIST_ANY_SOURCE, 62, &r));
                int done = 0;
                int64_t tw = now_ns();
                while (!done) {
                    COLL(C_P2P, dist_test(r, &done));
                    if (!done && secs_since(tw) > scaled_s(20)) break;
                    if (!done) sleep_us(200);
                }
                int src = done ? dist_req_source(r) : -1;
                COLL(C_P2P, dist_wait(r));
                if (src < 1 || src >= n || v != 7000 + src || (seen & (1 << src))) {
                    fail_(C_P2P, rank, "DIST_ANY_SOURCE: got %d from rank %d", v, src);
                    ok_ = 0;
                }
                if (src >= 0 && src < 31) seen |= 1 << src;
            }
        }
        COLL(C_P2P, dist_barrier(w));
        if (ok_) pass_(C_P2P);
        set_secs(C_P2P, rank, s);
        set_info(C_P2P, "the time is the isend/irecv ring of %s", human(c, hb, sizeof hb));
    }
    free(fb);
    free(aux);
    return 0;
}

static void fill_cfg(dist_config *cfg, char *url, size_t cap, int rank, int world, int port, int timeout_ms) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(url, cap, "tcp://%s.1:%d", g_subnet, port);
    cfg->init_method = url;
    cfg->world_size = world;
    cfg->rank = rank;
    cfg->timeout_ms = timeout_ms;
    cfg->transport = "auto";
    cfg->logger.func = count_log_fn;
    cfg->log_level = DIST_LOG_INFO;
}

static void note_transport(int rank) {
    rank_t *me = &sh->r[g_phase][rank];
    int level;
    me->log_lines = atomic_load(&g_log_lines);
    shm_log_take(&me->shm_lines, &me->shm_n, &level, me->shm_text, sizeof me->shm_text);
}

/* The congestion control of each of rank `rank`'s mesh connections equals
   `want`?  0 when it does; else 1 with the first difference in why. */
static int mesh_cc_is(dist_t *w, int rank, const char *want, char *why, size_t cap) {
    for (int i = 0; i < w->eng->world; i++) {
        char got[32] = "";
        socklen_t len = sizeof got - 1;
        if (i == rank) continue;
        if (getsockopt(w->eng->peers[i].fd, IPPROTO_TCP, TCP_CONGESTION, got, &len) != 0) {
            snprintf(why, cap, "getsockopt(TCP_CONGESTION) on the connection to rank %d: %s", i, strerror(errno));
            return 1;
        }
        got[len < sizeof got ? len : sizeof got - 1] = 0;
        if (strcmp(got, want) != 0) { snprintf(why, cap, "the connection to rank %d uses %s, expected %s", i, got, want); return 1; }
    }
    return 0;
}

/* control: two ranks in one namespace (rank 0's) */
static int rank_control(int rank) {
    dist_config cfg;
    char url[96];
    dist_t *w = NULL;
    alarm((unsigned)scaled_s(30));
    if (enter_ns(g_ns[0]) != 0) return FAIL("setns(%s): %s", g_ns[0], strerror(errno));
    fill_cfg(&cfg, url, sizeof url, rank, 2, 29400, scaled(15000));
    dist_result res = dist_init(&w, &cfg);
    if (res != DIST_OK) return FAIL("dist_init(%s): %s: %s", url, dist_result_name(res), dist_error_message(NULL));
    int32_t v = rank;
    OK(dist_all_reduce(w, &v, 1, DIST_INT32, DIST_SUM));
    if (v != 1) return FAIL("all_reduce gave %d", v);
    {   /* both ends on one address: the same-host choice */
        char why[200];
        if (mesh_cc_is(w, rank, "reno", why, sizeof why)) return FAIL("within one namespace: %s", why);
    }
    note_transport(rank);
    res = dist_destroy(w);
    if (res != DIST_OK) return FAIL("dist_destroy: %s: %s", dist_result_name(res), dist_error_message(NULL));
    sh->r[g_phase][rank].done = 1;
    return 0;
}

/* clean and impaired */
static int rank_suite(int rank) {
    dist_config cfg;
    char url[96], key[32], val[128], want[64];
    dist_t *w = NULL;
    int impaired = g_phase == PH_IMPAIRED;
    alarm((unsigned)scaled_s(impaired ? 60 : 45));
    if (enter_ns(g_ns[rank]) != 0) return FAIL("setns(%s): %s", g_ns[rank], strerror(errno));
    long long re0 = tcp_retrans();
    fill_cfg(&cfg, url, sizeof url, rank, NR, impaired ? 29502 : 29501, scaled(impaired ? 30000 : 20000));
    if (impaired) cfg.socket_ifname = "eth0";    /* the other way to pick the mesh address */
    int64_t t0 = now_ns();
    dist_result res = dist_init(&w, &cfg);
    if (res != DIST_OK) {
        fail_(C_INIT, rank, "dist_init(%s): %s: %s", url, dist_result_name(res), dist_error_message(NULL));
        return 1;
    }
    set_secs(C_INIT, rank, secs_since(t0));
    /* the addresses the ranks published for the mesh */
    int ok_ = 1;
    for (int r = 0; r < NR && ok_; r++) {
        size_t len = 0;
        snprintf(key, sizeof key, "dist/addr/%d", r);
        res = dist_store_get(w, key, val, sizeof val - 1, &len);
        if (res != DIST_OK) { fail_(C_INIT, rank, "store get %s: %s: %s", key, dist_result_name(res), dist_error_message(w)); ok_ = 0; break; }
        val[len] = 0;
        snprintf(want, sizeof want, "%s.%d ", g_subnet, r + 1);
        if (strncmp(val, want, strlen(want)) != 0) {
            fail_(C_INIT, rank, "rank %d published mesh address \"%s\", expected its veth address %s.%d", r, val, g_subnet, r + 1);
            ok_ = 0;
        }
        if (rank == 0 && r == 1) set_info(C_INIT, "%s; rank 1 published \"%s\"%s", url, val, impaired ? " (cfg.socket_ifname = eth0)" : "");
    }
    if (ok_) pass_(C_INIT);
    note_transport(rank);
    if (sh->r[g_phase][rank].shm_lines == 0 && sh->r[g_phase][rank].log_lines > 0) pass_(C_TRANSPORT);
    else if (sh->r[g_phase][rank].shm_lines)
        fail_(C_TRANSPORT, rank, "logged \"%s\": shared memory between different network namespaces", sh->r[g_phase][rank].shm_text);
    else fail_(C_TRANSPORT, rank, "the logger got no line at all at info level, so the check proves nothing");
    if (g_cc[0]) {
        char why[200];
        if (mesh_cc_is(w, rank, g_cc, why, sizeof why)) fail_(C_CC, rank, "%s", why);
        else { pass_(C_CC); if (rank == 0) set_info(C_CC, "%s, the namespaces' default", g_cc); }
    }

    if (suite(w, rank, impaired ? &impaired_sizes : &clean_sizes, !impaired)) {
        dist_abort(w);
        dist_destroy(w);
        return 1;
    }
    long long re1 = tcp_retrans();
    sh->r[g_phase][rank].retrans = (re0 >= 0 && re1 >= 0) ? re1 - re0 : -1;
    t0 = now_ns();
    res = dist_destroy(w);
    set_secs(C_DESTROY, rank, secs_since(t0));
    if (res != DIST_OK) fail_(C_DESTROY, rank, "%s: %s", dist_result_name(res), dist_error_message(NULL));
    else pass_(C_DESTROY);
    sh->r[g_phase][rank].done = 1;
    return 0;
}

/* linkdown */
static int rank_linkdown(int rank) {
    dist_config cfg;
    char url[96];
    dist_t *w = NULL;
    rank_t *me = &sh->r[PH_LINKDOWN][rank];
    const size_t c = (size_t)4 << 20;     /* 16 MiB of float32 */
    alarm((unsigned)scaled_s(30));
    if (enter_ns(g_ns[rank]) != 0) return FAIL("setns(%s): %s", g_ns[rank], strerror(errno));
    fill_cfg(&cfg, url, sizeof url, rank, NR, 29503, scaled(LD_TIMEOUT_MS));
    dist_result res = dist_init(&w, &cfg);
    if (res != DIST_OK) return FAIL("dist_init(%s): %s: %s", url, dist_result_name(res), dist_error_message(NULL));
    float *buf = malloc(c * sizeof *buf);
    if (!buf) return FAIL("out of memory");
    for (size_t i = 0; i < c; i++) buf[i] = (float)(rank + 1);
    OK(dist_barrier(w));
    int64_t start = now_ns();
    for (;;) {
        me->call_ns = now_ns();
        res = dist_all_reduce(w, buf, c, DIST_FLOAT32, DIST_SUM);
        if (res != DIST_OK) break;
        if (me->iters == 0) {
            for (size_t i = 0; i < c; i++)
                if (buf[i] != 10.0f) return FAIL("the first all_reduce gave [%zu] = %g, expected 10", i, (double)buf[i]);
            memset(buf, 0, c * sizeof *buf);   /* zeros from now on: stays exact */
        }
        __atomic_add_fetch(&me->iters, 1, __ATOMIC_SEQ_CST);
        if (secs_since(start) > scaled_s(20)) break;   /* the link never went down? */
    }
    me->err_ns = now_ns();
    me->res = res;
    snprintf(me->msg, sizeof me->msg, "%s", res == DIST_OK ? "(no error for 20 s)" : dist_error_message(w));
    free(buf);
    me->destroy_start_ns = now_ns();
    res = dist_destroy(w);
    me->destroy_end_ns = now_ns();
    me->destroy_res = res;
    snprintf(me->destroy_msg, sizeof me->destroy_msg, "%s", res == DIST_OK ? "" : dist_error_message(NULL));
    me->done = 1;
    return 0;
}

/* ---- the user-space impairing switch ----------------------------------- */
#define SW_SLOTS 16384
#define VNET_HDR 10                  /* struct virtio_net_hdr */
typedef struct { int64_t t; int in, len, cap; uint8_t *buf; } sw_frame;

static void switch_main(void) {
    switch_t *st = &sh->sw;
    int fd[NR];
    struct pollfd pf[NR];
    static sw_frame q[SW_SLOTS];
    static uint8_t scratch[1 << 18];
    unsigned char macs[NR][6];
    int known[NR] = { 0 };
    size_t head = 0, tail = 0;       /* q[head..tail) waiting, by time */
    uint64_t rng = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
    if (enter_ns(g_ns[NR]) != 0) { snprintf(st->err, sizeof st->err, "setns(%s): %s", g_ns[NR], strerror(errno)); _exit(1); }
    for (int p = 0; p < NR; p++) {
        char ifn[16];
        int one = 1, big = 8 << 20;
        struct sockaddr_ll sll;
        snprintf(ifn, sizeof ifn, "v%d", p);
        fd[p] = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
        if (fd[p] < 0) { snprintf(st->err, sizeof st->err, "socket(AF_PACKET): %s", strerror(errno)); _exit(1); }
        if (setsockopt(fd[p], SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
            snprintf(st->err, sizeof st->err, "PACKET_VNET_HDR: %s", strerror(errno));
            _exit(1);
        }
#ifdef PACKET_IGNORE_OUTGOING
        setsockopt(fd[p], SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
#endif
        if (setsockopt(fd[p], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) != 0)
            setsockopt(fd[p], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        memset(&sll, 0, sizeof sll);
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = (int)if_nametoindex(ifn);
        if (sll.sll_ifindex == 0 || bind(fd[p], (struct sockaddr *)&sll, sizeof sll) != 0) {
            snprintf(st->err, sizeof st->err, "bind to %s: %s", ifn, strerror(errno));
            _exit(1);
        }
        pf[p].fd = fd[p];
        pf[p].events = POLLIN;
    }
    st->hold_min_us = -1;
    __atomic_store_n(&st->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&st->stop, __ATOMIC_SEQ_CST)) {
        int64_t now = now_ns();
        /* release what is due */
        while (head != tail && q[head % SW_SLOTS].t <= now) {
            sw_frame *f = &q[head % SW_SLOTS];
            const uint8_t *dst = f->buf + VNET_HDR;
            int out = -1;
            if (!(dst[0] & 1))
                for (int p = 0; p < NR; p++) if (known[p] && memcmp(macs[p], dst, 6) == 0) out = p;
            for (int p = 0; p < NR; p++) {
                if (p == f->in || (out >= 0 && p != out)) continue;
                if (send(fd[p], f->buf, (size_t)f->len, 0) == f->len) st->sent_frames++;
                else st->send_errors++;
            }
            long long hold = (now - (f->t - (int64_t)DELAY_MS * 1000000)) / 1000;
            st->hold_sum_us += hold;
            st->held++;
            if (st->hold_min_us < 0 || hold < st->hold_min_us) st->hold_min_us = hold;
            if (hold > st->hold_max_us) st->hold_max_us = hold;
            st->forwarded++;
            head++;
        }
        struct timespec ts = { 0, 50 * 1000000L };
        if (head != tail) {
            int64_t left = q[head % SW_SLOTS].t - now;
            if (left < 0) left = 0;
            ts.tv_sec = (time_t)(left / 1000000000);
            ts.tv_nsec = (long)(left % 1000000000);
        }
        if (ppoll(pf, NR, &ts, NULL) <= 0) continue;
        now = now_ns();
        for (int p = 0; p < NR; p++) {
            if (!(pf[p].revents & POLLIN)) continue;
            for (;;) {
                struct sockaddr_ll from;
                socklen_t fl = sizeof from;
                ssize_t k = recvfrom(fd[p], scratch, sizeof scratch, MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&from, &fl);
                if (k < 0) break;
                if (from.sll_pkttype == PACKET_OUTGOING) continue;
                if (k > (ssize_t)sizeof scratch) { st->oversize++; continue; }
                if (k < VNET_HDR + 14) continue;
                st->frames_in++;
                /* learn the sender's MAC */
                memcpy(macs[p], scratch + VNET_HDR + 6, 6);
                known[p] = 1;
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                if (rng % 10000 < LOSS_PCT * 100) { st->dropped++; continue; }
                if (tail - head >= SW_SLOTS) { st->overflow++; continue; }
                sw_frame *f = &q[tail % SW_SLOTS];
                if (f->cap < k) {
                    uint8_t *nb = realloc(f->buf, (size_t)k);
                    if (!nb) { st->overflow++; continue; }
                    f->buf = nb;
                    f->cap = (int)k;
                }
                memcpy(f->buf, scratch, (size_t)k);
                f->len = (int)k;
                f->in = p;
                f->t = now + (int64_t)DELAY_MS * 1000000;
                tail++;
            }
        }
    }
    _exit(0);
}

/* ---- parent ------------------------------------------------------------- */
static int g_skips;
static char g_skip_list[1000];

/* A SKIP line; `listed` adds the check to the summary's list. */
static void skip_check(const char *phase, const char *name, const char *why, int listed) {
    size_t k = strlen(g_skip_list);
    printf("SKIP [%s] %s: %s\n", phase, name, why);
    if (listed) snprintf(g_skip_list + k, sizeof g_skip_list - k, "%s[%s] %s", k ? "; " : "", phase, name);
    g_skips++;
}

/* Forks the ranks of a phase (nranks), waits for them within limit_s. */
static int run_ranks(int phase, int nranks, int (*fn)(int), double limit_s, const char *label, void (*during)(void)) {
    int hung = 0;
    g_phase = phase;
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            child_start();
            _exit(fn(r));
        }
        g_kids[r] = pid;
        if (pid < 0) printf("FAIL [%s] fork: %s\n", label, strerror(errno));
    }
    if (during) during();
    int64_t t0 = now_ns();
    int left = nranks;
    int status[NR] = { 0 };
    while (left > 0) {
        for (int r = 0; r < nranks; r++) {
            int st;
            if (g_kids[r] <= 0) continue;
            pid_t p = waitpid(g_kids[r], &st, WNOHANG);
            if (p == g_kids[r]) { status[r] = st; g_kids[r] = 0; left--; }
            else if (p < 0 && errno == ECHILD) { g_kids[r] = 0; left--; }
        }
        if (left == 0) break;
        if (secs_since(t0) > limit_s) {
            for (int r = 0; r < nranks; r++)
                if (g_kids[r] > 0) {
                    printf("FAIL [%s] rank %d did not finish within %.0f s (killed)\n", label, r, limit_s);
                    g_failures++;
                    hung++;
                    kill(g_kids[r], SIGKILL);
                    waitpid(g_kids[r], NULL, 0);
                    g_kids[r] = 0;
                }
            break;
        }
        sleep_ms(10);
    }
    for (int r = 0; r < nranks; r++) {
        int st = status[r];
        if (sh->r[phase][r].fail[0]) { printf("FAIL [%s] rank %d: %s\n", label, r, sh->r[phase][r].fail); g_failures++; }
        if (st && WIFSIGNALED(st)) {
            printf("FAIL [%s] rank %d died by signal %d%s\n", label, r, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (its alarm: it hung)" : "");
            g_failures++;
        } else if (st && WIFEXITED(st) && WEXITSTATUS(st) != 0 && !sh->r[phase][r].fail[0]) {
            int any = 0;
            for (int k = 0; k < NCHECKS; k++) any |= sh->chk[phase][k].fail > 0;
            if (!any) { printf("FAIL [%s] rank %d exited with %d\n", label, r, WEXITSTATUS(st)); g_failures++; }
        }
    }
    return hung;
}

/* The per-check lines of a phase. */
static void report_checks(int phase, const char *label, int nranks, const int *ids, int nids) {
    for (int k = 0; k < nids; k++) {
        int id = ids[k];
        check_t *c = &sh->chk[phase][id];
        double worst = 0;
        for (int r = 0; r < nranks; r++) if (c->secs[r] > worst) worst = c->secs[r];
        int want = nranks;
        if (c->fail) {
            printf("FAIL [%s] %s: %s%s%s\n", label, check_names[id], c->why, c->info[0] ? "  -- " : "", c->info);
            g_failures++;
        } else if (c->pass < want) {
            printf("FAIL [%s] %s: only %d of %d ranks got to it (see the rank failures)\n", label, check_names[id], c->pass, want);
            g_failures++;
        } else if (id == C_RTT) {
            printf("ok   [%s] %s: %s\n", label, check_names[id], c->info);
        } else {
            char ts[32] = "";
            if (worst > 0) snprintf(ts, sizeof ts, " (%.3f s)", worst);
            printf("ok   [%s] %s%s%s%s\n", label, check_names[id], ts, c->info[0] ? "  " : "", c->info);
        }
    }
}

static const int suite_ids[] = { C_INIT, C_TRANSPORT, C_CC, C_RTT, C_AR_F32, C_AR_MAX, C_AR_I64, C_WIRE, C_BCAST,
                                 C_ALLGATHER, C_RS, C_A2A, C_BARRIER, C_P2P, C_DESTROY };

/* ---- link-down: the parent's part while the ranks run ------------------ */
static int64_t g_down_ns;
static char g_down_err[600];
static int64_t g_down_end_ns;   /* when `ip link set down` returned */

static void linkdown_during(void) {
    int64_t t0 = now_ns();
    for (;;) {
        int all = 1;
        for (int r = 0; r < NR; r++)
            if (__atomic_load_n(&sh->r[PH_LINKDOWN][r].iters, __ATOMIC_SEQ_CST) < 1) all = 0;
        if (all) break;
        int alive = 0;
        for (int r = 0; r < NR; r++) {   /* exited ones stay unreaped (WNOWAIT) for run_ranks */
            siginfo_t si;
            memset(&si, 0, sizeof si);
            if (g_kids[r] > 0 && waitid(P_PID, (id_t)g_kids[r], &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0) alive++;
        }
        if (alive < NR || secs_since(t0) > scaled_s(25)) {
            snprintf(g_down_err, sizeof g_down_err, "the ranks never all finished a first all_reduce (%.1f s)", secs_since(t0));
            return;
        }
        sleep_ms(2);
    }
    sleep_ms(20);   /* into the next all_reduce */
    char out[600];
    int64_t t1 = now_ns();
    int rc = run_cmd(out, sizeof out, "ip -n %s link set dev v%d down", g_ns[NR], LD_RANK);
    g_down_ns = now_ns();
    if (rc != 0) {
        snprintf(g_down_err, sizeof g_down_err, "`ip -n %s link set dev v%d down` exited with %d: %.300s", g_ns[NR], LD_RANK, rc, out);
        g_down_ns = 0;
    } else {
        g_down_end_ns = g_down_ns;
        g_down_ns = t1 + (g_down_ns - t1) / 2;   /* the middle of the command */
    }
}

static void phase_linkdown(void) {
    const char *label = "linkdown";
    int64_t t0 = now_ns();
    int hung = run_ranks(PH_LINKDOWN, NR, rank_linkdown, scaled_s(35), label, linkdown_during);
    double tmo = scaled(LD_TIMEOUT_MS) / 1000.0, bound = tmo + scaled_s(2);
    if (!g_down_ns) {
        printf("FAIL [%s] %s\n", label, g_down_err[0] ? g_down_err : "the link was never set down");
        g_failures++;
        return;
    }
    int errs_ok = 1, named = 0, names_ld = 0, destroy_ok = 1, during = 0;
    double slowest = 0, dslow = 0;
    char rtext[NR][700];
    for (int r = 0; r < NR; r++) {
        rank_t *me = &sh->r[PH_LINKDOWN][r];
        rtext[r][0] = 0;
        if (!me->done) { errs_ok = destroy_ok = 0; continue; }
        double after = (double)(me->err_ns - g_down_ns) / 1e9;
        double d = (double)(me->destroy_end_ns - me->destroy_start_ns) / 1e9;
        int in_call = me->call_ns <= g_down_end_ns;   /* began before the link was surely down */
        during += in_call;
        snprintf(rtext[r], sizeof rtext[r], "rank %d: %d all_reduce(s) done, then %s %.2f s after the link went down (call %s) \"%s\"; dist_destroy %.2f s -> %s%s%s",
                 r, me->iters, dist_result_name((dist_result)me->res), after, in_call ? "started before it" : "started after it",
                 me->msg, d, dist_result_name((dist_result)me->destroy_res), me->destroy_msg[0] ? ": " : "", me->destroy_msg);
        if (after > slowest) slowest = after;
        if (d > dslow) dslow = d;
        if (me->res != DIST_ERR_TIMEOUT && me->res != DIST_ERR_PEER_LOST) errs_ok = 0;
        if (after > bound || after < 0) errs_ok = 0;
        const char *m = strstr(me->msg, "rank ");
        int has_rank = 0;
        for (; m; m = strstr(m + 5, "rank ")) if (m[5] >= '0' && m[5] <= '9') has_rank = 1;
        char ld[16];
        snprintf(ld, sizeof ld, "rank %d", LD_RANK);
        named += has_rank;
        names_ld += strstr(me->msg, ld) != NULL;
        if (d > bound) destroy_ok = 0;
    }
    char name[300];
    snprintf(name, sizeof name, "rank %d's link set down mid-all_reduce (16 MiB, timeout %.0f s): every rank returns "
             "DIST_ERR_TIMEOUT or DIST_ERR_PEER_LOST within timeout + 2 s", LD_RANK, tmo);
    if (errs_ok && !hung) printf("ok   [%s] %s (slowest %.2f s after the link went down; %d of %d ranks were inside the call)\n", label, name, slowest, during, NR);
    else { printf("FAIL [%s] %s (bound %.1f s)\n", label, name, bound); g_failures++; }
    if (!during) { printf("FAIL [%s] no rank was inside an all_reduce when the link went down: not the case this should test\n", label); g_failures++; }
    for (int r = 0; r < NR; r++) if (rtext[r][0]) printf("     %s\n", rtext[r]);
    if (named == NR) printf("ok   [%s] every rank's error message names a rank (%d of %d name rank %d)\n", label, names_ld, NR, LD_RANK);
    else { printf("FAIL [%s] only %d of %d error messages name a rank\n", label, named, NR); g_failures++; }
    if (destroy_ok && !hung) printf("ok   [%s] dist_destroy returns within timeout + 2 s on every rank (slowest %.2f s)\n", label, dslow);
    else { printf("FAIL [%s] dist_destroy did not return within %.1f s on every rank (slowest %.2f s)\n", label, bound, dslow); g_failures++; }
    if (!hung) printf("ok   [%s] no rank hung (phase %.1f s)\n", label, secs_since(t0));
}

/* ---- impairment --------------------------------------------------------- */
enum { IMP_NONE, IMP_NETEM, IMP_SWITCH };
static int g_imp = IMP_NONE;
static char g_imp_text[600];

static int gso_set(int on) {
    for (int r = 0; r < NR; r++)
        if (must("gso", "ip -n %s link set dev eth0 gso_max_segs %d gso_max_size %d", g_ns[r], on ? 65535 : 1, on ? 65536 : 1500) != 0)
            return -1;
    return 0;
}

static void impair_start(void) {
    char out[600], netem_why[600];
    int rc;
    g_imp_text[0] = 0;
    /* 1. netem on every eth0 */
    rc = run_cmd(out, sizeof out, "tc -n %s qdisc add dev eth0 root netem delay %dms loss %d%% limit 10000", g_ns[0], DELAY_MS, LOSS_PCT);
    if (rc == 0) {
        int okk = 1;
        for (int r = 1; r < NR && okk; r++)
            if (run_cmd(out, sizeof out, "tc -n %s qdisc add dev eth0 root netem delay %dms loss %d%% limit 10000", g_ns[r], DELAY_MS, LOSS_PCT) != 0) okk = 0;
        if (okk) {
            g_imp = IMP_NETEM;
            snprintf(g_imp_text, sizeof g_imp_text, "tc netem delay %d ms loss %d %% on every rank's eth0 (egress)", DELAY_MS, LOSS_PCT);
            return;
        }
        for (int r = 0; r < NR; r++) run_cmd(NULL, 0, "tc -n %s qdisc del dev eth0 root", g_ns[r]);
    }
    snprintf(netem_why, sizeof netem_why, "%s", rc == 127 ? "tc is not installed" : out[0] ? out : "tc failed");
    printf("note: netem unavailable (`tc qdisc add ... netem`: %s); trying a user-space switch instead\n", netem_why);
    if (getenv("DIST_NETNS_NO_SWITCH")) {   /* to try the path where nothing works */
        snprintf(g_skip_why, sizeof g_skip_why, "netem unavailable (%.200s) and DIST_NETNS_NO_SWITCH is set: delay and loss not applied", netem_why);
        return;
    }
    /* 2. the user-space switch in place of the bridge */
    for (int r = 0; r < NR; r++)
        if (must("switch", "ip -n %s link set dev v%d nomaster", g_ns[NR], r) != 0) goto no_switch;
    memset(&sh->sw, 0, sizeof sh->sw);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { child_start(); switch_main(); }
    g_kids[NR + 1] = pid;
    int64_t t0 = now_ns();
    while (!__atomic_load_n(&sh->sw.ready, __ATOMIC_SEQ_CST) && secs_since(t0) < 5) {
        if (waitpid(pid, NULL, WNOHANG) == pid) { g_kids[NR + 1] = 0; break; }
        sleep_ms(5);
    }
    if (!sh->sw.ready) {
        snprintf(out, sizeof out, "%s", sh->sw.err[0] ? sh->sw.err : "did not start");
        if (g_kids[NR + 1] > 0) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); g_kids[NR + 1] = 0; }
        for (int r = 0; r < NR; r++) run_cmd(NULL, 0, "ip -n %s link set dev v%d master br0", g_ns[NR], r);
        snprintf(g_skip_why, sizeof g_skip_why, "netem unavailable (%.150s) and the user-space switch failed (%.150s): delay and loss not applied",
                 netem_why, out);
        return;
    }
    g_imp = IMP_SWITCH;
    snprintf(g_imp_text, sizeof g_imp_text, "netem unavailable (%.200s); applied instead: a user-space switch (AF_PACKET) in place of the bridge, "
             "holding every frame %d ms and dropping %d %% at random", netem_why, DELAY_MS, LOSS_PCT);
    return;
no_switch:
    snprintf(g_skip_why, sizeof g_skip_why, "netem unavailable (%.200s) and the bridge ports could not be detached: delay and loss not applied", netem_why);
}

static void impair_stop(void) {
    if (g_imp == IMP_NETEM)
        for (int r = 0; r < NR; r++) run_cmd(NULL, 0, "tc -n %s qdisc del dev eth0 root", g_ns[r]);
    if (g_imp == IMP_SWITCH) {
        pid_t pid = g_kids[NR + 1];
        __atomic_store_n(&sh->sw.stop, 1, __ATOMIC_SEQ_CST);
        int64_t t0 = now_ns();
        while (pid > 0 && waitpid(pid, NULL, WNOHANG) == 0) {
            if (secs_since(t0) > 2) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); break; }
            sleep_ms(5);
        }
        g_kids[NR + 1] = 0;
        for (int r = 0; r < NR; r++)
            if (must("bridge", "ip -n %s link set dev v%d master br0", g_ns[NR], r) != 0) g_failures++;
    }
}

static void phase_impaired(void) {
    const char *label = "impaired";
    if (gso_set(0) != 0) printf("note: GSO stays on: a lost frame may be a 64 KiB burst of segments (harsher than 1 %% of segments)\n");
    impair_start();
    if (g_imp == IMP_NONE) {
        printf("note: %s\n", g_skip_why);
        for (size_t k = 0; k < sizeof suite_ids / sizeof suite_ids[0]; k++)
            if (suite_ids[k] != C_WIRE) skip_check(label, check_names[suite_ids[k]], "no impairment could be applied", 0);
        skip_check(label, "delay: round trip >= 2 x 5 ms", g_skip_why, 0);
        skip_check(label, "loss: frames dropped and TCP retransmitted", g_skip_why, 0);
        snprintf(g_skip_list, sizeof g_skip_list, "the whole impaired phase (%d checks): %s", g_skips, g_skip_why);
        gso_set(1);
        return;
    }
    printf("note: impairment: %s\n", g_imp_text);
    switch_t before = sh->sw;
    int64_t t0 = now_ns();
    run_ranks(PH_IMPAIRED, NR, rank_suite, scaled_s(70), label, NULL);
    double el = secs_since(t0);
    switch_t after = sh->sw;
    impair_stop();
    gso_set(1);
    static const int ids[] = { C_INIT, C_TRANSPORT, C_AR_F32, C_AR_MAX, C_AR_I64, C_BCAST, C_ALLGATHER, C_RS, C_A2A,
                               C_BARRIER, C_P2P, C_DESTROY };
    report_checks(PH_IMPAIRED, label, NR, ids, (int)(sizeof ids / sizeof ids[0]));
    /* the delay was really there */
    check_t *rt = &sh->chk[PH_IMPAIRED][C_RTT];
    double med = rt->secs[0] * 1e3;
    if (rt->fail || rt->pass < 1) { printf("FAIL [%s] round trip: %s\n", label, rt->fail ? rt->why : "not measured"); g_failures++; }
    else if (med < 2 * DELAY_MS * 0.95) {
        printf("FAIL [%s] delay: the round trip is %.2f ms, below 2 x %d ms: the delay was not applied (%s)\n", label, med, DELAY_MS, rt->info);
        g_failures++;
    } else printf("ok   [%s] delay: round trip >= 2 x %d ms (%s; clean: %s)\n", label, DELAY_MS, rt->info, sh->chk[PH_CLEAN][C_RTT].info);
    /* and the loss */
    long long retrans = 0;
    int retrans_known = 1;
    for (int r = 0; r < NR; r++) {
        if (sh->r[PH_IMPAIRED][r].retrans < 0) retrans_known = 0;
        else retrans += sh->r[PH_IMPAIRED][r].retrans;
    }
    if (g_imp == IMP_SWITCH) {
        long long in = after.frames_in - before.frames_in, dr = after.dropped - before.dropped;
        printf("     switch: %lld frames in, %lld dropped (%.2f %%), %lld forwarded, held %.2f ms on average (min %.2f, max %.2f ms), "
               "%lld send errors, %lld queue overflows, %lld oversize\n",
               in, dr, in ? 100.0 * dr / in : 0.0, after.forwarded - before.forwarded,
               after.held ? after.hold_sum_us / 1000.0 / after.held : 0.0, after.hold_min_us / 1000.0, after.hold_max_us / 1000.0,
               after.send_errors, after.overflow, after.oversize);
        if (dr < 1 || in < 1000) { printf("FAIL [%s] loss: %lld of %lld frames dropped: too few to count as 1 %% loss\n", label, dr, in); g_failures++; }
        else if (!retrans_known) printf("ok   [%s] loss: %lld of %lld frames dropped (%.2f %%); TCP retransmissions not readable\n", label, dr, in, 100.0 * dr / in);
        else if (retrans < 1) { printf("FAIL [%s] loss: %lld frames dropped, but TCP retransmitted nothing?\n", label, dr); g_failures++; }
        else printf("ok   [%s] loss: %lld of %lld frames dropped (%.2f %%), %lld TCP segments retransmitted, results still exact\n", label, dr, in, 100.0 * dr / in, retrans);
    } else {
        if (!retrans_known) skip_check(label, "loss", "/proc/net/snmp unreadable, cannot tell that netem dropped anything", 1);
        else if (retrans < 1) { printf("FAIL [%s] loss: netem loss %d %% but TCP retransmitted nothing\n", label, LOSS_PCT); g_failures++; }
        else printf("ok   [%s] loss: %lld TCP segments retransmitted under netem loss %d %%, results still exact\n", label, retrans, LOSS_PCT);
    }
    printf("     impaired phase: %.1f s in all\n", el);
}

static void phase_clean(void) {
    const char *label = "clean";
    int64_t t0 = now_ns();
    run_ranks(PH_CLEAN, NR, rank_suite, scaled_s(50), label, NULL);
    if (g_cc[0]) report_checks(PH_CLEAN, label, NR, suite_ids, (int)(sizeof suite_ids / sizeof suite_ids[0]));
    else {
        int ids[sizeof suite_ids / sizeof suite_ids[0]], n = 0;
        for (size_t i = 0; i < sizeof suite_ids / sizeof suite_ids[0]; i++) if (suite_ids[i] != C_CC) ids[n++] = suite_ids[i];
        report_checks(PH_CLEAN, label, NR, ids, n);
        skip_check(label, check_names[C_CC], "neither cubic nor bbr could be made the namespaces' default, and Reno cannot be told apart", 1);
    }
    printf("     clean phase: %.1f s in all\n", secs_since(t0));
}

static void phase_control(void) {
    const char *label = "control";
    run_ranks(PH_CONTROL, 2, rank_control, scaled_s(35), label, NULL);
    rank_t *a = &sh->r[PH_CONTROL][0], *b = &sh->r[PH_CONTROL][1];
    if (!a->done || !b->done) return;   /* reported by run_ranks */
    printf("ok   [%s] the connection within one namespace uses Reno (the namespace's default: %s)\n", label, g_cc[0] ? g_cc : "not set");
    if (a->shm_lines == 1 && b->shm_lines == 1 && a->shm_n == 1 && b->shm_n == 1)
        printf("ok   [%s] 2 ranks in one namespace log \"%s\" (so the logger hook sees that line)\n", label, a->shm_text);
    else if (a->shm_lines == 0 && b->shm_lines == 0)
        skip_check(label, "2 ranks in one namespace log \"shared memory with 1 rank(s)\"",
                   "they logged no such line (no shared memory on this machine?), so the TCP checks below only show "
                   "that no rank used shared memory, not that the namespaces were what kept it off", 1);
    else {
        printf("FAIL [%s] 2 ranks in one namespace: %d and %d \"shared memory with\" line(s), N = %d and %d (\"%s\"); "
               "the TCP check below cannot rely on that line\n", label, a->shm_lines, b->shm_lines, a->shm_n, b->shm_n, a->shm_text);
        g_failures++;
    }
}

/* ---- setup -------------------------------------------------------------- */
static void skip_exit(const char *fmt, ...) {
    va_list ap;
    char why[800];
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    cleanup();
    printf("skipped: %s\n", why);
    exit(77);
}

static void setup(void) {
    char out[600];
    int rc;
    unsigned pid = (unsigned)getpid();
    snprintf(g_subnet, sizeof g_subnet, "10.%u.%u", 100 + pid % 150, (pid / 150) % 250);
    for (int i = 0; i < NR; i++) snprintf(g_ns[i], sizeof g_ns[i], NS_PREFIX "%u-%d", pid, i);
    snprintf(g_ns[NR], sizeof g_ns[NR], NS_PREFIX "%u-h", pid);
    for (int i = 0; i <= NR; i++) {
        rc = run_cmd(out, sizeof out, "ip netns add %s", g_ns[i]);
        if (rc != 0) skip_exit("`ip netns add %s` failed (%d): %s", g_ns[i], rc, out[0] ? out : "no output");
        g_ns_made[i] = 1;
    }
    const char *h = g_ns[NR];
    if (run_cmd(out, sizeof out, "ip -n %s link add br0 type bridge", h) != 0) skip_exit("cannot make a bridge: %s", out);
    if (must("setup", "ip -n %s link set dev br0 up", h) || must("setup", "ip -n %s link set dev lo up", h)) exit(1);
    for (int r = 0; r < NR; r++) {
        if (run_cmd(out, sizeof out, "ip -n %s link add v%d type veth peer name eth0 netns %s", h, r, g_ns[r]) != 0)
            skip_exit("cannot make a veth pair: %s", out);
        if (must("setup", "ip -n %s link set dev v%d master br0", h, r) || must("setup", "ip -n %s link set dev v%d up", h, r) ||
            must("setup", "ip -n %s link set dev lo up", g_ns[r]) ||
            must("setup", "ip -n %s addr add %s.%d/24 dev eth0", g_ns[r], g_subnet, r + 1) ||
            must("setup", "ip -n %s link set dev eth0 up", g_ns[r]))
            exit(1);
    }
    /* A default other than Reno, so the mesh's choice for same-host
       connections can be told apart from it. */
    for (int i = 0; i < 2 && !g_cc[0]; i++) {
        const char *cc = i == 0 ? "cubic" : "bbr";
        int okk = 1;
        for (int r = 0; r < NR && okk; r++)
            okk = run_cmd(NULL, 0, "ip netns exec %s sh -c 'echo %s > /proc/sys/net/ipv4/tcp_congestion_control'", g_ns[r], cc) == 0;
        if (okk) snprintf(g_cc, sizeof g_cc, "%s", cc);
    }
    /* can a process enter them? */
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) { child_start(); _exit(enter_ns(g_ns[0]) == 0 ? 0 : 1); }
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) skip_exit("setns() into a network namespace is not permitted here");
    printf("netns: ranks 0..%d in namespaces %s..%d at %s.1..%d/24 (eth0), veth to bridge br0 in %s\n", NR - 1, g_ns[0], NR - 1,
           g_subnet, NR, h);
}

int main(void) {
    test_start();
    g_parent = getpid();
    UNSET_ENV(LAUNCHER_ENV);
    UNSET_ENV("DIST_TRANSPORT");
    if (geteuid() != 0) { printf("skipped: needs root (network namespaces, veth, a bridge); CI runs it as root\n"); return 77; }
    {
        char out[300];
        int rc = run_cmd(out, sizeof out, "ip -V");
        if (rc != 0) { printf("skipped: iproute2's `ip` is not available (%s); `make deps` installs it\n", rc == 127 ? "not installed" : out); return 77; }
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    memset(sh, 0, sizeof *sh);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    atexit(cleanup);
    alarm((unsigned)scaled_s(80));   /* the overall deadline (the runner's is 90 s) */
    int64_t t0 = now_ns();

    remove_leftovers();
    setup();
    phase_control();
    phase_clean();
    phase_impaired();
    phase_linkdown();

    alarm(0);
    cleanup();
    printf("%d failed, %d skipped, %.1f s%s%s\n", g_failures, g_skips, secs_since(t0), g_skips ? "; SKIPPED: " : "", g_skips ? g_skip_list : "");
    return g_failures ? 1 : 0;
}
