// TIMEOUT: 240
// ALONE: which rank is blamed rests on timing: a rank starved by another test would be
// TRANSPORTS: auto tcp
// WINDOWS: no, its cases stop ranks with SIGSTOP to make them the ones blamed
/* test_blame.c - do failures name the right rank?  In jobs of 8 ranks one
   rank, the culprit, dies (SIGKILL) or stops (SIGSTOP, past the timeout)
   inside a collective; every other rank's error sentence
   (dist_error_message of the communicator) must name it: "rank C" as a
   whole word (names_rank).  The requirement: when a member dies, every
   pending operation of a collective that involves it fails with its
   death, sends included (100% of the survivors' sentences name the killed
   rank); a stall names the rank that stopped (at least 95% of the others'
   sentences).

   How a case runs.  The parent forks 8 ranks (fork + dist_init over
   tcp://127.0.0.1, rank 0 on a listening socket made just before the
   fork; cfg.timeout_ms = TMO: 3 s for the kill cases, 2 s for the stall
   cases, x DIST_TIMEOUT_SCALE).  Each rank makes two small collectives
   that succeed (every connection is up), then the call under test.  The
   ranks record their result, its sentence and CLOCK_MONOTONIC times in a
   MAP_SHARED table made before the fork; the parent judges.  Every rank
   other than the culprit calls dist_destroy as soon as its call has
   failed (as a program that gives up would), without waiting for the
   others: a rank still waiting then sees a peer that has shut down, and
   its sentence must still blame the culprit, not that peer.  Every rank
   arms alarm(); the parent kills a job that outlives its deadline.

   Kill cases (cfg.timeout_ms 3 s; C dies by SIGKILL, from raise() after
   recording the moment, or from its timer, whose expiry is the moment):
     during  the survivors are inside the call (they said so in shared
             memory 150 ms earlier); C never enters it.
     mid     the survivors are inside; C enters last, arms a POSIX timer
             that sends it SIGKILL a few ms later (the kernel delivers it
             on time however loaded the CPUs: a helper thread woken to do
             it was seen 200 ms late), and a helper thread kills it
             sooner, at the first bytes that land in its output (not
             under ThreadSanitizer, where watching a buffer being written
             is a race); for a root that only sends, its successor in the
             chain watches its own buffer and kills C there.  C's own
             call must not have returned by then.
   all_gather 4 MiB a rank (32 MiB out; C = 1 and 7), all_reduce 32 MiB
   (the transport's algorithm, C = 3 and 7; DIST_ALGO=ring, C = 0),
   broadcast 32 MiB from rank 0 (C = 1, the chain's first non-root: every
   survivor waits on it or sends to it; C = 0, the root), reduce_scatter
   4 MiB blocks (C = 3), all_to_all 2 MiB blocks (C = 7), all mid; and
   all_reduce, all_gather, all_to_all and reduce_scatter of 4 KiB killed
   during (C = 0, 3, 1, 7).  Large buffers are an eighth under
   ThreadSanitizer.  Each case is chosen so that every survivor needs C
   until C dies: every survivor's call must fail, within TMO + 2 s of the
   death, with a sentence naming C.  One exception, mid-transfer only: a
   survivor whose call returns DIST_OK with its whole output right (in an
   all_to_all, C's block to it may have come before C died; in principle
   the last steps of a ring too) needed nothing more from C; it is
   reported ("completed") and has no sentence to count.  A completion
   with a wrong output, or any completion in the other cases, fails the
   case.

   Stall cases (cfg.timeout_ms 2 s; C stops itself with raise(SIGSTOP),
   from its main thread at the call, or mid-transfer from a helper thread
   or a timer as above, and records the moment just before):
     at the call  C waits until the others are inside the call (100 ms
                  after they said so), then stops before making it.
     mid          C enters last and stops at the first bytes that land in
                  its output, or 5 ms in (its timer sends SIGSTOP).
   all_reduce 4 KiB (C = 0, at the call), all_reduce 32 MiB (the
   transport's algorithm, C = 3, and DIST_ALGO=ring, C = 6, mid),
   all_gather 2 MiB a rank (16 MiB out, C = 7, mid), broadcast 4 KiB
   with C the root (C = 3) and with C a leaf of rank 0's tree (C = 5),
   barrier (C = 1), reduce 4 KiB to root 4 (C = 6, an inner node), at the
   call.  Where the call needs nothing from C (a broadcast from another
   root to a rank not below C; a reduce on a rank that is not C's
   ancestor) it may complete; that rank then calls dist_barrier, which
   must fail.  Every other rank's first failure (DIST_ERR_TIMEOUT, or
   another error whose sentence names a rank) must come within TMO + 2 s
   of the stop (or of the call, if it began later); its sentence is the
   one counted.  Once they have all failed (or 2 x (TMO + 2 s) after the
   stop) the parent resumes C (SIGCONT: its call must return within
   TMO + 2 s, whatever it returns, and it destroys and exits 0) or kills
   it (SIGKILL), alternately.

   Output: one line per case, "ok   NAME (secs): N of 7 name rank C",
   with an example of a good sentence, or "FAIL NAME ..." and its
   problems, indented; below either, one line per distinct sentence that
   does not name C, with the ranks that got it.  Then the counts:
     kill: N of M survivor sentences name the killed rank (target 100%)
     stall: N of M sentences name the stopped rank (target >= 95%)
   (a rank whose call completed where it should have failed counts as a
   sentence that does not name the culprit), each distinct wrong sentence
   with the cases and ranks it came from, and the exit status: 0 when
   every case passed and both targets are met.  Two jobs at a time
   (BLAME_JOBS=1: one), at most one with large buffers; an argument runs
   only the cases whose name contains it ("K3 ", "stall").  About 12 s per
   transport on two cores. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "faultutil.h"

/* ThreadSanitizer sleeps 1 s in exit() by default: one second per rank. */
TSAN_NO_EXIT_SLEEP();

#define NR 8                      /* ranks in every job */
#define MAXJOBS 2
#define ALL_RANKS ((1u << NR) - 1)

static int TMO_KILL = 3000, TMO_STALL = 2000;    /* cfg.timeout_ms, scaled in main */
static double BOUND_KILL = 5.0, BOUND_STALL = 4.0;  /* TMO + 2 s, scaled */

/* ---- the cases ------------------------------------------------------------- */

enum { KILL, STALL };
enum { OP_ALLREDUCE, OP_ALLGATHER, OP_BCAST, OP_REDUCE, OP_REDSCAT, OP_ALLTOALL, OP_BARRIER };
static const char *const op_names[] = { "all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter", "all_to_all", "barrier" };
static const int op_bufs[] = { BUFS_IN_PLACE, BUFS_ALL_GATHER, BUFS_IN_PLACE, BUFS_IN_PLACE, BUFS_REDUCE_SCATTER, BUFS_ALL_TO_ALL,
                               BUFS_NONE };                 /* what each needs (alloc_bufs) */
_Static_assert(sizeof op_bufs / sizeof op_bufs[0] == sizeof op_names / sizeof op_names[0], "an op without its buffers");
enum { DURING, MID, AT_CALL };
enum { RESUME, KILLED };

typedef struct {
    const char *id;      /* "K1", "S3" */
    int kind, op;
    int culprit;         /* C: the rank that dies or stops */
    int when;            /* kill: DURING or MID; stall: AT_CALL or MID */
    size_t count;        /* float32 elements: the buffer, or one rank's block (all_gather, reduce_scatter, all_to_all) */
    int root;            /* broadcast, reduce */
    const char *algo;    /* DIST_ALGO, or NULL */
    int delay_ms;        /* mid: the longest C stays alive (running) in its call */
    int after;           /* stall: RESUME (SIGCONT) or KILLED (SIGKILL) */
} bcase;

#define KiB(x) ((size_t)(x) * 256)          /* float32 elements in x KiB */
#define MiB(x) ((size_t)(x) << 18)

static const bcase cases[] = {
    /* kill, mid-transfer */
    { "K1", KILL, OP_ALLGATHER, 1, MID, MiB(4), 0, NULL, 5, 0 },
    { "K2", KILL, OP_ALLGATHER, 7, MID, MiB(4), 0, NULL, 5, 0 },
    { "K3", KILL, OP_ALLREDUCE, 3, MID, MiB(32), 0, NULL, 10, 0 },
    { "K4", KILL, OP_ALLREDUCE, 0, MID, MiB(32), 0, "ring", 10, 0 },
    { "K5", KILL, OP_ALLREDUCE, 7, MID, MiB(32), 0, NULL, 10, 0 },
    { "K6", KILL, OP_BCAST, 1, MID, MiB(32), 0, NULL, 5, 0 },
    { "K7", KILL, OP_BCAST, 0, MID, MiB(32), 0, NULL, 5, 0 },
    { "K8", KILL, OP_REDSCAT, 3, MID, MiB(4), 0, NULL, 5, 0 },
    { "K9", KILL, OP_ALLTOALL, 7, MID, MiB(2), 0, NULL, 5, 0 },
    /* kill, small, C never enters */
    { "K10", KILL, OP_ALLREDUCE, 0, DURING, KiB(4), 0, NULL, 0, 0 },
    { "K11", KILL, OP_ALLGATHER, 3, DURING, KiB(4), 0, NULL, 0, 0 },
    { "K12", KILL, OP_ALLTOALL, 1, DURING, KiB(4), 0, NULL, 0, 0 },
    { "K13", KILL, OP_REDSCAT, 7, DURING, KiB(4), 0, NULL, 0, 0 },
    /* stall */
    { "S1", STALL, OP_ALLREDUCE, 0, AT_CALL, KiB(4), 0, NULL, 0, RESUME },
    { "S2", STALL, OP_ALLREDUCE, 3, MID, MiB(32), 0, NULL, 5, KILLED },
    { "S3", STALL, OP_ALLREDUCE, 6, MID, MiB(32), 0, "ring", 5, RESUME },
    { "S4", STALL, OP_ALLGATHER, 7, MID, MiB(2), 0, NULL, 5, KILLED },
    { "S5", STALL, OP_BCAST, 3, AT_CALL, KiB(4), 3, NULL, 0, RESUME },
    { "S6", STALL, OP_BCAST, 5, AT_CALL, KiB(4), 0, NULL, 0, KILLED },
    { "S7", STALL, OP_BARRIER, 1, AT_CALL, 0, 0, NULL, 0, RESUME },
    { "S8", STALL, OP_REDUCE, 6, AT_CALL, KiB(4), 4, NULL, 0, KILLED },
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ThreadSanitizer slows copies and reductions several times over: a large
   collective is still mid-way a few milliseconds in with an eighth of the
   data. */
#ifdef UNDER_TSAN
#  define BIG_DIV 8
#else
#  define BIG_DIV 1
#endif
static int blocked(int op) { return op == OP_ALLGATHER || op == OP_REDSCAT || op == OP_ALLTOALL; }
/* The largest buffer of a rank, in elements, before the TSan division. */
static size_t biggest(const bcase *k) { return blocked(k->op) ? k->count * NR : k->count; }
static size_t cnt(const bcase *k) { return biggest(k) >= MiB(4) ? k->count / BIG_DIV : k->count; }
/* Case i has large buffers (at most one such job runs at a time). */
static int heavy(int i) { return biggest(&cases[i]) >= MiB(4); }

static void case_name(int idx, char *out, size_t cap) {
    const bcase *k = &cases[idx];
    char size[48] = "", extra[64] = "";
    size_t b = cnt(k) * 4;
    if (k->op != OP_BARRIER) {
        if (b >= ((size_t)1 << 20)) snprintf(size, sizeof size, " %zu MiB", b >> 20);
        else snprintf(size, sizeof size, " %zu KiB", b >> 10);
        if (blocked(k->op)) snprintf(size + strlen(size), sizeof size - strlen(size), " a rank");
    }
    if (k->op == OP_BCAST) snprintf(extra, sizeof extra, " from %d", k->root);
    if (k->op == OP_REDUCE) snprintf(extra, sizeof extra, " to %d", k->root);
    if (k->algo) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " DIST_ALGO=%s", k->algo);
    if (k->kind == KILL)
        snprintf(out, cap, "%s kill %s%s%s n=%d: rank %d dies %s", k->id, op_names[k->op], size, extra, NR, k->culprit,
                 k->when == MID ? "mid-transfer" : "while the others wait in the call");
    else
        snprintf(out, cap, "%s stall %s%s%s n=%d: rank %d stops %s, then %s", k->id, op_names[k->op], size, extra, NR, k->culprit,
                 k->when == MID ? "mid-transfer" : "at the call", k->after == RESUME ? "SIGCONT" : "SIGKILL");
}

/* Binomial trees (broadcast and reduce of small messages): whether world
   rank a is an ancestor of world rank b in the tree rooted at root (the
   parent of virtual rank v is v with its lowest set bit cleared). */
static int tree_ancestor(int a, int b, int root) {
    int va = ((a - root) % NR + NR) % NR, vb = ((b - root) % NR + NR) % NR;
    while (vb != 0) {
        vb &= vb - 1;
        if (vb == va) return 1;
    }
    return 0;
}

/* Stall cases: may rank r's call complete, needing nothing from C? */
static int stall_may_complete(const bcase *k, int r) {
    if (k->op == OP_BCAST) return k->root != k->culprit && !tree_ancestor(k->culprit, r, k->root);
    if (k->op == OP_REDUCE) return r != k->root && !tree_ancestor(r, k->culprit, k->root);
    return 0;
}

/* ---- shared records ------------------------------------------------------- */

typedef struct {
    int ready, entering;
    call_rec call;                               /* the call under test */
    int whole;                                   /* it returned DIST_OK with the whole output */
    call_rec f;                                  /* stall: the barrier after a call that completed */
    destroy_rec destroy;
    atomic_int claimed;
    char fail[400];
} rrec;

typedef struct {
    int64_t event_ns;                     /* C, just before it died or stopped (0: see planned_ns) */
    int64_t planned_ns;                   /* mid: when C's timer kills or stops it, unless sooner */
    int64_t c_enter_ns;                   /* mid: when C entered its call */
    pid_t c_pid;
    int stopped;                          /* stall: C stopped */
    int resumed;                          /* stall: the parent resumed or killed C */
    int64_t resume_ns;
    int c_returned, c_res;                /* C's own call (mid: returned before its end?) */
    int64_t c_ret_ns;
    char c_msg[MSGLEN];
    rrec r[NR];
} jshared;

static jshared *g_sh;                     /* the job of this process (children) */
static const bcase *g_k;
DEFINE_FAIL_AT(NR, &g_sh->r[rank].claimed, g_sh->r[rank].fail)

/* ---- rank side ------------------------------------------------------------ */

static void die(void) {
    int64_t expect = 0;
    __atomic_compare_exchange_n(&g_sh->event_ns, &expect, now_ns(), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    raise(SIGKILL);
    for (;;) pause();
}

/* Stops this process (every thread). */
static void stop_self(void) {
    int64_t expect = 0;
    __atomic_compare_exchange_n(&g_sh->event_ns, &expect, now_ns(), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_sh->stopped, 1, __ATOMIC_SEQ_CST);
    raise(SIGSTOP);
}

/* Mid-transfer, C's end is a POSIX timer that sends SIGKILL or SIGSTOP to
   the process when it expires: the kernel delivers it on time however
   busy the CPUs are (a helper thread that sleeps and wakes to do it was
   seen 200 ms late on two loaded cores).  The helper below only makes the
   end come sooner, at the first landed bytes.  C's main thread disarms
   the timer when its call returns. */
static timer_t g_timer;
static int g_timer_armed;

static int arm_timer(int sig, int ms) {
    struct sigevent ev;
    struct itimerspec its;
    memset(&ev, 0, sizeof ev);
    memset(&its, 0, sizeof its);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = sig;
    if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer) != 0) return -1;
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    __atomic_store_n(&g_sh->planned_ns, now_ns() + (int64_t)ms * 1000000, __ATOMIC_SEQ_CST);
    if (timer_settime(g_timer, 0, &its, NULL) != 0) { timer_delete(g_timer); return -1; }
    g_timer_armed = 1;
    return 0;
}

static void disarm_timer(void) {
    if (__atomic_exchange_n(&g_timer_armed, 0, __ATOMIC_SEQ_CST)) timer_delete(g_timer);
}

/* C watches the blocks of its output at 16 points each (watch_t: a copy
   need not begin at the start of a block) for the first bytes of a
   transfer to land. */
#define WATCH_POINTS 16

static watch_t g_watch;                  /* C's output blocks (at NULL: none) */

/* C's helper: at the first bytes landed, before the timer, C dies (kill)
   or stops (stall). */
static void *culprit_helper(void *p) {
    int64_t end = __atomic_load_n(&g_sh->planned_ns, __ATOMIC_SEQ_CST);
    (void)p;
    while (now_ns() < end && !__atomic_load_n(&g_sh->c_returned, __ATOMIC_SEQ_CST)) {
        if (landed(&g_watch)) {
            if (g_k->kind == KILL) die();
            /* stall: the timer must not stop C again after SIGCONT; if it
               fired already, the parent has resumed C (resumed is set
               before the SIGCONT) */
            disarm_timer();
            if (__atomic_load_n(&g_sh->resumed, __ATOMIC_SEQ_CST) || __atomic_load_n(&g_sh->c_returned, __ATOMIC_SEQ_CST)) return NULL;
            stop_self();
            return NULL;
        }
        sleep_us(20);
    }
    return NULL;
}

/* A survivor that receives first from a root C that only sends (the
   chain's successor) watches its own buffer and kills C when C's bytes
   start to land (C's own timer is the bound). */
#ifndef UNDER_TSAN
static rwatch_t g_rwatch;
#endif

/* What C watches for its first landed bytes (nothing where its output is
   written only at the end or it receives nothing). */
static void set_watch(const bcase *k, int rank, bufs_t *bf) {
    size_t c = cnt(k);
    memset(&g_watch, 0, sizeof g_watch);
#ifndef UNDER_TSAN   /* (watching a buffer while it is received is a race by design) */
    switch (k->op) {
    case OP_ALLREDUCE: g_watch = (watch_t){ bf->a, c / NR, NR, -1, (float)(rank + 1), WATCH_POINTS }; break;
    case OP_BCAST: if (rank != k->root) g_watch = (watch_t){ bf->a, c / NR, NR, -1, (float)(rank + 1), WATCH_POINTS }; break;
    case OP_ALLGATHER: case OP_ALLTOALL: g_watch = (watch_t){ bf->b, c, NR, rank, -1.0f, WATCH_POINTS }; break;
    default: break;
    }
#else
    (void)k; (void)rank; (void)bf; (void)c;
#endif
}

/* After a call that returned DIST_OK: 1 when its whole output is what it
   must be (every rank's buffer holds rank + 1; sums are 36). */
static int output_whole(const bcase *k, int rank, const bufs_t *bf) {
    size_t c = cnt(k);
    const float sum = (float)(NR * (NR + 1) / 2);
    switch (k->op) {
    case OP_ALLREDUCE: for (size_t i = 0; i < c; i++) if (bf->a[i] != sum) return 0; return 1;
    case OP_BCAST: for (size_t i = 0; i < c; i++) if (bf->a[i] != (float)(k->root + 1)) return 0; return 1;
    case OP_REDUCE:
        if (rank != k->root) return 1;        /* its buffer stays as it was */
        for (size_t i = 0; i < c; i++) if (bf->a[i] != sum) return 0;
        return 1;
    case OP_REDSCAT: for (size_t i = 0; i < c; i++) if (bf->b[i] != sum) return 0; return 1;
    case OP_ALLGATHER: case OP_ALLTOALL:
        for (size_t i = 0; i < c * NR; i++) if (bf->b[i] != (float)(i / c + 1)) return 0;
        return 1;
    default: return 1;
    }
}

static dist_result run_call(const bcase *k, int op, dist_t *w, bufs_t *bf) {
    size_t n = cnt(k);
    switch (op) {
    case OP_ALLREDUCE: return dist_all_reduce(w, bf->a, n, DIST_FLOAT32, DIST_SUM);
    case OP_ALLGATHER: return dist_all_gather(w, bf->a, bf->b, n, DIST_FLOAT32);
    case OP_BCAST: return dist_broadcast(w, bf->a, n, DIST_FLOAT32, k->root);
    case OP_REDUCE: return dist_reduce(w, bf->a, n, DIST_FLOAT32, DIST_SUM, k->root);
    case OP_REDSCAT: return dist_reduce_scatter(w, bf->a, bf->b, n, DIST_FLOAT32, DIST_SUM);
    case OP_ALLTOALL: return dist_all_to_all(w, bf->a, bf->b, n, DIST_FLOAT32);
    case OP_BARRIER: return dist_barrier(w);
    default: return DIST_ERR_INVALID;
    }
}

static void start_helper(void) {
    pthread_t th;
    if (!g_watch.at) return;
    if (pthread_create(&th, NULL, culprit_helper, NULL) == 0) pthread_detach(th);   /* (else: the timer) */
}

/* C's part: never returns in a kill case. */
static int culprit_main(const bcase *k, int rank, dist_t *w, bufs_t *bf) {
    rrec *me = &g_sh->r[rank];
    if (await_flags(&g_sh->r[0].entering, sizeof(rrec), ALL_RANKS & ~(1u << rank), scaled(15000)))
        return FAIL("the others never entered the call");
    if (k->kind == KILL && k->when == DURING) { sleep_ms(scaled(150)); die(); }
    if (k->kind == STALL && k->when == AT_CALL) {
        sleep_ms(scaled(100));
        stop_self();                      /* ... until SIGCONT (or SIGKILL) */
    } else {                              /* mid: C enters last and dies or stops in its call */
        sleep_ms(30);
        set_watch(k, rank, bf);
        {
            int64_t t = now_ns();
            __atomic_store_n(&g_sh->c_pid, getpid(), __ATOMIC_SEQ_CST);
            if (arm_timer(k->kind == KILL ? SIGKILL : SIGSTOP, k->delay_ms) != 0) return FAIL("timer_create: %s", strerror(errno));
            __atomic_store_n(&g_sh->c_enter_ns, t, __ATOMIC_SEQ_CST);     /* (after planned_ns: the receiver watch reads both) */
        }
        start_helper();
    }
    call_begin(&me->call);
    call_end(&me->call, run_call(k, k->op, w, bf));
    disarm_timer();
    copy_msg(me->call.msg, me->call.res == DIST_OK ? "" : dist_error_message(w));
    g_sh->c_res = me->call.res;
    g_sh->c_ret_ns = me->call.t_ret;
    copy_msg(g_sh->c_msg, me->call.msg);
    __atomic_store_n(&g_sh->c_returned, 1, __ATOMIC_SEQ_CST);
    me->call.returned = 1;
    if (k->kind == KILL) die();                   /* too late to be mid-transfer (judged) */
    /* stall, resumed (SIGCONT): end */
    free_bufs(bf);
    destroy_timed(&me->destroy, w);
    return 0;
}

/* A rank of the job (job_start). */
static int rank_main(const fault_job *j, int rank, int port, int lfd) {
    const bcase *k = j->k;
    rrec *me = &((jshared *)j->sh)->r[rank];
    char url[64];
    dist_config cfg;
    dist_t *w = NULL;
    dist_result res;
    bufs_t bf;
    float f[4] = { 1, 2, 3, 4 };
    g_sh = j->sh;
    g_k = k;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, NR, rank, k->kind == KILL ? TMO_KILL : TMO_STALL, lfd);
    if (k->algo) setenv("DIST_ALGO", k->algo, 1);
    alarm((unsigned)(scaled_s(40) + 0.5));
    if ((res = dist_init(&w, &cfg)) != DIST_OK) return FAIL("dist_init: %s: %s", dist_result_name(res), dist_error_message(NULL));
    /* warm-up: every connection up, and the call under test is #3 */
    OK(dist_all_reduce(w, f, 4, DIST_FLOAT32, DIST_MAX));
    OK(dist_barrier(w));
    if (alloc_bufs(&bf, op_bufs[k->op], cnt(k), NR, rank, 0) != 0) return FAIL("out of memory");
    set_flag(&me->ready);
    if (await_flags(&g_sh->r[0].ready, sizeof(rrec), ALL_RANKS, scaled(15000))) return FAIL("not every rank got ready");

    if (rank == k->culprit) return culprit_main(k, rank, w, &bf);

#ifndef UNDER_TSAN
    if (k->kind == KILL && k->when == MID && k->op == OP_BCAST && k->culprit == k->root && rank == (k->root + 1) % NR) {
        g_rwatch = (rwatch_t){ { bf.a, cnt(k) / NR, NR, -1, (float)(rank + 1), WATCH_POINTS }, &g_sh->event_ns, &g_sh->c_enter_ns,
                               &g_sh->planned_ns, &g_sh->c_pid, scaled(2000) };
        start_receiver_watch(&g_rwatch);
    }
#endif
    set_flag(&me->entering);
    call_begin(&me->call);
    res = run_call(k, k->op, w, &bf);
    call_end(&me->call, res);
    copy_msg(me->call.msg, res == DIST_OK ? "" : dist_error_message(w));
    if (res == DIST_OK) me->whole = output_whole(k, rank, &bf);
    if (k->kind == STALL && res == DIST_OK) {     /* it needed nothing from C: the next collective does */
        call_begin(&me->f);
        call_end(&me->f, dist_barrier(w));
        copy_msg(me->f.msg, me->f.res == DIST_OK ? "" : dist_error_message(w));
        me->f.returned = 1;
    }
    set_flag(&me->call.returned);
#ifndef UNDER_TSAN
    stop_receiver_watch();
#endif
    free_bufs(&bf);
    destroy_timed(&me->destroy, w);               /* at once: the others may still be waiting */
    return 0;
}

/* ---- parent side ------------------------------------------------------------ */

static int g_cases, g_passed;
static int g_kill_named, g_kill_total, g_kill_completed, g_stall_named, g_stall_total;

/* The distinct sentences that did not name the culprit, with where they
   came from. */
#define MAXWRONG 128
static struct { char msg[MSGLEN]; char where[200]; int n; } g_wrong[MAXWRONG];
static int g_nwrong;

static void note_wrong(const char *id, int rank, const char *msg) {
    int i;
    char one[32];
    for (i = 0; i < g_nwrong && strcmp(g_wrong[i].msg, msg) != 0; i++) { }
    if (i == g_nwrong) {
        if (g_nwrong == MAXWRONG) return;
        snprintf(g_wrong[i].msg, MSGLEN, "%s", msg);
        g_wrong[i].where[0] = 0;
        g_nwrong++;
    }
    g_wrong[i].n++;
    snprintf(one, sizeof one, "%s%s r%d", g_wrong[i].where[0] ? "," : "", id, rank);
    if (strlen(g_wrong[i].where) + strlen(one) + 4 < sizeof g_wrong[i].where) strcat(g_wrong[i].where, one);
    else if (!strstr(g_wrong[i].where, "...")) strcat(g_wrong[i].where, ",...");
}

static int start_job(int slot, int idx) { return job_start(slot, idx, &cases[idx], NR, sizeof(jshared), 45, rank_main); }

/* When C died or stopped: what it recorded, else (mid) when its timer
   expired; 0: not yet. */
static int64_t event_time(jshared *sh) {
    int64_t e = __atomic_load_n(&sh->event_ns, __ATOMIC_SEQ_CST), p = __atomic_load_n(&sh->planned_ns, __ATOMIC_SEQ_CST);
    if (e) return e;
    return p && now_ns() >= p ? p : 0;
}

/* Moves a stall case on (resumes or kills C once the others have failed;
   the job's phase: 0 running, 1 C resumed or killed); reaps.  1 when the
   whole job has ended. */
static int poll_job(int slot) {
    fault_job *j = &g_jobs[slot];
    const bcase *k = j->k;
    jshared *sh = j->sh;
    int c = k->culprit;
    int64_t ev = event_time(sh);
    if (k->kind == STALL && j->phase == 0 && ev && !j->reaped[c]) {
        int all = 1;
        for (int r = 0; r < NR; r++)
            if (r != c && !j->reaped[r] && !__atomic_load_n(&sh->r[r].call.returned, __ATOMIC_SEQ_CST)) all = 0;
        if (all || now_ns() - ev > (int64_t)(BOUND_STALL * 2e9)) {
            sh->resume_ns = now_ns();
            __atomic_store_n(&sh->resumed, 1, __ATOMIC_SEQ_CST);    /* first: C's helper looks at it */
            if (k->after == KILLED) kill(j->pid[c], SIGKILL);
            else kill(j->pid[c], SIGCONT);
            j->phase = 1;
        }
    }
    return job_reaped(slot);
}

/* Problems of the case being judged, printed under its line. */
static char g_probs[40][600];
static int g_nprobs;

static void prob(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void prob(const char *fmt, ...) {
    va_list ap;
    if (g_nprobs == 40) return;
    va_start(ap, fmt);
    vsnprintf(g_probs[g_nprobs++], sizeof g_probs[0], fmt, ap);
    va_end(ap);
}

static const char *rname(int res) { return dist_result_name((dist_result)res); }

static void judge_job(int slot) {
    fault_job *j = &g_jobs[slot];
    const bcase *k = j->k;
    jshared *sh = j->sh;
    int64_t ev = event_time(sh);
    int c = k->culprit, named = 0, total = 0, kill = k->kind == KILL, completed = 0;
    char compl[40] = "";
    double bound = kill ? BOUND_KILL : BOUND_STALL, worst = -1;
    char name[200], good[MSGLEN] = "", info[300] = "";
    /* this case's wrong sentences: text, result, ranks */
    char wmsg[NR][MSGLEN], wranks[NR][40];
    int wres[NR], nw = 0;

    case_name(j->idx, name, sizeof name);
    g_cases++;
    g_nprobs = 0;
    if (j->hung) prob("still running after %.0f s: killed", scaled_s(45));
    for (int r = 0; r < NR; r++) {
        int st = j->st[r];
        if (st == -1) { prob("rank %d: fork or waitpid failed", r); continue; }
        if (r == c && (kill || k->after == KILLED)) {
            if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
                prob("rank %d (the culprit) %s %d instead of dying by SIGKILL", r, WIFSIGNALED(st) ? "died by signal" : "exited with",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        } else {
            status_bad(prob, r, st, sh->r[r].fail[0] ? "" : " (a sanitizer's report?)");
        }
        if (sh->r[r].fail[0]) prob("rank %d: %s", r, sh->r[r].fail);
    }
    if (!ev) prob("rank %d never %s", c, kill ? "got to its death" : "stopped");
    if (k->kind == STALL && k->when == AT_CALL && !sh->stopped) prob("rank %d never stopped", c);
    if (k->when == MID && sh->c_returned && (!ev || sh->c_ret_ns < ev))
        prob("not mid-transfer: rank %d's own call returned %s (\"%s\") before it %s", c, rname(sh->c_res), sh->c_msg,
             kill ? "was killed" : "could stop");
    if (k->when == MID && sh->c_enter_ns && ev)
        snprintf(info, sizeof info, "%s %.1f ms into its call; ", kill ? "killed" : "stopped",
                 (double)(ev - sh->c_enter_ns) / 1e6);

    for (int r = 0; r < NR && ev; r++) {
        rrec *rr = &sh->r[r];
        const call_rec *cr = &rr->call;
        int res, first_ok, named_this;
        int64_t t_enter, t_ret;
        const char *msg;
        double after;
        if (r == c) continue;
        if (rr->fail[0]) continue;               /* reported above */
        total++;
        if (!cr->called || !cr->returned) {
            prob("rank %d: its %s never %s", r, op_names[k->op], cr->called ? "returned" : "began");
            continue;
        }
        judge_destroy(prob, r, "", &rr->destroy, 1, bound, 1);
        /* the failure that counts: the call, or (stall) the barrier after it */
        res = cr->res; msg = cr->msg; t_enter = cr->t_enter; t_ret = cr->t_ret;
        first_ok = res == DIST_OK;
        if (first_ok) {
            double took = (double)(cr->t_ret - cr->t_enter) / 1e9;
            if (!rr->whole) prob("rank %d: its %s returned DIST_OK after %.2f s with a wrong output", r, op_names[k->op], took);
            if (kill && k->when == MID && rr->whole) {
                /* everything it needed from C had arrived before the
                   death (all_to_all: C's block came early): no sentence */
                total--;
                completed++;
                snprintf(compl + strlen(compl), sizeof compl - strlen(compl), "%s%d", compl[0] ? "," : "", r);
                continue;
            }
            if (kill && cr->t_ret < ev && k->when == MID)
                prob("rank %d: its %s returned DIST_OK %.0f ms before rank %d died, with a wrong output: not mid-transfer?", r,
                     op_names[k->op], (double)(ev - cr->t_ret) / 1e6, c);
            else if (kill)
                prob("rank %d: its %s returned DIST_OK after %.2f s (%.0f ms %s the death), but it needs rank %d", r, op_names[k->op], took,
                     fabs((double)(cr->t_ret - ev) / 1e6), cr->t_ret < ev ? "before" : "after", c);
            else if (!stall_may_complete(k, r) && k->when == MID && cr->t_ret < ev)
                prob("rank %d: its %s returned DIST_OK %.0f ms before rank %d stopped: not mid-transfer (the stop came too late)", r,
                     op_names[k->op], (double)(ev - cr->t_ret) / 1e6, c);
            else if (!stall_may_complete(k, r))
                prob("rank %d: its %s returned DIST_OK after %.2f s, but it needs rank %d", r, op_names[k->op], took, c);
            if (!kill) {
                if (!rr->f.called || !rr->f.returned) { prob("rank %d: the barrier after its %s never returned", r, op_names[k->op]); continue; }
                res = rr->f.res; msg = rr->f.msg; t_enter = rr->f.t_enter; t_ret = rr->f.t_ret;
                if (res == DIST_OK) prob("rank %d: the barrier after its %s returned DIST_OK, but it needs rank %d", r, op_names[k->op], c);
            }
        }
        if (res == DIST_OK) {
            if (nw < NR) { snprintf(wmsg[nw], MSGLEN, "(completed)"); wres[nw] = DIST_OK; snprintf(wranks[nw], 40, "%d", r); nw++; }
            note_wrong(k->id, r, "(the call completed: no sentence)");
            continue;
        }
        if (!msg[0]) prob("rank %d: %s with an empty dist_error_message", r, rname(res));
        else if (!kill && res != DIST_ERR_TIMEOUT && !strstr(msg, "rank "))
            prob("rank %d: %s, and \"%s\" names no rank", r, rname(res), msg);
        named_this = names_rank(msg, c);
        if (named_this) {
            named++;
            if (!good[0]) snprintf(good, sizeof good, "%s", msg);
        } else {
            int i;
            for (i = 0; i < nw && !(strcmp(wmsg[i], msg) == 0 && wres[i] == res); i++) { }
            if (i == nw && nw < NR) { snprintf(wmsg[nw], MSGLEN, "%s", msg); wres[nw] = res; wranks[nw][0] = 0; nw++; }
            if (i < nw) snprintf(wranks[i] + strlen(wranks[i]), 40 - strlen(wranks[i]), "%s%d", wranks[i][0] ? "," : "", r);
            note_wrong(k->id, r, msg);
            if (kill) prob("rank %d: %s \"%s\" does not name rank %d", r, rname(res), msg, c);
        }
        /* in time: from the death or stop, or from the call if it began later */
        after = (double)(t_ret - (t_enter > ev ? t_enter : ev)) / 1e9;
        if (after > worst) worst = after;
        if (after > bound)
            prob("rank %d: failed %.2f s after the %s (bound: timeout %.1f s + 2 s%s)", r, after, kill ? "death" : "stop",
                 (kill ? TMO_KILL : TMO_STALL) / 1000.0, g_scale > 1 ? ", scaled" : "");
        if (!kill && t_ret < ev)
            prob("rank %d: failed %.0f ms before rank %d stopped: %s \"%s\"", r, (double)(ev - t_ret) / 1e6, c, rname(res), msg);
    }
    if (completed)
        snprintf(info + strlen(info), sizeof info - strlen(info), "rank%s %s completed (whole output: what it needed from rank %d had come); ",
                 completed > 1 ? "s" : "", compl, c);
    if (!kill && k->after == RESUME && sh->resume_ns) {
        const rrec *rr = &sh->r[c];
        judge_resumed(prob, c, op_names[k->op], &rr->call, &rr->destroy, sh->resume_ns, bound);
        if (rr->call.returned)
            snprintf(info + strlen(info), sizeof info - strlen(info), "resumed rank %d: %s; ", c, rname(rr->call.res));
    }
    if (kill) { g_kill_named += named; g_kill_total += total; g_kill_completed += completed; }
    else { g_stall_named += named; g_stall_total += total; }

    if (!g_nprobs) g_passed++;
    else g_failed++;
    printf("%s %s (%.2f s): %d of %d name rank %d; %sslowest %.2f s%s%s%s\n", g_nprobs ? "FAIL" : "ok  ", name, secs_since(j->t0), named,
           total, c, info, worst, good[0] ? "; e.g. \"" : "", good, good[0] ? "\"" : "");
    for (int i = 0; i < g_nprobs; i++) printf("     %s\n", g_probs[i]);
    for (int i = 0; i < nw; i++)
        printf("     not naming rank %d: rank%s %s: %s%s%s%s\n", c, strchr(wranks[i], ',') ? "s" : "", wranks[i],
               wres[i] == DIST_OK ? "completed" : rname(wres[i]), wres[i] == DIST_OK ? "" : " \"", wres[i] == DIST_OK ? "" : wmsg[i], wres[i] == DIST_OK ? "" : "\"");
    fflush(stdout);
    munmap(sh, sizeof *sh);
}

int main(int argc, char **argv) {
    job_pool pool = { .ncases = NCASES, .tick_ms = 2, .name = case_name, .heavy = heavy, .start = start_job, .poll = poll_job,
                      .finish = judge_job };
    int64_t t0 = now_ns();
    int kill_ok, stall_ok;
    fault_test_start();
    TMO_KILL = scaled(3000);
    TMO_STALL = scaled(2000);
    BOUND_KILL = TMO_KILL / 1000.0 + scaled_s(2);
    BOUND_STALL = TMO_STALL / 1000.0 + scaled_s(2);
    printf("# %d cases of %d ranks, transport %s; kill: cfg.timeout_ms %d, bound %.1f s; stall: cfg.timeout_ms %d, bound %.1f s\n",
           NCASES, NR, getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto", TMO_KILL, BOUND_KILL, TMO_STALL, BOUND_STALL);
    if (run_jobs(&pool, "BLAME_JOBS", MAXJOBS, argc, argv) != 0) return 1;
    kill_ok = g_kill_named == g_kill_total;
    stall_ok = g_stall_named * 100 >= g_stall_total * 95;
    if (g_nwrong) {
        printf("sentences that did not name the culprit (case and rank):\n");
        for (int i = 0; i < g_nwrong; i++) printf("  %dx \"%s\" (%s)\n", g_wrong[i].n, g_wrong[i].msg, g_wrong[i].where);
    }
    printf("kill: %d of %d survivor sentences name the killed rank (%.1f%%, target 100%%)%s", g_kill_named, g_kill_total,
           g_kill_total ? 100.0 * g_kill_named / g_kill_total : 100.0, kill_ok ? "" : " - MISSED");
    if (g_kill_completed) printf("; %d more survivor%s completed mid-transfer with a whole output", g_kill_completed, g_kill_completed > 1 ? "s" : "");
    printf("\n");
    printf("stall: %d of %d sentences name the stopped rank (%.1f%%, target >= 95%%)%s\n", g_stall_named, g_stall_total,
           g_stall_total ? 100.0 * g_stall_named / g_stall_total : 100.0, stall_ok ? "" : " - MISSED");
    printf("blame: %d cases, %d passed (%.1f s)\n", g_cases, g_passed, secs_since(t0));
    return g_cases && g_passed == g_cases && kill_ok && stall_ok ? 0 : 1;
}
