// TIMEOUT: 240
// ALONE: its cost cases bound the per-call time of 200-4,000 calls against the same loop's first half: another test's load arriving halfway moved every later call 10-20x (cost small in a full run's portable pass; cost one host: all_gather beside a sanitizer build)
// WINDOWS: no, it forks each rank with its own DIST_HOST_ID (the library code is the same there)
/* test_hier_stress.c - the hierarchical collectives as a user's program
   meets them, not as the algorithms were designed to be called.

   Ranks are forks of this process with DIST_HOST_ID set to their host's
   name (as in test_hier.c: ranks of one name share memory, the others talk
   over TCP on loopback); DIST_ALGO unset, so the hierarchical forms run
   wherever the size calls for them.  Cases:
     loop      hosts A B A B; 300 collectives back to back with no barrier,
               cycling all_reduce, all_gather, broadcast (root k % 4),
               reduce_scatter, reduce (root (k + 1) % 4) and all_to_all
               over counts of
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
     cost small     hosts A A B B; as cost, 4000 all_reduces of 2
               floats (through each host's slots, the hosts' first ranks
               exchanging): RSS, and the median call of each tenth within
               5x + 500 us (the whole loop takes some 50 ms: a neighbour
               test's load that began halfway once moved every call of the
               second half from 18 to 350 us in the portable pass);
     mismatch small hosts A B A B; rank 3 calls a 1 MiB all_reduce
               (hierarchical, by messages) where the others call one of 2
               floats (slots): every rank fails in time, and a message
               names both counts;
     kill small     8-byte all_reduces, rank 1 killed in its 6th: hosts
               A B A B (rank 1 is host B's first, which crosses) and
               A A B B (rank 1 waits in host A's slots); again with
               all_to_alls of 2 floats a block.
   And on one host (hosts A A A A: shared memory, the collectives in the
   segments; broadcasts and all_gathers read from the owners' memory where
   the system lets them, the root of a broadcast of 512 KiB or more
   writing pieces of it into the readers meanwhile; staged through the
   segments where it does not, as under DIST_PORTABLE_POSIX):
     loop one host         as loop, over 3, 5003 (20 KiB: past the
                           slots), 65539 and 786433 (3 MiB) float32;
     cost one host: broadcast, all_gather   as cost, 1 MiB broadcasts from
                           rank 0, or all_gathers of 1 MiB in all;
     mismatch one host     rank 2 calls all_gather where the others
                           broadcast: rank 2 and the root fail, a reader
                           that completes holds the root's data, and a
                           message names the other call;
     kill one host: all_gather, broadcast, broadcast's root   as kill, 4
                           MiB a rank (the broadcasts from rank 0, then
                           from rank 1, the victim).
   Under TEST_COLL_QUICK=2 (make tsan) the cost cases are left out (listed
   as such): they bound memory and time, which ThreadSanitizer's own
   shadow memory and slowdown distort; the others look for races.
   Cost: about 15 s on 2 cores (18 jobs of 4 processes). */
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
typedef struct kase { const char *name, *hosts; case_fn fn; int timeout_ms; int op; } kase;   /* op: cost and kill's collective */
enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_BROADCAST, OP_BROADCAST_1, OP_SMALL, OP_A2A };   /* (broadcast from rank 0, from rank 1;
                                                  OP_SMALL: all_reduce of 2 floats, OP_A2A: all_to_all of 2 a block, through each host's slots) */
static const kase *g_case_now;

#define RFAIL(...) do { printf("FAIL %s rank %d: ", g_case_now->name, rank); printf(__VA_ARGS__); printf("\n"); fflush(stdout); return 1; } while (0)

/* An exact value: small integers in floats sum exactly in any order. */
static float val(int k, int r, size_t i) { return (float)((int)((i * 31 + (size_t)k * 7 + (size_t)r * 13) % 17) - 8); }

static int one_host(void) { return strspn(g_case_now->hosts, "A") == N; }

/* One call of collective `op` on c floats (all_gather: c a rank) in a
   (and b), every rank's element i being r + 1 (the root's: 1): 0 when
   the result is right, else -1 (*rc: what the call returned). */
static int one_op(dist_t *w, int op, int rank, float *a, float *b, size_t c, dist_result *rc) {
    size_t i;
    if (op == OP_A2A) {
        for (i = 0; i < c * N; i++) a[i] = (float)(rank + 1);
        if ((*rc = dist_all_to_all(w, a, b, c, DIST_FLOAT32)) != DIST_OK) return 0;
        for (int r = 0; r < N; r++)
            if (b[(size_t)r * c] != (float)(r + 1)) return -1;
        return 0;
    }
    for (i = 0; i < c; i += 1024) a[i] = (float)(rank + 1);
    if (op == OP_ALL_REDUCE || op == OP_SMALL) *rc = dist_all_reduce(w, a, c, DIST_FLOAT32, DIST_SUM);
    else if (op == OP_ALL_GATHER) *rc = dist_all_gather(w, a, b, c, DIST_FLOAT32);
    else *rc = dist_broadcast(w, a, c, DIST_FLOAT32, op == OP_BROADCAST_1);
    if (*rc != DIST_OK) return 0;
    if (op == OP_ALL_REDUCE || op == OP_SMALL) return a[0] == (float)(N * (N + 1) / 2) ? 0 : -1;
    if (op != OP_ALL_GATHER) {
        float want = op == OP_BROADCAST_1 ? 2.0f : 1.0f;
        for (i = 0; i < c; i += 1024)
            if (a[i] != want) return -1;
        return 0;
    }
    for (int r = 0; r < N; r++)
        if (b[(size_t)r * c] != (float)(r + 1)) return -1;
    return 0;
}

static int case_loop(dist_t *w, int rank) {
    /* across hosts: tree, then hierarchical sizes; on one host: slots,
       then the segments (read from the owners' memory, the root helping
       from 512 KiB; or staged) */
    static const size_t spread[4] = { 3, 1000, 65539, 262147 }, here[4] = { 3, 5003, 65539, 786433 };
    const size_t *counts = one_host() ? here : spread;
    size_t maxc = counts[3];
    float *a = (float *)malloc(sizeof(float) * maxc * N), *b = (float *)malloc(sizeof(float) * maxc * N);
    if (!a || !b) RFAIL("out of memory");
    for (int k = 0; k < 300; k++) {
        size_t c = counts[mix64((uint64_t)k) % 4], i;
        int kind = k % 6, root = kind == 2 ? k % N : (k + 1) % N;
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
        case 5:   /* all_to_all: block r of rank s's input is block s of rank r's output */
            for (i = 0; i < c * N; i++) a[i] = val(k, rank, i);
            rc = dist_all_to_all(w, a, b, c, DIST_FLOAT32);
            for (int r = 0; rc == DIST_OK && r < N; r++)
                for (i = 0; i < c; i++)
                    if (b[(size_t)r * c + i] != val(k, r, (size_t)rank * c + i))
                        RFAIL("call %d: all_to_all of %zu: rank %d's element %zu is %g, want %g", k, c, r, i, b[(size_t)r * c + i], val(k, r, (size_t)rank * c + i));
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

#define COST_CALLS(op) ((op) == OP_SMALL ? 4000 : 200)
static int case_cost(dist_t *w, int rank) {
    int op = g_case_now->op, calls = COST_CALLS(op), per = calls / 10;
    size_t c = op == OP_ALL_GATHER ? 262144 / N : op == OP_SMALL ? 2 : 262144;
    float *a = (float *)malloc(sizeof(float) * c), *b = (float *)malloc(sizeof(float) * c * N);
    static int64_t t[COST_CALLS(OP_SMALL)];
    double tenth[10];
    if (!a || !b) RFAIL("out of memory");
    for (int k = 0; k < calls; k++) {
        int64_t t0 = now_ns();
        dist_result rc;
        int wrong = one_op(w, g_case_now->op, rank, a, b, c, &rc);
        t[k] = now_ns() - t0;
        if (rc != DIST_OK) RFAIL("call %d: %s", k, dist_error_message(w));
        if (wrong) RFAIL("call %d: a wrong result", k);
        if (k == calls / 10 - 1) g_sh->rss0[rank] = status_kb("VmRSS:");
    }
    free(b);
    g_sh->rss1[rank] = status_kb("VmRSS:");
    for (int q = 0; q < 10; q++) {     /* the median call of each tenth (a loaded machine stretches some calls, not most) */
        qsort(t + q * per, (size_t)per, sizeof t[0], cmp_i64);
        tenth[q] = (double)t[q * per + per / 2] / 1e3;
    }
    g_sh->tenth_first[rank] = tenth[0]; g_sh->tenth_second[rank] = tenth[5];
    for (int q = 1; q < 5; q++) if (tenth[q] < g_sh->tenth_first[rank]) g_sh->tenth_first[rank] = tenth[q];
    for (int q = 6; q < 10; q++) if (tenth[q] < g_sh->tenth_second[rank]) g_sh->tenth_second[rank] = tenth[q];
    free(a);
    return 0;
}

static int case_mismatch(dist_t *w, int rank) {
    size_t c = 262144;
    float *a = (float *)malloc(sizeof(float) * c * N);
    dist_result rc;
    if (!a) RFAIL("out of memory");
    for (size_t i = 0; i < c; i++) a[i] = 1.0f;
    /* on one host: rank 2 gathers what the others broadcast, as many bytes */
    if (one_host()) {
        if (rank == 0) for (size_t i = 0; i < c; i++) a[i] = 2.0f;
        rc = rank == 2 ? dist_all_gather(w, a, a, c / N, DIST_FLOAT32) : dist_broadcast(w, a, c, DIST_FLOAT32, 0);
        for (size_t i = 0; rc == DIST_OK && i < c; i++)     /* a reader of the root alone may complete: with the root's data */
            if (a[i] != 2.0f) RFAIL("its broadcast returned DIST_OK with element %zu %g, the root's 2", i, a[i]);
    } else if (g_case_now->op == OP_SMALL) {
        /* rank 3 calls the large all_reduce (hierarchical, by messages)
           where the others call a small one (through the slots) */
        rc = dist_all_reduce(w, a, rank == 3 ? c : 2, DIST_FLOAT32, DIST_SUM);
    } else {
        rc = dist_all_reduce(w, a, c, DIST_FLOAT32, DIST_SUM);
    }
    g_sh->t_err[rank] = now_ns();
    g_sh->rc[rank] = rc;
    snprintf(g_sh->msg[rank], TEST_ERRLEN, "%s", rc == DIST_OK ? "" : dist_error_message(w));
    free(a);
    return 0;
}

static int case_kill(dist_t *w, int rank) {
    static const char *const names[] = { "all_reduce", "all_gather", "broadcast", "broadcast", "all_reduce", "all_to_all" };
    int op = g_case_now->op;
    size_t c = op == OP_SMALL || op == OP_A2A ? 2 : 1048576;
    float *a = (float *)malloc(sizeof(float) * c * N), *b = (float *)malloc(sizeof(float) * c * (op == OP_ALL_GATHER || op == OP_A2A ? N : 1));
    if (!a || !b) RFAIL("out of memory");
    for (int k = 0; k < 40; k++) {
        dist_req_t *h = NULL;
        dist_result rc;
        int wrong;
        if (rank == 1 && k == 5) {
            for (size_t i = 0; i < c; i += 1024) a[i] = 2.0f;
            rc = op == OP_ALL_REDUCE || op == OP_SMALL ? dist_all_reduce_async(w, a, c, DIST_FLOAT32, DIST_SUM, &h)
               : op == OP_ALL_GATHER ? dist_all_gather_async(w, a, b, c, DIST_FLOAT32, &h)
               : op == OP_A2A ? dist_all_to_all_async(w, a, b, c, DIST_FLOAT32, &h)
               : dist_broadcast_async(w, a, c, DIST_FLOAT32, op == OP_BROADCAST_1, &h);
            if (rc != DIST_OK) RFAIL("%s_async: %s", names[op], dist_error_message(w));
            sleep_us((long)(mix64((uint64_t)getpid()) % 3000));
            __atomic_store_n(&g_sh->t_kill, now_ns(), __ATOMIC_SEQ_CST);
            raise(SIGKILL);
        }
        wrong = one_op(w, op, rank, a, b, c, &rc);
        if (rc != DIST_OK) {
            g_sh->t_err[rank] = now_ns();
            g_sh->rc[rank] = rc;
            snprintf(g_sh->msg[rank], TEST_ERRLEN, "%s", dist_error_message(w));
            free(a); free(b);
            return 0;
        }
        if (wrong) RFAIL("call %d: a wrong result", k);
    }
    RFAIL("40 %ss went through with rank 1 killed in the 6th", names[op]);
}

static int rank_main(int rank, int port, int lfd) {
    const kase *kc = g_case_now;
    dist_config cfg;
    dist_t *w = NULL;
    char url[64], host[8];
    int bad;
    snprintf(host, sizeof host, "%c", kc->hosts[rank]);
    setenv("DIST_HOST_ID", host, 1);
    if (kc->fn == case_mismatch && !one_host() && kc->op != OP_SMALL) setenv("DIST_ALGO", rank == 2 ? "ring" : "hier", 1);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    memset(&cfg, 0, sizeof cfg);
    cfg.init_method = url; cfg.rank = rank; cfg.world_size = N; cfg.timeout_ms = kc->timeout_ms;
    if (rank == 0) cfg.store_listen_fd = lfd + 1; else close(lfd);
    if (dist_init(&w, &cfg) != DIST_OK) RFAIL("dist_init: %s", dist_error_message(NULL));
    if (dist_node_count(w) != (one_host() ? 1 : 2)) RFAIL("dist_node_count %d, want %d", dist_node_count(w), one_host() ? 1 : 2);
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
        { "loop", "ABAB", case_loop, 30000, 0 },
        { "loop uneven", "AAAB", case_loop, 30000, 0 },
        { "cost", "AABB", case_cost, 30000, OP_ALL_REDUCE },
        { "mismatch", "ABAB", case_mismatch, 5000, 0 },
        { "kill", "ABAB", case_kill, 10000, OP_ALL_REDUCE },
        { "cost small", "AABB", case_cost, 30000, OP_SMALL },
        { "mismatch small", "ABAB", case_mismatch, 5000, OP_SMALL },
        { "kill small: a host's first rank", "ABAB", case_kill, 10000, OP_SMALL },
        { "kill small: another", "AABB", case_kill, 10000, OP_SMALL },
        { "kill small all_to_all: a host's first rank", "ABAB", case_kill, 10000, OP_A2A },
        { "kill small all_to_all: another", "AABB", case_kill, 10000, OP_A2A },
        { "loop one host", "AAAA", case_loop, 30000, 0 },
        { "cost one host: broadcast", "AAAA", case_cost, 30000, OP_BROADCAST },
        { "cost one host: all_gather", "AAAA", case_cost, 30000, OP_ALL_GATHER },
        { "mismatch one host", "AAAA", case_mismatch, 5000, 0 },
        { "kill one host: all_gather", "AAAA", case_kill, 10000, OP_ALL_GATHER },
        { "kill one host: broadcast", "AAAA", case_kill, 10000, OP_BROADCAST },
        { "kill one host: broadcast's root", "AAAA", case_kill, 10000, OP_BROADCAST_1 },
    };
    int failed = 0, passed = 0, quick = getenv("TEST_COLL_QUICK") && atoi(getenv("TEST_COLL_QUICK")) >= 2;
    test_start();
    UNSET_ENV("DIST_ALGO", "DIST_HOST_ID", "DIST_TRANSPORT", "DIST_INIT_METHOD", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE");
    g_sh = (shared *)mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const kase *kc = &cases[ci];
        double secs = 0;
        if (quick && kc->fn == case_cost) {
            printf("# %s left out (TEST_COLL_QUICK=2, the ThreadSanitizer pass)\n", kc->name);
            continue;
        }
        int bad = run_case(kc, &secs);
        char extra[256] = "";
        if (!bad && kc->fn == case_cost) {
            for (int r = 0; r < N && !bad; r++) {
                if (g_sh->rss0[r] <= 0 || g_sh->rss1[r] - g_sh->rss0[r] >= 8192) {
                    printf("FAIL %s: rank %d's RSS grew from %ld to %ld KiB over the last %d calls\n", kc->name, r, g_sh->rss0[r], g_sh->rss1[r],
                           COST_CALLS(kc->op) * 9 / 10);
                    bad = 1;
                } else if (g_sh->tenth_second[r] > 5 * g_sh->tenth_first[r] + (kc->op == OP_SMALL ? 500 : 0)) {
                    printf("FAIL %s: rank %d: the median call of the quickest tenth of the second half %.0f us, of the first %.0f us\n", kc->name, r,
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
                /* (on one host a broadcast's reader other than rank 2 deals with the root alone: it may complete, right) */
                if (g_sh->rc[r] == DIST_OK && (!one_host() || r == 0 || r == 2)) {
                    printf("FAIL %s: rank %d's call succeeded with rank 2 in another\n", kc->name, r);
                    bad = 1;
                }
                if (named < 0 && strstr(g_sh->msg[r], one_host() ? "called all_gather" : kc->op == OP_SMALL ? "262144" : "algorithm")) named = r;
                if (g_sh->rc[r] == DIST_OK) continue;
                if (!first || g_sh->t_err[r] < first) first = g_sh->t_err[r];
                if (g_sh->t_err[r] > last) last = g_sh->t_err[r];
            }
            if (!bad && named < 0) {
                printf("FAIL %s: no rank's message says the %s differ; rank 0's: %s\n", kc->name, one_host() ? "calls" : "algorithms", g_sh->msg[0]);
                bad = 1;
            }
            if (!bad && secs > scaled_s(5.0 + 5.0) + 2.0) { printf("FAIL %s: the job took %.1f s\n", kc->name, secs); bad = 1; }
            if (!bad) snprintf(extra, sizeof extra, "; rank %d: %.150s", named, g_sh->msg[named]);
        }
        if (!bad && kc->fn == case_kill) {
            for (int r = 0; r < N && !bad; r++) {
                double after;
                if (r == 1) continue;
                after = (double)(g_sh->t_err[r] - g_sh->t_kill) / 1e9;
                if (!g_sh->t_kill || g_sh->rc[r] == DIST_OK || !names_rank(g_sh->msg[r], 1) || after > scaled_s(10.0)) {
                    printf("FAIL %s: rank %d: failed %.2f s after the kill with %s\n", kc->name, r, after, g_sh->msg[r]);
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
