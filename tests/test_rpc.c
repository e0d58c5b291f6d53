// TIMEOUT: 120
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_rpc.c - dist_rpc.h's calls, futures and shutdown between forked
   workers (tcp://127.0.0.1, rank 0's listening socket made before the
   fork).  A worker that sees a problem writes it to a MAP_SHARED table; the
   parent prints one line per case and judges the exit statuses.

   1. n=3, 2 handler threads: sync add (ints), async echo of 64 values in
      flight to both other workers (strings, bytes, tensors, nested lists;
      every eighth with tensors of 64 KiB to 1 MiB + 17 B that travel apart,
      and one of 64 KiB - 1 B inline), each checked against what was sent,
      and one such value echoed by the caller itself; then-callbacks (each runs once),
      wait_all; unknown function -> DIST_ERR_UNKNOWN_FUNCTION naming the
      function and the worker; a handler that fails -> DIST_ERR_REMOTE with
      the worker, the function and the handler's own words; a call slower
      than its 300 ms timeout -> DIST_ERR_TIMEOUT within 0.3-1 s, and the
      agent works after it; worker info by name and rank; a deferred call
      answered from another thread; a handler forwarding a nested future.
      Graceful shutdown on every worker.
   2. n=2, ONE handler thread each: both workers at once call the other's
      "ping_back", whose handler makes a blocking nested rpc_sync back to
      the caller's "add": must not deadlock (a handler waiting on a nested
      call lends its place to another thread); 20 rounds, every result
      exact.
   3. n=3: worker 2 dies (SIGKILL) while worker 0 waits on its slow call
      (no timeout) and worker 1 on an async one: both fail with
      DIST_ERR_PEER_LOST within 1 s of the death, naming the worker; then
      both shut down gracefully: within 2 s, DIST_ERR_PEER_LOST, naming
      the dead worker ("is gone"), not after the whole timeout.
   4. n=2: graceful shutdown with 8 slow calls (200 ms each) in flight:
      every future completes with its exact result, both shutdowns return
      DIST_OK, and nothing runs after.
   5. n=3 with two workers named alike: dist_rpc_init fails on every
      worker with DIST_ERR_INIT naming both ranks and the name.
   6. n=2, default timeout 1 s: worker 1 shuts down at once and serves;
      worker 0 calls it every 100 ms for 2.5 s, then shuts down: both
      shutdowns return DIST_OK (the wait for the others lasts while calls
      come).  Then the same with worker 0 silent for 2.5 s: worker 1's
      shutdown gives up with DIST_ERR_TIMEOUT about 1 s after its last
      call, saying who had not arrived. */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MAXW 4
typedef struct {
    atomic_int claimed[MAXW];
    char fail[MAXW][600];
    int64_t death_ns;
    int dead;                    /* case 3: worker 2 is about to die (death_ns set) */
    int cb_runs;
    int handler_runs;
    char note[MAXW][800];
} shared_t;
static shared_t *sh;
static int g_rank;

DEFINE_FAIL_AT(MAXW, &sh->claimed[rank], sh->fail[rank])
#define WFAIL(...) fail_at(g_rank, __LINE__, __VA_ARGS__)

/* ---- handlers (registered on every worker) ---- */
static dist_value_t *h_add(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t a, b;
    if (dist_value_unpack(args, "[II]", &a, &b) != DIST_OK) { dist_rpc_call_fail(call, "add: %s", dist_rpc_error_message()); return NULL; }
    return dist_value_int(a + b);
}

/* A copy of the arguments, through the wire format. */
static dist_value_t *h_echo(dist_rpc_call_t *call, const dist_value_t *args) {
    size_t len = 0;
    dist_value_encode(args, NULL, 0, &len);
    uint8_t *b = malloc(len ? len : 1);
    dist_value_t *v = NULL;
    if (dist_value_encode(args, b, len, &len) != DIST_OK || dist_value_decode(b, len, &v) != DIST_OK)
        dist_rpc_call_fail(call, "echo: %s", dist_rpc_error_message());
    free(b);
    return v;
}

static dist_value_t *h_fail(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)args;
    dist_rpc_call_fail(call, "the observer's battery is flat (code %d)", 42);
    return NULL;
}

static dist_value_t *h_sleep(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t ms = 0, tag = 0;
    (void)call;
    dist_value_unpack(args, "[II]", &ms, &tag);
    sleep_ms((int)ms);
    __atomic_add_fetch(&sh->handler_runs, 1, __ATOMIC_SEQ_CST);
    return dist_value_int(tag);
}

/* Calls back the caller's "add" with a blocking nested call. */
static dist_value_t *h_ping_back(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t x = 0;
    dist_worker_info wi;
    char to[32];
    dist_value_t *r = NULL;
    dist_value_unpack(args, "[I]", &x);
    snprintf(to, sizeof to, "w%d", dist_rpc_call_caller(call));
    if (dist_rpc_get_worker_info(to, &wi) != DIST_OK || dist_rpc_sync(to, "add", dist_value_pack("[II]", x, (int64_t)1000), &r) != DIST_OK) {
        dist_rpc_call_fail(call, "ping_back: the nested call failed: %s", dist_rpc_error_message());
        return NULL;
    }
    return r;
}

/* Deferred: answered by a thread of its own after 50 ms. */
static void *answer_later(void *p) {
    dist_rpc_call_t *call = (dist_rpc_call_t *)p;
    sleep_ms(50);
    dist_rpc_call_reply(call, dist_value_string("later"));
    return NULL;
}
static dist_value_t *h_deferred(dist_rpc_call_t *call, const dist_value_t *args) {
    pthread_t th;
    (void)args;
    dist_rpc_call_defer(call);
    pthread_create(&th, NULL, answer_later, call);
    pthread_detach(th);
    return NULL;
}

/* Forwards a nested async call's result without holding a thread. */
static dist_value_t *h_forward(dist_rpc_call_t *call, const dist_value_t *args) {
    dist_future_t *f = NULL;
    int64_t a = 0, b = 0;
    dist_value_unpack(args, "[II]", &a, &b);
    if (dist_rpc_async("w2", "add", dist_value_pack("[II]", a, b), &f) != DIST_OK) {
        dist_rpc_call_fail(call, "forward: %s", dist_rpc_error_message());
        return NULL;
    }
    dist_rpc_call_defer(call);
    dist_rpc_call_forward(call, f);
    return NULL;
}

static void register_all(void) {
    dist_rpc_register("add", h_add);
    dist_rpc_register("echo", h_echo);
    dist_rpc_register("fail", h_fail);
    dist_rpc_register("sleep", h_sleep);
    dist_rpc_register("ping_back", h_ping_back);
    dist_rpc_register("deferred", h_deferred);
    dist_rpc_register("forward", h_forward);
}

/* ---- the launcher ---- */
static int g_rpc_timeout_ms = 0;     /* the agents' default timeout (0: the library's) */
typedef int (*worker_fn)(int rank, int n);


typedef struct { int n, threads; worker_fn fn; const char *const *names; } job_arg;

/* A worker of the job (fork_ranks): dist_rpc_init, then fn; with names,
   only what dist_rpc_init said, into note[r]. */
static int worker_main(int r, int port, int lfd, void *p) {
    const job_arg *a = (const job_arg *)p;
    g_rank = r;
    rank_alarm((unsigned)(40 * g_scale));
    register_all();
    dist_result res = rpc_worker_init(r, a->n, port, lfd, a->threads, a->names ? a->names[r] : NULL, g_rpc_timeout_ms);
    if (res != DIST_OK && !a->names) { WFAIL("dist_rpc_init: %s: %s", dist_result_name(res), dist_rpc_error_message()); return 1; }
    if (a->names) {
        snprintf(sh->note[r], sizeof sh->note[r], "%s|%s", dist_result_name(res), dist_rpc_error_message());
        if (res == DIST_OK) dist_rpc_shutdown(0);
        return 0;
    }
    return a->fn(r, a->n);
}

/* The worker the current case kills (SIGKILL), or -1. */
static int g_victim = -1;

static double run_job(int n, int threads, worker_fn fn, const char *const *names) {
    int64_t t0 = now_ns();
    job_arg a = { n, threads, fn, names };
    if (run_workers(n, worker_main, &a, 60, g_victim, &sh->dead) != 0) return 0;
    for (int r = 0; r < n; r++) if (sh->fail[r][0]) case_bad("worker %d: %s", r, sh->fail[r]);
    return secs_since(t0);
}

static void begin(const char *name) { case_begin(name); memset(sh, 0, sizeof *sh); }

/* ---- 6 ---- */
static int g_silent;                 /* case 6b: worker 0 makes no calls */
static int fn_serving_shutdown(int rank, int n) {
    (void)n;
    int64_t t0 = now_ns();
    if (rank == 1) {
        dist_result r = dist_rpc_shutdown(1);
        double s = secs_since(t0);
        snprintf(sh->note[1], sizeof sh->note[1], "%s after %.2f s|%s", dist_result_name(r), s, dist_rpc_error_message());
        return 0;
    }
    while (secs_since(t0) < 2.5 * g_scale) {
        if (!g_silent) {
            dist_value_t *v = NULL;
            if (dist_rpc_sync("w1", "add", dist_value_pack("[II]", (int64_t)1, (int64_t)2), &v) != DIST_OK) return WFAIL("add: %s", dist_rpc_error_message());
            dist_value_free(v);
        }
        usleep(100 * 1000);
    }
    dist_result r = dist_rpc_shutdown(g_silent ? 0 : 1);
    snprintf(sh->note[0], sizeof sh->note[0], "%s|%s", dist_result_name(r), dist_rpc_error_message());
    return 0;
}

/* ---- 1 ---- */
static void then_cb(dist_future_t *f, void *user) {
    (void)f;
    __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST);
}

/* Value k; every eighth also holds tensors large enough to travel apart
   (exactly the threshold, one past a 1 MiB chunk, a 3-d float64 one) and
   one just below it, which travels inline. */
static dist_value_t *make_value(int k) {
    float t[12];
    int64_t shape[2] = { 3, 4 };
    char s[40];
    for (int i = 0; i < 12; i++) t[i] = (float)(k * 100 + i);
    snprintf(s, sizeof s, "value %d", k);
    dist_value_t *v = dist_value_pack("[Is[bt]]", (int64_t)k, s, s, (size_t)(k % 7), DIST_FLOAT32, 2, shape, t);
    if (k % 8 == 3) {
        size_t n[3] = { DIST_RPC_APART_BYTES, ((size_t)1 << 20) + 17 + (size_t)k, DIST_RPC_APART_BYTES - 1 };
        for (int j = 0; j < 3; j++) {
            uint8_t *b = malloc(n[j]);
            int64_t sh1[1] = { (int64_t)n[j] };
            for (size_t i = 0; i < n[j]; i++) b[i] = (uint8_t)(i * 31 + (size_t)k * 7 + (size_t)j);
            dist_value_append(v, dist_value_tensor(DIST_UINT8, 1, sh1, b));
            free(b);
        }
        int64_t sh3[3] = { 3, 128, 257 };
        dist_value_t *d = dist_value_tensor(DIST_FLOAT64, 3, sh3, NULL);
        dist_tensor_view tv;
        dist_value_get_tensor(d, &tv);
        for (size_t i = 0; i < tv.nbytes / 8; i++) ((double *)tv.data)[i] = (double)i * 0.25 - k;
        dist_value_append(v, dist_value_pack("[vi]", d, k));
    }
    return v;
}

static int fn_basic(int rank, int n) {
    (void)n;
    if (rank != 0) return dist_rpc_shutdown(1) == DIST_OK ? 0 : (WFAIL("shutdown: %s", dist_rpc_error_message()), 1);
    dist_value_t *r = NULL;
    int64_t x = 0;
    if (dist_rpc_sync("w1", "add", dist_value_pack("[II]", (int64_t)2, (int64_t)3), &r) != DIST_OK || dist_value_get_int(r, &x) != DIST_OK || x != 5)
        return WFAIL("sync add: %s (got %lld)", dist_rpc_error_message(), (long long)x);
    dist_value_free(r);
    /* 64 async echos in flight */
    dist_future_t *fs[64];
    int cbs = 0;
    for (int k = 0; k < 64; k++) {
        if (dist_rpc_async(k % 2 ? "w1" : "w2", "echo", make_value(k), &fs[k]) != DIST_OK) return WFAIL("async %d: %s", k, dist_rpc_error_message());
        if (dist_future_then(fs[k], then_cb, &cbs) != DIST_OK) return WFAIL("then %d", k);
    }
    if (dist_future_wait_all(64, fs, 0) != DIST_OK) return WFAIL("wait_all: %s", dist_rpc_error_message());
    for (int k = 0; k < 64; k++) {
        dist_value_t *want = make_value(k);
        if (!dist_value_equal(dist_future_value(fs[k]), want)) return WFAIL("echo %d came back different", k);
        dist_value_free(want);
        dist_future_free(fs[k]);
    }
    if (__atomic_load_n(&cbs, __ATOMIC_SEQ_CST) != 64) return WFAIL("%d then-callbacks ran for 64 futures", cbs);
    /* large tensors to this worker itself, there and back */
    {
        dist_value_t *want = make_value(11);
        if (dist_rpc_sync("w0", "echo", make_value(11), &r) != DIST_OK || !dist_value_equal(r, want))
            return WFAIL("echo to itself of large tensors: %s", r ? "came back different" : dist_rpc_error_message());
        dist_value_free(want);
        dist_value_free(r);
    }
    /* unknown function */
    dist_result res = dist_rpc_sync("w2", "no_such_fn", NULL, &r);
    if (res != DIST_ERR_UNKNOWN_FUNCTION || !strstr(dist_rpc_error_message(), "no_such_fn") || !strstr(dist_rpc_error_message(), "'w2'"))
        return WFAIL("unknown function: %s \"%s\"", dist_result_name(res), dist_rpc_error_message());
    /* a handler that fails */
    res = dist_rpc_sync("w1", "fail", NULL, &r);
    if (res != DIST_ERR_REMOTE || !strstr(dist_rpc_error_message(), "battery is flat (code 42)") || !strstr(dist_rpc_error_message(), "'fail'") ||
        !strstr(dist_rpc_error_message(), "'w1'"))
        return WFAIL("remote failure: %s \"%s\"", dist_result_name(res), dist_rpc_error_message());
    snprintf(sh->note[0], sizeof sh->note[0], "%s", dist_rpc_error_message());
    /* timeout */
    int64_t t0 = now_ns();
    res = dist_rpc_sync_timeout("w2", "sleep", dist_value_pack("[II]", (int64_t)1500, (int64_t)7), 300, &r);
    double el = secs_since(t0);
    if (res != DIST_ERR_TIMEOUT || el < 0.29 || el > scaled_s(1.0) || !strstr(dist_rpc_error_message(), "0.3 s"))
        return WFAIL("timeout: %s after %.2f s \"%s\"", dist_result_name(res), el, dist_rpc_error_message());
    if (dist_rpc_sync("w2", "add", dist_value_pack("[II]", (int64_t)-1, (int64_t)1), &r) != DIST_OK || dist_value_get_int(r, &x) != DIST_OK || x != 0)
        return WFAIL("a call after a timeout: %s", dist_rpc_error_message());
    dist_value_free(r);
    /* worker info */
    dist_worker_info wi;
    if (dist_rpc_get_worker_info("w2", &wi) != DIST_OK || wi.rank != 2 || dist_rpc_get_worker_info(NULL, &wi) != DIST_OK || wi.rank != 0 ||
        strcmp(wi.name, "w0") != 0 || dist_rpc_get_worker_info("nobody", &wi) != DIST_ERR_NOT_FOUND || dist_rpc_world_size() != 3)
        return WFAIL("worker info");
    /* deferred, forwarded */
    const char *s = NULL;
    if (dist_rpc_sync("w1", "deferred", NULL, &r) != DIST_OK || dist_value_get_string(r, &s) != DIST_OK || strcmp(s, "later") != 0)
        return WFAIL("deferred: %s", dist_rpc_error_message());
    dist_value_free(r);
    if (dist_rpc_sync("w1", "forward", dist_value_pack("[II]", (int64_t)20, (int64_t)22), &r) != DIST_OK || dist_value_get_int(r, &x) != DIST_OK || x != 42)
        return WFAIL("forward: %s", dist_rpc_error_message());
    dist_value_free(r);
    if (dist_rpc_shutdown(1) != DIST_OK) return WFAIL("shutdown: %s", dist_rpc_error_message());
    if (dist_rpc_sync("w1", "add", NULL, &r) != DIST_ERR_INVALID) return WFAIL("a call after shutdown did not fail");
    return 0;
}

/* ---- 2 ---- */
static int fn_nested(int rank, int n) {
    (void)n;
    const char *other = rank == 0 ? "w1" : "w0";
    for (int i = 0; i < 20; i++) {
        dist_value_t *r = NULL;
        int64_t x = 0, v = rank * 100 + i;
        if (dist_rpc_sync(other, "ping_back", dist_value_pack("[I]", v), &r) != DIST_OK || dist_value_get_int(r, &x) != DIST_OK || x != v + 1000)
            return WFAIL("round %d: %s (got %lld)", i, dist_rpc_error_message(), (long long)x);
        dist_value_free(r);
    }
    return dist_rpc_shutdown(1) == DIST_OK ? 0 : (WFAIL("shutdown: %s", dist_rpc_error_message()), 1);
}

/* ---- 3 ---- */
static void *killer(void *p) {
    (void)p;
    sleep_ms(400);
    sh->death_ns = now_ns();
    __atomic_store_n(&sh->dead, 1, __ATOMIC_SEQ_CST);
    raise(SIGKILL);
    return NULL;
}

static int fn_dead(int rank, int n) {
    (void)n;
    if (rank == 2) {
        pthread_t th;
        pthread_create(&th, NULL, killer, NULL);
        pthread_join(th, NULL);
        return 1;
    }
    dist_value_t *r = NULL;
    dist_future_t *f = NULL;
    dist_result res;
    if (rank == 1) {
        if (dist_rpc_async("w2", "sleep", dist_value_pack("[II]", (int64_t)5000, (int64_t)1), &f) != DIST_OK) return WFAIL("async");
        res = dist_future_wait(f, 0);
    } else {
        res = dist_rpc_sync_timeout("w2", "sleep", dist_value_pack("[II]", (int64_t)5000, (int64_t)1), DIST_RPC_NO_TIMEOUT, &r);
    }
    double after = (double)(now_ns() - sh->death_ns) / 1e9;
    const char *m = f ? dist_future_error(f) : dist_rpc_error_message();
    if (res != DIST_ERR_PEER_LOST || !strstr(m, "'w2'") || !sh->death_ns || after > scaled_s(1.0))
        WFAIL("a call to the dead worker: %s %.2f s after the death: \"%s\"", dist_result_name(res), after, m);
    snprintf(sh->note[rank], sizeof sh->note[rank], "%.0f ms: %s", after * 1e3, m);
    dist_future_free(f);
    /* a graceful shutdown after the death: prompt, naming the dead worker
       (it can never come to the shutdown) */
    int64_t t0 = now_ns();
    res = dist_rpc_shutdown(1);
    double took = secs_since(t0);
    m = dist_rpc_error_message();
    if (res != DIST_ERR_PEER_LOST || !strstr(m, "'w2'") || !strstr(m, "is gone") || took > scaled_s(2.0))
        return WFAIL("graceful shutdown after w2's death: %s after %.2f s: \"%s\" (want DIST_ERR_PEER_LOST within 2 s naming 'w2')",
                     dist_result_name(res), took, m);
    {
        size_t l = strlen(sh->note[rank]);
        snprintf(sh->note[rank] + l, sizeof sh->note[rank] - l, "; shutdown after %.0f ms: %.200s", took * 1e3, m);
    }
    return 0;
}

/* ---- 4 ---- */
static int fn_graceful(int rank, int n) {
    (void)n;
    if (rank == 0) {
        int rc = dist_rpc_shutdown(1);
        if (rc != DIST_OK) return WFAIL("shutdown with calls in flight: %s", dist_rpc_error_message());
        if (__atomic_load_n(&sh->handler_runs, __ATOMIC_SEQ_CST) != 8) return WFAIL("%d of 8 slow calls ran before shutdown returned", sh->handler_runs);
        return 0;
    }
    dist_future_t *fs[8];
    for (int k = 0; k < 8; k++)
        if (dist_rpc_async("w0", "sleep", dist_value_pack("[II]", (int64_t)200, (int64_t)k), &fs[k]) != DIST_OK) return WFAIL("async %d", k);
    int rc = dist_rpc_shutdown(1);
    for (int k = 0; k < 8; k++) {
        int64_t x = -1;
        if (dist_future_result(fs[k]) != DIST_OK || dist_value_get_int(dist_future_value(fs[k]), &x) != DIST_OK || x != k)
            return WFAIL("future %d after graceful shutdown: %s \"%s\"", k, dist_result_name(dist_future_result(fs[k])), dist_future_error(fs[k]));
        dist_future_free(fs[k]);
    }
    if (rc != DIST_OK) return WFAIL("shutdown: %s", dist_rpc_error_message());
    return 0;
}

int main(void) {
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
#ifndef _WIN32
    signal(SIGPIPE, SIG_IGN);
#endif
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int64_t t0 = now_ns();

    begin("n=3: sync, 64 async echos in flight with then-callbacks, unknown function, remote failure, per-call timeout, worker info, deferred and forwarded replies, graceful shutdown");
    double el = run_job(3, 2, fn_basic, NULL);
    case_end(el, sh->note[0]);

    begin("n=2, one handler thread each: both call the other's ping_back at once, which calls back with a blocking rpc_sync: no deadlock, 20 rounds exact");
    el = run_job(2, 1, fn_nested, NULL);
    case_end(el, NULL);

    begin("n=3: worker 2 is killed during calls to it (sync without timeout, async): both fail with PEER_LOST naming it within 1 s, and so do their graceful shutdowns within 2 s");
    g_victim = 2;                       /* the case kills worker 2 */
    el = run_job(3, 2, fn_dead, NULL);
    g_victim = -1;
    {
        char extra[1700];
        snprintf(extra, sizeof extra, "w0 %s; w1 %s", sh->note[0], sh->note[1]);
        case_end(el, extra);
    }

    begin("n=2: graceful shutdown with 8 slow calls in flight: all complete exactly, both shutdowns OK");
    el = run_job(2, 2, fn_graceful, NULL);
    case_end(el, NULL);

    begin("n=3, ranks 0 and 2 both named 'obs': dist_rpc_init fails everywhere naming both ranks and the name");
    {
        const char *names[3] = { "obs", "agent", "obs" };
        el = run_job(3, 1, NULL, names);
        for (int r = 0; r < 3; r++)
            if (strncmp(sh->note[r], "DIST_ERR_INIT|", 14) != 0 || !strstr(sh->note[r], "ranks 0 and 2") || !strstr(sh->note[r], "'obs'"))
                case_bad("worker %d: %s", r, sh->note[r]);
        case_end(el, sh->note[1]);
    }

    begin("n=2, timeout 1 s: a worker that shut down first serves calls for 2.5 s and still leaves gracefully; silent for 2.5 s, it gives up ~1 s after its last call");
    {
        double lo, hi;
        g_rpc_timeout_ms = scaled(1000);
        g_silent = 0;
        el = run_job(2, 2, fn_serving_shutdown, NULL);
        if (strncmp(sh->note[1], "DIST_OK after ", 14) != 0 || sscanf(sh->note[1] + 14, "%lf", &lo) != 1 || lo < 2.4 * g_scale)
            case_bad("serving worker: %s (want DIST_OK after >= 2.5 s)", sh->note[1]);
        if (strncmp(sh->note[0], "DIST_OK|", 8) != 0) case_bad("calling worker: %s", sh->note[0]);
        g_silent = 1;
        el += run_job(2, 2, fn_serving_shutdown, NULL);
        if (strncmp(sh->note[1], "DIST_ERR_TIMEOUT after ", 23) != 0 || sscanf(sh->note[1] + 23, "%lf", &hi) != 1 || hi < 0.9 * g_scale ||
            hi > 2.4 * g_scale || !strstr(sh->note[1], "1 of 2 did"))
            case_bad("silent caller: the serving worker's shutdown: %s (want DIST_ERR_TIMEOUT after ~1 s, '1 of 2 did')", sh->note[1]);
        g_rpc_timeout_ms = 0;
        case_end(el, sh->note[1]);
    }

    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
