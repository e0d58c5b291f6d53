// TIMEOUT: 240
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_grow.c - newcomers join a running job (dist_init with cfg.join,
   dist_grow), as restarted or added ranks of an elastic job do.

   Jobs of N ranks started here (tcp://127.0.0.1, rank 0 hosting the
   store; transport from DIST_TRANSPORT), and K newcomers started at the
   same moment with cfg.join = 1 (they wait in dist_init until admitted).
   Each member runs training steps on its communicator c: an all_reduce
   (sum) of G int64, element i of the member whose job rank is w at step s
   being (w + 1)(s + 1)(i + 1), so every result is known from c's members;
   every 5 steps a broadcast of the "parameters" (the running sum of the
   results) from rank 0, which every member compares with its own
   bitwise, and a ring exchange of (rank, step) point to point.  Cases:
     two join     N=4 (GROW_N), K=2: after 5 steps the 4 call dist_grow(c, 2):
                  the grown communicator has 6 members, the 4 first in
                  their order, then the newcomers; the world (dist_world)
                  is the 6 on every one, its ranks the job's: a ring on
                  it point to point, and a barrier on it fails
                  (DIST_ERR_INVALID, "point-to-point"); 20 steps on the
                  grown one;
     replace      N=4, K=1: rank 2 kills itself after step 5 (SIGKILL);
                  the survivors' step fails, they agree and shrink (3),
                  then dist_grow(c, 1) admits the newcomer (4 again); 20
                  steps; the newcomer's job rank is 4 (ranks are not
                  reused);
     nobody       N=4, K=0: dist_grow(c, 0) with nobody waiting gives a
                  communicator of the same 4; 10 steps on it;
     twice        N=3, K=2: dist_grow(c, 1) twice (the newcomers come one
                  after the other: the second starts once the first has
                  joined), 3 then 4 then 5 members; 10 steps after each;
     unwanted     N=2, K=1 with a 1.5 s timeout: nobody calls dist_grow;
                  the newcomer's init fails with DIST_ERR_TIMEOUT saying
                  that the ranks admit newcomers in dist_grow;
     stranger     N=2, K=1: the newcomer has another run id: the store
                  turns it away at once, saying so.
   Checks, on every member: its rank and size in each communicator;
   dist_joined() 1 exactly on newcomers; dist_newcomers() of each grown
   communicator, the same on old members and newcomers; every result exact; parameters
   bitwise identical to rank 0's after every broadcast; everyone exits 0
   (the killed rank by SIGKILL).  Prints the time of each dist_grow call
   that admitted newcomers (on rank 0), and from a newcomer's start to its
   first step.  GROW_ONLY=TEXT runs the cases whose name contains TEXT. */
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

#define MAXP 40
#define G 32
#define TMO_MS 10000

enum { C_TWO, C_REPLACE, C_NOBODY, C_TWICE, C_UNWANTED, C_STRANGER, NCASES };
static const char *case_name[NCASES] = {
    "two join: 4 ranks grow by 2",
    "replace: rank 2 of 4 killed, the survivors shrink, a newcomer takes its place",
    "nobody: dist_grow with nobody waiting",
    "twice: 3 ranks grow by 1, then by 1 again",
    "unwanted: nobody calls dist_grow, the newcomer times out",
    "stranger: a newcomer of another launch is turned away",
};

typedef struct {
    atomic_int claimed;
    char fail[700];
    int64_t t_start, t_first;  /* a newcomer: when it began, and its first step done */
    int64_t grow_ns;           /* rank 0: time in dist_grow calls that admitted newcomers */
    int exited;
} rank_rec;

typedef struct {
    rank_rec r[MAXP];
    int killed;
    int joined_first;          /* twice: the first newcomer is in */
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(MAXP, &sh->r[rank].claimed, sh->r[rank].fail)

typedef struct { int kind, n, k; } job_t;
static int g_newcomer;         /* this process joined */

/* The steps [s0, s1) on c; jr[g] is member g's job rank; params the
   running sum (identical everywhere). */
static int steps(int rank, dist_t *c, const int *jr, int s0, int s1, int64_t *params) {
    dist_t *w = c;
    int n = dist_world_size(c), me = dist_rank(c);
    int64_t v[G], sumw = 0;
    for (int g = 0; g < n; g++) sumw += jr[g] + 1;
    for (int s = s0; s < s1; s++) {
        for (int i = 0; i < G; i++) v[i] = (int64_t)(jr[me] + 1) * (s + 1) * (i + 1);
        OK(dist_all_reduce(c, v, G, DIST_INT64, DIST_SUM));
        for (int i = 0; i < G; i++) {
            if (v[i] != sumw * (s + 1) * (i + 1))
                return FAIL("step %d: element %d is %lld, want %lld (%d members)", s, i, (long long)v[i], (long long)(sumw * (s + 1) * (i + 1)), n);
            params[i] += v[i];
        }
        if (s % 5 == 4) {
            int64_t p0[G], out[2], in[2] = { -1, -1 };
            dist_req_t *q = NULL;
            memcpy(p0, params, sizeof p0);
            OK(dist_broadcast(c, p0, G, DIST_INT64, 0));
            if (memcmp(p0, params, sizeof p0) != 0) return FAIL("step %d: the parameters differ from rank 0's", s);
            out[0] = jr[me]; out[1] = s;
            OK(dist_irecv(c, in, 2, DIST_INT64, (me + n - 1) % n, 3, &q));
            OK(dist_send(c, out, 2, DIST_INT64, (me + 1) % n, 3));
            OK(dist_wait(q));
            if (in[0] != jr[(me + n - 1) % n] || in[1] != s) return FAIL("step %d: the ring brought (%lld, %lld)", s, (long long)in[0], (long long)in[1]);
        }
    }
    return 0;
}

/* The job ranks of c's members (all_gather). */
static int job_ranks(int rank, dist_t *c, int mine, int *jr) {
    dist_t *w = c;
    int32_t in = mine, out[MAXP];
    if (dist_world_size(c) > MAXP) return FAIL("a communicator of %d", dist_world_size(c));
    OK(dist_all_gather(c, &in, out, 1, DIST_INT32));
    for (int g = 0; g < dist_world_size(c); g++) jr[g] = out[g];
    return 0;
}

/* After a growth that admitted everyone alive (nobody died): the world
   (dist_world) is the job's `total` ranks on every member, its ranks the
   job ranks; a ring point to point on it; a collective on it fails,
   saying the world is for point to point now. */
static int world_check(int rank, dist_t *c, const int *jr, int total) {
    dist_t *w = dist_world(c);
    int me = dist_rank(w), old = !g_newcomer;
    int64_t out = me, in = -1;
    dist_req_t *q = NULL;
    dist_result r;
    (void)jr;
    /* the old ranks keep theirs; the newcomers are the last ones (in the order they asked) */
    if (!w || dist_world_size(w) != total || (old && me != rank) || (!old && (me < total - 2 || me >= total)))
        return FAIL("the world is rank %d of %d (process %d)", me, dist_world_size(w), rank);
    OK(dist_irecv(w, &in, 1, DIST_INT64, (me + total - 1) % total, 9, &q));
    OK(dist_send(w, &out, 1, DIST_INT64, (me + 1) % total, 9));
    OK(dist_wait(q));
    if (in != (me + total - 1) % total) return FAIL("the ring on the world brought %lld", (long long)in);
    r = dist_barrier(w);
    if (r != DIST_ERR_INVALID || !strstr(dist_error_message(w), "point-to-point"))
        return FAIL("a barrier on the grown world -> %s: %s", dist_result_name(r), dist_error_message(w));
    return 0;
}

/* Grows c (min_new), checking the result (the old members first, in
   their order), then learns the members' process numbers; the old c goes
   unless it is `keep` (the world, or a newcomer's own communicator). */
static int grow(int rank, dist_t **c, int min_new, int k, int *jr, dist_t *keep) {
    dist_t *g = NULL;
    int n = dist_world_size(*c), me = dist_rank(*c);
    int64_t t0 = now_ns();
    dist_result r = dist_grow(*c, min_new, &g);
    if (r != DIST_OK) return FAIL("grow(%d) -> %s: %s", min_new, dist_result_name(r), dist_error_message(*c));
    if (k && rank == 0) sh->r[0].grow_ns += now_ns() - t0;
    if (dist_world_size(g) != n + k || dist_rank(g) != me)
        return FAIL("grow(%d): rank %d of %d, want %d of %d", min_new, dist_rank(g), dist_world_size(g), me, n + k);
    if (dist_newcomers(g) != k) return FAIL("grow(%d): dist_newcomers %d, want %d", min_new, dist_newcomers(g), k);
    if (dist_joined(g) != g_newcomer) return FAIL("dist_joined is %d on a %s", dist_joined(g), g_newcomer ? "newcomer" : "rank that formed the job");
    if (*c != keep) dist_destroy(*c);
    *c = g;
    return job_ranks(rank, g, jr[me], jr);
}

static int rank_main(int rank, int port, int lfd, void *p) {
    const job_t *j = (const job_t *)p;
    char url[64];
    dist_t *w = NULL, *c;
    dist_config cfg;
    int64_t params[G];
    int jr[MAXP], newcomer = g_newcomer = rank >= j->n, bad;
    dist_result r;
    memset(&cfg, 0, sizeof cfg);
    memset(params, 0, sizeof params);
    tcp_config(&cfg, url, sizeof url, port, j->n, newcomer ? 1 : rank, scaled(j->kind == C_UNWANTED ? 1500 : TMO_MS), lfd);
    rank_alarm((unsigned)(scaled_s(60) + 0.5));
    if (newcomer) {
        int64_t t0 = now_ns();
        cfg.join = 1;
        if (j->kind == C_STRANGER) cfg.run_id = "another-launch";
        if (j->kind == C_TWICE && rank == j->n + 1)     /* comes once the first has joined */
            for (int64_t end = now_ns() + (int64_t)(scaled_s(20) * 1e9); !__atomic_load_n(&sh->joined_first, __ATOMIC_SEQ_CST) && now_ns() < end;) sleep_ms(2);
        sh->r[rank].t_start = t0 = now_ns();
        r = dist_init(&w, &cfg);
        if (j->kind == C_UNWANTED) {
            if (r != DIST_ERR_TIMEOUT || !strstr(dist_error_message(NULL), "dist_grow"))
                return FAIL("an unwanted newcomer's init -> %s, want DIST_ERR_TIMEOUT naming dist_grow: %s", dist_result_name(r), dist_error_message(NULL));
            if (secs_since(t0) > scaled_s(1.5) + 2) return FAIL("its init took %.1f s with a 1.5 s timeout", secs_since(t0));
            sh->r[rank].exited = 1;
            return 0;
        }
        if (j->kind == C_STRANGER) {
            if (r != DIST_ERR_INIT || !strstr(dist_error_message(NULL), "run id"))
                return FAIL("a stranger's init -> %s, want DIST_ERR_INIT naming the run id: %s", dist_result_name(r), dist_error_message(NULL));
            if (secs_since(t0) > 3) return FAIL("the stranger was turned away after %.1f s", secs_since(t0));
            sh->r[rank].exited = 1;
            return 0;
        }
        if (r != DIST_OK) return FAIL("a newcomer's init -> %s: %s", dist_result_name(r), dist_error_message(NULL));
        c = w;
        if (!dist_joined(c)) return FAIL("dist_joined is 0 on a newcomer");
        if (dist_newcomers(c) != (j->kind == C_TWO ? 2 : 1)) return FAIL("dist_newcomers is %d on a newcomer", dist_newcomers(c));
        if ((bad = job_ranks(rank, c, rank, jr)) != 0) return bad;
        {   /* after the members it joined, in their order */
            int old = j->kind == C_REPLACE ? 3 : j->kind == C_TWICE ? (rank == j->n ? 3 : 4) : j->n;
            if (dist_rank(c) < old || dist_world_size(c) != old + (j->kind == C_TWO ? 2 : 1))
                return FAIL("a newcomer is rank %d of %d, want %d or more of %d", dist_rank(c), dist_world_size(c), old, old + (j->kind == C_TWO ? 2 : 1));
            for (int g = 1; g < old; g++)
                if (jr[g] <= jr[g - 1]) return FAIL("the old members are out of order: process %d before %d", jr[g - 1], jr[g]);
        }
        if (j->kind == C_TWICE && rank == j->n) __atomic_store_n(&sh->joined_first, 1, __ATOMIC_SEQ_CST);
        if (j->kind == C_TWO && (bad = world_check(rank, c, jr, j->n + j->k)) != 0) return bad;
        /* the parameters so far: rank 0's */
        OK(dist_broadcast(c, params, G, DIST_INT64, 0));
        {
            int s0 = j->kind == C_TWICE ? (rank == j->n ? 10 : 20) : 5;
            int s1 = j->kind == C_TWICE ? 30 : 25;
            if (j->kind == C_TWICE && rank == j->n) {
                if ((bad = steps(rank, c, jr, s0, 20, params)) != 0) return bad;
                sh->r[rank].t_first = now_ns();
                if ((bad = grow(rank, &c, 1, 1, jr, w)) != 0) return bad;
                OK(dist_broadcast(c, params, G, DIST_INT64, 0));
                s0 = 20;
            } else {
                if ((bad = steps(rank, c, jr, s0, s0 + 1, params)) != 0) return bad;
                sh->r[rank].t_first = now_ns();
                s0++;
            }
            if ((bad = steps(rank, c, jr, s0, s1, params)) != 0) return bad;
        }
        OK(dist_barrier(c));
        if (c != w) dist_destroy(c);
        dist_destroy(w);           /* (its world goes with it) */
        sh->r[rank].exited = 1;
        return 0;
    }
    OK(dist_init(&w, &cfg));
    c = w;
    for (int i = 0; i < j->n; i++) jr[i] = i;
    if (j->kind == C_UNWANTED || j->kind == C_STRANGER) {
        if ((bad = steps(rank, c, jr, 0, 5, params)) != 0) return bad;
        /* the newcomer's fate is known before rank 0's store goes */
        for (int64_t end = now_ns() + (int64_t)(scaled_s(20) * 1e9); !sh->r[j->n].exited && !sh->r[j->n].fail[0] && now_ns() < end;) sleep_ms(5);
        OK(dist_barrier(w));
        dist_destroy(w);
        sh->r[rank].exited = 1;
        return 0;
    }
    if ((bad = steps(rank, c, jr, 0, 5, params)) != 0) return bad;
    switch (j->kind) {
    case C_TWO:
        if ((bad = grow(rank, &c, 2, 2, jr, w)) != 0) return bad;
        if ((bad = world_check(rank, c, jr, j->n + j->k)) != 0) return bad;
        OK(dist_broadcast(c, params, G, DIST_INT64, 0));
        if ((bad = steps(rank, c, jr, 5, 25, params)) != 0) return bad;
        break;
    case C_REPLACE: {
        int64_t v[G];
        uint64_t ok;
        int alive = 0;
        dist_t *s = NULL;
        if (rank == 2) {
            fflush(NULL);
            __atomic_store_n(&sh->killed, 1, __ATOMIC_SEQ_CST);
            kill_self();
        }
        for (int i = 0; i < G; i++) v[i] = 0;
        r = dist_all_reduce(c, v, G, DIST_INT64, DIST_SUM);
        ok = r == DIST_OK;
        OK(dist_agree(c, &ok, &alive));
        if (ok || alive != 3) return FAIL("agree after the kill: flags %llu, %d alive (want 0, 3)", (unsigned long long)ok, alive);
        OK(dist_shrink(c, &s));
        if (dist_world_size(s) != 3) return FAIL("shrunk to %d, want 3", dist_world_size(s));
        c = s;
        if ((bad = job_ranks(rank, c, rank, jr)) != 0) return bad;
        if ((bad = grow(rank, &c, 1, 1, jr, w)) != 0) return bad;
        OK(dist_broadcast(c, params, G, DIST_INT64, 0));
        if ((bad = steps(rank, c, jr, 5, 25, params)) != 0) return bad;
        break;
    }
    case C_NOBODY:
        if ((bad = grow(rank, &c, 0, 0, jr, w)) != 0) return bad;
        if ((bad = steps(rank, c, jr, 5, 15, params)) != 0) return bad;
        break;
    case C_TWICE:
        if ((bad = grow(rank, &c, 1, 1, jr, w)) != 0) return bad;
        OK(dist_broadcast(c, params, G, DIST_INT64, 0));
        if ((bad = steps(rank, c, jr, 10, 20, params)) != 0) return bad;
        if ((bad = grow(rank, &c, 1, 1, jr, w)) != 0) return bad;
        OK(dist_broadcast(c, params, G, DIST_INT64, 0));
        if ((bad = steps(rank, c, jr, 20, 30, params)) != 0) return bad;
        break;
    }
    /* everyone done before rank 0's store goes */
    OK(dist_barrier(c));
    if (c != w) dist_destroy(c);
    if (j->kind == C_REPLACE) dist_abort(w);
    dist_destroy(w);
    sh->r[rank].exited = 1;
    return 0;
}

int main(void) {
    int64_t t_all = now_ns();
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    printf("grow: transport %s\n", getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto");
    for (int k = 0; k < NCASES; k++) {
        static const int nk[NCASES][2] = { { 4, 2 }, { 4, 1 }, { 4, 0 }, { 3, 2 }, { 2, 1 }, { 2, 1 } };
        job_t j = { k, nk[k][0], nk[k][1] };
        if (k == C_TWO) j.n = env_int("GROW_N", 2, MAXP - 2, 4);    /* (timings at other sizes) */
        int64_t t0 = now_ns();
        char extra[128] = "";
        if (getenv("GROW_ONLY") && !strstr(case_name[k], getenv("GROW_ONLY"))) continue;
        if (k == C_TWO && j.n != 4) {
            static char name[64];
            snprintf(name, sizeof name, "two join: %d ranks grow by 2", j.n);
            case_begin(name);
        } else case_begin(case_name[k]);
        if (first_process()) memset(sh, 0, sizeof *sh);
        if (run_workers(j.n + j.k, rank_main, &j, 90, k == C_REPLACE ? 2 : -1, &sh->killed) == 0 && first_process()) {
            int64_t first = 0;
            for (int r = 0; r < j.n + j.k; r++) {
                if (sh->r[r].fail[0]) case_bad("process %d%s: %s", r, r >= j.n ? " (a newcomer)" : "", sh->r[r].fail);
                else if (!(k == C_REPLACE && r == 2) && !sh->r[r].exited) case_bad("process %d did not finish", r);
                if (r >= j.n && sh->r[r].t_first && (!first || sh->r[r].t_first - sh->r[r].t_start > first)) first = sh->r[r].t_first - sh->r[r].t_start;
            }
            if (sh->r[0].grow_ns || first)
                snprintf(extra, sizeof extra, "dist_grow %.1f ms on rank 0; newcomer start to first step %.1f ms", (double)sh->r[0].grow_ns / 1e6, (double)first / 1e6);
        }
        case_end(secs_since(t0), extra[0] ? extra : NULL);
    }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t_all));
    return g_failed ? 1 : 0;
}
