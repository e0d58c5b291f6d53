// TIMEOUT: 240
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_leave.c - a rank that finished a collective and leaves at once
   does not fail the others' same collective.

   What a program does: the last step of a job is a barrier or an
   all_reduce, and one rank leaves as soon as its call returned (it
   aborts, exits without dist_destroy, or is killed), while the others
   are still inside the same call, waiting for the part it wrote just
   before it left.  What it wrote counts, as bytes sent before a close do
   over TCP: the others' call returns DIST_OK with the exact result.
   (Found under load in test_abort: rank 1 failed "barrier #2: rank 0
   closed its connection without saying goodbye" although every rank had
   arrived; the shared-memory wait failed for a lost member without
   looking at the counters once more.)

   Jobs of N=4 ranks forked here (tcp://127.0.0.1, transport from
   DIST_TRANSPORT: under auto the collectives run in shared memory).  In
   each: dist_init, a warm-up barrier, then the leaver sleeps 0-2 ms (so
   the others are waiting when it writes its part), and every rank makes
   the same call:
     barrier      dist_barrier
     small        dist_all_reduce of 16 int64 (sum), element i of rank r
                  being (r + 1) * (i + 1)
     large        dist_all_reduce of 256 Ki float (1 MiB; sum), element i
                  of rank r being r + (i % 7), exact in float
     bcast        dist_broadcast of 64 KiB from the leaver
   then the leaver leaves: "abort" (dist_abort, dist_destroy, exit 0),
   "exit" (_exit(0), no destroy: testutil's end_self) or "kill" (SIGKILL itself; on Windows
   testutil's kill_self).  The leaver is rank 0 (which also hosts the
   store) or rank 3, and waiting ranks sleep (spin_us -1) in half the
   repetitions and poll (the default spin) in the other half.  Each
   combination runs LEAVE_REPS times (default 4; 2 on Windows, where a
   rank is a new process): 4 calls x 3 ways x 2 leavers x REPS jobs.

   Checks, per combination: in every job the leaver's call returned
   DIST_OK with the exact result, and every other rank's call too, with
   its exact result; every rank exited as it should (the leaver killed by
   SIGKILL when so asked, all else 0) within the time limit.
   LEAVE_ONLY=TEXT runs the combinations whose name contains TEXT;
   LEAVE_DEBUG=1 prints the library's log lines. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define N 4
#define TMO_MS 10000
#define SMALL 16
#define LARGE (256 * 1024)
#define BCAST (64 * 1024)

enum { OP_BARRIER, OP_SMALL, OP_LARGE, OP_BCAST, NOPS };
enum { HOW_ABORT, HOW_EXIT, HOW_KILL, NHOWS };
static const char *op_name[NOPS] = { "barrier", "small", "large", "bcast" };
static const char *how_name[NHOWS] = { "abort", "exit", "kill" };

typedef struct {
    atomic_int claimed;
    char fail[700];
} rank_rec;

typedef struct {
    rank_rec r[N];
    int killed;
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(N, &sh->r[rank].claimed, sh->r[rank].fail)

typedef struct {
    int op, how, leaver, spin_us, delay_us;
} job_t;

/* The call, and whether its result is exact (a FAIL otherwise). */
static int do_call(int rank, dist_t *w, const job_t *j) {
    static int64_t small[SMALL];
    static float large[LARGE];
    static uint8_t bc[BCAST];
    const char *who = rank == j->leaver ? "the leaver's" : "a waiting rank's";
    dist_result r = DIST_OK;
    switch (j->op) {
    case OP_BARRIER:
        r = dist_barrier(w);
        break;
    case OP_SMALL:
        for (int i = 0; i < SMALL; i++) small[i] = (int64_t)(rank + 1) * (i + 1);
        r = dist_all_reduce(w, small, SMALL, DIST_INT64, DIST_SUM);
        break;
    case OP_LARGE:
        for (int i = 0; i < LARGE; i++) large[i] = (float)(rank + i % 7);
        r = dist_all_reduce(w, large, LARGE, DIST_FLOAT32, DIST_SUM);
        break;
    case OP_BCAST:
        if (rank == j->leaver) fill_bytes(bc, BCAST, 77);
        else memset(bc, 0, BCAST);
        r = dist_broadcast(w, bc, BCAST, DIST_UINT8, j->leaver);
        break;
    }
    if (r != DIST_OK)
        return FAIL("%s %s -> %s (rank %d left after its own call returned): %s", who, op_name[j->op], dist_result_name(r), j->leaver,
                    dist_error_message(w));
    if (j->op == OP_SMALL)
        for (int i = 0; i < SMALL; i++)
            if (small[i] != (int64_t)N * (N + 1) / 2 * (i + 1))
                return FAIL("%s all_reduce: element %d is %lld, not %lld", who, i, (long long)small[i], (long long)N * (N + 1) / 2 * (i + 1));
    if (j->op == OP_LARGE)
        for (int i = 0; i < LARGE; i++)
            if (large[i] != (float)(N * (N - 1) / 2 + N * (i % 7)))
                return FAIL("%s all_reduce: element %d is %g, not %d", who, i, (double)large[i], N * (N - 1) / 2 + N * (i % 7));
    if (j->op == OP_BCAST) {
        size_t bad = check_bytes(bc, BCAST, 77);
        if (bad != SIZE_MAX) return FAIL("%s broadcast: byte %zu differs", who, bad);
    }
    return 0;
}

/* LEAVE_DEBUG: the library's log lines, with the rank. */
static void debug_log(dist_log_level level, const char *message, void *user) {
    fprintf(stderr, "leave-debug: rank %d L%d %s\n", *(const int *)user, (int)level, message);
}

static int rank_main(int rank, int port, int lfd, void *p) {
    const job_t *j = (const job_t *)p;
    char url[64];
    dist_t *w = NULL;
    dist_config cfg;
    int bad;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, N, rank, scaled(TMO_MS), lfd);
    cfg.spin_us = j->spin_us;
    if (getenv("LEAVE_DEBUG")) { cfg.logger.func = debug_log; cfg.logger.user = &rank; cfg.log_level = DIST_LOG_DEBUG; }
    rank_alarm((unsigned)(scaled_s(30) + 0.5));
    OK(dist_init(&w, &cfg));
    OK(dist_barrier(w));
    if (rank == j->leaver && j->delay_us) sleep_us(j->delay_us);
    bad = do_call(rank, w, j);
    if (rank == j->leaver && !bad) {
        fflush(NULL);
        switch (j->how) {
        case HOW_ABORT: dist_abort(w); dist_destroy(w); return 0;
        /* (end_self: _exit; on Windows its threads parked and sockets shut
           first, as ExitProcess, and TerminateProcess of itself too, hung
           now and then under Wine with rank 0's store thread in WSAPoll) */
        case HOW_EXIT: end_self(0); return 0;
        case HOW_KILL: __atomic_store_n(&sh->killed, 1, __ATOMIC_SEQ_CST); kill_self(); return 9;
        }
    }
    /* a waiting rank (or a leaver that failed) ends without waiting for anyone */
    dist_abort(w);
    dist_destroy(w);
    return bad;
}

int main(void) {
    int reps;
    int64_t t_all = now_ns();
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
#ifdef _WIN32
    reps = env_int("LEAVE_REPS", 1, 1000, 2);
#else
    reps = env_int("LEAVE_REPS", 1, 1000, 4);
#endif
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    printf("leave: %d ranks, transport %s; each combination %d times\n", N, getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto", reps);
    for (int op = 0; op < NOPS; op++)
        for (int how = 0; how < NHOWS; how++)
            for (int li = 0; li < 2; li++) {
                char name[96];
                int64_t t0 = now_ns();
                int leaver = li ? N - 1 : 0;
                snprintf(name, sizeof name, "%s, then rank %d leaves (%s)", op_name[op], leaver, how_name[how]);
                if (getenv("LEAVE_ONLY") && !strstr(name, getenv("LEAVE_ONLY"))) continue;
                case_begin(name);
                /* (every repetition runs, failed or not: on Windows a rank
                   replays main up to its own job, and a job the case's
                   kill left "unkilled" there must not end the loop early) */
                for (int k = 0; k < reps; k++) {
                    job_t j = { op, how, leaver, k % 2 ? 0 : -1, (int)(mix64((uint64_t)(op * 100 + how * 10 + li) * 1000 + (uint64_t)k) % 2001) };
                    if (first_process()) memset(sh, 0, sizeof *sh);
                    if (run_workers(N, rank_main, &j, 40, how == HOW_KILL ? leaver : -1, &sh->killed) != 0) break;
                    if (!first_process()) continue;
                    for (int r = 0; r < N; r++)
                        if (sh->r[r].fail[0]) case_bad("job %d (waiting ranks %s): rank %d: %s", k + 1, j.spin_us < 0 ? "sleep" : "poll", r, sh->r[r].fail);
                }
                case_end(secs_since(t0), NULL);
            }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t_all));
    return g_failed ? 1 : 0;
}
