// TIMEOUT: 240
// TRANSPORTS: auto tcp
// WINDOWS: no, not ported yet: its replacements are forked while the test runs
/* test_chaos.c - a training job that keeps going while its ranks are
   killed at random and replaced by newcomers.

   A process of its own hosts the store (dist_store_host_start, as distrun
   does: this one stays single-threaded, so it may fork newcomers at any
   time) and this one forks 8 ranks.  Each runs the elastic loop a user writes: step s is
   an all_reduce (sum) of G int64 ones on its communicator c, then
   dist_agree on "my all_reduce succeeded and gave exactly |c| in every
   element" (bit 0) and "I was told to finish" (bit 1); when the AND lacks
   bit 0 or fewer members are alive than c has, dist_shrink and the step
   again; else the result goes into the parameters and s moves on.  After
   every 5th step, dist_grow(c, 0) admits the newcomers waiting, which get
   (when dist_newcomers says there are any) the parameters and the step
   number by broadcast from rank 0 (a step of
   its own, agreed on and redone after a shrink like the others).  Meanwhile
   this process kills (SIGKILL) a random rank every 100-300 ms, CHAOS_KILLS
   times in all (20), never leaving fewer than 4, and forks a newcomer
   (cfg.join) in its place; once the last newcomer has joined it tells the
   ranks to finish.  Any rank that has joined may be killed at any point of
   the loop, inside dist_agree, dist_shrink and dist_grow too (a newcomer
   that finds a member dead goes on without it, and the next step shrinks
   it away); and every other kill, 0-25 ms after the last newcomer
   started, takes that newcomer if it is still joining (before, after or
   inside the dist_grow that admits it: the store records its death, so
   neither the members nor the newcomers admitted with it wait for it;
   CHAOS_NO_JOINING=1 leaves joining newcomers alone).  The victim is
   claimed atomically, so a rank that ends meanwhile is not taken.

   Checks: every kill was survived (every rank not killed exits 0, each
   killed one died of SIGKILL, no hang); every step's result exact; every
   final member has done the same number of steps and holds bitwise the
   same parameters (no step lost or done twice anywhere); the final
   communicator has 8 members; the job ends within its time limit, and
   each rank's peak memory stays under 64 MiB.  Prints the steps done,
   shrinks and grows, and the time. */
#ifndef DIST_TEST_LINKED
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
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define N 8
#define MAXP 64
#define G 64
#define TMO_MS 10000

enum { S_NONE, S_JOINING, S_STEPPING, S_GROWING, S_DOOMED, S_DONE };

typedef struct {
    atomic_int claimed;
    char fail[700];
    atomic_int state;
    int killed;
    int64_t steps, shrinks, grows;
    uint64_t checksum;
    int final_size;
    long maxrss_kb;
    int exited;
} proc_rec;

typedef struct {
    proc_rec p[MAXP];
    atomic_int finish;
    int port;
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(MAXP, &sh->p[rank].claimed, sh->p[rank].fail)

static uint64_t checksum(const int64_t *v, int n, int64_t s) {
    uint64_t h = mix64((uint64_t)s);
    for (int i = 0; i < n; i++) h = mix64(h ^ (uint64_t)v[i]);
    return h;
}

/* Steps that end in a dist_grow are marked; a rank the killer claimed
   waits for its death. */
static void mark(int rank, int from, int to) {
    int want = from;
    if (!atomic_compare_exchange_strong(&sh->p[rank].state, &want, to))
        for (;;) sleep_ms(1000);      /* doomed: the killer's SIGKILL comes */
}

static int member(int rank, int port, int lfd, void *arg) {
    char url[64];
    dist_t *w = NULL, *c;
    dist_config cfg;
    int64_t params[G + 1], v[G];      /* params[G]: the step number */
    int newcomer = arg != NULL;
    dist_result r;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, N, newcomer ? 1 : rank, scaled(TMO_MS), lfd);
    cfg.store_hosted = 1;
    cfg.run_id = "chaos";
    if (newcomer) cfg.join = 1;
    rank_alarm((unsigned)(scaled_s(150) + 0.5));
    memset(params, 0, sizeof params);
    if ((r = dist_init(&w, &cfg)) != DIST_OK) return FAIL("init%s -> %s: %s", newcomer ? " (joining)" : "", dist_result_name(r), dist_error_message(NULL));
    c = w;
    int sync = newcomer;      /* the state so far, from rank 0, before the next step */
    if (!newcomer) atomic_store(&sh->p[rank].state, S_STEPPING);
    for (;;) {
        int64_t s = params[G];
        int grow_after = s % 5 == 4 && !sync, alive = 0, size = dist_world_size(c);
        uint64_t flags;
        if (sync) {
            r = dist_broadcast(c, params, G + 1, DIST_INT64, 0);
            flags = (uint64_t)(r == DIST_OK);
            if ((r = dist_agree(c, &flags, &alive)) != DIST_OK) return FAIL("agree after a sync at step %lld: %s", (long long)s, dist_error_message(c));
            if (!(flags & 1) || alive < size) {
                dist_t *sm = NULL;
                if ((r = dist_shrink(c, &sm)) != DIST_OK) return FAIL("shrink at a sync: %s", dist_error_message(c));
                if (c != w) dist_destroy(c);
                c = sm;
                sh->p[rank].shrinks++;
                if (dist_rank(c) == 0 && newcomer && params[G] == 0) return FAIL("a newcomer became rank 0 of %d before it had the parameters (%d alive of %d, flags %llu)", dist_world_size(c), alive, size, (unsigned long long)flags);
                continue;
            }
            sync = 0;
            if (newcomer) { int want = S_NONE; atomic_compare_exchange_strong(&sh->p[rank].state, &want, S_STEPPING); }
            continue;
        }
        if (grow_after) mark(rank, S_STEPPING, S_GROWING);
        for (int i = 0; i < G; i++) v[i] = 1;
        r = dist_all_reduce(c, v, G, DIST_INT64, DIST_SUM);
        if (r == DIST_OK)
            for (int i = 0; i < G; i++)
                if (v[i] != size) return FAIL("step %lld: element %d is %lld on a communicator of %d", (long long)s, i, (long long)v[i], size);
        flags = (uint64_t)(r == DIST_OK) | (uint64_t)(atomic_load(&sh->finish) ? 2 : 0);
        if ((r = dist_agree(c, &flags, &alive)) != DIST_OK) return FAIL("agree at step %lld: %s", (long long)s, dist_error_message(c));
        if (!(flags & 1) || alive < size) {
            dist_t *sm = NULL;
            if ((r = dist_shrink(c, &sm)) != DIST_OK) return FAIL("shrink at step %lld: %s", (long long)s, dist_error_message(c));
            if (c != w) dist_destroy(c);
            c = sm;
            sh->p[rank].shrinks++;
            if (grow_after) mark(rank, S_GROWING, S_STEPPING);
            continue;              /* the step again */
        }
        for (int i = 0; i < G; i++) params[i] += v[i];
        params[G] = s + 1;
        sh->p[rank].steps = s + 1;
        if (flags & 2) break;
        if (grow_after) {
            dist_t *g = NULL;
            if ((r = dist_grow(c, 0, &g)) != DIST_OK) return FAIL("grow after step %lld: %s", (long long)s, dist_error_message(c));
            if (dist_newcomers(g) > 0) {      /* (not the size: a member may have died meanwhile) */
                sync = 1;
                sh->p[rank].grows++;
            }
            if (c != w) dist_destroy(c);
            c = g;
            mark(rank, S_GROWING, S_STEPPING);
        }
    }
    /* the end: everyone has the same steps and parameters */
    {
        int64_t mine = (int64_t)checksum(params, G + 1, params[G]), all[MAXP];
        int n = dist_world_size(c);
        struct rusage ru;
        OK(dist_all_gather(c, &mine, all, 1, DIST_INT64));
        for (int g = 0; g < n; g++)
            if (all[g] != mine) return FAIL("member %d of the final %d holds other parameters or another step count", g, n);
        sh->p[rank].checksum = (uint64_t)mine;
        sh->p[rank].final_size = n;
        OK(dist_barrier(c));
        getrusage(RUSAGE_SELF, &ru);
        sh->p[rank].maxrss_kb = ru.ru_maxrss;
    }
    atomic_store(&sh->p[rank].state, S_DONE);
    if (c != w) dist_destroy(c);
    if (!newcomer) dist_abort(w);      /* the world has dead members: no goodbyes */
    dist_destroy(w);
    sh->p[rank].exited = 1;
    return 0;
}

/* The store's process: serves until killed (or its parent is gone). */
static void store_main(void) {
    dist_store_host *host = NULL;
    dist_config hc;
    memset(&hc, 0, sizeof hc);
    hc.run_id = "chaos";
    hc.timeout_ms = scaled(TMO_MS);
    if (dist_store_host_start(&host, &hc, N, "127.0.0.1", 0) != DIST_OK) {
        fprintf(stderr, "chaos: dist_store_host_start: %s\n", dist_error_message(NULL));
        sh->port = -1;
        _exit(1);
    }
    sh->port = dist_store_host_port(host);
    for (pid_t parent = getppid(); getppid() == parent;) sleep_ms(50);
    _exit(0);
}

static pid_t start(int slot, int newcomer) {
    pid_t pid;
    fflush(NULL);
    if ((pid = fork()) == 0) _exit(member(slot, sh->port, -1, newcomer ? (void *)1 : NULL));
    return pid;
}

int main(void) {
    int kills = env_int("CHAOS_KILLS", 0, MAXP - N, 20), np = N, nkilled = 0;
    int kill_joining = !getenv("CHAOS_NO_JOINING"), njoining = 0;   /* newcomers are killed while they join too */
    pid_t pid[MAXP], store;
    int st[MAXP], reaped[MAXP], sst = 0;
    int64_t t0;
    uint64_t rnd = (uint64_t)getpid();
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    memset(sh, 0, sizeof *sh);
    memset(reaped, 0, sizeof reaped);
    printf("chaos: %d ranks, %d kills, transport %s\n", N, kills, getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto");
    case_begin("8 ranks train while ranks are killed and replaced");
    t0 = now_ns();
    fflush(NULL);
    if ((store = fork()) == 0) store_main();
    for (int64_t end = now_ns() + (int64_t)(scaled_s(10) * 1e9); !sh->port && now_ns() < end;) sleep_ms(1);
    if (sh->port <= 0) {
        case_bad("the store did not start");
        kill(store, SIGKILL);
        case_end(secs_since(t0), NULL);
        printf("%d failed\n", g_failed);
        return 1;
    }
    for (int i = 0; i < N; i++) pid[i] = start(i, 0);
    for (int k = 0; k < kills && !g_cur_failed; k++) {
        int victim = -1;
        /* (every other kill, when newcomers die joining too: soon after the last one started) */
        sleep_ms(kill_joining && (k & 1) ? (int)(mix64(rnd + (uint64_t)k) % 25) : 100 + (int)(mix64(rnd + (uint64_t)k) % 200));
        if (kill_joining && (k & 1) && np > N) {      /* every other kill: the newest newcomer, if it is still joining */
            int want = S_NONE;
            if (!sh->p[np - 1].killed && !reaped[np - 1] && atomic_compare_exchange_strong(&sh->p[np - 1].state, &want, S_DOOMED)) {
                victim = np - 1;
                njoining++;
            }
        }
        for (int tries = 0; tries < 5000 && victim < 0 && !g_cur_failed; tries++) {
            int alive = 0;
            for (int i = 0; i < np; i++) {     /* the members: newcomers still joining do not count */
                int st_i = atomic_load(&sh->p[i].state);
                alive += !sh->p[i].killed && (st_i == S_STEPPING || st_i == S_GROWING);
            }
            if (alive <= 4) { sleep_ms(2); continue; }     /* until the newcomers are in */
            int i = (int)(mix64(rnd ^ (uint64_t)(k * 1000 + tries)) % (uint64_t)np), want = S_STEPPING, want2 = S_GROWING;
            if (sh->p[i].killed || reaped[i]) continue;
            int want3 = S_NONE;
            if (atomic_compare_exchange_strong(&sh->p[i].state, &want, S_DOOMED) ||
                atomic_compare_exchange_strong(&sh->p[i].state, &want2, S_DOOMED) ||
                (kill_joining && i >= N && atomic_compare_exchange_strong(&sh->p[i].state, &want3, S_DOOMED) && ++njoining)) victim = i;
            else sleep_ms(1);
        }
        if (getenv("CHAOS_DEBUG")) {
            char states[MAXP + 1];
            for (int i = 0; i < np; i++) states[i] = sh->p[i].killed ? 'x' : "NJSGDd"[atomic_load(&sh->p[i].state)];
            states[np] = 0;
            fprintf(stderr, "chaos: %.2f s kill %d: process %d; states %s\n", secs_since(t0), k, victim, states);
        }
        if (victim < 0) continue;
        kill(pid[victim], SIGKILL);
        sh->p[victim].killed = 1;
        nkilled++;
        pid[np] = start(np, 1);
        np++;
    }
    /* the last newcomer in, then the end */
    for (int64_t end = now_ns() + (int64_t)(scaled_s(60) * 1e9); now_ns() < end;) {
        int joining = 0;
        for (int i = 0; i < np; i++) joining += !sh->p[i].killed && atomic_load(&sh->p[i].state) == S_JOINING;
        for (int i = 0; i < np; i++) joining += !sh->p[i].killed && atomic_load(&sh->p[i].state) == S_NONE && !reaped[i];
        if (!joining) break;
        sleep_ms(5);
    }
    atomic_store(&sh->finish, 1);
    reap_all(np, pid, st, reaped, now_ns() + (int64_t)(scaled_s(90) * 1e9));
    kill(store, SIGKILL);
    waitpid(store, &sst, 0);
    {
        uint64_t sum = 0;
        int64_t steps = -1, shrinks = 0, grows = 0;
        int finals = 0;
        for (int i = 0; i < np; i++) {
            proc_rec *p = &sh->p[i];
            if (reaped[i] == 2) case_bad("process %d hung: killed", i);
            if (p->killed) {
                if (!(WIFSIGNALED(st[i]) && WTERMSIG(st[i]) == SIGKILL)) case_bad("process %d, killed, ended with status 0x%x", i, st[i]);
                continue;
            }
            if (p->fail[0]) case_bad("process %d%s: %s", i, i >= N ? " (a newcomer)" : "", p->fail);
            else if (!WIFEXITED(st[i]) || WEXITSTATUS(st[i]) != 0 || !p->exited) case_bad_status(i, st[i], NULL);
            if (p->exited) {
                if (steps < 0) { steps = p->steps; sum = p->checksum; }
                else if (p->steps != steps || p->checksum != sum) case_bad("process %d ended at step %lld (another at %lld) or with other parameters", i, (long long)p->steps, (long long)steps);
                if (p->final_size != N) case_bad("process %d ended on a communicator of %d, want %d", i, p->final_size, N);
                if (p->maxrss_kb > 64 * 1024) case_bad("process %d peaked at %ld KiB", i, p->maxrss_kb);
                finals++;
            }
            shrinks = TEST_MAX(shrinks, p->shrinks);
            grows = TEST_MAX(grows, p->grows);
        }
        if (finals != N) case_bad("%d processes finished, want %d", finals, N);
        if (nkilled != kills) case_bad("%d kills made, %d asked for", nkilled, kills);
        {
            char extra[160];
            snprintf(extra, sizeof extra, "%d kills and newcomers (%d while joining); %lld steps; shrinks %lld, grows %lld (most seen by one rank)", nkilled,
                     njoining, (long long)steps, (long long)shrinks, (long long)grows);
            case_end(secs_since(t0), extra);
        }
    }
    printf("%d failed\n", g_failed);
    return g_failed ? 1 : 0;
}
