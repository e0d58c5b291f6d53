/* tests/testutil.h - the small helpers the test programs share.

   Include it after dist.h (with DIST_IMPLEMENTATION) and the system
   headers; it includes nothing of the library.  Everything here is static
   and marked unused (functions static inline), so a test that uses only
   some of it builds without unused-function warnings.

   Time        now_ms, now_ns, now_s (CLOCK_MONOTONIC), secs_since(now_ns
               start), sleep_ms, sleep_us (nanosleep, resumed after EINTR);
               rank_alarm(secs): alarm() (Windows: a thread that ends
               the process with 142);
               await_flag(&flag, value, ms): wait (1 ms polls) until an
               int shared with other processes reaches value; set_flag(&flag)
               sets one to 1; await_flags(&first, stride, mask, ms): one
               such int a rank (each stride bytes on), every rank in mask
               set within ms in all
   Scale       g_scale = timeout_scale() (DIST_TIMEOUT_SCALE, a factor of at
               least 1 for every time limit, as in sanitizer passes);
               scaled(ms) as int, scaled_s(seconds) as double; test_start()
               reads it and makes stdout line-buffered
   Environment UNSET_ENV("A", "B", ...); LAUNCHER_ENV, the variables a
               surrounding launcher may set that must not reach the ranks;
               env_int(name, lo, hi, default)
   Reports     ok(fmt, ...) prints "ok   ...", fail(name, fmt, ...) prints
               "FAIL name: ..." and counts it in g_failures
   Cases       one case after another, judged by the parent:
               case_begin(name) (g_case, g_cur_failed = 0), then
               case_bad(fmt, ...) for each problem (the first prints "FAIL
               case"), case_end(secs, extra) prints "ok   case (secs s)" or
               counts it in g_failed; case_bad_status(rank, status, note)
               for a rank that did not exit 0 (signal, alarm, exit code);
               status_bad(bad, ...) the same, reported by bad (a bad_fn:
               case_bad, or a test's own list)
   Checks      DEFINE_CHECKS(LIST) makes the enum of check ids (and
               NCHECKS) and check_names[] from an X-macro list of
               X(id, "text"); DEFINE_CHECK_FNS(table) defines pass_(id) and
               fail_(id, rank, fmt, ...) on a MAP_SHARED table of
               { int pass, fail, claimed; char why[]; }; CHECK(id, cond, ...)
               calls one of them; check_failed_v() is fail_'s logic
   Rank side   DEFINE_FAIL_AT(nranks, claimed, buf) defines
               fail_at(rank, line, fmt, ...), which writes a rank's first
               failure as "line N: ..." into a MAP_SHARED table; FAIL(...)
               and OK(call) use it (in a rank function with `rank` and the
               communicator `w` in scope, returning int); note_first(&seen,
               buf, cap, fmt, ...) keeps the first of several messages
   Text        names_num(msg, prefix, n): prefix and n, no digit after
               ("rank 1", not "rank 12"); names_rank(msg, r)
   Patterns    mix64 (the splitmix64 finalizer); fill_bytes/check_bytes, a
               xorshift64 byte stream of any length from a seed, and the
               index of the first byte that differs from it (SIZE_MAX: none)
   Sockets     free_port(AF_INET or AF_INET6): a loopback port nobody
               listens on right now; listen_loopback(backlog, &port): a
               listening socket on 127.0.0.1 (rank 0's store, made before
               the fork); tcp_connect(port) to 127.0.0.1; send_all;
               send_for (a flood's send, bounded by a now_ms() deadline);
               recv_n and wait_close, bounded by a now_ms() deadline
               (R_FULL, R_EOF, R_TIMEOUT); listening_ports(pid, ...): the
               TCP ports a process listens on (from /proc).  On Windows
               free_port(AF_INET), and tcp_connect, send_all, send_for,
               recv_n and wait_close where tests/compat/windows/sys/socket.h came
               first (the rest: compat/windows/testutil_sockets.h), a port outside the ephemeral
               range (a rank binds it later)
   Ending      process_ended(pid, ms): waits until a process has ended
               (/proc on Linux; its handle on Windows, where pids are
               Windows ids)
   Processes   fork_ranks(n, pid, port, lfd, fn, arg): child r runs
               exit(fn(r, port, lfd, arg)), the parent closes lfd (Windows:
               the program started again, its ranks starting fn together);
               start_ranks: the same on a new listen_loopback socket;
               reap_poll / reap_all: reap with a now_ns() deadline, killing
               what outlives it (reaped[r]: 1 ended, 2 killed); kill_self():
               raise(SIGKILL) (Windows: its threads parked and its sockets
               shut down first, for Wine, which may keep a dead process's
               sockets open); end_self(code): _exit(code), on Windows the
               same way
   Spawn       spawn_job(n, fn, arg, cfg): dist_spawn, for a test that
               calls it once a case; on Windows each case in a process of
               its own (see there); spawn_job_error(): the last failed
               one's message; first_process(): 0 in a process that runs
               main again (Windows); first_value(name, v): the first
               process's v there; run_in_process(fn), Windows only:
               fn() in a process of its own, as a case
   Jobs        run_pool(&pool): cases run as jobs side by side, in order,
               up to maxjobs at once and one heavy one at a time, a name
               filter, start / poll / finish callbacks on slot numbers
               (Windows: a job's ranks make the first process's starts
               again, in its order, handed down)
   Config      tcp_config(&cfg, url, cap, port, n, rank, timeout_ms, lfd):
               cfg for tcp://127.0.0.1:PORT, run id "test-PPID-PORT"
               (the ranks of one parent on one port are one launch); with lfd >= 0 rank 0 hosts the
               store on it (store_listen_fd = lfd + 1), the others close it
               (where dist.h came first); rpc_worker_init(rank, n, port,
               lfd, threads, name, timeout_ms): an RPC worker joins that way
               (where dist_rpc.h came first)
   CUDA        cuda_have_device(): a usable device, asked in a child
               (Windows: in this process; where dist_cuda.h's
               implementation came first)
   Handshake   read_refusal(fd, deadline, reason, cap): the store's answer
               to a bad hello (where dist.h's implementation came first)
   Log line    shm_log_fn, a dist logger that keeps dist_init's "shared
               memory with N rank(s)" line; shm_log_take() copies it out
               (shm_log_fn only where dist.h came first)
   Sanitizer   UNDER_TSAN is defined (to 1) under ThreadSanitizer;
               TSAN_NO_EXIT_SLEEP(); at file scope: no 1 s sleep in exit() */
#ifndef DIST_TESTUTIL_H
#define DIST_TESTUTIL_H

#ifndef _WIN32
#  include <arpa/inet.h>
#  include <fcntl.h>
#  include <netinet/in.h>
#  include <poll.h>
#  include <sys/socket.h>
#  include <sys/wait.h>
#else
/* Windows (mingw-w64, under Wine here): pthreads, clock_gettime and
   nanosleep from winpthreads; mmap of a shared table from
   tests/compat/windows; no fork, so the helpers for forked ranks are left
   out, and spawn_job runs dist_spawn's cases (see "cases in processes of
   their own").  The tests that build there say so: // WINDOWS: yes. */
#  include <io.h>
#  include <fcntl.h>
#  include <sys/mman.h>
#  include <psapi.h>
#  include <tlhelp32.h>
#  define unsetenv(name) testutil_unsetenv(name)
#  define setenv(name, value, overwrite) testutil_setenv(name, value, overwrite)
#  define getppid() ((int)testutil_root(NULL))      /* one run id for a test's processes */
#  include <sys/wait.h>
/* A process that runs main again to reach its call (a case's process,
   TESTUTIL_CASE, or a forked rank's, TESTUTIL_FORK) is silent until it
   gets there (testutil_replay_end). */
static int g_case_out = -1, g_case_err = -1;
__attribute__((constructor)) static void testutil_replay_start(void) {
    const char *c = getenv("TESTUTIL_CASE"), *f = getenv("TESTUTIL_FORK");
    int nul;
    if ((!c || !*c) && (!f || !*f)) return;
    if ((nul = _open("NUL", _O_WRONLY)) < 0) return;
    g_case_out = _dup(1);
    g_case_err = _dup(2);
    _dup2(nul, 1);
    _dup2(nul, 2);
    _close(nul);
}
static __inline __attribute__((unused)) void testutil_replay_end(void) {
    fflush(NULL);
    if (g_case_out >= 0) { _dup2(g_case_out, 1); _dup2(g_case_err, 2); }
}
static __inline __attribute__((unused)) int testutil_unsetenv(const char *name) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s=", name);
    return _putenv(buf);
}
static __inline __attribute__((unused)) int testutil_setenv(const char *name, const char *value, int overwrite) {
    char buf[1024];
    if (!overwrite && getenv(name)) return 0;
    if (snprintf(buf, sizeof buf, "%s=%s", name, value) >= (int)sizeof buf) { errno = EINVAL; return -1; }
    return _putenv(buf);
}
#endif
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Room for a copy of an error message (the library's own are shorter), and
   the usual min/max: the tests linked with the library see only its public
   declarations (tests/impl_dist.c). */
#define TEST_ERRLEN 512
#define TEST_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TEST_MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- time --------------------------------------------------------------- */

static inline __attribute__((unused)) long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline __attribute__((unused)) int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline __attribute__((unused)) double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds since t0, a now_ns() value. */
static inline __attribute__((unused)) double secs_since(int64_t t0) { return (double)(now_ns() - t0) / 1e9; }

static inline __attribute__((unused)) void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { }
}

static inline __attribute__((unused)) void sleep_us(long us) {
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { }
}

/* Waits until *flag (an int other processes or threads set, read
   atomically) is at least value, polling every millisecond for up to ms;
   0 once it is, -1 when the time ran out. */
static inline __attribute__((unused)) int await_flag(int *flag, int value, int ms) {
    int64_t t0 = now_ns();
    while (__atomic_load_n(flag, __ATOMIC_SEQ_CST) < value) {
        if (secs_since(t0) * 1000 > ms) return -1;
        sleep_ms(1);
    }
    return 0;
}

/* Sets *flag (an int other processes or threads read) to 1, atomically. */
static inline __attribute__((unused)) void set_flag(int *flag) { __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST); }

/* Waits until the flag of every rank r in mask (bit r) is set: the int at
   `first` (rank 0's) and every `stride` bytes after it (one a rank, in an
   array of records shared with other processes), polling every
   millisecond for up to ms in all; 0 once they are, -1 when the time ran
   out. */
static inline __attribute__((unused)) int await_flags(const int *first, size_t stride, unsigned mask, int ms) {
    int64_t t0 = now_ns();
    for (int r = 0; r < 32; r++) {
        if (!(mask >> r & 1)) continue;
        while (!__atomic_load_n((const int *)((const char *)first + (size_t)r * stride), __ATOMIC_SEQ_CST)) {
            if (secs_since(t0) * 1000 > ms) return -1;
            sleep_ms(1);
        }
    }
    return 0;
}

/* rank_alarm(secs): alarm(secs), a watchdog that ends this process (a
   rank) once secs have passed (0: none; a call replaces the last).
   Windows has no alarm(): a thread (started at the first call) ends the
   process with exit code 142 (128 + SIGALRM), after a line on stderr. */
#ifndef _WIN32
static inline __attribute__((unused)) void rank_alarm(unsigned secs) { alarm(secs); }
#else
static int64_t g_alarm_at __attribute__((unused));     /* now_ns() deadline; 0: none */
static inline __attribute__((unused)) void *testutil_alarm_main(void *arg) {
    (void)arg;
    for (;;) {
        int64_t at = __atomic_load_n(&g_alarm_at, __ATOMIC_SEQ_CST);
        if (at && now_ns() >= at) {
            fprintf(stderr, "rank_alarm: the alarm went off (it hung)\n");
            fflush(NULL);
            _exit(142);
        }
        sleep_ms(50);
    }
    return NULL;
}
static inline __attribute__((unused)) void rank_alarm(unsigned secs) {
    static int started;
    pthread_t th;
    __atomic_store_n(&g_alarm_at, secs ? now_ns() + (int64_t)secs * 1000000000 : 0, __ATOMIC_SEQ_CST);
    if (!started && secs && pthread_create(&th, NULL, testutil_alarm_main, NULL) == 0) {
        pthread_detach(th);
        started = 1;
    }
}
#endif

/* process_ended(pid, ms): waits (bounded) until process pid has really
   ended (on Linux a zombie, or reaped: its threads are gone, its sockets
   closed): 0, or -1 when ms ran out.  On Windows pid is a Windows process
   id (getpid() there), which /proc does not know (a Linux process of the
   same number may run for ever): the process's handle is waited on. */
#ifndef _WIN32
static inline __attribute__((unused)) int process_ended(int pid, int ms) {
    int64_t t0 = now_ns();
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    for (;;) {
        FILE *f = fopen(path, "r");
        size_t len;
        const char *p;
        if (!f) return 0;                                   /* reaped */
        len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        if ((p = strrchr(buf, ')')) != NULL && (p[1] == ' ') && (p[2] == 'Z' || p[2] == 'X')) return 0;
        if ((now_ns() - t0) / 1000000 > ms) return -1;
        sleep_us(200);
    }
}
#else
static inline __attribute__((unused)) int process_ended(int pid, int ms) {
    HANDLE h = OpenProcess(SYNCHRONIZE, FALSE, (DWORD)pid);
    DWORD r;
    if (!h) return 0;                                       /* gone */
    r = WaitForSingleObject(h, (DWORD)(ms < 0 ? 0 : ms));
    CloseHandle(h);
    return r == WAIT_OBJECT_0 ? 0 : -1;
}
#endif

/* ---- DIST_TIMEOUT_SCALE ------------------------------------------------- */

/* Multiplies the test's time limits (set from DIST_TIMEOUT_SCALE). */
static double g_scale __attribute__((unused)) = 1.0;

/* DIST_TIMEOUT_SCALE when it is a number >= 1, else 1. */
static inline __attribute__((unused)) double timeout_scale(void) {
    const char *sc = getenv("DIST_TIMEOUT_SCALE");
    return sc && atof(sc) >= 1 ? atof(sc) : 1.0;
}

/* A limit in milliseconds, scaled. */
static inline __attribute__((unused)) int scaled(int ms) { return (int)(ms * g_scale); }

/* A limit in seconds, scaled. */
static inline __attribute__((unused)) double scaled_s(double s) { return s * g_scale; }

/* The start of main(): g_scale from the environment, stdout line by line
   (so that output from forked ranks and the parent does not interleave
   or repeat). */
static inline __attribute__((unused)) void test_start(void) {
    g_scale = timeout_scale();
#ifdef _WIN32
    /* (Windows' C library buffers _IOLBF streams fully: a test that ended
       without its exit's flush, killed or crashed, showed nothing at all) */
    setvbuf(stdout, NULL, _IONBF, 0);
#else
    setvbuf(stdout, NULL, _IOLBF, 0);
#endif
}

/* ---- environment -------------------------------------------------------- */

/* unsetenv() each name of a NULL-terminated list. */
static inline __attribute__((unused)) void unset_envs(const char *const *names) {
    for (; *names; names++) unsetenv(*names);
}
#define UNSET_ENV(...) unset_envs((const char *const[]){ __VA_ARGS__, NULL })

/* What a surrounding launcher (or the developer's shell) may have set that
   must not leak into the ranks a test starts. */
#define LAUNCHER_ENV \
    "DIST_INIT_METHOD", "DIST_TIMEOUT", "DIST_DEBUG", "DIST_SECRET", "DIST_SOCKET_IFNAME", "DIST_STORE_LISTEN_FD"

/* The number in environment variable `name` when it is from lo to hi, else
   dflt. */
static inline __attribute__((unused)) int env_int(const char *name, int lo, int hi, int dflt) {
    const char *v = getenv(name);
    return v && atoi(v) >= lo && atoi(v) <= hi ? atoi(v) : dflt;
}

/* ---- parent-side reports ------------------------------------------------ */

/* Checks that failed (fail() counts them). */
static int g_failures __attribute__((unused)) = 0;

/* "ok   " and the message, a line. */
static inline __attribute__((unused)) void ok(const char *fmt, ...) {
    va_list ap;
    printf("ok   ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* "FAIL name: " and the message, a line; counted in g_failures. */
static inline __attribute__((unused)) void fail(const char *name, const char *fmt, ...) {
    va_list ap;
    printf("FAIL %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    g_failures++;
}

/* ---- cases, one after another ------------------------------------------- */

/* Cases failed; whether the current one has; its name. */
static int g_failed __attribute__((unused)) = 0, g_cur_failed __attribute__((unused)) = 0;
static const char *g_case __attribute__((unused)) = "";

/* The start of a case: its name (kept as given, not copied), nothing bad
   yet. */
static inline __attribute__((unused)) void case_begin(const char *name) {
    g_case = name;
    g_cur_failed = 0;
}

/* A problem with the current case: "FAIL case" the first time, then the
   message, indented, a line. */
static inline __attribute__((unused)) void case_bad(const char *fmt, ...) {
    va_list ap;
    if (!g_cur_failed) printf("FAIL %s\n", g_case);
    g_cur_failed = 1;
    printf("     ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* What reports a problem of a case, a line: case_bad, or a test's own
   list of them. */
typedef void (*bad_fn)(const char *fmt, ...);

/* A rank's wait status st, where it should have exited 0: bad("rank R
   died by signal N") (" (its alarm: it hung)" after SIGALRM) or "rank R
   exited with N" followed by exit_note (may be ""); nothing when it
   exited 0.  Returns 1 when it reported a problem. */
static inline __attribute__((unused)) int status_bad(bad_fn bad, int rank, int st, const char *exit_note) {
    if (WIFSIGNALED(st)) {
        bad("rank %d died by signal %d%s", rank, WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (its alarm: it hung)" : "");
        return 1;
    }
    if (WEXITSTATUS(st) != 0) {
        bad("rank %d exited with %d%s", rank, WEXITSTATUS(st), exit_note);
        return 1;
    }
    return 0;
}

/* status_bad, reported with case_bad. */
static inline __attribute__((unused)) int case_bad_status(int rank, int st, const char *exit_note) {
    return status_bad(case_bad, rank, st, exit_note);
}

/* The end of the current case: counted in g_failed if anything was bad,
   else "ok   case (secs s)" and `extra` (may be NULL). */
static inline __attribute__((unused)) void case_end(double secs, const char *extra) {
    if (g_cur_failed) g_failed++;
    else printf("ok   %s (%.2f s)%s%s\n", g_case, secs, extra && extra[0] ? "  " : "", extra ? extra : "");
}

/* ---- check tables ------------------------------------------------------- */

/* Counts a failure in *fail; the first caller (the one that sets *claimed)
   writes "rank RANK: message" into why (cap bytes).  Atomic: ranks in
   different processes share the table. */
static inline __attribute__((unused)) void check_failed_v(int *fail, int *claimed, char *why, size_t cap, int rank, const char *fmt, va_list ap) {
    __atomic_add_fetch(fail, 1, __ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(claimed, 1, __ATOMIC_SEQ_CST) == 0) {
        int n = snprintf(why, cap, "rank %d: ", rank);
        vsnprintf(why + n, cap - (size_t)n, fmt, ap);
    }
}

/* From LIST(X), a list of X(id, "text"): enum { id..., NCHECKS } and
   static const char *check_names[NCHECKS].  Use as DEFINE_CHECKS(LIST); */
#define CHECK_ID_(id, text) id,
#define CHECK_TEXT_(id, text) text,
#define DEFINE_CHECKS(LIST)                                                                 \
    enum { LIST(CHECK_ID_) NCHECKS };                                                       \
    static const char *check_names[] = { LIST(CHECK_TEXT_) }

/* Defines static void pass_(int id) and
   static void fail_(int id, int rank, const char *fmt, ...) on `table`, an
   array (expression) of structs with int pass, fail, claimed and char why[]. */
#define DEFINE_CHECK_FNS(table)                                                             \
    static void pass_(int id) { __atomic_add_fetch(&(table)[id].pass, 1, __ATOMIC_SEQ_CST); } \
    static void fail_(int id, int rank, const char *fmt, ...) {                             \
        va_list ap_;                                                                        \
        va_start(ap_, fmt);                                                                 \
        check_failed_v(&(table)[id].fail, &(table)[id].claimed, (table)[id].why, sizeof (table)[id].why, rank, fmt, ap_); \
        va_end(ap_);                                                                        \
    }

/* In a rank function with `rank` in scope: the check passes, or fails
   with the message. */
#define CHECK(id, cond, ...) do { if (cond) pass_(id); else fail_(id, rank, __VA_ARGS__); } while (0)

/* ---- rank-side failures ------------------------------------------------- */

/* Writes "line LINE: message" into buf (cap bytes), once: when claimed is
   given, only the caller that turns it from 0 to 1 writes; without it,
   only while buf is still empty.  Returns 1, a failed rank function's
   result. */
static inline __attribute__((unused)) int vfail_line(atomic_int *claimed, char *buf, size_t cap, int line, const char *fmt, va_list ap) {
    int expected = 0;
    if (claimed ? atomic_compare_exchange_strong(claimed, &expected, 1) : !buf[0]) {
        int k = snprintf(buf, cap, "line %d: ", line);
        vsnprintf(buf + k, cap - (size_t)k, fmt, ap);
    }
    return 1;
}

/* Defines static int fail_at(int rank, int line, const char *fmt, ...),
   which records the first failure of each rank; a rank outside
   0..nranks-1 counts as rank 0.  `claimed` (an atomic_int *, or NULL) and
   `buf` (a char array) are expressions in `rank`, e.g.
       DEFINE_FAIL_AT(MAXR, &sh->r[rank].claimed, sh->r[rank].fail) */
#define DEFINE_FAIL_AT(nranks, claimed, buf)                                                \
    static int fail_at(int rank, int line, const char *fmt, ...) {                          \
        va_list ap_;                                                                        \
        if (rank < 0 || rank >= (nranks)) rank = 0;                                         \
        va_start(ap_, fmt);                                                                 \
        vfail_line((claimed), (buf), sizeof (buf), line, fmt, ap_);                         \
        va_end(ap_);                                                                        \
        return 1;                                                                           \
    }

/* In a rank function (int result, `rank` in scope): record the failure and
   return 1, as `return FAIL("...", ...)`. */
#define FAIL(...) fail_at(rank, __LINE__, __VA_ARGS__)

/* A call that must succeed (communicator `w` in scope): otherwise the rank
   function fails with the call, its result's name and the error message. */
#define OK(call)                                                                          \
    do {                                                                                  \
        dist_result r_ = (call);                                                          \
        if (r_ != DIST_OK)                                                                \
            return FAIL("%s -> %s: %s", #call, dist_result_name(r_), dist_error_message(w)); \
    } while (0)

/* Writes the message into buf (cap bytes) and sets *seen, unless *seen is
   set already: of several problems, the first is kept.  Not atomic: one
   thread's (or process's) own record. */
static inline __attribute__((unused, format(printf, 4, 5))) void note_first(int *seen, char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    if (*seen) return;
    *seen = 1;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* ---- text --------------------------------------------------------------- */

/* 1 when msg contains prefix immediately followed by the number n, and no
   further digit after it: names_num(m, "rank ", 1) finds "rank 1" and
   "rank 1," but not "rank 12". */
static inline __attribute__((unused)) int names_num(const char *msg, const char *prefix, int n) {
    char pat[96];
    const char *p = msg;
    size_t l = (size_t)snprintf(pat, sizeof pat, "%s%d", prefix, n);
    while ((p = strstr(p, pat)) != NULL) {
        if (p[l] < '0' || p[l] > '9') return 1;
        p += l;
    }
    return 0;
}

/* 1 when msg names "rank r" (not a longer number). */
static inline __attribute__((unused)) int names_rank(const char *msg, int r) { return names_num(msg, "rank ", r); }

/* ---- data patterns ------------------------------------------------------ */

/* The splitmix64 finalizer: a well-mixed 64-bit hash of x. */
static inline __attribute__((unused)) uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* n bytes of a xorshift64 stream from seed s (not 0): each step's 8 bytes
   in turn, the last step's cut short.  Any length. */
static inline __attribute__((unused)) void fill_bytes(void *p, size_t n, uint64_t s) {
    uint8_t *b = (uint8_t *)p;
    for (size_t i = 0; i < n; i += 8) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        memcpy(b + i, &s, n - i < 8 ? n - i : 8);
    }
}

/* Index of the first of n bytes that differs from fill_bytes(.., s), or
   SIZE_MAX. */
static inline __attribute__((unused)) size_t check_bytes(const void *p, size_t n, uint64_t s) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i += 8) {
        size_t k = n - i < 8 ? n - i : 8;
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        if (memcmp(b + i, &s, k) != 0) {
            uint8_t wd[8];
            memcpy(wd, &s, 8);
            for (size_t j = 0; j < k; j++) if (b[i + j] != wd[j]) return i + j;
        }
    }
    return SIZE_MAX;
}

#ifndef _WIN32
/* ---- sockets ------------------------------------------------------------ */

/* A loopback port (127.0.0.1 or ::1, by family) nobody listens on right
   now: bind port 0, read it, close.  The small race with other programs
   is acceptable.  -1 when it cannot tell. */
static inline __attribute__((unused)) int free_port(int family) {
    int s = socket(family, SOCK_STREAM, 0), port = -1;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (s < 0) return -1;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    }
    if (bind(s, (struct sockaddr *)&ss, len) == 0 && getsockname(s, (struct sockaddr *)&ss, &len) == 0)
        port = family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    close(s);
    return port;
}

/* A TCP socket listening on 127.0.0.1, on a port the system picks (in
   *port), with the given backlog; inheritable (no close-on-exec), as rank
   0's store socket made before the ranks are forked.  -1 (errno set) when
   it cannot be made. */
static inline __attribute__((unused)) int listen_loopback(int backlog, int *port) {
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), e;
    if (fd < 0) return -1;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

#endif /* !_WIN32 */
/* (also on Windows where tests/compat/windows/sys/socket.h came first) */
#if !defined(_WIN32) || defined(DIST_TEST_COMPAT_SOCKET_H)
#  ifdef _WIN32
#    include <poll.h>                  /* tests/compat/windows: WSAPoll */
#  endif
/* Blocking mode on or off for a socket. */
static inline __attribute__((unused)) void sock_blocking(int fd, int on) {
#ifdef _WIN32
    u_long nb = on ? 0 : 1;
    ioctlsocket((SOCKET)fd, FIONBIO, &nb);
#else
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, on ? fl & ~O_NONBLOCK : fl | O_NONBLOCK);
#endif
}

/* A TCP connection to 127.0.0.1:port (close-on-exec, blocking), or -1
   (errno set; ETIMEDOUT after 10 s x DIST_TIMEOUT_SCALE: a listener whose
   backlog is full drops the call, and a blocking connect would retry for
   minutes). */
static inline __attribute__((unused)) int tcp_connect(int port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
    socklen_t el = sizeof err;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0) return -1;
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        struct pollfd q = { s, POLLOUT, 0 };
        long deadline = now_ms() + (long)(10000 * timeout_scale());
        int r = 0;
        if (errno != EINPROGRESS && errno != EAGAIN) { err = errno; close(s); errno = err; return -1; }
        while (now_ms() < deadline && (r = poll(&q, 1, 100)) == 0) {}
        if (r <= 0) { close(s); errno = ETIMEDOUT; return -1; }
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) { close(s); errno = err ? err : ECONNREFUSED; return -1; }
    }
    sock_blocking(s, 1);
    return s;
}

/* Sends all n bytes (no SIGPIPE, resumed after EINTR); 0, or -1. */
static inline __attribute__((unused)) int send_all(int fd, const void *b, size_t n) {
    const uint8_t *p = (const uint8_t *)b;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

/* Sends up to n bytes before the deadline (a now_ms() time), never
   blocking past it: the socket is made non-blocking and written when poll
   says it may be.  The bytes sent, or -1 when the peer closed or reset the
   connection before any was (errno set); *timed_out (may be NULL) says the
   deadline came first.  For floods, where a peer that neither reads nor
   closes must not hang the test. */
static inline __attribute__((unused)) ssize_t send_for(int fd, const void *b, size_t n, long deadline, int *timed_out) {
    const uint8_t *p = (const uint8_t *)b;
    size_t sent = 0;
    sock_blocking(fd, 0);
    if (timed_out) *timed_out = 0;
    while (sent < n) {
        struct pollfd q = { fd, POLLOUT, 0 };
        long left = deadline - now_ms();
        ssize_t k;
        if (left <= 0) { if (timed_out) *timed_out = 1; break; }
        if (poll(&q, 1, (int)(left < 100 ? left : 100)) <= 0) continue;
        k = send(fd, p + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) sent += (size_t)k;
        else if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        else return sent ? (ssize_t)sent : -1;
    }
    return (ssize_t)sent;
}

/* What recv_n and wait_close found. */
enum { R_FULL = 0, R_EOF = 1, R_TIMEOUT = 2 };

/* Reads n bytes before the deadline (a now_ms() time; poll, never
   blocking): R_FULL, R_EOF (closed or reset; *got says how much came) or
   R_TIMEOUT. */
static inline __attribute__((unused)) int recv_n(int fd, uint8_t *b, size_t n, long deadline, size_t *got) {
    *got = 0;
    while (*got < n) {
        struct pollfd p = { fd, POLLIN, 0 };
        long left = deadline - now_ms();
        ssize_t k;
        if (left <= 0) return R_TIMEOUT;
        if (poll(&p, 1, (int)left) <= 0) continue;
        k = recv(fd, b + *got, n - *got, 0);
        if (k > 0) *got += (size_t)k;
        else if (k == 0 || (errno != EINTR && errno != EAGAIN)) return R_EOF;
    }
    return R_FULL;
}

/* Waits for the peer to close (EOF or reset) before the deadline (a
   now_ms() time), discarding what comes: R_EOF or R_TIMEOUT; *extra counts
   the bytes that came first. */
static inline __attribute__((unused)) int wait_close(int fd, long deadline, size_t *extra) {
    uint8_t b[4096];
    *extra = 0;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        long left = deadline - now_ms();
        ssize_t k;
        if (left <= 0) return R_TIMEOUT;
        if (poll(&p, 1, (int)left) <= 0) continue;
        k = recv(fd, b, sizeof b, 0);
        if (k > 0) *extra += (size_t)k;
        else if (k == 0 || (errno != EINTR && errno != EAGAIN)) return R_EOF;
    }
}

#endif
#if !defined(_WIN32)
/* The TCP ports (IPv4 and IPv6) process `pid` listens on, from /proc: how
   many, up to max, into ports; -1 when /proc cannot tell. */
static inline __attribute__((unused)) int listening_ports(pid_t pid, int *ports, int max) {
    unsigned long inodes[256];
    int ni = 0, np = 0;
    char path[64], line[512], link[128];
    DIR *dir;
    struct dirent *e;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    if (!(dir = opendir(path))) return -1;
    while ((e = readdir(dir)) != NULL && ni < 256) {
        char fp[400];
        ssize_t n;
        unsigned long ino;
        snprintf(fp, sizeof fp, "%s/%s", path, e->d_name);
        if ((n = readlink(fp, link, sizeof link - 1)) <= 0) continue;
        link[n] = 0;
        if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[ni++] = ino;
    }
    closedir(dir);
    for (int v6 = 0; v6 < 2; v6++) {
        FILE *f;
        snprintf(path, sizeof path, "/proc/%d/net/tcp%s", (int)pid, v6 ? "6" : "");
        if (!(f = fopen(path, "r"))) continue;
        while (fgets(line, sizeof line, f)) {
            unsigned port, st;
            unsigned long ino;
            if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &port, &st, &ino) != 3) continue;
            if (st != 0x0A) continue;   /* LISTEN */
            for (int i = 0; i < ni; i++)
                if (inodes[i] == ino && np < max) ports[np++] = (int)port;
        }
        fclose(f);
    }
    return np;
}

#endif /* !_WIN32: sockets */

/* ---- child processes ---------------------------------------------------- */

/* What a forked rank runs: its exit status. */
typedef int (*rank_entry_fn)(int rank, int port, int lfd, void *arg);

#ifndef _WIN32
/* Forks n ranks (stdout and stderr flushed first): child r runs
   exit(fn(r, port, lfd, arg)); then the parent closes lfd (the
   listen_loopback socket of the job, or -1 for none).  pid[r] < 0 where
   fork failed (errno of the last failure kept).  Returns how many forks
   failed. */
static inline __attribute__((unused)) int fork_ranks(int n, pid_t *pid, int port, int lfd, rank_entry_fn fn, void *arg) {
    int failed = 0, e = 0;
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        if (pid[r] == 0) exit(fn(r, port, lfd, arg));
        if (pid[r] < 0) { failed++; e = errno; }
    }
    if (lfd >= 0) close(lfd);
    if (failed) errno = e;
    return failed;
}

/* A job's ranks on a fresh listen_loopback socket (the given backlog):
   fork_ranks(n, pid, port, lfd, fn, arg), then, for reap_poll,
   reaped[r] = 0, or 1 with st[r] = -1 where fork failed.  0, or -1 (errno
   set, nothing forked) when the socket cannot be made. */
static inline __attribute__((unused)) int start_ranks(int n, pid_t *pid, int *st, int *reaped, int backlog, rank_entry_fn fn, void *arg) {
    int port = 0, lfd = listen_loopback(backlog, &port);
    if (lfd < 0) return -1;
    fork_ranks(n, pid, port, lfd, fn, arg);
    for (int r = 0; r < n; r++) {
        reaped[r] = pid[r] < 0;
        if (pid[r] < 0) st[r] = -1;
    }
    return 0;
}
#else
/* Windows has no fork: rank r is this program started again with
   TESTUTIL_FORK="k r port parent" (k: this call's number in the process
   `parent`), whose main runs again silently (testutil_replay_start) up to
   its k-th fork_ranks, where it runs exit(fn(r, port, -1, arg)): no socket
   is handed down (lfd is not used; rank 0 binds the port, tcp_config with
   lfd -1).  In such a rank, the calls before its own start nothing: their
   "ranks" have ended with 0 (pid TESTUTIL_REPLAYED_PID, which waitpid does
   not know: reap_poll takes it as exited 0).  What main does before a call
   therefore runs again in each of its ranks.  The ranks of a call start
   fn together, as forks would: each waits there (up to 60 s) until every
   other one has come that far too (a count in "Local\disttest.PARENT.forkK"),
   so that a rank whose process was slow to start (Wine, a busy machine:
   seconds at times) does not count against the others' time limits. */
#define TESTUTIL_REPLAYED_PID 0x7ffffff0
static inline __attribute__((unused)) volatile LONG *testutil_fork_count(unsigned long parent, int k, int create) {
    char name[64];
    HANDLE h;
    snprintf(name, sizeof name, "Local\\disttest.%lu.fork%d", parent, k);
    h = create ? CreateFileMappingA(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE, 0, sizeof(LONG), name)
               : OpenFileMappingA(FILE_MAP_ALL_ACCESS, FALSE, name);
    /* (the handle stays open: the count outlives this call) */
    return h ? (volatile LONG *)MapViewOfFile(h, FILE_MAP_ALL_ACCESS, 0, 0, sizeof(LONG)) : NULL;
}
static inline __attribute__((unused)) int fork_ranks(int n, pid_t *pid, int port, int lfd, rank_entry_fn fn, void *arg) {
    static int calls;
    const char *v = getenv("TESTUTIL_FORK");
    int k = ++calls, kk, r, p, failed = 0;
    unsigned long parent = 0;
    volatile LONG *count;
    (void)lfd;
    if (v && *v && sscanf(v, "%d %d %d %lu", &kk, &r, &p, &parent) == 4) {
        if (k < kk) { for (int i = 0; i < n; i++) pid[i] = TESTUTIL_REPLAYED_PID; return 0; }
        if (k == kk) {
            testutil_unsetenv("TESTUTIL_FORK");
            if ((count = testutil_fork_count(parent, k, 0)) != NULL) {
                int64_t t0 = now_ns();
                InterlockedIncrement(count);
                while (*count < n && now_ns() - t0 < (int64_t)60 * 1000000000) sleep_ms(1);
            }
            testutil_replay_end();
            fflush(NULL);
            exit(fn(r, p, -1, arg));
        }
    }
    fflush(NULL);
    count = testutil_fork_count(GetCurrentProcessId(), k, 1);
    for (int i = 0; i < n; i++) {
        char env[96];
        snprintf(env, sizeof env, "TESTUTIL_FORK=%d %d %d %lu", k, i, port, (unsigned long)GetCurrentProcessId());
        if ((pid[i] = testutil_start_self(env)) < 0) {
            failed++;
            if (count) InterlockedIncrement(count);      /* (the others do not wait for it) */
        }
    }
    return failed;
}

/* start_ranks on Windows: the port is free_port's, for rank 0 to bind. */
static inline __attribute__((unused)) int free_port(int family);
static inline __attribute__((unused)) int start_ranks(int n, pid_t *pid, int *st, int *reaped, int backlog, rank_entry_fn fn, void *arg) {
    int port = free_port(AF_INET);
    (void)backlog;
    if (port <= 0) return -1;
    fork_ranks(n, pid, port, -1, fn, arg);
    for (int r = 0; r < n; r++) {
        reaped[r] = pid[r] < 0;
        if (pid[r] < 0) st[r] = -1;
    }
    return 0;
}
#endif

/* One look at the n processes in pid[], without waiting: one that has
   ended gets its wait status in st[r] (-1: waitpid failed) and
   reaped[r] = 1; one with reaped[r] already set is passed over (set it
   where fork failed).  Once now_ns() is past deadline, what still runs is
   killed (SIGKILL, then SIGCONT for a stopped one), reaped and marked
   reaped[r] = 2.  Returns how many still run. */
static inline __attribute__((unused)) int reap_poll(int n, const pid_t *pid, int *st, int *reaped, int64_t deadline) {
    int left = 0;
    for (int r = 0; r < n; r++) {
        if (reaped[r]) continue;
#ifdef _WIN32
        if (pid[r] == TESTUTIL_REPLAYED_PID) { reaped[r] = 1; st[r] = 0; continue; }
#endif
        pid_t got = waitpid(pid[r], &st[r], WNOHANG);
        if (got == pid[r]) reaped[r] = 1;
        else if (got < 0 && errno != EINTR) { reaped[r] = 1; st[r] = -1; }
        else left++;
    }
    if (left && now_ns() > deadline) {
        for (int r = 0; r < n; r++) if (!reaped[r]) { kill(pid[r], SIGKILL); kill(pid[r], SIGCONT); }
        for (int r = 0; r < n; r++)
            if (!reaped[r]) { while (waitpid(pid[r], &st[r], 0) < 0 && errno == EINTR) { } reaped[r] = 2; }
        left = 0;
    }
    return left;
}

/* reap_poll every 5 ms until every process has ended or been killed at
   the deadline. */
static inline __attribute__((unused)) void reap_all(int n, const pid_t *pid, int *st, int *reaped, int64_t deadline) {
    while (reap_poll(n, pid, st, reaped, deadline)) sleep_ms(5);
}

/* A job of n forked workers (start_ranks, backlog 16), reaped within
   reap_s seconds, judged through case_bad: a fork that failed, a worker
   still running at the deadline (killed), one that did not exit 0
   (case_bad_status), except worker `victim` (-1: none), which the case
   kills itself: it must have died of SIGKILL, and only once *killed (read
   after the reaping) says the case did it.  The words "worker" and "rank"
   are the tests' own: this one says "worker".  0, or -1 when no listening
   socket could be made (reported). */
static inline __attribute__((unused)) int run_workers(int n, rank_entry_fn fn, void *arg, double reap_s, int victim, const volatile int *killed) {
    pid_t pid[64];
    int st[64], reaped[64];
    if (n > 64 || start_ranks(n, pid, st, reaped, 16, fn, arg) != 0) {
        case_bad("listening socket: %s", n > 64 ? "more than 64 workers" : strerror(errno));
        return -1;
    }
    for (int r = 0; r < n; r++)
        if (pid[r] < 0) case_bad("worker %d: fork failed: %s", r, strerror(errno));
    reap_all(n, pid, st, reaped, now_ns() + (int64_t)(scaled_s(reap_s) * 1e9));
    for (int r = 0; r < n; r++) {
        if (pid[r] < 0) continue;
        if (reaped[r] == 2) case_bad("worker %d hung: killed", r);
        if (st[r] == -1) case_bad("waitpid for worker %d failed", r);
        else if (r == victim && !(WIFSIGNALED(st[r]) && WTERMSIG(st[r]) == SIGKILL && killed && *killed))
            case_bad("worker %d was to be killed (SIGKILL) by the case, but %s %d", r, WIFSIGNALED(st[r]) ? "died by signal" : "exited with",
                     WIFSIGNALED(st[r]) ? WTERMSIG(st[r]) : WEXITSTATUS(st[r]));
        else if (r != victim && WIFSIGNALED(st[r]))
            case_bad("worker %d died by signal %d%s", r, WTERMSIG(st[r]), WTERMSIG(st[r]) == SIGALRM ? " (its alarm: it hung)" : "");
        else if (r != victim && WEXITSTATUS(st[r]) != 0)
            case_bad("worker %d exited with %d", r, WEXITSTATUS(st[r]));
    }
    return 0;
}

/* ---- jobs side by side -------------------------------------------------- */

/* Cases 0..ncases-1 run as jobs in slots 0..maxjobs-1, started in order;
   a heavy case waits while another heavy one runs (the lighter ones after
   it go first).  The callbacks take the case's index i or the slot. */
typedef struct job_pool {
    int ncases, maxjobs;
    int tick_ms;                                 /* the pause between polls */
    const char *filter;                          /* only the cases whose name contains it (NULL: all) */
    void (*name)(int i, char *out, size_t cap);  /* case i's name (for the filter) */
    int (*heavy)(int i);                         /* case i has large buffers */
    int (*start)(int slot, int i);               /* starts case i in the slot: 0, or -1 to give up */
    int (*poll)(int slot);                       /* 1 once the slot's job has ended */
    void (*finish)(int slot);                    /* judges it; the slot is free after */
} job_pool;

/* Whether the pool runs case i (its filter). */
static inline __attribute__((unused)) int pool_wanted(const job_pool *p, int i) {
    char name[200];
    if (!p->filter) return 1;
    p->name(i, name, sizeof name);
    return strstr(name, p->filter) != NULL;
}

#ifdef _WIN32
/* Windows: a rank of a pool's job is this program started again
   (fork_ranks), whose main must reach the same start in the same order of
   starts (and of the mmap and fork_ranks calls they make); but the order
   of a pool depends on timing (which job ended first).  So the first
   process hands the order down: before each start it appends "case.slot,"
   to TESTUTIL_POOL<n> (n: this process's n-th run_pool), which the
   processes it starts then inherit; in a process that runs main again,
   run_pool makes those starts, in that order, and nothing else (no poll,
   no finish: the rank's own start does not return).  1 when it did that
   (*res: 0, or -1 when a start failed), 0 in the first process (or where
   nothing was handed down). */
static inline __attribute__((unused)) int first_process(void);
static inline __attribute__((unused)) int testutil_pool_replay(const job_pool *p, int call, int *res) {
    char var[40];
    const char *v;
    snprintf(var, sizeof var, "TESTUTIL_POOL%d", call);
    *res = 0;
    if (first_process() || !(v = getenv(var)) || !*v) return 0;
    for (;;) {
        int i, slot, used = 0;
        if (sscanf(v, "%d.%d,%n", &i, &slot, &used) != 2 || used == 0) break;
        v += used;
        if (i < 0 || i >= p->ncases || slot < 0 || slot >= p->maxjobs) break;
        if (p->start(slot, i) != 0) { *res = -1; break; }
    }
    return 1;
}
/* The first process: case i starts in the slot (appended to the order
   handed down). */
static inline __attribute__((unused)) void testutil_pool_note(int call, int i, int slot) {
    static char *order;
    static size_t len, cap;
    static int of_call;
    char item[32];
    int n = snprintf(item, sizeof item, "%d.%d,", i, slot);
    if (!first_process()) return;
    if (of_call != call) { of_call = call; len = 0; free(order); order = NULL; }
    if (len == 0) {
        char *o;
        cap = 256;
        if (!(o = (char *)malloc(cap))) return;
        order = o;
        len = (size_t)snprintf(order, cap, "TESTUTIL_POOL%d=", call);
    }
    if (len + (size_t)n + 1 > cap) {
        char *o = (char *)realloc(order, cap * 2 + (size_t)n);
        if (!o) return;
        order = o;
        cap = cap * 2 + (size_t)n;
    }
    memcpy(order + len, item, (size_t)n + 1);
    len += (size_t)n;
    _putenv(order);           /* (msvcrt copies it) */
}
#endif

/* Runs every wanted case of the pool: 0, or -1 when a start failed (or
   memory ran out). */
static inline __attribute__((unused)) int run_pool(const job_pool *p) {
    unsigned char *started;
    int *slot_case;
    int next = 0, running = 0, res = 0;
#ifdef _WIN32
    static int calls;
    int call = ++calls;
    if (testutil_pool_replay(p, call, &res)) return res;
#endif
    started = (unsigned char *)calloc((size_t)p->ncases + 1, 1);
    slot_case = (int *)malloc((size_t)p->maxjobs * sizeof *slot_case);
    if (!started || !slot_case) { free(started); free(slot_case); return -1; }
    for (int s = 0; s < p->maxjobs; s++) slot_case[s] = -1;
    while (next < p->ncases && !pool_wanted(p, next)) next++;
    for (;;) {
        while (running < p->maxjobs) {
            int heavy_running = 0, pick = -1, slot = 0;
            for (int s = 0; s < p->maxjobs; s++) if (slot_case[s] >= 0 && p->heavy(slot_case[s])) heavy_running = 1;
            for (int i = next; i < p->ncases && pick < 0; i++)
                if (!started[i] && pool_wanted(p, i) && !(p->heavy(i) && heavy_running)) pick = i;
            if (pick < 0) break;
            while (slot_case[slot] >= 0) slot++;
#ifdef _WIN32
            testutil_pool_note(call, pick, slot);
#endif
            if (p->start(slot, pick) != 0) { res = -1; goto out; }
            slot_case[slot] = pick;
            started[pick] = 1;
            running++;
            while (next < p->ncases && (started[next] || !pool_wanted(p, next))) next++;
        }
        if (!running && next >= p->ncases) break;
        for (int s = 0; s < p->maxjobs; s++)
            if (slot_case[s] >= 0 && p->poll(s)) { p->finish(s); slot_case[s] = -1; running--; }
        sleep_ms(p->tick_ms);
    }
out:
    free(started);
    free(slot_case);
    return res;
}


#ifdef _WIN32
/* free_port on Windows (Winsock, started here), 127.0.0.1 only: -1 for
   another family.  The port is for a rank to bind later, once its
   process has started (a fraction of a second, or more under Wine): one
   the system hands out for outgoing connections (the ephemeral ports:
   32768-60999 on Linux, under Wine; 49152-65535 on Windows) may be taken
   by one meanwhile, and the library binds exclusively.  So it is a port
   from 20000-31999 that nobody has bound (tried at random, not one of the
   last 32 given out here; the system's pick, bind port 0, where 64 tries
   found none). */
static inline __attribute__((unused)) int free_port(int family) {
    static int recent[32], nrecent;
    static unsigned seed;
    WSADATA wd;
    SOCKET s;
    struct sockaddr_in a;
    int len = sizeof a, port = -1;
    if (family != AF_INET || WSAStartup(MAKEWORD(2, 2), &wd) != 0) return -1;
    if (!seed) seed = (unsigned)GetCurrentProcessId() * 2654435761u ^ (unsigned)GetTickCount();
    for (int tries = 0; tries <= 64 && port < 0; tries++) {
        int want = 0, seen = 0;
        if (tries < 64) {
            seed = seed * 1103515245u + 12345u;
            want = 20000 + (int)((seed >> 8) % 12000);
            for (int i = 0; i < 32; i++) seen |= recent[i] == want;
            if (seen) continue;
        }
        if ((s = socket(AF_INET, SOCK_STREAM, 0)) == INVALID_SOCKET) return -1;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((u_short)want);
        len = sizeof a;
        if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0) port = ntohs(a.sin_port);
        closesocket(s);
    }
    if (port > 0) recent[nrecent++ % 32] = port;
    return port;
}
#endif

/* ---- dist.h: a job over tcp://127.0.0.1 --------------------------------- */

#ifdef DIST_H
/* Sets cfg's init_method (url, cap bytes, holds "tcp://127.0.0.1:PORT"
   and must outlive the call to dist_init), world_size, rank and
   timeout_ms, and leaves the rest as it was (clear cfg first).  lfd >= 0
   is the job's listening socket made before the fork (listen_loopback):
   rank 0 hosts the store on it (store_listen_fd = lfd + 1), every other
   rank closes it. */
static inline __attribute__((unused)) void tcp_config(dist_config *cfg, char *url, size_t cap, int port, int n, int rank, int timeout_ms,
                                                      int lfd) {
    static char run_id[48];    /* one launch: the parent's ranks on this port (a process runs one) */
    snprintf(url, cap, "tcp://127.0.0.1:%d", port);
    snprintf(run_id, sizeof run_id, "test-%d-%d", (int)getppid(), port);
    cfg->init_method = url;
    cfg->world_size = n;
    cfg->rank = rank;
    cfg->timeout_ms = timeout_ms;
    cfg->run_id = run_id;
    if (lfd >= 0) {
        cfg->store_listen_fd = rank == 0 ? lfd + 1 : 0;
        if (rank != 0) close(lfd);
    }
}

#ifdef DIST_RPC_H
/* A forked RPC worker joins over tcp_config (store timeout 10 s, scaled),
   named `name` (NULL: "w<rank>"), with `threads` handler threads and the
   agent's default timeout `timeout_ms` (0: the library's). */
static inline __attribute__((unused)) dist_result rpc_worker_init(int rank, int n, int port, int lfd, int threads, const char *name,
                                                                   int timeout_ms) {
    dist_rpc_config cfg;
    char url[64], nm[32];
    memset(&cfg, 0, sizeof cfg);
    tcp_config(&cfg.dist, url, sizeof url, port, n, rank, scaled(10000), lfd);
    snprintf(nm, sizeof nm, "w%d", rank);
    cfg.name = name ? name : nm;
    cfg.num_threads = threads;
    cfg.timeout_ms = timeout_ms;
    return dist_rpc_init(&cfg);
}
#endif

#if defined(DIST_CUDA_IMPLEMENTATION_DONE) && defined(_WIN32)
/* Whether a CUDA device can be used (nvcuda.dll, or DIST_CUDA_LIBCUDA),
   asked in this process: ranks on Windows are processes of their own,
   which load the driver afresh. */
static inline __attribute__((unused)) int cuda_have_device(void) {
    int n = 0;
    return dist_cuda__load_driver() == 1 && dist_cuda__cu.Init(0) == 0 && dist_cuda__cu.DeviceGetCount(&n) == 0 && n > 0;
}
#elif defined(DIST_CUDA_IMPLEMENTATION_DONE)
/* Whether a CUDA device can be used, asked in a child so this process (and
   the ranks it forks) load the driver afresh, each with its own
   DIST_CUDA_LIBCUDA. */
static inline __attribute__((unused)) int cuda_have_device(void) {
    int st = 0;
    pid_t p = fork();
    if (p == 0) {
        int n = 0;
        _exit(dist_cuda__load_driver() == 1 && dist_cuda__cu.Init(0) == 0 && dist_cuda__cu.DeviceGetCount(&n) == 0 && n > 0 ? 0 : 1);
    }
    return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}
#endif

#if defined(DIST_IMPLEMENTATION) && !defined(_WIN32)
/* Reads a refusal (a hello with status 1, a u32 length, the reason) before
   the deadline (a now_ms() time).  1: refused, reason in `reason`; 0:
   closed without a word; -1: no answer in time; -2: something else (what
   in `reason`). */
static inline __attribute__((unused)) int read_refusal(int fd, long deadline, char *reason, size_t cap) {
    uint8_t b[DIST__HELLO_SIZE + 4];
    dist__hello h;
    char why[200];
    size_t got = 0, len;
    int r = recv_n(fd, b, sizeof b, deadline, &got);
    reason[0] = 0;
    if (r == R_TIMEOUT) { snprintf(reason, cap, "no answer (%zu bytes) in time", got); return -1; }
    if (r == R_EOF && got == 0) return 0;
    if (r == R_EOF) { snprintf(reason, cap, "closed after %zu bytes of an answer", got); return -2; }
    if (dist__hello_decode(b, &h, why, sizeof why) != 0) { snprintf(reason, cap, "an answer that is no hello: %s", why); return -2; }
    if (h.status != 1) { snprintf(reason, cap, "a hello with status %d, not a refusal", (int)h.status); return -2; }
    len = dist__get32(b + DIST__HELLO_SIZE);
    if (len == 0 || len >= cap) { snprintf(reason, cap, "a refusal with a reason of %zu bytes", len); return -2; }
    if (recv_n(fd, (uint8_t *)reason, len, deadline, &got) != R_FULL) { snprintf(reason, cap, "a refusal cut short"); return -2; }
    reason[len] = 0;
    return 1;
}
#endif /* DIST_IMPLEMENTATION */
#endif /* DIST_H */

/* ---- cases in processes of their own -------------------------------------

   spawn_job(n, fn, arg, cfg) is dist_spawn for the tests that call it once
   a case, from a loop in main.  With fork (POSIX) it is dist_spawn.  On
   Windows a rank is the program started again, which must reach the same
   call of dist_spawn as its parent (see dist_spawn): so each case runs in
   a process of its own, this program started again with TESTUTIL_CASE=k
   (the k-th call), whose main runs up to its k-th spawn_job silently
   (earlier calls return 0 at once, output goes nowhere), then calls
   dist_spawn with the output back and exits with what it returned (-1 as
   255); its ranks do the same and become ranks there.  What main does
   before a case runs again in that case's processes: a shared table it
   clears is cleared again by each rank before dist_init, which no rank
   leaves before every rank has come to it, so before any rank writes.
   dist_error_message(NULL) in the first process does not have the case's
   message: the case process prints it ("spawn_job: ...") and hands it
   back through a mapping of its own ("Local\disttest.ROOT.msg", outside
   mmap's numbering); spawn_job_error() is it, on every system: the
   message of the last spawn_job that failed ("" when none did).  The
   case process also writes its exit code there before it ends, and the
   first process waits at most 10 s more for the end itself: under Wine an
   ending process at times hangs in ExitProcess (see end_self), and once
   that held the whole test until the runner killed it at 200 s, with the
   case done ("spawn_job: case 13: ...", DIST_ALGO=bogus in
   test_coll_errors).  Such a process is terminated and the code it wrote
   is the case's.
   run_in_process(fn) (Windows only) runs fn() in such a process, for what
   a test runs in a forked child elsewhere. */

/* first_process(): 1 in the test's first process, 0 in one that runs main
   again (a case's process or a rank, on Windows; never on POSIX, where
   ranks are forks).  For what main must do once for the whole test, not
   again in each case: clear a shared table that holds every case's
   results, say. */
#ifdef _WIN32
static inline __attribute__((unused)) int first_process(void) {
    int me;
    testutil_root(&me);
    return me;
}
#else
static inline __attribute__((unused)) int first_process(void) { return 1; }
#endif

/* first_value(name, v): v in the test's first process; in a process that
   runs main again (Windows), what the first process's call with that name
   had (handed down in the environment as TESTUTIL_V_name), for what must
   be the same in every process but is not made the same way twice (a
   free_port, say).  Call it before the case starts. */
#ifdef _WIN32
static inline __attribute__((unused)) int first_value(const char *name, int v) {
    char var[96], buf[128];
    const char *got;
    snprintf(var, sizeof var, "TESTUTIL_V_%s", name);
    if (!first_process() && (got = getenv(var)) != NULL && *got) return atoi(got);
    snprintf(buf, sizeof buf, "%s=%d", var, v);
    _putenv(buf);
    return v;
}
#else
static inline __attribute__((unused)) int first_value(const char *name, int v) { (void)name; return v; }
#endif

/* kill_self(): this process ends at once, as killed by SIGKILL
   (raise(SIGKILL)); it does not return.  end_self(code): it ends at once
   with exit code `code`, nothing flushed or destroyed (_exit; on Windows
   as kill_self does it, with that code: ExitProcess and a bare
   TerminateProcess of itself hung now and then under Wine, for 40 s and
   more, while a thread of the process waited in a socket call).
   Windows: Wine (8.0) at times leaves a socket open after its process has
   ended, when a thread of it was in a socket call then (WSAPoll, a send:
   the dead thread's request keeps the socket; seen in one such end of five
   with a plain Winsock program, and in about one of four test_kill points
   that kill mid-transfer), and the peers never see the process die.  So
   here the other threads are first stopped (SuspendThread) and sent to a
   function that parks them for good (SetThreadContext: a thread inside a
   system call finishes it first, and runs nothing of its own after);
   then every socket of the process (handles found by trying each value in
   turn, until 256 in a row are none) is shut down (SD_BOTH), which ends
   the calls they wait in; once they are parked (or after 0.5 s) the
   process ends itself with exit code 128 + SIGKILL (waitpid reads that as
   SIGKILL).  Peers see what they see of a process killed on Linux: its
   connections end without a goodbye, and nothing more comes from it.
   kill_self_after(before, arg): the same, calling before(arg) once the
   process's other threads are stopped (on Windows: its end takes a while,
   and a victim that said "dead" first took part in a shrink meanwhile);
   before must not allocate nor print (a stopped thread may hold a lock). */
#ifdef _WIN32
static volatile LONG g_testutil_parked __attribute__((unused));
static inline __attribute__((unused)) void testutil_park(void) {
    InterlockedIncrement(&g_testutil_parked);
    for (;;) Sleep(INFINITE);
}
static inline __attribute__((unused)) void end_self_after(int code, void (*before)(void *), void *arg) {
    DWORD me = GetCurrentProcessId(), self = GetCurrentThreadId();
    HANDLE th[128], snap;
    SOCKET socks[512];
    unsigned char is_moved[128] = { 0 };
    int nth = 0, moved = 0, nsock = 0, misses = 0;
    int64_t t0;
    fflush(NULL);
    if ((snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0)) != INVALID_HANDLE_VALUE) {
        THREADENTRY32 te;
        memset(&te, 0, sizeof te);
        te.dwSize = sizeof te;
        for (BOOL more = Thread32First(snap, &te); more && nth < 128; more = Thread32Next(snap, &te))
            if (te.th32OwnerProcessID == me && te.th32ThreadID != self &&
                (th[nth] = OpenThread(THREAD_SUSPEND_RESUME | THREAD_GET_CONTEXT | THREAD_SET_CONTEXT, FALSE, te.th32ThreadID)) != NULL)
                nth++;
        CloseHandle(snap);
    }
    for (int i = 0; i < nth; i++) SuspendThread(th[i]);
    /* nothing of the process runs now but this thread: what the caller
       marks here (a victim's "I am dead") is never seen while the process
       still takes part in anything */
    if (before) before(arg);
    for (int i = 0; i < nth; i++) {
        CONTEXT ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.ContextFlags = CONTEXT_CONTROL;
        if (!GetThreadContext(th[i], &ctx)) continue;
        ctx.Rsp = ((ctx.Rsp - 128) & ~(DWORD64)15) - 8;       /* (as just after a call) */
        ctx.Rip = (DWORD64)(uintptr_t)testutil_park;
        if (SetThreadContext(th[i], &ctx)) { moved++; is_moved[i] = 1; }
    }
    /* (no heap here on: a stopped thread may hold its lock) */
    for (uintptr_t h = 4; misses < 256 && h < ((uintptr_t)1 << 24); h += 4) {
        DWORD flags;
        int type, len = sizeof type;
        if (!GetHandleInformation((HANDLE)h, &flags)) { misses++; continue; }
        misses = 0;
        if (nsock < 512 && getsockopt((SOCKET)h, SOL_SOCKET, SO_TYPE, (char *)&type, &len) == 0) socks[nsock++] = (SOCKET)h;
    }
    /* (only those sent to park: one whose context could not be set stays
       stopped, or it would run on, a victim still alive, until the end) */
    for (int i = 0; i < nth; i++) if (is_moved[i]) ResumeThread(th[i]);
    for (int i = 0; i < nsock; i++) shutdown(socks[i], SD_BOTH);
    t0 = now_ns();
    /* (a thread inside a socket call when the process ends can leave that
       socket open under Wine: wait for all to be parked, up to 0.5 s on a
       loaded machine; 50 ms was not always enough in CI) */
    while (g_testutil_parked < moved && now_ns() - t0 < 500000000) Sleep(1);
    TerminateProcess(GetCurrentProcess(), (UINT)code);
    for (;;) Sleep(1000);
}
static inline __attribute__((unused)) void end_self(int code) { end_self_after(code, NULL, NULL); }
static inline __attribute__((unused)) void kill_self_after(void (*before)(void *), void *arg) { end_self_after(128 + SIGKILL, before, arg); }
#else
static inline __attribute__((unused)) void end_self(int code) {
    _exit(code);
}
static inline __attribute__((unused)) void kill_self_after(void (*before)(void *), void *arg) {
    if (before) before(arg);            /* (the signal follows within microseconds) */
    raise(SIGKILL);
    for (;;) pause();
}
#endif
static inline __attribute__((unused)) void kill_self(void) { kill_self_after(NULL, NULL); }

#ifdef DIST_H
#ifdef _WIN32
/* The case's message: 4 KiB shared by the test's processes (NULL when it
   could not be made); its last 8 bytes are not message but the case
   process's report (TESTUTIL_CASE_DONE). */
#define TESTUTIL_CASE_MSGLEN 4088
#define TESTUTIL_CASE_DONE(m) ((volatile LONG *)((m) + TESTUTIL_CASE_MSGLEN))   /* [0]: 1 once [1] is the exit code */
static inline __attribute__((unused)) char *testutil_case_msg(void) {
    static char *m;
    if (!m) {
        char name[64];
        HANDLE h;
        snprintf(name, sizeof name, "Local\\disttest.%lu.msg", testutil_root(NULL));
        h = CreateFileMappingA(INVALID_HANDLE_VALUE, NULL, PAGE_READWRITE, 0, 4096, name);   /* (or opens it) */
        if (h && !(m = (char *)MapViewOfFile(h, FILE_MAP_ALL_ACCESS, 0, 0, 4096))) CloseHandle(h);
    }
    return m;
}
static char g_case_error[4096];
static inline __attribute__((unused)) const char *spawn_job_error(void) { return g_case_error; }
/* The calls of spawn_job and run_in_process so far (numbered together);
   the one a case's process is to run (TESTUTIL_CASE; 0: this is no case's
   process). */
static int g_case_calls;
static inline __attribute__((unused)) int testutil_case_target(void) {
    const char *v = getenv("TESTUTIL_CASE");
    return v && *v ? atoi(v) : 0;
}
/* In a case's process, at its call: the output back (flushed first). */
static inline __attribute__((unused)) void testutil_case_output(void) {
    fflush(NULL);
    if (g_case_out >= 0) { _dup2(g_case_out, 1); _dup2(g_case_err, 2); }
}
/* In a case's process, its end: the code reported, then _exit. */
static inline __attribute__((unused)) void testutil_case_end(int code) {
    char *m = testutil_case_msg();
    fflush(NULL);
    if (m) { TESTUTIL_CASE_DONE(m)[1] = code; InterlockedExchange(&TESTUTIL_CASE_DONE(m)[0], 1); }
    _exit(code);
}
/* Runs call k in a process of its own (this program again); its exit
   code (255 when it could not start). */
static inline __attribute__((unused)) unsigned long testutil_case_run(int k) {
    char env[32];
    STARTUPINFOA si;
    PROCESS_INFORMATION pi;
    DWORD code = 255;
    char *cmd = _strdup(GetCommandLineA()), *m = testutil_case_msg(), started[96] = "";
    fflush(NULL);
    if (m) { m[0] = 0; TESTUTIL_CASE_DONE(m)[0] = 0; }
    snprintf(env, sizeof env, "TESTUTIL_CASE=%d", k);
    _putenv(env);
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    if (cmd && CreateProcessA(NULL, cmd, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) {
        int64_t done_at = 0;
        for (;;) {
            if (WaitForSingleObject(pi.hProcess, 100) == WAIT_OBJECT_0) { GetExitCodeProcess(pi.hProcess, &code); break; }
            if (!m || !TESTUTIL_CASE_DONE(m)[0]) continue;
            if (!done_at) done_at = now_ns();
            else if (now_ns() - done_at > 10000000000LL) {       /* (reported, but it has not ended: see above) */
                code = (DWORD)TESTUTIL_CASE_DONE(m)[1];
                TerminateProcess(pi.hProcess, code);
                WaitForSingleObject(pi.hProcess, 5000);
                break;
            }
        }
        CloseHandle(pi.hProcess);
        CloseHandle(pi.hThread);
    } else {
        snprintf(started, sizeof started, "(the case process did not start: error %lu)", (unsigned long)GetLastError());
    }
    free(cmd);
    _putenv("TESTUTIL_CASE=");
    if (code != 0 && !started[0]) snprintf(started, sizeof started, "(the case process said nothing; it exited with %lu)", (unsigned long)code);
    snprintf(g_case_error, sizeof g_case_error, "%s", code == 0 ? "" : m && m[0] ? m : started);
    return code;
}
static inline __attribute__((unused)) int spawn_job(int n, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg) {
    int k = ++g_case_calls, target = testutil_case_target();
    unsigned long code;
    if (target) {
        int rc;
        if (k < target) return 0;
        testutil_case_output();
        rc = dist_spawn(n, fn, arg, cfg);                  /* (a rank does not return) */
        if (rc != 0) {
            char *m = testutil_case_msg();
            fprintf(stderr, "spawn_job: case %d: %s\n", k, dist_error_message(NULL));
            if (m) snprintf(m, TESTUTIL_CASE_MSGLEN, "%s", dist_error_message(NULL));
        }
        testutil_case_end(rc < 0 ? 255 : rc & 0xff);
    }
    code = testutil_case_run(k);
    return code == 255 ? -1 : (int)code;
}
/* Windows only (where there is no fork to run something in a child):
   fn() in a process of its own, the k-th call run as spawn_job's cases
   are; its exit code (fn's result & 0xff, or how it ended: an exception
   code such as 0xC0000005 when it crashed; 255 when it could not
   start). */
static inline __attribute__((unused)) unsigned long run_in_process(int (*fn)(void)) {
    int k = ++g_case_calls, target = testutil_case_target();
    if (target) {
        int rc;
        if (k < target) return 0;
        testutil_case_output();
        rc = fn();
        testutil_case_end(rc & 0xff);
    }
    return testutil_case_run(k);
}
#else
static char g_case_error[TEST_ERRLEN];
static inline __attribute__((unused)) int spawn_job(int n, int (*fn)(dist_t *, void *), void *arg, const dist_config *cfg) {
    int rc = dist_spawn(n, fn, arg, cfg);
    snprintf(g_case_error, sizeof g_case_error, "%s", rc ? dist_error_message(NULL) : "");
    return rc;
}
static inline __attribute__((unused)) const char *spawn_job_error(void) { return g_case_error; }
#endif
#endif /* DIST_H */

/* ---- dist_init's "shared memory with N rank(s)" line -------------------- */

/* What this process logged of it: how many such lines, the last one's
   level, N (-1: none yet, -2: unreadable) and text. */
static pthread_mutex_t g_shm_log_lock __attribute__((unused)) = PTHREAD_MUTEX_INITIALIZER;
static int g_shm_log_lines __attribute__((unused)), g_shm_log_n __attribute__((unused)) = -1,
           g_shm_log_level __attribute__((unused));
static char g_shm_log_text[300] __attribute__((unused));

/* Copies what this process logged so far (text: cap bytes). */
static inline __attribute__((unused)) void shm_log_take(int *lines, int *n, int *level, char *text, size_t cap) {
    pthread_mutex_lock(&g_shm_log_lock);
    *lines = g_shm_log_lines;
    *n = g_shm_log_n;
    *level = g_shm_log_level;
    snprintf(text, cap, "%s", g_shm_log_text);
    pthread_mutex_unlock(&g_shm_log_lock);
}

#ifdef DIST_H
/* The logger (cfg.logger.func): notes the "shared memory with" lines and
   passes over the rest. */
static inline __attribute__((unused)) void shm_log_fn(dist_log_level level, const char *message, void *user) {
    const char *m = message, *s;
    (void)user;
    if (!strstr(message, "shared memory with")) return;
    /* "[rank N] " comes first; the line itself starts after it */
    if (m[0] == '[' && (s = strstr(m, "] ")) != NULL) m = s + 2;
    pthread_mutex_lock(&g_shm_log_lock);
    g_shm_log_lines++;
    g_shm_log_level = (int)level;
    if (strncmp(m, "shared memory with ", 19) != 0 || sscanf(m, "shared memory with %d rank(s)", &g_shm_log_n) != 1)
        g_shm_log_n = -2;
    snprintf(g_shm_log_text, sizeof g_shm_log_text, "%s", message);
    pthread_mutex_unlock(&g_shm_log_lock);
}
#endif

/* ---- memory: /proc/self --------------------------------------------------- */

#ifdef _WIN32
/* Windows: the working set ("VmRSS:") and its peak ("VmHWM:"), in KiB,
   from GetProcessMemoryInfo (kernel32's K32 entry); -1 for another key.
   The peak cannot be reset there: it is the peak since the process
   started (ranks on Windows are fresh processes). */
static inline __attribute__((unused)) long status_kb(const char *key) {
    PROCESS_MEMORY_COUNTERS pmc;
    memset(&pmc, 0, sizeof pmc);
    pmc.cb = sizeof pmc;
    if (!K32GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc)) return -1;
    if (strcmp(key, "VmRSS:") == 0) return (long)(pmc.WorkingSetSize / 1024);
    if (strcmp(key, "VmHWM:") == 0) return (long)(pmc.PeakWorkingSetSize / 1024);
    return -1;
}
static inline __attribute__((unused)) void reset_peak(void) {}
#else
/* A field of /proc/self/status in KiB ("VmRSS:", "VmHWM:"); -1 when it
   cannot be read. */
static inline __attribute__((unused)) long status_kb(const char *key) {
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0) { v = strtol(line + k, NULL, 10); break; }
    fclose(f);
    return v;
}

/* The peak RSS (VmHWM) starts again from the current one (Linux 4.0+). */
static inline __attribute__((unused)) void reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) { fputs("5", f); fclose(f); }
}
#endif

/* ---- sanitizers --------------------------------------------------------- */

#if defined(__SANITIZE_THREAD__)
#  define UNDER_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define UNDER_TSAN 1
#  endif
#endif

/* TSAN_NO_EXIT_SLEEP(); at file scope: ThreadSanitizer's exit() sleeps 1 s
   by default (atexit_sleep_ms) before the process really ends, a second
   for every forked rank; this sets it to 0.  Nothing without
   ThreadSanitizer. */
#ifdef UNDER_TSAN
#  define TSAN_NO_EXIT_SLEEP()                                                  \
    const char *__tsan_default_options(void);                                   \
    const char *__tsan_default_options(void) { return "atexit_sleep_ms=0"; }    \
    extern int tsan_no_exit_sleep_
#else
#  define TSAN_NO_EXIT_SLEEP() extern int tsan_no_exit_sleep_
#endif

#endif /* DIST_TESTUTIL_H */
