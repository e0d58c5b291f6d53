// TIMEOUT: 240
// WINDOWS: no, it forks each rank with its own DIST_HOST_ID (the library code is the same there)
/* test_hier_stress.c - the hierarchical collectives as a user's program
   meets them, not as the algorithms were designed to be called.

   Ranks are forks of this process with DIST_HOST_ID set to their host's
   name (as in test_hier.c: ranks of one name share memory, the others talk
   over TCP on loopback); DIST_ALGO unset, so the hierarchical forms run
   wherever the size calls for them.  Cases:
     loop      hosts A B A B; 300 collectives back to back with no barrier,
               cycling all_reduce, all_gather, broadcast (root k % 4),
               reduce_scatter and reduce (root (k + 1) % 4) over counts of
               3, 1000, 65539 and 262147 float32 (1 MiB: hierarchical);
               rank 3 arrives up to 6 ms late at every third call, rank 0
               sleeps 300 ms at call 100 while the others run ahead; every
               result exact against the serial reference, every call.
               Again with hosts A A A B (uneven).
     cost      hosts A A B B; 200 all_reduces of 1 MiB back to back: the
               RSS after them exceeds the RSS after the first 20 by less
               than 8 MiB on every rank, and the median call of each tenth,
               at its lowest in the second half, is no slower than 5x its
               lowest in the first (per-call cost does not grow; measured
               in the same run; medians, as a loaded machine stretches some
               calls).
     mismatch  hosts A B A B; rank 2 sets DIST_ALGO=ring, the others
               DIST_ALGO=hier, and all call a 1 MiB all_reduce: every rank
               fails (none returns a wrong sum) within its timeout (5 s)
               plus 5 s, and some rank's message says the ranks chose
               different algorithms.
     kill      hosts A B A B; 4 MiB all_reduces back to back; rank 1
               SIGKILLs itself in the middle of its 6th call: every
               survivor's call fails within 10 s of the kill, and the
               message names rank 1.
   Cost: about 6 s on 2 cores (5 jobs of 4 processes). */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define N 4
typedef struct shared {
    int rc[N];                 /* the failing call's result (mismatch, kill) */
    int64_t t_err[N];          /* when it returned (now_ns) */
    int64_t t_kill;            /* when the victim killed itself */
    long rss0[N], rss1[N];     /* cost: KiB */
    double tenth_first[N], tenth_second[N];
    char msg[N][TEST_ERRLEN];
} shared;
static shared *g_sh;

typedef int (*case_fn)(dist_t *w, int rank);
typedef struct kase { const char *name, *hosts; case_fn fn; int timeout_ms; } kase;
static const kase *g_case_now;

#define RFAIL(...) do { printf("FAIL %s rank %d: ", g_case_now->name, rank); printf(__VA_ARGS__); printf("\n"); fflush(stdout); return 1; } while (0)

/* An exact value: small integers in floats sum exactly in any order. */
static float val(int k, int r, size_t i) { return (float)((int)((i * 31 + (size_t)k * 7 + (size_t)r * 13) % 17) - 8); }

static int case_loop(dist_t *w, int rank) {
    static const size_t counts[4] = { 3, 1000, 65539, 262147 };
    size_t maxc = 262147;
    float *a = (float *)malloc(sizeof(float) * maxc * N), *b = (float *)malloc(sizeof(float) * maxc * N);
    if (!a || !b) RFAIL("out of memory");
    for (int k = 0; k < 300; k++) {
        size_t c = counts[mix64((uint64_t)k) % 4], i;
        int kind = k % 5, root = kind == 2 ? k % N : (k + 1) % N;
        dist_result rc = DIST_OK;
        if (rank == 3 && k % 3 == 0) sleep_ms((int)(mix64((uint64_t)k * 3) % 7));
        if (rank == 0 && k == 100) sleep_ms(300);
        switch (kind) {
        case 0:   /* all_reduce */
            for (i = 0; i < c; i++) a[i] = val(k, rank, i);
            rc = dist_all_reduce(w, a, c, DIST_FLOAT32, DIST_SUM);
            for (i = 0; rc == DIST_OK && i < c; i++) {
                float x = 0;
                for (int r = 0; r < N; r++) x += val(k, r, i);
                if (a[i] != x) RFAIL("call %d: all_reduce of %zu: element %zu is %g, want %g", k, c, i, a[i], x);
            }
            break;
        case 1:   /* all_gather */
            for (i = 0; i < c; i++) a[i] = val(k, rank, i);
            rc = dist_all_gather(w, a, b, c, DIST_FLOAT32);
            for (int r = 0; rc == DIST_OK && r < N; r++)
                for (i = 0; i < c; i++)
                    if (b[(size_t)r * c + i] != val(k, r, i)) RFAIL("call %d: all_gather of %zu: rank %d's element %zu differs", k, c, r, i);
            break;
        case 2:   /* broadcast */
            for (i = 0; i < c; i++) a[i] = rank == root ? val(k, root, i) : 99.0f;
            rc = dist_broadcast(w, a, c, DIST_FLOAT32, root);
            for (i = 0; rc == DIST_OK && i < c; i++)
                if (a[i] != val(k, root, i)) RFAIL("call %d: broadcast of %zu from %d: element %zu is %g", k, c, root, i, a[i]);
            break;
        case 3:   /* reduce_scatter: block r of everyone's input to rank r */
            for (i = 0; i < c * N; i++) a[i] = val(k, rank, i);
            rc = dist_reduce_scatter(w, a, b, c, DIST_FLOAT32, DIST_SUM);
            for (i = 0; rc == DIST_OK && i < c; i++) {
                float x = 0;
                for (int r = 0; r < N; r++) x += val(k, r, (size_t)rank * c + i);
                if (b[i] != x) RFAIL("call %d: reduce_scatter of %zu: element %zu is %g, want %g", k, c, i, b[i], x);
            }
            break;
        default:  /* reduce */
            for (i = 0; i < c; i++) a[i] = val(k, rank, i);
            rc = dist_reduce(w, a, c, DIST_FLOAT32, DIST_SUM, root);
            for (i = 0; rc == DIST_OK && i < c; i++) {
                float x = 0;
                if (rank == root) for (int r = 0; r < N; r++) x += val(k, r, i);
                else x = val(k, rank, i);
                if (a[i] != x) RFAIL("call %d: reduce of %zu to %d: element %zu is %g, want %g", k, c, root, i, a[i], x);
            }
            break;
        }
        if (rc != DIST_OK) RFAIL("call %d (%zu floats): %s", k, c, dist_error_message(w));
    }
    free(a); free(b);
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int case_cost(dist_t *w, int rank) {
    size_t c = 262144;
    float *a = (float *)malloc(sizeof(float) * c);
    int64_t t[200];
    double tenth[10];
    if (!a) RFAIL("out of memory");
    for (int k = 0; k < 200; k++) {
        int64_t t0;
        for (size_t i = 0; i < c; i += 4096) a[i] = (float)rank;
        t0 = now_ns();
        if (dist_all_reduce(w, a, c, DIST_FLOAT32, DIST_SUM) != DIST_OK) RFAIL("call %d: %s", k, dist_error_message(w));
        t[k] = now_ns() - t0;
        if (a[0] != 0 + 1 + 2 + 3) RFAIL("call %d: %g, want 6", k, a[0]);
        if (k == 19) g_sh->rss0[rank] = status_kb("VmRSS:");
    }
    g_sh->rss1[rank] = status_kb("VmRSS:");
    for (int q = 0; q < 10; q++) {     /* the median call of each tenth (a loaded machine stretches some calls, not most) */
        qsort(t + q * 20, 20, sizeof t[0], cmp_i64);
        tenth[q] = (double)t[q * 20 + 10] / 1e3;
    }
    g_sh->tenth_first[rank] = tenth[0]; g_sh->tenth_second[rank] = tenth[5];
    for (int q = 1; q < 5; q++) if (tenth[q] < g_sh->tenth_first[rank]) g_sh->tenth_first[rank] = tenth[q];
    for (int q = 6; q < 10; q++) if (tenth[q] < g_sh->tenth_second[rank]) g_sh->tenth_second[rank] = tenth[q];
    free(a);
    return 0;
}

static int case_mismatch(dist_t *w, int rank) {
    size_t c = 262144;
    float *a = (float *)malloc(sizeof(float) * c);
    dist_result rc;
    if (!a) RFAIL("out of memory");
    for (size_t i = 0; i < c; i++) a[i] = 1.0f;
    rc = dist_all_reduce(w, a, c, DIST_FLOAT32, DIST_SUM);
    g_sh->t_err[rank] = now_ns();
    g_sh->rc[rank] = rc;
    snprintf(g_sh->msg[rank], TEST_ERRLEN, "%s", rc == DIST_OK ? "" : dist_error_message(w));
    free(a);
    return 0;
}

static int case_kill(dist_t *w, int rank) {
    size_t c = 1048576;
    float *a = (float *)malloc(sizeof(float) * c);
    if (!a) RFAIL("out of memory");
    for (int k = 0; k < 40; k++) {
        dist_req_t *h = NULL;
        dist_result rc;
        for (size_t i = 0; i < c; i += 1024) a[i] = 1.0f;
        if (rank == 1 && k == 5) {
            if (dist_all_reduce_async(w, a, c, DIST_FLOAT32, DIST_SUM, &h) != DIST_OK) RFAIL("all_reduce_async: %s", dist_error_message(w));
            sleep_us((long)(mix64((uint64_t)getpid()) % 3000));
            __atomic_store_n(&g_sh->t_kill, now_ns(), __ATOMIC_SEQ_CST);
            raise(SIGKILL);
        }
        rc = dist_all_reduce(w, a, c, DIST_FLOAT32, DIST_SUM);
        if (rc != DIST_OK) {
            g_sh->t_err[rank] = now_ns();
            g_sh->rc[rank] = rc;
            snprintf(g_sh->msg[rank], TEST_ERRLEN, "%s", dist_error_message(w));
            free(a);
            return 0;
        }
        if (a[0] != 4.0f) RFAIL("call %d: %g, want 4", k, a[0]);
    }
    RFAIL("40 all_reduces went through with rank 1 killed in the 6th");
}

static int rank_main(int rank, int port, int lfd) {
    const kase *kc = g_case_now;
    dist_config cfg;
    dist_t *w = NULL;
    char url[64], host[8];
    int bad;
    snprintf(host, sizeof host, "%c", kc->hosts[rank]);
    setenv("DIST_HOST_ID", host, 1);
    if (kc->fn == case_mismatch) setenv("DIST_ALGO", rank == 2 ? "ring" : "hier", 1);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    memset(&cfg, 0, sizeof cfg);
    cfg.init_method = url; cfg.rank = rank; cfg.world_size = N; cfg.timeout_ms = kc->timeout_ms;
    if (rank == 0) cfg.store_listen_fd = lfd + 1; else close(lfd);
    if (dist_init(&w, &cfg) != DIST_OK) RFAIL("dist_init: %s", dist_error_message(NULL));
    if (dist_node_count(w) != 2) RFAIL("dist_node_count %d, want 2", dist_node_count(w));
    bad = kc->fn(w, rank);
    dist_destroy(w);
    return bad;
}

/* Runs the case's 4 ranks; 0 when each exited 0 (the victim of `kill`
   dies of its signal, as it must). */
static int run_case(const kase *kc, double *secs) {
    pid_t pids[N];
    int port = 0, lfd, failed = 0, left;
    int64_t t0 = now_ns(), deadline;
    g_case_now = kc;
    memset(g_sh, 0, sizeof *g_sh);
    if ((lfd = listen_loopback(64, &port)) < 0) { printf("FAIL %s: no loopback socket: %s\n", kc->name, strerror(errno)); return 1; }
    fflush(stdout);
    for (int r = 0; r < N; r++)
        if ((pids[r] = fork()) == 0) {
            rank_alarm((unsigned)(scaled(90000) / 1000));
            _exit(rank_main(r, port, lfd));
        }
    close(lfd);
    deadline = now_ns() + (int64_t)scaled(100000) * 1000000;
    for (left = N; left > 0;) {
        int st, r = 0;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            left--;
            while (r < N && pids[r] != p) r++;
            if (kc->fn == case_kill && r == 1) {
                if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) { printf("FAIL %s: the victim did not die of SIGKILL (status %d)\n", kc->name, st); failed = 1; }
            } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("FAIL %s: rank %d %s %d\n", kc->name, r, WIFEXITED(st) ? "exited with" : "died of signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed = 1;
            }
            continue;
        }
        if (now_ns() > deadline) {
            printf("FAIL %s: not done in %.0f s\n", kc->name, secs_since(t0));
            for (r = 0; r < N; r++) kill(pids[r], SIGKILL);
            while (waitpid(-1, &st, 0) > 0) {}
            return 1;
        }
        sleep_ms(5);
    }
    *secs = secs_since(t0);
    return failed;
}

int main(void) {
    static const kase cases[] = {
        { "loop", "ABAB", case_loop, 30000 },
        { "loop uneven", "AAAB", case_loop, 30000 },
        { "cost", "AABB", case_cost, 30000 },
        { "mismatch", "ABAB", case_mismatch, 5000 },
        { "kill", "ABAB", case_kill, 10000 },
    };
    int failed = 0, passed = 0;
    test_start();
    UNSET_ENV("DIST_ALGO", "DIST_HOST_ID", "DIST_TRANSPORT", "DIST_INIT_METHOD", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE");
    g_sh = (shared *)mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const kase *kc = &cases[ci];
        double secs = 0;
        int bad = run_case(kc, &secs);
        char extra[256] = "";
        if (!bad && kc->fn == case_cost) {
            for (int r = 0; r < N && !bad; r++) {
                if (g_sh->rss0[r] <= 0 || g_sh->rss1[r] - g_sh->rss0[r] >= 8192) {
                    printf("FAIL cost: rank %d's RSS grew from %ld to %ld KiB over 180 all_reduces of 1 MiB\n", r, g_sh->rss0[r], g_sh->rss1[r]);
                    bad = 1;
                } else if (g_sh->tenth_second[r] > 5 * g_sh->tenth_first[r]) {
                    printf("FAIL cost: rank %d: the median call of the quickest tenth of the second half %.0f us, of the first %.0f us\n", r,
                           g_sh->tenth_second[r], g_sh->tenth_first[r]);
                    bad = 1;
                }
            }
            snprintf(extra, sizeof extra, "; rank 0: RSS %+ld KiB, median call %.0f us then %.0f us (the quickest tenth's)", g_sh->rss1[0] - g_sh->rss0[0],
                     g_sh->tenth_first[0], g_sh->tenth_second[0]);
        }
        if (!bad && kc->fn == case_mismatch) {
            int named = -1;
            int64_t first = 0, last = 0;
            for (int r = 0; r < N; r++) {
                if (g_sh->rc[r] == DIST_OK) { printf("FAIL mismatch: rank %d's all_reduce succeeded with rank 2 on another algorithm\n", r); bad = 1; }
                if (named < 0 && strstr(g_sh->msg[r], "algorithm")) named = r;
                if (!first || g_sh->t_err[r] < first) first = g_sh->t_err[r];
                if (g_sh->t_err[r] > last) last = g_sh->t_err[r];
            }
            if (!bad && named < 0) {
                printf("FAIL mismatch: no rank's message says the algorithms differ; rank 0's: %s\n", g_sh->msg[0]);
                bad = 1;
            }
            if (!bad && secs > scaled_s(5.0 + 5.0) + 2.0) { printf("FAIL mismatch: the job took %.1f s\n", secs); bad = 1; }
            if (!bad) snprintf(extra, sizeof extra, "; rank %d: %.150s", named, g_sh->msg[named]);
        }
        if (!bad && kc->fn == case_kill) {
            for (int r = 0; r < N && !bad; r++) {
                double after;
                if (r == 1) continue;
                after = (double)(g_sh->t_err[r] - g_sh->t_kill) / 1e9;
                if (!g_sh->t_kill || g_sh->rc[r] == DIST_OK || !names_rank(g_sh->msg[r], 1) || after > scaled_s(10.0)) {
                    printf("FAIL kill: rank %d: failed %.2f s after the kill with %s\n", r, after, g_sh->msg[r]);
                    bad = 1;
                }
            }
            if (!bad) snprintf(extra, sizeof extra, "; rank 0 %.3f s after the kill: %.120s", (double)(g_sh->t_err[0] - g_sh->t_kill) / 1e9, g_sh->msg[0]);
        }
        if (bad) failed++;
        else { passed++; printf("ok   %s (%.1f s)%s\n", kc->name, secs, extra); }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
