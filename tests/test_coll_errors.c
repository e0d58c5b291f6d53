// TIMEOUT: 180
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_coll_errors.c - collectives whose ranks disagree, bad arguments,
   a rank that dies, a rank that leaves early.

   Mismatched descriptors (one 4-rank job per collective, timeout 10 s, so
   a hang shows as slowness): rank 2 passes a different count (999 against
   1000 x float32), a different dtype (float64), a different op (max
   against sum), a different root (1 against 0), or calls a different
   collective; for rooted collectives the root also passes a different
   count; all_reduce_async with a count mismatch fails through dist_wait;
   in broadcast, all_reduce and all_gather rank 2 also passes 8192 where
   the others pass 1000 (over shared memory theirs go through slots and
   rank 2's through messages: it must still fail at once, not time out).
   Ranks that must fail, per case (n = 4, root 0, odd rank 2; the
   algorithms move data from the root outwards in broadcast/scatter and
   towards it in reduce/gather):
     all_reduce, all_gather, reduce_scatter, all_to_all, barrier: every
         rank (each result depends on every rank's input)
     broadcast, scatter: the odd rank when it is not the root (it receives
         from someone who disagrees with it); every non-root when the root
         is the odd one.  The root only sends: it may succeed.
     reduce, gather: the root (its result needs the odd rank's part).
         Non-roots that only send may succeed.
     a different collective: the union of what the two collectives need
         (rank 2 always, as it receives in the collective it called).  Rank
         2 calls all_reduce (broadcast where the others call all_reduce);
         against gather also scatter, where neither side ever sends the
         other a byte (gather's root and scatter's non-root only receive).
   A rank that must fail has to return DIST_ERR_MISMATCH within 3 s (x the
   sanitizer scale, at most 6 s), with dist_error_message naming the
   collective it called, its sequence number ("all_reduce #7:") and both
   sides' values ("999 x float32" and "1000 x float32").  Any other rank
   either succeeds or fails the same way.  Every buffer has guard bytes on
   both sides, which must survive; after each case (the ranks meet in
   shared memory, not through the library) an all_reduce must give the
   right answer on every rank.

   Invalid arguments (root out of range, unknown dtype or op, a NULL buffer
   with count > 0): DIST_ERR_INVALID on the bad rank, quickly; the ranks
   that need it fail quickly too (they are told), naming the bad rank.

   A rank killed (SIGKILL) before an all_reduce: the others fail with
   DIST_ERR_PEER_LOST within 2 s (timeout 20 s), naming the collective;
   dist_spawn returns 137.

   A rank that did its part of a collective and left (dist_destroy): a
   later start of the same collective on the other ranks, whose data has
   arrived, must still succeed.

   DIST_ALGO set differently on two ranks: both fail with
   DIST_ERR_MISMATCH naming both algorithms; DIST_ALGO=bogus fails
   dist_init.

   One line per case; exit 0 only if every check passed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef _WIN32
#  include <arpa/inet.h>
#  include <netinet/in.h>
#  include <sys/prctl.h>
#  include <sys/socket.h>
#  include <sys/wait.h>
#endif
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define NR 4
#define ODD 2
#define COUNT 1000
#define COUNT_BIG 8192      /* 32 KiB: past the small collectives' slots, where COUNT goes through them */
#define GUARD 64
#define MAXCASES 16

static int quick_ms(void) { int q = scaled(3000); return q > 6000 ? 6000 : q; }

/* ---- collectives by index ---------------------------------------------------- */

enum { C_BCAST, C_REDUCE, C_ALLRED, C_GATHER, C_ALLGATHER, C_SCATTER, C_REDSCAT, C_ALLTOALL, C_BARRIER, C_N };
static const char *cname[C_N] = { "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter", "reduce_scatter", "all_to_all", "barrier" };
static const int has_op[C_N] = { 0, 1, 1, 0, 0, 0, 1, 0, 0 };
static const int has_root[C_N] = { 1, 1, 0, 1, 0, 1, 0, 0, 0 };

/* Elements of the send and receive buffers (n ranks, block `count`). */
static size_t send_elems(int c, size_t count, int n) {
    switch (c) {
    case C_SCATTER: case C_REDSCAT: case C_ALLTOALL: return count * (size_t)n;
    case C_BARRIER: return 0;
    default: return count;
    }
}
static size_t recv_elems(int c, size_t count, int n) {
    switch (c) {
    case C_GATHER: case C_ALLGATHER: case C_ALLTOALL: return count * (size_t)n;
    case C_BCAST: case C_REDUCE: case C_ALLRED: case C_BARRIER: return 0;   /* in place in send */
    default: return count;
    }
}

static dist_result call(dist_t *w, int c, void *send, void *recv, size_t count, dist_dtype t, dist_op op, int root) {
    switch (c) {
    case C_BCAST: return dist_broadcast(w, send, count, t, root);
    case C_REDUCE: return dist_reduce(w, send, count, t, op, root);
    case C_ALLRED: return dist_all_reduce(w, send, count, t, op);
    case C_GATHER: return dist_gather(w, send, recv, count, t, root);
    case C_ALLGATHER: return dist_all_gather(w, send, recv, count, t);
    case C_SCATTER: return dist_scatter(w, send, recv, count, t, root);
    case C_REDSCAT: return dist_reduce_scatter(w, send, recv, count, t, op);
    case C_ALLTOALL: return dist_all_to_all(w, send, recv, count, t);
    default: return dist_barrier(w);
    }
}

static uint8_t *galloc(size_t bytes) {
    uint8_t *p = (uint8_t *)malloc(bytes + 2 * GUARD);
    if (!p) exit(70);
    memset(p, 0xA5, GUARD);
    for (size_t i = 0; i < bytes; i++) p[GUARD + i] = (uint8_t)(i * 7 + 1);   /* small finite values in any dtype */
    memset(p + GUARD + bytes, 0xA5, GUARD);
    return p + GUARD;
}
static int gok(const uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < GUARD; i++) if (p[-1 - (ptrdiff_t)i] != 0xA5 || p[bytes + i] != 0xA5) return 0;
    return 1;
}
static void gfree(uint8_t *p) { free(p - GUARD); }

/* ---- cases ------------------------------------------------------------------------ */

enum { K_COUNT, K_COUNT_AT_ROOT, K_DTYPE, K_OP, K_ROOT, K_OTHER, K_COUNT_ASYNC, K_COUNT_BIG,
       /* invalid arguments */
       K_BAD_ROOT, K_BAD_DTYPE, K_BAD_OP, K_NULL_BUF, K_NULL_RECV_ROOT, K_ALL_BAD_ROOT };

typedef struct ecase {
    int coll;        /* what the ranks (other than the odd one) call */
    int kind;
    int odd;         /* the rank that differs */
    int other;       /* K_OTHER: what the odd rank calls instead */
} ecase_t;

/* What the odd rank calls instead, for K_OTHER (and gather also gets
   scatter: then neither side ever sends the other anything). */
static int other_coll(int c) { return c == C_ALLRED ? C_BCAST : C_ALLRED; }

/* The arguments rank `me` passes in case `e`. */
typedef struct args { int coll; size_t count; dist_dtype dtype; dist_op op; int root; int null_send, null_recv, async; } args_t;

static args_t args_of(const ecase_t *e, int me) {
    args_t a;
    a.coll = e->coll; a.count = COUNT; a.dtype = DIST_FLOAT32; a.op = DIST_SUM; a.root = 0; a.null_send = a.null_recv = 0;
    a.async = e->kind == K_COUNT_ASYNC;
    if (e->kind == K_ALL_BAD_ROOT) { a.root = NR + 3; return a; }
    if (me != e->odd) return a;
    switch (e->kind) {
    case K_COUNT: case K_COUNT_AT_ROOT: case K_COUNT_ASYNC: a.count = COUNT - 1; break;
    case K_COUNT_BIG: a.count = COUNT_BIG; break;
    case K_DTYPE: a.dtype = DIST_FLOAT64; break;
    case K_OP: a.op = DIST_MAX; break;
    case K_ROOT: a.root = 1; break;
    case K_OTHER: a.coll = e->other; break;
    case K_BAD_ROOT: a.root = NR + 3; break;
    case K_BAD_DTYPE: a.dtype = (dist_dtype)42; break;
    case K_BAD_OP: a.op = (dist_op)9; break;
    case K_NULL_BUF: a.null_send = 1; break;
    case K_NULL_RECV_ROOT: a.null_recv = 1; break;
    default: break;
    }
    return a;
}

static int ncases_of(int c, ecase_t *out) {
    int k = 0;
    if (c == C_BARRIER) { out[k++] = (ecase_t){ c, K_OTHER, ODD, other_coll(c) }; return k; }
    out[k++] = (ecase_t){ c, K_COUNT, ODD, 0 };
    if (has_root[c]) out[k++] = (ecase_t){ c, K_COUNT_AT_ROOT, 0, 0 };
    out[k++] = (ecase_t){ c, K_DTYPE, ODD, 0 };
    if (has_op[c]) out[k++] = (ecase_t){ c, K_OP, ODD, 0 };
    if (has_root[c]) out[k++] = (ecase_t){ c, K_ROOT, ODD, 0 };
    out[k++] = (ecase_t){ c, K_OTHER, ODD, other_coll(c) };
    if (c == C_GATHER) out[k++] = (ecase_t){ c, K_OTHER, ODD, C_SCATTER };
    if (c == C_ALLRED) out[k++] = (ecase_t){ c, K_COUNT_ASYNC, ODD, 0 };
    if (c == C_BCAST || c == C_ALLRED || c == C_ALLGATHER) out[k++] = (ecase_t){ c, K_COUNT_BIG, ODD, 0 };
    return k;
}

static int invalid_cases(ecase_t *out) {
    int k = 0;
    out[k++] = (ecase_t){ C_GATHER, K_BAD_ROOT, ODD, 0 };
    out[k++] = (ecase_t){ C_ALLRED, K_BAD_DTYPE, ODD, 0 };
    out[k++] = (ecase_t){ C_ALLRED, K_BAD_OP, ODD, 0 };
    out[k++] = (ecase_t){ C_ALLRED, K_NULL_BUF, ODD, 0 };
    out[k++] = (ecase_t){ C_REDSCAT, K_NULL_BUF, ODD, 0 };
    out[k++] = (ecase_t){ C_GATHER, K_NULL_RECV_ROOT, 0, 0 };
    out[k++] = (ecase_t){ C_BCAST, K_ALL_BAD_ROOT, -1, 0 };
    return k;
}

/* Which ranks must fail (bit mask), as documented at the top. */
static int must_fail(const ecase_t *e) {
    int all = (1 << NR) - 1, odd = e->odd >= 0 ? 1 << e->odd : 0, nonroots = all & ~1;
    int c = e->coll;
    switch (e->kind) {
    case K_ALL_BAD_ROOT: return all;
    case K_BAD_ROOT: case K_NULL_RECV_ROOT: return odd | 1;   /* gather: the root needs everyone */
    case K_BAD_DTYPE: case K_BAD_OP: case K_NULL_BUF: return all;   /* all_reduce, reduce_scatter */
    case K_COUNT_AT_ROOT:
        return (c == C_BCAST || c == C_SCATTER) ? nonroots : 1;
    case K_OTHER:
        /* the odd rank receives in what it called (all_reduce, or a
           broadcast as a non-root); the others fail as the collective they
           called needs */
        if (c == C_REDUCE || c == C_GATHER) return odd | 1;
        if (c == C_BCAST || c == C_SCATTER) return odd;
        return all;
    default:   /* count, dtype, op, root of a non-root odd rank */
        if (c == C_BCAST || c == C_SCATTER) return odd;
        if (c == C_REDUCE || c == C_GATHER) return 1;
        return all;
    }
}

static void describe(const ecase_t *e, char *out, size_t cap) {
    switch (e->kind) {
    case K_COUNT: snprintf(out, cap, "%s: rank %d passes count %d, the others %d (x float32)", cname[e->coll], e->odd, COUNT - 1, COUNT); break;
    case K_COUNT_ASYNC: snprintf(out, cap, "%s_async + dist_wait: rank %d passes count %d, the others %d (x float32)", cname[e->coll], e->odd, COUNT - 1, COUNT); break;
    case K_COUNT_BIG: snprintf(out, cap, "%s: rank %d passes count %d, the others %d (x float32; only theirs fits a slot)", cname[e->coll], e->odd, COUNT_BIG, COUNT); break;
    case K_COUNT_AT_ROOT: snprintf(out, cap, "%s: the root (rank 0) passes count %d, the others %d", cname[e->coll], COUNT - 1, COUNT); break;
    case K_DTYPE: snprintf(out, cap, "%s: rank %d passes float64, the others float32", cname[e->coll], e->odd); break;
    case K_OP: snprintf(out, cap, "%s: rank %d passes op max, the others sum", cname[e->coll], e->odd); break;
    case K_ROOT: snprintf(out, cap, "%s: rank %d passes root 1, the others root 0", cname[e->coll], e->odd); break;
    case K_OTHER: snprintf(out, cap, "%s: rank %d calls %s instead", cname[e->coll], e->odd, cname[e->other]); break;
    case K_BAD_ROOT: snprintf(out, cap, "invalid: rank %d passes root %d to %s (the others 0)", e->odd, NR + 3, cname[e->coll]); break;
    case K_BAD_DTYPE: snprintf(out, cap, "invalid: rank %d passes dtype 42 to %s", e->odd, cname[e->coll]); break;
    case K_BAD_OP: snprintf(out, cap, "invalid: rank %d passes op 9 to %s", e->odd, cname[e->coll]); break;
    case K_NULL_BUF: snprintf(out, cap, "invalid: rank %d passes a NULL %s with count %d to %s", e->odd, e->coll == C_ALLRED ? "buffer" : "send buffer", COUNT, cname[e->coll]); break;
    case K_NULL_RECV_ROOT: snprintf(out, cap, "invalid: the root passes a NULL recv buffer with count %d to %s", COUNT, cname[e->coll]); break;
    case K_ALL_BAD_ROOT: snprintf(out, cap, "invalid: every rank passes root %d to %s", NR + 3, cname[e->coll]); break;
    }
}

/* Substrings the message of a failing rank must contain: both sides' values. */
static void expected_words(const ecase_t *e, const char **w1, const char **w2) {
    static char a[64], b[64];
    *w1 = a; *w2 = b;
    switch (e->kind) {
    case K_COUNT: case K_COUNT_AT_ROOT: case K_COUNT_ASYNC: snprintf(a, sizeof a, "%d x float32", COUNT - 1); snprintf(b, sizeof b, "%d x float32", COUNT); break;
    case K_COUNT_BIG: snprintf(a, sizeof a, "%d x float32", COUNT_BIG); snprintf(b, sizeof b, "%d x float32", COUNT); break;
    case K_DTYPE: snprintf(a, sizeof a, "%d x float64", COUNT); snprintf(b, sizeof b, "%d x float32", COUNT); break;
    case K_OP: snprintf(a, sizeof a, "op max"); snprintf(b, sizeof b, "op sum"); break;
    case K_ROOT: snprintf(a, sizeof a, "root 1"); snprintf(b, sizeof b, "root 0"); break;
    case K_OTHER: snprintf(a, sizeof a, "called %s", cname[e->coll]); snprintf(b, sizeof b, "called %s", cname[e->other]); break;
    case K_BAD_ROOT: case K_ALL_BAD_ROOT: snprintf(a, sizeof a, "root %d", NR + 3); snprintf(b, sizeof b, "rank"); break;
    case K_BAD_DTYPE: snprintf(a, sizeof a, "dtype 42"); snprintf(b, sizeof b, "rank %d", e->odd); break;
    case K_BAD_OP: snprintf(a, sizeof a, "op 9"); snprintf(b, sizeof b, "rank %d", e->odd); break;
    case K_NULL_BUF: case K_NULL_RECV_ROOT: snprintf(a, sizeof a, "NULL"); snprintf(b, sizeof b, "rank %d", e->odd); break;
    }
}

/* ---- what the ranks record --------------------------------------------------------- */

typedef struct rres {
    int ran;
    int code;
    long ms;
    int guards_ok;
    int recovery_ok;
    int seq;                  /* the sequence number of the tested call */
    char msg[TEST_ERRLEN];
    char recovery_why[200];
} rres_t;

typedef struct shared {
    rres_t res[MAXCASES][NR];
    int arrive[MAXCASES][2];
    long kill_at;
    int killed_done[NR];
    int left_flag[4];
    char algo_msg[2][TEST_ERRLEN];
    int algo_code[2];
} shared_t;

static shared_t *g;

typedef struct jobarg { int ncases; ecase_t cases[MAXCASES]; } jobarg_t;

/* Every rank waits here (bounded) until all ranks reached meeting `k` of
   case `i`; shared memory, not the library, so one case cannot leak its
   failures into the next. */
static void meet(int i, int k, int n) {
    long until = now_ms() + scaled(40000);
    __atomic_add_fetch(&g->arrive[i][k], 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&g->arrive[i][k], __ATOMIC_SEQ_CST) < n && now_ms() < until) sleep_ms(2);
}

static int cases_main(dist_t *w, void *arg) {
    const jobarg_t *ja = (const jobarg_t *)arg;
    int me = dist_rank(w), n = dist_world_size(w), seq = 0;
    if (n != NR) return 3;
    for (int i = 0; i < ja->ncases; i++) {
        const ecase_t *e = &ja->cases[i];
        args_t a = args_of(e, me);
        size_t es = dist_dtype_size(a.dtype) ? dist_dtype_size(a.dtype) : 4;
        size_t sb = send_elems(a.coll, a.count, n) * es, rb = recv_elems(a.coll, a.count, n) * es;
        uint8_t *s = galloc(sb), *r = galloc(rb);
        rres_t *out = &g->res[i][me];
        long t0;
        dist_result res;
        meet(i, 0, n);
        /* In the invalid-argument cases the bad rank comes 50 ms late, so
           the others' frames of that collective are already queued here
           when it starts: what it reports must still be its own bad
           argument (DIST_ERR_INVALID), not a comparison with them. */
        if (e->kind >= K_BAD_ROOT && me == e->odd) sleep_ms(50);
        t0 = now_ms();
        if (a.async) {   /* all_reduce only */
            dist_req_t *q = NULL;
            res = dist_all_reduce_async(w, s, a.count, a.dtype, a.op, &q);
            if (res == DIST_OK) res = dist_wait(q);
        } else {
            res = call(w, a.coll, a.null_send ? NULL : s, a.null_recv ? NULL : r, a.count, a.dtype, a.op, a.root);
        }
        out->ms = now_ms() - t0;
        out->code = res;
        out->seq = ++seq;
        snprintf(out->msg, sizeof out->msg, "%s", res == DIST_OK ? "" : dist_error_message(w));
        out->guards_ok = gok(s, sb) && gok(r, rb);
        out->ran = 1;
        gfree(s); gfree(r);
        meet(i, 1, n);
        {   /* the communicator still works */
            int32_t v[100];
            int good = 1;
            for (int k = 0; k < 100; k++) v[k] = me + 1 + k;
            res = dist_all_reduce(w, v, 100, DIST_INT32, DIST_SUM);
            ++seq;
            if (res != DIST_OK) { good = 0; snprintf(out->recovery_why, sizeof out->recovery_why, "%s: %.160s", dist_result_name(res), dist_error_message(w)); }
            for (int k = 0; k < 100 && good; k++)
                if (v[k] != n * (n + 1) / 2 + n * k) { good = 0; snprintf(out->recovery_why, sizeof out->recovery_why, "element %d = %d", k, v[k]); }
            out->recovery_ok = good;
        }
    }
    return 0;
}

/* Judges one case from what the ranks recorded; prints one line. */
static void judge(const ecase_t *e, const rres_t *res, int invalid) {
    char name[200], why[700] = "";
    int m = must_fail(e), maxms = 0, nfail = 0;
    const char *w1, *w2;
    const char *sample = "";
    describe(e, name, sizeof name);
    expected_words(e, &w1, &w2);
    for (int r = 0; r < NR && !why[0]; r++) {
        const rres_t *x = &res[r];
        args_t a = args_of(e, r);
        char prefix[64];
        int must = (m >> r) & 1;
        int want_code = invalid ? DIST_ERR_INVALID : DIST_ERR_MISMATCH;
        int bad_rank = invalid && (e->kind == K_ALL_BAD_ROOT || r == e->odd);
        snprintf(prefix, sizeof prefix, "%s #%d:", cname[a.coll], x->seq);
        if (!x->ran) { snprintf(why, sizeof why, "rank %d did not run the case", r); break; }
        if (x->ms > maxms) maxms = (int)x->ms;
        if (x->code != DIST_OK) nfail++;
        if (x->code != DIST_OK && !sample[0]) sample = x->msg;
        if (must && x->code == DIST_OK) { snprintf(why, sizeof why, "rank %d returned DIST_OK (it must fail)", r); break; }
        if (x->code != DIST_OK) {
            if (x->ms > quick_ms())
                snprintf(why, sizeof why, "rank %d failed only after %ld ms (%s: %s)", r, x->ms, dist_result_name((dist_result)x->code), x->msg);
            else if (bad_rank && x->code != DIST_ERR_INVALID)
                snprintf(why, sizeof why, "rank %d (the bad call) returned %s, not DIST_ERR_INVALID: %s", r, dist_result_name((dist_result)x->code), x->msg);
            else if (!invalid && x->code != want_code)
                snprintf(why, sizeof why, "rank %d returned %s, not DIST_ERR_MISMATCH: %s", r, dist_result_name((dist_result)x->code), x->msg);
            else if (!strstr(x->msg, prefix))
                snprintf(why, sizeof why, "rank %d's message does not start with the collective and its number \"%s\": \"%s\"", r, prefix, x->msg);
            else if (!strstr(x->msg, w1) || !strstr(x->msg, w2))
                snprintf(why, sizeof why, "rank %d's message does not name both sides (\"%s\", \"%s\"): \"%s\"", r, w1, w2, x->msg);
        }
        if (!why[0] && !x->guards_ok) snprintf(why, sizeof why, "rank %d: bytes around a buffer were overwritten", r);
        if (!why[0] && !x->recovery_ok) snprintf(why, sizeof why, "rank %d: the all_reduce after the case failed: %s", r, x->recovery_why);
    }
    if (why[0]) fail(name, "%s", why);
    else {
        char fails[32] = "", req[32] = "";
        for (int r = 0; r < NR; r++) {
            if (res[r].code != DIST_OK) snprintf(fails + strlen(fails), sizeof fails - strlen(fails), "%s%d", fails[0] ? "," : "", r);
            if ((m >> r) & 1) snprintf(req + strlen(req), sizeof req - strlen(req), "%s%d", req[0] ? "," : "", r);
        }
        ok("%s: ranks {%s} failed (required: {%s}) within %d ms; guards intact; the next all_reduce is right  [\"%s\"]",
           name, fails, req, maxms, sample);
    }
    (void)nfail;
}

/* dist_spawn in a guard process with a deadline; returns its result, -2
   on the deadline.  Windows has no fork: spawn_job runs the job in a
   process of its own, without the deadline (the runner's time limit still
   holds). */
#ifdef _WIN32
static int guarded_spawn(int n, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg, int deadline_ms, char *msg, size_t cap) {
    int rc = spawn_job(n, fn, arg, cfg);
    (void)deadline_ms;
    snprintf(msg, cap, "%s", spawn_job_error());
    return rc;
}
#else
static int guarded_spawn(int n, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg, int deadline_ms, char *msg, size_t cap) {
    static int *rc_sh = NULL;
    static char *msg_sh = NULL;
    pid_t pid;
    int st = 0;
    long deadline;
    if (!rc_sh) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); exit(1); }
        rc_sh = (int *)p; msg_sh = (char *)p + 64;
    }
    *rc_sh = -1000; msg_sh[0] = 0;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        *rc_sh = dist_spawn(n, fn, arg, cfg);
        snprintf(msg_sh, 1000, "%s", dist_error_message(NULL));
        fflush(NULL);
        _exit(0);
    }
    if (pid < 0) { perror("fork"); exit(1); }
    deadline = now_ms() + scaled(deadline_ms);
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        if (now_ms() >= deadline) { kill(pid, SIGKILL); waitpid(pid, &st, 0); snprintf(msg, cap, "killed at the deadline"); return -2; }
        sleep_ms(5);
    }
    snprintf(msg, cap, "%s", msg_sh);
    return *rc_sh;
}
#endif

static void run_cases(jobarg_t *ja, int invalid) {
    dist_config cfg;
    char msg[1000];
    int rc;
    long t0 = now_ms();
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    memset(g->res, 0, sizeof g->res);
    memset(g->arrive, 0, sizeof g->arrive);
    rc = guarded_spawn(NR, cases_main, ja, &cfg, 60000 + ja->ncases * 25000, msg, sizeof msg);
    for (int i = 0; i < ja->ncases; i++) judge(&ja->cases[i], g->res[i], invalid);
    if (rc != 0) fail(invalid ? "invalid-argument job" : cname[ja->cases[0].coll], "dist_spawn returned %d after %.1f s: %s", rc, (now_ms() - t0) / 1000.0, msg);
    else printf("       (%s job: %.1f s)\n", invalid ? "invalid-argument" : cname[ja->cases[0].coll], (now_ms() - t0) / 1000.0);
}

/* ---- a rank killed before an all_reduce --------------------------------------------- */

#ifndef _WIN32
static int kill_main(dist_t *w, void *arg) {
    int me = dist_rank(w);
    float v[1000];
    long t0;
    dist_result r;
    (void)arg;
    if (me == ODD) {
        sleep_ms(100);   /* the others are in (or about to enter) the all_reduce */
        __atomic_store_n(&g->kill_at, now_ms(), __ATOMIC_SEQ_CST);
        raise(SIGKILL);
    }
    signal(SIGTERM, SIG_IGN);   /* dist_spawn stops the survivors once rank 2 died: let them record first (it kills after 2 s) */
    for (int i = 0; i < 1000; i++) v[i] = (float)i;
    t0 = now_ms();
    r = dist_all_reduce(w, v, 1000, DIST_FLOAT32, DIST_SUM);
    g->res[0][me].ms = now_ms() - t0;
    g->res[0][me].code = r;
    snprintf(g->res[0][me].msg, sizeof g->res[0][me].msg, "%s", dist_error_message(w));
    g->res[0][me].seq = (int)(now_ms() - __atomic_load_n(&g->kill_at, __ATOMIC_SEQ_CST));   /* ms after the kill */
    __atomic_store_n(&g->res[0][me].ran, 1, __ATOMIC_SEQ_CST);
    return 0;
}
#endif

static void test_kill(void) {
#ifdef _WIN32
    /* A Windows dist_spawn ends the others at once (TerminateProcess; no
       SIGTERM to ignore), before they can record what the all_reduce
       returned; and there is no SIGKILL to raise. */
    printf("left out on Windows: the case \"rank 2 is killed (SIGKILL) before an all_reduce\" (no signals; dist_spawn ends the "
           "survivors at once, before they can record their result)\n");
#else
    dist_config cfg;
    char msg[1000], name[] = "rank 2 is killed (SIGKILL) before an all_reduce: the others fail with DIST_ERR_PEER_LOST within 2 s naming all_reduce; dist_spawn returns 137";
    int rc;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 20000;
    memset(g->res, 0, sizeof g->res);
    g->kill_at = 0;
    rc = guarded_spawn(NR, kill_main, NULL, &cfg, 60000, msg, sizeof msg);
    {
        char why[600] = "";
        int worst = 0;
        for (int r = 0; r < NR && !why[0]; r++) {
            const rres_t *x = &g->res[0][r];
            if (r == ODD) continue;
            if (!x->ran) snprintf(why, sizeof why, "rank %d did not return from the all_reduce before it was stopped", r);
            else if (x->code != DIST_ERR_PEER_LOST) snprintf(why, sizeof why, "rank %d: %s: %s", r, dist_result_name((dist_result)x->code), x->msg);
            else if (x->seq > scaled(2000)) snprintf(why, sizeof why, "rank %d failed %d ms after the kill", r, x->seq);
            else if (!strstr(x->msg, "all_reduce #1") || !strstr(x->msg, "rank 2")) snprintf(why, sizeof why, "rank %d's message does not name all_reduce #1 and rank 2: \"%s\"", r, x->msg);
            if (x->seq > worst) worst = x->seq;
        }
        if (!why[0] && rc != 128 + 9) snprintf(why, sizeof why, "dist_spawn returned %d (%.400s)", rc, msg);
        if (why[0]) fail(name, "%s", why);
        else ok("%s  [at most %d ms after the kill; \"%s\"; dist_spawn: \"%s\"]", name, worst, g->res[0][0].msg, msg);
    }
#endif
}

/* ---- a rank that did its part and left ------------------------------------------------ */

/* Case 0: rank 0 broadcasts and returns at once (dist_spawn then destroys
   its world); ranks 1 and 2 call the broadcast only after rank 0 has gone.
   Case 1: ranks 1 and 2 send their part of a gather to rank 0 and leave;
   rank 0 calls the gather after they have gone. */
static int left_main(dist_t *w, void *arg) {
    int me = dist_rank(w), which = *(const int *)arg;
    int32_t x[64], all[3 * 64];
    dist_result r;
    long until = now_ms() + scaled(20000);
    int early = which == 0 ? me == 0 : me != 0;
    for (int i = 0; i < 64; i++) x[i] = me == 0 || which == 1 ? me * 100 + i : -1;
    if (!early) {
        /* wait until the early ranks returned from fn, then until their goodbye has surely arrived */
        while (__atomic_load_n(&g->left_flag[which], __ATOMIC_SEQ_CST) < (which == 0 ? 1 : 2) && now_ms() < until) sleep_ms(2);
        sleep_ms(300);
    }
    r = which == 0 ? dist_broadcast(w, x, 64, DIST_INT32, 0) : dist_gather(w, x, me == 0 ? all : NULL, 64, DIST_INT32, 0);
    g->res[which][me].code = r;
    snprintf(g->res[which][me].msg, sizeof g->res[which][me].msg, "%s", dist_error_message(w));
    {
        int good = r == DIST_OK;
        if (good && which == 0) for (int i = 0; i < 64; i++) good &= x[i] == i;
        if (good && which == 1 && me == 0) for (int k = 0; k < 3; k++) for (int i = 0; i < 64; i++) good &= all[k * 64 + i] == k * 100 + i;
        g->res[which][me].recovery_ok = good;
    }
    g->res[which][me].ran = 1;
    if (early) __atomic_add_fetch(&g->left_flag[which], 1, __ATOMIC_SEQ_CST);
    return 0;
}

static void test_left(void) {
    static const char *names[2] = {
        "broadcast: the root (rank 0) sends and leaves (dist_destroy) before ranks 1, 2 start theirs: they still get the data",
        "gather: ranks 1, 2 send their parts and leave before the root (rank 0) starts its gather: it still gets every part" };
    for (int which = 0; which < 2; which++) {
        dist_config cfg;
        char msg[1000], why[600] = "";
        int rc, arg = which;
        memset(&cfg, 0, sizeof cfg);
        cfg.timeout_ms = 10000;
        memset(g->res[which], 0, sizeof g->res[which]);
        g->left_flag[which] = 0;
        rc = guarded_spawn(3, left_main, &arg, &cfg, 40000, msg, sizeof msg);
        for (int r = 0; r < 3 && !why[0]; r++) {
            const rres_t *x = &g->res[which][r];
            if (!x->ran) snprintf(why, sizeof why, "rank %d did not finish", r);
            else if (x->code != DIST_OK) snprintf(why, sizeof why, "rank %d: %s: %s", r, dist_result_name((dist_result)x->code), x->msg);
            else if (!x->recovery_ok) snprintf(why, sizeof why, "rank %d: wrong data", r);
        }
        if (!why[0] && rc != 0) snprintf(why, sizeof why, "dist_spawn returned %d: %.400s", rc, msg);
        if (why[0]) fail(names[which], "%s", why);
        else ok("%s", names[which]);
    }
}

/* ---- DIST_ALGO ----------------------------------------------------------------------- */

/* Two processes started by hand (dist_spawn would give both the same
   environment): rank 0 with DIST_ALGO=ring, rank 1 with DIST_ALGO=tree. */
static void test_algo_mismatch(void) {
#ifdef _WIN32
    printf("left out on Windows: the case \"DIST_ALGO=ring on rank 0, tree on rank 1\" (it forks two ranks with different "
           "environments; dist_spawn gives both the same)\n");
#else
    const char *name = "DIST_ALGO=ring on rank 0, tree on rank 1: all_reduce fails on both with DIST_ERR_MISMATCH naming both algorithms";
    char url[64];
    pid_t pids[2];
    long deadline;
    int port = free_port(AF_INET), sts[2] = { -1, -1 };
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    memset(g->algo_msg, 0, sizeof g->algo_msg);
    g->algo_code[0] = g->algo_code[1] = 1;
    fflush(NULL);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            dist_config cfg;
            dist_t *w = NULL;
            float v[1000];
            dist_result r;
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            setenv("DIST_ALGO", i ? "tree" : "ring", 1);
            memset(&cfg, 0, sizeof cfg);
            cfg.init_method = url; cfg.world_size = 2; cfg.rank = i; cfg.timeout_ms = 10000;
            if (dist_init(&w, &cfg) != DIST_OK) { snprintf(g->algo_msg[i], TEST_ERRLEN, "init: %.300s", dist_error_message(NULL)); _exit(1); }
            for (int k = 0; k < 1000; k++) v[k] = (float)k;
            r = dist_all_reduce(w, v, 1000, DIST_FLOAT32, DIST_SUM);
            g->algo_code[i] = r;
            snprintf(g->algo_msg[i], TEST_ERRLEN, "%s", dist_error_message(w));
            dist_destroy(w);
            _exit(0);
        }
    }
    deadline = now_ms() + scaled(40000);
    for (int i = 0; i < 2; i++)
        for (;;) {
            int st;
            if (waitpid(pids[i], &st, WNOHANG) == pids[i]) { sts[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st); break; }
            if (now_ms() >= deadline) { kill(pids[i], SIGKILL); waitpid(pids[i], &st, 0); break; }
            sleep_ms(5);
        }
    {
        char why[700] = "";
        for (int i = 0; i < 2 && !why[0]; i++) {
            if (sts[i] != 0) snprintf(why, sizeof why, "rank %d ended with %d: %s", i, sts[i], g->algo_msg[i]);
            else if (g->algo_code[i] != DIST_ERR_MISMATCH) snprintf(why, sizeof why, "rank %d: %s: %s", i, dist_result_name((dist_result)g->algo_code[i]), g->algo_msg[i]);
            else if (!strstr(g->algo_msg[i], "ring") || !strstr(g->algo_msg[i], "tree") || !strstr(g->algo_msg[i], "all_reduce #1"))
                snprintf(why, sizeof why, "rank %d's message does not name all_reduce #1 and both algorithms: \"%s\"", i, g->algo_msg[i]);
        }
        if (why[0]) fail(name, "%s", why);
        else ok("%s  [\"%s\"]", name, g->algo_msg[0]);
    }
#endif
}

static int never_main(dist_t *w, void *arg) { (void)w; (void)arg; return 0; }

static void test_algo_bogus(void) {
    const char *name = "DIST_ALGO=bogus: dist_init fails (dist_spawn returns non-zero) with a message naming DIST_ALGO";
    dist_config cfg;
    char msg[1000];
    int rc;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    setenv("DIST_ALGO", "bogus", 1);
    rc = guarded_spawn(2, never_main, NULL, &cfg, 30000, msg, sizeof msg);
    unsetenv("DIST_ALGO");
    if (rc == 0 || rc == -2 || !strstr(msg, "DIST_ALGO")) fail(name, "dist_spawn returned %d: \"%s\"", rc, msg);
    else ok("%s  [\"%s\"]", name, msg);
}

/* ---- local argument checks (no peers involved) ----------------------------------------- */

static void test_local(void) {
    const char *name = "a NULL communicator is DIST_ERR_INVALID for every collective, with a message";
    float v[4] = { 0 };
    dist_req_t *q = (dist_req_t *)0x1;
    int good = 1;
    char why[300] = "";
    for (int c = 0; c < C_N && good; c++) {
        dist_result r = call(NULL, c, v, v, 1, DIST_FLOAT32, DIST_SUM, 0);
        if (r != DIST_ERR_INVALID || !strstr(dist_error_message(NULL), "NULL")) { good = 0; snprintf(why, sizeof why, "%s: %s \"%.240s\"", cname[c], dist_result_name(r), dist_error_message(NULL)); }
    }
    if (good) {
        dist_result r = dist_all_reduce_async(NULL, v, 1, DIST_FLOAT32, DIST_SUM, &q);
        if (r != DIST_ERR_INVALID || q != NULL) { good = 0; snprintf(why, sizeof why, "all_reduce_async: %s, req %p (must be NULL)", dist_result_name(r), (void *)q); }
    }
    if (good) ok("%s", name);
    else fail(name, "%s", why);
}

int main(void) {
    long t_all = now_ms();
    test_start();
    UNSET_ENV(LAUNCHER_ENV, "DIST_ALGO");
    g = (shared_t *)mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED) { perror("mmap"); return 1; }
    if (first_process()) memset(g, 0, sizeof *g);      /* (Windows: not again in each job's processes) */

    test_local();
    for (int c = 0; c < C_N; c++) {
        jobarg_t ja;
        memset(&ja, 0, sizeof ja);
        ja.ncases = ncases_of(c, ja.cases);
        run_cases(&ja, 0);
    }
    {
        jobarg_t ja;
        memset(&ja, 0, sizeof ja);
        ja.ncases = invalid_cases(ja.cases);
        run_cases(&ja, 1);
    }
    test_kill();
    test_left();
    test_algo_mismatch();
    test_algo_bogus();

    munmap(g, sizeof *g);
    printf("# total %.1f s\n", (now_ms() - t_all) / 1000.0);
    if (g_failures) { printf("%d check(s) failed\n", g_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
