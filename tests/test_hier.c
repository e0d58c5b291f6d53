// TIMEOUT: 300
// WINDOWS: no, it forks each rank with its own DIST_HOST_ID (the library code is the same there)
/* test_hier.c - the node map and the hierarchical collectives, with ranks
   placed on "hosts" in any order.

   Ranks are forks of this process; each sets DIST_HOST_ID to its host's
   name before dist_init (tcp:// to rank 0's store on loopback), so ranks
   with different names count as different hosts and talk over TCP, and
   ranks with the same name share memory, as on real hosts.  Layouts
   (host of rank 0, 1, ...):
       2x2        A A B B        2x2 by blocks
       2x2-cyc    A B A B        interleaved (srun/mpirun's cyclic placement)
       2x3-cyc    A B A B A B
       3+1        A A A B        uneven
       2+3+1      A B C B A B    three hosts, uneven, interleaved
       1x4        A A A A        one host only
       3x1        A B C          one rank per host
   Each layout runs twice: DIST_ALGO unset (auto: the hierarchical forms for
   large messages when some host has several ranks) and DIST_ALGO=hier
   (every size, every layout, one host included).  In each job, every rank:
     node map   dist_node_count, dist_local_rank, dist_local_size and
                dist_node(w, r) for every r, against the layout (hosts
                numbered in order of their lowest rank, computed here);
     every collective  collcheck_run(full): every collective x dtype x op,
                counts 0, 1, 7, 1000 and a large one each, roots 0 and n-1,
                in place, two async in flight, against a serial reference;
     large      all_reduce (sum, 1M+3 float32 integers; max of int64),
                reduce_scatter and all_gather (100003 int32 per rank),
                broadcast and reduce (1M+5 float32, root n-1) exact against
                the reference: odd counts make every block uneven;
     same bits  all_reduce of 300001, 1001 and 3 random (non-integer)
                float32 twice: every rank's result hashes the same
                (all_gather of the hashes), and the second run gives the
                first run's bits;
     barrier    each rank 20 ms late in turn: no rank leaves before the
                late one came (times on the one clock, all_gathered);
     groups     a group of every rank but rank 1 (where there are 3 or
                more): its node map from the layout, and collcheck_run on it.
   Under TEST_COLL_QUICK=2 (make tsan: ThreadSanitizer looks for races
   between a rank's threads, which every layout exercises alike) three jobs
   run: 2x2-cyc auto, 2+3+1 hier and 3+1 hier; the others are listed as
   left out.
   Cost: about 60 s on 2 cores (14 jobs of 3-6 processes); under TSan
   about 20 s. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "collcheck.h"

typedef struct layout { const char *name, *hosts; } layout;
static const layout LAYOUTS[] = {
    { "2x2", "AABB" }, { "2x2-cyc", "ABAB" }, { "2x3-cyc", "ABABAB" }, { "3+1", "AAAB" },
    { "2+3+1", "ABCBAB" }, { "1x4", "AAAA" }, { "3x1", "ABC" },
};
#define NLAYOUTS ((int)(sizeof LAYOUTS / sizeof LAYOUTS[0]))

static const layout *g_lay;
static int g_n;

/* The map as the layout gives it: node of each rank (numbered by lowest
   rank), local rank and local size, for the ranks in `ranks` (n of them). */
static void expect_map(const char *hosts, const int *ranks, int n, int *node, int *lrank, int *lsize, int *nodes) {
    char seen[16];
    int ns = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < ns && seen[k] != hosts[ranks[i]]) k++;
        if (k == ns) seen[ns++] = hosts[ranks[i]];
        node[i] = k;
    }
    for (int i = 0; i < n; i++) {
        lrank[i] = 0; lsize[i] = 0;
        for (int k = 0; k < n; k++)
            if (node[k] == node[i]) { lsize[i]++; if (k < i) lrank[i]++; }
    }
    *nodes = ns;
}

#define RFAIL(...) do { printf("FAIL %s %s rank %d: ", g_lay->name, algo, rank); printf(__VA_ARGS__); printf("\n"); return 1; } while (0)

static int check_map(dist_t *c, const int *ranks, int n, int rank, const char *algo, const char *what) {
    int node[16], lr[16], ls[16], nodes, me = dist_rank(c);
    expect_map(g_lay->hosts, ranks, n, node, lr, ls, &nodes);
    if (me < 0 || me >= n) RFAIL("%s: dist_rank %d of %d", what, me, n);
    if (dist_node_count(c) != nodes) RFAIL("%s: dist_node_count %d, want %d", what, dist_node_count(c), nodes);
    if (dist_local_rank(c) != lr[me] || dist_local_size(c) != ls[me])
        RFAIL("%s: local rank %d of %d, want %d of %d", what, dist_local_rank(c), dist_local_size(c), lr[me], ls[me]);
    for (int i = 0; i < n; i++)
        if (dist_node(c, i) != node[i]) RFAIL("%s: dist_node(%d) = %d, want %d", what, i, dist_node(c, i), node[i]);
    if (dist_node(c, n) != -1 || dist_node(c, -1) != -1) RFAIL("%s: dist_node of a non-member is not -1", what);
    return 0;
}

static float ival(uint64_t seed, int r, size_t i) { return (float)((int)(collcheck_mix64(seed ^ ((uint64_t)r << 40) ^ i) % 17) - 8); }

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int large_checks(dist_t *w, int rank, const char *algo) {
    int n = dist_world_size(w);
    size_t N = 1048579, B = 100003, C = 1048581;
    float *a = (float *)malloc(sizeof(float) * C), *want = (float *)malloc(sizeof(float) * C);
    int32_t *in = (int32_t *)malloc(sizeof(int32_t) * B * (size_t)n), *out = (int32_t *)malloc(sizeof(int32_t) * B * (size_t)n);
    int64_t *m = (int64_t *)malloc(sizeof(int64_t) * 4099);
    int bad = 0;
    if (!a || !want || !in || !out || !m) RFAIL("out of memory");
    /* all_reduce sum of integers in floats: exact in any order */
    for (size_t i = 0; i < N; i++) {
        a[i] = ival(1, rank, i);
        want[i] = 0;
        for (int r = 0; r < n; r++) want[i] += ival(1, r, i);
    }
    if (dist_all_reduce(w, a, N, DIST_FLOAT32, DIST_SUM) != DIST_OK) RFAIL("all_reduce: %s", dist_error_message(w));
    for (size_t i = 0; i < N && !bad; i++)
        if (a[i] != want[i]) { bad = 1; RFAIL("all_reduce sum: element %zu is %g, want %g", i, a[i], want[i]); }
    for (size_t i = 0; i < 4099; i++) m[i] = (int64_t)collcheck_mix64(((uint64_t)rank << 32) ^ i);
    if (dist_all_reduce(w, m, 4099, DIST_INT64, DIST_MAX) != DIST_OK) RFAIL("all_reduce max: %s", dist_error_message(w));
    for (size_t i = 0; i < 4099; i++) {
        int64_t x = INT64_MIN;
        for (int r = 0; r < n; r++) { int64_t v = (int64_t)collcheck_mix64(((uint64_t)r << 32) ^ i); if (v > x) x = v; }
        if (m[i] != x) RFAIL("all_reduce int64 max: element %zu differs", i);
    }
    /* reduce_scatter: rank r gets block r summed over the ranks */
    for (size_t i = 0; i < B * (size_t)n; i++) in[i] = (int32_t)(collcheck_mix64((uint64_t)rank * 7919 + i) & 0xffff);
    if (dist_reduce_scatter(w, in, out, B, DIST_INT32, DIST_SUM) != DIST_OK) RFAIL("reduce_scatter: %s", dist_error_message(w));
    for (size_t i = 0; i < B; i++) {
        int32_t x = 0;
        for (int r = 0; r < n; r++) x += (int32_t)(collcheck_mix64((uint64_t)r * 7919 + (size_t)rank * B + i) & 0xffff);
        if (out[i] != x) RFAIL("reduce_scatter: element %zu is %d, want %d", i, out[i], x);
    }
    /* all_gather: block r is rank r's */
    for (size_t i = 0; i < B; i++) in[i] = (int32_t)collcheck_mix64((uint64_t)rank * 31 + i);
    memset(out, 0x5a, sizeof(int32_t) * B * (size_t)n);
    if (dist_all_gather(w, in, out, B, DIST_INT32) != DIST_OK) RFAIL("all_gather: %s", dist_error_message(w));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < B; i++)
            if (out[(size_t)r * B + i] != (int32_t)collcheck_mix64((uint64_t)r * 31 + i)) RFAIL("all_gather: block %d element %zu differs", r, i);
    /* broadcast from the last rank */
    for (size_t i = 0; i < C; i++) a[i] = rank == n - 1 ? ival(5, 0, i) : -1.0f;
    if (dist_broadcast(w, a, C, DIST_FLOAT32, n - 1) != DIST_OK) RFAIL("broadcast: %s", dist_error_message(w));
    for (size_t i = 0; i < C; i++)
        if (a[i] != ival(5, 0, i)) RFAIL("broadcast: element %zu is %g, want %g", i, a[i], ival(5, 0, i));
    /* reduce to the last rank; the others' buffers stay */
    for (size_t i = 0; i < C; i++) a[i] = ival(6, rank, i);
    if (dist_reduce(w, a, C, DIST_FLOAT32, DIST_SUM, n - 1) != DIST_OK) RFAIL("reduce: %s", dist_error_message(w));
    for (size_t i = 0; i < C; i++) {
        float x = 0;
        for (int r = 0; r < n; r++) x += ival(6, r, i);
        if (a[i] != (rank == n - 1 ? x : ival(6, rank, i))) RFAIL("reduce: element %zu is %g, want %g", i, a[i], rank == n - 1 ? x : ival(6, rank, i));
    }
    /* the same bits on every rank, run after run (large: the rails; 1001
       and 3 floats: through each host's slots) */
    for (int sz = 0; sz < 3; sz++) {
        size_t F = sz == 0 ? 300001 : sz == 1 ? 1001 : 3;
        uint64_t h[2], all[32];
        for (int run = 0; run < 2; run++) {
            for (size_t i = 0; i < F; i++) a[i] = (float)((double)(collcheck_mix64(((uint64_t)rank << 36) ^ i) >> 11) / 9007199254740992.0 - 0.5) * 3.3f;
            if (dist_all_reduce(w, a, F, DIST_FLOAT32, DIST_SUM) != DIST_OK) RFAIL("all_reduce (random floats): %s", dist_error_message(w));
            h[run] = hash_bytes(a, F * sizeof(float));
        }
        if (h[0] != h[1]) RFAIL("all_reduce of the same random floats twice gave different bits");
        if (dist_all_gather(w, h, all, 1, DIST_INT64) != DIST_OK) RFAIL("all_gather of hashes: %s", dist_error_message(w));
        for (int r = 0; r < n; r++)
            if (all[r] != h[0]) RFAIL("rank %d's all_reduce result of %zu floats has other bits than rank %d's", r, F, rank);
    }
    /* barrier: nobody leaves before the last has come (each rank late in
       turn, by 20 ms; the entries and exits on the machine's one clock) */
    for (int late = 0; late < n; late++) {
        int64_t t[2], all[64];
        if (rank == late) sleep_ms(20);
        t[0] = now_ns();
        if (dist_barrier(w) != DIST_OK) RFAIL("barrier: %s", dist_error_message(w));
        t[1] = now_ns();
        if (dist_all_gather(w, t, all, 2, DIST_INT64) != DIST_OK) RFAIL("all_gather of barrier times: %s", dist_error_message(w));
        for (int r = 0; r < n; r++)
            if (all[2 * r + 1] < all[2 * late]) RFAIL("barrier: rank %d left %lld ns before rank %d (late) came", r,
                                                      (long long)(all[2 * late] - all[2 * r + 1]), late);
    }
    free(a); free(want); free(in); free(out); free(m);
    return 0;
}

static int rank_main(int rank, const char *algo, int port, int lfd) {
    dist_config cfg;
    dist_t *w = NULL;
    char url[64], host[8];
    int ranks[16];
    collcheck_t cc;
    snprintf(host, sizeof host, "%c", g_lay->hosts[rank]);
    setenv("DIST_HOST_ID", host, 1);
    if (algo[0] == 'h') setenv("DIST_ALGO", "hier", 1); else unsetenv("DIST_ALGO");
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    memset(&cfg, 0, sizeof cfg);
    cfg.init_method = url; cfg.rank = rank; cfg.world_size = g_n; cfg.timeout_ms = scaled(30000);
    if (rank == 0) cfg.store_listen_fd = lfd + 1; else close(lfd);
    if (dist_init(&w, &cfg) != DIST_OK) RFAIL("dist_init: %s", dist_error_message(NULL));
    for (int i = 0; i < g_n; i++) ranks[i] = i;
    if (check_map(w, ranks, g_n, rank, algo, "world")) return 1;
    collcheck_init(&cc, w, 77, g_lay->name);
    if (collcheck_run(&cc, 1)) RFAIL("%s", cc.msg);
    if (large_checks(w, rank, algo)) return 1;
    if (g_n >= 3) {
        dist_t *g = NULL;
        int k = 0;
        for (int i = 0; i < g_n; i++) if (i != 1) ranks[k++] = i;
        if (dist_new_group(w, k, ranks, &g) != DIST_OK) RFAIL("new_group: %s", dist_error_message(w));
        if (g) {
            if (check_map(g, ranks, k, rank, algo, "group")) return 1;
            collcheck_init(&cc, g, 78, g_lay->name);
            if (collcheck_run(&cc, 0)) RFAIL("group: %s", cc.msg);
            if (large_checks(g, dist_rank(g), algo)) return 1;
            dist_destroy(g);
        }
    }
    if (dist_destroy(w) != DIST_OK) RFAIL("destroy: %s", dist_error_message(NULL));
    return 0;
}

static int run_job(const layout *lay, const char *algo) {
    pid_t pids[16];
    int port = 0, lfd, failed = 0, left;
    int64_t t0 = now_ns(), deadline;
    g_lay = lay;
    g_n = (int)strlen(lay->hosts);
    if ((lfd = listen_loopback(64, &port)) < 0) { printf("FAIL %s %s: no loopback socket: %s\n", lay->name, algo, strerror(errno)); return 1; }
    fflush(stdout);
    for (int r = 0; r < g_n; r++) {
        if ((pids[r] = fork()) == 0) {
            rank_alarm((unsigned)(scaled(120000) / 1000));
            _exit(rank_main(r, algo, port, lfd));
        }
    }
    close(lfd);
    deadline = now_ns() + (int64_t)scaled(150000) * 1000000;
    for (left = g_n; left > 0;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            left--;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                int r = 0;
                while (r < g_n && pids[r] != p) r++;
                if (!failed) printf("FAIL %s %s: rank %d %s %d\n", lay->name, algo, r, WIFEXITED(st) ? "exited with" : "died of signal",
                                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed = 1;
            }
            continue;
        }
        if (now_ns() > deadline) {
            printf("FAIL %s %s: not done in %.0f s\n", lay->name, algo, secs_since(t0));
            for (int r = 0; r < g_n; r++) kill(pids[r], SIGKILL);
            while (waitpid(-1, &st, 0) > 0) {}
            return 1;
        }
        sleep_ms(5);
    }
    if (!failed) printf("ok   %s %s: node map, every collective, large counts, the same bits (%d ranks, %.1f s)\n", lay->name, algo, g_n, secs_since(t0));
    return failed;
}

int main(void) {
    int failed = 0;
    test_start();
    int quick = getenv("TEST_COLL_QUICK") && atoi(getenv("TEST_COLL_QUICK")) >= 2, ran = 0;
    UNSET_ENV("DIST_ALGO", "DIST_HOST_ID", "DIST_TRANSPORT", "DIST_INIT_METHOD", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE");
    for (int i = 0; i < NLAYOUTS; i++) {
        for (int h = 0; h < 2; h++) {
            const char *algo = h ? "hier" : "auto";
            static const char *const tsan_jobs = " 2x2-cyc auto | 2+3+1 hier | 3+1 hier |";
            char job[40];
            snprintf(job, sizeof job, " %s %s |", LAYOUTS[i].name, algo);
            if (quick && !strstr(tsan_jobs, job)) {
                printf("# %s %s left out (TEST_COLL_QUICK=2, the ThreadSanitizer pass)\n", LAYOUTS[i].name, algo);
                continue;
            }
            failed += run_job(&LAYOUTS[i], algo);
            ran++;
        }
    }
    printf("%d passed, %d failed\n", ran - failed, failed);
    return failed ? 1 : 0;
}
