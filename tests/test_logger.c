// TIMEOUT: 120
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_logger.c - a logger that calls back into dist.

   What a program does: its logger (cfg.logger) is its own code, and it
   does what such code does: it asks dist for more (the recorder's dump on
   every line, the stats, the last error; a whole job report when a line
   is an error), from whatever thread the line came on.  dist calls the
   logger on the caller's thread and on its own (progress, monitor, store,
   async worker), and the promise (dist.h, "Logging") is that it holds none
   of its locks then: a logger may call any dist function of the rank's
   communicators.  A line logged under the engine's lock would deadlock
   here (dist_recorder_dump takes it) and the job would hang; a logger
   called again from inside itself would recurse without end.

   A job of N=4 ranks forked here (tcp://127.0.0.1, DIST_TRANSPORT's
   transport), logging at DIST_LOG_DEBUG, each rank:
     - 200 all_reduces of 8 floats (sum) with no barrier between, each
       checked against the sum worked out here;
     - 100 rounds of a ring: isend to the next, irecv from the one before,
       checked;
     - 20 async all_reduces in flight at once (dist_all_reduce_async), then
       waited for;
     - a group of the even ranks: an all_reduce in it, destroyed;
     - a timeout: rank 3 sleeps through all_reduce #K, so ranks 0-2 time
       out (an error line, and their monitors' job report about 3 s later,
       a line each, all through the logger, whose first error line also
       asks dist_job_report); once they have seen that report, rank 3
       makes the call too (it fails over TCP, the others having given up,
       and its logger takes a report; over shared memory it may complete,
       exact, the others' parts having been written), and every rank
       destroys its communicator.
   The logger, on every line: counts it by level; checks it is one line of
   text under 512 bytes, and that "[rank R]" names this rank; then, when
   the communicator is up, takes dist_recorder_dump (must say something),
   dist_stats and dist_error_message; on the first error line,
   dist_job_report (must return DIST_OK with "job report:").  A line that
   comes from inside the logger's own calls (a nested line) is counted, not
   acted on.

   First, in this process, the held lines themselves (dist__log_line under
   dist__mutex_lock): 100 lines logged under a lock reach the logger only
   as it is let go, in order, none while any lock is held (two nested);
   8 + DIST__LOG_HELD_MAX lines all arrive and 5 past that are said in one
   line; the heap's room is given back; a line logged by the logger's own
   call under a lock reaches it nested, inside that call (after the lines
   held before it).

   Checks: every rank ends within its time (no deadlock), results exact,
   every logger check held, debug and info lines seen on every rank, every
   dump non-empty, and on ranks 0-2 the timeout's error, the logger's own
   job report and the monitor's report line.  LOGGER_SHOW=1 prints every
   line the logger gets on stderr. */
#define DIST_IMPLEMENTATION         /* (the first case looks at the held lines: never the linked build) */
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
#define TMO_MS 1500
#define LATE 3               /* the rank that makes the others time out */
#define DUMP_CAP (64 * 1024)

typedef struct {
    atomic_int claimed;
    char fail[700];
} rank_rec;

typedef struct {
    rank_rec r[N];
    atomic_int reported;            /* ranks (not LATE) that saw their monitor's report */
    atomic_int late_done;           /* LATE's call failed, and its logger took its report */
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(N, &sh->r[rank].claimed, sh->r[rank].fail)

/* What the logger sees, and what it found wrong (the first thing). */
typedef struct {
    int rank;
    dist_t *_Atomic w;              /* set once dist_init returned; cleared before destroy */
    atomic_long lines[5];           /* by level */
    atomic_long nested, dumps, empty_dumps, stats_calls;
    atomic_int report_asked, report_ok, monitor_report, report_names_late, timeout_error;
    atomic_int bad_claimed;
    char bad[400];
    char report_head[200];
    atomic_int nested_claimed;
    char nested_first[200];         /* the first line from inside the logger's own calls */
} log_ctx;

static _Thread_local int t_depth;   /* > 0: inside the logger on this thread */
static _Thread_local char *t_buf;   /* this thread's dump buffer, one of: */
static char g_bufs[32][DUMP_CAP];
static atomic_int g_bufs_used;

static void log_bad(log_ctx *c, const char *fmt, ...) {
    va_list ap;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&c->bad_claimed, &expect, 1)) return;
    va_start(ap, fmt);
    vsnprintf(c->bad, sizeof c->bad, fmt, ap);
    va_end(ap);
}

static void logger(dist_log_level level, const char *msg, void *user) {
    log_ctx *c = (log_ctx *)user;
    dist_t *w;
    size_t len;
    char want[32];
    if (level < DIST_LOG_ERROR || level > DIST_LOG_DEBUG) { log_bad(c, "a line at level %d", (int)level); return; }
    atomic_fetch_add(&c->lines[level], 1);
    if (getenv("LOGGER_SHOW")) fprintf(stderr, "logger-show: rank %d L%d depth %d %s\n", c->rank, (int)level, t_depth, msg ? msg : "(NULL)");
    len = msg ? strnlen(msg, 4096) : 4096;
    if (!msg || len == 0 || len >= 512 || memchr(msg, '\n', len)) {
        log_bad(c, "not one line of text under 512 bytes: %.100s", msg ? msg : "(NULL)");
        return;
    }
    snprintf(want, sizeof want, "[rank %d]", c->rank);
    if (strncmp(msg, "[rank ", 6) == 0 && strncmp(msg, want, strlen(want)) != 0) log_bad(c, "rank %d got a line of another: %.200s", c->rank, msg);
    if (level == DIST_LOG_ERROR && strstr(msg, "timed out")) atomic_store(&c->timeout_error, 1);
    if (strstr(msg, "a call timed out; job report:")) atomic_store(&c->monitor_report, 1);
    if (atomic_load(&c->monitor_report) && level == DIST_LOG_ERROR && strstr(msg, "rank 3 ")) atomic_store(&c->report_names_late, 1);
    if (t_depth > 0) {
        int expect = 0;
        atomic_fetch_add(&c->nested, 1);
        if (atomic_compare_exchange_strong(&c->nested_claimed, &expect, 1)) snprintf(c->nested_first, sizeof c->nested_first, "%.190s", msg);
        return;
    }
    if ((w = atomic_load(&c->w)) == NULL) return;
    t_depth++;
    if (!t_buf) {
        int k = atomic_fetch_add(&g_bufs_used, 1);
        if (k >= 32) { log_bad(c, "lines came on more than 32 threads"); t_depth--; return; }
        t_buf = g_bufs[k];
    }
    {
        size_t n = dist_recorder_dump(w, t_buf, DUMP_CAP);
        atomic_fetch_add(&c->dumps, 1);
        if (n == 0 || strlen(t_buf) != (n < DUMP_CAP ? n : DUMP_CAP - 1)) atomic_fetch_add(&c->empty_dumps, 1);
    }
    {
        dist_stats_t st;
        (void)dist_stats(w, &st);             /* (stats are off: it says so, and must return) */
        atomic_fetch_add(&c->stats_calls, 1);
        (void)dist_error_message(w);
    }
    if (level == DIST_LOG_ERROR && atomic_exchange(&c->report_asked, 1) == 0) {
        dist_result r = dist_job_report(w, t_buf, DUMP_CAP);
        if (r != DIST_OK) log_bad(c, "dist_job_report from the logger: %s", dist_result_name(r));
        else if (strncmp(t_buf, "job report:", 11) != 0) log_bad(c, "dist_job_report from the logger says: %.120s", t_buf);
        else {
            snprintf(c->report_head, sizeof c->report_head, "%.190s", t_buf);
            atomic_store(&c->report_ok, 1);
        }
    }
    t_depth--;
}

static log_ctx *g_ctx;

/* ---- the held lines, in this process ---- */
static struct {
    int n, bad, depth, max_depth, nested_inner;
    char first_bad[200];
    char last[DIST__LOG_LINE];
    char order[64];                 /* the named lines, as they began to arrive */
    dist__mutex *m;
} hl;

static void held_logger(dist_log_level level, const char *msg, void *user) {
    (void)level; (void)user;
    if (dist__locks.locks != 0 && !hl.bad++) snprintf(hl.first_bad, sizeof hl.first_bad, "line \"%.80s\" came with %d lock(s) held", msg, dist__locks.locks);
    hl.depth++;
    if (hl.depth > hl.max_depth) hl.max_depth = hl.depth;
    if (strncmp(msg, "line ", 5) != 0 && strlen(hl.order) + strlen(msg) + 2 < sizeof hl.order)
        strcat(strcat(hl.order, hl.order[0] ? " " : ""), msg);
    if (strcmp(msg, "nest") == 0) {             /* the logger's own call logs under a lock */
        dist_logger to = { held_logger, NULL };
        dist__mutex_lock(hl.m);
        dist__log_line(&to, DIST_LOG_INFO, "inner");
        dist__mutex_unlock(hl.m);
    }
    if (strcmp(msg, "inner") == 0) hl.nested_inner = hl.depth;
    snprintf(hl.last, sizeof hl.last, "%s", msg);
    if (strncmp(msg, "line ", 5) == 0 && atoi(msg + 5) != hl.n && !hl.bad++)
        snprintf(hl.first_bad, sizeof hl.first_bad, "line %d came as number %d", atoi(msg + 5), hl.n);
    if (strncmp(msg, "line ", 5) == 0) hl.n++;
    hl.depth--;
}

static void held_lines_case(void) {
    dist__mutex m, m2;
    dist_logger to = { held_logger, NULL };
    char line[64];
    int64_t t0 = now_ns();
    case_begin("lines logged under dist's locks wait until the last is let go, in order; a flood past the room is counted");
    dist__mutex_init(&m);
    dist__mutex_init(&m2);
    hl.m = &m;
    /* 100 lines under two nested locks */
    dist__mutex_lock(&m);
    dist__mutex_lock(&m2);
    for (int i = 0; i < 100; i++) { snprintf(line, sizeof line, "line %d", i); dist__log_line(&to, DIST_LOG_INFO, line); }
    dist__mutex_unlock(&m2);
    if (hl.n != 0) case_bad("%d lines reached the logger while a lock was still held", hl.n);
    dist__mutex_unlock(&m);
    if (hl.n != 100) case_bad("%d of 100 lines reached the logger once the locks were let go", hl.n);
    if (dist__locks.more != NULL) case_bad("the heap's room for held lines was not given back");
    /* a flood: DIST__LOG_HELD + DIST__LOG_HELD_MAX, and 5 more */
    hl.n = 0;
    dist__mutex_lock(&m);
    for (int i = 0; i < DIST__LOG_HELD + DIST__LOG_HELD_MAX + 5; i++) {
        snprintf(line, sizeof line, "line %d", i);
        dist__log_line(&to, DIST_LOG_INFO, line);
    }
    dist__mutex_unlock(&m);
    if (hl.n != DIST__LOG_HELD + DIST__LOG_HELD_MAX) case_bad("%d lines of a flood arrived, not %d", hl.n, DIST__LOG_HELD + DIST__LOG_HELD_MAX);
    if (!strstr(hl.last, "and 5 more log lines") || !strstr(hl.last, "dropped")) case_bad("the flood's last line is \"%.120s\"", hl.last);
    if (dist__locks.more != NULL) case_bad("the heap's room for held lines was not given back after the flood");
    /* a line the logger's own call logs under a lock: nested, inside that call */
    hl.max_depth = 0;
    dist__mutex_lock(&m);
    dist__log_line(&to, DIST_LOG_INFO, "nest");
    dist__log_line(&to, DIST_LOG_INFO, "after");
    dist__mutex_unlock(&m);
    /* (in the order logged: "after" was held before "inner" was logged) */
    if (hl.nested_inner != 2) case_bad("the logger's own line came at depth %d, not 2 (inside its call)", hl.nested_inner);
    if (strcmp(hl.order, "nest after inner") != 0) case_bad("the lines came as \"%s\", not \"nest after inner\"", hl.order);
    if (hl.bad) case_bad("%s", hl.first_bad);
    if (dist__locks.locks != 0) case_bad("%d locks counted after all were let go", dist__locks.locks);
    dist__mutex_destroy(&m);
    dist__mutex_destroy(&m2);
    case_end(secs_since(t0), NULL);
}

static int rank_main(int rank, int port, int lfd, void *arg) {
    char url[64];
    dist_t *w = NULL, *g = NULL;
    dist_config cfg;
    log_ctx *c = g_ctx;
    float v[8], ring[4];
    int next = (rank + 1) % N, prev = (rank + N - 1) % N, k;
    (void)arg;
    memset(c, 0, sizeof *c);
    c->rank = rank;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, N, rank, scaled(TMO_MS), lfd);
    cfg.logger.func = logger;
    cfg.logger.user = c;
    cfg.log_level = DIST_LOG_DEBUG;
    rank_alarm((unsigned)(scaled_s(60) + 0.5));
    OK(dist_init(&w, &cfg));
    atomic_store(&c->w, w);
    for (k = 0; k < 200; k++) {
        for (int i = 0; i < 8; i++) v[i] = (float)(rank * 10 + i + k % 5);
        OK(dist_all_reduce(w, v, 8, DIST_FLOAT32, DIST_SUM));
        for (int i = 0; i < 8; i++)
            if (v[i] != (float)(N * (N - 1) / 2 * 10 + N * (i + k % 5)))
                return FAIL("all_reduce %d: element %d is %g, not %d", k, i, (double)v[i], N * (N - 1) / 2 * 10 + N * (i + k % 5));
    }
    for (k = 0; k < 100; k++) {
        float out[4], in[4];
        dist_req_t *rq[2];
        for (int i = 0; i < 4; i++) out[i] = (float)(rank * 1000 + k * 4 + i);
        OK(dist_irecv(w, in, 4, DIST_FLOAT32, prev, 5, &rq[0]));
        OK(dist_isend(w, out, 4, DIST_FLOAT32, next, 5, &rq[1]));
        OK(dist_wait_all(2, rq));
        for (int i = 0; i < 4; i++)
            if (in[i] != (float)(prev * 1000 + k * 4 + i)) return FAIL("ring round %d: got %g from rank %d, not %d", k, (double)in[i], prev, prev * 1000 + k * 4 + i);
        memcpy(ring, in, sizeof ring);
    }
    {
        float a[20];
        dist_req_t *rq[20];
        for (k = 0; k < 20; k++) { a[k] = (float)(rank + k); OK(dist_all_reduce_async(w, &a[k], 1, DIST_FLOAT32, DIST_SUM, &rq[k])); }
        OK(dist_wait_all(20, rq));
        for (k = 0; k < 20; k++)
            if (a[k] != (float)(N * (N - 1) / 2 + N * k)) return FAIL("async all_reduce %d: %g, not %d", k, (double)a[k], N * (N - 1) / 2 + N * k);
    }
    {
        int evens[N / 2];
        for (k = 0; k < N / 2; k++) evens[k] = 2 * k;
        if (rank % 2 == 0) {
            float x = (float)rank;
            OK(dist_new_group(w, N / 2, evens, &g));
            OK(dist_all_reduce(g, &x, 1, DIST_FLOAT32, DIST_SUM));
            if (x != (float)(N / 2 * (N / 2 - 1))) return FAIL("the even ranks' group all_reduce: %g, not %d", (double)x, N / 2 * (N / 2 - 1));
            OK(dist_destroy(g));
        } else {
            OK(dist_new_group(w, N / 2, evens, &g));      /* (not a member: NULL) */
            if (g) return FAIL("rank %d got a group it is not in", rank);
        }
    }
    OK(dist_barrier(w));
    /* the timeout */
    {
        dist_result r;
        float x = 1;
        int64_t until;
        until = now_ms() + scaled(10000);
        /* LATE calls once the others timed out and saw their monitor's report */
        while (rank == LATE && atomic_load(&sh->reported) < N - 1 && now_ms() < until + scaled(2000)) sleep_ms(20);
        r = dist_all_reduce(w, &x, 1, DIST_FLOAT32, DIST_SUM);
        if (rank == LATE) atomic_store(&sh->late_done, 1);
        /* (LATE's own call may complete: over shared memory the others' parts
           were there before they gave up, and what was written counts) */
        if (r == DIST_OK && (rank != LATE || x != (float)N))
            return FAIL("all_reduce with rank %d asleep until the others timed out returned DIST_OK%s", LATE, rank == LATE ? " with a wrong sum" : "");
        /* the others wait for their monitor's report, then until LATE is
           done (their monitors answer its logger's request) */
        while (rank != LATE && !atomic_load(&c->report_names_late) && now_ms() < until) sleep_ms(20);
        if (rank != LATE) atomic_fetch_add(&sh->reported, 1);
        while (rank != LATE && !atomic_load(&sh->late_done) && now_ms() < until + scaled(10000)) sleep_ms(20);
    }
    atomic_store(&c->w, NULL);
    dist_abort(w);
    dist_destroy(w);
    /* what the logger saw */
    if (c->bad_claimed) return FAIL("the logger: %s", c->bad);
    if (c->lines[DIST_LOG_DEBUG] == 0 || c->lines[DIST_LOG_INFO] == 0)
        return FAIL("%ld debug and %ld info lines: want some of each", (long)c->lines[DIST_LOG_DEBUG], (long)c->lines[DIST_LOG_INFO]);
    if (c->empty_dumps) return FAIL("%ld of the logger's %ld dumps said nothing", (long)c->empty_dumps, (long)c->dumps);
    if (rank != LATE && c->dumps == 0) return FAIL("the logger took no dump (no line came while the communicator was up)");
    if (rank != LATE) {
        if (!c->timeout_error) return FAIL("no error line says the all_reduce timed out");
        if (!c->report_ok) return FAIL("the logger's dist_job_report %s", c->report_asked ? "did not say a report" : "was never asked");
        if (!c->monitor_report) return FAIL("the monitor's job report was never logged (within 10 s)");
        if (!c->report_names_late) return FAIL("no line of the monitor's job report names rank %d, the late one", LATE);
    }
    printf("rank %d: %ld error, %ld warn, %ld info, %ld debug lines (%ld from inside the logger%s%s); %ld dumps%s%s\n", rank,
           (long)c->lines[1], (long)c->lines[2], (long)c->lines[3], (long)c->lines[4], (long)c->nested,
           c->nested ? ", the first: " : "", c->nested ? c->nested_first : "", (long)c->dumps,
           c->report_ok ? "; its report: " : "", c->report_ok ? strtok(c->report_head, "\n") : "");
    (void)ring;
    return 0;
}

int main(void) {
    int64_t t0 = now_ns();
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    g_ctx = (log_ctx *)calloc(1, sizeof *g_ctx);
    if (!g_ctx) return 1;
    printf("logger: %d ranks, transport %s, a logger that calls dist on every line\n", N, getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto");
    if (first_process()) held_lines_case();
    case_begin("a logger calling dist_recorder_dump, dist_stats, dist_error_message and dist_job_report from every thread");
    if (first_process()) memset(sh, 0, sizeof *sh);
    if (run_workers(N, rank_main, NULL, 60, -1, NULL) == 0 && first_process())
        for (int r = 0; r < N; r++)
            if (sh->r[r].fail[0]) case_bad("rank %d: %s", r, sh->r[r].fail);
    case_end(secs_since(t0), NULL);
    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
