// TIMEOUT: 180
// WINDOWS: yes
/* test_shm_ring.c - the shared-memory rings alone: every payload streams
   through them (DIST_SHM_REF_BYTES is set beyond any message, so nothing
   travels by reference: the path used where process_vm_readv is not
   allowed).

   With 2, 3 and 4 ranks (dist_spawn, cfg.transport "auto"; every rank must
   log "shared memory with N-1 rank(s)", so the test fails if the rings are
   not in use), each part in its own job:
   - sizes: messages of 0, 1, 4095, 65536, 1 MiB - 1, 1 MiB + 7 and 16 MiB
     (larger than a ring) bytes, one size at a time, isend/irecv both ways
     between every pair at once (receives first on some ranks, sends first
     on others), contents checked against a pattern the receiver computes;
   - all sizes at once: the same, every size to every peer in flight
     together (one tag per size);
   - flood: 1000 isends of 8 bytes from every rank to every other rank, all
     posted before any rank posts a receive (ranks wait for each other
     through shared memory, not through the library), then received with
     blocking dist_recv and checked in order; then the same with 48
     messages of 64 KiB (3 MiB per pair: more than a ring holds);
   - collectives: all_reduce float32 SUM of 1M+3 elements and all_gather of
     300001 int32, against references each rank computes;
   - DIST_ANY_SOURCE: each rank in turn receives from all the others at
     once: 100 small messages per sender (irecvs posted together, completed
     with dist_test; dist_req_source must name the sender written in the
     payload, and each sender's messages arrive in order), then 4 messages
     of 1.5 MiB per sender with blocking DIST_ANY_SOURCE dist_recv.
   Bounds scale with DIST_TIMEOUT_SCALE. */
#define DIST_SHM_REF_BYTES (1ull << 62)
#ifndef DIST_TEST_LINKED   /* make links the tests with one build of the library (tests/impl_dist.c) */
#define DIST_IMPLEMENTATION
#endif
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
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MAXR 4

TSAN_NO_EXIT_SLEEP();

typedef struct {
    atomic_int claimed;
    char fail[700];
    int reported;
    int shm_lines, shm_n, shm_level;
    char shm_text[300];
    char note[200];
} rank_report;

typedef struct {
    atomic_int posted;          /* flood: ranks that have posted all their sends */
    rank_report r[MAXR];
} shared_t;
static shared_t *sh;

/* FAIL(...) and OK(call) (testutil.h): each rank's first failure */
DEFINE_FAIL_AT(MAXR, &sh->r[rank].claimed, sh->r[rank].fail)

/* ---- the logger (shm_log_fn, testutil.h): the shared-memory line --------- */
static void take_log(int rank) {
    rank_report *rr = &sh->r[rank];
    shm_log_take(&rr->shm_lines, &rr->shm_n, &rr->shm_level, rr->shm_text, sizeof rr->shm_text);
}

/* ---- patterns and references ---------------------------------------------- */
/* (mix64, fill_bytes and check_bytes: testutil.h) */
static uint64_t seed_of(uint64_t a, uint64_t b, uint64_t c) { return mix64(a * 1000003u ^ mix64(b * 7919u ^ mix64(c))) | 1; }
/* Small integers as floats: sums of a few are exact in any order. */
static float val_f(int rank, size_t i, int salt) {
    return (float)((int)((i * 5u + (size_t)rank * 131u + (size_t)salt * 17u) & 2047u) - 1024);
}
static int32_t val_i(int rank, size_t i) { return (int32_t)(mix64((uint64_t)rank << 40 ^ i) & 0x7fffffff) - 0x40000000; }

/* ===========================================================================
   The parts.
   =========================================================================== */
static const size_t g_sizes[] = { 0, 1, 4095, 65536, ((size_t)1 << 20) - 1, ((size_t)1 << 20) + 7, (size_t)16 << 20 };
#define NSIZES (sizeof g_sizes / sizeof g_sizes[0])

/* Exchanges `bytes` with every peer, both ways at once; sends first when
   `sends_first`.  Buffers are per peer. */
static int post_exchange(dist_t *w, size_t bytes, int tag, int sends_first, uint8_t **out, uint8_t **in, dist_req_t **reqs, int *nr) {
    int rank = dist_rank(w), n = dist_world_size(w);
    for (int k = 0; k < 2; k++) {
        int sends = (k == 0) == (sends_first != 0);
        for (int j = 0; j < n; j++) {
            if (j == rank) continue;
            if (sends) OK(dist_isend(w, out[j], bytes, DIST_UINT8, j, tag, &reqs[(*nr)++]));
            else OK(dist_irecv(w, in[j], bytes, DIST_UINT8, j, tag, &reqs[(*nr)++]));
        }
    }
    return 0;
}

static int alloc_bufs(int rank, int n, size_t bytes, int tag, uint8_t **out, uint8_t **in) {
    for (int j = 0; j < n; j++) {
        out[j] = in[j] = NULL;
        if (j == rank) continue;
        out[j] = (uint8_t *)malloc(bytes ? bytes : 1);
        in[j] = (uint8_t *)malloc(bytes + 16);
        if (!out[j] || !in[j]) return FAIL("out of memory");
        fill_bytes(out[j], bytes, seed_of((uint64_t)rank, (uint64_t)j, (uint64_t)tag));
        memset(in[j], 0xA5, bytes + 16);
    }
    return 0;
}
static void free_bufs(int n, uint8_t **out, uint8_t **in) {
    for (int j = 0; j < n; j++) { free(out[j]); free(in[j]); out[j] = in[j] = NULL; }
}
static int check_in(int rank, int n, size_t bytes, int tag, uint8_t **in) {
    for (int j = 0; j < n; j++) {
        if (j == rank) continue;
        size_t at = check_bytes(in[j], bytes, seed_of((uint64_t)j, (uint64_t)rank, (uint64_t)tag));
        if (at != SIZE_MAX) return FAIL("%zu bytes (tag %d) from rank %d differ at byte %zu", bytes, tag, j, at);
        for (size_t k = bytes; k < bytes + 16; k++)
            if (in[j][k] != 0xA5) return FAIL("%zu bytes (tag %d) from rank %d: byte %zu past the end was written", bytes, tag, j, k);
    }
    return 0;
}

static int part_sizes(dist_t *w) {
    int rank = dist_rank(w), n = dist_world_size(w);
    uint8_t *out[MAXR], *in[MAXR];
    dist_req_t *reqs[2 * MAXR];
    for (size_t s = 0; s < NSIZES; s++) {
        int nr = 0, tag = 100 + (int)s;
        if (alloc_bufs(rank, n, g_sizes[s], tag, out, in)) return 1;
        /* odd ranks send first in even rounds, even ranks in odd rounds */
        if (post_exchange(w, g_sizes[s], tag, (rank + (int)s) % 2, out, in, reqs, &nr)) return 1;
        dist_result res = dist_wait_all(nr, reqs);
        if (res != DIST_OK) return FAIL("%zu bytes both ways: wait_all -> %s: %s", g_sizes[s], dist_result_name(res), dist_error_message(w));
        if (check_in(rank, n, g_sizes[s], tag, in)) return 1;
        free_bufs(n, out, in);
    }
    return 0;
}

static int part_all_sizes(dist_t *w) {
    int rank = dist_rank(w), n = dist_world_size(w), nr = 0;
    uint8_t *out[NSIZES][MAXR], *in[NSIZES][MAXR];
    dist_req_t *reqs[NSIZES * 2 * MAXR];
    for (size_t s = 0; s < NSIZES; s++)
        if (alloc_bufs(rank, n, g_sizes[s], 200 + (int)s, out[s], in[s])) return 1;
    for (size_t s = 0; s < NSIZES; s++)
        if (post_exchange(w, g_sizes[s], 200 + (int)s, (rank + (int)s) % 2, out[s], in[s], reqs, &nr)) return 1;
    dist_result res = dist_wait_all(nr, reqs);
    if (res != DIST_OK) return FAIL("every size at once: wait_all -> %s: %s", dist_result_name(res), dist_error_message(w));
    for (size_t s = 0; s < NSIZES; s++) {
        if (check_in(rank, n, g_sizes[s], 200 + (int)s, in[s])) return 1;
        free_bufs(n, out[s], in[s]);
    }
    return 0;
}

/* Every rank posts `k` sends of `bytes` to every other rank, waits (in
   shared memory) until all ranks have, then receives in order. */
static int flood(dist_t *w, int k, size_t bytes, int tag, int round) {
    int rank = dist_rank(w), n = dist_world_size(w), nr = 0;
    size_t per = bytes * (size_t)k;
    uint8_t *out = (uint8_t *)malloc(per * (size_t)n), *in = (uint8_t *)malloc(bytes);
    dist_req_t **reqs = (dist_req_t **)malloc(sizeof *reqs * (size_t)k * (size_t)n);
    if (!out || !in || !reqs) return FAIL("out of memory");
    for (int j = 0; j < n; j++)
        for (int m = 0; m < k && j != rank; m++)
            fill_bytes(out + per * (size_t)j + bytes * (size_t)m, bytes, seed_of((uint64_t)rank, (uint64_t)j, (uint64_t)(tag * 100000 + m)));
    for (int m = 0; m < k; m++)
        for (int j = 0; j < n; j++) {
            if (j == rank) continue;
            OK(dist_isend(w, out + per * (size_t)j + bytes * (size_t)m, bytes, DIST_UINT8, j, tag, &reqs[nr++]));
        }
    /* nobody posts a receive before every rank has posted all its sends */
    atomic_fetch_add(&sh->posted, 1);
    int64_t t0 = now_ns();
    while (atomic_load(&sh->posted) < n * round) {
        if (secs_since(t0) > scaled_s(60)) return FAIL("the other ranks never posted their sends");
        sleep_us(200);
    }
    for (int j = 0; j < n; j++) {
        if (j == rank) continue;
        for (int m = 0; m < k; m++) {
            memset(in, 0xA5, bytes);
            dist_result res = dist_recv(w, in, bytes, DIST_UINT8, j, tag);
            if (res != DIST_OK)
                return FAIL("flood: receive %d of %d x %zu bytes from rank %d -> %s: %s", m, k, bytes, j, dist_result_name(res),
                            dist_error_message(w));
            size_t at = check_bytes(in, bytes, seed_of((uint64_t)j, (uint64_t)rank, (uint64_t)(tag * 100000 + m)));
            if (at != SIZE_MAX)
                return FAIL("flood: message %d of %d x %zu bytes from rank %d differs at byte %zu (out of order?)", m, k, bytes, j, at);
        }
    }
    dist_result res = dist_wait_all(nr, reqs);
    if (res != DIST_OK) return FAIL("flood: waiting for the sends -> %s: %s", dist_result_name(res), dist_error_message(w));
    free(out); free(in); free(reqs);
    return 0;
}

static int part_flood(dist_t *w) {
    if (flood(w, 1000, 8, 300, 1)) return 1;
    return flood(w, 48, (size_t)64 << 10, 301, 2);
}

static int part_collectives(dist_t *w) {
    int rank = dist_rank(w), n = dist_world_size(w);
    size_t c = ((size_t)1 << 20) + 3, g = 300001;
    float *f = (float *)malloc(c * sizeof *f);
    int32_t *mine = (int32_t *)malloc(g * sizeof *mine), *all = (int32_t *)malloc(g * (size_t)n * sizeof *all);
    if (!f || !mine || !all) return FAIL("out of memory");
    for (size_t i = 0; i < c; i++) f[i] = val_f(rank, i, 1);
    OK(dist_all_reduce(w, f, c, DIST_FLOAT32, DIST_SUM));
    for (size_t i = 0; i < c; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += val_f(r, i, 1);
        if (memcmp(&f[i], &want, sizeof want) != 0) return FAIL("all_reduce of %zu: [%zu] = %g, reference %g", c, i, f[i], want);
    }
    for (size_t i = 0; i < g; i++) mine[i] = val_i(rank, i);
    memset(all, 0xA5, g * (size_t)n * sizeof *all);
    OK(dist_all_gather(w, mine, all, g, DIST_INT32));
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < g; i++)
            if (all[(size_t)r * g + i] != val_i(r, i))
                return FAIL("all_gather of %zu x int32: block %d [%zu] = %d, reference %d", g, r, i, all[(size_t)r * g + i], val_i(r, i));
    free(f); free(mine); free(all);
    return 0;
}

#define AS_SMALL 100
#define AS_BIG 4
#define AS_BIG_BYTES ((size_t)3 << 19)   /* 1.5 MiB: more than a ring */

static int part_any_source(dist_t *w) {
    int rank = dist_rank(w), n = dist_world_size(w);
    for (int root = 0; root < n; root++) {
        int tag_s = 400 + root, tag_b = 500 + root;
        if (rank == root) {
            int nmsg = AS_SMALL * (n - 1), next[MAXR] = { 0 };
            int32_t (*box)[4] = (int32_t (*)[4])malloc(sizeof *box * (size_t)nmsg);
            dist_req_t **reqs = (dist_req_t **)malloc(sizeof *reqs * (size_t)nmsg);
            uint8_t *big = (uint8_t *)malloc(AS_BIG_BYTES);
            if (!box || !reqs || !big) return FAIL("out of memory");
            memset(box, 0xA5, sizeof *box * (size_t)nmsg);
            for (int i = 0; i < nmsg; i++) OK(dist_irecv(w, box[i], 4, DIST_INT32, DIST_ANY_SOURCE, tag_s, &reqs[i]));
            for (int i = 0; i < nmsg; i++) {
                int done = 0;
                int64_t t0 = now_ns();
                for (;;) {
                    dist_result res = dist_test(reqs[i], &done);
                    if (res != DIST_OK) return FAIL("ANY_SOURCE irecv %d: dist_test -> %s: %s", i, dist_result_name(res), dist_error_message(w));
                    if (done) break;
                    if (secs_since(t0) > scaled_s(60)) return FAIL("ANY_SOURCE irecv %d never completed", i);
                    sleep_us(50);
                }
                int src = dist_req_source(reqs[i]);
                OK(dist_wait(reqs[i]));
                if (src < 0 || src >= n || src == rank) return FAIL("ANY_SOURCE irecv %d: dist_req_source says %d", i, src);
                if (box[i][0] != src) return FAIL("ANY_SOURCE irecv %d: dist_req_source says %d, the payload was sent by %d", i, src, box[i][0]);
                if (box[i][1] != next[src])
                    return FAIL("ANY_SOURCE irecv %d: message %d of rank %d arrived where %d was next (out of order)", i, box[i][1], src, next[src]);
                if (box[i][2] != rank || box[i][3] != (int32_t)(mix64((uint64_t)src * 977 + (uint64_t)next[src]) & 0x7fffffff))
                    return FAIL("ANY_SOURCE irecv %d: payload of message %d from rank %d is wrong", i, next[src], src);
                next[src]++;
            }
            for (int j = 0; j < n; j++)
                if (j != rank && next[j] != AS_SMALL) return FAIL("ANY_SOURCE: %d messages from rank %d, expected %d", next[j], j, AS_SMALL);
            /* large ones, blocking */
            memset(next, 0, sizeof next);
            for (int i = 0; i < AS_BIG * (n - 1); i++) {
                uint64_t hdr[2];
                memset(big, 0xA5, AS_BIG_BYTES);
                OK(dist_recv(w, big, AS_BIG_BYTES, DIST_UINT8, DIST_ANY_SOURCE, tag_b));
                memcpy(hdr, big, sizeof hdr);
                int src = (int)hdr[0];
                if (src < 0 || src >= n || src == rank) return FAIL("ANY_SOURCE 1.5 MiB recv %d: sender field %llu", i, (unsigned long long)hdr[0]);
                if ((int)hdr[1] != next[src])
                    return FAIL("ANY_SOURCE 1.5 MiB: message %llu of rank %d arrived where %d was next", (unsigned long long)hdr[1], src, next[src]);
                size_t at = check_bytes(big + 16, AS_BIG_BYTES - 16, seed_of((uint64_t)src, (uint64_t)rank, (uint64_t)(tag_b * 100 + next[src])));
                if (at != SIZE_MAX) return FAIL("ANY_SOURCE 1.5 MiB message %d from rank %d differs at byte %zu", next[src], src, at + 16);
                next[src]++;
            }
            free(box); free(reqs); free(big);
        } else {
            int32_t (*box)[4] = (int32_t (*)[4])malloc(sizeof *box * AS_SMALL);
            dist_req_t *reqs[AS_SMALL];
            uint8_t *big = (uint8_t *)malloc(AS_BIG_BYTES);
            if (!box || !big) return FAIL("out of memory");
            for (int m = 0; m < AS_SMALL; m++) {
                box[m][0] = rank; box[m][1] = m; box[m][2] = root;
                box[m][3] = (int32_t)(mix64((uint64_t)rank * 977 + (uint64_t)m) & 0x7fffffff);
                OK(dist_isend(w, box[m], 4, DIST_INT32, root, tag_s, &reqs[m]));
            }
            OK(dist_wait_all(AS_SMALL, reqs));
            for (int m = 0; m < AS_BIG; m++) {
                uint64_t hdr[2] = { (uint64_t)rank, (uint64_t)m };
                memcpy(big, hdr, sizeof hdr);
                fill_bytes(big + 16, AS_BIG_BYTES - 16, seed_of((uint64_t)rank, (uint64_t)root, (uint64_t)(tag_b * 100 + m)));
                OK(dist_send(w, big, AS_BIG_BYTES, DIST_UINT8, root, tag_b));
            }
            free(box); free(big);
        }
    }
    return 0;
}

static const struct { const char *name; int (*fn)(dist_t *); } g_parts[] = {
    { "messages of 0, 1, 4095, 65536, 1 MiB-1, 1 MiB+7, 16 MiB bytes, one size at a time, isend/irecv both ways between "
      "every pair, contents checked", part_sizes },
    { "every one of those sizes to every peer at once (one tag per size), contents checked", part_all_sizes },
    { "1000 x 8 B isends to every other rank posted before any receive, then received in order; the same with 48 x 64 KiB "
      "(3 MiB per pair, more than a ring)", part_flood },
    { "all_reduce float32 SUM of 1M+3 elements and all_gather of 300001 int32 against references", part_collectives },
    { "DIST_ANY_SOURCE receives with every other rank sending: 100 small (dist_req_source, per-sender order) and 4 x 1.5 MiB "
      "per sender", part_any_source },
};

static int fn_part(dist_t *w, void *p) {
    int part = *(const int *)p, rank = dist_rank(w);
    rank_alarm((unsigned)(90 * g_scale));
    take_log(rank);
    if (g_parts[part].fn(w)) return 1;
    sh->r[rank].reported = 1;
    return 0;
}

int main(void) {
    int failed = 0;
    test_start();
    UNSET_ENV("DIST_TRANSPORT", "DIST_INIT_METHOD", "DIST_TIMEOUT", "DIST_DEBUG", "DIST_ALGO");
    sh = (shared_t *)mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) { perror("mmap"); return 1; }
    int64_t t_all = now_ns();
    for (int n = 2; n <= MAXR; n++) {
        for (int part = 0; part < (int)(sizeof g_parts / sizeof g_parts[0]); part++) {
            char errs[2400] = "";
            size_t el = 0;
            memset(sh, 0, sizeof *sh);
            dist_config cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.transport = "auto";
            cfg.timeout_ms = (int)scaled_s(60000);
            cfg.logger.func = shm_log_fn;
            cfg.log_level = DIST_LOG_INFO;
            int64_t t0 = now_ns();
            int rc = spawn_job(n, fn_part, &part, &cfg);
            double secs = secs_since(t0);
#define ERR(...) (el < sizeof errs ? (void)(el += (size_t)snprintf(errs + el, sizeof errs - el, "\n     " __VA_ARGS__)) : (void)0)
            if (rc != 0) ERR("dist_spawn returned %d: %s", rc, dist_error_message(NULL));
            for (int r = 0; r < n; r++) {
                const rank_report *rr = &sh->r[r];
                if (rr->fail[0]) ERR("rank %d: %s", r, rr->fail);
                else if (!rr->reported) ERR("rank %d did not finish", r);
                if (rr->shm_lines != 1 || rr->shm_n != n - 1 || rr->shm_level != DIST_LOG_INFO)
                    ERR("rank %d: expected one INFO line \"shared memory with %d rank(s)\", got %d line(s), last \"%s\" "
                        "(shared memory not in use?)", r, n - 1, rr->shm_lines, rr->shm_text);
            }
#undef ERR
            if (errs[0]) {
                failed++;
                printf("FAIL n=%d %s (%.2f s)%s\n", n, g_parts[part].name, secs, errs);
            } else {
                printf("ok   n=%d %s (%.2f s)\n", n, g_parts[part].name, secs);
            }
        }
    }
    munmap(sh, sizeof *sh);
    printf("%d failed, %.1f s\n", failed, secs_since(t_all));
    return failed ? 1 : 0;
}
