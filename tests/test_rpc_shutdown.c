// WINDOWS: no, it forks its workers and SIGKILLs one (test_rpc_dynamic covers workers dying under Wine)
// TIMEOUT: 120
// TRANSPORTS: auto tcp
/* test_rpc_shutdown.c - dist_rpc_shutdown(1) when a worker died: the
   survivors' graceful shutdowns wait for each other (every live worker),
   not for the dead one, serve calls meanwhile, and return promptly once
   the last live worker has called it, naming the dead worker.

   Jobs of 3 forked workers "w0".."w2" (tcp://127.0.0.1, agent timeout
   10 s, scaled), with 1 and 4 handler threads.  Roles: the victim V, the
   early worker E, the late worker L.  L, and E too where the store is
   rank 0's, have an async call pending on V ("hang", never answered)
   when V dies (SIGKILL): E's shutdown, which waits for its own calls,
   begins after it saw the death, or (no call) maybe before.  Then E calls
   dist_rpc_shutdown(1) at once, and L goes on calling E for 300 ms before
   its own shutdown.  Times are CLOCK_MONOTONIC stamps in a MAP_SHARED
   table (one clock for every process).
     static         V = w2, E = w1, L = w0 (w0 hosts the store): L's
                    dist_rpc_sync "add" calls to E, back to back, all
                    DIST_OK (at least 20 after E's shutdown call); E's
                    shutdown returns DIST_ERR_PEER_LOST naming 'w2'
                    (rank 2), after L's shutdown call and within 1 s of
                    it; L's the same within 1 s.
     static, rank 0 dies   V = w0, E = w1, L = w2, the store hosted by
                    this process (dist_store_host_start, as distrun does):
                    the same, naming 'w0' (rank 0).
     static, in its shutdown   as "static", but w2 calls
                    dist_rpc_shutdown(1) first and dies 100 ms into it
                    (it has arrived at the first meeting point): the
                    others' shutdowns name it at the second, for the
                    references it never let go of.
     dynamic        cfg.dynamic = 1, V = w2, E = w1, L = w0: L keeps 4
                    async "add" calls in flight to E from the death on; E
                    leaves once it served 50 (DIST_OK within 1 s).  Each
                    call is DIST_OK or fails DIST_ERR_PEER_LOST naming
                    'w1' and "left" (none otherwise: the calls made before
                    L heard are served, and some are answered after E's
                    shutdown call), the ones answered are exactly those E
                    served; then L leaves too: DIST_OK within 1 s.
     dynamic, rank 0 dies  the same with V = w0, L = w2 and the store
                    hosted here.
   Before the fix every static case failed: E's shutdown returned
   DIST_ERR_PEER_LOST as soon as it saw V gone and left, and L's next call
   to E failed ("rank 1 has shut down"); the dynamic ones passed as they
   are.  Cost: 10 jobs a transport, 0.06-0.45 s each (the static ones
   hold 300 ms of calls): about 2.4 s and 2-3.5 s of CPU a transport
   (measured through tests/run.sh on a 2-core VM with other tests
   running). */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist_rpc.h"

#include <pthread.h>
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

#define N 3
#define TMO_MS 10000
#define CALLS_MS 300

typedef struct {
    atomic_int claimed[N];
    char fail[N][700];
    int host_port;               /* the hosted store's port, once it listens */
    int hanging;                 /* "hang" calls waiting on the victim */
    int dead;                    /* the victim is about to die */
    int64_t t_kill, t_e_call, t_e_ret, t_l_call, t_l_ret;
    int e_res, l_res;
    char e_msg[600], l_msg[600];
    int calls_ok, calls_left, calls_after;   /* L's calls to E: answered, refused as "left", answered after E's shutdown call */
    int served;                  /* "add" calls E answered */
    char refused[600];           /* dynamic: the first call refused because E left */
} shared_t;
static shared_t *sh;

typedef struct {
    int threads, victim, early, late, hosted, dynamic, in_shutdown;
    char run_id[64];
} job_t;
static const job_t *g_job;

DEFINE_FAIL_AT(N, &sh->claimed[rank], sh->fail[rank])

static dist_value_t *h_add(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t a, b;
    if (dist_value_unpack(args, "[II]", &a, &b) != DIST_OK) { dist_rpc_call_fail(call, "add: %s", dist_rpc_error_message()); return NULL; }
    __atomic_add_fetch(&sh->served, 1, __ATOMIC_SEQ_CST);
    return dist_value_int(a + b);
}

/* Never answered (deferred: it holds no handler thread), counted: the
   victim dies with it pending. */
static dist_value_t *h_hang(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)args;
    dist_rpc_call_defer(call);
    __atomic_add_fetch(&sh->hanging, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static dist_result join(int rank, int port, int lfd) {
    const job_t *j = g_job;
    dist_rpc_config cfg;
    char url[64], name[16];
    memset(&cfg, 0, sizeof cfg);
    if (j->hosted) {             /* this process's store: rank 0 joins it as the others do */
        int hp;
        if (lfd >= 0) close(lfd);
        for (int64_t end = now_ns() + (int64_t)(scaled_s(10) * 1e9); !(hp = __atomic_load_n(&sh->host_port, __ATOMIC_SEQ_CST)) && now_ns() < end;)
            sleep_ms(1);
        if (!hp) { FAIL("the parent's store never started"); return DIST_ERR_INIT; }
        tcp_config(&cfg.dist, url, sizeof url, hp, N, rank, scaled(TMO_MS), -1);
        cfg.dist.store_hosted = 1;
        cfg.dist.run_id = j->run_id;
    } else
        tcp_config(&cfg.dist, url, sizeof url, port, N, rank, scaled(TMO_MS), lfd);
    snprintf(name, sizeof name, "w%d", rank);
    cfg.name = name;
    cfg.num_threads = j->threads;
    cfg.timeout_ms = scaled(TMO_MS);
    cfg.dynamic = j->dynamic;
    dist_rpc_register("add", h_add);
    dist_rpc_register("hang", h_hang);
    return dist_rpc_init(&cfg);
}

/* A call to the victim, running when it dies. */
static int call_victim(int rank, dist_future_t **f) {
    char to[16];
    snprintf(to, sizeof to, "w%d", g_job->victim);
    if (dist_rpc_async(to, "hang", NULL, f) != DIST_OK) return FAIL("async hang on %s: %s", to, dist_rpc_error_message());
    return 0;
}

/* The victim's future failed, naming it (it is done: a shutdown came
   after it). */
static int victim_lost(int rank, dist_future_t *f) {
    dist_result r = dist_future_result(f);
    char who[16];
    snprintf(who, sizeof who, "'w%d'", g_job->victim);
    if (r != DIST_ERR_PEER_LOST || !strstr(dist_future_error(f), who))
        return FAIL("the call running on the victim: %s: %s (want DIST_ERR_PEER_LOST naming %s)", dist_result_name(r), dist_future_error(f), who);
    dist_future_free(f);
    return 0;
}

/* dist_rpc_shutdown(1) between two stamps; its result and sentence. */
static void shut(int64_t *t_call, int64_t *t_ret, int *res, char *msg, size_t cap) {
    __atomic_store_n(t_call, now_ns(), __ATOMIC_SEQ_CST);
    *res = dist_rpc_shutdown(1);
    snprintf(msg, cap, "%s", *res == DIST_OK ? "" : dist_rpc_error_message());
    __atomic_store_n(t_ret, now_ns(), __ATOMIC_SEQ_CST);
}

/* Static: "add" on E back to back, from before E's shutdown call to
   CALLS_MS after it, every one DIST_OK and exact. */
static int calls_static(int rank, const char *to) {
    int64_t k = 0, end = 0;
    for (;; k++) {
        dist_value_t *v = NULL;
        int64_t x = -1, t = now_ns(), e = __atomic_load_n(&sh->t_e_call, __ATOMIC_SEQ_CST);
        if (e && !end) end = e + (int64_t)CALLS_MS * 1000000;
        if (end && t >= end) break;
        dist_result r = dist_rpc_sync(to, "add", dist_value_pack("[II]", k, (int64_t)1), &v);
        if (r != DIST_OK || dist_value_get_int(v, &x) != DIST_OK || x != k + 1)
            return FAIL("call %lld to %s, %.0f ms after its shutdown call: %s: %s (got %lld)", (long long)k, to,
                        e ? (double)(now_ns() - e) / 1e6 : -1.0, dist_result_name(r), dist_rpc_error_message(), (long long)x);
        dist_value_free(v);
        sh->calls_ok++;
        if (e && t >= e) sh->calls_after++;
    }
    return 0;
}

/* A dynamic call's end: DIST_OK and exact, or refused because E left.
   Frees the future. */
static int judge_dynamic(int rank, dist_future_t *f, int64_t k, const char *to) {
    int64_t x = -1;
    int bad = 0;
    char who[20];
    dist_result r = dist_future_wait(f, 0);
    snprintf(who, sizeof who, "'%s'", to);
    if (r == DIST_OK && dist_value_get_int(dist_future_value(f), &x) == DIST_OK && x == k + 1) {
        sh->calls_ok++;
        if (__atomic_load_n(&sh->t_e_call, __ATOMIC_SEQ_CST)) sh->calls_after++;
    } else if (r == DIST_ERR_PEER_LOST && strstr(dist_future_error(f), who) && strstr(dist_future_error(f), "left")) {
        if (!sh->calls_left++) snprintf(sh->refused, sizeof sh->refused, "%s", dist_future_error(f));
    }
    else
        bad = FAIL("call %lld to %s: %s: %s (got %lld; want DIST_OK, or DIST_ERR_PEER_LOST naming %s and \"left\")", (long long)k, to,
                   dist_result_name(r), dist_future_error(f), (long long)x, who);
    dist_future_free(f);
    return bad;
}

/* Dynamic: 4 async "add" calls in flight to E until one is refused (it
   left); every one judged.  Slot k % 4 holds call k until call k + 4. */
static int calls_dynamic(int rank, const char *to) {
    dist_future_t *f[4] = { 0 };
    int64_t k = 0, end = now_ns() + (int64_t)(scaled_s(5) * 1e9);
    int bad = 0;
    for (;; k++) {
        dist_result r;
        if (f[k % 4]) { bad = judge_dynamic(rank, f[k % 4], k - 4, to); f[k % 4] = NULL; }
        if (bad || sh->calls_left) break;
        if (now_ns() > end) { bad = FAIL("%s never left: %d calls answered in 5 s", to, sh->calls_ok); break; }
        if ((r = dist_rpc_async(to, "add", dist_value_pack("[II]", k, (int64_t)1), &f[k % 4])) != DIST_OK) {
            f[k % 4] = NULL;     /* refused at once: it heard */
            if (r == DIST_ERR_PEER_LOST && strstr(dist_rpc_error_message(), "left")) {
                if (!sh->calls_left++) snprintf(sh->refused, sizeof sh->refused, "%s", dist_rpc_error_message());
            }
            else bad = FAIL("call %lld to %s: %s: %s", (long long)k, to, dist_result_name(r), dist_rpc_error_message());
            break;
        }
    }
    for (int64_t i = k - 3; i <= k; i++)          /* the ones still in flight */
        if (i >= 0 && f[i % 4]) {
            if (!bad) bad = judge_dynamic(rank, f[i % 4], i, to);
            else dist_future_free(f[i % 4]);
            f[i % 4] = NULL;
        }
    return bad;
}

/* The victim: dies with the calls pending on it (in_shutdown: 100 ms
   later, inside its own shutdown, which it called first). */
static void *die(void *p) {
    const job_t *j = (const job_t *)p;
    if (await_flag(&sh->hanging, j->hosted ? 1 : 2, scaled(10000)) != 0) {
        fail_at(j->victim, __LINE__, "the calls to the victim never came");
        return p;
    }
    if (j->in_shutdown) sleep_ms(100);
    sh->t_kill = now_ns();
    set_flag(&sh->dead);
    kill_self();
    return NULL;
}

static int rank_main(int rank, int port, int lfd, void *p) {
    const job_t *j = g_job = (const job_t *)p;
    dist_future_t *f = NULL;
    char e_name[16];
    rank_alarm((unsigned)(scaled_s(40) + 0.5));
    dist_result r = join(rank, port, lfd);
    if (r != DIST_OK) return sh->fail[rank][0] ? 1 : FAIL("dist_rpc_init: %s: %s", dist_result_name(r), dist_rpc_error_message());
    snprintf(e_name, sizeof e_name, "w%d", j->early);
    if (rank == j->victim) {
        pthread_t th;
        if (!j->in_shutdown) return die(p) ? 1 : 0;
        pthread_create(&th, NULL, die, p);
        r = dist_rpc_shutdown(1);
        return FAIL("the victim's shutdown returned before it died: %s: %s", dist_result_name(r), dist_rpc_error_message());
    }
    if ((rank == j->late || !j->hosted) && call_victim(rank, &f) != 0) return 1;
    if (await_flag(&sh->dead, 1, scaled(10000)) != 0) return FAIL("the victim never died");
    if (rank == j->early) {      /* at once (a shutdown waits for its calls: without one, it may not have seen the death yet) */
        if (j->dynamic && await_flag(&sh->served, 50, scaled(10000)) != 0) return FAIL("%d calls came in 10 s, want 50", __atomic_load_n(&sh->served, __ATOMIC_SEQ_CST));
        shut(&sh->t_e_call, &sh->t_e_ret, &sh->e_res, sh->e_msg, sizeof sh->e_msg);
        return f ? victim_lost(rank, f) : 0;
    }
    if ((j->dynamic ? calls_dynamic : calls_static)(rank, e_name) != 0) return 1;
    shut(&sh->t_l_call, &sh->t_l_ret, &sh->l_res, sh->l_msg, sizeof sh->l_msg);
    return victim_lost(rank, f);
}

/* One job: started, reaped, judged. */
static void run_case(const char *name, job_t *j) {
    static int serial;
    dist_store_host *host = NULL;
    pid_t pid[N];
    int st[N], reaped[N];
    char extra[1200], who[20], rank_s[20];
    int64_t t0 = now_ns();
    case_begin(name);
    memset(sh, 0, sizeof *sh);
    snprintf(j->run_id, sizeof j->run_id, "rpc-shutdown-%d-%d", (int)getpid(), ++serial);
    if (start_ranks(N, pid, st, reaped, 16, rank_main, j) != 0) { case_bad("listening socket: %s", strerror(errno)); case_end(secs_since(t0), NULL); return; }
    if (j->hosted) {             /* started after the fork (a thread of its own) */
        dist_config hc;
        memset(&hc, 0, sizeof hc);
        hc.run_id = j->run_id;
        hc.timeout_ms = scaled(TMO_MS);
        if (dist_store_host_start(&host, &hc, N, "127.0.0.1", 0) != DIST_OK) case_bad("dist_store_host_start: %s", dist_error_message(NULL));
        else __atomic_store_n(&sh->host_port, dist_store_host_port(host), __ATOMIC_SEQ_CST);
    }
    reap_all(N, pid, st, reaped, now_ns() + (int64_t)(scaled_s(60) * 1e9));
    dist_store_host_stop(host);
    for (int r = 0; r < N; r++) {
        if (reaped[r] == 2) case_bad("w%d hung: killed", r);
        else if (r == j->victim) {
            if (!(WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL && sh->dead)) case_bad("w%d, the victim, did not die by its own SIGKILL (status 0x%x)", r, st[r]);
        } else
            case_bad_status(r, st[r], "");
        if (sh->fail[r][0]) case_bad("w%d: %s", r, sh->fail[r]);
    }
    snprintf(who, sizeof who, "'w%d'", j->victim);
    snprintf(rank_s, sizeof rank_s, "rank %d", j->victim);
    double e_took = (double)(sh->t_e_ret - sh->t_e_call) / 1e9, l_took = (double)(sh->t_l_ret - sh->t_l_call) / 1e9;
    double e_after_l = (double)(sh->t_e_ret - sh->t_l_call) / 1e9;
    if (!sh->t_e_ret || !sh->t_l_ret) case_bad("a shutdown never returned (w%d's: %s, w%d's: %s)", j->early, sh->t_e_ret ? "did" : "no",
                                               j->late, sh->t_l_ret ? "did" : "no");
    else if (!j->dynamic) {
        if (sh->calls_after < 20) case_bad("w%d answered %d calls after its shutdown call (%d in all), want at least 20", j->early, sh->calls_after, sh->calls_ok);
        if (sh->e_res != DIST_ERR_PEER_LOST || !strstr(sh->e_msg, who) || !strstr(sh->e_msg, rank_s) ||
            (j->in_shutdown && !strstr(sh->e_msg, "let go of its references")))
            case_bad("w%d's shutdown: %s: %s (want DIST_ERR_PEER_LOST naming %s, %s%s)", j->early, dist_result_name(sh->e_res), sh->e_msg, who, rank_s,
                     j->in_shutdown ? ", at the meeting for references" : "");
        if (sh->t_e_ret < sh->t_l_call || e_after_l > scaled_s(1.0))
            case_bad("w%d's shutdown returned %.0f ms after w%d's shutdown call, want 0 to 1000 ms", j->early, e_after_l * 1e3, j->late);
        if (sh->l_res != DIST_ERR_PEER_LOST || !strstr(sh->l_msg, who) || !strstr(sh->l_msg, rank_s) || l_took > scaled_s(1.0))
            case_bad("w%d's shutdown: %s after %.0f ms: %s (want DIST_ERR_PEER_LOST within 1 s naming %s, %s)", j->late, dist_result_name(sh->l_res),
                     l_took * 1e3, sh->l_msg, who, rank_s);
    } else {
        if (sh->e_res != DIST_OK || e_took > scaled_s(1.0))
            case_bad("w%d's leave: %s after %.0f ms: %s (want DIST_OK within 1 s)", j->early, dist_result_name(sh->e_res), e_took * 1e3, sh->e_msg);
        if (sh->l_res != DIST_OK || l_took > scaled_s(1.0))
            case_bad("w%d's leave after: %s after %.0f ms: %s (want DIST_OK within 1 s)", j->late, dist_result_name(sh->l_res), l_took * 1e3, sh->l_msg);
        if (__atomic_load_n(&sh->served, __ATOMIC_SEQ_CST) != sh->calls_ok)
            case_bad("w%d served %d calls, w%d got %d answers", j->early, __atomic_load_n(&sh->served, __ATOMIC_SEQ_CST), j->late, sh->calls_ok);
        if (sh->calls_after < 1) case_bad("none of the calls in flight when w%d began to leave was answered", j->early);
    }
    snprintf(extra, sizeof extra, "w%d's shutdown %s in %.0f ms (%.0f ms after w%d's call), w%d's %s in %.0f ms; %d calls answered (%d after w%d's "
             "shutdown call)%s: %.200s", j->early, dist_result_name(sh->e_res), e_took * 1e3, e_after_l * 1e3, j->late, j->late,
             dist_result_name(sh->l_res), l_took * 1e3, sh->calls_ok, sh->calls_after, j->early, j->dynamic ? ", then refused" : "",
             j->dynamic ? sh->refused : sh->e_msg);
    case_end(secs_since(t0), extra);
}

int main(void) {
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    signal(SIGPIPE, SIG_IGN);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int64_t t0 = now_ns();
    static const struct { const char *name; int victim, early, late, hosted, dynamic, in_shutdown; } cases[] = {
        { "static: w2 killed, w1 shuts down at once and serves w0's calls for 300 ms: both shutdowns PEER_LOST naming w2, within 1 s of w0's", 2, 1, 0, 0, 0, 0 },
        { "static, store hosted here: w0 killed, w1 shuts down at once and serves w2 for 300 ms: both PEER_LOST naming w0, within 1 s", 0, 1, 2, 1, 0, 0 },
        { "static: w2 killed inside its own shutdown, after it arrived: the same, w2 named for its references", 2, 1, 0, 0, 0, 1 },
        { "dynamic: w2 killed, w1 leaves while w0 keeps 4 calls in flight to it: each served or refused as left; both leaves DIST_OK within 1 s", 2, 1, 0, 0, 1, 0 },
        { "dynamic, store hosted here: w0 killed, w1 leaves while w2 calls it: each served or refused; both leaves DIST_OK within 1 s", 0, 1, 2, 1, 1, 0 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int threads = 1; threads <= 4; threads += 3) {
            char name[300];
            job_t j;
            memset(&j, 0, sizeof j);
            j.threads = threads; j.victim = cases[c].victim; j.early = cases[c].early; j.late = cases[c].late;
            j.hosted = cases[c].hosted; j.dynamic = cases[c].dynamic; j.in_shutdown = cases[c].in_shutdown;
            snprintf(name, sizeof name, "%s [%d handler thread%s]", cases[c].name, threads, threads > 1 ? "s" : "");
            run_case(name, &j);
        }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
