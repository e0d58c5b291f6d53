// TIMEOUT: 120
// TRANSPORTS: auto tcp mixed
/* test_probe.c - dist_probe and dist_iprobe: learning the size of a message
   before receiving it.

   Each case runs in its own dist_spawn; a rank prints "FAIL ..." for each
   problem it sees and returns non-zero; the parent prints one line per case.
   1. n=3: ranks 1 and 2 each send 40 messages with tag 5 to rank 0, of
      sizes and dtypes drawn from a seeded stream (0 to 3 MiB, every dtype),
      contents a byte pattern of (sender, index); rank 0 loops dist_probe
      (DIST_ANY_SOURCE, 5), checks the status (source, dtype, count, bytes)
      against what that sender's stream says its next message is, receives
      exactly that, and checks every byte.  Messages from one sender arrive
      in order.  Then the same with a probe for a given source.
   2. dist_iprobe with nothing sent: found = 0 at once; after a barrier the
      message is there.  A message with another tag is not reported.
   3. A probe that can never be satisfied times out after the communicator's
      timeout (1 s here) with DIST_ERR_TIMEOUT naming the tag; one on a rank
      that exits fails with DIST_ERR_PEER_LOST within 1 s, naming it.
   4. A group {0, 2} of 3: a probe on the group reports group ranks, and a
      message sent on the world with the same tag is not reported there.
   5. A thread of rank 0 blocked in dist_probe(DIST_ANY_SOURCE) is woken by
      a message rank 0's main thread sends to itself, within 50 ms. */
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
#include "dist.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"

#define NMSG 40

/* The k-th message of `sender`: dtype, count, and its byte seed. */
static void msg_shape(int sender, int k, dist_dtype *dt, size_t *count, uint64_t *seed) {
    uint64_t h = mix64(((uint64_t)sender << 32) ^ (uint64_t)k ^ 0x5eed);
    *dt = (dist_dtype)(h % DIST_DTYPE_COUNT);
    size_t es = dist_dtype_size(*dt);
    switch ((h >> 8) % 4) {
    case 0: *count = 0; break;
    case 1: *count = (size_t)((h >> 16) % 64); break;
    case 2: *count = (size_t)((h >> 16) % 100000); break;
    default: *count = (size_t)(((h >> 16) % (3u << 20)) / es); break;
    }
    *seed = h;
}

#define RFAIL(...) do { printf("FAIL rank %d: ", rank); printf(__VA_ARGS__); printf("\n"); return 1; } while (0)

static int fn_stream(dist_t *w, void *arg) {
    int rank = dist_rank(w), by_source = *(int *)arg;
    if (rank != 0) {
        for (int k = 0; k < NMSG; k++) {
            dist_dtype dt; size_t count; uint64_t seed;
            msg_shape(rank, k, &dt, &count, &seed);
            size_t nb = count * dist_dtype_size(dt);
            uint8_t *b = malloc(nb + 1);
            fill_bytes(b, nb, seed);
            if (dist_send(w, b, count, dt, 0, 5) != DIST_OK) RFAIL("send %d: %s", k, dist_error_message(w));
            free(b);
        }
        return 0;
    }
    int next[3] = { 0, 0, 0 };
    for (int got = 0; got < 2 * NMSG; got++) {
        dist_status st;
        int want_src = by_source ? 1 + (got % 2) : DIST_ANY_SOURCE;
        if (dist_probe(w, want_src, 5, 0, &st) != DIST_OK) RFAIL("probe %d: %s", got, dist_error_message(w));
        if (st.source < 1 || st.source > 2 || (by_source && st.source != want_src) || next[st.source] >= NMSG)
            RFAIL("probe %d reported source %d", got, st.source);
        dist_dtype dt; size_t count; uint64_t seed;
        msg_shape(st.source, next[st.source], &dt, &count, &seed);
        if (st.tag != 5 || st.dtype != dt || st.count != count || st.nbytes != count * dist_dtype_size(dt))
            RFAIL("message %d of rank %d: probe says tag %d, %zu x %s (%zu bytes), it is %zu x %s", next[st.source], st.source, st.tag,
                  st.count, dist_dtype_name(st.dtype), st.nbytes, count, dist_dtype_name(dt));
        uint8_t *b = malloc(st.nbytes + 1);
        if (dist_recv(w, b, st.count, st.dtype, st.source, 5) != DIST_OK) RFAIL("recv after probe: %s", dist_error_message(w));
        size_t bad = check_bytes(b, st.nbytes, seed);
        free(b);
        if (bad != SIZE_MAX) RFAIL("message %d of rank %d differs at byte %zu", next[st.source], st.source, bad);
        next[st.source]++;
    }
    int found = 1;
    dist_status st;
    if (dist_iprobe(w, DIST_ANY_SOURCE, 5, &found, &st) != DIST_OK || found) RFAIL("a message left over after the stream");
    return 0;
}

static int fn_iprobe(dist_t *w, void *arg) {
    (void)arg;
    int rank = dist_rank(w), found = -1, x = 7;
    dist_status st;
    if (rank == 0) {
        int64_t t0 = now_ns();
        if (dist_iprobe(w, 1, 9, &found, &st) != DIST_OK || found != 0) RFAIL("iprobe before any send: found %d: %s", found, dist_error_message(w));
        if (secs_since(t0) > 0.05) RFAIL("iprobe took %.3f s", secs_since(t0));
    }
    if (dist_barrier(w) != DIST_OK) RFAIL("barrier: %s", dist_error_message(w));
    if (rank == 1) {
        if (dist_send(w, &x, 1, DIST_INT32, 0, 8) != DIST_OK || dist_send(w, &x, 1, DIST_INT32, 0, 9) != DIST_OK) RFAIL("send: %s", dist_error_message(w));
    }
    if (dist_barrier(w) != DIST_OK) RFAIL("barrier: %s", dist_error_message(w));
    if (rank == 0) {
        int64_t t0 = now_ns();
        do {
            if (dist_iprobe(w, 1, 9, &found, &st) != DIST_OK) RFAIL("iprobe: %s", dist_error_message(w));
        } while (!found && secs_since(t0) < scaled_s(2));
        if (!found || st.source != 1 || st.count != 1 || st.dtype != DIST_INT32) RFAIL("iprobe after the send: found %d source %d count %zu", found, st.source, st.count);
        dist_result r = dist_iprobe(w, 1, 10, &found, &st);
        if (r != DIST_OK || found) RFAIL("iprobe for tag 10: %s, found %d: %s", dist_result_name(r), found, dist_error_message(w));
        int y = 0;
        if (dist_recv(w, &y, 1, DIST_INT32, 1, 9) != DIST_OK || y != 7) RFAIL("recv tag 9");
        if (dist_recv(w, &y, 1, DIST_INT32, 1, 8) != DIST_OK || y != 7) RFAIL("recv tag 8");
    }
    return dist_barrier(w) == DIST_OK ? 0 : 1;          /* rank 1 stays until rank 0 is done */
}

static int64_t *g_exit_ns;                    /* MAP_SHARED: when rank 2 of fn_timeout exits */

static int fn_timeout(dist_t *w, void *arg) {
    (void)arg;
    int rank = dist_rank(w);
    dist_status st;
    if (rank == 0) {
        int64_t t0 = now_ns();
        dist_result r = dist_probe(w, 1, 3, 0, &st);
        double el = secs_since(t0);
        if (r != DIST_ERR_TIMEOUT || !strstr(dist_error_message(w), "tag 3") || !strstr(dist_error_message(w), "rank 1"))
            RFAIL("probe nobody answers: %s \"%s\"", dist_result_name(r), dist_error_message(w));
        if (el < 0.9 || el > scaled_s(2.5)) RFAIL("probe timed out after %.2f s (timeout 1 s)", el);
        t0 = now_ns();
        r = dist_probe(w, DIST_ANY_SOURCE, 3, 150, &st);
        el = secs_since(t0);
        if (r != DIST_ERR_TIMEOUT || el < 0.14 || el > scaled_s(0.5) || !strstr(dist_error_message(w), "0.1 s"))
            RFAIL("probe with its own 150 ms timeout: %s after %.3f s \"%s\"", dist_result_name(r), el, dist_error_message(w));
        if (dist_probe(w, 1, 3, -1, &st) != DIST_ERR_INVALID) RFAIL("a negative timeout was accepted");
        r = dist_probe(w, 2, 3, scaled(8000), &st);     /* rank 2 exits without a word meanwhile */
        el = (double)(now_ns() - __atomic_load_n(g_exit_ns, __ATOMIC_SEQ_CST)) / 1e9;
        if (r != DIST_ERR_PEER_LOST || !strstr(dist_error_message(w), "rank 2")) RFAIL("probe on a rank that left: %s \"%s\"", dist_result_name(r), dist_error_message(w));
        if (el > scaled_s(1)) RFAIL("probe on a rank that left returned %.2f s after it exited", el);
        return 0;
    }
    if (rank == 2) {
        sleep_ms(1500);                               /* rank 0's second probe is waiting by now */
        __atomic_store_n(g_exit_ns, now_ns(), __ATOMIC_SEQ_CST);
        fflush(NULL);
        _exit(0);
    }
    sleep_ms(scaled(2500));                           /* rank 1 stays through rank 0's first probe */
    return 0;
}

static int fn_group(dist_t *w, void *arg) {
    (void)arg;
    int rank = dist_rank(w), x = 11;
    const int members[2] = { 0, 2 };
    dist_t *g = NULL;
    dist_status st;
    if (dist_new_group(w, 2, members, &g) != DIST_OK) RFAIL("new_group: %s", dist_error_message(w));
    if (rank == 2) {
        if (dist_send(w, &x, 1, DIST_INT32, 0, 4) != DIST_OK) RFAIL("world send");
        if (dist_send(g, &x, 1, DIST_INT32, 0, 4) != DIST_OK) RFAIL("group send");
    }
    if (rank == 0) {
        int found = 0;
        if (dist_probe(g, DIST_ANY_SOURCE, 4, 0, &st) != DIST_OK || st.source != 1) RFAIL("group probe: source %d: %s", st.source, dist_error_message(g));
        int y = 0;
        if (dist_recv(g, &y, 1, DIST_INT32, 1, 4) != DIST_OK || y != 11) RFAIL("group recv");
        if (dist_iprobe(g, DIST_ANY_SOURCE, 4, &found, &st) != DIST_OK || found) RFAIL("the world's message showed on the group");
        if (dist_probe(w, DIST_ANY_SOURCE, 4, 0, &st) != DIST_OK || st.source != 2) RFAIL("world probe: source %d", st.source);
        if (dist_recv(w, &y, 1, DIST_INT32, 2, 4) != DIST_OK || y != 11) RFAIL("world recv");
    }
    if (g) dist_destroy(g);
    return dist_barrier(w) == DIST_OK ? 0 : 1;
}

typedef struct { dist_t *w; dist_result r; dist_status st; int64_t t_ns; } prober_t;
static void *prober(void *p) {
    prober_t *pr = (prober_t *)p;
    pr->r = dist_probe(pr->w, DIST_ANY_SOURCE, 12, 0, &pr->st);
    pr->t_ns = now_ns();
    return NULL;
}

static int fn_self(dist_t *w, void *arg) {
    (void)arg;
    int rank = dist_rank(w);
    if (rank == 0) {
        prober_t pr;
        pthread_t th;
        memset(&pr, 0, sizeof pr);
        pr.w = w;
        pthread_create(&th, NULL, prober, &pr);
        sleep_ms(300);                               /* the prober is asleep in the engine by now */
        int64_t t0 = now_ns();
        double d = 2.5;
        if (dist_send(w, &d, 1, DIST_FLOAT64, 0, 12) != DIST_OK) RFAIL("send to itself: %s", dist_error_message(w));
        pthread_join(th, NULL);
        double woke = (double)(pr.t_ns - t0) / 1e9;
        if (pr.r != DIST_OK || pr.st.source != 0 || pr.st.dtype != DIST_FLOAT64) RFAIL("probe for a message to itself: %s", dist_result_name(pr.r));
        if (woke > scaled_s(0.05)) RFAIL("the probe woke %.3f s after the send", woke);
        double e = 0;
        if (dist_recv(w, &e, 1, DIST_FLOAT64, 0, 12) != DIST_OK || e != 2.5) RFAIL("recv from itself");
        printf("     probe woken %.1f ms after a send to itself\n", woke * 1e3);
    }
    return dist_barrier(w) == DIST_OK ? 0 : 1;
}

static int run(const char *name, int n, int timeout_ms, int (*fn)(dist_t *, void *), void *arg) {
    dist_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = timeout_ms;
    int64_t t0 = now_ns();
    fflush(NULL);
    int rc = dist_spawn(n, fn, arg, &cfg);
    printf("%s %s (%.2f s)\n", rc == 0 ? "ok  " : "FAIL", name, secs_since(t0));
    return rc != 0;
}

int main(void) {
    test_start();
    UNSET_ENV(LAUNCHER_ENV);
    int failed = 0, zero = 0, one = 1;
    g_exit_ns = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_exit_ns == MAP_FAILED) { perror("mmap"); return 1; }
    failed += run("n=3: 80 messages of random sizes and dtypes, probe(ANY_SOURCE) then recv exactly what it says", 3, scaled(20000), fn_stream, &zero);
    failed += run("n=3: the same, probing each source in turn", 3, scaled(20000), fn_stream, &one);
    failed += run("n=2: iprobe: nothing before the send, the message after, not another tag", 2, scaled(10000), fn_iprobe, NULL);
    failed += run("n=3: probe times out after the communicator's 1 s; on a rank that exits, PEER_LOST at once", 3, 1000, fn_timeout, NULL);
    failed += run("n=3: probe on a group {0,2} reports group ranks and only the group's messages", 3, scaled(10000), fn_group, NULL);
    failed += run("n=2: a thread blocked in probe wakes when another thread sends to its own rank", 2, scaled(10000), fn_self, NULL);
    printf("%d failed\n", failed);
    return failed ? 1 : 0;
}
