// TIMEOUT: 120
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_abort.c - dist_abort: tearing a communicator down from any thread.

   Every job is forked here (fork + dist_init over tcp://127.0.0.1, rank 0
   on a listening socket made before the fork), so each rank calls
   dist_abort and dist_destroy itself and ends with exit(): LeakSanitizer
   (make sanitize) then checks that abort + destroy reclaimed everything.
   Ranks record what they saw (result, thread's error sentence,
   CLOCK_MONOTONIC times, which every process shares) in a MAP_SHARED
   mapping created before the fork; the parent judges it and prints one
   line per case: "ok   NAME" or "FAIL NAME" and the details.  Every rank
   arms alarm(), so nothing outlives a case.  The communicators' timeout is
   5 s: a call that returns within 0.5 s of the abort (a peer's within
   half the timeout, 2.5 s) returned because of it, not because of the
   timeout.  DIST_TIMEOUT_SCALE multiplies the
   bounds.

   Cases
   1. n=2: rank 0 has four threads blocked in the world: a dist_recv from
      rank 1 (which never sends), a dist_store_wait on a key nobody sets
      (timeout 0: the communicator's), a dist_wait on a DIST_ANY_SOURCE
      dist_irecv, and an 8 MiB dist_send to rank 1 (which never receives
      it; it may also complete before the abort, by buffering).  After
      300 ms rank 0's main thread calls dist_abort(world): dist_abort
      returns DIST_OK at once, each blocked call returns DIST_ERR_ABORTED
      within 0.5 s and its sentence mentions "abort"; later calls (send,
      recv, send to itself, isend, irecv, all_reduce, all_reduce_async,
      barrier, broadcast, store set/get/add, new_group) fail at once with
      DIST_ERR_ABORTED and leave no request or group behind; a second
      dist_abort returns DIST_OK; dist_abort(NULL) is DIST_ERR_INVALID;
      dist_destroy returns (any result) well within the timeout.  Rank 1,
      blocked in a dist_recv from rank 0, fails with DIST_ERR_PEER_LOST
      within 2.5 s of the abort, naming rank 0, and its dist_destroy returns.
   2. n=3: ranks 0 and 1 call dist_all_reduce while rank 2 never joins (it
      waits, then destroys); rank 0 calls dist_abort from a second thread
      after 300 ms.  Rank 0's all_reduce returns DIST_ERR_ABORTED within
      0.5 s ("abort" in its sentence), rank 1's fails with
      DIST_ERR_PEER_LOST naming rank 0 within 2.5 s.  Three ways: 16 int32
      blocking (tree), 1 MiB float32 blocking (the shared-memory algorithm
      under auto, the ring otherwise), and 16 int32 through
      dist_all_reduce_async + dist_wait on both ranks.
   3. n=3, a group {0,1} (rank 2 gets NULL): rank 0 has two threads blocked
      on the group, a dist_barrier (rank 1 never joins it) and a dist_recv
      from group rank 1; rank 0 aborts the WORLD: both return
      DIST_ERR_ABORTED within 0.5 s; later calls on the group (send, recv,
      isend, irecv, all_reduce, barrier, store set, new_group) and on the
      world fail at once with DIST_ERR_ABORTED; dist_abort(group) then
      returns DIST_OK; dist_destroy(group), then dist_destroy(world),
      return without hanging.  Rank 1, blocked in a dist_recv from rank 0
      on the group, fails with DIST_ERR_PEER_LOST naming rank 0 within
      2.5 s.
   4. n=2, nothing pending: after a barrier and an exchange, rank 0 calls
      dist_abort then dist_destroy (prompt; rank 1's pending dist_recv
      fails with DIST_ERR_PEER_LOST naming rank 0); and both ranks abort at
      the same moment, then destroy.  No hang, and under
      -fsanitize=address no leak (the ranks end with exit()). */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MAXR 3
#define NCALLS 4
#define TMO_MS 5000                 /* the communicators' timeout */
#define BLOCK_MS 300                /* how long the victims block before the abort */
#define BIG_BYTES ((size_t)8 << 20)

/* Bounds, in seconds (scaled where used). */
#define ABORTED_WITHIN 0.5          /* a blocked call on the aborting rank */
/* A peer's blocked call: it learns of the abort at once, but one that
   waits on another member fails a grace later (a twentieth of the
   timeout: 250 ms), and its threads' wake-ups take longer under load (10
   busy loops beside the test: 0.44-0.65 s; a make test beside it once
   1.07 s).  Half the timeout still tells the abort from the timeout. */
#define LOST_WITHIN (TMO_MS / 2000.0)
#define AT_ONCE 0.1                 /* a call after the abort */
#define DESTROY_WITHIN 2.5          /* half the timeout: destroy did not wait for it */

/* One call a rank (or one of its threads) was blocked in. */
typedef struct {
    int started;                    /* the thread is about to make the call */
    int done;                       /* it returned */
    int res;                        /* what it returned */
    int64_t t0_ns, t_ns;            /* when it was made, when it returned */
    char msg[400];                  /* the thread's dist_error_message(NULL) */
} call_rec;

typedef struct {
    atomic_int claimed;             /* FAIL: the first failure of this rank */
    char fail[700];
    int finished;                   /* got to the end of its part */
    int destroy_done, destroy_res;
    double destroy_s;
    char destroy_msg[400];
    int ready;                      /* about to block (peers wait for it) */
} rank_rec;

typedef struct {
    int64_t abort_ns, abort_ret_ns; /* around the (first) dist_abort */
    int abort_res;
    int big_send_early;             /* case 1: the 8 MiB send completed before the abort */
    char note[300];
    call_rec c[MAXR][NCALLS];
    rank_rec r[MAXR];
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(MAXR, &sh->r[rank].claimed, sh->r[rank].fail)

/* ---- rank side ------------------------------------------------------------ */

static void rec_begin(call_rec *c) {
    c->t0_ns = now_ns();
    __atomic_store_n(&c->started, 1, __ATOMIC_SEQ_CST);
}

static void rec_end(call_rec *c, dist_result res) {
    c->t_ns = now_ns();
    c->res = res;
    snprintf(c->msg, sizeof c->msg, "%s", dist_error_message(NULL));
    __atomic_store_n(&c->done, 1, __ATOMIC_SEQ_CST);
}

static void record_abort(dist_t *w) {
    sh->abort_ns = now_ns();
    sh->abort_res = dist_abort(w);
    sh->abort_ret_ns = now_ns();
}

/* A call made after the abort must fail at once with DIST_ERR_ABORTED and
   say so. */
static int later_check(int rank, int line, const char *what, dist_result res, int64_t t0) {
    double el = secs_since(t0);
    const char *m = dist_error_message(NULL);
    if (res != DIST_ERR_ABORTED)
        return fail_at(rank, line, "after the abort, %s returned %s (\"%s\"), expected DIST_ERR_ABORTED", what,
                       dist_result_name(res), m);
    if (el > scaled_s(AT_ONCE)) return fail_at(rank, line, "after the abort, %s took %.3f s to fail", what, el);
    if (!strstr(m, "abort")) return fail_at(rank, line, "after the abort, %s failed with \"%s\", which does not mention the abort", what, m);
    return 0;
}
#define LATER(call)                                                                         \
    do {                                                                                    \
        int64_t t_ = now_ns();                                                              \
        dist_result r_ = (call);                                                            \
        if (later_check(rank, __LINE__, #call, r_, t_)) return 1;                           \
    } while (0)

static void record_destroy(int rank, dist_t *d) {
    int64_t t0 = now_ns();
    dist_result res = dist_destroy(d);
    rank_rec *rr = &sh->r[rank];
    rr->destroy_s = secs_since(t0);
    rr->destroy_res = res;
    snprintf(rr->destroy_msg, sizeof rr->destroy_msg, "%s", res == DIST_OK ? "" : dist_error_message(NULL));
    rr->destroy_done = 1;
}

/* The end of a rank's part: dist_destroy(w), recorded; the rank finished.
   Returns 0, the rank function's result. */
static int finish(int rank, dist_t *w) {
    record_destroy(rank, w);
    sh->r[rank].finished = 1;
    return 0;
}

/* Rank 1, blocked in a dist_recv of one int32 from (group) rank 0 on c with
   a tag rank 0 never sends, recorded as c[1][0] (ready first, for rank 0's
   settle).  0, or FAIL when the failed receive wrote into its buffer. */
static int recv_from_0(int rank, dist_t *c, int tag) {
    int32_t x = -1;
    __atomic_store_n(&sh->r[1].ready, 1, __ATOMIC_SEQ_CST);
    rec_begin(&sh->c[1][0]);
    rec_end(&sh->c[1][0], dist_recv(c, &x, 1, DIST_INT32, 0, tag));
    if (x != -1) return FAIL("the failed receive wrote %d into its buffer", x);
    return 0;
}

/* Rank 2, which never joins the call: ready, then it destroys once rank
   1's call has returned (dist_destroy waits for every peer's goodbye:
   before that, rank 1 and rank 2 would wait on each other). */
static int bystander(int rank, dist_t *w) {
    __atomic_store_n(&sh->r[2].ready, 1, __ATOMIC_SEQ_CST);
    if (await_flag(&sh->c[1][0].done, 1, scaled(8000))) return FAIL("rank 1's call never returned");
    return finish(rank, w);
}

/* A thread blocked in one call. */
enum { B_RECV, B_STORE_WAIT, B_IRECV_ANY, B_BIG_SEND, B_ALL_REDUCE, B_BARRIER };
typedef struct {
    dist_t *d;
    int kind, peer, tag;
    void *buf;
    size_t count;
    dist_dtype dtype;
    call_rec *rec;
    pthread_t th;
    int started;
} blocked_t;

static void *blocked_main(void *p) {
    blocked_t *b = (blocked_t *)p;
    dist_result res = DIST_ERR_INVALID;
    const char *keys[1] = { "test_abort/nobody/sets/this" };
    dist_req_t *req = NULL;
    rec_begin(b->rec);
    switch (b->kind) {
    case B_RECV: res = dist_recv(b->d, b->buf, b->count, b->dtype, b->peer, b->tag); break;
    case B_STORE_WAIT: res = dist_store_wait(b->d, keys, 1, 0); break;
    case B_IRECV_ANY:
        res = dist_irecv(b->d, b->buf, b->count, b->dtype, DIST_ANY_SOURCE, b->tag, &req);
        if (res == DIST_OK) res = dist_wait(req);
        else res = DIST_ERR_INVALID;            /* the irecv itself must not fail: judged as wrong */
        break;
    case B_BIG_SEND: res = dist_send(b->d, b->buf, b->count, b->dtype, b->peer, b->tag); break;
    case B_ALL_REDUCE: res = dist_all_reduce(b->d, b->buf, b->count, b->dtype, DIST_SUM); break;
    case B_BARRIER: res = dist_barrier(b->d); break;
    }
    rec_end(b->rec, res);
    return NULL;
}

static int start_blocked(int rank, blocked_t *b) {
    if (pthread_create(&b->th, NULL, blocked_main, b) != 0) return fail_at(rank, __LINE__, "pthread_create failed");
    b->started = 1;
    return 0;
}

/* Waits for the blocked threads to return (bounded); if one does not,
   the rank cannot join it nor destroy the communicator under it: it
   reports and ends at once. */
static void join_blocked(int rank, blocked_t *b, int n) {
    for (int i = 0; i < n; i++) {
        if (!b[i].started) continue;
        if (await_flag(&b[i].rec->done, 1, scaled(3000))) {
            fail_at(rank, __LINE__, "a blocked call (thread %d) had not returned 3 s after the abort", i);
            fflush(NULL);
            _exit(1);
        }
        pthread_join(b[i].th, NULL);
    }
}

/* Waits until every thread is about to make its call, and the peers that
   take part are ready, then gives them BLOCK_MS to be inside it. */
static int settle(int rank, blocked_t *b, int n, const int *peers, int npeers) {
    for (int i = 0; i < n; i++)
        if (await_flag(&b[i].rec->started, 1, scaled(5000))) return fail_at(rank, __LINE__, "thread %d never started", i);
    for (int i = 0; i < npeers; i++)
        if (await_flag(&sh->r[peers[i]].ready, 1, scaled(5000))) return fail_at(rank, __LINE__, "rank %d never got ready", peers[i]);
    sleep_ms(BLOCK_MS);
    return 0;
}

/* Starts the n blocked threads and settles them (settle); a rank that
   cannot reports and ends at once. */
static void start_and_settle(int rank, blocked_t *b, int n, const int *peers, int npeers) {
    for (int i = 0; i < n; i++)
        if (start_blocked(rank, &b[i])) { fflush(NULL); _exit(1); }
    if (settle(rank, b, n, peers, npeers)) { fflush(NULL); _exit(1); }
}

/* ---- the launcher ---------------------------------------------------------- */

typedef int (*rank_fn)(int rank, dist_t *w, const void *arg);

typedef struct { int n; rank_fn fn; const void *arg; } job_arg;

/* A rank of the job (fork_ranks): dist_init over tcp://127.0.0.1, then
   fn. */
static int child(int rank, int port, int lfd, void *p) {
    const job_arg *a = (const job_arg *)p;
    char url[64];
    dist_t *w = NULL;
    dist_config cfg;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, a->n, rank, TMO_MS, lfd);
    rank_alarm((unsigned)(25 * g_scale + 0.5));
    dist_result res = dist_init(&w, &cfg);
    if (res != DIST_OK) return fail_at(rank, __LINE__, "dist_init: %s: %s", dist_result_name(res), dist_error_message(NULL));
    return a->fn(rank, w, a->arg);
}

/* Runs fn on n forked ranks; problems with the processes go to case_bad.
   Returns the seconds it took. */
static double run_job(int n, rank_fn fn, const void *arg) {
    int64_t t0 = now_ns();
    job_arg a = { n, fn, arg };
    pid_t pid[MAXR];
    int st[MAXR], reaped[MAXR];
    if (start_ranks(n, pid, st, reaped, 16, child, &a) != 0) {
        case_bad("cannot make a listening socket: %s", strerror(errno));
        return 0;
    }
    for (int r = 0; r < n; r++)
        if (pid[r] < 0) case_bad("fork failed: %s", strerror(errno));
    reap_all(n, pid, st, reaped, now_ns() + (int64_t)(scaled_s(40) * 1e9));
    for (int r = 0; r < n; r++) {
        if (pid[r] <= 0) continue;
        if (reaped[r] == 2) case_bad("rank %d still running after %.0f s: killed", r, scaled_s(40));
        if (st[r] == -1) case_bad("waitpid for rank %d failed", r);
        else case_bad_status(r, st[r], "");
    }
    for (int r = 0; r < n; r++)
        if (sh->r[r].fail[0]) case_bad("rank %d: %s", r, sh->r[r].fail);
    return secs_since(t0);
}

/* ---- parent side ------------------------------------------------------------ */

static void begin(const char *name) {
    case_begin(name);
    memset(sh, 0, sizeof *sh);
}

/* A call the case judges: made, returned, after the abort happened; else
   case_bad and 0. */
static int call_returned(const char *who, const call_rec *c) {
    if (!c->started) { case_bad("%s: never made", who); return 0; }
    if (!c->done) { case_bad("%s: never returned", who); return 0; }
    if (!sh->abort_ns) { case_bad("%s returned %s, but the abort never happened (\"%s\")", who, dist_result_name((dist_result)c->res), c->msg); return 0; }
    return 1;
}

/* A call on the aborting rank: DIST_ERR_ABORTED, within the bound after
   the abort, not before, and "abort" in its sentence.  Returns how long
   after the abort it returned (s), or -1. */
static double judge_aborted(const char *who, const call_rec *c) {
    double after = (double)(c->t_ns - sh->abort_ns) / 1e9;
    if (!call_returned(who, c)) return -1;
    if (after < 0) {
        case_bad("%s returned %s %.3f s BEFORE the abort (after %.3f s): \"%s\"", who, dist_result_name((dist_result)c->res), -after,
                 (double)(c->t_ns - c->t0_ns) / 1e9, c->msg);
        return -1;
    }
    if (c->res != DIST_ERR_ABORTED)
        case_bad("%s returned %s %.3f s after the abort (\"%s\"), expected DIST_ERR_ABORTED", who, dist_result_name((dist_result)c->res), after, c->msg);
    else if (after > scaled_s(ABORTED_WITHIN))
        case_bad("%s returned DIST_ERR_ABORTED %.3f s after the abort (bound %.2f s)", who, after, scaled_s(ABORTED_WITHIN));
    if (c->res == DIST_ERR_ABORTED && !strstr(c->msg, "abort"))
        case_bad("%s: its sentence \"%s\" does not mention the abort", who, c->msg);
    return after;
}

/* A peer's call: DIST_ERR_PEER_LOST naming rank 0, within the bound. */
static double judge_lost(const char *who, const call_rec *c) {
    double after = (double)(c->t_ns - sh->abort_ns) / 1e9;
    if (!call_returned(who, c)) return -1;
    if (after < 0) {
        case_bad("%s returned %s %.3f s BEFORE rank 0's abort: \"%s\"", who, dist_result_name((dist_result)c->res), -after, c->msg);
        return -1;
    }
    if (c->res != DIST_ERR_PEER_LOST)
        case_bad("%s returned %s %.3f s after rank 0's abort (\"%s\"), expected DIST_ERR_PEER_LOST", who,
                 dist_result_name((dist_result)c->res), after, c->msg);
    else if (after > scaled_s(LOST_WITHIN))
        case_bad("%s returned DIST_ERR_PEER_LOST %.3f s after rank 0's abort (bound %.2f s)", who, after, scaled_s(LOST_WITHIN));
    if (c->res == DIST_ERR_PEER_LOST && !strstr(c->msg, "rank 0"))
        case_bad("%s: its sentence \"%s\" does not name rank 0", who, c->msg);
    return after;
}

static void judge_abort_call(void) {
    double took = (double)(sh->abort_ret_ns - sh->abort_ns) / 1e9;
    if (!sh->abort_ns) return;
    if (sh->abort_res != DIST_OK) case_bad("dist_abort returned %s", dist_result_name((dist_result)sh->abort_res));
    if (took > scaled_s(AT_ONCE)) case_bad("dist_abort itself took %.3f s", took);
}

static void judge_destroy(int rank, int must_finish) {
    rank_rec *rr = &sh->r[rank];
    if (!rr->destroy_done) {
        if (must_finish && !rr->fail[0]) case_bad("rank %d never got through dist_destroy", rank);
        return;
    }
    if (rr->destroy_s > scaled_s(DESTROY_WITHIN))
        case_bad("rank %d: dist_destroy took %.2f s (returned %s%s%s)", rank, rr->destroy_s, dist_result_name((dist_result)rr->destroy_res),
                 rr->destroy_msg[0] ? ": " : "", rr->destroy_msg);
}

static void destroy_note(char *out, size_t cap, int n) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "dist_destroy:");
    for (int r = 0; r < n && k < cap; r++)
        if (sh->r[r].destroy_done)
            k += (size_t)snprintf(out + k, cap - k, " r%d %.0f ms %s", r, sh->r[r].destroy_s * 1e3,
                                  sh->r[r].destroy_res == DIST_OK ? "OK" : dist_result_name((dist_result)sh->r[r].destroy_res));
}

/* Each of the n ranks got through dist_destroy in time and finished; what
   dist_destroy took on each into dn (destroy_note). */
static void judge_ranks(int n, char *dn, size_t cap) {
    for (int r = 0; r < n; r++) {
        judge_destroy(r, 1);
        if (!sh->r[r].finished && !sh->r[r].fail[0]) case_bad("rank %d did not finish", r);
    }
    destroy_note(dn, cap, n);
}

/* ===========================================================================
   1. Four threads of rank 0 blocked in the world; rank 0 aborts it.
   =========================================================================== */
static int fn_threads(int rank, dist_t *w, const void *arg) {
    (void)arg;
    if (rank == 1) {
        if (recv_from_0(rank, w, 7)) return 1;      /* rank 0 never sends tag 7 */
        return finish(rank, w);
    }
    /* rank 0 */
    int32_t rbuf = -1, abuf = -1, one = 1, sbuf[4] = { 1, 2, 3, 4 };
    uint8_t *big = calloc(BIG_BYTES, 1);
    if (!big) return FAIL("out of memory");
    blocked_t b[4];
    memset(b, 0, sizeof b);
    b[0] = (blocked_t){ w, B_RECV, 1, 5, &rbuf, 1, DIST_INT32, &sh->c[0][0], 0, 0 };
    b[1] = (blocked_t){ w, B_STORE_WAIT, 0, 0, NULL, 0, DIST_INT32, &sh->c[0][1], 0, 0 };
    b[2] = (blocked_t){ w, B_IRECV_ANY, 0, 6, &abuf, 1, DIST_INT32, &sh->c[0][2], 0, 0 };
    b[3] = (blocked_t){ w, B_BIG_SEND, 1, 9, big, BIG_BYTES, DIST_UINT8, &sh->c[0][3], 0, 0 };
    const int peers[1] = { 1 };
    start_and_settle(rank, b, 4, peers, 1);
    sh->big_send_early = __atomic_load_n(&sh->c[0][3].done, __ATOMIC_SEQ_CST);
    record_abort(w);
    join_blocked(rank, b, 4);
    free(big);
    if (rbuf != -1 || abuf != -1) return FAIL("a failed receive wrote into its buffer (%d, %d)", rbuf, abuf);

    /* later calls, on every path into the library */
    dist_req_t *req = (dist_req_t *)&req;        /* not NULL: the call must clear it */
    dist_t *g = (dist_t *)&g;
    const int members[2] = { 0, 1 };
    const char *keys[1] = { "test_abort/k" };
    size_t len = 0;
    int64_t sum = 0;
    char val[8];
    LATER(dist_send(w, &one, 1, DIST_INT32, 1, 1));
    LATER(dist_recv(w, &rbuf, 1, DIST_INT32, 1, 1));
    LATER(dist_send(w, &one, 1, DIST_INT32, 0, 1));              /* to itself */
    LATER(dist_recv(w, &rbuf, 1, DIST_INT32, DIST_ANY_SOURCE, 1));
    LATER(dist_isend(w, &one, 1, DIST_INT32, 1, 1, &req));
    if (req) return FAIL("dist_isend after the abort left *req = %p", (void *)req);
    req = (dist_req_t *)&req;
    LATER(dist_irecv(w, &rbuf, 1, DIST_INT32, DIST_ANY_SOURCE, 1, &req));
    if (req) return FAIL("dist_irecv after the abort left *req = %p", (void *)req);
    LATER(dist_all_reduce(w, sbuf, 4, DIST_INT32, DIST_SUM));
    req = (dist_req_t *)&req;
    LATER(dist_all_reduce_async(w, sbuf, 4, DIST_INT32, DIST_SUM, &req));
    if (req) return FAIL("dist_all_reduce_async after the abort left *req = %p", (void *)req);
    LATER(dist_barrier(w));
    LATER(dist_broadcast(w, sbuf, 4, DIST_INT32, 0));
    LATER(dist_store_set(w, "test_abort/k", "v", 1));
    LATER(dist_store_get(w, "test_abort/k", val, sizeof val, &len));
    LATER(dist_store_add(w, "test_abort/n", 1, &sum));
    LATER(dist_store_wait(w, keys, 1, 0));
    LATER(dist_new_group(w, 2, members, &g));
    if (g) return FAIL("dist_new_group after the abort left *group = %p", (void *)g);
    if (sbuf[0] != 1 || sbuf[3] != 4) return FAIL("a failed collective changed the buffer: %d %d", sbuf[0], sbuf[3]);
    dist_result res = dist_abort(w);
    if (res != DIST_OK) return FAIL("a second dist_abort returned %s: %s", dist_result_name(res), dist_error_message(NULL));
    res = dist_abort(NULL);
    if (res != DIST_ERR_INVALID) return FAIL("dist_abort(NULL) returned %s", dist_result_name(res));
    LATER(dist_send(w, &one, 1, DIST_INT32, 1, 1));              /* still aborted */
    return finish(rank, w);
}

static void case_threads(void) {
    begin("n=2 rank 0 blocked in dist_recv, dist_store_wait, dist_irecv(ANY)+dist_wait and an 8 MiB dist_send on four threads; "
          "its main thread aborts the world: ABORTED within 0.5 s, later calls fail at once, rank 1's recv PEER_LOST within 2.5 s");
    double el = run_job(2, fn_threads, NULL);
    judge_abort_call();
    static const char *const what[4] = { "rank 0's dist_recv from rank 1", "rank 0's dist_store_wait",
                                         "rank 0's dist_irecv(DIST_ANY_SOURCE) + dist_wait", "rank 0's 8 MiB dist_send to rank 1" };
    double worst = 0, a;
    for (int i = 0; i < 3; i++)
        if ((a = judge_aborted(what[i], &sh->c[0][i])) > worst) worst = a;
    /* the big send may complete by buffering before the abort; if it did
       not, it is one of the blocked calls */
    const call_rec *bs = &sh->c[0][3];
    if (sh->big_send_early || (bs->done && bs->t_ns < sh->abort_ns)) {
        if (bs->res != DIST_OK) case_bad("%s returned %s before the abort: \"%s\"", what[3], dist_result_name((dist_result)bs->res), bs->msg);
    } else if ((a = judge_aborted(what[3], bs)) > worst) {
        worst = a;
    }
    double lost = judge_lost("rank 1's dist_recv from rank 0", &sh->c[1][0]);
    char extra[600], dn[200];
    judge_ranks(2, dn, sizeof dn);
    snprintf(extra, sizeof extra, "abort took %.2f ms; slowest ABORTED %.0f ms after it; rank 1 PEER_LOST after %.0f ms; 8 MiB send %s; %s",
             (double)(sh->abort_ret_ns - sh->abort_ns) / 1e6, worst * 1e3, lost * 1e3,
             sh->big_send_early || (bs->done && bs->t_ns < sh->abort_ns) ? "completed before the abort" : "was blocked", dn);
    case_end(el, extra);
}

/* ===========================================================================
   2. A collective rank 2 never joins; rank 0 aborts from a second thread.
   =========================================================================== */
typedef struct { size_t count; int async; } coll_arg;

static void *aborter_main(void *p) {
    sleep_ms(BLOCK_MS);
    record_abort((dist_t *)p);
    return NULL;
}

/* dist_all_reduce_async + dist_wait as one call record. */
static dist_result async_all_reduce(dist_t *w, float *buf, size_t count, int rank) {
    dist_req_t *req = NULL;
    dist_result res = dist_all_reduce_async(w, buf, count, DIST_FLOAT32, DIST_SUM, &req);
    if (res != DIST_OK) {
        fail_at(rank, __LINE__, "dist_all_reduce_async itself returned %s: %s", dist_result_name(res), dist_error_message(NULL));
        return res;
    }
    return dist_wait(req);
}

static int fn_coll(int rank, dist_t *w, const void *arg) {
    const coll_arg *a = (const coll_arg *)arg;
    if (rank == 2) return bystander(rank, w);   /* never joins; destroys once rank 1 is done */
    float *buf = malloc(a->count * sizeof *buf);
    if (!buf) return FAIL("out of memory");
    for (size_t i = 0; i < a->count; i++) buf[i] = (float)(rank + 1);
    if (rank == 1) {
        __atomic_store_n(&sh->r[1].ready, 1, __ATOMIC_SEQ_CST);
        rec_begin(&sh->c[1][0]);
        rec_end(&sh->c[1][0], a->async ? async_all_reduce(w, buf, a->count, rank)
                                       : dist_all_reduce(w, buf, a->count, DIST_FLOAT32, DIST_SUM));
        free(buf);
        return finish(rank, w);
    }
    /* rank 0 */
    const int peers[2] = { 1, 2 };
    if (!a->async) {
        blocked_t b;
        memset(&b, 0, sizeof b);
        b = (blocked_t){ w, B_ALL_REDUCE, 0, 0, buf, a->count, DIST_FLOAT32, &sh->c[0][0], 0, 0 };
        start_and_settle(rank, &b, 1, peers, 2);
        record_abort(w);
        join_blocked(rank, &b, 1);
    } else {
        pthread_t th;
        for (int i = 0; i < 2; i++)
            if (await_flag(&sh->r[peers[i]].ready, 1, scaled(5000))) return FAIL("rank %d never got ready", peers[i]);
        if (pthread_create(&th, NULL, aborter_main, w) != 0) return FAIL("pthread_create failed");
        rec_begin(&sh->c[0][0]);
        rec_end(&sh->c[0][0], async_all_reduce(w, buf, a->count, rank));
        pthread_join(th, NULL);
    }
    free(buf);
    float x = 1;
    int rank_ = rank;
    (void)rank_;
    LATER(dist_all_reduce(w, &x, 1, DIST_FLOAT32, DIST_SUM));
    LATER(dist_barrier(w));
    return finish(rank, w);
}

static void case_coll(size_t count, int async) {
    char name[300];
    snprintf(name, sizeof name, "n=3 %s of %zu float32 on ranks 0 and 1, rank 2 never joins; rank 0 aborts from %s after 300 ms: "
             "rank 0 ABORTED within 0.5 s, rank 1 PEER_LOST (rank 0) within 2.5 s",
             async ? "dist_all_reduce_async + dist_wait" : "blocking dist_all_reduce", count,
             async ? "a second thread while its main thread waits" : "its main thread while a second thread is in the collective");
    begin(name);
    coll_arg a = { count, async };
    double el = run_job(3, fn_coll, &a);
    judge_abort_call();
    double ab = judge_aborted("rank 0's all_reduce", &sh->c[0][0]);
    double lost = judge_lost("rank 1's all_reduce", &sh->c[1][0]);
    char extra[400], dn[200];
    judge_ranks(3, dn, sizeof dn);
    snprintf(extra, sizeof extra, "ABORTED after %.0f ms, PEER_LOST after %.0f ms; %s", ab * 1e3, lost * 1e3, dn);
    case_end(el, extra);
}

/* ===========================================================================
   3. A group {0,1}; rank 0 aborts the world.
   =========================================================================== */
static int fn_group(int rank, dist_t *w, const void *arg) {
    (void)arg;
    const int members[2] = { 0, 1 };
    dist_t *g = NULL;
    OK(dist_new_group(w, 2, members, &g));
    if ((rank == 2) != (g == NULL)) return FAIL("dist_new_group gave rank %d %s", rank, g ? "a group" : "NULL");
    if (rank == 2) return bystander(rank, w);
    if (dist_rank(g) != rank || dist_world_size(g) != 2) return FAIL("group rank %d of %d", dist_rank(g), dist_world_size(g));
    if (rank == 1) {
        if (recv_from_0(rank, g, 4)) return 1;      /* group rank 0 never sends */
        int64_t t0 = now_ns();
        dist_result res = dist_destroy(g);
        if (res != DIST_OK) return FAIL("dist_destroy(group) returned %s: %s", dist_result_name(res), dist_error_message(NULL));
        if (secs_since(t0) > scaled_s(DESTROY_WITHIN)) return FAIL("dist_destroy(group) took %.2f s", secs_since(t0));
        return finish(rank, w);
    }
    /* rank 0 */
    int32_t rbuf = -1, one = 1, v[2] = { 1, 2 };
    blocked_t b[2];
    memset(b, 0, sizeof b);
    b[0] = (blocked_t){ g, B_BARRIER, 0, 0, NULL, 0, DIST_INT32, &sh->c[0][0], 0, 0 };
    b[1] = (blocked_t){ g, B_RECV, 1, 3, &rbuf, 1, DIST_INT32, &sh->c[0][1], 0, 0 };
    const int peers[2] = { 1, 2 };
    start_and_settle(rank, b, 2, peers, 2);
    record_abort(w);
    join_blocked(rank, b, 2);
    if (rbuf != -1) return FAIL("the failed group receive wrote %d into its buffer", rbuf);
    dist_req_t *req = (dist_req_t *)&req;
    dist_t *gg = (dist_t *)&gg;
    const int sub[1] = { 0 };
    LATER(dist_send(g, &one, 1, DIST_INT32, 1, 1));
    LATER(dist_recv(g, &rbuf, 1, DIST_INT32, 1, 1));
    LATER(dist_isend(g, &one, 1, DIST_INT32, 1, 1, &req));
    if (req) return FAIL("dist_isend on the group after the abort left *req = %p", (void *)req);
    req = (dist_req_t *)&req;
    LATER(dist_irecv(g, &rbuf, 1, DIST_INT32, DIST_ANY_SOURCE, 1, &req));
    if (req) return FAIL("dist_irecv on the group after the abort left *req = %p", (void *)req);
    LATER(dist_all_reduce(g, v, 2, DIST_INT32, DIST_SUM));
    LATER(dist_barrier(g));
    LATER(dist_store_set(g, "test_abort/g", "v", 1));
    LATER(dist_new_group(g, 1, sub, &gg));
    if (gg) return FAIL("dist_new_group on the group after the abort left *group = %p", (void *)gg);
    LATER(dist_send(w, &one, 1, DIST_INT32, 2, 1));
    LATER(dist_barrier(w));
    dist_result res = dist_abort(g);
    if (res != DIST_OK) return FAIL("dist_abort(group) after dist_abort(world) returned %s: %s", dist_result_name(res), dist_error_message(NULL));
    int64_t t0 = now_ns();
    res = dist_destroy(g);
    double gs = secs_since(t0);
    snprintf(sh->note, sizeof sh->note, "dist_destroy(group) %.1f ms %s", gs * 1e3, dist_result_name(res));
    if (gs > scaled_s(DESTROY_WITHIN)) return FAIL("dist_destroy(group) took %.2f s", gs);
    return finish(rank, w);
}

static void case_group(void) {
    begin("n=3 group {0,1}: rank 0 blocked in a group barrier and a group recv; abort on the world: both ABORTED within 0.5 s, "
          "later group and world calls fail at once, rank 1's group recv PEER_LOST within 2.5 s, group then world destroyed");
    double el = run_job(3, fn_group, NULL);
    judge_abort_call();
    double a0 = judge_aborted("rank 0's dist_barrier on the group", &sh->c[0][0]);
    double a1 = judge_aborted("rank 0's dist_recv on the group", &sh->c[0][1]);
    double lost = judge_lost("rank 1's dist_recv on the group", &sh->c[1][0]);
    char extra[800], dn[200];
    judge_ranks(3, dn, sizeof dn);
    snprintf(extra, sizeof extra, "ABORTED after %.0f/%.0f ms, PEER_LOST after %.0f ms; %s; %s", a0 * 1e3, a1 * 1e3, lost * 1e3, sh->note, dn);
    case_end(el, extra);
}

/* ===========================================================================
   4. Abort with nothing pending, then destroy.
   =========================================================================== */
static int fn_idle(int rank, dist_t *w, const void *arg) {
    const int both = *(const int *)arg;
    int32_t x = rank, y = -1;
    OK(dist_barrier(w));
    OK(dist_send(w, &x, 1, DIST_INT32, 1 - rank, 1));
    OK(dist_recv(w, &y, 1, DIST_INT32, 1 - rank, 1));
    if (y != 1 - rank) return FAIL("exchange got %d", y);
    OK(dist_barrier(w));
    if (both || rank == 0) {
        int64_t t0 = now_ns();
        if (rank == 0) sh->abort_ns = t0;
        dist_result res = dist_abort(w);
        if (res != DIST_OK) return FAIL("dist_abort returned %s: %s", dist_result_name(res), dist_error_message(NULL));
        if (secs_since(t0) > scaled_s(AT_ONCE)) return FAIL("dist_abort took %.3f s", secs_since(t0));
        LATER(dist_send(w, &x, 1, DIST_INT32, 1 - rank, 2));
        return finish(rank, w);
    }
    /* rank 1 of the one-sided form: waits for rank 0 */
    rec_begin(&sh->c[1][0]);
    rec_end(&sh->c[1][0], dist_recv(w, &y, 1, DIST_INT32, 0, 3));
    return finish(rank, w);
}

static void case_idle(int both) {
    begin(both ? "n=2 both ranks call dist_abort at the same moment with nothing pending, then dist_destroy: no hang, no leak"
               : "n=2 rank 0 calls dist_abort with nothing pending, then dist_destroy: no hang, no leak; rank 1's recv PEER_LOST");
    double el = run_job(2, fn_idle, &both);
    double lost = -1;
    if (!both) lost = judge_lost("rank 1's dist_recv from rank 0", &sh->c[1][0]);
    char extra[300], dn[200];
    judge_ranks(2, dn, sizeof dn);
    if (both) snprintf(extra, sizeof extra, "%s", dn);
    else snprintf(extra, sizeof extra, "rank 1 PEER_LOST after %.0f ms; %s", lost * 1e3, dn);
    case_end(el, extra);
}

int main(void) {
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
#ifndef _WIN32
    signal(SIGPIPE, SIG_IGN);
#endif
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    const char *tr = getenv("DIST_TRANSPORT");
    printf("# transport %s, timeout scale %.1f\n", tr && tr[0] ? tr : "(default)", g_scale);
    int64_t t0 = now_ns();

    case_threads();
    case_coll(16, 0);
    case_coll((size_t)1 << 18, 0);
    case_coll(16, 1);
    case_group();
    case_idle(0);
    case_idle(1);

    munmap(sh, sizeof *sh);
    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
