/* tests/mixed_rank.c - one rank of a job whose ranks run on Linux and on
   Windows (under Wine, on the same machine): tests/windows/mixed_job.sh
   starts them.

   Joins by env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DIST_RUN_ID,
   DIST_TRANSPORT, DIST_ALGO, DIST_TIMEOUT: a config left zero but for a
   logger), then:
   1. tests/collcheck.h's full sequence: every collective x dtype x op x
      counts 1, 7, 1000, count 0, large counts, in place, async, barriers,
      each result checked against a reference every rank computes itself;
   2. point-to-point between every pair, both ways: blocking dist_send /
      dist_recv (the pairs in one order, the lower rank sending first), then
      dist_isend / dist_irecv to and from every peer at once, each of 8 B (1
      x int64), 64 KiB (16384 x int32) and 3 MiB (uint8); every byte checked
      against a pattern from (src, dst, size, mode);
   3. a barrier and dist_destroy (after a failure, dist_abort first: the
      other ranks then fail at once, naming this one, instead of waiting for
      their timeout).
   Prints one line, "ok   rank R: N checks (...)" or "FAIL rank R: ...",
   and exits 0 or 1.  The parenthesis says the platform, how many peers
   this rank shares memory with (from the library's log) and the seconds.
   MIXED_EXPECT_SHM=K (optional): fail unless that number is K.

   Linux:   cc -std=c11 -O2 -Wall -Wextra -Werror -I. tests/mixed_rank.c -o mixed_rank -pthread -lm
   Windows: x86_64-w64-mingw32-gcc -std=c11 -O2 -Wall -Wextra -Werror -I. tests/mixed_rank.c -o mixed_rank.exe -lws2_32 */
#define DIST_IMPLEMENTATION
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collcheck.h"

#ifdef _WIN32
#  define PLATFORM "windows"
#else
#  define PLATFORM "linux"
#endif

/* ---- what the library logs: shared-memory peers, warnings -------------- */
static volatile int g_shm_peers;

static void logger(dist_log_level level, const char *msg, void *user) {
    const char *p = strstr(msg, "shared memory with ");   /* after "[rank R] " */
    int k;
    (void)user;
    if (p && sscanf(p, "shared memory with %d rank", &k) == 1) g_shm_peers = k;
    if (level <= DIST_LOG_WARN) fprintf(stderr, "[%s] dist: %s\n", PLATFORM, msg);
}

/* ---- point-to-point ------------------------------------------------------ */
static const size_t P2P_BYTES[3] = { 8, 64 * 1024, 3 * 1024 * 1024 };
static const dist_dtype P2P_DT[3] = { DIST_INT64, DIST_INT32, DIST_UINT8 };

/* The bytes rank src sends rank dst, `size` of them, in mode 0 (blocking)
   or 1 (non-blocking). */
static void pattern(uint8_t *p, size_t size, int src, int dst, int mode) {
    uint64_t s = collcheck_mix64(((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ ((uint64_t)mode << 62) ^ size);
    for (size_t i = 0; i < size; i += 8) {
        uint64_t x = collcheck_mix64(s + i / 8);
        memcpy(p + i, &x, size - i < 8 ? size - i : 8);
    }
}

static int check_from(collcheck_t *c, const uint8_t *got, uint8_t *want, size_t size, int src, int mode) {
    pattern(want, size, src, c->rank, mode);
    c->checks++;
    for (size_t i = 0; i < size; i++)
        if (got[i] != want[i])
            return collcheck_fail(c, __LINE__, "%s from rank %d, %zu bytes: byte %zu is 0x%02x, expected 0x%02x",
                                  mode ? "irecv" : "recv", src, size, i, got[i], want[i]);
    return 0;
}

#define P2P_CALL(what, peer, size, call)                                                                   \
    do {                                                                                                   \
        dist_result r_ = (call);                                                                           \
        if (r_ != DIST_OK)                                                                                 \
            return collcheck_fail(c, __LINE__, "%s rank %d, %zu bytes: %s: %s", what, peer, size,          \
                                  dist_result_name(r_), dist_error_message(c->w));                         \
    } while (0)

/* Blocking, pair by pair in one order (a < b: a sends first, then
   receives): every rank meets its pairs in that order, so the earliest
   unfinished pair always has both ranks at it. */
static int p2p_blocking(collcheck_t *c, int si) {
    size_t size = P2P_BYTES[si], es = dist_dtype_size(P2P_DT[si]);
    uint8_t *out = collcheck_alloc(size), *in = collcheck_alloc(size), *want = collcheck_alloc(size);
    int rank = c->rank, n = c->n, tag = 100 + si, bad = 0;
    for (int a = 0; a < n && !bad; a++)
        for (int b = a + 1; b < n && !bad; b++) {
            int peer = rank == a ? b : a;
            if (rank != a && rank != b) continue;
            pattern(out, size, rank, peer, 0);
            memset(in, 0xCD, size);
            if (rank == a) {
                P2P_CALL("send to", peer, size, dist_send(c->w, out, size / es, P2P_DT[si], peer, tag));
                P2P_CALL("recv from", peer, size, dist_recv(c->w, in, size / es, P2P_DT[si], peer, tag));
            } else {
                P2P_CALL("recv from", peer, size, dist_recv(c->w, in, size / es, P2P_DT[si], peer, tag));
                P2P_CALL("send to", peer, size, dist_send(c->w, out, size / es, P2P_DT[si], peer, tag));
            }
            bad = check_from(c, in, want, size, peer, 0);
        }
    free(out); free(in); free(want);
    return bad;
}

/* Non-blocking: a receive from and a send to every peer, all in flight at once. */
static int p2p_async(collcheck_t *c, int si) {
    size_t size = P2P_BYTES[si], es = dist_dtype_size(P2P_DT[si]);
    int rank = c->rank, n = c->n, tag = 200 + si, bad = 0;
    uint8_t *out = collcheck_alloc(size * (size_t)n), *in = collcheck_alloc(size * (size_t)n), *want = collcheck_alloc(size);
    dist_req_t **reqs = (dist_req_t **)calloc((size_t)(2 * n), sizeof *reqs);
    dist_result r;
    if (!reqs) { fprintf(stderr, "out of memory\n"); exit(2); }
    memset(in, 0xCD, size * (size_t)n);
    for (int q = 0; q < n; q++) {
        if (q == rank) continue;
        P2P_CALL("irecv from", q, size, dist_irecv(c->w, in + (size_t)q * size, size / es, P2P_DT[si], q, tag, &reqs[2 * q]));
    }
    for (int q = 0; q < n; q++) {
        if (q == rank) continue;
        pattern(out + (size_t)q * size, size, rank, q, 1);
        P2P_CALL("isend to", q, size, dist_isend(c->w, out + (size_t)q * size, size / es, P2P_DT[si], q, tag, &reqs[2 * q + 1]));
    }
    r = dist_wait_all(2 * n, reqs);
    if (r != DIST_OK)
        return collcheck_fail(c, __LINE__, "isend/irecv with every peer, %zu bytes: wait_all: %s: %s", size,
                              dist_result_name(r), dist_error_message(c->w));
    for (int q = 0; q < n && !bad; q++)
        if (q != rank) bad = check_from(c, in + (size_t)q * size, want, size, q, 1);
    free(out); free(in); free(want); free(reqs);
    return bad;
}

int main(void) {
    dist_t *w = NULL;
    dist_config cfg;
    collcheck_t c;
    char where[96];
    const char *algo = getenv("DIST_ALGO"), *tr = getenv("DIST_TRANSPORT"), *exp_shm = getenv("MIXED_EXPECT_SHM");
    int64_t t0 = dist_time_ns();
    dist_result r;
    int bad = 0, rank = -1;

    memset(&cfg, 0, sizeof cfg);        /* everything from the environment ... */
    cfg.logger.func = logger;           /* ... but the log, for the shared-memory peers */
    cfg.log_level = DIST_LOG_INFO;
    r = dist_init(&w, &cfg);
    if (r != DIST_OK) {
        printf("FAIL rank %s: dist_init (%s): %s: %s\n", getenv("RANK") ? getenv("RANK") : "?", PLATFORM,
               dist_result_name(r), dist_error_message(NULL));
        return 1;
    }
    rank = dist_rank(w);
    snprintf(where, sizeof where, "n=%d %s %s %s:", dist_world_size(w), PLATFORM, algo && *algo ? algo : "auto",
             tr && *tr ? tr : "auto");
    collcheck_init(&c, w, 0x5eed0000ull + (uint64_t)dist_world_size(w) * 131, where);

    bad = collcheck_run(&c, 1);
    for (int si = 0; si < 3 && !bad; si++) bad = p2p_blocking(&c, si);
    for (int si = 0; si < 3 && !bad; si++) bad = p2p_async(&c, si);
    if (!bad && (r = dist_barrier(w)) != DIST_OK)
        bad = collcheck_fail(&c, __LINE__, "final barrier: %s: %s", dist_result_name(r), dist_error_message(w));
    if (!bad && exp_shm && *exp_shm && atoi(exp_shm) != g_shm_peers)
        bad = collcheck_fail(&c, __LINE__, "shares memory with %d peer(s), expected %s", g_shm_peers, exp_shm);
    if (bad) dist_abort(w);             /* the others fail at once (peer lost) instead of timing out */
    r = dist_destroy(w);
    if (!bad && r != DIST_OK)
        bad = collcheck_fail(&c, __LINE__, "dist_destroy: %s: %s", dist_result_name(r), dist_error_message(NULL));
    if (bad)
        printf("FAIL rank %d (%s, %.1f s): %s\n", rank, PLATFORM, (double)(dist_time_ns() - t0) / 1e9, c.msg);
    else
        printf("ok   rank %d: %ld checks (%s, shm peers %d, %.1f s)\n", rank, c.checks, PLATFORM, g_shm_peers,
               (double)(dist_time_ns() - t0) / 1e9);
    fflush(stdout);
    return bad ? 1 : 0;
}
