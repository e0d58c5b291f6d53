// WINDOWS: yes
// TIMEOUT: 120
/* test_spawn.c - dist_spawn(nprocs, fn, arg, cfg), the local launcher.
   What the ranks see is recorded in a MAP_SHARED mapping made before each
   call and judged by the parent.  Every dist_spawn that could hang runs in
   a forked "guard" process that the parent kills at a deadline.  One line
   per check; exit 0 only if every check passed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef _WIN32
#  include <arpa/inet.h>
#  include <netinet/in.h>
#  include <sys/prctl.h>
#  include <sys/socket.h>
#  include <sys/wait.h>
#endif
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#ifndef UNDER_TSAN                 /* testutil.h defines it (1) under ThreadSanitizer */
#  define UNDER_TSAN 0
#endif
/* AddressSanitizer's allocator (gcc 12's) takes no lock around fork: a
   rank forked while another thread of the parent (the other job's store)
   is inside malloc inherits that lock held, and waits on it forever. */
#if defined(__SANITIZE_ADDRESS__)
#  define UNDER_ASAN 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define UNDER_ASAN 1
#  endif
#endif
#ifndef UNDER_ASAN
#  define UNDER_ASAN 0
#endif

#define MAXR 16

/* Is something listening on 127.0.0.1:port? */
static int port_listening(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0), r;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0) return 0;
    r = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
#ifdef _WIN32
    closesocket(s);
#else
    close(s);
#endif
    return r;
}

/* ---- what the ranks record ------------------------------------------------- */

typedef struct rec {
    int calls[MAXR];          /* fn calls per rank */
    int world[MAXR];          /* world size each rank saw */
    int arg_ok[MAXR];         /* the arg pointer and what it points to */
    int ring_ok[MAXR];        /* a message went around the ring */
    int returned[MAXR];       /* fn returned (did not get killed) */
    long fail_at;             /* when the failing rank returned (ms, CLOCK_MONOTONIC) */
    int port_seen;            /* the store port was listening during fn */
} rec_t;

static rec_t *g_rec;

typedef struct spawn_arg { int magic; int n; int port; } spawn_arg;

static int ring(dist_t *w) {
    int n = dist_world_size(w), me = dist_rank(w), token = 0;
    if (n == 1) return 1;
    if (me == 0) {
        if (dist_send(w, &token, 1, DIST_INT32, 1, 3) != DIST_OK) return 0;
        if (dist_recv(w, &token, 1, DIST_INT32, n - 1, 3) != DIST_OK) return 0;
        return token == n * (n - 1) / 2;
    }
    if (dist_recv(w, &token, 1, DIST_INT32, me - 1, 3) != DIST_OK) return 0;
    token += me;
    return dist_send(w, &token, 1, DIST_INT32, (me + 1) % n, 3) == DIST_OK;
}

static spawn_arg g_arg;   /* the address passed as arg */

static int fn_record(dist_t *w, void *arg) {
    int me = dist_rank(w);
    const spawn_arg *a = (const spawn_arg *)arg;
    if (me < 0 || me >= MAXR) return 9;
    __atomic_add_fetch(&g_rec->calls[me], 1, __ATOMIC_SEQ_CST);
    g_rec->world[me] = dist_world_size(w);
    g_rec->arg_ok[me] = a == &g_arg && a->magic == 0x5eed && a->n == dist_world_size(w);
    g_rec->ring_ok[me] = ring(w);
    g_rec->returned[me] = 1;
    return g_rec->ring_ok[me] && g_rec->arg_ok[me] ? 0 : 4;
}

/* rank 1 returns 5 at once; the others wait in a receive nobody answers */
static int fn_fail5(dist_t *w, void *arg) {
    int me = dist_rank(w), x = 0;
    (void)arg;
    if (me == 1) {
        g_rec->fail_at = now_ms();
        g_rec->returned[me] = 1;
        return 5;
    }
    dist_recv(w, &x, 1, DIST_INT32, (me + 2) % dist_world_size(w) == 1 ? 0 : (me + 2) % dist_world_size(w), 77);
    g_rec->returned[me] = 1;
    return 0;
}

/* rank 1 fails while the others wait for a message from it */
static int fn_fail5_peer(dist_t *w, void *arg) {
    int me = dist_rank(w), x = 0;
    (void)arg;
    if (me == 1) {
        g_rec->fail_at = now_ms();
        return 5;
    }
    dist_recv(w, &x, 1, DIST_INT32, 1, 77);
    g_rec->returned[me] = 1;
    return 0;
}

#ifndef _WIN32
static int fn_sigkill(dist_t *w, void *arg) {
    int me = dist_rank(w), x = 0;
    (void)arg;
    if (me == 2) {
        g_rec->fail_at = now_ms();
        raise(SIGKILL);
    }
    dist_recv(w, &x, 1, DIST_INT32, me == 0 ? 1 : 0, 78);
    g_rec->returned[me] = 1;
    return 0;
}
#endif

static int fn_port(dist_t *w, void *arg) {
    const spawn_arg *a = (const spawn_arg *)arg;
    if (dist_rank(w) == 1) g_rec->port_seen = port_listening(a->port);
    return fn_record(w, arg);
}

/* ---- guarded calls ---------------------------------------------------------- */

/* dist_spawn in a forked guard process, so a hang is bounded: returns the
   guard's exit status (dist_spawn's result & 0xff, -2 when it was killed at
   the deadline) and the elapsed time. */
typedef struct guard_out { int result; char msg[TEST_ERRLEN]; } guard_out;
static guard_out *g_out;

#ifdef _WIN32
/* Windows has no fork: spawn_job runs the job in a process of its own,
   without the deadline (the runner's time limit still holds). */
static int guarded_spawn(int n, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg, int deadline_ms, long *elapsed) {
    long t0 = now_ms();
    (void)deadline_ms;
    g_out->result = spawn_job(n, fn, arg, cfg);
    snprintf(g_out->msg, sizeof g_out->msg, "%s", spawn_job_error());
    *elapsed = now_ms() - t0;
    return g_out->result;
}
#else
static int guarded_spawn(int n, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg, int deadline_ms, long *elapsed) {
    long t0 = now_ms(), deadline;
    pid_t pid;
    int st = 0;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        g_out->result = dist_spawn(n, fn, arg, cfg);
        snprintf(g_out->msg, sizeof g_out->msg, "%s", dist_error_message(NULL));
        fflush(NULL);
        _exit(0);
    }
    if (pid < 0) { perror("fork"); exit(1); }
    deadline = t0 + scaled(deadline_ms);
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) break;
        if (now_ms() >= deadline) {
            /* the guard's ranks die with it (PR_SET_PDEATHSIG in dist_spawn) */
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            *elapsed = now_ms() - t0;
            return -2;
        }
        sleep_ms(5);
    }
    *elapsed = now_ms() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return -3;
    return g_out->result;
}
#endif

static void reset(void) {
    memset(g_rec, 0, sizeof *g_rec);
    memset(g_out, 0, sizeof *g_out);
}

static int ranks_ok(int n, char *why, size_t cap) {
    for (int r = 0; r < n; r++) {
        if (g_rec->calls[r] != 1) { snprintf(why, cap, "rank %d ran fn %d times", r, g_rec->calls[r]); return 0; }
        if (g_rec->world[r] != n) { snprintf(why, cap, "rank %d saw world size %d", r, g_rec->world[r]); return 0; }
        if (!g_rec->arg_ok[r]) { snprintf(why, cap, "rank %d did not get the arg pointer", r); return 0; }
        if (!g_rec->ring_ok[r]) { snprintf(why, cap, "rank %d: the ring exchange failed", r); return 0; }
    }
    for (int r = n; r < MAXR; r++)
        if (g_rec->calls[r]) { snprintf(why, cap, "a rank %d ran, outside 0..%d", r, n - 1); return 0; }
    return 1;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_sizes(void) {
    static const int sizes[] = { 1, 2, 7 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = sizes[i], res;
        long dt = 0;
        char name[120], why[200];
        dist_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.timeout_ms = 20000;
        snprintf(name, sizeof name, "dist_spawn(%d): returns 0, each rank 0..%d once, world size %d, arg reaches fn", n, n - 1, n);
        reset();
        g_arg.magic = 0x5eed; g_arg.n = n;
        res = guarded_spawn(n, fn_record, &g_arg, &cfg, 30000, &dt);
        if (res != 0) fail(name, "returned %d (%s)", res, g_out->msg);
        else if (!ranks_ok(n, why, sizeof why)) fail(name, "%s", why);
        else ok("%s  [%ld ms]", name, dt);
    }
    {   /* a NULL config */
        const char *name = "dist_spawn(3) with cfg NULL";
        int res;
        long dt = 0;
        char why[200];
        reset();
        g_arg.magic = 0x5eed; g_arg.n = 3;
        res = guarded_spawn(3, fn_record, &g_arg, NULL, 30000, &dt);
        if (res != 0) fail(name, "returned %d (%s)", res, g_out->msg);
        else if (!ranks_ok(3, why, sizeof why)) fail(name, "%s", why);
        else ok("%s  [%ld ms]", name, dt);
    }
}

static void test_fail_code(void) {
    dist_config cfg;
    long dt = 0;
    int res;
    const char *name = "one fn returns 5 (others in a long dist_recv): dist_spawn returns 5 and stops the others within 8 s";
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 12000;   /* the receives would wait 12 s */
    reset();
    res = guarded_spawn(4, fn_fail5, NULL, &cfg, 90000, &dt);
    if (res == -2) fail(name, "dist_spawn did not return within %d s", scaled(90000) / 1000);
    else if (res != 5) fail(name, "returned %d (%s)", res, g_out->msg);
    else {
        long stop = g_rec->fail_at ? now_ms() - g_rec->fail_at : -1;
        /* now_ms() - fail_at over-counts by the little time since the return */
        /* not scaled for sanitizers: stopping is SIGTERM (then SIGKILL after
           2 s), which does not get slower with the CPU */
        if (stop < 0 || stop > 8000)
            fail(name, "dist_spawn returned %.1f s after rank 1's fn returned 5 (the ranks' timeout is %.0f s)",
                 stop / 1000.0, cfg.timeout_ms / 1000.0);
        else ok("%s  [%ld ms after the failure; the waiting ranks %s; %s]", name, stop,
                g_rec->returned[0] || g_rec->returned[2] || g_rec->returned[3] ? "returned from fn" : "were stopped in fn",
                g_out->msg);
    }

    name = "one fn returns 5 while the others wait for its message: dist_spawn returns 5 within 10 s";
    reset();
    res = guarded_spawn(3, fn_fail5_peer, NULL, &cfg, 90000, &dt);
    if (res == -2) fail(name, "dist_spawn did not return within %d s", scaled(90000) / 1000);
    else if (res != 5) fail(name, "returned %d (%s)", res, g_out->msg);
    else {
        long stop = g_rec->fail_at ? now_ms() - g_rec->fail_at : -1;
        if (stop < 0 || stop > scaled(10000)) fail(name, "dist_spawn returned %.1f s after the failure", stop / 1000.0);
        else ok("%s  [%ld ms; %s]", name, stop, g_out->msg);
    }
}

static void test_sigkill(void) {
#ifdef _WIN32
    printf("left out on Windows: the case \"a rank raises SIGKILL\" (no signals)\n");
#else
    dist_config cfg;
    long dt = 0;
    int res;
    const char *name = "a rank raises SIGKILL: dist_spawn returns 128 + 9 within 10 s";
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 60000;
    reset();
    res = guarded_spawn(3, fn_sigkill, NULL, &cfg, 90000, &dt);
    if (res == -2) fail(name, "dist_spawn did not return within %d s", scaled(90000) / 1000);
    else if (res != 128 + 9) fail(name, "returned %d (%s)", res, g_out->msg);
    else if (!g_rec->fail_at || now_ms() - g_rec->fail_at > scaled(10000))
        fail(name, "returned %.1f s after the kill", (now_ms() - g_rec->fail_at) / 1000.0);
    else if (!strstr(g_out->msg, "rank 2") || !strstr(g_out->msg, "signal 9"))
        fail(name, "the message does not say rank 2 was killed by signal 9: \"%s\"", g_out->msg);
    else ok("%s  [%s]", name, g_out->msg);
#endif
}

/* Two dist_spawn jobs at the same time from two forked parents. */
static void test_concurrent_parents(void) {
#ifdef _WIN32
    printf("left out on Windows: the case \"two dist_spawn(3) jobs at once from two forked parents\" (no fork)\n");
#else
    const char *name = "two dist_spawn(3) jobs at once from two forked parents (each picks its own port)";
    pid_t pids[2];
    int res[2] = { -1, -1 };
    rec_t *recs = (rec_t *)mmap(NULL, 2 * sizeof(rec_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    long deadline;
    rec_t *saved = g_rec;
    if (recs == MAP_FAILED) { fail(name, "mmap"); return; }
    memset(recs, 0, 2 * sizeof(rec_t));
    fflush(NULL);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            dist_config cfg;
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            memset(&cfg, 0, sizeof cfg);
            cfg.timeout_ms = 20000;
            g_rec = &recs[i];
            g_arg.magic = 0x5eed; g_arg.n = 3;
            _exit(dist_spawn(3, fn_record, &g_arg, &cfg) & 0xff);
        }
    }
    deadline = now_ms() + scaled(40000);
    for (int i = 0; i < 2; i++) {
        int st;
        for (;;) {
            if (waitpid(pids[i], &st, WNOHANG) == pids[i]) { res[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st); break; }
            if (now_ms() >= deadline) { kill(pids[i], SIGKILL); waitpid(pids[i], &st, 0); res[i] = -2; break; }
            sleep_ms(5);
        }
    }
    {
        char why[200] = "";
        int good = res[0] == 0 && res[1] == 0;
        for (int i = 0; i < 2 && good; i++) {
            g_rec = &recs[i];
            if (!ranks_ok(3, why, sizeof why)) good = 0;
        }
        if (good) ok("%s", name);
        else fail(name, "results %d and %d %s", res[0], res[1], why);
    }
    g_rec = saved;
    munmap(recs, 2 * sizeof(rec_t));
#endif
}

#if !UNDER_TSAN && !UNDER_ASAN && !defined(_WIN32)
typedef struct thr { int res; rec_t rec; char why[300]; } thr_t;
static thr_t *g_thr;   /* MAP_SHARED: the ranks write their records here */
static _Thread_local int t_index;

static int fn_thread_job(dist_t *w, void *arg) {
    (void)arg;
    g_rec = &g_thr[t_index].rec;
    return fn_record(w, &g_arg);
}

static void *spawn_thread(void *p) {
    dist_config cfg;
    t_index = (int)(intptr_t)p;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 20000;
    g_thr[t_index].res = dist_spawn(3, fn_thread_job, NULL, &cfg);
    if (g_thr[t_index].res != 0) snprintf(g_thr[t_index].why, sizeof g_thr[t_index].why, "%s", dist_error_message(NULL));
    return NULL;
}

static void threads_body(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, spawn_thread, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}
#endif

static void test_concurrent_threads(void) {
    const char *name = "two dist_spawn(3) jobs at once from two threads of one process";
#if defined(_WIN32)
    /* a rank runs main again to the same dist_spawn call; with two threads
       calling it, which call is which is a race */
    printf("left out on Windows: the case \"%s\" (a rank started again cannot tell which thread's call it is)\n", name);
#elif UNDER_TSAN
    /* ThreadSanitizer ends a child of a multi-threaded fork that starts
       threads (die_after_fork), which every rank does. */
    printf("skip %s: not under ThreadSanitizer (fork from a threaded process)\n", name);
#elif UNDER_ASAN
    printf("skip %s: not under AddressSanitizer (its allocator takes no lock around fork: a rank forked while the other "
           "job's store thread is in malloc waits forever; plain builds run it)\n", name);
#else
    pid_t pid;
    int st = 0;
    long deadline;
    g_thr = (thr_t *)mmap(NULL, 2 * sizeof(thr_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_thr == MAP_FAILED) { fail(name, "mmap"); return; }
    memset(g_thr, 0, 2 * sizeof(thr_t));
    g_thr[0].res = g_thr[1].res = -100;
    g_arg.magic = 0x5eed; g_arg.n = 3;
    fflush(NULL);
    pid = fork();   /* a guard, so a hang is bounded */
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        threads_body();
        _exit(0);
    }
    deadline = now_ms() + scaled(40000);
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        if (now_ms() >= deadline) { kill(pid, SIGKILL); waitpid(pid, &st, 0); break; }
        sleep_ms(5);
    }
    {
        char why[200] = "";
        rec_t *saved = g_rec;
        int good = g_thr[0].res == 0 && g_thr[1].res == 0;
        for (int i = 0; i < 2 && good; i++) {
            g_rec = &g_thr[i].rec;
            if (!ranks_ok(3, why, sizeof why)) good = 0;
        }
        g_rec = saved;
        if (good) ok("%s", name);
        else fail(name, "results %d and %d %s%s%s%s%s%s%s", g_thr[0].res, g_thr[1].res, why, g_thr[0].why[0] ? " [0: " : "", g_thr[0].why,
                  g_thr[0].why[0] ? "]" : "", g_thr[1].why[0] ? " [1: " : "", g_thr[1].why, g_thr[1].why[0] ? "]" : "");
    }
    munmap(g_thr, 2 * sizeof(thr_t));
#endif
}

static void test_back_to_back(void) {
    const char *name = "two dist_spawn(4) jobs back to back (a fresh port each)";
    int res1, res2;
    long dt = 0;
    char why[200] = "";
    dist_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 20000;
    g_arg.magic = 0x5eed; g_arg.n = 4;
    reset();
    res1 = guarded_spawn(4, fn_record, &g_arg, &cfg, 30000, &dt);
    if (res1 == 0 && !ranks_ok(4, why, sizeof why)) res1 = 100;
    reset();
    res2 = guarded_spawn(4, fn_record, &g_arg, &cfg, 30000, &dt);
    if (res2 == 0 && !ranks_ok(4, why, sizeof why)) res2 = 100;
    if (res1 == 0 && res2 == 0) ok("%s", name);
    else fail(name, "results %d and %d %s", res1, res2, why);
}

static void test_init_method(void) {
    const char *name = "cfg.init_method = tcp://127.0.0.1:PORT: the store listens on PORT";
    dist_config cfg;
    char url[64], why[200];
    long dt = 0;
    int res, port = first_value("port", free_port(AF_INET));   /* (Windows: every process of the case on the same port) */
    memset(&cfg, 0, sizeof cfg);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    cfg.init_method = url;
    cfg.timeout_ms = 20000;
    reset();
    g_arg.magic = 0x5eed; g_arg.n = 3; g_arg.port = port;
    res = guarded_spawn(3, fn_port, &g_arg, &cfg, 30000, &dt);
    if (res != 0) fail(name, "returned %d (%s)", res, g_out->msg);
    else if (!ranks_ok(3, why, sizeof why)) fail(name, "%s", why);
    else if (!g_rec->port_seen) fail(name, "nothing listened on port %d during the job", port);
    else if (port_listening(port)) fail(name, "port %d still listening after the job", port);
    else ok("%s", name);

    name = "cfg.init_method naming an unknown scheme: dist_spawn fails with the rank's init message";
    cfg.init_method = "foo://x";
    reset();
    res = guarded_spawn(2, fn_record, &g_arg, &cfg, 30000, &dt);
    if (res == 0 || res == -2 || res == -3) fail(name, "returned %d", res);
    else if (!strstr(g_out->msg, "foo://x")) fail(name, "returned %d, message \"%s\"", res, g_out->msg);
    else if (g_rec->calls[0] || g_rec->calls[1]) fail(name, "fn ran");
    else ok("%s  [%d: %s]", name, res, g_out->msg);
}

static int fn_never(dist_t *w, void *arg) { (void)w; (void)arg; return 0; }

static void test_bad_args(void) {
    static const int bad[] = { 0, -1 };
    /* Windows: not again in a process that runs main again, where these
       calls of dist_spawn would count before the one it is to make */
    if (!first_process()) return;
    for (size_t i = 0; i < 2; i++) {
        char name[80];
        int res;
        snprintf(name, sizeof name, "dist_spawn(%d) returns -1 with a message", bad[i]);
        dist_init(NULL, NULL);   /* leaves another sentence behind first */
        res = dist_spawn(bad[i], fn_never, NULL, NULL);
        if (res != -1) fail(name, "returned %d", res);
        else if (!dist_error_message(NULL)[0] || strstr(dist_error_message(NULL), "world")) fail(name, "no message of its own");
        else {
            char num[16];
            snprintf(num, sizeof num, "%d", bad[i]);
            if (!strstr(dist_error_message(NULL), num)) fail(name, "the message does not mention %s: \"%s\"", num, dist_error_message(NULL));
            else ok("%s  [%s]", name, dist_error_message(NULL));
        }
    }
    {
        const char *name = "dist_spawn(2, NULL fn) returns -1 with a message";
        int res;
        dist_init(NULL, NULL);
        res = dist_spawn(2, NULL, NULL, NULL);
        if (res != -1 || !strstr(dist_error_message(NULL), "NULL")) fail(name, "returned %d, \"%s\"", res, dist_error_message(NULL));
        else ok("%s  [%s]", name, dist_error_message(NULL));
    }
}

int main(void) {
    test_start();
    /* nothing from a surrounding launcher may leak into the ranks */
    UNSET_ENV(LAUNCHER_ENV);
    g_rec = (rec_t *)mmap(NULL, sizeof *g_rec, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_out = (guard_out *)mmap(NULL, sizeof *g_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_rec == MAP_FAILED || g_out == MAP_FAILED) { perror("mmap"); return 1; }

    test_bad_args();
    test_sizes();
    test_back_to_back();
    test_concurrent_parents();
    test_concurrent_threads();
    test_init_method();
    test_sigkill();
    test_fail_code();

    munmap(g_rec, sizeof *g_rec);
    munmap(g_out, sizeof *g_out);
    if (g_failures) { printf("%d check(s) failed\n", g_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
