// TIMEOUT: 60
// ALONE: a stopped rank must be noticed within bounded times
// TRANSPORTS: auto tcp mixed
// WINDOWS: no, its cases stop a rank with SIGSTOP and resume it with SIGCONT
/* test_stall.c - a rank that stops (SIGSTOP) in the middle of the job: the
   others must time out, each with DIST_ERR_TIMEOUT within the timeout +
   2 s, and a message that names the operation, its sequence number and
   the rank it waited on; afterwards (SIGCONT, or SIGKILL) everyone ends
   cleanly.

   How a case runs.  The parent forks the ranks (fork + dist_init over
   tcp://127.0.0.1, cfg.timeout_ms = TMO = 2 s x DIST_TIMEOUT_SCALE).
   Every rank first makes some calls that succeed (warm-up), so the stalled
   call has a known sequence number: collectives are numbered per
   communicator, 1, 2, ... in the order they are called (every rank the
   same); sends and receives are numbered per rank and communicator, sends
   and receives apart ("recv #4 from rank 1").  Then the rank to be stopped
   (S) and the others reach the call (a send to S starts only once S is
   stopped: a live S would take the data at once):
     at the call   S says in shared memory that it is about to make the
                   call and waits there; once the others are inside theirs
                   (100 ms after they said so) the parent SIGSTOPs S.  (A
                   small collective that S had really entered would have
                   finished at once, S's part being sent eagerly: S is
                   stopped before it sends anything.)
     mid           the others are inside; S enters last with a large
                   buffer and the parent SIGSTOPs it 20 ms later, in the
                   middle of the transfer.
   Every other rank must then see its call fail with DIST_ERR_TIMEOUT,
   between 0.5 x TMO after it began and TMO + 2 s after the stop, with a
   sentence (dist_error_message of the communicator) that contains
     - the operation and its number: "all_reduce #4", "recv #4", ...
     - the rank it waited on: "rank S", or, in a tree or a ring, a rank
       that was itself waiting for S (how many name S is printed).
   Then the parent resumes S (SIGCONT: S makes or finishes its call, which
   must return within TMO + 2 s, whatever it returns) or kills it
   (SIGKILL), and every rank still alive calls dist_destroy (within TMO +
   2 s) and exits 0; LeakSanitizer checks them under make sanitize.
   The parent prints one line per case with the sentences the others got.

   Cases: all_reduce 4 KiB (n=3, S=1, at the call), all_reduce 64 MiB
   (n=4, S=2, mid; the algorithm the transport picks), all_reduce 64 MiB
   DIST_ALGO=ring (n=3, S=0, mid), broadcast 4 KiB from S as root (n=4,
   S=0, and n=3, S=1, at the call), barrier (n=3, S=2, and n=4, S=1, at
   the call), recv and irecv+wait from S (n=3, S=1: S stopped before its
   send), and a 64 MiB send to S (n=3, S=2: S stopped before it receives,
   so the data cannot all be taken). */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "faultutil.h"

TSAN_NO_EXIT_SLEEP();

#define MAXW 4
#define MAXJOBS 3

static int TMO_MS = 2000;
static double BOUND_S = 4.0;

enum { OP_ALLREDUCE, OP_BCAST, OP_BARRIER, OP_RECV, OP_IRECV, OP_SEND };
static const char *const op_names[] = { "all_reduce", "broadcast", "barrier", "recv", "recv", "send" };
static const char *const op_titles[] = { "all_reduce", "broadcast", "barrier", "recv", "irecv+wait", "send" };
enum { AT_CALL, MID };
enum { RESUME, KILL };

typedef struct {
    int op, world, stopped, when;
    size_t count;          /* elements: float32 (collectives, send), int32 (recv) */
    const char *algo;      /* DIST_ALGO or NULL */
    int warm;              /* successful calls of the same kind before the stalled one */
    int after;             /* RESUME or KILL */
} scase;

#define MiB(x) ((size_t)(x) << 18)

static const scase cases[] = {
    { OP_ALLREDUCE, 3, 1, AT_CALL, 1024, NULL, 3, RESUME },
    { OP_ALLREDUCE, 4, 2, MID, MiB(64), NULL, 2, KILL },
    { OP_ALLREDUCE, 3, 0, MID, MiB(64), "ring", 1, RESUME },
    { OP_BCAST, 4, 0, AT_CALL, 1024, NULL, 4, RESUME },
    { OP_BCAST, 3, 1, AT_CALL, 1024, NULL, 2, KILL },
    { OP_BARRIER, 3, 2, AT_CALL, 0, NULL, 5, RESUME },
    { OP_BARRIER, 4, 1, AT_CALL, 0, NULL, 1, KILL },
    { OP_RECV, 3, 1, AT_CALL, 16, NULL, 3, RESUME },
    { OP_IRECV, 3, 1, AT_CALL, 16, NULL, 2, KILL },
    { OP_SEND, 3, 2, AT_CALL, MiB(64), NULL, 2, RESUME },
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Case i has large buffers (at most one such job runs at a time). */
static int heavy(int i) { return cases[i].count >= MiB(4); }

typedef struct {
    int ready, entering;
    call_rec call;          /* the stalled call (S: its side of it) */
    destroy_rec destroy;
    atomic_int claimed;
    char fail[400];
} rrec;

typedef struct {
    int64_t stop_ns, resume_ns;
    int go;                 /* at the call: S may make its call now */
    int stopped;            /* S is stopped (a send to it starts only then) */
    int resumed;            /* the parent resumed or killed S */
    rrec r[MAXW];
} jshared;

static jshared *g_sh;
DEFINE_FAIL_AT(MAXW, &g_sh->r[rank].claimed, g_sh->r[rank].fail)

static void case_name(int idx, char *out, size_t cap) {
    const scase *k = &cases[idx];
    char size[32] = "";
    if (k->op != OP_BARRIER) {
        size_t b = k->count * 4;
        if (b >= ((size_t)1 << 20)) snprintf(size, sizeof size, " %zu MiB", b >> 20);
        else if (b >= 1024) snprintf(size, sizeof size, " %zu KiB", b >> 10);
        else snprintf(size, sizeof size, " %zu B", b);
    }
    snprintf(out, cap, "#%d %s%s%s%s n=%d: rank %d stopped %s%s, then %s", idx + 1, op_titles[k->op], size,
             k->algo ? " DIST_ALGO=" : "", k->algo ? k->algo : "", k->world, k->stopped,
             k->when == MID ? "mid-transfer" : "at the call",
             k->op == OP_BCAST ? " (it is the root)" : k->op == OP_RECV || k->op == OP_IRECV ? " (it would send)" :
             k->op == OP_SEND ? " (it would receive)" : "",
             k->after == RESUME ? "SIGCONT" : "SIGKILL");
}

/* The sequence number the stalled call must carry on rank r. */
static int expected_seq(const scase *k) {
    /* collectives: warm-up calls + 1; point-to-point: the warm-up calls of
       that direction on this rank + 1 */
    return k->warm + 1;
}

/* ---- rank side ------------------------------------------------------------ */

/* The stalled call (or, for S, its side of it). */
static dist_result run_op(const scase *k, dist_t *w, int rank, void *buf) {
    int s = k->stopped;
    dist_req_t *rq = NULL;
    dist_result res;
    switch (k->op) {
    case OP_ALLREDUCE: return dist_all_reduce(w, buf, k->count, DIST_FLOAT32, DIST_SUM);
    case OP_BCAST: return dist_broadcast(w, buf, k->count, DIST_FLOAT32, s);
    case OP_BARRIER: return dist_barrier(w);
    case OP_RECV: case OP_IRECV:
        if (rank == s) {      /* S sends to every other rank */
            for (int r = 0; r < k->world; r++)
                if (r != s && (res = dist_send(w, buf, k->count, DIST_INT32, r, 9)) != DIST_OK) return res;
            return DIST_OK;
        }
        if (k->op == OP_RECV) return dist_recv(w, buf, k->count, DIST_INT32, s, 9);
        if ((res = dist_irecv(w, buf, k->count, DIST_INT32, s, 9, &rq)) != DIST_OK) return res;
        return dist_wait(rq);
    case OP_SEND:
        if (rank == s) {      /* S receives from every other rank, one after the other */
            for (int r = 0; r < k->world; r++)
                if (r != s && (res = dist_recv(w, buf, k->count, DIST_FLOAT32, r, 9)) != DIST_OK) return res;
            return DIST_OK;
        }
        return dist_send(w, buf, k->count, DIST_FLOAT32, s, 9);
    default: return DIST_ERR_INVALID;
    }
}

/* Calls that succeed before the stalled one. */
static int warm_up(const scase *k, dist_t *w, int rank) {
    int32_t x[4] = { 1, 2, 3, 4 };
    float f[4] = { 1, 2, 3, 4 };
    int s = k->stopped;
    for (int i = 0; i < k->warm; i++) {
        dist_result res = DIST_OK;
        switch (k->op) {
        case OP_ALLREDUCE: case OP_BCAST: case OP_BARRIER:
            /* any collectives count: a mix */
            res = i % 3 == 2 ? dist_barrier(w) : i % 3 == 1 ? dist_broadcast(w, f, 4, DIST_FLOAT32, i % k->world)
                                                           : dist_all_reduce(w, f, 4, DIST_FLOAT32, DIST_MAX);
            break;
        case OP_RECV: case OP_IRECV:     /* the others receive from S */
            if (rank == s) {
                for (int r = 0; r < k->world && res == DIST_OK; r++) if (r != s) res = dist_send(w, x, 4, DIST_INT32, r, 1);
            } else {
                res = dist_recv(w, x, 4, DIST_INT32, s, 1);
            }
            break;
        case OP_SEND:                    /* the others send to S */
            if (rank == s) {
                for (int r = 0; r < k->world && res == DIST_OK; r++) if (r != s) res = dist_recv(w, x, 4, DIST_INT32, r, 1);
            } else {
                res = dist_send(w, x, 4, DIST_INT32, s, 1);
            }
            break;
        }
        if (res != DIST_OK) return FAIL("warm-up call %d: %s: %s", i + 1, dist_result_name(res), dist_error_message(w));
    }
    return 0;
}

/* A rank of the job (job_start). */
static int rank_main(const fault_job *j, int rank, int port, int lfd) {
    const scase *k = j->k;
    rrec *me = &((jshared *)j->sh)->r[rank];
    int n = k->world, s = k->stopped;
    char url[64];
    dist_config cfg;
    dist_t *w = NULL;
    dist_result res;
    size_t elems = k->count ? k->count : 1;
    float *buf;
    g_sh = j->sh;
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg, url, sizeof url, port, n, rank, TMO_MS, lfd);
    if (k->algo) setenv("DIST_ALGO", k->algo, 1);
    alarm((unsigned)(scaled_s(25) + 0.5));
    if ((res = dist_init(&w, &cfg)) != DIST_OK) return FAIL("dist_init: %s: %s", dist_result_name(res), dist_error_message(NULL));
    if (warm_up(k, w, rank)) return 1;
    if ((buf = malloc(elems * sizeof(float))) == NULL) return FAIL("out of memory");
    for (size_t i = 0; i < elems; i++) buf[i] = (float)(rank + 1);
    set_flag(&me->ready);
    for (int r = 0; r < n; r++)
        if (await_flag(&g_sh->r[r].ready, 1, scaled(10000))) return FAIL("rank %d never got ready", r);
    if (rank == s) {
        if (k->when == MID)
            for (int r = 0; r < n; r++)
                if (r != s && await_flag(&g_sh->r[r].entering, 1, scaled(10000))) return FAIL("rank %d never entered", r);
        set_flag(&me->entering);
        if (k->when == AT_CALL && await_flag(&g_sh->go, 1, scaled(30000))) return FAIL("the parent never let this rank go");
    } else {
        /* a send to S begins once S is stopped: a live S would take the
           data at once (its progress thread buffers it) */
        if (k->op == OP_SEND && await_flag(&g_sh->stopped, 1, scaled(10000))) return FAIL("rank %d was never stopped", s);
        set_flag(&me->entering);
    }
    call_begin(&me->call);
    res = run_op(k, w, rank, buf);
    call_end(&me->call, res);
    copy_msg(me->call.msg, res == DIST_OK ? "" : dist_error_message(w));
    set_flag(&me->call.returned);
    free(buf);
    /* the others wait until the parent has resumed or killed S */
    if (rank != s && await_flag(&g_sh->resumed, 1, (int)(BOUND_S * 3000))) FAIL("the parent never resumed rank %d", s);
    destroy_timed(&me->destroy, w);
    return 0;
}

/* ---- parent side ------------------------------------------------------------ */

static int g_cases, g_passed;

static int start_job(int slot, int idx) { return job_start(slot, idx, &cases[idx], cases[idx].world, sizeof(jshared), 30, rank_main); }

static int all_set(const fault_job *j, size_t field, int except) {
    jshared *sh = j->sh;
    for (int r = 0; r < j->n; r++)
        if (r != except && !__atomic_load_n((int *)((char *)&sh->r[r] + field), __ATOMIC_SEQ_CST)) return 0;
    return 1;
}

/* Moves the case on: stops S, resumes or kills it; reaps.  1 when done.
   The job's phase: 0 waiting to stop S, 1 stopped, 2 resumed (t_mark:
   when the wait to stop S began, then when S was stopped). */
static int poll_job(int slot) {
    fault_job *j = &g_jobs[slot];
    const scase *k = j->k;
    jshared *sh = j->sh;
    int s = k->stopped;
    int64_t now = now_ns();
    if (j->phase == 0 && !j->reaped[s] &&
        (k->op == OP_SEND ? __atomic_load_n(&sh->r[s].entering, __ATOMIC_SEQ_CST) : all_set(j, offsetof(rrec, entering), -1))) {
        if (!j->t_mark) j->t_mark = now;
        /* the others have been inside for 100 ms (at the call), or S for 20 ms (mid) */
        if (now - j->t_mark >= (k->when == MID ? 20 : 100) * 1000000LL) {
            kill(j->pid[s], SIGSTOP);
            sh->stop_ns = now_ns();
            __atomic_store_n(&sh->stopped, 1, __ATOMIC_SEQ_CST);
            j->phase = 1;
            j->t_mark = now;
        }
    }
    if (j->phase == 1) {
        /* once every other rank returned (or far past the bound), S goes on */
        if (all_set(j, offsetof(rrec, call.returned), s) || now - sh->stop_ns > (int64_t)(BOUND_S * 2e9)) {
            sh->resume_ns = now_ns();
            __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
            if (k->after == KILL) kill(j->pid[s], SIGKILL);
            else kill(j->pid[s], SIGCONT);
            __atomic_store_n(&sh->resumed, 1, __ATOMIC_SEQ_CST);
            j->phase = 2;
        }
    }
    return job_reaped(slot);
}

/* "op #N" in msg, N not followed by another digit. */
static int names_seq(const char *msg, const char *op, int seq) {
    char prefix[40];
    snprintf(prefix, sizeof prefix, "%s #", op);
    return names_num(msg, prefix, seq);
}

static void judge_job(int slot) {
    fault_job *j = &g_jobs[slot];
    const scase *k = j->k;
    jshared *sh = j->sh;
    int s = k->stopped, seq = expected_seq(k);
    char name[200], extra[1500];
    size_t o = 0;
    case_name(j->idx, name, sizeof name);
    case_begin(name);
    g_cases++;
    extra[0] = 0;
    if (j->hung) case_bad("still running after %.0f s: killed", scaled_s(30));
    if (!sh->stop_ns) case_bad("rank %d was never stopped (the ranks never all reached the call)", s);
    for (int r = 0; r < j->n; r++) {
        int st = j->st[r];
        if (st == -1) { case_bad("rank %d: fork or waitpid failed", r); continue; }
        if (r == s && k->after == KILL && sh->resume_ns) {
            if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) case_bad("rank %d (stopped, then killed) ended with status %d", r, st);
        } else {
            case_bad_status(r, st, sh->r[r].fail[0] ? "" : " (a sanitizer's report?)");
        }
        if (sh->r[r].fail[0]) case_bad("rank %d: %s", r, sh->r[r].fail);
    }
    int named_stopped = 0;
    for (int r = 0; r < j->n && sh->stop_ns; r++) {
        const call_rec *rr = &sh->r[r].call;
        double took, after;
        if (r == s || sh->r[r].fail[0]) continue;
        if (!rr->returned) { case_bad("rank %d: its %s never returned", r, op_titles[k->op]); continue; }
        took = (double)(rr->t_ret - rr->t_enter) / 1e9;
        after = (double)(rr->t_ret - (rr->t_enter > sh->stop_ns ? rr->t_enter : sh->stop_ns)) / 1e9;
        o += (size_t)snprintf(extra + o, o < sizeof extra ? sizeof extra - o : 0, "%s rank %d %.2f s: \"%s\"", o ? ";" : "", r, took,
                              rr->msg);
        if (rr->res != DIST_ERR_TIMEOUT) {
            case_bad("rank %d: %s returned %s after %.2f s (\"%s\"), expected DIST_ERR_TIMEOUT", r, op_titles[k->op],
                     dist_result_name((dist_result)rr->res), took, rr->msg);
            if (rr->res == DIST_OK) continue;
        }
        if (took < TMO_MS / 2000.0) case_bad("rank %d: failed after only %.2f s (timeout %.1f s): \"%s\"", r, took, TMO_MS / 1000.0, rr->msg);
        if (after > BOUND_S) case_bad("rank %d: returned %.2f s after the stop (bound: timeout + 2 s = %.1f s)", r, after, BOUND_S);
        if (!names_seq(rr->msg, op_names[k->op], seq))
            case_bad("rank %d: \"%s\" does not name the operation and its number (\"%s #%d\")", r, rr->msg, op_names[k->op], seq);
        /* Each names the rank it waited on: the stopped one, or (in a
           tree or ring) a rank that was itself waiting for it. */
        if (names_rank(rr->msg, s)) named_stopped++;
        else if (!strstr(rr->msg, "rank ")) case_bad("rank %d: \"%s\" names no rank", r, rr->msg);
        judge_destroy(case_bad, r, "", &sh->r[r].destroy, 1, BOUND_S, 0);
    }
    /* Reported, not judged: a rank whose timeout fires before the one
       waiting on S may pass its own sentence on first, so which ranks name
       S varies from run to run. */
    if (sh->stop_ns)
        o += (size_t)snprintf(extra + o, o < sizeof extra ? sizeof extra - o : 0, "; %d of %d name the stopped rank %d", named_stopped,
                              j->n - 1, s);
    if (k->after == RESUME && sh->resume_ns) {
        const call_rec *rr = &sh->r[s].call;
        judge_resumed(case_bad, s, op_titles[k->op], rr, &sh->r[s].destroy, sh->resume_ns, BOUND_S);
        if (rr->returned)
            snprintf(extra + o, o < sizeof extra ? sizeof extra - o : 0, "; resumed rank %d: %s after %.2f s%s%s%s", s,
                     dist_result_name((dist_result)rr->res), (double)(rr->t_ret - rr->t_enter) / 1e9, rr->msg[0] ? " \"" : "",
                     rr->msg, rr->msg[0] ? "\"" : "");
    }
    if (!g_cur_failed) g_passed++;
    case_end(secs_since(j->t0), extra);
    munmap(sh, sizeof *sh);
}

int main(int argc, char **argv) {
    job_pool pool = { .ncases = NCASES, .tick_ms = 1, .name = case_name, .heavy = heavy, .start = start_job, .poll = poll_job,
                      .finish = judge_job };
    int64_t t0 = now_ns();
    fault_test_start();
    TMO_MS = scaled(2000);
    BOUND_S = TMO_MS / 1000.0 + scaled_s(2);
    printf("# %d cases, transport %s, cfg.timeout_ms %d, bound %.1f s\n", NCASES,
           getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto", TMO_MS, BOUND_S);
    if (run_jobs(&pool, "STALL_JOBS", MAXJOBS, argc, argv) != 0) return 1;
    printf("stalls: %d cases, %d passed (%.1f s)\n", g_cases, g_passed, secs_since(t0));
    return g_cases && g_passed == g_cases ? 0 : 1;
}
