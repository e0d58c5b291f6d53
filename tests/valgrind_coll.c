/* tests/valgrind_coll.c - every collective, small, for `make valgrind`.

   tests/test_collectives.c checks far more (world sizes up to 8, counts of
   1M+3, every DIST_ALGO) and takes ~40 s natively: hours under valgrind.
   This program is its reduced twin for memcheck, not a replacement: it is
   not named test_*.c, so the suite does not run it.

   What: world sizes 2, 3 and 4 (dist_spawn) with the algorithm the library
   picks, then all_reduce, reduce and broadcast with DIST_ALGO=ring (n=3),
   tree (n=4) and halving (n=4).  For each: every collective (broadcast,
   reduce, all_reduce, gather, all_gather, scatter, reduce_scatter,
   all_to_all, barrier) x every dtype (int8, uint8, int32, int64, float16,
   bfloat16, float32, float64) x every op where the collective takes one
   (sum, product, max, min, avg) x counts 1, 7 and 1000, roots 0 and n-1
   alternating; count 0 with NULL buffers; large counts once (all_reduce
   float32 sum of 65537, broadcast of 1 MiB, all_gather of 100000 int32);
   in-place all_reduce, all_gather (send == recv + rank x count) and
   reduce_scatter; two all_reduce_async in flight at once.  Every rank
   computes every result itself (a serial reference over every rank's
   input, generated from (seed, rank, index)); inputs are small integers
   (products: +-1, +-2), so every reduction order gives the same bits.
   Receive buffers are pre-filled and checked whole; reduce must leave the
   non-roots' buffers alone.  The checks themselves are tests/collcheck.h
   (shared with tests/mixed_rank.c, a rank of a Linux + Windows job); this
   file runs them in the jobs above and reports.

   Output: one line per job; exit 0 only if every check passed.
   Environment: DIST_TRANSPORT (auto, tcp, mixed) as for any job;
   DIST_TIMEOUT_SCALE stretches the communicator's timeout. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"
#include "collcheck.h"   /* the checks themselves, shared with tests/mixed_rank.c */

#define MAXR 4

typedef struct {
    atomic_int claimed[MAXR];
    char msg[MAXR][768];
    long checks[MAXR];
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(MAXR, &sh->claimed[rank], sh->msg[rank])

typedef struct { int n; const char *algo; int full; } job_t;

/* collcheck's failures, into the rank's record in the shared page. */
static void on_fail(void *user, int rank, int line, const char *msg) {
    (void)user;
    fail_at(rank, line, "%s", msg);
}

static int rank_main(dist_t *w, void *arg) {
    const job_t *j = (const job_t *)arg;
    collcheck_t c;
    int rank = dist_rank(w), n = dist_world_size(w), bad;
    char where[64];
    snprintf(where, sizeof where, "n=%d %s:", n, j->algo);
    collcheck_init(&c, w, 0x5eed0000ull + (uint64_t)j->n * 131 + (j->full ? 0 : 7), where);
    c.on_fail = on_fail;
    if (n != j->n || rank >= MAXR) return fail_at(rank, __LINE__, "world size %d, expected %d", n, j->n);
    bad = collcheck_run(&c, j->full);
    sh->checks[rank] = c.checks;
    return bad;
}

int main(void) {
    static const job_t jobs[] = {
        { 2, "auto", 1 }, { 3, "auto", 1 }, { 4, "auto", 1 },
        { 3, "ring", 0 }, { 4, "tree", 0 }, { 4, "halving", 0 },
    };
    int failed = 0;
    double t_all;
    test_start();
    UNSET_ENV(LAUNCHER_ENV, "DIST_ALGO");
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    t_all = now_s();
    for (size_t k = 0; k < sizeof jobs / sizeof jobs[0]; k++) {
        const job_t *j = &jobs[k];
        dist_config cfg;
        double t0 = now_s();
        int rc, bad;
        long checks = 0;
        memset(sh, 0, sizeof *sh);
        memset(&cfg, 0, sizeof cfg);
        cfg.timeout_ms = scaled(30000);
        if (strcmp(j->algo, "auto") == 0) unsetenv("DIST_ALGO");
        else setenv("DIST_ALGO", j->algo, 1);
        rc = dist_spawn(j->n, rank_main, (void *)j, &cfg);
        unsetenv("DIST_ALGO");
        bad = rc != 0;
        for (int r = 0; r < j->n; r++) { bad |= atomic_load(&sh->claimed[r]) != 0; checks += sh->checks[r]; }
        if (!bad) {
            printf("ok   n=%d %s: %ld checks (%.2f s)\n", j->n, j->algo, checks, now_s() - t0);
            continue;
        }
        failed++;
        printf("FAIL n=%d %s (%.2f s): dist_spawn returned %d%s%s\n", j->n, j->algo, now_s() - t0, rc, rc ? ": " : "",
               rc ? dist_error_message(NULL) : "");
        for (int r = 0; r < j->n; r++)
            if (sh->msg[r][0]) printf("     rank %d: %s\n", r, sh->msg[r]);
    }
    munmap(sh, sizeof *sh);
    printf("%s: %d of %zu jobs failed (%.1f s)\n", failed ? "FAIL" : "PASS", failed, sizeof jobs / sizeof jobs[0], now_s() - t_all);
    return failed ? 1 : 0;
}
