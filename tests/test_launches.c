// TIMEOUT: 400
// WINDOWS: yes
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
   many launches formed, how many failed.  (Windows: the processes are
   this program started again, fork_ranks; the file is under \tmp of the
   current drive, Wine's /tmp, or else the current directory.) */
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
#ifndef _WIN32
#  include <sys/prctl.h>
#endif
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

/* The rendezvous file of trial t (file://), made by the parent (its pid)
   before the fork; on Windows each rank works it out again, from the
   test's first process. */
static void trial_path(int t, char *path, size_t cap) {
#ifdef _WIN32
    /* file:// takes an absolute path that starts with "/": on the current
       drive (Wine's Z: is the Unix root, where /tmp is) */
    DWORD a = GetFileAttributesA("\\tmp");
    if (a != INVALID_FILE_ATTRIBUTES && (a & FILE_ATTRIBUTE_DIRECTORY)) {
        snprintf(path, cap, "/tmp/dist-test-launches-%d-%d", (int)getppid(), t);
    } else {            /* no \tmp: the current directory, its drive left out */
        char cwd[MAX_PATH];
        DWORD n = GetCurrentDirectoryA(sizeof cwd, cwd);
        const char *p = n > 2 && cwd[1] == ':' ? cwd + 2 : cwd;
        snprintf(path, cap, "%s%sdist-test-launches-%d-%d", p, p[0] && p[strlen(p) - 1] == '\\' ? "" : "/", (int)getppid(), t);
        for (char *q = path; *q; q++) if (*q == '\\') *q = '/';
    }
#else
    snprintf(path, cap, "/tmp/dist-test-launches-%d-%d", (int)getpid(), t);
#endif
}

/* What each of a trial's 6 processes gets: the case, the trial and its
   file (the url is made from them, or from the port fork_ranks hands
   down). */
typedef struct trial_arg { const kase *k; int t; char path[96]; } trial_arg;

/* Process i of a trial (fork_ranks): rank i % W of launch i / W. */
static int rank_main(int i, int port, int lfd, void *arg) {
    const trial_arg *ta = (const trial_arg *)arg;
    const kase *k = ta->k;
    int launch = i / W, rank = i % W;
    dist_config cfg;
    dist_t *w = NULL;
    char run_id[64], url[128];
    out_t *o = &sh->o[launch][rank];
    int32_t v = launch == 0 ? 1 : 1000;
    long t0;
    dist_result r;
    (void)lfd;
#ifndef _WIN32
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    if (k->file) snprintf(url, sizeof url, "file://%s", ta->path);
    else snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    srand((unsigned)(getpid() * 2654435761u) ^ (unsigned)now_ns());
    sleep_ms(rand() % 41);
    memset(&cfg, 0, sizeof cfg);
    snprintf(run_id, sizeof run_id, "test-launches-%d-%d-%c", (int)getppid(), ta->t, 'A' + launch);
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
    fflush(NULL);
    _exit(0);
}

/* One trial; returns 0 when it passed, and adds to the counts.  (On
   Windows its processes are this program started again, which runs main
   up to this trial's fork_ranks: the earlier trials start nothing there,
   and only the first process clears the table, removes files and
   judges.) */
static int trial(const kase *k, int t, int *formed, int *refused, char *why, size_t cap) {
    pid_t pid[2 * W];
    int st[2 * W], reaped[2 * W];
    int bad = 0, port = 0;
    trial_arg ta;
    const char *path = ta.path;
    ta.k = k;
    ta.t = t;
    trial_path(t, ta.path, sizeof ta.path);
    if (first_process()) {
        memset(sh, 0, sizeof *sh);
        unlink(path);
    }
    if (!k->file) port = free_port(AF_INET);
    fork_ranks(2 * W, pid, port, -1, rank_main, &ta);
    for (int i = 0; i < 2 * W; i++) {
        reaped[i] = pid[i] < 0;
        if (pid[i] < 0) st[i] = -1;
    }
    reap_all(2 * W, pid, st, reaped, now_ns() + (int64_t)scaled(15000) * 1000000);
    if (!first_process()) return 0;
    unlink(path);
    for (int i = 0; i < 2 * W; i++)
        if (pid[i] < 0 && !bad) { snprintf(why, cap, "launch %c rank %d: could not start its process", 'A' + i / W, i % W); bad = 1; }
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
