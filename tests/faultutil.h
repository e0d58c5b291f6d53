/* tests/faultutil.h - what the fault tests share: test_kill.c (a rank
   dies), test_stall.c (a rank stops) and test_blame.c (does every error
   name the rank at fault?).  In each, the parent forks the ranks of one
   case (a job) at a time or a few side by side; the ranks record what
   they saw in a MAP_SHARED table made before the fork, and the parent
   judges it.

   Include it after dist.h (with DIST_IMPLEMENTATION), the system headers
   and testutil.h.  As there, everything is static and marked unused.

   Records     MSGLEN, the room for a recorded sentence; copy_msg(dst,
               src); call_rec, one call a rank made: call_begin (called,
               t_enter), call_end (t_ret, res); destroy_rec, its
               dist_destroy at the end: destroy_timed(&d, w), or
               destroy_done(&d, t0, res) after several
   Buffers     bufs_t, a rank's input a and output b of a collective:
               alloc_bufs(&bf, BUFS_ layout, count, n, rank, root), filled
               (a with rank + 1, b with -1), free_bufs
   Watching    watch_t and landed(&w): have the first bytes of a transfer
               landed in these blocks?  rwatch_t and receiver_watch (a
               thread: start_receiver_watch): a survivor kills the victim
               once the victim's bytes land in its own output
   Jobs        fault_job, one case's ranks and their table, in g_jobs[]
               (run_pool's slots): job_start(slot, idx, k, n, size, secs,
               rank_main), job_reaped(slot) (the pool's poll, or the end
               of a test's own); fault_test_start() at the start of main,
               run_jobs(&pool, env, maxjobs, argc, argv) later.  (Windows:
               the ranks are the program started again, fork_ranks; only
               the first process clears a job's table.)
   Judging     problems go to a bad_fn (case_bad, or a test's own list):
               judge_destroy(bad, rank, note, &d, required, bound,
               with_res), judge_resumed(bad, s, op, &call, &d, resume_ns,
               bound) for a stopped rank after SIGCONT */
#ifndef DIST_FAULTUTIL_H
#define DIST_FAULTUTIL_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

/* ---- records ------------------------------------------------------------ */

#define MSGLEN 360                /* a recorded sentence, its 0 included */

/* src (NULL: "(null)") into dst, MSGLEN bytes, cut short where longer. */
static inline __attribute__((unused)) void copy_msg(char *dst, const char *src) { snprintf(dst, MSGLEN, "%s", src ? src : "(null)"); }

/* One call a rank made, for the parent to judge: whether it began and
   returned, its result, when (now_ns) and its sentence. */
typedef struct {
    int called, returned, res;
    int64_t t_enter, t_ret;
    char msg[MSGLEN];
} call_rec;

/* The call begins: called, t_enter now. */
static inline __attribute__((unused)) void call_begin(call_rec *c) {
    c->called = 1;
    c->t_enter = now_ns();
}

/* It returned res: t_ret now.  Its sentence and `returned` are the
   caller's to write, once the rest of its record is. */
static inline __attribute__((unused)) void call_end(call_rec *c, int res) {
    c->t_ret = now_ns();
    c->res = res;
}

/* A rank's dist_destroy at the end: whether it got through, what it
   returned, how long it took. */
typedef struct {
    int done, res;
    double secs;
} destroy_rec;

/* Destroying (one communicator or several) began at t0 (now_ns) and
   returned res: recorded. */
static inline __attribute__((unused)) void destroy_done(destroy_rec *d, int64_t t0, int res) {
    d->res = res;
    d->secs = secs_since(t0);
    d->done = 1;
}

/* dist_destroy(w), timed and recorded. */
static inline __attribute__((unused)) void destroy_timed(destroy_rec *d, dist_t *w) {
    int64_t t0 = now_ns();
    destroy_done(d, t0, dist_destroy(w));
}

/* ---- buffers of a collective -------------------------------------------- */

/* What a call needs (alloc_bufs), for count elements a rank (the block of
   one rank, where the call splits or gathers) among n ranks. */
enum {
    BUFS_NONE,                    /* nothing (a barrier, a store call) */
    BUFS_IN_PLACE,                /* a: count (broadcast, reduce, all_reduce, point-to-point) */
    BUFS_REGIONS,                 /* a: n blocks, one from each rank (received in place) */
    BUFS_GATHER,                  /* a: count; b: n blocks on the root */
    BUFS_ALL_GATHER,              /* a: count; b: n blocks */
    BUFS_SCATTER,                 /* a: n blocks on the root; b: count */
    BUFS_REDUCE_SCATTER,          /* a: n blocks; b: count */
    BUFS_ALL_TO_ALL               /* a: n blocks; b: n blocks */
};

/* A rank's input a and output b, float32 (in_place: a is both). */
typedef struct { float *a, *b; size_t alen, blen; int in_place; } bufs_t;

/* Allocates bf by layout (BUFS_...) for count elements (0 counts as 1)
   among n ranks, on rank `rank` (root: the root of a gather or scatter);
   a holds rank + 1, b -1.  0, or -1 when memory ran out. */
static inline __attribute__((unused)) int alloc_bufs(bufs_t *bf, int layout, size_t count, int n, int rank, int root) {
    size_t c = count ? count : 1, nc = c * (size_t)n;
    memset(bf, 0, sizeof *bf);
    switch (layout) {
    case BUFS_IN_PLACE: bf->alen = c; bf->in_place = 1; break;
    case BUFS_REGIONS: bf->alen = nc; bf->in_place = 1; break;
    case BUFS_GATHER: bf->alen = c; bf->blen = rank == root ? nc : 0; break;
    case BUFS_ALL_GATHER: bf->alen = c; bf->blen = nc; break;
    case BUFS_SCATTER: bf->alen = rank == root ? nc : 0; bf->blen = c; break;
    case BUFS_REDUCE_SCATTER: bf->alen = nc; bf->blen = c; break;
    case BUFS_ALL_TO_ALL: bf->alen = nc; bf->blen = nc; break;
    default: break;
    }
    if (bf->alen && (bf->a = (float *)malloc(bf->alen * sizeof(float))) == NULL) return -1;
    if (bf->blen && (bf->b = (float *)malloc(bf->blen * sizeof(float))) == NULL) return -1;
    for (size_t i = 0; i < bf->alen; i++) bf->a[i] = (float)(rank + 1);
    for (size_t i = 0; i < bf->blen; i++) bf->b[i] = -1.0f;
    return 0;
}

static inline __attribute__((unused)) void free_bufs(bufs_t *bf) { free(bf->a); free(bf->b); }

/* ---- watching bytes land ------------------------------------------------ */

/* n blocks of an output, stride elements apart from `at` (block skip
   passed over; -1: none), watched for the first bytes of a transfer to
   land: `points` elements of each, evenly spaced from its start (1: its
   first alone, where the copying begins at the start of a block; more
   where it need not), that hold init until then. */
typedef struct { const volatile float *at; size_t stride; int n, skip; float init; int points; } watch_t;

/* 1 when a watched element no longer holds init. */
static inline __attribute__((unused)) int landed(const watch_t *w) {
    size_t np = w->points > 1 ? (size_t)w->points : 1;
    for (int b = 0; b < w->n; b++)
        for (size_t i = 0; i < np && b != w->skip; i++)
            if (w->at[(size_t)b * w->stride + i * (w->stride / np)] != w->init) return 1;
    return 0;
}

/* A survivor's watch on the victim's bytes landing in its own output (a
   victim that only sends cannot see them land): receiver_watch kills the
   victim (SIGKILL to *pid) once they do, having set *event_ns, the moment
   of the death, to now unless it was set already.  It gives up once
   *event_ns is set, bound_ms after the victim entered its call (*enter_ns,
   0 until then), or once now is past *planned_ns when that is set (the
   victim's own timer ends it; planned_ns NULL: none). */
typedef struct {
    watch_t w;
    int64_t *event_ns;
    const int64_t *enter_ns, *planned_ns;
    const pid_t *pid;
    int bound_ms;
} rwatch_t;
/* (one watch a process: its thread, and stop_receiver_watch's word that
   the rank is done with the watched buffer) */
static pthread_t g_rwatch_th __attribute__((unused));
static int g_rwatch_running __attribute__((unused)), g_rwatch_stop __attribute__((unused));

/* The thread of start_receiver_watch; p: the rwatch_t. */
static inline __attribute__((unused)) void *receiver_watch(void *p) {
    const rwatch_t *rw = (const rwatch_t *)p;
    int64_t t0 = 0;
    while (!__atomic_load_n(rw->event_ns, __ATOMIC_SEQ_CST) && !__atomic_load_n(&g_rwatch_stop, __ATOMIC_SEQ_CST)) {
        int64_t entered = __atomic_load_n(rw->enter_ns, __ATOMIC_SEQ_CST);
        if (entered && !t0) t0 = now_ns();
        if (t0 && secs_since(t0) * 1000 > rw->bound_ms) break;
        if (rw->planned_ns) {
            int64_t planned = __atomic_load_n(rw->planned_ns, __ATOMIC_SEQ_CST);
            if (planned && now_ns() > planned) break;        /* the victim's timer did it */
        }
        if (entered && landed(&rw->w)) {
            int64_t expect = 0;
            if (__atomic_compare_exchange_n(rw->event_ns, &expect, now_ns(), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                kill(__atomic_load_n(rw->pid, __ATOMIC_SEQ_CST), SIGKILL);
            break;
        }
        sleep_us(20);
    }
    return NULL;
}

/* receiver_watch(rw) on a thread (none where one cannot be made: the
   victim's own bound ends it then); rw must outlive it.  The rank calls
   stop_receiver_watch before it frees the watched buffer: the watch may
   be between its last look at event_ns and a read of the buffer when the
   call returns (test_blame's K7 once freed 32 MiB there, and the watch's
   next read was a SIGSEGV). */
static inline __attribute__((unused)) void start_receiver_watch(rwatch_t *rw) {
    g_rwatch_stop = 0;
    g_rwatch_running = pthread_create(&g_rwatch_th, NULL, receiver_watch, rw) == 0;
}
static inline __attribute__((unused)) void stop_receiver_watch(void) {
    if (!g_rwatch_running) return;
    __atomic_store_n(&g_rwatch_stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(g_rwatch_th, NULL);
    g_rwatch_running = 0;
}

/* ---- jobs (the parent) -------------------------------------------------- */

#define FAULT_MAXR 8              /* ranks in a job, at most */
#define FAULT_MAXJOBS 3           /* jobs side by side, at most */

typedef struct fault_job fault_job;

/* What each rank of a job runs, in the child (j->sh is its table): its
   exit status. */
typedef int (*job_rank_fn)(const fault_job *j, int rank, int port, int lfd);

/* One case's ranks, forked by the parent, and the table they share. */
struct fault_job {
    int idx, n;                   /* the case (its index) and its ranks */
    const void *k;                /* the case */
    void *sh;                     /* the table (MAP_SHARED, made before the fork), shsize bytes */
    size_t shsize;
    job_rank_fn rank_main;
    pid_t pid[FAULT_MAXR];
    int st[FAULT_MAXR], reaped[FAULT_MAXR];  /* wait statuses, reap_poll's marks */
    int64_t t0, deadline;         /* started; what still runs at the deadline is killed */
    int hung;                     /* something was */
    int phase;                    /* the test's own: how far the case has got */
    int64_t t_mark;               /* the test's own: a moment it keeps */
};

static fault_job g_jobs[FAULT_MAXJOBS] __attribute__((unused));  /* run_pool's slots */

/* A rank of a job (start_ranks): its rank_main. */
static inline __attribute__((unused)) int job_rank_entry(int rank, int port, int lfd, void *arg) {
    const fault_job *j = (const fault_job *)arg;
    return j->rank_main(j, rank, port, lfd);
}

/* Starts case idx (k, with n ranks) in the slot: a zeroed table of
   shsize bytes, t0 now and the deadline secs later (scaled), then the
   ranks (start_ranks, backlog 64), each running rank_main(j, rank, port,
   lfd).  0, or -1 (reported) when the table or the listening socket
   cannot be made. */
static inline __attribute__((unused)) int job_start(int slot, int idx, const void *k, int n, size_t shsize, double secs,
                                                    job_rank_fn rank_main) {
    fault_job *j = &g_jobs[slot];
    memset(j, 0, sizeof *j);
    if (n > FAULT_MAXR) { fprintf(stderr, "a job of %d ranks: at most %d\n", n, FAULT_MAXR); return -1; }
    j->idx = idx;
    j->k = k;
    j->n = n;
    j->shsize = shsize;
    j->rank_main = rank_main;
    j->sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (j->sh == MAP_FAILED) { perror("mmap"); return -1; }
    /* (Windows: a rank runs main again, up to its own job's start, and
       opens the tables the parent made: not cleared again, since ranks of
       this job and the ones before may be writing in them) */
    if (first_process()) memset(j->sh, 0, shsize);
    j->t0 = now_ns();
    j->deadline = j->t0 + (int64_t)(scaled_s(secs) * 1e9);
    /* the parent closes the store's socket before the next job forks: its
       ranks must not hold it */
    if (start_ranks(n, j->pid, j->st, j->reaped, 64, job_rank_entry, j) != 0) {
        perror("listening socket");
        munmap(j->sh, shsize);
        return -1;
    }
    return 0;
}

/* Reaps what of the slot's job ended (reap_poll; hung when something was
   killed at the deadline): 1 once all of it has.  The pool's poll, where
   the parent has nothing else to do. */
static inline __attribute__((unused)) int job_reaped(int slot) {
    fault_job *j = &g_jobs[slot];
    int left = reap_poll(j->n, j->pid, j->st, j->reaped, j->deadline);
    for (int r = 0; r < j->n; r++) if (j->reaped[r] == 2) j->hung = 1;
    return left == 0;
}

/* The start of a fault test's main(): test_start(), the launcher's
   variables and DIST_ALGO unset (a case sets it for its ranks), SIGPIPE
   ignored (where there is one). */
static inline __attribute__((unused)) void fault_test_start(void) {
    test_start();
    UNSET_ENV(LAUNCHER_ENV, "DIST_ALGO");
#ifndef _WIN32
    signal(SIGPIPE, SIG_IGN);
#endif
}

/* run_pool(pool) on g_jobs, with up to the number in environment variable
   env (1 to maxjobs; maxjobs by default) at once and, where argv[1] is
   given, only the cases whose name contains it (pool's maxjobs and filter
   are set here).  0, or -1 when a start failed. */
static inline __attribute__((unused)) int run_jobs(const job_pool *pool, const char *env, int maxjobs, int argc, char **argv) {
    job_pool p = *pool;
    if (maxjobs > FAULT_MAXJOBS) maxjobs = FAULT_MAXJOBS;
    p.maxjobs = env_int(env, 1, maxjobs, maxjobs);
    p.filter = argc > 1 ? argv[1] : NULL;
    return run_pool(&p);
}

/* ---- judging ------------------------------------------------------------ */

/* Rank r's dist_destroy (note: after "rank R", e.g. " (resumed)"): bad()
   "never got through dist_destroy" where it did not and had to
   (required), or "dist_destroy took S s" past bound seconds, with
   " (returned RESULT)" when with_res. */
static inline __attribute__((unused)) void judge_destroy(bad_fn bad, int r, const char *note, const destroy_rec *d, int required,
                                                         double bound, int with_res) {
    if (!d->done) {
        if (required) bad("rank %d%s never got through dist_destroy", r, note);
    } else if (d->secs > bound) {
        if (with_res) bad("rank %d%s: dist_destroy took %.2f s (returned %s)", r, note, d->secs, dist_result_name((dist_result)d->res));
        else bad("rank %d%s: dist_destroy took %.2f s", r, note, d->secs);
    }
}

/* Rank s, stopped and then resumed by SIGCONT at resume_ns: its call c (op,
   the operation's name) must return within bound seconds of it, and then
   get through dist_destroy (d) within bound; bad() says what did not. */
static inline __attribute__((unused)) void judge_resumed(bad_fn bad, int s, const char *op, const call_rec *c, const destroy_rec *d,
                                                         int64_t resume_ns, double bound) {
    double took = c->returned ? (double)(c->t_ret - resume_ns) / 1e9 : -1;
    if (!c->returned) bad("rank %d (resumed): its %s never returned", s, op);
    else if (took > bound) bad("rank %d (resumed): its %s returned %.2f s after SIGCONT", s, op, took);
    else judge_destroy(bad, s, " (resumed)", d, 1, bound, 0);
}

#endif /* DIST_FAULTUTIL_H */
