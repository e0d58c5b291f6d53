// TIMEOUT: 120
// TRANSPORTS: auto tcp mixed
// WINDOWS: yes
/* test_faults.c - failure behaviour of point-to-point and dist_spawn.

   Each case runs in its own dist_spawn (world 2..4, short timeouts).  Ranks
   record what they saw (result, message, CLOCK_MONOTONIC times) in a
   MAP_SHARED mapping created before dist_spawn forks; the parent judges it
   and prints one line per case: "ok   NAME" or "FAIL NAME" plus details.
   Every rank also arms alarm() so that no rank outlives a case by much, and
   so dist_spawn always returns.

   Cases
   - a peer dies (_exit(0) without dist_destroy, or raise(SIGKILL)) while
     the others wait for it in a blocking dist_recv, a pending dist_irecv
     + dist_wait, or a DIST_ANY_SOURCE dist_recv: they fail with
     DIST_ERR_PEER_LOST within 1 s of the death, naming the dead rank.
     A SIGKILLed rank makes dist_spawn return 137 and SIGTERM the others,
     so there the survivors ignore SIGTERM (SIGKILL follows after 2 s,
     plenty to report within the 1 s bound).
   - a receive nobody sends to times out after cfg.timeout_ms with
     DIST_ERR_TIMEOUT, saying what it waited for; a message sent after the
     timeout is not written into the timed-out buffer, a new receive gets
     it, and the communicator keeps working (blocking and irecv+wait).
   - dist_destroy with a posted irecv never waited on (ranks started with
     fork + dist_init here, so dist_destroy's own result is checked).
   - after a peer is lost, sends and receives naming it fail at once with
     DIST_ERR_PEER_LOST, while the live ranks still talk to each other.
   - dist_spawn: one fn returns 3 while the others are blocked in a long
     receive -> dist_spawn returns 3 within 3 s; all return 0 -> 0. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef _WIN32
#  include <arpa/inet.h>
#  include <netinet/in.h>
#  include <sys/socket.h>
#  include <sys/wait.h>
#else
#  define SIGKILL 9     /* (for the code; the cases that raise it are left out there) */
#endif
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MAXR 8

/* ThreadSanitizer sleeps 1 s (atexit_sleep_ms) inside _exit() before the
   process really ends, which would make a rank that calls _exit(0) die a
   second after it recorded its death time. */
TSAN_NO_EXIT_SLEEP();

typedef struct {
    int reported;        /* this rank got to the end of its part */
    int result;          /* the dist_result it observed */
    int64_t t_ns;        /* when it observed it */
    double waited_s;     /* how long the call waited */
    char msg[400];       /* dist_error_message after the call */
    char fail[600];      /* first failure of this rank, if any */
} rank_report;

typedef struct {
    int64_t death_ns;    /* the dying rank, just before it dies */
    int64_t ret_ns;      /* spawn case: just before the failing fn returns */
    volatile int flag;   /* timeout case: rank 0 -> rank 1 "send now" */
    rank_report r[MAXR];
} shared_t;
static shared_t *sh;

/* FAIL(...) and OK(call) (testutil.h): each rank's first failure */
DEFINE_FAIL_AT(MAXR, NULL, sh->r[rank].fail)

static void record(dist_t *w, int rank, dist_result res, int64_t t0) {
    rank_report *rr = &sh->r[rank];
    rr->t_ns = now_ns();
    rr->result = res;
    rr->waited_s = (double)(rr->t_ns - t0) / 1e9;
    snprintf(rr->msg, sizeof rr->msg, "%s", dist_error_message(w));
}

/* ---- parent-side reporting (case_bad, case_end: testutil.h) ----------- */
static void begin(const char *name) {
    case_begin(name);
    memset(sh, 0, sizeof *sh);
}
static void check_rank_failures(int n) {
    for (int r = 0; r < n; r++)
        if (sh->r[r].fail[0]) case_bad("rank %d: %s", r, sh->r[r].fail);
}

/* ===========================================================================
   1. A peer dies while the others wait for it.
   =========================================================================== */
enum { DIE_EXIT, DIE_KILL };
enum { W_RECV, W_IRECV, W_ANY };
typedef struct { int dying, how, style; } death_arg;

static int fn_death(dist_t *w, void *p) {
    const death_arg *a = (const death_arg *)p;
    int rank = dist_rank(w), n = dist_world_size(w);
    int32_t token = rank, buf[4] = { -1, -1, -1, -1 };
    rank_alarm(30);
    if (rank == a->dying) {
        for (int s = 0; s < n; s++) {
            if (s == rank) continue;
            OK(dist_recv(w, &token, 1, DIST_INT32, s, 1));
        }
        sleep_ms(200);                       /* the others are inside their wait now */
        sh->death_ns = now_ns();
        if (a->how == DIE_EXIT) _exit(0);    /* no dist_destroy, no goodbye */
        raise(SIGKILL);
        return 99;                           /* not reached */
    }
    signal(SIGTERM, SIG_IGN);   /* dist_spawn SIGTERMs us when the killed rank is reaped */
    dist_req_t *req = NULL;
    if (a->style == W_IRECV) OK(dist_irecv(w, buf, 4, DIST_INT32, a->dying, 2, &req));
    OK(dist_send(w, &token, 1, DIST_INT32, a->dying, 1));
    int64_t t0 = now_ns();
    dist_result res;
    if (a->style == W_RECV) res = dist_recv(w, buf, 4, DIST_INT32, a->dying, 2);
    else if (a->style == W_IRECV) res = dist_wait(req);
    else res = dist_recv(w, buf, 4, DIST_INT32, DIST_ANY_SOURCE, 2);
    record(w, rank, res, t0);
    if (buf[0] != -1) return FAIL("the failed receive wrote into its buffer");
    sh->r[rank].reported = 1;
    return 0;
}

static void case_death(int n, int dying, int how, int style) {
    static const char *styles[] = { "blocking dist_recv", "pending dist_irecv + dist_wait", "DIST_ANY_SOURCE dist_recv" };
    char name[200];
    snprintf(name, sizeof name, "n=%d rank %d %s while the others wait in a %s: DIST_ERR_PEER_LOST within 1 s", n,
             dying, how == DIE_EXIT ? "calls _exit(0)" : "raises SIGKILL", styles[style]);
#ifdef _WIN32
    /* no signals; and dist_spawn ends the survivors at once (no SIGTERM
       to ignore), before they can record what their receive returned */
    if (how == DIE_KILL) { printf("left out on Windows: the case \"%s\" (no signals)\n", name); return; }
#endif
    begin(name);
    death_arg a = { dying, how, style };
    dist_config cfg = { 0 };
    cfg.timeout_ms = 4000;
    int64_t t0 = now_ns();
    int rc = spawn_job(n, fn_death, &a, &cfg);
    double el = secs_since(t0);
    int want_rc = how == DIE_EXIT ? 0 : 128 + SIGKILL;
    if (rc != want_rc) case_bad("dist_spawn returned %d (%s), expected %d", rc, spawn_job_error(), want_rc);
    check_rank_failures(n);
    if (!sh->death_ns) case_bad("rank %d never got to its death", dying);
    double worst = 0;
    char rs[32];
    snprintf(rs, sizeof rs, "rank %d", dying);
    for (int r = 0; r < n && sh->death_ns; r++) {
        if (r == dying) continue;
        rank_report *rr = &sh->r[r];
        if (!rr->reported) { case_bad("rank %d never reported (was it stopped before its receive returned?)", r); continue; }
        double after = (double)(rr->t_ns - sh->death_ns) / 1e9;
        if (rr->result != DIST_ERR_PEER_LOST)
            case_bad("rank %d: got %s after %.2f s (\"%s\"), expected DIST_ERR_PEER_LOST", r,
                dist_result_name((dist_result)rr->result), rr->waited_s, rr->msg);
        else if (after < 0)
            case_bad("rank %d: DIST_ERR_PEER_LOST %.3f s BEFORE rank %d died (\"%s\")", r, -after, dying, rr->msg);
        else if (after > 1.0)
            case_bad("rank %d: DIST_ERR_PEER_LOST %.3f s after the death (bound: 1 s)", r, after);
        if (rr->result == DIST_ERR_PEER_LOST && !strstr(rr->msg, rs))
            case_bad("rank %d: the message \"%s\" does not name %s", r, rr->msg, rs);
        if (after > worst) worst = after;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "slowest survivor saw it %.0f ms after the death", worst * 1e3);
    case_end(el, extra);
}

/* ===========================================================================
   2. A receive with no sender times out; a late message does not land in
      the timed-out buffer; the communicator keeps working.
   =========================================================================== */
#define TMO_MS 3000
#define TMO_N 16
static int wait_flag(int want, int rank) {
    int64_t t0 = now_ns();
    while (sh->flag < want) {
        if (secs_since(t0) > 15) return FAIL("rank 0 never signalled step %d", want);
        sleep_ms(1);
    }
    __sync_synchronize();
    return 0;
}

static int fn_timeout(dist_t *w, void *p) {
    int rank = dist_rank(w);
    (void)p;
    rank_alarm(40);
    if (rank == 1) {
        int32_t late[TMO_N], v = 0;
        for (int step = 1; step <= 2; step++) {
            if (wait_flag(step, rank)) return 1;
            int tag = step == 1 ? 7 : 17;
            for (int j = 0; j < TMO_N; j++) late[j] = tag * 1000 + j;
            OK(dist_send(w, late, TMO_N, DIST_INT32, 0, tag));     /* after rank 0 gave up */
            OK(dist_recv(w, &v, 1, DIST_INT32, 0, 9));              /* and back */
            if (v != 900 + step) return FAIL("message after the timeout: %d", v);
        }
        sh->r[1].reported = 1;
        return 0;
    }
    /* rank 0 */
    for (int step = 1; step <= 2; step++) {
        int tag = step == 1 ? 7 : 17;
        int32_t old[TMO_N + 4], fresh[TMO_N];
        memset(old, 0x5A, sizeof old);
        int64_t t0 = now_ns();
        dist_result res;
        if (step == 1) {
            res = dist_recv(w, old, TMO_N, DIST_INT32, 1, tag);
        } else {
            dist_req_t *r;
            OK(dist_irecv(w, old, TMO_N, DIST_INT32, 1, tag, &r));
            res = dist_wait(r);              /* frees r, whatever it returns */
        }
        record(w, 0, res, t0);
        const char *how = step == 1 ? "blocking dist_recv" : "dist_irecv + dist_wait";
        if (res != DIST_ERR_TIMEOUT)
            return FAIL("%s with no sender returned %s (%s), expected DIST_ERR_TIMEOUT", how, dist_result_name(res),
                        dist_error_message(w));
        double waited = sh->r[0].waited_s;
        if (waited < TMO_MS / 1000.0 || waited > TMO_MS / 1000.0 + 1.5)
            return FAIL("%s timed out after %.2f s; cfg.timeout_ms is %d", how, waited, TMO_MS);
        char want[32];
        snprintf(want, sizeof want, "tag %d", tag);
        const char *m = dist_error_message(w);
        if (!strstr(m, "rank 1") || !strstr(m, want) || !strstr(m, "recv"))
            return FAIL("%s: the message \"%s\" should say it was a recv from rank 1 with %s", how, m, want);
        __sync_synchronize();
        sh->flag = step;                     /* rank 1 sends now */
        memset(fresh, 0, sizeof fresh);
        OK(dist_recv(w, fresh, TMO_N, DIST_INT32, 1, tag));
        for (int j = 0; j < TMO_N; j++)
            if (fresh[j] != tag * 1000 + j) return FAIL("%s: the late message, received anew, has [%d] = %d", how, j, fresh[j]);
        for (size_t j = 0; j < sizeof old / sizeof old[0]; j++)
            if (old[j] != 0x5A5A5A5A)
                return FAIL("%s: the timed-out buffer was written after the timeout ([%zu] = %d)", how, j, old[j]);
        int32_t v = 900 + step;
        OK(dist_send(w, &v, 1, DIST_INT32, 1, 9));
    }
    sh->r[0].reported = 1;
    return 0;
}

static void case_timeout(void) {
    begin("n=2 recv with no sender: DIST_ERR_TIMEOUT after cfg.timeout_ms (3 s, blocking and irecv+wait), "
          "no late write into the old buffer, communicator still works");
    dist_config cfg = { 0 };
    cfg.timeout_ms = TMO_MS;
    int64_t t0 = now_ns();
    int rc = spawn_job(2, fn_timeout, NULL, &cfg);
    double el = secs_since(t0);
    if (rc != 0) case_bad("dist_spawn returned %d: %s", rc, spawn_job_error());
    check_rank_failures(2);
    for (int r = 0; r < 2; r++)
        if (!sh->r[r].reported && !sh->r[r].fail[0]) case_bad("rank %d did not finish", r);
    char extra[600];
    snprintf(extra, sizeof extra, "last timeout after %.2f s: \"%s\"", sh->r[0].waited_s, sh->r[0].msg);
    case_end(el, extra);
}

/* ===========================================================================
   3. dist_destroy with a posted irecv never waited on.  The ranks are
      forked here and call dist_init/dist_destroy themselves, so the
      result of dist_destroy is checked; they end with exit() so that
      LeakSanitizer (make sanitize) checks that destroy reclaimed it all.
   =========================================================================== */
static int destroy_child(int rank, int port, int lfd, void *arg) {
    char url[64];
    dist_t *w = NULL;
    dist_config cfg = { 0 };
    (void)arg;
    tcp_config(&cfg, url, sizeof url, port, 2, rank, 5000, lfd);
    rank_alarm(30);
    dist_result res = dist_init(&w, &cfg);
    if (res != DIST_OK) return fail_at(rank, __LINE__, "dist_init: %s: %s", dist_result_name(res), dist_error_message(NULL));
    int32_t *buf = malloc(64 * sizeof *buf), one = 1;
    if (!buf) return fail_at(rank, __LINE__, "out of memory");
    memset(buf, 0x5A, 64 * sizeof *buf);
    dist_req_t *req = NULL;
    if (rank == 0) {
        /* rank 1's tag-8 message came before this one on the same connection */
        res = dist_recv(w, &one, 1, DIST_INT32, 1, 9);
        if (res == DIST_OK) res = dist_irecv(w, buf, 64, DIST_INT32, 1, 5, &req);   /* never matched, never waited */
        if (res == DIST_OK) res = dist_irecv(w, buf + 32, 1, DIST_INT32, DIST_ANY_SOURCE, 6, &req); /* nor this */
    } else {
        res = dist_send(w, &one, 1, DIST_INT32, 0, 8);                /* an unexpected message nobody receives */
        if (res == DIST_OK) res = dist_send(w, &one, 1, DIST_INT32, 0, 9);
    }
    if (res != DIST_OK) return fail_at(rank, __LINE__, "posting: %s: %s", dist_result_name(res), dist_error_message(w));
    int64_t t0 = now_ns();
    res = dist_destroy(w);
    double el = secs_since(t0);
    if (res != DIST_OK) return fail_at(rank, __LINE__, "dist_destroy returned %s: %s", dist_result_name(res), dist_error_message(NULL));
    if (el > 4.0) return fail_at(rank, __LINE__, "dist_destroy took %.2f s", el);
    for (int j = 0; j < 64; j++)
        if (buf[j] != 0x5A5A5A5A) return fail_at(rank, __LINE__, "the abandoned irecv's buffer was written ([%d])", j);
    free(buf);
    sh->r[rank].reported = 1;
    sh->r[rank].waited_s = el;
    return 0;
}

#ifdef _WIN32
/* Windows has no fork: the two ranks are a job's (spawn_job), and make a
   communicator of their own, on a port the first process picked. */
static int g_destroy_port;
static int destroy_rank(dist_t *w, void *arg) { return destroy_child(dist_rank(w), g_destroy_port, -1, arg); }
#endif

static void case_destroy_pending(void) {
    begin("n=2 dist_destroy with posted irecvs (named and ANY_SOURCE) never waited on: returns DIST_OK, no crash");
    int64_t t0 = now_ns();
#ifdef _WIN32
    dist_config cfg = { 0 };
    cfg.timeout_ms = 5000;
    g_destroy_port = first_value("destroy_port", free_port(AF_INET));
    int rc = spawn_job(2, destroy_rank, NULL, &cfg);
    if (rc != 0) case_bad("the job: dist_spawn returned %d: %s", rc, spawn_job_error());
#else
    int port = 0, lfd = listen_loopback(16, &port);
    if (lfd < 0) {
        case_bad("cannot make a listening socket: %s", strerror(errno));
        case_end(0, NULL);
        return;
    }
    pid_t pid[2];
    fork_ranks(2, pid, port, lfd, destroy_child, NULL);
    for (int r = 0; r < 2; r++) {
        int st = 0;
        if (pid[r] < 0) { case_bad("fork failed"); continue; }
        while (waitpid(pid[r], &st, 0) < 0 && errno == EINTR) { }
        if (WIFSIGNALED(st)) case_bad("rank %d died by signal %d", r, WTERMSIG(st));
        else if (WEXITSTATUS(st) != 0) case_bad("rank %d exited with %d", r, WEXITSTATUS(st));
    }
#endif
    check_rank_failures(2);
    for (int r = 0; r < 2; r++)
        if (!sh->r[r].reported && !sh->r[r].fail[0]) case_bad("rank %d did not finish", r);
    char extra[96];
    snprintf(extra, sizeof extra, "dist_destroy took %.3f s / %.3f s", sh->r[0].waited_s, sh->r[1].waited_s);
    case_end(secs_since(t0), extra);
}

/* ===========================================================================
   4. After a peer is lost: calls naming it fail at once; the others work.
   =========================================================================== */
static int expect_lost_fast(dist_t *w, int rank, dist_result res, int64_t t0, const char *what, int dead, int line) {
    double el = secs_since(t0);
    char rs[32];
    snprintf(rs, sizeof rs, "rank %d", dead);
    if (res != DIST_ERR_PEER_LOST)
        return fail_at(rank, line, "%s returned %s (%s), expected DIST_ERR_PEER_LOST", what, dist_result_name(res),
                       dist_error_message(w));
    if (el > 0.5) return fail_at(rank, line, "%s took %.3f s to fail; a known-dead peer should fail at once", what, el);
    if (!strstr(dist_error_message(w), rs))
        return fail_at(rank, line, "%s: the message \"%s\" does not name %s", what, dist_error_message(w), rs);
    return 0;
}

static int fn_after_loss(dist_t *w, void *p) {
    int rank = dist_rank(w), n = dist_world_size(w), dead = n - 1;
    int32_t x = rank, buf[8];
    (void)p;
    rank_alarm(30);
    if (rank == dead) {
        for (int s = 0; s < n - 1; s++) OK(dist_recv(w, &x, 1, DIST_INT32, s, 1));
        sleep_ms(100);
        sh->death_ns = now_ns();
        _exit(0);
    }
    OK(dist_send(w, &x, 1, DIST_INT32, dead, 1));
    int64_t t0 = now_ns();
    dist_result res = dist_recv(w, buf, 1, DIST_INT32, dead, 2);
    if (res != DIST_ERR_PEER_LOST)
        return FAIL("waiting for the dying rank returned %s after %.2f s: %s", dist_result_name(res), secs_since(t0),
                    dist_error_message(w));
    /* everything naming the dead rank now fails at once */
    dist_req_t *r = NULL;
    t0 = now_ns();
    if (expect_lost_fast(w, rank, dist_send(w, &x, 1, DIST_INT32, dead, 3), t0, "dist_send to the dead rank", dead, __LINE__)) return 1;
    t0 = now_ns();
    if (expect_lost_fast(w, rank, dist_recv(w, buf, 1, DIST_INT32, dead, 3), t0, "dist_recv from the dead rank", dead, __LINE__)) return 1;
    t0 = now_ns();
    res = dist_isend(w, &x, 1, DIST_INT32, dead, 3, &r);
    if (res == DIST_OK) res = dist_wait(r);
    if (expect_lost_fast(w, rank, res, t0, "dist_isend + dist_wait to the dead rank", dead, __LINE__)) return 1;
    t0 = now_ns();
    res = dist_irecv(w, buf, 1, DIST_INT32, dead, 3, &r);
    if (res == DIST_OK) res = dist_wait(r);
    if (expect_lost_fast(w, rank, res, t0, "dist_irecv + dist_wait from the dead rank", dead, __LINE__)) return 1;
    /* a big send to the dead rank too (it cannot complete by buffering) */
    size_t big = (size_t)8 << 20;
    uint8_t *bb = calloc(big, 1);
    if (!bb) return FAIL("out of memory");
    t0 = now_ns();
    res = dist_send(w, bb, big, DIST_UINT8, dead, 4);
    free(bb);
    if (expect_lost_fast(w, rank, res, t0, "8 MiB dist_send to the dead rank", dead, __LINE__)) return 1;
    /* the live ranks still talk: a ring over ranks 0..n-2, blocking and non-blocking */
    int live = n - 1, right = (rank + 1) % live, left = (rank + live - 1) % live;
    for (int round = 0; round < 2; round++) {
        int32_t out[8], in[8];
        for (int j = 0; j < 8; j++) { out[j] = rank * 100 + round * 10 + j; in[j] = -1; }
        if (round == 0) {
            OK(dist_send(w, out, 8, DIST_INT32, right, 10));
            OK(dist_recv(w, in, 8, DIST_INT32, left, 10));
        } else {
            dist_req_t *rq[2];
            OK(dist_irecv(w, in, 8, DIST_INT32, left, 11, &rq[0]));
            OK(dist_isend(w, out, 8, DIST_INT32, right, 11, &rq[1]));
            OK(dist_wait_all(2, rq));
        }
        for (int j = 0; j < 8; j++)
            if (in[j] != left * 100 + round * 10 + j)
                return FAIL("live ring round %d after the loss: [%d] = %d from rank %d", round, j, in[j], left);
    }
    /* informational: what a DIST_ANY_SOURCE receive does now (only live ranks send) */
    int32_t one = 1;
    OK(dist_send(w, &one, 1, DIST_INT32, right, 12));
    res = dist_recv(w, buf, 1, DIST_INT32, DIST_ANY_SOURCE, 12);
    snprintf(sh->r[rank].msg, sizeof sh->r[rank].msg, "%s", dist_result_name(res));
    if (res != DIST_OK) OK(dist_recv(w, buf, 1, DIST_INT32, left, 12));   /* take it by name instead */
    sh->r[rank].reported = 1;
    return 0;
}

static void case_after_loss(void) {
    begin("n=4 after rank 3 is lost: send/recv/isend/irecv naming it fail at once with DIST_ERR_PEER_LOST; "
          "ranks 0..2 still communicate");
    dist_config cfg = { 0 };
    cfg.timeout_ms = 4000;
    int64_t t0 = now_ns();
    int rc = spawn_job(4, fn_after_loss, NULL, &cfg);
    double el = secs_since(t0);
    if (rc != 0) case_bad("dist_spawn returned %d: %s", rc, spawn_job_error());
    check_rank_failures(4);
    for (int r = 0; r < 3; r++)
        if (!sh->r[r].reported && !sh->r[r].fail[0]) case_bad("rank %d did not finish", r);
    char extra[600];
    snprintf(extra, sizeof extra, "(note: a DIST_ANY_SOURCE recv afterwards, with only live senders, returns %s)",
             sh->r[0].msg[0] ? sh->r[0].msg : "?");
    case_end(el, extra);
}

/* ===========================================================================
   5. dist_spawn: a failing fn stops the others; all zero returns zero.
   =========================================================================== */
typedef struct { int failing; } spawn_arg;

static int fn_fail_one(dist_t *w, void *p) {
    const spawn_arg *a = (const spawn_arg *)p;
    int rank = dist_rank(w), n = dist_world_size(w);
    int32_t x = rank;
    rank_alarm(40);
    /* everyone is connected and past the start before rank `failing` fails */
    if (rank != a->failing) OK(dist_send(w, &x, 1, DIST_INT32, a->failing, 1));
    else {
        for (int s = 0; s < n; s++) if (s != rank) OK(dist_recv(w, &x, 1, DIST_INT32, s, 1));
        sleep_ms(300);                    /* the others are in their long receive */
        sh->ret_ns = now_ns();
        return 3;
    }
    /* a long receive from another live rank (the ranks other than `failing`
       form a ring), which the failing rank's exit does not end */
    int others[MAXR], k = 0, me = 0;
    for (int r = 0; r < n; r++) if (r != a->failing) { if (r == rank) me = k; others[k++] = r; }
    int src = others[(me + k - 1) % k];
    int64_t t0 = now_ns();
    dist_result res = dist_recv(w, &x, 1, DIST_INT32, src, 2);
    record(w, rank, res, t0);
    sh->r[rank].reported = 1;             /* it was NOT stopped while waiting */
    return 0;
}

static void case_spawn_fail(int n, int failing) {
    char name[200];
    snprintf(name, sizeof name, "n=%d dist_spawn: rank %d's fn returns 3 while the others are in a 10 s dist_recv: "
             "returns 3, the others stopped within 3 s", n, failing);
    begin(name);
    spawn_arg a = { failing };
    dist_config cfg = { 0 };
    cfg.timeout_ms = 10000;
    int64_t t0 = now_ns();
    int rc = spawn_job(n, fn_fail_one, &a, &cfg);
    int64_t t1 = now_ns();
    if (rc != 3) case_bad("dist_spawn returned %d (%s), expected 3", rc, spawn_job_error());
    check_rank_failures(n);
    double stop = sh->ret_ns ? (double)(t1 - sh->ret_ns) / 1e9 : -1;
    if (!sh->ret_ns) case_bad("rank %d never got to return 3", failing);
    else if (stop > 3.0) case_bad("dist_spawn returned %.2f s after rank %d's fn returned 3", stop, failing);
    /* A rank may see its receive end with DIST_ERR_PEER_LOST when the rank
       it waits for was stopped a moment before itself; anything else means
       it was not stopped (nobody ever sends what it waits for). */
    int ended = 0;
    for (int r = 0; r < n; r++) {
        if (r == failing || !sh->r[r].reported) continue;
        ended++;
        if (sh->r[r].result != DIST_ERR_PEER_LOST)
            case_bad("rank %d was not stopped: its dist_recv returned %s after %.2f s (%s)", r,
                dist_result_name((dist_result)sh->r[r].result), sh->r[r].waited_s, sh->r[r].msg);
    }
    char extra[128];
    snprintf(extra, sizeof extra, "returned %.2f s after the failure; %d of %d others stopped while waiting", stop,
             n - 1 - ended, n - 1);
    case_end((double)(t1 - t0) / 1e9, extra);
}

static int fn_all_zero(dist_t *w, void *p) {
    int rank = dist_rank(w), n = dist_world_size(w);
    int32_t x = rank, y = -1;
    (void)p;
    rank_alarm(30);
    OK(dist_send(w, &x, 1, DIST_INT32, (rank + 1) % n, 1));
    OK(dist_recv(w, &y, 1, DIST_INT32, (rank + n - 1) % n, 1));
    if (y != (rank + n - 1) % n) return FAIL("ring value %d", y);
    sh->r[rank].reported = 1;
    return 0;
}

static void case_spawn_zero(int n) {
    char name[96];
    snprintf(name, sizeof name, "n=%d dist_spawn: every fn returns 0 -> returns 0", n);
    begin(name);
    dist_config cfg = { 0 };
    cfg.timeout_ms = 5000;
    int64_t t0 = now_ns();
    int rc = spawn_job(n, fn_all_zero, NULL, &cfg);
    if (rc != 0) case_bad("dist_spawn returned %d: %s", rc, spawn_job_error());
    check_rank_failures(n);
    for (int r = 0; r < n; r++) if (!sh->r[r].reported) case_bad("rank %d did not finish", r);
    case_end(secs_since(t0), NULL);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    int64_t t0 = now_ns();

    case_death(3, 1, DIE_EXIT, W_RECV);
    case_death(3, 1, DIE_KILL, W_RECV);
    case_death(2, 1, DIE_EXIT, W_IRECV);
    case_death(4, 2, DIE_KILL, W_IRECV);
    case_death(4, 3, DIE_EXIT, W_ANY);
    case_death(3, 2, DIE_KILL, W_ANY);
    case_timeout();
    case_destroy_pending();
    case_after_loss();
    case_spawn_fail(3, 1);
    case_spawn_fail(4, 0);
    case_spawn_zero(3);

    munmap(sh, sizeof *sh);
    printf("%d failed, %.1f s\n", g_failed, secs_since(t0));
    return g_failed ? 1 : 0;
}
