// WINDOWS: yes
// TIMEOUT: 60
/* test_log.c - logging and the name/text tables.
     - cfg.logger {func, user}: messages arrive with `user`, at the levels
       asked for (INFO during init at DIST_LOG_INFO; none at the default
       WARN; a store refusal at WARN; an error after a failed receive)
     - DIST_DEBUG=info|detail without a logger: lines "dist ..." on stderr
       (detail's stamped "dist 12:34:56.789012Z error: ..."; more in
       test_debug.c)
     - no DIST_DEBUG and no logger: the library prints nothing, in a job
       that succeeds and in jobs that fail
     - dist_result_name/text for every code, dist_dtype_size/name for
       every dtype, dist_version.
   One line per check; exit 0 only if every check passed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifndef _WIN32
#  include <arpa/inet.h>
#  include <netinet/in.h>
#  include <poll.h>
#  include <sys/prctl.h>
#  include <sys/socket.h>
#  include <sys/wait.h>
#endif
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/* ---- tables ------------------------------------------------------------------ */

#define E(code, text) { code, #code, text }
static const struct { dist_result code; const char *name, *text; } results[] = {
    /* the documented list (dist.h, "results") */
    E(DIST_OK, "success"),
    E(DIST_ERR_INVALID, "invalid argument"),
    E(DIST_ERR_TIMEOUT, "timed out"),
    E(DIST_ERR_PEER_LOST, "a peer closed its connection or died"),
    E(DIST_ERR_MISMATCH, "ranks called with different arguments"),
    E(DIST_ERR_NOMEM, "out of memory"),
    E(DIST_ERR_SYSTEM, "an operating-system call failed"),
    E(DIST_ERR_PROTOCOL, "malformed bytes from the network"),
    E(DIST_ERR_INIT, "rendezvous or configuration failed"),
    E(DIST_ERR_TRUNCATED, "the buffer is too small for the value"),
    E(DIST_ERR_ABORTED, "the communicator was aborted"),
    E(DIST_ERR_FAILED, "the communicator failed earlier"),
    E(DIST_ERR_UNSUPPORTED, "not supported by this build"),
    E(DIST_ERR_NOT_FOUND, "no such key"),
    E(DIST_ERR_NO_DEVICE, "no CUDA device or CUDA library"),
    E(DIST_ERR_CUDA, "a CUDA call failed"),
    E(DIST_ERR_NCCL, "an NCCL call failed"),
    E(DIST_ERR_REMOTE, "the remote function failed"),
    E(DIST_ERR_UNKNOWN_FUNCTION, "no function of that name"),
    E(DIST_ERR_TYPE, "value of another type"),
    E(DIST_ERR_REVOKED, "the communicator was revoked"),
};
#undef E

static void test_tables(void) {
    int n = (int)(sizeof results / sizeof results[0]), bad = 0, in_list = 0;
    char why[300] = "";
    /* every entry of the table above */
    for (int i = 0; i < n; i++) {
        const char *nm = dist_result_name(results[i].code), *tx = dist_result_text(results[i].code);
        if (!nm || strcmp(nm, results[i].name) != 0) { bad++; snprintf(why, sizeof why, "name of %d: \"%s\", expected \"%s\"", (int)results[i].code, nm ? nm : "(null)", results[i].name); }
        if (!tx || strcmp(tx, results[i].text) != 0) { bad++; snprintf(why, sizeof why, "text of %s: \"%s\", expected \"%s\"", results[i].name, tx ? tx : "(null)", results[i].text); }
        for (int j = 0; j < i; j++)
            if (results[j].code == results[i].code) { bad++; snprintf(why, sizeof why, "%s and %s share %d", results[j].name, results[i].name, (int)results[i].code); }
    }
    /* and every code the library's list has is in the table */
#define COUNT_CODE(name_, value_, text_)                                          \
    {                                                                             \
        int found_ = 0;                                                           \
        for (int i = 0; i < n; i++) if (results[i].code == (dist_result)(value_)) found_ = 1; \
        if (!found_) { bad++; snprintf(why, sizeof why, "%s (%d) is not documented in this test", #name_, (int)(value_)); } \
        in_list++;                                                                \
    }
    DIST_RESULT_LIST(COUNT_CODE)
#undef COUNT_CODE
    if (in_list != n) { bad++; snprintf(why, sizeof why, "the library lists %d codes, the test %d", in_list, n); }
    if (bad) fail("dist_result_name / dist_result_text for every code", "%d wrong, e.g. %s", bad, why);
    else ok("dist_result_name / dist_result_text for every code (%d codes)", n);

    {
        static const int unknown[] = { 1, -15, -99, -103, -199, -203, 12345, -0x7fffffff };
        bad = 0;
        for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
            const char *nm = dist_result_name((dist_result)unknown[i]), *tx = dist_result_text((dist_result)unknown[i]);
            if (!nm || strcmp(nm, "DIST_ERR_UNKNOWN") != 0) { bad++; snprintf(why, sizeof why, "name of %d: \"%s\"", unknown[i], nm ? nm : "(null)"); }
            else if (!tx || !tx[0]) { bad++; snprintf(why, sizeof why, "text of %d is empty or NULL", unknown[i]); }
            else for (int j = 0; j < n; j++)
                if (strcmp(tx, results[j].text) == 0) { bad++; snprintf(why, sizeof why, "text of %d is that of %s", unknown[i], results[j].name); }
        }
        if (bad) fail("unknown result codes", "%s", why);
        else ok("unknown result codes: \"DIST_ERR_UNKNOWN\" and a text of their own");
    }

    {
        static const struct { dist_dtype t; size_t size; const char *name; } dt[] = {
            { DIST_INT8, sizeof(int8_t), "int8" },   { DIST_UINT8, sizeof(uint8_t), "uint8" },
            { DIST_INT32, sizeof(int32_t), "int32" }, { DIST_INT64, sizeof(int64_t), "int64" },
            { DIST_FLOAT16, 2, "float16" },          { DIST_BFLOAT16, 2, "bfloat16" },
            { DIST_FLOAT32, sizeof(float), "float32" }, { DIST_FLOAT64, sizeof(double), "float64" },
        };
        int nd = (int)(sizeof dt / sizeof dt[0]);
        bad = 0;
        if (nd != DIST_DTYPE_COUNT) { bad++; snprintf(why, sizeof why, "DIST_DTYPE_COUNT is %d, the test knows %d", (int)DIST_DTYPE_COUNT, nd); }
        for (int i = 0; i < nd; i++) {
            const char *nm = dist_dtype_name(dt[i].t);
            if (dist_dtype_size(dt[i].t) != dt[i].size) { bad++; snprintf(why, sizeof why, "size of %s: %zu", dt[i].name, dist_dtype_size(dt[i].t)); }
            if (!nm || strcmp(nm, dt[i].name) != 0) { bad++; snprintf(why, sizeof why, "name of %d: \"%s\"", (int)dt[i].t, nm ? nm : "(null)"); }
        }
        if (bad) fail("dist_dtype_size / dist_dtype_name for every dtype", "%s", why);
        else ok("dist_dtype_size / dist_dtype_name for every dtype (%d)", nd);

        bad = 0;
        {
            static const int invalid[] = { DIST_DTYPE_COUNT, DIST_DTYPE_COUNT + 1, -1, 255, 100000 };
            for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
                const char *nm = dist_dtype_name((dist_dtype)invalid[i]);
                if (dist_dtype_size((dist_dtype)invalid[i]) != 0) { bad++; snprintf(why, sizeof why, "size of %d is not 0", invalid[i]); }
                if (!nm) { bad++; snprintf(why, sizeof why, "name of %d is NULL", invalid[i]); }
                else for (int j = 0; j < nd; j++)
                    if (strcmp(nm, dt[j].name) == 0) { bad++; snprintf(why, sizeof why, "name of %d is \"%s\"", invalid[i], nm); }
            }
        }
        if (bad) fail("invalid dtypes", "%s", why);
        else ok("invalid dtypes: size 0, a name that is no dtype's");
    }

    {
        char v[32];
        snprintf(v, sizeof v, "%d.%d.%d", DIST_VERSION_MAJOR, DIST_VERSION_MINOR, DIST_VERSION_PATCH);
        if (strcmp(dist_version(), v) != 0 || strcmp(DIST_VERSION_STRING, v) != 0)
            fail("dist_version", "\"%s\", macros say %s / %s", dist_version(), v, DIST_VERSION_STRING);
        else ok("dist_version() == \"%s\" == DIST_VERSION_STRING", v);
    }
}

/* ---- the logger ------------------------------------------------------------- */

#define MAXLOG 64
typedef struct logbook {
    int count[5];                 /* per level, 0 = out of range */
    int bad_user;
    int total;
    char text[MAXLOG][200];
    int level[MAXLOG];
} logbook_t;

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static logbook_t g_book;          /* this process's (a rank's) log */
static int g_user_token;          /* &g_user_token is the `user` */

static void test_logger(dist_log_level level, const char *message, void *user) {
    pthread_mutex_lock(&g_log_lock);
    if (user != &g_user_token) g_book.bad_user++;
    g_book.count[level >= 1 && level <= 4 ? level : 0]++;
    if (g_book.total < MAXLOG) {
        snprintf(g_book.text[g_book.total], sizeof g_book.text[0], "%s", message ? message : "(null)");
        g_book.level[g_book.total] = (int)level;
    }
    g_book.total++;
    pthread_mutex_unlock(&g_log_lock);
}

typedef struct shared {
    logbook_t book[2];            /* what each rank's logger got, copied at the end of fn */
    int mismatch_res;
    char mismatch_msg[TEST_ERRLEN];
    int refused_seen;             /* the garbage client saw the store close */
    int spawn_res;
} shared_t;
static shared_t *g;

typedef struct job { int garbage; int mismatch; int port; int wait_warn_ms; } job_t;

static void copy_book(int rank) {
    pthread_mutex_lock(&g_log_lock);
    g->book[rank] = g_book;
    pthread_mutex_unlock(&g_log_lock);
}

static void barrier2(dist_t *w) {
    uint8_t b = 0;
    int other = 1 - dist_rank(w);
    dist_send(w, &b, 1, DIST_UINT8, other, 900);
    dist_recv(w, &b, 1, DIST_UINT8, other, 900);
}

/* Connects to the store, sends 48 bytes that are no hello, reads until the
   store hangs up (it has dealt with us then). */
#ifdef _WIN32
/* (Winsock: send, recv, WSAPoll and closesocket for write, read, poll and
   close) */
#  define write(s, b, n) send(s, (const char *)(b), (int)(n), 0)
#  define read(s, b, n) recv(s, (char *)(b), (int)(n), 0)
#  define poll(p, n, ms) WSAPoll(p, n, ms)
#  define close(s) closesocket(s)
#endif
static int garbage_client(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0), done = 0;
    struct sockaddr_in a;
    uint8_t junk[48];
    long deadline = now_ms() + scaled(5000);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    memset(junk, 'J', sizeof junk);
    if (s < 0) return 0;
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 || write(s, junk, sizeof junk) != (ssize_t)sizeof junk) { close(s); return 0; }
    while (!done && now_ms() < deadline) {
        struct pollfd p = { s, POLLIN, 0 };
        char buf[256];
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(s, buf, sizeof buf);
            if (n <= 0) done = 1;
        }
    }
    close(s);
    return done;
}
#ifdef _WIN32
#  undef write
#  undef read
#  undef poll
#  undef close
#endif

static int fn_logjob(dist_t *w, void *arg) {
    const job_t *j = (const job_t *)arg;
    int rank = dist_rank(w);
    if (j->garbage && rank == 1) g->refused_seen = garbage_client(j->port);
    barrier2(w);
    if (j->wait_warn_ms && rank == 0) {   /* the store's thread logs the refusal */
        long end = now_ms() + j->wait_warn_ms;
        for (;;) {
            int n;
            pthread_mutex_lock(&g_log_lock);
            n = g_book.count[DIST_LOG_WARN];
            pthread_mutex_unlock(&g_log_lock);
            if (n > 0 || now_ms() >= end) break;
            sleep_ms(10);
        }
    }
    if (j->mismatch) {
        int32_t v[3] = { 1, 2, 3 };
        if (rank == 0) dist_send(w, v, 3, DIST_INT32, 1, 5);
        else {
            g->mismatch_res = dist_recv(w, v, 2, DIST_INT32, 0, 5);
            snprintf(g->mismatch_msg, sizeof g->mismatch_msg, "%s", dist_error_message(w));
        }
    }
    barrier2(w);
    copy_book(rank);
    return 0;
}

/* The job runs in a guard process that is killed at a deadline, so a hang
   fails the check instead of the test; the results come back through the
   shared mapping. */

/* The job's config: tcp:// on j->port (url holds it), the level, and the
   test's logger if asked; the logbook starts empty. */
static void logjob_config(dist_config *cfg, char *url, size_t cap, dist_log_level level, int use_logger, const job_t *j) {
    memset(cfg, 0, sizeof *cfg);
    memset(&g_book, 0, sizeof g_book);
    snprintf(url, cap, "tcp://127.0.0.1:%d", j->port);
    cfg->init_method = url;
    cfg->timeout_ms = 10000;
    if (use_logger) { cfg->logger.func = test_logger; cfg->logger.user = &g_user_token; }
    cfg->log_level = level;
}

#ifdef _WIN32
/* Windows has no fork: spawn_job runs the job in a process of its own,
   without the deadline (the runner's time limit still holds), on the
   first process's port. */
static void run_logjob(dist_log_level level, int use_logger, job_t *j) {
    static int calls;
    char key[32];
    dist_config cfg;
    char url[64];
    memset(g, 0, sizeof *g);
    g->spawn_res = -100;
    snprintf(key, sizeof key, "logjob%d", ++calls);
    j->port = first_value(key, free_port(AF_INET));
    logjob_config(&cfg, url, sizeof url, level, use_logger, j);
    g->spawn_res = spawn_job(2, fn_logjob, j, &cfg);
}
#else
static void run_logjob(dist_log_level level, int use_logger, job_t *j) {
    pid_t pid;
    long deadline;
    int st;
    memset(g, 0, sizeof *g);
    g->spawn_res = -100;
    j->port = free_port(AF_INET);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        dist_config cfg;
        char url[64];
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        logjob_config(&cfg, url, sizeof url, level, use_logger, j);
        g->spawn_res = dist_spawn(2, fn_logjob, j, &cfg);
        _exit(0);
    }
    deadline = now_ms() + scaled(30000);
    while (waitpid(pid, &st, WNOHANG) != pid) {
        if (now_ms() >= deadline) { kill(pid, SIGKILL); waitpid(pid, &st, 0); g->spawn_res = -2; break; }
        sleep_ms(5);
    }
}
#endif

static int book_has(const logbook_t *b, int level, const char *word) {
    for (int i = 0; i < b->total && i < MAXLOG; i++)
        if (b->level[i] == level && (!word || strstr(b->text[i], word))) return 1;
    return 0;
}

static void show_book(const logbook_t *b, int rank) {
    for (int i = 0; i < b->total && i < MAXLOG && i < 6; i++)
        printf("       [rank %d logger, level %d] %s\n", rank, b->level[i], b->text[i]);
}

static void test_logger_levels(void) {
    job_t j;
    /* 1. DIST_LOG_INFO: info messages during init, `user` passed through */
    {
        const char *name = "cfg.logger at DIST_LOG_INFO: INFO messages during init on every rank, `user` passed through";
        memset(&j, 0, sizeof j);
        run_logjob(DIST_LOG_INFO, 1, &j);
        if (g->spawn_res != 0) fail(name, "dist_spawn returned %d: %s", g->spawn_res, dist_error_message(NULL));
        else if (g->book[0].count[DIST_LOG_INFO] == 0 || g->book[1].count[DIST_LOG_INFO] == 0)
            fail(name, "INFO messages: rank 0 %d, rank 1 %d", g->book[0].count[DIST_LOG_INFO], g->book[1].count[DIST_LOG_INFO]);
        else if (g->book[0].bad_user || g->book[1].bad_user) fail(name, "a message came with another `user`");
        else if (g->book[0].count[DIST_LOG_DEBUG] || g->book[1].count[DIST_LOG_DEBUG] || g->book[0].count[0] || g->book[1].count[0])
            fail(name, "DEBUG or out-of-range levels arrived at level INFO");
        else {
            int empty = 0;
            for (int r = 0; r < 2; r++)
                for (int i = 0; i < g->book[r].total && i < MAXLOG; i++) if (!g->book[r].text[i][0]) empty = 1;
            if (empty) fail(name, "an empty message");
            else { ok("%s", name); show_book(&g->book[1], 1); }
        }
    }
    /* 2. the default level (WARN): a store refusal arrives, no INFO */
    {
        const char *name = "cfg.logger at the default level (WARN): no INFO; a store refusal arrives as WARN on rank 0";
        memset(&j, 0, sizeof j);
        j.garbage = 1;
        j.wait_warn_ms = scaled(3000);
        run_logjob((dist_log_level)0, 1, &j);
        if (g->spawn_res != 0) fail(name, "dist_spawn returned %d: %s", g->spawn_res, dist_error_message(NULL));
        else if (!g->refused_seen) fail(name, "the store did not hang up on the garbage client");
        else if (g->book[0].count[DIST_LOG_INFO] || g->book[1].count[DIST_LOG_INFO] || g->book[0].count[DIST_LOG_DEBUG] || g->book[1].count[DIST_LOG_DEBUG])
            fail(name, "INFO/DEBUG messages arrived: rank 0 %d, rank 1 %d", g->book[0].count[DIST_LOG_INFO], g->book[1].count[DIST_LOG_INFO]);
        else if (!book_has(&g->book[0], DIST_LOG_WARN, NULL)) fail(name, "no WARN message on rank 0");
        else if (g->book[0].bad_user) fail(name, "a message came with another `user`");
        else { ok("%s", name); show_book(&g->book[0], 0); }
    }
    /* 3. DIST_LOG_ERROR: no WARN for the same refusal; an error after a failed receive */
    {
        const char *name = "cfg.logger at DIST_LOG_ERROR: no WARN; the failed receive's error arrives with its sentence";
        memset(&j, 0, sizeof j);
        j.garbage = 1;
        j.mismatch = 1;
        run_logjob(DIST_LOG_ERROR, 1, &j);
        if (g->spawn_res != 0) fail(name, "dist_spawn returned %d: %s", g->spawn_res, dist_error_message(NULL));
        else if (!g->refused_seen) fail(name, "the store did not hang up on the garbage client");
        else if (g->mismatch_res != DIST_ERR_MISMATCH) fail(name, "the receive returned %s", dist_result_name((dist_result)g->mismatch_res));
        else if (g->book[0].count[DIST_LOG_WARN] || g->book[1].count[DIST_LOG_WARN] || g->book[0].count[DIST_LOG_INFO] || g->book[1].count[DIST_LOG_INFO])
            fail(name, "WARN/INFO messages arrived (rank 0: %d WARN, %d INFO)", g->book[0].count[DIST_LOG_WARN], g->book[0].count[DIST_LOG_INFO]);
        else if (!book_has(&g->book[1], DIST_LOG_ERROR, g->mismatch_msg))
            fail(name, "no ERROR message containing \"%s\" on rank 1 (%d messages)", g->mismatch_msg, g->book[1].total);
        else if (g->book[1].bad_user) fail(name, "a message came with another `user`");
        else { ok("%s", name); show_book(&g->book[1], 1); }
    }
}

/* ---- captured output --------------------------------------------------------- */

typedef struct capture { char out[16384]; size_t out_len; char err[16384]; size_t err_len; int status; int timed_out; } capture_t;

static int fn_quiet(dist_t *w, void *arg) {
    (void)arg;
    barrier2(w);
    return 0;
}

static int fn_mismatch(dist_t *w, void *arg) {
    int32_t v[3] = { 1, 2, 3 };
    dist_result r = DIST_OK;
    (void)arg;
    if (dist_rank(w) == 0) dist_send(w, v, 3, DIST_INT32, 1, 5);
    else r = dist_recv(w, v, 2, DIST_INT32, 0, 5);
    barrier2(w);
    return r == DIST_OK ? 0 : 1;
}

/* Runs body() in a child whose stdout and stderr go to pipes (the same pipe
   when `merged`); collects both until the child and its ranks are gone. */
#ifdef _WIN32
/* Windows has no fork: body() runs in a process of its own
   (run_in_process) whose stdout and stderr, and so its ranks', are files
   read back after it ended (without the deadline: the runner's time limit
   still holds); carriage returns are dropped. */
static void (*g_body)(void);
static int run_body(void) { g_body(); return 0; }
static void read_back(const char *path, char *buf, size_t cap, size_t *len) {
    FILE *f = fopen(path, "rb");
    int ch;
    *len = 0;
    if (!f) return;
    while ((ch = fgetc(f)) != EOF && *len < cap - 1) if (ch != '\r') buf[(*len)++] = (char)ch;
    fclose(f);
    remove(path);
}
static void capture(void (*body)(void), int merged, capture_t *c) {
    char po[MAX_PATH + 64], pe[MAX_PATH + 64], dir[MAX_PATH];
    int so, se, fo, fe = -1;
    memset(c, 0, sizeof *c);
    g_body = body;
    if (!first_process()) { run_in_process(run_body); return; }   /* (the processes that run main again) */
    if (!GetTempPathA(sizeof dir, dir)) snprintf(dir, sizeof dir, ".\\");
    snprintf(po, sizeof po, "%stest_log.%lu.out", dir, (unsigned long)GetCurrentProcessId());
    snprintf(pe, sizeof pe, "%stest_log.%lu.err", dir, (unsigned long)GetCurrentProcessId());
    fflush(NULL);
    so = _dup(1);
    se = _dup(2);
    fo = _open(po, _O_WRONLY | _O_CREAT | _O_TRUNC | _O_BINARY, 0600);
    if (!merged) fe = _open(pe, _O_WRONLY | _O_CREAT | _O_TRUNC | _O_BINARY, 0600);
    if (so < 0 || se < 0 || fo < 0 || (!merged && fe < 0)) { perror("capture"); exit(1); }
    _dup2(fo, 1);
    _dup2(merged ? fo : fe, 2);
    c->status = (int)run_in_process(run_body);
    fflush(NULL);
    _dup2(so, 1);
    _dup2(se, 2);
    _close(so); _close(se); _close(fo);
    if (fe >= 0) _close(fe);
    read_back(po, c->out, sizeof c->out, &c->out_len);
    if (!merged) read_back(pe, c->err, sizeof c->err, &c->err_len);
    c->out[c->out_len] = 0;
    c->err[c->err_len] = 0;
}
#else
static void capture(void (*body)(void), int merged, capture_t *c) {
    int po[2], pe[2];
    pid_t pid;
    long deadline = now_ms() + scaled(20000);
    int open_o = 1, open_e = !merged;
    memset(c, 0, sizeof *c);
    if (pipe(po) != 0 || pipe(pe) != 0) { perror("pipe"); exit(1); }
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(po[1], 1);
        dup2(merged ? po[1] : pe[1], 2);
        close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
        body();
        fflush(NULL);
        _exit(0);
    }
    close(po[1]); close(pe[1]);
    if (merged) close(pe[0]);
    while ((open_o || open_e) && now_ms() < deadline) {
        struct pollfd p[2];
        int np = 0, io = -1, ie = -1;
        if (open_o) { p[np].fd = po[0]; p[np].events = POLLIN; io = np++; }
        if (open_e) { p[np].fd = pe[0]; p[np].events = POLLIN; ie = np++; }
        if (poll(p, (nfds_t)np, 100) <= 0) continue;
        if (io >= 0 && p[io].revents) {
            ssize_t n = read(po[0], c->out + c->out_len, sizeof c->out - 1 - c->out_len);
            if (n <= 0) open_o = 0; else c->out_len += (size_t)n;
        }
        if (ie >= 0 && p[ie].revents) {
            ssize_t n = read(pe[0], c->err + c->err_len, sizeof c->err - 1 - c->err_len);
            if (n <= 0) open_e = 0; else c->err_len += (size_t)n;
        }
    }
    if (open_o || open_e) { c->timed_out = 1; kill(pid, SIGKILL); }
    waitpid(pid, &c->status, 0);
    close(po[0]);
    if (!merged) close(pe[0]);
    c->out[c->out_len] = 0;
    c->err[c->err_len] = 0;
}
#endif

static int *g_res;   /* what the capture child's calls returned (MAP_SHARED) */

static void body_ok_job(void) {
    dist_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    g_res[0] = dist_spawn(2, fn_quiet, NULL, &cfg);
}

/* (The results are written at the end: on Windows the second job's ranks
   run this again up to their call, where the first dist_spawn returns 0 at
   once, and must not write that.  Its port is the same in every process:
   first_value.) */
static void body_error_jobs(void) {
    dist_config cfg;
    dist_t *w = NULL;
    job_t j;
    int res[4] = { 0, -100, -100, -100 };
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    res[1] = dist_spawn(2, fn_mismatch, NULL, &cfg);             /* a rank fails: 1 */
    setenv("RANK", "0", 1); setenv("WORLD_SIZE", "2", 1);
    unsetenv("MASTER_ADDR");
    res[2] = dist_init(&w, NULL);                                 /* env:// without MASTER_ADDR */
    unsetenv("RANK"); unsetenv("WORLD_SIZE");
    memset(&j, 0, sizeof j);
    j.garbage = 1;
    {   /* the store refuses a stranger (a WARN with a logger) */
        char url[64];
        j.port = first_value("error_jobs_port", free_port(AF_INET));
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", j.port);
        cfg.init_method = url;
        res[3] = dist_spawn(2, fn_logjob, &j, &cfg);
    }
    for (int i = 1; i < 4; i++) g_res[i] = res[i];
}

static void body_debug_info(void) {
    dist_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    setenv("DIST_DEBUG", "info", 1);
    g_res[0] = dist_spawn(2, fn_quiet, NULL, &cfg);
}

static void body_debug_detail(void) {
    dist_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    setenv("DIST_DEBUG", "detail", 1);
    g_res[0] = dist_spawn(2, fn_mismatch, NULL, &cfg);
}

/* Every line starts with "dist "; returns the number of lines, -1 if one does not. */
static int dist_lines(const char *text, const char **bad) {
    int n = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        if (strncmp(p, "dist ", 5) != 0) { *bad = p; return -1; }
        n++;
        if (!e) break;
        p = e + 1;
    }
    return n;
}

static void first_line(const char *s, char *out, size_t cap) {
    size_t n = strcspn(s, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, s, n);
    out[n] = 0;
}

static void test_stderr(void) {
    static capture_t c;
    const char *bad = NULL;
    char line[300];
    int n;

    {
        const char *name = "DIST_DEBUG=info, no logger: the library writes \"dist ...\" lines to stderr (and nothing to stdout)";
        g_res[0] = -100;
        capture(body_debug_info, 0, &c);
        n = dist_lines(c.err, &bad);
        if (c.timed_out) fail(name, "the job did not end");
        else if (g_res[0] != 0) fail(name, "dist_spawn returned %d", g_res[0]);
        else if (n < 0) { first_line(bad, line, sizeof line); fail(name, "a stderr line does not start with \"dist \": \"%s\"", line); }
        else if (n == 0) fail(name, "nothing on stderr");
        else if (!strstr(c.err, "dist info: ")) fail(name, "no \"dist info: \" line");
        else if (c.out_len) fail(name, "stdout: \"%s\"", c.out);
        else { first_line(c.err, line, sizeof line); ok("%s  [%d lines, e.g. \"%s\"]", name, n, line); }
    }
    {
        const char *name = "DIST_DEBUG=detail, no logger, a failed receive: \"dist ...\" lines on stderr, the error among them";
        g_res[0] = -100;
        capture(body_debug_detail, 0, &c);
        n = dist_lines(c.err, &bad);
        if (c.timed_out) fail(name, "the job did not end");
        else if (g_res[0] != 1) fail(name, "dist_spawn returned %d, expected 1", g_res[0]);
        else if (n < 0) { first_line(bad, line, sizeof line); fail(name, "a stderr line does not start with \"dist \": \"%s\"", line); }
        else if (!strstr(c.err, "Z error: [rank ") || !strstr(c.err, "expects 2 x int32")) fail(name, "no error line about the receive in:\n%s", c.err);
        else if (c.out_len) fail(name, "stdout: \"%s\"", c.out);
        else ok("%s  [%d lines]", name, n);
    }
    {
        const char *name = "no DIST_DEBUG, no logger: a 2-rank job that succeeds prints nothing";
        g_res[0] = -100;
        capture(body_ok_job, 1, &c);
        if (c.timed_out) fail(name, "the job did not end");
        else if (g_res[0] != 0) fail(name, "dist_spawn returned %d", g_res[0]);
        else if (c.out_len) fail(name, "output: \"%s\"", c.out);
        else ok("%s", name);
    }
    {
        const char *name = "no DIST_DEBUG, no logger: failing jobs print nothing (failed receive, failed init, store refusal)";
        g_res[1] = g_res[2] = g_res[3] = -100;
        capture(body_error_jobs, 1, &c);
        if (c.timed_out) fail(name, "the jobs did not end");
        else if (g_res[1] != 1) fail(name, "the job with a failed receive: dist_spawn returned %d, expected 1", g_res[1]);
        else if (g_res[2] != DIST_ERR_INIT) fail(name, "dist_init without MASTER_ADDR returned %s", dist_result_name((dist_result)g_res[2]));
        else if (g_res[3] != 0) fail(name, "the job with a refused stranger: dist_spawn returned %d", g_res[3]);
        else if (c.out_len) fail(name, "output: \"%s\"", c.out);
        else ok("%s", name);
    }
}

int main(void) {
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    g = (shared_t *)mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_res = (int *)mmap(NULL, 4 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED || g_res == MAP_FAILED) { perror("mmap"); return 1; }

    test_tables();
    test_logger_levels();
    test_stderr();

    munmap(g, sizeof *g);
    munmap(g_res, 4 * sizeof(int));
    if (g_failures) { printf("%d check(s) failed\n", g_failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
