// TIMEOUT: 400
/* test_launches.c - two launches started carelessly on one rendezvous
   point: neither may form a job with the other's ranks.

   Each trial starts two launches, A and B, of 3 ranks each, on the same
   tcp://127.0.0.1:PORT (or the same file:// path), every process after a
   random delay of 0-40 ms so that the arrivals interleave differently
   from trial to trial.  A rank that joins does an all_reduce of its
   launch's value (A: 1, B: 1000): a job made of both launches' ranks shows
   as a sum that is neither 3 nor 3000.  Cases:
     run ids      each launch has its own run id (as distrun and dist_spawn
                  give, or srun's job id): the launch whose rank 0 hosts the
                  store forms, the other's ranks are turned away at once
     run ids + secret   the same with DIST_SECRET set alike on both
     no run ids   neither has one: a rank claimed twice while the job forms
                  fails the job, loudly
     file://      both on one file, with and without run ids
   Every trial must show: no process runs past its deadline; no rank's
   all_reduce sees a mixed sum; a launch either forms whole (all 3 ranks
   succeed with its own sum) or its ranks fail with a sentence (a message
   naming the other launch, the port or the file).  Counts per case: how
   many launches formed, how many failed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define W 3

typedef struct out {
    int done, res, sum;
    long ms;
    char msg[TEST_ERRLEN];
} out_t;

typedef struct shared { out_t o[2][W]; } shared_t;
static shared_t *sh;

typedef struct kase {
    const char *name;
    int file, run_ids, secret, trials;
} kase;

static void rank_main(const kase *k, int trial, int launch, int rank, const char *url) {
    dist_config cfg;
    dist_t *w = NULL;
    char run_id[64];
    out_t *o = &sh->o[launch][rank];
    int32_t v = launch == 0 ? 1 : 1000;
    long t0;
    dist_result r;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    srand((unsigned)(getpid() * 2654435761u) ^ (unsigned)now_ns());
    sleep_ms(rand() % 41);
    memset(&cfg, 0, sizeof cfg);
    snprintf(run_id, sizeof run_id, "test-launches-%d-%d-%c", (int)getppid(), trial, 'A' + launch);
    cfg.init_method = url;
    cfg.world_size = W;
    cfg.rank = rank;
    cfg.timeout_ms = scaled(3000);
    cfg.run_id = k->run_ids ? run_id : "";          /* "": none, whatever the environment says */
    cfg.secret = k->secret ? "the same secret" : "";
    t0 = now_ms();
    r = dist_init(&w, &cfg);
    if (r == DIST_OK) r = dist_all_reduce(w, &v, 1, DIST_INT32, DIST_SUM);
    o->ms = now_ms() - t0;
    o->res = r;
    o->sum = v;
    snprintf(o->msg, sizeof o->msg, "%s", r == DIST_OK ? "" : dist_error_message(w));
    if (w) dist_destroy(w);
    __atomic_store_n(&o->done, 1, __ATOMIC_SEQ_CST);
    _exit(0);
}

/* One trial; returns 0 when it passed, and adds to the counts. */
static int trial(const kase *k, int t, int *formed, int *refused, char *why, size_t cap) {
    char url[128], path[96];
    pid_t pid[2][W];
    int64_t deadline;
    int bad = 0;
    memset(sh, 0, sizeof *sh);
    snprintf(path, sizeof path, "/tmp/dist-test-launches-%d-%d", (int)getpid(), t);
    unlink(path);
    if (k->file) snprintf(url, sizeof url, "file://%s", path);
    else snprintf(url, sizeof url, "tcp://127.0.0.1:%d", free_port(AF_INET));
    for (int l = 0; l < 2; l++)
        for (int r = 0; r < W; r++) {
            pid[l][r] = fork();
            if (pid[l][r] == 0) rank_main(k, t, l, r, url);
        }
    deadline = now_ns() + (int64_t)scaled(15000) * 1000000;
    for (int l = 0; l < 2; l++)
        for (int r = 0; r < W; r++) {
            int st;
            while (waitpid(pid[l][r], &st, WNOHANG) == 0) {
                if (now_ns() > deadline) { kill(pid[l][r], SIGKILL); waitpid(pid[l][r], &st, 0); break; }
                sleep_ms(5);
            }
        }
    unlink(path);
    for (int l = 0; l < 2; l++) {
        int ok_ranks = 0, pure = W * (l == 0 ? 1 : 1000);
        for (int r = 0; r < W; r++) {
            const out_t *o = &sh->o[l][r];
            if (!o->done) { if (!bad) snprintf(why, cap, "launch %c rank %d did not finish in time", 'A' + l, r); bad = 1; continue; }
            if (o->res == DIST_OK && o->sum != pure) {
                if (!bad) snprintf(why, cap, "launch %c rank %d joined a mixed job: the sum is %d, not %d", 'A' + l, r, o->sum, pure);
                bad = 1;
            }
            if (o->res == DIST_OK) ok_ranks++;
            else if (!o->msg[0]) { if (!bad) snprintf(why, cap, "launch %c rank %d failed without a sentence", 'A' + l, r); bad = 1; }
        }
        if (ok_ranks == W) (*formed)++;
        else if (ok_ranks == 0) (*refused)++;
        else if (!bad) { snprintf(why, cap, "launch %c: %d of %d ranks formed a job", 'A' + l, ok_ranks, W); bad = 1; }
    }
    if (bad) {
        for (int l = 0; l < 2; l++)
            for (int r = 0; r < W; r++)
                printf("       launch %c rank %d: %s sum %d after %ld ms %s\n", 'A' + l, r, dist_result_name((dist_result)sh->o[l][r].res),
                       sh->o[l][r].sum, sh->o[l][r].ms, sh->o[l][r].msg);
    }
    return bad;
}

int main(void) {
    static const kase cases[] = {
        { "tcp://, each launch with its own run id", 0, 1, 0, 8 },
        { "tcp://, own run ids, the same DIST_SECRET", 0, 1, 1, 4 },
        { "tcp://, no run ids", 0, 0, 0, 8 },
        { "file://, own run ids", 1, 1, 0, 4 },
        { "file://, no run ids", 1, 0, 0, 4 },
    };
    test_start();
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const kase *k = &cases[c];
        int formed = 0, refused = 0, failed = 0;
        char why[600] = "", name[200];
        double t0 = now_s();
        for (int t = 0; t < k->trials; t++) {
            char w[400];
            if (trial(k, (int)c * 100 + t, &formed, &refused, w, sizeof w)) { if (!failed) snprintf(why, sizeof why, "trial %d: %s", t, w); failed++; }
        }
        snprintf(name, sizeof name, "%s: %d trials of two launches of %d ranks, none mixed, none hung, every failure a sentence",
                 k->name, k->trials, W);
        if (failed) fail(name, "%d trial(s) failed; first: %s", failed, why);
        else ok("%s (launches formed %d, turned away %d; %.1f s)", name, formed, refused, now_s() - t0);
    }
    printf("%s\n", g_failures ? "some checks failed" : "all checks passed");
    return g_failures ? 1 : 0;
}
