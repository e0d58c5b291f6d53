// TIMEOUT: 240
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_rpc_dynamic.c - dist_rpc.h's dynamic workers (cfg.dynamic): workers
   join a running job by name and leave it, die and come back as new
   incarnations, while the others keep calling.

   Jobs of n forked workers "w0".."w<n-1>" (tcp://127.0.0.1, w0 hosting the
   store: it never dies here) start with cfg.dynamic = 1; processes n and
   up are newcomers (dist.join = 1), started when the case says.  Every
   worker registers: "whoami" (its rank: which incarnation answered),
   "echo" (its int argument + 1, counted in a table shared by the
   processes), "make" (an int, kept by remote() on its owner), "hold"
   (keeps the RRef it is given), "sleep" (waits its argument in ms).
   Cases:
     join      n=3 + newcomer "obs": w0 polls dist_rpc_world_size until 4,
               then get_worker_info("obs") is rank 3 and "whoami" on it
               says 3; the newcomer sees 4 workers (names and ranks from
               dist_rpc_get_worker_infos) and calls each; then everyone
               leaves with dist_rpc_shutdown(1), which returns DIST_OK on
               every one.  Prints the newcomer's dist_rpc_init time.
     leave     n=3: w0 keeps 8 async "echo" calls in flight to w1 and w2
               calls w1 back to back, no barrier; w1 leaves after serving
               200.  Every call ends DIST_OK (exact) or DIST_ERR_PEER_LOST
               naming 'w1' and "left"; the answered ones add up to what w1
               served (nothing lost or done twice); once one failed, 50
               more fail at once (each under 20 ms); get_worker_info("w1")
               fails naming it; the world size is 2.
     kill      n=3 + newcomer "w1": w1 is SIGKILLed while w0 waits on 4
               "sleep" calls to it, holds an RRef w1 owns (to_here exact
               before) and w1 holds one of w0's (w0 freed its own handle).
               Within 1 s of the kill: the 4 calls fail with
               DIST_ERR_PEER_LOST naming 'w1', a new call fails at once,
               to_here of w1's RRef fails naming 'w1', and w0's owned count
               falls to 0 (w1's reference let go of).  Then a newcomer
               named "w1" joins: get_worker_info("w1") is rank 3, "whoami"
               on "w1" says 3 (w0 and w2), the old RRef still fails.
     taken     n=2 + newcomer "w1" while w1 lives: its dist_rpc_init fails
               with DIST_ERR_INIT naming 'w1'; the job goes on (2 workers,
               calls exact).
     churn     n=2 + 8 newcomers "obs", one after another, each serving 30
               calls from w0 and leaving; w0 calls "obs" back to back the
               whole time: each call is exact or fails DIST_ERR_PEER_LOST
               / DIST_ERR_NOT_FOUND; the incarnations w0 meets have rising
               ranks; the calls answered add up to what the newcomers
               served; w0's resident memory after the last is within 4 MiB
               of after the second.  Prints join times.
   DYN_ONLY=TEXT runs the cases whose name contains TEXT. */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist_rpc.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MAXP 16
#define TMO_MS 20000
#if defined(__SANITIZE_ADDRESS__)       /* (a small quarantine: freed memory is not kept for long) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=1"; }
#endif

enum { C_JOIN, C_LEAVE, C_KILL, C_TAKEN, C_CHURN, NCASES };
static const char *case_name[NCASES] = {
    "join: a newcomer joins 3 workers by name",
    "leave: a worker leaves while two call it back to back",
    "kill: a worker is SIGKILLed with calls and references pending, then comes back",
    "taken: a newcomer asks for a live worker's name",
    "churn: 8 newcomers join, serve and leave while w0 calls them",
};
static const int case_n[NCASES] = { 3, 3, 3, 2, 2 };
static const int case_k[NCASES] = { 1, 0, 1, 1, 8 };

typedef struct {
    atomic_int claimed;
    char fail[700];
    int exited;
    atomic_int served;         /* "echo" calls this process answered */
    int64_t t_start, t_joined; /* a newcomer: before and after its dist_rpc_init */
} rec_t;

typedef struct {
    rec_t r[MAXP];
    int killed;
    int64_t t_kill;            /* kill: just before the victim's raise */
    int go;                    /* kill: w0 is set up, the victim may die */
    int next;                  /* churn / kill: the newcomer that may start */
    int done;                  /* workers done with their part */
    int stop;                  /* churn: w0 is done calling */
    long rss_kb[2];            /* churn: w0's after the 2nd and the last newcomer */
} shared_t;
static shared_t *sh;
static int g_kind, g_me;

DEFINE_FAIL_AT(MAXP, &sh->r[rank].claimed, sh->r[rank].fail)

#define ROK(call)                                                                              \
    do {                                                                                       \
        dist_result r_ = (call);                                                               \
        if (r_ != DIST_OK) return FAIL("%s -> %s: %s", #call, dist_result_name(r_), dist_rpc_error_message()); \
    } while (0)

static dist_rref_t *g_held;

static dist_value_t *h_whoami(dist_rpc_call_t *c, const dist_value_t *a) {
    dist_worker_info me;
    (void)c; (void)a;
    dist_rpc_get_worker_info(NULL, &me);
    return dist_value_int(me.rank);
}
static dist_value_t *h_echo(dist_rpc_call_t *c, const dist_value_t *a) {
    int64_t x = 0;
    if (dist_value_get_int(a, &x) != DIST_OK) { dist_rpc_call_fail(c, "echo: %s", dist_rpc_error_message()); return NULL; }
    atomic_fetch_add(&sh->r[g_me].served, 1);
    return dist_value_int(x + 1);
}
static dist_value_t *h_make(dist_rpc_call_t *c, const dist_value_t *a) {
    int64_t x = 0;
    (void)c;
    dist_value_get_int(a, &x);
    return dist_value_int(x);
}
static dist_value_t *h_hold(dist_rpc_call_t *c, const dist_value_t *a) {
    dist_rref_t *r = NULL;
    if (dist_value_get_rref(dist_value_item(a, 0), &r) != DIST_OK) { dist_rpc_call_fail(c, "hold: %s", dist_rpc_error_message()); return NULL; }
    g_held = dist_rref_keep(r);
    return NULL;
}
static dist_value_t *h_sleep(dist_rpc_call_t *c, const dist_value_t *a) {
    int64_t ms = 0;
    (void)c;
    dist_value_get_int(a, &ms);
    sleep_ms((int)ms);
    return dist_value_none();
}

static int dyn_init(int rank, int n, int port, int lfd, const char *name, int join) {
    dist_rpc_config cfg;
    char url[64];
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg.dist, url, sizeof url, port, n, join ? 1 : rank, scaled(TMO_MS), join ? -1 : lfd);
    if (join && lfd >= 0) close(lfd);
    cfg.dist.join = join;
    cfg.dynamic = 1;
    cfg.name = name;
    cfg.timeout_ms = scaled(TMO_MS);
    dist_rpc_register("whoami", h_whoami);
    dist_rpc_register("echo", h_echo);
    dist_rpc_register("make", h_make);
    dist_rpc_register("hold", h_hold);
    dist_rpc_register("sleep", h_sleep);
    return dist_rpc_init(&cfg);
}

static int await_int(const int *p, int v, double s) {
    int64_t end = now_ns() + (int64_t)(scaled_s(s) * 1e9);
    while (__atomic_load_n(p, __ATOMIC_SEQ_CST) < v) { if (now_ns() > end) return -1; sleep_ms(2); }
    return 0;
}
static void bump(int *p) { __atomic_fetch_add(p, 1, __ATOMIC_SEQ_CST); }

/* "whoami" on `to`: its rank. */
static int whoami(const char *to, int64_t *who) {
    dist_value_t *v = NULL;
    dist_result r = dist_rpc_sync(to, "whoami", NULL, &v);
    *who = -1;
    if (r == DIST_OK) dist_value_get_int(v, who);
    dist_value_free(v);
    return r;
}

static int wait_size(int rank, int want, double s) {
    int64_t end = now_ns() + (int64_t)(scaled_s(s) * 1e9);
    while (dist_rpc_world_size() != want) {
        if (now_ns() > end) return FAIL("the world size stayed %d, want %d", dist_rpc_world_size(), want);
        sleep_ms(2);
    }
    return 0;
}

static int leave(int rank) {
    dist_result r = dist_rpc_shutdown(1);
    if (r != DIST_OK) return FAIL("dist_rpc_shutdown(1) -> %s: %s", dist_result_name(r), dist_rpc_error_message());
    sh->r[rank].exited = 1;
    return 0;
}

static int case_join(int rank, int n) {
    int64_t who;
    char nm[16];
    if (rank == n) {                                      /* the newcomer */
        dist_worker_info inf[8];
        int k = dist_rpc_get_worker_infos(inf, 8);
        if (k != 4) return FAIL("the newcomer sees %d workers, want 4", k);
        for (int i = 0; i < 4; i++) {
            snprintf(nm, sizeof nm, i < 3 ? "w%d" : "obs", i);
            if (inf[i].rank != i || strcmp(inf[i].name, nm) != 0) return FAIL("worker %d is '%s' rank %d, want '%s' rank %d", i, inf[i].name, inf[i].rank, nm, i);
            if (whoami(nm, &who) != DIST_OK || who != i) return FAIL("whoami on %s -> %lld: %s", nm, (long long)who, dist_rpc_error_message());
        }
    } else {
        dist_worker_info wi;
        if (wait_size(rank, 4, 10)) return 1;
        if (dist_rpc_get_worker_info("obs", &wi) != DIST_OK || wi.rank != 3) return FAIL("get_worker_info(obs): rank %d: %s", wi.rank, dist_rpc_error_message());
        if (whoami("obs", &who) != DIST_OK || who != 3) return FAIL("whoami on obs -> %lld: %s", (long long)who, dist_rpc_error_message());
    }
    bump(&sh->done);
    if (await_int(&sh->done, n + 1, 20)) return FAIL("the others did not finish their part");
    return leave(rank);
}

static int case_leave(int rank) {
    if (rank == 1) {
        if (await_int((const int *)&sh->r[1].served, 200, 20)) return FAIL("served only %d calls", atomic_load(&sh->r[1].served));
        return leave(rank);
    }
    {
        enum { WIN = 8 };
        dist_future_t *f[WIN] = { 0 };
        int64_t sent[WIN], okc = 0, lost = 0, i = 0, fast_bad = 0;
        double worst = 0;
        dist_worker_info wi;
        for (;; i++) {
            int slot = (int)(i % WIN);
            dist_result r;
            if (rank == 0 && f[slot]) {                    /* w0: async, 8 in flight */
                r = dist_future_wait(f[slot], 0);
                if (r == DIST_OK) {
                    int64_t v = -1;
                    dist_value_get_int(dist_future_value(f[slot]), &v);
                    if (v != sent[slot] + 1) return FAIL("echo(%lld) -> %lld", (long long)sent[slot], (long long)v);
                    okc++;
                } else if (r == DIST_ERR_PEER_LOST && strstr(dist_future_error(f[slot]), "'w1'")) lost++;
                else return FAIL("a call to w1 -> %s: %s", dist_result_name(r), dist_future_error(f[slot]));
                dist_future_free(f[slot]);
                f[slot] = NULL;
            }
            if (lost > 0) break;
            sent[slot] = i;
            if (rank == 0) {
                r = dist_rpc_async("w1", "echo", dist_value_int(i), &f[slot]);
                if (r == DIST_ERR_PEER_LOST) { lost++; }
                else if (r != DIST_OK) return FAIL("async to w1 -> %s: %s", dist_result_name(r), dist_rpc_error_message());
            } else {
                dist_value_t *v = NULL;
                r = dist_rpc_sync("w1", "echo", dist_value_int(i), &v);
                if (r == DIST_OK) {
                    int64_t x = -1;
                    dist_value_get_int(v, &x);
                    if (x != i + 1) return FAIL("echo(%lld) -> %lld", (long long)i, (long long)x);
                    okc++;
                } else if (r == DIST_ERR_PEER_LOST && strstr(dist_rpc_error_message(), "'w1'") && strstr(dist_rpc_error_message(), "left")) lost++;
                else return FAIL("a call to w1 -> %s: %s", dist_result_name(r), dist_rpc_error_message());
                dist_value_free(v);
            }
        }
        for (int s = 0; s < WIN; s++)                      /* the rest in flight: each answered or failed */
            if (f[s]) {
                dist_result r = dist_future_wait(f[s], 0);
                if (r == DIST_OK) okc++;
                else if (r != DIST_ERR_PEER_LOST || !strstr(dist_future_error(f[s]), "'w1'"))
                    return FAIL("a call in flight to w1 -> %s: %s", dist_result_name(r), dist_future_error(f[s]));
                dist_future_free(f[s]);
            }
        for (int k = 0; k < 50; k++) {                     /* departed: at once */
            dist_value_t *v = NULL;
            int64_t t0 = now_ns();
            dist_result r = dist_rpc_sync("w1", "echo", dist_value_int(k), &v);
            double ms = (double)(now_ns() - t0) / 1e6;
            if (ms > worst) worst = ms;
            if (r != DIST_ERR_PEER_LOST || !strstr(dist_rpc_error_message(), "'w1'")) return FAIL("a call after w1 left -> %s: %s", dist_result_name(r), dist_rpc_error_message());
            if (ms > 20) fast_bad++;
        }
        if (fast_bad) return FAIL("%lld of 50 calls to the departed w1 took over 20 ms (worst %.1f ms)", (long long)fast_bad, worst);
        if (dist_rpc_get_worker_info("w1", &wi) != DIST_ERR_PEER_LOST || !strstr(dist_rpc_error_message(), "'w1'"))
            return FAIL("get_worker_info(w1) after it left: %s", dist_rpc_error_message());
        sh->r[rank].t_start = okc;                         /* (the parent adds them up) */
        if (wait_size(rank, 2, 5)) return 1;
    }
    bump(&sh->done);
    if (await_int(&sh->done, 2, 20)) return FAIL("the other caller did not finish");
    return leave(rank);
}

static int case_kill(int rank, int n) {
    if (rank == 1) {                                       /* the victim */
        if (await_int(&sh->go, 1, 20)) return FAIL("w0 never got ready");
        sleep_ms(100);                                     /* (w0's sleeps reach it) */
        fflush(NULL);
        sh->killed = 1;
        sh->t_kill = now_ns();
        kill_self();                                       /* SIGKILL (Windows: TerminateProcess) */
        return FAIL("still alive after SIGKILL");
    }
    if (rank == n) {                                       /* the new w1 */
        int64_t who;
        if (whoami("w0", &who) != DIST_OK || who != 0) return FAIL("whoami on w0 from the new w1 -> %lld: %s", (long long)who, dist_rpc_error_message());
        bump(&sh->done);
        if (await_int(&sh->done, 3, 20)) return FAIL("the others did not finish");
        return leave(rank);
    }
    if (rank == 0) {
        dist_rref_t *a = NULL, *b = NULL;
        dist_value_t *v = NULL;
        dist_future_t *f[4];
        int64_t x = -1, who;
        int owned = -1;
        dist_worker_info wi;
        ROK(dist_remote("w1", "make", dist_value_int(41), &a));
        ROK(dist_rref_to_here(a, 0, &v));
        if (dist_value_get_int(v, &x) != DIST_OK || x != 41) return FAIL("to_here of w1's value -> %lld", (long long)x);
        dist_value_free(v); v = NULL;
        ROK(dist_rref_new(dist_value_int(7), &b));
        ROK(dist_rpc_sync("w1", "hold", dist_value_pack("[R]", b), NULL));
        dist_rref_free(b);
        for (int i = 0; i < 4; i++) ROK(dist_rpc_async("w1", "sleep", dist_value_int(10 * TMO_MS), &f[i]));
        __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
        for (int i = 0; i < 4; i++) {
            dist_result r = dist_future_wait(f[i], 0);
            double s = (double)(now_ns() - sh->t_kill) / 1e9;
            if (r != DIST_ERR_PEER_LOST || !strstr(dist_future_error(f[i]), "'w1'")) return FAIL("a call pending on the killed w1 -> %s: %s", dist_result_name(r), dist_future_error(f[i]));
            if (s > 1.0) return FAIL("a call pending on the killed w1 failed %.2f s after the kill", s);
            dist_future_free(f[i]);
        }
        {
            int64_t t0 = now_ns();
            dist_result r = dist_rpc_sync("w1", "echo", dist_value_int(1), &v);
            if (r != DIST_ERR_PEER_LOST || !strstr(dist_rpc_error_message(), "'w1'")) return FAIL("a call to the dead w1 -> %s: %s", dist_result_name(r), dist_rpc_error_message());
            if (now_ns() - t0 > 20000000) return FAIL("a call to the dead w1 took %.1f ms to fail", (double)(now_ns() - t0) / 1e6);
        }
        if (dist_rref_to_here(a, 0, &v) != DIST_ERR_PEER_LOST || !strstr(dist_rpc_error_message(), "'w1'"))
            return FAIL("to_here of the dead w1's value: %s", dist_rpc_error_message());
        for (int64_t end = now_ns() + (int64_t)(scaled_s(1) * 1e9); ; sleep_ms(2)) {
            dist_rpc_rref_counts(&owned, NULL);
            if (owned == 0) break;
            if (now_ns() > end) return FAIL("w0 still owns %d value(s) 1 s after the only other holder died", owned);
        }
        if (dist_rpc_world_size() != 2) return FAIL("world size %d after the kill, want 2", dist_rpc_world_size());
        __atomic_store_n(&sh->next, 1, __ATOMIC_SEQ_CST);   /* the new w1 may come */
        for (int64_t end = now_ns() + (int64_t)(scaled_s(10) * 1e9); dist_rpc_get_worker_info("w1", &wi) != DIST_OK; sleep_ms(2))
            if (now_ns() > end) return FAIL("the new w1 did not join: %s", dist_rpc_error_message());
        if (wi.rank != 3) return FAIL("the new w1 is rank %d, want 3", wi.rank);
        if (whoami("w1", &who) != DIST_OK || who != 3) return FAIL("whoami on the new w1 -> %lld: %s", (long long)who, dist_rpc_error_message());
        if (dist_rref_to_here(a, 0, &v) != DIST_ERR_PEER_LOST || !strstr(dist_rpc_error_message(), "'w1' (rank 1)"))
            return FAIL("to_here of the old w1's value after the new one joined: %s", dist_rpc_error_message());
        dist_rref_free(a);
    } else {                                               /* w2 */
        int64_t who = -1;
        dist_worker_info wi;
        for (int64_t end = now_ns() + (int64_t)(scaled_s(20) * 1e9); dist_rpc_get_worker_info("w1", &wi) != DIST_OK || wi.rank != 3; sleep_ms(2))
            if (now_ns() > end) return FAIL("the new w1 never showed up here");
        if (whoami("w1", &who) != DIST_OK || who != 3) return FAIL("whoami on the new w1 -> %lld: %s", (long long)who, dist_rpc_error_message());
    }
    bump(&sh->done);
    if (await_int(&sh->done, 3, 20)) return FAIL("the others did not finish");
    return leave(rank);
}

static int case_churn(int rank, int n) {
    if (rank >= n) {
        int i = rank - n, target = 30;
        while (atomic_load(&sh->r[rank].served) < target) {
            if (__atomic_load_n(&sh->stop, __ATOMIC_SEQ_CST)) return FAIL("w0 stopped before this newcomer served %d", target);
            sleep_ms(1);
        }
        (void)i;
        return leave(rank);
    }
    if (rank == 0) {
        int64_t okc = 0, last_who = -1, metc = 0, i = 0;
        int64_t end = now_ns() + (int64_t)(scaled_s(60) * 1e9);
        while (!__atomic_load_n(&sh->r[n + 7].exited, __ATOMIC_SEQ_CST) && !sh->r[n + 7].fail[0] && now_ns() < end) {
            dist_value_t *v = NULL;
            dist_result r = dist_rpc_sync("obs", "echo", dist_value_int(i), &v);
            if (r == DIST_OK) {
                int64_t x = -1;
                dist_value_get_int(v, &x);
                if (x != i + 1) return FAIL("echo(%lld) on obs -> %lld", (long long)i, (long long)x);
                okc++;
            } else if (r != DIST_ERR_PEER_LOST && r != DIST_ERR_NOT_FOUND)
                return FAIL("a call to obs -> %s: %s", dist_result_name(r), dist_rpc_error_message());
            dist_value_free(v);
            i++;
            if (r == DIST_OK) {                            /* which incarnation */
                dist_worker_info wi;
                if (dist_rpc_get_worker_info("obs", &wi) == DIST_OK && wi.rank != last_who) {
                    if (wi.rank < last_who) return FAIL("obs went from rank %lld to %d", (long long)last_who, wi.rank);
                    last_who = wi.rank;
                    metc++;
                    if (metc == 2) sh->rss_kb[0] = status_kb("VmRSS:");
                }
            }
        }
        sh->rss_kb[1] = status_kb("VmRSS:");
        __atomic_store_n(&sh->stop, 1, __ATOMIC_SEQ_CST);
        if (metc < 8) return FAIL("met %lld of the 8 incarnations of obs in 60 s", (long long)metc);
        sh->r[0].t_start = okc;
    }
    bump(&sh->done);
    if (await_int(&sh->done, 2, 80)) return FAIL("the others did not finish");
    return leave(rank);
}

static int rank_main(int rank, int port, int lfd, void *arg) {
    int n = case_n[g_kind], join = rank >= n, bad;
    char name[16];
    dist_result r;
    (void)arg;
    g_me = rank;
    rank_alarm((unsigned)(scaled_s(90) + 0.5));
    if (join) {
        int i = rank - n;
        if (g_kind == C_KILL && await_int(&sh->next, 1, 30)) return FAIL("w0 never let the new w1 come");
        if (g_kind == C_CHURN) {                           /* one after another */
            int64_t end = now_ns() + (int64_t)(scaled_s(60) * 1e9);
            while (i > 0 && !__atomic_load_n(&sh->r[rank - 1].exited, __ATOMIC_SEQ_CST)) {
                if (now_ns() > end || sh->r[rank - 1].fail[0]) return FAIL("newcomer %d never left", i - 1);
                sleep_ms(2);
            }
        }
        snprintf(name, sizeof name, "%s", g_kind == C_KILL || g_kind == C_TAKEN ? "w1" : "obs");
        sh->r[rank].t_start = now_ns();
    } else snprintf(name, sizeof name, "w%d", rank);
    r = dyn_init(rank, n, port, lfd, name, join);
    if (join) sh->r[rank].t_joined = now_ns();
    if (g_kind == C_TAKEN && join) {
        if (r != DIST_ERR_INIT || !strstr(dist_rpc_error_message(), "'w1'") || !strstr(dist_rpc_error_message(), "live worker"))
            return FAIL("a newcomer asking for the live w1's name -> %s: %s", dist_result_name(r), dist_rpc_error_message());
        sh->r[rank].exited = 1;
        bump(&sh->done);
        return 0;
    }
    if (r != DIST_OK) return FAIL("dist_rpc_init%s -> %s: %s", join ? " (joining)" : "", dist_result_name(r), dist_rpc_error_message());
    switch (g_kind) {
    case C_JOIN: bad = case_join(rank, n); break;
    case C_LEAVE: bad = case_leave(rank); break;
    case C_KILL: bad = case_kill(rank, n); break;
    case C_TAKEN: {
        int64_t who;
        if (rank == 0) {
            if (await_int(&sh->done, 1, 20)) return FAIL("the newcomer never gave up");
            sleep_ms(200);                                 /* (its admission and refusal are over) */
            if (dist_rpc_world_size() != 2) return FAIL("world size %d after the refusal, want 2", dist_rpc_world_size());
            if (whoami("w1", &who) != DIST_OK || who != 1) return FAIL("whoami on w1 -> %lld: %s", (long long)who, dist_rpc_error_message());
        }
        bump(&sh->done);
        if (await_int(&sh->done, 3, 20)) return FAIL("the others did not finish");
        bad = leave(rank);
        break;
    }
    default: bad = case_churn(rank, n); break;
    }
    return bad;
}

int main(void) {
    int64_t t_all = now_ns();
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    printf("rpc dynamic: transport %s\n", getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto");
    for (int k = 0; k < NCASES; k++) {
        int n = case_n[k], tot = case_n[k] + case_k[k];
        int64_t t0 = now_ns();
        char extra[200] = "";
        if (getenv("DYN_ONLY") && !strstr(case_name[k], getenv("DYN_ONLY"))) continue;
        case_begin(case_name[k]);
        if (first_process()) memset(sh, 0, sizeof *sh);   /* (on Windows the workers replay main up to their start: not again) */
        g_kind = k;
        if (run_workers(tot, rank_main, NULL, 120, k == C_KILL ? 1 : -1, &sh->killed) == 0) {
            for (int r = 0; r < tot; r++) {
                if (sh->r[r].fail[0]) case_bad("process %d%s: %s", r, r >= n ? " (a newcomer)" : "", sh->r[r].fail);
                else if (!(k == C_KILL && r == 1) && !sh->r[r].exited) case_bad("process %d did not finish", r);
            }
            if (k == C_JOIN) snprintf(extra, sizeof extra, "newcomer's dist_rpc_init %.1f ms", (double)(sh->r[n].t_joined - sh->r[n].t_start) / 1e6);
            if (k == C_LEAVE) {
                int64_t answered = sh->r[0].t_start + sh->r[2].t_start;
                if (answered != atomic_load(&sh->r[1].served))
                    case_bad("w0 and w2 got %lld answers, w1 served %d calls", (long long)answered, atomic_load(&sh->r[1].served));
                snprintf(extra, sizeof extra, "%d calls served before w1 left", atomic_load(&sh->r[1].served));
            }
            if (k == C_CHURN) {
                int64_t served = 0;
                double worst = 0, sum = 0;
                for (int r = n; r < tot; r++) {
                    double ms = (double)(sh->r[r].t_joined - sh->r[r].t_start) / 1e6;
                    served += atomic_load(&sh->r[r].served);
                    sum += ms;
                    if (ms > worst) worst = ms;
                }
                if (served != sh->r[0].t_start) case_bad("w0 got %lld answers, the newcomers served %lld", (long long)sh->r[0].t_start, (long long)served);
                if (sh->rss_kb[1] - sh->rss_kb[0] > 4096) case_bad("w0's RSS grew %ld KiB from the 2nd newcomer to the 8th", sh->rss_kb[1] - sh->rss_kb[0]);
                snprintf(extra, sizeof extra, "join %.1f ms mean, %.1f worst; w0 RSS %+ld KiB", sum / (tot - n), worst, sh->rss_kb[1] - sh->rss_kb[0]);
            }
        }
        case_end(secs_since(t0), extra[0] ? extra : NULL);
    }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t_all));
    return g_failed ? 1 : 0;
}
