// TIMEOUT: 600
// ALONE: the cost of each tenth of the calls is bounded by the median tenth's, and the caller's peak memory
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_rpc_flood.c - callers that flood a worker, and messages that ask for
   far more memory than they bring.

   Between forked workers (tcp://127.0.0.1, rank 0's listening socket made
   before the fork), 3 workers, each case with num_threads 1 and 4:

   1. flood: w1 and w2 each make RPC_FLOOD_CALLS (1,000,000 with one
      handler thread, where the callee falls behind; a fifth of that with 4;
      a tenth under the sanitizers, DIST_TIMEOUT_SCALE > 1) dist_rpc_async calls of w0's
      "inc" (returns its int argument + 1) back to back, as fast as the call
      returns: each future gets a then-callback and is freed at once, so
      the caller keeps nothing of its own per call.  Checked on every
      worker:
        - every call answered, none failed, the answers exact (their sum is
          N (N + 1) / 2 and each is within 1..N);
        - memory: the peak RSS during the flood (VmHWM, reset at its start)
          exceeds the RSS at its start by at most 48 MiB on w0 and on each
          caller.  Without backpressure the callee queues every call that
          arrives faster than its handlers run (hundreds of bytes each) and
          the caller keeps a pending future per call;
        - cost over time: on each caller the fastest of the last three
          tenths of its calls takes at most 3 times the median tenth + 20
          ms (a backlog that grows, or a scan per call of the calls in
          flight, makes the later tenths slower).
   2. a list of 2^20 nones: w1 calls w0's "count" with it (a 1 MiB message,
      ~80 MiB decoded).  The call fails with DIST_ERR_PROTOCOL and a
      sentence that says the value would take more memory decoded than
      allowed, w0's peak RSS grows by at most 24 MiB, and a list of 2^17
      ints (1.1 MiB) then counts exactly: the limit is on memory per byte,
      not on size.

   A worker that sees a problem writes it to a MAP_SHARED table and
   raises a shared abort flag; every worker has an alarm and the parent
   kills what outlives its deadline. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_*.c) */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist_rpc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"

#define NW 3
#define MSG dist_rpc_error_message()

/* Under ThreadSanitizer every byte touched has shadow bytes: the memory
   bounds are 4x.  AddressSanitizer's quarantine keeps freed memory (256 MiB
   by default), which a flood of calls fills: 8 MiB here, and the bounds as
   they are. */
#ifdef UNDER_TSAN
#  define RSS_FACTOR 4
#else
#  define RSS_FACTOR 1
#endif
#if defined(__SANITIZE_ADDRESS__)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=8"; }
#endif
TSAN_NO_EXIT_SLEEP();

typedef struct {
    atomic_int claimed[NW];
    char fail[NW][900];
    int done[NW];
    int abort;
    long rss0[NW], hwm[NW];      /* KiB: at the case's start, the peak during it */
    double tenth_s[NW][10];      /* callers: seconds per tenth of their calls */
    double secs[NW];
    char note[NW][300];
} shared_t;
static shared_t *sh;
static int g_rank;
static long g_calls;

DEFINE_FAIL_AT(NW, &sh->claimed[rank], sh->fail[rank])
#define WFAIL(...) (__atomic_store_n(&sh->abort, 1, __ATOMIC_SEQ_CST), fail_at(g_rank, __LINE__, __VA_ARGS__))

static dist_value_t *h_inc(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t x = 0;
    if (dist_value_get_int(args, &x) != DIST_OK) { dist_rpc_call_fail(call, "inc: not an int"); return NULL; }
    return dist_value_int(x + 1);
}

static dist_value_t *h_count(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)call;
    return dist_value_int((int64_t)dist_value_len(args));
}

/* ---- case 1: the flood ---- */
static atomic_long g_answered, g_failed_calls;
static _Atomic int64_t g_sum;
static atomic_int g_bad_value;
static char g_first_err[400];
static atomic_int g_err_claimed;

static void on_answer(dist_future_t *f, void *user) {
    const dist_value_t *v = dist_future_value(f);
    int64_t x = 0;
    (void)user;
    if (dist_future_result(f) != DIST_OK || !v || dist_value_get_int(v, &x) != DIST_OK) {
        int expected = 0;
        atomic_fetch_add(&g_failed_calls, 1);
        if (atomic_compare_exchange_strong(&g_err_claimed, &expected, 1))
            snprintf(g_first_err, sizeof g_first_err, "%s: %s", dist_result_name(dist_future_result(f)), dist_future_error(f));
    } else {
        if (x < 1 || x > g_calls) atomic_store(&g_bad_value, 1);
        atomic_fetch_add(&g_sum, x);
    }
    atomic_fetch_add(&g_answered, 1);
}

static int fn_flood(int rank) {
    int bad = 0;
    long tenth = g_calls / 10;
    int64_t mark = now_ns();
    if (rank == 0) return 0;
    for (long i = 0; i < g_calls && !__atomic_load_n(&sh->abort, __ATOMIC_SEQ_CST); i++) {
        dist_future_t *f = NULL;
        dist_result r = dist_rpc_async_timeout("w0", "inc", dist_value_int(i), scaled(60000), &f);
        if (r != DIST_OK) return WFAIL("w%d: call %ld: dist_rpc_async: %s: %s", rank, i, dist_result_name(r), MSG);
        if ((r = dist_future_then(f, on_answer, NULL)) != DIST_OK) return WFAIL("w%d: call %ld: dist_future_then: %s: %s", rank, i, dist_result_name(r), MSG);
        dist_future_free(f);
        if ((i + 1) % tenth == 0) {
            int64_t now = now_ns();
            sh->tenth_s[rank][(i + 1) / tenth - 1] = (double)(now - mark) / 1e9;
            mark = now;
        }
    }
    {   /* every answer, within the calls' timeout */
        int64_t t0 = now_ns();
        while (atomic_load(&g_answered) < g_calls && secs_since(t0) < scaled_s(90)) sleep_ms(2);
    }
    if (atomic_load(&g_answered) != g_calls)
        bad |= WFAIL("w%d: %ld of %ld calls answered within 90 s of the last one", rank, atomic_load(&g_answered), g_calls);
    if (atomic_load(&g_failed_calls))
        bad |= WFAIL("w%d: %ld calls failed, the first: %s", rank, atomic_load(&g_failed_calls), g_first_err);
    if (atomic_load(&g_bad_value)) bad |= WFAIL("w%d: an answer outside 1..%ld", rank, g_calls);
    if (!bad && atomic_load(&g_sum) != (int64_t)g_calls * (g_calls + 1) / 2)
        bad |= WFAIL("w%d: the answers sum to %lld, not %lld", rank, (long long)atomic_load(&g_sum), (long long)g_calls * (g_calls + 1) / 2);
    return bad;
}

/* ---- case 2: a value that asks for far more memory than it brings ---- */
static int fn_nones(int rank) {
    dist_value_t *l, *ret = NULL;
    dist_result r;
    int64_t n = -1;
    if (rank != 1) return 0;
    if (!(l = dist_value_list())) return WFAIL("w1: dist_value_list failed");
    for (int i = 0; i < (1 << 20); i++)
        if (dist_value_append(l, dist_value_none()) != DIST_OK) { dist_value_free(l); return WFAIL("w1: append %d: %s", i, MSG); }
    r = dist_rpc_sync_timeout("w0", "count", l, scaled(20000), &ret);
    if (r == DIST_OK) { dist_value_free(ret); return WFAIL("w1: a list of 2^20 nones was counted: it should be refused"); }
    if (r != DIST_ERR_PROTOCOL || !strstr(MSG, "decoded"))
        return WFAIL("w1: a list of 2^20 nones: %s: \"%s\" (expected DIST_ERR_PROTOCOL saying what it would take decoded)", dist_result_name(r), MSG);
    snprintf(sh->note[1], sizeof sh->note[1], "\"%.240s\"", MSG);
    if (!(l = dist_value_list())) return WFAIL("w1: dist_value_list failed");
    for (int i = 0; i < (1 << 17); i++)
        if (dist_value_append(l, dist_value_int(i)) != DIST_OK) { dist_value_free(l); return WFAIL("w1: append %d: %s", i, MSG); }
    r = dist_rpc_sync_timeout("w0", "count", l, scaled(20000), &ret);
    if (r != DIST_OK) return WFAIL("w1: a list of 2^17 ints: %s: %s", dist_result_name(r), MSG);
    dist_value_get_int(ret, &n);
    dist_value_free(ret);
    if (n != (1 << 17)) return WFAIL("w1: a list of 2^17 ints counted %lld", (long long)n);
    return 0;
}

typedef int (*worker_fn)(int rank);
typedef struct { int threads; worker_fn fn; } job_arg;

static int all_done(void) {
    for (int r = 0; r < NW; r++) if (!__atomic_load_n(&sh->done[r], __ATOMIC_SEQ_CST)) return 0;
    return 1;
}

static int worker_main(int r, int port, int lfd, void *p) {
    const job_arg *a = (const job_arg *)p;
    int bad;
    dist_result res;
    dist_value_t *ret = NULL;
    g_rank = r;
    rank_alarm((unsigned)(300 * g_scale));
    dist_rpc_register("inc", h_inc);
    dist_rpc_register("count", h_count);
    res = rpc_worker_init(r, NW, port, lfd, a->threads, NULL, scaled(60000));
    if (res != DIST_OK) { WFAIL("dist_rpc_init: %s: %s", dist_result_name(res), MSG); _exit(1); }
    /* warm up: every worker's connections and threads made before the measure */
    for (int k = 0; k < NW; k++) {
        char to[16];
        snprintf(to, sizeof to, "w%d", k);
        if ((res = dist_rpc_sync_timeout(to, "inc", dist_value_int(1), scaled(10000), &ret)) != DIST_OK) {
            WFAIL("w%d: warm-up call to %s: %s: %s", r, to, dist_result_name(res), MSG);
            _exit(1);
        }
        dist_value_free(ret);
    }
    sh->rss0[r] = status_kb("VmRSS:");
    reset_peak();
    {
        int64_t t0 = now_ns();
        sh->secs[r] = 0;
        bad = a->fn(r);
        sh->secs[r] = secs_since(t0);
    }
    __atomic_store_n(&sh->done[r], 1, __ATOMIC_SEQ_CST);
    for (int64_t t0 = now_ns(); !all_done(); sleep_ms(2))
        if (secs_since(t0) > scaled_s(200)) { bad |= WFAIL("w%d: the others did not finish their parts within 200 s", r); break; }
    sh->hwm[r] = status_kb("VmHWM:");
    if (bad || __atomic_load_n(&sh->abort, __ATOMIC_SEQ_CST)) { fflush(NULL); _exit(bad ? 1 : 0); }
    res = dist_rpc_shutdown(1);
    if (res != DIST_OK) return WFAIL("graceful shutdown: %s: %s", dist_result_name(res), MSG);
    return 0;
}

static double median10(const double *t) {
    double s[10];
    memcpy(s, t, sizeof s);
    for (int i = 1; i < 10; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) { double x = s[j]; s[j] = s[j - 1]; s[j - 1] = x; }
    return (s[4] + s[5]) / 2;
}

int main(void) {
    static char names[4][300];
    int64_t t0;
    long calls;
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    signal(SIGPIPE, SIG_IGN);
    calls = env_int("RPC_FLOOD_CALLS", 100, 100000000, g_scale > 1 ? 100000 : 1000000);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    t0 = now_ns();
    for (int c = 0; c < 2; c++)
        for (int ti = 0; ti < 2; ti++) {
            int threads = ti ? 4 : 1;
            job_arg a = { threads, c == 0 ? fn_flood : fn_nones };
            char extra[900] = "";
            int64_t c0 = now_ns();
            g_calls = calls / (threads == 1 ? 1 : 5);
            g_calls -= g_calls % 10;
            if (c == 0)
                snprintf(names[c * 2 + ti], sizeof names[0], "num_threads=%d, n=3, w1 and w2 each make %ld async calls of w0 back to back "
                         "(futures freed at once): all answered exactly, peak RSS +48 MiB at most on every worker, no tenth slower over time",
                         threads, g_calls);
            else
                snprintf(names[c * 2 + ti], sizeof names[0], "num_threads=%d, n=3, a list of 2^20 nones (1 MiB, ~80 MiB decoded) is refused "
                         "with a sentence, w0's peak RSS +24 MiB at most; a list of 2^17 ints is counted", threads);
            case_begin(names[c * 2 + ti]);
            memset(sh, 0, sizeof *sh);
            if (run_workers(NW, worker_main, &a, 400, -1, NULL) == 0) {
                for (int r = 0; r < NW; r++) if (sh->fail[r][0]) case_bad("worker %d: %s", r, sh->fail[r]);
                if (!g_cur_failed) {
                    long bound = (c == 0 ? 48 * 1024 : 24 * 1024) * RSS_FACTOR;
                    for (int r = 0; r < NW; r++) {
                        long grew = sh->hwm[r] - sh->rss0[r];
                        if (sh->hwm[r] < 0 || sh->rss0[r] < 0) case_bad("w%d: no VmRSS/VmHWM in /proc/self/status", r);
                        else if (grew > bound && (c == 0 || r == 0))
                            case_bad("w%d: peak RSS grew by %ld KiB during the case (bound %ld KiB)", r, grew, bound);
                    }
                }
                if (c == 0 && !g_cur_failed)
                    for (int r = 1; r < NW; r++) {
                        double med = median10(sh->tenth_s[r]);
                        double last = sh->tenth_s[r][9];
                        if (sh->tenth_s[r][8] < last) last = sh->tenth_s[r][8];
                        if (sh->tenth_s[r][7] < last) last = sh->tenth_s[r][7];
                        if (last > 3 * med + 0.02)
                            case_bad("w%d: the fastest of the last three tenths of its calls took %.3f s, the median tenth %.3f s (bound 3x + 20 ms)",
                                     r, last, med);
                    }
                if (c == 0)
                    snprintf(extra, sizeof extra, "%.2f us/call on w1, %.2f on w2; peak RSS +%ld KiB on w0, +%ld on w1, +%ld on w2",
                             sh->secs[1] * 1e6 / (double)g_calls, sh->secs[2] * 1e6 / (double)g_calls,
                             sh->hwm[0] - sh->rss0[0], sh->hwm[1] - sh->rss0[1], sh->hwm[2] - sh->rss0[2]);
                else
                    snprintf(extra, sizeof extra, "w0 peak RSS +%ld KiB; %s", sh->hwm[0] - sh->rss0[0], sh->note[1]);
            }
            case_end(secs_since(c0), extra);
        }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
