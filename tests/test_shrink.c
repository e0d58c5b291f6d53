// TIMEOUT: 300
// TRANSPORTS: auto tcp
// WINDOWS: yes
/* test_shrink.c - survivors of a communicator agree (dist_agree) and go on
   without the dead (dist_shrink), as a training loop would.

   Jobs of N ranks forked here (tcp://127.0.0.1; transport from
   DIST_TRANSPORT).  Each rank runs STEPS steps of a training loop on its
   current communicator c (at first the world):
     - an all_reduce (sum) of G int64 "gradients", element i of world
       rank w at step s being (w + 1)(s + 1)(i + 1): exact, so the result
       of each step is known from the members of c alone;
     - dist_agree with flags that every member but one (step s: member
       s mod size clears bit s mod 64) sets: the AND is known too;
   and when either fails (a member died: DIST_ERR_PEER_LOST), dist_shrink
   on c, the step again on the survivors' communicator.  After each shrink
   a rank learns the new members' world ranks (an all_gather) and checks
   them: ascending, itself at its new rank, no rank the case had killed
   before the shrink began.  Victims (not rank 0, which hosts the store,
   but in the case below) kill themselves (SIGKILL) at a point of the case:
     before     at step KILL_STEP, before its all_reduce;
     entry      inside dist_agree of step KILL_STEP, once its entry is in
                the store;
     proposing  there, about to compare_set its proposal (it comes last,
                30 ms late, so it proposes);
     decided    there, once its proposal won (it is counted alive, and
                the next step finds it dead);
     shrink-entry  rank 1 dies before step KILL_STEP, and rank N/2 inside
                the survivors' dist_shrink, once its entry is in the store
                (a death during the agreement: the next step fails, and
                they shrink again);
     random     at a random time in the loop (a thread that sleeps first);
   and one victim, two at the same step, or three at random.  The points
   inside the protocol are the library's test hooks (this file compiles
   the implementation with DIST_TEST_HOOKS).

   Checks, on every survivor: every step's all_reduce result exactly, and
   every agree's flags and count; the steps all done, each once (its
   parameter vector, the sum of its results, is the same on every
   survivor: all_gather of a checksum); the final communicator has every
   survivor and no victim; each survivor exits 0, each victim died of
   SIGKILL.  And time: from the first victim's kill to the last survivor's
   first step done on its final communicator ("to shrunk").  Besides:
     quiet      no failure: 400 agree rounds; afterwards the store keeps
                only the last round's decision (the keys of earlier
                rounds are deleted) and a shrink keeps everyone;
     mismatch   rank 1 calls dist_agree where the others call dist_shrink:
                every rank fails with DIST_ERR_MISMATCH naming both;
     stopped    rank 2 comes 3 s late to an agree with a 1.5 s timeout:
                the others fail with DIST_ERR_TIMEOUT naming rank 2, within
                the timeout plus 1 s.
   And rank 0 killed ("before") with the store hosted by this process
   (dist_store_host_start, as a launcher does), rank 0 joining it as the
   others do: the survivors agree and shrink without it.
   SHRINK_SIZES="4 8 16 32" runs the victim cases at those world sizes
   (default "4 8"); SHRINK_ONLY=TEXT the cases whose name has TEXT. */
/* (the implementation is compiled here, with the protocol's kill points) */
#define DIST_IMPLEMENTATION
#define DIST_TEST_HOOKS
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
#include <unistd.h>

#include "testutil.h"

#define MAXN 32
#define G 64
#define STEPS 40
#define KILL_STEP 10
#define TMO_MS 10000

enum { P_NONE, P_BEFORE, P_ENTRY, P_PROPOSING, P_DECIDED, P_SHRINK_ENTRY, P_RANDOM };
static const char *point_name[] = { "none", "before", "entry", "proposing", "decided", "shrink-entry", "random" };

typedef struct {
    atomic_int claimed;
    char fail[700];
    int victim, exited;
    int64_t t_kill;            /* a victim: when it killed itself (now_ns) */
    int64_t t_shrunk;          /* a survivor: its first step done on its final communicator */
    int final_size, final_rank, shrinks;
    int64_t agree_ns, agrees;  /* time in dist_agree, and calls */
    uint64_t checksum;
} rank_rec;

typedef struct {
    rank_rec r[MAXN];
    atomic_int checked;        /* stopped: ranks whose agree returned */
    atomic_int host_port;      /* the parent's store, once it serves (after the fork) */
} shared_t;
static shared_t *sh;

DEFINE_FAIL_AT(MAXN, &sh->r[rank].claimed, sh->r[rank].fail)

typedef struct {
    int n, point, nvictims;
    int victims[3];
    int kill_ms[3];            /* random: when */
    int special;               /* 0, or 'q' quiet, 'm' mismatch, 's' stopped */
    int hosted_port;           /* > 0: the store is the parent's (dist_store_host_start), on this port */
    char run_id[48];
} job_t;

static int is_victim(const job_t *j, int w) {
    for (int i = 0; i < j->nvictims; i++) if (j->victims[i] == w) return 1;
    return 0;
}

/* (said once nothing else of the process runs: kill_self_after) */
static void mark_dead(void *arg) {
    int rank = *(int *)arg;
    sh->r[rank].t_kill = now_ns();
    __atomic_store_n(&sh->r[rank].victim, 1, __ATOMIC_SEQ_CST);
}
static void die(int rank) {
    fflush(NULL);
    kill_self_after(mark_dead, &rank);
}

/* The kill point (dist__test_hook): a victim armed for (op, point) dies
   there. */
static struct { int armed, rank; const char *op, *point; } g_kp;
static void kill_point(dist_t *d, const char *op, const char *point) {
    (void)d;
    if (g_kp.armed && strcmp(op, g_kp.op) == 0 && strcmp(point, g_kp.point) == 0) die(g_kp.rank);
}

typedef struct { int ms, rank; } timer_t_;
static void *timer_main(void *p) {
    timer_t_ *t = (timer_t_ *)p;
    sleep_ms(t->ms);
    die(t->rank);
    return NULL;
}

static int rank_main(int rank, int port, int lfd, void *p) {
    const job_t *j = (const job_t *)p;
    char url[64];
    dist_t *w = NULL, *c;
    dist_config cfg;
    int64_t grad[G], params[G];
    int members[MAXN], nm, n = j->n, me_victim = is_victim(j, rank), shrinks = 0, final_seen = 0;
    uint64_t rounds = 0;         /* agree rounds on the world (the store keys' round number) */
    pthread_t th;
    static timer_t_ tm;
    memset(&cfg, 0, sizeof cfg);
    if (j->hosted_port) {        /* the parent hosts the store: rank 0 joins it as the others do */
        int hp;
        if (lfd >= 0) close(lfd);
        for (int64_t end = now_ns() + (int64_t)(scaled_s(10) * 1e9); !(hp = atomic_load(&sh->host_port)) && now_ns() < end;) sleep_ms(1);
        if (!hp) return FAIL("the parent's store never started");
        tcp_config(&cfg, url, sizeof url, hp, n, rank, scaled(TMO_MS), -1);
        cfg.store_hosted = 1;
        cfg.run_id = j->run_id;
    } else tcp_config(&cfg, url, sizeof url, port, n, rank, scaled(j->special == 's' ? 1500 : TMO_MS), lfd);
    rank_alarm((unsigned)(scaled_s(60) + 0.5));
    OK(dist_init(&w, &cfg));
    OK(dist_barrier(w));
    c = w;
    nm = n;
    for (int i = 0; i < n; i++) members[i] = i;
    memset(params, 0, sizeof params);

    if (j->special == 'm') {     /* rank 1 calls agree, the others shrink */
        dist_t *s = NULL;
        uint64_t f = 1;
        dist_result r = rank == 1 ? dist_agree(w, &f, NULL) : dist_shrink(w, &s);
        if (r != DIST_ERR_MISMATCH) return FAIL("%s -> %s (wanted DIST_ERR_MISMATCH): %s", rank == 1 ? "agree" : "shrink", dist_result_name(r), dist_error_message(w));
        if (!strstr(dist_error_message(w), "rank 1 called dist_agree") || !strstr(dist_error_message(w), "dist_shrink"))
            return FAIL("the mismatch's sentence does not name both calls: %s", dist_error_message(w));
        dist_destroy(w);
        sh->r[rank].exited = 1;
        return 0;
    }
    if (j->special == 's') {     /* rank 2 comes 3 s late */
        uint64_t f = 1;
        int64_t t0;
        dist_result r;
        if (rank == 2) sleep_ms(scaled(3000));
        t0 = now_ns();
        r = dist_agree(w, &f, NULL);
        if (rank != 2) {
            double s = (double)(now_ns() - t0) / 1e9;
            if (r != DIST_ERR_TIMEOUT) return FAIL("agree -> %s (wanted DIST_ERR_TIMEOUT: rank 2 comes 3 s late): %s", dist_result_name(r), dist_error_message(w));
            if (!strstr(dist_error_message(w), "rank 2 ")) return FAIL("the timeout does not name rank 2: %s", dist_error_message(w));
            if (s > scaled_s(1.5) + 1.0) return FAIL("agree took %.2f s with a timeout of %.1f s", s, scaled_s(1.5));
        }
        /* rank 0 hosts the store: nobody leaves before the others asked it */
        atomic_fetch_add(&sh->checked, 1);
        for (int64_t end = now_ns() + (int64_t)(scaled_s(10) * 1e9); atomic_load(&sh->checked) < n && now_ns() < end;) sleep_ms(5);
        dist_abort(w);
        dist_destroy(w);
        sh->r[rank].exited = 1;
        return 0;
    }
    dist__test_hook = kill_point;
    if (j->point == P_SHRINK_ENTRY && rank == j->victims[1]) {   /* the second victim dies inside the first shrink */
        g_kp.op = "shrink";
        g_kp.point = "entry";
        g_kp.rank = rank;
        g_kp.armed = 1;
    }
    if (me_victim && j->point == P_RANDOM) {
        for (int i = 0; i < j->nvictims; i++) if (j->victims[i] == rank) tm.ms = j->kill_ms[i];
        tm.rank = rank;
        pthread_create(&th, NULL, timer_main, &tm);
    }

    for (int step = 0, steps = j->special == 'q' ? 400 : j->point == P_RANDOM ? 100000 : STEPS, all_dead_at = -1; step < steps;) {
        dist_result r;
        uint64_t f, want_f;
        int nalive = 0, size = dist_world_size(c), me = dist_rank(c);
        int64_t sum_w = 0;
        if (me_victim && step == KILL_STEP && (j->point == P_BEFORE || (j->point == P_SHRINK_ENTRY && rank == j->victims[0]))) die(rank);
        for (int i = 0; i < G; i++) grad[i] = (int64_t)(rank + 1) * (step + 1) * (i + 1);
        r = dist_all_reduce(c, grad, G, DIST_INT64, DIST_SUM);
        if (r != DIST_OK && r != DIST_ERR_PEER_LOST)
            return FAIL("step %d: all_reduce -> %s (wanted OK or DIST_ERR_PEER_LOST): %s", step, dist_result_name(r), dist_error_message(c));
        if (r == DIST_OK) {
            for (int i = 0; i < nm; i++) sum_w += members[i] + 1;
            for (int i = 0; i < G; i++)
                if (grad[i] != sum_w * (step + 1) * (i + 1))
                    return FAIL("step %d (communicator of %d, %d shrinks): all_reduce element %d is %lld, want %lld", step, size, shrinks, i,
                                (long long)grad[i], (long long)(sum_w * (step + 1) * (i + 1)));
        }
        /* did every member do the step?  bit 0: this one's all_reduce;
           bit 1 + s mod 63: every member but s mod size sets it */
        f = ~(uint64_t)0;
        if (r != DIST_OK) f &= ~(uint64_t)1;
        if (me == step % size) f &= ~((uint64_t)2 << (step % 60));
        want_f = ~((uint64_t)2 << (step % 60));
        if (j->point == P_RANDOM) {
            /* bit 62: "the victims are dead, and 10 steps have passed
               since": the survivors stop at the same step (the AND) */
            int dead = 1;
            for (int i = 0; i < j->nvictims; i++) dead &= __atomic_load_n(&sh->r[j->victims[i]].victim, __ATOMIC_SEQ_CST);
            if (dead && all_dead_at < 0) all_dead_at = step;
            if (!(dead && step >= all_dead_at + 10)) f &= ~((uint64_t)1 << 62);
            want_f = (want_f & ~((uint64_t)1 << 62)) | (f & ((uint64_t)1 << 62));
        }
        if (me_victim && step == KILL_STEP && (j->point == P_ENTRY || j->point == P_PROPOSING || j->point == P_DECIDED)) {
            g_kp.op = "agree";
            g_kp.point = point_name[j->point];
            g_kp.rank = rank;
            g_kp.armed = 1;
        }
        /* last, it proposes (unless a member that polled just then does:
           then it tries again at the next step) */
        if (g_kp.armed && g_kp.op[0] == 'a' && j->point != P_ENTRY) sleep_ms(30);
        if (c == w) rounds++;
        {
            int64_t ta = now_ns();
            r = dist_agree(c, &f, &nalive);
            sh->r[rank].agree_ns += now_ns() - ta;
            sh->r[rank].agrees++;
        }
        if (g_kp.armed && g_kp.op[0] == 'a' && (j->point == P_ENTRY || step >= KILL_STEP + 20))
            return FAIL("step %d: agree returned %s without reaching its kill point (%s)", step, dist_result_name(r), g_kp.point);
        if (r != DIST_OK) return FAIL("step %d: agree -> %s: %s", step, dist_result_name(r), dist_error_message(c));
        if (nalive == size && (f & 1)) {
            if ((f & ~((uint64_t)1 << 62)) != (want_f & ~((uint64_t)1 << 62)))
                return FAIL("step %d: agree gave flags %016llx, want %016llx", step, (unsigned long long)f, (unsigned long long)want_f);
            r = DIST_OK;
        } else r = DIST_ERR_PEER_LOST;
        if (r == DIST_OK) {
            for (int i = 0; i < G; i++) params[i] += grad[i];
            if (!final_seen && shrinks) { sh->r[rank].t_shrunk = now_ns(); final_seen = 1; }
            step++;
            if (j->point == P_RANDOM && (f >> 62 & 1)) break;
            continue;
        }
        /* a member died: the survivors go on without it */
        {
            dist_t *s = NULL;
            int32_t mine = rank, got[MAXN];
            int dead_before[MAXN], nd = 0;
            for (int v = 0; v < n; v++) if (__atomic_load_n(&sh->r[v].victim, __ATOMIC_SEQ_CST)) dead_before[nd++] = v;
            if (++shrinks > 4) return FAIL("step %d: a fifth shrink", step);
            r = dist_shrink(c, &s);
            if (r != DIST_OK) return FAIL("step %d: shrink #%d -> %s: %s", step, shrinks, dist_result_name(r), dist_error_message(c));
            if (c != w) dist_destroy(c);
            c = s;
            final_seen = 0;
            if ((r = dist_all_gather(c, &mine, got, 1, DIST_INT32)) != DIST_OK) {
                /* another member died meanwhile: the loop shrinks again */
                nm = 0;
                continue;
            }
            nm = dist_world_size(c);
            for (int i = 0; i < nm; i++) {
                members[i] = got[i];
                if (i && got[i] <= got[i - 1]) return FAIL("shrink #%d: members not in order: %d after %d", shrinks, got[i], got[i - 1]);
                for (int k = 0; k < nd; k++)
                    if (got[i] == dead_before[k]) return FAIL("shrink #%d: rank %d, killed before it began, is a member", shrinks, got[i]);
            }
            if (got[dist_rank(c)] != rank) return FAIL("shrink #%d: new rank %d holds world rank %d, not this one (%d)", shrinks, dist_rank(c), got[dist_rank(c)], rank);
        }
    }
    if (j->special == 'q') {
        /* the store keeps the last round's decision only */
        dist_t *s = NULL;
        char key[96];
        const char *k = key;
        int e = 0;
        for (uint64_t rd = 1; rd < rounds; rd += rounds / 7 + 1) {
            snprintf(key, sizeof key, "dist/ft/0/%llu/d", (unsigned long long)rd);
            OK(dist_barrier(w));
            OK(dist_store_check(w, &k, 1, &e));
            if (e) return FAIL("after %llu agree rounds, round %llu's decision is still in the store", (unsigned long long)rounds, (unsigned long long)rd);
            snprintf(key, sizeof key, "dist/ft/0/%llu/%d", (unsigned long long)rd, rank);
            OK(dist_store_check(w, &k, 1, &e));
            if (e) return FAIL("round %llu's entry of this rank is still in the store", (unsigned long long)rd);
        }
        OK(dist_shrink(w, &s));
        if (dist_world_size(s) != n || dist_rank(s) != rank) return FAIL("a shrink without failures gave %d of %d", dist_rank(s), dist_world_size(s));
        OK(dist_barrier(s));
        dist_destroy(s);
    }
    {   /* every survivor did the same steps: the same parameters */
        uint64_t cs = 1469598103934665603ULL, all[MAXN];
        for (int i = 0; i < G; i++) cs = (cs ^ (uint64_t)params[i]) * 1099511628211ULL;
        sh->r[rank].checksum = cs;
        if (dist_all_gather(c, &cs, all, 1, DIST_INT64) != DIST_OK)
            return FAIL("the final all_gather: %s", dist_error_message(c));
        for (int i = 0; i < dist_world_size(c); i++)
            if (all[i] != cs) return FAIL("parameters differ: member %d's checksum %016llx, this rank's %016llx", i, (unsigned long long)all[i], (unsigned long long)cs);
        sh->r[rank].final_size = dist_world_size(c);
        sh->r[rank].final_rank = dist_rank(c);
        sh->r[rank].shrinks = shrinks;
        OK(dist_barrier(c));
    }
    if (c != w) dist_destroy(c);
    dist_abort(w);               /* the world has dead members: no goodbyes */
    dist_destroy(w);
    sh->r[rank].exited = 1;
    return 0;
}

static int g_sizes[8], g_nsizes;

static void run_case(const char *name, job_t *j) {
    dist_store_host *host = NULL;
    pid_t pid[MAXN];
    int st[MAXN], reaped[MAXN], survivors = 0;
    int64_t t0 = now_ns(), first_kill = 0, last_shrunk = 0;
    if (getenv("SHRINK_ONLY") && !strstr(name, getenv("SHRINK_ONLY"))) return;
    case_begin(name);
    if (first_process()) memset(sh, 0, sizeof *sh);   /* (on Windows the ranks replay main up to their start: not again) */
    if (j->hosted_port) snprintf(j->run_id, sizeof j->run_id, "shrink-%d", first_value("shrink_pid", (int)getpid()));
    if (start_ranks(j->n, pid, st, reaped, 64, rank_main, (void *)j) != 0) { case_bad("listening socket: %s", strerror(errno)); case_end(secs_since(t0), NULL); return; }
    if (j->hosted_port && first_process()) {   /* (a process that replays main on Windows hosts nothing) */
        /* started after the fork: a fork while the store's thread held a
           lock (the allocator's, under ASan) would leave it held in the ranks */
        dist_config hc;
        memset(&hc, 0, sizeof hc);
        hc.run_id = j->run_id;
        hc.timeout_ms = scaled(TMO_MS);
        if (dist_store_host_start(&host, &hc, j->n, "127.0.0.1", 0) != DIST_OK) case_bad("dist_store_host_start: %s", dist_error_message(NULL));
        else atomic_store(&sh->host_port, dist_store_host_port(host));
    }
    reap_all(j->n, pid, st, reaped, now_ns() + (int64_t)(scaled_s(90) * 1e9));
    dist_store_host_stop(host);
    for (int r = 0; r < j->n; r++) {
        const rank_rec *rr = &sh->r[r];
        int killed = WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL;
        if (reaped[r] == 2) case_bad("rank %d hung: killed", r);
        else if (is_victim(j, r) && !j->special) {
            if (!(killed && rr->victim)) case_bad("rank %d, a victim, did not die by its own SIGKILL (status 0x%x)%s%s", r, st[r], rr->fail[0] ? ": " : "", rr->fail);
        } else if (!WIFEXITED(st[r]) || WEXITSTATUS(st[r]) != 0 || !rr->exited) {
            case_bad("rank %d: %s", r, rr->fail[0] ? rr->fail : "did not exit 0");
            if (!rr->fail[0]) case_bad_status(r, st[r], NULL);
        }
        if (rr->t_kill && (!first_kill || rr->t_kill < first_kill)) first_kill = rr->t_kill;
    }
    if (!j->special || j->special == 'q') {
        for (int r = 0; r < j->n; r++) {
            const rank_rec *rr = &sh->r[r];
            if (is_victim(j, r)) continue;
            survivors++;
            if (rr->final_size != j->n - j->nvictims) case_bad("rank %d ended on a communicator of %d, want %d (the survivors)", r, rr->final_size, j->n - j->nvictims);
            if (rr->t_shrunk > last_shrunk) last_shrunk = rr->t_shrunk;
        }
        for (int r = 0, k = 0; r < j->n; r++) {
            if (is_victim(j, r)) continue;
            if (sh->r[r].final_rank != k) case_bad("rank %d is rank %d of the survivors, want %d (in order)", r, sh->r[r].final_rank, k);
            k++;
        }
    }
    if (g_cur_failed == 0 && j->special == 'q' && sh->r[0].agrees) {
        char extra[96];
        snprintf(extra, sizeof extra, "dist_agree: %.1f us per call (mean of %lld on rank 0)", (double)sh->r[0].agree_ns / 1e3 / (double)sh->r[0].agrees,
                 (long long)sh->r[0].agrees);
        case_end(secs_since(t0), extra);
    } else if (g_cur_failed == 0 && j->nvictims && first_kill && last_shrunk > first_kill) {
        char extra[96];
        snprintf(extra, sizeof extra, "kill to shrunk %.1f ms, %d survivors", (double)(last_shrunk - first_kill) / 1e6, survivors);
        case_end(secs_since(t0), extra);
    } else case_end(secs_since(t0), NULL);
}

int main(void) {
    const char *sz = getenv("SHRINK_SIZES");
    char buf[128];
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    snprintf(buf, sizeof buf, "%s", sz ? sz : "4 8");
    for (char *t = strtok(buf, " ,"); t && g_nsizes < 8; t = strtok(NULL, " ,")) {
        int v = atoi(t);
        if (v >= 4 && v <= MAXN) g_sizes[g_nsizes++] = v;
    }
    printf("shrink: transport %s, sizes", getenv("DIST_TRANSPORT") ? getenv("DIST_TRANSPORT") : "auto");
    for (int i = 0; i < g_nsizes; i++) printf(" %d", g_sizes[i]);
    printf("\n");
    {
        job_t q = { .n = 4, .special = 'q' }, m = { .n = 4, .special = 'm' }, s = { .n = 4, .special = 's' };
        run_case("quiet: 400 agree rounds, then a shrink that keeps everyone (4 ranks)", &q);
        run_case("mismatch: rank 1 agrees, the others shrink (4 ranks)", &m);
        run_case("stopped: rank 2 comes 3 s late to an agree with a 1.5 s timeout (4 ranks)", &s);
    }
    for (int si = 0; si < g_nsizes; si++) {
        int n = g_sizes[si];
        for (int p = P_BEFORE; p <= P_RANDOM; p++) {
            char name[160];
            job_t j;
            memset(&j, 0, sizeof j);
            j.n = n;
            j.point = p;
            j.nvictims = 1;
            j.victims[0] = n / 2;
            if (p == P_BEFORE) {   /* rank 0 dies, the store being the parent's */
                job_t h = j;
                h.victims[0] = 0;
                h.hosted_port = 1;   /* (run_case starts the host) */
                snprintf(name, sizeof name, "%d ranks, before: rank 0 killed, the store hosted by the parent", n);
                run_case(name, &h);
            }
            if (p == P_SHRINK_ENTRY) {
                j.nvictims = 2;
                j.victims[0] = 1; j.victims[1] = n / 2;
            }
            if (p == P_RANDOM) {
                j.nvictims = 3;
                j.victims[0] = 1; j.victims[1] = n / 2; j.victims[2] = n - 1;
                for (int i = 0; i < 3; i++) j.kill_ms[i] = 20 + (int)(mix64((uint64_t)(n * 10 + i)) % 150);
            }
            snprintf(name, sizeof name, "%d ranks, %s: rank%s", n, point_name[p], j.nvictims > 1 ? "s" : "");
            for (int i = 0; i < j.nvictims; i++) snprintf(name + strlen(name), sizeof name - strlen(name), "%s %d", i ? "," : "", j.victims[i]);
            snprintf(name + strlen(name), sizeof name - strlen(name), " killed");
            run_case(name, &j);
            if (p == P_BEFORE) {   /* two at the same step */
                j.nvictims = 2;
                j.victims[0] = 1; j.victims[1] = n - 1;
                snprintf(name, sizeof name, "%d ranks, before: ranks 1, %d killed at the same step", n, n - 1);
                run_case(name, &j);
            }
        }
    }
    printf("%d failed\n", g_failed);
    return g_failed ? 1 : 0;
}
