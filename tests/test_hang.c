// TIMEOUT: 150
// TRANSPORTS: auto tcp
// WINDOWS: no, its cases stop a rank with SIGSTOP
/* test_hang.c - the flight recorder and job reports (FLIGHT RECORDER in
   dist.h): 8 ranks, one of which misbehaves; the report must name the
   right rank and the right operation, as a person reading it would.

   Every rank first makes 4 all_reduces (collectives #1-#4), then:
   stopped   rank 3 stops itself (SIGSTOP) before all_reduce #5; the
             others wait in #5 (timeout 20 s).  1.5 s later a second thread
             of rank 0 calls dist_job_report: every rank but 3 answers; the
             report must say ranks 0-2, 4-7 wait in all_reduce #5, rank 3
             sent no report, and the likely cause is rank 3.  Then rank 0
             resumes rank 3 (SIGCONT) and the job finishes: all_reduce #5
             returns the right sum everywhere.
   skipped   rank 3 skips all_reduce #5 and waits in a recv from rank 0
             (tag 99) instead; the report must say the others wait in #5,
             rank 3 has not called #5 (its last, all_reduce #4, finished)
             and waits in recv #1 from rank 0 (tag 99), likely cause rank 3.
             Then rank 0's thread sends it the message, rank 3 calls #5,
             and the job finishes with the right sums.
   mismatch  rank 5 calls broadcast where the others call all_reduce #5:
             every call fails at once (DIST_ERR_MISMATCH); the report then
             names rank 5's broadcast against the others' all_reduce.
   timeout   rank 3 stops before all_reduce #5, the others' timeout is 3 s:
             each that times out logs (at error level, cfg.logger) a job
             report its monitor builds; rank 0's must name rank 3 (no
             report) and the others in all_reduce #5.  Then rank 3 is
             killed.
   waiting   rank 3 sleeps 3.5 s before all_reduce #5, the timeout is 8 s:
             the others log at info level, after min(10 s, timeout / 4) =
             2 s (at the monitor's next look, once a second), that
             all_reduce #5 has waited 2-3 s (and for whom, where
             the call knows); the job then finishes with the right sums.
   waiting_p2p  rank 1 receives from rank 0 (tag 5), which sleeps 3.5 s
             before it sends (timeout 8 s): rank 1 logs at info level,
             after 2-3.4 s, that recv #1 from rank 0 (tag 5, 1 x int32) has
             waited; rank 0, which waited for nothing, logs nothing.
   recorder  dist_recorder_dump on a rank after the 4 all_reduces and a
             send/recv: its lines list collectives #1-#4 done with their
             sizes, and send #1 / recv #1 with their peers and tags; then
             an async all_reduce (#5): its line says when it was queued
             (>= 0 ms ago), the blocking ones' -1.
   queued    rank 3 stops itself before its async all_reduces #5-#7; the
             others post theirs (the first runs and waits, two queue
             behind it): 1.5 s later rank 0's second thread's report says
             ranks 0-2, 4-7 wait in #5 with 2 collectives queued behind
             it, and rank 3 sent no report; rank 3 resumed, all three
             return the right sums everywhere. */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define N 8
#define REPORT_CAP 8192

typedef struct {
    atomic_int pid[N];
    atomic_int failed;
    char fail[N][300];
    char report[REPORT_CAP];
    char logged[N][REPORT_CAP];
    atomic_int logged_set[N];        /* logged[r] is begun (by the logger, a thread of the library) */
    atomic_int logged_lines[N];      /* ...and has this many lines (a log line each) */
    char noted[N][400];
    char dump[REPORT_CAP];
    int results[N];
} shared_t;
static shared_t *sh;
static int g_which;   /* which case the ranks run */
enum { C_STOPPED, C_SKIPPED, C_MISMATCH, C_TIMEOUT, C_WAITING, C_RECORDER, C_QUEUED, C_WAITING_P2P };

static int rank_fail(int rank, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!sh->fail[rank][0]) vsnprintf(sh->fail[rank], sizeof sh->fail[rank], fmt, ap);
    va_end(ap);
    atomic_store(&sh->failed, 1);
    return 1;
}
#define EXPECT_R(rank, cond, ...) do { if (!(cond)) return rank_fail(rank, __VA_ARGS__); } while (0)
static int fail_at(int rank, int line, const char *fmt, ...) {
    char msg[250];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rank_fail(rank, "line %d: %s", line, msg);
}

static void log_capture(dist_log_level level, const char *msg, void *user) {
    int rank = (int)(intptr_t)user;
    const char *p = strstr(msg, "[rank ");
    if (p) rank = atoi(p + 6) % N;
    if (level == DIST_LOG_INFO && strstr(msg, "has waited") && !sh->noted[rank][0])
        snprintf(sh->noted[rank], sizeof sh->noted[rank], "%s", msg);
    /* the report the monitor logs: its first line, then one log line per line ("[rank 0]   ...") */
    if (level == DIST_LOG_ERROR && strstr(msg, "job report") && !atomic_load(&sh->logged_set[rank])) {
        snprintf(sh->logged[rank], sizeof sh->logged[rank], "%s\n", msg);
        atomic_store(&sh->logged_set[rank], 1);
        atomic_store(&sh->logged_lines[rank], 1);
    } else if (level == DIST_LOG_ERROR && atomic_load(&sh->logged_set[rank]) && p && strncmp(strchr(p, ']') + 1, "   ", 3) == 0) {
        size_t len = strlen(sh->logged[rank]);
        snprintf(sh->logged[rank] + len, sizeof sh->logged[rank] - len, "%s\n", msg);
        atomic_fetch_add(&sh->logged_lines[rank], 1);
    }
}

typedef struct { dist_t *w; } helper_arg;
static void *rank0_helper(void *p) {
    dist_t *w = ((helper_arg *)p)->w;
    sleep_ms(1500);
    if (dist_job_report(w, sh->report, sizeof sh->report) != DIST_OK)
        snprintf(sh->report, sizeof sh->report, "dist_job_report failed: %s", dist_error_message(w));
    if (g_which == C_STOPPED || g_which == C_QUEUED) kill(atomic_load(&sh->pid[3]), SIGCONT);
    if (g_which == C_SKIPPED) {
        int32_t v = 42;
        dist_send(w, &v, 1, DIST_INT32, 3, 99);
    }
    return NULL;
}

static int warm(dist_t *w, int rank) {
    for (int i = 0; i < 4; i++) {
        double x = rank + i;
        OK(dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM));
        EXPECT_R(rank, x == 28 + 8 * i, "warm-up all_reduce %d: %g", i + 1, x);
    }
    return 0;
}

static int rank_main(dist_t *w, void *arg) {
    int rank = dist_rank(w);
    pthread_t th;
    helper_arg ha;
    int started = 0;
    (void)arg;
    atomic_store(&sh->pid[rank], (int)getpid());
    if (warm(w, rank)) return 1;
    if (g_which == C_RECORDER) {
        int32_t v = rank;
        double y = rank;
        dist_req_t *req = NULL;
        if (rank == 0) OK(dist_send(w, &v, 1, DIST_INT32, 1, 7));
        if (rank == 1) OK(dist_recv(w, &v, 1, DIST_INT32, 0, 7));
        OK(dist_all_reduce_async(w, &y, 1, DIST_FLOAT64, DIST_SUM, &req));
        OK(dist_wait(req));
        EXPECT_R(rank, y == 28, "async all_reduce #5: %g", y);
        if (rank == 1) dist_recorder_dump(w, sh->dump, sizeof sh->dump);
        OK(dist_barrier(w));
        return 0;
    }
    if (g_which == C_WAITING_P2P) {
        int32_t v = 7;
        if (rank == 0) { sleep_ms(3500); OK(dist_send(w, &v, 1, DIST_INT32, 1, 5)); }
        else if (rank == 1) { OK(dist_recv(w, &v, 1, DIST_INT32, 0, 5)); EXPECT_R(rank, v == 7, "recv: %d", v); }
        else sleep_ms(4000);     /* (not in a call meanwhile: nothing of theirs to note) */
        OK(dist_barrier(w));
        return 0;
    }
    if (g_which == C_QUEUED) {
        double y[3];
        dist_req_t *req[3] = { 0 };
        if (rank == 0) {
            ha.w = w;
            if (pthread_create(&th, NULL, rank0_helper, &ha) != 0) return rank_fail(rank, "pthread_create");
        }
        if (rank == 3) raise(SIGSTOP);
        for (int k = 0; k < 3; k++) {
            y[k] = rank + 100 + k;
            OK(dist_all_reduce_async(w, &y[k], 1, DIST_FLOAT64, DIST_SUM, &req[k]));
        }
        for (int k = 0; k < 3; k++) {
            OK(dist_wait(req[k]));
            EXPECT_R(rank, y[k] == 828 + 8 * k, "async all_reduce #%d: %g, expected %d", 5 + k, y[k], 828 + 8 * k);
        }
        if (rank == 0) pthread_join(th, NULL);
        return 0;
    }
    if (rank == 0 && (g_which == C_STOPPED || g_which == C_SKIPPED)) {
        ha.w = w;
        if (pthread_create(&th, NULL, rank0_helper, &ha) != 0) return rank_fail(rank, "pthread_create");
        started = 1;
    }
    double x = rank + 100;
    dist_result r = DIST_OK;
    if (g_which == C_WAITING) {
        if (rank == 3) sleep_ms(3500);
        r = dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM);
    } else if (g_which == C_STOPPED || g_which == C_TIMEOUT) {
        if (rank == 3) raise(SIGSTOP);
        r = dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM);
    } else if (g_which == C_SKIPPED) {
        if (rank == 3) {
            int32_t v = 0;
            OK(dist_recv(w, &v, 1, DIST_INT32, 0, 99));
            EXPECT_R(rank, v == 42, "recv from rank 0: %d", v);
        }
        r = dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM);
    } else if (g_which == C_MISMATCH) {
        if (rank == 5) r = dist_broadcast(w, &x, 1, DIST_FLOAT64, 0);
        else r = dist_all_reduce(w, &x, 1, DIST_FLOAT64, DIST_SUM);
        EXPECT_R(rank, r == DIST_ERR_MISMATCH, "the mismatched call returned %s: %s", dist_result_name(r), dist_error_message(w));
        /* rank 0 asks once everyone's failed #5 is in its recorder; the
           others stay out of collectives until the answers are in */
        if (rank == 0) {
            sleep_ms(300);
            if (dist_job_report(w, sh->report, sizeof sh->report) != DIST_OK)
                return rank_fail(rank, "dist_job_report: %s", dist_error_message(w));
        } else sleep_ms(4000);
        OK(dist_barrier(w));
        return 0;
    }
    if (started) pthread_join(th, NULL);
    if (g_which == C_TIMEOUT) {
        EXPECT_R(rank, r == DIST_ERR_TIMEOUT, "all_reduce #5 with rank 3 stopped returned %s", dist_result_name(r));
        /* the monitor logs its report within ~1 s + 2.5 s */
        for (int i = 0; i < 80 && !atomic_load(&sh->logged_set[rank]); i++) sleep_ms(100);
        /* (its lines come back to back: until none came for 300 ms) */
        for (int i = 0, n = -1; i < 30 && atomic_load(&sh->logged_lines[rank]) != n; i++) {
            n = atomic_load(&sh->logged_lines[rank]);
            sleep_ms(300);
        }
        if (rank == 0) { kill(atomic_load(&sh->pid[3]), SIGKILL); }
        return 0;
    }
    EXPECT_R(rank, r == DIST_OK, "all_reduce #5 returned %s: %s", dist_result_name(r), dist_error_message(w));
    EXPECT_R(rank, x == 828, "all_reduce #5 sum %g, expected 828", x);
    return 0;
}

static int contains(const char *hay, const char *needle, const char *what) {
    if (strstr(hay, needle)) return 1;
    printf("FAIL %s: the report lacks \"%s\":\n%s\n", what, needle, hay);
    return 0;
}

static int run_case(int c, const char *name, int timeout_ms, const char *const *must) {
    dist_config cfg = { 0 };
    int ok = 1;
    memset(sh, 0, sizeof *sh);
    g_which = c;
    cfg.timeout_ms = timeout_ms;
    cfg.logger.func = log_capture; cfg.logger.user = NULL;
    cfg.log_level = c == C_WAITING || c == C_WAITING_P2P ? DIST_LOG_INFO : DIST_LOG_ERROR;
    double t0 = now_s();
    int rc = dist_spawn(N, rank_main, NULL, &cfg);
    for (int r = 0; r < N; r++)
        if (sh->fail[r][0]) { printf("FAIL %s: rank %d: %s\n", name, r, sh->fail[r]); ok = 0; }
    if (rc != 0 && c != C_TIMEOUT) { printf("FAIL %s: dist_spawn returned %d: %s\n", name, rc, dist_error_message(NULL)); ok = 0; }
    const char *text = c == C_TIMEOUT ? sh->logged[0] : c == C_RECORDER ? sh->dump : c == C_WAITING ? sh->noted[0] :
                       c == C_WAITING_P2P ? sh->noted[1] : sh->report;
    for (int i = 0; must[i]; i++) ok &= contains(text, must[i], name);
    printf("%s %s (%.1f s)\n", ok ? "ok  " : "FAIL", name, now_s() - t0);
    if (ok) printf("    | %s\n", text[0] ? "" : "(empty)");
    for (const char *p = text; ok && *p; ) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        printf("    | %.*s\n", len, p);
        p += len + (nl != NULL);
    }
    return ok;
}

int main(void) {
    int failed = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    {
        const char *must[] = { "job report: 7 of 8 ranks answered", "rank 3 sent no report", "ranks 0-2, 4-7 wait in all_reduce #5 (1 x float64, sum)",
                               "likely cause: rank 3 sent no report", NULL };
        failed += !run_case(C_STOPPED, "stopped", 20000, must);
    }
    {
        const char *must[] = { "job report: 8 of 8 ranks answered", "ranks 0-2, 4-7 wait in all_reduce #5",
                               "rank 3 has not called collective #5: its last, all_reduce #4 (1 x float64, sum), finished",
                               "rank 3 waits in recv #1 from rank 0 (tag 99, 1 x int32)", "likely cause: rank 3 is behind", NULL };
        failed += !run_case(C_SKIPPED, "skipped", 20000, must);
    }
    {
        const char *must[] = { "job report: 8 of 8 ranks answered", "ranks 0-4, 6-7 failed in all_reduce #5",
                               "MISMATCH: rank 5 called broadcast #5 (1 x float64, root 0) where rank 0 called all_reduce #5", NULL };
        failed += !run_case(C_MISMATCH, "mismatch", 20000, must);
    }
    {
        const char *must[] = { "a call timed out; job report:", "rank 3 sent no report", "likely cause: rank 3", NULL };
        failed += !run_case(C_TIMEOUT, "timeout", 3000, must);
    }
    {
        const char *must[] = { "[rank 0] all_reduce #5 (1 x float64, sum) has waited ", NULL };
        const char *p;
        failed += !run_case(C_WAITING, "waiting", 8000, must);
        /* the first note comes after 2 s, at the monitor's next look (once a second) */
        if ((p = strstr(sh->noted[0], "has waited ")) != NULL && (atof(p + 11) < 2.0 || atof(p + 11) > 3.4)) {
            printf("FAIL waiting: the note came after %.1f s, not 2-3.4 s\n", atof(p + 11));
            failed++;
        }
        for (int r = 0; r < N; r++)
            if (r != 3 && !sh->noted[r][0]) { printf("FAIL waiting: rank %d logged no waiting note\n", r); failed++; }
        if (sh->noted[3][0]) { printf("FAIL waiting: rank 3, which came last, logged \"%s\"\n", sh->noted[3]); failed++; }
    }
    {
        const char *must[] = { "[rank 1] recv #1 from rank 0 (tag 5, 1 x int32) has waited ", " s so far", NULL };
        const char *p;
        failed += !run_case(C_WAITING_P2P, "waiting_p2p", 8000, must);
        if ((p = strstr(sh->noted[1], "has waited ")) != NULL && (atof(p + 11) < 2.0 || atof(p + 11) > 3.4)) {
            printf("FAIL waiting_p2p: the note came after %.1f s, not 2-3.4 s\n", atof(p + 11));
            failed++;
        }
        if (sh->noted[0][0]) { printf("FAIL waiting_p2p: rank 0, which waited for nothing, logged \"%s\"\n", sh->noted[0]); failed++; }
    }
    {
        const char *must[] = { "dist-dump 1 1 8 0 0", "c 0 4 3 ", "c 0 1 3 ", "c 0 5 3 ", "p 0 1 2 0 0 7 2 1 2 0", NULL };
        failed += !run_case(C_RECORDER, "recorder", 20000, must);
        /* <queued>, the last field of a c line: -1 for #1-#4 (blocking), >= 0 for #5 (async) */
        for (int seq = 1; seq <= 5; seq++) {
            char head[32];
            const char *p;
            snprintf(head, sizeof head, "\nc 0 %d 3 ", seq);
            if ((p = strstr(sh->dump, head)) == NULL) continue;      /* (said above) */
            const char *nl = strchr(p + 1, '\n'), *sp = p + 1;
            for (const char *q = p + 1; q < (nl ? nl : p + strlen(p)); q++) if (*q == ' ') sp = q;
            long long queued = atoll(sp + 1);
            if (seq < 5 ? queued != -1 : (queued < 0 || queued > 20000)) {
                printf("FAIL recorder: collective #%d's <queued> is %lld (%s)\n", seq, queued, seq < 5 ? "blocking: -1" : "async: >= 0 ms ago");
                failed++;
            }
        }
    }
    {
        const char *must[] = { "job report: 7 of 8 ranks answered", "rank 3 sent no report",
                               "ranks 0-2, 4-7 wait in all_reduce #5 (1 x float64, sum) (for up to ",
                               "ranks 0-2, 4-7 have 2 collectives queued behind their current one (async; the first for up to ", NULL };
        failed += !run_case(C_QUEUED, "queued", 20000, must);
    }
    printf("%d failed\n", failed);
    return failed ? 1 : 0;
}
