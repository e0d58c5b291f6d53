// TIMEOUT: 180
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_rpc_threads.c - which thread a call runs on, when a handler waits on
   a nested call.  A handler that blocks on a future must not run other
   queued calls on its own thread: they would inherit what it holds (a user
   mutex, no_grad, the parameter read lock) and deadlock on it or compute
   wrongly.  dist_rpc.h lends the waiting handler's place to another
   handler thread instead (up to DIST_RPC_MAX_THREADS), so nested calls
   never starve either.

   Between forked workers (tcp://127.0.0.1, rank 0's listening socket made
   before the fork), 3 workers each, every case twice: with num_threads 1
   and 4.  A worker that sees a problem writes it to a MAP_SHARED table and
   raises a shared abort flag (every worker then leaves by _exit, without a
   shutdown that could wait on a deadlocked handler); a handler that sees
   one fails its call with a sentence, which reaches the caller.  Every call
   has a 10 s timeout and every user-lock wait a 5 s one, so a deadlock
   fails the case with a sentence; every worker has an alarm and the parent
   kills what outlives its deadline.  A worker leaves once every worker
   has ended its part (or after 30 s), so callers see their own errors
   before w0 goes.  One line per case.

   1. mutex: w0's "outer" locks a process-wide mutex M (error-checking, with
      pthread_mutex_timedlock, 5 s), notes its thread, makes an rpc_sync to
      w1's "bounce" (sleeps 10 ms), unlocks M.  w0's "inner" locks M the
      same way.  w1 and w2 each keep 8 calls in flight to w0 (outer and
      inner alternating), 10 rounds.  Every call succeeds with its exact
      result; inner never runs on a thread that holds M (pthread_self()
      noted by outer, compared in inner, and a thread-local flag), and its
      lock never fails (EDEADLK: its own thread holds M; ETIMEDOUT: a
      deadlock).
      (Not as first sketched: bounce does not call inner back.  An outer
      that holds M while it waits for an inner that needs M is a deadlock
      whatever thread inner runs on; the deadlock is an unrelated
      call that needs M running on the waiting outer's thread, which is
      what this case makes likely: with 1 thread, every inner that arrives
      while an outer waits.)
   2. no_grad: w0's "outer" enters no_grad (checked: an op of a tensor that
      requires grad builds no graph), makes an rpc_sync to w1's
      "bounce_train", which calls back w0's "train", checks no_grad still
      holds after its wait, exits no_grad (checked: ops build a graph
      again).  "train" builds x (2x3, requires grad) * c, sums, runs
      backward: the loss requires grad, backward succeeds (not "nothing
      below this tensor requires a gradient") and x's gradient is exactly c.
      w1 and w2 each keep 8 calls in flight to w0 (outer and train
      alternating), 10 rounds; every result exact.
   3. parameter lock: w0 owns W (1x4, 100.0 each, requires grad).  Its
      "forward" holds dist_params_read_enter() across an rpc_sync to w1's
      "stage2" (sleeps 10 ms): it computes y = linear(x, W) and checks W
      did not change during the wait (the read lock keeps steps out) and
      its four elements are equal.  w2 trains: it gets W's RRef from w0's
      "params", makes a distributed SGD (lr 0.25); each of 10 steps fires 4
      forwards (async, no context), then in a context a forward of
      x = ones (y must be exactly 400 - steps so far), dist_autograd_backward
      of sum(y), dist_remote_optim_step (which takes w0's parameter lock for
      writing while forwards hold it for reading), context end.  w1 keeps 8
      forwards in flight for 10 rounds.  Every forward's y is 400 - k for a
      whole k within the steps done (a consistent W); at the end W is
      exactly 100 - 0.25 * 10 on w0.  A step that runs on a waiting
      reader's thread deadlocks that thread for good: the calls time out.
   4. chains: three chains of nested calls at once (from w0, w1 and w2),
      each 8 levels deep, ping-ponging between w0 and w1, every level
      waiting on the next (more levels than one thread could serve); 5
      rounds; every level checks its child's result exactly, and the chain
      completes.  The ok line shows the peak thread count of w0 and w1.

   The verdicts name the worker and quote what failed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_*.c) */
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist_rpc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define NW 3
#define ROUNDS 10
#define INFLIGHT 8
#define STEPS 10
#define CHAIN_DEPTH 8
#define CHAIN_ROUNDS 5
#define MSG dist_rpc_error_message()

typedef struct {
    atomic_int claimed[NW];
    char fail[NW][900];
    int done[NW];                /* the worker finished its part */
    int abort;                   /* some worker failed: everyone leaves at once */
    int steps;                   /* case 3: optimizer steps w2 completed */
    int peak_threads[NW];        /* case 4 */
    int nested_inner;            /* case 1: inner calls that ran on M's holder (counted too) */
    atomic_int hclaimed[NW];
    char hfail[NW][700];         /* each worker's first handler failure, whole (a nested call's
                                    error sentence is cut at about 400 characters on the way) */
    char note[NW][300];
} shared_t;
static shared_t *sh;
static int g_rank;

DEFINE_FAIL_AT(NW, &sh->claimed[rank], sh->fail[rank])
/* A worker-side failure: recorded, and every worker leaves. */
#define WFAIL(...) (__atomic_store_n(&sh->abort, 1, __ATOMIC_SEQ_CST), fail_at(g_rank, __LINE__, __VA_ARGS__))

/* A handler's failure: its call fails with the sentence, and the worker's
   first one is kept whole in the shared table. */
static void hfail(dist_rpc_call_t *call, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hfail(dist_rpc_call_t *call, const char *fmt, ...) {
    char buf[700];
    int expected = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    dist_rpc_call_fail(call, "%s", buf);
    if (atomic_compare_exchange_strong(&sh->hclaimed[g_rank], &expected, 1)) snprintf(sh->hfail[g_rank], sizeof sh->hfail[g_rank], "%s", buf);
}

/* ---- case 1: a user mutex ---- */
static pthread_mutex_t g_M;
static pthread_mutex_t g_owner_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t g_M_owner;          /* the thread of the outer that holds M */
static int g_M_held;
static _Thread_local int t_holds_M;

/* M's error-checking mutex (a relock by its owner says EDEADLK). */
static void init_M(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&g_M, &a);
    pthread_mutexattr_destroy(&a);
}

/* Locks M within 5 s (scaled): 0, or the error number. */
static int lock_M(void) {
    struct timespec ts;
    int ms = scaled(5000);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return pthread_mutex_timedlock(&g_M, &ts);
}

/* Whether this thread is the one an outer noted as M's holder. */
static int i_hold_M(unsigned long *owner) {
    int same;
    pthread_mutex_lock(&g_owner_lock);
    same = g_M_held && pthread_equal(g_M_owner, pthread_self());
    *owner = g_M_held ? (unsigned long)g_M_owner : 0;
    pthread_mutex_unlock(&g_owner_lock);
    return same || t_holds_M;
}

static const char *lock_error(int e) {
    return e == EDEADLK ? "EDEADLK: this very thread holds M (a plain mutex would deadlock this thread for good)"
         : e == ETIMEDOUT ? "ETIMEDOUT after 5 s: deadlock (M's holder waits on something that cannot come)" : strerror(e);
}

static dist_value_t *h_bounce(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "bounce: %s", MSG); return NULL; }
    sleep_ms(10);
    return dist_value_int(tag + 1);
}

static dist_value_t *h_outer1(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0, got = -1;
    unsigned long owner;
    dist_value_t *r = NULL;
    dist_result res;
    int e;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "outer: %s", MSG); return NULL; }
    if (i_hold_M(&owner)) {
        __atomic_add_fetch(&sh->nested_inner, 1, __ATOMIC_SEQ_CST);
        hfail(call, "outer (tag %lld) ran on thread %#lx, the thread of another 'outer' that holds M and waits on its nested call", (long long)tag,
                           owner);
        return NULL;
    }
    if ((e = lock_M()) != 0) { hfail(call, "outer (tag %lld): locking M: %s", (long long)tag, lock_error(e)); return NULL; }
    pthread_mutex_lock(&g_owner_lock);
    g_M_owner = pthread_self();
    g_M_held = 1;
    pthread_mutex_unlock(&g_owner_lock);
    t_holds_M = 1;
    res = dist_rpc_sync("w1", "bounce", dist_value_pack("[I]", tag), &r);
    t_holds_M = 0;
    pthread_mutex_lock(&g_owner_lock);
    g_M_held = 0;
    pthread_mutex_unlock(&g_owner_lock);
    pthread_mutex_unlock(&g_M);
    if (res != DIST_OK) { hfail(call, "outer (tag %lld): its nested call to w1's 'bounce': %s: %s", (long long)tag, dist_result_name(res), MSG); return NULL; }
    if (dist_value_get_int(r, &got) != DIST_OK || got != tag + 1) {
        dist_value_free(r);
        hfail(call, "outer (tag %lld): bounce answered %lld, want %lld", (long long)tag, (long long)got, (long long)(tag + 1));
        return NULL;
    }
    dist_value_free(r);
    return dist_value_int(tag * 2);
}

static dist_value_t *h_inner1(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0;
    unsigned long owner;
    int e;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "inner: %s", MSG); return NULL; }
    if (i_hold_M(&owner)) {
        __atomic_add_fetch(&sh->nested_inner, 1, __ATOMIC_SEQ_CST);
        e = lock_M();                               /* what a plain mutex would have done: report it */
        if (e == 0) pthread_mutex_unlock(&g_M);
        hfail(call, "inner (tag %lld) ran on thread %#lx, the thread of an 'outer' that holds M and waits on its nested call to w1's 'bounce'; "
                                 "locking M there: %s", (long long)tag, owner, e ? lock_error(e) : "succeeded?!");
        return NULL;
    }
    if ((e = lock_M()) != 0) { hfail(call, "inner (tag %lld): locking M: %s", (long long)tag, lock_error(e)); return NULL; }
    pthread_mutex_unlock(&g_M);
    return dist_value_int(tag + 7);
}

/* ---- case 2: no_grad ---- */

/* train(tag): x (2x3) from the tag, c = 1..6; sum(x * c) and x's gradient. */
static void train_values(int64_t tag, float *x, float *c) {
    for (int i = 0; i < 6; i++) {
        x[i] = (float)((tag + i) % 7 - 3);
        c[i] = (float)(i + 1);
    }
}
static int64_t train_expect(int64_t tag) {
    float x[6], c[6];
    int64_t s = 0;
    train_values(tag, x, c);
    for (int i = 0; i < 6; i++) s += (int64_t)x[i] * (int64_t)c[i];
    return s;
}

static dist_value_t *h_train(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0;
    float xs[6], cs[6];
    const int64_t shape[2] = { 2, 3 };
    dist_tensor_t *x, *c, *p, *s, *g;
    dist_result res;
    float loss;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "train: %s", MSG); return NULL; }
    train_values(tag, xs, cs);
    x = dist_tensor_new(2, shape, xs);
    c = dist_tensor_new(2, shape, cs);
    dist_tensor_set_requires_grad(x, 1);
    p = dist_tensor_mul(x, c);
    s = dist_tensor_sum(p);
    if (!s) { hfail(call, "train (tag %lld): sum(x * c): %s", (long long)tag, MSG); goto out; }
    loss = dist_tensor_item(s);
    if ((res = dist_tensor_backward(s, NULL)) != DIST_OK) {
        hfail(call, "train (tag %lld): %s (%s; the loss %s a gradient)", (long long)tag, MSG, dist_result_name(res),
                           dist_tensor_requires_grad(s) ? "requires" : "does not require");
        goto out;
    }
    if (!(g = dist_tensor_grad(x))) { hfail(call, "train (tag %lld): backward returned DIST_OK but x got no gradient", (long long)tag); goto out; }
    for (int i = 0; i < 6; i++)
        if (dist_tensor_data(g)[i] != cs[i]) {
            hfail(call, "train (tag %lld): x's gradient[%d] is %.9g, want exactly %.9g", (long long)tag, i, (double)dist_tensor_data(g)[i], (double)cs[i]);
            goto out;
        }
    if (loss != (float)train_expect(tag)) {
        hfail(call, "train (tag %lld): loss %.9g, want %lld", (long long)tag, (double)loss, (long long)train_expect(tag));
        goto out;
    }
    dist_tensor_release(s); dist_tensor_release(p); dist_tensor_release(c); dist_tensor_release(x);
    return dist_value_int((int64_t)loss);
out:
    dist_tensor_release(s); dist_tensor_release(p); dist_tensor_release(c); dist_tensor_release(x);
    return NULL;
}

/* On w1: calls back its caller's "train" (a blocking nested call). */
static dist_value_t *h_bounce_train(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0;
    char to[16];
    dist_value_t *r = NULL;
    dist_result res;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "bounce_train: %s", MSG); return NULL; }
    snprintf(to, sizeof to, "w%d", dist_rpc_call_caller(call));
    if ((res = dist_rpc_sync(to, "train", dist_value_pack("[I]", tag), &r)) != DIST_OK) {
        hfail(call, "bounce_train: %s", MSG);
        return NULL;
    }
    return r;
}

/* 1 when an op of a tensor that requires grad builds a graph on this thread. */
static int builds_graph(void) {
    dist_tensor_t *a = dist_tensor_scalar(3.0f), *b = dist_tensor_scalar(2.0f), *z;
    int on;
    dist_tensor_set_requires_grad(a, 1);
    z = dist_tensor_mul(a, b);
    on = z && dist_tensor_requires_grad(z);
    dist_tensor_release(z); dist_tensor_release(a); dist_tensor_release(b);
    return on;
}

static dist_value_t *h_outer2(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0, got = -1;
    dist_value_t *r = NULL;
    dist_result res;
    int before, after;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "outer: %s", MSG); return NULL; }
    if (!builds_graph()) {
        hfail(call, "outer (tag %lld) started under no_grad: ops built no graph before its own dist_no_grad_enter (it inherited the no_grad of a "
                    "handler that waits on this thread)", (long long)tag);
        return NULL;
    }
    dist_no_grad_enter();
    before = builds_graph();
    res = dist_rpc_sync("w1", "bounce_train", dist_value_pack("[I]", tag), &r);
    after = builds_graph();
    dist_no_grad_exit();
    if (before) { dist_value_free(r); hfail(call, "outer (tag %lld): ops built a graph inside dist_no_grad_enter (before its nested call)", (long long)tag); return NULL; }
    if (after) { dist_value_free(r); hfail(call, "outer (tag %lld): its no_grad was gone after its nested call (ops built a graph)", (long long)tag); return NULL; }
    if (!builds_graph()) { dist_value_free(r); hfail(call, "outer (tag %lld): after dist_no_grad_exit ops still build no graph", (long long)tag); return NULL; }
    if (res != DIST_OK) { hfail(call, "outer: %s", MSG); return NULL; }
    if (dist_value_get_int(r, &got) != DIST_OK || got != train_expect(tag)) {
        dist_value_free(r);
        hfail(call, "outer (tag %lld): bounce_train answered %lld, want %lld", (long long)tag, (long long)got, (long long)train_expect(tag));
        return NULL;
    }
    dist_value_free(r);
    return dist_value_int(got);
}

/* ---- case 3: the parameter lock ---- */
static dist_tensor_t *g_W;          /* on w0: 1x4, 100.0 each, requires grad */
#define W0 100.0f
#define LR 0.25f

static dist_value_t *h_params(dist_rpc_call_t *call, const dist_value_t *args) {
    dist_value_t *v;
    (void)args;
    if (!g_W) { hfail(call, "params: w%d has no parameters", g_rank); return NULL; }
    if (!(v = dist_rref_params(1, &g_W))) hfail(call, "params: dist_rref_params: %s", MSG);
    return v;
}

static dist_value_t *h_stage2(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t tag = 0;
    if (dist_value_unpack(args, "[I]", &tag) != DIST_OK) { hfail(call, "stage2: %s", MSG); return NULL; }
    sleep_ms(10);
    return dist_value_int(tag + 1);
}

/* [x (1x4)] -> y = linear(x, W) (1x1), W read under the parameter lock
   held across a nested call to w1's "stage2". */
static dist_value_t *h_forward(dist_rpc_call_t *call, const dist_value_t *args) {
    static int64_t seq;
    int64_t tag = __atomic_add_fetch(&seq, 1, __ATOMIC_SEQ_CST), got = -1;
    dist_tensor_t *x = dist_tensor_from_value(dist_value_item(args, 0)), *y;
    dist_value_t *r = NULL, *out;
    dist_result res;
    float before[4], after[4];
    if (!x || dist_tensor_numel(x) != 4) { dist_tensor_release(x); hfail(call, "forward: want a 1x4 tensor: %s", MSG); return NULL; }
    dist_params_read_enter();
    memcpy(before, dist_tensor_data(g_W), sizeof before);
    y = dist_tensor_linear(x, g_W, NULL);
    res = dist_rpc_sync("w1", "stage2", dist_value_pack("[I]", tag), &r);
    memcpy(after, dist_tensor_data(g_W), sizeof after);
    dist_params_read_exit();
    dist_tensor_release(x);
    if (!y) { dist_value_free(r); hfail(call, "forward: linear: %s", MSG); return NULL; }
    for (int i = 0; i < 4; i++)
        if (before[i] != before[0] || after[i] != before[i]) {
            dist_value_free(r); dist_tensor_release(y);
            hfail(call, "forward: W[%d] was %.9g (W[0] %.9g) when it took the read lock and %.9g after its nested call: a step wrote W under a reader", i,
                               (double)before[i], (double)before[0], (double)after[i]);
            return NULL;
        }
    if (res != DIST_OK) { dist_tensor_release(y); hfail(call, "forward: its nested call to w1's 'stage2': %s: %s", dist_result_name(res), MSG); return NULL; }
    if (dist_value_get_int(r, &got) != DIST_OK || got != tag + 1) {
        dist_value_free(r); dist_tensor_release(y);
        hfail(call, "forward: stage2 answered %lld, want %lld", (long long)got, (long long)(tag + 1));
        return NULL;
    }
    dist_value_free(r);
    out = dist_value_from_tensor(y);
    dist_tensor_release(y);
    return out;
}

/* ---- case 4: chains ---- */

/* The next hop of a chain: ping-pong between w0 and w1 (from w2: w0). */
static int chain_next(int w) { return w == 0 ? 1 : 0; }
/* What level `depth` on worker w answers. */
static int64_t chain_expect(int w, int depth, int64_t chain) {
    if (depth == 0) return 1000 * chain + w + 1;
    return chain_expect(chain_next(w), depth - 1, chain) * 3 + w + 1;
}

static int thread_count(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

static dist_value_t *h_chain(dist_rpc_call_t *call, const dist_value_t *args) {
    int64_t depth = 0, chain = 0, got = -1, want;
    int next = chain_next(g_rank), nt = thread_count();
    char to[16];
    dist_value_t *r = NULL;
    dist_result res;
    int prev = __atomic_load_n(&sh->peak_threads[g_rank], __ATOMIC_SEQ_CST);
    while (nt > prev && !__atomic_compare_exchange_n(&sh->peak_threads[g_rank], &prev, nt, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) { }
    if (dist_value_unpack(args, "[II]", &depth, &chain) != DIST_OK) { hfail(call, "chain: %s", MSG); return NULL; }
    if (depth == 0) return dist_value_int(chain_expect(g_rank, 0, chain));
    snprintf(to, sizeof to, "w%d", next);
    if ((res = dist_rpc_sync(to, "chain", dist_value_pack("[II]", depth - 1, chain), &r)) != DIST_OK) {
        hfail(call, "chain %lld, level %lld on w%d: its call to %s: %s: %s", (long long)chain, (long long)depth, g_rank, to, dist_result_name(res), MSG);
        return NULL;
    }
    want = chain_expect(next, (int)depth - 1, chain);
    if (dist_value_get_int(r, &got) != DIST_OK || got != want) {
        dist_value_free(r);
        hfail(call, "chain %lld, level %lld on w%d: %s answered %lld, want %lld", (long long)chain, (long long)depth, g_rank, to, (long long)got,
                           (long long)want);
        return NULL;
    }
    dist_value_free(r);
    return dist_value_int(got * 3 + g_rank + 1);
}

static void register_all(void) {
    dist_rpc_register("bounce", h_bounce);
    dist_rpc_register("outer1", h_outer1);
    dist_rpc_register("inner1", h_inner1);
    dist_rpc_register("train", h_train);
    dist_rpc_register("bounce_train", h_bounce_train);
    dist_rpc_register("outer2", h_outer2);
    dist_rpc_register("params", h_params);
    dist_rpc_register("stage2", h_stage2);
    dist_rpc_register("forward", h_forward);
    dist_rpc_register("chain", h_chain);
}

/* ---- the callers' parts ---- */

/* Rounds of INFLIGHT async calls to w0, alternating fn_a and fn_b, each
   checked by `expect` (tag -> result). */
static int call_rounds(int rank, const char *fn_a, int64_t (*exp_a)(int64_t), const char *fn_b, int64_t (*exp_b)(int64_t)) {
    for (int round = 0; round < ROUNDS; round++) {
        dist_future_t *fs[INFLIGHT];
        int64_t tags[INFLIGHT];
        for (int k = 0; k < INFLIGHT; k++) {
            tags[k] = (int64_t)rank * 100000 + round * 100 + k;
            if (dist_rpc_async("w0", k % 2 ? fn_b : fn_a, dist_value_pack("[I]", tags[k]), &fs[k]) != DIST_OK)
                return WFAIL("round %d: async %s: %s", round, k % 2 ? fn_b : fn_a, MSG);
        }
        dist_future_wait_all(INFLIGHT, fs, 0);
        for (int k = 0; k < INFLIGHT; k++) {
            const char *fn = k % 2 ? fn_b : fn_a;
            int64_t got = -1, want = (k % 2 ? exp_b : exp_a)(tags[k]);
            dist_result res = dist_future_result(fs[k]);
            if (res != DIST_OK) return WFAIL("round %d: w0's '%s' (tag %lld): %s: %s", round, fn, (long long)tags[k], dist_result_name(res), dist_future_error(fs[k]));
            if (dist_value_get_int(dist_future_value(fs[k]), &got) != DIST_OK || got != want)
                return WFAIL("round %d: w0's '%s' (tag %lld) answered %lld, want %lld", round, fn, (long long)tags[k], (long long)got, (long long)want);
        }
        for (int k = 0; k < INFLIGHT; k++) dist_future_free(fs[k]);
    }
    return 0;
}

static int64_t exp_outer1(int64_t t) { return t * 2; }
static int64_t exp_inner1(int64_t t) { return t + 7; }

/* w0 serves; w1 and w2 call. */
static int fn_mutex(int rank) {
    if (rank == 0) return 0;
    return call_rounds(rank, "outer1", exp_outer1, "inner1", exp_inner1);
}

static int fn_no_grad(int rank) {
    if (rank == 0) return 0;
    return call_rounds(rank, "outer2", train_expect, "train", train_expect);
}

/* y of a forward: 400 - k for a whole k in [lo, hi]; k, or -1. */
static int forward_k(const dist_value_t *v, int lo, int hi, float *y) {
    dist_tensor_t *t = dist_tensor_from_value(v);
    float f = t && dist_tensor_numel(t) == 1 ? dist_tensor_item(t) : -1.0f, k = 4 * W0 - f;
    dist_tensor_release(t);
    *y = f;
    if (!t || k != (float)(int)k || (int)k < lo || (int)k > hi) return -1;
    return (int)k;
}

static dist_tensor_t *ones14(void) { return dist_tensor_full(2, (const int64_t[]){ 1, 4 }, 1.0f); }

/* w2 trains while forwards are in flight; w1 keeps forwards in flight; w0
   checks W at the end. */
static int fn_params(int rank) {
    if (rank == 0) {
        float w[4];
        int steps;
        for (int64_t t0 = now_ns(); !__atomic_load_n(&sh->done[1], __ATOMIC_SEQ_CST) || !__atomic_load_n(&sh->done[2], __ATOMIC_SEQ_CST); sleep_ms(2)) {
            if (__atomic_load_n(&sh->abort, __ATOMIC_SEQ_CST)) return 0;
            if (secs_since(t0) > scaled_s(30)) return WFAIL("w1 and w2 did not finish their parts within 30 s");
        }
        if (__atomic_load_n(&sh->abort, __ATOMIC_SEQ_CST)) return 0;     /* a step may be stuck on the lock */
        dist_params_read_enter();
        memcpy(w, dist_tensor_data(g_W), sizeof w);
        dist_params_read_exit();
        steps = __atomic_load_n(&sh->steps, __ATOMIC_SEQ_CST);
        for (int i = 0; i < 4; i++)
            if (w[i] != W0 - LR * (float)steps)
                return WFAIL("after %d SGD steps (lr %.2f, gradient 1) W[%d] is %.9g, want exactly %.9g", steps, (double)LR, i, (double)w[i], (double)(W0 - LR * (float)steps));
        snprintf(sh->note[0], sizeof sh->note[0], "W = %.2f after %d steps", (double)w[0], steps);
        return 0;
    }
    if (rank == 1) {
        for (int round = 0; round < ROUNDS; round++) {
            dist_future_t *fs[INFLIGHT];
            dist_tensor_t *x = ones14();
            for (int k = 0; k < INFLIGHT; k++)
                if (dist_rpc_async("w0", "forward", dist_value_pack("[v]", dist_value_from_tensor(x)), &fs[k]) != DIST_OK)
                    return WFAIL("round %d: async forward: %s", round, MSG);
            dist_tensor_release(x);
            dist_future_wait_all(INFLIGHT, fs, 0);
            for (int k = 0; k < INFLIGHT; k++) {
                dist_result res = dist_future_result(fs[k]);
                float y;
                if (res != DIST_OK) return WFAIL("round %d: w0's 'forward': %s: %s", round, dist_result_name(res), dist_future_error(fs[k]));
                if (forward_k(dist_future_value(fs[k]), 0, STEPS, &y) < 0)
                    return WFAIL("round %d: forward answered %.9g, want 400 - k for a whole k in 0..%d (a consistent W)", round, (double)y, STEPS);
                dist_future_free(fs[k]);
            }
        }
        return 0;
    }
    /* rank 2: the trainer */
    dist_value_t *pv = NULL;
    dist_rref_t *rr = NULL;
    dist_remote_optim_t *opt = NULL;
    dist_result res;
    double slowest = 0;
    if ((res = dist_rpc_sync("w0", "params", NULL, &pv)) != DIST_OK) return WFAIL("params: %s: %s", dist_result_name(res), MSG);
    if (dist_value_get_rref(dist_value_item(pv, 0), &rr) != DIST_OK || !rr) return WFAIL("params: item 0 is no reference: %s", MSG);
    rr = dist_rref_keep(rr);
    dist_value_free(pv);
    if ((res = dist_remote_optim_sgd(1, &rr, LR, 0.0f, 0.0f, &opt)) != DIST_OK) return WFAIL("dist_remote_optim_sgd: %s: %s", dist_result_name(res), MSG);
    for (int s = 0; s < STEPS; s++) {
        dist_future_t *fs[4];
        dist_tensor_t *x = ones14(), *y, *loss;
        dist_value_t *v = NULL;
        int64_t ctx = 0, t0;
        float yv;
        for (int k = 0; k < 4; k++)
            if (dist_rpc_async("w0", "forward", dist_value_pack("[v]", dist_value_from_tensor(x)), &fs[k]) != DIST_OK) return WFAIL("step %d: async forward: %s", s, MSG);
        if ((res = dist_autograd_context_begin(&ctx)) != DIST_OK) return WFAIL("step %d: context_begin: %s: %s", s, dist_result_name(res), MSG);
        if ((res = dist_rpc_sync("w0", "forward", dist_value_pack("[v]", dist_value_from_tensor(x)), &v)) != DIST_OK)
            return WFAIL("step %d: forward in a context: %s: %s", s, dist_result_name(res), MSG);
        if (forward_k(v, s, s, &yv) != s) return WFAIL("step %d: forward in a context answered %.9g, want exactly %.9g (after %d steps)", s, (double)yv, (double)(4 * W0 - s), s);
        y = dist_tensor_from_value(v);
        dist_value_free(v);
        if (!y || !dist_tensor_requires_grad(y)) return WFAIL("step %d: forward's result in a context does not require grad: %s", s, MSG);
        loss = dist_tensor_sum(y);
        if ((res = dist_autograd_backward(ctx, loss)) != DIST_OK) return WFAIL("step %d: dist_autograd_backward: %s: %s", s, dist_result_name(res), MSG);
        t0 = now_ns();
        if ((res = dist_remote_optim_step(opt, ctx)) != DIST_OK) return WFAIL("step %d: dist_remote_optim_step: %s after %.2f s: %s", s, dist_result_name(res), secs_since(t0), MSG);
        if (secs_since(t0) > slowest) slowest = secs_since(t0);
        __atomic_store_n(&sh->steps, s + 1, __ATOMIC_SEQ_CST);
        if ((res = dist_autograd_context_end(ctx)) != DIST_OK) return WFAIL("step %d: context_end: %s: %s", s, dist_result_name(res), MSG);
        dist_tensor_release(loss); dist_tensor_release(y); dist_tensor_release(x);
        dist_future_wait_all(4, fs, 0);
        for (int k = 0; k < 4; k++) {
            float f;
            if ((res = dist_future_result(fs[k])) != DIST_OK) return WFAIL("step %d: w0's 'forward' (async): %s: %s", s, dist_result_name(res), dist_future_error(fs[k]));
            if (forward_k(dist_future_value(fs[k]), s, s + 1, &f) < 0)
                return WFAIL("step %d: an async forward answered %.9g, want 400 - k for k %d or %d", s, (double)f, s, s + 1);
            dist_future_free(fs[k]);
        }
    }
    if (slowest > scaled_s(5.0)) return WFAIL("an optimizer step took %.2f s (more than 5 s)", slowest);
    snprintf(sh->note[2], sizeof sh->note[2], "slowest step %.0f ms", slowest * 1e3);
    dist_remote_optim_free(opt);
    dist_rref_free(rr);
    return 0;
}

/* Every worker starts a chain (chain id = rank + 1 + 10 * round) and
   waits for it. */
static int fn_chain(int rank) {
    for (int round = 0; round < CHAIN_ROUNDS; round++) {
        int64_t chain = rank + 1 + 10 * round, got = -1, want;
        int first = chain_next(rank);
        char to[16];
        dist_value_t *r = NULL;
        dist_result res;
        snprintf(to, sizeof to, "w%d", first);
        if ((res = dist_rpc_sync(to, "chain", dist_value_pack("[II]", (int64_t)CHAIN_DEPTH, chain), &r)) != DIST_OK)
            return WFAIL("round %d: chain %lld (%d levels) from w%d: %s: %s", round, (long long)chain, CHAIN_DEPTH, rank, dist_result_name(res), MSG);
        want = chain_expect(first, CHAIN_DEPTH, chain);
        if (dist_value_get_int(r, &got) != DIST_OK || got != want)
            return WFAIL("round %d: chain %lld answered %lld, want %lld", round, (long long)chain, (long long)got, (long long)want);
        dist_value_free(r);
    }
    return 0;
}

/* ---- the launcher ---- */
typedef int (*worker_fn)(int rank);
typedef struct { int threads; worker_fn fn; } job_arg;

static int all_done(void) {
    for (int r = 0; r < NW; r++) if (!__atomic_load_n(&sh->done[r], __ATOMIC_SEQ_CST)) return 0;
    return 1;
}

/* A worker: its part, then (once every worker has done its part) a
   graceful shutdown; when any worker failed, it leaves at once (_exit: a
   handler of w0 may be deadlocked, which a shutdown would wait for). */
static int worker_main(int r, int port, int lfd, void *p) {
    const job_arg *a = (const job_arg *)p;
    int bad;
    dist_result res;
    g_rank = r;
    rank_alarm((unsigned)(40 * g_scale));
    init_M();
    register_all();
    if (r == 0) {
        g_W = dist_tensor_full(2, (const int64_t[]){ 1, 4 }, W0);
        dist_tensor_set_requires_grad(g_W, 1);
    }
    res = rpc_worker_init(r, NW, port, lfd, a->threads, NULL, scaled(10000));
    if (res != DIST_OK) { WFAIL("dist_rpc_init: %s: %s", dist_result_name(res), MSG); _exit(1); }
    bad = a->fn(r);
    __atomic_store_n(&sh->done[r], 1, __ATOMIC_SEQ_CST);    /* also after a failure: the others wait for it, not longer */
    for (int64_t t0 = now_ns(); !all_done(); sleep_ms(2))
        if (secs_since(t0) > scaled_s(30)) { bad |= WFAIL("w%d: the others did not finish their parts within 30 s", r); break; }
    if (bad || __atomic_load_n(&sh->abort, __ATOMIC_SEQ_CST)) { fflush(NULL); _exit(bad ? 1 : 0); }
    res = dist_rpc_shutdown(1);
    if (res != DIST_OK) return WFAIL("graceful shutdown: %s: %s", dist_result_name(res), MSG);
    dist_tensor_release(g_W);
    return 0;
}

static double run_job(int threads, worker_fn fn) {
    int64_t t0 = now_ns();
    job_arg a = { threads, fn };
    memset(sh, 0, sizeof *sh);
    if (run_workers(NW, worker_main, &a, 45, -1, NULL) != 0) return 0;
    for (int r = 0; r < NW; r++) if (sh->fail[r][0]) case_bad("worker %d: %s", r, sh->fail[r]);
    for (int r = 0; r < NW; r++) if (sh->hfail[r][0]) case_bad("worker %d's first handler failure: %s", r, sh->hfail[r]);
    return secs_since(t0);
}

int main(void) {
    static char names[8][300];
    static const struct { const char *what; worker_fn fn; } cases[] = {
        { "mutex: w0's outer holds a user mutex M across an rpc_sync while inner calls that need M arrive (8 in flight from w1 and w2, 10 rounds): "
          "inner never runs on M's holder, no deadlock, every result exact", fn_mutex },
        { "no_grad: w0's outer holds no_grad across an rpc_sync to w1 that calls back w0's train (and train called directly, 8 in flight, 10 rounds): "
          "train's backward works and its gradient is exact, outer's no_grad survives its wait", fn_no_grad },
        { "parameter lock: w0's forward holds dist_params_read_enter across an rpc_sync to w1 while w2 trains with a distributed SGD on w0's W "
          "(10 steps, forwards in flight): no deadlock, W consistent under the read lock and exact at the end", fn_params },
        { "chains: three chains of nested calls, 8 levels deep each, at once between w0 and w1 (5 rounds): all complete, every level exact", fn_chain },
    };
    int64_t t0;
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    signal(SIGPIPE, SIG_IGN);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    t0 = now_ns();
    for (int c = 0; c < 4; c++)
        for (int ti = 0; ti < 2; ti++) {
            int threads = ti ? 4 : 1;
            char extra[700];
            double el;
            snprintf(names[c * 2 + ti], sizeof names[0], "num_threads=%d, n=3, %s", threads, cases[c].what);
            case_begin(names[c * 2 + ti]);
            el = run_job(threads, cases[c].fn);
            extra[0] = 0;
            if (cases[c].fn == fn_params) snprintf(extra, sizeof extra, "%s; %s", sh->note[0], sh->note[2]);
            if (cases[c].fn == fn_chain) snprintf(extra, sizeof extra, "peak threads: w0 %d, w1 %d", sh->peak_threads[0], sh->peak_threads[1]);
            if (g_cur_failed && sh->nested_inner) case_bad("(%d call(s) ran on the thread of an 'outer' that held M)", sh->nested_inner);
            case_end(el, extra);
        }
    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
