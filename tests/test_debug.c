// TIMEOUT: 120
// WINDOWS: no, its jobs run in forked children whose stderr goes to a file (test_log checks DIST_DEBUG's stderr lines on Windows)
/* test_debug.c - DIST_DEBUG: what each level writes on stderr, and what a
   waiting rendezvous says.  Each job runs in a child whose stderr (and so
   its ranks') goes to a file, read back once the child ended.
     1. levels: "off", "0", "" and any case of off/info/detail are taken;
        anything else fails dist_init (DIST_ERR_INIT, a sentence naming the
        value and the levels), dist_spawn and dist_store_host_start too.
     2. a 4-rank job (dist_spawn) at off, info and detail:
        off     nothing on stderr;
        info    "dist info: [rank R] ..." lines: each rank's store address,
                "joined: a mesh of 4 ranks", "destroy: done"; no DEBUG line,
                no per-connection line, no time stamp;
        detail  strictly more lines, each "dist HH:MM:SS.uuuuuuZ level: ...",
                the stamps of each rank never going back; one "attempt N:
                connected" line per connection (to the store: 4; mesh:
                n(n-1)/2 = 6), 6 "mesh: connected to rank" and 6 "mesh:
                accepted rank" lines, the store's 4 "store: rank R joined"
                lines, a "transport: rank J" line per peer (12), the info
                lines' lifecycle among them;
        dist_log() from the ranks: at info and detail, not at off.
     3. a job that cannot form: 4 ranks on tcp://, rank 2 never starts,
        rank 3 is given the wrong port, timeout 4 s: at info, ranks 0 and 1
        say after about a second (a quarter of the timeout) and again before
        the timeout that the mesh lacks ranks 2 and 3, which have not
        published their address at the store's address; rank 3 says
        whom it cannot reach and why (connection refused); each ends with
        its timeout's sentence.
     4. dist_rpc.h: 3 workers at DIST_DEBUG=info log "rpc: worker 'wR'
        (rank R) is up ... w0=0, w1=1, w2=2" and "shut down"; a bogus
        DIST_DEBUG fails dist_rpc_init with DIST_ERR_INIT and the sentence.
   Linux (fork, files); one line per check. */
#ifndef DIST_TEST_LINKED
#define DIST_IMPLEMENTATION
#define DIST_RPC_IMPLEMENTATION
#endif
#include "dist_rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* ---- a child with its stderr in a file ------------------------------------ */

static char g_text[1 << 20];   /* what the last capture's stderr got */

/* Runs body(arg) in a child whose stderr goes to a file; returns the
   child's exit code (-1: killed at the deadline) with the text in g_text. */
static int capture(void (*body)(void *), void *arg, int limit_ms) {
    char path[] = "/tmp/test_debug.XXXXXX";
    int fd = mkstemp(path), st = 0, code;
    long deadline = now_ms() + scaled(limit_ms);
    ssize_t n;
    pid_t pid;
    if (fd < 0) { perror("mkstemp"); exit(1); }
    unlink(path);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 2);
        close(fd);
        body(arg);
        _exit(0);
    }
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (now_ms() >= deadline) { kill(pid, SIGKILL); waitpid(pid, &st, 0); break; }
        sleep_ms(10);
    }
    code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    n = pread(fd, g_text, sizeof g_text - 1, 0);
    g_text[n > 0 ? n : 0] = 0;
    close(fd);
    return code;
}

/* Lines of `text` containing every one of the NULL-ended words. */
static int count_lines(const char *text, ...) {
    int n = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[2048];
        int all = 1;
        va_list ap;
        const char *w;
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        va_start(ap, text);
        while (all && (w = va_arg(ap, const char *)) != NULL) all = strstr(line, w) != NULL;
        va_end(ap);
        n += all;
        p = e ? e + 1 : p + len;
    }
    return n;
}
#define COUNT(text, ...) count_lines(text, __VA_ARGS__, (const char *)NULL)

static int nlines(const char *text) { return COUNT(text, ""); }

static void show(const char *text, int max) {
    int k = 0;
    for (const char *p = text; *p && k < max; k++) {
        const char *e = strchr(p, '\n');
        int len = e ? (int)(e - p) : (int)strlen(p);
        printf("       | %.*s\n", len > 220 ? 220 : len, p);
        p = e ? e + 1 : p + len;
    }
}

/* ---- 1. levels --------------------------------------------------------------- */

static int free_tcp_port(void) { return free_port(AF_INET); }

/* dist_init of a world of one rank with DIST_DEBUG=v: the result, and the
   sentence in msg. */
static dist_result init_one(const char *v, char *msg, size_t cap) {
    char url[64];
    dist_config cfg;
    dist_t *w = NULL;
    dist_result r;
    memset(&cfg, 0, sizeof cfg);
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", free_tcp_port());
    cfg.init_method = url;
    cfg.world_size = 1;
    cfg.timeout_ms = scaled(5000);
    if (v) setenv("DIST_DEBUG", v, 1); else unsetenv("DIST_DEBUG");
    r = dist_init(&w, &cfg);
    snprintf(msg, cap, "%s", dist_error_message(NULL));
    if (r == DIST_OK) dist_destroy(w);
    unsetenv("DIST_DEBUG");
    return r;
}

static void body_levels(void *arg) {
    int *bad = (int *)arg;
    static const char *const good[] = { "off", "OFF", "Off", "0", "", "info", "INFO", "Info", "detail", "DETAIL", "Detail" };
    static const char *const wrong[] = { "verbose", "1", "debug", "on", "infos", "detai", "off ", "true" };
    char msg[400], want[100];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        dist_result r = init_one(good[i], msg, sizeof msg);
        if (r != DIST_OK) { printf("FAIL levels: DIST_DEBUG=\"%s\" was refused: %s: %s\n", good[i], dist_result_name(r), msg); (*bad)++; }
    }
    for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
        dist_result r = init_one(wrong[i], msg, sizeof msg);
        snprintf(want, sizeof want, "DIST_DEBUG=%s is not a level", wrong[i]);
        if (r != DIST_ERR_INIT || !strstr(msg, want) || !strstr(msg, "off, info or detail")) {
            printf("FAIL levels: DIST_DEBUG=\"%s\": %s, \"%s\" (wanted DIST_ERR_INIT and \"%s ...: use off, info or detail\")\n", wrong[i],
                   dist_result_name(r), msg, want);
            (*bad)++;
        }
    }
    {   /* a launcher's store refuses it too (dist_spawn: below) */
        dist_store_host *h = NULL;
        dist_result r;
        setenv("DIST_DEBUG", "loud", 1);
        r = dist_store_host_start(&h, NULL, 2, "127.0.0.1", 0);
        snprintf(msg, sizeof msg, "%s", dist_error_message(NULL));
        if (r != DIST_ERR_INIT || !strstr(msg, "DIST_DEBUG=loud is not a level")) {
            printf("FAIL levels: dist_store_host_start with DIST_DEBUG=loud: %s, \"%s\"\n", dist_result_name(r), msg);
            (*bad)++;
        }
        if (h) dist_store_host_stop(h);
        unsetenv("DIST_DEBUG");
    }
}

static int fn_nothing(dist_t *w, void *arg) { (void)w; (void)arg; return 0; }

static void body_spawn_bogus(void *arg) {
    int *res = (int *)arg;
    setenv("DIST_DEBUG", "loud", 1);
    res[0] = dist_spawn(2, fn_nothing, NULL, NULL);
    snprintf((char *)&res[1], 400, "%.390s", dist_error_message(NULL));
}

static void test_levels(int *shared) {
    const char *name = "DIST_DEBUG: off, 0, \"\" and off/info/detail in any case are taken; anything else fails init with a sentence "
                       "naming the value and the levels (dist_init, dist_store_host_start, dist_spawn)";
    int code;
    shared[0] = 0;
    code = capture(body_levels, shared, 30000);
    if (code != 0 || shared[0]) { printf("FAIL %s: exit %d, %d bad\n", name, code, shared[0]); g_failures++; show(g_text, 10); return; }
    shared[0] = -100;
    capture(body_spawn_bogus, shared, 30000);
    if (shared[0] != -1 || !strstr((char *)&shared[1], "spawn: store host: DIST_DEBUG=loud is not a level: use off, info or detail"))
        fail(name, "dist_spawn with DIST_DEBUG=loud returned %d: \"%s\"", shared[0], (char *)&shared[1]);
    else ok("%s  [e.g. \"%s\"]", name, (char *)&shared[1]);
}

/* ---- 2. a job at each level -------------------------------------------------- */

#define NJOB 4

static int fn_job(dist_t *w, void *arg) {
    float x = 1;
    (void)arg;
    dist_log(w, DIST_LOG_INFO, "from the application: rank %d, enabled %d", dist_rank(w), dist_log_enabled(w, DIST_LOG_INFO));
    if (dist_all_reduce(w, &x, 1, DIST_FLOAT32, DIST_SUM) != DIST_OK || x != (float)dist_world_size(w)) return 1;
    return 0;
}

static const char *g_level;
static void body_job(void *arg) {
    dist_config cfg;
    (void)arg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = scaled(20000);
    if (g_level) setenv("DIST_DEBUG", g_level, 1); else unsetenv("DIST_DEBUG");
    _exit(dist_spawn(NJOB, fn_job, NULL, &cfg) == 0 ? 0 : 3);
}

/* Every line "dist HH:MM:SS.uuuuuuZ LEVEL: ...", and each rank's stamps
   in order; 0 and why otherwise. */
static int stamps_ok(const char *text, char *why, size_t cap) {
    long long last[NJOB];
    for (int r = 0; r < NJOB; r++) last[r] = -1;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        int hh, mm, ss, us, used = 0, rank = -1;
        char lv[16];
        const char *rk;
        if (sscanf(p, "dist %2d:%2d:%2d.%6dZ %15[a-z]: %n", &hh, &mm, &ss, &us, lv, &used) != 5 || !used || p[13] != '.' || p[20] != 'Z') {
            snprintf(why, cap, "a line without a stamp: \"%.100s\"", p);
            return 0;
        }
        rk = strstr(p, "[rank ");
        if (rk && (!e || rk < e) && sscanf(rk, "[rank %d]", &rank) == 1 && rank >= 0 && rank < NJOB) {
            long long t = ((long long)hh * 3600 + mm * 60 + ss) * 1000000 + us;
            if (t < last[rank] && last[rank] - t < 3600LL * 1000000) {   /* (not a midnight) */
                snprintf(why, cap, "rank %d's stamps go back: \"%.100s\"", rank, p);
                return 0;
            }
            last[rank] = t;
        }
        if (!e) break;
        p = e + 1;
    }
    return 1;
}

static void test_job_levels(void) {
    static char info[sizeof g_text], detail[sizeof g_text];
    char why[300] = "";
    int code, ninfo, ndetail, n = NJOB, conns = NJOB * (NJOB - 1) / 2;
    {
        const char *name = "DIST_DEBUG=off: a 4-rank job writes nothing on stderr";
        g_level = "off";
        code = capture(body_job, NULL, 60000);
        if (code != 0) fail(name, "the job exited %d", code);
        else if (g_text[0]) { fail(name, "stderr:"); show(g_text, 5); }
        else ok("%s", name);
    }
    {
        const char *name = "DIST_DEBUG=info: each rank's store address, \"joined: a mesh of 4 ranks\", \"destroy: done\", dist_log's line; "
                           "nothing per connection, no DEBUG line, no stamp";
        g_level = "info";
        code = capture(body_job, NULL, 60000);
        memcpy(info, g_text, sizeof info);
        ninfo = nlines(info);
        if (code != 0) { fail(name, "the job exited %d", code); show(info, 10); }
        else if (COUNT(info, "dist info: ") + COUNT(info, "dist warn: ") != ninfo) { fail(name, "a line that is not \"dist info: \":"); show(info, 40); }
        else if (COUNT(info, "init: rank ", " of 4: store at 127.0.0.1:", "(the launcher's); timeout") != n)
            { fail(name, "%d store-address lines, not %d", COUNT(info, "of 4: store at"), n); show(info, 40); }
        else if (COUNT(info, "joined: a mesh of 4 ranks formed in ") != n || COUNT(info, "destroy: done") != n)
            { fail(name, "\"joined\" / \"destroy: done\" lines: %d / %d, not %d", COUNT(info, "joined: a mesh"), COUNT(info, "destroy: done"), n); show(info, 40); }
        else if (COUNT(info, "from the application: rank ", "enabled 1") != n) { fail(name, "dist_log's lines: %d", COUNT(info, "from the application")); show(info, 40); }
        else if (COUNT(info, "connect:") || COUNT(info, "mesh:") || COUNT(info, "transport:") || COUNT(info, "debug"))
            { fail(name, "per-connection or DEBUG lines at info:"); show(info, 40); }
        else { ok("%s  [%d lines, e.g.]", name, ninfo); show(info, 3); }
    }
    {
        const char *name = "DIST_DEBUG=detail: more lines than info, every one stamped (HH:MM:SS.uuuuuuZ, each rank's in order); "
                           "a line per connect attempt, per accepted rank and per peer's transport; the info lines among them";
        int store_att, mesh_att, connected, accepted, joined, transport;
        g_level = "detail";
        code = capture(body_job, NULL, 60000);
        memcpy(detail, g_text, sizeof detail);
        ndetail = nlines(detail);
        store_att = COUNT(detail, "connect: the store of the launcher at 127.0.0.1:", ": attempt ", ": connected");
        mesh_att = COUNT(detail, "] connect: rank ", ": attempt ", ": connected");
        connected = COUNT(detail, "] mesh: connected to rank ", "(handshake done)");
        accepted = COUNT(detail, "] mesh: accepted rank ", "(handshake done)");
        joined = COUNT(detail, "debug: store: rank ", " joined from 127.0.0.1:");
        transport = COUNT(detail, "] transport: rank ");
        if (code != 0) { fail(name, "the job exited %d", code); show(detail, 20); }
        else if (ndetail <= ninfo) fail(name, "%d lines at detail, %d at info", ndetail, ninfo);
        else if (!stamps_ok(detail, why, sizeof why)) { fail(name, "%s", why); show(detail, 10); }
        else if (store_att != n || mesh_att != conns || connected != conns || accepted != conns || joined != n || transport != n * (n - 1))
            { fail(name, "store connects %d (want %d), mesh connects %d, connected %d, accepted %d (want %d each), store joins %d (want %d), "
                   "transport lines %d (want %d)", store_att, n, mesh_att, connected, accepted, conns, joined, n, transport, n * (n - 1));
              show(detail, 60); }
        else if (COUNT(detail, "info: [rank ", "joined: a mesh of 4 ranks") != n || COUNT(detail, "info: [rank ", "destroy: done") != n ||
                 COUNT(detail, "of 4: store at 127.0.0.1:") != n || COUNT(detail, "from the application") != n)
            { fail(name, "the info lines are not all there:"); show(detail, 60); }
        else { ok("%s  [%d lines against %d; %d connections]", name, ndetail, ninfo, conns); show(detail, 6); }
    }
}

/* ---- 3. a job that cannot form ---------------------------------------------- */

typedef struct wait_job { int port; int timeout_ms; } wait_job_t;

static void body_wait(void *arg) {
    const wait_job_t *j = (const wait_job_t *)arg;
    pid_t pids[4];
    int np = 0;
    setenv("DIST_DEBUG", "info", 1);
    for (int r = 0; r < 4; r++) {
        pid_t p;
        if (r == 2) continue;                         /* never starts */
        p = fork();
        if (p == 0) {
            char url[64];
            dist_config cfg;
            dist_t *w = NULL;
            dist_result res;
            memset(&cfg, 0, sizeof cfg);
            snprintf(url, sizeof url, "tcp://127.0.0.1:%d", r == 3 ? j->port + 1 : j->port);   /* rank 3: the wrong port */
            cfg.init_method = url;
            cfg.world_size = 4;
            cfg.rank = r;
            cfg.timeout_ms = j->timeout_ms;
            cfg.run_id = "test_debug";
            res = dist_init(&w, &cfg);
            if (res == DIST_OK) dist_destroy(w);
            _exit(res == DIST_ERR_TIMEOUT || res == DIST_ERR_INIT ? 0 : 1);   /* (INIT: the first to time out said so in the store) */
        }
        pids[np++] = p;
    }
    for (int i = 0; i < np; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) _exit(4);
    }
    _exit(0);
}

/* The seconds in rank r's first "still waiting after S s" line (-1: none). */
static double first_note(const char *text, int r) {
    char tag[40];
    const char *p;
    double s = -1;
    snprintf(tag, sizeof tag, "[rank %d] init: still waiting after ", r);
    if ((p = strstr(text, tag)) != NULL) s = atof(p + strlen(tag));
    return s;
}

static void test_waiting(void) {
    const char *name = "a job that cannot form (rank 2 never starts, rank 3 has the wrong port; timeout 4 s), at info: ranks 0 and 1 "
                       "name the missing ranks after about a quarter of the timeout and again, rank 3 the store it cannot reach and why";
    wait_job_t j;
    int code, port;
    char w01[200], w3[200];
    j.port = port = free_tcp_port();
    j.timeout_ms = scaled(4000);
    code = capture(body_wait, &j, 30000);
    snprintf(w01, sizeof w01, "which have not published their address in the store at 127.0.0.1:%d", port);
    snprintf(w3, sizeof w3, "the store of rank 0 at 127.0.0.1:%d does not answer: ", port + 1);
    if (code != 0) { fail(name, "the ranks did not all fail in their rendezvous (exit %d)", code); show(g_text, 30); return; }
    for (int r = 0; r < 2; r++) {
        char tag[32];
        double t = first_note(g_text, r);
        snprintf(tag, sizeof tag, "[rank %d] init: still", r);
        if (COUNT(g_text, tag, "the mesh lacks ranks 2, 3, ", w01) < 2 || t < 0.9 * j.timeout_ms / 4000.0 || t > 2.5 * j.timeout_ms / 4000.0) {
            fail(name, "rank %d: %d notes naming ranks 2 and 3 (want 2 or more), the first after %.1f s:", r,
                 COUNT(g_text, tag, "the mesh lacks ranks 2, 3, ", w01), t);
            show(g_text, 30);
            return;
        }
    }
    if (COUNT(g_text, "[rank 3] init: still waiting after ", w3, "onnection refused") < 2) { fail(name, "rank 3's notes:"); show(g_text, 30); }
    else if (COUNT(g_text, "dist error: [rank ", "timed out after") != 2 || COUNT(g_text, "dist error: [rank 3] init: rank 3 could not reach the store") != 1)
        { fail(name, "the timeouts' error lines:"); show(g_text, 30); }
    else {
        ok("%s  [first notes after %.1f and %.1f s]", name, first_note(g_text, 0), first_note(g_text, 1));
        show(g_text, 30);
    }
}

/* ---- 4. dist_rpc.h ------------------------------------------------------------ */

static void body_rpc(void *arg) {
    const char *level = (const char *)arg;
    int port = free_tcp_port(), lfd = -1, bad = 0;
    pid_t pids[3];
    int lport = 0;
    setenv("DIST_DEBUG", level, 1);
    lfd = listen_loopback(64, &lport);
    port = lfd >= 0 ? lport : port;
    for (int r = 0; r < 3; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            dist_result res = rpc_worker_init(r, 3, port, lfd, 2, NULL, 0);
            if (res != DIST_OK) { fprintf(stderr, "INIT %d %s: %s\n", r, dist_result_name(res), dist_rpc_error_message()); _exit(res == DIST_ERR_INIT ? 5 : 6); }
            _exit(dist_rpc_shutdown(1) == DIST_OK ? 0 : 7);
        }
    }
    if (lfd >= 0) close(lfd);
    for (int r = 0; r < 3; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st)) bad = 9;
        else if (WEXITSTATUS(st) && !bad) bad = WEXITSTATUS(st);
    }
    _exit(bad);
}

static void test_rpc(void) {
    {
        const char *name = "dist_rpc.h at DIST_DEBUG=info: each worker logs \"rpc: worker 'wR' (rank R) is up ... w0=0, w1=1, w2=2\" "
                           "and that it shut down";
        int code = capture(body_rpc, (void *)"info", 60000);
        if (code != 0) { fail(name, "exit %d", code); show(g_text, 20); }
        else if (COUNT(g_text, "info: [rank ", "] rpc: worker 'w", "is up in ", ": w0=0, w1=1, w2=2") != 3 ||
                 COUNT(g_text, "info: [rank ", "] rpc: worker 'w", "shut down in ") != 3 || COUNT(g_text, "rpc:", "debug") != 0)
            { fail(name, "the rpc lines:"); show(g_text, 30); }
        else { ok("%s", name); show(g_text, 30); }
    }
    {
        const char *name = "dist_rpc.h with DIST_DEBUG=loud: dist_rpc_init fails with DIST_ERR_INIT and the sentence";
        int code = capture(body_rpc, (void *)"loud", 60000);
        if (code != 5 || COUNT(g_text, "INIT ", "DIST_ERR_INIT: rpc init: init: DIST_DEBUG=loud is not a level: use off, info or detail") != 3)
            { fail(name, "exit %d:", code); show(g_text, 10); }
        else ok("%s", name);
    }
}

int main(void) {
    int *shared;
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    shared = (int *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) { perror("mmap"); return 1; }
    test_levels(shared);
    test_job_levels();
    test_waiting();
    test_rpc();
    if (g_failures) { printf("%d check(s) failed\n", g_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
