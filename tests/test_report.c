// WINDOWS: yes
// TIMEOUT: 60
/* test_report.c - the job report read from dumps written here by hand,
   as the ranks' recorders would write them (FLIGHT RECORDER in dist.h;
   the dumps' format is at dist__rec_dump).  test_hang.c makes real jobs
   hang; this one pins the report's sentences for states a real job
   reaches only by chance, and what the reader refuses:
     queued    ranks 0-2 wait in async all_reduce #5 with 2 more queued
               behind it; rank 3 is still in #4, queued 4 s ago and
               entered 3 s ago, waiting for data from rank 1: the report
               says each, and that rank 3 is the likely cause
     older     a dump without the <queued> field and no q lines (an
               older library) reads as "not queued"
     refused   q lines and c lines with impossible numbers (negative
               counts, a communicator id past 32 bits, queued < -1) make
               the dump unreadable: that rank "sent no report"
     silent    two ranks send nothing: the report lists both and does not
               pick one as the cause (the dumps cannot tell which went
               first); one alone is the likely cause
     launcher  the launcher saw rank 2 fail first (dist_store_host_note_
               failure's fact): the likely cause says so, and no other
               rank, whatever the dumps show (rank 1 silent, rank 3
               behind)
     real      this process's own recorder (a world of one rank): an async
               all_reduce's line carries when it was queued (>= 0 ms ago), a
               blocking one's -1; after 200 more (three times round the
               ring) the dump holds the 12 newest, each with its own count
   One line per check; exit 0 only if every check passed. */
#define DIST_IMPLEMENTATION         /* (reads the library's own parser: never the linked build) */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int checks, fails;

static void check(int ok, const char *what, const char *report) {
    checks++;
    if (ok) { printf("ok   %s\n", what); return; }
    fails++;
    printf("FAIL %s\n", what);
    for (const char *p = report; p && *p; ) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        printf("     | %.*s\n", len, p);
        p += len + (nl != NULL);
    }
}

/* One collective line: comm 0, seq, all_reduce of 8 float32 sum. */
static int c_line(char *out, size_t cap, int seq, int state, int wait_what, int whom, long long started, long long ended,
                  const char *queued) {
    return snprintf(out, cap, "c 0 %d %d 0 %d %d 0 8 %d 0 %d %d %lld %lld%s%s\n", seq, DIST__COLL_ALL_REDUCE, (int)DIST_FLOAT32,
                    (int)DIST_SUM, state, wait_what, whom, started, ended, queued ? " " : "", queued ? queued : "");
}

/* Rank r's dump of 4 ranks: collectives #4 (done) and #5 running, or (r
   = 3) #4 running; `qline`: a q line for communicator 0 (NULL: none);
   `queued`: the <queued> field of the running one (NULL: absent). */
static char *dump_of(int r, const char *qline, const char *queued) {
    char *t = (char *)malloc(4096);
    int n = snprintf(t, 4096, "dist-dump 1 %d 4 0 7\ng 0 4 %d w\n", r, r);
    if (r == 3) n += c_line(t + n, 4096 - (size_t)n, 4, DIST__REC_RUNNING, DIST__RECW_DATA, 1, 3000, -1, queued);
    else {
        n += c_line(t + n, 4096 - (size_t)n, 4, DIST__REC_DONE, 0, -1, 3100, 3050, queued ? "-1" : NULL);
        n += c_line(t + n, 4096 - (size_t)n, 5, DIST__REC_RUNNING, DIST__RECW_DATA, 3, 1000 + 500 * r, -1, queued);
    }
    if (qline) snprintf(t + n, 4096 - (size_t)n, "%s\n", qline);
    return t;
}

static void report_ended(char **texts, int ended_rank, const char *ended_what, char *out, size_t cap) {
    size_t lens[4];
    for (int r = 0; r < 4; r++) lens[r] = texts[r] ? strlen(texts[r]) : 0;
    dist__report_build(4, texts, lens, ended_rank, ended_what, out, cap);
}
static void report_of(char **texts, char *out, size_t cap) { report_ended(texts, -1, NULL, out, cap); }

/* The report's likely-cause lines (0, or 1 when it gives one). */
static int causes_in(const char *out) {
    int n = 0;
    for (const char *p = out; (p = strstr(p, "likely cause:")) != NULL; p++) n++;
    return n;
}

static void free_all(char **texts) { for (int r = 0; r < 4; r++) { free(texts[r]); texts[r] = NULL; } }

int main(void) {
    char out[8192], *texts[4] = { 0 };
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* queued */
    for (int r = 0; r < 3; r++) texts[r] = dump_of(r, r == 1 ? "q 0 2 1500" : "q 0 2 1200", "2100");
    texts[3] = dump_of(3, NULL, "4000");
    report_of(texts, out, sizeof out);
    check(strstr(out, "job report: 4 of 4 ranks answered\n") != NULL, "queued: every dump read", out);
    check(strstr(out, "  ranks 0-2 wait in all_reduce #5 (8 x float32, sum) (for up to 2.0 s)\n") != NULL,
          "queued: ranks 0-2 wait in all_reduce #5, for up to 2.0 s (the longest started)", out);
    check(strstr(out, "  rank 3 is still in all_reduce #4 (8 x float32, sum) (queued 4.0 s ago, entered 3.0 s ago, waiting for data from "
                      "rank 1)\n") != NULL, "queued: rank 3 is still in #4, queued 4.0 s ago, entered 3.0 s ago, waiting for rank 1", out);
    check(strstr(out, "  ranks 0-2 have 2 collectives queued behind their current one (async; the first for up to 1.5 s)\n") != NULL,
          "queued: ranks 0-2 have 2 collectives queued behind #5 (the first for up to 1.5 s)", out);
    check(strstr(out, "  likely cause: rank 3 is behind the others (they are in collective #5)\n") != NULL, "queued: likely cause rank 3", out);
    free_all(texts);

    /* one rank with a queue of its own length */
    for (int r = 0; r < 3; r++) texts[r] = dump_of(r, r == 2 ? "q 0 1 700" : NULL, "2100");
    texts[3] = dump_of(3, NULL, "-1");
    report_of(texts, out, sizeof out);
    check(strstr(out, "  rank 2 has 1 collective queued behind its current one (async; the first for 0.7 s)\n") != NULL &&
          !strstr(out, "ranks 0-2 have"), "queued: one rank's queue, in the singular", out);
    check(strstr(out, "  rank 3 is still in all_reduce #4 (8 x float32, sum) (entered 3.0 s ago, waiting for data from rank 1)\n") != NULL,
          "queued: a call not queued (-1) says nothing of a queue", out);
    free_all(texts);

    /* older: no <queued>, no q lines */
    for (int r = 0; r < 4; r++) texts[r] = dump_of(r, NULL, NULL);
    report_of(texts, out, sizeof out);
    check(strstr(out, "job report: 4 of 4 ranks answered\n") != NULL &&
          strstr(out, "  rank 3 is still in all_reduce #4 (8 x float32, sum) (entered 3.0 s ago, waiting for data from rank 1)\n") &&
          !strstr(out, "queued"), "older: dumps without <queued> read, nothing said of queues", out);
    free_all(texts);

    /* refused */
    {
        const char *bad_q[] = { "q 0 -2 100", "q 0 2 -5", "q 4294967296 2 100", "q 0 2", "q x 2 100" };
        for (size_t i = 0; i < sizeof bad_q / sizeof *bad_q; i++) {
            char what[120];
            for (int r = 0; r < 4; r++) texts[r] = dump_of(r, r == 2 ? bad_q[i] : NULL, "5");
            report_of(texts, out, sizeof out);
            snprintf(what, sizeof what, "refused: rank 2's \"%s\" makes its dump unreadable", bad_q[i]);
            check(strstr(out, "job report: 3 of 4 ranks answered\n") && strstr(out, "  rank 2 sent no report"), what, out);
            free_all(texts);
        }
        for (int r = 0; r < 4; r++) texts[r] = dump_of(r, NULL, r == 1 ? "-7" : "5");
        report_of(texts, out, sizeof out);
        check(strstr(out, "job report: 3 of 4 ranks answered\n") && strstr(out, "  rank 1 sent no report"),
              "refused: a c line queued -7 ms ago", out);
        free_all(texts);
    }

    /* silent: ranks 1 and 3 send nothing */
    for (int r = 0; r < 4; r += 2) texts[r] = dump_of(r, NULL, NULL);
    report_of(texts, out, sizeof out);
    check(strstr(out, "job report: 2 of 4 ranks answered\n") && strstr(out, "  ranks 1, 3 sent no report") &&
          strstr(out, "  likely cause: one of ranks 1, 3, which sent no report\n") && causes_in(out) == 1,
          "silent: two ranks silent, neither picked as the cause", out);
    free_all(texts);
    for (int r = 0; r < 3; r++) texts[r] = dump_of(r, NULL, NULL);
    report_of(texts, out, sizeof out);
    check(strstr(out, "  likely cause: rank 3 sent no report\n") && causes_in(out) == 1, "silent: one rank silent is the likely cause", out);
    free_all(texts);

    /* launcher: rank 2 failed first, as the launcher saw; rank 1 is silent
       too and rank 3 behind in the dumps */
    texts[0] = dump_of(0, NULL, NULL); texts[3] = dump_of(3, NULL, NULL);
    report_ended(texts, 2, "was killed by signal 9 (Killed)", out, sizeof out);
    check(strstr(out, "  ranks 1-2 sent no report") &&
          strstr(out, "  likely cause: rank 2 was killed by signal 9 (Killed) (the launcher saw it fail first)\n") && causes_in(out) == 1,
          "launcher: the likely cause is the rank the launcher saw fail first, and only that", out);
    free_all(texts);
    for (int r = 0; r < 4; r++) texts[r] = dump_of(r, NULL, NULL);
    report_ended(texts, 1, NULL, out, sizeof out);
    check(strstr(out, "  likely cause: rank 1 failed (the launcher saw it fail first)\n") && causes_in(out) == 1 &&
          strstr(out, "  rank 3 is still in all_reduce #4"), "launcher: its fact wins over a rank behind in the dumps", out);
    free_all(texts);

    /* real: this process's recorder, a world of one rank */
    {
        dist_config cfg = { 0 };
        dist_t *w = NULL;
        dist_req_t *req = NULL;
        float v[8] = { 0 };
        char dump[4096], url[64];
        dist__dump dp;
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", free_port(AF_INET));
        cfg.world_size = 1; cfg.init_method = url;
        if (dist_init(&w, &cfg) != DIST_OK) {
            printf("FAIL real: dist_init: %s\n", dist_error_message(NULL));
            return 1;
        }
        int ok = dist_all_reduce(w, v, 8, DIST_FLOAT32, DIST_SUM) == DIST_OK &&
                 dist_all_reduce_async(w, v, 8, DIST_FLOAT32, DIST_SUM, &req) == DIST_OK && dist_wait(req) == DIST_OK;
        check(ok, "real: a blocking all_reduce, then an async one", dist_error_message(w));
        size_t n = dist_recorder_dump(w, dump, sizeof dump);
        int parsed = dist__dump_parse(dump, n, &dp) == 0;
        const dist__dop *a = parsed ? dist__dump_find(&dp, 0, 1) : NULL, *b = parsed ? dist__dump_find(&dp, 0, 2) : NULL;
        check(a && b && a->queued == -1 && b->queued >= 0 && b->queued < 60000,
              "real: the dump reads back; the blocking call's <queued> is -1, the async one's how long ago it was queued", dump);
        if (parsed) DIST_FREE(dp.ops);
        /* around the ring (64 entries) three times: the dump's collectives are the 12 newest, whole */
        for (int i = 0; ok && i < 200; i++) ok = dist_all_reduce(w, v, (size_t)1 + i % 8, DIST_FLOAT32, DIST_SUM) == DIST_OK;
        n = dist_recorder_dump(w, dump, sizeof dump);
        parsed = ok && dist__dump_parse(dump, n, &dp) == 0;
        int whole = parsed && dp.nops == 12;
        for (int k = 0; whole && k < 12; k++) {
            const dist__dop *x = dist__dump_find(&dp, 0, 191 + (unsigned long long)k);
            whole = x && x->count == (unsigned long long)(1 + (188 + k) % 8) && x->kind == DIST__COLL_ALL_REDUCE && x->dtype == DIST_FLOAT32 &&
                    x->state == DIST__REC_DONE && x->queued == -1;      /* (#k + 3 is the loop's call k: count 1 + k % 8) */
        }
        check(whole, "real: after 202 collectives (the ring of 64 three times round) the dump holds #191-#202, each with its count", dump);
        if (parsed) DIST_FREE(dp.ops);
        dist_destroy(w);
    }

    printf("%d of %d checks passed\n", checks - fails, checks);
    return fails ? 1 : 0;
}
