/* tests/testutil.h - the small helpers the test programs share.

   Include it after dist.h (with DIST_IMPLEMENTATION) and the system
   headers; it includes nothing of the library.  Everything here is static
   and marked unused (functions static inline), so a test that uses only
   some of it builds without unused-function warnings.

   Time        now_ms, now_ns, now_s (CLOCK_MONOTONIC), secs_since(now_ns
               start), sleep_ms, sleep_us (nanosleep, resumed after EINTR)
   Scale       g_scale = timeout_scale() (DIST_TIMEOUT_SCALE, a factor of at
               least 1 for every time limit, as in sanitizer passes);
               scaled(ms) as int, scaled_s(seconds) as double; test_start()
               reads it and makes stdout line-buffered
   Environment UNSET_ENV("A", "B", ...); LAUNCHER_ENV, the variables a
               surrounding launcher may set that must not reach the ranks
   Reports     ok(fmt, ...) prints "ok   ...", fail(name, fmt, ...) prints
               "FAIL name: ..." and counts it in g_failures
   Cases       one case after another, judged by the parent: set g_case and
               g_cur_failed = 0, then case_bad(fmt, ...) for each problem
               (the first prints "FAIL case"), case_end(secs, extra)
               prints "ok   case (secs s)" or counts it in g_failed
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
               communicator `w` in scope, returning int)
   Patterns    mix64 (the splitmix64 finalizer); fill_bytes/check_bytes, a
               xorshift64 byte stream of any length from a seed, and the
               index of the first byte that differs from it (SIZE_MAX: none)
   Sockets     free_port(AF_INET or AF_INET6): a loopback port nobody
               listens on right now
   Log line    shm_log_fn, a dist logger that keeps dist_init's "shared
               memory with N rank(s)" line; shm_log_take() copies it out
               (shm_log_fn only where dist.h came first)
   Sanitizer   UNDER_TSAN is defined (to 1) under ThreadSanitizer */
#ifndef DIST_TESTUTIL_H
#define DIST_TESTUTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    setvbuf(stdout, NULL, _IOLBF, 0);
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

/* ---- sanitizers --------------------------------------------------------- */

#if defined(__SANITIZE_THREAD__)
#  define UNDER_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define UNDER_TSAN 1
#  endif
#endif

#endif /* DIST_TESTUTIL_H */
