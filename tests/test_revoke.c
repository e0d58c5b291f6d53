// TIMEOUT: 240
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_revoke.c - one rank interrupts every pending operation on a
   communicator, on every member (dist_revoke); the members then agree and
   shrink on it and go on.

   Jobs of N=4 ranks started here (tcp://127.0.0.1, rank 0 hosting the
   store; transport from DIST_TRANSPORT: under auto, shared memory).  The
   revoker is rank R (3 unless said), which sleeps 100 ms so that the
   others are waiting when it revokes.  Cases:
     recv          the others wait in dist_recv from each other (a ring
                   among them: nobody sends);
     small, large, bcast, barrier
                   the others wait in a collective the revoker never calls:
                   all_reduce of 16 int64, all_reduce of 256 Ki float,
                   broadcast of 1 MiB from the revoker, barrier;
     nonblocking   rank 1 has an irecv from rank 0 and an isend of 4 MiB
                   to rank 2 (which never receives it) pending, and polls
                   dist_test; ranks 0 and 2 wait in dist_recv;
     forwarded     the revoker tells only rank 1 (the library's test hook:
                   as if it died right after): the others learn it from
                   rank 1;
     revoker dies  as forwarded, and the revoker then kills itself: the
                   survivors shrink to three;
     all at once   every rank revokes at the same moment;
     loop          every rank runs all_reduce after all_reduce with no
                   barrier (sum of the ranks' step numbers: exact); rank 2
                   revokes after its step 50; the others fail in step 50 or
                   51.
   Checks, on every rank that waited: its call failed with
   DIST_ERR_REVOKED, and its sentence names the revoker, within 2 s of the
   revoke (the timeout is 10 s); dist_revoked() says so; an all_reduce on
   the revoked communicator fails at once (under 0.5 s) with
   DIST_ERR_REVOKED; then dist_agree on it returns the AND of every live
   rank's flags and their number, dist_shrink gives a communicator of the
   live ranks in order, and 100 all_reduce (exact) run on it, with
   point-to-point ring exchanges between them.  The nonblocking requests
   complete (dist_test) with DIST_ERR_REVOKED.  Prints the time from the
   revoke to the last rank out.  REVOKE_ONLY=TEXT runs the cases whose
   name contains TEXT. */
/* (the implementation is compiled here, with the test hooks) */
#define DIST_IMPLEMENTATION
#define DIST_TEST_HOOKS
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
#define BCAST (1024 * 1024)
#define BIG (4 * 1024 * 1024)
#define LOOP_AT 50

enum { C_RECV, C_SMALL, C_LARGE, C_BCAST, C_BARRIER, C_NONBLOCKING, C_FORWARDED, C_DIES, C_ALL, C_LOOP, NCASES };
static const char *case_name[NCASES] = {
    "recv: the others wait in dist_recv",
    "small: the others wait in an all_reduce of 16 int64",
    "large: the others wait in an all_reduce of 256 Ki float",
    "bcast: the others wait in a broadcast of 1 MiB from the revoker",
    "barrier: the others wait in a barrier",
    "nonblocking: an irecv and a 4 MiB isend pending, polled with dist_test",
    "forwarded: the revoker tells rank 1 only",
    "revoker dies: it tells rank 1 only, then is killed",
    "all at once: every rank revokes",
    "loop: all_reduce after all_reduce, rank 2 revokes after step 50",
};

typedef struct {
    atomic_int claimed;
    char fail[700];
    int64_t t_out;             /* when its interrupted call returned */
} rank_rec;

typedef struct {
    rank_rec r[N];
    int64_t t_revoke;
    int killed;
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(N, &sh->r[rank].claimed, sh->r[rank].fail)

typedef struct { int kind, revoker; } job_t;

/* A call that the revoke interrupted: it failed with DIST_ERR_REVOKED
   naming the revoker, within 2 s. */
static int interrupted(int rank, dist_t *w, const job_t *j, const char *what, dist_result r) {
    char who[32];
    sh->r[rank].t_out = now_ns();
    if (r != DIST_ERR_REVOKED) return FAIL("%s -> %s, wanted DIST_ERR_REVOKED: %s", what, dist_result_name(r), dist_error_message(w));
    snprintf(who, sizeof who, "rank %d revoked", j->kind == C_LOOP ? 2 : j->revoker);
    if (j->kind != C_ALL && !strstr(dist_error_message(w), who)) return FAIL("%s: the sentence does not say \"%s\": %s", what, who, dist_error_message(w));
    if (sh->t_revoke && now_ns() - sh->t_revoke > (int64_t)(scaled_s(2) * 1e9))
        return FAIL("%s returned %.2f s after the revoke", what, (double)(now_ns() - sh->t_revoke) / 1e9);
    return 0;
}

/* After the revoke: the communicator says so, an operation fails at once,
   agree and shrink work on it, and the shrunk one works. */
static int after(int rank, dist_t *w, const job_t *j, int nlive) {
    dist_t *s = NULL;
    uint64_t flags = ~(uint64_t)0 ^ ((uint64_t)1 << rank), want = ~(uint64_t)0;
    int64_t v[SMALL], t0;
    int alive = 0, me = 0;
    dist_result r;
    if (!dist_revoked(w)) return FAIL("dist_revoked is 0 after the revoke");
    t0 = now_ns();
    r = dist_all_reduce(w, v, SMALL, DIST_INT64, DIST_SUM);
    if (r != DIST_ERR_REVOKED) return FAIL("all_reduce on the revoked communicator -> %s: %s", dist_result_name(r), dist_error_message(w));
    if (now_ns() - t0 > (int64_t)(scaled_s(0.5) * 1e9)) return FAIL("all_reduce on the revoked communicator took %.2f s to fail", secs_since(t0));
    if ((r = dist_send(w, v, 1, DIST_INT64, (rank + 1) % N, 0)) != DIST_ERR_REVOKED)
        return FAIL("send on the revoked communicator -> %s", dist_result_name(r));
    if ((r = dist_agree(w, &flags, &alive)) != DIST_OK) return FAIL("agree on the revoked communicator: %s", dist_error_message(w));
    for (int g = 0; g < N; g++)
        if (!(j->kind == C_DIES && g == j->revoker)) want &= ~((uint64_t)1 << g);
    if (flags != want || alive != nlive) return FAIL("agree: flags %llx and %d alive, want %llx and %d", (unsigned long long)flags, alive,
                                                    (unsigned long long)want, nlive);
    if ((r = dist_shrink(w, &s)) != DIST_OK) return FAIL("shrink on the revoked communicator: %s", dist_error_message(w));
    if (dist_world_size(s) != nlive) return FAIL("the shrunk communicator has %d ranks, want %d", dist_world_size(s), nlive);
    for (int g = 0; g < rank; g++) me += !(j->kind == C_DIES && g == j->revoker);
    if (dist_rank(s) != me) return FAIL("rank %d is rank %d of the shrunk communicator, want %d", rank, dist_rank(s), me);
    for (int step = 0; step < 100; step++) {
        int64_t out = (int64_t)rank * 1000 + step, in = -1;
        int to = (dist_rank(s) + 1) % nlive, from = (dist_rank(s) + nlive - 1) % nlive;
        dist_req_t *q = NULL;
        for (int i = 0; i < SMALL; i++) v[i] = (int64_t)(me + 1) * (step + i);
        if ((r = dist_all_reduce(s, v, SMALL, DIST_INT64, DIST_SUM)) != DIST_OK) return FAIL("shrunk all_reduce %d: %s", step, dist_error_message(s));
        for (int i = 0; i < SMALL; i++)
            if (v[i] != (int64_t)nlive * (nlive + 1) / 2 * (step + i))
                return FAIL("shrunk all_reduce %d: element %d is %lld, want %lld", step, i, (long long)v[i], (long long)nlive * (nlive + 1) / 2 * (step + i));
        if (step % 10) continue;
        if (dist_irecv(s, &in, 1, DIST_INT64, from, 7, &q) != DIST_OK || dist_send(s, &out, 1, DIST_INT64, to, 7) != DIST_OK || dist_wait(q) != DIST_OK)
            return FAIL("shrunk ring exchange %d: %s", step, dist_error_message(s));
        if (in % 1000 != step) return FAIL("shrunk ring exchange %d: got %lld", step, (long long)in);
    }
    return dist_destroy(s) == DIST_OK ? 0 : FAIL("destroy the shrunk communicator: %s", dist_error_message(NULL));
}

static int rank_main(int rank, int port, int lfd, void *p) {
    const job_t *j = (const job_t *)p;
    static float large[LARGE];
    static uint8_t bc[BCAST], big[BIG];
    char url[64];
    dist_t *w = NULL;
    dist_config cfg;
    int64_t small[SMALL], x = 0;
    int bad = 0, nlive = j->kind == C_DIES ? N - 1 : N;
    dist_result r;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, N, rank, scaled(TMO_MS), lfd);
    rank_alarm((unsigned)(scaled_s(40) + 0.5));
    OK(dist_init(&w, &cfg));
    OK(dist_barrier(w));
    if (j->kind == C_LOOP) {
        for (int step = 0; step < 1000; step++) {
            for (int i = 0; i < SMALL; i++) small[i] = step + i;
            r = dist_all_reduce(w, small, SMALL, DIST_INT64, DIST_SUM);
            if (r != DIST_OK) {
                if (rank == 2) return FAIL("the revoker's step %d -> %s: %s", step, dist_result_name(r), dist_error_message(w));
                if (step != LOOP_AT && step != LOOP_AT + 1) return FAIL("step %d failed, wanted %d or %d: %s", step, LOOP_AT, LOOP_AT + 1, dist_error_message(w));
                bad = interrupted(rank, w, j, "all_reduce", r);
                break;
            }
            for (int i = 0; i < SMALL; i++)
                if (small[i] != (int64_t)N * (step + i)) return FAIL("step %d: element %d is %lld", step, i, (long long)small[i]);
            if (rank == 2 && step == LOOP_AT) {
                sh->t_revoke = now_ns();
                OK(dist_revoke(w));
                break;
            }
        }
    } else if (j->kind == C_ALL) {
        sleep_ms(100);
        sh->t_revoke = now_ns();
        OK(dist_revoke(w));
    } else if (rank == j->revoker) {
        sleep_ms(100);
        if (j->kind == C_FORWARDED || j->kind == C_DIES) dist__test_revoke_only = 1;
        sh->t_revoke = now_ns();
        OK(dist_revoke(w));
        if (j->kind == C_DIES) {
            sleep_ms(20);        /* its notice is written */
            fflush(NULL);
            __atomic_store_n(&sh->killed, 1, __ATOMIC_SEQ_CST);
            kill_self();
        }
    } else {
        /* the others: each waits in the case's call */
        int from = rank == 0 ? 2 : rank == 1 ? 0 : rank == 2 ? 0 : 2;   /* nobody sends (the revoker is 3) */
        switch (j->kind) {
        case C_RECV: case C_FORWARDED: case C_DIES:
            r = dist_recv(w, &x, 1, DIST_INT64, from, 5);
            bad = interrupted(rank, w, j, "recv", r);
            break;
        case C_SMALL:
            for (int i = 0; i < SMALL; i++) small[i] = i;
            bad = interrupted(rank, w, j, "all_reduce (small)", dist_all_reduce(w, small, SMALL, DIST_INT64, DIST_SUM));
            break;
        case C_LARGE:
            bad = interrupted(rank, w, j, "all_reduce (large)", dist_all_reduce(w, large, LARGE, DIST_FLOAT32, DIST_SUM));
            break;
        case C_BARRIER:
            bad = interrupted(rank, w, j, "barrier", dist_barrier(w));
            break;
        case C_BCAST:
            bad = interrupted(rank, w, j, "broadcast", dist_broadcast(w, bc, BCAST, DIST_UINT8, j->revoker));
            break;
        case C_NONBLOCKING:
            if (rank == 1) {
                dist_req_t *rq = NULL, *sq = NULL;
                int rd = 0, sd = 0;
                dist_result rr = DIST_OK, sr = DIST_OK;
                fill_bytes(big, BIG, 9);
                OK(dist_irecv(w, &x, 1, DIST_INT64, 0, 5, &rq));
                OK(dist_isend(w, big, BIG, DIST_UINT8, 2, 6, &sq));
                for (int64_t end = now_ns() + (int64_t)(scaled_s(5) * 1e9); (!rd || !sd) && !bad && now_ns() < end;) {
                    if (!rd && ((rr = dist_test(rq, &rd)) != DIST_OK || rd)) bad = interrupted(rank, w, j, "irecv (dist_test)", rr);
                    if (!sd && !bad && ((sr = dist_test(sq, &sd)) != DIST_OK || sd)) bad = interrupted(rank, w, j, "isend of 4 MiB (dist_test)", sr);
                    sleep_us(200);
                }
                if (bad) break;
                if (!rd || !sd) { bad = FAIL("the irecv (%s) or the isend (%s) was still pending 5 s after the revoke", rd ? "done" : "pending", sd ? "done" : "pending"); break; }
                /* dist_wait hands them back, with the same result */
                if ((r = dist_wait(rq)) != DIST_ERR_REVOKED || (rr = dist_wait(sq)) != DIST_ERR_REVOKED)
                    bad = FAIL("dist_wait after dist_test -> %s, %s", dist_result_name(r), dist_result_name(rr));
            } else {
                r = dist_recv(w, &x, 1, DIST_INT64, rank == 0 ? 2 : 0, 5);
                bad = interrupted(rank, w, j, "recv", r);
            }
            break;
        }
    }
    if (!bad) bad = after(rank, w, j, nlive);
    if (j->kind == C_DIES || bad) dist_abort(w);
    dist_destroy(w);
    return bad;
}

int main(void) {
    int64_t t_all = now_ns();
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    printf("revoke: %d ranks, transport %s\n", N, getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto");
    for (int k = 0; k < NCASES; k++) {
        job_t j = { k, 3 };
        int64_t t0 = now_ns(), last = 0;
        char extra[64] = "";
        if (getenv("REVOKE_ONLY") && !strstr(case_name[k], getenv("REVOKE_ONLY"))) continue;
        case_begin(case_name[k]);
        if (first_process()) memset(sh, 0, sizeof *sh);
        if (run_workers(N, rank_main, &j, 60, k == C_DIES ? 3 : -1, &sh->killed) == 0 && first_process()) {
            for (int r = 0; r < N; r++) {
                if (sh->r[r].fail[0]) case_bad("rank %d: %s", r, sh->r[r].fail);
                if (sh->r[r].t_out > last) last = sh->r[r].t_out;
            }
            if (!sh->t_revoke) case_bad("nobody revoked");
            else if (last > sh->t_revoke) snprintf(extra, sizeof extra, "revoke to last rank out %.1f ms", (double)(last - sh->t_revoke) / 1e6);
        }
        case_end(secs_since(t0), extra[0] ? extra : NULL);
    }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t_all));
    return g_failed ? 1 : 0;
}
