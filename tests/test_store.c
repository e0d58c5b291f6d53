// TIMEOUT: 120
// WINDOWS: yes
/* test_store.c - the key-value store API (dist_store_*), 4 ranks started
   with dist_spawn.  Ranks order their steps with a barrier made of
   dist_send/dist_recv (not of the store under test).  Each rank records
   the outcome of every check in a MAP_SHARED table; the parent prints one
   line per check after the job ends.  Exit 0 only if every check passed. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define NRANKS 4
#define MIB ((size_t)1 << 20)

/* ---- the shared check table ----------------------------------------------- */

#define CHECKS(X)                                                                        \
    X(C_BINARY,      "set/get binary values with zero bytes (every rank reads every rank's)") \
    X(C_EMPTY,       "set/get a 0-length value")                                        \
    X(C_OVERWRITE,   "set overwrites a value (shorter, then longer)")                   \
    X(C_MIB,         "set/get a 1 MiB value")                                           \
    X(C_64MIB,       "set/get a value of exactly 64 MiB (the documented maximum)")      \
    X(C_KEY1,        "a 1-byte key")                                                    \
    X(C_KEY1024,     "1024-byte keys (two differing only in the last byte)")            \
    X(C_KEY1025,     "a 1025-byte key is DIST_ERR_INVALID for every store call")        \
    X(C_BADKEY,      "an empty or NULL key is DIST_ERR_INVALID")                        \
    X(C_65MIB,       "a 65 MiB value is DIST_ERR_INVALID (set and compare_set)")        \
    X(C_NULLVAL,     "a NULL value with a non-zero length is DIST_ERR_INVALID")         \
    X(C_USABLE,      "the store still works after the rejected calls")                  \
    X(C_GETWAIT,     "get of a key another rank sets 200 ms later waits, then succeeds") \
    X(C_TRUNC,       "get with a too-small buffer: DIST_ERR_TRUNCATED and the full length") \
    X(C_ADD,         "add from 4 ranks concurrently (1000 adds each) -> exact total")   \
    X(C_ADDMONO,     "add returns increasing values to each rank")                      \
    X(C_ADDNEW,      "add on a missing key starts from 0; negative amounts")            \
    X(C_ADDTHREADS,  "add from 2 threads of one rank concurrently")                     \
    X(C_ADDBAD,      "add on a non-integer value fails and leaves the value")           \
    X(C_WAITMANY,    "wait on 3 keys set later by 3 different ranks")                   \
    X(C_WAITTO,      "wait with timeout_ms 300 on a key nobody sets: DIST_ERR_TIMEOUT in [0.3 s, 2 s], key named") \
    X(C_WAITTO2,     "wait timeout on {present key, missing key}: the message names the missing key") \
    X(C_AFTERTO,     "the store still works after a wait timed out")                    \
    X(C_CHECK,       "check: 0 for a missing key, 1 when all exist, 0 when one is missing; never waits") \
    X(C_CAS_CREATE,  "compare_set on a missing key with expected_len 0 creates it")     \
    X(C_CAS_SWAP,    "compare_set with the right expected value swaps")                 \
    X(C_CAS_WRONG,   "compare_set with a wrong expected value keeps the value, returns it in out") \
    X(C_CAS_EXISTS,  "compare_set with expected_len 0 on an existing key keeps the value") \
    X(C_CAS_MISSING, "compare_set on a missing key with a non-empty expected value does not create it") \
    X(C_CAS_BINARY,  "compare_set compares binary values exactly (zero bytes, length)")  \
    X(C_CAS_TRUNC,   "compare_set with a too-small out buffer: DIST_ERR_TRUNCATED and the full length") \
    X(C_ELECT,       "concurrent compare_set from 4 ranks: exactly one wins (20 rounds)") \
    X(C_DELETE,      "delete: deleted 1, then 0; check says it is gone")                \
    X(C_DEL_GETWAIT, "get after delete waits until the key is set again")               \
    X(C_DEL_WAITTO,  "wait after delete times out")                                     \
    X(C_GETTO,       "get on a missing (deleted) key: DIST_ERR_TIMEOUT after the communicator's timeout (1 s)") \
    X(C_RANKS_DONE,  "every rank ran every step")

DEFINE_CHECKS(CHECKS);

typedef struct check {
    int pass, fail, claimed;
    char why[512];
} check_t;

typedef struct shared {
    long go[4];                /* a waiting rank's "I am about to wait" time, for the setters */
    check_t checks[NCHECKS];
    int elect[20][NRANKS];     /* the winner each rank saw */
    int done[NRANKS];
} shared_t;

static shared_t *g;

/* pass_(id), fail_(id, rank, fmt, ...) and CHECK(id, cond, ...) (testutil.h) */
DEFINE_CHECK_FNS(g->checks)

#define RN(r) dist_result_name(r)

/* A barrier of point-to-point messages through rank 0.  The world's
   timeout is short here (1 s) and a step may take longer on a loaded
   machine (1000 adds under ThreadSanitizer): a receive that times out is
   posted again, up to 60 s (scaled); one that fails otherwise ends the
   rank (a barrier that let a rank through early would show as a wrong
   value in the next step). */
static void barrier_recv(dist_t *w, int from) {
    uint8_t b = 0;
    long end = now_ms() + scaled(60000);
    dist_result r;
    while ((r = dist_recv(w, &b, 1, DIST_UINT8, from, 999)) == DIST_ERR_TIMEOUT && now_ms() < end) {}
    if (r != DIST_OK) {
        printf("     [rank %d] barrier: receive from rank %d: %s: %s\n", dist_rank(w), from, RN(r), dist_error_message(w));
        fflush(stdout);
        _exit(3);
    }
}

static void barrier(dist_t *w) {
    int n = dist_world_size(w), me = dist_rank(w);
    uint8_t b = 0;
    if (me == 0) {
        for (int i = 1; i < n; i++) barrier_recv(w, i);
        for (int i = 1; i < n; i++) dist_send(w, &b, 1, DIST_UINT8, i, 999);
    } else {
        dist_send(w, &b, 1, DIST_UINT8, 0, 999);
        barrier_recv(w, 0);
    }
}

/* The waiter announces (in shared memory) that it is about to wait; the
   setter starts its delay only then, so the value cannot appear earlier
   than `delay` ms after the wait began, however the ranks are scheduled. */
static void announce(int slot) { __atomic_store_n(&g->go[slot], now_ms(), __ATOMIC_SEQ_CST); }

static void await_announce(int slot, int delay) {
    long end = now_ms() + scaled(20000);
    while (__atomic_load_n(&g->go[slot], __ATOMIC_SEQ_CST) == 0 && now_ms() < end) sleep_ms(1);
    sleep_ms(delay);
}

static void pattern(uint8_t *p, size_t n, int seed) {
    uint32_t x = 2463534242u + (uint32_t)seed * 7919u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        p[i] = (i % 3 == 0) ? 0 : (uint8_t)x;   /* every third byte is zero */
    }
}

static int get_str(dist_t *w, const char *key, char *buf, size_t cap, dist_result *res) {
    size_t len = 0;
    *res = dist_store_get(w, key, buf, cap - 1, &len);
    if (*res != DIST_OK) { buf[0] = 0; return -1; }
    buf[len] = 0;
    return (int)len;
}

/* ---- steps ----------------------------------------------------------------- */

static void step_values(dist_t *w) {
    int rank = dist_rank(w);
    char key[64];
    uint8_t mine[300], got[400], want[300];
    size_t len;
    dist_result r;

    pattern(mine, sizeof mine, rank);
    snprintf(key, sizeof key, "bin/%d", rank);
    r = dist_store_set(w, key, mine, sizeof mine);
    CHECK(C_BINARY, r == DIST_OK, "set %s: %s: %s", key, RN(r), dist_error_message(w));
    snprintf(key, sizeof key, "empty/%d", rank);
    r = dist_store_set(w, key, NULL, 0);
    CHECK(C_EMPTY, r == DIST_OK, "set %s (NULL, 0): %s: %s", key, RN(r), dist_error_message(w));
    barrier(w);
    for (int src = 0; src < NRANKS; src++) {
        pattern(want, sizeof want, src);
        snprintf(key, sizeof key, "bin/%d", src);
        memset(got, 0xee, sizeof got);
        len = 12345;
        r = dist_store_get(w, key, got, sizeof got, &len);
        CHECK(C_BINARY, r == DIST_OK && len == sizeof want && memcmp(got, want, sizeof want) == 0 && got[300] == 0xee,
              "get %s: %s, len %zu: %s", key, RN(r), len, r == DIST_OK ? "bytes differ" : dist_error_message(w));
        snprintf(key, sizeof key, "empty/%d", src);
        len = 12345;
        r = dist_store_get(w, key, got, sizeof got, &len);
        CHECK(C_EMPTY, r == DIST_OK && len == 0, "get %s: %s, len %zu", key, RN(r), len);
        len = 12345;
        r = dist_store_get(w, key, NULL, 0, &len);
        CHECK(C_EMPTY, r == DIST_OK && len == 0, "get %s into (NULL, 0): %s, len %zu", key, RN(r), len);
    }
    barrier(w);
    /* overwrite: shorter, then longer */
    if (rank == 3) {
        char buf[64];
        r = dist_store_set(w, "ow", "a long first value", 18);
        if (r == DIST_OK) r = dist_store_set(w, "ow", "xy", 2);
        CHECK(C_OVERWRITE, r == DIST_OK && get_str(w, "ow", buf, sizeof buf, &r) == 2 && strcmp(buf, "xy") == 0,
              "after a shorter overwrite: %s \"%s\"", RN(r), buf);
        r = dist_store_set(w, "ow", "a much longer third value", 25);
        CHECK(C_OVERWRITE, r == DIST_OK && get_str(w, "ow", buf, sizeof buf, &r) == 25 && strcmp(buf, "a much longer third value") == 0,
              "after a longer overwrite: %s \"%s\"", RN(r), buf);
    }
    barrier(w);
}

static void step_big(dist_t *w) {
    int rank = dist_rank(w);
    size_t len = 0;
    dist_result r;
    uint8_t *want = (uint8_t *)malloc(MIB), *got = (uint8_t *)malloc(MIB + 16);
    if (!want || !got) { fail_(C_MIB, rank, "out of memory"); free(want); free(got); return; }
    pattern(want, MIB, 77);
    if (rank == 1) {
        r = dist_store_set(w, "big", want, MIB);
        CHECK(C_MIB, r == DIST_OK, "set 1 MiB: %s: %s", RN(r), dist_error_message(w));
    }
    barrier(w);
    if (rank != 1) {
        r = dist_store_get(w, "big", got, MIB + 16, &len);
        CHECK(C_MIB, r == DIST_OK && len == MIB && memcmp(got, want, MIB) == 0, "get 1 MiB: %s, len %zu", RN(r), len);
    }
    if (rank == 3) {
        len = 0;
        r = dist_store_get(w, "big", got, MIB - 1, &len);
        CHECK(C_TRUNC, r == DIST_ERR_TRUNCATED && len == MIB, "get 1 MiB into MiB-1 bytes: %s, len %zu", RN(r), len);
        CHECK(C_TRUNC, r != DIST_ERR_TRUNCATED || strstr(dist_error_message(w), "big"),
              "the message does not name the key: \"%s\"", dist_error_message(w));
        len = 0;
        r = dist_store_get(w, "bin/0", got, 10, &len);
        CHECK(C_TRUNC, r == DIST_ERR_TRUNCATED && len == 300, "get 300 bytes into 10: %s, len %zu", RN(r), len);
        len = 0;
        r = dist_store_get(w, "bin/0", NULL, 0, &len);
        CHECK(C_TRUNC, r == DIST_ERR_TRUNCATED && len == 300, "get 300 bytes into (NULL, 0): %s, len %zu", RN(r), len);
        /* still in step afterwards */
        len = 0;
        r = dist_store_get(w, "bin/0", got, 300, &len);
        CHECK(C_TRUNC, r == DIST_OK && len == 300, "get 300 bytes into exactly 300 afterwards: %s, len %zu", RN(r), len);
    }
    free(want);
    free(got);
    barrier(w);

    /* exactly the documented maximum, 64 MiB, one writer, one reader */
    if (rank == 2 || rank == 0) {
        size_t n = (size_t)64 << 20;
        uint8_t *v = (uint8_t *)malloc(n), *o = rank == 0 ? (uint8_t *)malloc(n) : NULL;
        if (!v || (rank == 0 && !o)) fail_(C_64MIB, rank, "out of memory");
        else {
            pattern(v, n, 64);
            if (rank == 2) {
                r = dist_store_set(w, "max", v, n);
                CHECK(C_64MIB, r == DIST_OK, "set 64 MiB: %s: %s", RN(r), dist_error_message(w));
            }
        }
        barrier(w);
        if (rank == 0 && v && o) {
            len = 0;
            r = dist_store_get(w, "max", o, n, &len);
            CHECK(C_64MIB, r == DIST_OK && len == n && memcmp(o, v, n) == 0, "get 64 MiB: %s, len %zu: %s", RN(r), len,
                  r == DIST_OK ? "bytes differ" : dist_error_message(w));
            r = dist_store_delete(w, "max", NULL);
            CHECK(C_64MIB, r == DIST_OK, "delete: %s", RN(r));
        }
        free(v);
        free(o);
    } else {
        barrier(w);
    }
    barrier(w);
}

static void step_keys(dist_t *w) {
    int rank = dist_rank(w);
    char *k1024a = (char *)malloc(1025), *k1024b = (char *)malloc(1025), *k1025 = (char *)malloc(1026);
    char buf[64];
    size_t len;
    dist_result r;
    memset(k1024a, 'k', 1024); k1024a[1024] = 0;
    memcpy(k1024b, k1024a, 1025); k1024b[1023] = 'K';
    memset(k1025, 'k', 1025); k1025[1025] = 0;
    if (rank == 2) {
        r = dist_store_set(w, "q", "one-byte key", 12);
        CHECK(C_KEY1, r == DIST_OK, "set \"q\": %s", RN(r));
        r = dist_store_set(w, k1024a, "A", 1);
        CHECK(C_KEY1024, r == DIST_OK, "set 1024-byte key: %s: %s", RN(r), dist_error_message(w));
        r = dist_store_set(w, k1024b, "B", 1);
        CHECK(C_KEY1024, r == DIST_OK, "set the other 1024-byte key: %s", RN(r));
    }
    barrier(w);
    if (rank == 0) {
        const char *keys[2];
        int exists = -1, del = -1;
        int64_t v = 0;
        CHECK(C_KEY1, get_str(w, "q", buf, sizeof buf, &r) == 12 && strcmp(buf, "one-byte key") == 0, "get \"q\": %s \"%s\"", RN(r), buf);
        CHECK(C_KEY1024, get_str(w, k1024a, buf, sizeof buf, &r) == 1 && buf[0] == 'A', "get 1024-byte key: %s \"%s\"", RN(r), buf);
        CHECK(C_KEY1024, get_str(w, k1024b, buf, sizeof buf, &r) == 1 && buf[0] == 'B', "get the other: %s \"%s\"", RN(r), buf);

        r = dist_store_set(w, k1025, "x", 1);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "set: %s", RN(r));
        CHECK(C_KEY1025, r != DIST_ERR_INVALID || strstr(dist_error_message(w), "1024"), "set's message: \"%s\"", dist_error_message(w));
        r = dist_store_get(w, k1025, buf, sizeof buf, &len);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "get: %s", RN(r));
        r = dist_store_add(w, k1025, 1, &v);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "add: %s", RN(r));
        keys[0] = "q"; keys[1] = k1025;
        r = dist_store_wait(w, keys, 2, 300);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "wait: %s", RN(r));
        r = dist_store_check(w, keys, 2, &exists);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "check: %s", RN(r));
        r = dist_store_compare_set(w, k1025, NULL, 0, "x", 1, buf, sizeof buf, &len);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "compare_set: %s", RN(r));
        r = dist_store_delete(w, k1025, &del);
        CHECK(C_KEY1025, r == DIST_ERR_INVALID, "delete: %s", RN(r));

        r = dist_store_set(w, "", "x", 1);
        CHECK(C_BADKEY, r == DIST_ERR_INVALID, "set with \"\": %s", RN(r));
        r = dist_store_set(w, NULL, "x", 1);
        CHECK(C_BADKEY, r == DIST_ERR_INVALID, "set with NULL: %s", RN(r));
        r = dist_store_get(w, NULL, buf, sizeof buf, &len);
        CHECK(C_BADKEY, r == DIST_ERR_INVALID, "get with NULL: %s", RN(r));
        keys[0] = ""; 
        r = dist_store_check(w, keys, 1, &exists);
        CHECK(C_BADKEY, r == DIST_ERR_INVALID, "check with \"\": %s", RN(r));
        r = dist_store_wait(w, keys, 0, 300);
        CHECK(C_BADKEY, r == DIST_ERR_INVALID, "wait on 0 keys: %s", RN(r));

        {
            size_t n = (size_t)65 << 20;
            uint8_t *big = (uint8_t *)calloc(1, n);
            if (!big) fail_(C_65MIB, rank, "out of memory");
            else {
                r = dist_store_set(w, "too-big", big, n);
                CHECK(C_65MIB, r == DIST_ERR_INVALID, "set 65 MiB: %s", RN(r));
                r = dist_store_set(w, "too-big", big, ((size_t)64 << 20) + 1);
                CHECK(C_65MIB, r == DIST_ERR_INVALID, "set 64 MiB + 1: %s", RN(r));
                r = dist_store_compare_set(w, "too-big", NULL, 0, big, n, buf, sizeof buf, &len);
                CHECK(C_65MIB, r == DIST_ERR_INVALID, "compare_set desired 65 MiB: %s", RN(r));
                free(big);
            }
        }
        r = dist_store_set(w, "nullval", NULL, 5);
        CHECK(C_NULLVAL, r == DIST_ERR_INVALID, "set (NULL, 5): %s", RN(r));
        /* none of the above may have reached the store */
        keys[0] = "too-big";
        r = dist_store_check(w, keys, 1, &exists);
        CHECK(C_USABLE, r == DIST_OK && exists == 0, "check too-big: %s exists %d", RN(r), exists);
        keys[0] = "nullval";
        r = dist_store_check(w, keys, 1, &exists);
        CHECK(C_USABLE, r == DIST_OK && exists == 0, "check nullval: %s exists %d", RN(r), exists);
        r = dist_store_set(w, "after-invalid", "fine", 4);
        CHECK(C_USABLE, r == DIST_OK && get_str(w, "after-invalid", buf, sizeof buf, &r) == 4 && strcmp(buf, "fine") == 0,
              "set/get afterwards: %s", RN(r));
    }
    free(k1024a); free(k1024b); free(k1025);
    barrier(w);
}

static void step_getwait(dist_t *w) {
    int rank = dist_rank(w);
    char buf[64];
    dist_result r;
    barrier(w);
    if (rank == 0) {
        long t0 = now_ms(), dt;
        int n;
        announce(0);
        n = get_str(w, "late", buf, sizeof buf, &r);
        dt = now_ms() - t0;
        CHECK(C_GETWAIT, n == 5 && strcmp(buf, "hello") == 0, "get: %s \"%s\"", RN(r), buf);
        CHECK(C_GETWAIT, dt >= 190, "get returned after %ld ms, before the key was set (200 ms)", dt);
    } else if (rank == 1) {
        await_announce(0, 200);
        r = dist_store_set(w, "late", "hello", 5);
        CHECK(C_GETWAIT, r == DIST_OK, "set: %s", RN(r));
    }
    barrier(w);
}

typedef struct add_arg { dist_t *w; int n; int bad; } add_arg;

static void *add_thread(void *p) {
    add_arg *a = (add_arg *)p;
    for (int i = 0; i < a->n; i++)
        if (dist_store_add(a->w, "tcounter", 1, NULL) != DIST_OK) a->bad++;
    return NULL;
}

static void step_add(dist_t *w) {
    int rank = dist_rank(w);
    int64_t v = 0, prev = 0;
    int mono = 1, errs = 0;
    dist_result r = DIST_OK, first = DIST_OK;
    char buf[64];
    barrier(w);
    for (int i = 0; i < 1000; i++) {
        r = dist_store_add(w, "counter", rank + 1, &v);
        if (r != DIST_OK) { if (!errs++) first = r; continue; }
        if (v <= prev || v > 10000) mono = 0;
        prev = v;
    }
    CHECK(C_ADD, errs == 0, "%d adds failed, first: %s", errs, RN(first));
    CHECK(C_ADDMONO, mono, "values not increasing or above the total");
    barrier(w);
    CHECK(C_ADD, get_str(w, "counter", buf, sizeof buf, &r) > 0 && strcmp(buf, "10000") == 0,
          "get counter: %s \"%s\", expected 1000 * (1 + 2 + 3 + 4) = 10000", RN(r), buf);
    v = -1;
    r = dist_store_add(w, "counter", 0, &v);
    CHECK(C_ADD, r == DIST_OK && v == 10000, "add 0: %s, %lld", RN(r), (long long)v);
    barrier(w);
    if (rank == 0) {
        v = 0;
        r = dist_store_add(w, "fresh", -5, &v);
        CHECK(C_ADDNEW, r == DIST_OK && v == -5, "add -5 to a missing key: %s, %lld", RN(r), (long long)v);
        r = dist_store_add(w, "fresh", 7, NULL);
        CHECK(C_ADDNEW, r == DIST_OK, "add with result NULL: %s", RN(r));
        CHECK(C_ADDNEW, get_str(w, "fresh", buf, sizeof buf, &r) > 0 && strcmp(buf, "2") == 0, "value \"%s\", expected \"2\"", buf);
        r = dist_store_add(w, "fresh", (int64_t)1 << 40, &v);
        CHECK(C_ADDNEW, r == DIST_OK && v == ((int64_t)1 << 40) + 2, "add 2^40: %s, %lld", RN(r), (long long)v);
    } else if (rank == 1) {
        static const char *bad[] = { "abc", "12abc", "" };
        for (int i = 0; i < 3; i++) {
            r = dist_store_set(w, "notint", bad[i], strlen(bad[i]));
            v = 424242;
            if (r == DIST_OK) r = dist_store_add(w, "notint", 1, &v);
            CHECK(C_ADDBAD, r != DIST_OK, "add on \"%s\" succeeded (%lld)", bad[i], (long long)v);
            CHECK(C_ADDBAD, get_str(w, "notint", buf, sizeof buf, &r) >= 0 && strcmp(buf, bad[i]) == 0,
                  "value now \"%s\", expected \"%s\"", buf, bad[i]);
        }
    } else if (rank == 2) {
        pthread_t t[2];
        add_arg a[2] = { { w, 250, 0 }, { w, 250, 0 } };
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, add_thread, &a[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        CHECK(C_ADDTHREADS, a[0].bad == 0 && a[1].bad == 0, "%d + %d adds failed", a[0].bad, a[1].bad);
        CHECK(C_ADDTHREADS, get_str(w, "tcounter", buf, sizeof buf, &r) > 0 && strcmp(buf, "500") == 0,
              "value \"%s\", expected \"500\"", buf);
    }
    barrier(w);
}

static void step_wait(dist_t *w) {
    int rank = dist_rank(w);
    dist_result r;
    const char *keys[3] = { "w/1", "w/2", "w/3" };
    int exists = -1;
    barrier(w);
    if (rank == 0) {
        long t0 = now_ms(), dt;
        announce(1);
        r = dist_store_wait(w, keys, 3, 0);
        dt = now_ms() - t0;
        CHECK(C_WAITMANY, r == DIST_OK, "wait: %s: %s", RN(r), dist_error_message(w));
        CHECK(C_WAITMANY, dt >= 290, "wait returned after %ld ms, before the last key (300 ms)", dt);
        r = dist_store_check(w, keys, 3, &exists);
        CHECK(C_WAITMANY, r == DIST_OK && exists == 1, "check afterwards: %s, %d", RN(r), exists);
    } else {
        /* rank 2 sets w/2 at 200 ms, rank 3 sets w/3 at 300 ms; rank 1
           first waits for w/3 itself (a second waiter, own timeout), then
           sets w/1: the last key appears after 300 ms */
        char key[16];
        if (rank == 1) {
            r = dist_store_wait(w, &keys[2], 1, 10000);
            CHECK(C_WAITMANY, r == DIST_OK, "rank 1 waiting on w/3: %s", RN(r));
        } else {
            await_announce(1, 100 * rank);
        }
        snprintf(key, sizeof key, "w/%d", rank);
        r = dist_store_set(w, key, "", 0);
        CHECK(C_WAITMANY, r == DIST_OK, "set %s: %s", key, RN(r));
    }
    barrier(w);

    /* a timeout, and the key named in the message */
    if (rank == 0) {
        const char *k = "nobody/sets/this";
        long t0 = now_ms(), dt;
        char buf[64];
        r = dist_store_wait(w, &k, 1, 300);
        dt = now_ms() - t0;
        CHECK(C_WAITTO, r == DIST_ERR_TIMEOUT, "wait: %s", RN(r));
        CHECK(C_WAITTO, dt >= 300 && dt <= scaled(2000), "wait took %ld ms", dt);
        CHECK(C_WAITTO, strstr(dist_error_message(w), k) != NULL, "the message does not name the key: \"%s\"", dist_error_message(w));
        r = dist_store_set(w, "after-timeout", "still here", 10);
        CHECK(C_AFTERTO, r == DIST_OK && get_str(w, "after-timeout", buf, sizeof buf, &r) == 10 && strcmp(buf, "still here") == 0,
              "set/get after the timeout: %s: %s", RN(r), dist_error_message(w));
    } else if (rank == 1) {
        const char *two[2] = { "bin/0", "nobody/sets/this/either" };
        long t0 = now_ms(), dt;
        r = dist_store_wait(w, two, 2, 300);
        dt = now_ms() - t0;
        CHECK(C_WAITTO2, r == DIST_ERR_TIMEOUT && dt >= 300 && dt <= scaled(2000), "wait: %s after %ld ms", RN(r), dt);
        CHECK(C_WAITTO2, r != DIST_ERR_TIMEOUT || strstr(dist_error_message(w), two[1]) != NULL,
              "the message does not name the missing key \"%s\": \"%s\"", two[1], dist_error_message(w));
    }
    barrier(w);
}

static void step_check(dist_t *w) {
    int rank = dist_rank(w);
    if (rank == 3) {
        const char *missing = "never/set", *present = "bin/0";
        const char *both[2] = { "bin/0", "never/set" };
        int exists = -1;
        long t0 = now_ms(), dt;
        dist_result r = dist_store_check(w, &missing, 1, &exists);
        dt = now_ms() - t0;
        CHECK(C_CHECK, r == DIST_OK && exists == 0, "check missing: %s, %d", RN(r), exists);
        CHECK(C_CHECK, dt < scaled(1000), "check on a missing key took %ld ms (it must not wait)", dt);
        exists = -1;
        r = dist_store_check(w, &present, 1, &exists);
        CHECK(C_CHECK, r == DIST_OK && exists == 1, "check present: %s, %d", RN(r), exists);
        exists = -1;
        r = dist_store_check(w, both, 2, &exists);
        CHECK(C_CHECK, r == DIST_OK && exists == 0, "check {present, missing}: %s, %d", RN(r), exists);
        r = dist_store_set(w, "never/set", "now it is", 9);
        exists = -1;
        if (r == DIST_OK) r = dist_store_check(w, both, 2, &exists);
        CHECK(C_CHECK, r == DIST_OK && exists == 1, "check after set: %s, %d", RN(r), exists);
    }
    barrier(w);
}

static void step_cas(dist_t *w) {
    int rank = dist_rank(w);
    char out[64];
    size_t len;
    dist_result r;
    int exists = -1;
    if (rank == 0) {
        const char *k = "cas/a";
        char buf[64];
        len = 0; memset(out, 0, sizeof out);
        r = dist_store_compare_set(w, k, NULL, 0, "one", 3, out, sizeof out, &len);
        CHECK(C_CAS_CREATE, r == DIST_OK && len == 3 && memcmp(out, "one", 3) == 0, "%s, out \"%.*s\"", RN(r), (int)len, out);
        CHECK(C_CAS_CREATE, get_str(w, k, buf, sizeof buf, &r) == 3 && strcmp(buf, "one") == 0, "get: \"%s\"", buf);

        len = 0; memset(out, 0, sizeof out);
        r = dist_store_compare_set(w, k, "one", 3, "two", 3, out, sizeof out, &len);
        CHECK(C_CAS_SWAP, r == DIST_OK && len == 3 && memcmp(out, "two", 3) == 0, "%s, out \"%.*s\"", RN(r), (int)len, out);
        CHECK(C_CAS_SWAP, get_str(w, k, buf, sizeof buf, &r) == 3 && strcmp(buf, "two") == 0, "get: \"%s\"", buf);

        len = 0; memset(out, 0, sizeof out);
        r = dist_store_compare_set(w, k, "wrong", 5, "three", 5, out, sizeof out, &len);
        CHECK(C_CAS_WRONG, r == DIST_OK && len == 3 && memcmp(out, "two", 3) == 0, "%s, out \"%.*s\"", RN(r), (int)len, out);
        CHECK(C_CAS_WRONG, get_str(w, k, buf, sizeof buf, &r) == 3 && strcmp(buf, "two") == 0, "get: \"%s\"", buf);
        len = 0;
        r = dist_store_compare_set(w, k, "tw", 2, "three", 5, out, sizeof out, &len);
        CHECK(C_CAS_WRONG, r == DIST_OK && len == 3 && memcmp(out, "two", 3) == 0, "prefix as expected: %s, out \"%.*s\"", RN(r), (int)len, out);

        len = 0; memset(out, 0, sizeof out);
        r = dist_store_compare_set(w, k, NULL, 0, "four", 4, out, sizeof out, &len);
        CHECK(C_CAS_EXISTS, r == DIST_OK && len == 3 && memcmp(out, "two", 3) == 0, "%s, out \"%.*s\"", RN(r), (int)len, out);
        CHECK(C_CAS_EXISTS, get_str(w, k, buf, sizeof buf, &r) == 3 && strcmp(buf, "two") == 0, "get: \"%s\"", buf);

        len = 99;
        r = dist_store_compare_set(w, "cas/missing", "zzz", 3, "x", 1, out, sizeof out, &len);
        {
            const char *km = "cas/missing";
            dist_result r2 = dist_store_check(w, &km, 1, &exists);
            CHECK(C_CAS_MISSING, r2 == DIST_OK && exists == 0, "the key was created (compare_set said %s)", RN(r));
            printf("       [rank 0] compare_set on a missing key with expected \"zzz\": %s, out_len %zu (%s)\n", RN(r), len,
                   r == DIST_OK ? "-" : dist_error_message(w));
            fflush(stdout);
        }

        {
            const uint8_t v3[3] = { 0, 1, 0 }, v2[2] = { 0, 1 }, d2[2] = { 0, 0 };
            uint8_t o[8];
            r = dist_store_set(w, "cas/b", v3, 3);
            len = 0;
            if (r == DIST_OK) r = dist_store_compare_set(w, "cas/b", v2, 2, d2, 2, o, sizeof o, &len);
            CHECK(C_CAS_BINARY, r == DIST_OK && len == 3 && memcmp(o, v3, 3) == 0, "expected {0,1} vs {0,1,0}: %s len %zu", RN(r), len);
            len = 0;
            r = dist_store_compare_set(w, "cas/b", v3, 3, d2, 2, o, sizeof o, &len);
            CHECK(C_CAS_BINARY, r == DIST_OK && len == 2 && memcmp(o, d2, 2) == 0, "expected {0,1,0}: %s len %zu", RN(r), len);
            len = 0;
            r = dist_store_compare_set(w, "cas/b", d2, 2, NULL, 0, o, sizeof o, &len);
            CHECK(C_CAS_BINARY, r == DIST_OK && len == 0, "swap to an empty value: %s len %zu", RN(r), len);
        }

        len = 0;
        r = dist_store_compare_set(w, "bin/1", "x", 1, "y", 1, out, 10, &len);
        CHECK(C_CAS_TRUNC, r == DIST_ERR_TRUNCATED && len == 300, "%s, len %zu", RN(r), len);
    }
    barrier(w);

    /* lock election: all ranks at once, 20 rounds */
    for (int round = 0; round < 20; round++) {
        char key[32], mine[32];
        int winner = -1;
        snprintf(key, sizeof key, "elect/%d", round);
        snprintf(mine, sizeof mine, "rank %d", rank);
        barrier(w);
        len = 0; memset(out, 0, sizeof out);
        r = dist_store_compare_set(w, key, NULL, 0, mine, strlen(mine), out, sizeof out - 1, &len);
        if (r == DIST_OK && len < sizeof out) { out[len] = 0; if (sscanf(out, "rank %d", &winner) != 1) winner = -2; }
        else fail_(C_ELECT, rank, "round %d: %s", round, RN(r));
        g->elect[round][rank] = winner;
    }
    barrier(w);
}

static void step_delete(dist_t *w) {
    int rank = dist_rank(w);
    dist_result r;
    char buf[64];
    if (rank == 0) {
        int del = -1, exists = -1;
        const char *k = "del/a";
        r = dist_store_set(w, k, "x", 1);
        if (r == DIST_OK) r = dist_store_delete(w, k, &del);
        CHECK(C_DELETE, r == DIST_OK && del == 1, "first delete: %s, deleted %d", RN(r), del);
        del = -1;
        r = dist_store_delete(w, k, &del);
        CHECK(C_DELETE, r == DIST_OK && del == 0, "second delete: %s, deleted %d", RN(r), del);
        r = dist_store_check(w, &k, 1, &exists);
        CHECK(C_DELETE, r == DIST_OK && exists == 0, "check: %s, exists %d", RN(r), exists);
        del = -1;
        r = dist_store_delete(w, "del/never-existed", &del);
        CHECK(C_DELETE, r == DIST_OK && del == 0, "delete of a key that never existed: %s, deleted %d", RN(r), del);
        r = dist_store_set(w, "del/b", "old", 3);
        if (r == DIST_OK) r = dist_store_delete(w, "del/b", NULL);
        CHECK(C_DELETE, r == DIST_OK, "set + delete with deleted NULL: %s", RN(r));
    }
    barrier(w);
    if (rank == 1) {
        long t0 = now_ms(), dt;
        int n;
        announce(2);
        n = get_str(w, "del/b", buf, sizeof buf, &r);
        dt = now_ms() - t0;
        CHECK(C_DEL_GETWAIT, n == 3 && strcmp(buf, "new") == 0, "get: %s \"%s\" (the old value was \"old\")", RN(r), buf);
        CHECK(C_DEL_GETWAIT, dt >= 190, "get returned after %ld ms, before the key was set again (200 ms)", dt);
    } else if (rank == 0) {
        await_announce(2, 200);
        r = dist_store_set(w, "del/b", "new", 3);
        CHECK(C_DEL_GETWAIT, r == DIST_OK, "set again: %s", RN(r));
    } else if (rank == 2) {
        const char *k = "del/a";
        long t0 = now_ms(), dt;
        r = dist_store_wait(w, &k, 1, 300);
        dt = now_ms() - t0;
        CHECK(C_DEL_WAITTO, r == DIST_ERR_TIMEOUT && dt >= 300 && dt <= scaled(2000), "wait: %s after %ld ms", RN(r), dt);
    }
    barrier(w);
}

static int store_main(dist_t *w, void *arg) {
    int rank = dist_rank(w);
    (void)arg;
    if (dist_world_size(w) != NRANKS) return 3;
    step_values(w);
    step_big(w);
    step_keys(w);
    step_getwait(w);
    step_add(w);
    step_wait(w);
    step_check(w);
    step_cas(w);
    step_delete(w);
    g->done[rank] = 1;
    return 0;
}

/* A second job with a 1 s timeout: a get on a key that is gone times out. */
static int short_main(dist_t *w, void *arg) {
    int rank = dist_rank(w);
    dist_result r;
    (void)arg;
    if (rank == 0) {
        r = dist_store_set(w, "gone", "soon", 4);
        if (r == DIST_OK) r = dist_store_delete(w, "gone", NULL);
        CHECK(C_GETTO, r == DIST_OK, "set + delete: %s", RN(r));
    }
    barrier(w);
    if (rank == 1) {
        char buf[16];
        size_t len = 0;
        long t0 = now_ms(), dt;
        r = dist_store_get(w, "gone", buf, sizeof buf, &len);
        dt = now_ms() - t0;
        CHECK(C_GETTO, r == DIST_ERR_TIMEOUT, "get: %s", RN(r));
        CHECK(C_GETTO, dt >= 950 && dt <= scaled(4000), "get took %ld ms", dt);
        CHECK(C_GETTO, strstr(dist_error_message(w), "gone") != NULL, "the message does not name the key: \"%s\"", dist_error_message(w));
    }
    barrier(w);
    return 0;
}

int main(void) {
    dist_config cfg;
    int failures = 0, rc, rc2;
    long t0;
    test_start();
    g = (shared_t *)mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED) { perror("mmap"); return 1; }
    if (first_process()) {      /* (not again in a case's processes on Windows: they run main too) */
        memset(g, 0, sizeof *g);
        memset(g->elect, 0xff, sizeof g->elect);
    }

    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 10000;
    t0 = now_ms();
    rc = spawn_job(NRANKS, store_main, NULL, &cfg);
    printf("       (4-rank job: dist_spawn returned %d after %ld ms%s%s)\n", rc, now_ms() - t0, rc ? ": " : "",
           rc ? dist_error_message(NULL) : "");

    cfg.timeout_ms = 1000;
    rc2 = spawn_job(2, short_main, NULL, &cfg);
    if (rc2 != 0) printf("       (2-rank job with a 1 s timeout: dist_spawn returned %d: %s)\n", rc2, dist_error_message(NULL));

    /* the election rounds, judged from what every rank saw */
    for (int round = 0; round < 20; round++) {
        int w0 = g->elect[round][0], same = 1;
        for (int r = 1; r < NRANKS; r++) if (g->elect[round][r] != w0) same = 0;
        if (!same || w0 < 0 || w0 >= NRANKS) {
            char why[200];
            snprintf(why, sizeof why, "round %d: ranks saw winners %d %d %d %d", round,
                     g->elect[round][0], g->elect[round][1], g->elect[round][2], g->elect[round][3]);
            fail_(C_ELECT, -1, "%s", why);
        } else {
            pass_(C_ELECT);
        }
    }
    for (int r = 0; r < NRANKS; r++) {
        if (g->done[r]) pass_(C_RANKS_DONE);
        else fail_(C_RANKS_DONE, r, "did not reach the end (dist_spawn returned %d)", rc);
    }

    for (int i = 0; i < NCHECKS; i++) {
        const check_t *c = &g->checks[i];
        if (c->fail) { printf("FAIL %s: %s (%d failure(s))\n", check_names[i], c->why, c->fail); failures++; }
        else if (c->pass == 0) { printf("FAIL %s: never checked\n", check_names[i]); failures++; }
        else printf("ok   %s\n", check_names[i]);
    }
    if (rc != 0) { printf("FAIL the 4-rank job: dist_spawn returned %d\n", rc); failures++; }
    else printf("ok   the 4-rank job ended with dist_spawn returning 0\n");
    if (rc2 != 0) { printf("FAIL the 2-rank job: dist_spawn returned %d\n", rc2); failures++; }
    munmap(g, sizeof *g);
    if (failures) { printf("%d check(s) failed\n", failures); return 1; }
    printf("all checks passed\n");
    return 0;
}
