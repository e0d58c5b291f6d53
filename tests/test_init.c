// TIMEOUT: 180
// WINDOWS: yes
/* test_init.c - the init methods of dist_init: env:// (with the MPI and
   Slurm fallbacks), tcp://, file://, IPv6, DIST_INIT_METHOD, DIST_TIMEOUT,
   an inherited store socket, and the errors a misconfigured job reports.

   Every job here is forked by this program: each child clears the
   environment the library reads, sets its own, calls dist_init, proves the
   mesh with an all-to-all exchange, calls dist_destroy and records what
   happened in a MAP_SHARED slot.  The parent waits with a deadline and
   kills whatever is still running then, so a hang is a failure, not a
   stuck test.  One line per check; exit 0 only if every check passed.

   On Windows (no fork) each process of a job is this program started
   again, which runs main silently up to its job's fork_ranks
   (testutil.h) and builds the same job on the way: ports come from the
   first process (job_port), file names from its id, and what main does
   for a job (clear the slots, remove or write its file, wait for it) it
   does in the first process only.  Nothing can hand a listening socket
   down there, so in the cases that pass rank 0 its store socket, rank 0
   makes it itself, on the port the parent picked, before dist_init. */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#ifdef _WIN32
#  include <testutil_sockets.h>
#endif

#define MAXP 8

/* ---- small helpers (the common ones are in testutil.h) ------------------ */

static int g_no_ipv6 = 0;      /* the IPv6 checks could not run */

/* A loopback port nobody listens on now (IPv4 or IPv6), for a job.  On
   Windows the first process's: the job's processes run main again, and
   must build the same job (first_value). */
static int job_port(int family) {
    static int calls;
    char key[32];
    snprintf(key, sizeof key, "port%d", ++calls);
#ifdef _WIN32
    return first_value(key, free_port_any(family));   /* (testutil.h's free_port is IPv4 only there) */
#else
    return first_value(key, free_port(family));
#endif
}

/* This test's id, for its file names: the pid (on Windows the first
   process's, which every process of the test knows).  (The files are
   /tmp/...: on Windows dist.h takes file:///tmp/x as \tmp\x on the
   current drive, which under Wine is Z:, the Unix root.) */
static int test_id(void) {
#ifdef _WIN32
    return (int)testutil_root(NULL);
#else
    return (int)getpid();
#endif
}

/* Removes a job's file before the job, in the first process only (on
   Windows a rank that runs main again must not remove its job's file,
   which rank 0 may have written already). */
static void remove_before(const char *path) {
    if (first_process()) unlink(path);
}

static void setenvf(const char *name, const char *fmt, ...) {
    char v[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    setenv(name, v, 1);
}

/* Everything the library (or a launcher) might read. */
static void clear_env(void) {
    UNSET_ENV("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
              "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
              "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
              LAUNCHER_ENV, "DIST_SPIN_US");
}

static int have_ipv6_loopback(void) {
    int s = socket(AF_INET6, SOCK_STREAM, 0), r;
    struct sockaddr_in6 a;
    if (s < 0) return 0;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    r = bind(s, (struct sockaddr *)&a, sizeof a) == 0 && listen(s, 1) == 0;
    close(s);
    return r;
}

/* ---- jobs ----------------------------------------------------------------- */

typedef struct slot {
    int started, init_done, finished, hung, signaled, exit_code;
    int init_res, world_null;
    int rank, world, local_rank, timeout_ms;
    int exchange;             /* 0 ok, 1 failed (why in msg) */
    int destroy_res;
    long init_ms;
    int check_a, check_b;     /* scenario-specific results (1 = good) */
    char msg[DIST__ERRLEN + 64];
    char note[256];
} slot_t;

typedef struct scen scen_t;
struct scen {
    const char *name;
    int n;                    /* processes */
    int deadline_ms;          /* the parent kills what runs longer */
    void (*setup)(const scen_t *s, int idx, dist_config *cfg);
    void (*after_init)(const scen_t *s, int idx, dist_t *w, slot_t *slot);
    void (*after_destroy)(const scen_t *s, int idx, slot_t *slot);
    int delay_ms[MAXP];       /* sleep before dist_init */
    int no_exchange;
    int no_run_id;            /* no DIST_RUN_ID (else each job gets its own) */
    int port;
    int listen_fd;            /* >= 0: a socket the children inherit; the parent closes it
                                 (Windows: LISTEN_IN_RANK0, rank 0 makes it on `port`) */
    int rank[MAXP], world[MAXP];
    int timeout_ms;
    char url[300];
    char path[256];
    char text[64];            /* a value to put in an environment variable */
};

static slot_t *g_slots;       /* MAXP slots, MAP_SHARED */

#define LISTEN_IN_RANK0 (-2)

/* A store socket for rank 0, made before the fork and inherited by it
   (s->listen_fd, on s->port); 0, or -1.  Windows cannot hand one down
   (see testutil.h's fork_ranks): there rank 0 makes it itself, on a port
   picked here (rank_entry). */
static int store_socket(scen_t *s) {
#ifdef _WIN32
    s->port = job_port(AF_INET);
    s->listen_fd = LISTEN_IN_RANK0;
    return s->port > 0 ? 0 : -1;
#else
    s->listen_fd = listen_loopback(64, &s->port);
    return s->listen_fd < 0 ? -1 : 0;
#endif
}

/* Each rank sends rank * 1000 + dst to every other rank and checks what it
   receives: the mesh is complete and routes correctly. */
static int exchange(dist_t *w, char *why, size_t cap) {
    int n = dist_world_size(w), me = dist_rank(w), nr = 0, bad = 0;
    int32_t out[MAXP], in;
    dist_req_t *reqs[MAXP];
    dist_result r;
    for (int dst = 0; dst < n; dst++) {
        if (dst == me) continue;
        out[dst] = me * 1000 + dst;
        if ((r = dist_isend(w, &out[dst], 1, DIST_INT32, dst, 7, &reqs[nr])) != DIST_OK) {
            snprintf(why, cap, "isend to %d: %s: %s", dst, dist_result_name(r), dist_error_message(w));
            dist_wait_all(nr, reqs);
            return 1;
        }
        nr++;
    }
    for (int src = 0; src < n && !bad; src++) {
        if (src == me) continue;
        in = -1;
        if ((r = dist_recv(w, &in, 1, DIST_INT32, src, 7)) != DIST_OK) {
            snprintf(why, cap, "recv from %d: %s: %s", src, dist_result_name(r), dist_error_message(w));
            bad = 1;
        } else if (in != src * 1000 + me) {
            snprintf(why, cap, "rank %d got %d from rank %d, expected %d", me, (int)in, src, src * 1000 + me);
            bad = 1;
        }
    }
    if ((r = dist_wait_all(nr, reqs)) != DIST_OK && !bad) {
        snprintf(why, cap, "send: %s: %s", dist_result_name(r), dist_error_message(w));
        bad = 1;
    }
    return bad;
}

static void child_main(const scen_t *s, int idx, slot_t *slot) {
    dist_config cfg;
    dist_t *w = (dist_t *)&cfg;   /* dist_init must set it to NULL on failure */
    dist_result r;
    long t0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    slot->started = 1;
    clear_env();
    memset(&cfg, 0, sizeof cfg);
    if (s->listen_fd >= 0 && idx != 0) close(s->listen_fd);
    if (s->delay_ms[idx] > 0) sleep_ms(s->delay_ms[idx]);
    s->setup(s, idx, &cfg);
    t0 = now_ms();
    r = dist_init(&w, &cfg);
    slot->init_ms = now_ms() - t0;
    slot->init_res = r;
    slot->init_done = 1;
    if (r != DIST_OK) {
        slot->world_null = w == NULL;
        snprintf(slot->msg, sizeof slot->msg, "%s", dist_error_message(NULL));
        if (s->after_destroy) s->after_destroy(s, idx, slot);
        slot->finished = 1;
        exit(0);   /* not _exit: a leak checker (make sanitize) runs at exit */
    }
    slot->rank = dist_rank(w);
    slot->world = dist_world_size(w);
    slot->local_rank = dist_local_rank(w);
    slot->timeout_ms = dist_timeout_ms(w);
    if (!s->no_exchange) slot->exchange = exchange(w, slot->msg, sizeof slot->msg);
    if (s->after_init) s->after_init(s, idx, w, slot);
    slot->destroy_res = dist_destroy(w);
    if (slot->destroy_res != DIST_OK && !slot->msg[0])
        snprintf(slot->msg, sizeof slot->msg, "destroy: %s", dist_error_message(NULL));
    if (s->after_destroy) s->after_destroy(s, idx, slot);
    slot->finished = 1;
    exit(0);
}

/* A process of the job (fork_ranks): child_main, which ends with exit(). */
static int rank_entry(int idx, int port, int lfd, void *arg) {
    scen_t *s = (scen_t *)arg;
    (void)port;
    (void)lfd;
#ifdef _WIN32
    if (s->listen_fd == LISTEN_IN_RANK0) {
        s->listen_fd = -1;
        if (idx == 0 && (s->listen_fd = listen_loopback_on(s->port, 64, NULL)) < 0) {
            snprintf(g_slots[0].msg, sizeof g_slots[0].msg, "rank 0 cannot listen on 127.0.0.1:%d: %s", s->port, strerror(errno));
            exit(0);   /* (not finished: "exited early") */
        }
    }
#endif
    child_main(s, idx, &g_slots[idx]);
    return 1;
}

/* Forks the job's processes and waits for them until the deadline. */
static void run_job(scen_t *s) {
    static int jobs;
    char run_id[48];
    pid_t pids[MAXP];
    int left;
    long deadline;
#ifdef _WIN32
    if (!first_process()) {   /* a process that runs main again: its own job makes it a rank there (earlier ones return at once) */
        fork_ranks(s->n, pids, s->port, -1, rank_entry, s);
        return;
    }
#endif
    memset(g_slots, 0, sizeof(slot_t) * MAXP);
    fflush(NULL);
    /* each job one launch, as a launcher would make it (init then does not
       wait for a second claim of a rank); the duplicate-rank case has none */
    snprintf(run_id, sizeof run_id, "test-init-%d-%d", (int)getpid(), ++jobs);
    if (s->no_run_id) unsetenv("DIST_RUN_ID"); else setenv("DIST_RUN_ID", run_id, 1);
    if (fork_ranks(s->n, pids, s->port, s->listen_fd, rank_entry, s) != 0) { perror("fork"); exit(1); }   /* (it closes listen_fd) */
    s->listen_fd = -1;
    deadline = now_ms() + scaled(s->deadline_ms);
    left = s->n;
    while (left > 0) {
        for (int i = 0; i < s->n; i++) {
            int st;
            if (pids[i] <= 0) continue;
            if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                if (WIFSIGNALED(st)) g_slots[i].signaled = WTERMSIG(st);
                else if (WIFEXITED(st)) g_slots[i].exit_code = WEXITSTATUS(st);
                pids[i] = 0;
                left--;
            }
        }
        if (left == 0) break;
        if (now_ms() >= deadline) {
            for (int i = 0; i < s->n; i++)
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    g_slots[i].hung = 1;
                    pids[i] = 0;
                }
            break;
        }
        sleep_ms(5);
    }
}

static const char *slot_state(const slot_t *sl) {
    if (sl->hung) return "hung (killed at the deadline)";
    if (sl->signaled) return "died of a signal";
    if (!sl->finished) return "exited early";
    if (sl->exit_code) return "finished, but exited with a non-zero status (a sanitizer's report?)";
    return "finished";
}

/* Every process finished, joined with the expected rank and world size,
   exchanged correctly and destroyed cleanly. */
static int job_ok(const scen_t *s, const int *expect_rank, int expect_world, char *why, size_t cap) {
    for (int i = 0; i < s->n; i++) {
        const slot_t *sl = &g_slots[i];
        int er = expect_rank ? expect_rank[i] : i;
        if (sl->hung || sl->signaled || !sl->finished || sl->exit_code) {
            snprintf(why, cap, "process %d %s (init %s)", i, slot_state(sl), sl->init_done ? dist_result_name((dist_result)sl->init_res) : "not returned");
            return 0;
        }
        if (sl->init_res != DIST_OK) {
            snprintf(why, cap, "process %d: dist_init: %s: %s", i, dist_result_name((dist_result)sl->init_res), sl->msg);
            return 0;
        }
        if (sl->rank != er || sl->world != expect_world) {
            snprintf(why, cap, "process %d is rank %d of %d, expected %d of %d", i, sl->rank, sl->world, er, expect_world);
            return 0;
        }
        if (!s->no_exchange && sl->exchange) { snprintf(why, cap, "process %d: exchange: %s", i, sl->msg); return 0; }
        if (sl->destroy_res != DIST_OK) {
            snprintf(why, cap, "process %d: dist_destroy: %s: %s", i, dist_result_name((dist_result)sl->destroy_res), sl->msg);
            return 0;
        }
    }
    return 1;
}

static void check_job(scen_t *s, const int *expect_rank, int expect_world) {
    char why[1024];
    run_job(s);
    if (job_ok(s, expect_rank, expect_world, why, sizeof why)) ok("%s", s->name);
    else fail(s->name, "%s", why);
}

static scen_t scen(const char *name, int n) {
    scen_t s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.n = n;
    s.deadline_ms = 30000;
    s.listen_fd = -1;
    return s;
}

/* ---- setups (run in the child) -------------------------------------------- */

static void setup_env(const scen_t *s, int idx, dist_config *cfg) {
    (void)cfg;
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenvf("MASTER_PORT", "%d", s->port);
    setenvf("RANK", "%d", idx);
    setenvf("WORLD_SIZE", "%d", s->n);
    setenvf("LOCAL_RANK", "%d", 10 + idx);
}

static void setup_env_fd(const scen_t *s, int idx, dist_config *cfg) {
    setup_env(s, idx, cfg);
    if (idx == 0) setenvf("DIST_STORE_LISTEN_FD", "%d", s->listen_fd);
}

static void setup_cfg_fd(const scen_t *s, int idx, dist_config *cfg) {
    cfg->init_method = s->url;
    cfg->rank = idx;
    cfg->world_size = s->n;
    if (idx == 0) cfg->store_listen_fd = s->listen_fd + 1;
}

static void setup_fallback(const scen_t *s, int idx, dist_config *cfg) {
    /* s->text is "RANKVAR SIZEVAR" */
    char rv[32], wv[32];
    (void)cfg;
    sscanf(s->text, "%31s %31s", rv, wv);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenvf("MASTER_PORT", "%d", s->port);
    setenvf(rv, "%d", idx);
    setenvf(wv, "%d", s->n);
}

static void setup_precedence(const scen_t *s, int idx, dist_config *cfg) {
    (void)cfg;
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenvf("MASTER_PORT", "%d", s->port);
    setenvf("RANK", "%d", idx);
    setenvf("WORLD_SIZE", "%d", s->n);
    /* wrong on purpose: RANK/WORLD_SIZE must win */
    setenvf("OMPI_COMM_WORLD_RANK", "%d", (idx + 1) % s->n);
    setenvf("OMPI_COMM_WORLD_SIZE", "%d", s->n + 5);
    setenvf("SLURM_PROCID", "%d", (idx + 2) % s->n);
    setenvf("SLURM_NTASKS", "%d", s->n + 7);
}

static void setup_tcp_cfg(const scen_t *s, int idx, dist_config *cfg) {
    cfg->init_method = s->url;
    cfg->rank = idx;
    cfg->world_size = s->n;
}

static char g_url_buf[400];   /* per child (each child is its own process) */

static void setup_tcp_query(const scen_t *s, int idx, dist_config *cfg) {
    snprintf(g_url_buf, sizeof g_url_buf, "%s?rank=%d&world_size=%d", s->url, idx, s->n);
    cfg->init_method = g_url_buf;
}

static void setup_tcp_query_rev(const scen_t *s, int idx, dist_config *cfg) {
    snprintf(g_url_buf, sizeof g_url_buf, "%s?world_size=%d&rank=%d", s->url, s->n, idx);
    cfg->init_method = g_url_buf;
}

static void setup_env_v6(const scen_t *s, int idx, dist_config *cfg) {
    (void)cfg;
    setenv("MASTER_ADDR", "::1", 1);
    setenvf("MASTER_PORT", "%d", s->port);
    setenvf("RANK", "%d", idx);
    setenvf("WORLD_SIZE", "%d", s->n);
}

static void setup_file(const scen_t *s, int idx, dist_config *cfg) {
    snprintf(g_url_buf, sizeof g_url_buf, "file://%s", s->path);
    cfg->init_method = g_url_buf;
    cfg->rank = idx;
    cfg->world_size = s->n;
}

static void setup_dist_init_method(const scen_t *s, int idx, dist_config *cfg) {
    (void)cfg;
    setenv("DIST_INIT_METHOD", s->url, 1);
    setenvf("RANK", "%d", idx);
    setenvf("WORLD_SIZE", "%d", s->n);
}

static void setup_dist_init_method_file(const scen_t *s, int idx, dist_config *cfg) {
    (void)cfg;
    setenvf("DIST_INIT_METHOD", "file://%s?rank=%d&world_size=%d", s->path, idx, s->n);
}

static void setup_cfg_overrides_env(const scen_t *s, int idx, dist_config *cfg) {
    setenv("DIST_INIT_METHOD", "foo://not-this-one", 1);
    setup_tcp_cfg(s, idx, cfg);
}

static void setup_dist_timeout(const scen_t *s, int idx, dist_config *cfg) {
    setup_env(s, idx, cfg);
    setenv("DIST_TIMEOUT", s->text, 1);
    cfg->timeout_ms = s->timeout_ms;
}

static void setup_ranks(const scen_t *s, int idx, dist_config *cfg) {
    cfg->init_method = s->url;
    cfg->rank = s->rank[idx];
    cfg->world_size = s->world[idx];
    cfg->timeout_ms = s->timeout_ms;
}

/* ---- after-init / after-destroy hooks -------------------------------------- */

static void file_exists_during(const scen_t *s, int idx, dist_t *w, slot_t *slot) {
    (void)w;
    if (idx == 0) slot->check_a = access(s->path, F_OK) == 0;
}

static void file_gone_after(const scen_t *s, int idx, slot_t *slot) {
    if (idx == 0) slot->check_b = access(s->path, F_OK) != 0 && errno == ENOENT;
}

/* ---- single-process error cases ------------------------------------------- */

typedef struct errcase {
    const char *name;
    const char *env[8];       /* "NAME=value" */
    const char *init_method;
    int rank, world_size, timeout_ms;
    dist_result expect;       /* DIST_OK: any error */
    const char *words[4];     /* must all appear in dist_error_message(NULL) */
} errcase_t;

static const errcase_t *g_err;

static void setup_errcase(const scen_t *s, int idx, dist_config *cfg) {
    (void)s; (void)idx;
    for (int i = 0; i < 8 && g_err->env[i]; i++) {
        char buf[256], *eq;
        snprintf(buf, sizeof buf, "%s", g_err->env[i]);
        eq = strchr(buf, '=');
        if (!eq) continue;
        *eq = 0;
        setenv(buf, eq + 1, 1);
    }
    cfg->init_method = g_err->init_method;
    cfg->rank = g_err->rank;
    cfg->world_size = g_err->world_size;
    cfg->timeout_ms = g_err->timeout_ms;
}

static int has_words(const char *msg, const char *const *words, int n, const char **missing) {
    for (int i = 0; i < n && words[i]; i++)
        if (!strstr(msg, words[i])) { *missing = words[i]; return 0; }
    return 1;
}

static void check_errcase(const errcase_t *e) {
    scen_t s = scen(e->name, 1);
    const slot_t *sl = &g_slots[0];
    const char *missing = NULL;
    char name[200];
    snprintf(name, sizeof name, "error: %s", e->name);
    s.setup = setup_errcase;
    s.no_exchange = 1;
    s.deadline_ms = 15000;
    g_err = e;
    run_job(&s);
    if (!sl->finished || sl->exit_code) fail(name, "the process %s", slot_state(sl));
    else if (sl->init_res == DIST_OK) fail(name, "dist_init succeeded");
    else if (e->expect != DIST_OK && sl->init_res != (int)e->expect)
        fail(name, "got %s, expected %s (%s)", dist_result_name((dist_result)sl->init_res), dist_result_name(e->expect), sl->msg);
    else if (!sl->world_null) fail(name, "*world was not set to NULL");
    else if (!has_words(sl->msg, e->words, 4, &missing)) fail(name, "message \"%s\" lacks \"%s\"", sl->msg, missing);
    else if (e->timeout_ms == 0 && sl->init_ms > scaled(2000)) fail(name, "took %ld ms to fail", sl->init_ms);
    else { printf("ok   %s  [%s: %s]\n", name, dist_result_name((dist_result)sl->init_res), sl->msg); fflush(stdout); }
}

/* ---- the tests ------------------------------------------------------------- */

static void test_env(void) {
    scen_t s = scen("env:// 4 ranks (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, free port)", 4);
    s.setup = setup_env;
    s.port = job_port(AF_INET);
    check_job(&s, NULL, 4);
    {   /* the node map, not LOCAL_RANK (set to 10 + i here, which no host has), and the default timeout, from the same job */
        int good = 1, bad_local = -1, bad_timeout = -1;
        for (int i = 0; i < 4; i++) {
            if (g_slots[i].local_rank != i) { good = 0; bad_local = i; }
            if (g_slots[i].timeout_ms != 300000) { good = 0; bad_timeout = i; }
        }
        if (!g_slots[0].finished) fail("dist_local_rank from the node map, default timeout 300 s", "the job failed");
        else if (good) ok("dist_local_rank from the node map (LOCAL_RANK=10+i ignored), default timeout 300 s");
        else if (bad_local >= 0)
            fail("dist_local_rank from the node map", "process %d: dist_local_rank %d, want %d (its place on this host; LOCAL_RANK=%d)",
                 bad_local, g_slots[bad_local].local_rank, bad_local, 10 + bad_local);
        else
            fail("default timeout 300 s", "process %d: dist_timeout_ms %d", bad_timeout, g_slots[bad_timeout].timeout_ms);
    }
}

static void test_env_listen_fd(void) {
    scen_t s = scen("env:// 4 ranks, store socket passed to rank 0 as DIST_STORE_LISTEN_FD", 4);
    s.setup = setup_env_fd;
    if (store_socket(&s) != 0) { fail(s.name, "cannot create a listening socket"); return; }
    /* Rank 0 keeps the inherited socket open, so it could not bind
       MASTER_PORT itself: success means the library used the socket. */
    check_job(&s, NULL, 4);

    s = scen("tcp:// 3 ranks, store socket passed as cfg.store_listen_fd (fd + 1)", 3);
    s.setup = setup_cfg_fd;
    if (store_socket(&s) != 0) { fail(s.name, "cannot create a listening socket"); return; }
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    check_job(&s, NULL, 3);
}

static void test_fallbacks(void) {
    static const char *pairs[][2] = {
        { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
        { "PMI_RANK", "PMI_SIZE" },
        { "SLURM_PROCID", "SLURM_NTASKS" },
    };
    for (int i = 0; i < 3; i++) {
        char name[128];
        scen_t s;
        snprintf(name, sizeof name, "env:// 3 ranks from %s/%s (RANK, WORLD_SIZE unset)", pairs[i][0], pairs[i][1]);
        s = scen(name, 3);
        s.setup = setup_fallback;
        s.port = job_port(AF_INET);
        snprintf(s.text, sizeof s.text, "%s %s", pairs[i][0], pairs[i][1]);
        check_job(&s, NULL, 3);
    }
    {
        scen_t s = scen("env:// 3 ranks: RANK/WORLD_SIZE take precedence over OMPI_*/SLURM_*", 3);
        s.setup = setup_precedence;
        s.port = job_port(AF_INET);
        check_job(&s, NULL, 3);
    }
}

/* dist_env_rank: what a program reads before joining, from the same
   variables in the same order as dist_init. */
static void test_env_rank(void) {
    static const struct { const char *set[4]; dist_result res; int rank, world; const char *says; } cases[] = {
        { { NULL }, DIST_ERR_INIT, 0, 0, "no rank in the environment" },
        { { "SLURM_PROCID", "2", "SLURM_NTASKS", "5" }, DIST_OK, 2, 5, NULL },
        { { "PMI_RANK", "1", "PMI_SIZE", "3" }, DIST_OK, 1, 3, NULL },            /* over SLURM_* */
        { { "OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "7" }, DIST_OK, 6, 7, NULL },
        { { "RANK", "0", "WORLD_SIZE", "4" }, DIST_OK, 0, 4, NULL },             /* over them all */
        { { "RANK", "4", "WORLD_SIZE", "4" }, DIST_ERR_INIT, 0, 0, "rank 4 of world size 4 (from RANK) is out of range" },
        { { "RANK", "1x", "WORLD_SIZE", "4" }, DIST_ERR_INIT, 0, 0, "RANK or its world size is not a number" },
    };
    char name[160];
    int bad = 0;
    clear_env();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = -1, w = -1;
        if (cases[i].set[0]) { setenv(cases[i].set[0], cases[i].set[1], 1); setenv(cases[i].set[2], cases[i].set[3], 1); }
        dist_result res = dist_env_rank(&r, &w);
        const char *msg = dist_error_message(NULL);
        snprintf(name, sizeof name, "dist_env_rank with %s=%s %s=%s", cases[i].set[0] ? cases[i].set[0] : "nothing", cases[i].set[0] ? cases[i].set[1] : "",
                 cases[i].set[0] ? cases[i].set[2] : "set", cases[i].set[0] ? cases[i].set[3] : "");
        if (res != cases[i].res || (res == DIST_OK && (r != cases[i].rank || w != cases[i].world)) ||
            (cases[i].says && !strstr(msg, cases[i].says))) {
            fail(name, "got %s, rank %d, world %d, \"%s\"; want %s, rank %d, world %d%s%s", dist_result_name(res), r, w, msg,
                 dist_result_name(cases[i].res), cases[i].rank, cases[i].world, cases[i].says ? ", saying " : "", cases[i].says ? cases[i].says : "");
            bad = 1;
        }
        if (cases[i].res != DIST_OK) UNSET_ENV("RANK", "WORLD_SIZE");    /* the bad pair does not shadow the next case */
    }
    if (dist_env_rank(NULL, NULL) != DIST_ERR_INVALID) { fail("dist_env_rank(NULL, NULL)", "not DIST_ERR_INVALID"); bad = 1; }
    clear_env();
    if (!bad) ok("dist_env_rank: none set, srun's, PMI's over srun's, mpirun's over those, RANK/WORLD_SIZE over all; out of range, not a number, NULL");
}

static void test_tcp(void) {
    scen_t s = scen("tcp://127.0.0.1:PORT, rank and world size from the config, 4 ranks", 4);
    s.setup = setup_tcp_cfg;
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    check_job(&s, NULL, 4);

    s = scen("tcp://127.0.0.1:PORT?rank=R&world_size=N, nothing in the config, 4 ranks", 4);
    s.setup = setup_tcp_query;
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    check_job(&s, NULL, 4);

    s = scen("tcp://127.0.0.1:PORT?world_size=N&rank=R (other order), 3 ranks", 3);
    s.setup = setup_tcp_query_rev;
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    check_job(&s, NULL, 3);
}

static void test_ipv6(void) {
    scen_t s;
    if (!have_ipv6_loopback()) {
        printf("skip IPv6: this machine cannot bind ::1 (no IPv6 loopback)\n");
        g_no_ipv6 = 1;
        return;
    }
    s = scen("tcp://[::1]:PORT, 3 ranks", 3);
    s.setup = setup_tcp_cfg;
    s.port = job_port(AF_INET6);
    snprintf(s.url, sizeof s.url, "tcp://[::1]:%d", s.port);
    check_job(&s, NULL, 3);

    s = scen("env:// with MASTER_ADDR=::1, 3 ranks", 3);
    s.setup = setup_env_v6;
    s.port = job_port(AF_INET6);
    check_job(&s, NULL, 3);
}

static void test_file(void) {
    static int counter = 0;
    scen_t s = scen("file:///tmp/... 4 ranks, rank 0 starts 300 ms after the others", 4);
    char why[1024];
    s.setup = setup_file;
    s.after_init = file_exists_during;
    s.after_destroy = file_gone_after;
    s.delay_ms[0] = 300;
    snprintf(s.path, sizeof s.path, "/tmp/dist_test_init_%d_%d", test_id(), counter++);
    remove_before(s.path);
    run_job(&s);
    if (!job_ok(&s, NULL, 4, why, sizeof why)) fail(s.name, "%s", why);
    else {
        long waited = 0;
        for (int i = 1; i < 4; i++) if (g_slots[i].init_ms > waited) waited = g_slots[i].init_ms;
        if (waited < 150) fail(s.name, "the other ranks' dist_init took at most %ld ms: rank 0 was not last", waited);
        else ok("%s", s.name);
    }
    if (!g_slots[0].finished) fail("file:// rendezvous file exists during the job, removed by rank 0's dist_destroy", "rank 0 did not finish");
    else if (!g_slots[0].check_a) fail("file:// rendezvous file exists during the job", "%s does not exist after dist_init", s.path);
    else if (!g_slots[0].check_b) fail("file:// rendezvous file removed by rank 0's dist_destroy", "%s still exists", s.path);
    else if (access(s.path, F_OK) == 0) fail("file:// rendezvous file removed at the end", "%s exists after the job", s.path);
    else ok("file:// rendezvous file exists during the job, removed by rank 0's dist_destroy");
    unlink(s.path);

    /* A file left behind by a job that died, pointing at a dead port. */
    s = scen("file:// over a stale rendezvous file of a dead job, 3 ranks, rank 0 last", 3);
    s.setup = setup_file;
    s.delay_ms[0] = 300;
    snprintf(s.path, sizeof s.path, "/tmp/dist_test_init_%d_%d", test_id(), counter++);
    {
        int dead = job_port(AF_INET);
        FILE *f = first_process() ? fopen(s.path, "w") : NULL;   /* (Windows: once, not again in the ranks) */
        if (first_process() && !f) { fail(s.name, "cannot write %s", s.path); return; }
        if (f) {
            fprintf(f, "dist-rendezvous 1 127.0.0.1 %d 3\n", dead);
            fclose(f);
        }
    }
    check_job(&s, NULL, 3);
    unlink(s.path);
}

static void setup_file_fd(const scen_t *s, int idx, dist_config *cfg) {
    setup_file(s, idx, cfg);
    cfg->timeout_ms = 3000;
    if (idx == 0) cfg->store_listen_fd = s->listen_fd + 1;
}

static void setup_file_alone(const scen_t *s, int idx, dist_config *cfg) {
    (void)idx;
    snprintf(g_url_buf, sizeof g_url_buf, "file://%s", s->path);
    cfg->init_method = g_url_buf;
    cfg->rank = 0;
    cfg->world_size = 2;
    cfg->timeout_ms = 1000;
}

static void test_file_more(void) {
    scen_t s = scen("file:// 3 ranks, store socket (bound to 127.0.0.1) passed to rank 0 as cfg.store_listen_fd", 3);
    s.setup = setup_file_fd;
    if (store_socket(&s) != 0) { fail(s.name, "cannot create a listening socket"); return; }
    snprintf(s.path, sizeof s.path, "/tmp/dist_test_init_fd_%d", test_id());
    remove_before(s.path);
    check_job(&s, NULL, 3);
    unlink(s.path);

    s = scen("file:// rank 0 whose job never forms (timeout 1 s) fails and removes the file", 1);
    s.setup = setup_file_alone;
    s.no_exchange = 1;
    snprintf(s.path, sizeof s.path, "/tmp/dist_test_init_alone_%d", test_id());
    remove_before(s.path);
    run_job(&s);
    if (!g_slots[0].finished || g_slots[0].exit_code) fail(s.name, "the process %s", slot_state(&g_slots[0]));
    else if (g_slots[0].init_res == DIST_OK) fail(s.name, "dist_init succeeded");
    else if (access(s.path, F_OK) == 0) fail(s.name, "%s is left behind", s.path);
    else ok("%s", s.name);
    unlink(s.path);
}

static void test_dist_init_method(void) {
    static int counter = 0;
    scen_t s = scen("DIST_INIT_METHOD=tcp://127.0.0.1:PORT (no MASTER_ADDR), RANK/WORLD_SIZE, 3 ranks", 3);
    s.setup = setup_dist_init_method;
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    check_job(&s, NULL, 3);

    s = scen("DIST_INIT_METHOD=file:///tmp/...?rank=R&world_size=N, 3 ranks", 3);
    s.setup = setup_dist_init_method_file;
    snprintf(s.path, sizeof s.path, "/tmp/dist_test_init_m_%d_%d", test_id(), counter++);
    remove_before(s.path);
    check_job(&s, NULL, 3);
    unlink(s.path);

    s = scen("cfg.init_method wins over DIST_INIT_METHOD (set to foo://), 2 ranks", 2);
    s.setup = setup_cfg_overrides_env;
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    check_job(&s, NULL, 2);
}

static void test_dist_timeout(void) {
    static const struct { const char *env; int cfg_ms, expect; } cases[] = {
        { "2", 0, 2000 }, { "1.5", 0, 1500 }, { "2", 4000, 4000 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[160], why[1024];
        scen_t s;
        int good = 1, bad = -1;
        snprintf(name, sizeof name, "DIST_TIMEOUT=%s with cfg.timeout_ms=%d: dist_timeout_ms == %d",
                 cases[c].env, cases[c].cfg_ms, cases[c].expect);
        s = scen(name, 2);
        s.setup = setup_dist_timeout;
        s.port = job_port(AF_INET);
        s.timeout_ms = cases[c].cfg_ms;
        snprintf(s.text, sizeof s.text, "%s", cases[c].env);
        run_job(&s);
        if (!job_ok(&s, NULL, 2, why, sizeof why)) { fail(name, "%s", why); continue; }
        for (int i = 0; i < 2; i++) if (g_slots[i].timeout_ms != cases[c].expect) { good = 0; bad = i; }
        if (good) ok("%s", name);
        else fail(name, "process %d: dist_timeout_ms %d", bad, g_slots[bad].timeout_ms);
    }
}

static void test_errors(void) {
    static char port_env[64], fd_env[64];
    int closed = job_port(AF_INET);
    errcase_t cases[] = {
        { "env:// without MASTER_ADDR", { port_env, "RANK=0", "WORLD_SIZE=2" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "MASTER_ADDR", "not set" } },
        { "env:// without MASTER_PORT", { "MASTER_ADDR=127.0.0.1", "RANK=0", "WORLD_SIZE=2" }, "env://", 0, 0, 0,
          DIST_ERR_INIT, { "MASTER_PORT", "not set" } },
        { "env:// MASTER_PORT=abc", { "MASTER_ADDR=127.0.0.1", "MASTER_PORT=abc", "RANK=0", "WORLD_SIZE=2" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "MASTER_PORT", "abc", "port" } },
        { "env:// MASTER_PORT=70000", { "MASTER_ADDR=127.0.0.1", "MASTER_PORT=70000", "RANK=0", "WORLD_SIZE=2" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "MASTER_PORT", "70000" } },
        { "env:// MASTER_PORT=0", { "MASTER_ADDR=127.0.0.1", "MASTER_PORT=0", "RANK=0", "WORLD_SIZE=2" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "MASTER_PORT", "0" } },
        { "env:// MASTER_PORT=123x", { "MASTER_ADDR=127.0.0.1", "MASTER_PORT=123x", "RANK=0", "WORLD_SIZE=2" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "MASTER_PORT", "123x" } },
        { "unknown scheme foo://x", { "RANK=0", "WORLD_SIZE=1" }, "foo://x", 0, 0, 0,
          DIST_ERR_INIT, { "foo://x", "unknown" } },
        { "unknown scheme in DIST_INIT_METHOD", { "DIST_INIT_METHOD=foo://x", "RANK=0", "WORLD_SIZE=1" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "foo://x", "unknown" } },
        { "tcp:// without a port", { "RANK=0", "WORLD_SIZE=1" }, "tcp://127.0.0.1", 0, 0, 0,
          DIST_ERR_INIT, { "tcp://127.0.0.1", "host:port" } },
        { "tcp://[::1] without a port", { "RANK=0", "WORLD_SIZE=1" }, "tcp://[::1]", 0, 0, 0,
          DIST_ERR_INIT, { "tcp://[::1]", "host:port" } },
        { "file:// with a relative path", { "RANK=0", "WORLD_SIZE=1" }, "file://relative/path", 0, 0, 0,
          DIST_ERR_INIT, { "file://relative/path", "absolute" } },
        { "RANK=3 WORLD_SIZE=3 (rank >= world size)", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=3", "WORLD_SIZE=3" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "rank 3", "world size 3", "out of range" } },
        { "cfg.rank=5 cfg.world_size=3", { NULL }, "tcp://127.0.0.1:29500", 5, 3, 0,
          DIST_ERR_INIT, { "rank 5", "world size 3", "out of range" } },
        { "cfg.rank=-1 cfg.world_size=3", { NULL }, "tcp://127.0.0.1:29500", -1, 3, 0,
          DIST_ERR_INIT, { "rank -1", "world size 3" } },
        { "?rank=4&world_size=2 in the URL", { NULL }, "tcp://127.0.0.1:29500?rank=4&world_size=2", 0, 0, 0,
          DIST_ERR_INIT, { "rank 4", "world size 2" } },
        { "RANK=abc", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=abc", "WORLD_SIZE=2" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "RANK", "not a number" } },
        { "no RANK/WORLD_SIZE nor fallbacks", { "MASTER_ADDR=127.0.0.1", port_env }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "world size", "RANK", "WORLD_SIZE" } },
        { "DIST_TIMEOUT=abc", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=0", "WORLD_SIZE=1", "DIST_TIMEOUT=abc" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "DIST_TIMEOUT", "abc" } },
        { "DIST_TIMEOUT=-1", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=0", "WORLD_SIZE=1", "DIST_TIMEOUT=-1" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "DIST_TIMEOUT", "-1" } },
        { "DIST_TIMEOUT=0", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=0", "WORLD_SIZE=1", "DIST_TIMEOUT=0" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "DIST_TIMEOUT" } },
        /* "5m" is not 5 seconds (nor 5 minutes): trailing garbage must be refused */
        { "DIST_TIMEOUT=5m", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=0", "WORLD_SIZE=1", "DIST_TIMEOUT=5m" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "DIST_TIMEOUT", "5m" } },
        /* 0.1 ms rounds to 0 ms, which is no timeout (0 means "the default" in the config) */
        { "DIST_TIMEOUT=0.0001 (0 ms once rounded)", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=0", "WORLD_SIZE=1", "DIST_TIMEOUT=0.0001" }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "DIST_TIMEOUT", "0.0001" } },
        { "DIST_STORE_LISTEN_FD names no listening socket", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=0", "WORLD_SIZE=1", fd_env }, NULL, 0, 0, 0,
          DIST_ERR_INIT, { "listening socket" } },
        { "rank 1 of 2 whose rank 0 never appears (env://, cfg.timeout_ms 1500)", { "MASTER_ADDR=127.0.0.1", port_env, "RANK=1", "WORLD_SIZE=2" }, NULL, 0, 0, 1500,
          DIST_ERR_TIMEOUT, { "could not reach the store", "rank 1" } },
    };
    snprintf(port_env, sizeof port_env, "MASTER_PORT=%d", closed);
    snprintf(fd_env, sizeof fd_env, "DIST_STORE_LISTEN_FD=%d", 1);   /* stdout: not a socket */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_errcase(&cases[i]);
    /* the time the last case took */
    {
        const char *name = "error: rank 0 never appears: fails after ~1.5 s, not earlier, not much later";
        long t = g_slots[0].init_ms;
        if (!g_slots[0].finished) fail(name, "the process %s", slot_state(&g_slots[0]));
        else if (t < 1400 || t > scaled(6000)) fail(name, "dist_init took %ld ms", t);
        else { printf("ok   %s  [%ld ms]\n", name, t); fflush(stdout); }
    }
}

/* file:// whose rank 0 never writes the file: the timeout from DIST_TIMEOUT. */
static void setup_file_dist_timeout(const scen_t *s, int idx, dist_config *cfg) {
    (void)idx;
    snprintf(g_url_buf, sizeof g_url_buf, "file://%s", s->path);
    cfg->init_method = g_url_buf;
    cfg->rank = 1;
    cfg->world_size = 2;
    setenv("DIST_TIMEOUT", "1", 1);
}

static void test_file_never(void) {
    scen_t s = scen("error: file:// whose rank 0 never writes the file (DIST_TIMEOUT=1)", 1);
    const slot_t *sl = &g_slots[0];
    s.setup = setup_file_dist_timeout;
    s.no_exchange = 1;
    s.deadline_ms = 15000;
    snprintf(s.path, sizeof s.path, "/tmp/dist_test_init_never_%d", test_id());
    remove_before(s.path);
    run_job(&s);
    if (!sl->finished || sl->exit_code) fail(s.name, "the process %s", slot_state(sl));
    else if (sl->init_res == DIST_OK) fail(s.name, "dist_init succeeded");
    else if (!strstr(sl->msg, s.path) || !strstr(sl->msg, "rank 0"))
        fail(s.name, "message \"%s\" does not name the file and rank 0", sl->msg);
    else if (sl->init_ms < 900 || sl->init_ms > scaled(6000)) fail(s.name, "failed after %ld ms, expected ~1000", sl->init_ms);
    else { printf("ok   %s  [%ld ms: %s]\n", s.name, sl->init_ms, sl->msg); fflush(stdout); }
}

static void test_world_disagreement(void) {
    const char *base = "error: world-size disagreement (rank 0 says 3, rank 1 says 2, rank 2 says 3)";
    char name[300];
    scen_t s = scen(base, 3);
    int good = 1;
    char why[1200] = "";
    s.setup = setup_ranks;
    s.no_exchange = 1;
    s.timeout_ms = 3000;
    s.deadline_ms = 25000;
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    s.rank[0] = 0; s.world[0] = 3;
    s.rank[1] = 1; s.world[1] = 2;
    s.rank[2] = 2; s.world[2] = 3;
    /* rank 2 starts 500 ms after the others (ranks rarely start together):
       its wait ends after rank 0's, so rank 0 must not take the
       explanation away with it */
    s.delay_ms[2] = 500;
    run_job(&s);
    for (int i = 0; i < 3; i++) printf("       process %d (rank %d of %d): %s after %ld ms, %s: %s\n", i, s.rank[i], s.world[i],
                                       slot_state(&g_slots[i]), g_slots[i].init_ms,
                                       dist_result_name((dist_result)g_slots[i].init_res), g_slots[i].msg);
    /* 1. nobody joins, nobody hangs */
    snprintf(name, sizeof name, "%s: every process fails, none hangs", base);
    for (int i = 0; i < 3 && good; i++) {
        const slot_t *sl = &g_slots[i];
        if (!sl->finished || sl->exit_code) { good = 0; snprintf(why, sizeof why, "process %d %s", i, slot_state(sl)); }
        else if (sl->init_res == DIST_OK) { good = 0; snprintf(why, sizeof why, "process %d (rank %d of %d) joined", i, s.rank[i], s.world[i]); }
    }
    if (good) ok("%s", name); else fail(name, "%s", why);
    if (!good) return;
    /* 2. the refused process says why, at once */
    snprintf(name, sizeof name, "%s: rank 1 is refused at once, naming both world sizes", base);
    if (!strstr(g_slots[1].msg, "world size 2") || !strstr(g_slots[1].msg, "world size 3"))
        fail(name, "message \"%s\"", g_slots[1].msg);
    else if (g_slots[1].init_ms > scaled(2000)) fail(name, "it took %ld ms", g_slots[1].init_ms);
    else ok("%s", name);
    /* 3. the ranks left waiting say what happened (the store records the
          refusal under "dist/rejected" for them, see the design notes) */
    for (int i = 0; i < 3; i += 2) {
        snprintf(name, sizeof name, "%s: rank %d%s reports the refusal (world sizes) after its timeout", base, i,
                 i == 2 ? " (started 500 ms later)" : "");
        if (!strstr(g_slots[i].msg, "world size 2") || !strstr(g_slots[i].msg, "world size 3"))
            fail(name, "its message does not say why the job did not form: \"%s\"", g_slots[i].msg);
        else ok("%s", name);
    }
}

static void hold_store(const scen_t *s, int idx, dist_t *w, slot_t *slot) {
    (void)s; (void)w; (void)slot;
    if (idx == 0) sleep_ms(1000);
}

static void test_duplicate_rank(void) {
    const char *base = "error: duplicate rank (two processes claim rank 1 of 3)";
    char name[300];
    scen_t s = scen(base, 4);
    int good = 1, refused = -1, joined1 = 0;   /* refused: the first process that does not pass */
    char why[1200] = "";
    s.setup = setup_ranks;
    s.timeout_ms = 3000;
    s.deadline_ms = 25000;
    s.no_run_id = 1;          /* as processes started by hand: nothing but the second claim tells them apart */
    s.port = job_port(AF_INET);
    snprintf(s.url, sizeof s.url, "tcp://127.0.0.1:%d", s.port);
    s.rank[0] = 0; s.world[0] = 3;
    s.rank[1] = 1; s.world[1] = 3;
    s.rank[2] = 1; s.world[2] = 3;
    s.rank[3] = 2; s.world[3] = 3;
    /* rank 2 comes late, so that both rank-1 processes reach the store
       before the job could form (and rank 0 end it) without one of them */
    s.delay_ms[3] = 1000;
    s.after_init = hold_store;   /* and rank 0 keeps the store up a while */
    run_job(&s);
    for (int i = 0; i < 4; i++)
        printf("       process %d (rank %d): %s after %ld ms, %s%s%s\n", i, s.rank[i], slot_state(&g_slots[i]), g_slots[i].init_ms,
               dist_result_name((dist_result)g_slots[i].init_res), g_slots[i].msg[0] ? ": " : "", g_slots[i].msg);
    snprintf(name, sizeof name, "%s: nobody hangs", base);
    for (int i = 0; i < 4 && good; i++) {
        const slot_t *sl = &g_slots[i];
        if (!sl->finished || sl->exit_code) { good = 0; snprintf(why, sizeof why, "process %d %s", i, slot_state(sl)); }
    }
    if (good) ok("%s", name); else { fail(name, "%s", why); return; }
    /* Nothing tells which claim is right (two launches on one port look
       like this): the job must not form from either; every process fails,
       saying why, and quickly. */
    snprintf(name, sizeof name, "%s: no process joins; each fails within 2 s of its start (rank 0, which hosts the store, 2 s after it lingered) saying \"rank 1 was claimed twice\"", base);
    for (int i = 0; i < 4; i++) {
        const slot_t *sl = &g_slots[i];
        if (sl->init_res == DIST_OK) { joined1++; refused = i; }
        else if (!strstr(sl->msg, "rank 1 was claimed twice") && refused < 0) refused = 100 + i;
        else if (sl->init_ms > scaled(2000) + (i == 0 ? DIST__FATAL_LINGER_MS : 0) && refused < 0) refused = 200 + i;   /* rank 0 lingers for the others */
    }
    if (joined1) fail(name, "process %d joined", refused);
    else if (refused >= 200) fail(name, "process %d took %ld ms", refused - 200, g_slots[refused - 200].init_ms);
    else if (refused >= 100) fail(name, "process %d said something else", refused - 100);
    else ok("%s", name);
}

int main(void) {
    test_start();
    clear_env();
    g_slots = (slot_t *)mmap(NULL, sizeof(slot_t) * MAXP, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_slots == MAP_FAILED) { perror("mmap"); return 1; }

    test_env();
    test_env_listen_fd();
    test_fallbacks();
    test_env_rank();
    test_tcp();
    test_ipv6();
    test_file();
    test_file_more();
    test_dist_init_method();
    test_dist_timeout();
    test_errors();
    test_file_never();
    test_world_disagreement();
    test_duplicate_rank();

    munmap(g_slots, sizeof(slot_t) * MAXP);
    if (g_failures) { printf("%d check(s) failed\n", g_failures); return 1; }
    if (g_no_ipv6) {
        printf("skipped: no IPv6 loopback on this machine (cannot bind ::1), so the IPv6 checks did not run; every other check passed\n");
        return 77;
    }
    printf("all checks passed\n");
    return 0;
}
